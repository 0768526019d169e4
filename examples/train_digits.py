"""Train a small CNN on scikit-learn's digits with tecomp-compiled kernels only.

The model (NCHW, 8x8 grayscale digits, 10 classes)::

    conv 3x3, 1 -> 8 channels, padding 1, + bias  ->  relu  ->  max-pool 2x2
    -> flatten (8*4*4 = 128)  ->  dense 128 -> 10 (+ bias)  ->  softmax cross-entropy

One compiled kernel runs a training step: the forward pass, the loss, and the gradients of
the loss with respect to every parameter, all derived by ``tc.gradient`` from the forward
definitions of :mod:`tecomp.nn`.  A second kernel computes the logits for evaluation.  The
SGD update ``p -= lr * grad`` is a numpy one-liner.

    python3 examples/train_digits.py [--epochs 15] [--lr 0.1] [--batch 32] [--plot loss.png]

Needs scikit-learn (the digits ship inside it: no download); matplotlib is optional.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import tecomp as tc  # noqa: E402
from tecomp import nn  # noqa: E402

PARAMS = ("conv_w", "conv_b", "fc_w", "fc_b")
SHAPES = {"conv_w": (8, 1, 3, 3), "conv_b": (8,), "fc_w": (10, 128), "fc_b": (10,)}


def forward(x, p):
    """The model's logits: ``x`` is ``[B, 1, 8, 8]``, ``p`` the parameter placeholders."""
    c = nn.conv2d_nchw(x, p["conv_w"], stride=1, padding=1, name="conv")
    c = nn.bias_add(c, p["conv_b"], axis=1, name="conv_bias")
    r = nn.relu(c, name="relu")
    m = nn.max_pool2d(r, 2, name="pool")
    f = nn.flatten(m, name="flatten")
    return nn.dense(f, p["fc_w"], p["fc_b"], name="fc")


def build(batch: int, dtype: str = "float32", target: str = "llvm"):
    """Compile the training step and the evaluation kernels for a batch size.

    Returns ``(step, logits_fn, tensors)``: ``step(x, y_onehot, params) -> (loss, grads)``
    and ``logits_fn(x, params) -> logits``, with ``params``/``grads`` dicts of arrays.
    """
    x = tc.placeholder((batch, 1, 8, 8), dtype, name="x")
    y = tc.placeholder((batch, 10), dtype, name="y")
    p = {k: tc.placeholder(SHAPES[k], dtype, name=k) for k in PARAMS}
    logits = forward(x, p)
    loss = nn.cross_entropy(logits, y, name="loss")
    grads = tc.gradient(loss, [p[k] for k in PARAMS])
    outs = [loss] + grads
    s = tc.create_schedule([t.op for t in outs])
    args = [x, y] + [p[k] for k in PARAMS] + outs
    step_mod = tc.build(s, args, target=target, name="train_step")
    s2 = tc.create_schedule(logits.op)
    eval_mod = tc.build(s2, [x] + [p[k] for k in PARAMS] + [logits], target=target,
                        name="logits")
    npdt = np.dtype(dtype)

    def step(xb, yb, params):
        loss_v = np.empty((1,), npdt)
        gs = [np.empty(SHAPES[k], npdt) for k in PARAMS]
        step_mod(np.ascontiguousarray(xb, npdt), np.ascontiguousarray(yb, npdt),
                 *[params[k] for k in PARAMS], loss_v, *gs)
        return float(loss_v[0]), dict(zip(PARAMS, gs))

    def logits_fn(xb, params):
        out = np.empty((xb.shape[0], 10), npdt)
        eval_mod(np.ascontiguousarray(xb, npdt), *[params[k] for k in PARAMS], out)
        return out

    return step, logits_fn, {"x": x, "y": y, "params": p, "logits": logits, "loss": loss,
                             "grads": grads}


def init_params(seed: int = 0, dtype: str = "float32"):
    """PyTorch-style uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)) initialisation."""
    rng = np.random.default_rng(seed)
    out = {}
    for k, fan_in in (("conv_w", 9), ("conv_b", 9), ("fc_w", 128), ("fc_b", 128)):
        b = 1.0 / np.sqrt(fan_in)
        out[k] = rng.uniform(-b, b, SHAPES[k]).astype(dtype)
    return out


def load_data(seed: int = 0, test_fraction: float = 0.2):
    """The digits as ``[n, 1, 8, 8]`` in [0, 1], one-hot labels, a fixed train/test split."""
    from sklearn.datasets import load_digits

    d = load_digits()
    x = (d.images / 16.0).astype(np.float64)[:, None, :, :]
    labels = d.target.astype(np.int64)
    rng = np.random.default_rng(seed)
    perm = rng.permutation(len(x))
    n_test = int(len(x) * test_fraction)
    te, tr = perm[:n_test], perm[n_test:]
    return x[tr], labels[tr], x[te], labels[te]


def onehot(labels, n=10):
    return np.eye(n)[labels]


def accuracy(logits_fn, params, x, labels, batch):
    correct = 0
    n = (len(x) // batch) * batch
    for i in range(0, n, batch):
        pred = logits_fn(x[i:i + batch], params).argmax(axis=1)
        correct += int((pred == labels[i:i + batch]).sum())
    rest = len(x) - n
    if rest:  # pad the last batch
        xb = np.concatenate([x[n:], np.zeros((batch - rest,) + x.shape[1:])])
        pred = logits_fn(xb, params).argmax(axis=1)[:rest]
        correct += int((pred == labels[n:]).sum())
    return correct / len(x)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=15)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--plot", default="train_digits_loss.png",
                    help="where to save the loss curve (needs matplotlib; '' to skip)")
    args = ap.parse_args(argv)
    xtr, ltr, xte, lte = load_data(args.seed)
    t0 = time.perf_counter()
    step, logits_fn, _ = build(args.batch)
    print(f"compiled the training step and the evaluation kernel in "
          f"{time.perf_counter() - t0:.1f} s")
    params = init_params(args.seed)
    rng = np.random.default_rng(args.seed)
    ytr = onehot(ltr)
    losses = []
    t0 = time.perf_counter()
    for epoch in range(args.epochs):
        perm = rng.permutation(len(xtr))
        tot, nb = 0.0, 0
        for i in range(0, len(perm) - args.batch + 1, args.batch):
            idx = perm[i:i + args.batch]
            loss, grads = step(xtr[idx], ytr[idx], params)
            for k in PARAMS:
                params[k] -= args.lr * grads[k]
            tot += loss
            nb += 1
        losses.append(tot / nb)
        print(f"epoch {epoch + 1:2d}  loss {losses[-1]:.4f}")
    train_s = time.perf_counter() - t0
    acc = accuracy(logits_fn, params, xte, lte, args.batch)
    print(f"test accuracy {acc * 100:.1f}% on {len(xte)} digits "
          f"(training took {train_s:.1f} s)")
    if args.plot:
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            print("matplotlib is not installed: no loss curve")
        else:
            plt.figure(figsize=(5, 3.5))
            plt.plot(range(1, len(losses) + 1), losses, marker="o")
            plt.xlabel("epoch")
            plt.ylabel("training loss (cross-entropy)")
            plt.title("tecomp: small CNN on sklearn digits")
            plt.tight_layout()
            plt.savefig(args.plot, dpi=100)
            print(f"saved the loss curve to {args.plot}")
    return losses, acc


if __name__ == "__main__":
    main()
