"""Train a PyTorch model whose feed-forward block is a tecomp op, next to the same model in
pure PyTorch.

The block is BERT's feed-forward network with its residual and layer norm::

    h = gelu(x @ W1^T + b1)           <- one tecomp op: forward compiled by tecomp, backward
    y = LayerNorm(x + h @ W2^T + b2)     derived by tc.gradient and compiled by tecomp
    loss = mse(head(y), target)

``tecomp.torch.op([X, W1, b1], [H])`` turns the compute definition into a torch op that
autograd differentiates.  Both models start from the same weights and see the same batches;
the script trains each for ``--steps`` Adam steps, prints both loss curves (they agree to
float32 tolerance: the kernels differ only in the order of their float additions), the
median step times, and saves a PNG of the two curves (needs matplotlib).

    python3 examples/torch_bert_ffn.py [--steps 200] [--tokens 64] [--hidden 128]
                                       [--ffn 512] [--plot torch_bert_ffn.png]

Needs torch (``pip install torch==2.13.0``).
"""
from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import tecomp as tc  # noqa: E402
import tecomp.nn as tnn  # noqa: E402
import tecomp.torch as tct  # noqa: E402


def tecomp_ffn(hidden: int, ffn: int):
    """``gelu(X @ W^T + b)`` as a differentiable torch op; the token count ``n`` is
    symbolic (bound from each call's tensors)."""
    X = tc.placeholder((tc.var("n"), hidden), name="X")
    W = tc.placeholder((ffn, hidden), name="W")
    b = tc.placeholder((ffn,), name="b")
    H = tnn.gelu(tnn.bias_add(tnn.dense(X, W), b, axis=1))
    return tct.op([X, W, b], [H], name="bert_ffn")


class FFNBlock(torch.nn.Module):
    def __init__(self, hidden: int, ffn: int, op=None):
        super().__init__()
        self.up = torch.nn.Linear(hidden, ffn)
        self.down = torch.nn.Linear(ffn, hidden)
        self.norm = torch.nn.LayerNorm(hidden)
        self.head = torch.nn.Linear(hidden, hidden)
        self.op = op  # None: pure PyTorch

    def forward(self, x):
        if self.op is None:
            h = F.gelu(F.linear(x, self.up.weight, self.up.bias))
        else:
            h = self.op(x, self.up.weight, self.up.bias)
        return self.head(self.norm(x + self.down(h)))


def train(model, batches, lr: float):
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    losses, times = [], []
    for x, target in batches:
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = F.mse_loss(model(x), target)
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
        losses.append(loss.item())
    return losses, times


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--tokens", type=int, default=64, help="rows per batch (sequence x batch)")
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--ffn", type=int, default=512)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--plot", default="torch_bert_ffn.png", help="PNG path ('' for none)")
    args = ap.parse_args(argv)

    torch.manual_seed(0)
    ref = FFNBlock(args.hidden, args.ffn)
    ours = copy.deepcopy(ref)                      # the same initial weights
    ours.op = tecomp_ffn(args.hidden, args.ffn)
    teacher = torch.nn.Sequential(torch.nn.Linear(args.hidden, args.hidden), torch.nn.Tanh())
    gen = torch.Generator().manual_seed(1)
    batches = []
    with torch.no_grad():
        for _ in range(args.steps):
            x = torch.randn(args.tokens, args.hidden, generator=gen)
            batches.append((x, teacher(x)))

    t0 = time.perf_counter()
    ours(batches[0][0]).sum().backward()           # compile forward and backward once
    ours.zero_grad(set_to_none=True)
    print(f"tecomp op {ours.op.name}: forward and backward compiled in "
          f"{time.perf_counter() - t0:.2f} s")

    loss_t, time_t = train(ours, batches, args.lr)
    loss_p, time_p = train(ref, batches, args.lr)
    print(f"{'step':>5} {'tecomp loss':>12} {'torch loss':>12}")
    for s in list(range(0, args.steps, max(1, args.steps // 10))) + [args.steps - 1]:
        print(f"{s:5d} {loss_t[s]:12.6f} {loss_p[s]:12.6f}")
    worst = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(loss_t, loss_p))
    print(f"largest relative difference of the two loss curves: {worst:.2e}")
    mt, mp = statistics.median(time_t[5:] or time_t), statistics.median(time_p[5:] or time_p)
    print(f"median step: tecomp op {mt * 1e3:.2f} ms, pure PyTorch {mp * 1e3:.2f} ms "
          f"({torch.get_num_threads()} torch threads, {tc.get_num_threads()} tecomp threads)")
    if args.plot:
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            print("no plot: matplotlib is not installed (pip install matplotlib)")
        else:
            fig, ax = plt.subplots(figsize=(6, 3.5))
            ax.plot(loss_p, label="PyTorch", linewidth=2.5, alpha=0.6)
            ax.plot(loss_t, label="tecomp FFN op", linewidth=1, linestyle="--")
            ax.set_xlabel("step")
            ax.set_ylabel("MSE loss")
            ax.set_yscale("log")
            ax.set_title("BERT FFN block: tecomp op vs PyTorch")
            ax.legend()
            fig.tight_layout()
            fig.savefig(args.plot, dpi=100)
            print(f"wrote {args.plot}")
    ok = worst < 1e-3
    print("OK: the loss curves agree" if ok else "MISMATCH: the loss curves differ")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
