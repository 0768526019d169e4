"""Calls that must fail: a compiled kernel given arguments that do not match its
parameters.  Each raises ArgumentError naming the parameter (name and position), what it
expects and what it got -- before the kernel touches memory -- and the module still works
afterwards."""
import os
import shutil

import numpy as np
import pytest

import tecomp as tc
from tecomp.ir import interp


@pytest.fixture(scope="module")
def scaled():
    """B[2n, 4] = A[i // 2, j] * alpha, with n bound from A and alpha a float32 scalar."""
    n = tc.var("n")
    alpha = tc.var("alpha", "float32")
    A = tc.placeholder((n, 4), name="A")
    B = tc.compute((n * 2, 4), lambda i, j: A[i // 2, j] * alpha, name="B")
    s = tc.create_schedule(B.op)
    return tc.build(s, [A, B, alpha]), s, [A, B, alpha]


@pytest.fixture(scope="module")
def int_kernel():
    k = tc.var("k")
    X = tc.placeholder((4,), dtype="int8", name="X")
    Y = tc.compute((4,), lambda i: X[i] + k.astype("int8"), name="Y")
    s = tc.create_schedule(Y.op)
    return tc.build(s, [X, Y, k])


def _a(n=3):
    return np.ones((n, 4), "float32")


def _b(n=3):
    return np.zeros((2 * n, 4), "float32")


def _still_works(f):
    b = _b()
    f(_a(), b, 2.0)
    np.testing.assert_array_equal(b, np.full((6, 4), 2.0, "float32"))


def test_too_many_arguments(scaled):
    f = scaled[0]
    with pytest.raises(tc.ArgumentError, match=r"main expects 3 arguments \(A, B, alpha\), got 4"):
        f(_a(), _b(), 1.0, 2)
    _still_works(f)


def test_no_arguments(scaled):
    with pytest.raises(tc.ArgumentError, match=r"main expects 3 arguments \(A, B, alpha\), got 0"):
        scaled[0]()


def test_list_instead_of_array(scaled):
    with pytest.raises(tc.ArgumentError, match=r"parameter A \(argument 1\) expects a numpy\.ndarray "
                                               r"of float32 with shape \(n, 4\), got a list: convert with np\.asarray"):
        scaled[0]([[1.0] * 4] * 3, _b(), 1.0)


def test_wrong_dtype_is_not_converted(scaled):
    with pytest.raises(tc.ArgumentError, match=r"parameter A \(argument 1\) expects float32, got "
                                               r"float64: convert with a\.astype\(np\.float32\)"):
        scaled[0](_a().astype("float64"), _b(), 1.0)


def test_wrong_ndim(scaled):
    with pytest.raises(tc.ArgumentError, match=r"parameter B \(argument 2\) expects a 2-d array of "
                                               r"shape \(n\*2, 4\), got a 3-d array of shape \(6, 4, 1\)"):
        scaled[0](_a(), _b()[:, :, None], 1.0)


def test_constant_extent_mismatch(scaled):
    with pytest.raises(tc.ArgumentError, match=r"parameter A \(argument 1\) expects A\.shape\[1\] = 4, "
                                               r"got 3"):
        scaled[0](np.ones((3, 3), "float32"), _b(), 1.0)


def test_transposed_view_has_the_wrong_shape(scaled):
    with pytest.raises(tc.ArgumentError, match=r"expects A\.shape\[1\] = 4, got 3 .*got \(4, 3\)"):
        scaled[0](np.ones((3, 4), "float32").T, _b(), 1.0)


def test_symbolic_shape_expression_mismatch(scaled):
    with pytest.raises(tc.ArgumentError, match=r"B\.shape\[0\] = 5 but parameter B \(argument 2\) "
                                               r"expects n\*2 = 6 \(n = 3 from A\.shape\[0\]\)"):
        scaled[0](_a(), np.zeros((5, 4), "float32"), 1.0)
    _still_works(scaled[0])


def test_read_only_output(scaled):
    b = _b()
    b.flags.writeable = False
    with pytest.raises(tc.ArgumentError, match=r"parameter B \(argument 2\) is written by main, but "
                                               r"the array is read-only"):
        scaled[0](_a(), b, 1.0)


def test_broadcast_view_as_output(scaled):
    with pytest.raises(tc.ArgumentError, match=r"parameter B \(argument 2\) is written by main.*read-only"):
        scaled[0](_a(), np.broadcast_to(np.float32(0), (6, 4)), 1.0)


def test_unaligned_view(scaled):
    raw = np.zeros(4 * 24 + 1, np.uint8)[1:].view(np.float32).reshape(6, 4)
    with pytest.raises(tc.ArgumentError, match=r"parameter B \(argument 2\): the array is not aligned "
                                               r"to its 4-byte elements"):
        scaled[0](_a(), raw, 1.0)


@pytest.mark.parametrize("bad,what", [("x", r"str 'x'"), (None, r"NoneType None"),
                                      (True, r"bool True"), (np.array([1.0]), r"a 1-d float64 array")])
def test_float_scalar_of_wrong_type(scaled, bad, what):
    with pytest.raises(tc.ArgumentError, match=r"parameter alpha \(argument 3\) expects a number "
                                               r"\(float32\), got " + what):
        scaled[0](_a(), _b(), bad)


def test_int_scalar_out_of_range(int_kernel):
    with pytest.raises(tc.ArgumentError, match=r"parameter k \(argument 3\) = 2147483648 does not fit "
                                               r"int32 \[-2147483648, 2147483647\]"):
        int_kernel(np.zeros(4, "int8"), np.zeros(4, "int8"), 2**31)


@pytest.mark.parametrize("bad,what", [(1.5, "float 1.5"), (np.float32(2.0), r"float32 np\.float32\(2\.0\)"),
                                      ("a", "str 'a'")])
def test_int_scalar_of_wrong_type(int_kernel, bad, what):
    with pytest.raises(tc.ArgumentError, match=r"parameter k \(argument 3\) expects an integer "
                                               r"\(int32\), got " + what):
        int_kernel(np.zeros(4, "int8"), np.zeros(4, "int8"), bad)


def test_numpy_integer_scalar_is_accepted(int_kernel):
    y = np.zeros(4, "int8")
    int_kernel(np.arange(4, dtype="int8"), y, np.int64(3))
    np.testing.assert_array_equal(y, np.arange(4, dtype="int8") + 3)


def test_keyword_arguments(int_kernel):
    with pytest.raises(tc.ArgumentError, match=r"takes its arguments by position \(.*\); got keyword argument\(s\) X: pass them in that order"):
        int_kernel(X=np.zeros(4, "int8"))


@pytest.mark.xfail(strict=True, reason="a negative scalar used as an extent (n = -3 for "
                   "`allocate B: float32[n]` and `for (k, 0, n)`) runs in the LLVM build as if "
                   "n were 0, while the interpreter raises ShapeError; the CPU runtime "
                   "(tecomp/codegen/llvm_runtime.py) does not check scalars used as extents")
def test_negative_scalar_extent():
    n = tc.var("n")
    A = tc.placeholder((8,), name="A")
    B = tc.compute((n,), lambda i: A[i % 8] * 2, name="B")
    k = tc.reduce_axis((0, n), name="k")
    C = tc.compute((1,), lambda i: tc.sum(B[k], axis=k), name="C")
    f = tc.build(tc.create_schedule(C.op), [A, C, n])
    with pytest.raises(tc.ArgumentError, match=r"n"):
        f(np.ones(8, "float32"), np.zeros(1, "float32"), -3)


def test_zero_scalar_extent_is_fine():
    n = tc.var("n")
    A = tc.placeholder((8,), name="A")
    k = tc.reduce_axis((0, n), name="k")
    C = tc.compute((1,), lambda i: tc.sum(A[k % 8], axis=k), name="C")
    f = tc.build(tc.create_schedule(C.op), [A, C, n])
    c = np.full(1, 7.0, "float32")
    f(np.ones(8, "float32"), c, 0)
    assert c[0] == 0


def test_the_interpreter_checks_arguments_too(scaled):
    _, s, args = scaled
    func = tc.lower(s, args)
    with pytest.raises(tc.ArgumentError, match=r"main takes 3 argument\(s\) \(A, B, alpha\), got 1"):
        interp.run(func, _a())
    with pytest.raises(tc.ArgumentError, match=r"argument A of main must have dtype float32, got int16"):
        interp.run(func, _a().astype("int16"), _b(), 1.0)
    with pytest.raises(tc.ArgumentError, match=r"argument A of main must be a numpy array, got list"):
        interp.run(func, [1.0], _b(), 1.0)


@pytest.mark.skipif(shutil.which(os.environ.get("CXX", "g++")) is None, reason="needs g++")
def test_cuda_emulation_checks_arguments_like_the_cpu_runtime():
    n = tc.var("n")
    A = tc.placeholder((n,), name="A")
    B = tc.compute((n,), lambda i: A[i] + 1, name="B")
    s = tc.create_schedule(B.op)
    xo, xi = s[B].split(B.op.axis[0], factor=4)
    s[B].bind(xo, tc.thread_axis("blockIdx.x"))
    s[B].bind(xi, tc.thread_axis("threadIdx.x"))
    f = tc.build(s, [A, B], target="cuda-emu")
    with pytest.raises(tc.ArgumentError, match=r"expects? .*2 arguments|takes 2"):
        f(np.zeros(5, "float32"))
    with pytest.raises(tc.ArgumentError, match=r"float32.*float64|float64.*float32"):
        f(np.zeros(5), np.zeros(5, "float32"))
    with pytest.raises(tc.ArgumentError, match=r"B"):
        f(np.zeros(5, "float32"), np.zeros(6, "float32"))
    b = np.zeros(5, "float32")
    f(np.arange(5, dtype="float32"), b)
    np.testing.assert_array_equal(b, np.arange(5) + 1)
