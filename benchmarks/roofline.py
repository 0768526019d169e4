"""Where tecomp's kernels stand against this machine's roofs, on one chart.

    python3 benchmarks/roofline.py                      # roofline.png, all cores
    python3 benchmarks/roofline.py --out r.svg --threads 1
    python3 benchmarks/roofline.py --quick              # smaller sizes

Builds a GEMM (``tecomp.strategy.cpu.matmul_packed``), a 3x3 convolution (NCHW), a row
softmax (``softmax_fast``) and an elementwise add, each with its ``tecomp.strategy.cpu``
schedule (the add: vectorized and parallel), measures the FMA peak and the
read-stream bandwidth here (``tc.viz.host_peaks``), times each kernel with
``tc.roofline`` and draws them on one roofline titled with this CPU's name.  The FLOPs
are counted from each kernel's loop IR, the bytes are its arguments once
(docs/visualize.md).  Speed only: this is not a test.  Needs matplotlib.
"""
from __future__ import annotations

import argparse
import os

import numpy as np

import tecomp as tc
from tecomp.strategy import cpu as sc
from tecomp.nn import ops


def kernels(quick: bool):
    """(name, compiled kernel, arrays) for each workload."""
    rng = np.random.default_rng(0)

    def arr(*shape):
        return tc.aligned(rng.standard_normal(shape).astype("float32"))

    n = 512 if quick else 1024
    A = tc.placeholder((n, n), name="A")
    B = tc.placeholder((n, n), name="B")
    C = sc.matmul_packed(A, B)
    yield (f"gemm {n}^3", tc.build(sc.schedule_matmul(C), [A, B, C], name="gemm"),
           [arr(n, n), arr(n, n), tc.empty((n, n), "float32")])

    ch, hw = (64, 28) if quick else (64, 56)
    d = tc.placeholder((1, ch, hw, hw), name="data")
    w = tc.placeholder((ch, ch, 3, 3), name="weight")
    out = ops.conv2d_nchw(d, w, padding=1)
    yield (f"conv3x3 {ch}x{hw}x{hw}", tc.build(sc.schedule_conv2d_nchw(out), [d, w, out],
                                              name="conv"),
           [arr(1, ch, hw, hw), arr(ch, ch, 3, 3), tc.empty((1, ch, hw, hw), "float32")])

    rows = 1024 if quick else 4096
    X = tc.placeholder((rows, 1024), name="X")
    Y = sc.softmax_fast(X)
    yield (f"softmax {rows}x1024", tc.build(sc.schedule_softmax(Y), [X, Y], name="softmax"),
           [arr(rows, 1024), tc.empty((rows, 1024), "float32")])

    m = (1 << 20) if quick else (1 << 24)
    P = tc.placeholder((m,), name="P")
    Q = tc.placeholder((m,), name="Q")
    R = tc.compute((m,), lambda i: P[i] + Q[i], name="add")
    s = tc.create_schedule(R.op)
    o, i = s[R].split(R.op.axis[0], factor=4096)
    s[R].parallel(o)
    io, ii = s[R].split(i, factor=sc.cpu_model().lanes)
    s[R].vectorize(ii)
    yield (f"add {m >> 20}M", tc.build(s, [P, Q, R], name="add"),
           [arr(m), arr(m), tc.empty((m,), "float32")])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="roofline.png", help="the picture (.png, .svg, .pdf)")
    ap.add_argument("--threads", type=int, default=None, help="threads (default: all)")
    ap.add_argument("--quick", action="store_true", help="smaller sizes")
    a = ap.parse_args(argv)
    if a.threads:
        tc.set_num_threads(a.threads)
    threads = tc.get_num_threads()
    gflops, gbps = tc.viz.host_peaks(threads)
    print(f"{tc.target.cpu_name()}, {threads} threads: FMA peak {gflops:.1f} GFLOP/s, "
          f"read stream {gbps:.2f} GB/s ({tc.viz.STREAM_BYTES >> 20} MiB)")
    results = []
    for name, f, arrays in kernels(a.quick):
        r = tc.roofline(f, arrays, name=name)   # the peaks above: kept for the process
        results.append(r)
        print(" ", r)
    title = (f"tecomp kernels on {tc.target.cpu_name()}, {threads} thread"
             f"{'s' if threads != 1 else ''} (FLOPs from the loop IR; bytes: arguments once)")
    tc.viz.plot_rooflines(results, a.out, title=title)
    print("wrote", os.path.abspath(a.out))


if __name__ == "__main__":
    main()
