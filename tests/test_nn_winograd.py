"""Winograd convolution (tecomp.nn.winograd, ``algorithm="winograd"``): the transforms'
matrices, the forward against PyTorch (float64: to 1e-9) and against the direct
convolution (float32: to 1e-4 of the output's largest value, see docs/numerics.md), odd
planes that tiles do not divide, paddings 0/1/2, groups, both layouts, the weight
transform run apart, ``algorithm="auto"``'s choice, the gradient, and the calls it
refuses.  Correctness only, never speed.  Shapes are tiny: a Winograd kernel unrolls its
transforms' points, a build of about a second each."""
import dataclasses

import numpy as np
import pytest

import tecomp as tc
import tecomp.nn as nn
from tecomp.errors import ShapeError
from tecomp.nn.winograd import winograd_matrices
from tecomp.nn.winograd import winograd_tile
import tecomp.nn.winograd as winograd
from tecomp.strategy.cpu import winograd as cpu_winograd

torch = pytest.importorskip("torch")
F = torch.nn.functional
RNG = np.random.default_rng(53)


@pytest.mark.parametrize("m", [2, 4, 6])
def test_matrices_compute_the_correlation(m):
    AT, G, BT = (np.array(x) for x in winograd_matrices(m))
    assert AT.shape == (m, m + 2) and G.shape == (m + 2, 3) and BT.shape == (m + 2, m + 2)
    d, g = RNG.standard_normal((m + 2, m + 2)), RNG.standard_normal((3, 3))
    want = np.array([[(d[i:i + 3, j:j + 3] * g).sum() for j in range(m)] for i in range(m)])
    np.testing.assert_allclose(AT @ ((G @ g @ G.T) * (BT @ d @ BT.T)) @ AT.T, want,
                               rtol=1e-12, atol=1e-12)


def _run(nchw, shape, O, pad, groups, tile, dtype="float64", auto=False):
    """The Winograd convolution built and run, and PyTorch's (float64), both in the
    layout's order."""
    N, C, H, W = shape
    x = RNG.standard_normal(shape)
    w = RNG.standard_normal((O, C // groups, 3, 3))
    want = F.conv2d(torch.tensor(x), torch.tensor(w), padding=pad, groups=groups).numpy()
    if not nchw:
        x, w, want = x.transpose(0, 2, 3, 1), w.transpose(2, 3, 1, 0), want.transpose(0, 2, 3, 1)
    x, w = np.ascontiguousarray(x, dtype), np.ascontiguousarray(w, dtype)
    X = tc.placeholder(x.shape, dtype, name="X")
    Wt = tc.placeholder(w.shape, dtype, name="W")
    layout = "NCHW" if nchw else "NHWC"
    U = nn.winograd_weight_transform(Wt, layout, tile, groups)
    Y = nn.conv2d_winograd(X, U, layout, pad, groups=groups)
    assert Y.op.tag == f"winograd_conv2d_{layout.lower()}"
    f = tc.build(tc.auto_schedule([X, Wt, Y]), [X, Wt, Y])
    out = np.zeros(want.shape, dtype)
    f(x, w, out)
    return out, want


# (layout, [N, C, H, W], O, padding, groups, tile): odd planes the tiles do not divide
CASES = [(True, (1, 3, 5, 7), 4, 1, 1, 2),
         (False, (2, 4, 7, 6), 4, 0, 2, 4),
         (True, (1, 4, 6, 5), 6, 2, 2, 4),
         (False, (1, 2, 5, 5), 3, 2, 1, 2),
         # NCHW's transforms on whole vectors of channels (the host's, up to 16)
         (True, (1, 32, 4, 5), 16, 0, 1, 2),
         # ResNeXt's groups of 16 and 32 channels (what algorithm="auto" takes F(2x2)
         # for, see test_grouped_auto_choice_reads_the_machine_model), odd planes
         (False, (1, 32, 7, 9), 32, 1, 2, 2),
         (False, (2, 64, 5, 6), 64, 1, 2, 2),
         (True, (1, 32, 7, 5), 32, 1, 2, 2)]


@pytest.mark.parametrize("case", CASES, ids=[f"{'nchw' if c[0] else 'nhwc'}-p{c[3]}-g{c[4]}-F{c[5]}"
                                             for c in CASES])
def test_forward_matches_torch_float64(case):
    out, want = _run(*case)
    np.testing.assert_allclose(out, want, rtol=1e-9, atol=1e-9)


def test_float32_error_against_direct():
    """float32, F(4x4, 3x3), 16 channels: within 1e-4 of the output's largest value (the
    measured error is 1e-6-1e-5 at 64-512 channels: docs/numerics.md; the transforms'
    entries up to 5 and the products of G's 1/6 and 1/24 cost about a decimal digit over
    the direct sum)."""
    out, want = _run(False, (1, 16, 9, 9), 8, 1, 1, 4, dtype="float32")
    assert np.abs(out - want).max() <= 1e-4 * np.abs(want).max()


def test_algorithm_winograd_in_conv2d_and_auto_choice():
    X = tc.placeholder((8, 14, 14, 256), name="X")
    W = tc.placeholder((3, 3, 256, 256), name="W")
    Y = nn.conv2d_nhwc(X, W, padding=1, algorithm="winograd")
    assert Y.op.tag == "winograd_conv2d_nhwc" and Y.op.attrs["winograd"] in (2, 4)
    assert tc.utils.get_const_tuple(Y.shape) == (8, 14, 14, 256)
    # the stages a user sees: the weight transform inside the DAG, then the three stages
    names = {t.op.name for t in Y.op.input_tensors} | {Y.op.name}
    assert "conv2d_nhwc.gemm" in names
    # "direct" (the default) and grouped / small-channel "auto" stay direct
    assert nn.conv2d_nhwc(X, W, padding=1).op.tag == "conv2d_nhwc"
    G = tc.placeholder((3, 3, 8, 256), name="G")
    assert "group_conv2d_nhwc" in nn.conv2d_nhwc(X, G, padding=1, groups=32,
                                                 algorithm="auto").op.tag
    S = tc.placeholder((1, 8, 8, 8), name="S")
    assert nn.conv2d_nhwc(S, tc.placeholder((3, 3, 8, 8), name="w8"), padding=1,
                          algorithm="auto").op.tag == "conv2d_nhwc"
    # auto's rule: the saving over the transforms' passes
    assert winograd_tile(False, 8, 256, 256, 1, (14, 14)) in (0, 2, 4)
    assert winograd_tile(False, 8, 256, 256, 32, (14, 14)) == 0
    # NCHW pays its transforms' gathers and scatters on top: it never picks Winograd
    # where NHWC does not (whatever the host's machine model says)
    for n, c, hw in ((1, 64, 56), (1, 256, 14), (8, 128, 28), (8, 512, 7), (1, 32, 8)):
        assert winograd_tile(True, n, c, c, 1, (hw, hw)) == 0 or \
            winograd_tile(False, n, c, c, 1, (hw, hw)) != 0


def test_grouped_auto_choice_reads_the_machine_model(monkeypatch):
    """algorithm="auto" on grouped convolutions: F(2x2) for ResNeXt's 512x14x14 (16
    channels a group) in NHWC where the FMA units are half the vector's width (Zen 4's
    model), F(4x4) for 1024x7x7 (32 a group, 4 tiles of 4x4) there from batch 4 (at
    batch 1 the weight transform outweighs the products saved), direct with full-width
    ones (Zen 5's), for NCHW (gathers), for groups of 4 and 8 channels, and with the
    switch off; F(4x4)'s switch off leaves 1024x7x7 direct (F(2x2) computes 64 outputs
    for 49 there).  The machine models are named, not the host's."""
    half, full = "llvm -mcpu=znver4", "llvm -mcpu=znver5"
    assert tc.target.cpu_model(half).fma_lanes * 2 == tc.target.cpu_model(half).lanes
    assert tc.target.cpu_model(full).fma_lanes == tc.target.cpu_model(full).lanes

    def tile(nchw, n, c, hw, target, groups=32, **kw):
        skipped = nn.conv.padded_share((hw, hw), (3, 3), ((1, 1), (1, 1)), (1, 1), (1, 1),
                                       (hw, hw))
        return winograd_tile(nchw, n, c, c, groups, (hw, hw), target, skipped=skipped,
                             **{"in_w": hw, **kw})

    for n in (1, 8):
        assert tile(False, n, 512, 14, half) == 2
        assert tile(False, n, 512, 14, full) == 0
        assert tile(True, n, 512, 14, half) == 0
        assert tile(False, n, 1024, 7, half) == (4 if n == 8 else 0)
        # NCHW channels last (its copies counted): F(4x4) at batch 8 only
        assert tile(True, n, 1024, 7, half) == (4 if n == 8 else 0)
        assert tile(False, n, 1024, 7, full) == 0
        assert tile(True, n, 1024, 7, full) == 0
        for target in ("llvm -mcpu=skylake-avx512", "llvm -mcpu=haswell"):
            assert tile(True, n, 1024, 7, target) == 0
        for target in (half, full):
            assert tile(False, n, 128, 56, target) == 0    # 4 channels a group
            assert tile(False, n, 256, 28, target) == 0    # 8
    assert tile(False, 4, 1024, 7, half) == 4
    # NCHW only where the schedule runs it channels last: float32, a known width of at
    # most a vector, groups of whole vectors, with its switch on
    assert tile(True, 8, 1024, 7, half, dtype="float64") == 0
    assert tile(True, 8, 1024, 7, half, in_w=None) == 0
    assert tile(True, 8, 1024, 7, half, in_w=17) == 0
    assert tile(True, 8, 1536, 7, half, groups=64) == 0     # 24 channels a group
    # (and where the target has the register transposes: a made-up half-width model of
    # 8 lanes, where NHWC takes F(4x4), has them on x86 (AVX), none on AArch64)
    sk = nn.conv.padded_share((7, 7), (3, 3), ((1, 1), (1, 1)), (1, 1), (1, 1), (7, 7))
    for target, want in (("llvm -mcpu=haswell", 4),
                         ("llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-v1", 0)):
        info = dataclasses.replace(tc.target.cpu_model(target), lanes=8, fma_lanes=4,
                                   fma_ports=2, l2_bytes=1 << 20)
        assert winograd._grouped_tile(False, 8, 1024, 1024, 32, (7, 7), info, sk, 7) == 4
        assert winograd._grouped_tile(True, 8, 1024, 1024, 32, (7, 7), info, sk, 7) == want
    monkeypatch.setattr(winograd, "GROUPED_WINOGRAD_NCHW", False)
    assert tile(True, 8, 1024, 7, half) == 0
    assert tile(False, 8, 1024, 7, half) == 4
    monkeypatch.setattr(winograd, "GROUPED_WINOGRAD_F4", False)
    assert tile(False, 8, 1024, 7, half) == 0
    assert tile(False, 8, 512, 14, half) == 2
    monkeypatch.setattr(winograd, "GROUPED_WINOGRAD", False)
    assert tile(False, 8, 512, 14, half) == 0
    # a stride of 2 is no Winograd convolution: "auto" builds it direct on any host
    X = tc.placeholder((1, 28, 28, 512), name="X")
    W = tc.placeholder((3, 3, 16, 512), name="W")
    monkeypatch.setattr(winograd, "GROUPED_WINOGRAD", True)
    assert "group_conv2d_nhwc" in nn.conv2d_nhwc(X, W, 2, 1, groups=32,
                                                 algorithm="auto").op.tag
    assert "group_conv2d_nchw" in nn.conv2d_nchw(
        tc.placeholder((1, 512, 28, 28), name="Xc"), tc.placeholder((512, 16, 3, 3), name="Wc"),
        2, 1, groups=32, algorithm="auto").op.tag


@pytest.mark.parametrize("dtype, batch", [("float32", tc.var("n")), ("float16", 8),
                                          ("bfloat16", 8)])
def test_grouped_nchw_auto_falls_back_to_direct(dtype, batch, monkeypatch):
    """``algorithm="auto"`` on a grouped NCHW convolution that the rule would take as
    Winograd (a machine model where it does, whatever the host) builds the direct
    convolution where Winograd cannot be: a symbolic batch, float16, bfloat16."""
    monkeypatch.setattr(nn.conv, "winograd_tile", lambda *a, **k: 4)
    X = tc.placeholder((8, 64, 7, 7), "float32", name="X")
    assert nn.conv2d_nchw(X, tc.placeholder((64, 32, 3, 3), name="W"), 1, 1, groups=2,
                          algorithm="auto").op.tag.startswith("winograd_conv2d")
    X = tc.placeholder((batch, 64, 7, 7), dtype, name="X")
    Y = nn.conv2d_nchw(X, tc.placeholder((64, 32, 3, 3), dtype, name="W"), 1, 1, groups=2,
                       algorithm="auto")
    assert not any(t.startswith("winograd") for t in _stage_tags([Y]))


def test_grouped_auto_matches_torch():
    """A grouped NHWC convolution built with algorithm="auto" (Winograd F(2x2) or direct,
    as the host's machine model says: 16 channels a group on a 14x14 plane, the shape
    class that takes F(2x2) with half-width FMA units) against PyTorch, float32."""
    x = RNG.standard_normal((1, 64, 14, 14)).astype("float32")
    w = RNG.standard_normal((64, 16, 3, 3)).astype("float32")
    want = F.conv2d(torch.tensor(x), torch.tensor(w), padding=1, groups=4).numpy()
    X = tc.placeholder((1, 14, 14, 64), name="X")
    W = tc.placeholder((3, 3, 16, 64), name="W")
    Y = nn.conv2d_nhwc(X, W, padding=1, groups=4, algorithm="auto")
    f = tc.build(tc.auto_schedule([X, W, Y]), [X, W, Y])
    out = np.zeros((1, 14, 14, 64), "float32")
    f(np.ascontiguousarray(x.transpose(0, 2, 3, 1)), np.ascontiguousarray(w.transpose(2, 3, 1, 0)),
      out)
    want = want.transpose(0, 2, 3, 1)
    assert np.abs(out - want).max() <= 1e-4 * np.abs(want).max()


# (layout, [N, C, H, W], padding, groups, tile, the model's L2 in KB): the transformed
# weights of the 8 groups outgrow that L2 and one group's fit in a quarter of it, so the
# tasks are groups, each transforming its weights
@pytest.mark.parametrize("case", [(False, (2, 64, 7, 5), 1, 8, 4, 80),
                                  (True, (3, 64, 6, 7), 1, 8, 2, 60),
                                  (False, (2, 64, 5, 5), 0, 8, 2, 40)],
                         ids=["nhwc-F4", "nchw-F2", "nhwc-p0-F2"])
def test_grouped_tasks_of_a_group_transform_its_weights(case, monkeypatch):
    """A grouped Winograd convolution whose transformed weights outgrow L2 (the machine
    model here: 40-80 KB, one thread, so the decision does not depend on the host) runs a
    task per group over every image, the group's weight transform inside it (attached to
    the output's group loop), against PyTorch in float64; at batch 1, or with
    ``GROUP_TASKS`` off, the weight transform is a stage of its own."""
    nchw, (N, C, H, W), pad, groups, m, l2 = case
    x = RNG.standard_normal((N, C, H, W))
    w = RNG.standard_normal((C, C // groups, 3, 3))
    want = F.conv2d(torch.tensor(x), torch.tensor(w), padding=pad, groups=groups).numpy()
    if not nchw:
        x, w, want = x.transpose(0, 2, 3, 1), w.transpose(2, 3, 1, 0), want.transpose(0, 2, 3, 1)
    x, w = np.ascontiguousarray(x), np.ascontiguousarray(w)
    info = dataclasses.replace(tc.target.cpu_model(), l2_bytes=l2 * 1024, threads=1)

    def scheduled(x, on=True):
        X = tc.placeholder(x.shape, "float64", name="X")
        Wt = tc.placeholder(w.shape, "float64", name="W")
        layout = "NCHW" if nchw else "NHWC"
        U = nn.winograd_weight_transform(Wt, layout, m, groups)
        Y = nn.conv2d_winograd(X, U, layout, pad, groups=groups)
        s = tc.create_schedule(Y.op)
        monkeypatch.setattr(cpu_winograd, "GROUP_TASKS", on)
        cpu_winograd.winograd_into(s, [Y], info)
        return s, s[U].attach_type, [X, Wt, Y]

    s, attach, args = scheduled(x)
    assert attach == "scope"
    out = np.zeros(want.shape)
    tc.build(s, args)(x, w, out)
    np.testing.assert_allclose(out, want, rtol=1e-9, atol=1e-9)
    assert scheduled(x, on=False)[1] == "root"
    assert scheduled(x[:1])[1] == "root"


HOST = tc.target.cpu_model()


def _channels_last_used(s, args) -> bool:
    """Whether the lowered ``s`` copies channels last and stores through the transposes
    (the host's vector width; none on a host without the x86 transposes)."""
    ir = str(tc.lower(s, args))
    return f"x86.transpose_f32_{HOST.lanes}x" in ir and f"x{HOST.lanes} (store)" in ir


def _host_has_transposes() -> bool:
    return tc.te.tensor_intrin.transpose_intrin("llvm", HOST.lanes, "float32", 2) is not None


# ([N, H, W], groups, padding, tile, group tasks (a 60 KB L2, one thread), epilogue):
# a group's channels one vector of the host's width (its L input and L output channels);
# the case with the most paths first (the default run keeps it alone: conftest.THINNED)
@pytest.mark.parametrize("case", [((2, 9, 6), 2, 2, 4, True, True),
                                  ((2, 7, 7), 2, 1, 4, False, False),
                                  ((1, 6, 5), 2, 1, 2, False, True),
                                  ((3, 5, 9), 4, 0, 2, True, False)],
                         ids=["9x6-p2-F4-group-tasks-bias-relu", "7x7-F4", "6x5-F2-bias-relu",
                              "5x9-p0-F2-group-tasks"])
def test_grouped_nchw_runs_channels_last(case, monkeypatch):
    """A grouped NCHW Winograd convolution fused per group (a group's channels whole
    vectors) copies its input planes channels last and stores its output through
    register transposes where the host has them (NCHW_CHANNELS_LAST; the transforms one
    channel at a time otherwise, and with the switch off): odd planes that the tiles do
    not divide, paddings 0-2, tasks of (image, group) and of a group over every image,
    with and without a bias and ReLU epilogue, against PyTorch in float32 (to 1e-4 of the
    largest output, docs/numerics.md)."""
    (N, H, W), groups, pad, m, group_tasks, epilogue = case
    L = HOST.lanes
    C = O = groups * L
    x = RNG.standard_normal((N, C, H, W)).astype("float32")
    w = (RNG.standard_normal((O, L, 3, 3)) / np.sqrt(9 * L)).astype("float32")
    b = RNG.standard_normal(O).astype("float32")
    want = F.conv2d(torch.tensor(x), torch.tensor(w), padding=pad, groups=groups)
    if epilogue:
        want = torch.relu(want + torch.tensor(b)[:, None, None])
    want = want.numpy()
    info = dataclasses.replace(HOST, l2_bytes=60 * 1024, threads=1) if group_tasks else HOST
    X = tc.placeholder(x.shape, name="X")
    Wt = tc.placeholder(w.shape, name="W")
    B = tc.placeholder((O,), name="B")

    def built(on):
        monkeypatch.setattr(cpu_winograd, "NCHW_CHANNELS_LAST", on)
        U = nn.winograd_weight_transform(Wt, "NCHW", m, groups)
        Y = nn.conv2d_winograd(X, U, "NCHW", pad, groups=groups)
        if epilogue:
            Y = tc.compute(Y.shape, lambda n, o, i, j: tc.max(Y[n, o, i, j] + B[o], 0.0),
                           name="relu")
        s = tc.create_schedule(Y.op)
        cpu_winograd.winograd_into(s, [Y], info)
        s = cpu_winograd._auto_rest(s, [Y], info)
        args = [X, Wt, B, Y]
        out = np.zeros(want.shape, "float32")
        tc.build(s, args)(x, w, b, out)
        return _channels_last_used(s, args), out

    used, out = built(True)
    assert used == _host_has_transposes()
    tol = 1e-4 * np.abs(want).max()
    np.testing.assert_allclose(out, want, rtol=0, atol=tol)
    if m == 2 and not epilogue:
        used, out = built(False)
        assert not used
        np.testing.assert_allclose(out, want, rtol=0, atol=tol)


def test_grouped_nchw_channels_last_of_a_computed_input():
    """A grouped NCHW Winograd convolution of a computed input (a ReLU, which the rules
    inline into the channels-last copy: no plain copy left to transpose) and with an
    epilogue, through ``tc.auto_schedule``: its output still stored through the
    transposes where the host has them, and right (PyTorch, float32)."""
    L = HOST.lanes
    x = RNG.standard_normal((2, 2 * L, 6, 6)).astype("float32")
    w = (RNG.standard_normal((2 * L, L, 3, 3)) / np.sqrt(9 * L)).astype("float32")
    X = tc.placeholder(x.shape, name="X")
    Wt = tc.placeholder(w.shape, name="W")
    R = tc.compute(X.shape, lambda *i: tc.max(X(*i), 0.0), name="relu_in")
    Y = nn.conv2d_winograd(R, nn.winograd_weight_transform(Wt, "NCHW", 2, 2), "NCHW", 1,
                           groups=2)
    Z = tc.compute(Y.shape, lambda *i: Y(*i) * 2.0, name="scaled")
    s = tc.auto_schedule([X, Wt, Z])
    assert (f"x86.transpose_f32_6x{L} (store)" in str(tc.lower(s, [X, Wt, Z]))) == \
        _host_has_transposes()
    out = np.zeros(x.shape, "float32")
    tc.build(s, [X, Wt, Z])(x, w, out)
    want = 2 * F.conv2d(torch.relu(torch.tensor(x)), torch.tensor(w), padding=1,
                        groups=2).numpy()
    np.testing.assert_allclose(out, want, rtol=0, atol=1e-4 * np.abs(want).max())


def test_grouped_nchw_channels_last_inf_and_nan():
    """An infinite or NaN input pixel of a grouped NCHW F(4x4) convolution run channels
    last reaches the outputs of the 4x4 tiles whose 6x6 inputs hold it (docs/numerics.md)
    and no other; the others are the direct convolution's.  ``algorithm="winograd"`` and
    ``tc.auto_schedule``, as a user builds it."""
    L = HOST.lanes
    N, C, H, W = 1, 2 * L, 7, 7
    x = RNG.standard_normal((N, C, H, W)).astype("float32")
    w = (RNG.standard_normal((C, L, 3, 3)) / np.sqrt(9 * L)).astype("float32")
    spots = [(1, 0, 0, np.inf), (L + 3, 4, 5, -np.inf), (2, 6, 6, np.nan)]
    for c, y, xx, val in spots:
        x[0, c, y, xx] = val
    X = tc.placeholder(x.shape, name="X")
    Wt = tc.placeholder(w.shape, name="W")
    outs = []
    for algorithm in ("direct", "winograd"):
        Y = nn.conv2d_nchw(X, Wt, padding=1, groups=2, algorithm=algorithm)
        s = tc.auto_schedule([X, Wt, Y])
        if algorithm == "winograd":
            assert _channels_last_used(s, [X, Wt, Y]) == _host_has_transposes()
        out = np.zeros((N, C, H, W), "float32")
        tc.build(s, [X, Wt, Y])(x, w, out)
        outs.append(out[0])
    d, g = outs
    tiles = np.zeros((C, H, W), bool)
    for c, y, xx, val in spots:
        og = slice(c // L * L, (c // L + 1) * L)
        tiles[og, _rows_reached(y + 1, 4, H, False), _rows_reached(xx + 1, 4, W, False)] = True
    bad = ~np.isfinite(g)
    assert bad.any() and not bad[~tiles].any()
    assert (~np.isfinite(d) <= bad).all()
    np.testing.assert_allclose(g[~bad], d[~bad], rtol=0, atol=1e-4 * np.abs(d[~bad]).max())


def _rows_reached(p: int, m: int, n: int, window: bool) -> slice:
    """The outputs (of ``n``, padding 1) a special input at padded index ``p`` reaches in
    one dimension: its 3-tap window's, or with ``window=False`` every output of the
    ``m``-output tiles whose ``m + 2`` inputs hold it."""
    if window:
        return slice(max(p - 2, 0), min(p + 1, n))
    first = max((p - m - 1) // m + (1 if (p - m - 1) % m else 0), 0) if p > m + 1 else 0
    return slice(first * m, min((p // m + 1) * m, n))


def _direct_and_winograd(x, w, tile, groups):
    """The outputs of ``x`` (NHWC) by ``w`` (HWIO), padding 1: the direct convolution's
    and Winograd F(tile x tile)'s, each with its default schedule."""
    X = tc.placeholder(x.shape, name="X")
    Wt = tc.placeholder(w.shape, name="W")
    outs = []
    for Y in (nn.conv2d_nhwc(X, Wt, padding=1, groups=groups),
              nn.conv2d_winograd(X, nn.winograd_weight_transform(Wt, "NHWC", tile, groups),
                                 "NHWC", padding=1, groups=groups)):
        f = tc.build(tc.create_schedule(Y.op), [X, Wt, Y])
        out = np.zeros(x.shape[:3] + (w.shape[3],), "float32")
        f(x, w, out)
        outs.append(out)
    return outs


@pytest.mark.parametrize("tile, groups", [(2, 4), (4, 1)])
def test_an_infinite_input_reaches_its_tiles(tile, groups):
    """An infinite input pixel makes the outputs whose 3x3 window holds it not finite,
    mostly NaN where the direct sum gives +-inf (the transforms add and subtract it);
    with F(2x2) no other output; with F(4x4) also the other outputs of the 4x4 output
    tiles whose 6x6 inputs hold it (inf - inf where exact arithmetic cancels it), as
    docs/numerics.md says.  Every other output is the direct convolution's; a NaN pixel
    likewise.  NHWC, padding 1, a 9x10 plane: tiles at its edges."""
    N, H, W, C, O = 1, 9, 10, 8, 8
    x = RNG.standard_normal((N, H, W, C)).astype("float32")
    w = RNG.standard_normal((3, 3, C // groups, O)).astype("float32")
    spots = [(0, 0, 1, np.inf), (4, 5, 2, -np.inf), (8, 9, 0, np.inf), (2, 9, 5, np.nan)]
    for y, xx, c, val in spots:
        x[0, y, xx, c] = val
    d, g = (out[0] for out in _direct_and_winograd(x, w, tile, groups))
    assert np.isinf(d).any() and np.isnan(d).any()
    window = np.zeros((H, W, O), bool)
    tiles = np.zeros((H, W, O), bool)
    for y, xx, c, val in spots:
        og = slice(c // (C // groups) * (O // groups), (c // (C // groups) + 1) * (O // groups))
        for mask, win in ((window, True), (tiles, False)):
            mask[_rows_reached(y + 1, tile, H, win), _rows_reached(xx + 1, tile, W, win), og] = True
    bad = ~np.isfinite(g)
    assert bad[window].all() and not bad[~tiles].any()
    if tile == 2:
        assert (bad == window).all()
    else:
        assert (bad & ~window).any()     # reached past the windows
    np.testing.assert_allclose(g[~bad], d[~bad], rtol=0, atol=1e-4 * np.abs(d[~bad]).max())
    assert (np.isnan(g) & np.isinf(d)).any()



@pytest.mark.parametrize("tile, groups, big", [(2, 4, 2e37), (4, 1, 3e36), (4, 2, 3e36)])
def test_huge_finite_inputs_below_the_documented_bound_stay_finite(tile, groups, big):
    """float32 pixels of magnitude up to docs/numerics.md's bound for the tile (FLT_MAX /
    100 for F(4x4), FLT_MAX / 16 for F(2x2): the input transform's largest sum of
    coefficients) with weights of at most 1 / 9 give finite outputs within 1e-4 of the
    direct convolution's largest, where the transforms add and subtract them (a pixel of
    1e37 made some of F(4x4)'s outputs inf or NaN where the direct sum was finite)."""
    N, H, W, C, O = 1, 9, 10, 8, 8
    x = RNG.standard_normal((N, H, W, C)).astype("float32")
    w = (RNG.uniform(-1, 1, (3, 3, C // groups, O)) / 9).astype("float32")
    for y, xx in ((0, 0), (4, 5), (8, 9), (3, 3)):
        x[0, y, xx, :] = big * np.sign(RNG.standard_normal(C))
    d, g = _direct_and_winograd(x, w, tile, groups)
    assert np.isfinite(d).all() and np.isfinite(g).all()
    np.testing.assert_allclose(g, d, rtol=0, atol=1e-4 * np.abs(d).max())

def _stage_tags(ts):
    from tecomp.autodiff.reference import _topo
    return {x.strip() for t in _topo(ts) for x in (getattr(t.op, "tag", "") or "").split(",")}


# (layout, [N, C, H, W], O, padding, groups, weights transformed apart)
GRAD_CASES = [(True, (2, 3, 4, 5), 4, 1, 1, False),
              (False, (1, 4, 6, 7), 4, 0, 2, True)]


@pytest.mark.parametrize("case", GRAD_CASES, ids=["nchw-p1", "nhwc-p0-g2-apart"])
def test_winograd_gradient_is_the_direct_convolutions(case):
    """tc.gradient of a Winograd convolution is the direct convolution's (its registered
    equivalent): no transform in the gradient's DAG, and the data and weight gradients
    match PyTorch's in float64 and tecomp's gradient of algorithm="direct"."""
    nchw, shape, O, pad, groups, apart = case
    x = RNG.standard_normal(shape)
    w = RNG.standard_normal((O, shape[1] // groups, 3, 3))
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    ty = F.conv2d(tx, tw, padding=pad, groups=groups)
    h = RNG.standard_normal(ty.shape)
    ty.backward(torch.tensor(h))
    gx_want, gw_want = tx.grad.numpy(), tw.grad.numpy()
    if not nchw:
        x, w, h = x.transpose(0, 2, 3, 1), w.transpose(2, 3, 1, 0), h.transpose(0, 2, 3, 1)
        gx_want, gw_want = gx_want.transpose(0, 2, 3, 1), gw_want.transpose(2, 3, 1, 0)
    x, w, h = (np.ascontiguousarray(a) for a in (x, w, h))
    X = tc.placeholder(x.shape, "float64", name="X")
    W = tc.placeholder(w.shape, "float64", name="W")
    layout = "NCHW" if nchw else "NHWC"
    conv = nn.conv2d_nchw if nchw else nn.conv2d_nhwc
    if apart:
        Y = nn.conv2d_winograd(X, nn.winograd_weight_transform(W, layout, 4, groups), layout,
                               pad, groups=groups)
    else:
        Y = conv(X, W, padding=pad, groups=groups, algorithm="winograd")
    assert Y.op.tag.startswith("winograd_conv2d")
    Hd = tc.placeholder(Y.shape, "float64", name="H")
    grads = tc.gradient(Y, [X, W], Hd)
    assert not any(t.startswith("winograd") for t in _stage_tags(grads))
    direct = tc.gradient(conv(X, W, padding=pad, groups=groups), [X, W], Hd)
    f = tc.build(tc.schedule_backward(grads + direct), [X, W, Hd] + grads + direct)
    out = [np.zeros(a.shape) for a in (x, w, x, w)]
    f(x, w, h, *out)
    for got, want in zip(out, (gx_want, gw_want, gx_want, gw_want)):
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)
    np.testing.assert_array_equal(out[0], out[2])
    np.testing.assert_array_equal(out[1], out[3])


def test_winograd_gradient_keeps_its_stages_where_they_are_asked_for():
    """A gradient wanted for a stage between the output and the data or weight (the
    transformed weights), one marked constant, or weights transformed outside the DAG
    (a placeholder: no weight to read) keep the Winograd stages' own derivative (the
    walk's choice is checked, not the derived gradient: deriving through the
    transforms takes seconds)."""
    from tecomp.autodiff.reverse import _Gradient

    X = tc.placeholder((1, 4, 6, 6), "float64", name="X")
    W = tc.placeholder((4, 4, 3, 3), "float64", name="W")

    def stage(Y, prefix):
        return next(t for t in Y.op.input_tensors[0].op.input_tensors
                    if t.op.tag.startswith(prefix))

    Y = nn.conv2d_nchw(X, W, padding=1, algorithm="winograd")
    assert _Gradient(Y, [X, W], None).equal(Y).op.tag == "conv2d_nchw"
    U = stage(Y, "winograd_weight")
    assert _Gradient(Y, [U], None).equal(Y) is Y
    assert _Gradient(Y, [X, U], None).equal(Y) is Y
    Z = nn.conv2d_winograd(X, tc.placeholder(U.shape, "float64", name="Up"), "NCHW", 1)
    assert _Gradient(Z, [X], None).equal(Z) is Z
    Y2 = nn.conv2d_nchw(X, W, padding=1, algorithm="winograd", name="c2")
    tc.autodiff.stop_gradient(stage(Y2, "winograd_vt"))
    assert _Gradient(Y2, [W], None).equal(Y2) is Y2


def test_weights_given_transformed_are_scheduled_by_the_template():
    """A placeholder for the transformed weights (the weight transform run once, apart):
    the CPU template reads the placeholder's tags as none (it crashed on them, which the
    strategy hid by falling back to the generic rules) and computes the convolution."""
    W = tc.placeholder((3, 3, 16, 32), name="W")
    U = nn.winograd_weight_transform(W, "NHWC", tile=2)
    wt = tc.build(tc.auto_schedule([W, U]), [W, U])
    X = tc.placeholder((1, 6, 6, 16), name="X")
    Ut = tc.placeholder(U.shape, name="U")
    Y = nn.conv2d_winograd(X, Ut, "NHWC", padding=1)
    conv = tc.build(tc.auto_schedule([X, Ut, Y]), [X, Ut, Y])
    rng = np.random.default_rng(3)
    w = rng.standard_normal((3, 3, 16, 32)).astype("float32")
    x = rng.standard_normal((1, 6, 6, 16)).astype("float32")
    u = np.zeros(tc.utils.get_const_tuple(U.shape), "float32")
    wt(w, u)
    y = np.zeros((1, 6, 6, 32), "float32")
    conv(x, u, y)
    xp = np.pad(x.astype("float64"), ((0, 0), (1, 1), (1, 1), (0, 0)))
    ref = np.zeros((1, 6, 6, 32))
    for dy in range(3):
        for dx in range(3):
            ref += xp[:, dy:dy + 6, dx:dx + 6, :] @ w[dy, dx].astype("float64")
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)
