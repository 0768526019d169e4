"""GEMM, step by step: the classic TVM tutorial ("How to optimize GEMM on CPU") in tecomp.

Each step prints the loop IR of the schedule and its speed next to numpy's (OpenBLAS),
measured in this process (median of repeated calls):

  1. default          the three loops as written
  2. blocking         32x32 tiles of C, k split by 4: the tile of B stays in cache
  3. vectorization    the inner j loop as SIMD lanes
  4. loop permutation i.inner before k.inner: B is read row by row, C's tile row stays
  5. array packing    B copied into [N/32, K, 32] panels (a compute stage): contiguous reads
  6. write cache      C's tile accumulated in a local buffer, written back once
  7. parallel         the outer tile loop on the thread pool
  8. tuned            tecomp.strategy.cpu.schedule_matmul: register-blocked micro-kernel with FMAs

    python3 examples/gemm_schedules.py [N]      # N = M = K, default 1024
"""
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import tecomp as tc  # noqa: E402
from tecomp.strategy import cpu as nn_cpu  # noqa: E402

N = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
M = K = N
bn = 32
FLOPS = 2.0 * M * N * K

rng = np.random.default_rng(0)
a = rng.random((M, K), dtype="float64").astype("float32")
b = rng.random((K, N), dtype="float64").astype("float32")
c_ref = a @ b


def timeit_pair(fn, ref, budget=1.0, max_reps=15):
    """Median seconds of fn() and of ref(), called alternately (the machine's load
    hits both alike), repeated while within ``budget`` seconds."""
    fn()
    ref()
    ts, tr, start = [], [], time.perf_counter()
    while len(ts) < max_reps and (len(ts) < 3 or time.perf_counter() - start < budget):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        ref()
        tr.append(time.perf_counter() - t0)
        if ts[-1] > budget:  # the slow first steps: one timed run is enough
            break
    return float(np.median(ts)), float(np.median(tr))


c_np = np.empty((M, N), "float32")


def numpy_gemm():
    np.matmul(a, b, out=c_np)


def report(step, s, args, show_ir=True):
    print(f"==== {step} " + "=" * max(0, 70 - len(step)))
    if show_ir:
        print(tc.lower(s, args, name="gemm"))
    f = tc.build(s, args, name="gemm")
    c = np.empty((M, N), "float32")
    f(a, b, c)
    np.testing.assert_allclose(c, c_ref, rtol=1e-4, atol=1e-3 * K ** 0.5)
    t, t_numpy = timeit_pair(lambda: f(a, b, c), numpy_gemm)
    print(f"{step}: {FLOPS / t / 1e9:7.1f} GFLOP/s   numpy: {FLOPS / t_numpy / 1e9:7.1f} "
          f"GFLOP/s   (tecomp / numpy time: {t_numpy / t:.2f}x)\n")


A = tc.placeholder((M, K), name="A")
B = tc.placeholder((K, N), name="B")


def plain():
    k = tc.reduce_axis((0, K), name="k")
    C = tc.compute((M, N), lambda i, j: tc.sum(A[i, k] * B[k, j], axis=k), name="C")
    return C, k


# 1. default
C, k = plain()
s = tc.create_schedule(C.op)
report("1. default", s, [A, B, C])

# 2. blocking
C, k = plain()
s = tc.create_schedule(C.op)
io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], bn, bn)
ko, ki = s[C].split(k, factor=4)
s[C].reorder(io, jo, ko, ki, ii, ji)
report("2. blocking", s, [A, B, C])

# 3. vectorization
s[C].vectorize(ji)
report("3. vectorization", s, [A, B, C])

# 4. loop permutation
C, k = plain()
s = tc.create_schedule(C.op)
io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], bn, bn)
ko, ki = s[C].split(k, factor=4)
s[C].reorder(io, jo, ko, ii, ki, ji)
s[C].vectorize(ji)
report("4. loop permutation", s, [A, B, C])

# 5. array packing: packedB[j / bn, k, j % bn] = B[k, j]
packedB = tc.compute((N // bn, K, bn), lambda x, y, z: B[y, x * bn + z], name="packedB")
k = tc.reduce_axis((0, K), name="k")
C = tc.compute((M, N), lambda i, j: tc.sum(A[i, k] * packedB[j // bn, k, j % bn], axis=k),
               name="C")
s = tc.create_schedule(C.op)
io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], bn, bn)
ko, ki = s[C].split(k, factor=4)
s[C].reorder(io, jo, ko, ii, ki, ji)
s[C].vectorize(ji)
x, y, z = s[packedB].op.axis
s[packedB].vectorize(z)
report("5. array packing", s, [A, B, C])

# 6. write cache: C's 32x32 tile is accumulated in a local buffer
s = tc.create_schedule(C.op)
CC = s.cache_write(C, "local")
io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], bn, bn)
s[CC].compute_at(s[C], jo)
xc, yc = s[CC].op.axis
kk, = s[CC].op.reduce_axis
ko, ki = s[CC].split(kk, factor=4)
s[CC].reorder(ko, xc, ki, yc)
s[CC].unroll(ki)
s[CC].vectorize(yc)
s[C].vectorize(ji)
x, y, z = s[packedB].op.axis
s[packedB].vectorize(z)
report("6. write cache", s, [A, B, C])

# 7. parallel
s[C].parallel(io)
s[packedB].parallel(x)
report("7. parallel", s, [A, B, C])

# 8. the tuned schedule of tecomp.nn (shown for the packed compute)
C8 = nn_cpu.matmul_packed(A, B)
s = nn_cpu.schedule_matmul(C8)
print("blocking:", nn_cpu.gemm_params(M, N, K))
report("8. tuned (tecomp.strategy.cpu.schedule_matmul)", s, [A, B, C8])
