"""Tensor-core GEMMs of odd extents (M, N or K not a multiple of 16, or of the block):
boundary tiles (tecomp.strategy.cuda.tensorcore).  The shared tiles are copied whole,
zeros past the edge (``cache_read(..., pad=0.0)`` with ``align_bounds``), the sum runs to
a multiple of the k step (``align_bounds`` on the reduce axis), and C goes through the
block's tile in shared memory, written out under the edge's guard.

Checked against float64 in the CUDA emulation (tiny shapes: the emulation is slow); nvcc's
output (mma instructions, cp.async's zero-filling form, no spills) for BERT's FFN at 1000
tokens in tests/test_tensorcore_epilogue.py; on a GPU benchmarks/gpu.py's odd rows."""
from __future__ import annotations

import re
import shutil

import numpy as np
import pytest

import tecomp as tc
import tecomp.nn as nn
from tecomp.strategy import cuda as sc
from tecomp.strategy.cuda.tensorcore import WmmaConfig, fits, waste, wmma_config
from tecomp.strategy.cuda_rules import apply_cuda_rules
from tecomp.target.cuda import block_shared_limit
from helpers import gpu_driver  # noqa: F401  (a fixture)

torch = pytest.importorskip("torch")   # bfloat16 arrays (numpy has none)

needs_cxx = pytest.mark.skipif(shutil.which("g++") is None and shutil.which("clang++") is None,
                               reason="the CUDA emulation needs a C++ compiler")

T = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


def odd_gemm(M, N, K, dtype="float16", bt=False, at=False, batch=None, epilogue=False):
    """``A @ B`` (``bt``: ``A @ B^T`` as dense stores W; ``at``: ``A^T @ B``), ``batch``
    of them; ``epilogue``: ``+ bias[j]``, GELU, cast to float16.  Returns the args."""
    pre = (batch,) if batch else ()
    A = tc.placeholder(pre + ((K, M) if at else (M, K)), dtype, name="A")
    B = tc.placeholder(pre + ((N, K) if bt else (K, N)), dtype, name="B")
    if batch:
        C = nn.batch_matmul(A, B, transpose_a=at, transpose_b=bt, out_dtype="float32")
    elif bt:
        C = nn.dense(A, B, out_dtype="float32")
    else:
        C = nn.matmul(A, B, out_dtype="float32")
    if not epilogue:
        return [A, B, C]
    bias = tc.placeholder((N,), "float32", name="bias")
    g = nn.gelu(tc.compute(C.shape, lambda *i: C[i] + bias[i[-1]], name="biased"))
    Y = tc.compute(C.shape, lambda *i: g[i].astype("float16"), name="Y")
    return [A, B, bias, Y]


def expect(ins, bt, at, batch, epilogue):
    a, b = ins[0].double(), ins[1].double()
    if at:
        a = a.transpose(-1, -2)
    if bt:
        b = b.transpose(-1, -2)
    c = a @ b
    if epilogue:
        c = torch.nn.functional.gelu(c + ins[2].double()).half()
    return c


def run(args, sched, dtype, bt=False, at=False, batch=None, epilogue=False, seed=0,
        target="cuda-emu"):
    mod = tc.build(sched, args, target=target)
    g = torch.Generator().manual_seed(seed)
    ins = [torch.randn(*(int(x) for x in t.shape), generator=g).to(T[t.dtype])
           for t in args[:-1]]
    out = torch.full(tuple(int(x) for x in args[-1].shape), float("nan"),
                     dtype=T[args[-1].dtype])
    mod(*ins, out)
    want = expect(ins, bt, at, batch, epilogue)
    assert not torch.isnan(out).any()
    if epilogue:   # a float16 result: an ulp or two of it
        np.testing.assert_allclose(out.float().numpy(), want.float().numpy(), rtol=2e-3,
                                   atol=2e-3)
    else:          # the products are exact in float32; only the sums round
        K = ins[0].shape[-2 if at else -1]
        np.testing.assert_allclose(out.numpy(), want.numpy(), rtol=0,
                                   atol=1e-5 * K * want.abs().max().item() / 16 + 1e-6)
    return mod


# --------------------------------------------------------------------------- choice


def test_odd_extents_get_a_padded_tiling_and_divisible_ones_keep_theirs():
    # divisible: the same choice as before (the largest that divides, enough blocks)
    assert wmma_config(4096, 4096, 4096) == WmmaConfig(2, 2, 4, 4, 64)
    assert wmma_config(1024, 1024, 1024) == WmmaConfig(2, 2, 2, 2, 32)
    assert wmma_config(48, 48, 48) == WmmaConfig(1, 1, 1, 1, 16)
    # BERT-ish: M = 1000 pads 24 rows of the last block
    c = wmma_config(1000, 768, 3072, max_shared=block_shared_limit("sm_90"))
    assert c is not None and not fits(c, 1000, 768, 3072) and waste(c, 1000, 768, 3072) < 0.05
    # M = 4097: the big blocks (one more row of them), not 16 x 16 ones
    c = wmma_config(4097, 4096, 4096)
    assert (c.block_m, c.block_n) == (128, 128)
    # K = 100: k steps of 16 (112), not 64 (128)
    assert wmma_config(1000, 768, 100).k_tile == 16
    # a GEMV wastes 15/16 of a 16-row tile; a symbolic extent has no tiles: CUDA cores
    assert wmma_config(1, 768, 768) is None and wmma_config(None, 64, 64) is None
    assert waste(WmmaConfig(1, 1, 1, 1, 16), 16, 32, 48) == 0


# --------------------------------------------------------------------------- emulation

CASES = [
    # M, N, K, dtype, bt, at, batch, epilogue, config
    (40, 24, 40, "float16", False, False, None, False, None),
    (32, 32, 20, "float16", False, False, None, False, WmmaConfig(2, 2, 1, 1, 16)),   # K only
    (33, 17, 20, "bfloat16", True, False, None, False, WmmaConfig(2, 2, 1, 1, 32)),
    (20, 40, 24, "float16", False, True, 1, True, WmmaConfig(1, 2, 1, 1, 16, family="mma")),
    (24, 20, 36, "bfloat16", True, False, 2, True, WmmaConfig(2, 1, 1, 1, 32, stages=3,
                                                              family="mma")),
    # K = 4095 (rows 2-byte aligned) and 100 (8-byte): the operands packed to 16-byte rows
    (17, 9, 4095, "bfloat16", True, False, None, False, WmmaConfig(1, 1, 1, 1, 32)),
    (17, 9, 4095, "float16", False, False, None, False, WmmaConfig(1, 1, 1, 1, 32,
                                                                   family="mma")),
    (9, 33, 100, "float16", False, False, None, False, None),
]


def check_case(M, N, K, dtype, bt, at, batch, epilogue, cfg, target):
    args = odd_gemm(M, N, K, dtype, bt, at, batch, epilogue)
    if batch:      # through the GPU rules (the auto-scheduler's), batch on blockIdx.z
        s = apply_cuda_rules(args, gemm=cfg)
    elif bt:
        s = sc.schedule_dense(args[-1], target, config=cfg)
    else:
        s = sc.schedule_matmul(args[-1], target, config=cfg)
    mod = run(args, s, dtype, bt, at, batch, epilogue, seed=M + N + K, target=target)
    assert "mma" in mod.get_source(), "not on tensor cores"
    return mod


@needs_cxx
@pytest.mark.parametrize("M,N,K,dtype,bt,at,batch,epilogue,cfg", CASES)
def test_odd_shapes_match_float64_in_the_emulation(M, N, K, dtype, bt, at, batch, epilogue,
                                                    cfg):
    check_case(M, N, K, dtype, bt, at, batch, epilogue, cfg, "cuda-emu")


@pytest.mark.gpu
@pytest.mark.parametrize("M,N,K,dtype,bt,at,batch,epilogue,cfg", CASES + [
    (1000, 3072, 768, "float16", True, False, None, True, None),       # BERT's FFN, 1000 tokens
    (4097, 256, 100, "bfloat16", False, False, None, False, None),
    (130, 250, 1000, "float16", False, True, 3, True, WmmaConfig(2, 2, 2, 2, 32, family="mma",
                                                                 stages=3)),
    # benchmarks/gpu.py's odd K: every operand packed to 16-byte rows, the default tilings
    (4095, 4095, 4095, "bfloat16", False, False, None, False, None),
    (4095, 4095, 4095, "bfloat16", True, False, None, False, None),
    (4096, 4096, 100, "float16", False, False, None, False, None),
    (1001, 767, 4095, "float16", True, False, None, False, WmmaConfig(2, 2, 2, 2, 32,
                                                                      family="mma")),
])
def test_odd_shapes_on_the_gpu(gpu_driver, M, N, K, dtype, bt, at, batch, epilogue, cfg):
    check_case(M, N, K, dtype, bt, at, batch, epilogue, cfg, "cuda")


def test_divisible_extents_keep_their_code():
    """Tiles that divide the extents: no zero fill, no tile of C in shared memory, the
    fragments stored straight to C (the code of before boundary tiles)."""
    args = odd_gemm(64, 64, 64)
    text = str(tc.lower(sc.schedule_matmul(args[-1], "cuda"), args))
    assert "select(" not in text and "matmul.shared[" not in text
    assert "tensorize cuda.wmma_store_f32" in text
    # an odd K: zeros past it in the copies, the fragments still stored to C
    odd = odd_gemm(64, 64, 60)
    text = str(tc.lower(sc.schedule_matmul(odd[-1], "cuda", config=WmmaConfig(2, 2, 1, 1, 32)),
                        odd))
    assert "select(" in text and "matmul.shared[" not in text
    # an odd M: C through the block's tile in shared memory, written under the guard
    odd = odd_gemm(60, 64, 64)
    text = str(tc.lower(sc.schedule_matmul(odd[-1], "cuda", config=WmmaConfig(2, 2, 1, 1, 32)),
                        odd))
    assert "allocate matmul.shared: float32[32, 32] (shared, strides [36, 1])" in text
    assert re.search(r"if \(i\.outer\*32 .* < \d+\) {", text)


# --------------------------------------------------------------------------- packing

def _ir(M, N, K, dtype, bt, target, cfg=None):
    args = odd_gemm(M, N, K, dtype, bt)
    sched = sc.schedule_dense if bt else sc.schedule_matmul
    return str(tc.lower(sched(args[-1], target, config=cfg), args)), args, cfg, sched


def test_misaligned_rows_are_packed_once_to_16_byte_rows():
    """An operand whose rows are not a multiple of 16 bytes (K = 4095 or 100 of A[M, K],
    N = 4095 of B[K, N]) is copied once to a workspace whose rows are (strides [4096, 1]),
    and the tiles are copied from that; aligned rows are copied from the tensor as before."""
    text = _ir(4095, 4095, 4095, "bfloat16", False, "cuda -arch=sm_90a")[0]
    assert "allocate A.global: bfloat16[4095, 4095] (global, strides [4096, 1])" in text
    assert "allocate B.global: bfloat16[4095, 4095] (global, strides [4096, 1])" in text
    text = _ir(4096, 4096, 100, "float16", False, "cuda")[0]
    assert "allocate A.global: float16[4096, 100] (global, strides [104, 1])" in text
    assert "B.global" not in text                        # B[100, 4096]: rows aligned
    assert ".global" not in _ir(1000, 768, 3072, "float16", True, "cuda")[0]
    # (TMA's tensor maps read the tensors themselves: K a multiple of 8 there)
    assert ".global" not in _ir(4097, 4096, 4096, "bfloat16", True, "cuda -arch=sm_90a")[0]


@pytest.mark.parametrize("arch,family,bt", [("sm_80", "wmma", False), ("sm_90a", "mma", True)])
def test_packed_tiles_are_copied_16_bytes_at_a_time(arch, family, bt):
    """The GEMM kernel of a 4095^3 bfloat16 GEMM copies its tiles from the packed rows in
    16-byte cp.async (zero-filling past the edge) with no run-time alignment check and no
    element-by-element fallback: before, 7 in 8 of the rows took 2-byte loads waited for
    before the multiply-adds (15-20x slower on an H200)."""
    from tecomp.strategy.cuda.tensorcore import wmma_config
    from dataclasses import replace

    target = f"cuda -arch={arch}"
    cfg = replace(wmma_config(4095, 4095, 4095, max_shared=block_shared_limit(arch),
                              dtype="bfloat16"), family=family)
    _, args, _, sched = _ir(4095, 4095, 4095, "bfloat16", bt, target, cfg)
    src = tc.build(sched(args[-1], target, config=cfg), args, target=target).get_source()
    kernels = src.split("extern \"C\" __global__")[1:]
    assert len(kernels) == 3                              # the two packs, the GEMM
    gemm = kernels[-1]
    assert "tc_cp_async_zfill16(" in gemm and "tc_aligned2(" not in gemm
    from tecomp.runtime.nvcc import find_nvcc
    if find_nvcc() is None:
        return
    from tecomp.runtime.nvcc import compile_ptx

    ptx = compile_ptx(src, arch).split(".entry")[-1]      # the GEMM kernel's
    assert re.search(r"cp\.async\.cg\.shared\.global(\.\w+)* \[%r\w*\], \[%rd\w*\], 16, %r",
                     ptx)
    assert not re.search(r"ld\.global(\.\w+)*\.[bu]16\b", ptx), "2-byte loads of the tiles"
    assert "ld.local" not in ptx and "st.local" not in ptx



def test_packed_tiles_past_2_31_elements_keep_16_byte_copies():
    """A[70001, 40001] (2.8e9 elements: int64 indices, whose widening casts hid from the
    code generator that a tile's row is contiguous and aligned): the packed tiles still
    go in 16-byte cp.async with no alignment check."""
    args = odd_gemm(70001, 64, 40001, "float16", bt=True)
    src = tc.build(sc.schedule_dense(args[-1], "cuda"), args, target="cuda").get_source()
    gemm = src.split("extern \"C\" __global__")[-1]
    assert "long long" in gemm                            # (int64 indices)
    assert "(&A_global[" in gemm and "tc_cp_async_zfill16(" in gemm
    assert "tc_aligned2(&A_global" not in gemm and "__half2float(A_global" not in gemm
