"""An RNN layer written with tc.scan (h[t] = tanh(U h[t-1] + W x[t])), scheduled by
tc.auto_schedule, against PyTorch: the same recurrence as an eager loop, and torch.nn.RNN
(tanh, no bias: its fused C++ kernel), interleaved in one process.

    python3 benchmarks/rnn.py [--threads 2] [--rounds 15] [--T 64] [--batch 8] [--hidden 256]

Medians of interleaved rounds (run.py's ``interleaved``); the CPU model is printed first.
Every tool's output is checked against the others first.
"""
from __future__ import annotations

import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from common import base_parser, pin_threads  # noqa: E402


def main() -> int:
    ap = base_parser(__doc__, 15)
    ap.add_argument("--T", type=int, default=64)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=256)
    args = ap.parse_args()
    pin_threads(args.threads)
    from run import interleaved, uptime   # (first: it sets the thread pools' wait policies)
    from workloads import machine

    import numpy as np
    import torch

    import tecomp as tc
    from tecomp.testing.rnn import rnn_scan

    torch.set_num_threads(args.threads)
    T, B, n = args.T, args.batch, args.hidden
    d = n
    print(f"# {machine()}; {args.threads} threads; torch {torch.__version__}; {uptime()}")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((T, B, d)).astype("float32")
    w = (rng.standard_normal((n, d)) / np.sqrt(d)).astype("float32")
    u = (rng.standard_normal((n, n)) / np.sqrt(n) * 0.5).astype("float32")
    h0 = np.zeros((B, n), "float32")
    out = np.zeros((T, B, n), "float32")
    targs, _ = rnn_scan(T, B, n, d)
    t0 = time.perf_counter()
    s = tc.auto_schedule(targs)
    f = tc.build(s, targs)
    print(f"tecomp: auto_schedule + build {time.perf_counter() - t0:.2f} s")

    xt, wt, ut, ht = (torch.from_numpy(a) for a in (x, w, u, h0))
    layer = torch.nn.RNN(d, n, nonlinearity="tanh", bias=False)
    with torch.no_grad():
        layer.weight_ih_l0.copy_(wt)
        layer.weight_hh_l0.copy_(ut)

    def eager():
        with torch.no_grad():
            xw = torch.matmul(xt, wt.T)
            h, hs = ht, [ht]
            for t in range(1, T):
                h = torch.tanh(torch.matmul(h, ut.T) + xw[t])
                hs.append(h)
            return torch.stack(hs)

    def nn_rnn():
        # torch.nn.RNN's step 0 uses x[0] too: run it on x[1:] from h0 (same recurrence)
        with torch.no_grad():
            y, _ = layer(xt[1:], ht.unsqueeze(0))
            return y

    f(x, w, u, h0, out)
    ref = eager().numpy()
    np.testing.assert_allclose(out, ref, rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(nn_rnn().numpy(), ref[1:], rtol=1e-3, atol=1e-4)
    t = interleaved({"tecomp (tc.scan, auto)": lambda: f(x, w, u, h0, out),
                     "torch eager loop": eager, "torch.nn.RNN": nn_rnn}, args.rounds)
    flops = 2.0 * (T - 1) * B * n * (n + d)
    print(f"\n## RNN T={T} batch={B} hidden={n} input={d} (forward, ms, GFLOP/s)")
    base = t["tecomp (tc.scan, auto)"]
    for k, v in t.items():
        print(f"{k:24s} {v * 1e3:8.3f} ms  {flops / v / 1e9:6.1f} GFLOP/s  tecomp speedup "
              f"{v / base:5.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
