"""The public API end to end: every DSL function, each dtype, intrinsics, symbolic shapes,
strided views, and the module interface (get_source, threads)."""
import math
import threading

import numpy as np
import pytest

import tecomp as tc

BACKENDS = ["llvm", "interp"]


def _run(s, args, arrays, backend):
    if backend == "interp":
        from tecomp.ir import interp

        interp.run(tc.lower(s, args), *arrays)
    else:
        tc.build(s, args, target=backend)(*arrays)


def test_var_const_placeholder_compute_properties():
    n = tc.var("n")
    assert n.name == "n" and n.dtype == "int32"
    assert tc.var("m", "int64").dtype == "int64"
    assert tc.const(3).dtype == "int32" and tc.const(2.5).dtype == "float32"
    assert tc.const(1, "float64").value == 1.0
    A = tc.placeholder((n, 4), name="A")
    assert A.dtype == "float32" and A.ndim == 2 and str(A.shape[0]) == "n" and A.name == "A"
    k = tc.reduce_axis((0, 4), name="k")
    C = tc.compute((n,), lambda i: tc.sum(A[i, k], axis=k), name="C")
    assert [iv.name for iv in C.op.axis] == ["i"]
    assert [iv.name for iv in C.op.reduce_axis] == ["k"]
    assert C.op.input_tensors == [A]
    assert str(C.op.body) == "sum(A[i, k], axis=[k in [0, 4)])"
    s = tc.create_schedule(C)
    assert s[C].op is C.op and s.stages == [s[C]]


def test_expression_printing_and_semantics():
    i, j = tc.var("i"), tc.var("j")
    assert str(i // 4 + j % 3) == "i // 4 + j % 3"
    assert str(tc.truncdiv(i, 4)) == "truncdiv(i, 4)"
    assert str(tc.if_then_else(tc.all(i > 0, j < 2), i, j)) == "select(i > 0 && j < 2, i, j)"
    assert str(tc.eq(i, j)) == "i == j" and str(tc.ne(i, 1)) == "i != 1"
    assert str(-i) == "-i"
    assert str((i + 1).astype("float32")) == "float32(i + 1)"
    assert (i + 1) == (i + 1)  # an IR node whose truth value is structural equality
    assert (i + 1) != (j + 1)
    assert str(tc.max(i, j)) == "max(i, j)" and str(tc.minimum(i, j)) == "min(i, j)"


def test_literal_adopts_dtype():
    A = tc.placeholder((4,), dtype="float16", name="A")
    e = A[0] + 1
    assert e.dtype == "float16"
    B = tc.placeholder((4,), dtype="int8", name="B")
    assert (B[0] * 2).dtype == "int8"
    assert (B[0].astype("int32") + tc.var("n", "int64")).dtype == "int64"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int8", "int16", "int32",
                                   "int64", "uint8"])
def test_each_dtype_elementwise(backend, dtype):
    A = tc.placeholder((37,), dtype=dtype, name="A")
    B = tc.placeholder((37,), dtype=dtype, name="B")
    C = tc.compute((37,), lambda i: A[i] * B[i] + A[i], name="C")
    s = tc.create_schedule(C.op)
    rng = np.random.default_rng(1)
    if dtype.startswith("float"):
        a, b = rng.standard_normal(37).astype(dtype), rng.standard_normal(37).astype(dtype)
    else:
        info = np.iinfo(dtype)
        a = rng.integers(info.min, info.max, 37, endpoint=True).astype(dtype)
        b = rng.integers(info.min, info.max, 37, endpoint=True).astype(dtype)
    c = np.empty(37, dtype)
    _run(s, [A, B, C], [a, b, c], backend)
    if dtype == "float16":
        ref = (a.astype("float32") * b.astype("float32") + a.astype("float32")).astype("float16")
        np.testing.assert_allclose(c.astype("float32"), ref.astype("float32"), rtol=2e-3, atol=2e-3)
    elif dtype.startswith("float"):
        np.testing.assert_allclose(c, a * b + a, rtol=1e-6)
    else:
        with np.errstate(over="ignore"):
            np.testing.assert_array_equal(c, a * b + a)  # wraps, as numpy does


@pytest.mark.parametrize("backend", BACKENDS)
def test_bool_output_and_comparisons(backend):
    A = tc.placeholder((20,), dtype="int32", name="A")
    C = tc.compute((20,), lambda i: tc.any(A[i] < -3, tc.all(A[i] >= 2, tc.ne(A[i], 5))), name="C")
    s = tc.create_schedule(C.op)
    a = np.arange(-10, 10, dtype="int32")
    c = np.empty(20, "bool")
    _run(s, [A, C], [a, c], backend)
    np.testing.assert_array_equal(c, (a < -3) | ((a >= 2) & (a != 5)))


@pytest.mark.parametrize("backend", BACKENDS)
def test_integer_division_semantics(backend):
    A = tc.placeholder((9,), dtype="int32", name="A")
    fl = tc.compute((9, 4), lambda i, j: tc.if_then_else(tc.eq(j, 0), A[i] // 4,
                    tc.if_then_else(tc.eq(j, 1), A[i] % 4,
                    tc.if_then_else(tc.eq(j, 2), tc.truncdiv(A[i], 4), tc.truncmod(A[i], 4)))), name="D")
    s = tc.create_schedule(fl.op)
    a = np.arange(-4, 5, dtype="int32") * 3 - 1
    d = np.empty((9, 4), "int32")
    _run(s, [A, fl], [a, d], backend)
    np.testing.assert_array_equal(d[:, 0], a // 4)
    np.testing.assert_array_equal(d[:, 1], a % 4)
    np.testing.assert_array_equal(d[:, 2], np.trunc(a / 4).astype("int32"))
    np.testing.assert_array_equal(d[:, 3], np.fmod(a, 4))


INTRINSICS = [
    ("exp", np.exp, (-3, 3)), ("log", np.log, (0.1, 5)), ("sqrt", np.sqrt, (0, 5)),
    ("rsqrt", lambda x: 1 / np.sqrt(x), (0.1, 5)), ("tanh", np.tanh, (-3, 3)),
    ("sigmoid", lambda x: 1 / (1 + np.exp(-x)), (-6, 6)), ("abs", np.abs, (-3, 3)),
    ("floor", np.floor, (-3, 3)), ("ceil", np.ceil, (-3, 3)), ("round", np.round, (-3, 3)),
    ("sin", np.sin, (-3, 3)), ("cos", np.cos, (-3, 3)), ("tan", np.tan, (-1.5, 1.5)),
    ("atan", np.arctan, (-30, 30)), ("cbrt", np.cbrt, (-30, 30)),
    ("erfc", np.vectorize(math.erfc), (-3, 9.5)),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name,ref,rng_", INTRINSICS, ids=[x[0] for x in INTRINSICS])
def test_intrinsics(backend, name, ref, rng_):
    A = tc.placeholder((64,), name="A")
    fn = getattr(tc, name)
    C = tc.compute((64,), lambda i: fn(A[i]), name="C")
    s = tc.create_schedule(C.op)
    a = np.linspace(rng_[0], rng_[1], 64).astype("float32")
    if name == "round":
        a[::7] = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, -3.5, 0.5, 1.5], "float32")[: len(a[::7])]
    c = np.empty(64, "float32")
    _run(s, [A, C], [a, c], backend)
    np.testing.assert_allclose(c, ref(a.astype("float64")), rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("backend", BACKENDS + ["cuda-emu"])
def test_atan2_and_pow(backend):
    """atan2 in all four quadrants and on the axes, pow of a negative base and an integral
    exponent, against numpy (the CPU's vector code, the interpreter and CUDA C's libm)."""
    Y = tc.placeholder((16,), name="Y")
    X = tc.placeholder((16,), name="X")
    C = tc.compute((16,), lambda i: tc.atan2(Y[i], X[i]) + tc.pow(X[i], 3.0), name="C")
    s = tc.create_schedule(C.op)
    y = np.array([1, 1, -1, -1, 0, 0, -0.0, 2, 0.5, 3, -3, 1e-3, 7, -7, 0, 1], "float32")
    x = np.array([1, -1, 1, -1, 1, -1, -1, 0, 0.25, -2, -2, 5, 1e-3, 3, 0, -0.0], "float32")
    c = np.empty(16, "float32")
    if backend == "cuda-emu":
        args = [Y, X, C]
        tc.build(tc.auto_schedule(args, target=backend, trials=0), args, target=backend)(y, x, c)
    else:
        _run(s, [Y, X, C], [y, x, c], backend)
    want = np.arctan2(y.astype("float64"), x) + x.astype("float64") ** 3
    np.testing.assert_allclose(c, want, rtol=2e-6, atol=2e-6)


def test_tan_atan_cbrt_erfc_in_cuda_c():
    """The CUDA C path (tanf, atanf, cbrtf, erfcf; run by the CPU emulation) agrees with
    numpy, and with the LLVM backend's vector code."""
    import scipy.special

    A = tc.placeholder((64,), name="A")
    C = tc.compute((64, 4), lambda i, k: tc.if_then_else(
        k == 0, tc.tan(A[i]), tc.if_then_else(k == 1, tc.atan(A[i] * 10.0), tc.if_then_else(
            k == 2, tc.cbrt(A[i] * 100.0), tc.erfc(A[i] * 4.0)))), name="C")
    a = np.linspace(-1.5, 1.5, 64).astype("float32")
    a64 = a.astype("float64")
    want = np.stack([np.tan(a64), np.arctan(np.float32(10) * a).astype("float64"),
                     np.cbrt((np.float32(100) * a).astype("float64")),
                     scipy.special.erfc((np.float32(4) * a).astype("float64"))], axis=1)
    for target in ("cuda-emu", "llvm"):
        c = np.empty((64, 4), "float32")
        f = tc.build(tc.auto_schedule([A, C], target=target, trials=0), [A, C], target=target)
        f(a, c)
        np.testing.assert_allclose(c, want, rtol=3e-6, atol=1e-7)


@pytest.mark.parametrize("backend", BACKENDS)
def test_erf_pow(backend):
    import math

    A = tc.placeholder((32,), name="A")
    C = tc.compute((32,), lambda i: tc.erf(A[i]) + tc.pow(tc.abs(A[i]) + 0.5, 1.5), name="C")
    s = tc.create_schedule(C.op)
    a = np.linspace(-2, 2, 32).astype("float32")
    c = np.empty(32, "float32")
    _run(s, [A, C], [a, c], backend)
    ref = np.array([math.erf(x) for x in a.astype("float64")]) + (np.abs(a.astype("float64")) + 0.5) ** 1.5
    np.testing.assert_allclose(c, ref, rtol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_nan_inf_propagate(backend):
    A = tc.placeholder((6,), name="A")
    k = tc.reduce_axis((0, 6), name="k")
    M = tc.compute((1,), lambda i: tc.max(A[k], axis=k), name="M")
    S = tc.compute((6,), lambda i: A[i] * 2, name="S")
    s = tc.create_schedule([M.op, S.op])
    a = np.array([1, np.nan, 3, np.inf, -np.inf, 0], "float32")
    m, sv = np.empty(1, "float32"), np.empty(6, "float32")
    _run(s, [A, M, S], [a, m, sv], backend)
    assert np.isnan(m[0])  # NaN propagates through max, as numpy's max does
    np.testing.assert_array_equal(sv, a * 2)


@pytest.mark.parametrize("backend", BACKENDS)
def test_scalar_parameter(backend):
    n = tc.var("n")
    alpha = tc.var("alpha", "float32")
    A = tc.placeholder((n,), name="A")
    C = tc.compute((n,), lambda i: A[i] * alpha, name="C")
    s = tc.create_schedule(C.op)
    a = np.arange(5, dtype="float32")
    c = np.empty(5, "float32")
    _run(s, [A, C, alpha], [a, c, np.float32(2.5)], backend)
    np.testing.assert_allclose(c, a * 2.5)


def test_strided_views_no_copy():
    n, m = tc.var("n"), tc.var("m")
    A = tc.placeholder((n, m), name="A")
    B = tc.placeholder((n, m), name="B")
    C = tc.compute((n, m), lambda i, j: A[i, j] * 2 + B[i, j], name="C")
    s = tc.create_schedule(C.op)
    f = tc.build(s, [A, B, C])
    base = np.random.rand(12, 10).astype("float32")
    views = [base.T, base[::2, ::3], base[::-1, 1:], np.broadcast_to(base[0], (12, 10))]
    for v in views:
        b = np.random.rand(*v.shape).astype("float32")
        c = np.empty(v.shape, "float32")
        f(v, b, c)
        np.testing.assert_allclose(c, v * 2 + b, rtol=1e-6)
    out_view = np.zeros((20, 12), "float32")[::2, :10]  # a strided output
    f(base[:10, :10], base[:10, :10], out_view)
    np.testing.assert_allclose(out_view, base[:10, :10] * 3, rtol=1e-6)


def test_get_source_and_asm_vectorized():
    A = tc.placeholder((1024,), name="A")
    B = tc.placeholder((1024,), name="B")
    C = tc.compute((1024,), lambda i: A[i] * B[i] + 1.0, name="C")
    s = tc.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=8)
    s[C].vectorize(xi)
    f = tc.build(s, [A, B, C], name="fma")
    ll = f.get_source("llvm")
    assert "define" in ll and "<8 x float>" in ll
    asm = f.get_source("asm")
    assert "ymm" in asm
    # the same program gives the same LLVM IR
    assert tc.build(s, [A, B, C], name="fma").get_source("llvm") == ll


def test_called_from_many_threads():
    n = tc.var("n")
    A = tc.placeholder((n, 64), name="A")
    k = tc.reduce_axis((0, 64), name="k")
    C = tc.compute((n,), lambda i: tc.sum(A[i, k] * A[i, k], axis=k), name="C")
    s = tc.create_schedule(C.op)
    s[C].parallel(C.op.axis[0])
    f = tc.build(s, [A, C])
    errors = []

    def work(seed):
        rng = np.random.default_rng(seed)
        for _ in range(20):
            a = rng.random((int(rng.integers(1, 300)), 64), dtype="float64").astype("float32")
            c = np.empty(a.shape[0], "float32")
            f(a, c)
            if not np.allclose(c, (a.astype("float64") ** 2).sum(1), rtol=1e-4):
                errors.append(seed)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert errors == []


def test_set_num_threads():
    old = tc.get_num_threads()
    try:
        tc.set_num_threads(1)
        assert tc.get_num_threads() == 1
        A = tc.placeholder((100,), name="A")
        C = tc.compute((100,), lambda i: A[i] + 1, name="C")
        s = tc.create_schedule(C.op)
        s[C].parallel(C.op.axis[0])
        f = tc.build(s, [A, C])
        a = np.arange(100, dtype="float32")
        c = np.empty(100, "float32")
        f(a, c)
        np.testing.assert_array_equal(c, a + 1)
    finally:
        tc.set_num_threads(old)


def test_matmul_issue_example():
    n = tc.var("n")
    m, K = 256, 128
    A = tc.placeholder((n, K), name="A")
    B = tc.placeholder((K, m), name="B")
    k = tc.reduce_axis((0, K), name="k")
    C = tc.compute((n, m), lambda i, j: tc.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = tc.create_schedule(C.op)
    text = str(tc.lower(s, [A, B, C], name="matmul"))
    assert text.startswith("primfn matmul(A: float32[n, 128], B: float32[128, 256], C: float32[n, 256]) {")
    f = tc.build(s, [A, B, C], target="llvm")
    a = np.random.rand(100, K).astype("float32")
    b = np.random.rand(K, m).astype("float32")
    c = np.empty((100, m), "float32")
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)
    assert "define" in f.get_source("llvm")


def test_build_restores_the_garbage_collector_state():
    """tc.build pauses Python's cyclic collector while it runs and leaves it as it found
    it: on, or off where the caller turned it off, also when the build fails."""
    import gc

    A = tc.placeholder((8,), name="A")
    B = tc.compute((8,), lambda i: A[i] + 1.0, name="B")
    assert gc.isenabled()
    tc.build(tc.create_schedule(B.op), [A, B])
    assert gc.isenabled()
    with pytest.raises(tc.TecompError):
        tc.build(tc.create_schedule(B.op), [A, B], target="nope")
    assert gc.isenabled()
    gc.disable()
    try:
        tc.build(tc.create_schedule(B.op), [A, B])
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_copies_of_a_module_are_the_module(tmp_path):
    """copy.copy and copy.deepcopy of a compiled module (a model or config holding one
    deep-copied) give the module itself, as for a function, JIT-built or loaded (deepcopy
    raised a TypeError about a thread lock, or a ctypes error, before)."""
    import copy

    A = tc.placeholder((64, 64), name="A")
    T = tc.compute((64, 64), lambda i, j: tc.exp(A[i, j]), name="T")
    k = tc.reduce_axis((0, 64), "k")
    R = tc.compute((64,), lambda i: tc.sum(T[i, k] * A[k, i], axis=k), name="R")
    f = tc.build(tc.auto_schedule([A, R]), [A, R])
    f.export_library(str(tmp_path / "k.so"))
    a = np.random.default_rng(0).random((64, 64), dtype=np.float32)
    want = (np.exp(a.astype(np.float64)) * a.T).sum(1)
    for g in (f, tc.load_module(str(tmp_path / "k.so"))):
        held = {"kernel": g, "weights": [a]}
        c = copy.deepcopy(held)
        assert c["kernel"] is g and copy.copy(g) is g and c["weights"][0] is not a
        r = np.empty(64, "float32")
        c["kernel"](a, r)
        np.testing.assert_allclose(r, want, rtol=1e-5)
