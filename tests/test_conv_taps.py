"""A 2-d convolution leaves the taps that read its zero padding out of its sum (a
``where=`` marked ``ZERO_WHERE``: tecomp.te.reduce): the mark, the terms lowering drops
where they would be tested in every lane of a vector, the auto-scheduled templates on
the borders, rfactor taking the mark away with its tail guard (loop partitioning of the
lower bounds, ``y + ky >= 1``: test_passes.py; tensorize computing such a sum in full:
test_tensorize.py).  The values of the convolutions and their gradients against
PyTorch (borders, strides, dilations, asymmetric padding, groups, the templates) are
tests/test_nn_conv_groups.py's and test_nn_ops.py's.  Correctness only."""
import numpy as np
import pytest

import tecomp as tc
import tecomp.nn as nn
from tecomp.te.reduce import ZERO_WHERE



def _ref(x, w, pads, stride=(1, 1), dilation=(1, 1), groups=1):
    """NCHW float64 reference: ``x`` padded by ``pads`` ((top, bottom), (left, right))."""
    p = np.pad(x.astype(np.float64), ((0, 0), (0, 0)) + tuple(pads))
    N, C, H, W = p.shape
    O, I, KH, KW = w.shape
    (sh, sw), (dh, dw) = stride, dilation
    OH, OW = (H - dh * (KH - 1) - 1) // sh + 1, (W - dw * (KW - 1) - 1) // sw + 1
    out = np.zeros((N, O, OH, OW))
    per = O // groups
    for ky in range(KH):
        for kx in range(KW):
            win = p[:, :, ky * dh:ky * dh + sh * (OH - 1) + 1:sh,
                    kx * dw:kx * dw + sw * (OW - 1) + 1:sw]
            for g in range(groups):
                out[:, g * per:(g + 1) * per] += np.einsum(
                    "nchw,oc->nohw", win[:, g * I:(g + 1) * I], w[g * per:(g + 1) * per, :, ky, kx])
    return out


def _conv_op(Y):
    """The convolution stage under ``Y`` (itself, or the accumulator it rounds)."""
    return Y.op if Y.op.attrs.get("conv2d") or Y.op.attrs.get("group_conv2d") \
        else Y.op.input_tensors[0].op


@pytest.mark.parametrize("groups", [1, 2])
@pytest.mark.parametrize("nchw", [True, False])
def test_the_padded_taps_are_left_out_and_marked(nchw, groups):
    """A padded convolution's sum has a where= (the window inside the image, one term per
    side padded) and the mark; an unpadded one neither."""
    X = tc.placeholder((1, 4, 6, 7) if nchw else (1, 6, 7, 4), name="X")
    W = tc.placeholder((4, 4 // groups, 3, 3) if nchw else (3, 3, 4 // groups, 4), name="W")
    conv = nn.conv2d_nchw if nchw else nn.conv2d_nhwc
    # top 1, bottom 0, left 2, right 1: three terms, no test of the bottom
    Y = conv(X, W, padding=((1, 0), (2, 1)), groups=groups)
    op = _conv_op(Y)
    assert op.attrs.get(ZERO_WHERE) is True
    text = str(op.body.condition)
    assert text.count(">=") == 2 and text.count("<") == 1, text
    plain = _conv_op(conv(X, W, groups=groups))
    assert ZERO_WHERE not in plain.attrs and plain.body.condition.value is True


def test_skipped_where_the_padding_is_a_share_worth_it():
    """Taps are skipped where at least SKIP_SHARE of the products read the padding (a
    56 x 56 plane padded by 1 under a 3 x 3 kernel: 2.4%, computed; 28 x 28: 4.7%,
    skipped); padded_share counts them as a loop over every product does."""
    from tecomp.nn.conv import SKIP_SHARE, padded_share
    W = tc.placeholder((4, 4, 3, 3), name="W")
    for n, marked in ((56, False), (28, True)):
        op = _conv_op(nn.conv2d_nchw(tc.placeholder((1, 4, n, n), name="X"), W, padding=1))
        assert bool(op.attrs.get(ZERO_WHERE)) is marked
        assert (getattr(op.body.condition, "value", None) is True) is not marked
    assert padded_share((56, 56), (3, 3), ((1, 1), (1, 1)), (1, 1), (1, 1), (56, 56)) < \
        SKIP_SHARE < padded_share((28, 28), (3, 3), ((1, 1), (1, 1)), (1, 1), (1, 1), (28, 28))
    rng = np.random.default_rng(5)
    for _ in range(40):
        hw, khw, st, dl = (tuple(int(v) for v in rng.integers(1, hi, 2))
                           for hi in (10, 5, 4, 4))
        pads = tuple(tuple(int(v) for v in rng.integers(0, 4, 2)) for _ in range(2))
        out = [(hw[i] + sum(pads[i]) - dl[i] * (khw[i] - 1) - 1) // st[i] + 1 for i in (0, 1)]
        if min(out) < 1:
            continue
        inside = sum(0 <= y * st[0] + a * dl[0] - pads[0][0] < hw[0] and
                     0 <= x * st[1] + b * dl[1] - pads[1][0] < hw[1]
                     for y in range(out[0]) for x in range(out[1])
                     for a in range(khw[0]) for b in range(khw[1]))
        want = 1 - inside / (out[0] * out[1] * khw[0] * khw[1])
        assert abs(padded_share(hw, khw, pads, st, dl, out) - want) < 1e-12


def test_terms_read_in_every_lane_are_dropped():
    """Vectors along the output's columns: the test of the columns (one per lane) is
    dropped, the padding's zeros multiplied instead; the rows' test is partitioned off
    the inside rows.  The values are the padded convolution's."""
    X = tc.placeholder((1, 3, 5, 16), name="X")
    W = tc.placeholder((4, 3, 3, 3), name="W")
    Y = nn.conv2d_nchw(X, W, padding=1)
    s = tc.create_schedule(Y.op)
    n, o, y, x = s[Y].op.axis
    s[Y].reorder(n, o, y, *s[Y].op.reduce_axis, x)
    s[Y].vectorize(x)
    text = str(tc.lower(s, [X, W, Y]))
    conv = text[text.index("conv2d_nchw.pad[0, i1, i2, i3] ="):]
    assert "x + kx" not in "".join(line for line in conv.splitlines() if "if (" in line)
    assert "if (" not in conv[conv.index("vectorized (x"):], conv
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((1, 3, 5, 16)), rng.standard_normal((4, 3, 3, 3))
    y = np.zeros((1, 4, 5, 16), np.float32)
    tc.build(s, [X, W, Y])(x.astype(np.float32), w.astype(np.float32), y)
    np.testing.assert_allclose(y, _ref(x, w, ((1, 1), (1, 1))), rtol=1e-4, atol=1e-4)


def test_the_zero_terms_pragma_computes_the_padded_taps():
    """The pragma ``zero_terms`` on a loop of the convolution's stage: no test of the
    padding left (the tap loops run 0 to 3 in every row), the padding's zeros
    multiplied instead; without it the border rows' tap loops start or end early.  The
    values are the padded convolution's either way."""
    X = tc.placeholder((1, 3, 5, 7), name="X")
    W = tc.placeholder((4, 3, 3, 3), name="W")
    Y = nn.conv2d_nchw(X, W, padding=((2, 1), (1, 1)))
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((1, 3, 5, 7)), rng.standard_normal((4, 3, 3, 3))
    for pragma in (False, True):
        s = tc.create_schedule(Y.op)
        if pragma:
            s[Y].pragma(s[Y].op.reduce_axis[0], "zero_terms")
        text = str(tc.lower(s, [X, W, Y]))
        conv = text[text.index("conv2d_nchw[0, o,"):]
        taps = [ln.strip() for ln in conv.splitlines() if "(ky," in ln]
        assert taps and all(t == "for (ky, 0, 3) {" for t in taps) == pragma, taps
        assert "if (" not in conv or not pragma, conv
        y = np.zeros((1, 4, 6, 7), np.float32)
        tc.build(s, [X, W, Y])(x.astype(np.float32), w.astype(np.float32), y)
        np.testing.assert_allclose(y, _ref(x, w, ((2, 1), (1, 1))), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("nchw,case", [
    # (C, O, groups, H, W, padding, stride, dilation)
    (True, (8, 8, 2, 7, 9, ((2, 0), (1, 3)), (1, 1), (1, 1))),
    (False, (8, 8, 2, 7, 9, ((2, 0), (1, 3)), (1, 1), (1, 1))),
    (False, (6, 6, 3, 9, 8, ((1, 1), (0, 2)), (2, 1), (1, 2))),
    (True, (4, 8, 1, 6, 6, ((3, 1), (1, 1)), (2, 2), (2, 1))),
])
def test_auto_scheduled_borders(nchw, case):
    """The schedules tc.auto_schedule gives (the grouped and dense templates, their
    blocks partitioned on the tap tests) against the padded reference, border pixels
    included."""
    C, O, groups, H, Wd, pads, stride, dilation = case
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, C, H, Wd)).astype(np.float32)
    w = rng.standard_normal((O, C // groups, 3, 3)).astype(np.float32)
    want = _ref(x, w, pads, stride, dilation, groups)
    if nchw:
        X, W = tc.placeholder(x.shape, name="X"), tc.placeholder(w.shape, name="W")
        Y = nn.conv2d_nchw(X, W, stride, pads, dilation, groups=groups)
        xa, wa = x, w
    else:
        xa, wa = x.transpose(0, 2, 3, 1).copy(), w.transpose(2, 3, 1, 0).copy()
        X, W = tc.placeholder(xa.shape, name="X"), tc.placeholder(wa.shape, name="W")
        Y = nn.conv2d_nhwc(X, W, stride, pads, dilation, groups=groups)
        want = want.transpose(0, 2, 3, 1)
    y = np.zeros(tuple(int(e.value) for e in Y.shape), np.float32)
    tc.build(tc.auto_schedule([X, W, Y]), [X, W, Y])(xa, wa, y)
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)


def test_rfactor_takes_the_mark_away_with_its_tail_guard():
    """rfactor of the channels by a factor that does not divide them adds a tail guard to
    the where=: that term leaves out real terms, so the factored stage is not marked (its
    vectorized tail must stay guarded), and the values stay right."""
    X = tc.placeholder((1, 5, 4, 4), name="X")
    W = tc.placeholder((2, 5, 3, 3), name="W")
    Y = nn.conv2d_nchw(X, W, padding=1)
    s = tc.create_schedule(Y.op)
    c = Y.op.reduce_axis[0]
    co, ci = s[Y].split(c, factor=4)
    YF = s.rfactor(Y, ci)
    assert Y.op.attrs.get(ZERO_WHERE) and ZERO_WHERE not in YF.op.attrs
    s[YF].vectorize(s[YF].op.axis[0])
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((1, 5, 4, 4)), rng.standard_normal((2, 5, 3, 3))
    y = np.zeros((1, 2, 4, 4), np.float32)
    tc.build(s, [X, W, Y])(x.astype(np.float32), w.astype(np.float32), y)
    np.testing.assert_allclose(y, _ref(x, w, ((1, 1), (1, 1))), rtol=1e-4, atol=1e-4)
