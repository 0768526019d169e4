"""tecomp.nn forward operators against numpy references (float32, compiled with LLVM)."""
import math

import numpy as np
import pytest

import tecomp as tc
from tecomp import nn

rng = np.random.default_rng(3)
F32 = "float32"


# ---------------------------------------------------------------------------------
# numpy references


def np_pad(x, ph, pw, value=0.0):
    return np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=value)


def np_conv_nchw(x, w, s=(1, 1), p=(0, 0), d=(1, 1)):
    xp = np_pad(x, *p)
    N, C, H, W = xp.shape
    O, _, KH, KW = w.shape
    OH = (H - d[0] * (KH - 1) - 1) // s[0] + 1
    OW = (W - d[1] * (KW - 1) - 1) // s[1] + 1
    out = np.zeros((N, O, OH, OW))
    for ky in range(KH):
        for kx in range(KW):
            win = xp[:, :, ky * d[0]: ky * d[0] + s[0] * (OH - 1) + 1: s[0],
                     kx * d[1]: kx * d[1] + s[1] * (OW - 1) + 1: s[1]]
            out += np.einsum("nchw,oc->nohw", win, w[:, :, ky, kx])
    return out


def np_pool(x, k, s, p, op, value):
    xp = np_pad(x, p, p, value)
    N, C, H, W = xp.shape
    OH, OW = (H - k) // s + 1, (W - k) // s + 1
    wins = np.stack([xp[:, :, ky: ky + s * (OH - 1) + 1: s, kx: kx + s * (OW - 1) + 1: s]
                     for ky in range(k) for kx in range(k)])
    return op(wins, axis=0)


def np_softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def np_erf(x):
    return np.vectorize(math.erf)(x)


# name, builder, reference, input shapes, values (None: random)
def make_cases():
    pos = rng.uniform(0.1, 2, (3, 5))
    onehot = np.eye(5)[rng.integers(0, 5, 4)]
    return [
        ("matmul", nn.matmul, lambda a, b: a @ b, [(3, 4), (4, 5)], None),
        ("dense", nn.dense, lambda x, w, b: x @ w.T + b, [(3, 6), (5, 6), (5,)], None),
        ("conv_nchw", lambda x, w: nn.conv2d_nchw(x, w, 2, 1, 2),
         lambda x, w: np_conv_nchw(x, w, (2, 2), (1, 1), (2, 2)), [(2, 3, 9, 9), (4, 3, 3, 3)],
         None),
        ("conv_nchw_rect", lambda x, w: nn.conv2d_nchw(x, w, (1, 2), (2, 0), (1, 1)),
         lambda x, w: np_conv_nchw(x, w, (1, 2), (2, 0)), [(1, 2, 5, 8), (3, 2, 3, 2)], None),
        ("conv_nhwc", lambda x, w: nn.conv2d_nhwc(x, w, 2, 1, 1),
         lambda x, w: np_conv_nchw(x.transpose(0, 3, 1, 2), w.transpose(3, 2, 0, 1), (2, 2),
                                   (1, 1)).transpose(0, 2, 3, 1),
         [(2, 7, 7, 3), (3, 3, 3, 4)], None),
        ("max_pool", lambda x: nn.max_pool2d(x, 3, 2, 1),
         lambda x: np_pool(x, 3, 2, 1, np.max, -np.inf), [(2, 3, 7, 7)], None),
        ("avg_pool", lambda x: nn.avg_pool2d(x, 2), lambda x: np_pool(x, 2, 2, 0, np.mean, 0),
         [(2, 3, 6, 6)], None),
        ("avg_pool_pad", lambda x: nn.avg_pool2d(x, 3, 2, 1),
         lambda x: np_pool(x, 3, 2, 1, np.sum, 0) / 9, [(2, 3, 7, 7)], None),
        ("avg_pool_exclude_pad", lambda x: nn.avg_pool2d(x, 3, 2, 1, count_include_pad=False),
         lambda x: np_pool(x, 3, 2, 1, np.sum, 0) / np_pool(np.ones_like(x), 3, 2, 1, np.sum, 0),
         [(1, 2, 7, 7)], None),
        ("relu", nn.relu, lambda x: np.maximum(x, 0), [(3, 5)], None),
        ("sigmoid", nn.sigmoid, lambda x: 1 / (1 + np.exp(-x)), [(3, 5)], None),
        ("tanh", nn.tanh, np.tanh, [(3, 5)], None),
        ("gelu", nn.gelu, lambda x: 0.5 * x * (1 + np_erf(x / math.sqrt(2))), [(3, 5)], None),
        ("bias_add", nn.bias_add, lambda x, b: x + b[None, :, None, None], [(2, 3, 2, 2), (3,)],
         None),
        ("bias_add_last", lambda x, b: nn.bias_add(x, b, axis=-1), lambda x, b: x + b,
         [(2, 3), (3,)], None),
        ("softmax", nn.softmax, np_softmax, [(3, 5)], None),
        ("softmax_3d", nn.softmax, np_softmax, [(2, 3, 4)], None),
        ("log_softmax", nn.log_softmax, lambda x: np.log(np_softmax(x)), [(3, 5)], None),
        ("cross_entropy", nn.cross_entropy,
         lambda x, y: np.array([-(y * np.log(np_softmax(x))).sum() / x.shape[0]]),
         [(4, 5), (4, 5)], [rng.standard_normal((4, 5)), onehot]),
        ("mse_loss", nn.mse_loss, lambda a, b: np.array([((a - b) ** 2).mean()]),
         [(3, 5), (3, 5)], None),
        ("batch_norm", lambda x, g, b: nn.batch_norm_train(x, g, b, eps=1e-5),
         lambda x, g, b: (x - x.mean((0, 2, 3), keepdims=True)) /
         np.sqrt(x.var((0, 2, 3), keepdims=True) + 1e-5) * g[None, :, None, None] +
         b[None, :, None, None], [(3, 2, 4, 4), (2,), (2,)], None),
        ("layer_norm", nn.layer_norm,
         lambda x, g, b: (x - x.mean(-1, keepdims=True)) /
         np.sqrt(x.var(-1, keepdims=True) + 1e-5) * g + b, [(3, 4, 6), (6,), (6,)], None),
        ("flatten", nn.flatten, lambda x: x.reshape(x.shape[0], -1), [(2, 3, 4, 5)], None),
        ("pad", lambda x: nn.pad(x, (0, 1, 2), (1, 0, 1), value=-3.0),
         lambda x: np.pad(x, ((0, 1), (1, 0), (2, 1)), constant_values=-3.0), [(2, 3, 4)], None),
        ("positive_log_softmax", nn.log_softmax, lambda x: np.log(np_softmax(x)), [(3, 5)],
         [pos]),
    ]


@pytest.fixture(scope="module")
def results():
    cases = make_cases()
    built = []
    for name, builder, ref, shapes, vals in cases:
        phs = [tc.placeholder(s, F32, name=f"{name}_in{k}") for k, s in enumerate(shapes)]
        out = builder(*phs)
        vals = vals if vals is not None else [rng.standard_normal(s) for s in shapes]
        built.append((name, phs, out, [np.asarray(v, F32) for v in vals], ref))
    got = {}
    for i in range(0, len(built), 8):
        part = built[i:i + 8]
        outs = [b[2] for b in part]
        s = tc.create_schedule([o.op for o in outs])
        f = tc.build(s, [p for b in part for p in b[1]] + outs)
        res = [np.empty(tuple(int(e.value) for e in o.shape), F32) for o in outs]
        f(*[v for b in part for v in b[3]], *res)
        for b, r in zip(part, res):
            got[b[0]] = (r, b[4](*[v.astype(np.float64) for v in b[3]]))
    return got


NAMES = [c[0] for c in make_cases()]


@pytest.mark.parametrize("name", NAMES)
def test_forward_matches_numpy(results, name):
    got, want = results[name]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5, err_msg=name)


def test_layouts_and_names():
    X = tc.placeholder((1, 3, 8, 8), name="X")
    W = tc.placeholder((4, 3, 3, 3), name="W")
    y = nn.conv2d_nchw(X, W, stride=2, padding=1)
    assert y.name == "conv2d_nchw" and [int(e.value) for e in y.shape] == [1, 4, 4, 4]
    assert y.op.input_tensors[0].name == "conv2d_nchw.pad"
    Xh = tc.placeholder((1, 8, 8, 3), name="Xh")
    Wh = tc.placeholder((3, 3, 3, 4), name="Wh")  # HWIO
    yh = nn.conv2d_nhwc(Xh, Wh, stride=1, padding=1)
    assert [int(e.value) for e in yh.shape] == [1, 8, 8, 4]
    d = nn.dense(tc.placeholder((2, 5), name="x"), tc.placeholder((3, 5), name="w"),
                 tc.placeholder((3,), name="b"))
    assert d.name == "dense" and d.op.input_tensors[0].name == "dense.matmul"
    sm = nn.softmax(tc.placeholder((2, 5), name="z"))
    assert [t.name for t in sm.op.input_tensors] == ["softmax.exp", "softmax.rcp"]


def test_bad_arguments():
    X = tc.placeholder((1, 3, 4, 4), name="X")
    with pytest.raises(tc.ShapeError, match="stride must be an int or a pair"):
        nn.conv2d_nchw(X, tc.placeholder((2, 3, 3, 3), name="W"), stride="2")
    with pytest.raises(tc.ShapeError, match="the kernel does not fit"):
        nn.conv2d_nchw(X, tc.placeholder((2, 3, 5, 5), name="W"))


# ---------------------------------------------------------------------------------------
# dropout: the Squares counter-based generator


def _squares_reference(counter):
    """The Squares generator in uint64 arithmetic (Widynski 2020), 32 bits per counter."""
    key = np.uint64(0xC8E4FD154CE32F6D)
    s32 = np.uint64(32)
    with np.errstate(over="ignore"):
        x = y = counter.astype(np.uint64) * key
        z = y + key
        for add in (y, z, y):
            x = x * x + add
            x = (x >> s32) | (x << s32)
        return ((x * x + z) >> s32).astype(np.int64)


def test_dropout_mask_is_the_squares_generator_under_every_schedule():
    seed = tc.var("seed", "int64")
    X = tc.placeholder((48, 80), name="X")
    D = nn.dropout(X, 0.25, seed)
    x = np.random.default_rng(0).standard_normal((48, 80)).astype(np.float32)
    counter = np.arange(48 * 80, dtype=np.int64) + (11 << 40)
    keep = (_squares_reference(counter) >= int(0.25 * 2 ** 32)).reshape(48, 80)
    want = np.where(keep, x * np.float32(1 / 0.75), np.float32(0))
    plain = tc.build(tc.create_schedule(D.op), [X, D, seed])
    auto = tc.build(tc.auto_schedule([X, D, seed]), [X, D, seed])
    for f in (plain, auto):
        d = np.empty_like(x)
        f(x, d, 11)
        np.testing.assert_array_equal(d, want)
    assert 0.72 < keep.mean() < 0.78
    d12 = np.empty_like(x)
    auto(x, d12, 12)                      # another seed, another mask
    assert 0.3 < (d12 != want).mean() < 0.5
    g, = tc.gradient(D, [X])              # the gradient draws the same mask
    gf = tc.build(tc.create_schedule(g.op), [X, seed, g])
    gv = np.empty_like(x)
    gf(x, 11, gv)
    np.testing.assert_array_equal(gv, np.where(keep, np.float32(1 / 0.75), np.float32(0)))


def test_dropout_edges():
    X = tc.placeholder((4, 4), name="X")
    x = np.arange(16, dtype=np.float32).reshape(4, 4)
    for p, want in ((0.0, x), (1.0, np.zeros_like(x))):
        D = nn.dropout(X, p, seed=3)
        d = np.empty_like(x)
        tc.build(tc.create_schedule(D.op), [X, D])(x, d)
        np.testing.assert_array_equal(d, want)
