"""Math functions in the LLVM function emitter (:class:`_MathEmitter`, a part of
:class:`~tecomp.codegen.llvm.emitter._FnEmitter`): the ``Call`` node -- LLVM intrinsics
(``sqrt``, ``floor``, ``fma``, ...), libm calls per lane (float64 ``tanh``, ``erf``,
``atan`` ...), and tecomp's own vector code for float32 ``exp`` (also ``fast_exp`` and
``sigmoid``), ``log`` (and ``fast_log``), ``erf``, ``tanh``, ``sin`` ..., ``tan``, ``atan``,
``erfc``, ``fast_erfc``, ``pow`` and (with FMA) ``cbrt``
(:mod:`~tecomp.codegen.llvm.emit_math_f32`) and, computed in float64 lanes, ``atan2``,
``cbrt`` without FMA, and ``pow`` and ``erfc`` where the target has no table instruction
(:mod:`~tecomp.codegen.llvm.emit_math_wide`, which also holds float64 ``exp``, ``log``
and, where the target has FMA, ``tan``), with explicit FMA where the target has it (``policy.has_fma``).  Their accuracy: "Numerics" in the docstring of
:mod:`tecomp.codegen.llvm.emitter`, and docs/numerics.md.
"""
from __future__ import annotations

import llvmlite.ir as ir

from ...errors import BuildError, InternalError
from ...ir import dtype as _dt
from ...ir.expr import SPECIAL_CALLS, Call, Const
from .emit_math_f32 import _F32MathEmitter
from .emit_math_wide import _WideMathEmitter
from .values import _I32, _REG, Val, _poison, _splat, _unsigned, _with_lanes


#: whether float32 ``softplus`` reads its ``log1p`` polynomial per sixteenth of ``[0, 1]``
#: from tables where the target has a 16-entry table instruction and FMA
#: (:meth:`_MathEmitter._softplus_f32`); off: the one-polynomial form everywhere (the A/B
#: switch of ``benchmarks/elementwise_math.py --softplus-ab``)
SOFTPLUS_SEGMENTS = True

#: whether float32 ``softplus`` is one polynomial per half-unit segment of ``|x|`` (no
#: exponential) where the target has a 32-entry table instruction (AVX-512) and FMA
#: (:meth:`_MathEmitter._softplus_f32_direct`); off: ``exp`` and then ``log1p``, as in
#: session 19 (the A/B switch of ``benchmarks/elementwise_math.py --math20-ab`` and
#: ``benchmarks/reductions.py --math20-off``)
SOFTPLUS_DIRECT = True

#: whether :data:`SOFTPLUS_DIRECT`'s segments keep only ``C`` in two float32 parts, the
#: slope ``H`` in one: ``C_hi + (C_lo + t (H + t (p2 + t (p3 + t (p4 + t p5)))))``, seven
#: table reads and five FMAs a vector (:meth:`_MathEmitter._segments_short`); off: the
#: slope in two parts too, ``C_hi + (t H + (C_lo + t (L + t Q(t))))``, eight table reads
#: and six FMAs, as in session 20 (the A/B switch of ``benchmarks/elementwise_math.py
#: --math27-ab``)
SOFTPLUS_SHORT_SEGMENTS = True

#: whether float32 ``sin``, ``cos`` and ``tan`` take their quadrant ``q = round(x 2/pi)``
#: from the low bits of ``x 2/pi + 1.5 * 2^23`` (one FMA, and ``q`` as a float by one
#: subtraction: :meth:`_MathEmitter._quadrant`); off: ``roundeven`` of the product and a
#: float-to-int conversion, as in session 20 (the A/B switch of
#: ``benchmarks/elementwise_math.py --math21-ab``)
QUADRANT_MAGIC = True

#: whether float32 ``sin`` and ``cos`` reduce by pi to ``|r| <= pi/2`` and evaluate one odd
#: polynomial of sin where the target has FMA (:meth:`_MathEmitter._sincos_f32_by_pi`);
#: off: by pi/2, the polynomials of sin and cos both and a select, as in session 20
SINCOS_BY_PI = True

#: whether float32 ``log1p`` feeds ``log``'s polynomial the exact reduced argument
#: ``(1 + x) 2^-e - 1`` (one FMA: ``x 2^-e + (2^-e - 1)``, exact by Sterbenz's lemma) in
#: place of ``log(1 + x) + (x - (u - 1)) / u``, and leaves its special values (``x <= -1``,
#: ``x >= 2^125``, inf, NaN) to a branch taken once per vector that has one
#: (:meth:`_MathEmitter.log1p_f32`): no division, no selects but the sign of zero; off: the
#: division and the selects on every lane, as in session 27 (the A/B switch of
#: ``benchmarks/elementwise_math.py --math28-ab``)
LOG1P_EXACT_ARG = True

#: whether float32 ``expm1`` leaves ``x > 64`` and NaN to a branch taken once per vector
#: that has such a lane (:meth:`_MathEmitter.expm1_f32`), so that the common lanes need
#: neither the clamp at 89 nor the select of ``2^n (u + 1)`` nor the NaN's: the same bits;
#: off: all of them on every lane, as in session 27 (the A/B switch of
#: ``benchmarks/elementwise_math.py --math28-ab``)
EXPM1_BRANCH = True

#: whether float32 ``exp`` (and what uses its steps: ``sigmoid``, silu's quotient,
#: ``softplus``'s exponential, ``erf`` without a table) evaluates ``exp(r)`` on ``|r| <=
#: ln2/2`` where the target has FMA as ``1 + r (1 + r P(r))`` with a degree-4 ``P``
#: fitted for tecomp (two FMAs after Horner's rule: :meth:`_MathEmitter._exp_poly`),
#: 0.8961 ulp at most; off: Cephes' degree-5 ``P`` as ``1 + (r (r P(r)) + r)``, a
#: multiply, an FMA and an addition after Horner's rule, 1.02 ulp, as in session 29 (the A/B switch
#: of ``benchmarks/elementwise_math.py --math30-ab``; benchmarks/DECISIONS.md "exp: a
#: degree-6 polynomial in two FMAs; expm1 by one FMA and x's sign; exp(-x) folded")
EXP_SHORT_POLY = True

#: whether float32 ``expm1``'s common lanes (:data:`EXPM1_BRANCH`) take ``2^n u + (2^n -
#: 1)`` as one FMA (``2^n u`` is exact) and the sign of ``x`` by one bitwise or in place
#: of the select of ``x`` where ``|x| < 2^-25`` (there ``n = 0`` and ``u`` is ``x``
#: itself but for the sign of zero): the same bits, three instructions fewer a vector;
#: off: two ``2^n`` scalings, two additions and the select of ``x``, as in session 29 (the
#: A/B switch of ``benchmarks/elementwise_math.py --math30-ab``)
EXPM1_FMA_SIGN = True

#: whether float32 ``exp(-x)`` (``sigmoid`` and silu's quotient) clamps ``x`` to ``[-89,
#: 104]`` and folds the negation into the reduction (``n = roundeven(x (-log2 e))``, ``r
#: = n (-ln2_hi) - x`` by one FMA: :meth:`_MathEmitter.exp_neg`): the same values as
#: ``exp`` of the negated ``x``, one instruction fewer a vector; off: ``x`` negated first,
#: as in session 29 (the A/B switch of ``benchmarks/elementwise_math.py --math30-ab``)
EXP_NEG_FOLDED = True

#: whether float64 ``tan`` is tecomp's vector code where the target has FMA
#: (:meth:`~tecomp.codegen.llvm.emit_math_wide._WideMathEmitter.tan_f64`); off: libm's
#: ``tan`` per lane, as before session 22 (an A/B switch for timing it)
TAN_F64 = True

#: whether float32 ``log``, ``log2`` and ``log1p`` reduce ``m`` (in ``[3/4, 3/2)``) once
#: more by a table of 16 where the target has FMA and reads a 16-entry table in one
#: instruction (AVX-512): ``r = m/c - 1`` exact by one FMA with a 5-bit ``1/c``, ``log c``
#: read in two parts, a degree-5 polynomial on ``|r| <= 1/16``
#: (:meth:`_MathEmitter._log_table`); ``log1p`` as ``log(u)`` plus the rounding error of
#: ``u = 1 + x`` over ``u``, its special values in a branch; off: ``log``'s degree-10
#: polynomial on ``[-1/4, 1/2)`` (``log1p``: with session 28's exact reduced argument),
#: ``log2``'s degree-11 one on ``[sqrt(1/2), sqrt(2))`` (the A/B switch of
#: ``benchmarks/elementwise_math.py --math29-ab``)
LOG_TABLE = True


class _MathEmitter(_F32MathEmitter, _WideMathEmitter):
    """The part of :class:`~tecomp.codegen.llvm.emitter._FnEmitter` that emits math functions
    (the state it works on: ``_FnEmitter.__init__``)."""

    # -- intrinsics ----------------------------------------------------------------------
    _LLVM_UNARY = {"sqrt": "llvm.sqrt",
                   "floor": "llvm.floor", "ceil": "llvm.ceil", "round": "llvm.roundeven",
                   "sin": "llvm.sin", "cos": "llvm.cos", "abs": "llvm.fabs",
                   "exp2": "llvm.exp2", "log2": "llvm.log2"}
    #: float64 (and float32 where tecomp's own code is not used): libm, once per lane
    _LIBM = {"tanh": ("tanhf", "tanh"), "erf": ("erff", "erf"), "expm1": ("expm1f", "expm1"),
             "log1p": ("log1pf", "log1p"), "tan": ("tanf", "tan"), "atan": ("atanf", "atan"),
             "cbrt": ("cbrtf", "cbrt"), "erfc": ("erfcf", "erfc"),
             "fast_erfc": ("erfcf", "erfc"),
             "atan2": ("atan2f", "atan2")}
    #: the functions tecomp evaluates itself on float32 (and float16/bfloat16, which
    #: compute in float32): the method of each
    _OWN_F32 = {"log": "log_f32", "fast_log": "fast_log_f32", "erf": "erf_f32",
                "tanh": "tanh_f32", "exp2": "exp2_f32", "expm1": "expm1_f32", "log2": "log2_f32",
                "log1p": "log1p_f32",
                "softplus": "softplus", "sin": "sin_f32", "cos": "cos_f32", "tan": "tan_f32",
                "atan": "atan_f32", "cbrt": "cbrt_f32", "erfc": "erfc_f32",
                "fast_erfc": "fast_erfc_f32"}
    #: the same for the functions of two arguments (``pow``: float32 lanes where the
    #: target has FMA and a table instruction, :mod:`~tecomp.codegen.llvm.emit_math_f32`;
    #: ``atan2`` and the rest: float64 lanes, :mod:`~tecomp.codegen.llvm.emit_math_wide`)
    _OWN_F32_2 = {"pow": "pow_f32", "atan2": "atan2_f32"}

    def e_call(self, e: Call) -> Val:
        op = e.op
        if op in SPECIAL_CALLS:
            raise BuildError(f"{op}() is a statement (an Evaluate), not a value")
        args = [self.expr(a) for a in e.args]
        dt = e.dtype
        b = self.b
        if not _dt.is_float(dt):
            if op == "abs":
                x, = args
                if _unsigned(dt):
                    return x
                return self.map1(x, lambda v: b.select(
                    b.icmp_signed("<", v, _splat(v.type, 0)), b.sub(_splat(v.type, 0), v), v))
            raise InternalError(f"intrinsic {op} on {dt}")
        if op in self._OWN_F32 and dt != "float64":
            return self.map1(args[0], getattr(self, self._OWN_F32[op]))
        if op == "pow" and isinstance(e.args[1], Const) and e.args[1].value in self._POW_BY:
            return self.map1(args[0], lambda v: self._POW_BY[e.args[1].value](self, v))
        if op in self._OWN_F32_2 and dt != "float64":
            return self.map2(args[0], args[1], getattr(self, self._OWN_F32_2[op]))
        if op in ("log", "fast_log"):   # float64 (float32: _OWN_F32)
            return self.map1(args[0], self.log_f64)
        if op == "tan" and self.policy.has_fma and TAN_F64:   # float64 (float32: _OWN_F32)
            return self.map1(args[0], self.tan_f64)
        if op == "softplus":     # float64: max(x, 0) + log1p(exp(-|x|)), libm per lane
            return self.map1(args[0], self.softplus)
        if op in self._LLVM_UNARY:
            name = self._LLVM_UNARY[op]
            return self.map1(args[0], lambda v: b.call(
                self.mb.intrinsic(name, v.type, [v.type], [v.type]), [v]))
        if op == "pow":
            return self.map2(args[0], args[1], lambda x, y: b.call(
                self.mb.intrinsic("llvm.pow", x.type, [x.type, x.type], [x.type]), [x, y]))
        if op == "fma":  # one rounding: llvm.fma (an instruction with FMA, else libm fma)
            x, y, z = args
            if x.uniform and y.uniform and z.uniform:
                return Val(b.call(self.mb.intrinsic("llvm.fma", x.s.type, [x.s.type] * 3,
                                                    [x.s.type]), [x.s, y.s, z.s]))
            vx, vy, vz = self.vec(x), self.vec(y), self.vec(z)
            return Val(v=b.call(self.mb.intrinsic("llvm.fma", vx.type, [vx.type] * 3,
                                                  [vx.type]), [vx, vy, vz]))
        if op == "rsqrt":
            return self.map1(args[0], lambda v: b.fdiv(_splat(v.type, 1.0), b.call(
                self.mb.intrinsic("llvm.sqrt", v.type, [v.type], [v.type]), [v])))
        if op in ("exp", "fast_exp"):  # one implementation: see exp_f32
            return self.map1(args[0], self.exp)
        if op == "sigmoid":
            return self.map1(args[0], lambda v: b.fdiv(
                _splat(v.type, 1.0), b.fadd(_splat(v.type, 1.0), self.exp_neg(v))))
        if op in self._LIBM:
            return self.libm(self._LIBM[op], args, dt)
        raise InternalError(f"unknown intrinsic {op!r}")

    def _sqrt_pow(self, v):
        """``pow(v, 0.5)``: ``sqrt(v)``, but ``+0`` at ``-0`` and ``+inf`` at ``-inf`` (C99)."""
        b = self.b
        r = b.call(self._fn1("llvm.sqrt", v.type), [b.fadd(v, _splat(v.type, 0.0))])
        return b.select(b.fcmp_ordered("==", v, _splat(v.type, float("-inf"))),
                        _splat(v.type, float("inf")), r)

    #: pow(x, c) for the constant exponents whose result one IEEE operation gives
    #: correctly rounded (as the general code does, within its 0.5 ulp and a hair)
    _POW_BY = {2.0: lambda self, v: self.b.fmul(v, v), 1.0: lambda self, v: v,
               -1.0: lambda self, v: self.b.fdiv(_splat(v.type, 1.0), v),
               0.5: _sqrt_pow}

    def exp(self, x):
        """exp of a float32 or float64 value (scalar or vector): :meth:`exp_f32` for
        float32 (and float16, which computes in float32), :meth:`exp_f64` for float64."""
        el = x.type.element if isinstance(x.type, ir.VectorType) else x.type
        if isinstance(el, ir.DoubleType):
            return self.exp_f64(x)
        return self.exp_f32(x)

    def exp_neg(self, x):
        """``exp(-x)`` as :meth:`exp` computes it of the negated ``x`` (the same bits but
        for a NaN's sign), with float32 ``x`` clamped to ``[-89, 104]`` and its negation
        folded into the reduction's first FMA (:data:`EXP_NEG_FOLDED`)."""
        el = x.type.element if isinstance(x.type, ir.VectorType) else x.type
        if isinstance(el, ir.DoubleType) or not EXP_NEG_FOLDED:
            return self.exp(self.b.fneg(x))
        return self.exp_f32(x, negate=True)

    def libm(self, names, vals, dtype: str) -> Val:
        """Call a libm function of the values ``vals``; on vectors, once per lane."""
        fname = names[1] if dtype == "float64" else names[0]
        if all(v.uniform for v in vals):
            return Val(self._call_lanes(fname, *(v.s for v in vals)))
        return Val(v=self._call_lanes(fname, *(self.vec(v) for v in vals)))

    def _call_lanes(self, fname: str, *xs):
        """The libm function ``fname`` of ``xs`` (all of one type, the element type in
        and out): one call, or one per lane of vectors."""
        b = self.b
        ty = xs[0].type
        el = ty.element if isinstance(ty, ir.VectorType) else ty
        f = self.mb.declare(fname, el, [el] * len(xs))
        if not isinstance(ty, ir.VectorType):
            return b.call(f, list(xs))
        out = _poison(ty)
        for lane in range(ty.count):
            i = ir.Constant(_I32, lane)
            out = b.insert_element(out, b.call(f, [b.extract_element(x, i) for x in xs]), i)
        return out

    def _madd(self, ty):
        """``madd(u, v, w) = u*v + w`` on values of type ``ty``: an explicit ``llvm.fma``
        where the target has fused multiply-adds (``policy.has_fma``), else a multiply and
        an add (never contracted: the vector math functions give the same bits under every
        schedule)."""
        b = self.b
        if self.policy.has_fma:
            fma = self.mb.intrinsic("llvm.fma", ty, [ty, ty, ty], [ty])
            return lambda u, v, w: b.call(fma, [u, v, w])
        return lambda u, v, w: b.fadd(b.fmul(u, v), w)

    def _kit(self, x):
        """What the vector math functions build ``x``'s result with: the builder, ``x``'s
        type, the int32 type of as many lanes, a float constant and an int constant of
        those types (splatted), and :meth:`_madd`."""
        ty = x.type
        ity = _with_lanes(_I32, ty)
        return (self.b, ty, ity, lambda v: _splat(ty, v), lambda v: _splat(ity, v),
                self._madd(ty))

    def _horner(self, coeffs, z, madd):
        """``coeffs[0] + z*coeffs[1] + ... + z^k*coeffs[k]`` by Horner's rule with
        ``madd`` (:meth:`_madd`) on values of ``z``'s type."""
        p = _splat(z.type, coeffs[-1])
        for c in reversed(coeffs[:-1]):
            p = madd(p, z, _splat(z.type, c))
        return p

    def _fn1(self, name: str, ty, arity: int = 1):
        """The LLVM intrinsic ``name`` on values of type ``ty`` (``arity`` operands)."""
        return self.mb.intrinsic(name, ty, [ty] * arity, [ty])

    def exp_f32(self, x, negate: bool = False):
        """exp(x) (``negate``: exp(-x), :meth:`exp_neg`) for float32 (scalar or vector) in
        plain vector instructions: the ``exp``, ``fast_exp`` and ``sigmoid`` of the CPU
        backend (``llvm.exp`` would become one libm ``expf`` call per vector lane).

        Cephes-style: ``x`` is clamped to ``[-104, 89]`` (beyond, the result is 0 or
        inf anyway); ``n = roundeven(x * log2(e))``; ``r = x - n*ln2`` with ``ln2``
        split in two constants (``n * 0.693359375`` and ``x - n * 0.693359375`` are
        exact); ``exp(r)`` on ``|r| <~ ln2/2`` by :meth:`_exp_poly`; then ``p * 2^n``
        rounded once (:meth:`_ldexp`: one
        instruction with AVX-512).  A NaN goes through every step, quieted (the clamp
        keeps it: :meth:`_clamp`); where ``2^n`` is built from ``n``'s bits (no
        ``vscalefps``) a select gives those lanes ``p``'s NaN: the same bits everywhere.

        Every step is one IEEE operation, never marked ``contract`` (whatever the
        function's ``fp_contract``): the result depends only on ``x``, so vectorized,
        scalar, unrolled and lane-invariant evaluations give bit-identical results.
        Where the target has fused multiply-adds (``policy.has_fma``) the reduction
        and the polynomial use explicit ``llvm.fma`` calls (one rounding each, about
        15% faster), else separate multiplies and adds; both variants were checked on
        *every* float32 input to be within 1 ulp of the correctly rounded exp
        (subnormal results included; docs/numerics.md), and they may differ from each
        other by 1 ulp on some inputs."""
        b, _, _, C, _, _ = self._kit(x)
        # the clamp keeps a NaN, which goes through every step, quieted
        n, r = self._exp_reduce(x, -104.0, 89.0, keep_nan=True, negate=negate)
        p = self._exp_poly(r)
        res = self._ldexp(p, n)
        if self.policy.vector_op("scalef", x.type) is not None:
            return res          # (vscalefps gives the NaN of p)
        # else 2^n is built from n's bits (no NaN there): the NaN lanes take p's
        return b.select(b.fcmp_unordered("uno", x, x), p, res)

    def _exp_in(self, x, lo, hi):
        """exp(x) as :meth:`exp_f32` computes it, ``x`` clamped to ``[lo, hi]`` (None: not
        clamped there: the caller knows ``x`` is inside ``[-104, 89]``), NaN not handled."""
        n, r = self._exp_reduce(x, lo, hi)
        return self._ldexp(self._exp_poly(r), n)

    def _clamp(self, x, lo: float, hi: float, keep_nan: bool = False):
        """``x`` clamped to ``[lo, hi]`` (a NaN gives ``hi``: the callers select NaN
        themselves; ``keep_nan``: a NaN stays NaN, by selects that x86 makes one
        ``vminps`` and one ``vmaxps`` with the NaN as their second operand)."""
        b, ty, _, C, _, _ = self._kit(x)
        if keep_nan:
            xc = b.select(b.fcmp_ordered(">", x, C(hi)), C(hi), x)
            return b.select(b.fcmp_ordered("<", xc, C(lo)), C(lo), xc)
        return b.call(self._fn1("llvm.maxnum", ty, 2),
                      [b.call(self._fn1("llvm.minnum", ty, 2), [x, C(hi)]), C(lo)])

    def _exp_reduce(self, x, lo, hi, keep_nan: bool = False, negate: bool = False):
        """``x`` clamped to ``[lo, hi]`` (``lo`` None: only above; both None: not at all;
        ``keep_nan``: :meth:`_clamp`'s) as ``n*ln2 + r``:
        ``n = roundeven(x * log2(e))`` (a float) and ``r = x - n*ln2`` with ``ln2`` in two
        constants (``n * 0.693359375`` and its subtraction are exact), ``|r| <~ ln2/2``.
        ``negate`` (``lo`` and ``hi`` given): the same of ``-x``, as ``x`` clamped to
        ``[-hi, -lo]``, ``n = roundeven(x * -log2(e))`` and ``r = n * -0.693359375 - x``
        (the negation folded into the FMA: the same values)."""
        b, ty, _, C, _, madd = self._kit(x)
        if negate:
            xc = self._clamp(x, -hi, -lo, keep_nan)
            n = b.call(self._fn1("llvm.roundeven", ty), [b.fmul(xc, C(-1.44269504088896341))])
            return n, madd(n, C(2.12194440e-4), madd(n, C(-0.693359375), b.fneg(xc)))
        if lo is not None and hi is not None:
            xc = self._clamp(x, lo, hi, keep_nan)
        elif hi is not None:
            xc = b.call(self._fn1("llvm.minnum", ty, 2), [x, C(hi)])
        else:
            xc = x
        n = b.call(self._fn1("llvm.roundeven", ty), [b.fmul(xc, C(1.44269504088896341))])
        r = madd(n, C(-0.693359375), xc)
        return n, madd(n, C(2.12194440e-4), r)

    def _expm1_poly(self, r):
        """``exp(r) - 1 = r + r^2 P(r)`` for ``|r| <~ ln2/2`` (the degree-5 ``P`` of
        Cephes' ``expf``), with ``r^2 P(r)`` as ``r*(r*P(r)) + r``."""
        b, _, _, C, _, madd = self._kit(r)
        return madd(b.fmul(self._horner(self._EXPM1_P, r, madd), r), r, r)

    def _exp_poly(self, r):
        """``exp(r)`` for ``|r| <~ ln2/2`` (:meth:`exp_f32`): with :data:`EXP_SHORT_POLY`
        and FMA ``1 + r (1 + r P(r))``, ``P`` of degree 4 (:data:`_EXP_P4`) by Horner's
        rule and two more FMAs; else ``1 + (exp(r) - 1)`` by :meth:`_expm1_poly`."""
        b, _, _, C, _, madd = self._kit(r)
        if EXP_SHORT_POLY and self.policy.has_fma:
            return madd(madd(self._horner(self._EXP_P4, r, madd), r, C(1.0)), r, C(1.0))
        return b.fadd(self._expm1_poly(r), C(1.0))

    #: exp(r) = 1 + r + r^2 P(r) for |r| <= 0.3486 (ln2/2 and a margin): a degree-4 P
    #: fitted for tecomp (Lawson's iteration towards the minimax relative error of exp,
    #: the coefficients rounded to float32 one at a time with the others refitted: 3.3e-9)
    _EXP_P4 = (0.4999999403953552, 0.1666651964187622, 0.04166829213500023,
               0.008368907496333122, 0.0013819168088957667)

    #: the degree-5 P of :meth:`_expm1_poly` (Cephes' ``expf``), constant term first
    _EXPM1_P = (5.0000001201e-1, 1.6666665459e-1, 4.1665795894e-2, 8.3334519073e-3,
                1.3981999507e-3, 1.9875691500e-4)

    #: 2^r = 1 + r Q(r) for |r| <= 1/2 (a degree-5 Q fitted for tecomp: least squares
    #: towards the minimax relative error, 0.15 ulp before rounding)
    _EXP2_Q = (0.6931471824645996, 0.24022650718688965, 0.055503569543361664,
               0.009618056938052177, 0.001339087262749672, 0.00015461452130693942)

    def exp2_f32(self, x):
        """2**x for float32 in plain vector instructions: ``n = roundeven(x)`` and
        ``r = x - n`` (exact), ``2^r = 1 + r Q(r)`` with a degree-5 ``Q`` on
        ``|r| <= 1/2``, then ``2^n`` by :meth:`_ldexp` (one rounding, subnormal results
        included).  ``x`` is clamped to ``[-151, 129]`` first (0 and inf beyond); a NaN
        is passed through.  Never contracted: the same bits under every schedule."""
        b, ty, _, C, _, madd = self._kit(x)
        xc = self._clamp(x, -151.0, 129.0)
        n = b.call(self._fn1("llvm.roundeven", ty), [xc])
        r = b.fsub(xc, n)
        p = madd(r, self._horner(self._EXP2_Q, r, madd), C(1.0))
        res = self._ldexp(p, n)
        return b.select(b.fcmp_unordered("uno", x, x), x, res)

    def expm1_f32(self, x):
        """exp(x) - 1 for float32 in plain vector instructions, accurate near 0:
        ``x = n*ln2 + r`` (:meth:`_exp_reduce`, ``x`` clamped to ``[-30, 89]``: -1 and
        inf beyond), ``u = exp(r) - 1`` by :meth:`_expm1_poly`, then
        ``2^n u + (2^n - 1)`` (:meth:`_ldexp` both times; for ``n = 0`` this is ``u``
        itself), and ``2^n (u + 1)`` above 64.  ``|x| < 2^-25`` gives ``x`` (``-0.0``
        included); a NaN is passed through.  With :data:`EXPM1_BRANCH`, lanes above 64
        and NaN take a branch (once per vector that has one) to this whole form; the
        others are clamped at -30 only and take ``2^n u + (2^n - 1)`` (the same bits)."""
        if EXPM1_BRANCH:
            b, ty, _, C, _, _ = self._kit(x)
            xc = b.call(self._fn1("llvm.maxnum", ty, 2), [x, C(-30.0)])
            n, r = self._exp_reduce(xc, None, None)
            if EXPM1_FMA_SIGN:
                res = self._expm1_fma_sign(x, n, r)
            else:
                res, _ = self._expm1_common(n, r)
                ax = b.call(self._fn1("llvm.fabs", ty), [x])
                res = b.select(b.fcmp_ordered("<", ax, C(2.0 ** -25)), x, res)
            return self._slow_where(b.fcmp_unordered(">", x, C(64.0)), "expm1.rare",
                                    self._expm1_everywhere, x, res)
        return self._expm1_everywhere(x)

    def _expm1_fma_sign(self, x, n, r):
        """:meth:`expm1_f32`'s common lanes with :data:`EXPM1_FMA_SIGN`: ``fma(2^n, u, 2^n
        - 1)`` (``2^n u`` is exact for ``n >= -44``, so this rounds as the sum of the
        product did) with the sign of ``x`` or-ed in: ``expm1`` has ``x``'s sign, and for
        ``|x| < 2^-25`` (``n = 0``, ``r = x``, ``r^2 P(r)`` below half an ulp of it) ``u``
        is ``x`` but for ``-0``, which the reduction makes ``+0``."""
        b, ty, ity, C, I, madd = self._kit(r)
        s = self._ldexp(C(1.0), n)
        res = madd(s, self._expm1_poly(r), b.fsub(s, C(1.0)))
        sign = b.and_(b.bitcast(x, ity), I(-0x80000000))
        return b.bitcast(b.or_(b.bitcast(res, ity), sign), ty)

    def _expm1_common(self, n, r):
        """``2^n u + (2^n - 1)``, ``u = exp(r) - 1`` (:meth:`expm1_f32`), and ``u``."""
        b, _, _, C, _, _ = self._kit(r)
        u = self._expm1_poly(r)
        return b.fadd(self._ldexp(u, n), b.fsub(self._ldexp(C(1.0), n), C(1.0))), u

    def _expm1_everywhere(self, x):
        """:meth:`expm1_f32` with its rare cases selected on every lane."""
        b, ty, _, C, _, madd = self._kit(x)
        n, r = self._exp_reduce(x, -30.0, 89.0)
        res, u = self._expm1_common(n, r)
        # above 64 the -1 is far below half an ulp: exp(x) itself, as exp_f32 computes
        # it (2^n alone overflows for n = 128 while 2^n u + 2^n may not)
        big = b.fcmp_ordered(">", x, C(64.0))
        res = b.select(big, self._ldexp(b.fadd(u, C(1.0)), n), res)
        ax = b.call(self._fn1("llvm.fabs", ty), [x])
        res = b.select(b.fcmp_ordered("<", ax, C(2.0 ** -25)), x, res)
        return b.select(b.fcmp_unordered("uno", x, x), x, res)

    def _ldexp(self, p, n):
        """``p * 2**n`` rounded once, for float32 ``p`` with ``|p| <= 2`` and integral
        ``n`` in ``[-151, 129]`` (as the exp functions make them): the target's one
        instruction where it has one (``policy.vector_op``: AVX-512's ``vscalefps``), else
        ``2**n`` from exponent bits in two halves (``2**(n>>1)``, then
        ``2**(n - (n>>1))``), so that neither factor overflows and a subnormal result is
        rounded once, by the last product.  Both give the same bits."""
        b, ty, ity, C, I, _ = self._kit(p)
        scalef = self.policy.vector_op("scalef", ty)
        if scalef is not None:
            return scalef(b, self.mb, p, n)
        ni = b.fptosi(n, ity)
        h = b.ashr(ni, I(1))
        lo = b.sub(ni, h)
        s1 = b.bitcast(b.shl(b.add(h, I(127)), I(23)), ty)
        s2 = b.bitcast(b.shl(b.add(lo, I(127)), I(23)), ty)
        return b.fmul(b.fmul(p, s1), s2)

    #: log(1 + f) = f - f^2/2 + f^3 * P(f), for sqrt(1/2) - 1 <= f < sqrt(2) - 1 (the
    #: coefficients of Cephes' logf: log2)
    _LOG_P = (3.3333331174e-1, -2.4999993993e-1, 2.0000714765e-1, -1.6668057665e-1,
              1.4249322787e-1, -1.2420140846e-1, 1.1676998740e-1, -1.1514610310e-1,
              7.0376836292e-2)

    #: log(1 + f) = f - f^2/2 + f^3 * P(f), for -1/4 <= f < 1/2 (a degree-7 P fitted for
    #: tecomp: weighted least squares towards the minimax relative error, 5e-9)
    _LOG34_P = (0.3333345055580139, -0.25000104308128357, 0.19990821182727814,
              -0.16646987199783325, 0.14478252828121185, -0.1316399723291397,
              0.10469737648963928, -0.0451212041079998)
    #: ln2 in two positive parts (``e * _LN2_F32[0]`` is exact: 15 significant bits)
    _LN2_F32 = (0.693145751953125, 1.428606765330187e-06)

    def log_f32(self, x):
        """log(x) for float32 (scalar or vector) in plain vector instructions (``llvm.log``
        becomes one libm ``logf`` call per vector lane).

        ``x = m * 2^e`` with ``m`` in ``[3/4, 3/2)`` read from the bits (a subnormal
        ``x`` is first scaled by ``2^23``), or with AVX-512's ``vgetmantps`` and
        ``vgetexpps`` (``policy.vector_op``; the same ``m`` and ``e``); ``f = m - 1``;
        ``log(x) = e*ln2 + f - f^2/2 + f^3 P(f)`` with a degree-7 ``P`` and ``ln2`` in two
        positive parts (so that ``e = +-inf``, which ``vgetexpps`` gives for inf and 0,
        gives ``+-inf`` without a NaN on the way).  Never contracted: the same bits under
        every schedule; measured on every float32 input against float64 log:
        docs/numerics.md.  ``log(0) = -inf``, ``log(x < 0) = NaN``, ``log(inf) = inf``,
        NaN stays NaN."""
        lookup = self._log_lookup(x.type)
        if lookup is not None:
            ef, _, exact, m = self._log_reduce(x, 0.75, with_m=True)
            t, r, lo, _ = self._log_table(lookup, ef, m)
            return self._log_specials(x, self.b.fadd(t, self.b.fadd(r, lo)), exact)
        ef, f, exact = self._log_reduce(x, 0.75)
        return self._log_specials(x, self._log34(ef, f), exact)

    def _log_lookup(self, ty):
        """The 16-entry table read of :meth:`_log_table` (``policy.vector_op("lookup16")``)
        where :data:`LOG_TABLE` is on and the target has FMA and reads a table of 16 in
        one instruction per register, as those with a 32-entry table instruction do
        (AVX-512's ``vpermps``), else None: AVX2's two ``vpermps`` and a blend per table
        made log1p 0.86x and log2 0.96x their former forms (benchmarks/DECISIONS.md)."""
        if not (LOG_TABLE and self.policy.has_fma) or self.policy.vector_op("lookup32", ty) is None:
            return None
        return self.policy.vector_op("lookup16", ty)

    #: the table of :meth:`_log_table`, by the four bits of ``m`` (in ``[3/4, 3/2)``)
    #: below its exponent's: ``1/c`` with 5 significant bits (1 for the rows around
    #: ``m = 1``), so that ``r = m/c - 1`` is one exact FMA with ``|r| <= 1/16``
    _LOGT_INV = (1.0, 0.90625, 0.875, 0.8125, 0.78125, 0.75, 0.71875, 0.6875,
                 1.3125, 1.25, 1.1875, 1.1875, 1.125, 1.0625, 1.0625, 1.0)
    #: ``log c = -log(1/c)``: a multiple of 2^-16 (so that ``e ln2_hi + log c`` is exact)
    #: and the rest, rounded
    _LOGT_HI = (0.0, 0.0984344482421875, 0.1335296630859375, 0.2076416015625,
                0.246856689453125, 0.287689208984375, 0.3302459716796875, 0.37469482421875,
                -0.2719268798828125, -0.22314453125, -0.171844482421875, -0.171844482421875,
                -0.1177825927734375, -0.0606231689453125, -0.0606231689453125, 0.0)
    _LOGT_LO = (0.0, 5.624571258522337e-06, 1.72953855326341e-06, -2.236784212072962e-06,
                3.388478489796398e-06, -7.136532531148987e-06, -4.284809165255865e-06,
                -1.3747772982242168e-06, -6.835600743215764e-06, 9.799357485462679e-07,
                -5.774504643341061e-06, -5.774504643341061e-06, -4.428829356584174e-07,
                -1.452871174478787e-06, -1.452871174478787e-06, 0.0)
    #: log(1 + r) = r - r^2/2 + r^3 P(r) for -0.0371 <= r <= 0.0625 (a degree-2 P fitted
    #: for tecomp: weighted least squares towards the minimax relative error, 4.7e-9)
    _LOGT_P = (0.3333446979522705, -0.2501894235610962, 0.19052651524543762)

    #: ``log2 c`` as :data:`_LOGT_HI` and :data:`_LOGT_LO` hold ``log c``
    _LOGT2_HI = (0.0, 0.1420135498046875, 0.1926422119140625, 0.299560546875,
                 0.35614013671875, 0.4150390625, 0.4764404296875, 0.5405731201171875,
                 -0.3923187255859375, -0.321929931640625, -0.2479248046875, -0.2479248046875,
                 -0.169921875, -0.08746337890625, -0.08746337890625, 0.0)
    _LOGT2_LO = (0.0, 5.455067821458215e-06, 2.8660283533099573e-06, -2.650160979555949e-07,
                 3.6735066260007443e-06, -1.5632211898264359e-06, -2.3857444375607884e-06,
                 -4.7387543418153655e-06, 1.3028071634835214e-06, 1.8367533130003721e-06,
                 -2.7087560283689527e-06, -2.7087560283689527e-06, -3.1264423796528718e-06,
                 5.376559215619636e-07, 5.376559215619636e-07, 0.0)

    def _log_table(self, lookup, ef, m, base2: bool = False):
        """``e ln2 + log m`` as ``t + (r + lo)`` for ``m`` in ``[3/4, 3/2)`` (and ``e``)
        of :meth:`_log_reduce`: ``1/c``, ``log c`` in two parts read from tables of 16 by
        the four bits of ``m`` below its exponent's (``lookup``), ``r = m (1/c) - 1``
        (one FMA, exact: ``1/c`` has 5 significant bits and ``|r| <= 1/16``), ``t = e
        ln2_hi + log_hi c`` (exact), ``lo = (e ln2_lo + log_lo c) + (r^2 (r P(r) -
        1/2))``.  Returns ``(t, r, lo, 1/c)``.  ``base2``: ``e + log2 m`` as ``t + (p +
        lo)`` instead, ``t = e + log2_hi c`` (exact), ``p = r log2(e)_hi`` (rounded) and
        ``lo`` the rest: ``p``'s rounding error (one FMA), ``r log2(e)_lo``, ``y
        log2(e)_hi`` and ``log2_lo c``; returns ``(t, p, lo, 1/c)``."""
        b, ty, ity, C, I, madd = self._kit(m)
        idx = b.lshr(b.bitcast(m, ity), I(19))
        inv = lookup(b, self.mb, self._LOGT_INV, idx)
        c_hi = lookup(b, self.mb, self._LOGT2_HI if base2 else self._LOGT_HI, idx)
        c_lo = lookup(b, self.mb, self._LOGT2_LO if base2 else self._LOGT_LO, idx)
        r = madd(m, inv, C(-1.0))
        q = madd(self._horner(self._LOGT_P, r, madd), r, C(-0.5))
        y = b.fmul(q, b.fmul(r, r))
        if base2:
            hi, lo = self._LOG2E
            p = b.fmul(r, C(hi))
            w = madd(r, C(lo), madd(y, C(hi), c_lo))
            return b.fadd(ef, c_hi), p, b.fadd(w, madd(r, C(hi), b.fneg(p))), inv
        t = madd(ef, C(self._LN2_F32[0]), c_hi)
        lo = b.fadd(madd(ef, C(self._LN2_F32[1]), c_lo), y)
        return t, r, lo, inv

    def _log34(self, ef, f):
        """``e ln2 + log1p(f)`` for :meth:`_log_reduce`'s ``e`` and ``f`` (``m = 1 + f``
        in ``[3/4, 3/2)``): ``f - f^2/2 + f^3 P(f)`` with ``ln2`` in two parts
        (:meth:`log_f32`)."""
        b, ty, ity, C, I, madd = self._kit(f)
        z = b.fmul(f, f)
        y = b.fmul(b.fmul(self._horner(self._LOG34_P, f, madd), f), z)
        y = madd(ef, C(self._LN2_F32[1]), y)
        y = madd(z, C(-0.5), y)
        return madd(ef, C(self._LN2_F32[0]), b.fadd(f, y))

    #: log(m) = s + s z P(z), s = 2 (m - 1) / (m + 1), z = s^2 <= 0.16, for m in [3/4, 3/2)
    #: (a degree-2 P fitted for tecomp: Lawson's iteration towards the minimax relative
    #: error, 4.8e-9 with the coefficients rounded to float32)
    _FAST_LOG_P = (0.08333362638950348, 0.01248815469443798, 0.002365345833823085)

    def fast_log_f32(self, x):
        """``fast_log``: log(x) for float32 with a looser bound than :meth:`log_f32` (a
        division in place of five multiply-adds): :meth:`_log_reduce`'s ``e`` and
        ``m = 1 + f`` in ``[3/4, 3/2)``, ``s = 2f / (m + 1)`` (``2 atanh``'s argument,
        ``|s| <= 0.4``), ``log(m) = s + s z P(z)`` with ``z = s^2`` and a degree-2 ``P``,
        then ``e ln2`` added in two parts.  The rounding of ``m + 1`` and of the quotient
        carries into the result where ``e = 0`` (up to about 2 ulp; docs/numerics.md has
        the measured bound).  Special values as :meth:`log_f32`.  Never contracted: the
        same bits under every schedule."""
        b, ty, _, C, _, madd = self._kit(x)
        ef, f, exact = self._log_reduce(x, 0.75)
        s = b.fdiv(b.fadd(f, f), b.fadd(f, C(2.0)))
        z = b.fmul(s, s)
        y = madd(b.fmul(s, z), self._horner(self._FAST_LOG_P, z, madd), s)
        res = madd(ef, C(self._LN2_F32[0]), madd(ef, C(self._LN2_F32[1]), y))
        return self._log_specials(x, res, exact)

    def _log_specials(self, x, res, exact: bool = False):
        """``res`` with the special values of a logarithm: ``+inf`` at ``+inf``,
        ``-inf`` at 0 (either sign), NaN below 0 and for a NaN (``exact``: ``res`` has
        the infinities already, as :meth:`_log_reduce`'s AVX-512 form makes them)."""
        b, _, _, C, _, _ = self._kit(x)
        if not exact:
            res = b.select(b.fcmp_ordered("==", x, C(float("inf"))), x, res)
            res = b.select(b.fcmp_ordered("==", x, C(0.0)), C(float("-inf")), res)
        # (one NaN, whatever the computation made of x < 0 or a NaN: every schedule gives
        # the same bits)
        return b.select(b.fcmp_unordered("<", x, C(0.0)), C(float("nan")), res)

    def _log_reduce(self, x, low: float = 0.7071067811865476, with_m: bool = False):
        """``x = m * 2^e`` with ``m`` in ``[low, 2 low)`` (``low`` sqrt(1/2), or 3/4):
        ``(e, f = m - 1, exact)``, ``e`` and ``f`` float32 (``f`` exact), for a positive
        finite ``x`` (other values give garbage that :meth:`_log_specials` replaces);
        ``exact`` says ``e`` is ``-inf`` at 0 and ``inf`` at ``inf`` with ``f`` finite
        (AVX-512's instructions, for ``low = 3/4``); ``with_m``: ``m`` too, fourth."""
        b, ty, ity, C, I, madd = self._kit(x)
        quarter = low == 0.75
        getmant = self.policy.vector_op("getmant34" if quarter else "getmant", ty)
        getexp = self.policy.vector_op("getexp", ty)
        if getmant is not None and getexp is not None:
            # m and floor(log2 |x|), subnormals included, in one instruction each (the
            # same f and exponent as below, so the same bits)
            m = getmant(b, self.mb, x)
            e = getexp(b, self.mb, x)
            if quarter:     # m in [3/4, 3/2); m < 1: one more in the exponent
                ef = b.select(b.fcmp_ordered("<", m, C(1.0)), b.fadd(e, C(1.0)), e)
                if with_m:
                    return ef, b.fsub(m, C(1.0)), True, m
                return ef, b.fsub(m, C(1.0)), True
            # m in [1, 2); m >= sqrt(2): m/2 - 1 and one more in the exponent
            high = b.fcmp_ordered(">=", m, C(2 * 0.70710677))
            f = b.fsub(b.select(high, b.fmul(m, C(0.5)), m), C(1.0))
            return b.select(high, b.fadd(e, C(1.0)), e), f, False
        # subnormals: scaled into the normal range first, their exponent corrected
        tiny = b.fcmp_ordered("<", x, C(1.1754943508222875e-38))
        xs = b.select(tiny, b.fmul(x, C(8388608.0)), x)
        bits = b.bitcast(xs, ity)
        e = b.sub(b.lshr(bits, I(23)), b.select(tiny, I(126 + 23), I(126)))
        # m in [0.5, 1): the bits of x with the exponent of 0.5
        m = b.bitcast(b.or_(b.and_(bits, I(0x007FFFFF)), I(0x3F000000)), ty)
        # m < low: 2m - 1 and one less in the exponent, else m - 1
        below = b.fcmp_ordered("<", m, C(low))
        m = b.select(below, b.fadd(m, m), m)
        ef = b.sitofp(b.select(below, b.sub(e, I(1)), e), ty)
        if with_m:
            return ef, b.fsub(m, C(1.0)), False, m
        return ef, b.fsub(m, C(1.0)), False

    #: log2(e) as a float32 and the rest
    _LOG2E = (1.4426950216293335, 1.925963033500011e-08)

    def log2_f32(self, x):
        """log2(x) for float32 in plain vector instructions: :meth:`_log_reduce`'s
        ``e`` and ``f``, ``log1p(f) = f + y`` as in :meth:`log_f32` (``y`` the
        polynomial's part), then ``e + f*log2(e) + y*log2(e)`` with ``log2(e)`` in two
        parts.  With :data:`LOG_TABLE` (AVX-512: :meth:`_log_lookup`),
        :meth:`_log_table`'s base-2 form on ``[3/4, 3/2)``.  Special values as ``log``."""
        b, ty, _, C, _, madd = self._kit(x)
        lookup = self._log_lookup(ty)
        if lookup is not None:
            ef, _, exact, m = self._log_reduce(x, 0.75, with_m=True)
            t, p, lo, _ = self._log_table(lookup, ef, m, base2=True)
            return self._log_specials(x, b.fadd(t, b.fadd(p, lo)), exact)
        ef, f, _ = self._log_reduce(x)
        z = b.fmul(f, f)
        y = b.fmul(b.fmul(self._horner(self._LOG_P, f, madd), f), z)
        y = madd(z, C(-0.5), y)
        hi, lo = self._LOG2E
        w = madd(f, C(lo), b.fmul(y, C(hi)))
        return self._log_specials(x, b.fadd(ef, madd(f, C(hi), w)))

    def log1p_f32(self, x):
        """log(1 + x) for float32, accurate near 0.  With :data:`LOG1P_EXACT_ARG`: ``u =
        1 + x`` (rounded) gives ``e`` of :meth:`_log_reduce` (``u = m 2^e``, ``m`` in
        ``[3/4, 3/2)``), then ``f = x 2^-e + (2^-e - 1)`` by one FMA: the exact ``(1 + x)
        2^-e - 1`` wherever it is a float (``x 2^-e`` and ``2^-e - 1`` within a factor 2
        of each other: Sterbenz; ``x`` itself for ``e = 0``), and ``e ln2 + log1p(f)``
        by ``log``'s polynomial (:meth:`_log34`): no division.  Lanes with ``x <= -1``,
        ``x >= 2^125`` (``2^-e`` would be subnormal), inf or NaN take a branch, once per
        vector that has one, to the form below; ``log1p(+-0) = +-0`` by a select.
        Otherwise: ``log(u) + (x - (u - 1)) / u`` (:meth:`log_f32`; the correction is
        the rounding error of ``u``, exact, divided by ``u``).  With :data:`LOG_TABLE`
        (AVX-512: :meth:`_log_lookup`): :meth:`_log1p_table`.
        ``log1p(+-0) = +-0``, ``log1p(-1) = -inf``, NaN below -1, ``log1p(inf) = inf``."""
        lookup = self._log_lookup(x.type)
        if lookup is not None:
            return self._log1p_table(x, lookup)
        if LOG1P_EXACT_ARG and self.policy.has_fma:
            return self._log1p_exact_arg(x)
        return self._log1p_by_division(x)

    def _log1p_table(self, x, lookup):
        """:meth:`log1p_f32` with :data:`LOG_TABLE`: ``log(u)`` of ``u = 1 + x`` (rounded)
        as :meth:`log_f32` computes it, ``t + (r + lo)``, with ``lo`` plus ``d/u``, ``d =
        x - (u - 1)`` the rounding error of ``u`` (exact), as ``d' (1 - r)``, ``d' = d
        (1/c) 2^-e`` (``vscalefps``; a scalar builds ``2^-e`` from its bits; ``1/u =
        (1/c) 2^-e / (1 + r)``; the next term, ``d' r^2``, is below 2^-32 of the
        result).
        Lanes with ``u`` not a positive normal float (``x <= -1``, inf, NaN) take a
        branch, once per vector that has one, to the division's form; ``+-0`` by a
        select."""
        b, ty, ity, C, I, madd = self._kit(x)
        u = b.fadd(x, C(1.0))
        ef, _, _, m = self._log_reduce(u, 0.75, with_m=True)
        t, r, lo, inv = self._log_table(lookup, ef, m)
        d = b.fmul(b.fsub(x, b.fsub(u, C(1.0))), inv)
        scalef = self.policy.vector_op("scalef", ty)
        if scalef is not None:
            d = scalef(b, self.mb, d, b.fneg(ef))
        else:   # (a scalar) 2^-e from its exponent bits (e in [-24, 128] here; from 127
            # on as 0: d/u is then below 2^-150)
            ec = b.call(self._fn1("llvm.minnum", ty, 2), [ef, C(127.0)])
            d = b.fmul(d, b.bitcast(b.add(b.fptosi(b.fmul(ec, C(-(2.0 ** 23))), ity),
                                          I(127 << 23)), ty))
        lo = b.fadd(lo, madd(b.fneg(d), r, d))
        res = b.fadd(t, b.fadd(r, lo))
        res = b.select(b.fcmp_ordered("==", x, C(0.0)), x, res)
        # u <= 0 (either zero), inf or NaN: its bits minus the smallest normal's, unsigned,
        # at or beyond those of inf minus it
        odd = b.icmp_unsigned(">=", b.sub(b.bitcast(u, ity), I(0x00800000)),
                              I(0x7F800000 - 0x00800000))
        return self._slow_where(odd, "log1p.special", self._log1p_special, x, res)

    def _log1p_special(self, x):
        """:meth:`_log1p_by_division` with one NaN for every NaN (LLVM may order the
        operands of its last addition either way, which picks one of two NaNs)."""
        b, _, _, C, _, _ = self._kit(x)
        return b.select(b.fcmp_unordered("uno", x, x), C(float("nan")),
                        self._log1p_by_division(x))

    def _log1p_exact_arg(self, x):
        """:meth:`log1p_f32` with :data:`LOG1P_EXACT_ARG`."""
        b, ty, ity, C, I, madd = self._kit(x)
        ef, _, _ = self._log_reduce(b.fadd(x, C(1.0)), 0.75)
        scalef = self.policy.vector_op("scalef", ty)
        if scalef is not None:
            s = scalef(b, self.mb, C(1.0), b.fneg(ef))
        else:   # 2^-e from its exponent bits (e in [-24, 126] here)
            s = b.bitcast(b.add(b.fptosi(b.fmul(ef, C(-(2.0 ** 23))), ity), I(127 << 23)), ty)
        res = self._log34(ef, madd(x, s, b.fsub(s, C(1.0))))
        res = b.select(b.fcmp_ordered("==", x, C(0.0)), x, res)
        odd = b.or_(b.fcmp_unordered("<=", x, C(-1.0)), b.fcmp_unordered(">=", x, C(2.0 ** 125)))
        return self._slow_where(odd, "log1p.special", self._log1p_by_division, x, res)

    def _log1p_by_division(self, x):
        """:meth:`log1p_f32` by ``log(u) + (x - (u - 1)) / u``."""
        b, ty, _, C, _, _ = self._kit(x)
        u = b.fadd(x, C(1.0))
        c = b.fsub(x, b.fsub(u, C(1.0)))
        res = b.fadd(self.log_f32(u), b.fdiv(c, u))
        res = b.select(b.fcmp_ordered("==", x, C(float("inf"))), x, res)
        res = b.select(b.fcmp_ordered("==", x, C(-1.0)), C(float("-inf")), res)
        return b.select(b.fcmp_ordered("==", x, C(0.0)), x, res)

    def softplus(self, x):
        """log(1 + exp(x)) without overflow: ``max(x, 0) + log1p(exp(-|x|))`` (float32:
        :meth:`_softplus_f32`; float64: tecomp's float64 ``exp`` and libm's ``log1p`` per
        lane).  ``+inf`` gives ``+inf``, ``-inf`` gives 0, NaN stays NaN."""
        b, ty, _, C, _, _ = self._kit(x)
        el = ty.element if isinstance(ty, ir.VectorType) else ty
        if not isinstance(el, ir.DoubleType):
            return self._softplus_f32(x)
        e = self.exp(b.fneg(b.call(self._fn1("llvm.fabs", ty), [x])))
        return b.fadd(b.call(self._fn1("llvm.maxnum", ty, 2), [x, C(0.0)]),
                      self._call_lanes("log1p", e))

    #: log1p(t) = C_hi + (r H + (C_lo + r (L + r (q1 + r (q2 + r q3))))) on 16 segments of
    #: t in [0, 1]: k = min(round(16 t), 15), r = t - k/16 (exact), one row per k:
    #: (C_hi, C_lo, H, L, q1, q2, q3), C = log1p(k/16) and H + L the slope in two float32
    #: parts (k = 0: C = 0, log1p(t) = t (H + L + ...)).  Fitted for tecomp (Lawson's
    #: iteration towards the minimax relative error against float64 log1p, 5.7e-9 or
    #: better with the coefficients rounded to float32)
    _LOG1P_SEGMENTS = (
        (0.0, 0.0, 1.0, -1.4081782e-09, -0.49999854, 0.3331006, -0.23794128),
        (0.06062462, 7.90594e-12, 0.9411764, 2.0779984e-08, -0.44290563, 0.2780715, -0.1974201),
        (0.11778303, 3.2986907e-09, 0.88888884, 2.289126e-08, -0.39506137, 0.23424248,
         -0.15655911),
        (0.17185026, -7.145759e-09, 0.8421052, 2.9590637e-08, -0.35457045, 0.19915877,
         -0.12598678),
        (0.22314355, 3.5408485e-09, 0.79999995, 2.9024212e-08, -0.3199999, 0.17074563,
         -0.102566004),
        (0.2719337, 1.0869003e-08, 0.7619048, -2.894633e-08, -0.29024938, 0.14749031,
         -0.08435547),
        (0.31845373, 1.965855e-09, 0.7272727, 2.6166829e-08, -0.26446277, 0.12827364,
         -0.07001778),
        (0.3629055, -8.629968e-09, 0.6956522, -2.241695e-08, -0.24196593, 0.11225558,
         -0.058603086),
        (0.4054651, 1.1872889e-08, 0.6666667, -2.7538938e-08, -0.2222222, 0.09879737,
         -0.04942368),
        (0.4462871, 7.081697e-09, 0.64, 8.035058e-09, -0.20479998, 0.087407395, -0.041973844),
        (0.48550782, -2.9457786e-10, 0.61538464, -2.8088653e-08, -0.1893491, 0.07770312,
         -0.035876635),
        (0.52324814, 7.720999e-09, 0.5925926, -8.697924e-09, -0.17558298, 0.069383875,
         -0.030847643),
        (0.5596158, -2.908541e-09, 0.5714286, -2.9120411e-08, -0.1632653, 0.062211115,
         -0.026669888),
        (0.59470713, -2.363911e-08, 0.55172414, -9.483001e-10, -0.15219976, 0.05599395,
         -0.023176135),
        (0.62860864, 1.5413738e-08, 0.5333333, 2.9251307e-08, -0.14222221, 0.050578397,
         -0.020236267),
        (0.6613985, 1.1843601e-08, 0.516129, 1.5673786e-08, -0.13319509, 0.04583338,
         -0.017224075),
    )

    #: softplus(x) - max(x, 0) = log1p(exp(-a)), a = |x|, = C_hi + (t H + (C_lo + t (L + t
    #: (p2 + t (p3 + t (p4 + t p5)))))) on 32 segments of a in [0, 15.5]: k = round(2a),
    #: t = a - k/2 (exact), one row per k: (C_hi, C_lo, H, L, p2, ..., p5), C =
    #: log1p(exp(-k/2)) and H + L the slope in two float32 parts.  Fitted for tecomp
    #: (Lawson's iteration towards the minimax relative error against mpmath, 1.3e-8 or
    #: better with the coefficients rounded to float32 one at a time, the others refitted;
    #: read without L where :data:`SOFTPLUS_SHORT_SEGMENTS` is on)
    _SOFTPLUS_SEGMENTS = (
        (0.6931472, -1.9046542e-09, -0.5, 8.62395e-09, 0.124999516, 8.824591e-06,
         -0.0052786404, 0.00025519094),
        (0.474077, -2.1327595e-09, -0.37754068, 1.1496181e-08, 0.11750154, -0.00959285,
         -0.00399855, 0.0008686775),
        (0.3132617, -2.373619e-10, -0.26894143, 6.8101835e-09, 0.09830608, -0.015142575,
         -0.0014779529, 0.0010204826),
        (0.20141327, 4.171412e-09, -0.18242553, -3.2046513e-10, 0.0745735, -0.015787989,
         0.00063888065, 0.0006182818),
        (0.12692802, -5.5004157e-09, -0.11920293, 1.5288375e-09, 0.052496992, -0.013326888,
         0.0016083962, 0.00017193078),
        (0.078889735, -7.504992e-10, -0.07585818, 2.097904e-09, 0.035051942, -0.009911256,
         0.0016880084, -7.8255165e-05),
        (0.048587352, -4.6368775e-10, -0.047425874, 4.3583367e-10, 0.022588342, -0.006815279,
         0.0013714979, -0.0001552901),
        (0.029750418, 3.5465372e-10, -0.02931223, 3.0114472e-10, 0.014226496, -0.0044641965,
         0.0009839745, -0.0001464096),
        (0.018149927, 6.593182e-10, -0.01798621, 5.2404636e-10, 0.008831332, -0.0028379194,
         0.00065903034, -0.00011142756),
        (0.011047745, -2.749118e-10, -0.010986942, -4.3308757e-10, 0.0054330975, -0.0017712648,
         0.00042414252, -7.677241e-05),
        (0.0067153485, 3.3063143e-11, -0.0066928505, -1.9733479e-10, 0.003324016,
         -0.0010931932, 0.00026659734, -5.0145743e-05),
        (0.004078443, 1.0842749e-10, -0.0040701376, 6.26548e-11, 0.0020267775, -0.0006701053,
         0.00016522306, -3.1788946e-05),
        (0.0024756852, -6.944278e-11, -0.002472623, -4.2097038e-11, 0.0012332493,
         -0.00040905806, 0.00010152635, -1.9792822e-05),
        (0.0015023102, 1.069434e-12, -0.0015011822, 1.3734824e-11, 0.00074946106,
         -0.00024907527, 6.206581e-05, -1.2194965e-05),
        (0.0009114664, 2.5695534e-11, -0.0009110512, 1.7122024e-11, 0.00045510853,
         -0.00015142944, 3.782566e-05, -7.4685554e-06),
        (0.00055293145, 2.4122105e-11, -0.0005527786, -1.6400463e-11, 0.00027623528,
         -9.1978494e-05, 2.3008828e-05, -4.5557786e-06),
        (0.00033540637, 6.3929027e-12, -0.0003353501, -7.8767635e-12, 0.00016761807,
         -5.5836354e-05, 1.3980098e-05, -2.7729056e-06),
        (0.00020344768, -6.2297823e-12, -0.00020342697, 1.3237405e-12, 0.00010169233,
         -3.388434e-05, 8.4884705e-06, -1.685541e-06),
        (0.00012340219, -1.3699327e-12, -0.00012339457, -4.9935577e-12, 6.168939e-05,
         -2.0558471e-05, 5.1518473e-06, -1.0236738e-06),
        (7.484903e-05, 1.1874526e-12, -7.4846226e-05, 1.7868029e-12, 3.742014e-05,
         -1.2471769e-05, 3.1259406e-06, -6.213055e-07),
        (4.5398898e-05, 1.4344309e-12, -4.539787e-05, 1.4133214e-12, 2.2697799e-05,
         -7.565401e-06, 1.8964374e-06, -3.7702637e-07),
        (2.753607e-05, -5.459731e-13, -2.753569e-05, 6.3292833e-13, 1.3767402e-05,
         -4.5889747e-06, 1.1504219e-06, -2.2876148e-07),
        (1.670156e-05, 7.9270466e-13, -1.670142e-05, -6.9194596e-13, 8.350533e-06,
         -2.783475e-06, 6.9782163e-07, -1.3876318e-07),
        (1.0130042e-05, 2.612567e-13, -1.012999e-05, -3.7356424e-13, 5.0649205e-06,
         -1.6883067e-06, 4.2327767e-07, -8.418537e-08),
        (6.1441933e-06, 1.5649919e-13, -6.144174e-06, -1.2548679e-13, 3.0720541e-06,
         -1.0240263e-06, 2.5673774e-07, -5.105987e-08),
        (3.7266461e-06, 1.0043541e-13, -3.726639e-06, -5.0477316e-14, 1.8633041e-06,
         -6.2110945e-07, 1.5572152e-07, -3.0969307e-08),
        (2.260327e-06, -8.473531e-14, -2.2603242e-06, 4.564216e-15, 1.1301544e-06,
         -3.7672416e-07, 9.445086e-08, -1.8783837e-08),
        (1.3709581e-06, 4.402274e-14, -1.3709572e-06, 4.3124768e-14, 6.854745e-07,
         -2.2849557e-07, 5.728763e-08, -1.1393132e-08),
        (8.315284e-07, -8.766528e-15, -8.31528e-07, -8.918102e-15, 4.1576175e-07,
         -1.3858985e-07, 3.474694e-08, -6.9105384e-09),
        (5.0434755e-07, -1.8557704e-14, -5.043474e-07, -3.8640546e-15, 2.521724e-07,
         -8.405911e-08, 2.107512e-08, -4.191404e-09),
        (3.0590226e-07, 1.197018e-14, -3.059022e-07, -9.333598e-15, 1.5295036e-07,
         -5.098447e-08, 1.2782674e-08, -2.5421512e-09),
        (1.8553912e-07, -2.7949438e-15, -1.855391e-07, -7.16329e-16, 9.2769106e-08,
         -3.092366e-08, 7.753109e-09, -1.5419291e-09),
    )

    #: |x| from which :meth:`_softplus_f32_direct` leaves its segments: ``x`` itself above
    #: (log1p(exp(-x)) < 1.9e-7, below a fifth of x's ulp), ``exp`` below
    _SOFTPLUS_EDGE = 15.5

    def _softplus_f32_direct(self, x, lookup):
        """float32 softplus without an exponential where the target has a 32-entry table
        instruction (``lookup``: AVX-512's ``vpermi2ps``) and FMA: ``max(x, 0) + g(a)``,
        ``g(a) = log1p(exp(-a))``, ``a = |x|``, with ``g`` one degree-5 polynomial per
        half unit of ``a`` (``_SOFTPLUS_SEGMENTS``, read per lane as :meth:`erf_f32`
        reads its own), relative to ``g`` itself, so that ``x < 0`` keeps its relative
        accuracy.  ``a`` is clamped to 15.5 first: ``x >= 15.5`` gives ``x + g(15.5)``,
        which rounds to ``x`` (``+inf`` too).  Lanes with ``x < -15.5`` or NaN take a
        branch, once per vector that has one: ``t = exp(x)`` (:meth:`exp_f32`'s steps,
        ``x`` clamped to -104, where ``t`` is 0) and ``log1p(t) = t - t^2/2`` rounded once
        (one FMA: ``t < 1.9e-7``); NaN stays NaN."""
        b, ty, _, C, _, madd = self._kit(x)
        edge = self._SOFTPLUS_EDGE
        # a = min(|x|, edge): k <= 31 without a clamp of its own, and x >= edge gives
        # x + g(edge), which rounds to x (+inf included)
        a = b.call(self._fn1("llvm.minnum", ty, 2),
                   [b.call(self._fn1("llvm.fabs", ty), [x]), C(edge)])
        if SOFTPLUS_SHORT_SEGMENTS:
            g = self._segments_short(lookup, self._SOFTPLUS_SEGMENTS, a, 2.0)
        else:
            g = self._segments(lookup, self._SOFTPLUS_SEGMENTS, a, 2.0, clamp=False)
        res = b.fadd(b.select(b.fcmp_ordered("<", x, C(0.0)), C(0.0), x), g)

        def tail(v):
            t = self._exp_in(b.call(self._fn1("llvm.maxnum", ty, 2), [v, C(-104.0)]),
                             None, None)
            r = madd(b.fmul(t, C(-0.5)), t, t)
            return b.select(b.fcmp_unordered("uno", v, v), v, r)
        return self._slow_where(b.fcmp_unordered("<", x, C(-edge)), "softplus.tail", tail,
                                x, res)

    def _softplus_f32(self, x):
        """float32 softplus with one exponential and one logarithm polynomial: ``t =
        exp(-|x|)`` in ``(0, 1]`` (:meth:`exp_f32`'s steps, ``|x|`` clamped to 104, where
        ``t`` is 0), then ``log1p(t)``, then ``max(x, 0) +`` that.  ``t = 0`` gives 0
        (``softplus(-inf) = 0``, ``+inf`` gives ``+inf``); a NaN is kept by ``max(x, 0)``
        (segments) or selected back at the end.

        Where the target has fused multiply-adds and a 16-entry table instruction (x86
        with AVX2 or AVX-512, as :meth:`erf_f32`; :data:`SOFTPLUS_SEGMENTS`), ``log1p(t)``
        is one polynomial per sixteenth of ``[0, 1]`` (``_LOG1P_SEGMENTS``), its
        coefficients read per lane: ``k = min(round(16 t), 15)`` (from the low bits of
        ``16 t + 1.5 * 2^23``, one FMA), ``r = t - k/16`` (exact), ``C_hi + (r H + (C_lo
        + r Q(r)))``: five FMAs where the form below takes fourteen multiplies and FMAs.
        Elsewhere an exact reduction that needs neither the exponent bits of ``1 + t`` nor
        a division: ``t < 1/2``: ``log1p(t)`` itself, ``f = t``; ``t >= 1/2``: ``log1p(t)
        = ln2 + log1p(f)`` with ``f = (t - 1)/2`` (one FMA, exact), so ``f`` is in
        ``[-1/4, 1/2)``, where :meth:`log_f32`'s polynomial holds (``f - f^2/2 + f^3
        P(f)``, ``ln2`` in two parts)."""
        b, ty, _, C, _, madd = self._kit(x)
        lookup = self.policy.vector_op("lookup32", ty) \
            if self.policy.has_fma and SOFTPLUS_DIRECT else None
        if lookup is not None:
            return self._softplus_f32_direct(x, lookup)
        nx = b.fneg(b.call(self._fn1("llvm.fabs", ty), [x]))
        t = self._exp_in(b.call(self._fn1("llvm.maxnum", ty, 2), [nx, C(-104.0)]), None, None)
        lookup = self.policy.vector_op("lookup16", ty) \
            if self.policy.has_fma and SOFTPLUS_SEGMENTS else None
        if lookup is not None:
            l1p = self._segments(lookup, self._LOG1P_SEGMENTS, t, 16.0)
            # max(x, 0) that keeps a NaN (one vmaxps, the NaN as its second operand): the
            # sum is NaN, no select at the end
            return b.fadd(b.select(b.fcmp_ordered("<", x, C(0.0)), C(0.0), x), l1p)
        high = b.fcmp_ordered(">=", t, C(0.5))
        f = b.select(high, madd(t, C(0.5), C(-0.5)), t)
        e = b.select(high, C(1.0), C(0.0))
        z = b.fmul(f, f)
        y = b.fmul(b.fmul(self._horner(self._LOG34_P, f, madd), f), z)
        y = madd(e, C(self._LN2_F32[1]), y)
        y = madd(z, C(-0.5), y)
        l1p = madd(e, C(self._LN2_F32[0]), b.fadd(f, y))
        res = b.fadd(b.call(self._fn1("llvm.maxnum", ty, 2), [x, C(0.0)]), l1p)
        return b.select(b.fcmp_unordered("uno", x, x), x, res)

    #: sin(r) = r + r z S(z) and cos(r) = 1 - z/2 + z^2 C(z), z = r^2, |r| <= pi/4 (the
    #: coefficients of Cephes' sinf and cosf)
    _SIN_S = (-1.6666654611e-1, 8.3321608736e-3, -1.9515295891e-4)
    _COS_C = (4.166664568298827e-2, -1.388731625493765e-3, 2.443315711809948e-5)
    #: pi/2 in parts for the reduction ``r = x - q*pi/2``, and the largest ``|x|`` each
    #: split keeps accurate (libm per lane beyond): with fused multiply-adds, three
    #: float32s of 24 bits each (each ``fma`` computes ``r - q*part`` exactly and rounds
    #: once); without, four parts with trailing zero bits, so that ``q * part`` is exact
    _PIO2_FMA = ((1.5707963705062866, -4.371138828673793e-08, -1.7151245100058819e-15),
                 65536.0)
    _PIO2_NOFMA = ((1.5703125, 0.00048351287841796875, 3.1385570764541626e-07,
                    6.07710062827671e-11), 125.0)

    #: sin(r) = r + r z P(z), z = r^2, |r| <= pi/2 + 0.02 (fitted for tecomp: Lawson's
    #: iteration towards the minimax relative error against mpmath, the coefficients
    #: rounded to float32 one at a time, the others refitted: 7.5e-9)
    _SIN_PI_P = (-0.16666658222675323, 0.00833303015679121, -0.0001980684173759073,
                 2.5994663701567333e-06)

    def sin_f32(self, x):
        """sin(x) for float32: see :meth:`_sincos_f32`."""
        return self._sincos_f32(x, 0)

    def cos_f32(self, x):
        """cos(x) for float32: see :meth:`_sincos_f32`."""
        return self._sincos_f32(x, 1)

    def _sincos_f32(self, x, quarter: int):
        """sin(x) (``quarter`` 0) or cos(x) = sin(x + pi/2) (``quarter`` 1) for float32
        in plain vector instructions: ``q = round(x * 2/pi)`` (:meth:`_quadrant`),
        ``r = x - q*pi/2`` with pi/2 in three or four parts (Cody and Waite; ``_PIO2_FMA``,
        ``_PIO2_NOFMA``), ``|r| <= pi/4``; the polynomial of sin or of cos on ``r`` by
        the quadrant ``q + quarter`` (Cephes' degree-7 and degree-8 polynomials), its
        sign flipped in the odd half-turns.  Where a lane has ``|x|`` above the split's
        limit (65536 with FMA, 125 without) or inf or NaN, the vector takes a branch that
        calls libm's ``sinf``/``cosf`` for such lanes.
        ``sin(+-0) = +-0``; sin of tiny ``x`` is ``x``."""
        if self.policy.has_fma and SINCOS_BY_PI:
            return self._sincos_f32_by_pi(x, quarter)
        b, ty, ity, C, I, madd = self._kit(x)
        parts, limit = self._PIO2_FMA if self.policy.has_fma else self._PIO2_NOFMA
        q, kq = self._quadrant(x)
        r = x
        for part in parts:
            r = madd(q, C(-part), r)
        z = b.fmul(r, r)
        sin_r = madd(b.fmul(r, z), self._horner(self._SIN_S, z, madd), r)
        cos_r = madd(b.fmul(z, z), self._horner(self._COS_C, z, madd), madd(z, C(-0.5), C(1.0)))
        k = b.add(kq, I(quarter))
        odd = b.icmp_unsigned("!=", b.and_(k, I(1)), I(0))
        res = b.select(odd, cos_r, sin_r)
        flip = b.shl(b.and_(k, I(2)), I(30))
        res = b.bitcast(b.xor(b.bitcast(res, ity), flip), ty)
        ax = b.call(self._fn1("llvm.fabs", ty), [x])
        if quarter == 0:    # sin(x) = x for tiny x (and the sign of +-0, which r loses)
            res = b.select(b.fcmp_ordered("<", ax, C(2.0 ** -12)), x, res)
        big = b.fcmp_unordered(">", ax, C(limit))
        return self._libm_where(big, ("sinf", "cosf")[quarter], x, res)

    def _sincos_f32_by_pi(self, x, quarter: int):
        """sin(x) (``quarter`` 0) or cos(x) (``quarter`` 1) for float32 where the target
        has FMA: ``x = h pi + r`` with ``h`` the nearest integer (sin) or half-odd integer
        (cos: ``cos(x) = sin(x - pi/2 + pi/2)``) to ``x/pi``, from the low bits of ``x/pi +
        1.5 * 2^23`` (sin) or ``(2x/pi - 1) + 1.5 * 2^24`` (cos, whose low bits count
        twos); ``r = x - h pi`` with pi in the three parts of ``2 _PIO2_FMA`` (one rounding
        each, as :meth:`_sincos_f32`), ``|r| <= pi/2``; ``sin(r) = r + r z P(z)`` with a
        degree-3 ``P`` (``_SIN_PI_P``), its sign flipped for odd ``h`` (sin) or even ``h -
        1/2`` (cos).  The branch for large ``|x|``, inf and NaN and ``sin(+-0) = +-0``
        as :meth:`_sincos_f32`."""
        b, ty, ity, C, I, madd = self._kit(x)
        parts, limit = self._PIO2_FMA
        if quarter == 0:
            magic = 12582912.0
            s = madd(x, C(0.31830988618379067), C(magic))
            h = b.fsub(s, C(magic))
            odd = b.bitcast(s, ity)
        else:   # h = e/2 + 1/2, e = the even integer nearest to 2x/pi - 1
            magic = 25165824.0
            s = b.fadd(madd(x, C(0.63661977236758134), C(-1.0)), C(magic))
            h = madd(b.fsub(s, C(magic)), C(0.5), C(0.5))
            odd = b.add(b.bitcast(s, ity), I(1))   # (s's bits count twos: e/2 + 1)
        r = x
        for part in parts:
            r = madd(h, C(-2.0 * part), r)
        z = b.fmul(r, r)
        res = madd(b.fmul(r, z), self._horner(self._SIN_PI_P, z, madd), r)
        res = b.bitcast(b.xor(b.bitcast(res, ity), b.shl(odd, I(31))), ty)
        ax = b.call(self._fn1("llvm.fabs", ty), [x])
        if quarter == 0:    # sin(x) = x for tiny x (and the sign of +-0, which r loses)
            res = b.select(b.fcmp_ordered("<", ax, C(2.0 ** -12)), x, res)
        big = b.fcmp_unordered(">", ax, C(limit))
        return self._libm_where(big, ("sinf", "cosf")[quarter], x, res)

    def _quadrant(self, x):
        """``q = round(x 2/pi)`` of float32 ``x`` (``|x| < 2^21``; other lanes get some
        value), as a float and as the int32 whose low bits are ``q``'s (two's
        complement): with :data:`QUADRANT_MAGIC`, from ``s = x 2/pi + 1.5 * 2^23``
        (rounded once: an FMA where the target has it, so ``q`` rounds the exact product),
        ``q = s - 1.5 * 2^23`` and ``s``'s bits; else ``roundeven`` of the rounded product
        and a conversion.  Either ``q`` keeps ``|x - q pi/2|`` within ``pi/4`` and a few
        ulp."""
        b, ty, ity, C, _, madd = self._kit(x)
        if QUADRANT_MAGIC:
            magic = 12582912.0
            s = madd(x, C(0.63661977236758134), C(magic))
            return b.fsub(s, C(magic)), b.bitcast(s, ity)
        q = b.call(self._fn1("llvm.roundeven", ty), [b.fmul(x, C(0.63661977236758134))])
        return q, b.fptosi(q, ity)

    def _libm_where(self, cond, fname: str, x, res):
        """``res`` with the lanes where ``cond`` holds replaced by the float32 libm
        function ``fname`` of ``x``'s lanes, in a branch taken only when some lane needs
        it (:meth:`_slow_where`)."""
        return self._slow_where(cond, f"{fname}.libm",
                                lambda v: self._call_lanes(fname, v), x, res)

    def tanh_f32(self, x):
        """tanh(x) for float32 (scalar or vector) in plain vector instructions (libm's
        ``tanhf`` is one call per lane: a GELU written with ``tc.tanh`` ran at a tenth of
        PyTorch's speed).

        One formula over the whole range, on ``a = |x|`` (clamped to 10: tanh rounds to 1
        from 9.01 on; a NaN goes through every step): ``E = expm1(2a) / 2``, then
        ``q = E / (E + 1)`` and the sign of ``x``.  ``2a = n ln2 + 2r``: ``n`` by adding
        ``1.5 * 2^23 + 127`` to ``2a log2(e)`` (one FMA; the sum's low bits are the
        exponent of ``2^n``), ``r = a - n ln2/2`` (one FMA with one constant: ``n <= 29``
        keeps its error below 3e-8 of ``r``; without FMA ``ln2/2`` in two parts, the first
        exact in the product); ``u/2 = (exp(2r) - 1)/2`` by :meth:`_expm1_poly`'s
        polynomial with its coefficients scaled by powers of 2 (the same bits as that of
        ``2r``, halved), ``E = 2^n (u/2) + (2^n - 1)/2`` (``2^n u/2`` exact, one rounding;
        ``u/2`` itself for ``n = 0``, so the result keeps its relative accuracy near 0).
        Below ``a = atanh(1/2)`` (``E < 1``) the quotient is refined by
        ``E - E q = E / (E + 1) - E^2 / (E + 1) d``: the relative error ``d`` of ``q``
        (the rounding of ``E + 1`` and of the division) is scaled down by ``E``.  No
        step is ever contracted, so every schedule gives the same bits; measured on
        every float32 input against float64 tanh: docs/numerics.md.  NaN stays NaN,
        ``tanh(+-inf) = +-1``, ``tanh(-0.0) = -0.0``."""
        b, ty, ity, C, I, madd = self._kit(x)
        ax = b.call(self._fn1("llvm.fabs", ty), [x])
        # min(ax, 10) that keeps a NaN (one vminps, the NaN as its second operand)
        a = b.select(b.fcmp_ordered(">", ax, C(10.0)), C(10.0), ax)
        # t = 1.5 * 2^23 + 127 + n: n = roundeven(2a log2(e)) in the low bits
        magic = 12582912.0 + 127.0
        t = madd(a, C(2.8853900817779268), C(magic))
        n = b.fsub(t, C(magic))
        if self.policy.has_fma:
            r = madd(n, C(-0.34657359027997264), a)
        else:       # (n * 0.3466796875 is exact: 9 significant bits times 5)
            r = madd(n, C(2.12194440e-4 / 2), madd(n, C(-0.693359375 / 2), a))
        # (u/2)(r) = (exp(2r) - 1)/2 = r + 2 r^2 P(2r): P(2r) 2 by Horner with c_k 2^(k+1)
        p = self._horner([c * 2.0 ** (k + 1) for k, c in enumerate(self._EXPM1_P)], r, madd)
        uh = madd(b.fmul(p, r), r, r)
        s = b.bitcast(b.shl(b.bitcast(t, ity), I(23)), ty)      # 2^n
        e = madd(s, uh, madd(s, C(0.5), C(-0.5)))
        q = b.fdiv(e, b.fadd(e, C(1.0)))
        q = b.select(b.fcmp_ordered("<", a, C(0.54930615)), madd(b.fneg(e), q, e), q)
        return b.call(self._fn1("llvm.copysign", ty, 2), [q, x])

    #: erf(x) = x * (c0 + z * P(z)), z = x^2, for |x| < 1 (c0 = 2/sqrt(pi) split in two)
    _ERF_C0 = (1.128379225730896, -5.8635382771399236e-08)

    _ERF_P = (-0.3761262595653534, 0.1128358542919159, -0.02685382030904293,
              0.005188341718167067, -0.0008010306628420949, 7.854205614421517e-05)

    #: erfc(a) = exp(-a^2) * u * Q(u), u = 1/a, for 1 <= a <= 4
    _ERF_Q = (0.5642389059066772, -0.001535734161734581, -0.26221171021461487,
              -0.1433429718017578, 1.0590153932571411, -1.7567129135131836,
              1.6511608362197876, -0.9528770446777344, 0.31634604930877686,
              -0.04649728909134865)

    #: erf(a) = C_hi + (t H + (C_lo + t (L + t (p2 + t (p3 + ... + t p6))))) on 16 segments
    #: of a = |x|: k = min(round(4a), 15), t = a - k/4 (exact); one row per k:
    #: (C_hi, C_lo, H, L, p2, ..., p6), C = erf(k/4) and H + L the slope in two float32
    #: parts (k = 0: C = 0, erf(a) = a (H + L + ...)).  Fitted for tecomp (Lawson's
    #: iteration towards the minimax relative error against mpmath, 2e-11 or better)
    _ERF_SEGMENTS = (
        (0.0, 0.0, 1.1283792, -5.8586377e-08, -2.8265095e-08,
         -0.37612376, -9.035452e-05, 0.11423582, -0.009985542),
        (0.2763264, 2.0475857e-09, 1.0600141, -4.400617e-09, -0.26500347,
         -0.3091677, 0.1269665, 0.07962957, -0.039708592),
        (0.5204999, -7.269198e-09, 0.8787826, 1.0798993e-08, -0.4393913,
         -0.1464649, 0.18307744, 0.0074698087, -0.049762305),
        (0.71115565, -1.9346363e-08, 0.6429311, -2.7159375e-08, -0.4821983,
         0.026784936, 0.15068875, -0.05274339, -0.026912084),
        (0.8427008, 1.3511696e-08, 0.4151075, 1.4838536e-08, -0.41510752,
         0.13836598, 0.069187514, -0.06877347, 0.00439604),
        (0.92290014, -1.2029034e-08, 0.23652112, -1.0024579e-09, -0.2956514,
         0.16753504, -0.006157184, -0.047082677, 0.021100327),
        (0.96610516, -1.662207e-08, 0.11893029, -3.5713782e-10, -0.17839544,
         0.138753, -0.044598084, -0.014994715, 0.019249355),
        (0.9866717, -1.4953303e-08, 0.05277499, 1.5864915e-09, -0.09235624,
         0.090158574, -0.048102506, 0.006459304, 0.008989206),
        (0.9953223, -2.206372e-08, 0.020666985, -8.629377e-10, -0.04133397,
         0.04822368, -0.03444557, 0.0129969865, 0.00051411707),
        (0.9985373, -1.8603894e-08, 0.007142319, -1.2017182e-10, -0.016070217,
         0.021724695, -0.01908375, 0.010639336, -0.0028701313),
        (0.999593, 2.8497082e-08, 0.0021782843, 1.08091223e-10, -0.0054457104,
         0.0083499765, -0.008622471, 0.006131988, -0.0027895013),
        (0.9998994, -9.281739e-09, 0.0005862775, 5.244738e-13, -0.0016122626,
         0.0027602513, -0.0032580835, 0.0027734248, -0.0016602526),
        (0.9999779, 2.2826214e-08, 0.00013925321, -1.537276e-12, -0.00041775932,
         0.00078901765, -0.0010443489, 0.0010272107, -0.0007426317),
        (0.9999957, -1.124504e-08, 2.9189096e-05, -6.3948933e-13, -9.486443e-05,
         0.0001957736, -0.0002865393, 0.00031844436, -0.00026633005),
        (0.9999993, -2.7842635e-08, 5.3994504e-06, 1.354609e-13, -1.8898034e-05,
         4.2283133e-05, -6.7705136e-05, 8.370946e-05, -7.8923505e-05),
        (0.9999999, 5.482033e-09, 8.814029e-07, -2.7703295e-14, -3.3046192e-06,
         7.976876e-06, -1.3969987e-05, 1.8264798e-05, -1.396301e-05),
    )

    def erf_f32(self, x):
        """erf(x) for float32 (scalar or vector) in plain vector instructions (libm's
        ``erff`` would be one call per lane, where GELU spent about half its time)
        (measurements: benchmarks/DECISIONS.md, "Code generator: erf in vector instructions").

        Where the target has fused multiply-adds and a 16-entry table instruction
        (``policy.vector_op("lookup16")``: x86 with AVX2 or AVX-512), one polynomial per
        segment of ``a = |x|`` (``_ERF_SEGMENTS``), its coefficients read per lane:
        ``a`` clamped to 4 (erf rounds to 1 from 3.92 on; a NaN kept),
        ``k = min(round(4a), 15)`` (from the low bits of ``4a + 1.5 * 2^23``, one FMA),
        ``t = a - k/4`` (exact), then ``C_hi + (t H + (C_lo + t Q(t)))`` with a degree-5
        ``Q`` by Horner and the sign of ``x``: no exponential, no division, one branch
        for every lane.  Elsewhere :meth:`_erf_f32_two_branches`.  No step is ever
        contracted, so every schedule gives the same bits (per target: the two forms
        differ by an ulp on some inputs); measured on every float32 input against
        float64 erf: docs/numerics.md.  NaN stays NaN, ``erf(+-inf) = +-1``,
        ``erf(-0.0) = -0.0``."""
        b, ty, ity, C, _, madd = self._kit(x)
        lookup = self.policy.vector_op("lookup16", ty) if self.policy.has_fma else None
        if lookup is None:
            return self._erf_f32_two_branches(x)
        ax = b.call(self._fn1("llvm.fabs", ty), [x])
        # min(ax, 4) that keeps a NaN (one vminps, the NaN as its second operand)
        a = b.select(b.fcmp_ordered(">", ax, C(4.0)), C(4.0), ax)
        res = self._segments(lookup, self._ERF_SEGMENTS, a, 4.0)
        return b.call(self._fn1("llvm.copysign", ty, 2), [res, x])

    def _segments(self, lookup, rows, a, scale: float, clamp: bool = True):
        """The piecewise polynomial of ``rows`` (16 or 32 rows ``(C_hi, C_lo, H, L, p2,
        ...)``, n of them) at ``a >= 0`` (a NaN goes through): ``k = min(round(scale a),
        n - 1)`` (``clamp`` False: the caller keeps ``scale a`` below ``n - 1/2``) from the low
        bits of ``scale a + 1.5 * 2^23`` (one FMA), ``t = a - k/scale`` (exact for a power
        of 2 ``scale``), ``C_hi + (t H + (C_lo + t (L + t (p2 + ...))))``, each
        coefficient read per lane with ``lookup`` (``policy.vector_op("lookup16")`` or
        ``"lookup32"``)."""
        c_hi, u = self._segment_parts(lookup, rows, a, scale, clamp)
        return self.b.fadd(c_hi, u)

    def _segment_reader(self, lookup, rows, a, scale: float, clamp: bool):
        """``(t, coef)`` of the segment of ``a`` in ``rows``: ``k = min(round(scale a), n -
        1)`` (no clamp where ``clamp`` is False) from the low bits of ``scale a + 1.5 *
        2^23``, ``t = a - k/scale``, and ``coef(j)`` the ``j``-th coefficient of each
        lane's row, read with ``lookup``."""
        b, ty, ity, C, _, madd = self._kit(a)
        magic = 12582912.0
        s = madd(a, C(scale), C(magic))
        if clamp:
            s = b.call(self._fn1("llvm.minnum", ty, 2), [s, C(magic + len(rows) - 1)])
        t = madd(b.fsub(s, C(magic)), C(-1.0 / scale), a)
        idx = b.bitcast(s, ity)

        def coef(j):
            return lookup(b, self.mb, tuple(r[j] for r in rows), idx)

        return t, coef

    def _segment_parts(self, lookup, rows, a, scale: float, clamp: bool = True):
        """:meth:`_segments`' polynomial as its two last addends, ``(C_hi, u)`` (the value
        is ``C_hi + u``): ``t = a - k/scale`` exact also where ``scale`` is not a power
        of 2 but ``k/scale`` has few bits and ``a`` lies within a factor 2 of it (Sterbenz;
        :meth:`_erfc_f32_segments`)."""
        madd = self._kit(a)[5]
        t, coef = self._segment_reader(lookup, rows, a, scale, clamp)
        q = coef(len(rows[0]) - 1)
        for j in range(len(rows[0]) - 2, 2, -1):
            q = madd(q, t, coef(j))
        u = madd(t, coef(2), madd(t, q, coef(1)))
        return coef(0), u

    def _segments_short(self, lookup, rows, a, scale: float):
        """:meth:`_segments`' rows (``(C_hi, C_lo, H, L, p2, ...)``) without the slope's
        second part ``L``: ``C_hi + (C_lo + t (H + t (p2 + t (p3 + ...))))``, ``k`` and
        ``t`` as :meth:`_segment_parts` computes them (``scale a`` kept below ``n - 1/2``
        by the caller: no clamp).  One table read and one FMA fewer than the two-part
        form; ``t H`` is rounded with the rest of the polynomial, ``C`` still carried in
        two parts (without ``C_lo`` the result loses up to an ulp where it lies a binade
        below ``C``)."""
        madd = self._kit(a)[5]
        t, coef = self._segment_reader(lookup, rows, a, scale, clamp=False)
        q = coef(len(rows[0]) - 1)
        for j in (*range(len(rows[0]) - 2, 3, -1), 2, 1):
            q = madd(q, t, coef(j))
        return self.b.fadd(coef(0), q)

    def _erf_f32_two_branches(self, x):
        """erf(x) for float32 without a table instruction (or without FMA).

        Both branches are computed and one is selected per lane.  ``|x| < 1``:
        ``x * (c0 + z*P(z))`` with ``z = x*x``, a degree-6 ``P`` and ``c0 = 2/sqrt(pi)``
        in two parts (``fma(x, c0_hi, x * (z*P(z) + c0_lo))``).  ``|x| >= 1``:
        ``1 - exp(-a*a) * u * Q(u)`` with ``a = min(|x|, 4)`` (erf rounds to 1 from 3.92
        on), ``u = 1/a``, a degree-9 ``Q`` and :meth:`exp_f32`, then the sign of ``x``.
        The coefficients were fitted for this function (weighted least squares towards
        the minimax relative error, against mpmath: 1.2e-9 and 4.9e-9).  As
        :meth:`exp_f32`, no step is ever contracted, so every schedule gives the same
        bits; measured on every float32 input against float64 erf: see
        docs/numerics.md.  NaN stays NaN, ``erf(+-inf) = +-1``, ``erf(-0.0) = -0.0``."""
        b, ty, _, C, _, madd = self._kit(x)
        ax = b.call(self._fn1("llvm.fabs", ty), [x])
        # |x| < 1
        z = b.fmul(x, x)
        t = madd(z, self._horner(self._ERF_P, z, madd), C(self._ERF_C0[1]))
        small = madd(x, C(self._ERF_C0[0]), b.fmul(x, t))
        # |x| >= 1
        a = b.call(self._fn1("llvm.minnum", ty, 2), [ax, C(4.0)])
        u = b.fdiv(C(1.0), a)
        q = self._horner(self._ERF_Q, u, madd)
        # (-a^2 in [-16, 0]: no clamp; a NaN is selected back at the end)
        e = self._exp_in(b.fneg(b.fmul(a, a)), None, None)
        large = madd(b.fneg(b.fmul(e, u)), q, C(1.0))
        # erf is odd: the sign of x (also makes erf(-0.0) = -0.0)
        res = b.call(self._fn1("llvm.copysign", ty, 2),
                     [b.select(b.fcmp_ordered("<", ax, C(1.0)), small, large), x])
        return b.select(b.fcmp_unordered("uno", x, x), x, res)
