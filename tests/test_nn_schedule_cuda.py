"""The CUDA schedules of tecomp.nn (tecomp/strategy/cuda/).

* every schedule, on small and odd shapes (tails in every tiled dimension, symbolic
  extents, epilogues), in the CUDA emulation against numpy, in two thread orders (a
  missing barrier gives a wrong answer in one of them), and for the smallest cases in the
  reference interpreter, which also reports data races;
* the lowering rules the schedules rely on (GPU tiles keep their constant size past a
  tensor's edge; unrolled loops in a kernel keep a constant trip count);
* the generated CUDA C compiles with ``nvcc -ptx -arch=sm_80`` and its register tiles
  stay in registers (no local memory), for these cases and for the benchmark sizes;
* ``gpu``-marked tests run the same cases with pycuda on a real GPU (skipped elsewhere).
"""
from __future__ import annotations

import concurrent.futures
import functools
import importlib.util
import os
import re
import subprocess
import sys
import shutil
import dataclasses
from dataclasses import dataclass
from typing import Callable, List

import numpy as np
import pytest

import tecomp as tc
from tecomp.runtime.nvcc import compile_ptx, find_nvcc
from tecomp.errors import RuntimeUnavailableError, ScheduleError
from tecomp.ir import interp
from tecomp.nn import ops
from tecomp.strategy import cuda as sc
from helpers import gpu_driver  # noqa: F401  (a fixture)

needs_cxx = pytest.mark.skipif(shutil.which("g++") is None and shutil.which("clang++") is None,
                               reason="the CUDA emulation needs a C++ compiler")
needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc is not on PATH")


# --------------------------------------------------------------------------- references


def conv_ref(d, w, stride, pad, dil, layout):
    """Direct float64 convolution (cross-correlation) in NCHW / OIHW."""
    if layout == "nhwc":
        d, w = d.transpose(0, 3, 1, 2), w.transpose(3, 2, 0, 1)
    N, C, H, W = d.shape
    K, _, R, S = w.shape
    dp = np.pad(d.astype("float64"), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    OH = (H + 2 * pad - dil * (R - 1) - 1) // stride + 1
    OW = (W + 2 * pad - dil * (S - 1) - 1) // stride + 1
    out = np.zeros((N, K, OH, OW))
    for r in range(R):
        for s_ in range(S):
            patch = dp[:, :, r * dil: r * dil + stride * (OH - 1) + 1: stride,
                       s_ * dil: s_ * dil + stride * (OW - 1) + 1: stride]
            out += np.einsum("nchw,kc->nkhw", patch, w[:, :, r, s_].astype("float64"))
    return out if layout == "nchw" else out.transpose(0, 2, 3, 1)


def softmax_ref(x, log=False):
    x = x.astype("float64")
    e = np.exp(x - x.max(-1, keepdims=True))
    p = e / e.sum(-1, keepdims=True)
    return np.log(p) if log else p


# --------------------------------------------------------------------------- cases


@dataclass
class Case:
    name: str
    schedule: Callable          # schedule_* function
    args: list                  # tensors (and vars) in call order; the output last
    inputs: Callable            # rng, sizes -> input arrays (the output is allocated here)
    ref: Callable               # input arrays -> expected output
    out_shape: Callable         # input arrays -> output shape
    tol: float = 1e-4
    config: object = None       # the schedule's config= (None: its own choice)

    def build_schedule(self, target="cuda-emu"):
        kw = {} if self.config is None else {"config": self.config}
        return self.schedule(self.args[-1], target=target, **kw)

    def arrays(self, seed=0):
        rng = np.random.default_rng(seed)
        ins = self.inputs(rng)
        return ins + [np.full(self.out_shape(ins), np.nan, "float32")]


def _rand(rng, *shape):
    return rng.standard_normal(shape).astype("float32")


def matmul_case(M, N, K, epilogue=False, name=None, config=None):
    m = tc.var("m") if M is None else M
    k = tc.var("k") if K is None else K
    A = tc.placeholder((m, k), name="A")
    B = tc.placeholder((k, N), name="B")
    C = ops.matmul(A, B)
    if epilogue:
        C = ops.relu(C)
    Mv, Kv = M or 45, K or 19
    return Case(name or f"matmul_{M}x{N}x{K}{'_relu' if epilogue else ''}", sc.schedule_matmul,
                [A, B, C], lambda r: [_rand(r, Mv, Kv), _rand(r, Kv, N)],
                lambda a: np.maximum(a[0] @ a[1], 0) if epilogue else a[0] @ a[1],
                lambda a: (a[0].shape[0], N), config=config)


def dense_case(Bt, O, I, bias=True, config=None, name=None):
    X = tc.placeholder((Bt, I), name="X")
    W = tc.placeholder((O, I), name="W")
    args = [X, W]
    if bias:
        b = tc.placeholder((O,), name="bias")
        args.append(b)
        Y = ops.dense(X, W, b)
    else:
        Y = ops.dense(X, W)
    args.append(Y)
    return Case(name or f"dense_{Bt}x{O}x{I}{'_bias' if bias else ''}", sc.schedule_dense, args,
                lambda r: [_rand(r, Bt, I), _rand(r, O, I)] + ([_rand(r, O)] if bias else []),
                lambda a: a[0] @ a[1].T + (a[2] if bias else 0), lambda a: (Bt, O),
                config=config)


def conv_case(layout, N, C, H, W, K, R, stride, pad, dil, epilogue=False, config=None,
              name=None):
    if layout == "nchw":
        D = tc.placeholder((N, C, H, W), name="data")
        Wt = tc.placeholder((K, C, R, R), name="weight")
        Y = ops.conv2d_nchw(D, Wt, stride, pad, dil)
        dshape, wshape = (N, C, H, W), (K, C, R, R)
    else:
        D = tc.placeholder((N, H, W, C), name="data")
        Wt = tc.placeholder((R, R, C, K), name="weight")
        Y = ops.conv2d_nhwc(D, Wt, stride, pad, dil)
        dshape, wshape = (N, H, W, C), (R, R, C, K)
    args = [D, Wt]
    if epilogue:
        b = tc.placeholder((K,), name="bias")
        Y = ops.relu(ops.bias_add(Y, b, axis=1 if layout == "nchw" else -1))
        args.append(b)
    args.append(Y)

    def ref(a):
        out = conv_ref(a[0], a[1], stride, pad, dil, layout)
        if epilogue:
            out = np.maximum(out + (a[2][None, :, None, None] if layout == "nchw" else a[2]), 0)
        return out

    name = name or (f"conv_{layout}_{N}x{C}x{H}x{W}_k{K}r{R}s{stride}p{pad}d{dil}"
            f"{'_bias_relu' if epilogue else ''}{'_cfg' if config else ''}")
    return Case(name, getattr(sc, f"schedule_conv2d_{layout}"), args,
                lambda r: [_rand(r, *dshape), _rand(r, *wshape)]
                + ([_rand(r, K)] if epilogue else []),
                ref, lambda a: tuple(int(e.value) for e in Y.shape), config=config)


def softmax_case(shape, log=False, config=None):
    dims = tuple(tc.var(f"d{i}") if e is None else e for i, e in enumerate(shape))
    X = tc.placeholder(dims, name="X")
    Y = (ops.log_softmax if log else ops.softmax)(X)
    conc = tuple(e or (7, 300)[i % 2] for i, e in enumerate(shape))
    return Case(f"{'log_' if log else ''}softmax_{'x'.join(str(e) for e in shape)}"
                f"{'_cfg' if config else ''}", sc.schedule_softmax, [X, Y],
                lambda r: [3 * _rand(r, *conc)], lambda a: softmax_ref(a[0], log),
                lambda a: a[0].shape, 1e-5, config)


def injective_cases():
    X = tc.placeholder((3, 5, 7), name="X")
    b = tc.placeholder((5,), name="b")
    Y = ops.relu(ops.bias_add(X, b))
    c1 = Case("relu_bias_add_3x5x7", sc.schedule_injective, [X, b, Y],
              lambda r: [_rand(r, 3, 5, 7), _rand(r, 5)],
              lambda a: np.maximum(a[0] + a[1][:, None], 0), lambda a: (3, 5, 7))
    n = tc.var("n")
    X2 = tc.placeholder((n, 3), name="X")
    Y2 = ops.sigmoid(X2)
    c2 = Case("sigmoid_nx3", sc.schedule_elementwise, [X2, Y2], lambda r: [_rand(r, 333, 3)],
              lambda a: 1 / (1 + np.exp(-a[0].astype("float64"))), lambda a: a[0].shape, 1e-5)
    X3 = tc.placeholder((2, 3, 4, 5), name="X")
    Y3 = ops.pad(X3, (0, 0, 1, 2), (0, 0, 2, 1))
    c3 = Case("pad_2x3x4x5", sc.schedule_injective, [X3, Y3], lambda r: [_rand(r, 2, 3, 4, 5)],
              lambda a: np.pad(a[0], ((0, 0), (0, 0), (1, 2), (2, 1))), lambda a: (2, 3, 7, 8))
    return [c1, c2, c3]


GEMM_8X8 = sc.GemmConfig(threads_m=8, threads_n=4, regs_m=8, regs_n=8, k_tile=8)
CONV_4X2X2 = sc.ConvConfig(threads_k=2, threads_y=2, threads_x=3, regs_k=4, regs_y=2, regs_x=2,
                           c_tile=4)
# the k steps / channel steps unrolled, the A tile unpadded (what benchmarks/gpu.py --sweep tries)
GEMM_8X8_UNROLLED = dataclasses.replace(GEMM_8X8, unroll_k=True, pad=False)
CONV_UNROLLED = dataclasses.replace(CONV_4X2X2, unroll_c=True)
# tile rows copied 4 floats at a time, the tiles double-buffered (cp.async on the device)
GEMM_8X8_PIPELINED = dataclasses.replace(GEMM_8X8_UNROLLED, vector=4, double_buffer=True)


def all_cases() -> List[Case]:
    return [
        matmul_case(64, 48, 40),
        matmul_case(37, 50, 23),
        matmul_case(1, 3, 1),
        matmul_case(None, 40, None, name="matmul_mxkx40"),
        # the full 64 x 128 block, double-buffered, its B tile's columns guarded (80 < 128)
        # and symbolic m, k: loop partitioning splits k.outer, one part without A's copy
        matmul_case(None, 80, None, name="matmul_mxkx80"),
        matmul_case(30, 20, 9, epilogue=True),
        # the 8x8 register tiles of large GEMMs, on odd shapes (8 x 4 threads)
        matmul_case(70, 150, 19, name="matmul_70x150x19_8x8", config=GEMM_8X8),
        dense_case(19, 45, 33),
        dense_case(8, 16, 70, bias=False),
        dense_case(37, 70, 21, config=GEMM_8X8),
        matmul_case(70, 150, 19, name="matmul_70x150x19_8x8_unrolled", config=GEMM_8X8_UNROLLED),
        dense_case(37, 70, 21, config=GEMM_8X8_UNROLLED, name="dense_37x70x21_bias_unrolled"),
        matmul_case(70, 150, 19, name="matmul_70x150x19_8x8_pipelined", config=GEMM_8X8_PIPELINED),
        matmul_case(64, 96, 48, name="matmul_64x96x48_8x8_pipelined", config=GEMM_8X8_PIPELINED),
        dense_case(40, 64, 36, config=GEMM_8X8_PIPELINED, name="dense_40x64x36_bias_pipelined"),
        conv_case("nchw", 1, 3, 9, 9, 4, 3, 1, 1, 1),
        conv_case("nchw", 2, 5, 11, 13, 7, 3, 2, 1, 1),
        conv_case("nchw", 1, 4, 10, 10, 6, 3, 1, 2, 2),
        conv_case("nchw", 1, 4, 8, 8, 5, 1, 1, 0, 1, epilogue=True),
        conv_case("nchw", 1, 20, 6, 6, 40, 3, 1, 1, 1),
        conv_case("nchw", 2, 11, 9, 7, 10, 3, 1, 1, 1, config=CONV_4X2X2),
        conv_case("nhwc", 1, 3, 9, 9, 4, 3, 1, 1, 1),
        conv_case("nhwc", 2, 5, 11, 13, 7, 3, 2, 1, 1),
        conv_case("nhwc", 1, 4, 10, 10, 6, 3, 1, 2, 2),
        conv_case("nhwc", 2, 3, 7, 6, 5, 3, 1, 1, 1, epilogue=True),
        conv_case("nhwc", 1, 11, 9, 7, 10, 3, 2, 1, 1, config=CONV_4X2X2),
        conv_case("nchw", 2, 11, 9, 7, 10, 3, 1, 1, 1, config=CONV_UNROLLED,
                  name="conv_nchw_2x11x9x7_k10_unrolled"),
        conv_case("nhwc", 1, 11, 9, 7, 10, 3, 2, 1, 1, config=CONV_UNROLLED,
                  name="conv_nhwc_1x11x9x7_k10s2_unrolled"),
        softmax_case((5, 37)),
        softmax_case((3, 4, 100), log=True),
        softmax_case((3, 12000)),
        softmax_case((None, None)),
        softmax_case((4, 300), config=sc.SoftmaxConfig(64, False, True)),
        softmax_case((4, 300), log=True, config=sc.SoftmaxConfig(64, True, False)),
        *injective_cases(),
    ]


CASES = all_cases()
IDS = [c.name for c in CASES]


_LOWERED = {}


def lowered(case):
    """The case's schedule lowered once (the same PrimFunc is built for both targets)."""
    if case.name not in _LOWERED:
        _LOWERED[case.name] = tc.lower(case.build_schedule("cuda"), case.args, name=_cname(case),
                                       target="cuda")
    return _LOWERED[case.name]


#: the emulation's variants of a case that runs by default (test_emulation_matches_numpy
#: runs them with TECOMP_LONG_TESTS=1): name -> the kept case that has what it tests
EMU_VARIANTS = {
    "matmul_37x50x23": "odd sizes: matmul_30x20x9_relu, matmul_70x150x19_8x8",
    "dense_8x16x70": "dense: dense_19x45x33_bias (the bias its only difference)",
    "matmul_70x150x19_8x8_unrolled": "GEMM_8X8_UNROLLED: dense_37x70x21_bias_unrolled",
    "dense_40x64x36_bias_pipelined": "GEMM_8X8_PIPELINED: the two pipelined matmuls (guarded "
                                     "and whole tiles); dense with a bias: the other configs",
    "conv_nchw_2x5x11x13_k7r3s2p1d1": "its geometry in NHWC",
    "conv_nchw_2x11x9x7_k10r3s1p1d1_cfg": "CONV_4X2X2 in NCHW: conv_nchw_2x11x9x7_k10_unrolled",
    "conv_nhwc_1x3x9x9_k4r3s1p1d1": "its geometry in NCHW",
    "conv_nhwc_1x4x10x10_k6r3s1p2d2": "the dilated geometry in NCHW",
    "conv_nhwc_1x11x9x7_k10s2_unrolled": "CONV_UNROLLED in NCHW, CONV_4X2X2 in NHWC",
    "softmax_5x37": "short rows: log_softmax_3x4x100, softmax_NonexNone's shapes",
}
assert set(EMU_VARIANTS) <= set(IDS)
LONG = os.environ.get("TECOMP_LONG_TESTS", "") not in ("", "0")


@pytest.fixture(scope="module")
def emu_modules():
    """Each case built for the emulation once: those that run by default (all of them
    with TECOMP_LONG_TESTS=1), the C++ compilations in parallel (they are the slow part);
    another case when asked for."""
    funcs = {case.name: lowered(case) for case in CASES
             if LONG or case.name not in EMU_VARIANTS}
    workers = max(2, min(8, os.cpu_count() or 2))
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        futures = {name: pool.submit(tc.build, f, target="cuda-emu") for name, f in funcs.items()}
        built = {name: fut.result() for name, fut in futures.items()}

    def module(case):
        if case.name not in built:
            built[case.name] = tc.build(lowered(case), target="cuda-emu")
        return built[case.name]
    return module


def _cname(case):
    return re.sub(r"\W", "_", case.name)


def _check(case, arrays):
    ins = arrays[:-1]
    np.testing.assert_allclose(arrays[-1], case.ref(ins), rtol=case.tol, atol=case.tol,
                               err_msg=case.name)


# --------------------------------------------------------------------------- emulation


@needs_cxx
@pytest.mark.parametrize("case", [pytest.param(c, id=c.name, marks=[pytest.mark.slow] * (
    c.name in EMU_VARIANTS)) for c in CASES])
def test_emulation_matches_numpy(emu_modules, case):
    f = emu_modules(case)
    for mode, seed in (("serial", 0), ("reverse", 1)):
        arrays = case.arrays(seed)
        f(*arrays, mode=mode)
        _check(case, arrays)


@needs_cxx
def test_symbolic_sizes_take_several_shapes(emu_modules):
    case = next(c for c in CASES if c.name == "matmul_mxkx40")
    f = emu_modules(case)
    rng = np.random.default_rng(3)
    for M, K in ((1, 1), (200, 9), (129, 17)):
        a, b = _rand(rng, M, K), _rand(rng, K, 40)
        c = np.full((M, 40), np.nan, "float32")
        f(a, b, c, mode="serial")
        np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
    f = emu_modules(next(c for c in CASES if c.name == "matmul_mxkx80"))
    for M, K in ((3, 32), (65, 37), (2, 5)):
        a, b = _rand(rng, M, K), _rand(rng, K, 80)
        c = np.full((M, 80), np.nan, "float32")
        f(a, b, c, mode="reverse")
        np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
    case = next(c for c in CASES if c.name == "softmax_NonexNone")
    f = emu_modules(case)
    for shape in ((2, 1), (3, 700), (1, 257)):
        x = 3 * _rand(rng, *shape)
        y = np.full(shape, np.nan, "float32")
        f(x, y, mode="reverse")
        np.testing.assert_allclose(y, softmax_ref(x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("case", [matmul_case(6, 7, 5),
                                  matmul_case(20, 36, 24, name="matmul_pipelined",
                                              config=dataclasses.replace(
                                                  GEMM_8X8_PIPELINED, threads_m=2, threads_n=4,
                                                  regs_m=2, regs_n=4)),
                                  conv_case("nchw", 1, 2, 5, 5, 3, 3, 1, 1, 1),
                                  conv_case("nhwc", 1, 3, 4, 5, 2, 3, 1, 1, 1),
                                  softmax_case((3, 37)), dense_case(3, 5, 9)],
                         ids=lambda c: c.name)
def test_reference_interpreter_finds_no_race(case):
    """The interpreter interleaves the threads between barriers, poisons uninitialized
    memory and raises RaceError on a data race."""
    s = case.build_schedule()
    arrays = case.arrays()
    interp.run(tc.lower(s, case.args), *arrays)
    _check(case, arrays)


def test_builds_for_the_gpu_target_without_a_gpu():
    """target="cuda" generates the same CUDA C (compiling and launching need pycuda)."""
    for case in CASES:
        src = tc.build(lowered(case), target="cuda").get_source("cuda")
        assert "__global__" in src and "threadIdx" in src, case.name


# --------------------------------------------------------------------------- structure


def _lower_text(case):
    return str(tc.lower(case.build_schedule("cuda"), case.args))


def test_gemm_structure_4096():
    """The full 64 x 128 block: 4 x 16 threads of 16 x 8 registers, 16 k steps, the
    tiles copied 16 bytes at a time (cp.async) into two buffers each (the H200 sweeps)."""
    cfg = sc.gemm_config(4096, 4096, 4096)
    assert (cfg.threads_m, cfg.threads_n, cfg.regs_m, cfg.regs_n, cfg.k_tile) == (4, 16, 16, 8, 16)
    assert cfg.unroll_k and not cfg.pad and cfg.vector == 4 and cfg.double_buffer
    assert (cfg.block_m, cfg.block_n, cfg.threads) == (64, 128, 64)
    f = _bench()["gemm"]
    src = f.get_source("cuda")
    kern = f.kernels[0]
    assert [int(d.value) for d in kern.grid] == [32, 64, 1]
    assert kern.constant_block == (16, 4, 1)
    assert "float matmul_local[128];" in src
    # A tile 64 x 16, B tile 16 x 128, two of each, 16-byte aligned (vector loads)
    assert "__shared__ __align__(32) float A_shared[2048];" in src
    assert "__shared__ __align__(32) float B_shared[4096];" in src
    # one barrier per k step, after the wait for this thread's asynchronous copies
    loop = src[src.index("for (int k_outer"):]
    assert loop.count("__syncthreads();") == 1 and "tc_cp_async_wait();" in loop
    assert "tc_cp_async16(&" in loop
    # the 16 k steps unrolled
    assert re.search(r"#pragma unroll\n\s*for \(int k_inner = 0; k_inner < 16; ", src)


def test_gemm_below_the_full_block_keeps_the_h100_tiling():
    """Fewer blocks than MIN_BLOCKS with 8 x 8 registers: the smaller micro-tiles of the
    H100 sweeps, 32 k steps, no double buffering."""
    cfg = sc.gemm_config(512, 512, 512)
    assert (cfg.threads_m, cfg.threads_n, cfg.regs_m, cfg.regs_n, cfg.k_tile) == (8, 16, 4, 4, 32)
    assert cfg.vector == 1 and not cfg.double_buffer


def test_pipelined_gemm_structure():
    """vector=4 and double_buffer: each tile row is copied 4 floats at a time, as one
    16-byte cp.async where both addresses are aligned (else 4 of 4 bytes); the tiles
    take two buffers; one barrier per k step, after the wait for this thread's copies."""
    case = matmul_case(64, 96, 48, config=GEMM_8X8_PIPELINED)
    src = tc.build(case.build_schedule("cuda"), case.args, target="cuda").get_source("cuda")
    # [2][64][8] and [2][8][32]: two buffers each
    assert "__shared__ __align__(32) float A_shared[1024];" in src
    assert "__shared__ __align__(32) float B_shared[512];" in src
    assert src.count("tc_cp_async16(&") == 4 and src.count("tc_cp_async4(&") == 4
    loop = src[src.index("for (int k_outer"):]
    assert loop.count("__syncthreads();") == 1
    assert "tc_cp_async_wait();\n    __syncthreads();" in loop
    assert "if ((k_outer + 1) < 6)" in loop


@needs_cxx
def test_pipelined_gemm_takes_operands_off_16_byte_boundaries():
    """Operands 4 bytes past a 16-byte boundary: the copies take the element path."""
    case = matmul_case(64, 96, 48, config=GEMM_8X8_PIPELINED)
    f = tc.build(case.build_schedule("cuda-emu"), case.args, target="cuda-emu")
    a, b, _ = case.arrays()
    for shift in (1, 2):
        a2 = np.zeros(a.size + shift, np.float32)[shift:].reshape(a.shape)
        b2 = np.zeros(b.size + shift, np.float32)[shift:].reshape(b.shape)
        a2[...], b2[...] = a, b
        c = np.full((64, 96), np.nan, np.float32)
        f(a2, b2, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_small_gemms_use_smaller_tiles():
    # 128 full blocks of 64 x 128 (64 threads) would leave most SMs a warp or two: 64 x
    # 64 blocks of 128 threads (the H200 sweeps' best), as for the im2col GEMMs of a
    # convolution (196 and 256 full blocks); 512 full blocks (2048^3) keep them
    small = sc.GemmConfig(8, 16, 8, 4, 32, unroll_k=True, pad=False, vector=4,
                          double_buffer=True)
    assert sc.gemm_config(1024, 1024, 1024) == small
    assert sc.gemm_config(6272, 256, 2304) == small
    assert sc.gemm_config(256, 196, 2304, 32) == small
    assert sc.gemm_config(2048, 2048, 2048).block_n == 128
    assert sc.gemm_config(1024, 1024, 1024, 4).block_n == 128
    assert sc.gemm_config(512, 512, 512).regs_n == 4          # 128 blocks of 32x64
    assert sc.gemm_config(5, 3, 7) == sc.GemmConfig(8, 4, 1, 1, 7, True, False)
    cfg = sc.gemm_config(None, 40, None)
    assert cfg.block_n <= 64 and cfg.threads == 128


def test_short_reductions_use_64x32_blocks():
    """K <= 64 where the full 64 x 128 block would be chosen: 4 x 16 threads of 16 x 2
    registers, 8 k steps (the H200 search's best for attention's scores)."""
    short = sc.GemmConfig(4, 16, 16, 2, 8, unroll_k=True, pad=False, vector=4,
                          double_buffer=True)
    assert sc.gemm_config(512, 512, 64, 96) == short
    assert sc.gemm_config(4096, 4096, 64) == short
    assert sc.gemm_config(4096, 4096, 4) == dataclasses.replace(short, k_tile=4)
    assert sc.gemm_config(512, 512, 65, 96).block_n == 128
    assert sc.gemm_config(4096, 4096, None).block_n == 128
    assert sc.gemm_config(64, 64, 64) == sc.gemm_config(64, 64, 4096)  # small: as before


def test_odd_gemm_tiles_keep_their_size():
    """Rule 5 of docs/bounds.md: past the matrix edge a GPU tile keeps its constant size;
    only the copies from global memory and the final stores are guarded, the
    multiply-adds are not."""
    cfg = GEMM_8X8
    text = _lower_text(matmul_case(70, 150, 19, config=cfg))
    assert "allocate A.shared: float32[64, 8] (shared, strides [9, 1])" in text  # storage_align
    assert "allocate B.shared: float32[8, 32] (shared)" in text
    assert "allocate matmul.local: float32[8, 8] (local)" in text
    assert "< 70" in text and "< 150" in text  # the guards of the copies and stores
    lines = text.splitlines()
    fma = [n for n, ln in enumerate(lines) if "matmul.local[i, j] = matmul.local[i, j] +" in ln]
    assert len(fma) == 2  # the main k steps and the k tail (partitioned off)
    for n in fma:
        assert lines[n - 1].strip().startswith("unrolled (j, 0, 8)"), lines[n - 1]
    # every unrolled loop keeps a constant extent (the register tile stays in registers)
    for m in re.finditer(r"unrolled \([^,]+, [^,]+, ([^)]+)\)", text):
        assert m.group(1).strip().isdigit(), m.group(0)


def _tile_at_edge(bind: bool):
    A = tc.placeholder((10,), name="A")
    B = tc.compute((10,), lambda i: A[i] * 2.0, name="B")
    C = tc.compute((10,), lambda i: B[i] + 1.0, name="C")
    s = tc.create_schedule(C.op)
    o, i = s[C].split(C.op.axis[0], factor=4)
    s[B].compute_at(s[C], o)
    if bind:
        s[B].set_scope("shared")
        s[C].bind(o, tc.thread_axis("blockIdx.x"))
        s[C].bind(i, tc.thread_axis("threadIdx.x"))
        s[B].bind(s[B].op.axis[0], tc.thread_axis("threadIdx.x"))
    return s, [A, C]


def test_tile_at_the_edge_cpu_clipped_gpu_constant():
    """A 4-element tile of a 10-element vector: on the CPU the last tile is clipped to 2;
    in a GPU kernel it stays 4 (its copy from A guarded), and both compute the right
    values (checked in the interpreter, which poisons what is never written)."""
    s, args = _tile_at_edge(False)
    text = str(tc.lower(s, args))
    assert "for (i, 0, 2)" in text and "allocate B: float32[4] (global)" in text
    s, args = _tile_at_edge(True)
    f = tc.lower(s, args)
    text = str(f)
    assert "allocate B: float32[4] (shared)" in text
    assert "threadIdx.x (i, 0, 4)" in text and "< 10" in text
    a = np.arange(10, dtype="float32")
    c = np.full(10, np.nan, "float32")
    interp.run(f, a, c)
    np.testing.assert_array_equal(c, a * 2 + 1)


def test_unrolled_loop_in_a_kernel_keeps_its_guard():
    """Loop partitioning (rule in tecomp/lower/loop_partition.py): an unrolled loop whose
    split point would depend on a thread index keeps its guard and its constant extent
    inside a GPU kernel; elsewhere the tail is still partitioned off."""
    A = tc.placeholder((10,), name="A")
    C = tc.compute((10,), lambda i: A[i] * 2.0, name="C")

    def lowered_text(bind):
        s = tc.create_schedule(C.op)
        o, i = s[C].split(C.op.axis[0], factor=4)
        if bind:
            s[C].bind(o, tc.thread_axis("threadIdx.x"))
        s[C].unroll(i)
        return tc.lower(s, [A, C])

    f = lowered_text(True)
    text = str(f)
    assert "unrolled (i.inner, 0, 4)" in text and "if (i.outer*4 + i.inner < 10)" in text
    a, c = np.arange(10, dtype="float32"), np.full(10, np.nan, "float32")
    interp.run(f, a, c)
    np.testing.assert_array_equal(c, 2 * a)
    text = str(lowered_text(False))
    assert "unrolled (i.inner, 0, 2)" in text and "if (" not in text


def test_conv_configs_for_the_resnet_layers():
    # C = K = 64, 56x56, 3x3: 64 channels x 8x8 pixels per block, 16x4x4 threads,
    # 4 channels x 2x2 pixels per thread, 8 input channels per step
    c = _conv_cfg(64, 56, 56, 64)
    assert (c.block_k, c.block_y, c.block_x, c.threads) == (64, 8, 8, 256)
    assert (c.regs_k, c.regs_y, c.regs_x, c.c_tile) == (4, 2, 2, 4)
    # NHWC: 8 channels per step (the copy's contiguous runs are c_tile channels long)
    assert _conv_cfg(64, 56, 56, 64, channels_last=True).c_tile == 8
    assert c.unroll_c
    # C = K = 256, 14x14: the whole 14x14 image per block, 32 channels (8 per thread)
    c = _conv_cfg(256, 14, 14, 256)
    assert (c.block_k, c.block_y, c.block_x) == (32, 14, 14) and c.threads <= 256
    assert (c.regs_k, c.c_tile) == (8, 4)
    assert _conv_cfg(256, 14, 14, 256, channels_last=True).c_tile == 8


def _conv_cfg(K, OH, OW, C, channels_last=False):
    return sc.conv_config(K, OH, OW, C, (3, 3), lambda th, tw: (th + 2, tw + 2),
                          channels_last=channels_last)


def test_conv_pads_during_the_copy():
    """The padded input never exists in global memory: the shared copy computes it."""
    case = conv_case("nchw", 1, 3, 9, 9, 4, 3, 1, 1, 1)
    f = tc.build(case.build_schedule("cuda"), case.args, target="cuda")
    assert len(f.kernels) == 1
    src = f.get_source("cuda")
    assert "__shared__ __align__(32) float conv2d_nchw_pad[" in src
    assert "__shared__ __align__(32) float weight_shared[" in src
    assert "? data[" in src  # select(in image, data[...], 0) while copying


def test_softmax_configs_and_one_kernel():
    assert sc.softmax_config(1024) == sc.SoftmaxConfig(64, False, False)
    assert sc.softmax_config(37) == sc.SoftmaxConfig(32, False, False)
    assert sc.softmax_config(12000) == sc.SoftmaxConfig(256, False, False)
    assert sc.softmax_config(None) == sc.SoftmaxConfig(256, False, False)
    f = _bench()["softmax"]
    src = f.get_source("cuda")
    kern = f.kernels[0]
    assert len(f.kernels) == 1 and kern.constant_block == (64, 1, 1)
    assert int(kern.grid[0].value) == 4096
    # three passes over the row in global memory (three statements read X); written once
    assert len([ln for ln in src.splitlines() if "X[" in ln]) == 3
    assert src.count("softmax[") == 1
    # with the row and exp in shared memory: read once
    X = tc.placeholder((64, 1024), name="X")
    Y = ops.softmax(X)
    s = sc.schedule_softmax(Y, "cuda", sc.SoftmaxConfig(256, True, True))
    src = tc.build(s, [X, Y], target="cuda").get_source("cuda")
    assert src.count("X[") == 1 and src.count("softmax[") == 1
    assert src.count("expf(") == 1


def test_wrong_target_and_wrong_operator():
    A = tc.placeholder((8, 8), name="A")
    B = tc.placeholder((8, 8), name="B")
    C = ops.matmul(A, B)
    with pytest.raises(ScheduleError, match="for target 'cuda' or 'cuda-emu'"):
        sc.schedule_matmul(C, target="llvm")
    with pytest.raises(ScheduleError, match="expected one dense stage"):
        sc.schedule_dense(C)
    with pytest.raises(ScheduleError, match="not a softmax"):
        sc.schedule_softmax(C)
    with pytest.raises(ScheduleError, match="is a reduction"):
        sc.schedule_injective(C)
    # an epilogue that is not elementwise over the GEMM's shape
    T = tc.compute((8,), lambda i: C[i, 0] + 1.0, name="T")
    with pytest.raises(ScheduleError, match="not an elementwise function"):
        sc.schedule_matmul(T)
    # an epilogue reading the product at another index than its own (here transposed)
    T2 = tc.compute((8, 8), lambda i, j: C[i, j] + C[j, i], name="T2")
    with pytest.raises(ScheduleError, match="reads matmul at another index"):
        sc.schedule_matmul(T2)
    with pytest.raises(ScheduleError, match="config must be a GemmConfig"):
        sc.schedule_matmul(C, config=(16, 16, 8, 8, 8))
    n = tc.var("n")
    X = tc.placeholder((4, n), name="X")
    with pytest.raises(ScheduleError, match="symbolic length cannot be held in shared"):
        sc.schedule_softmax(ops.softmax(X), config=sc.SoftmaxConfig(64, True, True))


def test_constant_size_counts_padded_strides():
    """A shared array with a padded row stride (storage_align) spans
    1 + sum((extent - 1) * stride) elements."""
    from tecomp.lower.device_split import constant_size
    from tecomp.ir import Buffer
    from tecomp.ir.expr import Const

    b = Buffer("T", (Const(128), Const(8)), "float32", (Const(9), Const(1)), "shared")
    assert constant_size(b) == 127 * 9 + 8
    assert constant_size(Buffer("U", (Const(4), Const(8)), "float32", None, "shared")) == 32


# --------------------------------------------------------------------------- nvcc


def _gpu_benchmark_module():
    path = os.path.join(os.path.dirname(__file__), "..", "benchmarks", "gpu.py")
    spec = importlib.util.spec_from_file_location("tecomp_bench_gpu", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


BENCH = _gpu_benchmark_module()


@functools.lru_cache(maxsize=None)
def _bench():
    """The benchmark's kernels (benchmarks/gpu.py), built for target "cuda" (but
    FlashAttention's: tests/test_flash_attention.py compiles those with ptxas)."""
    names = {"gemm 4096^3": "gemm", "softmax 4096x1024": "softmax"}
    return {names.get(w.name, w.name): w.build() for w in BENCH.WORKLOADS
            if "flash" not in w.name}


def test_gpu_benchmark_table():
    rows = [BENCH.Row("gemm 4096^3", {"tecomp": 4.0, "torch": 2.0, "cupy": None},
                      flops=2.0 * 4096 ** 3),
            BENCH.Row("softmax 4096x1024", {"tecomp": 0.02, "torch": 0.03},
                      bytes=2.0 * 4 * 4096 * 1024,
                      notes=["grid (4096, 1, 1)"])]
    text = BENCH.format_table(rows, ["torch", "cupy"])
    lines = text.splitlines()
    assert lines[0].split() == ["workload", "tecomp", "ms", "tecomp", "torch", "ms", "vs", "torch",
                                "cupy", "ms", "vs", "cupy"]
    assert set(lines[1]) <= {"-", " "}
    gemm, soft = lines[2].split(), lines[3].split()
    # 2*4096^3 flops in 4 ms = 34.4 TFLOP/s; tecomp at half torch's speed; no CuPy
    assert gemm[2:] == ["4.000", "34.4", "TFLOP/s", "2.000", "0.50x", "-", "-"]
    assert soft[2:] == ["0.020", "1678", "GB/s", "0.030", "1.50x", "-", "-"]
    assert len({len(ln) for ln in lines[:4]}) == 1  # fixed width
    assert lines[-1] == "  softmax 4096x1024: grid (4096, 1, 1)"
    assert BENCH.ratio(None, 1.0) is None and BENCH.ratio(3.0, 1.5) == 2.0


def test_gpu_benchmark_without_a_gpu_says_so(monkeypatch, capsys):
    def missing():
        raise RuntimeUnavailableError("pycuda is not installed")

    monkeypatch.setattr(BENCH, "gpu_driver", missing)
    assert BENCH.main([]) == BENCH.NO_GPU_STATUS
    err = capsys.readouterr().err
    assert "needs a CUDA GPU and pycuda: pycuda is not installed" in err
    assert "Nothing was measured" in err


@pytest.mark.skipif(importlib.util.find_spec("pycuda") is not None,
                    reason="pycuda is installed: the script would run the benchmark")
def test_gpu_benchmark_script_exits_cleanly_without_pycuda():
    path = os.path.join(os.path.dirname(__file__), "..", "benchmarks", "gpu.py")
    proc = subprocess.run([sys.executable, path, "--quick"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == BENCH.NO_GPU_STATUS, proc.stderr
    assert "needs a CUDA GPU and pycuda: pycuda is not installed" in proc.stderr
    assert proc.stdout == ""


@needs_cxx
@pytest.mark.parametrize("w", [BENCH.gemm_workload(40), BENCH.conv_workload(5, 6, "nchw", N=2),
                               BENCH.conv_workload(6, 5, "nhwc", N=2),
                               BENCH.softmax_workload(3, 50), BENCH.bmm_workload(2, 40, 16),
                               BENCH.gemm_workload(32, half=True),
                               BENCH.bmm_workload(2, 32, 16, half=True),
                               BENCH.hdense_workload(32, 48, 32),
                               BENCH.flash_workload(1, 2, 40, 64, True),
                               BENCH.flash_backward_workload(1, 2, 40, 64, True),
                               BENCH.masked_sdpa_workload(2, 2, 40, 32)],
                         ids=lambda w: w.name)
def test_gpu_benchmark_workloads_check_out(w):
    """The benchmark's own data layouts and float64 references (numpy, as without PyTorch)
    agree with its tecomp kernels, here at small sizes in the emulation."""
    mod = w.build("cuda-emu")
    st = w.setup(None, None)
    mod(*st.host, mode="serial")
    # a float16 output (attention's) rounds to float16's precision
    tol = w.tolerance if st.host[-1].dtype == np.float16 else BENCH.TOLERANCE
    assert BENCH.max_rel_error(st.host[-1], st.expect()) < tol
    if "f16" in w.name:   # on tensor cores, in the emulation too
        assert "mma_sync" in mod.get_source() or "tc_mma_m16n8k16" in mod.get_source()


def test_the_flash_forward_ab_forms():
    """``--ab``'s forms of the flash forward: the shared form (stages 1 and 2), the
    register form, the fragment form (stages 1 and 2), with ``ftz``, with ``ftz`` and
    ``exp2`` and, causal, with ``whole`` too, then without the diagonal tiles' test;
    each of the causal ones builds (the lease times them: none may fail to build)."""
    for causal in (False, True):
        forms = BENCH.flash_workload(1, 2, 256, 64, causal).ab()
        got = [(c.form, c.stages, c.whole, c.ftz, c.exp2, c.diagonal_test) for c in forms]
        assert got == [("shared", 1, None, False, False, True),
                       ("shared", 2, None, False, False, True),
                       ("registers", 1, None, False, False, True),
                       ("fragments", 1, None, False, False, True),
                       ("fragments", 2, None, False, False, True),
                       ("fragments", 1, None, True, False, True),
                       ("fragments", 1, None, True, True, True)] + (
                           [("fragments", 1, True, True, False, True),
                            ("fragments", 1, True, True, True, True),
                            ("fragments", 1, True, True, True, False)] if causal else [])
    w = BENCH.flash_workload(1, 2, 256, 64, True)
    for c in forms:
        src = w.build("cuda", config=c).get_source()
        assert "__global__" in src and ("ex2.approx.ftz.f32" in src) == c.ftz


def _emulated_timing(monkeypatch):
    """(clock, driver) for benchmarks/gpu.py's sweep and tune lines in the emulation: its
    launches run the emulation; the first launch made "takes" 2 ms, every other 1 ms."""
    launches = []
    monkeypatch.setattr(BENCH, "DirectLaunch",
                        lambda mod, dev, drv: launches.append(
                            lambda: mod(*dev, mode="serial")) or launches[-1])

    class Clock:
        def sample(self, fn, inner):
            fn()
            return 2.0 if fn is launches[0] else 1.0

    class Drv:
        def synchronize(self):
            pass

    return Clock(), Drv()


@needs_cxx
def test_gpu_benchmark_sweep_checks_and_times_every_tiling(monkeypatch):
    """``benchmarks/gpu.py --sweep``'s table, run in the emulation (the launches and the
    GPU timer replaced): every tiling checked and timed, the default first and labelled,
    one that does not build reported with its reason."""
    w = BENCH.gemm_workload(40)
    build = w.build
    default = sc.gemm_config(40, 40, 40)
    too_big = sc.GemmConfig(32, 32, 16, 16, 64)  # 2 x 512 x 64 floats: over 227 KiB
    w = dataclasses.replace(w, build=lambda config=None: build("cuda-emu", config),
                            configs=lambda: [default, GEMM_8X8_UNROLLED, too_big])
    st = w.setup(None, None)
    clock, drv = _emulated_timing(monkeypatch)  # the default takes 2 ms, the others 1 ms
    text = BENCH.sweep(w, st, st.host, st.expect(), clock, drv, rounds=2, inner=1)
    lines = text.splitlines()
    assert lines[0] == "sweep: gemm 40^3 ()"
    assert lines[1].split()[:4] == ["tiling", "ms", "vs", "default"]
    fast, slow = lines[3], lines[4]  # fastest first
    assert fast.startswith(BENCH.config_text(GEMM_8X8_UNROLLED)) and fast.split()[-2:] == \
        ["1.000", "2.00x"]
    assert slow.startswith("default " + BENCH.config_text(default)) and \
        slow.split()[-2:] == ["2.000", "1.00x"]
    assert lines[5].startswith(BENCH.config_text(too_big) + ": failed: ResourceLimitError")
    assert len(lines) == 6
    assert BENCH.config_text(GEMM_8X8_UNROLLED) == \
        "t_m=8, t_n=4, r_m=8, r_n=8, kt=8, unroll_k=1, pad=0, vec=1, db=0"


def test_gpu_benchmark_sweeps_start_with_the_default():
    for w in BENCH.WORKLOADS:
        cfgs = w.configs()
        assert len(cfgs) >= 5 and len(set(cfgs)) == len(cfgs), w.name
    gemm = BENCH.WORKLOADS[0]
    assert gemm.configs()[0] == sc.gemm_config(4096, 4096, 4096)


@needs_nvcc
def test_nvcc_compiles_every_case_and_keeps_tiles_in_registers():
    """All the test cases and the benchmark kernels in one translation unit (kernel
    names differ; helpers are include-guarded): compiles for sm_80, and no kernel has a
    local-memory frame (a register tile indexed by a run-time value would need one)."""
    srcs = [tc.build(lowered(case), target="cuda").get_source("cuda") for case in CASES]
    srcs += [f.get_source("cuda") for f in _bench().values()]
    ptx = compile_ptx("\n".join(srcs), "sm_80", options=("-diag-suppress", "550"))
    entries = re.findall(r"\.entry (\w+)\(", ptx)
    assert len(entries) >= len(CASES) + 5
    assert "__local_depot" not in ptx, "a kernel keeps an array in local memory"


# --------------------------------------------------------------------------- real GPU


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_gpu_matches_numpy(gpu_driver, case):
    f = tc.build(lowered(case), target="cuda")
    for seed in (0, 1):
        arrays = case.arrays(seed)
        f(*arrays)
        _check(case, arrays)


@pytest.mark.gpu
@pytest.mark.parametrize("which", ["gemm", "conv_nchw", "conv_nhwc", "softmax"])
def test_gpu_benchmark_sizes(gpu_driver, which):
    """The benchmark configurations (128x128 GEMM tiles, the ResNet conv tiling, 256-thread
    softmax rows) at sizes small enough to check against numpy quickly."""
    case = {
        "gemm": lambda: matmul_case(1024, 1024, 512),
        "conv_nchw": lambda: conv_case("nchw", 2, 64, 56, 56, 64, 3, 1, 1, 1),
        "conv_nhwc": lambda: conv_case("nhwc", 2, 256, 14, 14, 256, 3, 1, 1, 1),
        "softmax": lambda: softmax_case((512, 1024)),
    }[which]()
    f = tc.build(case.build_schedule("cuda"), case.args, target="cuda", name=_cname(case))
    arrays = case.arrays()
    f(*arrays)
    _check(case, arrays)


@needs_cxx
def test_gpu_benchmark_tune_line(monkeypatch):
    """``benchmarks/gpu.py --tune N``'s line, run in the emulation (the search with target
    cuda-emu; launches and timer replaced): the tuned schedule checked, then timed against
    the analytic one."""
    w = BENCH.bmm_workload(2, 40, 16)
    build = w.build
    w = dataclasses.replace(w, build=lambda config=None: build("cuda-emu", config))
    st = w.setup(None, None)
    clock, drv = _emulated_timing(monkeypatch)  # the analytic schedule 2 ms, the tuned 1 ms
    text = BENCH.tune(w, st, st.host, st.expect(), clock, drv, rounds=2, inner=1,
                      trials=3, target="cuda-emu")
    first, knobs = text.splitlines()
    assert first.startswith("tune: bmm 2x40x40x16 (auto_schedule): 3 trials in ")
    assert "tuned 1.000 ms, analytic 2.000 ms (2.00x)" in first, first
    assert knobs.startswith("  best knobs: ") and "threads_m=" in knobs


def test_gpu_benchmark_odd_families_build_and_decide():
    """``--only odd``'s A/B (benchmarks/gpu.py): each family's build of an odd GEMM (the
    tensor-core tiling past WMMA_MAX_WASTE too: the threshold is what it measures), and
    the lines that set WMMA_MAX_WASTE and WGMMA_BY_DEFAULT from the timings."""
    v = BENCH.odd_variants(8, 4096, 4096, "float16", hopper=True)   # waste 1/2 of 16 rows
    assert list(v) == ["wmma", "mma", "wgmma", "wgmma-tma", "wgmma-tma-warp", "cuda-cores"]
    assert v["wmma"][1] == 0.5 and v["wgmma"][2].family == "wgmma"
    assert "tc_wgmma_m64n" in v["wgmma-tma"][0].get_source() and v["wgmma-tma"][2].producer == "tma"
    assert "wmma" not in v["cuda-cores"][0].get_source()
    assert "wgmma-tma" not in BENCH.odd_variants(100, 64, 100, "float16", hopper=True)
    lines = BENCH.waste_decision([("a", 0.1, 1.0, 2.0), ("b", 0.6, 1.0, 1.5),
                                  ("c", 0.9, 2.0, 1.0), ("d", None, None, 1.0)], 0.75)
    assert "0.600 (b)" in lines[0] and "0.900 (c)" in lines[0]
    assert lines[1] == "  -> set WMMA_MAX_WASTE = 0.75 (midway: tecomp/strategy/cuda/tensorcore.py)"
    got = BENCH.wgmma_decision({"wgmma": [1.2, 1.3], "wgmma-tma": [1.5, 1.4], "x": []})
    assert got[-1] == ("  -> set WGMMA_BY_DEFAULT = True and make wgmma-tma's producer the "
                       "WGMMA_CONFIGS default")
    assert BENCH.wgmma_decision({"wgmma": [0.9]})[-1].startswith("  -> keep")


def test_gpu_benchmark_n_major_variant_builds_and_decides():
    """``--family all``'s wgmma-te-tma-warp-nmajor (benchmarks/gpu.py): matmul(A, B) with
    B[K, N] N-major through the TMA producer warp (wgmma's imm-trans-b, a 3-d box of B),
    and the lines that set WGMMA_MN_MAJOR_BY_DEFAULT from the timings."""
    src = BENCH.nmajor_build(256, "float16").get_source()
    assert "tc_wgmma_m64n128k16_f16_tb(" in src and "tc_tma_load_3d(" in src
    got = BENCH.mn_major_decision({"wmma/mma": [1.3, 1.2], "wgmma-te-tma-warp": [0.95, 1.0],
                                   "torch": [0.7, 0.72]})
    assert got[0].startswith("WGMMA_MN_MAJOR_BY_DEFAULT (now True;")
    assert got[1].startswith(f"  {BENCH.NMAJOR}: 1.25x the best of wmma/mma")
    assert got[-1] == "  -> set WGMMA_MN_MAJOR_BY_DEFAULT = True"
    assert BENCH.mn_major_decision({"wmma/mma": [1.01]})[-1].startswith(
        "  -> set WGMMA_MN_MAJOR_BY_DEFAULT = False")
    assert BENCH.mn_major_decision({})[0].endswith("nothing measured (not an sm_90 device?)")
