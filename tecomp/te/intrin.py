"""Math intrinsics and helpers of the DSL (``tc.exp``, ``tc.if_then_else``, ...)."""
from __future__ import annotations

from ..errors import DTypeError
from ..ir import dtype as _dt
from ..ir import op as _op
from ..ir.expr import EQ as _EQ, LT as _LT, NE as _NE, Const, Expr, as_expr


#: what each elementwise intrinsic computes, for its docstring
_UNARY_DOC = {
    "exp": "``e ** x`` (within 1 ulp for float32: docs/numerics.md)",
    "log": "the natural logarithm of ``x``",
    "sqrt": "the square root of ``x``",
    "rsqrt": "``1 / sqrt(x)``",
    "tanh": "the hyperbolic tangent of ``x``",
    "sigmoid": "``1 / (1 + exp(-x))``",
    "erf": "the error function of ``x``",
    "abs": "the absolute value of ``x``",
    "floor": "the largest integer value not greater than ``x``",
    "ceil": "the smallest integer value not less than ``x``",
    "round": "``x`` rounded to the nearest integer value, half to even (as numpy)",
    "sin": "the sine of ``x`` (radians)",
    "cos": "the cosine of ``x`` (radians)",
    "fast_exp": "``e ** x``: the same code as :func:`exp` (a name kept for users of "
                "TVM's ``topi.fast_exp``)",
    "exp2": "``2 ** x``",
    "expm1": "``exp(x) - 1``, accurate for ``x`` near 0",
    "log2": "the base-2 logarithm of ``x``",
    "log1p": "``log(1 + x)``, accurate for ``x`` near 0",
    "softplus": "``log(1 + exp(x))``, computed without overflow "
                "(``max(x, 0) + log1p(exp(-|x|))``)",
    "tan": "the tangent of ``x`` (radians)",
    "atan": "the arc tangent of ``x``, in ``[-pi/2, pi/2]``",
    "cbrt": "the cube root of ``x`` (negative for negative ``x``)",
    "erfc": "``1 - erf(x)``, accurate where it is tiny (relative error, for large ``x``)",
    "fast_erfc": "``1 - erf(x)`` as :func:`erfc`, with a looser bound for float32 and "
                 "faster on the CPU (2.8 ulp against 0.93 with AVX2 or AVX-512, 2.3 against "
                 "0.6 elsewhere); the same as :func:`erfc` on float64 and on the GPU",
    "fast_log": "the natural logarithm of ``x`` as :func:`log`, with a looser bound for "
                "float32 (2 ulp against 0.86) and faster on the CPU; the same as :func:`log` "
                "on float64 and on the GPU",
}


def _unary(name):
    def f(x: Expr | float) -> Expr:
        return _op.call(name, x)

    kinds = "a float or integer (not bool)" if name == "abs" else "a float"
    raises = ("ExprError\n        For a bool expression." if name == "abs" else
              "DTypeError\n        For an integer or bool ``x``: convert it with "
              "``.astype('float32')``.")
    f.__name__ = f.__qualname__ = name
    what = _UNARY_DOC[name]
    f.__doc__ = f"""{what[0].upper() + what[1:]}, elementwise.

    Parameters
    ----------
    x : Expr or float
        {kinds[0].upper() + kinds[1:]} expression (a Python float is a float32 constant).

    Returns
    -------
    Expr
        An expression of ``x``'s dtype.

    Raises
    ------
    {raises}

    Examples
    --------
    >>> import tecomp as tc
    >>> A = tc.placeholder((8,), name="A")
    >>> B = tc.compute((8,), lambda i: tc.{name}(A[i]), name="B")
    """
    return f


exp = _unary("exp")
log = _unary("log")
sqrt = _unary("sqrt")
rsqrt = _unary("rsqrt")
tanh = _unary("tanh")
sigmoid = _unary("sigmoid")
erf = _unary("erf")
abs = _unary("abs")  # noqa: A001
floor = _unary("floor")
ceil = _unary("ceil")
round = _unary("round")  # noqa: A001  (half to even, like numpy)
sin = _unary("sin")
cos = _unary("cos")
fast_exp = _unary("fast_exp")
exp2 = _unary("exp2")
expm1 = _unary("expm1")
log2 = _unary("log2")
log1p = _unary("log1p")
softplus = _unary("softplus")
tan = _unary("tan")
atan = _unary("atan")
cbrt = _unary("cbrt")
erfc = _unary("erfc")
fast_erfc = _unary("fast_erfc")
fast_log = _unary("fast_log")


# ---------------------------------------------------------------------------------
# compositions of the intrinsics above: exact, no new IR nodes (every backend, the
# interpreter and autodiff handle them already)


def _number(x, name: str) -> Expr:
    """``x`` as an expression of a float or integer dtype (a DTypeError for bool)."""
    e = as_expr(x)
    if _dt.is_bool(e.dtype) or not (_dt.is_float(e.dtype) or _dt.is_int(e.dtype)):
        raise DTypeError(f"tc.{name} needs a float or integer argument, got {e.dtype} "
                         f"expression `{e}`; convert it with .astype('int32')")
    return e


def _float(x, name: str) -> Expr:
    """``x`` as a float expression (a DTypeError for others)."""
    e = as_expr(x)
    if not _dt.is_float(e.dtype):
        raise DTypeError(f"tc.{name} needs a float argument, got {e.dtype} expression `{e}`; "
                         f"convert it with .astype('float32')")
    return e


def sign(x: Expr | int | float) -> Expr:
    """The sign of ``x``, elementwise: -1, 0 or 1 in ``x``'s dtype (NaN stays NaN, as
    ``numpy.sign``).

    Parameters
    ----------
    x : Expr or int or float
        A float or integer expression.

    Returns
    -------
    Expr
        An expression of ``x``'s dtype; its gradient is 0.

    Raises
    ------
    DTypeError
        For a bool ``x``.

    Examples
    --------
    >>> import tecomp as tc
    >>> A = tc.placeholder((8,), name="A")
    >>> B = tc.compute((8,), lambda i: tc.sign(A[i]), name="B")
    """
    e = _number(x, "sign")
    one, zero = Const(1, e.dtype), Const(0, e.dtype)
    out = _op.if_then_else(e > zero, one, _op.if_then_else(e < zero, -one, zero))
    return _op.if_then_else(e != e, e, out) if _dt.is_float(e.dtype) else out


def trunc(x: Expr | float) -> Expr:
    """``x`` rounded toward zero to an integer value, elementwise (``numpy.trunc``):
    ``ceil(x)`` for negative ``x``, else ``floor(x)``.

    Parameters
    ----------
    x : Expr or float
        A float expression.

    Returns
    -------
    Expr
        An expression of ``x``'s dtype.

    Raises
    ------
    DTypeError
        For an integer or bool ``x``.

    Examples
    --------
    >>> import tecomp as tc
    >>> A = tc.placeholder((8,), name="A")
    >>> B = tc.compute((8,), lambda i: tc.trunc(A[i]), name="B")
    """
    e = _float(x, "trunc")
    return _op.if_then_else(e < 0, _op.call("ceil", e), _op.call("floor", e))


def _float_test(name: str, what: str, how: str, test, integer: bool):
    """The bool-valued intrinsic ``name``: ``test(x)`` of a float ``x``, the constant
    ``integer`` of an integer one."""
    def f(x: Expr | int | float) -> Expr:
        e = _number(x, name)
        if not _dt.is_float(e.dtype):
            return Const(integer, "bool")
        return test(e)

    f.__name__ = f.__qualname__ = name
    f.__doc__ = f"""Whether ``x`` is {what}, elementwise: {how}.  {integer} for an integer
    ``x``.

    Parameters
    ----------
    x : Expr or int or float
        A float or integer expression.

    Returns
    -------
    Expr
        A bool expression.

    Raises
    ------
    DTypeError
        For a bool ``x``.

    Examples
    --------
    >>> import tecomp as tc
    >>> A = tc.placeholder((8,), name="A")
    >>> B = tc.compute((8,), lambda i: tc.{name}(A[i]), name="B")
    """
    return f


isnan = _float_test("isnan", "a NaN", "the bool expression ``x != x`` (an unordered "
                    "compare: true for a NaN only)", lambda e: _op.compare(_NE, e, e), False)
isinf = _float_test("isinf", "``+inf`` or ``-inf``", "``abs(x) == inf``", lambda e: _op.compare(
    _EQ, _op.call("abs", e), Const(float("inf"), e.dtype)), False)
isfinite = _float_test("isfinite", "neither infinite nor a NaN", "``abs(x) < inf`` (an "
                       "ordered compare: false for a NaN)", lambda e: _op.compare(
                           _LT, _op.call("abs", e), Const(float("inf"), e.dtype)), True)


#: the docstring of the float intrinsics of two operands
_BINARY_DOC = """{what}

    Parameters
    ----------
    {params} : Expr or float
        Float expressions{order}.  A Python float takes the other operand's
        dtype, and the two dtypes are promoted to one.

    Returns
    -------
    Expr
        {result} in the promoted float dtype.

    Raises
    ------
    DTypeError
        For integer or bool operands (convert them with ``.astype('float32')``).

    Examples
    --------
    >>> import tecomp as tc
    {example}
    """


def pow(x: Expr | float, y: Expr | float) -> Expr:  # noqa: A001
    return _op.call("pow", x, y)


def atan2(y: Expr | float, x: Expr | float) -> Expr:
    return _op.call("atan2", y, x)


pow.__doc__ = _BINARY_DOC.format(
    what="``x ** y`` for float expressions (C99's values at the zeros, infinities and\n"
         "    NaN: ``pow(x, 0) = 1``, ``pow(-8, 1/3)`` is NaN, ``pow(-0.0, -1) = -inf``).",
    params="x, y", order="", result="``x ** y``",
    example=""">>> A = tc.placeholder((8,), name="A")
    >>> B = tc.compute((8,), lambda i: tc.pow(A[i], 2.0), name="B")""")
atan2.__doc__ = _BINARY_DOC.format(
    what="The angle of the point ``(x, y)``, elementwise: ``atan(y / x)`` in the right\n"
         "    quadrant, in ``[-pi, pi]`` (``numpy.arctan2``, ``torch.atan2``; C99's values at "
         "the\n    zeros and infinities, ``atan2(0.0, -0.0) = pi``).",
    params="y, x", order=" (the ordinate first, as numpy)", result="The angle in radians,",
    example=""">>> Y = tc.placeholder((8,), name="Y")
    >>> X = tc.placeholder((8,), name="X")
    >>> B = tc.compute((8,), lambda i: tc.atan2(Y[i], X[i]), name="B")""")


def fma(a: Expr | float, b: Expr | float, c: Expr | float) -> Expr:
    """``a * b + c`` rounded once (IEEE fused multiply-add), for float expressions.

    An FMA instruction where the CPU has one (``llvm.fma``; ``fmaf`` in CUDA C).

    Parameters
    ----------
    a, b, c : Expr or float
        Float expressions (promoted to one dtype; a Python float takes it).

    Returns
    -------
    Expr
        ``a * b + c`` in the promoted dtype.

    Raises
    ------
    DTypeError
        For integer or bool operands.

    Examples
    --------
    >>> import tecomp as tc
    >>> A = tc.placeholder((8,), name="A")
    >>> B = tc.compute((8,), lambda i: tc.fma(A[i], 2.0, 1.0), name="B")
    """
    return _op.call("fma", a, b, c)


def if_then_else(cond: Expr, t: Expr | int | float, f: Expr | int | float) -> Expr:
    """``t`` where ``cond`` holds, else ``f``; only the chosen side is evaluated.

    So it may guard a load that would be out of bounds (a padding).

    Parameters
    ----------
    cond : Expr
        A bool expression (a comparison, ``tc.all``, ``&``, ``|``, ``~``); a Python bool
        is refused (it was evaluated in Python, not by the kernel).
    t, f : Expr or int or float
        The two values; their dtypes are promoted to one (a Python number takes the
        other side's dtype).

    Returns
    -------
    Expr
        The selected value, in the promoted dtype.

    Raises
    ------
    ExprError
        For a condition that is not a bool expression.

    Examples
    --------
    >>> import tecomp as tc
    >>> A = tc.placeholder((8,), name="A")
    >>> P = tc.compute((10,), lambda i: tc.if_then_else(
    ...     tc.all(i >= 1, i < 9), A[i - 1], 0.0), name="P")
    """
    return _op.if_then_else(cond, t, f)


def select(cond: Expr, t: Expr | int | float, f: Expr | int | float) -> Expr:
    """TVM's ``tir.Select`` spelling of :func:`if_then_else`.

    ``t`` where ``cond`` holds, else ``f``.  Only the chosen side is evaluated, so it may
    guard a load.

    Parameters
    ----------
    cond : Expr
        A bool expression.
    t, f : Expr or int or float
        The two values (promoted to one dtype).

    Returns
    -------
    Expr
        The selected value.

    Raises
    ------
    ExprError
        For a condition that is not a bool expression.
    """
    return _op.if_then_else(cond, t, f)


all = _op.all_  # noqa: A001
any = _op.any_  # noqa: A001
floordiv = _op.floordiv_checked
floormod = _op.floormod_checked
truncdiv = _op.truncdiv
truncmod = _op.truncmod
maximum = _op.maximum
minimum = _op.minimum


def eq(a: Expr | int | float, b: Expr | int | float) -> Expr:
    """The boolean expression ``a == b``.

    The same node as ``a == b`` on expressions; a function for places where Python's
    ``==`` would compare in Python (two Python numbers).

    Parameters
    ----------
    a, b : Expr or int or float
        The operands (promoted to one dtype).

    Returns
    -------
    Expr
        A bool expression.
    """
    return _op.compare(_EQ, a, b)


def ne(a: Expr | int | float, b: Expr | int | float) -> Expr:
    """The boolean expression ``a != b``.

    Parameters
    ----------
    a, b : Expr or int or float
        The operands (promoted to one dtype).

    Returns
    -------
    Expr
        A bool expression.
    """
    return _op.compare(_NE, a, b)


def cast(x: Expr | int | float, dtype: str) -> Expr:
    """``x`` converted to ``dtype`` (``x.astype(dtype)``).

    Float to integer rounds toward zero, as C; a conversion to the dtype ``x`` already
    has returns ``x`` itself.

    Parameters
    ----------
    x : Expr or int or float
        An expression, or a Python number (int32 for an int, float32 for a float).
    dtype : str
        The target dtype: ``"float32"``, ``"int8"``, ``"bfloat16"``, ...

    Returns
    -------
    Expr
        ``x`` as ``dtype``.

    Raises
    ------
    DTypeError
        For an unknown dtype.

    Examples
    --------
    >>> import tecomp as tc
    >>> A = tc.placeholder((8,), dtype="int8", name="A")
    >>> B = tc.compute((8,), lambda i: tc.cast(A[i], "float32") * 0.5, name="B")
    """
    return as_expr(x).astype(dtype)
