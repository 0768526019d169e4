"""The built-in CUDA tensor intrinsics: 4-element int8 dot products (``dp4a``), and the
tensor cores' 16 x 16 x 16 tiles (``wmma``).

Each computes ``c[0] += sum_r a[r] * b[r]`` for ``r`` in 0..3 in int32 (products and sums
exact, the int32 sum wrapping like any int32 addition): the inner step of an int8 GEMM
or convolution whose reduction is split by 4, one output element per CUDA thread (the
intrinsic's one data-parallel axis has extent 1, so a region without a data-parallel loop
matches it)::

    ko, ki = s[C].split(C.op.reduce_axis[0], factor=4)
    s[C].tensorize(ki, tc.tensor_intrin("cuda.dp4a_u8s8s32"))

* ``cuda.dp4a_u8s8s32`` -- ``a`` uint8, ``b`` int8: PTX ``dp4a.u32.s32`` (the mixed
  signedness of quantized activations and weights; sm_61 and later, so every
  architecture tecomp targets);
* ``cuda.dp4a_s8s8s32`` -- both int8: ``__dp4a``.

The four bytes of each operand are read as one 32-bit word where they are 4-byte aligned
and byte by byte elsewhere (``tc_ld_b32``), so any contiguous region works.  The CUDA
emulation runs the same source with the portable C definitions of these helpers.

Tensor cores (sm_70+; ``nvcuda::wmma``), float16 inputs and float32 accumulation, as TVM
users know them: the operands live in *fragments*, buffers of scope ``wmma.matrix_a``,
``wmma.matrix_b`` and ``wmma.accumulator`` (``s.cache_read(AS, "wmma.matrix_a", [CF])``,
``s.cache_write(C, "wmma.accumulator")``), each 16 x 16 tile of which is held by one warp::

    s[AF].tensorize(ii, tc.tensor_intrin("cuda.wmma_load_a_f16"))     # AF[i, k] = AS[...]
    s[BF].tensorize(kk, tc.tensor_intrin("cuda.wmma_load_b_f16"))     # BF[k, j] = BS[...]
    s[CF].tensorize(ii, tc.tensor_intrin("cuda.wmma_mma_f16f16f32"))  # CF += AF . BF
    s[C].tensorize(ii, tc.tensor_intrin("cuda.wmma_store_f32"))       # C[...] = CF[i, j]

* ``cuda.wmma_load_a_f16`` / ``cuda.wmma_load_b_f16`` -- a 16 x 16 float16 tile, row
  major or column major (unit stride along one axis, the other a multiple of 8
  elements: ``B[k, n]`` read from a ``W[n, k]`` tile is column major), from shared or
  global memory into a fragment (``load_matrix_sync``; the fragment is declared with the
  layout its loads read);
* ``cuda.wmma_mma_f16f16f32`` -- ``C[i, j] += float(A[i, k]) * float(B[k, j])`` over a
  16 x 16 x 16 tile (``mma_sync``); its accumulator is set to 0 with
  ``cuda.wmma_fill_f32`` (``fill_fragment``), which lowering emits where a reduction's
  identity goes;
* ``cuda.wmma_store_f32`` -- a float32 accumulator tile to memory, row or column major
  (``store_matrix_sync``; the other stride a multiple of 4 elements).

A fragment's elements are nowhere in memory: only these intrinsics may touch them, each
fragment dimension must be a multiple of 16 and each tile start on one.  Every lane of a
warp must make the same calls on the same tiles: the code generator refuses a call whose
tiles depend on ``threadIdx.x`` or that runs under a condition that does, and a kernel
whose ``blockDim.x`` is not a multiple of 32.  The CUDA emulation implements each
intrinsic's declared computation (every emulated thread holds whole tiles).
"""
from __future__ import annotations

from ..errors import BuildError
from .reduce import sum as _sum
from .tensor import compute, const, placeholder, reduce_axis


def _dot4(a_dtype: str, b_dtype: str, name: str):
    a = placeholder((4,), a_dtype, name="a")
    b = placeholder((4,), b_dtype, name="b")
    r = reduce_axis((0, 4), name="r")
    return compute((1,), lambda i: _sum(a[r].astype("int32") * b[r].astype("int32"), axis=r),
                   name=name)


def _dp4a(helper: str):
    def emit(cb, ins, outs):
        ld = cb.helper("tc_ld_b32")
        a = cb.tmp("unsigned int", f"{ld}({ins[0].ptr})", "a")
        b = cb.tmp("unsigned int", f"{ld}({ins[1].ptr})", "b")
        c = outs[0].at(0)
        cb.emit(f"{c} = {cb.helper(helper)}({a}, {b}, {c});")
    return emit


WMMA = "nvcuda::wmma::"
TILE = 16


def _copy(src_dtype: str, dst_dtype: str, name: str):
    a = placeholder((TILE, TILE), src_dtype, name="a")
    return compute((TILE, TILE), lambda i, j: a[i, j] if src_dtype == dst_dtype
                   else a[i, j].astype(dst_dtype), name=name)


def _mma(in_dtype: str, acc_dtype: str):
    a = placeholder((TILE, TILE), in_dtype, name="a")
    b = placeholder((TILE, TILE), in_dtype, name="b")
    k = reduce_axis((0, TILE), name="k")
    return compute((TILE, TILE), lambda i, j: _sum(a[i, k].astype(acc_dtype)
                                                   * b[k, j].astype(acc_dtype), axis=k),
                   name="c")


def _fill(dtype: str):
    return compute((TILE, TILE), lambda i, j: const(0, dtype), name="c")


def tile_layout(strides):
    """``(layout, leading dimension)`` of a 16 x 16 tile in memory with element
    ``strides``: ``("row_major", s0)`` for ``[s0, 1]``, ``("col_major", s1)`` for ``[1,
    s1]``, ``(None, None)`` otherwise."""
    a, b = strides
    if b == 1 and a != 1:
        return "row_major", a
    if a == 1 and b != 1:
        return "col_major", b
    return None, None


def _leading_dim(intrin: str, view, multiple: int, what: str = "wmma"):
    """The layout and leading dimension of a 16 x 16 tile in memory (BuildError when it
    is neither row nor column major with a suitable constant stride; ``what`` reads or
    writes it, for the message)."""
    layout, ld = tile_layout(view.strides)
    if layout is None or not isinstance(ld, int) or ld % multiple or ld < TILE:
        raise BuildError(
            f"tensor intrinsic {intrin}: operand {view.name} is a block of "
            f"{view.buffer_name} with element strides {list(view.strides)}; {what} reads "
            f"and writes a row- or column-major tile whose other stride is a constant multiple "
            f"of {multiple} elements and at least {TILE} (e.g. strides [{TILE * 2}, 1]): copy "
            "the tile to shared memory in that layout (cache_read, storage_align)")
    return layout, ld


def _fragment(intrin: str, view) -> str:
    if view.fragment is not None and not view.scope.startswith("wmma."):
        raise BuildError(
            f"tensor intrinsic {intrin}: operand {view.name} is {view.buffer_name}, a fragment "
            f"of scope {view.scope!r}; the cuda.wmma_* intrinsics take fragments of the "
            "wmma.* scopes (the mma.* scopes belong to the cuda.mma_* intrinsics)")
    if view.fragment is None:
        raise BuildError(
            f"tensor intrinsic {intrin}: operand {view.name} is a block of "
            f"{view.buffer_name}, which is in memory; this operand is a tensor-core fragment: "
            "put the stage in scope 'wmma.matrix_a', 'wmma.matrix_b' or 'wmma.accumulator' "
            "(s.cache_read / s.cache_write with that scope)")
    return view.fragment


def _memory(intrin: str, view, swizzled: bool = False):
    """``view``, an operand in memory (BuildError for a fragment); ``swizzled``: the
    intrinsic decodes a swizzled tile's layout (``double_buffer(swizzle=)``), else it
    refuses one."""
    if view.fragment is not None:
        raise BuildError(
            f"tensor intrinsic {intrin}: operand {view.name} is {view.buffer_name}, a "
            "tensor-core fragment; this operand is shared or global memory")
    swz = getattr(view, "swizzle", "none")
    if swz != "none" and not swizzled:
        raise BuildError(
            f"tensor intrinsic {intrin}: operand {view.name} is a block of {view.buffer_name}, "
            f"a tile laid out with swizzle={swz!r}, which {intrin} does not decode (ldmatrix "
            "and the cuda.wgmma_*_rows intrinsics do): double_buffer(..., swizzle='none')")
    return view


def _load(name: str):
    # (the fragment's type carries the layout: the code generator declares it from the
    # tiles its loads read, see tecomp.codegen.cuda)
    def emit(cb, ins, outs):
        src = _memory(name, ins[0])
        _, ld = _leading_dim(name, src, 8)
        cb.emit(f"{WMMA}load_matrix_sync({_fragment(name, outs[0])}, {src.ptr}, {ld});")
    return emit


def _store(name: str):
    def emit(cb, ins, outs):
        dst = _memory(name, outs[0])
        layout, ld = _leading_dim(name, dst, 4)
        mem = "mem_row_major" if layout == "row_major" else "mem_col_major"
        cb.emit(f"{WMMA}store_matrix_sync({dst.ptr}, {_fragment(name, ins[0])}, {ld}, "
                f"{WMMA}{mem});")
    return emit


def _mma_emit(name: str):
    def emit(cb, ins, outs):
        c = _fragment(name, outs[0])
        cb.emit(f"{WMMA}mma_sync({c}, {_fragment(name, ins[0])}, {_fragment(name, ins[1])}, {c});")
    return emit


def _fill_emit(name: str):
    def emit(cb, ins, outs):
        cb.emit(f"{WMMA}fill_fragment({_fragment(name, outs[0])}, 0.0f);")
    return emit


#: the operand dtypes of the tensor-core intrinsics: the suffix of their names
TC_DTYPES = {"float16": "f16", "bfloat16": "bf16"}

#: built-in intrinsics that a whole warp runs together (each lane the same call)
WARP_INTRINS = tuple(f"cuda.wmma_{n}_{t}" for t in TC_DTYPES.values()
                     for n in ("load_a", "load_b")) + tuple(
    f"cuda.wmma_mma_{t}{t}f32" for t in TC_DTYPES.values()) + (
    "cuda.wmma_fill_f32", "cuda.wmma_store_f32")


def declarations():
    """The built-in CUDA intrinsics: (computation, CUDA C emitter, name, dense, the name
    of its ``init`` intrinsic or None); a fresh computation each call, an ``init`` named
    before the intrinsic that uses it."""
    out = [
        (_dot4("uint8", "int8", "c"), _dp4a("tc_dp4a_us"), "cuda.dp4a_u8s8s32", True, None),
        (_dot4("int8", "int8", "c"), _dp4a("tc_dp4a_ss"), "cuda.dp4a_s8s8s32", True, None),
        (_fill("float32"), _fill_emit("cuda.wmma_fill_f32"), "cuda.wmma_fill_f32", False, None),
    ]
    for dt, t in TC_DTYPES.items():
        for operand in ("a", "b"):
            name = f"cuda.wmma_load_{operand}_{t}"
            out.append((_copy(dt, dt, f"{operand}_frag"), _load(name), name, False, None))
        name = f"cuda.wmma_mma_{t}{t}f32"
        out.append((_mma(dt, "float32"), _mma_emit(name), name, False, "cuda.wmma_fill_f32"))
    out.append((_copy("float32", "float32", "c"), _store("cuda.wmma_store_f32"),
                "cuda.wmma_store_f32", False, None))
    return out
