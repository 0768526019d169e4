"""FlashAttention's forward on tensor cores (tecomp.nn.flash_attention,
tecomp.strategy.cuda.attention) in the CUDA emulation against float64 references, the IR
without a seq x seq buffer, and nvcc's PTX / ptxas report for sm_80 and sm_90."""
from __future__ import annotations

import dataclasses
import math
import os
import re
import shutil

import numpy as np
import pytest

import tecomp as tc
from tecomp.ir import parse
from tecomp.runtime.nvcc import compile_ptx, find_nvcc
from tecomp.strategy.cuda import attention as flash_template
from tecomp.strategy.cuda.attention import (FlashConfig, atomic_warps, backward_accumulators,
                                            backward_shared_bytes,
                                            flash_backward_config, flash_config,
                                            schedule_flash_attention,
                                            schedule_flash_attention_backward, shared_bytes)
from tecomp.strategy.cuda.common import max_shared_bytes
from tecomp.strategy.cuda.tensorcore import WARP
from tecomp.target.cuda import block_shared_limit, blocks_per_sm_by_shared
from tecomp.testing.gpu_resources import ptxas_usage

from helpers import gpu_driver  # noqa: F401  (a fixture)

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


def reference(q, k, v, causal, dout=None, mask=None):
    """float64 attention: (output, logsumexp), and with ``dout`` (dq, dk, dv); ``mask``
    added to the scaled scores."""
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    scale = 1 / math.sqrt(q.shape[-1])
    s = q @ k.transpose(0, 1, 3, 2) * scale
    if mask is not None:
        s = s + mask.astype(np.float64)
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
    # the key and value tiles in rings of cp.async tiles (2 and 3), copied a step ahead
    (2, 1, 100, 100, 64, "bfloat16", True, FlashConfig(4, 16, stages=2)),
    (1, 1, 64, 100, 128, "float16", False, FlashConfig(2, 32, stages=3)),
    # causal with blocks past the first: key tiles before the block's first query, which
    # run in a loop of their own without the mask (head dim 64), then the diagonal ones;
    # with the rings too (each loop its own)
    (1, 2, 300, 300, 64, "float16", True, None),
    (1, 1, 300, 260, 64, "bfloat16", True, FlashConfig(4, 16, stages=2)),
    # p in each warp's registers (form="registers"): masks as data, no p tile
    (2, 2, 100, 100, 64, "bfloat16", True, FlashConfig(4, 16, form="registers")),
    (1, 2, 64, 100, 128, "float16", False, FlashConfig(4, 32, form="registers")),
    (1, 1, 130, 200, 64, "float16", True, FlashConfig(2, 32, form="registers")),
    (1, 2, 300, 260, 64, "float16", True, FlashConfig(4, 16, stages=2, form="registers")),
    (1, 1, 100, 100, 128, "bfloat16", True, FlashConfig(4, 32, form="registers")),
    # p and the rows' statistics in each warp's registers (form="fragments")
    (2, 2, 100, 100, 64, "bfloat16", True, FlashConfig(4, 16, form="fragments")),
    (1, 2, 64, 100, 128, "float16", False, FlashConfig(4, 32, form="fragments")),
    (1, 1, 130, 200, 64, "float16", True, FlashConfig(2, 32, form="fragments")),
    (1, 2, 300, 260, 64, "float16", True, FlashConfig(4, 16, stages=2, form="fragments")),
    (1, 1, 100, 100, 128, "bfloat16", True, FlashConfig(4, 32, form="fragments")),
    (1, 1, 70, 90, 64, "float16", False, FlashConfig(4, 16, stages=3, form="fragments")),
    # with whole=True, the key tiles before each block's first query in a loop of their
    # own that runs x without the mask, the others testing each 16 x 16 tile's corner
    # (blocks past the first; the rings; 64-row blocks of 32-key tiles; 32-row blocks of
    # 64-key tiles, which rows do not divide)
    (1, 2, 300, 260, 64, "float16", True, FlashConfig(4, 16, form="fragments", whole=True)),
    (1, 1, 300, 300, 64, "bfloat16", True, FlashConfig(4, 16, stages=2, form="fragments",
                                                       whole=True, ftz=True)),
    (1, 1, 130, 200, 64, "float16", True, FlashConfig(2, 32, form="fragments", whole=True)),
    (1, 1, 100, 120, 64, "float16", True, FlashConfig(1, 64, form="fragments", whole=True)),
    (1, 1, 270, 270, 128, "bfloat16", True, FlashConfig(4, 32, form="fragments", whole=True)),
    # (the register form's p, masked by data, without the mask likewise)
    (1, 2, 300, 260, 64, "float16", True, FlashConfig(4, 16, form="registers", whole=True)),
    # with ftz=True, the exps as ex2.approx.ftz (subnormal results 0)
    (1, 2, 64, 100, 128, "float16", False, FlashConfig(4, 32, form="fragments", ftz=True)),
    # with exp2=True, the exps in base 2 (x and m in base-2 units, the logsumexp converted
    # back per row): both dtypes, head dims 64 and 128, causal and not, with whole, ftz and
    # the ring
    (2, 2, 100, 100, 64, "bfloat16", True, FlashConfig(4, 16, form="fragments", exp2=True)),
    (1, 2, 64, 100, 128, "float16", False, FlashConfig(4, 32, form="fragments", exp2=True)),
    (1, 1, 70, 90, 64, "float16", False, FlashConfig(4, 16, form="fragments", ftz=True,
                                                     exp2=True)),
    (1, 2, 300, 260, 64, "float16", True, FlashConfig(4, 16, stages=2, form="fragments",
                                                      whole=True, ftz=True, exp2=True)),
    (1, 1, 270, 270, 128, "bfloat16", True, FlashConfig(4, 32, form="fragments", whole=True,
                                                        exp2=True)),
    (1, 1, 130, 200, 128, "float16", True, FlashConfig(4, 32, form="fragments", ftz=True,
                                                       exp2=True)),
    # with diagonal_test=False, the diagonal tiles run the masked intrinsic on every 16 x
    # 16 tile (no test of its corner): both forms, the ring, exp2, 32-key tiles, head dim
    # 128, lengths that are not multiples of the tiles
    (1, 2, 300, 260, 64, "float16", True, FlashConfig(4, 16, stages=2, form="fragments",
                                                      whole=True, ftz=True, exp2=True,
                                                      diagonal_test=False)),
    (1, 1, 130, 200, 64, "bfloat16", True, FlashConfig(2, 32, form="fragments", whole=True,
                                                       diagonal_test=False)),
    (1, 1, 270, 270, 128, "float16", True, FlashConfig(4, 32, form="fragments", whole=True,
                                                       diagonal_test=False)),
    (1, 2, 300, 260, 64, "float16", True, FlashConfig(4, 16, form="registers", whole=True,
                                                      diagonal_test=False)),
]


def _case_id(c) -> str:
    cfg = c[7]
    return "-".join(map(str, c[:7])) + ("" if cfg is None or cfg.form == "shared" else (
        f"-{cfg.form}-{cfg.stages}" + ("-whole" if cfg.whole else "")
        + ("-ftz" if cfg.ftz else "") + ("-exp2" if cfg.exp2 else "")
        + ("" if cfg.diagonal_test else "-untested")))


@needs_cxx
@pytest.mark.parametrize("case", CASES, ids=_case_id)
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


def test_a_config_of_numpy_ints_is_the_config_of_ints():
    """A FlashConfig whose fields are numpy integers (a sweep's values) schedules the
    kernels the same Python ints do (``np.int32`` warps were refused by the kernel's
    ``min_blocks_per_sm`` pragma, ``np.int64`` stages said "stages is 1 or 2 to 8")."""
    args = flash(2, 2, 100, 100, 64, "float16", True)
    text = [str(tc.lower(schedule_flash_attention(args[3:], target="cuda-emu", config=c),
                         args, target="cuda-emu"))
            for c in (FlashConfig(4, 16, stages=2, form="registers"),
                      FlashConfig(np.int32(4), np.int64(16), stages=np.int64(2),
                                  form="registers"))]
    assert text[0] == text[1]


@needs_cxx
def test_backward_config_of_16_row_warps_gives_the_forward_its_own():
    """tc.gradient's forward scheduled by schedule_flash_attention_backward with a
    config of 16-row warps (the backward's) takes flash_config's tiling: with the
    backward's, each block's statistics reached into the next block's rows (at batch x
    heads 2, a ScheduleError of an unrolled loop)."""
    B, H, L, D = 2, 1, 40, 64
    q, k, v, head = (tc.placeholder((B, H, L, D), "float16", name=n) for n in
                     ("q", "k", "v", "head"))
    out, _ = tc.nn.flash_attention(q, k, v, causal=True)
    grads = tc.gradient(out, [q, k, v], head=head)
    args = [q, k, v, head, *grads]
    s = schedule_flash_attention_backward(list(grads), target="cuda-emu",
                                          config=FlashConfig(4, 32, 16))
    mod = tc.build(s, args, target="cuda-emu")
    rng = np.random.default_rng(2)
    qa, ka, va, ha = (rng.standard_normal((B, H, L, D)).astype(np.float16) for _ in range(4))
    got = [np.full((B, H, L, D), np.nan, np.float16) for _ in range(3)]
    mod(qa, ka, va, ha, *got, mode="reverse")
    for g, want in zip(got, reference(qa, ka, va, True, ha)):
        np.testing.assert_allclose(g.astype(np.float64), want, rtol=0,
                                   atol=2e-3 * np.abs(want).max())


def test_the_register_form_keeps_p_in_registers():
    """``FlashConfig(form="registers")``: the scores in each warp's registers at the key
    loop, ``p`` computed there (``cuda.mma_flash_p_*``, the causal mask from positions)
    and converted into the A operand of ``p v``: no shared ``p`` tile and no ldmatrix of
    it; the scores' shared tile stays for the statistics."""
    args = flash(1, 2, 100, 100, 64, "float16", True)
    cfg = FlashConfig(4, 16, form="registers")
    text = str(tc.lower(schedule_flash_attention(args[3:], target="cuda-emu", config=cfg),
                        args, target="cuda-emu"))
    assert "allocate flash.scores: float32[1, 1, 32, 16] (mma.accumulator)" in text
    assert "allocate flash.p: float16[1, 1, 32, 16] (mma.matrix_a)" in text
    assert "allocate flash.scores.shared: float32[1, 1, 128, 16] (shared" in text
    assert "tensorize cuda.mma_flash_p_f32_causal_0.125 " in text
    assert "tensorize cuda.mma_acc_to_a_f16 " in text
    assert "flash.p.shared" not in text and "flash.p: float16[1, 1, 128" not in text
    old = str(tc.lower(schedule_flash_attention(args[3:], target="cuda-emu"), args,
                       target="cuda-emu"))
    assert "allocate flash.p: float16[1, 1, 128, 16] (shared" in old


def test_the_fragment_form_keeps_the_statistics_in_registers():
    """``FlashConfig(form="fragments")``: the rows' ``m`` and ``l`` are row tiles in each
    warp's registers across the key loop (filled before it, stored once after it), the
    step's row reductions and the accumulators' rescaling by the factors' row tile are
    tensor intrinsics (no ``cuda.mma_scale_rows_f32`` from global memory), ``p`` reads
    the rows' logsumexp from the row tiles: no scores tile, no statistics in shared or
    global memory inside the loop, three barriers a key tile (one with the ring)."""
    args = flash(1, 2, 100, 100, 64, "float16", True)
    text = str(tc.lower(schedule_flash_attention(args[3:], target="cuda-emu",
                                                 config=FlashConfig(4, 16, form="fragments")),
                        args, target="cuda-emu"))
    for tile in ("m", "l", "f"):
        assert f"allocate flash.stats.{tile}: float32[32, 16] (mma.accumulator)" in text
    assert "allocate flash.x: float32[1, 1, 32, 16] (mma.accumulator)" in text
    for intrin in ("mma_flash_x_f32_causal_0.125", "mma_row_max_f32", "mma_row_sum_f32",
                   "mma_rows_rcp_or_zero_f32", "mma_exp_diff_or_zero_f32", "mma_acc_to_a_f16",
                   "mma_store_rows_f32"):
        assert f"tensorize cuda.{intrin} " in text, intrin
    assert "in b: flash.stats.f[i.outer_2*16 + x0, x1]" in text    # (the rescaling)
    # p: the step's exp(x - m) (one exp an element) times 1 / l, at each 16-key tile
    assert "flash.p32[0, 0, i_9, j_9] = flash.stats.e[i_9, j_9]*flash.stats.r[i_9, j_9]" in text
    for gone in ("flash.scores.shared", "flash.lse_padded", "flash.stats.rescale",
                 "mma_scale_rows_f32", "mma_flash_p_f32"):
        assert gone not in text, gone
    loop = text[text.index("for (j.outer"):text.index("tensorize cuda.mma_store_rows_f32")]
    assert loop.count("syncthreads()") == 3 and "flash.stats.v" not in loop
    # the state stored once, after the loop: each row tile's m and l
    assert text.count("tensorize cuda.mma_store_rows_f32 ") == 4
    ring = str(tc.lower(schedule_flash_attention(
        args[3:], target="cuda-emu", config=FlashConfig(4, 16, stages=2, form="fragments")),
        args, target="cuda-emu"))
    for loop in re.findall(r"for \(j\.outer.*?tensorize cuda\.mma_f16f16f32 \(accumulate\)",
                           ring, re.S):
        assert loop.count("syncthreads()") == 1


def test_the_fragment_form_runs_the_whole_tiles_without_the_mask():
    """``FlashConfig(form="fragments", whole=True)``, causal: the key tiles before each
    block's first query in a loop of their own whose ``x`` is the intrinsic without the
    mask (no key positions copied there either); the others test each 16 x 16 tile's
    corner (its last key at most its first query: the unmasked intrinsic, else the
    causal one).  The default (``whole=None``) keeps one loop, the mask in every tile;
    the register form's ``p`` likewise with ``whole=True``; ``ftz=True`` takes the
    step's exps as ``ex2.approx.ftz``."""
    args = flash(1, 2, 300, 300, 64, "float16", True)

    def lowered(**fields):
        cfg = FlashConfig(4, 16, form="fragments", **fields)
        return str(tc.lower(schedule_flash_attention(args[3:], target="cuda-emu", config=cfg),
                            args, target="cuda-emu"))
    text = lowered(whole=True)
    loops = text.split("for (j.outer, ")[1:]
    assert len(loops) == 2
    assert loops[0].startswith("0, i.outer*8) {") and loops[1].startswith("i.outer*8, 8) {")
    whole, diagonal = (x[:x.index("tensorize cuda.mma_row_max_f32")] for x in loops)
    assert "tensorize cuda.mma_flash_x_f32_0.125 " in whole
    assert "flash.kpos" not in whole and "mma_flash_x_f32_causal" not in whole
    assert "if (j.outer <= i.outer*8 + i.outer_1*2 + i.outer_4 - 1) {\n" \
        "              tensorize cuda.mma_flash_x_f32_0.125 " in diagonal
    assert "} else {\n              tensorize cuda.mma_flash_x_f32_causal_0.125 " in diagonal
    one = lowered()
    assert one.count("for (j.outer, ") == 1 and "mma_flash_x_f32_0.125" not in one
    assert "exp_diff_or_zero_ftz" not in one
    # (the register form: its p intrinsic likewise)
    regs = str(tc.lower(schedule_flash_attention(args[3:], target="cuda-emu", config=FlashConfig(
        4, 16, form="registers", whole=True)), args, target="cuda-emu")).split("for (j.outer, ")
    assert len(regs) == 3 and "mma_flash_p_f32_causal" not in regs[1]
    assert "tensorize cuda.mma_flash_p_f32_0.125 " in regs[1] and "flash.kpos" not in regs[1]
    assert "tensorize cuda.mma_flash_p_f32_causal_0.125 " in regs[2]
    ftz = lowered(ftz=True)
    for intrin in ("mma_exp_diff_or_zero_ftz_f32", "mma_rows_exp_diff_or_zero_ftz_f32"):
        assert f"tensorize cuda.{intrin} " in ftz
    assert "exp_diff_or_zero_f32" not in ftz


@pytest.mark.parametrize("form, intrin", [("fragments", "x"), ("registers", "p")])
def test_the_diagonal_tiles_without_their_test(form, intrin):
    """``FlashConfig(whole=True, diagonal_test=False)``, causal: the whole tiles' loop is
    the one of ``diagonal_test=True`` (the intrinsic without the mask), the diagonal
    tiles' loop runs the masked intrinsic on every 16 x 16 tile: no test of the tile's
    corner, no branch, no unmasked intrinsic there; the rest of the kernel the same."""
    args = flash(1, 2, 300, 300, 64, "float16", True)

    def loops(**fields):
        cfg = FlashConfig(4, 16, form=form, whole=True, **fields)
        text = str(tc.lower(schedule_flash_attention(args[3:], target="cuda-emu", config=cfg),
                            args, target="cuda-emu"))
        return text.split("for (j.outer, ")
    tested, untested = loops(), loops(diagonal_test=False)
    assert len(tested) == len(untested) == 3
    assert tested[:2] == untested[:2]     # (the kernel up to the diagonal loop, the whole loop)
    masked, unmasked = (f"tensorize cuda.mma_flash_{intrin}_f32{c}_0.125 " for c in
                        ("_causal", ""))
    assert unmasked in tested[1] and masked not in tested[1]
    assert "if (j.outer <= i.outer*8 + " in tested[2] and unmasked in tested[2]
    assert masked in untested[2] and unmasked not in untested[2]
    assert "if (j.outer <= " not in untested[2]
    # (the same but for the if: its else branch where the if was)
    assert untested[2].count(masked) == tested[2].count(masked)


@needs_cxx
def test_a_fragment_step_without_its_factor_is_caught(monkeypatch):
    """The fragment step's accumulator factor is ``l_old exp(m_old - m_new) / l_new``:
    left undivided (the last group's multiply by ``1 / l_new`` dropped), the output
    differs from float64's (the emulation test can fail)."""
    step = flash_template.FRAGMENT_STEP["step"]
    bad = dict(flash_template.FRAGMENT_STEP, step=step[:-1] + ((False, step[-1][1][:1]),))
    monkeypatch.setattr(flash_template, "FRAGMENT_STEP", bad)
    B, H, L, D = 1, 1, 40, 64
    args = flash(B, H, L, L, D, "float16", False)
    mod = tc.build(schedule_flash_attention(args[3:], target="cuda-emu",
                                            config=FlashConfig(2, 16, form="fragments")),
                   args, target="cuda-emu")
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((B, H, L, D)).astype(np.float16) for _ in range(3))
    out = np.zeros((B, H, L, D), np.float16)
    mod(q, k, v, out, np.zeros((B, H, L), np.float32), mode="serial")
    assert np.abs(out.astype(np.float64) - reference(q, k, v, False)[0]).max() > 0.05


@needs_cxx
@pytest.mark.parametrize("causal,form,exp2", [
    (False, "registers", False), (True, "registers", False), (False, "fragments", False),
    (True, "fragments", False), (False, "fragments", True), (True, "fragments", True)])
def test_the_register_form_with_a_padding_mask(causal, form, exp2):
    """A padding mask (batch, 1, 1, Lk) read as the keys' vector of the register form's
    ``p`` (``-inf`` keys among finite ones, per batch; with ``form="fragments"``, of the
    statistics' ``x`` too; with ``exp2``, its values in base-2 units as ``x``), against
    float64."""
    B, H, L, D = 2, 2, 70, 64
    q, k, v = (tc.placeholder((B, H, L, D), "float16", name=n) for n in "qkv")
    mask = tc.placeholder((B, 1, 1, L), "float16", name="mask")
    out, lse = tc.nn.flash_attention(q, k, v, causal=causal, mask=mask)
    s = schedule_flash_attention([out, lse], target="cuda-emu",
                                 config=FlashConfig(4, 16, form=form, exp2=exp2))
    assert "flash.kbias: float32[1, 16] (shared)" in str(
        tc.lower(s, [q, k, v, mask, out, lse], target="cuda-emu"))
    mod = tc.build(s, [q, k, v, mask, out, lse], target="cuda-emu")
    rng = np.random.default_rng(5)
    qa, ka, va = (rng.standard_normal((B, H, L, D)).astype(np.float16) for _ in range(3))
    m = rng.standard_normal((B, 1, 1, L)).astype(np.float16)
    m[0, ..., 3:9] = m[1, ..., 40:] = -np.inf
    o = np.full((B, H, L, D), np.nan, np.float16)
    ls = np.full((B, H, L), np.nan, np.float32)
    mod(qa, ka, va, m, o, ls, mode="reverse")
    want, want_lse = reference(qa, ka, va, causal, mask=m)
    np.testing.assert_allclose(o.astype(np.float64), want, rtol=0, atol=4e-3)
    np.testing.assert_allclose(ls, want_lse, rtol=0, atol=1e-5)


@needs_cxx
def test_a_fragment_at_the_key_loop_holds_its_warps_rows():
    """The scores' fragment computed at the output accumulator's key loop (inside the
    kernel's warp loop, ``threadIdx.y``), where the register form's ``p`` stages can read
    it, while the shared scores tile that stores it binds ``threadIdx.y`` again: its
    region is the warp's 32 rows (that loop is the enclosing one's thread, not relaxed
    over the block's 128 rows), and the kernel stays right ("reverse" thread order)."""
    B, H, L, D = 1, 2, 100, 64
    args = flash(B, H, L, L, D, "float16", True)
    s = schedule_flash_attention(args[3:], target="cuda-emu")
    st = {x.op.name: x for x in s.stages}
    pf = st["flash.pv.mma.accumulator"]
    ko = next(iv for iv in pf.leaf_iter_vars if iv.kind == "reduce")
    st["flash.scores.mma.accumulator"].compute_at(pf, ko)
    text = str(tc.lower(s, args, target="cuda-emu"))
    assert "allocate flash.scores.mma.accumulator: float32[1, 1, 32, 16] (mma.accumulator)" \
        in text
    mod = tc.build(s, args, target="cuda-emu")
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((B, H, L, D)).astype(np.float16) for _ in range(3))
    out = np.full((B, H, L, D), np.nan, np.float16)
    lse = np.full((B, H, L), np.nan, np.float32)
    mod(q, k, v, out, lse, mode="reverse")
    want, want_lse = reference(q, k, v, True)
    np.testing.assert_allclose(out.astype(np.float64), want, rtol=0, atol=4e-3)
    np.testing.assert_allclose(lse, want_lse, rtol=0, atol=1e-5)


@needs_cxx
@pytest.mark.parametrize("cfg", [None, FlashConfig(4, 16, form="fragments"),
                                 FlashConfig(4, 16, form="fragments", ftz=True, exp2=True)],
                         ids=["shared", "fragments", "fragments-ftz-exp2"])
def test_a_nan_key_reaches_the_rows_that_see_it(cfg):
    """A NaN in a key makes the output and the logsumexp of every row that attends to it
    NaN (as softmax's), the rows before it (causal) finite: the online softmax's
    reducer keeps the NaN in the running maximum (a select of the smaller instead of
    the NaN-propagating min makes l NaN, which the guards then read as "no key": zeros).
    The fragment form's step: its exps of a NaN maximum NaN (their guard ``m != -inf``,
    not ``m > -inf``, which gave 0 and the row zeros), its logsumexp NaN where ``l`` is
    (``l != 0``, not ``l > 0``, which gave ``-inf``)."""
    L, key = 40, 5
    args = flash(1, 1, L, L, 64, "float16", True)
    mod = tc.build(schedule_flash_attention(args[3:], target="cuda-emu", config=cfg), args,
                   target="cuda-emu")
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((1, 1, L, 64)).astype(np.float16) for _ in range(3))
    k[0, 0, key, 3] = np.nan
    out = np.zeros((1, 1, L, 64), np.float16)
    lse = np.zeros((1, 1, L), np.float32)
    mod(q, k, v, out, lse)
    assert np.isnan(lse[0, 0, key:]).all() and np.isfinite(lse[0, 0, :key]).all()
    assert np.isnan(out[0, 0, key:]).any(-1).all() and np.isfinite(out[0, 0, :key]).all()


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
    # the statistics' and p's exponentials (and the rescaling's): fast_exp (__expf)
    assert text.count("fast_exp(") >= 3 and " exp(" not in text
    # one pass over the keys (FlashAttention-2's): the statistics updated at each tile
    # and the accumulators rescaled; causal: the key loop stops after the tile of the
    # block's last query (128 rows; 16 keys a tile at head dim 64: 8 tiles a block), the
    # tiles before the block's first query in a loop of their own without the mask
    cfg = flash_config(64, 64, "float16", block_shared_limit("sm_80"))
    per = cfg.block_q // cfg.block_kv
    whole = re.findall(rf"for \(j\.outer\w*, 0, i\.outer\w*\*{per}\)", text)
    diagonal = re.findall(rf"for \(j\.outer\w*, i\.outer\w*\*{per}, {per}\)", text)
    assert len(whole) == len(diagonal) == 1, per
    at = text.index(whole[0]), text.index(diagonal[0])
    mask = re.compile(r"int64\(j\.outer\)\*16i64 \+ [^<]* <= ")
    assert not mask.search(text, at[0], at[1]) and mask.search(text, at[1]), text
    assert "tensorize cuda.mma_scale_rows_f32 " in text


@pytest.mark.parametrize("stages", [2, 3])
def test_the_key_and_value_tiles_in_a_ring(stages):
    """``FlashConfig.stages``: the key and value tiles copied together at the top of the
    step, with cp.async, ``stages - 1`` steps ahead; the step's other barriers (the
    scores', p's) wait for the copies but those of the steps ahead, which stay in flight
    through the step (a wait for all of them would stall each step on the next tile)."""
    args = flash(1, 2, 256, 256, 64, "float16", False)
    tgt = "cuda -arch=sm_90"
    cfg = FlashConfig(4, 16, stages=stages)
    src = tc.build(schedule_flash_attention(args[3:], target=tgt, config=cfg), args,
                   target=tgt).get_source()
    loop = src[src.index("for (int j_outer"):]
    loop = loop[:loop.rindex("tc_cp_async_wait();")]   # (the epilogue's)
    # the top barrier waits for the step's tiles, the step's copies are one group
    assert len(re.findall(r"tc_cp_async16\(&flash_[kv]\[", loop)) == 2
    top = "tc_cp_async_wait();" if stages == 2 else f"tc_cp_async_wait_group{stages - 2}();"
    barriers = re.findall(r"(tc_cp_async_wait\w*\(\);)\s*__syncthreads\(\);",
                          src[src.index("for (int j_outer"):])
    assert barriers[0] == top and len(barriers) == 6, barriers
    assert set(barriers[1:-1]) == {f"tc_cp_async_wait_group{stages - 1}();"}, barriers
    assert loop.count("tc_cp_async_commit();") == 1
    # shared_bytes is the kernel's
    assert f"{shared_bytes(cfg, 64, 64)} bytes of shared memory" in src
    assert shared_bytes(cfg, 64, 64) - shared_bytes(FlashConfig(4, 16), 64, 64) == (
        (stages - 1) * 2 * 16 * (64 + 8) * 2)


def gemms(text):
    """The accumulators of the tensorized mma loops in a lowered function, in order: one
    per ``L x L x d`` GEMM of the kernels (each a loop of ``tensorize cuda.mma_*f32
    (accumulate)`` whose output fragment names the stage)."""
    return re.findall(r"tensorize cuda\.mma_(?:f16f16|bf16bf16)f32 \(accumulate\) \{\s*"
                      r"// out c: ([\w.]+)\.mma\.accumulator", text)


@pytest.mark.parametrize("dq", ["atomic", "recompute"])
def test_the_gemms_of_the_forward_and_the_backward(dq, dtype="bfloat16", causal=True):
    """The forward computes the scores once (FlashAttention-2's two GEMMs: ``s = q k^T``
    and ``p v``, one pass over the keys); the backward five (``dq="atomic"``,
    FlashAttention-2's) or seven (``"recompute"``): ``dk`` and ``dv``'s kernel computes
    the scores and ``dout v^T`` once per tile and adds into both accumulators (one
    stacked reduction: two GEMMs in one loop); ``ds k`` of the tile is added into a
    float32 ``dq`` from there with atomics, or ``dq``'s own kernel recomputes the scores
    and ``dout v^T`` (no atomics).  A change of either count is a change of the kernels:
    update the docstrings and docs/tutorial/gpu.md."""
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
    cfg = dataclasses.replace(flash_backward_config(64, 64, dtype, max_shared_bytes(tgt)),
                              dq=dq)
    text = str(tc.lower(schedule_flash_attention_backward(list(grads), target=tgt, config=cfg),
                        bargs, target=tgt))
    if dq == "atomic":   # (dq_acc: ds k of the step, in the loop over the query tiles)
        assert gemms(text) == ["flash_grad." + n for n in (
            "scores_k", "dpt", "dq_acc", "dkv_acc")]
        assert text.count("tensorize cuda.mma_atomic_add_f32 ") == 1
        assert "scores_q" not in text and "flash_grad.ds[" not in text
    else:
        assert gemms(text) == ["flash_grad." + n for n in (
            "scores_q", "dp", "dq_acc", "scores_k", "dpt", "dkv_acc")]
        assert "atomic" not in text
    assert str(parse(text)) == text
    # dk's and dv's accumulators: one fragment of both, the stacking loop inside the
    # single loop over the query tiles (causal: from the block's first key on)
    acc = re.search(r"allocate flash_grad\.dkv_acc\.mma\.accumulator: float32\[1, 1, 2, ", text)
    assert acc, text
    loop = re.search(r"for \(c\.outer\w*, x\.outer\w*\*\d, \d+ - x\.outer\w*\*\d\) \{", text)
    assert loop and loop.start() > acc.start()
    body = text[loop.start():]
    assert len(re.findall(r"for \(c\.outer\w*, x\.outer", body)) == 1
    assert re.search(r"for \(w, 0, 2\) \{\s*for \(c\.inner\.outer\w*, 0, \d\)", body), body


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
        if arch == "sm_90" and d == 128:
            # the output through a 16-bit tile, the scores' rows padded by a float: two
            # blocks per SM of 228 KiB (each block 1 KiB more), as the registers allow
            assert 2 * (shared_bytes(cfg, d, d) + 1024) <= 228 * 1024
        cfg = flash_backward_config(d, d, "float16", limit)
        assert backward_shared_bytes(cfg, d, d) <= limit
        assert backward_accumulators(cfg, d, d) <= 160


def _grad_data(shapes, dtype, seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(NP[dtype]) for shape in shapes]


@needs_cxx
def test_tc_gradient_of_flash_attention_is_the_flash_backward():
    """tc.gradient goes straight to q, k and v through flash_attention_backward (the
    forward's kernels recompute the output and the logsumexp; no seq x seq buffer), a
    padding mask (keys left out with -inf) in the forward and the backward."""
    B, H, L, D = 1, 2, 40, 64
    q, k, v, head = (tc.placeholder((B, H, L, D), "float16", name=n) for n in
                     ("q", "k", "v", "head"))
    m = tc.placeholder((B, 1, 1, L), "float16", name="m")
    out, _ = tc.nn.flash_attention(q, k, v, causal=True, mask=m)
    grads = tc.gradient(out, [q, k, v], head=head)
    assert [g.op.input_tensors[0].name for g in grads] == [
        "flash_grad.dq", "flash_grad.dkv.v0", "flash_grad.dkv.v1"]
    args = [q, k, v, m, head, *grads]
    s = tc.auto_schedule(args, target="cuda-emu")    # the GPU rules take the template
    text = str(tc.lower(s, args, target="cuda-emu"))
    for name, dims in re.findall(r"allocate ([\w.]+): \w+\[([\d, ]+)\]", text):
        dims = [int(x) for x in dims.split(",")]
        assert math.prod(dims) <= 128 * 128, (name, dims)
    mod = tc.build(s, args, target="cuda-emu")
    qa, ka, va, ha, ma = _grad_data([(B, H, L, D)] * 4 + [(B, 1, 1, L)], "float16", 1)
    ma[..., 3::4] = -np.inf
    got = [np.full((B, H, L, D), np.nan, np.float16) for _ in range(3)]
    mod(qa, ka, va, ma, ha, *got, mode="reverse")
    for g, want in zip(got, reference(qa, ka, va, True, ha, ma)):
        np.testing.assert_allclose(g.astype(np.float64), want, rtol=0,
                                   atol=2e-3 * np.abs(want).max())


@needs_cxx
@pytest.mark.parametrize("causal,dtype,wrong", [(True, "float16", False),
                                                (False, "bfloat16", False),
                                                (True, "float16", True)])
def test_tc_gradient_with_the_forward_in_base_2(monkeypatch, causal, dtype, wrong):
    """tc.gradient's backward scheduled with ``FlashConfig(form="fragments", exp2=True)``:
    the forward it recomputes takes the config (its rows' maximum in base-2 units), and
    the logsumexp the backward's kernels read is converted back to natural-log units
    (``m ln(2) + log(l)``): dq, dk and dv match float64.  With the conversion wrong
    (``wrong``: ``LN2`` taken as ``log2(e)``) they do not (the test can fail)."""
    if wrong:
        monkeypatch.setattr(flash_template, "LN2", flash_template.LOG2E)
    B, H, L, D = 1, 2, 70, 64
    q, k, v, head = (tc.placeholder((B, H, L, D), dtype, name=n) for n in
                     ("q", "k", "v", "head"))
    out, _ = tc.nn.flash_attention(q, k, v, causal=causal)
    grads = tc.gradient(out, [q, k, v], head=head)
    args = [q, k, v, head, *grads]
    s = schedule_flash_attention_backward(grads, target="cuda-emu", config=FlashConfig(
        4, 16, form="fragments", exp2=True))
    text = str(tc.lower(s, args, target="cuda-emu"))
    assert "tensorize cuda.mma_exp2_diff_or_zero_f32 " in text
    assert "tensorize cuda.mma_exp_diff_or_zero_f32 " not in text
    mod = tc.build(s, args, target="cuda-emu")
    qa, ka, va, ha = _grad_data([(B, H, L, D)] * 4, dtype, 2)
    got = [np.full((B, H, L, D), np.nan, NP[dtype]) for _ in range(3)]
    mod(qa, ka, va, ha, *got, mode="reverse" if causal else "serial")
    tol = 2e-3 if dtype == "float16" else 2e-2
    errs = [np.abs(g.astype(np.float64) - want).max() / np.abs(want).max()
            for g, want in zip(got, reference(qa, ka, va, causal, ha))]
    if wrong:
        assert max(errs) > 0.1, errs
    else:
        assert max(errs) < tol, errs


@needs_cxx
def test_the_base_2_logsumexp_converted_wrong_is_caught(monkeypatch):
    """The forward with ``exp2=True`` stores the rows' logsumexp in natural-log units:
    with ``LN2`` taken as 1 (``m`` left in base-2 units) it differs from float64's by far
    more than the emulation test's tolerance, while the output (``p = e / l``, units
    that cancel) stays right."""
    B, H, Lq, Lk, D = 1, 1, 40, 50, 64
    args = flash(B, H, Lq, Lk, D, "float16", False)
    rng = np.random.default_rng(4)
    q, k, v = (rng.standard_normal(shape).astype(np.float16) for shape in
               ((B, H, Lq, D), (B, H, Lk, D), (B, H, Lk, D)))
    want, want_lse = reference(q, k, v, False)
    errs = []
    for ln2 in (flash_template.LN2, 1.0):
        monkeypatch.setattr(flash_template, "LN2", ln2)
        mod = tc.build(schedule_flash_attention(args[3:], target="cuda-emu", config=FlashConfig(
            4, 16, form="fragments", exp2=True)), args, target="cuda-emu")
        out = np.full((B, H, Lq, D), np.nan, np.float16)
        lse = np.full((B, H, Lq), np.nan, np.float32)
        mod(q, k, v, out, lse, mode="serial")
        np.testing.assert_allclose(out.astype(np.float64), want, rtol=0, atol=4e-3)
        errs.append(np.abs(lse - want_lse).max())
    assert errs[0] < 1e-5 and errs[1] > 1e-2, errs


def test_the_gradient_of_the_mask_on_the_cpu():
    """tc.gradient of flash_attention's mask (a (1, Lk) one: summed over batches, heads
    and queries) is computed, on the CPU (the CUDA template refuses it: must_fail)."""
    B, H, L, D = 2, 1, 19, 16
    q, k, v, head = (tc.placeholder((B, H, L, D), "float16", name=n) for n in
                     ("q", "k", "v", "head"))
    m = tc.placeholder((1, L), "float16", name="m")
    out, _ = tc.nn.flash_attention(q, k, v, causal=True, mask=m)
    dm, = tc.gradient(out, [m], head=head)
    args = [q, k, v, m, head, dm]
    mod = tc.build(tc.auto_schedule(args, target="llvm"), args, target="llvm")
    qa, ka, va, ha, ma = _grad_data([(B, H, L, D)] * 4 + [(1, L)], "float16", 6)
    got = np.full((1, L), np.nan, np.float16)
    mod(qa, ka, va, ma, ha, got)
    q64, k64, v64, h64 = (x.astype(np.float64) for x in (qa, ka, va, ha))
    s = q64 @ k64.transpose(0, 1, 3, 2) / math.sqrt(D) + ma.astype(np.float64)
    s = np.where(np.tril(np.ones((L, L), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    dp = h64 @ v64.transpose(0, 1, 3, 2)
    want = (p * (dp - (dp * p).sum(-1, keepdims=True))).sum((0, 1, 2))[None]
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=0,
                               atol=4e-3 * np.abs(want).max())


@needs_cxx
@pytest.mark.parametrize("dq", [pytest.param("recompute", marks=_SLOW), "atomic"])
def test_flash_attention_backward_bfloat16_head_dim_128_causal_ragged(dq):
    """Four blocks of 64 rows and tiles of 32 columns: the causal tiles skipped (dq's
    keys after its rows, dk's and dv's queries before theirs: one kernel for both) are
    the empty ones.  ``dq="atomic"``: dq added from the dk/dv kernel's blocks with
    atomicAdd, run with the blocks in launch order and last first (the emulation's
    "last_block_first"): another order of the additions, both within the tolerance."""
    B, H, Lq, Lk, D = 1, 1, 200, 136, 128
    P = lambda shape, n, dt="bfloat16": tc.placeholder(shape, dt, name=n)  # noqa: E731
    q, o, do = (P((B, H, Lq, D), n) for n in ("q", "o", "do"))
    k, v = P((B, H, Lk, D), "k"), P((B, H, Lk, D), "v")
    lse = P((B, H, Lq), "lse", "float32")
    grads = tc.nn.flash_attention_backward(q, k, v, o, do, lse, causal=True)
    s = schedule_flash_attention_backward(list(grads), target="cuda-emu",
                                          config=FlashConfig(2, 32, dq=dq))
    text = str(tc.lower(s, [q, k, v, o, do, lse, *grads], target="cuda-emu"))
    # dq: the key tiles up to the block's last query; dk, dv: the query tiles from the
    # block's first key (8 tiles of 32 in 256), in one loop
    assert len(re.findall(r"for \(c\.outer\w*, 0, x\.outer\w*\*2 \+ 2\)", text)) == (
        dq == "recompute")
    assert len(re.findall(r"for \(c\.outer\w*, x\.outer(\w*)\*2, 8 - x\.outer\1\*2\)",
                          text)) == 1
    # the skipping is no primitive: the trace is not one to replay (it would skip nothing)
    assert not s.trace.replayable
    mod = tc.build(s, [q, k, v, o, do, lse, *grads], target="cuda-emu")
    qa, ka, va, da = _grad_data([(B, H, Lq, D), (B, H, Lk, D), (B, H, Lk, D), (B, H, Lq, D)],
                                "bfloat16", 2)
    oa, la = reference(qa, ka, va, True)
    wants = reference(qa, ka, va, True, da)
    for mode in ("serial", "last_block_first") if dq == "atomic" else ("serial",):
        got = [np.full(x.shape, np.nan, NP["bfloat16"]) for x in (qa, ka, va)]
        mod(qa, ka, va, oa.astype(NP["bfloat16"]), da, la.astype(np.float32), *got, mode=mode)
        for g, want in zip(got, wants):
            np.testing.assert_allclose(g.astype(np.float64), want, rtol=0,
                                       atol=2e-2 * np.abs(want).max())


def test_flash_attention_backward_head_dims_that_differ():
    """k's head dim 32, v's 48: the stacked dk/dv kernel is 48 wide (q's columns past 32
    are zeros), dk narrowed from it by a small kernel of its own (the numbers: the slow
    test_the_backward_on_random_shapes, whose head dims differ too)."""
    B, H, Lq, Lk, D, Dv = 1, 2, 37, 21, 32, 48
    P = lambda shape, n, dt="float16": tc.placeholder(shape, dt, name=n)  # noqa: E731
    q, k, v = P((B, H, Lq, D), "q"), P((B, H, Lk, D), "k"), P((B, H, Lk, Dv), "v")
    o, do = P((B, H, Lq, Dv), "o"), P((B, H, Lq, Dv), "do")
    lse = P((B, H, Lq), "lse", "float32")
    grads = tc.nn.flash_attention_backward(q, k, v, o, do, lse)
    assert [g.name for g in grads] == ["flash_grad.dq", "flash_grad.dk", "flash_grad.dkv.v1"]
    s = schedule_flash_attention_backward(list(grads), target="cuda-emu",
                                          config=FlashConfig(2, 32, 16))
    text = str(tc.lower(s, [q, k, v, o, do, lse, *grads], target="cuda-emu"))
    assert re.search(r"allocate flash_grad\.dkv_acc\.mma\.accumulator: float32\[1, 1, 2, 16, "
                     r"48\]", text), text
    assert re.search(r"allocate flash_grad\.dkv\.v0: float16\[1, 2, 21, 48\]", text), text
    assert re.search(r"flash_grad\.dk\[.*\] = flash_grad\.dkv\.v0\[", text), text


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
@pytest.mark.parametrize("arch,d,causal,dtype", [
    ("sm_90a", 64, True, "float16"), ("sm_80", 64, True, "float16")] + [
    pytest.param(a, d, c, dt, marks=_SLOW) for a in ("sm_90a", "sm_80") for d in (64, 128)
    for c in (False, True) for dt in ("float16", "bfloat16")
    if (d, c, dt) != (64, True, "float16")])
def test_the_default_forward_kernels_spill_nothing(arch, d, causal, dtype):
    """The default forward of each head dim (head dim 64 causal: the whole tiles' loop and
    the diagonal one, whose epilogue's values ptxas spilled on sm_90a at 168 registers):
    no spill, and the kernel's ``__launch_bounds__`` asks for the blocks its shared
    memory lets an SM hold (``pragma min_blocks_per_sm``), which its registers allow."""
    args = flash(4, 16, 2048, 2048, d, dtype, causal)
    tgt = f"cuda -arch={arch}"
    src = tc.build(schedule_flash_attention(args[3:], target=tgt), args,
                   target=tgt).get_source()
    blocks = blocks_per_sm_by_shared(arch, shared_bytes(flash_config(
        d, d, dtype, block_shared_limit(arch)), d, d, dtype))
    assert f"__launch_bounds__(128, {blocks}) main_kernel0(" in src
    assert blocks == {("sm_90a", 64): 3, ("sm_90a", 128): 2, ("sm_80", 64): 2,
                      ("sm_80", 128): 1}[arch, d]
    for kernel, use in ptxas_usage(src, arch).items():
        assert use["spill_stores"] == use["spill_loads"] == use["stack"] == 0, (kernel, use)
        assert use["registers"] * 128 * blocks <= 64 * 1024, (kernel, use)


@needs_nvcc
@pytest.mark.parametrize("d,causal,form", [(64, True, "registers"), (128, False, "registers"),
                                           (64, True, "fragments"), (128, True, "fragments"),
                                           pytest.param(64, False, "fragments", marks=_SLOW),
                                           pytest.param(128, False, "fragments", marks=_SLOW)])
def test_the_register_form_spills_nothing(d, causal, form):
    """``FlashConfig(form="registers")`` (and ``"fragments"``) at the issue's shapes on
    sm_90a, the default tiling of each head dim: no spill."""
    args = flash(4, 16, 2048, 2048, d, "float16", causal)
    tgt = "cuda -arch=sm_90a"
    cfg = dataclasses.replace(flash_config(d, d, "float16", block_shared_limit("sm_90a")),
                              form=form)
    src = tc.build(schedule_flash_attention(args[3:], target=tgt, config=cfg), args,
                   target=tgt).get_source()
    for kernel, use in ptxas_usage(src, "sm_90a").items():
        assert use["spill_stores"] == use["spill_loads"] == use["stack"] == 0, (kernel, use)


@needs_nvcc
@pytest.mark.parametrize("d", [64, pytest.param(128, marks=_SLOW)])
def test_the_whole_tiles_and_ftz_exps_of_the_fragment_form_spill_nothing(d):
    """``FlashConfig(form="fragments", whole=True, ftz=True)``, causal, at the issue's
    shapes on sm_90a: no spill (head dim 128 at up to 255 registers); the PTX has
    ``ex2.approx.ftz.f32`` for every exp of the step and no ``ex2.approx.f32`` (an
    ``__expf``)."""
    args = flash(4, 16, 2048, 2048, d, "float16", True)
    tgt = "cuda -arch=sm_90a"
    cfg = dataclasses.replace(flash_config(d, d, "float16", block_shared_limit("sm_90a")),
                              form="fragments", whole=True, ftz=True)
    src = tc.build(schedule_flash_attention(args[3:], target=tgt, config=cfg), args,
                   target=tgt).get_source()
    assert "ex2.approx.ftz.f32" in src and "__expf" not in src.split("main_kernel0(")[1]
    ptx = compile_ptx(src, "sm_90a")
    assert "ex2.approx.ftz.f32" in ptx and "ex2.approx.f32" not in ptx
    for kernel, use in ptxas_usage(src, "sm_90a").items():
        assert use["spill_stores"] == use["spill_loads"] == use["stack"] == 0, (kernel, use)


@needs_nvcc
@pytest.mark.parametrize("arch,d,masked,dq", [pytest.param(a, d, m, dq, marks=_SLOW)
                                              for a in ("sm_80", "sm_90") for d in (64, 128)
                                              for m in (False, True)
                                              for dq in ("atomic", "recompute")])
def test_ptx_of_the_backward_has_the_tensor_cores_and_nothing_spills(arch, d, masked, dq):
    """The issue's shapes: no spill at the default tiling (head dim 128 holds the most:
    two accumulators of 16-row warps, and with dq "atomic" its tile), with a padding mask
    too.  "recompute": per step of the loops the dk/dv kernel issues 4/3 of dq's mma
    instructions (four GEMMs against three), the PTX's loops unrolled; "atomic": one
    kernel issues them all (five GEMMs a step: 5/4 of the recomputing dk/dv kernel's)
    and adds into dq with atom.global.add.f32 (atomicAdd)."""
    B, H, L = 4, 16, 2048
    P = lambda shape, n, dt="float16": tc.placeholder(shape, dt, name=n)  # noqa: E731
    q, k, v, o, do = (P((B, H, L, d), n) for n in ("q", "k", "v", "o", "do"))
    lse = P((B, H, L), "lse", "float32")
    m = [P((B, 1, 1, L), "m")] if masked else []
    grads = tc.nn.flash_attention_backward(q, k, v, o, do, lse, causal=True,
                                           mask=m[0] if m else None)
    tgt = f"cuda -arch={arch}"
    cfg = dataclasses.replace(flash_backward_config(d, d, "float16", max_shared_bytes(tgt)),
                              dq=dq)
    src = tc.build(schedule_flash_attention_backward(list(grads), target=tgt, config=cfg),
                   [q, k, v, o, do, lse, *m, *grads], target=tgt).get_source()
    ptx = compile_ptx(src, arch)
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in ptx
    assert "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in ptx
    bodies = ptx.split(".entry ")[1:]
    mmas = sorted(body.count("mma.sync.aligned") for body in bodies)
    if dq == "atomic":   # delta, dq's zeroing and cast, the one kernel of the five GEMMs
        assert mmas[:3] == [0, 0, 0] and mmas[3] > 0, mmas
        fused = next(b for b in bodies if "mma.sync.aligned" in b)
        assert "atom.global.add.f32" in fused
        # (per step the block_kv x d tile of dq over the warps' lanes, loops unrolled)
        assert fused.count("atom.global.add.f32") == cfg.block_kv * d // (cfg.warps * WARP)
    else:
        assert mmas[0] == 0 and mmas[2] * 3 == mmas[1] * 4, mmas   # delta, dq, dk and dv
        assert "atom.global" not in ptx
    for kernel, use in ptxas_usage(src, arch).items():
        assert use["spill_stores"] == use["spill_loads"] == use["stack"] == 0, (kernel, use)


@needs_cxx
def test_scaled_dot_product_attention_on_cuda_is_flash_attention():
    """The GPU rules compute scaled_dot_product_attention as flash_attention where it is
    one (float16/bfloat16, no mask or a padding mask, head dims multiples of 16 up to
    128), with its scale; the general stages otherwise (a bool mask, a mask that varies
    over the queries, float32, head dim 40)."""
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
    additive = tc.placeholder((L, L), "float16", name="mask")   # varies over the queries
    for args in ([q, k, v, mask, tc.nn.scaled_dot_product_attention(q, k, v, mask)],
                 [q, k, v, additive, tc.nn.scaled_dot_product_attention(q, k, v, additive)],
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
@needs_cxx
@pytest.mark.parametrize("cfg", [FlashConfig(4, 16, form="registers"),
                                 FlashConfig(4, 16, form="fragments", ftz=True, exp2=True)],
                         ids=["registers", "fragments-ftz-exp2"])
def test_sdpa_as_flash_in_the_register_and_fragment_forms(cfg):
    """``schedule_sdpa_as_flash`` with a config of the register or fragment form (their
    masks as data read the attention's attributes from the output's stage, which the
    substitution gave flash_attention's; before, a KeyError): a padding mask with
    ``-inf`` keys, its scale, against float64."""
    B, H, L, D = 1, 2, 40, 64
    q, k, v = (tc.placeholder((B, H, L, D), "float16", name=n) for n in "qkv")
    m = tc.placeholder((B, 1, 1, L), "float16", name="m")
    out = tc.nn.scaled_dot_product_attention(q, k, v, m, scale=0.3)
    s = flash_template.schedule_sdpa_as_flash([out], target="cuda-emu", config=cfg)
    mod = tc.build(s, [q, k, v, m, out], target="cuda-emu")
    qa, ka, va, ma = _grad_data([(B, H, L, D)] * 3 + [(B, 1, 1, L)], "float16", 3)
    ma[..., ::5] = -np.inf
    got = np.full((B, H, L, D), np.nan, np.float16)
    mod(qa, ka, va, ma, got, mode="reverse")
    # (the reference's scale 1 / sqrt(D): q scaled by 0.3 sqrt(D) in float64)
    want, _ = reference(qa.astype(np.float64) * 0.3 * math.sqrt(D), ka, va, False, mask=ma)
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=0, atol=4e-3)


@needs_cxx
def test_sdpa_with_a_padding_mask_inside_a_graph_is_flash_attention():
    """Inside a larger graph (q computed before it, an output after it), with an additive
    mask over the keys broadcast over heads and queries ((batch, 1, 1, Lk), a compute of
    a (batch, Lk) padding mask, as BERT's), scaled_dot_product_attention runs on the
    flash template and the rules schedule the rest; the second batch's keys all masked
    out give rows of 0, as the general stages'."""
    B, H, L, D = 2, 2, 37, 32
    q, k, v = (tc.placeholder((B, H, L, D), "bfloat16", name=n) for n in "qkv")
    pad = tc.placeholder((B, L), "bfloat16", name="pad")
    q2 = tc.compute(q.shape, lambda *i: q[i] * tc.const(2.0, "bfloat16"), name="q2")
    keys = tc.compute((B, 1, 1, L), lambda b, _h, _i, j: pad[b, j], name="keys")
    att = tc.nn.scaled_dot_product_attention(q2, k, v, keys, name="attn")
    out = tc.compute(att.shape, lambda *i: att[i] + att[i], name="twice")
    args = [q, k, v, pad, out]
    s = tc.auto_schedule(args, target="cuda-emu")
    text = str(tc.lower(s, args, target="cuda-emu"))
    assert gemms(text) == ["attn.flash.scores", "attn.flash.pv"]
    assert "attn.scores" not in text and "attn.exp" not in text
    mod = tc.build(s, args, target="cuda-emu")
    qa, ka, va = _grad_data([(B, H, L, D)] * 3, "bfloat16", 5)
    pa = np.where(np.arange(L) < 29, 0.0, -1e4)[None].repeat(B, 0)
    pa[1] = -np.inf
    pa = pa.astype(NP["bfloat16"])
    got = np.full((B, H, L, D), np.nan, NP["bfloat16"])
    mod(qa, ka, va, pa, got, mode="reverse")
    q64, k64, v64 = (x.astype(np.float64) for x in (qa, ka, va))
    sc = 2 * q64 @ k64.transpose(0, 1, 3, 2) / math.sqrt(D) + pa.astype(np.float64)[:, None, None]
    with np.errstate(invalid="ignore"):
        p = np.exp(sc - sc.max(-1, keepdims=True))
        want = 2 * np.nan_to_num((p / p.sum(-1, keepdims=True)) @ v64)
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=0, atol=3e-2)
    assert not np.any(got[1].astype(np.float64))


def test_two_attentions_in_a_graph_each_on_the_flash_template():
    """The second attention reads the first's output (an output of the graph too): each
    runs on the flash template, and no stage of the first's general form is left (the
    second's copies of its input stop at the first's stage)."""
    B, H, L, D = 1, 2, 24, 16
    q, k, v = (tc.placeholder((B, H, L, D), "float16", name=n) for n in "qkv")
    a1 = tc.nn.scaled_dot_product_attention(q, k, v, name="a1")
    a2 = tc.nn.scaled_dot_product_attention(a1, k, v, name="a2")
    both = tc.compute(a2.shape, lambda *i: a2[i] + a1[i], name="both")
    args = [q, k, v, a1, both]
    text = str(tc.lower(tc.auto_schedule(args, target="cuda-emu"), args, target="cuda-emu"))
    assert gemms(text) == ["a1.flash.scores", "a1.flash.pv", "a2.flash.scores", "a2.flash.pv"]
    assert not re.search(r"a[12]\.(scores|max|exp|sum|rcp|pv)\b", text)


@pytest.mark.slow
@pytest.mark.skipif(not _LONG, reason="TECOMP_LONG_TESTS=1")
@pytest.mark.parametrize("seed", range(6))
def test_the_one_pass_forward_on_random_shapes(seed):
    """The single pass's rescaling on random lengths, head dims (dv != d too), tilings
    (their key and value tiles in rings or not) and score magnitudes (up to hundreds:
    the running maximum moves by a lot between tiles)."""
    rng = np.random.default_rng(seed)
    Lq, Lk = (int(x) for x in rng.integers(1, 300, 2))
    D, Dv = (int(x) for x in rng.choice([16, 32, 64, 128], 2))
    dtype = ["float16", "bfloat16"][seed % 2]
    causal = bool(seed % 3)
    cfg = FlashConfig(*[(4, 64), (4, 32), (2, 32), (1, 64), (4, 16)][seed % 5],
                      stages=[1, 2, 3][seed // 2 % 3])   # (rings of cp.async K, V tiles)
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


@pytest.mark.slow
@pytest.mark.skipif(not _LONG, reason="TECOMP_LONG_TESTS=1")
@pytest.mark.parametrize("seed", range(8))
def test_the_backward_on_random_shapes(seed):
    """The backward's kernels on random lengths, head dims (dv != d too: the stacked
    dk/dv kernel as wide as the wider), dtypes, causal or not, padding masks (keys left
    out with -inf, a batch with every key out), tilings (16- and 32-row warps) and both
    forms of dq (atomic: the blocks last first, another order of the additions)."""
    rng = np.random.default_rng(100 + seed)
    B, H = 2, 1
    Lq, Lk = (int(x) for x in rng.integers(1, 200, 2))
    D, Dv = (int(x) for x in rng.choice([16, 32, 64, 128], 2))
    dtype = ["float16", "bfloat16"][seed % 2]
    causal = bool(seed % 3)
    masked = seed % 4 >= 2
    cfg = FlashConfig(*[(4, 32, 16), (2, 32), (4, 64, 16), (2, 64), (1, 16, 16),
                        (8, 16, 16)][seed % 6])
    if backward_shared_bytes(cfg, D, Dv, dtype) > max_shared_bytes("cuda-emu"):
        cfg = flash_backward_config(D, Dv, dtype, max_shared_bytes("cuda-emu"))
    # dq: atomic on even seeds where the warps can share its tile, else recomputed
    cfg = dataclasses.replace(cfg, dq="atomic" if seed % 2 == 0 and atomic_warps(cfg, D)
                              else "recompute")
    P = lambda shape, n, dt=dtype: tc.placeholder(shape, dt, name=n)  # noqa: E731
    q, k, v = P((B, H, Lq, D), "q"), P((B, H, Lk, D), "k"), P((B, H, Lk, Dv), "v")
    o, do = P((B, H, Lq, Dv), "o"), P((B, H, Lq, Dv), "do")
    lse = P((B, H, Lq), "lse", "float32")
    m = P((B, 1, 1, Lk), "m") if masked else None
    grads = tc.nn.flash_attention_backward(q, k, v, o, do, lse, causal=causal, mask=m)
    args = [q, k, v, o, do, lse] + ([m] if masked else []) + list(grads)
    mod = tc.build(schedule_flash_attention_backward(list(grads), target="cuda-emu",
                                                     config=cfg), args, target="cuda-emu")
    qa, ka, va, da = _grad_data([(B, H, Lq, D), (B, H, Lk, D), (B, H, Lk, Dv),
                                 (B, H, Lq, Dv)], dtype, seed)
    ma = None
    if masked:
        ma = np.where(rng.random((B, 1, 1, Lk)) < 0.3, -np.inf,
                      rng.standard_normal((B, 1, 1, Lk))).astype(NP[dtype])
        ma[0, ..., 0] = 0
        ma[1] = -np.inf            # every key out: rows of 0, gradients of 0
    with np.errstate(invalid="ignore", divide="ignore"):
        oa, la = reference(qa, ka, va, causal, mask=ma)
        wants = reference(qa, ka, va, causal, da, ma)
    if masked:   # (the second batch's rows: 0 and -inf, as flash_attention gives them)
        oa, wants = np.nan_to_num(oa), [np.nan_to_num(w) for w in wants]
        la = np.where(np.isnan(la), -np.inf, la)
    got = [np.full(x.shape, np.nan, NP[dtype]) for x in (qa, ka, va)]
    extra = [ma] if masked else []
    mod(qa, ka, va, oa.astype(NP[dtype]), da, la.astype(np.float32), *extra, *got,
        mode="last_block_first" if cfg.dq == "atomic" else "reverse")
    tol = 4e-3 if dtype == "float16" else 3e-2
    for g, want in zip(got, wants):
        np.testing.assert_allclose(g.astype(np.float64), want, rtol=0,
                                   atol=tol * max(1.0, np.abs(want).max()))


def _sdpa_flash_backward_graph(B=2, H=2, L=37, D=32):
    """tc.gradient of a graph with scaled_dot_product_attention(backward="flash") inside
    (q computed before it, a padding mask computed, a head that reads its output), and
    its GPU rules' schedule for cuda-emu: (args, schedule, lowered text)."""
    x, k, v = (tc.placeholder((B, H, L, D), "float16", name=n) for n in "xkv")
    pad = tc.placeholder((B, L), "float16", name="pad")
    q = tc.compute(x.shape, lambda *i: x[i] * tc.const(2.0, "float16"), name="q2")
    keys = tc.compute((B, 1, 1, L), lambda b, _h, _i, j: pad[b, j], name="keys")
    att = tc.nn.scaled_dot_product_attention(q, k, v, keys, name="attn", backward="flash")
    out = tc.compute(att.shape, lambda *i: att[i] * att[i], name="sq")
    head = tc.placeholder(out.shape, "float16", name="head")
    args = [x, k, v, pad, head, *tc.gradient(out, [x, k, v], head=head)]
    s = tc.auto_schedule(args, target="cuda-emu")
    return args, s, str(tc.lower(s, args, target="cuda-emu"))


def test_sdpa_with_the_flash_backward_inside_a_graph():
    """tc.gradient of a graph with scaled_dot_product_attention(backward="flash") inside
    runs the attention's backward on the flash template (five GEMMs, dq added with
    atomics; the general stages nowhere, no seq x seq buffer) and the rest on the GPU
    rules (the numbers: the slow test below).  The forward runs once: its kernel writes
    the output and the rows' logsumexp, which the backward reads (FlashAttention's saved
    O and L), and no kernel computes either again."""
    _, _, text = _sdpa_flash_backward_graph()
    assert gemms(text) == ["attn.flash.scores", "attn.flash.pv"] + [
        "attn.flash_grad." + n for n in ("scores_k", "dpt", "dq_acc", "dkv_acc")]
    kernels = re.split(r"\n(?=  blockIdx)", text)
    [fwd] = [x for x in kernels if "attn.flash.pv.mma" in x]
    assert re.search(r"^ +attn\[", fwd, re.M) and re.search(r"^ +attn\.lse\[", fwd, re.M)
    assert sum(bool(re.search(r"^ +attn\.lse\[.*\] =", x, re.M)) for x in kernels) == 1
    assert not re.search(r"attn\.(scores|exp|max|sum|pv|rcp)\b", text)
    for name, dims in re.findall(r"allocate ([\w.]+): \w+\[([\d, ]+)\]", text):
        assert math.prod(int(d) for d in dims.split(",")) <= 128 * 128, (name, dims)


def _torch_op_sdpa_flash(target, B=1, H=2, L=40, D=32):
    torch = pytest.importorskip("torch")
    import tecomp.torch as tct
    q, k, v = (tc.placeholder((B, H, L, D), "float16", name=n) for n in "qkv")
    out = tc.nn.scaled_dot_product_attention(q, k, v, name="att", backward="flash")
    return torch, tct.op([q, k, v], out, target=target, name="att_flash")


def test_a_torch_training_step_computes_the_flash_forward_once(monkeypatch):
    """Through tecomp.torch on CUDA (the modules' lowered IR read, nothing run): the
    training forward's flash kernel writes the output and the logsumexp, both saved for
    the backward (autograd's ctx), and the backward's kernels compute no forward: 1 + 6
    kernels a step (there were 1 + 8: the backward ran the forward's kernel and a
    logsumexp kernel again)."""
    import tecomp.torch as tct_mod
    texts = {}

    def lowered(s, args, target=None, name=None):
        texts[name] = str(tc.lower(s, args, target="cuda"))
        return object()
    monkeypatch.setattr(tct_mod, "build", lowered)
    torch, op = _torch_op_sdpa_flash("cuda")
    tr = op._compile_training(tct_mod._Compiled(op.inputs, op.outputs, None))
    assert [shape({}) for shape, _ in tr.saved] == [(1, 2, 40)] and tr.outputs_read == [0]
    train, bwd = texts[f"{op.name}_train"], texts[f"{op.name}_backward"]
    kernels = lambda t: re.split(r"\n(?=  blockIdx)", t)[1:]  # noqa: E731
    [fwd] = [x for x in kernels(train) if "att.flash.pv.mma" in x]
    assert re.search(r"^ +att\[.*\] =", fwd, re.M) and re.search(r"^ +att\.lse\[.*\] =",
                                                                  fwd, re.M)
    assert len(kernels(train)) == 1 and len(kernels(bwd)) == 6
    assert gemms(bwd) == ["att.flash_grad." + n for n in ("scores_k", "dpt", "dq_acc", "dkv_acc")]


def test_the_cpu_training_forward_with_the_flash_backward_is_the_attention_template(
        monkeypatch):
    """Through tecomp.torch on the CPU: the training forward (which writes the output and
    the logsumexp the flash backward reads) stays on the attention template, each task
    writing its rows' logsumexp from its own row maximum and sum (the generic rules held
    the Lq x Lk scores and exps whole); its output and logsumexp are right, the last
    block of rows clipped at the query's end."""
    import tecomp.torch as tct_mod
    texts, real = {}, tct_mod.build

    def lowered(s, args, target=None, name=None):
        texts[name] = str(tc.lower(s, args, target="llvm"))
        return real(s, args, target=target, name=name) if name.endswith("_train") else None
    monkeypatch.setattr(tct_mod, "build", lowered)
    B, H, L, D = 2, 3, 100, 16
    _, op = _torch_op_sdpa_flash("llvm", B, H, L, D)
    tr = op._compile_training(tct_mod._Compiled(op.inputs, op.outputs, None))
    [train] = [t for n, t in texts.items() if n.endswith("_train")]
    allocs = re.findall(r"allocate ([\w.]+): \w+\[([\d, ]+)\]", train)
    assert {"att.scores", "att.exp"} <= {n for n, _ in allocs}
    for name, dims in allocs:   # (a block of rows x Lk per task, never Lq x Lk)
        assert math.prod(int(d) for d in dims.split(",")) < L * L, (name, dims)
    par = re.search(r"^( *)parallel \(", train, re.M)
    [store] = re.findall(r"^( *)att\.lse\[.*\] =", train, re.M)
    assert par and len(store) > len(par.group(1)) and "allocate att.lse" not in train
    q, k, v = _grad_data([(B, H, L, D)] * 3, "float16", 8)
    out = np.full((B, H, L, D), np.nan, np.float16)
    lse = np.full((B, H, L), np.nan, np.float32)
    tr.fwd(q, k, v, out, lse)
    s64 = q.astype(np.float64) @ k.astype(np.float64).transpose(0, 1, 3, 2) / math.sqrt(D)
    want = np.log(np.exp(s64 - s64.max(-1, keepdims=True)).sum(-1)) + s64.max(-1)
    np.testing.assert_allclose(lse, want, rtol=0, atol=1e-4)
    want_out = np.exp(s64 - want[..., None]) @ v.astype(np.float64)
    np.testing.assert_allclose(out.astype(np.float64), want_out, rtol=0, atol=2e-3)


@pytest.mark.slow
@pytest.mark.skipif(not _LONG, reason="TECOMP_LONG_TESTS=1")
def test_a_torch_training_step_with_the_flash_backward_on_the_cpu():
    """The same op on the CPU: the training forward saves the logsumexp (the backward reads
    it and the output, computing no forward); the gradients match PyTorch's."""
    torch, op = _torch_op_sdpa_flash("llvm", L=20, D=16)
    gen = torch.Generator().manual_seed(3)
    xs = [torch.randn(1, 2, 20, 16, generator=gen).half().requires_grad_() for _ in range(3)]
    g = torch.randn(1, 2, 20, 16, generator=gen).half()
    op(*xs).backward(g)
    tr = next(iter(op._compiled.values())).training
    assert len(tr.saved) == 1 and tr.outputs_read == [0]
    ref = [x.detach().double().requires_grad_() for x in xs]
    torch.nn.functional.scaled_dot_product_attention(*ref).backward(g.double())
    for x, r in zip(xs, ref):
        np.testing.assert_allclose(x.grad.double().numpy(), r.grad.numpy(), rtol=0,
                                   atol=2e-3 * r.grad.abs().max().item())


@needs_cxx
@pytest.mark.slow
@pytest.mark.skipif(not _LONG, reason="TECOMP_LONG_TESTS=1")
def test_sdpa_with_the_flash_backward_inside_a_graph_matches_torch():
    """The graph of test_sdpa_with_the_flash_backward_inside_a_graph in the emulation
    against torch.autograd in float64 (40 s: the emulation's compile)."""
    torch = pytest.importorskip("torch")
    B, H, L, D = 2, 2, 37, 32
    args, s, _ = _sdpa_flash_backward_graph(B, H, L, D)
    mod = tc.build(s, args, target="cuda-emu")
    xa, ka, va, ha = _grad_data([(B, H, L, D)] * 4, "float16", 7)
    pa = np.where(np.arange(L) < 29, 0.0, -np.inf)[None].repeat(B, 0).astype(np.float16)
    got = [np.full((B, H, L, D), np.nan, np.float16) for _ in range(3)]
    mod(xa, ka, va, pa, ha, *got, mode="serial")
    tx, tk, tv = (torch.from_numpy(a.astype(np.float64)).requires_grad_() for a in (xa, ka, va))
    o = torch.nn.functional.scaled_dot_product_attention(
        2 * tx, tk, tv, torch.from_numpy(pa.astype(np.float64))[:, None, None])
    (o * o).backward(torch.from_numpy(ha.astype(np.float64)))
    for g, want in zip(got, (tx.grad, tk.grad, tv.grad)):
        np.testing.assert_allclose(g.astype(np.float64), want.numpy(), rtol=0,
                                   atol=3e-3 * want.abs().max().item())


@pytest.mark.gpu
@pytest.mark.parametrize("dq", ["atomic", "recompute"])
@pytest.mark.parametrize("d,dtype,causal,masked", [(64, "float16", True, False),
                                                   (128, "bfloat16", False, True),
                                                   (128, "float16", True, True)])
def test_gpu_backward_matches_float64(gpu_driver, dq, d, dtype, causal, masked):
    """The backward on the GPU, both forms of dq, lengths that are not multiples of the
    tiles, a padding mask: against float64, three runs each (dq "atomic": the order of
    the blocks' additions differs from run to run, the results within the tolerance)."""
    B, H, Lq, Lk = 2, 4, 1000, 777
    P = lambda shape, n, dt=dtype: tc.placeholder(shape, dt, name=n)  # noqa: E731
    q, o, do = (P((B, H, Lq, d), n) for n in ("q", "o", "do"))
    k, v = P((B, H, Lk, d), "k"), P((B, H, Lk, d), "v")
    lse = P((B, H, Lq), "lse", "float32")
    m = P((B, 1, 1, Lk), "m") if masked else None
    grads = tc.nn.flash_attention_backward(q, k, v, o, do, lse, causal=causal, mask=m)
    cfg = dataclasses.replace(flash_backward_config(d, d, dtype, max_shared_bytes("cuda")),
                              dq=dq)
    args = [q, k, v, o, do, lse] + ([m] if masked else []) + list(grads)
    mod = tc.build(schedule_flash_attention_backward(list(grads), target="cuda", config=cfg),
                   args, target="cuda")
    qa, ka, va, da = _grad_data([(B, H, Lq, d), (B, H, Lk, d), (B, H, Lk, d), (B, H, Lq, d)],
                                dtype, 11)
    ma = None
    if masked:
        ma = np.where(np.arange(Lk) < Lk - 100, 0.0, -np.inf)[None, None, None].repeat(
            B, 0).astype(NP[dtype])
    oa, la = reference(qa, ka, va, causal, mask=ma)
    wants = reference(qa, ka, va, causal, da, ma)
    tol = 4e-3 if dtype == "float16" else 3e-2
    for _ in range(3):
        got = [np.full(x.shape, np.nan, NP[dtype]) for x in (qa, ka, va)]
        mod(qa, ka, va, oa.astype(NP[dtype]), da, la.astype(np.float32),
            *([ma] if masked else []), *got)
        for g, want in zip(got, wants):
            np.testing.assert_allclose(g.astype(np.float64), want, rtol=0,
                                       atol=tol * max(1.0, np.abs(want).max()))


@pytest.mark.gpu
@pytest.mark.parametrize("d,dtype,causal,cfg", [
    (64, "float16", True, None), (64, "bfloat16", True, FlashConfig(4, 16, stages=2)),
    (64, "float16", False, None), (128, "bfloat16", True, None),
    (128, "float16", False, FlashConfig(4, 32, stages=2)),
    (64, "float16", True, FlashConfig(4, 16, form="registers")),
    (64, "bfloat16", True, FlashConfig(4, 16, stages=2, form="registers")),
    (128, "float16", False, FlashConfig(4, 32, form="registers")),
    (64, "float16", True, FlashConfig(4, 16, form="fragments")),
    (64, "bfloat16", True, FlashConfig(4, 16, stages=2, form="fragments")),
    (64, "float16", False, FlashConfig(4, 16, stages=2, form="fragments")),
    (128, "float16", False, FlashConfig(4, 32, form="fragments")),
    (128, "bfloat16", True, FlashConfig(4, 32, form="fragments")),
    (64, "float16", True, FlashConfig(4, 16, form="fragments", whole=True, ftz=True)),
    (64, "bfloat16", True, FlashConfig(4, 16, stages=2, form="fragments", whole=True,
                                       ftz=True)),
    (128, "float16", True, FlashConfig(4, 32, form="fragments", whole=True, ftz=True)),
    (128, "bfloat16", False, FlashConfig(4, 32, form="fragments", ftz=True)),
    (64, "float16", True, FlashConfig(4, 16, form="fragments", whole=True, ftz=True,
                                      exp2=True)),
    (64, "bfloat16", False, FlashConfig(4, 16, stages=2, form="fragments", ftz=True,
                                        exp2=True)),
    (128, "float16", True, FlashConfig(4, 32, form="fragments", whole=True, ftz=True,
                                       exp2=True)),
    (128, "bfloat16", False, FlashConfig(4, 32, form="fragments", exp2=True)),
    (64, "float16", True, FlashConfig(4, 16, form="fragments", whole=True, ftz=True,
                                      exp2=True, diagonal_test=False)),
    (128, "bfloat16", True, FlashConfig(4, 32, form="fragments", whole=True,
                                        diagonal_test=False))])
def test_gpu_forward_matches_float64(gpu_driver, d, dtype, causal, cfg):
    """The forward on the GPU against float64: lengths that are not multiples of the
    tiles, causal with many blocks (at head dim 64 the key tiles before each block's
    first query in their loop without the mask, then the diagonal ones), the rings of
    cp.async tiles (whose waits the emulation's synchronous copies cannot check), the
    fragment form's whole tiles and ``ex2.approx.ftz`` exps (whose approximation the
    emulation computes exactly), and its exps in base 2 (``ex2.approx`` and ``.ftz`` of
    base-2 differences; the logsumexp converted back to natural-log units), and its
    diagonal tiles without their per-tile test (``diagonal_test=False``)."""
    B, H, Lq, Lk = 2, 3, 1000, 1000 if causal else 777
    args = flash(B, H, Lq, Lk, d, dtype, causal)
    mod = tc.build(schedule_flash_attention(args[3:], target="cuda", config=cfg), args,
                   target="cuda")
    rng = np.random.default_rng(d + Lk)
    q, k, v = (rng.standard_normal(shape).astype(NP[dtype]) for shape in
               ((B, H, Lq, d), (B, H, Lk, d), (B, H, Lk, d)))
    want, want_lse = reference(q, k, v, causal)
    tol = 4e-3 if dtype == "float16" else 3e-2
    for _ in range(2):
        out = np.full((B, H, Lq, d), np.nan, NP[dtype])
        lse = np.full((B, H, Lq), np.nan, np.float32)
        mod(q, k, v, out, lse)
        np.testing.assert_allclose(out.astype(np.float64), want, rtol=0, atol=tol)
        np.testing.assert_allclose(lse, want_lse, rtol=0, atol=1e-4)


@pytest.mark.gpu
@pytest.mark.parametrize("d,dtype,causal,tiling", [(64, "float16", True, (4, 32)),
                                                   (128, "bfloat16", False, (2, 32))])
def test_gpu_gradient_with_the_forward_in_base_2(gpu_driver, d, dtype, causal, tiling):
    """tc.gradient of flash_attention on the GPU, scheduled with a tiling of 32-row warps
    (which the forward it recomputes takes) in the fragment form with ``ftz`` and
    ``exp2``: the forward's logsumexp, converted back from base-2 units, is what the
    backward's kernels read; dq, dk and dv against float64."""
    B, H, L = 1, 2, 500
    q, k, v, head = (tc.placeholder((B, H, L, d), dtype, name=n) for n in
                     ("q", "k", "v", "head"))
    out, _ = tc.nn.flash_attention(q, k, v, causal=causal)
    grads = tc.gradient(out, [q, k, v], head=head)
    cfg = FlashConfig(*tiling, form="fragments", ftz=True, exp2=True)
    args = [q, k, v, head, *grads]
    mod = tc.build(schedule_flash_attention_backward(grads, target="cuda", config=cfg), args,
                   target="cuda")
    assert "tc_ex2_ftz(" in mod.get_source()     # (the forward took the config)
    qa, ka, va, ha = _grad_data([(B, H, L, d)] * 4, dtype, 12)
    got = [np.full((B, H, L, d), np.nan, NP[dtype]) for _ in range(3)]
    mod(qa, ka, va, ha, *got)
    tol = 4e-3 if dtype == "float16" else 3e-2
    for g, want in zip(got, reference(qa, ka, va, causal, ha)):
        np.testing.assert_allclose(g.astype(np.float64), want, rtol=0,
                                   atol=tol * max(1.0, np.abs(want).max()))
