"""Scatter-add (tc.scatter_add) and the gradients that use it: a read through an index
tensor (an embedding, a 1-d gather) differentiates into a scatter over the reader's points,
checked against numpy's np.add.at, torch autograd and the autodiff reference evaluator,
through LLVM, the interpreter, the auto-scheduler and tecomp.torch.op."""
import numpy as np
import pytest

import tecomp as tc
import tecomp.autodiff as ad
import tecomp.nn as nn
from helpers import run

BACKENDS = ["llvm", "interp"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("idt", ["int32", "int64"])
def test_scatter_add_skips_indices_outside_and_false_conditions(backend, idt):
    V, D, B = 10, 6, 9
    ids = tc.placeholder((B,), idt, name="ids")
    G = tc.placeholder((B, D), name="G")
    W = tc.scatter_add((V, D), (B, D), lambda b, d: ((ids[b], d), G[b, d] * 2.0, d < 4),
                       name="Wg")
    i = np.array([1, 3, 1, 9, 12, -1, 0, 3, 3], idt)
    g = np.random.default_rng(0).random((B, D)).astype(np.float32)
    out = np.full((V, D), 7.0, np.float32)            # overwritten: the scatter starts at 0
    run(tc.create_schedule(W.op), [ids, G, W], [i, g, out], backend)
    want = np.zeros((V, D), np.float32)
    ok = (i >= 0) & (i < V)
    np.add.at(want, (i[ok],), 2 * g[ok])
    want[:, 4:] = 0
    np.testing.assert_allclose(out, want, rtol=1e-6)


def test_printed_ir_of_a_scatter():
    ids = tc.placeholder((3,), "int32", name="ids")
    G = tc.placeholder((3,), name="G")
    W = tc.scatter_add((4,), (3,), lambda b: ((ids[b],), G[b]), name="W")
    assert str(tc.lower(tc.create_schedule(W.op), [ids, G, W])) == """\
primfn main(ids: int32[3], G: float32[3], W: float32[4]) {
  for (W.i0, 0, 4) {
    W[W.i0] = 0f
  }
  for (b, 0, 3) {
    if (ids[b] >= 0 && ids[b] < 4) {
      W[ids[b]] = W[ids[b]] + G[b]
    }
  }
}"""


def _embedding_grad(V=50, D=16, B=3, S=5):
    W = tc.placeholder((V, D), "float64", name="W")
    ids = tc.placeholder((B, S), "int64", name="ids")
    E = nn.embedding(W, ids)
    Y = tc.compute((B, S, D), lambda b, s, d: E[b, s, d] * E[b, s, d], name="Y")
    H = tc.placeholder((B, S, D), "float64", name="H")
    (gW,) = tc.gradient(Y, [W], H)
    return W, ids, H, gW


def _data(V=50, D=16, B=3, S=5, seed=0):
    rng = np.random.default_rng(seed)
    return rng.random((V, D)), rng.integers(-2, V + 2, (B, S)), rng.random((B, S, D))


def _torch_grad(w, i, h):
    torch = pytest.importorskip("torch")
    V = w.shape[0]
    wt = torch.tensor(w, requires_grad=True)
    inside = (i >= 0) & (i < V)
    e = torch.nn.functional.embedding(torch.tensor(np.where(inside, i, 0)), wt)
    e = e * torch.tensor(inside[..., None].astype(np.float64))   # tecomp: zero rows outside
    (e * e).backward(torch.tensor(h))
    return wt.grad.numpy()


@pytest.mark.parametrize("auto", [False, True])
def test_embedding_gradient_is_a_scatter_and_matches_torch(auto):
    W, ids, H, gW = _embedding_grad()
    assert isinstance(gW.op, tc.ScatterOp)
    assert [int(iv.dom.extent.value) for iv in gW.op.domain] == [3, 5, 16]   # B*S*D points
    args = [W, ids, H, gW]
    s = tc.auto_schedule(args) if auto else tc.create_schedule(gW.op)
    w, i, h = _data()
    g = np.zeros((50, 16))
    tc.build(s, args)(w, i, h, g)
    np.testing.assert_allclose(g, _torch_grad(w, i, h), rtol=1e-12)


def test_embedding_gradient_in_the_reference_evaluator():
    W, ids, H, gW = _embedding_grad()
    w, i, h = _data(seed=1)
    (got,) = ad.evaluate([gW], {W: w, ids: i, H: h})
    np.testing.assert_allclose(got, _torch_grad(w, i, h), rtol=1e-12)


def test_two_contributions_scatter_and_gather_are_summed():
    """X read through an index (a scatter) and directly (a gather): X.grad is their sum."""
    X = tc.placeholder((8,), "float64", name="X")
    idx = tc.placeholder((5,), "int32", name="idx")
    Y = tc.compute((5,), lambda b: X[idx[b]] * 3.0 + X[b], name="Y")
    (gX,) = tc.gradient(Y, [X])
    assert not isinstance(gX.op, tc.ScatterOp)   # the sum of the two, a compute
    assert any(isinstance(t.op, tc.ScatterOp) for t in gX.op.input_tensors)
    i = np.array([7, 0, 7, 2, 7], np.int32)
    g = np.zeros(8)
    tc.build(tc.create_schedule(gX.op), [X, idx, gX])(np.ones(8), i, g)
    want = np.zeros(8)
    np.add.at(want, i, 3.0)
    want[:5] += 1.0
    np.testing.assert_allclose(g, want)


def test_torch_op_gradcheck_of_an_embedding():
    torch = pytest.importorskip("torch")
    import tecomp.torch as tct

    W = tc.placeholder((7, 3), name="W")
    ids = tc.placeholder((tc.var("n"),), "int64", name="ids")
    o = tct.op([W, ids], nn.embedding(W, ids))
    w = torch.randn(7, 3, dtype=torch.float64, requires_grad=True)
    i = torch.tensor([0, 6, 6, 2, 0])
    assert torch.autograd.gradcheck(lambda x: o(x, i), (w,))
