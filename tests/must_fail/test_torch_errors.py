"""Mistakes with torch tensors, tecomp.torch.op, time_evaluator and constant extents: each
raises a TecompError subclass naming the object and the fix (and the kernel or op still
works afterwards)."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import tecomp as tc  # noqa: E402
import tecomp.torch as tct  # noqa: E402
from tecomp.errors import ArgumentError, ComputeError, ExprError, ScheduleError  # noqa: E402


@pytest.fixture(scope="module")
def axpy():
    n = tc.var("n")
    A = tc.placeholder((n, 8), name="A")
    B = tc.placeholder((n, 8), name="B")
    C = tc.compute((n, 8), lambda i, j: A[i, j] * 2 + B[i, j], name="C")
    return tc.build(tc.create_schedule(C.op), [A, B, C])


@pytest.fixture(scope="module")
def op():
    X = tc.placeholder((tc.var("n"), 4), name="X")
    Y = tc.compute(X.shape, lambda i, j: X[i, j] * 3.0, name="Y")
    return tct.op([X], Y), X, Y


def test_tensor_that_requires_grad(axpy):
    x = torch.randn(4, 8)
    with pytest.raises(ArgumentError, match=r"parameter A \(argument 1\): the torch tensor "
                                            r"requires grad.*pass x.detach\(\).*tecomp.torch.op"):
        axpy(torch.randn(4, 8, requires_grad=True), x, x.clone())
    out = torch.zeros(4, 8)
    axpy(x, x, out)                                  # still works
    torch.testing.assert_close(out, 3 * x)


def test_tensor_of_a_dtype_numpy_lacks(axpy):
    x = torch.randn(4, 8)
    with pytest.raises(ArgumentError, match=r"parameter A \(argument 1\): cannot view the "
                                            r"torch.Tensor argument.*Float8_e4m3fn.*x.float\(\)"):
        axpy(x.to(torch.float8_e4m3fn), x, x.clone())
    # bfloat16 is viewed (as ml_dtypes' type), and checked like any other dtype
    pytest.importorskip("ml_dtypes")
    with pytest.raises(ArgumentError, match=r"parameter A \(argument 1\) expects float32, got "
                                            r"bfloat16"):
        axpy(x.bfloat16(), x, x.clone())


def test_tensor_of_another_dtype_or_shape(axpy):
    x = torch.randn(4, 8)
    with pytest.raises(ArgumentError, match=r"expects float32, got float64"):
        axpy(x.double(), x, x.clone())
    with pytest.raises(ArgumentError, match=r"A.shape\[1\] = 8, got 9"):
        axpy(torch.ones(4, 9), x, x.clone())
    with pytest.raises(ArgumentError, match=r"is written by .* read-only|expects"):
        axpy(x, x, np.broadcast_to(np.float32(0), (4, 8)))


def test_memory_whose_size_cannot_be_checked(axpy):
    class OnlyDLPack:  # a DLPack producer tecomp does not know
        def __init__(self, t):
            self.t = t

        def __dlpack__(self, **kw):
            return self.t.__dlpack__(**kw)

        def __dlpack_device__(self):
            return self.t.__dlpack_device__()

    class RawPointer:  # the array interface over a bare integer address
        def __init__(self, arr, shape):
            self._arr = arr
            self.__array_interface__ = dict(arr.__array_interface__, shape=shape)

    a = torch.randn(3, 8)
    with pytest.raises(ArgumentError, match=r"PyCapsule .*raw pointer.*cannot check.*owns its "
                                            r"memory"):
        axpy(OnlyDLPack(a), a, torch.zeros(3, 8))
    base = np.zeros((3, 8), np.float32)
    with pytest.raises(ArgumentError, match=r"RawPointer object through a raw pointer"):
        axpy(RawPointer(base, (300, 8)), base, np.zeros((300, 8), np.float32))

    class Oversized:  # the array interface over a buffer, claiming more than it holds
        def __init__(self, arr, shape):
            self.__array_interface__ = dict(arr.__array_interface__, shape=shape, data=arr.data)

    with pytest.raises(ArgumentError, match=r"elements span bytes .* but the builtins.memoryview its memory "
                                            r"comes from holds .*\(96 bytes\): it was made .* "
                                            r"larger than its memory"):
        axpy(Oversized(base, (300, 8)), np.zeros((300, 8), np.float32),
             np.zeros((300, 8), np.float32))


def test_op_called_wrongly(op):
    o, X, Y = op
    x = torch.randn(2, 4)
    with pytest.raises(ArgumentError, match=r"takes 1 tensor \(X\), got 2"):
        o(x, x)
    with pytest.raises(ArgumentError, match=r"input X \(argument 1\) must be a torch tensor, "
                                            r"got ndarray"):
        o(x.numpy())
    with pytest.raises(ArgumentError, match=r"input X is declared float32, got a torch.int32 "
                                            r"tensor: convert it"):
        o(x.int())
    torch.testing.assert_close(o(x), 3 * x)          # still works


def test_op_defined_wrongly(op):
    _, X, Y = op
    with pytest.raises(ComputeError, match=r"the outputs read placeholder X, which is not "
                                           r"among the inputs \(\): add it"):
        tct.op([], Y)
    with pytest.raises(ComputeError, match=r"every input must be a tc.placeholder"):
        tct.op([Y], Y)
    with pytest.raises(ComputeError, match=r"listed twice"):
        tct.op([X, X], Y)
    with pytest.raises(ComputeError, match=r"outputs must be a compute tensor"):
        tct.op([X], X)
    with pytest.raises(ComputeError, match=r"dynamic must be None, True or False"):
        tct.op([X], Y, dynamic="yes")
    with pytest.raises(ScheduleError, match=r"schedule must be a Schedule, a function"):
        tct.op([X], Y, schedule=3)
    with pytest.raises(ComputeError, match=r"target cuda-emu is not one torch tensors live on"):
        tct.op([X], Y, target="cuda-emu")
    m = tc.var("m")
    Z = tc.compute((m,), lambda i: X[0, 0] * 1.0, name="Z")
    with pytest.raises(ComputeError, match=r"output Z's extent 0 depends on m, which is no "
                                           r"extent of an input"):
        tct.op([X], Z)
    bad = tct.op([X], Y, schedule=lambda outs: "not a schedule")
    with pytest.raises(ScheduleError, match=r"the schedule function returned 'not a schedule'"):
        bad(torch.randn(2, 4))


def test_time_evaluator_misuse(axpy):
    with pytest.raises(ArgumentError, match=r"keyword arguments only.*func_name and dev"):
        axpy.time_evaluator("main", None)
    with pytest.raises(ArgumentError, match=r"repeat must be an integer >= 1, got 0"):
        axpy.time_evaluator(repeat=0)
    with pytest.raises(ArgumentError, match=r"number must be an integer >= 1, got 2.5"):
        axpy.time_evaluator(number=2.5)
    with pytest.raises(ArgumentError, match=r"min_repeat_ms must be a finite number >= 0"):
        axpy.time_evaluator(min_repeat_ms=float("nan"))
    a = np.ones((2, 8), np.float32)
    with pytest.raises(ArgumentError, match=r"expects 3 arguments"):
        axpy.time_evaluator()(a, a)


def test_symbolic_extent_has_no_int():
    from tecomp.utils import get_const_int, get_const_tuple

    n = tc.var("n")
    A = tc.placeholder((4, n), name="A")
    with pytest.raises(ExprError, match=r"`n` is a symbolic int32 expression.*get_const_tuple"):
        int(A.shape[1])
    with pytest.raises(TypeError, match=r"symbolic"):   # ExprError is a TypeError
        range(A.shape[1] * 2)
    with pytest.raises(ExprError, match=r"only integer constants convert"):
        int(tc.const(2.5, "float32"))
    with pytest.raises(ExprError, match=r"get_const_int: `n` is symbolic"):
        get_const_int(A.shape[1])
    with pytest.raises(ExprError, match=r"expects a shape"):
        get_const_tuple(5)
    with pytest.raises(ExprError, match=r"extent 0: True is a bool"):
        get_const_tuple((True,))


def test_retype_misuse():
    from tecomp.te.retype import retype

    X = tc.placeholder((4,), name="X")
    Y = tc.compute((4,), lambda i: X[i] + 1.0, name="Y")
    with pytest.raises(ComputeError, match=r"maps float types to float types, got float32 -> int32"):
        retype([Y], [X], {"float32": "int32"})
    with pytest.raises(ComputeError, match=r"read placeholder X, which is not among the inputs"):
        retype([Y], [], {"float32": "float64"})
    with pytest.raises(ComputeError, match=r"values maps integer variables to ints"):
        retype([Y], [X], values={tc.var("n"): 2.0})
