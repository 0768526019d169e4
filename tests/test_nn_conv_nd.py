"""conv1d_ncw/nwc, conv3d_ncdhw/ndhwc and conv2d_transpose_nchw/nhwc against PyTorch
(torch.nn.functional.conv1d / conv3d / conv_transpose2d) over TOPI-like parameter lists:
strides, paddings (symmetric, asymmetric, TOPI's flat form, SAME/VALID), dilations, groups,
output_padding, both layouts, dtypes, odd shapes; their gradients through tc.gradient
against torch.autograd in float64 and with gradcheck; the auto-scheduler's CPU schedule
(the transpose's phases by the conv template) and the CUDA path in the emulation."""
import os

import numpy as np
import pytest

import tecomp as tc
from tecomp import autodiff as ad
from tecomp import nn
from tecomp.strategy import Knobs, apply_rules
from tecomp.nn._check import Args
from tecomp.nn.conv_grad import _phase_taps
from tecomp.strategy.cpu.conv3d import _conv3d_template
from tecomp.strategy.cpu import conv_nd as conv_nd_template
from tecomp.strategy.cpu.conv_nd import _conv1d_template, _interleave_by_phase, _row_vectors
from tecomp.target import cpu_model
from tecomp.testing.builds import BuildMemo

torch = pytest.importorskip("torch")
ml_dtypes = pytest.importorskip("ml_dtypes")
F = torch.nn.functional


#: the long matrices (TECOMP_LONG_TESTS=1); by default a part of each
LONG = os.environ.get("TECOMP_LONG_TESTS", "") not in ("", "0")
#: the kernels of this file's tests, each built once (tests of one operator that plan the
#: same kernel: the NCDHW template's rows of 14, the dcgan transpose's channel vectors)
_BUILDS = BuildMemo()


def _pairs(padding, nsp):
    """Any padding form (no strings) as (before, after) per spatial dimension."""
    if isinstance(padding, int):
        return [(padding, padding)] * nsp
    p = list(padding)
    if len(p) == nsp and all(isinstance(x, int) for x in p):
        return [(x, x) for x in p]
    if len(p) == nsp:
        return [tuple(x) for x in p]
    return [(p[i], p[nsp + i]) for i in range(nsp)]


def _torch_pad(x, pairs):
    flat = []
    for b, a in reversed(pairs):
        flat += [b, a]
    return F.pad(x, flat)


def _build(outs, args, auto=False, target="llvm"):
    s = tc.auto_schedule(args, target=target) if auto else tc.create_schedule(
        [t.op for t in outs])
    return _BUILDS.build(s, args, target=target)


def _run(f, arrays, out_shapes, dtype):
    outs = [np.empty(sh, dtype) for sh in out_shapes]
    f(*arrays, *outs)
    return outs


# channels-first data and weight -> the layout's
_TO = {
    "conv1d_ncw": (lambda x: x, lambda w: w, lambda y: y),
    "conv1d_nwc": (lambda x: x.transpose(0, 2, 1), lambda w: w.transpose(2, 1, 0),
                   lambda y: y.transpose(0, 2, 1)),
    "conv3d_ncdhw": (lambda x: x, lambda w: w, lambda y: y),
    "conv3d_ndhwc": (lambda x: x.transpose(0, 2, 3, 4, 1), lambda w: w.transpose(2, 3, 4, 1, 0),
                     lambda y: y.transpose(0, 4, 1, 2, 3)),
}

# (N, C, O, spatial, kernel, stride, padding, dilation, groups)
CONV1D = [
    (1, 3, 4, (17,), (3,), 1, 1, 1, 1),
    (2, 4, 6, (20,), (5,), 2, (1, 2), 1, 2),          # TOPI's flat (before, after)
    (2, 6, 6, (13,), (3,), 3, [(2, 0)], 2, 6),        # depthwise, asymmetric pair
    (1, 8, 4, (31,), (1,), 1, 0, 1, 1),
    (2, 3, 3, (16,), (4,), 2, "SAME", 1, 3),
    (1, 5, 10, (9,), (3,), 1, "VALID", 3, 5),
]
CONV3D = [
    (1, 3, 4, (5, 6, 7), (3, 3, 3), 1, 1, 1, 1),
    (2, 4, 6, (4, 7, 5), (2, 3, 1), (1, 2, 1), (0, 1, 0, 1, 2, 0), (1, 1, 2), 2),
    (1, 4, 4, (6, 5, 5), (3, 1, 3), 2, "SAME", 1, 4),
    (1, 2, 3, (3, 9, 8), (1, 3, 3), (1, 3, 2), [(0, 0), (1, 2), (2, 1)], (1, 2, 1), 1),
]


def _conv_nd_case(op, case, dtype="float64"):
    N, C, O, sp, k, stride, padding, dilation, g = case
    rng = np.random.default_rng(len(sp) * 100 + C)
    x = rng.standard_normal((N, C, *sp))
    w = rng.standard_normal((O, C // g, *k))
    nsp = len(sp)
    tx, tw = torch.from_numpy(x), torch.from_numpy(w)
    conv = F.conv1d if nsp == 1 else F.conv3d
    if isinstance(padding, str):
        want = conv(tx, tw, stride=stride, padding=padding.lower(), dilation=dilation,
                    groups=g) if padding == "VALID" or stride == 1 else None
        if want is None:   # torch's "same" takes no stride: TensorFlow's split by hand
            a = Args(op, op)
            st = (stride,) * nsp if isinstance(stride, int) else stride
            dl = (dilation,) * nsp if isinstance(dilation, int) else dilation
            pairs = a.padding(padding, sp, k, st, dl)
            want = conv(_torch_pad(tx, pairs), tw, stride=stride, dilation=dilation, groups=g)
    else:
        want = conv(_torch_pad(tx, _pairs(padding, nsp)), tw, stride=stride,
                    dilation=dilation, groups=g)
    fx, fw, back = _TO[op]
    xl, wl = np.ascontiguousarray(fx(x)), np.ascontiguousarray(fw(w))
    return (xl.astype(dtype), wl.astype(dtype)), want.numpy(), back


@pytest.mark.parametrize("op", ["conv1d_ncw", "conv1d_nwc"])
@pytest.mark.parametrize("case", CONV1D, ids=range(len(CONV1D)))
def test_conv1d_matches_torch(op, case):
    (x, w), want, back = _conv_nd_case(op, case)
    X, W = tc.placeholder(x.shape, "float64", "X"), tc.placeholder(w.shape, "float64", "W")
    _, _, _, _, _, stride, padding, dilation, g = case
    Y = getattr(nn, op)(X, W, stride, padding, dilation, groups=g)
    (y,) = _run(_build([Y], [X, W, Y]), [x, w], [tc.utils.get_const_tuple(Y.shape)], "float64")
    np.testing.assert_allclose(back(y), want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("op", ["conv3d_ncdhw", "conv3d_ndhwc"])
@pytest.mark.parametrize("case", CONV3D, ids=range(len(CONV3D)))
def test_conv3d_matches_torch(op, case):
    (x, w), want, back = _conv_nd_case(op, case)
    X, W = tc.placeholder(x.shape, "float64", "X"), tc.placeholder(w.shape, "float64", "W")
    _, _, _, _, _, stride, padding, dilation, g = case
    Y = getattr(nn, op)(X, W, stride, padding, dilation, groups=g)
    (y,) = _run(_build([Y], [X, W, Y]), [x, w], [tc.utils.get_const_tuple(Y.shape)], "float64")
    np.testing.assert_allclose(back(y), want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("op,case", [("conv1d_ncw", CONV1D[1]), ("conv1d_nwc", CONV1D[0]),
                                     ("conv3d_ncdhw", CONV3D[0]), ("conv3d_ndhwc", CONV3D[1])])
def test_conv_nd_auto_schedule_float32(op, case):
    (x, w), want, back = _conv_nd_case(op, case, "float32")
    X, W = tc.placeholder(x.shape, name="X"), tc.placeholder(w.shape, name="W")
    _, _, _, _, _, stride, padding, dilation, g = case
    Y = getattr(nn, op)(X, W, stride, padding, dilation, groups=g)
    (y,) = _run(_build([Y], [X, W, Y], auto=True), [x, w],
                [tc.utils.get_const_tuple(Y.shape)], "float32")
    np.testing.assert_allclose(back(y), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("op", ["conv1d_ncw", "conv3d_ndhwc"])
def test_conv_nd_half_sums_in_float32(op, dtype):
    case = CONV1D[1] if op == "conv1d_ncw" else CONV3D[0]
    _, _, _, _, _, stride, padding, dilation, g = case
    (x, w), _, _ = _conv_nd_case(op, case, "float32")
    half = np.float16 if dtype == "float16" else ml_dtypes.bfloat16
    xh, wh = x.astype(half), w.astype(half)
    X, W = tc.placeholder(x.shape, dtype, "X"), tc.placeholder(w.shape, dtype, "W")
    Y = getattr(nn, op)(X, W, stride, padding, dilation, groups=g)
    assert Y.dtype == dtype and Y.op.input_tensors[0].dtype == "float32"
    Y32 = getattr(nn, op)(X, W, stride, padding, dilation, groups=g, out_dtype="float32")
    assert Y32.dtype == "float32"
    shape = tc.utils.get_const_tuple(Y.shape)
    y, y32 = np.empty(shape, half), np.empty(shape, "float32")
    _build([Y, Y32], [X, W, Y, Y32])(xh, wh, y, y32)
    # the reference: the half inputs summed in float64
    Xr, Wr = tc.placeholder(x.shape, "float64", "X"), tc.placeholder(w.shape, "float64", "W")
    Yr = getattr(nn, op)(Xr, Wr, stride, padding, dilation, groups=g)
    (want,) = _run(_build([Yr], [Xr, Wr, Yr]), [xh.astype("float64"), wh.astype("float64")],
                   [shape], "float64")
    np.testing.assert_allclose(y32, want, rtol=1e-5, atol=1e-4)
    # one rounding of the float32 sum
    np.testing.assert_array_equal(y, y32.astype(half))


# (N, C_in, C_out, H, W, kernel, stride, padding, output_padding, dilation, groups)
TRANSPOSE = [
    (2, 4, 6, 7, 8, (3, 3), 2, 1, 0, 1, 1),
    (1, 4, 6, 5, 5, (4, 4), 2, 1, 1, 1, 1),
    (1, 6, 4, 5, 6, (3, 2), (2, 3), (1, 0), (1, 2), (2, 1), 1),
    (2, 3, 5, 4, 4, (3, 3), 1, 1, 0, 1, 1),
    (1, 4, 4, 5, 5, (3, 3), 1, 0, (1, 0), 2, 2),         # output_padding < dilation
    (1, 4, 6, 6, 5, (4, 3), 3, ((2, 1), (0, 2)), 2, 1, 1),   # asymmetric padding
    (2, 6, 4, 4, 3, (2, 2), 2, 0, 0, 1, 2),              # grouped, a U-Net up-conv
    (1, 16, 16, 5, 5, (3, 3), 2, 1, 1, 1, 16),           # depthwise
    (1, 20, 8, 3, 3, (1, 1), 2, 0, 1, 1, 1),             # 1x1
    (1, 16, 6, 4, 5, (3, 3), 2, (1, 2), 1, 1, 2),        # groups of 8: one per group
    (2, 8, 6, 3, 4, (2, 2), 2, 0, 0, 1, 1),              # kernel = stride: one GEMM
    (1, 4, 3, 3, 5, (2, 3), (2, 3), 0, 0, 1, 1),
]


def _transpose_case(case, nchw, dtype="float64"):
    N, C, O, H, W_, k, s, p, op, d, g = case
    rng = np.random.default_rng(C * 10 + O)
    x = rng.standard_normal((N, C, H, W_))
    w = rng.standard_normal((C, O // g, *k))
    pairs = _pairs(p, 2)
    # torch takes symmetric padding: the rest cut from the larger output
    sym = [min(b, a) for b, a in pairs]
    want = F.conv_transpose2d(torch.from_numpy(x), torch.from_numpy(w), stride=s,
                              padding=sym, output_padding=op, dilation=d, groups=g).numpy()
    cut = [(b - m, a - m) for (b, a), m in zip(pairs, sym)]
    want = want[:, :, cut[0][0]:want.shape[2] - cut[0][1], cut[1][0]:want.shape[3] - cut[1][1]]
    if not nchw:
        x, w = x.transpose(0, 2, 3, 1), w.transpose(2, 3, 1, 0)
    return (np.ascontiguousarray(x, dtype), np.ascontiguousarray(w, dtype)), want


def _transpose(X, W, case, nchw, **kw):
    _, _, _, _, _, _, s, p, op, d, g = case
    fn = nn.conv2d_transpose_nchw if nchw else nn.conv2d_transpose_nhwc
    return fn(X, W, s, p, op, d, g, **kw)


def _nchw(y, nchw):
    return y if nchw else y.transpose(0, 3, 1, 2)


@pytest.mark.parametrize("nchw", [True, False], ids=["nchw", "nhwc"])
@pytest.mark.parametrize("case", TRANSPOSE, ids=range(len(TRANSPOSE)))
def test_conv2d_transpose_matches_torch(case, nchw):
    (x, w), want = _transpose_case(case, nchw)
    X, W = tc.placeholder(x.shape, "float64", "X"), tc.placeholder(w.shape, "float64", "W")
    Y = _transpose(X, W, case, nchw)
    (y,) = _run(_build([Y], [X, W, Y]), [x, w], [tc.utils.get_const_tuple(Y.shape)], "float64")
    np.testing.assert_allclose(_nchw(y, nchw), want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("case", [TRANSPOSE[0], TRANSPOSE[2], TRANSPOSE[6], TRANSPOSE[9],
                                  TRANSPOSE[10]],
                         ids=["stride2", "asymmetric", "grouped", "per_group", "tiles"])
def test_conv2d_transpose_auto_schedule_float32(case):
    """The trials=0 schedule: the phases by the conv template (strategy/cpu/conv_nd.py)."""
    (x, w), want = _transpose_case(case, True, "float32")
    X, W = tc.placeholder(x.shape, name="X"), tc.placeholder(w.shape, name="W")
    Y = _transpose(X, W, case, True)
    (y,) = _run(_build([Y], [X, W, Y], auto=True), [x, w],
                [tc.utils.get_const_tuple(Y.shape)], "float32")
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("nchw", [True, False], ids=["nchw", "nhwc"])
def test_conv2d_transpose_kernel_equal_to_stride_is_one_gemm(nchw):
    case = TRANSPOSE[10]
    (x, w), want = _transpose_case(case, nchw, "float32")
    X, W = tc.placeholder(x.shape, name="X"), tc.placeholder(w.shape, name="W")
    Y = _transpose(X, W, case, nchw)
    assert "conv2d_transpose_tiles" in Y.op.tag
    assert Y.op.input_tensors[0].op.tag == "matmul"
    (y,) = _run(_build([Y], [X, W, Y], auto=True), [x, w],
                [tc.utils.get_const_tuple(Y.shape)], "float32")
    np.testing.assert_allclose(_nchw(y, nchw), want, rtol=1e-4, atol=1e-4)
    Xh, Wh = tc.placeholder(x.shape, "float16", "X"), tc.placeholder(w.shape, "float16", "W")
    Yh = _transpose(Xh, Wh, case, nchw)
    assert Yh.dtype == "float16" and Yh.op.input_tensors[0].op.input_tensors[0].dtype \
        == "float32"


def test_conv2d_transpose_phases_get_the_conv_template():
    # (a Skylake-AVX512's schedule whatever CPU runs the test: on Zen 4, whose split
    # loads cost nothing, the NHWC phases read their small weights in place, no copy)
    X, W = tc.placeholder((1, 32, 8, 8), name="X"), tc.placeholder((32, 16, 4, 4), name="W")
    Y = nn.conv2d_transpose_nchw(X, W, 2, 1)
    s = apply_rules([X, W, Y], Knobs({}), cpu_model("llvm -mcpu=skylake-avx512"))
    convs = [st for st in s.stages if {"conv2d_nchw", "conv2d_nhwc"} & set(
        (st.op.tag or "").split(",")) and st.attach_type == "root"]
    assert len(convs) == 4
    # the conv template copies each phase's (flipped) weights into its blocked layout;
    # the generic rules would compute the flips in place
    copies = [st for st in s.stages if st.op.name.startswith("W.flip.p")
              and st.op.name.endswith(".global")]
    assert len(copies) == 4


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("case", [TRANSPOSE[0], TRANSPOSE[1], TRANSPOSE[2], TRANSPOSE[5],
                                  TRANSPOSE[8], (1, 4, 3, 3, 5, (3, 4), (2, 3), 1, 0, 1, 1)],
                         ids=["odd_sizes", "output_padding", "strides_2_3_dilated",
                              "stride3_asymmetric", "phases_without_taps", "strides_2_3"])
def test_conv2d_transpose_interleave_by_phase(case, dtype):
    """The NCHW phases' interleave stored phase by phase (each phase's row as vectors,
    every stride-th output element): odd output sizes (a last row or column that not
    every phase reaches), strides 2 and 3 and mixed, output_padding, dilation, phases
    that no tap reaches (zeros), against PyTorch."""
    (x, w), want = _transpose_case(case, True, dtype)
    X, W = tc.placeholder(x.shape, dtype, "X"), tc.placeholder(w.shape, dtype, "W")
    Y = _transpose(X, W, case, True)
    stride = case[6]
    assert Y.op.attrs["phases"] == ((stride, stride) if isinstance(stride, int) else stride)
    s = tc.create_schedule(Y.op)
    _interleave_by_phase(s, Y, cpu_model())
    assert s[Y].relations
    (y,) = _run(_BUILDS.build(s, [X, W, Y]), [x, w], [tc.utils.get_const_tuple(Y.shape)], dtype)
    tol = 1e-10 if dtype == "float64" else 1e-4
    np.testing.assert_allclose(y, want, rtol=tol, atol=tol)


def test_conv2d_transpose_interleave_by_phase_in_the_template():
    """auto_schedule stores the phases of a batched NCHW transposed convolution phase by
    phase (``template.phases.interleave``; "rules" leaves the interleave to the rules)
    and inlines each phase's flipped weights into the convolution that reads them
    (``template.phases.flip``; "root": a stage of their own); a symbolic batch too; the
    NHWC interleave (vectors across channels already) and an NCHW one of NHWC phases
    (it transposes them) carry no ``phases``.  (The schedule of
    an AVX-512 CPU, whose masks the conv template wants, whatever CPU runs it.)"""
    n = tc.var("n")
    rng = np.random.default_rng(8)
    x, w = rng.standard_normal((2, 32, 7, 6)), rng.standard_normal((32, 8, 4, 4))
    want = F.conv_transpose2d(torch.from_numpy(x), torch.from_numpy(w), stride=2,
                              padding=1, output_padding=1).numpy()
    for batch in (2, n):
        X, W = tc.placeholder((batch, 32, 7, 6), name="X"), tc.placeholder((32, 8, 4, 4),
                                                                          name="W")
        Y = nn.conv2d_transpose_nchw(X, W, 2, 1, 1)
        assert Y.op.attrs["phases"] == (2, 2)
        for knobs in ({}, {"template.phases.interleave": "rules"},
                      {"template.phases.flip": "root"}):
            s = apply_rules([X, W, Y], Knobs(knobs), cpu_model("llvm -mcpu=znver4"))
            # (the rows split by phase: the rules keep the output's rows whole)
            rows = [iv.var.name for iv in s[Y].leaf_iter_vars if iv.var.name.startswith("i2")]
            by_rules = "template.phases.interleave" in knobs
            assert rows == (["i2"] if by_rules else ["i2.outer", "i2.inner"]), (knobs, rows)
            flips = {st.op.name: st.attach_type for st in s.stages
                     if "conv2d_weight_flip" in st.op.tag}
            assert len(flips) == 4 and set(flips.values()) == {
                "root" if "template.phases.flip" in knobs else "inline"}, (knobs, flips)
            y = np.empty((2, 8, 15, 13), "float32")
            _BUILDS.build(s, [X, W, Y])(x.astype("float32"), w.astype("float32"), y)
            np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)
    Xh = tc.placeholder((2, 6, 6, 32), name="X")
    Wh = tc.placeholder((4, 4, 16, 32), name="W")
    assert "phases" not in nn.conv2d_transpose_nhwc(Xh, Wh, 2, 1).op.attrs
    # 16 output channels on 4-wide phases, 32 input channels: NHWC phases (narrow)
    Xn, Wn = tc.placeholder((1, 32, 4, 4), name="X"), tc.placeholder((32, 16, 4, 4), name="W")
    Yn = nn.conv2d_transpose_nchw(Xn, Wn, 2, 1)
    assert any("conv2d_nhwc" in t.op.tag for t in Yn.op.input_tensors)
    assert "phases" not in Yn.op.attrs
    # (NHWC phases keep their flipped weights a stage: their blocks may read its
    # vectors in place)
    s = apply_rules([Xn, Wn, Yn], Knobs({}), cpu_model("llvm -mcpu=znver4"))
    assert {st.attach_type for st in s.stages if "conv2d_weight_flip" in st.op.tag} == \
        {"root"}


def test_conv2d_transpose_channel_vector_phases_transpose_their_kept_flips():
    """Phases with vectors across output channels copy each block's weights across
    them: from their flipped weights kept a root stage (``conv2d_tasks._flip_kept``),
    in 16x16 register transposes, not a strided gather from the source per vector (the
    flip inlined into the copy), where the phases' flips are not packed in one pass
    (``template.phases.pack``: "per_phase").  Skylake-AVX512's schedule, run where it
    runs."""
    target = "llvm -mcpu=skylake-avx512"
    X, W = tc.placeholder((2, 256, 4, 4), name="X"), tc.placeholder((256, 32, 4, 4), name="W")
    Y = nn.conv2d_transpose_nchw(X, W, 2, 1)
    s = apply_rules([X, W, Y], Knobs({"template.phases.pack": "per_phase"}), cpu_model(target))
    flips = {st.op.name: st.attach_type for st in s.stages
             if "conv2d_weight_flip" in st.op.tag}
    assert len(flips) == 4 and set(flips.values()) == {"root"}, flips
    ir = str(tc.lower(s, [X, W, Y]))
    assert ir.count("tensorize x86.transpose_f32_16x16") == 4
    if tc.Target(target).runs_here() is not None:
        return
    rng = np.random.default_rng(9)
    x, w = rng.standard_normal((2, 256, 4, 4)), rng.standard_normal((256, 32, 4, 4))
    y = np.empty((2, 32, 8, 8), "float32")
    _BUILDS.build(s, [X, W, Y], target=target)(x.astype("float32"), w.astype("float32"), y)
    want = F.conv_transpose2d(torch.from_numpy(x), torch.from_numpy(w), stride=2,
                              padding=1).numpy()
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("case", [
    (2, 256, 32, 4, 4, (4, 4), 2, 1, 0, 1, 1),
    (2, 256, 32, 5, 3, (4, 4), 2, 1, 0, 1, 1),
    (1, 256, 32, 4, 4, (4, 4), 2, 1, 1, 1, 1),
    (1, 256, 32, 4, 4, (5, 5), 3, 1, 0, 1, 1),
    (1, 256, 32, 4, 4, (4, 5), (2, 3), 1, 0, 1, 1),
], ids=["dcgan", "odd_sizes", "output_padding", "stride3", "strides_2_3"])
def test_conv2d_transpose_channel_vector_phases_pack_their_weights_once(case):
    """Channel-vector phases whose flips the template would keep a stage each (a pass
    over all the weights per phase) read one copy of the weights stored [KH, KW, O, C]
    instead (``conv_nd._pack_flip_source``, knob ``template.phases.pack``: "once"), made
    in one pass (16x16 register transposes where the taps and channels fill them), the
    flips inlined into the phases' copies; "per_phase" keeps them.  Odd sizes, stride 3
    and mixed strides (windows of 25 and 20 taps: no transposes), output_padding; the
    schedule of Skylake-AVX512, run where it runs, against PyTorch."""
    target = "llvm -mcpu=skylake-avx512"
    N, C, O, H, W_, k, stride, p, op, d, g = case
    (x, w), want = _transpose_case(case, True, "float32")
    X, W = tc.placeholder(x.shape, name="X"), tc.placeholder(w.shape, name="W")
    Y = nn.conv2d_transpose_nchw(X, W, stride, p, op, d, g)
    runs = tc.Target(target).runs_here() is None
    for pack in ("once", "per_phase"):
        s = apply_rules([X, W, Y], Knobs({"template.phases.pack": pack}), cpu_model(target))
        flips = {st.attach_type for st in s.stages if "conv2d_weight_flip" in st.op.tag}
        packs = [st for st in s.stages if st.op.name == "W.global"]
        # (with "per_phase", phases of a 1-tap row or column may inline their flips)
        assert len(packs) == (pack == "once") and ("root" in flips) == (pack == "per_phase")
        if pack == "once":
            ir = str(tc.lower(s, [X, W, Y]))
            assert ir.count("tensorize x86.transpose_f32_16x16") == (k[0] * k[1] % 16 == 0)
        if runs:
            y = np.empty(want.shape, "float32")
            _BUILDS.build(s, [X, W, Y], target=target)(x, w, y)
            np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-3)


def test_conv2d_transpose_pack_needs_two_kept_flips():
    """No packed copy of the weights where the template keeps no flip (here, with a
    symbolic batch) or just one (a dilation that lands every tap on one phase): the one
    pass would add to, not replace, the flips' passes."""
    target = cpu_model("llvm -mcpu=skylake-avx512")
    for batch, k, d in ((tc.var("n"), (4, 4), 1), (1, (3, 3), 2)):
        X = tc.placeholder((batch, 256, 4, 4), name="X")
        W = tc.placeholder((256, 32, *k), name="W")
        Y = nn.conv2d_transpose_nchw(X, W, 2, 1, 1 if d == 2 else 0, d)
        s = apply_rules([X, W, Y], Knobs({}), target)
        assert not [st for st in s.stages if st.op.name == "W.global"]
        kept = [st for st in s.stages
                if "conv2d_weight_flip" in st.op.tag and st.attach_type == "root"]
        assert len(kept) == (1 if d == 2 else 0)


def test_conv2d_transpose_symbolic_batch_and_dtypes():
    n = tc.var("n")
    X, W = tc.placeholder((n, 4, 5, 5), name="X"), tc.placeholder((4, 3, 3, 3), name="W")
    Y = nn.conv2d_transpose_nchw(X, W, 2, 1, 1)
    assert tc.utils.get_const_tuple(Y.shape[1:]) == (3, 10, 10)
    f = _build([Y], [X, W, Y], auto=True)
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((3, 4, 5, 5)), rng.standard_normal((4, 3, 3, 3))
    y = np.empty((3, 3, 10, 10), "float32")
    f(x.astype("float32"), w.astype("float32"), y)
    want = F.conv_transpose2d(torch.from_numpy(x), torch.from_numpy(w), stride=2, padding=1,
                              output_padding=1).numpy()
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)
    Xh, Wh = tc.placeholder((n, 4, 5, 5), "float16", "X"), tc.placeholder((4, 3, 3, 3),
                                                                          "float16", "W")
    Yh = nn.conv2d_transpose_nchw(Xh, Wh, 2, 1, 1)
    assert Yh.dtype == "float16"
    assert any(t.dtype == "float32" for t in Yh.op.input_tensors)
    assert nn.conv2d_transpose_nchw(Xh, Wh, 2, out_dtype="float32").dtype == "float32"


@pytest.mark.parametrize("which", ["conv3d_ndhwc", "transpose_per_group"])
def test_symbolic_batch(which):
    n = tc.var("n")
    rng = np.random.default_rng(3)
    if which == "conv3d_ndhwc":
        X, W = tc.placeholder((n, 4, 5, 6, 4), name="X"), tc.placeholder((3, 3, 3, 2, 6),
                                                                          name="W")
        Y = nn.conv3d_ndhwc(X, W, (1, 2, 1), "SAME", groups=2)
        x, w = rng.standard_normal((2, 4, 5, 6, 4)), rng.standard_normal((3, 3, 3, 2, 6))
        a = Args("conv3d_ndhwc", "t")
        pairs = a.padding("SAME", (4, 5, 6), (3, 3, 3), (1, 2, 1), (1, 1, 1))
        want = F.conv3d(_torch_pad(torch.from_numpy(x.transpose(0, 4, 1, 2, 3)), pairs),
                        torch.from_numpy(w.transpose(4, 3, 0, 1, 2)), stride=(1, 2, 1),
                        groups=2).numpy().transpose(0, 2, 3, 4, 1)
    else:
        X, W = tc.placeholder((n, 16, 4, 5), name="X"), tc.placeholder((16, 3, 3, 3),
                                                                       name="W")
        Y = nn.conv2d_transpose_nchw(X, W, 2, 1, 1, groups=2)
        x, w = rng.standard_normal((2, 16, 4, 5)), rng.standard_normal((16, 3, 3, 3))
        want = F.conv_transpose2d(torch.from_numpy(x), torch.from_numpy(w), stride=2,
                                  padding=1, output_padding=1, groups=2).numpy()
    f = _build([Y], [X, W, Y], auto=True)
    y = np.empty(want.shape, "float32")
    f(x.astype("float32"), w.astype("float32"), y)
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)


def test_conv1d_symbolic_batch():
    n = tc.var("n")
    X, W = tc.placeholder((n, 3, 12), name="X"), tc.placeholder((5, 3, 3), name="W")
    Y = nn.conv1d_ncw(X, W, 2, 1)
    f = _build([Y], [X, W, Y], auto=True)
    rng = np.random.default_rng(2)
    x, w = rng.standard_normal((4, 3, 12)), rng.standard_normal((5, 3, 3))
    y = np.empty((4, 5, 6), "float32")
    f(x.astype("float32"), w.astype("float32"), y)
    want = F.conv1d(torch.from_numpy(x), torch.from_numpy(w), stride=2, padding=1).numpy()
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)


# -- gradients ------------------------------------------------------------------------


def _torch_grads(fn, x, w, head):
    tx = torch.from_numpy(np.array(x)).requires_grad_()
    tw = torch.from_numpy(np.array(w)).requires_grad_()
    y = fn(tx, tw)
    y.backward(torch.from_numpy(head))
    return y.detach().numpy(), tx.grad.numpy(), tw.grad.numpy()


def _tc_grads(Y, X, W, x, w, head):
    Hd = tc.placeholder(Y.shape, "float64", "Hd")
    gX, gW = tc.gradient(Y, [X, W], head=Hd)
    f = _BUILDS.build(tc.schedule_backward([Y, gX, gW]), [X, W, Hd, Y, gX, gW])
    outs = [np.empty(tc.utils.get_const_tuple(t.shape), "float64") for t in (Y, gX, gW)]
    f(x, w, head, *outs)
    return outs


@pytest.mark.parametrize("op,case", [("conv1d_ncw", CONV1D[1]), ("conv1d_nwc", CONV1D[2]),
                                     ("conv3d_ncdhw", CONV3D[1]), ("conv3d_ndhwc", CONV3D[0]),
                                     # (NCDHW's sum leaves out the padded columns too)
                                     ("conv3d_ncdhw", CONV3D[3])])
def test_conv_nd_gradients_match_torch(op, case):
    N, C, O, sp, k, stride, padding, dilation, g = case
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal((N, C, *sp)), rng.standard_normal((O, C // g, *k))
    conv = F.conv1d if len(sp) == 1 else F.conv3d
    pairs = _pairs(padding, len(sp))
    want_y = conv(_torch_pad(torch.from_numpy(x), pairs), torch.from_numpy(w), stride=stride,
                  dilation=dilation, groups=g).numpy()
    head = rng.standard_normal(want_y.shape)
    y0, gx0, gw0 = _torch_grads(lambda a, b: conv(_torch_pad(a, pairs), b, stride=stride,
                                                  dilation=dilation, groups=g), x, w, head)
    fx, fw, back = _TO[op]
    xl, wl = np.ascontiguousarray(fx(x)), np.ascontiguousarray(fw(w))
    X, W = tc.placeholder(xl.shape, "float64", "X"), tc.placeholder(wl.shape, "float64", "W")
    Y = getattr(nn, op)(X, W, stride, padding, dilation, groups=g)
    hl = np.ascontiguousarray(fx(head))
    y, gx, gw = _tc_grads(Y, X, W, xl, wl, hl)
    np.testing.assert_allclose(back(y), y0, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(gx, np.ascontiguousarray(fx(gx0)), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(gw, np.ascontiguousarray(fw(gw0)), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("nchw", [True, False], ids=["nchw", "nhwc"])
@pytest.mark.parametrize("case", [TRANSPOSE[0], TRANSPOSE[2], TRANSPOSE[4], TRANSPOSE[6],
                                  TRANSPOSE[9], TRANSPOSE[11]],
                         ids=["stride2", "asymmetric", "dilation", "grouped", "per_group",
                              "tiles"])
def test_conv2d_transpose_gradients_match_torch(case, nchw):
    if not LONG and nchw != (case in (TRANSPOSE[0], TRANSPOSE[2], TRANSPOSE[4])):
        pytest.skip("each case in one layout by default (the first three NCHW, the others "
                    "NHWC): set TECOMP_LONG_TESTS=1 for both")
    N, C, O, H, W_, k, s, p, op, d, g = case
    (x, w), want = _transpose_case(case, nchw)
    rng = np.random.default_rng(6)
    head_nchw = rng.standard_normal(want.shape)
    pairs = _pairs(p, 2)
    sym = [min(b, a) for b, a in pairs]
    cut = [(b - m, a - m) for (b, a), m in zip(pairs, sym)]

    def fn(a, b):
        if not nchw:
            a, b = a.permute(0, 3, 1, 2), b.permute(3, 2, 0, 1)
        y = F.conv_transpose2d(a, b, stride=s, padding=sym, output_padding=op, dilation=d,
                               groups=g)
        return y[:, :, cut[0][0]:y.shape[2] - cut[0][1], cut[1][0]:y.shape[3] - cut[1][1]]

    y0, gx0, gw0 = _torch_grads(fn, x, w, head_nchw)
    X, W = tc.placeholder(x.shape, "float64", "X"), tc.placeholder(w.shape, "float64", "W")
    Y = _transpose(X, W, case, nchw)
    head = head_nchw if nchw else np.ascontiguousarray(head_nchw.transpose(0, 2, 3, 1))
    y, gx, gw = _tc_grads(Y, X, W, x, w, head)
    np.testing.assert_allclose(_nchw(y, nchw), y0, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(gx, gx0, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(gw, gw0, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("which", ["conv1d", "conv3d", "transpose", "transpose_grouped"])
def test_gradcheck(which):
    if which == "conv1d":
        X, W = tc.placeholder((2, 4, 9), name="X"), tc.placeholder((4, 2, 3), name="W")
        Y = nn.conv1d_ncw(X, W, 2, (1, 2), 2, groups=2)
    elif which == "conv3d":
        X = tc.placeholder((1, 4, 5, 4, 2), name="X")
        W = tc.placeholder((2, 3, 2, 1, 2), name="W")
        Y = nn.conv3d_ndhwc(X, W, (1, 2, 1), 1, 1, groups=2)
    elif which == "transpose":
        X, W = tc.placeholder((1, 3, 4, 5), name="X"), tc.placeholder((3, 2, 3, 3), name="W")
        Y = nn.conv2d_transpose_nchw(X, W, 2, (1, 0), 1)
    else:
        X, W = tc.placeholder((1, 4, 3, 3), name="X"), tc.placeholder((4, 1, 2, 3), name="W")
        Y = nn.conv2d_transpose_nchw(X, W, (2, 1), 0, 0, 1, groups=2)
    assert ad.gradcheck(Y, [X, W])


# -- CUDA, in the emulation -------------------------------------------------------------


@pytest.mark.parametrize("which", ["conv1d", pytest.param("conv3d", marks=pytest.mark.skipif(
    not LONG, reason="conv3d in the CUDA emulation compiles for 12 s: set "
    "TECOMP_LONG_TESTS=1")), "transpose", "tiles"])
def test_cuda_emulation(which):
    rng = np.random.default_rng(7)
    if which == "conv1d":
        X, W = tc.placeholder((2, 4, 20), name="X"), tc.placeholder((6, 2, 3), name="W")
        Y = nn.conv1d_ncw(X, W, 2, 1, groups=2)
        x, w = rng.standard_normal((2, 4, 20)), rng.standard_normal((6, 2, 3))
        want = F.conv1d(torch.from_numpy(x), torch.from_numpy(w), stride=2, padding=1,
                        groups=2).numpy()
    elif which == "conv3d":
        X, W = tc.placeholder((1, 3, 4, 6, 6), name="X"), tc.placeholder((4, 3, 3, 3, 3),
                                                                          name="W")
        Y = nn.conv3d_ncdhw(X, W, 1, 1)
        x, w = rng.standard_normal((1, 3, 4, 6, 6)), rng.standard_normal((4, 3, 3, 3, 3))
        want = F.conv3d(torch.from_numpy(x), torch.from_numpy(w), padding=1).numpy()
    elif which == "transpose":
        X, W = tc.placeholder((1, 4, 5, 5), name="X"), tc.placeholder((4, 3, 4, 4), name="W")
        Y = nn.conv2d_transpose_nchw(X, W, 2, 1)
        x, w = rng.standard_normal((1, 4, 5, 5)), rng.standard_normal((4, 3, 4, 4))
        want = F.conv_transpose2d(torch.from_numpy(x), torch.from_numpy(w), stride=2,
                                  padding=1).numpy()
    else:
        X, W = tc.placeholder((2, 8, 3, 5), name="X"), tc.placeholder((8, 4, 2, 2), name="W")
        Y = nn.conv2d_transpose_nchw(X, W, 2)
        x, w = rng.standard_normal((2, 8, 3, 5)), rng.standard_normal((8, 4, 2, 2))
        want = F.conv_transpose2d(torch.from_numpy(x), torch.from_numpy(w), stride=2).numpy()
    f = _build([Y], [X, W, Y], auto=True, target="cuda-emu")
    y = np.empty(tc.utils.get_const_tuple(Y.shape), "float32")
    f(x.astype("float32"), w.astype("float32"), y)
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape,stride,padding", [
    ((2, 8, 24, 37), 1, 0), ((1, 16, 40, 81), 2, 1), ((3, 4, 6, 20), 3, (2, 1))])
def test_conv1d_ncw_template(shape, stride, padding):
    """The conv1d_ncw template (a row that ends in a partial block): taken, and right."""
    N, C, O, L = shape
    X, W = tc.placeholder((N, C, L), name="X"), tc.placeholder((O, C, 3), name="W")
    Y = nn.conv1d_ncw(X, W, stride, padding)
    assert _conv1d_template([Y], Knobs(), cpu_model()) is not None
    rng = np.random.default_rng(8)
    x, w = rng.standard_normal((N, C, L)), rng.standard_normal((O, C, 3))
    (y,) = _run(_build([Y], [X, W, Y], auto=True), [x.astype("float32"), w.astype("float32")],
                [tc.utils.get_const_tuple(Y.shape)], "float32")
    pairs = _pairs(padding if isinstance(padding, int) else [padding], 1)
    want = F.conv1d(_torch_pad(torch.from_numpy(x), pairs), torch.from_numpy(w),
                    stride=stride).numpy()
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape,k,stride,padding,dilation,dtype", [
    ((1, 1, 16, 80), 10, 5, 0, 1, "float32"),        # wav2vec2's first layer, small
    ((2, 3, 8, 61), 4, 3, 1, 1, "float32"),          # the padding read through the copy
    ((1, 2, 5, 40), 5, 4, 0, 2, "float64"),          # dilated: taps across phases
    ((None, 1, 4, 50), 5, 5, 0, 1, "float32"),       # a symbolic batch
    ((1, 6, 20, 37), 3, 2, 0, 1, "float32"),         # wav2vec2's later layers: an odd row
    ((2, 3, 8, 45), 4, 3, (2, 0), 1, "float32"),     # padded to 47: a partial last block
], ids=["wav2vec2", "padded", "dilated_f64", "symbolic", "odd_s2", "odd_padded_s3"])
def test_conv1d_strided_row_copied_by_phase(shape, k, stride, padding, dilation, dtype):
    """A stride of 2 or more: the template copies the data row de-interleaved by phase
    (rounded up to whole phases where the stride does not divide the padded row), the
    block's loads contiguous; right values."""
    N, C, O, L = shape
    X = tc.placeholder((tc.var("n") if N is None else N, C, L), dtype, "X")
    W = tc.placeholder((O, C, k), dtype, "W")
    Y = nn.conv1d_ncw(X, W, stride, padding, dilation)
    assert _conv1d_template([Y], Knobs(), cpu_model()) is not None
    s = tc.auto_schedule([X, W, Y])
    text = str(tc.lower(s, [X, W, Y]))
    assert ".global: " + dtype in text, text      # the copy, [n, c, stride, L / stride]
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal((N or 3, C, L)), rng.standard_normal((O, C, k))
    pairs = _pairs(padding if isinstance(padding, int) else [padding], 1)
    want = F.conv1d(_torch_pad(torch.from_numpy(x), pairs), torch.from_numpy(w), stride=stride,
                    dilation=dilation).numpy()
    y = np.empty(want.shape, dtype)
    _BUILDS.build(s, [X, W, Y])(x.astype(dtype), w.astype(dtype), y)
    tol = 1e-4 if dtype == "float32" else 1e-10
    np.testing.assert_allclose(y, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("case", [
    # batch, in, out channels, (depth, height, width), stride, padding, dilation, target
    (2, 16, 32, (3, 6, 14), 1, 1, 1, "llvm -mcpu=skylake-avx512"),   # rows of 14: 2 x 7
    (1, 12, 64, (4, 5, 11), (1, 2, 1), (1, 0, 2), 1, "llvm -mcpu=skylake-avx512"),  # 8 + 5
    (None, 10, 16, (3, 7, 9), 2, 1, (1, 1, 2), "llvm -mcpu=haswell"),   # AVX2: 16 x 4
], ids=["rows_of_14", "strided_partial", "avx2_symbolic"])
def test_conv3d_ncdhw_template_by_channels(case):
    """conv3d_ncdhw with a reduction of 256 steps or more and whole blocks of two
    vectors of output channels: the template (vectors across the output channels, the
    weights copied [O / 2L, C, KD, KH, KW, 2L]) is taken, and right."""
    N, C, O, S, stride, padding, dilation, target = case
    X = tc.placeholder((tc.var("n") if N is None else N, C, *S), name="X")
    W = tc.placeholder((O, C, 3, 3, 3), name="W")
    Y = nn.conv3d_ncdhw(X, W, stride, padding, dilation)
    assert _conv3d_template([Y], Knobs(), cpu_model(target)) is not None
    s = tc.auto_schedule([X, W, Y], target=target)
    assert "W.global" in str(tc.lower(s, [X, W, Y], target=target))
    rng = np.random.default_rng(9)
    x, w = rng.standard_normal((N or 2, C, *S)), rng.standard_normal((O, C, 3, 3, 3))
    pairs = _pairs(padding, 3)
    want = F.conv3d(_torch_pad(torch.from_numpy(x), pairs), torch.from_numpy(w), stride=stride,
                    dilation=dilation).numpy()
    y = np.empty(want.shape, "float32")
    _BUILDS.build(s, [X, W, Y], target=target)(x.astype("float32"), w.astype("float32"), y)
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("case", [
    # batch, in, out channels, (depth, height, width), stride, padding, dilation, target
    (2, 16, 32, (3, 6, 14), 1, 1, 1, "llvm -mcpu=skylake-avx512"),   # rows of 14: 2 x 7
    (1, 12, 32, (2, 5, 11), (1, 1, 2), (1, 1, 2), (1, 1, 2),
     "llvm -mcpu=skylake-avx512"),                                  # strided, dilated
    (3, 10, 16, (3, 4, 9), 1, (0, 1, 1), 1, "llvm -mcpu=haswell"),    # AVX2, batch 3
], ids=["rows_of_14", "strided_dilated", "avx2_batch3"])
def test_conv3d_ncdhw_template_skips_the_padded_taps(case):
    """The by-channels template with a reduction of 256 steps or more leaves the taps on
    the zero padding out of its sums, the columns' included (the first and last blocks
    of a row split off): a weight of inf at the first or last tap of a dimension reaches
    no output whose window puts that tap on the padding (each equal to the convolution
    without that tap), and every other output (NaN or inf).  With the knob
    ``template.conv3d_ncdhw.zero_taps`` "compute" the border outputs add ``0 * inf``
    too.  The weights are copied in register transposes where the vector's lanes divide
    an output channel's ``C * 27`` weights, else gathered."""
    N, C, O, S, stride, padding, dilation, target = case
    X = tc.placeholder((N, C, *S), name="X")
    W = tc.placeholder((O, C, 3, 3, 3), name="W")
    Y = nn.conv3d_ncdhw(X, W, stride, padding, dilation)
    info = cpu_model(target)
    assert _conv3d_template([Y], Knobs(), info) is not None
    s = apply_rules([X, W, Y], Knobs(), info)
    text = str(tc.lower(s, [X, W, Y], target=target))
    assert ("tensorize x86.transpose_f32_" in text) == (C * 27 % info.lanes == 0), text
    f = _BUILDS.build(s, [X, W, Y], target=target)
    computed = _BUILDS.build(apply_rules([X, W, Y], Knobs(
        {"template.conv3d_ncdhw.zero_taps": "compute"}), info), [X, W, Y], target=target)
    rng = np.random.default_rng(13)
    x, w = rng.standard_normal((N, C, *S)), rng.standard_normal((O, C, 3, 3, 3))
    pairs = _pairs(padding, 3)
    st = (stride,) * 3 if isinstance(stride, int) else stride
    dl = (dilation,) * 3 if isinstance(dilation, int) else dilation
    px = _torch_pad(torch.from_numpy(x), pairs)
    y = np.empty(tc.utils.get_const_tuple(Y.shape), "float32")
    for d in range(3):
        for k in (0, 2):
            tap = (slice(None),) * (2 + d) + (k,)
            wz = w.copy()
            wz[tap] = 0.0
            want = F.conv3d(px, torch.from_numpy(wz), stride=st, dilation=dl).numpy()
            # the outputs whose window puts tap k of dimension d on the padding
            at = np.arange(y.shape[2 + d]) * st[d] + k * dl[d] - pairs[d][0]
            border = (at < 0) | (at >= S[d])
            assert (~border).any(), (d, k)
            if not border.any():    # (no padding on that side)
                assert pairs[d][k // 2] == 0 and d < 2, (d, k)
                continue
            sel = (slice(None),) * (2 + d)
            wi = w.copy()
            wi[tap] = np.inf
            for fn, skipped in ((f, True), (computed, False)):
                fn(x.astype("float32"), wi.astype("float32"), y)
                assert not np.isfinite(y[sel + (~border,)]).any(), (d, k)
                if skipped:
                    np.testing.assert_allclose(y[sel + (border,)], want[sel + (border,)],
                                               rtol=1e-4, atol=1e-4, err_msg=str((d, k)))
                else:   # 0 * inf
                    assert not np.isfinite(y[sel + (border,)]).any(), (d, k)
    f(x.astype("float32"), w.astype("float32"), y)
    want = F.conv3d(px, torch.from_numpy(w), stride=st, dilation=dl).numpy()
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)


def test_conv3d_ncdhw_rows_that_fill_their_vectors_stay_with_the_rules():
    """Rows of 16 or 32 (every lane busy) with a reduction of 256 steps or more, or
    output channels that are not whole 2-vector blocks: not the by-channels template."""
    for C, O, S in ((16, 32, (2, 4, 16)), (16, 32, (2, 4, 32)), (16, 24, (2, 4, 14)),
                    (3, 24, (2, 4, 14))):
        X = tc.placeholder((1, C, *S), name="X")
        W = tc.placeholder((O, C, 3, 3, 3), name="W")
        Y = nn.conv3d_ncdhw(X, W, 1, 1)
        assert _conv3d_template([Y], Knobs(), cpu_model("llvm -mcpu=skylake-avx512")) is None


@pytest.mark.parametrize("case", [
    # batch, in, out channels, (depth, height, width), stride, padding, dilation
    (1, 3, 32, (5, 9, 16), 1, 1, 1),                 # C3D's first layer, small: rows of 16
    (2, 3, 64, (4, 7, 13), 1, (1, 2, 0), 1),        # batch 2, odd rows: 8 + 5
    (1, 2, 32, (6, 8, 19), (2, 1, 2), 1, (1, 2, 1)),  # strided, dilated
    (None, 5, 32, (3, 5, 11), 1, (0, 1, 1), 1),     # a symbolic batch
], ids=["c3d_small", "batch2_odd", "strided_dilated", "symbolic"])
def test_conv3d_ncdhw_short_reduction_by_channels(case):
    """A reduction under 256 steps (a first layer's 3 input channels x 27 taps), whatever
    its rows: the by-channels template, its block stored along the output rows (its
    vectors read back from the block in L1, not scattered across the channel planes) and
    its taps on the zero padding computed (the pragma ``zero_terms``: constant tap loops);
    right with either knob, against PyTorch."""
    N, C, O, S, stride, padding, dilation = case
    target = "llvm -mcpu=skylake-avx512"
    X = tc.placeholder((tc.var("n") if N is None else N, C, *S), name="X")
    W = tc.placeholder((O, C, 3, 3, 3), name="W")
    Y = nn.conv3d_ncdhw(X, W, stride, padding, dilation)
    info = cpu_model(target)
    assert _conv3d_template([Y], Knobs(), info) is not None
    rng = np.random.default_rng(11)
    x, w = rng.standard_normal((N or 2, C, *S)), rng.standard_normal((O, C, 3, 3, 3))
    want = F.conv3d(_torch_pad(torch.from_numpy(x), _pairs(padding, 3)), torch.from_numpy(w),
                    stride=stride, dilation=dilation).numpy()
    variants = [{}]
    if N == 1 and C == 3:
        variants += [{"template.conv3d_ncdhw.store": "scatter"},
                     {"template.conv3d_ncdhw.zero_taps": "skip"}]
    for knobs in variants:
        s = apply_rules([X, W, Y], Knobs(knobs), info)
        text = str(tc.lower(s, [X, W, Y], target=target))
        assert "W.global" in text
        assert ("pragma_zero_terms" in text) == (knobs.get(
            "template.conv3d_ncdhw.zero_taps", "compute") == "compute"), knobs
        if "pragma_zero_terms" in text:
            # every tap loop runs from 0 to 3: none bounded by the padding
            taps = [ln.strip() for ln in text.splitlines() if "(kd," in ln or "(kh," in ln]
            assert taps and all(t.endswith(", 0, 3) {") for t in taps), taps
        y = np.empty(want.shape, "float32")
        _BUILDS.build(s, [X, W, Y], target=target)(x.astype("float32"), w.astype("float32"), y)
        np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4, err_msg=str(knobs))


def test_conv3d_ncdhw_short_reduction_ir():
    """The loop nest of the short-reduction template (3 -> 32 channels, 2 x 3 x 16,
    padding 1, AVX-512) pinned: the weight copy and the padding at the root, tasks of
    (channel block, plane, row), blocks of 8 pixels x 2 vectors of channels over
    constant tap loops, each block computed once (its buffer no wider than its 8
    pixels) and stored to the output row by row (a vector of 8 pixels per channel)."""
    target = "llvm -mcpu=skylake-avx512"
    X = tc.placeholder((1, 3, 2, 3, 16), name="X")
    W = tc.placeholder((32, 3, 3, 3, 3), name="W")
    Y = nn.conv3d_ncdhw(X, W, 1, 1)
    s = apply_rules([X, W, Y], Knobs(), cpu_model(target))
    loops = [ln.rstrip(" {") for ln in str(tc.lower(s, [X, W, Y], target=target)).splitlines()
             if ln.strip().startswith(("parallel", "for", "unrolled", "vectorized"))]
    want = """  parallel (i0.i1.fused, 0, 3)
    for (i2, 0, 3)
      for (i3, 0, 3)
        for (i4, 0, 3)
          vectorized (i5, 0, 32)
  parallel (i0.i1.fused_1, 0, 3)
    for (i3_1, 0, 5)
      vectorized (i4.inner, 0, 16)
      vectorized (i4.inner, 0, 2)
    for (i2_1, 1, 2)
      vectorized (i4.inner, 0, 16)
      vectorized (i4.inner, 0, 2)
      for (i3_1, 1, 3)
        vectorized (i4.inner, 0, 16)
        vectorized (i4.inner, 0, 1)
        vectorized (i4.inner, 1, 1)
      vectorized (i4.inner, 0, 16)
      vectorized (i4.inner, 0, 2)
    for (i3_1, 0, 5)
      vectorized (i4.inner, 0, 16)
      vectorized (i4.inner, 0, 2)
  parallel (i0.i1.outer.fused.i2.fused.i3.fused, 0, 6)
    for (i4.outer, 0, 2)
      unrolled (i4.inner_1, 0, 8)
        unrolled (i1.inner.outer, 0, 2)
          vectorized (i1.inner.inner, 0, 16)
        for (c, 0, 3)
          unrolled (kd, 0, 3)
            unrolled (kh, 0, 3)
              unrolled (kw, 0, 3)
                unrolled (i4.inner_1, 0, 8)
                  unrolled (i1.inner.outer, 0, 2)
                    vectorized (i1.inner.inner, 0, 16)
      unrolled (i1.inner, 0, 32)
        unrolled (i4.inner.outer, 0, 1)
          vectorized (i4.inner.inner, 0, 8)"""
    assert "\n".join(loops) == want, "\n".join(loops)


@pytest.mark.parametrize("shape,k,stride,padding,dilation", [
    ((2, 100, 12, 421), 3, 2, 1, 1),     # 100 input channels: chunks of 25, stride 2
    ((1, 130, 8, 333), 5, 1, 2, 2),      # chunks of 65, dilated
    ((3, 200, 20, 150), 3, 1, 0, 1),     # batch 3, chunks of 50, 20 = 5 blocks of 4
], ids=["s2_chunks", "dilated_chunks", "batch3"])
def test_conv1d_ncw_wide_block_in_channel_chunks(shape, k, stride, padding, dilation):
    """The conv1d_ncw template's wide block (4 output channels x 6 vectors along the
    row, AVX-512; 5 where they pad the row less: the first and last cases) with the input channels in chunks whose data rows fit in L1 (the
    accumulators of the task's output channels kept in a local buffer across the
    chunks); right against PyTorch, and the narrow block (knob
    ``template.conv1d_ncw.block``) too."""
    N, C, O, L = shape
    target = "llvm -mcpu=skylake-avx512"
    X, W = tc.placeholder((N, C, L), name="X"), tc.placeholder((O, C, k), name="W")
    Y = nn.conv1d_ncw(X, W, stride, padding, dilation)
    info = cpu_model(target)
    assert _conv1d_template([Y], Knobs(), info) is not None
    rng = np.random.default_rng(12)
    x, w = rng.standard_normal((N, C, L)), rng.standard_normal((O, C, k))
    want = F.conv1d(_torch_pad(torch.from_numpy(x), _pairs(padding, 1)), torch.from_numpy(w),
                    stride=stride, dilation=dilation).numpy()
    for block in ("wide", "narrow"):
        s = apply_rules([X, W, Y], Knobs({"template.conv1d_ncw.block": block}), info)
        text = str(tc.lower(s, [X, W, Y], target=target))
        assert ("c.outer" in text) == (block == "wide"), block     # the chunks
        y = np.empty(want.shape, "float32")
        _BUILDS.build(s, [X, W, Y], target=target)(x.astype("float32"), w.astype("float32"), y)
        np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4, err_msg=block)


def test_conv1d_ncw_wide_block_vectors_by_the_row_tail(monkeypatch):
    """The wide block's vectors along the row (16 lanes given, not the host's): 6, or 5
    where 5-vector blocks compute fewer outputs past the row's end (wav2vec2's 1599: 20
    blocks of 80 against 17 of 96; in test_conv1d_ncw_wide_block_in_channel_chunks 211
    and 148 outputs take 5, 329 keeps 6); a tie keeps 6; the switch off, 6."""
    assert _row_vectors(1599, 16) == 5
    assert _row_vectors(1024, 16) == 5
    assert _row_vectors(211, 16) == 5 and _row_vectors(148, 16) == 5
    assert _row_vectors(329, 16) == 6
    assert _row_vectors(480, 16) == 6        # 5 x 96 = 6 x 80
    assert _row_vectors(96 * 3, 16) == 6
    monkeypatch.setattr(conv_nd_template, "LEAST_ROW_TAIL", False)
    assert _row_vectors(1599, 16) == 6


@pytest.mark.parametrize("nchw", [True, False], ids=["nchw", "nhwc"])
def test_conv2d_transpose_stride_past_the_output(nchw):
    """A stride far past the data (a 1x2 input spread 2**24 x 5 apart, a 3x3 kernel):
    only the phases a tap reaches are built (``_phase_taps`` finds them from the taps; it
    looped over every phase of the stride, 2**24 of them, and over 2**31 - 1 never
    ended); the values are PyTorch's."""
    assert [r for r, _ in _phase_taps(3, 2**31 - 1, 1, 1, 5)] == [0, 1]
    case = (1, 2, 3, 1, 2, (3, 3), (2**24, 5), 0, 0, 1, 1)
    (x, w), want = _transpose_case(case, nchw)
    X, W = tc.placeholder(x.shape, "float64", "X"), tc.placeholder(w.shape, "float64", "W")
    Y = _transpose(X, W, case, nchw)
    (y,) = _run(_build([Y], [X, W, Y]), [x, w], [tc.utils.get_const_tuple(Y.shape)], "float64")
    np.testing.assert_allclose(_nchw(y, nchw), want, rtol=1e-10, atol=1e-10)
