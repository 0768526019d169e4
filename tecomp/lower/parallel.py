"""Parallel outlining plans for the CPU (a codegen-phase pass, llvm only).

Every ``parallel`` loop gets an ``AttrStmt("parallel_plan", ParallelPlan, loop)``:

* outlined: its body becomes a task function run on the thread pool
  (``tecomp_parallel_for``); the plan lists what the task captures from the enclosing
  function: the variables its body uses (loop variables, lets, shape variables --
  including those in the shapes of the buffers it allocates) and the buffers it reads
  or writes but does not allocate, each in order of first appearance (the order of the
  closure's fields);
* ``nested``: a parallel loop inside another parallel loop's body runs serially (the
  pool runs one loop at a time).

A parallel loop inside a widened (vectorized) body also runs serially: the code
generator knows when it is inside one.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Tuple

from ..ir.expr import Buffer, Var
from ..ir.functor import Visitor, free_vars
from ..ir.stmt import For, PrimFunc
from .vectorize import LoopPlanner, buffer_uses

KEY = "parallel_plan"


@dataclass(frozen=True, eq=False)
class ParallelPlan:
    """What the task of one parallel loop captures, or ``nested`` (runs serially)."""

    nested: bool = False
    captured: Tuple[Var, ...] = ()      # variables the body uses from outside it
    buffers: Tuple[Buffer, ...] = ()    # buffers it uses and does not allocate

    def note(self, name: str):
        if self.nested:
            return f"parallel loop over `{name}` nested in a parallel loop runs serially"
        return None

    def __str__(self):
        if self.nested:
            return "serial (nested in a parallel loop)"
        return ("task captures (" + ", ".join(v.name for v in self.captured) + "), buffers ("
                + ", ".join(b.name for b in self.buffers) + ")")


def free_vars_with_allocations(stmt) -> List[Var]:
    """``free_vars(stmt)`` plus the variables in the shapes and strides of the buffers
    it allocates (the generic visitor does not walk into Buffers)."""
    out = list(free_vars(stmt))
    seen = set(out)

    class _V(Visitor):
        def visit_Allocate(self, a):
            for e in tuple(a.buffer.shape) + tuple(a.buffer.strides or ()):
                for v in free_vars(e):
                    if v not in seen:
                        seen.add(v)
                        out.append(v)
            self.generic_visit(a)

    _V().visit(stmt)
    return out


def plan_parallel_loop(loop: For) -> ParallelPlan:
    captured = tuple(v for v in free_vars_with_allocations(loop.body) if v is not loop.var)
    uses = buffer_uses(loop.body)
    return ParallelPlan(False, captured, tuple(b for b in uses.used if b not in uses.allocated))


class _Plan(LoopPlanner):
    key, kind, plan_type = KEY, "parallel", ParallelPlan

    def __init__(self):
        self.depth = 0   # parallel loops around the one being visited

    def visit_body(self, s: For):
        par = s.kind == "parallel"
        self.depth += par
        try:
            return self.visit(s.body)
        finally:
            self.depth -= par

    def plan(self, loop: For) -> ParallelPlan:
        return ParallelPlan(nested=True) if self.depth else plan_parallel_loop(loop)


def parallel_plan_pass(func: PrimFunc) -> PrimFunc:
    """Give every parallel loop its :class:`ParallelPlan`."""
    body = _Plan().visit(func.body)
    return func if body is func.body else func.with_body(body)
