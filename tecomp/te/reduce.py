"""Reducers: ``tc.sum``, ``tc.max``, ``tc.min``, ``tc.prod`` and ``tc.comm_reducer``.

A reducer is called as ``reducer(expr, axis=k, where=cond)`` inside a compute body.
``tc.max(a, b)`` / ``tc.min(a, b)`` with two expressions and no ``axis`` is the
elementwise maximum/minimum (as in TVM); ``tc.maximum``/``tc.minimum`` are aliases.
"""
from __future__ import annotations

import weakref
from typing import Any, Callable, Optional, Sequence, Tuple, Union

from ..errors import ComputeError, ExprError
from ..ir import dtype as _dt
from ..ir.expr import CommReducer, Const, Expr, IterVar, Reduce, TupleCommReducer, Var, as_expr
from ..ir import op as _op

#: The ``attrs`` key (value True) of a compute whose sum's ``where=`` leaves out only
#: terms that are zero products, such as a convolution's taps on its zero padding
#: (``tecomp.nn``'s convolutions set it).  Lowering may then test the condition or
#: compute those terms anyway, whichever is cheaper: a term of the condition that reads
#: a vectorized loop is dropped rather than tested in every lane, and ``tensorize``
#: computes the intrinsic's full sum.  The value is the same where the operands are
#: finite (a skipped ``0 * inf`` is NaN when computed).  The pragma ``zero_terms`` on
#: any loop of the stage has lowering compute them all (constant tap loops).  A ``where=`` that excludes
#: nonzero terms must not carry it; ``rfactor`` drops it when it adds its tail guard.
ZERO_WHERE = "where_zero_terms"


#: every Reducer made (the built-ins and tc.comm_reducer's), for :func:`reducer_of`
_REDUCERS: "weakref.WeakSet[Reducer]" = weakref.WeakSet()


def reducer_of(combiner: CommReducer):
    """The Reducer whose combiner (for some dtype) ``combiner`` is, or None."""
    for red in list(_REDUCERS):
        if any(c is combiner for c in red._cache.values()):
            return red
    return None


class Reducer:
    """A reducer: ``reducer(expr, axis=k, where=cond)`` inside a compute body (the
    built-in ``tc.sum``, ``tc.max``, ``tc.min``, ``tc.prod``, or one made by
    :func:`comm_reducer`).

    Parameters
    ----------
    name : str
        Its name in the IR.
    fcombine : callable
        ``fcombine(x, y)``, commutative and associative.
    fidentity : callable
        ``fidentity(dtype)``, the identity of ``fcombine``.
    elementwise : callable, optional
        What ``reducer(a, b)`` (two expressions, no axis) computes, if anything.
    scalar_only : bool, optional
        Refuse tuples (only :func:`comm_reducer`'s reducers reduce tuples).
    doc : str, optional
        The docstring of this reducer.
    fcombine_in_order : callable, optional
        A tuple reducer's ``fcombine(x, y)`` where every element combined into ``x``
        comes before every element of ``y`` in the row-major order of the reduce axes
        (:attr:`tecomp.ir.expr.TupleCommReducer.in_order`).
    """

    def __init__(self, name: str, fcombine: Callable[..., Any], fidentity: Callable[..., Any],
                 elementwise: Optional[Callable[..., Any]] = None, scalar_only: bool = False,
                 doc: Optional[str] = None,
                 fcombine_in_order: Optional[Callable[..., Any]] = None):
        if doc is not None:
            self.__doc__ = doc
        self.name = name
        self.fcombine_in_order = fcombine_in_order
        self.fcombine = fcombine
        self.fidentity = fidentity
        self.elementwise = elementwise
        self.scalar_only = scalar_only
        self._cache = {}
        _REDUCERS.add(self)

    def tuple_combiner(self, dtypes: tuple) -> TupleCommReducer:
        """The combiner over tuples of ``dtypes``: ``fcombine(x, y)`` gets two tuples of
        variables and returns a tuple; ``fidentity(*dtypes)`` returns the identity tuple
        (TVM's signatures)."""
        c = self._cache.get(dtypes)
        if c is None:
            n = len(dtypes)
            lhs = tuple(Var(f"x{i}", t) for i, t in enumerate(dtypes))
            rhs = tuple(Var(f"y{i}", t) for i, t in enumerate(dtypes))
            try:
                res = self.fcombine(lhs, rhs)
                ident = self.fidentity(*dtypes)
            except (TypeError, IndexError) as e:
                raise ExprError(
                    f"reducer {self.name} on {n} values: fcombine(x, y) must take two tuples "
                    f"of {n} and return a tuple of {n}, and fidentity({', '.join(f't{i}' for i in range(n))}) "
                    f"a tuple of {n} identities: {e}") from None
            for what, v in (("fcombine", res), ("fidentity", ident)):
                if not isinstance(v, (tuple, list)) or len(v) != n:
                    raise ExprError(
                        f"reducer {self.name} on {n} values: {what} returned {v!r:.80}; it "
                        f"must return a tuple of {n} expressions, one per value")
            res = tuple(as_expr(r) for r in res)
            ident = tuple(as_expr(x, t) for x, t in zip(ident, dtypes))
            ident = tuple(x if x.dtype == t else x.astype(t) for x, t in zip(ident, dtypes))
            for i, (r, t) in enumerate(zip(res, dtypes)):
                if r.dtype != t:
                    raise ExprError(
                        f"reducer {self.name}: element {i} of fcombine's result is {r.dtype} "
                        f"but value {i} is {t}; combine each element into its own dtype "
                        f"(tc.cast it)")
            order = None
            if self.fcombine_in_order is not None:
                order = tuple(as_expr(r) for r in self.fcombine_in_order(lhs, rhs))
                if len(order) != n or any(r.dtype != t for r, t in zip(order, dtypes)):
                    raise ExprError(f"reducer {self.name}: fcombine_in_order must return a "
                                    f"tuple of {n} values of dtypes {dtypes}")
            c = TupleCommReducer(self.name, lhs, rhs, res, ident, order)
            self._cache[dtypes] = c
        return c

    def combiner(self, dtype: str) -> CommReducer:
        c = self._cache.get(dtype)
        if c is None:
            lhs, rhs = Var("x", dtype), Var("y", dtype)
            try:
                res = as_expr(self.fcombine(lhs, rhs))
                ident = as_expr(self.fidentity(dtype), dtype)
            except TypeError as e:
                raise ExprError(f"reducer {self.name}: fcombine(x, y) and fidentity(dtype) "
                                f"must build expressions: {e}") from None
            if ident.dtype != dtype:
                ident = ident.astype(dtype)
            c = CommReducer(self.name, lhs, rhs, res, ident)
            self._cache[dtype] = c
        return c

    def __call__(self, expr: Union[Expr, int, float, Sequence[Expr]], *args: Any,
                 axis: Union[IterVar, Sequence[IterVar], None] = None,
                 where: Optional[Expr] = None, **kw: Any) -> Union[Expr, Tuple[Expr, ...]]:
        if kw:
            raise ExprError(f"tc.{self.name}: unexpected keyword(s) {', '.join(kw)}; "
                            "use axis= and where=")
        if args and axis is None and len(args) == 1 and not isinstance(args[0], (IterVar, list, tuple)):
            if self.elementwise is None:
                raise ExprError(f"tc.{self.name}: give the reduction axis with axis=")
            return self.elementwise(expr, args[0])
        if args:
            if axis is not None or len(args) > 2:
                raise ExprError(f"tc.{self.name}(expr, axis=..., where=...): too many arguments")
            axis = args[0]
            if len(args) == 2:
                where = args[1]
        if axis is None:
            raise ExprError(f"tc.{self.name}: missing axis=; pass the reduce axis (or a list "
                            f"of them) made by tc.reduce_axis")
        axes = tuple(axis) if isinstance(axis, (list, tuple)) else (axis,)
        if not axes:
            raise ExprError(f"tc.{self.name}: axis= is empty")
        for a in axes:
            if not isinstance(a, IterVar) or a.kind != "reduce":
                raise ComputeError(f"tc.{self.name}: axis {a!r} is not a reduce axis; make it "
                                   "with tc.reduce_axis((lo, hi), name)")
        if len(set(axes)) != len(axes):
            raise ComputeError(f"tc.{self.name}: axis {', '.join(a.name for a in axes)} "
                               "repeats an axis")
        cond = Const(True, "bool") if where is None else _op._as_bool(where, f"tc.{self.name} where=")
        if isinstance(expr, (tuple, list)):
            return self._tuple_call(expr, axes, cond)
        src = as_expr(expr)
        if isinstance(src, Reduce):
            raise ComputeError(
                f"tc.{self.name}: the reduced expression is itself a reduction; nested "
                "reductions are not allowed: reduce over several axes at once with axis=[k1, k2]")
        return Reduce(self.combiner(src.dtype), src, axes, cond, src.dtype)

    def _tuple_call(self, exprs, axes, cond):
        """``reducer((a, b), axis=k)``: a tuple reduction, one Reduce per value (return
        them all from a compute: it then has one output per value)."""
        if self.scalar_only or not exprs:
            raise ExprError(
                f"tc.{self.name} reduces one expression, got {'an empty' if not exprs else 'a'} "
                f"{type(exprs).__name__}; to reduce several in one pass, return a tuple of "
                f"reductions from the compute (lambda i: (tc.{self.name}(a, axis=k), "
                f"tc.{self.name}(b, axis=k))), or make a tuple reducer with tc.comm_reducer")
        srcs = tuple(as_expr(e) for e in exprs)
        for s in srcs:
            if isinstance(s, Reduce):
                raise ComputeError(
                    f"{self.name}: a reduced expression is itself a reduction; nested "
                    "reductions are not allowed")
        comb = self.tuple_combiner(tuple(s.dtype for s in srcs))
        return tuple(Reduce(comb, s, axes, cond, s.dtype, i) for i, s in enumerate(srcs))

    def __repr__(self):
        return f"<reducer {self.name}>"


def _max_value(dtype):
    import numpy as np

    if _dt.is_float(dtype):
        return Const(float("inf"), dtype)
    if _dt.is_bool(dtype):
        return Const(True, dtype)
    return Const(int(np.iinfo(dtype).max), dtype)


def _min_value(dtype):
    import numpy as np

    if _dt.is_float(dtype):
        return Const(float("-inf"), dtype)
    if _dt.is_bool(dtype):
        return Const(False, dtype)
    return Const(int(np.iinfo(dtype).min), dtype)


def comm_reducer(fcombine: Callable[..., Any], fidentity: Callable[..., Any],
                 name: str = "reduce") -> Reducer:
    """A user reducer, called like ``tc.sum``: ``reducer(expr, axis=k, where=cond)``.

    A tuple reducer (as TVM's): called on a tuple, ``reducer((a, b), axis=k)``, it gets
    tuples, ``fcombine((x0, x1), (y0, y1)) -> (z0, z1)`` and ``fidentity(t0, t1) -> (i0,
    i1)``, and gives one reduction per element; return them all from a compute, which
    then has one output per element.

    Parameters
    ----------
    fcombine : callable
        ``fcombine(x, y)``: an expression combining two values; it must be commutative
        and associative.
    fidentity : callable
        ``fidentity(dtype)``: the identity of ``fcombine`` for ``dtype`` (a constant).
    name : str, optional
        The reducer's name in the IR.

    Returns
    -------
    Reducer
        The reducer.

    Raises
    ------
    ExprError
        When ``fcombine`` or ``fidentity`` is not callable.

    Examples
    --------
    >>> import tecomp as tc
    >>> n = 8
    >>> A = tc.placeholder((n, 16), name="A")
    >>> k = tc.reduce_axis((0, 16), name="k")
    >>> argmax = tc.comm_reducer(
    ...     lambda x, y: (tc.if_then_else(x[1] >= y[1], x[0], y[0]), tc.max(x[1], y[1])),
    ...     lambda t0, t1: (tc.const(-1, t0), tc.min_value(t1)), name="argmax")
    >>> idx, val = tc.compute((n,), lambda i: argmax((k, A[i, k]), axis=k), name="am")
    """
    if not callable(fcombine) or not callable(fidentity):
        raise ExprError("tc.comm_reducer(fcombine, fidentity, name): both must be callables")
    return Reducer(name, fcombine, fidentity, doc=f"The reducer {name} (made by tc.comm_reducer): "
                   f"``{name}(expr, axis=k, where=cond)``.\n\n" + _REDUCER_PARAMS)


_REDUCER_PARAMS = """Parameters
----------
expr : Expr
    The value reduced, a function of the compute's indices and of the reduce axes
    (a tuple of them for a tuple reducer).
*args : IterVar or Expr
    ``axis`` and ``where`` may also be given by position.
axis : IterVar or sequence of IterVar
    The reduce axes (made by ``tc.reduce_axis``), all reduced at once.
where : Expr, optional
    A bool condition: only the elements where it holds are reduced.
**kw
    Refused (an ExprError names them).

Returns
-------
Expr
    The reduction, to be the whole body of a compute (a tuple of them for a tuple
    reducer).

Raises
------
ExprError
    For a missing ``axis``, an unknown keyword or (a built-in reducer) a tuple (give each value its own
    reduction, or use ``tc.comm_reducer``).
ComputeError
    For an axis that is not a reduce axis, a repeated axis or a nested reduction.
"""


def _reducer_doc(what: str, elementwise: str = "") -> str:
    return f"""{what}

``tc.{{name}}(expr, axis=k, where=cond)`` inside a compute body; the identity of an
empty reduction is {{ident}}.{elementwise}

""" + _REDUCER_PARAMS + """
Examples
--------
>>> import tecomp as tc
>>> A = tc.placeholder((8, 16), name="A")
>>> k = tc.reduce_axis((0, 16), name="k")
>>> R = tc.compute((8,), lambda i: tc.{name}(A[i, k], axis=k), name="R")
"""


_PAIR = ("  With two expressions and no axis, ``tc.{name}(a, b)`` is the elementwise "
         "{name}imum (as ``tc.{name}imum``, and as TVM).")

sum = Reducer("sum", lambda x, y: x + y, lambda t: Const(0, t) if not _dt.is_float(t) else Const(0.0, t),  # noqa: A001
             scalar_only=True, doc=_reducer_doc("The sum over reduce axes.").format(
                 name="sum", ident="0"))
max = Reducer("max", lambda x, y: _op.maximum(x, y), _min_value, _op.maximum, scalar_only=True,  # noqa: A001
              doc=_reducer_doc("The maximum over reduce axes.", _PAIR).format(
                  name="max", ident="the dtype's smallest value (-inf for floats)"))
min = Reducer("min", lambda x, y: _op.minimum(x, y), _max_value, _op.minimum, scalar_only=True,  # noqa: A001
              doc=_reducer_doc("The minimum over reduce axes.", _PAIR).format(
                  name="min", ident="the dtype's largest value (+inf for floats)"))
prod = Reducer("prod", lambda x, y: x * y, lambda t: Const(1, t) if not _dt.is_float(t) else Const(1.0, t),
               scalar_only=True, doc=_reducer_doc("The product over reduce axes.").format(
                   name="prod", ident="1"))


def min_value(dtype: str) -> Const:
    """The smallest value of ``dtype`` (-inf for floats, False for bool).

    Parameters
    ----------
    dtype : str
        A dtype.

    Returns
    -------
    Const
        The constant, e.g. an argmax's identity.
    """
    return _min_value(_dt.canon(dtype))


def max_value(dtype: str) -> Const:
    """The largest value of ``dtype`` (+inf for floats, True for bool).

    Parameters
    ----------
    dtype : str
        A dtype.

    Returns
    -------
    Const
        The constant, e.g. an argmin's identity.
    """
    return _max_value(_dt.canon(dtype))
