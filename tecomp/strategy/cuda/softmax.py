"""Softmax (``schedule_softmax``; ``log_softmax`` too).

One row per block; the maximum and the sum are cross-thread reductions (every thread
folds its share of the row, then a tree in shared memory).  By default each of the
three passes (max, sum of exp, normalization) reads the row from global memory (the
second and third from the cache) and exp is recomputed: the fastest on an H100 (see
:func:`softmax_config`).  With ``SoftmaxConfig.row_in_shared`` the row is copied to
shared memory once, with ``exp_in_shared`` exp is computed once into shared memory: one
read and one write of global memory."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ...errors import ScheduleError
from ...schedule.schedule import Schedule, Stage, create_schedule
from ...te.tensor import Tensor
from .._common import _ceil, _cint, _has_tag, _outs, _walk
from .common import _bind, _check_target, _pow2_at_least


@dataclass(frozen=True)
class SoftmaxConfig:
    """How a softmax row is computed: ``threads`` per block (one row per block);
    ``row_in_shared``: the input row is copied to shared memory once;
    ``exp_in_shared``: ``exp(x - max)`` is computed once into shared memory (else it is
    recomputed by the sum and the normalization)."""

    threads: int
    row_in_shared: bool
    exp_in_shared: bool


def softmax_config(N: Optional[int], dtype_bytes: int = 4) -> SoftmaxConfig:
    """Threads: a sixteenth of the row rounded up to a power of two, between 32 (a warp)
    and 256; the row is read from global memory by each of the three passes (max, sum,
    normalization; the later passes hit the cache) and exp is recomputed, nothing in
    shared memory; the shared variants stay as configs.  (Measurements:
    benchmarks/DECISIONS.md, "CUDA softmax: a sixteenth of the row in threads, no shared
    memory".)"""
    del dtype_bytes  # (kept for callers; nothing in shared memory depends on it now)
    if N is None:
        return SoftmaxConfig(256, False, False)
    return SoftmaxConfig(max(32, min(256, _pow2_at_least(_ceil(N, 16)))), False, False)


def _softmax_parts(outs):
    """(out, x, max, exp, sum) of a softmax / log_softmax built by ``tecomp.nn.ops``."""
    if len(outs) != 1:
        raise ScheduleError("schedule_softmax takes one output (the softmax)")
    out = outs[0]
    if not (_has_tag(out.op, "softmax", "log_softmax")):
        raise ScheduleError(f"{out.name} is not a softmax or log_softmax from tecomp.nn.ops "
                            f"(tag {out.op.tag!r})")
    by_name = {op.name: op.output(0) for op in _walk(outs)}
    try:
        mx, ex, sm = (by_name[f"{out.name}.{w}"] for w in ("max", "exp", "sum"))
    except KeyError as e:
        raise ScheduleError(f"{out.name}: missing the stage {e.args[0]} (stages .max, .exp, "
                            ".sum as tecomp.nn.ops.softmax makes them)") from None
    x = mx.op.input_tensors[0]
    return out, x, mx, ex, sm


def _cross_thread_rows(s: Schedule, red: Tensor, at: Stage, axis, T: int) -> None:
    """Reduce one row per block: the reduction over the last axis split by ``T`` and its
    inner part bound to ``threadIdx.x`` (each thread folds every T-th element, then a
    tree over the threads in shared memory); the result is one value in shared memory."""
    st = s[red]
    st.set_scope("shared")
    st.compute_at(at, axis)
    _, ki = st.split(st.op.reduce_axis[0], factor=T)
    _bind(st, ki, "threadIdx.x")


def _row_loop(st: Stage, T: int, N: Optional[int]) -> None:
    """The row's last axis split by ``T`` with the inner part bound to threadIdx.x."""
    o, tx = st.split(st.op.axis[-1], factor=T)
    _bind(st, tx, "threadIdx.x")
    if N is not None and _ceil(N, T) <= 8:
        st.unroll(o)


def schedule_softmax(outs, target: str = "cuda",
                     config: Optional[SoftmaxConfig] = None) -> Schedule:
    """The CUDA schedule of ``tecomp.nn.softmax`` / ``log_softmax`` over the last axis:
    one row per block (the leading axes fused and bound to ``blockIdx.x``), the max and
    the sum as cross-thread reductions, see the module docstring and
    :func:`softmax_config` (``config`` overrides it)."""
    _check_target(target)
    outs = _outs(outs)
    out, x, mx, ex, sm = _softmax_parts(outs)
    N = _cint(out.shape[-1])
    cfg = config if config is not None else softmax_config(N)
    if not isinstance(cfg, SoftmaxConfig):
        raise ScheduleError(f"config must be a SoftmaxConfig, got {cfg!r}")
    if N is None and (cfg.row_in_shared or cfg.exp_in_shared):
        raise ScheduleError(f"{out.name}: a row of symbolic length cannot be held in shared "
                            "memory (use row_in_shared=False, exp_in_shared=False)")
    T = cfg.threads
    s = create_schedule([out.op])
    so = s[out]
    lead = list(so.op.axis[:-1])
    row = so.fuse(*lead) if len(lead) > 1 else lead[0] if lead else None
    if row is None:
        raise ScheduleError(f"{out.name} is 1-d; schedule_softmax needs rows (a leading axis)")
    _bind(so, row, "blockIdx.x")
    if cfg.row_in_shared:
        readers = [t for t in (mx, ex, out) if any(r is x for r in t.op.input_tensors)]
        xs = s.cache_read(x, "shared", readers)
        s[xs].compute_at(so, row)
        _row_loop(s[xs], T, N)
    if cfg.exp_in_shared:
        s[ex].set_scope("shared")
        s[ex].compute_at(so, row)
        _row_loop(s[ex], T, N)
    else:
        s[ex].compute_inline()
    rcp = next((op for op in _walk(outs) if op.name == f"{out.name}.rcp"), None)
    if rcp is not None:
        # softmax's 1 / sum: inlined (each thread multiplies by 1 / sum[row], the same
        # rounding as the CPU's per-row reciprocal)
        s[rcp.output(0)].compute_inline()
    _cross_thread_rows(s, mx, so, row, T)
    _cross_thread_rows(s, sm, so, row, T)
    _row_loop(so, T, N)
    return s
