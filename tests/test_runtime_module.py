"""Every compiled module follows one protocol, tc.runtime.Module: called with the arrays,
get_source, time_evaluator (tecomp/runtime/module.py)."""
import numpy as np
import pytest

import tecomp as tc
from tecomp.codegen.cuda_emu import CudaEmuModule
from tecomp.strategy import cuda as nn_cuda
from tecomp.nn import ops
from tecomp.runtime import Module
from tecomp.runtime.cuda import CudaModule
from tecomp.runtime.llvm import Module as LlvmModule


def _relu():
    X = tc.placeholder((4, 33), name="X")
    return X, ops.relu(X)


def _check(f, src_kind):
    assert isinstance(f, Module)
    x = np.linspace(-1, 1, 4 * 33, dtype="float32").reshape(4, 33)
    y = np.full((4, 33), np.nan, "float32")
    f(x, y)
    np.testing.assert_array_equal(y, np.maximum(x, 0))
    if src_kind is not None:
        assert f.get_source(src_kind)
    else:   # a loaded library holds machine code only: the protocol's error, not a crash
        with pytest.raises(tc.TecompError, match="machine code only"):
            f.get_source()
    r = f.time_evaluator(number=1, repeat=1)(x, y)
    assert r.median > 0


def test_every_module_class_follows_the_protocol():
    for cls in (LlvmModule, CudaModule, CudaEmuModule):
        assert issubclass(cls, Module), cls


def test_llvm_cuda_emu_and_loaded_modules(tmp_path):
    X, Y = _relu()
    _check(tc.build(tc.create_schedule(Y.op), [X, Y]), "llvm")
    _check(tc.build(nn_cuda.schedule_injective(Y, "cuda-emu"), [X, Y], target="cuda-emu"),
           "cuda")
    f = tc.build(tc.create_schedule(Y.op), [X, Y])
    path = str(tmp_path / "relu.so")
    f.export_library(path)
    _check(tc.load_module(path), None)


def test_one_integer_semantics_on_the_host_and_in_kernels():
    """The host evaluator (grids, workspace sizes), compiled shape expressions (argument
    checks) and the generated code agree on integer division and remainder, by zero
    (0, as numpy) and by negative numbers (floor and trunc)."""
    from tecomp.ir.expr import FloorDiv, FloorMod, TruncDiv, TruncMod
    from tecomp.runtime.argcheck import compile_shape_expr, eval_host_expr

    x, y = tc.var("x"), tc.var("y")
    for node in (FloorDiv, FloorMod, TruncDiv, TruncMod):
        e = node(x, y, "int32")
        compiled = compile_shape_expr(e)
        out = tc.compute((1,), lambda i: e + i, name="out")
        f = tc.build(tc.create_schedule(out.op), [x, y, out])
        for a in (-7, -1, 0, 5, 9):
            for b in (-2, 0, 1, 3):
                host = eval_host_expr(e, {x: a, y: b})
                o = np.zeros(1, "int32")
                f(a, b, o)
                assert host == compiled({x: a, y: b}) == o[0], (node.__name__, a, b)


# ---------------------------------------------------------------------------------------
# tc.empty / tc.aligned


@pytest.mark.parametrize("dtype,align", [("float32", 64), ("float64", 128), ("int8", 1),
                                         ("float16", 4096)])
def test_empty_is_aligned_and_contiguous(dtype, align):
    for shape in [(4096, 768), (7,), 33, (0, 5), ()]:
        a = tc.empty(shape, dtype, align=align)
        assert a.dtype == np.dtype(dtype)
        assert a.shape == ((shape,) if isinstance(shape, int) else tuple(shape))
        assert a.flags.c_contiguous and a.flags.writeable
        assert a.size == 0 or a.ctypes.data % align == 0     # (no data: no address)
        a[...] = 3
        assert (a == 3).all()


def test_aligned_keeps_an_aligned_array_and_copies_the_rest():
    a = tc.empty((300, 300))
    assert tc.aligned(a) is a
    raw = np.arange(300 * 301, dtype="float32")
    b = raw[4:4 + 300 * 300].reshape(300, 300)            # 16 bytes past an aligned one
    if b.ctypes.data % 64 == 0:
        b = raw[5:5 + 300 * 300].reshape(300, 300)
    c = tc.aligned(b)
    assert c is not b and c.ctypes.data % 64 == 0 and np.array_equal(c, b)
    t = tc.aligned(b.T)                                     # a view: copied C-contiguous
    assert t.flags.c_contiguous and np.array_equal(t, b.T)


def test_kernels_take_aligned_arrays():
    A = tc.placeholder((64, 48), name="A")
    B = tc.compute((64, 48), lambda i, j: A[i, j] * 2.0 + 1.0, name="B")
    s = tc.create_schedule(B.op)
    s[B].vectorize(s[B].op.axis[1])
    f = tc.build(s, [A, B])
    a = tc.aligned(np.random.default_rng(0).uniform(-1, 1, (64, 48)).astype("float32"))
    b = tc.empty((64, 48))
    f(a, b)
    np.testing.assert_array_equal(b, a * np.float32(2) + np.float32(1))
