"""ResNet's forward convolutions: tecomp's tuned schedules against PyTorch's
``conv2d``, interleaved in one process.

    python3 benchmarks/resnet.py [--threads 2] [--batch 4] [--layout nchw,nhwc]
                                 [--only 7x7]

The 3x3 layers of ResNet-18/34 (stride 1, and the stride-2 ones that halve the size),
its 1x1 stride-2 shortcuts and the 1x1 layers of ResNet-50's last stage, padding
``k // 2``.  PyTorch gets NCHW tensors in both rows (its own layout); tecomp gets the
layout named.  Medians, ms, and GFLOP/s counting 2*N*K*C*OH*OW*R*S.  Speed only: the
tests check the values (each result is compared with PyTorch's here too).
"""
from __future__ import annotations

import os
import sys

#: (in channels, out channels, input size, kernel, stride)
LAYERS = [
    (64, 64, 56, 3, 1), (128, 128, 28, 3, 1), (256, 256, 14, 3, 1), (512, 512, 7, 3, 1),
    (64, 128, 56, 3, 2), (128, 256, 28, 3, 2), (256, 512, 14, 3, 2),
    (128, 256, 28, 1, 2), (256, 512, 14, 1, 2),
    (2048, 512, 7, 1, 1), (512, 2048, 7, 1, 1), (1024, 2048, 14, 1, 2),
]


def main(argv=None) -> int:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from common import parser, pin_threads, torch_or_none

    ap = parser(__doc__, rounds=9)
    ap.add_argument("--only", default="", help="the layers whose name contains this")
    args = ap.parse_args(argv)
    pin_threads(args.threads)   # before numpy and torch load
    from run import interleaved

    import numpy as np
    import tecomp as tc
    from tecomp.nn import ops
    from tecomp.strategy import cpu as sc
    torch = torch_or_none(args.threads)
    if torch is None:
        return 1
    N = args.batch
    rng = np.random.default_rng(0)
    print(f"batch {N}, {args.threads} thread(s); ms (GFLOP/s); ratio = PyTorch's time / "
          "tecomp's (> 1: tecomp is faster)")
    for C, K, H, R, S in LAYERS:
        name = f"{C}->{K} {H}x{H} {R}x{R} s{S}"
        if args.only not in name:
            continue
        P = R // 2
        OH = (H + 2 * P - R) // S + 1
        flop = 2.0 * N * K * C * OH * OH * R * R
        x = rng.standard_normal((N, C, H, H), dtype=np.float32)
        w = rng.standard_normal((K, C, R, R), dtype=np.float32)
        tx, tw = torch.from_numpy(x), torch.from_numpy(w)
        ref = torch.nn.functional.conv2d(tx, tw, stride=S, padding=P).numpy()
        fns = {"torch": lambda: torch.nn.functional.conv2d(tx, tw, stride=S, padding=P)}
        for layout in args.layout.split(","):
            nchw = layout == "nchw"
            d = tc.placeholder((N, C, H, H) if nchw else (N, H, H, C), name="data")
            wt = tc.placeholder((K, C, R, R) if nchw else (R, R, C, K), name="weight")
            out = (ops.conv2d_nchw if nchw else ops.conv2d_nhwc)(d, wt, stride=S, padding=P)
            sched = sc.schedule_conv2d_nchw if nchw else sc.schedule_conv2d_nhwc
            f = tc.build(sched(out), [d, wt, out], name="conv")
            xl = x if nchw else np.ascontiguousarray(x.transpose(0, 2, 3, 1))
            wl = w if nchw else np.ascontiguousarray(w.transpose(2, 3, 1, 0))
            o = np.zeros([int(e.value) for e in out.shape], np.float32)
            f(xl, wl, o)
            got = o if nchw else o.transpose(0, 3, 1, 2)
            err = float(np.abs(got - ref).max() / np.abs(ref).max())
            if err > 1e-4:
                print(f"{name} {layout}: wrong result (max rel err {err:.1e})")
                return 1
            fns[layout] = lambda f=f, xl=xl, wl=wl, o=o: f(xl, wl, o)
        res = interleaved(fns, args.rounds)
        cells = [f"{k} {t * 1e3:6.2f} ({flop / t / 1e9:5.1f})" for k, t in res.items()]
        ratios = [f"{k} {res['torch'] / t:.2f}x" for k, t in res.items() if k != "torch"]
        print(f"{name:24s} " + "  ".join(cells) + "  ratio " + ", ".join(ratios), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
