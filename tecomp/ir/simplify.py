"""The arithmetic simplifier: expressions and statements.

``simplify(node, ranges=None)`` takes an Expr, a Stmt or a PrimFunc and returns an
equivalent one that reads like what a person would write.  It never changes what a
program computes: integer arithmetic wraps (it reasons modulo ``2**bits`` or proves
that a value cannot wrap, see :mod:`tecomp.ir.arith` for the overflow policy), float
arithmetic is never reassociated, ``Select`` stays lazy.  It is deterministic (the
same input always gives the same text) and one pass: simplified sub-expressions are
memoized, sums are handled as linear forms, never re-expanded.

Integer expressions (canonical form)
------------------------------------
Add/Sub/Mul-by-constant trees become a linear form ``sum(coef*atom) + const`` and are
rebuilt as ``i.outer*64 + i.inner*8 + j - 3``: terms by decreasing coefficient, ties in
order of first appearance, the constant last, negative coefficients as subtractions.

* constant folding in every integer dtype, wrapping exactly as the dtype does;
* like terms combine, ``x - x -> 0``, ``x*0 -> 0``, ``(x*c1)*c2 -> x*(c1*c2)``,
  ``(x + 1)*8 -> x*8 + 8``; products of non-constants are atoms keyed commutatively
  (``x*y - y*x -> 0``);
* a variable whose range holds one value is that value; so is any non-linear
  sub-expression whose bounds are a single value;
* fuse identities: ``(f // c)*c + f % c -> f`` (also nested, and for a symbolic
  divisor ``(f // n)*n + f % n -> f``; also ``(x // c)*c + y % c -> x`` when ``x - y`` is a
  multiple of ``c``: ``((f*32 + l) // 14)*14 + (f*4 + l) % 14 -> f*32 + l``), and
  ``x - (x // c)*c -> x % c``;
* ``min(a, b) + r -> min(a + r, b + r)`` (and max) when that cancels terms:
  ``min(i*8 + 8, 100) - i*8 -> min(100 - i*8, 8)``.

Division and modulo (``c > 0`` a constant; exact only when the dividend cannot wrap)
* ``x // c -> q`` when every value of ``x`` lies in ``[q*c, q*c + c)``, in particular
  ``x // c -> 0`` and ``x % c -> x`` when ``0 <= x < c``;
* ``(a*c + b) // c -> a + b // c`` and ``(a*c + b) % c -> b % c`` (hence
  ``(x*8 + y) // 8 -> x`` and ``(x*8 + y) % 8 -> y`` when ``0 <= y < 8``);
* ``(a*g + e) // c -> a // (c/g)`` and ``(a*g + e) % c -> (a % (c/g))*g + e`` when
  ``g`` divides ``c`` and ``0 <= e < g`` (``(x*4 + y) // 8 -> x // 2`` for
  ``0 <= y < 4``; also ``(x*6) // 4 -> (x*3) // 2``);
* ``(x // c1) // c2 -> x // (c1*c2)``, ``(x // c1 + k) // c2 -> (x + k*c1) // (c1*c2)``;
* ``(x % c1) % c2 -> x % c2`` when ``c2`` divides ``c1`` (inside any sum);
* a symbolic divisor ``n``: ``(a*n + b) // n -> a + b // n``, ``(a*n + b) % n -> b % n``,
  ``b // n -> 0`` and ``b % n -> b`` when ``0 <= b < n`` is provable;
* variables with symbolic ranges are relaxed when constant bounds do not decide:
  in ``for (j, i*8, 8)``, ``j // 8 -> i`` and ``j % 8 -> j - i*8``;
* TruncDiv/TruncMod of a non-negative dividend by a positive divisor become
  FloorDiv/FloorMod (they agree there); constants fold with C semantics.

Min, Max, Select, comparisons, logic
* ``min(a, b) -> a`` when ``a <= b`` is provable (the canonical difference's bounds;
  floor divisions by the same positive constant are compared through their numerators:
  ``min(n // 32, (n + 31) // 32) -> n // 32`` for every ``n``), constants fold, ``min(min(x, c1), c2) -> min(x, min(c1, c2))``, a constant operand
  goes second;
* comparisons of integers fold when decided by the bounds of ``a - b`` (``i < 100`` with
  ``i`` in ``[0, 64)`` is True; ``i*8 == 100`` is False by divisibility); otherwise they
  are rewritten as ``terms OP constant`` with the coefficients' gcd divided out
  (``i + 1 < 57 -> i < 56``, ``i*8 < 100 -> i < 13``), positive terms on the left;
  ``==``/``!=`` are exact in the ring, so they are canonicalized (and decided by the
  bounds of the wrapped difference) even when a side may wrap;
* ``And``/``Or``/``Not`` with constants, ``a && a -> a``, ``a && !a -> False``, two
  bounds on the same expression merge (``i >= 2 && i < 1 -> False``), ``!(a < b) -> a >=
  b`` (integers), ``!(a == b) -> a != b``, De Morgan when it removes every ``!``;
* ``Select`` with a constant condition or equal branches is a branch; each branch is
  simplified knowing the condition (true or false);
* a condition already known in the enclosing ``if``/``select`` folds to a constant.

Casts and floats
* casts of constants fold (int wraps, float rounds to the target's precision, a
  float->int cast folds only when the value fits); ``int32(int64(x)) -> x``;
* float constants fold in float32/float64 with IEEE semantics (float16 is a storage
  type and is not folded); ``x*1``, ``x/1``, ``x - 0.0``, ``x + -0.0`` simplify; nothing
  is reassociated, ``x*0`` and ``x + 0.0`` are kept (NaN, infinities, ``-0.0``).

How it works: int expressions are turned into :class:`~tecomp.ir.arith.LinForm`
bottom-up (``lin``), every rule works on forms and constant bounds from the
:class:`~tecomp.ir.arith.Analyzer`, and a form is rebuilt into an Expr only where a
non-linear node needs it.  Results are memoized per scope (a loop body, a branch).

Statements
* ``For`` ranges are learned for the body; extent <= 0 removes the loop, a *serial*
  loop of extent 1 becomes its body with the counter substituted by ``min``; a loop
  whose body vanished is removed (GPU thread loops are kept);
* ``IfThenElse`` with a provable condition keeps one branch; each branch is simplified
  knowing the condition; ``AssertStmt`` with a provable condition is dropped;
* ``SeqStmt`` is flattened and empty statements dropped; ``LetStmt`` of a constant or a
  variable is substituted, an unused one removed; empty ``Allocate``/``AttrStmt`` and
  ``Evaluate`` of a constant are removed; other statements (stores, ``Prefetch``) have
  their expressions simplified.
"""
from __future__ import annotations

import math
from contextlib import contextmanager

import numpy as np

from ..errors import ExprError
from . import dtype as _dt
from .arith import SIMPLIFY, Analyzer, LinForm, dtype_limits, wrap, wrap_centered
from .expr import (
    EQ, GE, GT, LE, LT, NE, Add, And, BufferLoad, Call, Cast, CmpOp, Const, Div, Expr, FloorDiv,
    FloorMod, IterVar, Let, Max, Min, Mul, Not, Or, Reduce, Select, Sub, TruncDiv, TruncMod, Var,
    as_expr,
)
from .functor import Mutator, child_fields, collect, substitute, uses_var
from .op import compare_values
from .stmt import (
    Allocate, AssertStmt, AttrStmt, BufferStore, Evaluate, ExternCall, For, IfThenElse, LetStmt,
    PrimFunc, SeqStmt, Stmt, TensorIntrinCall, annotated_loop,
)

__all__ = ["simplify", "affine_steps", "Simplifier", "StmtSimplifier"]

#: an unrolled loop's symbolic extent gets its constant bound written out (``min(e, c)``)
#: where the enclosing loops prove one of at most this (:meth:`StmtSimplifier.visit_For`)
UNROLL_BOUND_MAX = 64

_TRUE = Const(True, "bool")
_FALSE = Const(False, "bool")
_EMPTY = SeqStmt(())

_FLIP = {LT: GT, LE: GE, GT: LT, GE: LE, EQ: EQ, NE: NE}  # a OP b  <=>  b FLIP(OP) a
_NEGATE = {LT: GE, LE: GT, GT: LE, GE: LT, EQ: NE, NE: EQ}  # !(a OP b) <=> a NEG(OP) b


def _is_int(dt: str) -> bool:
    return _dt.is_int(dt)


def _bool(v) -> Const:
    return _TRUE if v else _FALSE


def _is_empty(s) -> bool:
    return type(s) is SeqStmt and not s.seq


def _ceil_div(a: int, b: int) -> int:
    return -((-a) // b)


def _cmp_const(t, d: int) -> bool:
    """``d OP 0`` for an int d."""
    if t is LT:
        return d < 0
    if t is LE:
        return d <= 0
    if t is GT:
        return d > 0
    if t is GE:
        return d >= 0
    if t is EQ:
        return d == 0
    return d != 0


# ---------------------------------------------------------------------------------
# float constant folding


def _float_np(dt):
    return np.float32 if dt == "float32" else np.float64


def _fold_float(op, a: float, b: float, dt: str):
    """IEEE result of ``a op b`` in float32/float64, or None (float16 is not folded)."""
    if dt not in ("float32", "float64"):
        return None
    f = _float_np(dt)
    x, y = f(a), f(b)
    with np.errstate(all="ignore"):
        if op is Add:
            r = x + y
        elif op is Sub:
            r = x - y
        elif op is Mul:
            r = x * y
        elif op is Div:
            r = x / y
        elif op is Min or op is Max:
            if math.isnan(a) or math.isnan(b):
                r = f(math.nan)
            elif a == b:
                if math.copysign(1.0, a) != math.copysign(1.0, b):
                    return None  # min(-0.0, 0.0): backends disagree, keep it
                r = x
            else:
                r = min(x, y) if op is Min else max(x, y)
        else:
            return None
    return float(r)


def _cast_const(v, src: str, dst: str):
    """Fold ``Cast(Const(v, src), dst)``; None when the result is undefined (float->int
    out of range, NaN) or not worth folding."""
    if dst == "bool":
        return bool(v != 0) if not isinstance(v, float) or not math.isnan(v) else True
    if src == "bool":
        v = int(bool(v))
    if _dt.is_float(dst):
        if isinstance(v, float) and math.isnan(v):
            return math.nan
        if dst == "float64":
            return float(v)
        if dst == "float32":
            with np.errstate(all="ignore"):
                return float(np.float32(v))
        if dst == "bfloat16":   # through float32, as every backend converts
            return _dt.round_bf16(float(v)) if isinstance(v, float) else _dt.round_bf16(
                float(np.float32(v)))
        with np.errstate(all="ignore"):  # one rounding, from the exact source value
            return float(np.float16(float(v)))
    # to an integer
    if isinstance(v, float):
        if not math.isfinite(v):
            return None
        t = math.trunc(v)
        lo, hi = dtype_limits(dst)
        if not (lo <= t <= hi):
            return None
        return int(t)
    return wrap(int(v), dst)


# ---------------------------------------------------------------------------------
# the expression simplifier



#: the largest constant :meth:`_Simplifier.fdiv` moves into a symbolic numerator
#: (``(x - 1) // c -> (x + c - 1) // c - 1``); past it the division keeps its form
BIG_NUMERATOR_SHIFT = 1 << 16

class Simplifier:
    """Simplifies expressions under the ranges and facts of an :class:`Analyzer`.

    ``visit(expr)`` returns the simplified Expr (the *same object* when nothing
    changed); ``lin(int_expr)`` returns its canonical :class:`LinForm`.  ``scope()`` and
    ``assume(cond)`` open a nested context (ranges and known conditions).
    """

    def __init__(self, analyzer: Analyzer | None = None):
        self.an = analyzer if analyzer is not None else Analyzer()
        # per scope (what is known changes between scopes):
        self._memo: dict = {}  # id(expr) -> (expr, simplified expr)
        self._lmemo: dict = {}  # id(expr) -> (expr, LinForm); also the simplifier's own outputs
        self._facts: dict = {}  # key of a bool expr -> its known truth value
        # exact (math) forms known to be >= 0, from the comparisons assumed in this scope
        # (``n >= (f % c)*32 + 32`` in a tile's full-tile version): decide() reads them
        self._lin_facts: tuple = ()
        self._relaxing = 0  # > 0 while computing symbolic intervals (no nested relaxation)
        self._var_stack: set = set()

    # contexts ------------------------------------------------------------------------
    @contextmanager
    def scope(self):
        saved = (self._memo, self._lmemo, self._facts, self._lin_facts)
        self._memo, self._lmemo, self._facts = {}, {}, dict(self._facts)
        try:
            with self.an.scope():
                yield self
        finally:
            self._memo, self._lmemo, self._facts, self._lin_facts = saved

    def bind(self, var: Var, lo: Expr | None, hi: Expr | None) -> None:
        """Give ``var`` the inclusive bounds ``[lo, hi]`` (call inside a ``scope()``)."""
        self.an.bind_bounds(var, lo, hi)
        self._memo.clear()
        self._lmemo.clear()

    @contextmanager
    def assume(self, cond: Expr, truth: bool = True):
        """A scope in which the simplified bool ``cond`` is known to be ``truth``."""
        with self.scope():
            self._learn(cond, truth)
            yield self

    # entry points -------------------------------------------------------------------------
    def visit(self, e: Expr) -> Expr:
        ent = self._memo.get(id(e))
        if ent is not None and ent[0] is e:
            return ent[1]
        dt = e.dtype
        if _is_int(dt):
            r = self.expr(self.lin(e))
        else:
            m = getattr(self, "_v_" + type(e).__name__, None)
            r = m(e) if m is not None else self._generic(e)
            if dt == "bool" and self._facts and type(r) is not Const:
                known = self._facts.get(self.an.key(r))
                if known is not None:
                    r = _bool(known)
        if r is not e and type(r) is type(e) and r == e:
            r = e  # structurally unchanged: hand back the input object
        self._memo[id(e)] = (e, r)
        return r

    def expr(self, f: LinForm) -> Expr:
        """The readable expression of a form (registered as already simplified)."""
        if f.math:
            f = f.as_ring()
        e = self.an.rebuild(f)
        self._lmemo[id(e)] = (e, f)
        return e

    def atom(self, e: Expr, dtype: str | None = None) -> LinForm:
        """The form of the simplified atom ``e`` (registered as already simplified)."""
        dt = dtype or e.dtype
        if type(e) is not Var and type(e) is not Const and _is_int(e.dtype):
            lo, hi = self.an.atom_bound(e)
            if lo is not None and lo == hi:  # a non-linear expression with one value
                return LinForm(dt, {}, lo)
        f = self.an.atom_form(e, 1, dtype)
        if type(e) is not Const and (dtype is None or dtype == e.dtype):
            self._lmemo[id(e)] = (e, f)
        return f

    def lin(self, e: Expr) -> LinForm:
        """The canonical linear form of the simplified int expression ``e``."""
        i = id(e)
        ent = self._lmemo.get(i)
        if ent is not None and ent[0] is e:
            return ent[1]
        f = self._lin(e)
        self._lmemo[i] = (e, f)
        return f

    # linear structure ---------------------------------------------------------------------
    def _lin_child(self, x: Expr, dt: str) -> LinForm:
        if x.dtype == dt:
            return self.lin(x)
        if type(x) is Const:
            return LinForm(dt, {}, int(x.value))
        return self.atom(self.visit(x), dt)

    def _lin(self, e: Expr) -> LinForm:
        t = type(e)
        dt = e.dtype
        if t is Const:
            return LinForm(dt, {}, int(e.value))
        if t is Var:
            return self._lin_var(e)
        if t is Add or t is Sub:
            parts, stack = [], [(e, 1)]
            while stack:
                x, s = stack.pop()
                tx = type(x)
                if (tx is Add or tx is Sub) and x.dtype == dt and (
                        x is e or self._lmemo.get(id(x), (None,))[0] is not x):
                    stack.append((x.b, s if tx is Add else -s))
                    stack.append((x.a, s))
                else:
                    parts.append((self._lin_child(x, dt), s))
            return self._normalize(LinForm.combine(dt, parts))
        if t is Mul:
            fa, fb = self._lin_child(e.a, dt), self._lin_child(e.b, dt)
            if fa.is_const:
                return fb.scale(fa.const)
            if fb.is_const:
                return fa.scale(fb.const)
            return self.mul_forms(fa, fb)
        if t in (FloorDiv, FloorMod, TruncDiv, TruncMod):
            return self._lin_div(t, self._lin_child(e.a, dt), self._lin_child(e.b, dt), dt)
        if t is Min or t is Max:
            return self.minmax(t is Min, self._lin_child(e.a, dt), self._lin_child(e.b, dt))
        m = getattr(self, "_v_" + t.__name__, None)
        r = m(e) if m is not None else self._generic(e)
        ent = self._lmemo.get(id(r))
        if ent is not None and ent[0] is r:
            return ent[1]
        if type(r) is Const:
            return LinForm(dt, {}, int(r.value))
        if r.dtype == dt and type(r) in (Add, Sub, Mul):
            return self.lin(r)
        return self.atom(r, dt)

    def _lin_var(self, v: Var) -> LinForm:
        rng = self.an.var_range(v)
        if rng is not None and v not in self._var_stack:
            lo, hi = rng
            if lo is not None and hi is not None and lo.dtype == v.dtype and (
                    lo is hi or self.an.key(lo) == self.an.key(hi)):
                self._var_stack.add(v)
                try:
                    return self.lin(lo)
                finally:
                    self._var_stack.discard(v)
        b = self.an.var_bound(v)
        if b[0] is not None and b[0] == b[1]:
            return LinForm(v.dtype, {}, b[0])
        return self.atom(v)

    def mul_forms(self, fa: LinForm, fb: LinForm) -> LinForm:
        """The form of the product of two forms (a product of non-constants is an atom)."""
        dt = fa.dtype
        if fa.is_const:
            return fb.scale(fa.const)
        if fb.is_const:
            return fa.scale(fb.const)
        sa, sb = fa.single(), fb.single()
        ca, A = (sa[1], sa[0]) if sa is not None else (1, self.expr(fa))
        cb, B = (sb[1], sb[0]) if sb is not None else (1, self.expr(fb))
        return self.atom(Mul(A, B, dt)).scale(ca * cb)

    def _normalize(self, f: LinForm) -> LinForm:
        """The fuse identities inside a sum (see the module doc)."""
        if len(f.terms) < 2:
            return f
        kinds = {type(a) for a, _ in f.terms.values()}
        if FloorMod in kinds:
            progress = True
            while progress:
                progress = False
                for atom, c in list(f.terms.values()):
                    if type(atom) is not FloorMod:
                        continue
                    p = self._div_partner(atom, c)
                    if p is not None:
                        pkey, pcoef, pform = p
                        ent = f.terms.get(pkey)
                        if ent is not None and ent[1] == pcoef:
                            x = self.lin(atom.a)
                            f = LinForm.combine(f.dtype, [(f, 1), (self.an.atom_form(atom, c, f.dtype), -1),
                                                          (pform, -1), (x.scale(c), 1)])
                            progress = True
                            break
                    q = self._congruent_div(f, atom, c)
                    if q is not None:
                        f = q
                        progress = True
                        break
        if Min in kinds or Max in kinds:
            f = self._push_into_minmax(f)
            if len(f.terms) < 2:
                return f
            kinds = {type(a) for a, _ in f.terms.values()}
        if FloorDiv in kinds and len(f.terms) >= 2:
            for atom, b in list(f.terms.values()):
                if type(atom) is not FloorDiv or type(atom.b) is not Const:
                    continue
                c = int(atom.b.value)
                if c <= 1 or b % c:
                    continue
                a = -(b // c)
                x = self.lin(atom.a)
                if not x.terms:
                    continue
                ok = True
                for k, (_, cx) in x.terms.items():
                    ent = f.terms.get(k)
                    if ent is None or ent[1] != wrap_centered(a * cx, f.dtype):
                        ok = False
                        break
                if ok and atom.a.dtype == f.dtype:
                    # a*x + b*(x // c) == a*(x % c)  when b == -a*c
                    f = LinForm.combine(f.dtype, [(f, 1), (x.scale(a), -1),
                                                  (self.an.atom_form(atom, b, f.dtype), -1),
                                                  (self.fmod(x, c).scale(a), 1)])
                    break
        return f

    def _push_into_minmax(self, f: LinForm) -> LinForm:
        """``min(a, b) + r -> min(a + r, b + r)`` (and max) when terms of ``r`` cancel
        inside, so the result is smaller: ``min(i*8 + 8, 100) - i*8 -> min(100 - i*8, 8)``."""
        an = self.an
        for key, (atom, c) in f.terms.items():
            if type(atom) not in (Min, Max) or c not in (1, -1) or atom.dtype != f.dtype:
                continue
            rest = LinForm(f.dtype, {k: v for k, v in f.terms.items() if k != key}, f.const)
            if not rest.terms:
                continue
            fa, fb = self.lin(atom.a), self.lin(atom.b)
            if c == -1:  # -min(a, b) == max(-a, -b)
                fa, fb = fa.scale(-1), fb.scale(-1)
            na = LinForm.combine(f.dtype, [(fa, 1), (rest, 1)])
            nb = LinForm.combine(f.dtype, [(fb, 1), (rest, 1)])
            before = len(f.terms) + len(fa.terms) + len(fb.terms)
            if len(na.terms) + len(nb.terms) + 1 >= before:
                continue
            # exact only when nothing wraps: the operands, the sums, and the original
            ea, eb = an.exact(fa), an.exact(fb)
            if ea is None or eb is None or not an.fits(f):
                continue
            if not (an.fits(LinForm.combine(f.dtype, [(ea, 1), (rest.as_math(), 1)], math=True))
                    and an.fits(LinForm.combine(f.dtype, [(eb, 1), (rest.as_math(), 1)], math=True))):
                continue
            is_min = (type(atom) is Min) == (c == 1)
            return self.minmax(is_min, na, nb)
        return f

    def _congruent_div(self, f: LinForm, mod_atom: FloorMod, coef: int) -> "LinForm | None":
        """``coef*(y % c) + coef*c*(x // c) -> coef*x`` for a constant ``c`` when ``x - y`` is
        a multiple of ``c`` (so ``y % c == x % c``) and neither wraps: the flattened index of
        a fused axis, ``((f*32 + l) // 14)*14 + (f*4 + l) % 14 -> f*32 + l`` (the modulo's
        coefficients were reduced modulo 14 first).  ``f`` itself otherwise None."""
        if type(mod_atom.b) is not Const or mod_atom.a.dtype != f.dtype:
            return None
        c = int(mod_atom.b.value)
        if c <= 1:
            return None
        want = wrap_centered(coef * c, f.dtype)
        y = None
        for atom, b in f.terms.values():
            if (type(atom) is not FloorDiv or b != want or type(atom.b) is not Const
                    or int(atom.b.value) != c or atom.a.dtype != f.dtype):
                continue
            if y is None:
                y = self.lin(mod_atom.a)
                if not self.an.fits(y):
                    return None
            x = self.lin(atom.a)
            d = LinForm.combine(f.dtype, [(x, 1), (y, -1)])
            if d.const % c or any(a % c for _, a in d.terms.values()) or not self.an.fits(x):
                continue
            return LinForm.combine(f.dtype, [(f, 1), (self.an.atom_form(mod_atom, coef, f.dtype), -1),
                                             (self.an.atom_form(atom, b, f.dtype), -1),
                                             (x.scale(coef), 1)])
        return None

    def _div_partner(self, mod_atom: FloorMod, coef: int):
        """For ``coef*(x % d)``: the key, coefficient and form of the term
        ``coef*d*(x // d)`` that completes it to ``coef*x``."""
        x, d = mod_atom.a, mod_atom.b
        dt = mod_atom.dtype
        if x.dtype != dt:
            return None
        if type(d) is Const:
            c = int(d.value)
            if c <= 0:
                return None
            # the partner is coef*c*(x // c); x // c may simplify to qc*atom
            s = self.fdiv(self.lin(x), c).single()
            mult = c
        else:
            # the partner is coef*((x // d)*d), a product atom
            s = self.mul_forms(self.fdiv_sym(self.lin(x), self.lin(d)), self.lin(d)).single()
            mult = 1
        if s is None:
            return None
        atom, qc = s
        pcoef = wrap_centered(coef * mult * qc, dt)
        if pcoef == 0:
            return None
        return self.an.key(atom), pcoef, self.an.atom_form(atom, pcoef, dt)

    # bounds and decisions -----------------------------------------------------------------
    def _symbolic_vars(self, f: LinForm) -> set:
        """Vars of ``f`` whose range has a non-constant bound (worth relaxing
        symbolically), closed over the symbolically ranged vars those bounds mention."""
        out = set()
        an = self.an
        todo = [v for atom, _ in f.terms.values() for v in an.free_vars(atom)]
        seen = set()
        while todo:
            v = todo.pop()
            if v in seen:
                continue
            seen.add(v)
            r = an.var_range(v)
            if r is None:
                continue
            sym = [b for b in r if b is not None and type(b) is not Const]
            if sym:
                out.add(v)
                for b in sym:
                    todo.extend(an.free_vars(b))
        return out

    def best_bound(self, f: LinForm):
        """Constant bounds of a form's value: term-wise, refined by relaxing variables
        with symbolic ranges when that is tighter (``j - i*8`` for ``j in [i*8, i*8+8)``)."""
        lo, hi = self.an.form_mbound(f) if f.math else self.an.form_bound(f)
        if self._relaxing == 0:
            sv = self._symbolic_vars(f)
            if sv:
                slo, shi = self.interval_of(f, sv)
                slo, shi = self._fused_bound(slo), self._fused_bound(shi)
                if slo is not None:
                    l2 = self.an.form_mbound(slo)[0]
                    if l2 is not None and (lo is None or l2 > lo):
                        lo = l2
                if shi is not None:
                    h2 = self.an.form_mbound(shi)[1]
                    if h2 is not None and (hi is None or h2 < hi):
                        hi = h2
        return lo, hi

    def _fused_bound(self, f):
        """A relaxed bound with the fuse identities applied (``n - (n // 14)*14`` is
        ``n % 14``, in ``[0, 13]``: the extent of a loop's main part, ``n - i*14`` for
        ``i < n // 14``, is then provably at least 14)."""
        if f is None or len(f.terms) < 2:
            return f
        r = self._ring(f)
        if r is None:
            return f
        nr = self._normalize(r)
        if nr is r:
            return f
        m = self._math(nr)
        return f if m is None else m

    def decide(self, t, d: LinForm):
        """``d OP 0`` for the exact form ``d`` (math semantics): True, False or None."""
        if d.is_const:
            return _cmp_const(t, d.const)
        g = d.coef_gcd()
        if t in (EQ, NE) and g > 1 and d.const % g:
            return t is NE
        for attempt in (0, 1, 2):
            if attempt == 0:
                lo, hi = self.an.form_mbound(d)
            elif attempt == 1:
                if self._relaxing or not self._symbolic_vars(d):
                    continue
                lo, hi = self.best_bound(d)
            else:
                b = self._div_pair_bound(d)
                if b is None:
                    break
                lo, hi = b
            r = _decide_bounds(t, lo, hi)
            if r is not None:
                return r
        if self._lin_facts:
            return _decide_bounds(t, *self._fact_bound(d))
        return None

    def _fact_bound(self, d: LinForm):
        """Bounds of ``d`` from the linear facts ``g >= 0`` of the scope: ``d - g`` bounded
        below by ``lo`` gives ``d >= lo``; ``d + g`` bounded above by ``hi``, ``d <= hi``."""
        lo = hi = None
        dt = d.dtype
        for g in self._lin_facts:
            if g.dtype != dt:
                continue
            l1 = self.an.form_mbound(LinForm.combine(dt, [(d, 1), (g, -1)], math=True))[0]
            if l1 is not None and (lo is None or l1 > lo):
                lo = l1
            h1 = self.an.form_mbound(LinForm.combine(dt, [(d, 1), (g, 1)], math=True))[1]
            if h1 is not None and (hi is None or h1 < hi):
                hi = h1
        return lo, hi

    def _div_pair_bound(self, d: LinForm):
        """Bounds of the exact form ``d`` with its floor divisions by the same positive
        constant paired: ``c*(a // k) - c*(b // k)`` lies in ``c*[floor(lo/k), ceil(hi/k)]``
        when ``a - b`` lies in ``[lo, hi]`` (floor division is monotone, and shifting a
        numerator by ``q*k + r``, ``0 <= r < k``, moves the quotient by ``q`` or ``q + 1``).
        Term-wise bounds cannot see it: ``n // 32 - (n + 31) // 32`` is in ``[-1, 0]`` for
        every ``n``.  None when ``d`` has no such pair."""
        divs = [(key, atom, c) for key, (atom, c) in d.terms.items()
                if type(atom) is FloorDiv and type(atom.b) is Const and atom.dtype == d.dtype
                and atom.a.dtype == d.dtype and int(atom.b.value) > 0]
        if len(divs) < 2:
            return None
        an = self.an
        paired = set()
        lo = hi = d.const
        for i, (key1, a1, c1) in enumerate(divs):
            if key1 in paired:
                continue
            k = int(a1.b.value)
            for key2, a2, c2 in divs[i + 1:]:
                if key2 in paired or c2 != -c1 or int(a2.b.value) != k:
                    continue
                e1, e2 = an.exact(self.lin(a1.a)), an.exact(self.lin(a2.a))
                if e1 is None or e2 is None:
                    continue
                dlo, dhi = self.best_bound(LinForm.combine(d.dtype, [(e1, 1), (e2, -1)], math=True))
                if dlo is None and dhi is None:
                    continue
                qlo = None if dlo is None else dlo // k
                qhi = None if dhi is None else -(-dhi // k)
                if c1 < 0:
                    qlo, qhi = qhi, qlo
                plo = None if qlo is None else c1 * qlo
                phi = None if qhi is None else c1 * qhi
                lo = None if lo is None or plo is None else lo + plo
                hi = None if hi is None or phi is None else hi + phi
                paired.update((key1, key2))
                break
        if not paired:
            return None
        rest = LinForm(d.dtype, {key: v for key, v in d.terms.items() if key not in paired}, 0, True)
        rlo, rhi = an.form_mbound(rest)
        lo = None if lo is None or rlo is None else lo + rlo
        hi = None if hi is None or rhi is None else hi + rhi
        return lo, hi

    def prove_nonneg(self, f: LinForm) -> bool:
        e = self.an.exact(f)
        return e is not None and self.decide(GE, e) is True

    # division -----------------------------------------------------------------------------
    def _lin_div(self, t, fa: LinForm, fb: LinForm, dt: str) -> LinForm:
        if fb.is_const:
            c = fb.value
            if t is FloorDiv or t is FloorMod:
                if c > 0:
                    return self.fdiv(fa, c) if t is FloorDiv else self.fmod(fa, c)
                if c < 0:
                    if fa.is_const:
                        v = fa.value
                        return LinForm(dt, {}, v // c if t is FloorDiv else v % c)
                    if c == -1:
                        return fa.scale(-1) if t is FloorDiv else LinForm(dt)
            else:  # trunc
                if c != 0 and fa.is_const:
                    v = fa.value
                    q = _tdiv(v, c)
                    return LinForm(dt, {}, q if t is TruncDiv else v - q * c)
                if c > 0 and self.prove_nonneg(fa):
                    return self.fdiv(fa, c) if t is TruncDiv else self.fmod(fa, c)
                if c < 0 and c != dtype_limits(dt)[0] and self.prove_nonneg(fa):
                    # trunc(a / c) == -(a // -c), truncmod(a, c) == a % -c for a >= 0
                    return self.fdiv(fa, -c).scale(-1) if t is TruncDiv else self.fmod(fa, -c)
                if c == 1:
                    return fa if t is TruncDiv else LinForm(dt)
            return self.atom(t(self.expr(fa), self.expr(fb), dt))
        # symbolic divisor
        if fa.is_const and fa.const == 0:
            return LinForm(dt)  # 0 / d == 0 for every d != 0 (d == 0 is undefined)
        if t is TruncDiv or t is TruncMod:
            fbe = self.an.exact(fb)
            if self.prove_nonneg(fa) and fbe is not None and self.decide(GT, fbe) is True:
                t = FloorDiv if t is TruncDiv else FloorMod
            else:
                return self.atom(t(self.expr(fa), self.expr(fb), dt))
        return self.fdiv_sym(fa, fb) if t is FloorDiv else self.fmod_sym(fa, fb)

    def fdiv(self, f: LinForm, c: int) -> LinForm:
        """The form of ``f // c`` for a constant ``c > 0``."""
        dt = f.dtype
        if f.is_const:
            return LinForm(dt, {}, f.value // c)
        if c == 1:
            return f
        e = self.an.exact(f)
        if e is None:
            return self.atom(FloorDiv(self.expr(f), Const(c, dt), dt))
        lo, hi = self.best_bound(e)
        if lo is not None and hi is not None and lo // c == hi // c:
            return LinForm(dt, {}, lo // c)
        q_terms, r_terms = {}, {}
        for k, (atom, a) in e.terms.items():
            if a % c == 0:
                q_terms[k] = (atom, a // c)
            else:
                r_terms[k] = (atom, a)
        k0 = e.const
        if q_terms or k0 >= c or k0 < 0:
            rest = LinForm(dt, r_terms, k0 % c, True)
            # (x - 1) // c stays so for a big c: x + (c - 1) would pass int32 for most x
            # (a free symbol's range is not known here), where x - 1 does not
            if not self.an.fits(rest) or (r_terms and k0 % c > BIG_NUMERATOR_SHIFT):
                return self.atom(FloorDiv(self.expr(f), Const(c, dt), dt))
            q = LinForm(dt, q_terms, k0 // c)
            return LinForm.combine(dt, [(q, 1), (self._fdiv_rest(rest, c), 1)])
        return self._fdiv_rest(e, c)

    def _split_gcd(self, r: LinForm, c: int):
        """``r == g*p + small`` with ``g | c``, ``g > 1`` and ``0 <= small < g``: (g, p, small)."""
        items = sorted(r.terms.items(), key=lambda kv: -abs(kv[1][1]))
        for n in range(1, len(items) + 1):
            g = c
            for _, (_, a) in items[:n]:
                g = math.gcd(g, a)
            if g <= 1:
                return None
            k = r.const
            small = LinForm(r.dtype, dict(items[n:]), k % g, True)
            lo, hi = self.best_bound(small)
            if lo is not None and hi is not None and lo >= 0 and hi < g:
                big = LinForm(r.dtype, {kk: (a, cc // g) for kk, (a, cc) in items[:n]}, (k - k % g) // g, True)
                return g, big, small
        return None

    def _fdiv_rest(self, r: LinForm, c: int) -> LinForm:
        """``r // c`` where ``r`` is exact and has no term with a coefficient divisible by c."""
        dt = r.dtype
        if r.is_const:
            return LinForm(dt, {}, r.const // c)
        lo, hi = self.best_bound(r)
        if lo is not None and hi is not None and lo // c == hi // c:
            return LinForm(dt, {}, lo // c)
        # (x // c1 + k) // c -> (x + k*c1) // (c1*c)
        s = next(iter(r.terms.values()))
        if len(r.terms) == 1 and s[1] == 1 and type(s[0]) is FloorDiv and type(s[0].b) is Const \
                and s[0].a.dtype == dt:
            c1 = int(s[0].b.value)
            if c1 > 0 and c1 * c <= dtype_limits(dt)[1]:
                inner = self.lin(s[0].a).add_const(r.const * c1)
                if self.an.fits(inner.as_math()):
                    return self.fdiv(inner, c1 * c)
        split = self._split_gcd(r, c)
        if split is not None:
            g, big, _ = split
            return self.fdiv(big.as_ring(), c // g) if self.an.fits(big) else \
                self.atom(FloorDiv(self.expr(r), Const(c, dt), dt))
        sym = self._symbolic_period(r, c)
        if sym is not None:
            return sym[0]
        return self.atom(FloorDiv(self.expr(r), Const(c, dt), dt))

    def _symbolic_period(self, r: LinForm, c: int):
        """When relaxing the symbolically ranged vars of ``r`` shows that ``r // c`` is one
        (symbolic) value q: (q, lo) with ``lo`` the lower bound form."""
        if self._relaxing:
            return None
        sv = self._symbolic_vars(r)
        if not sv:
            return None
        lo, hi = self.interval_of(r, sv)
        if lo is None or hi is None:
            return None
        self._relaxing += 1
        try:
            ql, qh = self.fdiv(lo.as_ring(), c), self.fdiv(hi.as_ring(), c)
        finally:
            self._relaxing -= 1
        if ql.same(qh):
            return ql, lo
        return None

    def fmod(self, f: LinForm, c: int) -> LinForm:
        """The form of ``f % c`` for a constant ``c > 0``."""
        dt = f.dtype
        if f.is_const:
            return LinForm(dt, {}, f.value % c)
        if c == 1:
            return LinForm(dt)
        e = self.an.exact(f)
        if e is None:
            return self.atom(FloorMod(self.expr(f), Const(c, dt), dt))
        # reduce: drop multiples of c, unwrap inner mods whose modulus c divides
        parts = []
        for atom, a in e.terms.values():
            a = _reduce_mod(a, c)
            if a == 0:
                continue
            if type(atom) is FloorMod and type(atom.b) is Const and atom.a.dtype == dt \
                    and int(atom.b.value) > 0 and (a * int(atom.b.value)) % c == 0:
                # a*(x % m) == a*x (mod c) when c | a*m; x must not wrap
                inner = self.an.exact(self.lin(atom.a))
                if inner is not None:
                    parts.append((inner.scale(a), 1))
                    continue
            parts.append((self.an.atom_form(atom, a, dt).as_math(), 1))
        parts.append((LinForm(dt, {}, e.const, True), 1))
        r = LinForm.combine(dt, parts, math=True)
        r = LinForm(dt, {k: (x, _reduce_mod(a, c)) for k, (x, a) in r.terms.items() if a % c},
                    _reduce_mod(r.const, c), True)
        if not self.an.fits(r):
            r = e
        lo, hi = self.best_bound(r)
        if lo is not None and hi is not None and lo // c == hi // c:
            return r.add_const(-c * (lo // c)).as_ring()
        if r is not e:
            lo, hi = self.best_bound(e)
            if lo is not None and hi is not None and lo // c == hi // c:
                return e.add_const(-c * (lo // c)).as_ring()
        if r.is_const:
            return LinForm(dt, {}, r.const % c)
        split = self._split_gcd(r, c)
        if split is not None:
            g, big, small = split
            if self.an.fits(big):
                inner = self.fmod(big.as_ring(), c // g).as_math().scale(g)
                return LinForm.combine(dt, [(inner, 1), (small, 1)])
        sym = self._symbolic_period(r, c)
        if sym is not None:
            q, _ = sym
            return LinForm.combine(dt, [(r.as_ring(), 1), (q.scale(c), -1)])
        return self.atom(FloorMod(self.expr(r), Const(c, dt), dt))

    def _split_by(self, f: LinForm, d: LinForm):
        """Split the exact form ``f`` into ``q*d + r`` for the single atom ``d``."""
        dkey = self.an.key(d)
        dt = f.dtype
        q, r = {}, {}
        qconst = 0
        for k, (atom, a) in f.terms.items():
            if k == dkey:
                qconst += a
                continue
            if type(atom) is Mul and self.an.product_fits(atom):
                fs = self.an.factors(atom)
                idx = next((i for i, x in enumerate(fs) if self.an.key(x) == dkey), None)
                if idx is not None:
                    rest = fs[:idx] + fs[idx + 1:]
                    qa = rest[0]
                    for x in rest[1:]:
                        qa = Mul(qa, x, dt)
                    qf = self.atom(qa).scale(a)
                    for kk, (x, cc) in qf.terms.items():
                        old = q.get(kk)
                        q[kk] = (x, cc) if old is None else (old[0], old[1] + cc)
                    continue
            r[k] = (atom, a)
        qf = LinForm(dt, {k: v for k, v in q.items() if v[1]}, qconst, True)
        return qf, LinForm(dt, r, f.const, True)

    def fdiv_sym(self, fa: LinForm, fb: LinForm) -> LinForm:
        """``fa // fb`` for a non-constant divisor."""
        dt = fa.dtype
        s = fb.single()
        if s is None or s[1] != 1 or fa.is_const:
            return self.atom(FloorDiv(self.expr(fa), self.expr(fb), dt))
        e = self.an.exact(fa)
        if e is None:
            return self.atom(FloorDiv(self.expr(fa), self.expr(fb), dt))
        d = s[0]
        q, r = self._split_by(e, d)
        if (q.terms or q.const) and not self.an.fits(r):
            return self.atom(FloorDiv(self.expr(fa), self.expr(fb), dt))
        if self._in_period(r, fb):
            rest = LinForm(dt)
        elif r.is_const and r.const == 0:
            rest = LinForm(dt)
        else:
            rest = self.atom(FloorDiv(self.expr(r), d, dt))
        return LinForm.combine(dt, [(q.as_ring(), 1), (rest, 1)])

    def fmod_sym(self, fa: LinForm, fb: LinForm) -> LinForm:
        """``fa % fb`` for a non-constant divisor."""
        dt = fa.dtype
        s = fb.single()
        if s is None or s[1] != 1 or fa.is_const:
            return self.atom(FloorMod(self.expr(fa), self.expr(fb), dt))
        e = self.an.exact(fa)
        if e is None:
            return self.atom(FloorMod(self.expr(fa), self.expr(fb), dt))
        d = s[0]
        _, r = self._split_by(e, d)
        if not self.an.fits(r):
            r = e
        if self._in_period(r, fb):
            return r.as_ring()
        if r.is_const and r.const == 0:
            return LinForm(dt)
        return self.atom(FloorMod(self.expr(r), d, dt))

    def _in_period(self, r: LinForm, fb: LinForm) -> bool:
        """``0 <= r < d`` is provable (r exact, d a single atom)."""
        if self.decide(GE, r) is not True:
            return False
        eb = self.an.exact(fb)
        if eb is None:
            return False
        return self.decide(LT, LinForm.combine(r.dtype, [(r, 1), (eb, -1)], math=True)) is True

    # min / max ------------------------------------------------------------------------------
    def minmax(self, is_min: bool, fa: LinForm, fb: LinForm) -> LinForm:
        """The form of ``min(fa, fb)`` (``max`` when ``is_min`` is false)."""
        dt = fa.dtype
        if fa.same(fb):
            return fa
        ea, eb = self.an.exact(fa), self.an.exact(fb)
        if ea is not None and eb is not None:
            d = LinForm.combine(dt, [(ea, 1), (eb, -1)], math=True)
            if self.decide(LE, d):
                return fa if is_min else fb
            if self.decide(GE, d):
                return fb if is_min else fa
        if fa.is_const and not fb.is_const:
            fa, fb = fb, fa
        cls = Min if is_min else Max
        if fb.is_const:
            s = fa.single()
            if s is not None and s[1] == 1 and type(s[0]) is cls and type(s[0].b) is Const \
                    and s[0].dtype == dt:
                c1, c2 = int(s[0].b.value), fb.value
                return self.minmax(is_min, self.lin(s[0].a), LinForm(dt, {}, min(c1, c2) if is_min else max(c1, c2)))
        return self.atom(cls(self.expr(fa), self.expr(fb), dt))

    # symbolic intervals --------------------------------------------------------------------
    def interval_of(self, e, relax):
        """``(lo, hi)`` exact (math) forms bounding ``e`` (an int Expr or a form) when the
        vars in ``relax`` run over their ranges; None for an unbounded side."""
        self._relaxing += 1
        try:
            return self._layered(e if isinstance(e, LinForm) else self.lin(e), set(relax), 0)
        finally:
            self._relaxing -= 1

    def _layered(self, f: LinForm, relax: set, depth: int):
        """Relax in dependency order: first the variables that no other relaxed range
        mentions (the most derived, e.g. ``j in [i*8, i*8 + 8)``) with the rest kept
        symbolic, then the rest on each bound; so ``j - i*8`` is ``[0, 7]``, not
        ``[-24, 31]``."""
        an = self.an
        mentioned = set()
        for v in relax:
            r = an.var_range(v)
            if r is not None:
                for b in r:
                    if b is not None:
                        mentioned.update(w for w in an.free_vars(b) if w in relax and w is not v)
        if not mentioned or depth > 8:
            return self._interval(f, relax)
        first = relax - mentioned
        if not first:  # a cycle: relax everything at once
            return self._interval(f, relax)
        lo, hi = self._interval(f, first)
        rest = relax - first
        if lo is not None:
            lo = self._layered(lo, rest, depth + 1)[0]
        if hi is not None:
            hi = self._layered(hi, rest, depth + 1)[1]
        return lo, hi

    def _interval(self, f: LinForm, relax):
        dt = f.dtype
        e = self.an.exact(f) if not f.math else f
        if e is None:
            dlo, dhi = dtype_limits(dt)
            return LinForm(dt, {}, dlo, True), LinForm(dt, {}, dhi, True)
        lo_parts, hi_parts = [], []
        lo_ok = hi_ok = True
        base = LinForm(dt, {}, e.const, True)
        lo_parts.append((base, 1))
        hi_parts.append((base, 1))
        for atom, c in e.terms.values():
            alo, ahi = self._atom_interval(atom, relax, dt)
            if c > 0:
                lo_ok = lo_ok and alo is not None
                hi_ok = hi_ok and ahi is not None
                if lo_ok:
                    lo_parts.append((alo, c))
                if hi_ok:
                    hi_parts.append((ahi, c))
            else:
                lo_ok = lo_ok and ahi is not None
                hi_ok = hi_ok and alo is not None
                if lo_ok:
                    lo_parts.append((ahi, c))
                if hi_ok:
                    hi_parts.append((alo, c))
            if not lo_ok and not hi_ok:
                break
        lo = LinForm.combine(dt, lo_parts, math=True) if lo_ok else None
        hi = LinForm.combine(dt, hi_parts, math=True) if hi_ok else None
        return lo, hi

    def _const_interval(self, atom, dt):
        lo, hi = self.an.atom_bound(atom)
        return (None if lo is None else LinForm(dt, {}, lo, True),
                None if hi is None else LinForm(dt, {}, hi, True))

    def _ring(self, f: LinForm | None):
        """A math bound form as a ring form, when its exact value fits the dtype."""
        if f is None or not self.an.fits(f):
            return None
        return f.as_ring()

    def _math(self, f: LinForm | None):
        """The exact value of a ring form computed from bounds (None if it may wrap)."""
        return None if f is None else self.an.exact(f)

    def _mm(self, is_min: bool, a: LinForm | None, b: LinForm | None):
        """min/max of two math bound forms (None when either is unknown)."""
        ra, rb = self._ring(a), self._ring(b)
        if ra is None or rb is None:
            return None
        r = self.minmax(is_min, ra, rb)
        if r is ra:
            return a
        if r is rb:
            return b
        return self._math(r)

    def _atom_interval(self, atom: Expr, relax, dt: str):
        an = self.an
        fv = an.free_vars(atom)
        if not fv:  # a constant expression left unfolded is undefined (x // 0)
            return self._const_interval(atom, dt)
        if not any(v in relax for v in fv):
            p = an.atom_form(atom, 1, dt).as_math()
            return p, p
        t = type(atom)
        if atom.dtype != dt:
            return self._const_interval(atom, dt)
        clo, chi = self._const_interval(atom, dt)
        lo = hi = None
        if t is Var:
            rng = an.var_range(atom)
            if rng is not None and atom not in self._var_stack:
                self._var_stack.add(atom)
                try:
                    lo = None if rng[0] is None else self._interval(self.lin(rng[0]), relax)[0]
                    hi = None if rng[1] is None else self._interval(self.lin(rng[1]), relax)[1]
                finally:
                    self._var_stack.discard(atom)
        elif (t is FloorDiv or t is FloorMod) and type(atom.b) is Const and int(atom.b.value) > 0:
            c = int(atom.b.value)
            xl, xh = self._interval(self.lin(atom.a), relax)
            rl, rh = self._ring(xl), self._ring(xh)
            ql = None if rl is None else self._math(self.fdiv(rl, c))
            qh = None if rh is None else self._math(self.fdiv(rh, c))
            if t is FloorDiv:
                lo, hi = ql, qh
            elif ql is not None and qh is not None and ql.same(qh):
                qm = ql.scale(c)
                lo = LinForm.combine(dt, [(xl, 1), (qm, -1)], math=True)
                hi = LinForm.combine(dt, [(xh, 1), (qm, -1)], math=True)
        elif t is Min or t is Max:
            al, ah = self._interval(self.lin(atom.a), relax)
            bl, bh = self._interval(self.lin(atom.b), relax)
            if t is Min:
                lo = self._mm(True, al, bl)
                hi = bh if ah is None else (ah if bh is None else self._mm(True, ah, bh))
            else:
                lo = bl if al is None else (al if bl is None else self._mm(False, al, bl))
                hi = self._mm(False, ah, bh)
        elif t is Select:
            al, ah = self._interval(self.lin(atom.true_value), relax)
            bl, bh = self._interval(self.lin(atom.false_value), relax)
            lo, hi = self._mm(True, al, bl), self._mm(False, ah, bh)
        elif t is Mul and an.product_fits(atom):
            fs = an.factors(atom)
            b = fs[1]
            for x in fs[2:]:
                b = Mul(b, x, dt)
            ia = self._interval(self.lin(fs[0]), relax)
            ib = self._interval(self.lin(b), relax)
            for (pl, ph), (ql, qh) in ((ia, ib), (ib, ia)):
                if pl is not None and ph is not None and pl.same(ph):
                    p, rl, rh = self._ring(pl), self._ring(ql), self._ring(qh)
                    if p is None or rl is None or rh is None:
                        continue
                    a, b = self._math(self.mul_forms(p, rl)), self._math(self.mul_forms(p, rh))
                    if self.decide(GE, pl) is True:
                        lo, hi = a, b
                    elif self.decide(LE, pl) is True:
                        lo, hi = b, a
                    else:  # the sign of p is unknown: both corners
                        lo, hi = self._mm(True, a, b), self._mm(False, a, b)
                    break
            else:
                if all(x is not None and x.is_const for x in (*ia, *ib)):
                    ps = [x.const * y.const for x in ia for y in ib]
                    lo, hi = LinForm(dt, {}, min(ps), True), LinForm(dt, {}, max(ps), True)
        # a constant bound from the plain analysis is never worse than nothing
        if lo is None or (lo.is_const and clo is not None and clo.const > lo.const):
            lo = clo
        if hi is None or (hi.is_const and chi is not None and chi.const < hi.const):
            hi = chi
        return lo, hi

    # comparisons -------------------------------------------------------------------------------
    def _v_cmp(self, e: CmpOp) -> Expr:
        t = type(e)
        a, b = e.a, e.b
        if a.dtype == b.dtype and _is_int(a.dtype):
            return self.compare(t, self.lin(a), self.lin(b))
        sa, sb = self.visit(a), self.visit(b)
        if type(sa) is Const and type(sb) is Const:
            va, vb = sa.value, sb.value
            if isinstance(va, float) or isinstance(vb, float):
                if sa.dtype == sb.dtype and sa.dtype in ("float32", "float64"):
                    return _bool(compare_values(t, float(va), float(vb)))
            elif sa.dtype == sb.dtype:
                return _bool(compare_values(t, int(va), int(vb)))
        if sa.dtype == sb.dtype and sa.dtype == "bool" and t in (EQ, NE):
            if type(sb) is Const and type(sa) is not Const:
                sa, sb = sb, sa
            if type(sa) is Const:  # True == x -> x, False == x -> !x
                want = bool(sa.value) == (t is EQ)
                return sb if want else self._v_Not(Not(sb))
        if sa is a and sb is b:
            return e
        return t(sa, sb)

    _v_EQ = _v_NE = _v_LT = _v_LE = _v_GT = _v_GE = _v_cmp

    def compare(self, t, fa: LinForm, fb: LinForm) -> Expr:
        """The simplified ``fa OP fb`` of two int forms (see the module doc)."""
        dt = fa.dtype
        ea, eb = self.an.exact(fa), self.an.exact(fb)
        if t is EQ or t is NE:
            # a == b  <=>  a - b == 0 in the ring: exact even when the sides wrap
            d = LinForm.combine(dt, [(fa, 1), (fb, -1)])
            if d.is_const:
                return _bool((d.const == 0) == (t is EQ))
            if ea is None or eb is None:  # split in the ring (no gcd division there)
                lo, hi = self.an.form_bound(d)  # bounds of the wrapped difference
                if (lo is not None and lo > 0) or (hi is not None and hi < 0):
                    return _bool(t is NE)
                if all(c < 0 for _, c in d.terms.values()):
                    d = d.scale(-1)
                left = self._normalize(LinForm(dt, {kk: v for kk, v in d.terms.items() if v[1] > 0}, 0))
                right = self._normalize(LinForm(dt, {kk: (x, -c) for kk, (x, c) in d.terms.items() if c < 0},
                                                -d.const))
                if self.an.exact(left) is not None and self.an.exact(right) is not None:
                    return self.compare(t, left, right)  # the new sides cannot wrap: decide
                return t(self.expr(left), self.expr(right))
        if ea is None or eb is None:
            return t(self.expr(fa), self.expr(fb))
        d = LinForm.combine(dt, [(ea, 1), (eb, -1)], math=True)
        r = self.decide(t, d)
        if r is not None:
            return _bool(r)
        orig = t
        # canonical: positive terms OP negated negative terms + constant
        if all(c < 0 for _, c in d.terms.values()):
            d = d.scale(-1)
            t = _FLIP[t]
        g = d.coef_gcd()
        k = d.const
        dd = LinForm(dt, {kk: (x, c // g) for kk, (x, c) in d.terms.items()}, 0, True)
        if t is LT:
            rhs = _ceil_div(-k, g)
        elif t is LE:
            rhs = (-k) // g
        elif t is GT:
            rhs = (-k) // g
        elif t is GE:
            rhs = _ceil_div(-k, g)
        else:
            rhs = (-k) // g  # k % g == 0 here, decide() handles the rest
        left = LinForm(dt, {kk: v for kk, v in dd.terms.items() if v[1] > 0}, 0, True)
        right = LinForm(dt, {kk: (x, -c) for kk, (x, c) in dd.terms.items() if c < 0}, rhs, True)
        if not (self.an.fits(left) and self.an.fits(right)):
            return orig(self.expr(fa), self.expr(fb))
        left, right = self._normalize(left.as_ring()), self._normalize(right.as_ring())
        return t(self.expr(left), self.expr(right))

    # logic -----------------------------------------------------------------------------
    def _v_Not(self, e: Not) -> Expr:
        a = self.visit(e.a)
        if type(a) is Const:
            return _bool(not a.value)
        n = self._negate(a)
        if n is not None:
            return n
        return e if a is e.a else Not(a)

    @staticmethod
    def _negate_cmp(a: Expr):
        """``!a`` for an already simplified comparison, built structurally: the
        canonical sides of ``a < b`` are those of ``a >= b`` too.  None otherwise."""
        t = type(a)
        if t is EQ or t is NE or (isinstance(a, CmpOp) and _is_int(a.a.dtype)):
            return _NEGATE[t](a.a, a.b)
        if t is Not:
            return a.a
        return None

    def _negate(self, a: Expr):
        """``!a`` without a Not node, or None when that needs one."""
        t = type(a)
        if type(a) is Const:
            return _bool(not a.value)
        if t is Not:
            return a.a
        if t in (EQ, NE) or (issubclass(t, CmpOp) and _is_int(a.a.dtype)):
            return self.visit(_NEGATE[t](a.a, a.b))
        if t is And or t is Or:
            x, y = self._negate(a.a), self._negate(a.b)
            if x is None or y is None:
                return None
            return self.visit(Or(x, y) if t is And else And(x, y))
        return None

    def _v_And(self, e) -> Expr:
        return self._logic(e, True)

    def _v_Or(self, e) -> Expr:
        return self._logic(e, False)

    def _logic(self, e, is_and: bool) -> Expr:
        a, b = self.visit(e.a), self.visit(e.b)
        absorbing, neutral = (False, True) if is_and else (True, False)
        for x, y in ((a, b), (b, a)):
            if type(x) is Const:
                return _bool(absorbing) if bool(x.value) == absorbing else y
        key = self.an.key
        if key(a) == key(b):
            return a
        for x, y in ((a, b), (b, a)):  # a && !a, a || !a
            nx = self._negate_cmp(x)
            if nx is not None and key(nx) == key(y):
                return _bool(absorbing)
        merged = self._merge_bounds(a, b, is_and)
        if merged is not None:
            return merged
        if a is e.a and b is e.b:
            return e
        return (And if is_and else Or)(a, b)

    def _as_bound(self, c):
        """``(key of side, side expr, lo, hi)`` for ``side OP const`` (int comparisons)."""
        t = type(c)
        if t not in (LT, LE, GT, GE, EQ) or not _is_int(c.a.dtype) or type(c.b) is not Const:
            return None
        v = int(c.b.value)
        lo = hi = None
        if t is LT:
            hi = v - 1
        elif t is LE:
            hi = v
        elif t is GT:
            lo = v + 1
        elif t is GE:
            lo = v
        else:
            lo = hi = v
        return self.an.key(c.a), c.a, lo, hi

    def _merge_bounds(self, a, b, is_and: bool):
        ba, bb = self._as_bound(a), self._as_bound(b)
        if ba is None or bb is None or ba[0] != bb[0]:
            return None
        _, side, alo, ahi = ba
        _, _, blo, bhi = bb

        def contains(olo, ohi, ilo, ihi):  # [ilo, ihi] within [olo, ohi]; None = infinite
            return (olo is None or (ilo is not None and olo <= ilo)) and \
                (ohi is None or (ihi is not None and ihi <= ohi))

        if is_and:
            lo = alo if blo is None else (blo if alo is None else max(alo, blo))
            hi = ahi if bhi is None else (bhi if ahi is None else min(ahi, bhi))
            if lo is not None and hi is not None and lo > hi:
                return _FALSE
            # one implies the other: keep the stronger
            if (lo, hi) == (alo, ahi):
                return a
            if (lo, hi) == (blo, bhi):
                return b
            return None
        # or: one contains the other -> the weaker; complementary half-lines -> True
        if contains(alo, ahi, blo, bhi):
            return a
        if contains(blo, bhi, alo, ahi):
            return b
        # (-inf, h] | [l, inf) with l <= h + 1 covers everything
        for (l1, h1), (l2, h2) in (((alo, ahi), (blo, bhi)), ((blo, bhi), (alo, ahi))):
            if l1 is None and h2 is None and h1 is not None and l2 is not None and l2 <= h1 + 1:
                return _TRUE
        return None

    def _learn(self, c: Expr, truth: bool) -> None:
        t = type(c)
        if t is Const:
            return
        if (t is And and truth) or (t is Or and not truth):
            self._learn(c.a, truth)
            self._learn(c.b, truth)
            return
        if t is Not:
            self._learn(c.a, not truth)
            return
        key = self.an.key
        self._facts[key(c)] = truth
        n = self._negate_cmp(c)
        if n is not None:
            self._facts[key(n)] = not truth
        cmp = c if truth else n
        if cmp is not None and isinstance(cmp, CmpOp) and _is_int(cmp.a.dtype):
            self._refine(cmp)
            self._learn_linear(cmp)
        self._memo.clear()
        self._lmemo.clear()

    def _learn_linear(self, c: CmpOp) -> None:
        """Keep the true int comparison ``c`` as forms known to be >= 0 (exact sides
        only: a side that may wrap says nothing about the math values)."""
        t = type(c)
        if t is NE or c.a.dtype != c.b.dtype:
            return
        ea, eb = self.an.exact(self.lin(c.a)), self.an.exact(self.lin(c.b))
        if ea is None or eb is None:
            return
        d = LinForm.combine(ea.dtype, [(ea, 1), (eb, -1)], math=True)
        if d.is_const:
            return
        new = []
        if t is GE or t is EQ:
            new.append(d)
        if t is GT:
            new.append(d.add_const(-1))
        if t is LE or t is EQ:
            new.append(d.scale(-1))
        if t is LT:
            new.append(d.scale(-1).add_const(-1))
        self._lin_facts = self._lin_facts + tuple(new)

    def _refine(self, c: CmpOp) -> None:
        """Tighten the range of a lone variable on either side of a known comparison."""
        t = type(c)
        an = self.an
        for side, other, tt in ((c.a, c.b, t), (c.b, c.a, _FLIP[t])):
            if type(side) is not Var or side in an.free_vars(other) or other.dtype != side.dtype:
                continue
            # no cycles: a variable of `other` whose range mentions `side` (x == y
            # binds x to y, and then must not bind y to x)
            cyclic = False
            for w in an.free_vars(other):
                r = an.var_range(w)
                if r is not None and any(b is not None and side in an.free_vars(b) for b in r):
                    cyclic = True
                    break
            if cyclic:
                continue
            fo = self.lin(other)
            lo = hi = None
            if tt is LT:
                hi = fo.add_const(-1)
            elif tt is LE:
                hi = fo
            elif tt is GT:
                lo = fo.add_const(1)
            elif tt is GE:
                lo = fo
            elif tt is EQ:
                lo = hi = fo
            else:
                continue
            old = an.var_range(side) or (None, None)
            nlo = self._tighten(old[0], lo, False)
            nhi = self._tighten(old[1], hi, True)
            an.bind_bounds(side, nlo, nhi)

    def _tighten(self, old: Expr | None, new: LinForm | None, upper: bool):
        """The tighter of two bounds; a constant bound is never replaced by a symbolic
        one (it stays inside a min/max), so constant bounds survive."""
        if new is None:
            return old
        if old is None:
            return self.expr(new)
        fo = self.lin(old)
        if fo.is_const and not new.is_const:
            return (Min if upper else Max)(old, self.expr(new), old.dtype)
        return self.expr(self.minmax(upper, fo, new))

    # other expressions ---------------------------------------------------------------------
    def _generic(self, e: Expr) -> Expr:
        changed = {}
        for name in child_fields(type(e)):
            v = getattr(e, name)
            if isinstance(v, Expr):
                nv = self.visit(v)
            elif isinstance(v, tuple) and v and isinstance(v[0], Expr):
                items = tuple(self.visit(x) if isinstance(x, Expr) else x for x in v)
                nv = v if all(x is y for x, y in zip(items, v)) else items
            else:
                continue
            if nv is not v:
                changed[name] = nv
        if not changed:
            return e
        import dataclasses

        return dataclasses.replace(e, **changed)

    def _v_Select(self, e: Select) -> Expr:
        c = self.visit(e.cond)
        if type(c) is Const:
            return self.visit(e.true_value if c.value else e.false_value)
        with self.assume(c, True):
            tv = self.visit(e.true_value)
        with self.assume(c, False):
            fv = self.visit(e.false_value)
        if self.an.key(tv) == self.an.key(fv) and tv.dtype == fv.dtype:
            return tv
        if type(tv) is Const and type(fv) is Const and tv.dtype == "bool":
            return c if tv.value else self._v_Not(Not(c))
        if c is e.cond and tv is e.true_value and fv is e.false_value:
            return e
        return Select(c, tv, fv, e.dtype)

    def _v_Cast(self, e: Cast) -> Expr:
        v = self.visit(e.value)
        dt = e.dtype
        if v.dtype == dt:
            return v
        if type(v) is Const:
            r = _cast_const(v.value, v.dtype, dt)
            if r is not None:
                return Const(r, dt)
        if _is_int(dt) and type(v) is Cast and v.value.dtype == dt and _is_int(v.dtype):
            # int32(int64(x)) -> x: widening then narrowing back is the identity
            lo, hi = dtype_limits(dt)
            wlo, whi = dtype_limits(v.dtype)
            if wlo <= lo and hi <= whi:
                return v.value
        return e if v is e.value else Cast(v, dt)

    def _v_Call(self, e: Call) -> Expr:
        args = tuple(self.visit(a) for a in e.args)
        dt = e.dtype
        if len(args) == 1:
            a = args[0]
            if e.op == "abs":
                if type(a) is Const:
                    if _is_int(dt):
                        return Const(wrap(abs(int(a.value)), dt), dt)
                    if _dt.is_float(dt) and not _dt.is_storage_float(dt):
                        return Const(abs(float(a.value)), dt)
                elif _is_int(dt) and self.prove_nonneg(self.lin(a)):
                    return a
            if e.op in ("floor", "ceil", "round") and type(a) is Const and dt in ("float32", "float64"):
                v = float(a.value)
                if math.isfinite(v):
                    r = {"floor": math.floor, "ceil": math.ceil, "round": round}[e.op](v)
                    return Const(math.copysign(float(r), v) if r == 0 else float(r), dt)
        if all(x is y for x, y in zip(args, e.args)):
            return e
        return Call(e.op, args, dt)

    def _v_Let(self, e: Let) -> Expr:
        v = self.visit(e.value)
        if type(v) is Const or type(v) is Var:
            return self.visit(substitute(e.body, {e.var: v}))
        with self.scope():
            if _is_int(v.dtype):
                lo, hi = self.an.cbound(v)
                self.bind(e.var, None if lo is None else Const(lo, v.dtype),
                          None if hi is None else Const(hi, v.dtype))
            body = self.visit(e.body)
        if e.var not in self.an.free_vars(body):
            return body
        if v is e.value and body is e.body:
            return e
        return Let(e.var, v, body, e.dtype)

    def _v_Reduce(self, e: Reduce) -> Expr:
        with self.scope():
            for iv in e.axis:
                if iv.dom is not None:
                    self.an.bind(iv.var, iv.dom)
            self._memo.clear()
            self._lmemo.clear()
            src = self.visit(e.source)
            cond = self.visit(e.condition)
        if src is e.source and cond is e.condition:
            return e
        return Reduce(e.combiner, src, e.axis, cond, e.dtype, e.value_index)

    # float / bool arithmetic (int arithmetic goes through lin()) ----------------------------
    def _v_arith(self, e) -> Expr:
        t = type(e)
        a, b = self.visit(e.a), self.visit(e.b)
        dt = e.dtype
        if _dt.is_float(dt):
            ca = float(a.value) if type(a) is Const else None
            cb = float(b.value) if type(b) is Const else None
            if ca is not None and cb is not None and a.dtype == dt and b.dtype == dt:
                r = _fold_float(t, ca, cb, dt)
                if r is not None:
                    return Const(r, dt)
            if a.dtype == dt and b.dtype == dt:
                neg0 = lambda v: v == 0.0 and math.copysign(1.0, v) < 0  # noqa: E731
                if t is Mul:
                    if cb == 1.0:
                        return a
                    if ca == 1.0:
                        return b
                elif t is Div and cb == 1.0:
                    return a
                elif t is Add:
                    if cb is not None and neg0(cb):
                        return a
                    if ca is not None and neg0(ca):
                        return b
                elif t is Sub and cb is not None and cb == 0.0 and not neg0(cb):
                    return a
                elif (t is Min or t is Max) and self.an.key(a) == self.an.key(b):
                    return a
        if a is e.a and b is e.b:
            return e
        return t(a, b, dt)

    _v_Add = _v_Sub = _v_Mul = _v_Div = _v_Min = _v_Max = _v_FloorDiv = _v_FloorMod = _v_arith


def _reduce_mod(a: int, c: int) -> int:
    """The residue of ``a`` modulo ``c`` of least magnitude, unless ``|a| < c`` already
    (``-1`` stays ``-1``, ``9 -> 1``, ``15 -> -1`` for ``c = 8``)."""
    if -c < a < c:
        return a
    r = a % c
    return r - c if r > c // 2 else r


def _tdiv(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q




def _decide_bounds(t, lo, hi):
    """``d OP 0`` from bounds ``lo <= d <= hi`` (None: unknown): True, False or None."""
    if t is LT:
        if hi is not None and hi < 0:
            return True
        if lo is not None and lo >= 0:
            return False
    elif t is LE:
        if hi is not None and hi <= 0:
            return True
        if lo is not None and lo > 0:
            return False
    elif t is GT:
        if lo is not None and lo > 0:
            return True
        if hi is not None and hi <= 0:
            return False
    elif t is GE:
        if lo is not None and lo >= 0:
            return True
        if hi is not None and hi < 0:
            return False
    elif t is EQ or t is NE:
        if lo is not None and hi is not None and lo == hi == 0:
            return t is EQ
        if (lo is not None and lo > 0) or (hi is not None and hi < 0):
            return t is NE
    return None


# ---------------------------------------------------------------------------------
# statements


#: pragmas that hold for the whole nest under their loop, not for the loop itself
#: (``fp_contract``: ``a*b + c`` anywhere in it may be one FMA; ``fp_reciprocal``: ``a / b``
#: may be ``a * (1 / b)``): they stay when that
#: loop is removed for having one iteration (a pragma on a loop's own behaviour, such as
#: ``unroll_count``, goes with it)
NEST_PRAGMAS = frozenset({"pragma_fp_contract", "pragma_fp_reciprocal",
                          "pragma_nontemporal", "pragma_masked_wide_loads",
                          "pragma_load_each_use"})


def _holding(c: Expr, body: Stmt, truth: bool):
    """``(cond, truth)`` for :meth:`Simplifier.assume` over ``body``: what of the
    condition ``c`` being ``truth`` still holds everywhere in ``body``.  A condition that
    reads memory says nothing after ``body`` writes that memory (``if (A[0] >= 5) {
    A[0] = 0; ... A[0] >= 1 ... }``): its parts (the terms of an ``&&`` known true) that
    read a buffer ``body`` stores to, or any buffer where ``body`` calls out (an extern
    function, a tensor intrinsic, a barrier after which other threads' stores are
    seen), are left out; ``(True, True)`` when nothing is left."""
    if not collect(c, _is_load):
        return c, truth
    written = _written(body)
    parts = _conjuncts(c) if truth else [c]
    kept = [p for p in parts if written is not None and not any(
        x.buffer.name in written for x in collect(p, _is_load))]
    if len(kept) == len(parts):
        return c, truth
    out = kept[0] if kept else Const(1, "bool")
    for p in kept[1:]:
        out = And(out, p)
    return out, (truth if kept else True)


def _is_load(x) -> bool:
    return isinstance(x, BufferLoad)


def _conjuncts(c: Expr) -> list:
    if type(c) is And:
        return _conjuncts(c.a) + _conjuncts(c.b)
    return [c]


def _written(body: Stmt):
    """The names of the buffers ``body`` stores to, or None where it calls out (what
    the call writes is not in the IR)."""
    names = set()
    for x in collect(body, lambda n: isinstance(n, (BufferStore, ExternCall,
                                                    TensorIntrinCall, Evaluate))):
        if type(x) is BufferStore:
            names.add(x.buffer.name)
        else:
            return None
    return names


class StmtSimplifier(Mutator):
    """Simplifies statements, learning loop ranges and branch conditions on the way."""

    def __init__(self, ex: Simplifier):
        self.ex = ex

    def visit(self, node):
        if isinstance(node, Expr):
            return self.ex.visit(node)
        return super().visit(node)

    def visit_For(self, s: For):
        ex = self.ex
        mn, ext = ex.visit(s.min), ex.visit(s.extent)
        if _is_int(ext.dtype):
            fe = ex.lin(ext)
            ee = ex.an.exact(fe)
            if (fe.is_const and fe.value <= 0) or (ee is not None and ex.decide(LE, ee) is True):
                return _EMPTY
            if fe.is_const and fe.value == 1 and s.kind == "serial":
                return self.visit(substitute(s.body, {s.var: mn}))
            if s.kind == "unrolled" and not fe.is_const:
                ext = self._unroll_bound(ext, fe)
        with ex.scope():
            if _is_int(mn.dtype) and _is_int(ext.dtype) and mn.dtype == ext.dtype:
                hi = ex.expr(LinForm.combine(mn.dtype, [(ex.lin(mn), 1), (ex.lin(ext), 1)]).add_const(-1))
                ex.bind(s.var, mn, hi)
            body = self.visit(s.body)
        if _is_empty(body) and s.kind != "thread":
            return _EMPTY
        if mn is s.min and ext is s.extent and body is s.body:
            return s
        return For(s.var, mn, ext, s.kind, body, s.thread_tag)

    def _unroll_bound(self, ext: Expr, fe: LinForm) -> Expr:
        """The symbolic extent of an unrolled loop, with the constant bound that only the
        enclosing loops prove made explicit: a tail part's ``n - i.outer*14`` (``i.outer >=
        n // 14``) becomes ``min(n - i.outer*14, 13)``, which code generation unrolls as
        13 guarded copies (it sees no loop around; without the bound the loop stays a loop
        and its register tile goes to memory)."""
        top = self.ex.an.cbound(ext)[1]
        if top is not None and top <= UNROLL_BOUND_MAX:
            return ext
        hi = self.ex.best_bound(fe)[1]
        if hi is None or hi > UNROLL_BOUND_MAX:
            return ext
        return Min(ext, Const(max(hi, 0), ext.dtype), ext.dtype)

    def visit_IfThenElse(self, s: IfThenElse):
        ex = self.ex
        c = ex.visit(s.cond)
        if type(c) is Const:
            if c.value:
                return self.visit(s.then_case)
            return _EMPTY if s.else_case is None else self.visit(s.else_case)
        with ex.assume(*_holding(c, s.then_case, True)):
            then = self.visit(s.then_case)
        els = None
        if s.else_case is not None:
            with ex.assume(*_holding(c, s.else_case, False)):
                els = self.visit(s.else_case)
            if _is_empty(els):
                els = None
        if _is_empty(then):
            if els is None:
                return _EMPTY
            return IfThenElse(ex.visit(Not(c)), els, None)
        if c is s.cond and then is s.then_case and els is s.else_case:
            return s
        return IfThenElse(c, then, els)

    def visit_SeqStmt(self, s: SeqStmt):
        out = []
        changed = False
        for x in s.seq:
            y = self.visit(x)
            if y is not x:
                changed = True
            if type(y) is SeqStmt:
                changed = True
                out.extend(y.seq)
            else:
                out.append(y)
        if not changed:
            return s
        if len(out) == 1:
            return out[0]
        return SeqStmt(tuple(out))

    def visit_LetStmt(self, s: LetStmt):
        ex = self.ex
        v = ex.visit(s.value)
        if type(v) is Const or type(v) is Var:
            return self.visit(substitute(s.body, {s.var: v}))
        with ex.scope():
            if _is_int(v.dtype) and v.dtype == s.var.dtype:
                lo, hi = ex.an.cbound(v)
                ex.bind(s.var, None if lo is None else Const(lo, v.dtype),
                        None if hi is None else Const(hi, v.dtype))
            body = self.visit(s.body)
        if _is_empty(body):
            return _EMPTY

        if not uses_var(body, s.var):
            return body
        if v is s.value and body is s.body:
            return s
        return LetStmt(s.var, v, body)

    def visit_AssertStmt(self, s: AssertStmt):
        c = self.ex.visit(s.cond)
        if type(c) is Const and c.value:
            return self.visit(s.body)
        with self.ex.assume(*_holding(c, s.body, True)):
            body = self.visit(s.body)
        if c is s.cond and body is s.body:
            return s
        return AssertStmt(c, s.message, body)

    def visit_Allocate(self, s: Allocate):
        body = self.visit(s.body)
        if _is_empty(body):
            return _EMPTY
        return s if body is s.body else Allocate(s.buffer, body)

    def visit_AttrStmt(self, s: AttrStmt):
        value = self.ex.visit(s.value) if isinstance(s.value, Expr) else s.value
        body = self.visit(s.body)
        if _is_empty(body):
            return _EMPTY
        if s.key.startswith("pragma_") and s.key not in NEST_PRAGMAS:
            was, now = annotated_loop(s.body), annotated_loop(body)
            if was is not None and (now is None or now.var is not was.var):
                # the annotated loop was removed (one iteration): its pragma must not pass
                # to whatever loop now comes first (a pragma of the whole nest stays)
                return body
        if value is s.value and body is s.body:
            return s
        return AttrStmt(s.key, value, body)

    def visit_Evaluate(self, s: Evaluate):
        v = self.ex.visit(s.value)
        if type(v) is Const:
            return _EMPTY
        return s if v is s.value else Evaluate(v)


# ---------------------------------------------------------------------------------
# entry point


def simplify(node, ranges=None):
    """Simplify an Expr, a Stmt or a PrimFunc (see the module doc for the rules).

    ``ranges`` maps Vars (or IterVars) to ``Range(min, extent)`` (or ``Interval``):
    what is known about the free variables.  Loop counters of the statements are
    learned as the simplifier descends into their loops.
    """
    ex = Simplifier(Analyzer(ranges))
    if isinstance(node, IterVar):
        node = node.var
    if isinstance(node, (bool, int, float)):
        node = as_expr(node)
    if isinstance(node, Expr):
        return ex.visit(node)
    if isinstance(node, (Stmt, PrimFunc)):
        return StmtSimplifier(ex).visit(node)
    raise ExprError(f"simplify() takes an Expr, a Stmt or a PrimFunc, got {type(node).__name__}")


def affine_steps(exprs, vars, ranges=None, zero=()):
    """``(base, steps)`` when every expression of ``exprs`` is affine in ``vars`` with
    constant integer coefficients, else None: ``base[j]`` is ``exprs[j]`` with ``vars``
    (and the variables ``zero``) at 0, simplified under ``ranges``, and ``steps[i][j]``
    how much ``exprs[j]`` grows when ``vars[i]`` grows by one.  An entry of ``vars``
    that is not a Var (an axis with no loop) steps nothing.  Found by evaluating at the
    unit points and checking that the rest simplifies to 0 (``f // 9 * 9 + f % 9`` is
    ``f``)."""
    at0 = {v: Const(0, v.dtype) for v in list(zero) + [v for v in vars if isinstance(v, Var)]}
    base = [simplify(substitute(e, at0), ranges) for e in exprs]
    steps = []
    for v in vars:
        if not isinstance(v, Var):
            steps.append((0,) * len(exprs))
            continue
        at = dict(at0)
        at[v] = Const(1, v.dtype)
        row = []
        for e, b in zip(exprs, base):
            c = simplify(substitute(e, at) - b, ranges)
            if not isinstance(c, Const):
                return None
            row.append(int(c.value))
        steps.append(tuple(row))
    for j, (e, b) in enumerate(zip(exprs, base)):
        rest = e - b
        for v, row in zip(vars, steps):
            if row[j] and isinstance(v, Var):
                rest = rest - Const(row[j], v.dtype) * v
        r = simplify(rest, ranges)
        if not (isinstance(r, Const) and r.value == 0):
            return None
    return base, tuple(steps)


# what the interval analysis uses from this module (tecomp.ir.arith.SIMPLIFY)
SIMPLIFY.simplify = simplify
SIMPLIFY.Simplifier = Simplifier
