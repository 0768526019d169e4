"""The built-in x86 tensor intrinsics: u8 x s8 -> s32 dot products of 4-element groups.

Each computes ``c[i] += sum_r a[r] * b[i, r]`` for ``r`` in 0..3 (``a`` uint8, ``b`` int8,
``c`` int32, products and sums exact, the int32 sum wrapping like any int32 addition):
the inner step of an int8 GEMM whose B is packed in panels of ``lanes`` columns by 4
rows (``Bp[j // L, k // 4, j % L, k % 4]``, see ``tecomp.nn.quant``).

* ``x86.vnni_u8s8s32_16x4`` -- one ``vpdpbusd`` on 512-bit registers (AVX512-VNNI:
  Cascade Lake and later Xeons, Zen 4).
* ``x86.vnni_u8s8s32_8x4`` -- the same on 256-bit registers (AVX512-VNNI with VL).
* ``x86.avx2_u8s8s32_8x4`` -- AVX2 without VNNI: both operands widened to int16 and
  multiplied with ``vpmaddwd`` (exact for every input; ``vpmaddubsw``, which fbgemm uses
  there, saturates pairs of products at int16 and is not).
"""
from __future__ import annotations

from .reduce import sum as _sum
from .tensor import compute, placeholder, reduce_axis


def _dot_decl(lanes: int, name: str):
    a = placeholder((4,), "uint8", name="a")
    b = placeholder((lanes, 4), "int8", name="b")
    r = reduce_axis((0, 4), name="r")
    return compute((lanes,), lambda i: _sum(a[r].astype("int32") * b[i, r].astype("int32"),
                                            axis=r), name=name)


def _vnni(lanes: int):
    vec = f"<{lanes} x i32>"
    intrinsic = f"llvm.x86.avx512.vpdpbusd.{lanes * 32}"

    def emit(ib, ins, outs):
        a = ib.splat(ib.load(ins[0], "i32"), lanes)     # a's 4 bytes in every lane
        acc = ib.load(outs[0], vec)
        ib.store(outs[0], ib.call(intrinsic, vec, acc, a, ib.load(ins[1], vec)))
    return emit


def _avx2_emit(ib, ins, outs):
    """c[0:8] += a . b[0:8]: a's 4 bytes in every lane, widened to 16 x i16 per half
    of b (4 columns x 4), vpmaddwd gives the sums of pairs, the pairs are added."""
    a = ib.cast("bitcast", ib.splat(ib.load(ins[0], "i32"), 4), "<16 x i8>")
    a16 = ib.cast("zext", a, "<16 x i16>")
    b = ib.load(ins[1], "<32 x i8>")
    lo = ib.cast("sext", ib.shuffle(b, b, range(16)), "<16 x i16>")
    hi = ib.cast("sext", ib.shuffle(b, b, range(16, 32)), "<16 x i16>")
    plo = ib.call("llvm.x86.avx2.pmadd.wd", "<8 x i32>", a16, lo)   # columns 0-3, pairs
    phi = ib.call("llvm.x86.avx2.pmadd.wd", "<8 x i32>", a16, hi)   # columns 4-7, pairs
    even = ib.shuffle(plo, phi, range(0, 16, 2))
    odd = ib.shuffle(plo, phi, range(1, 16, 2))
    acc = ib.load(outs[0], "<8 x i32>")
    ib.store(outs[0], ib.add(acc, ib.add(even, odd)))


def declarations():
    """The built-in x86 intrinsics, as ``tc.decl_tensor_intrin`` arguments: (computation,
    emitter, name, required features); a fresh computation each call."""
    return [
        (_dot_decl(16, "c"), _vnni(16), "x86.vnni_u8s8s32_16x4", ("avx512vnni",)),
        (_dot_decl(8, "c"), _vnni(8), "x86.vnni_u8s8s32_8x4", ("avx512vnni", "avx512vl")),
        (_dot_decl(8, "c"), _avx2_emit, "x86.avx2_u8s8s32_8x4", ("avx2",)),
    ]
