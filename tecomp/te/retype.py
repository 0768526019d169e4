"""The same compute DAG in another float type, or with its symbolic extents bound.

``retype(outputs, inputs, {"float32": "float64"})``: every placeholder, compute,
constant, cast, intrinsic call and reducer whose dtype is a key of the map gets the
mapped dtype; index arithmetic (integers) is untouched.

``retype(outputs, inputs, values={n: 128})``: every use of the variable ``n`` (shapes,
loop domains, bodies) becomes the constant 128, so the schedule and the code see
constant extents.

Used by :mod:`tecomp.torch` to compile an op declared in float32 for float64 tensors
(gradcheck) and to specialise it to the shapes it is called with.  The result is a new
DAG (new operations; loop axes whose domains do not change are shared with the
original), so the original's schedules stay valid.
"""
from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional, Sequence, Tuple

from ..errors import ComputeError
from ..ir import dtype as _dt
from ..ir.expr import CommReducer, Const, Expr, IterVar, Range, TupleCommReducer, Var
from ..ir.functor import node_fields
from ..ir.simplify import simplify
from .reduce import reducer_of
from .extern import ExternOp
from .scatter import ScatterOp
from .tensor import ComputeOp, PlaceholderOp, Tensor

__all__ = ["retype"]


def retype(outputs: Sequence[Tensor], inputs: Sequence[Tensor],
           dtype_map: Optional[Dict[str, str]] = None,
           values: Optional[Dict[Var, int]] = None,
           replace: Optional[Dict[Tensor, Tensor]] = None) -> Tuple[List[Tensor], List[Tensor]]:
    """``(new_outputs, new_inputs)``: the DAG from ``inputs`` to ``outputs`` with each
    dtype in ``dtype_map`` (float types only) replaced and each variable in ``values``
    replaced by its constant.  ``replace`` maps tensors of the DAG to tensors that stand
    for them as they are (e.g. a compute to a placeholder holding its saved values: the
    DAG then reads the placeholder instead of computing it).  Every placeholder the
    outputs read must be among ``inputs`` (or be a value of ``replace``)."""
    dmap = {_dt.canon(k): _dt.canon(v) for k, v in (dtype_map or {}).items()}
    for k, v in dmap.items():
        if not (_dt.is_float(k) and _dt.is_float(v)):
            raise ComputeError(f"retype maps float types to float types, got {k} -> {v}")
    vals = {}
    for var, x in (values or {}).items():
        if not isinstance(var, Var) or not _dt.is_int(var.dtype) or isinstance(x, bool) \
                or not isinstance(x, int):
            raise ComputeError(f"retype: values maps integer variables to ints, got "
                               f"{var!r} -> {x!r}")
        lo, hi = _dt.int_limits(var.dtype)
        if not lo <= x <= hi:
            raise ComputeError(f"retype: {var.name} = {x} does not fit its dtype {var.dtype}; "
                               f"declare it as tc.var({var.name!r}, 'int64')")
        vals[var] = Const(x, var.dtype)
    r = _Retyper(dmap, vals)
    for old_t, new_t in (replace or {}).items():
        r.replaced[id(old_t)] = new_t
    new_inputs = [r.tensor(t) for t in inputs]
    r.inputs_done = True
    return [r.tensor(t) for t in outputs], new_inputs


class _Retyper:
    def __init__(self, dmap, vals):
        self.dmap = dmap
        self.vals = vals
        self.memo: Dict[int, object] = {}
        self.replaced: Dict[int, Tensor] = {}   # id(tensor) -> the tensor standing for it
        self.inputs_done = False

    def dtype(self, d: str) -> str:
        return self.dmap.get(d, d)

    def index(self, e):
        """A shape or domain expression with the bound variables replaced."""
        n = self.node(e)
        return simplify(n) if n is not e else n

    def tensor(self, t: Tensor) -> Tensor:
        hit = self.replaced.get(id(t))
        if hit is not None:
            return hit
        hit = self.memo.get(id(t.op))
        if hit is not None:
            return hit.op.output(t.value_index)
        op = t.op
        if isinstance(op, PlaceholderOp):
            if self.inputs_done:
                raise ComputeError(f"retype: the outputs read placeholder {op.name}, which is "
                                   f"not among the inputs; pass every placeholder they read")
            shape = tuple(self.index(x) for x in op.shape)
            new = PlaceholderOp(op.name, shape, self.dtype(op.dtype)).output(0)
        elif isinstance(op, ComputeOp):
            bodies = tuple(self.node(b) for b in op.bodies)
            new = ComputeOp(op.name, tuple(self.node(iv) for iv in op.axis),
                            bodies if len(bodies) > 1 else bodies[0], op.tag, op.attrs).output(0)
        elif isinstance(op, ExternOp):
            # the same function on the copied inputs (in the new dtypes)
            new = ExternOp(op.name, [self.tensor(t) for t in op.inputs],
                           [tuple(self.index(x) for x in shp) for shp in op.shapes],
                           [self.dtype(d) for d in op.dtypes], op.fcompute, op.tag,
                           op.attrs).output(0)
        elif isinstance(op, ScatterOp):
            new = ScatterOp(op.name, tuple(self.index(x) for x in op.shape), self.dtype(op.dtype),
                            tuple(self.node(iv) for iv in op.domain),
                            tuple(self.node(i) for i in op.index), self.node(op.value),
                            self.node(op.condition), op.tag, op.attrs).output(0)
        elif hasattr(op, "scan_axis"):
            raise ComputeError(
                f"scan {op.name}: this step copies the compute DAG (for other dtypes or shapes, "
                "as tecomp.torch.op does), and cannot copy a scan yet; build the scan with "
                "tc.build and call it directly")
        else:  # pragma: no cover - every operation is one of these
            raise ComputeError(f"retype: cannot copy operation {op!r}")
        self.memo[id(op)] = new
        return new.op.output(t.value_index)

    def node(self, n):
        if isinstance(n, Tensor):
            return self.tensor(n)
        if isinstance(n, tuple):
            items = tuple(self.node(x) for x in n)
            return n if all(a is b for a, b in zip(items, n)) else items
        if isinstance(n, IterVar):
            hit = self.memo.get(id(n))
            if hit is None:
                dom = n.dom
                if isinstance(dom, Range):
                    lo, ext = self.index(dom.min), self.index(dom.extent)
                    if lo is not dom.min or ext is not dom.extent:
                        dom = Range(lo, ext)
                # the loop variable itself stays: the bodies use it
                hit = n if dom is n.dom else dataclasses.replace(n, dom=dom)
                self.memo[id(n)] = hit
            return hit
        if isinstance(n, Var):
            c = self.vals.get(n)
            if c is not None:
                return c
            if n.dtype not in self.dmap:
                return n
            hit = self.memo.get(id(n))
            if hit is None:
                hit = self.memo[id(n)] = Var(n.name, self.dtype(n.dtype))
            return hit
        if isinstance(n, CommReducer):
            hit = self.memo.get(id(n))
            red = reducer_of(n)
            if hit is None and red is not None:
                # the same reducer in the new type (autodiff knows the reducers by identity)
                hit = self.memo[id(n)] = red.combiner(self.dtype(n.lhs.dtype))
            if hit is None:
                hit = self.memo[id(n)] = CommReducer(
                    n.name, self.node(n.lhs), self.node(n.rhs), self.node(n.result),
                    self.node(n.identity))
            return hit
        if isinstance(n, TupleCommReducer):
            hit = self.memo.get(id(n))
            red = reducer_of(n)
            if hit is None and red is not None:
                hit = self.memo[id(n)] = red.tuple_combiner(tuple(self.dtype(x.dtype) for x in n.lhs))
            if hit is None:   # (the tuple of single reducers a multi-output compute made)
                hit = self.memo[id(n)] = TupleCommReducer(
                    n.name, self.node(n.lhs), self.node(n.rhs), self.node(n.result),
                    self.node(n.identity))
            return hit
        if isinstance(n, (Expr, Range)):
            changes = {}
            for f in node_fields(type(n)):
                v = getattr(n, f)
                nv = self.dtype(v) if f == "dtype" else self.node(v)
                if nv is not v:
                    changes[f] = nv
            return dataclasses.replace(n, **changes) if changes else n
        return n
