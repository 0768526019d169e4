"""Quantized add and concatenate of 1M uint8 elements: tecomp.nn.quant against PyTorch's
quantized ops (fbgemm), interleaved in one process, medians.

    python3 benchmarks/quant.py [--threads 2] [--rounds 25] [--n 1048576]
"""
from __future__ import annotations

import os
import sys
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from common import base_parser, pin_threads  # noqa: E402


def main() -> int:
    ap = base_parser(__doc__, 25)
    ap.add_argument("--n", type=int, default=1 << 20)
    args = ap.parse_args()
    pin_threads(args.threads)
    import numpy as np
    import torch

    import tecomp as tc
    from tecomp.nn import quant
    from run import interleaved, uptime
    from workloads import machine

    warnings.filterwarnings("ignore", message=".*deprecated")
    torch.set_num_threads(args.threads)
    print(f"# {machine()}; {args.threads} threads; torch {torch.__version__}; {uptime()}")
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
    t = interleaved({
        "tecomp add": lambda: add(qa, qb, c),
        "torch add": lambda: torch.ops.quantized.add(ta, tb, 0.1, 128),
        "tecomp cat": lambda: cat(a2, b2, c),
        "torch cat": lambda: torch.ops.quantized.cat([ta2, tb2], 0, 0.1, 128),
    }, args.rounds)
    print(f"\n## quantized add and concatenate, {n} uint8 elements (ms, medians)")
    for k, v in t.items():
        print(f"{k:12s} {v * 1e3:8.3f}")
    print(f"speed tecomp/torch: add {t['torch add'] / t['tecomp add']:.2f}x, "
          f"cat {t['torch cat'] / t['tecomp cat']:.2f}x (target >= 1.0x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
