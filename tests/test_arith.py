"""Tests of tecomp.ir.arith: Interval, eval_interval (symbolic and constant bounds),
const_interval, prove/disprove, the overflow policy, the structural keys and linear
forms, and hypothesis properties (every sampled value lies inside the computed bounds,
symbolic bounds evaluated at the same point included; proofs hold at every point).

Hypothesis runs 200 examples per property by default; TECOMP_LONG_FUZZ=1 runs 5000.
"""
from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tecomp.errors import ExprError
from tecomp.ir import EQ, NE, Add, Buffer, BufferLoad, Const, Mul, Range, Sub, Var, op
from tecomp.ir.arith import Analyzer, Interval, LinForm, const_interval, disprove, eval_interval, prove
from test_simplify import (  # the reference evaluator and generators are shared
    _SETTINGS, DTYPES, UB, N_POINTS, R, RandChooser, ev, gen_bool, gen_int,
    gen_ranges, sample_points,
)

i, j, k, n, f = (Var(s) for s in "i j k n f".split())
io, ii = Var("i.outer"), Var("i.inner")


def itv(e, ranges=None, relax=None) -> str:
    return str(eval_interval(e, ranges or {}, relax))


# ---------------------------------------------------------------------------------
# Interval


def test_interval_api():
    a = Interval(0, 7)
    assert (a.lo_value, a.hi_value, a.is_const, a.is_bounded, a.is_point) == (0, 7, True, True, False)
    assert a.extent == 8 and a.contains(7) and not a.contains(8) and not a.contains(-1)
    assert a == Interval(Const(0), Const(7)) and hash(a) == hash(Interval(Const(0), Const(7)))
    assert a != Interval(0, 8)
    assert str(a) == "Interval[0, 7]"
    assert Interval.point(3).is_point and Interval.everything() == Interval(None, None)
    assert str(Interval(None, 4)) == "Interval[-inf, 4]"
    r = a.as_range()
    assert str(r.min) == "0" and str(r.extent) == "8"
    s = Interval(io * 8, io * 8 + 7)
    assert not s.is_const and s.lo_value is None and str(s.extent) == "8"
    assert s == Interval(io * 8, io * 8 + 7)  # structural, not identity
    assert Interval(io, io).is_point
    with pytest.raises(ExprError, match="unbounded"):
        Interval(0, None).as_range()
    with pytest.raises(AttributeError):
        a.lo = 3
    assert Interval.from_range(Range(io * 8, Const(8))) == Interval(io * 8, io * 8 + 7)


# ---------------------------------------------------------------------------------
# eval_interval


def test_symbolic_bounds_for_bound_inference():
    """the range of i.outer*8 + i.inner over i.inner in [0, 8), i.outer symbolic"""
    assert itv(io * 8 + ii, {ii: R(0, 8)}) == "Interval[i.outer*8, i.outer*8 + 7]"
    e = eval_interval(io * 8 + ii, {ii: R(0, 8)})
    assert str(e.extent) == "8" and str(e.as_range()) == "[i.outer*8, i.outer*8 + 8)"


def test_relax_selects_the_relaxed_vars():
    """vars in ranges but not in relax stay symbolic; relax=None relaxes all of ranges"""
    r = {ii: R(0, 8), io: R(0, 4)}
    assert itv(io * 8 + ii, r, {ii}) == "Interval[i.outer*8, i.outer*8 + 7]"
    assert itv(io * 8 + ii, r) == "Interval[0, 31]"
    assert itv(io * 8 + ii, r, set()) == "Interval[i.outer*8 + i.inner, i.outer*8 + i.inner]"
    assert itv(k, {}, {k}) == "Interval[-inf, +inf]"  # relaxed without a range
    assert itv(k) == "Interval[k, k]"


def test_bounds_of_div_mod_min_max():
    r = {ii: R(0, 8)}
    assert itv((io * 8 + ii) % 16, r) == "Interval[(i.outer % 2)*8, (i.outer % 2)*8 + 7]"
    assert itv((io * 8 + ii) // 16, r) == "Interval[i.outer // 2, i.outer // 2]"
    assert itv((io * 8 + ii) // 4, r) == "Interval[i.outer*2, i.outer*2 + 1]"
    assert itv(op.minimum(io * 8 + ii, 99), r) == "Interval[min(i.outer*8, 99), min(i.outer*8 + 7, 99)]"
    assert itv(op.minimum(io * 8 + ii, 99), {ii: R(0, 8), io: R(0, 13)}, {ii}) == \
        "Interval[i.outer*8, min(i.outer*8 + 7, 99)]"
    assert itv(i % 16, {i: R(0, 100)}) == "Interval[0, 15]"
    assert itv(i // 16, {i: R(-20, 100)}) == "Interval[-2, 4]"
    assert itv(op.truncmod(i, 8), {i: R(-20, 30)}) == "Interval[-7, 7]"


def test_bounds_with_symbolic_extents():
    assert itv(i * n + j, {j: Range(Const(0), n)}) == "Interval[i*n, i*n + n - 1]"
    assert itv(n - i, {i: R(0, 8)}) == "Interval[n - 7, n]"
    # the sign of n is unknown: both corners of i*n
    assert itv(i * n + j, {i: R(0, 4), j: Range(Const(0), n)}) == "Interval[min(n*3, 0), max(n*3, 0) + n - 1]"


def test_dependent_ranges_relax_in_order():
    """j in [i.outer*8, i.outer*8 + 8) is relaxed before i.outer: j - i.outer*8 is [0, 7]"""
    r = {io: R(0, 4), j: Range(io * 8, Const(8)), k: Range(j, Const(2))}
    assert itv(j - io * 8, r) == "Interval[0, 7]"
    assert itv(k - j, r) == "Interval[0, 1]"
    assert itv(k, r) == "Interval[0, 32]"
    assert itv(k, r, {k, j}) == "Interval[i.outer*8, i.outer*8 + 8]"
    assert const_interval(k - io * 8, r) == (0, 8)


def test_memory_values_and_dtypes():
    """a load is anything of its dtype (None for 32/64-bit, the dtype range for narrow ones)"""
    B32 = Buffer("B", (Const(8),), "int32")
    B8 = Buffer("C", (Const(8),), "uint8")
    assert itv(BufferLoad(B32, (i,), "int32"), {i: R(0, 8)}) == "Interval[-inf, +inf]"
    assert itv(BufferLoad(B8, (i,), "uint8"), {i: R(0, 8)}) == "Interval[0u8, 255u8]"
    x8 = Var("x", "int8")
    assert itv(x8) == "Interval[x, x]"
    assert itv(x8, {}, {x8}) == "Interval[-128i8, 127i8]"


def test_wrapping_is_respected():
    """an int8 product that may wrap covers the whole int8 range; int32 the same (None)"""
    x8 = Var("x", "int8")
    e = Mul(x8, Const(2, "int8"), "int8")
    assert itv(e, {x8: R(0, 100, "int8")}) == "Interval[-128i8, 127i8]"
    assert itv(e, {x8: R(0, 60, "int8")}) == "Interval[0i8, 118i8]"
    assert itv(i * 4, {i: R(0, 2**30)}) == "Interval[-inf, +inf]"
    # a uniform wrap shifts the whole range: uint8 x + 200 for x in [100, 110)
    u = Var("u", "uint8")
    assert itv(Add(u, Const(200, "uint8"), "uint8"), {u: R(100, 10, "uint8")}) == "Interval[44u8, 53u8]"


def test_select_and_non_int():
    assert itv(op.if_then_else(i < 4, i, 10), {i: R(0, 8)}) == "Interval[0, 10]"
    assert itv(op.if_then_else(i < 100, i, 1000), {i: R(0, 8)}) == "Interval[0, 7]"
    assert itv(i < 4, {i: R(0, 8)}) == "Interval[0, 1]"
    assert itv(i < 40, {i: R(0, 8)}) == "Interval[1, 1]"
    a = Var("a", "float32")
    assert eval_interval(a, {}) == Interval(None, None)
    assert eval_interval(Add(Const(1.0, "float32"), Const(2.0, "float32"), "float32"), {}).is_point


def test_const_interval():
    assert const_interval(i * 4 + 3, {i: R(0, 8)}) == (3, 31)
    assert const_interval(i + n, {i: R(0, 8)}) == (None, None)
    assert const_interval(op.minimum(n, 5), {}) == (None, 5)
    assert const_interval(op.maximum(i, 0), {}) == (0, None)
    assert const_interval(i * 2**30, {i: R(0, 8)}) == (None, None)  # may wrap: anything
    assert const_interval(i % n, {n: R(1, 10)}) == (0, 9)
    assert const_interval(op.floordiv(Const(100), i), {i: R(-5, 11)}) == (-100, 100)  # 0 excluded (undefined)
    assert const_interval(j, {io: R(0, 4), j: Range(io * 8, Const(8))}) == (0, 31)
    assert const_interval(Const(5), None) == (5, 5)


# ---------------------------------------------------------------------------------
# prove / disprove


def test_prove_basics():
    r = {ii: R(0, 8)}
    assert prove(io * 8 + ii < io * 8 + 8, r)
    assert disprove(io * 8 + ii >= io * 8 + 8, r)
    assert not prove(io * 8 + ii < 100, r) and not disprove(io * 8 + ii < 100, r)
    assert prove((i >= 0) & (i < 8), {i: R(0, 8)})
    assert prove((i < 0) | (i < 8), {i: R(0, 8)})
    assert prove(~(i >= 8), {i: R(0, 8)})
    assert disprove(op.compare(EQ, i * 8, 100), {})
    assert prove(op.compare(NE, i * 4, 2), {})
    assert prove(op.compare(EQ, i // 8, i // 8), {})


def test_prove_with_symbolic_loop_min():
    """for (j, i.outer*8, 8): j - i.outer*8 < 8 and j // 8 == i.outer"""
    r = {j: Range(io * 8, Const(8))}
    assert prove(j - io * 8 < 8, r)
    assert prove(op.compare(EQ, j // 8, io), r)
    assert prove(j >= io * 8, r)


def test_prove_respects_wrapping():
    """x + 1 > x is not provable for an int8 x that reaches 127 (it wraps to -128)"""
    x8 = Var("x", "int8")
    e = Add(x8, Const(1, "int8"), "int8") > x8
    assert not prove(e, {x8: R(0, 128, "int8")})
    assert prove(e, {x8: R(0, 127, "int8")})
    assert not prove(e, {})  # int8 always has a range: its dtype
    assert not prove(i * 2 >= i, {i: R(0, 2**31 - 1)})  # i*2 wraps


def test_prove_assumes_no_overflow_for_free_symbols():
    """free int32 symbols are index quantities: n + 1 > n holds (documented assumption)"""
    assert prove(n + 1 > n, {})
    assert prove(n * 8 + 7 < n * 8 + 8, {})


def test_prove_needs_bool():
    with pytest.raises(ExprError, match="bool"):
        prove(i + 1, {})
    with pytest.raises(ExprError, match="bool"):
        disprove(i, {})


# ---------------------------------------------------------------------------------
# Analyzer / LinForm


def test_keys_are_structural_and_commutative_for_products():
    an = Analyzer()
    assert an.key(i * j) == an.key(j * i)
    assert an.key(op.minimum(i, j)) == an.key(op.minimum(j, i))
    assert an.key(i - j) != an.key(j - i)
    assert an.key(Const(0.0, "float32")) != an.key(Const(-0.0, "float32"))
    assert an.key(Const(1, "int32")) != an.key(Const(1, "int64"))
    assert an.key(Var("i")) != an.key(Var("i"))  # identity semantics
    assert an.key((i + 1) * 2) == an.key((i + 1) * 2)


def test_parse_and_rebuild():
    an = Analyzer()
    f = an.parse(j + io * 64 - 3 + ii * 8 - j * 2)
    assert f.const == -3 and [c for _, c in f.terms.values()] == [-1, 64, 8]
    assert str(an.rebuild(f)) == "i.outer*64 + i.inner*8 - j - 3"
    assert an.parse(an.rebuild(f)) is f  # registered: no re-parsing
    u8 = LinForm("uint8", {}, 255)
    assert u8.const == -1 and u8.value == 255
    assert str(an.rebuild(LinForm("uint8", {}, 255))) == "255u8"


def test_exact_shifts_the_constant_representative():
    """uint8 x - 1 for x in [1, 10] is exact after shifting by 256; for x in [0, 10] it wraps"""
    u = Var("u", "uint8")
    an = Analyzer({u: R(1, 10, "uint8")})
    f = an.parse(Sub(u, Const(1, "uint8"), "uint8"))
    assert an.exact(f) is not None and an.form_bound(f) == (0, 9)
    an2 = Analyzer({u: R(0, 10, "uint8")})
    f2 = an2.parse(Sub(u, Const(1, "uint8"), "uint8"))
    assert an2.exact(f2) is None and an2.form_bound(f2) == (0, 255)


def test_scopes_undo_bindings():
    an = Analyzer()
    with an.scope():
        an.bind(i, R(0, 8))
        assert an.cbound(i) == (0, 7)
    assert an.cbound(i) == (None, None)
    with pytest.raises(ExprError, match="range"):
        an.bind(i, 5)


# ---------------------------------------------------------------------------------
# properties


@_SETTINGS
@given(st.integers(0, 2**32 - 1))
def test_property_intervals_contain_values(seed):
    """for random expressions, ranges and relaxed subsets: lo(env) <= e(env) <= hi(env) at
    every sampled point (symbolic bounds evaluated at the same point), and const_interval
    contains every value"""
    ch = RandChooser(seed)
    dt = ch.choice(DTYPES)
    vs = (Var("x", dt), Var("y", dt), Var("z", dt))
    ranges = gen_ranges(ch, vs, dt)
    relax = {v for v in vs if ch.int(0, 1)}
    e = gen_int(ch, vs, dt, 4)
    iv = eval_interval(e, ranges, relax)
    clo, chi = const_interval(e, ranges)
    for env in sample_points(ch, ranges):
        try:
            val = ev(e, env)
        except UB:
            continue
        for side, b in ((0, iv.lo), (1, iv.hi)):
            if b is None:
                continue
            try:
                bv = ev(b, env)
            except UB:
                continue
            assert (bv <= val) if side == 0 else (val <= bv), \
                f"{val} outside {iv} of `{e}` (relax {sorted(v.name for v in relax)}) at {env}"
        assert (clo is None or clo <= val) and (chi is None or val <= chi), f"{val} not in {(clo, chi)}"


@_SETTINGS
@given(st.integers(0, 2**32 - 1))
def test_property_prove_is_sound(seed):
    """prove(c) implies c at every point; disprove(c) implies !c"""
    ch = RandChooser(seed)
    dt = ch.choice(DTYPES)
    vs = (Var("x", dt), Var("y", dt), Var("z", dt))
    ranges = gen_ranges(ch, vs, dt)
    c = gen_bool(ch, vs, dt, 3)
    p, d = prove(c, ranges), disprove(c, ranges)
    assert not (p and d)
    if not (p or d):
        return
    for env in sample_points(ch, ranges, 3 * N_POINTS):
        try:
            val = ev(c, env)
        except UB:
            continue
        assert val == p, f"{'prove' if p else 'disprove'}(`{c}`) but it is {val} at {env}"


@_SETTINGS
@given(st.integers(0, 2**32 - 1))
def test_property_symbolic_bounds_are_tight_for_affine_sums(seed):
    """for an affine sum with constant coefficients the interval is exact: both ends
    are reached (min and max over the box of the relaxed variables)"""
    ch = RandChooser(seed)
    vs = tuple(Var(s) for s in "abc")
    ranges = {v: R(ch.int(-10, 10), ch.int(1, 6)) for v in vs}
    coefs = [ch.choice((-8, -3, -1, 1, 2, 8)) for _ in vs]
    const = ch.int(-20, 20)
    e = Const(const)
    for v, c in zip(vs, coefs):
        e = Add(e, Mul(v, Const(c), "int32"), "int32")
    lo, hi = const_interval(e, ranges)
    vals = [ev(e, dict(zip(vs, pt))) for pt in itertools.product(
        *[range(int(ranges[v].min.value), int(ranges[v].min.value) + int(ranges[v].extent.value)) for v in vs])]
    assert (lo, hi) == (min(vals), max(vals))
    assert eval_interval(e, ranges) == Interval(min(vals), max(vals))
