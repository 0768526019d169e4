"""A convolution followed by an inference batch norm and a ReLU (ResNet's 3x3 layers),
auto-scheduled with trials=0, against PyTorch, interleaved in one process.

tecomp: ``nn.batch_norm(nn.conv2d_nchw(x, w), ..., training=False, relu=True)``, one
kernel (the normalisation is the convolution's epilogue).  PyTorch: as a model is
written (``conv2d``, ``batch_norm``, ``relu``), and as its inference is usually deployed,
with the batch norm folded into the convolution's weights and bias
(``torch.fx.experimental.optimization.fuse`` does this) and an in-place ReLU.  Medians,
ms; ratio = PyTorch's time over tecomp's.  Each result is checked against PyTorch's
first.

    python3 benchmarks/conv_bn.py [--threads 2] [--rounds 11] [--batch 1]
"""
from __future__ import annotations

import platform

from common import base_parser, interleaved_turns, pin_threads, torch_or_none

#: (channels, image size) of ResNet-18's 3x3 stride-1 layers
LAYERS = [(64, 56), (128, 28), (256, 14), (512, 7)]


def main() -> None:
    ap = base_parser(__doc__, rounds=11)
    ap.add_argument("--batch", type=int, default=1)
    args = ap.parse_args()
    pin_threads(args.threads)
    import numpy as np

    import tecomp as tc
    import tecomp.nn as nn

    torch = torch_or_none(args.threads)
    if torch is None:
        raise SystemExit("conv_bn.py compares with PyTorch: pip install torch")
    F = torch.nn.functional
    rng = np.random.default_rng(0)
    fns, rows = {}, []
    for C, H in LAYERS:
        N = args.batch
        X = tc.placeholder((N, C, H, H), name="x")
        W = tc.placeholder((C, C, 3, 3), name="w")
        g, b, rm, rv = (tc.placeholder((C,), name=n) for n in ("g", "b", "rm", "rv"))
        Y = nn.batch_norm(nn.conv2d_nchw(X, W, 1, 1), g, b, running_mean=rm, running_var=rv,
                          training=False, relu=True)
        targs = [X, W, g, b, rm, rv, Y]
        f = tc.build(tc.auto_schedule(targs), targs)
        x = rng.standard_normal((N, C, H, H)).astype("float32")
        w = (rng.standard_normal((C, C, 3, 3)) / np.sqrt(9 * C)).astype("float32")
        gg, bb, mm = (rng.standard_normal(C).astype("float32") for _ in range(3))
        vv = rng.uniform(0.5, 2.0, C).astype("float32")
        out = np.empty((N, C, H, H), "float32")
        tx, tw, tg, tb, tm, tv = (torch.from_numpy(a) for a in (x, w, gg, bb, mm, vv))
        want = torch.relu(F.batch_norm(F.conv2d(tx, tw, padding=1), tm, tv, tg, tb, False,
                                       0.1, 1e-5))
        f(x, w, gg, bb, mm, vv, out)
        np.testing.assert_allclose(out, want.numpy(), rtol=1e-4, atol=1e-4)
        scale = tg / torch.sqrt(tv + 1e-5)
        wf, bf = tw * scale[:, None, None, None], tb - tm * scale
        key = f"{C}x{H}x{H}"
        fns[f"tecomp {key}"] = lambda f=f, a=(x, w, gg, bb, mm, vv, out): f(*a)
        fns[f"torch {key}"] = (lambda tx=tx, tw=tw, tm=tm, tv=tv, tg=tg, tb=tb: torch.relu(
            F.batch_norm(F.conv2d(tx, tw, padding=1), tm, tv, tg, tb, False, 0.1, 1e-5)))
        fns[f"torch folded {key}"] = (lambda tx=tx, wf=wf, bf=bf:
                                      F.conv2d(tx, wf, bf, padding=1).relu_())
        rows.append(key)
    t = interleaved_turns(fns, args.rounds)
    print(f"{platform.processor() or platform.machine()}, {args.threads} threads, batch "
          f"{args.batch}, {args.rounds} rounds: conv 3x3 + batch_norm(eval) + relu")
    for key in rows:
        mine = t[f"tecomp {key}"]
        print(f"  {key:10s} tecomp {mine * 1e3:7.3f} ms | torch as written "
              f"{t[f'torch {key}'] * 1e3:7.3f} ms, {t[f'torch {key}'] / mine:.2f}x | torch "
              f"with bn folded {t[f'torch folded {key}'] * 1e3:7.3f} ms, "
              f"{t[f'torch folded {key}'] / mine:.2f}x")


if __name__ == "__main__":
    main()
