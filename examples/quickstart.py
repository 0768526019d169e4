"""The main example: declare a GEMM and a padded, strided conv2d, print their lowered IR,
run them compiled with LLVM, and check them against numpy."""
import time

import numpy as np

import tecomp as tc


def gemm():
    n = tc.var("n")
    m, K = 256, 128
    A = tc.placeholder((n, K), name="A")
    B = tc.placeholder((K, m), name="B")
    k = tc.reduce_axis((0, K), name="k")
    C = tc.compute((n, m), lambda i, j: tc.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = tc.create_schedule(C.op)
    print(tc.lower(s, [A, B, C], name="matmul"))
    f = tc.build(s, [A, B, C], target="llvm", name="matmul")
    a = np.random.rand(100, K).astype("float32")
    b = np.random.rand(K, m).astype("float32")
    c = np.empty((100, m), "float32")
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)
    print("GEMM (n=100): matches numpy\n")

    # The same GEMM with a schedule: tiles, a vectorized inner loop, parallel rows.
    s = tc.create_schedule(C.op)
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 32, 32)
    ko, ki = s[C].split(k, factor=4)
    s[C].reorder(io, jo, ko, ii, ki, ji)
    s[C].vectorize(ji)
    s[C].parallel(io)
    print(tc.lower(s, [A, B, C], name="matmul_tiled"))
    f = tc.build(s, [A, B, C], target="llvm", name="matmul_tiled")
    for rows in (100, 7):
        a = np.random.rand(rows, K).astype("float32")
        c = np.empty((rows, m), "float32")
        f(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-5)
    print("tiled GEMM (n=100 and n=7): matches numpy\n")


def conv2d():
    N, C, H, W, K, R, S = 1, 8, 14, 14, 16, 3, 3
    stride, pad = 2, 1
    Ho, Wo = (H + 2 * pad - R) // stride + 1, (W + 2 * pad - S) // stride + 1
    data = tc.placeholder((N, C, H, W), name="data")
    weight = tc.placeholder((K, C, R, S), name="weight")
    padded = tc.compute(
        (N, C, H + 2 * pad, W + 2 * pad),
        lambda n, c, h, w: tc.if_then_else(
            tc.all(h >= pad, h < H + pad, w >= pad, w < W + pad), data[n, c, h - pad, w - pad], 0.0),
        name="pad")
    rc = tc.reduce_axis((0, C), name="rc")
    ry = tc.reduce_axis((0, R), name="ry")
    rx = tc.reduce_axis((0, S), name="rx")
    out = tc.compute(
        (N, K, Ho, Wo),
        lambda n, k, y, x: tc.sum(padded[n, rc, y * stride + ry, x * stride + rx] * weight[k, rc, ry, rx],
                                  axis=[rc, ry, rx]),
        name="conv")
    s = tc.create_schedule(out.op)
    n, k, y, x = out.op.axis
    s[padded].compute_at(s[out], y)        # pad only the rows one output row needs
    print(tc.lower(s, [data, weight, out], name="conv2d"))
    f = tc.build(s, [data, weight, out], target="llvm", name="conv2d")
    d = np.random.rand(N, C, H, W).astype("float32")
    w = np.random.rand(K, C, R, S).astype("float32")
    o = np.empty((N, K, Ho, Wo), "float32")
    f(d, w, o)
    dp = np.pad(d, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    ref = np.zeros_like(o)
    for ry_ in range(R):
        for rx_ in range(S):
            patch = dp[:, :, ry_:ry_ + stride * Ho:stride, rx_:rx_ + stride * Wo:stride]
            ref += np.einsum("nchw,kc->nkhw", patch, w[:, :, ry_, rx_])
    np.testing.assert_allclose(o, ref, rtol=1e-4, atol=1e-5)
    print("conv2d NCHW, 3x3, stride 2, padding 1: matches numpy\n")


if __name__ == "__main__":
    t0 = time.perf_counter()
    gemm()
    conv2d()
    print(f"all checks passed in {time.perf_counter() - t0:.2f} s")
