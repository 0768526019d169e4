"""Exact inversion of index maps: the gather form of a gradient.

A compute ``C[i] = f(..., X[h(i, r)], ...)`` (``i`` its axes, ``r`` its reduce axes) sends to
``X[p]`` the sum of its partial derivatives over every point ``u = (i, r)`` of its domain with
``h(u) = p``.  :func:`invert` turns that set into loops *per element of* ``X``:

    { u in domain : h(u) = p }  =  { u(p, f) : f in the box F, conditions(p, f) }

where the *free* variables ``f`` become the reduce axes of the gradient compute, ``u(p, f)``
is an exact integer expression and the conditions are exact (bounds, divisibility,
consistency).  No Jacobian and no loop over output x input for affine maps.

How it works
------------
1. **Affine forms.**  Every index component is parsed into an affine form over the domain
   variables, with integer constant coefficients (``Add``, ``Sub``, ``Mul`` by a constant,
   integer ``Cast``).  Expressions that do not use a domain variable (``n // 2`` of a shape
   variable ``n``, a scalar parameter) are *known* atoms.  ``L // a`` with ``L`` affine and
   ``a > 0`` a constant becomes a new integer unknown ``q`` with the exact constraint
   ``L = a*q + m``, ``0 <= m < a`` (``m`` is one more unknown); ``L % a`` is ``L - a*q``.
   ``(L // a) // b`` is canonicalised to ``L // (a*b)`` and equal ``L // a`` share one ``q``,
   so reshapes (``f // (H*W)``, ``(f // W) % H``, ``f % W``) invert to ``f = (H*W)*p1 + W*p2 +
   p3`` with no loop at all.  Anything else (``X[i*j]``, a data-dependent ``X[idx[i]]``) is
   *opaque*: it stays an equality condition ``h_k(u) == p_k`` and the variables it alone uses
   stay free (the documented, slower fallback: a loop over those variables' ranges).
2. **Integer linear algebra.**  The equations ``A u = p - b`` (index components and the
   ``L - a*q - m = 0`` constraints) are brought to reduced row echelon form over the
   rationals with the unknowns ordered by *decreasing extent*: the pivot columns are then a
   maximum-weight basis of the column matroid (greedy), so the variables left free are the
   ones with the smallest ranges (a 3x3 kernel's ``ky, kx``, not the 56x56 image), and the
   number of iterations per gradient element, the product of the free extents, is minimal.
   Each pivot unknown is ``u_s = (N_s(p, f)) / D_s`` with integer ``N_s`` and ``D_s > 0``
   (the common denominator, reduced by the gcd of ``N_s``'s coefficients).
3. **Exact conditions.**  ``N_s % D_s == 0`` (integrality: the stride conditions of a strided
   convolution), ``lo <= u_s <= hi`` for every solved domain variable and ``0 <= m < a`` for
   every solved remainder (the bounds), and ``rhs == 0`` for every zero row (consistency:
   ``A[i, i]`` gives ``p0 == p1``).  A condition is dropped only when interval arithmetic
   over the ranges of ``p`` (the tensor's shape) and of the free variables proves it.

The result is exact: the map ``f -> u(p, f)`` is a bijection from the free points meeting
the conditions onto the domain points with ``h(u) = p``, because the pivot block of the
system is non-singular.  Its cost is a loop over the free variables' box; with a stride
``s`` on a free variable only ``1/s`` of its iterations meet the divisibility condition.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Dict, List, Optional, Sequence

from ..errors import AutodiffError
from ..ir import dtype as _dt
from ..ir import op as _op
from ..ir.expr import (
    EQ, GE, GT, LE, LT, NE, Add, And, Cast, CmpOp, Const, Expr, FloorDiv, FloorMod, IterVar, Mul,
    ProducerLoad, Sub, Var,
)
from ..ir.functor import Mutator, collect, free_vars, substitute
from ..ir.printer import Printer
from ..te.tensor import reduce_axis

_BIG = 1 << 40  # the weight of a symbolic extent: larger than any constant extent


# ---------------------------------------------------------------------------------
# atoms and affine forms


class Known:
    """A quantity that is known inside the gradient compute: one of its axis variables,
    a scalar parameter, or any expression that uses no domain variable.  ``lo``/``hi`` are
    its inclusive range as affine forms over range-less knowns (``None``: unknown), and
    ``nonneg`` says it is known to be ``>= 0`` (shape extents)."""

    __slots__ = ("expr", "lo", "hi", "nonneg", "order", "_div_of", "divmod_of")

    def __init__(self, expr: Expr, order: int, nonneg: bool = False):
        self.expr = expr
        self.lo: Optional[Lin] = None
        self.hi: Optional[Lin] = None
        self.nonneg = nonneg
        self.order = order
        self._div_of = None
        self.divmod_of = None  # (base expr, modulus, base Lin) for R // m and R % m atoms

    def __repr__(self):
        return f"Known({self.expr})"


class Unknown:
    """An integer unknown of the system: a domain variable (``kind="var"``), the quotient
    ``q = L // a`` (``"q"``) or the remainder ``m = L - a*q`` (``"m"``)."""

    __slots__ = ("name", "kind", "var", "iv", "lo", "hi", "min_expr", "extent_expr",
                 "weight", "order", "_L", "_a")

    def __init__(self, name, kind, order, var=None, iv=None):
        self.name = name
        self.kind = kind
        self.var = var
        self.iv = iv
        self.order = order
        self.lo: Optional[Lin] = None
        self.hi: Optional[Lin] = None
        self.min_expr: Optional[Expr] = None
        self.extent_expr: Optional[Expr] = None
        self.weight = _BIG

    def __repr__(self):
        return f"Unknown({self.name}, {self.kind})"


class Lin:
    """An affine form ``sum(coef * key) + const`` with integer or Fraction coefficients;
    keys are :class:`Unknown` or :class:`Known` (insertion-ordered, so printing is stable)."""

    __slots__ = ("terms", "const")

    def __init__(self, terms=None, const=0):
        self.terms: Dict[object, Fraction] = {}
        if terms:
            for k, c in terms.items():
                if c != 0:
                    self.terms[k] = c
        self.const = const

    @staticmethod
    def of(key, coef=1) -> "Lin":
        return Lin({key: coef})

    def copy(self) -> "Lin":
        return Lin(dict(self.terms), self.const)

    def is_const(self) -> bool:
        return not self.terms

    def __add__(self, o: "Lin") -> "Lin":
        if not isinstance(o, Lin):
            return Lin(dict(self.terms), self.const + o)
        t = dict(self.terms)
        for k, c in o.terms.items():
            v = t.get(k, 0) + c
            if v == 0:
                t.pop(k, None)
            else:
                t[k] = v
        return Lin(t, self.const + o.const)

    def scale(self, s) -> "Lin":
        if s == 0:
            return Lin()
        return Lin({k: c * s for k, c in self.terms.items()}, self.const * s)

    def __sub__(self, o: "Lin") -> "Lin":
        return self + (o.scale(-1) if isinstance(o, Lin) else -o)

    def __neg__(self):
        return self.scale(-1)

    def coef(self, key):
        return self.terms.get(key, 0)

    def unknown_part(self) -> "Lin":
        return Lin({k: c for k, c in self.terms.items() if isinstance(k, Unknown)})

    def known_part(self) -> "Lin":
        return Lin({k: c for k, c in self.terms.items() if not isinstance(k, Unknown)}, self.const)

    def key(self) -> tuple:
        return (tuple(sorted(((k.order if isinstance(k, Unknown) else -1 - k.order), c)
                             for k, c in self.terms.items())), self.const)

    def denominator(self) -> int:
        d = 1
        for c in list(self.terms.values()) + [self.const]:
            d = d * Fraction(c).denominator // math.gcd(d, Fraction(c).denominator)
        return d

    def content(self) -> int:
        """gcd of the (integer) coefficients and constant."""
        g = 0
        for c in list(self.terms.values()) + [self.const]:
            g = math.gcd(g, int(c))
        return g

    def __repr__(self):
        parts = [f"{c}*{getattr(k, 'name', None) or k.expr}" for k, c in self.terms.items()]
        return " + ".join(parts + [str(self.const)])


# ---------------------------------------------------------------------------------
# parsing index expressions


class _NoNewAtom(Exception):
    pass


class _Parser:
    """Builds the unknowns, knowns and auxiliary equations of one inversion."""

    def __init__(self, domain: Sequence[IterVar]):
        self.frozen = False  # when True, parsing may not create new quotient atoms
        self.unknowns: List[Unknown] = []
        self.by_var: Dict[Var, Unknown] = {}
        self.knowns: Dict[Expr, Known] = {}
        self.qatoms: Dict[tuple, Unknown] = {}
        self.aux: List[Lin] = []  # each == 0
        self._korder = 0
        for iv in domain:
            u = self._new_unknown(iv.var.name, "var", var=iv.var, iv=iv)
            self.by_var[iv.var] = u
            lo = self.known_lin(iv.dom.min)
            ext = self.known_lin(iv.dom.extent, nonneg=True)
            u.lo, u.hi = lo, lo + ext - 1
            u.min_expr, u.extent_expr = iv.dom.min, iv.dom.extent
            if isinstance(iv.dom.extent, Const):
                u.weight = int(iv.dom.extent.value)

    def _new_unknown(self, name, kind, **kw) -> Unknown:
        u = Unknown(name, kind, len(self.unknowns), **kw)
        self.unknowns.append(u)
        return u

    def known(self, e: Expr, nonneg=False) -> Known:
        k = self.knowns.get(e)
        if k is None:
            k = Known(e, self._korder, nonneg)
            self._korder += 1
            self.knowns[e] = k
        elif nonneg:
            k.nonneg = True
        return k

    def known_lin(self, e: Expr, nonneg=False) -> "Lin":
        """An expression without domain variables as an affine form over knowns."""
        lin = self._lin(e, known_only=True)
        if lin is None:
            return Lin.of(self.known(e, nonneg))
        if nonneg and len(lin.terms) == 1 and lin.const == 0:
            (k, c), = lin.terms.items()
            if c == 1:
                k.nonneg = True
        return lin

    def _uses_domain(self, e: Expr) -> bool:
        return any(v in self.by_var for v in free_vars(e))

    def parse(self, e: Expr) -> Optional[Lin]:
        """The affine form of index ``e`` or ``None`` (opaque).  Atoms created while parsing
        an opaque expression are rolled back."""
        n_u, n_aux, q_keys = len(self.unknowns), len(self.aux), set(self.qatoms)
        try:
            lin = self._lin(e)
        except _NoNewAtom:
            lin = None
        if lin is None:
            for u in self.unknowns[n_u:]:
                self.by_var.pop(u.var, None)
            del self.unknowns[n_u:]
            del self.aux[n_aux:]
            for k in list(self.qatoms):
                if k not in q_keys:
                    del self.qatoms[k]
        return lin

    def _lin(self, e: Expr, known_only=False) -> Optional[Lin]:
        if isinstance(e, Const):
            if _dt.is_int(e.dtype):
                return Lin(const=int(e.value))
            return None
        if not _dt.is_int(e.dtype):
            return None
        if isinstance(e, Var):
            u = self.by_var.get(e)
            if u is not None:
                return None if known_only else Lin.of(u)
            return Lin.of(self.known(e))
        if not known_only and not self._uses_domain(e):
            lin = self._lin(e, known_only=True)
            return lin if lin is not None else Lin.of(self.known(e))
        t = type(e)
        if t is Add or t is Sub:
            a, b = self._lin(e.a, known_only), self._lin(e.b, known_only)
            if a is None or b is None:
                return None
            return a + b if t is Add else a - b
        if t is Mul:
            a, b = self._lin(e.a, known_only), self._lin(e.b, known_only)
            if a is None or b is None:
                return None
            if a.is_const():
                return b.scale(a.const)
            if b.is_const():
                return a.scale(b.const)
            return None
        if t is Cast:
            if _dt.is_int(e.value.dtype):
                return self._lin(e.value, known_only)
            return None
        if known_only:
            return None
        if t is FloorDiv or t is FloorMod:
            if not (isinstance(e.b, Const) and _dt.is_int(e.b.dtype) and e.b.value > 0):
                return None
            a = self._lin(e.a)
            if a is None:
                return None
            d = int(e.b.value)
            q = self._qatom(a, d)
            if t is FloorDiv:
                return Lin.of(q)
            return a - Lin.of(q, d)
        return None

    def _qatom(self, L: Lin, a: int) -> Unknown:
        # (L' // a') // a  ->  L' // (a' * a)
        if len(L.terms) == 1 and L.const == 0:
            (k, c), = L.terms.items()
            if c == 1 and isinstance(k, Unknown) and k.kind == "q":
                L, a = k._L, k._a * a  # type: ignore[attr-defined]
        key = (L.key(), a)
        q = self.qatoms.get(key)
        if q is not None:
            return q
        if self.frozen:
            raise _NoNewAtom()
        n = sum(1 for u in self.unknowns if u.kind == "q")
        q = self._new_unknown(f"q{n}", "q")
        m = self._new_unknown(f"m{n}", "m")
        q._L, q._a = L, a  # type: ignore[attr-defined]
        # L = a*q + m, 0 <= m < a
        self.aux.append(L - Lin.of(q, a) - Lin.of(m))
        m.lo, m.hi = Lin(const=0), Lin(const=a - 1)
        m.min_expr, m.extent_expr, m.weight = Const(0, "int32"), Const(a, "int32"), a
        lo, hi = interval(L)
        if lo is not None and hi is not None and lo.is_const() and hi.is_const():
            qlo, qhi = math.floor(Fraction(lo.const) / a), math.floor(Fraction(hi.const) / a)
            q.lo, q.hi = Lin(const=qlo), Lin(const=qhi)
            q.min_expr, q.extent_expr, q.weight = (Const(qlo, "int32"),
                                                   Const(qhi - qlo + 1, "int32"), qhi - qlo + 1)
        elif lo is not None and hi is not None:
            qlo_e = _op.floordiv(to_expr(lo), Const(a, "int32"))
            qhi_e = _op.floordiv(to_expr(hi), Const(a, "int32"))
            q.lo, q.hi = Lin.of(self.known(qlo_e)), Lin.of(self.known(qhi_e))
            q.min_expr = qlo_e
            q.extent_expr = _op.add(_op.sub(qhi_e, qlo_e), Const(1, "int32"))
        self.qatoms[key] = q
        return q


# ---------------------------------------------------------------------------------
# intervals and provability


def interval(lin: Lin):
    """Inclusive (lo, hi) of ``lin`` as affine forms over range-less knowns, or None."""
    lo, hi = Lin(const=lin.const), Lin(const=lin.const)
    for k, c in lin.terms.items():
        klo, khi = getattr(k, "lo", None), getattr(k, "hi", None)
        if klo is None or khi is None:
            if isinstance(k, Unknown):
                return None, None
            lo, hi = lo + Lin.of(k, c), hi + Lin.of(k, c)
            continue
        if c > 0:
            lo, hi = lo + klo.scale(c), hi + khi.scale(c)
        else:
            lo, hi = lo + khi.scale(c), hi + klo.scale(c)
    return lo, hi


def fold_divmod(lin: Lin) -> Lin:
    """Rewrite ``c*(m*(R // m) + R % m)`` inside ``lin`` as ``c*R`` (an identity interval
    arithmetic cannot see)."""
    for k, c in list(lin.terms.items()):
        if not (isinstance(k, Known) and k.divmod_of is not None
                and isinstance(k.expr, FloorMod) and k in lin.terms):
            continue
        e, m, base = k.divmod_of
        for q, cq in list(lin.terms.items()):
            if (isinstance(q, Known) and q.divmod_of is not None and isinstance(q.expr, FloorDiv)
                    and q.divmod_of[1] == m and q.divmod_of[0] == e and cq == c * m):
                lin = lin - Lin.of(k, c) - Lin.of(q, cq) + base.scale(c)
                break
    return lin


def provably_nonneg(lin: Lin) -> bool:
    """True when ``lin >= 0`` for every value of its variables within their ranges."""
    lin = fold_divmod(lin)
    lo, _ = interval(lin)
    if lo is None:
        return False
    if lo.const < 0:
        return False
    return all(c > 0 and isinstance(k, Known) and k.nonneg for k, c in lo.terms.items())


# ---------------------------------------------------------------------------------
# building expressions


def to_expr(lin: Lin, subst: Optional[dict] = None, dtype: str = "int32") -> Expr:
    """``lin`` (integer coefficients) as an Expr; Unknowns are looked up in ``subst``."""
    out: Optional[Expr] = None
    for k, c in lin.terms.items():
        c = int(c)
        x = subst[k] if isinstance(k, Unknown) else k.expr
        if out is None:
            out = x if c == 1 else (_op.binary("-", Const(0, x.dtype), x) if c == -1
                                    else _op.binary("*", x, c))
        elif c > 0:
            out = _op.binary("+", out, x if c == 1 else _op.binary("*", x, c))
        else:
            out = _op.binary("-", out, x if c == -1 else _op.binary("*", x, -c))
    if out is None:
        return Const(int(lin.const), dtype)
    if lin.const > 0:
        out = _op.binary("+", out, int(lin.const))
    elif lin.const < 0:
        out = _op.binary("-", out, -int(lin.const))
    return out


# ---------------------------------------------------------------------------------
# the result


@dataclass
class Inversion:
    """``{u : h(u) = p}`` as ``u = subst(p, axes)`` over the box of ``axes``, where every
    condition holds (made by :func:`invert`).

    Parameters
    ----------
    axes : list of IterVar
        The free variables, as new reduce axes (loop over them in the gradient).
    subst : dict
        Every domain variable -> its expression in the targets and ``axes``.
    conditions : list of Expr, optional
        Exact integer conditions (no loads, except for opaque components with a
        data-dependent index), none provably true.
    solved : list of str, optional
        The names of the unknowns solved exactly.
    opaque : list of int, optional
        The indices (positions in ``indices``) that are data-dependent or non-affine.
    """

    axes: List[IterVar]
    subst: Dict[Var, Expr]
    conditions: List[Expr] = field(default_factory=list)
    solved: List[str] = field(default_factory=list)
    opaque: List[int] = field(default_factory=list)
    _rewrite: object = None

    def apply(self, expr: Expr) -> Expr:
        """``expr`` (over the domain variables) at the solution.  Integer sub-expressions
        that are affine (the indices of reads) are rewritten through the exact affine
        solution, so a read ``X[2*y + ky]`` with ``y = p // 2``, ``ky = p % 2`` becomes
        ``X[p]``, not ``X[p // 2 * 2 + p % 2]``; everything else is substituted."""
        if self._rewrite is None:
            return substitute(expr, self.subst)
        return self._rewrite(expr)

    def describe(self) -> str:
        p = Printer()
        ax = ", ".join(f"{p.expr(a.var)} in [{p.expr(a.dom.min)}, {p.expr(a.dom.extent)})"
                       for a in self.axes)
        sub = ", ".join(f"{p.expr(v)} = {p.expr(e)}" for v, e in self.subst.items())
        cond = " && ".join(p.expr(c) for c in self.conditions) or "True"
        return f"sum over [{ax}] of {{{sub}}} where {cond}"


def invert(indices: Sequence[Expr], domain: Sequence[IterVar], targets: Sequence[Expr],
           target_extents: Sequence[Expr], guards: Sequence[Expr] = ()) -> Inversion:
    """Solve ``indices(u) == targets`` for ``u`` in ``domain``.

    ``guards`` are rewritten through the solution (affine comparisons exactly, so
    ``2*y + ky >= 1`` with ``y = (p - ky + 1) / 2`` becomes ``p + 1 >= 1`` and is proven
    and dropped) and returned among the conditions.

    Parameters
    ----------
    indices : sequence of Expr
        The index expressions of a read, functions of ``domain``.
    domain : sequence of IterVar
        The axes then reduce axes of the reading compute.
    targets : sequence of Expr
        One expression per index: the element read.
    target_extents : sequence of Expr
        ``targets[k]`` ranges over ``[0, target_extents[k])``.
    guards : sequence of Expr, optional
        Further conditions on ``u`` (say, the bounds test of a padding).

    Returns
    -------
    Inversion
        The solution (see the module doc for the method and its guarantees).
    """
    P = _Parser(domain)
    # targets are knowns with ranges [0, extent)
    tk = []
    for t, ext in zip(targets, target_extents):
        k = P.known(t)
        if isinstance(t, Var):
            k.lo = Lin(const=0)
            k.hi = P.known_lin(ext, nonneg=True) - 1
        tk.append(k)
    eqs: List[Lin] = []
    opaque: List[int] = []
    for d, h in enumerate(indices):
        lin = P.parse(h)
        if lin is None:
            opaque.append(d)
        else:
            eqs.append(lin - Lin.of(tk[d]))
    eqs += P.aux
    conditions: List[Expr] = []
    eqs = _digit_split(P, eqs, conditions)

    # columns: unknowns ordered by decreasing extent (ties: domain order)
    cols = sorted(P.unknowns, key=lambda u: (-u.weight, u.order))
    rows = [[Fraction(e.coef(u)) for u in cols] for e in eqs]
    rhs = [(-e.known_part()) for e in eqs]  # A u = rhs
    # reduced row echelon form
    pivots: List[int] = []  # column index per pivot row
    r = 0
    for ci in range(len(cols)):
        sel = next((ri for ri in range(r, len(rows)) if rows[ri][ci] != 0), None)
        if sel is None:
            continue
        rows[r], rows[sel] = rows[sel], rows[r]
        rhs[r], rhs[sel] = rhs[sel], rhs[r]
        pv = rows[r][ci]
        rows[r] = [x / pv for x in rows[r]]
        rhs[r] = rhs[r].scale(Fraction(1) / pv)
        for ri in range(len(rows)):
            if ri != r and rows[ri][ci] != 0:
                f = rows[ri][ci]
                rows[ri] = [x - f * y for x, y in zip(rows[ri], rows[r])]
                rhs[ri] = rhs[ri] - rhs[r].scale(f)
        pivots.append(ci)
        r += 1
    pivot_set = set(pivots)
    free = [u for u in P.unknowns if cols.index(u) not in pivot_set]  # domain order

    # solved unknowns: u = num / D
    solved: Dict[Unknown, tuple] = {}
    for ri, ci in enumerate(pivots):
        u = cols[ci]
        val = rhs[ri]
        for cj, coef in enumerate(rows[ri]):
            if cj != ci and coef != 0:
                val = val - Lin.of(cols[cj], coef)
        D = val.denominator()
        num = val.scale(D)
        g = math.gcd(num.content(), D)
        if g > 1:
            num, D = num.scale(Fraction(1, g)), D // g
        solved[u] = (_int_lin(num), D)

    # Strided lattices: when num = a*f + R with f the only free unknown in it (constant
    # range [lo, lo+E)) and gcd(a, D) = 1, then num % D == 0 <=> f == -R/a (mod D): iterate
    # only those f = lo + off + D*t, off = (-R*a^-1 - lo) mod D, t in [0, ceil(E/D)); then
    # u = (R + a*(lo + off)) / D + a*t exactly (R // D - t for the usual a = -1, lo = 0).
    lattice: Dict[Unknown, tuple] = {}
    for u, (num, D) in solved.items():
        if D == 1:
            continue
        fs = [k for k in num.terms if isinstance(k, Unknown)]
        if len(fs) != 1:
            continue
        f = fs[0]
        a = int(num.terms[f])
        if (f in lattice or math.gcd(a, D) != 1 or not isinstance(f.extent_expr, Const)
                or not isinstance(f.min_expr, Const) or f.extent_expr.value < 2):
            continue
        lattice[f] = (u, a, D)

    # values: every unknown as an exact integer affine form over knowns and loop unknowns,
    # or (num, D) for a solved unknown whose integrality stays a condition
    subst_u: Dict[Unknown, Expr] = {}
    axes: List[IterVar] = []
    value: Dict[Unknown, Lin] = {}
    for u in free:
        if u.min_expr is None:
            raise _unbounded(u)
        if u in lattice:
            su, a, D = lattice[u]
            num, _ = solved[su]
            lo, E = int(u.min_expr.value), int(u.extent_expr.value)
            R = Lin({k: c for k, c in num.terms.items() if k is not u}, num.const)
            off = _int_lin(R.scale(-pow(a, -1, D)) - lo)
            off = _known_div(P, Lin({k: c % D for k, c in off.terms.items()}, off.const % D),
                             D, mod=True)
            n_t = -(-E // D)
            fval = off + lo
            tl = Lin()
            if n_t > 1:
                t = P._new_unknown(f"{u.name}.t", "t")
                t.lo, t.hi = Lin(const=0), Lin(const=n_t - 1)
                iv = reduce_axis(n_t, name=t.name)
                axes.append(iv)
                subst_u[t] = iv.var
                tl = Lin.of(t)
                fval = fval + tl.scale(D)
            value[u] = fval
            if E % D != 0:
                conditions.append(_emit(fval, Lin(const=lo + E), LT, subst_u))
            if a == -1 and lo == 0:  # (R - R mod D) / D
                q = _known_div(P, R, D, mod=False)
            else:
                q = _known_div(P, R + (off + lo).scale(a), D, mod=False)
            value[su] = q + tl.scale(a)
            continue
        if isinstance(u.extent_expr, Const) and u.extent_expr.value == 1:
            value[u] = P.known_lin(u.min_expr)
            continue
        if isinstance(u.min_expr, Const) and u.min_expr.value == 0:
            iv = reduce_axis(u.extent_expr, name=u.name)
        else:
            iv = reduce_axis((u.min_expr, _op.add(u.min_expr, u.extent_expr)), name=u.name)
        axes.append(iv)
        subst_u[u] = iv.var
    for u, lin in value.items():
        subst_u[u] = to_expr(lin, subst_u)

    def through(L: Lin) -> Lin:
        """``L`` with the free unknowns that have values substituted."""
        out = Lin(const=L.const)
        for k, c in L.terms.items():
            out = out + (value[k].scale(c) if k in value else Lin.of(k, c))
        return out

    solved_desc: List[str] = []
    # consistency rows: rhs == 0, written as (positive terms) == (negative terms)
    for ri in range(len(pivots), len(rows)):
        lin = rhs[ri]
        lin = lin.scale(lin.denominator())
        if lin.is_const() and lin.const == 0:
            continue
        g = lin.content()
        if g > 1:
            lin = lin.scale(Fraction(1, g))
        lin = _int_lin(lin)
        pos = Lin({k: c for k, c in lin.terms.items() if c > 0}, max(lin.const, 0))
        neg = Lin({k: -c for k, c in lin.terms.items() if c < 0}, max(-lin.const, 0))
        conditions.append(_emit(pos, neg, EQ, subst_u))
    sol: Dict[Unknown, tuple] = {u: (lin, 1) for u, lin in value.items()}
    for u, (num, D) in solved.items():
        if u in value:
            continue
        num = through(num)
        num_e = to_expr(num, subst_u)
        if D == 1:
            subst_u[u] = num_e
        else:
            conditions.append(_op.compare(EQ, _op.binary("%", num_e, D), 0))
            subst_u[u] = _op.binary("//", num_e, D)
        sol[u] = (num, D)
    for u in solved:
        solved_desc.append(u.name)
    # bounds of solved domain variables and remainders, on the numerator:
    # N / D within [lo, hi]  <=>  D*lo <= N <= D*hi  when N % D == 0
    for u in solved:
        if u.kind == "q":
            continue
        num, D = sol[u]
        conditions.append(_emit(num, u.lo.scale(D), GE, subst_u))
        conditions.append(_emit(num, u.hi.scale(D) + 1, LT, subst_u))
    # opaque components: equality conditions after substitution

    var_subst = {u.var: subst_u[u] for u in P.unknowns if u.kind == "var"}
    for d in opaque:
        conditions.append(_op.compare(EQ, substitute(indices[d], var_subst), targets[d]))
    # the caller's conditions, rewritten through the exact solution when affine
    P.frozen = True
    for g in guards:
        for c in _conjuncts(g):
            conditions.append(_rewrite_guard(P, c, sol, subst_u, var_subst))
    conditions = _dedup(conditions)
    inv = Inversion(axes, var_subst, conditions, solved_desc, opaque)
    inv._rewrite = _IndexRewriter(P, sol, subst_u, var_subst).visit
    return inv


def _known_div(P: _Parser, R: Lin, G: int, mod: bool) -> Lin:
    """``R // G`` (or ``R % G``) of an affine form over knowns, as a new known atom (with
    its range when R's is known); composes ``(x // a) // G`` into ``x // (a*G)``."""
    if R.is_const():
        return Lin(const=(int(R.const) % G) if mod else (int(R.const) // G))
    base, div = R, 1
    if not mod and len(R.terms) == 1 and R.const == 0:
        (k, c), = R.terms.items()
        if c == 1 and isinstance(k, Known) and isinstance(k.expr, FloorDiv) \
                and getattr(k, "_div_of", None) is not None:
            base, div = k._div_of  # type: ignore[attr-defined]
    e = to_expr(base)
    g = Const(G * div, e.dtype)
    expr = _op.floormod(e, g) if mod else _op.floordiv(e, g)
    k = P.known(expr)
    k.divmod_of = (e, G * div, base)
    if mod:
        k.lo, k.hi, k.nonneg = Lin(const=0), Lin(const=G - 1), True
    else:
        k._div_of = (base, G * div)  # type: ignore[attr-defined]
        lo, hi = interval(base)
        if lo is not None and hi is not None and lo.is_const() and hi.is_const():
            k.lo = Lin(const=math.floor(Fraction(lo.const) / (G * div)))
            k.hi = Lin(const=math.floor(Fraction(hi.const) / (G * div)))
            k.nonneg = k.lo.const >= 0
    return Lin.of(k)


def _digit_split(P: _Parser, eqs: List[Lin], conditions: List[Expr]) -> List[Lin]:
    """Mixed-radix digits: in ``c_a*v_a + sum(c_k*v_k) = R`` (R known) where every other
    coefficient is a multiple of ``G`` with ``c_a | G`` and ``c_a * extent(v_a) <= G``, the
    range of ``v_a`` pins it: ``v_a = lo_a + ((R - c_a*lo_a) % G) // c_a`` exactly, and the rest
    is ``sum(c_k/G * v_k) = (R - c_a*lo_a) // G``.  Repeated, this inverts an unflatten
    ``X[c*12 + h*4 + w]`` into ``c = p // 12, h = (p // 4) % 3, w = p % 4`` with no loop."""
    out: List[Lin] = []
    work = list(eqs)
    while work:
        e = work.pop(0)
        un = e.unknown_part()
        done = False
        if len(un.terms) >= 2:
            for va, ca in sorted(un.terms.items(), key=lambda kc: (abs(kc[1]), kc[0].order)):
                if abs(ca) != min(abs(c) for c in un.terms.values()):
                    break
                if not (isinstance(va.extent_expr, Const) and va.lo is not None
                        and va.kind != "q"):
                    continue
                sgn = 1 if ca > 0 else -1
                ee = e.scale(sgn)
                ca = abs(ca)
                G = 0
                for k, c in ee.unknown_part().terms.items():
                    if k is not va:
                        G = math.gcd(G, int(c))
                ext = int(va.extent_expr.value)
                if G == 0 or G % ca != 0 or ca * ext > G:
                    continue
                R = -ee.known_part()
                Rp = R - va.lo.scale(ca)
                rem = _known_div(P, Rp, G, mod=True)
                if ca > 1:
                    conditions.append(_op.compare(EQ, _op.binary("%", to_expr(rem), ca), 0))
                    # v_a - lo_a = rem / ca: keep it integral by scaling the equation
                    out.append(Lin.of(va, ca) - va.lo.scale(ca) - rem)
                else:
                    out.append(Lin.of(va) - va.lo - rem)
                quo = _known_div(P, Rp, G, mod=False)
                rest = Lin({k: Fraction(c, 1) / G for k, c in ee.unknown_part().terms.items()
                            if k is not va}) - quo
                work.insert(0, rest)
                done = True
                break
        if not done:
            out.append(e)
    return out


def _int_lin(L: Lin) -> Lin:
    return Lin({k: int(c) for k, c in L.terms.items()}, int(L.const))


def _conjuncts(c: Expr) -> List[Expr]:
    if isinstance(c, And):
        return _conjuncts(c.a) + _conjuncts(c.b)
    return [c]


def _emit(La: Lin, Lb: Lin, cls, subst_u) -> Expr:
    """``La <cls> Lb`` (integer affine forms) as an Expr, or a constant when provable."""
    L = La - Lb
    if cls is GE:
        t, f = L, -L - 1
    elif cls is GT:
        t, f = L - 1, -L
    elif cls is LE:
        t, f = -L, L - 1
    elif cls is LT:
        t, f = -L - 1, L
    elif cls is EQ or cls is NE:
        if L.is_const():
            return Const((L.const == 0) == (cls is EQ), "bool")
        if provably_nonneg(L - 1) or provably_nonneg(-L - 1):
            return Const(cls is NE, "bool")
        return _op.compare(cls, to_expr(La, subst_u), to_expr(Lb, subst_u))
    else:
        raise ValueError(cls)
    if provably_nonneg(t):
        return Const(True, "bool")
    if provably_nonneg(f):
        return Const(False, "bool")
    return _op.compare(cls, to_expr(La, subst_u), to_expr(Lb, subst_u))


def _rewrite_guard(P: _Parser, c: Expr, sol, subst_u, var_subst) -> Expr:
    if isinstance(c, CmpOp) and _dt.is_int(c.a.dtype) and _dt.is_int(c.b.dtype):
        La, Lb = P.parse(c.a), P.parse(c.b)
        if La is not None and Lb is not None:
            def apply(L: Lin) -> Lin:
                out = Lin(const=L.const)
                for k, coef in L.terms.items():
                    if isinstance(k, Unknown) and k in sol:
                        num, D = sol[k]
                        out = out + num.scale(Fraction(coef) / D)
                    else:
                        out = out + Lin.of(k, coef)
                return out

            A, B = apply(La), apply(Lb)
            den = A.denominator()
            den = den * B.denominator() // math.gcd(den, B.denominator())
            A, B = A.scale(den), B.scale(den)
            A = Lin({k: int(v) for k, v in A.terms.items()}, int(A.const))
            B = Lin({k: int(v) for k, v in B.terms.items()}, int(B.const))
            # an Unknown left in A or B is free: subst_u has its axis
            return _emit(A, B, type(c), subst_u)
    return substitute(c, var_subst)


class _IndexRewriter(Mutator):
    """Substitute the solution; affine integer expressions go through the Lin algebra."""

    def __init__(self, P, sol, subst_u, var_subst):
        self.P, self.sol, self.subst_u, self.var_subst = P, sol, subst_u, var_subst

    def visit_Var(self, v):
        r = self.var_subst.get(v)
        return v if r is None else r

    def visit_Reduce(self, e):
        return substitute(e, self.var_subst)

    def visit_ProducerLoad(self, e):
        idx = tuple(self._index(i) for i in e.indices)
        if all(a is b for a, b in zip(idx, e.indices)):
            return e
        return ProducerLoad(e.producer, idx, e.dtype)

    def _index(self, i: Expr) -> Expr:
        L = self.P.parse(i) if _dt.is_int(i.dtype) else None
        if L is None or any(isinstance(k, Known) and k.expr is not None and
                            _has_load(k.expr) for k in L.terms):
            return self.visit(i)
        out = Lin(const=L.const)
        for k, c in L.terms.items():
            if isinstance(k, Unknown) and k in self.sol:
                num, D = self.sol[k]
                if D != 1:
                    return self.visit(i)
                out = out + num.scale(c)
            elif isinstance(k, Unknown) and k not in self.subst_u:
                return self.visit(i)
            else:
                out = out + Lin.of(k, c)
        out = fold_divmod(_int_lin(out))
        return to_expr(out, self.subst_u, i.dtype)


def _has_load(e: Expr) -> bool:
    return bool(collect(e, lambda n: isinstance(n, ProducerLoad)))


def _dedup(conds):
    out = []
    for c in conds:
        if isinstance(c, Const) and c.value is True:
            continue
        if not any(c == x for x in out):
            out.append(c)
    return out


def _unbounded(u):
    return AutodiffError(
        f"cannot invert an index map: the free quantity {u.name} has no finite range "
        "(an index like L // a where L's range is unknown); give the reading compute "
        "constant or symbolic extents")

