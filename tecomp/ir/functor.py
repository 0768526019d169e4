"""The generic visitor and mutator over IR nodes.

``visit`` dispatches to ``visit_<ClassName>``; the default walks the dataclass fields
(Exprs, Stmts, tuples of them, Buffers, Ranges, IterVars), so a new node type needs no
change to existing visitors.  The mutator returns the *same object* when nothing
changed below it, so ``new is old`` is a cheap "did anything change" test.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Dict

from .expr import (
    SERVICES, Buffer, BufferLoad, CommReducer, Const, Expr, IterVar, Let, Node, Range, Reduce, TupleCommReducer, Var,
)
from .stmt import For, LetStmt, PrimFunc, Stmt

_FIELDS: Dict[type, tuple] = {}


def node_fields(cls) -> tuple:
    f = _FIELDS.get(cls)
    if f is None:
        f = tuple(x.name for x in dataclasses.fields(cls))
        _FIELDS[cls] = f
    return f


#: annotations of fields that never hold a node (names, dtypes, flags)
_LEAF_FIELD_TYPES = frozenset({"str", "int", "bool", "float", "Tuple[str, ...]"})
_CHILD_FIELDS: Dict[type, tuple] = {}


def child_fields(cls) -> tuple:
    """The fields of node class ``cls`` that may hold nodes: :func:`node_fields` less
    those annotated as names, dtypes and flags (the walks skip them)."""
    f = _CHILD_FIELDS.get(cls)
    if f is None:
        f = tuple(x.name for x in dataclasses.fields(cls)
                  if str(x.type).strip("'\"") not in _LEAF_FIELD_TYPES)
        _CHILD_FIELDS[cls] = f
    return f


_WALKED = (Expr, Stmt, Range)
#: the node classes the generic walks do not enter
_OPAQUE = (IterVar, CommReducer, TupleCommReducer, Buffer)
_WALK_FIELDS: Dict[type, tuple] = {}


def _walk_fields(cls) -> tuple:
    """The fields of node class ``cls`` the generic walks visit, in order: a PrimFunc's
    body; none of an IterVar, a reducer or a Buffer; else :func:`child_fields`."""
    f = _WALK_FIELDS.get(cls)
    if f is None:
        if issubclass(cls, PrimFunc):
            f = ("body",)
        elif issubclass(cls, _OPAQUE):
            f = ()
        else:
            f = child_fields(cls)
        _WALK_FIELDS[cls] = f
    return f


def _resolve(vcls: type, ncls: type) -> Callable:
    """What visitor class ``vcls`` calls for a node of class ``ncls``: its
    ``visit_<ClassName>`` method, else its ``generic_visit``.  Looked up once per pair
    and kept in the class's own ``_handler_cache`` (the visitors are the hot loops of
    lowering and codegen), which :class:`_WalkerType` gives every visitor class, so that
    a class defined inside a function (one per call) takes its cache with it when it is
    collected."""
    f = getattr(vcls, "visit_" + ncls.__name__, None)
    if f is None:
        f = getattr(vcls, "generic_visit")
    vcls._handler_cache[ncls] = f
    return f


class _WalkerType(type):
    """The type of the visitor classes: each class gets a handler cache of its own
    (:func:`_resolve`), and a ``visit_<ClassName>`` or ``generic_visit`` method set or
    deleted on a class after its walks began (a test's monkeypatch, a debugging wrapper)
    empties the caches of that class and of every class below it, which would otherwise
    keep calling the method they looked up first."""

    def __init__(cls, name, bases, ns, **kw):
        super().__init__(name, bases, ns, **kw)
        type.__setattr__(cls, "_handler_cache", {})

    def __setattr__(cls, name, value):
        super().__setattr__(name, value)
        if name.startswith("visit_") or name == "generic_visit":
            cls._forget_handlers()

    def __delattr__(cls, name):
        super().__delattr__(name)
        if name.startswith("visit_") or name == "generic_visit":
            cls._forget_handlers()

    def _forget_handlers(cls):
        stack = [cls]
        while stack:
            c = stack.pop()
            cache = c.__dict__.get("_handler_cache")
            if cache is not None:
                cache.clear()
            stack.extend(type.__subclasses__(c))


class Visitor(metaclass=_WalkerType):
    """Read-only walk.  Override ``visit_<ClassName>`` and call ``self.generic_visit``.
    Handlers are looked up on the class (once per node class), not on the instance."""

    def visit(self, node):
        cls = type(self)
        h = cls._handler_cache.get(type(node))
        if h is None:
            h = _resolve(cls, type(node))
        return h(self, node)

    def generic_visit(self, node):
        fields = _WALK_FIELDS.get(type(node))
        if fields is None:
            fields = _walk_fields(type(node))
        visit = self.visit
        for name in fields:
            v = getattr(node, name)
            if isinstance(v, _WALKED):
                visit(v)
            elif isinstance(v, tuple):
                for x in v:
                    if isinstance(x, _WALKED):
                        visit(x)


class Mutator(metaclass=_WalkerType):
    """Rewrite walk.  Override ``visit_<ClassName>``; return a new node or the same one."""

    def visit(self, node):
        cls = type(self)
        h = cls._handler_cache.get(type(node))
        if h is None:
            h = _resolve(cls, type(node))
        return h(self, node)

    def visit_buffer(self, buf: Buffer) -> Buffer:
        """Hook for Buffers referenced by loads, stores and allocations."""
        return buf

    def generic_visit(self, node):
        fields = _WALK_FIELDS.get(type(node))
        if fields is None:
            fields = _walk_fields(type(node))
        if isinstance(node, PrimFunc):
            body = self.visit(node.body)
            return node if body is node.body else node.with_body(body)
        changed = None
        visit = self.visit
        for name in fields:
            v = getattr(node, name)
            if isinstance(v, _WALKED):
                nv = visit(v)
            elif isinstance(v, Buffer):
                nv = self.visit_buffer(v)
            elif isinstance(v, tuple) and v and isinstance(v[0], _WALKED):
                items = None
                for i, x in enumerate(v):
                    if isinstance(x, _WALKED):
                        nx = visit(x)
                        if nx is not x:
                            if items is None:
                                items = list(v[:i])
                            items.append(nx)
                            continue
                    if items is not None:
                        items.append(x)
                nv = v if items is None else tuple(items)
            else:
                continue
            if nv is not v:
                if changed is None:
                    changed = {}
                changed[name] = nv
        if changed is None:
            return node
        return dataclasses.replace(node, **changed)


class _Substituter(Mutator):
    def __init__(self, vmap):
        self.vmap = vmap

    def visit_Var(self, v):
        r = self.vmap.get(v)
        return v if r is None else r

    def visit_Reduce(self, e):
        # the combiner of a user reducer may read the compute's indices too
        # (tc.comm_reducer(lambda x, y: tc.max(x + y, n.astype("float32")), ...))
        out = self.generic_visit(e)
        comb = map_combiner(e.combiner, self.visit)
        return out if comb is e.combiner else dataclasses.replace(out, combiner=comb)


def map_combiner(c, fn):
    """The reducer ``c`` (a CommReducer or TupleCommReducer) with ``fn`` applied to its
    result and identity expressions (not to ``lhs``/``rhs``, the variables it binds): the
    same object when ``fn`` changed nothing.  A user reducer's combiner and identity may
    read the indices of the compute that uses it (``tc.comm_reducer(lambda x, y:
    tc.max(x + y, n.astype("float32")), ...)`` with ``n`` an output index), so whatever
    rewrites a reduction's indices rewrites them here too."""
    if isinstance(c, TupleCommReducer):
        res = tuple(fn(r) for r in c.result)
        ident = tuple(fn(x) for x in c.identity)
        order = tuple(fn(r) for r in c.in_order) if c.in_order is not None else None
        if all(a is b for a, b in zip(res + ident + (order or ()),
                                      c.result + c.identity + (c.in_order or ()))):
            return c
        return TupleCommReducer(c.name, c.lhs, c.rhs, res, ident, order)
    res, ident = fn(c.result), fn(c.identity)
    if res is c.result and ident is c.identity:
        return c
    return CommReducer(c.name, c.lhs, c.rhs, res, ident)


def substitute(node, vmap: dict):
    """Replace Vars (keys) by Exprs (values) everywhere in ``node``."""
    if not vmap:
        return node
    return _Substituter(vmap).visit(node)


_REV_FIELDS: Dict[type, tuple] = {}


def _rev_fields(cls) -> tuple:
    """The fields of ``cls`` the generic walk visits, last first (for the loops below,
    which push children on a stack so that they come off it in order)."""
    f = _REV_FIELDS.get(cls)
    if f is None:
        f = _REV_FIELDS[cls] = tuple(reversed(_walk_fields(cls)))
    return f


def _push_children(node, push) -> None:
    """``push`` each node the generic walk visits below ``node``, the last first (so that
    a stack gives them back in order)."""
    fields = _REV_FIELDS.get(type(node))
    if fields is None:
        fields = _rev_fields(type(node))
    for name in fields:
        v = getattr(node, name)
        if isinstance(v, _WALKED):
            push(v)
        elif isinstance(v, tuple):
            for x in reversed(v):
                if isinstance(x, _WALKED):
                    push(x)


def children(node) -> list:
    """The nodes the generic walk visits below ``node``, in its order: the Exprs, Stmts
    and Ranges of its fields (and of tuples in them); none below an IterVar, a reducer or
    a Buffer; a PrimFunc's body."""
    out = []
    _push_children(node, out.append)
    out.reverse()
    return out


def post_order(node, fn: Callable[[Node], None]) -> None:
    """Call ``fn`` on every Expr/Stmt node of ``node``, children first (a loop, not a
    recursion: any depth)."""
    stack = [node]
    pop, push = stack.pop, stack.append
    while stack:
        n = pop()
        if type(n) is tuple:        # (node,): its children are done
            fn(n[0])
            continue
        push((n,))
        _push_children(n, push)


def collect(node, pred) -> list:
    """Every node under ``node`` (children first, in order) for which ``pred`` is true."""
    out = []
    post_order(node, lambda n: out.append(n) if pred(n) else None)
    return out


def reads_memory(index) -> bool:
    """Whether the index expression ``index`` loads from a buffer (a data-dependent index:
    a gather ``X[ids[i], j]``, a scatter ``Y[ids[i]] = ...``), whose value no analysis
    before the call can bound."""
    return not isinstance(index, (Const, Var)) and \
        bool(collect(index, lambda n: isinstance(n, BufferLoad)))


_BINDERS = None


def _walk_vars(node):
    """``(used, bound)``: every Var ``node`` uses (in first-use order, bound or not) and
    every Var it binds (loops, lets, reduction axes), by a loop over its nodes in the
    generic walk's order (any depth)."""
    global _BINDERS
    if _BINDERS is None:
        _BINDERS = (For, LetStmt, Let)
    seen, out, bound = set(), [], set()
    stack = [node]
    pop, push = stack.pop, stack.append
    while stack:
        n = pop()
        t = type(n)
        if t is Var:
            if n not in seen:
                seen.add(n)
                out.append(n)
            continue
        if isinstance(n, _BINDERS):
            bound.add(n.var)
        elif t is Reduce:
            for iv in n.axis:
                bound.add(iv.var)
            # the combiner binds its lhs and rhs; a user's may read other variables
            c = n.combiner
            if c is not None:
                tup = isinstance(c, TupleCommReducer)
                bound.update(c.lhs + c.rhs if tup else (c.lhs, c.rhs))
                for x in reversed(c.result + c.identity if tup else (c.result, c.identity)):
                    push(x)
        _push_children(n, push)
    return out, bound


def free_vars(node) -> list:
    """Vars used in ``node`` that it does not bind itself (in first-use order)."""
    if type(node) is Var:
        return [node]
    used, bound = _walk_vars(node)
    return [v for v in used if v not in bound]


def uses_var(node, var: Var) -> bool:
    """Whether ``node`` reads ``var`` anywhere (bound or not)."""
    return var in _walk_vars(node)[0]


# what expressions and statements use from this module (tecomp.ir.expr.SERVICES)
SERVICES.substitute = substitute
SERVICES.free_vars = free_vars
