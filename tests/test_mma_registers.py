"""The ``cuda.mma_*`` intrinsics that keep FlashAttention-2's inner step in registers
(tecomp.te.intrin_mma): an accumulator tile fed as the A operand of the next mma
(``cuda.mma_acc_to_a_*``), the rows of an accumulator tile reduced across the quad of
lanes that holds them (``cuda.mma_row_max_f32`` / ``_sum_f32``, ``__shfl_xor_sync``), and
the elementwise ``cuda.mma_exp_diff_f32`` / ``cuda.mma_mul_f32``.

The CUDA emulation runs each lane with its own registers only and exchanges them at each
warp-wide operation (``__shfl_xor_sync`` included), so a wrong register or lane mapping
gives a wrong result here as on the GPU (``test_a_wrong_register_pairing_is_caught``);
nvcc compiles the same text (no spill, no shared memory between the two GEMMs)."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

import tecomp as tc
from tecomp.codegen.cuda import CudaRenderer
from tecomp.runtime.nvcc import compile_ptx, find_nvcc
from tecomp.te import intrin_mma
from tecomp.te.intrin_cuda import TC_DTYPES
from tecomp.testing.gpu_resources import ptxas_usage
from helpers import gpu_driver  # noqa: F401  (a fixture)

ml_dtypes = pytest.importorskip("ml_dtypes")
needs_cxx = pytest.mark.skipif(shutil.which("g++") is None and shutil.which("clang++") is None,
                               reason="the CUDA emulation needs a C++ compiler")
needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc is not on PATH")
NP = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
F32 = "float32"


def _mm(a, b, name, transpose_b=False):
    """``a @ b`` (or ``a @ b^T``) in float32 of two 16-bit tensors."""
    k = tc.reduce_axis((0, a.shape[1]), name=f"{name}_k")
    if transpose_b:
        return tc.compute((a.shape[0], b.shape[0]), lambda i, j: tc.sum(
            a[i, k].astype(F32) * b[j, k].astype(F32), axis=k), name=name)
    return tc.compute((a.shape[0], b.shape[1]), lambda i, j: tc.sum(
        a[i, k].astype(F32) * b[k, j].astype(F32), axis=k), name=name)


def _shared(s, tensors, readers, at, axis, warps):
    """Shared copies of ``tensors`` (read by ``readers``) at ``at``'s ``axis``, 8
    elements a thread and copy; returns them."""
    out = []
    for t, r in zip(tensors, readers):
        X = s.cache_read(t, "shared", [r])
        s[X].compute_at(s[at], axis)
        f = s[X].fuse(*s[X].op.axis)
        f, v = s[X].split(f, 8)
        f, tx = s[X].split(f, 32)
        f, ty = s[X].split(f, warps)
        s[X].bind(tx, tc.thread_axis("threadIdx.x"))
        s[X].bind(ty, tc.thread_axis("threadIdx.y"))
        s[X].vectorize(v)
        out.append(X)
    return out


def _gemm_into(s, C, A, B, t, step_at=None, transposed=False):
    """``C`` (an ``mma.accumulator`` stage of ``A @ B``, ``A``/``B`` shared copies or an
    ``mma.matrix_a`` stage) on the tensor cores, 16 x 16 x 16 tiles; ``step_at``: where
    ``C`` is computed (a stage and loop), else it stays where it is; ``transposed``: ``B``
    is stored ``[j, k]``."""
    if step_at is not None:
        s[C].compute_at(*step_at)
    ci, cj = s[C].op.axis
    kf, kk = s[C].split(s[C].op.reduce_axis[0], 16)
    fj, cj = s[C].split(cj, 16)
    s[C].reorder(kf, fj, ci, cj, kk)
    s[C].tensorize(ci, tc.tensor_intrin(f"cuda.mma_{t}{t}f32"))
    for X, scope in ((A, "mma.matrix_a"), (B, "mma.matrix_b")):
        if X is None:
            continue
        F = s.cache_read(X, scope, [C])
        s[F].compute_at(s[C], kf)
        r, c = s[F].op.axis
        if scope == "mma.matrix_b" and not transposed:   # (B[k, j]: tiles along j)
            co, c = s[F].split(c, 16)
            s[F].reorder(co, r, c)
        elif scope == "mma.matrix_b":                    # (B^T[j, k]: tiles down j)
            ro, r = s[F].split(r, 16)
        s[F].tensorize(r, tc.tensor_intrin(f"cuda.mma_load_{scope[-1]}_{t}"))
    return kf


def _warp_store(s, out):
    """``out`` (global float32) stored from an ``mma.accumulator`` fragment, each warp
    its 16 rows; returns (the fragment, the warp loop)."""
    OF = s.cache_write(out, "mma.accumulator")
    i, j = s[out].op.axis
    w, i = s[out].split(i, 16)
    fj, j = s[out].split(j, 16)
    s[out].reorder(w, fj, i, j)
    s[out].bind(w, tc.thread_axis("threadIdx.y"))
    s[out].tensorize(i, tc.tensor_intrin("cuda.mma_store_f32"))
    s[OF].compute_at(s[out], w)
    return OF, w


def back_to_back(M=32, K=32, J=32, N=48, dtype="float16"):
    """``E = (A B).astype(dtype) C``: ``A B``'s accumulator becomes ``C``'s A operand in
    the registers (``cuda.mma_acc_to_a_*``), one warp per 16 rows."""
    t = TC_DTYPES[dtype]
    A, B, C = (tc.placeholder(shape, dtype, name=n)
               for n, shape in (("A", (M, K)), ("B", (K, J)), ("C", (J, N))))
    AB = _mm(A, B, "AB")
    T = tc.compute((M, J), lambda i, j: AB[i, j].astype(dtype), name="T")
    E = _mm(T, C, "E")
    s = tc.create_schedule(E.op)
    EF, w = _warp_store(s, E)
    AS, BS, CS = _shared(s, (A, B, C), (AB, AB, EF), E, w, M // 16)
    s[AB].set_scope("mma.accumulator")
    s[T].set_scope("mma.matrix_a")
    rf = _gemm_into(s, EF, None, CS, t)
    s[T].compute_at(s[EF], rf)
    s[T].tensorize(s[T].op.axis[0], tc.tensor_intrin(f"cuda.mma_acc_to_a_{t}"))
    _gemm_into(s, AB, AS, BS, t, (s[EF], rf))
    return s, [A, B, C, E]


def softmax_tile(M=32, D=32, L=48, N=32, kind="exp"):
    """One key tile of FlashAttention-2's step, per warp of 16 query rows, in registers:
    ``S = Q K^T``, ``m = rowmax(S)`` (a 16-column tile per 16 rows, each row's maximum in
    all its columns), ``P = exp(S - m)`` and ``E = P.astype(f16) V`` (``kind="exp"``);
    ``kind="sum"``: the rows' ``sum_j S`` instead, ``"mul"``: ``S * m``."""
    Q, Kt, V = (tc.placeholder(shape, "float16", name=n)
                for n, shape in (("Q", (M, D)), ("K", (L, D)), ("V", (L, N))))
    S = _mm(Q, Kt, "S", transpose_b=True)
    c = tc.reduce_axis((0, L), name="c")
    red = tc.sum if kind == "sum" else tc.max
    Mx = tc.compute((M, 16), lambda i, j: red(S[i, c], axis=c), name="m")
    if kind == "mul":
        out = tc.compute((M, L), lambda i, j: S[i, j] * Mx[i, j % 16], name="sm")
    elif kind == "exp":
        P = tc.compute((M, L), lambda i, j: tc.fast_exp(S[i, j] - Mx[i, j % 16]), name="p")
        P16 = tc.compute((M, L), lambda i, j: P[i, j].astype("float16"), name="p16")
        out = _mm(P16, V, "E")
    else:
        out = Mx
    s = tc.create_schedule(out.op)
    OF, w = _warp_store(s, out)
    QS, KS = _shared(s, (Q, Kt), (S, S), out, w, M // 16)
    s[S].set_scope("mma.accumulator")
    _gemm_into(s, S, QS, KS, "f16", (s[out], w), transposed=True)
    mx = OF if kind == "sum" else Mx
    if mx is Mx:
        s[Mx].set_scope("mma.accumulator")
        s[Mx].compute_at(s[out], w)
    mf, mc = s[mx].split(s[mx].op.reduce_axis[0], 16)
    mi, mj = s[mx].op.axis
    s[mx].reorder(mf, mi, mj, mc)
    s[mx].tensorize(mi, tc.tensor_intrin(f"cuda.mma_row_{'sum' if kind == 'sum' else 'max'}_f32"))
    if kind == "mul":
        oi, oj = s[OF].op.axis
        fo, oj = s[OF].split(oj, 16)
        s[OF].reorder(fo, oi, oj)
        s[OF].tensorize(oi, tc.tensor_intrin("cuda.mma_mul_f32"))
    elif kind == "exp":
        (VS,) = _shared(s, (V,), (OF,), out, w, M // 16)
        s[P].set_scope("mma.accumulator")
        s[P16].set_scope("mma.matrix_a")
        rf = _gemm_into(s, OF, None, VS, "f16")
        for x, intrin in ((P16, "cuda.mma_acc_to_a_f16"), (P, "cuda.mma_exp_diff_f32")):
            s[x].compute_at(s[OF], rf)
            s[x].tensorize(s[x].op.axis[0], tc.tensor_intrin(intrin))
    return s, ([Q, Kt, V, out] if kind == "exp" else [Q, Kt, out])



def _scores_then(M, D, L, value, intrin):
    """``X[i, j] = value(S, i, j)`` of the scores ``S = Q K^T`` held in registers, each
    16 x 16 tile of ``X`` tensorized with ``intrin`` and stored (float32, global).
    Returns ``(s, Q, K, X, the warp loop of X)``."""
    Q, Kt = (tc.placeholder(shape, "float16", name=n) for n, shape in (("Q", (M, D)),
                                                                      ("K", (L, D))))
    S = _mm(Q, Kt, "S", transpose_b=True)
    X = tc.compute((M, L), lambda i, j: value(S, i, j), name="x")
    s = tc.create_schedule(X.op)
    XF, w = _warp_store(s, X)
    QS, KS = _shared(s, (Q, Kt), (S, S), X, w, M // 16)
    s[S].set_scope("mma.accumulator")
    _gemm_into(s, S, QS, KS, "f16", (s[X], w), transposed=True)
    xi, xj = s[XF].op.axis
    fj, xj = s[XF].split(xj, 16)
    s[XF].reorder(fj, xi, xj)
    s[XF].tensorize(xi, tc.tensor_intrin(intrin))
    return s, Q, Kt, X, w


def _row_max_at(s, Mx, at, w):
    """The rows' maximum ``Mx`` (``[rows, 16]``, a row tile) in each warp's registers at
    ``at``'s warp loop ``w`` (``cuda.mma_row_max_f32`` per 16 columns of the scores)."""
    s[Mx].set_scope("mma.accumulator")
    s[Mx].compute_at(s[at], w)
    mf, mc = s[Mx].split(s[Mx].op.reduce_axis[0], 16)
    mi, mj = s[Mx].op.axis
    s[Mx].reorder(mf, mi, mj, mc)
    s[Mx].tensorize(mi, tc.tensor_intrin("cuda.mma_row_max_f32"))


def exp_tile(intrin: str, M=16, D=16, L=48, base2: bool = False):
    """``X = exp(S - m)`` (``m = -inf`` read as 0: 0, the scores ``-inf`` there too;
    ``base2``: ``2^(S - m)``) of the scores ``S = Q K^T`` and their rows' maximum ``m``,
    in registers, each 16 x 16 tile by ``intrin`` (``cuda.mma_exp_diff_or_zero_f32`` or its ftz twin; with ``base2``,
    ``cuda.mma_exp2_diff_or_zero_f32`` or its), stored (float32, global)."""
    Q, Kt = (tc.placeholder(shape, "float16", name=n) for n, shape in (("Q", (M, D)),
                                                                      ("K", (L, D))))
    S = _mm(Q, Kt, "S", transpose_b=True)
    c = tc.reduce_axis((0, L), name="c")
    Mx = tc.compute((M, 16), lambda i, j: tc.max(S[i, c], axis=c), name="m")
    ninf = tc.const(float("-inf"), F32)
    X = tc.compute((M, L), lambda i, j: (tc.exp2 if base2 else tc.fast_exp)(
        S[i, j] - tc.if_then_else(tc.ne(Mx[i, j % 16], ninf), Mx[i, j % 16],
                                  tc.const(0.0, F32))), name="x")
    s = tc.create_schedule(X.op)
    XF, w = _warp_store(s, X)
    QS, KS = _shared(s, (Q, Kt), (S, S), X, w, M // 16)
    s[S].set_scope("mma.accumulator")
    _gemm_into(s, S, QS, KS, "f16", (s[X], w), transposed=True)
    _row_max_at(s, Mx, X, w)
    xi, xj = s[XF].op.axis
    fj, xj = s[XF].split(xj, 16)
    s[XF].reorder(fj, xi, xj)
    s[XF].tensorize(xi, tc.tensor_intrin(intrin))
    return s, [Q, Kt, X]


def biased_scores(M=32, D=32, L=48):
    """``X = Q K^T + bias[j]`` in registers (``cuda.mma_add_cols_f32``: the bias a vector
    of the keys in global memory, ``-inf`` where a key is masked), stored."""
    bias = tc.placeholder((L,), F32, name="bias")
    s, Q, Kt, X, _ = _scores_then(M, D, L, lambda S, i, j: S[i, j] + bias[j],
                                  "cuda.mma_add_cols_f32")
    return s, [Q, Kt, bias, X]


def _causal(qpos, kpos):
    return lambda S, i, j: tc.if_then_else(kpos[j] <= qpos[i], S[i, j],
                                           tc.const(float("-inf"), F32))


def causal_scores(M=32, D=32, L=48, off=16, positions="computed"):
    """``X = Q K^T`` with ``-inf`` where key ``j`` comes after query ``i`` (``j > i +
    off``), in registers (``cuda.mma_mask_causal_f32``).  ``positions="computed"``: the
    rows' and keys' positions ``i + off`` and ``j`` computed into shared memory by each
    warp (one element a lane); ``"given"``: two int32 vectors in global memory, ``qpos``
    and ``kpos`` (arguments)."""
    if positions == "given":
        qpos = tc.placeholder((M,), "int32", name="qpos")
        kpos = tc.placeholder((L,), "int32", name="kpos")
    else:
        qpos = tc.compute((M,), lambda i: i + off, name="qpos")
        kpos = tc.compute((L,), lambda j: j, name="kpos")
    s, Q, Kt, X, w = _scores_then(M, D, L, _causal(qpos, kpos), "cuda.mma_mask_causal_f32")
    if positions != "given":
        _positions_shared(s, (qpos, kpos), X, w)
    return s, [Q, Kt, X] if positions != "given" else [Q, Kt, qpos, kpos, X]


def _positions_shared(s, vectors, at, w):
    """The int32 position vectors computed into shared memory at ``at``'s warp loop
    ``w``, an element a lane."""
    for v in vectors:
        s[v].set_scope("shared")
        s[v].compute_at(s[at], w)
        _, tx = s[v].split(s[v].op.axis[0], 32)
        s[v].bind(tx, tc.thread_axis("threadIdx.x"))


def masked_tile(M=32, D=32, L=48, N=32, off=12, guarded=True):
    """One diagonal key tile of a masked FlashAttention step, per warp of 16 query rows,
    in registers: ``X = Q K^T + bias[j]`` (``cuda.mma_add_cols_f32``; ``bias`` a padding
    mask, ``-inf`` for masked keys and past the keys), ``-inf`` where key ``j`` is past
    query ``i + off`` (``cuda.mma_mask_causal_f32``, the positions computed into shared
    memory), ``m = rowmax X``, ``P = exp(X - m)`` (``guarded``: ``m = -inf`` read as 0,
    so 0 in a row with no key, ``cuda.mma_exp_diff_or_zero_f32``; else
    ``cuda.mma_exp_diff_f32``) and ``E = P.astype(f16) V`` with ``P`` converted in
    registers."""
    ninf = tc.const(float("-inf"), F32)
    Q, Kt, V = (tc.placeholder(shape, "float16", name=n)
                for n, shape in (("Q", (M, D)), ("K", (L, D)), ("V", (L, N))))
    bias = tc.placeholder((L,), F32, name="bias")
    qpos = tc.compute((M,), lambda i: i + off, name="qpos")
    kpos = tc.compute((L,), lambda j: j, name="kpos")
    S = _mm(Q, Kt, "S", transpose_b=True)
    B = tc.compute((M, L), lambda i, j: S[i, j] + bias[j], name="b")
    X = tc.compute((M, L), lambda i, j: tc.if_then_else(kpos[j] <= qpos[i], B[i, j], ninf),
                   name="x")
    c = tc.reduce_axis((0, L), name="c")
    Mx = tc.compute((M, 16), lambda i, j: tc.max(X[i, c], axis=c), name="m")
    if guarded:
        P = tc.compute((M, L), lambda i, j: tc.fast_exp(X[i, j] - tc.if_then_else(
            tc.ne(Mx[i, j % 16], ninf), Mx[i, j % 16], tc.const(0.0, F32))), name="p")
    else:
        P = tc.compute((M, L), lambda i, j: tc.fast_exp(X[i, j] - Mx[i, j % 16]), name="p")
    P16 = tc.compute((M, L), lambda i, j: P[i, j].astype("float16"), name="p16")
    E = _mm(P16, V, "E")
    s = tc.create_schedule(E.op)
    OF, w = _warp_store(s, E)
    QS, KS = _shared(s, (Q, Kt), (S, S), E, w, M // 16)
    s[S].set_scope("mma.accumulator")
    _gemm_into(s, S, QS, KS, "f16", (s[E], w), transposed=True)
    _positions_shared(s, (qpos, kpos), E, w)
    for x, intrin in ((B, "cuda.mma_add_cols_f32"), (X, "cuda.mma_mask_causal_f32")):
        s[x].set_scope("mma.accumulator")
        s[x].compute_at(s[E], w)
        xi, xj = s[x].op.axis
        fj, xj = s[x].split(xj, 16)
        s[x].reorder(fj, xi, xj)
        s[x].tensorize(xi, tc.tensor_intrin(intrin))
    _row_max_at(s, Mx, E, w)
    (VS,) = _shared(s, (V,), (OF,), E, w, M // 16)
    s[P].set_scope("mma.accumulator")
    s[P16].set_scope("mma.matrix_a")
    rf = _gemm_into(s, OF, None, VS, "f16")
    exp = "cuda.mma_exp_diff_or_zero_f32" if guarded else "cuda.mma_exp_diff_f32"
    for x, intrin in ((P16, "cuda.mma_acc_to_a_f16"), (P, exp)):
        s[x].compute_at(s[OF], rf)
        s[x].tensorize(s[x].op.axis[0], tc.tensor_intrin(intrin))
    return s, [Q, Kt, V, bias, E]


def check_masked_tile(mod, guarded=True, off=12, mode=None, M=32, D=32, L=48, N=32):
    """Against float64: keys 0..12 and 41.. masked by the bias (row 0, query position 12,
    has no key: its output is 0), the others by the causal test."""
    rng = np.random.default_rng(7)
    q, k, v = _f16(rng, M, D), _f16(rng, L, D), _f16(rng, L, N)
    bias = rng.standard_normal(L).astype(np.float32)
    bias[:13] = bias[41:] = -np.inf
    got = np.full((M, N), 7.0, np.float32)
    mod(q, k, v, bias, got, **({"mode": mode} if mode else {}))
    x = _f64(q) @ _f64(k).T + bias
    x[np.arange(L)[None, :] > np.arange(M)[:, None] + off] = -np.inf
    empty = np.isneginf(x).all(axis=1)
    assert empty[0] and not empty[1:].any()
    m = x.max(axis=1, keepdims=True)
    p = np.where(empty[:, None], 0.0, np.exp(x - np.where(empty[:, None], 0.0, m)))
    want = _round16(p) @ _f64(v)
    if not guarded:   # exp(-inf - -inf): the row with no key is NaN, the others as guarded
        assert np.isnan(got[0]).all()
        got, want = got[1:], want[1:]
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=1e-4 * np.abs(want).max())


def _f16(rng, *shape, dtype="float16"):
    return rng.standard_normal(shape, dtype=np.float32).astype(NP[dtype])


def _f64(x):
    return np.asarray(x).astype(np.float64)


def _round16(x, dtype="float16"):
    return _f64(np.asarray(x, np.float32).astype(NP[dtype]))


def check_back_to_back(mod, dtype, mode=None, M=32, K=32, J=32, N=48):
    rng = np.random.default_rng(3)
    a, b, c = _f16(rng, M, K, dtype=dtype), _f16(rng, K, J, dtype=dtype), _f16(rng, J, N, dtype=dtype)
    e = np.full((M, N), np.nan, np.float32)
    mod(a, b, c, e, **({"mode": mode} if mode else {}))
    # A B rounded to the 16-bit dtype by the conversion, then the second GEMM in float32
    t = _round16(_f64(a) @ _f64(b), dtype)
    want = t @ _f64(c)
    assert not np.isnan(e).any()
    np.testing.assert_allclose(e, want, rtol=0, atol=1e-5 * J * np.abs(want).max() / 16)


def check_softmax_tile(mod, kind, mode=None, M=32, D=32, L=48, N=32):
    rng = np.random.default_rng(4)
    q, k, v = _f16(rng, M, D), _f16(rng, L, D), _f16(rng, L, N)
    q[5, 7] = np.nan   # (row 5: NaN throughout S; the maximum and the sum keep it)
    s = _f64(q) @ _f64(k).T
    m = s.max(axis=1, keepdims=True)   # (NaN in row 5)
    if kind == "exp":
        want = _round16(np.exp(s - m)) @ _f64(v)
        got = np.full((M, N), 7.0, np.float32)
        mod(q, k, v, got, **({"mode": mode} if mode else {}))
    else:
        want = {"sum": np.broadcast_to(s.sum(axis=1, keepdims=True), (M, 16)),
                "mul": s * m}[kind]
        got = np.full(want.shape, 7.0, np.float32)
        mod(q, k, got, **({"mode": mode} if mode else {}))
    nan = np.isnan(want)
    assert nan[5].all() and not nan[np.arange(M) != 5].any()
    np.testing.assert_array_equal(np.isnan(got), nan)
    ok = ~nan
    np.testing.assert_allclose(got[ok], want[ok], rtol=2e-3 if kind == "exp" else 1e-5,
                               atol=1e-4 * np.abs(want[ok]).max())



def check_biased(mod, masked, mode=None, M=32, D=32, L=48):
    rng = np.random.default_rng(5)
    q, k = _f16(rng, M, D), _f16(rng, L, D)
    bias = rng.standard_normal(L).astype(np.float32)
    bias[masked] = -np.inf
    x = np.full((M, L), np.nan, np.float32)
    mod(q, k, bias, x, **({"mode": mode} if mode else {}))
    want = _f64(q) @ _f64(k).T + bias
    ok = np.isfinite(want)
    assert np.isneginf(x[:, masked]).all() and np.isfinite(x[ok]).all()
    np.testing.assert_allclose(x[ok], want[ok], rtol=0, atol=1e-5 * np.abs(want[ok]).max())

def check_causal(mod, given, off=16, mode=None, M=32, D=32, L=48):
    rng = np.random.default_rng(6)
    q, k = _f16(rng, M, D), _f16(rng, L, D)
    x = np.full((M, L), np.nan, np.float32)
    qpos, kpos = np.arange(M, dtype=np.int32) + off, np.arange(L, dtype=np.int32)
    if given:   # (any positions: each lane reads its own columns')
        kpos = rng.permutation(kpos).astype(np.int32)
    kw = {"mode": mode} if mode else {}
    mod(*((q, k, qpos, kpos, x) if given else (q, k, x)), **kw)
    want = _f64(q) @ _f64(k).T
    keep = kpos[None, :] <= qpos[:, None]
    assert keep.any() and not keep.all()   # (the mask cuts the tiles: some rows partly)
    np.testing.assert_array_equal(np.isneginf(x), ~keep)
    np.testing.assert_allclose(x[keep], want[keep], rtol=0,
                               atol=1e-5 * np.abs(want[keep]).max())


# --------------------------------------------------------------------------- emulation


@needs_cxx
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_an_accumulator_feeds_the_next_mma_in_registers(dtype):
    """``(A B).astype(dtype) C`` with ``A B``'s accumulator converted into ``C``'s A
    operand by each lane (no shared memory between the GEMMs), in each emulation mode."""
    s, args = back_to_back(dtype=dtype)
    mod = tc.build(s, args, target="cuda-emu")
    src = mod.get_source()
    t = TC_DTYPES[dtype]
    assert f"= tc_pack2_{t}(AB[" in src and f"cvt.rn.{t}x2.f32" in src
    for mode in ("threads", "serial"):
        check_back_to_back(mod, dtype, mode)


@needs_cxx
@pytest.mark.parametrize("kind", ["exp", "sum", "mul"])
def test_flash_attention_step_in_registers(kind):
    """One key tile of FlashAttention-2's step, each warp's 16 rows in registers: the
    rows' maximum (or sum) across the quads of lanes, ``exp(S - m)``, and ``P V`` with ``P``
    converted in registers; a row of NaN stays NaN (the maximum propagates it)."""
    s, args = softmax_tile(kind=kind)
    mod = tc.build(s, args, target="cuda-emu")
    src = mod.get_source()
    assert src.count("__shfl_xor_sync(0xffffffffu, x, m)") == 1   # (the helper)
    if kind == "exp":
        assert "__expf(S[" in src and "tc_pack2_f16(p[" in src
        shared = [ln for ln in src.splitlines() if "__shared__" in ln and "[" in ln]
        assert shared and not any(" p" in ln for ln in shared)   # (p: no shared tile)
    check_softmax_tile(mod, kind, "serial")


@needs_cxx
def test_a_wrong_quad_exchange_is_caught(monkeypatch):
    """The rows' maximum depends on which lanes exchange: shuffle with lane masks 4 and 8
    (the lanes of other rows) instead of 1 and 2, and the maximum is wrong."""
    helpers = dict(CudaRenderer.EXTRA_HELPERS)
    helpers["tc_quad_max_f32"] = helpers["tc_quad_max_f32"].replace(
        "for (int m = 1; m <= 2; m <<= 1)", "for (int m = 4; m <= 8; m <<= 1)")
    monkeypatch.setattr(CudaRenderer, "EXTRA_HELPERS", helpers)
    s, args = softmax_tile(kind="mul")
    mod = tc.build(s, args, target="cuda-emu")
    assert "for (int m = 4; m <= 8; m <<= 1)" in mod.get_source()
    with pytest.raises(AssertionError):
        check_softmax_tile(mod, "mul", "serial")



@needs_cxx
def test_a_bias_of_the_keys_is_added_in_registers():
    """``S + bias[j]`` with each lane loading its 4 columns' biases (-inf for masked keys:
    their scores become -inf, the others exact to float32's sums)."""
    s, args = biased_scores()
    check_biased(tc.build(s, args, target="cuda-emu"), [3, 17, 40, 47], "serial")

@needs_cxx
@pytest.mark.parametrize("ftz", [False, True])
def test_an_exp_in_registers_flushes_subnormal_results_with_ftz(ftz):
    """``exp(S - m)`` of scores 4 apart (row ``i``'s key ``j`` at ``-4 j`` below its
    maximum): down to ``exp(-84)`` normal floats, ``exp(-88)`` to ``exp(-100)`` subnormal
    ones, which ``cuda.mma_exp_diff_or_zero_ftz_f32`` (``ex2.approx.ftz``, as the CUDA
    emulation runs it) gives as 0 and ``cuda.mma_exp_diff_or_zero_f32`` keeps; a row of
    ``-inf`` scores (its maximum ``-inf``) gives 0, a row of an infinite maximum NaN
    (``inf - inf``) where its scores are infinite too."""
    name = f"cuda.mma_exp_diff_or_zero{'_ftz' if ftz else ''}_f32"
    s, args = exp_tile(name)
    mod = tc.build(s, args, target="cuda-emu")
    assert ("ex2.approx.ftz.f32" in mod.get_source()) == ftz
    q = np.zeros((16, 16), np.float16)
    k = np.zeros((48, 16), np.float16)
    q[:, 0] = 1
    k[:, 0] = -4 * np.arange(48)
    k[:, 1] = 1
    q[3, :2] = 0, -np.inf    # (row 3: every score -inf)
    q[5, 0] = 0              # (row 5: every score 0)
    q[9, :2] = 0, np.inf     # (row 9: every score inf)
    x = np.full((16, 48), 7.0, np.float32)
    mod(q, k, x, mode="serial")
    want = np.exp(-4.0 * np.arange(48))
    tiny = want < np.finfo(np.float32).tiny
    assert tiny[22:].all() and not tiny[:22].any() and (want[22:26] > 1e-45).all()
    for r in (0, 7, 15):
        np.testing.assert_allclose(x[r, :22], want[:22], rtol=2e-5)   # (x log2(e) rounded)
        if ftz:
            assert (x[r, 22:] == 0).all()
        else:
            assert (x[r, 22:26] > 0).all() and (x[r, 22:26] < 1.2e-38).all()
    np.testing.assert_allclose(x[5], 1.0, rtol=1e-6)
    assert (x[3] == 0).all() and np.isnan(x[9]).all()


@needs_cxx
@pytest.mark.parametrize("ftz", [False, True])
def test_an_exp2_in_registers(ftz):
    """``2^(S - m)`` of scores 4 apart (``cuda.mma_exp2_diff_or_zero_f32``, operands in
    base-2 units: ``ex2.approx`` of the difference, no multiply by ``log2(e)``): exact
    powers of two down to ``2^-124``, ``2^-128`` to ``2^-148`` subnormal (kept; 0 with the
    ftz twin), a row whose maximum is ``-inf`` 0, an infinite one NaN."""
    name = f"cuda.mma_exp2_diff_or_zero{'_ftz' if ftz else ''}_f32"
    s, args = exp_tile(name, base2=True)
    mod = tc.build(s, args, target="cuda-emu")
    src = mod.get_source()
    assert ("ex2.approx.ftz.f32" in src) == ftz and ("ex2.approx.f32" in src) != ftz
    assert "1.44269504f" not in src
    q = np.zeros((16, 16), np.float16)
    k = np.zeros((48, 16), np.float16)
    q[:, 0] = 1
    k[:, 0] = -4 * np.arange(48)
    k[:, 1] = 1
    q[3, :2] = 0, -np.inf
    q[5, 0] = 0
    q[9, :2] = 0, np.inf
    x = np.full((16, 48), 7.0, np.float32)
    mod(q, k, x, mode="serial")
    want = np.exp2(-4.0 * np.arange(48))
    for r in (0, 7, 15):
        np.testing.assert_array_equal(x[r, :32], want[:32])    # (2^-n exactly)
        if ftz:
            assert (x[r, 32:] == 0).all()
        else:
            np.testing.assert_array_equal(x[r, 32:38], want[32:38].astype(np.float32))
            assert (x[r, 38:] == 0).all()
    assert (x[5] == 1.0).all() and (x[3] == 0).all() and np.isnan(x[9]).all()


@needs_cxx
@pytest.mark.parametrize("positions", ["computed", "given"])
def test_a_causal_mask_in_registers(positions):
    """The scores of key ``j`` past query ``i + 16`` set to ``-inf`` in registers from the
    tiles' row and column positions (computed into shared memory, or given), the others
    exact to float32's sums: each of the three 16-key tiles of the 32 rows is cut by the
    diagonal, whole or empty for some rows."""
    s, args = causal_scores(positions=positions)
    mod = tc.build(s, args, target="cuda-emu")
    assert "-INFINITY" in mod.get_source()
    check_causal(mod, positions == "given", mode="serial")


def _copy_intrin():
    """An accumulator tile copied (``c = a``), register by register: the causal mask's
    intrinsic without the mask, for ``Stage._tensorize_unmasked``."""
    a = tc.placeholder((16, 16), F32, name="a")

    def emit(cb, ins, outs):
        cb.emit(f"for (int r = 0; r < 8; ++r) {outs[0].fragment}[r] = {ins[0].fragment}[r];")
    return tc.decl_tensor_intrin(tc.compute((16, 16), lambda i, j: a[i, j], name="c"),
                                 cuda=emit, dense=False, name="test.mma_copy_f32")


@needs_cxx
def test_the_tiles_the_causal_mask_leaves_whole_run_without_it():
    """``Stage._tensorize_unmasked``: the causal mask's tiles whose last key comes before
    their first query (positions ``i + 16`` and ``j``, computed: read as those
    expressions of the indices) run a copy instead, the others the mask (a test per 16 x
    16 tile: 3 of the 6 tiles of 32 rows and 48 keys whole); the values are the mask's."""
    s, args = causal_scores()
    XF = s.stages[[st.name for st in s.stages].index("x.mma.accumulator")]
    XF._tensorize_unmasked(_copy_intrin())
    text = str(tc.lower(s, args, target="cuda-emu"))
    assert text.count("tensorize test.mma_copy_f32 ") == 1
    assert "} else {\n" in text and text.count("tensorize cuda.mma_mask_causal_f32 ") == 1
    mod = tc.build(s, args, target="cuda-emu")
    check_causal(mod, False, mode="serial")


@needs_cxx
@pytest.mark.parametrize("guarded", [True, False])
def test_a_masked_diagonal_tile_in_registers(guarded):
    """A padding mask (a bias of the keys) and the causal test on one tile of scores in
    registers, then the row maximum, ``exp`` and ``P V``: each key dropped where either
    mask says so; a row with no key gives 0 with ``cuda.mma_exp_diff_or_zero_f32`` and
    NaN with ``cuda.mma_exp_diff_f32`` (``exp(-inf + inf)``)."""
    s, args = masked_tile(guarded=guarded)
    mod = tc.build(s, args, target="cuda-emu")
    src = mod.get_source()
    shared = [ln for ln in src.splitlines() if "__shared__" in ln and "[" in ln]
    assert not any(f" {x}[" in ln for ln in shared for x in ("x", "b", "p", "S"))
    check_masked_tile(mod, guarded, mode="serial")


@needs_cxx
def test_a_causal_mask_of_swapped_positions_is_caught(monkeypatch):
    """The mask depends on which position is compared with which: keep a score where the
    query's position is at most the key's (the mask reflected across the diagonal) and
    the result is wrong."""
    monkeypatch.setattr(intrin_mma, "CAUSAL_KEEP", "{q} <= {k}")
    s, args = causal_scores(positions="given")
    mod = tc.build(s, args, target="cuda-emu")
    assert "(tc_q0 <= tc_k0)" in mod.get_source()
    with pytest.raises(AssertionError):
        check_causal(mod, True, mode="serial")


def test_a_causal_mask_needs_its_positions_as_vectors():
    """``cuda.mma_mask_causal_f32`` reads each row's position along the row (column
    stride 0): positions indexed by the column are refused with a BuildError naming the
    operand."""
    pos = tc.placeholder((48,), "int32", name="pos")
    s, Q, Kt, X, _ = _scores_then(32, 32, 48, lambda S, i, j: tc.if_then_else(
        pos[j] <= pos[j], S[i, j], tc.const(float("-inf"), F32)), "cuda.mma_mask_causal_f32")
    with pytest.raises(tc.errors.BuildError, match="qpos is a vector of int32 in memory read "
                       "along the tile's rows"):
        tc.build(s, [Q, Kt, pos, X], target="cuda")


@needs_cxx
def test_a_wrong_register_pairing_is_caught(monkeypatch):
    """The emulation's result depends on the lanes' registers: pair the accumulator's
    floats into A's registers in another order and the second GEMM is wrong."""
    monkeypatch.setattr(intrin_mma, "ACC_TO_A", ((0, 1), (4, 5), (2, 3), (6, 7)))
    s, args = back_to_back()
    mod = tc.build(s, args, target="cuda-emu")
    with pytest.raises(AssertionError):
        check_back_to_back(mod, "float16", "serial")


def test_the_printed_ir_names_the_register_intrinsics():
    s, args = softmax_tile(kind="exp")
    text = str(tc.lower(s, args, target="cuda"))
    for name in ("fill_neg_inf_f32", "row_max_f32", "exp_diff_f32", "acc_to_a_f16"):
        assert f"tensorize cuda.mma_{name} " in text
    # p and its 16-bit copy are fragments: nothing of them in shared memory
    assert "p16: float16[16, 16] (mma.matrix_a)" in text and "(shared" not in \
        text.split("allocate p:")[1].split("\n")[0]


def test_an_accumulator_read_transposed_is_refused():
    """``cuda.mma_acc_to_a_*`` gives the A operand as stored; an mma that reads the
    fragment as ``A[k, i]`` would need the other layout: a BuildError naming it."""
    M = K = J = N = 32
    A, B, C = (tc.placeholder((M, M), "float16", name=n) for n in "ABC")
    AB = _mm(A, B, "AB")
    T = tc.compute((M, J), lambda i, j: AB[i, j].astype("float16"), name="T")
    r = tc.reduce_axis((0, J), name="r")
    E = tc.compute((M, N), lambda i, n: tc.sum(T[r, i].astype(F32) * C[r, n].astype(F32),
                                               axis=r), name="E")
    s = tc.create_schedule(E.op)
    EF, w = _warp_store(s, E)
    AS, BS, CS = _shared(s, (A, B, C), (AB, AB, EF), E, w, M // 16)
    s[AB].set_scope("mma.accumulator")
    s[T].set_scope("mma.matrix_a")
    rf = _gemm_into(s, EF, None, CS, "f16")
    s[T].compute_at(s[EF], rf)
    s[T].tensorize(s[T].op.axis[0], tc.tensor_intrin("cuda.mma_acc_to_a_f16"))
    _gemm_into(s, AB, AS, BS, "f16", (s[EF], rf))
    with pytest.raises(tc.errors.BuildError, match="read by its mma transposed"):
        tc.build(s, [A, B, C, E], target="cuda")


# --------------------------------------------------------------------------- PTX


@needs_nvcc
@pytest.mark.parametrize("what", ["back to back bf16", "softmax tile", "biased scores",
                                  "causal scores", "masked tile"])
def test_ptx_of_the_register_step_and_nothing_spills(what):
    s, args = {"back to back bf16": lambda: back_to_back(dtype="bfloat16"),
               "softmax tile": softmax_tile, "biased scores": biased_scores,
               "causal scores": causal_scores, "masked tile": masked_tile}[what]()
    src = tc.build(s, args, target="cuda -arch=sm_90").get_source()
    for kernel, use in ptxas_usage(src, "sm_90").items():
        assert use["spill_stores"] == use["spill_loads"] == use["stack"] == 0, (kernel, use)


@needs_nvcc
def test_the_rows_maximum_is_max_nan_in_ptx():
    """The rows' maximum (each lane's elements, the quad's shuffles, the running value)
    is ``max.NaN.f32`` in the PTX of sm_80 and later (one FMNMX.NAN, where the compares
    that propagate NaN take two FSETP and an FSEL); the CUDA emulation runs the compares
    (``tc_max_nan_f32``; its NaN rows: ``test_flash_attention_step_in_registers``)."""
    s, args = softmax_tile(kind="mul")
    src = tc.build(s, args, target="cuda -arch=sm_80").get_source()
    helper = src[src.index("float tc_max_nan_f32("):]
    assert helper.index("float tc_max_nan_f32(") < helper.index("float tc_quad_max_f32(")
    assert "tc_max_nan_f32(x, y)" in src and "tc_max_nan_f32(m[" in src
    ptx = compile_ptx(src, "sm_80")
    assert ptx.count("max.NaN.f32") >= 6 and "max.f32" not in ptx


# --------------------------------------------------------------------------- GPU


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_an_accumulator_feeds_the_next_mma_on_the_gpu(gpu_driver, dtype):
    s, args = back_to_back(dtype=dtype)
    check_back_to_back(tc.build(s, args, target="cuda"), dtype)


@pytest.mark.gpu
def test_a_bias_of_the_keys_on_the_gpu(gpu_driver):
    s, args = biased_scores()
    check_biased(tc.build(s, args, target="cuda"), [7, 31])


@pytest.mark.gpu
def test_a_masked_diagonal_tile_on_the_gpu(gpu_driver):
    s, args = masked_tile()
    check_masked_tile(tc.build(s, args, target="cuda"))


@pytest.mark.gpu
@pytest.mark.parametrize("positions", ["computed", "given"])
def test_a_causal_mask_on_the_gpu(gpu_driver, positions):
    s, args = causal_scores(positions=positions)
    check_causal(tc.build(s, args, target="cuda"), positions == "given")


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["exp", "sum", "mul"])
def test_flash_attention_step_in_registers_on_the_gpu(gpu_driver, kind):
    s, args = softmax_tile(kind=kind)
    check_softmax_tile(tc.build(s, args, target="cuda"), kind)
