"""The relations between a stage's iteration variables (split, fuse), shared by the
schedule and its primitives."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..ir.expr import Expr, IterVar, Reduce, Var
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


def _derived(name: str, kind: str) -> IterVar:
    return IterVar(Var(name, "int32"), None, kind)


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
