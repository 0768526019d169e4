"""tc.extern (TVM's te.extern): a stage computed by a Python function (numpy here) called
from the compiled kernel, between stages tecomp computes; through the LLVM build and the
reference interpreter, with scalars, strided arguments, several outputs, symbolic shapes,
the auto-scheduler and the PyTorch bridge."""
import numpy as np
import pytest

import tecomp as tc
from helpers import run

BACKENDS = ["llvm", "interp"]


def _gemm_relu(n=64, m=48, K=32, func=None):
    A = tc.placeholder((n, K), name="A")
    B = tc.placeholder((K, m), name="B")

    def gemm(a, b, c):
        np.matmul(a, b, out=c)

    C = tc.extern((n, m), [A, B], lambda ins, outs: tc.call_packed(func or gemm, ins[0], ins[1],
                                                                   outs[0]), name="C")
    D = tc.compute((n, m), lambda i, j: tc.max(C[i, j], 0.0), name="D")
    return A, B, C, D


def _ab(n=64, m=48, K=32, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.random((n, K)) - 0.5).astype("float32"), (rng.random((K, m)) - 0.5).astype("float32")


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_numpy_gemm_between_computes(backend):
    A, B, C, D = _gemm_relu()
    X = tc.compute((64, 32), lambda i, k: A[i, k] * 2, name="X")   # a producer it reads

    def gemm(x, b, c):
        assert not x.flags.writeable and c.flags.writeable   # inputs are read-only views
        np.matmul(x, b, out=c)

    C2 = tc.extern((64, 48), [X, B], lambda ins, outs: tc.call_packed(gemm, ins[0], ins[1], outs[0]),
                   name="C2")
    E = tc.compute((64, 48), lambda i, j: D[i, j] + C2[i, j], name="E")
    s = tc.create_schedule(E.op)
    io, ii = s[E].split(E.op.axis[1], factor=8)
    s[E].vectorize(ii)
    s[E].parallel(E.op.axis[0])
    a, b = _ab()
    e = np.zeros((64, 48), "float32")
    run(s, [A, B, E], [a, b, e], backend)
    np.testing.assert_allclose(e, np.maximum(a @ b, 0) + (2 * a) @ b, rtol=1e-5, atol=1e-6)


def test_printed_ir():
    A, B, C, D = _gemm_relu(4, 3, 2)
    s = tc.create_schedule(D.op)
    text = str(tc.lower(s, [A, B, D]))
    assert text == """\
primfn main(A: float32[4, 2], B: float32[2, 3], D: float32[4, 3]) {
  allocate C: float32[4, 3] (global)
  call_extern test_extern._gemm_relu.<locals>.gemm(A, B, C)
  for (i, 0, 4) {
    for (j, 0, 3) {
      D[i, j] = max(C[i, j], 0f)
    }
  }
}"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_scalars_several_outputs_symbolic_shape_and_strided_input(backend):
    n = tc.var("n")
    A = tc.placeholder((n, 16), name="A")
    seen = {}

    def scale_and_stats(a, alpha, rows, out, stats):
        seen["args"] = (type(alpha), alpha, type(rows), rows, a.shape, out.dtype, stats.dtype)
        out[:] = a * alpha + rows
        stats[0] = a.sum()
        stats[1] = a.shape[0]

    O, S = tc.extern([(n, 16), (2,)], [A],
                     lambda ins, outs: tc.call_packed(scale_and_stats, ins[0], 2.5,
                                                      ins[0].shape[0], outs[0], outs[1]),
                     name="E", dtype=["float32", "float64"])
    assert (O.name, O.dtype, S.name, S.dtype) == ("E.v0", "float32", "E.v1", "float64")
    R = tc.compute((n, 16), lambda i, j: O[i, j] + 1, name="R")
    s = tc.create_schedule(R.op)
    a = np.random.default_rng(1).random((40, 32)).astype("float32")[:, ::2]   # strided
    r, st = np.zeros((40, 16), "float32"), np.zeros(2, "float64")
    run(s, [A, R, S], [a, r, st], backend)
    np.testing.assert_allclose(r, a * 2.5 + 40 + 1, rtol=1e-6)
    np.testing.assert_allclose(st, [a.astype("float64").sum(), 40], rtol=1e-5)
    assert seen["args"] == (float, 2.5, int, 40, (40, 16), np.float32, np.float64)


def test_registered_function_by_name():
    calls = []

    @tc.register_func("tests.extern.add_one", override=True)
    def add_one(x, y):
        calls.append(x.shape)
        y[:] = x + 1

    assert tc.get_global_func("tests.extern.add_one") is add_one
    X = tc.placeholder((5,), name="X")
    Y = tc.extern((5,), [X], lambda ins, outs: tc.call_packed("tests.extern.add_one", ins[0],
                                                              outs[0]), name="Y")
    f = tc.build(tc.create_schedule(Y.op), [X, Y])
    x, y = np.arange(5, dtype="float32"), np.zeros(5, "float32")
    f(x, y)
    np.testing.assert_array_equal(y, x + 1)
    assert calls == [(5,)]
    assert "call_extern tests.extern.add_one(X, Y)" in str(tc.lower(tc.create_schedule(Y.op), [X, Y]))


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_exception_in_the_function_reaches_the_caller(backend):
    def bad(x, y):
        raise ValueError("boom from the user's function")

    X = tc.placeholder((4,), name="X")
    Y = tc.extern((4,), [X], lambda ins, outs: tc.call_packed(bad, ins[0], outs[0]), name="Y")
    Z = tc.compute((4,), lambda i: Y[i] * 2, name="Z")
    s = tc.create_schedule(Z.op)
    with pytest.raises(ValueError, match="boom from the user's function"):
        run(s, [X, Z], [np.zeros(4, "float32"), np.zeros(4, "float32")], backend)
    if backend == "llvm":   # the kernel still works afterwards
        f = tc.build(s, [X, Z])
        with pytest.raises(ValueError):
            f(np.zeros(4, "float32"), np.zeros(4, "float32"))


def test_auto_schedule_around_an_extern_stage():
    A, B, C, D = _gemm_relu(64, 48, 32)
    s = tc.auto_schedule([A, B, D])
    a, b = _ab()
    d = np.zeros((64, 48), "float32")
    tc.build(s, [A, B, D])(a, b, d)
    np.testing.assert_allclose(d, np.maximum(a @ b, 0), rtol=1e-5, atol=1e-6)
    # an elementwise producer read by the extern stays in memory (no inline)
    X = tc.placeholder((64, 32), name="X")
    P = tc.compute((64, 32), lambda i, k: X[i, k] + 1, name="P")
    Q = tc.extern((64, 48), [P, B], lambda ins, outs: tc.call_packed(
        lambda p, b, q: np.matmul(p, b, out=q), ins[0], ins[1], outs[0]), name="Q")
    s = tc.auto_schedule([X, B, Q])
    q = np.zeros((64, 48), "float32")
    tc.build(s, [X, B, Q])(a, b, q)
    np.testing.assert_allclose(q, (a + 1) @ b, rtol=1e-5, atol=1e-6)


def test_workload_key_names_the_function():
    from tecomp.autoschedule.records import workload_key

    def f1(a, b, c):
        pass

    def f2(a, b, c):
        pass

    k1 = workload_key(list(_gemm_relu(func=f1)[:2]) + [_gemm_relu(func=f1)[3]])["hash"]
    k2 = workload_key(list(_gemm_relu(func=f2)[:2]) + [_gemm_relu(func=f2)[3]])["hash"]
    k1b = workload_key(list(_gemm_relu(func=f1)[:2]) + [_gemm_relu(func=f1)[3]])["hash"]
    assert k1 != k2 and k1 == k1b


def test_torch_forward_calls_the_function():
    torch = pytest.importorskip("torch")
    import tecomp.torch as tct

    A, B, C, D = _gemm_relu(8, 6, 4)
    f = tct.op([A, B], [D])
    a, b = torch.rand(8, 4) - 0.5, torch.rand(4, 6) - 0.5
    torch.testing.assert_close(f(a, b), torch.relu(a @ b))
    # float64 tensors: the stage is copied for the dtype and the function gets float64
    torch.testing.assert_close(f(a.double(), b.double()), torch.relu(a.double() @ b.double()))


def test_stop_gradient_makes_an_extern_stage_a_constant():
    X = tc.placeholder((6,), name="X")
    W = tc.placeholder((6,), name="W")
    M = tc.extern((6,), [W], lambda ins, outs: tc.call_packed(
        lambda w, m: np.copyto(m, (w > 0).astype(m.dtype)), ins[0], outs[0]), name="M")
    tc.autodiff.stop_gradient(M)
    Y = tc.compute((6,), lambda i: X[i] * X[i] * M[i], name="Y")
    gX = tc.gradient(Y, X)
    s = tc.create_schedule(gX.op)
    f = tc.build(s, [X, W, gX])
    x = np.arange(6, dtype="float32")
    w = np.array([1, -1, 1, -1, 1, -1], "float32")
    g = np.zeros(6, "float32")
    f(x, w, g)
    np.testing.assert_allclose(g, 2 * x * (w > 0))
