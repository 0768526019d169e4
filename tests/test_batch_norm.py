"""tecomp.nn.batch_norm (training and inference, NCHW and NHWC, affine or not, a fused
ReLU, running statistics) against torch.nn.functional.batch_norm, and its analytic
gradient (gradcheck, torch's gradients, and the form of the gradient's stages)."""
import os

import numpy as np
import pytest

import tecomp as tc
import tecomp.autodiff as ad
from tecomp import nn

torch = pytest.importorskip("torch")
F = torch.nn.functional
import tecomp.torch as tct  # noqa: E402

C = 4
TOL = {"float32": 2e-5, "float64": 1e-10}


def _shape(layout):
    return (3, C, 5, 6) if layout == "NCHW" else (3, 5, 6, C)


def _op(dtype, layout, affine, relu, training, running):
    X = tc.placeholder(_shape(layout), dtype, name="X")
    G = tc.placeholder((C,), dtype, name="G") if affine else None
    B = tc.placeholder((C,), dtype, name="B") if affine else None
    RM = tc.placeholder((C,), dtype, name="RM") if running else None
    RV = tc.placeholder((C,), dtype, name="RV") if running else None
    out = nn.batch_norm(X, G, B, RM, RV, training=training, momentum=0.3, eps=1e-3,
                        layout=layout, relu=relu)
    outs = list(out) if isinstance(out, tuple) else [out]
    ins = [t for t in (X, G, B, RM, RV) if t is not None]
    return tct.op(ins, outs), ins, outs


def _torch_ref(x, g, b, rm, rv, training, layout, relu):
    xt = x if layout == "NCHW" else x.permute(0, 3, 1, 2)
    y = F.batch_norm(xt, rm, rv, g, b, training=training, momentum=0.3, eps=1e-3)
    if relu:
        y = F.relu(y)
    return y if layout == "NCHW" else y.permute(0, 2, 3, 1)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("layout,affine,relu", [("NCHW", True, False), ("NHWC", True, True),
                                                ("NCHW", False, True), ("NHWC", False, False)])
@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_matches_torch(dtype, layout, affine, relu, training):
    tdt = getattr(torch, dtype)
    op, _, _ = _op(dtype, layout, affine, relu, training, True)
    gen = torch.Generator().manual_seed(0)
    x = (torch.randn(_shape(layout), generator=gen, dtype=tdt) * 3 + 1).requires_grad_()
    g = torch.randn(C, generator=gen, dtype=tdt).requires_grad_() if affine else None
    b = torch.randn(C, generator=gen, dtype=tdt).requires_grad_() if affine else None
    rm = torch.randn(C, generator=gen, dtype=tdt)
    rv = torch.rand(C, generator=gen, dtype=tdt) + 0.5
    args = [t for t in (x, g, b) if t is not None] + [rm, rv]
    res = op(*args)
    y = res[0] if training else res
    trm, trv = rm.clone(), rv.clone()
    ref = _torch_ref(x, g, b, trm, trv, training, layout, relu)
    tol = TOL[dtype]
    torch.testing.assert_close(y, ref, atol=tol, rtol=tol)
    if training:   # the updated running statistics (the unbiased variance)
        torch.testing.assert_close(res[1], trm, atol=tol, rtol=tol)
        torch.testing.assert_close(res[2], trv, atol=tol, rtol=tol)
    head = torch.randn(y.shape, generator=gen, dtype=tdt)
    wrt = [t for t in (x, g, b) if t is not None]
    got = torch.autograd.grad((y * head).sum(), wrt)
    want = torch.autograd.grad((ref * head).sum(), wrt)
    for a, e in zip(got, want):
        torch.testing.assert_close(a, e, atol=10 * tol, rtol=10 * tol)


@pytest.mark.parametrize("layout,relu", [("NCHW", False), ("NHWC", True)])
def test_batch_norm_gradcheck(layout, relu):
    X = tc.placeholder((2, C, 3, 3) if layout == "NCHW" else (2, 3, 3, C), "float64", name="X")
    G = tc.placeholder((C,), "float64", name="G")
    B = tc.placeholder((C,), "float64", name="B")
    y = nn.batch_norm(X, G, B, layout=layout, relu=relu)
    assert ad.gradcheck(y, [X, G, B], target="reference")


def _stages(t):
    seen, out, stack = set(), [], [t]
    while stack:
        u = stack.pop()
        if id(u) not in seen:
            seen.add(id(u))
            out.append(u)
            stack += list(u.op.input_tensors)
    return out


@pytest.mark.parametrize("build", [
    lambda X, G, B: nn.batch_norm(X, G, B),
    lambda X, G, B: nn.batch_norm_train(X, G, B),
])
def test_batch_norm_gradient_is_the_analytic_form(build):
    """Two per-channel sums of the adjoint and one elementwise pass: no gradient of the
    mean, variance or invstd stages (the reduction-of-reductions form)."""
    X = tc.placeholder((2, C, 4, 4), name="X")
    G, B = tc.placeholder((C,), name="G"), tc.placeholder((C,), name="B")
    y = build(X, G, B)
    gx, gg, gb = tc.gradient(y, [X, G, B])
    names = {t.name for g in (gx, gg, gb) for t in _stages(g)}
    assert gx.op.tag == "batch_norm_grad"
    sums = next(   # the two sums: one reduction (one pass), two outputs
        t for g in (gx, gg, gb) for t in _stages(g) if t.name.startswith(
        "batch_norm.grad_sums"))
    assert len(sums.op.bodies) == 2 and len(sums.op.reduce_axis) == 3
    assert not [n for n in names if n.startswith(("batch_norm.mean.", "batch_norm.var.",
                                                   "batch_norm.invstd."))], names


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_batch_norm_symbolic_batch(layout):
    """A symbolic batch (and image) size: the count per channel is an expression, in the
    statistics, the unbiased running variance and the gradient."""
    n, h = tc.var("n"), tc.var("h")
    shape = (n, C, h, 3) if layout == "NCHW" else (n, h, 3, C)
    X = tc.placeholder(shape, "float64", name="X")
    G, B = tc.placeholder((C,), "float64", name="G"), tc.placeholder((C,), "float64", name="B")
    RM, RV = tc.placeholder((C,), "float64", name="RM"), tc.placeholder((C,), "float64",
                                                                       name="RV")
    y, rm, rv = nn.batch_norm(X, G, B, RM, RV, momentum=0.3, eps=1e-3, layout=layout)
    op = tct.op([X, G, B, RM, RV], [y, rm, rv])
    for batch, rows in ((2, 5), (3, 2)):
        full = (batch, C, rows, 3) if layout == "NCHW" else (batch, rows, 3, C)
        x = torch.randn(full, dtype=torch.float64, requires_grad=True)
        g = torch.randn(C, dtype=torch.float64, requires_grad=True)
        b = torch.randn(C, dtype=torch.float64, requires_grad=True)
        r_m, r_v = torch.randn(C, dtype=torch.float64), torch.rand(C, dtype=torch.float64) + 1
        out, nm, nv = op(x, g, b, r_m, r_v)
        ref = _torch_ref(x, g, b, r_m, r_v, True, layout, False)
        torch.testing.assert_close(out, ref, atol=1e-10, rtol=1e-10)
        torch.testing.assert_close(nm, r_m, atol=1e-10, rtol=1e-10)
        torch.testing.assert_close(nv, r_v, atol=1e-10, rtol=1e-10)
        got = torch.autograd.grad(out.square().sum(), [x, g, b])
        want = torch.autograd.grad(ref.square().sum(), [x, g, b])
        for a, e in zip(got, want):
            torch.testing.assert_close(a, e, atol=1e-9, rtol=1e-9)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_inference_batch_norm_is_the_convolutions_epilogue(layout):
    """conv -> batch_norm (inference) -> ReLU, auto-scheduled: the normalisation is the
    convolution's epilogue, computed on each output tile while it is in registers (no
    buffer of the convolution's full output, no second pass), with PyTorch's result."""
    import re

    import numpy as np

    nchw = layout == "NCHW"
    X = tc.placeholder((2, 16, 12, 12) if nchw else (2, 12, 12, 16), name="x")
    W = tc.placeholder((32, 16, 3, 3) if nchw else (3, 3, 16, 32), name="w")
    C = (nn.conv2d_nchw if nchw else nn.conv2d_nhwc)(X, W, 1, 1)
    g, b, rm, rv = (tc.placeholder((32,), name=n) for n in ("g", "b", "rm", "rv"))
    Y = nn.batch_norm(C, g, b, running_mean=rm, running_var=rv, training=False, relu=True,
                      layout=layout)
    args = [X, W, g, b, rm, rv, Y]
    s = tc.auto_schedule(args)
    ir = str(tc.lower(s, args))
    full = 2 * 32 * 12 * 12
    for name, shape in re.findall(r"allocate (\S+): \w+\[([^\]]*)\]", ir):
        assert np.prod([int(d) for d in shape.split(",")]) < full, (name, shape)
    rng = np.random.default_rng(0)
    x = rng.standard_normal([int(d) for d in X.shape]).astype("float32")
    w = (rng.standard_normal([int(d) for d in W.shape]) * 0.1).astype("float32")
    gg, bb, mm = (rng.standard_normal(32).astype("float32") for _ in range(3))
    vv = rng.uniform(0.5, 2.0, 32).astype("float32")
    out = np.empty([int(d) for d in Y.shape], "float32")
    tc.build(s, args)(x, w, gg, bb, mm, vv, out)
    tx = torch.from_numpy(x if nchw else x.transpose(0, 3, 1, 2).copy())
    tw = torch.from_numpy(w if nchw else w.transpose(3, 2, 0, 1).copy())
    want = torch.relu(F.batch_norm(F.conv2d(tx, tw, padding=1), torch.from_numpy(mm),
                                   torch.from_numpy(vv), torch.from_numpy(gg),
                                   torch.from_numpy(bb), False, 0.1, 1e-5)).numpy()
    if not nchw:
        want = want.transpose(0, 2, 3, 1)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)


# the CPU template of the gradient (tecomp/strategy/cpu/batch_norm.py), odd extents; 2
# threads planned whatever the machine has.  at_dx: the sums computed at dx's loop over
# channels (NCHW; NHWC sums partial results per thread at the root; NCHW with too few
# channels: the rules)
_TARGET = "llvm -num-cores=2"
_GRAD_CASES = [("NCHW", (2, 11, 5, 21), "float32", True, False, True),
               ("NHWC", (2, 5, 7, 67), "float64", False, True, False),
               ("NHWC", (1, 3, 5, 6), "float32", True, False, False)]
if os.environ.get("TECOMP_LONG_TESTS"):
    _GRAD_CASES += [("NCHW", (3, 9, 7, 7), "float64", False, True, True),
                    ("NHWC", (3, 3, 5, 67), "float32", True, False, False),
                    ("NCHW", (2, 13, 9, 33), "float64", True, True, True),
                    ("NCHW", (2, 3, 5, 9), "float64", True, False, False),
                    ("NHWC", (2, 40, 40, 19), "float32", True, False, False)]


@pytest.mark.parametrize("layout,shape,dtype,affine,relu,at_dx", _GRAD_CASES)
@pytest.mark.parametrize("how", ["auto_schedule", "schedule_backward"])
def test_batch_norm_gradient_template(layout, shape, dtype, affine, relu, at_dx, how):
    """The gradient of x (and gamma, beta) against torch's, scheduled by the template:
    both sums computed at the data gradient's loop over channels (kept whole at the
    root for the gamma and beta gradients), reading the forward's saved statistics."""
    from tecomp.te.retype import retype
    C = shape[1] if layout == "NCHW" else shape[3]
    X = tc.placeholder(shape, dtype, name="x")
    G = tc.placeholder((C,), dtype, name="g") if affine else None
    B = tc.placeholder((C,), dtype, name="b") if affine else None
    Y = nn.batch_norm(X, G, B, layout=layout, relu=relu, eps=1e-3)
    stats = {t.name: t for t in Y.op.input_tensors}
    M, I = tc.placeholder((C,), dtype, name="m"), tc.placeholder((C,), dtype, name="i")
    H = tc.placeholder(shape, dtype, name="dy")
    wrt = [t for t in (X, G, B) if t is not None]
    repl = {stats["batch_norm.mean"]: M, stats["batch_norm.invstd"]: I}
    if relu:   # (the ReLU's mask reads the output, computed again from the saved ones)
        grads, ins = list(tc.gradient(Y, wrt, head=H)), wrt + [H]
        extra = []
    else:
        grads, ins = retype(list(tc.gradient(Y, wrt, head=H)), wrt + [H], replace=repl)
        extra = [M, I]
    args = ins + extra + grads
    if how == "auto_schedule":
        s = tc.auto_schedule(args, target=_TARGET)
    else:
        s = tc.schedule_backward(grads, target=_TARGET)
    sums, = [st for st in s.stages if st.name == "batch_norm.grad_sums"]
    assert (sums.stored_root and sums.attach_type == "scope") == at_dx
    f = tc.build(s, args, target=_TARGET)
    tdt = getattr(torch, dtype)
    gen = torch.Generator().manual_seed(1)
    x = (torch.randn(shape, generator=gen, dtype=tdt) * 2 + 0.5).requires_grad_()
    g = torch.randn(C, generator=gen, dtype=tdt).requires_grad_() if affine else None
    b = torch.randn(C, generator=gen, dtype=tdt).requires_grad_() if affine else None
    dy = torch.randn(shape, generator=gen, dtype=tdt)
    ref = F.batch_norm(x if layout == "NCHW" else x.permute(0, 3, 1, 2), None, None, g, b,
                       training=True, eps=1e-3)
    ref = F.relu(ref) if relu else ref
    ref = ref if layout == "NCHW" else ref.permute(0, 2, 3, 1)
    want = torch.autograd.grad(ref, [t for t in (x, g, b) if t is not None], dy)
    red = (0, 2, 3) if layout == "NCHW" else (0, 1, 2)
    xd = x.detach()
    mean = xd.mean(dim=red)
    inv = 1 / torch.sqrt(xd.var(dim=red, unbiased=False) + 1e-3)
    inputs = [t.detach().numpy() for t in (x, g, b) if t is not None] + [dy.numpy()]
    if not relu:
        inputs += [mean.numpy(), inv.numpy()]
    outs = [np.empty(t.shape, dtype) for t in want]
    f(*inputs, *outs)
    tol = TOL[dtype] * 10
    for got, e in zip(outs, want):
        np.testing.assert_allclose(got, e.numpy(), rtol=tol, atol=tol)
