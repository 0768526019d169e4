"""Evaluating integer, float and boolean expressions of known variables on the host, as the
compiled code computes them: the shape expressions of the runtimes' argument checks, the
conditions lowering records on a function's scalars, the CUDA launch dimensions, the
interpreter's checks.  One evaluator for all of them (floor and trunc division as the IR
says, a division or remainder by zero is 0, integer casts wrap, IEEE float division).

:func:`compile_shape_expr` turns an expression into a Python function once (the argument
checks run it on every call); :func:`eval_host_expr` walks it each time.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Dict

from ..errors import ArgumentError
from . import dtype as _dt
from .expr import (
    Add, And, Cast, Const, Div, Expr, FloorDiv, FloorMod, Let, Max, Min, Mul, Not, Or, Select,
    Sub, TruncDiv, TruncMod, Var,
)
from .functor import free_vars
from .op import COMPARE, _wrap
from .printer import to_str

__all__ = ["eval_host_expr", "compile_shape_expr"]


def eval_host_expr(e: Expr, env: Dict[Var, Any]):
    """Evaluate an integer/float/bool expression of host-known variables in ``env``.

    Follows the IR's semantics (floor vs trunc division, integer wrapping on casts).
    Raises ArgumentError when a variable has no value.
    """
    t = type(e)
    if t is Const:
        return e.value
    if t is Var:
        try:
            return env[e]
        except KeyError:
            raise ArgumentError(f"the value of {e.name} is not known from the arguments") from None
    if t is Select:
        return eval_host_expr(e.true_value if eval_host_expr(e.cond, env) else e.false_value, env)
    if t is Not:
        return not eval_host_expr(e.a, env)
    if t is Cast:
        v = eval_host_expr(e.value, env)
        if e.dtype == "bool":
            return v != 0
        if _dt.is_float(e.dtype):
            return float(v)
        if _dt.is_float(e.value.dtype) or isinstance(v, float):
            v = _float_to_int(e, float(v), env)
        return _wrap(int(v), e.dtype)
    if t is Let:
        env2 = dict(env)
        env2[e.var] = eval_host_expr(e.value, env)
        return eval_host_expr(e.body, env2)
    a = eval_host_expr(e.a, env)
    b = eval_host_expr(e.b, env)
    op = _SHAPE_OPS.get(t)
    if op is not None:
        # the arithmetic of compiled shape expressions and of the generated code: an
        # integer division or remainder by zero is 0 (as numpy's), never an exception
        r = op(a, b)
    elif t is Div:
        return _ieee_div(a, b)
    elif t in COMPARE:
        return COMPARE[t](a, b)
    elif t is And:
        return bool(a) and bool(b)
    elif t is Or:
        return bool(a) or bool(b)
    else:
        raise ArgumentError(f"cannot evaluate `{to_str(e)}` on the host")
    if _dt.is_int(e.dtype):
        return _wrap(int(r), e.dtype)
    return r


def _float_to_int(e: Cast, v: float, env) -> int:
    """The float ``v`` (the value of ``e.value``) truncated for the cast ``e`` to an int
    dtype, as the compiled code converts it (to int8/int16/uint8 through int32, then
    wrapping).  Where the code's conversion has no defined result (NaN, an infinity, a
    value past int32 or int64), an ArgumentError: the host's value would not be the
    kernel's (a loop extent or launch size checked on one value and run with another)."""
    wide = e.dtype if _dt.bits(e.dtype) >= 32 else "int32"
    lo, hi = _dt.int_limits(wide)
    if math.isfinite(v) and lo <= math.trunc(v) <= hi:
        return math.trunc(v)
    vals = ", ".join(f"{x.name} = {env[x]!r}" for x in free_vars(e.value) if x in env)
    raise ArgumentError(
        f"`{to_str(e)}` converts the float {v!r} to {e.dtype}, and a float outside {wide}'s "
        f"range [{lo}, {hi}] (or NaN, an infinity) has no defined conversion"
        f"{f' ({vals})' if vals else ''}: pass values for which it is in range, or clamp it "
        f"first (tc.min(tc.max(x, lo), hi))")


def _ieee_div(a, b):
    """``a / b`` as IEEE floats divide (Python raises on a zero divisor)."""
    if b:
        return a / b
    if a != a or a == 0:
        return math.nan
    return math.copysign(math.inf, a) * math.copysign(1.0, b)


_SHAPE_OPS = {
    Add: lambda x, y: x + y, Sub: lambda x, y: x - y, Mul: lambda x, y: x * y,
    FloorDiv: lambda x, y: x // y if y else 0, FloorMod: lambda x, y: x % y if y else 0,
    TruncDiv: lambda x, y: (abs(x) // abs(y)) * (1 if (x < 0) == (y < 0) else -1) if y else 0,
    TruncMod: lambda x, y: x - y * ((abs(x) // abs(y)) * (1 if (x < 0) == (y < 0) else -1))
    if y else 0,
    Min: min, Max: max,
}


def compile_shape_expr(e: Expr) -> Callable[[Dict[Var, Any]], Any]:
    """A Python function env -> value evaluating the integer shape expression ``e`` as the
    CPU kernel does (+ - * exact, floor/trunc division as the IR says, 0 for a division by
    zero, integer casts wrap).  Other nodes are evaluated by :func:`eval_host_expr`.  A
    variable missing from ``env`` raises KeyError."""
    t = type(e)
    if t is Const:
        v = int(e.value) if _dt.is_int(e.dtype) else e.value
        return lambda env: v
    if t is Var:
        return lambda env: env[e]
    if t is Cast and _dt.is_int(e.dtype) and _dt.is_int(e.value.dtype):
        f = compile_shape_expr(e.value)
        dt = e.dtype
        return lambda env: _wrap(f(env), dt)
    op = _SHAPE_OPS.get(t)
    if op is None:
        return lambda env: eval_host_expr(e, env)
    fa, fb = compile_shape_expr(e.a), compile_shape_expr(e.b)
    return lambda env: op(fa(env), fb(env))
