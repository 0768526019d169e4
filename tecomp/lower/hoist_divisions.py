"""Divisions by a symbolic divisor, computed once per loop iteration.

A kernel whose extents are symbolic indexes its tiles through divisions by run-time
values: a parallel loop over ``(batch, column tile)`` fused reads ``f // ((n + 31) //
32)`` and ``f % ((n + 31) // 32)`` in every address of its body.  A division by a value
that is not a constant is some thirty instructions once its floor semantics and its
zero and overflow checks are written out, and the code generator emits it again at each
use: every copy of an unrolled register block repeats it.  LLVM finds the common
expressions again, but only after optimising IR that is many times the size of the
kernel's (a batched ``n x n`` GEMM: 45,000 lines where the kernel of one size has 1,300).

This pass binds each such division (or remainder) once, with a ``let`` at the top of the
body of the innermost loop whose counter it reads (or of the function, where it reads
parameters only), and replaces its uses.  It runs as a code-generation pass: the IR that
``tc.lower`` prints keeps the divisions where they are read.  Vectorized loops keep
theirs (a let there would be a vector).
"""
from __future__ import annotations

from ..ir.expr import Const, FloorDiv, FloorMod, Max, Min, Var
from ..ir.functor import Mutator, Visitor, collect, free_vars
from ..ir.stmt import For, LetStmt, PrimFunc

_INT = ("int32", "int64")


def _costly(x) -> bool:
    """A division or remainder by a value that is not a constant."""
    return (type(x) is FloorDiv or type(x) is FloorMod) and x.dtype in _INT \
        and type(x.b) is not Const


def _bound_expr(x) -> bool:
    """A loop bound worth a let: not a constant or a variable, and with a division, a
    remainder, a min or a max in it (each unrolled copy of an enclosing loop would
    compute it again)."""
    return type(x) not in (Const, Var) and x.dtype in _INT and bool(
        collect(x, lambda y: type(y) in (FloorDiv, FloorMod, Min, Max)))


class _Candidates(Visitor):
    def __init__(self):
        self.found: dict = {}

    def visit_For(self, s):
        if s.kind in ("serial", "unrolled") and not s.thread_tag:
            for e in (s.min, s.extent):
                if s.kind == "unrolled":
                    # the code generator unrolls min(e, c) as c guarded copies: keep the
                    # min in sight, bind e
                    if type(e) is not Min or type(e.b) is not Const:
                        continue
                    e = e.a
                if _bound_expr(e):
                    self.found.setdefault(e, None)
        self.generic_visit(s)

    def generic_visit(self, node):
        if type(node) is FloorDiv or type(node) is FloorMod:
            if _costly(node):
                self.found.setdefault(node, None)
        return super().generic_visit(node)


def _candidates(node, allowed: set, need=None):
    """The expressions of ``node`` worth binding once (:func:`_costly` divisions, and
    loop bounds) that read only the variables in ``allowed`` (and ``need``, where
    given), the smaller ones first, without repeats."""
    c = _Candidates()
    c.visit(node)
    out = []
    for x in c.found:
        fv = set(free_vars(x))
        if fv <= allowed and (need is None or need in fv):
            out.append(x)
    out.sort(key=_size)
    return out


def _size(e) -> int:
    return len(collect(e, lambda y: True))


class _Replace(Mutator):
    def __init__(self, table: dict):
        super().__init__()
        self.table = table
        self.types = {type(k) for k in table}

    def visit(self, node):
        if type(node) in self.types:
            v = self.table.get(node)
            if v is not None:
                return v
        return super().visit(node)


class _Hoist(Mutator):
    def __init__(self, params: set, taken: set):
        super().__init__()
        self.bound = set(params)
        self.taken = taken
        self.count = 0

    def _name(self):
        while True:
            name = f"cse{self.count}"
            self.count += 1
            if name not in self.taken:
                self.taken.add(name)
                return name

    def bind(self, body, allowed: set, need=None):
        """``body`` with the divisions over ``allowed`` that read ``need`` bound by lets
        at its top."""
        divs = _candidates(body, allowed, need)
        if not divs:
            return body
        table = {}
        lets = []
        for d in divs:
            # an expression inside another one (a division in a loop bound) reads the let
            value = _Replace(table).visit(d) if table else d
            v = Var(self._name(), d.dtype)
            table[d] = v
            lets.append((v, value))
        body = _Replace(table).visit(body)
        for v, value in reversed(lets):
            body = LetStmt(v, value, body)
        return body

    def visit_For(self, s):
        if s.kind == "vectorized" or s.thread_tag:
            return s
        outer = self.bound
        self.bound = outer | {s.var}
        try:
            body = self.visit(s.body)
            body = self.bind(body, self.bound, s.var)
        finally:
            self.bound = outer
        return s if body is s.body else For(s.var, s.min, s.extent, s.kind, body, s.thread_tag)

    def visit_LetStmt(self, s):
        outer = self.bound
        self.bound = outer | {s.var}
        try:
            body = self.visit(s.body)
        finally:
            self.bound = outer
        return s if body is s.body else LetStmt(s.var, s.value, body)


def hoist_divisions_pass(func: PrimFunc) -> PrimFunc:
    """Bind each division by a symbolic divisor once per iteration of its loop."""
    params = set()
    for p in func.params:
        if isinstance(p, Var):
            params.add(p)
        else:
            params.update(e for e in p.shape if isinstance(e, Var))
    if not collect(func.body, lambda x: (type(x) is FloorDiv or type(x) is FloorMod)
                   and type(x.b) is not Const):
        return func
    taken = {v.name for v in collect(func.body, lambda x: type(x) is Var)} | {v.name for v in params}
    h = _Hoist(params, taken)
    body = h.visit(func.body)
    body = h.bind(body, params)
    return func if body is func.body else func.with_body(body)
