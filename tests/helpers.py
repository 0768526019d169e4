"""Shared helpers for the test suite."""
import os
import subprocess
import sys

import numpy as np
import pytest

import tecomp as tc


def run(s, args, arrays, backend="llvm"):
    """Lower/build ``s`` and run it on ``arrays`` (outputs written in place)."""
    if backend == "interp":
        from tecomp.ir import interp

        interp.run(tc.lower(s, args), *arrays)
    else:
        f = tc.build(s, args, target=backend)
        f(*arrays)
    return arrays


def triangular_sum(n=10):
    """``B[i] = sum(A[i, r] for r < i)``: a reduction whose range depends on the output;
    returns A, B, an input and the expected B."""
    A = tc.placeholder((n, n), name="A")

    def f(i):
        r = tc.reduce_axis((0, i), name="r")
        return tc.sum(A[i, r], axis=r)

    B = tc.compute((n,), f, name="B")
    a = np.random.default_rng(0).random((n, n)).astype("float32")
    return A, B, a, np.array([a[i, :i].sum() for i in range(n)])


def channel_sum():
    """``S[c]`` = the sum of ``X[n, c, w]`` over ``n, w``; ``D = X - S`` (reads ``S`` per
    channel); ``G = 2 S`` (reads all of it): ``(X, S, D, G)``, for ``store_root``."""
    X = tc.placeholder((3, 9, 13), name="X")
    n, w = tc.reduce_axis((0, 3), name="n"), tc.reduce_axis((0, 13), name="w")
    S = tc.compute((9,), lambda c: tc.sum(X[n, c, w], axis=[n, w]), name="S")
    D = tc.compute((3, 9, 13), lambda i, c, j: X[i, c, j] - S[c], name="D")
    G = tc.compute((9,), lambda c: S[c] * 2.0, name="G")
    return X, S, D, G


def matmul(n=32, m=24, K=16, dtype="float32"):
    A = tc.placeholder((n, K), dtype=dtype, name="A")
    B = tc.placeholder((K, m), dtype=dtype, name="B")
    k = tc.reduce_axis((0, K), name="k")
    C = tc.compute((n, m), lambda i, j: tc.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C, k


def matmul_data(A, B, C, rng=None):
    rng = rng or np.random.default_rng(0)
    a = rng.random([int(x.value) for x in A.shape], dtype="float64").astype(A.dtype)
    b = rng.random([int(x.value) for x in B.shape], dtype="float64").astype(B.dtype)
    c = np.full([int(x.value) for x in C.shape], np.nan, C.dtype)
    return a, b, c


def conv2d_nchw(N=1, C=3, H=9, W=9, K=4, R=3, stride=1, pad=1, dilation=1):
    data = tc.placeholder((N, C, H, W), name="data")
    weight = tc.placeholder((K, C, R, R), name="weight")
    padded = tc.compute(
        (N, C, H + 2 * pad, W + 2 * pad),
        lambda n, c, h, w: tc.if_then_else(
            tc.all(h >= pad, h < H + pad, w >= pad, w < W + pad), data[n, c, h - pad, w - pad], 0.0),
        name="pad")
    Ho = (H + 2 * pad - dilation * (R - 1) - 1) // stride + 1
    Wo = (W + 2 * pad - dilation * (R - 1) - 1) // stride + 1
    rc = tc.reduce_axis((0, C), name="rc")
    ry = tc.reduce_axis((0, R), name="ry")
    rx = tc.reduce_axis((0, R), name="rx")
    out = tc.compute(
        (N, K, Ho, Wo),
        lambda n, k, y, x: tc.sum(
            padded[n, rc, y * stride + ry * dilation, x * stride + rx * dilation] * weight[k, rc, ry, rx],
            axis=[rc, ry, rx]),
        name="conv")
    return data, weight, padded, out


def conv2d_ref(d, w, stride=1, pad=1, dilation=1):
    N, C, H, W = d.shape
    K, _, R, S = w.shape
    dp = np.pad(d.astype("float64"), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    Ho = (H + 2 * pad - dilation * (R - 1) - 1) // stride + 1
    Wo = (W + 2 * pad - dilation * (S - 1) - 1) // stride + 1
    out = np.zeros((N, K, Ho, Wo))
    for r in range(R):
        for s_ in range(S):
            patch = dp[:, :, r * dilation: r * dilation + stride * (Ho - 1) + 1: stride,
                       s_ * dilation: s_ * dilation + stride * (Wo - 1) + 1: stride]
            out += np.einsum("nchw,kc->nkhw", patch, w[:, :, r, s_].astype("float64"))
    return out


def softmax(m=8, n=37):
    X = tc.placeholder((m, n), name="X")
    k1 = tc.reduce_axis((0, n), name="k1")
    k2 = tc.reduce_axis((0, n), name="k2")
    mx = tc.compute((m,), lambda i: tc.max(X[i, k1], axis=k1), name="rowmax")
    ex = tc.compute((m, n), lambda i, j: tc.exp(X[i, j] - mx[i]), name="exp")
    sm = tc.compute((m,), lambda i: tc.sum(ex[i, k2], axis=k2), name="rowsum")
    Y = tc.compute((m, n), lambda i, j: ex[i, j] / sm[i], name="softmax")
    return X, mx, ex, sm, Y


def softmax_ref(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def gpu_shared_tile():
    """B[i] = A[63 - i] * 2 on the GPU, A read through a shared tile that one thread writes
    and another reads: correct only with a barrier between them."""
    A = tc.placeholder((64,), name="A")
    B = tc.compute((64,), lambda i: A[63 - i] * 2, name="B")
    s = tc.create_schedule(B.op)
    AA = s.cache_read(A, "shared", [B])
    bo, bi = s[B].split(B.op.axis[0], factor=16)
    s[B].bind(bo, tc.thread_axis("blockIdx.x"))
    s[B].bind(bi, tc.thread_axis("threadIdx.x"))
    s[AA].compute_at(s[B], bo)
    ao, ai = s[AA].split(AA.op.axis[0], factor=16)
    s[AA].bind(ai, tc.thread_axis("threadIdx.x"))
    return s, [A, B]


def with_l2(monkeypatch, nbytes):
    """Have the CPU schedules see an L2 of ``nbytes``, and the gradient definitions' fixed
    machine model (``tecomp.nn.conv_grad._GRAD_L2_BYTES``) hold the same (through pytest's
    ``monkeypatch``): which form a weight gradient or a convolution's schedule takes
    depends on it, so a test pins it instead of the host's."""
    from tecomp.nn import conv_grad
    from tecomp.target import Target

    monkeypatch.setattr(Target, "l2_bytes", property(lambda self: nbytes))
    monkeypatch.setattr(conv_grad, "_GRAD_L2_BYTES", nbytes)


def with_fma_model(monkeypatch, half_width: bool, gather_cost: float,
                   transpose_cost: float = None, l3_bytes: int = 32 << 20,
                   l1_bytes: int = None):
    """Have the CPU schedules see FMA units of half the register's width (AMD Zen 4) or
    of its whole width, a strided gather of ``gather_cost`` FMAs per element, a copy in
    register transposes of ``transpose_cost`` (default: half the gather's) and a
    last-level cache of ``l3_bytes`` and, given, an L1 of ``l1_bytes`` (through pytest's
    ``monkeypatch``): whether an NCHW convolution takes channel vectors, and its blocks,
    depend on them, so a test pins them instead of the host's."""
    import dataclasses

    from tecomp.target import Target

    tcost = gather_cost / 2 if transpose_cost is None else transpose_cost
    real = Target.machine.fget

    def machine(self):
        m = real(self)
        return dataclasses.replace(
            m, l3_bytes=l3_bytes, gather_cost=gather_cost, transpose_cost=tcost,
            fma_lanes=m.lanes // 2 if half_width and m.lanes == 16 else m.lanes,
            l1_bytes=m.l1_bytes if l1_bytes is None else l1_bytes)

    monkeypatch.setattr(Target, "machine", property(machine))


def llvm_o3_hang_program():
    """``(schedule, args)`` of fuzz seed 3024733: a small kernel of float64 reductions under
    selects on which LLVM 20's O3, with both its loop vectorizer and its unroller, does not
    finish (args: P0 float64[2], P3 int32[5, 4], C4 float64[3, 1, 5])."""
    T0 = tc.placeholder((2,), dtype="float64", name="P0")
    k0, k1 = tc.reduce_axis((0, 5), name="k0"), tc.reduce_axis((0, 5), name="k1")
    T1 = tc.compute((5, 1, 4), lambda i0, i1, i2: tc.sum(tc.if_then_else(
        4 - k0 < 2, T0[4 - k0], tc.const(0, "float64")), axis=[k0, k1], where=(k1 <= i0)),
        name="C1")
    r0, r1 = tc.reduce_axis((0, 8), name="k0"), tc.reduce_axis((0, 2), name="k1")
    T2 = tc.compute((2, 13), lambda i0, i1: tc.sum(tc.exp(tc.min(
        T1[(r0 - 1) % 5, (i0 * 2 + 1) // 4, r1 * 2 + i0], tc.const(3.0, "float64"))),
        axis=[r0, r1], where=(r0 <= i0)), name="C2")
    T3 = tc.placeholder((5, 4), dtype="int32", name="P3")
    q0, q1 = tc.reduce_axis((0, 8), name="k0"), tc.reduce_axis((0, 4), name="k1")
    T4 = tc.compute((3, 1, 5), lambda i0, i1, i2: tc.sum(
        T2[i1, 2] - tc.exp(tc.min(T2[i1 + 1, 2], tc.const(3.0, "float64"))), axis=[q0, q1],
        where=(T3[q1, 2 - i0] > tc.const(0, "int32"))), name="C4")
    s = tc.create_schedule([T4.op])
    s[T1].tile(s[T1].leaf_iter_vars[2], s[T1].leaf_iter_vars[3], 16, 2)
    s[T2].pragma(s[T2].leaf_iter_vars[0], "unroll_explicit")
    s[T1].pragma(s[T1].leaf_iter_vars[0], "unroll_explicit")
    return s, [T0, T3, T4]


def build_and_interp(s, args, make_arrays):
    """Run ``s`` compiled (LLVM) and in the interpreter, each on fresh arrays from
    ``make_arrays()``; return both argument lists after the runs."""
    from tecomp.ir import interp

    compiled, interpreted = make_arrays(), make_arrays()
    tc.build(s, args)(*compiled)
    interp.run(tc.lower(s, args), *interpreted)
    return compiled, interpreted


@pytest.fixture(scope="module")
def gpu_driver():
    """The pycuda driver of device 0 (a module's GPU tests share it); the test is skipped
    where there is no GPU or no pycuda."""
    from tecomp.errors import RuntimeUnavailableError
    from tecomp.runtime import cuda as runtime_cuda

    try:
        return runtime_cuda.default_driver()
    except RuntimeUnavailableError as exc:
        pytest.skip(str(exc))


class DLPackWrapper:
    """A DLPack producer tecomp does not know (as JAX, CuPy or TensorFlow arrays are):
    ``__dlpack__``/``__dlpack_device__`` of the array or tensor it holds, nothing else."""

    def __init__(self, x):
        self.x = x

    def __dlpack__(self, **kw):
        return self.x.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.x.__dlpack_device__()


def fuzz_cli(tmp_path, *args, env_extra=None, timeout=300):
    """``python -m tecomp.testing.fuzz --jobs 1 --quiet --out tmp_path *args`` in a
    subprocess, with this checkout importable (``env_extra``: more environment)."""
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    env.update(env_extra or {})
    return subprocess.run(
        [sys.executable, "-m", "tecomp.testing.fuzz", "--jobs", "1", "--quiet",
         "--out", str(tmp_path), *args],
        capture_output=True, text=True, env=env, timeout=timeout)
