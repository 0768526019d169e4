"""Tests of tecomp.ir.simplify: one golden test per rule (the printed result is pinned,
and a reference evaluator checks on sample points that the result means the same),
statement rules, float and wrapping semantics, determinism, and hypothesis property
tests (random programs evaluated before and after simplification must agree).

Hypothesis runs 200 examples per property by default; set TECOMP_LONG_FUZZ=1 for
5000 (and more sample points per example).
"""
from __future__ import annotations

import itertools
import math
import os
import random
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tecomp.ir import (
    EQ, GE, GT, LE, LT, NE, Add, And, AssertStmt, AttrStmt, Buffer, BufferLoad, BufferStore,
    Call, Cast, Const, Div, Evaluate, FloorDiv, FloorMod, For, IfThenElse, Let, LetStmt, Max,
    Min, Mul, Not, Or, PrimFunc, Range, Select, SeqStmt, Sub, TruncDiv, TruncMod, Var,
)
from tecomp.ir import free_vars, op
from tecomp.ir.arith import dtype_limits, eval_interval, wrap
from tecomp.ir.simplify import simplify

LONG = os.environ.get("TECOMP_LONG_FUZZ") == "1"
N_EXAMPLES = 5000 if LONG else 200
N_POINTS = 60 if LONG else 12


# ---------------------------------------------------------------------------------
# a tiny reference evaluator of the IR semantics (independent of the simplifier)


class UB(Exception):
    """The program divides by zero (undefined): no value to compare."""


def _f32(x):
    return float(np.float32(x))


def ev(e, env, mem=None):
    t = type(e)
    dt = getattr(e, "dtype", None)
    if t is Const:
        return e.value
    if t is Var:
        return env[e]
    if t in (Add, Sub, Mul, Div, FloorDiv, FloorMod, TruncDiv, TruncMod, Min, Max):
        a, b = ev(e.a, env, mem), ev(e.b, env, mem)
        if dt.startswith("float"):
            with np.errstate(all="ignore"):
                x, y = np.float32(a) if dt != "float64" else a, np.float32(b) if dt != "float64" else b
                r = {Add: lambda: x + y, Sub: lambda: x - y, Mul: lambda: x * y, Div: lambda: x / y,
                     Min: lambda: min(x, y), Max: lambda: max(x, y)}[t]()
            return float(r)
        if t is Add:
            r = a + b
        elif t is Sub:
            r = a - b
        elif t is Mul:
            r = a * b
        elif t is Min:
            r = min(a, b)
        elif t is Max:
            r = max(a, b)
        else:
            if b == 0:
                raise UB()
            if t is FloorDiv:
                r = a // b
            elif t is FloorMod:
                r = a % b
            else:
                q = abs(a) // abs(b)
                q = q if (a >= 0) == (b > 0) else -q
                r = q if t is TruncDiv else a - b * q
        return wrap(r, dt)
    if t in (LT, LE, GT, GE, EQ, NE):
        a, b = ev(e.a, env, mem), ev(e.b, env, mem)
        return {LT: a < b, LE: a <= b, GT: a > b, GE: a >= b, EQ: a == b, NE: a != b}[t]
    if t is And:
        a, b = ev(e.a, env, mem), ev(e.b, env, mem)
        return bool(a) and bool(b)
    if t is Or:
        a, b = ev(e.a, env, mem), ev(e.b, env, mem)
        return bool(a) or bool(b)
    if t is Not:
        return not ev(e.a, env, mem)
    if t is Select:  # lazy
        return ev(e.true_value, env, mem) if ev(e.cond, env, mem) else ev(e.false_value, env, mem)
    if t is Cast:
        v = ev(e.value, env, mem)
        if dt == "bool":
            return v != 0
        if dt.startswith("float"):
            return _f32(v) if dt == "float32" else float(v)
        return wrap(int(v), dt)
    if t is Let:
        env2 = dict(env)
        env2[e.var] = ev(e.value, env, mem)
        return ev(e.body, env2, mem)
    if t is BufferLoad:
        idx = tuple(ev(i, env, mem) for i in e.indices)
        return mem[e.buffer][idx]
    if t is Call and e.op == "abs":
        v = abs(ev(e.args[0], env, mem))
        return wrap(v, dt) if not dt.startswith("float") else v
    if t is Call and e.op in ("floor", "ceil", "round"):
        v = ev(e.args[0], env, mem)
        return float({"floor": math.floor, "ceil": math.ceil, "round": round}[e.op](v))
    raise NotImplementedError(t.__name__)


def run_stmt(s, env, mem):
    t = type(s)
    if t is SeqStmt:
        for x in s.seq:
            run_stmt(x, env, mem)
    elif t is For:
        lo, n = ev(s.min, env, mem), ev(s.extent, env, mem)
        for v in range(lo, lo + n):
            env2 = dict(env)
            env2[s.var] = v
            run_stmt(s.body, env2, mem)
    elif t is IfThenElse:
        if ev(s.cond, env, mem):
            run_stmt(s.then_case, env, mem)
        elif s.else_case is not None:
            run_stmt(s.else_case, env, mem)
    elif t is BufferStore:
        idx = tuple(ev(i, env, mem) for i in s.indices)
        mem[s.buffer][idx] = ev(s.value, env, mem)
    elif t is LetStmt:
        env2 = dict(env)
        env2[s.var] = ev(s.value, env, mem)
        run_stmt(s.body, env2, mem)
    elif t in (AttrStmt, AssertStmt):
        if t is AssertStmt:
            assert ev(s.cond, env, mem), s.message
        run_stmt(s.body, env, mem)
    elif t is Evaluate:
        ev(s.value, env, mem)
    else:
        raise NotImplementedError(t.__name__)


def _range_values(r):
    lo = int(r.min.value)
    return lo, lo + int(r.extent.value) - 1


def assert_same_values(e, s, ranges, points=200, seed=0):
    """``e`` and ``s`` agree at the corners and at random points of ``ranges``."""
    vs = list(ranges)
    rng = random.Random(seed)
    bounds = [_range_values(ranges[v]) for v in vs]
    envs = [dict(zip(vs, c)) for c in itertools.islice(itertools.product(*bounds), 64)]
    envs += [{v: rng.randint(*b) for v, b in zip(vs, bounds)} for _ in range(points)]
    for env in envs:
        try:
            want = ev(e, env)
        except UB:
            continue
        got = ev(s, env)
        assert got == want or (isinstance(want, float) and math.isnan(want) and math.isnan(got)), \
            f"`{e}` -> `{s}` differs at {({v.name: x for v, x in env.items()})}: {want} != {got}"


def R(lo, ext, dt="int32"):
    return Range(Const(lo, dt), Const(ext, dt))


i, j, k, n, m, f, x, y = (Var(s) for s in "i j k n m f x y".split())
io, ii, jo, ji = Var("i.outer"), Var("i.inner"), Var("j.outer"), Var("j.inner")


def check(e, expected, ranges=None, sample=None):
    """``simplify(e, ranges)`` prints ``expected`` and means the same as ``e``."""
    s = simplify(e, ranges)
    assert str(s) == expected, f"simplify(`{e}`) = `{s}`, expected `{expected}`"
    rs = dict(sample or {})
    for v, r in (ranges or {}).items():
        rs.setdefault(v, r)
    for v in free_vars(e):  # free symbols: a small window (no overflow there)
        rs.setdefault(v, R(-30, 61, v.dtype) if v.dtype != "uint8" else R(0, 61, v.dtype))
    if all(isinstance(r.min, Const) and isinstance(r.extent, Const) for r in rs.values()):
        assert_same_values(e, s, rs)
    return s


# ---------------------------------------------------------------------------------
# canonical form


def test_constant_folding_int32():
    """c1 op c2 folds; the result wraps exactly as int32 does"""
    check(Add(Const(2), Const(3), "int32"), "5")
    check(Mul(Const(2**30), Const(4), "int32"), "0")
    check(Sub(Const(-2**31), Const(1), "int32"), "2147483647")
    check(FloorDiv(Const(-7), Const(2), "int32"), "-4")
    check(FloorMod(Const(-7), Const(2), "int32"), "1")
    check(TruncDiv(Const(-7), Const(2), "int32"), "-3")
    check(TruncMod(Const(-7), Const(2), "int32"), "-1")
    check(FloorDiv(Const(-2**31), Const(-1), "int32"), "-2147483648")  # wraps


def test_constant_folding_narrow_and_wide():
    """uint8, int8 and int64 constants fold in their own ring"""
    check(Add(Const(200, "uint8"), Const(100, "uint8"), "uint8"), "44u8")
    check(Sub(Const(3, "uint8"), Const(5, "uint8"), "uint8"), "254u8")
    check(Mul(Const(100, "int8"), Const(3, "int8"), "int8"), "44i8")
    check(Mul(Const(2**40, "int64"), Const(2**30, "int64"), "int64"), "0i64")
    check(Add(Const(2**40, "int64"), Const(1, "int64"), "int64"), "1099511627777i64")


def test_like_terms_and_readable_order():
    """like terms combine; terms by decreasing coefficient, constant last, `x - 3` not `x + -3`"""
    check(j + io * 64 + ii * 8, "i.outer*64 + i.inner*8 + j")
    check((io * 8 + ii) * 64 + j, "i.outer*512 + i.inner*64 + j")
    check(i + (-3), "i - 3")
    check(i + j - i * 2 + 3 - j, "3 - i")
    check(0 - i - j, "-i - j")
    check(0 - i * 4 - 2, "-(i*4) - 2")
    check(i - j * 2 + k, "i + k - j*2")


def test_x_minus_x_and_times_zero():
    """x - x -> 0 and x*0 -> 0 for ints"""
    check(i - i, "0")
    check(i * 0, "0")
    check((i + j) * 3 - j * 3 - i * 3, "0")


def test_mul_constants():
    """(x*c1)*c2 -> x*(c1*c2); c*(a + b) distributes; 1*x -> x"""
    check((i * 3) * 4, "i*12")
    check((i + 1) * 8, "i*8 + 8")
    check(Mul(Const(1), i, "int32"), "i")


def test_products_are_commutative_atoms():
    """x*y - y*x -> 0; constant factors move to the coefficient"""
    check(i * j - j * i, "0")
    check((i * 2) * (j * 3), "i*j*6")
    check((i + 1) * j, "(i + 1)*j")


def test_compute_at_offset_cancels():
    """bound inference: i.outer*8 + i.inner - (i.outer*8 - 1) -> i.inner + 1"""
    check(io * 8 + ii - (io * 8 - 1), "i.inner + 1")


def test_coefficients_wrap():
    """coefficients live in the ring: x*2**31*2 -> 0 in int32 (exact under wrapping)"""
    check(i * (2**31 - 1) + i, "i*(-2147483648)")
    check((i * 65536) * 65536, "0")


def test_single_value_range_is_a_constant():
    """a variable whose range holds one value is that value"""
    check(i * 4 + j, "j + 12", {i: R(3, 1)}, sample={j: R(-5, 10)})


# ---------------------------------------------------------------------------------
# division and modulo


def test_split_div_mod():
    """(x*8 + y) // 8 -> x and (x*8 + y) % 8 -> y when 0 <= y < 8"""
    r = {ii: R(0, 8), io: R(0, 13)}
    check((io * 8 + ii) // 8, "i.outer", r)
    check((io * 8 + ii) % 8, "i.inner", r)


def test_split_div_mod_symbolic_outer():
    """the same with i.outer free (symbolic)"""
    check((io * 8 + ii) // 8, "i.outer", {ii: R(0, 8)})
    check((io * 8 + ii) % 8, "i.inner", {ii: R(0, 8)})


def test_div_extracts_multiples():
    """(a*c + b) // c -> a + b // c and (a*c + b) % c -> b % c"""
    check((i * 8 + j) // 8, "i + j // 8")
    check((i * 8 + j) % 8, "j % 8")
    check((i * 16 + j + 3) // 8, "i*2 + (j + 3) // 8")
    check((i * 8 + 19) % 8, "3")
    check((i * 8 + 19) // 8, "i + 2")


def test_mod_and_div_in_range():
    """x % c -> x and x // c -> 0 when 0 <= x < c; one period -> a constant quotient"""
    check(i % 16, "i", {i: R(0, 16)})
    check(i // 16, "0", {i: R(0, 16)})
    check(i // 16, "2", {i: R(32, 16)})
    check(i % 16, "i - 32", {i: R(32, 16)})
    check(i % 16, "i % 16", {i: R(0, 17)})


def test_nested_div_and_mod():
    """(x // 4) // 2 -> x // 8, (x % 16) % 4 -> x % 4, (x // c1 + k) // c2"""
    check((i // 4) // 2, "i // 8")
    check((i % 16) % 4, "i % 4")
    check((i % 4) % 16, "i % 4")
    check(((i % 16) * 2) % 8, "(i % 4)*2")
    check((i // 4 + 1) // 2, "(i + 4) // 8")


def test_mod_then_div_with_ranges():
    """(x % 16) // 4: x // 4 when x < 16, 0 when x < 4, unchanged otherwise"""
    check((i % 16) // 4, "i // 4", {i: R(0, 16)})
    check((i % 16) // 4, "0", {i: R(0, 4)})
    check((i % 16) // 4, "i % 16 // 4", {i: R(0, 64)})


def test_gcd_split():
    """(x*4 + y) // 8 -> x // 2 and (x*4 + y) % 8 -> (x % 2)*4 + y when 0 <= y < 4"""
    check((i * 4 + j) // 8, "i // 2", {j: R(0, 4)}, sample={i: R(-20, 40)})
    check((i * 4 + j) % 8, "(i % 2)*4 + j", {j: R(0, 4)}, sample={i: R(-20, 40)})
    check((i * 6) // 4, "i*3 // 2")
    check((i * 2 + 1) // 4, "i // 2")


def test_fuse_identity():
    """(f // 16)*16 + f % 16 -> f, nested fuses, and x - (x // c)*c -> x % c"""
    check((f // 16) * 16 + f % 16, "f")
    check(f % 16 + (f // 16) * 16 + 1, "f + 1")
    check((f // 128) * 128 + ((f // 8) % 16) * 8 + f % 8, "f")
    check(((io * 8 + ii) // 4) * 4 + (io * 8 + ii) % 4, "i.outer*8 + i.inner")
    check(i - (i // 8) * 8, "i % 8")
    check((i * 3 + j) - ((i * 3 + j) // 8) * 8, "(i*3 + j) % 8")
    check(((f // 16) * 16 + f % 16) * 2, "f*2")


def test_fuse_identity_of_a_congruent_remainder():
    """((f*32 + l) // 14)*14 + (f*4 + l) % 14 -> f*32 + l: the modulo's coefficients were
    reduced first (32 % 14 == 4), yet the two dividends differ by a multiple of 14 (a
    fused axis, split by a factor the inner extent does not divide, indexing a buffer)"""
    a, b, lane = Var("a"), Var("b"), Var("l")
    check(((a * 32 + b * 16 + lane) // 14) * 14 + (a * 4 + b * 2 + lane) % 14,
          "a*32 + b*16 + l")
    check(((a * 32 + lane) // 14) * 28 + ((a * 4 + lane) % 14) * 2 + i * 196,
          "i*196 + a*64 + l*2")
    check(((a * 32 + lane + 15) // 14) * 14 + (a * 4 + lane + 1) % 14, "a*32 + l + 15")
    # not congruent, or not the partner's multiple: unchanged
    check(((a * 32 + lane) // 14) * 14 + (a * 4 + lane + 1) % 14,
          "((a*32 + l) // 14)*14 + (a*4 + l + 1) % 14")
    check(((a * 32 + lane) // 14) * 7 + (a * 4 + lane) % 14,
          "((a*32 + l) // 14)*7 + (a*4 + l) % 14")


def test_fuse_identity_symbolic_divisor():
    """(f // n)*n + f % n -> f; split by a symbolic factor"""
    check((f // n) * n + f % n, "f")
    check((io * n + ii) // n, "i.outer", {ii: Range(Const(0), n)})
    check((io * n + ii) % n, "i.inner", {ii: Range(Const(0), n)})
    check((io * n + ii) // n, "i.outer + i.inner // n")


def test_fuse_loop_indices_stay_readable():
    """a fused counter keeps f // 16 and f % 16 when the split is real"""
    check(f // 16, "f // 16", {f: R(0, 256)})
    check(f % 16, "f % 16", {f: R(0, 256)})


def test_trunc_to_floor_when_nonnegative():
    """TruncDiv/TruncMod of a non-negative dividend by c > 0 -> FloorDiv/FloorMod"""
    check(op.truncdiv(i, 4), "i // 4", {i: R(0, 100)})
    check(op.truncmod(i, 4), "i % 4", {i: R(0, 100)})
    check(op.truncdiv(i, -4), "-(i // 4)", {i: R(0, 100)})
    check(op.truncdiv(i, 4), "truncdiv(i, 4)", {i: R(-3, 100)})
    check(op.truncmod(i * 8 + j, 8), "j", {i: R(0, 4), j: R(0, 8)})


def test_division_needs_exact_dividend():
    """no division rule looks inside a sum that may wrap: int8 (x*16 + y) // 16 is kept"""
    x8, y8 = Var("x", "int8"), Var("y", "int8")
    r = {x8: R(0, 16, "int8"), y8: R(0, 16, "int8")}
    e = FloorDiv(Add(Mul(x8, Const(16, "int8"), "int8"), y8, "int8"), Const(16, "int8"), "int8")
    check(e, "(x*16i8 + y) // 16i8", r)
    check(e, "x", {x8: R(0, 8, "int8"), y8: R(0, 16, "int8")})


# ---------------------------------------------------------------------------------
# min / max / select / comparisons / logic


def test_min_max():
    """provable order picks a side; constants fold; nested constants merge"""
    check(op.minimum(i, 8), "i", {i: R(0, 8)})
    check(op.maximum(i - 1, 0), "i - 1", {i: R(1, 10)})
    check(op.minimum(Const(3), Const(5)), "3")
    check(op.minimum(op.minimum(i, 8), 4), "min(i, 4)")
    check(op.maximum(op.maximum(i, 1), 5), "max(i, 5)")
    check(op.minimum(4, i), "min(i, 4)")
    check(op.minimum(i + 1, i + 2), "i + 1")
    check(op.maximum(i, i), "i")


def test_min_max_of_floor_divisions_with_ordered_numerators():
    """floor divisions by the same positive constant compare through their numerators:
    a - b in [lo, hi] puts a // c - b // c in [floor(lo/c), ceil(hi/c)], for every sign of
    the variables (n in [0, 1000] and n free)"""
    fd = op.floordiv
    for rng in ({n: R(0, 1001)}, None):
        check(op.minimum(fd(n, 32), fd(n + 31, 32)), "n // 32", rng)
        check(op.maximum(fd(n, 32), fd(n + 31, 32)), "(n + 31) // 32", rng)
        check(op.minimum(fd(n + 31, 32), fd(n, 32)), "n // 32", rng)
        check(fd(n, 32) <= fd(n + 31, 32), "True", rng)
        check(fd(n + 64, 32) >= fd(n, 32) + 2, "True", rng)
        check(fd(n, 8) < fd(n + 9, 8), "True", rng)
        check(op.minimum(fd(n, 32) * 3, fd(n + 31, 32) * 3), "(n // 32)*3", rng)
    # with ranges: i + j <= i + m since j < 8 <= m
    check(op.minimum(fd(i + j, 16), fd(i + m, 16)), "(i + j) // 16",
          {i: R(-50, 100), j: R(0, 8), m: R(8, 4)})
    check(op.minimum(fd(i + j, 16), fd(i + 6, 16)), "min((i + j) // 16, (i + 6) // 16)",
          {i: R(-50, 100), j: R(0, 8)})
    # not decided: the order of the numerators is unknown, or the divisors differ
    check(op.minimum(fd(n, 32), fd(n + m, 32)), "min(n // 32, (n + m) // 32)")
    check(op.minimum(fd(n, 32), fd(n + 1, 16)), "min(n // 32, (n + 1) // 16)")
    check(fd(n, 32) < fd(n + 31, 32), "n // 32 < (n + 31) // 32")


def test_min_absorbs_linear_rest():
    """min(i.outer*8 + 8, 100) - i.outer*8 -> min(100 - i.outer*8, 8)"""
    check(op.minimum(io * 8 + 8, 100) - io * 8, "min(100 - i.outer*8, 8)", {io: R(0, 13)})


def test_comparisons_fold_with_ranges():
    """i < 100 with i in [0, 64) is True; i >= 64 is False"""
    check(i < 100, "True", {i: R(0, 64)})
    check(i >= 64, "False", {i: R(0, 64)})
    check(io * 8 + ii < 100, "True", {io: R(0, 12), ii: R(0, 8)})
    check(io * 8 + ii < 100, "i.outer*8 + i.inner < 100", {io: R(0, 13), ii: R(0, 8)})
    check(io * 8 + ii < io * 8 + 8, "True", {ii: R(0, 8)})


def test_comparisons_canonical():
    """constants move right, the gcd is divided out: i + 1 < 57 -> i < 56, i*8 < 100 -> i < 13"""
    check(i + 1 < 57, "i < 56")
    check(i + 1 >= 1, "i >= 0")
    check(i * 8 < 100, "i < 13")
    check(i * 8 <= 100, "i <= 12")
    check(i * 8 > 100, "i > 12")
    check(i * 8 >= 100, "i >= 13")
    check(i * 2 + 1 < j * 2, "i < j")
    check(0 - i < 3, "i > (-3)")
    check(n - i > 0, "n > i")
    check(op.compare(EQ, i * 8, 100), "False")
    check(op.compare(NE, i * 4, 2), "True")
    check(op.compare(EQ, i * 4, 8), "i == 2")


def test_equality_is_exact_in_the_ring():
    """x + 256 == x is False even for int32 that may wrap; uint8 x + 256 == x is True"""
    check(op.compare(EQ, i + 256, i), "False")
    u = Var("u", "uint8")
    check(EQ(Add(u, Const(0, "uint8"), "uint8"), u), "True")


def test_padding_guard():
    """padding guards: i + 1 >= 1 && i + 1 < 57 -> i >= 0 && i < 56, or True with a range"""
    g = (i + 1 >= 1) & (i + 1 < 57)
    check(g, "i >= 0 && i < 56")
    check(g, "True", {i: R(0, 56)})
    check((i - 1 >= 0) & (i - 1 < 56), "i >= 1 && i < 57", {i: R(0, 58)})


def test_logic():
    """And/Or/Not with constants, duplicates, a && !a, bounds on the same side merge"""
    t = Const(True, "bool")
    fl = Const(False, "bool")
    a = i < 5
    check(And(t, a), "i < 5")
    check(And(fl, a), "False")
    check(Or(t, a), "True")
    check(Or(fl, a), "i < 5")
    check(And(a, a), "i < 5")
    check(And(a, Not(a)), "False")
    check(Or(a, Not(a)), "True")
    check(Not(Not(a)), "i < 5")
    check((i < 5) & (i < 8), "i < 5")
    check((i < 5) | (i < 8), "i < 8")
    check((i >= 2) & (i < 1), "False")
    check((i < 5) | (i >= 5), "True")
    check(~(i < 5), "i >= 5")
    check(~((i >= 1) & (i < 57)), "i < 1 || i >= 57")
    check(Not(op.compare(EQ, i, j)), "i != j")


def test_float_comparison_negation_is_kept():
    """!(a < b) is not a >= b for floats (NaN): it stays"""
    a = Var("a", "float32")
    check(Not(LT(a, Const(1.0, "float32"))), "!(a < 1f)")
    check(Not(EQ(a, Const(1.0, "float32"))), "a != 1f")


def test_select():
    """constant condition -> a branch; equal branches -> the branch; branches know the condition"""
    check(op.if_then_else(i < 100, i, 0), "i", {i: R(0, 64)})
    check(Select(Const(False, "bool"), i, j, "int32"), "j")
    check(op.if_then_else(i < 3, j + 1, 1 + j), "j + 1")
    check(op.if_then_else(i < 3, op.minimum(i, 3), 7), "select(i < 3, i, 7)")
    check(op.if_then_else(i >= 4, op.maximum(i, 3), 0), "select(i >= 4, i, 0)")
    check(op.if_then_else(i < 3, Const(True, "bool"), Const(False, "bool")), "i < 3")


def test_select_is_lazy_about_division_by_zero():
    """select(j != 0, i // j, 0) keeps its guard (the division is only evaluated when j != 0)"""
    check(op.if_then_else(op.compare(NE, j, 0), i // j, 0), "select(j != 0, i // j, 0)")


def test_casts():
    """casts of constants fold (wrap, round, bool); int32(int64(x)) -> x"""
    check(Cast(Const(300), "int8"), "44i8")
    check(Cast(Const(-1), "uint8"), "255u8")
    check(Cast(Const(3.7, "float32"), "int32"), "3")
    check(Cast(Const(-3.7, "float32"), "int32"), "-3")
    check(Cast(Const(2, "int32"), "float32"), "2f")
    check(Cast(Const(0.1, "float64"), "float32"), "0.10000000149011612f")
    check(Cast(Const(7), "bool"), "True")
    check(Cast(Const(True, "bool"), "int32"), "1")
    check(Cast(Cast(i, "int64"), "int32"), "i")
    check(Cast(Cast(i, "int8"), "int32"), "int32(int8(i))")
    check(Cast(Const(1e10, "float32"), "int32"), "int32(10000000000f)")  # undefined: kept


def test_float_semantics():
    """floats fold exactly (IEEE, float32 rounding) but are never reassociated;
    x*0 and x + 0.0 are kept (NaN, inf, -0.0); x*1, x/1, x - 0.0, x + -0.0 simplify"""
    a = Var("a", "float32")
    c = lambda v: Const(v, "float32")  # noqa: E731
    check(Mul(c(1.5), c(2.0), "float32"), "3f")
    check(Add(c(0.1), c(0.2), "float32"), "0.30000001192092896f")
    assert simplify(Div(c(1.0), c(0.0), "float32")) == Const(math.inf, "float32")
    check(Mul(a, c(1.0), "float32"), "a")
    check(Div(a, c(1.0), "float32"), "a")
    check(Mul(a, c(0.0), "float32"), "a*0f")
    check(Add(a, c(0.0), "float32"), "a + 0f")
    check(Add(a, c(-0.0), "float32"), "a")
    check(Sub(a, c(0.0), "float32"), "a")
    check(Sub(a, a, "float32"), "a - a")
    check(Add(Add(a, c(1.0), "float32"), c(2.0), "float32"), "a + 1f + 2f")
    h = Var("h", "float16")
    check(Add(Const(0.1, "float16"), Const(0.2, "float16"), "float16"), "0.1h + 0.2h")
    check(Max(c(float("nan")), c(1.0), "float32"), "float32(nan)")
    assert str(simplify(Add(h, Const(-0.0, "float16"), "float16"))) == "h"


def test_abs_and_rounding_calls():
    """abs of a non-negative int is itself; constant floor/ceil/round fold"""
    check(op.call("abs", i), "i", {i: R(0, 10)})
    check(op.call("abs", i), "abs(i)", {i: R(-1, 10)})
    check(Call("abs", (Const(-5),), "int32"), "5")
    check(Call("round", (Const(2.5, "float32"),), "float32"), "2f")
    check(Call("floor", (Const(-2.5, "float32"),), "float32"), "-3f")


def test_let_expression():
    """a Let of a constant or variable is substituted; its range is known in the body"""
    v = Var("v")
    check(Let(v, Const(3), v * 2 + i, "int32"), "i + 6")
    check(Let(v, i % 8, (v // 8) + j, "int32"), "j")


# ---------------------------------------------------------------------------------
# statements


B = Buffer("B", (Const(128),), "int32")
A = Buffer("A", (Const(128),), "int32")


def store(idx, val=Const(1)):
    return BufferStore(B, val, (idx,))


def _mem():
    return {A: np.arange(128, dtype=np.int64) * 3 - 7, B: np.zeros(128, dtype=np.int64)}


def assert_same_effect(s, t, env=None):
    m1, m2 = _mem(), _mem()
    run_stmt(s, dict(env or {}), m1)
    run_stmt(t, dict(env or {}), m2)
    for buf in m1:
        assert (m1[buf] == m2[buf]).all(), f"buffer {buf.name} differs:\n{s}\n---\n{t}"


def check_stmt(s, expected, env=None, ranges=None):
    t = simplify(s, ranges)
    assert str(t) == textwrap.dedent(expected).strip("\n"), f"got:\n{t}"
    assert_same_effect(s, t, env)
    return t


def test_for_learns_ranges_and_removes_guards():
    """the non-divisible split guard goes away where it is provably true"""
    body = IfThenElse(io * 8 + ii < 100, store(io * 8 + ii, BufferLoad(A, (io * 8 + ii,), "int32")))
    check_stmt(For(io, Const(0), Const(12), "serial", For(ii, Const(0), Const(8), "serial", body)), """
        for (i.outer, 0, 12) {
          for (i.inner, 0, 8) {
            B[i.outer*8 + i.inner] = A[i.outer*8 + i.inner]
          }
        }""")
    check_stmt(For(io, Const(0), Const(13), "serial", For(ii, Const(0), Const(8), "serial", body)), """
        for (i.outer, 0, 13) {
          for (i.inner, 0, 8) {
            if (i.outer*8 + i.inner < 100) {
              B[i.outer*8 + i.inner] = A[i.outer*8 + i.inner]
            }
          }
        }""")


def test_fused_loop_indices():
    """f // 16 and f % 16 over f in [0, 96) stay; their ranges are used below"""
    C = Buffer("C", (Const(6), Const(16)), "int32")
    s = For(f, Const(0), Const(96), "parallel", BufferStore(C, (f // 16) * 16 + f % 16, (f // 16, f % 16)))
    t = simplify(s)
    assert str(t) == "parallel (f, 0, 96) {\n  C[f // 16, f % 16] = f\n}"


def test_extent_zero_and_one():
    """extent 0 -> nothing; extent-1 serial loops -> their body; other kinds keep the loop"""
    check_stmt(For(k, Const(0), Const(0), "serial", store(k)), "")
    assert simplify(For(k, Const(0), Const(0), "serial", store(k))) == SeqStmt(())
    check_stmt(For(k, Const(5), Const(1), "serial", store(k + 1)), "B[6] = 1")
    check_stmt(For(k, Const(0), Const(1), "unrolled", store(k + 3)), """
        unrolled (k, 0, 1) {
          B[3] = 1
        }""")
    check_stmt(For(k, Const(0), op.minimum(n, 0), "serial", store(k)), "", env={n: 4})


def test_seq_flattening_and_empty_removal():
    """SeqStmts flatten; empty statements vanish; one statement is returned alone"""
    s = SeqStmt((SeqStmt((store(Const(1)), SeqStmt(()))), For(k, Const(0), Const(0), "serial", store(k)),
                 IfThenElse(Const(False, "bool"), store(Const(2))), SeqStmt((store(Const(3)),))))
    check_stmt(s, """
        B[1] = 1
        B[3] = 1""")
    assert type(simplify(SeqStmt((store(Const(1)), SeqStmt(()))))) is BufferStore


def test_if_branches():
    """provable conditions keep one branch; each branch knows its condition; else-only ifs invert"""
    s = For(i, Const(0), Const(58), "serial",
            IfThenElse((i - 1 >= 0) & (i - 1 < 56), store(i, BufferLoad(A, (op.minimum(op.maximum(i - 1, 0), 55),), "int32")),
                       store(i, Const(0))))
    check_stmt(s, """
        for (i, 0, 58) {
          if (i >= 1 && i < 57) {
            B[i] = A[i - 1]
          } else {
            B[i] = 0
          }
        }""")
    check_stmt(IfThenElse(i < 3, IfThenElse(i < 5, store(i)), store(Const(0))), """
        if (i < 3) {
          B[i] = 1
        } else {
          B[0] = 1
        }""", env={i: 2})
    check_stmt(IfThenElse(i < 3, SeqStmt(()), store(i)), """
        if (i >= 3) {
          B[i] = 1
        }""", env={i: 7})
    g = io * 8 + ii < 100
    s = For(io, Const(0), Const(13), "serial", For(ii, Const(0), Const(8), "serial",
            IfThenElse(g, SeqStmt((store(io * 8 + ii), IfThenElse(g, store(io * 8 + ii + 1, Const(2))))))))
    check_stmt(s, """
        for (i.outer, 0, 13) {
          for (i.inner, 0, 8) {
            if (i.outer*8 + i.inner < 100) {
              B[i.outer*8 + i.inner] = 1
              B[i.outer*8 + i.inner + 1] = 2
            }
          }
        }""")


def test_branch_refines_variable_range():
    """inside `if (i == 3)` i is 3; inside `if (j < 4)` j // 4 is 0"""
    check_stmt(IfThenElse(op.compare(EQ, i, 3), store(i * 2)), """
        if (i == 3) {
          B[6] = 1
        }""", env={i: 3})
    s = For(j, Const(0), Const(16), "serial", IfThenElse(j < 4, store(j // 4 + j)))
    check_stmt(s, """
        for (j, 0, 16) {
          if (j < 4) {
            B[j] = 1
          }
        }""")


def test_symbolic_loop_min():
    """a compute_at loop `for (j, i.outer*8, 8)`: j // 8 is i.outer, j - i.outer*8 < 8 is True"""
    s = For(io, Const(0), Const(4), "serial", For(j, io * 8, Const(8), "serial",
            IfThenElse((j >= io * 8) & (j - io * 8 < 8), store(j - io * 8 + 64, BufferLoad(A, (j // 8 + j % 8,), "int32")))))
    check_stmt(s, """
        for (i.outer, 0, 4) {
          for (j, i.outer*8, 8) {
            B[j - i.outer*8 + 64] = A[j - i.outer*7]
          }
        }""")


def test_let_assert_attr_evaluate():
    """LetStmt of a constant is substituted, an unused one dropped; provable asserts go;
    an AttrStmt with an empty body and an Evaluate of a constant vanish"""
    v = Var("v")
    check_stmt(LetStmt(v, Const(4), store(v + 1)), "B[5] = 1")
    check_stmt(LetStmt(v, i * 3, store(Const(1))), "B[1] = 1", env={i: 2})
    check_stmt(LetStmt(v, i % 4, store(v // 4 + 9)), "B[9] = 1", env={i: 2})
    check_stmt(LetStmt(v, i % 4, store(v // 4 + v)), """
        let v = i % 4
        B[v] = 1""", env={i: 6})
    check_stmt(For(i, Const(0), Const(4), "serial", AssertStmt(i < 4, "oob", store(i))), """
        for (i, 0, 4) {
          B[i] = 1
        }""")
    check_stmt(AttrStmt("pragma", Const(1), SeqStmt(())), "")
    check_stmt(SeqStmt((Evaluate(Const(0)), store(Const(1)))), "B[1] = 1")


def test_thread_loops_are_kept():
    """a GPU thread loop of extent 1 stays (it is a launch dimension)"""
    s = For(i, Const(0), Const(1), "thread", store(i), "threadIdx.x")
    assert str(simplify(s)) == "threadIdx.x (i, 0, 1) {\n  B[0] = 1\n}"


def test_primfunc():
    """a PrimFunc keeps its params; symbolic extents work"""
    fn = PrimFunc("f", (A, B, n), For(i, Const(0), n, "serial", store(i, BufferLoad(A, ((i * 4 + 1) // 4,), "int32"))))
    t = simplify(fn)
    assert isinstance(t, PrimFunc) and t.params == fn.params
    assert str(t) == "primfn f(A: int32[128], B: int32[128], n: int32) {\n  for (i, 0, n) {\n    B[i] = A[i]\n  }\n}"


def test_unchanged_input_is_returned_as_is():
    """the simplifier returns the same object when nothing changes (cheap change detection)"""
    e = io * 8 + ii
    assert simplify(e) is e
    s = For(i, Const(0), n, "serial", store(i))
    assert simplify(s) is s


def test_ranges_accept_itervars_and_intervals():
    from tecomp.ir import IterVar
    from tecomp.ir.arith import Interval

    iv = IterVar(Var("t"), R(0, 8))
    assert str(simplify(iv.var // 8, {iv: R(0, 8)})) == "0"
    assert str(simplify(i // 8, {i: Interval(0, 7)})) == "0"


# ---------------------------------------------------------------------------------
# determinism and cost


_DETERMINISM_PROG = textwrap.dedent("""
    from tecomp.ir import *
    from tecomp.ir.simplify import simplify
    a, b, c, d = (Var(s) for s in "abcd")
    e = ((d*3 + c) % 16 + (b + a*5) // 4 * 7 - (c*b - b*c) + (a*b*d) - (d*a*b*2))
    print(simplify(e, {c: Range(Const(0), Const(4))}))
    print(simplify((a*8 + c) // 8 + (b // 4) * 4 + b % 4 - a, {c: Range(Const(0), Const(8))}))
""")


def test_determinism_across_processes():
    """same input -> same text, whatever the hash seed (no id()/set-order dependence):
    a child process with a fixed seed prints what this one (random seed) prints"""
    import contextlib
    import io as _io

    buf = _io.StringIO()
    with contextlib.redirect_stdout(buf):
        exec(_DETERMINISM_PROG, {})
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONHASHSEED="12345", PYTHONPATH=root)
    child = subprocess.run([sys.executable, "-c", _DETERMINISM_PROG], env=env, capture_output=True,
                           text=True, check=True).stdout
    assert child == buf.getvalue()
    assert child.splitlines() == ["((a*5 + b) // 4)*7 + (d*3 + c) % 16 - a*b*d", "b"]


def test_structurally_equal_inputs_give_equal_outputs():
    a = simplify((i * 8 + j) // 8 + (k % 4) * 3, {j: R(0, 8)})
    b = simplify((i * 8 + j) // 8 + (k % 4) * 3, {j: R(0, 8)})
    assert a == b and str(a) == "(k % 4)*3 + i"


def test_long_sums_are_linear():
    """a 2000-term sum simplifies (no recursion-depth or quadratic blowup)"""
    vs = [Var(f"x{t}") for t in range(2000)]
    e = vs[0]
    for v in vs[1:]:
        e = Sub(Add(e, Mul(v, Const(2), "int32"), "int32"), Const(1), "int32")
    e = Sub(e, vs[0], "int32")
    s = simplify(e)
    # the rebuilt sum: x1*2 + ... + x1999*2 - 1999 (vs[0] cancelled)
    assert type(s) is Sub and s.b == Const(1999)
    t = s.a
    count = 0
    while type(t) is Add:
        count += 1
        t = t.a
    assert count == 1998 and t == Mul(vs[1], Const(2), "int32")


# ---------------------------------------------------------------------------------
# property tests

DTYPES = ("int32", "int32", "int64", "int8", "uint8")

_STRATS: dict = {}


class HypChooser:
    """Choices drawn through hypothesis (so failing examples shrink)."""

    def __init__(self, draw):
        self.draw = draw

    def int(self, lo, hi):
        s = _STRATS.get((lo, hi))
        if s is None:
            s = _STRATS[(lo, hi)] = st.integers(lo, hi)
        return self.draw(s)

    def choice(self, seq):
        seq = tuple(seq)
        s = _STRATS.get(seq)
        if s is None:
            s = _STRATS[seq] = st.sampled_from(seq)
        return self.draw(s)


class RandChooser:
    """Choices from a seeded random.Random (cheap: hypothesis only draws the seed)."""

    def __init__(self, seed):
        self.rnd = random.Random(seed)

    def int(self, lo, hi):
        return self.rnd.randint(lo, hi)

    def choice(self, seq):
        return self.rnd.choice(tuple(seq))


def _leaves(vs, dt):
    """Variables (about half of the leaves) and constants, small ones and the dtype's limits."""
    lo, hi = dtype_limits(dt)
    consts = tuple(Const(wrap(v, dt), dt) for v in
                   (0, 1, 2, 3, 7, 8, 16, -1, -2, -5, 100, hi, lo, hi // 2, 255, 127, 2**16))
    return tuple(vs) * (len(consts) // len(vs) + 1) + consts


def gen_int(ch, vs, dt, depth):
    """A random int expression over vs: every operator the simplifier handles, with the
    split/fuse shapes lowering produces and constants near the dtype's limits."""
    kind = ch.int(0, 20)
    if depth <= 0 or kind >= 16:
        return ch.choice(_leaves(vs, dt))
    sub = lambda: gen_int(ch, vs, dt, depth - 1)  # noqa: E731
    c = lambda *vals: Const(wrap(ch.choice(vals), dt), dt)  # noqa: E731
    if kind == 0:
        return Add(sub(), sub(), dt)
    if kind == 1:
        return Sub(sub(), sub(), dt)
    if kind == 2:
        return Mul(sub(), c(2, 3, 4, 8, 16, -1, -3, 64), dt)
    if kind == 3:
        return Mul(sub(), sub(), dt)
    if kind == 4:
        return FloorDiv(sub(), c(1, 2, 3, 4, 8, 16, -2, -3), dt)
    if kind == 5:
        return FloorMod(sub(), c(1, 2, 3, 4, 8, 16, -2, -3), dt)
    if kind == 6:
        return ch.choice((FloorDiv, FloorMod))(sub(), sub(), dt)
    if kind == 7:
        return ch.choice((TruncDiv, TruncMod))(sub(), c(2, 3, 8, -4), dt)
    if kind == 8:
        return ch.choice((Min, Max))(sub(), sub(), dt)
    if kind == 9:
        return Select(gen_bool(ch, vs, dt, depth - 1), sub(), sub(), dt)
    if kind == 10:  # fuse: (v // c)*c + v % c, or (v*(c*q + r) + w) // c*c + (v*r + w) % c
        v, cc = ch.choice(vs), c(2, 4, 8, 14, 16)
        if ch.int(0, 1):
            w, q, r = sub(), ch.int(1, 3), ch.int(0, 5)
            big = Add(Mul(v, Const(int(cc.value) * q + r, dt), dt), w, dt)
            return Add(Mul(FloorDiv(big, cc, dt), cc, dt),
                       FloorMod(Add(Mul(v, Const(r, dt), dt), w, dt), cc, dt), dt)
        return Add(Mul(FloorDiv(v, cc, dt), cc, dt), FloorMod(v, cc, dt), dt)
    if kind == 11:  # split: outer*c + inner
        return Add(Mul(ch.choice(vs), c(4, 8, 16), dt), sub(), dt)
    if kind == 12:  # a round trip through another integer type (widening or wrapping)
        other = ch.choice(("int8", "uint8", "int16", "int32", "int64"))
        return Cast(Cast(sub(), other), dt) if other != dt else Add(sub(), c(1, -1, 7), dt)
    if kind == 13:
        t = Var("t", dt)
        return Let(t, sub(), Add(Mul(t, c(2, 8), dt), sub(), dt), dt)
    if kind == 14:
        return Sub(Mul(sub(), c(8, 16), dt), Mul(sub(), c(8, 16), dt), dt)
    return Call("abs", (sub(),), dt)


def gen_bool(ch, vs, dt, depth):
    kind = ch.int(0, 5)
    sub = lambda: gen_int(ch, vs, dt, max(depth - 1, 0))  # noqa: E731
    if kind <= 2 or depth <= 0:
        return ch.choice((LT, LE, GT, GE, EQ, NE))(sub(), sub())
    if kind == 3:
        return Not(gen_bool(ch, vs, dt, depth - 1))
    return ch.choice((And, Or))(gen_bool(ch, vs, dt, depth - 1), gen_bool(ch, vs, dt, depth - 1))


def gen_ranges(ch, vs, dt):
    lo, hi = dtype_limits(dt)
    out = {}
    for v in vs:
        start = ch.int(-20, 20) if ch.int(0, 1) else ch.choice((lo, hi - 40, 0, 2**20))
        start = min(max(start, lo), hi)
        ext = min(ch.int(1, 40), hi - start + 1)
        out[v] = R(start, ext, dt)
    return out


def sample_points(ch, ranges, n=N_POINTS):
    """The two corners and n random points (from one drawn seed: cheap)."""
    vs = list(ranges)
    bounds = [_range_values(ranges[v]) for v in vs]
    pts = [dict(zip(vs, (b[0] for b in bounds))), dict(zip(vs, (b[1] for b in bounds)))]
    rnd = random.Random(ch.int(0, 2**32 - 1))
    for _ in range(n):
        pts.append({v: rnd.randint(*b) for v, b in zip(vs, bounds)})
    return pts


def _int_case(ch):
    dt = ch.choice(DTYPES)
    vs = (Var("x", dt), Var("y", dt), Var("z", dt))
    return dt, vs, gen_ranges(ch, vs, dt)


_SETTINGS = settings(max_examples=N_EXAMPLES, deadline=None, derandomize=not LONG, database=None,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@_SETTINGS
@given(st.data())
def test_property_simplify_preserves_int_values(data):
    """simplify(e, ranges) == e at random points of the ranges (wrapping semantics), the
    result is a fixpoint, and eval_interval(e, ranges) contains every value"""
    ch = HypChooser(data.draw)
    dt, vs, ranges = _int_case(ch)
    e = gen_int(ch, vs, dt, 4)
    s = simplify(e, ranges)
    assert str(simplify(s, ranges)) == str(s), "simplify is not idempotent"
    itv = eval_interval(e, ranges)
    for env in sample_points(ch, ranges):
        try:
            want = ev(e, env)
        except UB:
            continue
        got = ev(s, env)
        assert got == want, f"`{e}` -> `{s}` at {({v.name: x for v, x in env.items()})}: {want} != {got}"
        assert (itv.lo is None or itv.lo_value <= want) and (itv.hi is None or want <= itv.hi_value), \
            f"{want} not in {itv} of `{e}`"


@_SETTINGS
@given(st.integers(0, 2**32 - 1))
def test_property_simplify_preserves_conditions(seed):
    """random conditions keep their truth value at every sampled point"""
    ch = RandChooser(seed)
    dt, vs, ranges = _int_case(ch)
    e = gen_bool(ch, vs, dt, 3)
    s = simplify(e, ranges)
    for env in sample_points(ch, ranges):
        try:
            want = ev(e, env)
        except UB:
            continue
        assert ev(s, env) == want, f"`{e}` -> `{s}` at {({v.name: x for v, x in env.items()})}"


_SEEDS = st.integers(0, 2**32 - 1)


@_SETTINGS
@given(_SEEDS)
def test_property_simplify_without_ranges(seed):
    """with no ranges (free symbols), the result agrees wherever neither the original nor
    the result overflows (free index symbols are assumed not to overflow, see arith's
    overflow policy; with ranges, test_property_simplify_preserves_int_values is exact)"""
    ch = RandChooser(seed)
    vs = (Var("x"), Var("y"), Var("z"))
    e = gen_int(ch, vs, "int32", 4)
    s = simplify(e)
    for _ in range(N_POINTS):
        env = {v: ch.int(-1000, 1000) for v in vs}
        try:
            want = ev(e, env)
        except UB:
            continue
        if _overflows(e, env) or _overflows(s, env):
            continue
        assert ev(s, env) == want, f"`{e}` -> `{s}` at {({v.name: x for v, x in env.items()})}"


def _overflows(e, env) -> bool:
    """Some int Add/Sub/Mul inside e (on the evaluated path) leaves its dtype when
    computed exactly."""
    found = []

    def walk(x, env):
        t = type(x)
        if t in (Add, Sub, Mul):
            a, b = walk(x.a, env), walk(x.b, env)
            r = a + b if t is Add else a - b if t is Sub else a * b
            lo, hi = dtype_limits(x.dtype)
            if not lo <= r <= hi:
                found.append(x)
            return wrap(r, x.dtype)
        if t is Select:
            return walk(x.true_value, env) if walk(x.cond, env) else walk(x.false_value, env)
        if t is Let:
            env2 = dict(env)
            env2[x.var] = walk(x.value, env)
            return walk(x.body, env2)
        for name in ("a", "b", "value"):
            if hasattr(x, name) and not isinstance(getattr(x, name), (int, float, bool)):
                walk(getattr(x, name), env)
        for arg in getattr(x, "args", ()):
            walk(arg, env)
        return ev(x, env)

    try:
        walk(e, env)
    except UB:
        return True
    return bool(found)


def gen_program(ch, depth=3):
    """A random loop nest: For (serial/unrolled/parallel, extents 0..3, mins in outer
    counters), If/else guards, SeqStmts, stores B[idx % 128] = value."""
    counters = [Var("p"), Var("q"), Var("r")]

    def stmt(level, scope):
        kind = ch.int(0, 4) if level < depth else ch.int(3, 4)
        if kind <= 1 and level < len(counters):
            v = counters[level]
            mn = ch.choice([Const(0), Const(2)] + [w * 2 for w in scope])
            return For(v, mn, Const(ch.int(0, 3)), ch.choice(("serial", "serial", "unrolled", "parallel")),
                       stmt(level + 1, scope + [v]))
        if kind == 2:
            cond = gen_bool(ch, tuple(scope), "int32", 1) if scope else Const(True, "bool")
            els = stmt(level + 1, scope) if ch.int(0, 1) else None
            return IfThenElse(cond, stmt(level + 1, scope), els)
        if kind == 3:
            return SeqStmt(tuple(stmt(level + 1, scope) for _ in range(ch.int(0, 2))))
        idx = gen_int(ch, tuple(scope), "int32", 2) if scope else Const(ch.int(0, 9))
        val = gen_int(ch, tuple(scope), "int32", 2) if scope else Const(1)
        return BufferStore(B, val, (FloorMod(idx, Const(128), "int32"),))

    return stmt(0, [])


@_SETTINGS
@given(_SEEDS)
def test_property_statements_keep_their_effect(seed):
    """running a random loop nest before and after simplify writes the same memory"""
    prog = gen_program(RandChooser(seed))
    t = simplify(prog)
    m1, m2 = _mem(), _mem()
    try:
        run_stmt(prog, {}, m1)
    except UB:
        return
    run_stmt(t, {}, m2)
    assert (m1[B] == m2[B]).all(), f"\n{prog}\n--- simplified ---\n{t}"


def test_affine_steps_sees_through_floor_division():
    """``affine_steps``: the base at 0 and the constant steps where the expressions are
    affine (``(f // 9) * 9 + (f // 3 % 3) * 3 + f % 3`` is ``f``), None where not."""
    from tecomp.ir.expr import Const, Var
    from tecomp.ir.simplify import affine_steps

    f, o, b = Var("f", "int32"), Var("o", "int32"), Var("b", "int32")
    flat = o * 4608 + (f // 9) * 9 + (f // 3 % 3) * 3 + f % 3 + b * 7
    (base,), steps = affine_steps([flat], [f, o, Const(0, "int32")])
    assert steps == ((1,), (4608,), (0,)) and str(base) == str(b * 7)
    assert affine_steps([f // 9, f % 9], [f]) is None
    assert affine_steps([2 - f % 3], [f]) is None


def test_main_part_of_a_symbolic_split_runs_whole_tiles():
    """In the main part of a split of a symbolic extent, ``for (io, 0, n // 14)``, the
    rows left from a tile on are at least 14: ``n - io*14 - 14`` relaxed at ``io = n // 14
    - 1`` is ``n - (n // 14)*14``, which the fuse identity makes ``n % 14 >= 0``.  With
    an int64 ``n`` in ``[0, 2**40]`` (tecomp.lower.ranges) the main part's extent is
    ``n // 14``."""
    n = Var("n", "int64")
    i = Var("io", "int64")
    rng = {n: Range(Const(0, "int64"), Const(2**40 + 1, "int64")),
           i: Range(Const(0, "int64"), n // 14)}
    assert str(simplify(Min(n - i * 14, Const(14, "int64"), "int64"), rng)) == "14i64"
    assert str(simplify(Min(n // 14, (n + 13) // 14, "int64"), rng)) == "n // 14i64"
    # over all of int64, n + 13 may wrap: the extent keeps its general form
    wide = {n: Range(Const(0, "int64"), Const(2**63 - 1, "int64"))}
    assert str(simplify(Min(n // 14, (n + 13) // 14, "int64"), wide)) != "n // 14i64"


def test_symbolic_gemm_unrolls_whole_tiles():
    """An int64-symbolic batched GEMM: the register tile's rows in the main part are an
    unrolled loop of constant extent (before the bound, each was ``min(n - i*14, 14)``
    and unrolled as guarded copies: 3x the LLVM IR)."""
    import re
    import tecomp as tc
    n = tc.var("n", "int64")
    A = tc.placeholder((2, n, 64), name="A")
    B = tc.placeholder((2, n, 64), name="B")
    k = tc.reduce_axis((0, 64), name="k")
    C = tc.compute((2, n, n), lambda b, i, j: tc.sum(A[b, i, k] * B[b, j, k], axis=k), name="C")
    s = tc.auto_schedule([A, B, C], target="llvm -mcpu=znver4")
    text = str(tc.lower(s, [A, B, C]))
    extents = re.findall(r"unrolled \(i\.inner[_0-9]*, 0i64, (.*)\) \{", text)
    assert extents and all(re.fullmatch(r"\d+i64", e) for e in extents), extents
    # the tail part's rows: fewer than a tile, a plain loop to the end of the rows (not
    # guarded unrolled copies: version_tiles.CONSTANT_FULL_TILES)
    tail = re.findall(r"\bfor \(i\.inner[_0-9]*, 0i64, (.*)\) \{", text)
    assert any(re.fullmatch(r"n - i\.outer\*\d+i64", e) for e in tail), tail


# a branch that writes what its condition read: the condition no longer holds there
_WRITES_WHAT_IT_READ = [
    """primfn main(A: int32[4], B: int32[4], n: int32) {
  if (n > 3 && A[0] >= 5) {
    A[0] = 0
    if (A[0] >= 1) {
      B[0] = 1
    } else {
      B[0] = 2
    }
    B[1] = select(A[0] >= 3, 7, 8)
    B[2] = select(n > 2, 5, 6)
  }
}""",
    """primfn main(A: int32[4], B: int32[4], n: int32) {
  if (A[1] < 5) {
    B[3] = 1
  } else {
    for (i, 0, 2) {
      A[i] = i
    }
    B[0] = select(A[1] < 5, 3, 4)
  }
}""",
    """primfn main(A: int32[4], B: int32[4], n: int32) {
  assert(A[2] > 0, "positive")
  A[2] = A[2] - 100
  B[2] = select(A[2] > 0, 1, 0)
}""",
]


@pytest.mark.parametrize("src", _WRITES_WHAT_IT_READ, ids=["then", "else", "assert"])
def test_a_condition_on_memory_is_not_assumed_after_the_branch_writes_it(src):
    """``if (A[0] >= 5) { A[0] = 0; ... A[0] >= 1 ... }``: the simplifier knew the branch's
    condition everywhere in the branch, also after the branch overwrote the memory it
    read, and decided the later test with it (here: 1 where it is 2).  What the branch
    does not write (``n > 3``) is still known."""
    from tecomp.ir import interp
    from tecomp.ir.parse import parse
    f = parse(src)
    g = f.with_body(simplify(f.body))
    for a0 in ([9, 9, 9, 9], [0, 9, 9, 0], [9, 0, 1, 0]):
        want_a, want_b = np.array(a0, "int32"), np.zeros(4, "int32")
        got_a, got_b = want_a.copy(), want_b.copy()
        interp.run(f, want_a, want_b, 4)
        interp.run(g, got_a, got_b, 4)
        np.testing.assert_array_equal(got_b, want_b, err_msg=str(g))
        np.testing.assert_array_equal(got_a, want_a)
    if "n > 2" in src:
        assert "n > 2" not in str(g), g   # the memory-free part of the condition holds
