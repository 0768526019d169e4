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
from tecomp.ir import parse
from tecomp.runtime.nvcc import compile_ptx, find_nvcc
from tecomp.strategy.cuda.attention import (FlashConfig, backward_shared_bytes,
                                            flash_backward_config, flash_config,
                                            schedule_flash_attention,
                                            schedule_flash_attention_backward, shared_bytes)
from tecomp.target.cuda import block_shared_limit
from tecomp.testing.gpu_resources import ptxas_usage

ml_dtypes = pytest.importorskip("ml_dtypes")

needs_cxx = pytest.mark.skipif(shutil.which("g++") is None and shutil.which("clang++") is None,
                               reason="the CUDA emulation needs a C++ compiler")
_LONG = os.environ.get("TECOMP_LONG_TESTS", "") not in ("", "0")
#: nvcc's checks of the other shapes and of the backward (10 s): TECOMP_LONG_TESTS=1
_SLOW = [pytest.mark.slow, pytest.mark.skipif(not _LONG, reason="TECOMP_LONG_TESTS=1")]
needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc is not on PATH")

NP = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


def flash(B, H, Lq, Lk, D, dtype, causal, Dv=None):
    q = tc.placeholder((B, H, Lq, D), dtype, name="q")
    k = tc.placeholder((B, H, Lk, D), dtype, name="k")
    v = tc.placeholder((B, H, Lk, Dv or D), dtype, name="v")
    out, lse = tc.nn.flash_attention(q, k, v, causal=causal)
    return [q, k, v, out, lse]


def reference(q, k, v, causal, dout=None):
    """float64 attention: (output, logsumexp), and with ``dout`` (dq, dk, dv)."""
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    scale = 1 / math.sqrt(q.shape[-1])
    s = q @ k.transpose(0, 1, 3, 2) * scale
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    m = s.max(-1, keepdims=True)
    lse = m + np.log(np.exp(s - m).sum(-1, keepdims=True))
    p = np.exp(s - lse)
    out = p @ v
    if dout is None:
        return out, lse[..., 0]
    do = dout.astype(np.float64)
    ds = p * (do @ v.transpose(0, 1, 3, 2) - (do * out).sum(-1, keepdims=True)) * scale
    return ds @ k, ds.transpose(0, 1, 3, 2) @ q, p.transpose(0, 1, 3, 2) @ do


#: (batch, heads, Lq, Lk, head dim, dtype, causal, config): lengths that are not
#: multiples of the tiles, both dtypes, head dims 64 and 128
CASES = [
    (2, 2, 100, 100, 64, "bfloat16", True, None),
    (1, 2, 64, 100, 128, "float16", False, None),
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
    # one pass over the keys (FlashAttention-2's): the statistics updated at each tile
    # and the accumulators rescaled; causal: the key loop stops after the tile of the
    # block's last query (128 rows, 64 keys a tile: 2 tiles a block)
    assert len(re.findall(r"for \(j\.outer\w*, 0, i\.outer\w*\*2 \+ 2\)", text)) == 1
    assert "tensorize cuda.mma_scale_rows_f32 " in text


def gemms(text):
    """The accumulators of the tensorized mma loops in a lowered function, in order: one
    per ``L x L x d`` GEMM of the kernels (each a loop of ``tensorize cuda.mma_*f32
    (accumulate)`` whose output fragment names the stage)."""
    return re.findall(r"tensorize cuda\.mma_(?:f16f16|bf16bf16)f32 \(accumulate\) \{\s*"
                      r"// out c: ([\w.]+)\.mma\.accumulator", text)


def test_the_gemms_of_the_forward_and_the_backward(dtype="bfloat16", causal=True):
    """The forward computes the scores once (FlashAttention-2's two GEMMs: ``s = q k^T``
    and ``p v``, one pass over the keys); the backward eight (five in FlashAttention-2's):
    ``dq``'s kernel recomputes the scores and ``dout v^T``, ``dk``'s both again and
    ``dv``'s the scores once more (each gradient its own kernel, no atomics).  A change
    of either count is a change of the kernels: update the docstrings and docs/operators.md."""
    args = flash(1, 2, 100, 130, 64, dtype, causal)
    tgt = "cuda -arch=sm_90"
    func = tc.lower(schedule_flash_attention(args[3:], target=tgt), args, target=tgt)
    text = str(func)
    assert gemms(text) == ["flash.scores", "flash.pv"]
    # the printed IR, with the statistics' steps and the rescaling, parses back
    assert str(parse(text)) == text
    q, k, v = args[:3]
    o, do = (tc.placeholder(q.shape, dtype, name=n) for n in ("o", "do"))
    lse = tc.placeholder(q.shape[:3], "float32", name="lse")
    grads = tc.nn.flash_attention_backward(q, k, v, o, do, lse, causal=causal)
    bargs = [q, k, v, o, do, lse, *grads]
    text = str(tc.lower(schedule_flash_attention_backward(list(grads), target=tgt), bargs,
                        target=tgt))
    assert gemms(text) == ["flash_grad." + n for n in (
        "scores_q", "dp", "dq_acc", "scores_k", "dpt", "dk_acc", "scores_v", "dv_acc")]


def test_auto_schedule_takes_the_template():
    args = flash(1, 1, 64, 64, 64, "float16", False)
    s = tc.auto_schedule(args, target="cuda -arch=sm_80")
    text = str(tc.lower(s, args, target="cuda -arch=sm_80"))
    assert "tensorize cuda.mma_f16f16f32 " in text
    # its single pass is no trace to replay: a search has nothing to try but it
    assert not s.trace.replayable
    s = tc.auto_schedule(args, target="cuda-emu", trials=2, progress=False)
    assert "tensorize cuda.mma_scale_rows_f32 " in str(tc.lower(s, args, target="cuda-emu"))


@pytest.mark.parametrize("d", [64, 128])
def test_the_config_fits_shared_memory_and_registers(d):
    for arch in ("sm_80", "sm_90"):
        limit = block_shared_limit(arch)
        cfg = flash_config(d, d, "float16", limit)
        assert shared_bytes(cfg, d, d) <= limit
        assert cfg.block_kv + d <= 160
        cfg = flash_backward_config(d, d, "float16", limit)
        assert backward_shared_bytes(cfg, d, d) <= limit
        assert cfg.block_kv + d <= 160


def _grad_data(shapes, dtype, seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(NP[dtype]) for shape in shapes]


@needs_cxx
def test_tc_gradient_of_flash_attention_is_the_flash_backward():
    """tc.gradient goes straight to q, k and v through flash_attention_backward (the
    forward's kernels recompute the output and the logsumexp; no seq x seq buffer)."""
    B, H, L, D = 1, 2, 40, 64
    q, k, v, head = (tc.placeholder((B, H, L, D), "float16", name=n) for n in
                     ("q", "k", "v", "head"))
    out, _ = tc.nn.flash_attention(q, k, v, causal=True)
    grads = tc.gradient(out, [q, k, v], head=head)
    assert [g.op.input_tensors[0].name for g in grads] == [
        "flash_grad.dq", "flash_grad.dk", "flash_grad.dv"]
    args = [q, k, v, head, *grads]
    s = tc.auto_schedule(args, target="cuda-emu")    # the GPU rules take the template
    text = str(tc.lower(s, args, target="cuda-emu"))
    for name, dims in re.findall(r"allocate ([\w.]+): \w+\[([\d, ]+)\]", text):
        dims = [int(x) for x in dims.split(",")]
        assert math.prod(dims) <= 128 * 128, (name, dims)
    mod = tc.build(s, args, target="cuda-emu")
    qa, ka, va, ha = _grad_data([(B, H, L, D)] * 4, "float16", 1)
    got = [np.full((B, H, L, D), np.nan, np.float16) for _ in range(3)]
    mod(qa, ka, va, ha, *got, mode="reverse")
    for g, want in zip(got, reference(qa, ka, va, True, ha)):
        np.testing.assert_allclose(g.astype(np.float64), want, rtol=0,
                                   atol=2e-3 * np.abs(want).max())


@needs_cxx
def test_flash_attention_backward_bfloat16_head_dim_128_causal_ragged():
    """Four blocks of 64 rows and tiles of 32 columns: the causal tiles skipped (dq's
    keys after its rows, dk's and dv's queries before theirs) are the empty ones."""
    B, H, Lq, Lk, D = 1, 1, 200, 136, 128
    P = lambda shape, n, dt="bfloat16": tc.placeholder(shape, dt, name=n)  # noqa: E731
    q, o, do = (P((B, H, Lq, D), n) for n in ("q", "o", "do"))
    k, v = P((B, H, Lk, D), "k"), P((B, H, Lk, D), "v")
    lse = P((B, H, Lq), "lse", "float32")
    grads = tc.nn.flash_attention_backward(q, k, v, o, do, lse, causal=True)
    s = schedule_flash_attention_backward(list(grads), target="cuda-emu",
                                          config=FlashConfig(2, 32))
    text = str(tc.lower(s, [q, k, v, o, do, lse, *grads], target="cuda-emu"))
    # dq: the key tiles up to the block's last query; dk, dv: the query tiles from the
    # block's first key (8 tiles of 32 in 256)
    assert len(re.findall(r"for \(c\.outer\w*, 0, x\.outer\w*\*2 \+ 2\)", text)) == 1
    assert len(re.findall(r"for \(c\.outer\w*, x\.outer(\w*)\*2, 8 - x\.outer\1\*2\)",
                          text)) == 2
    # the skipping is no primitive: the trace is not one to replay (it would skip nothing)
    assert not s.trace.replayable
    mod = tc.build(s, [q, k, v, o, do, lse, *grads], target="cuda-emu")
    qa, ka, va, da = _grad_data([(B, H, Lq, D), (B, H, Lk, D), (B, H, Lk, D), (B, H, Lq, D)],
                                "bfloat16", 2)
    oa, la = reference(qa, ka, va, True)
    got = [np.full(x.shape, np.nan, NP["bfloat16"]) for x in (qa, ka, va)]
    mod(qa, ka, va, oa.astype(NP["bfloat16"]), da, la.astype(np.float32), *got, mode="serial")
    for g, want in zip(got, reference(qa, ka, va, True, da)):
        np.testing.assert_allclose(g.astype(np.float64), want, rtol=0,
                                   atol=2e-2 * np.abs(want).max())


@needs_nvcc
@pytest.mark.parametrize("arch,d", [("sm_90", 128)] + [
    pytest.param(arch, d, marks=_SLOW) for arch, d in (("sm_80", 128), ("sm_80", 64))])
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


@needs_nvcc
@pytest.mark.parametrize("arch", [pytest.param(a, marks=_SLOW) for a in ("sm_80", "sm_90")])
def test_ptx_of_the_backward_has_the_tensor_cores_and_nothing_spills(arch):
    """Head dim 128, the backward's most registers (dk's kernel: 250 or so)."""
    B, H, L, d = 4, 16, 2048, 128
    P = lambda shape, n, dt="float16": tc.placeholder(shape, dt, name=n)  # noqa: E731
    q, k, v, o, do = (P((B, H, L, d), n) for n in ("q", "k", "v", "o", "do"))
    lse = P((B, H, L), "lse", "float32")
    grads = tc.nn.flash_attention_backward(q, k, v, o, do, lse, causal=True)
    tgt = f"cuda -arch={arch}"
    src = tc.build(schedule_flash_attention_backward(list(grads), target=tgt),
                   [q, k, v, o, do, lse, *grads], target=tgt).get_source()
    ptx = compile_ptx(src, arch)
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in ptx
    assert "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in ptx
    for kernel, use in ptxas_usage(src, arch).items():
        assert use["spill_stores"] == use["spill_loads"] == use["stack"] == 0, (kernel, use)


@needs_cxx
def test_scaled_dot_product_attention_on_cuda_is_flash_attention():
    """The GPU rules compute scaled_dot_product_attention as flash_attention where it is
    one (float16/bfloat16, no mask, head dims multiples of 16 up to 128, the attention
    alone), with its scale; the general stages otherwise (a mask, float32, head dim 40,
    a compute before it)."""
    B, H, L, D = 1, 2, 40, 64
    q, k, v = (tc.placeholder((B, H, L, D), "float16", name=n) for n in "qkv")
    out = tc.nn.scaled_dot_product_attention(q, k, v, scale=0.3)
    s = tc.auto_schedule([q, k, v, out], target="cuda-emu")
    text = str(tc.lower(s, [q, k, v, out], target="cuda-emu"))
    assert gemms(text) == ["sdpa.flash.scores", "sdpa.flash.pv"]
    assert "sdpa.exp" not in text and not re.search(r"sdpa\.flash\.lse[\[:]", text)
    mod = tc.build(s, [q, k, v, out], target="cuda-emu")
    qa, ka, va = _grad_data([(B, H, L, D)] * 3, "float16", 3)
    got = np.full((B, H, L, D), np.nan, np.float16)
    mod(qa, ka, va, got, mode="reverse")
    want, _ = reference(qa * np.float16(0.3 * math.sqrt(D)), ka, va, False)
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=0, atol=4e-3)
    mask = tc.placeholder((L, L), "bool", name="mask")
    q2 = tc.compute(q.shape, lambda *i: q[i] * tc.const(2.0, "float16"), name="q2")
    for args in ([q, k, v, mask, tc.nn.scaled_dot_product_attention(q, k, v, mask)],
                 [q, k, v, tc.nn.scaled_dot_product_attention(q2, k, v)],
                 [*(tc.placeholder((B, H, L, D), "float32", name=n) for n in "qkv")],
                 [*(tc.placeholder((B, H, L, 40), "float16", name=n) for n in "qkv")]):
        if len(args) == 3:
            args.append(tc.nn.scaled_dot_product_attention(*args))
        text = str(tc.lower(tc.auto_schedule(args, target="cuda-emu"), args,
                            target="cuda-emu"))
        # (its GEMMs may run on tensor cores: L = 40 in boundary tiles; not the single
        # pass's rescaled accumulators)
        assert "sdpa.scores" in text and "flash" not in text and "mma_scale_rows" not in text


@needs_cxx
@pytest.mark.slow
@pytest.mark.skipif(not _LONG, reason="TECOMP_LONG_TESTS=1")
@pytest.mark.parametrize("seed", range(6))
def test_the_one_pass_forward_on_random_shapes(seed):
    """The single pass's rescaling on random lengths, head dims (dv != d too), tilings and
    score magnitudes (up to hundreds: the running maximum moves by a lot between tiles)."""
    rng = np.random.default_rng(seed)
    Lq, Lk = (int(x) for x in rng.integers(1, 300, 2))
    D, Dv = (int(x) for x in rng.choice([16, 32, 64, 128], 2))
    dtype = ["float16", "bfloat16"][seed % 2]
    causal = bool(seed % 3)
    cfg = FlashConfig(*[(4, 64), (4, 32), (2, 32), (1, 64), (4, 16)][seed % 5])
    args = flash(1, 2, Lq, Lk, D, dtype, causal, Dv)
    mod = tc.build(schedule_flash_attention(args[3:], target="cuda-emu", config=cfg), args,
                   target="cuda-emu")
    big = float(rng.choice([1, 4, 30]))
    q = (rng.standard_normal((1, 2, Lq, D)) * big).astype(NP[dtype])
    k = rng.standard_normal((1, 2, Lk, D)).astype(NP[dtype])
    v = rng.standard_normal((1, 2, Lk, Dv)).astype(NP[dtype])
    out = np.full((1, 2, Lq, Dv), np.nan, NP[dtype])
    lse = np.full((1, 2, Lq), np.nan, np.float32)
    mod(q, k, v, out, lse, mode="reverse")
    want, want_lse = reference(q, k, v, causal)
    tol = 4e-3 if dtype == "float16" else 3e-2
    np.testing.assert_allclose(out.astype(np.float64), want, rtol=0, atol=tol)
    np.testing.assert_allclose(lse, want_lse, rtol=1e-6, atol=1e-5 * big)
