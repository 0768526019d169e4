"""NaN and Inf data propagate through compiled kernels as numpy propagates them."""
import numpy as np
import pytest

import tecomp as tc

from helpers import build_and_interp


SPECIALS = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 3.0e38, -2.5, np.nan],
                    dtype="float32")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_nan_inf_elementwise_like_numpy(dtype):
    n = SPECIALS.size
    A = tc.placeholder((n,), dtype=dtype, name="A")
    B = tc.placeholder((n,), dtype=dtype, name="B")
    ops = {
        "add": (lambda a, b: a + b, np.add),
        "mul": (lambda a, b: a * b, np.multiply),
        "div": (lambda a, b: a / b, np.divide),
        "max": (lambda a, b: tc.max(a, b), np.maximum),
        "min": (lambda a, b: tc.min(a, b), np.minimum),
        "exp": (lambda a, b: tc.exp(a), lambda a, b: np.exp(a)),
        "tanh": (lambda a, b: tc.tanh(a), lambda a, b: np.tanh(a)),
        "sqrt": (lambda a, b: tc.sqrt(a), lambda a, b: np.sqrt(a)),
        "abs": (lambda a, b: tc.abs(a), lambda a, b: np.abs(a)),
        "sel": (lambda a, b: tc.if_then_else(a > b, a, b), lambda a, b: np.where(a > b, a, b)),
    }
    a = SPECIALS.astype(dtype)
    b = np.roll(SPECIALS, 3).astype(dtype)
    for name, (fe, fn) in ops.items():
        C = tc.compute((n,), lambda i: fe(A[i], B[i]), name="C")
        s = tc.create_schedule(C.op)
        r1, r2 = build_and_interp(s, [A, B, C], lambda: [a.copy(), b.copy(), np.zeros(n, dtype)])
        with np.errstate(all="ignore"):
            want = fn(a, b).astype(dtype)
        for got, who in ((r1[2], "llvm"), (r2[2], "interp")):
            # NaN where numpy has NaN, the same infinities; finite values to ~1 ulp (exp, tanh)
            np.testing.assert_allclose(got, want, rtol=3e-7 if dtype == "float32" else 1e-15,
                                       atol=0, err_msg=f"{name} ({who})")


@pytest.mark.parametrize("red,npf", [("sum", np.sum), ("max", np.max), ("min", np.min)])
def test_nan_inf_reductions_like_numpy(red, npf):
    rows = np.array([[1.0, np.nan, 2.0], [np.inf, 1.0, -np.inf], [np.inf, np.inf, 0.0],
                     [-np.inf, 5.0, 1.0], [1.0, 2.0, 3.0]], "float32")
    X = tc.placeholder(rows.shape, name="X")
    k = tc.reduce_axis((0, rows.shape[1]), name="k")
    Y = tc.compute((rows.shape[0],), lambda i: getattr(tc, red)(X[i, k], axis=k), name="Y")
    s = tc.create_schedule(Y.op)
    r1, r2 = build_and_interp(s, [X, Y], lambda: [rows.copy(), np.zeros(rows.shape[0], "float32")])
    with np.errstate(all="ignore"):
        want = npf(rows, axis=1)
    np.testing.assert_array_equal(r1[1], want)
    np.testing.assert_array_equal(r2[1], want)


def test_nan_propagates_through_a_vectorized_max():
    x = np.arange(32, dtype="float32")
    x[5] = np.nan
    X = tc.placeholder((32,), name="X")
    Y = tc.compute((32,), lambda i: tc.max(X[i], 10.0), name="Y")
    s = tc.create_schedule(Y.op)
    xo, xi = s[Y].split(Y.op.axis[0], factor=8)
    s[Y].vectorize(xi)
    r1, r2 = build_and_interp(s, [X, Y], lambda: [x.copy(), np.zeros(32, "float32")])
    want = np.maximum(x, np.float32(10.0))
    np.testing.assert_array_equal(r1[1], want)
    np.testing.assert_array_equal(r2[1], want)


def _divisors(dtype):
    """Row divisors for ``pragma fp_reciprocal``: zeros, infinities, NaN, subnormals (the
    smallest, one whose reciprocal overflows, the largest), the edges of the range where
    the reciprocal is a normal number, the largest finite value, ordinary values."""
    fi = np.finfo(dtype)
    tiny, big = fi.smallest_subnormal, fi.max
    lo = np.ldexp(np.array(1.0, dtype), fi.minexp)            # the smallest normal
    top = np.ldexp(np.array(1.0, dtype), fi.maxexp - 2)       # 2**(emax - 1)
    return np.array([0.0, -0.0, np.inf, -np.inf, np.nan, tiny, -tiny, 1e-40 if dtype ==
                     "float32" else 1e-310, lo - tiny, -(lo - tiny), lo,
                     np.nextafter(lo, np.zeros((), dtype)), top, np.nextafter(top, big), -top * 1.5,
                     big, -big, 1.0, -3.0, 7.0e-3], dtype=dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("vector", [True, False])
def test_fp_reciprocal_keeps_the_division_special_values(dtype, vector):
    """``pragma fp_reciprocal`` (what ``tc.auto_schedule`` sets on a division by a per-row
    value): every zero, infinity and NaN of ``a / b[i]`` as the division gives it, for
    divisors that are zero, infinite, NaN, subnormal (whose reciprocal overflows: ``0 /
    b`` was ``0 * inf``, NaN, and ``1e-3 / 1e-40`` inf) or huge (whose reciprocal is
    subnormal); finite quotients within 1 ulp of the division's."""
    b = _divisors(dtype)
    fi = np.finfo(dtype)
    a = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-3, -2.5, fi.max, fi.smallest_subnormal,
                  fi.tiny, 1.0, 3.0, 0.75, -1e-30, 123.25, 1e30], dtype=dtype)
    rng = np.random.default_rng(5)
    a = np.concatenate([a, (rng.standard_normal(17) * 10.0 ** rng.integers(-30, 30, 17))
                        .astype(dtype)])
    M, N = b.size, a.size
    X = tc.placeholder((M, N), dtype=dtype, name="x")
    B = tc.placeholder((M,), dtype=dtype, name="b")
    Y = tc.compute((M, N), lambda i, j: X[i, j] / B[i], name="y")
    s = tc.create_schedule(Y.op)
    s[Y].pragma(Y.op.axis[0], "fp_reciprocal")
    if vector:
        jo, ji = s[Y].split(Y.op.axis[1], 8)
        s[Y].vectorize(ji)
    f = tc.build(s, [X, B, Y])
    assert "fp_reciprocal" in str(tc.lower(s, [X, B, Y]))
    x = np.broadcast_to(a, (M, N)).copy()
    y = np.full((M, N), 42.0, dtype)
    f(x, b, y)
    with np.errstate(all="ignore"):
        want = x / b[:, None]
    exact = ~np.isfinite(want) | (want == 0)
    np.testing.assert_array_equal(np.signbit(y[exact]), np.signbit(want[exact]))
    np.testing.assert_array_equal(y[exact], want[exact])
    np.testing.assert_array_max_ulp(y[~exact], want[~exact], maxulp=1)
