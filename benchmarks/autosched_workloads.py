"""The auto-scheduling benchmark's workloads (benchmarks/tune.py).

Each workload gives the same computation to every tool:

* ``tecomp()``: the tecomp argument list (placeholders, then the outputs), with no schedule;
* ``inputs``: numpy arrays (fixed seed), ``reference()``: float64 outputs;
* ``torch(t)``: a function of the inputs as torch tensors that PyTorch eager runs;
* ``halide(hl)``: the pipeline written in Halide (fresh Funcs each call, with estimates
  for the autoscheduler): ``(input ImageParams, output Funcs)``; Halide's dimensions are
  listed innermost first, so ``C[j, i]`` is numpy's ``C[i, j]``;
* ``te(te)``: the pipeline as TVM TE tensors (inputs, then outputs) for MetaSchedule, or,
  where MetaSchedule cannot take it as one function, a dict of kernels run in order
  (:func:`te_kernels`).
"""
from __future__ import annotations

import zlib

import numpy as np

import tecomp as tc
import tecomp.nn as nn


class W:
    def __init__(self, name, flops, shapes, tecomp, ref, torch=None, halide=None, te=None,
                 note=""):
        self.name, self.flops, self.note = name, flops, note
        # a stable seed (str hashes change from one process to the next)
        rng = np.random.default_rng(zlib.crc32(name.encode()))
        # 64-byte aligned, as TVM's and PyTorch's allocators give (numpy's large arrays
        # start 16 bytes past a cache line): every tool reads the same aligned arrays
        # (benchmarks/DECISIONS.md, "Benchmarks: aligned arrays")
        self.inputs = [tc.aligned(rng.uniform(-1, 1, s).astype("float32")) for s in shapes]
        self._tecomp, self._ref = tecomp, ref
        self.torch, self.halide, self.te = torch, halide, te

    def tecomp(self):
        return self._tecomp()

    def reference(self):
        out = self._ref(*[x.astype("float64") for x in self.inputs])
        return list(out) if isinstance(out, tuple) else [out]


def te_kernels(w, te):
    """The TVM version of ``w`` as kernels run in order: ``([[(key, tensor), ...], ...],
    input keys, output keys)``, a kernel's arguments listed as ``te.create_prim_func``
    takes them.  ``w.te`` gives one kernel's tensors (the workload's inputs, then its
    outputs), or ``{"kernels": [[tensors], ...], "inputs": [names], "outputs": [names]}``,
    where the kernels pass tensors to each other by name."""
    spec = w.te(te)
    if isinstance(spec, dict):
        return ([[(t.op.name, t) for t in k] for k in spec["kernels"]], spec["inputs"],
                spec["outputs"])
    n = len(w.inputs)
    keys = [f"in{i}" for i in range(n)] + [f"out{i}" for i in range(len(spec) - n)]
    return [list(zip(keys, spec))], keys[:n], keys[n:]


def _rdom(hl, *extents):
    return hl.RDom([(0, e) for e in extents])


# ---------------------------------------------------------------------------------------
# batched matmuls (attention)


def bmm_scores(B=12, M=128, N=128, D=64):
    def tecomp():
        Q = tc.placeholder((B, M, D), name="Q")
        K = tc.placeholder((B, N, D), name="K")
        k = tc.reduce_axis((0, D), name="k")
        S = tc.compute((B, M, N), lambda b, i, j: tc.sum(Q[b, i, k] * K[b, j, k], axis=k),
                       name="S")
        return [Q, K, S]

    def halide(hl):
        Q = hl.ImageParam(hl.Float(32), 3, "Q")
        K = hl.ImageParam(hl.Float(32), 3, "K")
        j, i, b = hl.Var("j"), hl.Var("i"), hl.Var("b")
        r = _rdom(hl, D)
        S = hl.Func("S")
        S[j, i, b] = 0.0
        S[j, i, b] += Q[r.x, i, b] * K[r.x, j, b]
        Q.set_estimates([(0, D), (0, M), (0, B)])
        K.set_estimates([(0, D), (0, N), (0, B)])
        S.set_estimates([(0, N), (0, M), (0, B)])
        return [Q, K], [S]

    def te(te):
        Q = te.placeholder((B, M, D), name="Q")
        K = te.placeholder((B, N, D), name="K")
        k = te.reduce_axis((0, D), name="k")
        S = te.compute((B, M, N), lambda b, i, j: te.sum(Q[b, i, k] * K[b, j, k], axis=k))
        return [Q, K, S]

    return W(f"bmm Q.K^T {B}x{M}x{N}x{D}", 2.0 * B * M * N * D, [(B, M, D), (B, N, D)],
             tecomp, lambda q, k: np.einsum("bik,bjk->bij", q, k),
             lambda q, k: q @ k.transpose(1, 2), halide, te)


def bmm_av(B=12, M=128, N=128, D=64):
    def tecomp():
        P = tc.placeholder((B, M, N), name="P")
        V = tc.placeholder((B, N, D), name="V")
        j = tc.reduce_axis((0, N), name="j")
        O = tc.compute((B, M, D), lambda b, i, d: tc.sum(P[b, i, j] * V[b, j, d], axis=j),
                       name="O")
        return [P, V, O]

    def halide(hl):
        P = hl.ImageParam(hl.Float(32), 3, "P")
        V = hl.ImageParam(hl.Float(32), 3, "V")
        d, i, b = hl.Var("d"), hl.Var("i"), hl.Var("b")
        r = _rdom(hl, N)
        O = hl.Func("O")
        O[d, i, b] = 0.0
        O[d, i, b] += P[r.x, i, b] * V[d, r.x, b]
        P.set_estimates([(0, N), (0, M), (0, B)])
        V.set_estimates([(0, D), (0, N), (0, B)])
        O.set_estimates([(0, D), (0, M), (0, B)])
        return [P, V], [O]

    def te(te):
        P = te.placeholder((B, M, N), name="P")
        V = te.placeholder((B, N, D), name="V")
        j = te.reduce_axis((0, N), name="j")
        O = te.compute((B, M, D), lambda b, i, d: te.sum(P[b, i, j] * V[b, j, d], axis=j))
        return [P, V, O]

    return W(f"bmm P.V {B}x{M}x{N}x{D}", 2.0 * B * M * N * D, [(B, M, N), (B, N, D)], tecomp,
             lambda p, v: p @ v, lambda p, v: p @ v, halide, te)


# ---------------------------------------------------------------------------------------
# GEMMs


def _gemm_halide(M, N, K, a_t=False, b_t=False):
    """C[i, j] = sum_k A * B; A stored [M, K] (or [K, M] with a_t), B [K, N] (or [N, K])."""
    def halide(hl):
        A = hl.ImageParam(hl.Float(32), 2, "A")
        B = hl.ImageParam(hl.Float(32), 2, "B")
        j, i = hl.Var("j"), hl.Var("i")
        r = _rdom(hl, K)
        C = hl.Func("C")
        C[j, i] = 0.0
        a = A[i, r.x] if a_t else A[r.x, i]
        b = B[r.x, j] if b_t else B[j, r.x]
        C[j, i] += a * b
        A.set_estimates([(0, M), (0, K)] if a_t else [(0, K), (0, M)])
        B.set_estimates([(0, K), (0, N)] if b_t else [(0, N), (0, K)])
        C.set_estimates([(0, N), (0, M)])
        return [A, B], [C]
    return halide


def _gemm_te(M, N, K, a_t=False, b_t=False):
    def te_(te):
        A = te.placeholder((K, M) if a_t else (M, K), name="A")
        B = te.placeholder((N, K) if b_t else (K, N), name="B")
        k = te.reduce_axis((0, K), name="k")
        C = te.compute((M, N), lambda i, j: te.sum(
            (A[k, i] if a_t else A[i, k]) * (B[j, k] if b_t else B[k, j]), axis=k))
        return [A, B, C]
    return te_


def gemm(M, N, K):
    def tecomp():
        A = tc.placeholder((M, K), name="A")
        B = tc.placeholder((K, N), name="B")
        return [A, B, nn.matmul(A, B)]
    name = f"gemm {M}^3" if M == N == K else f"gemm {M}x{N}x{K}"
    return W(name, 2.0 * M * N * K, [(M, K), (K, N)], tecomp, lambda a, b: a @ b,
             lambda a, b: a @ b, _gemm_halide(M, N, K), _gemm_te(M, N, K))


def dense(Bt=61, I=1024, O=1000):
    def tecomp():
        X = tc.placeholder((Bt, I), name="X")
        Wt = tc.placeholder((O, I), name="W")
        return [X, Wt, nn.dense(X, Wt)]
    return W(f"dense {Bt}x{I} -> {O}", 2.0 * Bt * I * O, [(Bt, I), (O, I)], tecomp,
             lambda x, w: x @ w.T, lambda x, w: x @ w.t(), _gemm_halide(Bt, O, I, b_t=True),
             _gemm_te(Bt, O, I, b_t=True))


def atb(M=1024, N=1024, K=512):
    def tecomp():
        A = tc.placeholder((K, M), name="A")
        B = tc.placeholder((K, N), name="B")
        k = tc.reduce_axis((0, K), name="k")
        C = tc.compute((M, N), lambda i, j: tc.sum(A[k, i] * B[k, j], axis=k), name="C")
        return [A, B, C]
    return W(f"A^T B {M}x{N}x{K}", 2.0 * M * N * K, [(K, M), (K, N)], tecomp,
             lambda a, b: a.T @ b, lambda a, b: a.t() @ b, _gemm_halide(M, N, K, a_t=True),
             _gemm_te(M, N, K, a_t=True))


# ---------------------------------------------------------------------------------------
# convolutions


def depthwise(C=64, H=56, Wd=56):
    def tecomp():
        X = tc.placeholder((1, C, H, Wd), name="X")
        Wt = tc.placeholder((C, 3, 3), name="W")
        P = tc.compute((1, C, H + 2, Wd + 2), lambda n, c, y, x: tc.if_then_else(
            tc.all(y >= 1, y <= H, x >= 1, x <= Wd), X[n, c, y - 1, x - 1], 0.0), name="P")
        ry = tc.reduce_axis((0, 3), name="ry")
        rx = tc.reduce_axis((0, 3), name="rx")
        O = tc.compute((1, C, H, Wd), lambda n, c, y, x: tc.sum(
            P[n, c, y + ry, x + rx] * Wt[c, ry, rx], axis=[ry, rx]), name="O")
        return [X, Wt, O]

    def ref(x, w):
        xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
        o = np.zeros((1, C, H, Wd))
        for a in range(3):
            for b in range(3):
                o += xp[:, :, a:a + H, b:b + Wd] * w[None, :, a, b, None, None]
        return o

    def torch_(x, w):
        import torch

        return torch.nn.functional.conv2d(x, w[:, None], padding=1, groups=C)

    def halide(hl):
        X = hl.ImageParam(hl.Float(32), 4, "X")
        Wt = hl.ImageParam(hl.Float(32), 3, "W")
        x, y, c, n = hl.Var("x"), hl.Var("y"), hl.Var("c"), hl.Var("n")
        P = hl.BoundaryConditions.constant_exterior(X, 0.0, [(0, Wd), (0, H)])
        r = _rdom(hl, 3, 3)
        O = hl.Func("O")
        O[x, y, c, n] = 0.0
        O[x, y, c, n] += P[x + r.x - 1, y + r.y - 1, c, n] * Wt[r.x, r.y, c]
        X.set_estimates([(0, Wd), (0, H), (0, C), (0, 1)])
        Wt.set_estimates([(0, 3), (0, 3), (0, C)])
        O.set_estimates([(0, Wd), (0, H), (0, C), (0, 1)])
        return [X, Wt], [O]

    def te_(te):
        X = te.placeholder((1, C, H, Wd), name="X")
        Wt = te.placeholder((C, 3, 3), name="W")
        P = te.compute((1, C, H + 2, Wd + 2), lambda n, c, y, x: te.if_then_else(
            te.all(y >= 1, y <= H, x >= 1, x <= Wd), X[n, c, y - 1, x - 1], 0.0))
        ry = te.reduce_axis((0, 3), name="ry")
        rx = te.reduce_axis((0, 3), name="rx")
        O = te.compute((1, C, H, Wd), lambda n, c, y, x: te.sum(
            P[n, c, y + ry, x + rx] * Wt[c, ry, rx], axis=[ry, rx]))
        return [X, Wt, O]

    return W(f"depthwise 3x3 {C}x{H}x{Wd}", 2.0 * C * H * Wd * 9, [(1, C, H, Wd), (C, 3, 3)],
             tecomp, ref, torch_, halide, te_)


def conv1x1(C=256, K=256, H=14, Wd=14):
    def tecomp():
        X = tc.placeholder((1, C, H, Wd), name="X")
        Wt = tc.placeholder((K, C), name="W")
        c = tc.reduce_axis((0, C), name="c")
        O = tc.compute((1, K, H, Wd), lambda n, k, y, x: tc.sum(X[n, c, y, x] * Wt[k, c],
                                                                axis=c), name="O")
        return [X, Wt, O]

    def torch_(x, w):
        import torch

        return torch.nn.functional.conv2d(x, w[:, :, None, None])

    def halide(hl):
        X = hl.ImageParam(hl.Float(32), 4, "X")
        Wt = hl.ImageParam(hl.Float(32), 2, "W")
        x, y, k, n = hl.Var("x"), hl.Var("y"), hl.Var("k"), hl.Var("n")
        r = _rdom(hl, C)
        O = hl.Func("O")
        O[x, y, k, n] = 0.0
        O[x, y, k, n] += X[x, y, r.x, n] * Wt[r.x, k]
        X.set_estimates([(0, Wd), (0, H), (0, C), (0, 1)])
        Wt.set_estimates([(0, C), (0, K)])
        O.set_estimates([(0, Wd), (0, H), (0, K), (0, 1)])
        return [X, Wt], [O]

    def te_(te):
        X = te.placeholder((1, C, H, Wd), name="X")
        Wt = te.placeholder((K, C), name="W")
        c = te.reduce_axis((0, C), name="c")
        O = te.compute((1, K, H, Wd), lambda n, k, y, x: te.sum(X[n, c, y, x] * Wt[k, c],
                                                                axis=c))
        return [X, Wt, O]

    return W(f"conv 1x1 {C}->{K} {H}x{Wd}", 2.0 * C * K * H * Wd, [(1, C, H, Wd), (K, C)],
             tecomp, lambda x, w: np.einsum("ncyx,kc->nkyx", x, w), torch_, halide, te_)


def conv_relu(C=64, K=64, H=56, Wd=56):
    def tecomp():
        X = tc.placeholder((1, C, H, Wd), name="X")
        Wt = tc.placeholder((K, C, 3, 3), name="W")
        b = tc.placeholder((K,), name="b")
        return [X, Wt, b, nn.relu(nn.bias_add(nn.conv2d_nchw(X, Wt, padding=1), b))]

    def ref(x, w, b):
        xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
        o = np.zeros((1, K, H, Wd)) + b[None, :, None, None]
        for a in range(3):
            for c in range(3):
                o += np.einsum("ncyx,kc->nkyx", xp[:, :, a:a + H, c:c + Wd], w[:, :, a, c])
        return np.maximum(o, 0.0)

    def torch_(x, w, b):
        import torch

        return torch.relu(torch.nn.functional.conv2d(x, w, b, padding=1))

    def halide(hl):
        X = hl.ImageParam(hl.Float(32), 4, "X")
        Wt = hl.ImageParam(hl.Float(32), 4, "W")
        bb = hl.ImageParam(hl.Float(32), 1, "b")
        x, y, k, n = hl.Var("x"), hl.Var("y"), hl.Var("k"), hl.Var("n")
        P = hl.BoundaryConditions.constant_exterior(X, 0.0, [(0, Wd), (0, H)])
        r = hl.RDom([(0, 3), (0, 3), (0, C)])
        conv = hl.Func("conv")
        conv[x, y, k, n] = bb[k]
        conv[x, y, k, n] += P[x + r.x - 1, y + r.y - 1, r.z, n] * Wt[r.x, r.y, r.z, k]
        O = hl.Func("O")
        O[x, y, k, n] = hl.max(conv[x, y, k, n], 0.0)
        X.set_estimates([(0, Wd), (0, H), (0, C), (0, 1)])
        Wt.set_estimates([(0, 3), (0, 3), (0, C), (0, K)])
        bb.set_estimates([(0, K)])
        O.set_estimates([(0, Wd), (0, H), (0, K), (0, 1)])
        return [X, Wt, bb], [O]

    def te_(te):
        X = te.placeholder((1, C, H, Wd), name="X")
        Wt = te.placeholder((K, C, 3, 3), name="W")
        b = te.placeholder((K,), name="b")
        P = te.compute((1, C, H + 2, Wd + 2), lambda n, c, y, x: te.if_then_else(
            te.all(y >= 1, y <= H, x >= 1, x <= Wd), X[n, c, y - 1, x - 1], 0.0))
        rc = te.reduce_axis((0, C), name="rc")
        ry = te.reduce_axis((0, 3), name="ry")
        rx = te.reduce_axis((0, 3), name="rx")
        conv = te.compute((1, K, H, Wd), lambda n, k, y, x: te.sum(
            P[n, rc, y + ry, x + rx] * Wt[k, rc, ry, rx], axis=[rc, ry, rx]))
        O = te.compute((1, K, H, Wd), lambda n, k, y, x: te.max(conv[n, k, y, x] + b[k], 0.0))
        return [X, Wt, b, O]

    return W(f"conv 3x3 {C}->{K} {H}x{Wd} +bias+relu", 2.0 * C * K * H * Wd * 9,
             [(1, C, H, Wd), (K, C, 3, 3), (K,)], tecomp, ref, torch_, halide, te_)


# ---------------------------------------------------------------------------------------
# row-wise


def _layer_norm_tc(X, g, b, R, C, eps):
    """Layer norm over rows as a user writes it: plain computes, no tecomp.nn."""
    k = tc.reduce_axis((0, C), name="k")
    mean = tc.compute((R,), lambda i: tc.sum(X[i, k] * (1.0 / C), axis=k), name="mean")
    k2 = tc.reduce_axis((0, C), name="k2")
    var = tc.compute((R,), lambda i: tc.sum((X[i, k2] - mean[i]) * (X[i, k2] - mean[i])
                                            * (1.0 / C), axis=k2), name="var")
    rstd = tc.compute((R,), lambda i: tc.rsqrt(var[i] + eps), name="rstd")
    return tc.compute((R, C), lambda i, j: (X[i, j] - mean[i]) * rstd[i] * g[j] + b[j],
                      name="Y")


def _layer_norm_halide(hl, X, g, bb, C, eps, name):
    """Layer norm over the rows of ``X[j, i]`` (j the C columns) as Halide Funcs: the
    output Func and its two Vars."""
    j, i = hl.Var("j"), hl.Var("i")
    r = _rdom(hl, C)
    mean = hl.Func("mean")
    mean[i] = 0.0
    mean[i] += X[r.x, i] * hl.f32(1.0 / C)
    var = hl.Func("var")
    var[i] = 0.0
    var[i] += (X[r.x, i] - mean[i]) * (X[r.x, i] - mean[i]) * hl.f32(1.0 / C)
    invstd = hl.Func("invstd")
    invstd[i] = 1.0 / hl.sqrt(var[i] + hl.f32(eps))
    out = hl.Func(name)
    out[j, i] = (X[j, i] - mean[i]) * invstd[i] * g[j] + bb[j]
    return out, j, i


def layer_norm(R=4096, C=768, eps=1e-5):
    def tecomp():
        X = tc.placeholder((R, C), name="X")
        g = tc.placeholder((C,), name="g")
        b = tc.placeholder((C,), name="b")
        return [X, g, b, _layer_norm_tc(X, g, b, R, C, eps)]

    def ref(x, g, b):
        m = x.mean(1, keepdims=True)
        v = ((x - m) ** 2).mean(1, keepdims=True)
        return (x - m) / np.sqrt(v + eps) * g + b

    def torch_(x, g, b):
        import torch

        return torch.nn.functional.layer_norm(x, (C,), g, b, eps)

    def halide(hl):
        X = hl.ImageParam(hl.Float(32), 2, "X")
        g = hl.ImageParam(hl.Float(32), 1, "g")
        bb = hl.ImageParam(hl.Float(32), 1, "b")
        O, j, i = _layer_norm_halide(hl, X, g, bb, C, eps, "O")
        X.set_estimates([(0, C), (0, R)])
        g.set_estimates([(0, C)])
        bb.set_estimates([(0, C)])
        O.set_estimates([(0, C), (0, R)])
        return [X, g, bb], [O]

    def te_(te):
        import tvm

        X = te.placeholder((R, C), name="X")
        g = te.placeholder((C,), name="g")
        b = te.placeholder((C,), name="b")
        k = te.reduce_axis((0, C), name="k")
        mean = te.compute((R,), lambda i: te.sum(X[i, k] * (1.0 / C), axis=k))
        k2 = te.reduce_axis((0, C), name="k2")
        var = te.compute((R,), lambda i: te.sum((X[i, k2] - mean[i]) * (X[i, k2] - mean[i])
                                                * (1.0 / C), axis=k2))
        O = te.compute((R, C), lambda i, j: (X[i, j] - mean[i]) * tvm.tirx.rsqrt(var[i] + eps)
                       * g[j] + b[j])
        return [X, g, b, O]

    return W(f"layer norm {R}x{C}", 8.0 * R * C, [(R, C), (C,), (C,)], tecomp, ref, torch_,
             halide, te_, note="GFLOP/s counts 8 flops per element")


def row_reduce(R=4096, C=1024, mean=False):
    s = 1.0 / C if mean else 1.0

    def tecomp():
        X = tc.placeholder((R, C), name="X")
        k = tc.reduce_axis((0, C), name="k")
        S = tc.compute((R,), lambda i: tc.sum(X[i, k] * s if mean else X[i, k], axis=k),
                       name="S")
        return [X, S]

    def torch_(x):
        return x.mean(1) if mean else x.sum(1)

    def halide(hl):
        X = hl.ImageParam(hl.Float(32), 2, "X")
        i = hl.Var("i")
        r = _rdom(hl, C)
        S = hl.Func("S")
        S[i] = 0.0
        S[i] += X[r.x, i] * hl.f32(s) if mean else X[r.x, i]
        X.set_estimates([(0, C), (0, R)])
        S.set_estimates([(0, R)])
        return [X], [S]

    def te_(te):
        X = te.placeholder((R, C), name="X")
        k = te.reduce_axis((0, C), name="k")
        S = te.compute((R,), lambda i: te.sum(X[i, k] * s if mean else X[i, k], axis=k))
        return [X, S]

    return W(f"row {'mean' if mean else 'sum'} {R}x{C}", 1.0 * R * C, [(R, C)], tecomp,
             (lambda x: x.mean(1)) if mean else (lambda x: x.sum(1)), torch_, halide, te_)


# ---------------------------------------------------------------------------------------
# a derived gradient (no template: tc.gradient + the rules)


def bmm_grad(B=12, M=128, N=128, D=64):
    def tecomp():
        Q = tc.placeholder((B, M, D), name="Q")
        K = tc.placeholder((B, N, D), name="K")
        k = tc.reduce_axis((0, D), name="k")
        S = tc.compute((B, M, N), lambda b, i, j: tc.sum(Q[b, i, k] * K[b, j, k], axis=k),
                       name="S")
        dS = tc.placeholder(S.shape, name="dS")
        dQ, dK = tc.gradient(S, [Q, K], head=dS)
        return [Q, K, dS, dQ, dK]

    def ref(q, k, ds):
        return np.einsum("bij,bjk->bik", ds, k), np.einsum("bij,bik->bjk", ds, q)

    def torch_(q, k, ds):
        return ds @ k, ds.transpose(1, 2) @ q

    def halide(hl):
        Q = hl.ImageParam(hl.Float(32), 3, "Q")
        K = hl.ImageParam(hl.Float(32), 3, "K")
        dS = hl.ImageParam(hl.Float(32), 3, "dS")
        d, i, b = hl.Var("d"), hl.Var("i"), hl.Var("b")
        rj = _rdom(hl, N)
        ri = _rdom(hl, M)
        dQ = hl.Func("dQ")
        dQ[d, i, b] = 0.0
        dQ[d, i, b] += dS[rj.x, i, b] * K[d, rj.x, b]
        dK = hl.Func("dK")
        dK[d, i, b] = 0.0
        dK[d, i, b] += dS[i, ri.x, b] * Q[d, ri.x, b]
        Q.set_estimates([(0, D), (0, M), (0, B)])
        K.set_estimates([(0, D), (0, N), (0, B)])
        dS.set_estimates([(0, N), (0, M), (0, B)])
        dQ.set_estimates([(0, D), (0, M), (0, B)])
        dK.set_estimates([(0, D), (0, N), (0, B)])
        return [Q, K, dS], [dQ, dK]

    def te_(te):
        Q = te.placeholder((B, M, D), name="Q")
        K = te.placeholder((B, N, D), name="K")
        dS = te.placeholder((B, M, N), name="dS")
        j = te.reduce_axis((0, N), name="j")
        dQ = te.compute((B, M, D), lambda b, i, d: te.sum(dS[b, i, j] * K[b, j, d], axis=j))
        i2 = te.reduce_axis((0, M), name="i2")
        dK = te.compute((B, N, D), lambda b, j_, d: te.sum(dS[b, i2, j_] * Q[b, i2, d], axis=i2))
        return [Q, K, dS, dQ, dK]

    return W(f"grad of bmm Q.K^T {B}x{M}x{N}x{D}", 4.0 * B * M * N * D,
             [(B, M, D), (B, N, D), (B, M, N)], tecomp, ref, torch_, halide, te_)


def layer_norm_grad(R=4096, C=768, eps=1e-5):
    def tecomp():
        X = tc.placeholder((R, C), name="X")
        g = tc.placeholder((C,), name="g")
        b = tc.placeholder((C,), name="b")
        Y = _layer_norm_tc(X, g, b, R, C, eps)
        dY = tc.placeholder(Y.shape, name="dY")
        dX, dg, db = tc.gradient(Y, [X, g, b], head=dY)
        return [X, g, b, dY, dX, dg, db]

    def ref(x, g, b, dy):
        m = x.mean(1, keepdims=True)
        v = ((x - m) ** 2).mean(1, keepdims=True)
        rs = 1 / np.sqrt(v + eps)
        xh = (x - m) * rs
        dxh = dy * g
        dx = rs * (dxh - dxh.mean(1, keepdims=True) - xh * (dxh * xh).mean(1, keepdims=True))
        return dx, (dy * xh).sum(0), dy.sum(0)

    def torch_(x, g, b, dy):
        import torch

        with torch.enable_grad():      # whatever the caller's grad mode
            x = x.detach().requires_grad_()
            g = g.detach().requires_grad_()
            b = b.detach().requires_grad_()
            y = torch.nn.functional.layer_norm(x, (C,), g, b, eps)
            return torch.autograd.grad(y, [x, g, b], dy)

    def halide(hl):
        # Halide derives the gradient itself (propagate_adjoints), as tecomp does; Li2018
        # is its autoscheduler for such pipelines.  The inputs are read through boundary
        # conditions: the derived stages read past the edges.
        Xp = hl.ImageParam(hl.Float(32), 2, "X")
        gp = hl.ImageParam(hl.Float(32), 1, "g")
        bp = hl.ImageParam(hl.Float(32), 1, "b")
        dYp = hl.ImageParam(hl.Float(32), 2, "dY")
        ext = hl.BoundaryConditions.constant_exterior
        X, g, bb = ext(Xp, 0.0, [(0, C), (0, R)]), ext(gp, 0.0, [(0, C)]), ext(bp, 0.0, [(0, C)])
        Y, j, i = _layer_norm_halide(hl, X, g, bb, C, eps, "Y")
        d = hl.propagate_adjoints(Y, ext(dYp, 0.0, [(0, C), (0, R)]), [(0, C), (0, R)])
        dX, dg, db = hl.Func("dX"), hl.Func("dg"), hl.Func("db")
        dX[j, i] = d[X][j, i]
        dg[j] = d[g][j]
        db[j] = d[bb][j]
        for ip, e in ((Xp, [(0, C), (0, R)]), (gp, [(0, C)]), (bp, [(0, C)]),
                      (dYp, [(0, C), (0, R)]), (dX, [(0, C), (0, R)]), (dg, [(0, C)]),
                      (db, [(0, C)])):
            ip.set_estimates(e)
        return [Xp, gp, bp, dYp], [dX, dg, db]

    def te_(te):
        # TVM has no gradient for TE: the backward pass written by hand, as two kernels
        # (the row statistics, then dX, dg and db): MetaSchedule's design space fails on
        # dX with its row reductions in one function ("The primitive requires all the
        # producer(s) of the given block to be present under the target loop", from
        # ReverseComputeAt), as Relax would split the graph anyway
        import tvm

        def rsum(f, n, name):
            k = te.reduce_axis((0, n), name=name)
            return lambda *i: te.sum(f(*i, k), axis=k)

        def ins():
            return (te.placeholder((R, C), name="X"), te.placeholder((C,), name="g"),
                    te.placeholder((R, C), name="dY"))
        X, g, dY = ins()
        mean = te.compute((R,), rsum(lambda i, k: X[i, k] * (1.0 / C), C, "k0"), name="mean")
        var = te.compute((R,), rsum(lambda i, k: (X[i, k] - mean[i]) * (X[i, k] - mean[i])
                                    * (1.0 / C), C, "k1"), name="var")
        rs = te.compute((R,), lambda i: tvm.tirx.rsqrt(var[i] + eps), name="rs")
        m1 = te.compute((R,), rsum(lambda i, k: dY[i, k] * g[k] * (1.0 / C), C, "k2"),
                        name="m1")
        m2 = te.compute((R,), rsum(lambda i, k: dY[i, k] * g[k] * (X[i, k] - mean[i]) * rs[i]
                                   * (1.0 / C), C, "k3"), name="m2")
        stats = [X, g, dY, mean, rs, m1, m2]
        X, g, dY = ins()
        mean, rs, m1, m2 = [te.placeholder((R,), name=n) for n in ("mean", "rs", "m1", "m2")]
        dX = te.compute((R, C), lambda i, j: rs[i] * (dY[i, j] * g[j] - m1[i] - (
            X[i, j] - mean[i]) * rs[i] * m2[i]), name="dX")
        dg = te.compute((C,), rsum(lambda j, r: dY[r, j] * (X[r, j] - mean[r]) * rs[r], R,
                                   "r0"), name="dg")
        db = te.compute((C,), rsum(lambda j, r: dY[r, j], R, "r1"), name="db")
        return {"kernels": [stats, [X, g, dY, mean, rs, m1, m2, dX, dg, db]],
                "inputs": ["X", "g", "b", "dY"], "outputs": ["dX", "dg", "db"]}

    return W(f"grad of layer norm {R}x{C}", 16.0 * R * C, [(R, C), (C,), (C,), (R, C)],
             tecomp, ref, torch_, halide, te_,
             note="PyTorch: forward + backward (it saves the statistics); "
             "GFLOP/s counts 16 flops per element")


def all_workloads():
    return [bmm_scores(), bmm_av(), gemm(2048, 2048, 2048), gemm(333, 77, 1031),
            gemm(127, 509, 257), dense(), depthwise(), conv1x1(), atb(), layer_norm(),
            row_reduce(), row_reduce(mean=True), conv_relu(), bmm_grad(), layer_norm_grad()]
