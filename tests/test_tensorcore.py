"""Tensor cores: the wmma fragment scopes and intrinsics (tecomp.te.intrin_cuda), the
tensor-core GEMM template (tecomp.strategy.cuda.tensorcore).

Without a GPU the CUDA emulation runs the generated CUDA C (each intrinsic's declared
computation on whole tiles) and nvcc compiles it to PTX; ``gpu``-marked tests run it on a
GPU."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

import tecomp as tc
from tecomp.runtime.nvcc import compile_ptx, find_nvcc
from tecomp.errors import ArgumentError
from tecomp.strategy import cuda as sc
from tecomp.nn import ops
from tecomp.strategy.cuda import WmmaConfig, wmma_config
from helpers import gpu_driver  # noqa: F401  (a fixture)
from wmma_examples import hand_schedule, hgemm, inputs

needs_cxx = pytest.mark.skipif(shutil.which("g++") is None and shutil.which("clang++") is None,
                               reason="the CUDA emulation needs a C++ compiler")
needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc is not on PATH")


def close(got, want, K):
    # float16 products are exact in float32; only the float32 sums round
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * K * np.abs(want).max() / 16)


# --------------------------------------------------------------------------- emulation


def run_hand_schedule(target):
    """The hand-written schedule of 64 x 128 x 96, built for ``target``, run and checked."""
    s, args, _ = hand_schedule(64, 128, 96)
    mod = tc.build(s, list(args), target=target)
    a, b, want = inputs(64, 128, 96)
    c = np.full((64, 128), np.nan, np.float32)
    mod(a, b, c)
    close(c, want, 96)
    return mod


@needs_cxx
def test_hand_written_wmma_schedule_runs_in_the_emulation():
    src = run_hand_schedule("cuda-emu").get_source()
    assert "#include <mma.h>" in src
    assert "nvcuda::wmma::fill_fragment(matmul_wmma_accumulator[" in src
    assert "nvcuda::wmma::mma_sync(" in src
    assert "nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, half, " \
           "nvcuda::wmma::row_major> A_shared_wmma_matrix_a[2];" in src


def test_the_printed_ir_shows_the_fill_and_each_intrinsic():
    s, args, _ = hand_schedule()
    text = str(tc.lower(s, list(args), target="cuda"))
    for name in ("fill_f32", "load_a_f16", "load_b_f16", "mma_f16f16f32", "store_f32"):
        assert f"tensorize cuda.wmma_{name} " in text
    # the accumulator is set to 0 by the fill, once per fragment, before the k loop
    assert text.index("cuda.wmma_fill_f32") < text.index("for (k.outer, 0, 2)")


@needs_cxx
@pytest.mark.parametrize("M,N,K,cfg", [
    (128, 256, 64, WmmaConfig(2, 4, 4, 2, 32)),
    (128, 128, 64, WmmaConfig(2, 2, 4, 4, 32)),
    (64, 64, 64, None),                        # 32 x 32 tiles: the most blocks
    (96, 48, 32, None),                        # only 16 x 16 tiles divide
    (64, 64, 64, WmmaConfig(2, 2, 2, 2, 32, double_buffer=False)),
    (128, 256, 128, WmmaConfig(2, 4, 4, 4, 32)),  # 54272 bytes of shared memory: dynamic
])
def test_template_matches_numpy_in_the_emulation(M, N, K, cfg):
    A, B, C = hgemm(M, N, K)
    s = sc.schedule_matmul(C, "cuda-emu", config=cfg)
    mod = tc.build(s, [A, B, C], target="cuda-emu")
    assert "mma_sync" in mod.get_source()
    a, b, want = inputs(M, N, K, seed=M + N + K)
    c = np.full((M, N), np.nan, np.float32)
    mod(a, b, c)
    close(c, want, K)


def _f16(rng, *shape):
    return rng.standard_normal(shape, dtype=np.float32).astype(np.float16)


def _transposed_cases():
    """(name, args, inputs, want, schedule) of the GEMMs whose operands are not both
    row major: dense (W[N, K]: column-major B fragments), batched with K transposed
    (attention's scores) and with A transposed, through the template or the GPU rules."""
    from tecomp.strategy.cuda_rules import apply_cuda_rules

    rng = np.random.default_rng(7)
    f32 = np.float32
    X = tc.placeholder((64, 96), "float16", name="X")
    W = tc.placeholder((128, 96), "float16", name="W")
    Y = ops.dense(X, W, out_dtype="float32")
    x, w = _f16(rng, 64, 96), _f16(rng, 128, 96)
    yield ("dense", [X, W, Y], [x, w], x.astype(f32) @ w.astype(f32).T,
           lambda t: sc.schedule_dense(Y, t))
    A = tc.placeholder((3, 64, 32), "float16", name="A")
    B = tc.placeholder((3, 48, 32), "float16", name="B")
    C = ops.batch_matmul(A, B, transpose_b=True, out_dtype="float32")
    a, b = _f16(rng, 3, 64, 32), _f16(rng, 3, 48, 32)
    yield ("bmm K^T", [A, B, C], [a, b], np.einsum("bik,bjk->bij", a.astype(f32), b.astype(f32)),
           lambda t, args=[A, B, C]: apply_cuda_rules(args))
    A2 = tc.placeholder((2, 32, 64), "float16", name="A")
    B2 = tc.placeholder((2, 32, 48), "float16", name="B")
    C2 = ops.batch_matmul(A2, B2, transpose_a=True, out_dtype="float32")
    a2, b2 = _f16(rng, 2, 32, 64), _f16(rng, 2, 32, 48)
    yield ("bmm A^T", [A2, B2, C2], [a2, b2],
           np.einsum("bki,bkj->bij", a2.astype(f32), b2.astype(f32)),
           lambda t, args=[A2, B2, C2]: apply_cuda_rules(args))


def run_transposed(target):
    for name, args, ins, want, sched in _transposed_cases():
        mod = tc.build(sched(target), args, target=target)
        src = mod.get_source()
        assert "mma_sync" in src and "col_major" in src, name
        out = np.full(want.shape, np.nan, np.float32)
        mod(*ins, out)
        close(out, want, ins[0].shape[-1])


@needs_cxx
def test_transposed_and_batched_operands_in_the_emulation():
    run_transposed("cuda-emu")


@needs_nvcc
def test_transposed_operands_compile_to_ptx():
    for name, args, _, _, sched in _transposed_cases():
        mod = tc.build(sched("cuda"), args, target="cuda")
        ptx = compile_ptx(mod.get_source(), "sm_90")
        assert "wmma.load.b.sync.aligned.col" in ptx or "wmma.load.a.sync.aligned.col" in ptx, \
            name


@needs_cxx
def test_a_gemv_uses_the_cuda_core_gemm():
    """One row of A: a 16-row tile of tensor cores would compute 15 rows of zeros (odd
    extents that waste less are padded: tests/test_tensorcore_edges.py)."""
    A, B, C = hgemm(1, 24, 40)
    assert wmma_config(1, 24, 40) is None
    mod = tc.build(sc.schedule_matmul(C, "cuda-emu"), [A, B, C], target="cuda-emu")
    assert "wmma" not in mod.get_source()
    a, b, want = inputs(1, 24, 40)
    c = np.zeros((1, 24), np.float32)
    mod(a, b, c)
    close(c, want, 40)


def test_wmma_config_choices():
    assert wmma_config(4096, 4096, 4096) == WmmaConfig(2, 2, 4, 4, 64)   # 128 x 128 blocks
    assert wmma_config(4096, 4096, 4064) == WmmaConfig(2, 4, 4, 2, 32)   # k steps of 32
    assert wmma_config(1024, 1024, 1024) == WmmaConfig(2, 2, 2, 2, 32)   # 64 x 64: 256 blocks
    assert wmma_config(48, 48, 48) == WmmaConfig(1, 1, 1, 1, 16)
    assert wmma_config(40, 48, 48) == WmmaConfig(1, 1, 1, 1, 16)   # padded: 48 rows
    assert wmma_config(None, 64, 64) is None
    c = wmma_config(4096, 4096, 4096)
    assert (c.block_m, c.block_n, c.threads) == (128, 128, 128)


def test_float32_operands_take_the_cuda_core_gemm_and_float16_results_tensor_cores():
    # float32 operands (without tf32): the CUDA-core GEMM
    A = tc.placeholder((64, 64), name="A")
    B = tc.placeholder((64, 64), name="B")
    s = sc.schedule_matmul(ops.matmul(A, B), "cuda")
    assert "wmma" not in str(tc.lower(s, [A, B, s.outputs[0].output(0)]))
    # float16 operands summed in float32 into a float16 result (matmul's default): tensor
    # cores, the rounding applied from the tile of C in shared memory
    A, B, _ = hgemm(64, 64, 64)
    C16 = ops.matmul(A, B)
    s = sc.schedule_matmul(C16, "cuda")
    assert "tensorize cuda.wmma_mma_f16f16f32" in str(tc.lower(s, [A, B, C16]))


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_ptx_has_tensor_core_instructions(arch):
    A, B, C = hgemm(256, 256, 128)
    mod = tc.build(sc.schedule_matmul(C, "cuda"), [A, B, C], target="cuda")
    ptx = compile_ptx(mod.get_source(), arch)
    assert "wmma.mma.sync" in ptx and "wmma.load.a.sync" in ptx and "wmma.store.d.sync" in ptx
    assert "cp.async" in ptx  # the double-buffered tiles


def test_global_tiles_require_aligned_arrays_when_called():
    A, B, C = hgemm(64, 64, 64)
    mod = tc.build(sc.schedule_matmul(C, "cuda"), [A, B, C], target="cuda")
    params = {p.name: p.align for p in mod.kernels[0].params}
    assert params == {"A": 0, "B": 0, "matmul": 32}   # A and B reach wmma through shared memory


# --------------------------------------------------------------------------- GPU


@pytest.mark.gpu
@pytest.mark.parametrize("M,N,K", [(256, 128, 64), (1024, 1024, 1024), (96, 48, 32)])
def test_tensor_core_gemm_on_the_gpu(gpu_driver, M, N, K):
    A, B, C = hgemm(M, N, K)
    mod = tc.build(sc.schedule_matmul(C, "cuda"), [A, B, C], target="cuda")
    a, b, want = inputs(M, N, K)
    c = np.full((M, N), np.nan, np.float32)
    mod(a, b, c)
    close(c, want, K)


@pytest.mark.gpu
def test_dynamic_shared_memory_on_the_gpu(gpu_driver):
    """128 x 256 blocks: 54272 bytes of shared memory, declared dynamic and opted in to;
    launched plainly and on a stream (through the driver API)."""
    import pycuda.driver as cuda
    import pycuda.gpuarray as gpuarray

    A, B, C = hgemm(256, 512, 128)
    mod = tc.build(sc.schedule_matmul(C, "cuda", config=WmmaConfig(2, 4, 4, 4, 32)),
                   [A, B, C], target="cuda")
    assert mod.kernels[0].dynamic_shared == 54272
    a, b, want = inputs(256, 512, 128)
    c = np.full((256, 512), np.nan, np.float32)
    mod(a, b, c)
    close(c, want, 128)
    stream = cuda.Stream()
    da, db = gpuarray.to_gpu(a), gpuarray.to_gpu(b)
    dc = gpuarray.zeros((256, 512), np.float32)
    mod(da, db, dc, stream=stream)
    stream.synchronize()
    close(dc.get(), want, 128)


@pytest.mark.gpu
def test_transposed_and_batched_operands_on_the_gpu(gpu_driver):
    run_transposed("cuda")


@pytest.mark.gpu
def test_hand_written_wmma_schedule_on_the_gpu(gpu_driver):
    run_hand_schedule("cuda")


@pytest.mark.gpu
def test_a_misaligned_device_array_is_refused(gpu_driver):
    import pycuda.gpuarray as gpuarray

    A, B, C = hgemm(64, 64, 64)
    mod = tc.build(sc.schedule_matmul(C, "cuda"), [A, B, C], target="cuda")
    a, b, want = inputs(64, 64, 64)
    big = gpuarray.zeros(64 * 64 + 4, np.float32)
    view = big[4:].reshape(64, 64)     # 16 bytes past an aligned start
    with pytest.raises(ArgumentError, match="32-byte boundary"):
        mod(a, b, view)
    c = gpuarray.zeros((64, 64), np.float32)
    mod(a, b, c)
    close(c.get(), want, 64)
