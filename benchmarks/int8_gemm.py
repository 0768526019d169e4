"""int8 GEMM (uint8 x int8 -> int32) written in plain TE and auto-scheduled: tensorized with
the machine's dot-product intrinsic against the same GEMM without it, tecomp's float32
GEMM, and PyTorch's fbgemm quantized linear and float32 matmul; interleaved, medians.

    python3 benchmarks/int8_gemm.py [--threads 2] [--rounds 15] [--size 1024] [--cpu-time]

tecomp's int8 figures include packing B into the intrinsic's panels on every call (the
auto-scheduler's schedule); fbgemm's weights are prepacked once, and its output is
requantized to uint8.  GOP/s count a multiply and an add as two operations.  The roof:
the rate of the target's dot-product intrinsic alone (``tecomp.viz.peaks.dot_peak``,
the best of a probe before and one after the rounds).
"""
from __future__ import annotations

import os
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from common import base_parser, pin_threads  # noqa: E402


def main() -> int:
    ap = base_parser(__doc__, 15)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--cpu-time", action="store_true",
                    help="time CPU time (process_time) instead of wall time: on a loaded "
                         "machine, with --threads 1")
    args = ap.parse_args()
    pin_threads(args.threads)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import numpy as np

    import tecomp as tc
    from tecomp.strategy import Knobs, apply_rules
    from tecomp.strategy.cpu import cpu_model
    from run import interleaved, uptime
    from workloads import machine

    tc.set_num_threads(args.threads)
    n = args.size
    try:
        import torch
        torch.set_num_threads(args.threads)
        warnings.filterwarnings("ignore", message=".*deprecated")
        tv = f"torch {torch.__version__}"
    except ImportError:
        torch, tv = None, "no torch"
    print(f"# {machine()}; {args.threads} threads; {tv}; {uptime()}")
    intrins = [t.name for t in tc.tensor_intrins_for("llvm")]
    print(f"# the target's u8 x s8 intrinsics: {', '.join(intrins) or 'none'}")

    def gemm(dx, dw, dout):
        A = tc.placeholder((n, n), dx, name="A")
        B = tc.placeholder((n, n), dw, name="B")
        k = tc.reduce_axis((0, n), name="k")
        C = tc.compute((n, n), lambda i, j: tc.sum(A[i, k].astype(dout) * B[k, j].astype(dout),
                                                   axis=k), name="C")
        return [A, B, C]

    q = gemm("uint8", "int8", "int32")
    f32 = gemm("float32", "float32", "float32")
    fns = {}
    rng = np.random.default_rng(0)
    a = rng.integers(0, 256, (n, n)).astype(np.uint8)
    b = rng.integers(-128, 128, (n, n)).astype(np.int8)
    c = np.zeros((n, n), np.int32)
    tz = tc.build(tc.auto_schedule(q), q)
    tz(a, b, c)
    assert np.array_equal(c, a.astype(np.int64) @ b.astype(np.int64)), "tensorized GEMM is wrong"
    fns["tecomp int8 tensorized"] = lambda: tz(a, b, c)
    # the former schedule (the sums in C itself, not in a local block): an A/B of the rule
    inc = tc.build(apply_rules(q, Knobs({"tensorize.C.local": False}), cpu_model("llvm")), q)
    c3 = np.zeros_like(c)
    inc(a, b, c3)
    assert np.array_equal(c3, c), "tensorized GEMM (sums in C) is wrong"
    fns["tecomp int8 tensorized, sums in C"] = lambda: inc(a, b, c3)
    # the rule's other loop order and W's other packing (its knobs): the blocks row
    # block by row block (or column panel by column panel, whichever the default is
    # not: tensorize.cols_outer_default), W in blocks of one vector instead of panels,
    # and without the prefetches of C's next block (and of X's, columns outer)
    from tecomp.strategy.tensorize import cols_outer_default
    other = not cols_outer_default(cpu_model("llvm"), n, n, 64)
    for label, knobs in ((f"{'cols' if other else 'rows'} outer",
                          {"tensorize.C.cols_outer": other}),
                         ("W in vector blocks", {"tensorize.C.panels": False}),
                         ("no prefetches", {"tensorize.C.prefetch_c": False,
                                            "tensorize.C.prefetch_x": False})):
        f_alt = tc.build(apply_rules(q, Knobs(knobs), cpu_model("llvm")), q)
        c_alt = np.zeros_like(c)
        f_alt(a, b, c_alt)
        assert np.array_equal(c_alt, c), f"tensorized GEMM ({label}) is wrong"
        fns[f"tecomp int8 tensorized, {label}"] = lambda f_alt=f_alt, c_alt=c_alt: f_alt(
            a, b, c_alt)
    plain = tc.build(apply_rules(q, Knobs({"tensorize.C": "none"}), cpu_model("llvm")), q)
    c2 = np.zeros_like(c)
    fns["tecomp int8 plain"] = lambda: plain(a, b, c2)
    af, bf = a.astype(np.float32), b.astype(np.float32)
    cf = np.zeros((n, n), np.float32)
    ff = tc.build(tc.auto_schedule(f32), f32)
    fns["tecomp float32"] = lambda: ff(af, bf, cf)
    if torch is not None:
        xq = torch.quantize_per_tensor(torch.from_numpy(a.astype(np.float32) * 0.05), 0.05, 0,
                                       torch.quint8)
        wq = torch.quantize_per_tensor(torch.from_numpy(b.T.astype(np.float32).copy() * 0.01),
                                       0.01, 0, torch.qint8)
        packed = torch.ops.quantized.linear_prepack(wq, None)
        fns["torch fbgemm quantized linear"] = lambda: torch.ops.quantized.linear(
            xq, packed, 50.0, 128)
        at, bt = torch.from_numpy(af), torch.from_numpy(bf)
        fns["torch float32 matmul"] = lambda: torch.matmul(at, bt)
    from tecomp.viz.peaks import dot_peak
    peak, dot = dot_peak(args.threads)     # the best of before and after the rounds
    t = interleaved(fns, args.rounds, clock=time.process_time if args.cpu_time else
                    time.perf_counter)
    peak = max(peak, dot_peak(args.threads)[0])
    ops = 2.0 * n ** 3
    print(f"\n## GEMM {n}^3 (ms and GOP/s, medians{', CPU time' if args.cpu_time else ''})")
    for k, v in t.items():
        print(f"{k:32s} {v * 1e3:9.3f} ms {ops / v / 1e9:9.1f} GOP/s")
    base = t["tecomp int8 tensorized"]
    print(f"tensorized / plain int8: {t['tecomp int8 plain'] / base:.2f}x; "
          f"/ tecomp float32: {t['tecomp float32'] / base:.2f}x (target >= 3x with VNNI)")
    if torch is not None:
        print(f"tensorized / fbgemm: {t['torch fbgemm quantized linear'] / base:.2f}x (target >= "
              f"1.0x); / torch float32: {t['torch float32 matmul'] / base:.2f}x")
    if peak:
        print(f"dot-product peak ({dot}, {args.threads} threads, best of before and after "
              f"the rounds): {peak:.1f} GOP/s; tensorized {ops / base / 1e9 / peak:.1%}"
              + (f", fbgemm {ops / t['torch fbgemm quantized linear'] / 1e9 / peak:.1%}"
                 if torch is not None else "") + " of it (target >= 85%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
