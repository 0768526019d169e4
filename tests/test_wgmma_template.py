"""The tensor-core GEMM template on Hopper's warpgroup MMA (``WmmaConfig(...,
family="wgmma")``, the ``cuda.wgmma_*`` intrinsics of tecomp/te/intrin_wgmma.py): checked
in the CUDA emulation (each thread computes its own accumulator registers from the
descriptors' view of shared memory, so a wrong layout or descriptor gives a wrong result
here as on the GPU), in its printed IR, and through nvcc / ptxas for sm_90a."""
from __future__ import annotations

import os
import re
import shutil

import numpy as np
import pytest

import tecomp as tc
import tecomp.nn as nn
from tecomp.runtime.nvcc import compile_ptx, find_nvcc
from tecomp.strategy import cuda as sc
from tecomp.strategy.cuda import tensorcore
from tecomp.strategy.cuda.tensorcore import (WmmaConfig, schedule_wmma_gemm, shared_bytes,
                                             wgmma_config)
from tecomp.target.cuda import block_shared_limit
from tecomp.testing.gpu_resources import parse_ptxas, ptxas_build
from helpers import gpu_driver  # noqa: F401  (a fixture)

torch = pytest.importorskip("torch")   # bfloat16 arrays

needs_cxx = pytest.mark.skipif(shutil.which("g++") is None and shutil.which("clang++") is None,
                               reason="the CUDA emulation needs a C++ compiler")
needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc is not on PATH")
TORCH = {"float16": torch.float16, "bfloat16": torch.bfloat16}
SM90A = "cuda -arch=sm_90a"
LONG = os.environ.get("TECOMP_LONG_TESTS", "") not in ("", "0")
long_only = pytest.mark.skipif(not LONG, reason="more of the same: set TECOMP_LONG_TESTS=1")


@pytest.fixture(autouse=True)
def wgmma_by_default(monkeypatch):
    """These tests check the wgmma family the templates take on sm_90a by default, on every
    layout (``tensorcore.WGMMA_THREADS_BY_DEFAULT``: the cp.async-fed tiles too)."""
    monkeypatch.setattr(tensorcore, "WGMMA_BY_DEFAULT", True)
    monkeypatch.setattr(tensorcore, "WGMMA_THREADS_BY_DEFAULT", True)


def test_the_default_takes_wgmma_where_tma_fills_the_ring(monkeypatch):
    """As shipped: wgmma fed by TMA where its ring can be (dense's A[M, K] and W[N, K],
    K a multiple of 8, two k steps or more), else mma.sync / wmma (the cp.async-fed wgmma
    was no faster on an H200)."""
    monkeypatch.setattr(tensorcore, "WGMMA_THREADS_BY_DEFAULT", False)
    for M, N, K, layout, want in ((256, 256, 128, "dense", "tma_warp"),
                                  (1000, 3072, 768, "dense", "tma_warp"),
                                  (256, 256, 100, "dense", None), (256, 256, 32, "dense", None),
                                  (256, 256, 128, "matmul", None)):
        A, B, C = gemm(M, N, K, "float16", layout)
        text = str(tc.lower((sc.schedule_dense if layout == "dense" else sc.schedule_matmul)(
            C, SM90A), [A, B, C]))
        assert ("wgmma" in text) == (want is not None), (M, N, K, layout)
        cfg = tensorcore.default_wgmma(M, N, K, False, layout == "matmul")
        assert (cfg.producer if cfg else None) == want, (M, N, K, layout)


def test_sm90a_takes_mma_sync_until_wgmma_is_checked_on_a_gpu(monkeypatch):
    monkeypatch.setattr(tensorcore, "WGMMA_BY_DEFAULT", False)
    A, B, C = gemm(256, 256, 128, "float16", "dense")
    text = str(tc.lower(sc.schedule_dense(C, SM90A), [A, B, C]))
    assert "wgmma" not in text and ("cuda.wmma" in text or "cuda.mma" in text)


def gemm(M, N, K, dtype, layout):
    A = tc.placeholder((M, K), dtype, name="A")
    if layout == "dense":
        B = tc.placeholder((N, K), dtype, name="W")
        return A, B, nn.dense(A, B, out_dtype="float32")
    B = tc.placeholder((K, N), dtype, name="B")
    return A, B, nn.matmul(A, B, out_dtype="float32")


@needs_cxx
@pytest.mark.parametrize("M,N,K,dtype,layout,cfg", [
    (64, 64, 96, "float16", "dense", WmmaConfig(4, 1, 1, 4, 32, family="wgmma")),
    (128, 128, 96, "bfloat16", "matmul", WmmaConfig(8, 1, 1, 8, 32, family="wgmma", stages=3)),
    pytest.param(64, 32, 64, "float16", "matmul", WmmaConfig(4, 1, 1, 2, 16, family="wgmma"),
                 marks=long_only),
])
def test_wgmma_template_in_the_emulation(M, N, K, dtype, layout, cfg):
    A, B, C = gemm(M, N, K, dtype, layout)
    s = tc.create_schedule(C.op)
    schedule_wmma_gemm(s, C, cfg)
    mod = tc.build(s, [A, B, C], target="cuda-emu")
    g = torch.Generator().manual_seed(M + N + K)
    a = torch.randn(M, K, generator=g).to(TORCH[dtype])
    b = torch.randn(*((N, K) if layout == "dense" else (K, N)), generator=g).to(TORCH[dtype])
    c = np.full((M, N), np.nan, np.float32)
    mod.shared_memory_stats(reset=True)
    mod(a, b, c)
    bd = b.double().T if layout == "dense" else b.double()
    np.testing.assert_allclose(c, (a.double() @ bd).numpy(), rtol=1e-4, atol=1e-3)
    assert "tc_wgmma_m64n" in mod.get_source()
    # the cp.async ring's core matrices (128 contiguous bytes each): wgmma's operand
    # reads meet each bank once per phase, and so do the 16-byte cp.async writes (8
    # lanes, the 8 rows of a core matrix): no conflict (the emulation's bank counter;
    # matmul's B[K, N] is copied transposed, 2 bytes at a time, plain stores: uncounted)
    st = mod.shared_memory_stats()
    assert st["wgmma_phases"] > 0 and st["wgmma_bank_conflicts"] == 0, st
    assert st["cp_async_phases"] > 0 and st["cp_async_bank_conflicts"] == 0, st


@needs_cxx
@pytest.mark.parametrize("dtype", ["float16", pytest.param("bfloat16", marks=long_only)])
def test_dense_bias_gelu_epilogue_on_wgmma_in_the_emulation(dtype):
    """``gelu(dense(X, W, b))`` into float16 / bfloat16: the accumulators (mma.accumulator
    fragments: wgmma's layout per warp) stored to the shared tile of C, the epilogue fused."""
    M, N, K = 64, 64, 64
    X = tc.placeholder((M, K), dtype, name="X")
    W = tc.placeholder((N, K), dtype, name="W")
    b = tc.placeholder((N,), dtype, name="b")
    Y = nn.gelu(nn.dense(X, W, b))
    s = sc.schedule_dense(Y, "cuda-emu", config=WmmaConfig(4, 1, 1, 4, 32, family="wgmma"))
    mod = tc.build(s, [X, W, b, Y], target="cuda-emu")
    assert len(mod.kernels) == 1 and "tc_wgmma_m64n64k16" in mod.get_source()
    g = torch.Generator().manual_seed(5)
    x, w, bb = (torch.randn(*sh, generator=g).to(TORCH[dtype]) for sh in ((M, K), (N, K), (N,)))
    out = torch.zeros((M, N), dtype=TORCH[dtype])
    mod(x, w, bb, out)
    want = torch.nn.functional.gelu(x.double() @ w.double().T + bb.double())
    tol = 2e-2 if dtype == "bfloat16" else 3e-3
    np.testing.assert_allclose(out.float().numpy(), want.float().numpy(), rtol=tol, atol=tol)


def test_the_nn_templates_take_wgmma_on_sm90a_when_a_tiling_divides():
    M, N, K = 4096, 3072, 768
    X = tc.placeholder((M, K), "float16", name="X")
    W = tc.placeholder((N, K), "float16", name="W")
    b = tc.placeholder((N,), "float16", name="b")
    Y = nn.gelu(nn.dense(X, W, b))
    text = str(tc.lower(sc.schedule_dense(Y, SM90A), [X, W, b, Y]))
    assert "tensorize cuda.wgmma_f16f16f32_n128_k64_rows (accumulate)" in text
    # sm_90 (no 'a'), or extents no wgmma tiling divides: the mma.sync / wmma families
    assert "wgmma" not in str(tc.lower(sc.schedule_dense(Y, "cuda -arch=sm_90"), [X, W, b, Y]))
    # extents no wgmma tiling divides: padded wgmma tiles (boundary tiles), not mma.sync
    for M_, N_, K_ in ((100, 64, 64), (64, 64, 24), (1000, 768, 3072)):
        c = wgmma_config(M_, N_, K_)
        assert c.family == "wgmma" and not tensorcore.fits(c, M_, N_, K_)
    assert wgmma_config(1, 768, 768) is None   # a GEMV: CUDA cores
    cfg = wgmma_config(M, N, K, epilogue=True, max_shared=block_shared_limit("sm_90a"))
    assert cfg.family == "wgmma" and shared_bytes(cfg, epilogue=True) <= block_shared_limit("sm_90a")


def test_printed_ir_of_the_wgmma_mainloop():
    """The region each warp hands to wgmma: its 16-row strip of A's core matrices, the
    block's B core matrices (a whole k step of 32: two wgmmas, one group), its strip of
    the accumulator."""
    A, B, C = gemm(64, 64, 32, "float16", "dense")
    s = tc.create_schedule(C.op)
    schedule_wmma_gemm(s, C, WmmaConfig(4, 1, 1, 4, 32, family="wgmma", double_buffer=False))
    text = str(tc.lower(s, [A, B, C]))
    keep = ("allocate", "tensorize", "// ")
    got = [ln.strip() for ln in text.splitlines() if ln.strip().startswith(keep)]
    assert got == [
        "allocate dense.mma.accumulator: float32[16, 64] (mma.accumulator)",
        "tensorize cuda.wgmma_fill_f32_n64 (store) {",
        "// out c: dense.mma.accumulator[8*x0 + x1, 8*x2 + x3]",
        "allocate W.shared: float16[8, 4, 8, 8] (shared)",
        "allocate A.shared: float16[8, 4, 8, 8] (shared)",
        "tensorize cuda.wgmma_f16f16f32_n64_k32 (accumulate) {",
        "// out c: dense.mma.accumulator[8*x0 + x1, 8*x2 + x3]",
        "// in a: A.shared[b.inner.outer*2 + x0, x1, x2, x3]",
        "// in b: W.shared[x1, x0, x2, x3]",
        "tensorize cuda.mma_store_f32 (store) {",
        "// out c: dense[b.inner.outer*16 + x0, o.inner.inner.outer*16 + x1]",
        "// in a: dense.mma.accumulator[x0, o.inner.inner.outer*16 + x1]",
    ], "\n".join(got)


W = tensorcore.WmmaConfig
ODD = [  # M, N, K, dtype, bt (dense's W[N, K]), at (A[K, M]), batch, epilogue, config
    (100, 72, 88, "float16", True, False, None, True, W(4, 1, 1, 4, 32, family="wgmma")),
    (33, 64, 20, "float16", False, True, 2, False, W(4, 1, 1, 4, 32, family="wgmma", stages=3)),
    pytest.param(70, 24, 19, "bfloat16", True, False, 2, True,
                 W(4, 1, 1, 2, 16, family="wgmma"), marks=long_only),
    pytest.param(70, 40, 40, "bfloat16", False, False, None, False,
                 W(4, 1, 1, 4, 32, family="wgmma"), marks=long_only),
]


@needs_cxx
@pytest.mark.parametrize("M,N,K,dtype,bt,at,batch,epilogue,cfg", ODD)
def test_wgmma_boundary_tiles_in_the_emulation(M, N, K, dtype, bt, at, batch, epilogue, cfg):
    """Extents the wgmma tiles do not divide (M, N, K odd, both layouts of each operand,
    batched, with an epilogue): the core-matrix copies hold zeros past the edge
    (``cache_read(..., pad=0.0, blocks=)``), the sum runs over the padded k, C goes
    through the block's shared tile under the edge's guard; float64 reference."""
    from test_tensorcore_edges import check_case
    mod = check_case(M, N, K, dtype, bt, at, batch, epilogue, cfg, "cuda-emu")
    assert "tc_wgmma_m64n" in mod.get_source()
    st = mod.shared_memory_stats()   # (zero-filled tiles: core matrices all the same)
    assert st["wgmma_phases"] > 0 and st["wgmma_bank_conflicts"] == 0, st


@needs_cxx
@pytest.mark.parametrize("M,N,K,dtype,k_tile", [
    (100, 72, 88, "float16", 32),                                   # 64B, edges
    pytest.param(130, 64, 200, "bfloat16", 64, marks=long_only),    # 128B
    pytest.param(70, 40, 19, "float16", 16, marks=long_only),       # 32B, one k step
])
def test_swizzled_cp_async_rows_in_the_emulation(M, N, K, dtype, k_tile):
    """``WmmaConfig(family="wgmma", swizzle=True)``: the threads' cp.async copies write
    each 16-byte chunk of the K-major rows at its swizzled address and wgmma reads them
    through the swizzled descriptors of the TMA ring (``cuda.wgmma_*_rows``): float64's
    result, odd M, N and K (zeros past the edge), and the emulation's bank counter finds
    no conflict in the copies or in wgmma's reads."""
    A, B, C = gemm(M, N, K, dtype, "dense")
    cfg = WmmaConfig(4, 1, 1, 8 if k_tile == 64 else 4, k_tile, family="wgmma", stages=3,
                     swizzle=True)
    s = tc.create_schedule(C.op)
    schedule_wmma_gemm(s, C, cfg)
    assert f"_k{k_tile}_rows" in str(tc.lower(s, [A, B, C], target="cuda-emu"))
    mod = tc.build(s, [A, B, C], target="cuda-emu")
    g = torch.Generator().manual_seed(M + N + K)
    a = torch.randn(M, K, generator=g).to(TORCH[dtype])
    b = torch.randn(N, K, generator=g).to(TORCH[dtype])
    c = np.full((M, N), np.nan, np.float32)
    mod.shared_memory_stats(reset=True)
    mod(a, b, c, mode="reverse")
    np.testing.assert_allclose(c, (a.double() @ b.double().T).numpy(), rtol=1e-4, atol=1e-3)
    st = mod.shared_memory_stats()
    assert st["wgmma_phases"] > 0 and st["wgmma_bank_conflicts"] == 0, st
    assert st["cp_async_bank_conflicts"] == 0, st


@needs_nvcc
@long_only
def test_ptxas_sm90a_swizzled_cp_async_rows():
    """The cp.async wgmma GEMM on swizzled rows (BERT's FFN up-projection at 1000 tokens:
    odd M): HGMMA, cp.async, no spills."""
    A, B, C = gemm(1000, 3072, 768, "float16", "dense")
    s = tc.create_schedule(C.op)
    schedule_wmma_gemm(s, C, WmmaConfig(8, 1, 1, 8, 64, family="wgmma", stages=3,
                                        swizzle=True))
    src = tc.build(s, [A, B, C], target=SM90A).get_source()
    ptx = compile_ptx(src, "sm_90a")
    assert "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16" in ptx
    assert "cp.async.cg.shared.global" in ptx
    report, _ = ptxas_build(src, "sm_90a", sass=False)
    assert "serialized" not in report, report
    (use,) = parse_ptxas(report).values()
    assert use["spill_stores"] == use["spill_loads"] == use["stack"] == 0, use


def _ptxas_clean(mod, src, *sass_wants):
    """ptxas for sm_90a: wgmma not serialised, no spills, the shared memory within
    sm_90's limit; HGMMA.64x128x16 (and ``sass_wants``) in the SASS where a disassembler
    is installed."""
    report, sass = ptxas_build(src, "sm_90a", sass=True)
    assert "serialized" not in report, report
    (use,) = parse_ptxas(report).values()
    assert use["spill_stores"] == use["spill_loads"] == use["stack"] == 0, use
    assert mod.kernels[0].shared_bytes <= block_shared_limit("sm_90a")
    if sass is not None:
        assert re.search(r"HGMMA\.64x128x16\.F32", sass), sass[:1000]
        for want in sass_wants:
            assert want in sass, want


@needs_nvcc
@pytest.mark.parametrize("dtype,layout", [
    ("float16", "dense"), pytest.param("bfloat16", "matmul", marks=long_only)])
def test_ptxas_sm90a_hgmma_and_no_spills(dtype, layout):
    """BERT's FFN up-projection with bias + GELU (dense) and a bf16 GEMM: wgmma in the PTX,
    HGMMA in the SASS (where a disassembler is on PATH), no spills, no serialised wgmma,
    the shared memory within sm_90's limit."""
    M, N, K = (4096, 3072, 768)
    X = tc.placeholder((M, K), dtype, name="X")
    if layout == "dense":
        W = tc.placeholder((N, K), dtype, name="W")
        b = tc.placeholder((N,), dtype, name="b")
        args = [X, W, b, nn.gelu(nn.dense(X, W, b))]
        s = sc.schedule_dense(args[-1], SM90A)
    else:
        W = tc.placeholder((K, N), dtype, name="B")
        args = [X, W, nn.matmul(X, W, out_dtype="float32")]
        s = sc.schedule_matmul(args[-1], SM90A)
    mod = tc.build(s, args, target=SM90A)
    src = mod.get_source()
    t = "bf16" if dtype == "bfloat16" else "f16"
    ptx = compile_ptx(src, "sm_90a")
    assert f"wgmma.mma_async.sync.aligned.m64n128k16.f32.{t}.{t}" in ptx
    if layout == "dense":   # the default's TMA ring: bulk tensor copies on mbarriers
        assert "cp.async.bulk.tensor" in ptx and "mbarrier" in ptx
    else:                   # the threads' cp.async ring
        assert "fence.proxy.async.shared::cta" in ptx and "cp.async.commit_group" in ptx
    _ptxas_clean(mod, src)


@needs_nvcc
@pytest.mark.parametrize("M,N,K,dtype,layout", [
    (1000, 3072, 768, "float16", "dense"),               # BERT's FFN at 1000 tokens
    pytest.param(4097, 256, 100, "bfloat16", "matmul", marks=long_only)])
def test_ptxas_sm90a_boundary_tiles_do_not_spill(M, N, K, dtype, layout):
    """The wgmma template on odd extents (zero-filling copies, the guarded store through
    the shared tile of C): HGMMA, cp.async's zero-filling form, no spills."""
    A, B, C = gemm(M, N, K, dtype, layout)
    s = sc.schedule_dense(C, SM90A) if layout == "dense" else sc.schedule_matmul(C, SM90A)
    mod = tc.build(s, [A, B, C], target=SM90A)
    src = mod.get_source()
    assert "tc_wgmma_m64n" in src
    t = "bf16" if dtype == "bfloat16" else "f16"
    assert re.search(rf"wgmma\.mma_async\.sync\.aligned\.m64n\d+k16\.f32\.{t}\.{t}",
                     compile_ptx(src, "sm_90a"))
    report, sass = ptxas_build(src, "sm_90a", sass=True)
    assert "serialized" not in report, report
    (use,) = parse_ptxas(report).values()
    assert use["spill_stores"] == use["spill_loads"] == use["stack"] == 0, use
    assert mod.kernels[0].shared_bytes <= block_shared_limit("sm_90a")


@pytest.mark.gpu
@pytest.mark.parametrize("M,N,K,dtype,bt,at,batch,epilogue,cfg", ODD + [
    (1000, 3072, 768, "float16", True, False, None, True, None),   # wgmma_config's own
    (4097, 256, 100, "bfloat16", False, False, None, False, None),
])
def test_wgmma_boundary_tiles_on_the_gpu(gpu_driver, M, N, K, dtype, bt, at, batch, epilogue,
                                         cfg):
    if gpu_driver.arch not in ("sm_90", "sm_90a"):
        pytest.skip(f"wgmma needs an sm_90 device; this is {gpu_driver.arch}")
    from test_tensorcore_edges import check_case
    mod = check_case(M, N, K, dtype, bt, at, batch, epilogue, cfg, SM90A)
    assert "tc_wgmma_m64n" in mod.get_source()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,layout", [("float16", "dense"), ("bfloat16", "matmul")])
def test_wgmma_template_on_the_gpu(gpu_driver, dtype, layout):
    if gpu_driver.arch not in ("sm_90", "sm_90a"):
        pytest.skip(f"wgmma needs an sm_90 device; this is {gpu_driver.arch}")
    M, N, K = 256, 384, 192
    A, B, C = gemm(M, N, K, dtype, layout)
    s = sc.schedule_dense(C, SM90A) if layout == "dense" else sc.schedule_matmul(C, SM90A)
    mod = tc.build(s, [A, B, C], target=SM90A)
    assert "tc_wgmma" in mod.get_source()
    g = torch.Generator().manual_seed(2)
    a = torch.randn(M, K, generator=g).to(TORCH[dtype])
    b = torch.randn(*((N, K) if layout == "dense" else (K, N)), generator=g).to(TORCH[dtype])
    c = torch.full((M, N), float("nan"))
    ca = c.cuda()
    mod(a.cuda(), b.cuda(), ca)
    bd = b.double().T if layout == "dense" else b.double()
    np.testing.assert_allclose(ca.cpu().numpy(), (a.double() @ bd).numpy(), rtol=1e-3, atol=1e-2)



NMAJOR = [  # M, N, K, dtype, producer, config: matmul's B[K, N] N-major on TMA rings
    # boundary tiles in M, N (192 = 1.5 blocks: the second chunk's box past N) and K; 128B
    (200, 192, 136, "float16", "tma", W(8, 1, 1, 8, 64, family="wgmma", stages=3,
                                        producer="tma")),
    # N = 80: chunks of 16 (32B swizzle), a producer warp, 1 warpgroup
    pytest.param(130, 80, 72, "bfloat16", "tma_warp",
                 W(4, 1, 1, 8, 64, family="wgmma", stages=2, producer="tma_warp"),
                 marks=long_only),
    pytest.param(64, 96, 264, "bfloat16", "tma_warp",   # chunks of 32 (64B), 4 stages
                 W(4, 1, 1, 8, 64, family="wgmma", stages=4, producer="tma_warp"),
                 marks=long_only),
    pytest.param(100, 64, 96, "float16", "tma",          # k steps of 32, N one chunk
                 W(4, 1, 1, 4, 32, family="wgmma", stages=3, producer="tma"),
                 marks=long_only),
]


@needs_cxx
@pytest.mark.parametrize("M,N,K,dtype,producer,cfg", NMAJOR)
def test_matmul_n_major_b_on_tma_rings_in_the_emulation(M, N, K, dtype, producer, cfg):
    """``matmul(A[M, K], B[K, N])`` on wgmma fed by TMA with B as it lies: B's tile one 3-d
    box (chunks of N, k, chunks) into a ring swizzled by the chunk's bytes, read by
    descriptors with wgmma's imm-trans-b set (the emulation decodes the N-major layout
    as the PTX ISA's canonical layouts do: a wrong LBO, SBO, swizzle or transpose bit
    gives a wrong product here); float64's result, no bank conflict in wgmma's reads."""
    A, B, C = gemm(M, N, K, dtype, "matmul")
    s = sc.schedule_matmul(C, "cuda-emu", config=cfg)
    chunk = tensorcore.mn_chunk(cfg, N)
    assert f"_k{cfg.k_tile}_rows_bmn{chunk} (accumulate)" in str(tc.lower(s, [A, B, C]))
    mod = tc.build(s, [A, B, C], target="cuda-emu")
    src = mod.get_source()
    # (one box: 3-d over the chunks, 2-d where the tile is one chunk)
    assert f"tc_wgmma_m64n{cfg.block_n}k16_{'bf16' if dtype == 'bfloat16' else 'f16'}_tb(" \
        in src and f"tc_tma_load_{3 if cfg.block_n > chunk else 2}d(&B_shared" in src
    g = torch.Generator().manual_seed(M + N + K)
    a = torch.randn(M, K, generator=g).to(TORCH[dtype])
    b = torch.randn(K, N, generator=g).to(TORCH[dtype])
    c = np.full((M, N), np.nan, np.float32)
    mod.shared_memory_stats(reset=True)
    mod(a, b, c)
    np.testing.assert_allclose(c, (a.double() @ b.double()).numpy(), rtol=1e-4, atol=1e-3)
    st = mod.shared_memory_stats()
    assert st["wgmma_phases"] > 0 and st["wgmma_bank_conflicts"] == 0, st


@needs_cxx
@pytest.mark.parametrize("M,N,K,dtype,bt,cfg", [
    # A[K, M] and B[K, N]: M = 96 in chunks of 32 (64B; the second warpgroup's block half
    # past M), N = 80 in chunks of 16 (32B); a producer warp
    (96, 80, 136, "bfloat16", False, W(8, 1, 1, 8, 64, family="wgmma", stages=3,
                                       producer="tma_warp")),
    pytest.param(208, 192, 72, "float16", True,   # A M-major, W[N, K] K-major; chunks of 16
                 W(8, 1, 1, 8, 64, family="wgmma", stages=2, producer="tma"),
                 marks=long_only),
])
def test_m_major_a_on_tma_rings_in_the_emulation(M, N, K, dtype, bt, cfg):
    """``C = A^T B`` with ``A[K, M]`` stored (a weight gradient's layout) on the TMA rings:
    A's tile in chunks of M as B's in chunks of N, read M-major (wgmma's imm-trans-a: the
    descriptors' start the warpgroup's block, LBO the next chunk of M); float64's result."""
    mod = _a_k_m_gemm(M, N, K, dtype, bt, cfg, "cuda-emu")
    st = mod.shared_memory_stats()
    assert st["wgmma_phases"] > 0 and st["wgmma_bank_conflicts"] == 0, st


def _a_k_m_gemm(M, N, K, dtype, bt, cfg, target):
    """``A[K, M]^T @ B[K, N]`` (``bt``: ``@ W[N, K]^T``) on ``cfg`` built for ``target``
    (run on the device for a GPU target), checked against float64; the module."""
    A = tc.placeholder((K, M), dtype, name="A")
    B = tc.placeholder((N, K) if bt else (K, N), dtype, name="B")
    k = tc.reduce_axis((0, K), name="k")
    C = tc.compute((M, N), lambda i, j: tc.sum(A[k, i].astype("float32") * (
        B[j, k] if bt else B[k, j]).astype("float32"), axis=k), name="C")
    s = tc.create_schedule(C.op)
    schedule_wmma_gemm(s, C, cfg)
    mod = tc.build(s, [A, B, C], target=target)
    assert f"k16_{'bf16' if dtype == 'bfloat16' else 'f16'}_{'ta' if bt else 'tab'}(" \
        in mod.get_source()
    g = torch.Generator().manual_seed(M + N + K)
    a = torch.randn(K, M, generator=g).to(TORCH[dtype])
    b = torch.randn(*((N, K) if bt else (K, N)), generator=g).to(TORCH[dtype])
    c = torch.full((M, N), float("nan"))
    if target == "cuda-emu":
        mod.shared_memory_stats(reset=True)
        mod(a, b, c)
    else:
        cd = c.cuda()
        mod(a.cuda(), b.cuda(), cd)
        c = cd.cpu()
    want = a.double().T @ (b.double().T if bt else b.double())
    np.testing.assert_allclose(c.numpy(), want.numpy(), rtol=1e-3, atol=1e-2)
    return mod


@pytest.mark.gpu
@pytest.mark.parametrize("M,N,K,dtype,bt", [(96, 80, 136, "bfloat16", False),
                                            (208, 192, 72, "float16", True)])
def test_m_major_a_on_the_gpu(gpu_driver, M, N, K, dtype, bt):
    if gpu_driver.arch not in ("sm_90", "sm_90a"):
        pytest.skip(f"wgmma needs an sm_90 device; this is {gpu_driver.arch}")
    _a_k_m_gemm(M, N, K, dtype, bt, W(8, 1, 1, 8, 64, family="wgmma", stages=3,
                                      producer="tma_warp"), SM90A)


@needs_cxx
def test_matmul_n_major_b_with_a_fused_epilogue_in_the_emulation():
    """The default's tiling with WGMMA_MN_MAJOR_BY_DEFAULT on odd extents:
    ``relu(matmul(A, B) + bias)`` into bfloat16, 130 x 80 x 72 (64 x 64 blocks, k steps
    of 16: A's rows and B's chunks of 16 n both 32B-swizzled, a producer warp), the
    accumulators through the shared tile of C."""
    M, N, K = 130, 80, 72
    A, B, C = gemm(M, N, K, "bfloat16", "matmul")
    bias = tc.placeholder((N,), "float32", name="bias")
    Y = tc.compute((M, N), lambda i, j: tc.max(C[i, j] + bias[j], tc.const(0.0))
                   .astype("bfloat16"), name="Y")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(tensorcore, "WGMMA_MN_MAJOR_BY_DEFAULT", True)
        mp.setattr(tensorcore, "WGMMA_MN_MAJOR_MIN_MACS", 0)
        mp.setattr(tensorcore, "WGMMA_THREADS_BY_DEFAULT", False)
        cfg = tensorcore.default_wgmma(M, N, K, False, True, epilogue=True,
                                       max_shared=block_shared_limit("sm_90a"),
                                       dtype="bfloat16")
    assert cfg.producer == "tma_warp" and cfg.k_tile == 16
    s = sc.schedule_matmul(Y, "cuda-emu", config=cfg)
    text = str(tc.lower(s, [A, B, bias, Y]))
    assert "_k16_rows_bmn16 (accumulate)" in text and "'32B')" in text
    mod = tc.build(s, [A, B, bias, Y], target="cuda-emu")
    g = torch.Generator().manual_seed(11)
    a, b = (torch.randn(*sh, generator=g).bfloat16() for sh in ((M, K), (K, N)))
    bv = torch.randn(N, generator=g)
    y = torch.zeros((M, N), dtype=torch.bfloat16)
    mod(a, b, bv, y)
    want = torch.relu(a.double() @ b.double() + bv.double()).bfloat16()
    np.testing.assert_allclose(y.float().numpy(), want.float().numpy(), rtol=2e-2, atol=2e-2)


def test_the_n_major_tma_ring_is_the_default_past_its_floor(monkeypatch):
    """``WGMMA_MN_MAJOR_BY_DEFAULT`` (on, as measured on an H200): matmul's B[K, N] (and an
    A[K, M]) takes the TMA producer warp on GEMMs of more than ``WGMMA_MN_MAJOR_MIN_MACS``
    multiply-adds, only where N (M) is a multiple of 16 (the chunks of the tensor map's
    view); a single k step never; 1024^3 and below stay on wmma; the flag off, never."""
    monkeypatch.setattr(tensorcore, "WGMMA_THREADS_BY_DEFAULT", False)
    assert tensorcore.WGMMA_MN_MAJOR_BY_DEFAULT   # (as shipped)
    assert tensorcore.WGMMA_MN_MAJOR_MIN_MACS == 2 ** 30
    assert tensorcore.default_wgmma(4096, 4096, 4096, False, True).producer == "tma_warp"
    assert tensorcore.default_wgmma(2048, 2048, 2048, False, True).producer == "tma_warp"
    assert tensorcore.default_wgmma(1000, 3072, 768, False, True).producer == "tma_warp"
    assert tensorcore.default_wgmma(1024, 1024, 1024, False, True) is None
    assert tensorcore.default_wgmma(256, 256, 128, True, True) is None
    # K-major operands (dense's W[N, K]) take the ring at any size
    assert tensorcore.default_wgmma(256, 256, 128, False, False).producer == "tma_warp"
    monkeypatch.setattr(tensorcore, "WGMMA_MN_MAJOR_MIN_MACS", 0)
    assert tensorcore.default_wgmma(256, 256, 128, True, True).producer == "tma_warp"
    for M, N, K, at in ((256, 200, 128, False), (256, 256, 100, False),
                        (256, 256, 32, False), (200, 256, 128, True)):
        assert tensorcore.default_wgmma(M, N, K, at, True) is None, (M, N, K, at)
    monkeypatch.setattr(tensorcore, "WGMMA_MN_MAJOR_BY_DEFAULT", False)
    assert tensorcore.default_wgmma(4096, 4096, 4096, False, True) is None
    monkeypatch.setattr(tensorcore, "WGMMA_MN_MAJOR_BY_DEFAULT", True)
    monkeypatch.setattr(tensorcore, "WGMMA_MN_MAJOR_MIN_MACS", 2 ** 30)
    A, B, C = gemm(4096, 4096, 4096, "float16", "matmul")
    assert "_rows_bmn64" in str(tc.lower(sc.schedule_matmul(C, SM90A), [A, B, C]))
    A, B, C = gemm(1024, 1024, 1024, "float16", "matmul")
    assert "_rows_bmn" not in str(tc.lower(sc.schedule_matmul(C, SM90A), [A, B, C]))


@needs_nvcc
def test_ptxas_sm90a_n_major_b_tma_ring():
    """HGEMM 4096^3 ``matmul(A, B)`` on the N-major TMA ring with a producer warp (the
    config benchmarks/gpu.py times as wgmma-te-tma-warp-nmajor): wgmma with imm-trans-b
    set, B's descriptors N-major (128B swizzle, LBO 8192: the next chunk of 64 n, SBO
    1024: the next 8 k), 3-d and 2-d bulk tensor copies, no spills, the shared memory
    within sm_90's limit."""
    A, B, C = gemm(4096, 4096, 4096, "float16", "matmul")
    cfg = WmmaConfig(8, 1, 1, 8, 64, family="wgmma", stages=4, producer="tma_warp")
    mod = tc.build(sc.schedule_matmul(C, SM90A, config=cfg), [A, B, C], target=SM90A)
    src = mod.get_source()
    ptx = compile_ptx(src, "sm_90a")
    assert re.search(r"wgmma\.mma_async\.sync\.aligned\.m64n128k16\.f32\.f16\.f16 "
                     r"\{[^}]*\}, %rd\d+, %rd\d+, p, 1, 1, 0, 1;", ptx)
    assert str((1 << 62) | (64 << 32) | (512 << 16)) in ptx   # B: 128B, SBO 1024, LBO 8192
    for want in ("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes",
                 "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes",
                 "mbarrier.try_wait.parity.shared::cta.b64"):
        assert want in ptx, want
    _ptxas_clean(mod, src, "UTMALDG.3D")


@pytest.mark.gpu
@pytest.mark.parametrize("M,N,K,dtype", [(256, 384, 192, "float16"), (256, 384, 192, "bfloat16"),
                                         (200, 192, 136, "float16"), (130, 80, 72, "bfloat16")])
def test_matmul_n_major_b_on_the_gpu(gpu_driver, monkeypatch, M, N, K, dtype):
    """The N-major TMA ring on an sm_90 device, as the default takes it with
    WGMMA_MN_MAJOR_BY_DEFAULT past its floor, lowered to 0 here (the tensor map's 3-d view of B[K, N], the chunks' swizzle
    and wgmma's imm-trans-b against the hardware; odd M, N and K: the boxes' zeros)."""
    if gpu_driver.arch not in ("sm_90", "sm_90a"):
        pytest.skip(f"wgmma needs an sm_90 device; this is {gpu_driver.arch}")
    monkeypatch.setattr(tensorcore, "WGMMA_MN_MAJOR_BY_DEFAULT", True)
    monkeypatch.setattr(tensorcore, "WGMMA_MN_MAJOR_MIN_MACS", 0)
    A, B, C = gemm(M, N, K, dtype, "matmul")
    s = sc.schedule_matmul(C, SM90A)
    assert "_rows_bmn" in str(tc.lower(s, [A, B, C]))
    mod = tc.build(s, [A, B, C], target=SM90A)
    g = torch.Generator().manual_seed(M + N)
    a = torch.randn(M, K, generator=g).to(TORCH[dtype])
    b = torch.randn(K, N, generator=g).to(TORCH[dtype])
    ca = torch.full((M, N), float("nan")).cuda()
    mod(a.cuda(), b.cuda(), ca)
    np.testing.assert_allclose(ca.cpu().numpy(), (a.double() @ b.double()).numpy(),
                               rtol=1e-3, atol=1e-2)


@needs_cxx
@pytest.mark.parametrize("seed", range(40 if LONG else 1))
def test_fuzz_wgmma_tilings_in_the_emulation(seed):
    """Random wgmma tilings (1 or 2 warpgroups, N of 16..128, k steps, rings or none,
    the cp.async ring or -- double-buffered -- the swizzled TMA ring, matmul's B N-major
    in chunks of N), operand
    layouts, dtypes, epilogues (bias + ReLU into a 16-bit result) and extents the tiles
    divide or not (boundary tiles; K a multiple of 8 for TMA) against torch in float64."""
    rng = np.random.default_rng(9000 + seed)
    dtype = str(rng.choice(["float16", "bfloat16"]))
    layout = str(rng.choice(["dense", "matmul"]))
    wm = int(rng.choice([4, 8]))
    fn = int(rng.choice([1, 2, 4, 8]))
    kt = int(rng.choice([16, 32, 64]))
    odd = bool(rng.integers(0, 2))
    db = bool(rng.integers(0, 2))
    tma = db and bool(rng.integers(0, 2))
    M = 16 * wm * int(rng.integers(1, 3)) - (int(rng.integers(1, 40)) if odd else 0)
    N = 16 * fn * int(rng.integers(1, 3)) - (int(rng.integers(1, 16 * fn)) if odd else 0)
    if tma and layout == "matmul":   # (B[K, N] N-major in chunks of 16 n or more)
        N = max(16, N - N % 16)
    K = kt * int(rng.integers(1, 4)) - ((int(rng.integers(1, kt // 8)) * 8 if kt > 8 and tma
                                         else int(rng.integers(1, kt))) if odd else 0)
    K = max(K, 8 if not tma else kt + 8)   # (TMA: two k steps or more, the ring's loop)
    cfg = WmmaConfig(wm, 1, 1, fn, kt, double_buffer=db, family="wgmma",
                     stages=int(rng.choice([2, 3])) if db else 2,
                     producer="tma" if tma else "threads")
    A, B, C = gemm(M, N, K, dtype, layout)
    epilogue = bool(rng.integers(0, 2))
    args = [A, B]
    if epilogue:
        bias = tc.placeholder((N,), "float32", name="bias")
        out = tc.compute((M, N), lambda i, j: tc.max(C[i, j] + bias[j], tc.const(0.0))
                         .astype(dtype), name="Y")
        args += [bias, out]
        s = (sc.schedule_dense if layout == "dense" else sc.schedule_matmul)(out, "cuda-emu",
                                                                            config=cfg)
    else:
        args.append(C)
        s = tc.create_schedule(C.op)
        schedule_wmma_gemm(s, C, cfg)
    mod = tc.build(s, args, target="cuda-emu")
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(M, K, generator=g).to(TORCH[dtype])
    b = torch.randn(*((N, K) if layout == "dense" else (K, N)), generator=g).to(TORCH[dtype])
    want = a.double() @ (b.double().T if layout == "dense" else b.double())
    if epilogue:
        bv = torch.randn(N, generator=g)
        res = torch.zeros((M, N), dtype=TORCH[dtype])
        mod(a, b, bv, res)
        want = torch.relu(want + bv.double()).to(TORCH[dtype]).double()
        tol = 2e-2 if dtype == "bfloat16" else 3e-3
    else:
        res = np.full((M, N), np.nan, np.float32)
        mod(a, b, res)
        res = torch.from_numpy(res)
        tol = 1e-3
    np.testing.assert_allclose(res.double().numpy(), want.numpy(), rtol=tol, atol=tol,
                               err_msg=f"{cfg} {M}x{N}x{K} {dtype} {layout} epilogue={epilogue}")
    assert "tc_wgmma_m64n" in mod.get_source()
