"""Reads that are provably out of range, caught when a compute is defined.

A read ``T[idx]`` that is always evaluated (not inside an ``if_then_else`` branch, not in
a reduction restricted by ``where=``: those below) is evaluated at the corners of the
compute's iteration domain (the axes with constant extents it depends on).  A corner whose index falls outside
``T``'s constant extent is a real iteration that reads out of range: :class:`ShapeError`
names the compute, the read, the dimension, the value and the iteration.  For affine
indices (the usual case) the corners are where the extremes are, so every such read is
found.  For the others (``%``, ``i * i``, a narrowing cast such as ``int8(i)`` that wraps
inside the domain) the corners may miss the extremes: the index is evaluated at every
point of its variables' domain where there are at most :data:`_MAX_POINTS` of them (a
read outside there is as real).  A read under an ``if_then_else`` branch or a
reduction's ``where=`` is judged at the points where its conditions hold
(:func:`guarded_load_error`).
"""
from __future__ import annotations

import itertools

import numpy as np

from ..errors import ShapeError
from ..ir import dtype as _dt, op as _op
from ..ir.arith import Analyzer, Interval, prove
from ..ir.expr import (EQ, GE, GT, LE, LT, NE, Add, And, Cast, Const, FloorDiv, FloorMod, Max,
                       Min, Mul, Not, Or, Reduce, Sub, Var)
from ..ir.functor import Visitor, collect, free_vars, substitute
from ..ir.printer import to_str
from ..ir.simplify import simplify

_MAX_VARS = 8
#: an index that is not monotone in each variable (or casts to a narrower integer) is
#: evaluated at every point of its variables' domain where there are at most this many
_MAX_POINTS = 1 << 16


def _int_dtype(dtype: str) -> bool:
    return dtype.startswith(("int", "uint"))


def narrowing(c) -> bool:
    """Whether the Cast ``c`` between integer dtypes may change a value (its operand's
    dtype holds values the target's does not: ``int8(i)`` of an int32 ``i`` wraps 128
    to -128)."""
    if not (_int_dtype(c.dtype) and _int_dtype(c.value.dtype)):
        return False
    lo, hi = _dt.int_limits(c.value.dtype)
    tlo, thi = _dt.int_limits(c.dtype)
    return lo < tlo or hi > thi


def _wrap(v, dtype: str):
    """``v`` (an int or an object array of them) wrapped into the integer ``dtype``."""
    lo, hi = _dt.int_limits(dtype)
    return (v - lo) % (hi - lo + 1) + lo


def _eval(e, env):
    """The value of an integer index expression (casts wrap as the IR says), or None if
    it is not one we evaluate.  ``env`` gives each variable an int, or an object array of
    them (then the value is an array: every point at once)."""
    t = type(e)
    if t is Const:
        return e.value if isinstance(e.value, int) and not isinstance(e.value, bool) else None
    if t is Var:
        return env.get(e)
    if t is Cast:
        if not _int_dtype(e.dtype):
            return None
        v = _eval(e.value, env)
        return None if v is None else _wrap(v, e.dtype)
    if t in (Add, Sub, Mul, FloorDiv, FloorMod, Min, Max):
        a, b = _eval(e.a, env), _eval(e.b, env)
        if a is None or b is None:
            return None
        if t is Add:
            return a + b
        if t is Sub:
            return a - b
        if t is Mul:
            return a * b
        if t is Min or t is Max:
            if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
                return np.minimum(a, b) if t is Min else np.maximum(a, b)
            return min(a, b) if t is Min else max(a, b)
        if (b == 0).any() if isinstance(b, np.ndarray) else b == 0:
            return None
        return a // b if t is FloorDiv else a % b
    return None


def _corners_suffice(idx) -> bool:
    """Whether ``idx`` takes its extremes over a box at the box's corners: monotone in
    each variable (:func:`_directions`) and without a cast that may wrap."""
    return _directions(idx, set(free_vars(idx))) is not None and \
        not collect(idx, lambda n: type(n) is Cast and narrowing(n))


def _bounded(idx, vs, corners, ext: int) -> bool:
    """Whether interval analysis proves ``idx`` in ``[0, ext)`` over the box ``corners``
    (``(lo, hi)`` per variable of ``vs``): ``i // 128 % 128`` of a reshape is, at no
    cost per point."""
    an = Analyzer()
    for x, (lo, hi) in zip(vs, corners):
        an.bind(x, (lo, hi))
    lo, hi = an.cbound(idx)
    return lo is not None and hi is not None and 0 <= lo and hi < ext


def _first_outside(idx, vs, corners, ext: int):
    """The first point (a tuple of ``vs``' values, in row-major order) of the box
    ``corners`` (``(lo, hi)`` per variable) where ``idx`` is outside ``[0, ext)``, and the
    index there; None where there is none (or the box has more than :data:`_MAX_POINTS`
    points, or ``idx`` is not one :func:`_eval` evaluates)."""
    count = 1
    for lo, hi in corners:
        count *= hi - lo + 1
    if count > _MAX_POINTS:
        return None
    axes = [np.arange(lo, hi + 1, dtype=np.int64).astype(object) for lo, hi in corners]
    grid = np.meshgrid(*axes, indexing="ij") if axes else []
    val = _eval(idx, dict(zip(vs, grid)))
    if not isinstance(val, np.ndarray):
        return None
    flat = val.ravel()
    bad = np.flatnonzero((flat < 0) | (flat >= ext))
    if not len(bad):
        return None
    at = np.unravel_index(int(bad[0]), val.shape)
    return tuple(int(g[at]) for g in grid), int(val.ravel()[bad[0]])


class _UnguardedLoads(Visitor):
    def __init__(self):
        self.loads = []

    def visit_ProducerLoad(self, e):
        self.loads.append(e)
        self.generic_visit(e)

    def visit_Select(self, e):  # lazy: only the condition is always evaluated
        self.visit(e.cond)

    def visit_Reduce(self, e):
        self.visit(e.condition)
        if isinstance(e.condition, Const) and e.condition.value is True:
            self.visit(e.source)


class _GuardedLoads(Visitor):
    """The reads evaluated only where conditions hold: ``(load, guards)``, ``guards`` a
    tuple of ``(condition, holds)`` (a branch of an ``if_then_else``, a reduction's
    ``where=``)."""

    def __init__(self):
        self.loads = []
        self.guards = ()

    def visit_ProducerLoad(self, e):
        if self.guards:
            self.loads.append((e, self.guards))
        self.generic_visit(e)

    def _under(self, guard, e):
        saved = self.guards
        self.guards = saved + (guard,)
        self.visit(e)
        self.guards = saved

    def visit_Select(self, e):
        self.visit(e.cond)
        self._under((e.cond, True), e.true_value)
        self._under((e.cond, False), e.false_value)

    def visit_Reduce(self, e):
        self.visit(e.condition)
        if isinstance(e.condition, Const) and e.condition.value is True:
            self.visit(e.source)
        else:
            self._under((e.condition, True), e.source)


_CMP = {EQ: np.equal, NE: np.not_equal, LT: np.less, LE: np.less_equal, GT: np.greater,
        GE: np.greater_equal}


def _eval_cond(c, env):
    """The value of the bool expression ``c`` (comparisons of integer index expressions,
    ``&``, ``|``, ``~``) at every point of ``env`` (see :func:`_eval`), or None."""
    t = type(c)
    if t is Const:
        return bool(c.value) if isinstance(c.value, bool) else None
    if t in _CMP:
        a, b = _eval(c.a, env), _eval(c.b, env)
        return None if a is None or b is None else np.asarray(_CMP[t](a, b), dtype=bool)
    if t is Not:
        a = _eval_cond(c.a, env)
        return None if a is None else np.logical_not(a)
    if t is And or t is Or:
        a, b = _eval_cond(c.a, env), _eval_cond(c.b, env)
        if a is None or b is None:
            return None
        return np.logical_and(a, b) if t is And else np.logical_or(a, b)
    return None


def _conjuncts(guards):
    """``guards`` (``(condition, holds)`` pairs) as a list of conditions that must all
    hold, ``&`` split apart."""
    out, todo = [], [c if holds else Not(c) for c, holds in guards]
    while todo:
        c = todo.pop()
        if type(c) is And:
            todo += [c.b, c.a]
        else:
            out.append(c)
    return out


def _points(vs, doms):
    """``{var: grid}`` over the constant domains of ``vs`` (every point), or None where a
    domain is not constant or there are more than :data:`_MAX_POINTS` points."""
    count, spans = 1, []
    for x in vs:
        dom = doms.get(x)
        if dom is None or not isinstance(dom.min, Const) or not isinstance(dom.extent, Const):
            return None
        count *= dom.extent.value
        if count > _MAX_POINTS:
            return None
        spans.append((dom.min.value, dom.min.value + dom.extent.value))
    axes = [np.arange(lo, hi, dtype=np.int64).astype(object) for lo, hi in spans]
    return dict(zip(vs, np.meshgrid(*axes, indexing="ij")))


def _holds_somewhere(conds, doms) -> bool:
    """Whether the conditions ``conds`` (their variables apart from the read's) hold
    together at some point: True where that cannot be evaluated (not a finding then)."""
    vs = []
    for c in conds:
        vs += [x for x in free_vars(c) if x not in vs]
    env = _points(vs, doms)
    if env is None:
        return True
    mask = np.ones(next(iter(env.values())).shape if env else (), dtype=bool)
    for c in conds:
        w = _eval_cond(c, env)
        if w is None:
            return True
        mask = mask & w
    return bool(np.any(mask))


def guarded_load_error(name: str, load, guards, doms):
    """As :func:`load_error`, for a read evaluated only where ``guards`` hold
    (:class:`_GuardedLoads`): its index outside the tensor at a point where they hold
    (``if_then_else(i < 8, A[i + 1], 0)`` over 8 rows of an ``A`` of 8 reads ``A[8]``),
    over constant extents and at most :data:`_MAX_POINTS` points of the index's
    variables and those of the conditions on them; None where there is none or the
    conditions are not ones :func:`_eval_cond` evaluates."""
    t = load.producer
    conds = _conjuncts(guards)
    for d, idx in enumerate(load.indices):
        ext = t.shape[d]
        if not isinstance(ext, Const) or isinstance(idx, Const) or not free_vars(idx) or \
                load_error(name, load, doms, only=d) is None:
            continue   # in range even where the conditions do not hold
        # the conditions on the index's variables (and on theirs, transitively); the
        # others only need to hold somewhere
        vs, mine, rest = list(free_vars(idx)), [], list(conds)
        grew = True
        while grew:
            grew = False
            for c in list(rest):
                cv = free_vars(c)
                if any(x in vs for x in cv):
                    mine.append(c)
                    rest.remove(c)
                    vs += [x for x in cv if x not in vs]
                    grew = True
        env = _points(vs, doms)
        if env is None:
            continue
        val = _eval(idx, env)
        if not isinstance(val, np.ndarray):
            continue
        mask = np.ones(val.shape, dtype=bool)
        for c in mine:
            w = _eval_cond(c, env)
            if w is None:
                break
            mask &= np.broadcast_to(w, val.shape)
        else:
            bad = np.flatnonzero((mask & ((val < 0) | (val >= ext.value))).ravel())
            if not len(bad) or not _holds_somewhere(rest, doms):
                continue
            at = np.unravel_index(int(bad[0]), val.shape)
            point = ", ".join(f"{x.name} = {int(env[x][at])}" for x in vs)
            v = int(val[at])
            where = " and ".join(to_str(c) if holds else f"not ({to_str(c)})"
                                 for c, holds in guards)
            return d, v, (
                f"compute {name}: the read {to_str(load)} is out of range where it is read "
                f"(where {where}): index {d} ({to_str(idx)}) is {v} at {point}, but "
                f"dimension {d} of tensor {t.name} has extent {ext.value}; fix the index "
                f"or the condition that guards it")
    return None


def check_reads_in_range(name: str, body, axis, defer=None, deferrable=None) -> None:
    """Raise ShapeError if an always-evaluated read of ``body`` is out of range at a corner
    of the domain of ``axis`` (and of the reduction's axes).

    With ``defer`` (a list): a read below 0 in the first dimension of a tensor for which
    ``deferrable(tensor)`` holds (a placeholder: it may be the state of a scan,
    ``state[t - 1, i]``, read only for ``t`` past the scan's first steps) is appended as
    ``(load, domains, message)`` instead, for ``tc.scan`` or ``create_schedule`` to judge."""
    doms = {iv.var: iv.dom for iv in axis}
    if isinstance(body, Reduce):
        for iv in body.axis:
            doms[iv.var] = iv.dom
    v = _UnguardedLoads()
    v.visit(body)
    g = _GuardedLoads()
    g.visit(body)
    found = [load_error(name, load, doms) for load in v.loads] + \
        [guarded_load_error(name, load, guards, doms) for load, guards in g.loads]
    for load, err in zip(v.loads + [load for load, _ in g.loads], found):
        if err is None:
            continue
        d, val, msg = err
        if defer is not None and d == 0 and val < 0 and deferrable(load.producer):
            defer.append((load, doms, msg))
            continue
        raise ShapeError(msg)


def load_error(name: str, load, doms, only=None):
    """``(dimension, value, message)`` of the first index of ``load`` out of range at a
    corner of ``doms`` (at any point, for an index whose extremes need not be at the
    corners: :func:`_first_outside`), or None."""
    t = load.producer
    for d, idx in enumerate(load.indices):
        ext = t.shape[d]
        if (only is not None and d != only) or not isinstance(ext, Const) or \
                isinstance(idx, Const):
            continue
        vs = free_vars(idx)
        if not vs or len(vs) > _MAX_VARS:
            continue
        corners = []
        for x in vs:
            dom = doms.get(x)
            if dom is None or not isinstance(dom.min, Const) or not isinstance(dom.extent, Const):
                break
            lo = dom.min.value
            corners.append((lo, lo + dom.extent.value - 1))
        else:
            found = None
            for point in itertools.product(*corners):
                val = _eval(idx, dict(zip(vs, point)))
                if val is None:
                    break
                if not 0 <= val < ext.value:
                    found = point, val
                    break
            else:
                if not _corners_suffice(idx) and not _bounded(idx, vs, corners, ext.value):
                    found = _first_outside(idx, vs, corners, ext.value)
            if found is not None:
                point, val = found
                at = ", ".join(f"{x.name} = {p}" for x, p in zip(vs, point))
                return d, val, (
                    f"compute {name}: the read {to_str(load)} is out of range: index "
                    f"{d} ({to_str(idx)}) is {val} at {at}, but dimension {d} of tensor "
                    f"{t.name} has extent {ext.value}; fix the index, or guard the read "
                    f"with tc.if_then_else(cond, {t.name}[...], 0) (padding)")
    return None


# ---------------------------------------------------------------------------------------
# reads whose range depends on the arguments: conditions checked at call time

#: at most this many corners of one read are turned into conditions (2**6)
_MAX_CORNER_VARS = 6


def _merge(a, b):
    """The directions of a sum of two expressions whose directions are ``a`` and ``b``."""
    if a is None or b is None:
        return None
    out = dict(a)
    for v, d in b.items():
        if v in out and (out[v] != d or d == "?"):
            return None   # increasing in one term, decreasing (or either) in the other
        out[v] = d
    return out


_FLIP = {"+": "-", "-": "+", "?": "?"}


def _directions(e, dom_vars):
    """How the integer expression ``e`` moves with each domain variable it uses, the
    others fixed: ``{var: "+"}`` (never decreases), ``"-"`` (never increases), ``"?"``
    (one or the other, by the values of the other variables: ``i * m``, ``i * j``); None
    when it may do both (``i % 3``, ``i * i``, ``i // 2 - i``).  An expression monotone
    in each variable has its extremes over a box at the box's corners."""
    t = type(e)
    if t is Const:
        return {} if isinstance(e.value, int) and not isinstance(e.value, bool) else None
    if t is Var:
        return {e: "+"} if e in dom_vars else {}
    if t is Cast:
        return _directions(e.value, dom_vars) if e.dtype.startswith("int") else None
    if t in (Add, Sub, Min, Max):
        a, b = _directions(e.a, dom_vars), _directions(e.b, dom_vars)
        if t is Sub and b is not None:
            b = {v: _FLIP[d] for v, d in b.items()}
        return _merge(a, b)
    if t is FloorDiv:
        if type(e.b) is Const and isinstance(e.b.value, int) and e.b.value > 0:
            return _directions(e.a, dom_vars)
        return None
    if t is Mul:
        a, b = _directions(e.a, dom_vars), _directions(e.b, dom_vars)
        if a is None or b is None or set(a) & set(b):
            return None
        out = {}
        for x, y, factor in ((a, b, e.b), (b, a, e.a)):
            if not x:
                continue
            if y or type(factor) is not Const:   # a factor of unknown sign
                out.update({v: "?" for v in x})
            elif factor.value > 0:
                out.update(x)
            elif factor.value < 0:
                out.update({v: _FLIP[d] for v, d in x.items()})
        return out
    return None


def symbolic_read_conditions(op, skip=(), ranges=None):
    """``[(expr, use)]``: the conditions ``expr >= 0`` on the arguments under which every
    always-evaluated read of the compute ``op`` is inside the tensor it reads, over the
    whole iteration domain, for the reads whose index or extent depends on a variable
    (a symbolic extent, a scalar parameter): ``A[i + m]``, or ``A[i]`` over 8 rows of an
    ``A`` of ``n``.  :func:`check_reads_in_range` judges the others when the compute is
    defined; these are only known when the kernel is called (lowering makes them
    ``ParamCheck`` conditions).  A read of a tensor in ``skip`` (a scan's state, read
    before its start by design) is left out, so is a read whose index is not monotone in
    each of the domain's variables (:func:`_directions`: ``%``, a data-dependent index):
    its extremes need not be at a corner.  ``ranges`` (``{var: Interval}``: the shape variables are never
    negative) proves conditions that always hold, which are left out.  Over a domain
    whose symbolic extent may be 0 every condition holds vacuously when it is 0: one is
    left out where it holds whenever the extents are >= 1, else it is kept as
    ``max(expr, -min(extents, 1)) >= 0``."""
    doms = {iv.var: iv.dom for iv in op.axis}
    for iv in getattr(op, "reduce_axis", ()):
        doms[iv.var] = iv.dom
    out, done = [], set()
    for body in op.bodies:
        v = _UnguardedLoads()
        v.visit(body)
        for load in v.loads:
            t = load.producer
            if any(t is s for s in skip):
                continue
            for d, idx in enumerate(load.indices):
                ext = t.shape[d]
                vs = [x for x in free_vars(idx) if x in doms]
                others = [x for x in free_vars(idx) if x not in doms]
                if not others and isinstance(ext, Const) and \
                        all(isinstance(doms[x].extent, Const) for x in vs):
                    continue   # a constant range: check_reads_in_range judged it
                if type(idx) is Var and idx in doms and _is_zero(doms[idx].min) and \
                        doms[idx].extent == ext:
                    continue   # an axis over its tensor's whole dimension (elementwise)
                if len(vs) > _MAX_CORNER_VARS or _directions(idx, set(doms)) is None:
                    continue
                key = (idx, ext, tuple((x, doms[x].min, doms[x].extent) for x in vs))
                if key in done:
                    continue   # the same index into the same extent over the same domain
                done.add(key)
                # a cast to a narrower integer (int32(k) of an int64 k) is monotone only
                # while its operand fits the target: conditions that it does at every
                # corner (the operand is monotone too), else int32(2**32) = 0 passed the
                # corners of a sum over 2**32 + 1 terms and the middle read outside
                casts = [c for c in collect(idx, lambda n: type(n) is Cast and narrowing(n))]
                sides = ([], [])
                fits = []
                for point in itertools.product(*[(False, True) for _ in vs]):
                    env, empty = {}, []
                    for x, hi in zip(vs, point):
                        dom = doms[x]
                        env[x] = _op.sub(_op.add(dom.min, dom.extent),
                                         Const(1, dom.extent.dtype)) if hi else dom.min
                        if not isinstance(dom.extent, Const):
                            empty.append(dom.extent)
                    at = substitute(idx, env)
                    where = ", ".join(f"{x.name} = {to_str(simplify(env[x]))}" for x in vs)
                    what = (f"the read {to_str(load)} of compute {op.name}"
                            f"{' at ' + where if where else ''}")
                    checks = [(0, at, f"index {d} of {what}, which must be >= 0"),
                              (1, _op.sub(_op.sub(ext, Const(1, ext.dtype)), at),
                               f"the room left in dimension {d} of {t.name} (extent "
                               f"{to_str(ext)}) after index {d} of {what}")]
                    for c in casts:
                        inner = substitute(c.value, env)
                        if _dt.bits(inner.dtype) < 64:
                            inner = _op.widen(inner, "int64")
                        lo, hi = _dt.int_limits(c.dtype)
                        cast = f"the value {to_str(c.value)} cast to {c.dtype} in {what}"
                        checks += [(2, _op.sub(inner, Const(lo, "int64")),
                                    f"{cast}, which must be >= {lo} (not wrap)"),
                                   (2, _op.sub(Const(hi, "int64"), inner),
                                    f"{cast}, which must be <= {hi} (not wrap)")]
                    for side, e, use in checks:
                        e = simplify(e)
                        if _holds_if_busy(e, empty, ranges):
                            continue
                        if side == 2:
                            fits.append((e, use, tuple(empty)))
                            continue
                        if isinstance(e, Const):   # out of range whatever the arguments
                            raise ShapeError(
                                f"compute {op.name}: the read {to_str(load)} is out of range "
                                f"for every value of the arguments (where the compute is not "
                                f"empty): {use} is {e.value}; fix the index, or guard the "
                                f"read with tc.if_then_else(cond, {t.name}[...], 0) (padding)")
                        sides[side].append((e, use, tuple(empty)))
                if any(isinstance(e, Const) for e, _, _ in fits):
                    # the cast wraps at a corner whatever the arguments: its extremes
                    # need not be at the corners (only a checked build checks the read)
                    continue
                for conds in sides + (fits,):
                    out.extend((_vacuous_when_empty(e, empty), use)
                               for e, use, empty in _strongest(conds, ranges))
    return out


def _vacuous_when_empty(e, empty):
    """``e``, or where the domain has symbolic extents ``empty``, ``max(e, -min(extents,
    1))``: >= 0 when one of them is 0 (no iteration reads), else exactly when ``e`` is."""
    if not empty:
        return e
    g = empty[0]
    for x in empty[1:]:
        g = _op.minimum(g, x)
    one = Const(1, g.dtype)
    return simplify(_op.maximum(e, _op.sub(Const(0, g.dtype), _op.minimum(g, one))))


def _is_zero(e) -> bool:
    return type(e) is Const and e.value == 0


def _nonneg(e, ranges) -> bool:
    return (isinstance(e, Const) and e.value >= 0) or prove(GE(e, Const(0, e.dtype)), ranges)


def _holds_if_busy(e, empty, ranges) -> bool:
    """Whether ``e >= 0`` whenever the symbolic extents ``empty`` are all >= 1 (the
    variables in ``ranges``): proved with the extents that are variables >= 1, or as
    ``e >= c * (E - 1)`` for an extent ``E`` and a small ``c`` (``2*((n+1)//2) - 2`` over
    ``(n + 1) // 2`` rows)."""
    if isinstance(e, Const):
        return e.value >= 0
    busy = dict(ranges or {})
    busy.update({x: Interval(1, None) for x in empty if isinstance(x, Var)})
    if _nonneg(e, busy):
        return True
    for x in empty:
        if isinstance(x, Var):
            continue
        below = _op.sub(x, Const(1, x.dtype))
        for c in (1, 2, 4):
            if _nonneg(simplify(_op.sub(e, _op.mul(Const(c, x.dtype), below))), ranges):
                return True
    return False


def _strongest(conds, ranges=None):
    """``conds`` (``[(expr, use, empty)]``, each ``expr >= 0`` where the extents
    ``empty`` are not 0) less those another implies (one that exceeds another by a
    constant >= 0, under the same extents)."""
    keep = []
    for i, (e, use, empty) in enumerate(conds):
        implied = False
        for j, (f, _, other) in enumerate(conds):
            if j == i or len(other) != len(empty) or \
                    not all(a is b for a, b in zip(other, empty)):
                continue
            diff = simplify(_op.sub(e, f))
            if isinstance(diff, Const) and (diff.value > 0 or (diff.value == 0 and j < i)) or \
                    not isinstance(diff, Const) and _holds_if_busy(diff, empty, ranges):
                implied = True
                break
        if not implied:
            keep.append((e, use, empty))
    return keep

