"""Integer set analysis: linear forms, constant bounds, symbolic intervals and proofs.

This module is the analysis half of tecomp's arithmetic (the rewriting half is
:mod:`tecomp.ir.simplify`).  It plays the role of TVM's ``arith.Analyzer``
(``ConstIntBound`` + ``IntSet``) and of Halide's ``Bounds``/``Interval``.

Public API
----------
* :class:`Interval` -- a closed integer interval ``[lo, hi]``; each side is a Python
  int, an ``Expr`` (a symbolic bound) or ``None`` (unbounded on that side).
* :func:`eval_interval` ``(expr, ranges, relax=None) -> Interval`` -- the values
  ``expr`` takes when the variables in ``relax`` (default: every key of ``ranges``)
  run over their ranges, with every other variable kept *symbolic* (a point).  The
  bounds are simplified Exprs (``Const`` for numbers) or ``None``.  Example: with
  ``ranges = {i_inner: Range(0, 8)}`` the interval of ``i_outer*8 + i_inner`` is
  ``[i_outer*8, i_outer*8 + 7]``.
* :func:`const_interval` ``(expr, ranges) -> (lo, hi)`` -- constant bounds (Python ints
  or ``None``) over every variable that has a range.
* :func:`prove` / :func:`disprove` ``(cond, ranges) -> bool`` -- True only when ``cond``
  is provably true (false) for *every* value of the variables in their ranges.

Ranges are given as ``{Var: Range(min, extent)}`` (the half-open ``[min, min+extent)``),
or ``{Var: Interval(lo, hi)}`` (closed); ``IterVar`` keys stand for their ``Var``.
Range bounds may themselves be symbolic (``j in [i*8, i*8 + 8)``).

Overflow policy (the semantics say integer arithmetic wraps)
------------------------------------------------------------
* Every bound is computed with exact Python integers and then checked against the
  dtype: a linear combination whose exact value may leave the dtype's range is known
  to *wrap*; its bound becomes the dtype's whole range and no rule that depends on
  order (division, modulo, comparison, min/max) looks inside it.  So with constant
  ranges (loop counters, int8/int16/uint8 values, loads) the analysis is exact.
* A ``Var`` of int32/int64 with *no* range is a symbolic index quantity (a shape
  parameter, an outer loop counter kept symbolic): index arithmetic on such symbols is
  assumed not to overflow -- the input's and the (equal-valued) expressions the
  simplifier derives from it -- as TVM and Halide assume for index arithmetic.  This
  is what makes ``i_outer*8 + i_inner < i_outer*8 + 8`` provable with ``i_outer``
  free.  A linear form whose constant or coefficients had to be reduced modulo
  ``2**bits`` while it was built (``z - (-2**31)``) is not the expression's integer
  value, so nothing is assumed about it.
* Narrow variables (int8, int16, uint8) are always bounded by their dtype.
* A value read from memory, an intrinsic call or a float->int cast ranges over its
  whole dtype.

Public results report a 32/64-bit bound that sits at the dtype's limit (a value that
may be anything of its type) as ``None``.

Linear forms
------------
:class:`LinForm` is the canonical form the simplifier works on: ``sum(coef*atom) +
const`` over ``Z / 2**bits`` (the ring the dtype wraps in, so building it is exact
under overflow).  Atoms are non-linear sub-expressions (variables, ``x // 8``,
``min(a, b)``, products of non-constants, loads ...) keyed structurally (products and
min/max commutatively); terms keep the order in which they first appeared, so every
result is deterministic.
"""
from __future__ import annotations

import math
from collections import Counter
from contextlib import contextmanager
from typing import Dict, Optional, Tuple

from ..errors import ExprError, InternalError
from . import dtype as _dt
from .functor import node_fields
from .expr import (
    Add, Call, Cast, Const, Expr, FloorDiv, FloorMod, IterVar, Let, Max, Min, Mul,
    Range, Select, Sub, TruncDiv, TruncMod, Var, as_expr,
)


class _Simplify:
    """The simplifier, which builds on this module's intervals: :mod:`.simplify` registers
    ``simplify`` and ``Simplifier`` here when it loads (``tecomp.ir`` imports it), so this
    module does not import it back."""

    __slots__ = ("simplify", "Simplifier")

    def __getattr__(self, name):
        raise InternalError(f"tecomp.ir.arith.SIMPLIFY.{name} is not registered: import "
                            f"tecomp.ir (it loads tecomp.ir.simplify); this is a tecomp bug")


#: see :class:`_Simplify`
SIMPLIFY = _Simplify()

__all__ = [
    "Interval", "LinForm", "Analyzer", "eval_interval", "const_interval", "prove", "disprove",
    "dtype_limits",
]

# ---------------------------------------------------------------------------------
# integers of a dtype


_LIMITS: Dict[str, Tuple[int, int]] = {}


def dtype_limits(dtype: str) -> Tuple[int, int]:
    """The smallest and largest value of an integer (or bool) dtype."""
    r = _LIMITS.get(dtype)
    if r is None:
        r = _LIMITS[dtype] = _dt.int_limits(dtype)
    return r


def wrap(v: int, dtype: str) -> int:
    """``v`` reduced into the range of ``dtype`` (two's complement wrap)."""
    lo, hi = dtype_limits(dtype)
    if lo <= v <= hi:
        return v
    m = hi - lo + 1
    return (v - lo) % m + lo


_HALF = {d: 1 << (_dt.bits(d) - 1) for d in ("int8", "int16", "int32", "int64", "uint8", "bool")}


def wrap_centered(v: int, dtype: str) -> int:
    """``v`` reduced modulo ``2**bits`` into the *signed* range (used for coefficients)."""
    half = _HALF[dtype]
    if -half <= v < half:
        return v
    return (v + half) % (half << 1) - half


_NARROW = {"bool": True, "int8": True, "int16": True, "uint8": True, "int32": False, "int64": False}


def is_narrow(dtype: str) -> bool:
    """int8/int16/uint8 (and bool): small enough that their whole range is a useful bound."""
    return _NARROW[dtype]


def _fit_wrapped(lo, hi, dtype: str):
    """Bounds of the *wrapped* value of an exact quantity in [lo, hi] (None: unknown)."""
    dlo, dhi = dtype_limits(dtype)
    if lo is None or hi is None:
        if (lo is not None and lo > dhi) or (hi is not None and hi < dlo):
            return dlo, dhi
        if is_narrow(dtype):
            if (lo is not None and lo < dlo) or (hi is not None and hi > dhi):
                return dlo, dhi
            return (dlo if lo is None else lo), (dhi if hi is None else hi)
        if (lo is not None and lo < dlo) or (hi is not None and hi > dhi):
            return dlo, dhi
        return lo, hi
    if dlo <= lo and hi <= dhi:
        return lo, hi
    m = dhi - dlo + 1
    k = (lo - dlo) // m
    if (hi - dlo) // m == k:  # the whole range wraps by the same amount
        return lo - k * m, hi - k * m
    return dlo, dhi


def _is_int(dtype: str) -> bool:
    return _dt.is_int(dtype)


def _int_value(c: Const) -> int:
    return int(c.value)


# ---------------------------------------------------------------------------------
# Interval


class Interval:
    """A closed integer interval ``[lo, hi]``.

    ``lo`` and ``hi`` are Python ints, Exprs (symbolic bounds, e.g. ``i_outer*8``) or
    ``None`` (unbounded on that side).  Results of :func:`eval_interval` use ``Const``
    for numbers.  Equality treats an int and an int ``Const`` of the same value alike.
    """

    __slots__ = ("lo", "hi")

    def __init__(self, lo=None, hi=None):
        object.__setattr__(self, "lo", lo)
        object.__setattr__(self, "hi", hi)

    def __setattr__(self, k, v):
        raise AttributeError("Interval is immutable")

    # constructors ------------------------------------------------------------
    @staticmethod
    def point(value) -> "Interval":
        return Interval(value, value)

    @staticmethod
    def everything() -> "Interval":
        return Interval(None, None)

    @staticmethod
    def from_range(r: Range) -> "Interval":
        """``[min, min + extent - 1]`` of a half-open Range."""
        simplify = SIMPLIFY.simplify
        mn = as_expr(r.min)
        hi = simplify(Sub(Add(mn, as_expr(r.extent, mn.dtype), mn.dtype), Const(1, mn.dtype), mn.dtype))
        return Interval(simplify(mn), hi)

    # queries -----------------------------------------------------------------
    @staticmethod
    def _num(x):
        if isinstance(x, bool):
            return int(x)
        if isinstance(x, int):
            return x
        if isinstance(x, Const) and (_is_int(x.dtype) or x.dtype == "bool"):
            return int(x.value)
        return None

    @property
    def lo_value(self) -> Optional[int]:
        """``lo`` as a Python int when it is a number, else None."""
        return self._num(self.lo)

    @property
    def hi_value(self) -> Optional[int]:
        return self._num(self.hi)

    @property
    def is_const(self) -> bool:
        """Both sides are numbers."""
        return self.lo_value is not None and self.hi_value is not None

    @property
    def is_bounded(self) -> bool:
        return self.lo is not None and self.hi is not None

    @property
    def is_point(self) -> bool:
        if self.lo is None or self.hi is None:
            return False
        a, b = self.lo_value, self.hi_value
        if a is not None or b is not None:
            return a == b
        return _same_expr(as_expr(self.lo), as_expr(self.hi))

    @property
    def extent(self):
        """``hi - lo + 1`` (an int when both sides are numbers, else a simplified Expr)."""
        if not self.is_bounded:
            return None
        a, b = self.lo_value, self.hi_value
        if a is not None and b is not None:
            return b - a + 1
        simplify = SIMPLIFY.simplify
        lo, hi = as_expr(self.lo), as_expr(self.hi)
        dt = hi.dtype if _is_int(hi.dtype) else lo.dtype
        lo, hi = as_expr(self.lo, dt), as_expr(self.hi, dt)
        return simplify(Add(Sub(hi, lo, dt), Const(1, dt), dt))

    def as_range(self) -> Range:
        """The half-open Range ``[lo, hi + 1)`` (a bounded interval only)."""
        if not self.is_bounded:
            raise ExprError(f"the interval {self} is unbounded and has no Range")
        ext = self.extent
        lo = as_expr(self.lo, "int32") if not isinstance(self.lo, Expr) else self.lo
        return Range(lo, as_expr(ext, lo.dtype) if not isinstance(ext, Expr) else ext)

    def contains(self, value: int) -> bool:
        """Whether the int ``value`` lies in a constant interval (unbounded sides count)."""
        a, b = self.lo_value, self.hi_value
        if (self.lo is not None and a is None) or (self.hi is not None and b is None):
            raise ExprError(f"contains() needs constant bounds, the interval is {self}")
        return (a is None or a <= value) and (b is None or value <= b)

    # value semantics -----------------------------------------------------------
    def _norm(self, x):
        n = self._num(x)
        return ("n", n) if n is not None else ("e", x)

    def __eq__(self, other):
        if not isinstance(other, Interval):
            return NotImplemented
        for a, b in ((self.lo, other.lo), (self.hi, other.hi)):
            na, nb = self._norm(a), self._norm(b)
            if na[0] != nb[0]:
                return False
            if na[0] == "n":
                if na[1] != nb[1]:
                    return False
            elif not (a is None and b is None) and (a is None or b is None or not _same_expr(a, b)):
                return False
        return True

    def __hash__(self):
        def h(x):
            n = self._num(x)
            return ("n", n) if n is not None else ("e", str(x))
        return hash((h(self.lo), h(self.hi)))

    def __repr__(self):
        def s(x, inf):
            return inf if x is None else str(x)
        return f"Interval[{s(self.lo, '-inf')}, {s(self.hi, '+inf')}]"

    __str__ = __repr__


def _same_expr(a, b) -> bool:
    if a is b:
        return True
    if not (isinstance(a, Expr) and isinstance(b, Expr)):
        return a == b
    an = Analyzer()
    return an.key(a) == an.key(b)


# ---------------------------------------------------------------------------------
# linear forms


class LinForm:
    """``sum(coef * atom) + const`` in the ring of ``dtype`` (coefficients wrap).

    ``terms`` maps an atom's structural key to ``(atom, coef)``; insertion order is
    first appearance, which makes rebuilt expressions deterministic.  Coefficients and
    the constant are kept as *signed* residues (``-1``, not ``255``, for uint8).
    ``math=True`` forms (used to compare exact values) do not wrap at all.

    ``wrapped`` records that building the form reduced a coefficient or the constant
    modulo ``2**bits`` (``z - (-2**31)`` is ``z - 2**31`` in int32): such a form equals
    the expression in the ring, but not as an integer, so nothing may be *assumed*
    about its exact value when its bounds are unknown.
    """

    __slots__ = ("dtype", "terms", "const", "math", "expr", "wrapped")

    def __init__(self, dtype: str, terms=None, const: int = 0, math: bool = False,
                 wrapped: bool = False):
        self.dtype = dtype
        self.terms = {} if terms is None else terms
        self.math = math
        if math:
            self.const = const
        else:
            self.const = wrap_centered(const, dtype)
            wrapped = wrapped or self.const != const
        self.wrapped = wrapped
        self.expr = None  # cached rebuilt Expr (set by the simplifier)

    # construction ----------------------------------------------------------------
    @staticmethod
    def combine(dtype: str, parts, math: bool = False) -> "LinForm":
        """``sum(sign * form for form, sign in parts)`` in one pass (long sums stay linear)."""
        terms: dict = {}
        const = 0
        wrapped = False
        for f, s in parts:
            const += s * f.const
            wrapped = wrapped or f.wrapped
            for k, (atom, c) in f.terms.items():
                old = terms.get(k)
                terms[k] = (atom, s * c) if old is None else (old[0], old[1] + s * c)
        clean = {}
        for k, (atom, c) in terms.items():
            if not math:
                w = wrap_centered(c, dtype)
                wrapped = wrapped or w != c
                c = w
            if c:
                clean[k] = (atom, c)
        return LinForm(dtype, clean, const, math, wrapped)

    def _w(self, v: int) -> int:
        return v if self.math else wrap_centered(v, self.dtype)

    @property
    def is_const(self) -> bool:
        return not self.terms

    @property
    def value(self) -> int:
        """The value of a constant form, in the dtype's range."""
        return wrap(self.const, self.dtype) if not self.math else self.const

    def single(self):
        """``(atom, coef)`` when the form is ``coef*atom`` exactly, else None."""
        if len(self.terms) == 1 and self.const == 0:
            return next(iter(self.terms.values()))
        return None

    def add(self, other: "LinForm", sign: int = 1) -> "LinForm":
        return LinForm.combine(self.dtype, [(self, 1), (other, sign)], self.math)

    def sub(self, other: "LinForm") -> "LinForm":
        return self.add(other, -1)

    def add_const(self, c: int) -> "LinForm":
        return LinForm(self.dtype, dict(self.terms), self.const + c, self.math, self.wrapped)

    def scale(self, c: int) -> "LinForm":
        wc = self._w(c)
        wrapped = self.wrapped or wc != c
        c = wc
        if c == 0:
            return LinForm(self.dtype, {}, 0, self.math)
        if c == 1:
            return self
        w = self._w
        terms = {}
        for k, (atom, a) in self.terms.items():
            nc = w(a * c)
            wrapped = wrapped or nc != a * c
            if nc != 0:
                terms[k] = (atom, nc)
        return LinForm(self.dtype, terms, self.const * c, self.math, wrapped)

    def as_math(self) -> "LinForm":
        return LinForm(self.dtype, dict(self.terms), self.const, True, self.wrapped)

    def as_ring(self) -> "LinForm":
        return LinForm(self.dtype, dict(self.terms), self.const, False, self.wrapped)

    def same(self, other: "LinForm") -> bool:
        """Structural equality of two forms (same terms, coefficients and constant)."""
        if self.const != other.const or len(self.terms) != len(other.terms):
            return False
        for k, (_, c) in self.terms.items():
            o = other.terms.get(k)
            if o is None or o[1] != c:
                return False
        return True

    def coef_gcd(self) -> int:
        g = 0
        for _, c in self.terms.values():
            g = math.gcd(g, c)
        return g

    def __repr__(self):
        parts = [f"{c}*{a}" for a, c in self.terms.values()]
        return f"LinForm<{self.dtype}>({' + '.join(parts) or '0'} + {self.const})"


# ---------------------------------------------------------------------------------
# the analyzer


def _as_var(v):
    if isinstance(v, IterVar):
        return v.var
    if isinstance(v, Var):
        return v
    raise ExprError(f"a range key must be a Var or an IterVar, got {v!r}")


_COMMUTATIVE = (Min, Max)


class Analyzer:
    """Variable ranges plus the structural and bound queries the simplifier builds on.

    * ``bind(var, rng)`` gives ``var`` a range (``Range``, ``Interval`` or a ``(lo, hi)``
      pair of inclusive bounds); use ``with analyzer.scope():`` to undo bindings.
    * ``key(expr)``: a structural key (an int, or the Var itself) equal for equal
      expressions, commutative for products and min/max, and exact for floats
      (``-0.0`` and ``0.0`` differ).
    * ``parse(expr) -> LinForm``: the linear structure of an int expression, no rewriting.
    * ``cbound(expr)``, ``form_bound(form)``: constant bounds of the *wrapped* value
      (ints, or None for an unknown side, see the module doc).
    * ``exact(form)``: the form rewritten (by a multiple of ``2**bits`` in its constant)
      so that its exact value *is* the value the dtype computes, or None when that
      cannot be shown (the value may wrap).
    """

    def __init__(self, ranges=None):
        self._intern: dict = {}
        self._keys: dict = {}  # id(expr) -> (expr, key)
        self._forms: dict = {}  # id(expr) -> (expr, LinForm)
        self._fvars: dict = {}  # id(expr) -> (expr, tuple of Vars)
        self._vr: dict = {}  # Var -> (lo Expr | None, hi Expr | None), inclusive
        self._vb: dict = {}  # Var -> constant bound (memo)
        self._cb: dict = {}  # id(expr) -> (expr, bound)
        self._let: dict = {}  # Let var -> constant bound, while inside the Let
        if ranges:
            for v, r in ranges.items():
                self.bind(_as_var(v), r)

    # ranges --------------------------------------------------------------------
    def _range_bounds(self, var: Var, r):
        dt = var.dtype
        if isinstance(r, Range):
            mn = as_expr(r.min, dt)
            ext = as_expr(r.extent, mn.dtype)
            lo = mn
            if isinstance(mn, Const) and isinstance(ext, Const):
                hi = Const(int(mn.value) + int(ext.value) - 1, mn.dtype)
            else:
                f = self.parse(mn).add(self.parse(ext)).add_const(-1)
                hi = self.rebuild(f)
            return lo, hi
        if isinstance(r, Interval):
            lo = None if r.lo is None else as_expr(r.lo, dt)
            hi = None if r.hi is None else as_expr(r.hi, dt)
            return lo, hi
        if isinstance(r, tuple) and len(r) == 2:
            lo = None if r[0] is None else as_expr(r[0], dt)
            hi = None if r[1] is None else as_expr(r[1], dt)
            return lo, hi
        raise ExprError(f"the range of {var.name} must be a Range, an Interval or a (lo, hi) pair, got {r!r}")

    def bind(self, var: Var, rng) -> None:
        """Give ``var`` the range ``rng`` (replacing any earlier one in this scope)."""
        var = _as_var(var)
        lo, hi = self._range_bounds(var, rng)
        self.bind_bounds(var, lo, hi)

    def bind_bounds(self, var: Var, lo: Optional[Expr], hi: Optional[Expr]) -> None:
        self._vr[var] = (lo, hi)
        self._vb.clear()
        self._cb.clear()

    def var_range(self, var: Var):
        """``(lo, hi)`` inclusive bound Exprs of ``var`` (None sides), or None if unranged."""
        return self._vr.get(var)

    @contextmanager
    def scope(self):
        """Bindings made inside the ``with`` block are undone at its end."""
        saved = (self._vr, self._vb, self._cb)
        self._vr, self._vb, self._cb = dict(self._vr), {}, {}
        try:
            yield self
        finally:
            self._vr, self._vb, self._cb = saved

    # structure -------------------------------------------------------------------
    def _intern_key(self, tup):
        k = self._intern.get(tup)
        if k is None:
            k = len(self._intern)
            self._intern[tup] = k
        return k

    def key(self, e):
        """A structural key of ``e`` (see the class doc)."""
        if type(e) is Var:
            return e
        ent = self._keys.get(id(e))
        if ent is not None and ent[0] is e:
            return ent[1]
        t = type(e)
        if t is Const:
            v = e.value
            if isinstance(v, float):
                tup = ("C", e.dtype, v.hex())
            else:
                tup = ("C", e.dtype, int(v) if not isinstance(v, bool) else v)
        elif t is Mul and _is_int(e.dtype):
            cnt = Counter(self.key(f) for f in self.factors(e))
            tup = ("*", e.dtype, frozenset(cnt.items()))
        elif t in _COMMUTATIVE and _is_int(e.dtype):
            tup = (t.__name__, e.dtype, frozenset((self.key(e.a), self.key(e.b))))
        else:
            parts = [t.__name__]
            for name in _fields(t):
                v = getattr(e, name)
                if isinstance(v, (Expr, Range)):
                    parts.append(self.key(v))
                elif isinstance(v, tuple):
                    parts.append(tuple(self.key(x) if isinstance(x, (Expr, Range)) else _hashable(x) for x in v))
                else:
                    parts.append(_hashable(v))
            tup = tuple(parts)
        k = self._intern_key(tup)
        self._keys[id(e)] = (e, k)
        return k

    def factors(self, e) -> list:
        """The factors of a chain of int multiplications (left to right)."""
        out, stack = [], [e]
        dt = e.dtype
        while stack:
            x = stack.pop()
            if type(x) is Mul and x.dtype == dt:
                stack.append(x.b)
                stack.append(x.a)
            else:
                out.append(x)
        return out

    def free_vars(self, e) -> tuple:
        """Vars ``e`` uses (first-use order; Let-bound ones included), memoized."""
        if type(e) is Var:
            return (e,)
        if type(e) is Const:
            return ()
        ent = self._fvars.get(id(e))
        if ent is not None and ent[0] is e:
            return ent[1]
        seen, out = set(), []
        for name in _fields(type(e)):
            v = getattr(e, name)
            kids = v if isinstance(v, tuple) else (v,)
            for x in kids:
                if isinstance(x, (Expr, Range)):
                    for w in self.free_vars(x):
                        if w not in seen:
                            seen.add(w)
                            out.append(w)
        r = tuple(out)
        self._fvars[id(e)] = (e, r)
        return r

    # linear forms ------------------------------------------------------------------
    def atom_form(self, atom: Expr, coef: int = 1, dtype: str | None = None) -> LinForm:
        dt = dtype or atom.dtype
        if type(atom) is Const:
            return LinForm(dt, {}, coef * _int_value(atom))
        c = wrap_centered(coef, dt)
        if c == 0:
            return LinForm(dt)
        return LinForm(dt, {self.key(atom): (atom, c)}, 0)

    def register(self, e: Expr, form: LinForm) -> None:
        """Record that ``parse(e)`` is ``form`` (for expressions rebuilt from forms)."""
        self._forms[id(e)] = (e, form)

    def parse(self, e: Expr) -> LinForm:
        """The linear structure of the int expression ``e`` (Add/Sub/Mul by constants)."""
        ent = self._forms.get(id(e))
        if ent is not None and ent[0] is e:
            return ent[1]
        dt = e.dtype
        if not _is_int(dt):
            raise ExprError(f"parse() needs an integer expression, got {dt} `{e}`")
        terms: dict = {}
        const = 0
        stack = [(e, 1)]
        key = self.key
        while stack:
            x, c = stack.pop()
            t = type(x)
            if t is Const:
                const += c * _int_value(x)
                continue
            if x.dtype == dt:
                if x is not e:
                    sub = self._forms.get(id(x))
                    if sub is not None and sub[0] is x:
                        f = sub[1]
                        const += c * f.const
                        for k, (atom, a) in f.terms.items():
                            old = terms.get(k)
                            terms[k] = (old[0] if old else atom, (old[1] if old else 0) + c * a)
                        continue
                if t is Add:
                    stack.append((x.b, c))
                    stack.append((x.a, c))
                    continue
                if t is Sub:
                    stack.append((x.b, -c))
                    stack.append((x.a, c))
                    continue
                if t is Mul:
                    if type(x.b) is Const:
                        stack.append((x.a, c * _int_value(x.b)))
                        continue
                    if type(x.a) is Const:
                        stack.append((x.b, c * _int_value(x.a)))
                        continue
            k = key(x)
            old = terms.get(k)
            terms[k] = (old[0] if old else x, (old[1] if old else 0) + c)
        clean = {}
        wrapped = False
        for k, (atom, a) in terms.items():
            w = wrap_centered(a, dt)
            wrapped = wrapped or w != a
            if w:
                clean[k] = (atom, w)
        f = LinForm(dt, clean, const, False, wrapped)
        self._forms[id(e)] = (e, f)
        return f

    def rebuild(self, f: LinForm) -> Expr:
        """The readable expression of a form: ``i*8 + j - k*2 + 3``.

        Terms are stably sorted by decreasing coefficient (so positive terms come first,
        in order of first appearance), the constant comes last; negative coefficients
        become subtractions.  The result is registered so that parsing it again is free.
        """
        if f.expr is not None:
            return f.expr
        dt = f.dtype
        if f.math:
            f = f.as_ring()
        lo_dt, _ = dtype_limits(dt)
        ring_min = -(1 << (_dt.bits(dt) - 1))

        def cst(v):
            return Const(wrap(v, dt), dt)

        def term(atom, c):
            return atom if c == 1 else Mul(atom, cst(c), dt)

        if not f.terms:
            e = cst(f.const)
        else:
            items = sorted(f.terms.values(), key=lambda ac: -ac[1])
            atom, c = items[0]
            k = f.const
            if c > 0 or c == ring_min:
                acc = term(atom, c)
                rest = items[1:]
            elif k > 0:
                acc = cst(k)
                k = 0
                rest = items
            else:
                acc = Sub(Const(0, dt), term(atom, -c), dt)  # prints as -x, -(x*4)
                rest = items[1:]
            for atom, c in rest:
                if c > 0 or c == ring_min:
                    acc = Add(acc, term(atom, c), dt)
                else:
                    acc = Sub(acc, term(atom, -c), dt)
            if k > 0 or k == ring_min:
                acc = Add(acc, cst(k), dt)
            elif k < 0:
                acc = Sub(acc, cst(-k), dt)
            e = acc
        f.expr = e
        if not f.math:
            self._forms[id(e)] = (e, f)
        return e

    # constant bounds ---------------------------------------------------------------
    def var_bound(self, v: Var):
        r = self._let.get(v)
        if r is not None:
            return r
        r = self._vb.get(v)
        if r is not None:
            return r
        dt = v.dtype
        if not _is_int(dt):
            return (0, 1) if dt == "bool" else (None, None)
        rng = self._vr.get(v)
        lo = hi = None
        if rng is not None:
            self._vb[v] = (None, None)  # cycle guard
            if rng[0] is not None:
                lo = self.cbound(rng[0])[0]
            if rng[1] is not None:
                hi = self.cbound(rng[1])[1]
        dlo, dhi = dtype_limits(dt)
        if lo is not None:
            lo = max(lo, dlo)
        elif is_narrow(dt):
            lo = dlo
        if hi is not None:
            hi = min(hi, dhi)
        elif is_narrow(dt):
            hi = dhi
        r = (lo, hi)
        self._vb[v] = r
        return r

    def cbound(self, e: Expr):
        """Constant bounds ``(lo, hi)`` of the value ``e`` computes (None: unknown side)."""
        t = type(e)
        if t is Const:
            v = e.value
            if isinstance(v, float):
                return (None, None)
            return (int(v), int(v))
        if t is Var:
            return self.var_bound(e)
        ent = self._cb.get(id(e))
        if ent is not None and ent[0] is e:
            return ent[1]
        dt = e.dtype
        if dt == "bool":
            r = (0, 1)
        elif not _is_int(dt):
            r = (None, None)
        elif t is Add or t is Sub or (t is Mul and (type(e.a) is Const or type(e.b) is Const)):
            r = self.form_bound(self.parse(e))
        else:
            r = self.atom_bound(e)
        self._cb[id(e)] = (e, r)
        return r

    def form_mbound(self, f: LinForm):
        """Bounds of the *exact* (unwrapped) value of ``sum(coef*atom) + const``."""
        lo = hi = f.const
        for atom, c in f.terms.values():
            alo, ahi = self.atom_bound(atom) if type(atom) is not Var else self.var_bound(atom)
            if c > 0:
                lo = None if (lo is None or alo is None) else lo + c * alo
                hi = None if (hi is None or ahi is None) else hi + c * ahi
            else:
                lo = None if (lo is None or ahi is None) else lo + c * ahi
                hi = None if (hi is None or alo is None) else hi + c * alo
            if lo is None and hi is None:
                break
        return lo, hi

    def form_bound(self, f: LinForm):
        """Bounds of the value the dtype computes for ``f`` (wrapping taken into account)."""
        lo, hi = self.form_mbound(f)
        if f.math:
            return lo, hi
        if (lo is None or hi is None) and not self._representable(f):
            return dtype_limits(f.dtype)  # not the input's integer value: assume nothing
        return _fit_wrapped(lo, hi, f.dtype)

    @staticmethod
    def _representable(f: LinForm) -> bool:
        """The constant and coefficients of ``f`` are values of its dtype (a form with an
        unknown bound may only be assumed not to overflow under that condition)."""
        dlo, dhi = dtype_limits(f.dtype) if not _dt.is_uint(f.dtype) else (-_HALF[f.dtype], _HALF[f.dtype] - 1)
        if f.wrapped or not dlo <= f.const <= dhi:
            return False
        return all(dlo <= c <= dhi for _, c in f.terms.values())

    def fits(self, f: LinForm) -> bool:
        """The exact value of ``f`` provably stays in its dtype (or depends on free
        symbols, and ``f`` is made of representable coefficients that did not wrap)."""
        lo, hi = self.form_mbound(f)
        dlo, dhi = dtype_limits(f.dtype)
        if (lo is None or hi is None) and not self._representable(f):
            return False
        return not ((lo is not None and lo < dlo) or (hi is not None and hi > dhi))

    def exact(self, f: LinForm) -> Optional[LinForm]:
        """``f`` with its constant shifted by a multiple of ``2**bits`` so that its exact
        value equals the computed (wrapped) value; None when the value may wrap."""
        lo, hi = self.form_mbound(f)
        dlo, dhi = dtype_limits(f.dtype)
        if (lo is None or hi is None) and not self._representable(f):
            return None  # nothing to assume: the form is not the expression's integer value
        if (lo is None or lo >= dlo) and (hi is None or hi <= dhi):
            return f.as_math()
        if lo is None or hi is None:
            return None
        m = dhi - dlo + 1
        k = (lo - dlo) // m
        if (hi - dlo) // m != k:
            return None
        return LinForm(f.dtype, dict(f.terms), f.const - k * m, True)

    def product_fits(self, e: Expr) -> bool:
        """The product chain ``e`` provably never wraps (or depends on free symbols)."""
        dt = e.dtype
        dlo, dhi = dtype_limits(dt)
        fs = self.factors(e)
        lo, hi = self.cbound(fs[0])
        for f in fs[1:]:
            lo, hi = _mul_bounds((lo, hi), self.cbound(f))
            if (lo is not None and lo < dlo) or (hi is not None and hi > dhi):
                return False
        return True

    def atom_bound(self, e: Expr):
        """Constant bounds of a non-linear int expression (an atom of a form)."""
        t = type(e)
        if t is Var:
            return self.var_bound(e)
        if t is Const:
            return self.cbound(e)
        ent = self._cb.get(id(e))
        if ent is not None and ent[0] is e:
            return ent[1]
        self._cb[id(e)] = (e, (None, None)) if not is_narrow(e.dtype) else (e, dtype_limits(e.dtype))
        r = self._atom_bound(e)
        self._cb[id(e)] = (e, r)
        return r

    def _atom_bound(self, e: Expr):
        t = type(e)
        dt = e.dtype
        if dt == "bool":
            return (0, 1)
        if not _is_int(dt):
            return (None, None)
        dlo, dhi = dtype_limits(dt)
        full = (dlo, dhi)
        if t is Add or t is Sub:
            return self.form_bound(self.parse(e))
        if t is Mul:
            fs = self.factors(e)
            lo, hi = self.cbound(fs[0])
            for f in fs[1:]:
                lo, hi = _fit_wrapped(*_mul_bounds((lo, hi), self.cbound(f)), dt)
            return _fit_wrapped(lo, hi, dt)
        if t in (FloorDiv, TruncDiv, FloorMod, TruncMod):
            a, b = self.cbound(e.a), self.cbound(e.b)
            if t is FloorDiv or t is TruncDiv:
                r = _div_bounds(a, b, t is TruncDiv)
            else:
                r = _mod_bounds(a, b, t is TruncMod)
            if r is None:  # the divisor may be 0 (undefined): nothing is known
                return full if is_narrow(dt) else (None, None)
            return _fit_wrapped(r[0], r[1], dt)
        if t is Min or t is Max:
            (alo, ahi), (blo, bhi) = self.cbound(e.a), self.cbound(e.b)
            if t is Min:
                lo = None if alo is None or blo is None else min(alo, blo)
                hi = bhi if ahi is None else (ahi if bhi is None else min(ahi, bhi))
            else:
                lo = blo if alo is None else (alo if blo is None else max(alo, blo))
                hi = None if ahi is None or bhi is None else max(ahi, bhi)
            return lo, hi
        if t is Select:
            c = e.cond
            if type(c) is Const:
                return self.cbound(e.true_value if c.value else e.false_value)
            (alo, ahi), (blo, bhi) = self.cbound(e.true_value), self.cbound(e.false_value)
            lo = None if alo is None or blo is None else min(alo, blo)
            hi = None if ahi is None or bhi is None else max(ahi, bhi)
            return lo, hi
        if t is Cast:
            src = e.value.dtype
            if src == "bool" or _is_int(src):
                lo, hi = self.cbound(e.value)
                slo, shi = dtype_limits(src)
                if dlo <= slo and shi <= dhi:
                    # a widening cast: the value is one of its source dtype's, whatever
                    # else is known (``int64(n)`` of an int32 n is at most 2**31 - 1)
                    lo = slo if lo is None else max(lo, slo)
                    hi = shi if hi is None else min(hi, shi)
                if lo is not None and hi is not None and dlo <= lo and hi <= dhi:
                    return lo, hi
                if lo is None or hi is None:
                    if is_narrow(dt):
                        return full
                    return (None if lo is None or lo < dlo else lo), (None if hi is None or hi > dhi else hi)
                return full
            return full
        if t is Call and e.op == "abs":
            lo, hi = self.cbound(e.args[0])
            if lo is None or hi is None:
                return (None, None) if not is_narrow(dt) else full
            if lo >= 0:
                return lo, hi
            if lo == dlo:
                return full
            if hi <= 0:
                return -hi, -lo
            return 0, max(-lo, hi)
        if t is Let:
            vb = self.cbound(e.value) if _is_int(e.value.dtype) or e.value.dtype == "bool" else (None, None)
            old = self._let.get(e.var)
            self._let[e.var] = vb
            try:
                return self.cbound(e.body)
            finally:
                if old is None:
                    del self._let[e.var]
                else:
                    self._let[e.var] = old
        return full


_fields = node_fields


def _hashable(v):
    try:
        hash(v)
        return v
    except TypeError:
        return ("id", id(v))


# ---------------------------------------------------------------------------------
# interval arithmetic on constant bounds (None = unknown side)


def _mul_bounds(a, b):
    (alo, ahi), (blo, bhi) = a, b
    if None not in (alo, ahi, blo, bhi):
        ps = (alo * blo, alo * bhi, ahi * blo, ahi * bhi)
        return min(ps), max(ps)
    # both non-negative: the product is monotone in each factor
    if alo is not None and blo is not None and alo >= 0 and blo >= 0:
        hi = None if ahi is None or bhi is None else ahi * bhi
        return alo * blo, hi
    if alo is not None and alo == ahi == 0 or blo is not None and blo == bhi == 0:
        return 0, 0
    return None, None


def _fdiv(a, b):
    return a // b


def _tdiv(a, b):
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def _neg(r):
    lo, hi = r
    return (None if hi is None else -hi), (None if lo is None else -lo)


def _union(r1, r2):
    if r1 is None or r2 is None:
        return None
    lo = None if r1[0] is None or r2[0] is None else min(r1[0], r2[0])
    hi = None if r1[1] is None or r2[1] is None else max(r1[1], r2[1])
    return lo, hi


def _div_bounds(a, b, trunc: bool):
    """Bounds of ``a / b`` (floor or trunc division), or None when the divisor is
    unknown.  A divisor range that spans 0 is split (division by 0 is undefined)."""
    (alo, ahi), (blo, bhi) = a, b
    if blo is not None and bhi is not None and blo <= 0 <= bhi:
        if blo == bhi:
            return None
        parts = [p for p in ((blo, -1), (1, bhi)) if p[0] <= p[1]]
        r = _div_bounds(a, parts[0], trunc)
        for p in parts[1:]:
            r = _union(r, _div_bounds(a, p, trunc))
        return r
    if bhi is not None and bhi < 0:  # x / d == (-x) / (-d) for both roundings
        return _div_bounds(_neg(a), _neg(b), trunc)
    if blo is None or blo <= 0:
        return None
    div = _tdiv if trunc else _fdiv
    # for a fixed numerator the quotient moves toward 0 (or -1) as the divisor grows
    if alo is None:
        lo = None
    elif alo >= 0:
        lo = 0 if bhi is None else div(alo, bhi)
    else:
        lo = div(alo, blo)
    if ahi is None:
        hi = None
    elif ahi >= 0:
        hi = div(ahi, blo)
    else:
        hi = (0 if trunc else -1) if bhi is None else div(ahi, bhi)
    return lo, hi


def _mod_bounds(a, b, trunc: bool):
    """Bounds of ``a % b`` (floor or trunc remainder), or None (divisor sign unknown)."""
    (alo, ahi), (blo, bhi) = a, b
    if blo is not None and bhi is not None and blo <= 0 <= bhi:
        if blo == bhi:
            return None
        parts = [p for p in ((blo, -1), (1, bhi)) if p[0] <= p[1]]
        r = _mod_bounds(a, parts[0], trunc)
        for p in parts[1:]:
            r = _union(r, _mod_bounds(a, p, trunc))
        return r
    if bhi is not None and bhi < 0:
        if trunc:  # the sign of the dividend; |b| in [-bhi, -blo]
            return _mod_bounds(a, _neg(b), True)
        r = _mod_bounds(_neg(a), _neg(b), False)  # x % d == -((-x) % (-d))
        return None if r is None else _neg(r)
    if blo is None or blo <= 0:
        return None
    m1 = None if bhi is None else bhi - 1  # the largest remainder magnitude
    if alo is not None and ahi is not None:
        if trunc and -blo < alo and ahi < blo:
            return alo, ahi
        if not trunc and blo == bhi and alo // blo == ahi // blo:
            return alo % blo, ahi % blo
    if alo is not None and alo >= 0:
        return 0, (m1 if ahi is None else (ahi if m1 is None else min(ahi, m1)))
    if trunc:
        if ahi is not None and ahi <= 0:
            return (None if m1 is None else -m1) if alo is None else (alo if m1 is None else max(alo, -m1)), 0
        return (None, None) if m1 is None else (-m1, m1)
    return 0, m1


# ---------------------------------------------------------------------------------
# public entry points


def _relax_set(ranges, relax):
    if relax is None:
        return {_as_var(v) for v in (ranges or {})}
    return {_as_var(v) for v in relax}


def _public_bound(v, dtype: str, side: int):
    """Report a 32/64-bit bound at the dtype's limit (anything of its type) as None."""
    if v is None:
        return None
    if not is_narrow(dtype) and v == dtype_limits(dtype)[side]:
        return None
    return v


def eval_interval(expr, ranges=None, relax=None) -> Interval:
    """The interval of values ``expr`` takes when the variables in ``relax`` (default:
    every key of ``ranges``) run over their ranges; other variables stay symbolic.

    ``ranges`` maps Vars to ``Range`` / ``Interval`` / ``(lo, hi)``; the ranges of
    variables that are not relaxed still help to simplify and to order the bounds.
    A variable in ``relax`` without a range is unbounded.  The bounds are simplified
    Exprs (``Const`` for numbers) or ``None`` when unbounded.  Bool expressions give
    ``[0, 1]`` (or a point when decided); a float expression gives a point when it
    folds to a constant and ``[None, None]`` otherwise.
    """
    Simplifier = SIMPLIFY.Simplifier
    e = as_expr(expr)
    sim = Simplifier(Analyzer(ranges))
    relaxed = _relax_set(ranges, relax)
    s = sim.visit(e)
    dt = s.dtype
    if not _is_int(dt):
        if type(s) is Const:
            if dt == "bool":
                return Interval.point(Const(int(bool(s.value)), "int32"))
            return Interval.point(s)
        if dt == "bool":
            return Interval(Const(0, "int32"), Const(1, "int32"))
        return Interval(None, None)
    lo, hi = sim.interval_of(s, relaxed)
    out = []
    for side, f in ((0, lo), (1, hi)):
        if f is None:
            out.append(None)
            continue
        if f.is_const:
            v = _public_bound(f.value, dt, side)
            out.append(None if v is None else Const(v, dt))
        else:
            out.append(sim.an.rebuild(f.as_ring()))
    return Interval(out[0], out[1])


def const_interval(expr, ranges=None) -> Tuple[Optional[int], Optional[int]]:
    """Constant bounds ``(lo, hi)`` of the int expression ``expr`` over every variable of
    ``ranges`` (None for a side that depends on an unranged variable)."""
    Simplifier = SIMPLIFY.Simplifier
    e = as_expr(expr)
    sim = Simplifier(Analyzer(ranges))
    s = sim.visit(e)
    dt = s.dtype
    if type(s) is Const:
        if isinstance(s.value, float):
            return (None, None)
        return int(s.value), int(s.value)
    if dt == "bool":
        return (0, 1)
    if not _is_int(dt):
        return (None, None)
    lo, hi = sim.best_bound(sim.lin(s))
    return _public_bound(lo, dt, 0), _public_bound(hi, dt, 1)


def prove(cond, ranges=None) -> bool:
    """True only when the bool expression ``cond`` holds for every value of the
    variables in their ``ranges`` (comparisons, And/Or/Not, with symbolic variables
    compared through the canonical form of their difference)."""
    Simplifier = SIMPLIFY.Simplifier
    c = as_expr(cond)
    if c.dtype != "bool":
        raise ExprError(f"prove() needs a bool condition, got {c.dtype} `{c}`")
    s = Simplifier(Analyzer(ranges)).visit(c)
    return type(s) is Const and s.value is True


def disprove(cond, ranges=None) -> bool:
    """True only when ``cond`` is false for every value of the variables in ``ranges``."""
    Simplifier = SIMPLIFY.Simplifier
    c = as_expr(cond)
    if c.dtype != "bool":
        raise ExprError(f"disprove() needs a bool condition, got {c.dtype} `{c}`")
    s = Simplifier(Analyzer(ranges)).visit(c)
    return type(s) is Const and s.value is False
