"""The index dtype rule: int32 index arithmetic only where it cannot wrap.

Index quantities (loop counters and bounds, buffer indices, the conditions that guard
them) are computed in the dtype of the expressions that make them: int32 by default
(the dtype of ``tc.var`` and of every extent int32 holds), int64 where a constant extent
or a variable is int64 -- an axis of ``tc.compute((2**31 + 5,), ...)``, a split or fuse
whose extents int32 cannot hold (``Stage.split``/``Stage.fuse`` choose), a
``tc.var("n", "int64")``.  int32 is faster (on GPUs especially) and is what ordinary
programs print; this pass makes it *correct*: every piece of int32 index arithmetic
whose value could leave int32 is either widened or checked.

Two's complement arithmetic is a ring: ``+``, ``-`` and ``*`` give the right int32
result whenever the final value fits, whatever the intermediate values do (a buffer
index is in bounds, so it fits).  What can go wrong is an order-dependent operation on
a value that wrapped: the operands of ``//``, ``%``, ``min``, ``max``, comparisons,
and casts to another type, and the end of a loop (``min + extent``).  For each of those
*sites* in loop bounds, buffer indices and conditions, the pass bounds the exact value
(the expression evaluated in int64, over the ranges of the enclosing loops):

* within int32: nothing to do (every ordinary program: its printed IR is unchanged);
* a constant bound outside int32 (``A[(i * 100000) // 3]`` with ``i < 50000``): the
  expression around the site is computed in int64 (``(int64(i)*100000i64) // 3i64``);
* a bound that depends on the function's parameters (symbolic extents, scalars) and that
  int32 does not hold for every value of their dtypes (``n*m`` for a fused loop over two
  int32 extents; ``n + 63`` in ``(n + 63) // 64``): a
  :class:`~tecomp.ir.stmt.ParamCheck` ``INT32_MIN <= bound <= INT32_MAX`` in
  ``func.attrs["param_checks"]``, which every runtime evaluates exactly when the kernel
  is called: sizes that would wrap are refused with an ArgumentError that says to
  declare the variables int64.

A value stored to a buffer keeps the wrapping arithmetic of its dtype (``B[i] = i*3``
of int32 wraps as the IR's semantics say); only the quantities above are index
arithmetic.
"""
from __future__ import annotations

from typing import Dict, Optional, Tuple

from ..errors import InternalError
from ..ir import dtype as _dt
from ..ir import op as _op
from ..ir.arith import Interval, eval_interval, const_interval, prove
from ..ir.expr import (
    LE, Add, And, Buffer, BufferLoad, Call, Cast, CmpOp, Const, Expr, FloorDiv, FloorMod, Let, Max, Min, Mul,
    Not, Or, Range, Select, Sub, TruncDiv, TruncMod, Var,
)
from ..ir.functor import Mutator, collect, free_vars
from ..ir.printer import to_str
from ..ir.stmt import Allocate, For, LetStmt, ParamCheck, PrimFunc

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1

#: operations whose int32 result is right whenever it fits (arithmetic modulo 2**32)
_RING = (Add, Sub, Mul)
#: operations whose result depends on the exact value of their int32 operands
_ORDERED = (FloorDiv, FloorMod, TruncDiv, TruncMod, Min, Max)
_BUILD = {Add: _op.add, Sub: _op.sub, Mul: _op.mul, FloorDiv: _op.floordiv,
          FloorMod: _op.floormod, TruncDiv: _op.truncdiv, TruncMod: _op.truncmod,
          Min: _op.minimum, Max: _op.maximum}
_NARROW_INTS = ("int8", "int16", "uint8")


def widened(e: Expr) -> Expr:
    """The int32 index expression ``e`` computed in int64: variables and loads are
    widened where they are read, constants retyped, a cast of an int64 value to int32
    dropped (the exact value, which is what an index means), each operation rebuilt."""
    t = type(e)
    if e.dtype == "int64":
        return e
    if e.dtype != "int32":
        return Cast(e, "int64") if _dt.is_int(e.dtype) else e
    if t is Const:
        return Const(int(e.value), "int64")
    if t in _BUILD:
        return _BUILD[t](widened(e.a), widened(e.b))
    if t is Cast and _dt.is_int(e.value.dtype) and _dt.bits(e.value.dtype) >= 32:
        return widened(e.value)
    if t is Select:
        return Select(e.cond, widened(e.true_value), widened(e.false_value), "int64")
    return Cast(e, "int64")


def _abs64(w: Expr) -> Expr:
    """``|w|`` of the int64 expression ``w``, as ``max(w, -w)``."""
    return _op.maximum(w, _op.sub(Const(0, "int64"), w))


def _uncast(e: Expr) -> Expr:
    while type(e) is Cast and _dt.is_int(e.dtype) and _dt.is_int(e.value.dtype):
        e = e.value
    return e


def _clamped_tail(lo: Expr, ext: Expr) -> bool:
    """Whether ``[lo, lo + ext)`` is ``[min(a, b), min(a, b) + max(b - a, 0))`` (loop
    partitioning's last part, its extent simplified from ``b - min(a, b)``; casts to
    wider ints aside), whose end is ``max(a, b)``: an int32 where ``a`` and ``b`` are
    (fuzz seed 3001590: an InternalError said such a loop ran past int32)."""
    lo, ext = _uncast(lo), _uncast(ext)
    if type(lo) is not Min or type(ext) is not Max or lo.a.dtype != "int32" or \
            lo.b.dtype != "int32":
        return False
    d, zero = _uncast(ext.a), _uncast(ext.b)
    if not (type(zero) is Const and zero.value == 0) or type(d) is not Sub:
        return False
    return _uncast(d.a) == lo.b and _uncast(d.b) == lo.a


def _is_leaf(e: Expr) -> bool:
    """An int expression whose value is what it is, in its dtype, as a load's: no index
    arithmetic in it to widen.  A cast from a float (or bool) is one: the cast gives a
    value of its dtype whatever its operand (a loop extent `int32(x)` of a float scalar
    `x` was once an InternalError, "does not fit int32")."""
    if type(e) is Cast:
        return not _dt.is_int(e.value.dtype)
    return not isinstance(e, _RING + _ORDERED + (Select, Let))


class _IndexDtype(Mutator):
    def __init__(self, func: PrimFunc):
        self.ranges: Dict[Var, object] = {}
        self.checks: Dict[Tuple[Expr, str], list] = {}
        # what the parameters may be: shape variables are sizes, scalars their dtype
        self.param_ranges: Dict[Var, object] = {}
        for p in func.params:
            if isinstance(p, Var) and _dt.is_int(p.dtype):
                lo, hi = _dt.int_limits(p.dtype)
                self.param_ranges[p] = Interval(lo, hi)
        for p in func.params:
            if isinstance(p, Buffer):
                for x in tuple(p.shape) + tuple(p.strides or ()):
                    for v in free_vars(x):
                        if v not in self.param_ranges and _dt.is_int(v.dtype):
                            self.param_ranges[v] = Interval(0, _dt.int_limits(v.dtype)[1])
        self._cache: dict = {}
        self._up_cache: dict = {}

    # -- statements that bind variables -------------------------------------------------
    def visit_For(self, s: For):
        lo, ext = self.visit(s.min), self.visit(s.extent)
        if s.var.dtype == "int32":
            lo = self.root(lo, lambda: f"the start of loop {s.var.name}")
            ext = self.root(ext, lambda: f"the extent of loop {s.var.name}")
            end = Add(lo, ext, "int32")   # (unfolded: its exact value is what matters)
            if not (isinstance(lo, Const) and lo.value == 0) and not _clamped_tail(lo, ext) and \
                    self.site(end, lambda: f"the end `{to_str(end)}` of loop {s.var.name}") != "ok":
                raise InternalError(
                    f"loop {s.var.name} runs past int32 ([{to_str(lo)}, {to_str(end)})) but its "
                    f"variable is int32: the schedule should have made it int64")
        old = self.ranges.get(s.var)
        self.ranges[s.var] = Range(lo, ext)
        body = self.visit(s.body)
        self._restore(s.var, old)
        if lo is s.min and ext is s.extent and body is s.body:
            return s
        return For(s.var, lo, ext, s.kind, body, s.thread_tag)

    def visit_LetStmt(self, s: LetStmt):
        return self._let(s, lambda value, body: LetStmt(s.var, value, body))

    def visit_Let(self, e: Let):
        return self._let(e, lambda value, body: Let(e.var, value, body, e.dtype))

    def _let(self, node, make):
        """A let statement or expression: its int32 value used whole, its variable over
        the value's range in ``body``."""
        value = self.visit(node.value)
        if value.dtype == "int32":
            value = self.root(value, lambda: f"the value of {node.var.name}")
        old = self._bind_let(node.var, value)
        body = self.visit(node.body)
        self._restore(node.var, old)
        if value is node.value and body is node.body:
            return node
        return make(value, body)

    def _bind_let(self, var: Var, value: Expr):
        old = self.ranges.get(var)
        if _dt.is_int(var.dtype) and _dt.is_int(value.dtype):
            itv = eval_interval(value, dict(self.ranges))
            self.ranges[var] = Interval(itv.lo, itv.hi)
        return old

    def _restore(self, var, old):
        if old is None:
            self.ranges.pop(var, None)
        else:
            self.ranges[var] = old

    # -- the contexts of index arithmetic ------------------------------------------------
    def visit_BufferLoad(self, e: BufferLoad):
        idx = tuple(self.index(self.visit(i)) for i in e.indices)
        if all(a is b for a, b in zip(idx, e.indices)):
            return e
        return BufferLoad(e.buffer, idx, e.dtype)

    def visit_BufferStore(self, s):
        value = self.visit(s.value)
        idx = tuple(self.index(self.visit(i)) for i in s.indices)
        if value is s.value and all(a is b for a, b in zip(idx, s.indices)):
            return s
        return type(s)(s.buffer, value, idx)

    def visit_Prefetch(self, s):
        idx = tuple(self.index(self.visit(i)) for i in s.indices)
        if all(a is b for a, b in zip(idx, s.indices)):
            return s
        return type(s)(s.buffer, idx, s.write, s.level)

    def visit_IfThenElse(self, s):
        cond = self.index(self.visit(s.cond))
        then = self.visit(s.then_case)
        other = self.visit(s.else_case) if s.else_case is not None else None
        if cond is s.cond and then is s.then_case and other is s.else_case:
            return s
        return type(s)(cond, then, other)

    def visit_Select(self, e: Select):
        cond = self.index(self.visit(e.cond))
        t, f = self.visit(e.true_value), self.visit(e.false_value)
        if cond is e.cond and t is e.true_value and f is e.false_value:
            return e
        return Select(cond, t, f, e.dtype)

    # -- one expression ------------------------------------------------------------------
    def index(self, e: Expr) -> Expr:
        """``e`` (an index or a condition) with every site that could wrap widened."""
        return self.tree(e)

    def root(self, e: Expr, what) -> Expr:
        """An int32 quantity used whole (a loop bound, a let value): its value must fit."""
        e = self.tree(e)
        if e.dtype == "int32" and not _is_leaf(e) and self.site(e, what) == "wide":
            w = widened(e)
            if self.fits(w):
                return Cast(w, "int32")
            raise InternalError(f"{what()} `{to_str(e)}` does not fit int32")
        return e

    def tree(self, e: Expr) -> Expr:
        t = type(e)
        if t in _RING or t in _ORDERED:
            a, b = self.tree(e.a), self.tree(e.b)
            wide = False
            if t in _ORDERED and e.dtype == "int32":
                wide = any(self.site(x, lambda: f"an operand of `{to_str(e)}`") == "wide"
                           for x in (a, b) if x.dtype == "int32" and not _is_leaf(x))
            if wide:
                return self.narrow(_BUILD[t](widened(a), widened(b)), e.dtype)
            if a is e.a and b is e.b:
                return e
            out = _BUILD[t](a, b)
            return self.narrow(out, e.dtype) if out.dtype != e.dtype else out
        if isinstance(e, CmpOp):
            a, b = self.tree(e.a), self.tree(e.b)
            if e.a.dtype == "int32" and any(
                    self.site(x, lambda: f"a side of the comparison `{to_str(e)}`") == "wide"
                    for x in (a, b) if x.dtype == "int32" and not _is_leaf(x)):
                return _op.compare(t, widened(a), widened(b))
            if a is e.a and b is e.b:
                return e
            return _op.compare(t, a, b)
        if t in (And, Or):
            a, b = self.tree(e.a), self.tree(e.b)
            return e if a is e.a and b is e.b else t(a, b)
        if t is Not:
            a = self.tree(e.a)
            return e if a is e.a else Not(a)
        if t is Cast:
            v = self.tree(e.value)
            if v.dtype == "int32" and e.dtype not in _NARROW_INTS and not _is_leaf(v) \
                    and self.site(v, lambda: f"the value cast in `{to_str(e)}`") == "wide":
                return Cast(widened(v), e.dtype)
            return e if v is e.value else Cast(v, e.dtype)
        if t is Select:
            tv, fv = self.tree(e.true_value), self.tree(e.false_value)
            if tv is e.true_value and fv is e.false_value:
                return e
            return _op.if_then_else(e.cond, tv, fv)
        return e

    def narrow(self, w: Expr, dtype: str) -> Expr:
        """The widened (int64) value ``w`` of an int32 operation, back as int32 where it
        provably fits, else left int64 (its consumers then compute in int64 too)."""
        if dtype == "int32" and self.fits(w):
            return Cast(w, "int32")
        return w

    def fits(self, w: Expr) -> bool:
        lo, hi = self.bounds(w)
        return isinstance(lo, int) and isinstance(hi, int) and INT32_MIN <= lo and hi <= INT32_MAX

    # -- the analysis ---------------------------------------------------------------------
    def bounds(self, w: Expr):
        """``(lo, hi)`` of the integer expression ``w`` over the enclosing loops: ints,
        Exprs in the parameters (exact: the analysis takes symbolic index arithmetic not
        to wrap), or None (unbounded, or a constant bound outside ``w``'s dtype: it may
        wrap)."""
        q = _quick(w, self.ranges)
        if q is not None:
            return q
        fv = free_vars(w)
        key = (w, tuple((v, self.ranges.get(v)) for v in fv))
        got = self._cache.get(key)
        if got is None:
            itv = eval_interval(w, {v: self.ranges[v] for v in fv if v in self.ranges})
            got = tuple(int(x.value) if isinstance(x, Const) else x for x in (itv.lo, itv.hi))
            self._cache[key] = got
        return got

    def site(self, x: Expr, what) -> str:
        """``"ok"`` where the exact value of the int32 expression ``x`` fits int32 (or is
        checked to when the kernel is called), ``"wide"`` where it must be computed in
        int64.  A select of int32 values fits where each value fits (one read from
        memory or a variable always does: an argmax's running index chosen against a
        loop counter), however wide the analysis' bound on ``|x|`` is (``|INT32_MIN|``);
        so does a ``min`` or ``max`` of int32 values (``min(i0, n)``, the start of a
        partitioned loop's last part: fuzz seed 3001590, once an InternalError)."""
        if type(x) is Select or type(x) in (Min, Max):
            vals = (x.true_value, x.false_value) if type(x) is Select else (x.a, x.b)
            verdicts = [self.site(v, what) for v in vals
                        if v.dtype == "int32" and not _is_leaf(v)]
            return "wide" if "wide" in verdicts else "ok"
        lo, hi = self.bounds(x)
        if lo is None or hi is None:
            # the interval analysis gives up (a division by a symbolic extent, as a fused
            # axis' decomposition has): a cruder bound on |x| may still do
            m = self.magnitude(x)
            return "wide" if m is None else self._side(m, x, what)
        verdicts = [self._side(b, x, what) for b in (lo, hi)]
        return "wide" if "wide" in verdicts else "ok"

    def magnitude(self, e: Expr) -> Optional[Expr]:
        """An int64 expression in the parameters (or a constant) at least ``|e|`` for every
        value of the enclosing loops, or None.

        Two bounds, the smaller of which is taken where neither settles it: the interval
        analysis' ``max(|lo|, |hi|)`` where it bounds ``e`` (if not an expression it is
        part of, e.g. the dividend of a division by a symbolic extent: far tighter than
        the rules, which take ``|a // 7|`` to be ``|a|``), and the rules
        (:meth:`_magnitude_rule`), which keep symbols where the analysis has only a
        type's limits (across a cast)."""
        if type(e) is Const:
            return Const(abs(int(e.value)), "int64") if _dt.is_int(e.dtype) else None
        tight = self._bounds_magnitude(e) if _dt.is_int(e.dtype) else None
        if tight is not None and self._at_most(tight, INT32_MAX):
            return tight   # (within int32 for every call: nothing to check)
        rule = self._magnitude_rule(e)
        if tight is None or rule is None:
            return rule if tight is None else tight
        return _op.minimum(tight, rule)

    def _at_most(self, bound: Expr, limit: int) -> bool:
        """Whether the int64 expression ``bound`` (in the parameters) is at most ``limit``
        for every call."""
        hi = const_interval(bound, self.param_ranges)[1]
        return hi is not None and hi <= limit

    def _fitting_magnitude(self, e: Expr, dtype: str) -> Optional[Expr]:
        """:meth:`magnitude` of ``e`` where it is at most ``dtype``'s largest value for
        every call (so a cast of ``e`` to ``dtype`` keeps its value), else None."""
        inner = self.magnitude(e)
        return inner if inner is not None and \
            self._at_most(inner, _dt.int_limits(dtype)[1]) else None

    def _upper(self, e: Expr) -> Optional[Expr]:
        """An int64 expression in the parameters at least ``e`` (not ``|e|``) for every
        value of the enclosing loops, or None: what a loop's extent is bounded by, where
        ``min(a, b)`` is at most either side (its magnitude may be the larger one's)."""
        key = (e, tuple((v, self.ranges.get(v)) for v in free_vars(e)))
        if key in self._up_cache:
            return self._up_cache[key]
        t, up = type(e), self._upper
        out = None
        if t is Const:
            out = Const(int(e.value), "int64") if _dt.is_int(e.dtype) else None
        elif t is Min:
            a, b = up(e.a), up(e.b)
            out = b if a is None else a if b is None else _op.minimum(a, b)
        elif t is Max or t is Add:
            a, b = up(e.a), up(e.b)
            if a is not None and b is not None:
                out = _op.maximum(a, b) if t is Max else _op.add(a, b)
        elif t is Sub:
            a, b = up(e.a), self.magnitude(e.b)
            if a is not None and b is not None:
                out = _op.add(a, b)
        elif t is Mul and (isinstance(e.a, Const) or isinstance(e.b, Const)):
            c, x = (e.a, e.b) if isinstance(e.a, Const) else (e.b, e.a)
            a = up(x) if int(c.value) >= 0 else None
            if a is not None:
                out = _op.mul(Const(int(c.value), "int64"), a)
        elif t is FloorDiv and isinstance(e.b, Const) and int(e.b.value) > 0:
            a = up(e.a)   # (floor division by a positive constant keeps the order)
            if a is not None:
                out = _op.floordiv(a, Const(int(e.b.value), "int64"))
        elif t is Cast and _dt.is_int(e.dtype) and _dt.is_int(e.value.dtype) and (
                _dt.bits(e.dtype) >= _dt.bits(e.value.dtype)
                or self._fitting_magnitude(e.value, e.dtype) is not None):
            out = up(e.value)   # (a narrowing cast whose value fits: the value)
        elif t is Var and e in self.param_ranges and e not in self.ranges:
            out = _op.widen(e, "int64")
        if out is None:
            out = self.magnitude(e)
        self._up_cache[key] = out
        return out

    def _magnitude_rule(self, e: Expr) -> Optional[Expr]:
        """A bound on ``|e|`` by rules: ``|a + b| <= |a| + |b|``, ``|a // b| <= |a|``,
        ``|a % b| <= |b|``, a loop counter at most ``|min| + extent``, a narrowing cast
        its value's bound where that fits the narrower type."""
        t = type(e)
        m = self.magnitude
        if t is Cast and _dt.is_int(e.dtype) and _dt.is_int(e.value.dtype) \
                and _dt.bits(e.dtype) < _dt.bits(e.value.dtype):
            inner = self._fitting_magnitude(e.value, e.dtype)
            if inner is not None:
                return inner
        if t is Var:
            r = self.ranges.get(e)
            if isinstance(r, Range):
                # the counter is min + j, 0 <= j < extent (no value where extent <= 0)
                a, b = m(r.min), self._upper(r.extent)
                return None if a is None or b is None else \
                    _op.add(a, _op.maximum(b, Const(0, "int64")))
            if r is not None:   # a let: the closed interval of its value
                a, b = (None if x is None else m(x) for x in (r.lo, r.hi))
                return None if a is None or b is None else _op.maximum(a, b)
            rng = self.param_ranges.get(e)
            if rng is None:
                return None
            v = _op.widen(e, "int64")
            return v if rng.lo_value == 0 else _abs64(v)
        if t in (Add, Sub, Mul, Min, Max, FloorMod, TruncMod, FloorDiv, TruncDiv):
            a, b = m(e.a), m(e.b)
            if t in (FloorDiv, TruncDiv):
                return a
            if a is None or b is None:
                return b if t is FloorMod else None
            if t in (Add, Sub):
                return _op.add(a, b)
            if t is Mul:
                return _op.mul(a, b)
            if t is FloorMod:
                return b
            return _op.minimum(a, b) if t is TruncMod else _op.maximum(a, b)
        if t is Select:
            a, b = m(e.true_value), m(e.false_value)
            return None if a is None or b is None else _op.maximum(a, b)
        if t is Cast and _dt.is_int(e.dtype) and _dt.is_int(e.value.dtype):
            if _dt.bits(e.dtype) >= _dt.bits(e.value.dtype):
                return m(e.value)
            return Const(max(abs(x) for x in _dt.int_limits(e.dtype)), "int64")
        if (t is BufferLoad or t is Call) and _dt.is_int(e.dtype) and e.dtype != "int64":
            return Const(max(abs(x) for x in _dt.int_limits(e.dtype)), "int64")
        return None

    def _bounds_magnitude(self, e: Expr) -> Optional[Expr]:
        """``max(|lo|, |hi|)`` of ``e``'s bounds as an int64 expression in the parameters,
        or None where a bound is missing or uses something the call does not give."""
        sides = []
        for b in self.bounds(e):
            if b is None:
                return None
            if isinstance(b, int):
                sides.append(Const(abs(b), "int64"))
                continue
            if not all(v in self.param_ranges for v in free_vars(b)):
                return None
            w = widened(b)
            lo = const_interval(w, self.param_ranges)[0]
            sides.append(w if lo is not None and lo >= 0 else _abs64(w))
        return _op.maximum(*sides)

    def _side(self, b, x: Expr, what) -> str:
        """The verdict on one bound ``b`` of ``x`` (or on a bound of ``|x|``)."""
        if isinstance(b, Const):
            b = int(b.value)
        if isinstance(b, int):
            return "ok" if INT32_MIN <= b <= INT32_MAX else "wide"
        if not all(v in self.param_ranges for v in free_vars(b)):
            return "wide"   # a bound in something the call does not give

        clo, chi = const_interval(widened(b), self.param_ranges)
        if clo is not None and chi is not None and INT32_MIN <= clo and chi <= INT32_MAX:
            return "ok"
        if not free_vars(b) or (clo is not None and clo > INT32_MAX) or \
                (chi is not None and chi < INT32_MIN):
            # a check no call could pass (``max(0, 14) + 2**31``: fuzz seed 3001971 refused
            # every call of a legal schedule): computed in int64 instead
            return "wide"
        use = f"`{to_str(x)}` ({what()})"
        uses = self.checks.setdefault(_key(b), [b, []])[1]
        if use not in uses and len(uses) < 4:
            uses.append(use)
        return "ok"

    def param_checks(self) -> tuple:
        """The checks, less those another implies: a bound that is never below int32 and
        provably at most another bound is checked by that one (they are evaluated at every
        call: the fewer, the cheaper)."""
        items = list(self.checks.values())
        wide = [widened(b) for b, _ in items]
        floor = [const_interval(w, self.param_ranges)[0] for w in wide]
        keep = []
        for i, (b, uses) in enumerate(items):
            low_ok = floor[i] is not None and floor[i] >= INT32_MIN
            if low_ok and any(
                    j != i and floor[j] is not None and floor[j] >= INT32_MIN
                    and prove(LE(wide[i], wide[j]), self.param_ranges)
                    and not (j > i and prove(LE(wide[j], wide[i]), self.param_ranges))
                    for j in range(len(items))):
                continue   # (of two equal bounds, the first is kept)
            keep.append(ParamCheck(b, INT32_MIN, tuple(uses), INT32_MAX))
        return tuple(keep)


def _key(e: Expr):
    return to_str(e)


def _quick(e: Expr, ranges) -> Optional[Tuple[int, int]]:
    """Constant bounds of ``e`` by plain interval arithmetic over constant loop ranges,
    or None (a symbolic range, an operation it does not follow): the fast answer for
    constant programs, checked before the precise analysis."""
    t = type(e)
    if t is Const:
        if not _dt.is_int(e.dtype):
            return None
        v = int(e.value)
        return v, v
    if t is Var:
        r = ranges.get(e)
        if isinstance(r, Range) and isinstance(r.min, Const) and isinstance(r.extent, Const):
            lo = int(r.min.value)
            return lo, lo + max(int(r.extent.value), 1) - 1
        return None
    if t is Cast:
        if not (_dt.is_int(e.dtype) and _dt.is_int(e.value.dtype)):
            return None
        q = _quick(e.value, ranges)
        lo, hi = _dt.int_limits(e.dtype)
        if q is None or q[0] < lo or q[1] > hi:
            return (lo, hi) if q is not None and _dt.bits(e.dtype) < 64 else None
        return q
    if t is BufferLoad or t is Call:
        return _dt.int_limits(e.dtype) if _dt.is_int(e.dtype) and e.dtype != "int64" else None
    if t in (Add, Sub, Mul, Min, Max):
        a, b = _quick(e.a, ranges), _quick(e.b, ranges)
        if a is None or b is None:
            return None
        if t is Add:
            return a[0] + b[0], a[1] + b[1]
        if t is Sub:
            return a[0] - b[1], a[1] - b[0]
        if t is Mul:
            c = [x * y for x in a for y in b]
            return min(c), max(c)
        if t is Min:
            return min(a[0], b[0]), min(a[1], b[1])
        return max(a[0], b[0]), max(a[1], b[1])
    if t in (FloorDiv, FloorMod) and isinstance(e.b, Const) and int(e.b.value) > 0:
        a, d = _quick(e.a, ranges), int(e.b.value)
        if a is None:
            return None
        if t is FloorDiv:
            return a[0] // d, a[1] // d
        return (a[0] % d, a[1] % d) if a[1] - a[0] < d and a[0] % d <= a[1] % d else (0, d - 1)
    if t is Select:
        a, b = _quick(e.true_value, ranges), _quick(e.false_value, ranges)
        if a is None or b is None:
            return None
        return min(a[0], b[0]), max(a[1], b[1])
    return None


def index_dtype_pass(func: PrimFunc) -> PrimFunc:
    """Widen the int32 index arithmetic of ``func`` that could wrap, and record the
    call-time checks of what depends on its parameters (see the module docstring)."""
    m = _IndexDtype(func)
    body = m.visit(func.body)
    checks = m.param_checks()
    if body is func.body and not checks:
        return func
    attrs = dict(func.attrs)
    if checks:
        old = tuple(attrs.get("param_checks", ()))
        known = {(to_str(pc.expr), pc.lower, pc.upper) for pc in old}
        attrs["param_checks"] = old + tuple(
            pc for pc in checks if (to_str(pc.expr), pc.lower, pc.upper) not in known)
    return PrimFunc(func.name, func.params, body, attrs)


# ---------------------------------------------------------------------------------------
# buffer offsets (the C-like targets flatten indices in the IR's dtypes)


def offset_dtype(buf: Buffer) -> str:
    """The dtype a C-like target computes ``buf``'s element offsets (``sum(index *
    stride)``) in: int64 where a shape or stride is int64, or where a constant layout spans
    more than int32 holds; else int32 -- for a symbolic layout, the call checks that the
    arrays it gets span at most 2**31 elements (:func:`offset_checks`)."""
    dims = tuple(buf.shape) + tuple(buf.strides or ())
    if any(getattr(x, "dtype", "int32") == "int64" for x in dims):
        return "int64"
    last = _last_offset(buf)
    if isinstance(last, Const) and int(last.value) > INT32_MAX:
        return "int64"
    return "int32"


def _last_offset(buf: Buffer) -> Expr:
    """The offset of ``buf``'s last element, ``sum((extent - 1) * stride)`` (exact for
    constants; negative for an empty buffer)."""
    out: Expr = Const(0, "int32")
    for ext, st in zip(buf.shape, buf.effective_strides()):
        out = _op.index_add(out, _op.index_mul(_op.index_sub(ext, Const(1, ext.dtype)), st))
    return out


def offset_checks(func: PrimFunc) -> tuple:
    """The call-time checks that each buffer parameter with a symbolic int32 layout
    spans at most 2**31 elements, so that a C-like target may flatten its indices in
    int32 (:func:`offset_dtype`)."""
    out = []
    params = {v for p in func.params for v in (
        [p] if isinstance(p, Var) else [x for e in p.shape for x in free_vars(e)])}
    workspaces = [s.buffer for s in collect(func.body, lambda n: isinstance(n, Allocate))
                  if s.buffer.scope == "global"
                  and all(v in params for e in s.buffer.shape for v in free_vars(e))]
    for p in list(func.params) + workspaces:
        if isinstance(p, Buffer) and offset_dtype(p) == "int32":
            last = _last_offset(p)
            if not isinstance(last, Const):
                out.append(ParamCheck(last, INT32_MIN, (
                    f"`{to_str(last)}` (the offset of the last element of {p.name})",),
                    INT32_MAX))
    return tuple(out)


def offset_checks_pass(func: PrimFunc) -> PrimFunc:
    """Add :func:`offset_checks` to ``func.attrs["param_checks"]`` (the CUDA targets)."""
    checks = offset_checks(func)
    old = tuple(func.attrs.get("param_checks", ()))
    known = {(to_str(pc.expr), pc.lower, pc.upper) for pc in old}
    new = tuple(pc for pc in checks if (to_str(pc.expr), pc.lower, pc.upper) not in known)
    if not new:
        return func
    return PrimFunc(func.name, func.params, func.body,
                    {**func.attrs, "param_checks": old + new})
