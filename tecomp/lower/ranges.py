"""Ranges of a PrimFunc's variables that every lowering pass may assume."""
from __future__ import annotations

from ..ir.expr import Buffer, Const, Range
from ..ir.functor import free_vars
from ..ir.stmt import PrimFunc


def shape_var_ranges(func: PrimFunc) -> dict:
    """Symbolic extents are non-negative: ``n`` in ``[0, 2**31 - 1)``."""
    out = {}
    for p in func.params:
        if isinstance(p, Buffer):
            for e in p.shape:
                for v in free_vars(e):
                    out[v] = Range(Const(0, "int32"), Const(2**31 - 1, "int32"))
    return out
