"""The x86 policy of the LLVM code generator (see :mod:`tecomp.codegen.llvm.policy`).

What the emitter does differently for x86 CPUs (SSE, AVX2, AVX-512), each decision
measured or forced by LLVM's x86 backend:

* **Lane padding** (AVX-512): an unmasked contiguous load or store whose lane count is
  not a power of two (14 float32: a 56-wide row in 4 blocks) is one
  ``llvm.masked.load``/``store`` of the next power of two, or of the next whole number
  of zmm registers, with a constant mask (:meth:`X86Policy.pad_lanes`), instead of
  LLVM's 8 + 4 + 2 lane pieces and inserts.
* **Register width**: masked loads wider than a register (64 bytes with AVX-512, else
  32) are split into register-wide masked loads: LLVM's backend, splitting one itself,
  aborted the process (an assertion in its alias analysis, on an AVX2 Zen 3) on an
  ``<8 x double>`` masked load whose upper half was masked off.
* **Strided loads**: the lanes ``base + i*step`` for a constant step of 2 to
  :data:`MAX_STRIDED_STEP` (a stride-2 convolution's input row) are one wider masked load
  and a shuffle, not a gather (16 lanes: two loads and a ``vpermt2ps`` against a
  16-element ``vgatherdps``).
* **FMA**: tecomp's vector ``exp``/``erf`` use ``llvm.fma`` where the CPU has FMA3.
* **Scaling by a power of two** (AVX-512): the last step of the vector ``exp``, ``p * 2**n``,
  is one ``vscalefps`` (:meth:`X86Policy.vector_op`) instead of eight integer and float
  instructions building ``2**n`` from exponent bits in two halves; the result is the same
  (``p * 2**n`` rounded once, subnormal results included).
* **Float min/max**: ``min(a, b)`` is ``vminps b, a`` (``b < a ? b : a``, which gives
  ``a`` when either is NaN) through LLVM's x86 intrinsic, then ``b`` where ``b`` is NaN,
  which LLVM makes one masked ``vminps`` (:meth:`X86Policy.vector_op`): in a reduction
  ``acc = min(acc, v)`` the accumulator goes through that one instruction (4 cycles a
  step), where a compare and select took three dependent instructions (6 cycles: LLVM
  merges the two selects) and ``llvm.minimum``/``llvm.maximum`` six.  Scalars the same
  with ``vminss`` in kernels the schedule vectorized (LLVM's loop vectorizer is off
  there).  With AVX-512 (a compare writes a mask register) an unrolled run of rows
  into one accumulator (a column max) is one chain: ``vmaxps`` of each row into the
  accumulator (a NaN accumulator stays), then per two rows one ``vcmpunordps`` of the
  pair and a masked ``vaddps`` of the two (a NaN) where either is NaN: half the mask
  writes (``paired_nan_tests``, ``emit_control.PAIRED_NAN_TESTS``).  An argmax's
  (argmin's) unrolled rows go two a step under one ``vcmpunordps`` of the two and a
  branch on any lane: without a NaN, each row's update is one ordered compare
  (``emit_control.PAIRED_SELECTION_TESTS``).
* **Tables of 16 coefficients** (AVX2, AVX-512): the float32 ``erf`` reads each of its
  per-segment coefficients with one ``vpermps`` per 16 lanes (AVX2: two of 8 entries and
  a blend per 8 lanes) (:meth:`X86Policy.vector_op`, ``"lookup16"``), where a gather
  or a compare-and-select per segment would cost several instructions per lane group;
  with AVX-512, tables of 32 (softplus, pow's logarithm and exp) with one ``vpermi2ps``
  per 16 lanes (``"lookup32"``).

The vectorizer's plan (``tecomp/lower/vectorize.py``: whether a loop is widened whole,
in register-wide pieces or in chunks, and the chunk width) is the lowering's decision,
made before code generation; this policy only shapes the instructions of a plan.
"""
from __future__ import annotations

import llvmlite.ir as ir

from ...lower.vectorize import MAX_WIDEN_LANES
from .policy import TargetPolicy
from .values import (_F32, _F64, _I8, _I16, _I32, _I64, _join_pieces, _lookup_lanes, _piece,
                     _poison, _splat)

#: a vector load of every 2nd, ..., MAX_STRIDED_STEP-th element is a wider load and a
#: shuffle (``_FnEmitter.wide_load``), a larger step a gather
MAX_STRIDED_STEP = 4

#: the first word of the LLVM triples of x86 code
X86_ARCHS = ("x86_64", "i386", "i486", "i586", "i686")


def is_x86(triple: str) -> bool:
    """Whether the LLVM target triple ``triple`` is an x86 one."""
    return triple.split("-", 1)[0] in X86_ARCHS


def _open_piece(b, v, start: int, per: int):
    """Lanes ``start .. start + per - 1`` of vector ``v`` as a vector of ``per`` lanes,
    those past ``v``'s end poison (a padded last piece: lanes whose results are cut off,
    left where LLVM's widened register has them, where copies of a lane would cost a
    permute of every operand, an accumulator's included)."""
    n = v.type.count
    if start == 0 and per == n:
        return v
    idx = [start + i if start + i < n else n for i in range(per)]
    return b.shuffle_vector(v, _poison(v.type), ir.Constant(
        ir.VectorType(_I32, per), [ir.Constant(_I32, i) for i in idx]))


#: ``max``/``min`` on float vectors that are no whole number of the widest registers
#: (12 float32 lanes, a 28-wide pooling row's tail): the widest register a piece, the
#: last one padded (one ``vmaxps zmm``), not three ``xmm`` pieces and their shuffles.
#: Zen 5, one thread, CPU time, under load: max_pool3d 3^3/2 p1 over 2x32x32x56x56
#: 3.72 -> 2.21 ms, max_pool2d 3x3/2 p1 over 8x64x56x56 0.223 -> 0.156 ms (from batch 16
#: up 0.65-0.81x until the template prefetched the rows ahead: the shorter loop outran
#: the hardware prefetcher)
#: (measurements: benchmarks/DECISIONS.md, "Max pooling's odd rows: padded min/max
#: pieces, strided reads of a local row from its registers, 3-d maxima in a local
#: block").  False: as before
PAD_MINMAX_PIECES = True


class X86Policy(TargetPolicy):
    """The emitter's decisions for x86 CPUs (see the module docstring)."""

    def __init__(self, target, vector_bytes: int = 0):
        super().__init__(target)
        #: AVX-512: zmm registers and ``k`` masks for loads and stores; not in a module
        #: under ``pragma vector_bytes`` 32 (a float row sum streaming from memory on a
        #: CPU whose 256-bit loads read it faster: ``CpuModel.stream_load_bytes``), which
        #: gets AVX2's decisions and is compiled for 256-bit registers (LLVM's
        #: "prefer-vector-width" and "min-legal-vector-width" on every function: the
        #: AVX-512 instructions stay, on ymm registers)
        self.avx512 = target.has_feature("avx512f") and vector_bytes != 32
        if self.avx512 != target.has_feature("avx512f"):
            self.width_attributes = ('"prefer-vector-width"="256" '
                                     '"min-legal-vector-width"="256"')
        self._avx512vl = target.has_feature("avx512vl")
        # AVX-512: a contiguous access of a lane count that is not a power of two (e.g.
        # 14 float32) is one masked access of the next power of two (pad_lanes)
        # (not for accumulators: LICM keeps a plain load/store pair in registers across a
        # loop, but not a masked one)
        self.pads_lanes = self.avx512
        self.register_bytes = 64 if self.avx512 else 32
        self.has_fma = target.has_feature("fma")
        self.vector_minmax_select = True
        #: AVX-512: a float max/min chain's NaN tests in pairs (a compare writes a mask)
        self.paired_nan_tests = self.avx512

    def store_fence(self, mb, b) -> None:
        """``sfence``: the fence x86 defines for weakly ordered (non-temporal) stores.
        LLVM lowers ``fence seq_cst`` to a locked ``or`` on some CPUs, and x86's manuals
        name SFENCE and MFENCE as what orders such stores."""
        b.call(mb.declare("llvm.x86.sse.sfence", ir.VoidType(), []), [])

    def _minmax_op(self, op: str, ty):
        """``maxss``/``minss`` (``sd``) on a float32/float64 scalar, ``maxps``/``minps``
        (``pd``) on float32/float64 vectors of a whole number of
        128-bit pieces, one instruction per register (``zmm`` with AVX-512, ``ymm`` with
        AVX, else ``xmm``; a wider vector is split into registers and joined again by
        shuffles, which cost nothing after LLVM's type legalisation).  A vector that is
        no whole number of the widest registers (:data:`PAD_MINMAX_PIECES`) is cut into
        the widest ones, its last piece padded with poison lanes (12 float32: one
        ``zmm``, not three ``xmm`` and their inserts).  Written as a
        compare and a select, LLVM merges ``x > y ? x : y`` with a NaN select around it
        into one compare, a mask ``or`` and a blend: three dependent instructions where
        an accumulator (a max reduction's) needs one."""
        if ty in (_F32, _F64):      # a scalar: maxss / maxsd on the lowest lane
            vty = ir.VectorType(ty, 4 if ty == _F32 else 2)
            name = (f"llvm.x86.sse.{op}.ss" if ty == _F32 else f"llvm.x86.sse2.{op}.sd")
            zero = ir.Constant(_I32, 0)

            def emit_scalar(b, mb, x, y):
                f = mb.declare(name, vty, [vty, vty])
                u = ir.Constant(vty, ir.Undefined)
                return b.extract_element(b.call(f, [b.insert_element(u, x, zero),
                                                    b.insert_element(u, y, zero)]), zero)
            return emit_scalar
        if not hasattr(ty, "count") or ty.element not in (_F32, _F64):
            return None
        ebits = 32 if ty.element == _F32 else 64
        bits = ty.count * ebits
        reg = 512 if self.avx512 else 256 if self.target.has_feature("avx") else 128
        if bits % 128:
            return None
        if bits % reg and PAD_MINMAX_PIECES:
            # (a vector that is no whole number of the widest registers: its last piece
            # padded with copies of one of its lanes, not cut into narrower registers;
            # one that fits in less than the widest, in the narrowest that holds it)
            while reg > 128 and bits <= reg // 2:
                reg //= 2
        else:
            while reg > 128 and bits % reg:
                reg //= 2
        sfx = "ps" if ebits == 32 else "pd"
        name = {512: f"llvm.x86.avx512.{op}.{sfx}.512", 256: f"llvm.x86.avx.{op}.{sfx}.256",
                128: f"llvm.x86.sse.{op}.ps" if ebits == 32 else f"llvm.x86.sse2.{op}.pd"}[reg]
        per = reg // ebits
        pty = ir.VectorType(ty.element, per)
        extra = [ir.Constant(_I32, 4)] if reg == 512 else []   # the current rounding

        def emit(b, mb, x, y):
            f = mb.declare(name, pty, [pty, pty] + [e.type for e in extra])
            if per == ty.count:
                return b.call(f, [x, y] + extra)
            return _join_pieces(b, [b.call(f, [_open_piece(b, x, k, per),
                                               _open_piece(b, y, k, per)] + extra)
                                    for k in range(0, ty.count, per)], ty.count)
        return emit

    def pad_lanes(self, lanes: int, memty) -> int:
        """The next power of two when ``lanes`` is not one and less than a zmm register,
        else the next whole number of zmm registers (AVX-512 only, 32- and 64-bit
        elements).  LLVM otherwise splits e.g. a 14-lane float32 load into 8 + 4 + 2
        lane loads and two inserts (on port 5, shared with the second FMA unit) and a
        store into three stores; one masked access (``vmovups`` with a ``k`` mask) is a
        single instruction."""
        n = lanes
        if (n <= 2 or n & (n - 1) == 0 or n > MAX_WIDEN_LANES or not self.pads_lanes
                or memty not in (_F32, _I32, _F64, _I64)):
            return n
        per_reg = 64 // (4 if memty in (_F32, _I32) else 8)
        if n % per_reg == 0:
            return n        # whole zmm registers (e.g. 48 float32): LLVM splits it cleanly
        if n > per_reg:
            return -(-n // per_reg) * per_reg   # e.g. 58 -> 64: whole registers
        return 1 << (n - 1).bit_length()

    def _lookup16_op(self, ty):
        """``table[idx & 15]`` lane by lane, ``table`` 16 float32 values (Python floats)
        and ``idx`` int32 lanes: with AVX-512 one ``vpermps`` per 16 lanes (fewer lanes
        padded to 16, more split into pieces of 16), with AVX2 two ``vpermps`` of 8
        entries and a blend per 8 lanes; a scalar reads its one entry.  None on a CPU
        with neither (before Haswell) and for other types."""
        avx2 = self.target.has_feature("avx2")
        if not (self.avx512 or avx2) or (ty != _F32 and getattr(ty, "element", None) != _F32):
            return None
        per, name = (16, "llvm.x86.avx512.permvar.sf.512") if self.avx512 else (
            8, "llvm.x86.avx2.permps")

        def emit(b, mb, table, idx):
            if ty == _F32:
                return _lookup_lanes(b, table, idx)
            fty, ity = ir.VectorType(_F32, per), ir.VectorType(_I32, per)
            f = mb.declare(name, fty, [fty, ity])
            parts = [ir.Constant(fty, list(table[i:i + per])) for i in range(0, 16, per)]
            out = []
            for start in range(0, ty.count, per):
                k = _piece(b, idx, start, per)
                v = b.call(f, [parts[0], k])
                if per == 8:    # entries 8..15: the second half where bit 3 is set
                    hi = b.icmp_unsigned("!=", b.and_(k, _splat(ity, 8)), _splat(ity, 0))
                    v = b.select(hi, b.call(f, [parts[1], k]), v)
                out.append(v)
            return _join_pieces(b, out, ty.count)
        return emit

    def _lookup32_op(self, ty):
        """``table[idx & 31]`` lane by lane, ``table`` 32 float32 values and ``idx`` int32
        lanes: with AVX-512 one ``vpermi2ps``/``vpermt2ps`` (two registers of 16 entries)
        per 16 lanes, fewer lanes padded to 16; a scalar reads its one entry.  None
        without AVX-512 (AVX2 would take four ``vpermps`` and three blends per 8 lanes)
        and for other types."""
        if not self.avx512 or (ty != _F32 and getattr(ty, "element", None) != _F32):
            return None
        fty, ity = ir.VectorType(_F32, 16), ir.VectorType(_I32, 16)

        def emit(b, mb, table, idx):
            if ty == _F32:
                return _lookup_lanes(b, table, idx)
            f = mb.declare("llvm.x86.avx512.vpermi2var.ps.512", fty, [fty, ity, fty])
            lo, hi = (ir.Constant(fty, list(table[i:i + 16])) for i in (0, 16))
            return _join_pieces(b, [b.call(f, [lo, _piece(b, idx, start, 16), hi])
                                    for start in range(0, ty.count, 16)], ty.count)
        return emit

    def _half_bits_op(self, ty):
        """float32 lanes rounded to float16 (to nearest, ties to even, as ``fptrunc``),
        as their bits (i16 lanes): ``vcvtps2ph`` per 16 lanes with AVX-512F, per 8 with
        F16C (fewer lanes padded, more split into pieces).  LLVM's ``fptrunc`` is the same
        instruction, but a vector of half has no non-temporal store in LLVM's x86
        backend (a plain ``vmovaps``), and a bitcast of it to i16 folds away before
        instruction selection; these bits take ``vmovntdq``.  None without either
        feature, for a scalar and for other types."""
        if not hasattr(ty, "count") or ty.element != _F32:
            return None
        if self.avx512:
            per, name = 16, "llvm.x86.avx512.mask.vcvtps2ph.512"
        elif self.target.has_feature("f16c"):
            per, name = 8, "llvm.x86.vcvtps2ph.256"
        else:
            return None
        fty, hty = ir.VectorType(_F32, per), ir.VectorType(_I16, per)
        # the rounding (4: the current one, MXCSR's: to nearest even unless a program
        # changes it, which fptrunc assumes too); AVX-512's pass-through and mask
        extra = [ir.Constant(_I32, 4)] + (
            [ir.Constant(hty, ir.Undefined), ir.Constant(_I16, -1)] if per == 16 else [])

        def emit(b, mb, x):
            f = mb.declare(name, hty, [fty] + [e.type for e in extra])
            return _join_pieces(b, [b.call(f, [_piece(b, x, k, per)] + extra)
                                    for k in range(0, ty.count, per)], ty.count)
        return emit

    #: the AVX-512 instructions behind :meth:`vector_op`: the intrinsic's stem and the
    #: immediate operand it takes after the vector ones (None: none)
    _AVX512_OPS = {"scalef": ("scalef", None), "getexp": ("getexp", None),
                   # interval [1, 2), a NaN for a negative source (imm 0b1000)
                   "getmant": ("getmant", 8),
                   # interval [3/4, 3/2), the sign dropped (imm 0b0111)
                   "getmant34": ("getmant", 7)}

    def vector_op(self, op: str, ty):
        """AVX-512's ``vscalefps``, ``vgetexpps`` and ``vgetmantps`` (and their ``pd``
        forms) on float32/float64 vectors of a whole zmm register, or of a ymm/xmm
        register with AVX-512VL; None otherwise (scalars, other lane counts, no
        AVX-512).  Called through LLVM's masked intrinsics with an all-ones mask.
        ``"max"``/``"min"``: :meth:`_minmax_op`; ``"lookup16"``: :meth:`_lookup16_op`;
        ``"lookup32"``: :meth:`_lookup32_op`; ``"half_bits"``: :meth:`_half_bits_op`."""
        if op in ("max", "min"):
            return self._minmax_op(op, ty)
        if op == "half_bits":
            return self._half_bits_op(ty)
        if op == "lookup16":
            return self._lookup16_op(ty)
        if op == "lookup32":
            return self._lookup32_op(ty)
        if (op not in self._AVX512_OPS or not self.avx512 or not hasattr(ty, "count")
                or ty.element not in (_F32, _F64)):
            return None
        width = ty.count * (32 if ty.element == _F32 else 64)
        if width not in (128, 256, 512) or (width < 512 and not self._avx512vl):
            return None
        stem, imm = self._AVX512_OPS[op]
        name = f"llvm.x86.avx512.mask.{stem}.p{'s' if ty.element == _F32 else 'd'}.{width}"
        mask = ir.Constant(_I16 if ty.count == 16 else _I8, -1)
        # after the operands: the immediate, the pass-through value (unused under an
        # all-ones mask), the mask and, on zmm, the rounding mode (4: the current one)
        extra = ([] if imm is None else [ir.Constant(_I32, imm)]) + [
            ir.Constant(ty, ir.Undefined), mask] + (
            [ir.Constant(_I32, 4)] if width == 512 else [])

        def emit(b, mb, *operands):
            f = mb.declare(name, ty, [ty] * len(operands) + [e.type for e in extra])
            return b.call(f, list(operands) + extra)
        return emit

    def strided_wide_load(self, step: int, lanes: int, memty) -> bool:
        """A small constant step (a stride-2 convolution's input row): one contiguous
        load of ``step * lanes`` elements and a shuffle, instead of a gather (16 lanes:
        two loads and a vpermt2ps against a 16-element vgatherdps)."""
        return (2 <= step <= MAX_STRIDED_STEP and step * lanes <= MAX_WIDEN_LANES
                and memty in (_F32, _I32, _F64, _I64))

    def pattern_wide_load(self, span: int, lanes: int, memty) -> bool:
        """Constant lane offsets within a span of at most ``MAX_STRIDED_STEP * lanes``
        elements (the strided loads' bound): one load of the span and a shuffle (16
        float32 lanes repeating 4 channels of each group of 4: one load and a
        ``vpermilps`` against a 16-element ``vgatherdps``)."""
        return (span <= MAX_STRIDED_STEP * lanes and span <= MAX_WIDEN_LANES
                and memty in (_F32, _I32, _F64, _I64))
