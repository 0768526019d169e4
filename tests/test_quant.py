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
    np.testing.assert_array_equal(q, want.int_repr().numpy())
    P = tc.placeholder((n,), dtype, name="P")
    D = quant.dequantize(P, scale, zp)
    d = np.empty(n, np.float32)
    _build([P], D, auto)(q, d)
    np.testing.assert_array_equal(d, want.dequantize().numpy())


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
                                    (0.3, 0, 0.3, 0, 0.25, 5)])
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
    np.testing.assert_array_equal(c, want.int_repr().numpy())


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
    assert np.abs(acc).max() < 2 ** 31
    s = np.float32(xs) * np.float32(ws)
    v = (acc.astype(np.float32) + bias / s) * np.float32(s / np.float32(ys))
    want = np.clip(np.rint(v).astype(np.int64) + yz, 0, 255)
    np.testing.assert_array_equal(y, want)
