"""The built-in CUDA tensor intrinsics: 4-element int8 dot products (``dp4a``).

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
"""
from __future__ import annotations

from .reduce import sum as _sum
from .tensor import compute, placeholder, reduce_axis


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


def declarations():
    """The built-in CUDA intrinsics: (computation, CUDA C emitter, name); a fresh
    computation each call."""
    return [
        (_dot4("uint8", "int8", "c"), _dp4a("tc_dp4a_us"), "cuda.dp4a_u8s8s32"),
        (_dot4("int8", "int8", "c"), _dp4a("tc_dp4a_ss"), "cuda.dp4a_s8s8s32"),
    ]
