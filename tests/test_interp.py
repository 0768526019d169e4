"""Tests of the reference interpreter (tecomp.ir.interp), on hand-built loop IR.

Each test states the rule it pins; references are numpy or Python computed independently
of the interpreter's own formulas.
"""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tecomp.errors import ArgumentError, BoundsError, ExprError, InternalError, LowerError
from tecomp.ir import (
    EQ, GT, LT, NE, Add, Allocate, And, AssertStmt, AttrStmt, Buffer, BufferLoad, BufferStore,
    Call, Cast, Const, Div, Evaluate, FloorDiv, FloorMod, For, IfThenElse, Let, LetStmt, Max,
    Min, Mul, Not, Or, PrimFunc, ProducerLoad, Select, Sub, TruncDiv, TruncMod, Var, op, seq,
)
from tecomp.ir.interp import (
    GPUModelError, Interpreter, RaceError, eval_expr, poison_value, run, run_stmt,
)


# --------------------------------------------------------------------------- helpers
def c(v, dtype="int32"):
    return Const(v, dtype)


def f32(v):
    return Const(float(v), "float32")


def load(buf, *idx):
    return BufferLoad(buf, tuple(op.as_expr(i) if not hasattr(i, "dtype") else i for i in idx),
                      buf.dtype)


def store(buf, value, *idx):
    return BufferStore(buf, value, tuple(idx))


def loop(var, extent, body, kind="serial", tag="", lo=0):
    return For(var, c(lo) if isinstance(lo, int) else lo,
               c(extent) if isinstance(extent, int) else extent, kind, body, tag)


def buf(name, shape, dtype="float32", scope="global"):
    return Buffer(name, tuple(c(s) if isinstance(s, int) else s for s in shape), dtype,
                  scope=scope)


SYNC = Evaluate(Call("syncthreads", (), "int32"))


def scalar_fn(expr, out_dtype=None, params=()):
    """A PrimFunc storing ``expr`` into out[0]."""
    out = buf("out", (1,), out_dtype or expr.dtype)
    return PrimFunc("scalar", (*params, out), store(out, expr, c(0))), out


def value_of(expr, *scalars, params=(), out_dtype=None):
    f, out = scalar_fn(expr, out_dtype, params=params)
    res = np.zeros(1, dtype=out.dtype)
    run(f, *scalars, res)
    return res[0]


# --------------------------------------------------------------------------- basics
def test_elementwise_add_with_symbolic_shape():
    n = Var("n")
    A, B, C = (Buffer(x, (n,), "float32") for x in "ABC")
    i = Var("i")
    f = PrimFunc("add", (A, B, C), loop(i, n, store(C, load(A, i) + load(B, i), i)))
    for size in (1, 7, 33):
        a = np.random.rand(size).astype(np.float32)
        b = np.random.rand(size).astype(np.float32)
        out = np.zeros(size, np.float32)
        run(f, a, b, out)
        np.testing.assert_array_equal(out, a + b)  # one float32 add each: bit-exact


def _matmul(n, m, kk, dtype="float32"):
    A, B, C = buf("A", (n, kk), dtype), buf("B", (kk, m), dtype), buf("C", (n, m), dtype)
    i, j, k = Var("i"), Var("j"), Var("k")
    body = loop(i, n, loop(j, m, seq(
        store(C, Const(0.0, dtype), i, j),
        loop(k, kk, store(C, load(C, i, j) + load(A, i, k) * load(B, k, j), i, j)))))
    return PrimFunc("matmul", (A, B, C), body)


def test_matmul_matches_numpy_and_a_float32_loop():
    f = _matmul(16, 12, 16)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((16, 16)).astype(np.float32)
    b = rng.standard_normal((16, 12)).astype(np.float32)
    out = np.full((16, 12), 7.0, np.float32)
    run(f, a, b, out)
    np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)
    ref = np.zeros((16, 12), np.float32)
    for k in range(16):  # the same order of float32 operations, done by numpy
        ref = (ref + a[:, k:k + 1] * b[k:k + 1, :]).astype(np.float32)
    np.testing.assert_array_equal(out, ref)


def test_float32_accumulation_rounds_at_every_step():
    # 1 + 2**-25 rounds back to 1 in float32, so sixteen such steps leave 1.0; a float64
    # accumulator would end at 1 + 2**-21 (representable in float32).
    f = _matmul(1, 1, 17)
    a = np.ones((1, 17), np.float32)
    b = np.array([[1.0]] + [[2.0 ** -25]] * 16, np.float32)
    out = np.zeros((1, 1), np.float32)
    run(f, a, b, out)
    assert out[0, 0] == 1.0
    assert np.float32(1.0 + 16 * 2.0 ** -25) != 1.0  # what float64 accumulation would give
    # in float64 the same program does accumulate the small terms
    f64 = _matmul(1, 1, 17, "float64")
    out64 = np.zeros((1, 1))
    run(f64, a.astype(np.float64), b.astype(np.float64), out64)
    assert out64[0, 0] == 1.0 + 16 * 2.0 ** -25


# --------------------------------------------------------------------------- integers
def test_int8_wraps():
    x = Var("x", "int8")
    assert value_of(Add(x, c(1, "int8"), "int8"), 127, params=(x,)) == -128
    assert value_of(Sub(x, c(1, "int8"), "int8"), -128, params=(x,)) == 127
    assert value_of(Mul(x, c(2, "int8"), "int8"), 100, params=(x,)) == -56
    u = Var("u", "uint8")
    assert value_of(Sub(u, c(1, "uint8"), "uint8"), 0, params=(u,)) == 255
    assert value_of(Call("abs", (x,), "int8"), -128, params=(x,)) == -128


_INT_DTYPES = ["int8", "int16", "int32", "int64", "uint8"]


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(_INT_DTYPES), st.integers(-(2 ** 63), 2 ** 63 - 1),
       st.integers(-(2 ** 63), 2 ** 63 - 1))
def test_int_arithmetic_wraps_like_numpy(dtype, a, b):
    info = np.iinfo(dtype)
    a = int(np.array(a).astype(np.int64).astype(dtype))  # any value of the dtype
    b = int(np.array(b).astype(np.int64).astype(dtype))
    x, y = Var("x", dtype), Var("y", dtype)
    na, nb = np.array([a], dtype), np.array([b], dtype)
    with np.errstate(over="ignore"):
        for node, ref in ((Add, na + nb), (Sub, na - nb), (Mul, na * nb)):
            got = value_of(node(x, y, dtype), a, b, params=(x, y))
            assert got == ref[0], (node.__name__, dtype, a, b)
    assert info.min <= got <= info.max


def _c_trunc(a, b):
    r = int(math.fmod(a, b))  # fmod is exact; C's % has the sign of the dividend
    return (a - r) // b, r


@settings(max_examples=80, deadline=None)
@given(st.integers(-(2 ** 31), 2 ** 31 - 1), st.integers(-(2 ** 31), 2 ** 31 - 1))
def test_floor_and_trunc_division_match_python_and_c(a, b):
    if b == 0:
        return
    x, y = Var("x"), Var("y")
    vals = (a, b)
    wrap = lambda v: int(np.array([v], np.int64).astype(np.int32)[0])  # noqa: E731
    assert value_of(FloorDiv(x, y, "int32"), *vals, params=(x, y)) == wrap(a // b)
    assert value_of(FloorMod(x, y, "int32"), *vals, params=(x, y)) == a % b
    q, r = _c_trunc(a, b)
    assert value_of(TruncDiv(x, y, "int32"), *vals, params=(x, y)) == wrap(q)
    assert value_of(TruncMod(x, y, "int32"), *vals, params=(x, y)) == r


@pytest.mark.parametrize("a,b", [(-7, 2), (7, -2), (-7, -2), (-1, 3), (-6, 3)])
def test_floor_vs_trunc_on_negative_values(a, b):
    x, y = Var("x"), Var("y")
    fd = value_of(FloorDiv(x, y, "int32"), a, b, params=(x, y))
    td = value_of(TruncDiv(x, y, "int32"), a, b, params=(x, y))
    fm = value_of(FloorMod(x, y, "int32"), a, b, params=(x, y))
    tm = value_of(TruncMod(x, y, "int32"), a, b, params=(x, y))
    assert (fd, fm) == (a // b, a % b)
    assert td == int(a / b) and tm == a - b * int(a / b)


def test_integer_division_by_zero_and_overflow_raise():
    x, y = Var("x"), Var("y")
    for node in (FloorDiv, FloorMod, TruncDiv, TruncMod):
        with pytest.raises(ExprError, match=r"integer division by zero in "):
            value_of(node(x, y, "int32"), 5, 0, params=(x, y))
    # the one overflowing quotient wraps like all integer arithmetic
    for node, want in ((FloorDiv, -(2 ** 31)), (TruncDiv, -(2 ** 31)), (FloorMod, 0),
                       (TruncMod, 0)):
        assert value_of(node(x, y, "int32"), -(2 ** 31), -1, params=(x, y)) == want
    b, d = Var("b", "int8"), Var("d", "int8")
    assert value_of(FloorDiv(b, d, "int8"), -128, -1, params=(b, d)) == -128


def test_float_division_by_zero_is_ieee():
    x, y = Var("x", "float32"), Var("y", "float32")
    d = Div(x, y, "float32")
    assert value_of(d, 1.0, 0.0, params=(x, y)) == np.inf
    assert value_of(d, -1.0, 0.0, params=(x, y)) == -np.inf
    assert value_of(d, 1.0, -0.0, params=(x, y)) == -np.inf
    assert np.isnan(value_of(d, 0.0, 0.0, params=(x, y)))


# --------------------------------------------------------------------------- casts
def test_casts():
    x = Var("x", "float32")
    i = Var("i", "int32")
    assert value_of(Cast(x, "int32"), -2.7, params=(x,)) == -2
    assert value_of(Cast(x, "int32"), 2.7, params=(x,)) == 2
    assert value_of(Cast(x, "int8"), 300.0, params=(x,)) == 44  # truncated, then wrapped
    assert value_of(Cast(i, "int8"), 200, params=(i,)) == -56
    assert value_of(Cast(i, "uint8"), -1, params=(i,)) == 255
    assert value_of(Cast(i, "bool"), 5, params=(i,)) is np.True_
    assert value_of(Cast(i, "bool"), 0, params=(i,)) is np.False_
    assert value_of(Cast(x, "bool"), float("nan"), params=(x,)) is np.True_
    assert value_of(Cast(Cast(i, "bool"), "int32"), 7, params=(i,)) == 1
    d = Var("d", "float64")
    assert value_of(Cast(d, "float32"), 0.1, params=(d,)) == np.float32(0.1)
    assert value_of(Cast(d, "float32"), 1e300, params=(d,)) == np.inf
    big = Var("big", "int64")
    v = 2 ** 62 + 2 ** 38 + 1  # needs correct rounding straight from int64
    assert value_of(Cast(big, "float32"), v, params=(big,)) == np.array(v).astype(np.float32)
    with pytest.raises(ExprError, match="undefined"):
        value_of(Cast(x, "int32"), float("nan"), params=(x,))


# --------------------------------------------------------------------------- float16
def test_float16_const_and_cast_round_to_half_precision():
    x = Var("x", "float32")
    d = Var("d", "float64")
    # results are stored into a float32 buffer: the rounding seen is the Cast's
    f32out = dict(out_dtype="float32")
    assert value_of(Cast(x, "float16"), 0.1, params=(x,), **f32out) == float(np.float16(0.1))
    assert value_of(Cast(x, "float16"), 70000.0, params=(x,), **f32out) == np.inf
    v = 1.0 + 2.0 ** -11 + 2.0 ** -40  # just above a float16 tie: rounds up from double
    assert value_of(Cast(d, "float16"), v, params=(d,), **f32out) == 1.0 + 2.0 ** -10
    # ... but (float)v is the tie 1 + 2**-11, which rounds to even (1.0) in half
    assert value_of(Cast(Cast(d, "float32"), "float16"), v, params=(d,), **f32out) == 1.0
    i = Var("i")
    assert value_of(Cast(i, "float16"), 2049, params=(i,), **f32out) == 2048.0
    # a float16 constant is the nearest float16; arithmetic on it runs in float32
    got = value_of(Add(Cast(x, "float16"), Const(0.1, "float16"), "float16"), 1.0,
                   params=(x,), out_dtype="float32")
    assert got == np.float32(1.0) + np.float32(np.float16(0.1))
    assert got != np.float32(np.float16(got))  # not rounded to half after the add


def test_float16_is_storage_only():
    n = 4
    A = buf("A", (n,), "float16")
    H, F = buf("H", (n,), "float16"), buf("F", (n,), "float32")
    i = Var("i")
    # A[i] + 1 is computed in float32; only the store into a float16 buffer rounds.
    val = Add(load(A, i), Const(1.0, "float16"), "float16")
    f = PrimFunc("h", (A, H, F), loop(i, n, seq(store(H, val, i), store(F, val, i))))
    a = np.array([2048, 0.1, 3.3, -7.77], np.float16)
    h, fl = np.zeros(n, np.float16), np.zeros(n, np.float32)
    run(f, a, h, fl)
    ref32 = a.astype(np.float32) + np.float32(1.0)
    np.testing.assert_array_equal(fl, ref32)
    np.testing.assert_array_equal(h, ref32.astype(np.float16))
    assert fl[0] == 2049.0 and h[0] == 2048.0  # 2049 needs more than float16's 11 bits


# --------------------------------------------------------------------------- floats
def test_nan_propagates_in_min_max_and_comparisons():
    x, y = Var("x", "float32"), Var("y", "float32")
    nan = float("nan")
    for node in (Max, Min):
        assert np.isnan(value_of(node(x, y, "float32"), nan, 1.0, params=(x, y)))
        assert np.isnan(value_of(node(x, y, "float32"), 1.0, nan, params=(x, y)))
    assert value_of(Max(x, y, "float32"), 1.0, 2.0, params=(x, y)) == 2.0
    assert value_of(Min(x, y, "float32"), 1.0, 2.0, params=(x, y)) == 1.0
    for cmp, expect in ((LT, False), (GT, False), (EQ, False), (NE, True)):
        assert bool(value_of(cmp(x, y), nan, 1.0, params=(x, y))) is expect


def test_intrinsics_are_exact_in_their_dtype():
    x = Var("x", "float32")
    xs = [0.3, -1.7, 2.5, 3.5, 10.0]
    ref = {
        "exp": np.exp, "fast_exp": np.exp, "tanh": np.tanh, "sin": np.sin, "cos": np.cos,
        "sigmoid": lambda v: 1.0 / (1.0 + np.exp(-v)), "erf": np.vectorize(math.erf),
        "floor": np.floor, "ceil": np.ceil, "round": np.round, "abs": np.abs,
    }
    for name, fn in ref.items():
        for v in xs:
            got = value_of(Call(name, (x,), "float32"), v, params=(x,))
            want = np.float32(fn(np.float64(np.float32(v))))
            assert got == want, (name, v)
    assert value_of(Call("round", (x,), "float32"), 2.5, params=(x,)) == 2.0  # half to even
    assert value_of(Call("round", (x,), "float32"), -0.5, params=(x,)) == 0.0
    assert value_of(Call("sqrt", (x,), "float32"), 2.0, params=(x,)) == np.float32(math.sqrt(2))
    assert value_of(Call("rsqrt", (x,), "float32"), 4.0, params=(x,)) == 0.5
    assert value_of(Call("log", (x,), "float32"), 0.0, params=(x,)) == -np.inf
    assert np.isnan(value_of(Call("sqrt", (x,), "float32"), -1.0, params=(x,)))
    y = Var("y", "float32")
    assert value_of(Call("pow", (x, y), "float32"), 2.0, 10.0, params=(x, y)) == 1024.0
    assert value_of(Call("exp", (x,), "float32"), 100.0, params=(x,)) == np.inf  # overflows f32


# --------------------------------------------------------------------------- laziness
def test_select_is_lazy_and_and_is_not():
    n = 5
    A, B = buf("A", (n,)), buf("B", (n,))
    i = Var("i")
    guarded = op.if_then_else(i >= 1, load(A, i - 1), f32(0))
    f = PrimFunc("shift", (A, B), loop(i, n, store(B, guarded, i)))
    a = np.arange(1, n + 1, dtype=np.float32)
    b = np.zeros(n, np.float32)
    run(f, a, b)  # the load A[-1] is never evaluated
    np.testing.assert_array_equal(b, [0, 1, 2, 3, 4])
    # And evaluates both sides (it is pure): the same guard there does not protect the load.
    cond = And(op.compare(GT, i, 0), op.compare(GT, load(A, i - 1), f32(0)))
    g = PrimFunc("and", (A, B), loop(i, n, store(B, Select(cond, f32(1), f32(0), "float32"), i)))
    with pytest.raises(BoundsError, match=r"load from A\[-1\]"):
        run(g, a, b)


def test_if_then_else_let_and_attr():
    n = 6
    A = buf("A", (n,), "int32")
    i, t = Var("i"), Var("t")
    body = loop(i, n, AttrStmt("pragma", "x", LetStmt(t, i * 3, IfThenElse(
        op.floormod(i, 2).equal(0),
        store(A, Let(Var("u"), t + 1, t, "int32") + t, i),
        store(A, c(-1), i)))))
    a = np.zeros(n, np.int32)
    run(PrimFunc("f", (A,), body), a)
    np.testing.assert_array_equal(a, [0, -1, 12, -1, 24, -1])


def test_assert_stmt_raises_with_its_message():
    n = Var("n")
    A = buf("A", (4,), "int32")
    f = PrimFunc("f", (n, A), AssertStmt(n < 4, "n must be below 4", store(A, c(1), n)))
    a = np.zeros(4, np.int32)
    run(f, 3, a)
    assert a[3] == 1
    with pytest.raises(BoundsError, match="n must be below 4"):
        run(f, 4, a)


# --------------------------------------------------------------------------- bounds
def test_out_of_bounds_load_names_buffer_dimension_value_extent_and_ir():
    A, B = buf("A", (4, 8)), buf("B", (4, 8))
    i, j = Var("i"), Var("j")
    f = PrimFunc("f", (A, B), loop(i, 4, loop(j, 8, store(B, load(A, i, j + 1), i, j))))
    a, b = np.zeros((4, 8), np.float32), np.zeros((4, 8), np.float32)
    with pytest.raises(BoundsError) as ei:
        run(f, a, b)
    msg = str(ei.value)
    assert msg.startswith("load from A[0, 8] out of bounds: index 1 = 8 is outside [0, 8) in: "
                          "A[i, j + 1]")
    assert "B[i, j] = A[i, j + 1]" in msg and "i = 0, j = 7" in msg


def test_out_of_bounds_store_raises():
    C = buf("C", (64, 64))
    i, j = Var("i"), Var("j")
    f = PrimFunc("f", (C,), loop(i, 64, loop(j, 64, store(C, f32(1), i, j + 1))))
    with pytest.raises(BoundsError, match=r"store to C\[0, 64\] out of bounds: index 1 = 64 is "
                                          r"outside \[0, 64\) in: C\[i, j \+ 1\] = 1f"):
        run(f, np.zeros((64, 64), np.float32))


def test_check_bounds_false_resolves_row_major_like_compiled_code():
    A, B = buf("A", (3, 4)), buf("B", (3, 4))
    i, j = Var("i"), Var("j")
    # B[i, j] = A[i, j + 1] reads A[i + 1, 0] at j = 3 in compiled code.
    f = PrimFunc("f", (A, B), loop(i, 2, loop(j, 4, store(B, load(A, i, j + 1), i, j))))
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = np.zeros((3, 4), np.float32)
    run(f, a, b, check_bounds=False)
    np.testing.assert_array_equal(b[:2], a.reshape(-1)[1:9].reshape(2, 4))
    g = PrimFunc("g", (A, B), loop(i, 3, loop(j, 4, store(B, load(A, i, j + 1), i, j))))
    with pytest.raises(BoundsError, match=r"A\[2, 4\] .*offset 12 is outside"):
        run(g, a, b, check_bounds=False)  # past the end of the whole buffer


# --------------------------------------------------------------------------- arguments
def test_symbolic_shapes_bind_and_check():
    n, m = Var("n"), Var("m")
    A = Buffer("A", (n, m), "float32")
    B = Buffer("B", (op.mul(n, 2), m), "float32")
    i, j = Var("i"), Var("j")
    body = loop(i, n, loop(j, m, seq(store(B, load(A, i, j), i, j),
                                     store(B, load(A, i, j) * f32(2), i + n, j))))
    f = PrimFunc("f", (A, B), body)
    a = np.random.rand(3, 5).astype(np.float32)
    b = np.zeros((6, 5), np.float32)
    run(f, a, b)
    np.testing.assert_array_equal(b, np.concatenate([a, a * 2]))
    with pytest.raises(ArgumentError, match=r"argument B .*n\*2, m\) = \(6, 5\), got \(5, 5\)"):
        run(f, a, np.zeros((5, 5), np.float32))
    with pytest.raises(ArgumentError, match=r"argument B .*dimension 1 is m = 5"):
        run(f, a, np.zeros((6, 4), np.float32))


def test_argument_errors_name_the_parameter():
    n = Var("n")
    A, B = buf("A", (4,)), buf("B", (4,))
    i = Var("i")
    f = PrimFunc("f", (A, n, B), loop(i, n, store(B, load(A, i), i)))
    a, b = np.zeros(4, np.float32), np.zeros(4, np.float32)
    run(f, a, np.int64(4), b)
    with pytest.raises(ArgumentError, match=r"f takes 3 argument\(s\) \(A, n, B\), got 2"):
        run(f, a, b)
    with pytest.raises(ArgumentError, match="argument A of f must have dtype float32, got float64"):
        run(f, np.zeros(4), 4, b)
    with pytest.raises(ArgumentError, match="argument B of f must have 1 dimension"):
        run(f, a, 4, np.zeros((4, 1), np.float32))
    with pytest.raises(ArgumentError, match="argument A of f must have shape"):
        run(f, np.zeros(5, np.float32), 4, b)
    with pytest.raises(ArgumentError, match="argument A of f must be a numpy array"):
        run(f, [0.0] * 4, 4, b)
    with pytest.raises(ArgumentError, match="argument n of f .* must be an integer"):
        run(f, a, 4.0, b)
    with pytest.raises(ArgumentError, match="does not fit in int32"):
        run(f, a, 2 ** 40, b)
    ro = np.zeros(4, np.float32)
    ro.flags.writeable = False
    with pytest.raises(ArgumentError, match="argument B of f is written .* read-only"):
        run(f, a, 4, ro)


def test_non_contiguous_views_are_indexed_logically():
    A, B = buf("A", (3, 4)), buf("B", (3, 4))
    i, j = Var("i"), Var("j")
    f = PrimFunc("f", (A, B), loop(i, 3, loop(j, 4, store(B, load(A, i, j) + f32(1), i, j))))
    big = np.arange(48, dtype=np.float32).reshape(6, 8)
    out = np.zeros((8, 6), np.float32)
    run(f, big[::2, 1::2], out.T[1:4, 2:6])
    np.testing.assert_array_equal(out.T[1:4, 2:6], big[::2, 1::2] + 1)
    assert out.sum() == (big[::2, 1::2] + 1).sum()  # nothing else was touched


def test_unbound_variable_is_reported():
    A = buf("A", (4,))
    k = Var("k")
    f = PrimFunc("f", (A,), store(A, f32(0), k))
    with pytest.raises(LowerError, match="variable k is used but not bound"):
        run(f, np.zeros(4, np.float32))


# --------------------------------------------------------------------------- memory
def test_uninitialized_allocate_reads_poison():
    n = 4
    T = buf("T", (n,), "float32", scope="local")
    Ti = buf("Ti", (n,), "int32", scope="local")
    B, Bi = buf("B", (n,)), buf("Bi", (n,), "int32")
    i = Var("i")
    body = Allocate(T, Allocate(Ti, seq(
        store(T, f32(1), c(0)), store(Ti, c(1), c(0)),
        loop(i, n, seq(store(B, load(T, i), i), store(Bi, load(Ti, i), i))))))
    b, bi = np.zeros(n, np.float32), np.zeros(n, np.int32)
    run(PrimFunc("f", (B, Bi), body), b, bi)
    assert b[0] == 1 and np.isnan(b[1:]).all()
    assert bi[0] == 1 and (bi[1:] == 0x5A5A5A5A).all() and poison_value("int8") == 0x5A


# --------------------------------------------------------------------------- loops
def test_parallel_loop_with_a_loop_carried_dependence_is_a_race():
    n = 8
    A = buf("A", (n + 1,))
    i = Var("i")
    body = store(A, load(A, i) + f32(1), i + 1)  # prefix-like: iteration i reads i's write
    a = np.zeros(n + 1, np.float32)
    run(PrimFunc("f", (A,), loop(i, n, body, "serial")), a)
    np.testing.assert_array_equal(a, np.arange(n + 1))
    for kind in ("parallel", "vectorized"):
        with pytest.raises(RaceError, match=rf"{kind} loop must not depend|iterations of a {kind}"):
            run(PrimFunc("f", (A,), loop(i, n, body, kind)), np.zeros(n + 1, np.float32))
    # ... which without the check runs serially, exactly like the serial loop
    a2 = np.zeros(n + 1, np.float32)
    run(PrimFunc("f", (A,), loop(i, n, body, "parallel")), a2, check_races=False)
    np.testing.assert_array_equal(a2, a)


def test_parallel_matmul_is_not_a_race():
    f = _matmul(8, 8, 8)
    par = PrimFunc("p", f.params, For(f.body.var, f.body.min, f.body.extent, "parallel",
                                      f.body.body))
    a = np.random.rand(8, 8).astype(np.float32)
    b = np.random.rand(8, 8).astype(np.float32)
    o1, o2 = np.zeros((8, 8), np.float32), np.zeros((8, 8), np.float32)
    run(f, a, b, o1)
    run(par, a, b, o2)
    np.testing.assert_array_equal(o1, o2)


# --------------------------------------------------------------------------- GPU model
def _reverse_kernel(n, nblocks, barrier):
    """Each block reverses its row of A into B through shared memory."""
    A, B = buf("A", (nblocks, n)), buf("B", (nblocks, n))
    S = buf("S", (n,), scope="shared")
    bx, tx = Var("bx"), Var("tx")
    body = [store(S, load(A, bx, tx), tx)]
    if barrier:
        body.append(SYNC)
    body.append(store(B, load(S, op.sub(c(n - 1), tx)), bx, tx))
    return PrimFunc("reverse", (A, B), loop(bx, nblocks, Allocate(S, loop(
        tx, n, seq(*body), "thread", "threadIdx.x")), "thread", "blockIdx.x"))


def test_gpu_barrier_makes_shared_memory_reverse_correct():
    a = np.arange(24, dtype=np.float32).reshape(3, 8)
    b = np.zeros_like(a)
    run(_reverse_kernel(8, 3, barrier=True), a, b)
    np.testing.assert_array_equal(b, a[:, ::-1])


def test_gpu_missing_barrier_gives_a_wrong_answer_or_a_race_error():
    a = np.arange(24, dtype=np.float32).reshape(3, 8)
    b = np.zeros_like(a)
    f = _reverse_kernel(8, 3, barrier=False)
    run(f, a, b, check_races=False)
    assert not np.array_equal(b, a[:, ::-1])
    assert np.isnan(b[:, :4]).all()  # threads 0..3 read slots nobody had written yet
    with pytest.raises(RaceError, match=r"data race on S\[0\] \(shared buffer\) in block "
                                        r"blockIdx.x=0 .*threadIdx.x=0 writes it .*"
                                        r"threadIdx.x=7 reads it"):
        run(f, a, b)


def test_race_that_in_order_execution_hides_is_still_reported():
    # S[tx] = S[tx] + S[tx + 1] with no barrier: run in thread order it happens to read the
    # old S[tx + 1], but on a GPU thread tx + 1 may already have overwritten it.
    n = 8
    A, B = buf("A", (n + 1,)), buf("B", (n,))
    S = buf("S", (n + 1,), scope="shared")
    tx = Var("tx")
    body = Allocate(S, loop(tx, n, seq(
        store(S, load(A, tx), tx),
        IfThenElse(tx.equal(0), store(S, load(A, c(n)), c(n))),
        SYNC,
        store(S, load(S, tx) + load(S, tx + 1), tx),
        store(B, load(S, tx), tx)), "thread", "threadIdx.x"))
    f = PrimFunc("f", (A, B), body)
    a = np.arange(n + 1, dtype=np.float32)
    b = np.zeros(n, np.float32)
    run(f, a, b, check_races=False)
    np.testing.assert_array_equal(b, a[:-1] + a[1:])  # the lucky answer
    with pytest.raises(RaceError, match=r"S\[1\].*threadIdx.x=1 writes it .*threadIdx.x=0 reads"):
        run(f, a, b)


def test_gpu_2d_threads_transpose_through_shared_memory():
    n = 4
    A, B = buf("A", (2 * n, n)), buf("B", (n, 2 * n))
    S = buf("S", (n, n), scope="shared")
    by, ty, tx = Var("by"), Var("ty"), Var("tx")
    row = op.add(op.mul(by, n), ty)
    body = loop(by, 2, Allocate(S, loop(ty, n, loop(tx, n, seq(
        store(S, load(A, row, tx), ty, tx),
        SYNC,
        store(B, load(S, tx, ty), ty, op.add(op.mul(by, n), tx))),
        "thread", "threadIdx.x"), "thread", "threadIdx.y")), "thread", "blockIdx.y")
    a = np.random.rand(2 * n, n).astype(np.float32)
    b = np.zeros((n, 2 * n), np.float32)
    run(PrimFunc("t", (A, B), body), a, b)
    np.testing.assert_array_equal(b, a.T)


def test_gpu_tiled_matmul_with_barriers_in_a_serial_loop():
    n, t = 8, 4
    A, B, C = buf("A", (n, n)), buf("B", (n, n)), buf("C", (n, n))
    As, Bs = buf("As", (t, t), scope="shared"), buf("Bs", (t, t), scope="shared")
    acc = buf("acc", (1,), scope="local")
    by, bx, ty, tx, ko, ki = (Var(x) for x in ("by", "bx", "ty", "tx", "ko", "ki"))
    row, col = by * t + ty, bx * t + tx
    body = seq(
        store(acc, f32(0), c(0)),
        loop(ko, n // t, seq(
            store(As, load(A, row, ko * t + tx), ty, tx),
            store(Bs, load(B, ko * t + ty, col), ty, tx),
            SYNC,
            loop(ki, t, store(acc, load(acc, c(0)) + load(As, ty, ki) * load(Bs, ki, tx), c(0))),
            SYNC)),
        store(C, load(acc, c(0)), row, col))
    kern = loop(by, n // t, loop(bx, n // t, Allocate(As, Allocate(Bs, loop(ty, t, loop(
        tx, t, Allocate(acc, body), "thread", "threadIdx.x"), "thread", "threadIdx.y"))),
        "thread", "blockIdx.x"), "thread", "blockIdx.y")
    a = np.random.rand(n, n).astype(np.float32)
    b = np.random.rand(n, n).astype(np.float32)
    out = np.zeros((n, n), np.float32)
    run(PrimFunc("mm", (A, B, C), kern), a, b, out)
    np.testing.assert_allclose(out, a @ b, rtol=1e-5)
    # Without the second barrier, the next tile overwrites As/Bs while others still read.
    import dataclasses

    def drop_last_sync(s):
        if isinstance(s, For) and s.var is ko:
            return dataclasses.replace(s, body=seq(*s.body.seq[:-1]))
        for name in ("body",):
            if hasattr(s, name):
                return dataclasses.replace(s, **{name: drop_last_sync(getattr(s, name))})
        if hasattr(s, "seq"):
            return seq(*[drop_last_sync(x) for x in s.seq])
        return s
    no2 = drop_last_sync(kern)
    assert str(no2).count("syncthreads") == 1
    with pytest.raises(RaceError, match=r"data race on (As|Bs)\["):
        run(PrimFunc("mm", (A, B, C), no2), a, b, out)


def test_gpu_blocks_get_their_own_shared_memory_and_threads_their_own_locals():
    S = buf("S", (1,), scope="shared")
    L = buf("L", (1,), scope="local")
    O, P = buf("O", (2,)), buf("P", (2, 2))
    bx, tx = Var("bx"), Var("tx")
    body = loop(bx, 2, Allocate(S, seq(
        IfThenElse(bx.equal(0), store(S, f32(5), c(0))),
        store(O, load(S, c(0)), bx),
        loop(tx, 2, Allocate(L, seq(
            IfThenElse(tx.equal(0), store(L, f32(1), c(0))),
            store(P, load(L, c(0)), bx, tx))), "thread", "threadIdx.x"))), "thread", "blockIdx.x")
    o, p = np.zeros(2, np.float32), np.zeros((2, 2), np.float32)
    # every thread of block 0 writes S[0] = 5 (the same value: a benign race) and reads it
    run(PrimFunc("f", (O, P), body), o, p)
    assert o[0] == 5 and np.isnan(o[1])  # block 1's shared memory is fresh poison
    assert (p[:, 0] == 1).all() and np.isnan(p[:, 1]).all()  # thread 1's local is its own


def test_gpu_threads_beyond_a_loop_extent_skip_it():
    O = buf("O", (8,), "int32")
    t1, t2 = Var("t1"), Var("t2")
    body = seq(loop(t1, 8, store(O, c(1), t1), "thread", "threadIdx.x"),
               loop(t2, 3, store(O, c(2), t2), "thread", "threadIdx.x"))
    o = np.zeros(8, np.int32)
    run(PrimFunc("f", (O,), loop(Var("b"), 1, body, "thread", "blockIdx.x")), o)
    np.testing.assert_array_equal(o, [2, 2, 2, 1, 1, 1, 1, 1])


def test_gpu_blocks_racing_on_global_memory():
    O = buf("O", (1,))
    bx = Var("bx")
    body = loop(bx, 4, store(O, load(O, c(0)) + f32(1), c(0)), "thread", "blockIdx.x")
    with pytest.raises(RaceError, match=r"O\[0\] \(global buffer\) in one launch .*blockIdx.x=0"):
        run(PrimFunc("f", (O,), body), np.zeros(1, np.float32))


def test_gpu_divergent_barrier_is_an_error():
    O = buf("O", (4,))
    tx = Var("tx")
    body = loop(tx, 4, seq(store(O, f32(0), tx),
                           IfThenElse(tx < 2, SYNC)), "thread", "threadIdx.x")
    with pytest.raises(GPUModelError, match="divergent syncthreads"):
        run(PrimFunc("f", (O,), body), np.zeros(4, np.float32))


def test_gpu_model_rejects_undefined_structures():
    O = buf("O", (4,))
    i = Var("i")
    with pytest.raises(GPUModelError, match="syncthreads\\(\\) outside any GPU thread loop"):
        run(PrimFunc("f", (O,), loop(i, 4, seq(store(O, f32(0), i), SYNC))),
            np.zeros(4, np.float32))
    with pytest.raises(GPUModelError, match="unknown thread tag 'vthread'"):
        run(PrimFunc("f", (O,), loop(i, 4, store(O, f32(0), i), "thread", "vthread")),
            np.zeros(4, np.float32))
    t, b = Var("t"), Var("b")
    dep = loop(b, 2, loop(i, 2, loop(t, i + 1, store(O, f32(0), t), "thread", "threadIdx.x")),
               "thread", "blockIdx.x")
    with pytest.raises(GPUModelError, match=r"extent `i \+ 1` of thread loop t .*depends on i"):
        run(PrimFunc("f", (O,), dep), np.zeros(4, np.float32))


def test_block_size_may_depend_on_the_block_index():
    # the last block of a non-divisible split has fewer threads with work
    n, tile = 10, 4
    O = buf("O", (n,), "int32")
    bx, tx = Var("bx"), Var("tx")
    ext = op.minimum(c(tile), op.sub(c(n), op.mul(bx, tile)))
    body = loop(bx, 3, loop(tx, ext, store(O, op.add(op.mul(bx, tile), tx), op.add(
        op.mul(bx, tile), tx)), "thread", "threadIdx.x"), "thread", "blockIdx.x")
    o = np.full(n, -1, np.int32)
    run(PrimFunc("f", (O,), body), o)
    np.testing.assert_array_equal(o, np.arange(n))
    # the block size is the largest over the blocks (3 here, from the last block)
    P = buf("P", (3, 3), "int32")
    tri = loop(bx, 3, loop(tx, op.add(bx, 1), store(P, c(1), bx, tx), "thread", "threadIdx.x"),
               "thread", "blockIdx.x")
    p = np.zeros((3, 3), np.int32)
    run(PrimFunc("g", (P,), tri), p)
    np.testing.assert_array_equal(p, np.tril(np.ones((3, 3), np.int32)))


def test_shared_allocation_around_the_kernel_is_still_per_block():
    S = buf("S", (1,), scope="shared")
    O = buf("O", (2,))
    bx, tx = Var("bx"), Var("tx")
    kern = Allocate(S, loop(bx, 2, loop(tx, 1, seq(
        IfThenElse(bx.equal(0), store(S, f32(3), c(0))),
        store(O, load(S, c(0)), bx)), "thread", "threadIdx.x"), "thread", "blockIdx.x"))
    o = np.zeros(2, np.float32)
    run(PrimFunc("f", (O,), kern), o)
    assert o[0] == 3 and np.isnan(o[1])


# --------------------------------------------------------------------------- malformed IR
def test_te_nodes_and_malformed_ir_are_internal_errors():
    x = Var("x", "float32")
    pl = ProducerLoad(type("T", (), {"name": "T"})(), (c(0),), "float32")
    with pytest.raises(InternalError, match="ProducerLoad .* TE-only"):
        run(scalar_fn(pl)[0], np.zeros(1, np.float32))
    with pytest.raises(InternalError, match="lowering must insert a Cast"):
        run(scalar_fn(Add(x, c(1), "float32"), params=(x,))[0], 1.0, np.zeros(1, np.float32))
    with pytest.raises(InternalError, match="int32 access of float32 buffer out"):
        run(scalar_fn(c(1), out_dtype="float32")[0], np.zeros(1, np.float32))


# --------------------------------------------------------------------------- helpers API
def test_eval_expr_and_run_stmt():
    x = Var("x", "int8")
    assert eval_expr(Add(x, c(100, "int8"), "int8"), {x: 100}) == -56
    with pytest.raises(LowerError, match="variable y is used but not bound"):
        eval_expr(op.floordiv(Var("y"), 4))
    y = Var("y")
    assert eval_expr(op.floordiv(y, 4), {y: -5}) == -2
    A = buf("A", (3,))
    i = Var("i")
    env = {A: np.zeros(3, np.float32)}
    run_stmt(loop(i, 3, store(A, Cast(i, "float32") * f32(0.5), i)), env)
    np.testing.assert_array_equal(env[A], [0, 0.5, 1.0])
    it = Interpreter(check_bounds=True, check_races=False)
    f = _reverse_kernel(4, 1, barrier=False)
    b = np.zeros((1, 4), np.float32)
    it.run(f, np.ones((1, 4), np.float32), b)  # no race check: runs, reads poison
    assert np.isnan(b).any()


# --------------------------------------------------------------------------- more coverage
def test_three_dimensional_buffers_and_logic():
    A, B = buf("A", (2, 3, 4), "int32"), buf("B", (2, 3, 4), "bool")
    i, j, k = Var("i"), Var("j"), Var("k")
    v = load(A, i, j, k)
    cond = And(op.compare(LT, v, c(5)), op.compare(GT, v, c(1)))
    either = Or(op.compare(LT, v, c(2)), Not(op.compare(LT, v, c(20))))
    body = loop(i, 2, loop(j, 3, loop(k, 4, store(B, Or(cond, either), i, j, k))))
    a = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    b = np.zeros((2, 3, 4), bool)
    run(PrimFunc("f", (A, B), body), a, b)
    np.testing.assert_array_equal(b, ((a < 5) & (a > 1)) | (a < 2) | ~(a < 20))
    bad = PrimFunc("g", (A, B), store(B, op.compare(LT, load(A, c(1), c(3), c(0)), c(0)),
                                      c(0), c(0), c(0)))
    with pytest.raises(BoundsError, match=r"load from A\[1, 3, 0\] out of bounds: index 1 = 3 "
                                          r"is outside \[0, 3\)"):
        run(bad, a, b)


def test_int_min_max_mixed_widths_and_let_shadowing():
    x, y = Var("x", "int32"), Var("y", "int64")
    assert value_of(Min(x, c(-3), "int32"), 4, params=(x,)) == -3
    assert value_of(Max(x, c(-3), "int32"), 4, params=(x,)) == 4
    # int32 + int64 -> int64 without a Cast (as op.add builds it): the int32 value is kept
    assert value_of(op.add(x, y), 2 ** 31 - 1, 1, params=(x, y)) == 2 ** 31
    with pytest.raises(InternalError, match="lowering must insert a Cast"):
        value_of(Add(x, y, "int32"), 1, 1, params=(x, y))
    t = Var("t")
    inner = Let(t, c(10), Add(t, c(1), "int32"), "int32")  # binds t again inside
    outer = Let(t, c(1), Add(inner, t, "int32"), "int32")   # t is 1 again after inner
    assert eval_expr(outer) == 12


def test_evaluate_runs_its_expression():
    A = buf("A", (2,))
    f = PrimFunc("f", (A,), Evaluate(load(A, c(2))))
    with pytest.raises(BoundsError, match=r"load from A\[2\]"):
        run(f, np.zeros(2, np.float32))


def test_barrier_kernel_with_let_and_if_else():
    n = 4
    A, B = buf("A", (n,)), buf("B", (n,))
    S = buf("S", (n,), scope="shared")
    tx, r = Var("tx"), Var("r")
    body = Allocate(S, loop(tx, n, LetStmt(r, op.sub(c(n - 1), tx), seq(
        IfThenElse(tx < 2, store(S, load(A, tx) * f32(10), tx), store(S, load(A, tx), tx)),
        SYNC,
        IfThenElse(r >= 0, store(B, load(S, r), tx), store(B, f32(-1), tx)))),
        "thread", "threadIdx.x"))
    a = np.arange(1, n + 1, dtype=np.float32)
    b = np.zeros(n, np.float32)
    run(PrimFunc("f", (A, B), body), a, b)
    np.testing.assert_array_equal(b, [4, 3, 20, 10])


def test_barrier_inside_a_parallel_loop_of_a_kernel_is_rejected():
    O = buf("O", (4,))
    tx, i = Var("tx"), Var("i")
    body = loop(tx, 2, loop(i, 2, seq(store(O, f32(0), tx * 2 + i), SYNC), "parallel"),
                "thread", "threadIdx.x")
    with pytest.raises(GPUModelError, match="syncthreads\\(\\) inside the parallel loop i"):
        run(PrimFunc("f", (O,), body), np.zeros(4, np.float32))


def test_local_allocation_around_a_kernel_is_per_thread():
    L = buf("L", (1,), scope="local")
    O = buf("O", (2,))
    tx = Var("tx")
    kern = Allocate(L, loop(tx, 2, seq(
        IfThenElse(tx.equal(1), store(L, f32(7), c(0))),
        store(O, load(L, c(0)), tx)), "thread", "threadIdx.x"))
    o = np.zeros(2, np.float32)
    run(PrimFunc("f", (O,), kern), o)
    assert np.isnan(o[0]) and o[1] == 7


def test_two_threads_writing_different_values_race():
    O = buf("O", (1,), "int32")
    tx = Var("tx")
    body = loop(tx, 4, store(O, tx, c(0)), "thread", "threadIdx.x")
    with pytest.raises(RaceError, match=r"O\[0\].*threadIdx.x=0 writes it .*threadIdx.x=1 "
                                        r"writes it"):
        run(PrimFunc("f", (O,), body), np.zeros(1, np.int32))
    o = np.zeros(1, np.int32)
    run(PrimFunc("f", (O,), body), o, check_races=False)
    assert o[0] == 3  # the last thread in the model's order wins


def test_barrier_in_a_thread_loop_shorter_than_the_launch_is_divergent():
    # threads 2 and 3 (launched for the extent-4 loop) skip the extent-2 loop and its barrier
    S = buf("S", (4,), scope="shared")
    O = buf("O", (4,))
    t1, t2, b = Var("t1"), Var("t2"), Var("b")
    body = loop(b, 1, Allocate(S, seq(
        loop(t1, 4, store(S, f32(1), t1), "thread", "threadIdx.x"),
        loop(t2, 2, seq(SYNC, store(O, load(S, op.add(t2, 2)), t2)), "thread", "threadIdx.x"))),
        "thread", "blockIdx.x")
    with pytest.raises(GPUModelError, match=r"divergent syncthreads\(\).*threadIdx.x=2 finished"):
        run(PrimFunc("f", (O,), body), np.zeros(4, np.float32))


def test_threads_at_different_barriers_are_divergent():
    O = buf("O", (4,))
    tx = Var("tx")
    body = loop(tx, 4, seq(IfThenElse(tx < 2, SYNC, SYNC), store(O, f32(1), tx)),
                "thread", "threadIdx.x")
    with pytest.raises(GPUModelError, match=r"threadIdx.x=0 waits at barrier #1 while thread "
                                            r"threadIdx.x=2 waits at barrier #2"):
        run(PrimFunc("f", (O,), body), np.zeros(4, np.float32))
