"""Programs that must fail: TMA tensor maps the driver or the hardware would refuse,
checked on the host before cuTensorMapEncodeTiled is called, and TMA below sm_90."""
import numpy as np
import pytest

from tecomp.target import tma
from tecomp.errors import TargetError, TensorMapError
from tecomp.testing import hopper_gemm as hg


def test_box_wider_than_256_elements():
    spec = tma.row_major("A", "float16", (1024, 1024), (300, 64))
    with pytest.raises(TensorMapError, match=r"box extent 300 of dimension 1 is not in \[1, 256\]"):
        tma.check(spec, 0x10000)


def test_row_stride_not_a_multiple_of_16_bytes():
    # A[100, 100] float16: rows of 200 bytes; TMA needs them 16-byte aligned
    spec = tma.row_major("A", "float16", (100, 100), (64, 64), swizzle="128B")
    with pytest.raises(TensorMapError, match=r"byte stride 200 of dimension 1 .* multiple of 8 "
                                             "float16 elements"):
        tma.check(spec, 0x10000)


def test_gemm_operand_with_k_not_a_multiple_of_8():
    a = np.ones((64, 100), np.float32)
    with pytest.raises(TensorMapError, match="tensor map of 'A': the byte stride 200"):
        hg.run_emu(a, a, None, tma_maps=True)


def test_global_address_not_16_byte_aligned():
    spec = tma.row_major("A", "bfloat16", (64, 64), (64, 64), swizzle="128B")
    with pytest.raises(TensorMapError, match="global address 0x10008 is not 16-byte aligned"):
        tma.emu_bytes(spec, 0x10008)


def test_swizzled_box_wider_than_its_rows():
    spec = tma.row_major("B", "float16", (256, 256), (64, 128), swizzle="128B")
    with pytest.raises(TensorMapError, match="256 bytes, wider than the 128B swizzle's rows of "
                                             "128: box.0. at most 64"):
        tma.check(spec, 0x10000)


def test_inner_box_not_a_multiple_of_16_bytes():
    spec = tma.row_major("A", "float32", (64, 64), (8, 3))
    with pytest.raises(TensorMapError, match=r"inner extent is 12 bytes \(3 float32\)"):
        tma.check(spec, 0x10000)


@pytest.mark.parametrize("estride", [0, 9])
def test_element_stride_out_of_range(estride):
    spec = tma.TensorMapSpec("float16", (64, 64), (128,), (64, 8), (1, estride), name="A")
    with pytest.raises(TensorMapError, match=r"element stride .* of dimension 1 is not in \[1, 8\]"):
        tma.check(spec, 0x10000)


def test_rank_above_5():
    spec = tma.TensorMapSpec("float16", (8,) * 6, (16,) * 5, (8,) * 6, name="T")
    with pytest.raises(TensorMapError, match="rank 6; a tensor map has 1 to 5 dimensions"):
        tma.check(spec, 0x10000)


def test_dtype_without_a_tma_type():
    spec = tma.row_major("A", "bool", (64, 64), (64, 64))
    with pytest.raises(TensorMapError, match="dtype 'bool' has no TMA data type"):
        tma.check(spec, 0x10000)


@pytest.mark.parametrize("arch", ["sm_80", "sm_86", "sm_89"])
def test_tma_below_sm90(arch):
    with pytest.raises(TargetError, match=f"TMA .* needs sm_90 or later; the target is -arch={arch}"):
        tma.check_target(arch)


def _dense(producer="tma", family="wgmma", kfirst=False, target="cuda -arch=sm_90a"):
    import tecomp as tc
    import tecomp.nn  # noqa: F401
    from tecomp.strategy import cuda as sc
    X = tc.placeholder((128, 128), "float16", name="X")
    if kfirst:   # C = X . B with B[K, N]: B's tile is read transposed
        from tecomp.nn import ops
        B = tc.placeholder((128, 128), "float16", name="B")
        Y = ops.matmul(X, B, out_dtype="float32")
        cfg = sc.WmmaConfig(4, 1, 1, 8, 64, family=family, stages=3, producer=producer)
        s = sc.schedule_matmul(Y, target, config=cfg)
        return tc, s, [X, B, Y]
    W = tc.placeholder((128, 128), "float16", name="W")
    Y = tc.nn.dense(X, W)
    cfg = sc.WmmaConfig(4, 1, 1, 8, 64, family=family, stages=3, producer=producer)
    return tc, sc.schedule_dense(Y, target, config=cfg), [X, W, Y]


def test_tma_producer_on_a_k_m_with_m_not_a_multiple_of_16():
    """A[K, M] (an M-major A) goes to the TMA ring in chunks of 16, 32 or 64 of M."""
    import tecomp as tc
    from tecomp.errors import ScheduleError
    from tecomp.strategy import cuda as sc
    from tecomp.strategy.cuda.tensorcore import schedule_wmma_gemm
    A = tc.placeholder((128, 120), "float16", name="A")
    B = tc.placeholder((128, 128), "float16", name="B")
    k = tc.reduce_axis((0, 128), name="k")
    C = tc.compute((120, 128), lambda i, j: tc.sum(
        A[k, i].astype("float32") * B[k, j].astype("float32"), axis=k), name="C")
    s = tc.create_schedule(C.op)
    cfg = sc.WmmaConfig(4, 1, 1, 8, 64, family="wgmma", stages=3, producer="tma")
    with pytest.raises(ScheduleError, match=r"copies A\[K, M\] M-major in chunks of 64, 32 "
                                            r"or 16 elements of M .* M = 120 is not a multiple "
                                            "of 16: use producer='threads'"):
        schedule_wmma_gemm(s, C, cfg)


def test_tma_producer_on_b_k_n_with_n_not_a_multiple_of_16():
    """matmul's B[K, N] goes to the TMA ring N-major in chunks of 16, 32 or 64 of N."""
    import tecomp as tc
    import tecomp.nn  # noqa: F401
    from tecomp.errors import ScheduleError
    from tecomp.strategy import cuda as sc
    X = tc.placeholder((128, 128), "float16", name="X")
    B = tc.placeholder((128, 120), "float16", name="B")
    Y = tc.nn.matmul(X, B, out_dtype="float32")
    cfg = sc.WmmaConfig(4, 1, 1, 8, 64, family="wgmma", stages=3, producer="tma_warp")
    with pytest.raises(ScheduleError, match=r"copies B\[K, N\] N-major in chunks of 64, 32 "
                                            r"or 16 elements of N .* N = 120 is not a multiple "
                                            "of 16: use producer='threads'"):
        sc.schedule_matmul(Y, "cuda -arch=sm_90a", config=cfg)


def test_tma_producer_on_a_transposed_hand_tile():
    import tecomp as tc
    from tecomp.errors import ScheduleError
    B = tc.placeholder((128, 64), "float16", name="B")
    k = tc.reduce_axis((0, 128), name="k")
    C = tc.compute((64, 64), lambda i, j: tc.sum(B[k, j].astype("float32") * B[k, i].astype(
        "float32"), axis=k), name="C")
    s = tc.create_schedule(C.op)
    # B[K, N] as [K/8, N/8, 8 (n), 8 (k)] core matrices: the innermost steps along k
    BS = s.cache_read(B, "shared", [C], blocks=[(1, 8), (0, 8)])
    s[C].bind(s[C].op.axis[0], tc.thread_axis("blockIdx.x"))
    s[C].bind(s[C].op.axis[1], tc.thread_axis("threadIdx.x"))
    ko, _ = s[C].split(s[C].op.reduce_axis[0], factor=32)
    s[BS].compute_at(s[C], ko)
    s[BS].double_buffer(stages=3, producer="tma")
    with pytest.raises(ScheduleError, match="innermost dimension steps along dimension 0 of B "
                                            ".* TMA copies boxes as they lie"):
        tc.lower(s, [B, C])


def _tensor_core_dense_with_a_swizzled_tile(family: str, swizzle: str):
    """A 64 x 96 float16 dense on the tensor-core template of ``family``, its A tile (k
    steps of 32 float16: rows of 64 bytes) double-buffered with ``swizzle``: (the
    schedule, its arguments)."""
    import tecomp as tc
    import tecomp.nn as nn
    from tecomp.strategy.cuda.tensorcore import WmmaConfig, schedule_wmma_gemm
    A = tc.placeholder((64, 96), "float16", name="A")
    W = tc.placeholder((64, 96), "float16", name="W")
    C = nn.dense(A, W, out_dtype="float32")
    s = tc.create_schedule(C.op)
    schedule_wmma_gemm(s, C, WmmaConfig(2, 2, 1, 2, 32, family=family, stages=3))
    st = next(x for x in s.stages if x.name == "A.shared")
    st.storage_aligns.clear()
    st.double_buffer(stages=3, swizzle=swizzle)
    return s, [A, W, C]


def test_a_threads_swizzle_wider_than_the_tiles_rows():
    """The threads' copies (cp.async) place their 16-byte chunks swizzled too; a 128B
    swizzle needs rows of 128 bytes, and the mma template's k steps of 32 float16 are 64."""
    import tecomp as tc
    from tecomp.errors import ScheduleError
    s, args = _tensor_core_dense_with_a_swizzled_tile("mma", "128B")
    with pytest.raises(ScheduleError, match="swizzle='128B' needs the tile's rows of exactly "
                                            "128 bytes .* its rows are 32 elements"):
        tc.lower(s, args, target="cuda-emu")


def test_swizzle_narrower_than_the_tiles_rows():
    """A k step of 64 float16 is 128-byte rows: a 64B swizzle's rows are 64 bytes."""
    import tecomp as tc
    from tecomp.errors import ScheduleError
    tc_, s, args = _dense()
    st = next(x for x in s.stages if x.name == "X.shared")
    st.double_buffer(3, producer="tma", swizzle="64B")
    with pytest.raises(ScheduleError, match="swizzle='64B' on stage X.shared, whose tile's rows "
                                            "are 128 bytes .* rows of exactly 64 bytes"):
        tc.lower(s, args)


def test_a_swizzled_tile_read_by_an_intrinsic_that_does_not_decode_it():
    """wmma's fragment loads read a tile as laid out: a swizzled one is refused."""
    import tecomp as tc
    from tecomp.errors import BuildError
    s, args = _tensor_core_dense_with_a_swizzled_tile("wmma", "64B")
    with pytest.raises(BuildError, match="A.shared, a tile laid out with swizzle='64B', which "
                                         "cuda.wmma_load"):
        tc.build(s, args, target="cuda-emu")


def test_tma_producer_built_for_sm80():
    tc, s, args = _dense(target="cuda -arch=sm_80")
    with pytest.raises(TargetError, match="TMA .* needs sm_90 or later; the target is -arch=sm_80"):
        tc.build(s, args, target="cuda -arch=sm_80").get_source("cuda")


def test_tma_producer_for_the_mma_family():
    from tecomp.errors import ScheduleError
    with pytest.raises(ScheduleError, match="the TMA producer .* fills the double-buffered tiles "
                                            "of the wgmma family"):
        _dense(family="mma")


def test_unknown_producer():
    import tecomp as tc
    from tecomp.errors import ScheduleError
    A = tc.placeholder((64, 64), "float16", name="A")
    B = tc.compute((64, 64), lambda i, j: A[i, j] * 2, name="B")
    s = tc.create_schedule(B.op)
    AS = s.cache_read(A, "shared", [B])
    with pytest.raises(ScheduleError, match="producer='dma'; give 'threads'"):
        s[AS].double_buffer(stages=3, producer="dma")


def test_a_library_whose_tensor_map_is_damaged(tmp_path):
    """The metadata's tensor-map box is read as the host will use it: a box past 256
    elements (hand-edited metadata) is a LoadError, not a map the driver refuses later."""
    import json
    from tecomp.errors import LoadError
    from tecomp.runtime import aot_format
    from tecomp.runtime.signature import Signature
    tc, s, args = _dense()
    cs = tc.build(s, args, target="cuda -arch=sm_90a").cuda_source
    # the metadata export_library writes (without its fatbin: no nvcc needed here)
    meta = json.loads(aot_format.build_cuda_metadata(
        func=cs.func, sig=Signature(cs.func, written=cs.written), cs=cs, entry="tecomp_main",
        target="cuda -arch=sm_90a", archs=("sm_90a",), ptx="compute_90a", fatbin_bytes=4096))
    aot_format.parse_metadata(json.dumps(meta).encode(), "the library of main")   # (as written)
    box = next(p for k in meta["cuda"]["kernels"] for p in k["params"]
               if p["dtype"] == "tensor_map")
    box["obj"][1]["dims"][0][2] = 300
    with pytest.raises(LoadError, match="a dimension of the tensor map of parameter"):
        aot_format.parse_metadata(json.dumps(meta).encode(), "the library of main")


def test_tma_producer_on_a_bool_tensor():
    import tecomp as tc
    from tecomp.errors import ScheduleError
    A = tc.placeholder((64, 64), "bool", name="A")
    k = tc.reduce_axis((0, 64), name="k")
    C = tc.compute((64,), lambda i: tc.sum(A[i, k].astype("float32"), axis=k), name="C")
    s = tc.create_schedule(C.op)
    AS = s.cache_read(A, "shared", [C])
    (i,) = s[C].op.axis
    s[C].bind(i, tc.thread_axis("threadIdx.x"))
    ko, ki = s[C].split(s[C].op.reduce_axis[0], factor=32)
    s[AS].compute_at(s[C], ko)
    s[AS].double_buffer(stages=2, producer="tma")
    with pytest.raises(ScheduleError, match="copies A of bool, which TMA does not copy"):
        tc.lower(s, [A, C])


def test_producer_warp_without_threadidx_z():
    """A producer warp is one more threadIdx.z: a kernel whose threads are bound along x
    and y only would run its computation on the producer warp too."""
    import tecomp as tc
    from tecomp.errors import BuildError
    A = tc.placeholder((64, 64), "float16", name="A")
    k = tc.reduce_axis((0, 64), name="k")
    C = tc.compute((64, 64), lambda i, j: tc.sum(A[i, k].astype("float32") * A[j, k].astype(
        "float32"), axis=k), name="C")
    s = tc.create_schedule(C.op)
    AS = s.cache_read(A, "shared", [C])
    CL = s.cache_write(C, "local")
    i, j = s[C].op.axis
    ti, i = s[C].split(i, factor=4)
    tj, j = s[C].split(j, factor=4)
    s[C].reorder(ti, tj, i, j)
    s[C].bind(ti, tc.thread_axis("threadIdx.y"))
    s[C].bind(tj, tc.thread_axis("threadIdx.x"))
    s[CL].compute_at(s[C], tj)
    ko, ki = s[CL].split(s[CL].op.reduce_axis[0], factor=32)
    s[CL].reorder(ko, ki, *s[CL].op.axis)
    s[AS].compute_at(s[CL], ko)
    s[AS].double_buffer(stages=2, producer="tma_warp")
    with pytest.raises(BuildError, match="producer='tma_warp' needs constant thread extents and "
                                         "the computing threads bound along threadIdx.z"):
        tc.build(s, [A, C], target="cuda -arch=sm_90a").get_source("cuda")


def test_producer_warp_with_a_stage_outside_threadidx_z():
    import tecomp as tc
    from tecomp.errors import BuildError
    A = tc.placeholder((64, 64), "float16", name="A")
    k = tc.reduce_axis((0, 64), name="k")
    C = tc.compute((64, 64), lambda i, j: tc.sum(A[i, k].astype("float32") * A[j, k].astype(
        "float32"), axis=k), name="C")
    D = tc.compute((64, 64), lambda i, j: C[i, j] + 1.0, name="D")
    s = tc.create_schedule(D.op)
    s[C].set_scope("shared")
    AS = s.cache_read(A, "shared", [C])
    i, j = s[D].op.axis
    bi, i = s[D].split(i, factor=64)
    tx, j = s[D].split(j, factor=4)
    s[D].reorder(bi, tx, i, j)
    s[D].bind(bi, tc.thread_axis("blockIdx.x"))
    s[D].bind(tx, tc.thread_axis("threadIdx.x"))     # D: along x only
    s[C].compute_at(s[D], bi)
    ci, cj = s[C].op.axis
    cz, ci = s[C].split(ci, factor=4)
    cx, cj = s[C].split(cj, factor=4)
    ko, ki = s[C].split(s[C].op.reduce_axis[0], factor=32)
    s[C].reorder(cz, cx, ko, ki, ci, cj)
    s[C].bind(cz, tc.thread_axis("threadIdx.z"))
    s[C].bind(cx, tc.thread_axis("threadIdx.x"))
    s[AS].compute_at(s[C], ko)
    s[AS].double_buffer(stages=2, producer="tma_warp")
    with pytest.raises(BuildError, match=r"runs outside the kernel's threadIdx.z loops, so the "
                                         r"producer warp \(one more threadIdx.z\) would run it"):
        tc.build(s, [A, D], target="cuda -arch=sm_90a").get_source("cuda")


def test_persistent_with_no_blocks():
    import tecomp as tc
    from tecomp.errors import ScheduleError
    A = tc.placeholder((64,), "float32", name="A")
    B = tc.compute((64,), lambda i: A[i] * 2, name="B")
    s = tc.create_schedule(B.op)
    with pytest.raises(ScheduleError, match="persistent on stage B: blocks=0; give a positive int"):
        s[B].persistent(0)


def test_persistent_without_a_2d_grid():
    import tecomp as tc
    from tecomp.errors import ScheduleError
    A = tc.placeholder((4096,), "float32", name="A")
    B = tc.compute((4096,), lambda i: A[i] * 2, name="B")
    s = tc.create_schedule(B.op)
    bx, tx = s[B].split(B.op.axis[0], factor=128)
    s[B].bind(bx, tc.thread_axis("blockIdx.x"))
    s[B].bind(tx, tc.thread_axis("threadIdx.x"))
    s[B].persistent(8)
    with pytest.raises(ScheduleError, match="persistent: the stage's two outermost loops are not "
                                            "bound to blockIdx.y .tile rows. and blockIdx.x"):
        tc.build(s, [A, B], target="cuda-emu")


def test_tma_producer_on_a_single_k_step():
    """The TMA ring pipelines the k loop: K of one k step has no loop to pipeline."""
    import tecomp as tc
    from tecomp.errors import ScheduleError
    from tecomp.strategy import cuda as sc
    X = tc.placeholder((128, 48), "float16", name="X")
    W = tc.placeholder((128, 48), "float16", name="W")
    cfg = sc.WmmaConfig(8, 1, 1, 8, 64, family="wgmma", stages=3, producer="tma")
    with pytest.raises(ScheduleError, match="K = 48 is one k step of 64; the TMA producer "
                                            "pipelines the k loop .* use producer='threads'"):
        sc.schedule_dense(tc.nn.dense(X, W), "cuda -arch=sm_90a", config=cfg)


@pytest.mark.parametrize("dims,shape", [
    # an axis twice (rows stepped as columns): one row past the end of a 100 x 88 tensor
    ([(0, 1, 64, "whole", 0), (0, 1, 128, "whole", 0)], (100, 88)),
    # an inner part that runs on past its block, to 9999 elements of a row of 88
    ([(1, 1, 64, "inner", 9999), (0, 1, 128, "whole", 0)], (72, 88)),
    # an inner part of 16 in blocks of 8: the last row's last block runs 8 past the end
    ([(1, 1, 8, "inner", 16), (1, 8, 8, "outer", 0), (0, 1, 64, "whole", 0)], (64, 128)),
])
def test_tensor_map_that_reads_past_its_tensor(dims, shape):
    """A tensor map made from a box that is not one tecomp lowers (a GPU library's
    metadata forged: each field in its range, the whole past the array) is refused
    before the driver encodes it, not copied from memory outside the argument."""
    from tecomp.ir.expr import Buffer
    from tecomp.lower.tma_pipeline import TmaBox, TmaDim, map_spec
    src = Buffer("X", list(shape), "float16")
    box = TmaBox(src, src, tuple(TmaDim(*d) for d in dims), (), "none")
    with pytest.raises(TensorMapError, match=r"tensor map of 'X': dimensions .* reach byte "
                                             r"\d+ of a tensor of \d+ bytes \(shape "
                                             r"\d+x\d+\): it would read past the tensor; .*"
                                             r"export the library again"):
        map_spec(box, shape)


def test_tensor_maps_tecomp_makes_reach_the_last_byte():
    """The maps of whole dimensions and of whole blocks reach the tensor's last byte and
    not past it: they are not refused."""
    from tecomp.ir.expr import Buffer
    from tecomp.lower.tma_pipeline import TmaBox, TmaDim, map_spec
    src = Buffer("X", [64, 128], "float16")
    for dims in ([(1, 1, 64, "whole", 0), (0, 1, 64, "whole", 0)],
                 [(1, 1, 8, "inner", 8), (1, 8, 8, "outer", 0), (0, 1, 64, "whole", 0)]):
        spec = map_spec(TmaBox(src, src, tuple(TmaDim(*d) for d in dims), ()), (64, 128))
        assert spec.dims[0] * 2 + sum((n - 1) * s for n, s in zip(spec.dims[1:], spec.strides)) \
            <= 64 * 128 * 2
