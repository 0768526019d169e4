"""The CUDA C backends' dtypes beyond float16: bfloat16 as a storage type (loads widen to
float, stores round to nearest even, as on the CPU), tensor-core GEMMs of bfloat16
operands with float32 accumulation on both families (``nvcuda::wmma`` fragments of
``__nv_bfloat16``, and PTX ``mma.sync.m16n8k16.bf16``), and float32 GEMMs on the tensor
cores as tf32 when a WmmaConfig asks for it (``mma.sync.m16n8k8.tf32``; off by default).

The CUDA emulation must agree with the CPU code bit for bit on the storage semantics
(the same rounding, special values included); the tensor-core GEMMs are checked against
numpy; nvcc's PTX shows the instructions."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

import tecomp as tc
from tecomp.nn import ops
from tecomp.runtime.nvcc import compile_ptx, find_nvcc
from tecomp.strategy.cuda.tensorcore import WmmaConfig, schedule_wmma_gemm
from tecomp.testing.gpu_resources import ptxas_usage
from helpers import gpu_driver  # noqa: F401  (a fixture)

ml_dtypes = pytest.importorskip("ml_dtypes")
BF16 = ml_dtypes.bfloat16

needs_cxx = pytest.mark.skipif(shutil.which("g++") is None and shutil.which("clang++") is None,
                               reason="the CUDA emulation needs a C++ compiler")
needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc is not on PATH")


def _special_values():
    """Every class a float32 -> bfloat16 rounding meets: ties (to even, both ways),
    values just above and below a tie, overflow to inf on rounding, the largest finite
    bfloat16, subnormals, signed zeros, inf and NaN."""
    bits = np.array([
        0x3F808000, 0x3F818000,   # ties: round down to even, round up to even
        0x3F808001, 0x3F807FFF,   # just above / below a tie
        0x7F7FFFFF, 0x7F7F7FFF,   # rounds to inf / to the largest finite bfloat16
        0x00000001, 0x00008000, 0x007FFFFF, 0x80000001,   # subnormals
        0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00001,
    ], dtype=np.uint32)
    rng = np.random.default_rng(5)
    return np.concatenate([bits.view(np.float32), rng.standard_normal(48).astype(np.float32) * 50])


@needs_cxx
def test_storage_semantics_match_the_cpu_bit_for_bit():
    """float32 -> bfloat16 stores, bfloat16 loads, arithmetic in float, a float64 value
    rounded through float (as the CPU code and the interpreter do), a bfloat16 constant,
    and a cast to bfloat16 inside an expression: the emulation's bits equal the CPU's."""
    x = _special_values()
    n = x.size
    X = tc.placeholder((n,), "float32", name="X")
    D = tc.placeholder((n,), "float64", name="D")
    H = tc.placeholder((n,), "bfloat16", name="H")
    Y = tc.compute((n,), lambda i: X[i].astype("bfloat16"), name="Y")
    Z = tc.compute((n,), lambda i: (H[i] * tc.const(3.1, "bfloat16")
                                    + D[i].astype("bfloat16")).astype("bfloat16"), name="Z")
    W = tc.compute((n,), lambda i: (H[i].astype("float32") * 1.001).astype("bfloat16")
                   .astype("float32") + X[i], name="W")
    d = (x.astype(np.float64) * (1 + 2.0 ** -30))
    h = x.astype(BF16)
    args, outs = [X, D, H, Y, Z, W], (Y, Z, W)
    cpu = [np.zeros(n, BF16), np.zeros(n, BF16), np.zeros(n, np.float32)]
    emu = [a.copy() for a in cpu]
    tc.build(tc.create_schedule([o.op for o in outs]), args, target="llvm")(x, d, h, *cpu)
    s = tc.create_schedule([o.op for o in outs])
    for o in outs:
        bo, bi = s[o].split(o.op.axis[0], 32)
        s[o].bind(bo, tc.thread_axis("blockIdx.x"))
        s[o].bind(bi, tc.thread_axis("threadIdx.x"))
    mod = tc.build(s, args, target="cuda-emu")
    assert "__nv_bfloat16" in mod.get_source()
    mod(x, d, h, *emu)
    for o, c, e in zip(outs, cpu, emu):
        _same_bits(c, e, o.name)


def _same_bits(cpu, emu, what):
    """Equal bit for bit (signed zeros apart), NaN where the other has NaN."""
    nan = np.isnan(cpu.astype(np.float64))
    assert np.array_equal(nan, np.isnan(emu.astype(np.float64))), what
    bits = np.uint16 if cpu.dtype.itemsize == 2 else np.uint32
    assert np.array_equal(cpu[~nan].view(bits), emu[~nan].view(bits)), what


@needs_cxx
def test_auto_scheduled_reduction_and_epilogue():
    """A row sum of bfloat16 (float32 accumulation, warp shuffles) with a bfloat16
    epilogue, scheduled by the GPU auto-scheduler, in the emulation."""
    rng = np.random.default_rng(1)
    A = tc.placeholder((37, 300), "bfloat16", name="A")
    k = tc.reduce_axis((0, 300), name="k")
    S = tc.compute((37,), lambda i: tc.sum(A[i, k].astype("float32"), axis=k), name="S")
    O = tc.compute((37,), lambda i: tc.tanh(S[i]).astype("bfloat16"), name="O")
    a = rng.standard_normal((37, 300)).astype(BF16)
    mod = tc.build(tc.auto_schedule([A, O], target="cuda-emu"), [A, O], target="cuda-emu")
    out = np.zeros(37, BF16)
    mod(a, out)
    want = np.tanh(a.astype(np.float64).sum(1))
    np.testing.assert_allclose(out.astype(np.float64), want, rtol=1e-2, atol=1e-2)


def _tf32(x):
    """``x`` (float32) rounded to tf32 as cvt.rna.tf32.f32 does (to nearest, ties away)."""
    b = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((b + 0x1000) & 0xFFFFE000).astype(np.uint32).view(np.float32)


def _gemms(rng, dtype="bfloat16"):
    """Two GEMMs (a dense, a batched one with A stored k-first) of ``dtype`` operands, and
    what they compute in float64 from the operands as the tensor cores read them."""
    X = tc.placeholder((64, 96), dtype, name="X")
    W = tc.placeholder((48, 96), dtype, name="W")
    A = tc.placeholder((2, 32, 64), dtype, name="A")
    B = tc.placeholder((2, 32, 48), dtype, name="B")

    def make(*shape):
        v = rng.standard_normal(shape).astype(np.float32)
        return v.astype(BF16) if dtype == "bfloat16" else v
    x, w, a, b = make(64, 96), make(48, 96), make(2, 32, 64), make(2, 32, 48)

    def seen(v):   # the operand as the tensor cores read it, in float64
        return (_tf32(v) if dtype == "float32" else v.astype(np.float32)).astype(np.float64)
    out = {} if dtype == "float32" else {"out_dtype": "float32"}
    return [
        ([X, W, ops.dense(X, W, **out)], [x, w], seen(x) @ seen(w).T),
        ([A, B, ops.batch_matmul(A, B, transpose_a=True, **out)], [a, b],
         np.einsum("bki,bkj->bij", seen(a), seen(b))),
    ]


@needs_cxx
@pytest.mark.parametrize("family", ["wmma", "mma"])
def test_tensor_core_gemm_of_bfloat16(family):
    """Both tensor-core families take bfloat16 operands (float32 accumulation), the
    operands stored either way round, batched; the products of bfloat16 values are exact
    in float32, so only the order of the sums differs from numpy's."""
    for args, ins, want in _gemms(np.random.default_rng(3)):
        s = tc.create_schedule(args[-1].op)
        schedule_wmma_gemm(s, args[-1], WmmaConfig(1, 1, 2, 3, 32, family=family))
        mod = tc.build(s, args, target="cuda-emu")
        src = mod.get_source()
        if family == "mma":
            assert "tc_mma_m16n8k16_bf16(" in src
        else:
            assert "__nv_bfloat16, nvcuda::wmma::" in src
        out = np.full(want.shape, np.nan, np.float32)
        mod(*ins, out)
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-4)


@needs_cxx
def test_tf32_gemm_when_asked_for():
    """``WmmaConfig(family="mma", tf32=True)``: a float32 GEMM on the tensor cores, each
    operand rounded to tf32 as it is loaded (cvt.rna), the sums in float32: the result is
    the product of the tf32-rounded operands (and not float32's: tf32 is a choice)."""
    for args, ins, want in _gemms(np.random.default_rng(6), "float32"):
        s = tc.create_schedule(args[-1].op)
        schedule_wmma_gemm(s, args[-1], WmmaConfig(1, 1, 2, 3, 32, family="mma", tf32=True))
        mod = tc.build(s, args, target="cuda-emu")
        assert "tc_mma_m16n8k8_tf32(" in mod.get_source()
        out = np.full(want.shape, np.nan, np.float32)
        mod(*ins, out)
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-4)
        exact = (np.einsum("bki,bkj->bij", *[v.astype(np.float64) for v in ins])
                 if out.ndim == 3 else ins[0].astype(np.float64) @ ins[1].astype(np.float64).T)
        assert np.abs(out - exact).max() > 1e-3    # tf32's 10 mantissa bits, not float32's


def test_float32_gemm_stays_off_the_tensor_cores_by_default():
    """TF32 is off unless asked for (as PyTorch's allow_tf32): the GPU rules give a
    float32 GEMM the CUDA-core template."""
    X = tc.placeholder((256, 128), "float32", name="X")
    W = tc.placeholder((128, 128), "float32", name="W")
    C = ops.dense(X, W)
    src = tc.build(tc.auto_schedule([X, W, C], target="cuda"), [X, W, C],
                   target="cuda -arch=sm_90").get_source()
    assert "mma" not in src and "tf32" not in src


def test_the_rules_put_a_bfloat16_gemm_on_tensor_cores():
    X = tc.placeholder((256, 128), "bfloat16", name="X")
    W = tc.placeholder((128, 128), "bfloat16", name="W")
    C = ops.dense(X, W, out_dtype="float32")
    src = tc.build(tc.auto_schedule([X, W, C], target="cuda"), [X, W, C],
                   target="cuda -arch=sm_90").get_source()
    assert "nvcuda::wmma::mma_sync(" in src and "__nv_bfloat16" in src


@needs_nvcc
@pytest.mark.parametrize("family, dtype", [("wmma", "bfloat16"), ("mma", "bfloat16"),
                                           ("mma", "float32")], ids=["wmma bf16", "mma bf16",
                                                                     "mma tf32"])
def test_ptx_holds_the_instructions_and_nothing_spills(family, dtype):
    X = tc.placeholder((256, 64), dtype, name="X")
    W = tc.placeholder((256, 64), dtype, name="W")
    C = ops.dense(X, W, out_dtype="float32")
    O = tc.compute((256, 256), lambda i, j: (C[i, j] * 0.5).astype("bfloat16"), name="O")
    s = tc.create_schedule([C.op, O.op])
    schedule_wmma_gemm(s, C, WmmaConfig(2, 2, 4, 4, 32, family=family, tf32=dtype == "float32"))
    so = s[O]
    bo, bi = so.split(so.fuse(*O.op.axis), 128)
    so.bind(bo, tc.thread_axis("blockIdx.x"))
    so.bind(bi, tc.thread_axis("threadIdx.x"))
    src = tc.build(s, [X, W, C, O], target="cuda -arch=sm_80").get_source()
    ptx = compile_ptx(src, "sm_80")
    assert "cvt.rn.bf16.f32" in ptx and "cp.async" in ptx
    want = {"wmma bfloat16": "wmma.mma.sync.aligned.row.col.m16n16k16.f32.bf16.bf16.f32",
            "mma bfloat16": "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
            "mma float32": "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"}
    assert want[f"{family} {dtype}"] in ptx
    if dtype == "float32":
        assert "cvt.rna.tf32.f32" in ptx
    for kernel, use in ptxas_usage(src, "sm_80").items():
        assert use["spill_stores"] == use["spill_loads"] == use["stack"] == 0, (kernel, use)


@pytest.mark.gpu
@pytest.mark.parametrize("family, dtype", [("wmma", "bfloat16"), ("mma", "bfloat16"),
                                           ("mma", "float32")])
def test_tensor_core_gemms_on_the_gpu(gpu_driver, family, dtype):
    for args, ins, want in _gemms(np.random.default_rng(4), dtype):
        s = tc.create_schedule(args[-1].op)
        schedule_wmma_gemm(s, args[-1], WmmaConfig(1, 1, 2, 3, 32, family=family,
                                                   tf32=dtype == "float32"))
        mod = tc.build(s, args, target="cuda")
        out = np.full(want.shape, np.nan, np.float32)
        mod(*ins, out)
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-4)
