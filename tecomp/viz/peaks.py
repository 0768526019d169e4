"""This machine's roofs, measured with tecomp kernels: the FMA peak (GFLOP/s of a kernel
that is nothing but independent FMAs in registers) and the read-stream bandwidth (GB/s
of a kernel that sums a 64 MiB array).

The peak of a CPU is not known from its model: ``lanes x FMA units x 2 x frequency``
needs the FMA units and the clock under load, which no table gives exactly (turbo,
AVX-512 licence, a shared or virtual machine).  So both are measured, the way the
kernels being judged run: compiled by tecomp, on the thread pool, timed as
``time_evaluator`` times.  :func:`host_peaks` measures once per process and thread
count and keeps the result.
"""
from __future__ import annotations

import gc
import threading
import time
from typing import Dict, Optional, Tuple

import numpy as np

from ..build import build
from ..runtime.timing import time_calls
from ..schedule import create_schedule
from ..target import cpu_model
from ..te import compute, max as te_max, placeholder, reduce_axis, sum as te_sum
from ..te.tensor_intrin import tensor_intrins_for
from ..threads import get_num_threads

__all__ = ["fma_peak", "dot_peak", "stream_bandwidth", "host_peaks", "STREAM_BYTES"]

_LOCK = threading.Lock()
_PEAKS: Dict[int, Tuple[float, float]] = {}


def _threads(threads: Optional[int]) -> int:
    return max(1, int(threads if threads is not None else get_num_threads()))


def _best_rate(f, args, work: float, calls: int, bursts: int, pause: float) -> float:
    """``work`` per second of the fastest of ``bursts`` x ``calls`` calls of ``f``."""
    f(*args)   # warm-up: first-call costs, the pages of the arrays
    best = 0.0
    was = gc.isenabled()
    gc.disable()
    try:
        for b in range(bursts):
            t = min(time_calls(f, args, 1, calls))
            best = max(best, work / t)
            if pause and b + 1 < bursts:
                time.sleep(pause)
    finally:
        if was:
            gc.enable()
    return best


def _accumulate(s, Y, parallel: bool, lanes: Optional[int] = None):
    """The schedule both kernels share: the accumulators of ``Y[p, r, v]`` in a local
    block (registers after LLVM's SROA, as in the GEMM micro-kernel: accumulating into
    Y itself would load and store it every step), the reduction outside the unrolled
    rows and the vectorized lanes (in vectors of ``lanes`` where given), one task per
    ``p``."""
    YL = s.cache_write(Y, "local")
    p = s[Y].op.axis[0]
    s[YL].compute_at(s[Y], p)
    yp, yr, yv = s[YL].op.axis
    yk, = s[YL].op.reduce_axis
    if lanes:
        yvo, yv = s[YL].split(yv, factor=lanes)
        s[YL].reorder(yp, yk, yr, yvo, yv)
        s[YL].unroll(yvo)
    else:
        s[YL].reorder(yp, yk, yr, yv)
    s[YL].unroll(yr)
    s[YL].vectorize(yv)
    s[YL].pragma(yk, "fp_contract")
    s[Y].vectorize(s[Y].op.axis[2])
    if parallel:
        s[Y].parallel(p)


def fma_peak(threads: Optional[int] = None, steps: int = 200000, calls: int = 5,
             bursts: int = 3, pause: float = 0.0, lanes: Optional[int] = None) -> float:
    """GFLOP/s of a tecomp kernel that is nothing but independent FMAs in registers, on
    ``threads`` threads (default: the runtime's, ``tc.get_num_threads()``): per thread,
    R x 2 vector accumulators, two input vectors kept in registers and one broadcast
    load per 2 FMAs, as in a GEMM micro-kernel (R = 7 with AVX-512's 32 registers, 6
    with AVX2's 16: 12 accumulators, more than the 8 that two FMA ports of 4 cycles'
    latency need), ``steps`` k steps a call (calls of 50 us measured 65-73 GFLOP/s per
    core on a Zen 3 where 0.5 ms calls of the same loop measure 103).  The best of
    ``bursts`` bursts of ``calls`` calls, ``pause`` seconds apart (a shared machine).
    (The former layout, one input vector per accumulator, fit only 6 accumulators in
    AVX2's registers: 116-131 GFLOP/s on the 2-core Zen 3 where the GEMM ran at 186;
    an older 6 x 4 one needed 48 registers: LLVM kept the inputs on the stack, 83
    against 152 GFLOP/s on one thread on the Xeon.)  ``lanes``: float32 lanes of each
    FMA (default the register's; fewer: each accumulator split into vectors of
    ``lanes``, e.g. 8 on AVX-512 to see whether the core runs a 16-lane FMA at once or
    as two halves: ``benchmarks/machine_probe.py``)."""
    P = _threads(threads)
    info = cpu_model()
    L = info.lanes
    R, V = (7 if info.vregs >= 32 else 6), 2 * L
    sub = lanes if lanes and lanes < L else None
    V = 2 * (sub or L)   # as many accumulators, each of ``lanes``
    X = placeholder((P, V), name="X")
    # the R broadcasts of a k step from one row of a 64-row table in L1 (W streamed from
    # L2/L3 held it to 65-70 GFLOP/s per core on the Zen 3)
    Wt = placeholder((64, R), name="W")
    k = reduce_axis((0, steps), name="k")
    Y = compute((P, R, V), lambda p, r, v: te_sum(X[p, v] * Wt[k % 64, r], axis=k),
                   name="Y")
    s = create_schedule(Y.op)
    _accumulate(s, Y, P > 1, sub)
    f = build(s, [X, Wt, Y], name="fma_peak")
    x = np.ones((P, V), "float32")
    w = np.full((64, R), 1e-6, "float32")
    y = np.empty((P, R, V), "float32")
    return _best_rate(f, (x, w, y), 2.0 * P * R * V * steps, calls, bursts, pause) / 1e9


#: the size of the array :func:`stream_bandwidth` reads by default: 64 MiB, more than
#: the L2 of any core and the L3 of most desktop CPUs, and read in about a tenth of a
#: second (each page of a fresh array is faulted in once: 512 MiB took 3.7 s to fill on
#: a virtual machine).  A server CPU whose L3 holds 64 MiB reads it faster than memory
#: can: pass a larger ``nbytes`` there.
STREAM_BYTES = 64 << 20


def read_kernel(threads: int, per: int):
    """The read-stream kernel of :func:`stream_bandwidth`: ``f(x, y)`` sums each row of
    ``x`` (``threads`` x ``per`` float32, ``per`` a multiple of ``4 * lanes``) into
    ``y`` (``threads`` x 1 x ``4 * lanes``), a task per row, 4 vectors of accumulators
    (``benchmarks/pooling.py`` runs it over a workload's own input, cached or not)."""
    V = 4 * cpu_model().lanes
    X = placeholder((threads, per), name="X")
    k = reduce_axis((0, per // V), name="k")
    Y = compute((threads, 1, V), lambda p, r, v: te_sum(X[p, k * V + v], axis=k), name="Y")
    s = create_schedule(Y.op)
    _accumulate(s, Y, threads > 1)
    return build(s, [X, Y], name="stream")


def move_kernel(threads: int, n_in: int, ratio: int, streamed: bool = False):
    """A kernel that moves the bytes of a pass which reads ``n_in`` float32 once and
    writes one float32 for every ``ratio`` of them (a pooling's input and output), both
    contiguous and nothing else: ``f(x, y)``, ``x`` of ``(m, ratio, lanes)`` and ``y``
    of ``(m, lanes)`` (``m = n_in // (ratio * lanes)``), ``y[j] = max(x[j, k])`` over
    ``k``, tasks over ``j`` on ``threads`` threads.  ``streamed``: the stores bypass the
    cache (``pragma nontemporal``; where ``y`` starts on a cache line).  Its rate, the
    bytes of ``x`` and ``y`` over its time, is the roof of such a pass on this machine
    (``benchmarks/pooling.py``): a line written through the cache is read first, so
    where the output is a quarter of the input a kernel that only reads
    (:func:`read_kernel`) moves its bytes faster than the pass can.  Returns ``(f, x's
    shape, y's shape)``."""
    L = cpu_model().lanes
    m = max(1, n_in // (ratio * L))
    X = placeholder((m, ratio, L), name="X")
    k = reduce_axis((0, ratio), name="k")
    Y = compute((m, L), lambda j, v: te_max(X[j, k, v], axis=k), name="Y")
    s = create_schedule(Y.op)
    j, v = s[Y].op.axis
    s[Y].reorder(j, k, v)
    if ratio <= 16:
        s[Y].unroll(k)
    s[Y].vectorize(v)
    if threads > 1:
        s[Y].parallel(j)
    if streamed:
        s[Y].pragma(j, "nontemporal")
    return build(s, [X, Y], name="move"), (m, ratio, L), (m, L)


def stream_bandwidth(threads: Optional[int] = None, nbytes: Optional[int] = None,
                     calls: int = 3) -> float:
    """GB/s (10^9 bytes per second) at which a tecomp kernel reads an array of
    ``nbytes`` (default :data:`STREAM_BYTES`) on ``threads`` threads: each thread sums its part of the
    array into 4 vectors of accumulators (:func:`read_kernel`).  The best of ``calls``
    calls after one that warms up."""
    P = _threads(threads)
    V = 4 * cpu_model().lanes
    per = max(V, (int(nbytes or STREAM_BYTES) // 4 // P) // V * V)
    f = read_kernel(P, per)
    x = np.ones((P, per), "float32")   # written: pages never written read as the zero page
    y = np.empty((P, 1, V), "float32")
    try:
        return _best_rate(f, (x, y), float(x.nbytes), calls, 1, 0.0) / 1e9
    finally:
        del x


def host_peaks(threads: Optional[int] = None) -> Tuple[float, float]:
    """``(GFLOP/s, GB/s)``: :func:`fma_peak` and :func:`stream_bandwidth` on ``threads``
    threads (default ``tc.get_num_threads()``), measured at the first call for that
    thread count in this process (well under a second: two small kernels built and
    run) and kept."""
    P = _threads(threads)
    with _LOCK:
        got = _PEAKS.get(P)
        if got is None:
            got = _PEAKS[P] = (fma_peak(P), stream_bandwidth(P))
        return got


def dot_peak(threads: Optional[int] = None, steps: int = 100000, calls: int = 5,
             bursts: int = 3, pause: float = 0.0) -> Tuple[float, str]:
    """``(GOP/s, name)``: the rate of the target's widest uint8 x int8 -> int32
    dot-product intrinsic (``x86.vnni_u8s8s32_16x4``: one ``vpdpbusd``; without VNNI the
    AVX2 emulation) in a kernel that is nothing else, laid out as :func:`fma_peak`'s
    (R x 2 vector accumulators in registers, one broadcast of 4 bytes per 2
    intrinsics), a multiply and an add counted as two operations; ``(0.0, "")`` where
    the target has none (of one row of ``C``: AArch64's dot products, not its i8mm
    blocks).  The roof of an int8 GEMM (``benchmarks/int8_gemm.py``)."""
    dots = [t for t in tensor_intrins_for("llvm")
            if "u8s8s32" in t.name and len(t.output.shape) == 1]
    if not dots:
        return 0.0, ""
    intrin = dots[0]
    L = int(intrin.op.axis[0].dom.extent.value)
    P = _threads(threads)
    R = 7 if cpu_model().vregs >= 32 else 6
    A = placeholder((64, R, 4), "uint8", name="A")
    B = placeholder((P, 2 * L, 4), "int8", name="B")
    k = reduce_axis((0, steps), name="k")
    t = reduce_axis((0, 4), name="t")
    Y = compute((P, R, 2 * L), lambda p, r, v: te_sum(
        A[k % 64, r, t].astype("int32") * B[p, v, t].astype("int32"), axis=[k, t]),
        name="Y")
    s = create_schedule(Y.op)
    YL = s.cache_write(Y, "local")
    p = s[Y].op.axis[0]
    s[YL].compute_at(s[Y], p)
    yp, yr, yv = s[YL].op.axis
    yk, yt = s[YL].op.reduce_axis
    yvo, yvi = s[YL].split(yv, factor=L)
    s[YL].reorder(yp, yk, yr, yvo, yvi, yt)
    s[YL].unroll(yr)
    s[YL].unroll(yvo)
    s[YL].tensorize(yvi, intrin)
    s[Y].vectorize(s[Y].op.axis[2])
    if P > 1:
        s[Y].parallel(p)
    f = build(s, [A, B, Y], name="dot_peak")
    a = np.ones((64, R, 4), "uint8")
    b = np.ones((P, 2 * L, 4), "int8")
    y = np.empty((P, R, 2 * L), "int32")
    return (_best_rate(f, (a, b, y), 2.0 * P * R * 2 * L * 4 * steps, calls, bursts, pause)
            / 1e9, intrin.name)
