"""The relations between a stage's iteration variables (split, fuse), shared by the
schedule and its primitives."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..ir import op as _op
from ..ir.expr import Const, Expr, IterVar, Reduce, Var
from ..ir.simplify import simplify
from ..te.tensor import ComputeOp


@dataclass(eq=False)
class Split:
    """``parent = outer * factor + inner`` (``factor`` or ``nparts`` given)."""

    parent: IterVar
    outer: IterVar
    inner: IterVar
    factor: Optional[Expr]
    nparts: Optional[Expr]
    #: no guard for the tail: the split must divide the axis (checked, see Stage.split)
    disable_predication: bool = False


@dataclass(eq=False)
class Fuse:
    """``fused = outer * extent(inner) + inner``."""

    outer: IterVar
    inner: IterVar
    fused: IterVar


def reduce_in_order(op, relations, leaves) -> bool:
    """Whether a stage of ``op`` with ``relations`` and loop order ``leaves`` visits the
    points of its reduction in the row-major order of ``op``'s reduce axes: its reduce
    loops, outermost first, are those axes split (outer part first) and fused (adjacent,
    outer first) where they stand, not reordered."""
    order = list(op.reduce_axis)
    for rel in relations:
        if isinstance(rel, Split):
            if rel.parent in order:
                i = order.index(rel.parent)
                order[i:i + 1] = [rel.outer, rel.inner]
        elif isinstance(rel, Fuse):
            if rel.outer in order:
                i = order.index(rel.outer)
                if i + 1 >= len(order) or order[i + 1] is not rel.inner:
                    return False
                order[i:i + 2] = [rel.fused]
        else:
            return False
    mine = set(order)
    return [x for x in leaves if x in mine] == order


def _derived(name: str, kind: str, dtype: str = "int32") -> IterVar:
    return IterVar(Var(name, dtype), None, kind)


INT32_MAX = 2**31 - 1


#: a split's constant factor (or nparts) past this is "big": lowering runs its loop over
#: at most the split axis' extent (:func:`covering_extent`)
BIG_SPLIT = 1 << 16


def covering_extent(part: Expr, extent: Expr) -> Expr:
    """The extent of the loop a split makes of ``part`` (its factor, or its nparts) of an
    axis of ``extent``: ``part``, or for a big constant one (past :data:`BIG_SPLIT`)
    ``min(part, extent)``: the iterations past the extent are all guarded off (the other
    loop has one iteration), so a factor of 2**32 + 1 on a small axis runs the axis,
    not 2**32 guarded iterations, even where the loop is not partitioned (a symbolic
    extent's loop is then not a constant: vectorize and unroll refuse it, as they would
    refuse 2**31 lanes or copies), and ``rfactor`` of it makes an axis of that extent.
    Smaller factors keep their constant extent (vectorize, unroll, thread bindings want
    it)."""
    if isinstance(part, Const) and part.value > BIG_SPLIT:
        return simplify(_op.minimum(part, extent))
    return part


def max_extents(op, relations) -> dict:
    """The largest extent each axis of a stage can have (an int), where it is known from
    the constant domains of the operation's axes and the splits and fuses so far: a
    stage computed at another's loop runs over a part of its domain, never more.  An axis
    with a symbolic extent is absent."""
    out = {}
    for iv in list(getattr(op, "axis", ())) + list(getattr(op, "reduce_axis", ())):
        if iv.dom is not None and isinstance(iv.dom.extent, Const):
            out[iv] = int(iv.dom.extent.value)
    for rel in relations:
        if isinstance(rel, Split):
            pe = out.get(rel.parent)
            f = rel.factor if rel.factor is not None else rel.nparts
            f = int(f.value) if isinstance(f, Const) else None
            # (lowering runs a big factor's loop over at most the extent: covering_extent)
            covering = f if f is None or pe is None or f <= BIG_SPLIT else min(f, pe)
            if rel.factor is not None:
                if f is not None:
                    out[rel.inner] = covering
                if pe is not None and f is not None:
                    out[rel.outer] = -(-pe // f)
            else:
                if f is not None:
                    out[rel.outer] = covering
                if pe is not None and f is not None:
                    out[rel.inner] = -(-pe // f)
        elif isinstance(rel, Fuse):
            a, b = out.get(rel.outer), out.get(rel.inner)
            if a is not None and b is not None:
                out[rel.fused] = a * b
    return out


def index_dtype_of(dtypes, largest=None) -> str:
    """The dtype of an axis derived from axes of ``dtypes`` whose extent is at most
    ``largest`` (None: not known when scheduling): int64 where one of them is, or where
    int32 cannot hold the extent; else int32."""
    if "int64" in dtypes or (largest is not None and largest > INT32_MAX):
        return "int64"
    return "int32"


def _with_body(op: ComputeOp, body) -> ComputeOp:
    """A ComputeOp with the same name and axes but another body (a rewritten reader);
    ``body`` is a tuple of them for a multi-output compute."""
    new = ComputeOp.__new__(ComputeOp)
    new.__dict__.update(op.__dict__)
    new.bodies = tuple(body) if isinstance(body, tuple) else (body,)
    first = new.bodies[0]
    new.reduce_axis = tuple(first.axis) if isinstance(first, Reduce) else ()
    new._outs = op._outs  # the user's Tensors keep naming this stage
    return new
