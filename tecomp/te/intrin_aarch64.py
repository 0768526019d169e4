"""The built-in AArch64 tensor intrinsics: u8 x s8 -> s32 dot products of 4-element groups
on 128-bit NEON registers, the inner step of an int8 GEMM as in :mod:`.intrin_x86`
(``c[i] += sum_r a[r] * b[i, r]`` for ``r`` in 0..3; ``a`` uint8, ``b`` int8 packed in
panels of 4 columns by 4 rows, ``c`` int32; products and sums exact, the int32 sum
wrapping like any int32 addition).

* ``aarch64.usdot_u8s8s32_4x4`` -- one ``usdot`` (the mixed-sign dot product of the
  Int8 matrix multiply extension, ``i8mm``: Armv8.6, Neoverse V1/N2/V2, Apple M2).
* ``aarch64.neon_u8s8s32_4x4`` -- any NEON: the operands widened to 16 bits
  (``umull``/``smull``-style multiplies) and the products of each group added in pairs.
"""
from __future__ import annotations

from .intrin_x86 import _dot_decl


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


def declarations():
    """The built-in AArch64 intrinsics, as ``tc.decl_tensor_intrin`` arguments:
    (computation, emitter, name, required features, dense); a fresh computation each
    call."""
    return [
        (_dot_decl(4, "c"), _usdot, "aarch64.usdot_u8s8s32_4x4", ("i8mm", "neon"), True),
        (_dot_decl(4, "c"), _neon, "aarch64.neon_u8s8s32_4x4", ("neon",), True),
    ]
