"""Derivative rules: intrinsics, reducers, user computes, and the registry for new ones.

Intrinsic rules have the signature ``rule(args, out) -> tuple`` : given the argument
expressions and the expression of the call's value (``out``, which the engine may replace
by a load of the stored forward value), return one *local partial derivative* per argument
(``d out / d args[k]``) as an expression, or ``None`` where it is zero.  The engine multiplies
by the incoming adjoint.

The rules, and the conventions where a derivative is not defined (they match PyTorch):

=============  ======================================  ========================================
intrinsic      d/dx                                    at the edges
=============  ======================================  ========================================
exp, fast_exp  ``exp(x)`` (the forward value)
log, fast_log  ``1 / x``                               ``inf`` at 0, as PyTorch
sqrt           ``0.5 / sqrt(x)``                       ``inf`` at 0, as PyTorch
rsqrt          ``-0.5 * rsqrt(x)**3``
tanh           ``1 - tanh(x)**2``
sigmoid        ``s * (1 - s)``
erf            ``2/sqrt(pi) * exp(-x*x)``
sin, cos       ``cos(x)``, ``-sin(x)``
tan            ``1 + tan(x)**2``
atan           ``1 / (1 + x*x)``
atan2(y, x)    ``x/(x*x+y*y)``, ``-y/(x*x+y*y)``       0 where ``x*x+y*y`` is 0, as PyTorch
cbrt           ``1 / (3 cbrt(x)**2)``                  ``inf`` at 0
erfc           ``-2/sqrt(pi) * exp(-x*x)``             (also ``fast_erfc``)
abs            ``sign(x)``                             0 at 0 (PyTorch's ``sgn``)
pow(x, y)      ``y * pow(x, y-1)``, ``pow(x,y)*log(x)``  d/dx is 0 where y == 0; d/dy is 0 where
                                                       x == 0 and y >= 0 (PyTorch's masks)
floor, ceil,   0 (piecewise constant)
round
=============  ======================================  ========================================

Operators (in :mod:`tecomp.autodiff.reverse`): ``+ - * /`` as usual; ``max(a, b)`` /
``min(a, b)`` send the adjoint to the larger/smaller operand and half to each on a tie
(``torch.maximum``); ``if_then_else`` sends it to the chosen branch only (conditions are
not differentiable); float-to-float casts cast the adjoint back; casts from an integer and
every integer or boolean expression (indices, comparisons, ``//``/``%`` on ints) are not
differentiable, and a float cast to an int stops the gradient (it is piecewise constant).

Reducers: ``sum``; ``max``/``min`` send the adjoint to *one* extremum, the first in row-major
order of the reduce axes as listed in ``axis=[...]`` (PyTorch's max-pool and
``torch.max(dim)`` index on ties); ``prod`` and registered reducers use
``d combine(x, rest) / d x`` with ``rest`` the reduction of every other element (exact with
zeros; costs a stage with one reduction per reduced element).  A user ``tc.comm_reducer``
needs a registered derivative.
"""
from __future__ import annotations

import math
import weakref
from typing import Callable, Dict, Union

from ..errors import AutodiffError
from ..ir import op as _op
from ..ir.expr import Const, Expr, GE, GT, LT, EQ, as_expr
from ..te import reduce as R
from ..te.reduce import Reducer
from ..te.tensor import ComputeOp, Tensor


def _c(v, like: Expr) -> Const:
    return Const(float(v), like.dtype)


def _sign(x):
    return _op.if_then_else(_op.compare(GT, x, 0), _c(1, x),
                            _op.if_then_else(_op.compare(LT, x, 0), _c(-1, x), _c(0, x)))


def _pow_rule(args, out):
    x, y = args
    dx = _op.if_then_else(_op.compare(EQ, y, 0), _c(0, x), y * _op.call("pow", x, y - 1))
    dy = _op.if_then_else(_op.all_(_op.compare(EQ, x, 0), _op.compare(GE, y, 0)),
                          _c(0, x), out * _op.call("log", x))
    return dx, dy


def _atan2_rule(args, out):
    """``x / r2``, ``-y / r2`` with ``1 / r2`` taken as 0 where ``r2 = x*x + y*y`` is 0 (the
    origin, or both squares under the dtype's range): PyTorch's ``atan2_backward``, whose
    gradient there is 0 (and -0), not NaN."""
    y, x = args
    r2 = x * x + y * y
    recip = _op.if_then_else(_op.compare(EQ, r2, 0), _c(0, r2), _c(1, r2) / r2)
    return x * recip, -y * recip


def _erfc_rule(a, out):
    """d erfc(x) / dx = -2/sqrt(pi) exp(-x^2) (``erfc`` and ``fast_erfc``)."""
    return ((-2.0 / math.sqrt(math.pi)) * _op.call("exp", -(a[0] * a[0])),)


_BUILTIN_INTRINSICS: Dict[str, Callable] = {
    "exp": lambda a, out: (out,),
    "fast_exp": lambda a, out: (out,),
    "log": lambda a, out: (1 / a[0],),
    "fast_log": lambda a, out: (1 / a[0],),
    "sqrt": lambda a, out: (0.5 / out,),
    "rsqrt": lambda a, out: (-0.5 * (out * out * out),),
    "tanh": lambda a, out: (1 - out * out,),
    "sigmoid": lambda a, out: (out * (1 - out),),
    "erf": lambda a, out: ((2.0 / math.sqrt(math.pi)) * _op.call("exp", -(a[0] * a[0])),),
    "sin": lambda a, out: (_op.call("cos", a[0]),),
    "cos": lambda a, out: (-_op.call("sin", a[0]),),
    "abs": lambda a, out: (_sign(a[0]),),
    "pow": _pow_rule,
    "fma": lambda a, out: (a[1], a[0], _c(1, a[2])),
    "floor": lambda a, out: (None,),
    "ceil": lambda a, out: (None,),
    "round": lambda a, out: (None,),
    "exp2": lambda a, out: (math.log(2.0) * out,),
    "expm1": lambda a, out: (out + 1,),
    "log2": lambda a, out: ((1.0 / math.log(2.0)) / a[0],),
    "log1p": lambda a, out: (1 / (1 + a[0]),),
    "softplus": lambda a, out: (_op.call("sigmoid", a[0]),),
    "tan": lambda a, out: (1 + out * out,),
    "atan": lambda a, out: (1 / (1 + a[0] * a[0]),),
    "atan2": _atan2_rule,
    "cbrt": lambda a, out: ((1.0 / 3.0) / (out * out),),
    "erfc": _erfc_rule,
    "fast_erfc": _erfc_rule,
}

# user registrations
_INTRINSICS: Dict[str, Callable] = dict(_BUILTIN_INTRINSICS)
_REDUCERS: list = []  # [(Reducer, rule)]
_TENSORS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # op -> rule
_TAGS: Dict[str, Callable] = {}  # compute tag -> rule(out, adjoint, wanted) (see tag_rule)
_EQUIVALENTS: Dict[str, Callable] = {}  # compute tag -> fn(out) -> (tensor, reads) or None


def _prod_rule(x, rest):
    return rest


def register_derivative(target: Union[str, Reducer, Tensor],
                        rule: Union[Callable, str, None] = None, *,
                        override: bool = False) -> Callable:
    """Register the derivative of an intrinsic, a reducer, or a compute.

    Usable as a decorator: ``@register_derivative("my_intrinsic")``.

    Parameters
    ----------
    target : str or Reducer or Tensor
        * an intrinsic's name (a ``Call`` of it): ``rule(args, out)`` returns one local
          partial ``d out / d args[k]`` per argument (``None`` for zero); ``out`` is the
          call's value.  E.g. for ``exp``: ``lambda args, out: (out,)``.
        * a reducer made by ``tc.comm_reducer``: ``rule(x, rest)`` is
          ``d combine(x, rest) / d x``, where ``x`` is one reduced element and ``rest``
          the reduction of all the others; ``rule="fcombine"`` derives it from the
          reducer's ``fcombine`` symbolically.
        * a tensor: a custom vector-Jacobian product for the compute producing it:
          ``rule(adjoint, *inputs)`` gets the adjoint of ``tensor`` (a Tensor of its
          shape) and the compute's input tensors (``tensor.op.input_tensors``, in that
          order) and returns one Tensor (the adjoint contribution, of that input's
          shape) or ``None`` per input -- or a dict ``{tensor: contribution}`` whose
          keys may be any tensors the compute depends on, its inputs or further up (the
          stages in between then get nothing from it: ``tecomp.nn.flash_attention``'s
          backward goes straight to q, k and v this way).
    rule : callable or str, optional
        The rule (without it, a decorator is returned).
    override : bool, optional
        Replace an existing rule (otherwise an error).

    Returns
    -------
    callable
        ``rule`` (or the decorator).

    Raises
    ------
    AutodiffError
        For a rule that is not callable, a target of another kind, or a target that has
        a rule already without ``override=True``.
    """
    if rule is None:
        def deco(fn):
            register_derivative(target, fn, override=override)
            return fn

        return deco

    if isinstance(target, str):
        if not callable(rule):
            raise AutodiffError(f"register_derivative({target!r}, rule): rule must be a callable "
                                "rule(args, out) -> tuple of partial derivatives")
        if target in _INTRINSICS and not override:
            raise AutodiffError(
                f"the intrinsic {target!r} already has a derivative; pass override=True to "
                "replace it")
        _INTRINSICS[target] = rule
        return rule
    if isinstance(target, Reducer):
        if not (callable(rule) or rule == "fcombine"):
            raise AutodiffError(f"register_derivative(reducer {target.name}, rule): rule must be "
                                "a callable rule(x, rest) or the string 'fcombine'")
        for i, (r, _) in enumerate(_REDUCERS):
            if r is target:
                if not override:
                    raise AutodiffError(f"the reducer {target.name} already has a derivative; "
                                        "pass override=True to replace it")
                _REDUCERS[i] = (target, rule)
                return rule
        if _builtin_reducer_kind_of_reducer(target) is not None and not override:
            raise AutodiffError(f"the built-in reducer {target.name} already has a derivative; "
                                "pass override=True to replace it")
        _REDUCERS.append((target, rule))
        return rule
    if isinstance(target, Tensor):
        target = target.op
    if isinstance(target, ComputeOp):
        if not callable(rule):
            raise AutodiffError(f"register_derivative(tensor {target.name}, rule): rule must be "
                                "a callable rule(adjoint, *inputs) -> list of tensors")
        if target in _TENSORS and not override:
            raise AutodiffError(f"the compute {target.name} already has a registered derivative; "
                                "pass override=True to replace it")
        _TENSORS[target] = rule
        return rule
    raise AutodiffError(
        f"register_derivative: cannot register a derivative for {target!r}; give an intrinsic "
        "name (str), a reducer from tc.comm_reducer, or a compute tensor")


def unregister_derivative(target: Union[str, Reducer, Tensor]) -> None:
    """Remove a registration made by :func:`register_derivative` (a built-in intrinsic rule
    is restored).

    Parameters
    ----------
    target : str or Reducer or Tensor
        What was registered.
    """
    if isinstance(target, str):
        if target in _BUILTIN_INTRINSICS:
            _INTRINSICS[target] = _BUILTIN_INTRINSICS[target]
        else:
            _INTRINSICS.pop(target, None)
        return
    if isinstance(target, Tensor):
        target = target.op
    for i, (r, _) in enumerate(_REDUCERS):
        if r is target:
            del _REDUCERS[i]
            return
    try:
        _TENSORS.pop(target, None)
    except TypeError:
        pass


def register_tag_derivative(tag: str, rule: Callable, *, override: bool = False) -> Callable:
    """Register how the computes carrying ``tag`` hand some of their inputs' gradients to
    ready-made computes, instead of the derived gather form.

    ``tecomp.nn`` registers its convolutions this way, so that a convolution's data
    gradient is itself a convolution (one per phase of the data for a stride above 1)
    that ``schedule_conv2d_*`` and :func:`~tecomp.strategy.schedule_backward` run at a
    forward convolution's speed.

    Parameters
    ----------
    tag : str
        One of the comma-separated tags of ``op.tag``.
    rule : callable
        ``rule(out, adjoint, wanted)`` gets the compute's output tensor, the adjoint of
        it (a Tensor of its shape; ``None`` for a head of ones) and the tensors whose
        gradients are wanted (the compute's inputs, seen through inlined padding
        stages); it returns a dict ``{input tensor: its gradient contribution}`` for the
        ones it handles, or ``None``.  The inputs it leaves out get the derived gather
        form.
    override : bool, optional
        Replace the tag's rule (otherwise an error).

    Returns
    -------
    callable
        ``rule``.

    Raises
    ------
    AutodiffError
        For a tag that is not a string, a rule that is not callable, or a tag that has a
        rule already without ``override=True``.
    """
    return _register_by_tag(_TAGS, tag, rule, override, "register_tag_derivative(tag, rule)",
                            "callable rule(out, adjoint, wanted) -> dict or None",
                            "a derivative rule")


def _register_by_tag(table, tag, fn, override: bool, call: str, wants: str, what: str):
    if not isinstance(tag, str) or not tag or not callable(fn):
        raise AutodiffError(f"{call}: give a tag string and a {wants}")
    if tag in table and not override and table[tag] is not fn:
        raise AutodiffError(f"the tag {tag!r} already has {what}; pass override=True to "
                            "replace it")
    table[tag] = fn
    return fn


def unregister_tag_derivative(tag: str) -> None:
    """Remove the rule registered for ``tag`` (the derived gather form is used again).

    Parameters
    ----------
    tag : str
        The tag.
    """
    _TAGS.pop(tag, None)


def register_tag_equivalent(tag: str, fn: Callable, *, override: bool = False) -> Callable:
    """Register another compute definition that equals the computes carrying ``tag``, to be
    differentiated in their place.

    ``tecomp.nn`` registers its Winograd convolutions this way: their gradient is the
    direct convolution's (a convolution for the data, a ``conv2d_*_wgrad`` for the
    weight), not the adjoints of the transforms.  ``tc.gradient`` keeps the compute's own
    form when a gradient is wanted for one of the stages between it and ``reads`` or one
    of them is marked constant (:func:`~tecomp.autodiff.stop_gradient`).

    Parameters
    ----------
    tag : str
        One of the comma-separated tags of ``op.tag``.
    fn : callable
        ``fn(out)`` gets the compute's output tensor and returns ``None`` (no equivalent:
        the compute is differentiated as it is) or ``(equal, reads)``: a tensor of
        ``out``'s shape and dtype that computes the same values, and the tensors of
        ``out``'s graph that it reads (the stages from ``out`` back to them are the ones
        it replaces).
    override : bool, optional
        Replace the tag's function (otherwise an error).

    Returns
    -------
    callable
        ``fn``.

    Raises
    ------
    AutodiffError
        For a tag that is not a string, a function that is not callable, or a tag that
        has one already without ``override=True``.
    """
    return _register_by_tag(_EQUIVALENTS, tag, fn, override, "register_tag_equivalent(tag, fn)",
                            "callable fn(out) -> (tensor, reads) or None", "an equivalent")


def unregister_tag_equivalent(tag: str) -> None:
    """Remove the function registered for ``tag`` by :func:`register_tag_equivalent`.

    Parameters
    ----------
    tag : str
        The tag.
    """
    _EQUIVALENTS.pop(tag, None)


def _by_tag(table: Dict[str, Callable], op):
    tags = getattr(op, "tag", "") or ""
    if not table or not tags:
        return None
    for t in tags.split(","):
        r = table.get(t.strip())
        if r is not None:
            return r
    return None


def tag_equivalent(op):
    """The equivalent function registered for one of ``op``'s tags, or None."""
    return _by_tag(_EQUIVALENTS, op)


def tag_rule(op):
    """The rule registered for one of ``op``'s tags, or None."""
    return _by_tag(_TAGS, op)


def intrinsic_rule(name: str):
    return _INTRINSICS.get(name)


def tensor_rule(op):
    try:
        return _TENSORS.get(op)
    except TypeError:
        return None


def _builtin_reducer_kind_of_reducer(red) -> str | None:
    for kind in ("sum", "max", "min", "prod"):
        if red is getattr(R, kind):
            return kind
    return None


def reducer_kind(combiner):
    """``("sum" | "max" | "min", None)`` for the built-ins, ``("rule", rule)`` for prod and
    registered reducers, ``(None, None)`` when no derivative is known."""
    for red, rule in _REDUCERS:  # user registrations first (they may override a built-in)
        if any(c is combiner for c in red._cache.values()):
            return ("rule", rule)
    for kind in ("sum", "max", "min", "prod"):
        red = getattr(R, kind)
        if any(c is combiner for c in red._cache.values()):
            return ("rule", _prod_rule) if kind == "prod" else (kind, None)
    return (None, None)


def reducer_of(combiner):
    for red, _ in _REDUCERS:
        if any(c is combiner for c in red._cache.values()):
            return red
    for kind in ("sum", "max", "min", "prod"):
        red = getattr(R, kind)
        if any(c is combiner for c in red._cache.values()):
            return red
    return None


__all__ = ["register_derivative", "unregister_derivative", "register_tag_derivative",
           "unregister_tag_derivative", "register_tag_equivalent", "unregister_tag_equivalent",
           "tag_equivalent", "intrinsic_rule", "tag_rule", "reducer_kind", "as_expr"]
