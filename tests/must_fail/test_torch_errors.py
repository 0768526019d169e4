"""Mistakes with torch tensors, tecomp.torch.op, time_evaluator and constant extents: each
raises a TecompError subclass naming the object and the fix (and the kernel or op still
works afterwards)."""
import os
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import tecomp as tc  # noqa: E402
import tecomp.torch as tct  # noqa: E402
from tecomp.errors import ArgumentError, ComputeError, ExprError, ScheduleError  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from helpers import DLPackWrapper  # noqa: E402  (tests/helpers.py)


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
    # the fix in torch's words, not numpy's
    with pytest.raises(ArgumentError, match=r"expects float32, got float64: convert with "
                                            r"a\.to\(torch\.float32\)$"):
        axpy(x.double(), x, x.clone())
    with pytest.raises(ArgumentError, match=r"A.shape\[1\] = 8, got 9"):
        axpy(torch.ones(4, 9), x, x.clone())
    with pytest.raises(ArgumentError, match=r"is written by .* read-only|expects"):
        axpy(x, x, np.broadcast_to(np.float32(0), (4, 8)))


def test_memory_whose_size_cannot_be_checked(axpy):
    """A raw pointer carries no size: refused.  (A DLPack producer describes the memory it
    owns, and is taken: tests/test_torch.py::test_generic_dlpack_producers.)"""
    class RawPointer:  # the array interface over a bare integer address
        def __init__(self, arr, shape):
            self._arr = arr
            self.__array_interface__ = dict(arr.__array_interface__, shape=shape)

    base = np.zeros((3, 8), np.float32)
    with pytest.raises(ArgumentError, match=r"RawPointer object through a raw pointer \(an "
                                            r"__array_interface__ whose data is an integer "
                                            r"address\), whose size tecomp cannot check"):
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
                                            r"tensor: convert it \(x.to\(torch.float32\)\)"):
        o(x.int())
    torch.testing.assert_close(o(x), 3 * x)          # still works


def test_op_given_another_device_or_dtype_after_good_calls(op):
    """The op keeps its latest kernel for the next call; a tensor on another device or of
    another dtype after good calls is refused all the same, and a CUDA op refuses CPU
    tensors before it compiles anything."""
    o, X, Y = op
    x = torch.randn(3, 4)
    for _ in range(2):
        torch.testing.assert_close(o(x), 3 * x)
    with pytest.raises(ArgumentError, match=r"input X \(argument 1\) is on meta, but the op "
                                            r"runs on cpu \(target llvm.*\): move it with "
                                            r"\.to\('cpu'\)"):
        o(torch.empty(3, 4, device="meta"))
    with pytest.raises(ArgumentError, match=r"input X is declared float32, got a torch.int64 "
                                            r"tensor: convert it"):
        o(x.long())
    torch.testing.assert_close(o(x), 3 * x)          # still works
    on_gpu = tct.op([X], Y, target="cuda", name="times3_cuda")
    with pytest.raises(ArgumentError, match=r"input X \(argument 1\) is on cpu, but the op "
                                            r"runs on cuda \(target cuda\): move it with "
                                            r"\.to\('cuda'\)"):
        on_gpu(x)
    assert not on_gpu._compiled


def test_op_called_with_two_float_dtypes_for_one_declared_type():
    """Two inputs declared float32 given float32 and float64 tensors: the op's own message
    naming both (the op compiled itself in float64 and the kernel refused the float32
    tensor with advice about numpy's astype)."""
    A = tc.placeholder((4,), name="A")
    W = tc.placeholder((4,), name="W")
    o = tct.op([A, W], tc.compute((4,), lambda i: A[i] * W[i], name="AW"))
    x = torch.randn(4)
    for a, b, got in ((x, x.double(), r"torch.float32 and torch.float64"),
                      (x.double(), x.half(), r"torch.float64 and torch.float16")):
        with pytest.raises(ArgumentError, match=r"AW_\d+: inputs A and W are both declared "
                                                r"float32, but got " + got + r" tensors: a float "
                                                r"op is compiled for another float dtype only "
                                                r"when every input .*convert them to one dtype"):
            o(a, b)
    torch.testing.assert_close(o(x.double(), x.double()), (x * x).double())  # still works


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


# ---------------------------------------------------------------------------------------
# tensors a kernel cannot take as they are


def test_outputs_with_a_lazy_bit(axpy):
    """An output with torch's negation or conjugation bit: its memory holds the other
    sign, so the kernel's results would come out negated.  (Inputs with the bit are read
    through a resolved copy: tests/test_torch.py.)"""
    x = torch.ones(4, 8)
    out = torch.zeros(4, 8)
    with pytest.raises(ArgumentError, match=r"parameter C \(argument 3\): the torch tensor has "
                                            r"the lazy negation bit set .*and the kernel writes "
                                            r"it: .*wrong sign; pass a tensor without the bit, "
                                            r"e\.g\. out = x\.resolve_neg\(\) or x\.clone\(\)"):
        axpy(x, x, torch._neg_view(out))
    z = torch.zeros(4, 8, dtype=torch.complex64)
    with pytest.raises(ArgumentError, match=r"parameter C \(argument 3\): the torch tensor has "
                                            r"the lazy negation bit"):
        axpy(x, x, z.conj().imag)
    with pytest.raises(ArgumentError, match=r"parameter C \(argument 3\): the torch tensor has "
                                            r"the lazy conjugation bit set \(a view such as "
                                            r"z\.conj\(\).*x\.resolve_conj\(\)"):
        axpy(x, x, z.conj())
    # a conjugated input is resolved, then refused for its dtype
    with pytest.raises(ArgumentError, match=r"parameter A \(argument 1\) expects float32, got "
                                            r"complex64"):
        axpy(z.conj(), x, out)
    assert not out.any()
    axpy(x, x, out)                                  # still works
    torch.testing.assert_close(out, 3 * x)


def test_a_zero_tensor_as_an_output(axpy):
    """A ZeroTensor (torch._efficientzerotensor) has no memory to write: its data pointer
    is 0.  (As an input it is read as zeros: tests/test_torch.py.)"""
    x = torch.ones(4, 8)
    with pytest.raises(ArgumentError, match=r"parameter C \(argument 3\): the torch tensor is "
                                            r"a ZeroTensor .*no memory for the kernel to "
                                            r"write: .*out = torch\.zeros_like\(x\)"):
        axpy(x, x, torch._efficientzerotensor(4, 8))


@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")
def test_a_kernel_called_inside_torch_jit_trace(axpy):
    """A trace records torch ops only: the kernel's call would be missing from it, and the
    traced function would return its output's old memory.  Refused, the first call of
    the tensors and after the fast binder is made; a tecomp.torch.op is recorded
    (tests/test_torch.py)."""
    x, out = torch.ones(4, 8), torch.zeros(4, 8)

    def f(a, b):
        axpy(a, b, out)
        return out

    for _ in range(2):
        with pytest.raises(ArgumentError, match=r"parameter A \(argument 1\): a torch tensor "
                                                r"passed while torch\.jit\.trace records.*"
                                                r"tecomp\.torch\.op\(\.\.\.\)"):
            torch.jit.trace(f, (x, x), check_trace=False)
        axpy(x, x, out)      # (the fast binder made)
    torch.testing.assert_close(out, torch.full((4, 8), 3.0))


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_tensors_that_are_not_dense_memory(axpy):
    x = torch.ones(4, 8)
    out = torch.zeros(4, 8)
    cases = [
        (lambda: x.to_sparse(), r"is of layout torch\.sparse_coo; tecomp reads and writes dense "
                                r"\(strided\) memory: pass x\.to_dense\(\)"),
        (lambda: x.to_sparse_csr(), r"is of layout torch\.sparse_csr.*x\.to_dense\(\)"),
        (lambda: torch.quantize_per_tensor(x, 0.1, 0, torch.qint8),
         r"is quantized; .*pass x\.dequantize\(\)"),
        (lambda: torch.nested.nested_tensor([x[0], x[1]]), r"is nested; .*x\.to_padded_tensor"),
        (lambda: x.to_mkldnn(), r"is of layout torch\._mkldnn.*x\.to_dense\(\)"),
        (lambda: torch.ones(4, 8, device="meta"), r"is on the meta device, which holds no data"),
    ]
    for make, match in cases:
        with pytest.raises(ArgumentError, match=r"parameter A \(argument 1\): the torch tensor "
                                                + match):
            axpy(make(), x, out)
    with pytest.raises(ArgumentError, match=r"parameter C \(argument 3\): the torch tensor is on "
                                            r"the meta device"):
        axpy(x, x, torch.zeros(4, 8, device="meta"))


def test_torch_func_transforms(axpy, op):
    """torch.func's tensors (vmap's BatchedTensor, grad's wrappers) have no memory of their
    own: an ArgumentError, not torch's RuntimeError from inside tecomp."""
    o, X, Y = op

    def call(x):
        out = torch.empty_like(x)
        axpy(x, x, out)
        return out

    with pytest.raises(ArgumentError, match=r"parameter A \(argument 1\): the torch tensor is a "
                                            r"torch\.func transform's tensor \(vmap's "
                                            r"BatchedTensor\).*call the kernel outside torch\.func "
                                            r"transforms"):
        torch.func.vmap(call)(torch.ones(3, 4, 8))
    with pytest.raises(ArgumentError, match=r"parameter X \(argument 1\): the torch tensor is a "
                                            r"torch\.func transform's tensor"):
        torch.func.vmap(o)(torch.ones(3, 2, 4))
    with pytest.raises(ArgumentError, match=r"input X \(argument 1\) is a torch\.func "
                                            r"transform's tensor .*differentiate with "
                                            r"torch\.autograd"):
        torch.func.grad(lambda x: o(x).sum())(torch.ones(2, 4))
    x = torch.ones(2, 4, requires_grad=True)
    o(x).sum().backward()                            # torch.autograd still works
    torch.testing.assert_close(x.grad, torch.full((2, 4), 3.0))


def test_overlapping_tensors(axpy):
    x = torch.arange(40, dtype=torch.float32)
    with pytest.raises(ArgumentError, match=r"parameter A \(argument 1\) and parameter C "
                                            r"\(argument 3\) share memory, and main writes C"):
        axpy(x[:32].view(4, 8), torch.ones(4, 8), x[8:].view(4, 8))
    with pytest.raises(ArgumentError, match=r"parameter C \(argument 3\) is written by main, but "
                                            r"its elements overlap: C\[0, 0\] and C\[1, 0\] are "
                                            r"the same memory"):
        axpy(torch.ones(4, 8), torch.ones(4, 8), torch.zeros(1, 8).expand(4, 8))
    assert x[8:].equal(torch.arange(8, 40, dtype=torch.float32))   # nothing was written


def test_dlpack_memory_the_producer_exports_read_only(axpy):
    if int(np.__version__.split(".")[0]) < 2:
        pytest.skip("numpy < 2 reads DLPack without the read-only flag (DLPack 1.0)")

    Wrapper = DLPackWrapper
    ro = np.zeros((4, 8), np.float32)
    ro.flags.writeable = False
    x = np.ones((4, 8), np.float32)
    with pytest.raises(ArgumentError, match=r"parameter C \(argument 3\) is written by main, but "
                                            r"the array is read-only \(its DLPack producer "
                                            r"exported it read-only\)"):
        axpy(x, x, Wrapper(ro))
    # a view made past the elements the producer exported is checked against them
    big = np.lib.stride_tricks.as_strided(np.from_dlpack(Wrapper(x)), (40, 8), (32, 4))
    with pytest.raises(ArgumentError, match=r"parameter A \(argument 1\): the array's elements "
                                            r"span bytes .* but the numpy\.ndarray its memory "
                                            r"comes from holds .*\(128 bytes\)"):
        axpy(big, np.ones((40, 8), np.float32), np.zeros((40, 8), np.float32))


def test_tensor_of_another_rank_for_a_symbolic_input():
    """A 0-d tensor where the op binds n from X.shape[0] (an IndexError from the op's
    shape binding before)."""
    n = tc.var("n")
    X = tc.placeholder((n, 8), name="X")
    o = tct.op([X], [tc.compute(X.shape, lambda i, j: X[i, j] + 1.0, name="inc")])
    with pytest.raises(ArgumentError, match=r"input X \(argument 1\) has 2 dimensions \(n, 8\), "
                                            r"got a 0-d tensor of shape \(\): pass a tensor of "
                                            r"rank 2"):
        o(torch.tensor(1.0))


def test_nested_tensor_for_a_symbolic_input():
    """A nested tensor has no sizes (torch's RuntimeError 'Internal error' before)."""
    n = tc.var("n")
    X = tc.placeholder((n, 8), name="X")
    o = tct.op([X], [tc.compute(X.shape, lambda i, j: X[i, j] + 1.0, name="inc")])
    x = torch.nested.as_nested_tensor([torch.randn(2, 8), torch.randn(3, 8)])
    with pytest.raises(ArgumentError, match=r"input X \(argument 1\) is a nested tensor.*pass "
                                            r"x.to_padded_tensor\(0.0\)"):
        o(x)


def test_tensor_whose_storage_was_shrunk(axpy, op):
    # untyped_storage().resize_() (FSDP's way of freeing a parameter) leaves the tensor's
    # shape: the binders read and wrote past the storage (a shrunk output: a segfault, or
    # an output written into memory numpy allocated and then lost)
    fix = r"resize the storage back to at least 128 bytes before the call"
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    for size in (0, 16, 124):
        out = torch.zeros(4, 8)
        axpy(x, y, out)                      # the fast binder, once with a whole storage
        out.untyped_storage().resize_(size)
        with pytest.raises(ArgumentError, match=rf"parameter C \(argument 3\): the torch "
                                                rf"tensor's elements reach byte 128 of its "
                                                rf"storage, which holds {size} bytes.*would "
                                                rf"write past it; {fix}"):
            axpy(x, y, out)
        shrunk = torch.randn(4, 8)
        shrunk.untyped_storage().resize_(size)
        with pytest.raises(ArgumentError, match=rf"parameter B \(argument 2\).*holds {size} "
                                                rf"bytes.*would read past it; {fix}"):
            axpy(x, shrunk, torch.zeros(4, 8))
    # a strided view (the generic path) and an offset into the storage
    base = torch.zeros(8, 9)
    view = base[:4, 1:]
    base.untyped_storage().resize_(4 * 30)
    with pytest.raises(ArgumentError, match=r"parameter C.*reach byte 144 of its storage, "
                                            r"which holds 120 bytes"):
        axpy(x, y, view)
    f, _, _ = op
    leaf = torch.randn(3, 4, requires_grad=True)
    leaf.untyped_storage().resize_(0)
    with pytest.raises(ArgumentError, match=r"parameter X \(argument 1\).*holds 0 bytes"):
        f(leaf)
    out = torch.zeros(4, 8)
    axpy(x, y, out)                          # still callable
    torch.testing.assert_close(out, 2 * x + y)


class _ScaledOp(torch.nn.Module):
    """A model holding a tecomp.torch op (test_pickling_an_op; pickle needs the class at
    module level)."""

    def __init__(self, f):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(4))
        self.f = f

    def forward(self, x):
        return self.f(x) * self.scale


def test_pickling_an_op(op):
    """torch.save(model) pickles the model's attributes: an op among them is refused,
    saying to save the state_dict (it raised an AttributeError about a local lambda
    before)."""
    import io

    m = _ScaledOp(op[0])
    with pytest.raises(ArgumentError, match=r"tecomp.torch op tecomp::\w+ cannot be pickled.*"
                                            r"save model.state_dict\(\) with torch.save.*"
                                            r"tecomp.torch.op, again and call load_state_dict"):
        torch.save(m, io.BytesIO())
    torch.save(m.state_dict(), io.BytesIO())         # the weights: fine
    x = torch.randn(2, 4)
    with torch.no_grad():
        torch.testing.assert_close(m(x), 3 * x)      # still works


def test_forward_mode_dual_tensors(axpy, op):
    """Inside torch.autograd.forward_ad.dual_level, a tensor with a tangent: a kernel's
    input (its tangent was dropped: the output had none), a kernel's output (its values
    were overwritten, its tangent left as it was) and a tecomp.torch op's input (the
    output had no tangent, silently, where a torch.autograd.Function without jvp
    raises) are refused, naming the tensor; plain tensors in the level still run."""
    import torch.autograd.forward_ad as fwad

    x = torch.randn(4, 8)
    with fwad.dual_level():
        d = fwad.make_dual(x, torch.ones_like(x))
        with pytest.raises(ArgumentError, match=r"parameter A \(argument 1\): the torch tensor "
                                                r"is a forward-mode AD dual tensor.*would have "
                                                r"no tangent: pass its primal"):
            axpy(d, x, torch.empty(4, 8))
        out = fwad.make_dual(torch.zeros(4, 8), torch.ones(4, 8))
        with pytest.raises(ArgumentError, match=r"parameter C \(argument 3\): the torch tensor "
                                                r"is a forward-mode AD dual tensor.*its "
                                                r"tangent would not follow them"):
            axpy(x, x, out)
        with pytest.raises(ArgumentError, match=r"input X \(argument 1\) is a forward-mode AD "
                                                r"dual tensor.*no forward-mode formula \(jvp\)"):
            op[0](fwad.make_dual(torch.randn(3, 4), torch.ones(3, 4)))
        plain = torch.empty(4, 8)
        axpy(x, x, plain)                            # plain tensors in the level: they run
        torch.testing.assert_close(plain, 3 * x)
        torch.testing.assert_close(op[0](x[:, :4]), 3 * x[:, :4])
