"""Expression nodes of the loop IR (and the few TE-level nodes lowering removes).

Every node is an immutable dataclass: structural equality and hashing come for free
and rewrite rules can use ``match``.  ``Var``, ``IterVar``, ``Buffer`` and
``CommReducer`` have *identity* semantics: two ``Var("i")`` are different variables.

Semantics, stated once:

* Integer arithmetic wraps on overflow (two's complement), as LLVM's ``add``/``mul``.
* ``FloorDiv``/``FloorMod`` round toward negative infinity (Python's ``//`` and ``%``);
  ``TruncDiv``/``TruncMod`` round toward zero (C's ``/`` and ``%``).  ``MIN // -1``
  wraps to ``MIN`` (and ``MIN % -1`` is 0).  Integer division by zero is undefined:
  the reference interpreter raises, the CPU backend gives 0 rather than trapping.
* ``Div`` is true division and exists for floats only.
* ``Select`` is *lazy*: only the chosen operand is evaluated, so it may guard a load
  that would be out of bounds (``tc.if_then_else(i >= 1, A[i - 1], 0)``).
* ``Cast`` from float to int truncates toward zero; from wider to narrower int wraps;
  to ``bool`` tests ``!= 0``.
* float16 is a storage type: loads widen to float32, stores narrow (round to nearest
  even); a float16 ``Const`` or ``Cast`` rounds to half precision, then computes in
  float32.
* ``Call`` is a pure math intrinsic (``exp``, ``log``, ...) applied elementwise.
* Comparisons and ``And``/``Or``/``Not`` produce ``bool``; ``And``/``Or`` evaluate
  both operands (they are pure).
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Any, Optional, Tuple

from ..errors import DTypeError, ExprError, InternalError, ShapeError
from . import dtype as _dt


class _Services:
    """What expressions need from the modules built on this one: the printer
    (``to_str``), the expression builders of :mod:`.op` (``binary``, ``power``,
    ``compare``, ``logic``, ``mul``) and the walks of :mod:`.functor` (``substitute``,
    ``free_vars``).  Each of those modules registers its functions here when it loads
    (``tecomp.ir`` imports them all), so this module imports none of them: the IR's
    modules form no import cycle (``python -m tecomp.testing.imports``)."""

    __slots__ = ("to_str", "binary", "power", "compare", "logic", "mul", "substitute",
                 "free_vars")

    def __getattr__(self, name):  # a slot not filled: the registering module never loaded
        raise InternalError(f"tecomp.ir.expr.SERVICES.{name} is not registered: import "
                            f"tecomp.ir (it loads the printer, op and functor modules); "
                            f"this is a tecomp bug")


#: see :class:`_Services`
SERVICES = _Services()


class Node:
    """Base of every IR node."""

    __slots__ = ()

    def __str__(self) -> str:
        return SERVICES.to_str(self)


class Expr(Node):
    """Base of expressions.  Arithmetic operators build new expressions.

    ``a == b`` and ``a != b`` build IR comparisons, as TVM's do:
    ``tc.if_then_else(i == 0, A[i], 0.0)`` is a first-row mask.  The result is a
    :class:`Comparison`, which stands for the ``EQ``/``NE`` node wherever an expression
    goes, and whose Python truth value is :func:`same_as` (so ``if a == b:``, ``x in
    list`` and dicts and sets of expressions keep comparing structurally).  Every other
    ``bool(expr)`` raises: a symbolic condition has no truth value in Python; use
    ``tc.if_then_else`` or ``tc.all``.
    """

    __slots__ = ()
    dtype: str

    # arithmetic -------------------------------------------------------------
    def __add__(self, o):
        return _make_arith("+", self, o)

    def __radd__(self, o):
        return _make_arith("+", o, self)

    def __sub__(self, o):
        return _make_arith("-", self, o)

    def __rsub__(self, o):
        return _make_arith("-", o, self)

    def __mul__(self, o):
        return _make_arith("*", self, o)

    def __rmul__(self, o):
        return _make_arith("*", o, self)

    def __truediv__(self, o):
        return _make_arith("/", self, o)

    def __rtruediv__(self, o):
        return _make_arith("/", o, self)

    def __floordiv__(self, o):
        return _make_arith("//", self, o)

    def __rfloordiv__(self, o):
        return _make_arith("//", o, self)

    def __mod__(self, o):
        return _make_arith("%", self, o)

    def __rmod__(self, o):
        return _make_arith("%", o, self)

    def __pow__(self, o):   # tc.pow (float operands)
        return SERVICES.power(self, o)

    def __rpow__(self, o):
        return SERVICES.power(o, self)

    def __neg__(self):
        if _dt.is_bool(self.dtype):
            _bad_bool_arith("-")
        # a float's negation subtracts from -0.0: -(+0.0) is -0.0 (IEEE's negation, as
        # numpy's and PyTorch's); 0.0 - x would give +0.0
        zero = Const(-0.0, self.dtype) if _dt.is_float(self.dtype) else Const(0, self.dtype)
        return _make_arith("-", zero, self)

    def __pos__(self):
        return self

    # comparisons ------------------------------------------------------------
    def __lt__(self, o):
        return _make_cmp(LT, self, o)

    def __le__(self, o):
        return _make_cmp(LE, self, o)

    def __gt__(self, o):
        return _make_cmp(GT, self, o)

    def __ge__(self, o):
        return _make_cmp(GE, self, o)

    def equal(self, o) -> "Expr":
        """The boolean expression ``self == o`` (the same as ``tc.eq(self, o)``)."""
        return _make_cmp(EQ, self, o)

    def not_equal(self, o) -> "Expr":
        """The boolean expression ``self != o`` (the same as ``tc.ne(self, o)``)."""
        return _make_cmp(NE, self, o)

    def same_as(self, o) -> bool:
        """Structural equality (:func:`same_as`): what ``==`` gives in ``if a == b:``."""
        return same_as(self, o)

    # logic -------------------------------------------------------------------
    def __and__(self, o):
        return _make_logic(And, self, o)

    def __rand__(self, o):
        return _make_logic(And, o, self)

    def __or__(self, o):
        return _make_logic(Or, self, o)

    def __ror__(self, o):
        return _make_logic(Or, o, self)

    def __invert__(self):
        if not _dt.is_bool(self.dtype):
            raise ExprError(f"~ needs a bool expression, got {self.dtype} expression {self}")
        return Not(self)

    def __bool__(self):
        raise ExprError(
            f"the truth value of the symbolic expression `{self}` is unknown in Python; "
            "use tc.if_then_else(cond, a, b) for a value, tc.all(...)/tc.any(...) or & | "
            "to combine conditions, and where= to restrict a reduction"
        )

    def __int__(self):
        raise ExprError(
            f"`{self}` is a symbolic {self.dtype} expression, not a constant, so it has no "
            f"Python value: bind its variables when the kernel is called, or use "
            f"tc.utils.get_const_tuple(shape), which keeps symbolic extents as expressions")

    __index__ = __int__

    def __float__(self):
        raise ExprError(
            f"`{self}` is a symbolic {self.dtype} expression, not a constant, so it has no "
            f"Python value")

    def astype(self, dtype) -> "Expr":
        """Convert to ``dtype`` (see the module doc for the conversion rules)."""
        d = _dt.canon(dtype)
        if d == self.dtype:
            return self
        return Cast(self, d)


# ---------------------------------------------------------------------------------
# leaves


@dataclass(frozen=True, slots=True)
class Const(Expr):
    """A constant of ``dtype``; ``value`` is a Python int, float or bool."""

    value: Any
    dtype: str = "int32"

    # int(C.shape[0]), range(C.shape[0]), np.zeros(C.shape): a constant extent is its value
    def __int__(self):
        if _dt.is_int(self.dtype) or _dt.is_bool(self.dtype):
            return int(self.value)
        raise ExprError(f"int() of the {self.dtype} constant {self.value!r}: only integer "
                        f"constants convert; use float(...), or round it in the expression")

    __index__ = __int__

    def __float__(self):
        return float(self.value)


@dataclass(frozen=True, slots=True, eq=False, weakref_slot=True)
class Var(Expr):
    """A scalar variable (loop counter, symbolic extent, scalar parameter).

    Identity semantics: two ``Var("i")`` are different variables.  Users make them with
    :func:`tecomp.var`.

    Parameters
    ----------
    name : str
        The variable's name in the IR.
    dtype : str, optional
        Its dtype, ``"int32"`` by default.
    """

    name: str
    dtype: str = "int32"

    __eq__ = object.__eq__
    __hash__ = object.__hash__

    def __repr__(self):
        return f"Var({self.name!r}, {self.dtype!r})"


# ---------------------------------------------------------------------------------
# arithmetic


@dataclass(frozen=True, slots=True)
class BinaryOp(Expr):
    a: Expr
    b: Expr
    dtype: str


@dataclass(frozen=True, slots=True)
class Add(BinaryOp):
    """a + b"""


@dataclass(frozen=True, slots=True)
class Sub(BinaryOp):
    """a - b"""


@dataclass(frozen=True, slots=True)
class Mul(BinaryOp):
    """a * b"""


@dataclass(frozen=True, slots=True)
class Div(BinaryOp):
    """a / b, true division, floats only."""


@dataclass(frozen=True, slots=True)
class FloorDiv(BinaryOp):
    """Integer division rounding toward negative infinity (Python ``//``)."""


@dataclass(frozen=True, slots=True)
class FloorMod(BinaryOp):
    """Remainder of FloorDiv: has the sign of the divisor (Python ``%``)."""


@dataclass(frozen=True, slots=True)
class TruncDiv(BinaryOp):
    """Integer division rounding toward zero (C ``/``)."""


@dataclass(frozen=True, slots=True)
class TruncMod(BinaryOp):
    """Remainder of TruncDiv: has the sign of the dividend (C ``%``)."""


@dataclass(frozen=True, slots=True)
class Min(BinaryOp):
    """min(a, b).  For floats, NaN propagates (as numpy's ``minimum``); which zero
    ``min(0.0, -0.0)`` returns is unspecified."""


@dataclass(frozen=True, slots=True)
class Max(BinaryOp):
    """max(a, b).  For floats, NaN propagates (as numpy's ``maximum``); which zero
    ``max(0.0, -0.0)`` returns is unspecified."""


# ---------------------------------------------------------------------------------
# comparisons and logic (result dtype bool)


@dataclass(frozen=True, slots=True)
class CmpOp(Expr):
    a: Expr
    b: Expr
    dtype: str = "bool"


@dataclass(frozen=True, slots=True)
class EQ(CmpOp):
    """a == b"""


@dataclass(frozen=True, slots=True)
class NE(CmpOp):
    """a != b"""


@dataclass(frozen=True, slots=True)
class LT(CmpOp):
    """a < b"""


@dataclass(frozen=True, slots=True)
class LE(CmpOp):
    """a <= b"""


@dataclass(frozen=True, slots=True)
class GT(CmpOp):
    """a > b"""


@dataclass(frozen=True, slots=True)
class GE(CmpOp):
    """a >= b"""


@dataclass(frozen=True, slots=True)
class And(Expr):
    """Logical and of two bool expressions (both are evaluated)."""

    a: Expr
    b: Expr
    dtype: str = "bool"


@dataclass(frozen=True, slots=True)
class Or(Expr):
    """Logical or of two bool expressions (both are evaluated)."""

    a: Expr
    b: Expr
    dtype: str = "bool"


@dataclass(frozen=True, slots=True)
class Not(Expr):
    a: Expr
    dtype: str = "bool"


# ---------------------------------------------------------------------------------
# others


@dataclass(frozen=True, slots=True)
class Select(Expr):
    """``cond ? true_value : false_value``.  Lazy: only the chosen operand is evaluated."""

    cond: Expr
    true_value: Expr
    false_value: Expr
    dtype: str


@dataclass(frozen=True, slots=True)
class Cast(Expr):
    """Convert ``value`` to ``dtype`` (rules in the module doc)."""

    value: Expr
    dtype: str


# The pure math intrinsics Call understands, with their arity.
INTRINSICS = {
    "exp": 1, "log": 1, "sqrt": 1, "rsqrt": 1, "tanh": 1, "sigmoid": 1, "erf": 1,
    "abs": 1, "floor": 1, "ceil": 1, "round": 1, "sin": 1, "cos": 1, "pow": 2,
    "fast_exp": 1, "fma": 3, "exp2": 1, "expm1": 1, "log2": 1, "log1p": 1, "softplus": 1,
    "tan": 1, "atan": 1, "atan2": 2, "cbrt": 1, "erfc": 1,
    "fast_erfc": 1, "fast_log": 1,
}
# Calls that are not math: statements in an Evaluate.
SPECIAL_CALLS = {"syncthreads": 0}


@dataclass(frozen=True, slots=True)
class Call(Expr):
    """A call of the intrinsic ``op`` (see ``INTRINSICS``) on ``args``.

    ``round`` rounds half to even (numpy's ``round``); ``abs`` of an int is an int;
    ``fma(a, b, c)`` is ``a * b + c`` rounded once (IEEE fusedMultiplyAdd);
    ``exp`` and ``fast_exp`` are the exponential up to a documented error: ``fast_exp``
    may be a faster approximation; on float32 the LLVM backend evaluates both with the
    same vector code, within 1 ulp (docs/numerics.md); ``fast_erfc`` and ``fast_log`` are
    ``erfc`` and ``log`` with looser bounds on float32 (docs/numerics.md).  ``syncthreads``
    is the GPU block barrier (an Evaluate only).
    """

    op: str
    args: Tuple[Expr, ...]
    dtype: str


@dataclass(frozen=True, slots=True)
class BufferLoad(Expr):
    """Read ``buffer[indices]``; one index per dimension, in elements."""

    buffer: "Buffer"
    indices: Tuple[Expr, ...]
    dtype: str


@dataclass(frozen=True, slots=True)
class Let(Expr):
    """``let var = value in body`` as an expression."""

    var: Var
    value: Expr
    body: Expr
    dtype: str


# ---------------------------------------------------------------------------------
# TE-level nodes: they appear in compute bodies and are removed by lowering.


@dataclass(frozen=True, slots=True)
class Range(Node):
    """The half-open integer range [min, min + extent)."""

    min: Expr
    extent: Expr

    @staticmethod
    def from_extent(extent) -> "Range":
        return Range(Const(0, "int32"), as_index(extent))


@dataclass(frozen=True, slots=True, eq=False)
class IterVar(Node):
    """An iteration variable of a compute: a ``Var`` with a domain and a kind.

    Identity semantics.  ``C.op.axis`` and ``C.op.reduce_axis`` hold a compute's;
    :func:`tecomp.reduce_axis` and :func:`tecomp.thread_axis` make them.

    Parameters
    ----------
    var : Var
        The variable.
    dom : Range or None
        Its range (``None`` for a thread axis the bound loop gives its range).
    kind : str, optional
        ``"data_par"`` (an output axis), ``"reduce"`` (a reduction axis),
        ``"thread"`` (a GPU thread axis from ``tc.thread_axis``) or ``"derived"`` (made
        by a schedule primitive).
    thread_tag : str, optional
        The thread tag of a thread axis (``"threadIdx.x"`` ...).
    """

    var: Var
    dom: Any  # Range or None (thread axes get their extent from what is bound)
    kind: str = "data_par"
    thread_tag: str = ""

    __eq__ = object.__eq__
    __hash__ = object.__hash__

    @property
    def name(self) -> str:
        return self.var.name

    def __repr__(self):
        dom = f", dom=[{self.dom.min}, {self.dom.min} + {self.dom.extent})" if self.dom else ""
        tag = f", tag={self.thread_tag}" if self.thread_tag else ""
        return f"IterVar({self.var.name}, {self.kind}{dom}{tag})"

    # An IterVar stands for its Var in expressions.
    def _as_expr(self) -> Var:
        return self.var


def _forward_to_var(name):
    def f(self, *args):
        return getattr(self.var, name)(*args)

    f.__name__ = name
    return f


# An IterVar used in arithmetic stands for its Var (``ry * 2``, ``k < 3``), as in TVM.
for _name in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__",
              "__truediv__", "__rtruediv__", "__floordiv__", "__rfloordiv__", "__mod__",
              "__rmod__", "__pow__", "__rpow__", "__neg__", "__lt__", "__le__", "__gt__",
              "__ge__", "equal",
              "not_equal", "astype", "__bool__", "__and__", "__rand__", "__or__", "__ror__",
              "__invert__"):
    setattr(IterVar, _name, _forward_to_var(_name))


@dataclass(frozen=True, slots=True, eq=False)
class CommReducer(Node):
    """A commutative reducer: ``combine(lhs, rhs) -> result`` with an identity element.

    ``lhs``/``rhs`` are Vars that ``result`` is written in; ``identity`` is an Expr.
    """

    name: str
    lhs: Var
    rhs: Var
    result: Expr
    identity: Expr

    __eq__ = object.__eq__
    __hash__ = object.__hash__

    def combine(self, a: Expr, b: Expr) -> Expr:
        return SERVICES.substitute(self.result, {self.lhs: a, self.rhs: b})


@dataclass(frozen=True, slots=True, eq=False)
class TupleCommReducer(Node):
    """A commutative reducer over tuples (argmax, or a sum and a sum of squares in one
    pass): ``combine(lhs, rhs) -> result`` element by element, each a tuple of the same
    length.  ``result[i]`` may read every element of ``lhs`` and ``rhs``."""

    name: str
    lhs: Tuple[Var, ...]
    rhs: Tuple[Var, ...]
    result: Tuple[Expr, ...]
    identity: Tuple[Expr, ...]
    #: the result where every element combined into ``lhs`` comes before every element
    #: of ``rhs`` in the row-major order of the reduction's axes (an argmax's first
    #: index among equal values decided without comparing the indices), or None.  The
    #: lowering uses it for a stage that reads the reduction's own elements and visits
    #: its reduce axes in that order (:func:`tecomp.schedule.relations.reduce_in_order`)
    in_order: Optional[Tuple[Expr, ...]] = None

    __eq__ = object.__eq__
    __hash__ = object.__hash__

    @property
    def arity(self) -> int:
        return len(self.result)

    @property
    def independent(self) -> bool:
        """Whether each element of the result reads only its own element of ``lhs`` and
        ``rhs`` (a sum and a sum of squares, not an argmax)."""
        fv = SERVICES.free_vars
        return all(set(fv(r)) <= {x, y} for r, x, y in zip(self.result, self.lhs, self.rhs))

    def combine(self, a, b, in_order: bool = False) -> tuple:
        """The combined tuple of the tuples ``a`` and ``b`` (every element computed from
        the old values: a caller storing them binds them first); ``in_order``: with
        :attr:`in_order` where there is one (``a`` holds elements before ``b``'s)."""
        vmap = {**dict(zip(self.lhs, a)), **dict(zip(self.rhs, b))}
        res = self.in_order if in_order and self.in_order is not None else self.result
        return tuple(SERVICES.substitute(r, vmap) for r in res)


@dataclass(frozen=True, slots=True)
class Reduce(Expr):
    """``combiner`` over ``source`` for every point of ``axis`` where ``condition`` holds.

    Only valid as the whole body of a compute; lowering turns it into an init store and
    an update loop nest.
    """

    combiner: CommReducer
    source: Expr
    axis: Tuple[IterVar, ...]
    condition: Expr
    dtype: str
    #: with a TupleCommReducer: which element of the tuple this output is (``source`` is
    #: that element's source; the other outputs of the same compute hold the others)
    value_index: int = 0


@dataclass(frozen=True, slots=True)
class ProducerLoad(Expr):
    """Read the TE tensor ``producer`` at ``indices`` (lowering makes it a BufferLoad)."""

    producer: Any
    indices: Tuple[Expr, ...]
    dtype: str

    def __getitem__(self, more):
        name = getattr(self.producer, "name", "?")
        raise ShapeError(f"{name}[{', '.join(str(i) for i in self.indices)}] indexes all "
                         f"{len(self.indices)} dimension(s) of tensor {name} already: it is a "
                         f"value, not a tensor; drop the extra [...]")


# ---------------------------------------------------------------------------------
# buffers


@dataclass(frozen=True, slots=True, eq=False)
class Buffer(Node):
    """A multi-dimensional array in memory.

    ``shape`` and ``strides`` (in elements) are tuples of int expressions; ``strides``
    of ``None`` means compact row-major.  ``scope`` is ``global`` (function arguments
    and heap allocations), ``local`` (registers / stack), or ``shared`` (GPU block
    shared memory).  Identity semantics.
    """

    name: str
    shape: Tuple[Expr, ...]
    dtype: str = "float32"
    strides: Any = None
    scope: str = "global"

    __eq__ = object.__eq__
    __hash__ = object.__hash__

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def row_major_strides(self) -> Tuple[Expr, ...]:
        mul = SERVICES.mul
        out = []
        acc: Expr = Const(1, "int32")
        for ext in reversed(self.shape):
            out.append(acc)
            acc = mul(acc, ext)
        return tuple(reversed(out))

    def effective_strides(self) -> Tuple[Expr, ...]:
        return tuple(self.strides) if self.strides is not None else self.row_major_strides()

    def __repr__(self):
        return f"Buffer({self.name!r}, {self.dtype}, ndim={len(self.shape)}, scope={self.scope})"


# ---------------------------------------------------------------------------------
# conversion of Python values


def as_expr(value, like: str | None = None) -> Expr:
    """Convert ``value`` to an Expr.  Python numbers take the dtype ``like`` when given."""
    if isinstance(value, Expr):
        return value
    if isinstance(value, IterVar):
        return value.var
    if hasattr(value, "_as_expr") and not isinstance(value, type):
        return value._as_expr()
    import numpy as np

    if isinstance(value, (bool, np.bool_)):
        return Const(bool(value), "bool")
    if isinstance(value, (int, np.integer)):
        v = int(value)
        if like is not None and _dt.is_float(like):
            return Const(float(v), like)
        if like is not None and _dt.is_int(like):
            return Const(_literal_in_range(v, like), like)
        if isinstance(value, np.integer):
            return Const(v, _dt.canon(value.dtype))
        return _int_literal(v)
    if isinstance(value, (float, np.floating)):
        v = float(value)
        if like is not None and _dt.is_float(like):
            return Const(v, like)
        if like is not None and _dt.is_int(like):
            if math.isfinite(v) and v == int(v):
                return Const(_literal_in_range(int(v), like), like)
            raise DTypeError(
                f"the float literal {v} cannot combine with a {like} expression; "
                f"convert the expression with .astype('float32') first"
            )
        if isinstance(value, np.floating):
            return Const(v, _dt.canon(value.dtype))
        return Const(v, "float32")
    raise ExprError(
        f"cannot use {value!r} (a {type(value).__name__}) in a tecomp expression; "
        "expected an expression, a tensor element T[i, j], an axis, or a Python number"
    )


def as_index(value) -> Expr:
    """Convert to an integer index expression (shapes, extents, indices).  A Python or
    numpy integer becomes an int32 constant where it fits int32, else int64 (as TVM
    types its index constants): ``2**31`` is ``2147483648i64``, never a wrapped int32."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool) \
            and not isinstance(value, Expr):
        return _int_literal(int(value), "an index or extent")
    e = as_expr(value, "int32" if not isinstance(value, Expr) else None)
    if not _dt.is_int(e.dtype):
        raise ExprError(f"an index or extent must be an integer expression, got {e.dtype} `{e}`")
    return e


def _literal_in_range(v: int, dtype: str, what: str = "", operand: str = "x") -> int:
    """``v``, which a Python literal gives to an expression of the integer ``dtype``; a
    value outside the dtype raises (as numpy's ``Python integer 300 out of bounds for
    int8``): tecomp never wraps a literal silently."""
    b = _dt.bits(dtype)
    lo, hi = _dt.int_limits(dtype)
    if lo <= v <= hi:
        return v
    wider = next((w for w in ("int16", "int32", "int64")
                  if _dt.bits(w) > b and -(1 << (_dt.bits(w) - 1)) <= v < 1 << (_dt.bits(w) - 1)),
                 None)
    fix = (f"convert the other operand first, e.g. {operand}.astype({wider!r}), or give the "
           f"constant as tc.const({v}, {wider!r})") if wider else \
        "no tecomp integer type holds it: use a smaller value"
    raise DTypeError(f"the Python integer {v} is out of bounds for {dtype} [{lo}, {hi}]"
                     f"{' (' + what + ')' if what else ''}: {fix}")


def _int_literal(v: int, what: str = "") -> Const:
    """A Python int with no other operand to adopt the dtype of: int32 where it fits,
    else int64."""
    if -(2**31) <= v < 2**31:
        return Const(v, "int32")
    return Const(_literal_in_range(v, "int64", what), "int64")


def _bad_bool_arith(op):
    raise ExprError(f"arithmetic `{op}` on a bool expression; convert it with .astype('int32') first")


def _make_arith(op: str, a, b):
    return SERVICES.binary(op, a, b)


def _make_cmp(cls, a, b):
    return SERVICES.compare(cls, a, b)


def _make_logic(cls, a, b):
    return SERVICES.logic(cls, a, b)


# ---------------------------------------------------------------------------------
# == and != : IR comparisons whose Python truth value is structural equality


def same_as(a, b, map_vars: bool = False) -> bool:
    """Structural equality of two IR values: the same node types with the same fields,
    where ``Var``, ``IterVar``, ``Buffer`` and reducers are equal only to themselves, and
    float constants compare bit for bit in sign (``0.0`` is not ``-0.0``).  What TVM calls
    ``structural_equal``; ``a == b`` on expressions builds an ``EQ`` node instead, whose
    truth value in Python is this.  (A loop, not a recursion: any depth.)

    ``map_vars=True``: equal up to the names of variables and buffers, as TVM's
    ``structural_equal(map_free_vars=True)``: each ``Var`` of ``a`` stands for one
    ``Var`` of ``b`` of the same dtype throughout, each ``Buffer`` for one of the same
    shape, dtype, layout and scope; NaN constants are equal."""
    if a is b:
        return True
    todo = [(a, b)]     # pairs still to compare, the next one last
    pop, push = todo.pop, todo.append
    fwd, back = {}, {}  # map_vars: the pairs of variables and buffers met so far
    while todo:
        a, b = pop()
        if a is b and not map_vars:
            continue
        t = type(a)
        if t is not type(b):
            if isinstance(a, Node) or isinstance(b, Node) or not _same_value(a, b):
                return False
            continue
        if isinstance(a, tuple):
            if len(a) != len(b):
                return False
            todo += reversed(tuple(zip(a, b)))
            continue
        params = getattr(t, "__dataclass_params__", None)
        if params is None or not isinstance(a, Node):
            if not _same_value(a, b) and not (map_vars and a != a and b != b):
                return False
            continue
        if not params.eq:           # identity semantics (Var, IterVar, Buffer, reducers)
            if not map_vars or t not in (Var, Buffer):
                if a is b:
                    continue
                return False
            if a in fwd or b in back:
                if fwd.get(a) is not b or back.get(b) is not a:
                    return False
                continue
            fwd[a], back[b] = b, a
            if t is Var:
                push((a.dtype, b.dtype))
            else:
                push(((a.dtype, a.scope) + a.shape + a.effective_strides(),
                      (b.dtype, b.scope) + b.shape + b.effective_strides()))
            continue
        for f in reversed(t.__dataclass_fields__):
            push((getattr(a, f), getattr(b, f)))
    return True


def _same_value(a, b) -> bool:
    """Python values inside nodes (a Const's value, a dtype, a name)."""
    r = a == b
    if r is True and isinstance(a, float) and isinstance(b, float) and a == 0.0:
        return math.copysign(1.0, a) == math.copysign(1.0, b)
    return bool(r)


def _comparable(o) -> bool:
    """Whether ``expr == o`` builds a comparison (otherwise Python's identity decides:
    ``expr == None`` is False)."""
    import numpy as np

    return isinstance(o, (Expr, IterVar, Comparison, int, float, np.number, np.bool_))


class Comparison:
    """What ``a == b`` and ``a != b`` give on expressions (TVM's ``EqualOp``).

    Wherever a tecomp expression goes (``tc.if_then_else``, ``tc.all``, ``&``, ``|``,
    ``~``, ``where=``, arithmetic, a compute's body) it is the IR node ``EQ(a, b)`` or
    ``NE(a, b)``.  Its Python truth value is structural equality (:func:`same_as`), so
    ``if a == b:``, ``x in list`` and dicts and sets of expressions work as before.
    """

    __slots__ = ("_lhs", "_rhs", "_negate", "_node")

    def __init__(self, lhs, rhs, negate: bool):
        self._lhs, self._rhs, self._negate, self._node = lhs, rhs, negate, None

    def __bool__(self) -> bool:
        same = same_as(self._lhs, self._rhs)
        return not same if self._negate else same

    def _as_expr(self) -> Expr:
        if self._node is None:
            self._node = _make_cmp(NE if self._negate else EQ, self._lhs, self._rhs)
        return self._node

    @property
    def dtype(self) -> str:
        return "bool"

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._as_expr(), name)

    def __str__(self) -> str:
        return str(self._as_expr())

    def __repr__(self) -> str:
        return f"Comparison({self._as_expr()})"

    __hash__ = None   # a condition, not a key: use the expressions themselves as keys


def _forward_to_node(name):
    def f(self, *args):
        return getattr(self._as_expr(), name)(*args)

    f.__name__ = name
    return f


for _name in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__",
              "__truediv__", "__rtruediv__", "__floordiv__", "__rfloordiv__", "__mod__",
              "__rmod__", "__pow__", "__rpow__", "__neg__", "__pos__", "__lt__", "__le__",
              "__gt__", "__ge__", "__and__", "__rand__", "__or__", "__ror__", "__invert__",
              "__int__",
              "__float__", "__index__", "equal", "not_equal", "astype"):
    setattr(Comparison, _name, _forward_to_node(_name))


def _expr_eq(self, o):
    if not _comparable(o):
        return NotImplemented
    return Comparison(self, o, False)


def _expr_ne(self, o):
    if not _comparable(o):
        return NotImplemented
    return Comparison(self, o, True)


def _all_subclasses(cls):
    for c in cls.__subclasses__():
        yield c
        yield from _all_subclasses(c)


# Every expression class (and IterVar, which stands for its Var) gets these, replacing
# the structural __eq__ the dataclass decorator wrote (kept as same_as); hashes stay.
for _cls in (Expr, IterVar, *_all_subclasses(Expr)):
    _cls.__eq__ = _expr_eq
    _cls.__ne__ = _expr_ne
Comparison.__eq__ = _forward_to_node("__eq__")
Comparison.__ne__ = _forward_to_node("__ne__")
