"""Float32 math functions that tecomp evaluates in float64 lanes (:class:`_WideMathEmitter`,
a part of :class:`~tecomp.codegen.llvm.emit_math._MathEmitter`): ``atan2``, ``cbrt``
where the target has no FMA (see
:meth:`~tecomp.codegen.llvm.emit_math_f32._F32MathEmitter.cbrt_f32`), and ``pow`` and ``erfc`` where the target has no table instruction or no FMA (see
:meth:`~tecomp.codegen.llvm.emit_math_f32._F32MathEmitter.erfc_f32` and ``pow_f32``), and
``tan``'s lanes of large ``|x|``.

Each widens its float32 operands to float64 (exact), computes with an error far below
float32's rounding (about 1e-11 relative or less) and rounds once to float32, so the
result is the correctly rounded one except where the exact value lies within about 1e-11
of a rounding boundary: at most 0.5 ulp and a hair (docs/numerics.md gives the measured
figures).  The float64 vectors have the float32 vectors' lane count (two registers for
one).  No step is contracted: scalar, vectorized and unrolled evaluations give the same
bits (with fused multiply-adds where the target has them: :meth:`_madd`).
"""
from __future__ import annotations

import math

import llvmlite.ir as ir

from .values import _F64, _I64, _join_pieces, _piece, _splat, _with_lanes


#: whether float32 ``atan2`` takes ``max(|x|, |y|)`` and ``min`` by one compare and two
#: selects (:meth:`_WideMathEmitter.atan2_f32`); off: ``llvm.maxnum`` and ``llvm.minnum``,
#: as in session 23 (the same bits; an A/B switch for timing it:
#: ``benchmarks/elementwise_math.py --math24-ab``)
ATAN2_SELECTS = True

#: whether float32 ``atan2`` takes ``|x|``, ``|y|``, their max and min and the reduction's
#: test (``min > max tan(pi/8)``) in float32 lanes (one register where float64 takes two),
#: evaluates atan's polynomial at degree 5 (:data:`_WideMathEmitter._ATAN_P5`, 2.3e-11
#: relative) and leaves the rare lanes (both operands 0, both infinite, the larger one below
#: 2^-124) to a branch taken once per vector that has one
#: (:meth:`_WideMathEmitter.atan2_f32`); off: every step in float64 lanes with the degree-6
#: polynomial, as in session 24 (the A/B switch of ``benchmarks/elementwise_math.py
#: --math25-ab``)
ATAN2_NARROW = True


def _taylor(fn_k, n):
    return tuple(fn_k(k) for k in range(n))


class _WideMathEmitter:
    """The float32 functions computed in float64 lanes (see the module's docstring)."""

    #: exp(r) = sum r^k / k!, k <= 10, for |r| <= ln2/2 (3e-13 relative)
    _EXP_T = _taylor(lambda k: 1.0 / math.factorial(k), 11)
    #: 2^r = sum (r ln2)^k / k!, k <= 10, for |r| <= 1/2 (3e-13 relative)
    _EXP2_T = _taylor(lambda k: math.log(2.0) ** k / math.factorial(k), 11)
    #: ln2 in two parts (fdlibm's: n * _LN2[0] is exact for |n| < 2^20)
    _LN2 = (6.93147180369123816490e-01, 1.90821492927058770002e-10)
    #: pi/2 in three parts (fdlibm's pio2_1, pio2_2, pio2_2t: q times each of the first two
    #: is exact for |q| < 2^20)
    _PIO2 = (1.57079632673412561417e+00, 6.07710050630396597660e-11,
             2.02226624879595063154e-21)
    #: |x| above which tan takes libm's tanf (the products q * _PIO2[k] stay exact)
    _TAN_LIMIT = 1048576.0
    #: sin(r) = r + r z S(z), cos(r) = 1 + z C(z), z = r^2: Taylor to r^11 and r^12
    #: (1e-11 and 4e-13 relative on |r| <= pi/4)
    _SIN_T = _taylor(lambda k: (-1.0) ** (k + 1) / math.factorial(2 * k + 3), 5)
    _COS_T = _taylor(lambda k: (-1.0) ** (k + 1) / math.factorial(2 * k + 2), 6)
    #: atan(u) = u + u z P(z), z = u^2, |u| <= tan(pi/8) (least squares towards the minimax
    #: relative error, against mpmath: 2.9e-12)
    _ATAN_P = (-0.3333333333150438, 0.19999998943598638, -0.14285614280238443,
               0.1110753871617319, -0.09029469483865511, 0.07137825266855728,
               -0.04048051288744851)
    #: the same on ``|u| <= tan(pi/8) (1 + 1e-4)`` at degree 5 (Lawson's iteration towards
    #: the minimax relative error against mpmath: 2.3e-11, 4e-4 ulp of a float32)
    _ATAN_P5 = (-0.333333324980655, 0.19999903810494682, -0.1428200486768177,
                0.11044654520158229, -0.08476054623519175, 0.047435895255367455)
    _TAN_PI8 = 0.41421356237309503
    #: log1p(f) = 2 atanh(s) = 2s (1 + z/3 + z^2/5 + ... + z^7/15), s = f / (2 + f),
    #: z = s^2 <= 0.0295 (5e-14 relative)
    _ATANH_T = _taylor(lambda k: 1.0 / (2 * k + 3), 7)

    #: erfcx(a) = erfc(a) exp(a^2) = P(a - 1.25) for 0.5 <= a < 2, and
    #: (1/a) G(1/a^2) for 2 <= a <= 10.1 (fitted for tecomp: 3e-9 and 2e-9 relative)
    _ERFCX_P = (0.36782291531562805, -0.2088218778371811, 0.10679560899734497,
                -0.05021807178854942, 0.022011056542396545, -0.009084505960345268,
                0.0035545278806239367, -0.0013118446804583073, 0.0004694249073509127,
                -0.0001900405768537894, 6.221132207429036e-05)
    _ERFCX_G = (0.5641895532608032, -0.2820887565612793, 0.4226958155632019,
                -1.0410255193710327, 3.32515811920166, -11.069432258605957,
                31.265024185180664, -63.150272369384766, 76.55233001708984,
                -40.41035461425781, 0.0)

    #: erf(a) = 2/sqrt(pi) a sum (-1)^k a^(2k) / (k! (2k + 1)), k <= 7: 1e-9 relative
    #: for a < 0.5
    _ERF_T = _taylor(lambda k: (-1.0) ** k * 2.0 / math.sqrt(math.pi)
                     / (math.factorial(k) * (2 * k + 1)), 8)
    #: 2^r = sum (r ln2)^k / k!, k <= 8, for |r| <= 1/2 (2e-10 relative: erfc's exp)
    _EXP2_T8 = _taylor(lambda k: math.log(2.0) ** k / math.factorial(k), 9)

    # -- float64 helpers -------------------------------------------------------------------

    def _kit64(self, x):
        """``x`` (float32) widened to float64 (exact), and the builder, float64 type, int64
        type, float64 and int64 constant makers and :meth:`_madd` of as many lanes."""
        b = self.b
        dty = _with_lanes(_F64, x.type)
        lty = _with_lanes(_I64, x.type)
        return b.fpext(x, dty), (b, dty, lty, lambda v: _splat(dty, v),
                                 lambda v: _splat(lty, v), self._madd(dty))

    def _pow2_f64(self, n, kit):
        """``2**n`` (float64) for integral float64 ``n`` in ``[-1022, 1023]``, from the
        exponent bits: ``n + 1.5 * 2^52`` holds ``n`` in its low bits (no float-to-int64
        conversion, which AVX2 lacks), plus the bias, shifted into the exponent."""
        b, dty, lty, C, L, _ = kit
        bits = b.bitcast(b.fadd(n, C(6755399441055744.0)), lty)
        return b.bitcast(b.shl(b.add(bits, L(1023)), L(52)), dty)

    def _div_f64(self, num, den, kit):
        """``num / den`` in float64 to about 1e-14 relative, for ``|den|`` in
        ``[2^-125, 2^125]``, at the cost of a float32 division (half the float64
        divisions' work): ``r = 1/den`` and ``q = num * r`` in float32, then one Newton
        step ``q + (num - q den) r`` in float64."""
        b, dty, _, C, _, madd = kit
        fty = _with_lanes(ir.FloatType(), dty)
        r = b.fdiv(_splat(fty, 1.0), b.fptrunc(den, fty))
        q = b.fpext(b.fmul(b.fptrunc(num, fty), r), dty)
        return madd(madd(b.fneg(q), den, num), b.fpext(r, dty), q)

    def _atan_f64(self, num, den, base, kit, poly=None):
        """``base + atan(num / den)`` in float64 for ``|num / den| <= tan(pi/8)`` (a
        reduced argument): ``u = num / den``, ``u + u z P(z)``, ``z = u^2``, ``P``
        ``poly`` (:data:`_ATAN_P` by default)."""
        b, dty, _, C, _, madd = kit
        u = b.fdiv(num, den) if base is None else self._div_f64(num, den, kit)
        z = b.fmul(u, u)
        p = madd(b.fmul(u, z), self._horner(poly or self._ATAN_P, z, madd), u)
        return p if base is None else b.fadd(base, p)

    def _narrow(self, xd, ty):
        return self.b.fptrunc(xd, ty)

    # -- the functions ---------------------------------------------------------------------

    def tan_f64_lanes(self, x):
        """tan(x) for float32, in float64 (the lanes of large ``|x|`` of
        :meth:`~tecomp.codegen.llvm.emit_math_f32._F32MathEmitter.tan_f32`):
        ``q = roundeven(x 2/pi)``, ``r = x - q pi/2``
        (pi/2 in three parts, exact products for ``|x| <= 2^20``), ``sin(r)/cos(r)`` or
        ``-cos(r)/sin(r)`` for odd ``q`` (Taylor polynomials to 1e-15), rounded once.
        Lanes with ``|x| > 2^20``, inf or NaN take a branch that calls libm's ``tanf``.
        ``tan(+-0) = +-0``."""
        xd, kit = self._kit64(x)
        b, dty, lty, C, L, madd = kit
        q = b.call(self._fn1("llvm.roundeven", dty), [b.fmul(xd, C(0.63661977236758134))])
        r = xd
        for part in self._PIO2:
            r = madd(q, C(-part), r)
        z = b.fmul(r, r)
        s = madd(b.fmul(r, z), self._horner(self._SIN_T, z, madd), r)
        c = madd(z, self._horner(self._COS_T, z, madd), C(1.0))
        odd = b.trunc(b.fptosi(q, _with_lanes(ir.IntType(32), dty)),
                      _with_lanes(ir.IntType(1), dty))
        res = self._div_f64(b.select(odd, b.fneg(c), s), b.select(odd, s, c), kit)
        ty = x.type
        res = self._narrow(res, ty)
        res = b.select(b.fcmp_ordered("==", x, _splat(ty, 0.0)), x, res)
        ax = b.call(self._fn1("llvm.fabs", ty), [x])
        big = b.fcmp_unordered(">", ax, _splat(ty, self._TAN_LIMIT))
        return self._libm_where(big, "tanf", x, res)

    def atan2_f32(self, y, x):
        """atan2(y, x) for float32, in float64: ``q = min(|x|,|y|) / max(|x|,|y|)`` (0
        when both are 0, 1 when both are infinite), ``r = atan(q)``
        (:meth:`_atan_f64`), ``pi/2 - r`` where ``|y| > |x|``, ``pi - r`` where ``x`` has
        its sign bit set (``-0.0`` included), rounded once, with the sign of ``y``.
        Gives C99's special values: ``atan2(+-0, -0) = +-pi``, ``atan2(+-0, +0) = +-0``,
        ``atan2(+-inf, -inf) = +-3pi/4`` ...; NaN if either is NaN.

        With :data:`ATAN2_NARROW` on, ``|x|``, ``|y|``, the max and min and the
        reduction's test are float32 steps (exact: the test's product ``max tan(pi/8)`` is
        a normal float for ``max >= 2^-124``, its rounding moves the reduced argument's
        bound by a relative 2^-24), only the max and min are widened, and lanes where
        ``max < 2^-124`` (both 0 included) or ``min`` is infinite take a branch, once per
        vector that has one, which computes the whole vector by the float64 steps (the
        other lanes keep their bits)."""
        if not ATAN2_NARROW:
            return self._atan2_f64_lanes(y, x, self._ATAN_P)
        b, ty, _, C, _, _ = self._kit(x)
        fabs = self._fn1("llvm.fabs", ty)
        ax = b.call(fabs, [x])
        ay = b.call(fabs, [y])
        ygt = b.fcmp_ordered(">", ay, ax)
        mx = b.select(ygt, ay, ax)
        mn = b.select(ygt, ax, ay)
        mid = b.fcmp_ordered(">", mn, b.fmul(mx, C(self._TAN_PI8)))
        rare = b.or_(b.fcmp_ordered("<", mx, C(2.0 ** -124)),
                     b.fcmp_ordered("==", mn, C(math.inf)))
        dty = _with_lanes(_F64, ty)
        mxd = b.fpext(mx, dty)
        mnd = b.fpext(mn, dty)
        res = self._atan2_tail(y, x, mxd, mnd, ygt, mid, self._ATAN_P5, None)
        return self._slow_where(rare, "atan2.rare",
                                lambda xv: self._atan2_f64_lanes(y, xv, self._ATAN_P5),
                                x, res)

    def _atan2_f64_lanes(self, y, x, poly):
        """:meth:`atan2_f32` with every step in float64 lanes (``poly`` atan's polynomial),
        its special values included."""
        b = self.b
        xd, kit = self._kit64(x)
        yd = b.fpext(y, kit[1])
        _, dty, _, C, _, _ = kit
        ax = b.call(self._fn1("llvm.fabs", dty), [xd])
        ay = b.call(self._fn1("llvm.fabs", dty), [yd])
        # (a compare and selects, not maxnum/minnum: their NaN rule costs a compare and a
        # blend each, and a NaN operand's result is the final select's)
        ygt = b.fcmp_ordered(">", ay, ax)
        mx = b.select(ygt, ay, ax) if ATAN2_SELECTS else \
            b.call(self._fn1("llvm.maxnum", dty, 2), [ax, ay])
        mn = b.select(ygt, ax, ay) if ATAN2_SELECTS else \
            b.call(self._fn1("llvm.minnum", dty, 2), [ax, ay])
        mid = b.fcmp_ordered(">", mn, b.fmul(mx, C(self._TAN_PI8)))
        return self._atan2_tail(y, x, mx, mn, ygt, mid, poly, kit)

    def _atan2_tail(self, y, x, mx, mn, ygt, mid, poly, kit):
        """atan2's float64 steps from ``mx = max(|x|,|y|)`` and ``mn = min`` (float64),
        ``ygt = |y| > |x|`` and ``mid = mn > mx tan(pi/8)``: atan(mn/mx), mn/mx reduced
        as atan's argument: ``(mn - mx)/(mn + mx) + pi/4`` where ``mid`` (exact
        differences: the operands are float32s), one division; the quadrant, the sign of
        ``y``, NaN.  ``kit``: :meth:`_kit64`'s, or None where ``mx`` and ``mn`` are never
        both 0 or both infinite (those lanes are left to a branch: no selects for them)."""
        b = self.b
        ty = x.type
        special = kit is not None
        if kit is None:
            _, kit = self._kit64(x)
        _, dty, _, C, _, _ = kit
        num = b.select(mid, b.fsub(mn, mx), mn)
        den = b.select(mid, b.fadd(mn, mx), mx)
        r = self._atan_f64(num, den, None, kit, poly)
        r = b.select(mid, b.fadd(r, C(math.pi / 4)), r)
        if special:
            r = b.select(b.fcmp_ordered("==", mx, C(0.0)), C(0.0), r)       # both 0
            r = b.select(b.fcmp_ordered("==", mn, C(math.inf)), C(math.pi / 4), r)  # both inf
        r = b.select(ygt, b.fsub(C(math.pi / 2), r), r)
        ity = _with_lanes(ir.IntType(32), ty)
        xneg = b.icmp_signed("<", b.bitcast(x, ity), _splat(ity, 0))
        r = b.select(xneg, b.fsub(C(math.pi), r), r)
        res = b.call(self._fn1("llvm.copysign", ty, 2), [self._narrow(r, ty), y])
        if not ATAN2_NARROW:
            return b.select(b.fcmp_unordered("uno", x, y), b.fadd(x, y), res)
        # a NaN operand: x's (else y's), quieted; not x + y, whose operands LLVM may
        # swap in one build and not in another (NaN payloads: vectorized and serial
        # code would differ)
        nan = b.select(b.fcmp_unordered("uno", x, x), x, y)
        return b.select(b.fcmp_unordered("uno", x, y), b.fadd(nan, nan), res)

    def cbrt_f64_lanes(self, x):
        """cbrt(x) for float32 in float64 lanes (where the target has no FMA, or
        ``emit_math_f32.CBRT_F32_LANES`` is off; else
        :meth:`~tecomp.codegen.llvm.emit_math_f32._F32MathEmitter.cbrt_f32`): a first guess from the bits of ``|x|`` (their third plus
        a constant, fdlibm's ``cbrtf``; subnormals scaled by 2^24 first), two Halley
        steps ``y (y^3 + 2a) / (2y^3 + a)`` in float64 (about 1e-12 relative), rounded
        once, the sign of ``x``.  ``cbrt(+-0) = +-0``, ``cbrt(+-inf) = +-inf``, NaN stays
        NaN."""
        b, ty, ity, C, I, _ = self._kit(x)
        ax = b.call(self._fn1("llvm.fabs", ty), [x])
        tiny = b.fcmp_ordered("<", ax, C(1.1754943508222875e-38))
        xs = b.select(tiny, b.fmul(ax, C(16777216.0)), ax)
        third = b.fmul(b.sitofp(b.bitcast(xs, ity), ty), C(1.0 / 3.0))
        y0 = b.bitcast(b.add(b.fptosi(third, ity), I(709958130)), ty)
        y0 = b.select(tiny, b.fmul(y0, C(1.0 / 256.0)), y0)
        ad, kit = self._kit64(ax)
        _, dty, _, D, _, madd = kit
        y = b.fpext(y0, dty)
        for _ in range(2):
            t = b.fmul(b.fmul(y, y), y)
            y = b.fdiv(b.fmul(y, madd(ad, D(2.0), t)), madd(t, D(2.0), ad))
        res = b.call(self._fn1("llvm.copysign", ty, 2), [self._narrow(y, ty), x])
        regular = b.and_(b.fcmp_ordered(">", ax, C(0.0)), b.fcmp_ordered("<", ax, C(math.inf)))
        return b.select(regular, res, x)

    def pow_f64_lanes(self, x, y):
        """x**y for float32 in float64 lanes (where the target has no FMA or no 16-entry
        table instruction: :meth:`~tecomp.codegen.llvm.emit_math_f32._F32MathEmitter.pow_f32`):
        ``log2|x| = e + log1p(f)/ln2`` in float64 (``e`` and ``f``
        exact from :meth:`_log_reduce`, ``log1p(f) = 2 atanh(f/(2+f))`` by its series),
        ``w = y log2|x|``, ``2**w = 2**n 2**(w-n)`` (Taylor polynomial), rounded once
        (overflow to inf and subnormal results by that rounding).  C99's special values:
        ``pow(x, +-0) = 1`` and ``pow(1, y) = 1`` (NaN included), ``pow(-1, +-inf) = 1``,
        NaN for ``x < 0`` (finite) and non-integral ``y``, the sign of ``x`` for odd
        integral ``y`` (``pow(-0, -1) = -inf``), and the zeros and infinities of
        ``|x|`` 0 or inf and ``y`` +-inf."""
        b, ty, ity, C, I, _ = self._kit(x)
        ax = b.call(self._fn1("llvm.fabs", ty), [x])
        ef, f, _ = self._log_reduce(ax)
        fd, kit = self._kit64(f)
        _, dty, _, D, _, madd = kit
        s = self._div_f64(fd, b.fadd(fd, D(2.0)), kit)
        s2 = b.fadd(s, s)
        z = b.fmul(s, s)
        l1p = madd(b.fmul(s2, z), self._horner(self._ATANH_T, z, madd), s2)
        log2x = madd(l1p, D(1.4426950408889634), b.fpext(ef, dty))
        log2x = b.select(b.fcmp_ordered("==", ax, C(0.0)), D(-math.inf), log2x)
        log2x = b.select(b.fcmp_ordered("==", ax, C(math.inf)), D(math.inf), log2x)
        w = b.fmul(b.fpext(y, dty), log2x)
        w = b.call(self._fn1("llvm.maxnum", dty, 2),
                   [b.call(self._fn1("llvm.minnum", dty, 2), [w, D(400.0)]), D(-400.0)])
        n = b.call(self._fn1("llvm.roundeven", dty), [w])
        p = self._horner(self._EXP2_T, b.fsub(w, n), madd)
        return self._pow_special_values(x, y, self._narrow(b.fmul(p, self._pow2_f64(n, kit)), ty))

    def _pow_special_values(self, x, y, res):
        """``res`` (``|x|**y``, with its zeros and infinities for ``|x|`` 0 or inf and
        ``y`` +-inf) with the sign and the rest of C99's special values of ``pow(x, y)``."""
        b, ty, ity, C, I, _ = self._kit(x)
        ax = b.call(self._fn1("llvm.fabs", ty), [x])
        # the sign: x with its sign bit set and y an odd integer
        trunc = self._fn1("llvm.trunc", ty)
        yint = b.fcmp_ordered("==", b.call(trunc, [y]), y)
        half = b.fmul(y, C(0.5))
        yodd = b.and_(yint, b.fcmp_ordered("!=", b.call(trunc, [half]), half))
        xneg = b.icmp_signed("<", b.bitcast(x, ity), I(0))
        res = b.select(b.and_(xneg, yodd), b.fneg(res), res)
        nan = C(math.nan)
        neg_finite = b.and_(b.fcmp_ordered("<", x, C(0.0)),
                            b.fcmp_ordered(">", x, C(-math.inf)))
        res = b.select(b.and_(neg_finite, b.not_(yint)), nan, res)
        res = b.select(b.fcmp_unordered("uno", x, y), nan, res)
        one = C(1.0)
        yinf = b.fcmp_ordered("==", b.call(self._fn1("llvm.fabs", ty), [y]), C(math.inf))
        res = b.select(b.and_(b.fcmp_ordered("==", ax, one), yinf), one, res)
        return b.select(b.or_(b.fcmp_ordered("==", x, one), b.fcmp_ordered("==", y, C(0.0))),
                        one, res)

    # -- float64 exp, log and tan ----------------------------------------------------------

    #: exp(r) = 1 + r + r^2 Q(r), Q Taylor to r^13 (4e-18 relative on |r| <= ln2/2)
    _EXP64_Q = _taylor(lambda k: 1.0 / math.factorial(k + 2), 12)
    #: log(1 + f) = f - hfsq + s (hfsq + R(z)), R(z) = z (Lg1 + z Lg2 + ... + z^6 Lg7),
    #: s = f/(2 + f), z = s^2 (fdlibm's e_log.c coefficients, < 1 ulp)
    _LOG64_LG = (6.666666666666735130e-01, 3.999999999940941908e-01, 2.857142874366239149e-01,
                 2.222219843214978396e-01, 1.818357216161805012e-01, 1.531383769920937332e-01,
                 1.479819860511658591e-01)

    #: float64 tan: pi/2 in three float64 parts (each the rest of the ones before,
    #: rounded), and the largest ``|x|`` they reduce (libm's ``tan`` per lane beyond)
    _PIO2_F64 = ((1.5707963267948966, 6.123233995736766e-17, -1.4973849048591698e-33),
                 1073741824.0)
    #: sin(r) = r + r z S(z), cos(r) = 1 - z/2 + z^2 C(z), z = r^2: Taylor to r^17 and
    #: r^16 (1e-19 and 2e-18 relative on |r| <= pi/4)
    _SIN64_S = _taylor(lambda k: (-1.0) ** (k + 1) / math.factorial(2 * k + 3), 8)
    _COS64_C = _taylor(lambda k: (-1.0) ** k / math.factorial(2 * k + 4), 7)

    def _fast2sum(self, a, c):
        """``a + c`` rounded, and its rounding error (exact where ``|a| >= |c|``)."""
        b = self.b
        s = b.fadd(a, c)
        return s, b.fadd(b.fsub(a, s), c)

    def tan_f64(self, x):
        """tan(x) for float64 in plain vector instructions where the target has fused
        multiply-adds (elsewhere libm's ``tan``, once per lane): ``q = round(x 2/pi)`` from
        the low bits of ``x 2/pi + 1.5 * 2^52`` (one FMA), ``r = x - q pi/2`` with pi/2 in
        three float64 parts (:data:`_PIO2_F64`) kept as ``rh + rl``
        (:meth:`_reduce_by_parts`), ``|r| <= pi/4``; ``sin(r)`` as ``rh + sl`` and
        ``cos(r)`` as ``ch + cl`` (Taylor polynomials in ``z = rh^2``, the rounding error
        of ``z``, ``rl`` and ``1 - z/2`` carried in the low parts), each then rounded as
        a float64 and its rounding error, and ``sin/cos``, or ``-cos/sin`` for odd ``q``:
        the quotient ``q0 = nh (1/dh)`` corrected once by its residual, ``q0 + ((nh - q0
        dh) + (nl - q0 dl)) (1/dh)`` (one division).
        ``|x| < 2^-27`` gives ``x`` (``+-0`` included).  Where a lane has ``|x|`` above
        2^30, inf or NaN, the vector takes a branch that calls libm's ``tan`` for such
        lanes.  A vector wider than one register is computed a register at a time (as
        :meth:`erfc_f64_lanes`: the whole vector's temporaries at once would spill)."""
        per = self.policy.register_bytes // 8
        if isinstance(x.type, ir.VectorType) and x.type.count > per:
            b = self.b
            return _join_pieces(b, [self.tan_f64(_piece(b, x, k, per))
                                    for k in range(0, x.type.count, per)], x.type.count)
        kit = self._kit_f64(x)
        b, dty, lty, C, L, madd = kit
        parts, limit = self._PIO2_F64
        magic = 6755399441055744.0
        sq = madd(x, C(0.63661977236758134), C(magic))
        q = b.fsub(sq, C(magic))
        rh, rl = self._reduce_by_parts(x, q, parts, C, madd)
        z = b.fmul(rh, rh)
        zl = madd(rh, rh, b.fneg(z))              # z + zl = rh^2 exactly
        hw = b.fmul(z, C(-0.5))
        # sin(rh + rl) = rh + sl, sl = rh z S(z) + rh zl (-1/6) + rl (1 - z/2)
        sl = madd(b.fmul(rh, z), self._horner(self._SIN64_S, z, madd),
                  madd(b.fmul(rh, zl), C(-1.0 / 6.0), madd(rl, hw, rl)))
        # cos(rh + rl) = ch + cl: ch = 1 - z/2 rounded, its error exact (Fast2Sum), the rest
        # z^2 C(z) - zl/2 - rl rh
        ch = b.fadd(C(1.0), hw)
        rest = madd(b.fmul(z, z), self._horner(self._COS64_C, z, madd),
                    madd(zl, C(-0.5), b.fneg(b.fmul(rl, rh))))
        cl = b.fadd(b.fadd(b.fsub(C(1.0), ch), hw), rest)
        # both as a float64 and its rounding error (Fast2Sum: |sl| < |rh|, |cl| < |ch|)
        sh, sl = self._fast2sum(rh, sl)
        ch, cl = self._fast2sum(ch, cl)
        odd = b.trunc(b.bitcast(sq, lty), _with_lanes(ir.IntType(1), dty))
        nh = b.select(odd, b.fneg(ch), sh)
        nl = b.select(odd, b.fneg(cl), sl)
        dh = b.select(odd, sh, ch)
        dl = b.select(odd, sl, cl)
        rd = b.fdiv(C(1.0), dh)
        q0 = b.fmul(nh, rd)
        e = b.fadd(madd(b.fneg(q0), dh, nh), madd(b.fneg(q0), dl, nl))
        res = madd(e, rd, q0)
        ax = b.call(self._fn1("llvm.fabs", dty), [x])
        res = b.select(b.fcmp_ordered("<", ax, C(2.0 ** -27)), x, res)
        big = b.fcmp_unordered(">", ax, C(limit))
        return self._libm_where(big, "tan", x, res)

    def erfc_f64_lanes(self, x):
        """erfc(x) = 1 - erf(x) for float32, in float64 lanes (where the target has no
        table instruction or no FMA, or ``emit_math_f32.ERFC_SEGMENTS`` is off), accurate
        in the tail (relative error down to the subnormal results near ``x = 10``).  ``a = |x|``
        clamped to 10.1 (``erfc`` rounds to 0 from 10.0546 on).  ``a < 0.5``: ``1 -
        erf(a)``, ``erf`` by its Taylor series; beyond, ``exp(-a^2) erfcx(a)``: ``a^2``
        exact in float64, ``exp(-a^2) = 2^n 2^r`` (``2^r`` a Taylor polynomial), and
        ``erfcx`` a polynomial in ``a - 1.25`` below 2 and ``u G(u^2)``, ``u = 1/a``, above
        (fitted to 3e-9 relative: one Horner evaluation, the coefficients selected per
        lane).  Each part is within 3e-9 of the exact value.  ``2 - erfc(|x|)`` for ``x <
        0``; rounded once to float32.  ``erfc(+inf) = 0``, ``erfc(-inf) = 2``,
        ``erfc(+-0) = 1``, NaN stays NaN."""
        per = self.policy.register_bytes // 8
        if isinstance(x.type, ir.VectorType) and x.type.count > per:
            # one register of float64 lanes at a time: the whole vector's constants and
            # temporaries at once would spill
            b = self.b
            return _join_pieces(b, [self.erfc_f64_lanes(_piece(b, x, k, per))
                                    for k in range(0, x.type.count, per)], x.type.count)
        xd, kit = self._kit64(x)
        b, dty, _, C, _, madd = kit
        a = b.call(self._fn1("llvm.minnum", dty, 2),
                   [b.call(self._fn1("llvm.fabs", dty), [xd]), C(10.1)])
        z = b.fmul(a, a)                       # exact: a has 24 significant bits
        small = madd(b.fneg(a), self._horner(self._ERF_T, z, madd), C(1.0))
        big = b.fcmp_ordered(">=", a, C(2.0))
        u = self._div_f64(C(1.0), a, kit)
        v = b.select(big, b.fmul(u, u), b.fsub(a, C(1.25)))
        q = b.select(big, C(self._ERFCX_G[-1]), C(self._ERFCX_P[-1]))
        for cp, cg in zip(reversed(self._ERFCX_P[:-1]), reversed(self._ERFCX_G[:-1])):
            q = madd(q, v, b.select(big, C(cg), C(cp)))
        # exp(-z) = 2^n 2^(t - n), t = -z log2(e) in [-147.2, 0] (its rounding: 1e-14)
        t = b.fmul(z, C(-1.4426950408889634))
        n = b.call(self._fn1("llvm.roundeven", dty), [t])
        e = b.fmul(self._horner(self._EXP2_T8, b.fsub(t, n), madd), self._pow2_f64(n, kit))
        large = b.fmul(e, b.select(big, b.fmul(u, q), q))
        res = b.select(b.fcmp_ordered("<", a, C(0.5)), small, large)
        res = b.select(b.fcmp_ordered("<", xd, C(0.0)), b.fsub(C(2.0), res), res)
        return b.select(b.fcmp_unordered("uno", x, x), x, self._narrow(res, x.type))

    def _kit_f64(self, x):
        """:meth:`_kit64`'s tools for a value ``x`` that is float64 already."""
        b = self.b
        lty = _with_lanes(_I64, x.type)
        return (b, x.type, lty, lambda v: _splat(x.type, v), lambda v: _splat(lty, v),
                self._madd(x.type))

    def exp_f64(self, x):
        """exp(x) for float64 in plain vector instructions (``llvm.exp`` is one libm call
        per lane): ``x`` clamped to ``[-746, 710]``, ``n = roundeven(x/ln2)``,
        ``r = hi - lo`` with ``hi = x - n ln2_hi`` (exact) and ``lo = n ln2_lo``, the
        rounding error of ``r`` carried (``(hi - r) - lo``, exact), ``exp(r) = 1 + (r +
        (err + r^2 Q(r)))`` with a degree-11 Taylor ``Q``, times ``2^n`` in two halves
        (one rounding for a subnormal result).  Overflow gives inf, underflow 0; NaN stays
        NaN."""
        kit = self._kit_f64(x)
        b, dty, _, C, _, madd = kit
        xc = b.call(self._fn1("llvm.maxnum", dty, 2),
                    [b.call(self._fn1("llvm.minnum", dty, 2), [x, C(710.0)]), C(-746.0)])
        n = b.call(self._fn1("llvm.roundeven", dty), [b.fmul(xc, C(1.4426950408889634))])
        hi = madd(n, C(-self._LN2[0]), xc)
        lo = b.fmul(n, C(self._LN2[1]))
        r = b.fsub(hi, lo)
        err = b.fsub(b.fsub(hi, r), lo)
        q = self._horner(self._EXP64_Q, r, madd)
        p = b.fadd(C(1.0), b.fadd(r, madd(b.fmul(r, r), q, err)))
        n1 = b.call(self._fn1("llvm.floor", dty), [b.fmul(n, C(0.5))])
        res = b.fmul(b.fmul(p, self._pow2_f64(n1, kit)), self._pow2_f64(b.fsub(n, n1), kit))
        return b.select(b.fcmp_unordered("uno", x, x), x, res)

    def log_f64(self, x):
        """log(x) for float64 in plain vector instructions (``llvm.log`` is one libm call
        per lane): ``x = m 2^e`` from the bits (a subnormal scaled by 2^54 first), ``m`` in
        ``[sqrt(1/2), sqrt(2))``, ``f = m - 1`` (exact), then fdlibm's ``e_log.c``:
        ``s = f/(2 + f)``, ``log(1 + f) = f - hfsq + s (hfsq + R(s^2))``, ``e ln2`` in two
        parts.  The exponent is converted to float64 through the bits (no int64-to-float
        instruction needed).  Special values as float32 ``log``."""
        kit = self._kit_f64(x)
        b, dty, lty, C, L, madd = kit
        tiny = b.fcmp_ordered("<", x, C(2.2250738585072014e-308))
        xs = b.select(tiny, b.fmul(x, C(18014398509481984.0)), x)
        bits = b.bitcast(xs, lty)
        m = b.bitcast(b.or_(b.and_(bits, L(0x000FFFFFFFFFFFFF)), L(0x3FF0000000000000)), dty)
        # the biased exponent as a float64: its bits under 2^52's exponent, minus 2^52
        k = b.fsub(b.bitcast(b.or_(b.lshr(bits, L(52)), L(0x4330000000000000)), dty),
                   C(4503599627370496.0))
        high = b.fcmp_ordered(">", m, C(1.4142135623730951))
        f = b.fsub(b.select(high, b.fmul(m, C(0.5)), m), C(1.0))
        e = b.fsub(b.fadd(k, b.select(high, C(1.0), C(0.0))),
                   b.select(tiny, C(1023.0 + 54.0), C(1023.0)))
        s = b.fdiv(f, b.fadd(f, C(2.0)))
        z = b.fmul(s, s)
        r = b.fmul(z, self._horner(self._LOG64_LG, z, madd))
        hfsq = b.fmul(C(0.5), b.fmul(f, f))
        t = madd(e, C(self._LN2[1]), b.fmul(s, b.fadd(hfsq, r)))
        res = madd(e, C(self._LN2[0]), b.fsub(f, b.fsub(hfsq, t)))
        return self._log_specials(x, res)
