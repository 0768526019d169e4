"""FlashAttention's forward on tensor cores (tecomp.nn.flash_attention,
tecomp.strategy.cuda.attention) in the CUDA emulation against float64 references, the IR
without a seq x seq buffer, and nvcc's PTX / ptxas report for sm_80 and sm_90."""
from __future__ import annotations

import math
import os
import re
import shutil

import numpy as np
import pytest

import tecomp as tc
from tecomp.runtime.nvcc import compile_ptx, find_nvcc
from tecomp.strategy.cuda.attention import (FlashConfig, flash_config, schedule_flash_attention,
                                            shared_bytes)
from tecomp.target.cuda import block_shared_limit
from tecomp.testing.gpu_resources import ptxas_usage

ml_dtypes = pytest.importorskip("ml_dtypes")

needs_cxx = pytest.mark.skipif(shutil.which("g++") is None and shutil.which("clang++") is None,
                               reason="the CUDA emulation needs a C++ compiler")
_LONG = os.environ.get("TECOMP_LONG_TESTS", "") not in ("", "0")
needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc is not on PATH")

NP = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


def flash(B, H, Lq, Lk, D, dtype, causal, Dv=None):
    q = tc.placeholder((B, H, Lq, D), dtype, name="q")
    k = tc.placeholder((B, H, Lk, D), dtype, name="k")
    v = tc.placeholder((B, H, Lk, Dv or D), dtype, name="v")
    out, lse = tc.nn.flash_attention(q, k, v, causal=causal)
    return [q, k, v, out, lse]


def reference(q, k, v, causal):
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(q.shape[-1])
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    m = s.max(-1, keepdims=True)
    lse = m + np.log(np.exp(s - m).sum(-1, keepdims=True))
    return np.exp(s - lse) @ v, lse[..., 0]


#: (batch, heads, Lq, Lk, head dim, dtype, causal, config): lengths that are not
#: multiples of the tiles, both dtypes, head dims 64 and 128
CASES = [
    (1, 2, 40, 40, 64, "float16", False, None),
    (2, 2, 100, 100, 64, "bfloat16", True, None),
    (1, 2, 64, 100, 128, "float16", True, None),
    (1, 2, 100, 64, 128, "bfloat16", False, None),
    (1, 1, 130, 200, 64, "float16", True, FlashConfig(2, 32)),
]


@needs_cxx
@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c[:7])))
def test_flash_attention_matches_float64(case):
    B, H, Lq, Lk, D, dtype, causal, cfg = case
    args = flash(B, H, Lq, Lk, D, dtype, causal)
    s = schedule_flash_attention(args[3:], target="cuda-emu", config=cfg)
    mod = tc.build(s, args, target="cuda-emu")
    rng = np.random.default_rng(Lq + Lk)
    q, k, v = (rng.standard_normal(shape).astype(NP[dtype]) for shape in
               ((B, H, Lq, D), (B, H, Lk, D), (B, H, Lk, D)))
    out = np.full((B, H, Lq, D), np.nan, NP[dtype])
    lse = np.full((B, H, Lq), np.nan, np.float32)
    # "reverse" runs the threads from barrier to barrier in reverse order: a missing
    # barrier shows as a wrong result
    mod(q, k, v, out, lse, mode="reverse" if causal else "serial")
    want, want_lse = reference(q, k, v, causal)
    # p is rounded to the inputs' dtype before p v, the output once more
    tol = 4e-3 if dtype == "float16" else 3e-2
    np.testing.assert_allclose(out.astype(np.float64), want, rtol=0, atol=tol)
    np.testing.assert_allclose(lse, want_lse, rtol=0, atol=1e-5)


def test_the_lowered_ir_has_no_seq_by_seq_buffer():
    L = 512
    args = flash(1, 2, L, L, 64, "float16", True)
    s = schedule_flash_attention(args[3:], target="cuda -arch=sm_80")
    text = str(tc.lower(s, args, target="cuda -arch=sm_80"))
    shapes = re.findall(r"allocate ([\w.]+): \w+\[([\d, ]+)\]", text)
    assert shapes, text[:2000]
    for name, dims in shapes:
        dims = [int(x) for x in dims.split(",")]
        assert sum(d >= 128 for d in dims) <= 1 and math.prod(dims) < L * L // 2, (name, dims)
    # the tensor cores and the online softmax's reduction are there
    for intrin in ("mma_load_a_f16", "mma_load_b_f16", "mma_f16f16f32", "mma_store_f32"):
        assert f"tensorize cuda.{intrin} " in text
    assert "flash.stats" in text


def test_auto_schedule_takes_the_template():
    args = flash(1, 1, 64, 64, 64, "float16", False)
    s = tc.auto_schedule(args, target="cuda -arch=sm_80")
    text = str(tc.lower(s, args, target="cuda -arch=sm_80"))
    assert "tensorize cuda.mma_f16f16f32 " in text


@pytest.mark.parametrize("d", [64, 128])
def test_the_config_fits_shared_memory_and_registers(d):
    for arch in ("sm_80", "sm_90"):
        limit = block_shared_limit(arch)
        cfg = flash_config(d, d, "float16", limit)
        assert shared_bytes(cfg, d, d) <= limit
        assert cfg.block_kv + d <= 160


@needs_nvcc
@pytest.mark.parametrize("arch,d", [("sm_80", 128), ("sm_90", 128),
                                    pytest.param("sm_90", 64, marks=[pytest.mark.slow, pytest.mark.skipif(
                                        not _LONG, reason="TECOMP_LONG_TESTS=1")])])
def test_ptx_has_the_tensor_cores_and_nothing_spills(arch, d):
    """The issue's shapes (batch 4, 16 heads, seq 2048): head dim 128 holds the most
    accumulators (the kernels' text does not depend on the batch or the lengths)."""
    args = flash(4, 16, 2048, 2048, d, "float16", True)
    tgt = f"cuda -arch={arch}"
    src = tc.build(schedule_flash_attention(args[3:], target=tgt), args,
                   target=tgt).get_source()
    ptx = compile_ptx(src, arch)
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in ptx
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in ptx
    assert "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in ptx   # v [keys, dv]
    for kernel, use in ptxas_usage(src, arch).items():
        assert use["spill_stores"] == use["spill_loads"] == use["stack"] == 0, (kernel, use)
