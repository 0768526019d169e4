"""The lowering passes (each a pure PrimFunc -> PrimFunc function)."""
from __future__ import annotations

from ..errors import ScheduleError
from ..ir.expr import Const
from ..ir.functor import Mutator, Visitor, substitute
from ..ir.stmt import AttrStmt, For, PrimFunc, SeqStmt, seq


def shape_var_ranges(func: PrimFunc) -> dict:
    """Symbolic extents are non-negative: ``n`` in ``[0, 2**31 - 1)``."""
    from ..ir.expr import Buffer, Range, Var
    from ..ir.functor import free_vars

    out = {}
    for p in func.params:
        if isinstance(p, Buffer):
            for e in p.shape:
                for v in free_vars(e):
                    out[v] = Range(Const(0, "int32"), Const(2**31 - 1, "int32"))
    return out


def simplify_pass(func: PrimFunc) -> PrimFunc:
    """Fold constants and canonicalise index arithmetic, using loop ranges."""
    from ..ir.simplify import simplify

    body = simplify(func.body, shape_var_ranges(func))
    return func if body is func.body else func.with_body(body)


def loop_partition_pass(func: PrimFunc) -> PrimFunc:
    """Remove split-tail guards from the main part of loops (see loop_partition.py)."""
    from ..ir.simplify import simplify
    from .loop_partition import loop_partition

    return loop_partition(func, simplify, shape_var_ranges(func))


class _UnrollExplicit(Mutator):
    def visit_AttrStmt(self, s):
        body = self.visit(s.body)
        if s.key == "pragma_unroll_explicit" and isinstance(body, For) and isinstance(body.extent, Const):
            f = body
            copies = [substitute(f.body, {f.var: _add(f.min, i)}) for i in range(f.extent.value)]
            return seq(*copies)
        return s if body is s.body else AttrStmt(s.key, s.value, body)


def _add(m, i):
    from ..ir import op

    return op.add(m, Const(i, m.dtype))


def unroll_explicit_pass(func: PrimFunc) -> PrimFunc:
    """Loops with ``pragma(axis, "unroll_explicit")`` are unrolled in the IR itself."""
    body = _UnrollExplicit().visit(func.body)
    if body is func.body:
        return func
    from ..ir.simplify import simplify

    return func.with_body(simplify(body))


class _RemoveNoOp(Mutator):
    def visit_For(self, s):
        body = self.visit(s.body)
        if isinstance(body, SeqStmt) and not body.seq:
            return body
        if isinstance(s.extent, Const) and s.extent.value <= 0:
            return SeqStmt(())
        return s if body is s.body else For(s.var, s.min, s.extent, s.kind, body, s.thread_tag)

    def visit_SeqStmt(self, s):
        items = [self.visit(x) for x in s.seq]
        if all(a is b for a, b in zip(items, s.seq)):
            return s
        return seq(*items)


def remove_no_op_pass(func: PrimFunc) -> PrimFunc:
    """Drop loops with empty bodies or no iterations, and empty sequences."""
    body = _RemoveNoOp().visit(func.body)
    return func if body is func.body else func.with_body(body)


def insert_barriers_pass(func: PrimFunc) -> PrimFunc:
    """Insert __syncthreads() where shared memory written by some threads is read by
    others (GPU targets only)."""
    from .barriers import insert_barriers

    return insert_barriers(func)


def verify_pass(func: PrimFunc) -> PrimFunc:
    """Check invariants the backends rely on; a failure is a tecomp bug."""
    from ..errors import internal_assert
    from ..ir.expr import ProducerLoad, Reduce

    class _V(Visitor):
        def visit_ProducerLoad(self, e):
            internal_assert(False, f"a tensor read survived lowering: {e}")

        def visit_Reduce(self, e):
            internal_assert(False, f"a reduction survived lowering: {e}")

    _V().visit(func.body)
    return func
