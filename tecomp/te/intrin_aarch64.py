"""The built-in AArch64 tensor intrinsics: the inner steps of an int8 GEMM on 128-bit NEON
registers (products and sums exact, the int32 sum wrapping like any int32 addition).

The dot products, as in :mod:`.intrin_x86` (``c[i] += sum_r a[r] * b[i, r]`` for ``r`` in
0..3; ``a`` uint8, ``b`` int8 packed in panels of 4 columns by 4 rows, ``c`` int32):

* ``aarch64.usdot_u8s8s32_4x4`` -- one ``usdot`` (the mixed-sign dot product of the
  Int8 matrix multiply extension, ``i8mm``: Armv8.6, Neoverse V1/N2/V2, Apple M2).
* ``aarch64.neon_u8s8s32_4x4`` -- any NEON: the operands widened to 16 bits
  (``umull``/``smull``-style multiplies) and the products of each group added in pairs.
"""
from __future__ import annotations

from .intrin_x86 import _dot_decl
from .reduce import sum as _sum
from .tensor import compute, placeholder, reduce_axis


def _usdot(ib, ins, outs):
    """c[0:4] += a . b[0:4]: a's 4 bytes in every lane, one usdot (unsigned x signed)."""
    a = ib.cast("bitcast", ib.splat(ib.load(ins[0], "i32"), 4), "<16 x i8>")
    acc = ib.load(outs[0], "<4 x i32>")
    ib.store(outs[0], ib.call("llvm.aarch64.neon.usdot.v4i32.v16i8", "<4 x i32>", acc, a,
                              ib.load(ins[1], "<16 x i8>")))


def _neon(ib, ins, outs):
    """c[0:4] += a . b[0:4] without i8mm: a (zero-extended) times b (sign-extended) in
    16-bit lanes (exact: |255 * -128| < 2^15), widened to 32 bits, then the 4 products
    of each column added (two rounds of even + odd lanes)."""
    a = ib.cast("bitcast", ib.splat(ib.load(ins[0], "i32"), 4), "<16 x i8>")
    a16 = ib.cast("zext", a, "<16 x i16>")
    b16 = ib.cast("sext", ib.load(ins[1], "<16 x i8>"), "<16 x i16>")
    p = ib.cast("sext", ib.mul(a16, b16), "<16 x i32>")
    pairs = ib.add(ib.shuffle(p, p, range(0, 16, 2)), ib.shuffle(p, p, range(1, 16, 2)))
    quads = ib.add(ib.shuffle(pairs, pairs, range(0, 8, 2)),
                   ib.shuffle(pairs, pairs, range(1, 8, 2)))
    ib.store(outs[0], ib.add(ib.load(outs[0], "<4 x i32>"), quads))


def _mmla_decl(a_dtype: str, b_dtype: str):
    a = placeholder((2, 8), a_dtype, name="a")
    b = placeholder((2, 8), b_dtype, name="b")
    r = reduce_axis((0, 8), name="r")
    return compute((2, 2), lambda i, j: _sum(a[i, r].astype("int32") * b[j, r].astype("int32"),
                                             axis=r), name="c")


def _rows(ib, view, scalar: str):
    """The 2 x n operand ``view`` as one vector of its 2 n elements, row after row: one
    load where the rows are contiguous, one per row where only their elements are, else
    element by element."""
    n = view.shape[1]
    whole = f"<{2 * n} x {scalar}>"
    if view.strides == (n, 1):
        return ib.load(view, whole)
    if view.strides[1] == 1:
        r0, r1 = (ib.load(view, f"<{n} x {scalar}>", (i, 0)) for i in (0, 1))
        return ib.shuffle(r0, r1, range(2 * n))
    v = ib.splat(ib.load(view, scalar), 2 * n)
    for i in range(2):
        for j in range(n):
            if i or j:
                v = ib.b.insert_element(v, ib.load(view, scalar, (i, j)),
                                        ib.type("i32")(i * n + j))
    return v


def _store_rows(ib, view, value):
    """Store the 2 x 2 int32 block ``value`` (c00 c01 c10 c11) into ``view``."""
    if view.strides == (2, 1):
        ib.store(view, value)
    elif view.strides[1] == 1:
        for i in range(2):
            ib.store(view, ib.shuffle(value, value, (2 * i, 2 * i + 1)), (i, 0))
    else:
        for i in range(2):
            for j in range(2):
                ib.store(view, ib.b.extract_element(value, ib.type("i32")(2 * i + j)), (i, j))


def _mmla(insn: str):
    """c[2, 2] += a[2, 8] . b[2, 8]^T: one ``insn`` (smmla, ummla, usmmla) on the rows of
    ``a`` and of ``b`` (16 bytes each) and the 2 x 2 block of ``c`` (4 int32 lanes)."""
    name = f"llvm.aarch64.neon.{insn}.v4i32.v16i8"

    def emit(ib, ins, outs):
        acc = _rows(ib, outs[0], "i32")
        _store_rows(ib, outs[0], ib.call(name, "<4 x i32>", acc, _rows(ib, ins[0], "i8"),
                                         _rows(ib, ins[1], "i8")))
    return emit


def declarations():
    """The built-in AArch64 intrinsics, as ``tc.decl_tensor_intrin`` arguments:
    (computation, emitter, name, required features, dense); a fresh computation each
    call."""
    return [
        (_mmla_decl("uint8", "int8"), _mmla("usmmla"), "aarch64.usmmla_u8s8s32_2x2x8",
         ("i8mm", "neon"), False),
        (_mmla_decl("int8", "int8"), _mmla("smmla"), "aarch64.smmla_s8s8s32_2x2x8",
         ("i8mm", "neon"), False),
        (_mmla_decl("uint8", "uint8"), _mmla("ummla"), "aarch64.ummla_u8u8s32_2x2x8",
         ("i8mm", "neon"), False),
        (_dot_decl(4, "c"), _usdot, "aarch64.usdot_u8s8s32_4x4", ("i8mm", "neon"), True),
        (_dot_decl(4, "c"), _neon, "aarch64.neon_u8s8s32_4x4", ("neon",), True),
    ]
