"""A ResNet-style 3x3 convolution (+ bias + ReLU) on the GPU with tecomp.nn's CUDA
schedules, in NCHW and NHWC.

Prints the tiling and the generated CUDA C of the NCHW kernel, then runs both layouts and
checks them against a numpy reference: on the GPU (target "cuda") when pycuda and a CUDA
device are present, otherwise in the CUDA emulation (target "cuda-emu") at a small size.
The padding is computed while the input patch is copied to shared memory; the bias and
ReLU while the results are stored.
"""
import time

import numpy as np

import tecomp as tc
from tecomp.errors import RuntimeUnavailableError
from tecomp.strategy import cuda as nn_cuda
from tecomp.nn import ops


def gpu_or_none():
    try:
        from tecomp.runtime.cuda import default_driver

        return default_driver()
    except RuntimeUnavailableError as exc:
        print(f"# no GPU run: {exc}\n# running in the CUDA emulation instead")
        return None


def conv_ref(d, w, pad):
    """float64 NCHW / OIHW cross-correlation, stride 1."""
    N, C, H, W = d.shape
    K, _, R, S = w.shape
    dp = np.pad(d.astype("float64"), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    OH, OW = H + 2 * pad - R + 1, W + 2 * pad - S + 1
    out = np.zeros((N, K, OH, OW))
    for r in range(R):
        for s in range(S):
            out += np.einsum("nchw,kc->nkhw", dp[:, :, r:r + OH, s:s + OW], w[:, :, r, s])
    return out


def build(layout, N, C, H, K, target):
    if layout == "nchw":
        data = tc.placeholder((N, C, H, H), name="data")
        weight = tc.placeholder((K, C, 3, 3), name="weight")
        conv = ops.conv2d_nchw(data, weight, stride=1, padding=1)
        axis = 1
    else:
        data = tc.placeholder((N, H, H, C), name="data")
        weight = tc.placeholder((3, 3, C, K), name="weight")
        conv = ops.conv2d_nhwc(data, weight, stride=1, padding=1)
        axis = -1
    bias = tc.placeholder((K,), name="bias")
    out = ops.relu(ops.bias_add(conv, bias, axis=axis))
    sched = getattr(nn_cuda, f"schedule_conv2d_{layout}")
    s = sched(out, target=target)
    return tc.build(s, [data, weight, bias, out], target=target, name=f"conv_{layout}")


def main():
    driver = gpu_or_none()
    target = "cuda" if driver is not None else "cuda-emu"
    N, C, H, K = (32, 64, 56, 64) if driver is not None else (2, 8, 14, 16)
    cfg = nn_cuda.conv_config(K, H, H, C, (3, 3), lambda th, tw: (th + 2, tw + 2))
    print(f"# conv {N}x{C}x{H}x{H}, {K} filters 3x3, padding 1 (NCHW): blocks of {cfg.block_k} "
          f"channels x {cfg.block_y}x{cfg.block_x} pixels ({cfg.threads} threads), "
          f"{cfg.regs_k} x {cfg.regs_y}x{cfg.regs_x} outputs per thread, {cfg.c_tile} input "
          f"channels per shared-memory step")
    rng = np.random.default_rng(0)
    d = rng.standard_normal((N, C, H, H)).astype("float32")
    w = (rng.standard_normal((K, C, 3, 3)) / np.sqrt(9 * C)).astype("float32")
    b = rng.standard_normal(K).astype("float32")
    ref = np.maximum(conv_ref(d, w, 1) + b[None, :, None, None], 0)
    where = driver.name if driver is not None else "the CUDA emulation"
    for layout in ("nchw", "nhwc"):
        f = build(layout, N, C, H, K, target)
        if layout == "nchw":
            print(f.get_source("cuda"))
            args, expect = (d, w, b), ref
        else:
            args = (np.ascontiguousarray(d.transpose(0, 2, 3, 1)),
                    np.ascontiguousarray(w.transpose(2, 3, 1, 0)), b)
            expect = ref.transpose(0, 2, 3, 1)
        y = np.zeros(expect.shape, "float32")
        kwargs = {} if driver is not None else {"mode": "serial"}  # emulation: fibers
        t0 = time.perf_counter()
        f(*args, y, **kwargs)
        dt = time.perf_counter() - t0
        np.testing.assert_allclose(y, expect, rtol=1e-3, atol=1e-4)
        print(f"# conv2d_{layout} + bias + relu on {where}: matches numpy ({dt * 1e3:.1f} ms "
              f"for the first call{', with copies and compilation' if driver else ''})")


if __name__ == "__main__":
    main()
