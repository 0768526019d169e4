"""A scheduling idiom the tecomp.nn templates and the auto-scheduler's rules share."""
from __future__ import annotations

from ..ir.expr import Const, Reduce
from ..lower import vectorize as _vec
from ..schedule.schedule import Schedule, Stage
from ..te.tensor import Tensor
from ._common import _reads_through_inline


def _cint(e):
    return int(e.value) if isinstance(e, Const) else None


def row_reduce_at(s: Schedule, red: Tensor, st: Stage, axis, lanes: int):
    """Compute the last-axis reduction ``red`` at ``st``'s loop ``axis`` with the
    reduction vectorized: ``rfactor`` into ``4 x lanes`` partial results (four vector
    accumulators, so four independent add/max chains), those folded into one vector
    (a second ``rfactor``), then the lanes reduced in order.  A reduction whose result
    does not depend on the order (bool ``any``/``all``, integer sums, maxima and minima)
    skips the fold: its
    ``4 x lanes`` partials are reduced across the lanes of one vector by the code
    generator (``tecomp.lower.vectorize.horizontal_reduction``)."""
    rs = s[red]
    k = rs.op.reduce_axis[0]
    L = lanes
    K = _cint(k.dom.extent)
    if K is not None and K < 2 * L:
        rs.compute_at(st, axis)
        return
    F = 4 * L if K is None or K >= 8 * L else L
    _vector_partials_at(s, red, F, st, axis)
    if F > L and not (F <= _vec.MAX_WIDEN_LANES and reorderable(rs.op)):
        _vector_partials_at(s, red, L, st, axis)
    s[red].compute_at(st, axis)


def reorderable(op) -> bool:
    """Whether every body of ``op`` is a reduction exact in any order (bool ``any`` and
    ``all``, integer sums, integer and float maxima and minima), which the code generator
    may reduce across vector lanes; False with
    ``tecomp.lower.vectorize.HORIZONTAL_REDUCTIONS`` off."""
    if not _vec.HORIZONTAL_REDUCTIONS:
        return False
    return all(isinstance(b, Reduce) and
               _vec.exact_in_any_order(type(b.combiner.result), b.dtype) is not None
               for b in op.bodies)


def _vector_partials_at(s: Schedule, red: Tensor, factor: int, st: Stage, axis) -> None:
    """``rfactor`` the innermost ``factor`` steps of ``red``'s reduction into a stage of
    ``factor`` partial results, computed at ``st``'s loop ``axis``, vectorized."""
    rs = s[red]
    _, ki = rs.split(rs.op.reduce_axis[0], factor=factor)
    rf = s[s.rfactor(red, ki, factor_axis=len(rs.op.axis))]
    rf.compute_at(st, axis)
    rko, = rf.op.reduce_axis
    rki = rf.op.axis[-1]
    rf.reorder(*(list(rf.op.axis[:-1]) + [rko, rki]))
    rf.vectorize(rki)


def prefetch_next_row(s: Schedule, out: Tensor, ops_, vec_loops, st: Stage, R, J,
                      l1_bytes: int):
    """Prefetch the next row of each input of a row-wise kernel (softmax), spread over
    the row: in the vector loop of a full-row stage computed at the row that reads the
    input (softmax's exp pass, which has the most arithmetic per element; ``vec_loops`` maps
    each full-row stage at ``R`` to that loop, None for a row of one vector), each step
    prefetches the same columns of the next row (``prefetch(x, j, 1, along=R)``).  A
    row of up to 4 KiB starts a new page, where the hardware prefetcher stops.  Spread
    over the exp pass, it measured best, ahead of the whole next row prefetched at the
    start of each row (the prefetches queue up) and of no prefetch.  Without such a loop
    (rows of one vector), the whole next row at the start of the row, for rows of at
    most L1 / 4 (more would evict the current row).
    The softmax template and the auto-scheduler's rows (a softmax or a norm written as
    several computes) both use it (measurements: benchmarks/DECISIONS.md, "Softmax: next
    row prefetched")"""
    ndim = len(out.shape)
    inside = set(id(op) for op in ops_)
    ins = []
    reads = {id(op): _reads_through_inline(s, op) for op in ops_}
    for op in ops_:
        for t in reads[id(op)]:
            if id(t.op) not in inside and len(t.shape) == ndim and t not in ins:
                ins.append(t)
    for t in ins:
        reader = next((o for o in reversed(ops_) if o in vec_loops
                       and vec_loops[o] is not None and t in reads[id(o)]), None)
        if reader is not None:
            s[reader.output(0)].prefetch(t, vec_loops[reader], 1, along=R)
        elif J is not None and J * 4 <= l1_bytes // 4:
            st.prefetch(t, R, 1)

