"""Math intrinsics and helpers of the DSL (``tc.exp``, ``tc.if_then_else``, ...)."""
from __future__ import annotations

from ..ir import op as _op
from ..ir.expr import EQ as _EQ, NE as _NE, as_expr


def _unary(name):
    def f(x):
        return _op.call(name, x)

    f.__name__ = name
    f.__doc__ = f"Elementwise ``{name}`` of a float expression (``abs`` also takes ints)."
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


def pow(x, y):  # noqa: A001
    """``x ** y`` for float expressions."""
    return _op.call("pow", x, y)


def fma(a, b, c):
    """``a * b + c`` rounded once (IEEE fused multiply-add), for float expressions: an
    FMA instruction where the CPU has one (``llvm.fma``; ``fmaf`` in CUDA C)."""
    return _op.call("fma", a, b, c)


def if_then_else(cond, t, f):
    """``t`` where ``cond`` holds, else ``f``; only the chosen side is evaluated."""
    return _op.if_then_else(cond, t, f)


def select(cond, t, f):
    """TVM's ``tir.Select`` spelling of :func:`if_then_else`: ``t`` where ``cond`` holds,
    else ``f``.  Only the chosen side is evaluated, so it may guard a load."""
    return _op.if_then_else(cond, t, f)


all = _op.all_  # noqa: A001
any = _op.any_  # noqa: A001
floordiv = _op.floordiv_checked
floormod = _op.floormod_checked
truncdiv = _op.truncdiv
truncmod = _op.truncmod
maximum = _op.maximum
minimum = _op.minimum


def eq(a, b):
    """The boolean expression ``a == b``."""
    return _op.compare(_EQ, a, b)


def ne(a, b):
    """The boolean expression ``a != b``."""
    return _op.compare(_NE, a, b)


def cast(x, dtype):
    return as_expr(x).astype(dtype)
