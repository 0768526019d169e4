"""bfloat16 in the CUDA C backends: a storage type (loads widen to float, stores round to
nearest even, as on the CPU), and tensor-core GEMMs of bfloat16 operands with float32
accumulation on both families (``nvcuda::wmma`` fragments of ``__nv_bfloat16``, and PTX
``mma.sync.m16n8k16.bf16``).

The CUDA emulation must agree with the CPU code bit for bit on the storage semantics
(the same rounding, special values included); the tensor-core GEMMs are checked against
numpy in float32; nvcc's PTX shows the instructions."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

import tecomp as tc
from tecomp.nn import ops
from tecomp.runtime.nvcc import compile_ptx, find_nvcc
from tecomp.strategy.cuda.tensorcore import WmmaConfig, schedule_wmma_gemm
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


def _gemms(rng):
    X = tc.placeholder((64, 96), "bfloat16", name="X")
    W = tc.placeholder((48, 96), "bfloat16", name="W")
    A = tc.placeholder((2, 32, 64), "bfloat16", name="A")
    B = tc.placeholder((2, 32, 48), "bfloat16", name="B")

    def bf(*shape):
        return rng.standard_normal(shape).astype(np.float32).astype(BF16)
    x, w, a, b = bf(64, 96), bf(48, 96), bf(2, 32, 64), bf(2, 32, 48)
    f32 = np.float32
    return [
        ([X, W, ops.dense(X, W, out_dtype="float32")], [x, w],
         x.astype(f32) @ w.astype(f32).T),
        ([A, B, ops.batch_matmul(A, B, transpose_a=True, out_dtype="float32")], [a, b],
         np.einsum("bki,bkj->bij", a.astype(f32), b.astype(f32))),
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


def test_the_rules_put_a_bfloat16_gemm_on_tensor_cores():
    X = tc.placeholder((256, 128), "bfloat16", name="X")
    W = tc.placeholder((128, 128), "bfloat16", name="W")
    C = ops.dense(X, W, out_dtype="float32")
    src = tc.build(tc.auto_schedule([X, W, C], target="cuda"), [X, W, C],
                   target="cuda -arch=sm_90").get_source()
    assert "nvcuda::wmma::mma_sync(" in src and "__nv_bfloat16" in src


@needs_nvcc
@pytest.mark.parametrize("family", ["wmma", "mma"])
def test_ptx_holds_the_bfloat16_instructions(family):
    X = tc.placeholder((128, 64), "bfloat16", name="X")
    W = tc.placeholder((128, 64), "bfloat16", name="W")
    C = ops.dense(X, W, out_dtype="float32")
    O = tc.compute((128, 128), lambda i, j: (C[i, j] * 0.5).astype("bfloat16"), name="O")
    s = tc.create_schedule([C.op, O.op])
    schedule_wmma_gemm(s, C, WmmaConfig(2, 2, 2, 2, 32, family=family))
    so = s[O]
    bo, bi = so.split(so.fuse(*O.op.axis), 128)
    so.bind(bo, tc.thread_axis("blockIdx.x"))
    so.bind(bi, tc.thread_axis("threadIdx.x"))
    ptx = compile_ptx(tc.build(s, [X, W, C, O], target="cuda -arch=sm_80").get_source(), "sm_80")
    assert "cvt.rn.bf16.f32" in ptx
    if family == "mma":
        assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in ptx
    else:
        assert "wmma.mma.sync.aligned.row.col.m16n16k16.f32.bf16.bf16.f32" in ptx


@pytest.mark.gpu
@pytest.mark.parametrize("family", ["wmma", "mma"])
def test_tensor_core_gemm_of_bfloat16_on_the_gpu(gpu_driver, family):
    for args, ins, want in _gemms(np.random.default_rng(4)):
        s = tc.create_schedule(args[-1].op)
        schedule_wmma_gemm(s, args[-1], WmmaConfig(1, 1, 2, 3, 32, family=family))
        mod = tc.build(s, args, target="cuda")
        out = np.full(want.shape, np.nan, np.float32)
        mod(*ins, out)
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-4)
