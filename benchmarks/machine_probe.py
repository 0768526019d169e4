"""Measure on this host what the machine model's measured costs mean
(``tecomp.target.x86.MEASURED``: ``fma_bits``, ``gather_cost``, ``transpose_cost``,
``split_loads_cheap``, ``gemm_load_cost``, ``read_streams``), with small tecomp kernels, so that an entry
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
* ``streams``: a GEMV ``x @ W^T`` over a W of twice the last-level cache (4096 columns)
  with its tile reading 2, 3, 4, 6 and 8 rows of W at a time (the ``skinny.cols`` knob):
  ``read_streams`` is the most rows whose time is within 3 % of the best (Zen 5: 4;
  benchmarks/history/2026-11-30.md, "skinny GEMMs").

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


def main() -> int:
    ap = base_parser(__doc__, 7)
    args = ap.parse_args()
    threads = args.threads or 1
    pin_threads(threads)
    import numpy as np

    import tecomp as tc
    from tecomp.runtime.timing import time_calls
    from tecomp.calibration import (aligned as _aligned, copy_kernel, costs_from,
                                    gemm_blocks, split_kernel)
    from tecomp.strategy import Knobs, apply_rules
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
    gather = copy_kernel(N, K, L, False)
    trans = copy_kernel(N, K, L, True)
    rows, steps, R = 64, 20000, 7
    kernel = split_kernel(L, R, rows, steps, True)
    worst = split_kernel(L, R, rows, steps, False)
    x_al, x_sp = _aligned((rows, 2 * L)), _aligned((rows, 2 * L), 16)
    c = np.full((64, R), 1e-6, np.float32)
    y = np.empty((R, 2 * L), np.float32)

    def t(f, a, n=20):
        f(*a)
        return min(time_calls(f, a, 1, n))

    gemms = gemm_blocks(info)
    ga, gb = _aligned((1536, 2048)), _aligned((2048, 1024))
    gc = _aligned((1536, 1024))
    # the GEMV of the streams probe: W twice the last-level cache, 4096 columns
    SK = 4096
    SN = max(1024, 2 * info.l3_bytes // (4 * SK))
    sx, sw, sy = _aligned((1, SK)), _aligned((SN, SK)), _aligned((1, SN))
    SX, SW = tc.placeholder((1, SK), name="x"), tc.placeholder((SN, SK), name="W")
    sk = tc.reduce_axis((0, SK), name="k")
    SY = tc.compute((1, SN), lambda i, j: tc.sum(SX[i, sk] * SW[j, sk], axis=sk), name="y")
    NBS = (2, 3, 4, 6, 8)
    gemvs = {nb: tc.build(apply_rules([SX, SW, SY], Knobs({"skinny.cols": nb}), info),
                          [SX, SW, SY]) for nb in NBS}
    res = {k: [] for k in ("fma16", "fma8", "fma_t", "gather", "transpose", "aligned",
                           "split", "worst_aligned", "worst_split", "gemm2", "gemm4",
                           *(f"gemv{nb}" for nb in NBS))}
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
        for nb, f in gemvs.items():
            res[f"gemv{nb}"].append(t(f, (sx, sw, sy), 5))
    med = {k: statistics.median(v) for k, v in res.items() if v}
    a2, a4 = gemms[2][1], gemms[4][1]
    entry = costs_from(med, L, N, K, (a2, a4))
    print(f"fma, 1 thread: {L} lanes {med['fma16']:.1f} GFLOP/s, {L // 2} lanes "
          f"{med['fma8']:.1f} GFLOP/s (ratio {med['fma16'] / med['fma8']:.2f}: fma_bits "
          f"{entry['fma_bits']})")
    if "fma_t" in med:
        print(f"fma, {threads} threads: {L} lanes {med['fma_t']:.1f} GFLOP/s")
    print(f"gather copy {N}x{K}: {med['gather'] * 1e6:.1f} us, "
          f"{entry['gather_cost']:.2f} full-register FMAs per element")
    if "transpose" in med:
        print(f"transpose copy {N}x{K} ({L}x{L} tiles): {med['transpose'] * 1e6:.1f} us, "
              f"{entry['transpose_cost']:.2f} full-register FMAs per element")
    print(f"micro-kernel FMAs reading vectors from L1 ({R} broadcasts, 2 loads, {2 * R} FMAs "
          f"a step): aligned {med['aligned'] * 1e6:.1f} us, 16 bytes past "
          f"{med['split'] * 1e6:.1f} us (ratio {med['split'] / med['aligned']:.3f})")
    print(f"one vector load per FMA: aligned {med['worst_aligned'] * 1e6:.1f} us, 16 bytes "
          f"past {med['worst_split'] * 1e6:.1f} us (ratio "
          f"{med['worst_split'] / med['worst_aligned']:.3f}; not the criterion)")
    flops = 2.0 * 1536 * 1024 * 2048
    print(f"GEMM 1536x1024x2048, 1 thread: {L * 2}-wide block "
          f"{flops / med['gemm2'] / 1e9:.1f} GFLOP/s ({a2:.3f} loads per FMA), "
          f"{L * 4}-wide {flops / med['gemm4'] / 1e9:.1f} ({a4:.3f}): ratio "
          f"{med['gemm2'] / med['gemm4']:.3f}, gemm_load_cost "
          f"{entry.get('gemm_load_cost', 0.0):.2f}")
    best = min(med[f"gemv{nb}"] for nb in NBS)
    entry["read_streams"] = max(nb for nb in NBS if med[f"gemv{nb}"] <= 1.03 * best)
    print(f"GEMV 1 x {SK} @ ({SN} x {SK})^T, 1 thread, rows of W at a time: " + ", ".join(
        f"{nb} {sw.nbytes / med[f'gemv{nb}'] / 1e9:.1f} GB/s" for nb in NBS)
        + f": read_streams {entry['read_streams']}")
    print(f"MEASURED[{tc.Target('llvm').cpu!r}] = {entry}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
