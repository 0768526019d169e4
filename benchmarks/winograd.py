"""Winograd against the direct 3x3 convolution and PyTorch: each stride-1 3x3 layer
built direct (``algorithm="direct"``) and as Winograd F(2x2,3x3) and F(4x4,3x3) (the
weight transform inside the kernel, as ``algorithm="winograd"`` builds it), auto-scheduled
with trials=0, and PyTorch's ``conv2d``, interleaved in one process.

Workloads: ResNeXt-50 32x4d's grouped stride-1 layers (``depthwise_conv.GROUPED``, 32
groups) and ResNet's stride-1 3x3 layers (``resnet.LAYERS``), padding 1, float32, NCHW
and NHWC (PyTorch on channels-last tensors for NHWC).  Medians, ms; ratios are PyTorch's
time over tecomp's (> 1: tecomp is faster).  Every result is checked against PyTorch's
first (Winograd at 1e-3 relative to the output's largest value; docs/numerics.md).
``--cpu-time`` (with ``--threads 1``) times each call by the process's CPU time.
``--nchw-scalar`` also times NCHW's Winograd kernels with their transforms one channel
at a time (``tecomp.strategy.cpu.winograd.NCHW_VECTORS = False``, the schedule before
session 13), the column ``F<m>s``, against the vector ones in the same process.

    python3 benchmarks/winograd.py [--threads 2] [--rounds 9] [--batch 1,8]
        [--layout nchw,nhwc] [--only grouped|dense] [--shapes 512x14,1024x7]
        [--tiles 2,4] [--cpu-time] [--nchw-scalar]
"""
from __future__ import annotations

import time

from common import conv3x3_args, conv3x3_cases, conv3x3_parser, interleaved_turns, torch_or_none


def main() -> None:
    ap = conv3x3_parser(__doc__)
    ap.add_argument("--tiles", default="2,4", help="Winograd output tiles m to time")
    ap.add_argument("--nchw-scalar", action="store_true",
                    help="also time NCHW's transforms one channel at a time (F<m>s)")
    args = conv3x3_args(ap)
    import numpy as np

    import tecomp as tc
    import tecomp.nn as nn
    import tecomp.strategy.cpu.winograd as cpu_winograd

    torch = torch_or_none(args.threads)
    if torch is None:
        raise SystemExit("winograd.py compares with PyTorch: pip install torch")
    F = torch.nn.functional
    tiles = [int(t) for t in args.tiles.split(",") if t]
    fns, rows, errs = {}, [], {}
    for c in conv3x3_cases(args, torch, stride1=True):
        nchw, layout, groups = c["nchw"], c["layout"], c["groups"]
        xa, wa, ref = c["xa"], c["wa"], c["ref"]
        key = f"{c['kind']} {layout} b{c['batch']} {c['C']}->{c['K']}x{c['H']}"
        scalar = [f"F{m}s" for m in tiles] if nchw and args.nchw_scalar else []
        for algo in ["direct"] + [f"F{m}" for m in tiles] + scalar:
            X = tc.placeholder(xa.shape, name="x")
            W = tc.placeholder(wa.shape, name="w")
            if algo == "direct":
                op = nn.conv2d_nchw if nchw else nn.conv2d_nhwc
                Y = op(X, W, 1, 1, groups=groups)
            else:
                U = nn.winograd_weight_transform(W, layout.upper(), int(algo[1:].rstrip("s")),
                                                 groups)
                Y = nn.conv2d_winograd(X, U, layout.upper(), 1, groups=groups)
            cpu_winograd.NCHW_VECTORS = not algo.endswith("s")
            try:
                f = tc.build(tc.auto_schedule([X, W, Y]), [X, W, Y])
            finally:
                cpu_winograd.NCHW_VECTORS = True
            out = tc.empty(ref.shape, "float32")
            f(xa, wa, out)
            err = float(np.abs(out - ref).max() / np.abs(ref).max())
            assert err < 1e-3, (key, algo, err)
            errs[f"{algo} {key}"] = err
            fns[f"{algo} {key}"] = lambda f=f, a=(xa, wa, out): f(*a)
        fns[f"torch {key}"] = (lambda tx=c["tx"], tw=c["tw"], g=groups:
                               F.conv2d(tx, tw, padding=1, groups=g))
        rows.append(key)
    t = interleaved_turns(fns, args.rounds,
                          clock=time.process_time if args.cpu_time else time.perf_counter)
    print(f"{tc.target.cpu_name()}, {args.threads} threads, {args.rounds} rounds, "
          f"{'CPU time' if args.cpu_time else 'wall clock'}: 3x3 stride-1 convolutions, "
          f"padding 1, direct against Winograd F(m x m, 3 x 3)")
    for key in rows:
        th, di = t[f"torch {key}"], t[f"direct {key}"]
        line = f"  {key:30s} torch {th * 1e3:7.3f} | direct {di * 1e3:7.3f} ({th / di:.2f}x)"
        for algo in [f"F{m}" for m in tiles] + [f"F{m}s" for m in tiles]:
            wg = t.get(f"{algo} {key}")
            if wg is not None:
                line += (f" | {algo} {wg * 1e3:7.3f} ({th / wg:.2f}x, {di / wg:.2f}x direct, "
                         f"err {errs[f'{algo} {key}']:.1e})")
        print(line)


if __name__ == "__main__":
    main()
