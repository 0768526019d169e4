"""The TMA producer of a ring of shared tiles (``double_buffer(stages, producer="tma")``,
tecomp/lower/tma_pipeline.py): the wgmma template's tiles copied by one thread through
tensor maps into a ring guarded by mbarriers, in the CUDA emulation (against the threads'
cp.async ring and PyTorch), through the GPU runtime's launch path (the maps encoded by a
stand-in driver), and compiled by nvcc for sm_90a (UTMALDG, HGMMA, SYNCS, no spills)."""
from __future__ import annotations

import os
import re
import shutil

import numpy as np
import pytest
import torch

import tecomp as tc
import tecomp.nn  # noqa: F401
from tecomp.codegen.cuda import build_cuda
from tecomp.runtime.nvcc import compile_ptx, find_nvcc
from tecomp.strategy import cuda as sc
from tecomp.testing.gpu_resources import parse_ptxas, ptxas_build
from helpers import gpu_driver  # noqa: F401  (a fixture)

needs_cxx = pytest.mark.skipif(shutil.which("g++") is None and shutil.which("clang++") is None,
                               reason="no C++ compiler for the CUDA emulation")
needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc is not on PATH")
SM90A = "cuda -arch=sm_90a"
LONG = os.environ.get("TECOMP_LONG_TESTS", "") not in ("", "0")


def dense(M, N, K, dtype, epilogue, producer, target="cuda-emu", cfg=None):
    X = tc.placeholder((M, K), dtype, name="X")
    W = tc.placeholder((N, K), dtype, name="W")
    b = tc.placeholder((N,), dtype, name="b")
    if epilogue:
        Y = tc.nn.gelu(tc.nn.dense(X, W, b))
        args = [X, W, b, Y]
    else:
        Y = tc.nn.dense(X, W)
        args = [X, W, Y]
    cfg = cfg or sc.WmmaConfig(8, 1, 1, 8, 64, family="wgmma", stages=3, producer=producer)
    return sc.schedule_dense(Y, target, config=cfg), args


def _run(f, M, N, K, dtype, epilogue, seed=0):
    g = torch.Generator().manual_seed(seed)
    tdt = getattr(torch, dtype)
    x, w, bb = (torch.randn(M, K, generator=g).to(tdt), torch.randn(N, K, generator=g).to(tdt),
                torch.randn(N, generator=g).to(tdt))
    y = torch.zeros(M, N, dtype=tdt)
    f(*((x, w, bb, y) if epilogue else (x, w, y)))
    want = x.double() @ w.double().T
    if epilogue:
        want = torch.nn.functional.gelu(want + bb.double())
    return y, want


@needs_cxx
@pytest.mark.parametrize("M,N,K,dtype,epilogue,cfg", [
    (128, 128, 192, "float16", True, (8, 1, 1, 8, 64, 3)),    # 2 warpgroups, k 64, 3 stages
    pytest.param(128, 256, 192, "bfloat16", False, (4, 1, 1, 8, 32, 4),  # k 32, 4 stages
                 marks=[pytest.mark.slow, pytest.mark.skipif(not LONG, reason=(
                     "slow: set TECOMP_LONG_TESTS=1"))]),
])
def test_tma_ring_computes_what_the_threads_ring_does(M, N, K, dtype, epilogue, cfg):
    """The same wgmmas on the same tiles: bit for bit the cp.async ring's result."""
    out = {}
    for producer in ("tma", "threads"):
        c = sc.WmmaConfig(*cfg[:5], family="wgmma", stages=cfg[5], producer=producer)
        s, args = dense(M, N, K, dtype, epilogue, producer, cfg=c)
        out[producer], want = _run(tc.build(s, args, target="cuda-emu"), M, N, K, dtype,
                                   epilogue)
    assert torch.equal(out["tma"], out["threads"])
    np.testing.assert_allclose(out["tma"].float().numpy(), want.float().numpy(), rtol=2e-2,
                               atol=2e-2 if dtype == "float16" else 0.3)


def hand_gemm(M, N, K, dtype, layout, producer, stages=3):
    """``C = A . B^T`` (``layout`` "nt": ``B[N, K]``) or ``A . B`` ("nn": ``B[K, N]``),
    float32 sums, scheduled by hand: 64 x 64 blocks of 16 x 16 threads, 4 x 4 each, the
    tiles of A and B at each 32 of k in shared memory, double-buffered by ``producer``."""
    A = tc.placeholder((M, K), dtype, name="A")
    B = tc.placeholder((N, K) if layout == "nt" else (K, N), dtype, name="B")
    k = tc.reduce_axis((0, K), name="k")
    C = tc.compute((M, N), lambda i, j: tc.sum(A[i, k].astype("float32") * (
        B[j, k] if layout == "nt" else B[k, j]).astype("float32"), axis=k), name="C")
    s = tc.create_schedule(C.op)
    AS, BS = s.cache_read(A, "shared", [C]), s.cache_read(B, "shared", [C])
    CL = s.cache_write(C, "local")
    i, j = s[C].op.axis
    bi, i = s[C].split(i, factor=64)
    bj, j = s[C].split(j, factor=64)
    ti, i = s[C].split(i, factor=4)
    tj, j = s[C].split(j, factor=4)
    s[C].reorder(bi, bj, ti, tj, i, j)
    for ax, tag in ((bi, "blockIdx.y"), (bj, "blockIdx.x"), (ti, "threadIdx.y"),
                    (tj, "threadIdx.x")):
        s[C].bind(ax, tc.thread_axis(tag))
    s[CL].compute_at(s[C], tj)
    ko, ki = s[CL].split(s[CL].op.reduce_axis[0], factor=32)
    s[CL].reorder(ko, ki, *s[CL].op.axis)
    for S in (AS, BS):
        s[S].compute_at(s[CL], ko)
        s[S].double_buffer(stages=stages, producer=producer)
    return s, [A, B, C]


@needs_cxx
@pytest.mark.parametrize("M,N,K,dtype,layout", [
    (100, 72, 88, "float16", "nt"),     # the edge tiles' boxes past M, N and K: zeros
    (70, 136, 40, "bfloat16", "nn"),    # B[K, N]: its tiles' rows are n, as B's
])
def test_a_hand_schedule_on_odd_shapes(M, N, K, dtype, layout):
    """Any shared stage the primitive's rules allow, not only the tensor-core template's:
    plain [rows, k] tiles as 2-d boxes, clipped at the tensors' edges (the copy of the
    whole box reads zeros there)."""
    rng = np.random.default_rng(M + N + K)
    a = torch.from_numpy(rng.standard_normal((M, K), np.float32)).to(getattr(torch, dtype))
    b = torch.from_numpy(rng.standard_normal((N, K) if layout == "nt" else (K, N),
                                             np.float32)).to(getattr(torch, dtype))
    s, args = hand_gemm(M, N, K, dtype, layout, "tma")
    c = torch.full((M, N), float("nan"))
    tc.build(s, args, target="cuda-emu")(a, b, c)
    want = a.double() @ (b.double().T if layout == "nt" else b.double())
    np.testing.assert_allclose(c.numpy(), want.numpy(), rtol=1e-4, atol=1e-3)


@needs_cxx
def test_maps_follow_each_calls_arrays():
    """A symbolic extent: the map is encoded per call from the arguments' extents and
    addresses (a non-contiguous view: from the emulation's contiguous copy of it)."""
    s, args = hand_gemm(tc.var("M"), 64, 64, "float16", "nt", "tma", stages=2)
    f = tc.build(s, args, target="cuda-emu")
    b = torch.randn(64, 64).half()
    for a in (torch.randn(37, 64).half(), torch.randn(130, 128).half()[:, ::2]):
        c = torch.zeros(a.shape[0], 64)
        f(a, b, c)
        np.testing.assert_allclose(c.numpy(), (a.double() @ b.double().T).numpy(), rtol=1e-4,
                                   atol=1e-3)


@needs_cxx
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_a_producer_warp_fills_the_ring(dtype):
    """producer='tma_warp': one more threadIdx.z, whose first thread issues every
    iteration's copies ahead of the computing warps (the emulation's threads run
    concurrently); the computing warps' loops leave it out."""
    cfg = sc.WmmaConfig(8, 1, 1, 8, 64, family="wgmma", stages=3, producer="tma_warp")
    s, args = dense(128, 128, 256, dtype, dtype == "float16", "tma_warp", cfg=cfg)
    f = tc.build(s, args, target="cuda-emu")
    assert f.kernels[0].constant_block == (32, 1, 9)
    y, want = _run(f, 128, 128, 256, dtype, dtype == "float16")
    np.testing.assert_allclose(y.float().numpy(), want.float().numpy(), rtol=2e-2,
                               atol=2e-2 if dtype == "float16" else 0.3)
    src = f.get_source("cuda") if hasattr(f, "get_source") else ""
    assert "if (threadIdx.z == 8 && threadIdx.y == 0 && threadIdx.x == 0)" in src
    assert "blockDim.x * blockDim.y * (blockDim.z - 1)" in src


@needs_cxx
@pytest.mark.parametrize("dtype,producer,blocks,group_m", [
    ("float16", "tma_warp", 5, 2),     # 12 tiles over 5 blocks, groups of 2 tile rows
    ("bfloat16", "threads", 3, 8),     # the cp.async ring, one group
])
def test_persistent_blocks_loop_over_the_tiles(dtype, producer, blocks, group_m):
    """s[out].persistent(blocks, group_m): fewer blocks than tiles, each looping over its
    share in grouped order (a TMA ring set up again for each tile); every element of the
    output written once (it starts as NaN)."""
    cfg = sc.WmmaConfig(4, 1, 1, 4, 64, family="wgmma", stages=3, producer=producer)
    s, args = dense(256, 192, 128, dtype, True, producer, cfg=cfg)
    s[args[-1]].persistent(blocks, group_m=group_m)
    f = tc.build(s, args, target="cuda-emu")
    assert f.kernels[0].constant_block[2] == 4 + (producer == "tma_warp")
    assert [int(d.value) for d in f.kernels[0].grid] == [blocks, 1, 1]
    g = torch.Generator().manual_seed(5)
    tdt = getattr(torch, dtype)
    x, w, bb = (torch.randn(256, 128, generator=g).to(tdt), torch.randn(192, 128, generator=g)
                .to(tdt), torch.randn(192, generator=g).to(tdt))
    y = torch.full((256, 192), float("nan"), dtype=tdt)
    f(x, w, bb, y)
    want = torch.nn.functional.gelu(x.double() @ w.double().T + bb.double())
    np.testing.assert_allclose(y.float().numpy(), want.float().numpy(), rtol=2e-2,
                               atol=2e-2 if dtype == "float16" else 0.3)


def test_persistent_blocks_in_the_printed_ir():
    cfg = sc.WmmaConfig(4, 1, 1, 4, 64, family="wgmma", stages=3, producer="tma")
    s, args = dense(256, 192, 128, "float16", True, "tma", cfg=cfg)
    s[args[-1]].persistent(5, group_m=2)
    text = str(tc.lower(s, args, target="cuda"))
    for want in ("blockIdx.x (persistent.block, 0, 5) {",
                 "for (persistent.step, 0, (12 - persistent.block + 4) // 5) {",
                 "let persistent.tile = persistent.block + persistent.step*5",
                 "let i1.outer = persistent.tile % 6 // min(4 - (persistent.tile // 6)*2, 2)"):
        assert want in text, want


def test_the_ring_in_the_printed_ir():
    s, args = dense(128, 128, 192, "float16", False, "tma")
    text = str(tc.lower(s, args))
    for want in ("// attr buffer_swizzle = (X.shared: float16[3, 128, 64], '128B')",
                 "allocate X.shared: float16[3, 128, 64] (shared)",
                 "tensorize cuda.wgmma_f16f16f32_n128_k64_rows (accumulate) {",
                 "allocate W.shared.bars: int64[16] (shared)",
                 "// attr tma_pipeline = (W.shared.bars: int64[16], 3, 'thread')",
                 "// attr tma_produce = 0", "// attr tma_produce = k.outer + 2",
                 "// attr tma_copy = W[0, k.outer*64 + 128]",
                 "// attr tma_consume = k.outer"):
        assert want in text, want
    assert "syncthreads" not in text.split("tma_pipeline")[1].split("mma_store")[0]


def test_the_cuda_source_passes_tensor_maps_and_waits_on_mbarriers():
    s, args = dense(128, 128, 192, "float16", True, "tma", target=SM90A)
    src = tc.build(s, args, target=SM90A).get_source("cuda")
    assert re.search(r"const __grid_constant__ tc_tensor_map X_tmap", src)
    assert src.count("tc_tma_load_2d(&") == 6          # 2 tiles x (2 before the loop + 1)
    # the rings swizzled as the maps write them: descriptors of mode 1 (128B), SBO 1024
    assert re.search(r"tc_wgmma_desc\([^;]*, 16, 1024, 1\)", src)
    assert "__shared__ __align__(1024) __half X_shared" in src or "tc_dynamic_smem" in src
    for want in ("tc_mbar_arrive_expect_tx(", "tc_mbar_wait(", "tc_mbar_arrive(",
                 "tc_mbar_init_fence();", "extern __shared__ __align__(1024)"):
        assert want in src, want


class _GpuLike:
    """What the GPU runtime's launch needs from a driver, over the CUDA emulation, with a
    stand-in libcuda whose cuTensorMapEncodeTiled writes the emulation's maps."""

    def __init__(self):
        from test_cuda_gpu import EmuDriver
        from fake_libcuda import FakeLibcuda
        self.inner = EmuDriver()
        self.inner.compute_capability, self.inner.arch = (9, 0), "sm_90a"
        self.cu = FakeLibcuda(None)

    def __getattr__(self, name):
        return getattr(self.inner, name)


@needs_cxx
def test_the_gpu_runtime_encodes_the_maps_by_the_driver_and_launches_with_them():
    drv = _GpuLike()
    s, args = dense(128, 128, 192, "float16", True, "tma", target=SM90A)
    mod = build_cuda(tc.lower(s, args), driver=drv, target=SM90A)
    y, want = _run(mod, 128, 128, 192, "float16", True)
    np.testing.assert_allclose(y.float().numpy(), want.float().numpy(), rtol=2e-2, atol=2e-2)
    encoded = [c[1] for c in drv.cu.calls if c[0] == "cuTensorMapEncodeTiled"]
    # W[128, 192] as it lies, boxes of 64 k x 128 rows, swizzled 128B
    # (CU_TENSOR_MAP_SWIZZLE_128B = 3)
    assert {"dims": [192, 128], "strides": [384], "box": [64, 128]}.items() \
        <= encoded[0].items() and encoded[0]["swizzle"] == 3
    name, grid, block, types = drv.inner.launches[0]
    assert types.endswith("TT") and drv.inner.streams == [0]   # the driver API's launch


@needs_nvcc
@pytest.mark.parametrize("producer,persistent", [("tma", False), ("tma_warp", True)])
def test_nvcc_sm90a_has_tma_hgmma_and_mbarriers_and_nothing_spills(producer, persistent):
    s, args = dense(4096, 3072, 768, "float16", True, producer, target=SM90A)
    if persistent:
        s[args[-1]].persistent(132)
    src = tc.build(s, args, target=SM90A).get_source("cuda")
    ptx = compile_ptx(src, "sm_90a")
    for want in ("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes",
                 "mbarrier.try_wait.parity.shared::cta.b64",
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16",
                 # the descriptors' constant bits: 128B swizzle (1 << 62), SBO 1024 (the
                 # 8-row pattern, 64 << 32), LBO 16 (1 << 16)
                 str((1 << 62) | (64 << 32) | (1 << 16))):
        assert want in ptx, want
    report, sass = ptxas_build(src, "sm_90a", sass=True)
    assert "serialized" not in report, report
    for kernel, use in parse_ptxas(report).items():
        assert use["spill_stores"] == use["spill_loads"] == use["stack"] == 0, (kernel, use)
    if sass is not None:   # (where a disassembler is installed)
        for want in ("UTMALDG.2D", "HGMMA.64x128x16.F32", "SYNCS.PHASECHK.TRANS64.TRYWAIT",
                     "SYNCS.ARRIVE.TRANS64"):
            assert want in sass, want


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,producer", [("float16", "tma"), ("bfloat16", "tma"),
                                            ("float16", "tma_warp"), ("bfloat16", "tma_warp")])
def test_tma_ring_on_the_gpu(gpu_driver, dtype, producer):
    if gpu_driver.arch not in ("sm_90", "sm_90a"):
        pytest.skip(f"TMA and wgmma need an sm_90 device; this is {gpu_driver.arch}")
    s, args = dense(256, 384, 320, dtype, True, producer, target=SM90A)
    f = tc.build(s, args, target=SM90A)
    g = torch.Generator().manual_seed(3)
    tdt = getattr(torch, dtype)
    x, w, bb = (torch.randn(256, 320, generator=g).to(tdt), torch.randn(384, 320, generator=g)
                .to(tdt), torch.randn(384, generator=g).to(tdt))
    y = torch.zeros(256, 384, dtype=tdt)
    f(x, w, bb, y)
    want = torch.nn.functional.gelu(x.double() @ w.double().T + bb.double())
    np.testing.assert_allclose(y.float().numpy(), want.float().numpy(), rtol=2e-2,
                               atol=2e-2 if dtype == "float16" else 0.3)


@needs_cxx
@pytest.mark.parametrize("M,N,K,k_tile,producer", [
    (100, 72, 88, 64, "tma"),        # odd M, N, K: the boxes' out-of-bounds zeros; 128B
    pytest.param(130, 72, 40, 32, "tma_warp", marks=[pytest.mark.slow, pytest.mark.skipif(
        not LONG, reason="slow: set TECOMP_LONG_TESTS=1")]),   # k 32: 64B, a producer warp
])
def test_swizzled_rings_on_odd_shapes_without_bank_conflicts(M, N, K, k_tile, producer):
    """The template's TMA rings: [rows, k_tile] tiles as they lie in the tensors, the
    slots swizzled as the maps write them (CU_TENSOR_MAP_SWIZZLE_128B / 64B) and read by
    wgmma descriptors of the same mode; at the edge the boxes' out-of-bounds zeros stand
    for the padded copies'.  The emulation's bank counter sees each core matrix wgmma
    reads in one wavefront (the swizzle spreads its 8 rows over the 32 banks)."""
    cfg = sc.WmmaConfig(8 if k_tile == 64 else 4, 1, 1, 8, k_tile, family="wgmma", stages=3,
                        producer=producer)
    s, args = dense(M, N, K, "float16", False, producer, cfg=cfg)
    f = tc.build(s, args, target="cuda-emu")
    swz = {64: "128B", 32: "64B"}[k_tile]
    assert f"attr buffer_swizzle = (X.shared: float16[3, {cfg.block_m}, {k_tile}], '{swz}')" \
        in str(tc.lower(s, args))
    f.shared_memory_stats(reset=True)
    y, want = _run(f, M, N, K, "float16", False, seed=3)
    np.testing.assert_allclose(y.float().numpy(), want.float().numpy(), rtol=2e-2, atol=2e-2)
    st = f.shared_memory_stats()
    assert st["wgmma_phases"] > 0 and st["wgmma_bank_conflicts"] == 0, st

