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
        # over another axis than the last (two transposes around the last-axis stages)
        ("softmax_axis0", lambda x: nn.softmax(x, axis=0),
         lambda x: np_softmax(x.swapaxes(0, -1)).swapaxes(0, -1), [(3, 5)], None),
        ("softmax_axis1_of_3", lambda x: nn.softmax(x, axis=-2),
         lambda x: np_softmax(x.swapaxes(1, -1)).swapaxes(1, -1), [(2, 3, 4)], None),
        ("log_softmax_axis0", lambda x: nn.log_softmax(x, axis=0),
         lambda x: np.log(np_softmax(x.swapaxes(0, -1))).swapaxes(0, -1), [(4, 2, 3)], None),
        ("mse_loss_0d", nn.mse_loss, lambda a, b: np.array([(a - b) ** 2]), [(), ()], None),
        ("reshape_0d", lambda x: nn.reshape(x, ()), lambda x: x.reshape(()), [(1, 1)], None),
        ("reshape_numpy_ints", lambda x: nn.reshape(x, (np.int64(6), np.int32(-1))),
         lambda x: x.reshape(6, -1), [(3, 4)], None),
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
    with pytest.raises(tc.ShapeError, match="stride must be an int >= 1 or a pair"):
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


def test_dropout_takes_numpy_numbers():
    """A numpy float for p and a numpy int for the seed are the same numbers as Python's
    (the fuzzer's nnargs family found them refused with a ShapeError)."""
    X = tc.placeholder((4, 8), name="X")
    x = np.arange(32, dtype=np.float32).reshape(4, 8) + 1
    outs = []
    for p, seed in ((0.25, 3), (np.float32(0.25), np.int64(3)), (np.float64(0.25), np.int32(3))):
        D = nn.dropout(X, p, seed)
        d = np.empty_like(x)
        tc.build(tc.create_schedule(D.op), [X, D])(x, d)
        outs.append(d)
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_array_equal(outs[0], outs[2])


# ---------------------------------------------------------------------------------------
# float16 / bfloat16: reductions accumulate in float32, statistics are float32
#
# Every case reduces over thousands of terms of one sign, so a float16 (or bfloat16)
# accumulator saturates (a float16 sum of values below 1 stops growing at 2048) or drifts
# far beyond the tolerance: the old float16 accumulation is off by 1e-2 to 5e-1 here.  The
# tolerance is two roundings of the output dtype, relative to the largest output.


def _half_dtype(dtype):
    if dtype == "bfloat16":
        return pytest.importorskip("ml_dtypes").bfloat16
    return np.float16


HALF_TOL = {"float16": 2 * 2.0 ** -11, "bfloat16": 2 * 2.0 ** -8}


def _win_sum(x, k, s):
    """``x[N, C, H, W]``'s ``k x k`` window sums at stride ``s`` (float64)."""
    from numpy.lib.stride_tricks import sliding_window_view
    return sliding_window_view(x, (k, k), axis=(2, 3))[:, :, ::s, ::s].sum((-1, -2))


def _soft_labels(shape):
    e = np.exp(rng.standard_normal(shape))
    return e / e.sum(-1, keepdims=True)


# name, builder, float64 reference, input shapes, input generator
HALF_CASES = [
    ("conv2d_nchw_18432_terms", lambda x, w: nn.conv2d_nchw(x, w),
     lambda x, w: np_conv_nchw(x, w), [(1, 2048, 3, 3), (2, 2048, 3, 3)], "positive"),
    ("conv2d_nhwc", lambda x, w: nn.conv2d_nhwc(x, w, 1, 1),
     lambda x, w: np_conv_nchw(x.transpose(0, 3, 1, 2), w.transpose(3, 2, 0, 1),
                               p=(1, 1)).transpose(0, 2, 3, 1),
     [(1, 4, 4, 1024), (3, 3, 1024, 3)], "positive"),
    ("matmul", nn.matmul, lambda a, b: a @ b, [(3, 4096), (4096, 5)], "positive"),
    ("dense_bias", nn.dense, lambda x, w, b: x @ w.T + b, [(3, 4096), (5, 4096), (5,)],
     "positive"),
    ("batch_matmul", lambda a, b: nn.batch_matmul(a, b, transpose_b=True),
     lambda a, b: a @ b.transpose(0, 2, 1), [(2, 3, 4096), (2, 4, 4096)], "positive"),
    ("avg_pool2d", lambda x: nn.avg_pool2d(x, 64), lambda x: _win_sum(x, 64, 64) / 4096,
     [(1, 2, 64, 64)], "positive"),
    ("softmax", nn.softmax, np_softmax, [(2, 8192)], "normal"),
    ("log_softmax", nn.log_softmax, lambda x: np.log(np_softmax(x)), [(2, 8192)], "normal"),
    ("layer_norm", nn.layer_norm,
     lambda x, g, b: (x - x.mean(-1, keepdims=True)) /
     np.sqrt(x.var(-1, keepdims=True) + 1e-5) * g + b, [(2, 4096), (4096,), (4096,)],
     "offset"),
    ("batch_norm", nn.batch_norm_train,
     lambda x, g, b: (x - x.mean((0, 2, 3), keepdims=True)) /
     np.sqrt(x.var((0, 2, 3), keepdims=True) + 1e-5) * g[None, :, None, None] +
     b[None, :, None, None], [(4, 2, 32, 32), (2,), (2,)], "offset"),
    ("cross_entropy", nn.cross_entropy,
     lambda x, y: np.array([-(y * np.log(np_softmax(x))).sum() / x.shape[0]]),
     [(64, 512), (64, 512)], "labels"),
    ("mse_loss", nn.mse_loss, lambda a, b: np.array([((a - b) ** 2).mean()]),
     [(64, 512), (64, 512)], "normal"),
    ("attention", lambda q, k, v: nn.scaled_dot_product_attention(q, k, v),
     lambda q, k, v: np_softmax(q @ k.transpose(0, 1, 3, 2) / 8.0) @ v,
     [(1, 1, 4, 64), (1, 1, 4096, 64), (1, 1, 4096, 8)], "positive"),
]


def _half_inputs(kind, shapes):
    if kind == "positive":
        return [rng.uniform(0.0, 1.0, s) for s in shapes]
    if kind == "offset":   # a mean far from 0: the variance is a small difference
        return [rng.standard_normal(shapes[0]) + 100.0] + [rng.standard_normal(s)
                                                           for s in shapes[1:]]
    if kind == "labels":
        return [rng.standard_normal(shapes[0]), _soft_labels(shapes[1])]
    return [rng.standard_normal(s) for s in shapes]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("case", HALF_CASES, ids=[c[0] for c in HALF_CASES])
def test_half_precision_reductions_accumulate_in_float32(case, dtype):
    name, builder, ref, shapes, kind = case
    half = _half_dtype(dtype)
    phs = [tc.placeholder(s, dtype, name=f"in{k}") for k, s in enumerate(shapes)]
    out = builder(*phs)
    assert out.dtype == dtype
    vals = [np.asarray(v).astype(half) for v in _half_inputs(kind, shapes)]
    got = np.zeros(tuple(int(e.value) for e in out.shape), half)
    tc.build(tc.create_schedule(out.op), phs + [out])(*vals, got)
    want = ref(*[v.astype(np.float64) for v in vals])
    err = np.abs(got.astype(np.float64) - want).max() / np.abs(want).max()
    assert err <= HALF_TOL[dtype], f"{name} {dtype}: relative error {err:.3g}"


def test_the_float16_convolution_of_18432_terms():
    """A float16 accumulator stops at 2048 on this sum (55% off): float32 gets it to one
    rounding of the float16 output."""
    X = tc.placeholder((1, 2048, 3, 3), "float16", name="X")
    W = tc.placeholder((1, 2048, 3, 3), "float16", name="W")
    Y = nn.conv2d_nchw(X, W)
    x = np.full((1, 2048, 3, 3), 0.5, np.float16)
    w = np.full((1, 2048, 3, 3), 0.5, np.float16)
    y = np.zeros((1, 1, 1, 1), np.float16)
    tc.build(tc.create_schedule(Y.op), [X, W, Y])(x, w, y)
    assert float(y[0, 0, 0, 0]) == 4608.0


def test_half_precision_stages_and_out_dtype():
    X = tc.placeholder((1, 8, 6, 6), "float16", name="X")
    W = tc.placeholder((4, 8, 3, 3), "float16", name="W")
    y = nn.conv2d_nchw(X, W, padding=1)             # float32 sum, rounded once
    acc = y.op.input_tensors[0]
    assert (y.dtype, acc.name, acc.dtype, acc.op.tag) == \
        ("float16", "conv2d_nchw.acc", "float32", "conv2d_nchw")
    y32 = nn.conv2d_nchw(X, W, padding=1, out_dtype="float32")   # TVM's out_dtype
    assert (y32.name, y32.dtype, y32.op.tag) == ("conv2d_nchw", "float32", "conv2d_nchw")
    y16 = nn.conv2d_nchw(X, W, padding=1, out_dtype="float16")   # a float16 sum, asked for
    assert (y16.name, y16.dtype, y16.op.tag) == ("conv2d_nchw", "float16", "conv2d_nchw")
    h = nn.conv2d_nhwc(tc.placeholder((1, 6, 6, 8), "bfloat16", name="H"),
                       tc.placeholder((3, 3, 8, 4), "bfloat16", name="V"))
    assert [h.dtype, h.op.input_tensors[0].dtype] == ["bfloat16", "float32"]
    d = nn.dense(tc.placeholder((2, 8), "float16", name="A"),
                 tc.placeholder((3, 8), "float16", name="B"))
    assert (d.dtype, d.op.input_tensors[0].name, d.op.input_tensors[0].dtype) == \
        ("float16", "dense.matmul", "float32")
    assert nn.dense(tc.placeholder((2, 8), name="A"), tc.placeholder((3, 8), name="B")).name \
        == "dense"   # float32: one stage, as before
    ln = nn.layer_norm(tc.placeholder((2, 8), "float16", name="L"),
                       tc.placeholder((8,), "float16", name="G"),
                       tc.placeholder((8,), "float16", name="B"))
    stats = {t.name: t.dtype for t in ln.op.input_tensors}
    assert stats["layer_norm.mean"] == stats["layer_norm.invstd"] == "float32"
    _, mean, var = nn.batch_norm_train(X, tc.placeholder((8,), "float16", name="G"),
                                       tc.placeholder((8,), "float16", name="B"),
                                       return_stats=True)
    assert mean.dtype == var.dtype == "float32"


@pytest.mark.parametrize("out_dtype", ["float32", "float16"])
def test_conv2d_out_dtype_as_dense(out_dtype):
    """``out_dtype`` of a convolution: the operands are cast to it and summed in it, as
    ``nn.dense``'s: float32 is exact to float32 rounding; float16 is what was asked
    (TVM's float16 conv2d), and saturates on this long sum."""
    X = tc.placeholder((1, 2048, 3, 3), "float16", name="X")
    W = tc.placeholder((1, 2048, 3, 3), "float16", name="W")
    Y = nn.conv2d_nchw(X, W, out_dtype=out_dtype)
    Z = nn.dense(tc.placeholder((1, 18432), "float16", name="P"),
                 tc.placeholder((1, 18432), "float16", name="Q"), out_dtype=out_dtype)
    x = rng.uniform(0.0, 1.0, (1, 2048, 3, 3)).astype(np.float16)
    w = rng.uniform(0.0, 1.0, (1, 2048, 3, 3)).astype(np.float16)
    y = np.zeros((1, 1, 1, 1), out_dtype)
    tc.build(tc.create_schedule(Y.op), [X, W, Y])(x, w, y)
    z = np.zeros((1, 1), out_dtype)
    args = [Z.op.input_tensors[0], Z.op.input_tensors[1], Z]
    tc.build(tc.create_schedule(Z.op), args)(x.reshape(1, -1), w.reshape(1, -1), z)
    want = (x.astype(np.float64) * w).sum()
    if out_dtype == "float32":
        assert abs(y.item() - want) < 1e-5 * want and abs(z.item() - want) < 1e-5 * want
    else:   # the sum stops growing where float16 can no longer add the products
        assert y.item() < 0.6 * want and z.item() < 0.6 * want


def test_plain_te_sum_over_float16_accumulates_in_float16():
    """docs/numerics.md: a ``tc.sum`` of float16 values keeps a float16 accumulator (TE's
    rule, as TVM's); ``astype("float32")`` in the body makes it a float32 sum."""
    A = tc.placeholder((4096,), "float16", name="A")
    k = tc.reduce_axis((0, 4096), name="k")
    S16 = tc.compute((1,), lambda i: tc.sum(A[k], axis=k), name="S16")
    k2 = tc.reduce_axis((0, 4096), name="k")
    S32 = tc.compute((1,), lambda i: tc.sum(A[k2].astype("float32"), axis=k2), name="S32")
    a = np.full(4096, 1.0, np.float16)
    s16, s32 = np.zeros(1, np.float16), np.zeros(1, np.float32)
    tc.build(tc.create_schedule([S16.op, S32.op]), [A, S16, S32])(a, s16, s32)
    assert (float(s16[0]), float(s32[0])) == (2048.0, 4096.0)


def test_padding_forms():
    """Every form ``padding=`` takes gives (before, after) per spatial dimension; "SAME"
    gives TensorFlow's ceil(size / stride) outputs with the odd pixel after."""
    from tecomp.nn._check import Args
    a = Args("conv2d_nchw", "c")
    geo = ((8, 8), (3, 3), (1, 1), (1, 1))
    assert a.padding(1, *geo) == ((1, 1), (1, 1))
    assert a.padding((1, 2), *geo) == ((1, 1), (2, 2))
    assert a.padding((0, 1, 2, 3), *geo) == ((0, 2), (1, 3))        # top, left, bottom, right
    assert a.padding([(0, 1), (2, 3)], *geo) == ((0, 1), (2, 3))
    assert a.padding("valid", *geo) == ((0, 0), (0, 0))
    for size, k, s, d in [(7, 3, 2, 1), (8, 4, 2, 1), (10, 3, 3, 2), (5, 1, 1, 1), (6, 5, 1, 1)]:
        (b, e), = a.padding("SAME", (size,), (k,), (s,), (d,))
        out, = a.window((size,), (k,), (s,), ((b, e),), (d,), "data")
        assert out == -(-size // s) and 0 <= e - b <= 1, (size, k, s, d, b, e)
    for bad in (-1, (1, 2, 3), "same2", True, ((1,), (2, 3)), 1.0):
        with pytest.raises(tc.ShapeError, match="padding"):
            a.padding(bad, *geo)


def test_padded_extents_past_int32_are_exact():
    """nn.pad (and the convolutions and pools through it) adds the padding to a constant
    extent exactly: 2**31 - 4 rows padded by 3 and 3 are 2**31 + 2 (an int64 extent),
    not the int32 wrap of it (a ShapeError saying the extent was -2**31 + 2; padding
    2**31 - 1 on both sides of 3 rows made 1 row, silently)."""
    def ints(t):
        return [int(e.value) for e in t.shape]
    Y = tc.placeholder((2**31 - 1,), name="Y")
    assert ints(nn.pad(Y, (5,), (3,))) == [2**31 + 7]
    X = tc.placeholder((1, 1, 2**31 - 4, 2), name="X")
    W = tc.placeholder((1, 1, 1, 1), name="W")
    Z = nn.conv2d_nchw(X, W, padding=3)
    assert ints(Z) == [1, 1, 2**31 + 2, 8]
    assert ints(Z.op.input_tensors[0]) == [1, 1, 2**31 + 2, 8]   # the padded copy
    P = nn.pad(tc.placeholder((1, 2, 3, 3), name="D"), (0, 0, 2**31 - 1, 2**31 - 1))
    assert ints(P) == [1, 2, 2**32 + 1, 2**32 + 1]


@pytest.mark.parametrize("layout", ["HWIO", "OHWI", "HWOI"])
def test_conv2d_nhwc_kernel_layouts(layout):
    """conv2d_nhwc reads its weight in HWIO, OHWI or HWOI (TOPI's kernel layouts), forward
    and gradients as PyTorch's convolution of the same weights."""
    import torch
    perm = {"HWIO": (2, 3, 1, 0), "OHWI": (0, 2, 3, 1), "HWOI": (2, 3, 0, 1)}[layout]
    shape = tuple((6, 4, 3, 3)[p] for p in perm)        # from OIHW [6, 4, 3, 3]
    X = tc.placeholder((2, 7, 7, 4), name="X")
    W = tc.placeholder(shape, name="W")
    Y = nn.conv2d_nhwc(X, W, stride=2, padding=(1, 0, 1, 1), kernel_layout=layout)
    H = tc.placeholder(Y.shape, name="H")
    gX, gW = tc.gradient(Y, [X, W], head=H)
    args = [X, W, H, Y, gX, gW]
    f = tc.build(tc.auto_schedule(args), args)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 7, 7, 4)).astype("float32")
    w_oihw = rng.standard_normal((6, 4, 3, 3)).astype("float32")
    w = np.ascontiguousarray(w_oihw.transpose(perm))
    h = rng.standard_normal(tuple(int(e) for e in Y.shape)).astype("float32")
    y, gx, gw = np.empty_like(h), np.empty_like(x), np.empty_like(w)
    f(x, w, h, y, gx, gw)
    tx = torch.from_numpy(x).permute(0, 3, 1, 2).requires_grad_()
    tw = torch.from_numpy(w_oihw).requires_grad_()
    ty = torch.nn.functional.conv2d(torch.nn.functional.pad(tx, (0, 1, 1, 1)), tw, stride=2)
    ty.backward(torch.from_numpy(h).permute(0, 3, 1, 2))
    np.testing.assert_allclose(y, ty.detach().permute(0, 2, 3, 1).numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(gx, tx.grad.permute(0, 2, 3, 1).numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(gw, tw.grad.numpy().transpose(perm), rtol=1e-4, atol=1e-4)
