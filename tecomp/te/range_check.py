"""Reads that are provably out of range, caught when a compute is defined.

A read ``T[idx]`` that is always evaluated (not inside an ``if_then_else`` branch, not in a
reduction restricted by ``where=``) is evaluated at the corners of the compute's iteration
domain (the axes with constant extents it depends on).  A corner whose index falls outside
``T``'s constant extent is a real iteration that reads out of range: :class:`ShapeError`
names the compute, the read, the dimension, the value and the iteration.  For affine
indices (the usual case) the corners are where the extremes are, so every such read is
found; for others (``//``, ``%``) a corner may miss one, but what it finds is real.
"""
from __future__ import annotations

import itertools

from ..errors import ShapeError
from ..ir.expr import Add, Cast, Const, FloorDiv, FloorMod, Max, Min, Mul, Reduce, Sub, Var
from ..ir.functor import Visitor, free_vars
from ..ir.printer import to_str

_MAX_VARS = 8


def _eval(e, env):
    """The value of an integer index expression, or None if it is not one we evaluate."""
    t = type(e)
    if t is Const:
        return e.value if isinstance(e.value, int) and not isinstance(e.value, bool) else None
    if t is Var:
        return env.get(e)
    if t is Cast:
        return _eval(e.value, env) if e.dtype.startswith(("int", "uint")) else None
    if t in (Add, Sub, Mul, FloorDiv, FloorMod, Min, Max):
        a, b = _eval(e.a, env), _eval(e.b, env)
        if a is None or b is None:
            return None
        if t is Add:
            return a + b
        if t is Sub:
            return a - b
        if t is Mul:
            return a * b
        if t is Min:
            return min(a, b)
        if t is Max:
            return max(a, b)
        if b == 0:
            return None
        return a // b if t is FloorDiv else a % b
    return None


class _UnguardedLoads(Visitor):
    def __init__(self):
        self.loads = []

    def visit_ProducerLoad(self, e):
        self.loads.append(e)
        self.generic_visit(e)

    def visit_Select(self, e):  # lazy: only the condition is always evaluated
        self.visit(e.cond)

    def visit_Reduce(self, e):
        self.visit(e.condition)
        if isinstance(e.condition, Const) and e.condition.value is True:
            self.visit(e.source)


def check_reads_in_range(name: str, body, axis, defer=None, deferrable=None) -> None:
    """Raise ShapeError if an always-evaluated read of ``body`` is out of range at a corner
    of the domain of ``axis`` (and of the reduction's axes).

    With ``defer`` (a list): a read below 0 in the first dimension of a tensor for which
    ``deferrable(tensor)`` holds (a placeholder: it may be the state of a scan,
    ``state[t - 1, i]``, read only for ``t`` past the scan's first steps) is appended as
    ``(load, domains, message)`` instead, for ``tc.scan`` or ``create_schedule`` to judge."""
    doms = {iv.var: iv.dom for iv in axis}
    if isinstance(body, Reduce):
        for iv in body.axis:
            doms[iv.var] = iv.dom
    v = _UnguardedLoads()
    v.visit(body)
    for load in v.loads:
        err = load_error(name, load, doms)
        if err is None:
            continue
        d, val, msg = err
        if defer is not None and d == 0 and val < 0 and deferrable(load.producer):
            defer.append((load, doms, msg))
            continue
        raise ShapeError(msg)


def load_error(name: str, load, doms):
    """``(dimension, value, message)`` of the first index of ``load`` out of range at a
    corner of ``doms``, or None."""
    t = load.producer
    for d, idx in enumerate(load.indices):
        ext = t.shape[d]
        if not isinstance(ext, Const) or isinstance(idx, Const):
            continue
        vs = free_vars(idx)
        if not vs or len(vs) > _MAX_VARS:
            continue
        corners = []
        for x in vs:
            dom = doms.get(x)
            if dom is None or not isinstance(dom.min, Const) or not isinstance(dom.extent, Const):
                break
            lo = dom.min.value
            corners.append((lo, lo + dom.extent.value - 1))
        else:
            for point in itertools.product(*corners):
                env = dict(zip(vs, point))
                val = _eval(idx, env)
                if val is None:
                    break
                if not 0 <= val < ext.value:
                    at = ", ".join(f"{x.name} = {p}" for x, p in zip(vs, point))
                    return d, val, (
                        f"compute {name}: the read {to_str(load)} is out of range: index "
                        f"{d} ({to_str(idx)}) is {val} at {at}, but dimension {d} of tensor "
                        f"{t.name} has extent {ext.value}; fix the index, or guard the read "
                        f"with tc.if_then_else(cond, {t.name}[...], 0) (padding)")
    return None
