"""Measure on this host what the machine model's measured costs mean
(``tecomp.target.x86.MEASURED``: ``fma_bits``, ``gather_cost``, ``transpose_cost``,
``split_loads_cheap``, ``gemm_load_cost``), with small tecomp kernels, so that an entry
for a new CPU is read from measurements, not guessed.

    python3 benchmarks/machine_probe.py [--rounds 7] [--threads 1]

Each probe is a tecomp kernel built for the host and timed the way the kernels the
schedules weigh are timed; the probes run interleaved, round after round, and each
figure is the median of the rounds (a loaded machine: compare the ratios, which come
from the same rounds):

* ``fma``: GFLOP/s of independent FMAs in registers (``tecomp.viz.fma_peak``) in
  vectors of the register's lanes (16 with AVX-512) and of half as many.  The core runs a
  full-register FMA at once where the full width computes twice the half width's FLOPs
  (``fma_bits`` = the register's bits); as two halves where both compute the same
  (``fma_bits`` = half of them: AMD Zen 4).
* ``gather``: copying ``N x K`` float32 weights (64 x 576, a 3x3 64-channel layer's:
  147 KB, in L2) across ``N`` (``out[k, n] = w[n, k]``), each vector of lanes one strided
  load (a ``vgatherdps`` on AVX-512), in the time of one full-register FMA per element:
  ``gather_cost``.
* ``transpose``: the same copy in ``L x L`` tiles transposed in registers
  (``x86.transpose_f32_LxL``): ``transpose_cost``.
* ``split``: a GEMM/NHWC-conv micro-kernel (``R x 2`` vector accumulators, a step: two
  vector loads, ``R`` broadcasts, ``2 R`` FMAs) reading its vectors from an L1-resident
  array at an aligned address against 16 bytes past it (every 64-byte vector load across
  two cache lines): ``split_loads_cheap`` where the split reads cost under 10 % more.
  The flag decides whether NHWC convolutions read their weights in place, which also
  moves where the weights lie in cache: confirm it with ``benchmarks/model_ab.py --only
  NHWC`` (on Zen 5 the loads were cheap but the copy won; the entry says False).
  (Also shown: the same with one vector load per FMA, where the load ports, not the FMAs,
  set the pace.)
* ``gemm``: a GEMM (``matmul_packed``, ``M x N x K`` = 1536 x 1024 x 2048: the reduction
  in one slice, its operands streamed from L2) with two register blocks that differ in
  loads per FMA: ``MR x 2`` vectors (8 x 32 with AVX-512: 10 loads for 16 FMAs) and
  ``MR x 4`` (6 x 64: 10 loads for 24), ``MR`` as ``gemm_params`` gives it.  Fitting
  ``t = FMAs x (1 + c x loads / FMAs)`` to both gives ``gemm_load_cost`` = ``c``
  (0 where the wider block is not faster by over 1 %: the two-vector default then stays).

The FMA unit for the costs is the one-thread full-register rate: the copies run on one
thread too.  Prints the figures and the ``MEASURED`` entry they give.  Speed only: not a
test.
"""
from __future__ import annotations

import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from common import base_parser, pin_threads  # noqa: E402


def _aligned(shape, offset_bytes=0):
    """A float32 numpy array of ``shape`` starting ``offset_bytes`` past a 64-byte
    boundary."""
    import numpy as np
    n = int(np.prod(shape))
    raw = np.empty(n * 4 + 128 + offset_bytes, np.uint8)
    start = (-raw.ctypes.data) % 64 + offset_bytes
    a = raw[start:start + n * 4].view(np.float32).reshape(shape)
    a[...] = 1.0
    return a


def _copy_kernel(tc, N, K, L, transpose):
    """``out[k, n] = w[n, k]``: vectors of ``L`` along ``n`` read with a strided load, or
    ``L x L`` tiles through the transpose intrinsic."""
    from tecomp.te.tensor_intrin import transpose_intrin
    W = tc.placeholder((N, K), name="w")
    O = tc.compute((K, N), lambda k, n: W[n, k], name="out")
    s = tc.create_schedule(O.op)
    k, n = s[O].op.axis
    if transpose:
        intrin = transpose_intrin("llvm", L, "float32")
        if intrin is None:
            return None
        ko, no, ki, ni = s[O].tile(k, n, L, L)
        s[O].tensorize(ki, intrin)
    else:
        no, ni = s[O].split(n, factor=L)
        s[O].reorder(k, no, ni)
        s[O].vectorize(ni)
    return tc.build(s, [W, O], name="transpose_copy" if transpose else "gather_copy")


def _split_kernel(tc, L, R, rows, steps, shared):
    """FMAs into ``R x 2L`` accumulators reading vectors of ``x`` (``rows`` x ``2 L``, in
    L1) and broadcasts of ``c``: ``y[r, v] = sum_k x[k % rows, v] * c[k % 64, r]`` (with
    ``shared``: a GEMM/NHWC-conv micro-kernel, 2 vector loads per ``2 R`` FMAs), or
    ``x[(k + r) % rows, v]`` (each FMA its own vector load: as load-heavy as FMAs get)."""
    X = tc.placeholder((rows, 2 * L), name="x")
    C = tc.placeholder((64, R), name="c")
    k = tc.reduce_axis((0, steps), name="k")
    Y = tc.compute((R, 2 * L), lambda r, v: tc.sum(
        X[(k if shared else k + r) % rows, v] * C[k % 64, r], axis=k), name="y")
    s = tc.create_schedule(Y.op)
    YL = s.cache_write(Y, "local")
    yr, yv = s[YL].op.axis
    yk, = s[YL].op.reduce_axis
    s[YL].reorder(yk, yr, yv)
    s[YL].unroll(yr)
    s[YL].vectorize(yv)
    s[YL].pragma(yk, "fp_contract")
    s[Y].vectorize(s[Y].op.axis[1])
    return tc.build(s, [X, C, Y], name="split_fma")


def _gemm_blocks(tc, info, M=1536, N=1024, K=2048):
    """``matmul_packed`` ``M x N x K`` with register blocks two and four vectors wide
    (rows from ``gemm_params``): ``{vectors: (function, loads per FMA)}``."""
    from tecomp.strategy import cpu as sc
    from tecomp.strategy.cpu.gemm import _rows
    out = {}
    for nv in (2, 4):
        mr, nr = _rows(M, nv, info), nv * info.lanes
        A = tc.placeholder((M, K), name="A")
        B = tc.placeholder((K, N), name="B")
        C = sc.matmul_packed(A, B, nr=nr)
        f = tc.build(sc.schedule_matmul(C, config={"nr": nr, "mr": mr}), [A, B, C],
                     name=f"gemm_{mr}x{nr}")
        out[nv] = (f, (mr + nv) / (mr * nv))
    return out


def main() -> int:
    ap = base_parser(__doc__, 7)
    args = ap.parse_args()
    threads = args.threads or 1
    pin_threads(threads)
    import numpy as np

    import tecomp as tc
    from tecomp.runtime.timing import time_calls
    from tecomp.viz.peaks import fma_peak
    from workloads import machine

    tc.set_num_threads(1)
    info = tc.Target("llvm").machine
    L = info.lanes
    print(f"# {machine()}; LLVM cpu {tc.Target('llvm').cpu}; {L} float32 lanes, "
          f"{info.vregs} vector registers; copies and split loads on 1 thread")

    N, K = 64, 576
    w = _aligned((N, K))
    out = _aligned((K, N))
    gather = _copy_kernel(tc, N, K, L, False)
    trans = _copy_kernel(tc, N, K, L, True)
    rows, steps, R = 64, 20000, 7
    kernel = _split_kernel(tc, L, R, rows, steps, True)
    worst = _split_kernel(tc, L, R, rows, steps, False)
    x_al, x_sp = _aligned((rows, 2 * L)), _aligned((rows, 2 * L), 16)
    c = np.full((64, R), 1e-6, np.float32)
    y = np.empty((R, 2 * L), np.float32)

    def t(f, a, n=20):
        f(*a)
        return min(time_calls(f, a, 1, n))

    gemms = _gemm_blocks(tc, info)
    ga, gb = _aligned((1536, 2048)), _aligned((2048, 1024))
    gc = _aligned((1536, 1024))
    res = {k: [] for k in ("fma16", "fma8", "fma_t", "gather", "transpose", "aligned",
                           "split", "worst_aligned", "worst_split", "gemm2", "gemm4")}
    for r in range(args.rounds):
        res["fma16"].append(fma_peak(1, lanes=L))
        res["fma8"].append(fma_peak(1, lanes=L // 2))
        if threads > 1:   # (the runtime's pool, on 1 thread for the rest: P threads here)
            tc.set_num_threads(threads)
            res["fma_t"].append(fma_peak(threads, lanes=L))
            tc.set_num_threads(1)
        res["gather"].append(t(gather, (w, out)))
        if trans is not None:
            res["transpose"].append(t(trans, (w, out)))
        res["aligned"].append(t(kernel, (x_al, c, y)))
        res["split"].append(t(kernel, (x_sp, c, y)))
        res["worst_aligned"].append(t(worst, (x_al, c, y)))
        res["worst_split"].append(t(worst, (x_sp, c, y)))
        for nv, (f, _) in gemms.items():
            res[f"gemm{nv}"].append(t(f, (ga, gb, gc), 3))
    med = {k: statistics.median(v) for k, v in res.items() if v}
    t_fma = 2 * L / (med["fma16"] * 1e9)   # seconds per full-register FMA, one thread
    width = med["fma16"] / med["fma8"]
    fma_bits = 32 * L if width > 1.5 else 16 * L
    gather_cost = med["gather"] / (N * K) / t_fma
    print(f"fma, 1 thread: {L} lanes {med['fma16']:.1f} GFLOP/s, {L // 2} lanes "
          f"{med['fma8']:.1f} GFLOP/s (ratio {width:.2f}: fma_bits {fma_bits})")
    if "fma_t" in med:
        print(f"fma, {threads} threads: {L} lanes {med['fma_t']:.1f} GFLOP/s")
    print(f"gather copy {N}x{K}: {med['gather'] * 1e6:.1f} us, "
          f"{gather_cost:.2f} full-register FMAs per element")
    entry = {"fma_bits": fma_bits, "gather_cost": round(gather_cost, 1)}
    if "transpose" in med:
        transpose_cost = med["transpose"] / (N * K) / t_fma
        print(f"transpose copy {N}x{K} ({L}x{L} tiles): {med['transpose'] * 1e6:.1f} us, "
              f"{transpose_cost:.2f} full-register FMAs per element")
        entry["transpose_cost"] = round(transpose_cost, 2)
    ratio = med["split"] / med["aligned"]
    worst = med["worst_split"] / med["worst_aligned"]
    print(f"micro-kernel FMAs reading vectors from L1 ({R} broadcasts, 2 loads, {2 * R} FMAs "
          f"a step): aligned {med['aligned'] * 1e6:.1f} us, 16 bytes past "
          f"{med['split'] * 1e6:.1f} us (ratio {ratio:.3f})")
    print(f"one vector load per FMA: aligned {med['worst_aligned'] * 1e6:.1f} us, 16 bytes "
          f"past {med['worst_split'] * 1e6:.1f} us (ratio {worst:.3f}; not the criterion)")
    entry["split_loads_cheap"] = ratio < 1.10
    r = med["gemm2"] / med["gemm4"]
    a2, a4 = gemms[2][1], gemms[4][1]
    load_cost = max(0.0, (r - 1) / (a2 - r * a4)) if r > 1.01 and a2 > r * a4 else 0.0
    flops = 2.0 * 1536 * 1024 * 2048
    print(f"GEMM 1536x1024x2048, 1 thread: {L * 2}-wide block "
          f"{flops / med['gemm2'] / 1e9:.1f} GFLOP/s ({a2:.3f} loads per FMA), "
          f"{L * 4}-wide {flops / med['gemm4'] / 1e9:.1f} ({a4:.3f}): ratio {r:.3f}, "
          f"gemm_load_cost {load_cost:.2f}")
    if load_cost > 0:
        entry["gemm_load_cost"] = round(load_cost, 2)
    print(f"MEASURED[{tc.Target('llvm').cpu!r}] = {entry}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
