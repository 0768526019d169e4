"""Operators a user writes in plain TE, scheduled by ``tc.auto_schedule(args)`` (trials=0), against PyTorch.

Row compositions on 4096 x 1024 float32, each written as several computes the way a
user would (no ``tecomp.nn``): a softmax as four (row max, ``exp(x - max)``, row sum,
divide), a log-softmax as three, a layer norm as five (row sum, centred values, sum of
squares, ``rsqrt``, the affine output) and a softmax with a temperature written
differently (an ``(M, 1)`` row max, a multiply by a per-row reciprocal); and a causal
depthwise conv1d, 4 x 1536 x 1024 with 4 taps (``y[b, c, t] = sum_k x[b, c, t - k] *
w[c, k]``).  Each also against the trivial schedule
(:func:`tecomp.strategy.trivial.trivial_schedule`: every
stage's outer axes fused and parallel, its last one vectorized), the floor the
default should never fall below.  Against
PyTorch's fused operators (``softmax``, ``log_softmax``, ``layer_norm``, with
preallocated results where PyTorch has an ``out=`` form) and, for the softmax and the
layer norm, tecomp's own templates (``tecomp.nn``).  Interleaved in one process, medians
in ms (the peer's time over tecomp's: > 1 means tecomp is faster); every result is
checked against a float64 reference first.

    python3 benchmarks/plain_te.py [--threads 2] [--rounds 15] [--ab [FLAG,...]]
        [--threads 1 --cpu-time]

``--cpu-time`` (with ``--threads 1``): each call timed by the process's CPU time, which
on a loaded machine leaves out the time other processes run.  ``--ab`` also times each
composition scheduled and lowered with the switches of :data:`AB_SWITCHES` off
("before"; ``--ab STREAM_ROWS,STREAM_ALONE``: only those), interleaved
with the rest.
"""
from __future__ import annotations

import importlib
import platform

from common import (add_cpu_time, base_parser, clock_of, interleaved_turns, pin_threads,
                    torch_or_none)


#: (module, flag): what ``--ab`` turns off for its "before" builds
AB_SWITCHES = (("tecomp.lower.prefetch", "WIDE_STREAMS"),
               ("tecomp.strategy.rules", "RECOMPUTE_IN_ROWS"),
               ("tecomp.strategy.rules", "RECIPROCAL_ROWS"),
               ("tecomp.strategy.rules", "STREAM_ROWS"),
               ("tecomp.strategy.blocks", "ONE_ROW_WITHOUT_SHARED_LOADS"),
               ("tecomp.strategy.blocks", "STREAM_ALONE"))


def _build_with(tc, targs, on: bool, only=None):
    """``tc.build(tc.auto_schedule(targs), targs)`` with every switch of
    :data:`AB_SWITCHES` (or those whose flag is in ``only``) set to ``on``."""
    mods = [(importlib.import_module(m), f) for m, f in AB_SWITCHES
            if only is None or f in only]
    old = [getattr(m, f) for m, f in mods]
    try:
        for m, f in mods:
            setattr(m, f, on)
        return tc.build(tc.auto_schedule(targs), targs)
    finally:
        for (m, f), v in zip(mods, old):
            setattr(m, f, v)


def main() -> None:
    ap = base_parser(__doc__, rounds=15)
    ap.add_argument("--ab", nargs="?", const="all", default=None, metavar="FLAG,...",
                    help="also time the compositions with AB_SWITCHES off (before); "
                         "with flags named, only those off")
    add_cpu_time(ap)
    args = ap.parse_args()
    clock = clock_of(ap, args)
    pin_threads(args.threads)
    import numpy as np

    import tecomp as tc
    import tecomp.nn as nn
    from tecomp.strategy.trivial import trivial_schedule

    torch = torch_or_none(args.threads)
    M, N = 4096, 1024
    rng = np.random.default_rng(0)
    x = tc.aligned(rng.standard_normal((M, N)).astype("float32"))
    g = tc.aligned(rng.standard_normal(N).astype("float32"))
    b = tc.aligned(rng.standard_normal(N).astype("float32"))
    out = tc.empty((M, N), "float32")
    x64 = x.astype(np.float64)

    X = tc.placeholder((M, N), name="x")
    G, B = tc.placeholder((N,), name="g"), tc.placeholder((N,), name="b")

    def row(name):
        return tc.reduce_axis((0, N), name=name)

    # softmax as four computes
    k = row("k")
    mx = tc.compute((M,), lambda i: tc.max(X[i, k], axis=k), name="rowmax")
    E = tc.compute((M, N), lambda i, j: tc.exp(X[i, j] - mx[i]), name="e")
    k2 = row("k2")
    S = tc.compute((M,), lambda i: tc.sum(E[i, k2], axis=k2), name="rowsum")
    softmax4 = tc.compute((M, N), lambda i, j: E[i, j] / S[i], name="softmax")
    # log-softmax as three
    k = row("k")
    mx3 = tc.compute((M,), lambda i: tc.max(X[i, k], axis=k), name="rowmax")
    k2 = row("k2")
    S3 = tc.compute((M,), lambda i: tc.sum(tc.exp(X[i, k2] - mx3[i]), axis=k2), name="rowsum")
    logsoftmax3 = tc.compute((M, N), lambda i, j: X[i, j] - mx3[i] - tc.log(S3[i]),
                             name="log_softmax")
    # layer norm as five
    k = row("k")
    tot = tc.compute((M,), lambda i: tc.sum(X[i, k], axis=k), name="total")
    C = tc.compute((M, N), lambda i, j: X[i, j] - tot[i] / N, name="centered")
    k2 = row("k2")
    ss = tc.compute((M,), lambda i: tc.sum(C[i, k2] * C[i, k2], axis=k2), name="sumsq")
    rstd = tc.compute((M,), lambda i: tc.rsqrt(ss[i] / N + 1e-5), name="rstd")
    layernorm5 = tc.compute((M, N), lambda i, j: C[i, j] * rstd[i] * G[j] + B[j], name="ln")
    # a softmax with a temperature, written differently
    k = row("k")
    m1 = tc.compute((M, 1), lambda i, _: tc.max(X[i, k], axis=k), name="m")
    Es = tc.compute((M, N), lambda r, c: tc.exp((X[r, c] - m1[r, 0]) * 0.5), name="scaled")
    k2 = row("k2")
    Z = tc.compute((M,), lambda i: tc.sum(Es[i, k2], axis=k2), name="z")
    inv = tc.compute((M,), lambda i: 1.0 / Z[i], name="inv")
    scaled = tc.compute((M, N), lambda r, c: Es[r, c] * inv[r], name="p")

    def sm(v):
        e = np.exp(v - v.max(1, keepdims=True))
        return e / e.sum(1, keepdims=True)

    cen = x64 - x64.mean(1, keepdims=True)
    want = {
        "softmax as 4 computes": sm(x64),
        "log-softmax as 3": x64 - x64.max(1, keepdims=True) - np.log(
            np.exp(x64 - x64.max(1, keepdims=True)).sum(1, keepdims=True)),
        "layer norm as 5": cen / np.sqrt((cen * cen).mean(1, keepdims=True) + 1e-5) * g + b,
        "softmax, temperature 2": sm(x64 * 0.5),
    }
    # a causal depthwise conv1d
    Bc, Cc, Tc, Kc = 4, 1536, 1024, 4
    Xc, Wc = tc.placeholder((Bc, Cc, Tc), name="xc"), tc.placeholder((Cc, Kc), name="wc")
    kc = tc.reduce_axis(Kc, name="kc")
    conv1d = tc.compute((Bc, Cc, Tc), lambda b_, c, t: tc.sum(tc.if_then_else(
        t - kc >= 0, Xc[b_, c, t - kc] * Wc[c, kc], 0.0), axis=kc), name="conv1d")
    xc = tc.aligned(rng.standard_normal((Bc, Cc, Tc)).astype("float32"))
    wc = tc.aligned(rng.standard_normal((Cc, Kc)).astype("float32"))
    outc = tc.empty((Bc, Cc, Tc), "float32")
    want["causal depthwise conv1d"] = sum(
        np.pad(xc.astype(np.float64), ((0, 0), (0, 0), (j, 0)))[:, :, :Tc] * wc[None, :, j, None]
        for j in range(Kc))
    plain = {"softmax as 4 computes": ([X, softmax4], (x,), out),
             "log-softmax as 3": ([X, logsoftmax3], (x,), out),
             "layer norm as 5": ([X, G, B, layernorm5], (x, g, b), out),
             "softmax, temperature 2": ([X, scaled], (x,), out),
             "causal depthwise conv1d": ([Xc, Wc, conv1d], (xc, wc), outc)}
    lanes = tc.target.cpu_model().lanes
    fns, peers = {}, {}

    def add(label, f, arrays, o, name):
        f(*arrays, o)
        # (the conv1d's sums of four products are larger than a probability)
        np.testing.assert_allclose(o, want[name], rtol=2e-5,
                                   atol=2e-5 if o is outc else 2e-6)
        fns[label] = lambda: f(*arrays, o)

    for name, (targs, arrays, o) in plain.items():
        add("tecomp " + name, tc.build(tc.auto_schedule(targs), targs), arrays, o, name)
        peers[name] = []
        if args.ab:
            only = None if args.ab == "all" else set(args.ab.split(","))
            add("before " + name, _build_with(tc, targs, False, only), arrays, o, name)
            peers[name].append("before " + name)
        add("trivial " + name, tc.build(trivial_schedule(targs, lanes), targs),
            arrays, o, name)
        peers[name].append("trivial " + name)
    # tecomp's templates
    Ts = nn.softmax(X)
    f_sm = tc.build(tc.strategy.cpu.schedule_softmax([Ts]), [X, Ts])
    f_sm(x, out)
    np.testing.assert_allclose(out, want["softmax as 4 computes"], rtol=2e-5, atol=2e-6)
    fns["tecomp.nn.softmax"] = lambda: f_sm(x, out)
    peers["softmax as 4 computes"].append("tecomp.nn.softmax")
    Tl = nn.layer_norm(X, G, B, eps=1e-5)
    s_ln = tc.auto_schedule([X, G, B, Tl])
    f_ln = tc.build(s_ln, [X, G, B, Tl])
    f_ln(x, g, b, out)
    np.testing.assert_allclose(out, want["layer norm as 5"], rtol=2e-5, atol=2e-6)
    fns["tecomp.nn.layer_norm"] = lambda: f_ln(x, g, b, out)
    peers["layer norm as 5"].append("tecomp.nn.layer_norm")
    if torch is not None:
        tx, tg, tb, to = (torch.from_numpy(a) for a in (x, g, b, out))
        F = torch.nn.functional
        fns["torch softmax, out="] = lambda: torch.softmax(tx, 1, out=to)
        fns["torch log_softmax, out="] = lambda: torch.log_softmax(tx, 1, out=to)
        fns["torch layer_norm"] = lambda: F.layer_norm(tx, (N,), tg, tb, 1e-5)
        fns["torch softmax(x * 0.5)"] = lambda: torch.softmax(tx * 0.5, 1)
        # (PyTorch's conv1d correlates: the taps reversed, the row padded on the left)
        txc = torch.from_numpy(xc)
        twc = torch.from_numpy(np.ascontiguousarray(wc[:, ::-1])).reshape(Cc, 1, Kc)
        np.testing.assert_allclose(F.conv1d(F.pad(txc, (Kc - 1, 0)), twc, groups=Cc).numpy(),
                                   want["causal depthwise conv1d"], rtol=2e-5, atol=2e-5)
        fns["torch conv1d(pad(x))"] = lambda: F.conv1d(F.pad(txc, (Kc - 1, 0)), twc, groups=Cc)
        for name, peer in (("softmax as 4 computes", "torch softmax, out="),
                           ("log-softmax as 3", "torch log_softmax, out="),
                           ("layer norm as 5", "torch layer_norm"),
                           ("softmax, temperature 2", "torch softmax(x * 0.5)"),
                           ("causal depthwise conv1d", "torch conv1d(pad(x))")):
            peers[name].append(peer)
    t = interleaved_turns(fns, args.rounds, **clock)
    print(f"{platform.processor() or platform.machine()}, {args.threads} threads, "
          f"{args.rounds} rounds, {M}x{N} float32 (conv1d {Bc}x{Cc}x{Tc}, {Kc} taps), "
          "tecomp auto_schedule trials=0")
    for name in plain:
        mine = t["tecomp " + name]
        line = f"  {name:24s} tecomp {mine * 1e3:6.2f} ms"
        for peer in peers[name]:
            line += f" | {peer} {t[peer] * 1e3:6.2f} ms, ratio {t[peer] / mine:.2f}x"
        print(line)


if __name__ == "__main__":
    main()
