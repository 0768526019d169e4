"""Padded-tap skipping in 2-d convolutions: each convolution built twice, with its taps on
the zero padding left out of the sum (``tecomp.nn.conv.SKIP_PADDED_TAPS``, the default)
and computed (the flag off), auto-scheduled with trials=0, against PyTorch, interleaved
in one process.

Workloads: ResNeXt-50 32x4d's grouped 3x3 layers (``depthwise_conv.GROUPED``, 32
groups) and ResNet's 3x3 layers (``resnet.LAYERS``), padding 1, float32, NCHW and NHWC
(PyTorch on channels-last tensors for NHWC).  Medians, ms; "skip" is the speed-up of
skipping (full / skip), the PyTorch ratios its time over tecomp's (> 1: tecomp is
faster).  Every result is checked against PyTorch's first.  ``--cpu-time`` (with
``--threads 1``) times each call by the process's CPU time, which leaves out the time
other processes run on a loaded machine.

    python3 benchmarks/conv_taps.py [--threads 2] [--rounds 9] [--batch 1,8]
        [--layout nchw,nhwc] [--only grouped|dense] [--shapes 512x14,1024x7] [--cpu-time]
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
    ap.add_argument("--cpu-time", action="store_true",
                    help="time by the process's CPU time (with --threads 1)")
    args = ap.parse_args()
    if args.cpu_time and args.threads != 1:
        ap.error("--cpu-time times one thread's calls: use it with --threads 1")
    pin_threads(args.threads)
    import numpy as np

    import tecomp as tc
    import tecomp.nn as nn
    import tecomp.nn.conv as conv_mod
    from depthwise_conv import GROUPED, GROUPS
    from resnet import LAYERS

    torch = torch_or_none(args.threads)
    if torch is None:
        raise SystemExit("conv_taps.py compares with PyTorch: pip install torch")
    F = torch.nn.functional
    rng = np.random.default_rng(0)
    work = [("grouped", C, C, H, s, GROUPS) for C, H, s in GROUPED] \
        if "grouped" in args.only else []
    work += [("dense", C, K, H, s, 1) for C, K, H, R, s in LAYERS if R == 3] \
        if "dense" in args.only else []
    if args.shapes:
        keep = set(args.shapes.split(","))
        work = [w for w in work if f"{w[1]}x{w[3]}" in keep]
    fns, rows = {}, []
    for batch in (int(b) for b in args.batch.split(",")):
        for layout in args.layout.split(","):
            nchw = layout == "nchw"
            for kind, C, K, H, s, groups in work:
                x = rng.standard_normal((batch, C, H, H)).astype("float32")
                w = (rng.standard_normal((K, C // groups, 3, 3)) /
                     np.sqrt(9 * C // groups)).astype("float32")
                tx, tw = torch.from_numpy(x), torch.from_numpy(w)
                if not nchw:
                    tx = tx.contiguous(memory_format=torch.channels_last)
                    tw = tw.contiguous(memory_format=torch.channels_last)
                want = F.conv2d(tx, tw, stride=s, padding=1, groups=groups)
                ref = want.numpy() if nchw else want.permute(0, 2, 3, 1).numpy()
                xa = x if nchw else np.ascontiguousarray(x.transpose(0, 2, 3, 1))
                wa = w if nchw else np.ascontiguousarray(w.transpose(2, 3, 1, 0))
                xa, wa = tc.aligned(xa), tc.aligned(wa)
                key = f"{kind} {layout} b{batch} {C}->{K}x{H} s{s}"
                for skip in (True, False):
                    conv_mod.SKIP_PADDED_TAPS = skip
                    X = tc.placeholder(xa.shape, name="x")
                    W = tc.placeholder(wa.shape, name="w")
                    op = nn.conv2d_nchw if nchw else nn.conv2d_nhwc
                    Y = op(X, W, s, 1, groups=groups)
                    f = tc.build(tc.auto_schedule([X, W, Y]), [X, W, Y])
                    out = tc.empty(ref.shape, "float32")
                    f(xa, wa, out)
                    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
                    fns[f"{'skip' if skip else 'full'} {key}"] = \
                        lambda f=f, a=(xa, wa, out): f(*a)
                conv_mod.SKIP_PADDED_TAPS = True
                fns[f"torch {key}"] = (lambda tx=tx, tw=tw, s=s, g=groups:
                                       F.conv2d(tx, tw, stride=s, padding=1, groups=g))
                rows.append(key)
    t = interleaved_turns(fns, args.rounds,
                          clock=time.process_time if args.cpu_time else time.perf_counter)
    print(f"{tc.target.cpu_name()}, {args.threads} threads, {args.rounds} rounds, "
          f"{'CPU time' if args.cpu_time else 'wall clock'}: 3x3 "
          f"convolutions, padding 1, taps on the padding skipped or computed")
    for key in rows:
        sk, fu, th = t[f"skip {key}"], t[f"full {key}"], t[f"torch {key}"]
        print(f"  {key:32s} skip {sk * 1e3:7.3f} ms | full {fu * 1e3:7.3f} ms | torch "
              f"{th * 1e3:7.3f} ms | skip {fu / sk:.2f}x | torch/skip {th / sk:.2f}x "
              f"torch/full {th / fu:.2f}x")


if __name__ == "__main__":
    main()
