"""ATen operators as tecomp computes: the rules the ``torch.compile`` backend translates
an FX graph's nodes with.

Each rule takes a :class:`Lowering` (the region being translated) and an FX node and
returns the node's value as tecomp tensors (a tuple for an operator with several
outputs).  Where an operator has a ``tecomp.nn`` compute (``dense``, ``conv2d_nchw``,
``softmax``, ``layer_norm``, ...) the rule uses it, so ``tc.auto_schedule`` gives it the
operator's template; the rest are written here as ``tc.compute`` over the output's
index space (broadcasting as PyTorch does).  :func:`unsupported` says why a node cannot be
translated (None where it can): those run eagerly.

Shapes are the concrete ones of the specialisation being compiled (every extent an int),
or, for a region of a graph with symbolic sizes (:mod:`tecomp.dynamo.symbolic`), ints and
tecomp expressions of ``tc.var`` extents: the rules then decide what depends on a size
(broadcasting, a reshape's groups) by proving it for every size in the symbols' ranges
(:func:`same`, :func:`less`), and raise :class:`~tecomp.dynamo.symbolic.NotSymbolic` where
they cannot (the region is then specialised per size).
"""
from __future__ import annotations

import math
import operator
import threading
from typing import Callable, Dict, List, Optional, Sequence

import torch

from .. import nn as _nn
from .. import te as _te
from ..errors import InternalError
from ..ir.arith import disprove, prove
from ..ir.expr import Const, Expr
from .symbolic import NotSymbolic, SymMeta
from .prepack import _pack

aten = torch.ops.aten

#: torch dtypes a region computes in (others run eagerly)
DTYPES = {torch.float32: "float32", torch.float64: "float64", torch.int32: "int32",
          torch.int64: "int64", torch.bool: "bool"}

#: aten overload -> (rule, check): check(node, vals) is a reason it cannot be lowered or None
RULES: Dict[object, tuple] = {}

#: overloads that only move data: a region made of these alone runs eagerly (as views)
VIEWS = set()

#: overloads that anchor a kernel (see :mod:`tecomp.dynamo.graph`): ``"op"`` for those
#: with a template of their own (GEMMs, convolutions, pooling, softmax, the norms,
#: attention), each the start of a new kernel with its elementwise consumers as epilogue;
#: ``"reduction"`` for plain reductions, which start a kernel after an ``"op"`` and join
#: a kernel of elementwise stages and reductions
ANCHORS: Dict[object, str] = {}


def rule(*ops, check: Optional[Callable] = None, view: bool = False,
         anchor: Optional[str] = None):
    def deco(fn):
        for o in ops:
            RULES[o] = (fn, check)
            if view:
                VIEWS.add(o)
            if anchor is not None:
                ANCHORS[o] = anchor
        return fn
    return deco


def is_tensor(v) -> bool:
    """Whether a node's value is a tensor (a fake tensor, or a symbolic region's
    :class:`~tecomp.dynamo.symbolic.SymMeta`)."""
    return isinstance(v, (torch.Tensor, SymMeta))


#: the ranges of the symbolic extents of the region being lowered (lower_region)
_CTX = threading.local()


def _decide(cond, what: str) -> bool:
    r = getattr(_CTX, "ranges", None)
    if prove(cond, r):
        return True
    if disprove(cond, r):
        return False
    raise NotSymbolic(f"{what} depends on the size")


def _as_expr(a):
    return _te.const(a, "int64") if isinstance(a, int) else a


def same(a, b) -> bool:
    """Whether extents ``a`` and ``b`` (ints or symbolic) are equal for every size;
    NotSymbolic where that depends on the size."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    return _decide(_as_expr(a) == _as_expr(b), f"whether {a} equals {b}")


def less(a, b) -> bool:
    """Whether extent ``a`` is below ``b`` for every size (as :func:`same`)."""
    if isinstance(a, int) and isinstance(b, int):
        return a < b
    return _decide(_as_expr(a) < _as_expr(b), f"whether {a} is below {b}")


def _tensors(x):
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, (list, tuple)):
        for y in x:
            yield from _tensors(y)


def unsupported(node, vals) -> Optional[str]:
    """Why ``node`` cannot be part of a tecomp region (None when it can); ``vals`` maps
    nodes to their (fake) values."""
    if node.op != "call_function":
        return "not an operator call"
    if node.target is operator.getitem:
        src = node.args[0]
        if unsupported(src, vals) is not None:
            return "reads an operator that runs eagerly"
        return None
    entry = RULES.get(node.target)
    if entry is None:
        return "no tecomp lowering"
    fn, check = entry
    node = _bind(node, vals)
    ins = [vals.get(a) for a in node.all_input_nodes]
    for t in list(_tensors(ins)) + list(_tensors(vals.get(node))):
        if t.dtype not in DTYPES:
            return f"dtype {t.dtype}"
        if t.device.type != "cpu":
            return f"device {t.device}"
    for t in _tensors(ins):
        if 0 in t.shape:
            return "an empty tensor"
    out = vals.get(node)
    if isinstance(out, torch.Tensor) and 0 in out.shape:
        return "an empty tensor"
    if check is not None:
        return check(node, vals)
    return None


def bound_args(node, vals, inside=()) -> tuple:
    """``node``'s ``(args, kwargs)`` with the values of the nodes it reads that are not
    tensors (the integers of a specialised symbolic shape: a slice's start computed from
    a dynamic size) put in; nodes in ``inside`` (those of the region) are kept."""
    def sub(a):
        if isinstance(a, torch.fx.Node) and a not in inside:
            v = vals.get(a)
            return v if not is_tensor(v) else a
        if isinstance(a, (list, tuple)):
            return type(a)(sub(x) for x in a)
        return a
    return (sub(node.args), {k: sub(v) for k, v in node.kwargs.items()})


class _Bound:
    """An FX node seen through :func:`bound_args` (the rules read plain integers where
    the graph has SymInt nodes); everything else, its hash and its equality are the
    node's, so ``vals[bound]`` is ``vals[node]``."""

    __slots__ = ("node", "args", "kwargs")

    def __init__(self, node, vals):
        self.node = node
        self.args, self.kwargs = bound_args(node, vals)

    def __getattr__(self, name):
        return getattr(self.node, name)

    def __hash__(self):
        return hash(self.node)

    def __eq__(self, other):
        return other is self.node or other is self


def _bind(node, vals):
    """``node``, or a :class:`_Bound` of it where it reads a non-tensor node."""
    for a in node.all_input_nodes:
        if not is_tensor(vals.get(a)):
            return _Bound(node, vals)
    return node


class Lowering:
    """One region's translation: ``env`` maps FX nodes to tecomp tensors (or Python
    values), ``vals`` to the values fake-propagated through the graph."""

    def __init__(self, vals):
        self.vals = vals
        self.env: Dict[object, object] = {}
        self.count = 0
        self.transposed: Dict[int, object] = {}  # id(te tensor) -> its 2-d source
        # an input read packed (lowering_nn.weight_packs) -> (its Pack, its placeholder)
        self.packs: Dict[object, tuple] = {}

    def name(self, node) -> str:
        self.count += 1
        base = getattr(node.target, "__name__", "op").split(".")[0]
        return f"{base}_{self.count}"

    def arg(self, a):
        """An argument: the tecomp tensor of a node, a Python value otherwise."""
        if isinstance(a, torch.fx.Node):
            if a in self.env:
                return self.env[a]
            v = self.vals.get(a)
            if is_tensor(v):
                raise InternalError(f"tecomp.dynamo: node {a.name} is not an input of the "
                                    f"region being lowered")
            return v
        if isinstance(a, (list, tuple)):
            return type(a)(self.arg(x) for x in a)
        return a

    def lower(self, node):
        if node.target is operator.getitem:
            return self.arg(node.args[0])[node.args[1]]
        fn, _ = RULES[node.target]
        return fn(self, _bind(node, self.vals))

    def out(self, node) -> torch.Tensor:
        v = self.vals[node]
        return v if is_tensor(v) else v[0]


# -- helpers --------------------------------------------------------------------------
def _dim(s):
    """An extent: an int, or a tecomp expression where it is symbolic."""
    if isinstance(s, Const):
        return int(s.value)
    if isinstance(s, Expr):
        return s
    return int(s)


def _shape(t) -> tuple:
    return tuple(_dim(s) for s in t.shape)


def _cast(x, dtype: str):
    if isinstance(x, (bool, int, float)):
        return _te.const(bool(x) if dtype == "bool" else x, dtype)
    return x if x.dtype == dtype else _te.cast(x, dtype)


def _load(x, idx, shape, dtype):
    """``x`` (a tecomp tensor or a number) at output index ``idx`` of ``shape``,
    broadcast as PyTorch does, in ``dtype``."""
    if not isinstance(x, _te.Tensor):
        if isinstance(x, float) and dtype in ("int32", "int64", "bool"):
            raise InternalError("tecomp.dynamo: a float scalar in an integer computation")
        return _cast(x, dtype)
    xs = _shape(x)
    off = len(shape) - len(xs)
    ix = []
    for k in range(len(xs)):
        a, b = xs[k], shape[off + k]
        if isinstance(a, int) and isinstance(b, int):
            ix.append(0 if (a == 1 and b != 1) else idx[off + k])
        elif isinstance(a, int) and a == 1:  # broadcast along a symbolic extent
            ix.append(0)
        elif same(a, b):
            ix.append(idx[off + k])
        else:
            raise NotSymbolic(f"a broadcast of extent {a} to {b}")
    return _cast(x[tuple(ix)], dtype)


def _proxy(v):
    if is_tensor(v):
        return torch.empty(() if v.dim() == 0 else (1,), dtype=v.dtype)
    return v


def _promoted(lw, node, args) -> str:
    """The dtype PyTorch computes ``args`` in (its type promotion)."""
    vals = [lw.vals.get(a) if isinstance(a, torch.fx.Node) else a for a in args]
    return DTYPES[torch.result_type(*[_proxy(v) for v in vals])] if len(vals) == 2 else \
        DTYPES[_proxy(vals[0]).dtype if is_tensor(vals[0]) else torch.float32]


def _elementwise(lw, node, fn, args, compute_dtype: Optional[str] = None):
    """``fn(*loaded args)`` at each index of the node's output."""
    out = lw.out(node)
    shape, odt = _shape(out), DTYPES[out.dtype]
    cdt = compute_dtype or odt
    xs = [lw.arg(a) for a in args]

    def body(*i):
        return _cast(fn(*[_load(x, i, shape, cdt) for x in xs]), odt)

    return _te.compute(shape, body, name=lw.name(node))


def _float_only(node, vals):
    out = vals[node]
    if isinstance(out, torch.Tensor) and not out.dtype.is_floating_point:
        return "an integer operand of a float function"
    return None


# -- elementwise ----------------------------------------------------------------------
_UNARY = {
    aten.exp.default: _te.exp, aten.log.default: _te.log, aten.sqrt.default: _te.sqrt,
    aten.rsqrt.default: _te.rsqrt, aten.erf.default: _te.erf, aten.tanh.default: _te.tanh,
    aten.sigmoid.default: _te.sigmoid, aten.sin.default: _te.sin, aten.cos.default: _te.cos,
    aten.log1p.default: _te.log1p, aten.expm1.default: _te.expm1,
    aten.reciprocal.default: lambda x: 1.0 / x if x.dtype != "float64" else
    _te.const(1.0, "float64") / x,
    aten.floor.default: _te.floor, aten.ceil.default: _te.ceil, aten.trunc.default: _te.trunc,
}


def _unary(lw, node):
    return _elementwise(lw, node, _UNARY[node.target], node.args[:1])


rule(*_UNARY, check=_float_only)(_unary)


@rule(aten.abs.default)
def _abs(lw, node):
    return _elementwise(lw, node, _te.abs, node.args[:1])


@rule(aten.neg.default)
def _neg(lw, node):
    return _elementwise(lw, node, lambda x: -x, node.args[:1])


@rule(aten.sign.default)
def _sign(lw, node):
    # PyTorch's sign is (0 < x) - (x < 0): 0 for NaN (tc.sign keeps NaN, as numpy does),
    # +0 for -0.0; a bool tensor is its own sign
    dt = DTYPES[lw.out(node).dtype]
    if dt == "bool":
        return _elementwise(lw, node, lambda x: x, node.args[:1])
    one, zero = _te.const(1, dt), _te.const(0, dt)
    return _elementwise(lw, node, lambda x: _te.select(x > zero, one, zero) -
                        _te.select(x < zero, one, zero), node.args[:1])


@rule(aten.relu.default)
def _relu(lw, node):
    dt = DTYPES[lw.out(node).dtype]
    return _elementwise(lw, node, lambda x: _te.maximum(x, _te.const(0, dt)), node.args[:1])


def _gelu_check(node, vals):
    return _float_only(node, vals) or (
        None if node.kwargs.get("approximate", "none") in ("none", "tanh") else "approximate")


@rule(aten.gelu.default, check=_gelu_check)
def _gelu(lw, node):
    dt = DTYPES[lw.out(node).dtype]
    c = lambda v: _te.const(v, dt)  # noqa: E731
    if node.kwargs.get("approximate", "none") == "tanh":
        k = math.sqrt(2.0 / math.pi)
        f = lambda x: c(0.5) * x * (c(1.0) + _te.tanh(c(k) * (x + c(0.044715) * x * x * x)))  # noqa: E731
    else:
        f = lambda x: c(0.5) * x * (c(1.0) + _te.erf(x * c(math.sqrt(0.5))))  # noqa: E731
    return _elementwise(lw, node, f, node.args[:1])


def _identity_check(node, vals):
    kw = dict(node.kwargs)
    kw.pop("dtype", None)
    kw.pop("memory_format", None)
    if kw.get("device") not in (None, torch.device("cpu")) or kw.get("layout") not in \
            (None, torch.strided) or kw.get("non_blocking", False):
        return "a device, layout or non-blocking copy"
    return None


@rule(aten.alias.default, check=_identity_check, view=True)
@rule(aten.clone.default, aten._to_copy.default, check=_identity_check)
def _copy(lw, node):
    x = lw.arg(node.args[0])
    if DTYPES[lw.out(node).dtype] == x.dtype:
        return x  # a copy of a tensor of the region: the tensor (outputs are copied)
    return _elementwise(lw, node, lambda v: v, node.args[:1])


@rule(aten.add.Tensor, aten.add.Scalar, aten.sub.Tensor, aten.sub.Scalar)
def _add(lw, node):
    a, b = node.args[:2]
    alpha = node.kwargs.get("alpha", 1)
    sub = node.target in (aten.sub.Tensor, aten.sub.Scalar)
    dt = DTYPES[lw.out(node).dtype]
    if alpha != 1:
        k = _te.const(alpha, dt)
        f = (lambda x, y: x - y * k) if sub else (lambda x, y: x + y * k)
    else:
        f = (lambda x, y: x - y) if sub else (lambda x, y: x + y)
    return _elementwise(lw, node, f, (a, b))


@rule(aten.rsub.Scalar)
def _rsub(lw, node):
    alpha = node.kwargs.get("alpha", 1)
    dt = DTYPES[lw.out(node).dtype]
    return _elementwise(lw, node, lambda x, y: y - x * _te.const(alpha, dt), node.args[:2])


@rule(aten.mul.Tensor, aten.mul.Scalar)
def _mul(lw, node):
    return _elementwise(lw, node, lambda x, y: x * y, node.args[:2])


def _div_check(node, vals):
    if node.kwargs.get("rounding_mode") is not None:
        return "a rounding mode"
    return _float_only(node, vals)


@rule(aten.div.Tensor, aten.div.Scalar, check=_div_check)
def _div(lw, node):
    return _elementwise(lw, node, lambda x, y: x / y, node.args[:2])


@rule(aten.maximum.default, aten.minimum.default)
def _maxmin(lw, node):
    f = _te.maximum if node.target is aten.maximum.default else _te.minimum
    return _elementwise(lw, node, f, node.args[:2])


def _pow_check(node, vals):
    return _float_only(node, vals) or (None if isinstance(node.args[1], (int, float))
                                       else "a tensor exponent")


@rule(aten.pow.Tensor_Scalar, check=_pow_check)
def _pow(lw, node):
    e = node.args[1]
    dt = DTYPES[lw.out(node).dtype]
    if e == 2:
        return _elementwise(lw, node, lambda x: x * x, node.args[:1])
    if e == 0.5:
        return _elementwise(lw, node, _te.sqrt, node.args[:1])
    if e == -0.5:
        return _elementwise(lw, node, _te.rsqrt, node.args[:1])
    return _elementwise(lw, node, lambda x: _te.pow(x, _te.const(float(e), dt)), node.args[:1])


@rule(aten.pow.Tensor_Tensor, aten.pow.Scalar, check=_float_only)
def _pow_tensors(lw, node):
    # pow.Scalar: a number base, a tensor exponent (``2 ** x``)
    return _elementwise(lw, node, _te.pow, node.args[:2])


@rule(aten.atan2.default, check=_float_only)
def _atan2(lw, node):
    return _elementwise(lw, node, _te.atan2, node.args[:2])


_CMP = {"eq": lambda x, y: _te.eq(x, y), "ne": lambda x, y: _te.ne(x, y),
        "lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge}


def _compare(lw, node):
    f = _CMP[node.target._overloadpacket.__name__]
    return _elementwise(lw, node, f, node.args[:2], _promoted(lw, node, node.args[:2]))


for _n in _CMP:
    rule(getattr(aten, _n).Tensor, getattr(aten, _n).Scalar)(_compare)


@rule(aten.logical_not.default)
def _not(lw, node):
    return _elementwise(lw, node, lambda x: _te.eq(x, _te.const(False, "bool")), node.args[:1],
                        "bool")


@rule(aten.logical_and.default, aten.logical_or.default)
def _logic(lw, node):
    f = _te.all if node.target is aten.logical_and.default else _te.any
    return _elementwise(lw, node, f, node.args[:2], "bool")


@rule(aten.where.self)
def _where(lw, node):
    cond, a, b = node.args
    out = lw.out(node)
    shape, dt = _shape(out), DTYPES[out.dtype]
    c, x, y = lw.arg(cond), lw.arg(a), lw.arg(b)
    return _te.compute(shape, lambda *i: _te.select(_load(c, i, shape, "bool"),
                                                    _load(x, i, shape, dt),
                                                    _load(y, i, shape, dt)),
                       name=lw.name(node))


def _clamp_check(node, vals):
    for v in node.args[1:3]:
        if isinstance(v, torch.fx.Node):
            return "tensor bounds"
    return None


@rule(aten.clamp.default, check=_clamp_check)
def _clamp(lw, node):
    lo = node.args[1] if len(node.args) > 1 else node.kwargs.get("min")
    hi = node.args[2] if len(node.args) > 2 else node.kwargs.get("max")
    dt = DTYPES[lw.out(node).dtype]

    def f(x):
        if lo is not None:
            x = _te.maximum(x, _te.const(lo, dt))
        if hi is not None:
            x = _te.minimum(x, _te.const(hi, dt))
        return x
    return _elementwise(lw, node, f, node.args[:1])


# -- constants ------------------------------------------------------------------------
def _full_check(node, vals):
    return _identity_check(node, vals) or (
        None if not isinstance(node.args[1], torch.fx.Node) else "a tensor fill value")


@rule(aten.full.default, check=_full_check)
def _full(lw, node):
    out = lw.out(node)
    dt = DTYPES[out.dtype]
    v = node.args[1]
    return _te.compute(_shape(out), lambda *i: _te.const(v if dt != "bool" else bool(v), dt),
                       name=lw.name(node))


@rule(aten.scalar_tensor.default, check=_identity_check)
def _scalar_tensor(lw, node):
    dt = DTYPES[lw.out(node).dtype]
    v = node.args[0]
    return _te.compute((), lambda: _te.const(v if dt != "bool" else bool(v), dt),
                       name=lw.name(node))


# -- reductions -----------------------------------------------------------------------
def _dims(dims, ndim) -> List[int]:
    if dims is None or dims == []:
        return list(range(ndim))
    if isinstance(dims, int):
        dims = [dims]
    return sorted(d % ndim if ndim else 0 for d in dims)


def _reduce(lw, node, x, dims, keepdim, kind: str):
    out = lw.out(node)
    odt = DTYPES[out.dtype]
    xs = _shape(x)
    axes = {d: _te.reduce_axis((0, xs[d]), name=f"k{d}") for d in dims}
    cdt = odt
    terms = [xs[d] for d in dims]
    if kind == "sum" and odt == "float32" and (
            not all(isinstance(t, int) for t in terms) or math.prod(terms) >= LONG_SUM):
        # a float32 running sum stops growing at 2**24 times its terms (2**25 ones summed
        # to 16777216), and drifts long before; eager PyTorch sums in a cascade: a sum of
        # that many terms per output (or of a symbolic count) accumulates in float64
        cdt = "float64"

    def body(*i):
        idx, j = [], 0
        for d in range(len(xs)):
            if d in axes:
                idx.append(axes[d])
                if keepdim:
                    j += 1
            else:
                idx.append(i[j])
                j += 1
        v = _cast(x[tuple(idx)], cdt)
        ax = [axes[d] for d in dims]
        if kind == "sum":
            return _te.sum(v, axis=ax)
        if kind == "max":
            return _te.max(v, axis=ax)
        return _te.min(v, axis=ax)

    r = _te.compute(_shape(out), body, name=lw.name(node))
    if cdt != odt:
        r = _te.compute(r.shape, lambda *i: _te.cast(r[i], odt), name=lw.name(node))
    return r


#: the number of float32 terms per output from which a sum accumulates in float64
LONG_SUM = 1 << 16


@rule(aten.sum.dim_IntList, aten.sum.default, anchor="reduction")
def _sum(lw, node):
    x = lw.arg(node.args[0])
    dims = node.args[1] if len(node.args) > 1 and node.target is aten.sum.dim_IntList else None
    keep = (node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False)) \
        if node.target is aten.sum.dim_IntList else False
    return _reduce(lw, node, x, _dims(dims, len(x.shape)), keep, "sum")


@rule(aten.mean.dim, check=_float_only, anchor="reduction")
def _mean(lw, node):
    x = lw.arg(node.args[0])
    dims = _dims(node.args[1] if len(node.args) > 1 else None, len(x.shape))
    keep = node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False)
    s = _reduce(lw, node, x, dims, keep, "sum")
    n = 1
    for d in dims:
        n *= _shape(x)[d]
    dt = s.dtype
    if not isinstance(n, int):  # a symbolic count
        return _te.compute(s.shape, lambda *i: s[i] / _te.cast(n, dt), name=lw.name(node))
    return _te.compute(s.shape, lambda *i: s[i] * _te.const(1.0 / n, dt), name=lw.name(node))


@rule(aten.amax.default, aten.amin.default, anchor="reduction")
def _amax(lw, node):
    x = lw.arg(node.args[0])
    dims = _dims(node.args[1] if len(node.args) > 1 else None, len(x.shape))
    keep = node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False)
    return _reduce(lw, node, x, dims, keep, "max" if node.target is aten.amax.default else "min")


# -- data movement --------------------------------------------------------------------
def _gather(lw, node, x, index_fn):
    """A copy of ``x``: output index -> input index."""
    out = lw.out(node)
    dt = DTYPES[out.dtype]
    return _te.compute(_shape(out), lambda *i: _cast(x[tuple(index_fn(i))], dt),
                       name=lw.name(node))


def _flat_index(i, shape):
    """The row-major offset of index ``i`` in ``shape``, as a sum of index * stride (which
    the simplifier divides term by term)."""
    f, stride = None, 1
    for k, s in zip(reversed(i), reversed(shape)):
        t = k if stride == 1 else k * stride
        f = t if f is None else t + f
        stride *= s
    return f


def _unflatten(f, shape):
    """The index in ``shape`` of the row-major offset ``f``."""
    idx = []
    for k, s in enumerate(reversed(shape)):
        if k == len(shape) - 1:
            idx.append(f)
        else:
            idx.append(_te.floormod(f, s))
            f = _te.floordiv(f, s)
    return list(reversed(idx))


@rule(aten.view.default, aten._unsafe_view.default, aten.reshape.default,
      aten.unsqueeze.default, aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default,
      view=True)
def _reshape(lw, node):
    x = lw.arg(node.args[0])
    xs, shape = _shape(x), _shape(lw.out(node))
    if xs == shape:
        return x
    a = [s for s in xs if not same(s, 1)]
    b = [s for s in shape if not same(s, 1)]
    if len(a) == len(b) and all(same(p, q) for p, q in zip(a, b)):
        # only unit dimensions added or dropped
        src = [d for d, s in enumerate(xs) if not same(s, 1)]
        dst = [d for d, s in enumerate(shape) if not same(s, 1)]

        def idx(i):
            m = dict(zip(src, (i[d] for d in dst)))
            return [m.get(d, 0) for d in range(len(xs))]
        return _gather(lw, node, x, idx)
    groups = _reshape_groups(xs, shape)
    if groups is None:
        return _gather(lw, node, x, lambda i: _unflatten(_flat_index(i, shape), xs)
                       if xs else [])

    def idx(i):
        out = []
        for (a0, a1), (b0, b1) in groups:
            if a1 - a0 == 1 and b1 - b0 == 1:
                out.append(i[b0])
            elif a1 == a0:  # unit dimensions of the output only
                continue
            elif b1 == b0:  # unit dimensions of the input only
                out.extend([0] * (a1 - a0))
            else:
                out.extend(_unflatten(_flat_index(i[b0:b1], shape[b0:b1]), xs[a0:a1]))
        return out
    return _gather(lw, node, x, idx)


def _reshape_groups(xs, ys):
    """Matching runs of the input's and the output's dimensions with equal products:
    ``[((a0, a1), (b0, b1)), ...]`` (a reshape then only merges or splits within a run);
    None where the shapes do not split so."""
    groups, a, b = [], 0, 0
    while a < len(xs) or b < len(ys):
        a0, b0 = a, b
        pa = pb = 1
        if a < len(xs):
            pa *= xs[a]
            a += 1
        if b < len(ys):
            pb *= ys[b]
            b += 1
        while not same(pa, pb):
            if less(pa, pb) and a < len(xs):
                pa *= xs[a]
                a += 1
            elif less(pb, pa) and b < len(ys):
                pb *= ys[b]
                b += 1
            else:
                return None
        groups.append(((a0, a), (b0, b)))
    return groups


@rule(aten.permute.default, view=True)
def _permute(lw, node):
    x = lw.arg(node.args[0])
    perm = [p % len(x.shape) for p in node.args[1]]
    inv = [perm.index(d) for d in range(len(perm))]
    t = _gather(lw, node, x, lambda i: [i[inv[d]] for d in range(len(perm))])
    if perm == [1, 0]:
        lw.transposed[id(t)] = x
    return t


@rule(aten.t.default, aten.transpose.int, view=True)
def _transpose(lw, node):
    x = lw.arg(node.args[0])
    n = len(x.shape)
    if node.target is aten.t.default:
        d0, d1 = 0, 1 if n == 2 else 0
    else:
        d0, d1 = node.args[1] % n, node.args[2] % n
    perm = list(range(n))
    perm[d0], perm[d1] = perm[d1], perm[d0]
    t = _gather(lw, node, x, lambda i: [i[perm[d]] for d in range(n)])
    if n == 2 and d0 != d1:
        lw.transposed[id(t)] = x
    return t


@rule(aten.expand.default, view=True)
def _expand(lw, node):
    x = lw.arg(node.args[0])
    shape = _shape(lw.out(node))
    dt = DTYPES[lw.out(node).dtype]
    return _te.compute(shape, lambda *i: _load(x, i, shape, dt), name=lw.name(node))


def _slice_check(node, vals):
    step = node.args[4] if len(node.args) > 4 else 1
    return None if step >= 1 else "a step below 1"


@rule(aten.slice.Tensor, check=_slice_check, view=True)
def _slice(lw, node):
    x = lw.arg(node.args[0])
    xs = _shape(x)
    dim = (node.args[1] if len(node.args) > 1 else 0) % len(xs)
    start = node.args[2] if len(node.args) > 2 else 0
    start = 0 if start is None else start
    if isinstance(start, int) and isinstance(xs[dim], int):
        if start < 0:
            start += xs[dim]
        start = min(max(start, 0), xs[dim])
    elif not (isinstance(start, int) and start >= 0) and not \
            _decide(_as_expr(start) >= 0, f"whether the slice start {start} is >= 0"):
        # (a start at or past a symbolic extent leaves nothing to read)
        raise NotSymbolic(f"a negative slice start {start} of a symbolic extent")
    step = node.args[4] if len(node.args) > 4 else 1
    return _gather(lw, node, x, lambda i: [i[d] * step + start if d == dim else i[d]
                                           for d in range(len(xs))])


@rule(aten.select.int, view=True)
def _select(lw, node):
    x = lw.arg(node.args[0])
    xs = _shape(x)
    dim, k = node.args[1] % len(xs), node.args[2]
    if isinstance(k, int) and isinstance(xs[dim], int):
        k %= xs[dim]
    elif isinstance(k, int) and k < 0:
        k = xs[dim] + k
    elif not isinstance(k, int) and not _decide(k >= 0, f"whether index {k} is >= 0"):
        raise NotSymbolic(f"a negative index {k} of a symbolic extent")
    return _gather(lw, node, x, lambda i: list(i[:dim]) + [k] + list(i[dim:]))


@rule(aten.cat.default)
def _cat(lw, node):
    xs = [x for x in lw.arg(node.args[0]) if 0 not in _shape(x)]
    dim = (node.args[1] if len(node.args) > 1 else 0) % len(_shape(lw.out(node)))
    dt = DTYPES[lw.out(node).dtype]
    xs = [_cast_tensor(lw, x, dt) for x in xs]
    if len(xs) == 1:
        return xs[0]
    if not all(isinstance(_shape(x)[dim], int) for x in xs):
        return _cat_symbolic(xs, dim, _shape(lw.out(node)), lw.name(node))
    return _nn.concatenate(xs, axis=dim, name=lw.name(node))


def _cat_symbolic(xs, dim, shape, name):
    """The concatenation along a symbolic extent (``nn.concatenate`` takes constant
    ones): each element selected from the part its index falls in, every part read at
    an index clamped into it (select evaluates both sides)."""
    parts, off = [], 0
    for x in xs:
        e = _shape(x)[dim]
        parts.append((off, e, x))
        off = e if isinstance(off, int) and off == 0 else off + e

    def body(*i):
        k = i[dim]
        v = None
        for start, e, x in reversed(parts):
            j = k if isinstance(start, int) and start == 0 else k - start
            idx = list(i)
            idx[dim] = _te.minimum(_te.maximum(j, 0), e - 1)
            load = x[tuple(idx)]
            v = load if v is None else _te.select(k < start + e, load, v)
        return v
    return _te.compute(shape, body, name=name)


def _cast_tensor(lw, x, dt):
    if x.dtype == dt:
        return x
    return _te.compute(x.shape, lambda *i: _te.cast(x[i], dt), name=f"cast_{lw.count}")


def _pad_check(node, vals):
    pads = node.args[1]
    if any(p < 0 for p in pads):
        return "negative padding"
    return None


@rule(aten.constant_pad_nd.default, check=_pad_check)
def _pad(lw, node):
    x = lw.arg(node.args[0])
    pads = list(node.args[1])
    value = node.args[2] if len(node.args) > 2 else 0
    n = len(x.shape)
    before, after = [0] * n, [0] * n
    for k in range(len(pads) // 2):
        before[n - 1 - k], after[n - 1 - k] = pads[2 * k], pads[2 * k + 1]
    return _nn.pad(x, before, after, value=float(value), name=lw.name(node))


def tensors_of(v) -> Sequence:
    return list(_tensors(v))


def lower_region(region: Region, vals, ranges=None):
    """The region as a tecomp DAG: (placeholders, outputs).  ``ranges``: those of the
    symbolic extents of a symbolic region's ``vals`` (:mod:`tecomp.dynamo.symbolic`)."""
    _CTX.ranges = ranges
    try:
        return _lower_region(region, vals)
    finally:
        _CTX.ranges = None


def _lower_region(region, vals):
    lw = Lowering(vals)
    ins = []
    packs = region.packs or (None,) * len(region.inputs)
    for k, (n, pk) in enumerate(zip(region.inputs, packs)):
        v = vals[n]
        shape = tuple(_dim(s) for s in v.shape)
        if pk is None:
            ph = _te.placeholder(shape, DTYPES[v.dtype], name=f"in{k}")
            lw.env[n] = ph
        else:  # the kernel reads the input packed; the rule that packed it reads that
            pack = _pack(pk)
            ph = _te.placeholder(pack.shape(shape), DTYPES[v.dtype], name=f"in{k}")
            lw.packs[n] = (pack, ph)
            lw.env[n] = pack.view(ph, shape, f"in{k}.unpacked")
        ins.append(ph)
    for n in region.nodes:
        lw.env[n] = lw.lower(n)
    outs, seen = [], set()
    for k, n in enumerate(region.outputs):
        t = lw.env[n]
        if not isinstance(t.op, _te.ComputeOp) or id(t) in seen:
            t = _te.compute(t.shape, lambda *i, _t=t: _t[i], name=f"out{k}")
        seen.add(id(t))
        v = vals[n]
        ts, vs = _shape(t), tuple(_dim(s) for s in v.shape)
        if len(ts) != len(vs) or not all(same(p, q) for p, q in zip(ts, vs)) or \
                t.dtype != DTYPES[v.dtype]:
            raise InternalError(
                f"tecomp.dynamo: {n.target} lowered to {t.dtype}{list(t.shape)}, but PyTorch "
                f"computes {v.dtype}{list(v.shape)}")
        outs.append(t)
    return ins, outs

