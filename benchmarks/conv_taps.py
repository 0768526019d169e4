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

from common import conv3x3_args, conv3x3_cases, conv3x3_parser, interleaved_turns, torch_or_none


def main() -> None:
    ap = conv3x3_parser(__doc__)
    args = conv3x3_args(ap)
    import numpy as np

    import tecomp as tc
    import tecomp.nn as nn
    import tecomp.nn.conv as conv_mod

    torch = torch_or_none(args.threads)
    if torch is None:
        raise SystemExit("conv_taps.py compares with PyTorch: pip install torch")
    F = torch.nn.functional
    fns, rows = {}, []
    for c in conv3x3_cases(args, torch):
        nchw, s, groups = c["nchw"], c["s"], c["groups"]
        xa, wa, ref = c["xa"], c["wa"], c["ref"]
        key = f"{c['kind']} {c['layout']} b{c['batch']} {c['C']}->{c['K']}x{c['H']} s{s}"
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
        fns[f"torch {key}"] = (lambda tx=c["tx"], tw=c["tw"], s=s, g=groups:
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
