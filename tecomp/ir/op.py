"""Constructors of expressions with dtype checking and light constant folding.

Folding here is only what keeps shape and index arithmetic tidy (``1 * x -> x``,
``0 + x -> x``, two integer constants -> one constant); the simplifier does the rest.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import DTypeError, ExprError, ShapeError
from . import dtype as _dt
from .expr import (
    SERVICES, EQ, GE, GT, LE, LT, NE, Add, And, Call, Cast, Const, Div, Expr, FloorDiv, FloorMod,
    INTRINSICS, Max, Min, Mul, Or, Select, Sub, TruncDiv, TruncMod, _literal_in_range,
    as_expr,
)

_OPNAME = {"+": "addition", "-": "subtraction", "*": "multiplication", "/": "division",
           "//": "floor division", "%": "modulo"}


def _operands(a, b, what: str):
    """Convert a, b to expressions; Python literals adopt the other side's dtype."""
    if isinstance(a, Expr) or not isinstance(b, Expr):
        ea = as_expr(a)
        eb = _literal_like(b, ea)
    else:
        eb = as_expr(b)
        ea = _literal_like(a, eb)
    if ea.dtype == eb.dtype:
        return ea, eb, ea.dtype
    # the message (which prints both operands) is only built when the dtypes differ
    return ea, eb, _dt.promote(ea.dtype, eb.dtype, f"the operands of {what} `{ea}` and `{eb}`")


def _literal_like(x, other: Expr) -> Expr:
    """``x`` as an expression, a Python number taking ``other``'s dtype; an integer that
    dtype cannot hold raises, naming ``other`` in the fix."""
    try:
        return as_expr(x, other.dtype)
    except DTypeError:
        if isinstance(x, (int, float)) and _dt.is_int(other.dtype) and float(x) == int(x):
            text = str(other)
            _literal_in_range(int(x), other.dtype,
                              operand=text if text.isidentifier() else f"({text})")
        raise


def _wrap(v: int, dtype: str) -> int:
    b = _dt.bits(dtype)
    v &= (1 << b) - 1
    if not _dt.is_uint(dtype) and v >= (1 << (b - 1)):
        v -= 1 << b
    return v


#: the comparison node types and what each computes on two values
COMPARE = {LT: lambda a, b: a < b, LE: lambda a, b: a <= b, GT: lambda a, b: a > b,
           GE: lambda a, b: a >= b, EQ: lambda a, b: a == b, NE: lambda a, b: a != b}


def compare_values(t, a, b) -> bool:
    """``a <t> b`` for a comparison node type ``t`` (``LT``, ``EQ``, ...) on two values."""
    return COMPARE[t](a, b)


def binary(op: str, a, b) -> Expr:
    """Build ``a <op> b`` for op in + - * / // %."""
    a, b, dt = _operands(a, b, _OPNAME[op])
    if _dt.is_bool(dt):
        raise ExprError(f"{_OPNAME[op]} of bool expressions `{a}` and `{b}`; use & | ~ for logic "
                        "or .astype('int32') for arithmetic")
    a, b = widen(a, dt), widen(b, dt)
    if op == "+":
        return add(a, b)
    if op == "-":
        return sub(a, b)
    if op == "*":
        return mul(a, b)
    if op == "/":
        if _dt.is_int(dt):
            raise ExprError(
                f"`/` on integer expressions `{a}` and `{b}` is ambiguous; use `//` (floor "
                "division, as Python), tc.truncdiv (round toward zero, as C), or convert to "
                "float with .astype('float32') for true division")
        return Div(a, b, dt)
    if op == "//":
        return floordiv(a, b) if _dt.is_int(dt) else Call("floor", (Div(a, b, dt),), dt)
    if op == "%":
        if _dt.is_int(dt):
            return floormod(a, b)
        return Sub(a, Mul(b, Call("floor", (Div(a, b, dt),), dt), dt), dt)
    raise ExprError(f"unknown operator {op}")


def _ci(e):
    return e.value if isinstance(e, Const) and _dt.is_int(e.dtype) else None


def widen(e: Expr, dtype: str) -> Expr:
    """``e`` as ``dtype``, the promoted dtype of an operation it takes part in: an integer
    constant is retyped (``5`` as int64 is ``5i64``), anything else cast."""
    if e.dtype == dtype:
        return e
    if isinstance(e, Const) and _dt.is_int(e.dtype) and _dt.is_int(dtype):
        return Const(int(e.value), dtype)
    return Cast(e, dtype)


def _index_const(v: int, dtype: str) -> Const:
    """The constant ``v``, the exact result of index arithmetic on constants of
    ``dtype``: in ``dtype`` where it fits, else int64 (a shape of 65536 x 65537 has
    4295032832 elements, not the int32 wrap of it)."""
    lo, hi = _dt.int_limits(dtype)
    if lo <= v <= hi:
        return Const(v, dtype)
    if -(2**63) <= v < 2**63:
        return Const(v, "int64")
    raise ShapeError(f"the index arithmetic {v} does not fit int64: no tecomp array or loop "
                     f"is that large; use smaller shapes")


def index_add(a, b) -> Expr:
    """``a + b`` of index expressions (extents, strides, offsets): as :func:`add`, but two
    constants add exactly, widening to int64 where their dtype cannot hold the sum."""
    a, b = _same_int(as_expr(a), as_expr(b))
    ca, cb = _ci(a), _ci(b)
    if ca is not None and cb is not None:
        return _index_const(ca + cb, a.dtype)
    return add(a, b)


def index_sub(a, b) -> Expr:
    """``a - b`` of index expressions, constants exactly (see :func:`index_add`)."""
    a, b = _same_int(as_expr(a), as_expr(b))
    ca, cb = _ci(a), _ci(b)
    if ca is not None and cb is not None:
        return _index_const(ca - cb, a.dtype)
    return sub(a, b)


def index_mul(a, b) -> Expr:
    """``a * b`` of index expressions, constants exactly (see :func:`index_add`)."""
    a, b = _same_int(as_expr(a), as_expr(b))
    ca, cb = _ci(a), _ci(b)
    if ca is not None and cb is not None:
        return _index_const(ca * cb, a.dtype)
    return mul(a, b)


def _same_int(a: Expr, b: Expr):
    """``a`` and ``b`` in one dtype: integers of different widths are widened to the
    promoted type (``int32 + int64`` computes in int64, as C and TVM do), so every node
    built here has operands of its own dtype."""
    if a.dtype != b.dtype and _dt.is_int(a.dtype) and _dt.is_int(b.dtype):
        dt = _dt.promote(a.dtype, b.dtype)
        return widen(a, dt), widen(b, dt)
    return a, b


def add(a: Expr, b: Expr) -> Expr:
    a, b = _same_int(as_expr(a), as_expr(b))
    ca, cb = _ci(a), _ci(b)
    if ca is not None and cb is not None and a.dtype == b.dtype:
        return Const(_wrap(ca + cb, a.dtype), a.dtype)
    if ca == 0 and a.dtype == b.dtype:
        return b
    if cb == 0 and a.dtype == b.dtype:
        return a
    return Add(a, b, _dt.promote(a.dtype, b.dtype))


def sub(a: Expr, b: Expr) -> Expr:
    a, b = _same_int(as_expr(a), as_expr(b))
    ca, cb = _ci(a), _ci(b)
    if ca is not None and cb is not None and a.dtype == b.dtype:
        return Const(_wrap(ca - cb, a.dtype), a.dtype)
    if cb == 0 and a.dtype == b.dtype:
        return a
    return Sub(a, b, _dt.promote(a.dtype, b.dtype))


def mul(a: Expr, b: Expr) -> Expr:
    a, b = _same_int(as_expr(a), as_expr(b))
    ca, cb = _ci(a), _ci(b)
    if ca is not None and cb is not None and a.dtype == b.dtype:
        return Const(_wrap(ca * cb, a.dtype), a.dtype)
    if ca == 1 and a.dtype == b.dtype:
        return b
    if cb == 1 and a.dtype == b.dtype:
        return a
    return Mul(a, b, _dt.promote(a.dtype, b.dtype))


#: a constant divisor past this makes :func:`ceildiv` ``(a - 1) // b + 1``
BIG_DIVISOR = 1 << 16


def ceildiv(a, b) -> Expr:
    """``ceil(a / b)`` of integer (index) expressions, ``b > 0``: constants are divided
    exactly (an extent near the top of int32 does not wrap), else ``(a + b - 1) // b``,
    or for a big constant ``b`` (a split by 2**31 - 1) ``(a - 1) // b + 1``, the same
    value, which does not pass int32 where ``a + b - 1`` would for any ``a`` past 1."""
    a, b = _same_int(as_expr(a), as_expr(b))
    ca, cb = _ci(a), _ci(b)
    if ca is not None and cb is not None and cb > 0:
        return _index_const(-(-ca // cb), a.dtype)
    if cb is not None and cb > BIG_DIVISOR:
        return add(floordiv(sub(a, Const(1, a.dtype)), b), Const(1, a.dtype))
    return floordiv(add(a, sub(b, Const(1, b.dtype))), b)


def floordiv(a, b) -> Expr:
    a, b = _same_int(as_expr(a), as_expr(b))
    ca, cb = _ci(a), _ci(b)
    if ca is not None and cb not in (None, 0) and a.dtype == b.dtype:
        return Const(ca // cb, a.dtype)
    if cb == 1:
        return a
    return FloorDiv(a, b, _dt.promote(a.dtype, b.dtype))


def floormod(a, b) -> Expr:
    a, b = _same_int(as_expr(a), as_expr(b))
    ca, cb = _ci(a), _ci(b)
    if ca is not None and cb not in (None, 0) and a.dtype == b.dtype:
        return Const(ca % cb, a.dtype)
    if cb == 1:
        return Const(0, a.dtype)
    return FloorMod(a, b, _dt.promote(a.dtype, b.dtype))


def _int_div_operands(a, b, what):
    a, b, dt = _operands(a, b, what)
    if not _dt.is_int(dt):
        raise ExprError(f"{what} needs integer operands, got {dt} `{a}` and `{b}`")
    return widen(a, dt), widen(b, dt), dt


def truncdiv(a: Expr | int, b: Expr | int) -> Expr:
    """Integer division rounding toward zero (C semantics).

    Python's ``//`` on integer expressions is floor division (:func:`floordiv`).

    Parameters
    ----------
    a, b : Expr or int
        Integer expressions (promoted to one dtype).

    Returns
    -------
    Expr
        ``a / b`` rounded toward zero.

    Raises
    ------
    ExprError
        For non-integer operands.

    Examples
    --------
    >>> import tecomp as tc
    >>> A = tc.placeholder((8,), dtype="int32", name="A")
    >>> B = tc.compute((8,), lambda i: tc.truncdiv(A[i], 3), name="B")
    """
    a, b, dt = _int_div_operands(a, b, "truncdiv")
    ca, cb = _ci(a), _ci(b)
    if ca is not None and cb not in (None, 0):
        return Const(int(ca / cb) if abs(ca) < 2**52 else (abs(ca) // abs(cb)) * (1 if (ca < 0) == (cb < 0) else -1), dt)
    return TruncDiv(a, b, dt)


def truncmod(a: Expr | int, b: Expr | int) -> Expr:
    """Remainder of :func:`truncdiv`: has the sign of the dividend (C semantics).

    Parameters
    ----------
    a, b : Expr or int
        Integer expressions (promoted to one dtype).

    Returns
    -------
    Expr
        ``a - b * truncdiv(a, b)``.

    Raises
    ------
    ExprError
        For non-integer operands.
    """
    a, b, dt = _int_div_operands(a, b, "truncmod")
    ca, cb = _ci(a), _ci(b)
    if ca is not None and cb not in (None, 0):
        return Const(int(math.fmod(ca, cb)), dt)
    return TruncMod(a, b, dt)


def floordiv_checked(a: Expr | int, b: Expr | int) -> Expr:
    """Integer division rounding toward minus infinity (``tc.floordiv``; Python's ``//``).

    The same as ``a // b`` on integer expressions; TVM's ``tir.floordiv`` spelling.

    Parameters
    ----------
    a, b : Expr or int
        Integer expressions (promoted to one dtype).

    Returns
    -------
    Expr
        ``floor(a / b)``.

    Raises
    ------
    ExprError
        For non-integer operands (``//`` of floats is ``floor(a / b)``: write that).

    Examples
    --------
    >>> import tecomp as tc
    >>> A = tc.placeholder((8,), dtype="int32", name="A")
    >>> B = tc.compute((8,), lambda i: tc.floordiv(A[i], 3), name="B")
    """
    a, b, _ = _int_div_operands(a, b, "floordiv")
    return floordiv(a, b)


def floormod_checked(a: Expr | int, b: Expr | int) -> Expr:
    """Remainder of :func:`floordiv` (``tc.floormod``; Python's ``%``): has the sign of ``b``.

    Parameters
    ----------
    a, b : Expr or int
        Integer expressions (promoted to one dtype).

    Returns
    -------
    Expr
        ``a - b * floordiv(a, b)``.

    Raises
    ------
    ExprError
        For non-integer operands.
    """
    a, b, _ = _int_div_operands(a, b, "floormod")
    return floormod(a, b)


def minimum(a: Expr | int | float, b: Expr | int | float) -> Expr:
    """The elementwise minimum of two expressions (``tc.minimum``; also ``tc.min(a, b)``).

    Parameters
    ----------
    a, b : Expr or int or float
        The operands; their dtypes are promoted to one (a Python number takes the other
        side's).

    Returns
    -------
    Expr
        The smaller of ``a`` and ``b``.

    Examples
    --------
    >>> import tecomp as tc
    >>> A = tc.placeholder((8,), name="A")
    >>> B = tc.compute((8,), lambda i: tc.minimum(A[i], 0.0), name="B")
    """
    a, b, dt = _operands(a, b, "min")
    return Min(widen(a, dt), widen(b, dt), dt)


def maximum(a: Expr | int | float, b: Expr | int | float) -> Expr:
    """The elementwise maximum of two expressions (``tc.maximum``; also ``tc.max(a, b)``).

    Parameters
    ----------
    a, b : Expr or int or float
        The operands; their dtypes are promoted to one (a Python number takes the other
        side's).

    Returns
    -------
    Expr
        The larger of ``a`` and ``b``.

    Examples
    --------
    >>> import tecomp as tc
    >>> A = tc.placeholder((8,), name="A")
    >>> B = tc.compute((8,), lambda i: tc.maximum(A[i], 0.0), name="B")
    """
    a, b, dt = _operands(a, b, "max")
    return Max(widen(a, dt), widen(b, dt), dt)


def compare(cls, a, b) -> Expr:
    names = {LT: "<", LE: "<=", GT: ">", GE: ">=", EQ: "==", NE: "!="}
    a, b, dt = _operands(a, b, f"comparison {names[cls]}")
    a, b = widen(a, dt), widen(b, dt)
    return cls(a, b)


def _as_bool(x, what):
    if isinstance(x, (bool, np.bool_)):
        raise ExprError(
            f"{what} got the Python bool {bool(x)}, not a condition on the computation: a "
            f"comparison was evaluated in Python (between Python numbers, or with `is`/`in`/"
            f"`and`/`or`/`not`, which Python cannot overload) before tecomp saw it; build it "
            f"from expressions (`i == 0`, `tc.all(i >= 1, j < n)`, `&`, `|`, `~`), or leave a "
            f"condition that is always {bool(x)} out")
    e = as_expr(x)
    if not _dt.is_bool(e.dtype):
        raise ExprError(f"{what} needs bool conditions, got {e.dtype} expression `{e}`; "
                        "compare it, e.g. `x > 0`")
    return e


def logic(cls, a, b) -> Expr:
    what = "& (logical and)" if cls is And else "| (logical or)"
    return cls(_as_bool(a, what), _as_bool(b, what))


def all_(*conds: Expr) -> Expr:
    """Logical and of any number of conditions (``tc.all``).

    Parameters
    ----------
    *conds : Expr
        Bool expressions, or one list or tuple of them.  None at all gives ``True``.

    Returns
    -------
    Expr
        A bool expression.

    Raises
    ------
    ExprError
        For a condition that is not a bool expression (or a Python bool, evaluated
        before tecomp saw it).

    Examples
    --------
    >>> import tecomp as tc
    >>> i = tc.var("i")
    >>> inside = tc.all(i >= 1, i < 9)
    """
    if len(conds) == 1 and isinstance(conds[0], (list, tuple)):
        conds = tuple(conds[0])
    if not conds:
        return Const(True, "bool")
    out = _as_bool(conds[0], "tc.all")
    for c in conds[1:]:
        out = And(out, _as_bool(c, "tc.all"))
    return out


def any_(*conds: Expr) -> Expr:
    """Logical or of any number of conditions (``tc.any``).

    Parameters
    ----------
    *conds : Expr
        Bool expressions, or one list or tuple of them.  None at all gives ``False``.

    Returns
    -------
    Expr
        A bool expression.

    Raises
    ------
    ExprError
        For a condition that is not a bool expression.
    """
    if len(conds) == 1 and isinstance(conds[0], (list, tuple)):
        conds = tuple(conds[0])
    if not conds:
        return Const(False, "bool")
    out = _as_bool(conds[0], "tc.any")
    for c in conds[1:]:
        out = Or(out, _as_bool(c, "tc.any"))
    return out


def if_then_else(cond, t, f) -> Expr:
    """``cond ? t : f``, evaluating only the chosen side (so it may guard a load)."""
    c = _as_bool(cond, "tc.if_then_else")
    a, b, dt = _operands(t, f, "tc.if_then_else")
    return Select(c, widen(a, dt), widen(b, dt), dt)


def call(op: str, *args) -> Expr:
    """Apply the math intrinsic ``op``."""
    n = INTRINSICS.get(op)
    if n is None:
        raise ExprError(f"unknown intrinsic {op!r}; known: {', '.join(sorted(INTRINSICS))}")
    if len(args) != n:
        raise ExprError(f"tc.{op} takes {n} argument(s), got {len(args)}")
    if n == 2:
        a, b, dt = _operands(args[0], args[1], f"tc.{op}")
        es = (a if a.dtype == dt else Cast(a, dt), b if b.dtype == dt else Cast(b, dt))
    elif n == 3:
        a, b, dt = _operands(args[0], args[1], f"tc.{op}")
        _, c, dt = _operands(Cast(a, dt) if a.dtype != dt else a, args[2], f"tc.{op}")
        es = tuple(x if x.dtype == dt else Cast(x, dt) for x in (a, b, c))
    else:
        es = (as_expr(args[0]),)
        dt = es[0].dtype
    if op == "abs":
        if _dt.is_bool(dt):
            raise ExprError("tc.abs of a bool expression")
        return Call(op, es, dt)
    if not _dt.is_float(dt):
        raise DTypeError(f"tc.{op} needs a float argument, got {dt} expression `{es[0]}`; "
                         f"convert it with .astype('float32')")
    return Call(op, es, dt)


def power(a, b) -> Expr:
    """``a ** b`` on expressions: ``tc.pow(a, b)`` for float operands (a Python number
    taking the other side's dtype, so ``x ** 2`` is ``x * x``); an integer power is an
    error that says how to write it."""
    ea, eb, dt = _operands(a, b, "`**`")
    if not _dt.is_float(dt):
        raise DTypeError(
            f"`({ea}) ** ({eb})`: `**` is tc.pow, which needs float operands, got {dt}; "
            f"convert with .astype('float32') (or, for an integer power of an integer, "
            f"write the products: x * x * x)")
    return call("pow", ea, eb)


# what expressions and statements use from this module (tecomp.ir.expr.SERVICES)
SERVICES.power = power
SERVICES.binary = binary
SERVICES.compare = compare
SERVICES.logic = logic
SERVICES.mul = index_mul   # (Buffer.row_major_strides: index arithmetic)
