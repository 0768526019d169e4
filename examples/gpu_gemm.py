"""GEMM on the GPU with tecomp.nn's CUDA schedule: shared-memory tiles, register blocking.

Prints the schedule's tiling and the generated CUDA C, then runs it and checks it
against numpy: on the GPU (target "cuda") when pycuda and a CUDA device are present,
otherwise in the CUDA emulation on the CPU (target "cuda-emu") at a smaller, odd size,
with the tiling of a large GEMM (128 x 128 blocks, 8 x 8 registers per thread) so that
what runs is what a GPU would run.

    python3 examples/gpu_gemm.py            # 2048^3 on a GPU, 300 x 260 x 70 emulated
    python3 examples/gpu_gemm.py 512 384 100
"""
import sys
import time

import numpy as np

import tecomp as tc
from tecomp.errors import RuntimeUnavailableError
from tecomp.strategy import cuda as nn_cuda
from tecomp.nn import ops


def gpu_or_none():
    """The pycuda driver of device 0, or None (with the reason printed)."""
    try:
        from tecomp.runtime.cuda import default_driver

        return default_driver()
    except RuntimeUnavailableError as exc:
        print(f"# no GPU run: {exc}\n# running in the CUDA emulation instead")
        return None


def main(argv):
    driver = gpu_or_none()
    target = "cuda" if driver is not None else "cuda-emu"
    if len(argv) == 3:
        M, N, K = (int(a) for a in argv)
    else:
        M, N, K = (2048, 2048, 2048) if driver is not None else (300, 260, 70)
    # emulated: the tiling of a large GEMM (the one a small size would pick has 1x1 tiles)
    cfg = nn_cuda.gemm_config(M, N, K) if driver is not None else \
        nn_cuda.gemm_config(4096, 4096, 4096)

    A = tc.placeholder((M, K), name="A")
    B = tc.placeholder((K, N), name="B")
    C = ops.matmul(A, B)
    s = nn_cuda.schedule_matmul(C, target=target, config=cfg)
    print(f"# {M} x {N} x {K}: blocks of {cfg.block_m} x {cfg.block_n} ({cfg.threads_m} x "
          f"{cfg.threads_n} threads), {cfg.regs_m} x {cfg.regs_n} registers per thread, "
          f"k steps of {cfg.k_tile}")
    f = tc.build(s, [A, B, C], target=target, name="gemm")
    print(f.get_source("cuda"))

    rng = np.random.default_rng(0)
    a = rng.standard_normal((M, K)).astype("float32")
    b = rng.standard_normal((K, N)).astype("float32")
    c = np.zeros((M, N), "float32")
    # the emulation runs each block's threads as fibers, one at a time ("serial")
    kwargs = {} if driver is not None else {"mode": "serial"}
    t0 = time.perf_counter()
    f(a, b, c, **kwargs)
    dt = time.perf_counter() - t0
    ref = a.astype("float64") @ b.astype("float64")
    np.testing.assert_allclose(c, ref, rtol=1e-3, atol=1e-3 * np.sqrt(K))
    where = driver.name if driver is not None else "the CUDA emulation"
    print(f"# gemm {M} x {N} x {K} on {where}: matches numpy ({dt * 1e3:.1f} ms for the "
          f"first call{', with copies and compilation' if driver is not None else ''})")


if __name__ == "__main__":
    main(sys.argv[1:])
