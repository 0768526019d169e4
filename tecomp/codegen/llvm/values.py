"""Values of the LLVM code generator: the LLVM types of every dtype (the register type
it computes in, the memory type it is stored as), the value of an IR expression in a
lane context (:class:`Val`), a buffer as a function sees it (:class:`_Buf`), and
constants: folded integers and vector literals in LLVM's short forms (:func:`_lit`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Tuple

import llvmlite.ir as ir

from ...ir import dtype as _dt
from ...ir.expr import Buffer
from ...ir.names import identifier

# ---------------------------------------------------------------------------------------
# types

_I1 = ir.IntType(1)
_I8 = ir.IntType(8)
_I16 = ir.IntType(16)
_I32 = ir.IntType(32)
_I64 = ir.IntType(64)
_F16 = ir.HalfType()
_F32 = ir.FloatType()
_F64 = ir.DoubleType()
_PTR = ir.PointerType()

#: register (compute) type of each dtype: float16 computes in float32, bool is i1
_REG = {"bool": _I1, "int8": _I8, "uint8": _I8, "int16": _I16, "int32": _I32, "int64": _I64,
        "float16": _F32, "bfloat16": _F32, "float32": _F32, "float64": _F64}
#: memory type of each dtype: bool is a byte (numpy's layout), float16 is half, bfloat16
#: the upper 16 bits of a float32 (converted by integer code: no bfloat instruction needed)
_MEM = {"bool": _I8, "int8": _I8, "uint8": _I8, "int16": _I16, "int32": _I32, "int64": _I64,
        "float16": _F16, "bfloat16": _I16, "float32": _F32, "float64": _F64}
_SIZE = {"bool": 1, "int8": 1, "uint8": 1, "int16": 2, "int32": 4, "int64": 8,
         "float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}

#: bytes of each LLVM element type
_IR_SIZE = {_MEM[d]: _SIZE[d] for d in _MEM}


def _unsigned(dtype: str) -> bool:
    return dtype == "bool" or _dt.is_uint(dtype)


def _wrap_signed(v: int, bits: int) -> int:
    v &= (1 << bits) - 1
    if v >= 1 << (bits - 1):
        v -= 1 << bits
    return v


def _with_lanes(scalar_ty, like):
    """``scalar_ty``, or a vector of it with as many lanes as the type ``like``."""
    if isinstance(like, ir.VectorType):
        return ir.VectorType(scalar_ty, like.count)
    return scalar_ty


def _operand_key(v):
    """A hashable identity of an LLVM operand: scalar integer constants by value (they are
    built afresh at each use), everything else by object (kept alive by the cache entry's
    instruction, which uses it)."""
    if _is_const(v):
        return (v.type.width, v.constant)
    return id(v)


def _is_const(v) -> bool:
    return isinstance(v, ir.Constant) and isinstance(v.type, ir.IntType) and \
        isinstance(v.constant, int)


def _i64_at(b: ir.IRBuilder, arr, w: int):
    """Pointer to the ``w``-th int64 of ``arr`` (an error record's words)."""
    return b.gep(arr, [ir.Constant(_I64, w)], source_etype=_I64)


def _sanitize(name: str) -> str:
    return identifier(name, "kernel", c=False)


# ---------------------------------------------------------------------------------------
# values


class Val:
    """The value of an IR expression in the current lane context.

    * uniform: ``s`` is a scalar LLVM value, the same in every lane (``step == 0``);
    * affine (integers only): lane ``l`` holds ``s + l*step``;
    * vector: ``v`` is an LLVM vector with one element per lane.
    Outside widened loops every value is uniform.
    """

    __slots__ = ("s", "step", "v")

    def __init__(self, s=None, step: int = 0, v=None):
        self.s = s
        self.step = step
        self.v = v

    @property
    def uniform(self) -> bool:
        return self.v is None and self.step == 0

    @property
    def lane_affine(self) -> bool:
        """Uniform or affine (no materialised vector)."""
        return self.v is None

    @property
    def type(self):
        return self.s.type if self.v is None else self.v.type.element

    def __repr__(self):  # pragma: no cover - debugging aid
        if self.v is not None:
            return f"Val(vec {self.v.type})"
        return f"Val({self.s.type}, step={self.step})"


@dataclass
class _Buf:
    """A buffer as the current function sees it."""

    buffer: Buffer
    ptr: object                 # ir.Value (ptr)
    strides: List[object]       # i64 ir.Values (ir.Constant when known)
    extents: List[object]       # i64 ir.Values (for bounds checks)

    @property
    def dtype(self) -> str:
        return self.buffer.dtype


# ---------------------------------------------------------------------------------------
# constants


def _int_const_value(value, width: int) -> int:
    if width == 1:
        return int(value) & 1
    return _wrap_signed(int(value), width)


class _Lit(ir.Constant):
    """A vector constant written in LLVM's short forms (``poison``, ``zeroinitializer``,
    ``splat (float 1.0)``) instead of llvmlite's element list: a 32-lane ``undef`` vector
    is 32 formatted elements, on every use, in text that LLVM then parses again."""

    def __init__(self, ty, text: str):
        super().__init__(ty, None)
        self.text = text

    def _get_reference(self):
        return self.text


_LITS: Dict[Tuple[str, str], _Lit] = {}


def _lit(ty, text: str) -> _Lit:
    """The shared constant for ``(ty, text)`` (it caches its own text).  The cache is
    emptied when it grows past 4096 entries: a process that builds kernels with ever new
    constants must not grow with them."""
    key = (str(ty), text)
    c = _LITS.get(key)
    if c is None:
        if len(_LITS) >= 4096:
            _LITS.clear()
        c = _LITS[key] = _Lit(ty, text)
    return c


def _poison(ty) -> _Lit:
    return _lit(ty, "poison")


def _piece(b: ir.IRBuilder, v, start: int, per: int):
    """Lanes ``start .. start + per - 1`` of vector ``v`` as a vector of ``per`` lanes
    (those past ``v``'s end repeat lane ``start``)."""
    n = v.type.count
    idx = [start + i if start + i < n else start for i in range(per)]
    return b.shuffle_vector(v, _poison(v.type), ir.Constant(
        ir.VectorType(ir.IntType(32), per), [ir.Constant(ir.IntType(32), i) for i in idx]))


def _join_pieces(b: ir.IRBuilder, pieces: list, n: int):
    """The vector of the first ``n`` lanes of ``pieces`` (vectors of one type) laid end to
    end: joined in pairs (a count that is not a power of two padded with poison pieces),
    then cut to ``n``."""
    pieces = list(pieces)
    while len(pieces) & (len(pieces) - 1):
        pieces.append(_poison(pieces[0].type))
    while len(pieces) > 1:
        w = pieces[0].type.count
        idx = ir.Constant(ir.VectorType(ir.IntType(32), 2 * w),
                          [ir.Constant(ir.IntType(32), i) for i in range(2 * w)])
        pieces = [b.shuffle_vector(pieces[i], pieces[i + 1], idx)
                  for i in range(0, len(pieces), 2)]
    whole = pieces[0]
    if whole.type.count == n:
        return whole
    return b.shuffle_vector(whole, _poison(whole.type), ir.Constant(
        ir.VectorType(ir.IntType(32), n), [ir.Constant(ir.IntType(32), i) for i in range(n)]))


def _lookup_lanes(b: ir.IRBuilder, table, idx):
    """``table[idx & (n - 1)]``, ``table`` n = 16 or 32 float32 values (Python floats),
    for an int32 scalar or each lane of an int32 vector ``idx``, one element read at a
    time (the targets' table instructions give the same values:
    ``X86Policy.vector_op``)."""
    n = len(table)
    tab = ir.Constant(ir.VectorType(ir.FloatType(), n), list(table))
    i32 = ir.IntType(32)
    if not isinstance(idx.type, ir.VectorType):
        return b.extract_element(tab, b.and_(idx, ir.Constant(i32, n - 1)))
    out = _poison(ir.VectorType(ir.FloatType(), idx.type.count))
    for lane in range(idx.type.count):
        k = b.and_(b.extract_element(idx, ir.Constant(i32, lane)), ir.Constant(i32, n - 1))
        out = b.insert_element(out, b.extract_element(tab, k), ir.Constant(i32, lane))
    return out


def _splat_const(vty, c) -> _Lit:
    """The vector of type ``vty`` with every element the scalar constant ``c``."""
    return _lit(vty, f"splat ({c.type} {c.get_reference()})")


def _splat(ty, value):
    """A constant of type ``ty`` (scalar or vector) with every element ``value``."""
    if isinstance(ty, ir.VectorType):
        el = ty.element
        if isinstance(el, ir.IntType):
            value = _int_const_value(value, el.width)
        return _splat_const(ty, ir.Constant(el, value))
    if isinstance(ty, ir.IntType):
        value = _int_const_value(value, ty.width)
    return ir.Constant(ty, value)
