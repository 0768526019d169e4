"""The tensor-core GEMM with its elementwise epilogue fused (bias, activation, residual,
the cast to float16 / bfloat16): the fragments go through a float32 tile of C in shared
memory and the block's threads apply the epilogue as they write the output
(tecomp.strategy.cuda.tensorcore).

Checked in the CUDA emulation (each lane runs its own share of the fragments, so a wrong
tile mapping gives a wrong result here as on the GPU), in nvcc's output (no spills, the
shared memory within the architecture's limit), and on a GPU when there is one."""
from __future__ import annotations

import re
import shutil
from dataclasses import replace

import numpy as np
import pytest

import tecomp as tc
import tecomp.nn as nn
from tecomp.errors import ScheduleError
from tecomp.runtime.nvcc import find_nvcc
from tecomp.strategy import cuda as sc
from tecomp.strategy.cuda.common import max_shared_bytes
from tecomp.strategy.cuda.tensorcore import WmmaConfig, default_wgmma, shared_bytes, wmma_config
from tecomp.strategy.cuda_rules import apply_cuda_rules
from tecomp.target.cuda import block_shared_limit
from tecomp.testing.gpu_resources import ptxas_usage
from helpers import gpu_driver  # noqa: F401  (a fixture)

torch = pytest.importorskip("torch")   # bfloat16 arrays (numpy has none)

needs_cxx = pytest.mark.skipif(shutil.which("g++") is None and shutil.which("clang++") is None,
                               reason="the CUDA emulation needs a C++ compiler")
needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc is not on PATH")

TORCH_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


def dense_epilogue(M, N, K, dtype="float16", out_dtype="float16"):
    """``cast(tanh(X W^T + b) * 0.5 + R)``: a bias, an activation, a residual and a cast,
    all reading the GEMM at their own index."""
    X = tc.placeholder((M, K), dtype, name="X")
    W = tc.placeholder((N, K), dtype, name="W")
    b = tc.placeholder((N,), dtype, name="b")
    R = tc.placeholder((M, N), "float32", name="R")
    D = nn.dense(X, W, out_dtype="float32")
    Y = tc.compute((M, N), lambda i, j: (tc.tanh(D[i, j] + b[j].astype("float32")) * 0.5
                                         + R[i, j]).astype(out_dtype), name="Y")
    return [X, W, b, R, Y]


def dense_inputs(M, N, K, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    t = TORCH_DTYPES[dtype]
    x, w, b = (torch.randn(*s, generator=g).to(t) for s in ((M, K), (N, K), (N,)))
    r = torch.randn(M, N, generator=g)
    return x, w, b, r


def dense_expect(x, w, b, r, out_dtype):
    y = torch.tanh(x.double() @ w.double().T + b.double()) * 0.5 + r.double()
    return y.to(TORCH_DTYPES[out_dtype])


def run_dense(s, args, M, N, K, dtype, out_dtype, seed=0):
    mod = tc.build(s, args, target="cuda-emu")
    x, w, b, r = dense_inputs(M, N, K, dtype, seed)
    out = torch.full((M, N), float("nan"), dtype=TORCH_DTYPES[out_dtype])
    mod(x, w, b, r, out)
    want = dense_expect(x, w, b, r, out_dtype)
    # the float32 sums round differently from float64's: at most an ulp of the result
    ulp = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7, "float32": 2.0 ** -20}[out_dtype]
    err = (out.double() - want.double()).abs() / want.double().abs().clamp(min=1.0)
    assert not torch.isnan(out).any()
    assert err.max().item() <= 2 * ulp
    return mod


@needs_cxx
@pytest.mark.parametrize("family", ["wmma", "mma"])
@pytest.mark.parametrize("dtype,out_dtype,cfg", [
    ("float16", "float16", WmmaConfig(2, 2, 1, 3, 16)),   # 32 x 96 blocks: 2 x 1 of them
    ("bfloat16", "bfloat16", WmmaConfig(2, 1, 2, 1, 32, stages=3)),  # a ring of 3
    ("float16", "float32", None),                          # the default tiling
])
def test_fused_epilogue_matches_torch_in_the_emulation(family, dtype, out_dtype, cfg):
    M, N, K = 64, 96, 96
    args = dense_epilogue(M, N, K, dtype, out_dtype)
    if cfg is not None:
        cfg = replace(cfg, family=family)
    elif family == "mma":
        cfg = replace(wmma_config(M, N, K, epilogue=True), family="mma")
    mod = run_dense(sc.schedule_dense(args[-1], "cuda-emu", config=cfg), args, M, N, K,
                    dtype, out_dtype, seed=len(family))
    src = mod.get_source()
    assert ("mma_sync" in src) or ("mma.sync" in src)


@needs_cxx
def test_dense_with_bias_and_gelu_runs_on_tensor_cores():
    """``tc.nn.gelu(tc.nn.dense(X, W, b))`` of float16 tensors (a float16 result): the
    epilogue of PyTorch's ``F.gelu(F.linear(x, w, b))``, one kernel."""
    M, N, K = 64, 128, 64
    X = tc.placeholder((M, K), "float16", name="X")
    W = tc.placeholder((N, K), "float16", name="W")
    b = tc.placeholder((N,), "float16", name="b")
    Y = nn.gelu(nn.dense(X, W, b))
    s = sc.schedule_dense(Y, "cuda-emu")
    text = str(tc.lower(s, [X, W, b, Y]))
    # the float32 C is a tile in shared memory, stored by the fragments' intrinsic
    assert re.search(r"allocate dense\.matmul: float32\[16, 16\] \(shared", text)
    assert "tensorize cuda.wmma_store_f32" in text
    mod = tc.build(s, [X, W, b, Y], target="cuda-emu")
    assert len(mod.kernels) == 1
    g = torch.Generator().manual_seed(3)
    x, w, bb = (torch.randn(*sh, generator=g).half() for sh in ((M, K), (N, K), (N,)))
    out = np.zeros((M, N), np.float16)
    mod(x, w, bb, out)
    want = torch.nn.functional.gelu(x.double() @ w.double().T + bb.double()).half()
    np.testing.assert_allclose(out.astype(np.float32), want.float().numpy(), rtol=2e-3,
                               atol=2e-3)


@needs_cxx
def test_batched_epilogue_through_the_gpu_rules():
    """A bf16 ``bmm(Q, K^T)`` scaled, through ReLU and into float16: the GPU rules put the
    contraction on tensor cores with its epilogue (batch on blockIdx.z)."""
    B, M, N, K = 3, 64, 96, 32
    A = tc.placeholder((B, M, K), "bfloat16", name="A")
    Bt = tc.placeholder((B, N, K), "bfloat16", name="B")
    C = nn.batch_matmul(A, Bt, transpose_b=True, out_dtype="float32")
    D = tc.compute((B, M, N), lambda z, i, j: tc.max(C[z, i, j] * 0.125, tc.const(0.0))
                   .astype("float16"), name="D")
    mod = tc.build(apply_cuda_rules([A, Bt, D]), [A, Bt, D], target="cuda-emu")
    assert "mma_sync" in mod.get_source() and len(mod.kernels) == 1
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(B, M, K, generator=g).bfloat16(), torch.randn(B, N, K, generator=g).bfloat16()
    out = np.zeros((B, M, N), np.float16)
    mod(a, b, out)
    want = torch.relu(torch.bmm(a.double(), b.double().transpose(1, 2)) * 0.125).half()
    np.testing.assert_allclose(out.astype(np.float32), want.float().numpy(), rtol=1e-3,
                               atol=1e-3)


def test_an_epilogue_reading_elsewhere_is_refused():
    """An output that reads C at another index (a transpose) cannot be applied from the
    block's tile of C: a ScheduleError that says to schedule them apart."""
    X = tc.placeholder((64, 64), "float16", name="X")
    W = tc.placeholder((64, 64), "float16", name="W")
    D = nn.dense(X, W, out_dtype="float32")
    T = tc.compute((64, 64), lambda i, j: D[j, i].astype("float16"), name="T")
    with pytest.raises(ScheduleError, match="another index"):
        sc.schedule_dense(T, "cuda-emu", config=WmmaConfig(2, 2, 1, 1, 16))


def test_the_tiling_fits_the_architectures_shared_memory():
    M, N, K = 4096, 3072, 768
    for arch in ("sm_80", "sm_86", "sm_89", "sm_90"):
        limit = block_shared_limit(arch)
        assert max_shared_bytes(f"cuda -arch={arch}") == limit
        cfg = wmma_config(M, N, K, epilogue=True, max_shared=limit)
        assert cfg is not None and shared_bytes(cfg, epilogue=True) <= limit
    # Hopper and Ampere's A100: the GEMM's own 128 x 128 tiling, k steps of 64
    big = wmma_config(M, N, K)
    assert wmma_config(M, N, K, epilogue=True, max_shared=block_shared_limit("sm_90")) == big
    # sm_86's 99 KiB: smaller blocks
    small = wmma_config(M, N, K, epilogue=True, max_shared=block_shared_limit("sm_86"))
    assert small.block_m * small.block_n < big.block_m * big.block_n


@needs_nvcc
@pytest.mark.parametrize("arch,M", [("sm_90", 4096), ("sm_86", 4096), ("sm_90a", 1000)])
def test_bert_sized_dense_gelu_has_no_spills(arch, M):
    """BERT's FFN up-projection with its bias and GELU: no register spills, and the block's
    shared memory (dynamic beyond 48 KiB) within the architecture's limit.  1000 tokens
    (boundary tiles, tests/test_tensorcore_edges.py): mma instructions still, the edge
    tiles' copies cp.async of the src-size form (zeros past the edge); on sm_90a wgmma
    fed by TMA, the default there."""
    N, K = 3072, 768
    X = tc.placeholder((M, K), "float16", name="X")
    W = tc.placeholder((N, K), "float16", name="W")
    b = tc.placeholder((N,), "float16", name="b")
    Y = nn.gelu(nn.dense(X, W, b))
    target = f"cuda -arch={arch}"
    mod = tc.build(sc.schedule_dense(Y, target), [X, W, b, Y], target=target)
    use = ptxas_usage(mod.get_source(), arch)
    (k,) = use.values()
    assert k["spill_stores"] == 0 and k["spill_loads"] == 0
    if M % 16:
        from tecomp.runtime.nvcc import compile_ptx

        ptx = compile_ptx(mod.get_source(), arch)
        if arch == "sm_90a":   # wgmma fed by TMA: past the edge its boxes read zeros
            assert "wgmma.mma_async" in ptx and "cp.async.bulk.tensor" in ptx
        else:
            assert "mma.sync.aligned" in ptx
            assert re.search(r"cp\.async\.cg\.shared\.global(\.\w+)* \[%r\w*\], "
                             r"\[%rd\w*\], 16, %r", ptx)
    cfg = (default_wgmma(M, N, K, False, False, epilogue=True,
                         max_shared=block_shared_limit(arch)) if arch == "sm_90a" else
           wmma_config(M, N, K, epilogue=True, max_shared=block_shared_limit(arch)))
    assert k["smem"] <= shared_bytes(cfg, epilogue=True) <= block_shared_limit(arch)


@pytest.mark.gpu
def test_fused_epilogue_on_the_gpu(gpu_driver):
    M, N, K = 256, 384, 128
    args = dense_epilogue(M, N, K, "float16", "float16")
    mod = tc.build(sc.schedule_dense(args[-1], "cuda"), args, target="cuda")
    x, w, b, r = dense_inputs(M, N, K, "float16")
    out = np.zeros((M, N), np.float16)
    mod(x.numpy(), w.numpy(), b.numpy(), r.numpy(), out)
    want = dense_expect(x, w, b, r, "float16").float().numpy()
    np.testing.assert_allclose(out.astype(np.float32), want, rtol=2e-3, atol=2e-3)
