"""Elementwise math operators: one ``tc.compute`` over any shape, as numpy, PyTorch and
TVM's TOPI define them.

Each takes a tensor of any shape (symbolic extents too) and returns one of the same
shape: of its dtype, or bool for the tests (``isnan``, ``isinf``, ``isfinite``).  The
transcendental ones take float tensors (float16, bfloat16, float32, float64; float16 and
bfloat16 compute in float32 and round once per element); ``abs``, ``sign``,
``negative``, ``square``, ``clip`` and the rounding ones take integer tensors too.  The
gradients of the differentiable ones come from :func:`tecomp.gradient`.
"""
from __future__ import annotations

from typing import Optional

from .. import te as _te
from ..errors import DTypeError
from ..ir import dtype as _dt
from ..ir.expr import Const
from ..te.tensor import Tensor
from ._check import Args
from ._common import _elementwise

__all__ = [
    "exp", "exp2", "expm1", "log", "log2", "log1p", "sqrt", "rsqrt", "erf", "erfc", "sin", "cos",
    "tan", "atan", "cbrt", "reciprocal", "abs", "sign", "negative", "square", "floor", "ceil", "round",
    "trunc", "isnan", "isinf", "isfinite", "clip", "cast", "leaky_relu", "prelu", "elu",
    "selu", "hardswish", "hardsigmoid", "hardtanh", "silu", "mish", "softplus",
]

#: SELU's constants (Klambauer et al. 2017, as torch.nn.SELU)
SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


def _doc(what: str, ref: str, kinds: str, out: str = "``x``'s dtype",
         grad: str = "") -> str:
    return f"""{what}, elementwise (``{ref}``).{grad}

    Parameters
    ----------
    x : Tensor
        A {kinds} tensor, any shape.
    name : str, optional
        The output stage's name.

    Returns
    -------
    Tensor
        ``x``'s shape, {out}.

    Raises
    ------
    DTypeError
        For a tensor of another dtype (the message names it).
    """


def _unary(op: str, fn, what: str, ref: str, kind: str = "float", out: str = "``x``'s dtype"):
    """The operator ``op(x, name=op)``: ``fn(x[i])`` for each element."""
    def f(x: Tensor, name: str = op) -> Tensor:
        return _elementwise(x, fn, op, name, kind)

    f.__name__ = f.__qualname__ = op
    kinds = {"float": "float", "number": "float or integer"}[kind]
    f.__doc__ = _doc(what, ref, kinds, out)
    return f


def _float_or_same(fn):
    """``fn`` on float values, the value itself on integer ones (floor of an int)."""
    return lambda v: fn(v) if _dt.is_float(v.dtype) else v


exp = _unary("exp", _te.exp, "``e ** x``", "torch.exp")
exp2 = _unary("exp2", _te.exp2, "``2 ** x``", "torch.exp2")
expm1 = _unary("expm1", _te.expm1, "``exp(x) - 1``, accurate near 0", "torch.expm1")
log = _unary("log", _te.log, "The natural logarithm", "torch.log")
log2 = _unary("log2", _te.log2, "The base-2 logarithm", "torch.log2")
log1p = _unary("log1p", _te.log1p, "``log(1 + x)``, accurate near 0", "torch.log1p")
sqrt = _unary("sqrt", _te.sqrt, "The square root", "torch.sqrt")
rsqrt = _unary("rsqrt", _te.rsqrt, "``1 / sqrt(x)``", "torch.rsqrt")
erf = _unary("erf", _te.erf, "The error function", "torch.erf")
sin = _unary("sin", _te.sin, "The sine (radians)", "torch.sin")
cos = _unary("cos", _te.cos, "The cosine (radians)", "torch.cos")
erfc = _unary("erfc", _te.erfc, "``1 - erf(x)``, accurate where it is tiny", "torch.erfc")
tan = _unary("tan", _te.tan, "The tangent (radians)", "torch.tan")
atan = _unary("atan", _te.atan, "The arc tangent, in ``[-pi/2, pi/2]``", "torch.atan")
cbrt = _unary("cbrt", _te.cbrt, "The cube root (negative for negative ``x``)", "numpy.cbrt")
reciprocal = _unary("reciprocal", lambda v: 1.0 / v, "``1 / x``", "torch.reciprocal")
abs = _unary("abs", _te.abs, "The absolute value", "torch.abs", "number")  # noqa: A001
sign = _unary("sign", _te.sign, "-1, 0 or 1 (NaN stays NaN)", "numpy.sign", "number")
negative = _unary("negative", lambda v: -v, "``-x``", "torch.neg", "number")
square = _unary("square", lambda v: v * v, "``x * x``", "torch.square", "number")
floor = _unary("floor", _float_or_same(_te.floor), "The largest integer value not greater "
               "than ``x`` (an integer tensor is copied)", "torch.floor", "number")
ceil = _unary("ceil", _float_or_same(_te.ceil), "The smallest integer value not less than "
              "``x`` (an integer tensor is copied)", "torch.ceil", "number")
round = _unary("round", _float_or_same(_te.round),  # noqa: A001
               "``x`` rounded to the nearest integer value, half to even (an integer "
               "tensor is copied)", "torch.round", "number")
trunc = _unary("trunc", _float_or_same(_te.trunc), "``x`` rounded toward zero (an integer "
               "tensor is copied)", "torch.trunc", "number")
isnan = _unary("isnan", _te.isnan, "Whether ``x`` is a NaN (False for integers)",
               "torch.isnan", "number", "bool")
isinf = _unary("isinf", _te.isinf, "Whether ``x`` is +inf or -inf (False for integers)",
               "torch.isinf", "number", "bool")
isfinite = _unary("isfinite", _te.isfinite, "Whether ``x`` is neither infinite nor NaN "
                  "(True for integers)", "torch.isfinite", "number", "bool")
silu = _unary("silu", lambda v: v * _te.sigmoid(v), "``x * sigmoid(x)``", "F.silu")
mish = _unary("mish", lambda v: v * _te.tanh(_te.softplus(v)), "``x * tanh(softplus(x))``",
              "F.mish")
hardswish = _unary("hardswish", lambda v: v * _te.minimum(_te.maximum(v + 3.0, 0.0), 6.0)
                   / 6.0, "``x * relu6(x + 3) / 6``", "F.hardswish")
hardsigmoid = _unary("hardsigmoid", lambda v: _te.minimum(_te.maximum(v + 3.0, 0.0), 6.0)
                     / 6.0, "``relu6(x + 3) / 6``", "F.hardsigmoid")
selu = _unary("selu", lambda v: SELU_SCALE * _te.if_then_else(
    v > 0, v, SELU_ALPHA * _te.expm1(v)), "``scale * (x if x > 0 else alpha * expm1(x))`` "
    "with torch's constants", "F.selu")


def clip(x: Tensor, a_min: Optional[float] = None, a_max: Optional[float] = None,
         name: str = "clip") -> Tensor:
    """``x`` limited to ``[a_min, a_max]``, elementwise (``numpy.clip``, ``torch.clamp``):
    ``minimum(maximum(x, a_min), a_max)``; a NaN stays NaN.

    Parameters
    ----------
    x : Tensor
        A float or integer tensor, any shape.
    a_min, a_max : float, optional
        The bounds (None: no bound on that side; at least one is given), numbers ``x``'s
        dtype holds: integers in its range for an integer tensor (``300`` for int8 is
        refused, as PyTorch refuses it), not NaN and not past a float dtype's largest
        finite value (``inf`` itself is a bound).  With ``a_min > a_max`` every element
        is ``a_max`` (as numpy).
    name : str, optional
        The output stage's name.

    Returns
    -------
    Tensor
        ``x``'s shape and dtype; its gradient is 1 inside the bounds, 0 outside.

    Raises
    ------
    ShapeError
        When both bounds are None.
    DTypeError
        For a bool tensor, or a bound ``x``'s dtype cannot hold (the message names it).
    """
    a = Args("clip", name)
    a.tensor("x", x, dtype="number")
    if a_min is None and a_max is None:
        a.fail("give a_min, a_max or both (both are None)")
    lo = None if a_min is None else a.scalar("a_min", a_min, x)
    hi = None if a_max is None else a.scalar("a_max", a_max, x)

    def f(v):
        if lo is not None:
            v = _te.maximum(v, Const(lo, x.dtype))
        if hi is not None:
            v = _te.minimum(v, Const(hi, x.dtype))
        return v

    return _te.compute(x.shape, lambda *i: f(x[i]), name=name, tag="elemwise")


def hardtanh(x: Tensor, min_val: float = -1.0, max_val: float = 1.0,
             name: str = "hardtanh") -> Tensor:
    """``x`` limited to ``[min_val, max_val]`` (``F.hardtanh``; :func:`clip` with both
    bounds).

    Parameters
    ----------
    x : Tensor
        A float tensor, any shape.
    min_val, max_val : float, optional
        The bounds (-1 and 1 by default); ``min_val <= max_val``.
    name : str, optional
        The output stage's name.

    Returns
    -------
    Tensor
        ``x``'s shape and dtype.

    Raises
    ------
    ShapeError
        For ``min_val > max_val``.
    DTypeError
        For a tensor that is not float.
    """
    a = Args("hardtanh", name)
    a.tensor("x", x)
    lo, hi = a.number("min_val", min_val), a.number("max_val", max_val)
    if lo > hi:
        a.fail(f"min_val {min_val} is greater than max_val {max_val}; give min_val <= max_val")
    return clip(x, lo, hi, name=name)


def cast(x: Tensor, dtype: str, name: str = "cast") -> Tensor:
    """``x`` converted to ``dtype``, elementwise (``x.astype(dtype)``, TOPI's ``cast``).

    Float to integer rounds toward zero (as C, numpy and torch); a float outside the
    integer's range, or a NaN, gives an unspecified value (as numpy's).  To bool: ``x != 0``.

    Parameters
    ----------
    x : Tensor
        A tensor of any dtype and shape.
    dtype : str
        The dtype of the result (``"float32"``, ``"int8"``, ``"bool"``, ...).
    name : str, optional
        The output stage's name.

    Returns
    -------
    Tensor
        ``x``'s shape, of ``dtype``; differentiable between float dtypes.

    Raises
    ------
    DTypeError
        For an unknown dtype.
    """
    a = Args("cast", name)
    a.tensor("x", x, dtype=None)
    try:
        d = _dt.canon(dtype)
    except DTypeError as exc:
        a.fail(f"dtype: {exc}", DTypeError)
    return _te.compute(x.shape, lambda *i: x[i].astype(d), name=name, tag="elemwise")


def _negative_part(op: str, x, alpha, neg, name: str) -> Tensor:
    """``x if x > 0 else neg(alpha, x)``, elementwise, after the checks of ``op``."""
    a = Args(op, name)
    a.tensor("x", x)
    k = a.number("alpha", alpha)
    return _te.compute(x.shape, lambda *i: _te.if_then_else(x[i] > 0, x[i], neg(k, x[i])),
                       name=name, tag="elemwise")


_ALPHA_DOC = """{what}, elementwise ({ref}).

    Parameters
    ----------
    x : Tensor
        A float tensor, any shape.
    alpha : float, optional
        {alpha}
    name : str, optional
        The output stage's name.

    Returns
    -------
    Tensor
        ``x``'s shape and dtype.

    Raises
    ------
    ShapeError
        For an ``alpha`` that is not a finite number.
    DTypeError
        For a tensor that is not float.
    """


def leaky_relu(x: Tensor, alpha: float = 0.01, name: str = "leaky_relu") -> Tensor:
    return _negative_part("leaky_relu", x, alpha, lambda k, v: k * v, name)


def elu(x: Tensor, alpha: float = 1.0, name: str = "elu") -> Tensor:
    return _negative_part("elu", x, alpha, lambda k, v: k * _te.expm1(v), name)


leaky_relu.__doc__ = _ALPHA_DOC.format(
    what="``x if x > 0 else alpha * x``", ref="``F.leaky_relu`` with ``negative_slope=alpha``, "
    "TOPI's ``leaky_relu``", alpha="The slope below 0 (0.01, torch's default).")
elu.__doc__ = _ALPHA_DOC.format(what="``x if x > 0 else alpha * (exp(x) - 1)``",
                                ref="``F.elu``", alpha="The scale of the negative part (1.0).")


def softplus(x: Tensor, beta: float = 1.0, threshold: float = 20.0,
             name: str = "softplus") -> Tensor:
    """``log(1 + exp(beta * x)) / beta``, elementwise, and ``x`` itself where
    ``beta * x > threshold`` (``F.softplus``, the same ``beta`` and ``threshold``).

    Parameters
    ----------
    x : Tensor
        A float tensor, any shape.
    beta : float, optional
        The sharpness (1.0), > 0.
    threshold : float, optional
        Above it ``beta * x`` is taken as linear (20.0, torch's).
    name : str, optional
        The output stage's name.

    Returns
    -------
    Tensor
        ``x``'s shape and dtype.

    Raises
    ------
    ShapeError
        For a ``beta`` that is not a positive finite number, or a ``threshold`` that is
        not a finite number.
    DTypeError
        For a tensor that is not float.
    """
    a = Args("softplus", name)
    a.tensor("x", x)
    b = a.number("beta", beta)
    if b <= 0:
        a.fail(f"beta must be a finite number > 0, got {beta!r}")
    t = a.number("threshold", threshold)

    def f(v):
        bv = v if b == 1.0 else b * v
        soft = _te.softplus(bv) if b == 1.0 else _te.softplus(bv) * (1.0 / b)
        return _te.if_then_else(bv > t, v, soft)

    return _te.compute(x.shape, lambda *i: f(x[i]), name=name, tag="elemwise")


def prelu(x: Tensor, slope: Tensor, axis: int = 1, name: str = "prelu") -> Tensor:
    """``x if x > 0 else slope[c] * x``, elementwise, ``c`` the index along ``axis``
    (TOPI's ``prelu``; ``F.prelu`` with its channel axis 1).

    Parameters
    ----------
    x : Tensor
        A float tensor, at least 1-d.
    slope : Tensor
        1-d, of ``x``'s dtype: one slope per element along ``axis``, or one for all (extent
        1, as ``nn.PReLU()``).
    axis : int, optional
        The channel axis of ``x`` (1: NCHW; -1 for NHWC).
    name : str, optional
        The output stage's name.

    Returns
    -------
    Tensor
        ``x``'s shape and dtype; differentiable in ``x`` and ``slope``.

    Raises
    ------
    ShapeError
        For an axis out of range, or a slope that is not 1-d with one element or one per
        channel.
    DTypeError
        For tensors that are not float or differ in dtype.
    """
    a = Args("prelu", name)
    a.tensor("x", x, (1, None))
    a.tensor("slope", slope, 1, "[channels]", like=("x", x))
    ax = a.axis("axis", axis, x.ndim, f"x ({x.name})")
    one = isinstance(slope.shape[0], Const) and int(slope.shape[0].value) == 1
    if not one:
        a.match("slope", slope, 0, "x", x, ax, "elements", "one slope per channel, or one")

    def f(*i):
        v = x[i]
        return _te.if_then_else(v > 0, v, slope[0 if one else i[ax]] * v)

    return _te.compute(x.shape, f, name=name, tag="elemwise,prelu")
