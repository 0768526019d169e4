"""The float16 and bfloat16 conversion helpers LLVM calls, for the JIT.

On a CPU without F16C (``llvm -mcpu=x86-64``, ``-mattr=-f16c``) LLVM's x86 backend
converts between ``half`` and ``float`` by calling compiler-rt's helpers, and converts
``double`` to ``half`` and anything to ``bfloat`` that way on every CPU without the
instruction (AVX512-FP16, AVX512-BF16): ``__extendhfsf2``, ``__truncsfhf2``,
``__truncdfhf2``, ``__truncsfbf2``, ``__truncdfbf2`` (and, in older LLVMs,
``__gnu_h2f_ieee`` / ``__gnu_f2h_ieee``).  An exported library gets them from libgcc
when ``cc`` links it; the JIT links against the running process, which has none of
them.  So they are written here in LLVM IR -- integer and exactly-rounded float
instructions only, no call and no conversion instruction -- JIT-compiled once, on
first need by :mod:`.jit` (``_ensure_libcalls``), and registered by name
(``llvm.add_symbol``) like the thread pool.

Semantics (those of compiler-rt, checked against numpy on every float16 value and a
sweep of floats and doubles in ``tests/test_llvm_libcalls.py``):

* narrowing rounds once, to nearest, ties to even, into subnormals as well; what rounds
  past the largest finite value is infinity;
* widening is exact (a float16 subnormal becomes a normal float);
* a NaN stays a NaN of the same sign; widening keeps its payload, narrowing keeps the
  payload's top bits and sets the quiet bit, as the hardware instructions do.
"""
from __future__ import annotations

import struct

__all__ = ["NAMES", "libcalls_ir"]


def _dbits(x: float) -> int:
    return struct.unpack("<Q", struct.pack("<d", x))[0]


def _hex(x: float) -> str:
    """An LLVM IR floating-point constant (LLVM writes float constants as doubles)."""
    return f"0x{_dbits(x):016X}"


_IR = r"""
; float16 bits -> float32 (exact)
define internal float @tc_h2f(i16 %h) nounwind readnone alwaysinline {
entry:
  %u = zext i16 %h to i32
  %s = and i32 %u, 32768
  %sign = shl i32 %s, 16
  %e = lshr i32 %u, 10
  %exp = and i32 %e, 31
  %mant = and i32 %u, 1023
  %mbits = shl i32 %mant, 13
  ; normal: the exponent rebiased (15 -> 127)
  %e32 = add i32 %exp, 112
  %ebits = shl i32 %e32, 23
  %norm = or i32 %ebits, %mbits
  ; infinity and NaN: the mantissa (the payload) kept
  %special = or i32 %mbits, 2139095040
  ; zero and subnormal: mant * 2^-24, exact in float32
  %mf = uitofp i32 %mant to float
  %sf = fmul float %mf, {P2M24}
  %sbits = bitcast float %sf to i32
  %isspecial = icmp eq i32 %exp, 31
  %issub = icmp eq i32 %exp, 0
  %a = select i1 %isspecial, i32 %special, i32 %norm
  %b = select i1 %issub, i32 %sbits, i32 %a
  %bits = or i32 %b, %sign
  %f = bitcast i32 %bits to float
  ret float %f
}

{NARROW}
; float32 -> bfloat16 bits, to nearest, ties to even (a NaN: quiet); one exponent range, so
; the rounding of the bits dropped serves subnormals too (and float32 could not scale them)
define internal i16 @tc_f2bf(float %x) nounwind readnone alwaysinline {
entry:
  %u = bitcast float %x to i32
  %a = and i32 %u, 2147483647
  %hi = lshr i32 %u, 16
  %odd = and i32 %hi, 1
  %r0 = add i32 %u, 32767
  %r1 = add i32 %r0, %odd
  %r = lshr i32 %r1, 16
  %nan = or i32 %hi, 64
  %isnan = icmp ugt i32 %a, 2139095040
  %v = select i1 %isnan, i32 %nan, i32 %r
  %h = trunc i32 %v to i16
  ret i16 %h
}
"""

#: the helpers, by the names LLVM's x86 backend calls: (return type, argument type, the
#: function above that converts); a ``half``/``bfloat`` travels as its bits (``i16``)
_ENTRIES = {
    "__extendhfsf2": ("float", "half", "tc_h2f"), "__extendhfdf2": ("double", "half", "tc_h2f"),
    "__truncsfhf2": ("half", "float", "tc_f2h"), "__truncdfhf2": ("half", "double", "tc_d2h"),
    "__truncsfbf2": ("bfloat", "float", "tc_f2bf"),
    "__truncdfbf2": ("bfloat", "double", "tc_d2bf"),
    "__gnu_h2f_ieee": ("float", "i16", "tc_h2f"), "__gnu_f2h_ieee": ("i16", "float", "tc_f2h"),
}
#: the helpers this module defines
NAMES = tuple(_ENTRIES)


def _entry_ir(symbol: str, ret: str, arg: str, fn: str) -> str:
    """``ret @symbol(arg)``: ``fn`` (i16 bits or float32 in and out) in the helper's ABI."""
    bits = ("half", "bfloat")
    inner_arg = "i16" if arg in bits else arg
    inner_ret = "float" if fn == "tc_h2f" else "i16"
    body = [f"define {ret} @{symbol}({arg} %x) nounwind {{", "entry:"]
    x = "%x"
    if arg in bits:
        body.append(f"  %b = bitcast {arg} %x to i16")
        x = "%b"
    body.append(f"  %y = call {inner_ret} @{fn}({inner_arg} {x})")
    if ret == inner_ret:
        body.append(f"  ret {ret} %y")
    else:
        conv = "fpext" if ret == "double" else "bitcast"
        body += [f"  %r = {conv} {inner_ret} %y to {ret}", f"  ret {ret} %r"]
    return "\n".join(body + ["}", ""])


_NARROW = r"""
; {SRC} -> {DST} bits, rounded once: to nearest, ties to even
define internal i16 @{NAME}({FT} %x) nounwind readnone alwaysinline {
entry:
  %u = bitcast {FT} %x to {IT}
  %s = lshr {IT} %u, {SIGN_SHIFT}
  %sign = and {IT} %s, 32768
  %a = and {IT} %u, {ABS_MASK}
  ; NaN: quiet, the top bits of the payload kept
  %p = lshr {IT} %a, {DROP}
  %pm = and {IT} %p, {PAYLOAD}
  %nan = or {IT} %pm, {QNAN}
  ; normal: the exponent rebiased, the dropped bits rounded
  %m = sub {IT} %a, {REBIAS}
  %k = lshr {IT} %m, {DROP}
  %odd = and {IT} %k, 1
  %r0 = add {IT} %m, {HALF_ULP_M1}
  %r1 = add {IT} %r0, %odd
  %norm = lshr {IT} %r1, {DROP}
  ; below the smallest normal: |x| in units of the smallest subnormal (exact), rounded to
  ; an integer by the FPU (ties to even); the smallest normal's bits where it rounds up
  %af = bitcast {IT} %a to {FT}
  %sc = fmul {FT} %af, {SUB_SCALE}
  %t0 = fadd {FT} %sc, {MAGIC}
  %t1 = fsub {FT} %t0, {MAGIC}
  %sub = fptoui {FT} %t1 to {IT}
  %issmall = icmp ult {IT} %a, {MIN_NORMAL}
  %isbig = icmp uge {IT} %a, {OVERFLOW}
  %isnan = icmp ugt {IT} %a, {SRC_INF}
  %v0 = select i1 %issmall, {IT} %sub, {IT} %norm
  %v1 = select i1 %isbig, {IT} {INF}, {IT} %v0
  %v2 = select i1 %isnan, {IT} %nan, {IT} %v1
  %v = or {IT} %v2, %sign
  %h = trunc {IT} %v to i16
  ret i16 %h
}
"""

#: (LLVM type, integer type, bits, mantissa bits, exponent bias) of the source formats
_WIDE = {"float32": ("float", "i32", 32, 23, 127), "float64": ("double", "i64", 64, 52, 1023)}
#: (mantissa bits, exponent bias) of the 16-bit formats
_NARROW_FORMATS = {"float16": (10, 15), "bfloat16": (7, 127)}


def _bits(x: float, width: int) -> int:
    return _dbits(x) if width == 64 else struct.unpack("<I", struct.pack("<f", x))[0]


def _narrow_ir(name: str, src: str, dst: str) -> str:
    """The function ``i16 @name(src)``: ``src`` rounded once to the 16-bit ``dst`` (the
    ``src`` range must hold ``dst``'s subnormals scaled to integers: float32 to float16,
    float64 to either)."""
    ft, it, width, ms, bs = _WIDE[src]
    md, bd = _NARROW_FORMATS[dst]
    drop = ms - md
    inf = ((1 << (15 - md)) - 1) << md           # the 16-bit format's infinity
    consts = {
        "NAME": name, "SRC": src, "DST": dst, "FT": ft, "IT": it,
        "SIGN_SHIFT": width - 16, "ABS_MASK": (1 << (width - 1)) - 1,
        "DROP": drop, "PAYLOAD": (1 << (md - 1)) - 1, "QNAN": inf | (1 << (md - 1)),
        "REBIAS": (bs - bd) << ms, "HALF_ULP_M1": (1 << (drop - 1)) - 1,
        "SUB_SCALE": _hex(2.0 ** (bd - 1 + md)), "MAGIC": _hex(2.0 ** ms),
        "MIN_NORMAL": _bits(2.0 ** (1 - bd), width),
        # half-way above the largest finite value: what rounds to infinity
        "OVERFLOW": _bits((2 - 2.0 ** -(md + 1)) * 2.0 ** bd, width),
        "SRC_INF": ((1 << (width - 1 - ms)) - 1) << ms, "INF": inf,
    }
    text = _NARROW
    for k, v in consts.items():
        text = text.replace("{" + k + "}", str(v))
    return text


def libcalls_ir() -> str:
    """The helpers' LLVM IR text."""
    narrow = "".join(_narrow_ir(*a) for a in (("tc_f2h", "float32", "float16"),
                                               ("tc_d2h", "float64", "float16"),
                                               ("tc_d2bf", "float64", "bfloat16")))
    entries = "\n".join(_entry_ir(name, *e) for name, e in _ENTRIES.items())
    return (_IR.replace("{NARROW}", narrow).replace("{P2M24}", _hex(2.0 ** -24)) + "\n" +
            entries)
