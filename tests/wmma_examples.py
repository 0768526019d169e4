"""A tensor-core GEMM scheduled by hand (shared by tests/test_tensorcore.py and the
must-fail tests)."""
from __future__ import annotations

import numpy as np

import tecomp as tc
from tecomp.nn import ops
from tecomp.strategy.cuda.tensorcore import family_intrinsics


def hgemm(M, N, K):
    A = tc.placeholder((M, K), "float16", name="A")
    B = tc.placeholder((K, N), "float16", name="B")
    return A, B, ops.matmul(A, B, out_dtype="float32")


def inputs(M, N, K, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((M, K), dtype=np.float32).astype(np.float16)
    b = rng.standard_normal((K, N), dtype=np.float32).astype(np.float16)
    return a, b, a.astype(np.float64) @ b.astype(np.float64)


def hand_schedule(M=64, N=64, K=64, bm=64, warps=2, kt=32, lanes=32, load_a=True,
                  store_by_lane=False, family="wmma", bn=None, scopes=None, a_shared=True):
    """A tensor-core GEMM written with the schedule primitives, as TVM's tutorial does:
    shared tiles, fragments, four tensorized stages; ``family`` "wmma" or "mma" (the
    same schedule: only the fragment scopes and the intrinsics' names differ); ``bm x
    bn`` (default ``bm x bm``) tiles of C per block, ``warps x warps`` warps.  The
    mistakes the must-fail tests make: ``lanes`` threads on threadIdx.x (a warp needs
    32), ``load_a=False`` (the A fragment copied element by element), ``store_by_lane``
    (the fragment tiles of C stored by threadIdx.x, one per lane), ``scopes`` (the
    fragments in the other family's scopes), ``a_shared=False`` (the A fragment loaded
    from global memory)."""
    names = family_intrinsics(family, "float16")
    scopes = scopes or family
    bn = bn or bm
    A, B, C = hgemm(M, N, K)
    s = tc.create_schedule(C.op)
    AS = s.cache_read(A, "shared", [C]) if a_shared else A
    BS = s.cache_read(B, "shared", [C])
    AF = s.cache_read(AS, f"{scopes}.matrix_a", [C])
    BF = s.cache_read(BS, f"{scopes}.matrix_b", [C])
    CF = s.cache_write(C, f"{scopes}.accumulator")
    i, j = s[C].op.axis
    bi, i = s[C].split(i, bm)
    bj, j = s[C].split(j, bn)
    wi, i = s[C].split(i, bm // warps)
    wj, j = s[C].split(j, bn // warps)
    ti, i = s[C].split(i, 16)
    tj, j = s[C].split(j, 16)
    s[C].reorder(bi, bj, wi, wj, ti, tj, i, j)
    s[C].bind(bi, tc.thread_axis("blockIdx.y"))
    s[C].bind(bj, tc.thread_axis("blockIdx.x"))
    s[C].bind(wi, tc.thread_axis("threadIdx.z"))
    s[C].bind(wj, tc.thread_axis("threadIdx.y"))
    if store_by_lane:   # (32 tiles a warp or more: bm // warps >= 96)
        t = s[C].fuse(ti, tj)
        _, lane = s[C].split(t, 32)
        s[C].bind(lane, tc.thread_axis("threadIdx.x"))
    s[C].tensorize(i, tc.tensor_intrin(names["store"]))
    s[CF].compute_at(s[C], wj)
    ci, cj = s[CF].op.axis
    ko, k = s[CF].split(s[CF].op.reduce_axis[0], kt)
    kf, k = s[CF].split(k, 16)
    fi, ci = s[CF].split(ci, 16)
    fj, cj = s[CF].split(cj, 16)
    s[CF].reorder(ko, kf, fi, fj, ci, cj, k)
    s[CF].tensorize(ci, tc.tensor_intrin(names["mma"]))
    s[AF].compute_at(s[CF], kf)
    s[BF].compute_at(s[CF], kf)
    r, _ = s[AF].op.axis
    _, r = s[AF].split(r, 16)
    if load_a:
        s[AF].tensorize(r, tc.tensor_intrin(names["load_a"]))
    r, c = s[BF].op.axis
    co, c = s[BF].split(c, 16)
    s[BF].reorder(co, r, c)
    s[BF].tensorize(r, tc.tensor_intrin(names["load_b"]))
    for T in (AS, BS) if a_shared else (BS,):
        s[T].compute_at(s[CF], ko)
        f = s[T].fuse(*s[T].op.axis)
        f, v = s[T].split(f, 8)
        f, tx = s[T].split(f, lanes)
        f, ty = s[T].split(f, warps)
        f, tz = s[T].split(f, warps)
        s[T].bind(tx, tc.thread_axis("threadIdx.x"))
        s[T].bind(ty, tc.thread_axis("threadIdx.y"))
        s[T].bind(tz, tc.thread_axis("threadIdx.z"))
        s[T].vectorize(v)
    return s, (A, B, C), {"AS": AS, "BS": BS, "AF": AF, "BF": BF, "CF": CF}
