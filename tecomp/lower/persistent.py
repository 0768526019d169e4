"""Persistent blocks (``s[C].persistent(blocks, group_m)``), a GPU pass.

``schedule_ops`` marks the stage's nest with ``AttrStmt("persistent", (blocks, group_m),
...)``; its two outermost loops are bound to ``blockIdx.y`` (tile rows, ``TM`` of them)
and ``blockIdx.x`` (tile columns, ``TN``).  They become one loop bound to ``blockIdx.x``
of ``G = min(blocks, TM * TN)`` blocks, each looping over the tiles ``t = blockIdx.x + i
G`` and binding the old block variables to the tile's row and column in grouped order::

    blockIdx.x (b, 0, G) {
      for (i, 0, (TM*TN - b + G - 1) / G) {
        let t = b + i*G
        let by = (t / (group_m*TN))*group_m + t % (group_m*TN) % rows(t)
        let bx = t % (group_m*TN) / rows(t)      rows(t): the group's rows, group_m or fewer
        ...the tile's body...

What is not of that shape is a ScheduleError naming the stage.
"""
from __future__ import annotations

from ..errors import ScheduleError
from ..ir import op as _op
from ..ir.expr import Const, Var
from ..ir.functor import Mutator
from ..ir.names import display
from ..ir.stmt import AttrStmt, For, LetStmt

PERSISTENT = "persistent"


class _Persistent(Mutator):
    def visit_AttrStmt(self, s):
        if s.key != PERSISTENT:
            return self.generic_visit(s)
        blocks, group_m = s.value
        body = self.visit(s.body)
        outer = body
        if not (isinstance(outer, For) and outer.thread_tag == "blockIdx.y"
                and isinstance(outer.body, For) and outer.body.thread_tag == "blockIdx.x"):
            raise ScheduleError(
                "persistent: the stage's two outermost loops are not bound to blockIdx.y "
                "(tile rows) and blockIdx.x (tile columns), in that order; bind them so "
                "(and nothing to blockIdx.z) before persistent()")
        inner = outer.body
        for lp in (outer, inner):
            if not (isinstance(lp.min, Const) and lp.min.value == 0
                    and isinstance(lp.extent, Const)):
                raise ScheduleError(
                    f"persistent: the block loop {display(lp.var.name)} has extent "
                    f"{lp.extent}; persistent blocks need constant tile counts")
        tm, tn = int(outer.extent.value), int(inner.extent.value)
        total = tm * tn
        g = min(int(blocks), total)
        dt = outer.var.dtype

        def c(v):
            return Const(v, dt)
        b = Var("persistent.block", dt)
        i = Var("persistent.step", dt)
        t = Var("persistent.tile", dt)
        per = c(int(group_m) * tn)
        first = _op.mul(_op.floordiv(t, per), c(int(group_m)))
        rows = _op.minimum(_op.sub(c(tm), first), c(int(group_m)))
        pos = _op.floormod(t, per)
        by = _op.add(first, _op.floormod(pos, rows))
        bx = _op.floordiv(pos, rows)
        tile = LetStmt(t, _op.add(b, _op.mul(i, c(g))),
                       LetStmt(outer.var, by, LetStmt(inner.var, bx, inner.body)))
        steps = _op.floordiv(_op.add(_op.sub(c(total), b), c(g - 1)), c(g))
        return For(b, c(0), c(g), "thread", For(i, c(0), steps, "serial", tile),
                   "blockIdx.x")


def persistent(func):
    body = _Persistent().visit(func.body)
    return func if body is func.body else func.with_body(body)
