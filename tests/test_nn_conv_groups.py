"""Grouped and depthwise 2-d convolutions and the convolutions' padding forms (tecomp.nn):
the forward against PyTorch (float64) over TOPI-like parameter lists (strides, paddings
incl. asymmetric, SAME and VALID, dilations, channel multipliers, groups, both layouts,
odd shapes, symbolic batch), float16/bfloat16 summed in float32, the gradients against
PyTorch's and with gradcheck, the CPU depthwise and grouped templates (AVX-512 and AVX2
blockings, 1 and 2 threads, the ones ``tc.auto_schedule`` gives) and the GPU rules in
the emulation.
Correctness only, never speed."""
import os
import re
import platform
import shutil

import numpy as np
import pytest

import tecomp as tc
import tecomp.nn as nn
from tecomp.autodiff import gradcheck
from tecomp.nn._check import Args
from tecomp.strategy import Knobs, apply_rules, cpu
from tecomp.strategy.cpu.grouped import _across_groups, _interleaves, group_conv2d_params
from tecomp.testing.builds import BuildMemo

torch = pytest.importorskip("torch")
F = torch.nn.functional

needs_cxx = pytest.mark.skipif(shutil.which("g++") is None and shutil.which("clang++") is None,
                               reason="no C++ compiler for the emulation")
RNG = np.random.default_rng(52)
#: the kernels of this file's tests, each built once (a switch whose two settings plan
#: alike for a shape does not compile the same function twice)
_build = BuildMemo().build
LONG = os.environ.get("TECOMP_LONG_TESTS", "") not in ("", "0")


def _diagonal(lanes, threads):
    """The template matrices run AVX-512's blocking on 2 threads and AVX2's on 1 by
    default; the other two pairs with TECOMP_LONG_TESTS=1."""
    if not LONG and (lanes == 16) != (threads == 2):
        pytest.skip("the other lanes x threads pairs: set TECOMP_LONG_TESTS=1")


def _check_nhwc_bias_relu(c, f):
    """``f(x, w, b, out)``, a grouped NHWC convolution ``c`` with a bias and a ReLU on
    its output channels, against PyTorch (NaN-filled output: every element written)."""
    O = c.ref().shape[3]
    xa, wa = c.arrays()
    ba = RNG.standard_normal(O).astype("float32")
    out = np.full(c.ref().shape, np.nan, "float32")
    f(xa, wa, ba, out)
    np.testing.assert_allclose(out, np.maximum(c.ref() + ba, 0), rtol=1e-5, atol=1e-4)


@pytest.fixture(params=[16, 8], ids=["lanes16", "lanes8"])
def lanes(request, monkeypatch):
    monkeypatch.setenv("TECOMP_VECTOR_LANES", str(request.param))
    return request.param


@pytest.fixture(params=[1, 2], ids=["1thread", "2threads"])
def threads(request):
    old = tc.get_num_threads()
    tc.set_num_threads(request.param)
    yield request.param
    tc.set_num_threads(old)


def _pair(v):
    return tuple(v) if isinstance(v, (tuple, list)) else (v, v)


def _pads(padding, hw, khw, stride, dilation):
    """((top, bottom), (left, right)) as tecomp reads ``padding`` (the reference pads
    with F.pad, then runs an unpadded conv2d)."""
    return Args("test", "test").padding(padding, hw, khw, _pair(stride), _pair(dilation))


class Conv:
    """One convolution: ``kind`` "dense" / "grouped" (conv2d_* with groups) or "depthwise"
    (depthwise_conv2d_* with ``mult``), its PyTorch reference and the arrays in the
    layout tecomp takes."""

    def __init__(self, kind, nchw, N, C, H, W, O, KH, KW, stride=1, padding=0, dilation=1,
                 groups=1, mult=1, dtype="float64", batch=None, out_dtype=None):
        self.kind, self.nchw, self.dtype = kind, nchw, dtype
        self.stride, self.dilation = stride, dilation
        if kind == "depthwise":
            groups, O = C, C * mult
        elif kind == "dense":
            groups = 1
        self.groups = groups
        self.x = RNG.standard_normal((N, C, H, W))
        self.w = RNG.standard_normal((O, C // groups, KH, KW))
        self.pads = _pads(padding, (H, W), (KH, KW), stride, dilation)
        n = batch if batch is not None else N
        X = tc.placeholder((n, C, H, W) if nchw else (n, H, W, C), dtype, name="X")
        if kind == "depthwise":
            wt = self.w.reshape(C, mult, KH, KW)
            self.wa = wt if nchw else wt.transpose(2, 3, 0, 1)
            op = nn.depthwise_conv2d_nchw if nchw else nn.depthwise_conv2d_nhwc
            Wt = tc.placeholder(self.wa.shape, dtype, name="W")
            self.Y = op(X, Wt, stride, padding, dilation, out_dtype=out_dtype)
        else:
            self.wa = self.w if nchw else self.w.transpose(2, 3, 1, 0)
            op = nn.conv2d_nchw if nchw else nn.conv2d_nhwc
            Wt = tc.placeholder(self.wa.shape, dtype, name="W")
            self.Y = op(X, Wt, stride, padding, dilation, groups=groups, out_dtype=out_dtype)
        self.X, self.W = X, Wt
        self.xa = self.x if nchw else self.x.transpose(0, 2, 3, 1)

    def torch_out(self, x=None, w=None):
        (t, b), (l, r) = self.pads
        x = torch.tensor(self.x) if x is None else x
        w = torch.tensor(self.w) if w is None else w
        return F.conv2d(F.pad(x, (l, r, t, b)), w, stride=self.stride,
                        dilation=self.dilation, groups=self.groups)

    def ref(self):
        out = self.torch_out().numpy()
        return out if self.nchw else out.transpose(0, 2, 3, 1)

    def arrays(self, dtype=None):
        dtype = dtype or self.dtype
        cast = (lambda a: a.astype("float32")) if dtype == "bfloat16" else \
            (lambda a: a.astype(dtype))
        return [np.ascontiguousarray(cast(a)) for a in (self.xa, self.wa)]

    def run(self, s, target="llvm", **kw):
        f = _build(s, [self.X, self.W, self.Y], target=target)
        xa, wa = self.arrays()
        out = np.full(self.ref().shape, np.nan, _np_dtype(self.Y.dtype))
        f(xa, wa, out, **kw)
        return out


def _np_dtype(d):
    return "float32" if d == "bfloat16" else d


def _auto(conv):
    return tc.auto_schedule([conv.X, conv.W, conv.Y], trials=0)


# (kind, N, C, H, W, O, KH, KW, stride, padding, dilation, groups, mult): TOPI's
# depthwise_conv2d and group_conv2d test lists, and odd shapes
CASES = [
    ("dense", 1, 4, 7, 8, 6, 3, 3, 1, (0, 1, 2, 0), 1, 1, 1),
    ("dense", 2, 3, 9, 9, 5, 3, 3, 2, "SAME", 1, 1, 1),
    ("dense", 1, 3, 8, 9, 5, 3, 3, (2, 3), ((0, 2), (1, 0)), (1, 2), 1, 1),
    ("dense", 1, 2, 6, 7, 3, 3, 2, 1, "VALID", 1, 1, 1),
    ("dense", 1, 3, 10, 10, 4, 5, 5, 3, "SAME", 1, 1, 1),
    ("grouped", 1, 4, 9, 9, 8, 3, 3, 2, 1, 1, 2, 1),
    ("grouped", 2, 8, 7, 5, 12, 3, 3, 1, (1, 0, 0, 1), 1, 4, 1),
    ("grouped", 1, 6, 11, 11, 9, 3, 1, 2, "SAME", (2, 1), 3, 1),
    ("grouped", 1, 32, 8, 8, 32, 3, 3, 1, 1, 1, 8, 1),
    ("depthwise", 1, 8, 9, 9, 8, 3, 3, 1, ((1, 0), (2, 1)), 2, 8, 1),
    ("depthwise", 1, 4, 9, 9, 8, 3, 3, 1, 1, 1, 4, 2),
    ("depthwise", 2, 5, 9, 10, 5, 3, 3, 2, "SAME", 1, 5, 1),
    ("depthwise", 1, 6, 8, 8, 12, 3, 3, (2, 1), "VALID", (1, 2), 6, 2),
    ("depthwise", 1, 17, 13, 11, 17, 5, 3, 2, (2, 1), 1, 17, 1),
    ("depthwise", 2, 3, 1, 1, 3, 1, 1, 1, 0, 1, 3, 1),
    ("depthwise", 1, 33, 21, 19, 99, 3, 3, 1, (0, 0, 1, 1), 1, 33, 3),
]
IDS = [f"{c[0]}-{k}" for k, c in enumerate(CASES)]


def _conv(case, nchw, **kw):
    kind, N, C, H, W, O, KH, KW, s, p, d, g, m = case
    return Conv(kind, nchw, N, C, H, W, O, KH, KW, s, p, d, g, m, **kw)


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_forward_matches_torch(case, layout):
    c = _conv(case, layout == "nchw")
    np.testing.assert_allclose(c.run(_auto(c)), c.ref(), rtol=1e-10, atol=1e-10)
    kind, N, C, H, W, O, KH, KW, s, p, d, g, m = case
    if kind == "depthwise":
        # PyTorch's spelling: conv2d_* with groups == channels, weight [C*M, 1, KH, KW]
        c = Conv("grouped", layout == "nchw", N, C, H, W, C * m, KH, KW, s, p, d, groups=C)
        assert c.Y.op.tag == f"depthwise_conv2d_{layout}"
        np.testing.assert_allclose(c.run(_auto(c)), c.ref(), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_groups_equal_to_channels_is_the_depthwise_stage(layout):
    """conv2d_* with groups == C and one input channel per group (PyTorch's depthwise
    spelling, weight [C*M, 1, KH, KW] / HWIO [KH, KW, 1, C*M]) is the depthwise stage, with
    the depthwise template; other groupings are group_conv2d_*."""
    nchw = layout == "nchw"
    c = Conv("grouped", nchw, 2, 6, 9, 9, 12, 3, 3, 2, 1, 1, groups=6)
    assert c.Y.op.tag == f"depthwise_conv2d_{layout}"
    assert c.Y.op.attrs["depthwise_conv2d"] == ((2, 2), ((1, 1), (1, 1)), (1, 1), 2)
    np.testing.assert_allclose(c.run(_auto(c)), c.ref(), rtol=1e-10, atol=1e-10)
    g = Conv("grouped", nchw, 1, 6, 5, 5, 6, 3, 3, groups=3)
    assert g.Y.op.tag == f"group_conv2d_{layout}" and "conv2d" not in g.Y.op.attrs
    d = Conv("dense", nchw, 1, 6, 5, 5, 6, 3, 3, padding=(0, 0, 1, 2))
    assert d.Y.op.attrs["conv2d"] == ((1, 1), ((0, 1), (0, 2)), (1, 1))


@pytest.mark.parametrize("padding,want", [
    (1, ((1, 1), (1, 1))), ((1, 2), ((1, 1), (2, 2))), ((0, 1, 2, 3), ((0, 2), (1, 3))),
    (((0, 1), (2, 3)), ((0, 1), (2, 3))), ([[2, 0], [0, 2]], ((2, 0), (0, 2))),
    ("VALID", ((0, 0), (0, 0))), ("same", ((1, 1), (1, 1))),
])
def test_padding_forms_make_the_padding_stage(padding, want):
    X = tc.placeholder((1, 2, 6, 6), name="X")
    Y = nn.depthwise_conv2d_nchw(X, tc.placeholder((2, 1, 3, 3), name="W"), padding=padding)
    pad = Y.op.input_tensors[0]
    if want == ((0, 0), (0, 0)):
        assert pad is X
    else:
        assert pad.name == "depthwise_conv2d_nchw.pad"
        assert tc.utils.get_const_tuple(pad.shape) == (1, 2, 6 + sum(want[0]), 6 + sum(want[1]))
    assert Y.op.attrs["depthwise_conv2d"][1] == want


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("case", [CASES[k] for k in (1, 8, 11, 14, 15)],
                         ids=[IDS[k] for k in (1, 8, 11, 14, 15)])
def test_depthwise_template_every_blocking(case, layout, lanes, threads):
    """The depthwise template (schedule_depthwise_conv2d_*) and what auto_schedule gives,
    with the AVX-512 and the AVX2 blockings, 1 and 2 threads, tails everywhere."""
    _diagonal(lanes, threads)
    nchw = layout == "nchw"
    kind, N, C, H, W, O, KH, KW, s, p, d, g, m = case
    c = Conv("depthwise", nchw, N, C, H, W, C * m if kind == "depthwise" else C, KH, KW,
             s, p, d, mult=m if kind == "depthwise" else 1, dtype="float32")
    sched = cpu.schedule_depthwise_conv2d_nchw if nchw else cpu.schedule_depthwise_conv2d_nhwc
    s1 = sched(c.Y)
    low = str(tc.lower(s1, [c.X, c.W, c.Y]))
    assert ("parallel" in low) == (threads > 1)
    np.testing.assert_allclose(c.run(s1), c.ref(), rtol=1e-5, atol=1e-4)
    # auto_schedule(trials=0) starts from (and here is) the template
    assert str(tc.lower(_auto(c), [c.X, c.W, c.Y])) == low


# (N, C, H, W, O, stride, padding, groups): groups of 4, 8, 16 and 32 output channels
# (narrower than a vector, one vector, two), tails in every blocked dimension
GROUPED = [(1, 16, 9, 9, 16, 1, 1, 4), (2, 32, 7, 11, 64, 2, (1, 0, 0, 1), 8),
           (1, 32, 8, 8, 64, 1, "SAME", 2), (1, 12, 6, 5, 18, 1, 1, 3),
           (1, 64, 5, 5, 64, 1, 1, 2)]


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("case", GROUPED, ids=[f"g{c[-1]}-{k}" for k, c in enumerate(GROUPED)])
def test_grouped_template_every_blocking(case, layout, lanes, threads):
    _diagonal(lanes, threads)
    nchw = layout == "nchw"
    N, C, H, W, O, s, p, g = case
    c = Conv("grouped", nchw, N, C, H, W, O, 3, 3, s, p, groups=g, dtype="float32")
    sched = cpu.schedule_group_conv2d_nchw if nchw else cpu.schedule_group_conv2d_nhwc
    s1 = sched(c.Y)
    low = str(tc.lower(s1, [c.X, c.W, c.Y]))
    assert ("parallel" in low) == (threads > 1)
    np.testing.assert_allclose(c.run(s1), c.ref(), rtol=1e-5, atol=1e-4)
    assert str(tc.lower(_auto(c), [c.X, c.W, c.Y])) == low


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("config", [
    {"channel_blocks": False},
    {"channel_blocks": True},
    {"channel_blocks": True, "ob": 8, "yb": 3, "xb": 5, "groups_per_task": 2},
    {"channel_blocks": True, "ob": 16, "yb": 1, "xb": 7, "groups_per_task": 4},
], ids=["rows-pixels", "blocks", "blocks-tails", "blocks-one-task"])
def test_grouped_template_configs(config, layout):
    """Every decision of the grouped template pinned through ``config``: channel blocks
    (a padded copy of each task's groups, stored group by group, and the weights copied
    group by group) or the rows / pixels read in place, register blocks with tails in
    both pixel dimensions and a channel block half a group wide, 2 or 4 groups per
    task; the auto-scheduler's knobs give the same choices.  Each right, on 2 threads.
    (NHWC: not interleaved, the first decision where it applies: groups of 16 are one
    vector with AVX-512.)"""
    nchw = layout == "nchw"
    c = Conv("grouped", nchw, 2, 64, 7, 9, 64, 3, 3, (1, 2), 1, groups=4, dtype="float32")
    picks = {"group_conv2d.channel_blocks": config["channel_blocks"]}
    if not nchw:
        picks["group_conv2d.interleave"] = False
        config = dict(config, interleave=False)
    sched = cpu.schedule_group_conv2d_nchw if nchw else cpu.schedule_group_conv2d_nhwc
    old = tc.get_num_threads()
    tc.set_num_threads(2)
    try:
        s1 = sched(c.Y, config=config)
        low = str(tc.lower(s1, [c.X, c.W, c.Y]))
        # the padded copy per task (a buffer of the task's groups), or none
        assert ("pad.global" in low) == config["channel_blocks"], low
        np.testing.assert_allclose(c.run(s1), c.ref(), rtol=1e-5, atol=1e-4)
        if len(config) == len(picks):
            knobs = Knobs(picks)
            s2 = apply_rules([c.X, c.W, c.Y], knobs, cpu.cpu_model())
            assert sorted(knobs.space["group_conv2d.channel_blocks"]) == [False, True]
            assert str(tc.lower(s2, [c.X, c.W, c.Y])) == low
    finally:
        tc.set_num_threads(old)


@pytest.mark.parametrize("case, copy", [((1, 1, 1), True), ((1, 1, 1), False),
                                        ((2, 0, 2), True), (((2, 1), (1, 0, 0, 1), 1), True)],
                         ids=["pad-copy", "pad-in-place", "no-pad-dilated-copy",
                              "strided-asymmetric-copy"])
def test_grouped_nchw_rows_copy_input(case, copy):
    """NCHW rows with each task's input planes copied first (``copy_input``) or read in
    place, a bias and a ReLU on the way out, a symbolic batch, on 2 threads: the same
    result; the copy is a buffer of the task's planes; the knob offers both."""
    s, p, d = case
    c = Conv("grouped", True, 3, 32, 9, 10, 32, 3, 3, s, p, d, groups=4, dtype="float32",
             batch=tc.var("n"))
    b = tc.placeholder((32,), name="b")
    Z = nn.relu(nn.bias_add(c.Y, b, axis=1))
    old = tc.get_num_threads()
    tc.set_num_threads(2)
    try:
        config = {"channel_blocks": False, "copy_input": copy}
        s1 = cpu.schedule_group_conv2d_nchw(Z, config=config)
        low = str(tc.lower(s1, [c.X, c.W, b, Z]))
        assert ("X.global" in low) == copy, low
        f = _build(s1, [c.X, c.W, b, Z])
        xa, wa = c.arrays()
        ba = RNG.standard_normal(32).astype("float32")
        out = np.zeros(c.ref().shape, "float32")
        f(xa, wa, ba, out)
        want = np.maximum(c.ref() + ba[None, :, None, None], 0)
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-4)
        knobs = Knobs({"group_conv2d.channel_blocks": False, "group_conv2d.copy_input": copy})
        s2 = apply_rules([c.X, c.W, b, Z], knobs, cpu.cpu_model())
        assert sorted(knobs.space["group_conv2d.copy_input"]) == [False, True]
        assert str(tc.lower(s2, [c.X, c.W, b, Z])) == low
    finally:
        tc.set_num_threads(old)


# (lanes, N, C, H, W, O, stride, padding, groups, yb, xb): groups of 16 and 32 output
# channels (one or two vectors of 16 or 8 lanes), rows that the block's rows do not
# divide (a guarded bottom block), a stride, no padding, a row of 2 columns
TRANSPOSED = [(16, 1, 32, 7, 7, 32, 1, 1, 2, 2, 7), (8, 1, 64, 5, 12, 64, 2, 1, 2, 3, 3),
              (16, 1, 32, 5, 4, 32, 1, 0, 2, 1, 2)]


@pytest.mark.parametrize("case", TRANSPOSED, ids=[f"t{k}" for k in range(len(TRANSPOSED))])
def test_grouped_nchw_channel_blocks_transpose_out(case, monkeypatch):
    """NCHW channel blocks storing each block row through ``x86.transpose_f32_<xb>x<L>``
    (``transpose_out``) or a scatter per vector: the same result, the transposes where
    asked; with a bias and a ReLU on the block, computed into a register tile of their
    own, which the transposes store."""
    lanes, N, C, H, W, O, s, p, g, yb, xb = case
    monkeypatch.setenv("TECOMP_VECTOR_LANES", str(lanes))
    c = Conv("grouped", True, N, C, H, W, O, 3, 3, s, p, groups=g, dtype="float32")
    ob = lanes if (O // g) % (2 * lanes) else 2 * lanes
    name = f"x86.transpose_f32_{xb}x{lanes}"
    if not any(t.name == name for t in tc.tensor_intrins_for("llvm")):
        pytest.skip(f"this CPU has no {name}")
    # (the scatter, the default before, once: on the smallest case)
    for on in (True, False) if xb == 2 else (True,):
        config = {"channel_blocks": True, "ob": ob, "yb": yb, "xb": xb, "transpose_out": on}
        s1 = cpu.schedule_group_conv2d_nchw(c.Y, config=config)
        low = str(tc.lower(s1, [c.X, c.W, c.Y]))
        assert (name in low) == on, low
        np.testing.assert_allclose(c.run(s1), c.ref(), rtol=1e-5, atol=1e-4)
    b = tc.placeholder((O,), name="b")
    Z = nn.relu(nn.bias_add(c.Y, b, axis=1))
    s2 = cpu.schedule_group_conv2d_nchw(Z, config=config | {"transpose_out": True})
    assert name in str(tc.lower(s2, [c.X, c.W, b, Z]))
    f = _build(s2, [c.X, c.W, b, Z])
    xa, wa = c.arrays()
    ba = RNG.standard_normal(O).astype("float32")
    out = np.zeros(c.ref().shape, "float32")
    f(xa, wa, ba, out)
    want = np.maximum(c.ref() + ba[None, :, None, None], 0)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-4)


def test_grouped_nchw_transpose_out_keeps_the_scatter_for_a_float16_epilogue():
    """An epilogue rounding the block to float16: the float32 transposes cannot store
    it, so it keeps the scatter (transpose_out asked for by default), and is right."""
    c = Conv("grouped", True, 1, 32, 7, 7, 32, 3, 3, 1, 1, groups=2, dtype="float32")
    Z = tc.compute(c.Y.shape, lambda *i: c.Y(*i).astype("float16"), name="half")
    s1 = cpu.schedule_group_conv2d_nchw(Z, config={"channel_blocks": True, "ob": 16,
                                                   "yb": 2, "xb": 7})
    assert "x86.transpose_f32_7x" not in str(tc.lower(s1, [c.X, c.W, Z]))
    f = _build(s1, [c.X, c.W, Z])
    xa, wa = c.arrays()
    out = np.zeros(c.ref().shape, "float16")
    f(xa, wa, out)
    np.testing.assert_allclose(out.astype("float32"), c.ref(), rtol=2e-3, atol=2e-2)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(24))
def test_grouped_nchw_random_configs(seed):
    """Random NCHW grouped convolutions (groups of 4 to 32 output channels, strides,
    paddings, dilations, odd planes, 1 or 2 threads, 8 or 16 lanes) under random
    configs of the template (either blocking, register blocks with tails, groups per
    task, copy_input, transpose_out where it applies), half of them with a bias and a
    ReLU on the block: each right.  Long:
    TECOMP_LONG_TESTS=1."""
    from tecomp.strategy.cpu.grouped import _transposes_out
    rng = np.random.default_rng(seed)
    lanes = int(rng.choice([8, 16]))
    old_env = os.environ.get("TECOMP_VECTOR_LANES")
    os.environ["TECOMP_VECTOR_LANES"] = str(lanes)
    old = tc.get_num_threads()
    tc.set_num_threads(int(rng.integers(1, 3)))
    try:
        g = int(rng.choice([2, 4]))
        P = int(rng.choice([4, 8, 16, 32]))
        I = int(rng.choice([2, 4, 8]))
        H, W = (int(v) for v in rng.integers(3, 12, 2))
        s, p, d = int(rng.integers(1, 3)), int(rng.integers(0, 3)), int(rng.integers(1, 3))
        if H + 2 * p < 2 * d + 1 or W + 2 * p < 2 * d + 1:
            p = d
        c = Conv("grouped", True, int(rng.integers(1, 3)), g * I, H, W, g * P, 3, 3, s, p,
                 d, groups=g, dtype="float32")
        blocks = bool(rng.integers(0, 2))
        config = {"channel_blocks": blocks, "copy_input": bool(rng.integers(0, 2))}
        if blocks:
            ob = int(rng.choice([v for v in (P, lanes, 2 * lanes) if P % v == 0]))
            # (mostly a divisor of the row, so that the transposes apply)
            OW = int(c.Y.shape[3].value)
            rows = [v for v in range(2, min(OW, lanes) + 1) if OW % v == 0]
            xb = int(rng.choice(rows)) if rows and rng.random() < 0.7 else \
                int(rng.integers(1, 9))
            config.update(ob=ob, yb=int(rng.integers(1, 4)), xb=xb,
                          groups_per_task=int(rng.choice([1, g])))
            config["transpose_out"] = bool(rng.random() < 0.7) and _transposes_out(
                c.Y, cpu.cpu_model(), ob, config["yb"], xb)
        if rng.random() < 0.5:
            s1 = cpu.schedule_group_conv2d_nchw(c.Y, config=config)
            np.testing.assert_allclose(c.run(s1), c.ref(), rtol=1e-5, atol=1e-4,
                                       err_msg=str(config))
            return
        # a bias and a ReLU on the block
        b = tc.placeholder((g * P,), name="b")
        Z = nn.relu(nn.bias_add(c.Y, b, axis=1))
        f = _build(cpu.schedule_group_conv2d_nchw(Z, config=config), [c.X, c.W, b, Z])
        xa, wa = c.arrays()
        ba = rng.standard_normal(g * P).astype("float32")
        out = np.zeros(c.ref().shape, "float32")
        f(xa, wa, ba, out)
        np.testing.assert_allclose(out, np.maximum(c.ref() + ba[None, :, None, None], 0),
                                   rtol=1e-5, atol=1e-4, err_msg=str(config))
    finally:
        tc.set_num_threads(old)
        if old_env is None:
            os.environ.pop("TECOMP_VECTOR_LANES", None)
        else:
            os.environ["TECOMP_VECTOR_LANES"] = old_env


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_grouped_channel_blocks_epilogue_no_padding_symbolic_batch(layout):
    """Channel blocks with a bias and a ReLU on the block on its way out (one kernel),
    no padding (the task copies the input itself), a dilated window, a symbolic batch."""
    nchw = layout == "nchw"
    c = Conv("grouped", nchw, 2, 32, 9, 10, 32, 3, 3, 1, 0, 2, groups=2, dtype="float32",
             batch=tc.var("n"))
    b = tc.placeholder((32,), name="b")
    Z = nn.relu(nn.bias_add(c.Y, b, axis=1 if nchw else 3))
    sched = cpu.schedule_group_conv2d_nchw if nchw else cpu.schedule_group_conv2d_nhwc
    s1 = sched(Z, config={"channel_blocks": True})
    assert "X.global" in str(tc.lower(s1, [c.X, c.W, b, Z]))
    f = _build(s1, [c.X, c.W, b, Z])
    xa, wa = c.arrays()
    ba = RNG.standard_normal(32).astype("float32")
    out = np.zeros(c.ref().shape, "float32")
    f(xa, wa, ba, out)
    want = np.maximum(c.ref() + (ba[None, :, None, None] if nchw else ba), 0)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-4)


def test_grouped_template_defaults():
    """The heuristic: channel blocks where a group's output channels make whole
    vectors, and in NHWC without a stride where a group is wider than a quarter of a
    vector; rows / pixels otherwise.  A task's groups read at least 128 channels of a
    pixel while there are 4 tasks per thread.  NCHW rows copy a task's input planes
    where the data outgrow the caches."""
    info = cpu.cpu_model("llvm -mcpu=skylake-avx512")
    for nchw, C, groups, stride, blocks in (
            (True, 512, 32, 2, True), (True, 128, 32, 1, False), (False, 128, 32, 1, False),
            (False, 256, 32, 1, True), (False, 256, 32, 2, False),
            (False, 1024, 32, 1, True)):
        X = tc.placeholder((8, C, 14, 14) if nchw else (8, 14, 14, C), name="X")
        W = tc.placeholder((C, C // groups, 3, 3) if nchw else (3, 3, C // groups, C),
                           name="W")
        Y = (nn.conv2d_nchw if nchw else nn.conv2d_nhwc)(X, W, stride, 1, groups=groups)
        p = group_conv2d_params(Y, info)
        assert p["channel_blocks"] == blocks
        if blocks:
            assert p["groups_per_task"] * C // groups >= 128 or \
                8 * groups // p["groups_per_task"] < 8 * info.threads
        # NCHW rows (and NHWC) read the planes in place here: batch 8 of 128 channels
        # at 14x14, 1.6 MB, stays in a quarter of L3
        assert not p["copy_input"]
    # NCHW rows copy a task's input planes (a group's) first where they fit in a quarter
    # of L2 and the input and output outgrow a quarter of L3 (56x56: 25.7 MB at batch
    # 8, 3.2 MB at batch 1), or the batch is symbolic
    for N, C, copy in ((8, 128, True), (1, 128, False), ("n", 128, True), (8, 8192, False)):
        X = tc.placeholder((tc.var(N) if N == "n" else N, C, 56, 56), name="X")
        W = tc.placeholder((C, C // 32, 3, 3), name="W")
        Y = nn.conv2d_nchw(X, W, 1, 1, groups=32)
        # (8192 channels: a group's 256 input planes, 3.2 MB, beyond a quarter of L2)
        assert group_conv2d_params(Y, info)["copy_input"] == copy, (N, C)


# (N, C, H, W, O, stride, padding, dilation, groups): groups of 2 and 4 output channels
# (a quarter of a vector or less), input channels per group other than output ones,
# strides, dilations, asymmetric padding, odd planes
ACROSS = [(1, 16, 9, 9, 16, 1, "SAME", 2, 4), (2, 64, 7, 11, 32, (2, 1), (1, 0, 0, 1), 1, 16),
          (1, 24, 6, 5, 16, 2, 0, (1, 2), 8)]


@pytest.mark.parametrize("case", ACROSS, ids=[f"across-{k}" for k in range(len(ACROSS))])
def test_grouped_nhwc_vectors_across_groups(case, lanes):
    """NHWC groups of at most a quarter of a vector, not interleaved
    (``interleave=False``): the pixels' vectors span several groups (each lane reads its
    group's input channel: one load and a shuffle, no gather), right over strides,
    dilations, paddings, input channels per group other than output ones, and with a
    bias and a ReLU on the block (one kernel)."""
    N, C, H, W, O, s, p, d, g = case
    c = Conv("grouped", False, N, C, H, W, O, 3, 3, s, p, d, groups=g, dtype="float32")
    info = cpu.cpu_model()
    assert info.lanes == lanes
    assert _across_groups(c.Y, info) == (4 * (O // g) <= lanes)
    b = tc.placeholder((O,), name="b")
    Z = nn.relu(nn.bias_add(c.Y, b, axis=3))
    s1 = cpu.schedule_group_conv2d_nhwc(Z, config={"interleave": False})
    low = str(tc.lower(s1, [c.X, c.W, b, Z]))
    across = _across_groups(c.Y, info)
    if across:
        # the input read in place (no copy per task), the products fused with the sums
        assert "fp_contract" in low and ".global" not in low, low
    f = _build(s1, [c.X, c.W, b, Z])
    if across and platform.machine() in ("x86_64", "AMD64"):
        assert "llvm.masked.gather" not in f.get_source("llvm-unopt")
    xa, wa = c.arrays()
    ba = RNG.standard_normal(O).astype("float32")
    out = np.full(c.ref().shape, np.nan, "float32")
    f(xa, wa, ba, out)
    np.testing.assert_allclose(out, np.maximum(c.ref() + ba, 0), rtol=1e-5, atol=1e-4)


# (N, C, H, W, O, stride, padding, dilation, groups): groups of 2, 4 and 8 output
# channels (2 to 8 groups to a 16-lane vector), input channels per group other than
# output ones, widths that the pixel block leaves a tail of, no padding, strides and
# dilations, asymmetric padding
INTERLEAVED = [(1, 16, 9, 31, 16, 1, "SAME", 2, 4), (2, 64, 7, 11, 32, (2, 1), (1, 0, 0, 1), 1, 16),
               (1, 24, 6, 5, 16, 2, 0, (1, 2), 8), (1, 32, 6, 33, 64, 1, 0, 1, 8)]


@pytest.mark.parametrize("case", INTERLEAVED,
                         ids=[f"interleaved-{k}" for k in range(len(INTERLEAVED))])
def test_grouped_nhwc_interleaved(case, lanes, threads):
    """NHWC groups narrower than a vector (and dividing it): interleaved vectors, lane
    ``k * Q + t`` holding channel ``k`` of the ``t``-th of ``Q`` groups, the input and
    the weights copied into that order and the accumulators put back in channel order
    on their way out; right over tails, strides, dilations and paddings, a bias and a
    ReLU on the block, 1 and 2 threads, and what auto_schedule gives."""
    _diagonal(lanes, threads)
    N, C, H, W, O, s, p, d, g = case
    c = Conv("grouped", False, N, C, H, W, O, 3, 3, s, p, d, groups=g, dtype="float32")
    info = cpu.cpu_model()
    P = O // g
    assert _interleaves(c.Y, info) == (P <= lanes and lanes % P == 0)
    assert group_conv2d_params(c.Y, info)["interleave"] == _interleaves(c.Y, info)
    b = tc.placeholder((O,), name="b")
    Z = nn.relu(nn.bias_add(c.Y, b, axis=3))
    s1 = cpu.schedule_group_conv2d_nhwc(Z)
    low = str(tc.lower(s1, [c.X, c.W, b, Z]))
    assert ("parallel" in low) == (threads > 1)
    if _interleaves(c.Y, info):
        Q = lanes // P if P < lanes else 2
        # the accumulators [.., O / L, P, Q], the input and weight copies likewise
        assert f"float32[1, 1, " in low and f", {P}, {Q}] (local)" in low, low
        f = _build(s1, [c.X, c.W, b, Z])
        if platform.machine() in ("x86_64", "AMD64"):
            assert "llvm.masked.gather" not in f.get_source("llvm-unopt")
    else:
        f = _build(s1, [c.X, c.W, b, Z])
    _check_nhwc_bias_relu(c, f)
    assert str(tc.lower(tc.auto_schedule([c.X, c.W, b, Z], trials=0), [c.X, c.W, b, Z])) == low


# (N, G, I, H, W, stride, padding, dilation): groups of one vector of output channels
# (G groups of L, I input channels each): a block of 2 groups in 2 vectors; tails of
# the pixel block, strides, dilations, asymmetric padding, no padding; tasks of pairs of
# groups over the plane (N * G / 2 >= 4 per thread, the plane within L1) and of rows
# (the tail of a 14-pixel block, AVX-512's, slow to build: TECOMP_LONG_TESTS=1)
WHOLE_VECTORS = [(1, 2, 4, 4, 9, 1, "SAME", 1), (2, 2, 3, 7, 11, (2, 1), (1, 0, 0, 1), 1),
                 (3, 6, 5, 6, 5, 2, 0, (1, 2)),
                 pytest.param((1, 2, 4, 4, 17, 1, "SAME", 1), marks=pytest.mark.slow)]


@pytest.mark.parametrize("case", WHOLE_VECTORS,
                         ids=[f"whole-{k}" for k in range(len(WHOLE_VECTORS))])
def test_grouped_nhwc_interleaved_whole_vectors(case, lanes, threads, monkeypatch):
    """NHWC groups of one vector of output channels (``P == L``, read from the machine
    model): interleaved two groups to two vectors, each vector half of both groups'
    channels (:func:`_interleave_shape`), the weights copied block by block; right with
    a bias and a ReLU, over 1 and 2 threads, and (one case) with the switch
    ``INTERLEAVE_WHOLE_VECTORS`` off (channel blocks, as before)."""
    from tecomp.strategy.cpu import grouped

    _diagonal(lanes, threads)
    N, G, I, H, W, s, p, d = case
    O = G * lanes
    c = Conv("grouped", False, N, G * I, H, W, O, 3, 3, s, p, d, groups=G, dtype="float32")
    info = cpu.cpu_model()
    assert grouped._interleave_shape(lanes, lanes) == (2, 2)
    assert _interleaves(c.Y, info) == (G % 2 == 0)
    b = tc.placeholder((O,), name="b")
    Z = nn.relu(nn.bias_add(c.Y, b, axis=3))
    xa, wa = c.arrays()
    ba = RNG.standard_normal(O).astype("float32")
    want = np.maximum(c.ref() + ba, 0)
    for on in (True, False) if case == WHOLE_VECTORS[1] else (True,):
        monkeypatch.setattr(grouped, "INTERLEAVE_WHOLE_VECTORS", on)
        assert _interleaves(c.Y, info) == (on and G % 2 == 0)
        s1 = tc.auto_schedule([c.X, c.W, b, Z], trials=0)
        low = str(tc.lower(s1, [c.X, c.W, b, Z]))
        if on and G % 2 == 0:
            # the accumulators [.., G / 2, P, 2]: 2 vectors of a pixel
            assert f", {lanes}, 2] (local)" in low, low
            tasks = (N * G // 2 >= 4 * threads
                     and grouped._block_plane_bytes(c.Y, 2) <= info.l1_bytes)
            assert bool(re.search(rf"parallel \([^,]*, 0, {N * G // 2}\)", low)) == \
                (tasks and threads > 1), low
        f = _build(s1, [c.X, c.W, b, Z])
        out = np.full(want.shape, np.nan, "float32")
        f(xa, wa, ba, out)
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-4)


def test_grouped_nhwc_interleaved_symbolic_batch_and_knob():
    """Interleaved vectors with a symbolic batch, without an epilogue; the knob
    ``group_conv2d.interleave`` gives both schedules, each right.  Not where the input
    rows one output row reads (each task's copy) exceed L2."""
    info = cpu.cpu_model()
    big = nn.conv2d_nhwc(tc.placeholder((1, 112, 112, 1024)),
                         tc.placeholder((3, 3, 4, 1024)), 1, 1, groups=256)
    assert _interleaves(big, info) == (info.lanes > 4 and 3 * 114 * 1024 * 4 <= info.l2_bytes)
    c = Conv("grouped", False, 3, 32, 6, 7, 32, 3, 3, 1, 1, groups=8, dtype="float32",
             batch=tc.var("n"))
    want = _interleaves(c.Y, info)
    for choice in (True, False):
        if choice and not want:
            continue
        knobs = Knobs({"group_conv2d.interleave": choice})
        s1 = apply_rules([c.X, c.W, c.Y], knobs, info)
        if want:
            assert sorted(knobs.space["group_conv2d.interleave"]) == [False, True]
        np.testing.assert_allclose(c.run(s1), c.ref(), rtol=1e-5, atol=1e-4)


def test_grouped_nhwc_interleaved_inside_a_block():
    """A ResNeXt-like block (a dense NHWC conv and a ReLU, then a grouped one in groups
    of 8 with a bias and a ReLU): the grouped convolution gets the interleaved template
    as a part of the larger DAG (where it interleaves), right; the trace replays."""
    from tecomp.schedule.trace import replay

    X = tc.placeholder((2, 6, 9, 16), name="X")
    W1 = tc.placeholder((3, 3, 16, 32), name="W1")
    W2 = tc.placeholder((3, 3, 8, 32), name="W2")
    b = tc.placeholder((32,), name="b")
    Y2 = nn.relu(nn.bias_add(nn.conv2d_nhwc(nn.relu(nn.conv2d_nhwc(X, W1, 1, 1)), W2, 1, 1,
                                            groups=4), b, axis=3))
    args = [X, W1, W2, b, Y2]
    s = tc.auto_schedule(args, trials=0)
    low = str(tc.lower(s, args))
    lanes = cpu.cpu_model().lanes
    if lanes % 8 == 0 and lanes > 8:
        assert f", 8, {lanes // 8}] (local)" in low, low
    x, w1, w2, bb = (RNG.standard_normal(shape).astype("float32") for shape in
                     ((2, 6, 9, 16), (3, 3, 16, 32), (3, 3, 8, 32), (32,)))
    out = np.full((2, 6, 9, 32), np.nan, "float32")
    _build(s, args)(x, w1, w2, bb, out)
    t = lambda a: torch.tensor(a, dtype=torch.float64)  # noqa: E731
    r = F.relu(F.conv2d(t(x).permute(0, 3, 1, 2), t(w1).permute(3, 2, 0, 1), padding=1))
    r = F.relu(F.conv2d(r, t(w2).permute(3, 2, 0, 1), padding=1, groups=4) +
               t(bb)[None, :, None, None]).permute(0, 2, 3, 1).numpy()
    np.testing.assert_allclose(out, r, rtol=1e-4, atol=1e-4)
    assert str(tc.lower(replay(s.trace.to_json(), [Y2]), args)) == low


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_depthwise_template_with_epilogue(layout):
    """A bias and a ReLU6 (MobileNet's) on the block on its way out: one kernel."""
    nchw = layout == "nchw"
    c = Conv("depthwise", nchw, 2, 24, 14, 14, 24, 3, 3, 2, 1, dtype="float32")
    b = tc.placeholder((24,), name="b")
    Z = nn.clip(nn.bias_add(c.Y, b, axis=1 if nchw else 3), 0.0, 6.0)
    sched = cpu.schedule_depthwise_conv2d_nchw if nchw else cpu.schedule_depthwise_conv2d_nhwc
    f = _build(sched(Z), [c.X, c.W, b, Z])
    xa, wa = c.arrays()
    ba = RNG.standard_normal(24).astype("float32")
    out = np.zeros(c.ref().shape, "float32")
    f(xa, wa, ba, out)
    want = np.clip(c.ref() + (ba[None, :, None, None] if nchw else ba), 0, 6)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-4)


def _off_line(shape, shift):
    """A float32 array of ``shape`` starting ``shift`` elements past a 64-byte line."""
    size = int(np.prod(shape))
    raw = np.zeros(size + 32, "float32")
    start = (-raw.ctypes.data // 4) % 16 + shift
    return raw[start:start + size].reshape(shape)


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_depthwise_streamed_output(layout, monkeypatch):
    """The output stores past the cache (``pragma nontemporal``, forced on small shapes
    with ``depthwise.STREAM_OUTPUT``): rows of whole lines (NCHW 16 columns, NHWC 32
    channels), a stride, an epilogue, outputs on a line and off it (run as cached)."""
    from tecomp.strategy.cpu import depthwise
    monkeypatch.setattr(depthwise, "STREAM_OUTPUT", True)
    nchw = layout == "nchw"
    for stride, (C, H, W) in ((1, (3, 7, 16) if nchw else (32, 5, 7)),
                              (2, (2, 6, 32) if nchw else (32, 7, 6))):
        c = Conv("depthwise", nchw, 2, C, H, W, C, 3, 3, stride, 1, dtype="float32")
        Z = nn.relu(c.Y)
        s = cpu.schedule_depthwise_conv2d_nchw(Z) if nchw else \
            cpu.schedule_depthwise_conv2d_nhwc(Z)
        assert "pragma_nontemporal" in str(tc.lower(s, [c.X, c.W, Z]))
        f = _build(s, [c.X, c.W, Z])
        xa, wa = c.arrays()
        for shift in (0, 1):
            out = _off_line(c.ref().shape, shift)
            f(xa, wa, out)
            np.testing.assert_allclose(out, np.maximum(c.ref(), 0), rtol=1e-5, atol=1e-4)


def test_depthwise_streams_outputs_past_half_the_cache():
    """By default only a pass over more than half the last-level cache streams its
    output (a 32 MiB one here), and only rows of whole cache lines (NCHW 56 columns:
    224 bytes do not), and not a symbolic batch."""
    from tecomp.strategy.cpu.depthwise import _streams_output
    from tecomp.target import CpuModel
    info = CpuModel(lanes=16, vregs=32, threads=1, l3_bytes=32 << 20)
    n = tc.var("n")
    for layout, shape, want in (("nhwc", (8, 112, 112, 32), True),
                                ("nhwc", (2, 112, 112, 32), False),
                                ("nchw", (8, 32, 112, 112), True),
                                ("nchw", (8, 128, 56, 56), False),
                                ("nhwc", (n, 112, 112, 32), False)):
        X = tc.placeholder(shape, name="X")
        if layout == "nhwc":
            Y = nn.depthwise_conv2d_nhwc(X, tc.placeholder((3, 3, shape[3], 1)), 1, 1)
        else:
            Y = nn.depthwise_conv2d_nchw(X, tc.placeholder((shape[1], 1, 3, 3)), 1, 1)
        assert _streams_output(Y, Y, info) == want, (layout, shape)


# (N, C, H, W, stride, padding, dilation, mult): the NCHW rows blocking with its rows
# prefetched a block ahead (forced on small shapes): tails of rows and columns, strides,
# a dilation, asymmetric and no padding, a channel multiplier, one and several images
PREFETCHED = [(1, 5, 13, 37, 1, 1, 1, 1), (3, 4, 23, 19, 2, 1, 1, 1),
              (2, 3, 17, 40, 1, ((0, 2), (1, 0)), 2, 1), (1, 6, 21, 33, (2, 1), "VALID", 1, 2),
              (8, 2, 7, 7, 1, "SAME", 1, 1)]


@pytest.mark.parametrize("case", PREFETCHED, ids=[f"p{k}" for k in range(len(PREFETCHED))])
def test_depthwise_nchw_rows_prefetched(case, threads, monkeypatch):
    """The NCHW template prefetching the next block's input rows
    (``depthwise.PREFETCH_ROWS``, by default only where the input comes from memory):
    the same results, the last block's prefetch clamped into the plane, an epilogue."""
    from tecomp.strategy.cpu import depthwise
    monkeypatch.setattr(depthwise, "PREFETCH_ROWS", True)
    N, C, H, W, stride, padding, dilation, m = case
    c = Conv("depthwise", True, N, C, H, W, C * m, 3, 3, stride, padding, dilation, mult=m,
             dtype="float32")
    Z = nn.relu(c.Y)
    s = cpu.schedule_depthwise_conv2d_nchw(Z)
    assert "prefetch" in str(tc.lower(s, [c.X, c.W, Z]))
    f = _build(s, [c.X, c.W, Z])
    xa, wa = c.arrays()
    out = np.full(c.ref().shape, np.nan, "float32")
    f(xa, wa, out)
    np.testing.assert_allclose(out, np.maximum(c.ref(), 0), rtol=1e-5, atol=1e-4)
    monkeypatch.setattr(depthwise, "PREFETCH_ROWS", False)
    assert "prefetch" not in str(tc.lower(cpu.schedule_depthwise_conv2d_nchw(Z),
                                          [c.X, c.W, Z]))


def test_depthwise_prefetches_rows_only_from_memory():
    """By default the NCHW template prefetches its rows only where the pass outgrows
    half the last-level cache (its input then comes from memory every call), whatever
    the row's width, and not for a symbolic batch."""
    from tecomp.strategy.cpu.depthwise import _input_from_memory
    from tecomp.target import CpuModel
    info = CpuModel(lanes=16, vregs=32, threads=1, l3_bytes=32 << 20)
    small = CpuModel(lanes=16, vregs=32, threads=1, l3_bytes=32 << 20,
                     stream_output_bytes=4 << 20)
    n = tc.var("n")
    for shape, stride, want, want_small in (((8, 64, 112, 112), 2, True, True),
                                            ((8, 32, 112, 112), 1, True, True),
                                            ((1, 64, 112, 112), 2, False, False),
                                            ((8, 256, 28, 28), 1, False, True),
                                            ((n, 64, 112, 112), 2, False, False)):
        X = tc.placeholder(shape, name="X")
        Y = nn.depthwise_conv2d_nchw(X, tc.placeholder((shape[1], 1, 3, 3)), stride, 1)
        assert _input_from_memory(Y, info) == want, shape
        assert _input_from_memory(Y, small) == want_small, shape


# (N, C, H, W, stride, padding, dilation): NHWC of several images whose output rows no
# block of 4 or 2 divides with enough tasks (7, 5, 13 rows; a guarded tail of rows), and
# one row
BORDER_ROWS = [(8, 32, 7, 7, 1, 1, 1), (3, 16, 14, 9, 2, 1, 1),
               (2, 20, 5, 6, 1, ((0, 2), (1, 0)), 1), (4, 16, 13, 8, 1, "SAME", 2),
               (5, 16, 1, 5, 1, 1, 1)]


@pytest.mark.parametrize("case", BORDER_ROWS, ids=[f"r{k}" for k in range(len(BORDER_ROWS))])
def test_depthwise_nhwc_border_rows_apart(case, threads, monkeypatch):
    """The NHWC template of several images and few rows takes blocks of rows with a
    guarded tail (``depthwise.BORDER_ROWS_APART``), so that the border rows' padding
    tests are parted from the inner rows: the same results as a task per (image, row);
    and the grouped NHWC pixels blocking, which shares it."""
    from tecomp.strategy.cpu import depthwise
    N, C, H, W, stride, padding, dilation = case
    c = Conv("depthwise", False, N, C, H, W, C, 3, 3, stride, padding, dilation,
             dtype="float32")
    g = Conv("grouped", False, N, C, H, W, 2 * C, 3, 3, stride, padding, dilation,
             groups=C // 4, dtype="float32")
    for on in (False, True):
        monkeypatch.setattr(depthwise, "BORDER_ROWS_APART", on)
        s = cpu.schedule_depthwise_conv2d_nhwc(c.Y)
        OH = c.ref().shape[1]
        low = str(tc.lower(s, [c.X, c.W, c.Y]))
        # (blocks of rows: a loop of rows inside the task)
        assert "y.inner" in low or not on or OH == 1, low
        np.testing.assert_allclose(c.run(s), c.ref(), rtol=1e-5, atol=1e-4)
    sg = cpu.schedule_group_conv2d_nhwc(g.Y, config={"channel_blocks": False,
                                                     "interleave": False})
    np.testing.assert_allclose(g.run(sg), g.ref(), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("kind", ["depthwise", "grouped"])
def test_symbolic_batch(kind, layout):
    nchw = layout == "nchw"
    n = tc.var("n")
    c = Conv(kind, nchw, 3, 8, 9, 7, 16 if kind == "depthwise" else 8, 3, 3, 2, "SAME",
             groups=4, mult=2, dtype="float32", batch=n)
    f = _build(_auto(c), [c.X, c.W, c.Y])
    xa, wa = c.arrays()
    out = np.zeros(c.ref().shape, "float32")
    f(xa, wa, out)
    np.testing.assert_allclose(out, c.ref(), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("kind", ["depthwise", "grouped", "dense"])
def test_half_precision_sums_in_float32(kind, dtype, layout):
    """float16/bfloat16 operands: a float32 stage ``<name>.acc`` rounded once (as PyTorch);
    ``out_dtype="float32"`` keeps the float32 sum as the output.  (The kernels run
    float16 in NCHW and bfloat16 in NHWC by default, every pair with
    TECOMP_LONG_TESTS=1.)"""
    nchw = layout == "nchw"
    c = Conv(kind, nchw, 1, 16, 10, 9, 16, 3, 3, 1, (1, 0, 1, 2), groups=4, dtype=dtype)
    acc = c.Y.op.input_tensors[0]
    assert (c.Y.dtype, acc.dtype, acc.name.endswith(".acc")) == (dtype, "float32", True)
    c32 = Conv(kind, nchw, 1, 16, 10, 9, 16, 3, 3, 1, 1, groups=4, dtype=dtype,
               out_dtype="float32")
    assert c32.Y.dtype == "float32" and c32.Y.op.reduce_axis
    if not LONG and (dtype == "float16") != nchw:
        return
    # the reference: the operands rounded to the dtype, summed in float64
    rounded = torch.tensor(c.x).to(getattr(torch, dtype)).double()
    wr = torch.tensor(c.w).to(getattr(torch, dtype)).double()
    want = c.torch_out(rounded, wr).numpy()
    want = want if nchw else want.transpose(0, 2, 3, 1)
    f = _build(_auto(c), [c.X, c.W, c.Y])
    xa, wa = (torch.tensor(a.copy()).to(getattr(torch, dtype)) for a in (c.xa, c.wa))
    out = torch.zeros(want.shape, dtype=getattr(torch, dtype))
    f(xa, wa, out)
    tol = 1e-2 if dtype == "float16" else 4e-2
    np.testing.assert_allclose(out.double().numpy(), want, rtol=tol, atol=tol)


GRAD_CASES = [CASES[k] for k in (0, 1, 2, 5, 7, 9, 10, 11, 12)]
GRAD_IDS = [IDS[k] for k in (0, 1, 2, 5, 7, 9, 10, 11, 12)]


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("case", GRAD_CASES, ids=GRAD_IDS)
def test_gradients_match_torch(case, layout):
    """tc.gradient of the data and the weight, float64, against PyTorch's backward (the
    asymmetric and SAME paddings through the convolutions' registered gradients, the
    grouped and depthwise ones derived)."""
    c = _conv(case, layout == "nchw")
    x = torch.tensor(c.x, requires_grad=True)
    w = torch.tensor(c.w, requires_grad=True)
    out = c.torch_out(x, w)
    head = RNG.standard_normal(tuple(out.shape))
    out.backward(torch.tensor(head))
    Hd = tc.placeholder(c.Y.shape, "float64", name="H")
    dX, dW = tc.gradient(c.Y, [c.X, c.W], Hd)
    f = _build(tc.auto_schedule([dX, dW], trials=0), [c.X, c.W, Hd, dX, dW])
    xa, wa = c.arrays()
    gx, gw = np.zeros(xa.shape), np.zeros(wa.shape)
    f(xa, wa, np.ascontiguousarray(head if c.nchw else head.transpose(0, 2, 3, 1)), gx, gw)
    want_x = x.grad.numpy() if c.nchw else x.grad.numpy().transpose(0, 2, 3, 1)
    wg = w.grad.numpy()
    if c.kind == "depthwise":
        C, mult = c.x.shape[1], c.w.shape[0] // c.x.shape[1]
        wg = wg.reshape(C, mult, *wg.shape[2:])
        want_w = wg if c.nchw else wg.transpose(2, 3, 0, 1)
    else:
        want_w = wg if c.nchw else wg.transpose(2, 3, 1, 0)
    np.testing.assert_allclose(gx, want_x, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(gw, want_w, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("case", [CASES[k] for k in (2, 6, 12)],
                         ids=[IDS[k] for k in (2, 6, 12)])
def test_gradcheck(case, layout):
    c = _conv(case, layout == "nchw")
    assert gradcheck(c.Y, [c.X, c.W])


def test_registered_gradient_for_asymmetric_padding():
    """The dense convolution's registered gradient (phases of the flipped kernel) reads
    the padding before; a stride-1 asymmetric one is one convolution of the adjoint with
    its own (asymmetric) padding, whose second derivative reads it from attrs."""
    c = Conv("dense", True, 1, 3, 7, 8, 4, 3, 3, 1, (0, 1, 2, 0))
    Hd = tc.placeholder(c.Y.shape, "float64", name="H")
    dX, = tc.gradient(c.Y, [c.X], Hd)
    assert dX.op.tag == "conv2d_nchw"
    # the adjoint padded by dilation * (k - 1) - padding on each side: rows (0, 2) -> (2,
    # 0), columns (1, 0) -> (1, 2)
    assert dX.op.attrs["conv2d"] == ((1, 1), ((2, 0), (1, 2)), (1, 1))
    # the second derivative: the gradient of that convolution, by the same rule
    assert gradcheck(dX, [Hd, c.W])


@needs_cxx
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("kind", ["depthwise", "grouped", "dense"])
def test_gpu_rules_in_the_emulation(kind, layout):
    """tc.auto_schedule(target="cuda-emu"): the GPU rules for the depthwise and grouped
    stages, the conv templates for an asymmetric padding."""
    nchw = layout == "nchw"
    c = Conv(kind, nchw, 1, 8, 7, 6, 8, 3, 3, 2, (1, 0, 0, 1), groups=2, dtype="float32")
    s = tc.auto_schedule([c.X, c.W, c.Y], target="cuda-emu")
    np.testing.assert_allclose(c.run(s, target="cuda-emu"), c.ref(), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("spelling", ["depthwise", "groups"])
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_depthwise_data_gradient_is_a_depthwise_convolution(layout, spelling):
    """Stride 1, one filter per channel: the data gradient is the depthwise stage of the
    adjoint (padded by dilation * (k - 1) - padding, before and after apart) with the
    kernel flipped, which the depthwise template schedules; a stride keeps the derived
    form.  Both against PyTorch's backward, float64, with a second derivative."""
    nchw = layout == "nchw"
    kind = "depthwise" if spelling == "depthwise" else "grouped"
    c = Conv(kind, nchw, 2, 6, 9, 8, 6, 3, 3, 1, (1, 0, 2, 1), (2, 1), groups=6)
    Hd = tc.placeholder(c.Y.shape, "float64", name="H")
    dX, = tc.gradient(c.Y, [c.X], Hd)
    assert dX.op.tag == f"depthwise_conv2d_{layout}"
    # padding ((1, 2), (0, 1)), dilation (2, 1), 3x3: the adjoint's ((3, 2), (2, 1))
    assert dX.op.attrs["depthwise_conv2d"] == ((1, 1), ((3, 2), (2, 1)), (2, 1), 1)
    x = torch.tensor(c.x, requires_grad=True)
    out = c.torch_out(x, torch.tensor(c.w))
    head = RNG.standard_normal(tuple(out.shape))
    out.backward(torch.tensor(head))
    f = _build(tc.auto_schedule([dX], trials=0), [c.W, Hd, dX])
    gx = np.zeros(c.xa.shape)
    f(np.ascontiguousarray(c.wa), np.ascontiguousarray(head if nchw else
                                                       head.transpose(0, 2, 3, 1)), gx)
    want = x.grad.numpy() if nchw else x.grad.numpy().transpose(0, 2, 3, 1)
    np.testing.assert_allclose(gx, want, rtol=1e-9, atol=1e-9)
    assert gradcheck(dX, [Hd, c.W])
    s2 = Conv(kind, nchw, 1, 4, 7, 7, 4, 3, 3, 2, 1, groups=4)
    dX2, = tc.gradient(s2.Y, [s2.X], tc.placeholder(s2.Y.shape, "float64", name="H"))
    assert f"depthwise_conv2d_{layout}" not in dX2.op.tag.split(",")


# (kind, N, C, H, W, stride, padding, dilation, groups): column strides 2 and 3 over
# odd widths (the right padding under the last lanes too), rows wider than a vector
# (a guarded tail), asymmetric padding, a dilation, a row stride alone, no padding,
# grouped NCHW rows (groups of 4 output channels)
STRIDED_NCHW = [("depthwise", 2, 3, 9, 9, 2, 1, 1, 3),
                ("depthwise", 1, 2, 11, 37, 2, (1, 2, 0, 1), 1, 2),
                ("depthwise", 1, 2, 8, 23, 3, "SAME", 1, 2),
                ("depthwise", 1, 2, 12, 19, 2, 2, 2, 2),
                ("depthwise", 1, 2, 9, 13, (2, 1), 1, 1, 2),
                ("depthwise", 1, 2, 9, 13, 2, 0, 1, 2),
                ("grouped", 2, 16, 9, 15, 2, 1, 1, 4)]


@pytest.mark.parametrize("case", STRIDED_NCHW,
                         ids=[f"{c[0]}-{k}" for k, c in enumerate(STRIDED_NCHW)])
def test_nchw_rows_strided_masked_loads(case, lanes, threads, monkeypatch):
    """The NCHW rows blocking with a column stride reads the taps that meet the padding
    (a lane mask) as masked wide loads and a shuffle (``pragma masked_wide_loads``,
    ``depthwise.STRIDED_MASKED_LOADS``), not a gather (x86); the same results with the
    switch off (the gathers), against PyTorch."""
    from tecomp.strategy.cpu import depthwise
    _diagonal(lanes, threads)
    kind, N, C, H, W, s, p, d, g = case
    c = Conv(kind, True, N, C, H, W, C, 3, 3, s, p, d, groups=g, dtype="float32")
    sched = cpu.schedule_depthwise_conv2d_nchw if kind == "depthwise" else \
        cpu.schedule_group_conv2d_nchw
    padded = c.pads[1] != (0, 0) or c.pads[0] != (0, 0)
    for on in (True, False):
        monkeypatch.setattr(depthwise, "STRIDED_MASKED_LOADS", on)
        s1 = sched(c.Y) if kind == "depthwise" else \
            sched(c.Y, config={"channel_blocks": False})
        low = str(tc.lower(s1, [c.X, c.W, c.Y]))
        taken = on and padded and _pair(s)[1] > 1
        assert ("pragma_masked_wide_loads" in low) == taken, low
        f = _build(s1, [c.X, c.W, c.Y])
        if taken and platform.machine() in ("x86_64", "AMD64"):
            assert "llvm.masked.gather" not in f.get_source("llvm-unopt")
        xa, wa = c.arrays()
        out = np.full(c.ref().shape, np.nan, "float32")
        f(xa, wa, out)
        np.testing.assert_allclose(out, c.ref(), rtol=1e-5, atol=1e-4)


def test_nchw_channel_blocks_leave_room_for_the_transposes(monkeypatch):
    """NCHW channel blocks stored through register transposes keep at most half the
    vector registers as accumulators (``grouped.NCHW_TRANSPOSE_ROOM``): ResNeXt's
    512x14x14 (groups of 16) and 1024x7x7 (groups of 32) one row of pixels, where the
    NHWC kernel's block takes two."""
    from tecomp.strategy.cpu import grouped
    from tecomp.target import CpuModel
    info = CpuModel(lanes=16, vregs=32, threads=2)
    for C, H, g, want in ((512, 14, 32, (16, 1, 14)), (1024, 7, 32, (32, 1, 7)),
                          (64, 6, 4, (16, 2, 6))):
        X = tc.placeholder((8, C, H, H), name="X")
        Y = nn.conv2d_nchw(X, tc.placeholder((C, C // g, 3, 3), name="W"), 1, 1, groups=g)
        p = group_conv2d_params(Y, info)
        assert p["channel_blocks"] and p["transpose_out"], p
        assert (p["ob"], p["yb"], p["xb"]) == want, (C, H, p)
        monkeypatch.setattr(grouped, "NCHW_TRANSPOSE_ROOM", False)
        assert group_conv2d_params(Y, info)["yb"] > want[1], (C, H)
        monkeypatch.setattr(grouped, "NCHW_TRANSPOSE_ROOM", True)


@pytest.mark.parametrize("room", [True, False])
def test_nchw_channel_blocks_with_room_match_torch(room, lanes, monkeypatch):
    """The blocks either way (rows of 6 pixels in groups of 16, a bias and a ReLU on
    the block: 2 rows where the NHWC kernel's block is 4; tails at the bottom), against
    PyTorch."""
    from tecomp.strategy.cpu import grouped
    monkeypatch.setattr(grouped, "NCHW_TRANSPOSE_ROOM", room)
    c = Conv("grouped", True, 2, 64, 7, 6, 64, 3, 3, 1, 1, groups=4, dtype="float32")
    b = tc.placeholder((64,), name="b")
    Z = nn.relu(nn.bias_add(c.Y, b, axis=1))
    f = _build(cpu.schedule_group_conv2d_nchw(Z), [c.X, c.W, b, Z])
    xa, wa = c.arrays()
    ba = RNG.standard_normal(64).astype("float32")
    out = np.full(c.ref().shape, np.nan, "float32")
    f(xa, wa, ba, out)
    np.testing.assert_allclose(out, np.maximum(c.ref() + ba[None, :, None, None], 0),
                               rtol=1e-5, atol=1e-4)


# (N, C, H, W, O, stride, padding, dilation, groups): groups of 8 and 4 output channels
# (ResNeXt's 256x28x28 and 128x56x56 shapes, small), odd planes, a stride, no padding, a
# dilation, input channels per group other than output ones, asymmetric padding
ROWS_FMA = [(2, 16, 9, 11, 16, 1, 1, 1, 2), (1, 32, 7, 13, 32, 2, 1, 1, 8),
            (1, 12, 6, 5, 24, 1, 0, 2, 3), (1, 16, 8, 9, 8, (1, 2), (1, 0, 0, 1), 1, 2)]


@pytest.mark.parametrize("case", ROWS_FMA, ids=[f"rows-fma-{k}" for k in range(len(ROWS_FMA))])
def test_grouped_nchw_rows_fuse_multiply_adds(case, lanes, monkeypatch):
    """The grouped NCHW rows blocking contracts each tap's multiply and add into an FMA
    (``pragma fp_contract``: the ``contract`` flag in the module; ``grouped.ROWS_FMA``),
    as the depthwise rows do; off, neither.  Both against PyTorch."""
    from tecomp.strategy.cpu import grouped
    N, C, H, W, O, s, p, d, g = case
    c = Conv("grouped", True, N, C, H, W, O, 3, 3, s, p, d, groups=g, dtype="float32")
    for on in (True, False):
        monkeypatch.setattr(grouped, "ROWS_FMA", on)
        s1 = cpu.schedule_group_conv2d_nchw(c.Y, config={"channel_blocks": False})
        low = str(tc.lower(s1, [c.X, c.W, c.Y]))
        assert ("pragma_fp_contract" in low) == on, low
        f = _build(s1, [c.X, c.W, c.Y])
        assert ("fmul contract" in f.get_source("llvm-unopt")) == on
        xa, wa = c.arrays()
        out = np.full(c.ref().shape, np.nan, "float32")
        f(xa, wa, out)
        np.testing.assert_allclose(out, c.ref(), rtol=1e-5, atol=1e-4)


# (N, C, H, W, O, stride, padding, dilation, groups): groups of 8 (2 to a 16-lane vector,
# 1 to an 8-lane one: channel blocks there) and of 4, odd planes, a stride, asymmetric
# padding, no padding, a dilation, input channels per group other than output ones
PLANE_TASKS = [(2, 64, 7, 9, 64, 1, 1, 1, 8), (1, 64, 9, 7, 128, (2, 1), (1, 0, 0, 1), 1, 16),
               (2, 32, 6, 11, 64, 1, 0, (1, 2), 16)]


@pytest.mark.parametrize("case", PLANE_TASKS, ids=[f"plane-{k}" for k in range(len(PLANE_TASKS))])
def test_grouped_nhwc_interleaved_plane_tasks(case, lanes, monkeypatch):
    """Interleaved NHWC groups narrower than a vector, 2 threads, a small batch: where
    the tasks of rows would be single rows (each input row copied 3 times; not with a
    row stride of 2: 1.5 times), a task is
    an image's block of groups over the whole plane (``grouped.PLANE_TASKS_ONE_VECTOR``:
    the parallel loop runs over the images' blocks, each copying its groups' padded
    plane); off, tasks of rows.  Both against PyTorch, with a bias and a ReLU."""
    from tecomp.strategy.cpu import grouped
    N, C, H, W, O, s, p, d, g = case
    c = Conv("grouped", False, N, C, H, W, O, 3, 3, s, p, d, groups=g, dtype="float32")
    b = tc.placeholder((O,), name="b")
    Z = nn.relu(nn.bias_add(c.Y, b, axis=3))
    old = tc.get_num_threads()
    tc.set_num_threads(2)
    try:
        info = cpu.cpu_model()
        P = O // g
        interleaved = _interleaves(c.Y, info) and P < lanes
        OH = c.ref().shape[1]
        for on in (True, False):
            monkeypatch.setattr(grouped, "PLANE_TASKS_ONE_VECTOR", on)
            s1 = cpu.schedule_group_conv2d_nhwc(Z)
            low = str(tc.lower(s1, [c.X, c.W, b, Z]))
            par = [l for l in low.splitlines() if "parallel" in l]
            assert par, low
            if interleaved:
                Q = lanes // P
                # (one row a task: 3 input rows copied for one output row, 1.5 per
                # row with a row stride of 2: rows kept there)
                plane = on and N * (g // Q) >= 8 and _pair(s)[0] == 1
                # (the tasks fuse the image with the output channels' blocks, or with
                # the rows; the stage's axes are the epilogue's, i0..i3)
                assert bool(re.search(r"\(i0\.i3\.outer\.fused", par[0])) == plane, par
                assert bool(re.search(r"\(i0\.i1\.fused", par[0])) == (not plane), par
                if plane:
                    assert f"0, {N * (O // lanes)})" in par[0], par
                else:
                    assert f"0, {N * OH})" in par[0], par
            _check_nhwc_bias_relu(c, _build(s1, [c.X, c.W, b, Z]))
    finally:
        tc.set_num_threads(old)


# (N, C, H, W, O, stride, padding, dilation, groups, KW): groups of 8 and 4 (one vector of
# 2 or 4 groups at 16 lanes; at 8 lanes groups of 4 too, groups of 8 are a whole vector:
# not this path), a width the pixel block leaves a tail of, a column stride, a dilation,
# asymmetric padding, no padding, a 1-, 5- and 9-column window
SHARED_TAPS = [(1, 32, 5, 31, 32, 1, 1, 1, 4, 3), (2, 64, 6, 13, 64, (1, 2), (1, 0, 2, 1), 1, 16, 3),
               (1, 32, 4, 9, 32, 1, (0, 2), 1, 4, 5), (1, 32, 3, 12, 32, 1, (0, 4), 1, 4, 9),
               pytest.param((1, 16, 7, 12, 32, 1, 0, (2, 2), 8, 3), marks=pytest.mark.slow),
               pytest.param((1, 32, 4, 9, 64, 1, 0, 1, 8, 1), marks=pytest.mark.slow)]


@pytest.mark.parametrize("case", SHARED_TAPS,
                         ids=[f"shared-taps-{k}" for k in range(len(SHARED_TAPS))])
def test_grouped_nhwc_interleaved_shares_tap_broadcasts(case, lanes, monkeypatch):
    """Interleaved NHWC groups narrower than a vector: the window's columns unrolled
    inside the input channel (``grouped.SHARE_TAP_BROADCASTS``: each input column's
    broadcast feeds the taps that read it, while the window's weight vectors leave half
    the registers), or outside it with the switch off; the same
    results against PyTorch either way, with a bias and a ReLU."""
    from tecomp.strategy.cpu import grouped
    N, C, H, W, O, s, p, d, g, kw = case
    c = Conv("grouped", False, N, C, H, W, O, 3, kw, s, p, d, groups=g, dtype="float32")
    info = cpu.cpu_model()
    one_vector = _interleaves(c.Y, info) and O // g < lanes
    b = tc.placeholder((O,), name="b")
    Z = nn.relu(nn.bias_add(c.Y, b, axis=3))
    for on in (True, False):
        monkeypatch.setattr(grouped, "SHARE_TAP_BROADCASTS", on)
        s1 = cpu.schedule_group_conv2d_nhwc(Z)
        low = str(tc.lower(s1, [c.X, c.W, b, Z]))
        # (not where the window's weight vectors would take over half the registers:
        # a 9-column window with AVX2's 16)
        shared = on and one_vector and 2 * (kw - 1) <= info.vregs - 4
        assert ("unrolled (kx" in low) == shared, low
        _check_nhwc_bias_relu(c, _build(s1, [c.X, c.W, b, Z]))
