"""tecomp.nn.quant against PyTorch's quantized ops: bit for bit, on random values, at
the rounding boundaries and with saturation."""
import numpy as np
import pytest

import tecomp as tc
from tecomp.nn import quant

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.filterwarnings("ignore:.*are deprecated")
_TQ = {"uint8": torch.quint8, "int8": torch.qint8, "int32": torch.qint32}


def _build(ins, out, auto):
    args = list(ins) + [out]
    s = tc.auto_schedule(args) if auto else tc.create_schedule(out.op)
    return tc.build(s, args)


def _values(rng, n, scale):
    x = (rng.standard_normal(n) * 100 * scale).astype(np.float32)
    x[:2000] = ((np.arange(2000) - 1000) + 0.5).astype(np.float32) * np.float32(scale)  # halves
    x[2000:2100] = np.float32(1e9)   # saturation
    x[2100:2200] = np.float32(-1e9)
    return x


def _tq(q, scale, zp, dtype):
    return torch._make_per_tensor_quantized_tensor(torch.from_numpy(q), scale, zp)


def _clip(r, dtype):
    info = np.iinfo(dtype)
    return np.clip(r, info.min, info.max).astype(dtype)


def _rounds_like_tecomp(v, scale, zp, dtype):
    """tecomp's quantization of float32 ``v`` in numpy: rint(x * (1/scale) + zp) with the
    multiply-add rounded once to float32 for 8 bits (float64 holds the product exactly),
    the product and the sum each rounded for int32 (docs/numerics.md)."""
    inv = np.float32(1.0) / np.float32(scale)
    if dtype == "int32":
        t = (v * inv).astype(np.float32) + np.float32(zp)
    else:
        t = (v.astype(np.float64) * np.float64(inv) + zp).astype(np.float32)
    return _clip(np.rint(t.astype(np.float64)), dtype)


def _rounds_before_the_zero_point(v, scale, zp, dtype):
    """rint(float32(x * (1/scale))) + zp: how other PyTorch builds quantize (measured:
    2.11.0+cu130 on an Intel Xeon, with its AVX-512 kernels and with
    ATEN_CPU_CAPABILITY=avx2)."""
    inv = np.float32(1.0) / np.float32(scale)
    return _clip(np.rint((v * inv).astype(np.float32)).astype(np.int64) + zp, dtype)


def _expected(want, v, scale, zp, dtype):
    """The codes tecomp must give for the float32 values ``v``, from PyTorch's ``want``:
    PyTorch's own where it rounds as tecomp does (the pinned torch 2.13.0: bit for bit).
    A PyTorch that rounds before adding the zero point must match that rounding exactly
    (else the test fails: an unknown rounding), and then tecomp's codes are its own
    rounding's, at most 1 apart from PyTorch's (at the ties the two orders split)."""
    ours = _rounds_like_tecomp(v, scale, zp, dtype)
    if np.array_equal(want, ours):
        return want
    np.testing.assert_array_equal(want, _rounds_before_the_zero_point(v, scale, zp, dtype),
                                  err_msg="PyTorch rounds in a way tecomp does not know")
    assert np.abs(ours.astype(np.int64) - want).max() <= 1
    return ours


@pytest.mark.parametrize("dtype,scale,zp", [("uint8", 0.1, 3), ("int8", 0.0237, -5),
                                            ("uint8", 1 / 3, 128), ("int32", 0.05, 7)])
@pytest.mark.parametrize("auto", [False, True], ids=["plain", "auto_schedule"])
def test_quantize_dequantize_match_torch(dtype, scale, zp, auto):
    rng = np.random.default_rng(0)
    n = 300_007
    x = _values(rng, n, scale)
    X = tc.placeholder((n,), name="X")
    Q = quant.quantize(X, scale, zp, dtype)
    q = np.empty(n, dtype)
    _build([X], Q, auto)(x, q)
    want = torch.quantize_per_tensor(torch.from_numpy(x), scale, zp, _TQ[dtype])
    np.testing.assert_array_equal(q, _expected(want.int_repr().numpy(), x, scale, zp, dtype))
    P = tc.placeholder((n,), dtype, name="P")
    D = quant.dequantize(P, scale, zp)
    d = np.empty(n, np.float32)
    _build([P], D, auto)(q, d)
    np.testing.assert_array_equal(d, _tq(q, scale, zp, dtype).dequantize().numpy())


def test_requantize_matches_torch():
    rng = np.random.default_rng(1)
    n = 100_003
    q = rng.integers(0, 256, n).astype(np.uint8)
    P = tc.placeholder((n,), "uint8", name="P")
    R = quant.requantize(P, 0.05, 120, 0.013, -3, out_dtype="int8")
    r = np.empty(n, np.int8)
    _build([P], R, True)(q, r)
    deq = torch._make_per_tensor_quantized_tensor(torch.from_numpy(q), 0.05, 120).dequantize()
    want = torch.quantize_per_tensor(deq, 0.013, -3, torch.qint8).int_repr().numpy()
    np.testing.assert_array_equal(r, want)


@pytest.mark.parametrize("params", [(0.05, 120, 0.08, 100, 0.1, 128),
                                    (0.013, 3, 0.2, 250, 0.07, 17),
                                    (0.3, 0, 0.3, 0, 0.25, 5),
                                    # saturating: without the float clamp (|v| <= 2**29
                                    # from the scales), and with it (|v| up to 2**30.3)
                                    (0.05, 120, 0.08, 100, 1e-6, 128),
                                    (0.05, 120, 0.08, 100, 1e-8, 128)])
@pytest.mark.parametrize("auto", [False, True], ids=["plain", "auto_schedule"])
def test_quantized_add_matches_torch(params, auto):
    """Against PyTorch's vector kernel: one thread and a multiple of 64 elements, so that
    no element goes through its scalar tail (which rounds differently, see quant.py)."""
    sa, za, sb, zb, so, zo = params
    rng = np.random.default_rng(2)
    n = 64 * 3125
    qa = rng.integers(0, 256, n).astype(np.uint8)
    qb = rng.integers(0, 256, n).astype(np.uint8)
    A = tc.placeholder((n,), "uint8", name="A")
    B = tc.placeholder((n,), "uint8", name="B")
    C = quant.quantized_add(A, sa, za, B, sb, zb, so, zo)
    c = np.empty(n, np.uint8)
    _build([A, B], C, auto)(qa, qb, c)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        want = torch.ops.quantized.add(_tq(qa, sa, za, "uint8"), _tq(qb, sb, zb, "uint8"), so, zo)
    finally:
        torch.set_num_threads(threads)
    np.testing.assert_array_equal(c, want.int_repr().numpy())


def test_quantized_add_saturates_past_int32():
    """|v| past 2**31 (out_scale 1e-9): every output saturates by the sign of the real
    sum. (PyTorch's vector kernel converts such a value to INT_MIN, so a large positive
    sum comes out 0 there: tecomp does not copy that.)"""
    rng = np.random.default_rng(5)
    n = 4096
    qa = rng.integers(0, 256, n).astype(np.uint8)
    qb = rng.integers(0, 256, n).astype(np.uint8)
    A = tc.placeholder((n,), "uint8", name="A")
    B = tc.placeholder((n,), "uint8", name="B")
    C = quant.quantized_add(A, 0.05, 120, B, 0.08, 100, 1e-9, 128)
    c = np.empty(n, np.uint8)
    _build([A, B], C, True)(qa, qb, c)
    real = (qa.astype(np.float64) - 120) * 0.05 + (qb.astype(np.float64) - 100) * 0.08
    far = np.abs(real) > 1e-3  # (a real sum of 0 comes out of float32 as +-1e-9 or 0)
    assert far.sum() > n * 0.9
    np.testing.assert_array_equal(c[far], np.where(real[far] > 0, 255, 0))


@pytest.mark.parametrize("out_zp", [0, -128, 1000])
def test_quantized_dense_to_int32_saturates_at_int32(out_zp):
    """Session 25: a requantized value in (2**30, 2**31) came out 2**30 + out_zp (the clamp
    that keeps 8-bit outputs saturated); int32 outputs now hold the value, or int32's
    bound past it."""
    X = tc.placeholder((2, 4), "uint8", name="X")
    W = tc.placeholder((3, 4), "int8", name="W")
    Y = quant.quantized_dense(X, 3.0, 0, W, 1.0, 0, None, 1e-7, out_zp, out_dtype="int32")
    x = np.array([[255, 255, 255, 255], [50, 0, 0, 0]], np.uint8)
    w = np.array([[127] * 4, [-128] * 4, [1, 0, 0, 0]], np.int8)
    y = np.zeros((2, 3), np.int32)
    _build([X, W], Y, True)(x, w, y)
    acc = x.astype(np.int64) @ w.astype(np.int64).T
    m = np.float32(np.float32(3.0) * np.float32(1.0) / np.float32(1e-7))
    want = np.clip(np.rint((acc.astype(np.float32) * m).astype(np.float64)) + out_zp,
                   -2**31, 2**31 - 1)
    np.testing.assert_array_equal(y, want)
    assert 2**30 + 1000 < want[1, 2] < 2**31 - 1000    # (1.5e9: the value itself)
    assert y[0, 0] == 2**31 - 1 and y[0, 1] == -2**31


def test_quantized_concatenate_matches_torch():
    rng = np.random.default_rng(3)
    qa = rng.integers(0, 256, (64, 100)).astype(np.uint8)
    qb = rng.integers(0, 256, (64, 37)).astype(np.uint8)
    A = tc.placeholder((64, 100), "uint8", name="A")
    B = tc.placeholder((64, 37), "uint8", name="B")
    C = quant.quantized_concatenate([(A, 0.05, 120), (B, 0.2, 7)], 1, 0.1, 128)
    c = np.empty((64, 137), np.uint8)
    _build([A, B], C, True)(qa, qb, c)
    want = torch.ops.quantized.cat([_tq(qa, 0.05, 120, "uint8"), _tq(qb, 0.2, 7, "uint8")],
                                   1, 0.1, 128)
    # the inputs dequantized in float32, then quantized at the output's scale
    deq = np.concatenate([((q.astype(np.int32) - z).astype(np.float32) * np.float32(sc))
                          for q, sc, z in ((qa, 0.05, 120), (qb, 0.2, 7))], axis=1)
    np.testing.assert_array_equal(c, _expected(want.int_repr().numpy(), deq, 0.1, 128, "uint8"))


def _dense_case(trial, x_high):
    rng = np.random.default_rng(10 + trial)
    M, K, N = 64, int(rng.integers(64, 600)), 80
    xs, ws, ys = (float(rng.uniform(a, b)) for a, b in ((0.005, 0.1), (0.001, 0.02), (0.01, 0.5)))
    xz, yz = int(rng.integers(0, x_high)), int(rng.integers(0, 256))
    xq = rng.integers(0, x_high, (M, K)).astype(np.uint8)
    wq = rng.integers(-128, 128, (N, K)).astype(np.int8)
    bias = (rng.standard_normal(N) * 2).astype(np.float32)
    X = tc.placeholder((M, K), "uint8", name="X")
    W = tc.placeholder((N, K), "int8", name="W")
    B = tc.placeholder((N,), name="B")
    Y = quant.quantized_dense(X, xs, xz, W, ws, 0, B, ys, yz)
    y = np.empty((M, N), np.uint8)
    _build([X, W, B], Y, True)(xq, wq, bias, y)
    return (xq, xs, xz), (wq, ws), bias, (ys, yz), y


@pytest.mark.parametrize("trial", range(4))
def test_quantized_dense_matches_torch_linear(trial):
    """Bit-exact against ``torch.ao.nn.quantized.Linear`` (fbgemm) with 7-bit activations,
    as PyTorch's x86 recipes quantize them (``reduce_range``): without VNNI, fbgemm sums
    pairs of u8 x s8 products in saturating int16 (``vpmaddubsw``), so with full-range
    activations its result is not the exact one (off by up to 128 on an AVX2 Zen 3);
    full range is checked against an exact reference below."""
    torch.backends.quantized.engine = "fbgemm"
    (xq, xs, xz), (wq, ws), bias, (ys, yz), y = _dense_case(trial, 128)
    lin = torch.ao.nn.quantized.Linear(xq.shape[1], wq.shape[0])
    lin.set_weight_bias(torch._make_per_tensor_quantized_tensor(torch.from_numpy(wq), ws, 0),
                        torch.from_numpy(bias))
    lin.scale, lin.zero_point = ys, yz
    want = lin(_tq(xq, xs, xz, "uint8")).int_repr().numpy()
    np.testing.assert_array_equal(y, want)


@pytest.mark.parametrize("trial", range(4))
def test_quantized_dense_is_exact_in_full_range(trial):
    """Full-range uint8 activations: the int32 accumulator is exact (checked against int64)
    and requantized as fbgemm does, in float32: acc + bias / (xs*ws), times
    xs*ws/ys, rounded half to even, plus the zero point, clamped."""
    (xq, xs, xz), (wq, ws), bias, (ys, yz), y = _dense_case(trial, 256)
    acc = (xq.astype(np.int64) - xz) @ wq.astype(np.int64).T
    np.testing.assert_array_equal(y, _requantize_ref(acc, bias, xs, ws, ys, yz))


def _requantize_ref(acc, bias, xs, ws, ys, yz):
    """fbgemm's requantization of the exact accumulator ``acc`` (int64, channels on axis
    1), in float32: acc + bias / (xs*ws) (or acc + bias for an int32 bias), times
    xs*ws/ys, rounded half to even, plus the zero point, clamped to uint8."""
    assert np.abs(acc).max() < 2 ** 31
    b = np.zeros(acc.shape[1], np.float32) if bias is None else bias
    b = b.reshape((-1,) + (1,) * (acc.ndim - 2))
    s = np.float32(xs) * np.float32(ws)
    if b.dtype == np.int32:
        v = (acc + b).astype(np.float32) * np.float32(s / np.float32(ys))
    else:
        v = (acc.astype(np.float32) + b / s) * np.float32(s / np.float32(ys))
    return np.clip(np.rint(v).astype(np.int64) + yz, 0, 255)


def _conv_ref(xq, xz, wq, wz, stride, pad, dilation, groups):
    """The exact int64 accumulator of a quantized NCHW convolution: x padded with its zero
    point (the real 0), both operands less their zero points."""
    x = np.pad(xq.astype(np.int64), ((0, 0), (0, 0), (pad, pad), (pad, pad)),
               constant_values=xz) - xz
    w = wq.astype(np.int64) - wz
    (N, C, H, W), (O, I, KH, KW) = x.shape, w.shape
    OH, OW = ((n - dilation * (k - 1) - 1) // stride + 1 for n, k in ((H, KH), (W, KW)))
    acc = np.zeros((N, O, OH, OW), np.int64)
    per = O // groups
    for g in range(groups):
        for ky in range(KH):
            for kx in range(KW):
                win = x[:, g * I:(g + 1) * I, ky * dilation:ky * dilation + stride * (OH - 1) + 1:
                        stride, kx * dilation:kx * dilation + stride * (OW - 1) + 1:stride]
                acc[:, g * per:(g + 1) * per] += np.einsum(
                    "nchw,oc->nohw", win, w[g * per:(g + 1) * per, :, ky, kx])
    return acc


#: (N, C, H, W, O, K, stride, padding, dilation, groups)
_CONV_SHAPES = {
    "3x3_pad1": (1, 16, 14, 14, 24, 3, 1, 1, 1, 1),
    "3x3_stride2_odd": (2, 5, 7, 7, 6, 3, 2, 1, 1, 1),
    "1x1": (1, 32, 9, 11, 16, 1, 1, 0, 1, 1),
    "5x5_stride2_pad2": (1, 3, 13, 12, 8, 5, 2, 2, 1, 1),
    "3x3_dilation2": (1, 8, 10, 10, 8, 3, 1, 1, 2, 1),
    "depthwise": (1, 8, 10, 10, 8, 3, 1, 1, 1, 8),
    "groups4": (1, 8, 10, 10, 12, 3, 1, 1, 1, 4),
}


def _conv_case(shape, seed, x_high, sched="auto", w_zp=0, bias_dtype="float32", sat=1.0):
    """A random quantized conv of ``shape`` (see _CONV_SHAPES) built with ``sched``
    ("auto": tc.auto_schedule, "plain": the default schedule, "interp": the default
    schedule in the interpreter).  The output scale puts about 1% of the outputs in
    saturation (``sat`` < 1: more).  Returns the arguments, the exact int64 accumulator
    and tecomp's result."""
    N, C, H, W, O, K, st, pd, dl, g = shape
    rng = np.random.default_rng(seed)
    xs, ws = float(rng.uniform(0.005, 0.1)), float(rng.uniform(0.001, 0.02))
    xz = int(rng.integers(0, x_high))
    xq = rng.integers(0, x_high, (N, C, H, W)).astype(np.uint8)
    wq = rng.integers(-128, 128, (O, C // g, K, K)).astype(np.int8)
    acc = _conv_ref(xq, xz, wq, w_zp, st, pd, dl, g)
    ys = float(xs * ws * acc.std() / 50 * rng.uniform(0.8, 1.25) * sat)
    yz = int(rng.integers(0, 256))
    bias = {"float32": (rng.standard_normal(O) * ys * 20).astype(np.float32),
            "int32": rng.integers(-5000, 5000, O).astype(np.int32), None: None}[bias_dtype]
    X = tc.placeholder(xq.shape, "uint8", name="X")
    Wt = tc.placeholder(wq.shape, "int8", name="W")
    args, arrays = [X, Wt], [xq, wq]
    B = None
    if bias is not None:
        B = tc.placeholder((O,), bias_dtype, name="B")
        args, arrays = args + [B], arrays + [bias]
    Y = quant.quantized_conv2d(X, xs, xz, Wt, ws, w_zp, B, ys, yz, st, pd, dl,
                                groups=g)
    y = np.empty(acc.shape, np.uint8)
    if sched == "interp":
        from tecomp.ir import interp
        interp.run(tc.lower(tc.create_schedule(Y.op), args + [Y]), *arrays, y)
    else:
        _build(args, Y, sched == "auto")(*arrays, y)
    return (xq, xs, xz), (wq, ws, w_zp), bias, (ys, yz), acc, y


def _torch_conv(shape, x, w, bias, out):
    """``torch.ao.nn.quantized.Conv2d`` (fbgemm) of the _conv_case arguments."""
    torch.backends.quantized.engine = "fbgemm"
    N, C, H, W, O, K, st, pd, dl, g = shape
    (xq, xs, xz), (wq, ws, wz), (ys, yz) = x, w, out
    conv = torch.ao.nn.quantized.Conv2d(C, O, K, stride=st, padding=pd, dilation=dl, groups=g)
    conv.set_weight_bias(torch._make_per_tensor_quantized_tensor(torch.from_numpy(wq), ws, wz),
                         torch.from_numpy(bias))
    conv.scale, conv.zero_point = ys, yz
    return conv(_tq(xq, xs, xz, "uint8")).int_repr().numpy()


@pytest.mark.parametrize("shape", list(_CONV_SHAPES.values()), ids=list(_CONV_SHAPES))
def test_quantized_conv2d_matches_torch_conv(shape):
    """Bit-exact against ``torch.ao.nn.quantized.Conv2d`` (fbgemm) with 7-bit activations
    (fbgemm's AVX2 path saturates u8 x s8 pair sums at int16, as for dense above), under
    tc.auto_schedule; the exact accumulator requantized as fbgemm does agrees too."""
    seed = 20 + list(_CONV_SHAPES.values()).index(shape)
    x, w, bias, out, acc, y = _conv_case(shape, seed, 128)
    np.testing.assert_array_equal(y, _torch_conv(shape, x, w, bias, out))
    np.testing.assert_array_equal(y, _requantize_ref(acc, bias, x[1], w[1], *out))


@pytest.mark.parametrize("shape", ["3x3_pad1", "3x3_stride2_odd", "depthwise"])
def test_quantized_conv2d_is_exact_in_full_range(shape):
    """Full-range uint8 activations against the exact int64 reference, the same under
    tc.auto_schedule and the default schedule (fbgemm differs here on AVX2 machines)."""
    shape = _CONV_SHAPES[shape]
    x, w, bias, out, acc, y = _conv_case(shape, 30, 256)
    np.testing.assert_array_equal(y, _requantize_ref(acc, bias, x[1], w[1], *out))
    np.testing.assert_array_equal(_conv_case(shape, 30, 256, "plain")[-1], y)


def test_quantized_conv2d_saturates_and_takes_a_weight_zero_point():
    """A small output scale: most outputs clamp to 0 or 255; a nonzero weight zero point."""
    shape = _CONV_SHAPES["3x3_pad1"]
    x, w, bias, out, acc, y = _conv_case(shape, 31, 128, w_zp=-7, sat=0.05)
    assert (y == 0).mean() > 0.2 and (y == 255).mean() > 0.2
    np.testing.assert_array_equal(y, _torch_conv(shape, x, w, bias, out))
    np.testing.assert_array_equal(y, _requantize_ref(acc, bias, x[1], w[1], *out))


@pytest.mark.parametrize("bias_dtype", ["int32", None])
def test_quantized_conv2d_int32_or_no_bias_and_interpreter(bias_dtype):
    """An int32 bias (added to the accumulator) or none, against the exact reference, and
    the interpreter on the default schedule gives the same."""
    shape = (1, 3, 6, 5, 4, 3, 2, 1, 1, 1)
    x, w, bias, out, acc, y = _conv_case(shape, 32, 256, bias_dtype=bias_dtype)
    np.testing.assert_array_equal(y, _requantize_ref(acc, bias, x[1], w[1], *out))
    yi = _conv_case(shape, 32, 256, "interp", bias_dtype=bias_dtype)[-1]
    np.testing.assert_array_equal(yi, y)


@pytest.mark.parametrize("wz", [0, -7])
def test_quantized_dense_runs_on_the_dot_product_intrinsic(wz):
    """The accumulator is a plain u8 x s8 GEMM plus row sums for the zero points, so the
    auto-scheduler tensorizes it (VNNI where the target has it: vpdpbusd in the code for a
    Cascade Lake; AVX2 here) and the result stays exact, weight zero point included."""
    rng = np.random.default_rng(5)
    M, K, N = 12, 64, 32
    xq = rng.integers(0, 256, (M, K)).astype(np.uint8)
    wq = rng.integers(-128, 128, (N, K)).astype(np.int8)
    X = tc.placeholder((M, K), "uint8", name="X")
    W = tc.placeholder((N, K), "int8", name="W")
    Y = quant.quantized_dense(X, 0.02, 131, W, 0.01, wz, None, 0.3, 90)
    args = [X, W, Y]
    vnni = "llvm -mcpu=cascadelake"
    s = tc.auto_schedule(args, target=vnni)
    assert any(step[0] == "tensorize" for step in s.trace.to_json())
    assert "vpdpbusd" in tc.build(s, args, target=vnni).get_source("asm")
    s = tc.auto_schedule(args)
    y = np.empty((M, N), np.uint8)
    tc.build(s, args)(xq, wq, y)
    acc = (xq.astype(np.int64) - 131) @ (wq.astype(np.int64) - wz).T
    np.testing.assert_array_equal(y, _requantize_ref(acc, None, 0.02, 0.01, 0.3, 90))
