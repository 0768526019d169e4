"""``s.rfactor(C, axis)``: factor a reduction into a partial-reduction tensor.

For ``C[i] = sum(A[i, k], k)`` with ``k`` split into ``(ko, ki)``, ``rfactor(C, ki)``
makes ``C.rf[ki, i] = sum(A[i, ko*f + ki], ko)`` (``ki`` is now a data-parallel axis,
put at position ``factor_axis``) and ``C[i] = sum(C.rf[ki, i], ki)``.  The other leaf
axes derived from the reduce axes stay reductions of ``C.rf``; a tail that does not
divide becomes part of the reduction's ``where=`` condition.  Reduce axes may be fused
first (``fuse(r1, r2)``, then split or not): a global pooling's plane as one run, each
axis recovered as ``run // extent(r2)`` and ``run % extent(r2)``.  ``C``'s stage is reset
(its loops are those of the new reduction).

A multi-output reduction (a tuple reducer: ``tc.sum(x), tc.sum(x * x)`` in one compute,
an argmax) is factored whole: ``C.rf`` has one output per output of ``C`` (the tensor
returned is the first, ``.op.output(k)`` the others), all computed in one loop nest.
"""
from __future__ import annotations

from ..errors import ScheduleError
from ..ir import op as _op
from ..ir.expr import (
    LT, And, Const, IterVar, ProducerLoad, Range, Reduce, Select, TupleCommReducer, Var,
)
from ..ir.functor import collect, map_combiner, substitute
from ..ir.op import if_then_else
from ..te.reduce import ZERO_WHERE
from ..te.tensor import ComputeOp, Tensor
from .relations import Fuse, Split, _with_body, covering_extent, reduce_in_order


def rfactor(sch, tensor, axis, factor_axis: int = 0):
    if not isinstance(tensor, Tensor):
        raise ScheduleError(f"rfactor: tensor must be a Tensor, got {tensor!r}")
    st = sch[tensor]
    op = st.op
    if not isinstance(op.bodies[0], Reduce):
        raise ScheduleError(f"rfactor on stage {st.name}: it is not a reduction; rfactor splits "
                            "the reduction of a tc.sum/max/min compute")
    iv = st._iv(axis, "rfactor")
    if iv.kind != "reduce":
        raise ScheduleError(
            f"rfactor on stage {st.name}: axis {iv.name} is a data-parallel axis; rfactor takes "
            f"an axis of the reduction ({', '.join(x.name for x in st.leaf_iter_vars if x.kind == 'reduce')})")
    ndim = len(op.axis)
    if not isinstance(factor_axis, int) or not 0 <= factor_axis <= ndim:
        raise ScheduleError(f"rfactor on stage {st.name}: factor_axis={factor_axis!r} must be an "
                            f"int in [0, {ndim}]")
    # extents of every reduce-derived var (constant or symbolic)
    ext = {r: r.dom.extent for r in op.reduce_axis}
    for rel in st.relations:
        if isinstance(rel, Fuse) and rel.outer in ext and rel.inner in ext:
            # (fused reduce axes: a global pooling's whole plane as one run)
            # (in the fused axis's type: int64 where the product passes int32's range)
            dt = rel.fused.var.dtype
            ext[rel.fused] = _op.mul(_op.widen(ext[rel.outer], dt), _op.widen(ext[rel.inner], dt))
        elif isinstance(rel, Split) and rel.parent in ext:
            pe = ext[rel.parent]
            # (a factor or nparts past a constant extent covers it in one piece, as
            # lowering does: C.rf gets the extent, not a factor of 2**31)
            if rel.factor is not None:
                ext[rel.inner] = _at_most(rel.factor, pe)
                ext[rel.outer] = _op.ceildiv(pe, rel.factor)
            else:
                ext[rel.outer] = _at_most(rel.nparts, pe)
                ext[rel.inner] = _op.ceildiv(pe, rel.nparts)
    red_leaves = [x for x in st.leaf_iter_vars if x.kind == "reduce"]
    data_vars = {a.var for a in op.axis}
    if _uses(ext[iv], data_vars):
        raise ScheduleError(
            f"rfactor on stage {st.name}: the extent of {iv.name} depends on an output index "
            f"(the reduction's range is not the same for every output), so it cannot become "
            f"an axis of {op.name}.rf; split the reduction by a constant factor and rfactor "
            "the inner axis")
    # new vars: the factored axis becomes data-parallel, the rest reduce axes of C.rf
    new_var = {}
    rf_axis_iv = _axis(iv, ext[iv], "data_par")
    new_var[iv] = rf_axis_iv.var
    rf_reduce = []
    for x in red_leaves:
        if x is iv:
            continue
        nx = _axis(x, ext[x], "reduce")
        new_var[x] = nx.var
        rf_reduce.append(nx)
    # express the original reduce axes through the leaves
    value = {x: new_var[x] for x in red_leaves}
    conds = []
    for rel in reversed(st.relations):
        if isinstance(rel, Fuse) and rel.fused in value:
            inner = _op.widen(ext[rel.inner], rel.fused.var.dtype)
            value[rel.outer] = _op.floordiv(value[rel.fused], inner)
            value[rel.inner] = _op.floormod(value[rel.fused], inner)
        elif isinstance(rel, Split) and rel.parent in ext:
            v = _op.add(_op.mul(value[rel.outer], ext[rel.inner]), value[rel.inner])
            value[rel.parent] = v
            cover = _op.mul(ext[rel.outer], ext[rel.inner])
            if not (isinstance(cover, Const) and isinstance(ext[rel.parent], Const)
                    and cover.value == ext[rel.parent].value):
                conds.append(_op.compare(LT, v, ext[rel.parent]))
    out_axis = [IterVar(Var(a.var.name, a.var.dtype), a.dom, "data_par") for a in op.axis]
    vmap = {a.var: b.var for a, b in zip(op.axis, out_axis)}
    # a reduction whose range depends on an output index (a triangular sum over
    # range(n)): the extents and tail guards name C.rf's own output axes
    conds = [substitute(c, vmap) for c in conds]
    rf_reduce = [IterVar(x.var, Range(x.dom.min, substitute(x.dom.extent, vmap)), "reduce")
                 for x in rf_reduce]
    for r in op.reduce_axis:
        # (an axis split past int32 is int64; the original axis keeps its own type)
        vmap[r.var] = _op.add(r.dom.min, value[r]).astype(r.var.dtype)
    bodies = op.bodies
    body = bodies[0]
    cond = substitute(body.condition, vmap)
    guard = None
    for c in conds:
        guard = c if guard is None else _and(guard, c)
    if guard is not None and _reads_memory(cond):
        # And evaluates both sides: the tail guard must make the where= condition (which
        # reads a tensor, maybe out of range in the tail) lazy: g && (g ? cond : false)
        cond = _and(guard, Select(guard, cond, Const(False, "bool"), "bool"))
    else:
        for c in conds:
            cond = _and(cond, c)
    srcs = [substitute(b.source, vmap) for b in bodies]
    # (a user reducer's combiner and identity may read the output indices too)
    comb = map_combiner(body.combiner, lambda e: substitute(e, vmap))
    # C.rf visits each of its outputs' points in the original order only where C's
    # reduce loops ran in it; C then combines partials, which interleave
    in_order = reduce_in_order(op, st.relations, st.leaf_iter_vars)
    comb = _without_in_order(comb) if not in_order else comb
    idents = comb.identity if len(bodies) > 1 else (comb.identity,)
    rf_axes = list(out_axis)
    rf_axes.insert(factor_axis, rf_axis_iv)
    if rf_reduce:
        rf_bodies = [Reduce(comb, src, tuple(rf_reduce), cond, b.dtype, b.value_index)
                     for src, b in zip(srcs, bodies)]
    else:
        rf_bodies = [src if _is_true(cond) else if_then_else(cond, src, ident)
                     for src, ident in zip(srcs, idents)]
    # (the tail guard leaves out terms that are not zero: ZERO_WHERE no longer holds)
    attrs = {k: v for k, v in op.attrs.items() if k != ZERO_WHERE} if conds else op.attrs
    rf_op = ComputeOp(f"{op.name}.rf", rf_axes,
                      tuple(rf_bodies) if len(bodies) > 1 else rf_bodies[0], op.tag, attrs)
    rf = rf_op.output(0)
    rst = type(st)(rf_op, sch)   # a Stage (this module does not import schedule.py)
    sch.stages.insert(sch.stages.index(st), rst)
    sch._stage_of[id(rf_op)] = rst
    # C now reduces C.rf over the factored axis
    k2 = _axis(iv, ext[iv], "reduce")
    idx = [a.var for a in op.axis]
    idx.insert(factor_axis, k2.var)
    new_bodies = tuple(Reduce(_without_in_order(b.combiner),
                              ProducerLoad(t, tuple(idx), t.dtype), (k2,),
                              Const(True, "bool"), b.dtype, b.value_index)
                       for b, t in zip(bodies, rf_op._outs))
    sch._replace_op(st, _with_body(op, new_bodies if len(bodies) > 1 else new_bodies[0]))
    st._reset_loops()
    return rf


def _at_most(part, extent):
    """``part`` (a split's factor or nparts), or ``extent`` where both are constants and
    ``part`` is larger: the same loop, covered in one piece; a big constant ``part`` of a
    symbolic extent covers ``min(part, extent)``, as lowering runs it."""
    pv = part if isinstance(part, int) else getattr(part, "value", None)
    ev = getattr(extent, "value", None)
    if isinstance(pv, int) and isinstance(ev, int) and pv > ev:
        return Const(ev, part.dtype) if isinstance(part, Const) else ev
    return covering_extent(part, extent) if isinstance(part, Const) else part


def _uses(e, variables) -> bool:
    return bool(collect(e, lambda n: isinstance(n, Var) and n in variables))


def _reads_memory(e) -> bool:
    return bool(collect(e, lambda n: isinstance(n, ProducerLoad)))


def _is_true(c):
    return isinstance(c, Const) and c.value is True


def _and(a, b):
    if _is_true(a):
        return b
    return And(a, b)


def _axis(like: IterVar, extent, kind: str) -> IterVar:
    """A new axis named and typed as ``like`` (an int64 axis stays int64) over
    ``[0, extent)``."""
    dt = like.var.dtype
    return IterVar(Var(like.name, dt), Range(Const(0, dt), _op.widen(extent, dt)), kind)


def _without_in_order(comb):
    """``comb`` without its :attr:`~tecomp.ir.expr.TupleCommReducer.in_order` result."""
    if isinstance(comb, TupleCommReducer) and comb.in_order is not None:
        return TupleCommReducer(comb.name, comb.lhs, comb.rhs, comb.result, comb.identity)
    return comb
