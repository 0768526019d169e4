"""A padded 3x3 convolution (NCHW) scheduled by hand, with the padding stage computed at
the output tile: each task pads only the input rows it reads (its tile plus a one-row
halo), into a small buffer that stays in cache, instead of a padded copy of the whole
image made up front.

    python3 examples/conv2d_schedule.py

Prints the loop IR (look for ``allocate conv2d_nchw.pad`` inside the parallel loop), checks
the result against numpy and compares the speed with the tuned library schedule
(``tecomp.strategy.cpu.schedule_conv2d_nchw``) and with PyTorch when installed.
"""
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import tecomp as tc  # noqa: E402
from tecomp.strategy import cpu as nn_cpu  # noqa: E402
from tecomp.nn import ops  # noqa: E402

N, C, H, W, K = 1, 64, 56, 56, 64
data = tc.placeholder((N, C, H, W), name="data")
weight = tc.placeholder((K, C, 3, 3), name="weight")
out = ops.conv2d_nchw(data, weight, stride=1, padding=1)   # stages: conv2d_nchw.pad, conv2d_nchw
pad = out.op.input_tensors[0]
assert pad.op.name == "conv2d_nchw.pad"

s = tc.create_schedule(out.op)
st = s[out]
n, k, y, x = st.op.axis
rc, ry, rx = st.op.reduce_axis
# an output tile: 8 output channels x 2 rows x 14 columns, held in registers
ko, ki = st.split(k, factor=8)
yo, yi = st.split(y, factor=2)
xo, xi = st.split(x, factor=14)
st.reorder(n, yo, ko, xo, ry, rx, rc, ki, yi, xi)
st.unroll(ki)
st.unroll(yi)
st.vectorize(xi)                          # 14 lanes: one AVX-512 vector, 2 lanes idle
task = st.fuse(n, yo)
st.parallel(task)                         # one task per pair of output rows
st.pragma(task, "fp_contract")            # acc + a*b as one FMA
# the padding stage, computed in each task for the rows that task reads (2 + halo)
s[pad].compute_at(st, task)
s[pad].vectorize(s[pad].op.axis[3])

print(tc.lower(s, [data, weight, out], name="conv2d"))
f = tc.build(s, [data, weight, out], name="conv2d")

rng = np.random.default_rng(0)
d = rng.standard_normal((N, C, H, W)).astype("float32")
w = (rng.standard_normal((K, C, 3, 3)) / 24).astype("float32")
o = np.empty((N, K, H, W), "float32")
f(d, w, o)

dp = np.pad(d.astype("float64"), ((0, 0), (0, 0), (1, 1), (1, 1)))
ref = np.zeros((N, K, H, W))
for r in range(3):
    for t in range(3):
        ref += np.einsum("nchw,kc->nkhw", dp[:, :, r:r + H, t:t + W], w[:, :, r, t])
np.testing.assert_allclose(o, ref, rtol=1e-4, atol=1e-4)
print("conv2d: matches numpy")


def bench(fn, reps=20):
    fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


flops = 2.0 * N * K * C * H * W * 9
lib = tc.build(nn_cpu.schedule_conv2d_nchw(out), [data, weight, out], name="conv2d_lib")
o2 = np.empty_like(o)
print(f"this schedule:            {flops / bench(lambda: f(d, w, o)) / 1e9:6.1f} GFLOP/s")
print(f"schedule_conv2d_nchw:     {flops / bench(lambda: lib(d, w, o2)) / 1e9:6.1f} GFLOP/s")
try:
    import torch

    td, tw = torch.from_numpy(d), torch.from_numpy(w)
    print(f"PyTorch:                  "
          f"{flops / bench(lambda: torch.nn.functional.conv2d(td, tw, padding=1)) / 1e9:6.1f} "
          f"GFLOP/s")
except ImportError:
    pass
