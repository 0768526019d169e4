"""Programs that must fail: illegal schedules.  Each names the stage and axis."""
import os
import sys

import numpy as np
import pytest

import tecomp as tc
import small_programs as sp  # tests/must_fail/small_programs.py

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from helpers import channel_sum as _channel_sum, triangular_sum  # noqa: E402  (tests/helpers.py)


def _mm(n=64):
    A = tc.placeholder((n, n), name="A")
    B = tc.placeholder((n, n), name="B")
    k = tc.reduce_axis((0, n), name="k")
    C = tc.compute((n, n), lambda i, j: tc.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C, k


def _chain():
    A = tc.placeholder((64,), name="A")
    B = tc.compute((64,), lambda i: A[i] + 1, name="B")
    C = tc.compute((64,), lambda i: B[i] * 2, name="C")
    D = tc.compute((64,), lambda i: A[i] * 3, name="D")
    return A, B, C, D


def test_axis_of_another_stage():
    A, B, C, D = _chain()
    s = tc.create_schedule([C.op, D.op])
    with pytest.raises(tc.ScheduleError, match=r"split on stage C: axis i belongs to stage D, not to stage C"):
        s[C].split(D.op.axis[0], factor=4)


def test_axis_already_split():
    A, B, C, k = _mm()
    s = tc.create_schedule(C.op)
    i = C.op.axis[0]
    s[C].split(i, factor=8)
    with pytest.raises(tc.ScheduleError, match=r"split on stage C: axis i was already split or fused away"):
        s[C].split(i, factor=4)


def test_axis_already_fused():
    A, B, C, k = _mm()
    s = tc.create_schedule(C.op)
    i, j = C.op.axis
    s[C].fuse(i, j)
    with pytest.raises(tc.ScheduleError, match=r"vectorize on stage C: axis j was already split or fused away"):
        s[C].vectorize(j)


def test_reorder_repeated_axis():
    A, B, C, k = _mm()
    s = tc.create_schedule(C.op)
    i, j = C.op.axis
    with pytest.raises(tc.ScheduleError, match=r"reorder on stage C: axis i is repeated"):
        s[C].reorder(i, j, i)


def test_reorder_non_leaf():
    A, B, C, k = _mm()
    s = tc.create_schedule(C.op)
    i, j = C.op.axis
    s[C].split(j, factor=4)
    with pytest.raises(tc.ScheduleError, match=r"reorder on stage C: axis j was already split"):
        s[C].reorder(j, i)


def test_reorder_not_an_axis():
    A, B, C, k = _mm()
    s = tc.create_schedule(C.op)
    with pytest.raises(tc.ScheduleError, match=r"reorder on stage C: axis must be an axis of the stage"):
        s[C].reorder("i", "j")


def test_compute_at_non_consumer():
    A, B, C, D = _chain()
    s = tc.create_schedule([C.op, D.op])
    with pytest.raises(tc.ScheduleError, match=r"compute_at on stage B: stage D does not consume B"):
        s[B].compute_at(s[D], D.op.axis[0])


def test_compute_at_self():
    A, B, C, D = _chain()
    s = tc.create_schedule(C.op)
    with pytest.raises(tc.ScheduleError, match=r"compute_at on stage B: cannot compute a stage at an axis of itself"):
        s[B].compute_at(s[B], B.op.axis[0])


def test_compute_at_axis_of_wrong_stage():
    A, B, C, D = _chain()
    s = tc.create_schedule(C.op)
    with pytest.raises(tc.ScheduleError, match=r"axis i belongs to stage B, not to stage C"):
        s[B].compute_at(s[C], B.op.axis[0])


def test_compute_inline_reduction():
    A, B, C, k = _mm()
    D = tc.compute((64, 64), lambda i, j: C[i, j] + 1, name="D")
    s = tc.create_schedule(D.op)
    with pytest.raises(tc.ScheduleError, match=r"compute_inline on stage C: it is a reduction"):
        s[C].compute_inline()


def test_compute_inline_output():
    A, B, C, D = _chain()
    s = tc.create_schedule(C.op)
    with pytest.raises(tc.ScheduleError, match=r"compute_inline on stage C: it is an output"):
        s[C].compute_inline()


def test_vectorize_reduce_axis():
    A, B, C, k = _mm()
    s = tc.create_schedule(C.op)
    with pytest.raises(tc.ScheduleError, match=r"vectorize on stage C: axis k is a reduction axis"):
        s[C].vectorize(k)


def test_parallel_reduce_axis():
    A, B, C, k = _mm()
    s = tc.create_schedule(C.op)
    with pytest.raises(tc.ScheduleError, match=r"parallel on stage C: axis k is a reduction axis"):
        s[C].parallel(k)


def test_vectorize_symbolic_extent():
    n = tc.var("n")
    A = tc.placeholder((n,), name="A")
    C = tc.compute((n,), lambda i: A[i] * 2, name="C")
    s = tc.create_schedule(C.op)
    s[C].vectorize(C.op.axis[0])
    with pytest.raises(tc.ScheduleError, match=r"vectorize on stage C: axis i has extent n, which is not a constant; split it"):
        tc.lower(s, [A, C])


def test_split_both_factor_and_nparts():
    A, B, C, k = _mm()
    s = tc.create_schedule(C.op)
    with pytest.raises(tc.ScheduleError, match=r"split on stage C, axis i: give exactly one of factor= and nparts= \(got both\)"):
        s[C].split(C.op.axis[0], factor=4, nparts=4)


def test_split_neither():
    A, B, C, k = _mm()
    s = tc.create_schedule(C.op)
    with pytest.raises(tc.ScheduleError, match=r"\(got neither\)"):
        s[C].split(C.op.axis[0])


def test_split_factor_zero():
    A, B, C, k = _mm()
    s = tc.create_schedule(C.op)
    with pytest.raises(tc.ScheduleError, match=r"split on stage C, axis i: factor=0 must be at least 1"):
        s[C].split(C.op.axis[0], factor=0)


def test_rfactor_data_axis():
    A, B, C, k = _mm()
    s = tc.create_schedule(C.op)
    with pytest.raises(tc.ScheduleError, match=r"rfactor on stage C: axis i is a data-parallel axis"):
        s.rfactor(C, C.op.axis[0])


def test_cache_read_non_reader():
    A, B, C, D = _chain()
    s = tc.create_schedule([C.op, D.op])
    with pytest.raises(tc.ScheduleError, match=r"cache_read of A: stage C does not read A"):
        s.cache_read(A, "local", [C])


def test_cache_read_bad_scope():
    A, B, C, D = _chain()
    s = tc.create_schedule(C.op)
    with pytest.raises(tc.ScheduleError, match=r"cache_read of A: unknown scope 'texture'"):
        s.cache_read(A, "texture", [B])


def test_cache_write_blocks_bad():
    """cache_write(..., blocks=): a factor that does not divide its dimension, and a
    stage whose loops are already transformed (the cache has another shape)."""
    A, B, C, k = _mm()
    s = tc.create_schedule(C.op)
    n = int(C.shape[1].value)
    with pytest.raises(tc.ScheduleError, match=rf"cache_write of C: blocks: dimension 1 has "
                       rf"extent {n}, which a factor of 5 does not divide; give a positive "
                       rf"factor that divides it$"):
        s.cache_write(C, "local", blocks=[(1, 5)])
    with pytest.raises(tc.ScheduleError, match=r"cache_write of C: blocks: 2 is not a "
                       r"dimension of the 2-d tensor"):
        s.cache_write(C, "local", blocks=[(2, 2)])
    s[C].split(C.op.axis[0], factor=2)
    with pytest.raises(tc.ScheduleError, match=r"cache_write of C: blocks= makes a cache of "
                       r"another shape, but stage C's loops are already transformed; call "
                       r"cache_write\(\.\.\., blocks=\) first"):
        s.cache_write(C, "local", blocks=[(1, 2)])


def test_cache_write_after_scheduling_the_reduction():
    """cache_write after the output axes were split is fine (see test_schedule.py); after
    the reduce axis was, it is refused: the reduction moves to the cache."""
    A, B, C, k = _mm()
    s = tc.create_schedule(C.op)
    s[C].split(k, factor=4)
    with pytest.raises(tc.ScheduleError, match=r"cache_write of C: stage C has already split, "
                                               r"fused or annotated its reduce axis k"):
        s.cache_write(C, "local")
    s = tc.create_schedule(C.op)
    s[C].unroll(k)
    with pytest.raises(tc.ScheduleError, match=r"annotated its reduce axis k"):
        s.cache_write(C, "local")
    s = tc.create_schedule(C.op)
    io, ii = s[C].split(C.op.axis[0], factor=4)
    s[C].reorder(io, k, ii)
    ko, ki = s[C].split(k, factor=2)
    with pytest.raises(tc.ScheduleError, match=r"already split, fused or annotated its reduce "
                                               r"axis k"):
        s.cache_write(C, "local")


def test_fuse_not_adjacent():
    A, B, C, k = _mm()
    s = tc.create_schedule(C.op)
    i, j = C.op.axis
    with pytest.raises(tc.ScheduleError, match=r"fuse on stage C: axes \(i, k\) are not adjacent"):
        s[C].fuse(i, k)


def test_fuse_data_and_reduce():
    A, B, C, k = _mm()
    s = tc.create_schedule(C.op)
    i, j = C.op.axis
    with pytest.raises(tc.ScheduleError, match=r"cannot fuse data-parallel and reduction axes"):
        s[C].fuse(j, k)


def test_bind_twice():
    A, B, C, D = _chain()
    s = tc.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=8)
    tx = tc.thread_axis("threadIdx.x")
    s[C].bind(xi, tx)
    with pytest.raises(tc.ScheduleError, match=r"bind on stage C: threadIdx.x is already bound to axis i.inner"):
        s[C].bind(xo, tc.thread_axis("threadIdx.x"))


def test_bind_not_thread_axis():
    A, B, C, D = _chain()
    s = tc.create_schedule(C.op)
    with pytest.raises(tc.ScheduleError, match=r"the second argument must be a thread axis"):
        s[C].bind(C.op.axis[0], C.op.axis[0])


def test_schedule_placeholder():
    A, B, C, D = _chain()
    s = tc.create_schedule(C.op)
    with pytest.raises(tc.ScheduleError, match=r"A is a placeholder"):
        s[A].split(A.op.shape[0], factor=2)


def test_compute_at_consumer_outside():
    # B is read by C and by D; computing it at C's loop leaves D without it.
    A = tc.placeholder((64,), name="A")
    B = tc.compute((64,), lambda i: A[i] + 1, name="B")
    C = tc.compute((64,), lambda i: B[i] * 2, name="C")
    D = tc.compute((64,), lambda i: B[i] * 3, name="D")
    s = tc.create_schedule([C.op, D.op])
    s[B].compute_at(s[C], C.op.axis[0])
    with pytest.raises(tc.ScheduleError, match=r"compute_at of B at C.i: its consumer D is not computed inside that loop"):
        tc.lower(s, [A, C, D])


def test_lower_missing_input():
    A, B, C, D = _chain()
    s = tc.create_schedule(C.op)
    with pytest.raises(tc.LowerError, match=r"tensor A is an input of stage B but is not in the argument list"):
        tc.lower(s, [C])


def test_lower_missing_output():
    A, B, C, D = _chain()
    s = tc.create_schedule(C.op)
    with pytest.raises(tc.LowerError, match=r"output C is not in the argument list"):
        tc.lower(s, [A])


def test_unknown_target():
    A, B, C, D = _chain()
    s = tc.create_schedule(C.op)
    with pytest.raises(tc.TargetError, match=r"unknown target kind 'opencl'"):
        tc.build(s, [A, C], target="opencl")


def test_thread_extent_mismatch_in_one_kernel():
    A = tc.placeholder((64, 64), name="A")
    B = tc.compute((64, 64), lambda i, j: A[i, j] * 2, name="B")
    C = tc.compute((64, 64), lambda i, j: B[i, j] + 1, name="C")
    s = tc.create_schedule(C.op)
    bx, tx = tc.thread_axis("blockIdx.x"), tc.thread_axis("threadIdx.x")
    s[C].bind(C.op.axis[0], bx)
    s[C].bind(C.op.axis[1], tx)
    s[B].set_scope("shared")
    s[B].compute_at(s[C], C.op.axis[0])
    bo, bi = s[B].split(B.op.axis[1], factor=32)
    s[B].bind(bi, tc.thread_axis("threadIdx.x"))
    with pytest.raises(tc.ScheduleError, match=r"threadIdx.x is bound to loops of different extents in one kernel: B's loop j.inner \(32\) and C's loop j \(64\); .* has extent 32"):
        tc.lower(s, [A, C])


def test_block_too_large():
    A = tc.placeholder((64, 64), name="A")
    C = tc.compute((64, 64), lambda i, j: A[i, j] * 2, name="C")
    s = tc.create_schedule(C.op)
    s[C].bind(C.op.axis[0], tc.thread_axis("threadIdx.y"))
    s[C].bind(C.op.axis[1], tc.thread_axis("threadIdx.x"))
    with pytest.raises(tc.ScheduleError, match=r"a block of 4096 threads \(threadIdx.x=64, threadIdx.y=64\) is above the CUDA limit of 1024"):
        tc.lower(s, [A, C])


def test_shared_tile_over_the_shared_memory_limit():
    """A legal schedule whose shared tile (all of A, 256 x 256 float32 = 256 KiB per block)
    is over the 227 KiB of shared memory a CUDA block may use (sm_90's, with dynamic
    shared memory): ResourceLimitError (a BuildError) when the CUDA C is generated,
    naming the stage and the buffer."""
    from tecomp.codegen.cuda import codegen_cuda

    A = tc.placeholder((256, 256), name="A")
    k1, k2 = tc.reduce_axis((0, 256), name="k1"), tc.reduce_axis((0, 256), name="k2")
    B = tc.compute((32,), lambda i: tc.sum(A[k1, k2] * (i + 1).astype("float32"), axis=[k1, k2]),
                   name="B")
    s = tc.create_schedule(B.op)
    AA = s.cache_read(A, "shared", [B])
    bo, bi = s[B].split(B.op.axis[0], factor=32)
    s[B].bind(bo, tc.thread_axis("blockIdx.x"))
    s[B].bind(bi, tc.thread_axis("threadIdx.x"))
    s[AA].compute_at(s[B], bo)
    ao, ai = s[AA].split(s[AA].fuse(*s[AA].op.axis), factor=32)
    s[AA].bind(ai, tc.thread_axis("threadIdx.x"))
    func = tc.lower(s, [A, B], target="cuda")
    with pytest.raises(tc.ResourceLimitError, match=r"stage B: the shared buffers A\.shared take "
                                                    r"262144 bytes per block, more than the "
                                                    r"232448 bytes of shared memory a CUDA block "
                                                    r"may use \(sm_90's limit\); use smaller "
                                                    r"tiles"):
        codegen_cuda(func)
    assert issubclass(tc.ResourceLimitError, tc.BuildError)


def test_local_array_over_the_local_memory_limit():
    """A thread's local array of 128K + 1 float32 (just over the 512 KiB of local memory
    a CUDA thread may use): ResourceLimitError naming the stage, for nvcc's target and
    the emulation alike (512 KiB exactly runs: tests/test_cuda_emu.py)."""
    from cuda_examples import local_row_per_thread  # tests/cuda_examples.py
    from tecomp.codegen.cuda import codegen_cuda

    s, args = local_row_per_thread(128 * 1024 + 1)
    func = tc.lower(s, list(args), target="cuda")
    with pytest.raises(tc.ResourceLimitError, match=r"stage Z: its local \(per-thread\) arrays "
                                                    r"take 524292 bytes per thread, more than "
                                                    r"the 524288 bytes of local memory a CUDA "
                                                    r"thread may use; use smaller tiles"):
        codegen_cuda(func)


def test_extent_that_simplifies_to_a_negative_constant():
    """A shape the DSL could not see is negative (an expression, not an int) is rejected
    when it is lowered, naming the stage and the axis."""
    n = tc.var("n")
    A = tc.placeholder((8,), name="A")
    B = tc.compute((n - n - 1,), lambda i: A[i % 8], name="B")
    with pytest.raises(tc.LowerError, match=r"the extent of axis i of stage B is -1; it must be "
                                            r">= 0: fix the shape or the split"):
        tc.lower(tc.create_schedule(B.op), [A, B, n])


def test_cross_thread_reduction_needs_constant_extent():
    n = tc.var("n")
    X = tc.placeholder((4, n), name="X")
    k = tc.reduce_axis((0, n), name="k")
    Y = tc.compute((4,), lambda i: tc.sum(X[i, k], axis=k), name="Y")
    s = tc.create_schedule(Y.op)
    s[Y].bind(Y.op.axis[0], tc.thread_axis("blockIdx.x"))
    s[Y].bind(k, tc.thread_axis("threadIdx.x"))
    with pytest.raises(tc.ScheduleError, match=r"reduction axis k bound to threadIdx.x has extent n"):
        tc.lower(s, [X, Y])


# -- s[T].prefetch(tensor, axis, offset): every message names the stage, the axis and
# -- the tensor (when there is one) and says what to do


def test_prefetch_tensor_not_a_tensor():
    A, B, C, D = _chain()
    s = tc.create_schedule(C.op)
    with pytest.raises(tc.ScheduleError, match=r"prefetch on stage C, axis i: tensor must be a "
                                               r"Tensor .*got 'A'"):
        s[C].prefetch("A", C.op.axis[0])


def test_prefetch_axis_of_another_stage():
    A, B, C, D = _chain()
    s = tc.create_schedule([C.op, D.op])
    with pytest.raises(tc.ScheduleError, match=r"prefetch of A on stage C: axis i belongs to "
                                               r"stage D, not to stage C"):
        s[C].prefetch(A, D.op.axis[0])


def test_prefetch_axis_split_away():
    A, B, C, D = _chain()
    s = tc.create_schedule(C.op)
    s[C].split(C.op.axis[0], factor=8)
    with pytest.raises(tc.ScheduleError, match=r"prefetch of A on stage C: axis i was already "
                                               r"split or fused away \(current axes: i.outer, "
                                               r"i.inner\)"):
        s[C].prefetch(A, C.op.axis[0])


@pytest.mark.parametrize("offset", [1.5, True, "1", 2**31])
def test_prefetch_offset_not_an_int(offset):
    A, B, C, D = _chain()
    s = tc.create_schedule(C.op)
    with pytest.raises(tc.ScheduleError, match=r"prefetch of A on stage C, axis i: offset must "
                                               r"be an int32 \(how many iterations ahead"):
        s[C].prefetch(A, C.op.axis[0], offset)


@pytest.mark.parametrize("level", [0, 4, 2.0, True])
def test_prefetch_level_not_a_cache_level(level):
    A, B, C, D = _chain()
    s = tc.create_schedule(C.op)
    with pytest.raises(tc.ScheduleError, match=r"prefetch of A on stage C, axis i: level must "
                                               r"be the cache level to prefetch into, 1 \(L1\), "
                                               r"2 \(L2\) or 3"):
        s[C].prefetch(A, C.op.axis[0], 1, level=level)


def test_prefetch_on_inlined_stage():
    A, B, C, D = _chain()
    s = tc.create_schedule(C.op)
    s[B].compute_inline()
    with pytest.raises(tc.ScheduleError, match=r"prefetch of A on stage B, axis i: the stage is "
                                               r"inlined .* s\[B\]\.compute_root\(\)"):
        s[B].prefetch(A, B.op.axis[0])


def test_prefetch_stage_inlined_afterwards():
    A, B, C, D = _chain()
    s = tc.create_schedule(C.op)
    s[B].prefetch(A, B.op.axis[0])
    s[B].compute_inline()
    with pytest.raises(tc.ScheduleError, match=r"prefetch of A on stage B, axis i: the stage was "
                                               r"inlined into its consumers afterwards"):
        tc.lower(s, [A, C])


def test_prefetch_vectorized_axis():
    A, B, C, D = _chain()
    s = tc.create_schedule(C.op)
    io, ii = s[C].split(C.op.axis[0], factor=8)
    s[C].vectorize(ii)
    with pytest.raises(tc.ScheduleError, match=r"prefetch of A on stage C, axis i.inner: the axis "
                                               r"is vectorized, .* not per SIMD lane; prefetch at "
                                               r"an outer axis"):
        s[C].prefetch(A, ii)


def test_prefetch_axis_vectorized_afterwards():
    """The kind is checked again when lowering."""
    A, B, C, D = _chain()
    s = tc.create_schedule(C.op)
    io, ii = s[C].split(C.op.axis[0], factor=8)
    s[C].prefetch(A, ii)
    s[C].vectorize(ii)
    with pytest.raises(tc.ScheduleError, match=r"prefetch of A on stage C, axis i.inner: the axis "
                                               r"is vectorized"):
        tc.lower(s, [A, C])


def test_prefetch_thread_axis():
    A, B, C, D = _chain()
    s = tc.create_schedule(C.op)
    bo, bi = s[C].split(C.op.axis[0], factor=16)
    s[C].bind(bi, tc.thread_axis("threadIdx.x"))
    with pytest.raises(tc.ScheduleError, match=r"prefetch of A on stage C, axis i.inner: the axis "
                                               r"is bound to threadIdx.x, .* prefetch at a serial, "
                                               r"parallel or unrolled loop"):
        s[C].prefetch(A, bi)


def test_prefetch_axis_bound_afterwards():
    A, B, C, D = _chain()
    s = tc.create_schedule(C.op)
    bo, bi = s[C].split(C.op.axis[0], factor=16)
    s[C].prefetch(A, bo)
    s[C].bind(bo, tc.thread_axis("blockIdx.x"))
    s[C].bind(bi, tc.thread_axis("threadIdx.x"))
    with pytest.raises(tc.ScheduleError, match=r"prefetch of A on stage C, axis i.outer: the axis "
                                               r"is bound to blockIdx.x"):
        tc.lower(s, [A, C], target="cuda")


def test_prefetch_axis_split_afterwards():
    A, B, C, D = _chain()
    s = tc.create_schedule(C.op)
    s[C].prefetch(A, C.op.axis[0])
    s[C].split(C.op.axis[0], factor=4)
    with pytest.raises(tc.ScheduleError, match=r"prefetch of A on stage C, axis i: axis i was "
                                               r"split or fused after the prefetch \(the loops of "
                                               r"stage C are now i.outer, i.inner\)"):
        tc.lower(s, [A, C])


def test_prefetch_inlined_tensor():
    A, B, C, D = _chain()
    s = tc.create_schedule(C.op)
    s[C].prefetch(B, C.op.axis[0])
    s[B].compute_inline()
    with pytest.raises(tc.ScheduleError, match=r"prefetch of B on stage C, axis i: B is inlined "
                                               r"\(compute_inline\), so it has no buffer"):
        tc.lower(s, [A, C])


def test_prefetch_tensor_not_in_the_function():
    A, B, C, D = _chain()
    s = tc.create_schedule(C.op)
    s[C].prefetch(D, C.op.axis[0])  # D is another output, not part of this schedule
    with pytest.raises(tc.ScheduleError, match=r"prefetch of D on stage C, axis i: D is neither "
                                               r"an argument of the function nor a stage"):
        tc.lower(s, [A, C])


def test_prefetch_tensor_not_accessed_in_the_loop():
    A, B, C, D = _chain()
    s = tc.create_schedule(C.op)
    s[C].prefetch(A, C.op.axis[0])  # C reads B, which is computed at the root
    with pytest.raises(tc.ScheduleError, match=r"prefetch of A on stage C, axis i: the loop over "
                                               r"i neither reads nor writes A"):
        tc.lower(s, [A, C])


def test_prefetch_tensor_computed_inside_the_loop():
    A, B, C, D = _chain()
    s = tc.create_schedule(C.op)
    s[B].compute_at(s[C], C.op.axis[0])
    s[C].prefetch(B, C.op.axis[0])
    with pytest.raises(tc.ScheduleError, match=r"prefetch of B on stage C, axis i: B is computed "
                                               r"inside the loop over i \(compute_at\)"):
        tc.lower(s, [A, C])


def test_prefetch_region_cannot_be_bounded():
    idx = tc.placeholder((64,), dtype="int32", name="idx")
    X = tc.placeholder((1000,), name="X")
    G = tc.compute((64,), lambda i: X[idx[i]], name="G")
    s = tc.create_schedule(G.op)
    io, ii = s[G].split(G.op.axis[0], factor=8)
    s[G].prefetch(X, io)
    with pytest.raises(tc.ScheduleError, match=r"prefetch of X on stage G, axis i.outer: the "
                                               r"region of X that one iteration accesses cannot "
                                               r"be bounded \(dimension 0 is indexed with "
                                               r"`idx\[i.outer\*8 \+ i.inner\]`\)"):
        tc.lower(s, [idx, X, G])


def test_prefetch_along_not_an_itervar():
    A, B, C, D = _chain()
    s = tc.create_schedule(C.op)
    with pytest.raises(tc.ScheduleError, match=r"prefetch of A on stage B, axis i: along must be "
                                               r"the IterVar of a loop around i"):
        s[B].prefetch(A, B.op.axis[0], 1, along="i")


def test_prefetch_along_a_loop_that_does_not_enclose_the_axis():
    A = tc.placeholder((8, 64), name="A")
    B = tc.compute((8, 64), lambda i, j: A[i, j] + 1.0, name="B")
    s = tc.create_schedule(B.op)
    jo, ji = s[B].split(B.op.axis[1], factor=16)
    s[B].prefetch(A, jo, 1, along=ji)  # ji is inside jo
    with pytest.raises(tc.ScheduleError, match=r"prefetch of A on stage B, axis j.outer: along="
                                               r"j.inner is not a loop around j.outer \(the loops "
                                               r"around it are i\)"):
        tc.lower(s, [A, B])


# -- align_bounds ---------------------------------------------------------------------


def _blocked(guarded=True):
    """C = P + 1, P = 2 * A computed per 16-element block of C."""
    A = tc.placeholder((100,), name="A")
    if guarded:
        P = tc.compute((100,), lambda i: tc.if_then_else(i < 100, A[i], 0.0) * 2, name="P")
    else:
        P = tc.compute((100,), lambda i: A[i] * 2, name="P")
    C = tc.compute((100,), lambda i: P[i] + 1, name="C")
    s = tc.create_schedule(C.op)
    xo, _ = s[C].split(C.op.axis[0], factor=16)
    s[P].compute_at(s[C], xo)
    return s, A, P, C


def test_align_bounds_read_past_an_input():
    s, A, P, C = _blocked(guarded=False)
    s[P].align_bounds(P.op.axis[0], 16)
    with pytest.raises(tc.ScheduleError, match=r"align_bounds on stage P \(axis i\): past the edge "
                       r"of P, its read of A \(dimension 0, index i\) may fall outside A's memory "
                       r"\(extent 100\).*if_then_else"):
        tc.lower(s, [A, C])


def test_align_bounds_guard_too_loose():
    A = tc.placeholder((100,), name="A")
    P = tc.compute((100,), lambda i: tc.if_then_else(i < 101, A[i], 0.0), name="P")
    C = tc.compute((100,), lambda i: P[i] + 1, name="C")
    s = tc.create_schedule(C.op)
    xo, _ = s[C].split(C.op.axis[0], factor=16)
    s[P].compute_at(s[C], xo)
    s[P].align_bounds(P.op.axis[0], 16)
    with pytest.raises(tc.ScheduleError, match=r"its read of A .* may fall outside A's memory"):
        tc.lower(s, [A, C])


def test_align_bounds_on_a_root_stage():
    s, A, P, C = _blocked()
    s[P].compute_root()
    s[P].align_bounds(P.op.axis[0], 16)
    with pytest.raises(tc.ScheduleError, match=r"align_bounds on stage P, axis i: the stage is "
                       r"computed at the root.*compute_at it"):
        tc.lower(s, [A, C])


def test_align_bounds_on_an_output():
    s, A, P, C = _blocked()
    with pytest.raises(tc.ScheduleError, match=r"align_bounds on stage C: it is an output.*"
                       r"cache_write\(C, 'local'\)"):
        s[C].align_bounds(C.op.axis[0], 16)


@pytest.mark.parametrize("factor", [0, -4, 2.5, True, "16"])
def test_align_bounds_bad_factor(factor):
    s, A, P, C = _blocked()
    with pytest.raises(tc.ScheduleError, match=r"align_bounds on stage P, axis i: factor must be "
                       r"an int >= 1"):
        s[P].align_bounds(P.op.axis[0], factor)


def _dot(op="sum"):
    A = tc.placeholder((20, 100), name="A")
    B = tc.placeholder((100,), name="B")
    k = tc.reduce_axis((0, 100), name="k")
    red = tc.sum if op == "sum" else tc.max
    S = tc.compute((20,), lambda i: red(A[i, k] * B[k], axis=k), name="S")
    return tc.create_schedule(S.op), A, B, S


def test_align_bounds_on_a_reduction_whose_terms_past_the_edge_may_not_be_zero():
    """A reduce axis run past its extent adds terms: only zeros may be added, read from
    copies zero past the edge (cache_read(..., pad=0.0))."""
    s, A, B, S = _dot()
    with pytest.raises(tc.ScheduleError, match=r"align_bounds on stage S, reduce axis k: the "
                       r"terms past its extent 100 may not be zero; .*cache_read\(\.\.\., "
                       r"pad=0\.0\)"):
        s[S].align_bounds(S.op.reduce_axis[0], 16)
    s, A, B, S = _dot("max")
    with pytest.raises(tc.ScheduleError, match=r"align_bounds on stage S, reduce axis k: the "
                       r"stage must be a sum"):
        s[S].align_bounds(S.op.reduce_axis[0], 16)
    with pytest.raises(tc.ScheduleError, match=r"reduce axis k: factor must be an int >= 1"):
        s[S].align_bounds(S.op.reduce_axis[0], 0)


def test_align_bounds_on_a_reduction_reading_an_argument_past_its_edge():
    """A copied (zeros past the edge), B read as it is: past k = 100 the sum would read B
    outside its memory; refused when lowering."""
    s, A, B, S = _dot()
    AP = s.cache_read(A, "global", [S], pad=0.0)
    ko, _ = s[S].split(S.op.reduce_axis[0], factor=16)
    s[S].align_bounds(S.op.reduce_axis[0], 16)
    s[AP].compute_at(s[S], ko)
    s[AP].align_bounds(AP.op.axis[1], 16)
    with pytest.raises(tc.ScheduleError, match=r"align_bounds on stage S, reduce axis k: past "
                       r"the axis' extent 100 the stage reads B \(dimension 0, index k\) past "
                       r"its edge, outside its memory"):
        tc.lower(s, [A, B, S])


def test_align_bounds_axis_not_an_output_axis():
    s, A, P, C = _blocked()
    with pytest.raises(tc.ScheduleError, match=r"align_bounds on stage P: axis must be one of its "
                       r"output axes \(i\)"):
        s[P].align_bounds(C.op.axis[0], 16)
    po, pi = s[P].split(P.op.axis[0], factor=4)
    with pytest.raises(tc.ScheduleError, match=r"align_bounds on stage P: axis must be one of its "
                       r"output axes"):
        s[P].align_bounds(pi, 4)


@pytest.mark.parametrize("pad", ["0", None.__class__, True, [0.0]])
def test_cache_read_pad_not_a_number(pad):
    A, B, C, k = _mm()
    s = tc.create_schedule(C.op)
    with pytest.raises(tc.ScheduleError, match=r"cache_read of B: pad must be a number \(the "
                       r"value the copy holds past B's edge, e\.g\. 0\.0\)"):
        s.cache_read(B, "local", [C], pad=pad)


def test_align_bounds_read_guarded_by_data_not_by_its_index():
    # the guard compares int8 data, not the index: it bounds nothing (and is not an error
    # of the analysis itself)
    A = tc.placeholder((100,), name="A")
    M = tc.placeholder((100,), dtype="int8", name="M")
    P = tc.compute((100,), lambda i: tc.if_then_else(M[i] > 0, A[i], 0.0), name="P")
    C = tc.compute((100,), lambda i: P[i] + 1, name="C")
    s = tc.create_schedule(C.op)
    xo, _ = s[C].split(C.op.axis[0], factor=16)
    s[P].compute_at(s[C], xo)
    s[P].align_bounds(P.op.axis[0], 16)
    with pytest.raises(tc.ScheduleError, match=r"align_bounds on stage P \(axis i\): past the edge "
                       r"of P, its read of M \(dimension 0, index i\) may fall outside M's memory"):
        tc.lower(s, [A, M, C])


@pytest.mark.parametrize("pad", [0.5, 2**40])
def test_cache_read_pad_not_of_the_tensors_dtype(pad):
    A = tc.placeholder((10,), dtype="int32", name="A")
    C = tc.compute((10,), lambda i: A[i] + 1, name="C")
    s = tc.create_schedule(C.op)
    with pytest.raises(tc.ScheduleError, match=r"cache_read of A: pad=.* is not a int32 value "
                       r".*give one of A's dtype"):
        s.cache_read(A, "local", [C], pad=pad)


def test_storage_order_not_every_axis():
    A, B, C = sp.chain3()
    s = tc.create_schedule(C.op)
    i, j = B.op.axis
    with pytest.raises(tc.ScheduleError, match=r"storage_order on stage B: got i, i; give every "
                       r"output axis \(i, j\) exactly once, outermost first"):
        s[B].storage_order(i, i)
    with pytest.raises(tc.ScheduleError, match=r"storage_order on stage B: got j; give every"):
        s[B].storage_order(j)


def test_storage_order_split_axis():
    A, B, C = sp.chain3()
    s = tc.create_schedule(C.op)
    i, j = B.op.axis
    jo, ji = s[B].split(j, factor=2)
    with pytest.raises(tc.ScheduleError, match=r"storage_order on stage B: 'j.inner' is not one "
                       r"of its output axes \(i, j\); give each of them once \(the stage's "
                       r"op.axis, not split or fused loops\)"):
        s[B].storage_order(ji, i)


def test_storage_order_of_an_output():
    A, B, C = sp.chain3()
    s = tc.create_schedule(C.op)
    i, j = C.op.axis
    with pytest.raises(tc.ScheduleError, match=r"storage_order on stage C: it is an output, whose "
                       r"buffer is the caller's array"):
        s[C].storage_order(j, i)


def test_storage_order_of_an_inlined_stage():
    A, B, C = sp.chain3()
    s = tc.create_schedule(C.op)
    i, j = B.op.axis
    s[B].storage_order(j, i)
    s[B].compute_inline()
    with pytest.raises(tc.ScheduleError, match=r"storage_order on stage B: the stage is inlined "
                       r"\(compute_inline\), so it has no buffer to lay out"):
        tc.lower(s, [A, C])


def test_storage_align_of_the_innermost_stored_dimension():
    A, B, C = sp.chain3()
    s = tc.create_schedule(C.op)
    i, j = B.op.axis
    s[B].storage_align(i, 8, 0)
    s[B].storage_order(j, i)
    with pytest.raises(tc.ScheduleError, match=r"storage_align on stage B: dimension 0 is the "
                       r"innermost one in its storage_order"):
        tc.lower(s, [A, C])


# traces (s.trace): replaying steps that do not fit


def test_replay_of_a_trace_recorded_on_another_compute():
    from tecomp.schedule.trace import replay

    A, B, C, k = _mm()
    s = tc.create_schedule(C.op)
    s[C].tile(C.op.axis[0], C.op.axis[1], 8, 8)
    steps = s.trace.to_json()
    X = tc.placeholder((64,), name="X")
    Y = tc.compute((64,), lambda i: X[i] + 1, name="Y")
    with pytest.raises(tc.ScheduleError, match=r"trace step 0 \(tile\) names something this "
                                               r"DAG does not have .*recorded on another compute"):
        replay(steps, [Y])


def test_replay_refuses_what_is_not_a_primitive():
    from tecomp.schedule.trace import replay

    A, B, C, k = _mm()
    with pytest.raises(tc.ScheduleError, match=r"trace step 0: '__init__' is not a schedule "
                                               r"primitive"):
        replay([["__init__", {"s": 0}, [], {}]], [C])
    with pytest.raises(tc.ScheduleError, match=r"a trace is a list of \[primitive, stage, args, "
                                               r"kwargs\] steps"):
        replay([["split"]], [C])


@pytest.mark.parametrize("step, msg", [
    (["split", {"s": -1}, [{"ax": [0, 0]}], {"factor": 4}], r"-1 is not a position"),
    (["split", {"s": 0}, [{"ax": [0, True]}], {"factor": 4}], r"True is not a position"),
    (["split", {"s": 0}, [{"ax": [0, 0]}], {"factor": {"eval": "1"}}], r"unknown reference 'eval'"),
    (["split", {"s": 0}, [{"ax": [0, 0]}], {"fctor": 4}], r"trace step 0 \(split\): arguments "
                                                          r"the primitive does not take"),
    # a tuning log is user input: every argument is checked like one
    # (past int32 a factor is bounded by its axis's extent, as any factor past 65536)
    (["split", {"s": 0}, [{"ax": [0, 0]}], {"factor": 2**32 + 1}],
     r"trace step 0 \(split\): factor=4294967297 for axis 'i' of extent 64; a factor is at "
     r"most the extent"),
    (["split", {"s": 0}, [{"ax": [0, 0]}], {"nparts": 2**40}], r"nparts=1099511627776 for axis "
                                                                r"'i' of extent 64"),
    (["split", {"s": 0}, [{"ax": [0, 0]}], {"factor": 2**63}],
     r"trace step 0 \(split\): factor=9223372036854775808 is not an int from 1 to "
     r"9223372036854775807; the trace is damaged or forged"),
    (["split", {"s": 0}, [{"ax": [0, 0]}], {"factor": 100000}],
     r"trace step 0 \(split\): factor=100000 for axis 'i' of extent 64; a factor is at most "
     r"the extent \(or 65536 where that is larger\)"),
    (["tile", {"s": 0}, [{"ax": [0, 0]}, {"ax": [0, 1]}, 8, 70000], {}],
     r"y_factor=70000 for axis 'j' of extent 64"),
    (["split", {"s": 0}, [{"ax": [0, 0]}], {"factor": 4.0}], r"factor=4\.0 is not an int"),
    (["split", {"s": 0}, [{"ax": [0, 0]}], {"factor": "4"}], r"factor='4' is not an int"),
    (["split", {"s": 0}, [{"ax": [0, 0]}], {"factor": [4]}], r"factor=\[4\] is not an int"),
    (["split", {"s": 0}, [{"ax": [0, 0]}], {"factor": 4, "disable_predication": 1}],
     r"disable_predication=1 is not true or false"),
    (["split", {"s": 0}, [{"ax": [0, 0], "t": 0}], {"factor": 4}], r"a reference has one key"),
    (["split", {"s": 0}, [[[[[[{"ax": [0, 0]}]]]]]], {"factor": 4}], r"nested deeper"),
    (["split", {"s": 0}, [{"t": 0}], {"factor": 4}], r"parent=.* is not an axis"),
    (["split", {"t": 0}, [{"ax": [0, 0]}], {"factor": 4}], r"it runs on Tensor, not on a stage"),
    # an axis that a later step makes
    (["vectorize", {"s": 0}, [{"ax": [0, 3]}], {}], r"trace step 0 \(vectorize\) names "
                                                    r"something this DAG does not have"),
    (["fuse", {"s": 0}, [0, 1], {}], r"axes=\(0, 1\) are not axes"),
    (["bind", {"s": 0}, [{"ax": [0, 0]}, {"ax": [0, 1]}], {}], r"thread_ivar=.* is not a "
                                                                r"thread axis"),
    (["bind", {"s": 0}, [{"ax": [0, 0]}, {"thread": "threadIdx.w"}], {}],
     r"names something this DAG does not have .*unknown thread tag 'threadIdx\.w'"),
    (["compute_at", {"s": 0}, [3, {"ax": [0, 0]}], {}], r"parent=3 is not a stage"),
    (["pragma", {"s": 0}, [{"ax": [0, 0]}, "x\ny"], {}], r"pragma on stage C, axis i: the name "
                                                         r"must be an identifier"),
    (["pragma", {"s": 0}, [{"ax": [0, 0]}, "note", [{"ax": [0, 1]}]], {}],
     r"value=\[.*\] is not None, a bool, an int32, a finite float or a string"),
    (["pragma", {"s": 0}, [{"ax": [0, 0]}, "note", "x" * 300], {}], r"value='xxx.* is not None"),
    (["pragma", {"s": 0}, [{"ax": [0, 0]}, "unroll_count", 5000], {}],
     r"pragma unroll_count on stage C, axis i: the value is how many times LLVM unrolls the "
     r"loop, an int from 1 to 1024; got 5000"),
    (["pragma", {"s": 0}, [{"ax": [0, 0]}, "fp_reciprocal", False], {}],
     r"pragma fp_reciprocal on stage C, axis i: the pragma takes no value"),
    (["set_scope", {"s": 0}, ["x" * 1000], {}], r"scope='xxx.* is not a string of at most 256"),
    (["rfactor", None, [{"t": 0}, {"ax": [0, 2]}], {"factor_axis": 2**40}],
     r"factor_axis=1099511627776 is not an int32"),
    (["cache_read", None, [{"t": 1}, "local", [{"s": 0}]], {"blocks": [[0, 4, 4]]}],
     r"blocks=\[\[0, 4, 4\]\] is not a list of \[dimension, factor\] pairs"),
])
def test_replay_of_a_damaged_step(step, msg):
    from tecomp.schedule.trace import replay

    A, B, C, k = _mm()
    with pytest.raises(tc.ScheduleError, match=msg):
        replay([step], [C])


def test_replay_of_a_trace_of_too_many_steps():
    from tecomp.schedule.trace import MAX_STEPS, replay

    A, B, C, k = _mm()
    with pytest.raises(tc.ScheduleError, match=rf"a trace has at most {MAX_STEPS} steps, this "
                                               rf"one {MAX_STEPS + 1}"):
        replay([["compute_root", {"s": 0}, [], {}]] * (MAX_STEPS + 1), [C])


def test_split_factor_bound_by_the_shapes_of_a_symbolic_extent():
    from tecomp.schedule.trace import replay

    n = tc.var("n")
    A = tc.placeholder((n,), name="A")
    B = tc.compute((n,), lambda i: A[i] * 2, name="B")
    step = ["split", {"s": 0}, [{"ax": [0, 0]}], {"factor": 70000}]
    replay([step], [B])          # n is not known: any int32 factor
    with pytest.raises(tc.ScheduleError, match=r"factor=70000 for axis 'i' of extent 100; "):
        replay([step], [B], shapes={"n": 100})


@pytest.mark.parametrize("count", [2**32, 0, 2.0, "4", True])
def test_pragma_unroll_count_out_of_range(count):
    # (2**32 reached LLVM as 0, and its unroller aborted the build process)
    A, B, C, k = _mm()
    s = tc.create_schedule(C.op)
    with pytest.raises(tc.ScheduleError, match=r"pragma unroll_count on stage C, axis k: the "
                       r"value is how many times LLVM unrolls the loop, an int from 1 to 1024"):
        s[C].pragma(k, "unroll_count", count)


def test_unroll_of_too_many_copies():
    A, B, C, k = _mm(128)
    s = tc.create_schedule(C.op)
    s[C].unroll(C.op.axis[1])
    s[C].unroll(k)
    with pytest.raises(tc.ScheduleError, match=r"unrolling the loops over j \(128\) x k \(128\) "
                       r"makes 16384 copies of their body, more than the 4096 tecomp unrolls "
                       r"\(a build of minutes\): unroll shorter loops"):
        tc.lower(s, [A, B, C])
    s = tc.create_schedule(C.op)
    f = s[C].fuse(*C.op.axis)
    s[C].pragma(f, "unroll_explicit")
    with pytest.raises(tc.ScheduleError, match=r"unrolling the loops over i\.j\.fused "
                                               r"\(16384\) makes 16384 copies"):
        tc.lower(s, [A, B, C])


def test_rfactor_of_an_axis_whose_extent_depends_on_the_output():
    A, B, _, _ = triangular_sum()
    s = tc.create_schedule(B.op)
    ro, ri = s[B].split(B.op.reduce_axis[0], factor=4)
    with pytest.raises(tc.ScheduleError, match=r"rfactor on stage B: the extent of r.outer "
                                            r"depends on an output index"):
        s.rfactor(B, ro)


def test_create_group_errors():
    A = tc.placeholder((32, 32), name="A")
    B = tc.compute((32, 32), lambda i, j: A[i, j] + 1.0, name="B")
    C = tc.compute((32, 32), lambda i, j: B[i, j] * 2.0, name="C")
    D = tc.compute((32, 32), lambda i, j: C[i, j] - 1.0, name="D")
    s = tc.create_schedule(D.op)
    g = s.create_group(outputs=D, inputs=A)
    with pytest.raises(tc.ScheduleError, match=r"the parent D is a member of the group"):
        g.compute_at(s[D], D.op.axis[0])
    with pytest.raises(tc.ScheduleError, match=r"A is a placeholder reached from the outputs "
                                               r"without passing an input of the group"):
        s.create_group(outputs=C, inputs=[])
    with pytest.raises(tc.ScheduleError, match=r"outputs and inputs must be tensors"):
        s.create_group(outputs="C", inputs=A)


# -- multi-output computes -----------------------------------------------------------


def _argmax_rows():
    A = tc.placeholder((8, 6), name="A")
    k = tc.reduce_axis((0, 6), name="k")
    argmax = tc.comm_reducer(
        lambda x, y: (tc.if_then_else(x[1] >= y[1], x[0], y[0]), tc.max(x[1], y[1])),
        lambda t0, t1: (tc.const(-1, t0), tc.min_value(t1)), name="argmax")
    idx, val = tc.compute((8,), lambda i: argmax((k, A[i, k]), axis=k), name="am")
    return A, idx, val


def test_cache_write_of_a_multi_output_compute():
    A, idx, val = _argmax_rows()
    s = tc.create_schedule(idx.op)
    with pytest.raises(tc.ScheduleError, match=r"cache_write on stage am: it computes 2 outputs "
                                               r"in one loop nest \(a multi-output compute\)"):
        s.cache_write(val, "local")


def test_rfactor_of_a_multi_output_elementwise_compute():
    """A multi-output reduction is factored whole; a multi-output compute without a
    reduction has nothing to factor."""
    A = tc.placeholder((8, 6), name="A")
    lo, hi = tc.compute((8, 6), lambda i, j: (A[i, j] - 1.0, A[i, j] + 1.0), name="lohi")
    s = tc.create_schedule(lo.op)
    with pytest.raises(tc.ScheduleError, match=r"rfactor on stage lohi: it is not a reduction"):
        s.rfactor(lo, s[lo].op.axis[1])


def test_tuple_reduction_across_threads():
    A, idx, val = _argmax_rows()
    s = tc.create_schedule(idx.op)
    s[idx].bind(idx.op.axis[0], tc.thread_axis("blockIdx.x"))
    s[idx].bind(idx.op.reduce_axis[0], tc.thread_axis("threadIdx.x"))
    with pytest.raises(tc.ScheduleError, match=r"bind on stage am: reduction axis k is bound to "
                                               r"threadIdx.x, but the stage is a tuple reduction"):
        tc.lower(s, [A, idx, val])


def test_no_output_of_a_multi_output_compute_in_the_arguments():
    A, idx, val = _argmax_rows()
    s = tc.create_schedule(idx.op)
    with pytest.raises(tc.LowerError, match=r"output am.v0 and am.v1 is not in the argument list"):
        tc.lower(s, [A])


def test_producer_computed_inside_a_loop_its_consumer_runs_before():
    """B is computed at C's outer loop and reads A, computed at C's inner loop: A would
    not be ready when B reads it (found by the scan property test)."""
    A0 = tc.placeholder((16,), name="A0")
    A = tc.compute((16,), lambda i: A0[i] + 1, name="A")
    B = tc.compute((16,), lambda i: A[i] * 2, name="B")
    C = tc.compute((16,), lambda i: B[i] + 3, name="C")
    s = tc.create_schedule(C.op)
    io, ii = s[C].split(C.op.axis[0], factor=4)
    s[B].compute_at(s[C], io)
    s[A].compute_at(s[C], ii)
    with pytest.raises(tc.ScheduleError, match=r"compute_at of A at C.i.inner: its consumer B is "
                                               r"not computed inside that loop"):
        tc.lower(s, [A0, C])


def test_lower_with_an_unknown_phase():
    A, B, C, D = _chain()
    s = tc.create_schedule(C.op)
    with pytest.raises(tc.LowerError, match=r"phase must be 'lower' or 'codegen', got 'asm'"):
        tc.lower(s, [A, C], phase="asm")


def test_build_a_function_prepared_for_another_target():
    # the codegen phase's plans depend on the target (AVX-512 masks or not)
    A, B, C, D = _chain()
    s = tc.create_schedule(C.op)
    s[C].vectorize(C.op.axis[0])
    f = tc.lower(s, [A, C], target="llvm -mcpu=skylake-avx512", phase="codegen")
    with pytest.raises(tc.LowerError, match=r"prepared for code generation for target "
                       r"'llvm -mcpu=skylake-avx512', not 'llvm -mcpu=haswell': build the "
                       r"function tc.lower returns \(phase='lower'\)"):
        tc.build(f, target="llvm -mcpu=haswell")


# ---------------------------------------------------------------------------------
# schedules (once tecomp.testing.bad_inputs)


def test_create_schedule_int():
    with pytest.raises(tc.ScheduleError,
                       match=r"create_schedule takes an output tensor/operation"):
        tc.create_schedule(5)


def test_create_schedule_empty():
    with pytest.raises(tc.ScheduleError,
                       match=r"create_schedule takes an output tensor/operation"):
        tc.create_schedule([])


def test_create_schedule_placeholder():
    with pytest.raises(tc.ScheduleError, match=r"create_schedule: A is a placeholder"):
        tc.create_schedule(sp.vec(4))


def test_create_schedule_string_in_list():
    with pytest.raises(tc.ScheduleError, match=r"create_schedule: 'C' is not a tensor"):
        tc.create_schedule(["C"])


def test_schedule_getitem_string():
    with pytest.raises(tc.ScheduleError, match=r"'C' is not part of this schedule"):
        A, B, C = sp.chain3()
        tc.create_schedule(C.op)["C"]


def test_schedule_getitem_other_tensor():
    with pytest.raises(tc.ScheduleError, match=r"'X' is not part of this schedule"):
        A, B, C = sp.chain3()
        X = tc.compute((4,), lambda i: i, name="X")
        tc.create_schedule(C.op)[X]


def _two_reductions():
    A = tc.placeholder((8, 8), name="A")
    k = tc.reduce_axis((0, 8), name="k")
    r = tc.reduce_axis((0, 8), name="r")
    C = tc.compute((8,), lambda i: tc.sum(A[i, k], axis=k), name="C")
    D = tc.compute((8,), lambda i: tc.max(A[r, i] + C[i], axis=r), name="D")
    return tc.create_schedule(D.op), C, D, k, r


def test_split_reduce_axis_of_another_stage():
    with pytest.raises(tc.ScheduleError,
                       match=r"split on stage D: axis k belongs to stage C, not to stage D"):
        s, C, D, k, r = _two_reductions()
        s[D].split(k, factor=2)


def test_reorder_with_reduce_axis_of_another_stage():
    with pytest.raises(tc.ScheduleError,
                       match=r"reorder on stage C: axis r belongs to stage D, not to stage C"):
        s, C, D, k, r = _two_reductions()
        s[C].reorder(r, C.op.axis[0])


def test_rfactor_reduce_axis_of_another_stage():
    with pytest.raises(tc.ScheduleError, match=r"rfactor on stage D: axis k belongs to stage C"):
        s, C, D, k, r = _two_reductions()
        s.rfactor(D, k)


def test_compute_at_own_reduce_axis_given_for_consumer():
    with pytest.raises(tc.ScheduleError,
                       match=r"compute_at of C on stage D: axis k belongs to stage C, not to stage D"):
        s, C, D, k, r = _two_reductions()
        s[C].compute_at(s[D], k)


def test_split_float_factor():
    with pytest.raises(tc.ScheduleError,
                       match=r"split on stage C, axis i: factor must be a positive int, got 2.5"):
        A, B, C = sp.chain3()
        s = tc.create_schedule(C.op)
        s[C].split(C.op.axis[0], factor=2.5)


def test_split_negative_factor():
    with pytest.raises(tc.ScheduleError,
                       match=r"split on stage C, axis i: factor=-4 must be at least 1"):
        A, B, C = sp.chain3()
        s = tc.create_schedule(C.op)
        s[C].split(C.op.axis[0], factor=-4)


def test_split_bool_nparts():
    with pytest.raises(tc.ScheduleError,
                       match=r"split on stage C, axis i: nparts must be a positive int, got True"):
        A, B, C = sp.chain3()
        s = tc.create_schedule(C.op)
        s[C].split(C.op.axis[0], nparts=True)


def test_split_string_axis():
    with pytest.raises(tc.ScheduleError,
                       match=r"split on stage C: axis must be an axis of the stage"):
        A, B, C = sp.chain3()
        s = tc.create_schedule(C.op)
        s[C].split("i", factor=2)


def test_tile_same_axis_twice():
    with pytest.raises(tc.ScheduleError,
                       match=r"split on stage C: axis i was already split or fused away"):
        A, B, C = sp.chain3()
        s = tc.create_schedule(C.op)
        s[C].tile(C.op.axis[0], C.op.axis[0], 2, 2)


def test_fuse_nothing():
    with pytest.raises(tc.ScheduleError, match=r"fuse on stage C: give at least one axis"):
        A, B, C = sp.chain3()
        s = tc.create_schedule(C.op)
        s[C].fuse()


def test_fuse_same_axis():
    with pytest.raises(tc.ScheduleError, match=r"fuse on stage C: axis repeated"):
        A, B, C = sp.chain3()
        s = tc.create_schedule(C.op)
        s[C].fuse(C.op.axis[0], C.op.axis[0])


def test_fuse_after_parallel():
    with pytest.raises(tc.ScheduleError, match=r"fuse on stage C: axis i is already parallel"):
        A, B, C = sp.chain3()
        s = tc.create_schedule(C.op)
        s[C].parallel(C.op.axis[0])
        s[C].fuse(*C.op.axis)


def test_vectorize_after_parallel():
    with pytest.raises(tc.ScheduleError,
                       match=r"vectorize on stage C: axis j is already parallel"):
        A, B, C = sp.chain3()
        s = tc.create_schedule(C.op)
        s[C].parallel(C.op.axis[1])
        s[C].vectorize(C.op.axis[1])


def test_unroll_symbolic_extent():
    with pytest.raises(tc.ScheduleError, match=r"unroll on stage C: axis .* has extent n"):
        n = tc.var("n")
        A = tc.placeholder((n,), name="A")
        C = tc.compute((n,), lambda i: A[i] + 1, name="C")
        s = tc.create_schedule(C.op)
        s[C].unroll(C.op.axis[0])
        tc.lower(s, [A, C])


def test_bind_string_tag():
    with pytest.raises(tc.ScheduleError,
                       match=r"bind on stage C, axis i: the second argument must be a thread axis"):
        A, B, C = sp.chain3()
        s = tc.create_schedule(C.op)
        s[C].bind(C.op.axis[0], "threadIdx.x")


def _inlined_b():
    A, B, C = sp.chain3()
    s = tc.create_schedule(C.op)
    s[B].compute_inline()
    return s, B


def test_vectorize_inlined_stage():
    with pytest.raises(tc.ScheduleError,
                       match=r"vectorize on stage B: the stage is inlined into its consumers"):
        s, B = _inlined_b()
        s[B].vectorize(B.op.axis[1])


def test_parallel_inlined_stage():
    with pytest.raises(tc.ScheduleError, match=r"parallel on stage B: the stage is inlined"):
        s, B = _inlined_b()
        s[B].parallel(B.op.axis[0])


def test_unroll_inlined_stage():
    with pytest.raises(tc.ScheduleError, match=r"unroll on stage B: the stage is inlined"):
        s, B = _inlined_b()
        s[B].unroll(B.op.axis[0])


def test_reorder_inlined_stage():
    with pytest.raises(tc.ScheduleError, match=r"reorder on stage B: the stage is inlined"):
        s, B = _inlined_b()
        s[B].reorder(B.op.axis[1], B.op.axis[0])


def test_pragma_inlined_stage():
    with pytest.raises(tc.ScheduleError, match=r"pragma on stage B: the stage is inlined"):
        s, B = _inlined_b()
        s[B].pragma(B.op.axis[0], "unroll_explicit")


def test_bind_inlined_stage():
    with pytest.raises(tc.ScheduleError, match=r"bind on stage B: the stage is inlined"):
        s, B = _inlined_b()
        s[B].bind(B.op.axis[0], tc.thread_axis("blockIdx.x"))


def test_tile_inlined_stage():
    with pytest.raises(tc.ScheduleError, match=r"split on stage B: the stage is inlined"):
        s, B = _inlined_b()
        s[B].tile(B.op.axis[0], B.op.axis[1], 2, 2)



def test_storage_align_symbolic_stride():
    with pytest.raises(tc.ScheduleError,
                       match=r"storage_align on stage B: the stride of dimension 0 is n, not a constant"):
        n = tc.var("n")
        X = tc.placeholder((4, n), name="X")
        B = tc.compute((4, n), lambda i, j: X[i, j] + 1, name="B")
        C = tc.compute((4, n), lambda i, j: B[i, j] * 2, name="C")
        s = tc.create_schedule(C.op)
        s[B].storage_align(B.op.axis[0], 8, 0)
        tc.lower(s, [X, C])


def test_gpu_schedule_built_for_the_cpu():
    with pytest.raises(tc.BuildError, match=(
            r"the loop over `i\.outer` is bound to the GPU thread axis blockIdx\.x; the llvm "
            r"\(CPU\) target cannot run GPU-bound loops")):
        A = sp.vec(16)
        B = tc.compute((16,), lambda i: A[i] + 1, name="B")
        s = tc.create_schedule(B.op)
        xo, xi = s[B].split(B.op.axis[0], factor=4)
        s[B].bind(xo, tc.thread_axis("blockIdx.x"))
        s[B].bind(xi, tc.thread_axis("threadIdx.x"))
        tc.build(s, [A, B])


def test_cpu_schedule_built_for_the_cuda_emulation():
    with pytest.raises(tc.BuildError,
                       match=r"stage B: its loop nest has no axis bound to a GPU thread"):
        A = sp.vec(16)
        B = tc.compute((16,), lambda i: A[i] + 1, name="B")
        tc.build(tc.create_schedule(B.op), [A, B], target="cuda-emu")


def test_get_source_unknown_kind():
    with pytest.raises(tc.ArgumentError,
                       match=r"get_source: unknown source kind 'foo'; use 'llvm', 'llvm-unopt' or 'asm'"):
        f, A, B = sp.add_kernel()
        f.get_source("foo")


def test_compute_at_string_parent():
    with pytest.raises(tc.ScheduleError, match=r"compute_at on stage B: parent must be a stage"):
        A, B, C = sp.chain3()
        s = tc.create_schedule(C.op)
        s[B].compute_at("C", C.op.axis[0])


def test_compute_at_int_axis():
    with pytest.raises(tc.ScheduleError,
                       match=r"compute_at of B on stage C: axis must be an axis of the stage"):
        A, B, C = sp.chain3()
        s = tc.create_schedule(C.op)
        s[B].compute_at(s[C], 0)


def test_compute_at_axis_split_afterwards():
    with pytest.raises(tc.ScheduleError,
                       match=r"compute_at of B at C\.i: .*(split|fused|no longer)"):
        A, B, C = sp.chain3()
        s = tc.create_schedule(C.op)
        s[B].compute_at(s[C], C.op.axis[0])
        s[C].split(C.op.axis[0], factor=4)
        tc.lower(s, [A, C])


def test_compute_inline_with_attached_stage():
    with pytest.raises(tc.ScheduleError,
                       match=r"compute_inline on stage B: stage .* is computed at one of its loops"):
        A = sp.vec(8)
        X = tc.compute((8,), lambda i: A[i] + 1, name="X")
        B = tc.compute((8,), lambda i: X[i] * 2, name="B")
        C = tc.compute((8,), lambda i: B[i] - 1, name="C")
        s = tc.create_schedule(C.op)
        s[X].compute_at(s[B], B.op.axis[0])
        s[B].compute_inline()


def test_set_scope_unknown():
    with pytest.raises(tc.ScheduleError, match=r"set_scope on stage B: unknown scope 'register'"):
        A, B, C = sp.chain3()
        s = tc.create_schedule(C.op)
        s[B].set_scope("register")


def test_set_scope_output_local():
    with pytest.raises(tc.ScheduleError, match=r"set_scope on stage C: it is an output"):
        A, B, C = sp.chain3()
        s = tc.create_schedule(C.op)
        s[C].set_scope("local")


def test_storage_align_zero_factor():
    with pytest.raises(tc.ScheduleError,
                       match=r"storage_align on stage B: need an int factor >= 1"):
        A, B, C = sp.chain3()
        s = tc.create_schedule(C.op)
        s[B].storage_align(B.op.axis[0], 0, 0)


def test_storage_align_innermost():
    with pytest.raises(tc.ScheduleError,
                       match=r"storage_align on stage B: axis j is the innermost dimension"):
        A, B, C = sp.chain3()
        s = tc.create_schedule(C.op)
        s[B].storage_align(B.op.axis[1], 8, 0)


def test_storage_order_missing_axis():
    with pytest.raises(tc.ScheduleError, match=(
            r"storage_order on stage B: got i; give every output axis \(i, j\) "
            r"exactly once")):
        A, B, C = sp.chain3()
        s = tc.create_schedule(C.op)
        s[B].storage_order(B.op.axis[0])


def test_storage_align_axis_of_other_stage():
    with pytest.raises(tc.ScheduleError,
                       match=r"storage_align on stage B: axis must be one of its output axes"):
        A, B, C = sp.chain3()
        s = tc.create_schedule(C.op)
        s[B].storage_align(C.op.axis[0], 8, 0)


def test_pragma_empty_name():
    with pytest.raises(tc.ScheduleError,
                       match=r"pragma on stage C, axis i: the name must be an identifier .*got ''"):
        A, B, C = sp.chain3()
        s = tc.create_schedule(C.op)
        s[C].pragma(C.op.axis[0], "")


def test_pragma_int_name():
    with pytest.raises(tc.ScheduleError,
                       match=r"pragma on stage C, axis i: the name must be an identifier .*got 3"):
        A, B, C = sp.chain3()
        s = tc.create_schedule(C.op)
        s[C].pragma(C.op.axis[0], 3)


class _ManyLines:
    def __repr__(self):
        return "v\n}\nint x = 1; /*"


@pytest.mark.parametrize("value, shown", [
    (object(), r"object <object object at"), ([1, 2], r"list \[1, 2\]"),
    (float("nan"), r"float nan"), (2**40, r"int 1099511627776"),
    (_ManyLines(), r"_ManyLines v<U\+000A>}<U\+000A>int x = 1; /\*"), ("x" * 257, r"str 'xxx")])
def test_pragma_value_neither_printable_nor_traceable(value, shown):
    """A pragma's value is shown in the printed IR and stored in the trace: once any
    object was taken (an object's address made the IR differ between processes; a
    multi-line repr broke it over lines; a list, NaN or 2**40 made a trace its replay
    refuses)."""
    with pytest.raises(tc.ScheduleError, match=(
            r"pragma note on stage C, axis i: the value is not None, a bool, an int32, a "
            r"finite float or a string of at most 256 characters \(the printed IR shows it "
            r"and the schedule's trace stores it\); got " + shown)):
        A, B, C = sp.chain3()
        s = tc.create_schedule(C.op)
        s[C].pragma(C.op.axis[0], "note", value)


def test_pragma_name_injection():
    with pytest.raises(tc.ScheduleError, match=(
            r"pragma on stage C, axis i: the name must be an identifier \(letters, "
            r"digits, _\), e.g. 'unroll_explicit'; got 'x\\n#include")):
        # the name is printed in a // comment of the IR and of the generated C: a newline in
        # it would end the comment
        A, B, C = sp.chain3()
        s = tc.create_schedule(C.op)
        s[C].pragma(C.op.axis[0], 'x\n#include <cstdlib>\nint y = system("id");')


def test_cache_read_no_readers():
    with pytest.raises(tc.ScheduleError, match=r"cache_read of A: give at least one reader"):
        A, B, C = sp.chain3()
        s = tc.create_schedule(C.op)
        s.cache_read(A, "local", [])


def test_cache_read_string_tensor():
    with pytest.raises(tc.ScheduleError, match=r"cache_read: tensor must be a Tensor, got 'A'"):
        A, B, C = sp.chain3()
        s = tc.create_schedule(C.op)
        s.cache_read("A", "local", [B])


def test_cache_write_placeholder():
    with pytest.raises(tc.ScheduleError, match=r"cache_write of A|A is a placeholder"):
        A, B, C = sp.chain3()
        s = tc.create_schedule(C.op)
        s.cache_write(A, "local")


def test_cache_write_bad_scope():
    with pytest.raises(tc.ScheduleError, match=r"cache_write of B: unknown scope 'tmp'"):
        A, B, C = sp.chain3()
        s = tc.create_schedule(C.op)
        s.cache_write(B, "tmp")


def test_rfactor_bad_factor_axis():
    with pytest.raises(tc.ScheduleError,
                       match=r"rfactor on stage C: factor_axis=5 must be an int in \[0, 2\]"):
        A, B, C, k = sp.mm_small()
        s = tc.create_schedule(C.op)
        ko, ki = s[C].split(k, factor=2)
        s.rfactor(C, ki, factor_axis=5)


def test_rfactor_elementwise():
    with pytest.raises(tc.ScheduleError, match=r"rfactor on stage B: it is not a reduction"):
        A, B, C = sp.chain3()
        s = tc.create_schedule(C.op)
        s.rfactor(B, B.op.axis[0])


def test_rfactor_string():
    with pytest.raises(tc.ScheduleError, match=r"rfactor: tensor must be a Tensor"):
        A, B, C, k = sp.mm_small()
        s = tc.create_schedule(C.op)
        s.rfactor("C", k)


@pytest.mark.parametrize("config, match", [
    ({"mx": 4}, r"unknown parameters \['mx'\]; use mr, nr"),
    ({"mr": 0}, "mr must be a positive int, got 0"),
    ({"kc": 2.5}, "kc must be a positive int"),
    ({"par": "cols"}, "par must be 'rows', 'blocks' or 'threads'"),
    ([("mr", 4)], "config must be a GemmParams"),
])
def test_cpu_gemm_template_bad_config(config, match):
    from tecomp.strategy import cpu
    from tecomp.nn import ops

    A, B = tc.placeholder((8, 8), name="A"), tc.placeholder((8, 8), name="B")
    with pytest.raises(tc.ScheduleError, match=match):
        cpu.schedule_matmul(ops.matmul(A, B), config=config)


@pytest.mark.parametrize("layout, config, match", [
    ("nchw", {"block": 4}, r"unknown parameters \['block'\]; use ob, yb, xb, by_channels, "
                           r"weight_copy, tasks, rows_per_task"),
    ("nhwc", {"weight_copy": "yes"}, "weight_copy must be True or False, got 'yes'"),
    ("nchw", {"ob": -1}, "ob must be a positive int, got -1"),
    ("nchw", {"by_channels": 1}, "by_channels must be True or False"),
    ("nhwc", {"by_channels": True}, "by_channels must be False"),
    ("nhwc", (4, 1, 8), "config must be a ConvParams"),
    ("nchw", {"tasks": "threads"}, r"tasks must be one of 'rows', 'blocks', 'channels', "
                                   r"'image_channels', 'block_rows' \(or '' for the "
                                   r"heuristic's\), got 'threads'"),
    ("nhwc", {"rows_per_task": -2}, r"rows_per_task must be an int >= 0 \(0: the "
                                    r"heuristic's\), got -2"),
    ("nchw", {"tasks": "channels", "rows_per_task": 2},
     r"rows_per_task is for tasks='rows', not 'channels'"),
    ("nchw", {"tasks": "rows", "rows_per_task": 4, "yb": 2},
     r"rows_per_task=4 must divide the 2 row blocks of 2 rows; give a divisor, or 0"),
])
def test_cpu_conv_template_bad_config(layout, config, match):
    from tecomp.strategy import cpu
    from tecomp.nn import ops

    if layout == "nchw":
        d, w = tc.placeholder((1, 4, 6, 6), name="d"), tc.placeholder((8, 4, 3, 3), name="w")
        out, sched = ops.conv2d_nchw(d, w), cpu.schedule_conv2d_nchw
    else:
        d, w = tc.placeholder((1, 6, 6, 4), name="d"), tc.placeholder((3, 3, 4, 8), name="w")
        out, sched = ops.conv2d_nhwc(d, w), cpu.schedule_conv2d_nhwc
    with pytest.raises(tc.ScheduleError, match=match):
        sched(out, config=config)


@pytest.mark.parametrize("layout, config, match", [
    ("nchw", {"block": 4}, r"group_conv2d_nchw schedule: unknown parameters \['block'\]; use "
                           r"channel_blocks, ob, yb, xb, groups_per_task, interleave, "
                           r"copy_input, transpose_out"),
    ("nhwc", {"interleave": 1}, "group_conv2d_nhwc schedule: interleave must be True or "
                                "False, got 1"),
    ("nhwc", {"interleave": True}, r"group_conv2d_nhwc schedule: interleave=True needs an "
                                   r"NHWC float32 convolution whose groups' output channels "
                                   r"divide a vector \(\d+ lanes here\) into 2 or more "
                                   r"groups, .*; conv2d_nhwc has 4 per group: use "
                                   r"interleave=False"),
    ("nchw", {"interleave": True}, r"group_conv2d_nchw schedule: interleave=True needs an "
                                   r"NHWC float32 convolution"),
    ("nhwc", {"channel_blocks": 1}, "group_conv2d_nhwc schedule: channel_blocks must be True "
                                    "or False, got 1"),
    ("nchw", {"yb": 0}, "group_conv2d_nchw schedule: yb must be a positive int, got 0"),
    ("nchw", {"copy_input": "yes"}, "group_conv2d_nchw schedule: copy_input must be True or "
                                    "False, got 'yes'"),
    ("nchw", {"channel_blocks": False, "transpose_out": True},
     r"group_conv2d_nchw schedule: transpose_out=True needs the NCHW channel blocks "
     r"\(channel_blocks=True\) .*use transpose_out=False"),
    ("nchw", {"channel_blocks": True, "ob": 8, "xb": 6, "transpose_out": True},
     r"transpose_out=True needs .*xb from 2 to the lanes dividing the output's columns"),
    ("nhwc", {"transpose_out": True}, r"group_conv2d_nhwc schedule: transpose_out=True needs "
                                      r"the NCHW channel blocks"),
    ("nhwc", {"copy_input": True}, r"group_conv2d_nhwc schedule: copy_input=True is an option "
                                   r"of the NCHW rows blocking .*leave copy_input out"),
    ("nhwc", {"ob": 3}, r"ob=3 must divide the 4 output channels of a group \(a block stays "
                        r"in one group\); give a divisor of 4"),
    ("nchw", {"groups_per_task": 3}, "groups_per_task=3 must divide the 2 groups; give a "
                                     "divisor of 2"),
    ("nhwc", [("ob", 4)], "group_conv2d_nhwc schedule: config must be a dict"),
])
def test_cpu_group_conv_template_bad_config(layout, config, match):
    from tecomp.strategy import cpu
    from tecomp.nn import ops

    if layout == "nchw":
        d, w = tc.placeholder((1, 4, 6, 6), name="d"), tc.placeholder((8, 2, 3, 3), name="w")
        out, sched = ops.conv2d_nchw(d, w, groups=2), cpu.schedule_group_conv2d_nchw
    else:
        d, w = tc.placeholder((1, 6, 6, 4), name="d"), tc.placeholder((3, 3, 2, 8), name="w")
        out, sched = ops.conv2d_nhwc(d, w, groups=2), cpu.schedule_group_conv2d_nhwc
    with pytest.raises(tc.ScheduleError, match=match):
        sched(out, config=config)


def test_cpu_group_conv_channel_blocks_data_is_weight():
    """One tensor as both the data and the weight of a grouped convolution: the channel
    blocks' two copies cannot both replace it; the other blocking takes it."""
    from tecomp.strategy import cpu
    from tecomp.nn import ops

    x = tc.placeholder((3, 3, 3, 6), name="xw")
    out = ops.conv2d_nhwc(x, x, groups=2)
    with pytest.raises(tc.ScheduleError, match=r"group_conv2d_nhwc schedule of .*: channel "
                       r"blocks copy the data and the weight apart, but they are one tensor "
                       r"\(xw\); use channel_blocks=False"):
        cpu.schedule_group_conv2d_nhwc(out, config={"channel_blocks": True})
    for config in ({"channel_blocks": False}, None):   # (None: the heuristic's, no copies)
        cpu.schedule_group_conv2d_nhwc(out, config=config)


@pytest.mark.parametrize("config, match", [
    (dict(threads_k=32, threads_y=8, threads_x=8), r"conv2d_nchw: the tiling .* has 2048 "
     r"threads per block, more than CUDA's 1024; use fewer"),
    (dict(regs_k=16, threads_k=16, c_tile=16), r"conv2d_nchw: the tiling .* needs \d+ bytes "
     r"of shared memory per block, more than the 49152 .* use a smaller c_tile"),
    (lambda d, shape: (4, 4), "config must be a ConvConfig"),
])
def test_cuda_conv_template_bad_config(config, match):
    """A CUDA convolution tiling that cannot launch is refused when it is scheduled, not
    when the kernel is launched; a ``config`` function must return a ConvConfig."""
    from dataclasses import replace

    from tecomp.strategy import cuda
    from tecomp.nn import ops

    d, w = tc.placeholder((2, 64, 14, 14), name="d"), tc.placeholder((64, 64, 3, 3), name="w")
    y = ops.conv2d_nchw(d, w, 1, 1)
    if isinstance(config, dict):
        fields = config
        config = lambda default, shape: replace(default, **fields)  # noqa: E731
    with pytest.raises(tc.ScheduleError, match=match):
        cuda.schedule_conv2d_nchw(y, "cuda", config)


def _tiled_gpu_gemm(n=64, kt=8, double=("A.shared", "B.shared"), at="ko", bind=True):
    """A GEMM with A and B copied to shared tiles at its k.outer loop (or ``at`` another
    loop); ``double``: the tiles that are double-buffered."""
    A, B, C, k = _mm(n)
    s = tc.create_schedule(C.op)
    CL = s.cache_write(C, "local")
    AS = s.cache_read(A, "shared", [CL])
    BS = s.cache_read(B, "shared", [CL])
    i, j = s[C].op.axis
    bi, ti = s[C].split(i, factor=8)
    bj, tj = s[C].split(j, factor=8)
    s[C].reorder(bi, bj, ti, tj)
    if bind:
        s[C].bind(bi, tc.thread_axis("blockIdx.y"))
        s[C].bind(bj, tc.thread_axis("blockIdx.x"))
        s[C].bind(ti, tc.thread_axis("threadIdx.y"))
        s[C].bind(tj, tc.thread_axis("threadIdx.x"))
    s[CL].compute_at(s[C], tj)
    ko, ki = s[CL].split(s[CL].op.reduce_axis[0], factor=kt)
    for T in (AS, BS):
        s[T].compute_at(s[CL], ko if at == "ko" else ki)
        f = s[T].fuse(*s[T].op.axis)
        fo, fi = s[T].split(f, factor=8)
        if bind:
            s[T].bind(fi, tc.thread_axis("threadIdx.x"))
        if T.name in double:
            s[T].double_buffer()
    return s, [A, B, C]


@pytest.mark.parametrize("stages", [1, 9, "3", True])
def test_double_buffer_with_a_bad_number_of_stages(stages):
    A, B, C, k = _mm()
    s = tc.create_schedule(C.op)
    AS = s.cache_read(A, "shared", [C])
    with pytest.raises(tc.ScheduleError, match=r"double_buffer on stage A.shared: stages=.*; "
                                               r"give an int from 2 \(two buffers, the default\) "
                                               r"to 8"):
        s[AS].double_buffer(stages=stages)


def test_double_buffer_with_different_stages_in_one_loop():
    s, args = _tiled_gpu_gemm(double=("A.shared",))
    BS = [st for st in s.stages if st.op.name == "B.shared"][0]
    BS.double_buffer(stages=3)
    with pytest.raises(tc.ScheduleError, match=r"double_buffer on stages .*: the stages copied "
                                               r"in loop k.outer's iteration have 2 and 3 "
                                               r"buffers; .* give each the same "
                                               r"double_buffer\(stages=...\)"):
        tc.lower(s, args, target="cuda")


def test_double_buffer_of_a_global_stage():
    A, B, C, k = _mm()
    s = tc.create_schedule(C.op)
    AA = s.cache_read(A, "global", [C])
    with pytest.raises(tc.ScheduleError,
                       match=r"double_buffer on stage A.global: its scope is global; double "
                             r"buffering is for a GPU tile in shared memory"):
        s[AA].double_buffer()


def test_double_buffer_of_a_stage_at_the_root():
    A, B, C, k = _mm()
    s = tc.create_schedule(C.op)
    AS = s.cache_read(A, "shared", [C])
    s[AS].double_buffer()
    with pytest.raises(tc.ScheduleError, match=r"double_buffer on stage A.shared: the stage is "
                                               r"computed at the root; double buffering needs a "
                                               r"shared-memory stage computed at a serial loop"):
        tc.lower(s, [A, B, C], target="cuda")


def test_double_buffer_of_one_of_two_tiles_copied_together():
    s, args = _tiled_gpu_gemm(double=("A.shared",))
    with pytest.raises(tc.ScheduleError, match=r"double_buffer on stage A.shared: B.shared is "
                                               r"copied in the same iteration of loop k.outer "
                                               r"but not double-buffered.*"
                                               r"s\[B.shared\].double_buffer\(\) too"):
        tc.lower(s, args, target="cuda")


def test_double_buffer_outside_a_gpu_kernel():
    """The same tiles with no thread binding (a CPU schedule): no kernel to pipeline."""
    s, args = _tiled_gpu_gemm(bind=False)
    with pytest.raises(tc.ScheduleError, match=r"double_buffer on stages .*: computed at loop "
                                               r"k.outer, which is outside any GPU kernel"):
        tc.lower(s, args)



def test_store_root_under_a_parallel_loop_whose_iterations_overlap():
    """At D's parallel batch loop every iteration computes all of S: two threads would
    sum into the same elements of the shared buffer."""
    X, S, D, G = _channel_sum()
    s = tc.create_schedule([D.op, G.op])
    s[D].parallel(s[D].op.axis[0])
    s[S].compute_at(s[D], s[D].op.axis[0])
    s[S].store_root()
    with pytest.raises(tc.ScheduleError, match=r"store_root on stage S: iterations of the "
                                               r"parallel loop D.i may compute overlapping "
                                               r"parts of S"):
        tc.lower(s, [X, D, G])


def test_store_root_of_a_local_stage():
    X, S, D, G = _channel_sum()
    s = tc.create_schedule([D.op, G.op])
    s[S].compute_at(s[D], s[D].op.axis[1])
    s[S].set_scope("local")
    s[S].store_root()
    with pytest.raises(tc.ScheduleError, match=r"store_root on stage S: its scope is local; "
                                               r"a buffer kept at the root is global"):
        tc.lower(s, [X, D, G])


def test_store_root_of_an_output():
    X, S, D, G = _channel_sum()
    s = tc.create_schedule([D.op, G.op])
    with pytest.raises(tc.ScheduleError, match=r"store_root on stage G: it is an output"):
        s[G].store_root()


def test_store_root_whose_outside_reader_is_read_inside():
    """G reads S (computed inside D's nest) and D reads G: no order of the nests works."""
    X = tc.placeholder((3, 9, 13), name="X")
    n, w = tc.reduce_axis((0, 3), name="n"), tc.reduce_axis((0, 13), name="w")
    S = tc.compute((9,), lambda c: tc.sum(X[n, c, w], axis=[n, w]), name="S")
    G = tc.compute((9,), lambda c: S[c] * 2.0, name="G")
    D = tc.compute((3, 9, 13), lambda i, c, j: X[i, c, j] - S[c] + G[(c + 1) % 9], name="D")
    s = tc.create_schedule(D.op)
    s[S].compute_at(s[D], s[D].op.axis[1])
    s[S].store_root()
    with pytest.raises(tc.ScheduleError, match=r"store_root: the loop nests of G, D cannot be "
                                               r"ordered"):
        tc.lower(s, [X, D])


def test_store_root_read_in_the_same_nest_before_it_is_computed():
    """E, computed at D's channel loop, reads S, which is computed at D's inner loop:
    in the same nest, before S (store_root does not make it ready there)."""
    X, S, D, G = _channel_sum()
    E = tc.compute((3, 9, 13), lambda i, c, j: D[i, c, j] + S[(c + 1) % 9], name="E")
    s = tc.create_schedule([E.op, G.op])
    i, c, j = s[E].op.axis
    s[D].compute_at(s[E], c)
    s[S].compute_at(s[D], s[D].op.axis[2])
    s[S].store_root()
    with pytest.raises(tc.ScheduleError, match=r"compute_at of S at D.j: its consumer E is not "
                                               r"computed inside that loop"):
        tc.lower(s, [X, E, G])


def test_store_root_whose_outside_reader_reads_what_the_nest_never_computes():
    """D covers 5 of S's 9 channels, so its nest computes S[0:5]; G reads all 9 after it
    (before the check, G read 4 elements no iteration wrote: fuzzer, store_root family)."""
    X = tc.placeholder((3, 9, 13), name="X")
    n, w = tc.reduce_axis((0, 3), name="n"), tc.reduce_axis((0, 13), name="w")
    S = tc.compute((9,), lambda c: tc.sum(X[n, c, w], axis=[n, w]), name="S")
    D = tc.compute((3, 5, 13), lambda i, c, j: X[i, c, j] - S[c], name="D")
    G = tc.compute((9,), lambda c: S[c] * 2.0, name="G")
    s = tc.create_schedule([D.op, G.op])
    s[S].compute_at(s[D], s[D].op.axis[1])
    s[S].store_root()
    with pytest.raises(tc.ScheduleError, match=r"store_root on stage S: the loop nest of D "
                                               r"computes S\[0:5\] but G reads S\[0:9\] after "
                                               r"it: it would read elements that are never "
                                               r"written"):
        tc.lower(s, [X, D, G])


def test_store_root_under_a_parallel_loop_whose_threads_overlap_over_an_inner_loop():
    """D[i, c] reads S[i + c], S computed at the loop over c inside D's parallel loop over
    i: thread i computes S[i:i + 9], thread i + 1 S[i + 1:i + 10] (before the check, each
    iteration's part, one element, was compared, and the race was accepted)."""
    X = tc.placeholder((3, 12), name="X")
    r = tc.reduce_axis((0, 3), name="r")
    S = tc.compute((12,), lambda k: tc.sum(X[r, k], axis=r), name="S")
    D = tc.compute((4, 9), lambda i, c: S[i + c], name="D")
    G = tc.compute((12,), lambda k: S[k] * 2.0, name="G")
    s = tc.create_schedule([D.op, G.op])
    s[D].parallel(s[D].op.axis[0])
    s[S].compute_at(s[D], s[D].op.axis[1])
    s[S].store_root()
    with pytest.raises(tc.ScheduleError, match=r"store_root on stage S: iterations of the "
                                               r"parallel loop D.i may compute overlapping "
                                               r"parts of S"):
        tc.lower(s, [X, D, G])


def _row_sums_in_shared(cooperative):
    A = tc.placeholder((64, 48), name="A")
    k = tc.reduce_axis((0, 48), name="k")
    C = tc.compute((64,), lambda i: tc.sum(A[i, k] * 2, axis=k), name="C")
    s = tc.create_schedule(C.op)
    o, i = s[C].split(C.op.axis[0], 16)
    s[C].bind(o, tc.thread_axis("blockIdx.x"))
    s[C].bind(i, tc.thread_axis("threadIdx.x"))
    CS = s.cache_write(C, "shared")
    if cooperative:     # the threads share the tile's rows: one row each
        s[CS].compute_at(s[C], o)
        s[CS].bind(CS.op.axis[0], tc.thread_axis("threadIdx.x"))
    else:
        s[CS].compute_at(s[C], i)
    return s, [A, C]


def test_shared_reduction_run_whole_by_every_thread():
    """Every thread ran the block's whole reduction into the same shared elements: wrong
    sums in the CUDA emulation (and a race on a GPU; the interpreter says RaceError)."""
    s, args = _row_sums_in_shared(cooperative=False)
    with pytest.raises(tc.ScheduleError,
                       match=r"compute_at of C.shared: it is a reduction into shared memory, "
                             r"computed inside the loop i.inner of stage C, which is bound to "
                             r"threadIdx.x, and no loop of C.shared is bound to threadIdx.x: "
                             r"every thread of the block would run the whole reduction.*bind a "
                             r"data-parallel axis of C.shared to threadIdx.x \(split it by 16\)"):
        tc.lower(s, args, target="cuda-emu")


def test_shared_reduction_shared_among_the_threads():
    """The fix the message names: the tile's rows bound to threadIdx.x."""
    from tecomp.ir import interp
    s, args = _row_sums_in_shared(cooperative=True)
    a = np.random.default_rng(0).random((64, 48), dtype=np.float32)
    c = np.zeros(64, np.float32)
    interp.run(tc.lower(s, args, target="cuda-emu"), a, c)      # no RaceError
    np.testing.assert_allclose(c, (a * 2).sum(1), rtol=1e-5)


@pytest.mark.parametrize("name", ["fp_reciprocal", "zero_terms", "fp_contract", "nontemporal",
                                  "masked_wide_loads", "partition", "no_partition",
                                  "unroll_explicit"])
@pytest.mark.parametrize("value", [False, 0, "off", 1])
def test_flag_pragma_given_a_value(name, value):
    """A pragma that is on where it is set takes no value: ``False``, ``0`` or ``"off"``
    would read as off and turned it on (``pragma(axis, "fp_reciprocal", False)``
    multiplied by reciprocals)."""
    A, B, C, k = _mm()
    s = tc.create_schedule(C.op)
    with pytest.raises(tc.ScheduleError, match=rf"pragma {name} on stage C, axis i: the pragma "
                                               rf"takes no value \(set, it is on; to keep it off, "
                                               rf"do not set it\), got {value!r}; write "
                                               rf"s\[T\]\.pragma\(axis, '{name}'\)"):
        s[C].pragma(C.op.axis[0], name, value)
    s[C].pragma(C.op.axis[0], name)          # no value, or True: on
    s[C].pragma(C.op.axis[1], name, True)


@pytest.mark.parametrize("value", [None, "X", 3, True])
def test_load_each_use_names_a_tensor_the_stage_reads(value):
    """``pragma load_each_use`` takes the name of a tensor the stage reads (whose vectors
    each use in the nest then loads itself): no value, another tensor's name or a
    non-string is a ScheduleError that lists the names it may take."""
    A, B, C, k = _mm()
    s = tc.create_schedule(C.op)
    with pytest.raises(tc.ScheduleError, match=rf"pragma load_each_use on stage C, axis i: the "
                                               rf"value is the name of a tensor the stage reads "
                                               rf"\(here 'A', 'B'\), whose vectors the nest then "
                                               rf"loads at each use; got {value!r}"):
        s[C].pragma(C.op.axis[0], "load_each_use", value)
    s[C].pragma(C.op.axis[0], "load_each_use", "B")      # B's loads in the nest: each kept
    assert "pragma_load_each_use = 'B'" in str(tc.lower(s, [A, B, C]))


@pytest.mark.parametrize("value", [None, 0, 8, 24, 128, "32", True, 32.0])
def test_vector_bytes_is_a_register_width(value):
    """``pragma vector_bytes`` takes the width in bytes of the registers the kernel is
    compiled for, 16, 32 or 64: no value, another number, a string, a bool or a float is
    a ScheduleError that names the widths it may take."""
    A, B, C, k = _mm()
    s = tc.create_schedule(C.op)
    with pytest.raises(tc.ScheduleError, match=rf"pragma vector_bytes on stage C, axis i: the "
                                               rf"value is the width in bytes of the vector "
                                               rf"registers the kernel is compiled for, 16, 32 "
                                               rf"or 64; got"):
        s[C].pragma(C.op.axis[0], "vector_bytes", value)
    s[C].pragma(C.op.axis[0], "vector_bytes", 32)
    assert "pragma_vector_bytes = 32" in str(tc.lower(s, [A, B, C]))


def test_prefetch_carry_not_an_enclosing_itervar():
    A = tc.placeholder((8, 64), name="A")
    B = tc.compute((8, 64), lambda i, j: A[i, j] + 1.0, name="B")
    s = tc.create_schedule(B.op)
    jo, ji = s[B].split(B.op.axis[1], factor=16)
    with pytest.raises(tc.ScheduleError, match=r"prefetch of A on stage B, axis j.outer: carry "
                                               r"must be the IterVar of a loop around j.outer"):
        s[B].prefetch(A, jo, 1, carry="i")
    with pytest.raises(tc.ScheduleError, match=r"carry must be the IterVar"):
        s[B].prefetch(A, jo, 1, carry=jo)
    s[B].prefetch(A, jo, 1, carry=ji)  # ji is inside jo: found at lowering
    with pytest.raises(tc.ScheduleError, match=r"prefetch of A on stage B, axis j.outer: carry="
                                               r"j.inner is not a loop around j.outer \(the loops "
                                               r"around it are i\)"):
        tc.lower(s, [A, B])


@pytest.mark.parametrize("offset", [0, -1])
def test_prefetch_carry_needs_a_positive_offset(offset):
    A = tc.placeholder((8, 64), name="A")
    B = tc.compute((8, 64), lambda i, j: A[i, j] + 1.0, name="B")
    s = tc.create_schedule(B.op)
    i, j = B.op.axis
    jo, ji = s[B].split(j, factor=16)
    with pytest.raises(tc.ScheduleError, match=r"prefetch of A on stage B, axis j.outer: carry "
                                               r"continues the prefetch past the end of "
                                               r"j.outer's loop into the next iteration of i, so "
                                               r"it needs a positive offset \(got offset="):
        s[B].prefetch(A, jo, offset, carry=i)


def test_prefetch_carry_around_along():
    A = tc.placeholder((4, 64, 16), name="A")
    B = tc.compute((4, 64, 16), lambda t, k, j: A[t, k, j] + 1.0, name="B")
    s = tc.create_schedule(B.op)
    t, k, j = B.op.axis
    ko, ki = s[B].split(k, factor=16)
    with pytest.raises(tc.ScheduleError, match=r"prefetch of A on stage B, axis k.inner: "
                                               r"carry=k.outer is along= itself; carry must be "
                                               r"a loop around k.outer"):
        s[B].prefetch(A, ki, 1, along=ko, carry=ko)
    s[B].prefetch(A, ki, 1, along=t, carry=ko)  # ko is inside t: found at lowering
    with pytest.raises(tc.ScheduleError, match=r"prefetch of A on stage B, axis k.inner: "
                                               r"carry=k.outer is inside along=t; carry must be "
                                               r"a loop around t \(the loops around it are "
                                               r"none\)"):
        tc.lower(s, [A, B])


def test_separate_errors():
    A = tc.placeholder((10, 41), name="A")
    r, k = tc.reduce_axis((0, 3), name="r"), tc.reduce_axis((0, 5), name="k")
    C = tc.compute((8, 19), lambda i, j: tc.sum(A[i + r, j * 2 + k], axis=[r, k]), name="C")
    D = tc.compute((8, 19), lambda i, j: C[i, j] * 2.0, name="D")
    s = tc.create_schedule(D.op)
    with pytest.raises(tc.ScheduleError, match=r"separate on stage D: it is not a single "
                                               r"reduction"):
        s.separate(D, k)
    with pytest.raises(tc.ScheduleError, match=r"separate on stage C: axis 'i' is not one "
                                               r"of its reduce axes \(r, k\)"):
        s.separate(C, C.op.axis[0])
    s[C].split(C.op.axis[1], factor=4)
    with pytest.raises(tc.ScheduleError, match=r"separate on stage C: its loops are already "
                                               r"transformed; call separate first"):
        s.separate(C, k)
    r2, k2 = tc.reduce_axis((0, 3), name="r"), tc.reduce_axis((0, 3), name="k")
    E = tc.compute((8, 19), lambda i, j: tc.sum(A[i + k2, j * 2 + k2 + r2], axis=[r2, k2]),
                   name="E")
    with pytest.raises(tc.ScheduleError, match=r"separate on stage E: k must step along one "
                                               r"dimension of one tensor read"):
        tc.create_schedule(E.op).separate(E, k2)
    k3 = tc.reduce_axis((0, 3), name="k")
    G = tc.compute((19,), lambda j: tc.sum(A[0, j * 2 + k3], axis=k3), name="G")
    with pytest.raises(tc.ScheduleError, match=r"separate on stage G: it reduces over one "
                                               r"axis only"):
        tc.create_schedule(G.op).separate(G, k3)
    r4, k4 = tc.reduce_axis((0, 3), name="r"), tc.reduce_axis((0, 5), name="k")
    H = tc.compute((8, 19), lambda i, j: tc.max(A[i + r4, j * 2 + k4], axis=[r4, k4],
                                               where=k4 <= j), name="H")
    with pytest.raises(tc.ScheduleError, match=r"separate on stage H: its reduction has a "
                                               r"where= condition"):
        tc.create_schedule(H.op).separate(H, k4)


def test_separate_with_an_axis_of_the_stage_before():
    """Session 25: separate twice, or after cache_write, with the axis object of the stage
    as it was: the message named kx and listed kx (another object of that name)."""
    A = tc.placeholder((10, 41), name="A")
    r, k = tc.reduce_axis((0, 3), name="r"), tc.reduce_axis((0, 5), name="k")
    C = tc.compute((8, 19), lambda i, j: tc.max(A[i + r, j * 2 + k], axis=[r, k]), name="C")
    s = tc.create_schedule(C.op)
    s.separate(C, k)
    with pytest.raises(tc.ScheduleError, match=r"separate on stage C: axis 'k' is not one of "
                                               r"its reduce axes \(k\); it is another object "
                                               r"of the same name .*s\[C\]\.op\.reduce_axis"):
        s.separate(C, k)
    s2 = tc.create_schedule(C.op)
    CC = s2.cache_write(C, "global")
    with pytest.raises(tc.ScheduleError, match=r"take it from s\[C\.global\]\.op\.reduce_axis"):
        s2.separate(CC, k)
