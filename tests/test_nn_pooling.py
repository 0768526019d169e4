"""tecomp.nn's pooling (max/avg 1-, 2- and 3-d, channels first and last, adaptive and
global) against torch.nn.functional and a numpy reference of PyTorch's rules, over
TOPI-like parameter lists (test_topi_pooling's kernels, strides, dilations, asymmetric
paddings, ceil_mode, count_include_pad, layouts), compiled with tc.auto_schedule
(the CPU pooling template) and in the CUDA emulation; gradients against PyTorch's
autograd and with gradcheck; float16/bfloat16 and symbolic batches."""
import itertools
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import tecomp as tc
from tecomp import autodiff as ad
from tecomp import nn
from tecomp.strategy import cpu as sc
from tecomp.strategy.cpu import pool
from tecomp.strategy.cpu.pool import VECTORS, _channel_vectors, _tiles_rows

rng = np.random.default_rng(52)


def run(ins, out, values, target="llvm", schedule=None):
    """Build ``ins + [out]`` (with the auto-scheduler's rules unless ``schedule``) and run
    it on ``values``."""
    args = list(ins) + [out]
    s = schedule if schedule is not None else tc.auto_schedule(args, target=target, trials=0)
    f = tc.build(s, args, target=target)
    shape = [int(e.value) if isinstance(e, tc.ir.Const) else None for e in out.shape]
    if None in shape:   # a symbolic batch: the input's
        shape[0] = values[0].shape[0]
    res = np.zeros(tuple(shape), dtype=out.dtype)
    f(*values, res)
    return res


def to_last(x):
    """NC... -> N...C."""
    return np.ascontiguousarray(np.moveaxis(x, 1, -1))


def to_first(x):
    return np.ascontiguousarray(np.moveaxis(x, -1, 1))


def np_pool(x, kind, kernel, stride, pads, dilation, ceil_mode, count_include_pad):
    """PyTorch's pooling over ``x`` [N, C, *spatial] in float64, with ``pads`` one
    (before, after) pair per dimension (PyTorch's own rules where it has no asymmetric
    padding: windows clipped to the data, a ceil_mode window counted up to the padding);
    a max window on padding only (a dilation's taps stepping over the data) is -inf, as
    PyTorch's; an average one gives None (TOPI's lists have a few: tecomp refuses them,
    as PyTorch refuses any padding over half the kernel)."""
    x = x.astype(np.float64)
    size = x.shape[2:]
    outs = []
    for n, k, s, (b, e), d in zip(size, kernel, stride, pads, dilation):
        num = n + b + e - d * (k - 1) - 1
        o = (-(-num // s) if ceil_mode else num // s) + 1
        if ceil_mode and (o - 1) * s >= n + b:
            o -= 1
        outs.append(o)
    res = np.zeros(x.shape[:2] + tuple(outs))
    for pos in itertools.product(*(range(o) for o in outs)):
        taps, count = [], 1
        for o, n, k, s, (b, e), d in zip(pos, size, kernel, stride, pads, dilation):
            start = o * s - b
            t = [start + j * d for j in range(k) if 0 <= start + j * d < n]
            if not t and kind != "max":
                return None
            taps.append(t)
            count *= (min(start + k, n + e) - start) if count_include_pad else len(t)
        if not all(taps):
            res[(slice(None), slice(None)) + pos] = -np.inf
            continue
        win = x[(slice(None), slice(None)) + np.ix_(*taps)].reshape(x.shape[:2] + (-1,))
        res[(slice(None), slice(None)) + pos] = win.max(-1) if kind == "max" \
            else win.sum(-1) / count
    return res


def pairs(padding, nd):
    """``padding`` (an int, per dimension, or TOPI's befores-then-afters) as pairs."""
    if isinstance(padding, int):
        return [(padding, padding)] * nd
    if len(padding) == nd:
        return [(p, p) for p in padding]
    return list(zip(padding[:nd], padding[nd:]))


def torch_pool(x, kind, nd, kernel, stride, pads, dilation, ceil_mode, count_include_pad):
    """PyTorch's result, or None where it cannot express the case (asymmetric padding,
    padding over half the kernel)."""
    if any(b != e or 2 * b > k for (b, e), k in zip(pads, kernel)):
        return None
    t = torch.from_numpy(x.astype(np.float64))
    p = tuple(b for b, _ in pads)
    if kind == "max":
        fn = getattr(F, f"max_pool{nd}d")
        return fn(t, kernel, stride, p, dilation, ceil_mode).numpy()
    fn = getattr(F, f"avg_pool{nd}d")
    return fn(t, kernel, stride, p, ceil_mode, count_include_pad).numpy()


# TOPI's test_topi_pooling lists (verify_poolnd: shape, kernel, stride, dilation, padding,
# pool type, ceil_mode, count_include_pad), shrunk; layouts channels first and last
POOL_CASES = [
    # 2-d
    ((1, 16, 32, 32), (2, 2), (2, 2), (1, 1), (0, 0, 0, 0), "avg", False, True),
    ((1, 16, 31, 31), (3, 3), (3, 3), (1, 1), (1, 2, 1, 2), "avg", False, True),
    ((1, 16, 32, 32), (2, 3), (2, 2), (1, 1), (1, 2, 1, 2), "avg", False, False),
    ((1, 16, 31, 31), (4, 4), (4, 4), (1, 1), (3, 3, 3, 3), "avg", False, False),
    ((1, 16, 31, 31), (3, 3), (3, 3), (1, 1), (2, 1, 0, 3), "avg", True, True),
    ((1, 16, 32, 32), (2, 3), (2, 2), (1, 1), (0, 3, 2, 1), "avg", False, False),
    ((1, 16, 31, 31), (3, 3), (3, 3), (1, 1), (2, 1, 2, 1), "max", True, True),
    ((1, 16, 31, 31), (3, 3), (3, 3), (1, 1), (1, 0, 3, 2), "max", False, True),
    ((1, 16, 31, 31), (3, 3), (3, 3), (1, 1), (3, 2, 1, 0), "max", True, True),
    ((1, 16, 32, 32), (2, 3), (2, 2), (2, 1), (0, 3, 2, 1), "max", False, True),
    ((1, 16, 31, 31), (3, 3), (3, 3), (3, 3), (2, 1, 0, 3), "max", True, True),
    ((2, 5, 13, 9), (3, 3), (2, 2), (1, 1), (1, 1), "max", True, True),
    ((2, 5, 13, 9), (3, 3), (2, 2), (1, 1), (1, 1), "avg", True, True),
    ((2, 5, 13, 9), (3, 3), (2, 2), (1, 1), (1, 1), "avg", True, False),
    ((2, 3, 8, 11), (3, 2), (1, 3), (2, 1), (1, 0), "max", False, True),
    # 1-d
    ((1, 16, 32), (2,), (2,), (1,), (0, 0), "avg", False, True),
    ((1, 16, 31), (3,), (3,), (1,), (1, 2), "avg", False, True),
    ((1, 16, 31), (3,), (3,), (1,), (2, 1), "max", True, True),
    ((1, 16, 31), (3,), (3,), (3,), (2, 5), "max", True, True),
    ((1, 16, 31), (4,), (4,), (1,), (3, 3), "avg", False, False),
    ((2, 3, 17), (4,), (3,), (2,), (2, 2), "max", True, True),
    ((2, 3, 17), (3,), (2,), (1,), (1, 1), "avg", True, False),
    # 3-d
    ((1, 16, 32, 32, 32), (2, 2, 2), (2, 2, 2), (1, 1, 1), (0, 0, 0, 0, 0, 0), "avg", False,
     True),
    ((1, 16, 31, 31, 31), (3, 3, 3), (3, 3, 3), (1, 1, 1), (1, 1, 2, 2, 2, 1), "avg", False,
     True),
    ((1, 16, 31, 31, 31), (3, 3, 3), (3, 3, 3), (1, 1, 1), (2, 2, 1, 1, 1, 2), "max", True,
     True),
    ((1, 16, 31, 31, 31), (3, 3, 3), (3, 3, 3), (1, 1, 1), (2, 1, 0, 2, 1, 0), "avg", False,
     False),
    ((1, 16, 31, 31, 31), (3, 3, 3), (3, 3, 3), (3, 3, 3), (2, 1, 0, 5, 4, 3), "max", True,
     True),
    ((2, 3, 6, 7, 5), (3, 3, 2), (2, 2, 1), (1, 1, 1), (1, 1, 1), "avg", True, False),
]


def _case_id(c):
    shape, k, s, d, p, kind, ceil, cip = c
    return (f"{kind}{len(k)}d_{'x'.join(map(str, shape))}_k{''.join(map(str, k))}"
            f"_s{''.join(map(str, s))}_d{''.join(map(str, d))}_p{''.join(map(str, p))}"
            f"{'_ceil' if ceil else ''}{'' if cip else '_excl'}")


def _operator(kind, nd):
    return getattr(nn, f"{kind}_pool{nd}d")


@pytest.mark.parametrize("layout", ["first", "last"])
@pytest.mark.parametrize("case", POOL_CASES, ids=_case_id)
def test_pool_against_torch_and_numpy(case, layout):
    shape, k, s, d, p, kind, ceil, cip = case
    nd = len(k)
    if nd == 3 and layout == "last" and shape[2] > 16:
        shape = shape[:2] + (9, 10, 11)   # (the 3-d channels-last cases smaller)
    x = rng.standard_normal(shape).astype("float32")
    pads = pairs(p, nd)
    want = np_pool(x, kind, k, s, pads, d, ceil, cip)
    ref = torch_pool(x, kind, nd, k, s, pads, d, ceil, cip)
    if ref is not None:   # (our numpy reference is PyTorch's rule)
        np.testing.assert_allclose(want, ref, rtol=1e-12, atol=1e-12)
    lay = nn.pooling.LAYOUTS[nd][0 if layout == "first" else 1]
    data = x if layout == "first" else to_last(x)
    X = tc.placeholder(data.shape, name="X")
    kw = dict(ceil_mode=ceil, layout=lay)

    def pool():
        if kind == "max":
            return _operator(kind, nd)(X, k, s, p, dilation=d, **kw)
        return _operator(kind, nd)(X, k, s, p, cip, **kw)

    if want is None:
        with pytest.raises(tc.ShapeError, match=r"leaves window \d+ of the \w+ on padding "
                                                r"only .* pad less"):
            pool()
        return
    got = run([X], pool(), [data])
    got = got if layout == "first" else to_first(got)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("padding", ["SAME", "VALID"])
@pytest.mark.parametrize("kind", ["max", "avg"])
def test_same_and_valid_padding(kind, padding):
    """TensorFlow's modes: SAME gives ceil(size / stride) outputs, the odd padding after."""
    x = rng.standard_normal((2, 3, 10, 9)).astype("float32")
    X = tc.placeholder(x.shape, name="X")
    op = _operator(kind, 2)
    Y = op(X, 3, 2, padding) if kind == "max" else op(X, 3, 2, padding, False)
    pads = [(0, 1), (1, 1)] if padding == "SAME" else [(0, 0), (0, 0)]
    assert tuple(int(e.value) for e in Y.shape[2:]) == ((5, 5) if padding == "SAME" else (4, 4))
    np.testing.assert_allclose(run([X], Y, [x]),
                               np_pool(x, kind, (3, 3), (2, 2), pads, (1, 1), False, False),
                               rtol=1e-5, atol=1e-6)


ADAPTIVE_CASES = [  # shape, output size
    ((2, 3, 9, 11), (4, 5)), ((2, 3, 9, 11), 1), ((2, 3, 9, 11), (3, None)),
    ((2, 3, 9, 11), (9, 11)), ((2, 3, 10, 7), (3, 7)), ((1, 4, 7, 7), (14, 3)),
    ((2, 3, 17), 5), ((2, 3, 17), 17), ((1, 4, 16), 8),
    ((1, 2, 5, 6, 7), (2, 3, 4)), ((1, 2, 8, 6, 4), (4, 3, 2)), ((1, 2, 5, 6, 7), 1),
    ((1, 2, 10), 7), ((1, 2, 12), 9), ((1, 2, 7), 300),   # spans q + 2, q + 1, 1 or 2
]


@pytest.mark.parametrize("layout", ["first", "last"])
@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("shape,size", ADAPTIVE_CASES,
                         ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else str(v))
def test_adaptive_against_torch(shape, size, kind, layout):
    nd = len(shape) - 2
    x = rng.standard_normal(shape).astype("float32")
    want = getattr(F, f"adaptive_{kind}_pool{nd}d")(torch.from_numpy(x), size).numpy()
    lay = nn.pooling.LAYOUTS[nd][0 if layout == "first" else 1]
    data = x if layout == "first" else to_last(x)
    X = tc.placeholder(data.shape, name="X")
    Y = getattr(nn, f"adaptive_{kind}_pool{nd}d")(X, size, layout=lay)
    got = run([X], Y, [data])
    np.testing.assert_allclose(got if layout == "first" else to_first(got), want,
                               rtol=1e-5, atol=1e-6)


def test_adaptive_output_size_takes_numpy_integers():
    """output_size=np.int64(3) (or a list of them), as the kernel and stride of a pooling
    take them (PyTorch takes them too); found by the ops fuzz family (seed 174)."""
    x = rng.standard_normal((1, 2, 7, 5)).astype("float32")
    X = tc.placeholder(x.shape, name="X")
    for size in (np.int64(3), [np.int32(3), None], (np.int64(2), np.int16(4))):
        Y = nn.adaptive_avg_pool2d(X, size)
        want = F.adaptive_avg_pool2d(torch.from_numpy(x), [None if v is None else int(v)
                                                           for v in np.atleast_1d(size)]
                                     if not isinstance(size, np.integer) else int(size))
        assert all(isinstance(e.value, int) for e in Y.shape)
        np.testing.assert_allclose(run([X], Y, [x]), want.numpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(tc.TecompError, match="output_size must be an int >= 1"):
        nn.adaptive_avg_pool2d(X, np.bool_(True))


def test_adaptive_span_is_the_largest_window():
    """The closed form of the largest adaptive window (it was a loop over the outputs,
    minutes for output_size=2**30) against that loop."""
    for n in range(1, 40):
        for o in range(1, 90):
            ext = [-(-(i + 1) * n // o) - i * n // o for i in range(o)]
            assert nn.pooling.adaptive_span(n, o) == (max(ext), n % o == 0), (n, o)


def test_adaptive_output_past_int32_windows_is_refused_at_once():
    X = tc.placeholder((1, 2, 5, 5), name="X")
    with pytest.raises(tc.ShapeError, match=r"output_size 1073741824 over the 5 elements of "
                       r"the height: the windows' bounds"):
        nn.adaptive_avg_pool2d(X, 2**30)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_global_pooling_is_adaptive_to_one(layout):
    x = rng.standard_normal((2, 5, 7, 6)).astype("float32")
    data = x if layout == "NCHW" else to_last(x)
    X = tc.placeholder(data.shape, name="X")
    for kind, red in (("avg", np.mean), ("max", np.max)):
        Y = getattr(nn, f"global_{kind}_pool2d")(X, layout=layout)
        want = red(x, axis=(2, 3), keepdims=True)
        got = run([X], Y, [data])
        np.testing.assert_allclose(got if layout == "NCHW" else to_first(got), want,
                                   rtol=1e-5, atol=1e-6)


def test_existing_signatures_still_work():
    """max_pool2d(data, kernel, stride, padding, name) and avg_pool2d(..., padding,
    count_include_pad, name), positionally."""
    X = tc.placeholder((1, 2, 6, 6), name="X")
    assert nn.max_pool2d(X, 2, 2, 0, "mp").name == "mp"
    A = nn.avg_pool2d(X, 3, 1, 1, False, "ap")
    assert A.name == "ap" and A.op.input_tensors[0].name == "ap.sum"
    x = rng.standard_normal((1, 2, 6, 6)).astype("float32")
    np.testing.assert_allclose(run([X], A, [x]), F.avg_pool2d(
        torch.from_numpy(x), 3, 1, 1, count_include_pad=False).numpy(), rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------------
# the CPU template: trials=0 picks it, any rank and layout

@pytest.mark.parametrize("build", [
    lambda: nn.max_pool1d(tc.placeholder((2, 4, 40), name="X"), 3, 2, 1),
    lambda: nn.avg_pool2d(tc.placeholder((2, 9, 9, 32), name="X"), 3, 2, 1, layout="NHWC"),
    lambda: nn.max_pool3d(tc.placeholder((1, 2, 6, 8, 40), name="X"), 2),
    lambda: nn.adaptive_avg_pool2d(tc.placeholder((1, 3, 20, 40), name="X"), (6, 17)),
    # rows past 4 vectors: a tail in the unrolled vectors (max), one vector a step (avg)
    lambda: nn.max_pool2d(tc.placeholder((1, 2, 5, 150), name="X"), 3, 1, 1),
    lambda: nn.avg_pool2d(tc.placeholder((1, 2, 5, 150), name="X"), 3, 1, 1, False),
    lambda: nn.avg_pool2d(tc.placeholder((1, 2, 5, 128), name="X"), 3, 1, 1),
], ids=["max1d", "avg2d_nhwc", "max3d", "adaptive_avg2d", "max2d_150", "avg2d_150",
        "avg2d_128"])
def test_auto_schedule_uses_the_pooling_template(build):
    Y = build()
    X = Y.op.input_tensors[0]
    while X.op.input_tensors:
        X = X.op.input_tensors[0]
    auto = tc.auto_schedule([X, Y], trials=0)
    mine = sc.schedule_pool(Y)
    text = str(tc.lower(auto, [X, Y]))
    assert text == str(tc.lower(mine, [X, Y]))
    assert "vectorized" in text and "parallel" in text or tc.get_num_threads() == 1
    x = rng.standard_normal(tuple(int(e.value) for e in X.shape)).astype("float32")
    ref = run([X], Y, [x], schedule=tc.create_schedule(Y.op))
    np.testing.assert_allclose(run([X], Y, [x], schedule=mine), ref, rtol=1e-6, atol=1e-6)


def _template_against_plain(build, shape) -> str:
    """The pooling template of ``build(X)`` (the auto-scheduler's too) against the plain
    schedule, float32; its lowered text."""
    X = tc.placeholder(shape, name="X")
    Y = build(X)
    s = sc.schedule_pool(Y)
    text = str(tc.lower(s, [X, Y]))
    assert str(tc.lower(tc.auto_schedule([X, Y], trials=0), [X, Y])) == text
    x = rng.standard_normal(shape).astype("float32")
    ref = run([X], Y, [x], schedule=tc.create_schedule(Y.op))
    np.testing.assert_allclose(run([X], Y, [x], schedule=s), ref, rtol=1e-5, atol=1e-5)
    return text


@pytest.mark.parametrize("build,shape", [
    (nn.global_avg_pool2d, (2, 8, 56, 56)),     # rows of 56: the row, 3.5 vectors
    (nn.global_max_pool2d, (2, 8, 64, 64)),     # rows of 64: four vectors
    (lambda X: nn.adaptive_avg_pool2d(X, (2, 3)), (1, 3, 61, 61)),  # uneven, a tail
    (lambda X: nn.adaptive_max_pool3d(X, (1, 2, 1)), (1, 2, 5, 9, 40)),
    (nn.global_avg_pool2d, (2, 8, 14, 14)),     # a window of 196 over rows of 14
    (nn.global_avg_pool2d, (2, 5, 7, 7)),       # a 7x7 map: one partial vector of 7
    (nn.global_max_pool2d, (1, 3, 5, 9)),
    (lambda X: nn.adaptive_avg_pool2d(X, (3, 1)), (1, 2, 9, 11)),   # uneven rows
    (lambda X: nn.avg_pool2d(X, 6, padding=1, count_include_pad=False), (1, 2, 6, 6)),
    (lambda X: nn.adaptive_max_pool1d(X, 1), (2, 3, 37)),   # 2 vectors and a tail
], ids=["global_avg_56", "global_max_64", "adaptive_avg_61", "adaptive_max3d", "global_14",
        "global_avg_7", "global_max_5x9", "adaptive_avg_uneven", "avg_padded", "max1d_37"])
def test_large_windows_over_narrow_rows(build, shape):
    """A window over an output row narrower than a vector, channels first (global
    pooling): reduced along the data in vector partial results, the vectors as wide
    as the data row up to a vector (the row of a 7x7 map: 7 lanes, not one)."""
    text = _template_against_plain(build, shape)
    lanes = [int(v) for v in re.findall(r"vectorized \([\w.]+, 0, (\d+)\)", text)]
    assert ".rf[" in text and max(lanes) >= min(shape[-1], 8), text


@pytest.mark.parametrize("kind", ["avg", "max"])
@pytest.mark.parametrize("hw", [(7, 7), (56, 56), (3, 3), (14, 14)])
def test_global_pooling_of_a_plane_in_vectors(kind, hw):
    """Channels first, global pooling: the plane one contiguous run (its axes fused)
    in whole vectors of partial results (one, its last step guarded, where none divides
    the plane: 49 = 3 x 16 + 1), their lanes summed as a tree (halves down to 2)."""
    lanes = tc.target.cpu_model().lanes
    X = tc.placeholder((2, 3) + hw, name="X")
    Y = getattr(nn, f"global_{kind}_pool2d")(X)
    s = sc.schedule_pool(Y)
    text = str(tc.lower(s, [X, Y]))
    assert str(tc.lower(tc.auto_schedule([X, Y], trials=0), [X, Y])) == text
    plane = hw[0] * hw[1]
    F = min(plane, next((lanes * v for v in (4, 3, 2, 1) if plane % (lanes * v) == 0), lanes))
    assert f".rf: float32[1, 1, 1, 1, {F}]" in text and "ky.kx.fused" in text, text
    assert "float32[1, 1, 1, 1, 2]" in text, text   # (the tree's last half)
    x = rng.standard_normal((2, 3) + hw).astype("float32")
    ref = run([X], Y, [x], schedule=tc.create_schedule(Y.op))
    np.testing.assert_allclose(run([X], Y, [x], schedule=s), ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind,hw", [("avg", (3, 5)), ("max", (7, 7))])
def test_small_global_plane_unrolled_and_seeded(kind, hw):
    """Channels first, global pooling of a plane of at most ``UNROLL_WINDOW`` elements
    (:data:`pool.LEAN_PLANES`): the vectors' loop unrolled, so that every sum (or
    maximum) of the plane, the vectors' and each level of the tree, starts at its first
    point (``SEED_POOL_SUMS``, ``SEED_FIRST_TAP``): no store of the identity, no loop
    left in the task."""
    X = tc.placeholder((2, 3) + hw, name="X")
    Y = getattr(nn, f"global_{kind}_pool2d")(X)
    s = sc.schedule_pool(Y, "llvm -mtriple=x86_64-linux-gnu -mcpu=znver4")
    text = str(tc.lower(s, [X, Y]))
    assert not re.search(r"= (0f|-inff)\n", text), text
    assert not re.search(r"\n\s+for \(", text), text
    x = rng.standard_normal((2, 3) + hw).astype("float32")
    x[0, 0] = -0.0   # (a plane of -0.0: its sum is -0.0, the mean 0 either way)
    x[1, 2, 0, 0] = np.inf
    ref = run([X], Y, [x], schedule=tc.create_schedule(Y.op))
    got = run([X], Y, [x], schedule=sc.schedule_pool(Y))
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


def test_window_sums_seeded():
    """An average's window sums whose reduce loops are unrolled start at their first
    point (``schedule_ops.SEED_POOL_SUMS``): avg_pool2d 3x3/1 p1 in two steps, each
    output's sum from its first column sum, each column sum of an inner row from its
    first data row; against PyTorch."""
    X = tc.placeholder((1, 2, 6, 20), name="X")
    Y = nn.avg_pool2d(X, 3, 1, 1)
    s = sc.schedule_pool(Y, "llvm -mtriple=x86_64-linux-gnu -mcpu=znver4")
    text = str(tc.lower(s, [X, Y]))
    assert ".sep" in text and not re.search(r"avg_pool2d\.sum\[[^\]]*\] = 0f\n", text), text
    assert re.search(r"\.sum\.sep\[[^\]]*\] = (select\([^,]*, )?X\[", text), text
    x = rng.standard_normal((1, 2, 6, 20)).astype("float32")
    want = F.avg_pool2d(torch.from_numpy(x), 3, 1, 1).numpy()
    np.testing.assert_allclose(run([X], Y, [x], schedule=sc.schedule_pool(Y)), want,
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("build,shape", [
    (lambda X: nn.adaptive_avg_pool2d(X, 3), (2, 3, 12, 24)),         # 4x8 windows
    (lambda X: nn.max_pool2d(X, 2), (1, 3, 6, 40)),                   # rows of 2.5 vectors
    (lambda X: nn.max_pool2d(X, (3, 2), (2, 2), ((1, 1), (0, 0)), ceil_mode=True),
     (1, 2, 8, 36)),                                                   # padded rows, ceil
    (lambda X: nn.avg_pool2d(X, (3, 4), (1, 4), ((1, 1), (0, 0)), False), (1, 2, 5, 20)),
    (lambda X: nn.avg_pool2d(X, (3, 4), (1, 4), ((1, 1), (0, 0)), True), (1, 2, 5, 20)),
    (lambda X: nn.avg_pool3d(X, 2), (1, 2, 4, 6, 22)),                # 3-d, a row tail
    (lambda X: nn.adaptive_max_pool3d(X, (2, 3, 4)), (1, 2, 4, 6, 20)),
    (lambda X: nn.max_pool2d(X, 2), (1, 2, 4, 300)),                  # a long row
    # windows of one size, overlapping by a little (n / out not whole): their starts
    # x * n // out, read in constant patterns from the unrolled vectors of the row
    (lambda X: nn.adaptive_max_pool2d(X, (2, 7)), (1, 2, 10, 50)),     # 50 -> 7: 8 wide
    (lambda X: nn.adaptive_avg_pool2d(X, (4, 5)), (2, 3, 8, 16)),      # 16 -> 5: 4 wide
], ids=["adaptive_avg", "max_2x2", "max_padded_rows_ceil", "avg_excl", "avg_incl", "avg3d",
        "adaptive_max3d", "max_long_row", "adaptive_max_50_7", "adaptive_avg_16_5"])
def test_windows_side_by_side(build, shape):
    """Channels first, windows side by side along the rows (kernel = stride, no padding
    along them): each window row reduced in contiguous vectors into a local row
    (``.rf``), the windows from it; against the plain schedule and PyTorch's rules."""
    X = tc.placeholder(shape, name="X")
    Y = build(X)
    s = sc.schedule_pool(Y)
    text = str(tc.lower(s, [X, Y]))
    assert str(tc.lower(tc.auto_schedule([X, Y], trials=0), [X, Y])) == text
    assert ".rf[" in text and "(local)" in text, text
    x = rng.standard_normal(shape).astype("float32")
    ref = run([X], Y, [x], schedule=tc.create_schedule(Y.op))
    np.testing.assert_allclose(run([X], Y, [x], schedule=s), ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("build", [
    lambda X: nn.max_pool2d(X, 2, 2, ((0, 0), (1, 1))),   # padded along the row
    lambda X: nn.max_pool2d(X, 2, 2, dilation=(1, 2)),     # taps apart
    lambda X: nn.max_pool2d(X, 3, 2),                      # overlapping windows
    lambda X: nn.adaptive_avg_pool2d(X, (4, 6)),           # 16 / 6: windows of 3 and 4
    lambda X: nn.adaptive_max_pool2d(X, (4, 15)),          # windows of 2, rows of 30 > 1.25 x 16
], ids=["padded", "dilated", "overlapping", "unequal", "overlapping_adaptive"])
def test_windows_not_side_by_side(build):
    """Only windows that tile the data row take the row-then-windows path."""
    X = tc.placeholder((1, 2, 8, 16), name="X")
    Y = build(X)
    pool = next(op for op in [Y.op] + [t.op for t in Y.op.input_tensors]
                if "pool_" in (op.tag or "") and op.reduce_axis)
    assert not _tiles_rows(pool, tc.target.cpu_model().lanes)
    x = rng.standard_normal((1, 2, 8, 16)).astype("float32")
    ref = run([X], Y, [x], schedule=tc.create_schedule(Y.op))
    np.testing.assert_allclose(run([X], Y, [x]), ref, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------------
# dtypes, symbolic batch, CUDA emulation


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_avg_sums_in_float32(dtype):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    npdt = np.float16 if dtype == "float16" else ml_dtypes.bfloat16
    x = rng.standard_normal((2, 4, 12, 10)).astype(npdt)
    X = tc.placeholder(x.shape, dtype, name="X")
    Y = nn.avg_pool2d(X, 3, 2, 1, count_include_pad=False, ceil_mode=True)
    assert Y.dtype == dtype and Y.op.input_tensors[0].dtype == "float32"
    got = run([X], Y, [x]).astype(np.float64)
    want = np_pool(x.astype(np.float32), "avg", (3, 3), (2, 2), [(1, 1)] * 2, (1, 1), True,
                   False)
    tol = 1e-3 if dtype == "float16" else 8e-3
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    M = nn.max_pool2d(X, 3, 2, 1, layout="NCHW")
    got = run([X], M, [x]).astype(np.float64)
    np.testing.assert_array_equal(got, np_pool(x.astype(np.float32), "max", (3, 3), (2, 2),
                                               [(1, 1)] * 2, (1, 1), False, True))


def test_symbolic_batch():
    n = tc.var("n")
    X = tc.placeholder((n, 3, 11, 9), name="X")
    ops = [nn.max_pool2d(X, 3, 2, 1, ceil_mode=True), nn.avg_pool2d(X, 2, 1, (0, 1, 1, 0)),
           nn.adaptive_avg_pool2d(X, (4, 5))]
    for Y in ops:
        f = tc.build(tc.auto_schedule([X, Y]), [X, Y])
        for b in (1, 3):
            x = rng.standard_normal((b, 3, 11, 9)).astype("float32")
            ref = run([X], Y, [x], schedule=tc.create_schedule(Y.op))
            out = np.zeros((b,) + tuple(int(e.value) for e in Y.shape[1:]), "float32")
            f(x, out)
            np.testing.assert_allclose(out, ref, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("build,shape", [
    (lambda X: nn.max_pool2d(X, 3, 2, 1), (2, 3, 9, 9)),
    (lambda X: nn.avg_pool2d(X, 3, 2, (0, 1, 2, 1), False, ceil_mode=True, layout="NHWC"),
     (2, 9, 8, 5)),
    (lambda X: nn.max_pool1d(X, 3, 2, 1, dilation=2), (2, 3, 17)),
    (lambda X: nn.avg_pool3d(X, 2, layout="NDHWC"), (1, 4, 6, 4, 3)),
    (lambda X: nn.adaptive_max_pool2d(X, (3, 4)), (2, 3, 7, 9)),
    (lambda X: nn.global_avg_pool2d(X), (2, 3, 7, 7)),
], ids=["max2d", "avg2d_nhwc", "max1d", "avg3d", "adaptive_max2d", "global_avg"])
def test_cuda_emulation(build, shape):
    X = tc.placeholder(shape, name="X")
    Y = build(X)
    x = rng.standard_normal(shape).astype("float32")
    ref = run([X], Y, [x], schedule=tc.create_schedule(Y.op))
    np.testing.assert_allclose(run([X], Y, [x], target="cuda-emu"), ref, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------------
# gradients

# max pooling whose dilated taps step over the data: windows on padding only, -inf as
# PyTorch computes them (name, shape NC..., kernel, stride, padding pairs, dilation,
# ceil_mode); the first is the ops fuzz family's seed 30884, once refused.  Within
# PyTorch's padding limit such a window is a dimension's only one; asymmetric padding
# mixes them with windows on data (checked against the numpy reference alone)
PADDING_ONLY = [
    ("2d_height1", (1, 3, 1, 6), (2, 2), (1, 1), [(1, 1)] * 2, (2, 2), False),
    ("2d_ceil", (2, 16, 1, 33), (2, 2), (2, 2), [(1, 1)] * 2, (2, 2), True),
    ("3d", (1, 2, 1, 5, 4), (2, 2, 2), (1, 1, 1), [(1, 1)] * 3, (2, 1, 2), False),
    ("1d_mixed", (2, 4, 2), (2,), (1,), [(2, 1)], (3,), False),
    ("2d_mixed", (1, 3, 2, 7), (2, 3), (1, 2), [(1, 2), (1, 0)], (3, 2), True),
]


@pytest.mark.parametrize("layout", ["first", "last"])
@pytest.mark.parametrize("sched", ["plain", "auto"])
@pytest.mark.parametrize("case", PADDING_ONLY, ids=lambda c: c[0])
def test_max_windows_on_padding_only_are_minus_inf(case, sched, layout):
    name, shape, k, s, pads, d, ceil = case
    nd = len(shape) - 2
    x = rng.standard_normal(shape).astype("float32")
    want = np_pool(x, "max", k, s, pads, d, ceil, True)
    assert np.isneginf(want).any(), "the case must have a window on padding only"
    ref = torch_pool(x, "max", nd, k, s, pads, d, ceil, True)
    if "mixed" in name:
        assert ref is None and np.isfinite(want).any()
    else:
        np.testing.assert_array_equal(want, ref)
    lay = nn.pooling.LAYOUTS[nd][0 if layout == "first" else 1]
    data = x if layout == "first" else to_last(x)
    X = tc.placeholder(data.shape, name="X")
    Y = _operator("max", nd)(X, k, s, pads, dilation=d, ceil_mode=ceil, layout=lay)
    got = run([X], Y, [data], schedule=None if sched == "auto" else tc.create_schedule(Y.op))
    np.testing.assert_array_equal(got if layout == "first" else to_first(got), want)


def test_max_window_on_padding_only_has_no_gradient():
    """Its gradient goes nowhere: the data's gradient is zero.  (PyTorch 2.13's backward
    is not the reference here: its index for such a window points past the plane, so its
    gradient lands in the next channel's plane, and past the tensor for the last one.)"""
    x = rng.standard_normal((2, 3, 1, 6))
    X = tc.placeholder(x.shape, "float64", name="X")
    Y = nn.max_pool2d(X, 2, 1, 1, dilation=2)
    H = tc.placeholder(Y.shape, "float64", name="H")
    (G,) = tc.gradient(Y, [X], head=H)
    f = tc.build(tc.create_schedule([Y.op, G.op]), [X, H, Y, G])
    h = rng.standard_normal(tuple(int(e.value) for e in Y.shape))
    y, g = np.zeros(h.shape), np.full(x.shape, np.nan)
    f(x, h, y, g)
    np.testing.assert_array_equal(y, F.max_pool2d(torch.from_numpy(x), 2, 1, 1, 2).numpy())
    assert np.isneginf(y).all()
    np.testing.assert_array_equal(g, np.zeros(x.shape))


F64 = "float64"


def _torch_grad(fn, x, h):
    t = torch.tensor(x, requires_grad=True)
    out = fn(t)
    out.backward(torch.tensor(h))
    return out.detach().numpy(), t.grad.numpy()


def _grad_against_torch(op, top, x, last):
    """``(y, g, want_y, want_g)``: tecomp's ``op`` and its data gradient for a random
    head over ``x`` (float64, channels first; passed channels last with ``last``), and
    PyTorch's ``top``'s, all channels first."""
    data = to_last(x) if last else x
    X = tc.placeholder(data.shape, F64, name="X")
    Y = op(X)
    H = tc.placeholder(Y.shape, F64, name="H")
    (G,) = tc.gradient(Y, [X], head=H)
    f = tc.build(tc.create_schedule([Y.op, G.op]), [X, H, Y, G])
    h = rng.standard_normal(tuple(top(torch.from_numpy(x)).shape))
    want_y, want_g = _torch_grad(top, x, h)
    y, g = np.zeros(tuple(int(e.value) for e in Y.shape)), np.zeros(data.shape)
    f(data, to_last(h) if last else h, y, g)
    return (to_first(y) if last else y), (to_first(g) if last else g), want_y, want_g


GRAD_CASES = [  # name, tecomp op, torch op (NC... layout), shape, ties
    ("max1d_d2_ceil", lambda X: nn.max_pool1d(X, 3, 2, 1, dilation=2, ceil_mode=True),
     lambda t: F.max_pool1d(t, 3, 2, 1, 2, True), (2, 3, 13), False),
    ("max2d_nhwc_ties", lambda X: nn.max_pool2d(X, 3, 1, 1, layout="NHWC"),
     lambda t: F.max_pool2d(t, 3, 1, 1), (2, 3, 6, 6), True),
    ("max3d_ties", lambda X: nn.max_pool3d(X, 2, 1), lambda t: F.max_pool3d(t, 2, 1),
     (1, 2, 4, 4, 4), True),
    ("avg1d_ceil_excl", lambda X: nn.avg_pool1d(X, 3, 2, 1, False, ceil_mode=True),
     lambda t: F.avg_pool1d(t, 3, 2, 1, True, False), (2, 3, 12), False),
    ("avg3d_ndhwc", lambda X: nn.avg_pool3d(X, 3, 2, 1, layout="NDHWC", ceil_mode=True),
     lambda t: F.avg_pool3d(t, 3, 2, 1, True), (1, 2, 5, 6, 4), False),
    ("adaptive_max2d_ties", lambda X: nn.adaptive_max_pool2d(X, (3, 4)),
     lambda t: F.adaptive_max_pool2d(t, (3, 4)), (2, 2, 7, 9), True),
    ("adaptive_avg3d", lambda X: nn.adaptive_avg_pool3d(X, (2, 3, 2)),
     lambda t: F.adaptive_avg_pool3d(t, (2, 3, 2)), (1, 2, 5, 7, 3), False),
    ("adaptive_avg1d_nwc", lambda X: nn.adaptive_avg_pool1d(X, 4, layout="NWC"),
     lambda t: F.adaptive_avg_pool1d(t, 4), (2, 3, 10), False),
]


@pytest.mark.parametrize("name,op,top,shape,ties", GRAD_CASES, ids=[c[0] for c in GRAD_CASES])
def test_gradient_matches_pytorch(name, op, top, shape, ties):
    """The data gradient of every kind, rank and layout against PyTorch's autograd
    (max: to the first maximum of each window, ties included)."""
    last = "nhwc" in name or "ndhwc" in name or "nwc" in name
    x = rng.integers(0, 3, shape).astype(F64) if ties else rng.standard_normal(shape)
    y, g, want_y, want_g = _grad_against_torch(op, top, x, last)
    np.testing.assert_allclose(y, want_y, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(g, want_g, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("nan", [False, True], ids=["inf", "inf_nan"])
@pytest.mark.parametrize("name", ["max1d_d2_ceil", "max2d_nhwc_ties", "max3d_ties"])
def test_max_gradient_with_minus_inf_data_matches_pytorch(name, nan):
    """Windows whose data are all -inf next to the padding (-inf too): the gradient goes
    to the window's first data element, never to the padding; a window with NaNs gives
    it to its last NaN (PyTorch's rules)."""
    _, op, top, shape, _ = next(c for c in GRAD_CASES if c[0] == name)
    last = "nhwc" in name
    # its own generator: the module's one draws what the tests run before it left, and
    # a dilated window can miss every NaN of some draws (the check below needs one)
    gen = np.random.default_rng(581)
    x = gen.standard_normal(shape)
    x[gen.random(shape) < 0.7] = -np.inf
    if nan:
        x[gen.random(shape) < 0.1] = np.nan
    y, g, want_y, want_g = _grad_against_torch(op, top, x, last)
    np.testing.assert_array_equal(y, want_y)
    assert not nan or np.isnan(want_y).any()
    np.testing.assert_allclose(g, want_g, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", ["max1d_d2_ceil", "avg1d_ceil_excl", "avg3d_ndhwc",
                                  "adaptive_max2d_ties", "adaptive_avg3d"])
def test_gradcheck(name):
    _, op, _, shape, _ = next(c for c in GRAD_CASES if c[0] == name)
    X = tc.placeholder(to_last(np.zeros(shape)).shape if "ndhwc" in name else shape, F64,
                       name="X")
    assert ad.gradcheck(op(X), [X], target="reference", max_points=24)


def _short_row_cases():
    """Pooling over rows padded at their ends whose output row takes at most two
    vectors of this machine (its lanes from the target's machine model)."""
    L = tc.target.cpu_model().lanes
    w = 2 * (2 * L - 4)   # a 3/2 p1 window over it: an output row of 2L - 4
    return [
        ("max2d", (2, 3, 9, w), lambda X: nn.max_pool2d(X, 3, 2, 1), True),
        ("max2d_ceil", (1, 2, 8, w + 1), lambda X: nn.max_pool2d(X, 3, 2, 1, ceil_mode=True),
         True),
        ("max2d_dilated", (1, 2, 9, w), lambda X: nn.max_pool2d(X, 3, 2, 2, dilation=2), True),
        ("max2d_stride3", (1, 2, 13, 3 * L), lambda X: nn.max_pool2d(X, 3, 3, 1), True),
        ("max2d_asym", (1, 2, 7, w), lambda X: nn.max_pool2d(X, 3, 2, ((1, 0), (2, 0))),
         True),
        # (the maxima of a row narrower than a vector in a local block: not taken)
        ("max2d_one_vector", (1, 2, 6, L), lambda X: nn.max_pool2d(X, 3, 2, 1), False),
        ("max1d", (2, 3, w), lambda X: nn.max_pool1d(X, 3, 2, 1), True),
        ("max3d", (1, 2, 7, 9, w), lambda X: nn.max_pool3d(X, 3, 2, 1), True),
        ("avg3d_excl", (1, 2, 7, 9, w + 1),
         lambda X: nn.avg_pool3d(X, 3, 2, 1, False, ceil_mode=True), True),
        # not taken: an average over a 2-d window, rows of more vectors, no padding
        ("avg2d", (1, 2, 9, w), lambda X: nn.avg_pool2d(X, 3, 2, 1), False),
        ("max2d_long", (1, 2, 5, 4 * w), lambda X: nn.max_pool2d(X, 3, 2, 1), False),
        ("max2d_unpadded", (1, 2, 9, w), lambda X: nn.max_pool2d(X, 3, 2), False),
    ]


def _pool_data(name, shape):
    """float32 data for a pooling case ``name``: normal values, and for a max pooling
    NaNs and infinities of both signs scattered in (the windows' NaN tests)."""
    x = rng.standard_normal(shape).astype("float32")
    if name.startswith("max"):
        flat = x.reshape(-1)
        flat[rng.choice(flat.size, 7, replace=False)] = np.nan
        flat[rng.choice(flat.size, 5, replace=False)] = np.inf
        flat[rng.choice(flat.size, 5, replace=False)] = -np.inf
    return x


def _pool_template_case(case):
    """A ``(name, shape, build, taken)`` case's pooling scheduled by the template, its
    lowered text (the auto-scheduler's at trials=0 the same): ``(name, shape, taken, X,
    Y, schedule, text)``."""
    name, shape, build, taken = case
    X = tc.placeholder(shape, name="X")
    Y = build(X)
    s = sc.schedule_pool(Y)
    text = str(tc.lower(s, [X, Y]))
    assert str(tc.lower(tc.auto_schedule([X, Y], trials=0), [X, Y])) == text
    return name, shape, taken, X, Y, s, text


@pytest.mark.parametrize("case", _short_row_cases(), ids=lambda c: c[0])
def test_short_padded_rows(case, monkeypatch):
    """Channels first, rows padded at their ends and at most two vectors of output
    (max pooling, or a 3-d window): the outer rows partitioned on the padding's tests
    and the first vector's taps into the padding read by wide masked loads (``pragma
    masked_wide_loads``), a 3-d max pooling's maxima in a local block; against PyTorch (padding, ceil_mode, dilation,
    count_include_pad, asymmetric padding by the plain schedule).  (Windows in two
    steps, ``SEPARABLE``, off: they take the overlapping ones.)"""
    monkeypatch.setattr(pool, "SEPARABLE", False)
    name, shape, taken, X, Y, s, text = _pool_template_case(case)
    assert ("pragma_masked_wide_loads" in text) == taken, text
    if taken and len(shape) > 3:   # (the first output row peeled off: its taps tested)
        assert "for (i2, 0," not in text and "for (i2, 1," in text, text
    if name.startswith("max") and taken:
        # the maxima in a local block copied out: a 3-d window's 27 taps over short
        # padded rows (SHORT_ROWS_IN_A_LOCAL); a 2-d window's in the output
        assert (f"{Y.op.name}.local" in text) == (name == "max3d"), text
    # 2-d max pooling over short padded rows keeping its maxima in the output: the data
    # rows of the output rows the machine model's window_prefetch_bytes ahead
    # prefetched (the data, not its inlined padding): on Zen 5, not on Zen 4
    for cpu, ahead in (("znver5", True), ("znver4", False)):
        other = str(tc.lower(sc.schedule_pool(Y, f"llvm -mcpu={cpu}"), [X, Y]))
        assert ("prefetch X[" in other) == (name.startswith("max2d") and taken and ahead), \
            (cpu, other)
    x = rng.standard_normal(shape).astype("float32")
    if name in ("max2d", "max3d"):
        fn = getattr(F, f"max_pool{len(shape) - 2}d")
        ref = fn(torch.from_numpy(x), 3, 2, 1).numpy()
    else:
        ref = run([X], Y, [x], schedule=tc.create_schedule(Y.op))
    np.testing.assert_allclose(run([X], Y, [x], schedule=s), ref, rtol=1e-5, atol=1e-6)


def _separable_cases():
    """Pooling whose windows overlap along the rows, strided or at a stride of 1
    (channels first, 2-d and 3-d, an output row of a vector or more of this machine),
    and some that are not."""
    L = tc.target.cpu_model().lanes
    w = 4 * L + 3   # odd: a partial vector at the ends of the row and of the local row
    return [
        ("max2d", (2, 3, 9, w), lambda X: nn.max_pool2d(X, 3, 2, 1), True),
        ("max2d_ceil", (1, 2, 8, w + 1),
         lambda X: nn.max_pool2d(X, 3, 2, 1, ceil_mode=True), True),
        ("max2d_dilated", (1, 2, 9, w), lambda X: nn.max_pool2d(X, 3, 2, 1, dilation=2),
         True),
        ("max2d_k35_s23", (1, 2, 11, w), lambda X: nn.max_pool2d(X, (3, 5), (2, 3), (1, 2)),
         True),
        ("max2d_unpadded", (1, 2, 9, w), lambda X: nn.max_pool2d(X, 3, 2), True),
        ("max2d_asym", (1, 2, 7, w), lambda X: nn.max_pool2d(X, 3, 2, ((1, 0), (2, 0))),
         True),
        ("max3d", (1, 2, 5, 7, 2 * L + 5), lambda X: nn.max_pool3d(X, 3, 2, 1), True),
        ("max3d_ceil", (1, 2, 6, 6, 2 * L + 6),
         lambda X: nn.max_pool3d(X, 3, 2, 1, ceil_mode=True), True),
        ("avg2d", (1, 2, 9, w), lambda X: nn.avg_pool2d(X, 3, 2, 1), True),
        ("avg2d_excl_ceil", (1, 2, 8, w + 1),
         lambda X: nn.avg_pool2d(X, 3, 2, 1, ceil_mode=True, count_include_pad=False), True),
        ("avg3d_excl", (1, 2, 5, 7, 2 * L + 5),
         lambda X: nn.avg_pool3d(X, 3, 2, 1, count_include_pad=False), True),
        # a stride of 1 (STRIDE1_SEPARABLE): each output the sum (max) of K neighbours
        # of the local row, read from the registers it was stored in
        ("avg2d_stride1", (1, 2, 9, w), lambda X: nn.avg_pool2d(X, 3, 1, 1), True),
        ("avg2d_stride1_excl_ceil", (1, 2, 8, w + 1),
         lambda X: nn.avg_pool2d(X, (3, 5), 1, (1, 2), ceil_mode=True,
                                 count_include_pad=False), True),
        ("max2d_stride1", (2, 3, 9, w), lambda X: nn.max_pool2d(X, 3, 1, 1), True),
        ("max2d_stride1_dilated", (1, 2, 9, 2 * L + 1),
         lambda X: nn.max_pool2d(X, 3, 1, 1, dilation=2), True),
        ("avg2d_stride1_long", (1, 2, 5, 9 * L + 3), lambda X: nn.avg_pool2d(X, 3, 1, 1),
         True),
        # not taken: windows apart, 1-d, channels last, a narrow row
        ("max2d_stride3", (1, 2, 13, 3 * L + 1), lambda X: nn.max_pool2d(X, 3, 3, 1), False),
        ("max1d", (2, 3, w), lambda X: nn.max_pool1d(X, 3, 2, 1), False),
        ("max2d_nhwc", (1, 9, w, 3), lambda X: nn.max_pool2d(X, 3, 2, 1, layout="NHWC"),
         False),
        ("max2d_narrow", (1, 2, 9, L), lambda X: nn.max_pool2d(X, 3, 2, 1), False),
    ]


@pytest.mark.parametrize("case", _separable_cases(), ids=lambda c: c[0])
def test_separable_windows(case, monkeypatch):
    """Windows overlapping along strided rows, channels first: the window in two steps
    (``Schedule.separate``): per output row, the window's rows reduced into a local row
    over the data's columns (``.sep``), then each output from its taps of it.  Max
    pooling exactly PyTorch's (NaN and infinities in the windows); average pooling
    within float32 rounding (the sums in another order); the same values with the A/B
    switch ``SEPARABLE`` off; the trace replays."""
    from tecomp.schedule.trace import replay

    name, shape, taken, X, Y, s, text = _pool_template_case(case)
    assert (f"{Y.op.input_tensors[0].op.name if name.startswith('avg') else Y.op.name}"
            ".sep[" in text) == taken, text
    if taken:
        assert ".sep: float32" in text and "(local)" in text, text
        again = replay(s.trace.to_json(), [Y])
        assert str(tc.lower(again, [X, Y])) == text
    if "stride1" in name:   # (the A/B switch: a stride of 1 in one step, as before)
        monkeypatch.setattr(pool, "STRIDE1_SEPARABLE", False)
        assert ".sep[" not in str(tc.lower(sc.schedule_pool(Y), [X, Y]))
        monkeypatch.setattr(pool, "STRIDE1_SEPARABLE", True)
    x = _pool_data(name, shape)
    got = run([X], Y, [x], schedule=s)
    monkeypatch.setattr(pool, "SEPARABLE", False)
    before = run([X], Y, [x])
    ref = run([X], Y, [x], schedule=tc.create_schedule(Y.op))
    if name.startswith("max"):
        np.testing.assert_array_equal(got, ref)
        np.testing.assert_array_equal(got, before)
        if name in ("max2d", "max2d_dilated", "max3d", "max2d_stride1",
                    "max2d_stride1_dilated"):
            nd, d = len(shape) - 2, 2 if "dilated" in name else 1
            fn = getattr(F, f"max_pool{nd}d")
            stride = 1 if "stride1" in name else 2
            want = fn(torch.from_numpy(x), 3, stride, 1, dilation=d).numpy()
            np.testing.assert_array_equal(got, want)
    elif name.startswith("avg2d_stride1"):
        kw = ({"kernel_size": (3, 5), "padding": (1, 2), "ceil_mode": True,
               "count_include_pad": False} if "excl" in name
              else {"kernel_size": 3, "padding": 1})
        want = F.avg_pool2d(torch.from_numpy(x), stride=1, **kw).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got, before, rtol=1e-5, atol=1e-6)
    else:
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got, before, rtol=1e-5, atol=1e-6)



@pytest.mark.parametrize("name,build,tfn", [
    ("max2d", lambda X: nn.max_pool2d(X, 3, 2, 1), lambda t: F.max_pool2d(t, 3, 2, 1)),
    ("avg2d_ceil", lambda X: nn.avg_pool2d(X, 3, 2, 1, ceil_mode=True),
     lambda t: F.avg_pool2d(t, 3, 2, 1, ceil_mode=True)),
])
def test_strided_row_from_registers(name, build, tfn, monkeypatch):
    """Overlapping windows at a stride of 2 in two steps, the data and output in the
    cache (``STRIDED_ROW_IN_REGISTERS``): the output row's vectors unrolled (their taps
    from the local row's registers); from memory (the model's ``stream_output_bytes``
    under them; unrolled there too with ``STRIDED_ROW_LOOP_FROM_MEMORY`` off), or with
    the switch off, a loop over them.  PyTorch's values (exact for
    max, NaN and infinities in the windows)."""
    from dataclasses import replace

    L = tc.target.cpu_model().lanes
    shape = (1, 2, 9, 4 * L + 3)   # (rows of 2L + 2 outputs: a partial vector)
    X = tc.placeholder(shape, name="X")
    Y = build(X)
    info = tc.target.cpu_model("llvm -mcpu=znver4")
    small = replace(info, stream_output_bytes=64)
    loop = re.compile(r"for \(i3\.outer, 0, \d+\)")
    s = _template_for(Y, info)
    text = str(tc.lower(s, [X, Y]))
    assert ".sep[" in text and not loop.search(text) and "unrolled (i3.outer, 0," in text, text
    assert loop.search(str(tc.lower(_template_for(Y, small), [X, Y])))
    monkeypatch.setattr(pool, "STRIDED_ROW_LOOP_FROM_MEMORY", False)
    assert not loop.search(str(tc.lower(_template_for(Y, small), [X, Y])))
    monkeypatch.setattr(pool, "STRIDED_ROW_LOOP_FROM_MEMORY", True)
    monkeypatch.setattr(pool, "STRIDED_ROW_IN_REGISTERS", False)
    assert loop.search(str(tc.lower(_template_for(Y, info), [X, Y])))
    x = _pool_data(name, shape)
    got = run([X], Y, [x], schedule=s)
    want = tfn(torch.from_numpy(x)).numpy()
    if name.startswith("max"):
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)

def _pairs_cases():
    """1-d pooling, channels first: windows side by side along a row of whole vectors
    of outputs, of an even kernel of 4 or more (the pairs first), and some that are
    not."""
    L = tc.target.cpu_model().lanes
    w = 4 * (VECTORS + 1) * L   # outputs: steps of a vector (the most that divide them)
    return [
        ("avg1d_k4", (2, 3, w), lambda X: nn.avg_pool1d(X, 4), True),
        ("max1d_k4", (2, 3, w), lambda X: nn.max_pool1d(X, 4), True),
        ("avg1d_k6_rest", (1, 2, 6 * 2 * VECTORS * L + 5), lambda X: nn.avg_pool1d(X, 6),
         True),
        ("max1d_k8", (1, 2, 8 * 2 * L + 7), lambda X: nn.max_pool1d(X, 8), True),
        ("avg1d_k4_excl", (1, 2, w), lambda X: nn.avg_pool1d(X, 4, count_include_pad=False),
         True),
        # not taken: padding along the row (ceil mode too), an odd kernel, overlapping
        # windows, a row under a vector or not of whole vectors, channels last
        ("avg1d_k4_part", (1, 2, 4 * (L + 3)), lambda X: nn.avg_pool1d(X, 4), False),
        ("avg1d_k4_ceil", (1, 2, w + 1), lambda X: nn.avg_pool1d(X, 4, ceil_mode=True),
         False),
        ("max1d_k4_p1", (1, 2, w), lambda X: nn.max_pool1d(X, 4, 4, 1), False),
        ("avg1d_k3", (1, 2, 3 * (L + 1)), lambda X: nn.avg_pool1d(X, 3), False),
        ("max1d_k4_s2", (1, 2, w), lambda X: nn.max_pool1d(X, 4, 2), False),
        ("max1d_narrow", (1, 2, 4 * (L - 1)), lambda X: nn.max_pool1d(X, 4), False),
        ("avg1d_nwc", (1, w, 3 * L), lambda X: nn.avg_pool1d(X, 4, layout="NWC"), False),
    ]


@pytest.mark.parametrize("case", _pairs_cases(), ids=lambda c: c[0])
def test_pairs_first(case, monkeypatch):
    """1-d windows side by side along a row of whole vectors (kernel = stride, even, 4
    or more), channels first: the window's pairs first (``PAIRS_FIRST``): a local row
    ``.rf`` of each pair's reduction (two taps of the data at a stride of 2), then each
    output from its ``K / 2`` pairs.  Max pooling exactly PyTorch's (NaN and infinities in the
    windows) and the plain schedule's; averages within float32 rounding (the sums in
    pairs); not taken with the switch off; the trace replays."""
    from tecomp.schedule.trace import replay

    name, shape, taken, X, Y, s, text = _pool_template_case(case)
    red = Y.op.input_tensors[0].op.name if name.startswith("avg") else Y.op.name
    assert (f"{red}.rf[" in text) == taken, text
    if taken:
        L = tc.target.cpu_model().lanes
        # (the local row: a step's output vectors, the most up to VECTORS that divide
        # the row, by the K / 2 pairs of each)
        K = int((Y.op.input_tensors[0].op if name.startswith("avg") else Y.op)
                .reduce_axis[0].dom.extent.value)
        last = int(Y.shape[-1].value)
        U = max(u for u in range(VECTORS, 0, -1) if last % (L * u) == 0)
        assert f"{red}.rf: float32[1, 1, {U * L}, {K // 2}] (local)" in text, text
        again = replay(s.trace.to_json(), [Y])
        assert str(tc.lower(again, [X, Y])) == text
        monkeypatch.setattr(pool, "PAIRS_FIRST", False)
        assert f"{red}.rf[" not in str(tc.lower(sc.schedule_pool(Y), [X, Y]))
        monkeypatch.setattr(pool, "PAIRS_FIRST", True)
    x = _pool_data(name, shape)
    got = run([X], Y, [x], schedule=s)
    ref = run([X], Y, [x], schedule=tc.create_schedule(Y.op))
    if name.endswith("nwc"):
        return np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
    k = int(next((p for p in name.split("_") if p[0] == "k"), "k4")[1:])
    kw = ({"stride": 2} if name.endswith("s2") else {"padding": 1} if name.endswith("p1")
          else {})
    if name.startswith("max"):
        want = F.max_pool1d(torch.from_numpy(x), k, **kw).numpy()
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(got, ref)
    else:
        kw.update(ceil_mode=name.endswith("ceil"), count_include_pad="excl" not in name)
        want = F.avg_pool1d(torch.from_numpy(x), k, **kw).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


def test_separate_a_window_sum():
    """``s.separate`` on a plain TE window (not an operator's): ``C[i, j] = sum(A[i + r,
    j * 2 + k])`` as ``C.sep[i, w] = sum(A[i + r, w])``, then ``C`` over ``k``; the same
    sums, and its trace printed as the Python a user would write."""
    A = tc.placeholder((10, 41), name="A")
    r, k = tc.reduce_axis((0, 3), name="r"), tc.reduce_axis((0, 5), name="k")
    C = tc.compute((8, 19), lambda i, j: tc.sum(A[i + r, j * 2 + k], axis=[r, k]), name="C")
    s = tc.create_schedule(C.op)
    sep = s.separate(C, k)
    assert sep.name == "C.sep" and [int(e.value) for e in sep.shape] == [8, 41]
    assert len(sep.op.reduce_axis) == 1 and len(s[C].op.reduce_axis) == 1
    s[sep].compute_at(s[C], C.op.axis[0])
    text = str(tc.lower(s, [A, C]))
    assert "C.sep[" in text, text
    a = rng.standard_normal((10, 41)).astype("float32")
    want = np.array([[a[i:i + 3, 2 * j:2 * j + 5].sum() for j in range(19)]
                     for i in range(8)])
    np.testing.assert_allclose(run([A], C, [a], schedule=s), want, rtol=1e-5, atol=1e-5)
    assert "s.separate(" in s.trace.python(), s.trace.python()


def test_rows_ahead_from_the_machine_model():
    """The 2-d max pooling's data rows prefetched ``window_prefetch_bytes`` ahead, in
    output rows: that over the data rows an output row moves on by (stride x a data
    row's bytes), at least one; none where the model has none."""
    from dataclasses import replace
    from tecomp.strategy.cpu.pool import _rows_ahead

    z5 = tc.target.cpu_model("llvm -mcpu=znver5")
    assert z5.window_prefetch_bytes == 3584
    assert tc.target.cpu_model("llvm -mcpu=znver4").window_prefetch_bytes == 0
    for shape, k, s, want in [((8, 64, 56, 56), 3, 2, 8),      # 2 rows of 224 B: 8
                              ((8, 64, 56, 112), 3, 2, 4),
                              ((8, 64, 56, 57), 3, 1, 15),     # (the data's 57, not 59)
                              ((1, 1, 8, 4096), 3, 2, 1)]:     # at least one
        X = tc.placeholder(shape, name="X")
        Y = nn.max_pool2d(X, k, s, 1)
        assert _rows_ahead(Y.op, z5) == want, (shape, s)
        assert _rows_ahead(Y.op, replace(z5, window_prefetch_bytes=0)) == 0


def test_channel_vectors_per_step(monkeypatch):
    """Vectors of the output row a step (machine facts given, not the host's): up to
    ``VECTORS``; channels last, a pixel's channels up to half the vector registers, past
    that the most that divide them (the average's sums need a constant region), else
    ``VECTORS``; with ``WHOLE_PIXELS`` off, ``VECTORS`` as before."""
    assert _channel_vectors(None, 16, 32, False) == 1
    assert _channel_vectors(256, 16, 32, True) == VECTORS          # channels first
    assert _channel_vectors(256, 16, 32, False) == 16              # a pixel of 256
    assert _channel_vectors(200, 16, 32, False) == 13              # 12.5 vectors
    assert _channel_vectors(256, 8, 16, False) == 8                # 32 vectors: 8 divide
    assert _channel_vectors(2048, 16, 32, False) == 16
    assert _channel_vectors(300, 16, 32, False) == VECTORS         # 19 vectors, no divisor
    assert _channel_vectors(48, 16, 32, False) == 3
    monkeypatch.setattr(pool, "WHOLE_PIXELS", False)
    assert _channel_vectors(256, 16, 32, False) == VECTORS


@pytest.mark.parametrize("build,shape", [
    (lambda X: nn.avg_pool2d(X, 2, layout="NHWC"), (2, 8, 6, 256)),
    (lambda X: nn.avg_pool2d(X, 3, 2, 1, False, layout="NHWC"), (1, 7, 9, 200)),
    (lambda X: nn.max_pool2d(X, 3, 2, 1, layout="NHWC"), (2, 7, 7, 264)),
    (lambda X: nn.avg_pool2d(X, 2, 1, (0, 1, 1, 0), layout="NHWC"), (1, 5, 5, 300)),
    (lambda X: nn.global_avg_pool2d(X, layout="NHWC"), (2, 3, 3, 1040)),
    (lambda X: nn.avg_pool3d(X, 2, layout="NDHWC"), (1, 4, 4, 4, 160)),
], ids=["avg2d_256", "avg2d_200_p1", "max2d_264_p1", "avg2d_300_asym", "global_1040",
        "avg3d_160"])
def test_channels_last_whole_pixels(build, shape):
    """Channels last, rows of several vectors: a step's vectors cover the pixel's
    channels (up to half the registers; odd counts a partial vector or fewer vectors a
    step), against the plain schedule; the auto-scheduler takes the template."""
    _template_against_plain(build, shape)


def test_channels_last_whole_pixels_symbolic_batch_and_half():
    """The same with a symbolic batch (float32) and in float16 (sums in float32)."""
    n = tc.var("n")
    X = tc.placeholder((n, 6, 6, 192), name="X")
    Y = nn.avg_pool2d(X, 2, layout="NHWC")
    f = tc.build(tc.auto_schedule([X, Y]), [X, Y])
    for b in (1, 3):
        x = rng.standard_normal((b, 6, 6, 192)).astype("float32")
        out = np.zeros((b, 3, 3, 192), "float32")
        f(x, out)
        want = x.reshape(b, 3, 2, 3, 2, 192).mean(axis=(2, 4))
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)
    x = rng.standard_normal((1, 6, 6, 192)).astype(np.float16)
    H = tc.placeholder(x.shape, "float16", name="H")
    got = run([H], nn.avg_pool2d(H, 2, layout="NHWC"), [x]).astype(np.float64)
    want = x.astype(np.float32).reshape(1, 3, 2, 3, 2, 192).mean(axis=(2, 4))
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)


def _template_for(Y, model):
    """The pooling template's schedule of ``Y`` for the machine model ``model`` (the
    rules' for the rest of the DAG)."""
    from tecomp.strategy.cpu.common import _auto_rest
    s = tc.create_schedule(Y.op)
    pool.pool_into(s, [Y], model)
    return _auto_rest(s, [Y], model)


@pytest.mark.parametrize("case", [
    ("max2d_nhwc", (2, 9, 11, 32), lambda X: nn.max_pool2d(X, 3, 2, 1, layout="NHWC"), True),
    ("avg3d_ndhwc", (1, 4, 6, 5, 48),
     lambda X: nn.avg_pool3d(X, 2, ceil_mode=True, layout="NDHWC"), True),
    ("max1d", (2, 3, 128), lambda X: nn.max_pool1d(X, 3, 2, 1), True),
    ("max1d_65", (2, 3, 130), lambda X: nn.max_pool1d(X, 3, 2, 1), False),   # rows of 65
    ("avg1d", (2, 3, 128), lambda X: nn.avg_pool1d(X, 4), True),
    ("max2d_nhwc_24", (2, 9, 11, 24), lambda X: nn.max_pool2d(X, 3, 2, 1, layout="NHWC"),
     False),   # (a pixel's 96 bytes: not whole cache lines)
], ids=lambda c: c[0])
def test_streamed_outputs(case, monkeypatch):
    """A pooling whose input and output take more than the machine model's
    ``stream_output_bytes`` (here 1 KiB; by default half the last-level cache) stores
    its output past the cache (``pragma nontemporal`` on the tasks' loop) where its
    rows are whole cache lines; none with ``STREAM_OUTPUT`` off or under the bound.
    The same values either way (aligned buffers: the streamed copy of the nest runs),
    against the plain schedule."""
    from dataclasses import replace

    name, shape, build, taken = case
    X = tc.placeholder(shape, name="X")
    Y = build(X)
    info = tc.target.cpu_model("llvm -mcpu=znver4")
    small = replace(info, stream_output_bytes=1024)
    s = _template_for(Y, small)
    text = str(tc.lower(s, [X, Y]))
    assert ("pragma_nontemporal" in text) == taken, text
    assert "pragma_nontemporal" not in str(tc.lower(_template_for(Y, info), [X, Y]))
    monkeypatch.setattr(pool, "STREAM_OUTPUT", False)
    assert "pragma_nontemporal" not in str(tc.lower(_template_for(Y, small), [X, Y]))
    x = tc.aligned(rng.standard_normal(shape).astype("float32"))
    got = tc.empty(tuple(int(e.value) for e in Y.shape), "float32")
    tc.build(s, [X, Y])(x, got)
    ref = run([X], Y, [x], schedule=tc.create_schedule(Y.op))
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


def _next_row_cases():
    L = tc.target.cpu_model().lanes
    c = 2 * L + 5   # (a pixel of two vectors and a part of one)
    return [
        # (name, shape, the operator, PyTorch's over channels-first data, taken)
        ("max2d_nhwc", (2, 9, 10, c), lambda X: nn.max_pool2d(X, 3, 2, 1, layout="NHWC"),
         lambda t: F.max_pool2d(t, 3, 2, 1), True),
        ("max2d_nhwc_ceil_dil", (1, 12, 11, L),
         lambda X: nn.max_pool2d(X, 3, 2, 1, dilation=2, ceil_mode=True, layout="NHWC"),
         lambda t: F.max_pool2d(t, 3, 2, 1, dilation=2, ceil_mode=True), True),
        ("avg2d_nhwc_excl", (1, 9, 8, c),
         lambda X: nn.avg_pool2d(X, 3, 2, 1, False, ceil_mode=True, layout="NHWC"),
         lambda t: F.avg_pool2d(t, 3, 2, 1, ceil_mode=True, count_include_pad=False), True),
        ("max3d_ndhwc", (1, 5, 7, 6, L), lambda X: nn.max_pool3d(X, 3, 2, 1, layout="NDHWC"),
         lambda t: F.max_pool3d(t, 3, 2, 1), True),
        ("max2d_nchw", (2, 3, 9, 2 * L + 7), lambda X: nn.max_pool2d(X, 3, 2, 1),
         lambda t: F.max_pool2d(t, 3, 2, 1), True),
        ("avg2d_nchw_ceil", (1, 3, 10, 2 * L + 6),
         lambda X: nn.avg_pool2d(X, 3, 2, 1, ceil_mode=True),
         lambda t: F.avg_pool2d(t, 3, 2, 1, ceil_mode=True), True),
        ("max2d_nchw_rows_s3", (1, 2, 11, 2 * L + 7),
         lambda X: nn.max_pool2d(X, (4, 3), (3, 2), 1),
         lambda t: F.max_pool2d(t, (4, 3), (3, 2), 1), True),
        # windows side by side along the rows (PREFETCH_WINDOW_ROWS): the local row's
        ("avg2d_nchw_side_by_side", (1, 3, 8, 2 * L + 6), lambda X: nn.avg_pool2d(X, 2),
         lambda t: F.avg_pool2d(t, 2), True),
        ("max2d_nchw_adaptive", (1, 2, 21, 56), lambda X: nn.adaptive_max_pool2d(X, (3, 7)),
         lambda t: F.adaptive_max_pool2d(t, (3, 7)), True),
        # not taken: a stride of 1 along the rows (the next row reads one row anew)
        ("avg2d_nhwc_s1", (1, 7, 9, c), lambda X: nn.avg_pool2d(X, 3, 1, 1, layout="NHWC"),
         lambda t: F.avg_pool2d(t, 3, 1, 1), False),
        ("max2d_nchw_rows_s1", (1, 2, 9, 2 * L + 7),
         lambda X: nn.max_pool2d(X, 3, (1, 2), 1),
         lambda t: F.max_pool2d(t, 3, (1, 2), 1), False),
        # not taken: no peeled pixels (unpadded) and no separated rows
        ("max2d_nhwc_unpadded", (1, 8, 8, c), lambda X: nn.max_pool2d(X, 2, layout="NHWC"),
         lambda t: F.max_pool2d(t, 2), False),
    ]


@pytest.mark.parametrize("case", _next_row_cases(), ids=lambda c: c[0])
def test_next_row_prefetched(case, monkeypatch):
    """A pooling whose data and output take more than the machine model's
    ``stream_output_bytes`` (here 64 bytes; by default half the last-level cache),
    channels last with its pixels peeled or channels first in two steps, a stride of 2
    or more along the rows: the next output row's data prefetched into the L2 along the
    current row (``PREFETCH_NEXT_ROW``: a prefetch of the data, not of the padding, at
    each pixel / each vector of the local row, at the next row's index; windows side by
    side along the rows too, ``PREFETCH_WINDOW_ROWS``).  Not under the bound, at a
    stride of 1 along the rows, or with a switch off.  PyTorch's values (exactly for
    max, with NaN and infinities in its windows); the trace replays."""
    from dataclasses import replace
    from tecomp.schedule.trace import replay

    name, shape, build, tfn, taken = case
    X = tc.placeholder(shape, name="X")
    Y = build(X)
    small = replace(tc.target.cpu_model("llvm -mcpu=znver4"), stream_output_bytes=64)
    s = _template_for(Y, small)
    text = str(tc.lower(s, [X, Y]))
    fetch = re.findall(r"prefetch \(L2\) (\w+)\[([^\n]*)\]\n", text)
    assert bool(fetch) == taken, text
    if taken:
        assert {t for t, _ in fetch} == {"X"}, fetch
        # (the next output row: channels last the fused rows' loop + 1, clamped to the
        # last; channels first the inner rows' data rows of row ``i2 + 1``; windows side
        # by side the window's rows ``ky`` of row ``i2 + 1``, clamped)
        assert any(re.search(r"min\(i0\.i1\.[\w.]*fused \+ 1, \d+\)|i2\*\d+ \+ X\.pf\d \+ \d"
                             r"|min\(i2 \+ 1, \d+\)\*\d+ \+ ky", i) for _, i in fetch), fetch
        assert str(tc.lower(replay(s.trace.to_json(), [Y]), [X, Y])) == text
    default = replace(small, stream_output_bytes=0)   # (half the last-level cache)
    assert "prefetch (" not in str(tc.lower(_template_for(Y, default), [X, Y]))
    monkeypatch.setattr(pool, "PREFETCH_NEXT_ROW", False)
    assert "prefetch (" not in str(tc.lower(_template_for(Y, small), [X, Y]))
    monkeypatch.setattr(pool, "PREFETCH_NEXT_ROW", True)
    if "side_by_side" in name or "adaptive" in name:
        monkeypatch.setattr(pool, "PREFETCH_WINDOW_ROWS", False)
        assert "prefetch (" not in str(tc.lower(_template_for(Y, small), [X, Y]))
        monkeypatch.setattr(pool, "PREFETCH_WINDOW_ROWS", True)
    first = name.split("_")[1].startswith("nc")
    x = _pool_data(name, shape)
    got = run([X], Y, [x], schedule=s)
    # (PyTorch's values the reference: exact for max; a build of the plain schedule
    # as a second one added a build a case and nothing PyTorch does not check)
    want = tfn(torch.from_numpy(x if first else to_first(x))).numpy()
    want = want if first else to_last(want)
    if name.startswith("max"):
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def _planes_first_cases():
    L = tc.target.cpu_model().lanes
    return [
        ("max3d", (1, 2, 5, 7, 2 * L + 5), lambda X: nn.max_pool3d(X, 3, 2, 1)),
        ("max3d_ceil", (1, 2, 6, 6, 2 * L + 6),
         lambda X: nn.max_pool3d(X, 3, 2, 1, ceil_mode=True)),
        ("max3d_unpadded", (2, 1, 7, 5, 2 * L + 3), lambda X: nn.max_pool3d(X, 3, 2)),
        ("max3d_k345", (1, 2, 9, 8, 2 * L + 7),
         lambda X: nn.max_pool3d(X, (3, 4, 5), (2, 3, 2), (1, 2, 2))),
        ("avg3d", (1, 2, 5, 7, 2 * L + 5), lambda X: nn.avg_pool3d(X, 3, 2, 1)),
        ("avg3d_excl_ceil", (1, 2, 6, 6, 2 * L + 6),
         lambda X: nn.avg_pool3d(X, 3, 2, 1, ceil_mode=True, count_include_pad=False)),
    ]


@pytest.mark.parametrize("case", _planes_first_cases(), ids=lambda c: c[0])
def test_planes_first(case, monkeypatch):
    """A 3-d window overlapping along strided rows, channels first, whose data and
    output take more than the machine model's ``stream_output_bytes`` (here 1 KiB; by
    default half the last-level cache): its planes first (``PLANES_FIRST``): each
    task's data planes reduced to their 2-d windows in a local block (``.sep``, itself
    from local rows ``.sep.sep``), then the outputs from their planes of it; the next
    data plane's rows prefetched into the L2 along the planes (``PREFETCH_NEXT_PLANE``;
    none with the switch off).  Not
    taken under the bound, where the block would pass half the L2, or with the switch
    off (a local row per output row).  Max pooling exactly the plain schedule's and
    PyTorch's (NaN and infinities); averages within float32 rounding; the trace
    replays."""
    from dataclasses import replace
    from tecomp.schedule.trace import replay

    name, shape, build = case
    X = tc.placeholder(shape, name="X")
    Y = build(X)
    red = Y.op if name.startswith("max") else Y.op.input_tensors[0].op
    info = replace(tc.target.cpu_model("llvm -mcpu=znver4"), stream_output_bytes=1024)

    s = _template_for(Y, info)
    text = str(tc.lower(s, [X, Y]))
    assert f"{red.name}.sep.sep[" in text and f"allocate {red.name}.sep: " in text, text
    # (the next data plane's rows, along the planes' loop i2.w: PREFETCH_NEXT_PLANE)
    fetch = re.findall(r"prefetch \(L2\) (\w+)\[[^,]*, [^,]*, ([^\n]*)\]\n", text)
    assert fetch and {t for t, _ in fetch} == {"X"}, text
    # (the plane one past the loads' own: i2.w where they read plane i2.w - 1 of
    # padded data -- clamped into the array, min(i2.w, last) -- else min(i2.w + 1, last))
    lag = re.search(r"X\[[^\]]*, i2\.w - 1, ", text) is not None
    ahead = (r"(i2\.w|min\(i2\.w, \d+\)|min\(i2\.w \+ 1, \d+\) - 1), " if lag
             else r"min\(i2\.w \+ 1, \d+\), ")
    assert any(re.match(ahead, i) for _, i in fetch), fetch
    assert str(tc.lower(replay(s.trace.to_json(), [Y]), [X, Y])) == text
    for other in (tc.target.cpu_model("llvm -mcpu=znver4"), replace(info, l2_bytes=1024)):
        again = str(tc.lower(_template_for(Y, other), [X, Y]))
        assert f"{red.name}.sep.sep[" not in again and f"{red.name}.sep[" in again, again
    monkeypatch.setattr(pool, "PREFETCH_NEXT_PLANE", False)
    assert "prefetch (" not in str(tc.lower(_template_for(Y, info), [X, Y]))
    monkeypatch.setattr(pool, "PLANES_FIRST", False)
    assert f"{red.name}.sep.sep[" not in str(tc.lower(_template_for(Y, info), [X, Y]))
    x = _pool_data(name, shape)
    got = run([X], Y, [x], schedule=s)
    ref = run([X], Y, [x], schedule=tc.create_schedule(Y.op))
    if name.startswith("max"):
        np.testing.assert_array_equal(got, ref)
        if name == "max3d":
            want = F.max_pool3d(torch.from_numpy(x), 3, 2, 1).numpy()
            np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


def _peeled_pixels_cases():
    """Channels-last pooling over padded data (2-d and 3-d: the pixels peeled), and some
    that are not: ``(name, shape, build, torch function or None, taken)``."""
    L = tc.target.cpu_model().lanes
    c = 2 * L + 5   # a pixel's channels: whole vectors and a partial one
    return [
        ("max2d", (2, 9, 11, c), lambda X: nn.max_pool2d(X, 3, 2, 1, layout="NHWC"),
         lambda t: F.max_pool2d(t, 3, 2, 1), True),
        ("max2d_ceil", (1, 8, 10, c),
         lambda X: nn.max_pool2d(X, 3, 2, 1, ceil_mode=True, layout="NHWC"),
         lambda t: F.max_pool2d(t, 3, 2, 1, ceil_mode=True), True),
        ("max2d_dilated", (1, 9, 12, 3 * L),
         lambda X: nn.max_pool2d(X, 3, 2, 1, dilation=2, layout="NHWC"),
         lambda t: F.max_pool2d(t, 3, 2, 1, dilation=2), True),
        ("max2d_s1_narrow", (1, 7, 6, 3),   # (a pixel narrower than a vector)
         lambda X: nn.max_pool2d(X, 3, 1, 1, layout="NHWC"),
         lambda t: F.max_pool2d(t, 3, 1, 1), True),
        ("avg2d_s1", (2, 7, 9, c), lambda X: nn.avg_pool2d(X, 3, 1, 1, layout="NHWC"),
         lambda t: F.avg_pool2d(t, 3, 1, 1), True),
        ("avg2d_excl_ceil", (1, 8, 9, c),
         lambda X: nn.avg_pool2d(X, 3, 2, 1, False, ceil_mode=True, layout="NHWC"),
         lambda t: F.avg_pool2d(t, 3, 2, 1, ceil_mode=True, count_include_pad=False), True),
        ("avg2d_asym", (1, 6, 7, c),   # (asymmetric padding: the plain schedule's)
         lambda X: nn.avg_pool2d(X, 2, 1, (0, 1, 1, 0), layout="NHWC"), None, True),
        ("max3d", (1, 5, 7, 6, c), lambda X: nn.max_pool3d(X, 3, 2, 1, layout="NDHWC"),
         lambda t: F.max_pool3d(t, 3, 2, 1), True),
        ("avg3d_excl", (1, 5, 6, 7, L),
         lambda X: nn.avg_pool3d(X, 3, 2, 1, False, layout="NDHWC"),
         lambda t: F.avg_pool3d(t, 3, 2, 1, count_include_pad=False), True),
        # not taken: no padding, 1-d (the rows would be the batch)
        ("max2d_unpadded", (1, 8, 8, c), lambda X: nn.max_pool2d(X, 2, layout="NHWC"),
         lambda t: F.max_pool2d(t, 2), False),
        ("max1d_nwc", (2, 11, c), lambda X: nn.max_pool1d(X, 3, 2, 1, layout="NWC"),
         lambda t: F.max_pool1d(t, 3, 2, 1), False),
    ]


@pytest.mark.parametrize("case", _peeled_pixels_cases(), ids=lambda c: c[0])
def test_peeled_pixels(case, monkeypatch):
    """Channels last over padded data, 2-d and 3-d: the tasks are the output rows and
    each row's pixels a loop inside with its border pixels partitioned off (``pragma
    partition``: the first pixel's taps tested, the inner ones read with no test of
    their column), a max pooling's maxima in a local block copied out (the copy's
    vectors unrolled: ``UNROLL_COPY_OUT``); not taken with the switch off.  Against
    PyTorch (NaN and infinities in the max windows: NaN propagates) and the plain
    schedule; the trace replays."""
    from tecomp.schedule.trace import replay

    name, shape, build, tfn, taken = case
    X = tc.placeholder(shape, name="X")
    Y = build(X)
    s = sc.schedule_pool(Y)
    text = str(tc.lower(s, [X, Y]))
    assert str(tc.lower(tc.auto_schedule([X, Y], trials=0), [X, Y])) == text
    nd = len(shape) - 2
    pix = f"i{nd}"   # the output row's pixel loop (the tasks: batch x the outer rows)
    loop = re.search(rf"\n(\s*)for \({pix}, 1, ", text)
    assert bool(loop) == taken, text
    if taken:
        # the pixel loop starts past the first pixel (peeled off with its tests); the
        # inner pixels' taps test no column (kx)
        inner = text[loop.start():text.index(f"\n{loop.group(1)}}}\n", loop.start())]
        assert not re.search(r"kx(\*\d+)? (>=|<) ", inner), inner
        assert (f"{Y.op.name}.local" in text) == name.startswith("max"), text
        # (the output's vectors copied from the local block unrolled: UNROLL_COPY_OUT)
        if shape[-1] > 2 * tc.target.cpu_model().lanes:
            assert re.search(r"unrolled \(i\d\.inner\.outer, 0, \d+\)", text) and \
                not re.search(r"for \(i\d\.inner\.outer, ", text), text
            monkeypatch.setattr(pool, "UNROLL_COPY_OUT", False)
            assert re.search(r"for \(i\d\.inner\.outer, ",
                             str(tc.lower(sc.schedule_pool(Y), [X, Y])))
            monkeypatch.setattr(pool, "UNROLL_COPY_OUT", True)
        assert str(tc.lower(replay(s.trace.to_json(), [Y]), [X, Y])) == text
        monkeypatch.setattr(pool, "PEEL_PIXELS", False)
        assert not re.search(rf"for \({pix}, 1, ", str(tc.lower(sc.schedule_pool(Y), [X, Y])))
        monkeypatch.setattr(pool, "PEEL_PIXELS", True)
    x = _pool_data(name, shape)
    got = run([X], Y, [x], schedule=s)
    ref = run([X], Y, [x], schedule=tc.create_schedule(Y.op))
    if name.startswith("max"):
        np.testing.assert_array_equal(got, ref)
    else:
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
    if tfn is not None:
        want = to_last(tfn(torch.from_numpy(to_first(x))).numpy())
        if name.startswith("max"):
            np.testing.assert_array_equal(got, want)
        else:
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
