"""Tensor cores through PTX: the ``cuda.mma_*`` intrinsics (``ldmatrix``, ``mma.sync
m16n8k16``; tecomp.te.intrin_mma) and the tensor-core GEMM template with
``WmmaConfig(family="mma")``.

The CUDA emulation runs them lane by lane (each emulated thread holds only its lane's
registers; ldmatrix and mma.sync exchange them among the 32 lanes of a warp), so a wrong
lane mapping in the generated code gives a wrong GEMM here, as it would on the GPU:
``test_a_wrong_lane_mapping_is_caught`` checks that it does.  nvcc turns the same text
into PTX with the instructions and ptxas reports no spills."""
from __future__ import annotations

import dataclasses
import os
import shutil

import numpy as np
import pytest

import tecomp as tc
from tecomp.codegen.cuda import codegen_cuda
from tecomp.codegen.cuda_emu import MODES, CudaEmuModule, compile_emu_library
from tecomp.errors import BuildError
from tecomp.nn import ops
from tecomp.runtime.nvcc import compile_ptx, find_nvcc
from tecomp.strategy.cuda.tensorcore import WmmaConfig, schedule_wmma_gemm
from tecomp.te import intrin_mma
from tecomp.testing.gpu_resources import ptxas_usage
from helpers import gpu_driver  # noqa: F401  (a fixture)
from wmma_examples import hand_schedule, hgemm, inputs

needs_cxx = pytest.mark.skipif(shutil.which("g++") is None and shutil.which("clang++") is None,
                               reason="the CUDA emulation needs a C++ compiler")
needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc is not on PATH")
#: more of the same (nvcc, another emulation build): TECOMP_LONG_TESTS=1
_SLOW = [pytest.mark.slow, pytest.mark.skipif(
    os.environ.get("TECOMP_LONG_TESTS", "") in ("", "0"), reason="TECOMP_LONG_TESTS=1")]

#: (M, N, K, hand_schedule's tiling): odd multiples of the 16 x 16 x 16 tile
SHAPES = {
    "3x5x3 tiles, one warp": (48, 80, 48, dict(bm=48, bn=80, warps=1, kt=16)),
    "9x10x3 tiles, 3x2 blocks": (144, 160, 48, dict(bm=48, bn=80, warps=1, kt=48)),
    "4 warps, 3 k steps": (64, 128, 96, dict(bm=64, warps=2, kt=32)),
}


def close(got, want, K):
    # float16 products are exact in float32; only the float32 sums round
    assert not np.isnan(got).any()
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * K * np.abs(want).max() / 16)


def mma_schedule(M, N, K, kw):
    s, args, _ = hand_schedule(M, N, K, family="mma", **kw)
    return s, list(args)


@pytest.fixture(scope="module")
def built():
    """Each of SHAPES built for the emulation, once."""
    mods = {}

    def get(name):
        if name not in mods:
            M, N, K, kw = SHAPES[name]
            s, args = mma_schedule(M, N, K, kw)
            mods[name] = tc.build(s, args, target="cuda-emu")
        return mods[name]
    return get


# --------------------------------------------------------------------------- emulation


@needs_cxx
@pytest.mark.parametrize("name", list(SHAPES))
def test_hand_written_mma_gemm_matches_numpy_in_each_mode(built, name):
    M, N, K, _ = SHAPES[name]
    mod = built(name)
    a, b, want = inputs(M, N, K)
    for mode in MODES:
        c = np.full((M, N), np.nan, np.float32)
        mod(a, b, c, mode=mode)
        close(c, want, K)


@needs_cxx
def test_the_source_holds_per_lane_registers_and_ptx_helpers(built):
    src = built("3x5x3 tiles, one warp").get_source()
    assert "unsigned int A_shared_mma_matrix_a[3][4];" in src     # 3 A tiles, 4 registers
    assert "unsigned int B_shared_mma_matrix_b[5][4];" in src     # 5 B tiles, 2 x 2
    assert "float matmul_mma_accumulator[15][8];" in src          # 15 tiles, 2 x 4 floats
    assert "#include <mma.h>" not in src and "nvcuda" not in src
    # A row major: ldmatrix; B[k, n] row major, the registers pair k: ldmatrix.trans
    assert "tc_ldmatrix_x4(A_shared_mma_matrix_a[" in src
    assert "tc_ldmatrix_x4_trans(B_shared_mma_matrix_b[" in src
    assert src.count("tc_mma_m16n8k16_f16(matmul_mma_accumulator[") == 2
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in src
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in src


def test_the_printed_ir_shows_each_intrinsic():
    M, N, K, kw = SHAPES["3x5x3 tiles, one warp"]
    s, args = mma_schedule(M, N, K, kw)
    text = str(tc.lower(s, args, target="cuda"))
    for name in ("fill_f32", "load_a_f16", "load_b_f16", "f16f16f32", "store_f32"):
        assert f"tensorize cuda.mma_{name} " in text
    for scope in ("mma.matrix_a", "mma.matrix_b", "mma.accumulator"):
        assert scope in text
    assert "wmma" not in text
    # the accumulator is set to 0 by the fill, once per fragment, before the k loop
    assert text.index("cuda.mma_fill_f32") < text.index("for (k.outer, 0, 3)")


_COORDS = intrin_mma.accumulator_coords


def _wrong_store(half, reg):    # the two columns of each register pair swapped
    row, col = _COORDS(half, reg)
    return row, col.replace(f"{8 * half + (reg & 1)} + ", f"{8 * half + 1 - (reg & 1)} + ")


def _run_with(monkeypatch, attr, value):
    monkeypatch.setattr(intrin_mma, attr, value)
    M, N, K, kw = SHAPES["3x5x3 tiles, one warp"]
    s, args = mma_schedule(M, N, K, kw)
    mod = tc.build(s, args, target="cuda-emu")
    a, b, want = inputs(M, N, K)
    c = np.full((M, N), np.nan, np.float32)
    mod(a, b, c, mode="serial")
    return c, want, mod.get_source()


@needs_cxx
@pytest.mark.parametrize("mistake", ["accumulator columns", "ldmatrix.trans dropped"])
def test_a_wrong_lane_mapping_is_caught(monkeypatch, mistake):
    """The emulation's result depends on the generated lane mappings: get one wrong and
    the GEMM is wrong (so the passing tests above cannot pass vacuously)."""
    if mistake == "accumulator columns":
        c, want, src = _run_with(monkeypatch, "accumulator_coords", _wrong_store)
    else:   # B loaded without .trans: each lane gets B's rows where it wants its columns
        real = intrin_mma.TRANS_HELPERS
        c, want, src = _run_with(monkeypatch, "TRANS_HELPERS",
                                 {k: real[False] for k in real})
        assert "tc_ldmatrix_x4_trans(" not in src
    assert not np.isnan(c).any()
    assert not np.allclose(c, want, atol=1e-2)


def run_layouts(target):
    """WmmaConfig(family="mma"): A and B each stored either way round (ldmatrix with or
    without .trans), batched; built for ``target``, run (in each emulation mode) and
    checked."""
    rng = np.random.default_rng(7)
    f32 = np.float32

    def f16(*shape):
        return rng.standard_normal(shape, dtype=f32).astype(np.float16)
    X = tc.placeholder((64, 96), "float16", name="X")
    W = tc.placeholder((48, 96), "float16", name="W")
    A = tc.placeholder((2, 32, 64), "float16", name="A")
    B = tc.placeholder((2, 32, 48), "float16", name="B")
    x, w, a, b = f16(64, 96), f16(48, 96), f16(2, 32, 64), f16(2, 32, 48)
    cases = [   # (args, inputs, want, ldmatrix without .trans, with .trans)
        ([X, W, ops.dense(X, W, out_dtype="float32")], [x, w],
         x.astype(f32) @ w.astype(f32).T, 2, 0),
        ([A, B, ops.batch_matmul(A, B, transpose_a=True, out_dtype="float32")], [a, b],
         np.einsum("bki,bkj->bij", a.astype(f32), b.astype(f32)), 0, 2),
    ]
    for args, ins, want, plain, trans in cases:
        s = tc.create_schedule(args[-1].op)
        schedule_wmma_gemm(s, args[-1], WmmaConfig(1, 1, 2, 3, 32, family="mma"))
        mod = tc.build(s, args, target=target)
        src = mod.get_source()
        for helper, n in (("tc_ldmatrix_x4", plain), ("tc_ldmatrix_x4_trans", trans)):
            assert src.count(f"{helper}(") - src.count(f"void {helper}(") == n   # calls
        for mode in MODES if target == "cuda-emu" else [None]:
            out = np.full(want.shape, np.nan, np.float32)
            mod(*ins, out, **({"mode": mode} if mode else {}))
            close(out, want, ins[0].shape[-1] if plain else ins[0].shape[-2])


@needs_cxx
def test_mma_template_in_every_operand_layout():
    run_layouts("cuda-emu")


def test_the_default_template_still_uses_wmma():
    A, B, C = hgemm(64, 64, 64)
    s = tc.create_schedule(C.op)
    schedule_wmma_gemm(s, C, WmmaConfig(2, 2, 1, 1, 32))
    text = str(tc.lower(s, [A, B, C], target="cuda"))
    assert "cuda.wmma_mma_f16f16f32" in text and "cuda.mma_" not in text


# --------------------------------------------------------------------------- lanes


def _edited_module(old, new):
    M, N, K, kw = SHAPES["3x5x3 tiles, one warp"]
    s, args = mma_schedule(M, N, K, kw)
    cs = codegen_cuda(tc.lower(s, args, target="cuda"))
    bad = cs.source.replace(old, new, 1)
    assert bad != cs.source
    cs = dataclasses.replace(cs, source=bad)
    return CudaEmuModule(cs, compile_emu_library(cs)), inputs(M, N, K)


@needs_cxx
@pytest.mark.parametrize("old,new,match", [
    ("tc_mma_m16n8k16_f16(matmul",
     "if (threadIdx.x >= 16) return; tc_mma_m16n8k16_f16(matmul",
     r"a warp-wide operation \(ldmatrix / mma.sync\) was not reached by all 32 lanes of "
     r"warp 0 of block \(0, 0, 0\): 16 lanes waited at it"),
    ("tc_ldmatrix_x4(A_shared",
     "((threadIdx.x & 16) ? tc_ldmatrix_x4_trans : tc_ldmatrix_x4)(A_shared",
     r"ldmatrix.x4(.trans)? in block \(0, 0, 0\), thread \(\d+, 0, 0\): lane \d+ of the warp "
     r"is at ldmatrix.x4(.trans)? instead: the 32 lanes of a warp must make the same "
     r"warp-wide operations"),
    ("(A_shared + ", "(A_shared + 4 + ",
     r"ldmatrix.x4 in block \(0, 0, 0\), thread \(\d+, 0, 0\): a row address is not 16-byte "
     r"aligned"),
], ids=["half the lanes leave", "lanes at different ldmatrix", "misaligned ldmatrix rows"])
def test_lanes_that_miss_a_warp_operation_are_an_error_not_a_hang(old, new, match):
    """Hand-edited source (tecomp refuses to generate a lane-dependent tensor-core call or
    a misaligned tile): half the lanes leave before an mma.sync, take a different
    ldmatrix, or give it row addresses 8 bytes off; every mode reports it."""
    mod, (a, b, _) = _edited_module(old, new)
    for mode in MODES:
        c = np.zeros((a.shape[0], b.shape[1]), np.float32)
        with pytest.raises(BuildError, match=match):
            mod(a, b, c, mode=mode)


@needs_cxx
def test_the_emulation_counts_ldmatrix_bank_conflicts(built):
    """The emulation's bank accounting (ldmatrix's reads, cp.async's writes): the template pads each shared row by 16 bytes, so
    the 8 rows of every ldmatrix phase fall in distinct banks (one wavefront each); the
    hand-written schedule leaves the rows of 32 halves (64 bytes) unpadded, so rows 0, 2,
    4, 6 share banks: 4 wavefronts per phase of A, where the row-major B tile of 64
    halves puts all 8 rows on one bank group."""
    M, N, K, kw = SHAPES["4 warps, 3 k steps"]
    a, b, want = inputs(M, N, K)
    A, B, C = hgemm(M, N, K)
    s = tc.create_schedule(C.op)
    schedule_wmma_gemm(s, C, WmmaConfig(2, 2, 1, 2, 32, family="mma"))
    for mod, clean in ((tc.build(s, [A, B, C], target="cuda-emu"), True),
                       (built("4 warps, 3 k steps"), False)):
        mod.shared_memory_stats(reset=True)
        c = np.full((M, N), np.nan, np.float32)
        mod(a, b, c, mode="serial")
        close(c, want, K)
        st = mod.shared_memory_stats()
        assert st["ldmatrix_phases"] > 0
        assert st["ldmatrix_wavefronts"] == st["ldmatrix_phases"] + st["ldmatrix_bank_conflicts"]
        if clean:
            assert st["ldmatrix_bank_conflicts"] == 0, st
            # its cp.async writes: 8 lanes of 16 bytes a phase over two padded rows of
            # 64 + 16 bytes (80 bytes apart): where the second row wraps past 128 bytes
            # it meets the first row's banks, 2 wavefronts (the padding's cost: a swizzle
            # instead would make both sides conflict-free)
            assert 0 < st["cp_async_bank_conflicts"] <= st["cp_async_phases"], st
        else:
            assert st["ldmatrix_wavefronts"] >= 3 * st["ldmatrix_phases"], st
        assert st["cp_async_wavefronts"] == st["cp_async_phases"] + st["cp_async_bank_conflicts"]


def _swizzled_gemm(M, N, K, layout, target="cuda-emu", stages=3):
    """The mma template's GEMM with its tiles swizzled instead of padded
    (``WmmaConfig(swizzle=True)``): rows of a k step of 32 halves (64 bytes: A, dense's W)
    and of block_n = 64 halves (128 bytes: matmul's B[K, N], read by ldmatrix.trans)."""
    A = tc.placeholder((M, K), "float16", name="A")
    B = tc.placeholder((N, K) if layout == "dense" else (K, N), "float16", name="B")
    C = (ops.dense if layout == "dense" else ops.matmul)(A, B, out_dtype="float32")
    s = tc.create_schedule(C.op)
    schedule_wmma_gemm(s, C, WmmaConfig(2, 2, 1, 2, 32, family="mma", stages=stages,
                                        swizzle=True))
    return [A, B, C], s


@needs_cxx
@pytest.mark.parametrize("M,N,K,layout", [
    (70, 96, 40, "matmul"),      # two k steps through the ring, edges along M and K
    pytest.param(33, 48, 19, "dense", marks=_SLOW),   # one k step (no ring): still swizzled
])
def test_swizzled_tiles_meet_every_bank_once(M, N, K, layout):
    """double_buffer(swizzle=) with the threads' cp.async copies: each copy's 16-byte
    chunk at its swizzled address, ldmatrix's rows read there (64B and 128B swizzles,
    .trans too): float64's result, and the emulation's bank counter finds no conflict
    on either side (padded rows: a third of the copies' phases conflict, above)."""
    args, s = _swizzled_gemm(M, N, K, layout)
    mod = tc.build(s, args, target="cuda-emu")
    rng = np.random.default_rng(M + N + K)
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal(tuple(int(d.value) for d in args[1].shape)).astype(np.float16)
    c = np.full((M, N), np.nan, np.float32)
    mod.shared_memory_stats(reset=True)
    mod(a, b, c, mode="reverse")
    bt = b.astype(np.float64).T if layout == "dense" else b.astype(np.float64)
    close(c, a.astype(np.float64) @ bt, K)
    st = mod.shared_memory_stats()
    assert st["ldmatrix_phases"] > 0 and st["ldmatrix_bank_conflicts"] == 0, st
    assert st["cp_async_bank_conflicts"] == 0, st
    if K > 32:
        assert st["cp_async_phases"] > 0, st


@needs_nvcc
@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("TECOMP_LONG_TESTS", "") in ("", "0"),
                    reason="TECOMP_LONG_TESTS=1")
def test_ptxas_of_swizzled_tiles():
    """The swizzled copies and ldmatrix addresses through ptxas (sm_80): cp.async and
    ldmatrix in the PTX, no spills."""
    args, s = _swizzled_gemm(1000, 3072, 768, "dense", target="cuda -arch=sm_80", stages=4)
    src = tc.build(s, args, target="cuda -arch=sm_80").get_source()
    ptx = compile_ptx(src, "sm_80")
    assert "cp.async.cg.shared.global" in ptx and "ldmatrix.sync.aligned.m8n8.x4" in ptx
    for kernel, use in ptxas_usage(src, "sm_80").items():
        assert use["spill_stores"] == use["spill_loads"] == use["stack"] == 0, (kernel, use)


@needs_cxx
@pytest.mark.parametrize("family, stages, K", [("mma", 3, 96), ("wmma", 4, 64), ("mma", 5, 224)])
def test_template_with_a_ring_of_shared_tiles(family, stages, K):
    """``WmmaConfig(stages=n)``: the shared tiles in a ring of n buffers (n - 1 k steps'
    copies in flight), fewer and more k steps than stages (2 steps: a ring of 3)."""
    M, N = 64, 64
    A, B, C = hgemm(M, N, K)
    s = tc.create_schedule(C.op)
    schedule_wmma_gemm(s, C, WmmaConfig(2, 2, 1, 1, 32, family=family, stages=stages))
    mod = tc.build(s, [A, B, C], target="cuda-emu")
    ring = min(stages, K // 32 + 1)   # no more buffers than k steps + 1
    assert f"tc_cp_async_wait_group{ring - 2}();" in mod.get_source()
    a, b, want = inputs(M, N, K)
    c = np.full((M, N), np.nan, np.float32)
    mod(a, b, c)
    close(c, want, K)


# --------------------------------------------------------------------------- PTX


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_ptx_has_mma_sync_and_ldmatrix_and_nothing_spills(arch):
    """The template's 128 x 128 blocks of 4 warps of 64 x 64 (the same intrinsics as the
    hand-written schedule; A row major: ldmatrix, B[k, n]: ldmatrix.trans)."""
    A, B, C = hgemm(256, 256, 128)
    s = tc.create_schedule(C.op)
    schedule_wmma_gemm(s, C, WmmaConfig(2, 2, 4, 4, 32, family="mma"))
    src = tc.build(s, [A, B, C], target=f"cuda -arch={arch}").get_source()
    ptx = compile_ptx(src, arch)
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in ptx
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in ptx
    assert "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in ptx
    assert "wmma" not in ptx and "cp.async" in ptx
    for kernel, use in ptxas_usage(src, arch).items():
        assert use["spill_stores"] == use["spill_loads"] == use["stack"] == 0, (kernel, use)


@needs_nvcc
def test_ptx_of_a_four_stage_pipeline():
    A, B, C = hgemm(256, 256, 256)
    s = tc.create_schedule(C.op)
    schedule_wmma_gemm(s, C, WmmaConfig(2, 2, 4, 4, 32, family="mma", stages=4))
    src = tc.build(s, [A, B, C], target="cuda -arch=sm_90").get_source()
    ptx = compile_ptx(src, "sm_90")
    assert "cp.async.commit_group" in ptx and "cp.async.wait_group 2" in ptx
    for kernel, use in ptxas_usage(src, "sm_90").items():
        assert use["spill_stores"] == use["spill_loads"] == use["stack"] == 0, (kernel, use)


# --------------------------------------------------------------------------- GPU


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(SHAPES))
def test_hand_written_mma_gemm_on_the_gpu(gpu_driver, name):
    M, N, K, kw = SHAPES[name]
    s, args = mma_schedule(M, N, K, kw)
    mod = tc.build(s, args, target="cuda")
    a, b, want = inputs(M, N, K)
    c = np.full((M, N), np.nan, np.float32)
    mod(a, b, c)
    close(c, want, K)


@pytest.mark.gpu
def test_mma_template_in_every_operand_layout_on_the_gpu(gpu_driver):
    run_layouts("cuda")


@pytest.mark.gpu
@pytest.mark.parametrize("M,N,K", [(1024, 1024, 1024), (256, 384, 96)])
def test_mma_template_on_the_gpu(gpu_driver, M, N, K):
    A, B, C = hgemm(M, N, K)
    s = tc.create_schedule(C.op)
    schedule_wmma_gemm(s, C, WmmaConfig(2, 2, 4, 4, 32, family="mma") if M % 128 == 0
                       and N % 128 == 0 else WmmaConfig(2, 2, 2, 2, 32, family="mma"))
    mod = tc.build(s, [A, B, C], target="cuda")
    a, b, want = inputs(M, N, K)
    c = np.full((M, N), np.nan, np.float32)
    mod(a, b, c)
    close(c, want, K)
