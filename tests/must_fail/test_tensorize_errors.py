"""Programs that must fail: tensor intrinsics (tc.decl_tensor_intrin, s[C].tensorize,
tc.tensor_intrin, cache_read(blocks=)).  Each asserts the error class and its text."""
import pytest

import tecomp as tc

AVX2 = "x86.avx2_u8s8s32_8x4"


def _gemm(M=8, N=16, K=16, dtype_a="uint8", dtype_b="int8"):
    A = tc.placeholder((M, K), dtype_a, name="A")
    B = tc.placeholder((K, N), dtype_b, name="B")
    k = tc.reduce_axis((0, K), name="k")
    C = tc.compute((M, N), lambda i, j: tc.sum(A[i, k].astype("int32") * B[k, j].astype("int32"),
                                               axis=k), name="C")
    return A, B, C


def _sched(A, B, C, jf=8, kf=4, pack=True, order=None):
    s = tc.create_schedule(C.op)
    if pack:
        s.cache_read(B, "global", [C], blocks=[(1, jf), (0, kf)])
    i, j = s[C].op.axis
    (k,) = s[C].op.reduce_axis
    jo, ji = s[C].split(j, factor=jf)
    ko, ki = s[C].split(k, factor=kf)
    s[C].reorder(*(order(i, jo, ko, ji, ki) if order else (i, jo, ko, ji, ki)))
    return s, (i, jo, ko, ji, ki)


def _lower(s, args):
    return tc.lower(s, list(args))


def _tensorized(intrin=AVX2, at=3, **kw):
    """The GEMM of _gemm scheduled by _sched (keywords of both), tensorized at loop ``at``
    of (i, jo, ko, ji, ki)."""
    gk = {k: kw.pop(k) for k in ("M", "N", "K", "dtype_a", "dtype_b") if k in kw}
    A, B, C = _gemm(**gk)
    s, loops = _sched(A, B, C, **kw)
    s[C].tensorize(loops[at], tc.tensor_intrin(intrin))
    return s, [A, B, C]


def test_the_stage_computes_something_else():
    A, B, _ = _gemm()
    k = tc.reduce_axis((0, 16), name="k")
    E = tc.compute((8, 16), lambda i, j: tc.sum(A[i, k].astype("int32") + B[k, j].astype("int32"),
                                                axis=k), name="E")
    s, (i, jo, ko, ji, ki) = _sched(A, B, E)
    s[E].tensorize(ji, tc.tensor_intrin(AVX2))
    with pytest.raises(tc.ScheduleError, match=r"tensorize on stage E at loop j.inner with "
                                               r"x86.avx2_u8s8s32_8x4: the stage computes `.*\+.*` "
                                               r"where the intrinsic computes `.*\*.*`"):
        _lower(s, [A, B, E])


def test_an_operand_of_another_dtype():
    s, args = _tensorized(dtype_a="int8")
    with pytest.raises(tc.ScheduleError, match=r"the stage computes `A\[i, k.outer\*4 \+ k.inner\]` "
                                               r"\(int8\) where the intrinsic computes `a\[k.inner\]` "
                                               r"\(uint8\)"):
        _lower(s, args)


def _reduction(fbody, M=8, N=16, K=16, dtype="uint8"):
    """``_tensorized``'s schedule (AVX2 at j.inner) of ``C[i, j] = fbody(A, B, k, i, j)``."""
    A = tc.placeholder((M, K), dtype, name="A")
    B = tc.placeholder((K, N), "int8" if dtype == "uint8" else dtype, name="B")
    k = tc.reduce_axis((0, K), name="k")
    outs = tc.compute((M, N), lambda i, j: fbody(A, B, k, i, j), name="C")
    C = outs[0] if isinstance(outs, (list, tuple)) else outs
    s, loops = _sched(A, B, C)
    s[C].tensorize(loops[3], tc.tensor_intrin(AVX2))
    return s, [A, B] + (list(outs) if isinstance(outs, (list, tuple)) else [C])


def test_a_reduction_in_another_dtype():
    # a float32 GEMM against the u8 x s8 -> s32 intrinsic: both sum, in different dtypes
    s, args = _reduction(lambda A, B, k, i, j: tc.sum(A[i, k] * B[k, j], axis=k), dtype="float32")
    with pytest.raises(tc.ScheduleError, match=r"tensorize on stage C at loop j.inner with "
                                               r"x86.avx2_u8s8s32_8x4: the stage's sum accumulates "
                                               r"float32 and the intrinsic's int32: the intrinsic "
                                               r"computes sum\(`int32\(a\[r\]\)\*int32\(b\[i, r\]\)`\) "
                                               r"\(a: uint8, b: int8\); declare the stage's operands "
                                               r"with those dtypes and cast them to int32"):
        _lower(s, args)


def test_a_reduction_with_another_combiner():
    s, args = _reduction(lambda A, B, k, i, j: tc.max(A[i, k].astype("int32") * B[k, j].astype("int32"),
                                                      axis=k))
    with pytest.raises(tc.ScheduleError, match=r"the stage reduces with max and the intrinsic "
                                               r"with sum$"):
        _lower(s, args)


def test_a_reduction_from_another_identity():
    plus_one = tc.comm_reducer(lambda x, y: x + y, lambda t: tc.const(1, t), name="sum")
    s, args = _reduction(lambda A, B, k, i, j: plus_one(A[i, k].astype("int32") *
                                                        B[k, j].astype("int32"), axis=k))
    with pytest.raises(tc.ScheduleError, match=r"the stage's sum starts from 1 and the "
                                               r"intrinsic's from 0; tensorize a reduction with "
                                               r"the intrinsic's identity"):
        _lower(s, args)


def test_a_loop_of_the_wrong_extent():
    s, args = _tensorized(jf=16)
    with pytest.raises(tc.ScheduleError, match=r"loop j.inner runs 16 times, and the intrinsic's "
                                               r"axis i that it maps to 8; split the stage's axis by 8"):
        _lower(s, args)


def test_too_few_loops_in_the_region():
    s, args = _tensorized(at=2)
    with pytest.raises(tc.ScheduleError, match=r"the region has 2 reduction loop\(s\) \(k.outer, "
                                               r"k.inner\) and the intrinsic 1 \(r\)"):
        _lower(s, args)


def test_an_operand_that_is_not_packed():
    s, args = _tensorized(pack=False)
    with pytest.raises(tc.ScheduleError, match=r"operand b \(shape \[8, 4\]\) is a block of B with "
                                               r"element strides \[1, 16\].*contiguous \(strides "
                                               r"\[4, 1\]\); pack B"):
        _lower(s, args)


def test_a_guard_inside_the_region():
    s, args = _tensorized(N=20, pack=False)   # 20 columns in vectors of 8
    with pytest.raises(tc.ScheduleError, match=r"the region has a bounds guard .*: a split there "
                                               r"does not divide its axis"):
        _lower(s, args)


def test_split_after_tensorize():
    s, args = _tensorized()
    st = s[args[2]]
    st.split(st.leaf_iter_vars[3], factor=2)
    with pytest.raises(tc.ScheduleError, match=r"axis j.inner was split or fused after tensorize"):
        _lower(s, args)


def test_not_an_intrinsic():
    A, B, C = _gemm()
    s, (i, jo, ko, ji, ki) = _sched(A, B, C)
    with pytest.raises(tc.ScheduleError, match=r"the second argument must be a tensor intrinsic"):
        s[C].tensorize(ji, "x86.avx2_u8s8s32_8x4")


def test_unknown_builtin_name():
    with pytest.raises(tc.ScheduleError, match=r"no built-in intrinsic is called 'x86.amx'; the "
                                               r"built-ins are aarch64.neon_u8s8s32_4x4, aarch64.smmla_s8s8s32_2x2x8, "
                                               r"aarch64.ummla_u8u8s32_2x2x8, aarch64.usdot_u8s8s32_4x4, "
                                               r"aarch64.usmmla_u8s8s32_2x2x8, "
                                               r"cuda.dp4a_s8s8s32, cuda.dp4a_u8s8s32, cuda.mma_acc_to_a_bf16, "
                                               r"cuda.mma_acc_to_a_f16, cuda.mma_add_cols_f32, "
                                               r"cuda.mma_atomic_add_f32, "
                                               r"cuda.mma_bf16bf16f32, "
                                               r"cuda.mma_exp2_diff_or_zero_f32, "
                                               r"cuda.mma_exp2_diff_or_zero_ftz_f32, "
                                               r"cuda.mma_exp_diff_f32, "
                                               r"cuda.mma_exp_diff_or_zero_f32, "
                                               r"cuda.mma_exp_diff_or_zero_ftz_f32, "
                                               r"cuda.mma_f16f16f32, "
                                               r"cuda.mma_fill_f32, .*, cuda.wmma_fill_f32, .*, "
                                               r"x86.avx2_u8s8s32_8x4"):
        tc.tensor_intrin("x86.amx")


def test_vectorized_loop_around_the_region():
    s, args = _tensorized()
    s[args[2]].vectorize(s[args[2]].leaf_iter_vars[1])
    with pytest.raises(tc.ScheduleError, match=r"loop j.outer around the region is vectorized"):
        _lower(s, args)


def test_a_stage_computed_inside_the_region():
    A, B, C = _gemm()
    s, (i, jo, ko, ji, ki) = _sched(A, B, C, pack=False)
    Bp = s.cache_read(B, "global", [C], blocks=[(1, 8), (0, 4)])
    s[Bp].compute_at(s[C], ji)
    s[C].tensorize(ji, tc.tensor_intrin(AVX2))
    with pytest.raises(tc.ScheduleError, match=r"stage B.global is computed at loop j.inner, "
                                               r"inside the region the intrinsic replaces"):
        _lower(s, [A, B, C])


def test_missing_cpu_features():
    s, args = _tensorized(intrin="x86.vnni_u8s8s32_16x4", jf=16)
    with pytest.raises(tc.TargetError, match=r"needs avx512vnni, which target llvm -mcpu=haswell "
                                             r"does not have"):
        tc.build(s, args, target="llvm -mcpu=haswell")


def test_hostile_intrinsic_name_is_escaped_in_messages():
    a = tc.placeholder((4,), name="a")
    c = tc.compute((4,), lambda i: a[i] + 1.0, name="c")
    intrin = tc.decl_tensor_intrin(c, name="x\n#include <evil>")
    X = tc.placeholder((8,), name="X")
    Y = tc.compute((8,), lambda i: X[i] * 2.0, name="Y")
    s = tc.create_schedule(Y.op)
    _, xi = s[Y].split(Y.op.axis[0], factor=4)
    s[Y].tensorize(xi, intrin)
    with pytest.raises(tc.ScheduleError) as e:
        tc.lower(s, [X, Y])
    assert "\n" not in str(e.value) and "x<U+000A>#include <evil>" in str(e.value)


# -- declarations -----------------------------------------------------------------------------


def test_decl_with_index_arithmetic():
    a = tc.placeholder((8,), name="a")
    c = tc.compute((4,), lambda i: a[i * 2], name="c")
    with pytest.raises(tc.ComputeError, match=r"a is read at \[i\*2\]; each operand of an intrinsic "
                                              r"is indexed by distinct axes"):
        tc.decl_tensor_intrin(c)


def test_decl_reading_a_compute():
    a = tc.placeholder((4,), name="a")
    b = tc.compute((4,), lambda i: a[i] + 1.0, name="b")
    c = tc.compute((4,), lambda i: b[i] * 2.0, name="c")
    with pytest.raises(tc.ComputeError, match=r"reads b, which is a compute; an intrinsic's "
                                              r"computation reads placeholders only"):
        tc.decl_tensor_intrin(c)


def test_decl_with_symbolic_extent():
    n = tc.var("n")
    a = tc.placeholder((n,), name="a")
    c = tc.compute((n,), lambda i: a[i] + 1.0, name="c")
    with pytest.raises(tc.ComputeError, match=r"axis i has extent n; the declared computation's "
                                              r"extents must be constants"):
        tc.decl_tensor_intrin(c)


def test_decl_with_a_bad_emitter_or_features():
    a = tc.placeholder((4,), name="a")
    c = tc.compute((4,), lambda i: a[i] + 1.0, name="c")
    with pytest.raises(tc.ComputeError, match=r"llvm must be a function \(ib, ins, outs\)"):
        tc.decl_tensor_intrin(c, llvm="vpdpbusd")
    with pytest.raises(tc.ComputeError, match=r"requires must be CPU feature names"):
        tc.decl_tensor_intrin(c, requires=("avx2; rm -rf /",))
    with pytest.raises(tc.ComputeError, match=r"the first argument is the declared computation"):
        tc.decl_tensor_intrin(a.op.name)


def test_cache_read_blocks_that_do_not_divide():
    A, B, C = _gemm(N=20)
    s = tc.create_schedule(C.op)
    with pytest.raises(tc.ScheduleError, match=r"blocks: dimension 1 has extent 20, which a factor "
                                               r"of 8 does not divide; .*\(or pad=, the value"):
        s.cache_read(B, "global", [C], blocks=[(1, 8)])
    with pytest.raises(tc.ScheduleError, match=r"blocks: 2 is not a dimension of the 2-d tensor"):
        s.cache_read(B, "global", [C], blocks=[(2, 4)])
    with pytest.raises(tc.ScheduleError, match=r"blocks must be a list of \(dimension, factor\) pairs"):
        s.cache_read(B, "global", [C], blocks=4)
    with pytest.raises(tc.ScheduleError, match=r"pad must be a number .*, got 'zero'"):
        s.cache_read(B, "global", [C], pad="zero", blocks=[(1, 8)])


def test_forged_record_naming_an_unknown_intrinsic():
    from tecomp.schedule.trace import replay

    A, B, C = _gemm()
    s, (i, jo, ko, ji, ki) = _sched(A, B, C)
    s[C].tensorize(ji, tc.tensor_intrin(AVX2))
    steps = s.trace.to_json()
    steps[-1][2][1] = {"intrin": "__import__('os').system('true')"}
    with pytest.raises(tc.ScheduleError, match=r"trace step .* \(tensorize\) names something this "
                                               r"DAG does not have"):
        replay(steps, [C])


# -- CUDA emitters -------------------------------------------------------------------------


def _dot4(cuda):
    a = tc.placeholder((4,), "int8", name="a")
    b = tc.placeholder((4,), "int8", name="b")
    r = tc.reduce_axis((0, 4), name="r")
    c = tc.compute((1,), lambda i: tc.sum(a[r].astype("int32") * b[r].astype("int32"), axis=r),
                   name="c")
    return tc.decl_tensor_intrin(c, cuda=cuda, name="my.dot4")


def _cuda_gemm(intrin, at_j=False):
    A = tc.placeholder((8, 16), "int8", name="A")
    B = tc.placeholder((16, 16), "int8", name="B")   # [N, K]: rows of k contiguous
    k = tc.reduce_axis((0, 16), name="k")
    C = tc.compute((8, 16), lambda i, j: tc.sum(A[i, k].astype("int32") * B[j, k].astype("int32"),
                                                axis=k), name="C")
    s = tc.create_schedule(C.op)
    i, j = C.op.axis
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=4)
    s[C].reorder(i, ko, j, ki) if at_j else s[C].reorder(i, j, ko, ki)
    s[C].bind(i, tc.thread_axis("blockIdx.x"))
    s[C].tensorize(j if at_j else ki, intrin)
    return s, [A, B, C]


def test_decl_with_a_cuda_emitter_that_is_not_a_function():
    with pytest.raises(tc.ComputeError, match=r"decl_tensor_intrin my.dot4: cuda must be a function "
                                              r"\(cb, ins, outs\) that emits the intrinsic as CUDA C"):
        _dot4("dp4a(a, b, c)")


@pytest.mark.parametrize("body,match", [
    (lambda cb, ins, outs: cb.helper("system"), r"tensor intrinsic my.dot4: no device helper "
                                                r"'system'; the helpers are tc_ld_b32"),
    (lambda cb, ins, outs: outs[0].at(1), r"tensor intrinsic operand c: index \(1,\) is outside "
                                          r"its shape \(1,\)"),
    (lambda cb, ins, outs: cb.emit("x;\n#include <cstdlib>"), r"tensor intrinsic my.dot4: emit\(\) "
                                                             r"takes one line of C text"),
], ids=["unknown-helper", "element-outside", "two-lines"])
def test_cuda_emitter_mistakes(body, match):
    s, args = _cuda_gemm(_dot4(body))
    with pytest.raises(tc.BuildError, match=match):
        tc.build(s, args, target="cuda-emu")


def test_dp4a_at_a_loop_with_a_data_parallel_loop_inside():
    s, args = _cuda_gemm(tc.tensor_intrin("cuda.dp4a_s8s8s32"), at_j=True)
    with pytest.raises(tc.ScheduleError, match=r"with cuda.dp4a_s8s8s32: loop j runs 16 times, and "
                                               r"the intrinsic's axis i that it maps to 1"):
        _lower(s, args)


# ------------------------------------------------------------------ tensor cores (wmma)


def _wmma_build(target="cuda-emu", **kw):
    import os
    import sys

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from wmma_examples import hand_schedule

    s, args, _ = hand_schedule(**kw)
    return tc.build(s, list(args), target=target)


def test_wmma_fragment_touched_element_by_element():
    with pytest.raises(tc.BuildError, match=r"buffer A.shared.wmma.matrix_a in scope "
                                            r"'wmma.matrix_a' is written element by element; a "
                                            r"tensor-core fragment has no addressable elements"):
        _wmma_build(load_a=False)


def test_wmma_with_a_block_narrower_than_a_warp():
    with pytest.raises(tc.BuildError, match=r"the kernel's blockDim.x is 16; a wmma operation is "
                                            r"run by a whole warp"):
        _wmma_build(lanes=16)


def test_wmma_tiles_picked_by_the_lane():
    with pytest.raises(tc.BuildError, match=r"tensorize cuda.wmma_store_f32 \(stage matmul\): the "
                                            r"tile of matmul it works on depends on threadIdx.x, "
                                            r"so the lanes of a warp would name different tiles"):
        _wmma_build(M=128, N=128, K=32, bm=128, warps=1, store_by_lane=True)


def test_wmma_config_of_symbolic_extents_or_tma_rows_not_16_byte_aligned():
    """A WmmaConfig asked for a GEMM of a symbolic extent (no tiles to pad), or the wgmma
    family's TMA producer on a K whose rows are not 16-byte aligned (a tensor map needs
    them; the threads' copies zero-fill any K)."""
    from tecomp.strategy import cuda as sc
    from tecomp.nn import ops

    n = tc.var("n")
    A = tc.placeholder((n, 96), "float16", name="A")
    B = tc.placeholder((96, 96), "float16", name="B")
    C = ops.matmul(A, B, out_dtype="float32")
    with pytest.raises(tc.ScheduleError, match=r"the tensor-core GEMM matmul is n x 96 x 96 "
                                               r"with a symbolic extent; .*GemmConfig"):
        sc.schedule_matmul(C, "cuda", config=sc.WmmaConfig(2, 4, 4, 2, 32))
    A = tc.placeholder((96, 100), "float16", name="A")
    W = tc.placeholder((96, 100), "float16", name="W")
    C = ops.dense(A, W, out_dtype="float32")
    with pytest.raises(tc.ScheduleError, match=r"K = 100 is not a multiple of 8, so the rows "
                                               r"of the operands are not 16-byte aligned, "
                                               r"which a TMA tensor map needs: use "
                                               r"producer='threads'"):
        sc.schedule_dense(C, "cuda -arch=sm_90a", config=sc.WmmaConfig(
            8, 1, 1, 8, 64, family="wgmma", stages=3, producer="tma"))
    A32 = tc.placeholder((96, 96), name="A32")
    with pytest.raises(tc.ScheduleError, match=r"config is a WmmaConfig, but matmul is not a "
                                               r"tensor-core GEMM"):
        sc.schedule_matmul(ops.matmul(A32, A32), "cuda", config=sc.WmmaConfig(1, 1, 1, 1, 16))


# ------------------------------------------------------- tensor cores (ldmatrix, mma.sync)


def test_tensor_core_intrinsics_on_fragments_of_the_other_family():
    with pytest.raises(tc.BuildError, match=r"tensor intrinsic cuda.mma_fill_f32: operand c is a "
                                            r"block of matmul.wmma.accumulator, a fragment of "
                                            r"scope 'wmma.accumulator'; this operand is an mma "
                                            r"fragment of scope 'mma.accumulator'"):
        _wmma_build(family="mma", scopes="wmma")
    with pytest.raises(tc.BuildError, match=r"tensor intrinsic cuda.wmma_fill_f32: operand c is "
                                            r"matmul.mma.accumulator, a fragment of scope "
                                            r"'mma.accumulator'; the cuda.wmma_\* intrinsics take "
                                            r"fragments of the wmma.\* scopes"):
        _wmma_build(family="wmma", scopes="mma")


def test_ldmatrix_from_global_memory():
    with pytest.raises(tc.BuildError, match=r"tensor intrinsic cuda.mma_load_a_f16: operand a is a "
                                            r"block of A, which is in global memory; ldmatrix "
                                            r"reads shared memory only"):
        _wmma_build(family="mma", a_shared=False)


def test_mma_fragment_touched_element_by_element():
    with pytest.raises(tc.BuildError, match=r"buffer A.shared.mma.matrix_a in scope "
                                            r"'mma.matrix_a' is written element by element; .* "
                                            r"only with the cuda.mma_\* intrinsics"):
        _wmma_build(family="mma", load_a=False)


def test_mma_with_a_block_narrower_than_a_warp():
    with pytest.raises(tc.BuildError, match=r"the kernel's blockDim.x is 16; an mma operation is "
                                            r"run by a whole warp"):
        _wmma_build(family="mma", lanes=16)


def test_mma_intrinsics_for_an_architecture_before_sm_80():
    with pytest.raises(tc.BuildError, match=r"the cuda.mma_\* tensor intrinsics \(mma.sync."
                                            r"m16n8k16\) need sm_80 or later; this function is "
                                            r"built for sm_75"):
        _wmma_build(family="mma", target="cuda -arch=sm_75")


def test_mma_fragment_of_another_dtype():
    A = tc.placeholder((32, 32), name="A")
    C = tc.compute((32, 32), lambda i, j: A[i, j] * 2.0, name="C")
    s = tc.create_schedule(C.op)
    AF = s.cache_read(A, "mma.matrix_a", [C])
    i, j = s[C].op.axis
    s[C].bind(i, tc.thread_axis("blockIdx.x"))
    s[C].bind(j, tc.thread_axis("threadIdx.x"))
    s[AF].compute_at(s[C], i)
    with pytest.raises(tc.BuildError, match=r"buffer A.mma.matrix_a in scope 'mma.matrix_a' is "
                                            r"float32\[1, 32\]; a mma.matrix_a fragment holds "
                                            r"float16, bfloat16 or float32 16 x 16 tiles"):
        tc.build(s, [A, C], target="cuda")


def test_mma_load_of_bfloat16_tiles():
    A = tc.placeholder((32, 32), "bfloat16", name="A")
    C = tc.compute((32, 32), lambda i, j: A[i, j].astype("float32"), name="C")
    s = tc.create_schedule(C.op)
    AS = s.cache_read(A, "shared", [C])
    AF = s.cache_read(AS, "mma.matrix_a", [C])
    r, c = s[AF].op.axis
    ro, r = s[AF].split(r, 16)
    co, c = s[AF].split(c, 16)
    s[AF].reorder(ro, co, r, c)
    with pytest.raises(tc.ScheduleError, match=r"with cuda.mma_load_a_f16: the stage computes "
                                               r"`A.shared\[.*\]` \(bfloat16\) where the "
                                               r"intrinsic computes `a\[i0.inner, i1.inner\]` "
                                               r"\(float16\)"):
        s[AF].tensorize(r, tc.tensor_intrin("cuda.mma_load_a_f16"))
        tc.lower(s, [A, C], target="cuda")


def test_bfloat16_wmma_fragments_for_an_architecture_before_sm_80():
    from tecomp.nn import ops
    from tecomp.strategy.cuda.tensorcore import WmmaConfig, schedule_wmma_gemm

    X = tc.placeholder((32, 32), "bfloat16", name="X")
    W = tc.placeholder((32, 32), "bfloat16", name="W")
    C = ops.dense(X, W, out_dtype="float32")
    s = tc.create_schedule(C.op)
    schedule_wmma_gemm(s, C, WmmaConfig(1, 1, 2, 2, 32))
    with pytest.raises(tc.BuildError, match=r"the wmma fragment \S+ holds bfloat16, which the "
                                            r"tensor cores take from sm_80 on; this function is "
                                            r"built for sm_75: build for 'cuda -arch=sm_80' or "
                                            r"later, or use float16 operands"):
        tc.build(s, [X, W, C], target="cuda -arch=sm_75")


@pytest.mark.parametrize("cfg, match", [
    (dict(family="mma"), r"dense is not a tensor-core GEMM: the tensor cores take float16 "
                         r"or bfloat16 operands with a float32 result .*, or float32 ones "
                         r"with WmmaConfig\(..., family='mma', tf32=True\); dense reads "
                         r"float32 and float32 into float32"),
    (dict(family="wmma", tf32=True), r"tf32 runs on the mma family only: use "
                                     r"WmmaConfig\(..., family='mma', tf32=True\)"),
], ids=["tf32 not asked for", "tf32 on wmma"])
def test_float32_gemm_on_tensor_cores(cfg, match):
    from tecomp.nn import ops
    from tecomp.strategy.cuda.tensorcore import WmmaConfig, schedule_wmma_gemm

    X = tc.placeholder((32, 32), "float32", name="X")
    W = tc.placeholder((32, 32), "float32", name="W")
    C = ops.dense(X, W)
    s = tc.create_schedule(C.op)
    with pytest.raises(tc.ScheduleError, match=match):
        schedule_wmma_gemm(s, C, WmmaConfig(1, 1, 2, 2, 32, **cfg))


def test_mma_config_family_unknown():
    from tecomp.strategy import cuda as sc
    from tecomp.nn import ops

    A = tc.placeholder((32, 32), "float16", name="A")
    C = ops.matmul(A, A, out_dtype="float32")
    with pytest.raises(tc.ScheduleError, match=r"family 'tf32' is not one of 'wmma', 'mma'"):
        sc.schedule_matmul(C, "cuda", config=sc.WmmaConfig(1, 1, 1, 1, 16, family="tf32"))


def test_decl_with_an_init_that_is_not_the_identity():
    a = tc.placeholder((4,), name="a")
    r = tc.reduce_axis((0, 4), name="r")
    C = tc.compute((1,), lambda i: tc.sum(a[r], axis=r), name="c")
    one = tc.decl_tensor_intrin(tc.compute((1,), lambda i: tc.const(1.0, "float32"), name="c"),
                                name="my.one")
    with pytest.raises(tc.ComputeError, match=r"decl_tensor_intrin my.sum: init must be a tensor "
                                              r"intrinsic that writes the reducer's identity"):
        tc.decl_tensor_intrin(C, name="my.sum", init=one)
