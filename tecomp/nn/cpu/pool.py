"""Pooling (``max_pool*`` / ``avg_pool*`` / ``adaptive_*`` / ``global_*``, 1-, 2- and 3-d,
channels first or last): the output's last axis vectorized (the width channels first,
the channels channels last), the window unrolled around it."""
from __future__ import annotations

import math

from ...schedule.schedule import Schedule
from .._schedule_common import _cint, _is_injective, _walk
from .common import _NoTemplate, _find, _op_tags, _template_or_rules
from ...target import CpuModel

#: the pooling stages' tags (the maximum, the window sums of an average)
POOL_TAGS = {"pool_max", "pool_sum"}
#: windows of at most this many elements are unrolled
UNROLL_WINDOW = 64


def _pool_stage(outs):
    """The pooling stage of ``outs`` (an operator of :mod:`tecomp.nn.pooling`) whose
    output is ``outs[0]`` (itself, or the division of its sums), or None."""
    pools = _find(outs, lambda op: bool(POOL_TAGS & _op_tags(op)) and op.reduce_axis)
    if len(pools) != 1 or len(outs) != 1:
        return None
    pool, out = pools[0], outs[0].op
    if out is not pool and not (_is_injective(out) and "pool_avg" in _op_tags(out)):
        return None
    return pool


def pool_into(s: Schedule, outs, info: CpuModel) -> None:
    """Schedule the pooling ``outs`` (see :func:`schedule_pool`) into ``s``; a
    ``_NoTemplate`` where it is not one, or where the rules do better: a window too large
    to unroll over an output row narrower than a vector (global pooling channels first,
    a row reduction the rules vectorize along the data)."""
    pool = _pool_stage(outs)
    if pool is None:
        raise _NoTemplate("not a pooling")
    L = info.lanes
    out = outs[0]
    window = [_cint(iv.dom.extent) for iv in pool.reduce_axis]
    small = None not in window and math.prod(window) <= UNROLL_WINDOW
    last = _cint(out.shape[-1])
    if not small and (last is None or last < L):
        raise _NoTemplate("a large window over a narrow row: the rules' row reduction")
    for op in _walk(outs):
        if _is_injective(op) and op is not out.op and not s[op].is_output:
            s[op].compute_inline()
    st = s[out]
    *outer, x = st.op.axis
    rows = st.fuse(*outer) if len(outer) > 1 else outer[0]
    if last is not None and last <= L:
        xo, xi = None, x
    else:
        xo, xi = st.split(x, factor=L)
    at = [rows] + ([xo] if xo is not None else [])
    if pool is out.op:
        st.reorder(*(at + list(st.op.reduce_axis) + [xi]))
        if small:
            for k in st.op.reduce_axis:
                st.unroll(k)
    st.vectorize(xi)
    if info.threads > 1:
        st.parallel(rows)
    if pool is not out.op:
        ps = s[pool.output(0)]
        ps.compute_at(st, at[-1])
        *pouter, px = ps.op.axis
        pxo, pxi = ps.split(px, factor=L)  # the region is L wide, narrower at the edge
        ps.reorder(*(list(pouter) + [pxo] + list(ps.op.reduce_axis) + [pxi]))
        if small:
            for k in ps.op.reduce_axis:
                ps.unroll(k)
        ps.vectorize(pxi)


def schedule_pool(outs, target: str = "llvm") -> Schedule:
    """Max, average, adaptive and global pooling (1-, 2- and 3-d, channels first or
    last): the padding inlined (a guarded load), tasks are the output's rows (every axis
    but the last, fused), the last axis vectorized and the window unrolled around it (an
    average's sums computed per vector of the row).  A window too large to unroll over a
    row narrower than a vector, and any other DAG, get the auto-scheduler's rules."""
    return _template_or_rules(pool_into, outs, target)
