"""Training ops of tecomp.nn: derived gradients against PyTorch autograd (float64) and
against finite differences (gradcheck).

The ops' forward and backward definitions are compiled with LLVM (the default schedule) a
few per kernel in a module-scoped fixture, so the file stays fast; each op is then its own
test.
"""
import math
import os

import numpy as np
import pytest

import tecomp as tc
from tecomp import autodiff as ad
from tecomp import nn
from tecomp.nn import conv_grad

from helpers import with_fma_model
from helpers import with_l2 as _with_l2

F64 = "float64"
rng = np.random.default_rng(7)


@pytest.fixture(params=[16, 8], ids=["lanes16", "lanes8"])
def lanes(request, monkeypatch):
    monkeypatch.setenv("TECOMP_VECTOR_LANES", str(request.param))
    return request.param


def _onehot(b, c):
    return np.eye(c)[rng.integers(0, c, b)]


def _ties(shape):
    return rng.integers(0, 3, shape).astype(np.float64)


# name, builder(*placeholders), torch function, input shapes, input values (None: random)
def cases():
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    return [
        ("matmul", lambda a, b: nn.matmul(a, b), lambda a, b: a @ b, [(3, 4), (4, 5)], None),
        ("dense", lambda x, w, b: nn.dense(x, w, b), F.linear, [(3, 6), (5, 6), (5,)], None),
        ("dense_nobias", lambda x, w: nn.dense(x, w), F.linear, [(3, 6), (5, 6)], None),
        ("conv2d_nchw_s2_p1_d2", lambda x, w: nn.conv2d_nchw(x, w, 2, 1, 2),
         lambda x, w: F.conv2d(x, w, stride=2, padding=1, dilation=2),
         [(2, 3, 9, 9), (4, 3, 3, 3)], None),
        ("conv2d_nchw_s1_p1", lambda x, w: nn.conv2d_nchw(x, w, 1, 1),
         lambda x, w: F.conv2d(x, w, padding=1), [(2, 3, 6, 6), (4, 3, 3, 3)], None),
        ("conv2d_nchw_s2_p0_rect", lambda x, w: nn.conv2d_nchw(x, w, (2, 1), (0, 2)),
         lambda x, w: F.conv2d(x, w, stride=(2, 1), padding=(0, 2)),
         [(1, 2, 7, 5), (3, 2, 3, 2)], None),
        ("conv2d_nhwc_s2_p1_d1", lambda x, w: nn.conv2d_nhwc(x, w, 2, 1, 1),
         lambda x, w: F.conv2d(x.permute(0, 3, 1, 2), w.permute(3, 2, 0, 1), stride=2,
                               padding=1).permute(0, 2, 3, 1),
         [(2, 7, 7, 3), (3, 3, 3, 4)], None),
        ("conv2d_nhwc_s2_p2_d2", lambda x, w: nn.conv2d_nhwc(x, w, 2, 2, 2),
         lambda x, w: F.conv2d(x.permute(0, 3, 1, 2), w.permute(3, 2, 0, 1), stride=2,
                               padding=2, dilation=2).permute(0, 2, 3, 1),
         [(2, 8, 8, 3), (3, 3, 3, 4)], None),
        ("max_pool2d_2", lambda x: nn.max_pool2d(x, 2), lambda x: F.max_pool2d(x, 2),
         [(2, 3, 6, 6)], None),
        ("max_pool2d_3_s2_p1", lambda x: nn.max_pool2d(x, 3, 2, 1),
         lambda x: F.max_pool2d(x, 3, 2, 1), [(2, 3, 7, 7)], None),
        ("max_pool2d_ties", lambda x: nn.max_pool2d(x, 3, 1, 1),
         lambda x: F.max_pool2d(x, 3, 1, 1), [(2, 3, 6, 6)], [_ties((2, 3, 6, 6))]),
        ("avg_pool2d_3_s2_p1", lambda x: nn.avg_pool2d(x, 3, 2, 1),
         lambda x: F.avg_pool2d(x, 3, 2, 1), [(2, 3, 7, 7)], None),
        ("avg_pool2d_exclude_pad", lambda x: nn.avg_pool2d(x, 3, 2, 1, count_include_pad=False),
         lambda x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False), [(2, 3, 7, 7)], None),
        ("relu", nn.relu, F.relu, [(3, 5)], [np.array([[-1.0, 0.0, 2.0, -0.5, 0.0]] * 3)]),
        ("sigmoid", nn.sigmoid, torch.sigmoid, [(3, 5)], None),
        ("tanh", nn.tanh, torch.tanh, [(3, 5)], None),
        ("gelu", nn.gelu, F.gelu, [(3, 5)], None),
        ("bias_add", nn.bias_add, lambda x, b: x + b.reshape(1, -1, 1, 1),
         [(2, 3, 4, 4), (3,)], None),
        ("softmax", nn.softmax, lambda x: F.softmax(x, -1), [(3, 5)], None),
        ("log_softmax", nn.log_softmax, lambda x: F.log_softmax(x, -1), [(3, 5)], None),
        ("cross_entropy", nn.cross_entropy, lambda x, y: F.cross_entropy(x, y),
         [(4, 5), (4, 5)], [rng.standard_normal((4, 5)), _onehot(4, 5)]),
        ("mse_loss", nn.mse_loss, F.mse_loss, [(3, 5), (3, 5)], None),
        ("batch_norm_train", nn.batch_norm_train,
         lambda x, g, b: F.batch_norm(x, None, None, g, b, training=True),
         [(3, 2, 4, 4), (2,), (2,)], None),
        ("layer_norm", nn.layer_norm, lambda x, g, b: F.layer_norm(x, (6,), g, b),
         [(3, 4, 6), (6,), (6,)], None),
        ("flatten", nn.flatten, lambda x: x.flatten(1), [(2, 3, 4, 5)], None),
    ]


class Case:
    def __init__(self, name, builder, torch_fn, shapes, vals):
        self.name = name
        self.phs = [tc.placeholder(s, F64, name=f"{name}_in{k}") for k, s in enumerate(shapes)]
        self.out = builder(*self.phs)
        self.head = tc.placeholder(self.out.shape, F64, name=f"{name}_head")
        self.grads = tc.gradient(self.out, self.phs, head=self.head)
        self.vals = vals if vals is not None else [rng.standard_normal(s) for s in shapes]
        self.h = rng.standard_normal(tuple(int(e.value) for e in self.out.shape))
        self.torch_fn = torch_fn
        self.builder = builder
        self.shapes = shapes


@pytest.fixture(scope="module")
def compiled():
    """Every case's forward output and gradients, compiled with LLVM three cases per kernel
    (LLVM's optimiser is superlinear in the size of one function: one kernel for all of
    them takes several times longer than these nine)."""
    cs = [Case(*c) for c in cases()]
    got = {}
    for i in range(0, len(cs), 3):
        part = cs[i:i + 3]
        outs = [t for c in part for t in [c.out] + c.grads]
        params = [p for c in part for p in c.phs + [c.head]]
        s = tc.create_schedule([t.op for t in outs])
        f = tc.build(s, params + outs)
        arrays = [v for c in part for v in c.vals + [c.h]]
        res = [np.empty(tuple(int(e.value) for e in t.shape), F64) for t in outs]
        f(*arrays, *res)
        k = 0
        for c in part:
            got[c.name] = (c, res[k:k + 1 + len(c.grads)])
            k += 1 + len(c.grads)
    return got


def torch_reference(c):
    import torch

    ts = [torch.tensor(v, requires_grad=True) for v in c.vals]
    out = c.torch_fn(*ts).reshape(c.h.shape)
    out.backward(torch.tensor(c.h))
    return [out.detach().numpy()] + [t.grad.numpy() for t in ts]


NAMES = ["matmul", "dense", "dense_nobias", "conv2d_nchw_s2_p1_d2", "conv2d_nchw_s1_p1",
         "conv2d_nchw_s2_p0_rect", "conv2d_nhwc_s2_p1_d1", "conv2d_nhwc_s2_p2_d2",
         "max_pool2d_2", "max_pool2d_3_s2_p1", "max_pool2d_ties", "avg_pool2d_3_s2_p1",
         "avg_pool2d_exclude_pad", "relu", "sigmoid", "tanh", "gelu", "bias_add", "softmax",
         "log_softmax", "cross_entropy", "mse_loss", "batch_norm_train", "layer_norm", "flatten"]


@pytest.mark.parametrize("name", NAMES)
def test_matches_pytorch_autograd(compiled, name):
    c, got = compiled[name]
    want = torch_reference(c)
    labels = ["output"] + [f"grad of input {k}" for k in range(len(c.phs))]
    for lab, g, w in zip(labels, got, want):
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-11, err_msg=f"{name}: {lab}")


GRADCHECK = ["dense", "conv2d_nchw_s2_p1_d2", "conv2d_nhwc_s2_p2_d2", "max_pool2d_3_s2_p1",
             "avg_pool2d_exclude_pad", "sigmoid", "tanh", "gelu", "softmax", "log_softmax",
             "cross_entropy", "mse_loss", "batch_norm_train", "layer_norm"]


@pytest.mark.parametrize("name", GRADCHECK)
def test_gradcheck(name):
    pytest.importorskip("torch")  # the case table uses torch functions
    c = next(Case(*x) for x in cases() if x[0] == name)
    diff = list(range(len(c.phs)))
    if name == "cross_entropy":
        diff = [0]  # the labels are data
    ins = [c.phs[k] for k in diff]
    assert ad.gradcheck(c.out, ins, dict(zip(c.phs, c.vals)), target="reference",
                        max_points=24)


# tecomp.nn's convolutions hand their gradients to conv-shaped computes (nn.ops,
# _conv_data_grad): a stride-1 data gradient is a forward convolution of the adjoint
# (flipped kernel, swapped channels), a strided one a convolution per phase of the data
# interleaved by a "phases" stage, the weight gradient a conv2d_*_wgrad stage (in NCHW
# possibly the NHWC one, transposed); all are scheduled by the conv schedules under
# schedule_backward.
CONV_GRAD_CASES = [  # stride, padding, dilation, kernel, the data gradient's form
    (1, 1, 1, 3, "conv"), (1, 0, 1, 3, "conv"), (1, 2, 2, 3, "conv"), (1, (1, 0), 1, 3, "conv"),
    (1, 2, 1, 5, "conv"), (1, 3, 1, 3, "conv"),  # a padding above dilation*(k-1): cropped
    (2, 1, 1, 3, "phases"), (2, 1, 2, 3, "phases"), (2, 0, 1, 1, "phases"),  # 1x1: 3 zero phases
    ((2, 1), (1, 0), 1, 3, "phases"), (3, 1, 1, 3, "phases"), (2, 2, 1, 5, "phases"),
    (3, 0, 1, 2, "phases"), (4, 1, 1, 3, "phases"),  # kernel narrower than the stride
]


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("stride,padding,dilation,k,form", CONV_GRAD_CASES)
def test_conv_gradients_are_scheduled_as_convolutions(layout, stride, padding, dilation, k,
                                                      form):
    torch = pytest.importorskip("torch")
    N, C, O, H, W = 2, 5, 18, 9, 11
    if layout == "nchw":
        X, Wt = tc.placeholder((N, C, H, W), name="X"), tc.placeholder((O, C, k, k), name="W")
        Y = nn.conv2d_nchw(X, Wt, stride, padding, dilation)
    else:
        X, Wt = tc.placeholder((N, H, W, C), name="X"), tc.placeholder((k, k, C, O), name="W")
        Y = nn.conv2d_nhwc(X, Wt, stride, padding, dilation)
    Hd = tc.placeholder(Y.shape, name="H")
    gX, gW = tc.gradient(Y, [X, Wt], head=Hd)
    tag = f"conv2d_{layout}" if form == "conv" else f"conv2d_{layout}_phases"
    assert tag in gX.op.tag.split(","), gX.op.tag
    if form == "phases":  # every phase that a tap reaches is a convolution
        assert all(f"conv2d_{layout}" in t.op.tag.split(",") for t in gX.op.input_tensors)
    assert gX.name == "X.grad" and gW.name == "W.grad"
    # an NCHW weight gradient whose rows are not a multiple of 16 (all of these) is the
    # NHWC one transposed, when it is small (as here)
    wg = gW if layout == "nhwc" else gW.op.input_tensors[0]
    assert wg.op.tag == "conv2d_nhwc_wgrad"
    s = tc.schedule_backward([gX, gW])
    case = CONV_GRAD_CASES.index((stride, padding, dilation, k, form))
    if os.environ.get("TECOMP_LONG_TESTS", "") in ("", "0") and case % 2 != (layout == "nhwc"):
        return  # the gradients run by default for the even cases in NCHW, the odd in NHWC
    f = tc.build(s, [X, Wt, Hd, gX, gW])
    shape = lambda t: tuple(int(e.value) for e in t.shape)  # noqa: E731
    x = rng.standard_normal(shape(X)).astype("float32")
    w = rng.standard_normal(shape(Wt)).astype("float32")
    h = rng.standard_normal(shape(Y)).astype("float32")
    gx, gw = np.empty_like(x), np.empty_like(w)
    f(x, w, h, gx, gw)
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    wt = torch.tensor(w, dtype=torch.float64, requires_grad=True)
    ht = torch.tensor(h, dtype=torch.float64)
    if layout == "nchw":
        yt = torch.nn.functional.conv2d(xt, wt, stride=stride, padding=padding,
                                        dilation=dilation)
    else:
        yt = torch.nn.functional.conv2d(xt.permute(0, 3, 1, 2), wt.permute(3, 2, 0, 1),
                                        stride=stride, padding=padding,
                                        dilation=dilation).permute(0, 2, 3, 1)
    yt.backward(ht)
    np.testing.assert_allclose(gx, xt.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(gw, wt.grad.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("stride,padding,dilation,k", [
    (1, 1, 1, 3), (1, 2, 2, 3), (2, 1, 1, 3), (2, 0, 1, 1), ((2, 1), (1, 0), 1, 3),
    (3, 1, 1, 3)])
def test_narrow_nchw_data_gradients_run_as_nhwc_convolutions(stride, padding, dilation, k,
                                                             lanes):
    # half a vector of columns (or phases of them): with a vector of channels, the
    # phases are NHWC convolutions of the transposed adjoint, and the interleave (or, at
    # stride 1, a transpose) writes the NCHW gradient
    # (the gradient's form follows the fixed model of nn.ops, 16 lanes, whatever the
    # machine; the schedules follow the machine, here both widths)
    torch = pytest.importorskip("torch")
    L = conv_grad._GRAD_LANES
    N, C, O, H = 2, L, 6, L // 2
    X, Wt = tc.placeholder((N, C, H, H), name="X"), tc.placeholder((O, C, k, k), name="W")
    Y = nn.conv2d_nchw(X, Wt, stride, padding, dilation)
    Hd = tc.placeholder(Y.shape, name="H")
    gX = tc.gradient(Y, X, head=Hd)
    assert all("conv2d_nhwc" in t.op.tag.split(",") for t in gX.op.input_tensors)
    _check_nchw_data_gradient(torch, X, Wt, Y, Hd, gX, stride, padding, dilation)


def _check_nchw_data_gradient(torch, X, Wt, Y, Hd, gX, stride, padding, dilation=1):
    """gX (the data gradient of Y = conv2d_nchw(X, Wt), head Hd) built with
    schedule_backward, against PyTorch in float64."""
    f = tc.build(tc.schedule_backward([gX]), [Wt, Hd, gX])
    shape = lambda t: tuple(int(e.value) for e in t.shape)  # noqa: E731
    w = rng.standard_normal(shape(Wt)).astype("float32")
    h = rng.standard_normal(shape(Y)).astype("float32")
    gx = np.empty(shape(X), "float32")
    f(w, h, gx)
    xt = torch.zeros(shape(X), dtype=torch.float64, requires_grad=True)
    torch.nn.functional.conv2d(xt, torch.tensor(w, dtype=torch.float64), stride=stride,
                               padding=padding, dilation=dilation).backward(
        torch.tensor(h, dtype=torch.float64))
    np.testing.assert_allclose(gx, xt.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_training_step_with_a_channel_vector_forward_conv(monkeypatch, lanes):
    # a narrow NCHW forward convolution takes the channel-vector schedule in
    # schedule_backward too, beside its own gradients (with large weights: per task)
    from tecomp.strategy import cpu as sc

    torch = pytest.importorskip("torch")
    _with_l2(monkeypatch, 16 << 10)
    with_fma_model(monkeypatch, half_width=False, gather_cost=1.5)
    N, C, O, H = 2, 32, 2 * lanes, lanes // 2
    X, Wt = tc.placeholder((N, C, H, H), name="X"), tc.placeholder((O, C, 3, 3), name="W")
    Y = nn.conv2d_nchw(X, Wt, 1, 1)
    assert sc.conv2d._nchw_by_channels(Y, sc.cpu_model(), H) is not None
    Hd = tc.placeholder(Y.shape, name="H")
    gX, gW = tc.gradient(Y, [X, Wt], head=Hd)
    f = tc.build(tc.schedule_backward([Y, gX, gW]), [X, Wt, Hd, Y, gX, gW])
    shape = lambda t: tuple(int(e.value) for e in t.shape)  # noqa: E731
    x, w, h = (rng.standard_normal(shape(t)).astype("float32") for t in (X, Wt, Y))
    y, gx, gw = (np.empty(shape(t), "float32") for t in (Y, X, Wt))
    f(x, w, h, y, gx, gw)
    xt, wt = (torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (x, w))
    yt = torch.nn.functional.conv2d(xt, wt, padding=1)
    yt.backward(torch.tensor(h, dtype=torch.float64))
    for got, want in ((y, yt), (gx, xt.grad), (gw, wt.grad)):
        np.testing.assert_allclose(got, want.detach().numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("stride", [1, 2])
def test_narrow_nchw_data_gradient_phases_with_channel_vectors(stride, lanes, monkeypatch):
    # narrow phases whose output channels (the data's) make whole 2-vector blocks, with
    # 256 adjoint channels or more: they stay NCHW convolutions, which the NCHW schedule
    # vectorizes across channels (no transposes; the single-tap phase of a stride of 2
    # only with 512) on a machine with full-width FMAs
    from tecomp.strategy import cpu as sc

    torch = pytest.importorskip("torch")
    with_fma_model(monkeypatch, half_width=False, gather_cost=1.5)
    L = conv_grad._GRAD_LANES
    N, C, O, H = 1, 2 * L, 256, L // 2 * stride
    X, Wt = tc.placeholder((N, C, H, H), name="X"), tc.placeholder((O, C, 3, 3), name="W")
    Y = nn.conv2d_nchw(X, Wt, stride, 1)
    Hd = tc.placeholder(Y.shape, name="H")
    gX = tc.gradient(Y, X, head=Hd)
    phases = [gX] if stride == 1 else list(gX.op.input_tensors)
    assert all("conv2d_nchw" in t.op.tag.split(",") for t in phases)
    info = sc.cpu_model()
    single = [t for t in phases if all(r.dom.extent.value == 1 for r in t.op.reduce_axis[1:])]
    assert len(single) == (stride == 2)
    # with AVX-512 the schedule puts its vectors across the channels; with AVX2 a row
    # of 8 (stride 1) fills a vector and either may be chosen
    if info.lanes == L:
        assert all(sc.conv2d._nchw_by_channels(t, info, info.lanes) is not None
                   for t in phases if t not in single)
    _check_nchw_data_gradient(torch, X, Wt, Y, Hd, gX, stride, 1)


def test_narrow_nchw_data_gradient_differentiates_again(monkeypatch):
    monkeypatch.setenv("TECOMP_VECTOR_LANES", "8")
    X = tc.placeholder((1, 16, 5, 5), "float64", name="X")
    Wt = tc.placeholder((2, 16, 3, 3), "float64", name="W")
    Y = nn.conv2d_nchw(X, Wt, 2, 1)
    Hd = tc.placeholder(Y.shape, "float64", name="H")
    gX = tc.gradient(Y, X, head=Hd)
    assert all("conv2d_nhwc" in t.op.tag.split(",") for t in gX.op.input_tensors)
    assert ad.gradcheck(gX, [Wt, Hd])


def test_conv_gradient_with_a_head_of_ones_keeps_the_gather_form():
    X, Wt = tc.placeholder((1, 3, 6, 6), name="X"), tc.placeholder((4, 3, 3, 3), name="W")
    gX = tc.gradient(nn.conv2d_nchw(X, Wt, 1, 1), X)
    assert gX.op.tag == "conv2d_nchw_grad"
    x = rng.standard_normal((1, 3, 6, 6))
    w = rng.standard_normal((4, 3, 3, 3))
    got, = ad.evaluate([gX], {X: x, Wt: w})
    # d sum(conv) / dx[c, y, x] = sum over o and the taps that land inside
    want = np.zeros_like(x)
    for ky in range(3):
        for kx in range(3):
            for yy in range(6):
                for xx in range(6):
                    iy, ix = yy + ky - 1, xx + kx - 1
                    if 0 <= iy < 6 and 0 <= ix < 6:
                        want[0, :, iy, ix] += w[:, :, ky, kx].sum(axis=0)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_strided_conv_gradients_differentiate_again(layout):
    # the phase convolutions have asymmetric paddings (no conv2d attrs: their own
    # gradients take the gather form); the NCHW weight gradient goes through NHWC
    xs, ws = ((1, 2, 7, 7), (3, 2, 3, 3)) if layout == "nchw" else ((1, 7, 7, 2), (3, 3, 2, 3))
    X, Wt = tc.placeholder(xs, "float64", name="X"), tc.placeholder(ws, "float64", name="W")
    Y = (nn.conv2d_nchw if layout == "nchw" else nn.conv2d_nhwc)(X, Wt, 2, 1)
    Hd = tc.placeholder(Y.shape, "float64", name="H")
    gX, gW = tc.gradient(Y, [X, Wt], head=Hd)
    assert ad.gradcheck(gX, [Wt, Hd])
    assert ad.gradcheck(gW, [X, Hd])


def _check_weight_gradient(torch, X, Wt, Y, Hd, gW, layout, stride):
    f = tc.build(tc.schedule_backward([gW]), [X, Hd, gW])
    shape = lambda t: tuple(int(e.value) for e in t.shape)  # noqa: E731
    x = rng.standard_normal(shape(X)).astype(X.dtype)
    h = rng.standard_normal(shape(Y)).astype(X.dtype)
    gw = np.empty(shape(Wt), X.dtype)
    f(x, h, gw)
    xt = torch.tensor(x, dtype=torch.float64)
    ht = torch.tensor(h, dtype=torch.float64)
    ws = shape(Wt) if layout == "nchw" else tuple(shape(Wt)[i] for i in (3, 2, 0, 1))
    wt = torch.zeros(ws, dtype=torch.float64, requires_grad=True)
    if layout == "nchw":
        torch.nn.functional.conv2d(xt, wt, stride=stride, padding=1).backward(ht)
        want = wt.grad.numpy()
    else:
        torch.nn.functional.conv2d(xt.permute(0, 3, 1, 2), wt, stride=stride,
                                   padding=1).backward(ht.permute(0, 3, 1, 2))
        want = wt.grad.numpy().transpose(2, 3, 1, 0)
    np.testing.assert_allclose(gw, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("hw,form", [(6, "panels"), (15, "rows")])
def test_large_nchw_weight_gradients(stride, hw, form, monkeypatch):
    # 256 channels (a 2.4 MB gradient) with a 512 KB L2: over small images (6x6: operands
    # in L2) the NHWC gradient transposed, read from panels; over larger ones (15x15, a
    # 578 KB padded input) over flat rows at stride 1 (nn.conv_grad._flat_rows), at stride 2
    # through NHWC without panels
    torch = pytest.importorskip("torch")
    _with_l2(monkeypatch, 512 << 10)
    X, Wt = tc.placeholder((2, 256, hw, hw), name="X"), tc.placeholder((256, 256, 3, 3), name="W")
    Y = nn.conv2d_nchw(X, Wt, stride, 1)
    Hd = tc.placeholder(Y.shape, name="H")
    gW = tc.gradient(Y, Wt, head=Hd)
    readers = {t.op.tag for t in gW.op.input_tensors}
    if form == "rows" and stride == 1:
        assert gW.op.tag == "conv2d_nchw_wgrad" and readers == {"injective,conv2d_wgrad_rows"}
    else:
        hwio = gW.op.input_tensors[0]
        assert hwio.op.tag == "conv2d_nhwc_wgrad"
        assert ("nr" in hwio.op.attrs) == (form == "panels")
    _check_weight_gradient(torch, X, Wt, Y, Hd, gW, "nchw", stride)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("stride", [1, 2])
def test_weight_gradients_over_panels(layout, stride, dtype, lanes, monkeypatch):
    # a gradient larger than L2 (48 KB in float32, with the L2 said to be 40 KB; twice
    # both in float64) over operands that fit in it: both are copied into panels
    # (nn.conv_grad._wgrad_panels) of three vectors -- 56 output channels leave a last panel
    # of 8 (16 float32 lanes) or 8 of 24, or 8 of 12 (4 float64 lanes), computed whole
    # over its zeros and copied out masked
    torch = pytest.importorskip("torch")
    wide = dtype == "float64"
    _with_l2(monkeypatch, (80 if wide else 40) << 10)
    N, C, O, H = 2, 24, 56, 9
    if layout == "nchw":
        X = tc.placeholder((N, C, H, H), dtype, name="X")
        Wt = tc.placeholder((O, C, 3, 3), dtype, name="W")
        Y = nn.conv2d_nchw(X, Wt, stride, 1)
    else:
        X = tc.placeholder((N, H, H, C), dtype, name="X")
        Wt = tc.placeholder((3, 3, C, O), dtype, name="W")
        Y = nn.conv2d_nhwc(X, Wt, stride, 1)
    Hd = tc.placeholder(Y.shape, dtype, name="H")
    gW = tc.gradient(Y, Wt, head=Hd)
    g = gW if layout == "nhwc" else gW.op.input_tensors[0]
    assert g.op.tag == "conv2d_nhwc_wgrad"
    nr, cb = g.op.attrs["nr"], g.op.attrs["cb"]
    # the panels' width follows the gradient's fixed model, not the machine
    L, vregs = conv_grad._GRAD_LANES, conv_grad._GRAD_VREGS
    assert nr == 3 * L // (2 if wide else 1) and C % cb == 0 and 3 * cb + 5 <= vregs
    assert {t.op.tag for t in g.op.input_tensors} == {"conv2d_wgrad_panels"}
    _check_weight_gradient(torch, X, Wt, Y, Hd, gW, layout, stride)


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("stride", [1, 2])
def test_conv_gradients_with_symbolic_batch_and_channels(layout, stride):
    torch = pytest.importorskip("torch")
    n, c = tc.var("n"), tc.var("c")
    if layout == "nchw":
        X, Wt = tc.placeholder((n, c, 9, 11), name="X"), tc.placeholder((6, c, 3, 3), name="W")
        Y = nn.conv2d_nchw(X, Wt, stride, 1)
    else:
        X, Wt = tc.placeholder((n, 9, 11, c), name="X"), tc.placeholder((3, 3, c, 6), name="W")
        Y = nn.conv2d_nhwc(X, Wt, stride, 1)
    Hd = tc.placeholder(Y.shape, name="H")
    gX, gW = tc.gradient(Y, [X, Wt], head=Hd)
    f = tc.build(tc.schedule_backward([gX, gW]), [X, Wt, Hd, gX, gW])
    x = rng.standard_normal((2, 4, 9, 11)).astype("float32")
    w = rng.standard_normal((6, 4, 3, 3)).astype("float32")
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    wt = torch.tensor(w, dtype=torch.float64, requires_grad=True)
    yt = torch.nn.functional.conv2d(xt, wt, stride=stride, padding=1)
    h = rng.standard_normal(tuple(yt.shape)).astype("float32")
    yt.backward(torch.tensor(h, dtype=torch.float64))
    gx, gw = xt.grad.numpy(), wt.grad.numpy()
    if layout == "nhwc":
        x, w, h = x.transpose(0, 2, 3, 1), w.transpose(2, 3, 1, 0), h.transpose(0, 2, 3, 1)
        gx, gw = gx.transpose(0, 2, 3, 1), gw.transpose(2, 3, 1, 0)
    x, w, h = (np.ascontiguousarray(a) for a in (x, w, h))
    got_x, got_w = np.empty_like(x), np.empty_like(w)
    f(x, w, h, got_x, got_w)
    np.testing.assert_allclose(got_x, gx, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got_w, gw, rtol=1e-4, atol=1e-4)


# --------------------------------------------------------------------------- float16
# The gradients of float16 operators are summed in float32 (the convolutions' own rule
# and autodiff's, through the widening casts of the forward) and rounded once.  Each case
# sums thousands of positive terms in some gradient: a float16 sum is off by 1e-2 or more.

HALF_GRAD_CASES = [
    ("conv2d_nchw_s1", lambda x, w: nn.conv2d_nchw(x, w, 1, 1),
     lambda x, w: __import__("torch").nn.functional.conv2d(x, w, padding=1),
     [(2, 4, 32, 32), (512, 4, 3, 3)]),
    ("conv2d_nchw_s2", lambda x, w: nn.conv2d_nchw(x, w, 2, 1),
     lambda x, w: __import__("torch").nn.functional.conv2d(x, w, stride=2, padding=1),
     [(4, 4, 64, 64), (512, 4, 3, 3)]),
    ("conv2d_nhwc_s1", lambda x, w: nn.conv2d_nhwc(x, w, 1, 1),
     lambda x, w: __import__("torch").nn.functional.conv2d(
         x.permute(0, 3, 1, 2), w.permute(3, 2, 0, 1), padding=1).permute(0, 2, 3, 1),
     [(2, 32, 32, 4), (3, 3, 4, 512)]),
    ("dense", lambda x, w: nn.dense(x, w), lambda x, w: x @ w.T, [(4096, 8), (16, 8)]),
    ("layer_norm", nn.layer_norm,
     lambda x, g, b: __import__("torch").nn.functional.layer_norm(x, (8,), g, b),
     [(4096, 8), (8,), (8,)]),
]


@pytest.mark.parametrize("case", HALF_GRAD_CASES, ids=[c[0] for c in HALF_GRAD_CASES])
def test_float16_gradients_accumulate_in_float32(case):
    torch = pytest.importorskip("torch")
    name, builder, torch_fn, shapes = case
    phs = [tc.placeholder(s, "float16", name=f"in{k}") for k, s in enumerate(shapes)]
    out = builder(*phs)
    head = tc.placeholder(out.shape, "float16", name="head")
    grads = tc.gradient(out, phs, head=head)
    assert [g.dtype for g in grads] == ["float16"] * len(phs)
    vals = [rng.uniform(0.0, 1.0, s).astype(np.float16) for s in shapes]
    h = rng.uniform(0.0, 1.0, tuple(int(e.value) for e in out.shape)).astype(np.float16)
    got = [np.zeros(tuple(int(e.value) for e in g.shape), np.float16) for g in grads]
    f = tc.build(tc.create_schedule([g.op for g in grads]), phs + [head] + grads)
    f(*vals, h, *got)
    ts = [torch.tensor(v.astype(np.float64), requires_grad=True) for v in vals]
    torch_fn(*ts).backward(torch.tensor(h.astype(np.float64)))
    errs = {x.name: np.abs(g.astype(np.float64) - t.grad.numpy()).max() /
            np.abs(t.grad.numpy()).max() for x, g, t in zip(phs, got, ts)}
    assert max(errs.values()) <= 2 * 2.0 ** -11, f"{name}: relative errors {errs}"


def test_float16_gemm_gradients_read_the_16_bit_adjoint():
    """A float16 dense layer's float32 sum is rounded to float16 (its output); the sum's
    adjoint is then the output's adjoint widened at the same point, which the derivatives
    read through the cast instead of from a float32 copy: both gradient GEMMs multiply two
    float16 tensors summed in float32, what the GPU's tensor cores take (a BERT layer's
    backward had its 12 projection GEMMs on CUDA cores, reading float32 copies)."""
    from tecomp.strategy._common import _contraction_operands, _walk
    from tecomp.strategy.cuda.tensorcore import tensor_core_gemm
    X, W = tc.placeholder((32, 16), "float16", name="X"), tc.placeholder((48, 16), "float16",
                                                                         name="W")
    B = tc.placeholder((48,), "float16", name="B")
    Y = nn.gelu(nn.dense(X, W, B))
    head = tc.placeholder(Y.shape, "float16", name="head")
    grads = tc.gradient(Y, [X, W, B], head=head)
    gemms = [op for op in _walk(grads) if _contraction_operands(op) is not None]
    # (the forward's, whose sum the gradient of gelu reads, and the two gradients)
    assert len(gemms) == 3 and all(tensor_core_gemm(op.output(0)) for op in gemms), \
        [str(op.body) for op in gemms]
    x, w, b = (rng.uniform(-1, 1, s).astype(np.float16) for s in ((32, 16), (48, 16), (48,)))
    h = rng.uniform(-1, 1, (32, 48)).astype(np.float16)
    got = [np.zeros(s, np.float16) for s in ((32, 16), (48, 16), (48,))]
    tc.build(tc.create_schedule([g.op for g in grads]), [X, W, B, head] + grads)(x, w, b, h, *got)
    # the reference: the derivative at the float16-rounded sum, as the definition computes it
    xd, wd = x.astype(np.float64), w.astype(np.float64)
    a = (xd @ wd.T + b).astype(np.float16).astype(np.float64)
    erf = np.vectorize(math.erf)
    ga = h * (0.5 * (1 + erf(a / math.sqrt(2))) + a * np.exp(-a * a / 2) / math.sqrt(2 * math.pi))
    ga = ga.astype(np.float16).astype(np.float64)
    want = [ga @ wd, ga.T @ xd, ga.sum(0)]
    for g, r in zip(got, want):
        np.testing.assert_allclose(g.astype(np.float64), r, rtol=4e-3, atol=4e-3)


def test_data_gradient_with_an_elementwise_epilogue():
    """schedule_backward of a convolution's data gradient plus another gradient (what a
    training graph sums for an input read twice): the convolution template caches the
    gradient's stage, and the rules took the addition for the epilogue of the stage's old
    reduction and split the template's axes again (ScheduleError: axis x was already
    split; the dynamo fuzzer's training seed 61)."""
    X = tc.placeholder((4, 5, 5, 4), name="X")
    Wt = tc.placeholder((2, 5, 3, 3), name="W")
    Hd = tc.placeholder((4, 2, 5, 4), name="H")
    Z = tc.placeholder((4, 5, 5, 4), name="Z")
    gX = tc.gradient(nn.conv2d_nchw(X, Wt, 1, 1), X, head=Hd)
    total = tc.compute(gX.shape, lambda *i: gX[i] + Z[i], name="total")
    args = [X, Wt, Hd, Z, total]
    f = tc.build(tc.schedule_backward([total]), args)
    vals = [rng.standard_normal(tuple(int(e) for e in t.shape)).astype("float32")
            for t in args[:4]]
    got = np.empty((4, 5, 5, 4), "float32")
    f(*vals, got)
    want, = ad.evaluate([gX], {X: vals[0], Wt: vals[1], Hd: vals[2]})
    np.testing.assert_allclose(got, want + vals[3], rtol=1e-4, atol=1e-4)
