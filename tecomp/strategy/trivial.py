"""The trivial CPU schedule: every stage at its own root, its outer axes fused and run in
parallel, its innermost axis vectorized.

What a user writes first (``parallel`` + ``vectorize``), and the floor the rules'
default should never fall below (``benchmarks/te_corpus.py`` times the two side by
side; ``benchmarks/plain_te.py`` has it as its "trivial" column)::

    s = tc.strategy.trivial.trivial_schedule([A, B, C])
    f = tc.build(s, [A, B, C])
"""
from __future__ import annotations

from typing import Optional, Sequence

from ..errors import TecompError
from ..ir import dtype as _dt
from ..ir.expr import Buffer, Var
from ..lower import lower
from ..schedule.schedule import Schedule, create_schedule
from ..target import cpu_model
from ..te.tensor import ComputeOp, Tensor, compute_ops
from ._common import _cint, _elems
from .nest_cost import nest_cycles
from .rules import outputs_of

#: whether the rules' default is compared with the trivial schedule where the DAG is
#: tiny (:func:`prefer_trivial`); off, the rules' schedule is the default everywhere
COMPARE_TINY = True

#: a DAG is tiny when its tensors (inputs, intermediates, outputs) take at most this
#: share of the L1 data cache together (its time is then what its loops issue, which
#: :mod:`tecomp.strategy.nest_cost` estimates, not what it moves) and its points (each
#: compute's, times its reduction's) are no more than the cycles of a parallel region
#: on every thread (the overheads weigh as much as the work; a GEMM of 50x70x30 in L1,
#: 105000 points, is no such DAG: its register block is what counts)
TINY_L1_SHARE = 1.0


def trivial_schedule(args: Sequence, lanes: Optional[int] = None) -> Schedule:
    """The trivial schedule of the computes in ``args`` (the list you give ``tc.build``):
    every compute stage at its own root; with two axes or more, all but the last fused
    and parallel, the last split by ``lanes`` (the target's float32 lanes by default) and
    vectorized; a stage of one axis split by ``lanes``, the outer part parallel and the
    inner vectorized, or, for a reduction to one axis, that axis parallel; a stage of no
    axis left as it is."""
    L = lanes or cpu_model().lanes
    outs = outputs_of(args)
    s = create_schedule([t.op for t in outs])
    for st in s.stages:
        if type(st.op) is not ComputeOp or st.attach_type != "root":
            continue   # (an extern call, a scan and its body stay as they are)
        axes = list(st.op.axis)
        if len(axes) >= 2:
            st.parallel(st.fuse(*axes[:-1]) if len(axes) > 2 else axes[0])
            st.vectorize(st.split(axes[-1], factor=L)[1])
        elif axes and st.op.reduce_axis:
            st.parallel(axes[0])
        elif axes:
            vo, vi = st.split(axes[0], factor=L)
            st.parallel(vo)
            st.vectorize(vi)
    return s


def tiny(args, info, shapes: Optional[dict] = None) -> bool:
    """Whether the computes of ``args`` are tiny: every extent constant (or given by
    ``shapes``), every tensor they read and write together within :data:`TINY_L1_SHARE`
    of L1, and their points no more than ``info.parallel_region_cycles`` times
    ``info.threads``."""
    outs = outputs_of(args)
    tensors = {id(a): a for a in args if isinstance(a, Tensor)}
    points = 0
    for op in compute_ops([t.op for t in outs]):
        for t in list(op.input_tensors) + [op.output(i) for i in range(op.num_outputs)]:
            tensors.setdefault(id(t), t)
        n = _elems(op.output(0), shapes or {})
        for iv in getattr(op, "reduce_axis", ()):
            e = _cint(iv.dom.extent, shapes or {})
            n = None if n is None or e is None else n * e
        if n is None:
            return False
        points += n
    if points > info.parallel_region_cycles * info.threads:
        return False
    total = 0
    for t in tensors.values():
        n = _elems(t, shapes or {})
        if n is None:
            return False
        total += n * max(1, _dt.bits(t.dtype) // 8)
    return total <= info.l1_bytes * TINY_L1_SHARE


def prefer_trivial(s: Schedule, args, info, shapes: Optional[dict] = None) -> bool:
    """Whether the trivial schedule should replace the rules' schedule ``s`` of ``args``
    by default (the knob ``trivial`` of :func:`tecomp.strategy.apply_rules`): where the
    DAG is :func:`tiny`, both are lowered and scored by the same estimate
    (:func:`tecomp.strategy.nest_cost.nest_cycles`: the instructions their loops issue,
    the parallel regions they start), and the trivial one is taken when it costs less.
    Elsewhere, where the rules made stages of their own (``rfactor``, ``cache_write``,
    ``cache_read``), or where either does not lower or has no estimate, the rules'
    schedule stays (their own models decide: register blocks, vector partial results,
    cache tiles, streams)."""
    if not COMPARE_TINY or not tiny(args, info, shapes):
        return False
    t = trivial_schedule(args, info.lanes)
    if len(s.stages) != len(t.stages):
        # the rules made stages of their own (rfactor's vector partial results, a
        # register block's cache_write): a plan their own models chose, with steps this
        # estimate does not see (an argmax's lanes combined as a tree, not the serial
        # loop the IR shows)
        return False
    try:
        mine = lower(s, list(args), target=info.target)
        triv = lower(t, list(args), target=info.target)
    except TecompError:
        return False
    a = nest_cycles(mine, info, _env(mine, shapes))
    b = nest_cycles(triv, info, _env(triv, shapes))
    return a is not None and b is not None and b < a


def _env(func, shapes: Optional[dict]) -> dict:
    """The values ``shapes`` gives the symbolic extents of ``func``'s buffers."""
    return {e: int(shapes[e.name]) for p in func.params if isinstance(p, Buffer)
            for e in p.shape if isinstance(e, Var) and e.name in (shapes or {})}
