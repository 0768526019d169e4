"""``s[C].tensorize(axis, intrin)``: check that the loops from ``axis`` inward compute the
intrinsic's declared computation, and describe each operand's region for the backends.

The loops of the region map onto the declared computation's axes in order: its
data-parallel loops onto the intrinsic's axes, its reduction loops onto the intrinsic's
reduce axes, with the same constant extents.  Under that map the stage's expression must
be the declared one, node for node, with each read of a declared placeholder matched by a
read of one buffer whose indices are affine in the region's loops.  The region of that
buffer is then: the element read when every region loop is 0 (``base``), and how many
elements each placeholder dimension steps in each buffer dimension (``coefs``).  Any
difference is a :class:`ScheduleError` that names the loop and what differed.

Indices that are not affine one by one may still be affine together: a fused axis ``f``
read as ``W[o, f // 9, f // 3 % 3, f % 3]`` is ``W``'s element ``o*C*9 + f`` in memory.
Where the buffer's strides are constants, such a region is taken in flattened memory
(``TensorIntrinCall.flat``): a 3x3 convolution's weights ``[O, C, 3, 3]`` transposed in
``16 x 16`` tiles of (output channels, ``C*9``).
"""
from __future__ import annotations

import dataclasses
from typing import Dict, List

from ..errors import InternalError, ScheduleError
from ..ir import op as _op
from ..ir.expr import (GE, GT, LE, LT, Add, BufferLoad, Const, Expr, Max, Min, Mul,
                       ProducerLoad, Reduce, Select, Var)
from ..ir.functor import Mutator, collect, free_vars, substitute
from ..ir.names import display
from ..ir.printer import to_str
from ..ir.simplify import affine_steps, simplify
from ..ir.stmt import BufferStore, For, IfThenElse, TensorIntrinCall
from ..te.tensor import ComputeOp
from ..te.reduce import ZERO_WHERE
from ..te.tensor_intrin import row_major


def tensorize_call(ctx, st, leaves, t: int, value: Expr, store_idx, fallback, reduce: bool,
                   intrin=None):
    """The :class:`TensorIntrinCall` for stage ``st`` tensorized at ``leaves[t]``.

    ``value``: the lowered expression the region computes per point (a reduction's
    source); ``store_idx``: where it is stored; ``fallback``: the region's loop nest;
    ``intrin``: another intrinsic than the stage's (:func:`unmasked_version`)."""
    iv0, own = st.tensorized
    intrin = intrin if intrin is not None else own
    inf = ctx.info[st]
    region = leaves[t:]
    what = f"tensorize on stage {display(st.name)} at loop {display(iv0.name)} with {display(intrin.name)}"
    _check_region(ctx, st, leaves, t, what)
    iop = intrin.op
    if reduce != intrin.reduce:
        raise ScheduleError(
            f"{what}: the stage {'is' if reduce else 'is not'} a reduction and the intrinsic's "
            f"computation {'is' if intrin.reduce else 'is not'}; tensorize a stage that computes "
            "what the intrinsic declares")
    if reduce:
        body = st.op.bodies[0]
        ibody = iop.body
        _check_reducer(body, ibody, intrin, what)
        # (a where= that leaves out only zero products, ZERO_WHERE, is computed anyway)
        if not (isinstance(body.condition, Const) and body.condition.value is True) \
                and not st.op.attrs.get(ZERO_WHERE):
            raise ScheduleError(f"{what}: the stage's reduction has a where= condition, which "
                                "the intrinsic does not compute; tensorize a reduction without one")
        isrc = ibody.source
    else:
        isrc = iop.body
    # region loops -> declared axes, in order
    data = [iv for iv in region if iv.kind != "reduce"]
    red = [iv for iv in region if iv.kind == "reduce"]
    vmap: Dict[Var, Var] = {}
    for kind, mine, theirs in (("data-parallel", data, iop.axis), ("reduction", red, iop.reduce_axis)):
        if len(mine) != len(theirs) and kind == "data-parallel":
            # the intrinsic's axes of extent 1 may have no loop in the region (one output
            # element per thread, as CUDA's dp4a): they are 0 there
            ones = [b for b in theirs if b.dom.extent.value == 1]
            if ones and len(mine) == len(theirs) - len(ones):
                for b in ones:
                    vmap[b.var] = Const(0, b.var.dtype)
                theirs = [b for b in theirs if b.dom.extent.value != 1]
        if len(mine) != len(theirs):
            raise ScheduleError(
                f"{what}: the region has {len(mine)} {kind} loop(s) "
                f"({', '.join(display(x.name) for x in mine) or 'none'}) and the intrinsic "
                f"{len(theirs)} ({', '.join(display(x.name) for x in theirs) or 'none'}); split and "
                "reorder the stage so that the loops from the tensorized one inward are the "
                "intrinsic's axes")
        for a, b in zip(mine, theirs):
            ext = inf.extent[a]
            if not (isinstance(ext, Const) and ext.value == b.dom.extent.value):
                raise ScheduleError(
                    f"{what}: loop {display(a.name)} runs {to_str(ext)} times, and the intrinsic's "
                    f"axis {display(b.name)} that it maps to {b.dom.extent.value}; split the "
                    f"stage's axis by {b.dom.extent.value}")
            vmap[b.var] = a.var
    mine_expr = value
    theirs_expr = substitute(isrc, vmap)
    binds: Dict[int, tuple] = {}
    _match(mine_expr, theirs_expr, binds, what)
    rvars = [iv.var for iv in region]
    ranges = ctx.leaf_ranges(st)
    buffers, bases, coefs, flat = [], [], [], []
    out_place = tuple(vmap[iv.var] for iv in iop.axis)
    operands = [(intrin.output, inf.buffers[0], tuple(store_idx), out_place)]
    for ph in intrin.inputs:
        got = binds.get(id(ph.op))
        if got is None:   # pragma: no cover - every placeholder of the body is matched
            raise ScheduleError(f"{what}: operand {display(ph.name)} is not read by the stage")
        operands.append((ph,) + got)
    for ph, buf, idx, place in operands:
        base, cf, is_flat = _region(ph, buf, idx, place, rvars, ranges, what)
        if intrin.dense:
            _check_dense(ph, buf, cf, what)
        buffers.append(buf)
        bases += list(base)
        coefs.append(cf)
        flat.append(is_flat)
    return TensorIntrinCall(intrin, st.name, tuple(buffers), tuple(bases), tuple(coefs), reduce,
                            fallback, tuple(flat) if any(flat) else ())


class _Positions(Mutator):
    """Reads of an integer compute whose value is an expression of its own indices alone
    (``qpos[i] = i``, ``i + 16``: no load) as that expression of the indices read."""

    def visit_ProducerLoad(self, e):
        op = e.producer.op
        if type(op) is ComputeOp and len(op.bodies) == 1 and e.dtype in ("int32", "int64"):
            body, axes = op.bodies[0], {iv.var: x for iv, x in zip(op.axis, e.indices)}
            if body.dtype == e.dtype and set(free_vars(body)) <= set(axes) and not collect(
                    body, lambda n: isinstance(n, (ProducerLoad, BufferLoad, Reduce))):
                return substitute(body, axes)
        return self.generic_visit(e)


#: the integer ``d`` of a comparison that holds where ``d <= 0``
_EXCESS = {LE: lambda a, b: _op.sub(a, b), LT: lambda a, b: _op.add(_op.sub(a, b), 1),
           GE: lambda a, b: _op.sub(b, a), GT: lambda a, b: _op.add(_op.sub(b, a), 1)}


def _masks(body) -> list:
    """The selects of ``body`` whose condition is an integer comparison of its indices
    (reads of positions as :class:`_Positions` reads them): ``(select, d)`` with the
    condition ``d <= 0``."""
    out = []
    # (one select read twice, the same node, counts once)
    for sel in {id(n): n for n in collect(body, lambda n: isinstance(n, Select))}.values():
        cond = _Positions().visit(sel.cond)
        excess = _EXCESS.get(type(cond))
        if excess is not None and cond.a.dtype in ("int32", "int64") and not collect(
                cond, lambda n: isinstance(n, (ProducerLoad, BufferLoad))):
            out.append((sel, excess(cond.a, cond.b)))
    return out


class _Unmask(Mutator):
    """An expression with one select replaced by its true value."""

    def __init__(self, sel):
        self.sel = sel

    def visit_Select(self, e):
        return self.visit(e.true_value) if e is self.sel else self.generic_visit(e)


def unmasked_version(ctx, st, leaves, t: int, vmap: dict, store_idx, tic, nest):
    """``Stage._tensorize_unmasked``: the stage's value holds one ``select(c, a, b)``
    with ``c`` an integer comparison of its indices (reads of positions,
    :class:`_Positions`, as expressions of the indices); returns ``if (c holds at the
    tile's corner where it is hardest) <the value with a for the select, on the unmasked
    intrinsic> else tic`` (``nest(value)``: the region's loops storing ``value``, the
    fallback).  ``c`` is ``d <= 0`` with ``d`` affine in the region's loops: its largest
    value on the tile is its value at the region's start plus each positive step times
    its loop's extent less one."""
    what = f"_tensorize_unmasked of {st.name}"
    body = ctx.info[st].bodies[0]
    masks = _masks(body)
    if len(masks) != 1:
        raise InternalError(f"{what}: the stage holds {len(masks)} selects on a comparison "
                            "of its indices, not one (a tecomp bug: the FlashAttention "
                            "template made it)")
    sel, d = masks[0]
    d = ctx.lower_expr(substitute(d, vmap))
    region = leaves[t:]
    got = affine_steps([d], [iv.var for iv in region], ctx.leaf_ranges(st))
    if got is None:
        raise InternalError(f"{what}: the comparison is not affine in the tile's loops (a "
                            "tecomp bug)")
    worst = got[0][0]
    for iv, step in zip(region, got[1]):
        if step[0] > 0:
            worst = _op.add(worst, Const(step[0] * (int(ctx.info[st].extent[iv].value) - 1),
                                         worst.dtype))
    a = ctx.lower_expr(substitute(_Unmask(sel).visit(body), vmap))
    whole = tensorize_call(ctx, st, leaves, t, a, store_idx, nest(a), False, intrin=st.unmasked)
    return IfThenElse(simplify(_op.compare(LE, worst, Const(0, worst.dtype))), whole, tic)


def _check_region(ctx, st, leaves, t, what):
    inf = ctx.info[st]
    region = leaves[t:]
    rset = {iv.var for iv in region}
    for iv in leaves:
        a = st.iter_attrs.get(iv)
        kind = a.kind if a is not None else "serial"
        if iv in region and kind in ("parallel", "thread"):
            raise ScheduleError(f"{what}: loop {display(iv.name)} inside the region is {kind}; "
                                "the intrinsic runs the region as one step: make it serial")
        if iv not in region and kind == "vectorized":
            raise ScheduleError(f"{what}: loop {display(iv.name)} around the region is "
                                "vectorized; the intrinsic is already vector code: run the "
                                "loops around it as serial, unrolled or parallel")
    for s in ctx.stages:
        if s.attach_type == "scope" and s.attach_stage is st and s.attach_ivar in region:
            raise ScheduleError(
                f"{what}: stage {display(s.name)} is computed at loop {display(s.attach_ivar.name)}, "
                "inside the region the intrinsic replaces; compute it at a loop outside it")
    for g in inf.guards:
        if any(v in rset for v in free_vars(g)):
            raise ScheduleError(
                f"{what}: the region has a bounds guard ({to_str(g)}): a split there does not "
                "divide its axis, and the intrinsic computes whole blocks; pick factors that "
                "divide the extents (or pad the tensor to a multiple)")


def _same_consts(a, b) -> bool:
    return getattr(a, "value", object()) == getattr(b, "value", None) and a.dtype == b.dtype


def _check_reducer(body, ibody, intrin, what):
    """The stage's reduction (one value: a multi-output stage is refused before) is the
    intrinsic's: the same combiner, accumulated in the same dtype from the same identity;
    each difference is named as it is."""
    mine, theirs = body.combiner, ibody.combiner
    if mine.name != theirs.name:
        raise ScheduleError(f"{what}: the stage reduces with {display(mine.name)} and the "
                            f"intrinsic with {display(theirs.name)}")
    if mine.identity.dtype != theirs.identity.dtype:
        operands = ", ".join(f"{display(p.name)}: {p.dtype}" for p in intrin.inputs)
        raise ScheduleError(
            f"{what}: the stage's {display(mine.name)} accumulates {mine.identity.dtype} and the "
            f"intrinsic's {theirs.identity.dtype}: the intrinsic computes "
            f"{display(mine.name)}(`{_show(ibody.source)}`) ({operands}); declare the stage's "
            f"operands with those dtypes and cast them to {theirs.identity.dtype} as it does")
    if not _same_consts(mine.identity, theirs.identity):
        raise ScheduleError(
            f"{what}: the stage's {display(mine.name)} starts from {to_str(mine.identity)} and the "
            f"intrinsic's from {to_str(theirs.identity)}; tensorize a reduction with the "
            "intrinsic's identity")


_COMMUTATIVE = (Add, Mul, Min, Max)


def _match(mine, theirs, binds, what):
    """Compare the stage's lowered expression with the declared one (after the axis map);
    a declared placeholder read matches any buffer read, bound on first sight."""
    if isinstance(theirs, ProducerLoad):
        if not isinstance(mine, BufferLoad) or mine.dtype != theirs.dtype:
            _differ(mine, theirs, what)
        place = tuple(theirs.indices)
        got = binds.get(id(theirs.producer.op))
        if got is None:
            binds[id(theirs.producer.op)] = (mine.buffer, tuple(mine.indices), place)
            return
        if got[0] is not mine.buffer or got[2] != place or not all(
                _eq(a, b) for a, b in zip(got[1], mine.indices)):
            raise ScheduleError(
                f"{what}: the intrinsic reads {display(theirs.producer.name)} twice at the same "
                f"element, and the stage reads {display(got[0].name)} and "
                f"{display(mine.buffer.name)} there ({_show(mine)})")
        return
    if type(mine) is not type(theirs):
        _differ(mine, theirs, what)
    if isinstance(mine, _COMMUTATIVE):
        # a * b matches b * a: try the operands as written, then swapped
        for x, y in ((mine.a, mine.b), (mine.b, mine.a)):
            trial = dict(binds)
            try:
                _match(x, theirs.a, trial, what)
                _match(y, theirs.b, trial, what)
            except ScheduleError:
                continue
            binds.update(trial)
            return
        # neither way: report the first difference of the operands as written
        _match(mine.a, theirs.a, dict(binds), what)
        _match(mine.b, theirs.b, dict(binds), what)
        _differ(mine, theirs, what)   # pragma: no cover
    if isinstance(mine, Var):
        if mine is not theirs:
            _differ(mine, theirs, what)
        return
    if isinstance(mine, Reduce):   # pragma: no cover - a nested reduction is refused earlier
        _differ(mine, theirs, what)
    for f in dataclasses.fields(mine):
        a, b = getattr(mine, f.name), getattr(theirs, f.name)
        if isinstance(a, Expr):
            _match(a, b, binds, what)
        elif isinstance(a, tuple) and a and isinstance(a[0], Expr):
            if len(a) != len(b):
                _differ(mine, theirs, what)
            for x, y in zip(a, b):
                _match(x, y, binds, what)
        elif a != b:
            _differ(mine, theirs, what)


def _eq(a, b) -> bool:
    d = simplify(a - b)
    return isinstance(d, Const) and d.value == 0


def _show(e) -> str:
    return to_str(e)[:160]


def _differ(mine, theirs, what):
    dm, dt = getattr(mine, "dtype", None), getattr(theirs, "dtype", None)
    types = (f" ({dm})", f" ({dt})") if dm != dt else ("", "")
    raise ScheduleError(f"{what}: the stage computes `{_show(mine)}`{types[0]} where the intrinsic "
                        f"computes `{_show(theirs)}`{types[1]}; tensorize a stage whose expression "
                        "is the declared one (same operations, casts and dtypes)")


def _region(ph, buf, idx, place, rvars, ranges, what):
    """(base, coefs, flat) of buffer ``buf`` read at ``idx`` where the placeholder ``ph``
    is read at ``place`` (region loop vars, one per dimension of ``ph``): per dimension
    of ``buf`` where each index is affine in the region's loops, else in its flattened
    memory (``flat``, see :class:`~tecomp.ir.stmt.TensorIntrinCall`) where that is."""
    got = affine_steps(idx, place, ranges, rvars)
    if got is not None:
        return got[0], got[1], False
    strides = buf.effective_strides()
    ones = [d for d, st in enumerate(strides) if isinstance(st, Const) and st.value == 1]
    if ones and idx and all(isinstance(st, Const) for st in strides) and \
            len({e.dtype for e in idx}) == 1:
        dt = idx[0].dtype
        flat = Const(0, dt)
        for e, st in zip(idx, strides):
            flat = flat + e * Const(int(st.value), dt)
        got = affine_steps([simplify(flat, ranges)], place, ranges, rvars)
        if got is not None:
            zero = {v: Const(0, v.dtype) for v in rvars}
            base = [simplify(substitute(e, zero), ranges) for e in idx]
            d1 = ones[-1]
            return base, tuple(tuple(row[0] if d == d1 else 0 for d in range(len(idx)))
                               for row in got[1]), True
    raise _not_affine(ph, buf, idx, what)


def _not_affine(ph, buf, idx, what):
    return ScheduleError(
        f"{what}: operand {display(ph.name)} is {display(buf.name)}"
        f"[{', '.join(to_str(e) for e in idx)}], which does not step by a constant along the "
        "region's loops; the intrinsic needs a strided block of memory per operand (pack the "
        "tensor with a tc.compute so that the block is contiguous)")


def operand_strides(buf, cf) -> List[Expr]:
    """The element strides of an operand's region in ``buf`` (one per dimension of the
    declared placeholder, ``cf`` its rows of :attr:`TensorIntrinCall.coefs`), from the
    buffer's strides, simplified (constants where the buffer's shape is)."""
    strides = buf.effective_strides()
    got = []
    for row in cf:
        s = Const(0, "int32")
        for c, bs in zip(row, strides):
            if c:
                s = s + Const(c, "int32") * bs
        got.append(simplify(s))
    return got


def _check_dense(ph, buf, cf, what):
    """The region of ``buf`` must be laid out as the placeholder: row major, contiguous."""
    want = row_major(int(x.value) for x in ph.shape)
    got = operand_strides(buf, cf)
    for d, (g, w) in enumerate(zip(got, want)):
        if ph.shape[d].value > 1 and not (isinstance(g, Const) and g.value == w):
            raise ScheduleError(
                f"{what}: operand {display(ph.name)} (shape {[int(x.value) for x in ph.shape]}) is a "
                f"block of {display(buf.name)} with element strides "
                f"[{', '.join(to_str(x) for x in got)}], and the intrinsic reads it row major "
                f"and contiguous (strides {want}); pack {display(buf.name)} with a tc.compute "
                f"whose innermost dimensions are the block (e.g. [.., {', '.join(str(int(x.value)) for x in ph.shape)}])")


class _OnRegions(Mutator):
    """A declared computation's reads of its placeholders as reads of the operands'
    regions (:func:`declared_call`)."""

    def __init__(self, regions: dict):
        self.regions = regions

    def visit_ProducerLoad(self, e):
        buf, base, cf = self.regions[id(e.producer.op)]
        return BufferLoad(buf, _at(base, cf, e.indices), buf.dtype)


def _at(base, cf, idx) -> tuple:
    """The indices of element ``idx`` (one per placeholder dimension) of a region."""
    return tuple(simplify(b + sum((x * Const(c[e], x.dtype) for x, c in zip(idx, cf)
                                   if c[e]), Const(0, b.dtype)))
                 for e, b in enumerate(base))


def declared_call(intrin, stage: str, out, ins: dict, reduce: bool = False) -> TensorIntrinCall:
    """A call of the tensor intrinsic ``intrin`` that lowering makes itself (no stage's
    loops were tensorized: ``Stage._lockstep``'s steps): ``out`` and each input (``ins``,
    by its placeholder's name) a region ``(buffer, base, coefs)`` as
    :class:`~tecomp.ir.stmt.TensorIntrinCall` holds them; ``reduce``: a reduction's
    result added into (its running value).  The fallback is the declared computation on
    those regions."""
    phs = list(intrin.inputs)
    regions = {id(ph.op): ins[ph.name] for ph in phs}
    body = intrin.op.body
    axes = list(intrin.op.axis)
    idx = tuple(iv.var for iv in axes)
    buf, base, cf = out
    where = _at(base, cf, idx)
    if isinstance(body, Reduce):
        src = _OnRegions(regions).visit(body.source)
        value = body.combiner.combine(BufferLoad(buf, where, buf.dtype), src)
        axes += list(body.axis)
    else:
        value = _OnRegions(regions).visit(body)
    nest = BufferStore(buf, value, where)
    for iv in reversed(axes):
        nest = For(iv.var, iv.dom.min, iv.dom.extent, "serial", nest)
    operands = [out] + [ins[ph.name] for ph in phs]
    return TensorIntrinCall(intrin, stage, tuple(b for b, _, _ in operands),
                            tuple(x for _, b, _ in operands for x in b),
                            tuple(c for _, _, c in operands), reduce, nest)
