"""Concurrency: compiled kernels called from many threads at once, and lowering + builds
from several threads at once, give correct results.

Sizes (the figures the issue asks for): 16 threads x 40 calls each = 640 concurrent
kernel calls over 4 kernels (parallel and vectorized loops included, symbolic shapes
varying per call); 6 threads each lowering, building and running 4 different random
programs (24 builds at once); 8 threads running the interpreter.
"""
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

import tecomp as tc
from helpers import matmul
from tecomp.ir import interp
from tecomp.testing import RandomDraw, draw_case, run_case

THREADS = 16
CALLS = 40


def _kernels():
    out = {}
    # GEMM with parallel + vectorized loops
    A, B, C, k = matmul(n=32, m=24, K=16)
    s = tc.create_schedule(C.op)
    xo, yo, xi, yi = s[C].tile(C.op.axis[0], C.op.axis[1], 8, 8)
    s[C].reorder(xo, yo, k, xi, yi)
    s[C].vectorize(yi)
    s[C].parallel(xo)
    out["gemm"] = (tc.build(s, [A, B, C]), lambda r: _gemm_args(r), lambda a: a[0].astype("float64") @ a[1])
    # symbolic elementwise: the shape changes from call to call
    n = tc.var("n")
    X = tc.placeholder((n,), name="X")
    Y = tc.compute((n,), lambda i: tc.exp(X[i]) * 2 - X[i], name="Y")
    s = tc.create_schedule(Y.op)
    xo, xi = s[Y].split(Y.op.axis[0], factor=8)
    s[Y].vectorize(xi)
    out["elementwise"] = (tc.build(s, [X, Y]), _ew_args, lambda a: np.exp(a[0].astype("float64")) * 2 - a[0])
    # reduction with a scalar parameter
    alpha = tc.var("alpha", "float32")
    M = tc.placeholder((17, 33), name="M")
    r = tc.reduce_axis((0, 33), name="r")
    R = tc.compute((17,), lambda i: tc.sum(M[i, r] * alpha, axis=r), name="R")
    s = tc.create_schedule(R.op)
    s[R].parallel(R.op.axis[0])
    out["reduce"] = (tc.build(s, [M, R, alpha]), _red_args, lambda a: (a[0].astype("float64") * a[2]).sum(1))
    # int kernel with wrapping arithmetic
    P = tc.placeholder((64,), dtype="int8", name="P")
    Q = tc.compute((64,), lambda i: P[i] * 3 + P[63 - i], name="Q")
    s = tc.create_schedule(Q.op)
    out["int8"] = (tc.build(s, [P, Q]), _int_args, lambda a: a[0] * np.int8(3) + a[0][::-1])
    return out


def _gemm_args(rng):
    return [rng.random((32, 16), dtype="float32"), rng.random((16, 24), dtype="float32"),
            np.zeros((32, 24), "float32")]


def _ew_args(rng):
    n = int(rng.integers(0, 100))
    return [rng.random(n, dtype="float32"), np.zeros(n, "float32")]


def _red_args(rng):
    return [rng.random((17, 33), dtype="float32"), np.zeros(17, "float32"), float(rng.random())]


def _int_args(rng):
    return [rng.integers(-128, 128, 64).astype("int8"), np.zeros(64, "int8")]


def test_kernels_called_from_many_threads_at_once():
    kernels = _kernels()
    names = sorted(kernels)
    barrier = threading.Barrier(THREADS)
    errors = []

    def worker(t):
        rng = np.random.default_rng(t)
        barrier.wait()
        for c in range(CALLS):
            name = names[(t + c) % len(names)]
            f, make, ref = kernels[name]
            args = make(rng)
            f(*args)
            outpos = 1 if name != "gemm" else 2
            got = args[outpos]
            want = ref(args)
            if name == "int8":
                ok = np.array_equal(got, want)
            else:
                ok = np.allclose(got, want, rtol=1e-4, atol=1e-5)
            if not ok:
                errors.append(f"thread {t} call {c} ({name}): wrong result")
        return CALLS

    with ThreadPoolExecutor(THREADS) as ex:
        done = sum(ex.map(worker, range(THREADS)))
    assert not errors, errors[:5]
    assert done == THREADS * CALLS


def test_builds_from_several_threads_at_once():
    """6 threads lower, build and run different random programs (with schedules) at the
    same time; each result is compared with the interpreter and numpy by run_case."""
    nthreads, per = 6, 4
    barrier = threading.Barrier(nthreads)

    def worker(t):
        barrier.wait()
        bad = []
        for j in range(per):
            seed = 50_000 + t * per + j
            out = run_case(draw_case(RandomDraw(seed)))
            if not out.ok:
                bad.append(out.report())
        return bad

    with ThreadPoolExecutor(nthreads) as ex:
        results = list(ex.map(worker, range(nthreads)))
    bad = [b for r in results for b in r]
    assert not bad, bad[0]


def test_same_schedule_built_from_threads_gives_identical_code():
    A, B, C, k = matmul(n=16, m=16, K=8)
    s = tc.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=4)
    s[C].vectorize(C.op.axis[1])
    barrier = threading.Barrier(6)

    def worker(_):
        barrier.wait()
        f = tc.build(s, [A, B, C])
        return str(tc.lower(s, [A, B, C])), f.get_source("llvm")

    with ThreadPoolExecutor(6) as ex:
        outs = list(ex.map(worker, range(6)))
    assert len({o[0] for o in outs}) == 1
    assert len({o[1] for o in outs}) == 1


def test_interpreter_from_several_threads():
    A, B, C, k = matmul(n=6, m=5, K=4)
    s = tc.create_schedule(C.op)
    s[C].split(C.op.axis[1], factor=2)
    func = tc.lower(s, [A, B, C])

    def worker(t):
        rng = np.random.default_rng(t)
        for _ in range(5):
            a = rng.random((6, 4), dtype="float32")
            b = rng.random((4, 5), dtype="float32")
            c = np.zeros((6, 5), "float32")
            interp.run(func, a, b, c)
            if not np.allclose(c, a.astype("float64") @ b, rtol=1e-5):
                return False
        return True

    with ThreadPoolExecutor(8) as ex:
        assert all(ex.map(worker, range(8)))
