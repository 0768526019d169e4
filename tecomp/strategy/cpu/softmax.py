"""Softmax: one pass per row, vectorized and parallel, prefetching the next row;
:func:`softmax_fast` is the same with ``fast_exp`` and one reciprocal per row."""
from __future__ import annotations

import math

from ... import te as _te
from ..rows import prefetch_next_row, row_reduce_at
from ...schedule.schedule import Schedule, Stage, create_schedule
from ...te.tensor import Tensor
from .._common import _cint, _outs, _read_by_nest, _streams_past_llc, _walk
from ...nn.softmax import _softmax
from .common import _vector_split
from .elementwise import _schedule_elementwise_stage
from ...target import CpuModel, cpu_model


#: whether a softmax whose input and output take more than half the last-level cache
#: stores its output past the cache (``pragma nontemporal``), as the rules' row kernels
#: do (:data:`tecomp.strategy.rules.STREAM_ROWS`)
STREAM_OUTPUT = True


def softmax_fast(x: Tensor, name: str = "softmax"):
    """Softmax over the last axis with :func:`tecomp.fast_exp` and one reciprocal per
    row: stages ``.max``, ``.exp`` (``fast_exp(x - max)``), ``.sum``, ``.rcp``
    (``1 / sum``) and the output ``exp * rcp``.  Its error is bounded in
    ``docs/numerics.md``; ``tecomp.nn.softmax`` is the same with ``exp`` (on float32
    the same vector code as ``fast_exp``; for float16/bfloat16 ``x`` the exps and their
    sum are float32, as there).  Schedule it with :func:`schedule_softmax`."""
    return _softmax(x, "softmax_fast", name, _te.fast_exp)


def _row_stage_at(s: Schedule, t: Tensor, st: Stage, axis, info: CpuModel):
    """Compute the full-row stage ``t`` at ``st``'s row loop ``axis``, one vector per
    step; return its loop over the vectors (None when the row is one vector)."""
    ts = s[t]
    ts.compute_at(st, axis)
    return _vector_split(ts, ts.op.axis[-1], _cint(t.shape[-1]), info.lanes)


def schedule_softmax(outs, target: str = "llvm") -> Schedule:
    """``tecomp.nn.softmax`` / ``log_softmax`` and :func:`softmax_fast`: one task per
    block of rows, every stage of a row computed at the row (the row stays in L1), each
    reduction over the row vectorized (``rfactor`` into one vector accumulator), and
    the input's next row prefetched during the exp pass (:func:`tecomp.strategy.rows.prefetch_next_row`);
    over more than half the last-level cache the output is stored past the cache."""
    outs = _outs(outs)
    info = cpu_model(target)
    s = create_schedule([t.op for t in outs])
    out = outs[0]
    st = s[out]
    rows = list(st.op.axis[:-1])
    row_exts = [_cint(e) for e in out.shape[:-1]]
    J = _cint(out.shape[-1])
    if rows:
        R = st.fuse(*rows) if len(rows) > 1 else rows[0]
        nrows = math.prod(row_exts) if all(e is not None for e in row_exts) else None
    else:
        R, nrows = None, 1
    jo = _vector_split(st, st.op.axis[-1], J, info.lanes)
    if R is not None and info.threads > 1 and (nrows is None or nrows > 1):
        st.parallel(R)
    st.pragma(st.leaf_iter_vars[0], "fp_contract")
    attach = R if R is not None else (jo if jo is not None else None)
    if attach is None:
        return s
    if R is None:
        # 1-d softmax: no row loop to attach to; stages stay at the root
        for op in _walk(outs):
            if op is out.op:
                continue
            t = op.output(0)
            if op.reduce_axis or not op.axis:
                continue
            _schedule_elementwise_stage(s, t, info)
        return s
    ndim = len(out.shape)
    ops_ = _walk([out])
    vec_loops = {}   # full-row stage computed at R -> its loop over the row's vectors
    for op in ops_:
        if op is out.op:
            continue
        t = op.output(0)
        if op.reduce_axis and len(op.axis) == ndim - 1:
            row_reduce_at(s, t, st, R, info.lanes)
        elif len(op.axis) == ndim - 1:
            s[t].compute_at(st, R)
        elif len(op.axis) == ndim:
            vec_loops[op] = _row_stage_at(s, t, st, R, info)
    prefetch_next_row(s, out, ops_, vec_loops, st, R, J, info.l1_bytes)
    if STREAM_OUTPUT and _streams_past_llc(_read_by_nest(s, st, R), out, info,
                                           limit=info.stream_output_bytes):
        # (4096 x 1024 float32, one thread: 2.07 -> 1.70 ms; benchmarks/DECISIONS.md,
        # "Rules: row kernels stream their output"; past the model's measured
        # stream_output_bytes on a VM: 2.41 -> 1.79 ms there, 1024 x 1024 0.40 either way)
        st.pragma(st.leaf_iter_vars[0], "nontemporal")
    return s
