"""GPU-bound PrimFuncs built by hand from tecomp.ir nodes, shared by the CUDA tests.

Each builder returns a :class:`Case`: the PrimFunc (in the form the lowering emits:
``For(kind="thread", thread_tag=...)`` loops, ``shared``/``local`` allocations,
``Evaluate(Call("syncthreads"))`` barriers), a way to make arguments, and the expected
results computed with numpy.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Dict, List

import numpy as np

from tecomp.ir import (
    Allocate, Buffer, BufferLoad, BufferStore, Call, Cast, Const, Evaluate, For, IfThenElse, Let,
    LetStmt, PrimFunc, Select, Var, seq,
)
from tecomp.ir import op as O
from tecomp.ir.expr import FloorDiv, FloorMod, TruncDiv, TruncMod, as_expr


def L(buf: Buffer, *idx):
    """buf[idx] as an expression."""
    return BufferLoad(buf, tuple(as_expr(i) for i in idx), buf.dtype)


def S(buf: Buffer, value, *idx):
    """buf[idx] = value."""
    return BufferStore(buf, as_expr(value, buf.dtype), tuple(as_expr(i) for i in idx))


def thread(var: Var, extent, tag: str, body, lo=0):
    return For(var, as_expr(lo), as_expr(extent), "thread", body, tag)


def loop(var: Var, extent, body, kind="serial", lo=0):
    return For(var, as_expr(lo), as_expr(extent), kind, body)


SYNC = Evaluate(Call("syncthreads", (), "int32"))


def f32(x):
    return np.asarray(x, dtype=np.float32)


@dataclass
class Case:
    name: str
    func: PrimFunc
    make_args: Callable[[np.random.Generator], list]
    expected: Callable[[list], Dict[int, np.ndarray]]
    rtol: float = 0.0
    atol: float = 0.0
    modes: tuple = ("threads", "serial", "reverse")


# --------------------------------------------------------------------------- builders


def vector_add(symbolic: bool = True, n_const: int = 250) -> Case:
    """C = A + B; blockIdx.x x threadIdx.x (64) with a tail guard.

    Symbolic: grid ``(n + 63) // 64``.  Constant: 4 blocks x 64 threads over 250 elements.
    """
    n = Var("n") if symbolic else Const(n_const)
    A, B, C = (Buffer(x, (n,), "float32") for x in "ABC")
    bx, tx = Var("i.outer"), Var("i.inner")
    i = bx * 64 + tx
    body = IfThenElse(i < n, S(C, L(A, i) + L(B, i), i))
    grid = (n + 63) // 64 if symbolic else Const((n_const + 63) // 64)
    f = PrimFunc("vector_add" if symbolic else "vector_add_250", (A, B, C),
                 thread(bx, grid, "blockIdx.x", thread(tx, 64, "threadIdx.x", body)))

    def make(rng, size=1000 if symbolic else n_const):
        a, b = rng.standard_normal(size).astype("float32"), rng.standard_normal(size).astype("float32")
        return [a, b, np.zeros(size, "float32")]

    return Case(f.name, f, make, lambda a: {2: a[0] + a[1]})


def block_reverse(barrier: bool = True, nblocks: int = 4, nthreads: int = 64) -> Case:
    """Reverse each block of 64 elements through shared memory.

    Thread t writes S[t] and reads S[63 - t], another thread's element: correct only
    with the barrier between the write and the read.
    """
    total = nblocks * nthreads
    A, B = Buffer("A", (Const(total),), "float32"), Buffer("B", (Const(total),), "float32")
    Sh = Buffer("S.shared", (Const(nthreads),), "float32", scope="shared")
    b, t = Var("b"), Var("t")
    body = seq(
        S(Sh, L(A, b * nthreads + t), t),
        SYNC if barrier else None,
        S(B, L(Sh, (nthreads - 1) - t), b * nthreads + t),
    )
    f = PrimFunc("block_reverse" if barrier else "block_reverse_nobarrier", (A, B),
                 thread(b, nblocks, "blockIdx.x",
                        Allocate(Sh, thread(t, nthreads, "threadIdx.x", body))))

    def make(rng):
        return [np.arange(total, dtype="float32") + 1, np.zeros(total, "float32")]

    def expected(a):
        return {1: a[0].reshape(nblocks, nthreads)[:, ::-1].reshape(-1).copy()}

    return Case(f.name, f, make, expected)


def tiled_matmul(n: int = 64, tile: int = 16) -> Case:
    """C = A @ B with tile x tile blocks, shared-memory tiles loaded cooperatively (the
    loads are their own threadIdx loops nested in the compute's, as the lowering emits a
    stage computed at k.outer), a per-thread accumulator, and two barriers per k step."""
    N = Const(n)
    A, B, C = (Buffer(x, (N, N), "float32") for x in "ABC")
    As = Buffer("A.shared", (Const(tile), Const(tile)), "float32", scope="shared")
    Bs = Buffer("B.shared", (Const(tile), Const(tile)), "float32", scope="shared")
    Cl = Buffer("C.local", (Const(1),), "float32", scope="local")
    by, bx, ty, tx = Var("i.outer"), Var("j.outer"), Var("i.inner"), Var("j.inner")
    ko, ki = Var("k.outer"), Var("k.inner")
    a0, a1, b0, b1 = Var("ax0"), Var("ax1"), Var("ax0"), Var("ax1")
    load_a = thread(a0, tile, "threadIdx.y", thread(a1, tile, "threadIdx.x",
                    S(As, L(A, by * tile + a0, ko * tile + a1), a0, a1)))
    load_b = thread(b0, tile, "threadIdx.y", thread(b1, tile, "threadIdx.x",
                    S(Bs, L(B, ko * tile + b0, bx * tile + b1), b0, b1)))
    update = loop(ki, tile, S(Cl, L(Cl, 0) + L(As, ty, ki) * L(Bs, ki, tx), 0))
    kloop = loop(ko, n // tile, seq(load_a, load_b, SYNC, update, SYNC))
    inner = Allocate(Cl, seq(S(Cl, Const(0.0, "float32"), 0), kloop,
                             S(C, L(Cl, 0), by * tile + ty, bx * tile + tx)))
    body = thread(by, n // tile, "blockIdx.y", thread(bx, n // tile, "blockIdx.x",
                  Allocate(As, Allocate(Bs, thread(ty, tile, "threadIdx.y",
                                                   thread(tx, tile, "threadIdx.x", inner))))))
    f = PrimFunc("matmul", (A, B, C), body)

    def make(rng):
        return [rng.standard_normal((n, n)).astype("float32"),
                rng.standard_normal((n, n)).astype("float32"), np.zeros((n, n), "float32")]

    return Case(f.name, f, make, lambda a: {2: a[0].astype(np.float64) @ a[1].astype(np.float64)},
                rtol=1e-5, atol=1e-4)


def grid2d(symbolic: bool = True) -> Case:
    """B[i, j] = A[i, j] * 2 + 1 over an (m, n) array: a 2-D grid of 8 x 32 blocks with
    symbolic extents ``(m + 7) // 8`` and ``(n + 31) // 32``."""
    m, n = Var("m"), Var("n")
    A, B = Buffer("A", (m, n), "float32"), Buffer("B", (m, n), "float32")
    by, bx, ty, tx = Var("i.outer"), Var("j.outer"), Var("i.inner"), Var("j.inner")
    i, j = by * 8 + ty, bx * 32 + tx
    body = IfThenElse(O.all_(i < m, j < n), S(B, L(A, i, j) * 2.0 + 1.0, i, j))
    f = PrimFunc("grid2d", (A, B),
                 thread(by, (m + 7) // 8, "blockIdx.y", thread(bx, (n + 31) // 32, "blockIdx.x",
                        thread(ty, 8, "threadIdx.y", thread(tx, 32, "threadIdx.x", body)))))

    def make(rng, shape=(37, 45)):
        return [rng.standard_normal(shape).astype("float32"), np.zeros(shape, "float32")]

    return Case(f.name, f, make, lambda a: {1: a[0] * np.float32(2) + np.float32(1)})


def half_storage() -> Case:
    """float16 storage: C = A * B + 1 (computed in float32, stored rounded); D = float32(A);
    H = float16(X) from float32 X; G = float16(Y) from float64 Y; E = A copied (bits moved)."""
    n = Var("n")
    A, B, C, E = (Buffer(x, (n,), "float16") for x in ("A", "B", "C", "E"))
    D = Buffer("D", (n,), "float32")
    X, Y = Buffer("X", (n,), "float32"), Buffer("Y", (n,), "float64")
    H, G = Buffer("H", (n,), "float16"), Buffer("G", (n,), "float16")
    bx, tx = Var("bx"), Var("tx")
    i = bx * 128 + tx
    body = IfThenElse(i < n, seq(
        S(C, L(A, i) * L(B, i) + Const(1.0, "float16"), i),
        S(D, Cast(L(A, i), "float32"), i),
        S(E, L(A, i), i),
        S(H, Cast(L(X, i), "float16"), i),
        S(G, Cast(L(Y, i), "float16"), i),
    ))
    f = PrimFunc("half_storage", (A, B, C, D, E, X, Y, H, G),
                 thread(bx, (n + 127) // 128, "blockIdx.x", thread(tx, 128, "threadIdx.x", body)))

    def make(rng, size=4000):
        a = rng.standard_normal(size).astype("float16")
        b = rng.standard_normal(size).astype("float16")
        # values at every kind of float16 rounding case: exact halves, ties (midpoints),
        # one float32 ulp either side of a tie, subnormals, overflow, infinities, NaN
        hv = np.arange(0, 0x7C00, dtype=np.uint16).view(np.float16).astype(np.float64)
        mids = ((hv[:-1] + hv[1:]) / 2).astype(np.float32)
        cand = np.concatenate([hv.astype(np.float32), mids, np.nextafter(mids, np.float32(np.inf)),
                               np.nextafter(mids, np.float32(-np.inf))])
        cand = np.concatenate([cand, -cand])
        special = np.array([65504, 65519.99, 65520, 65536, 1e-8, 2.0**-25, 2.0**-25 * 1.0001,
                            2.0**-24 * 1.5, -0.0, np.inf, -np.inf, np.nan], np.float32)
        x = np.concatenate([special, rng.choice(cand, size - len(special))]).astype(np.float32)
        y = rng.choice(mids.astype(np.float64), size) * rng.choice([-1.0, 1.0], size)
        y += y * rng.choice([0.0, 2.0**-30, -(2.0**-30)], size)  # ties and just off them
        y[:10] = [2.0**-24 * 0.5, 2.0**-24 * 0.5000001, 1.0 + 2.0**-11, 1.0 + 2.0**-11 + 2.0**-40,
                  65520.0, 65519.999, -0.0, 3.0 * 2.0**-25, 2049.0, 2051.0]
        return [a, b, np.zeros(size, "float16"), np.zeros(size, "float32"), np.zeros(size, "float16"),
                x, y, np.zeros(size, "float16"), np.zeros(size, "float16")]

    def expected(a):
        A_, B_ = a[0].astype(np.float32), a[1].astype(np.float32)
        with np.errstate(over="ignore"):
                return {2: (A_ * B_ + np.float32(1)).astype(np.float16), 3: A_, 4: a[0].copy(),
                    7: a[5].astype(np.float16), 8: a[6].astype(np.float16)}

    return Case(f.name, f, make, expected)


# intrinsic -> numpy reference (float64 math; compared with a tolerance)
def _erf(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x)


INTRINSIC_REFS = {
    "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x),
    "tanh": np.tanh, "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "erf": _erf, "abs": np.abs,
    "floor": np.floor, "ceil": np.ceil, "round": np.round, "sin": np.sin, "cos": np.cos,
    "pow": lambda x: np.power(x, 1.5), "fast_exp": np.exp,
}


def intrinsics(dtype: str = "float32") -> Case:
    """OUT[k, i] = intrinsic_k(X[i]) for every math intrinsic (pow(x, 1.5) for pow)."""
    n = Var("n")
    names = list(INTRINSIC_REFS)
    X = Buffer("X", (n,), dtype)
    OUT = Buffer("OUT", (Const(len(names)), n), dtype)
    bx, tx = Var("bx"), Var("tx")
    i = bx * 64 + tx
    stores = []
    for k, name in enumerate(names):
        x = L(X, i)
        v = O.call("pow", x, Const(1.5, dtype)) if name == "pow" else O.call(name, x)
        stores.append(S(OUT, v, k, i))
    f = PrimFunc(f"intrinsics_{dtype}", (X, OUT),
                 thread(bx, (n + 63) // 64, "blockIdx.x",
                        thread(tx, 64, "threadIdx.x", IfThenElse(i < n, seq(*stores)))))

    def make(rng, size=500):
        x = rng.uniform(0.05, 4.0, size)
        x[:8] = [0.5, 1.5, 2.5, 3.5, 1.25, 2.75, 0.05, 4.0]  # round: ties go to even
        return [x.astype(dtype), np.zeros((len(names), size), dtype)]

    def expected(a):
        x = a[0].astype(np.float64)
        return {1: np.stack([INTRINSIC_REFS[nm](x) for nm in names]).astype(dtype)}

    tol = 2e-6 if dtype == "float32" else 1e-13
    return Case(f.name, f, make, expected, rtol=tol, atol=tol)


def int_divmod(dtype: str = "int32") -> Case:
    """Floor and truncating division and remainder of signed integers (negative operands,
    constant and variable divisors, x / -1 of the most negative value)."""
    n = Var("n")
    A, B = Buffer("A", (n,), dtype), Buffer("B", (n,), dtype)
    OUT = Buffer("OUT", (Const(8), n), dtype)
    bx, tx = Var("bx"), Var("tx")
    i = bx * 32 + tx
    a, b = L(A, i), L(B, i)
    c7, cm3 = Const(7, dtype), Const(-3, dtype)
    exprs = [FloorDiv(a, b, dtype), FloorMod(a, b, dtype), TruncDiv(a, b, dtype),
             TruncMod(a, b, dtype), FloorDiv(a, c7, dtype), FloorMod(a, c7, dtype),
             FloorDiv(a, cm3, dtype), FloorMod(a, cm3, dtype)]
    stores = [S(OUT, e, k, i) for k, e in enumerate(exprs)]
    f = PrimFunc(f"int_divmod_{dtype}", (A, B, OUT),
                 thread(bx, (n + 31) // 32, "blockIdx.x",
                        thread(tx, 32, "threadIdx.x", IfThenElse(i < n, seq(*stores)))))
    info = np.iinfo(dtype)

    def make(rng, size=300):
        a = rng.integers(-50, 50, size).astype(dtype)
        b = rng.integers(-9, 10, size).astype(dtype)
        b[b == 0] = 1
        a[:4] = [info.min, info.min, info.max, -1]
        b[:4] = [-1, 1, -1, 7]
        return [a, b, np.zeros((8, size), dtype)]

    def wrap(v):
        bits = info.bits
        v &= (1 << bits) - 1
        return v - (1 << bits) if v >= 1 << (bits - 1) else v

    def expected(args):
        rows = [[] for _ in range(8)]
        for x, y in zip(args[0].tolist(), args[1].tolist()):
            tq = abs(x) // abs(y) * (1 if (x < 0) == (y < 0) else -1)
            vals = [x // y, x % y, tq, x - tq * y, x // 7, x % 7, x // -3, x % -3]
            for r, v in zip(rows, vals):
                r.append(wrap(v))
        return {2: np.array(rows, dtype=dtype)}

    return Case(f.name, f, make, expected)


def minmax_nan() -> Case:
    """OUT[0] = max(A, B), OUT[1] = min(A, B): NaN propagates like numpy."""
    n = Var("n")
    A, B = Buffer("A", (n,), "float32"), Buffer("B", (n,), "float32")
    OUT = Buffer("OUT", (Const(2), n), "float32")
    bx, tx = Var("bx"), Var("tx")
    i = bx * 32 + tx
    body = IfThenElse(i < n, seq(S(OUT, O.maximum(L(A, i), L(B, i)), 0, i),
                                 S(OUT, O.minimum(L(A, i), L(B, i)), 1, i)))
    f = PrimFunc("minmax_nan", (A, B, OUT),
                 thread(bx, (n + 31) // 32, "blockIdx.x", thread(tx, 32, "threadIdx.x", body)))

    def make(rng, size=100):
        a = rng.standard_normal(size).astype("float32")
        b = rng.standard_normal(size).astype("float32")
        a[::7] = np.nan
        b[::5] = np.nan
        a[1], b[1] = -0.0, 0.0
        return [a, b, np.zeros((2, size), "float32")]

    return Case(f.name, f, make, lambda a: {2: np.stack([np.maximum(a[0], a[1]),
                                                         np.minimum(a[0], a[1])])})


def two_kernels_workspace() -> Case:
    """Two top-level stages through a global workspace T: T = A * 2 (kernel 0), then
    C[i] = T[n - 1 - i] + 1 (kernel 1; it reads other blocks' results, so it must be a
    separate launch)."""
    n = Var("n")
    A, C = Buffer("A", (n,), "float32"), Buffer("C", (n,), "float32")
    T = Buffer("T", (n,), "float32")
    b0, t0, b1, t1 = Var("i.outer"), Var("i.inner"), Var("i.outer"), Var("i.inner")
    i0, i1 = b0 * 64 + t0, b1 * 64 + t1
    k0 = thread(b0, (n + 63) // 64, "blockIdx.x", thread(t0, 64, "threadIdx.x",
                IfThenElse(i0 < n, S(T, L(A, i0) * 2.0, i0))))
    k1 = thread(b1, (n + 63) // 64, "blockIdx.x", thread(t1, 64, "threadIdx.x",
                IfThenElse(i1 < n, S(C, L(T, (n - 1) - i1) + 1.0, i1))))
    f = PrimFunc("two_kernels", (A, C), Allocate(T, seq(k0, k1)))

    def make(rng, size=300):
        return [rng.standard_normal(size).astype("float32"), np.zeros(size, "float32")]

    return Case(f.name, f, make, lambda a: {1: (a[0] * np.float32(2))[::-1] + np.float32(1)})


def padded_rows_workspace() -> Case:
    """A workspace with padded row strides (``storage_align``: rows of 3 elements 8 apart,
    as the tensor-core GEMM's packed operands): T[i, j] = A[i, j] * 2, then C[i, j] =
    T[n - 1 - i, j] + 1.  Its allocation spans the last row's stride (8 * (n - 1) + 3
    elements), not the shape's 3 * n."""
    n = Var("n")
    A, C = Buffer("A", (n, Const(3)), "float32"), Buffer("C", (n, Const(3)), "float32")
    T = Buffer("T", (n, Const(3)), "float32", (Const(8), Const(1)))
    b0, t0, b1, t1 = Var("i"), Var("j"), Var("i"), Var("j")
    k0 = thread(b0, n, "blockIdx.x", thread(t0, 3, "threadIdx.x",
                S(T, L(A, b0, t0) * 2.0, b0, t0)))
    k1 = thread(b1, n, "blockIdx.x", thread(t1, 3, "threadIdx.x",
                S(C, L(T, (n - 1) - b1, t1) + 1.0, b1, t1)))
    f = PrimFunc("padded_rows", (A, C), Allocate(T, seq(k0, k1)))

    def make(rng, size=300):
        return [rng.standard_normal((size, 3)).astype("float32"),
                np.zeros((size, 3), "float32")]

    return Case(f.name, f, make, lambda a: {1: (a[0] * np.float32(2))[::-1] + np.float32(1)})


def sibling_extents() -> Case:
    """Two stages in one kernel with different threadIdx.x extents: 64 threads fill a
    shared array, a barrier, then 32 threads add pairs: the launch has 64 threads and the
    second loop is guarded."""
    A, B = Buffer("A", (Const(256),), "float32"), Buffer("B", (Const(128),), "float32")
    Sh = Buffer("S.shared", (Const(64),), "float32", scope="shared")
    b, t, u = Var("b"), Var("t"), Var("u")
    body = Allocate(Sh, seq(
        thread(t, 64, "threadIdx.x", S(Sh, L(A, b * 64 + t), t)),
        SYNC,
        thread(u, 32, "threadIdx.x", S(B, L(Sh, u * 2) + L(Sh, u * 2 + 1), b * 32 + u)),
    ))
    f = PrimFunc("pair_sum", (A, B), thread(b, 4, "blockIdx.x", body))

    def make(rng):
        return [rng.standard_normal(256).astype("float32"), np.zeros(128, "float32")]

    return Case(f.name, f, make, lambda a: {1: a[0][0::2] + a[0][1::2]})


def int8_wrap() -> Case:
    """int8 arithmetic wraps: C = A + B; D = int8((A + B) < 0), comparing the wrapped sum."""
    n = Var("n")
    A, B, C, D = (Buffer(x, (n,), "int8") for x in "ABCD")
    bx, tx = Var("bx"), Var("tx")
    i = bx * 32 + tx
    s_ = L(A, i) + L(B, i)
    body = IfThenElse(i < n, seq(S(C, s_, i), S(D, Cast(s_ < 0, "int8"), i)))
    f = PrimFunc("int8_wrap", (A, B, C, D),
                 thread(bx, (n + 31) // 32, "blockIdx.x", thread(tx, 32, "threadIdx.x", body)))

    def make(rng, size=200):
        return [rng.integers(-128, 128, size).astype("int8"),
                rng.integers(-128, 128, size).astype("int8"),
                np.zeros(size, "int8"), np.zeros(size, "int8")]

    def expected(a):
        s = (a[0].astype(np.int64) + a[1]).astype(np.int8)  # wraps
        return {2: s, 3: (s < 0).astype(np.int8)}

    return Case(f.name, f, make, expected)


def shift_select_let() -> Case:
    """B[i] = select(i >= 1, A[i - 1], 0) (the select guards an out-of-bounds read), via a
    LetStmt, a Let expression and a scalar parameter: B[i] = that * alpha + (j * j where
    j = i % 3)."""
    n = Var("n")
    alpha = Var("alpha", "float32")
    A, B = Buffer("A", (n,), "float32"), Buffer("B", (n,), "float32")
    bx, tx, i, j = Var("bx"), Var("tx"), Var("i"), Var("j")
    prev = Select(i >= 1, L(A, i - 1), Const(0.0, "float32"), "float32")
    jj = Let(j, FloorMod(i, Const(3), "int32"), j * j, "int32")
    body = LetStmt(i, bx * 64 + tx, IfThenElse(i < n, S(B, prev * alpha + Cast(jj, "float32"), i)))
    f = PrimFunc("shift_select", (A, B, alpha),
                 thread(bx, (n + 63) // 64, "blockIdx.x", thread(tx, 64, "threadIdx.x", body)))

    def make(rng, size=130):
        return [rng.standard_normal(size).astype("float32"), np.zeros(size, "float32"), 0.5]

    def expected(a):
        x = a[0]
        prev_ = np.concatenate([[0], x[:-1]]).astype(np.float32)
        idx = np.arange(len(x))
        return {1: prev_ * np.float32(a[2]) + ((idx % 3) ** 2).astype(np.float32)}

    return Case(f.name, f, make, expected)


def sum_reducer(dtype="float32"):
    from tecomp.ir import CommReducer

    x, y = Var("x", dtype), Var("y", dtype)
    return CommReducer("sum", x, y, x + y, Const(0.0, dtype))


def max_reducer(dtype="float32"):
    from tecomp.ir import CommReducer

    x, y = Var("x", dtype), Var("y", dtype)
    return CommReducer("max", x, y, O.maximum(x, y), Const(float("-inf"), dtype))


def cross_thread_rowsum(threads: int = 64, reducer=sum_reducer) -> Case:
    """B[i] = reduce_k A[i, k] with k split: k.inner bound to threadIdx.x (a cross-thread
    reduction), k.outer a serial loop accumulating a per-thread partial; the tail of k
    (K = 200 is not a multiple of the thread count) contributes the identity."""
    from tecomp.ir import AttrStmt

    m, K = Var("m"), 200
    A, B = Buffer("A", (m, Const(K)), "float32"), Buffer("B", (m,), "float32")
    part = Buffer("part.local", (Const(1),), "float32", scope="local")
    red = Buffer("red.local", (Const(1),), "float32", scope="local")
    i, ki, ko = Var("i"), Var("k.inner"), Var("k.outer")
    r = reducer()
    k = ko * threads + ki
    outer = (K + threads - 1) // threads
    acc = loop(ko, outer, IfThenElse(k < K, S(part, r.combine(L(part, 0), L(A, i, k)), 0)))
    reduce_ = AttrStmt("cross_thread_reduce", (r, L(part, 0), L(red, 0), ("threadIdx.x",)),
                       IfThenElse(ki.equal(0), S(B, L(red, 0), i)))
    body = thread(i, m, "blockIdx.x", thread(ki, threads, "threadIdx.x", Allocate(part, Allocate(
        red, seq(S(part, r.identity, 0), acc, reduce_)))))
    f = PrimFunc(f"rowsum_{r.name}_{threads}", (A, B), body)

    def make(rng, rows=9):
        return [rng.standard_normal((rows, K)).astype("float32"), np.zeros(rows, "float32")]

    ref = {"sum": lambda a: a.astype(np.float64).sum(axis=1), "max": lambda a: a.max(axis=1)}[r.name]
    return Case(f.name, f, make, lambda a: {1: ref(a[0])}, rtol=1e-5, atol=1e-5)


def cross_thread_columns() -> Case:
    """B[j] = sum_i A[i, j] for a 16 x 12 block: the reduction is over threadIdx.y (12
    threads, not a power of two), each threadIdx.x is its own group."""
    from tecomp.ir import AttrStmt

    A, B = Buffer("A", (Const(12), Const(64)), "float32"), Buffer("B", (Const(64),), "float32")
    red = Buffer("red.local", (Const(1),), "float32", scope="local")
    bx, tx, ty = Var("j.outer"), Var("j.inner"), Var("i")
    r = sum_reducer()
    j = bx * 16 + tx
    body = thread(bx, 4, "blockIdx.x", thread(ty, 12, "threadIdx.y", thread(tx, 16, "threadIdx.x",
                  Allocate(red, AttrStmt("cross_thread_reduce", (r, L(A, ty, j), L(red, 0),
                                                                 ("threadIdx.y",)),
                                         IfThenElse(ty.equal(0), S(B, L(red, 0), j)))))))
    f = PrimFunc("colsum", (A, B), body)

    def make(rng):
        return [rng.standard_normal((12, 64)).astype("float32"), np.zeros(64, "float32")]

    return Case(f.name, f, make, lambda a: {1: a[0].astype(np.float64).sum(axis=0)},
                rtol=1e-5, atol=1e-5)


ALL_CASES = [
    vector_add, lambda: vector_add(symbolic=False), block_reverse, tiled_matmul, grid2d,
    half_storage, lambda: intrinsics("float32"), lambda: intrinsics("float64"),
    lambda: int_divmod("int32"), lambda: int_divmod("int64"), minmax_nan, two_kernels_workspace,
    padded_rows_workspace,
    sibling_extents, int8_wrap, shift_select_let, cross_thread_rowsum,
    lambda: cross_thread_rowsum(48, max_reducer), cross_thread_columns,
]


def all_cases() -> List[Case]:
    return [mk() for mk in ALL_CASES]


def local_row_per_thread(width: int):
    """``Z[i, j] = 2 X[i, width - 1 - j] + 1`` over 4 rows, one thread per row, through a
    ``local`` stage holding one row (``width`` float32) per thread: the schedule and
    ``(X, Z)``."""
    import tecomp as tc

    X = tc.placeholder((4, width), name="X")
    Y = tc.compute((4, width), lambda i, j: X[i, j] * 2, name="Y")
    Z = tc.compute((4, width), lambda i, j: Y[i, width - 1 - j] + 1, name="Z")
    s = tc.create_schedule(Z.op)
    s[Y].set_scope("local")
    s[Z].bind(Z.op.axis[0], tc.thread_axis("threadIdx.x"))
    s[Y].compute_at(s[Z], Z.op.axis[0])
    return s, (X, Z)
