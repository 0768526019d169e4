"""A small numpy evaluator of compute DAGs: a reference that needs no schedule or backend.

``evaluate(outputs, feed)`` computes every tensor the outputs need, one compute at a time,
by broadcasting its body over its whole index space (its axes, then its reduce axes) with
numpy.  It is a test oracle for small shapes (memory is ``|axes| x |reduce axes|`` per
compute), not a fast path.  Semantics follow :mod:`tecomp.ir.expr` except that integer
overflow is not wrapped, and that both sides of an ``if_then_else`` are evaluated (reads are
clamped into bounds, so a guarded out-of-bounds read is harmless; its value is discarded).
"""
from __future__ import annotations

import math
from typing import Dict, List, Sequence, Union

import numpy as np

from ..errors import AutodiffError
from ..ir import dtype as _dt
from ..ir.expr import (
    EQ, GE, GT, LE, LT, NE, Add, And, Call, Cast, CommReducer, Const, Div, FloorDiv, FloorMod,
    Let, Max, Min, Mul, Not, Or, ProducerLoad, Reduce, Select, Sub, TruncDiv, TruncMod, Var,
)
from ..te import reduce as R
from ..te.scatter import ScatterOp
from ..te.tensor import ComputeOp, PlaceholderOp, Tensor
from . import rules

_erf = np.frompyfunc(math.erf, 1, 1)
_erfc = np.frompyfunc(math.erfc, 1, 1)

_CALLS = {
    "exp": np.exp, "fast_exp": np.exp, "log": np.log, "fast_log": np.log, "sqrt": np.sqrt,
    "rsqrt": lambda x: 1 / np.sqrt(x), "tanh": np.tanh,
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "erf": lambda x: _erf(x).astype(np.asarray(x).dtype), "abs": np.abs, "floor": np.floor,
    "ceil": np.ceil, "round": np.round, "sin": np.sin, "cos": np.cos, "pow": np.power,
    "fma": lambda a, b, c: a * b + c,  # the reference rounds twice (a float64 evaluator)
    "exp2": np.exp2, "expm1": np.expm1, "log2": np.log2, "log1p": np.log1p,
    "softplus": lambda x: np.logaddexp(0, x),
    "tan": np.tan, "atan": np.arctan, "atan2": np.arctan2, "cbrt": np.cbrt,
    "erfc": lambda x: _erfc(x).astype(np.asarray(x).dtype),
    "fast_erfc": lambda x: _erfc(x).astype(np.asarray(x).dtype),
}
_CMP = {EQ: np.equal, NE: np.not_equal, LT: np.less, LE: np.less_equal, GT: np.greater,
        GE: np.greater_equal}


def _npdt(dtype):
    return _dt.numpy_dtype(dtype)


class _Eval:
    def __init__(self, values, env):
        self.values = values
        self.env = env

    def ev(self, e):
        t = type(e)
        if t is Const:
            return np.asarray(e.value, dtype=_npdt(e.dtype))
        if t is Var:
            v = self.env.get(e)
            if v is None:
                raise AutodiffError(f"evaluate: no value for the variable {e.name}; pass it in "
                                    "scalars={var: value}")
            return v
        if t is Add:
            return self.ev(e.a) + self.ev(e.b)
        if t is Sub:
            return self.ev(e.a) - self.ev(e.b)
        if t is Mul:
            return self.ev(e.a) * self.ev(e.b)
        if t is Div:
            return self.ev(e.a) / self.ev(e.b)
        if t is FloorDiv:
            return np.floor_divide(self.ev(e.a), self.ev(e.b))
        if t is FloorMod:
            return np.mod(self.ev(e.a), self.ev(e.b))
        if t is TruncDiv:
            a, b = self.ev(e.a), self.ev(e.b)
            return (np.abs(a) // np.abs(b)) * np.sign(a) * np.sign(b)
        if t is TruncMod:
            return np.fmod(self.ev(e.a), self.ev(e.b))
        if t is Min:
            return np.minimum(self.ev(e.a), self.ev(e.b))
        if t is Max:
            return np.maximum(self.ev(e.a), self.ev(e.b))
        if t in _CMP:
            return _CMP[t](self.ev(e.a), self.ev(e.b))
        if t is And:
            return np.logical_and(self.ev(e.a), self.ev(e.b))
        if t is Or:
            return np.logical_or(self.ev(e.a), self.ev(e.b))
        if t is Not:
            return np.logical_not(self.ev(e.a))
        if t is Select:
            return np.where(self.ev(e.cond), self.ev(e.true_value), self.ev(e.false_value)
                            ).astype(_npdt(e.dtype))
        if t is Cast:
            v = self.ev(e.value)
            if e.dtype == "bool":
                return v != 0
            return np.asarray(v).astype(_npdt(e.dtype))
        if t is Call:
            f = _CALLS.get(e.op)
            if f is None:
                raise AutodiffError(f"evaluate: no numpy implementation of intrinsic {e.op!r}")
            return np.asarray(f(*[self.ev(a) for a in e.args])).astype(_npdt(e.dtype))
        if t is ProducerLoad:
            arr = self.values[id(e.producer)]
            idx = []
            for d, i in enumerate(e.indices):
                iv = np.asarray(self.ev(i)).astype(np.int64)
                idx.append(np.clip(iv, 0, arr.shape[d] - 1))
            return arr[tuple(idx)]
        if t is Let:
            old = self.env.get(e.var)
            self.env[e.var] = self.ev(e.value)
            try:
                return self.ev(e.body)
            finally:
                if old is None:
                    self.env.pop(e.var, None)
                else:
                    self.env[e.var] = old
        raise AutodiffError(f"evaluate: cannot evaluate {type(e).__name__} `{e}`")


def _topo(outputs):
    """Every tensor the outputs need, producers first (depth-first post-order, in the order
    the computes read their inputs; iterative, so deep networks do not hit the recursion
    limit)."""
    order, seen = [], set()
    for root in outputs:
        if id(root) in seen:
            continue
        seen.add(id(root))
        stack = [(root, iter(root.op.input_tensors))]
        while stack:
            t, it = stack[-1]
            for d in it:
                if id(d) not in seen:
                    seen.add(id(d))
                    stack.append((d, iter(d.op.input_tensors)))
                    break
            else:
                stack.pop()
                order.append(t)
    return order


def _int(e, env):
    v = _Eval({}, env).ev(e)
    return int(v)


def evaluate(outputs: Union[Tensor, Sequence[Tensor]], feed: Dict,
             scalars: Dict | None = None) -> Union[np.ndarray, List[np.ndarray]]:
    """Evaluate compute definitions with numpy (a reference, no schedule).

    Parameters
    ----------
    outputs : Tensor or sequence of Tensor
        What to evaluate.
    feed : dict
        Placeholder tensor (or its name) -> array.
    scalars : dict, optional
        Var -> int, for symbolic extents not fixed by a fed array's shape.

    Returns
    -------
    numpy.ndarray or list of numpy.ndarray
        One array per output (one array for a single tensor).

    Examples
    --------
    >>> import numpy as np
    >>> import tecomp as tc
    >>> from tecomp.autodiff import evaluate
    >>> A = tc.placeholder((3,), name="A")
    >>> B = tc.compute((3,), lambda i: A[i] * 2.0, name="B")
    >>> evaluate(B, {A: np.ones(3, "float32")}).tolist()
    [2.0, 2.0, 2.0]
    """
    single = isinstance(outputs, Tensor)
    outs = [outputs] if single else list(outputs)
    env = dict(scalars or {})
    order = _topo(outs)
    by_name = {k: v for k, v in feed.items() if isinstance(k, str)}
    values: Dict[int, np.ndarray] = {}
    for t in order:
        if isinstance(t.op, PlaceholderOp):
            a = feed.get(t) if t in feed else by_name.get(t.name)
            if a is None:
                raise AutodiffError(f"evaluate: no value for placeholder {t.name}")
            a = np.asarray(a)
            for ext, n in zip(t.shape, a.shape):
                if isinstance(ext, Var) and ext not in env:
                    env[ext] = n
            values[id(t)] = a
    for t in order:
        if isinstance(t.op, PlaceholderOp):
            continue
        if isinstance(t.op, ScatterOp):
            values[id(t)] = _scatter(t.op, values, env)
            continue
        op: ComputeOp = t.op
        shape = [_int(x, env) for x in op.shape]
        body = _element_body(op, t.value_index)
        raxes = list(op.reduce_axis)
        rshape = [_int(iv.dom.extent, env) for iv in raxes]
        rmins = [_int(iv.dom.min, env) for iv in raxes]
        nd = len(shape) + len(rshape)
        lenv = dict(env)
        for k, (iv, n) in enumerate(zip(op.axis, shape)):
            s = [1] * nd
            s[k] = n
            lenv[iv.var] = np.arange(n, dtype=np.int64).reshape(s)
        for k, (iv, n, m) in enumerate(zip(raxes, rshape, rmins)):
            s = [1] * nd
            s[len(shape) + k] = n
            lenv[iv.var] = (np.arange(n, dtype=np.int64) + m).reshape(s)
        E = _Eval(values, lenv)
        full = tuple(shape) + tuple(rshape)
        dt = _npdt(t.dtype)
        with np.errstate(all="ignore"):
            if isinstance(body, Reduce):
                src = np.broadcast_to(np.asarray(E.ev(body.source), dtype=dt), full)
                cond = np.broadcast_to(np.asarray(E.ev(body.condition), dtype=bool), full)
                ident = np.asarray(body.combiner.identity.value, dtype=dt)
                x = np.where(cond, src, ident)
                axes = tuple(range(len(shape), nd))
                val = _reduce(body, x, axes, ident, shape)
            else:
                val = np.broadcast_to(np.asarray(E.ev(body)), tuple(shape))
        # (reshaped: np.ascontiguousarray makes a 0-d value 1-d)
        values[id(t)] = np.ascontiguousarray(val.astype(dt)).reshape(tuple(shape))
    res = [values[id(t)] for t in outs]
    return res[0] if single else res


def _scatter(op, values, env):
    """A scatter-add: the domain's points as a grid, ``np.add.at`` of the values at the
    indices that are inside the output and whose condition holds."""
    shape = tuple(_int(x, env) for x in op.shape)
    dom = [(_int(iv.dom.min, env), _int(iv.dom.extent, env)) for iv in op.domain]
    lenv = dict(env)
    for k, (iv, (m, n)) in enumerate(zip(op.domain, dom)):
        s = [1] * len(dom)
        s[k] = n
        lenv[iv.var] = (np.arange(n, dtype=np.int64) + m).reshape(s)
    E = _Eval(values, lenv)
    full = tuple(n for _, n in dom)
    dt = _npdt(op.dtype)
    with np.errstate(all="ignore"):
        idx = [np.broadcast_to(np.asarray(E.ev(i), dtype=np.int64), full) for i in op.index]
        val = np.broadcast_to(np.asarray(E.ev(op.value), dtype=dt), full)
        ok = np.broadcast_to(np.asarray(E.ev(op.condition), dtype=bool), full)
    for i, n in zip(idx, shape):
        ok = ok & (i >= 0) & (i < n)
    out = np.zeros(shape, dt)
    np.add.at(out, tuple(i[ok] for i in idx), val[ok])
    return out


def _element_body(op: ComputeOp, k: int):
    """Output ``k``'s body: a reduction of a tuple whose elements each combine only their
    own (a sum and a sum of squares in one compute) as a reduction of its own element;
    anything else through ``op.body`` (single outputs only)."""
    if len(op.bodies) == 1 or not isinstance(op.bodies[k], Reduce) or \
            not op.bodies[k].combiner.independent:
        return op.body
    b, c = op.bodies[k], op.bodies[k].combiner
    comb = CommReducer(c.name, c.lhs[k], c.rhs[k], c.result[k], c.identity[k])
    return Reduce(comb, b.source, b.axis, b.condition, b.dtype)


def _reduce(body, x, axes, ident, shape):
    red = rules.reducer_of(body.combiner)

    if not axes:
        return x
    if red is R.sum:
        return np.sum(x, axis=axes)
    if red is R.max:
        return np.max(x, axis=axes)
    if red is R.min:
        return np.min(x, axis=axes)
    if red is R.prod:
        return np.prod(x, axis=axes)
    comb = body.combiner
    flat = x.reshape(tuple(shape) + (-1,))
    acc = np.broadcast_to(ident, tuple(shape)).copy()
    for k in range(flat.shape[-1]):
        acc = np.asarray(_Eval({}, {comb.lhs: acc, comb.rhs: flat[..., k]}).ev(comb.result))
    return acc
