"""tecomp inside PyTorch: the per-call overhead of tecomp.torch.op, and BERT's FFN block
(forward + backward) against PyTorch eager, interleaved in one process.

1. Overhead: ``tct.op`` of ``y = x * 2`` on a 4-element tensor that requires grad, against a
   plain ``torch.autograd.Function`` whose forward is the torch op ``x * 2`` (target: at
   most 2x its time per call); and a plain kernel's call with contiguous torch tensors
   with and without the bump of its output's autograd version counter.
2. FFN: ``gelu(x @ W^T + b)``, x ``[n, 768]``, W ``[3072, 768]``, a training step's
   forward + backward (gradients reset to None first, as ``optimizer.zero_grad()`` does,
   then ``y.backward(g)``) against PyTorch's ``F.gelu(F.linear(x, W, b))`` (target: at
   least 1.0x PyTorch's speed), and the forward alone (under ``torch.no_grad()``).

    python3 benchmarks/torch_bridge.py [--threads 2] [--rounds 15] [--n 128]

Medians of interleaved rounds (see run.py's ``interleaved``); the CPU model is printed
first.
"""
from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from common import base_parser, pin_threads  # noqa: E402


def main() -> int:
    ap = base_parser(__doc__, 15)
    ap.add_argument("--n", type=int, default=128)
    ap.add_argument("--trials", type=int, default=0,
                    help="tune the FFN's forward kernels (tct.op trials=N); 0: analytic")
    args = ap.parse_args()
    pin_threads(args.threads)
    import torch
    import torch.nn.functional as F

    import tecomp as tc
    import tecomp.nn as nn
    import tecomp.torch as tct
    from run import interleaved, uptime
    from workloads import machine

    torch.set_num_threads(args.threads)
    print(f"# {machine()}; {args.threads} threads; torch {torch.__version__}; {uptime()}")

    # 1. per-call overhead
    A = tc.placeholder((4,), name="A")
    B = tc.compute((4,), lambda i: A[i] * 2.0, name="B")
    double = tct.op([A], [B], name="double")

    class Double(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2.0

        @staticmethod
        def backward(ctx, g):
            return g * 2.0

    x = torch.randn(4, requires_grad=True)
    calls = 2000

    def loop(f):
        def run():
            for _ in range(calls):
                f(x)
        return run

    t = interleaved({"tecomp.torch.op": loop(double), "autograd.Function": loop(Double.apply)},
                    args.rounds)
    us = {k: v / calls * 1e6 for k, v in t.items()}
    print("\n## per-call overhead (4-element tensor, requires_grad, forward)")
    for k, v in us.items():
        print(f"{k:20s} {v:7.2f} us/call")
    print(f"ratio tecomp/torch   {us['tecomp.torch.op'] / us['autograd.Function']:7.2f}x "
          f"(target <= 2x)")

    # 1b. the version counter of written outputs (the fast binder's one call of
    # torch._C._increment_version) on a kernel's call with contiguous tensors: the binder
    # with it against one compiled from the same source without it
    from tecomp.runtime import llvm as rt

    A64 = tc.placeholder((64,), name="A")
    B64 = tc.compute((64,), lambda i: A64[i] * 2.0, name="B")
    kern = tc.build(tc.create_schedule(B64.op), [A64, B64])
    xa, ya = torch.randn(64), torch.empty(64)
    kern(xa, ya)
    src = rt._fast_path_source(kern._plan, tensors=True)
    binders = {"with the version bump": rt._compile_fast_path(src, kern._plan, tensors=True),
               "without": rt._compile_fast_path(
                   "".join(ln + "\n" for ln in src.splitlines() if "written(" not in ln),
                   kern._plan, tensors=True)}

    def kernel_loop(binder):
        def run():
            kern._fast_tensors = binder
            for _ in range(calls):
                kern(xa, ya)
        return run

    t = interleaved({k: kernel_loop(v) for k, v in binders.items()}, args.rounds)
    print("\n## a kernel's call with contiguous torch tensors (64 elements, B = A * 2)")
    for k, v in t.items():
        print(f"{k:22s} {v / calls * 1e6:7.2f} us/call")

    # 2. the FFN block
    n, d, h = args.n, 768, 3072
    X = tc.placeholder((tc.var("n"), d), name="X")
    W = tc.placeholder((h, d), name="W")
    b = tc.placeholder((h,), name="b")
    ffn = tct.op([X, W, b], [nn.gelu(nn.bias_add(nn.dense(X, W), b, axis=1))], name="ffn",
                 trials=args.trials)
    gen = torch.Generator().manual_seed(0)
    xs = torch.randn(n, d, generator=gen, requires_grad=True)
    ws = (torch.randn(h, d, generator=gen) * 0.03).requires_grad_()
    bs = torch.zeros(h, requires_grad=True)
    g = torch.randn(n, h, generator=gen)

    def zero_grad():  # as optimizer.zero_grad() does (set_to_none=True, torch's default)
        xs.grad = ws.grad = bs.grad = None

    def tc_step():
        zero_grad()
        ffn(xs, ws, bs).backward(g)

    def pt_step():
        zero_grad()
        F.gelu(F.linear(xs, ws, bs)).backward(g)

    def tc_fwd():
        with torch.no_grad():
            ffn(xs, ws, bs)

    def pt_fwd():
        with torch.no_grad():
            F.gelu(F.linear(xs, ws, bs))

    tc_step()  # compile forward and backward
    with torch.no_grad():
        err = (ffn(xs, ws, bs) - F.gelu(F.linear(xs, ws, bs))).abs().max().item()
    t = interleaved({"tecomp fwd+bwd": tc_step, "torch fwd+bwd": pt_step,
                     "tecomp fwd": tc_fwd, "torch fwd": pt_fwd}, args.rounds)
    flops = 2 * n * d * h
    print(f"\n## FFN gelu(x W^T + b), x [{n}, {d}], W [{h}, {d}], tecomp trials={args.trials} "
          f"(max |diff| {err:.1e})")
    for k, v in t.items():
        gf = flops * (3 if "bwd" in k else 1) / v / 1e9
        print(f"{k:16s} {v * 1e3:8.2f} ms  {gf:6.1f} GFLOP/s")
    print(f"speed tecomp/torch: fwd+bwd {t['torch fwd+bwd'] / t['tecomp fwd+bwd']:.2f}x, "
          f"fwd {t['torch fwd'] / t['tecomp fwd']:.2f}x (target fwd+bwd >= 1.0x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
