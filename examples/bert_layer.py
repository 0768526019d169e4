"""A BERT-base encoder layer written with tecomp.nn, checked against the same layer in
PyTorch, forward and backward, and timed next to it.

The layer is Hugging Face's ``BertLayer`` (post-layer-norm, eval mode: no dropout)::

    q, k, v = x Wq^T + bq, x Wk^T + bk, x Wv^T + bv        (x: [batch*seq, 768])
    per head (12 of 64):  p = softmax(q k^T / 8 + mask)    (mask: 0 or -10000 per key)
                          c = p v
    h = LayerNorm(c Wo^T + bo + x)
    y = LayerNorm(gelu(h W1^T + b1) W2^T + b2 + h)         (W1: [3072, 768])

It is one ``tecomp.torch.op``: the forward is compiled from these definitions with the
auto-scheduler's analytic schedule, the backward is ``tc.gradient`` of the whole layer.

    python3 examples/bert_layer.py [--batch 1] [--seq 128] [--backward] [--rounds 10]

Needs torch (``pip install torch==2.13.0``).
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import tecomp as tc  # noqa: E402
import tecomp.nn as nn  # noqa: E402
import tecomp.torch as tct  # noqa: E402

PARAMS = ("wq", "bq", "wk", "bk", "wv", "bv", "wo", "bo", "g1", "be1", "w1", "b1", "w2", "b2",
          "g2", "be2")


def shapes(hidden: int, ffn: int):
    h, f = hidden, ffn
    return {"wq": (h, h), "bq": (h,), "wk": (h, h), "bk": (h,), "wv": (h, h), "bv": (h,),
            "wo": (h, h), "bo": (h,), "g1": (h,), "be1": (h,), "w1": (f, h), "b1": (f,),
            "w2": (h, f), "b2": (h,), "g2": (h,), "be2": (h,)}


def bert_layer(batch: int, seq: int, hidden: int = 768, heads: int = 12, ffn: int = 3072,
               fused: bool = True, dtype: str = "float32", attention_backward: str = "stages"):
    """(inputs, output): the placeholders (x, mask, then the parameters of PARAMS) and the
    layer's output [batch*seq, hidden].  ``fused``: the attention is
    ``nn.scaled_dot_product_attention`` (one fused kernel per block of query rows); else
    two batched matmuls around a softmax.  ``dtype``: every input's and the output's
    (``tecomp.nn`` sums float16/bfloat16 products and statistics in float32).
    ``attention_backward``: what ``tc.gradient`` makes of the fused attention,
    ``scaled_dot_product_attention``'s ``backward`` (``"flash"``: FlashAttention's
    backward, float16/bfloat16 only)."""
    dh = hidden // heads
    n = batch * seq
    X = tc.placeholder((n, hidden), dtype=dtype, name="x")
    M = tc.placeholder((batch, seq), dtype=dtype, name="mask")
    P = {k: tc.placeholder(s, dtype=dtype, name=k) for k, s in shapes(hidden, ffn).items()}

    if fused:
        def heads_of(t, name):  # [n, hidden] -> [batch, heads, seq, dh]
            return tc.compute((batch, heads, seq, dh), lambda b, h, s, d: t[
                b * seq + s, h * dh + d], name=name)
    else:
        def heads_of(t, name):  # [n, hidden] -> [batch*heads, seq, dh]
            return tc.compute((batch * heads, seq, dh), lambda bh, s, d: t[
                (bh // heads) * seq + s, (bh % heads) * dh + d], name=name)

    q = heads_of(nn.dense(X, P["wq"], P["bq"], name="q"), "qh")
    k = heads_of(nn.dense(X, P["wk"], P["bk"], name="k"), "kh")
    v = heads_of(nn.dense(X, P["wv"], P["bv"], name="v"), "vh")
    if fused:
        keys = tc.compute((batch, 1, 1, seq), lambda b, _h, _i, j: M[b, j], name="keymask")
        ctx = nn.scaled_dot_product_attention(q, k, v, keys, name="attn",
                                              backward=attention_backward)
        merged = tc.compute((n, hidden), lambda r, c: ctx[r // seq, c // dh, r % seq, c % dh],
                            name="merged")
    else:
        scores = nn.batch_matmul(q, k, transpose_b=True, name="scores")
        masked = tc.compute(scores.shape, lambda bh, i, j: scores[bh, i, j] * (
            1.0 / math.sqrt(dh)) + M[bh // heads, j], name="masked")
        p = nn.softmax(masked, name="probs")
        ctx = nn.batch_matmul(p, v, name="ctx")
        merged = tc.compute((n, hidden), lambda r, c: ctx[(r // seq) * heads + c // dh, r % seq,
                                                           c % dh], name="merged")
    attn = nn.dense(merged, P["wo"], P["bo"], name="attn_out")
    res1 = tc.compute((n, hidden), lambda r, c: attn[r, c] + X[r, c], name="res1")
    h = nn.layer_norm(res1, P["g1"], P["be1"], eps=1e-12, name="ln1")
    up = nn.gelu(nn.dense(h, P["w1"], P["b1"], name="ffn_up"), name="ffn_gelu")
    down = nn.dense(up, P["w2"], P["b2"], name="ffn_down")
    res2 = tc.compute((n, hidden), lambda r, c: down[r, c] + h[r, c], name="res2")
    y = nn.layer_norm(res2, P["g2"], P["be2"], eps=1e-12, name="ln2")
    return [X, M] + [P[k] for k in PARAMS], y


def torch_layer(x, mask, p, batch, seq, heads=12):
    """The same layer in PyTorch (Hugging Face's BertLayer, eval mode)."""
    n, hidden = x.shape
    dh = hidden // heads

    def split(t):
        return t.view(batch, seq, heads, dh).transpose(1, 2)

    q = split(F.linear(x, p["wq"], p["bq"]))
    k = split(F.linear(x, p["wk"], p["bk"]))
    v = split(F.linear(x, p["wv"], p["bv"]))
    s = q @ k.transpose(-1, -2) / math.sqrt(dh) + mask[:, None, None, :]
    c = (torch.softmax(s, -1) @ v).transpose(1, 2).reshape(n, hidden)
    h = F.layer_norm(F.linear(c, p["wo"], p["bo"]) + x, (hidden,), p["g1"], p["be1"], 1e-12)
    f = F.linear(F.gelu(F.linear(h, p["w1"], p["b1"])), p["w2"], p["b2"])
    return F.layer_norm(f + h, (hidden,), p["g2"], p["be2"], 1e-12)


def random_inputs(batch, seq, hidden, ffn, gen):
    x = torch.randn(batch * seq, hidden, generator=gen)
    mask = torch.zeros(batch, seq)
    mask[:, seq - seq // 8:] = -10000.0          # the last eighth is padding
    p = {}
    for k, s in shapes(hidden, ffn).items():
        if k.startswith("g"):
            p[k] = 1 + 0.1 * torch.randn(s, generator=gen)
        elif k.startswith("b"):
            p[k] = 0.02 * torch.randn(s, generator=gen)
        else:
            p[k] = torch.randn(s, generator=gen) / math.sqrt(s[1])
    return x, mask, p


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--ffn", type=int, default=3072)
    ap.add_argument("--backward", action="store_true", help="also check and time the backward")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--attention", choices=["fused", "unfused"], default="fused",
                    help="nn.scaled_dot_product_attention, or batched matmuls and a softmax")
    args = ap.parse_args(argv)
    b, s = args.batch, args.seq
    gen = torch.Generator().manual_seed(0)
    x, mask, p = random_inputs(b, s, args.hidden, args.ffn, gen)
    ins, y = bert_layer(b, s, args.hidden, args.heads, args.ffn,
                        fused=args.attention == "fused")
    layer = tct.op(ins, y, name="bert_layer")
    t0 = time.perf_counter()
    params = [p[k] for k in PARAMS]
    with torch.no_grad():
        out = layer(x, mask, *params)
    print(f"tecomp forward compiled and run in {time.perf_counter() - t0:.1f} s")
    with torch.no_grad():
        ref = torch_layer(x, mask, p, b, s, args.heads)
    err = (out - ref).abs().max().item()
    print(f"forward: max |tecomp - torch| = {err:.2e}")
    ok = err < 1e-3
    if args.backward:
        xs = x.clone().requires_grad_()
        ps = [t.clone().requires_grad_() for t in params]
        g = torch.randn(out.shape, generator=gen)
        t0 = time.perf_counter()
        layer(xs, mask, *ps).backward(g)
        print(f"tecomp backward compiled and run in {time.perf_counter() - t0:.1f} s")
        xr = x.clone().requires_grad_()
        pr = {k: t.clone().requires_grad_() for k, t in p.items()}
        torch_layer(xr, mask, pr, b, s, args.heads).backward(g)
        pairs = list(zip([xs] + ps, [xr] + [pr[k] for k in PARAMS]))
        scale = max(r.grad.abs().max().item() for _, r in pairs)
        # (relative to the largest gradient element of all: bk's gradient is 0 up to
        # rounding, as softmax does not change when a row is shifted)
        worst = max((a.grad - r.grad).abs().max().item() for a, r in pairs) / scale
        print(f"backward: largest gradient difference, relative to the largest gradient "
              f"element: {worst:.2e}")
        ok = ok and worst < 1e-3
    # timing, interleaved: each tool's turn is an untimed call, then a timed one (the first
    # absorbs the other tool's threads still spinning after its call -- PyTorch's OpenMP
    # workers spin for a while by default -- and wakes this tool's own threads)
    def step(name):
        if args.backward:
            xs.grad = None
            for t in ps:
                t.grad = None
            for t in pr.values():
                t.grad = None
            if name == "tecomp":
                layer(xs, mask, *ps).backward(g)
            else:
                torch_layer(xr, mask, pr, b, s, args.heads).backward(g)
        else:
            with torch.no_grad():
                if name == "tecomp":
                    layer(x, mask, *params)
                else:
                    torch_layer(x, mask, p, b, s, args.heads)

    times = {"tecomp": [], "torch": []}
    for r in range(args.rounds):
        for name in (("tecomp", "torch") if r % 2 == 0 else ("torch", "tecomp")):
            step(name)
            t0 = time.perf_counter()
            step(name)
            times[name].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    what = "forward + backward" if args.backward else "forward"
    print(f"{what}, batch {b}, seq {s}: tecomp {med['tecomp'] * 1e3:.2f} ms, PyTorch "
          f"{med['torch'] * 1e3:.2f} ms ({med['torch'] / med['tecomp']:.2f}x PyTorch's speed; "
          f"{torch.get_num_threads()} torch threads, {tc.get_num_threads()} tecomp threads)")
    print("OK" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
