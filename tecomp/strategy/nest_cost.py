"""An analytic estimate of a lowered kernel's time on the CPU, for kernels whose data
stays in the L1 cache: the instructions its loops issue and the parallel regions it
starts (:func:`nest_cycles`).

It scores two schedules of one tiny DAG against each other
(:func:`tecomp.strategy.trivial.prefer_trivial`): there, what decides is what the loops
do, not the memory.  The estimate, in cycles of one call:

* a statement costs one instruction for its store, one for each load, arithmetic
  operation, comparison, select or cast of its value (not of its indices: the code
  generator strength-reduces them along the loops), :data:`CALL_COST` for a call of a
  math function (``exp``, ``tanh``...) and :data:`DIV_COST` for a division;
* a serial loop costs :data:`LOOP_STEP` instructions an iteration on top of its body; an
  unrolled one none;
* a vectorized loop of ``n`` iterations runs its body once per vector (``ceil(n / lanes)``
  times, the lanes of the widest value it stores), a load whose elements are not
  consecutive in memory along the loop (a gather) once per lane;
* a parallel loop of ``n`` iterations costs :attr:`~tecomp.target.machine.CpuModel.
  parallel_region_cycles` to start, then the iterations of its busiest thread;
* :data:`IPC` instructions retire a cycle.

Extents that are not constants (a loop bounded by an outer loop's variable after loop
partitioning) take their largest value; where there is none, the estimate is None.
"""
from __future__ import annotations

from typing import Dict, Optional

from ..ir import dtype as _dt
from ..ir.arith import const_interval
from ..ir.expr import (BinaryOp, BufferLoad, Call, Cast, CmpOp, Const, Div, Let, Select,
                       Var)
from ..ir.stmt import (AssertStmt, BufferStore, Evaluate, For, IfThenElse, LetStmt,
                       Prefetch, PrimFunc, SeqStmt)
from ..ir.functor import substitute
from ..ir.simplify import simplify

#: instructions retired a cycle
IPC = 2.0

#: instructions of one iteration of a serial loop beyond its body (the counter, the
#: compare and the branch)
LOOP_STEP = 2

#: instructions of a call of a math function on one value or vector (``exp``, ``tanh``,
#: ``log``: a polynomial of a dozen operations and its range reduction)
CALL_COST = 12

#: instructions of a division (its latency, for the few a kernel has)
DIV_COST = 4

#: the calls that are one instruction
_CHEAP_CALLS = {"fma", "min", "max", "abs", "fabs", "floor", "ceil", "trunc", "round",
                "sqrt", "select", "likely"}


def _contiguous(ld: BufferLoad, var: Var) -> bool:
    """Whether ``ld`` reads consecutive elements (or one) as ``var`` steps by one, in the
    buffer's row-major order (a fused run of rows, ``a[f // 12, f % 12]``, is)."""
    flat = None
    for d, i in enumerate(ld.indices):
        flat = i if flat is None else flat * ld.buffer.shape[d] + i
    if flat is None:
        return True
    step = simplify(substitute(flat, {var: var + 1}) - flat)
    return type(step) is Const and int(step.value) in (0, 1)


class _Unknown(Exception):
    """An extent without a largest value: no estimate."""


def nest_cycles(func: PrimFunc, info, env: Optional[Dict[Var, int]] = None) -> Optional[float]:
    """The estimated cycles of one call of the lowered ``func`` on the machine ``info``
    (a :class:`~tecomp.target.machine.CpuModel`; see the module), or None where an
    extent has no largest value.  ``env``: values of the shape variables."""
    ranges = {v: (int(c), int(c)) for v, c in (env or {}).items()}
    try:
        return _Walker(info, ranges).stmt(func.body, None) / IPC
    except _Unknown:
        return None


class _Walker:
    def __init__(self, info, ranges):
        self.info = info
        self.ranges = ranges   # loop variable -> (lo, hi)

    def extent(self, e) -> int:
        lo, hi = const_interval(e, self.ranges)
        if hi is None:
            raise _Unknown
        return max(0, hi)

    def lanes(self, dtype: str) -> int:
        bits = max(8, _dt.bits(dtype)) if dtype not in ("bool",) else 8
        return max(1, self.info.lanes * 32 // bits)

    def stmt(self, s, vec) -> float:
        """Instructions of one run of ``s``; ``vec``: the variable of the vectorized
        loop it is inside (its loads are contiguous along it or gathers), or None."""
        t = type(s)
        if t is SeqStmt:
            return sum(self.stmt(x, vec) for x in s.seq)
        if t is For:
            return self.loop(s, vec)
        if t is BufferStore:
            return 1 + self.expr(s.value, vec)
        if t is IfThenElse:
            then = self.stmt(s.then_case, vec)
            other = self.stmt(s.else_case, vec) if s.else_case is not None else 0.0
            return self.expr(s.cond, None) + max(then, other)
        if t is LetStmt:
            return self.expr(s.value, vec) + self.stmt(s.body, vec)
        if t is Evaluate:
            return self.expr(s.value, vec)
        if t is Prefetch:
            return 1.0
        body = getattr(s, "body", None)
        if body is not None:   # Allocate, AttrStmt, AssertStmt
            return (self.expr(s.cond, None) if t is AssertStmt else 0.0) + self.stmt(body, vec)
        fallback = getattr(s, "fallback", None)   # a tensorized region: its loops
        return self.stmt(fallback, vec) if fallback is not None else 1.0

    def loop(self, s: For, vec) -> float:
        lo, _ = const_interval(s.min, self.ranges)
        n = self.extent(s.extent)
        hi_min = const_interval(s.min, self.ranges)[1]
        if lo is None or hi_min is None:
            raise _Unknown
        self.ranges[s.var] = (lo, hi_min + max(n - 1, 0))
        try:
            if s.kind == "vectorized":
                w = self.widest_lanes(s.body)
                return -(-n // w) * self.stmt(s.body, s.var)
            body = self.stmt(s.body, vec)
            if s.kind == "parallel":
                busiest = -(-n // max(1, min(self.info.threads, n))) if n else 0
                return self.info.parallel_region_cycles * IPC + busiest * (body + LOOP_STEP)
            return n * (body + (0 if s.kind == "unrolled" else LOOP_STEP))
        finally:
            del self.ranges[s.var]

    def widest_lanes(self, body) -> int:
        """The lanes of a vector of the widest value ``body`` stores."""
        widths = []

        def visit(x):
            if type(x) is BufferStore:
                widths.append(self.lanes(x.buffer.dtype))
            for c in (getattr(x, "seq", None) or ()):
                visit(c)
            for f in ("body", "then_case", "else_case"):
                c = getattr(x, f, None)
                if c is not None:
                    visit(c)
        visit(body)
        return min(widths) if widths else self.info.lanes

    def expr(self, e, vec) -> float:
        t = type(e)
        if t is Const or t is Var:
            return 0.0
        if t is BufferLoad:
            own = 1.0
            if vec is not None and not _contiguous(e, vec):
                own = float(self.lanes(e.dtype))   # a gather: one lane at a time
            return own
        if isinstance(e, BinaryOp):
            own = DIV_COST if t is Div and _dt.is_float(e.dtype) else 1
            return own + self.expr(e.a, vec) + self.expr(e.b, vec)
        if t is CmpOp:
            return 1 + self.expr(e.a, vec) + self.expr(e.b, vec)
        if t is Call:
            own = 1 if e.op in _CHEAP_CALLS else CALL_COST
            return own + sum(self.expr(a, vec) for a in e.args)
        if t is Select:
            return 1 + self.expr(e.cond, vec) + self.expr(e.true_value, vec) + \
                self.expr(e.false_value, vec)
        if t is Cast:
            return 1 + self.expr(e.value, vec)
        if t is Let:
            return self.expr(e.value, vec) + self.expr(e.body, vec)
        return 1.0 + sum(self.expr(getattr(e, f), vec) for f in ("a", "b", "value", "base")
                         if hasattr(e, f) and getattr(e, f) is not None
                         and not isinstance(getattr(e, f), (int, float, str)))
