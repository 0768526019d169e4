"""bfloat16: storage only, arithmetic in float32 (as float16).  Loads widen exactly, a
store or a cast rounds the float32 value to nearest even; checked bit for bit against
ml_dtypes (numpy's bfloat16) through the LLVM build (scalar and vectorized code) and the
reference interpreter, and with torch bfloat16 tensors."""
import numpy as np
import pytest

import tecomp as tc
from helpers import run

ml_dtypes = pytest.importorskip("ml_dtypes")
BF = ml_dtypes.bfloat16
BACKENDS = ["llvm", "interp"]


def _f32(x):
    return np.asarray(x).astype(np.float32)


def _program(n=37, K=64):
    A = tc.placeholder((n, K), dtype="bfloat16", name="A")
    B = tc.placeholder((K,), dtype="bfloat16", name="B")
    k = tc.reduce_axis((0, K), name="k")
    C = tc.compute((n,), lambda i: tc.sum(tc.cast(A[i, k], "float32") * tc.cast(B[k], "float32"),
                                          axis=k), name="C")
    D = tc.compute((n,), lambda i: tc.cast(C[i] * 0.5, "bfloat16"), name="D")
    E = tc.compute((n, K), lambda i, j: A[i, j] * B[j] + D[i], name="E")
    return A, B, D, E


def _data(n=37, K=64):
    rng = np.random.default_rng(0)
    return rng.standard_normal((n, K)).astype(BF), rng.standard_normal(K).astype(BF)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("vectorized", [False, True])
def test_bit_exact_against_ml_dtypes(backend, vectorized):
    A, B, D, E = _program()
    s = tc.create_schedule([D.op, E.op])
    if vectorized:
        jo, ji = s[E].split(E.op.axis[1], factor=16)
        s[E].vectorize(ji)
        s[E].parallel(E.op.axis[0])
    a, b = _data()
    d, e = np.zeros(37, BF), np.zeros((37, 64), BF)
    run(s, [A, B, D, E], [a, b, d, e], backend)
    c = _f32(a).astype(np.float64) @ _f32(b)
    # D: a float32 sum (its order differs from numpy's), rounded once to bfloat16
    np.testing.assert_allclose(_f32(d), _f32(c * 0.5), rtol=2 ** -8)
    # E: float32 arithmetic on the bfloat16 values, one rounding at the store: bit-exact
    eref = (_f32(a) * _f32(b) + _f32(d)[:, None]).astype(BF)
    np.testing.assert_array_equal(e.view(np.uint16), eref.view(np.uint16))


@pytest.mark.parametrize("backend", BACKENDS)
def test_rounding_ties_overflow_nan_and_casts(backend):
    """Stores round the float32 value to nearest even; past bfloat16's range gives inf; a
    NaN stays NaN; float64 and int go through float32 first."""
    X = tc.placeholder((8,), dtype="float32", name="X")
    I = tc.placeholder((8,), dtype="int32", name="I")
    D = tc.placeholder((8,), dtype="float64", name="D")
    Y = tc.compute((8,), lambda i: tc.cast(X[i], "bfloat16"), name="Y")
    Z = tc.compute((8,), lambda i: tc.cast(I[i], "bfloat16"), name="Z")
    W = tc.compute((8,), lambda i: tc.cast(D[i], "bfloat16"), name="W")
    V = tc.compute((8,), lambda i: tc.cast(Y[i], "float32") * 2, name="V")   # back: exact
    s = tc.create_schedule([Y.op, Z.op, W.op, V.op])
    x = np.array([1.0, 1.00390625, 1.01171875, 3.14159, 3.4e38, -3.4e38, np.nan, 1e-40],
                 "float32")
    i = np.array([1, 257, 259, 65535, -65537, 2**24 + 1, 0, 123456789], "int32")
    dd = np.array([1.0, 1.0 + 2**-8 + 2**-30, 3.14159265358979, 1e300, -1e-300, np.nan, 0.1,
                   255.5], "float64")
    y, z, w, v = np.zeros(8, BF), np.zeros(8, BF), np.zeros(8, BF), np.zeros(8, "float32")
    run(s, [X, I, D, Y, Z, W, V], [x, i, dd, y, z, w, v], backend)
    np.testing.assert_array_equal(_f32(y), _f32(x.astype(BF)))
    np.testing.assert_array_equal(_f32(z), _f32(i.astype(np.float32).astype(BF)))
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(_f32(w), _f32(dd.astype(np.float32).astype(BF)))
    np.testing.assert_array_equal(v, _f32(y) * 2)


def test_constants_round_and_print():
    X = tc.placeholder((4,), dtype="bfloat16", name="X")
    Y = tc.compute((4,), lambda i: X[i] + tc.const(0.1, "bfloat16"), name="Y")
    s = tc.create_schedule(Y.op)
    assert "Y[i] = X[i] + 0.1bf" in str(tc.lower(s, [X, Y]))
    x = np.array([1, 2, 3, 4], BF)
    for backend in BACKENDS:
        y = np.zeros(4, BF)
        run(s, [X, Y], [x, y], backend)
        np.testing.assert_array_equal(_f32(y), _f32((_f32(x) + _f32(np.float32(0.1).astype(BF)))
                                                    .astype(BF)))


def test_torch_bfloat16_tensors_contiguous_and_strided():
    torch = pytest.importorskip("torch")
    A = tc.placeholder((8, 16), dtype="bfloat16", name="A")
    E = tc.compute((8, 16), lambda i, j: A[i, j] * 2 + 1, name="E")
    f = tc.build(tc.create_schedule(E.op), [A, E])
    a = torch.randn(8, 32).bfloat16()
    for arg in (a[:, :16].contiguous(), a[:, ::2]):
        e = torch.zeros(8, 16, dtype=torch.bfloat16)
        f(arg, e)
        assert torch.equal(e, (arg.float() * 2 + 1).bfloat16())


def test_torch_op_forward_and_backward_in_bfloat16():
    torch = pytest.importorskip("torch")
    import tecomp.torch as tct

    X = tc.placeholder((6, 8), dtype="bfloat16", name="X")
    Y = tc.compute((6, 8), lambda i, j: X[i, j] * X[i, j], name="Y")
    op = tct.op([X], [Y])
    x = torch.randn(6, 8).bfloat16().requires_grad_(True)
    y = op(x)
    assert y.dtype == torch.bfloat16
    assert torch.equal(y, (x.float() * x.float()).bfloat16())
    y.sum().backward()
    torch.testing.assert_close(x.grad.float(), 2 * x.detach().float(), rtol=1e-2, atol=1e-2)
