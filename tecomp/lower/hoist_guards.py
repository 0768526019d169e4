"""Hoisting loop-invariant guards: ``for (v) { if (c) S }`` becomes ``if (c) { for (v) S }``
when ``c`` does not read ``v`` (TVM's ``HoistIfThenElse``, Halide's ``unswitch``).

A guard made of a conjunction is split: the terms that do not read ``v`` go out, the
others stay (``for (kw) { if (z + kd >= 1 && x + kw >= 1) S }`` keeps only the test of
``kw`` inside).  What this is for: a reduction's ``where=`` condition that reads the
outer reduction counters only (a convolution's taps that fall in the zero padding, which
``tecomp.nn``'s 3-d convolutions leave out of the sum) is tested once per tap, around
the register block's unrolled and vectorized loops, instead of as a mask in every lane.

Only conditions without loads or calls (their value is fixed for the whole loop) move,
and only out of ``serial``, ``unrolled`` and ``vectorized`` loops: a ``parallel`` loop
or a GPU thread loop keeps the guard inside (each iteration runs on its own thread, and a
GPU block's barriers must be reached by all of its threads).  A loop of no iterations
runs its body no times either way.
"""
from __future__ import annotations

from ..ir import op as _op
from ..ir.expr import And, BufferLoad, Call, Const
from ..ir.functor import Mutator, collect, uses_var
from ..ir.stmt import For, IfThenElse, PrimFunc

#: the loop kinds a guard may leave
_KINDS = ("serial", "unrolled", "vectorized")


def conjuncts(c):
    """The terms of the conjunction ``c`` (``[c]`` where it is not one)."""
    return conjuncts(c.a) + conjuncts(c.b) if isinstance(c, And) else [c]


def _pure(c) -> bool:
    return not collect(c, lambda n: isinstance(n, (BufferLoad, Call)))


class _Hoist(Mutator):
    def visit_For(self, s):
        body = self.visit(s.body)
        if s.kind in _KINDS and not s.thread_tag and isinstance(body, IfThenElse):
            if body.else_case is None:
                out = [t for t in conjuncts(body.cond) if _pure(t) and not uses_var(t, s.var)]
                if out:
                    keep = [t for t in conjuncts(body.cond) if not any(t is o for o in out)]
                    inner = body.then_case if not keep else IfThenElse(_op.all_(*keep),
                                                                       body.then_case)
                    return IfThenElse(_op.all_(*out), self.visit(
                        For(s.var, s.min, s.extent, s.kind, inner, s.thread_tag)))
            elif _pure(body.cond) and not uses_var(body.cond, s.var):
                return IfThenElse(body.cond, For(s.var, s.min, s.extent, s.kind,
                                                 body.then_case, s.thread_tag),
                                  For(s.var, s.min, s.extent, s.kind, body.else_case,
                                      s.thread_tag))
        return s if body is s.body else For(s.var, s.min, s.extent, s.kind, body,
                                            s.thread_tag)


def hoist_guards_pass(func: PrimFunc) -> PrimFunc:
    """Move guards that do not depend on a loop's counter out of the loop."""
    body = _Hoist().visit(func.body)
    return func if body is func.body else func.with_body(body)
