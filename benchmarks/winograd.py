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

    python3 benchmarks/winograd.py [--threads 2] [--rounds 9] [--batch 1,8]
        [--layout nchw,nhwc] [--only grouped|dense] [--shapes 512x14,1024x7]
        [--tiles 2,4] [--cpu-time]
"""
from __future__ import annotations

import time

from common import base_parser, interleaved_turns, pin_threads, torch_or_none


def main() -> None:
    ap = base_parser(__doc__, rounds=9)
    ap.add_argument("--batch", default="1,8")
    ap.add_argument("--layout", default="nchw,nhwc")
    ap.add_argument("--only", default="grouped,dense")
    ap.add_argument("--shapes", default="", help="only these CxH (e.g. 512x14,1024x7)")
    ap.add_argument("--tiles", default="2,4", help="Winograd output tiles m to time")
    ap.add_argument("--cpu-time", action="store_true",
                    help="time by the process's CPU time (with --threads 1)")
    args = ap.parse_args()
    if args.cpu_time and args.threads != 1:
        ap.error("--cpu-time times one thread's calls: use it with --threads 1")
    pin_threads(args.threads)
    import numpy as np

    import tecomp as tc
    import tecomp.nn as nn
    from depthwise_conv import GROUPED, GROUPS
    from resnet import LAYERS

    torch = torch_or_none(args.threads)
    if torch is None:
        raise SystemExit("winograd.py compares with PyTorch: pip install torch")
    F = torch.nn.functional
    rng = np.random.default_rng(0)
    tiles = [int(t) for t in args.tiles.split(",") if t]
    work = [("grouped", C, C, H, GROUPS) for C, H, s in GROUPED if s == 1] \
        if "grouped" in args.only else []
    work += [("dense", C, K, H, 1) for C, K, H, R, s in LAYERS if R == 3 and s == 1] \
        if "dense" in args.only else []
    if args.shapes:
        keep = set(args.shapes.split(","))
        work = [w for w in work if f"{w[1]}x{w[3]}" in keep]
    fns, rows, errs = {}, [], {}
    for batch in (int(b) for b in args.batch.split(",")):
        for layout in args.layout.split(","):
            nchw = layout == "nchw"
            for kind, C, K, H, groups in work:
                x = rng.standard_normal((batch, C, H, H)).astype("float32")
                w = (rng.standard_normal((K, C // groups, 3, 3)) /
                     np.sqrt(9 * C // groups)).astype("float32")
                tx, tw = torch.from_numpy(x), torch.from_numpy(w)
                if not nchw:
                    tx = tx.contiguous(memory_format=torch.channels_last)
                    tw = tw.contiguous(memory_format=torch.channels_last)
                want = F.conv2d(tx, tw, padding=1, groups=groups)
                ref = want.numpy() if nchw else want.permute(0, 2, 3, 1).numpy()
                xa = x if nchw else np.ascontiguousarray(x.transpose(0, 2, 3, 1))
                wa = w if nchw else np.ascontiguousarray(w.transpose(2, 3, 1, 0))
                xa, wa = tc.aligned(xa), tc.aligned(wa)
                key = f"{kind} {layout} b{batch} {C}->{K}x{H}"
                for algo in ["direct"] + [f"F{m}" for m in tiles]:
                    X = tc.placeholder(xa.shape, name="x")
                    W = tc.placeholder(wa.shape, name="w")
                    if algo == "direct":
                        op = nn.conv2d_nchw if nchw else nn.conv2d_nhwc
                        Y = op(X, W, 1, 1, groups=groups)
                    else:
                        U = nn.winograd_weight_transform(W, layout.upper(), int(algo[1:]),
                                                         groups)
                        Y = nn.conv2d_winograd(X, U, layout.upper(), 1, groups=groups)
                    f = tc.build(tc.auto_schedule([X, W, Y]), [X, W, Y])
                    out = tc.empty(ref.shape, "float32")
                    f(xa, wa, out)
                    err = float(np.abs(out - ref).max() / np.abs(ref).max())
                    assert err < 1e-3, (key, algo, err)
                    errs[f"{algo} {key}"] = err
                    fns[f"{algo} {key}"] = lambda f=f, a=(xa, wa, out): f(*a)
                fns[f"torch {key}"] = (lambda tx=tx, tw=tw, g=groups:
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
        for m in tiles:
            wg = t[f"F{m} {key}"]
            line += (f" | F{m} {wg * 1e3:7.3f} ({th / wg:.2f}x, {di / wg:.2f}x direct, "
                     f"err {errs[f'F{m} {key}']:.1e})")
        print(line)


if __name__ == "__main__":
    main()
