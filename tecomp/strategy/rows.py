"""A scheduling idiom the tecomp.nn templates and the auto-scheduler's rules share."""
from __future__ import annotations

from ..ir.expr import Const
from ..schedule.schedule import Schedule, Stage
from ..te.tensor import Tensor


def _cint(e):
    return int(e.value) if isinstance(e, Const) else None


def row_reduce_at(s: Schedule, red: Tensor, st: Stage, axis, lanes: int):
    """Compute the last-axis reduction ``red`` at ``st``'s loop ``axis`` with the
    reduction vectorized: ``rfactor`` into ``4 x lanes`` partial results (four vector
    accumulators, so four independent add/max chains), those folded into one vector
    (a second ``rfactor``), then the lanes reduced in order."""
    rs = s[red]
    k = rs.op.reduce_axis[0]
    L = lanes
    K = _cint(k.dom.extent)
    if K is not None and K < 2 * L:
        rs.compute_at(st, axis)
        return
    F = 4 * L if K is None or K >= 8 * L else L
    _vector_partials_at(s, red, F, st, axis)
    if F > L:
        _vector_partials_at(s, red, L, st, axis)
    s[red].compute_at(st, axis)


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
