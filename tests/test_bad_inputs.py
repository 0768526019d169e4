"""Bad input, everywhere a user can give it: each raises a TecompError subclass whose
message names the object (the catalogue is tecomp/testing/bad_inputs.py); the whole
catalogue in a subprocess never crashes the process; NaN and Inf data propagate as numpy
does; a bounds-checked build (checks=True) names the buffer, the index and the statement
instead of touching memory out of bounds."""
import os
import subprocess
import sys

import numpy as np
import pytest

import tecomp as tc
from tecomp.ir import interp
from tecomp.ir.expr import Buffer, BufferLoad, Const, Var
from tecomp.ir.stmt import BufferStore, For, IfThenElse, PrimFunc
from tecomp.testing.bad_inputs import CATALOGUE, run_entry

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _param(e):
    marks = []
    if e.known_bug:
        marks.append(pytest.mark.xfail(strict=True, reason=e.known_bug))
    return pytest.param(e, id=e.name, marks=marks)


@pytest.mark.parametrize("entry", [_param(e) for e in CATALOGUE])
def test_bad_input_raises_tecomp_error(entry):
    status, text = run_entry(entry)
    assert status == "ok", f"{entry.name}: {status}: {text}"


def test_catalogue_in_a_subprocess_never_crashes():
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env["PYTHONFAULTHANDLER"] = "1"
    p = subprocess.run([sys.executable, "-m", "tecomp.testing.bad_inputs"], capture_output=True,
                       text=True, env=env, timeout=600)
    assert p.returncode >= 0, f"the process died of signal {-p.returncode}:\n{p.stderr[-3000:]}"
    assert "Fatal Python error" not in p.stderr, p.stderr[-3000:]
    assert p.returncode == 0, p.stdout + p.stderr[-3000:]
    assert f"bad inputs tried: {len(CATALOGUE)}" in p.stdout
    assert "failures: 0" in p.stdout


def test_catalogue_is_large_and_names_are_unique():
    names = [e.name for e in CATALOGUE]
    assert len(names) == len(set(names))
    assert len(names) >= 100


# ---------------------------------------------------------------------------------
# NaN and Inf data propagate as numpy does


SPECIALS = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 3.0e38, -2.5, np.nan],
                    dtype="float32")


def _both(s, args, make):
    f = tc.build(s, args)
    r1 = make()
    f(*r1)
    r2 = make()
    interp.run(tc.lower(s, args), *r2)
    return r1, r2


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
        r1, r2 = _both(s, [A, B, C], lambda: [a.copy(), b.copy(), np.zeros(n, dtype)])
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
    r1, r2 = _both(s, [X, Y], lambda: [rows.copy(), np.zeros(rows.shape[0], "float32")])
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
    r1, r2 = _both(s, [X, Y], lambda: [x.copy(), np.zeros(32, "float32")])
    want = np.maximum(x, np.float32(10.0))
    np.testing.assert_array_equal(r1[1], want)
    np.testing.assert_array_equal(r2[1], want)


# ---------------------------------------------------------------------------------
# the bounds-checked build mode


def _vec_bufs(n=8):
    return Buffer("A", (Const(n),), "float32"), Buffer("B", (Const(n),), "float32"), Var("i")


def _call(func):
    m = tc.build(func, checks=True)
    a, b = np.arange(8, dtype="float32"), np.zeros(8, "float32")
    m(a, b)
    return b


def test_checked_build_catches_out_of_bounds_store():
    A, B, i = _vec_bufs()
    body = For(i, Const(0), Const(8), "serial", BufferStore(B, BufferLoad(A, (i,), "float32"), (i * 2,)))
    with pytest.raises(tc.BoundsError, match=r"out-of-bounds store to buffer B: index 8 is outside "
                                              r"\[0, 8\) in dimension 0.*`B\[i\*2\] = A\[i\]`"):
        _call(PrimFunc("hand", (A, B), body, {"target": "llvm"}))


@pytest.mark.parametrize("kind", ["serial", "vectorized", "parallel", "unrolled"])
def test_checked_build_catches_out_of_bounds_load(kind):
    A, B, i = _vec_bufs()
    body = For(i, Const(0), Const(8), kind, BufferStore(B, BufferLoad(A, (i - 1,), "float32"), (i,)))
    with pytest.raises(tc.BoundsError, match=r"out-of-bounds load from buffer A: index -1 is outside "
                                              r"\[0, 8\) in dimension 0, at `A\[i - 1\]` in the statement "
                                              r"`B\[i\] = A\[i - 1\]`"):
        _call(PrimFunc("hand", (A, B), body, {"target": "llvm"}))


def test_checked_build_names_the_dimension_of_a_2d_buffer():
    A = Buffer("A", (Const(4), Const(3)), "float32")
    B = Buffer("B", (Const(4), Const(3)), "float32")
    i, j = Var("i"), Var("j")
    body = For(i, Const(0), Const(4), "serial", For(j, Const(0), Const(3), "serial", BufferStore(
        B, BufferLoad(A, (i, j + 1), "float32"), (i, j))))
    m = tc.build(PrimFunc("two_d", (A, B), body, {"target": "llvm"}), checks=True)
    with pytest.raises(tc.BoundsError, match=r"buffer A: index 3 is outside \[0, 3\) in dimension 1"):
        m(np.zeros((4, 3), "float32"), np.zeros((4, 3), "float32"))


def test_checked_build_of_a_schedule_wrong_on_purpose():
    """A compute whose read is out of range only for some value of a scalar parameter
    (so it cannot be rejected when defined): an unchecked build would read past the end;
    the checked one names A, the index and the statement."""
    off = tc.var("off")
    A = tc.placeholder((8,), name="A")
    C = tc.compute((8,), lambda i: A[i + off] * 2, name="C")
    s = tc.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=4)
    f = tc.build(s, [A, C, off], checks=True)
    c = np.zeros(8, "float32")
    f(np.arange(8, dtype="float32"), c, 0)
    np.testing.assert_array_equal(c, np.arange(8) * 2)
    with pytest.raises(tc.BoundsError, match=r"load from buffer A: index 8 is outside \[0, 8\).*"
                                              r"`C\[i\.outer\*4 \+ i\.inner\] = A\[i\.outer\*4 \+ i\.inner \+ off\]\*2f`"):
        f(np.zeros(8, "float32"), np.zeros(8, "float32"), 1)


def test_index_provably_out_of_range_is_rejected_when_defined():
    """The same read with a constant offset is rejected by tc.compute (ShapeError)."""
    A = tc.placeholder((8,), name="A")
    with pytest.raises(tc.ShapeError, match=r"compute C: the read A\[i \+ 1\] is out of range"):
        tc.compute((8,), lambda i: A[i + 1] * 2, name="C")
    # guarded, it is fine
    tc.compute((8,), lambda i: tc.if_then_else(i < 7, A[i + 1], 0.0), name="C")


def test_checked_build_symbolic_extent():
    n = tc.var("n")
    A = tc.placeholder((n,), name="A")
    C = tc.compute((n,), lambda i: A[n - 1 - i + 1], name="C")
    s = tc.create_schedule(C.op)
    f = tc.build(s, [A, C], checks=True)
    with pytest.raises(tc.BoundsError, match=r"buffer A: index 5 is outside \[0, 5\)"):
        f(np.zeros(5, "float32"), np.zeros(5, "float32"))


def test_checked_build_guarded_access_is_fine_and_results_match():
    """Guards (if_then_else padding, split tails) keep every access in bounds: the checked
    build runs and agrees with the unchecked one."""
    A = tc.placeholder((10,), name="A")
    C = tc.compute((13,), lambda i: tc.if_then_else(tc.all(i >= 2, i < 12), A[i - 2], -1.0), name="C")
    s = tc.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=4)
    s[C].vectorize(xi)
    a = np.arange(10, dtype="float32")
    outs = []
    for checks in (False, True):
        c = np.zeros(13, "float32")
        tc.build(s, [A, C], checks=checks)(a, c)
        outs.append(c)
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_array_equal(outs[1][2:12], a)


def test_checked_build_condition_guarding_a_store():
    A, B, i = _vec_bufs()
    body = For(i, Const(0), Const(10), "serial", IfThenElse(
        i < Const(8), BufferStore(B, BufferLoad(A, (i,), "float32"), (i,))))
    b = _call(PrimFunc("guarded", (A, B), body, {"target": "llvm"}))
    np.testing.assert_array_equal(b, np.arange(8, dtype="float32"))
