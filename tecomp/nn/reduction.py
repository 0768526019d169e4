"""Reductions as operators: ``sum``, ``mean``, ``max``, ``min``, ``prod``, ``argmax``,
``argmin``, ``all``, ``any`` over any axes, as numpy and TVM's TOPI define them.

``axis``: an int, a tuple of ints (negative ones count from the end), or None for every
axis; ``keepdims=True`` keeps each reduced axis with extent 1.  Reducing every axis
without ``keepdims`` gives a 0-d tensor (shape ``()``, as numpy's).  Sums, means and
products of float16/bfloat16 values accumulate in float32 (a stage ``<name>.acc`` or
``<name>.sum``) and round once; integer ones keep their dtype (and wrap, as TOPI's).
The gradients of ``sum``, ``mean``, ``max``, ``min`` and ``prod`` come from
:func:`tecomp.gradient` (a max's gradient goes to the first maximum, or to the last NaN).
"""
from __future__ import annotations

import builtins
import math
import numbers
from typing import Sequence, Tuple, Union

from .. import te as _te
from ..errors import DTypeError
from ..ir import dtype as _dt
from ..ir.expr import Const
from ..te.reduce import Reducer
from ..te.tensor import Tensor
from ._check import Args
from ._common import _acc, _rounded

__all__ = ["sum", "mean", "max", "min", "prod", "argmax", "argmin", "all", "any"]

Axis = Union[int, Sequence[int], None]

#: the reducers of all/any (bool values): logical and / or
_ALL = _te.comm_reducer(lambda x, y: x & y, lambda t: Const(True, t), name="all")
_ANY = _te.comm_reducer(lambda x, y: x | y, lambda t: Const(False, t), name="any")


def _axes(a: Args, x: Tensor, axis: Axis, allow_empty: bool = True) -> Tuple[int, ...]:
    """``axis`` as sorted non-negative axes of ``x``."""
    nd = x.ndim
    if axis is None and not nd and not allow_empty:
        a.fail(f"axis=None of x ({x.name}), a 0-d tensor: there is no axis to take the "
               f"position along; give a tensor of at least one axis "
               f"(tecomp.nn.reshape(x, (1,)))")
    if axis is None:
        return tuple(range(nd))
    many = isinstance(axis, (tuple, list))
    vals = list(axis) if many else [axis]
    if not many and not isinstance(axis, numbers.Integral):
        a.fail(f"axis must be an int, a tuple of ints or None, got {axis!r:.60}")
    if not vals and not allow_empty:
        a.fail("axis must name at least one axis (or be None: every axis), got ()")
    out = []
    for v in vals:
        d = a.axis("axis", v, nd, f"x ({x.name})")
        if d in out:
            a.fail(f"axis {v} is given twice in {tuple(vals)!r} (axis {d} of x ({x.name}), "
                   f"{nd}-d); name each axis once")
        out.append(d)
    return tuple(sorted(out))


def _reduced(x: Tensor, axes, keepdims: bool):
    """The output shape, the reduce axes (one per reduced axis) and a function from the
    output's indices to the input's."""
    shape = tuple(Const(1, "int32") if d in axes else e for d, e in enumerate(x.shape)
                  if keepdims or d not in axes)
    rks = {d: _te.reduce_axis(x.shape[d], name=f"k{d}") for d in axes}

    def index(i):
        it = iter(i)
        idx = []
        for d in range(x.ndim):
            if d in axes:
                if keepdims:
                    next(it)
                idx.append(rks[d])
            else:
                idx.append(next(it))
        return tuple(idx)

    return shape, [rks[d] for d in axes], index


def _common(op: str, name: str, x, axis, keepdims, kind, allow_empty: bool = True):
    a = Args(op, name)
    a.tensor("x", x, dtype=kind)
    a.flag("keepdims", keepdims)
    return a, _axes(a, x, axis, allow_empty)


def _reduce(op: str, x: Tensor, axis: Axis, keepdims: bool, name: str, reducer, kind: str,
            accumulate: bool) -> Tensor:
    """``reducer`` of ``x`` over ``axis``; summed in float32 for float16/bfloat16 values
    when ``accumulate`` (the stage ``<name>.acc``, rounded once into ``<name>``)."""
    _, axes = _common(op, name, x, axis, keepdims, kind)
    acc = _acc(x.dtype) if accumulate else x.dtype
    shape, rks, index = _reduced(x, axes, keepdims)
    if not rks:
        return _te.compute(x.shape, lambda *i: x[i], name=name, tag="elemwise")
    r = _te.compute(shape, lambda *i: reducer(x[index(i)].astype(acc), axis=rks),
                    name=name if acc == x.dtype else f"{name}.acc", tag=f"reduce_{op}")
    return _rounded(r, x.dtype, name, tag=f"reduce_{op}")


_PARAMS = """x : Tensor
        The tensor ({what}), any shape; extents may be symbolic.
    axis : int or tuple of int or None, optional
        The axes reduced (negative ones count from the end); None (the default): all.
    keepdims : bool, optional
        Keep each reduced axis, with extent 1 (numpy's ``keepdims``).
    name : str, optional
        The output stage's name; helper stages are ``<name>.<what>``."""

_RAISES = """Raises
    ------
    ShapeError
        For an axis out of range or given twice.
    DTypeError
        For a tensor of a dtype the reduction does not take ({refuse})."""


def _doc(what: str, ref: str, takes: str, refuse: str, extra: str = "") -> str:
    return f"""{what} over ``axis`` (``{ref}``).{extra}

    Parameters
    ----------
    {_PARAMS.format(what=takes)}

    Returns
    -------
    Tensor
        The reduction, of ``x``'s dtype.

    {_RAISES.format(refuse=refuse)}
    """


def _reduction(op: str, reducer, accumulate: bool, what: str, refuse: str, extra: str):
    """The operator ``op(x, axis=None, keepdims=False, name=op)``: ``reducer`` over
    ``axis`` (see :func:`_reduce`)."""
    def f(x: Tensor, axis: Axis = None, keepdims: bool = False, name: str = op) -> Tensor:
        return _reduce(op, x, axis, keepdims, name, reducer, "number", accumulate)

    f.__name__ = f.__qualname__ = op
    f.__doc__ = _doc(what, f"numpy.{op}", "float or integer", refuse, "\n\n    " + extra)
    return f


sum = _reduction("sum", _te.sum, True, "The sum", "bool: use any, or cast it",  # noqa: A001
                 "Float16/bfloat16 values are summed in float32 (``<name>.acc``) and rounded "
                 "once;\n    integers keep their dtype (as TOPI's).")
max = _reduction("max", _te.max, False, "The maximum", "bool: use any",  # noqa: A001
                 "A NaN propagates (as numpy's); the gradient goes to the first maximum\n    "
                 "(to the last NaN where there is one).")
min = _reduction("min", _te.min, False, "The minimum", "bool: use all",  # noqa: A001
                 "A NaN propagates (as numpy's); the gradient goes to the first minimum\n    "
                 "(to the last NaN where there is one).")
prod = _reduction("prod", _te.prod, True, "The product", "bool: use all",
                  "Float16/bfloat16 values are multiplied in float32 and rounded once.")


def _count(x: Tensor, axes, dtype: str):
    """The number of elements reduced over ``axes``: a constant, or an expression of the
    symbolic extents, in ``dtype``."""
    consts = [int(x.shape[d].value) for d in axes if isinstance(x.shape[d], Const)]
    expr = Const(float(math.prod(consts)), dtype)
    for d in axes:
        if not isinstance(x.shape[d], Const):
            expr = expr * x.shape[d].astype(dtype)
    return expr


def mean(x: Tensor, axis: Axis = None, keepdims: bool = False, name: str = "mean") -> Tensor:
    _, axes = _common("mean", name, x, axis, keepdims, "float")
    acc = _acc(x.dtype)
    shape, rks, index = _reduced(x, axes, keepdims)
    if not rks:
        return _te.compute(x.shape, lambda *i: x[i], name=name, tag="elemwise")
    s = _te.compute(shape, lambda *i: _te.sum(x[index(i)].astype(acc), axis=rks),
                    name=f"{name}.sum", tag="reduce_sum")
    n = _count(x, axes, acc)
    return _te.compute(shape, lambda *i: (s[i] / n).astype(x.dtype), name=name,
                       tag="elemwise,reduce_mean")


mean.__doc__ = _doc("The mean", "numpy.mean", "float", "integer or bool: cast it to a float "
                    "dtype first", "\n\n    A sum (the stage ``<name>.sum``, in float32 for "
                    "float16/bfloat16 values) divided by\n    the number of elements reduced.")


def _arg(op: str, x: Tensor, axis: Axis, keepdims: bool, dtype: str, select_last_index: bool,
         name: str) -> Tensor:
    a, axes = _common(op, name, x, axis, keepdims, "number", allow_empty=False)
    if dtype not in ("int32", "int64"):
        a.fail(f"dtype must be 'int32' or 'int64' (the index's dtype), got {dtype!r:.60}",
               DTypeError)
    a.flag("select_last_index", select_last_index)
    shape, rks, index = _reduced(x, axes, keepdims)
    if dtype == "int32" and _past_int32(rks):
        # (the position would be truncated to int32: a wrong index, never an error)
        a.fail(f"the positions over the reduced axes reach {_positions(rks) - 1}, past "
               f"int32's 2**31 - 1: give dtype='int64'", DTypeError)
    big = op == "argmax"
    floats = _dt.is_float(x.dtype)
    # an int64 index counted in int32 where every flat position fits (half the registers
    # per vector of values), widened once per result (the stage ``<name>``)
    inner = "int32" if dtype == "int64" and INT32_INDEX and _fits_int32(rks) else dtype

    def better(p, q, first=None):
        """Whether ``p = (index, value)`` is kept over ``q``: the extreme value, the first
        (or last) index among equal ones, and a NaN over any number (numpy's first NaN).
        ``first``: whether ``p``'s index is the one to keep among equal values, when
        known (``p`` holds elements before ``q``'s: True for the first index)."""
        (pi, pv), (qi, qv) = p, q
        if first is None:
            first = pi > qi if select_last_index else pi < qi
            beats = (pv > qv) if big else (pv < qv)
            wins = beats | ((pv == qv) & first)
            if floats:
                wins = wins | ((pv != pv) & ((qv == qv) | first))
        elif first:   # (an ordered compare: a NaN is neither)
            wins = (pv >= qv) if big else (pv <= qv)
            if floats:
                wins = wins | (pv != pv)
        else:
            wins = (pv > qv) if big else (pv < qv)
            if floats:
                wins = wins | ((pv != pv) & (qv == qv))
        # the identity (index -1) loses to every element, whatever its value
        return (qi < 0) | ((pi >= 0) & wins)

    def pick(c, p, q):
        return (_te.if_then_else(c, p[0], q[0]), _te.if_then_else(c, p[1], q[1]))

    def combine(p, q):
        return pick(better(p, q), p, q)

    def combine_in_order(p, q):   # (p's elements come before q's)
        return pick(better(p, q, first=not select_last_index), p, q)

    def identity(ti, tv):
        return (Const(-1, ti), _te.min_value(tv) if big else _te.max_value(tv))

    reducer = Reducer(op, combine, identity, fcombine_in_order=combine_in_order)
    # the flat (row-major) position over the reduced axes
    strides, flat = [], None
    for k in reversed(rks):
        term = k.var.astype(inner)
        for e in strides:
            term = term * e
        flat = term if flat is None else flat + term
        strides.append(k.dom.extent.astype(inner))

    def f(*i):
        return reducer((flat, x[index(i)]), axis=rks)

    idx, _val = _te.compute(shape, f, name=name if inner == dtype else f"{name}.acc",
                            tag=f"reduce_{op}")
    return _rounded(idx, dtype, name, tag=f"reduce_{op}")


#: whether an int64 argmax/argmin counts its positions in int32 where they all fit (the
#: reduction ``<name>.acc``, widened into ``<name>``); off: int64 throughout
INT32_INDEX = True


def _fits_int32(rks) -> bool:
    """Whether every flat position over the reduce axes ``rks`` fits in int32 (so do the
    identity -1 and the strides): constant extents whose product is at most 2**31 - 1,
    or one axis whose extent is an int32 (symbolic) value."""
    if len(rks) == 1 and not isinstance(rks[0].dom.extent, Const):
        return rks[0].dom.extent.dtype == "int32"
    n = 1
    for k in rks:
        e = k.dom.extent
        if not isinstance(e, Const):
            return False
        n *= int(e.value)
    return n <= 2 ** 31 - 1


def _positions(rks) -> int:
    """How many flat positions the constant extents of ``rks`` make."""
    n = 1
    for k in rks:
        n *= int(k.dom.extent.value)
    return n


def _past_int32(rks) -> bool:
    """Whether the reduce axes ``rks`` have constant extents whose flat positions pass
    int32 (symbolic ones are checked when the kernel is called)."""
    return builtins.all(isinstance(k.dom.extent, Const) for k in rks) and \
        _positions(rks) > 2 ** 31 - 1


def _arg_doc(op: str, ref: str, what: str) -> str:
    return f"""The position of the {what} over ``axis`` (``{ref}``, TOPI's ``{op}``): the
    first one (the last with ``select_last_index``); a NaN counts as the {what} (numpy's).

    With several axes (or None: all of them), the position is the row-major flat index
    over the reduced axes, as numpy's ``{op}`` of the flattened tensor.  The output is the
    first output ``<name>.v0`` of a two-output compute (the index and the value), counted
    in ``dtype``: over int32 symbolic extents whose flat positions int32 cannot hold, the
    call is refused (give ``dtype="int64"``, or declare the sizes ``tc.var(..., "int64")``);
    over constant extents of more than 2**31 - 1 positions, ``dtype="int32"`` is refused.
    An int64 index whose positions all fit in int32 (constant extents whose product is
    below 2**31, or one int32 symbolic axis) is counted in int32 by the compute
    ``<name>.acc`` (its output ``<name>.acc.v0``) and widened by the stage ``<name>``.

    Parameters
    ----------
    x : Tensor
        A float or integer tensor, any shape; extents may be symbolic.
    axis : int or tuple of int or None, optional
        The axes reduced (negative ones count from the end); None (the default): all.
    keepdims : bool, optional
        Keep each reduced axis, with extent 1.
    dtype : str, optional
        The index's dtype: ``"int32"`` (TOPI's, the default) or ``"int64"`` (torch's).
    select_last_index : bool, optional
        Give the last position of the {what} instead of the first (TOPI's flag).
    name : str, optional
        The compute's name.

    Returns
    -------
    Tensor
        The positions, of ``dtype``; not differentiable.

    Raises
    ------
    ShapeError
        For an axis out of range or given twice, or ``axis=()``.
    DTypeError
        For a bool tensor (use ``any``/``all``), an index dtype other than int32/int64, or
        int32 over constant extents of more than 2**31 - 1 positions.
    """


def argmax(x: Tensor, axis: Axis = None, keepdims: bool = False, dtype: str = "int32",
           select_last_index: bool = False, name: str = "argmax") -> Tensor:
    return _arg("argmax", x, axis, keepdims, dtype, select_last_index, name)


def argmin(x: Tensor, axis: Axis = None, keepdims: bool = False, dtype: str = "int32",
           select_last_index: bool = False, name: str = "argmin") -> Tensor:
    return _arg("argmin", x, axis, keepdims, dtype, select_last_index, name)


argmax.__doc__ = _arg_doc("argmax", "numpy.argmax", "maximum")
argmin.__doc__ = _arg_doc("argmin", "numpy.argmin", "minimum")


def _logic(op: str, x, axis, keepdims, name, reducer):
    _, axes = _common(op, name, x, axis, keepdims, ("bool",))
    shape, rks, index = _reduced(x, axes, keepdims)
    if not rks:
        return _te.compute(x.shape, lambda *i: x[i], name=name, tag="elemwise")
    return _te.compute(shape, lambda *i: reducer(x[index(i)], axis=rks), name=name,
                       tag=f"reduce_{op}")


def all(x: Tensor, axis: Axis = None, keepdims: bool = False,  # noqa: A001
        name: str = "all") -> Tensor:
    return _logic("all", x, axis, keepdims, name, _ALL)


def any(x: Tensor, axis: Axis = None, keepdims: bool = False,  # noqa: A001
        name: str = "any") -> Tensor:
    return _logic("any", x, axis, keepdims, name, _ANY)


_LOGIC = """Whether {what} element of a bool tensor over ``axis`` is true (``{ref}``).

    Parameters
    ----------
    x : Tensor
        A bool tensor (compare a number tensor first, e.g. ``x != 0``), any shape.
    axis : int or tuple of int or None, optional
        The axes reduced (negative ones count from the end); None (the default): all.
    keepdims : bool, optional
        Keep each reduced axis, with extent 1.
    name : str, optional
        The output stage's name.

    Returns
    -------
    Tensor
        A bool tensor ({empty} for an empty reduction).

    Raises
    ------
    ShapeError
        For an axis out of range or given twice.
    DTypeError
        For a tensor that is not bool.
    """
all.__doc__ = _LOGIC.format(what="every", ref="numpy.all", empty="True")
any.__doc__ = _LOGIC.format(what="any", ref="numpy.any", empty="False")
