"""Quantized add and concatenate of 1M uint8 elements and a quantized 3x3 conv: tecomp.nn.quant
against PyTorch's quantized ops (fbgemm), interleaved in one process, medians.

    python3 benchmarks/quant.py [--threads 2] [--rounds 25] [--n 1048576] [--conv 64x56]

The conv: NCHW, batch 1, C input and C output channels of SxS pixels (``--conv CxS``), 3x3,
padding 1, uint8 x int8 -> uint8, against ``torch.ops.quantized.conv2d`` with prepacked
weights; 7-bit activations, so that both are bit for bit equal (checked) even where fbgemm
saturates pair sums at int16 (AVX2).

The tools take turns of about 0.1 s of back-to-back calls, the first quarter of each turn
not counted (common.interleaved_turns, as in tune.py): PyTorch keeps its OpenMP threads'
default spinning, its fastest (with ``OMP_WAIT_POLICY=PASSIVE`` its add took 0.195-0.204
ms against 0.176-0.187), and the spinning that outlasts its turn is not charged to the
next tool (timed three calls at a time, tecomp's add took 0.26-0.35 ms after PyTorch's
turns against 0.134-0.139 with PyTorch passive).
"""
from __future__ import annotations

import os
import sys
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from common import base_parser, interleaved_turns, pin_threads  # noqa: E402


def main() -> int:
    ap = base_parser(__doc__, 25)
    ap.add_argument("--n", type=int, default=1 << 20)
    ap.add_argument("--conv", default="64x56", help="CxS: channels x image side")
    args = ap.parse_args()
    pin_threads(args.threads)
    import numpy as np
    import torch

    import tecomp as tc
    from tecomp.nn import quant
    from run import uptime
    from workloads import machine

    warnings.filterwarnings("ignore", message=".*deprecated")
    torch.set_num_threads(args.threads)
    print(f"# {machine()}; {args.threads} threads; torch {torch.__version__}, "
          f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '(unset)')}; {uptime()}")
    n = args.n
    rng = np.random.default_rng(0)
    qa = rng.integers(0, 256, n).astype(np.uint8)
    qb = rng.integers(0, 256, n).astype(np.uint8)
    A = tc.placeholder((n,), "uint8", name="A")
    B = tc.placeholder((n,), "uint8", name="B")
    C = quant.quantized_add(A, 0.05, 120, B, 0.08, 100, 0.1, 128)
    add = tc.build(tc.auto_schedule([A, B, C]), [A, B, C])
    h = n // 2
    A2 = tc.placeholder((h,), "uint8", name="A2")
    B2 = tc.placeholder((h,), "uint8", name="B2")
    K = quant.quantized_concatenate([(A2, 0.05, 120), (B2, 0.2, 7)], 0, 0.1, 128)
    cat = tc.build(tc.auto_schedule([A2, B2, K]), [A2, B2, K])
    c = np.empty(n, np.uint8)
    ta = torch._make_per_tensor_quantized_tensor(torch.from_numpy(qa), 0.05, 120)
    tb = torch._make_per_tensor_quantized_tensor(torch.from_numpy(qb), 0.08, 100)
    ta2 = torch._make_per_tensor_quantized_tensor(torch.from_numpy(qa[:h].copy()), 0.05, 120)
    tb2 = torch._make_per_tensor_quantized_tensor(torch.from_numpy(qb[:h].copy()), 0.2, 7)
    a2, b2 = qa[:h].copy(), qb[:h].copy()
    conv, conv_torch, conv_shape = _conv(args.conv, rng)
    t = interleaved_turns({
        "tecomp add": lambda: add(qa, qb, c),
        "torch add": lambda: torch.ops.quantized.add(ta, tb, 0.1, 128),
        "tecomp cat": lambda: cat(a2, b2, c),
        "torch cat": lambda: torch.ops.quantized.cat([ta2, tb2], 0, 0.1, 128),
        "tecomp conv": conv,
        "torch conv": conv_torch,
    }, args.rounds)
    print(f"\n## quantized add and concatenate, {n} uint8 elements; conv {conv_shape} "
          f"(ms, medians)")
    for k, v in t.items():
        print(f"{k:12s} {v * 1e3:8.3f}")
    print(f"speed tecomp/torch: add {t['torch add'] / t['tecomp add']:.2f}x, "
          f"cat {t['torch cat'] / t['tecomp cat']:.2f}x (target >= 1.0x), "
          f"conv {t['torch conv'] / t['tecomp conv']:.2f}x")
    return 0


def _conv(spec: str, rng):
    """(tecomp's call, PyTorch's call, a description) of the quantized conv ``spec``
    (``CxS``), after checking that both give the same bytes."""
    import numpy as np
    import torch

    import tecomp as tc
    from tecomp.nn import quant

    C, S = (int(v) for v in spec.lower().split("x"))
    xs, xz, ws, ys, yz = 0.05, 60, 0.004, 0.4, 100
    xq = rng.integers(0, 128, (1, C, S, S)).astype(np.uint8)  # 7-bit, see the docstring
    wq = rng.integers(-128, 128, (C, C, 3, 3)).astype(np.int8)
    bias = rng.standard_normal(C).astype(np.float32)
    X = tc.placeholder(xq.shape, "uint8", name="X")
    W = tc.placeholder(wq.shape, "int8", name="W")
    B = tc.placeholder((C,), name="B")
    Y = quant.quantized_conv2d(X, xs, xz, W, ws, 0, B, ys, yz, stride=1, padding=1)
    f = tc.build(tc.auto_schedule([X, W, B, Y]), [X, W, B, Y])
    y = np.empty(xq.shape, np.uint8)
    torch.backends.quantized.engine = "fbgemm"
    tx = torch._make_per_tensor_quantized_tensor(torch.from_numpy(xq), xs, xz)
    tw = torch._make_per_tensor_quantized_tensor(torch.from_numpy(wq), ws, 0)
    packed = torch.ops.quantized.conv2d_prepack(tw, torch.from_numpy(bias), [1, 1], [1, 1],
                                                [1, 1], 1)
    f(xq, wq, bias, y)
    want = torch.ops.quantized.conv2d(tx, packed, ys, yz).int_repr().numpy()
    if not np.array_equal(y, want):
        raise SystemExit(f"quantized conv: tecomp and PyTorch differ in "
                         f"{int((y != want).sum())} of {y.size} outputs")
    return (lambda: f(xq, wq, bias, y), lambda: torch.ops.quantized.conv2d(tx, packed, ys, yz),
            f"1x{C}x{S}x{S} -> {C} channels, 3x3, pad 1")


if __name__ == "__main__":
    sys.exit(main())
