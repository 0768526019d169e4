"""The pragma ``causal_tiles`` = ``"before <rows> <cols>"`` (or ``"after ..."``), which
only the FlashAttention template sets (``Stage._causal_tiles``; ``Stage.pragma`` refuses
it, since skipping iterations is right only where the causal mask empties them): the
loop over ``axis`` steps over tiles of ``cols`` columns of a matrix whose rows come in
blocks of ``rows``, one block per ``blockIdx.x``, and a causal mask leaves every element
of some tiles out, so the loop skips them (FlashAttention's causal tiles:
:mod:`tecomp.strategy.cuda.attention`).

* ``before``: column ``c`` is kept for row ``r`` only when ``c <= r`` (the keys of a
  block of queries): the loop ends after the tile of the block's last row,
  ``extent = min(extent, ceil((block + 1) * rows / cols))``;
* ``after``: column ``c`` is kept only when ``c >= r`` (the queries of a block of keys):
  the loop starts at the tile of the block's first row, ``floor(block * rows / cols)``.

The loop must start at 0 and its body must give nothing for the tiles skipped (the
mask's job; the schedule that sets the pragma answers for it).  Without an enclosing
``blockIdx.x`` loop the pragma is left as it is.
"""
from __future__ import annotations

from ..errors import ScheduleError
from ..ir import op
from ..ir.expr import Cast, Const
from ..ir.functor import Mutator
from ..ir.simplify import simplify
from ..ir.stmt import AttrStmt, For, PrimFunc

KEY = "pragma_causal_tiles"


def parse(value) -> tuple:
    """``(side, rows, cols)`` of the pragma's value (ScheduleError otherwise)."""
    parts = str(getattr(value, "value", value)).split()
    if len(parts) != 3 or parts[0] not in ("before", "after") or not all(
            p.isdigit() and int(p) > 0 for p in parts[1:]):
        raise ScheduleError(f"pragma causal_tiles: the value is 'before <rows> <cols>' or "
                            f"'after <rows> <cols>' (positive ints), got {value!r:.60}")
    return parts[0], int(parts[1]), int(parts[2])


class _CausalTiles(Mutator):
    def __init__(self):
        self.block = []     # the enclosing blockIdx.x loop variables

    def visit_For(self, s):
        inner = s.kind == "thread" and s.thread_tag == "blockIdx.x"
        if inner:
            self.block.append(s.var)
        try:
            return self.generic_visit(s)
        finally:
            if inner:
                self.block.pop()

    def visit_AttrStmt(self, s):
        body = self.visit(s.body)
        if s.key != KEY or not isinstance(body, For) or not self.block or not (
                isinstance(body.min, Const) and body.min.value == 0):
            return s if body is s.body else AttrStmt(s.key, s.value, body)
        side, rows, cols = parse(s.value)
        f, bo = body, self.block[-1]
        dt = f.extent.dtype
        c = lambda n: Const(n, dt)  # noqa: E731
        if bo.dtype != dt:
            bo = Cast(bo, dt)
        if side == "before":
            ext = op.minimum(f.extent, op.floordiv(op.add(op.mul(op.add(bo, c(1)), c(rows)),
                                                      c(cols - 1)), c(cols)))
            return For(f.var, f.min, ext, f.kind, f.body, f.thread_tag)
        start = op.minimum(f.extent, op.floordiv(op.mul(bo, c(rows)), c(cols)))
        return For(f.var, start, op.sub(f.extent, start), f.kind, f.body, f.thread_tag)


def causal_tiles_pass(func: PrimFunc) -> PrimFunc:
    """Apply the ``causal_tiles`` pragmas (see the module docstring)."""
    body = _CausalTiles().visit(func.body)
    return func if body is func.body else func.with_body(simplify(body))
