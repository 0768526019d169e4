"""The lowering pipeline: schedule -> loop nest -> an ordered list of passes.

Read it top to bottom: each pass is a pure function ``PrimFunc -> PrimFunc`` in its
own module.  ``TECOMP_DUMP_IR=1`` prints the IR after every pass that changed it.
"""
from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Sequence, Union

from ..errors import LowerError, TecompError
from ..ir.deep import deep_entry
from ..ir.expr import Buffer, Var
from ..ir.functor import collect, free_vars
from ..ir.stmt import ExternCall, PrimFunc
from ..schedule.schedule import Schedule
from ..target import Target, as_target
from ..threads import flag_from_env
from ..te.scatter import ScatterOp
from .schedule_ops import schedule_to_stmt
from . import passes as P
from .ranges import extent_checks

if TYPE_CHECKING:
    from ..ir.expr import Var
    from ..te.tensor import Tensor
from .causal_tiles import causal_tiles_pass
from .hoist_divisions import hoist_divisions_pass
from .hoist_guards import hoist_guards_pass
from .device_split import split_host_device_pass
from .persistent import persistent
from .parallel import parallel_plan_pass
from .vectorize import vector_plan_pass
from .version_tiles import version_tiles_pass

# The passes, in order.  (name, function, the machines it runs for: None = every target,
# "cpu" = Target.is_cpu, "gpu" = Target.is_gpu)
PASSES = [
    ("simplify", P.simplify_pass, None),
    ("causal_tiles", causal_tiles_pass, "gpu"),
    ("prefetch", P.prefetch_pass, None),
    ("loop_partition", P.loop_partition_pass, None),
    ("version_tiles", version_tiles_pass, "cpu"),
    ("simplify_after_partition", P.simplify_pass, None),
    ("hoist_guards", hoist_guards_pass, None),
    ("unroll_explicit", P.unroll_explicit_pass, None),
    ("remove_no_op", P.remove_no_op_pass, None),
    ("verify_thread_extents", P.verify_thread_extents_pass, None),
    ("insert_barriers", P.insert_barriers_pass, None),
    ("double_buffer", P.double_buffer_pass, None),
    ("persistent", persistent, "gpu"),
    ("index_dtype", P.index_dtype_pass, None),
    ("verify", P.verify_pass, None),
]

# The codegen phase: what the code generators used to decide themselves, as passes of
# the target.  tc.lower stops before it (its IR is the target-independent loop nest);
# tc.build runs it (prepare_for_codegen), TECOMP_DUMP_IR=1 shows it, and
# ``tc.lower(..., phase="codegen")`` returns the IR the code generator renders.
CODEGEN_PASSES = [
    ("hoist_divisions", hoist_divisions_pass, "cpu"),
    ("vector_plan", vector_plan_pass, "cpu"),
    ("parallel_plan", parallel_plan_pass, "cpu"),
    ("offset_checks", P.offset_checks_pass, "gpu"),
    ("split_host_device", split_host_device_pass, "gpu"),
]


def _dump(title, func):
    sys.stderr.write(f"// ---- {title} ----\n{func}\n")


def _dump_ir() -> bool:
    """Whether ``TECOMP_DUMP_IR`` asks for the IR after every pass."""
    return flag_from_env("TECOMP_DUMP_IR", False, "whether every lowering pass prints its IR")


@deep_entry(lambda s, *a, **k: ("tc.lower", s))
def lower(s: Schedule, args: Sequence[Union[Tensor, Var]], name: str = "main",
          target: Union[str, Target] = "llvm", stats: dict | None = None, phase: str = "lower",
          *, simple_mode: bool = False) -> PrimFunc:
    """Lower a schedule to a PrimFunc; ``str()`` of it is the loop IR.

    Parameters
    ----------
    s : Schedule
        The schedule (``tc.create_schedule``, ``tc.auto_schedule``).
    args : sequence of Tensor or Var
        The kernel's parameters in call order, as for :func:`tecomp.build`.
    name : str, optional
        The function's name (a Python-style identifier).
    target : str or Target, optional
        Its kind chooses the passes (the GPU ones for ``cuda``/``cuda-emu``); it is kept
        in ``func.attrs["target"]``.
    stats : dict, optional
        Receives ``"lower_seconds"``: the time lowering took.
    phase : {"lower", "codegen"}, optional
        ``"codegen"`` also runs the target's :data:`CODEGEN_PASSES` (vector plans and
        parallel tasks for llvm, the host/device split for the GPU): the IR that the code
        generator renders.
    simple_mode : bool, optional
        TVM's: accepted (True or False) and changes nothing, since
        ``print(tc.lower(s, args))`` prints the loop nest alone already.

    Returns
    -------
    PrimFunc
        The lowered function; ``print`` it to read the loop IR, or pass it to
        :func:`tecomp.build`.

    Raises
    ------
    LowerError
        For something other than a schedule, arguments that are not a list of tensors
        and scalar vars, a bad name or phase, or a stage the target cannot generate.

    Examples
    --------
    >>> import tecomp as tc
    >>> A = tc.placeholder((16,), name="A")
    >>> B = tc.compute((16,), lambda i: A[i] * 2.0, name="B")
    >>> s = tc.create_schedule(B.op)
    >>> print(tc.lower(s, [A, B], name="double"))
    primfn double(A: float32[16], B: float32[16]) {
      for (i, 0, 16) {
        B[i] = A[i]*2f
      }
    }
    """
    if not isinstance(simple_mode, bool):
        raise LowerError(f"tc.lower: simple_mode must be True or False, got "
                         f"{simple_mode!r:.40} (it changes nothing in tecomp: the printed "
                         f"function is the loop nest alone)")
    tgt = as_target(target)
    if not isinstance(s, Schedule):
        raise LowerError(f"tc.lower takes a schedule made by tc.create_schedule, got {s!r}")
    if not isinstance(args, (list, tuple)):
        raise LowerError("tc.lower(s, args): args must be a list of tensors (and scalar vars)")
    if phase not in ("lower", "codegen"):
        raise LowerError(f"tc.lower: phase must be 'lower' or 'codegen', got {phase!r:.40}")
    if not isinstance(name, str) or not name.isidentifier():
        raise LowerError(f"function name {name!r} must be a Python-style identifier")
    t0 = time.perf_counter()
    params, body, ctx = schedule_to_stmt(s, list(args))
    check_bound_vars(name, params, body, LowerError)
    if not tgt.is_cpu:
        scans = [st.name for st in s.stages if hasattr(st.op, "scan_axis")]

        scatters = [st.name for st in s.stages if isinstance(st.op, ScatterOp)]
        if scatters:
            raise LowerError(
                f"the schedule has the scatter-add {scatters[0]} (tc.scatter_add, or the "
                f"gradient of a read through an index tensor such as an embedding's): tecomp "
                f"runs scatters on the CPU (llvm), and target {tgt} cannot generate them yet "
                "(points may add to one element: they need atomics); build for llvm")
        if scans:
            raise LowerError(
                f"the schedule has the scan {scans[0]} (tc.scan): tecomp runs scans on the CPU "
                f"(llvm), and target {tgt} has no loop over steps outside its kernels yet; build "
                "for llvm")
        # what the CUDA C backends cannot generate
        calls = collect(body, lambda n: isinstance(n, ExternCall))
        if calls:
            raise LowerError(
                f"the schedule has an extern stage calling {calls[0].name} (tc.extern): it runs "
                f"on the CPU, and target {tgt} cannot call it; build for llvm, or compute that "
                "stage with tc.compute")
    func = PrimFunc(name, tuple(params), body,
                    {"target": tgt, "param_checks": ctx.param_checks() + extent_checks(params),
                     "written_once": ctx.written_once()})
    dump = _dump_ir()
    if dump:
        _dump("schedule_ops", func)
    func = run_passes(func, tgt, dump)
    if phase == "codegen":
        func = prepare_for_codegen(func, tgt)
    if stats is not None:
        stats["lower_seconds"] = time.perf_counter() - t0
    return func


def check_bound_vars(fname: str, params, body, error) -> None:
    """Every variable ``body`` reads must be bound by a parameter: a scalar parameter, or
    the extent of a dimension of a buffer parameter.  A ``tc.var`` used in a compute, a
    split factor or a condition and left out of the arguments is the user's ``error``
    here, before a pass meets a value it cannot know (an unbound split factor or loop
    bound has no range, which the index-dtype pass would take for a tecomp bug)."""
    known = set()
    for p in params:
        if isinstance(p, Var):
            known.add(p)
        elif isinstance(p, Buffer):
            known.update(e for e in p.shape if isinstance(e, Var))
    for v in free_vars(body):
        if v not in known:
            raise error(
                f"variable `{v.name}` is used in the body of {fname} but is neither a scalar "
                f"parameter nor the extent of a buffer parameter's dimension; add it to the "
                f"parameters (a tc.var read by a compute, a condition, a reduction's range or a "
                f"split factor: tc.build(s, [..., {v.name}]), and pass its value in the call)")


def prepare_for_codegen(func: PrimFunc, target=None) -> PrimFunc:
    """Run the :data:`CODEGEN_PASSES` of ``target`` (default: the one ``func`` was lowered
    for) on a lowered ``func``; a function prepared for that target already comes back
    as it is.  The code generators call it on what they are given."""
    tgt = as_target(target if target is not None else func.attrs.get("target", "llvm"))
    if func.attrs.get("codegen_target") == str(tgt):
        return func
    if "codegen_target" in func.attrs:
        raise LowerError(f"{func.name} was prepared for code generation for target "
                         f"{func.attrs['codegen_target']!r:.60}, not {str(tgt)!r:.60}: build "
                         f"the function tc.lower returns (phase='lower') instead")
    func = PrimFunc(func.name, func.params, func.body,
                    {**func.attrs, "target": tgt, "codegen_target": str(tgt)})
    dump = _dump_ir()
    return run_passes(func, tgt, dump, passes=CODEGEN_PASSES)


def run_passes(func: PrimFunc, target="llvm", dump: bool = False, check=None,
               passes=None) -> PrimFunc:
    """Run ``passes`` (default :data:`PASSES`) on ``func``.  ``check(name, before,
    after)`` is called after each pass that changed the IR (the pass-by-pass checker
    hooks in here)."""
    tgt = as_target(target)
    for pname, fn, machine in (PASSES if passes is None else passes):
        if machine is not None and not (tgt.is_cpu if machine == "cpu" else tgt.is_gpu):
            continue
        new = fn(func)
        if new is not func and new.body is not func.body:
            if dump:
                _dump(pname, new)
            if check is not None:
                check(pname, func, new)
        func = new
    return func
