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
    ko, ki = rs.split(k, factor=F)
    rf = s.rfactor(red, ki, factor_axis=len(rs.op.axis))
    rfs = s[rf]
    rfs.compute_at(st, axis)
    rko, = rfs.op.reduce_axis
    rki = rfs.op.axis[-1]
    rfs.reorder(*(list(rfs.op.axis[:-1]) + [rko, rki]))
    rfs.vectorize(rki)
    if F > L:
        kk = s[red].op.reduce_axis[0]
        _, kki = s[red].split(kk, factor=L)
        rf2 = s.rfactor(red, kki, factor_axis=len(s[red].op.axis))
        r2 = s[rf2]
        r2.compute_at(st, axis)
        r2ko, = r2.op.reduce_axis
        r2ki = r2.op.axis[-1]
        r2.reorder(*(list(r2.op.axis[:-1]) + [r2ko, r2ki]))
        r2.vectorize(r2ki)
    s[red].compute_at(st, axis)
