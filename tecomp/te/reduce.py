"""Reducers: ``tc.sum``, ``tc.max``, ``tc.min``, ``tc.prod`` and ``tc.comm_reducer``.

A reducer is called as ``reducer(expr, axis=k, where=cond)`` inside a compute body.
``tc.max(a, b)`` / ``tc.min(a, b)`` with two expressions and no ``axis`` is the
elementwise maximum/minimum (as in TVM); ``tc.maximum``/``tc.minimum`` are aliases.
"""
from __future__ import annotations

import weakref

from ..errors import ComputeError, ExprError
from ..ir import dtype as _dt
from ..ir.expr import CommReducer, Const, Expr, IterVar, Reduce, Var, as_expr
from ..ir import op as _op


#: every Reducer made (the built-ins and tc.comm_reducer's), for :func:`reducer_of`
_REDUCERS: "weakref.WeakSet[Reducer]" = weakref.WeakSet()


def reducer_of(combiner: CommReducer):
    """The Reducer whose combiner (for some dtype) ``combiner`` is, or None."""
    for red in list(_REDUCERS):
        if any(c is combiner for c in red._cache.values()):
            return red
    return None


class Reducer:
    def __init__(self, name, fcombine, fidentity, elementwise=None):
        self.name = name
        self.fcombine = fcombine
        self.fidentity = fidentity
        self.elementwise = elementwise
        self._cache = {}
        _REDUCERS.add(self)

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

    def __call__(self, expr, *args, axis=None, where=None, **kw):
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
        src = as_expr(expr)
        if isinstance(src, Reduce):
            raise ComputeError(
                f"tc.{self.name}: the reduced expression is itself a reduction; nested "
                "reductions are not allowed: reduce over several axes at once with axis=[k1, k2]")
        cond = Const(True, "bool") if where is None else _op._as_bool(where, f"tc.{self.name} where=")
        return Reduce(self.combiner(src.dtype), src, axes, cond, src.dtype)

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


def comm_reducer(fcombine, fidentity, name: str = "reduce") -> Reducer:
    """A user reducer: ``fcombine(x, y)`` must be commutative and associative, and
    ``fidentity(dtype)`` its identity (e.g. ``comm_reducer(lambda x, y: x*y,
    lambda t: tc.const(1, t), name="prod")``)."""
    if not callable(fcombine) or not callable(fidentity):
        raise ExprError("tc.comm_reducer(fcombine, fidentity, name): both must be callables")
    return Reducer(name, fcombine, fidentity)


sum = Reducer("sum", lambda x, y: x + y, lambda t: Const(0, t) if not _dt.is_float(t) else Const(0.0, t))  # noqa: A001
max = Reducer("max", lambda x, y: _op.maximum(x, y), _min_value, _op.maximum)  # noqa: A001
min = Reducer("min", lambda x, y: _op.minimum(x, y), _max_value, _op.minimum)  # noqa: A001
prod = Reducer("prod", lambda x, y: x * y, lambda t: Const(1, t) if not _dt.is_float(t) else Const(1.0, t))
