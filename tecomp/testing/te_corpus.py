"""A corpus of small operators written in plain TE the way a hurried user writes them,
none of which a ``tecomp.nn`` template covers: elementwise chains with broadcasts,
transposes and permutes, gathers with computed indices, strided slices, padding,
concatenation by a select, cumulative sums, row and column reductions on odd shapes,
tiny shapes, outer products, depthwise and causal convolutions, a bilinear resize, a
one-hot, masks with ``==``; int32, int64, float16 and bfloat16; one to four axes.

Each entry of :data:`CORPUS` is a function of a ``numpy.random.Generator`` that returns
a :class:`CorpusCase`: the argument list for ``tc.build`` (the output last), the input
arrays, and the expected output computed by numpy (in float64 where it matters).
``tests/test_te_corpus.py`` checks every case under ``tc.auto_schedule(args)`` and
under :func:`tecomp.strategy.trivial.trivial_schedule`; ``benchmarks/te_corpus.py``
times the two against each other."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, List

import numpy as np

import tecomp as tc
from tecomp.ir import dtype as _dt


@dataclass
class CorpusCase:
    """One operator: ``args`` for ``tc.build`` (the output last), its ``inputs`` (numpy
    arrays, in ``args``' order), the expected output ``want``, and the tolerances."""
    args: list
    inputs: List[np.ndarray]
    want: np.ndarray
    rtol: float = 1e-5
    atol: float = 1e-5

    @property
    def out(self):
        return self.args[-1]

    def empty_output(self) -> np.ndarray:
        """A zeroed array of the output's shape and dtype."""
        o = self.out
        return np.zeros([int(e) for e in o.shape], dtype=_dt.numpy_dtype(o.dtype))


def _f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


CORPUS: Dict[str, Callable[[np.random.Generator], CorpusCase]] = {}


def case(fn):
    CORPUS[fn.__name__] = fn
    return fn


# -- elementwise chains with broadcasts --------------------------------------------------

@case
def bias_gelu_scale(rng):
    """``gelu(x + b[j]) * s[i]`` (tanh form), 1024 x 768."""
    M, N = 1024, 768
    X, B, S = (tc.placeholder((M, N), name="x"), tc.placeholder((N,), name="b"),
               tc.placeholder((M,), name="s"))

    def f(i, j):
        v = X[i, j] + B[j]
        return 0.5 * v * (1.0 + tc.tanh(0.7978845608 * (v + 0.044715 * v * v * v))) * S[i]
    Y = tc.compute((M, N), f, name="y")
    x, b, s = _f32(rng, M, N), _f32(rng, N), _f32(rng, M)
    v = x.astype(np.float64) + b
    want = 0.5 * v * (1 + np.tanh(0.7978845608 * (v + 0.044715 * v ** 3))) * s[:, None]
    return CorpusCase([X, B, S, Y], [x, b, s], want, 1e-5, 1e-5)


@case
def broadcast_4d(rng):
    """``x[n, c, h, w] * g[c] + t[n, 0, h, w]``, 8 x 32 x 28 x 28, the second operand
    kept with an axis of 1."""
    N_, C, H, W = 8, 32, 28, 28
    X = tc.placeholder((N_, C, H, W), name="x")
    G = tc.placeholder((C,), name="g")
    T = tc.placeholder((N_, 1, H, W), name="t")
    Y = tc.compute((N_, C, H, W), lambda n, c, h, w: X[n, c, h, w] * G[c] + T[n, 0, h, w],
                   name="y")
    x, g, t = _f32(rng, N_, C, H, W), _f32(rng, C), _f32(rng, N_, 1, H, W)
    return CorpusCase([X, G, T, Y], [x, g, t], x * g[None, :, None, None] + t)


@case
def sigmoid_chain_3d(rng):
    """``sigmoid(a) * b + exp(-c * c)`` over 16 x 100 x 100 (rows of 100: a vector tail)."""
    shape = (16, 100, 100)
    A, B, C = (tc.placeholder(shape, name=n) for n in "abc")
    Y = tc.compute(shape, lambda i, j, k: tc.sigmoid(A[i, j, k]) * B[i, j, k] +
                   tc.exp(-C[i, j, k] * C[i, j, k]), name="y")
    a, b, c = (_f32(rng, *shape) for _ in range(3))
    want = 1 / (1 + np.exp(-a.astype(np.float64))) * b + np.exp(-c.astype(np.float64) ** 2)
    return CorpusCase([A, B, C, Y], [a, b, c], want, 1e-5, 1e-6)


# -- transposes, permutes, slices, gathers -----------------------------------------------

@case
def transpose_2d(rng):
    """``y[j, i] = x[i, j]``, 1000 x 1200."""
    M, N = 1000, 1200
    X = tc.placeholder((M, N), name="x")
    Y = tc.compute((N, M), lambda j, i: X[i, j], name="y")
    x = _f32(rng, M, N)
    return CorpusCase([X, Y], [x], x.T.copy(), 0, 0)


@case
def nchw_to_nhwc(rng):
    """A permute of 8 x 64 x 28 x 28 to channels last."""
    N_, C, H, W = 8, 64, 28, 28
    X = tc.placeholder((N_, C, H, W), name="x")
    Y = tc.compute((N_, H, W, C), lambda n, h, w, c: X[n, c, h, w], name="y")
    x = _f32(rng, N_, C, H, W)
    return CorpusCase([X, Y], [x], x.transpose(0, 2, 3, 1).copy(), 0, 0)


@case
def embedding_gather(rng):
    """``y[i, j] = table[ids[i], j]``, 4096 ids (int32) into 5000 x 256."""
    V, D, M = 5000, 256, 4096
    T = tc.placeholder((V, D), name="table")
    I = tc.placeholder((M,), dtype="int32", name="ids")
    Y = tc.compute((M, D), lambda i, j: T[I[i], j], name="y")
    t, ids = _f32(rng, V, D), rng.integers(0, V, M).astype(np.int32)
    return CorpusCase([T, I, Y], [t, ids], t[ids], 0, 0)


@case
def computed_index_gather(rng):
    """``y[i, j] = x[i, (37 * j + 5) % N]``: a column shuffle by a computed index."""
    M, N = 512, 1024
    X = tc.placeholder((M, N), name="x")
    Y = tc.compute((M, N), lambda i, j: X[i, (37 * j + 5) % N], name="y")
    x = _f32(rng, M, N)
    return CorpusCase([X, Y], [x], x[:, (37 * np.arange(N) + 5) % N], 0, 0)


@case
def strided_slice(rng):
    """``y[i, j] = x[2 i, 3 j + 1]`` (``x[::2, 1::3]``) of 2048 x 3072."""
    M, N = 2048, 3072
    X = tc.placeholder((M, N), name="x")
    Y = tc.compute((M // 2, N // 3), lambda i, j: X[2 * i, 3 * j + 1], name="y")
    x = _f32(rng, M, N)
    return CorpusCase([X, Y], [x], x[::2, 1::3].copy(), 0, 0)


@case
def reverse_rows(rng):
    """``y[i, j] = x[i, N - 1 - j]`` (a flip), int32, 777 x 1000."""
    M, N = 777, 1000
    X = tc.placeholder((M, N), dtype="int32", name="x")
    Y = tc.compute((M, N), lambda i, j: X[i, N - 1 - j], name="y")
    x = rng.integers(-1000, 1000, (M, N)).astype(np.int32)
    return CorpusCase([X, Y], [x], x[:, ::-1].copy(), 0, 0)


@case
def pad_2d(rng):
    """Zero padding by 2 of 64 x 56 x 56 (``if_then_else`` on the bounds)."""
    C, H, W, P = 64, 56, 56, 2
    X = tc.placeholder((C, H, W), name="x")
    Y = tc.compute((C, H + 2 * P, W + 2 * P), lambda c, h, w: tc.if_then_else(
        tc.all(h >= P, h < H + P, w >= P, w < W + P), X[c, h - P, w - P], 0.0), name="y")
    x = _f32(rng, C, H, W)
    return CorpusCase([X, Y], [x], np.pad(x, ((0, 0), (P, P), (P, P))), 0, 0)


@case
def concat_select(rng):
    """``concat([a, b], axis=1)`` written as a select, 1024 x (300 + 212)."""
    M, N1, N2 = 1024, 300, 212
    A, B = tc.placeholder((M, N1), name="a"), tc.placeholder((M, N2), name="b")
    Y = tc.compute((M, N1 + N2), lambda i, j: tc.if_then_else(j < N1, A[i, j], B[i, j - N1]),
                   name="y")
    a, b = _f32(rng, M, N1), _f32(rng, M, N2)
    return CorpusCase([A, B, Y], [a, b], np.concatenate([a, b], 1), 0, 0)


# -- cumulative sums, reductions on odd shapes --------------------------------------------

@case
def cumsum_rows(rng):
    """``y[i, j] = sum(x[i, k] for k <= j)`` as a masked reduction, 256 x 256."""
    M, N = 256, 256
    X = tc.placeholder((M, N), name="x")
    k = tc.reduce_axis(N, name="k")
    Y = tc.compute((M, N), lambda i, j: tc.sum(tc.if_then_else(k <= j, X[i, k], 0.0), axis=k),
                   name="y")
    x = _f32(rng, M, N)
    return CorpusCase([X, Y], [x], np.cumsum(x.astype(np.float64), 1), 1e-4, 1e-4)


@case
def cumsum_columns(rng):
    """The cumulative sum down the columns, ``y[i, j] = sum(x[k, j] for k <= i)``,
    200 x 512."""
    M, N = 200, 512
    X = tc.placeholder((M, N), name="x")
    k = tc.reduce_axis(M, name="k")
    Y = tc.compute((M, N), lambda i, j: tc.sum(tc.if_then_else(k <= i, X[k, j], 0.0), axis=k),
                   name="y")
    x = _f32(rng, M, N)
    return CorpusCase([X, Y], [x], np.cumsum(x.astype(np.float64), 0), 1e-4, 1e-4)


@case
def row_sum_odd(rng):
    """Row sums of 1000 x 77."""
    M, N = 1000, 77
    X = tc.placeholder((M, N), name="x")
    k = tc.reduce_axis(N, name="k")
    Y = tc.compute((M,), lambda i: tc.sum(X[i, k], axis=k), name="y")
    x = _f32(rng, M, N)
    return CorpusCase([X, Y], [x], x.astype(np.float64).sum(1), 1e-5, 1e-5)


@case
def column_mean_odd(rng):
    """Column means of 333 x 999 (a sum down the rows, then a division)."""
    M, N = 333, 999
    X = tc.placeholder((M, N), name="x")
    k = tc.reduce_axis(M, name="k")
    S = tc.compute((N,), lambda j: tc.sum(X[k, j], axis=k), name="s")
    Y = tc.compute((N,), lambda j: S[j] / M, name="y")
    x = _f32(rng, M, N)
    return CorpusCase([X, Y], [x], x.astype(np.float64).mean(0), 1e-5, 1e-6)


@case
def row_max_int32(rng):
    """Row maxima of int32 513 x 300."""
    M, N = 513, 300
    X = tc.placeholder((M, N), dtype="int32", name="x")
    k = tc.reduce_axis(N, name="k")
    Y = tc.compute((M,), lambda i: tc.max(X[i, k], axis=k), name="y")
    x = rng.integers(-10 ** 6, 10 ** 6, (M, N)).astype(np.int32)
    return CorpusCase([X, Y], [x], x.max(1), 0, 0)


@case
def l2_normalize_rows(rng):
    """``x / sqrt(sum(x * x))`` along rows of 100, 2048 rows."""
    M, N = 2048, 100
    X = tc.placeholder((M, N), name="x")
    k = tc.reduce_axis(N, name="k")
    S = tc.compute((M,), lambda i: tc.sum(X[i, k] * X[i, k], axis=k), name="ss")
    Y = tc.compute((M, N), lambda i, j: X[i, j] / tc.sqrt(S[i]), name="y")
    x = _f32(rng, M, N)
    x64 = x.astype(np.float64)
    return CorpusCase([X, Y], [x], x64 / np.sqrt((x64 ** 2).sum(1, keepdims=True)), 1e-5, 1e-6)


@case
def softmax_columns(rng):
    """A softmax down the columns (over axis 0) of 128 x 1000: column max, exps, column
    sums, the division."""
    M, N = 128, 1000
    X = tc.placeholder((M, N), name="x")
    k = tc.reduce_axis(M, name="k")
    mx = tc.compute((N,), lambda j: tc.max(X[k, j], axis=k), name="mx")
    E = tc.compute((M, N), lambda i, j: tc.exp(X[i, j] - mx[j]), name="e")
    k2 = tc.reduce_axis(M, name="k2")
    S = tc.compute((N,), lambda j: tc.sum(E[k2, j], axis=k2), name="s")
    Y = tc.compute((M, N), lambda i, j: E[i, j] / S[j], name="y")
    x64 = _f32(rng, M, N).astype(np.float64)
    e = np.exp(x64 - x64.max(0))
    return CorpusCase([X, Y], [x64.astype(np.float32)], e / e.sum(0), 1e-5, 1e-7)


@case
def matvec_odd(rng):
    """``y[i] = sum_k a[i, k] x[k]``, 1000 x 300."""
    M, K = 1000, 300
    A, V = tc.placeholder((M, K), name="a"), tc.placeholder((K,), name="v")
    k = tc.reduce_axis(K, name="k")
    Y = tc.compute((M,), lambda i: tc.sum(A[i, k] * V[k], axis=k), name="y")
    a, v = _f32(rng, M, K), _f32(rng, K)
    return CorpusCase([A, V, Y], [a, v], a.astype(np.float64) @ v, 1e-4, 1e-4)


@case
def small_batched_matmul(rng):
    """``c[b] = a[b] @ b[b]`` of 512 batches of 7 x 9 by 9 x 5."""
    Bt, M, K, N = 512, 7, 9, 5
    A, Bm = tc.placeholder((Bt, M, K), name="a"), tc.placeholder((Bt, K, N), name="bm")
    k = tc.reduce_axis(K, name="k")
    Y = tc.compute((Bt, M, N), lambda b, i, j: tc.sum(A[b, i, k] * Bm[b, k, j], axis=k),
                   name="y")
    a, b = _f32(rng, Bt, M, K), _f32(rng, Bt, K, N)
    return CorpusCase([A, Bm, Y], [a, b], a.astype(np.float64) @ b, 1e-5, 1e-5)


@case
def pairwise_sqdist(rng):
    """``d[i, j] = sum_k (a[i, k] - b[j, k])^2`` for 512 x 512 points in 3-d."""
    M, N, K = 512, 512, 3
    A, B = tc.placeholder((M, K), name="a"), tc.placeholder((N, K), name="b")
    k = tc.reduce_axis(K, name="k")
    Y = tc.compute((M, N), lambda i, j: tc.sum((A[i, k] - B[j, k]) * (A[i, k] - B[j, k]),
                                               axis=k), name="d")
    a, b = _f32(rng, M, K), _f32(rng, N, K)
    want = ((a.astype(np.float64)[:, None, :] - b[None, :, :]) ** 2).sum(-1)
    return CorpusCase([A, B, Y], [a, b], want, 1e-5, 1e-5)


# -- tiny shapes ---------------------------------------------------------------------------

@case
def tiny_add_3x5(rng):
    """``a + b`` of 3 x 5."""
    A, B = tc.placeholder((3, 5), name="a"), tc.placeholder((3, 5), name="b")
    Y = tc.compute((3, 5), lambda i, j: A[i, j] + B[i, j], name="y")
    a, b = _f32(rng, 3, 5), _f32(rng, 3, 5)
    return CorpusCase([A, B, Y], [a, b], a + b, 0, 0)


@case
def tiny_row_sum_7x9(rng):
    """Row sums of 7 x 9."""
    X = tc.placeholder((7, 9), name="x")
    k = tc.reduce_axis(9, name="k")
    Y = tc.compute((7,), lambda i: tc.sum(X[i, k], axis=k), name="y")
    x = _f32(rng, 7, 9)
    return CorpusCase([X, Y], [x], x.astype(np.float64).sum(1))


@case
def tiny_exp_33(rng):
    """``exp(x)`` of 33 values."""
    X = tc.placeholder((33,), name="x")
    Y = tc.compute((33,), lambda i: tc.exp(X[i]), name="y")
    x = _f32(rng, 33)
    return CorpusCase([X, Y], [x], np.exp(x.astype(np.float64)), 2e-6, 0)


@case
def tiny_total_64(rng):
    """The sum of 64 values into a one-element output."""
    X = tc.placeholder((64,), name="x")
    k = tc.reduce_axis(64, name="k")
    Y = tc.compute((1,), lambda _: tc.sum(X[k], axis=k), name="y")
    x = _f32(rng, 64)
    return CorpusCase([X, Y], [x], x.astype(np.float64).sum(keepdims=True))


@case
def tiny_4d_1x2x3x4(rng):
    """``x * 2 - y[w]`` over 1 x 2 x 3 x 4, int64."""
    shape = (1, 2, 3, 4)
    X, V = tc.placeholder(shape, dtype="int64", name="x"), tc.placeholder((4,), "int64", "v")
    Y = tc.compute(shape, lambda a, b, c, d: X[a, b, c, d] * 2 - V[d], name="y")
    x, v = rng.integers(-99, 99, shape), rng.integers(-99, 99, 4)
    return CorpusCase([X, V, Y], [x, v], x * 2 - v, 0, 0)


# -- outer products, masks, one-hot --------------------------------------------------------

@case
def outer_product(rng):
    """``y[i, j] = a[i] * b[j]``, 2048 x 2048."""
    M, N = 2048, 2048
    A, B = tc.placeholder((M,), name="a"), tc.placeholder((N,), name="b")
    Y = tc.compute((M, N), lambda i, j: A[i] * B[j], name="y")
    a, b = _f32(rng, M), _f32(rng, N)
    return CorpusCase([A, B, Y], [a, b], np.outer(a, b), 1e-6, 0)


@case
def outer_product_int64(rng):
    """``y[i, j] = a[i] * b[j] + i``, int64, 512 x 640."""
    M, N = 512, 640
    A, B = tc.placeholder((M,), "int64", "a"), tc.placeholder((N,), "int64", "b")
    Y = tc.compute((M, N), lambda i, j: A[i] * B[j] + tc.cast(i, "int64"), name="y")
    a, b = rng.integers(-2 ** 20, 2 ** 20, M), rng.integers(-2 ** 20, 2 ** 20, N)
    return CorpusCase([A, B, Y], [a, b], np.outer(a, b) + np.arange(M)[:, None], 0, 0)


@case
def one_hot(rng):
    """``y[i, c] = 1.0 if labels[i] == c else 0.0``, 4096 labels of 100 classes."""
    M, C = 4096, 100
    L = tc.placeholder((M,), dtype="int32", name="labels")
    Y = tc.compute((M, C), lambda i, c: tc.if_then_else(L[i] == c, 1.0, 0.0), name="y")
    lab = rng.integers(0, C, M).astype(np.int32)
    return CorpusCase([L, Y], [lab], np.eye(C, dtype=np.float32)[lab], 0, 0)


@case
def mask_eq_int32(rng):
    """``where(a == b, x, 0)`` with int32 ``a``, ``b``, float32 ``x``, 1024 x 1024."""
    M, N = 1024, 1024
    A, B = tc.placeholder((M, N), "int32", "a"), tc.placeholder((M, N), "int32", "b")
    X = tc.placeholder((M, N), name="x")
    Y = tc.compute((M, N), lambda i, j: tc.if_then_else(A[i, j] == B[i, j], X[i, j], 0.0),
                   name="y")
    a, b = rng.integers(0, 3, (M, N)).astype(np.int32), rng.integers(0, 3, (M, N)).astype(np.int32)
    x = _f32(rng, M, N)
    return CorpusCase([A, B, X, Y], [a, b, x], np.where(a == b, x, 0), 0, 0)


@case
def causal_mask_fill(rng):
    """``y[i, j] = x[i, j] if j <= i else -1e9``, 1024 x 1024."""
    M = 1024
    X = tc.placeholder((M, M), name="x")
    Y = tc.compute((M, M), lambda i, j: tc.if_then_else(j <= i, X[i, j], -1e9), name="y")
    x = _f32(rng, M, M)
    return CorpusCase([X, Y], [x], np.where(np.tri(M, dtype=bool), x, np.float32(-1e9)), 0, 0)


# -- convolutions, resizes ---------------------------------------------------------------

@case
def causal_depthwise_conv1d(rng):
    """``y[b, c, t] = sum_k x[b, c, t - k] * w[c, k]`` (zero before the start), 4 x 1536 x
    1024, 4 taps: issue 49's case."""
    B, C, T, K = 4, 1536, 1024, 4
    X, Wt = tc.placeholder((B, C, T), name="x"), tc.placeholder((C, K), name="w")
    k = tc.reduce_axis(K, name="k")
    Y = tc.compute((B, C, T), lambda b, c, t: tc.sum(tc.if_then_else(
        t - k >= 0, X[b, c, t - k] * Wt[c, k], 0.0), axis=k), name="y")
    x, w = _f32(rng, B, C, T), _f32(rng, C, K)
    want = sum(np.pad(x.astype(np.float64), ((0, 0), (0, 0), (j, 0)))[:, :, :T] *
               w[None, :, j, None] for j in range(K))
    return CorpusCase([X, Wt, Y], [x, w], want, 2e-5, 2e-5)


@case
def depthwise_conv1d_channels_last(rng):
    """``y[b, t, c] = sum_k x[b, t + k - 2, c] * w[k, c]`` ("same" padding), 8 x 512 x 256,
    5 taps."""
    B, T, C, K, P = 8, 512, 256, 5, 2
    X, Wt = tc.placeholder((B, T, C), name="x"), tc.placeholder((K, C), name="w")
    k = tc.reduce_axis(K, name="k")
    Y = tc.compute((B, T, C), lambda b, t, c: tc.sum(tc.if_then_else(
        tc.all(t + k >= P, t + k < T + P), X[b, t + k - P, c] * Wt[k, c], 0.0), axis=k),
        name="y")
    x, w = _f32(rng, B, T, C), _f32(rng, K, C)
    xp = np.pad(x.astype(np.float64), ((0, 0), (P, P), (0, 0)))
    want = sum(xp[:, j:j + T, :] * w[j] for j in range(K))
    return CorpusCase([X, Wt, Y], [x, w], want, 2e-5, 2e-5)


@case
def depthwise_3x3_nhwc(rng):
    """A 3x3 depthwise convolution, channels last, no padding (valid), 2 x 58 x 58 x 96."""
    N_, H, W, C = 2, 58, 58, 96
    X, Wt = tc.placeholder((N_, H, W, C), name="x"), tc.placeholder((3, 3, C), name="w")
    kh, kw = tc.reduce_axis(3, name="kh"), tc.reduce_axis(3, name="kw")
    Y = tc.compute((N_, H - 2, W - 2, C), lambda n, h, w, c: tc.sum(
        X[n, h + kh, w + kw, c] * Wt[kh, kw, c], axis=[kh, kw]), name="y")
    x, w = _f32(rng, N_, H, W, C), _f32(rng, 3, 3, C)
    x64 = x.astype(np.float64)
    want = sum(x64[:, i:i + H - 2, j:j + W - 2, :] * w[i, j] for i in range(3) for j in range(3))
    return CorpusCase([X, Wt, Y], [x, w], want, 2e-5, 2e-5)


@case
def bilinear_resize_2x(rng):
    """A bilinear upsampling by 2 (half-pixel centres, edges clamped) of 2 x 32 x 48 x 48."""
    N_, C, H, W = 2, 32, 48, 48
    OH, OW = 2 * H, 2 * W
    X = tc.placeholder((N_, C, H, W), name="x")

    def f(n, c, oh, ow):
        sy = tc.maximum((tc.cast(oh, "float32") + 0.5) * 0.5 - 0.5, 0.0)
        sx = tc.maximum((tc.cast(ow, "float32") + 0.5) * 0.5 - 0.5, 0.0)
        y0, x0 = tc.cast(tc.floor(sy), "int32"), tc.cast(tc.floor(sx), "int32")
        y1, x1 = tc.minimum(y0 + 1, H - 1), tc.minimum(x0 + 1, W - 1)
        fy, fx = sy - tc.floor(sy), sx - tc.floor(sx)
        top = X[n, c, y0, x0] * (1.0 - fx) + X[n, c, y0, x1] * fx
        bot = X[n, c, y1, x0] * (1.0 - fx) + X[n, c, y1, x1] * fx
        return top * (1.0 - fy) + bot * fy
    Y = tc.compute((N_, C, OH, OW), f, name="y")
    x = _f32(rng, N_, C, H, W)

    def coords(n, o):
        s = np.maximum((np.arange(o) + 0.5) * 0.5 - 0.5, 0.0)
        i0 = np.floor(s).astype(int)
        return i0, np.minimum(i0 + 1, n - 1), s - i0
    y0, y1, fy = coords(H, OH)
    x0, x1, fx = coords(W, OW)
    x64 = x.astype(np.float64)
    top = x64[:, :, y0][:, :, :, x0] * (1 - fx) + x64[:, :, y0][:, :, :, x1] * fx
    bot = x64[:, :, y1][:, :, :, x0] * (1 - fx) + x64[:, :, y1][:, :, :, x1] * fx
    want = top * (1 - fy)[:, None] + bot * fy[:, None]
    return CorpusCase([X, Y], [x], want, 1e-5, 1e-6)


@case
def nearest_upsample_2x(rng):
    """``y[c, h, w] = x[c, h // 2, w // 2]``, 64 x 64 x 64 -> 128 x 128."""
    C, H, W = 64, 64, 64
    X = tc.placeholder((C, H, W), name="x")
    Y = tc.compute((C, 2 * H, 2 * W), lambda c, h, w: X[c, h // 2, w // 2], name="y")
    x = _f32(rng, C, H, W)
    return CorpusCase([X, Y], [x], x.repeat(2, 1).repeat(2, 2), 0, 0)


# -- other dtypes --------------------------------------------------------------------------

@case
def float16_affine(rng):
    """``x * s[j] + b[j]`` in float16, 1024 x 1024."""
    M, N = 1024, 1024
    X = tc.placeholder((M, N), "float16", "x")
    S, B = tc.placeholder((N,), "float16", "s"), tc.placeholder((N,), "float16", "b")
    Y = tc.compute((M, N), lambda i, j: X[i, j] * S[j] + B[j], name="y")
    x, s, b = (rng.standard_normal(sh).astype(np.float16) for sh in ((M, N), (N,), (N,)))
    want = x.astype(np.float64) * s + b
    return CorpusCase([X, S, B, Y], [x, s, b], want, 2e-3, 2e-3)


@case
def float16_row_sum_in_float32(rng):
    """Row sums of float16 2048 x 300, accumulated in float32."""
    M, N = 2048, 300
    X = tc.placeholder((M, N), "float16", "x")
    k = tc.reduce_axis(N, name="k")
    Y = tc.compute((M,), lambda i: tc.sum(tc.cast(X[i, k], "float32"), axis=k), name="y")
    x = rng.standard_normal((M, N)).astype(np.float16)
    return CorpusCase([X, Y], [x], x.astype(np.float64).sum(1), 1e-5, 1e-4)


@case
def bfloat16_scale_to_float32(rng):
    """``float32(x) * g[j]`` from bfloat16 ``x``, 512 x 1000."""
    M, N = 512, 1000
    X = tc.placeholder((M, N), "bfloat16", "x")
    G = tc.placeholder((N,), name="g")
    Y = tc.compute((M, N), lambda i, j: tc.cast(X[i, j], "float32") * G[j], name="y")
    x = rng.standard_normal((M, N)).astype(_dt.numpy_dtype("bfloat16"))
    g = _f32(rng, N)
    return CorpusCase([X, G, Y], [x, g], x.astype(np.float32) * g, 1e-6, 0)


@case
def int32_clamp_shift(rng):
    """``min(max(x, -100), 100) >> 1`` written as a floor division by 2, int32 3000 x 333."""
    M, N = 3000, 333
    X = tc.placeholder((M, N), "int32", "x")
    Y = tc.compute((M, N), lambda i, j: tc.floordiv(tc.minimum(tc.maximum(X[i, j], -100), 100),
                                                    2), name="y")
    x = rng.integers(-300, 300, (M, N)).astype(np.int32)
    return CorpusCase([X, Y], [x], np.clip(x, -100, 100) // 2, 0, 0)


@case
def int64_row_cumulative_count(rng):
    """``y[i] = sum_k (x[i, k] > 0)`` as int64 counts, 1500 x 200 float32."""
    M, N = 1500, 200
    X = tc.placeholder((M, N), name="x")
    k = tc.reduce_axis(N, name="k")
    Y = tc.compute((M,), lambda i: tc.sum(tc.cast(X[i, k] > 0.0, "int64"), axis=k), name="y")
    x = _f32(rng, M, N)
    return CorpusCase([X, Y], [x], (x > 0).sum(1).astype(np.int64), 0, 0)


def names() -> List[str]:
    """The corpus's case names, in order."""
    return list(CORPUS)


def make(name: str, seed: int = 0) -> CorpusCase:
    """Case ``name`` with its data drawn from ``seed``."""
    return CORPUS[name](np.random.default_rng(seed))

