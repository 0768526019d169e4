"""Reverse-mode differentiation over the tensor DAG: ``tc.gradient``.

``gradient(output, inputs, head)`` walks the compute DAG from ``output`` back to ``inputs``,
consumers before producers.  For every compute ``C`` and every tensor ``T`` it reads that
leads to an input, it differentiates ``C``'s body with respect to each *read* ``T[h(u)]``
(reverse mode over the expression, so a tensor read twice gets both terms), and turns each
term into the **gather form** of its contribution to ``T``'s adjoint by inverting the index
map ``h`` exactly (:mod:`tecomp.autodiff.inversion`)::

    T.grad[p] = sum over the free variables f, where conditions(p, f):
                    C.grad[i(p, f)] * dC/dT[h](u(p, f))

The adjoints of a tensor read by several computes are summed; tensors that do not lead to
an input are skipped; tensors that are pure data movement (a padding, a transpose, a
crop: no arithmetic, no intrinsic, each index one axis moved by a constant) are inlined
into their readers first, so that a padded convolution's data gradient is one gather over
the padded index, not a gradient of the padded tensor followed by a crop.  A reshape
across dimensions (an index that combines axes, or uses ``//`` or ``%``: a flatten,
attention's head split and merge) stays a stage: its gradient is a gather of its own, and
the reduction that reads it keeps indices a schedule can block.

Every result is an ordinary ``tc.compute`` named after what it holds (``A.grad``; helper
stages ``X.grad.conv`` when a tensor has several contributions, ``pool.argmax`` for a max
reduction, ``P.rest`` for a product), so it prints, schedules and lowers like any compute.
The walk visits everything in a fixed order and names nothing after object ids: the same
program always gives the same printed gradient.

Costs (per element of the gradient): the product of the extents of the free variables
(for a convolution's data gradient, ``C_out * KH * KW``; for its weight gradient,
``N * OH * OW``); an index that is not affine (``X[i*j]``) leaves the variables it alone
uses free and checks ``h(u) == p`` as a condition.  An index that reads a tensor (an
embedding ``E[ids[b], j]``) is transposed into a scatter-add instead
(:mod:`tecomp.te.scatter`): ``E.grad[ids[b], j] += C.grad[b, j] * dC/dE`` over ``C``'s
points, ``B * J`` additions instead of a loop over the batch for every element of ``E``.
"""
from __future__ import annotations

import inspect
import math
from typing import Callable, Dict, List, Optional, Sequence, Union

from ..errors import AutodiffError
from ..ir import dtype as _dt
from ..ir import op as _op
from ..ir.expr import (
    EQ, GT, NE, Add, Call, Cast, Const, Div, Expr, FloorDiv, FloorMod, IterVar, Let, Max, Min, Mul,
    Not, ProducerLoad, Reduce, Select, Sub, TruncDiv, TruncMod, Var,
)
from ..ir.deep import deep_entry
from ..ir.functor import Mutator, Visitor, collect, substitute, uses_var
from ..te import reduce as _reduce
from ..te.scatter import ScatterOp
from ..te.tensor import ComputeOp, PlaceholderOp, Tensor, compute, compute_ops, input_tensors_of, reduce_axis
from . import rules as _rules
from .inversion import invert
from .reference import _topo

STOP_GRADIENT = "stop_gradient"  # a compute attr: treat the tensor as a constant


# ---------------------------------------------------------------------------------
# small helpers


def _is_true(e) -> bool:
    return isinstance(e, Const) and e.value is True


def _is_false(e) -> bool:
    return isinstance(e, Const) and e.value is False


def _has_load(e) -> bool:
    found = []

    class _V(Visitor):
        def visit_ProducerLoad(self, x):
            found.append(x)

    _V().visit(e)
    return bool(found)


def _mul(s: Optional[Expr], x: Optional[Expr]) -> Optional[Expr]:
    """Product where ``None`` stands for one."""
    if s is None:
        return x
    if x is None:
        return s
    if isinstance(x, Const) and x.value == 1:
        return s
    if isinstance(s, Const) and s.value == 1:
        return x
    return _op.binary("*", s, x)


def _neg(s: Optional[Expr], dtype: str) -> Expr:
    if s is None:
        return Const(-1.0, dtype)
    return _op.binary("-", Const(-0.0, s.dtype), s)   # -s (IEEE's: -(+0.0) is -0.0)


def _named(names: Sequence[str], fn):
    """``fn`` with a signature naming its index arguments (tc.compute names axes after it)."""

    def f(*args):
        return fn(*args)

    f.__signature__ = inspect.Signature(
        [inspect.Parameter(n, inspect.Parameter.POSITIONAL_ONLY) for n in names])
    return f


def _axis_names(t: Tensor) -> List[str]:
    if isinstance(t.op, ComputeOp):
        names = [iv.var.name for iv in t.op.axis]
        if all(n.isidentifier() for n in names):
            return names
    return [f"ax{k}" for k in range(t.ndim)]


def _same_shape(a: Tensor, b: Tensor) -> bool:
    if a.ndim != b.ndim:
        return False
    for x, y in zip(a.shape, b.shape):
        if isinstance(x, Const) and isinstance(y, Const):
            if x.value != y.value:
                return False
        elif not (x == y):
            return False
    return True


def _shape_str(t: Tensor) -> str:
    return "(" + ", ".join(str(x) for x in t.shape) + ")"


# ---------------------------------------------------------------------------------
# differentiating one expression


class _Partials:
    """Reverse mode over one expression: for every read of the target, the adjoint that
    reaches it and the ``if_then_else`` conditions on its path (outermost first)."""

    def __init__(self, is_target, where: str, expand=None):
        self.is_target = is_target
        self.where = where
        self.expand = expand  # ProducerLoad -> the read stage's body there (or None)
        self.leaves: Dict[tuple, list] = {}
        self.order: List[tuple] = []

    def run(self, e: Expr, seed: Optional[Expr], guards=(), root_value=None):
        self.root = e
        self.root_value = root_value
        self.back(e, seed, tuple(guards))
        out = []
        for key in self.order:
            leaf, terms = self.leaves[key]
            uniq: List[list] = []  # [term, count]: x*x gives 2*(...), not (...) + (...)
            for t in terms:
                for u in uniq:
                    if u[0] == t:
                        u[1] += 1
                        break
                else:
                    uniq.append([t, 1])
            total = None
            wide = _widest(t.dtype for t, _ in uniq)
            for t, n in uniq:
                t = t.astype(wide)
                if n > 1:
                    t = _op.binary("*", Const(float(n), t.dtype), t)
                total = t if total is None else _op.binary("+", total, t)
            out.append((leaf, total, key[1]))
        return out

    def record(self, leaf, seed, guards):
        term = seed if seed is not None else Const(1.0, leaf.dtype)
        key = (leaf.indices if isinstance(leaf, ProducerLoad) else leaf, guards)
        ent = self.leaves.get(key)
        if ent is None:
            self.leaves[key] = (leaf, [term])
            self.order.append(key)
        else:
            ent[1].append(term)

    def back(self, e: Expr, s: Optional[Expr], g: tuple):
        if not _dt.is_float(e.dtype):
            return  # integer and boolean expressions are not differentiable
        if self.is_target(e):
            self.record(e, s, g)
            return
        t = type(e)
        if t is ProducerLoad and self.expand is not None:
            inner = self.expand(e)
            if inner is not None:  # a data-movement stage on the way to the target
                self.back(inner, s, g)
            return
        if t is Const or t is Var or t is ProducerLoad:
            return
        if s is not None and s.dtype != e.dtype and t not in (Add, Sub, Select, Cast, Let):
            # a seed kept wide by a widening cast above (see Cast) meets arithmetic in
            # the narrow dtype: it continues in that dtype
            s = s.astype(e.dtype)
        if t is Add:
            self.back(e.a, s, g)
            self.back(e.b, s, g)
        elif t is Sub:
            self.back(e.a, s, g)
            self.back(e.b, _neg(s, e.dtype), g)
        elif t is Mul:
            self.back(e.a, _mul(s, e.b), g)
            self.back(e.b, _mul(s, e.a), g)
        elif t is Div:
            self.back(e.a, _mul(s, _op.binary("/", Const(1.0, e.dtype), e.b)), g)
            num = _mul(s, e.a)
            self.back(e.b, _op.binary("-", Const(-0.0, e.dtype),
                                      _op.binary("/", num, _op.binary("*", e.b, e.b))), g)
        elif t is Max or t is Min:
            cmp = _op.compare(GT, e.a, e.b) if t is Max else _op.compare(GT, e.b, e.a)
            one, half, zero = (Const(v, e.dtype) for v in (1.0, 0.5, 0.0))
            tie = _op.compare(EQ, e.a, e.b)
            wa = _op.if_then_else(cmp, one, _op.if_then_else(tie, half, zero))
            wb = _op.if_then_else(cmp, zero, _op.if_then_else(tie, half, one))
            self.back(e.a, _mul(s, wa), g)
            self.back(e.b, _mul(s, wb), g)
        elif t is Select:
            self.back(e.true_value, s, g + (e.cond,))
            self.back(e.false_value, s, g + (_not(e.cond),))
        elif t is Cast:
            if _dt.is_float(e.value.dtype):
                # a widening cast (float16 -> float32, ...) keeps the adjoint in the wide
                # dtype on its way to the reads under it: the gradient of a sum over many
                # terms (a GEMM's, a convolution's) then accumulates in the wide dtype, as
                # the forward did, and is rounded once, to the input's dtype
                wide = s is not None and _dt.bits(e.dtype) > _dt.bits(e.value.dtype)
                self.back(e.value, s if wide or s is None else s.astype(e.value.dtype), g)
        elif t is Call:
            rule = _rules.intrinsic_rule(e.op)
            if rule is None:
                raise AutodiffError(
                    f"no derivative is known for the intrinsic {e.op!r} used in {self.where}; "
                    f"register one with tecomp.autodiff.register_derivative({e.op!r}, "
                    "lambda args, out: (d_out/d_arg0, ...))")
            out = self.root_value if (e is self.root and self.root_value is not None) else e
            parts = tuple(rule(e.args, out))
            if len(parts) != len(e.args):
                raise AutodiffError(
                    f"the derivative rule of {e.op!r} returned {len(parts)} partial(s) for "
                    f"{len(e.args)} argument(s); return one per argument (None for zero)")
            for a, p in zip(e.args, parts):
                if p is None or (isinstance(p, Const) and p.value == 0):
                    continue
                self.back(a, _mul(s, _as_expr_dt(p, a.dtype)), g)
        elif t is Let:
            self.back(substitute(e.body, {e.var: e.value}), s, g)
        elif t is Reduce:
            raise AutodiffError(f"{self.where}: a reduction inside an expression cannot be "
                                "differentiated (a reduction must be a whole compute body)")
        else:
            raise AutodiffError(f"{self.where}: no derivative rule for {type(e).__name__} "
                                f"expressions (`{e}`)")


def _widest(dtypes) -> str:
    """The widest of some float dtypes (float32 over float16 and bfloat16)."""
    return max(dtypes, key=lambda d: (_dt.bits(d), d == "float32"))


def _not(c: Expr) -> Expr:
    if isinstance(c, Not):
        return c.a
    return Not(c)


def partials(expr: Expr, is_target: Callable[[Expr], bool], seed: Optional[Expr] = None,
             guards: Sequence[Expr] = (), root_value: Optional[Expr] = None,
             where: str = "expression",
             expand: Optional[Callable[[Expr], Optional[Expr]]] = None) -> List[tuple]:
    """The reverse-mode partials of ``expr``, one per distinct read.

    Parameters
    ----------
    expr : Expr
        The expression differentiated.
    is_target : callable
        ``is_target(node)``: whether a node is a leaf to differentiate with respect to.
    seed : Expr, optional
        The adjoint of ``expr`` (None: one).
    guards : sequence of Expr, optional
        Conditions already holding where ``expr`` is evaluated.
    root_value : Expr, optional
        An expression standing for ``expr``'s value in derivative rules that use it.
    where : str, optional
        What ``expr`` is, for messages.
    expand : callable, optional
        ``expand(load)`` may return the body of the read stage at that point, to
        differentiate through it.

    Returns
    -------
    list of (Expr, Expr, tuple)
        ``(leaf, adjoint, guards)``: each read ``leaf``, the adjoint that reaches it
        (``seed`` times the local derivatives on the path) and the branch conditions of
        the ``if_then_else``s it sits in (outermost first).
    """
    return _Partials(is_target, where, expand).run(expr, seed, guards, root_value)


# ---------------------------------------------------------------------------------
# the DAG walk


class _Adjoint:
    """The adjoint of a tensor: a tensor, or ones (``head=None``).

    An adjoint that only widens another tensor at the same point (``acc.grad[i, j] =
    float32(out.grad[i, j])``: the float32 sum of a float16 GEMM under its rounding
    ``out = float16(acc)``) is read through the cast, inlined: the derivatives' GEMMs
    then read the 16-bit tensor itself (``sum(float32(out.grad[i, o]) * float32(w[o, k]))``),
    which the GPU's tensor cores take, and no float32 copy of it is stored."""

    def __init__(self, tensor: Optional[Tensor], dtype: str):
        self.tensor = tensor
        self.dtype = dtype
        self.widened = _widened(tensor)

    def read(self, idx) -> Optional[Expr]:
        if self.tensor is None:
            return None
        if self.widened is not None:
            return self.widened[tuple(idx)].astype(self.tensor.dtype)
        return self.tensor[tuple(idx)]


def _widened(t: Optional[Tensor]) -> Optional[Tensor]:
    """The tensor ``X`` of a compute ``t[p] = cast(X[p])`` that widens a float at the same
    indices (same shape), else None."""
    op = getattr(t, "op", None)
    if not isinstance(op, ComputeOp) or op.reduce_axis or len(op.bodies) != 1:
        return None
    body = op.body
    if not isinstance(body, Cast) or not isinstance(body.value, ProducerLoad):
        return None
    src = body.value.producer
    if not (_dt.is_float(src.dtype) and _dt.is_float(t.dtype)
            and _dt.bits(src.dtype) < _dt.bits(t.dtype) and _same_shape(src, t)):
        return None
    if len(body.value.indices) != len(op.axis) or not all(
            i is iv.var for i, iv in zip(body.value.indices, op.axis)):
        return None
    return src


class _Inliner(Mutator):
    def __init__(self, inline):
        self.inline = inline

    def visit_ProducerLoad(self, e):
        idx = tuple(self.visit(i) for i in e.indices)
        op = e.producer.op
        if op in self.inline:
            body = substitute(op.body, {iv.var: x for iv, x in zip(op.axis, idx)})
            return self.visit(body)
        if all(a is b for a, b in zip(idx, e.indices)):
            return e
        return ProducerLoad(e.producer, idx, e.dtype)


def _data_movement(body: Expr) -> bool:
    """No arithmetic on floats and no intrinsic: a pad, transpose, reshape, crop, copy."""
    ok = [True]

    class _V(Visitor):
        def visit(self, n):
            if not ok[0]:
                return
            if isinstance(n, Expr) and _dt.is_float(n.dtype) and not isinstance(
                    n, (ProducerLoad, Const, Select, Cast)):
                ok[0] = False
                return
            if isinstance(n, Cast) and not (_dt.is_float(n.value.dtype) or
                                            not _dt.is_float(n.dtype)):
                ok[0] = False
                return
            super().visit(n)

        def visit_ProducerLoad(self, n):
            for i in n.indices:
                if collect(i, lambda x: isinstance(x, (FloorDiv, FloorMod, TruncDiv, TruncMod))) \
                        or len({id(v) for v in collect(i, lambda x: isinstance(x, Var))}) > 1:
                    # a reshape across dimensions (BERT's head split or merge, a flatten):
                    # inlined into a reading reduction it would leave that reduction, or
                    # the gradient's inverse map, with // and % indices that no schedule
                    # blocks (the attention's K gradient ran as a scalar strided loop);
                    # kept, its gradient is a gather of its own
                    ok[0] = False
                    return
                self.visit(i)

    _V().visit(body)
    return ok[0]


class _Gradient:
    def __init__(self, output: Tensor, inputs: List[Tensor], head: Optional[Tensor]):
        self.output = output
        self.inputs = inputs
        self.head = head
        self.is_input = {id(t) for t in inputs}
        self._body: Dict[ComputeOp, Expr] = {}
        self._inline: set = set()
        self._helpers: Dict[tuple, Tensor] = {}
        self._leads: Dict[tuple, bool] = {}
        self._tags: Dict[str, str] = {}
        self._ptemplates: Dict[int, List[Var]] = {}
        self._equal: Dict[int, Optional[Tensor]] = {}

    # -- the graph -----------------------------------------------------------------
    def stopped(self, t: Tensor) -> bool:
        return isinstance(t.op, ComputeOp) and bool(t.op.attrs.get(STOP_GRADIENT))

    def custom(self, t: Tensor):
        return _rules.tensor_rule(t.op) if isinstance(t.op, ComputeOp) else None

    def equal(self, t: Tensor) -> Tensor:
        """The tensor differentiated in ``t``'s place: the equivalent registered for its tag
        (:func:`~tecomp.autodiff.rules.register_tag_equivalent`: a Winograd convolution's
        direct convolution), else ``t``.  ``t`` keeps its own form when a gradient is
        wanted for one of the stages it replaces (those between ``t`` and what the
        equivalent reads) or one of them is marked constant."""
        key = id(t)
        if key in self._equal:
            return self._equal[key] or t
        e = None
        op = t.op
        fn = _rules.tag_equivalent(op) if isinstance(op, ComputeOp) else None
        if fn is not None and not self.stopped(t) and self.custom(t) is None:
            res = fn(t)
            if res is not None:
                e, reads = res if isinstance(res, tuple) and len(res) == 2 else (res, ())
                if not isinstance(e, Tensor) or not _same_shape(e, t) or e.dtype != t.dtype \
                        or not isinstance(reads, (tuple, list)) \
                        or not all(isinstance(x, Tensor) for x in reads):
                    raise AutodiffError(
                        f"the equivalent registered for the tag {op.tag!r} of {t.name} "
                        f"returned {res!r:.200}; return None or (tensor, reads): a tensor of "
                        f"its shape {_shape_str(t)} and dtype {t.dtype}, and the tuple of "
                        "the tensors it reads")
                stop = {id(x) for x in reads}
                seen: set = set()
                stack = list(op.input_tensors)
                while stack:
                    x = stack.pop()
                    if id(x) in stop or id(x) in seen:
                        continue
                    seen.add(id(x))
                    if id(x) in self.is_input or self.stopped(x):
                        e = None
                        break
                    stack.extend(x.op.input_tensors)
        self._equal[key] = e
        return e or t

    def topo(self) -> List[Tensor]:
        """Every tensor the output needs, producers first (as :func:`_topo`), a tensor with
        an equivalent (:meth:`equal`) reading what its equivalent reads."""
        order, seen = [], {id(self.output)}
        root = self.output
        stack = [(root, iter(self.equal(root).op.input_tensors))]
        while stack:
            t, it = stack[-1]
            for d in it:
                if id(d) not in seen:
                    seen.add(id(d))
                    stack.append((d, iter(self.equal(d).op.input_tensors)))
                    break
            else:
                stack.pop()
                order.append(t)
        return order

    def collect(self):
        """Topological order (producers first) and the inlined data-movement stages."""
        order = self.topo()
        for t in order:
            op = self.equal(t).op
            if (isinstance(op, ComputeOp) and t is not self.output and id(t) not in self.is_input
                    and not self.stopped(t) and not isinstance(op.body, Reduce)
                    and self.custom(t) is None and _data_movement(op.body)):
                self._inline.add(op)
        self.order = [t for t in order if t.op not in self._inline]

    def body(self, op: ComputeOp) -> Expr:
        b = self._body.get(op)
        if b is None:
            b = _Inliner(self._inline).visit(op.body) if self._inline else op.body
            self._body[op] = b
        return b

    def deps(self, t: Tensor) -> List[Tensor]:
        op = self.equal(t).op
        if not isinstance(op, ComputeOp):
            return []
        if self.custom(t) is not None:
            return list(op.input_tensors)

        return input_tensors_of(self.body(op))

    # -- the walk ------------------------------------------------------------------
    def run(self) -> List[Tensor]:
        self.collect()
        reach: Dict[int, bool] = {}
        for t in self.order:
            r = id(t) in self.is_input
            if not r and not self.stopped(t):
                r = any(reach.get(id(d), False) for d in self.deps(t))
                if not r and self.custom(t) is not None:
                    # a registered derivative sees past stages marked constant for it
                    # (flash_attention's statistics): it decides, or refuses
                    r = any(id(x) in self.is_input for x in _topo([t]))
            reach[id(t)] = r
        contribs: Dict[int, list] = {id(t): [] for t in self.order}
        results: Dict[int, Tensor] = {}
        for t in reversed(self.order):
            if not reach.get(id(t)):
                continue
            if t is self.output:
                adj = _Adjoint(self.head, t.dtype)
                if id(t) in self.is_input:
                    results[id(t)] = self.copy_head(t)
            else:
                if not contribs[id(t)]:
                    continue
                g = self.materialize(t, contribs[id(t)])
                adj = _Adjoint(g, t.dtype)
                if id(t) in self.is_input:
                    results[id(t)] = g
            if not isinstance(t.op, ComputeOp) or self.stopped(t):
                continue
            rule = self.custom(t)
            if rule is not None:
                self.custom_contribs(t, rule, adj, reach, contribs)
                continue
            wanted = [d for d in self.deps(t) if reach.get(id(d))]
            c = self.equal(t)   # t, or the compute differentiated in its place
            own = self.tag_contribs(c, adj, wanted)
            for d in wanted:
                g = own.get(id(d))
                if g is not None:
                    contribs[id(d)].append(("own", c.name, g))
                else:
                    contribs[id(d)].extend(self.contribs(c, d, adj))
        out = []
        for x in self.inputs:
            g = results.get(id(x))
            if g is None:
                g = compute(x.shape, _named(_axis_names(x), lambda *p, _x=x: Const(0.0, _x.dtype)),
                            name=f"{x.name}.grad")
                results[id(x)] = g
            out.append(g)
        return out

    def copy_head(self, t: Tensor) -> Tensor:
        h = self.head
        return compute(t.shape, _named(_axis_names(t), lambda *p: (
            h[p] if h is not None else Const(1.0, t.dtype))), name=f"{t.name}.grad")

    def ptemplate(self, t: Tensor) -> List[Var]:
        v = self._ptemplates.get(id(t))
        if v is None:
            v = [Var(n, "int32") for n in _axis_names(t)]
            self._ptemplates[id(t)] = v
        return v

    def materialize(self, t: Tensor, parts: list) -> Tensor:
        """The adjoint of ``t``: the sum of its contributions, as ``t.grad``."""
        names = _axis_names(t)
        pt = self.ptemplate(t)
        name = f"{t.name}.grad"

        def inst(expr, p):
            return substitute(expr, dict(zip(pt, p)))

        consumers = sorted({cname for _, cname, _ in parts})
        attrs = {"autodiff.wrt": t.name, "autodiff.from": tuple(consumers)}
        ctag = self._tags
        tag = "grad" if len(consumers) != 1 else f"{ctag.get(consumers[0]) or 'compute'}_grad"
        if len(parts) == 1 and parts[0][0] == "own":
            return parts[0][2]  # a compute built for this gradient (a tag rule's), named so
        if len(parts) == 1 and parts[0][0] == "scatter":
            return parts[0][2](name, attrs)
        if len(parts) == 1 and parts[0][0] != "tensor":
            expr = parts[0][2]
            if (id(t) not in self.is_input and isinstance(expr, ProducerLoad)
                    and len(expr.indices) == len(pt)
                    and all(a is b for a, b in zip(expr.indices, pt))
                    and expr.dtype == t.dtype and _same_shape(expr.producer, t)):
                return expr.producer  # the adjoint passes through unchanged: no copy
            if expr.dtype == t.dtype or not isinstance(expr, Reduce):
                return compute(t.shape, _named(names, lambda *p: inst(expr, p).astype(t.dtype)),
                               name=name, tag=tag, attrs=attrs)
            # a sum in a wider dtype than t's (under a widening cast): summed as such,
            # then rounded once
            wide = compute(t.shape, _named(names, lambda *p: inst(expr, p)), name=f"{name}.acc",
                           tag=tag, attrs=attrs)
            return compute(t.shape, _named(names, lambda *p: wide[p].astype(t.dtype)), name=name,
                           tag="elemwise", attrs=attrs)
        terms = []  # functions p -> Expr
        used_names: Dict[str, int] = {}
        for kind, cname, expr in parts:
            if kind == "scatter":
                k = used_names.get(cname, 0)
                used_names[cname] = k + 1
                expr = expr(f"{name}.{cname}" + (f".{k}" if k else ""),
                            {"autodiff.wrt": t.name, "autodiff.from": (cname,)})
                kind = "tensor"
            if kind in ("tensor", "own"):
                terms.append(lambda p, _g=expr: _g[tuple(p)])
            elif isinstance(expr, Reduce):
                k = used_names.get(cname, 0)
                used_names[cname] = k + 1
                sname = f"{name}.{cname}" + (f".{k}" if k else "")
                stage = compute(t.shape, _named(names, lambda *p, _e=expr: inst(_e, p)),
                                name=sname, tag=f"{ctag.get(cname) or 'compute'}_grad",
                                attrs={"autodiff.wrt": t.name, "autodiff.from": (cname,)})
                terms.append(lambda p, _s=stage: _s[tuple(p)])
            else:
                terms.append(lambda p, _e=expr: inst(_e, p))

        def body(*p):
            vals = [f(p) for f in terms]
            wide = _widest(v.dtype for v in vals)
            total = vals[0].astype(wide)
            for v in vals[1:]:
                total = _op.binary("+", total, v.astype(wide))
            return total.astype(t.dtype)

        return compute(t.shape, _named(names, body), name=name, tag=tag, attrs=attrs)

    def tag_contribs(self, t: Tensor, adj: _Adjoint, wanted: List[Tensor]) -> Dict[int, Tensor]:
        """The gradients that the rule registered for one of ``t``'s tags
        (:func:`~tecomp.autodiff.rules.register_tag_derivative`) builds itself, by the id
        of the input they belong to."""
        rule = _rules.tag_rule(t.op)
        if rule is None or not wanted:
            return {}
        res = rule(t, adj.tensor, list(wanted)) or {}
        own: Dict[int, Tensor] = {}
        ids = {id(d) for d in wanted}
        for x, g in res.items():
            if id(x) not in ids or not isinstance(g, Tensor) or not _same_shape(g, x) \
                    or g.dtype != x.dtype:
                raise AutodiffError(
                    f"the derivative rule registered for the tag {t.op.tag!r} of {t.name} "
                    f"returned {g!r} for {getattr(x, 'name', x)!r}; return a dict mapping some "
                    f"of the wanted inputs ({', '.join(d.name for d in wanted)}) to tensors of "
                    "their shape and dtype")
            own[id(x)] = g
        return own

    def custom_contribs(self, t: Tensor, rule, adj: _Adjoint, reach, contribs):
        a = adj.tensor
        if a is None:
            a = compute(t.shape, _named(_axis_names(t), lambda *p: Const(1.0, t.dtype)),
                        name=f"{t.name}.ones")
        ins = list(t.op.input_tensors)
        res = rule(a, *ins)
        if isinstance(res, dict):
            # contributions straight to tensors further up (the stages between get none:
            # e.g. FlashAttention's backward skips its forward's intermediates)
            for x, g in res.items():
                if not isinstance(x, Tensor) or not reach.get(id(x)):
                    continue
                if not isinstance(g, Tensor) or not _same_shape(g, x) or g.dtype != x.dtype:
                    raise AutodiffError(
                        f"the registered derivative of {t.name} returned {g!r} for "
                        f"{x.name}; return a tensor of its shape {_shape_str(x)} and dtype "
                        f"{x.dtype}")
                contribs[id(x)].append(("tensor", t.name, g))
            return
        if isinstance(res, Tensor):
            res = [res]
        res = list(res) if res is not None else []
        if len(res) != len(ins):
            raise AutodiffError(
                f"the registered derivative of {t.name} returned {len(res)} tensor(s) for its "
                f"{len(ins)} input(s) ({', '.join(x.name for x in ins)}); return one per input "
                "(None where there is no gradient)")
        for x, g in zip(ins, res):
            if g is None or not reach.get(id(x)):
                continue
            if not isinstance(g, Tensor) or not _same_shape(g, x):
                raise AutodiffError(
                    f"the registered derivative of {t.name} returned {g!r} for input {x.name}; "
                    f"return a tensor of its shape {_shape_str(x)}")
            contribs[id(x)].append(("tensor", t.name, g))

    # -- one consumer -> one producer ----------------------------------------------
    def leads_to(self, op: ComputeOp, t: Tensor) -> bool:
        """Does the inlined stage ``op`` read ``t``, directly or through inlined stages?"""
        key = (id(op), id(t))
        r = self._leads.get(key)
        if r is None:
            r = False
            for d in op.input_tensors:
                if d is t or (d.op in self._inline and self.leads_to(d.op, t)):
                    r = True
                    break
            self._leads[key] = r
        return r

    def contribs(self, c: Tensor, t: Tensor, adj: _Adjoint) -> list:
        """The contributions of ``c`` to ``t``'s adjoint.  ``c``'s own body is differentiated;
        reads of inlined data-movement stages that lead to ``t`` are expanded on the way
        (so ``t``'s index map is seen through a padding or a reshape), while the other
        factors keep reading the stages as they are (a convolution's weight gradient reads
        the padded input, with no bounds test)."""
        op: ComputeOp = c.op
        body = op.body
        domain = list(op.axis) + list(op.reduce_axis)
        ivars = [iv.var for iv in op.axis]
        seed = adj.read(ivars)
        where = f"compute {c.name}"

        def is_target(e):
            return isinstance(e, ProducerLoad) and e.producer is t

        def expand(e):
            sop = e.producer.op
            if sop in self._inline and self.leads_to(sop, t):
                return substitute(sop.body, {iv.var: x for iv, x in zip(sop.axis, e.indices)})
            return None

        if isinstance(body, Reduce):
            kind, rule = _rules.reducer_kind(body.combiner)
            guards = [] if _is_true(body.condition) else [body.condition]
            if kind is None:
                raise AutodiffError(
                    f"compute {c.name} reduces with the comm_reducer {body.combiner.name!r}, "
                    "which has no derivative; register one with "
                    "tecomp.autodiff.register_derivative(reducer, lambda x, rest: d_combine/d_x) "
                    "or register_derivative(reducer, 'fcombine') to derive it from fcombine")
            if kind in ("max", "min"):
                # compared in int64: the gradient's inversion moves index terms next
                # to the load, and int32 sums with a load (any int32 value to the index
                # checks) could wrap
                arg = self.arg_stage(c, body, kind)[tuple(ivars)].astype("int64")
                lin = _lin_index(body.axis).astype("int64")
                at = _op.compare(EQ, lin, arg)
                if _dt.is_float(body.source.dtype):
                    # (a NaN's position p is there as -1 - p: no decoding select)
                    at = _op.any_(at, _op.compare(
                        EQ, _op.binary("-", Const(-1, "int64"), lin), arg))
                guards.append(at)
            elif kind == "rule":
                seed = _mul(seed, self.reducer_factor(c, body, rule))
            leaves = partials(body.source, is_target, seed, tuple(guards), where=where,
                              expand=expand)
        else:
            root_value = c[tuple(ivars)] if isinstance(body, Call) else None
            leaves = partials(body, is_target, seed, (), root_value=root_value, where=where,
                              expand=expand)
        out = []
        pt = self.ptemplate(t)
        for leaf, term, guards in leaves:
            if any(_has_load(i) for i in leaf.indices):
                # a read through an index tensor (an embedding): its transpose is a
                # scatter-add over c's domain, len(domain) work instead of a gather that
                # tests every point of c's domain for every element of t
                out.append(("scatter", c.name, _scatter_spec(leaf.indices, term, guards,
                                                             domain, t, c.name)))
                continue
            expr = _gather(leaf.indices, term, guards, domain, pt, t)
            if expr is not None:
                out.append(("expr", c.name, expr))
        self._tags[c.name] = op.tag
        return out

    # -- helper stages ---------------------------------------------------------------
    def arg_stage(self, c: Tensor, body: Reduce, kind: str) -> Tensor:
        """``c.argmax[i]``: the first (row-major over the reduce axes) position where the
        reduced expression equals the extremum ``c[i]`` (never a padding of the
        reducer's identity: :func:`_off_padding`); where it holds a NaN, ``-1 - p`` with
        ``p`` its last NaN's position."""
        key = (id(c), kind)
        st = self._helpers.get(key)
        if st is not None:
            return st
        op: ComputeOp = c.op

        def f(*i):
            new_r = [_copy_axis(iv) for iv in body.axis]
            vm = {ax.var: x for ax, x in zip(op.axis, i)}
            vm.update({iv.var: nr.var for iv, nr in zip(body.axis, new_r)})
            src = substitute(body.source, vm)
            cond = substitute(body.condition, vm)
            hit = _op.compare(EQ, src, c[tuple(i)])
            data = _off_padding(src, kind)
            if data is not None:
                hit = _op.all_(data, hit)
            lin = _lin_index(new_r)
            val = _op.if_then_else(hit, lin, Const(2**31 - 1, "int32"))
            if _dt.is_float(src.dtype):
                # a NaN (the extremum is NaN then): the last one, as -1 - position
                # (PyTorch's max pooling); smaller than any position, and the later the
                # smaller
                val = _op.if_then_else(_op.compare(NE, src, src),
                                       _op.binary("-", Const(-1, "int32"), lin), val)
            return _reduce.min(val, axis=new_r, where=None if _is_true(cond) else cond)

        st = compute(c.shape, _named(_axis_names(c), f),
                     name=f"{c.name}.{'argmax' if kind == 'max' else 'argmin'}",
                     tag="grad_helper", attrs={"autodiff.helper": "argextremum"})
        self._helpers[key] = st
        return st

    def reducer_factor(self, c: Tensor, body: Reduce, rule) -> Expr:
        """``d combine(x, rest) / d x`` at ``x`` = the reduced element, ``rest`` = the
        reduction of every other element (a helper stage ``c.rest``, only if used)."""
        dt = body.dtype
        xv, rv = Var("x", dt), Var("rest", dt)
        if rule == "fcombine":
            comb = body.combiner
            leaves = partials(comb.result, lambda e: e is comb.lhs, None,
                              where=f"the fcombine of reducer {comb.name}")
            d = None
            for _, term, guards in leaves:
                for gcond in reversed(guards):
                    term = _op.if_then_else(gcond, term, Const(0.0, dt))
                d = term if d is None else _op.binary("+", d, term)
            if d is None:
                d = Const(0.0, dt)
            d = substitute(d, {comb.lhs: xv, comb.rhs: rv})
        else:
            d = _as_expr_dt(rule(xv, rv), dt)
        if uses_var(d, rv):
            rest = self.rest_stage(c, body)
            ivars = [iv.var for iv in c.op.axis]
            ridx = [_op.binary("-", iv.var, iv.dom.min) for iv in body.axis]
            d = substitute(d, {rv: rest[tuple(ivars + ridx)]})
        return substitute(d, {xv: body.source})

    def rest_stage(self, c: Tensor, body: Reduce) -> Tensor:
        key = (id(c), "rest")
        st = self._helpers.get(key)
        if st is not None:
            return st
        op: ComputeOp = c.op
        red = _rules.reducer_of(body.combiner)
        n = len(op.axis)
        shape = tuple(c.shape) + tuple(iv.dom.extent for iv in body.axis)
        names = _axis_names(c) + [f"{iv.var.name}_" for iv in body.axis]

        def f(*idx):
            i, tpos = idx[:n], idx[n:]
            new_r = [_copy_axis(iv) for iv in body.axis]
            vm = {ax.var: x for ax, x in zip(op.axis, i)}
            vm.update({iv.var: nr.var for iv, nr in zip(body.axis, new_r)})
            src = substitute(body.source, vm)
            cond = substitute(body.condition, vm)
            differs = _op.any_(*[_op.compare(NE, _op.binary("-", nr.var, nr.dom.min), tp)
                                 for nr, tp in zip(new_r, tpos)])
            w = differs if _is_true(cond) else _op.all_(cond, differs)
            return red(src, axis=new_r, where=w)

        st = compute(shape, _named(names, f), name=f"{c.name}.rest", tag="grad_helper",
                     attrs={"autodiff.helper": "rest"})
        self._helpers[key] = st
        return st


def _as_expr_dt(x, dt):
    if isinstance(x, Expr):
        return x
    return Const(float(x), dt)


def _copy_axis(iv):
    d = iv.dom
    if isinstance(d.min, Const) and d.min.value == 0:
        return reduce_axis(d.extent, name=iv.var.name)
    return reduce_axis((d.min, _op.add(d.min, d.extent)), name=iv.var.name)


def _off_padding(src: Expr, kind: str) -> Optional[Expr]:
    """Where ``src`` (a max's or min's reduced element) reads data rather than a
    padding of the reducer's identity (``-inf`` for a max, ``+inf`` for a min, an integer
    type's limit): the condition of ``cond ? data : identity`` (or its negation), None
    when it reads no such padding.  A padding is never the extremum that takes the
    gradient (PyTorch's max pooling): a window whose data are all ``-inf`` gives it to
    its first data element, one on padding only to nothing."""
    while isinstance(src, Cast):
        src = src.value
    if isinstance(src, ProducerLoad) and isinstance(src.producer, Tensor):
        # a padding stage of its own (the forward reads it too): its body at the index
        op = src.producer.op
        if not isinstance(op, ComputeOp) or len(op.bodies) != 1 or \
                isinstance(op.bodies[0], Reduce) or len(src.indices) != len(op.axis):
            return None
        src = substitute(op.bodies[0], {iv.var: x for iv, x in zip(op.axis, src.indices)})
    if not isinstance(src, Select):
        return None
    dt = src.dtype
    if _dt.is_float(dt):
        ident = -math.inf if kind == "max" else math.inf
    elif _dt.is_int(dt) or _dt.is_uint(dt):
        lo, hi = _dt.int_limits(dt)
        ident = lo if kind == "max" else hi
    else:
        return None

    def is_ident(e):
        while isinstance(e, Cast):
            e = e.value
        return isinstance(e, Const) and e.value == ident

    if is_ident(src.false_value) and not is_ident(src.true_value):
        return src.cond
    if is_ident(src.true_value) and not is_ident(src.false_value):
        return Not(src.cond)
    return None


def _lin_index(axes) -> Expr:
    """Row-major position of the reduce axes ``axes`` (relative to their minimums)."""
    out = None
    for iv in axes:
        x = _op.binary("-", iv.var, iv.dom.min) if not (
            isinstance(iv.dom.min, Const) and iv.dom.min.value == 0) else iv.var
        out = x if out is None else _op.binary("+", _op.binary("*", out, iv.dom.extent), x)
    return out


def _hoist(term: Expr):
    """``a * select(c, b, 0)`` -> ``(a * b, [c])``: a factor that is zero outside a condition
    moves the condition out (into the reduction's ``where``), so nothing is computed there."""
    t = type(term)
    if t is Select and isinstance(term.false_value, Const) and term.false_value.value == 0:
        inner, conds = _hoist(term.true_value)
        return inner, [term.cond] + conds
    if t is Mul:
        a, ca = _hoist(term.a)
        b, cb = _hoist(term.b)
        if not ca and not cb:
            return term, []
        return _op.binary("*", a, b), ca + cb
    return term, []


def _scatter_spec(indices, term, guards, domain, t: Tensor, cname: str):
    """A function ``(name, attrs) -> Tensor``: the scatter-add of ``term`` at ``t[indices]``
    over ``domain`` (fresh copies of its axes), where ``guards`` hold."""
    axes = [IterVar(Var(iv.var.name, iv.var.dtype), iv.dom, "data_par") for iv in domain]
    vmap = {iv.var: a.var for iv, a in zip(domain, axes)}
    index = tuple(substitute(i, vmap) for i in indices)
    value = substitute(term, vmap)
    if value.dtype != t.dtype:
        value = value.astype(t.dtype)
    cond = substitute(_op.all_(*guards), vmap) if guards else Const(True, "bool")

    def make(name, attrs):
        return ScatterOp(name, t.shape, t.dtype, axes, index, value, cond,
                         tag="scatter_grad", attrs=attrs).output(0)
    return make


def _gather(indices, term, guards, domain, pt, t: Tensor) -> Optional[Expr]:
    """The contribution ``sum_{u : h(u) = p} term(u)`` (where guards hold) as an expression
    over the template variables ``pt`` of ``t``'s axes: a ``tc.sum`` over the free variables,
    or an elementwise ``if_then_else`` when the map is one-to-one.

    Conditions without loads (index arithmetic) are rewritten exactly through the inverted
    map and go into the reduction's ``where`` (they are safe to evaluate anywhere); those
    that read tensors (a relu's ``x > 0``, a max's argmax test) are nested ``if_then_else``s
    inside, evaluated only where the index conditions hold."""
    term, hoisted = _hoist(term)
    guards = list(guards) + hoisted
    pure_g = [g for g in guards if not _has_load(g)]
    loaded_g = [g for g in guards if _has_load(g)]
    inv = invert(indices, domain, pt, t.shape, guards=pure_g)
    conds = list(inv.conditions)
    conds += [inv.apply(g) for g in loaded_g]
    if any(_is_false(c) for c in conds):
        return None
    conds = [c for c in conds if not _is_true(c)]
    value = inv.apply(term)
    pure = [c for c in conds if not _has_load(c)]
    loaded = [c for c in conds if _has_load(c)]
    zero = Const(0.0, value.dtype)
    for c in reversed(loaded):
        value = _op.if_then_else(c, value, zero)
    if inv.axes:
        return _reduce.sum(value, axis=list(inv.axes), where=_op.all_(*pure) if pure else None)
    if pure:
        value = _op.if_then_else(_op.all_(*pure), value, zero)
    return value


# ---------------------------------------------------------------------------------
# the API


@deep_entry(lambda output, inputs=None, head=None: ("tc.gradient", [output, head]))
def gradient(output: Tensor, inputs: Union[Tensor, Sequence[Tensor]],
             head: Optional[Tensor] = None) -> Union[Tensor, List[Tensor]]:
    """The gradient of ``output`` with respect to each of ``inputs``, contracted with ``head``.

    The gradients are ordinary compute definitions: schedule them with
    ``tc.create_schedule([g.op for g in grads])`` (or
    :func:`tecomp.strategy.schedule_backward`) and pass the placeholders they read (the
    forward's inputs and ``head``) to ``tc.build``.  An input that ``output`` does not
    depend on gets a gradient of zeros.

    Parameters
    ----------
    output : Tensor
        The tensor differentiated.
    inputs : Tensor or sequence of Tensor
        The tensors to differentiate with respect to (placeholders or computes).
    head : Tensor, optional
        The adjoint of ``output``: a tensor of its shape and dtype, e.g. a placeholder
        ``dL/d output`` given at call time; ``None`` means ones (the gradient of
        ``sum(output)``).

    Returns
    -------
    Tensor or list of Tensor
        ``inputs[k]``'s gradient at position ``k``, named ``<input>.grad`` (one tensor
        if ``inputs`` is a single tensor).

    Raises
    ------
    AutodiffError
        For what cannot be differentiated (an integer input, a reducer or intrinsic
        without a derivative), naming the tensor and the fix.

    Examples
    --------
    >>> import tecomp as tc
    >>> X = tc.placeholder((4, 8), name="X")
    >>> W = tc.placeholder((8, 3), name="W")
    >>> k = tc.reduce_axis((0, 8), name="k")
    >>> Y = tc.compute((4, 3), lambda i, j: tc.sum(X[i, k] * W[k, j], axis=k), name="Y")
    >>> H = tc.placeholder((4, 3), name="H")
    >>> gX, gW = tc.gradient(Y, [X, W], head=H)
    >>> gW.name
    'W.grad'
    """
    single = isinstance(inputs, Tensor)
    ins = [inputs] if single else list(inputs) if isinstance(inputs, (list, tuple)) else None
    if not isinstance(output, Tensor):
        raise AutodiffError(f"tc.gradient: output must be a tensor, got {output!r}")
    if ins is None or not ins:
        raise AutodiffError("tc.gradient(output, inputs): inputs must be a tensor or a non-empty "
                            f"list of tensors, got {inputs!r}")
    for x in ins:
        if not isinstance(x, Tensor):
            raise AutodiffError(f"tc.gradient: every input must be a tensor, got {x!r}")
        if not _dt.is_float(x.dtype):
            raise AutodiffError(
                f"tc.gradient: input {x.name} has dtype {x.dtype}, which is not differentiable; "
                "differentiate with respect to float tensors only")
    if not _dt.is_float(output.dtype):
        raise AutodiffError(f"tc.gradient: output {output.name} has dtype {output.dtype}; only a "
                            "float output has a gradient")
    if head is not None:
        if not isinstance(head, Tensor):
            raise AutodiffError(f"tc.gradient: head must be a tensor of {output.name}'s shape "
                                f"{_shape_str(output)} (or None for ones), got {head!r}")
        if not _same_shape(head, output) or head.dtype != output.dtype:
            raise AutodiffError(
                f"tc.gradient: head {head.name} has shape {_shape_str(head)} and dtype "
                f"{head.dtype} but output {output.name} has shape {_shape_str(output)} and dtype "
                f"{output.dtype}; the head must match the output exactly")

    for op in compute_ops([output]):
        if hasattr(op, "scan_axis") and not op.attrs.get(STOP_GRADIENT):
            raise AutodiffError(
                f"tc.gradient: {output.name} "
                f"{'is' if op is output.op else 'depends on ' + op.name + ','} a scan (tc.scan), and tecomp "
                "derives no gradient through a recurrence yet; unroll the steps as computes, or "
                f"mark it constant with tecomp.autodiff.stop_gradient({op.name}) if it does not "
                "depend on the inputs")
        if isinstance(op, ScatterOp) and not op.attrs.get(STOP_GRADIENT):
            raise AutodiffError(
                f"tc.gradient: {output.name} depends on {op.name}, a scatter-add, and tecomp "
                "derives no gradient through a scatter yet; write it as a tc.compute (a gather), "
                f"or mark it constant with tecomp.autodiff.stop_gradient({op.name}) if it does "
                "not depend on the inputs")
        call = getattr(op, "call", None)
        if call is not None and not op.attrs.get(STOP_GRADIENT):
            raise AutodiffError(
                f"tc.gradient: {output.name} depends on {op.name}, an extern stage (a call to "
                f"{call.name}), whose derivative tecomp cannot see; differentiate the computes "
                f"around it, or mark it constant with tecomp.autodiff.stop_gradient("
                f"{op.output(0).name}) if it does not depend on the inputs")
        if len(op.bodies) > 1 and not op.attrs.get(STOP_GRADIENT):
            raise AutodiffError(
                f"tc.gradient: {output.name} depends on {op.name}, a multi-output compute "
                f"({len(op.bodies)} outputs, e.g. a tuple reduction such as argmax), and "
                "tecomp derives no gradient through one; compute its outputs in separate "
                f"tc.compute calls, or mark it constant with "
                f"tecomp.autodiff.stop_gradient({op.name}.v0) if it does not depend on the "
                "inputs")
    seen, uniq = set(), []
    for x in ins:
        if id(x) not in seen:
            seen.add(id(x))
            uniq.append(x)
    res = _Gradient(output, uniq, head).run()
    by_id = {id(x): g for x, g in zip(uniq, res)}
    out = [by_id[id(x)] for x in ins]
    return out[0] if single else out


def stop_gradient(t: Tensor) -> Tensor:
    """Mark the compute ``t`` as a constant for differentiation.

    Used by the softmax of :mod:`tecomp.nn` for its row maximum, which does not change
    the result.

    Parameters
    ----------
    t : Tensor
        A compute tensor.

    Returns
    -------
    Tensor
        ``t`` itself.
    """
    if not isinstance(t.op, PlaceholderOp):   # a compute, or an extern stage
        t.op.attrs[STOP_GRADIENT] = True
    return t
