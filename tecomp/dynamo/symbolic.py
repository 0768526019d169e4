"""Symbolic sizes of a graph (TorchDynamo's automatic dynamic shapes, ``mark_dynamic``) as
tecomp's symbolic extents, so that a region's kernel is built once for every size.

AOTAutograd traces a dynamic graph with ``SymInt`` sizes (sympy expressions of symbols
``s0``, ``s1``, ... in ``node.meta["val"]``).  :class:`SymbolicGraph` keeps those traced
values (the plans' fake propagation overwrites them with each call's sizes);
:meth:`SymbolicGraph.region` translates what one region reads and computes into
:class:`SymMeta` values whose shapes are tecomp expressions of ``tc.var`` extents (int64,
one per symbol, named ``n0``, ``n1``, ... in the order the region meets them, so that
identical regions of two graphs share a kernel), with the symbols' ranges for the
lowering rules' decisions.  What cannot be expressed (a float of a size, an operation of
sympy tecomp has no counterpart for) raises :class:`NotSymbolic`: that region is then
specialised per size, as before.
"""
from __future__ import annotations

from typing import Dict, Optional

import sympy
import torch
from torch.utils._sympy import functions as _sf

from ..ir.expr import Const, Range, Var
from .. import te as _te

#: the largest extent a symbol's range is taken to reach where its own is unbounded (the
#: proofs of the rules work in int64: products of a few extents must not overflow)
_HUGE = 1 << 36


class NotSymbolic(Exception):
    """A region (or a value of it) that tecomp's symbolic extents cannot express; the
    message says why (it is logged, and the region is specialised per size)."""


class SymMeta:
    """A tensor of a symbolic region as the lowering rules see it: ``shape`` (ints and
    tecomp expressions), ``dtype`` (a torch dtype)."""

    __slots__ = ("shape", "dtype")

    def __init__(self, shape, dtype):
        self.shape, self.dtype = tuple(shape), dtype

    def dim(self) -> int:
        return len(self.shape)

    def __repr__(self):
        return f"SymMeta({list(self.shape)}, {self.dtype})"


def is_symbolic(v) -> bool:
    """Whether a traced value is (or has) a size that is not a constant."""
    if isinstance(v, (torch.SymInt, torch.SymFloat)):
        return not isinstance(_expr_of(v), sympy.Integer)
    if isinstance(v, torch.Tensor):
        return any(isinstance(e, torch.SymInt) and is_symbolic(e) for e in v.shape)
    if isinstance(v, (list, tuple)):
        return any(is_symbolic(x) for x in v)
    return False


def _bound(b, default: int) -> int:
    """A range bound as an int (``default`` for an infinite one)."""
    if isinstance(b, (int, sympy.Integer)):
        return int(b)
    return default


def _expr_of(s):
    return s.node.expr


class Symbols:
    """The tecomp variables of one region: a sympy symbol -> ``tc.var`` (int64) map, the
    variables named in the order they are met, and their ranges."""

    def __init__(self, shape_env):
        self.shape_env = shape_env
        self.vars: Dict[sympy.Symbol, object] = {}
        self.ranges: Dict[object, Range] = {}

    def var(self, sym):
        v = self.vars.get(sym)
        if v is None:
            v = _te.var(f"n{len(self.vars)}", "int64")
            self.vars[sym] = v
            lo, hi = 0, _HUGE
            vr = getattr(self.shape_env, "var_to_range", {}).get(sym)
            if vr is not None:
                lo = max(_bound(vr.lower, 0), 0)
                hi = min(_bound(vr.upper, _HUGE), _HUGE)
            self.ranges[v] = Range(Const(lo, "int64"), Const(max(hi - lo + 1, 1), "int64"))
        return v

    def expr(self, e):
        """The sympy integer expression ``e`` as a tecomp int64 expression (an int where
        it is a constant)."""
        if isinstance(e, (int, sympy.Integer)):
            return int(e)
        if isinstance(e, sympy.Symbol):
            return self.var(e)
        if isinstance(e, sympy.Add):
            out = None
            for a in e.args:
                x = self.expr(a)
                out = x if out is None else out + x
            return out
        if isinstance(e, sympy.Mul):
            out = None
            for a in e.args:
                x = self.expr(a)
                out = x if out is None else out * x
            return out
        if isinstance(e, sympy.Pow) and isinstance(e.exp, sympy.Integer) and e.exp > 0:
            b = self.expr(e.base)
            out = b
            for _ in range(int(e.exp) - 1):
                out = out * b
            return out
        if isinstance(e, (_sf.FloorDiv, _sf.CleanDiv)):
            return _te.floordiv(self._int(e.args[0]), self._int(e.args[1]))
        if isinstance(e, (_sf.PythonMod, _sf.Mod)):
            return _te.floormod(self._int(e.args[0]), self._int(e.args[1]))
        raise NotSymbolic(f"the size expression {str(e)[:80]} ({type(e).__name__}) has no "
                          f"tecomp counterpart")

    def _int(self, e):
        x = self.expr(e)
        return _te.const(x, "int64") if isinstance(x, int) else x

    def size(self, s):
        """A traced size (int or SymInt) as an int or a tecomp expression."""
        if isinstance(s, torch.SymInt):
            return self.expr(_expr_of(s))
        if isinstance(s, (torch.SymFloat, torch.SymBool)):
            raise NotSymbolic(f"a {type(s).__name__} ({str(_expr_of(s))[:60]}) of the sizes")
        return s

    def value(self, v):
        """A traced value (a tensor, a tuple of them, a SymInt, a Python value) with its
        sizes as tecomp expressions."""
        if isinstance(v, torch.Tensor):
            return SymMeta([self.size(s) for s in v.shape], v.dtype)
        if isinstance(v, (list, tuple)):
            return type(v)(self.value(x) for x in v)
        if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            return self.size(v)
        return v


class SymbolicGraph:
    """The traced (symbolic) values of a graph's nodes, kept before any plan's fake
    propagation replaces them with one call's sizes."""

    def __init__(self, gm):
        self.traced = {n: n.meta.get("val") for n in gm.graph.nodes}
        #: the placeholders that are a symbol's value (AOTAutograd passes each symbol of
        #: the inputs' sizes as an int): symbol -> position among the placeholders
        self.symbol_args = {}
        for k, n in enumerate(n for n in gm.graph.nodes if n.op == "placeholder"):
            v = self.traced.get(n)
            if isinstance(v, torch.SymInt) and isinstance(_expr_of(v), sympy.Symbol):
                self.symbol_args.setdefault(_expr_of(v), k)
        self.shape_env = None
        for v in self.traced.values():
            for s in (v.shape if isinstance(v, torch.Tensor) else
                      [v] if isinstance(v, torch.SymInt) else []):
                if isinstance(s, torch.SymInt):
                    self.shape_env = s.node.shape_env
                    break
            if self.shape_env is not None:
                break

    def region(self, region) -> Optional[tuple]:
        """``(values, symbols)`` of ``region``: its inputs', nodes' and read scalars'
        traced values with tecomp sizes; None where nothing in it is symbolic (the
        region is specialised as a static one); NotSymbolic where something cannot be
        expressed."""
        members = list(region.inputs) + list(region.nodes)
        reads = []
        for n in region.nodes:
            for a in n.all_input_nodes:
                if a not in region.inputs and a not in region.nodes and a not in reads:
                    reads.append(a)
        if not any(is_symbolic(self.traced.get(n)) for n in members + reads):
            return None
        symbols = Symbols(self.shape_env)
        vals = {}
        for n in members + reads:
            if n not in self.traced or self.traced[n] is None:
                raise NotSymbolic(f"node {n.name[:40]} has no traced value")
            vals[n] = symbols.value(self.traced[n])
        return vals, symbols

    def scalars(self, region, vals, symbols) -> list:
        """The variables of ``region``'s kernel that no extent of its inputs and outputs
        is by itself (a ``2*n0`` only): the kernel takes them as scalar parameters,
        which the plan passes from the graph's symbol arguments.  ``[(var, position
        of the placeholder)]``; NotSymbolic for a symbol no placeholder carries."""
        bare = set()
        for n in list(region.inputs) + list(region.outputs):
            for d in vals[n].shape:
                if isinstance(d, Var):
                    bare.add(d)
        out = []
        for sym, v in symbols.vars.items():
            if v not in bare:
                k = self.symbol_args.get(sym)
                if k is None:
                    raise NotSymbolic(f"size {sym} is no extent of the kernel's tensors "
                                      f"and no argument of the graph")
                out.append((v, k))
        return out
