"""Ranges of a PrimFunc's variables that every lowering pass may assume."""
from __future__ import annotations

from ..ir.expr import Buffer, Const, Range
from ..ir.functor import free_vars
from ..ir.stmt import PrimFunc


def shape_var_ranges(func: PrimFunc) -> dict:
    """Symbolic extents are non-negative: ``n`` in ``[0, 2**31 - 1)`` (an int64 ``n`` in
    ``[0, 2**63 - 1)``)."""
    out = {}
    for p in func.params:
        if isinstance(p, Buffer):
            for e in p.shape:
                for v in free_vars(e):
                    top = 2**63 - 1 if v.dtype == "int64" else 2**31 - 1
                    dt = "int64" if v.dtype == "int64" else "int32"
                    out[v] = Range(Const(0, dt), Const(top, dt))
    return out
