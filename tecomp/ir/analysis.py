"""What a lowered function does, counted from its loop IR: the floating-point operations
it executes (:func:`count_flops`) and the data each of its loops touches
(:func:`loop_footprints`).  ``tc.roofline`` and ``tc.draw_schedule`` read them.

Floating-point operations, as counted:

* an add, subtract, multiply, divide, min or max of floats counts one, a comparison of
  floats one (``select(a > b, a, b)``, a max, is one), ``fma`` two, a call of a math
  function on floats (``exp``, ``tanh``, ``sqrt``, ...) one;
* integer arithmetic (indices, loop bounds), casts, loads and stores count nothing;
* each statement counts once per iteration of the loops around it (a vectorized loop's
  lanes are its iterations); a guard (``if``) counts the iterations where it holds, and
  a tensorized region counts the loop nest it stands for.

The loops are walked, not run: the loops whose variable a bound or a guard inside
uses are enumerated (memoised on the values that matter), the others multiply.  Where
a guard depends on data loaded at run time, or an enumeration would take more than a
million steps, the count takes the larger branch (the first iteration's value) and
says it is an upper bound (``exact=False``).  A call of an extern function
(``tc.extern``) cannot be counted: its name is in ``opaque``.

A loop's footprint is the data that one complete run of it (all its iterations and
everything inside) touches: for each buffer it loads, stores or prefetches, the bounding box of
the elements it accesses, in bytes (clipped to the buffer), summed over the buffers.
The loops around it are taken at their first iteration.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from . import dtype as _dt
from .arith import const_interval
from .expr import (
    Add, BinaryOp, Buffer, BufferLoad, Call, Cast, CmpOp, Const, Div, Let, Max, Min, Mul, Select, Sub,
    Var,
)
from .functor import collect, free_vars
from .host_eval import eval_host_expr
from .stmt import (
    AssertStmt, BufferStore, Evaluate, ExternCall, For, IfThenElse, LetStmt,
    Prefetch, PrimFunc, SeqStmt, TensorIntrinCall,
)

__all__ = ["FlopCount", "LoopFootprint", "count_flops", "loop_footprints", "shape_env"]

#: the most loop iterations :func:`count_flops` enumerates before it estimates
ENUMERATION_LIMIT = 1 << 20

_FLOAT_ARITH = (Add, Sub, Mul, Div, Min, Max)


@dataclass(frozen=True)
class FlopCount:
    """What :func:`count_flops` found: ``flops`` (an int), whether it is ``exact`` (else
    an upper bound: see the module) and the extern functions it could not see into."""

    flops: int
    exact: bool = True
    opaque: Tuple[str, ...] = ()


def _is_float(dtype) -> bool:
    try:
        return _dt.is_float(dtype)
    except Exception:  # noqa: BLE001 - "void", "handle": not a float
        return False


def expr_flops(e) -> int:
    """The floating-point operations one evaluation of ``e`` executes (see the module)."""
    t = type(e)
    if t is BufferLoad or t is Const or t is Var:
        return 0
    if isinstance(e, BinaryOp):
        own = 1 if t in _FLOAT_ARITH and _is_float(e.dtype) else 0
        return own + expr_flops(e.a) + expr_flops(e.b)
    if isinstance(e, CmpOp):
        return (1 if _is_float(e.a.dtype) else 0) + expr_flops(e.a) + expr_flops(e.b)
    if t is Call:
        own = 0
        if _is_float(e.dtype):
            own = 2 if e.op == "fma" else 1
        return own + sum(expr_flops(a) for a in e.args)
    if t is Select:
        return expr_flops(e.cond) + expr_flops(e.true_value) + expr_flops(e.false_value)
    if t is Cast:
        return expr_flops(e.value)
    if t is Let:
        return expr_flops(e.value) + expr_flops(e.body)
    # And, Or, Not and anything else: what their operands compute
    return sum(expr_flops(getattr(e, f)) for f in ("a", "b") if hasattr(e, f))


def _has_load(e) -> bool:
    return bool(collect(e, lambda n: isinstance(n, BufferLoad)))


def _stmt_children(s) -> list:
    if isinstance(s, SeqStmt):
        return list(s.seq)
    if isinstance(s, IfThenElse):
        return [s.then_case] + ([s.else_case] if s.else_case is not None else [])
    if isinstance(s, TensorIntrinCall):
        return [s.fallback]
    body = getattr(s, "body", None)
    return [body] if body is not None and not isinstance(s, (BufferStore, Evaluate)) else []


class _FlopCounter:
    def __init__(self, env: Dict[Var, int]):
        self.env = dict(env)
        self.exact = True
        self.opaque: List[str] = []
        self._ctrl: dict = {}
        self._memo: dict = {}
        self.steps = 0

    def ctrl(self, s) -> frozenset:
        """The variables the count of ``s`` depends on (loop bounds, guards, lets)."""
        key = id(s)
        got = self._ctrl.get(key)
        if got is not None:
            return got[1]
        out = set()
        if isinstance(s, For):
            out |= set(free_vars(s.min)) | set(free_vars(s.extent))
            out |= self.ctrl(s.body) - {s.var}
        elif isinstance(s, IfThenElse):
            if not _has_load(s.cond):
                out |= set(free_vars(s.cond))
            for c in _stmt_children(s):
                out |= self.ctrl(c)
        elif isinstance(s, LetStmt):
            inner = self.ctrl(s.body)
            if s.var in inner and not _has_load(s.value):
                out |= set(free_vars(s.value))
            out |= inner - {s.var}
        else:
            for c in _stmt_children(s):
                out |= self.ctrl(c)
        res = frozenset(out)
        self._ctrl[key] = (s, res)
        return res

    def _eval(self, e, env) -> Optional[int]:
        if _has_load(e) or any(v not in env for v in free_vars(e)):
            return None
        return eval_host_expr(e, env)

    def count(self, s, env) -> int:
        cv = self.ctrl(s)
        key = (id(s), tuple(sorted(((v.name, id(v), env.get(v)) for v in cv),
                                   key=lambda x: (x[0], x[1]))))
        got = self._memo.get(key)
        if got is not None:
            return got
        n = self._count(s, env)
        self._memo[key] = n
        return n

    def _count(self, s, env) -> int:
        if isinstance(s, BufferStore):
            return expr_flops(s.value) + sum(expr_flops(i) for i in s.indices)
        if isinstance(s, Evaluate):
            return expr_flops(s.value)
        if isinstance(s, (Prefetch,)):
            return 0
        if isinstance(s, ExternCall):
            if s.name not in self.opaque:
                self.opaque.append(s.name)
            return 0
        if isinstance(s, For):
            mn, ext = self._eval(s.min, env), self._eval(s.extent, env)
            if mn is None or ext is None:
                self.exact = False
                missing = sorted({v.name for v in free_vars(s.extent) if v not in env})
                raise _Unknown(s.var.name, missing)
            ext = max(0, int(ext))
            if s.var not in self.ctrl(s.body):
                return ext * self.count(s.body, env) if ext else 0
            if self.steps + ext > ENUMERATION_LIMIT:
                self.exact = False
                inner = dict(env)
                inner[s.var] = int(mn)
                return ext * self.count(s.body, inner)
            self.steps += ext
            total = 0
            inner = dict(env)
            for v in range(int(mn), int(mn) + ext):
                inner[s.var] = v
                total += self.count(s.body, inner)
            return total
        if isinstance(s, IfThenElse):
            own = expr_flops(s.cond)
            c = self._eval(s.cond, env)
            if c is None:
                self.exact = False
                return own + max(self.count(x, env) for x in _stmt_children(s))
            if c:
                return own + self.count(s.then_case, env)
            return own + (self.count(s.else_case, env) if s.else_case is not None else 0)
        if isinstance(s, LetStmt):
            v = self._eval(s.value, env)
            inner = env
            if v is not None:
                inner = dict(env)
                inner[s.var] = v
            return expr_flops(s.value) + self.count(s.body, inner)
        if isinstance(s, AssertStmt):
            return self.count(s.body, env)
        return sum(self.count(c, env) for c in _stmt_children(s))


class _Unknown(Exception):
    def __init__(self, loop, missing):
        super().__init__(loop, missing)
        self.loop, self.missing = loop, missing


def shape_env(func: PrimFunc, shapes) -> Dict[Var, int]:
    """The values of ``func``'s shape variables and scalar parameters: ``shapes`` gives,
    for each parameter in order, an array's shape (a tuple) or a scalar's value."""
    env: Dict[Var, int] = {}
    for p, got in zip(func.params, shapes):
        if isinstance(p, Buffer):
            for e, n in zip(p.shape, got):
                if isinstance(e, Var):
                    env[e] = int(n)
        elif isinstance(p, Var):
            env[p] = got
    return env


def count_flops(func: PrimFunc, env: Optional[Dict[Var, int]] = None) -> FlopCount:
    """The floating-point operations one call of ``func`` executes (see the module);
    ``env`` gives the values of its shape variables (:func:`shape_env`).  A loop bound
    that depends on a variable ``env`` lacks raises ``KeyError`` naming it."""
    c = _FlopCounter(env or {})
    try:
        n = c.count(func.body, c.env)
    except _Unknown as u:
        raise KeyError(f"the extent of loop {u.loop} depends on "
                       f"{', '.join(u.missing) or 'a value loaded at run time'}") from None
    return FlopCount(int(n), c.exact, tuple(c.opaque))


# ---------------------------------------------------------------------------------
# footprints


@dataclass
class LoopFootprint:
    """One loop of a lowered function and the data one complete run of it touches:
    ``buffers`` maps each buffer it reads or writes to the bytes of the box of elements
    it accesses (None where a bound is not known); ``bytes`` is their sum (None when any
    is unknown)."""

    loop: For
    depth: int
    buffers: Dict[str, Optional[int]] = field(default_factory=dict)

    @property
    def bytes(self) -> Optional[int]:
        vals = list(self.buffers.values())
        return None if any(v is None for v in vals) else sum(vals)


def _accesses(s):
    """(buffer, indices) of the loads and stores of ``s`` itself (not of nested
    statements)."""
    out = []
    exprs = []
    if isinstance(s, BufferStore):
        out.append((s.buffer, s.indices))
        exprs = [s.value, *s.indices]
    elif isinstance(s, Prefetch):   # brings the line into the cache: part of the footprint
        out.append((s.buffer, s.indices))
    elif isinstance(s, IfThenElse):
        exprs = [s.cond]
    elif isinstance(s, (Evaluate,)):
        exprs = [s.value]
    elif isinstance(s, LetStmt):
        exprs = [s.value]
    elif isinstance(s, For):
        exprs = [s.min, s.extent]
    for e in exprs:
        for ld in collect(e, lambda n: isinstance(n, BufferLoad)):
            out.append((ld.buffer, ld.indices))
    return out   # (a TensorIntrinCall's accesses are those of its fallback loop nest)


_EMPTY = object()


def _elem_bytes(dtype: str) -> int:
    try:
        return max(1, _dt.bits(dtype) // 8)
    except Exception:  # noqa: BLE001
        return 4


def loop_footprints(func: PrimFunc, env: Optional[Dict[Var, int]] = None) -> List[LoopFootprint]:
    """Every loop of ``func`` (pre-order) with its footprint (see the module); ``env``
    gives values of shape variables (without them a footprint that depends on one is
    None)."""
    env = dict(env or {})
    result: List[LoopFootprint] = []
    # per loop: buffer -> list of per-dim (lo, hi) hulls
    hulls: Dict[int, Dict[object, list]] = {}
    # the enclosing loops, outermost first: (For, pinned value of its var or None)
    stack: List[Tuple[For, Optional[int]]] = []

    def const(e, ranges):
        lo, hi = const_interval(e, ranges)
        return lo, hi

    def pinned_ranges(upto: int) -> Optional[dict]:
        ranges = {v: (val, val) for v, val in env.items() if isinstance(val, int)}
        for loop, val in stack[:upto]:
            if val is None:
                return None
            ranges[loop.var] = (val, val)
        return ranges

    def relax(ranges, j):
        """``ranges`` with the loops from level ``j`` inward over their ranges (None
        where a bound is not known, :data:`_EMPTY` where a loop does not run)."""
        r = dict(ranges)
        for loop, _ in stack[j:]:
            lo, _h = const(loop.min, r)
            _l, hi = const(loop.min + loop.extent - 1, r)
            if lo is None or hi is None:
                return None
            if hi < lo:
                return _EMPTY
            r[loop.var] = (lo, hi)
        return r

    def record(buf, indices):
        elem = _elem_bytes(buf.dtype)
        for j in range(len(stack)):
            base = pinned_ranges(j)
            r = relax(base, j) if base is not None else None
            if r is _EMPTY:
                continue
            box = None
            if r is not None:
                box = []
                for d, i in enumerate(indices):
                    lo, hi = const(i, r)
                    if lo is None or hi is None:
                        box = None
                        break
                    top = None
                    if d < len(buf.shape) and isinstance(buf.shape[d], Const):
                        top = int(buf.shape[d].value) - 1
                    elif d < len(buf.shape) and buf.shape[d] in env:
                        top = int(env[buf.shape[d]]) - 1
                    lo = max(lo, 0)
                    hi = hi if top is None else min(hi, top)
                    box.append((lo, hi))
            per = hulls.setdefault(id(stack[j][0]), {})
            cur = per.get(buf, "new")
            if box is None or cur is None:
                per[buf] = None
            elif cur == "new":
                per[buf] = box
            else:
                per[buf] = [(min(a[0], b[0]), max(a[1], b[1])) for a, b in zip(cur, box)]
            per.setdefault(("elem", buf), elem)

    def walk(s):
        if isinstance(s, For):
            fp = LoopFootprint(s, len(stack))
            result.append(fp)
            ranges = pinned_ranges(len(stack))
            val = None
            if ranges is not None:
                lo, _ = const(s.min, ranges)
                val = lo
            for buf, idx in _accesses(s):
                record(buf, idx)
            stack.append((s, val))
            walk(s.body)
            stack.pop()
            return
        for buf, idx in _accesses(s):
            record(buf, idx)
        for c in _stmt_children(s):
            walk(c)

    walk(func.body)
    for fp in result:
        per = hulls.get(id(fp.loop), {})
        for buf, box in per.items():
            if isinstance(buf, tuple):
                continue
            if box is None:
                fp.buffers[buf.name] = None
                continue
            n = per[("elem", buf)]
            for lo, hi in box:
                n *= max(0, hi - lo + 1)
            fp.buffers[buf.name] = n
    return result
