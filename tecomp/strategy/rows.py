"""A scheduling idiom the tecomp.nn templates and the auto-scheduler's rules share."""
from __future__ import annotations

from typing import Optional

from ..ir.expr import Const, Reduce
from ..lower import vectorize as _vec
from ..schedule.schedule import Schedule, Stage
from ..te.tensor import Tensor
from ._common import _reads_through_inline


def _cint(e):
    return int(e.value) if isinstance(e, Const) else None


def row_reduce_at(s: Schedule, red: Tensor, st: Stage, axis, lanes: int,
                  prefetch_rows: int = 0):
    """Compute the last-axis reduction ``red`` at ``st``'s loop ``axis`` with the
    reduction vectorized: ``rfactor`` into ``4 x lanes`` partial results (four vector
    accumulators, so four independent add/max chains), those folded into one vector
    (a second ``rfactor``), then the lanes reduced in order.  A reduction whose result
    does not depend on the order (bool ``any``/``all``, integer sums, maxima and minima)
    skips the fold: its
    ``4 x lanes`` partials are reduced across the lanes of one vector by the code
    generator (``tecomp.lower.vectorize.horizontal_reduction``).

    ``prefetch_rows`` (0: none): the first partial stage's loop over the row prefetches,
    at each step, the same columns ``prefetch_rows`` iterations of ``axis`` ahead (the
    row loop; clamped into its range), one prefetch per line read
    (:func:`row_prefetch_rows` gives the distance the machine model asks for)."""
    rs = s[red]
    k = rs.op.reduce_axis[0]
    L = lanes
    K = _cint(k.dom.extent)
    if K is not None and K < 2 * L:
        rs.compute_at(st, axis)
        return
    F = 4 * L if K is None or K >= 8 * L else L
    first = _vector_partials_at(s, red, F, st, axis)
    if prefetch_rows > 0:
        for t in _reads_through_inline(s, first.op):
            first.prefetch(t, first.op.reduce_axis[0], prefetch_rows, along=axis)
    if F > L and not (F <= _vec.MAX_WIDEN_LANES and reorderable(rs.op)):
        _vector_partials_at(s, red, L, st, axis)
    s[red].compute_at(st, axis)


#: the most rows ahead :func:`row_prefetch_rows` prefetches (rows of 64 float32 or
#: fewer: 4 KiB ahead)
MAX_PREFETCH_ROWS = 16


def row_prefetch_rows(info, row_bytes: Optional[int], input_bytes: Optional[int],
                      selection: bool = False) -> int:
    """The rows ahead a row reduction over rows of ``row_bytes`` (its input
    ``input_bytes`` in all) prefetches as the machine model ``info`` asks
    (:attr:`~tecomp.target.machine.CpuModel.row_prefetch_bytes`): that many bytes ahead,
    in whole rows, a power of two up to :data:`MAX_PREFETCH_ROWS`; 0 where the model
    asks for none, where a row is that long or longer (its own loop keeps enough loads
    on their way), where the input fits in the L2 caches of the threads, or where a
    size is not known.  ``selection``: an argmax's or argmin's rows, prefetched
    :attr:`~tecomp.target.machine.CpuModel.selection_prefetch_bytes` ahead where the
    model gives that distance."""
    ahead = (selection and info.selection_prefetch_bytes) or info.row_prefetch_bytes
    if not ahead or not row_bytes or input_bytes is None or row_bytes >= ahead or \
            input_bytes <= info.l2_bytes * max(1, info.threads):
        return 0
    rows = min(MAX_PREFETCH_ROWS, ahead // row_bytes)
    return 1 << (rows.bit_length() - 1)


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


def _vector_partials_at(s: Schedule, red: Tensor, factor: int, st: Stage, axis) -> Stage:
    """``rfactor`` the innermost ``factor`` steps of ``red``'s reduction into a stage of
    ``factor`` partial results, computed at ``st``'s loop ``axis``, vectorized; that
    stage."""
    rs = s[red]
    _, ki = rs.split(rs.op.reduce_axis[0], factor=factor)
    rf = s[s.rfactor(red, ki, factor_axis=len(rs.op.axis))]
    rf.compute_at(st, axis)
    rko, = rf.op.reduce_axis
    rki = rf.op.axis[-1]
    rf.reorder(*(list(rf.op.axis[:-1]) + [rko, rki]))
    rf.vectorize(rki)
    return rf


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

