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

With ``whole`` after the numbers (``"before 128 16 whole"``), the tiles the mask leaves
whole (``before``: the tiles up to the block's first row,
``cols * ko <= rows * block + 1 - cols``, ``<= rows * block - cols`` where ``cols > 1``
divides ``rows``; ``after``: those from its last row on, ``cols *
ko >= rows * block + rows - 1``) then run in a loop of their own, a copy of the body in
which every integer comparison that those bounds prove true is ``true``: the causal mask
(``j <= i``) is tested in the diagonal tiles only (FlashAttention's masking steps), and
so is a test of a tile's corner (``ko <= 8 * block + 2 * w - 1``, lowering's
``Stage._tensorize_unmasked``).  A comparison ``a*ko + rest <= 0`` is proved as ``n (a*ko
+ rest) <= 0`` with ``n = cols / gcd(a, cols)``, so that ``n a = m * cols``, and ``cols *
ko`` replaced by its bound (an upper one for ``m > 0``, a lower one for ``m < 0``): what
is left, ``m * bound + n rest``, is linear in the block and in counters of constant
ranges (the enclosing loops', the body's), which :func:`tecomp.ir.arith.prove` decides.
Where no comparison is proved the loop stays one (no copy).

With ``masked`` after ``whole`` (``"before 128 16 whole masked"``), the tiles outside the
whole tiles' loop (the diagonal ones, or the one loop where nothing is proved) drop
``Stage._tensorize_unmasked``'s test of each tile's corner: each such ``if`` (both of its
branches one stage's tensor intrinsic) becomes its ``else``, the masked intrinsic, which
is right on every tile (FlashAttention's ``FlashConfig(diagonal_test=False)``: no test
and no branch there, the masked intrinsic also on the tiles it leaves whole).
"""
from __future__ import annotations

import math

from ..errors import ScheduleError, TecompError
from ..ir import op
from ..ir.arith import prove
from ..ir.expr import LE, Add, Cast, Const, FloorDiv, FloorMod, Max, Min, Mul, Sub, Var
from ..ir.functor import Mutator, Visitor, node_fields
from ..ir.simplify import simplify
from ..ir.stmt import (Allocate, AttrStmt, BufferStore, For, IfThenElse, PrimFunc,
                       TensorIntrinCall, seq)
from .loop_partition import _linear

KEY = "pragma_causal_tiles"


def parse(value) -> tuple:
    """``(side, rows, cols, whole, masked)`` of the pragma's value (ScheduleError
    otherwise)."""
    parts = str(getattr(value, "value", value)).split()
    whole, masked = parts[3:4] == ["whole"], parts[3:] == ["whole", "masked"]
    if whole:
        parts = parts[:3] + parts[3 + 1 + masked:]
    if len(parts) != 3 or parts[0] not in ("before", "after") or not all(
            p.isdigit() and int(p) > 0 for p in parts[1:]):
        raise ScheduleError(f"pragma causal_tiles: the value is 'before <rows> <cols>' or "
                            f"'after <rows> <cols>' (positive ints), then optionally "
                            f"'whole' or 'whole masked', got {value!r:.60}")
    return parts[0], int(parts[1]), int(parts[2]), whole, masked


class _Ranges(Visitor):
    """The constant ranges ``(lo, hi)`` of the counters of the loops in a statement."""

    def __init__(self, ranges: dict):
        self.ranges = ranges

    def visit_For(self, s):
        _add_range(self.ranges, s)
        self.generic_visit(s)


def _add_range(ranges: dict, f: For) -> None:
    """``f``'s counter's range into ``ranges`` (the union with one already there: a
    counter of two loops), or the counter unbounded where ``f``'s range is not constant."""
    if isinstance(f.min, Const) and isinstance(f.extent, Const) and f.extent.value > 0:
        lo, hi = f.min.value, f.min.value + f.extent.value - 1
        if f.var in ranges:
            if ranges[f.var] is None:
                return
            lo, hi = min(lo, ranges[f.var][0]), max(hi, ranges[f.var][1])
        ranges[f.var] = (lo, hi)
    else:
        ranges[f.var] = None


def _bounded(ranges: dict) -> dict:
    return {v: r for v, r in ranges.items() if r is not None}


class _Uncast(Mutator):
    """An index expression without its int64 casts of int32 values, rebuilt in int32
    where its parts are (the casts keep the values: the proof is over the integers)."""

    _OPS = {Add: op.add, Sub: op.sub, Mul: op.mul, FloorDiv: op.floordiv,
            FloorMod: op.floormod, Min: op.minimum, Max: op.maximum}

    def visit_Cast(self, e):
        v = self.visit(e.value)
        if e.dtype == "int64" and v.dtype == "int32":    # (a widening cast only)
            return v
        return e if v is e.value else Cast(v, e.dtype)

    def visit_Const(self, e):
        if e.dtype == "int64" and -2 ** 31 <= e.value < 2 ** 31:
            return Const(e.value, "int32")
        return e

    def generic_visit(self, e):
        f = self._OPS.get(type(e))
        if f is None:
            return super().generic_visit(e)
        a, b = self.visit(e.a), self.visit(e.b)
        return e if a is e.a and b is e.b else f(a, b)


_INTS = ("int32", "int64")


class _Whole(Mutator):
    """The comparisons of a body that hold in every tile the mask leaves whole, as
    ``true``: ``bound`` is ``(sign, b)`` with ``cols * ko <= b`` (sign 1) or ``>= b``
    (sign -1); ``ranges`` those of the other counters."""

    def __init__(self, ko: Var, cols: int, bound, ranges: dict):
        self.ko, self.cols, self.bound, self.ranges = ko, cols, bound, ranges
        self.proved = 0

    def _holds(self, d) -> bool:
        """Whether ``d <= 0`` (an int expression) holds in the whole tiles."""
        lin = _linear(_Uncast().visit(d), self.ko)
        if lin is None or lin[0] == 0:
            return False
        # (d <= 0 as n d <= 0, n = cols / gcd(a, cols) > 0: a coefficient of ko that is a
        # multiple of cols, a simplified test such as ko <= 8 block + 2 w - 1)
        n = self.cols // math.gcd(lin[0], self.cols)
        m, rest = lin[0] * n // self.cols, op.mul(lin[1], Const(n, lin[1].dtype))
        sign, b = self.bound
        if (m > 0) != (sign > 0):
            return False
        e = op.add(op.mul(b, Const(m, b.dtype)), rest)
        try:
            return prove(LE(e, Const(0, e.dtype)), self.ranges)
        except TecompError:
            return False

    def _compare(self, e, d):
        if d.dtype in _INTS and self._holds(d):
            self.proved += 1
            return Const(True, "bool")
        return self.generic_visit(e)

    def visit_LE(self, e):
        return self._compare(e, op.sub(e.a, e.b))

    def visit_LT(self, e):
        return self._compare(e, op.add(op.sub(e.a, e.b), Const(1, e.a.dtype)))

    def visit_GE(self, e):
        return self._compare(e, op.sub(e.b, e.a))

    def visit_GT(self, e):
        return self._compare(e, op.add(op.sub(e.b, e.a), Const(1, e.a.dtype)))


class _Read(Visitor):
    """Whether a statement names ``buf`` other than as the buffer a store writes (a load,
    an intrinsic's operand, any other use)."""

    def __init__(self, buf):
        self.buf, self.found = buf, False

    def generic_visit(self, node):
        if self.found:
            return
        for name in node_fields(type(node)):
            if name == "buffer" and isinstance(node, BufferStore):
                continue
            v = getattr(node, name)
            if v is self.buf or (isinstance(v, tuple) and any(x is self.buf for x in v)):
                self.found = True
                return
        super().generic_visit(node)


class _Unread(Mutator):
    """A body without the shared or local buffers it allocates and no longer reads, and
    without their stores (the whole tiles' copy: the positions that only the mask read)."""

    def __init__(self):
        self.dropped = set()

    def visit_Allocate(self, s):
        body = self.visit(s.body)
        seen = _Read(s.buffer)
        seen.visit(body)
        if s.buffer.scope in ("shared", "local") and not seen.found:
            self.dropped.add(id(s.buffer))
            return self.visit(body)
        return s if body is s.body else Allocate(s.buffer, body)

    def visit_BufferStore(self, s):
        return seq() if id(s.buffer) in self.dropped else s


class _MaskEveryTile(Mutator):
    """A body whose ``Stage._tensorize_unmasked`` tests (an ``if`` whose two branches are
    one stage's tensor intrinsic calls: the unmasked one, else the masked one) are their
    masked intrinsic alone."""

    def visit_IfThenElse(self, s):
        a, b = s.then_case, s.else_case
        if isinstance(a, TensorIntrinCall) and isinstance(b, TensorIntrinCall) and \
                a.stage == b.stage and a.intrin is not b.intrin:
            return b
        return self.generic_visit(s)


class _CausalTiles(Mutator):
    def __init__(self):
        self.block = []     # the enclosing blockIdx.x loop variables
        self.ranges = {}    # the enclosing loops' constant ranges

    def visit_For(self, s):
        inner = s.kind == "thread" and s.thread_tag == "blockIdx.x"
        if inner:
            self.block.append(s.var)
        had = s.var in self.ranges
        _add_range(self.ranges, s)
        try:
            return self.generic_visit(s)
        finally:
            if inner:
                self.block.pop()
            if not had:
                self.ranges.pop(s.var, None)

    def visit_AttrStmt(self, s):
        body = self.visit(s.body)
        if s.key != KEY or not isinstance(body, For) or not self.block or not (
                isinstance(body.min, Const) and body.min.value == 0):
            return s if body is s.body else AttrStmt(s.key, s.value, body)
        side, rows, cols, apart, masked = parse(s.value)
        f, bo = body, self.block[-1]
        dt = f.extent.dtype
        c = lambda n: Const(n, dt)  # noqa: E731
        if bo.dtype != dt:
            bo = Cast(bo, dt)
        first = op.mul(bo, c(rows))
        if side == "before":
            lo = f.min
            hi = op.minimum(f.extent, op.floordiv(op.add(op.mul(op.add(bo, c(1)), c(rows)),
                                                         c(cols - 1)), c(cols)))
            # whole tiles: ko < (rows * block + 1) // cols, so cols * ko <= rows * block + 1
            # - cols, and <= rows * block - cols where cols > 1 divides rows
            bound = (1, op.add(first, c(-cols if rows % cols == 0 and cols > 1 else 1 - cols)))
            split = op.minimum(hi, op.floordiv(op.add(first, c(1)), c(cols)))
        else:
            lo = op.minimum(f.extent, op.floordiv(first, c(cols)))
            hi = f.extent
            # whole tiles: cols * ko >= rows * block + rows - 1
            bound = (-1, op.add(first, c(rows - 1)))
            split = op.minimum(hi, op.maximum(lo, op.floordiv(
                op.add(first, c(rows - 1 + cols - 1)), c(cols))))
        part = lambda a, b, x: For(f.var, a, op.sub(b, a), f.kind, x, f.thread_tag)  # noqa: E731
        if not apart:
            return part(lo, hi, f.body)
        # (the diagonal tiles' body: with masked, the masked intrinsic on every tile)
        dbody = _MaskEveryTile().visit(f.body) if masked else f.body
        ranges = dict(self.ranges)
        _Ranges(ranges).visit(f.body)
        whole = _Whole(f.var, cols, bound, _bounded(ranges))
        wbody = whole.visit(f.body)
        if not whole.proved:
            return part(lo, hi, dbody)
        wbody = _Unread().visit(simplify(wbody))
        if side == "before":
            return seq(part(lo, split, wbody), part(split, hi, dbody))
        return seq(part(lo, split, dbody), part(split, hi, wbody))


def causal_tiles_pass(func: PrimFunc) -> PrimFunc:
    """Apply the ``causal_tiles`` pragmas (see the module docstring)."""
    body = _CausalTiles().visit(func.body)
    return func if body is func.body else func.with_body(simplify(body))
