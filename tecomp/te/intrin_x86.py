"""The built-in x86 tensor intrinsics: u8 x s8 -> s32 dot products of 4-element groups,
float32 transposes of square tiles, and the int8 interleave that packs the dot products'
B operand.

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

The transposes compute ``c[i, j] = a[j, i]`` on ``L x L`` float32 tiles whose rows may lie
at any constant stride (``dense=False``): ``L`` row loads, ``log2(L)`` rounds of two-input
shuffles, ``L`` row stores, instead of ``L*L`` element copies (a strided vector load is
one insert per lane).  They are the copy of a GEMM's B panel from ``W[o, k]`` (a dense
layer's weight) into ``k``-major panels, which took a quarter of BERT-base's FFN GEMMs at
batch 1 (benchmarks/DECISIONS.md, "Rules: weight panels transposed in registers").

* ``x86.transpose_f32_8x8`` -- 256-bit registers (AVX).
* ``x86.transpose_f32_16x16`` -- 512-bit registers (AVX-512F).
* ``x86.transpose_f32_Mx16`` (``M`` 2 to 15), ``x86.transpose_f32_Mx8`` (2 to 7) --
  ``M`` rows of ``L`` into ``L`` rows of ``M`` (``c[i, j] = a[j, i]``, ``a`` being ``M x
  L``): the square transpose of the ``M`` rows (the others any value), each result row
  stored ``M`` wide.  The store of a block of ``M`` pixels x ``L`` channels into ``L``
  channel planes (an NCHW output whose rows are not whole vectors: 14 or 7 columns),
  instead of a scatter per pixel.
* ``x86.transpose_f32_16xM`` (``M`` 2 to 15), ``x86.transpose_f32_8xM`` (2 to 7) -- the
  other way: ``L`` rows of ``M`` into ``M`` rows of ``L`` (``a`` being ``L x M``), each
  row read as two overlapping loads of a power of two within it (no read past its
  ``M`` values).  The copy of ``L`` channel planes' rows of ``M`` pixels into ``M``
  pixels x ``L`` channels (an NCHW input read channels last).

The interleaves compute ``c[i, r] = a[r, i]`` for 4 rows of ``L`` int8 values at any row
stride: the dot products' packing of B (``B[k, j]`` into groups of 4 consecutive ``k``
per column), 4 row loads, byte shuffles, one ``4L``-byte store, instead of ``4L``
one-byte copies.

* ``x86.interleave_s8_4x16``, ``x86.interleave_s8_4x8`` -- SSE2 and later.

Where an operand's last stride is not 1 the emitter copies element by element.
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


def _transpose_decl(lanes: int):
    a = placeholder((lanes, lanes), "float32", name="a")
    return compute((lanes, lanes), lambda i, j: a[j, i], name="c")


def _transpose_rows_decl(m: int, lanes: int):
    a = placeholder((m, lanes), "float32", name="a")
    return compute((lanes, m), lambda i, j: a[j, i], name="c")


def _transpose_cols_decl(m: int, lanes: int):
    a = placeholder((lanes, m), "float32", name="a")
    return compute((m, lanes), lambda i, j: a[j, i], name="c")


def _short_row(ib, a, r: int, m: int, lanes: int):
    """Row ``r`` of ``a`` (``m < lanes`` values) as a ``lanes``-wide vector, the lanes
    past ``m`` any value: two loads of the largest power of two ``w <= m``, at 0 and at
    ``m - w`` (overlapping; nothing read past the row)."""
    w = 1 << (m.bit_length() - 1)
    lo = ib.load(a, f"<{w} x float>", (r, 0))
    if w < m:
        hi = ib.load(a, f"<{w} x float>", (r, m - w))
        # lanes 0..w-1 from lo, w..m-1 from hi's last m - w lanes
        lo = ib.shuffle(lo, hi, list(range(w)) + [w + j - (m - w) for j in range(w, m)])
    return ib.shuffle(lo, lo, list(range(m)) + [0] * (lanes - m))


def _transpose(lanes: int, m: int = 0, cols: bool = False):
    """The emitter of the ``m x lanes`` transpose (``m`` 0: ``lanes``); ``cols``: the
    ``lanes x m`` one (``lanes`` rows of ``m`` into ``m`` rows of ``lanes``)."""
    vec = f"<{lanes} x float>"
    m = m or lanes

    def emit(ib, ins, outs):
        a, c = ins[0], outs[0]
        if a.strides[-1] != 1 or c.strides[-1] != 1:
            for i in range(m if cols else lanes):
                for j in range(lanes if cols else m):
                    ib.store(c, ib.load(a, "float", (j, i)), (i, j))
            return
        if cols:
            rows = [ib.load(a, vec, (r, 0)) if m == lanes else _short_row(ib, a, r, m, lanes)
                    for r in range(lanes)]
        else:
            rows = [ib.load(a, vec, (r, 0)) for r in range(m)]
            # (the rows past m: any value, their lanes are not stored)
            rows += [rows[0]] * (lanes - m)
        # round d swaps the off-diagonal d x d blocks of every 2d x 2d block
        d = 1
        while d < lanes:
            new = list(rows)
            for i in range(lanes):
                if not i & d:
                    new[i] = ib.shuffle(rows[i], rows[i + d], [
                        j if not j & d else lanes + j - d for j in range(lanes)])
                    new[i + d] = ib.shuffle(rows[i], rows[i + d], [
                        j + d if not j & d else lanes + j for j in range(lanes)])
            rows, d = new, 2 * d
        if cols:
            for i in range(m):
                ib.store(c, rows[i], (i, 0))
            return
        for i in range(lanes):
            ib.store(c, rows[i] if m == lanes else ib.shuffle(rows[i], rows[i], range(m)),
                     (i, 0))
    return emit


def _interleave_decl(lanes: int):
    a = placeholder((4, lanes), "int8", name="a")
    return compute((lanes, 4), lambda i, r: a[r, i], name="c")


def _interleave(lanes: int):
    vec = f"<{lanes} x i8>"

    def emit(ib, ins, outs):
        a, c = ins[0], outs[0]
        if a.strides[-1] != 1:
            for i in range(lanes):
                for r in range(4):
                    ib.store(c, ib.load(a, "i8", (r, i)), (i, r))
            return
        rows = [ib.load(a, vec, (r, 0)) for r in range(4)]
        lo = ib.shuffle(rows[0], rows[1], range(2 * lanes))
        hi = ib.shuffle(rows[2], rows[3], range(2 * lanes))
        # output byte 4 i + r is row r's byte i (the rows concatenated: r * lanes + i)
        ib.store(c, ib.shuffle(lo, hi, [r * lanes + i for i in range(lanes) for r in range(4)]))
    return emit


def declarations():
    """The built-in x86 intrinsics, as ``tc.decl_tensor_intrin`` arguments: (computation,
    emitter, name, required features, dense); a fresh computation each call."""
    return [
        (_dot_decl(16, "c"), _vnni(16), "x86.vnni_u8s8s32_16x4", ("avx512vnni",), True),
        (_dot_decl(8, "c"), _vnni(8), "x86.vnni_u8s8s32_8x4", ("avx512vnni", "avx512vl"), True),
        (_dot_decl(8, "c"), _avx2_emit, "x86.avx2_u8s8s32_8x4", ("avx2",), True),
        (_transpose_decl(16), _transpose(16), "x86.transpose_f32_16x16", ("avx512f",), False),
        (_transpose_decl(8), _transpose(8), "x86.transpose_f32_8x8", ("avx",), False),
    ] + [
        (_transpose_rows_decl(m, lanes), _transpose(lanes, m),
         f"x86.transpose_f32_{m}x{lanes}", features, False)
        for lanes, features in ((16, ("avx512f",)), (8, ("avx",))) for m in range(2, lanes)
    ] + [
        (_transpose_cols_decl(m, lanes), _transpose(lanes, m, cols=True),
         f"x86.transpose_f32_{lanes}x{m}", features, False)
        for lanes, features in ((16, ("avx512f",)), (8, ("avx",))) for m in range(2, lanes)
    ] + [
        (_interleave_decl(16), _interleave(16), "x86.interleave_s8_4x16", ("sse2",), False),
        (_interleave_decl(8), _interleave(8), "x86.interleave_s8_4x8", ("sse2",), False),
    ]
