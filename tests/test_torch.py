"""tecomp and PyTorch: torch tensors in every call, tecomp.torch.op (autograd, gradcheck,
torch.compile), and the TVM habits (int() of extents, get_const_tuple, time_evaluator)."""
import operator

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import tecomp as tc  # noqa: E402
import tecomp.nn as nn  # noqa: E402
import tecomp.torch as tct  # noqa: E402
from tecomp.runtime.argcheck import as_host_array  # noqa: E402
from tecomp.errors import ArgumentError  # noqa: E402
from helpers import DLPackWrapper, gpu_driver  # noqa: E402, F401  (tests/helpers.py; a fixture)


def _axpy(dtype="float32"):
    n = tc.var("n")
    A = tc.placeholder((n, 8), dtype, name="A")
    B = tc.placeholder((n, 8), dtype, name="B")
    C = tc.compute((n, 8), lambda i, j: A[i, j] * 2 + B[i, j], name="C")
    return tc.build(tc.create_schedule(C.op), [A, B, C])


# ---------------------------------------------------------------------------------------
# torch tensors (and DLPack, the array interface) as kernel arguments


def test_torch_tensors_are_written_in_place():
    f = _axpy()
    a, b = torch.randn(5, 8), torch.randn(5, 8)
    c = torch.zeros(5, 8)
    f(a, b, c)
    torch.testing.assert_close(c, a * 2 + b)


@pytest.mark.parametrize("view", ["contiguous", "transposed", "sliced"])
def test_zero_copy_same_data_pointer(view):
    base = torch.arange(96, dtype=torch.float32).reshape(12, 8)
    t = {"contiguous": base, "transposed": base.reshape(8, 12).t(), "sliced": base[::2, 1:]}[view]
    a = as_host_array(t, "x")
    assert a.ctypes.data == t.data_ptr()
    assert a.strides == tuple(s * 4 for s in t.stride())
    # the kernel writes through the view into the base tensor's memory
    f = _axpy()
    out = torch.zeros(16, 16)[::2, 2:10]
    x, y = torch.randn(8, 8), torch.randn(8, 8).t()
    f(x, y, out)
    torch.testing.assert_close(out, x * 2 + y)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int8", "int16", "int32",
                                   "int64", "uint8"])
def test_every_dtype(dtype):
    f = _axpy(dtype)
    td = getattr(torch, dtype)
    a = torch.arange(40).reshape(5, 8).to(td)
    b = torch.ones(5, 8, dtype=td)
    c = torch.zeros(5, 8, dtype=td)
    f(a, b, c)                        # the torch binder (contiguous)
    assert torch.equal(c, a * 2 + b)
    c2 = torch.zeros(8, 5, dtype=td).t()
    f(a, b, c2)                       # the generic path (a strided view)
    assert torch.equal(c2, a * 2 + b)


def test_tensor_aliasing():
    f = _axpy()
    x = torch.randn(4, 8)
    want = x * 3
    f(x, x, x)                        # in place: the aliasing-safe variant
    torch.testing.assert_close(x, want)


def test_array_interface_backed_by_a_buffer():
    f = _axpy()

    class Interface:  # the array interface backed by a buffer object: checked and used
        def __init__(self, arr, shape):
            self._arr = arr
            self.__array_interface__ = dict(arr.__array_interface__, shape=shape,
                                            data=arr.data)

    base = np.arange(24, dtype=np.float32).reshape(3, 8)
    out = np.zeros((3, 8), np.float32)
    f(Interface(base, (3, 8)), base, out)
    np.testing.assert_array_equal(out, base * 3)


def _neg_views():
    """Tensors with torch's lazy negation bit, each with the values it shows."""
    x = torch.arange(40, dtype=torch.float32).reshape(5, 8) - 7
    z = torch.complex(torch.randn(5, 8), torch.randn(5, 8))
    return {
        "neg_view": torch._neg_view(x),
        "neg_view strided": torch._neg_view(torch.arange(80, dtype=torch.float32)
                                            .reshape(5, 16))[:, ::2],
        "conj().imag": z.conj().imag,
        "conj().imag transposed": torch.complex(torch.randn(8, 5), torch.randn(8, 5))
        .conj().imag.t(),
    }


@pytest.mark.parametrize("name", list(_neg_views()))
def test_tensors_with_the_negation_bit_are_read_as_they_show(name):
    x = _neg_views()[name]
    assert x.is_neg()
    shown = x.clone()                                # resolved: the values it shows
    f = _axpy()
    b = torch.ones(5, 8)
    c = torch.zeros(5, 8)
    f(x, b, c)                                       # the fast binder, or the generic path
    torch.testing.assert_close(c, shown * 2 + 1)
    f(b, x, c)
    torch.testing.assert_close(c, shown + 2)
    assert x.is_neg()                                # (the argument is left as it was)
    # a tecomp.torch op, with and without autograd
    X = tc.placeholder((tc.var("n"), 8), name="X")
    op = tct.op([X], tc.compute(X.shape, lambda i, j: X[i, j] * 3.0, name="Y"))
    torch.testing.assert_close(op(x), shown * 3)
    xg = x.detach().requires_grad_()
    assert xg.is_neg()
    y = op(xg)
    torch.testing.assert_close(y, shown * 3)
    y.sum().backward()
    torch.testing.assert_close(xg.grad, torch.full((5, 8), 3.0))


def test_zero_tensors_are_read_as_zeros():
    """torch._efficientzerotensor (a zero tangent of forward-mode AD and torch.func) has
    elements but no memory (data pointer 0): the fast binder passed that pointer and the
    kernel read address 0 (a segmentation fault).  Read as zeros, fast path or not."""
    z = torch._efficientzerotensor(5, 8)
    assert z._is_zerotensor() and z.data_ptr() == 0
    b = torch.ones(5, 8)
    for f in (_axpy(), _axpy_const()):
        c = torch.full((5, 8), 7.0)
        f(z, b, c)
        torch.testing.assert_close(c, b)
        f(b, z, c)
        torch.testing.assert_close(c, 2 * b)
    X = tc.placeholder((tc.var("n"), 8), name="X")
    op = tct.op([X], tc.compute(X.shape, lambda i, j: X[i, j] * 3.0 + 1.0, name="Y"))
    torch.testing.assert_close(op(z), torch.ones(5, 8))


def test_custom_ops_fake_strides_are_the_real_ones():
    """torch.library.opcheck's fake-tensor test of the op and its backward op with strided
    inputs: the fake implementations give the real outputs' strides.  Before session 31 the
    backward's fake gave a transposed input's gradient the input's strides (empty_like)
    and the real one was contiguous: torch.compile's inductor refused the model's
    backward with an AssertionError on the strides."""
    X = tc.placeholder((tc.var("n"), 6), name="X")
    op = tct.op([X], tc.compute(X.shape, lambda i, j: tc.exp(X[i, j]), name="Y"))
    fwd = getattr(torch.ops.tecomp, op.name).default
    bwd = getattr(torch.ops.tecomp, f"{op.name}_backward").default
    t = torch.randn(6, 4).t()
    for f, args in ((fwd, (t,)), (bwd, (t, torch.randn(4, 6))), (bwd, (t.contiguous(), t))):
        torch.library.opcheck(f, args, test_utils=("test_schema", "test_faketensor"))


def test_torch_jit_trace_records_the_op():
    """torch.jit.trace of a model with an op records ``tecomp::<name>`` (forward and, through
    its registered autograd formula, backward): the traced model computes new inputs of
    another row count.  Before session 31 a call whose inputs did not require grad ran the
    kernel outside the trace, which kept only the output's ``aten::empty``: the traced
    model returned uninitialised memory."""
    X = tc.placeholder((tc.var("n"), 8), name="X")
    op = tct.op([X], tc.compute(X.shape, lambda i, j: X[i, j] * 3.0 + 1.0, name="Y"))

    class M(torch.nn.Module):
        def forward(self, x):
            return op(x) * 2.0

    for grad in (False, True):
        traced = torch.jit.trace(M(), torch.ones(4, 8, requires_grad=grad), check_trace=False)
        assert f"tecomp::{op.name}" in str(traced.graph)
        x = torch.randn(6, 8, requires_grad=True)
        y = traced(x)
        torch.testing.assert_close(y, (x * 3.0 + 1.0) * 2.0)
        y.sum().backward()
        torch.testing.assert_close(x.grad, torch.full((6, 8), 6.0))


def _axpy_const():
    A, B = tc.placeholder((5, 8), name="A"), tc.placeholder((5, 8), name="B")
    C = tc.compute((5, 8), lambda i, j: A[i, j] * 2 + B[i, j], name="C")
    return tc.build(tc.create_schedule(C.op), [A, B, C])


def test_generic_dlpack_producers():
    """Any object with __dlpack__/__dlpack_device__ (JAX, CuPy, TensorFlow, a wrapper) is
    taken zero-copy, as np.from_dlpack and torch.from_dlpack take it: its producer owns
    and describes the memory.  Outputs are written into the producer's memory."""
    Wrapper = DLPackWrapper
    f = _axpy()
    t = torch.arange(40, dtype=torch.float32).reshape(5, 8)
    n = np.arange(40, dtype=np.float32).reshape(5, 8)
    for src in (t, n):
        want = src * 2 + 1
        for out in (torch.zeros(5, 8), np.zeros((5, 8), np.float32)):
            f(Wrapper(src), Wrapper(np.ones((5, 8), np.float32)), Wrapper(out))
            np.testing.assert_array_equal(np.asarray(out), np.asarray(want))
    # strided and offset views, as inputs and outputs: the owner's memory is written
    big_t = torch.zeros(7, 18)
    big_n = np.zeros((7, 18), np.float32)
    for out, owner in ((big_t[1:6, 2::2], big_t), (big_n[1:6, 2::2], big_n)):
        f(Wrapper(t.t().contiguous().t()), Wrapper(n[:, ::-1]), Wrapper(out))
        view = np.asarray(owner)[1:6, 2::2]
        np.testing.assert_array_equal(view, n * 2 + n[:, ::-1])
        assert np.asarray(owner)[0].sum() == 0 and np.asarray(owner)[:, 1].sum() == 0
    # read-only memory (DLPack 1.0's flag: numpy 2 exports a read-only array so) is
    # read, and refused as an output (tests/must_fail/test_torch_errors.py)
    ro = np.arange(40, dtype=np.float32).reshape(5, 8)
    ro.flags.writeable = False
    c = np.zeros((5, 8), np.float32)
    f(Wrapper(ro), Wrapper(ro), c)
    np.testing.assert_array_equal(c, ro * 3)


# ---------------------------------------------------------------------------------------
# tecomp.torch.op


def _ffn(n=None, dim=16, hidden=24):
    n = n or tc.var("n")
    X = tc.placeholder((n, dim), name="X")
    W = tc.placeholder((hidden, dim), name="W")
    b = tc.placeholder((hidden,), name="b")
    Y = nn.gelu(nn.bias_add(nn.dense(X, W), b, axis=1))
    return [X, W, b], Y


def test_op_forward_backward_matches_torch():
    ins, Y = _ffn()
    ffn = tct.op(ins, [Y])
    x = torch.randn(5, 16, requires_grad=True)
    w = torch.randn(24, 16, requires_grad=True)
    b = torch.randn(24, requires_grad=True)
    y = ffn(x, w, b)
    assert isinstance(y, torch.Tensor) and y.shape == (5, 24)
    g = torch.randn(5, 24)
    y.backward(g)
    got = [t.grad.clone() for t in (x, w, b)]
    for t in (x, w, b):
        t.grad = None
    ref = F.gelu(F.linear(x, w, b))
    ref.backward(g)
    torch.testing.assert_close(y, ref, rtol=1e-5, atol=1e-5)
    for a, t in zip(got, (x, w, b)):
        torch.testing.assert_close(a, t.grad, rtol=1e-4, atol=1e-4)
    # another batch size: the symbolic extent n is bound from the tensors
    y7 = ffn(torch.randn(7, 16), w.detach(), b.detach())
    assert y7.shape == (7, 24)


def test_a_model_holding_an_op_is_deep_copied():
    """copy.deepcopy(model) (an EMA copy, a snapshot) of a model holding an op shares the
    op, as it shares a function, and copies the weights: each model then trains on its
    own (it raised a TypeError about a thread lock before)."""
    import copy

    ins, Y = _ffn()
    ffn = tct.op(ins, [Y])

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(24, 16))
            self.b = torch.nn.Parameter(torch.randn(24))
            self.f = ffn

        def forward(self, x):
            return self.f(x, self.w, self.b)

    m = Model()
    x = torch.randn(5, 16)
    m(x).sum().backward()                            # compiled before the copy
    ema = copy.deepcopy(m)
    assert ema.f is ffn and copy.copy(ffn) is ffn
    assert ema.w is not m.w and torch.equal(ema.w, m.w)
    with torch.no_grad():
        m.w.add_(1.0)                                # the original moves on
    for model in (m, ema):
        model.zero_grad()
        y = model(x)
        y.sum().backward()
        w = model.w.detach().clone().requires_grad_(True)
        ref = F.gelu(F.linear(x, w, model.b.detach()))
        ref.sum().backward()
        torch.testing.assert_close(y, ref, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(model.w.grad, w.grad, rtol=1e-4, atol=1e-4)


def test_training_saves_reductions_and_transcendental_intermediates():
    # two layers: the first's GELU output is read by the second's weight gradient; it is
    # saved by the forward (as PyTorch's autograd does), not recomputed in the backward,
    # while the cheap bias add is recomputed from the saved GEMM
    n = tc.var("n")
    X = tc.placeholder((n, 16), name="X")
    W1, b1 = tc.placeholder((24, 16), name="W1"), tc.placeholder((24,), name="b1")
    W2 = tc.placeholder((8, 24), name="W2")
    H = nn.gelu(nn.bias_add(nn.dense(X, W1, name="up"), b1, axis=1, name="biased"),
                name="act")
    Y = nn.dense(H, W2, name="down")
    op = tct.op([X, W1, b1, W2], [Y])
    x, w1, b1_, w2 = (torch.randn(*s, requires_grad=True) for s in ((6, 16), (24, 16), (24,),
                                                                    (8, 24)))
    g = torch.randn(6, 8)
    op(x, w1, b1_, w2).backward(g)
    got = [t.grad.clone() for t in (x, w1, b1_, w2)]
    saved = sorted(p.name for p in op._last[1].training.bwd.params if p.name.endswith("_saved"))
    assert saved == ["act_saved", "up_saved"]
    for t in (x, w1, b1_, w2):
        t.grad = None
    F.linear(F.gelu(F.linear(x, w1, b1_)), w2).backward(g)
    for a, t in zip(got, (x, w1, b1_, w2)):
        torch.testing.assert_close(a, t.grad, rtol=1e-4, atol=1e-4)


def test_op_records_an_autograd_node_only_when_one_is_needed():
    ins, Y = _ffn()
    ffn = tct.op(ins, [Y])
    x = torch.randn(5, 16, requires_grad=True)
    w, b = torch.randn(24, 16), torch.randn(24)
    ref = F.gelu(F.linear(x.detach(), w, b))
    with torch.no_grad():  # grad mode off: a plain call, whatever the inputs say
        y = ffn(x, w, b)
    assert y.grad_fn is None and not y.requires_grad
    torch.testing.assert_close(y, ref, rtol=1e-5, atol=1e-5)
    y = ffn(x.detach(), w, b)  # no input requires grad
    assert y.grad_fn is None and not y.requires_grad
    torch.testing.assert_close(y, ref, rtol=1e-5, atol=1e-5)
    y = ffn(x, w, b)  # only x requires grad: only x gets a gradient
    assert y.grad_fn is not None
    y.sum().backward()
    assert x.grad is not None and w.grad is None and b.grad is None
    x2 = x.detach().clone().requires_grad_()
    F.gelu(F.linear(x2, w, b)).sum().backward()
    torch.testing.assert_close(x.grad, x2.grad, rtol=1e-4, atol=1e-4)
    with torch.inference_mode():
        y = ffn(x.detach(), w, b)
    torch.testing.assert_close(y, ref, rtol=1e-5, atol=1e-5)


def test_op_gradcheck_float64():
    ins, Y = _ffn(dim=6, hidden=5)
    ffn = tct.op(ins, [Y])  # declared float32, compiled again for float64 tensors
    args = (torch.randn(3, 6, dtype=torch.float64, requires_grad=True),
            torch.randn(5, 6, dtype=torch.float64, requires_grad=True),
            torch.randn(5, dtype=torch.float64, requires_grad=True))
    assert torch.autograd.gradcheck(ffn, args)


def test_op_second_derivative_matches_torch():
    """A backward with create_graph=True gives gradients that are differentiable again
    (tc.gradient of the gradient): a gradient penalty keeps its second-order term (it
    was silently dropped: the gradients came back as constants), and gradgradcheck."""
    n = tc.var("n")
    X = tc.placeholder((n, 4), name="X")
    W = tc.placeholder((4,), name="W")
    k = tc.reduce_axis((0, 4), name="k")
    Y = tc.compute((n,), lambda i: tc.sum(tc.exp(X[i, k]) * X[i, k] * W[k], axis=k), name="Y")
    o = tct.op([X, W], Y)
    x0, w0 = torch.randn(3, 4, dtype=torch.float64), torch.randn(4, dtype=torch.float64)

    def penalty(f):
        x, w = x0.clone().requires_grad_(), w0.clone().requires_grad_()
        gx, = torch.autograd.grad(f(x, w).sum(), x, create_graph=True)
        ((gx ** 2).sum() + x.sum()).backward()
        return x.grad, w.grad

    for got, want in zip(penalty(o), penalty(lambda x, w: (torch.exp(x) * x * w).sum(1))):
        torch.testing.assert_close(got, want)
    assert torch.autograd.gradgradcheck(o, (x0.clone().requires_grad_(),
                                            w0.clone().requires_grad_()))


@pytest.mark.parametrize("dynamic", [None, False])
def test_op_forward_and_backward_of_an_empty_batch(dynamic):
    """An extent of 0 runs the shape-generic kernels (the backward of a kernel
    specialised for 0 rows refused its incoming gradient's placeholder: ShapeError)."""
    n = tc.var("n")
    X = tc.placeholder((n, 4), name="X")
    k = tc.reduce_axis((0, n), name="k")
    Y = tc.compute((n, 4), lambda i, j: X[i, j] * X[i, j], name="Y")
    S = tc.compute((4,), lambda j: tc.sum(X[k, j] * 3.0, axis=k), name="S")
    o = tct.op([X], [Y, S], dynamic=dynamic)
    x = torch.randn(0, 4, requires_grad=True)
    y, s = o(x)
    assert y.shape == (0, 4)
    torch.testing.assert_close(s, torch.zeros(4))
    (y.sum() + s.sum()).backward()
    assert x.grad.shape == (0, 4)


def test_op_multiple_outputs_and_int_inputs():
    n = tc.var("n")
    X = tc.placeholder((n, 4), name="X")
    M = tc.placeholder((n, 4), "int32", name="M")  # an integer mask: no gradient
    k = tc.reduce_axis((0, 4), name="k")
    S = tc.compute((n,), lambda i: tc.sum(X[i, k] * M[i, k].astype("float32"), axis=k), name="S")
    Q = tc.compute((n, 4), lambda i, j: X[i, j] * X[i, j], name="Q")
    o = tct.op([X, M], [S, Q])
    x = torch.randn(3, 4, requires_grad=True)
    m = torch.randint(0, 2, (3, 4), dtype=torch.int32)
    s, q = o(x, m)
    (s.sum() * 2 + q.sum()).backward()
    torch.testing.assert_close(x.grad, 2 * m.float() + 2 * x.detach())


_NN_CASES = {
    "dense": (lambda: _ops_dense(), lambda x, w, b: F.linear(x, w, b)),
    "conv2d_nchw": (lambda: _ops_conv(), lambda x, w: F.conv2d(x, w, stride=2, padding=1)),
    "max_pool2d": (lambda: _ops_unary((2, 3, 6, 6), lambda x: nn.max_pool2d(x, 2)),
                   lambda x: F.max_pool2d(x, 2)),
    "avg_pool2d": (lambda: _ops_unary((2, 3, 6, 6), lambda x: nn.avg_pool2d(x, 3, 2, 1)),
                   lambda x: F.avg_pool2d(x, 3, 2, 1)),
    "relu": (lambda: _ops_unary((4, 5), nn.relu), F.relu),
    "sigmoid": (lambda: _ops_unary((4, 5), nn.sigmoid), torch.sigmoid),
    "tanh": (lambda: _ops_unary((4, 5), nn.tanh), torch.tanh),
    "gelu": (lambda: _ops_unary((4, 5), nn.gelu), F.gelu),
    "softmax": (lambda: _ops_unary((4, 7), nn.softmax), lambda x: F.softmax(x, -1)),
    "log_softmax": (lambda: _ops_unary((4, 7), nn.log_softmax), lambda x: F.log_softmax(x, -1)),
    "layer_norm": (lambda: _ops_norm("layer"),
                   lambda x, g, b: F.layer_norm(x, (6,), g, b)),
    "batch_norm_train": (lambda: _ops_norm("batch"),
                         lambda x, g, b: F.batch_norm(x, None, None, g, b, training=True)),
    "mse_loss": (lambda: _ops_binary((3, 4), nn.mse_loss),
                 lambda a, b: F.mse_loss(a, b).reshape(1)),
    "batch_matmul": (lambda: _ops_two((2, 3, 4), (2, 4, 5), nn.batch_matmul), torch.bmm),
    "batch_matmul_tb": (lambda: _ops_two((2, 3, 4), (2, 5, 4), lambda a, b: nn.batch_matmul(
        a, b, transpose_b=True)), lambda a, b: a @ b.transpose(1, 2)),
    "batch_matmul_ta_bcast": (lambda: _ops_two((1, 4, 3), (2, 4, 5), lambda a, b: nn.batch_matmul(
        a, b, transpose_a=True)), lambda a, b: a.transpose(1, 2) @ b),
    "transpose": (lambda: _ops_unary((2, 3, 4), lambda x: nn.transpose(x, (2, 0, 1))),
                  lambda x: x.permute(2, 0, 1)),
    "reshape": (lambda: _ops_unary((2, 3, 4), lambda x: nn.reshape(x, (4, -1))),
                lambda x: x.reshape(4, -1)),
    "concatenate": (lambda: _ops_two((2, 3), (2, 5), lambda a, b: nn.concatenate([a, b, a], 1)),
                    lambda a, b: torch.cat([a, b, a], 1)),
    "matmul": (lambda: _ops_two((3, 4), (4, 5), nn.matmul), torch.matmul),
    "conv2d_nhwc": (lambda: _ops_two((2, 7, 7, 3), (3, 3, 3, 4), lambda x, w: nn.conv2d_nhwc(
        x, w, stride=2, padding=1)), lambda x, w: F.conv2d(
            x.permute(0, 3, 1, 2), w.permute(3, 2, 0, 1), stride=2, padding=1).permute(0, 2, 3, 1)),
    "bias_add": (lambda: _ops_two((2, 3, 4, 4), (3,), nn.bias_add),
                 lambda x, b: x + b.view(1, -1, 1, 1)),
    "cross_entropy": (lambda: _ops_two((4, 5), (4, 5), nn.cross_entropy),
                      lambda x, t: F.cross_entropy(x, t).reshape(1)),
    "flatten": (lambda: _ops_unary((2, 3, 4), nn.flatten), lambda x: x.flatten(1)),
    "pad": (lambda: _ops_unary((2, 3), lambda x: nn.pad(x, (1, 0), (2, 1))),
            lambda x: F.pad(x, (0, 1, 1, 2))),
}


def _ops_two(sa, sb, fn):
    A, B = tc.placeholder(sa, name="A"), tc.placeholder(sb, name="B")
    return [A, B], fn(A, B)


def _ops_dense():
    X, W, b = (tc.placeholder(s, name=nm) for s, nm in (((3, 5), "X"), ((4, 5), "W"), ((4,), "b")))
    return [X, W, b], nn.dense(X, W, b)


def _ops_conv():
    X = tc.placeholder((2, 3, 7, 7), name="X")
    W = tc.placeholder((4, 3, 3, 3), name="W")
    return [X, W], nn.conv2d_nchw(X, W, stride=2, padding=1)


def _ops_unary(shape, fn):
    X = tc.placeholder(shape, name="X")
    return [X], fn(X)


def _ops_binary(shape, fn):
    A, B = tc.placeholder(shape, name="A"), tc.placeholder(shape, name="B")
    return [A, B], fn(A, B)


def _ops_norm(kind):
    if kind == "layer":
        X, g, b = (tc.placeholder(s, name=nm) for s, nm in (((3, 6), "X"), ((6,), "g"), ((6,), "b")))
        return [X, g, b], nn.layer_norm(X, g, b)
    X, g, b = (tc.placeholder(s, name=nm) for s, nm in (((2, 3, 4, 4), "X"), ((3,), "g"), ((3,), "b")))
    return [X, g, b], nn.batch_norm_train(X, g, b)


@pytest.mark.parametrize("name", sorted(_NN_CASES))
def test_nn_op_gradients_equal_torch_autograd_float64(name):
    make, ref_fn = _NN_CASES[name]
    ins, out = make()
    o = tct.op(ins, [out])
    gen = torch.Generator().manual_seed(0)
    xs = [torch.randn([int(e) for e in x.shape], generator=gen, dtype=torch.float64,
                      requires_grad=True) for x in ins]
    y = o(*xs)
    ref = ref_fn(*xs)
    torch.testing.assert_close(y, ref, rtol=1e-9, atol=1e-9)
    head = torch.randn(ref.shape, generator=gen, dtype=torch.float64)
    got = torch.autograd.grad(y, xs, head)
    want = torch.autograd.grad(ref, xs, head)
    for x, a, b in zip(ins, got, want):
        torch.testing.assert_close(a, b, rtol=1e-8, atol=1e-9, msg=f"gradient of {x.name}")


def test_split_is_several_outputs_with_gradients():
    X = tc.placeholder((3, 7), name="X")
    parts = nn.split(X, [2, 3], axis=1)
    o = tct.op([X], parts)
    x = torch.randn(3, 7, dtype=torch.float64, requires_grad=True)
    got = o(x)
    want = torch.tensor_split(x, [2, 3], dim=1)
    assert len(got) == 3
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
    heads = [torch.randn(p.shape, dtype=torch.float64) for p in want]
    g1 = torch.autograd.grad(got, x, heads)[0]
    g2 = torch.autograd.grad(want, x, heads)[0]
    torch.testing.assert_close(g1, g2)


def test_torch_compile_fullgraph():
    ins, Y = _ffn()
    ffn = tct.op(ins, [Y], name="ffn")

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(24, 16) * 0.2)
            self.b = torch.nn.Parameter(torch.zeros(24))
            self.head = torch.nn.Linear(24, 3)

        def forward(self, x):
            return self.head(ffn(x, self.w, self.b)).tanh()

    m = Block()
    cm = torch.compile(m, fullgraph=True, backend="aot_eager")
    x = torch.randn(6, 16)
    y = cm(x)
    torch.testing.assert_close(y, torch.tanh(m.head(F.gelu(F.linear(x, m.w, m.b)))),
                               rtol=1e-5, atol=1e-5)
    y.sum().backward()
    gw = m.w.grad.clone()
    m.w.grad = None
    torch.tanh(m.head(F.gelu(F.linear(x, m.w, m.b)))).sum().backward()
    torch.testing.assert_close(gw, m.w.grad, rtol=1e-4, atol=1e-5)
    assert "tecomp" in str(torch.ops.tecomp.__dict__.get(ffn.name, ffn.name))


def test_op_schedule_options():
    ins, Y = _ffn(n=4)
    s = tc.create_schedule(Y.op)
    o = tct.op(ins, Y, schedule=s)
    x, w, b = torch.randn(4, 16), torch.randn(24, 16), torch.randn(24)
    torch.testing.assert_close(o(x, w, b), F.gelu(F.linear(x, w, b)), rtol=1e-5, atol=1e-5)
    o2 = tct.op(ins, Y, schedule=lambda outs: tc.create_schedule([t.op for t in outs]))
    torch.testing.assert_close(o2(x, w, b), F.gelu(F.linear(x, w, b)), rtol=1e-5, atol=1e-5)


def test_hostile_op_name_is_an_identifier():
    ins, Y = _ffn(n=2)
    o = tct.op(ins, Y, name='x) -> Tensor; import os #\n"')
    assert o.name.isidentifier()
    x, w, b = torch.randn(2, 16), torch.randn(24, 16), torch.randn(24)
    torch.testing.assert_close(o(x, w, b), F.gelu(F.linear(x, w, b)), rtol=1e-5, atol=1e-5)


def test_op_specialises_then_goes_generic(monkeypatch):
    monkeypatch.setattr(tct, "SPECIALIZATIONS", 2)
    ins, Y = _ffn()
    o = tct.op(ins, Y)
    w, b = torch.randn(24, 16), torch.randn(24)
    for n in (1, 2, 3, 4, 2):
        x = torch.randn(n, 16)
        torch.testing.assert_close(o(x, w, b), F.gelu(F.linear(x, w, b)), rtol=1e-5, atol=1e-5)
    keys = sorted(str(k[1]) for k in o._compiled)
    assert keys == ["(1,)", "(2,)", "None"]  # two specialised kernels, then one for every n
    dyn = tct.op(ins, Y, dynamic=True)
    dyn(torch.randn(3, 16), w, b)
    assert [k[1] for k in dyn._compiled] == [None]


# ---------------------------------------------------------------------------------------
# TVM habits


def test_int_and_index_of_constant_extents():
    n = tc.var("n")
    A = tc.placeholder((4, n, 2 * 3), name="A")
    assert int(A.shape[0]) == 4 and operator.index(A.shape[0]) == 4
    assert list(range(A.shape[0])) == [0, 1, 2, 3]
    assert np.zeros((A.shape[0], A.shape[2])).shape == (4, 6)
    assert float(tc.const(2.5, "float32")) == 2.5


def test_get_const_tuple():
    from tecomp.utils import get_const_int, get_const_tuple

    n = tc.var("n")
    A = tc.placeholder((4, n, n * 2), name="A")
    t = get_const_tuple(A.shape)
    assert t[0] == 4 and isinstance(t[0], int) and t[1] is n
    assert str(t[2]) == "n*2"
    assert get_const_tuple((tc.const(3) + 4, 5)) == (7, 5)
    assert get_const_int(A.shape[0] * 2) == 8
    assert tc.utils.get_const_tuple is get_const_tuple


def test_time_evaluator():
    f = _axpy()
    a, b, c = (np.ones((64, 8), np.float32) for _ in range(3))
    r = f.time_evaluator(number=4, repeat=3)(a, b, c)
    assert len(r.results) == 3 and r.number == 4
    assert min(r.results) <= r.median <= max(r.results) and r.mean > 0
    np.testing.assert_array_equal(c, a * 2 + b)   # it really ran the kernel
    r2 = f.time_evaluator(number=1, repeat=2, min_repeat_ms=2)(a, b, c)
    assert r2.number > 1                           # raised until a repetition lasts 2 ms
    assert "median=" in repr(r2)


def test_example_torch_bert_ffn_trains_like_pytorch(capsys):
    import importlib.util
    import os

    path = os.path.join(os.path.dirname(__file__), "..", "examples", "torch_bert_ffn.py")
    spec = importlib.util.spec_from_file_location("torch_bert_ffn", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rc = mod.main(["--steps", "25", "--tokens", "16", "--hidden", "32", "--ffn", "64",
                   "--plot", ""])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "OK: the loss curves agree" in out


@pytest.mark.parametrize("attention", ["fused", "unfused"])
def test_example_bert_layer_forward_and_backward_match_pytorch(capsys, attention):
    """examples/bert_layer.py at a small size (the structure of BERT-base: attention with a
    padding mask, post-layer-norm, GELU FFN), forward and tc.gradient of the whole layer;
    the attention as nn.scaled_dot_product_attention or as batched matmuls."""
    import importlib.util
    import os

    path = os.path.join(os.path.dirname(__file__), "..", "examples", "bert_layer.py")
    spec = importlib.util.spec_from_file_location("bert_layer", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rc = mod.main(["--batch", "2", "--seq", "16", "--hidden", "32", "--heads", "4", "--ffn", "64",
                   "--backward", "--rounds", "1", "--attention", attention])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "OK" in out.splitlines()[-1]


def _example(name):
    import importlib.util
    import os

    path = os.path.join(os.path.dirname(__file__), "..", "examples", f"{name}.py")
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("TECOMP_LONG_TESTS", "") in ("", "0"),
                    reason="slow (the layer and its gradient compiled for the CUDA emulation, "
                    "about 20 s a dtype): set TECOMP_LONG_TESTS=1")
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_example_bert_layer_gpu_in_the_emulation(capsys, dtype):
    """examples/bert_layer_gpu.py's path without a GPU: the 16-bit layer and tc.gradient
    of it built for cuda-emu (the GPU rules, tensor cores in the emulation) against
    PyTorch's float32 layer on the rounded inputs (about 20 s a dtype)."""
    rc = _example("bert_layer_gpu").main(["--emulate", "--dtype", dtype])
    out = capsys.readouterr().out
    assert rc == 0 and out.splitlines()[-1] == "OK", out


@pytest.mark.gpu
def test_example_bert_layer_gpu_trains_next_to_autocast(capsys, gpu_driver):
    """examples/bert_layer_gpu.py on the GPU at a small size: the losses of three SGD steps
    through the tecomp op on CUDA tensors match PyTorch's layer under torch.autocast."""
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA device")
    rc = _example("bert_layer_gpu").main(["--batch", "2", "--seq", "64", "--hidden", "128",
                                          "--heads", "2", "--ffn", "256", "--steps", "3",
                                          "--rounds", "2"])
    out = capsys.readouterr().out
    assert rc == 0 and out.splitlines()[-1] == "OK", out


def test_embedding_and_its_gradient_match_torch():
    W = tc.placeholder((11, 6), name="W")
    ids = tc.placeholder((tc.var("n"), 5), "int64", name="ids")
    o = tct.op([W, ids], nn.embedding(W, ids))
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(11, 6, dtype=torch.float64, generator=gen, requires_grad=True)
    i = torch.randint(0, 11, (4, 5), generator=gen)
    y = o(w, i)
    ref = F.embedding(i, w)
    torch.testing.assert_close(y, ref)
    head = torch.randn(4, 5, 6, dtype=torch.float64, generator=gen)
    torch.testing.assert_close(torch.autograd.grad(y, w, head)[0],
                               torch.autograd.grad(ref, w, head)[0])
    bad = i.clone()
    bad[0, 0], bad[1, 1] = 11, -1         # outside [0, 11): zeros, no memory read
    out = o(w.detach(), bad)
    assert torch.count_nonzero(out[0, 0]) == 0 and torch.count_nonzero(out[1, 1]) == 0


def test_call_grad_inputs_reads_inputs_that_require_grad_and_refuses_such_outputs():
    f = _axpy()
    a = torch.randn(5, 8, requires_grad=True)
    b, c = torch.randn(5, 8), torch.zeros(5, 8)
    with pytest.raises(ArgumentError, match="requires grad"):
        f(a, b, c)  # the public call refuses it, as Tensor.numpy() does
    f.call_grad_inputs(a, b, c)  # tecomp.torch's forward: read in place
    torch.testing.assert_close(c, a.detach() * 2 + b)
    c.zero_()
    f.call_grad_inputs(a, b.t().contiguous().t(), c)  # a strided input: the generic path
    torch.testing.assert_close(c, a.detach() * 2 + b)
    out = torch.zeros(5, 8, requires_grad=True)
    with pytest.raises(ArgumentError, match="requires grad"):
        f.call_grad_inputs(a, b, out)  # an output is written: never one that requires grad
    assert not out.detach().any()


@pytest.mark.parametrize("target", ["llvm", "cuda-emu"])
def test_outputs_written_in_place_bump_the_version_counter(target):
    """A torch tensor that autograd saved for a backward, then passed to a kernel as an
    output: its version counter goes up (as after x.copy_(...)), so the backward raises
    instead of computing the gradient from the overwritten values (it did, silently)."""
    import shutil

    if target == "cuda-emu" and shutil.which("g++") is None:
        pytest.skip("no C++ compiler for the CUDA emulation")
    A = tc.placeholder((4, 8), name="A")
    B = tc.compute((4, 8), lambda i, j: A[i, j] * 2.0, name="B")
    s = tc.create_schedule(B.op)
    if target == "cuda-emu":
        s[B].bind(B.op.axis[0], tc.thread_axis("blockIdx.x"))
        s[B].bind(B.op.axis[1], tc.thread_axis("threadIdx.x"))
    f = tc.build(s, [A, B], target=target)
    x = torch.ones(4, 8)
    big = torch.randn(4, 16)
    for out in (torch.randn(4, 8), big[:, ::2]):       # the fast path, a strided view
        w = torch.randn(4, 8, requires_grad=True)
        y = (w * out).sum()                              # saves out
        v = out._version
        f(x, out)
        assert out._version > v
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.backward()
    if target == "llvm":                                 # tecomp.torch's forward's call
        out, v = torch.zeros(4, 8), 0
        f.call_grad_inputs(x.requires_grad_(), out)
        assert out._version > v
    with torch.inference_mode():                         # no version counter: still written
        inf = torch.zeros(4, 8)
    f(torch.ones(4, 8), inf)
    assert (inf == 2).all()
