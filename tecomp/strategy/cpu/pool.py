"""Pooling (``max_pool2d`` / ``avg_pool2d``, NCHW): the output row vectorized, the window
unrolled around it."""
from __future__ import annotations

from ...schedule.schedule import Schedule, create_schedule
from .._common import _cint, _is_injective, _outs, _walk
from .common import _auto_rest, _find
from ...target import cpu_model


def schedule_pool(outs, target: str = "llvm") -> Schedule:
    """``max_pool2d`` / ``avg_pool2d`` (NCHW): the padding is inlined (a guarded load),
    tasks are (batch x channel x output row), the output row is vectorized and the
    window unrolled around it."""
    outs = _outs(outs)
    info = cpu_model(target)
    s = create_schedule([t.op for t in outs])
    pools = _find(outs, lambda op: op.reduce_axis and len(op.axis) == 4)
    if not pools:
        return _auto_rest(s, outs, info)
    pool = pools[-1]
    for op in _walk(outs):
        if _is_injective(op) and op is not outs[0].op and not s[op].is_output:
            s[op].compute_inline()
    out = outs[0]
    st = s[out]
    L = info.lanes
    n, c, y, x = st.op.axis
    OW = _cint(out.shape[3])
    rows = st.fuse(n, c, y)
    if OW is not None and OW <= L:
        xo, xi = None, x
    else:
        xo, xi = st.split(x, factor=L)
    if pool is out.op:
        ky, kx = st.op.reduce_axis
        st.reorder(*([rows] + ([xo] if xo is not None else []) + [ky, kx, xi]))
        st.unroll(ky)
        st.unroll(kx)
    st.vectorize(xi)
    if info.threads > 1:
        st.parallel(rows)
    if pool is not out.op:
        ps = s[pool.output(0)]
        ps.compute_at(st, xo if xo is not None else rows)
        pn, pc, py, px = ps.op.axis
        ky, kx = ps.op.reduce_axis
        pxo, pxi = ps.split(px, factor=L)  # the region is L wide, narrower at the edge
        ps.reorder(pn, pc, py, pxo, ky, kx, pxi)
        ps.unroll(ky)
        ps.unroll(kx)
        ps.vectorize(pxi)
    return s
