"""The LLVM CPU backend on hand-built PrimFuncs, compared with numpy.

Each test builds loop IR directly from ``tecomp.ir`` nodes (no DSL, no lowering), runs
it through ``build_llvm`` and checks the result against numpy / Python semantics.
"""
import functools
import math
import os
import platform
import re
import subprocess
import sys
import threading

import numpy as np
import pytest

from tecomp.codegen.llvm import build_llvm, emit_expr
from tecomp.runtime import llvm as llvm_runtime
from tecomp.errors import ArgumentError, BoundsError, BuildError, InternalError
from tecomp.ir import (
    Allocate, AssertStmt, Buffer, BufferLoad, BufferStore, Call, Cast, Const, Evaluate, For,
    IfThenElse, LetStmt, PrimFunc, Select, Var, seq,
)
from tecomp.ir import op
from tecomp.ir.expr import (
    EQ, GE, GT, LE, LT, NE, Add, Div, FloorDiv, FloorMod, Let, Max, Min, Mul, Or, Reduce,
    Sub, TruncDiv, TruncMod, as_expr,
)


# ---------------------------------------------------------------------------------------
# helpers


def buf(name, shape, dtype="float32", scope="global"):
    return Buffer(name, tuple(as_expr(s) if not isinstance(s, int) else Const(s) for s in shape),
                  dtype, None, scope)


def ld(b, *idx):
    return BufferLoad(b, tuple(as_expr(i) for i in idx), b.dtype)


def st(b, value, *idx):
    return BufferStore(b, as_expr(value, b.dtype), tuple(as_expr(i) for i in idx))


def loop(var, extent, body, kind="serial", lo=0):
    return For(var, as_expr(lo), as_expr(extent), kind, body)


def c(v, dtype):
    return Const(v, dtype)


def elementwise(name, fn, dtype_in="float32", dtype_out=None, n=None, kind="serial"):
    """B[i] = fn(A[i]) over a symbolic n."""
    n = Var("n") if n is None else n
    A = buf("A", (n,), dtype_in)
    B = buf("B", (n,), dtype_out or dtype_in)
    i = Var("i")
    return PrimFunc(name, (A, B), loop(i, n, st(B, fn(ld(A, i)), i), kind))


def binary(name, fn, dtype="float32", kind="serial"):
    """D[i] = fn(A[i], C[i]) over a symbolic n."""
    n = Var("n")
    A, C, D = buf("A", (n,), dtype), buf("C", (n,), dtype), buf("D", (n,), dtype)
    i = Var("i")
    return PrimFunc(name, (A, C, D), loop(i, n, st(D, fn(ld(A, i), ld(C, i)), i), kind))


# ---------------------------------------------------------------------------------------
# basics


def test_vector_add_symbolic():
    n = Var("n")
    A, B, C = buf("A", (n,)), buf("B", (n,)), buf("C", (n,))
    i = Var("i")
    f = PrimFunc("vadd", (A, B, C), loop(i, n, st(C, ld(A, i) + ld(B, i), i)))
    m = build_llvm(f)
    for size in (0, 1, 7, 1000):
        a = np.random.rand(size).astype(np.float32)
        b = np.random.rand(size).astype(np.float32)
        out = np.full(size, -1, np.float32)
        m(a, b, out)
        np.testing.assert_array_equal(out, a + b)
    assert m.name == "vadd" and m.params == (A, B, C)
    assert m.compile_seconds > 0


def _matmul(M, N, K, kinds=("serial", "serial", "serial")):
    A, B, C = buf("A", (M, K)), buf("B", (K, N)), buf("C", (M, N))
    i, j, k = Var("i"), Var("j"), Var("k")
    init = st(C, c(0.0, "float32"), i, j)
    update = loop(k, K, st(C, ld(C, i, j) + ld(A, i, k) * ld(B, k, j), i, j), kinds[2])
    body = loop(i, M, loop(j, N, seq(init, update), kinds[1]), kinds[0])
    return PrimFunc("matmul", (A, B, C), body)


def test_matmul_reduction_init_update():
    m = build_llvm(_matmul(33, 17, 65))
    a = np.random.rand(33, 65).astype(np.float32)
    b = np.random.rand(65, 17).astype(np.float32)
    out = np.zeros((33, 17), np.float32)
    m(a, b, out)
    np.testing.assert_allclose(out, a @ b, rtol=1e-5)
    assert set(m.compile_stats) >= {"codegen", "optimize", "jit"}


def test_matmul_vectorized_inner_axis_with_reduction_inside():
    # j vectorized with the reduction loop over k inside the widened body
    M, N, K = 8, 16, 32
    A, B, C = buf("A", (M, K)), buf("B", (K, N)), buf("C", (M, N))
    i, j, k = Var("i"), Var("j"), Var("k")
    body = loop(i, M, loop(j, N, seq(
        st(C, c(0.0, "float32"), i, j),
        loop(k, K, st(C, ld(C, i, j) + ld(A, i, k) * ld(B, k, j), i, j))), "vectorized"))
    m = build_llvm(PrimFunc("mmv", (A, B, C), body))
    assert any("widened to 16 lanes" in n for n in m.vectorize_notes)
    a = np.random.rand(M, K).astype(np.float32)
    b = np.random.rand(K, N).astype(np.float32)
    out = np.zeros((M, N), np.float32)
    m(a, b, out)
    np.testing.assert_allclose(out, a @ b, rtol=1e-5)


# ---------------------------------------------------------------------------------------
# dtypes


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int8", "int16", "int32",
                                   "int64", "uint8", "bool"])
def test_every_dtype_through_a_store(dtype):
    n = 37
    A, B = buf("A", (n,), dtype), buf("B", (n,), dtype)
    i = Var("i")
    x = ld(A, i)
    if dtype == "bool":
        val = ~x
    elif dtype.startswith("float"):
        val = x * 2.5 + 1.0
    else:
        val = x * 3 + 1
    m = build_llvm(PrimFunc("dt_" + dtype, (A, B), loop(i, n, st(B, val, i))))
    rng = np.random.default_rng(0)
    if dtype == "bool":
        a = rng.random(n) > 0.5
        expect = ~a
    elif dtype.startswith("float"):
        a = (rng.random(n) * 100 - 50).astype(dtype)
        if dtype == "float16":
            expect = (a.astype(np.float32) * np.float32(2.5) + np.float32(1)).astype(np.float16)
        else:
            expect = a * np.asarray(2.5, dtype) + np.asarray(1, dtype)
    else:
        info = np.iinfo(dtype)
        a = rng.integers(info.min, info.max, n, endpoint=True).astype(dtype)
        with np.errstate(over="ignore"):
            expect = (a * np.asarray(3, dtype) + np.asarray(1, dtype)).astype(dtype)
    out = np.zeros(n, dtype)
    m(a, out)
    np.testing.assert_array_equal(out, expect)


def test_float16_is_storage_only():
    # (a + b) - a in float32 keeps b's low bits that a float16 intermediate would lose
    n = 4
    A, B, C = buf("A", (n,), "float16"), buf("B", (n,), "float16"), buf("C", (n,), "float32")
    i = Var("i")
    val = Cast((ld(A, i) + ld(B, i)) - ld(A, i), "float32")
    m = build_llvm(PrimFunc("h", (A, B, C), loop(i, n, st(C, val, i))))
    a = np.full(n, 1024, np.float16)
    b = np.full(n, 0.25, np.float16)
    out = np.zeros(n, np.float32)
    m(a, b, out)
    np.testing.assert_array_equal(out, np.full(n, 0.25, np.float32))


# ---------------------------------------------------------------------------------------
# intrinsics


def _erf(x):
    return np.vectorize(math.erf, otypes=[x.dtype])(x)


_UNARY = {
    "exp": (np.exp, (-20, 20)), "log": (np.log, (0.01, 100)), "sqrt": (np.sqrt, (0, 100)),
    "rsqrt": (lambda x: 1 / np.sqrt(x), (0.01, 100)), "tanh": (np.tanh, (-8, 8)),
    "sigmoid": (lambda x: 1 / (1 + np.exp(-x)), (-30, 30)), "erf": (_erf, (-4, 4)),
    "abs": (np.abs, (-10, 10)), "floor": (np.floor, (-10, 10)), "ceil": (np.ceil, (-10, 10)),
    "round": (np.round, (-10, 10)), "sin": (np.sin, (-10, 10)), "cos": (np.cos, (-10, 10)),
    "fast_exp": (np.exp, (-80, 80)),
}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", sorted(_UNARY))
@pytest.mark.parametrize("kind", ["serial", "vectorized"])
def test_unary_intrinsics_match_numpy(name, dtype, kind):
    ref, (lo, hi) = _UNARY[name]
    n = 301 if kind == "serial" else 64
    f = elementwise(f"u_{name}", lambda x: op.call(name, x), dtype, n=Const(n), kind=kind)
    m = build_llvm(f)
    a = np.linspace(lo, hi, n).astype(dtype)
    if name == "round":
        a = (np.arange(n) - n // 2).astype(dtype) / 2  # exact halves: ties go to even
    out = np.zeros(n, dtype)
    m(a, out)
    rtol = 3e-7 if name == "fast_exp" else (2e-6 if dtype == "float32" else 1e-13)
    np.testing.assert_allclose(out, ref(a), rtol=rtol, atol=1e-30 if name != "sin" else 1e-6)


def test_pow_and_int_abs():
    n = 16
    A, B, C = buf("A", (n,)), buf("B", (n,)), buf("C", (n,))
    I, J = buf("I", (n,), "int32"), buf("J", (n,), "int32")
    i = Var("i")
    body = loop(i, n, seq(st(C, op.call("pow", ld(A, i), ld(B, i)), i),
                          st(J, op.call("abs", ld(I, i)), i)))
    m = build_llvm(PrimFunc("pw", (A, B, C, I, J), body))
    a = np.linspace(0.5, 3, n).astype(np.float32)
    b = np.linspace(-2, 2, n).astype(np.float32)
    ii = np.arange(n, dtype=np.int32) - 8
    ii[0] = np.iinfo(np.int32).min
    cc, jj = np.zeros(n, np.float32), np.zeros(n, np.int32)
    m(a, b, cc, ii, jj)
    np.testing.assert_allclose(cc, a ** b, rtol=2e-6)
    np.testing.assert_array_equal(jj, np.abs(ii))


# float32 exp (and fast_exp, sigmoid) is tecomp's own vector code (codegen/llvm/emit_math.py,
# exp_f32); its two variants (with fused multiply-adds where the host has them, else
# without) are within 1 ulp of the correctly rounded exp on every float32 input
# (docs/numerics.md)

def _exp_inputs():
    """Every 509th float32 bit pattern, every pattern in windows around the edges
    (overflow, subnormal results, underflow to 0, around 0 and +-1), and the specials."""
    bits = [np.arange(0, 1 << 32, 509, dtype=np.uint64).astype(np.uint32)]
    for edge in (88.72283, -87.33655, -103.27893, -103.97208, 1.0, -1.0, 0.5):
        b = int(np.float32(edge).view(np.uint32))
        bits.append(np.arange(b - (1 << 14), b + (1 << 14), dtype=np.uint32))
    bits.append(np.arange(0, 1 << 14, dtype=np.uint32))            # +0 and tiny positives
    bits.append(np.arange(0, 1 << 14, dtype=np.uint32) | 0x80000000)  # -0 and tiny negatives
    x = np.concatenate(bits).view(np.float32)
    return np.concatenate([x, _EXP_SPECIAL[:, 0].astype(np.float32)])


_F32MAX = float(np.finfo(np.float32).max)
#: (x, float32 exp(x)): specials, and the edges of overflow (88.72283 is the last input
#: with a finite exp), underflow to 0 and subnormal results, all correctly rounded
_EXP_SPECIAL = np.array([
    (np.nan, np.nan), (-np.nan, np.nan), (np.inf, np.inf), (-np.inf, 0.0), (0.0, 1.0),
    (-0.0, 1.0), (1e-45, 1.0), (-1e-45, 1.0), (_F32MAX, np.inf), (-_F32MAX, 0.0),
    (88.72283, 3.4027985e38), (88.722839, np.inf), (89.0, np.inf), (-104.0, 0.0),
    (-103.97208, 1e-45), (-103.97209, 0.0), (1.0, np.e), (-87.33655, 1.1754907e-38),
], np.float64)


def _ulps(got, want):
    """ulp distance of non-negative float32 results (exp's); NaN/inf must match exactly."""
    d = np.abs(got.view(np.int32).astype(np.int64) - want.view(np.int32).astype(np.int64))
    bad = (np.isnan(got) != np.isnan(want)) | ((np.isinf(got) | np.isinf(want)) & (got != want))
    d[bad | (got < 0)] = 1 << 40
    d[np.isnan(got) & np.isnan(want)] = 0
    return d


#: the targets the float32 math functions are checked on: fused multiply-adds (Haswell),
#: none (Sandy Bridge, AVX only), and AVX-512's scalef/getmant/getexp instructions
#: (Skylake-SP; run only where this CPU has AVX-512, see test_avx512_math_instructions)
_MATH_TARGETS = {"fma": "llvm -mcpu=haswell", "no-fma": "llvm -mcpu=sandybridge",
                 "avx512": "llvm -mcpu=skylake-avx512"}


def _has_fma(variant):
    return variant != _MATH_TARGETS["no-fma"]


@pytest.fixture(params=list(_MATH_TARGETS.values()), ids=list(_MATH_TARGETS))
def exp_variant(request):
    """The variants of tecomp's float32 math functions, each compiled for a CPU that has
    fused multiply-adds (Haswell), or not (Sandy Bridge), or AVX-512 (Skylake-SP), and
    run here."""
    import tecomp as tc

    if request.param == _MATH_TARGETS["avx512"] and not tc.Target("llvm").has_feature("avx512f"):
        pytest.skip("this CPU has no AVX-512 (test_avx512_math_instructions checks the code)")
    return request.param


@pytest.mark.parametrize("name", ["exp", "fast_exp"])
def test_exp_float32_within_1ulp_everywhere(name, exp_variant):
    x = _exp_inputs()
    n = x.size
    outs = []
    for kind in ("vectorized", "serial"):
        m = build_llvm(elementwise(f"e_{kind}", lambda v: op.call(name, v), "float32", kind=kind),
                       target=exp_variant)
        out = np.zeros(n, np.float32)
        m(x, out)
        outs.append(out)
        if kind == "vectorized":
            src = m.get_source("llvm")
            assert "llvm.exp." not in src and "expf" not in src
            assert ("llvm.fma" in m.get_source("llvm-unopt")) == _has_fma(exp_variant)
            assert ("vfmadd" in m.get_source("asm")) == _has_fma(exp_variant)
    np.testing.assert_array_equal(outs[0].view(np.uint32), outs[1].view(np.uint32))
    with np.errstate(all="ignore"):
        want = np.exp(x.astype(np.float64)).astype(np.float32)  # correctly rounded
    d = _ulps(outs[0], want)
    assert d.max() <= 1, (x[d.argmax()], outs[0][d.argmax()], want[d.argmax()])
    assert 0 < np.count_nonzero(d) < n // 50  # mostly correctly rounded
    k = len(_EXP_SPECIAL)
    want_sp = _EXP_SPECIAL[:, 1].astype(np.float32)
    np.testing.assert_array_equal(outs[0][-k:], want_sp)  # NaN where NaN, else equal
    snan = np.array([0x7f800001, 0xffc00001], np.uint32).view(np.float32)  # signalling NaNs
    out = np.zeros(2, np.float32)
    build_llvm(elementwise("e_snan", lambda v: op.call(name, v), "float32"),
               target=exp_variant)(snan, out)
    assert np.isnan(out).all()


def test_sigmoid_float32_error(exp_variant):
    x = _exp_inputs()
    x = x[np.isfinite(x) & (np.abs(x) < 120)]
    n = x.size
    outs = []
    for kind in ("vectorized", "serial"):
        m = build_llvm(elementwise(f"s_{kind}", lambda v: op.call("sigmoid", v), "float32",
                                   kind=kind), target=exp_variant)
        out = np.zeros(n, np.float32)
        m(x, out)
        outs.append(out)
    np.testing.assert_array_equal(outs[0].view(np.uint32), outs[1].view(np.uint32))
    got = outs[0].astype(np.float64)
    with np.errstate(all="ignore"):
        want = 1.0 / (1.0 + np.exp(-x.astype(np.float64)))
    normal = x > -87.33  # a normal float32 result
    rel = np.abs(got[normal] - want[normal]) / want[normal]
    # exp within 1 ulp of its rounding (< 1.5 ulp = 1.8e-7 of exp(-x)), + two roundings
    assert rel.max() < 3e-7, rel.max()
    # subnormal results: within 2^-149 while exp(-x) is finite; 0 below -88.72 (exp(-x)
    # overflows, as libm's expf did; the exact result is below 2.9e-39 there)
    sub = ~normal & (x >= -88.72283)
    assert sub.sum() > 1000 and np.abs(got[sub] - want[sub]).max() <= 2.0 ** -149
    assert (got[x < -88.72284] == 0).all() and want[x < -88.72284].max() < 2.94e-39
    m = build_llvm(elementwise("s_sp", lambda v: op.call("sigmoid", v), "float32", n=Const(4)),
                   target=exp_variant)
    out = np.zeros(4, np.float32)
    m(np.array([np.nan, np.inf, -np.inf, -0.0], np.float32), out)
    assert np.isnan(out[0]) and out[1] == 1.0 and out[2] == 0.0 and out[3] == 0.5


def test_softplus_threshold_select_dropped(monkeypatch, exp_variant):
    """A float32 ``select(x > c, x, softplus(x))`` (``tecomp.nn.softplus``) with ``c >=
    16`` is emitted as ``softplus(x)`` alone (``emit_expr.SOFTPLUS_DROPS_THRESHOLD``): its
    compare is gone from the IR, and the bits are those of the select (``x`` itself above
    the threshold, inf and NaN included), vectorized and serial; ``c = 15``, and ``-x``
    in place of ``x``, keep the select."""
    from tecomp.codegen.llvm import emit_expr

    bits = [np.arange(int(np.float32(e).view(np.uint32)) - 4096,
                      int(np.float32(e).view(np.uint32)) + 4096, dtype=np.uint32)
            for e in (15.0, 16.0, 20.0, -16.0, 1e30)]
    x = np.concatenate(bits + [np.arange(0, 1 << 32, 65537, dtype=np.uint64).astype(
        np.uint32)]).view(np.float32)
    x = np.concatenate([x, np.array([np.inf, -np.inf, np.nan, 0.0, -0.0], np.float32)])

    def build(c, kind="vectorized", other=False):
        fn = (lambda v: op.if_then_else(v > c, -v if other else v, op.call("softplus", v)))
        return build_llvm(elementwise(f"softplus_{kind}", fn, "float32", kind=kind),
                          target=exp_variant)

    def run(m):
        out = np.zeros(x.size, np.float32)
        m(x, out)
        return out.view(np.uint32)

    def compares(m, c):
        return len(re.findall("fcmp ogt [^\\n]*" + re.escape(f"{c:e}"), m.get_source("llvm")))

    for c in (16.0, 20.0):
        m = build(c)
        monkeypatch.setattr(emit_expr, "SOFTPLUS_DROPS_THRESHOLD", False)
        kept = build(c)
        monkeypatch.setattr(emit_expr, "SOFTPLUS_DROPS_THRESHOLD", True)
        np.testing.assert_array_equal(run(m), run(kept))
        np.testing.assert_array_equal(run(m), run(build(c, "serial")))
        assert compares(m, c) == 0 and compares(kept, c) >= 1
    assert compares(build(20.0, other=True), 20.0) >= 1
    assert compares(build(15.0), 15.0) >= 1


def test_silu_float32_as_a_quotient(monkeypatch, exp_variant):
    """A float32 ``x * sigmoid(x)`` (either order) is emitted as ``x / (1 + exp(-x))``
    (``emit_expr.SILU_DIVIDES``): vectorized and serial bit-identical, the bits exactly
    those of ``x / (1 + exp(-x))`` written out, relative error below 2e-7 where the
    result is a normal float, NaN at NaN and -inf, inf at inf, -0 where exp(-x)
    overflows; ``x * sigmoid(y)`` stays a product.  Off: the product (other bits, within
    sigmoid's 3e-7 and a rounding)."""
    from tecomp.codegen.llvm import emit_expr

    x = _exp_inputs()[::9]      # (every 9th: about 1M inputs)
    x = x[np.isfinite(x) & (np.abs(x) < 120)]
    with np.errstate(all="ignore"):
        want = x.astype(np.float64) / (1.0 + np.exp(-x.astype(np.float64)))
    normal = (x > -87.0) & (np.abs(want) > 2.0 ** -126)

    def run(fn, kind="vectorized", xs=x):
        m = build_llvm(elementwise(f"silu_{kind}", fn, "float32", kind=kind),
                       target=exp_variant)
        out = np.zeros(xs.size, np.float32)
        m(xs, out)
        return out

    def error(got):
        return (np.abs(got[normal] - want[normal]) / np.abs(want[normal])).max()

    silu = lambda v: v * op.call("sigmoid", v)   # noqa: E731
    got = run(silu)
    np.testing.assert_array_equal(got.view(np.uint32), run(silu, "serial").view(np.uint32))
    np.testing.assert_array_equal(got.view(np.uint32),
                                  run(lambda v: op.call("sigmoid", v) * v).view(np.uint32))
    quotient = run(lambda v: v / (1.0 + op.call("exp", -v)))
    np.testing.assert_array_equal(got.view(np.uint32), quotient.view(np.uint32))
    assert error(got) < 2e-7, error(got)
    special = np.array([np.nan, np.inf, -np.inf, -0.0, -89.0, -100.0], np.float32)
    out = run(silu, xs=special)
    assert np.isnan(out[0]) and out[1] == np.inf and np.isnan(out[2])
    assert (out[3:] == 0).all() and np.signbit(out[3:]).all()
    m = build_llvm(binary("x_sig_y", lambda a, c: a * op.call("sigmoid", c), kind="vectorized"),
                   target=exp_variant)
    a, c = x[:1000].copy(), x[1000:2000].copy()
    d = np.zeros(1000, np.float32)
    m(a, c, d)
    np.testing.assert_array_equal(d, a * run(lambda v: op.call("sigmoid", v), xs=c))
    monkeypatch.setattr(emit_expr, "SILU_DIVIDES", False)
    product = run(silu)
    assert not np.array_equal(product.view(np.uint32), got.view(np.uint32))
    assert error(product) < 3e-7, error(product)


def _exp_schedules():
    """The same exp/sigmoid compute under schedules that evaluate it differently."""
    import tecomp as tc

    def make(sched, n=1000, op_="exp"):
        X = tc.placeholder((n,), name="X")
        Y = tc.compute((n,), lambda i: getattr(tc, op_)(X[i]) * 2.0, name="Y")
        s = tc.create_schedule(Y.op)
        sched(s, Y)
        return tc.build(s, [X, Y])

    def split_vec(f, par=False, unroll=False, contract=False):
        def sched(s, Y):
            o, i = s[Y].split(Y.op.axis[0], factor=f)
            s[Y].vectorize(i)
            if par:
                s[Y].parallel(o)
            if unroll:
                s[Y].unroll(o)
            if contract:
                s[Y].pragma(o, "fp_contract")
        return sched

    return make, {
        "serial": lambda s, Y: None,
        "vec16": split_vec(16), "vec8": split_vec(8), "vec7": split_vec(7),
        "vec4-parallel": split_vec(4, par=True), "vec64-contract": split_vec(64, contract=True),
        "unroll": lambda s, Y: s[Y].unroll(s[Y].split(Y.op.axis[0], factor=4)[1]),
    }


@pytest.mark.parametrize("op_", ["exp", "fast_exp", "sigmoid", "erf", "softplus"])
def test_exp_is_bit_identical_under_every_schedule(op_):
    """exp and the functions built on its steps (sigmoid, softplus) or on a table of
    coefficients read per lane (erf with AVX2 or AVX-512: 16 lanes one instruction, 7 and
    8 padded, 64 split, a scalar read lane by lane) give the same bits under every
    schedule."""
    import tecomp as tc

    make, scheds = _exp_schedules()
    rng = np.random.default_rng(5)
    x = np.concatenate([rng.uniform(-110, 95, 500), rng.uniform(-3, 3, 494),
                        [np.nan, np.inf, -np.inf, -0.0, 0.0, 88.72283]]).astype(np.float32)
    res = {}
    for name, sched in scheds.items():
        out = np.zeros_like(x)
        make(sched, op_=op_)(x, out)
        res[name] = out.view(np.uint32)
    for name, r in res.items():
        np.testing.assert_array_equal(r, res["serial"], err_msg=name)
    # a lane-invariant exp inside a vectorized loop is evaluated once as a scalar
    X = tc.placeholder((1000,), name="X")
    Y = tc.compute((1000, 16), lambda i, j: getattr(tc, op_)(X[i]) * 2.0, name="Y")
    s = tc.create_schedule(Y.op)
    s[Y].vectorize(Y.op.axis[1])
    out = np.zeros((1000, 16), np.float32)
    tc.build(s, [X, Y])(x, out)
    for j in (0, 15):
        np.testing.assert_array_equal(out[:, j].view(np.uint32), res["serial"])


def test_exp_float64_is_vector_code_and_ints_are_rejected():
    n = 64
    m = build_llvm(elementwise("e64", lambda v: op.call("exp", v), "float64", n=Const(n),
                               kind="vectorized"))
    assert "llvm.exp." not in m.get_source("llvm-unopt")   # tecomp's exp_f64, not libm
    a = np.linspace(-700, 700, n)
    out = np.zeros(n)
    m(a, out)
    np.testing.assert_allclose(out, np.exp(a), rtol=3e-16)
    # float16 computes in float32: the float32 exp rounded once more
    m16 = build_llvm(elementwise("e16", lambda v: op.call("exp", v), "float16", n=Const(n),
                                 kind="vectorized"))
    h = np.linspace(-10, 10, n).astype(np.float16)
    out16 = np.zeros(n, np.float16)
    m16(h, out16)
    np.testing.assert_allclose(out16, np.exp(h.astype(np.float64)), rtol=1e-3)
    with pytest.raises(InternalError, match="intrinsic exp on int32"):
        build_llvm(elementwise("ei", lambda v: Call("exp", (v,), "int32"), "int32"))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("kind", ["serial", "vectorized"])
def test_min_max_propagate_nan_like_numpy(dtype, kind):
    # every ordered pair of special values, NaN in either operand (the codegen tests
    # only its first operand for NaN after the compare-select)
    vals = [np.nan, -np.inf, -2.5, -1, 0, 1, 7, np.inf]
    pairs = [(x, y) for x in vals for y in vals]
    n = len(pairs)
    A, B, C, D = (buf(nm, (n,), dtype) for nm in "ABCD")
    i = Var("i")
    body = loop(i, n, seq(st(C, op.minimum(ld(A, i), ld(B, i)), i),
                          st(D, op.maximum(ld(A, i), ld(B, i)), i)), kind)
    m = build_llvm(PrimFunc("mm", (A, B, C, D), body))
    a = np.array([p[0] for p in pairs], dtype)
    b = np.array([p[1] for p in pairs], dtype)
    cc, dd = np.zeros(n, dtype), np.zeros(n, dtype)
    m(a, b, cc, dd)
    np.testing.assert_array_equal(cc, np.minimum(a, b))
    np.testing.assert_array_equal(dd, np.maximum(a, b))


# ---------------------------------------------------------------------------------------
# integer division, casts


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64"])
@pytest.mark.parametrize("kind", ["serial", "vectorized"])
def test_floor_and_trunc_division_semantics(dtype, kind):
    vals = [-7, -6, -1, 0, 1, 5, 6, 7]
    divs = [-3, -2, -1, 1, 2, 3, 0, 4]
    pairs = [(a, b) for a in vals for b in divs]
    n = len(pairs)
    A, B = buf("A", (n,), dtype), buf("B", (n,), dtype)
    outs = [buf(name, (n,), dtype) for name in ("FD", "FM", "TD", "TM")]
    i = Var("i")
    x, y = ld(A, i), ld(B, i)
    body = loop(i, n, seq(*[st(o, cls(x, y, dtype), i) for o, cls in
                           zip(outs, (FloorDiv, FloorMod, TruncDiv, TruncMod))]), kind)
    m = build_llvm(PrimFunc("divs", (A, B, *outs), body))
    a = np.array([p[0] for p in pairs], dtype)
    b = np.array([p[1] for p in pairs], dtype)
    res = [np.zeros(n, dtype) for _ in outs]
    m(a, b, *res)

    def tdiv(p, q):
        return 0 if q == 0 else int(p / q)

    for k, (p, q) in enumerate(pairs):
        assert res[0][k] == (p // q if q else 0), (p, q)
        assert res[1][k] == (p % q if q else 0), (p, q)
        assert res[2][k] == tdiv(p, q), (p, q)
        assert res[3][k] == (p - q * tdiv(p, q) if q else 0), (p, q)


def test_division_by_constants_and_int_min_overflow_do_not_trap():
    n = 4
    A, B = buf("A", (n,), "int32"), buf("B", (n,), "int32")
    i = Var("i")
    x = ld(A, i)
    # A[3] == -1 at run time: INT_MIN // -1 must wrap (to INT_MIN), not raise SIGFPE
    body = loop(i, n, st(B, FloorDiv(x, ld(A, 3), "int32") + FloorMod(x, c(-4, "int32"), "int32"),
                         i))
    m = build_llvm(PrimFunc("dv", (A, B), body))
    a = np.array([np.iinfo(np.int32).min, 9, -9, -1], np.int32)
    out = np.zeros(n, np.int32)
    m(a, out)

    def wrap32(v):
        return (v + 2 ** 31) % 2 ** 32 - 2 ** 31

    expect = [wrap32(wrap32(int(v) // -1) + int(v) % -4) for v in a]
    np.testing.assert_array_equal(out, np.array(expect, np.int32))


def test_casts():
    n = 8
    F = buf("F", (n,), "float32")
    D = buf("D", (n,), "float64")
    I32 = buf("I32", (n,), "int32")
    outs = {
        "t_i32": (buf("T1", (n,), "int32"), lambda i: Cast(ld(F, i), "int32")),
        "t_i8": (buf("T2", (n,), "int8"), lambda i: Cast(ld(I32, i), "int8")),
        "t_u8": (buf("T3", (n,), "uint8"), lambda i: Cast(ld(I32, i), "uint8")),
        "f_bool": (buf("T4", (n,), "bool"), lambda i: Cast(ld(F, i), "bool")),
        "i_bool": (buf("T5", (n,), "bool"), lambda i: Cast(ld(I32, i), "bool")),
        "d_f16": (buf("T6", (n,), "float16"), lambda i: Cast(ld(D, i), "float16")),
        "u8_f": (buf("T7", (n,), "float32"), lambda i: Cast(Cast(ld(I32, i), "uint8"), "float32")),
        "b_i": (buf("T8", (n,), "int32"), lambda i: Cast(Cast(ld(I32, i), "bool"), "int32")),
        "i64_i16": (buf("T9", (n,), "int16"), lambda i: Cast(Cast(ld(I32, i), "int64") *
                                                              c(70000, "int64"), "int16")),
    }
    i = Var("i")
    body = loop(i, n, seq(*[st(b, fn(i), i) for b, fn in outs.values()]))
    bufs = [b for b, _ in outs.values()]
    m = build_llvm(PrimFunc("casts", (F, D, I32, *bufs), body))
    f = np.array([1.9, -1.9, 0.0, -0.0, np.nan, 2.5, -2.5, 1e3], np.float32)
    d = np.array([1.0 + 2 ** -11 + 2 ** -40, 65504.0, 70000.0, -1e-8, np.nan, 0.1, 3.14159, -2.0])
    i32 = np.array([300, -129, 255, 256, 0, -1, 2 ** 31 - 1, -(2 ** 31)], np.int32)
    res = [np.zeros(n, b.dtype) for b in bufs]
    m(f, d, i32, *res)
    t1, t2, t3, t4, t5, t6, t7, t8, t9 = res
    ok = ~np.isnan(f)
    np.testing.assert_array_equal(t1[ok], np.trunc(f[ok]).astype(np.int32))
    np.testing.assert_array_equal(t2, i32.astype(np.int8))
    np.testing.assert_array_equal(t3, i32.astype(np.uint8))
    np.testing.assert_array_equal(t4, f.astype(bool))        # NaN is truthy, -0.0 is not
    np.testing.assert_array_equal(t5, i32.astype(bool))
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(t6.view(np.uint16), d.astype(np.float16).view(np.uint16))
    np.testing.assert_array_equal(t7, i32.astype(np.uint8).astype(np.float32))
    np.testing.assert_array_equal(t8, (i32 != 0).astype(np.int32))
    np.testing.assert_array_equal(t9, (i32.astype(np.int64) * 70000).astype(np.int16))


# ---------------------------------------------------------------------------------------
# Select laziness, Let, If


@pytest.mark.parametrize("kind", ["serial", "vectorized", "parallel"])
@pytest.mark.parametrize("checks", [False, True])
def test_select_guards_out_of_range_load(kind, checks):
    n = 64
    A, B = buf("A", (n,)), buf("B", (n,))
    i = Var("i")
    far = ld(A, i + 100_000_000)  # would crash if executed
    guarded = Select(i >= 1, ld(A, i - 1), Select(i > 1000, far, c(-1.0, "float32"), "float32"),
                     "float32")
    m = build_llvm(PrimFunc("guard", (A, B), loop(i, n, st(B, guarded * 2.0, i), kind)),
                   checks=checks)
    a = np.random.rand(n).astype(np.float32)
    out = np.zeros(n, np.float32)
    m(a, out)
    np.testing.assert_array_equal(out, np.concatenate([[-1], a[:-1]]).astype(np.float32) * 2)


def test_let_and_if_then_else_on_lane_in_vectorized_loop():
    n = 40
    A, B = buf("A", (n,), "int32"), buf("B", (n,), "int32")
    i, t = Var("i"), Var("t")
    body = loop(i, n, LetStmt(t, ld(A, i) * 2, IfThenElse(
        FloorMod(i, c(3, "int32"), "int32").equal(0), st(B, t + 1, i), st(B, Let(
            Var("u"), t, t - 1, "int32"), i))), "vectorized")
    m = build_llvm(PrimFunc("lif", (A, B), body))
    a = np.arange(n, dtype=np.int32)
    out = np.zeros(n, np.int32)
    m(a, out)
    expect = np.where(np.arange(n) % 3 == 0, a * 2 + 1, a * 2 - 1)
    np.testing.assert_array_equal(out, expect)


def test_vectorized_tail_guard_symbolic_extent():
    # the non-divisible split pattern: if (i.outer*8 + i.inner < n) inside a vector loop,
    # plus a vectorized loop with a symbolic extent (masked tail)
    n = Var("n")
    A, B, C = buf("A", (n,)), buf("B", (n,)), buf("C", (n,))
    io, ii, j = Var("i.outer"), Var("i.inner"), Var("j")
    idx = io * 8 + ii
    body = seq(
        loop(io, FloorDiv(n + 7, c(8, "int32"), "int32"),
             loop(ii, 8, IfThenElse(idx < n, st(B, ld(A, idx) + 1.0, idx)), "vectorized")),
        loop(j, n, st(C, ld(A, j) * 3.0, j), "vectorized"))
    m = build_llvm(PrimFunc("tail", (A, B, C), body), checks=True)
    assert any("masked tail" in x for x in m.vectorize_notes)
    for size in (0, 1, 5, 8, 13, 100):
        a = np.random.rand(size).astype(np.float32)
        b, cc = np.zeros(size, np.float32), np.zeros(size, np.float32)
        m(a, b, cc)
        np.testing.assert_array_equal(b, a + 1)
        np.testing.assert_array_equal(cc, a * 3)


# ---------------------------------------------------------------------------------------
# vectorization


def test_vectorized_loop_uses_ymm_and_is_correct():
    n = 256
    A, B, C = buf("A", (n,)), buf("B", (n,)), buf("C", (n,))
    io, ii = Var("io"), Var("ii")
    idx = io * 16 + ii
    body = loop(io, n // 16, loop(ii, 16, st(C, ld(A, idx) * ld(B, idx) + 1.0, idx),
                                  "vectorized"))
    m = build_llvm(PrimFunc("vmul", (A, B, C), body))
    asm = m.get_source("asm")
    assert "ymm" in asm or "zmm" in asm
    assert any(("vmulps" in l or "vfmadd" in l) and "mm" in l for l in asm.splitlines())
    a, b = np.random.rand(n).astype(np.float32), np.random.rand(n).astype(np.float32)
    out = np.zeros(n, np.float32)
    m(a, b, out)
    np.testing.assert_allclose(out, a * b + 1, rtol=1e-6)
    assert m.vectorize_notes == ["vectorized loop over `ii`: widened to 16 lanes"]


def test_vectorized_gather_broadcast_and_scatter():
    # column access (stride n: gather), broadcast load, strided store (scatter)
    n = 8
    A, B = buf("A", (n, n)), buf("B", (n, n))
    s = buf("s", (1,))
    i, j = Var("i"), Var("j")
    body = loop(i, n, loop(j, n, st(B, ld(A, j, i) + ld(s, 0), j, i), "vectorized"))
    m = build_llvm(PrimFunc("tr", (A, s, B), body))
    a = np.random.rand(n, n).astype(np.float32)
    out = np.zeros((n, n), np.float32)
    m(a, np.array([0.5], np.float32), out)
    np.testing.assert_array_equal(out, a + 0.5)
    assert "llvm.masked.gather" in m.get_source("llvm-unopt")
    assert "llvm.masked.scatter" in m.get_source("llvm-unopt")


def test_fused_axis_vector_access_is_contiguous():
    """y = f // 14, x = f % 14 (two axes fused, split by 16 and vectorized): the offset
    y*14 + x is f, so loads and stores are vector accesses, not gathers and scatters;
    the strided variant (strides at run time) keeps the gathers and agrees"""
    import tecomp as tc

    C, H, W = 3, 14, 14
    A = tc.placeholder((C, H, W), name="A")
    B = tc.compute((C, H, W), lambda c, y, x: A[c, y, x] * 2.0 + 1.0, name="B")
    s = tc.create_schedule(B.op)
    _, y, x = B.op.axis
    fo, fi = s[B].split(s[B].fuse(y, x), factor=16)
    s[B].vectorize(fi)
    m = tc.build(s, [A, B])
    ir_text = m.get_source("llvm-unopt")
    assert "llvm.masked.gather" not in ir_text and "llvm.masked.scatter" not in ir_text
    a = np.random.rand(C, H, W).astype(np.float32)
    out = np.zeros_like(a)
    m(a, out)
    np.testing.assert_array_equal(out, a * 2 + 1)
    big = np.zeros((C, H, W + 2), np.float32)
    m(a, big[:, :, 1:-1])                      # a view: the strided variant
    np.testing.assert_array_equal(big[:, :, 1:-1], a * 2 + 1)
    assert "llvm.masked.scatter" in m.get_source("llvm-unopt", layout="strided")
    # the per-dimension indices stay for the bounds checks
    mc = tc.build(s, [A, B], checks=True)
    mc(a, out)
    np.testing.assert_array_equal(out, a * 2 + 1)


def test_vectorized_wide_and_odd_extents():
    for n in (3, 64, 100, 203):
        f = elementwise("w", lambda x: x * 2.0 - 1.0, "float64", n=Const(n), kind="vectorized")
        m = build_llvm(f)
        a = np.random.rand(n)
        out = np.zeros(n)
        m(a, out)
        np.testing.assert_array_equal(out, a * 2 - 1)


def test_fp_contract_pragma_and_attr():
    n = 32
    A, B, C = buf("A", (n,)), buf("B", (n,)), buf("C", (n,))
    i = Var("i")
    from tecomp.ir import AttrStmt
    store = st(C, ld(A, i) * ld(B, i) + ld(C, i), i)
    strict = PrimFunc("strict", (A, B, C), loop(i, n, store, "vectorized"))
    pragma = PrimFunc("fma", (A, B, C), AttrStmt("pragma_fp_contract", None,
                                                 loop(i, n, store, "vectorized")))
    attr = PrimFunc("fma2", (A, B, C), loop(i, n, store, "vectorized"), {"fp_contract": True})
    assert "contract" not in build_llvm(strict).get_source("llvm-unopt")
    a, b = np.random.rand(n).astype(np.float32), np.random.rand(n).astype(np.float32)
    for f in (pragma, attr):
        m = build_llvm(f)
        assert "fmul contract" in m.get_source("llvm-unopt")
        out = np.ones(n, np.float32)
        m(a, b, out)
        np.testing.assert_allclose(out, a * b + 1, rtol=1e-6)


def _offset_view(shape, shift):
    """A float32 array of ``shape`` starting ``shift`` elements past a 64-byte line."""
    size = int(np.prod(shape))
    raw = np.zeros(size + 32, np.float32)
    start = (-raw.ctypes.data // 4) % 16 + shift
    return raw[start:start + size].reshape(shape)


def _streamed_rows(B):
    """A schedule of the 3-d elementwise ``B``: rows in unrolled vectors of 16, the nest
    under ``pragma nontemporal``."""
    import tecomp as tc

    s = tc.create_schedule(B.op)
    n, i, j = B.op.axis
    jo, ji = s[B].split(j, factor=16)
    s[B].vectorize(ji)
    s[B].unroll(jo)
    s[B].pragma(n, "nontemporal")
    return s


@pytest.mark.parametrize("cols", [64, 40])
def test_nontemporal_pragma_streams_aligned_whole_vectors(cols):
    """``pragma nontemporal``: the nest's vector stores to a buffer it does not allocate
    are non-temporal where the offset is known a multiple of the vector (rows of 64
    floats; not the 16-float vectors of rows of 40, which start on 32-byte steps), the
    nest run as it is where
    the buffer does not start on a line; results never change, even in one-iteration
    loops that lowering removes."""
    import tecomp as tc

    A = tc.placeholder((1, 6, cols), "float32", name="A")
    B = tc.compute((1, 6, cols), lambda n, i, j: A[n, i, j] * 2.0 + 1.0, name="B")
    s = _streamed_rows(B)
    assert "pragma_nontemporal" in str(tc.lower(s, [A, B]))
    m = tc.build(s, [A, B])
    wide = [ln for ln in m.get_source("llvm").splitlines() if "store <16 x float>" in ln]
    streamed = [ln for ln in wide if "!nontemporal" in ln]
    # rows of 64: the copy for a buffer on a line streams its stores, the other copy none
    assert len(streamed) == (len(wide) // 2 if cols == 64 else 0)
    a = np.random.rand(1, 6, cols).astype(np.float32)
    for shift in (0, 1, 3):
        out = _offset_view((1, 6, cols), shift)
        m(a, out)
        np.testing.assert_array_equal(out, a * 2 + 1)


def _float16_edges(n):
    """``n`` float32 values whose float16 roundings test the rounding: ties to even
    (normal and subnormal), overflow to infinity (65520 and past it), the largest
    finite, subnormals and the smallest ones, signed zeros, infinities, NaN, a spread of
    magnitudes; the rest random."""
    edges = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 65504.0, 65519.99, 65520.0, -65520.0,
                      1e6, 1.0 + 2.0 ** -11, 1.0 + 3 * 2.0 ** -11, -(1.0 + 2.0 ** -11),
                      2.0 ** -24, 2.0 ** -25, 3 * 2.0 ** -25, 2.0 ** -26, 1e-6, -1e-6, 6e-5,
                      2.0 ** -14 - 2.0 ** -25, 1e-30, 1.5, -2.5], np.float32)
    x = (np.random.standard_normal(n) * 10.0 ** np.random.uniform(-9, 6, n)).astype(np.float32)
    x[:len(edges)] = edges[:n]
    return x


@pytest.mark.parametrize("cols", [64, 40])
def test_nontemporal_float16_stores_round_once_to_nearest_even(cols):
    """float32 rounded to float16 under ``pragma nontemporal``: its aligned whole
    vectors stored past the cache as the bits the target's conversion gives (LLVM has no
    non-temporal store of a vector of half: ``vcvtps2ph`` and ``vmovnt*``), rounded to
    nearest, ties to even, overflow to infinity, subnormals kept, NaN a NaN (numpy's
    ``astype``, bit for bit); the same where the output is off a line (the plain nest)
    and for rows of 40 (only the vectors known to start on their own size streamed)."""
    import tecomp as tc

    A = tc.placeholder((2, 6, cols), "float32", name="A")
    B = tc.compute((2, 6, cols), lambda n, i, j: A[n, i, j].astype("float16"), name="B")
    s = _streamed_rows(B)
    m = tc.build(s, [A, B])
    llvm_ir = m.get_source("llvm")
    streamed = [ln for ln in llvm_ir.splitlines() if "!nontemporal" in ln]
    assert all(re.search(r"store <\d+ x i16>", ln) for ln in streamed), streamed
    assert streamed or cols != 64, llvm_ir
    a = _float16_edges(2 * 6 * cols).reshape(2, 6, cols)
    with np.errstate(over="ignore"):
        want = a.astype(np.float16)
    for shift in (0, 1):
        raw = np.zeros(a.size + 64, np.float16)
        start = (-raw.ctypes.data // 2) % 32 + shift
        out = raw[start:start + a.size].reshape(a.shape)
        m(a, out)
        nan = np.isnan(want)
        np.testing.assert_array_equal(np.isnan(out), nan)
        np.testing.assert_array_equal(out.view(np.uint16)[~nan], want.view(np.uint16)[~nan])


@pytest.mark.parametrize("target,conv", [
    ("llvm -mtriple=x86_64-linux-gnu -mcpu=sapphirerapids", "vcvtps2ph\t$4, %zmm"),
    ("llvm -mtriple=x86_64-linux-gnu -mcpu=skylake-avx512", "vcvtps2ph\t$4, %zmm"),
    ("llvm -mtriple=x86_64-linux-gnu -mcpu=haswell", "vcvtps2ph\t$4, %ymm"),
    ("llvm -mtriple=x86_64-linux-gnu -mcpu=x86-64", None)])
def test_nontemporal_float16_stores_take_the_targets_conversion(target, conv):
    """The streamed float16 stores of a named target (compiled, not run): its features'
    conversion (AVX-512F: 16 lanes a ``vcvtps2ph``, AVX512-FP16 or not; F16C: 8) and a
    non-temporal store of its bits; a CPU with neither converts lane by lane (LLVM's
    calls), its half values stored as integers, streamed as they were."""
    import tecomp as tc

    A = tc.placeholder((2, 6, 64), "float32", name="A")
    B = tc.compute((2, 6, 64), lambda n, i, j: A[n, i, j].astype("float16"), name="B")
    s = _streamed_rows(B)
    asm = tc.build(s, [A, B], target=target).get_source("asm")
    assert conv is None or conv in asm, asm
    assert "movnt" in asm, asm


def test_fp_contract_on_a_one_iteration_loop_holds_for_its_nest():
    """``fp_contract`` is a pragma of the nest under its loop: when that loop has one
    iteration and goes away, the nest keeps it (it was dropped with the loop, so the
    multi-slice GEMM template's micro-kernel ran a multiply and an add per FMA); a
    pragma of the loop itself (``unroll_count``) goes with the loop."""
    import tecomp as tc

    A = tc.placeholder((1, 64), "float32", name="A")
    B = tc.placeholder((1, 64), "float32", name="B")
    C = tc.compute((1, 64), lambda i, j: A[i, j] * B[i, j] + 1.0, name="C")
    s = tc.create_schedule(C.op)
    i, j = C.op.axis
    s[C].pragma(i, "fp_contract")
    s[C].pragma(i, "unroll_count", 4)
    text = str(tc.lower(s, [A, B, C]))
    assert "pragma_fp_contract" in text and "pragma_unroll_count" not in text
    m = tc.build(s, [A, B, C])
    assert "fmul contract" in m.get_source("llvm-unopt")
    a, b = np.random.rand(1, 64).astype(np.float32), np.random.rand(1, 64).astype(np.float32)
    out = np.zeros((1, 64), np.float32)
    m(a, b, out)
    np.testing.assert_allclose(out, a * b + 1, rtol=1e-6)


def test_vectorized_reduction_falls_back_to_serial_with_metadata():
    n = 64
    A, S = buf("A", (n,)), buf("S", (1,))
    k = Var("k")
    body = seq(st(S, c(0.0, "float32"), 0), loop(k, n, st(S, ld(S, 0) + ld(A, k), 0),
                                                 "vectorized"))
    m = build_llvm(PrimFunc("vsum", (A, S), body))
    assert "not widened" in m.vectorize_notes[0] and "reduction" in m.vectorize_notes[0]
    assert "llvm.loop.vectorize.enable" in m.get_source("llvm-unopt")
    a = np.random.rand(n).astype(np.float32)
    out = np.zeros(1, np.float32)
    m(a, out)
    np.testing.assert_allclose(out[0], np.cumsum(a)[-1], rtol=1e-6)


# ---------------------------------------------------------------------------------------
# shapes, strides, arguments


def test_symbolic_shapes_and_compound_extents():
    n, m_ = Var("n"), Var("m")
    A = buf("A", (n, m_))
    B = buf("B", (n * 2, m_ + 1))
    i, j = Var("i"), Var("j")
    body = loop(i, n * 2, loop(j, m_ + 1, st(B, Select(
        (i < n) & (j < m_), ld(A, FloorMod(i, n, "int32"), FloorMod(j, m_, "int32")),
        c(7.0, "float32"), "float32"), i, j)))
    mod = build_llvm(PrimFunc("pad", (A, B), body))
    a = np.random.rand(3, 5).astype(np.float32)
    out = np.zeros((6, 6), np.float32)
    mod(a, out)
    expect = np.full((6, 6), 7, np.float32)
    expect[:3, :5] = a
    np.testing.assert_array_equal(out, expect)
    with pytest.raises(ArgumentError, match=r"B.shape\[0\] = 5 but parameter B \(argument 2\) "
                                            r"expects n\*2 = 6 \(n = 3 from A.shape\[0\]\)"):
        mod(a, np.zeros((5, 6), np.float32))


def test_var_only_in_compound_shape_must_be_a_param():
    n = Var("n")
    A = buf("A", (n * 2,))
    i = Var("i")
    f = PrimFunc("bad", (A,), loop(i, n * 2, st(A, c(1.0, "float32"), i)))
    with pytest.raises(BuildError, match="uses `n` only inside `n\\*2`"):
        build_llvm(f)
    g = PrimFunc("good", (A, n), loop(i, n * 2, st(A, c(1.0, "float32"), i)))
    m = build_llvm(g)
    a = np.zeros(8, np.float32)
    m(a, 4)
    assert (a == 1).all()
    with pytest.raises(ArgumentError, match=r"A.shape\[0\] = 8 but .* expects n\*2 = 6"):
        m(a, 3)
    # a scalar parameter that is also an extent: the argument and the shape must agree
    B = buf("B", (n,))
    h = build_llvm(PrimFunc("both", (B, n), loop(i, n, st(B, c(2.0, "float32"), i))))
    b = np.zeros(5, np.float32)
    h(b, 5)
    assert (b == 2).all()
    with pytest.raises(ArgumentError, match=r"n = 4 from argument 2 \(n\) but B.shape\[0\] = 5"):
        h(b, 4)


def test_free_variable_in_body_is_a_build_error():
    A = buf("A", (4,))
    i, q = Var("i"), Var("q")
    with pytest.raises(BuildError, match="variable `q` is used in the body"):
        build_llvm(PrimFunc("fv", (A,), loop(i, 4, st(A, Cast(q, "float32"), i))))


def _strided_kernel():
    n, m_ = Var("n"), Var("m")
    A, B, C = buf("A", (n, m_)), buf("B", (n, m_)), buf("C", (n, m_))
    i, j = Var("i"), Var("j")
    body = loop(i, n, loop(j, m_, st(C, ld(A, i, j) * 2.0 + ld(B, i, j), i, j), "vectorized"))
    return build_llvm(PrimFunc("strided", (A, B, C), body))


def test_strided_views_without_copies():
    m = _strided_kernel()
    base = np.random.rand(12, 10).astype(np.float32)
    b0 = np.random.rand(10, 12).astype(np.float32)
    cases = [
        (base.T, b0),                                  # transpose
        (base[::2, ::3], b0[:6, :4]),                  # steps
        (base[::-1, ::-2], b0.T[::-1, :5]),            # negative strides
        (np.broadcast_to(base[0], (7, 10)), b0[:7, :10]),  # stride 0
    ]
    for a, b in cases:
        expect = a * 2 + b
        out = np.zeros(a.shape, np.float32)
        m(a, b, out)
        np.testing.assert_array_equal(out, expect)
        # strided output too
        big = np.zeros((a.shape[1], a.shape[0]), np.float32)
        m(a, b, big.T)
        np.testing.assert_array_equal(big.T, expect)
    assert ("strided", True) in m.variants_compiled
    assert ("contiguous", True) in m.variants_compiled


def test_aliasing_arguments_use_the_safe_variant():
    """The same array for an input and an output runs where lowering proves each output
    element is computed once from the same input element (the aliasing-safe variant);
    anything else that overlaps an output is refused before the kernel runs."""
    import tecomp as tc

    n = 50
    A = tc.placeholder((n,), name="A")
    B = tc.compute((n,), lambda i: A[i] * 2.0 + 1.0, name="B")
    s = tc.create_schedule(B.op)
    o, i = s[B].split(B.op.axis[0], factor=8)
    s[B].vectorize(i)
    m = tc.build(s, [A, B])
    x = np.random.rand(n).astype(np.float32)
    y = x.copy()
    m(y, y)
    np.testing.assert_array_equal(y, x * np.float32(2) + np.float32(1))
    assert ("contiguous", False) in m.variants_compiled
    # B[i] = A[i] + A[i + 1] (clamped): in place, an element would be read after it is
    # overwritten (a sequential loop gives one answer, a vectorized one another)
    A2, B2 = buf("A", (n,)), buf("B", (n,))
    iv = Var("i")
    nxt = op.minimum(iv + 1, n - 1)
    m2 = build_llvm(PrimFunc("stencil", (A2, B2), loop(iv, n, st(B2, ld(A2, iv) + ld(A2, nxt), iv))))
    y = x.copy()
    with pytest.raises(ArgumentError, match=r"parameter A \(argument 1\) and parameter B "
                                            r"\(argument 2\) are the same array, and stencil "
                                            r"writes B, but tecomp cannot prove"):
        m2(y, y)
    np.testing.assert_array_equal(y, x)                  # (not run)
    z = np.zeros(n + 10, np.float32)
    with pytest.raises(ArgumentError, match=r"share memory, and stencil writes B"):
        m2(z[:n], z[10:])


def test_argument_errors():
    m = _strided_kernel()
    a = np.zeros((4, 5), np.float32)
    b = np.zeros((4, 5), np.float32)
    cc = np.zeros((4, 5), np.float32)
    with pytest.raises(ArgumentError, match=r"strided expects 3 arguments \(A, B, C\), got 2"):
        m(a, b)
    with pytest.raises(ArgumentError, match=r"parameter A \(argument 1\) expects an "
                                            r"array \(numpy.ndarray, .*\) of float32 .* got a list"):
        m([[1.0]], b, cc)
    with pytest.raises(ArgumentError, match=r"parameter B \(argument 2\) expects float32, got "
                                            r"float64: convert with b.astype\(np.float32\)"):
        m(a, b.astype(np.float64), cc)
    with pytest.raises(ArgumentError, match=r"parameter C \(argument 3\) expects a 2-d array of "
                                            r"shape \(n, m\), got a 1-d array"):
        m(a, b, np.zeros(20, np.float32))
    with pytest.raises(ArgumentError, match=r"n = 4 from A.shape\[0\] but B.shape\[0\] = 3"):
        m(a, b[:3], cc)
    with pytest.raises(ArgumentError, match=r"m = 5 from A.shape\[1\] but C.shape\[1\] = 4"):
        m(a, b, cc[:, :4])
    ro = cc.copy()
    ro.flags.writeable = False
    with pytest.raises(ArgumentError, match=r"parameter C \(argument 3\) is written by strided, "
                                            r"but the array is read-only"):
        m(a, b, ro)
    with pytest.raises(ArgumentError, match="read-only"):
        m(a, b, np.broadcast_to(np.float32(0), (4, 5)))
    raw = np.zeros(4 * 5 * 4 + 2, np.uint8)[2:].view(np.float32).reshape(4, 5)
    with pytest.raises(ArgumentError, match="not aligned"):
        m(raw, b, cc)
    odd = np.zeros((4, 5 * 4 + 1), np.uint8)
    view = np.lib.stride_tricks.as_strided(odd[:, :20].view(np.float32), (4, 5), (21, 4))
    with pytest.raises(ArgumentError, match="stride of dimension 0 is 21 bytes, not a multiple"):
        m(view, b, cc)
    # constant extents and scalar parameters
    A4, S = buf("A", (4, 3)), Var("alpha", "float32")
    k, i = Var("k"), Var("i")
    cnt = Var("count", "int8")
    g = build_llvm(PrimFunc("consts", (A4, S, cnt), loop(k, 4, loop(i, 3, st(
        A4, S * Cast(cnt, "float32"), k, i)))))
    with pytest.raises(ArgumentError, match=r"parameter A \(argument 1\) expects A.shape\[1\] = "
                                            r"3, got 5"):
        g(np.zeros((4, 5), np.float32), 1.0, 1)
    with pytest.raises(ArgumentError, match=r"parameter alpha \(argument 2\) expects a number"):
        g(np.zeros((4, 3), np.float32), "x", 1)
    with pytest.raises(ArgumentError, match=r"parameter count \(argument 3\) = 300 does not fit "
                                            r"int8"):
        g(np.zeros((4, 3), np.float32), 1.0, 300)
    with pytest.raises(ArgumentError, match=r"count \(argument 3\) expects an integer"):
        g(np.zeros((4, 3), np.float32), 1.0, 2.5)
    out = np.zeros((4, 3), np.float32)
    g(out, np.float64(1.5), np.int16(-3))
    assert (out == -4.5).all()


def test_fast_argument_path_agrees_with_generic_checks():
    """The generated fast binder must never accept what the generic checks reject."""
    n, m_ = Var("n"), Var("m")
    A, B, C = buf("A", (n, m_)), buf("B", (n * 2, 3)), buf("C", (n, m_ + 1))
    alpha = Var("alpha", "float32")
    i = Var("i")
    mod = build_llvm(PrimFunc("fast", (A, B, alpha, C), loop(i, n, st(C, ld(A, i, 0) * alpha, i,
                                                                    0))))
    assert "def fast" in mod._fast_source
    sc = llvm_runtime._Scratch(mod._plan)
    good = (np.zeros((3, 4), np.float32), np.zeros((6, 3), np.float32), 1.5,
            np.zeros((3, 5), np.float32))
    assert mod._fast(good, sc) == ("contiguous", True) == mod._prepare(good, sc)
    ro = np.zeros((3, 5), np.float32)
    ro.flags.writeable = False
    bad = [
        (good[0], np.zeros((5, 3), np.float32), 1.5, good[3]),       # n*2 mismatch
        (good[0], np.zeros((6, 4), np.float32), 1.5, good[3]),       # constant extent
        (good[0], good[1], 1.5, np.zeros((3, 4), np.float32)),       # m + 1 mismatch
        (good[0], good[1], 1.5, np.zeros((2, 5), np.float32)),       # n mismatch
        (good[0].astype(np.float64), good[1], 1.5, good[3]),         # dtype
        (good[0][None], good[1], 1.5, good[3]),                      # ndim
        (good[0], good[1], "x", good[3]),                            # scalar type
        (good[0], good[1], 1.5, ro),                                 # read-only output
    ]
    for args in bad:
        assert mod._fast(args, sc) is None
        with pytest.raises(ArgumentError):
            mod._prepare(args, sc)
    # views and overlapping arrays go to the generic path, which picks the right variant
    # or refuses them
    big = np.zeros((3, 8), np.float32)
    assert mod._fast((big[:, ::2], good[1], 1.5, good[3]), sc) is None
    assert mod._prepare((big[:, ::2], good[1], 1.5, good[3]), sc) == ("strided", True)
    alias = np.zeros((3, 5), np.float32)
    assert mod._fast((alias[:, :4], good[1], 1.5, alias), sc) is None
    with pytest.raises(ArgumentError, match=r"parameter A \(argument 1\) and parameter C "
                                            r"\(argument 4\) share memory, and fast writes C"):
        mod._prepare((alias[:, :4], good[1], 1.5, alias), sc)
    same = np.zeros((3, 5), np.float32)
    D = buf("D", (n, m_))
    # (what lowering records for a compute stage without a reduction: D is written once
    # per element, here from the element of A at the same index)
    cp = build_llvm(PrimFunc("cp", (A, D), loop(i, n, st(D, ld(A, i, 0), i, 0)),
                             {"written_once": (D,)}))
    sc2 = llvm_runtime._Scratch(cp._plan)
    # (the one array object: the fast path runs the aliasing-safe variant itself)
    assert cp._fast((same, same), sc2) == ("contiguous", False) == cp._prepare((same, same), sc2)
    # contiguous views: of one array, they alias when they overlap (numpy says); of two
    # arrays (tc.empty's aligned views of their own blocks), never
    rows = np.zeros((6, 5), np.float32)
    assert cp._fast((rows[0:3], rows[2:5]), sc2) is None
    with pytest.raises(ArgumentError, match=r"share memory, and cp writes D"):
        cp._prepare((rows[0:3], rows[2:5]), sc2)
    assert cp._fast((rows[0:3], rows[3:6]), sc2) == ("contiguous", True)
    assert cp._fast((rows[3:6], rows), sc2) is None      # (a shape the kernel refuses)
    from tecomp.runtime.arrays import empty
    assert cp._fast((empty((3, 5)), empty((3, 5))), sc2) == ("contiguous", True)
    own = empty((6, 5))
    off = own.ctypes.data - own.base.ctypes.data
    def floats(lo, hi):   # a view of own's block through its raw bytes
        return own.base[off + 4 * lo:off + 4 * hi].view(np.float32).reshape(3, 5)

    assert cp._fast((own[:3], floats(5, 20)), sc2) is None
    assert cp._fast((own[:3], floats(0, 15)), sc2) is None
    assert cp._prepare((own[:3], floats(0, 15)), sc2) == ("contiguous", False)
    assert cp._fast((own[3:], floats(0, 15)), sc2) == ("contiguous", True)


def test_compiled_binder_takes_exactly_what_the_fast_path_takes():
    """The compiled binder (tecomp.runtime.pybind) runs the kernel only for calls the
    Python fast path binds to the contiguous no-alias variant; every other call comes
    back negative before the kernel runs, and __call__ then takes the Python path."""
    n, m_ = Var("n"), Var("m")
    A, B, C = buf("A", (n, m_)), buf("B", (4, m_)), buf("C", (n, m_))
    i, j = Var("i"), Var("j")
    mod = build_llvm(PrimFunc("bound", (A, B, C), loop(i, n, loop(j, m_, st(
        C, ld(A, i, j) + ld(B, 0, j), i, j))), {"written_once": (C,)}))
    if llvm_runtime._probe_binder_layout() is None:
        pytest.skip("this interpreter's object layout is not the one the binder reads")
    assert mod._bind is not None
    sc = llvm_runtime._Scratch(mod._plan)
    f32 = np.float32
    a, b, c = np.ones((3, 5), f32), np.full((4, 5), 2, f32), np.zeros((3, 5), f32)
    ro = np.zeros((3, 5), f32)
    ro.flags.writeable = False
    big = np.zeros((3, 10), f32)
    raw = np.zeros(3 * 5 * 4 + 1, np.uint8)
    calls = [
        (a, b, c), (a, b), (a, b, c, c), (a, b, ro), (a.astype(np.float64), b, c),
        (a[None], b, c), (a, b[:3], c), (a, b, np.zeros((2, 5), f32)),
        (a, b, np.zeros((3, 4), f32)), (big[:, ::2], b, c), (a, b, a), (c, b, c),
        (c[:2], b, c[1:]), ([[1.0] * 5] * 3, b, c), (np.frombuffer(raw[:60], f32).reshape(3, 5), b, c),
        (raw[1:].view(f32).reshape(3, 5), b, c),     # not aligned
        (np.zeros((0, 5), f32), b, np.zeros((0, 5), f32)), (a, b, c.T.copy().T),
        (np.zeros((6, 5), f32)[3:], b, c),
    ]
    for args in calls:
        fast = mod._fast(args, sc) if len(args) == 3 else None
        rc = mod._bind(mod._bind_addr, sc.base, args)
        if fast == ("contiguous", True):
            assert rc == 0, args
        else:
            assert rc < 0, args
            assert rc == -2 or fast != ("contiguous", False), args
    # and through __call__: the results of every path are the kernel's
    c[:] = 0
    mod(a, b, c)
    np.testing.assert_array_equal(c, a + b[0])
    x = np.ones((3, 5), f32)
    mod(x, b, x)                                   # in place: the aliasing-safe variant
    np.testing.assert_array_equal(x, 3)
    assert ("contiguous", False) in mod.variants_compiled
    # kernels with scalar parameters bind in Python
    alpha = Var("alpha", "float32")
    sc_mod = build_llvm(PrimFunc("scaled", (A, alpha, C), loop(i, n, loop(j, m_, st(
        C, ld(A, i, j) * alpha, i, j)))))
    assert sc_mod._bind is None


# ---------------------------------------------------------------------------------------
# allocation


def test_stack_and_heap_allocations():
    n = Var("n")
    A, B = buf("A", (n,)), buf("B", (n,))
    T = buf("T", (16,), scope="local")       # alloca
    H = buf("H", (n,), scope="global")       # tecomp_ws_alloc (symbolic size)
    i, j = Var("i"), Var("j")
    body = Allocate(H, seq(
        loop(i, n, st(H, ld(A, i) + 1.0, i)),
        loop(i, n, Allocate(T, seq(
            loop(j, 16, st(T, Cast(j, "float32"), j), "unrolled"),
            st(B, ld(H, i) * ld(T, FloorMod(i, c(16, "int32"), "int32")), i))))))
    m = build_llvm(PrimFunc("alloc", (A, B), body))
    src = m.get_source("llvm-unopt")
    assert "alloca [16 x float]" in src and "@\"tecomp_ws_alloc\"(i64" in src \
        and "@\"tecomp_ws_free\"" in src
    # a heap buffer aliases nothing else (as malloc's result): LLVM may keep the
    # kernel's inputs in registers across its stores to it
    assert re.search(r'declare noalias ptr @"tecomp_ws_alloc"', src), src
    for size in (0, 5, 1000):
        a = np.random.rand(size).astype(np.float32)
        out = np.zeros(size, np.float32)
        m(a, out)
        np.testing.assert_allclose(out, (a + 1) * (np.arange(size) % 16), rtol=1e-6)



def _access_scopes(src: str):
    """``[(instruction text, scope names, noalias names)]`` of the accesses of LLVM IR
    text ``src`` that carry tecomp's alias scopes (the domain named "... buffers")."""
    md = {int(k): v for k, v in re.findall(r"^!(\d+) = (.*)$", src, re.M)}
    refs = lambda text: [int(x) for x in re.findall(r"!(\d+)", text)]

    def names(list_id):
        out = set()
        for sid in refs(md[list_id]):
            m = re.fullmatch(r'distinct !\{\s*!(\d+),\s*!(\d+),\s*!"([^"]*)"\s*\}', md[sid])
            assert m and int(m[1]) == sid and md[int(m[2])].endswith('buffers" }'), md[sid]
            out.add(m[3])
        return out

    found = []
    for line in src.splitlines():
        m = re.search(r"!alias\.scope !(\d+), !noalias !(\d+)", line)
        if m:
            found.append((line.strip(), names(int(m[1])), names(int(m[2]))))
    return found


def test_allocated_buffers_carry_alias_scopes():
    """Every access through a buffer carries scoped no-alias metadata: a buffer tecomp
    allocates (a workspace block, a stack array) is a scope of its own, disjoint from the
    arguments' and from each other's, in the serial kernel (one thread) as in a parallel
    task; the arguments have one scope each where the variant promises no overlap, one
    shared scope where they may overlap.  (The int8 GEMM summed in C stored every
    accumulator at every step on one thread: LLVM could not tell that the loads of its
    packed operand in the workspace do not read C.)"""
    n = Var("n")
    W, C = buf("W", (n, 64)), buf("C", (n,))
    P = buf("P", (64, n), scope="global")           # tecomp_ws_alloc (symbolic size)
    T = buf("T", (4,), scope="local")               # alloca
    i, k, j = Var("i"), Var("k"), Var("j")
    # P = W^T; C[i] = sum_k P[k, i] * T[k % 4], T a constant table
    body = Allocate(P, seq(
        loop(i, n, loop(k, 64, st(P, ld(W, i, k), k, i))),
        Allocate(T, seq(
            loop(j, 4, st(T, Cast(j, "float32") + 1.0, j), "unrolled"),
            loop(i, n, seq(st(C, 0.0, i), loop(k, 64, st(C, ld(C, i) + ld(P, k, i) * ld(
                T, FloorMod(k, c(4, "int32"), "int32")), i))))))))
    w = np.random.rand(7, 64).astype(np.float32)
    want = (w * np.tile(np.arange(1, 5, dtype=np.float32), 16)).sum(1)
    for kind in ("serial", "parallel"):
        f = PrimFunc(f"scopes_{kind}", (W, C), body if kind == "serial" else
                     loop(Var("o"), 1, body, "parallel"))
        m = build_llvm(f)
        assert ("scopes_parallel.par0" in m.get_source("llvm-unopt")) == (kind == "parallel")
        for noalias in (True, False):
            acc = _access_scopes(m.get_source("llvm-unopt", noalias=noalias))
            every = {b for _, own, others in acc for b in own | others}
            args = {"W", "C"} if noalias else {"arguments"}
            assert every == args | {"P", "T"}, every
            seen = set()
            for text, own, others in acc:
                assert len(own) == 1 and own.isdisjoint(others) \
                    and own | others == every, text
                seen |= own
            assert seen == every, (kind, noalias, seen)
        out = np.zeros(7, np.float32)
        m(w, out)
        np.testing.assert_allclose(out, want, rtol=1e-5)


_MANY_TEMPORARIES = """
import sys
sys.path.insert(0, %r)
import numpy as np
import tecomp as tc

N = 16384                           # 64 KiB of float32: each stage's buffer may be an alloca
A = tc.placeholder((N,), name="A")
T = A
for k in range(200):                # 200 x 64 KiB = 12.5 MiB, past the 8 MiB stack
    T = (lambda p, k=k: tc.compute((N,), lambda i: p[i] + float(k), name=f"T{k}"))(T)
f = tc.build(tc.create_schedule(T.op), [A, T])
a = np.random.default_rng(0).random(N, dtype=np.float32)
t = np.zeros(N, np.float32)
f(a, t)
expect = a.astype(np.float64) + sum(range(200))
print("max error", float(np.abs(t - expect).max()))
"""


def test_stack_temporaries_past_the_stack_spill_to_the_workspace():
    """200 constant-size temporaries of 64 KiB each (each within the per-buffer stack
    limit) took 12.5 MiB of stack together: SIGSEGV on the first call.  One function's
    stack buffers are now bounded together (MAX_STACK_FRAME); the rest share a workspace
    block.  In a child process: a regression would kill it."""
    import os

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    r = subprocess.run([sys.executable, "-c", _MANY_TEMPORARIES % root], capture_output=True,
                       text=True, cwd=root, timeout=600)
    assert r.returncode == 0, (r.returncode, r.stderr[-3000:])
    assert float(r.stdout.split("max error")[1]) < 0.05, r.stdout


def _frame_allocas(src: str):
    """The bytes of each float array alloca (a buffer) in LLVM IR text."""
    return [int(n) * 4 for n in re.findall(r"= alloca \[(\d+) x float\]", src)]


def test_stack_budget_keeps_the_innermost_buffers():
    """Past the budget, the buffers allocated in loops keep the stack (a workspace block
    there would be taken and given back on every iteration): 9 buffers of 64 KiB at the
    root and one in a loop; 8 fit in 512 KiB: the loop's and 7 of the root's."""
    from tecomp.codegen.llvm.emit_memory import MAX_STACK_FRAME

    A, B = buf("A", (16384,)), buf("B", (16384,))
    roots = [buf(f"R{k}", (16384,), scope="local") for k in range(9)]
    inner = buf("inner", (16384,), scope="local")
    i, j = Var("i"), Var("j")
    # R0 = A + 1, R1 = R0 + 1, ... R8 = R7 + 1; then 3 times: inner = 2 R8; B += inner
    stmt = seq(loop(i, 16384, st(B, 0.0, i)), loop(j, 3, Allocate(inner, seq(
        loop(i, 16384, st(inner, ld(roots[-1], i) * 2.0, i)),
        loop(i, 16384, st(B, ld(B, i) + ld(inner, i), i))))))
    for k in reversed(range(9)):
        prev = A if k == 0 else roots[k - 1]
        stmt = Allocate(roots[k], seq(loop(i, 16384, st(roots[k], ld(prev, i) + 1.0, i)), stmt))
    m = build_llvm(PrimFunc("budget", (A, B), stmt))
    src = m.get_source("llvm-unopt")
    frame = _frame_allocas(src)
    assert sum(frame) <= MAX_STACK_FRAME and frame.count(65536) == 8, frame
    assert re.search(r'%"?inner"? = alloca \[16384 x float\]', src), src[:3000]
    assert '@"tecomp_ws_alloc"(i64 131072)' in src     # two root buffers, one block
    a = np.random.rand(16384).astype(np.float32)
    out = np.zeros(16384, np.float32)
    m(a, out)
    np.testing.assert_allclose(out, 3 * 2 * (a + 9), rtol=1e-5)


def test_stack_budget_in_parallel_tasks():
    """Each parallel task is a function of its own, with its own budget: 12 buffers of
    64 KiB per task, on the pool's threads."""
    n = Var("n")
    A, B = buf("A", (n, 16384)), buf("B", (n, 16384))
    temps = [buf(f"T{k}", (16384,), scope="local") for k in range(12)]
    i, j = Var("i"), Var("j")
    stmt = loop(j, 16384, st(B, ld(temps[-1], j), i, j))
    for k in reversed(range(12)):
        src_val = ld(A, i, j) if k == 0 else ld(temps[k - 1], j)
        stmt = Allocate(temps[k], seq(loop(j, 16384, st(temps[k], src_val + 1.0, j)), stmt))
    m = build_llvm(PrimFunc("tasks", (A, B), loop(i, n, stmt, "parallel")))
    src = m.get_source("llvm-unopt")
    assert sum(_frame_allocas(src)) <= 512 * 1024 and "spill" in src
    a = np.random.rand(6, 16384).astype(np.float32)
    out = np.zeros_like(a)
    m(a, out)
    np.testing.assert_allclose(out, a + 12, rtol=1e-6)


def test_failed_heap_allocation_raises_memory_error():
    A = buf("A", (1,), "int64")
    size, pick = Var("size", "int64"), Var("pick", "int64")
    H = buf("H", (size,), "int64")
    k = Var("k", "int64")
    body = Allocate(H, seq(loop(k, size, st(H, k * 3, k)), st(A, ld(H, pick), 0)))
    m = build_llvm(PrimFunc("big", (A, size, pick), body))
    out = np.zeros(1, np.int64)
    m(out, 10, 7)
    assert out[0] == 21
    with pytest.raises(llvm_runtime.KernelMemoryError, match="could not allocate "
                                                             "9223372036854775800 bytes for H"):
        m(out, (2 ** 63 - 8) // 8, 0)


def test_scalar_params_unrolled_attr_and_evaluate():
    n = Var("n")
    A, B = buf("A", (n,)), buf("B", (n, 4))
    alpha, flag = Var("alpha", "float32"), Var("flag", "bool")
    i, k = Var("i"), Var("k")
    from tecomp.ir import AttrStmt
    body = AttrStmt("pragma", "demo", seq(
        Evaluate(Call("syncthreads", (), "int32")),
        loop(i, n, loop(k, 4, st(B, Select(flag, ld(A, i) * alpha + Cast(k, "float32"),
                                           c(0.0, "float32"), "float32"), i, k), "unrolled"))))
    m = build_llvm(PrimFunc("scal", (A, alpha, flag, B), body))
    a = np.arange(5, dtype=np.float32)
    out = np.zeros((5, 4), np.float32)
    m(a, 0.5, True, out)
    np.testing.assert_array_equal(out, a[:, None] * 0.5 + np.arange(4))
    m(a, np.float32(2), np.bool_(False), out)
    assert (out == 0).all()
    with pytest.raises(ArgumentError, match=r"parameter flag \(argument 3\) expects a bool"):
        m(a, 1.0, 1, out)


# ---------------------------------------------------------------------------------------
# parallel


def _parallel_kernel():
    n, m_ = Var("n"), Var("m")
    A, B = buf("A", (n, m_)), buf("B", (n,))
    i, j = Var("i"), Var("j")
    T = buf("acc", (1,), scope="local")
    body = loop(i, n, Allocate(T, seq(
        st(T, c(0.0, "float32"), 0),
        loop(j, m_, st(T, ld(T, 0) + ld(A, i, j) * ld(A, i, j), 0)),
        st(B, op.call("sqrt", ld(T, 0)), i))), "parallel")
    return build_llvm(PrimFunc("rownorm", (A, B), body))


def test_parallel_loop_correct_and_pool_survives_many_calls():
    m = _parallel_kernel()
    assert "tecomp_parallel_for" in m.get_source("llvm")
    a = np.random.rand(37, 19).astype(np.float32)
    out = np.zeros(37, np.float32)
    expect = np.sqrt((a * a).sum(axis=1))
    for _ in range(3000):
        m(a, out)
    np.testing.assert_allclose(out, expect, rtol=1e-5)
    for rows in (0, 1, 2, 3, 1000):
        x = np.random.rand(rows, 4).astype(np.float32)
        y = np.zeros(rows, np.float32)
        m(x, y)
        np.testing.assert_allclose(y, np.sqrt((x * x).sum(axis=1)), rtol=1e-5)


def test_parallel_captures_outer_loop_vars_offsets_and_symbolic_allocations():
    n, m_ = Var("n"), Var("m")
    A, B = buf("A", (n, m_)), buf("B", (n, m_))
    i, j, k = Var("i"), Var("j"), Var("k")
    T = buf("row", (m_,), scope="local")   # symbolic size: malloc per task
    # for i in [0, n): parallel j in [1, m): B[i, j] = A[i, j] - A[i, j-1] (via a row copy)
    body = loop(i, n, loop(j, m_ - 1, Allocate(T, seq(
        loop(k, m_, st(T, ld(A, i, k), k)),
        st(B, ld(T, j) - ld(T, j - 1) + Cast(i, "float32"), i, j))), "parallel", lo=1))
    mod = build_llvm(PrimFunc("diff", (A, B), body), checks=True)
    for a in (np.random.rand(5, 9).astype(np.float32),
              np.random.rand(9, 5).astype(np.float32).T):          # strided variant too
        out = np.zeros(a.shape, np.float32)
        mod(a, out)
        expect = np.zeros_like(out)
        expect[:, 1:] = np.diff(a, axis=1) + np.arange(a.shape[0])[:, None]
        np.testing.assert_allclose(out, expect, rtol=1e-6)
    assert ("strided", True) in mod.variants_compiled


def test_nested_parallel_and_thread_count():
    n = 24
    A = buf("A", (n, n), "int32")
    i, j = Var("i"), Var("j")
    body = loop(i, n, loop(j, n, st(A, i * 100 + j, i, j), "parallel"), "parallel")
    m = build_llvm(PrimFunc("nest", (A,), body))
    old = llvm_runtime.get_num_threads()
    try:
        for t in (1, 3, old):
            llvm_runtime.set_num_threads(t)
            assert llvm_runtime.get_num_threads() == t
            out = np.zeros((n, n), np.int32)
            m(out)
            np.testing.assert_array_equal(out, np.arange(n)[:, None] * 100 + np.arange(n))
    finally:
        llvm_runtime.set_num_threads(old)
    with pytest.raises(Exception, match="positive integer"):
        llvm_runtime.set_num_threads(0)


def test_parallel_chunks_split_evenly_between_the_threads():
    """The pool cuts a parallel loop into ``min(8 * threads, extent)`` chunks whose sizes
    differ by at most one (one thread: the whole loop in one call), and gives each
    thread a contiguous range of them holding ``extent / threads`` iterations, give or
    take one: with the larger chunks first, 28 iterations on 2 threads were ranges of 16
    and 12 (a convolution's 28 row tasks).
    The chunks are recorded by a task the pool calls (a ctypes callback) and put in
    order; each range's share is recomputed from the pool's rule for the ranges."""
    import ctypes

    from tecomp.codegen.llvm import threadpool

    p = threadpool.pool()
    seen, lock = [], threading.Lock()

    @ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)
    def task(_closure, begin, end):
        with lock:
            seen.append((begin, end))
        return 0

    old = llvm_runtime.get_num_threads()
    try:
        for t in (1, 2, 3, 4):
            llvm_runtime.set_num_threads(t)
            for extent in (1, 2, 3, 7, 28, 29, 56, 100, 1001):
                seen.clear()
                assert p.parallel_for(ctypes.cast(task, ctypes.c_void_p), None, extent) == 0
                chunks = sorted(seen)
                # one thread: the whole loop in one call
                nt = min(8 * t, extent) if t > 1 else 1
                assert len(chunks) == nt, (t, extent)
                assert [b for b, _ in chunks] == [0] + [e for _, e in chunks[:-1]]
                assert chunks[-1][1] == extent
                sizes = [e - b for b, e in chunks]
                assert max(sizes) - min(sizes) <= 1, (t, extent, sizes)
                shares = [sum(sizes[r * nt // t:(r + 1) * nt // t]) for r in range(t)]
                assert max(shares) - min(shares) <= 1, (t, extent, shares)
    finally:
        llvm_runtime.set_num_threads(old)


def test_calls_from_eight_python_threads():
    pm = _parallel_kernel()
    sm = _strided_kernel()   # its strided variant compiles lazily, under contention
    errors = []

    def work(seed):
        try:
            rng = np.random.default_rng(seed)
            for it in range(60):
                a = rng.random((int(rng.integers(1, 40)), 7), dtype=np.float32)
                out = np.zeros(a.shape[0], np.float32)
                pm(a, out)
                np.testing.assert_allclose(out, np.sqrt((a * a).sum(axis=1)), rtol=1e-5)
                x = rng.random((6, 9), dtype=np.float32)
                y = rng.random((9, 6), dtype=np.float32)
                z = np.zeros((6, 9), np.float32)
                sm(x, y.T if it % 2 else y.T.copy(), z)
                np.testing.assert_array_equal(z, x * 2 + y.T)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


# ---------------------------------------------------------------------------------------
# checks, errors, determinism


@pytest.mark.parametrize("kind", ["serial", "vectorized", "parallel"])
def test_checks_raise_bounds_error_naming_the_buffer(kind):
    n = 16
    A, B = buf("A", (n,)), buf("B", (n,))
    i = Var("i")
    f = PrimFunc("oob", (A, B), loop(i, n, st(B, ld(A, i + 3), i), kind))
    m = build_llvm(f, checks=True)
    with pytest.raises(BoundsError, match=r"buffer A: index 16 is outside \[0, 16\) in "
                                          r"dimension 0, at `A\[i \+ 3\]` in the statement "
                                          r"`B\[i\] = A\[i \+ 3\]`"):
        m(np.zeros(n, np.float32), np.zeros(n, np.float32))
    g = PrimFunc("oob2", (A, B), loop(i, n, st(B, ld(A, i), i * 2 - 1), kind))
    with pytest.raises(BoundsError, match=r"store to buffer B: index -1 is outside"):
        build_llvm(g, checks=True)(np.zeros(n, np.float32), np.zeros(n, np.float32))


@pytest.mark.parametrize("threads", [2, 4])
def test_parallel_loop_reports_the_error_a_serial_run_would(threads):
    """Chunks run in any order on any thread (the pool deals each thread a range of them
    and the others take what is left), but the error is the first one in loop order:
    here the other threads reach their failing iterations long before the first thread
    reaches its own, late in its range."""
    n, work = 1000, 3000
    A, B = buf("A", (n,)), buf("B", (n,))
    i, k = Var("i"), Var("k")
    # out of bounds for i in [120, 125) (index 2000 first) and from i = 250 on
    idx = Select(i >= 250, i + 1100, Select(i >= 125, i + 0, Select(i >= 120, i + 1880, i + 0,
                                                                    "int32"), "int32"), "int32")
    body = seq(loop(k, work, st(B, ld(B, i) + ld(A, i), i)), st(B, ld(A, idx), i))
    f = PrimFunc("late_first", (A, B), loop(i, n, body, "parallel"))
    m = build_llvm(f, checks=True)
    old = llvm_runtime.get_num_threads()
    llvm_runtime.set_num_threads(threads)
    try:
        for _ in range(10):
            with pytest.raises(BoundsError, match=r"buffer A: index 2000 is outside"):
                m(np.zeros(n, np.float32), np.zeros(n, np.float32))
    finally:
        llvm_runtime.set_num_threads(old)


def test_checked_assert_and_heap_error_paths():
    n = Var("n")
    A = buf("A", (n,))
    i = Var("i")
    body = AssertStmt(n > 2, "need at least 3 elements", loop(i, n, st(A, c(1.0, "float32"), i)))
    m = build_llvm(PrimFunc("asrt", (A,), body), checks=True)
    m(np.zeros(3, np.float32))
    with pytest.raises(llvm_runtime.KernelAssertionError, match="need at least 3 elements"):
        m(np.zeros(2, np.float32))


def test_gpu_bound_loop_is_a_build_error():
    A = buf("A", (4,))
    i = Var("i")
    f = PrimFunc("gpu", (A,), For(i, Const(0), Const(4), "thread", st(A, c(0.0, "float32"), i),
                                  "blockIdx.x"))
    with pytest.raises(BuildError, match="bound to the GPU thread axis blockIdx.x.*target='cuda'"):
        build_llvm(f)


def test_lowering_errors_name_the_node():
    A = buf("A", (4,))
    i = Var("i")
    bad = BufferStore(A, Reduce(None, c(1.0, "float32"), (), c(True, "bool"), "float32"), (i,))
    with pytest.raises(InternalError, match=r"Reduce reached code generation(.|\n)*while "
                                            r"lowering Reduce"):
        build_llvm(PrimFunc("red", (A,), loop(i, 4, bad)))


def _det_func():
    f = _matmul(16, 16, 16, ("parallel", "serial", "serial"))
    return f


_LIFETIME_SCRIPT = """
import os, sys
import numpy as np
sys.path.insert(0, %r)
import tests.test_codegen_llvm as t
m = t._parallel_kernel()
a = np.random.rand(50, 8).astype(np.float32)
out = np.zeros(50, np.float32)
m(a, out)
pid = os.fork()
if pid == 0:                       # the child has no pool workers: they are restarted
    out2 = np.zeros(50, np.float32)
    m(a, out2)
    os._exit(0 if np.allclose(out2, out) else 3)
_, status = os.waitpid(pid, 0)
assert os.WEXITSTATUS(status) == 0, status
m(a, out)                           # the parent's pool still works
print("ok")                         # and the interpreter exits with workers spinning
"""


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs fork()")
def test_pool_survives_fork_and_interpreter_exit():
    import os

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    r = subprocess.run([sys.executable, "-c", _LIFETIME_SCRIPT % root], capture_output=True,
                       text=True, cwd=root, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_get_source_is_deterministic_across_builds_and_processes():
    s1 = build_llvm(_det_func()).get_source("llvm")
    s2 = build_llvm(_det_func()).get_source("llvm")
    assert s1 == s2
    u1 = build_llvm(_det_func()).get_source("llvm-unopt")
    code = ("import sys; sys.path.insert(0, %r); import tests.test_codegen_llvm as t; "
            "from tecomp.codegen.llvm import build_llvm; "
            "sys.stdout.write(build_llvm(t._det_func()).get_source('llvm-unopt'))")
    import os

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", code % root], capture_output=True, text=True,
                         cwd=root, check=True).stdout
    assert out == u1
    m = build_llvm(_det_func())
    assert m.get_source("ll") == m.get_source("llvm")
    from tecomp.errors import ArgumentError

    with pytest.raises(ArgumentError, match=r"get_source: unknown source kind 'ptx'"):
        m.get_source("ptx")


# ---------------------------------------------------------------------------------------
# differential test: random elementwise expressions vs a numpy reference


class _RandExpr:
    """Random int32/float32 expression trees over A[i], B[i] (float32), I[i], J[i]
    (int32) and i, with a numpy evaluator that follows tecomp's semantics."""

    def __init__(self, rng, bufs, i):
        self.rng = rng
        self.A, self.B, self.I, self.J = bufs
        self.i = i

    def gen(self, dtype, depth):
        r = self.rng
        if depth == 0 or r.random() < 0.2:
            k = r.integers(4)
            if dtype == "float32":
                return [ld(self.A, self.i), ld(self.B, self.i), c(float(r.normal() * 4), dtype),
                        Cast(self.i, dtype)][k]
            return [ld(self.I, self.i), ld(self.J, self.i), c(int(r.integers(-9, 9)), dtype),
                    self.i][k]
        a, b = self.gen(dtype, depth - 1), self.gen(dtype, depth - 1)
        if dtype == "float32":
            ops = ["add", "sub", "mul", "div", "min", "max", "select", "floor", "abs", "sqrt",
                   "cast"]
        else:
            ops = ["add", "sub", "mul", "fdiv", "fmod", "tdiv", "tmod", "min", "max", "select",
                   "cast", "abs"]
        o = ops[r.integers(len(ops))]
        simple = {"add": Add, "sub": Sub, "mul": Mul, "div": Div, "min": Min, "max": Max,
                  "fdiv": FloorDiv, "fmod": FloorMod, "tdiv": TruncDiv, "tmod": TruncMod}
        if o in simple:
            return simple[o](a, b, dtype)
        if o == "select":
            cond = op.compare([LT, GE][r.integers(2)], a, b)
            if r.random() < 0.3:
                cond = op.logic(Or, cond, ~(a.not_equal(a)))
            return Select(cond, self.gen(dtype, depth - 1), b, dtype)
        if o == "cast":
            other = "int32" if dtype == "float32" else "float32"
            inner = self.gen(other, depth - 1)
            if other == "float32":  # keep float -> int conversions in range
                inner = Min(Max(inner, c(-1e6, "float32"), "float32"), c(1e6, "float32"),
                            "float32")
            return Cast(inner, dtype)
        if o in ("floor", "abs", "sqrt"):
            return Call(o, (a,), dtype)
        raise AssertionError(o)

    def ev(self, e, env):
        t = type(e).__name__
        if t == "BufferLoad":
            return env[e.buffer.name]
        if t == "Var":
            return env["i"]
        if t == "Const":
            return np.full(env["n"], e.value, e.dtype)
        if t == "Cast":
            v = self.ev(e.value, env)
            if e.dtype == "int32":
                return np.trunc(v).astype(np.int32)
            return v.astype(e.dtype)
        if t == "Call":
            v = self.ev(e.args[0], env)
            return {"floor": np.floor, "abs": np.abs, "sqrt": np.sqrt}[e.op](v)
        if t == "Select":
            return np.where(self.ev(e.cond, env), self.ev(e.true_value, env),
                            self.ev(e.false_value, env))
        if t == "Not":
            return ~self.ev(e.a, env)
        a, b = self.ev(e.a, env), self.ev(e.b, env)
        if t in ("Add", "Sub", "Mul", "Div", "Min", "Max", "LT", "GE", "NE", "Or"):
            f = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide,
                 "Min": np.minimum, "Max": np.maximum, "LT": np.less, "GE": np.greater_equal,
                 "NE": np.not_equal, "Or": np.logical_or}[t]
            return f(a, b)
        a64, b64 = a.astype(np.int64), b.astype(np.int64)
        safe = np.where(b64 == 0, 1, b64)
        q = np.abs(a64) // np.abs(safe) * np.sign(a64) * np.sign(safe)
        res = {"FloorDiv": a64 // safe, "FloorMod": a64 % safe, "TruncDiv": q,
               "TruncMod": a64 - safe * q}[t]
        res = np.where(b64 == 0, 0, res)
        return ((res + 2 ** 31) % 2 ** 32 - 2 ** 31).astype(np.int32)


@pytest.mark.parametrize("kind", ["serial", "vectorized", "parallel"])
def test_random_expressions_match_numpy(kind):
    rng = np.random.default_rng(1234)
    n = 203  # not a multiple of any vector width
    A, B, I, J = buf("A", (n,)), buf("B", (n,)), buf("I", (n,), "int32"), buf("J", (n,), "int32")
    i = Var("i")
    gen = _RandExpr(rng, (A, B, I, J), i)
    exprs = [gen.gen(["float32", "int32"][k % 2], 4) for k in range(24)]
    outs = [buf(f"O{k}", (n,), e.dtype) for k, e in enumerate(exprs)]
    body = seq(*[st(o, e, i) for o, e in zip(outs, exprs)])
    if kind == "vectorized":  # split so the widened loop has 8 lanes and a remainder
        io, ii = Var("i.outer"), Var("i.inner")
        from tecomp.ir.functor import substitute
        body = loop(io, (n + 7) // 8, loop(ii, 8, IfThenElse(
            io * 8 + ii < n, substitute(body, {i: io * 8 + ii})), "vectorized"))
    else:
        body = loop(i, n, body, kind)
    m = build_llvm(PrimFunc("rand_" + kind, (A, B, I, J, *outs), body))
    env = {"n": n, "i": np.arange(n, dtype=np.int32),
           "A": rng.normal(size=n).astype(np.float32) * 10,
           "B": rng.normal(size=n).astype(np.float32) * 10,
           "I": rng.integers(-50, 50, n).astype(np.int32),
           "J": rng.integers(-5, 5, n).astype(np.int32)}
    results = [np.zeros(n, e.dtype) for e in exprs]
    m(env["A"], env["B"], env["I"], env["J"], *results)
    with np.errstate(all="ignore"):
        for e, got in zip(exprs, results):
            np.testing.assert_array_equal(got, gen.ev(e, env), err_msg=str(e))


# ---------------------------------------------------------------------------------
# odd vector widths: one masked access on AVX-512, a power-of-two tail elsewhere


def _host_has_avx512():
    from tecomp.codegen.llvm import jit as llvm_jit

    return llvm_jit.host().has_feature("avx512f")


@pytest.mark.parametrize("lanes", [3, 5, 7, 12, 14, 20, 29])
@pytest.mark.parametrize("dtype", ["float32", "int32", "float64"])
def test_odd_vector_widths_load_and_store_exactly_their_lanes(lanes, dtype):
    """A contiguous vector access of a width that is not a power of two: correct values,
    nothing written past the lanes (the element after the array end is in a guard band
    the kernel must not touch), and on AVX-512 one masked load/store per access."""
    import tecomp as tc

    n = lanes * 3
    A = tc.placeholder((n,), name="A", dtype=dtype)
    B = tc.compute((n,), lambda i: A[i] * 2 + 1, name="B")
    s = tc.create_schedule(B.op)
    _, xi = s[B].split(B.op.axis[0], factor=lanes)
    s[B].vectorize(xi)
    f = tc.build(s, [A, B])
    a = (np.arange(n) - 7).astype(dtype)
    band = np.full(n + 16, 12345, dtype=dtype)
    out = band[:n]   # the kernel sees n elements; the 16 after them must stay 12345
    f(a, out)
    np.testing.assert_array_equal(out, a * 2 + 1)
    assert (band[n:] == 12345).all()
    if _host_has_avx512() and lanes & (lanes - 1) and lanes < 16 and dtype != "float64":
        assert "llvm.masked.load" in f.get_source("llvm-unopt")
        assert "llvm.masked.store" in f.get_source("llvm-unopt")


_STRIDED_CHILD = r"""
import ctypes, mmap, sys
import numpy as np
import tecomp as tc

def check(step, dtype):
  lanes = 16
  n = lanes * 4
  m = step * (n - 1) + 1     # the last lane of the last vector reads the last element
  A = tc.placeholder((m,), name="A", dtype=dtype)
  B = tc.compute((n,), lambda i: A[i * step] + 1, name="B")
  s = tc.create_schedule(B.op)
  _, xi = s[B].split(B.op.axis[0], factor=lanes)
  s[B].vectorize(xi)
  f = tc.build(s, [A, B])
  assert "llvm.masked.gather" not in f.get_source("llvm-unopt")
  page = mmap.PAGESIZE
  size = -(-m * np.dtype(dtype).itemsize // page) * page
  buf = mmap.mmap(-1, size + page)
  base = ctypes.addressof(ctypes.c_char.from_buffer(buf))
  libc = ctypes.CDLL(None, use_errno=True)
  libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
  assert libc.mprotect(base + size, page, 0) == 0   # PROT_NONE: reading it faults
  a = np.frombuffer(buf, dtype=dtype, count=m, offset=size - m * np.dtype(dtype).itemsize)
  a[:] = np.arange(m) % 1000
  out = np.empty(n, dtype)
  f(a, out)
  np.testing.assert_array_equal(out, a[::step] + 1)

for arg in sys.argv[1:]:
    step, dtype = arg.split(":")
    print("begin", arg, flush=True)
    check(int(step), dtype)
    print("ok", arg, flush=True)
"""


_STRIDED_STEPS, _STRIDED_DTYPES = [2, 3, 4], ["float32", "int32", "float64"]


@pytest.fixture(scope="module")
def strided_results():
    """Every (step, dtype) of the test below checked in child processes, one child for
    all of them (a child's start and import of tecomp cost more than a case): after a
    fault, the case it was running has the fault as its outcome and the cases after it
    run in a new child.  {"step:dtype": None when right, else what went wrong}."""
    import subprocess
    import sys

    todo = [f"{st}:{dt}" for dt in _STRIDED_DTYPES for st in _STRIDED_STEPS]
    results = {}
    while todo:
        r = subprocess.run([sys.executable, "-c", _STRIDED_CHILD, *todo],
                           capture_output=True, text=True, timeout=300)
        begun = None
        for line in r.stdout.splitlines():
            word, _, arg = line.partition(" ")
            if word == "begin":
                begun = arg
            elif word == "ok" and arg == begun:
                results[arg], begun = None, None
        if begun is not None:          # a fault or a failed check in this case
            results[begun] = (r.returncode, r.stderr[-2000:])
        elif r.returncode != 0 or not all(a in results for a in todo):
            # (the child failed outside a case: every case it ran fails with it)
            results.update({a: (r.returncode, r.stderr[-2000:]) for a in todo})
        todo = [a for a in todo if a not in results]
    return results


@pytest.mark.parametrize("step", _STRIDED_STEPS)
@pytest.mark.parametrize("dtype", _STRIDED_DTYPES)
def test_strided_vector_loads_read_only_their_lanes(step, dtype, strided_results):
    """A vector load of every ``step``-th element (a strided convolution's input row) is
    one wide load and a shuffle, not a gather: the right values, and nothing read past the
    last element the lanes use (the array ends where an unreadable page begins; in a
    child process, so that a fault fails the test instead of ending the run)."""
    assert strided_results[f"{step}:{dtype}"] is None, strided_results[f"{step}:{dtype}"]


def test_odd_width_accumulator_is_not_masked():
    """A buffer stored and read back across a loop (an accumulator) keeps plain vector
    accesses: LLVM keeps those in registers, not masked ones."""
    import tecomp as tc

    A = tc.placeholder((14, 64), name="A")
    k = tc.reduce_axis((0, 64), name="k")
    B = tc.compute((14,), lambda i: tc.sum(A[i, k], axis=k), name="B")
    s = tc.create_schedule(B.op)
    i, = s[B].op.axis
    kk, = s[B].op.reduce_axis
    s[B].reorder(kk, i)
    s[B].vectorize(i)
    f = tc.build(s, [A, B])
    a = np.random.default_rng(0).standard_normal((14, 64)).astype("float32")
    out = np.zeros(14, "float32")
    f(a, out)
    np.testing.assert_allclose(out, a.sum(1), rtol=1e-5, atol=1e-5)
    assert "llvm.masked.store" not in f.get_source("llvm-unopt")


def test_guarded_vector_tail_is_partitioned_into_a_power_of_two_width():
    """A 48-wide vectorized panel of which the last block has 32 valid lanes: the tail
    becomes an unguarded 32-lane loop instead of a per-lane mask."""
    import tecomp as tc

    n = 48 * 2 + 32
    A = tc.placeholder((n,), name="A")
    B = tc.compute((n,), lambda i: A[i] + 1.0, name="B")
    s = tc.create_schedule(B.op)
    _, xi = s[B].split(B.op.axis[0], factor=48)
    s[B].vectorize(xi)
    func = tc.lower(s, [A, B])
    text = str(func)
    assert "vectorized (i.inner, 0, 48)" in text and "vectorized (i.inner, 0, 32)" in text
    assert "if (" not in text, text
    f = tc.build(s, [A, B])
    a = np.arange(n, dtype="float32")
    out = np.zeros(n, "float32")
    f(a, out)
    np.testing.assert_array_equal(out, a + 1)


_MAX_REDUCTION_SCRIPT = """
import sys
import numpy as np
sys.path.insert(0, %r)
import tecomp as tc
alpha = tc.var("alpha", "float32")
X = tc.placeholder((13, 5), name="X")
k0 = tc.reduce_axis((0, 4), name="k0")
k1 = tc.reduce_axis((0, 8), name="k1")
Y = tc.compute((5, 1), lambda i, j: tc.max(alpha + X[1, k1 %% 3], axis=[k0, k1]), name="Y")
f = tc.build(tc.create_schedule(Y.op), [X, Y, alpha])
x = np.random.default_rng(0).standard_normal((13, 5)).astype("float32")
x[1, 2] = np.nan
y = np.zeros((5, 1), "float32")
f(x, y, 0.5)
assert np.isnan(y).all(), y
x[1, 2] = 7.0
f(x, y, 0.5)
assert (y == np.float32(7.5)).all(), y
print("ok")
"""


def test_scalar_float_max_reduction_compiles():
    """Fuzz seed 940732: with the scalar max written as compare-select, LLVM's loop
    vectorizer never returned on this module (the build hung).  Run in a subprocess
    with a time limit, so that a regression fails instead of hanging the suite."""
    import os

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    r = subprocess.run([sys.executable, "-c", _MAX_REDUCTION_SCRIPT % root],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]


def test_unrolled_index_arithmetic_is_emitted_once_per_block():
    """The unrolled copies of a body index their loads with the same products: each is
    emitted once per basic block, loop variables bound to constants fold, and vector
    constants use LLVM's short forms.  The result is unchanged."""
    import re
    import tecomp as tc

    A = tc.placeholder((64, 48), name="A", dtype="float32")
    B = tc.compute((64, 48), lambda i, j: A[i, j] * 2.0 + A[i, 47 - j], name="B")
    s = tc.create_schedule(B.op)
    i, j = B.op.axis
    io, ii = s[B].split(i, factor=4)
    jo, ji = s[B].split(j, factor=16)
    s[B].reorder(io, jo, ii, ji)
    s[B].unroll(ii)
    s[B].vectorize(ji)
    m = tc.build(s, [A, B])
    a = np.random.default_rng(3).standard_normal((64, 48)).astype("float32")
    out = np.zeros_like(a)
    m(a, out)
    np.testing.assert_allclose(out, a * 2 + a[:, ::-1], rtol=1e-6)

    src = m.get_source("llvm-unopt")
    for block in re.split(r"\n(?=\S+:\n)", src):
        ops = re.findall(r"= ((?:add|sub|mul) i64 \S+ \S+)$", block, flags=re.M)
        assert len(ops) == len(set(ops)), [o for o in ops if ops.count(o) > 1]
    assert not re.search(r"trunc i64 -?\d+ to", src)
    assert "undef" not in src and "poison" in src


# float32 erf is tecomp's own vector code too (codegen/llvm/emit_math.py, erf_f32): a
# polynomial below 1, 1 - exp(-x^2) * Q(1/x) above, both fitted for it; measured on every
# float32 input against float64 erf (docs/numerics.md): at most 1.62 ulp with FMA, 2.36
# without

def _erf_inputs():
    bits = [np.arange(0, 1 << 32, 509, dtype=np.uint64).astype(np.uint32)]
    for edge in (1.0, -1.0, 3.92, 4.0, 0.5, 1e-30):
        b = int(np.float32(edge).view(np.uint32))
        bits.append(np.arange(b - (1 << 13), b + (1 << 13), dtype=np.uint32))
    bits.append(np.arange(0, 1 << 13, dtype=np.uint32) | 0x80000000)  # -0 and tiny negatives
    return np.concatenate(bits).view(np.float32)


#: the last float64 reference of :func:`_float64_reference` given a key: ``(key, value)``
_REFERENCE = [None, None]


def _float64_reference(x, reference, key=None):
    """What the check of a float32 function needs of its float64 ``reference`` on the
    inputs ``x``; none of it depends on the target, so it is kept for the last ``key``
    given (a function's targets run one after the other: see test_more_float32_functions)."""
    if key is not None and _REFERENCE[0] == key:
        return _REFERENCE[1]
    fin = np.isfinite(x)
    with np.errstate(all="ignore"):
        exact = reference(x[fin].astype(np.float64))
    with np.errstate(over="ignore"):
        rounded = exact.astype(np.float32)
    # overflow to +-inf (exp2, expm1): the float32 result is that infinity
    over = np.isinf(rounded) & np.isfinite(exact)
    inside = np.isfinite(rounded)    # (the function's domain: NaN or inf outside it)
    ulp = np.spacing(np.abs(exact[inside]).astype(np.float32)).astype(np.float64)
    value = fin, over, rounded[over], inside, exact[inside], ulp, np.isnan(exact)
    if key is not None:
        _REFERENCE[:] = key, value
    return value


def _check_float32_function(fn, x, reference, limit, special, want, target, key=None):
    """The vector code of the float32 math function ``fn`` on the inputs ``x``: no libm
    call per lane, the same bits vectorized and serial, within ``limit`` ulp of
    ``reference`` (float64) on the finite inputs, NaN for NaN; ``fn(special) == want``
    (signed zeros included; run by the serial kernel).  ``key``: names ``x`` and
    ``reference`` for :func:`_float64_reference`."""
    outs = []
    for kind in ("vectorized", "serial"):
        m = build_llvm(elementwise(f"{fn}_{kind}", lambda v: op.call(fn, v), "float32",
                                   kind=kind), target=target)
        out = np.zeros(x.size, np.float32)
        m(x, out)
        outs.append(out)
        if kind == "vectorized":
            src = m.get_source("llvm-unopt")
            if fn in ("sin", "cos", "tan"):   # libm only in the branch for large arguments
                assert f"{fn}f.libm:" in src
                src = re.sub(rf"\n{fn}f\.libm[.0-9]*:.*?\n\n", "\n", src, flags=re.S)
            libm = fn.removeprefix("fast_")
            assert f"@{libm}f(" not in src.replace(f"declare float @{libm}f(", "")  # per lane
            if fn == "fast_erfc":   # float32 lanes, unlike erfc's float64 ones
                assert "fpext" not in src and "double" not in src
    if not np.array_equal(outs[0].view(np.uint32), outs[1].view(np.uint32)):
        np.testing.assert_array_equal(outs[0].view(np.uint32), outs[1].view(np.uint32))
    fin, over, rounded_over, inside, exact, ulp, nan = _float64_reference(x, reference, key)
    got = outs[0][fin]
    np.testing.assert_array_equal(got[over], rounded_over)
    err = np.abs(got[inside].astype(np.float64) - exact) / ulp
    assert err.max() <= limit, (x[fin][inside][err.argmax()], err.max())
    assert np.isnan(got[nan]).all()
    assert np.isnan(outs[0][np.isnan(x)]).all()
    special = np.array(special, np.float32)
    out = np.zeros_like(special)
    m(special, out)     # (the serial kernel)
    want = np.array(want, np.float32)
    np.testing.assert_array_equal(out, want)
    num = ~np.isnan(want)      # (a NaN's sign is not specified)
    np.testing.assert_array_equal(np.signbit(out[num]), np.signbit(want[num]))


def test_erf_float32_error_everywhere(exp_variant):
    """float32 erf within its documented bound (docs/numerics.md) of float64 erf: with FMA
    (x86 with AVX2 or AVX-512: the segments) 1.05 ulp (1.0002 on every input), without
    (two branches) 2.4 (2.36)."""
    import math

    try:
        from scipy.special import erf as ref_erf
    except ImportError:  # pragma: no cover - scipy comes with scikit-learn in [test]
        ref_erf = np.vectorize(math.erf)
    _check_float32_function("erf", _erf_inputs(), ref_erf,
                            1.05 if _has_fma(exp_variant) else 2.4,
                            [np.inf, -np.inf, 0.0, -0.0, 4.0, 100.0, -3.93],
                            [1, -1, 0, -0.0, 1, 1, -1], exp_variant, key="erf")


def test_erf_float32_two_branches_with_fma():
    """Where a CPU has FMA but no table instruction (AArch64; here Haswell without AVX2),
    float32 erf is its two-branch form (no ``vpermps``), within its documented bound
    (docs/numerics.md: 1.62 ulp on every input) of float64 erf, with its special
    values."""
    import tecomp as tc
    from scipy.special import erf as ref_erf

    target = "llvm -mcpu=haswell -mattr=-avx2"
    A = tc.placeholder((1024,), name="A")
    B = tc.compute((1024,), lambda i: tc.erf(A[i]), name="B")
    s = tc.create_schedule(B.op)
    s[B].vectorize(s[B].split(B.op.axis[0], factor=8)[1])
    asm = tc.build(s, [A, B], target=target).get_source("asm")
    assert "vpermps" not in asm and "vfmadd" in asm
    _check_float32_function("erf", _erf_inputs(), ref_erf, 1.7,
                            [np.inf, -np.inf, 0.0, -0.0, 4.0, 100.0, -3.93],
                            [1, -1, 0, -0.0, 1, 1, -1], target, key="erf")


def test_log_float32_error_everywhere(exp_variant):
    """float32 log is vector code (no libm logf per lane), within the documented bound
    (docs/numerics.md) of float64 log; NaN below 0, -inf at 0 (either sign)."""
    bits = [np.arange(0, 1 << 32, 509, dtype=np.uint64).astype(np.uint32)]
    for edge in (1.0, 0.75, 1.5, 0.70710677, 1.4142135, 1.1754944e-38, 2.0, 0.5):
        b = int(np.float32(edge).view(np.uint32))
        bits.append(np.arange(b - (1 << 13), b + (1 << 13), dtype=np.uint32))
    bits.append(np.arange(0, 1 << 13, dtype=np.uint32))   # +0 and the smallest subnormals
    x = np.concatenate(bits).view(np.float32)
    _check_float32_function("log", x, np.log, 1.5,
                            [np.inf, 0.0, -0.0, 1.0, -1.0, -np.inf, 1e-45],
                            [np.inf, -np.inf, -np.inf, 0.0, np.nan, np.nan,
                             np.float32(np.log(np.float64(np.float32(1e-45))))], exp_variant,
                            key="log")


@functools.lru_cache(maxsize=1)
def _more_f32_inputs(fn):
    """``_dense_inputs`` of ``_MORE_F32[fn]``'s edges (read-only: kept for the next target)."""
    x = _dense_inputs(*_MORE_F32[fn][1])
    x.flags.writeable = False
    return x


@pytest.mark.parametrize("fn", ["log", "log2", "log1p"])
def test_log_functions_by_a_table_of_16(fn):
    """Where the target has FMA and reads a 16-entry table in one instruction (AVX-512's
    ``vpermps``), float32 log, log2 and log1p reduce ``m`` once more by a table of 16
    (``emit_math.LOG_TABLE``): within their own bound, 0.8 ulp (docs/numerics.md: every
    input), on a sample of every input, the same bits vectorized and serial, with
    their special values; AVX2 (two ``vpermps`` and a blend per table) keeps the former
    forms (their bounds: the dense tests above)."""
    import tecomp as tc

    if not tc.Target("llvm").has_feature("avx512f"):
        pytest.skip("this CPU has no AVX-512")
    avx512 = _MATH_TARGETS["avx512"]
    A = tc.placeholder((1024,), name="A")
    for target in (avx512, _MATH_TARGETS["fma"]):
        B = tc.compute((1024,), lambda i: getattr(tc, fn)(A[i]), name="B")
        s = tc.create_schedule(B.op)
        s[B].vectorize(s[B].split(B.op.axis[0], factor=16)[1])
        asm = tc.build(s, [A, B], target=target).get_source("asm")
        assert ("vperm" in asm) == (target == avx512) and "vfmadd" in asm, (target, fn)
    ref, edges, _, special, want = _MORE_F32.get(fn, (np.log, (1.0, 0.75, 1.5, 2.0), None,
                                                       [0.0, -0.0, -1.0, np.inf, 1e-45],
                                                       [-np.inf, -np.inf, np.nan, np.inf,
                                                        np.float32(np.log(2.0 ** -149))]))
    # (every 4093rd pattern: the functions' dense tests above and below check these
    # targets too, at their documented bounds, on a denser sample)
    bits = [np.arange(0, 1 << 32, 4093, dtype=np.uint64).astype(np.uint32)]
    # (and 2^12 patterns around each bin's edge in [3/4, 3/2))
    for edge in list(edges) + [1 + k / 16 for k in range(1, 8)] + [0.75 + k / 32 for k in range(1, 8)]:
        b = int(np.float32(edge).view(np.uint32))
        bits.append(np.arange(max(b - (1 << 11), 0), b + (1 << 11), dtype=np.uint32))
    _check_float32_function(fn, np.concatenate(bits).view(np.float32), ref, 0.8, special, want,
                            avx512)


def _dense_inputs(*edges):
    """Every 509th float32 bit pattern, 2^14 patterns around each of ``edges``, and the
    smallest magnitudes of both signs."""
    bits = [np.arange(0, 1 << 32, 509, dtype=np.uint64).astype(np.uint32)]
    for edge in edges:
        b = int(np.float32(edge).view(np.uint32))
        bits.append(np.arange(max(b - (1 << 13), 0), b + (1 << 13), dtype=np.uint32))
    bits.append(np.arange(0, 1 << 13, dtype=np.uint32))
    bits.append(np.arange(0, 1 << 13, dtype=np.uint32) | 0x80000000)
    return np.concatenate(bits).view(np.float32)


#: tecomp's other float32 functions: (float64 reference, inputs' edges, bounds in ulp with
#: and without FMA (the documented ones, docs/numerics.md), special inputs, their results)
_MORE_F32 = {
    "exp2": (np.exp2, (1.0, -126.0, -149.0, 127.9, 0.5), (1.5, 1.5),
             [np.inf, -np.inf, 0.0, -0.0, 128.0, -150.0, -149.0, 200.0],
             [np.inf, 0, 1, 1, np.inf, 0, 2.0 ** -149, np.inf]),
    "expm1": (np.expm1, (0.3465736, -0.3465736, 1e-7, 88.7, -17.0), (1.5, 2.0),
              [np.inf, -np.inf, 0.0, -0.0, 89.0, -30.0, 1e-30, -1e-30],
              [np.inf, -1, 0, -0.0, np.inf, -1, 1e-30, -1e-30]),
    "log2": (np.log2, (1.0, 1.4142135, 2.0, 1.1754944e-38), (1.5, 2.0),
             [np.inf, 0.0, -0.0, 1.0, 2.0, -1.0, -np.inf, 2.0 ** -149],
             [np.inf, -np.inf, -np.inf, 0, 1, np.nan, np.nan, -149]),
    # (FMA: the exact reduced argument, no division; -8.940697e-08: the division form's
    # largest error, 1.44 ulp, above the FMA form's bound; 0.5: where the reduced argument
    # rounds once, at 0.49999997 (1.27 ulp); 2^125: where the branch of the special
    # values starts)
    "log1p": (np.log1p, (0.0, -0.5, 1.0, -0.9999, -8.940697e-08, 0.5, 2.0 ** 125, 3.0, -0.75),
              (1.3, 1.5),
              [np.inf, -1.0, 0.0, -0.0, -2.0, -np.inf, 1e-30, -1e-30],
              [np.inf, -np.inf, 0, -0.0, np.nan, np.nan, 1e-30, -1e-30]),
    # (AVX-512: the edges of the direct segments' range, +-15.5, and of some segments)
    # (-9.7497463, 0.27740297: the largest errors of the AVX-512 segments, every input)
    "softplus": (lambda v: np.logaddexp(0.0, v), (0.0, 20.0, -20.0, -87.0, 15.5, -15.5,
                                                  15.25, -0.25, 0.25, -7.75, 3.1044025,
                                                  -9.7497463, 0.27740297),
                 (2.0, 2.5),
                 [np.inf, -np.inf, 0.0, 100.0, -200.0, 15.5, 16.0, 1e30, -1e30],
                 [np.inf, 0, np.float32(np.log(2.0)), 100, 0, 15.5, 16.0, 1e30, 0]),
    "sin": (np.sin, (np.pi / 4, np.pi / 2, np.pi, 3 * np.pi / 2, 125.0, 65536.0, 1e-4), (2.0, 2.5),
            [np.inf, -np.inf, 0.0, -0.0, 1e-30, -1e-30],
            [np.nan, np.nan, 0, -0.0, 1e-30, -1e-30]),
    "cos": (np.cos, (np.pi / 4, np.pi / 2, np.pi, 3 * np.pi / 2, 125.0, 65536.0), (2.0, 2.5),
            [np.inf, -np.inf, 0.0, -0.0], [np.nan, np.nan, 1, 1]),
    # float32 lanes (codegen/llvm/emit_math_f32.py); tan: float64 lanes beyond 65536 (FMA)
    # or 125 (no FMA), libm's tanf beyond 2^20
    "tan": (np.tan, (np.pi / 4, np.pi / 2, np.pi, 1e-4, 2.0 ** -12, 125.0, 581.19464,
                     65536.0, 1048576.0, 1e4), (1.5, 1.5),
            [np.inf, -np.inf, 0.0, -0.0, 1e-30, -1e-30, 1e-45],
            [np.nan, np.nan, 0, -0.0, 1e-30, -1e-30, 1e-45]),
    "atan": (np.arctan, (1.0, 1.0087918, 1.0148398, 0.41421357, 2.4142137, 1e-4, 1.1529215e18),
             (1.5, 1.6),
             [np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e30, 1.0],
             [np.pi / 2, -np.pi / 2, 0, -0.0, 1e-45, -np.pi / 2, np.pi / 4]),
    # FMA: float32 lanes, the exponent divided by 3 (codegen/llvm/emit_math_f32.py; the
    # edges: where k = floor(e/3) steps, for normal and scaled subnormal inputs); without
    # FMA: float64 lanes, rounded once (codegen/llvm/emit_math_wide.py)
    "cbrt": (np.cbrt, (1.0, 8.0, 1.1754944e-38, 2.0, 4.0, -1.0, 0.125, 64.0, 2.0 ** 126,
                       2.0 ** 125, 2.0 ** -129, 2.0 ** -147, 16777216.0, 3.4028235e38),
             (0.51, 0.51),
             [np.inf, -np.inf, 0.0, -0.0, 8.0, -27.0, 2.0 ** -149, 2.0 ** 126],
             [np.inf, -np.inf, 0, -0.0, 2, -3, np.float32(np.cbrt(2.0 ** -149)), 2.0 ** 42]),
    # FMA and a table instruction (x86 with AVX2 or AVX-512): float32 lanes, one polynomial
    # per segment (codegen/llvm/emit_math_f32.py; the edges: segments' and 2^(j/16)'s);
    # without FMA: float64 lanes, rounded once (codegen/llvm/emit_math_wide.py)
    "erfc": (lambda v: _scipy_special().erfc(v), (0.0, 0.5, 2.0, 4.0, 9.0, 10.05, 10.1, -0.5,
                                                  -2.0, 1e-4, 0.81630564, 0.328125, 0.984375,
                                                  -0.32078925, 0.32470742, 9.84375, 0.14718,
                                                  9.1945),
             (0.95, 0.6), [np.inf, -np.inf, 0.0, -0.0, 10.06, 11.0, -10.0, 1e-30, 9.5],
             [0, 2, 1, 1, 0, 0, 2, 1, np.float32(3.7692e-41)]),
    # float32 lanes (codegen/llvm/emit_math_f32.py): the looser, faster erfc (with AVX2 or
    # AVX-512: erfc's segments without their compensations; else its own form)
    "fast_erfc": (lambda v: _scipy_special().erfc(v), (0.0, 0.5, 2.0, 4.0, 9.0, 10.05, 10.1,
                                                       -0.5, -2.0, 1e-4, 3.169583, 1.9458783,
                                                       6.888255, 1.0913229, 4.983953),
                  (2.9, 3.5), [np.inf, -np.inf, 0.0, -0.0, 10.06, 11.0, -10.0, 1e-30, np.nan],
                  [0, 2, 1, 1, 0, 0, 2, 1, np.nan]),
    # the looser, faster log (a division, no table): the special values of log
    "fast_log": (np.log, (1.0, 0.75, 1.5, 1.1754944e-38, 2.0, 0.5, 1.0643531), (2.0, 2.0),
                 [np.inf, 0.0, -0.0, 1.0, -1.0, -np.inf, 2.0 ** -149, 2.0 ** 127, np.nan],
                 [np.inf, -np.inf, -np.inf, 0, np.nan, np.nan,
                  np.float32(np.log(2.0 ** -149)), np.float32(np.log(2.0 ** 127)), np.nan]),
}


def test_tan_float32_reduced_in_float32(exp_variant):
    """float32 tan where its float32 code reduces the argument (``|x| <= 65536`` with
    FMA, 125 without; float64 lanes beyond) is within 1.3 ulp (1.5 without FMA) of
    float64 tan on a dense sample, the windows around multiples of pi/4 included (every
    such input: 1.254 and 1.45 ulp, docs/numerics.md)."""
    limit = 65536.0 if _has_fma(exp_variant) else 125.0
    x = _dense_inputs(np.pi / 4, np.pi / 2, np.pi, 1e-4, 3 * np.pi / 4, 581.19464, 0.5,
                      3 * np.pi / 2, 1e4, 32884.62, 2.3612592, 2.3781295, 89.536377, 1024.0,
                      limit)
    x = x[np.abs(x) <= limit]
    _check_float32_function("tan", x, np.tan, 1.3 if _has_fma(exp_variant) else 1.5,
                            [0.0, -0.0], [0, -0.0], exp_variant, key=("tan", limit))


@pytest.mark.parametrize("variant", ["avx512", "fma"])
def test_tan_reduction_error_by_one_fma(variant, monkeypatch):
    """float32 tan with FMA takes the rounding error of its reduction's second step as
    ``fma(q, -b, r1 - rh)`` (``emit_math_f32.TAN_FMA_RESIDUAL``): fewer additions before
    the branch in the IR than Knuth's TwoSum (the flag off); the lanes where that
    difference need not be exact (``|r| < 2^-13``: near the multiples of pi/2 and 0) or
    ``|x|`` is above 1024 take the branch to TwoSum, and give the flag-off bits there;
    within 1.3 ulp of float64 tan elsewhere; vectorized (16 or 8 lanes) and serial the
    same bits (where the host runs the target)."""
    import tecomp as tc
    from tecomp.codegen.llvm import emit_math_f32

    lanes = 16 if variant == "avx512" else 8
    target = _MATH_TARGETS[variant]
    run = variant != "avx512" or tc.Target("llvm").has_feature("avx512f")
    edges = [k * np.pi / 2 for k in (0.5, 1, 2, 3, 7, 100, 651, 652)] + [1024.0, 3000.0]
    bits = [np.arange(0, 1 << 31, 4093, dtype=np.uint32)]
    for e in edges:
        b = int(np.float32(e).view(np.uint32))
        bits.append(np.arange(b - 4096, b + 4096, dtype=np.uint32))
    x = np.concatenate(bits).view(np.float32)
    x = np.concatenate([x, -x, np.float32([0.0, -0.0, 1e-45, -1e-45, np.inf, np.nan])])
    x = x[: x.size // lanes * lanes]

    def build(on, n):
        monkeypatch.setattr(emit_math_f32, "TAN_FMA_RESIDUAL", on)
        f, out = _unary_by_lanes(tc.tan, x, target, n, run)
        src = f.get_source("llvm-unopt")
        return src.split("tan.twosum:" if on else "tan.wide:")[0], out

    new_ir, new = build(True, lanes)
    _, serial = build(True, 1)
    old_ir, old = build(False, lanes)
    adds = lambda src: src.count(" fsub ") + src.count(" fadd ")   # noqa: E731
    assert adds(new_ir) <= adds(old_ir) - 5, (adds(new_ir), adds(old_ir))
    if not run:
        return
    np.testing.assert_array_equal(serial.view(np.uint32), new.view(np.uint32))
    with np.errstate(invalid="ignore"):
        x64 = x.astype(np.float64)
        r = x64 - np.round(x64 * (2 / np.pi)) * (np.pi / 2)
        branch = ~(np.abs(x) <= 1024) | (np.abs(r) < 2.0 ** -13 * 0.99)
        rest = ~branch & (np.abs(r) > 2.0 ** -13 * 1.01)
    np.testing.assert_array_equal(new[branch].view(np.uint32), old[branch].view(np.uint32))
    exact = np.tan(x64[rest])
    err = np.abs(new[rest] - exact) / np.spacing(np.abs(exact).astype(np.float32))
    assert err.max() <= 1.3, (x[rest][err.argmax()], err.max())
    assert (new != old).any()   # (the two forms differ by an ulp on some inputs)


def _scipy_special():
    import scipy.special   # (scipy comes with scikit-learn in [test])

    return scipy.special


#: the documented bounds (docs/numerics.md) every float32 input is held to by the long
#: test below, in ulp of the float64 result: (FMA variant, variant without FMA)
_EXHAUSTIVE_BOUNDS = {"exp": (1.05, 1.05), "log": (1.0, 1.0), "tanh": (2.0, 2.1),
                      "erf": (1.05, 2.4), **{fn: v[2] for fn, v in _MORE_F32.items()}}


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("TECOMP_LONG_TESTS", "") in ("", "0"),
                    reason="slow (all 2^32 float32 inputs per function): set TECOMP_LONG_TESTS=1")
@pytest.mark.parametrize("fn", sorted(_EXHAUSTIVE_BOUNDS))
def test_float32_math_on_every_input(fn, exp_variant, stride=1):
    """tecomp's float32 exp, log, tanh and erf on all 2^32 inputs (blocks of 2^24; every
    ``stride``-th block): within the documented bound of the float64 function on the
    finite results, NaN where it is NaN, and the infinities and zeros it gives."""
    import scipy.special

    ref = {"exp": np.exp, "log": np.log, "tanh": np.tanh, "erf": scipy.special.erf,
           **{name: v[0] for name, v in _MORE_F32.items()}}[fn]
    limit = _EXHAUSTIVE_BOUNDS[fn][0 if _has_fma(exp_variant) else 1]
    n = 1 << 24
    m = build_llvm(elementwise(f"{fn}_all", lambda v: op.call(fn, v), "float32",
                               kind="vectorized"), target=exp_variant)
    out = np.empty(n, np.float32)
    worst, where = 0.0, None
    for start in range(0, 1 << 32, n * stride):
        x = np.arange(start, start + n, dtype=np.uint64).astype(np.uint32).view(np.float32)
        m(x, out)
        with np.errstate(all="ignore"):
            exact = ref(x.astype(np.float64))
        rounded = exact.astype(np.float32)
        fin = np.isfinite(rounded) & np.isfinite(x)
        ulp = np.spacing(np.abs(rounded[fin])).astype(np.float64)
        err = np.abs(out[fin].astype(np.float64) - exact[fin]) / ulp
        if err.size and err.max() > worst:
            worst, where = float(err.max()), x[fin][err.argmax()]
        assert worst <= limit, (fn, where, worst)
        other = ~fin
        same = (np.isnan(out[other]) & np.isnan(rounded[other])) | (out[other] == rounded[other])
        assert same.all(), (fn, x[other][~same][:5], out[other][~same][:5])
    print(f"{fn} on {exp_variant}: {worst:.4f} ulp at most, x = {where!r} (the bound: "
          f"{limit})")


def _tanh_inputs():
    bits = [np.arange(0, 1 << 32, 509, dtype=np.uint64).astype(np.uint32)]
    # (edges: 2|x| at the reduction's steps n = 0/1 and 1/2, where the refinement of the
    # quotient stops (atanh(1/2)), where tanh rounds to 1, the clamp of |x| at 10)
    for edge in (0.17328680, -0.17328680, 0.5198604, 0.54930615, 0.625, 9.0, 9.011, 10.0, 0.0,
                 1e-30):
        b = int(np.float32(edge).view(np.uint32))
        bits.append(np.arange(max(b - (1 << 13), 0), b + (1 << 13), dtype=np.uint32))
    bits.append(np.arange(0, 1 << 13, dtype=np.uint32) | 0x80000000)  # -0 and tiny negatives
    return np.concatenate(bits).view(np.float32)


def test_tanh_float32_error_everywhere(exp_variant):
    """float32 tanh is vector code (no libm tanhf per lane), within the documented bound
    (docs/numerics.md: 1.91 ulp measured on every input with FMA, 2.04 without) of
    float64 tanh."""
    _check_float32_function("tanh", _tanh_inputs(), np.tanh,
                            2.0 if _has_fma(exp_variant) else 2.1,
                            [np.inf, -np.inf, 0.0, -0.0, 9.1, 44.5, 100.0, -1e30, 1e-40],
                            [1, -1, 0, -0.0, 1, 1, 1, -1, 1e-40], exp_variant, key="tanh")


# (the targets of one function one after the other: its float64 reference is computed once)
@pytest.mark.parametrize("exp_variant", list(_MATH_TARGETS.values()), ids=list(_MATH_TARGETS),
                         indirect=True)
@pytest.mark.parametrize("fn", sorted(_MORE_F32))
def test_more_float32_functions(fn, exp_variant):
    """exp2, expm1, log2, log1p, softplus, sin, cos ... fast_log on float32 are vector code
    (no libm call per lane, but sin/cos's branch for large arguments), the same bits vectorized
    and serial, within the documented bound of the float64 function on a dense sample of
    every float32 input, with their special values."""
    if (os.environ.get("TECOMP_LONG_TESTS", "") in ("", "0")
            and exp_variant == _MATH_TARGETS["no-fma"] and sorted(_MORE_F32).index(fn) % 2):
        pytest.skip("without FMA every other function by default: set TECOMP_LONG_TESTS=1")
    ref, edges, limits, special, want = _MORE_F32[fn]
    _check_float32_function(fn, _more_f32_inputs(fn), ref, limits[not _has_fma(exp_variant)],
                            special, want, exp_variant, key=fn)


#: more special inputs, with their float32 results, for the check at every vector width
#: (NaN: a NaN; None: a subnormal result within the bound, the same bits at every width)
_MORE_SPECIALS = {
    "cbrt": ([np.nan, -0.0, 1e-40, -1e-40, 3.4028235e38, -3.4028235e38, 2.0 ** -129,
              -2.0 ** -147, -1e-45, 2.0 ** 126, 2.0 ** -126],
             [np.nan, -0.0] + [np.float32(np.cbrt(np.float64(np.float32(v)))) for v in
                               (1e-40, -1e-40, 3.4028235e38, -3.4028235e38, 2.0 ** -129,
                                -2.0 ** -147, -1e-45)] + [2.0 ** 42, 2.0 ** -42]),
    "fast_erfc": ([np.nan, -0.0, 1e-40, -1e-40, 3.4028235e38, -3.4028235e38, 9.2, 9.5, 10.0,
                   10.05, 10.06, -9.0, -1e-30, 1e-45],
                  [np.nan, 1, 1, 1, 0, 2, None, None, None, None, 0, 2, 1, 1]),
    "erfc": ([np.nan, -0.0, 1e-40, -1e-40, 3.4028235e38, -3.4028235e38, 9.19, 9.2, 9.5, 10.0,
              10.05, 10.06, -9.0, -1e-30, 1e-45],
             [np.nan, 1, 1, 1, 0, 2, np.float32(1.2786762e-38), None, None, None, None, 0, 2,
              1, 1]),
    "expm1": ([np.nan, 1e-40, -1e-40, 3.4028235e38, -3.4028235e38, 88.72284, -30.1,
               2.0 ** -26, -(2.0 ** -26)],
              [np.nan, 1e-40, -1e-40, np.inf, -1, np.inf, -1, 2.0 ** -26, -(2.0 ** -26)]),
    "log1p": ([np.nan, 1e-40, -1e-40, 3.4028235e38, -3.4028235e38, 2.0 ** 125,
               np.float32(2.0 ** 125) * np.float32(1 - 2.0 ** -24), -1 + 2.0 ** -24, -1.0000001,
               1e-45, -1e-45],
              [np.nan, 1e-40, -1e-40, np.float32(np.log1p(3.4028235e38)), np.nan,
               np.float32(np.log1p(2.0 ** 125)),
               np.float32(np.log1p(np.float64(np.float32(2.0 ** 125) * np.float32(1 - 2.0 ** -24)))),
               np.float32(np.log1p(-1 + 2.0 ** -24)), np.nan, 1e-45, -1e-45]),
    "fast_log": ([1e-40, -1e-40, 3.4028235e38], [np.float32(np.log(np.float64(np.float32(1e-40)))),
                                                 np.nan, np.float32(np.log(3.4028235e38))]),
    "softplus": ([np.nan, -0.0, 1e-40, -1e-40, 3.4028235e38, -3.4028235e38, 88.8, -88.8,
                  -103.0, -110.0],
                 [np.nan, np.float32(np.log(2.0)), np.float32(np.log(2.0)),
                  np.float32(np.log(2.0)), 3.4028235e38, 0, 88.8, None, None, 0]),
}


@pytest.mark.parametrize("fn", sorted(_MORE_SPECIALS))
def test_float32_special_values_at_every_vector_width(fn, exp_variant):
    """The special values of ``fn`` (NaN, +-inf, +-0, subnormals, the largest floats, the
    edges of underflow) vectorized by 4, 8, 16 and 64 lanes (xmm, ymm, zmm, four zmm:
    where the target has them, else pieces of its widest) and serial, on each variant:
    the results of ``_MORE_F32`` and ``_MORE_SPECIALS``, the same bits at every width."""
    import tecomp as tc

    _, _, _, special, want = _MORE_F32[fn]
    special = list(special) + _MORE_SPECIALS[fn][0]
    want = list(want) + _MORE_SPECIALS[fn][1]
    n = 64 * len(special)      # every input in every lane of a 64-lane vector
    pick = [(i + i // 64) % len(special) for i in range(n)]
    x = np.array([special[k] for k in pick], np.float32)
    known = np.array([want[k] is not None for k in pick])
    expect = np.array([np.nan if want[k] is None else want[k] for k in pick], np.float32)
    A = tc.placeholder((n,), name="A")
    first = None
    for lanes in (1, 4, 8, 16, 64):
        B = tc.compute((n,), lambda i: getattr(tc, fn)(A[i]), name="B")
        s = tc.create_schedule(B.op)
        if lanes > 1:
            s[B].vectorize(s[B].split(B.op.axis[0], factor=lanes)[1])
        out = np.zeros(n, np.float32)
        tc.build(s, [A, B], target=exp_variant)(x, out)
        np.testing.assert_array_equal(out[known], expect[known], f"{fn}, {lanes} lanes")
        num = known & ~np.isnan(expect)      # (a NaN's sign is not specified)
        np.testing.assert_array_equal(np.signbit(out[num]), np.signbit(expect[num]))
        first = out if first is None else first
        np.testing.assert_array_equal(out[~known].view(np.uint32),
                                      first[~known].view(np.uint32), f"{fn}, {lanes} lanes")
        assert (out[~known] > 0).all() and (out[~known] < 1.2e-38).all()


@pytest.mark.parametrize("fn", ["exp2", "expm1", "log2", "log1p", "softplus", "sin", "cos",
                                "tan", "atan", "cbrt", "erfc", "fast_erfc", "fast_log"])
def test_more_math_functions_float64_and_gradients(fn):
    """On float64 the same functions are libm's (per lane) and agree with numpy; their
    gradients through tc.gradient match finite differences of numpy's."""
    import tecomp as tc

    n = 64
    A = tc.placeholder((n,), name="A", dtype="float64")
    B = tc.compute((n,), lambda i: getattr(tc, fn)(A[i]), name="B")
    s = tc.create_schedule(B.op)
    s[B].vectorize(s[B].split(B.op.axis[0], factor=8)[1])
    f = tc.build(s, [A, B])
    ref = _MORE_F32[fn][0]
    lo, hi = (-1.4, 1.4) if fn == "tan" else (-3.0, 3.0) if fn in ("atan", "erfc", "fast_erfc") else (0.1, 3.0)
    x = np.random.default_rng(1).uniform(lo, hi, n)
    out = np.zeros(n)
    f(x, out)
    np.testing.assert_allclose(out, ref(x), rtol=1e-14)
    from tecomp.autodiff.gradcheck import gradcheck

    assert gradcheck(B, [A], {A: x})


def _dense_pairs(count=2039):
    """(x, y) over a grid of ``count`` float32s spread over every bit pattern (both signs,
    from subnormals to the largest) plus the values where atan2 and pow have special
    cases, crossed with themselves: about 4.4 million pairs for 2039; and a million random
    pairs where ``pow`` is finite and not trivial (``|x|`` in ``[2^-40, 2^40]``, ``y`` in
    ``[-3, 3]`` or integral in ``[-40, 40]``)."""
    v = np.arange(0, 1 << 32, (1 << 32) // count, dtype=np.uint64).astype(np.uint32)
    v = v.view(np.float32)
    sp = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 3.0, -3.0,
          1e-45, -1e-45, 1.1754944e-38, _F32MAX, -_F32MAX, 1 / 3, 16777216.0, 16777217.0,
          -16777218.0, 127.5, -149.0, 0.99999994, 1.0000001, 10.0, -10.0, 1e-30, 1e30]
    x = np.concatenate([v, np.array(sp, np.float32)])
    X, Y = np.meshgrid(x, x)
    rng = np.random.default_rng(7)
    n = 1 << 20
    rx = np.exp2(rng.uniform(-40, 40, n)) * rng.choice([1.0, 1.0, 1.0, -1.0], n)
    ry = np.where(rng.random(n) < 0.3, np.round(rng.uniform(-40, 40, n)), rng.uniform(-3, 3, n))
    return (np.concatenate([X.ravel(), rx.astype(np.float32)]),
            np.concatenate([Y.ravel(), ry.astype(np.float32)]))


#: the float32 functions of two arguments: (float64 reference, bound in ulp with and
#: without FMA (docs/numerics.md)); atan2, and pow without FMA, computed in float64 lanes
#: and rounded once; pow with FMA (and a table instruction: AVX2, AVX-512) in float32
#: lanes
_F32_BINARY = {"atan2": (np.arctan2, (0.51, 0.51)), "pow": (np.power, (0.8, 0.51))}


def _pow_hard_pairs(n=1 << 19):
    """Pairs where ``pow(x, y)``'s exponent ``w = y log2|x|`` is large, so that the
    error of ``log2|x|`` is magnified by ``|w|``: ``x`` within 5% of 1 and ``|w|`` up to
    120 (``|y|`` up to about 10^9), and ``x`` over the whole range with ``w`` in
    ``[-150, 128]`` (results down to the subnormals and up to the largest floats)."""
    rng = np.random.default_rng(11)
    x1 = (1 + rng.uniform(-0.05, 0.05, n)).astype(np.float32)
    l1 = np.maximum(np.abs(np.log2(x1.astype(np.float64))), 1e-9)
    y1 = (rng.uniform(-1, 1, n) * 120 / l1).astype(np.float32)
    x2 = np.exp2(rng.uniform(-149, 128, n)).astype(np.float32)
    y2 = (rng.uniform(-150, 128, n) / np.log2(x2.astype(np.float64))).astype(np.float32)
    return np.concatenate([x1, x2]), np.concatenate([y1, y2])


@functools.lru_cache(maxsize=1)
def _two_arguments_reference(fn, count):
    """The inputs of the test below and what it needs of float64 ``fn`` on them (none of
    it depends on the target: kept for the function's next target)."""
    x, y = _dense_pairs(count)
    if fn == "pow":
        x, y = (np.concatenate(v) for v in zip((x, y), _pow_hard_pairs()))
    with np.errstate(all="ignore"):
        exact = _F32_BINARY[fn][0](x.astype(np.float64), y.astype(np.float64))
        rounded = exact.astype(np.float32)
    fin = np.isfinite(rounded)
    with np.errstate(over="ignore"):   # (the largest float32's ulp: 2^104)
        ulp = np.spacing(np.abs(rounded[fin])).astype(np.float64)
    ulp[np.isinf(ulp)] = 2.0 ** 104
    nan = np.isnan(rounded)
    exactly = ~nan & ((rounded == 0) | np.isinf(rounded))   # zeros and infinities: bits
    for a in (x, y):
        a.flags.writeable = False
    return x, y, fin, exact[fin], ulp, nan, exactly, rounded[exactly].view(np.uint32)


# (the targets of one function one after the other: its float64 reference is computed once)
@pytest.mark.parametrize("exp_variant", list(_MATH_TARGETS.values()), ids=list(_MATH_TARGETS),
                         indirect=True)
@pytest.mark.parametrize("fn", sorted(_F32_BINARY))
def test_float32_functions_of_two_arguments(fn, exp_variant, count=2039):
    """atan2(y, x) and pow(x, y) on float32 are vector code (no libm call per lane), the
    same bits vectorized and serial, within the documented bound of the float64 function
    on a dense 2-d sample, and equal to its rounding (signed zeros, infinities, NaN) at
    every special value C99 defines (``atan2(+-0, -0) = +-pi``, ``pow(-0, -1) = -inf``,
    ``pow(nan, 0) = 1``, ``pow(-8, 1/3)`` NaN, ...)."""
    x, y, fin, exact, ulp, nan, exactly, want = _two_arguments_reference(fn, count)
    limits = _F32_BINARY[fn][1]
    outs = []
    for kind in ("vectorized", "serial"):
        m = build_llvm(binary(f"{fn}_{kind}", lambda a, c: op.call(fn, a, c), "float32",
                              kind=kind), target=exp_variant)
        out = np.zeros(x.size, np.float32)
        m(x, y, out)
        outs.append(out)
        if kind == "vectorized":
            src = m.get_source("llvm-unopt")
            assert "@powf(" not in src and "@atan2f(" not in src and "llvm.pow" not in src
    if not np.array_equal(outs[0].view(np.uint32), outs[1].view(np.uint32)):
        np.testing.assert_array_equal(outs[0].view(np.uint32), outs[1].view(np.uint32))
    got = outs[0]
    err = np.abs(got[fin].astype(np.float64) - exact) / ulp
    i = err.argmax()
    assert err[i] <= limits[not _has_fma(exp_variant)], (x[fin][i], y[fin][i], err[i])
    assert np.isnan(got[nan]).all(), (x[nan][~np.isnan(got[nan])][:5],
                                      y[nan][~np.isnan(got[nan])][:5])
    np.testing.assert_array_equal(got[exactly].view(np.uint32), want)


def test_pow_float32_at_every_vector_width(exp_variant):
    """pow(x, y) on float32 vectorized by 4, 8, 16 and 64 lanes and serial gives the same
    bits, on vectors that mix the special values (which take a branch in the float32-lane
    code) with ordinary pairs in every lane, and each special value is numpy's float64
    result rounded (signed zeros, infinities, NaN)."""
    _two_arguments_at_every_vector_width("pow", exp_variant)


def test_pow_float32_at_the_edges_of_its_tables(exp_variant):
    """pow(x, y) where ``x`` lies on an edge of a piece of pow's logarithm tables (the 32
    pieces of ``emit_math_f32.POW_TABLE32`` with AVX-512, the 16 of ``POW_LN16`` with
    AVX2, the 16 of the base-2 plan: every set of edges, one ulp either side, times 2^e) and ``|y|`` makes ``|w| = |y ln x|`` large
    (up to 88: the error of the logarithm magnified most, and ``w``'s low part at its
    largest): within the documented bound of numpy's float64 result, vectorized and
    serial the same bits; and with AVX-512 the code reads its tables with the 32-entry
    table instruction (``vpermt2ps`` or ``vpermi2ps``), five a vector."""
    import struct

    import tecomp as tc

    edges = [0x3F320000 + i * (1 << 18) for i in range(33)] + \
        [0x3F330000 + i * (1 << 19) for i in range(17)] + \
        [0x3F340000 + i * (1 << 19) for i in range(17)]
    z = np.array([struct.unpack("<f", struct.pack("<I", b + d))[0]
                  for b in edges for d in (-1, 0, 1)], np.float64)
    x = np.concatenate([z * 2.0 ** e for e in (0, -1, 1, 7, -20)]).astype(np.float32)
    ln = np.log(x.astype(np.float64))
    ln[ln == 0] = 1.0
    w = np.array([-88.0, -60.0, -1.0, 1.0, 60.0, 88.0])
    x = np.repeat(x, w.size)
    y = (np.tile(w, x.size // w.size) / np.repeat(ln, w.size)).astype(np.float32)
    n = x.size
    A = tc.placeholder((n,), name="A")
    E = tc.placeholder((n,), name="E")
    outs = []
    for lanes in (1, 16):
        B = tc.compute((n,), lambda i: tc.pow(A[i], E[i]), name="B")
        s = tc.create_schedule(B.op)
        if lanes > 1:
            s[B].vectorize(s[B].split(B.op.axis[0], factor=lanes)[1])
        f = tc.build(s, [A, E, B], target=exp_variant)
        out = np.zeros(n, np.float32)
        f(x, y, out)
        outs.append(out)
        if lanes == 16 and exp_variant == _MATH_TARGETS["avx512"]:
            asm = f.get_source("asm")
            assert len(re.findall(r"vperm[it]2ps", asm)) >= 5
    np.testing.assert_array_equal(outs[0].view(np.uint32), outs[1].view(np.uint32))
    exact = np.power(x.astype(np.float64), y.astype(np.float64))
    ulp = np.spacing(np.abs(exact.astype(np.float32))).astype(np.float64)
    err = np.abs(outs[0] - exact) / ulp
    i = err.argmax()
    assert err[i] <= _F32_BINARY["pow"][1][not _has_fma(exp_variant)], (x[i], y[i], err[i])


def test_atan2_float32_at_every_vector_width(exp_variant):
    """The same for atan2(y, x), whose rare lanes (both operands 0 or infinite, the larger
    below 2^-124) take a branch (``emit_math_wide.ATAN2_NARROW``): every quadrant, signed
    zeros, and operands around 2^-124 mixed with ordinary pairs in every lane."""
    _two_arguments_at_every_vector_width("atan2", exp_variant)


def _two_arguments_at_every_vector_width(fn, exp_variant):
    import tecomp as tc

    sp = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5,
          3.0, -3.0, 1e-45, -1e-45, 1.1754942e-38, 1.1754944e-38, _F32MAX,
          -_F32MAX, 1 / 3, 16777217.0, 127.5, -149.0, 0.99999994, 1.0000001,
          200.0, -200.0]
    if fn == "atan2":       # around the float32 steps' limit, 2^-124, and tan(pi/8)
        sp += [2.0 ** -124, -(2.0 ** -124), 2.0 ** -124 * 0.99999994, 2.0 ** -125,
               2.0 ** -124 * 0.41421357, 0.41421357, 0.41421354, 2.8e-45]
    sp = np.array(sp, np.float32)
    sx, sy = (v.ravel() for v in np.meshgrid(sp, sp))
    rng = np.random.default_rng(5)
    m = sx.size
    ox = rng.uniform(0.1, 10.0, m).astype(np.float32)
    if fn == "atan2":
        ox *= rng.choice(np.array([1.0, -1.0], np.float32), m)
    oy = rng.uniform(-8.0, 8.0, m).astype(np.float32)
    # special pairs and ordinary ones interleaved at changing distances
    x = np.empty(2 * m, np.float32)
    y = np.empty(2 * m, np.float32)
    order = rng.permutation(2 * m)
    x[order] = np.concatenate([sx, ox])
    y[order] = np.concatenate([sy, oy])
    n = x.size
    A = tc.placeholder((n,), name="A")
    E = tc.placeholder((n,), name="E")
    with np.errstate(all="ignore"):
        exact = _F32_BINARY[fn][0](x.astype(np.float64), y.astype(np.float64))
        want = exact.astype(np.float32)
    first = None
    for lanes in (1, 4, 8, 16, 64):
        B = tc.compute((n,), lambda i: getattr(tc, fn)(A[i], E[i]), name="B")
        s = tc.create_schedule(B.op)
        if lanes > 1:
            s[B].vectorize(s[B].split(B.op.axis[0], factor=lanes)[1])
        out = np.zeros(n, np.float32)
        tc.build(s, [A, E, B], target=exp_variant)(x, y, out)
        first = out if first is None else first
        np.testing.assert_array_equal(out.view(np.uint32), first.view(np.uint32),
                                      f"{lanes} lanes")
    nan = np.isnan(want)
    assert np.isnan(first[nan]).all()
    exactly = ~nan & ((want == 0) | np.isinf(want) | (np.abs(want) == 1))
    np.testing.assert_array_equal(first[exactly].view(np.uint32), want[exactly].view(np.uint32))
    fin = ~nan & np.isfinite(want)
    with np.errstate(over="ignore"):   # (the largest float32's ulp: 2^104)
        ulp = np.spacing(np.abs(want[fin])).astype(np.float64)
    ulp[np.isinf(ulp)] = 2.0 ** 104
    err = np.abs(first[fin].astype(np.float64) - exact[fin]) / ulp
    assert err.max() <= _F32_BINARY[fn][1][not _has_fma(exp_variant)], err.max()


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("TECOMP_LONG_TESTS", "") in ("", "0"),
                    reason="slow (a 4093 x 4093 grid per function): set TECOMP_LONG_TESTS=1")
@pytest.mark.parametrize("fn", sorted(_F32_BINARY))
def test_float32_functions_of_two_arguments_long(fn, exp_variant):
    """The same on a grid 4 times denser in each argument (16.8 million pairs)."""
    test_float32_functions_of_two_arguments(fn, exp_variant, count=4093)


@pytest.mark.parametrize("fn", sorted(_F32_BINARY))
def test_functions_of_two_arguments_float64_and_gradients(fn):
    """atan2 and pow on float64 (libm's, per lane) agree with numpy, and their gradients
    in both arguments match finite differences."""
    import tecomp as tc
    from tecomp.autodiff.gradcheck import gradcheck

    n = 64
    A = tc.placeholder((n,), name="A", dtype="float64")
    C = tc.placeholder((n,), name="C", dtype="float64")
    B = tc.compute((n,), lambda i: getattr(tc, fn)(A[i], C[i]), name="B")
    s = tc.create_schedule(B.op)
    s[B].vectorize(s[B].split(B.op.axis[0], factor=8)[1])
    f = tc.build(s, [A, C, B])
    rng = np.random.default_rng(2)
    a = rng.uniform(0.2, 3.0, n) * (rng.choice([-1, 1], n) if fn == "atan2" else 1)
    c = rng.uniform(-3.0, 3.0, n)
    out = np.zeros(n)
    f(a, c, out)
    np.testing.assert_allclose(out, _F32_BINARY[fn][0](a, c), rtol=1e-14)
    assert gradcheck(B, [A, C], {A: a, C: c})


@pytest.mark.parametrize("fn, instrs", [("exp", {"vscalefps"}), ("erf", {"vpermps"}),
                                         ("log", {"vgetmantps", "vgetexpps"})])
def test_avx512_math_instructions(fn, instrs, monkeypatch):
    """With AVX-512, exp's ``p * 2**n`` is one ``vscalefps`` and log's significand and
    exponent one ``vgetmantps`` and one ``vgetexpps`` (no integer exponent arithmetic),
    for zmm vectors and, with AVX-512VL, ymm ones, and erf's coefficients one
    ``vpermps`` each (zmm: an 8-lane vector padded to 16), with neither an exponential
    nor a division (checked in the assembly, on any CPU); where this CPU has AVX-512,
    they give the same bits as the code without them (AVX2's two ``vpermps`` and a blend
    for erf; for log, its polynomial: ``emit_math.LOG_TABLE`` off, the table of 16 being
    AVX-512's alone) on a dense sample of every float32 input (every 509th bit pattern
    and the edges)."""
    import re

    import tecomp as tc
    from tecomp.codegen.llvm import emit_math

    if fn == "log":
        monkeypatch.setattr(emit_math, "LOG_TABLE", False)

    for lanes, reg in ((16, "zmm"), (8, "ymm")):
        A = tc.placeholder((1024,), name="A")
        B = tc.compute((1024,), lambda i: getattr(tc, fn)(A[i]), name="B")
        s = tc.create_schedule(B.op)
        s[B].vectorize(s[B].split(B.op.axis[0], factor=lanes)[1])
        asm = tc.build(s, [A, B], target=_MATH_TARGETS["avx512"]).get_source("asm")
        for ins in instrs:
            assert re.search(rf"{ins}\s[^\n]*%{'zmm' if fn == 'erf' else reg}", asm), (ins, reg)
        if fn == "exp":
            assert "vpslld" not in asm      # no 2**n from exponent bits
        if fn == "erf":
            assert not re.search(r"vscalefps|vdivps|vrcp", asm)
    if not tc.Target("llvm").has_feature("avx512f"):
        return
    x = np.concatenate([_tanh_inputs(), _erf_inputs()])
    outs = []
    for target in (_MATH_TARGETS["avx512"], _MATH_TARGETS["fma"]):
        out = np.zeros(x.size, np.float32)
        build_llvm(elementwise(f"{fn}_cmp", lambda v: op.call(fn, v), "float32"),
                   target=target)(x, out)
        outs.append(out)
    same = (outs[0].view(np.uint32) == outs[1].view(np.uint32)) | (
        np.isnan(outs[0]) & np.isnan(outs[1]))
    assert same.all(), x[~same][:5]


@pytest.mark.parametrize("fn", ["sin", "cos"])
def test_sin_cos_by_pi_and_the_switches_off(fn, monkeypatch):
    """With FMA, float32 sin and cos reduce by pi and evaluate one polynomial (no
    float-to-int conversion, no second polynomial); with ``SINCOS_BY_PI`` and
    ``QUADRANT_MAGIC`` off, the form by pi/2 (``vrndscaleps`` or ``vroundps``, a
    conversion): both within the documented bound (2.0 ulp) on the dense sample."""
    from tecomp.codegen.llvm import emit_math

    target = _MATH_TARGETS["fma"]
    ref, edges, limits, special, want = _MORE_F32[fn]
    for on in (True, False):
        monkeypatch.setattr(emit_math, "SINCOS_BY_PI", on)
        monkeypatch.setattr(emit_math, "QUADRANT_MAGIC", on)
        m = build_llvm(elementwise(f"{fn}_{on}", lambda v: op.call(fn, v), "float32",
                                   kind="vectorized"), target=target)
        asm = m.get_source("asm")
        assert ("vcvttps2dq" in asm) != on and bool(re.search(r"vround|vrndscale", asm)) != on
        _check_float32_function(fn, _more_f32_inputs(fn), ref, limits[0], special, want,
                                target, key=fn)


def test_erfc_float32_segments_where_a_table_instruction_is(monkeypatch):
    """float32 erfc (and fast_erfc, without the compensations: fewer instructions) is one
    polynomial per segment in float32 lanes, its coefficients read with ``vpermps``, where
    the CPU has FMA and a table instruction (AVX2, AVX-512): no float64 and no division;
    the same bits with AVX-512 (one
    ``vpermps`` and ``vscalefps``) and with AVX2 (two ``vpermps`` and a blend, the scale
    from exponent bits) on a dense sample.  Without AVX2 (Haswell's FMA only) erfc is
    computed in float64 lanes and fast_erfc in its float32 form without tables, as with
    ``ERFC_SEGMENTS`` off (the A/B switch)."""
    import tecomp as tc
    from tecomp.codegen.llvm import emit_math_f32

    def asm_of(fn, target, lanes=16):
        A = tc.placeholder((1024,), name="A")
        B = tc.compute((1024,), lambda i: getattr(tc, fn)(A[i]), name="B")
        s = tc.create_schedule(B.op)
        s[B].vectorize(s[B].split(B.op.axis[0], factor=lanes)[1])
        return tc.build(s, [A, B], target=target).get_source("asm")

    for fn in ("erfc", "fast_erfc"):
        for target in (_MATH_TARGETS["avx512"], _MATH_TARGETS["fma"]):
            asm = asm_of(fn, target)
            assert "vpermps" in asm and not re.search(r"pd\s|vdivps|vrcp", asm), (fn, target)
        assert "vscalefps" in asm_of(fn, _MATH_TARGETS["avx512"])
        no_table = asm_of(fn, "llvm -mcpu=haswell -mattr=-avx2", lanes=8)
        assert "vpermps" not in no_table
        assert ("vcvtps2pd" in no_table) == (fn == "erfc"), fn
    perms = [asm_of(fn, _MATH_TARGETS["avx512"]).count("vpermps") for fn in ("erfc", "fast_erfc")]
    assert perms[0] == perms[1] + 1, perms      # (fast_erfc: no low part of 2^(j/16))
    # fast_erfc's own form (FMA, no table): its documented bound, 2.3 ulp
    ref, edges, _, special, want = _MORE_F32["fast_erfc"]
    _check_float32_function("fast_erfc", _dense_inputs(*edges), ref, 2.3, special, want,
                            "llvm -mcpu=haswell -mattr=-avx2")
    monkeypatch.setattr(emit_math_f32, "ERFC_SEGMENTS", False)
    off = asm_of("erfc", _MATH_TARGETS["avx512"])
    assert "vpermps" not in off and "vcvtps2pd" in off
    assert "vpermps" not in asm_of("fast_erfc", _MATH_TARGETS["avx512"])
    monkeypatch.setattr(emit_math_f32, "ERFC_SEGMENTS", True)
    if not tc.Target("llvm").has_feature("avx512f"):
        return
    x = _dense_inputs(0.328125, 0.984375, 9.84375, 10.05, -0.5, 9.2)
    for fn in ("erfc", "fast_erfc"):
        outs = []
        for target in (_MATH_TARGETS["avx512"], _MATH_TARGETS["fma"]):
            out = np.zeros(x.size, np.float32)
            build_llvm(elementwise(f"{fn}_cmp", lambda v: op.call(fn, v), "float32",
                                   kind="vectorized"), target=target)(x, out)
            outs.append(out)
        same = (outs[0].view(np.uint32) == outs[1].view(np.uint32)) | (
            np.isnan(outs[0]) & np.isnan(outs[1]))
        assert same.all(), (fn, x[~same][:5])


def _unary_by_lanes(fn, x, target, lanes, run=True):
    """``fn`` (a ``tc`` function) over float32 ``x``, vectorized by ``lanes`` (1:
    serial), built for ``target``: the module and its output on ``x`` (zeros where
    ``run`` is false: the host cannot run the target)."""
    import tecomp as tc

    A = tc.placeholder((x.size,), name="A")
    B = tc.compute((x.size,), lambda i: fn(A[i]), name="B")
    s = tc.create_schedule(B.op)
    if lanes > 1:
        s[B].vectorize(s[B].split(B.op.axis[0], factor=lanes)[1])
    f = tc.build(s, [A, B], target=target)
    out = np.zeros(x.size, np.float32)
    if run:
        f(x, out)
    return f, out


@pytest.mark.parametrize("variant", ["avx512", "fma"])
def test_cbrt_exponent_by_getexp_and_scalef(variant, monkeypatch):
    """float32 cbrt's common lanes take the exponent with one ``vgetexpps`` and scale by
    ``2^(-3k)`` and ``2^k`` with one ``vscalefps`` each where the target has AVX-512
    (``emit_math_f32.CBRT_SCALEF``; AVX2: ``k`` from the biased exponent, its bias in the
    addend of ``e/3``), and give the same bits as the exponent's bits and integer
    additions (``CBRT_SCALEF`` off), vectorized and serial, correctly rounded (numpy's
    float64 cbrt rounded) on the dense sample of every float32 input; the edges: where
    ``k = floor(e/3)`` steps, normal and subnormal, both signs."""
    import tecomp as tc
    from tecomp.codegen.llvm import emit_math_f32

    target = _MATH_TARGETS[variant]
    runs = variant == "fma" or tc.Target("llvm").has_feature("avx512f")
    edges = [2.0 ** e for e in range(-149, 128)]
    x = _dense_inputs(*_MORE_F32["cbrt"][1], *edges[::7], *edges[1::7], *edges[2::7])
    x = np.concatenate([x, -x])
    x = x[: x.size // 16 * 16]

    def build(lanes):
        f, out = _unary_by_lanes(tc.cbrt, x, target, lanes, runs)
        return f.get_source("asm"), out

    asm, new = build(16)
    _, serial = build(1)
    monkeypatch.setattr(emit_math_f32, "CBRT_SCALEF", False)
    asm_old, old = build(16)
    if variant == "avx512":
        assert len(re.findall(r"vscalefps\s[^\n]*%zmm", asm)) == 2
        assert len(re.findall(r"vgetexpps\s[^\n]*%zmm", asm)) == 1
    assert not re.search(r"vscalefps|vgetexpps", asm_old) and asm != asm_old
    if not runs:
        return
    np.testing.assert_array_equal(new.view(np.uint32), old.view(np.uint32))
    np.testing.assert_array_equal(serial.view(np.uint32), new.view(np.uint32))
    with np.errstate(all="ignore"):
        want = np.cbrt(x.astype(np.float64)).astype(np.float32)
    nan = np.isnan(want)
    assert np.isnan(new[nan]).all()
    np.testing.assert_array_equal(new[~nan].view(np.uint32), want[~nan].view(np.uint32))


def test_expm1_rare_lanes_in_a_branch(monkeypatch):
    """float32 expm1 leaves ``x > 64`` and NaN to a branch (``expm1.rare``, once per
    vector that has such a lane: ``emit_math.EXPM1_BRANCH``) and gives the same bits as
    with every case selected on every lane (the flag off), vectorized by 16 and 8 and
    serial, AVX-512 and AVX2, on the dense sample of every float32 input with the edges
    64, 88.72 and -30 (where the host runs the target)."""
    import tecomp as tc
    from tecomp.codegen.llvm import emit_math

    x = _dense_inputs(64.0, 88.72283, -30.0, 2.0 ** -25, -(2.0 ** -25), 1.0)
    x = x[: x.size // 16 * 16]
    avx512 = tc.Target("llvm").has_feature("avx512f")

    def run(target, lanes):
        f, out = _unary_by_lanes(tc.expm1, x, target, lanes, avx512 or "avx512" not in target)
        return f.get_source("llvm-unopt"), out

    for target, lanes in ((_MATH_TARGETS["avx512"], 16), (_MATH_TARGETS["fma"], 8)):
        monkeypatch.setattr(emit_math, "EXPM1_BRANCH", True)
        ir_new, new = run(target, lanes)
        _, serial = run(target, 1)
        monkeypatch.setattr(emit_math, "EXPM1_BRANCH", False)
        ir_old, old = run(target, lanes)
        assert "expm1.rare" in ir_new and "expm1.rare" not in ir_old
        np.testing.assert_array_equal(new.view(np.uint32), old.view(np.uint32), target)
        np.testing.assert_array_equal(serial.view(np.uint32), new.view(np.uint32), target)


def test_expm1_one_fma_and_the_sign_of_x(monkeypatch):
    """float32 expm1's common lanes take ``2^n u + (2^n - 1)`` as one FMA and ``x``'s sign
    by one or in place of the select of ``x`` where ``|x| < 2^-25``
    (``emit_math.EXPM1_FMA_SIGN``): one select and one scaling fewer in the IR, and the same
    bits as the flag off, vectorized by 16 and 8 and serial, AVX-512 and AVX2 (and without
    FMA), on the dense sample with the edges 2^-25, 0, 64 and -30 (where the host runs the
    target); ``+-0`` and tiny ``x`` give ``x``."""
    import tecomp as tc
    from tecomp.codegen.llvm import emit_math

    x = _dense_inputs(2.0 ** -25, -(2.0 ** -25), 2.0 ** -24, -(2.0 ** -24), 64.0, -30.0, 0.3)
    x = np.concatenate([x, np.float32([0.0, -0.0, 1e-45, -1e-45, -1e-30])])
    x = x[: x.size // 16 * 16]
    avx512 = tc.Target("llvm").has_feature("avx512f")

    def run(target, lanes):
        f, out = _unary_by_lanes(tc.expm1, x, target, lanes, avx512 or "avx512" not in target)
        ir_ = f.get_source("llvm-unopt")
        return ir_.count(" select "), ir_.count("scalef") + ir_.count("shl <"), out

    for target, lanes in ((_MATH_TARGETS["avx512"], 16), (_MATH_TARGETS["fma"], 8),
                          (_MATH_TARGETS["no-fma"], 8)):
        monkeypatch.setattr(emit_math, "EXPM1_FMA_SIGN", True)
        sel_new, scale_new, new = run(target, lanes)
        _, _, serial = run(target, 1)
        monkeypatch.setattr(emit_math, "EXPM1_FMA_SIGN", False)
        sel_old, scale_old, old = run(target, lanes)
        assert sel_new == sel_old - 1 and scale_new < scale_old, (target, sel_new, sel_old)
        np.testing.assert_array_equal(new.view(np.uint32), old.view(np.uint32), target)
        np.testing.assert_array_equal(serial.view(np.uint32), new.view(np.uint32), target)
        if avx512 or "avx512" not in target:
            tiny = np.abs(x) < 2.0 ** -25
            np.testing.assert_array_equal(new[tiny].view(np.uint32), x[tiny].view(np.uint32))


def test_exp_of_minus_x_folds_the_negation(monkeypatch):
    """``sigmoid`` and silu take ``exp(-x)`` with the negation folded into the reduction
    (``emit_math.EXP_NEG_FOLDED``): one ``vxorps`` fewer in the AVX-512 code (checked in
    the assembly, on any CPU; AVX2's had folded it already), and the same bits as ``exp`` of the negated ``x`` (the flag
    off) on the dense sample, vectorized and serial (where the host runs the target)."""
    import tecomp as tc
    from tecomp.codegen.llvm import emit_math

    x = _exp_inputs()
    x = x[np.isfinite(x)][: 1 << 20]
    x = np.concatenate([x, np.float32([89.0, -89.0, 104.0, -104.0, 105.0, -105.0, 0.0, -0.0])])
    x = x[: x.size // 16 * 16]
    avx512 = tc.Target("llvm").has_feature("avx512f")
    silu = lambda v: v * tc.sigmoid(v)   # noqa: E731
    for target, lanes in ((_MATH_TARGETS["avx512"], 16), (_MATH_TARGETS["fma"], 8),
                          (_MATH_TARGETS["no-fma"], 8)):
        for fn in (tc.sigmoid, silu):
            outs, xors = {}, {}
            for folded in (True, False):
                monkeypatch.setattr(emit_math, "EXP_NEG_FOLDED", folded)
                f, outs[folded] = _unary_by_lanes(fn, x, target, lanes,
                                                  avx512 or "avx512" not in target)
                xors[folded] = f.get_source("asm").count("vxorps")
            assert xors[True] < xors[False] or lanes != 16, (target, xors)
            np.testing.assert_array_equal(outs[True].view(np.uint32), outs[False].view(np.uint32))
            monkeypatch.setattr(emit_math, "EXP_NEG_FOLDED", True)
            _, serial = _unary_by_lanes(fn, x, target, 1, avx512 or "avx512" not in target)
            np.testing.assert_array_equal(serial.view(np.uint32), outs[True].view(np.uint32))


def test_exp_degree6_polynomial_with_fma(monkeypatch, exp_variant):
    """With FMA float32 exp evaluates ``exp(r) = 1 + r (1 + r P(r))`` with a degree-4 ``P``
    (``emit_math.EXP_SHORT_POLY``): as many FMAs as Cephes' degree-5 ``P`` as ``1 + (r (r
    P(r)) + r)``, one multiply and one addition fewer, and within 0.9 ulp of the exact exp on the
    dense sample (measured 0.88 on every input), where the old form is above 0.9 (0.99);
    without FMA the old form stays (the same IR either way)."""
    from tecomp.codegen.llvm import emit_math

    x = _exp_inputs()
    x = x[np.isfinite(x) & (x > -87.3) & (x < 88.7)]   # normal results
    exact = np.exp(x.astype(np.float64))

    def run():
        m = build_llvm(elementwise("e_deg6", lambda v: op.call("exp", v), "float32",
                                   kind="vectorized"), target=exp_variant)
        out = np.zeros(x.size, np.float32)
        m(x, out)
        ulp = np.spacing(exact.astype(np.float32)).astype(np.float64)
        ir_ = m.get_source("llvm-unopt")
        return (ir_.count("call <") + ir_.count(" fmul ") + ir_.count(" fadd "),
                (np.abs(out - exact) / ulp).max())

    ops_new, err_new = run()
    monkeypatch.setattr(emit_math, "EXP_SHORT_POLY", False)
    ops_old, err_old = run()
    if not _has_fma(exp_variant):
        assert ops_new == ops_old and err_new == err_old
        return
    assert ops_new < ops_old, (ops_new, ops_old)
    assert err_new < 0.9 < err_old, (err_new, err_old)
    print(f"exp {exp_variant}: {err_new:.4f} ulp (old form {err_old:.4f})")


def test_softplus_direct_segments_with_avx512(monkeypatch):
    """With AVX-512, float32 softplus reads its 32-segment polynomial's seven coefficients
    (``C`` in two float32 parts, the slope in one: ``emit_math.SOFTPLUS_SHORT_SEGMENTS``)
    with one ``vpermi2ps``/``vpermt2ps`` each (zmm; an 8-lane vector padded to 16) and
    takes ``exp`` only in the branch of the lanes below -15.5 (the IR's
    ``softplus.tail``); with ``SOFTPLUS_SHORT_SEGMENTS`` off it reads eight (the slope in
    two parts too, session 20's form); with ``emit_math.SOFTPLUS_DIRECT`` off it is session 19's ``exp``
    and ``log1p`` (16 entries a table: ``vpermps``, no branch) (checked in the assembly,
    on any CPU). Where this CPU has AVX-512, each pair agrees within softplus's bound on
    the dense sample of every float32 input (each is held to the bound alone by
    test_more_float32_functions), and the AVX-512 form is within 1.35 ulp (measured:
    1.30 on every input)."""
    import re

    import tecomp as tc
    from tecomp.codegen.llvm import emit_math

    def build(lanes, n=1024):
        A = tc.placeholder((n,), name="A")
        B = tc.compute((n,), lambda i: tc.softplus(A[i]), name="B")
        s = tc.create_schedule(B.op)
        s[B].vectorize(s[B].split(B.op.axis[0], factor=lanes)[1])
        return tc.build(s, [A, B], target=_MATH_TARGETS["avx512"])

    for lanes in (16, 8):
        f = build(lanes)
        asm = f.get_source("asm")
        assert len(re.findall(r"vperm[it]2ps\s[^\n]*%zmm", asm)) == 7, lanes
        assert "softplus.tail" in f.get_source("llvm-unopt")
        assert not re.search(r"vdivps|vrcp", asm)
    x = _dense_inputs(*_MORE_F32["softplus"][1])
    x = x[: x.size // 1040 * 1040]
    new = build(16, n=x.size)       # (built here, before the switches below are turned off)
    assert "softplus.tail" in new.get_source("llvm-unopt")
    monkeypatch.setattr(emit_math, "SOFTPLUS_SHORT_SEGMENTS", False)
    two_parts = build(16, n=1056)   # (another size: not the cached kernel of the same program)
    assert len(re.findall(r"vperm[it]2ps\s[^\n]*%zmm", two_parts.get_source("asm"))) == 8
    monkeypatch.setattr(emit_math, "SOFTPLUS_SHORT_SEGMENTS", True)
    monkeypatch.setattr(emit_math, "SOFTPLUS_DIRECT", False)
    old = build(16, n=1040)     # (another size: not the cached kernel of the same program)
    assert "softplus.tail" not in old.get_source("llvm-unopt")
    asm = old.get_source("asm")
    assert re.search(r"vpermps\s", asm) and not re.search(r"vperm[it]2ps", asm)
    if not tc.Target("llvm").has_feature("avx512f"):
        return
    outs = []
    for f in (new, old, two_parts):
        out = np.zeros(x.size, np.float32)
        m = 1040 if f is old else 1056 if f is two_parts else x.size
        for k in range(0, x.size - x.size % m, m):
            f(x[k:k + m], out[k:k + m])
        with np.errstate(invalid="ignore"):     # (a signalling NaN widened)
            outs.append(out.astype(np.float64))
    with np.errstate(all="ignore"):
        exact = np.logaddexp(0.0, x.astype(np.float64))
    ulp = np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)
    fin = np.isfinite(exact) & (exact > 0)
    fin[x.size - x.size % 1056:] = False    # (not computed by two_parts)
    for out in outs:
        assert (np.abs(out[fin] - exact[fin]) / ulp[fin]).max() <= 2.0
    assert (np.abs(outs[0][fin] - outs[1][fin]) / ulp[fin]).max() <= 3.0
    assert (np.abs(outs[0][fin] - outs[2][fin]) / ulp[fin]).max() <= 3.0
    # the AVX-512 segments: 1.2994 ulp at most on every input (docs/numerics.md); without
    # C_lo (Horner's rule on C_hi) they would reach 1.70, the two-part form 1.10 here
    assert (np.abs(outs[0][fin] - exact[fin]) / ulp[fin]).max() <= 1.35


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=haswell"])
def test_masked_load_wider_than_a_register_with_a_dead_half(target):
    """A select reads C1 under a lane mask whose upper half is always false: an 8-lane
    float64 masked load, two AVX2 registers.  LLVM's code generator split it and aborted
    the process on the all-false half (an assertion in its alias analysis; a fuzzed
    program on a Zen 3); tecomp splits such loads into register-wide pieces itself, and
    generates machine code in its worker process, where a crash of LLVM is an error."""
    import tecomp as tc

    P = tc.placeholder((2, 4), dtype="float64", name="P")
    C1 = tc.compute((2, 4), lambda i, j: P[i, j] * 2.0, name="C1")
    C2 = tc.compute((3, 8), lambda i, j: tc.if_then_else(tc.all(i < 1, j < 4), C1[i, j],
                                                         tc.const(0, "float64")), name="C2")
    s = tc.create_schedule(C2.op)
    s[C2].vectorize(C2.op.axis[1])
    s[C2].parallel(C2.op.axis[0])
    if tc.Target(target).runs_here() is not None:
        pytest.skip(tc.Target(target).runs_here())
    f = tc.build(s, [P, C2], target=target)
    p = np.arange(8, dtype="float64").reshape(2, 4)
    c = np.full((3, 8), np.nan)
    f(p, c)
    want = np.zeros((3, 8))
    want[0, :4] = p[0] * 2
    np.testing.assert_array_equal(c, want)


def test_select_of_operands_its_condition_loads_is_one_blend():
    """``select(m > x, m, x)`` (a max reduction's step) evaluates both operands, which
    the condition loads anyway: a blend, no masked loads or branches per vector; a
    select whose operand loads something else stays lazy (a padded read)."""
    import tecomp as tc

    X = tc.placeholder((64, 256), name="X")
    k = tc.reduce_axis((0, 256), name="k")
    mx = tc.comm_reducer(lambda a, b: tc.if_then_else(a > b, a, b),
                         lambda dt: tc.const(float("-inf"), dt), name="mx")
    M = tc.compute((64,), lambda i: mx(X[i, k], axis=k), name="M")
    s = tc.create_schedule(M.op)
    ko, ki = s[M].split(k, factor=16)
    rf = s.rfactor(M, ki, factor_axis=1)
    s[rf].reorder(s[rf].op.axis[0], s[rf].op.reduce_axis[0], s[rf].op.axis[1])
    s[rf].vectorize(s[rf].op.axis[1])
    f = tc.build(s, [X, M])
    assert "masked.load" not in f.get_source("llvm-unopt")
    x = np.random.default_rng(1).uniform(-5, 5, (64, 256)).astype(np.float32)
    x[3, 17] = np.nan                 # NaN compares false: the running max keeps itself
    x[5, :] = -np.inf
    m = np.zeros(64, np.float32)
    f(x, m)
    ref = []
    for row in x:
        acc = np.full(16, -np.inf, np.float32)
        for j in range(0, 256, 16):
            v = row[j:j + 16]
            acc = np.where(acc > v, acc, v)
        r = np.float32(-np.inf)
        for a in acc:
            r = r if r > a else a
        ref.append(r)
    np.testing.assert_array_equal(m, np.array(ref, np.float32))

    A = tc.placeholder((256,), name="A")
    P = tc.compute((256,), lambda i: tc.if_then_else(i >= 1, A[i - 1], tc.const(0.0)),
                   name="P")
    s2 = tc.create_schedule(P.op)
    s2[P].vectorize(P.op.axis[0])
    g = tc.build(s2, [A, P])
    assert "sel.all" in g.get_source("llvm-unopt")
    a = np.arange(256, dtype=np.float32)
    p = np.zeros(256, np.float32)
    g(a, p)
    np.testing.assert_array_equal(p, np.concatenate([[0], a[:-1]]))


def test_select_operands_reading_only_what_the_condition_reads_are_speculated():
    """A select whose operands load only what its condition loads (an ELU's
    ``if_then_else(x > 0, x, expm1(x))``) is one blend: both sides computed on every lane,
    no masked loads, no branches; a side that reads elsewhere (``x[i + 1]``) stays lazy.
    NaN, infinities and zeros take the side their comparison picks."""
    import tecomp as tc

    n = 256
    X = tc.placeholder((n,), name="X")
    E = tc.compute((n,), lambda i: tc.if_then_else(X[i] > 0, X[i], tc.expm1(X[i]) * 2.0),
                   name="E")
    F = tc.compute((n - 1,), lambda i: tc.if_then_else(X[i] > 0, X[i], tc.expm1(X[i + 1])),
                   name="F")
    for T, lazy in ((E, False), (F, True)):
        s = tc.create_schedule(T.op)
        s[T].vectorize(s[T].split(T.op.axis[0], factor=16)[1])
        f = tc.build(s, [X, T])
        src = f.get_source("llvm-unopt")
        assert ("sel.all" in src) is lazy and ("masked.load" in src) is lazy
        x = np.random.default_rng(2).standard_normal(n).astype(np.float32)
        x[:6] = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40]
        out = np.zeros(T.shape[0].value, np.float32)
        f(x, out)
        with np.errstate(all="ignore"):
            if lazy:
                want = np.where(x[:-1] > 0, x[:-1], np.expm1(x[1:].astype(np.float64)))
            else:
                want = np.where(x > 0, x, np.expm1(x.astype(np.float64)) * 2.0)
        np.testing.assert_allclose(out, want.astype(np.float32), rtol=3e-7, atol=0)



_GUARDED_SELECT_CHILD = r"""
import ctypes, mmap, sys
import numpy as np
import tecomp as tc

libc = ctypes.CDLL(None, use_errno=True)
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
keep = []


def at_page_end(a):
    # a copy of a whose last element is the last byte before an unreadable page
    page = mmap.PAGESIZE
    size = -(-a.nbytes // page) * page
    buf = mmap.mmap(-1, size + page)
    keep.append(buf)
    base = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    assert libc.mprotect(base + size, page, 0) == 0   # PROT_NONE: reading it faults
    out = np.frombuffer(buf, dtype=a.dtype, count=a.size, offset=size - a.nbytes)
    out[:] = a.ravel()
    return out.reshape(a.shape)


n = 64
X = tc.placeholder((n,), name="X")
Y = tc.placeholder((n,), name="Y")
nxt = lambda B, i: tc.if_then_else(i < n - 1, B[i + 1], tc.const(0.0))
BODIES = {
    # the condition reads X[i + 1] only where i < n - 1 (a select inside it)
    "same_buffer": lambda i: tc.if_then_else(nxt(X, i) > 0, X[i + 1] * 2, tc.const(-1.0)),
    # ... and the operand reads another buffer of that shape at that place
    "other_buffer": lambda i: tc.if_then_else(nxt(X, i) > 0, Y[i + 1] + 1, tc.const(-1.0)),
    # ... and the select is inside the condition's comparison's other operand
    "both_sides": lambda i: tc.if_then_else(X[i] < nxt(Y, i), tc.exp(Y[i + 1]), X[i]),
}


def want(kind, x, y):
    nx, ny = np.append(x[1:], 0), np.append(y[1:], 0)
    with np.errstate(all="ignore"):
        if kind == "same_buffer":
            return np.where(nx > 0, nx * 2, -1)
        if kind == "other_buffer":
            return np.where(nx > 0, ny + 1, -1)
        return np.where(x < ny, np.exp(ny.astype(np.float64)), x)


for kind, lanes in zip(sys.argv[1::2], sys.argv[2::2]):
    T = tc.compute((n,), BODIES[kind], name="T")
    s = tc.create_schedule(T.op)
    if int(lanes) > 1:
        s[T].vectorize(s[T].split(T.op.axis[0], factor=int(lanes))[1])
    f = tc.build(s, [X, Y, T])
    rng = np.random.default_rng(3)
    x = at_page_end(rng.standard_normal(n).astype(np.float32))
    y = at_page_end(rng.standard_normal(n).astype(np.float32))
    out = np.zeros(n, np.float32)
    f(x, y, out)
    np.testing.assert_allclose(out, want(kind, x, y).astype(np.float32), rtol=3e-7)
print("ok")
"""


def test_select_operand_loads_guarded_only_inside_the_condition_stay_lazy():
    """A select whose condition reads ``X[i + 1]`` only inside a select of its own
    (``if_then_else(i < n - 1, X[i + 1], 0) > 0``) does not make an operand that reads
    there (``X[i + 1] * 2``, ``Y[i + 1]``) safe to evaluate on every lane: at the last
    element it would read past the array (it did: a fault with the array before an
    unreadable page; found in session 20).  Checked vectorized and scalar, in a child
    process, so that a fault fails the test instead of ending the run."""
    argv = []
    for kind in ("same_buffer", "other_buffer", "both_sides"):
        for lanes in ("16", "8", "1"):
            argv += [kind, lanes]
    r = subprocess.run([sys.executable, "-c", _GUARDED_SELECT_CHILD, *argv],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", (r.returncode, r.stderr[-2000:])

def _symbolic_block_kernel(nest):
    """C[i] = A[i] * 2 with i split by 8 (and the inner part by 2 when ``nest``), the inner
    parts unrolled: their extents are symbolic in the tail, at most 8 (2)."""
    import tecomp as tc

    n = tc.var("n")
    A = tc.placeholder((n,), name="A")
    C = tc.compute((n,), lambda i: A[i] * 2.0, name="C")
    s = tc.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=8)
    s[C].pragma(xo, "no_partition")
    if nest:
        xio, xii = s[C].split(xi, factor=2)
        s[C].unroll(xio)
        s[C].unroll(xii)
    else:
        s[C].unroll(xi)
    return s, [A, C]


@pytest.mark.parametrize("nest", [False, True])
def test_an_unrolled_loop_of_symbolic_bounded_extent_is_unrolled_guarded(nest):
    import tecomp as tc

    s, args = _symbolic_block_kernel(nest)
    lowered = str(tc.lower(s, args))
    assert "unrolled" in lowered and "min(" in lowered     # a symbolic extent, bounded
    f = tc.build(s, args)
    assert "llvm.loop.unroll.enable" not in f.get_source("llvm-unopt")
    for n in (0, 1, 7, 8, 13, 64):
        a = np.arange(n, dtype="float32")
        c = np.full(n, -1.0, "float32")
        f(a, c)
        np.testing.assert_array_equal(c, a * 2)


def test_loops_inside_unrolled_copies_are_not_forced_unrolled():
    """An unrolled loop of a symbolic extent with no small bound inside an unrolled loop
    of 4: LLVM's unroller is not forced on each of the 4 copies (on 224 such copies it
    made a function of minutes to optimise); alone, the loop is still marked for it, with
    a count (its trip count unknown, ``unroll.enable`` alone did nothing, loudly)."""
    n = Var("n")
    A, B = buf("A", (4, n)), buf("B", (4, n))
    i, j = Var("i"), Var("j")
    inner = loop(j, n, st(B, ld(A, i, j) + c(1.0, "float32"), i, j), "unrolled")
    for body, forced in ((loop(i, 4, inner, "unrolled"), False),
                         (loop(i, 4, inner), True)):
        m = build_llvm(PrimFunc("rows", (A, B), body))
        text = m.get_source("llvm-unopt")
        assert ('!"llvm.loop.unroll.count", i32 4' in text) == forced
        assert "llvm.loop.unroll.enable" not in text
        a = np.random.rand(4, 9).astype("float32")
        b = np.zeros((4, 9), "float32")
        m(a, b)
        np.testing.assert_allclose(b, a + 1)


def _ulps_f64(got, x, fn, prec=120):
    """ulp distance of float64 results from mpmath's ``fn`` (``prec`` bits; None: as set)
    at ``x``."""
    import mpmath

    if prec is not None:
        mpmath.mp.prec = prec
    out = []
    for g, v in zip(got, x):
        e = fn(mpmath.mpf(float(v)))
        ef = float(e)
        ulp = float(np.spacing(abs(ef))) if abs(ef) >= 2.2250738585072014e-308 else 5e-324
        out.append(float(abs(mpmath.mpf(float(g)) - e) / ulp))
    return np.array(out)


@pytest.mark.parametrize("fn", ["exp", "log"])
def test_float64_exp_and_log_vector_code(fn, exp_variant):
    """float64 exp and log are vector code (no libm call per lane), the same bits
    vectorized and serial, within 1 ulp of mpmath's (docs/numerics.md: 0.80 and 0.50 ulp
    measured) on samples over the whole domain (subnormal inputs and results included),
    and numpy's at the special values."""
    import mpmath

    rng = np.random.default_rng(5)
    if fn == "exp":
        x = np.concatenate([rng.uniform(-745.2, 709.78, 1500), rng.uniform(-1, 1, 500),
                            rng.uniform(-745.2, -708, 500)])
        special = [0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, 709.782712893384,
                   709.7827128933841, -745.1332191019411, -745.1332191019412, 1e300]
    else:
        x = np.concatenate([np.exp(rng.uniform(-744, 709, 1500)), rng.uniform(0.5, 2, 500),
                            rng.uniform(0, 1e-310, 500)])
        special = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 5e-324, 1e-310, 1e308]
    x = np.concatenate([x, special])
    outs = []
    for kind in ("vectorized", "serial"):
        m = build_llvm(elementwise(f"{fn}64_{kind}", lambda v: op.call(fn, v), "float64",
                                   kind=kind), target=exp_variant)
        out = np.zeros(x.size)
        m(x, out)
        outs.append(out)
        src = m.get_source("llvm")
        assert f"@{fn}(" not in src and f"llvm.{fn}.f64" not in src
    np.testing.assert_array_equal(outs[0].view(np.uint64), outs[1].view(np.uint64))
    k = len(special)
    err = _ulps_f64(outs[0][:-k], x[:-k], getattr(mpmath, fn))
    assert err.max() <= 1.0, (x[err.argmax()], err.max())
    with np.errstate(all="ignore"):
        want = getattr(np, fn)(np.array(special))
    np.testing.assert_array_equal(outs[0][-k:], want)


def _tan64_inputs():
    """float64 tan's test inputs: dense on [-pi, pi] and around pi/4 and 3pi/4 (the
    reduction's edges), spread over ``|x| < 2^30`` (the reduction's range), the nearest
    float64s to multiples of pi/2 up to 2^30 (tiny reduced arguments, large quadrants)
    and their neighbours, and the values at and around ``2^30`` (libm's ``tan`` beyond)."""
    rng = np.random.default_rng(22)
    near = rng.integers(1, int(2.0 ** 30 / (np.pi / 2)), 400) * (np.pi / 2)
    near = near + rng.integers(-2, 3, near.size) * np.spacing(near)
    sign = rng.choice([-1.0, 1.0], 800)
    return np.concatenate([rng.uniform(-np.pi, np.pi, 800), rng.uniform(0.7, 0.86, 400),
                           rng.uniform(2.2, 2.5, 400), near,
                           np.exp(rng.uniform(-40.0, np.log(2.0 ** 30), 800)) * sign,
                           [2.0 ** 30, np.nextafter(2.0 ** 30, 0), np.nextafter(2.0 ** 30, 4e9),
                            -(2.0 ** 30) - 1, 1e15, 1e300, -1e22, 2.0 ** -27, 1.4e-9]])


def test_float64_tan_vector_code(exp_variant):
    """float64 tan is vector code where the target has FMA (libm's ``tan`` only in the
    branch for ``|x| > 2^30``, inf and NaN), the same bits vectorized (every vector width:
    2, 4, 8 and 16 lanes) and serial, within 0.8 ulp of mpmath's (docs/numerics.md: 0.77
    measured on a million inputs) and numpy's (glibc's) at the special values (signed
    zeros, subnormals, infinities, NaN).  Without FMA it is libm's ``tan`` per lane
    (within 1 ulp)."""
    import mpmath

    import tecomp as tc

    x = _tan64_inputs()
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, -1e-310, 1e-300])
    x = np.concatenate([x, special])
    n = x.size
    outs = []
    for lanes in (None, 2, 4, 8, 16):
        A = tc.placeholder((n,), "float64", name="A")
        B = tc.compute((n,), lambda i: tc.tan(A[i]), name="B")
        s = tc.create_schedule(B.op)
        if lanes is not None:
            s[B].vectorize(s[B].split(B.op.axis[0], factor=lanes)[1])
        f = tc.build(s, [A, B], target=exp_variant)
        out = np.zeros(n)
        f(x, out)
        outs.append(out)
        src = f.get_source("llvm-unopt")
        if lanes == 8:
            assert ("tan.libm" in src) == _has_fma(exp_variant)
    for out in outs[1:]:
        np.testing.assert_array_equal(out.view(np.uint64), outs[0].view(np.uint64))
    got = outs[0]
    with np.errstate(invalid="ignore"):
        want = np.tan(special)
    k = special.size
    np.testing.assert_array_equal(got[-k:], want)
    np.testing.assert_array_equal(np.signbit(got[-k:][~np.isnan(want)]),
                                  np.signbit(want[~np.isnan(want)]))
    mpmath.mp.prec = 200     # (enough for the reduced argument of x near q pi/2, q < 2^30)
    err = _ulps_f64(got[:-k], x[:-k], mpmath.tan, prec=None)
    limit = 0.8 if _has_fma(exp_variant) else 1.0      # (without FMA: libm's bound)
    assert err.max() <= limit, (x[err.argmax()], err.max())


def _vectorized_pow(n, c=None):
    """``pow(A[i], c)``, or ``pow(A[i], E[i])`` (``c`` None), over ``n``, vectorized by 16:
    the module takes ``A, E, B`` either way."""
    import tecomp as tc

    A = tc.placeholder((n,), name="A")
    E = tc.placeholder((n,), name="E")
    B = tc.compute((n,), lambda i: tc.pow(A[i], E[i] if c is None else c), name="B")
    s = tc.create_schedule(B.op)
    s[B].vectorize(s[B].split(B.op.axis[0], factor=16)[1])
    return tc.build(s, [A, E, B])


#: the general pow of a tensor, built once for every constant of the test below
_pow_of_a_tensor = functools.lru_cache(maxsize=1)(_vectorized_pow)


@pytest.mark.parametrize("c", [2.0, 1.0, -1.0, 0.5, 3.0])
def test_pow_by_a_constant(c):
    """``pow(x, 2.0)`` is one multiply, ``pow(x, 0.5)`` a square root (``+0`` at ``-0``,
    ``inf`` at ``-inf``, as C99), ``pow(x, -1.0)`` a division: the correctly rounded
    result, specials included (numpy's float64 pow rounded); another constant takes the
    general float32 pow (the same bits as pow of a tensor holding the exponent)."""
    x = np.concatenate([_dense_inputs(1.0, 2.0),
                        np.array([np.inf, -np.inf, np.nan, -0.0, -2.0], np.float32)])
    n = x.size
    outs = []
    for f in (_vectorized_pow(n, c), _pow_of_a_tensor(n)):
        out = np.zeros(n, np.float32)
        f(x, np.full(n, c, np.float32), out)
        outs.append(out)
    with np.errstate(all="ignore"):   # (an array exponent: numpy's C99 pow, not sqrt)
        want = np.power(x.astype(np.float64), np.full(n, c)).astype(np.float32)
    if c == 3.0:
        want = outs[1]
    same = (outs[0].view(np.uint32) == want.view(np.uint32)) | (
        np.isnan(outs[0]) & np.isnan(want))
    assert same.all(), (x[~same][:5], outs[0][~same][:5], want[~same][:5])


_PATTERN_CHILD = r"""
import ctypes, mmap, sys
import numpy as np
import tecomp as tc

lanes = 16
n = lanes * 3
# kind -> (the index of lane i, the elements of A, the reference): the last lane of the
# last vector reads the last element of A
KINDS = {
    # a grouped convolution's vector across groups of 4: each group's lanes read one value
    "groups": (lambda i: (i // 4) * 4 + 3, n, lambda a: a[(np.arange(n) // 4) * 4 + 3]),
    # lanes in reverse
    "reverse": (lambda i: (n - 1) - i, n, lambda a: a[::-1]),
    # every lane twice
    "pairs": (lambda i: i // 2, n // 2, lambda a: np.repeat(a, 2)),
}
libc = ctypes.CDLL(None, use_errno=True)
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
keep = []
for kind, dtype in zip(sys.argv[1::2], sys.argv[2::2]):
    index, m, want = KINDS[kind]
    A = tc.placeholder((m,), name="A", dtype=dtype)
    B = tc.compute((n,), lambda i: A[index(i)] + 1, name="B")
    s = tc.create_schedule(B.op)
    _, xi = s[B].split(B.op.axis[0], factor=lanes)
    s[B].vectorize(xi)
    f = tc.build(s, [A, B])
    assert "llvm.masked.gather" not in f.get_source("llvm-unopt"), kind
    page = mmap.PAGESIZE
    size = -(-m * np.dtype(dtype).itemsize // page) * page
    buf = mmap.mmap(-1, size + page)
    keep.append(buf)
    base = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    assert libc.mprotect(base + size, page, 0) == 0   # PROT_NONE: reading it faults
    a = np.frombuffer(buf, dtype=dtype, count=m, offset=size - m * np.dtype(dtype).itemsize)
    a[:] = np.arange(m) % 1000
    out = np.empty(n, dtype)
    f(a, out)
    np.testing.assert_array_equal(out, want(a) + 1)
    fc = tc.build(s, [A, B], checks=True)
    fc(a, out)
    np.testing.assert_array_equal(out, want(a) + 1)
print("ok")
"""


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 policy")
def test_constant_lane_pattern_loads_read_only_their_span():
    """A vector load whose lanes read constant offsets from one base within a short span
    (``(i // 4) * 4 + 3``: a grouped convolution's vector across groups; lanes reversed;
    each element twice) is one load of the span and a shuffle, not a gather: the right
    values, with and without bounds checks, and nothing read past the last element the
    lanes use (an unreadable page after it; in a child process, so that a fault fails
    the test instead of ending the run)."""
    r = subprocess.run([sys.executable, "-c", _PATTERN_CHILD, "groups", "float32",
                        "reverse", "float64", "pairs", "int32"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", (r.returncode, r.stderr[-2000:])


def test_lane_patterns_that_stay_gathers():
    """Lanes too far apart (a span past the policy's bound), lanes that depend on a
    second vector (a loaded index) and a masked tail keep the gather, and agree."""
    import tecomp as tc

    n = 64
    A = tc.placeholder((n * n,), name="A")
    I = tc.placeholder((n,), name="I", dtype="int32")
    B = tc.compute((n,), lambda i: A[(i // 2) * 64] + A[I[i]], name="B")
    s = tc.create_schedule(B.op)
    _, xi = s[B].split(B.op.axis[0], factor=16)
    s[B].vectorize(xi)
    f = tc.build(s, [A, I, B])
    assert f.get_source("llvm-unopt").count("llvm.masked.gather") >= 2
    a = np.random.default_rng(1).standard_normal(n * n).astype("float32")
    idx = np.random.default_rng(2).integers(0, n * n, n).astype("int32")
    out = np.zeros(n, "float32")
    f(a, idx, out)
    np.testing.assert_array_equal(out, a[(np.arange(n) // 2) * 64] + a[idx])
    m = tc.var("m")
    A2 = tc.placeholder((m,), name="A2")
    C = tc.compute((m,), lambda i: A2[(i // 4) * 4], name="C")
    s2 = tc.create_schedule(C.op)
    _, ci = s2[C].split(C.op.axis[0], factor=16)
    s2[C].vectorize(ci)
    g = tc.build(s2, [A2, C])
    a2 = np.arange(37, dtype="float32")
    out2 = np.zeros(37, "float32")
    g(a2, out2)
    np.testing.assert_array_equal(out2, a2[(np.arange(37) // 4) * 4])


#: x86 targets of every vector width (zmm, ymm with and without FMA, xmm only)
_WIDTH_TARGETS = ["llvm -mcpu=skylake-avx512", "llvm -mcpu=haswell", "llvm -mcpu=sandybridge",
                  "llvm -mcpu=nehalem"]


@pytest.mark.parametrize("target", _WIDTH_TARGETS)
def test_float_max_min_reductions_propagate_nan_on_every_width(target):
    """Row max and min of float32 and float64, auto-scheduled (a widened reduction into
    lanes, then a scalar loop over them): a NaN anywhere in a row (first, last, middle,
    several, beside infinities) makes the row's result NaN, infinities and signed zeros
    come through, and the other rows equal numpy's.  x86 computes each step with the
    target's max/min instruction (the accumulator alone goes through it) and a NaN test
    of the new element, in the vector loop and the scalar one."""
    import tecomp as tc

    if "avx512" in target and not tc.Target("llvm").has_feature("avx512f"):
        pytest.skip("this CPU has no AVX-512")
    from tecomp.codegen.llvm.jit import host
    from tecomp.codegen.llvm.x86 import is_x86

    if not is_x86(host().triple):
        pytest.skip("x86 targets")
    M, N = 24, 203
    rng = np.random.default_rng(7)
    for dtype in ("float32", "float64"):
        x = rng.standard_normal((M, N)).astype(dtype)
        for r, cols in enumerate([[0], [N - 1], [N // 2], [3, 100, 150], [64], [15, 16]]):
            x[r, cols] = np.nan
        x[6, 7], x[7, :] = np.inf, -np.inf           # an inf in a row; a row of -inf
        x[8, 9], x[8, 10] = np.nan, np.inf           # NaN beside +inf and -inf
        x[9, 11], x[9, 12] = -np.inf, np.nan
        x[10, :] = -0.0                              # zeros: either sign is allowed
        x[11, :] = np.inf
        X = tc.placeholder((M, N), name="x", dtype=dtype)
        k = tc.reduce_axis((0, N), name="k")
        Mx = tc.compute((M,), lambda i: tc.max(X[i, k], axis=k), name="mx")
        k2 = tc.reduce_axis((0, N), name="k2")
        Mn = tc.compute((M,), lambda i: tc.min(X[i, k2], axis=k2), name="mn")
        for T, want in ((Mx, np.max(x, 1)), (Mn, np.min(x, 1))):
            f = tc.build(tc.auto_schedule([X, T], target=target), [X, T], target=target)
            out = np.ones(M, dtype)
            f(x, out)
            np.testing.assert_array_equal(out, want)
            src = f.get_source("llvm-unopt")
            assert "llvm.x86." in src and "llvm.maximum" not in src \
                and "llvm.minimum" not in src, target


def _paired_target(monkeypatch, flag: str, paired: bool) -> str:
    """An AVX-512 target with ``emit_control``'s ``flag`` (a pairing of NaN tests) set to
    ``paired``; the test skipped where this CPU cannot run AVX-512 x86 code."""
    import tecomp as tc
    from tecomp.codegen.llvm import emit_control
    from tecomp.codegen.llvm.jit import host
    from tecomp.codegen.llvm.x86 import is_x86

    if not is_x86(host().triple) or not tc.Target("llvm").has_feature("avx512f"):
        pytest.skip("an AVX-512 x86 CPU runs the paired form")
    monkeypatch.setattr(emit_control, flag, paired)
    return "llvm -mcpu=skylake-avx512"


@pytest.mark.parametrize("paired", [True, False])
@pytest.mark.parametrize("shape,axis", [((256, 256), 0), ((4, 64, 96), 1), ((1024, 64), 0)])
def test_column_max_min_nan_tests_in_pairs(monkeypatch, paired, shape, axis):
    """Max and min over columns (auto-scheduled: each step an unrolled run of rows into
    one accumulator vector), their NaN tests one unordered compare per two rows
    (``emit_control.PAIRED_NAN_TESTS``, an AVX-512 target) or one per row: a NaN as a
    column's first, second, middle, second-to-last or last element, in both rows of a
    pair, beside +-inf, columns of -inf and of inf, zeros of both signs (either zero may
    come out), float32 and float64, exactly numpy's; int32 columns unaffected (exact,
    no float compare).  The paired form's ``fcmp uno`` of two values is in the code
    exactly when on."""
    import re

    import tecomp as tc

    target = _paired_target(monkeypatch, "PAIRED_NAN_TESTS", paired)
    rng = np.random.default_rng(3)
    n = shape[axis]
    for dtype in ("float32", "float64", "int32"):
        x = rng.standard_normal(shape) * 9
        cols = np.moveaxis(x, axis, -1)            # a view: x's lines along the axis
        if dtype != "int32":
            for c, rows in enumerate([[0], [1], [n // 2], [n - 2], [n - 1], [2, 3],
                                      [4, 5, 9]]):
                cols[(0,) * (cols.ndim - 2) + (c,)][rows] = np.nan
            line = (0,) * (cols.ndim - 2)
            cols[line + (10,)][[0, 7]] = np.nan, np.inf
            cols[line + (11,)][[6, n - 1]] = -np.inf, np.nan
            cols[line + (12,)] = -np.inf
            cols[line + (13,)] = np.inf
            cols[line + (14,)] = -0.0
            cols[line + (15,)][::2] = 0.0
            cols[line + (15,)][1::2] = -0.0
        x = x.astype(dtype)
        X = tc.placeholder(shape, name="x", dtype=dtype)
        for op in ("max", "min"):
            Y = getattr(tc.nn, op)(X, axis=axis)
            f = tc.build(tc.auto_schedule([X, Y], target=target), [X, Y], target=target)
            want = getattr(np, op)(x, axis=axis)
            out = np.ones(want.shape, dtype)
            f(x, out)
            np.testing.assert_array_equal(out, want, f"{op} {dtype}")
            src = f.get_source("llvm-unopt")
            pairs = re.findall(r"fcmp uno <\d+ x (?:float|double)> (%\S+), (%\S+)$",
                               src, re.M)
            assert (any(a != b for a, b in pairs) == (paired and dtype != "int32")), \
                (op, dtype)


@pytest.mark.parametrize("paired", [True, False])
@pytest.mark.parametrize("shape,axis", [((256, 64), 0), ((4, 64, 96), 1), ((1024, 64), 0)])
def test_column_argmax_nan_tests_in_pairs(monkeypatch, paired, shape, axis):
    """Argmax and argmin over columns (auto-scheduled: an unrolled run of rows into one
    value/index accumulator pair), two rows a step under one any-lane NaN test, one
    ordered compare a row where neither holds a NaN
    (``emit_control.PAIRED_SELECTION_TESTS``, an AVX-512 target), or row by row: ties
    (small integers: the first index), a NaN as a column's first, second, middle,
    second-to-last or last element (the first NaN's index), in both rows of a pair,
    beside inf, a column of -inf, zeros of both signs (equal), float32 and float64,
    exactly numpy's; int32 columns exact.  The branch is in the code exactly when on."""
    import tecomp as tc

    target = _paired_target(monkeypatch, "PAIRED_SELECTION_TESTS", paired)
    rng = np.random.default_rng(5)
    n = shape[axis]
    for dtype in ("float32", "float64", "int32"):
        x = rng.integers(-3, 4, shape).astype("float64")
        cols = np.moveaxis(x, axis, -1)            # a view: x's lines along the axis
        if dtype != "int32":
            line = (0,) * (cols.ndim - 2)
            for c, rows in enumerate([[0], [1], [n // 2], [n - 2], [n - 1], [2, 3],
                                      [4, 5, 9]]):
                cols[line + (c,)][rows] = np.nan
            cols[line + (10,)][[0, 7]] = np.inf, np.nan
            cols[line + (11,)] = -np.inf
            cols[line + (12,)][::2] = 0.0
            cols[line + (12,)][1::2] = -0.0
        x = x.astype(dtype)
        X = tc.placeholder(shape, name="x", dtype=dtype)
        for op in ("argmax", "argmin"):
            Y = getattr(tc.nn, op)(X, axis=axis, dtype="int64")
            f = tc.build(tc.auto_schedule([X, Y], target=target), [X, Y], target=target)
            want = getattr(np, op)(x, axis=axis)
            out = np.ones(want.shape, "int64")
            f(x, out)
            np.testing.assert_array_equal(out, want, f"{op} {dtype}")
            branch = "nan.then" in f.get_source("llvm-unopt")
            assert branch == (paired and dtype != "int32"), (op, dtype)


@pytest.mark.parametrize("regs", [True, False])
@pytest.mark.parametrize("shape,axis,keep", [((64, 80), 0, False), ((3, 16, 50), 1, True),
                                             ((2, 24, 33), 1, False), ((5, 8, 7, 16), 1, True)])
def test_column_argmax_pairs_in_registers(monkeypatch, regs, shape, axis, keep):
    """A column argmax's or argmin's unrolled run of rows (two a step under one NaN test,
    an AVX-512 target) with its value/index accumulator pair held in registers through
    the run, loaded once and stored once (``emit_control.SELECTION_PAIRS_IN_REGISTERS``:
    the steps' branches joined by phis), or stored and reloaded by every step: exactly
    numpy's either way -- ties (small integers: the first index), NaNs in the first,
    second, a middle or the last row of a column and in both rows of a pair, inf, a
    column of -inf, zeros of both signs, keepdims, rows of whole vectors and rows with a
    vector tail (33, 50 lanes: the tail's run stays in memory), float32 and float64.  The
    phis are in the code exactly when on."""
    import tecomp as tc
    from tecomp.codegen.llvm import emit_control

    target = _paired_target(monkeypatch, "PAIRED_SELECTION_TESTS", True)
    monkeypatch.setattr(emit_control, "SELECTION_PAIRS_IN_REGISTERS", regs)
    rng = np.random.default_rng(11)
    n = shape[axis]
    for dtype in ("float32", "float64"):
        x = rng.integers(-3, 4, shape).astype("float64")
        cols = np.moveaxis(x, axis, -1)            # a view: x's lines along the axis
        line = (0,) * (cols.ndim - 2)
        for c, rows in enumerate([[0], [1], [n // 2], [n - 1], [2, 3], [4, 5]]):
            cols[line + (c,)][rows] = np.nan
        cols[line + (6,)][[0, n - 1]] = np.inf, np.nan
        cols[(-1,) * (cols.ndim - 2) + (-1,)] = -np.inf
        cols[line + (7,)][::2] = 0.0
        cols[line + (7,)][1::2] = -0.0
        x = x.astype(dtype)
        X = tc.placeholder(shape, name="x", dtype=dtype)
        for op in ("argmax", "argmin"):
            Y = getattr(tc.nn, op)(X, axis=axis, keepdims=keep, dtype="int64")
            f = tc.build(tc.auto_schedule([X, Y], target=target), [X, Y], target=target)
            want = getattr(np, op)(x, axis=axis, keepdims=keep)
            out = np.ones(want.shape, "int64")
            f(x, out)
            np.testing.assert_array_equal(out, want, f"{op} {dtype}")
            src = f.get_source("llvm-unopt")
            assert "nan.then" in src, (op, dtype)
            assert ('.pair" = phi' in src) == regs, (op, dtype)


def _reduced(shape, axis) -> tuple:
    """The axes ``axis`` (an int or a tuple, negatives allowed) of ``shape``, as a tuple."""
    return tuple(a % len(shape) for a in (axis if isinstance(axis, tuple) else (axis,)))


def _arg_kernels(X, axis, keep: bool):
    """``(op, last, kernel)``: argmax and argmin over ``axis`` of ``X`` (an int64 index,
    ``keep``-ing the reduced axes), the first and the last index among equal values, each
    auto-scheduled and built."""
    import tecomp as tc
    for op in ("argmax", "argmin"):
        for last in (False, True):
            Y = getattr(tc.nn, op)(X, axis=axis, keepdims=keep, dtype="int64",
                                   select_last_index=last)
            yield op, last, tc.build(tc.auto_schedule([X, Y]), [X, Y])


def _arg_rows_reference(op, x, axis, keep: bool, last: bool):
    """numpy's ``op`` (argmax/argmin) of ``x`` over ``axis`` (several axes: the flat
    position over them, row-major), ``keep``-ing the reduced axes, the last index among
    equal values where ``last``."""
    axes = _reduced(x.shape, axis)
    rest = [d for d in range(x.ndim) if d not in axes]
    rows = x.transpose(*rest, *axes).reshape(*[x.shape[d] for d in rest], -1)
    if last:
        got = rows.shape[-1] - 1 - getattr(np, op)(rows[..., ::-1], axis=-1)
    else:
        got = getattr(np, op)(rows, axis=-1)
    return np.expand_dims(got, axes) if keep else got


@pytest.mark.parametrize("match", [True, False])
@pytest.mark.parametrize("shape,axis,keep", [((64, 256), -1, False), ((7, 13, 250), -1, True),
                                             ((40, 64), 1, False), ((3, 5, 1000), 2, False),
                                             ((9, 3), 1, True), ((2, 3, 17, 40), (2, 3), False)])
def test_row_argmax_lanes_combined_by_matching(monkeypatch, match, shape, axis, keep):
    """An argmax's or argmin's partial lanes along rows combined by matching
    (``emit_control.SELECTION_MATCH``: the lanes' max or min with the NaN lanes out, the
    lanes equal to it or the NaN lanes, the first (last) index among them) or as the tree
    of the full condition: numpy's either way -- ties (small integers), NaNs (a few, one
    in the last element, rows all NaN), zeros of both signs, rows of -inf and of inf,
    rows of whole vectors and with tails (250, 1000, 13 and 3 elements), two axes,
    keepdims, ``select_last_index``, float32 and float64 (float16 values: correct, by the
    tree).  Never matched when off; when on, float32 rows of 64 or more are."""
    import tecomp as tc
    from tecomp.codegen.llvm import emit_control

    monkeypatch.setattr(emit_control, "SELECTION_MATCH", match)
    rng = np.random.default_rng(5)
    row = int(np.prod([shape[d] for d in _reduced(shape, axis)]))
    kept = len(shape) - len(_reduced(shape, axis))     # (the axes not reduced)

    for dtype in ("float32", "float64", "float16"):
        X = tc.placeholder(shape, name="x", dtype=dtype)
        for op, last, f in _arg_kernels(X, axis, keep):
            for data in ("normal", "ties", "nan", "zeros", "inf"):
                x = rng.standard_normal(shape)
                if data == "ties":
                    x = rng.integers(-2, 3, shape).astype("float64")
                elif data == "nan":
                    x[rng.random(shape) < 0.03] = np.nan
                    x.reshape(-1)[-1] = np.nan
                    x[(0,) * kept] = np.nan          # a row (or plane) all NaN
                elif data == "zeros":
                    x = np.where(rng.random(shape) < 0.5, -0.0, 0.0)
                elif data == "inf":
                    x = np.full(shape, -np.inf if op == "argmax" else np.inf)
                    x[rng.random(shape) < 0.3] = -x.flat[0]
                x = x.astype(dtype)
                want = _arg_rows_reference(op, x, axis, keep, last)
                out = np.full(want.shape, -7, "int64")
                f(x, out)
                np.testing.assert_array_equal(out, want, f"{op} {dtype} {data} {last}")
            notes = " ".join(f.vectorize_notes)
            matched = "selection by matching" in notes
            if not match or dtype == "float16":
                assert not matched, (op, dtype, notes)
            elif dtype == "float32" and not last and row >= 64:
                # (a block of fewer than emit_control.SELECTION_MATCH_LANES lanes
                # keeps the tree: float64 lanes on a narrow vector, rows of 3)
                assert matched, (op, dtype, notes)


@pytest.mark.parametrize("match", [True, False])
@pytest.mark.parametrize("shape,axis,keep", [((64, 256), -1, False), ((7, 13, 250), -1, True),
                                             ((9, 3), 1, False), ((2, 3, 17, 40), (2, 3), True)])
def test_row_argmax_of_integers_lanes_combined_by_matching(monkeypatch, match, shape, axis,
                                                           keep):
    """An argmax's or argmin's partial lanes over integer values combined by matching
    (``emit_control.SELECTION_MATCH_INTS``: the lanes' integer max or min, signed or
    unsigned, the first (last) index among the lanes equal to it) or as the tree:
    numpy's either way -- values over the dtype's whole range, its extremes, ties (small
    integers), rows with tails (250, 3), two axes, keepdims, ``select_last_index``, int8,
    int32, int64 and uint8 (unsigned compares).  Never matched when off; when on, int32
    rows of 64 or more are."""
    import tecomp as tc
    from tecomp.codegen.llvm import emit_control

    monkeypatch.setattr(emit_control, "SELECTION_MATCH_INTS", match)
    rng = np.random.default_rng(6)
    row = int(np.prod([shape[d] for d in _reduced(shape, axis)]))

    for dtype in ("int32", "int8", "int64", "uint8"):
        info = np.iinfo(dtype)
        X = tc.placeholder(shape, name="x", dtype=dtype)
        for op, last, f in _arg_kernels(X, axis, keep):
            for data in ("wide", "extremes", "ties"):
                if data == "wide":
                    x = rng.integers(info.min, info.max, shape, dtype=dtype,
                                     endpoint=True)
                elif data == "extremes":
                    x = rng.choice(np.array([info.min, info.max, 0], dtype), shape)
                else:
                    x = rng.integers(0, 3, shape).astype(dtype)
                want = _arg_rows_reference(op, x, axis, keep, last)
                out = np.full(want.shape, -7, "int64")
                f(x, out)
                np.testing.assert_array_equal(out, want, f"{op} {dtype} {data} {last}")
            matched = "selection by matching" in " ".join(f.vectorize_notes)
            if not match:
                assert not matched, (op, dtype)
            elif dtype == "int32" and not last and row >= 64:
                assert matched, (op, dtype, f.vectorize_notes)


def test_float_max_reduction_without_vectorized_loops_keeps_llvm_maximum():
    """A kernel the schedule did not vectorize keeps ``llvm.maximum`` for its scalar max
    (LLVM's loop vectorizer may widen it; it hung on a compare-select one)."""
    import tecomp as tc

    X = tc.placeholder((4, 9), name="x")
    k = tc.reduce_axis((0, 9), name="k")
    Mx = tc.compute((4,), lambda i: tc.max(X[i, k], axis=k), name="mx")
    f = tc.build(tc.create_schedule(Mx.op), [X, Mx])
    x = np.random.default_rng(0).standard_normal((4, 9)).astype("float32")
    x[1, 4] = np.nan
    out = np.zeros(4, "float32")
    f(x, out)
    np.testing.assert_array_equal(out, np.max(x, 1))
    assert "llvm.maximum" in f.get_source("llvm-unopt")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_float_max_min_of_every_lane_count(dtype):
    """Elementwise max and min vectorized by 2 to 64 lanes, register multiples or not (3,
    5, 12 and 48 float32: pieces of xmm/ymm/zmm joined again), NaN in either operand."""
    import tecomp as tc

    vals = [np.nan, -np.inf, -2.5, -0.0, 0.0, 1, 7, np.inf]
    a = np.array([x for x in vals for _ in vals] * 3, dtype)
    c = np.array([y for _ in vals for y in vals] * 3, dtype)
    n = len(a)
    A, B = tc.placeholder((n,), name="a", dtype=dtype), tc.placeholder((n,), name="b", dtype=dtype)
    for lanes in (2, 3, 5, 8, 12, 16, 24, 48, 64):
        Mx = tc.compute((n,), lambda i: tc.max(A[i], B[i]), name="mx")
        Mn = tc.compute((n,), lambda i: tc.min(A[i], B[i]), name="mn")
        s = tc.create_schedule([Mx.op, Mn.op])
        for T in (Mx, Mn):
            _, xi = s[T].split(T.op.axis[0], factor=lanes)
            s[T].vectorize(xi)
        f = tc.build(s, [A, B, Mx, Mn])
        mx, mn = np.ones(n, dtype), np.ones(n, dtype)
        f(a, c, mx, mn)
        both_zero = (a == 0) & (c == 0)          # which zero: unspecified
        np.testing.assert_array_equal(mx[~both_zero], np.maximum(a, c)[~both_zero], str(lanes))
        np.testing.assert_array_equal(mn[~both_zero], np.minimum(a, c)[~both_zero], str(lanes))
        assert (mx[both_zero] == 0).all() and (mn[both_zero] == 0).all()


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 policy")
def test_lane_patterns_through_an_unrolled_loop():
    """A load whose lanes differ by constants only once the counter of an unrolled loop
    around is fixed (adaptive pooling's windows ``o * 50 // 7 + k`` over a row of
    unrolled vectors, ``o = (v * 16 + i) // 8``) is a load of the span and a shuffle in
    each unrolled copy, not a gather; and the right values (a serial loop: the gather)."""
    import tecomp as tc

    A = tc.placeholder((50,), name="A")
    B = tc.compute((56,), lambda f: A[(f // 8) * 50 // 7 + f % 8], name="B")
    got = []
    for unroll in (True, False):
        s = tc.create_schedule(B.op)
        vo, vi = s[B].split(B.op.axis[0], factor=16)
        if unroll:
            s[B].unroll(vo)
        s[B].vectorize(vi)
        f = tc.build(s, [A, B])
        assert ("llvm.masked.gather" in f.get_source("llvm-unopt")) != unroll
        a = np.random.default_rng(3).standard_normal(50).astype("float32")
        out = np.zeros(56, "float32")
        f(a, out)
        got.append(out)
    f_ = np.arange(56)
    np.testing.assert_array_equal(got[0], a[(f_ // 8) * 50 // 7 + f_ % 8])
    np.testing.assert_array_equal(got[1], got[0])


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 policy")
def test_masked_strided_loads_as_one_wide_load(monkeypatch):
    """A stride-2 load under a lane mask (a padded max pooling's first tap: lane 0 on
    the padding), with ``emit_memory.MASKED_WIDE_LOADS``: one masked load of the span and
    a shuffle instead of a gather; the same values as the gather, the padding's lanes
    its -inf."""
    import tecomp as tc
    from tecomp import nn
    from tecomp.codegen.llvm import emit_memory

    X = tc.placeholder((2, 3, 70), name="X")
    Y = nn.max_pool1d(X, 3, 2, 1)
    x = np.random.default_rng(4).standard_normal((2, 3, 70)).astype("float32")
    got = {}
    for on in (False, True):
        monkeypatch.setattr(emit_memory, "MASKED_WIDE_LOADS", on)
        f = tc.build(tc.auto_schedule([X, Y]), [X, Y])
        assert ("llvm.masked.gather" in f.get_source("llvm-unopt")) != on
        out = np.zeros((2, 3, 35), "float32")
        f(x, out)
        got[on] = out
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1)), constant_values=-np.inf)
    want = np.max([xp[..., k:k + 69:2] for k in range(3)], axis=0)
    np.testing.assert_array_equal(got[True], want)
    np.testing.assert_array_equal(got[False], want)


@pytest.mark.parametrize("cond", ["front", "back", "middle", "all"])
def test_masked_strided_loads_under_the_pragma(cond):
    """``pragma masked_wide_loads``: a stride-2 load under a lane mask in the nest is
    lane 0's own masked load and one masked load of the others' span (on between two
    lanes that are on) and a shuffle, not a gather (x86's policy); lanes off give the
    select's other value and read nothing: lane 0 would read X[-1], and where the last
    lanes are off ("back") the array ends before their elements."""
    import platform
    import tecomp as tc
    L = tc.target.cpu_model().lanes
    idx = np.arange(L)
    on = {"front": idx >= 1, "back": (idx >= 1) & (idx < L - 2),
          "middle": (idx >= 1) & ((idx < 3) | (idx >= L - 3)), "all": idx >= 1}[cond]
    n = 2 * L - 6 if cond == "back" else 2 * L - 1     # lane i reads X[2i - 1]
    X = tc.placeholder((n,), name="X")
    rule = {"front": lambda i: i >= 1, "back": lambda i: tc.all(i >= 1, i < L - 2),
            "middle": lambda i: tc.all(i >= 1, tc.any(i < 3, i >= L - 3)),
            "all": lambda i: i >= 1}[cond]
    Y = tc.compute((L,), lambda i: tc.select(rule(i), X[2 * i - 1], -7.0), name="Y")
    s = tc.create_schedule(Y.op)
    (i,) = s[Y].op.axis
    s[Y].vectorize(i)
    s[Y].pragma(i, "masked_wide_loads")
    f = tc.build(s, [X, Y])
    if platform.machine() in ("x86_64", "AMD64"):
        assert "llvm.masked.gather" not in f.get_source("llvm-unopt")
    x = np.arange(1, n + 1, dtype="float32")
    out = np.zeros(L, "float32")
    f(x, out)
    want = np.where(on, x[np.clip(2 * idx - 1, 0, n - 1)], -7.0)
    np.testing.assert_array_equal(out, want)


def test_fp_reciprocal_pragma_multiplies_by_one_reciprocal_per_row():
    """``pragma fp_reciprocal``: a division by a per-row value is ``x * (1 / s)`` (no
    vector division left in the optimised code), both rounded (the very bits), within 1 ulp of
    the quotient, some elements 1 ulp off (a second rounding); without the pragma, IEEE
    division; the pragma also holds on a one-iteration loop."""
    import tecomp as tc

    for rows in (8, 1):
        X = tc.placeholder((rows, 64), name="x")
        S = tc.placeholder((rows,), name="s")
        Y = tc.compute((rows, 64), lambda i, j: X[i, j] / S[i], name="y")
        x = np.random.default_rng(rows).random((rows, 64)).astype("float32") + 1
        sv = np.random.default_rng(9).random(rows).astype("float32") * 7 + 3
        outs = []
        for rcp in (False, True):
            s = tc.create_schedule(Y.op)
            jo, ji = s[Y].split(Y.op.axis[1], factor=16)
            s[Y].vectorize(ji)
            if rcp:
                s[Y].pragma(Y.op.axis[0], "fp_reciprocal")
            assert ("pragma_fp_reciprocal" in str(tc.lower(s, [X, S, Y]))) == rcp
            m = tc.build(s, [X, S, Y])
            assert ("fdiv <16 x float>" in m.get_source("llvm")) != rcp
            outs.append(np.empty_like(x))
            m(x, sv, outs[-1])
        np.testing.assert_array_equal(outs[0], x / sv[:, None])
        np.testing.assert_array_max_ulp(outs[1], outs[0], maxulp=1)
        assert (outs[1] != outs[0]).any()
        assert np.array_equal(outs[1], (x * (np.float32(1) / sv)[:, None]).astype("float32"))



@pytest.mark.parametrize("first", ["==", "!=", "<", "<=", ">", ">="])
def test_vector_select_on_an_or_of_float_compares_is_nan_exact(first):
    """A vector select on ``(a op1 b) | (c op2 d)`` with both operands evaluated is
    emitted as the select on the and of the negated compares, operands swapped
    (``emit_expr.INVERT_OR_SELECTS``); every pair of compares, with NaN on either side of
    each, equal values and infinities, answers as numpy does, switch on or off."""
    kinds = {"==": (EQ, np.equal), "!=": (NE, np.not_equal), "<": (LT, np.less),
             "<=": (LE, np.less_equal), ">": (GT, np.greater), ">=": (GE, np.greater_equal)}
    vals = np.array([np.nan, -np.inf, -1.0, 0.0, 1.0, np.inf], np.float32)
    a, b = (x.ravel().astype(np.float32) for x in np.meshgrid(vals, vals))
    a, b = np.tile(a, 3), np.tile(b, 3)        # 108 lanes: whole vectors and a tail
    cc, dd = np.roll(a, 7), np.roll(b, 13)
    n = a.size
    A, B, C, D, E = (buf(nm, (n,)) for nm in "ABCDE")
    i = Var("i")
    for second in kinds:
        (K1, f1), (K2, f2) = kinds[first], kinds[second]
        cond = Or(K1(ld(A, i), ld(B, i)), K2(ld(C, i), ld(D, i)))
        want = np.where(f1(a, b) | f2(cc, dd), a, b)
        for inverted in (True, False):
            old = emit_expr.INVERT_OR_SELECTS
            emit_expr.INVERT_OR_SELECTS = inverted
            try:
                body = loop(i, n, st(E, Select(cond, ld(A, i), ld(B, i), "float32"), i),
                            "vectorized")
                m = build_llvm(PrimFunc("sel_or", (A, B, C, D, E), body))
            finally:
                emit_expr.INVERT_OR_SELECTS = old
            ll = m.get_source("ll")
            assert (" or <" not in ll) == inverted, ll
            out = np.zeros(n, np.float32)
            m(a, b, cc, dd, out)
            np.testing.assert_array_equal(out, want, err_msg=f"{first} | {second}")


def test_has_load_memo_is_by_identity_not_address():
    """The select speculation asks whether an operand loads; the answer is memoised per
    expression.  Keyed by address alone, an expression dropped during emission passed its
    answer to the next one made at the same address: a load judged load-free is
    speculated (a padded read out of bounds), or the reverse."""
    from tecomp.codegen.llvm.module import _ModuleBuilder
    from tecomp.ir.expr import Add, Buffer, BufferLoad, Const

    buf = Buffer("A", (Const(4, "int32"),), "float32")
    one = Const(1.0, "float32")
    mb = object.__new__(_ModuleBuilder)
    mb._has_load = {}
    for k in range(200):
        e = Add(BufferLoad(buf, (Const(k % 4, "int32"),), "float32"), one, "float32")
        assert mb.has_load(e)
        del e
        f = Add(Const(float(k), "float32"), one, "float32")  # the same node type, no load
        assert not mb.has_load(f), k
        del f
    # (without the fix this failed at k = 0: CPython gave ``f`` the address ``e`` had)


@pytest.mark.parametrize("step,n", [(8, 7), (3, 5), (5, 12)])
def test_strided_reads_of_a_local_row_load_its_stored_registers(step, n):
    """A vector read of every ``step``-th element of this function's own stack buffer
    at a constant offset (a window's taps from a local row of partial results: adaptive
    max pooling 50 -> 7 reads every 8th) is a load of the whole register-wide pieces the
    row was stored in and a shuffle, not a gather (nor a load across two stores); the
    right values where the row ends inside a register."""
    import tecomp as tc

    W = step * n
    A = tc.placeholder((4, W), name="A")
    R = tc.compute((4, W), lambda r, j: A[r, j] * 2.0, name="R")
    k = tc.reduce_axis((0, step), name="k")
    B = tc.compute((4, n), lambda r, j: tc.max(R[r, j * step + k], axis=k), name="B")
    s = tc.create_schedule(B.op)
    r, j = s[B].op.axis
    s[B].reorder(r, s[B].op.reduce_axis[0], j)
    s[B].unroll(s[B].op.reduce_axis[0])
    s[B].vectorize(j)
    s[R].set_scope("local")
    s[R].compute_at(s[B], r)
    L = tc.target.cpu_model().lanes
    jo, ji = s[R].split(s[R].op.axis[-1], factor=L)
    s[R].unroll(jo)
    s[R].vectorize(ji)
    f = tc.build(s, [A, B])
    assert "llvm.masked.gather" not in f.get_source("llvm-unopt")
    a = np.random.default_rng(5).standard_normal((4, W)).astype("float32")
    out = np.zeros((4, n), "float32")
    f(a, out)
    np.testing.assert_array_equal(out, (2 * a).reshape(4, n, step).max(-1))


@pytest.mark.parametrize("n,shift", [(3, 1), (2, 2), (5, 3)])
def test_shifted_reads_of_a_local_row_load_its_stored_registers(n, shift):
    """A contiguous vector read of this function's own stack buffer at a constant offset
    across two of the registers it was stored in (a stride-1 window's taps from its row
    of column sums, ``emit_memory.PRIVATE_SHIFTED_LOADS``) is those registers and a
    shuffle, not a load across two stores; where the row was stored at offsets that are
    not known to be whole registers (a loop's), plain loads.  The right values either way, the row ending inside
    a register."""
    import tecomp as tc
    from tecomp.codegen.llvm import emit_memory

    L = tc.target.cpu_model().lanes
    W, K = n * L + 3, 3
    A = tc.placeholder((4, W + K - 1 + shift), name="A")
    a = np.random.default_rng(6).standard_normal((4, W + K - 1 + shift)).astype("float32")
    want = np.stack([2 * a[:, shift + k:shift + k + W] for k in range(K)]).sum(0)

    def build(loop_stores: bool):
        # R's row stored in registers at constant offsets, or in a loop's (not known)
        R = tc.compute((4, W + K - 1), lambda r, j: A[r, j + shift] * 2.0, name="R")
        k = tc.reduce_axis((0, K), name="k")
        B = tc.compute((4, W), lambda r, j: tc.sum(R[r, j + k], axis=k), name="B")
        s = tc.create_schedule(B.op)
        r, j = s[B].op.axis
        jo, ji = s[B].split(j, factor=L)
        s[B].reorder(r, jo, s[B].op.reduce_axis[0], ji)
        s[B].unroll(jo)
        s[B].unroll(s[B].op.reduce_axis[0])
        s[B].vectorize(ji)
        s[R].set_scope("local")
        s[R].compute_at(s[B], r)
        ro, ri = s[R].split(s[R].op.axis[-1], factor=L)
        if not loop_stores:
            s[R].unroll(ro)
        s[R].vectorize(ri)
        return tc.build(s, [A, B])

    shuffles = {}
    for on in (False, True):
        old = emit_memory.PRIVATE_SHIFTED_LOADS
        emit_memory.PRIVATE_SHIFTED_LOADS = on
        try:
            for loop_stores in (False, True):
                f = build(loop_stores)
                shuffles[on, loop_stores] = f.get_source("llvm-unopt").count(
                    "shufflevector")
                out = np.zeros((4, W), "float32")
                f(a, out)
                np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)
        finally:
            emit_memory.PRIVATE_SHIFTED_LOADS = old
    assert shuffles[True, False] > shuffles[False, False], shuffles
    assert shuffles[True, True] == shuffles[False, True], shuffles


@pytest.mark.parametrize("op", ["sum", "max"])
def test_pragma_vector_bytes_compiles_for_narrower_registers(op):
    """A kernel under ``pragma vector_bytes`` 32, compiled (not run) for Zen 4 (AVX-512):
    no ``zmm`` register anywhere (AVX2's policy: its max/min instructions at 256 bits;
    LLVM's "prefer-vector-width" and "min-legal-vector-width" on every function), the
    loop's loads ``ymm``; without the pragma the same schedule reads ``zmm``; on a CPU
    with 256-bit registers (haswell) the pragma changes nothing."""
    import tecomp as tc
    from tecomp import nn

    X = tc.placeholder((64, 1024), "float32", name="X")
    Y = getattr(nn, op)(X, axis=-1)

    def asm(target, pragma):
        s = tc.create_schedule(Y.op)
        k = s[Y].op.reduce_axis[0]
        ko, ki = s[Y].split(k, factor=32)
        rf = s.rfactor(Y, ki)
        s[rf].vectorize(s[rf].op.axis[-1])
        s[Y].parallel(s[Y].op.axis[0])
        s[rf].compute_at(s[Y], s[Y].op.axis[0])
        if pragma:
            s[Y].pragma(s[Y].op.axis[0], "vector_bytes", 32)
        return tc.build(s, [X, Y], target=target).get_source("asm")

    wide = "llvm -mtriple=x86_64-linux-gnu -mcpu=znver4"   # (skylake-avx512: 256 preferred)
    narrow = asm(wide, True)
    assert "zmm" not in narrow and "ymm" in narrow, narrow
    assert "zmm" in asm(wide, False)
    avx2 = "llvm -mtriple=x86_64-linux-gnu -mcpu=haswell"
    assert asm(avx2, True) == asm(avx2, False)


def test_fused_counter_addressed_by_the_flat_offset(monkeypatch):
    """An access whose indices divide a fused loop's counter back into its axes
    (``f // 10``, ``f % 10``) is addressed by the flattened offset, simplified (``f``),
    with ``emit_memory.FLAT_FUSED_OFFSETS``: no division left in the optimized IR of a
    parallel task (whose counter's range LLVM does not know); the same values."""
    import tecomp as tc
    from tecomp.codegen.llvm import emit_memory

    X = tc.placeholder((6, 10), name="X")
    Y = tc.compute((6, 10), lambda i, j: X[i, j] * 2.0 + 1.0, name="Y")
    s = tc.create_schedule(Y.op)
    s[Y].parallel(s[Y].fuse(*s[Y].op.axis))
    x = np.random.default_rng(5).standard_normal((6, 10)).astype("float32")
    for on in (False, True):
        monkeypatch.setattr(emit_memory, "FLAT_FUSED_OFFSETS", on)
        ll = tc.build(s, [X, Y], target="llvm -mtriple=x86_64-linux-gnu -mcpu=znver4") \
            .get_source("llvm")
        divs = re.findall(r"= [su](?:div|rem) i\d+ %[\w.]+, 10\b", ll)
        assert bool(divs) != on, divs
        out = np.zeros((6, 10), "float32")
        tc.build(s, [X, Y])(x, out)
        np.testing.assert_array_equal(out, x * 2 + 1)


@pytest.mark.parametrize("fill", [0.0, -np.inf])
def test_masked_load_filled_with_the_select_constant(monkeypatch, fill):
    """A vector select of a load (whose masked-off lanes it may not read) and a constant
    (a padded window's tap) is one masked load whose masked-off lanes are that constant
    (``emit_expr.FILL_MASKED_LOADS``): its pass-through holds the constant and nothing
    puts it in after the load (where it was filled with zeros, then the lane replaced);
    the same values either way, NaN and -0.0 in the data."""
    import tecomp as tc

    X = tc.placeholder((4, 16), name="X")
    Y = tc.compute((4, 16), lambda i, j: tc.if_then_else(
        j >= 1, X[i, j - 1], tc.const(fill, "float32")), name="Y")
    s = tc.create_schedule(Y.op)
    s[Y].vectorize(s[Y].op.axis[1])
    x = np.random.default_rng(7).standard_normal((4, 16)).astype("float32")
    x[0, 3], x[1, 0], x[2, 14] = np.nan, -0.0, np.inf
    want = np.concatenate([np.full((4, 1), fill, "float32"), x[:, :-1]], axis=1)
    const = "0.000000e+00" if fill == 0 else "0xFFF0000000000000"
    for on in (False, True):
        monkeypatch.setattr(emit_expr, "FILL_MASKED_LOADS", on)
        ll = tc.build(s, [X, Y], target="llvm -mtriple=x86_64-linux-gnu -mcpu=znver4") \
            .get_source("llvm")
        through = re.findall(r"llvm\.masked\.load\.v16f32\.p0\(ptr [^,]*, <16 x i1> <[^>]*>, "
                             r"<16 x float> (poison|<float ([^,]*),)", ll)
        after = re.findall(r"= (?:select|and|insertelement|shufflevector) <16 x float>", ll)
        assert through and all((t[1] == const) == on for t in through), through
        assert bool(after) != on, after
        out = np.zeros((4, 16), "float32")
        tc.build(s, [X, Y])(x, out)
        np.testing.assert_array_equal(out.view(np.uint32), want.view(np.uint32))
