"""Convolution gradients: tecomp's (``tc.gradient`` + ``schedule_backward``) against
PyTorch's ``convolution_backward``, interleaved in one process.

    python3 benchmarks/conv_grad.py [--threads 2] [--batch 4] [--layout nchw,nhwc]
                                    [--stride 1,2] [--shape 64x56]

The 64-channel 56x56 3x3 convolution of the main table (padding 1; ``--shape 256x14``: the
other one), at stride 1 and 2;
the data and the weight gradient are built and timed separately (medians, ms, and
GFLOP/s counting 2*N*K*C*OH*OW*9 each).  Speed only: the tests check the values.
"""
from __future__ import annotations

import os
import sys


def main(argv=None) -> int:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from common import parser, pin_threads, torch_or_none

    ap = parser(__doc__, rounds=7)
    ap.add_argument("--stride", default="1,2")
    ap.add_argument("--shape", default="64x56", help="channels x size, e.g. 256x14")
    args = ap.parse_args(argv)
    pin_threads(args.threads)   # before numpy and torch load
    from run import interleaved

    import numpy as np
    import tecomp as tc
    from tecomp import nn
    from tecomp.autodiff import gradient
    from tecomp.strategy import schedule_backward
    torch = torch_or_none(args.threads)
    if torch is None:
        return 1
    C, H = (int(v) for v in args.shape.split("x"))
    N, K = args.batch, C
    rng = np.random.default_rng(0)
    for layout, S in ((a, int(b)) for b in args.stride.split(",")
                      for a in args.layout.split(",")):
        OH = (H + 2 - 3) // S + 1
        flop = 2.0 * N * K * C * OH * OH * 9
        nchw = layout == "nchw"
        xs, ws, ys = ((N, C, H, H), (K, C, 3, 3), (N, K, OH, OH)) if nchw else \
            ((N, H, H, C), (3, 3, C, K), (N, OH, OH, K))
        X, W = tc.placeholder(xs, name="x"), tc.placeholder(ws, name="w")
        Y = (nn.conv2d_nchw if nchw else nn.conv2d_nhwc)(X, W, S, 1)
        D = tc.placeholder(Y.shape, name="dy")
        gX, gW = gradient(Y, [X, W], D)
        fx = tc.build(schedule_backward([gX]), [X, W, D, gX], name="dgrad")
        fw = tc.build(schedule_backward([gW]), [X, W, D, gW], name="wgrad")
        x, w, d = (rng.random(s, dtype=np.float32) for s in (xs, ws, ys))
        gx, gw = np.empty_like(x), np.empty_like(w)
        if nchw:
            xt, wt, dt = torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(d)
        else:
            xt = torch.from_numpy(x).permute(0, 3, 1, 2)
            wt = torch.from_numpy(w).permute(3, 2, 0, 1).contiguous()
            dt = torch.from_numpy(d).permute(0, 3, 1, 2)

        def tback(mask):
            return torch.ops.aten.convolution_backward(
                dt, xt, wt, None, [S, S], [1, 1], [1, 1], False, [0, 0], 1, mask)

        fx(x, w, d, gx)
        fw(x, w, d, gw)
        rx, rw, _ = tback([True, True, False])
        rx, rw = rx.numpy(), rw.numpy()
        if not nchw:
            rx, rw = rx.transpose(0, 2, 3, 1), rw.transpose(2, 3, 1, 0)
        for name, a, b in (("data", gx, rx), ("weight", gw, rw)):
            err = np.abs(a - b).max() / np.abs(b).max()
            if err > 1e-4:
                print(f"{layout} stride {S} {name} gradient: wrong result (max rel err {err:.1e})")
                return 1
        res = interleaved({
            "tecomp data": lambda: fx(x, w, d, gx),
            "torch data": lambda: tback([True, False, False]),
            "tecomp weight": lambda: fw(x, w, d, gw),
            "torch weight": lambda: tback([False, True, False]),
        }, args.rounds)
        cells = ", ".join(f"{k} {v * 1e3:.2f} ms ({flop / v / 1e9:.1f} GFLOP/s)"
                          for k, v in res.items())
        print(f"conv {C}x{H}^2 3x3 stride {S} {layout.upper()} batch {N}, {args.threads} "
              f"thread(s): {cells}",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
