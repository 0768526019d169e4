"""AArch64 (``llvm -mtriple=aarch64-linux-gnu``): the machine model, the code, and the
templates, the auto-scheduler and fuzz cases run under qemu-user against numpy.

The first tests need only llvmlite (the AArch64 code is compiled and printed here); those
marked ``needs_qemu`` export the kernels with the cross compiler and run them under
``qemu-aarch64`` (CI installs ``gcc-aarch64-linux-gnu`` and ``qemu-user``; elsewhere they
are skipped, saying what to install)."""
import os
import re

import numpy as np
import pytest

import tecomp as tc
import tecomp.nn as nn
from tecomp.strategy import apply_rules, cpu
from tecomp.strategy.rules import Knobs
from tecomp.testing import qemu
from tecomp.testing.diff import run_case
from tecomp.testing.fuzz import case_for_seed

NEON = "llvm -mtriple=aarch64-linux-gnu"
SVE = "llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-v1"
SVE256 = SVE + " -msve-vector-bits=256"   # fixed-length SVE: tecomp's vectors in z registers

_WHY = qemu.unavailable(NEON)
needs_qemu = pytest.mark.skipif(_WHY is not None, reason=f"no qemu-user for aarch64: {_WHY}")
_LONG = os.environ.get("TECOMP_LONG_TESTS", "") not in ("", "0")


def _gemm(n=64, lanes=4):
    A = tc.placeholder((n, n), name="A")
    B = tc.placeholder((n, n), name="B")
    k = tc.reduce_axis((0, n), name="k")
    C = tc.compute((n, n), lambda i, j: tc.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = tc.create_schedule(C.op)
    i, j = C.op.axis
    jo, ji = s[C].split(j, lanes)
    s[C].reorder(i, jo, k, ji)
    s[C].vectorize(ji)
    s[C].parallel(i)
    return s, [A, B, C]


def test_machine_model_is_the_isa_s():
    t = tc.Target(NEON)
    assert (t.isa, t.triple, t.cpu, t.lanes, t.vregs) == (
        "aarch64", "aarch64-linux-gnu", "generic", 4, 32)
    assert {"neon", "fp-armv8"} <= t.features and not t.is_host and not t.is_native_isa
    m = t.machine
    assert (m.lanes, m.vregs, m.masks, m.fma_lanes) == (4, 32, False, 4)
    v1 = tc.Target(SVE)
    assert "sve" in v1.features and (v1.l1_bytes, v1.l2_bytes) == (64 << 10, 1 << 20)
    assert "sve" not in tc.Target(SVE + " -mattr=-sve").features
    assert str(tc.Target(NEON)) == NEON and tc.Target(str(v1)) == v1
    # code for it is printed here, never run here
    assert "aarch64" in t.runs_here() and "qemu" in t.runs_here()
    # int8 dot products: the widening NEON one everywhere, usdot where i8mm is
    assert [x.name for x in tc.tensor_intrins_for(NEON)] == ["aarch64.neon_u8s8s32_4x4"]
    assert {x.name for x in tc.tensor_intrins_for(SVE)} == {
        "aarch64.usdot_u8s8s32_4x4", "aarch64.neon_u8s8s32_4x4", "aarch64.usmmla_u8s8s32_2x2x8",
        "aarch64.smmla_s8s8s32_2x2x8", "aarch64.ummla_u8u8s32_2x2x8"}


def test_code_is_neon_and_calls_are_refused():
    s, args = _gemm()
    f = tc.build(s, args, target=NEON, name="gemm")
    asm = f.get_source("asm")
    assert re.search(r"\bfmul\s+v\d+\.4s", asm) and "ldr\tq" in asm
    assert 'target triple = "aarch64-linux-gnu"' in f.get_source("llvm")
    a = np.zeros((64, 64), "float32")
    with pytest.raises(tc.TargetError, match=r"gemm cannot run on this machine: code for "
                                             r"llvm -mtriple=aarch64-linux-gnu is aarch64"):
        f(a, a.copy(), a.copy())


def test_sve_target_emits_sve():
    """A loop the schedule leaves to LLVM's vectorizer: scalable (SVE) vectors for a CPU
    with SVE, NEON without."""
    n = tc.var("n")
    A = tc.placeholder((n,), name="A")
    B = tc.compute((n,), lambda i: A[i] * 3.0 + 1.0, name="B")
    s = tc.create_schedule(B.op)
    sve = tc.build(s, [A, B], target=SVE, name="axpb").get_source("asm")
    assert re.search(r"\bz\d+\.s\b", sve)
    neon = tc.build(s, [A, B], target=NEON, name="axpb").get_source("asm")
    assert not re.search(r"\bz\d+\.s\b", neon) and re.search(r"v\d+\.4s", neon)


def test_auto_schedule_reads_the_backend_s_facts():
    A = tc.placeholder((48, 40), name="A")
    B = tc.compute((48, 40), lambda i, j: tc.exp(A[i, j]) * 2.0, name="B")
    s = tc.auto_schedule([A, B], target=NEON)
    f = tc.build(s, [A, B], target=NEON, name="ew")
    # 4-lane vectors: the NEON register width from the aarch64 machine model
    assert any("4 lanes" in n for n in f.vectorize_notes)


# -- under qemu ------------------------------------------------------------------------

def _run(tmp_path, s, args, inputs, target=NEON, name="k", threads=2):
    f = tc.build(s, args, target=target, name=name)
    path = tmp_path / f"{name}.so"
    f.export_library(path)
    outs = [np.zeros(tuple(int(x) for x in a.shape), dtype=a.dtype)
            for a in args[len(inputs):]]
    qemu.run_library(path, *inputs, *outs, threads=threads)
    return outs


def _conv_ref(x, w, stride, pad):
    n, c, h, ww = x.shape
    o, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad))).astype(np.float64)
    oh, ow = (h + 2 * pad - kh) // stride + 1, (ww + 2 * pad - kw) // stride + 1
    out = np.zeros((n, o, oh, ow))
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, :, i:i + stride * oh:stride, j:j + stride * ow:stride]
            out += np.einsum("nchw,oc->nohw", patch, w[:, :, i, j])
    return out


def _check_matmul(tmp_path, target, rng, M, N, K):
    A, B = tc.placeholder((M, K), name="A"), tc.placeholder((K, N), name="B")
    C = nn.matmul(A, B)
    a, b = rng.standard_normal((M, K), np.float32), rng.standard_normal((K, N), np.float32)
    c, = _run(tmp_path, cpu.schedule_matmul(C, target=target), [A, B, C], [a, b], target, "mm")
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


def _check_softmax(tmp_path, target, rng, rows, cols):
    S = tc.placeholder((rows, cols), name="s")
    Sm = nn.softmax(S)
    sv = rng.standard_normal((rows, cols), np.float32)
    sm, = _run(tmp_path, cpu.schedule_softmax(Sm, target=target), [S, Sm], [sv], target, "sm")
    e = np.exp(sv - sv.max(1, keepdims=True))
    np.testing.assert_allclose(sm, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)


def _check_conv_nchw(tmp_path, target, rng, n, c_in, c_out, h, stride):
    """Run the NCHW template; returns its inputs and numpy's result."""
    Xc = tc.placeholder((n, c_in, h, h), name="x")
    Wc = tc.placeholder((c_out, c_in, 3, 3), name="w")
    Y = nn.conv2d_nchw(Xc, Wc, stride=stride, padding=1)
    xv = rng.standard_normal((n, c_in, h, h), np.float32)
    wv = rng.standard_normal((c_out, c_in, 3, 3), np.float32)
    want = _conv_ref(xv, wv, stride, 1)
    y, = _run(tmp_path, cpu.schedule_conv2d_nchw(Y, target=target), [Xc, Wc, Y], [xv, wv],
              target, f"nchw{stride}")
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-3)
    return xv, wv, want


@needs_qemu
@pytest.mark.parametrize("target", [NEON, pytest.param(SVE, marks=pytest.mark.skipif(
    not _LONG, reason="the template matrix again for -mcpu=neoverse-v1 (30 s): set "
    "TECOMP_LONG_TESTS=1; the int8 and fuzz tests build for that CPU by default")),
    pytest.param(SVE256, marks=pytest.mark.skipif(
        not _LONG, reason="the fixed-length SVE matrix (30 s): set TECOMP_LONG_TESTS=1; "
        "test_fixed_length_sve_under_qemu runs a part of it by default"))])
def test_templates_under_qemu(tmp_path, target):
    rng = np.random.default_rng(0)
    f32 = np.float32
    # GEMM and dense (odd sizes: the tails)
    M, N, K = 67, 130, 96
    _check_matmul(tmp_path, target, rng, M, N, K)
    X, W = tc.placeholder((8, K), name="X"), tc.placeholder((N, K), name="W")
    bias = tc.placeholder((N,), name="bias")
    D = nn.dense(X, W, bias)
    x, w, bb = (rng.standard_normal((8, K), f32), rng.standard_normal((N, K), f32),
                rng.standard_normal(N, f32))
    d, = _run(tmp_path, cpu.schedule_dense(D, target=target), [X, W, bias, D], [x, w, bb],
              target, "dense")
    np.testing.assert_allclose(d, x.astype(np.float64) @ w.T + bb, rtol=1e-4, atol=1e-4)
    # conv2d NCHW and NHWC, stride 1 and 2
    for c_in, c_out, h, stride in ((16, 32, 14, 1), (8, 12, 15, 2)):
        xv, wv, want = _check_conv_nchw(tmp_path, target, rng, 2, c_in, c_out, h, stride)
        Xh = tc.placeholder((2, h, h, c_in), name="x")
        Wh = tc.placeholder((3, 3, c_in, c_out), name="w")
        Yh = nn.conv2d_nhwc(Xh, Wh, stride=stride, padding=1)
        yh, = _run(tmp_path, cpu.schedule_conv2d_nhwc(Yh, target=target), [Xh, Wh, Yh],
                   [xv.transpose(0, 2, 3, 1).copy(), wv.transpose(2, 3, 1, 0).copy()],
                   target, f"nhwc{stride}")
        np.testing.assert_allclose(yh, want.transpose(0, 2, 3, 1), rtol=1e-4, atol=1e-3)
    # softmax, layer norm (auto-scheduled), attention
    _check_softmax(tmp_path, target, rng, 33, 100)
    L = tc.placeholder((20, 64), name="x")
    g, be = tc.placeholder((64,), name="g"), tc.placeholder((64,), name="b")
    Ln = nn.layer_norm(L, g, be)
    lv, gv, bv = (rng.standard_normal((20, 64), f32), rng.standard_normal(64, f32),
                  rng.standard_normal(64, f32))
    args = [L, g, be, Ln]
    ln, = _run(tmp_path, tc.auto_schedule(args, target=target), args, [lv, gv, bv], target,
               "ln")
    mu, var = lv.mean(1, keepdims=True), lv.var(1, keepdims=True)
    np.testing.assert_allclose(ln, (lv - mu) / np.sqrt(var + 1e-5) * gv + bv, rtol=1e-4,
                               atol=1e-4)
    q = tc.placeholder((1, 2, 37, 32), name="q")
    k = tc.placeholder((1, 2, 45, 32), name="k")
    v = tc.placeholder((1, 2, 45, 32), name="v")
    O = nn.scaled_dot_product_attention(q, k, v)
    qv, kv, vv = (rng.standard_normal(tuple(int(d) for d in t.shape), f32) for t in (q, k, v))
    o, = _run(tmp_path, cpu.schedule_attention(O, target=target), [q, k, v, O], [qv, kv, vv],
              target, "sdpa")
    sc = qv.astype(np.float64) @ kv.transpose(0, 1, 3, 2) / np.sqrt(32)
    p = np.exp(sc - sc.max(-1, keepdims=True))
    np.testing.assert_allclose(o, (p / p.sum(-1, keepdims=True)) @ vv, rtol=1e-4, atol=1e-5)


def test_fixed_length_sve_target():
    """-msve-vector-bits fixes the SVE vector length: the lanes the schedules plan for,
    vscale_range on every function, SVE instructions for tecomp's vectors (z registers,
    predicates from ptrue, no 128-bit NEON arithmetic); refused without SVE."""
    for bits in (256, 512):
        t = tc.Target(f"{SVE} -msve-vector-bits={bits}")
        assert (t.lanes, t.machine.lanes, t.sve_vector_bits) == (bits // 32,) * 2 + (bits,)
        assert tc.Target(str(t)) == t and str(t).endswith(f"-msve-vector-bits={bits}")
        s, args = _gemm(64, t.lanes)
        f = tc.build(s, args, target=t, name="gemm")
        n = bits // 128
        assert f"vscale_range({n},{n})" in f.get_source("llvm")
        asm = f.get_source("asm")
        assert re.search(r"\bfmul\s+z\d+\.s", asm) and re.search(r"\bfadd\s+z\d+\.s", asm)
        assert re.search(r"\b(ldr\s+z\d+, \[|ld1[bw]\s+\{ z\d+\.[bs] \}, p\d+/z)", asm)
        assert re.search(r"\b(str\s+z\d+, \[|st1[bw]\s+\{ z\d+\.[bs] \}, p\d+)", asm)
        assert not re.search(r"\bf(mul|add|mla)\s+v\d+\.4s", asm), "NEON arithmetic left"
        # the GEMM template (odd sizes): predicated SVE instructions at the edges
        A, B = tc.placeholder((19, 24), name="A"), tc.placeholder((24, 44), name="B")
        C = nn.matmul(A, B)
        asm = tc.build(cpu.schedule_matmul(C, target=t), [A, B, C], target=t,
                       name="mm").get_source("asm")
        assert re.search(r"\bptrue\s+p\d+\.s", asm) and re.search(r"\bfmla\s+z\d+\.s, p\d+/m", asm)
    assert tc.Target(SVE).sve_vector_bits is None and tc.Target(SVE).lanes == 4


@needs_qemu
def test_fixed_length_sve_under_qemu(tmp_path):
    """GEMM, softmax and conv2d (templates, odd sizes) built for 256-bit SVE run under
    ``qemu-aarch64 -cpu max,sve256=on`` and match numpy (the whole template matrix:
    test_templates_under_qemu with TECOMP_LONG_TESTS=1)."""
    rng = np.random.default_rng(1)
    _check_matmul(tmp_path, SVE256, rng, 19, 44, 24)
    _check_softmax(tmp_path, SVE256, rng, 9, 37)
    _check_conv_nchw(tmp_path, SVE256, rng, 1, 8, 12, 11, 1)


@needs_qemu
def test_symbolic_sizes_scalars_and_threads(tmp_path):
    n = tc.var("n")
    A = tc.placeholder((n, 12), name="A", dtype="float64")
    alpha = tc.var("alpha", dtype="float64")
    B = tc.compute((n, 12), lambda i, j: A[i, j] * alpha + tc.sqrt(tc.abs(A[i, j])), name="B")
    s = tc.create_schedule(B.op)
    s[B].parallel(B.op.axis[0])
    s[B].vectorize(B.op.axis[1])
    f = tc.build(s, [A, alpha, B], target=NEON, name="axpy")
    f.export_library(tmp_path / "axpy.so")
    for rows, threads in ((1, 1), (37, 2), (100, 4)):
        a = np.random.default_rng(rows).standard_normal((rows, 12))
        b = np.zeros_like(a)
        qemu.run_library(tmp_path / "axpy.so", a, 0.5, b, threads=threads)
        np.testing.assert_allclose(b, a * 0.5 + np.sqrt(np.abs(a)), rtol=1e-15)


@needs_qemu
def test_kernel_errors_come_back(tmp_path):
    n = tc.var("n")
    A = tc.placeholder((n,), name="A")
    B = tc.compute((n,), lambda i: A[i * 2], name="B")   # reads past A's end
    s = tc.create_schedule(B.op)
    f = tc.build(s, [A, B], target=NEON, name="oob", checks=True)
    f.export_library(tmp_path / "oob.so")
    with pytest.raises(tc.BoundsError, match=r"buffer A: index \d+ is outside \[0, 8\).*"
                                             r"under qemu"):
        qemu.run_library(tmp_path / "oob.so", np.zeros(8, "float32"), np.zeros(8, "float32"))


@needs_qemu
@pytest.mark.parametrize("target", [NEON, SVE])
def test_fuzz_cases_under_qemu(target):
    """The fuzzer's cases (programs, schedules, the auto-scheduler's, int8 GEMMs) built for
    aarch64, run under qemu and compared with numpy and the interpreter; the 500-case
    campaign is ``python -m tecomp.testing.fuzz --cpu-target '<target>' --gpu-every 0
    --edge-every 0`` (benchmarks/RESULTS.md).  By default four cases per target, a
    different four for each; twelve each with TECOMP_LONG_TESTS=1."""
    first = 20000000 if (_LONG or target == NEON) else 20000004
    for seed in range(first, first + (12 if _LONG else 4)):
        case = case_for_seed(seed, 0, 5, target, 10)
        out = run_case(case)
        assert out.kind in ("ok", "rejected"), out.report()
        assert out.kind == "rejected" or case.target == target


@needs_qemu
def test_vector_math_is_the_same_bits_on_aarch64_and_x86(tmp_path):
    """tecomp's own float32 exp, log, tanh and erf (plain vector code with explicit FMAs,
    never contracted) give the same bits on aarch64 (NEON, under qemu) as on an x86 CPU
    with FMA, on every 65521st float32 bit pattern; erf as x86 computes it without AVX2
    (with AVX2 it reads per-segment coefficients from tables: another polynomial,
    docs/numerics.md), log as it computes it without AVX-512 (with it: a table of 16)."""
    host = tc.Target("llvm")
    if host.isa != "x86-64" or not host.has_feature("fma"):
        pytest.skip("compares with x86 code with FMA, which this machine cannot run")
    x = np.arange(0, 1 << 32, 65521, dtype=np.uint64).astype(np.uint32).view(np.float32)
    n = x.size
    for fn in ("exp", "log", "tanh", "erf"):
        A = tc.placeholder((n,), name="A")
        B = tc.compute((n,), lambda i: getattr(tc, fn)(A[i]), name="B")
        s = tc.create_schedule(B.op)
        _, inner = s[B].split(B.op.axis[0], 4)
        s[B].vectorize(inner)
        arm = np.zeros(n, np.float32)
        tc.build(s, [A, B], target=NEON, name=fn).export_library(tmp_path / f"{fn}.so")
        qemu.run_library(tmp_path / f"{fn}.so", x, arm, threads=1)
        mine = np.zeros(n, np.float32)
        x86 = {"erf": "llvm -mcpu=haswell -mattr=-avx2", "log": "llvm -mcpu=haswell"}.get(fn, "llvm")
        tc.build(s, [A, B], target=x86, name=fn)(x, mine)
        np.testing.assert_array_equal(arm.view(np.uint32), mine.view(np.uint32), err_msg=fn)


def _int8_gemm(M, N, K, dx="uint8", dw="int8", batch=0):
    """C[i, j] = sum_k X[i, k] W[k, j]; with ``batch``, C[b, i, j] = sum_k X[b, i, k]
    W[b, j, k] (W's rows along k)."""
    k = tc.reduce_axis((0, K), name="k")
    if batch:
        X = tc.placeholder((batch, M, K), dx, name="X")
        W = tc.placeholder((batch, N, K), dw, name="W")
        C = tc.compute((batch, M, N), lambda b, i, j: tc.sum(
            X[b, i, k].astype("int32") * W[b, j, k].astype("int32"), axis=k), name="C")
        return [X, W, C]
    X = tc.placeholder((M, K), dx, name="X")
    W = tc.placeholder((K, N), dw, name="W")
    C = tc.compute((M, N), lambda i, j: tc.sum(
        X[i, k].astype("int32") * W[k, j].astype("int32"), axis=k), name="C")
    return [X, W, C]


def _innermost_loops(asm):
    """The bodies (instruction lines) of the loops that branch back to their own label."""
    lines = asm.split("\n")
    for i, line in enumerate(lines):
        m = re.match(r"(\.LBB\S+):", line)
        for j in range(i + 1, len(lines)) if m else ():
            if re.match(r"\.LBB\S+:", lines[j]):
                break
            if re.search(r"\tb(\.\w+)?\t" + re.escape(m.group(1)) + "$", lines[j]):
                yield [x for x in lines[i + 1:j + 1] if x.startswith("\t") and x[1] != "."]
                break


def test_int8_gemm_picks_smmla_where_blocks_fit():
    """With i8mm, the auto-scheduler computes an int8 GEMM in 2 x 2 blocks of smmla-family
    instructions (32 multiply-adds each, usdot's 16) whose accumulators stay in registers
    across the reduction (no combine/split or store in the loop); the dot product where
    the rows are odd; no i8mm, no smmla."""
    args = _int8_gemm(64, 64, 256)
    s = tc.auto_schedule(args, target=SVE)
    assert "tc.tensor_intrin('aarch64.usmmla_u8s8s32_2x2x8')" in s.trace.python(args)
    asm = tc.build(s, args, target=SVE, name="i8").get_source("asm")
    loops = [b for b in _innermost_loops(asm) if any("\tusmmla\t" in x for x in b)]
    assert len(loops) == 1, loops
    body = loops[0]
    assert not [x for x in body if re.match(r"\t(ext|mov|ins|str|stp|st1)\t", x)], body
    # the block's 8 accumulators share each load of W, X's row pairs in paired loads
    assert sum("\tusmmla\t" in x for x in body) == 8 and len(body) <= 20, body
    odd = _int8_gemm(13, 36, 64)
    assert "aarch64.usdot_u8s8s32_4x4" in tc.auto_schedule(odd, target=SVE).trace.python(odd)
    sym = _int8_gemm(16, 16, 64, "int8", "int8")
    assert "tensor_intrin" not in tc.auto_schedule(sym, target=NEON).trace.python(sym)


@needs_qemu
@pytest.mark.parametrize("target,dtypes,intrin,insn", [
    (NEON, "uint8,int8", "aarch64.neon_u8s8s32_4x4", r"\b[su]mull2?\s"),
    (SVE, "uint8,int8", "aarch64.usdot_u8s8s32_4x4", r"\busdot\s"),
    (SVE, "uint8,int8", "aarch64.usmmla_u8s8s32_2x2x8", r"\busmmla\s"),
    (SVE, "int8,int8,batch", "aarch64.smmla_s8s8s32_2x2x8", r"\bsmmla\s"),
    (SVE, "uint8,uint8", "aarch64.ummla_u8u8s32_2x2x8", r"\bummla\s"),
])
def test_int8_gemm_on_dot_products_under_qemu(tmp_path, target, dtypes, intrin, insn):
    """An int8 GEMM written in plain TE (8-bit operands summed in int32) is tensorized
    with the target's intrinsic by the auto-scheduler (the default: the one with the
    most multiply-adds, here usmmla/smmla/ummla; usdot chosen through its knob), and is
    exact under qemu, extreme values included (255 x -128, 255 x 255, -128 x -128, and
    sums that use all of int32's sign); the int8 x int8 case batched, W's rows along k."""
    dx, dw, *batch = dtypes.split(",")
    M, N, K = 14, 36, 64
    args = _int8_gemm(M, N, K, dx, dw, 3 if batch else 0)
    if intrin.startswith("aarch64.usdot"):
        s = apply_rules(args, Knobs({"tensorize.C": intrin}), tc.Target(target).machine)
    else:
        s = tc.auto_schedule(args, target=target)
    assert f"tc.tensor_intrin('{intrin}')" in s.trace.python(args)
    assert re.search(insn, tc.build(s, args, target=target, name="i8").get_source("asm"))
    rng = np.random.default_rng(7)
    info = {d: np.iinfo(d) for d in (dx, dw)}
    x = rng.integers(info[dx].min, info[dx].max + 1, tuple(int(e) for e in args[0].shape))
    w = rng.integers(info[dw].min, info[dw].max + 1, tuple(int(e) for e in args[1].shape))
    x, w = x.astype(dx), w.astype(dw)
    if batch:
        w = w.swapaxes(-1, -2)          # (a view: W[b, k, j] for the extremes and numpy)
    x[..., 0, :], w[..., :, 0] = info[dx].max, info[dw].min
    x[..., 1, :], w[..., :, 1] = info[dx].min, info[dw].max
    if batch:
        w = np.ascontiguousarray(w.swapaxes(-1, -2))
    c, = _run(tmp_path, s, args, [x, w], target, "i8")
    want = x.astype(np.int64) @ (w.astype(np.int64).swapaxes(-1, -2) if batch else w)
    np.testing.assert_array_equal(c, want)
