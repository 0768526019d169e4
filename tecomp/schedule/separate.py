"""``s.separate(C, k)``: reduce a window in two steps, its other axes first.

For a pooling ``C[y, x] = max(P[y * 2 + ky, x * 2 + kx], axis=(ky, kx))``,
``separate(C, kx)`` makes ``C.sep[y, w] = max(P[y * 2 + ky, w], axis=ky)`` (the window's
rows reduced over every element ``w`` of the data's row, each once) and ``C[y, x] =
max(C.sep[y, x * 2 + kx], axis=kx)``: the window's ``K`` taps along the row read from
``C.sep``, not ``K * rows`` taps from the data.  Where windows overlap along the row
(a stride below the kernel) the data row's elements are reduced once, not once per
window that holds them.

It applies where ``k`` steps along one dimension of the one tensor read through it,
that dimension's index is ``g(x) + h(k)`` for one output axis ``x`` (read nowhere else),
and the reduction has no ``where=`` condition.  The result is the same for max and min
(an order-free combiner; NaN propagates through both steps); a sum adds in another
order (a float32 window of ``R x K`` terms: rows of ``R`` first, then ``K`` of them),
rounding differently in the last bits.  ``C``'s stage is reset (its loops are those of
the reduction over ``k``)."""
from __future__ import annotations

from ..errors import ScheduleError
from ..ir.expr import Const, IterVar, ProducerLoad, Range, Reduce, TupleCommReducer, Var
from ..ir.functor import Mutator, collect, map_combiner, substitute, uses_var
from ..ir.simplify import simplify
from ..te.tensor import ComputeOp, Tensor
from .relations import _with_body


def separate(sch, tensor, axis) -> Tensor:
    if not isinstance(tensor, Tensor):
        raise ScheduleError(f"separate: tensor must be a Tensor, got {tensor!r:.60}")
    st = sch[tensor]
    st._single_output("separate")
    op = st.op
    body = op.bodies[0]
    what = f"separate on stage {st.name}"
    if not isinstance(body, Reduce) or isinstance(body.combiner, TupleCommReducer):
        raise ScheduleError(f"{what}: it is not a single reduction; separate takes a "
                            "tc.sum/max/min compute over a window")
    if st.relations or st.iter_attrs or st.leaf_iter_vars != st.all_iter_vars:
        raise ScheduleError(f"{what}: its loops are already transformed; call separate "
                            "first (it makes new loops), then schedule them")
    if not isinstance(axis, IterVar) or not any(axis is r for r in op.reduce_axis):
        same = isinstance(axis, IterVar) and any(r.name == axis.name for r in op.reduce_axis)
        raise ScheduleError(
            f"{what}: axis {getattr(axis, 'name', axis)!r:.40} is not one of its reduce axes "
            f"({', '.join(r.name for r in op.reduce_axis)}); " + (
                "it is another object of the same name (an axis of the stage before a "
                "separate, rfactor or cache_write made new ones, or of another stage): take "
                f"it from s[{st.name}].op.reduce_axis" if same else
                "give the window's axis along the data's row"))
    k = axis
    others = [r for r in op.reduce_axis if r is not k]
    cond = simplify(body.condition)
    if not others or not (getattr(cond, "value", None) is True):
        raise ScheduleError(
            f"{what}: " + ("it reduces over one axis only: there is nothing to reduce "
                           "first" if not others else "its reduction has a where= "
                           "condition (windows of other sizes): it is not separable"))
    loads = collect(body.source, lambda n: isinstance(n, ProducerLoad)
                    and uses_var(n, k.var))
    data_vars = [a.var for a in op.axis]
    found = _separable_load(loads, k, data_vars, others)
    if found is None:
        raise ScheduleError(
            f"{what}: {k.name} must step along one dimension of one tensor read, as g(x) + "
            f"h({k.name}) of one output axis x read nowhere else (a pooling window's "
            "axis along the row); this reduction is not separable over it")
    ld, p, q = found
    x = op.axis[q]
    # C.sep: every output axis but x, x replaced by w over the data's dimension p
    new_axis = []
    vmap = {}
    for d, iv in enumerate(op.axis):
        if d == q:
            w = IterVar(Var(f"{x.var.name}.w", x.var.dtype),
                        Range(Const(0, x.var.dtype), ld.producer.shape[p]), "data_par")
            new_axis.append(w)
        else:
            nv = IterVar(Var(iv.var.name, iv.var.dtype), iv.dom, "data_par")
            vmap[iv.var] = nv.var
            new_axis.append(nv)
    red = []
    for r in others:
        nv = IterVar(Var(r.var.name, r.var.dtype),
                     Range(substitute(r.dom.min, vmap), substitute(r.dom.extent, vmap)),
                     "reduce")
        vmap[r.var] = nv.var
        red.append(nv)
    idx = list(ld.indices)
    idx[p] = w.var
    moved = ProducerLoad(ld.producer, tuple(idx), ld.dtype)
    src = _replace(body.source, ld, moved)
    src = substitute(src, vmap)
    if uses_var(src, k.var) or uses_var(src, x.var):
        raise ScheduleError(
            f"{what}: its window reads {k.name} or {x.name} outside {ld.producer.name}'s "
            "index along the row; this reduction is not separable over it")
    comb = map_combiner(body.combiner, lambda e: substitute(e, vmap))
    sep_op = ComputeOp(f"{op.name}.sep", new_axis,
                       Reduce(comb, src, tuple(red), body.condition, body.dtype), op.tag,
                       op.attrs)
    sep = sep_op.output(0)
    sst = type(st)(sep_op, sch)
    sch.stages.insert(sch.stages.index(st), sst)
    sch._stage_of[id(sep_op)] = sst
    # C now reduces C.sep over k: C.sep[..., g(x) + h(k), ...]
    k2 = IterVar(Var(k.var.name, k.var.dtype), k.dom, "reduce")
    at = [a.var for a in op.axis]
    at[q] = substitute(ld.indices[p], {k.var: k2.var})
    new_body = Reduce(body.combiner, ProducerLoad(sep, tuple(at), sep.dtype), (k2,),
                      body.condition, body.dtype)
    sch._replace_op(st, _with_body(op, new_body))
    st._reset_loops()
    return sep


def _separable_load(loads, k, data_vars, others):
    """``(load, p, q)``: the one load of the window along ``k`` (the same at every
    place it is read), its dimension ``p`` indexed ``g(x) + h(k)``, ``x`` the output
    axis at position ``q``; None where there is none such."""
    if not loads or any(str(ld) != str(loads[0]) for ld in loads):
        return None
    ld = loads[0]
    dims = [i for i, e in enumerate(ld.indices) if uses_var(e, k.var)]
    if len(dims) != 1:
        return None
    p = dims[0]
    e = ld.indices[p]
    g = simplify(substitute(e, {k.var: k.dom.min}))
    h = simplify(e - g)
    if any(uses_var(h, v) for v in data_vars) or any(uses_var(e, r.var) for r in others):
        return None
    xs = [q for q, v in enumerate(data_vars) if uses_var(g, v)]
    if len(xs) != 1:
        return None
    q = xs[0]
    if any(uses_var(i, data_vars[q]) for d, i in enumerate(ld.indices) if d != p):
        return None
    return ld, p, q


def _replace(node, old, new):
    """``node`` with every load structurally equal to ``old`` replaced by ``new``."""
    key = str(old)

    class _R(Mutator):
        def visit_ProducerLoad(self, e):
            if e.producer is old.producer and str(e) == key:
                return new
            idx = tuple(self.visit(i) for i in e.indices)
            if all(a is b for a, b in zip(idx, e.indices)):
                return e
            return ProducerLoad(e.producer, idx, e.dtype)

    return _R().visit(node)
