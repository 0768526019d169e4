"""``gradcheck``: check derived gradients against finite differences (PyTorch's idea).

Two checks, both in float64 (the compute DAG is re-typed to float64 first, so a float32
definition is checked with float64 arithmetic):

1. **Finite differences**, coordinate by coordinate (all of them for small inputs, a random
   sample of ``max_points`` otherwise): ``(<w, f(x + eps e_j)> - <w, f(x - eps e_j)>) / (2 eps)``
   against ``gradient(f, x, head=w)[j]`` for a random head ``w``.
2. **The dot-product test** ``<J v, w> == <v, J^T w>`` for random ``v`` (all inputs at once),
   with ``J v`` from one central difference along ``v``: it sees every coordinate.

Kinks (``relu`` at 0, ties of a ``max``) make finite differences meaningless there: choose
values away from them (pass ``values=``).
"""
from __future__ import annotations

import dataclasses
from typing import Dict, List, Sequence, Union

import numpy as np

from ..build import build
from ..errors import AutodiffError
from ..ir import dtype as _dt
from ..ir.expr import Cast, CommReducer, Const, Expr, ProducerLoad, Reduce, Var
from ..ir.functor import Mutator, substitute
from ..schedule.schedule import create_schedule
from ..te.tensor import ComputeOp, PlaceholderOp, Tensor, placeholder
from . import rules as _rules
from .reference import _topo, evaluate
from .reverse import gradient
from .rules import reducer_of


class GradcheckError(AutodiffError, AssertionError):
    """A derived gradient disagrees with finite differences."""


# ---------------------------------------------------------------------------------
# re-typing a DAG to float64


class _Retype(Mutator):
    def __init__(self, tmap):
        self.tmap = tmap

    def visit_ProducerLoad(self, e):
        idx = tuple(self.visit(i) for i in e.indices)
        nt = self.tmap.get(id(e.producer), e.producer)
        return ProducerLoad(nt, idx, nt.dtype)

    def visit_Const(self, e):
        if _dt.is_float(e.dtype) and e.dtype != "float64":
            return Const(float(e.value), "float64")
        return e

    def visit_Var(self, e):
        return e

    def float64_combiner(self, c: CommReducer) -> CommReducer:
        """The float64 version of a reducer: the built-ins' and registered ones' own,
        else its combiner rewritten over float64 operands (any ``tc.comm_reducer``,
        e.g. one whose result is under ``stop_gradient``)."""
        red = reducer_of(c)
        if red is not None:
            return red.combiner("float64")
        x, y = Var(c.lhs.name, "float64"), Var(c.rhs.name, "float64")
        result = self.visit(substitute(c.result, {c.lhs: x, c.rhs: y}))
        return CommReducer(c.name, x, y, result, self.visit(c.identity))

    def generic_visit(self, node):
        n = super().generic_visit(node)
        if isinstance(n, Reduce):
            if _dt.is_float(n.dtype):
                n = dataclasses.replace(n, combiner=self.float64_combiner(n.combiner),
                                        dtype="float64")
            return n
        if isinstance(n, Expr) and _dt.is_float(getattr(n, "dtype", "")) and n.dtype != "float64":
            n = dataclasses.replace(n, dtype="float64")
        if isinstance(n, Cast) and n.value.dtype == n.dtype:
            return n.value
        return n


def to_float64(tensors: List[Tensor]) -> Dict[int, Tensor]:
    """A float64 copy of the DAG of ``tensors``: ``id(old) -> new`` for every tensor in it."""
    tmap: Dict[int, Tensor] = {}
    rt = _Retype(tmap)
    for t in _topo(tensors):
        op = t.op
        if isinstance(op, PlaceholderOp):
            tmap[id(t)] = placeholder(op.shape, "float64", op.name) if _dt.is_float(op.dtype) else t
        else:
            body = rt.visit(op.body)
            nt = ComputeOp(op.name, op.axis, body, op.tag, dict(op.attrs)).output(0)
            rule = _rules.tensor_rule(op)
            if rule is not None:  # a registered derivative follows its compute
                _rules.register_derivative(nt, rule, override=True)
            tmap[id(t)] = nt
    return tmap


# ---------------------------------------------------------------------------------
# running


class _Runner:
    def __init__(self, outs: List[Tensor], target: str):
        self.outs = outs
        self.target = target
        self.params = [t for t in _topo(outs) if isinstance(t.op, PlaceholderOp)]
        if target != "reference":
            s = create_schedule([t.op for t in outs])
            self.mod = build(s, self.params + outs, target=target)

    def __call__(self, feed: Dict[int, np.ndarray]) -> List[np.ndarray]:
        if self.target == "reference":
            return evaluate(self.outs, {p: feed[id(p)] for p in self.params})
        args = [np.ascontiguousarray(feed[id(p)]) for p in self.params]
        res = [np.empty(tuple(int(x.value) for x in t.shape), _dt.numpy_dtype(t.dtype))
               for t in self.outs]
        self.mod(*(args + res))
        return res


def _const_shape(t: Tensor):
    shp = []
    for x in t.shape:
        if not isinstance(x, Const):
            raise AutodiffError(f"gradcheck: tensor {t.name} has a symbolic shape; gradcheck "
                                "needs constant shapes (bind them first)")
        shp.append(int(x.value))
    return tuple(shp)


def gradcheck(output: Tensor, inputs: Union[Tensor, Sequence[Tensor]],
              values: Dict | None = None, *, eps: float = 1e-6, atol: float = 1e-5,
              rtol: float = 1e-4, target: str = "llvm", float64: bool = True,
              max_points: int = 32, seed: int = 0, raise_exception: bool = True) -> bool:
    """Check ``tc.gradient(output, inputs)`` against finite differences and the dot-product
    test (see the module doc).

    Parameters
    ----------
    output : Tensor
        The tensor differentiated.
    inputs : Tensor or sequence of Tensor
        The placeholders to differentiate (their values are perturbed).
    values : dict, optional
        Arrays for placeholders (keyed by tensor or name); float ones not given are
        drawn from a normal distribution, int ones must be given.
    eps : float, optional
        The finite-difference step.
    atol, rtol : float, optional
        A coordinate passes when ``|analytic - numeric| <= atol + rtol * |numeric|``.
    target : {"llvm", "reference"}, optional
        Compile the forward and the gradient with the default schedule, or run the numpy
        evaluator.
    float64 : bool, optional
        Re-type the DAG to float64 first (the default).
    max_points : int, optional
        Coordinates checked per input (all of them for small inputs, a random sample
        otherwise).
    seed : int, optional
        The random seed.
    raise_exception : bool, optional
        Raise on a failure (the default) instead of returning False.

    Returns
    -------
    bool
        True, or False for a failure with ``raise_exception=False``.

    Raises
    ------
    GradcheckError
        Naming the input, the coordinate and both values.
    AutodiffError
        For inputs that are not placeholders.

    Examples
    --------
    >>> import tecomp as tc
    >>> from tecomp import autodiff as ad
    >>> X = tc.placeholder((4, 3), name="X")
    >>> Y = tc.compute((4, 3), lambda i, j: tc.tanh(X[i, j]) * X[i, j], name="Y")
    >>> ad.gradcheck(Y, [X], target="reference")
    True
    """
    ins = [inputs] if isinstance(inputs, Tensor) else list(inputs)
    for x in ins:
        if not isinstance(x, Tensor) or not isinstance(x.op, PlaceholderOp):
            raise AutodiffError(f"gradcheck: inputs must be placeholders (their values are "
                                f"perturbed), got {x!r}")
    values = dict(values or {})
    rng = np.random.default_rng(seed)
    if float64:
        tmap = to_float64([output])
        out = tmap[id(output)]
        new_ins = []
        for x in ins:
            if id(x) not in tmap:
                raise AutodiffError(f"gradcheck: {output.name} does not read input {x.name}")
            new_ins.append(tmap[id(x)])
        old_of = {id(v): k for k, v in ((k, v) for k, v in tmap.items())}
        orig = {id(t): t for t in _topo([output])}
    else:
        out, new_ins, old_of, orig = output, ins, None, None
    head = placeholder(out.shape, out.dtype, f"{out.name}.head")
    grads = gradient(out, new_ins, head=head)

    # values for every placeholder
    feed: Dict[int, np.ndarray] = {}
    for p in _topo([out] + grads):
        if not isinstance(p.op, PlaceholderOp) or p is head:
            continue
        src = orig.get(old_of[id(p)]) if old_of is not None else p
        v = values.get(src) if src in values else values.get(p.name)
        if v is None:
            if not _dt.is_float(p.dtype):
                raise AutodiffError(f"gradcheck: give a value for the integer placeholder "
                                    f"{p.name} in values=")
            v = rng.standard_normal(_const_shape(p))
        feed[id(p)] = np.asarray(v).astype(_dt.numpy_dtype(p.dtype))
    w = rng.standard_normal(_const_shape(out)).astype(_dt.numpy_dtype(out.dtype))
    feed[id(head)] = w

    fwd = _Runner([out], target)
    bwd = _Runner(grads, target)
    g = bwd(feed)

    def f(fd):
        return fwd(fd)[0]

    def wsum(fd):
        return float(np.sum(f(fd).astype(np.float64) * w))

    failures = []
    for x, gx in zip(new_ins, g):
        base = feed[id(x)]
        n = base.size
        pts = range(n) if n <= max_points else sorted(rng.choice(n, max_points, replace=False))
        for j in pts:
            fd = dict(feed)
            xp = base.copy().reshape(-1)
            xp[j] += eps
            fd[id(x)] = xp.reshape(base.shape)
            fp = wsum(fd)
            xm = base.copy().reshape(-1)
            xm[j] -= eps
            fd[id(x)] = xm.reshape(base.shape)
            fm = wsum(fd)
            num = (fp - fm) / (2 * eps)
            ana = float(gx.reshape(-1)[j])
            if not abs(ana - num) <= atol + rtol * abs(num):
                idx = np.unravel_index(j, base.shape)
                failures.append(f"d{out.name}/d{x.name}{list(map(int, idx))}: derived {ana:.10g}, "
                                f"finite difference {num:.10g}")
    # dot-product test
    vs = {id(x): rng.standard_normal(feed[id(x)].shape) for x in new_ins}
    fp_d, fm_d = dict(feed), dict(feed)
    for x in new_ins:
        fp_d[id(x)] = feed[id(x)] + eps * vs[id(x)]
        fm_d[id(x)] = feed[id(x)] - eps * vs[id(x)]
    jv = (f(fp_d).astype(np.float64) - f(fm_d).astype(np.float64)) / (2 * eps)
    lhs = float(np.sum(jv * w))
    rhs = float(sum(np.sum(vs[id(x)] * gx) for x, gx in zip(new_ins, g)))
    if not abs(lhs - rhs) <= atol * max(1.0, np.sqrt(jv.size)) + rtol * max(abs(lhs), abs(rhs)):
        failures.append(f"dot-product test: <J v, w> = {lhs:.10g} but <v, J^T w> = {rhs:.10g}")
    if failures:
        if not raise_exception:
            return False
        more = f" (and {len(failures) - 8} more)" if len(failures) > 8 else ""
        raise GradcheckError(f"gradcheck of {output.name} failed:\n  " +
                             "\n  ".join(failures[:8]) + more)
    return True
