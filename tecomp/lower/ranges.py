"""Ranges of a PrimFunc's variables that every lowering pass may assume.

A symbolic extent is never negative.  An ``int64`` one is also at most
:data:`INT64_EXTENT_MAX` (``2**40``) once the function carries the condition
:func:`extent_checks` makes (every runtime checks ``PrimFunc.attrs["param_checks"]``
before the body runs): a dimension that long cannot be in memory (a stride-0 view aside),
and with it ``n + 31`` or ``n*64`` provably cannot wrap, so the simplifier can prove what a
person would (``min(n // 14, (n + 13) // 14)`` is ``n // 14``, a loop's main part runs
whole tiles).  Without that bound every ``n + c`` may wrap in int64 and the kernel keeps
the general (and much larger) form of each extent.  ``int32`` extents keep the whole of
``[0, 2**31 - 1)``: their index arithmetic is checked by :mod:`tecomp.lower.index_dtype`.
"""
from __future__ import annotations

from ..ir.expr import Buffer, Const, Range, Var
from ..ir.functor import free_vars
from ..ir.stmt import ParamCheck, PrimFunc

#: the largest value of an int64 symbolic extent (a kernel's argument checks enforce it)
INT64_EXTENT_MAX = 1 << 40
#: the ``uses`` text of that condition (the runtimes' messages name it)
EXTENT_USE = f"a symbolic extent (at most 2**40 = {INT64_EXTENT_MAX})"


def _shape_vars(func_or_params):
    params = func_or_params.params if isinstance(func_or_params, PrimFunc) else func_or_params
    seen = {}
    for p in params:
        if isinstance(p, Buffer):
            for e in p.shape:
                for v in free_vars(e):
                    seen.setdefault(v, None)
    return list(seen)


def extent_checks(params) -> tuple:
    """The conditions that bound each int64 variable of the buffer parameters' shapes by
    :data:`INT64_EXTENT_MAX` (to add to ``PrimFunc.attrs["param_checks"]``)."""
    return tuple(ParamCheck(v, 0, (EXTENT_USE,), INT64_EXTENT_MAX)
                 for v in _shape_vars(params) if isinstance(v, Var) and v.dtype == "int64")


def _capped(func: PrimFunc) -> set:
    """The variables ``func``'s argument checks bound by :data:`INT64_EXTENT_MAX`."""
    out = set()
    for pc in func.attrs.get("param_checks", ()) or ():
        if isinstance(pc.expr, Var) and pc.upper is not None and pc.upper <= INT64_EXTENT_MAX \
                and pc.lower >= 0:
            out.add(pc.expr)
    return out


def shape_var_ranges(func: PrimFunc) -> dict:
    """Symbolic extents are non-negative: ``n`` in ``[0, 2**31 - 1)`` (an int64 ``n`` in
    ``[0, 2**40]`` where the function's checks bound it, else ``[0, 2**63 - 1)``)."""
    out = {}
    capped = _capped(func)
    for v in _shape_vars(func):
        if v.dtype == "int64":
            top = INT64_EXTENT_MAX + 1 if v in capped else 2**63 - 1
            out[v] = Range(Const(0, "int64"), Const(top, "int64"))
        else:
            out[v] = Range(Const(0, "int32"), Const(2**31 - 1, "int32"))
    return out
