"""Checks of what a user gives the auto-scheduler (shared by tc.auto_schedule and the
configs)."""
from __future__ import annotations

from ..errors import AutoScheduleError, TargetError
from ..ir.expr import Var
from ..ir.functor import collect
from ..target import as_target
from ..te.tensor import Tensor, compute_ops


def check_args(args):
    if isinstance(args, Tensor) or not isinstance(args, (list, tuple)):
        raise AutoScheduleError(
            f"auto_schedule: args must be the list you pass to tc.build (e.g. [A, B, C]), "
            f"got {type(args).__name__}")
    for n, a in enumerate(args):
        if not isinstance(a, (Tensor, Var)):
            raise AutoScheduleError(
                f"auto_schedule: args[{n}] is a {type(a).__name__}, not a tensor or a "
                "tc.var; pass the placeholders and computes you give tc.build")
    return list(args)


def check_shapes(args, shapes):
    if shapes is None:
        shapes = {}
    if not isinstance(shapes, dict):
        raise AutoScheduleError(f"auto_schedule: shapes must be a dict of symbolic extent "
                                f"names to ints (e.g. {{'n': 1024}}), got {shapes!r:.60}")
    names = set()
    for t in args:
        if isinstance(t, Tensor):
            for op in [t.op] + [x.op for x in t.op.input_tensors] + compute_ops([t.op]):
                for e in op.shape:
                    names |= {v.name for v in collect(e, lambda n: isinstance(n, Var))}
    for k, v in shapes.items():
        if not isinstance(k, str) or k not in names:
            raise AutoScheduleError(
                f"auto_schedule: shapes names {k!r:.60}, which is no symbolic extent of these "
                f"tensors ({', '.join(sorted(names)) or 'they have none'})")
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise AutoScheduleError(f"auto_schedule: shapes[{k!r}] must be a positive int, "
                                    f"got {v!r:.60}")
    return dict(shapes)


def cpu_target(target, who: str):
    """``target`` as a :class:`~tecomp.target.Target` of kind llvm, or AutoScheduleError."""
    try:
        target = as_target(target)
    except TargetError as exc:
        raise AutoScheduleError(f"{who}: {exc}") from None
    if not target.is_cpu:
        raise AutoScheduleError(
            f"{who}: target={str(target)!r:.60} is not supported yet; this part of the "
            "auto-scheduler is for CPU schedules (target='llvm', or 'llvm -mcpu=...'); for "
            "the GPU, tc.auto_schedule(args, target='cuda') gives the rule-based schedule")
    return target
