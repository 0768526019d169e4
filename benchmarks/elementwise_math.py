"""Math functions in plain TE: a tanh-GELU epilogue, tanh and log, auto-scheduled, against PyTorch.

``out = gelu_tanh(x + b) * y`` on 2048 x 4096 float32 (``gelu_tanh(v) = 0.5 v (1 +
tanh(sqrt(2/pi) (v + 0.044715 v^3)))``, PyTorch's ``gelu(approximate="tanh")``), and
``tanh(x)`` and ``log(x)`` (of positive ``x``) on the same size, each written as one
compute and scheduled by ``tc.auto_schedule(args)`` (trials=0), against PyTorch's eager
ops on the same arrays (as written, each op allocating its result, and with every result
preallocated through the ``out=`` variants: PyTorch at its best here, torch.compile's
Inductor kernels also allocate theirs), interleaved, medians in ms (PyTorch's time over
tecomp's: > 1 means tecomp is faster).  Every result is checked against a float64
reference first.

    python3 benchmarks/elementwise_math.py [--threads 2] [--rounds 15]
"""
from __future__ import annotations

import math
import platform

from common import base_parser, interleaved_turns, pin_threads, torch_or_none


def main() -> None:
    args = base_parser(__doc__, rounds=15).parse_args()
    pin_threads(args.threads)
    import numpy as np

    import tecomp as tc

    torch = torch_or_none(args.threads)
    M, N = 2048, 4096
    rng = np.random.default_rng(0)
    x = tc.aligned(rng.standard_normal((M, N)).astype("float32"))
    y = tc.aligned(rng.standard_normal((M, N)).astype("float32"))
    bias = tc.aligned(rng.standard_normal(N).astype("float32"))
    out = tc.empty((M, N), "float32")

    X = tc.placeholder((M, N), name="x")
    Y = tc.placeholder((M, N), name="y")
    Bv = tc.placeholder((N,), name="b")
    c = math.sqrt(2.0 / math.pi)

    def gelu_tanh(v):
        return 0.5 * v * (1.0 + tc.tanh(c * (v + 0.044715 * v * v * v)))

    G = tc.compute((M, N), lambda i, j: gelu_tanh(X[i, j] + Bv[j]) * Y[i, j], name="out")
    T = tc.compute((M, N), lambda i, j: tc.tanh(X[i, j]), name="tanh")
    L = tc.compute((M, N), lambda i, j: tc.log(Y[i, j]), name="log")
    gelu_args, tanh_args, log_args = [X, Bv, Y, G], [X, T], [Y, L]
    f_gelu = tc.build(tc.auto_schedule(gelu_args), gelu_args)
    f_tanh = tc.build(tc.auto_schedule(tanh_args), tanh_args)
    f_log = tc.build(tc.auto_schedule(log_args), log_args)
    pos = tc.aligned(np.abs(y) + np.float32(1e-3))   # log's input: positive

    v64 = x.astype(np.float64) + bias
    want = {"gelu": 0.5 * v64 * (1 + np.tanh(c * (v64 + 0.044715 * v64 ** 3))) * y,
            "tanh": np.tanh(x.astype(np.float64)), "log": np.log(pos.astype(np.float64))}
    f_gelu(x, bias, y, out)
    np.testing.assert_allclose(out, want["gelu"], rtol=1e-5, atol=1e-5)
    f_tanh(x, out)
    np.testing.assert_allclose(out, want["tanh"], rtol=1e-6, atol=1e-7)
    f_log(pos, out)
    np.testing.assert_allclose(out, want["log"], rtol=1e-6, atol=1e-7)

    fns = {"tecomp gelu": lambda: f_gelu(x, bias, y, out),
           "tecomp tanh": lambda: f_tanh(x, out),
           "tecomp log": lambda: f_log(pos, out)}
    if torch is not None:
        tx, ty, tb = (torch.from_numpy(a) for a in (x, y, bias))
        to = torch.from_numpy(out)
        F = torch.nn.functional
        got = (F.gelu(tx + tb, approximate="tanh") * ty).numpy()
        np.testing.assert_allclose(got, want["gelu"], rtol=1e-5, atol=1e-5)

        t1 = torch.empty_like(tx)

        def torch_gelu():     # as it is written: each op allocates its result
            F.gelu(tx + tb, approximate="tanh").mul_(ty)

        def torch_gelu_out():  # PyTorch at its best here: every result preallocated
            torch.add(tx, tb, out=t1)
            torch.ops.aten.gelu.out(t1, approximate="tanh", out=t1)
            torch.mul(t1, ty, out=to)

        fns["torch gelu"] = torch_gelu
        fns["torch gelu, out="] = torch_gelu_out
        fns["torch tanh, out="] = lambda: torch.tanh(tx, out=to)
        tp = torch.from_numpy(pos)
        fns["torch log, out="] = lambda: torch.log(tp, out=to)
    t = interleaved_turns(fns, args.rounds)
    print(f"{platform.processor() or platform.machine()}, {args.threads} threads, "
          f"{args.rounds} rounds, {M}x{N} float32")
    for op, peers in (("gelu", ("torch gelu", "torch gelu, out=")),
                      ("tanh", ("torch tanh, out=",)), ("log", ("torch log, out=",))):
        mine = t["tecomp " + op]
        line = f"  {op:5s} tecomp {mine * 1e3:7.2f} ms"
        for peer in peers:
            if peer in t:
                line += f" | {peer} {t[peer] * 1e3:7.2f} ms, ratio {t[peer] / mine:.2f}x"
        print(line)


if __name__ == "__main__":
    main()
