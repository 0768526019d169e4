"""The generic visitor and mutator over IR nodes.

``visit`` dispatches to ``visit_<ClassName>``; the default walks the dataclass fields
(Exprs, Stmts, tuples of them, Buffers, Ranges, IterVars), so a new node type needs no
change to existing visitors.  The mutator returns the *same object* when nothing
changed below it, so ``new is old`` is a cheap "did anything change" test.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Dict

from .expr import Buffer, BufferLoad, CommReducer, Expr, IterVar, Node, Range, Reduce, Var
from .stmt import PrimFunc, Stmt

_FIELDS: Dict[type, tuple] = {}


def node_fields(cls) -> tuple:
    f = _FIELDS.get(cls)
    if f is None:
        f = tuple(x.name for x in dataclasses.fields(cls))
        _FIELDS[cls] = f
    return f


_WALKED = (Expr, Stmt, Range)


class Visitor:
    """Read-only walk.  Override ``visit_<ClassName>`` and call ``self.generic_visit``."""

    def visit(self, node):
        m = getattr(self, "visit_" + type(node).__name__, None)
        if m is not None:
            return m(node)
        return self.generic_visit(node)

    def generic_visit(self, node):
        if isinstance(node, PrimFunc):
            self.visit(node.body)
            return
        if isinstance(node, (IterVar, CommReducer, Buffer)):
            return
        for name in node_fields(type(node)):
            v = getattr(node, name)
            if isinstance(v, _WALKED):
                self.visit(v)
            elif isinstance(v, tuple):
                for x in v:
                    if isinstance(x, _WALKED):
                        self.visit(x)


class Mutator:
    """Rewrite walk.  Override ``visit_<ClassName>``; return a new node or the same one."""

    def visit(self, node):
        m = getattr(self, "visit_" + type(node).__name__, None)
        if m is not None:
            return m(node)
        return self.generic_visit(node)

    def visit_buffer(self, buf: Buffer) -> Buffer:
        """Hook for Buffers referenced by loads, stores and allocations."""
        return buf

    def generic_visit(self, node):
        if isinstance(node, PrimFunc):
            body = self.visit(node.body)
            return node if body is node.body else node.with_body(body)
        if isinstance(node, (IterVar, CommReducer, Buffer)):
            return node
        changed = {}
        for name in node_fields(type(node)):
            v = getattr(node, name)
            if isinstance(v, _WALKED):
                nv = self.visit(v)
            elif isinstance(v, Buffer):
                nv = self.visit_buffer(v)
            elif isinstance(v, tuple) and v and isinstance(v[0], _WALKED):
                items = tuple(self.visit(x) if isinstance(x, _WALKED) else x for x in v)
                nv = v if all(a is b for a, b in zip(items, v)) else items
            else:
                continue
            if nv is not v:
                changed[name] = nv
        if not changed:
            return node
        return dataclasses.replace(node, **changed)


class _Substituter(Mutator):
    def __init__(self, vmap):
        self.vmap = vmap

    def visit_Var(self, v):
        r = self.vmap.get(v)
        return v if r is None else r


def substitute(node, vmap: dict):
    """Replace Vars (keys) by Exprs (values) everywhere in ``node``."""
    if not vmap:
        return node
    return _Substituter(vmap).visit(node)


def post_order(node, fn: Callable[[Node], None]) -> None:
    """Call ``fn`` on every Expr/Stmt node of ``node``, children first."""

    class _V(Visitor):
        def visit(self, n):
            super().visit(n)
            fn(n)

    _V().visit(node)


def collect(node, pred) -> list:
    """Every node under ``node`` (children first, in order) for which ``pred`` is true."""
    out = []
    post_order(node, lambda n: out.append(n) if pred(n) else None)
    return out


def free_vars(node) -> list:
    """Vars used in ``node`` that it does not bind itself (in first-use order)."""
    from .stmt import For, LetStmt
    from .expr import Let

    bound, seen, out = set(), set(), []

    class _V(Visitor):
        def visit_For(self, s):
            bound.add(s.var)
            self.generic_visit(s)

        def visit_LetStmt(self, s):
            bound.add(s.var)
            self.generic_visit(s)

        def visit_Let(self, e):
            bound.add(e.var)
            self.generic_visit(e)

        def visit_Reduce(self, e):
            for iv in e.axis:
                bound.add(iv.var)
            self.generic_visit(e)

        def visit_Var(self, v):
            if v not in seen:
                seen.add(v)
                out.append(v)

    _V().visit(node)
    return [v for v in out if v not in bound]


def uses_var(node, var: Var) -> bool:
    found = []

    class _V(Visitor):
        def visit_Var(self, v):
            if v is var:
                found.append(v)

    _V().visit(node)
    return bool(found)
