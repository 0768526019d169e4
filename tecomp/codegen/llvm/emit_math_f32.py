"""Float32 ``tan``, ``atan``, ``erfc``, ``fast_erfc``, ``pow`` and ``cbrt`` in float32 lanes
(:class:`_F32MathEmitter`, a part of :class:`~tecomp.codegen.llvm.emit_math._MathEmitter`).

Range reduction and polynomials fitted for tecomp (weighted least squares towards the
minimax relative error, against mpmath, coefficients rounded to float32 one at a time
with the others refitted), evaluated in float32 with explicit FMAs where the target has
them (:meth:`_madd`): one float32 register per float32 register, where the float64 code
of :mod:`~tecomp.codegen.llvm.emit_math_wide` (0.5 ulp) takes two and a float64
division.  Errors of 1-3 ulp, ``erfc`` and ``pow`` below 1, ``cbrt`` correctly rounded
(docs/numerics.md gives the measured figures).  No step is contracted: scalar, vectorized and unrolled evaluations give the same bits.
"""
from __future__ import annotations

from typing import NamedTuple

import llvmlite.ir as ir

#: whether float32 ``erfc`` is computed in float32 lanes from one polynomial per segment
#: where the target has FMA and a 16-entry table instruction
#: (:meth:`_F32MathEmitter._erfc_f32_segments`); off: in float64 lanes everywhere, as in
#: session 20 (:meth:`~tecomp.codegen.llvm.emit_math_wide._WideMathEmitter.erfc_f64_lanes`;
#: the A/B switch of ``benchmarks/elementwise_math.py --math21-ab``)
ERFC_SEGMENTS = True

#: whether float32 ``pow`` is computed in float32 lanes (a double-float ``log2`` from a
#: table of 16, then ``exp2``: :meth:`_F32MathEmitter._pow_f32_lanes`) where the target
#: has FMA and a 16-entry table instruction; off: in float64 lanes everywhere, as in
#: session 22 (:meth:`~tecomp.codegen.llvm.emit_math_wide._WideMathEmitter.pow_f64_lanes`;
#: the A/B switch of ``benchmarks/elementwise_math.py --math23-ab``)
POW_F32_LANES = True

#: whether float32 ``cbrt`` is computed in float32 lanes (the exponent divided by 3, a
#: polynomial guess on ``[1, 8)``, two division-free Halley-order steps, the second on an
#: exact residual: :meth:`_F32MathEmitter.cbrt_f32`) where the target has FMA; off: in
#: float64 lanes everywhere (two Halley steps, each a float64 division), as in session 23
#: (:meth:`~tecomp.codegen.llvm.emit_math_wide._WideMathEmitter.cbrt_f64_lanes`; the A/B
#: switch of ``benchmarks/elementwise_math.py --math24-ab``)
CBRT_F32_LANES = True

#: whether float32 ``cbrt``'s common lanes (normal ``x``: :meth:`_F32MathEmitter.cbrt_f32`)
#: take ``a``'s exponent ``e`` with one ``vgetexpps`` and scale ``a`` by ``2^(-3k)`` and
#: the result by ``2^k`` with one ``vscalefps`` each where the target has them (AVX-512;
#: elsewhere ``k`` from the biased exponent, the bias folded into the addend of ``e/3``):
#: the same bits, five instructions fewer a vector with AVX-512, one fewer with AVX2; off:
#: the exponent's bits, conversions and integer additions as in session 27 (the A/B
#: switch of ``benchmarks/elementwise_math.py --math28-ab``)
CBRT_SCALEF = True

#: whether float32 ``pow``'s common lanes leave ``|w| >= 128`` (``w = y log2|x|``: the
#: results near the overflow and the subnormal ones) to the branch of the special values,
#: tested on ``w`` once it is computed, so that they need neither ``w``'s clamp to
#: ``[-151, 129]`` nor the guard of its low part (the same bits: those are no-ops below
#: 128), and ``|y| = inf`` or NaN is caught by the same test (``w`` inf or NaN); off: the
#: clamp and the guard on every lane and ``|y|`` tested first, as in session 24
#: (:meth:`_F32MathEmitter.pow_f32`; the A/B switch of ``benchmarks/elementwise_math.py
#: --math25-ab``)
POW_LARGE_W_BRANCH = True

#: whether float32 ``pow`` takes natural logarithms with tables of 32 where the target has
#: a 32-entry table instruction (AVX-512's ``vpermt2ps``): ``ln|x|`` from 32 pieces
#: (``|r| <= 1/64``: ``r`` itself is the leading term and ``-r^2/2`` is exact, so no
#: product by ``1/ln2`` has to be kept to double-float, and ``P`` has four terms, not
#: five), ``exp`` of ``w = y ln|x|`` by ``2^(j/32)`` and a degree-3 polynomial
#: (:meth:`_F32MathEmitter._pow_f32_ln`); off: the base-2 logarithm and ``2^(j/16)``
#: from tables of 16 as in session 25 (:meth:`_F32MathEmitter._pow_f32_lanes`; AVX2
#: targets: :data:`POW_LN16`; the A/B switch of ``benchmarks/elementwise_math.py
#: --math26-ab``)
POW_TABLE32 = True

#: whether float32 ``pow`` takes the same natural-logarithm plan with tables of 16 where
#: the target's table instruction has 16 entries only (AVX2: two ``vpermps`` and a blend
#: per 8 lanes): 16 pieces (``|r| <= 1/32``, ``P`` of five terms), ``exp`` by ``2^(j/16)``
#: and a degree-5 polynomial (:meth:`_F32MathEmitter._pow_f32_ln`); off: the base-2
#: logarithm of :meth:`_F32MathEmitter._pow_f32_lanes`, as in session 25 (the A/B switch
#: of ``benchmarks/elementwise_math.py --math26-ab``, with :data:`POW_TABLE32`)
POW_LN16 = True

#: whether float32 ``tan`` with FMA keeps the rounding error of its reduction's second
#: step as ``fma(q, -pi2_b, r1 - rh)`` (``r1 - rh`` exact where ``|x| <=``
#: :data:`TAN_FMA_RESIDUAL_LIMIT` and ``|r| >= 2^-13``; the other lanes take a branch to
#: the TwoSum form) and ``c`` as ``z (rh P(z) + rl) + rl``
#: (:meth:`_F32MathEmitter.tan_f32`); off: Knuth's TwoSum and ``c = rh z P(z) + rl (1 +
#: z)`` on every lane, as in session 30 (the A/B switch of
#: ``benchmarks/elementwise_math.py --math31-ab``)
TAN_FMA_RESIDUAL = True
#: the largest ``|x|`` :data:`TAN_FMA_RESIDUAL`'s common lanes take
TAN_FMA_RESIDUAL_LIMIT = 1024.0


class _PowPlan(NamedTuple):
    """The tables and polynomials of :meth:`_F32MathEmitter._pow_f32_ln` for one table
    size: ``pieces`` of ``z``'s range from bits ``off`` on (the index: bits ``shift`` and
    up), ``1/c``, ``ln c`` in two parts, ``P``, ``Q``, ``2^(j/pieces)`` in two parts."""
    pieces: int
    off: int
    shift: int
    invc: tuple
    logc: tuple
    p: tuple
    q: tuple
    exp: tuple


class _F32MathEmitter:
    """The float32-lane ``tan``, ``atan``, ``erfc``, ``fast_erfc``, ``pow`` and ``cbrt``
    (see the module's docstring)."""

    #: tan(r) = r + r z P(z), z = r^2, |r| <= pi/4 (fitted: 1.3e-9 relative)
    _TAN32_P = (0.33333349227905273, 0.13332675397396088, 0.05405890569090843,
                0.021286293864250183, 0.010827098973095417, 9.882983431452885e-05,
                0.004372341558337212)

    def tan_f32(self, x):
        """tan(x) for float32 in float32 lanes: ``q = round(x 2/pi)`` (:meth:`_quadrant`),
        ``r = x - q pi/2`` with pi/2 in three or four float32 parts (Cody and Waite, as
        ``sin``: ``_PIO2_FMA``, ``_PIO2_NOFMA``) kept as ``rh + rl`` (the rounding error
        of the next-to-last step carried), ``t = rh + (rh z P(z) + rl (1 + z))`` with a
        degree-6 ``P`` on ``|r| <= pi/4``, ``z = rh^2``, and for odd ``q`` ``-1/t``
        refined by a Newton step on the unrounded sum.  ``|x| < 2^-12`` gives
        ``x`` (``+-0`` included).  Where a lane has ``|x|`` above the reduction's limit
        (65536 with FMA, 125 without), inf or NaN, the vector takes a branch that
        computes such lanes in float64 (:meth:`tan_f64_lanes`, 0.5 ulp; libm's ``tanf``
        beyond 2^20).

        With FMA and :data:`TAN_FMA_RESIDUAL`, the common lanes (``|x| <= 1024``, ``|r| >=
        2^-13``) take ``r1 = fma(q, -a, x)`` (exact), ``rh = fma(q, -b, r1)`` and ``rl =
        fma(q, -b, r1 - rh)`` (``r1 - rh`` exact there: the third part of pi/2 is below
        2^-36 of ``r``), and ``c = z (rh P(z) + rl) + rl``: three FMAs and one
        subtraction where TwoSum takes four FMAs and seven additions, one FMA fewer for
        ``c``; the other lanes take a branch to the TwoSum form (benchmarks/DECISIONS.md,
        "tan: the reduction's rounding error by one FMA")."""
        b, ty, ity, C, I, madd = self._kit(x)
        parts, limit = self._PIO2_FMA if self.policy.has_fma else self._PIO2_NOFMA
        ax = b.call(self._fn1("llvm.fabs", ty), [x])
        if self.policy.has_fma and TAN_FMA_RESIDUAL:
            res, z = self._tan_f32_common(x, ax, residual=True)
            # r1 - rh is exact where |rh| >= |q b| (Sterbenz): below the limit,
            # |q b| <= (limit 2/pi + 1/2) |b| < k / 2, and q c (c the third part, left
            # out) is below 2^-36 |rh|; the other lanes (tiny r, |x| above the limit, inf,
            # NaN) take TwoSum's branch
            k = 2.0 ** -13
            assert 2 * (TAN_FMA_RESIDUAL_LIMIT * 0.63661977236758134 + 0.5) * abs(parts[1]) < k
            redo = b.or_(b.fcmp_unordered(">", ax, C(TAN_FMA_RESIDUAL_LIMIT)),
                         b.fcmp_ordered("<", z, C(k * k)))
            return self._slow_where(redo, "tan.twosum", self._tan_f32_twosum, x, res)
        res, _ = self._tan_f32_common(x, ax, residual=False)
        big = b.fcmp_unordered(">", ax, C(limit))
        return self._slow_where(big, "tan.wide", self.tan_f64_lanes, x, res)

    def _tan_f32_twosum(self, x):
        """:meth:`tan_f32` with the TwoSum reduction on every lane (the branch of the lanes
        above :data:`TAN_FMA_RESIDUAL_LIMIT`)."""
        b, ty = self.b, x.type
        ax = b.call(self._fn1("llvm.fabs", ty), [x])
        res, _ = self._tan_f32_common(x, ax, residual=False)
        big = b.fcmp_unordered(">", ax, self._kit(x)[3](self._PIO2_FMA[1]))
        return self._slow_where(big, "tan.wide", self.tan_f64_lanes, x, res)

    def _tan_f32_common(self, x, ax, residual: bool):
        """tan(x) for the lanes the float32 reduction covers (see :meth:`tan_f32`); with
        ``residual`` (FMA only): ``rh = fma(q, -b, r1)`` and ``rl = fma(q, -c, fma(q, -b,
        r1 - rh))``, ``r1 = fma(q, -a, x)`` (``a + b + c = pi/2``)."""
        b, ty, ity, C, I, madd = self._kit(x)
        parts = (self._PIO2_FMA if self.policy.has_fma else self._PIO2_NOFMA)[0]
        q, kq = self._quadrant(x)
        if residual:
            r1 = madd(q, C(-parts[0]), x)
            rh = madd(q, C(-parts[1]), r1)
            rl = madd(q, C(-parts[1]), b.fsub(r1, rh))
        else:
            rh, rl = self._reduce_by_parts(x, q, parts, C, madd)
        z = b.fmul(rh, rh)
        # tan(rh + rl) = rh + c, c = rh z P(z) + rl (1 + z) (tan' = 1 + tan^2)
        if residual:    # as z (rh P(z) + rl) + rl: two FMAs, not a product and two
            c = madd(z, madd(rh, self._horner(self._TAN32_P, z, madd), rl), rl)
        else:
            c = madd(b.fmul(rh, z), self._horner(self._TAN32_P, z, madd), madd(rl, z, rl))
        t = b.fadd(rh, c)
        # odd q: -1/(rh + c), the quotient y of the rounded t corrected by one Newton step
        # on the unrounded sum: y + y (1 + y rh + y c)
        y = b.fdiv(C(-1.0), t)
        y = madd(y, madd(y, c, madd(y, rh, C(1.0))), y)
        odd = b.icmp_unsigned("!=", b.and_(kq, I(1)), I(0))
        res = b.select(odd, y, t)
        if residual:    # |x| < 2^-12 < k: TwoSum's branch (x = -0 would give +0 here)
            return res, z
        return b.select(b.fcmp_ordered("<", ax, C(2.0 ** -12)), x, res), z

    def _reduce_by_parts(self, x, q, parts, C, madd):
        """``r = x - q (parts[0] + parts[1] + ...)`` (Cody and Waite; ``q`` integral, of
        ``x``'s type, ``C`` its constant maker) as ``rh + rl``: the steps before the last
        two are exact; the next-to-last as ``r - s`` (``s = q * part`` rounded, ``se`` its
        exact rounding error, by an FMA; without FMA the parts' trailing zeros make ``s``
        exact and ``se`` 0), whose rounding error ``e`` (Knuth's TwoSum, exact) goes to
        ``rl`` with ``se`` and the last part."""
        b = self.b
        r = x
        for part in parts[:-2]:
            r = madd(q, C(-part), r)
        s = b.fmul(q, C(parts[-2]))
        se = madd(q, C(parts[-2]), b.fneg(s))
        rh = b.fsub(r, s)
        bb = b.fsub(rh, r)
        e = b.fadd(b.fsub(r, b.fsub(rh, bb)), b.fsub(b.fneg(s), bb))
        return rh, madd(q, C(-parts[-1]), b.fsub(e, se))

    #: pow's log2 table: ``z`` in ``[0.69921875, 1.3984375)`` (bits ``0x3f330000`` on) cut
    #: into 16 pieces by bits 19-22 of ``bits(z) - 0x3f330000``; per piece ``1/c``
    #: (``c`` its middle, 1 for the piece around 1) as a float32, and ``-log2(1/c)`` as a
    #: multiple of 2^-15 (so that ``e + hi`` is exact) and the rest (mpmath)
    _POW_INVC = (1.3989070653915405, 1.3403141498565674, 1.286432147026062,
                 1.2367149591445923, 1.1906976699829102, 1.147982120513916,
                 1.1082251071929932, 1.0711296796798706, 1.0364372730255127, 1.0,
                 0.9481481313705444, 0.8951048851013184, 0.8476821184158325,
                 0.805031418800354, 0.7664670944213867, 0.7314285635948181)
    _POW_LOGC = ((-0.48431396484375, -0.422576904296875, -0.363372802734375,
                  -0.3065185546875, -0.251800537109375, -0.1990966796875,
                  -0.14825439453125, -0.09912109375, -0.0516357421875, 0.0,
                  0.076812744140625, 0.159881591796875, 0.2384033203125,
                  0.312896728515625, 0.383697509765625, 0.451202392578125),
                 (1.3842764019500464e-05, 5.717552994610742e-06, -2.5612703211663757e-06,
                  5.531669103220338e-06, -6.607926479773596e-06, -3.49294737134187e-06,
                  3.437290843066876e-06, -1.2061319466738496e-05, 2.9374946279858705e-06,
                  0.0, 2.878438863263e-06, -1.0238894901704043e-05, 1.4203561704562162e-06,
                  -1.372351744066691e-05, 6.728963853674941e-06, 8.734706170798745e-06))
    #: 1/ln2 and -1/(2 ln2), each a float32 and the rest; log2(1 + r) = r/ln2 -
    #: r^2/(2 ln2) + r^3 P(r), P the series' next five terms (|r| < 0.03: 2^-38 relative)
    _POW_A = (1.4426950216293335, 1.925963033500011e-08)
    _POW_B = (-0.7213475108146667, -9.629815167500055e-09)
    _POW_P = (0.48089835047721863, -0.3606737554073334, 0.28853902220726013,
              -0.24044917523860931, 0.20609928667545319)
    #: 2^r - 1 = r (ln2 + r ln2^2/2 + r^2 ln2^3/6 + r^3 ln2^4/24), |r| <= 1/32 (2^-34)
    _POW_EXP2_T = (0.6931471824645996, 0.24022650718688965, 0.05550410971045494,
                   0.009618128649890423)

    #: cbrt(m) on [1, 8): a degree-3 polynomial (relative minimax, 0.53% at most), the
    #: first guess of :meth:`cbrt_f32`
    _CBRT_GUESS = (0.6817084550857544, 0.36451026797294617, -0.04330705478787422,
                   0.0023131060879677534)

    def cbrt_f32(self, x):
        """cbrt(x) for float32 in float32 lanes where the target has FMA (and
        :data:`CBRT_F32_LANES` is on), else in float64 lanes
        (:meth:`~tecomp.codegen.llvm.emit_math_wide._WideMathEmitter.cbrt_f64_lanes`).

        ``a = |x|`` (a subnormal scaled by 2^24 first, 8 taken off the result's exponent),
        ``a = m 2^(3k)`` with ``k = floor(e/3)`` of its exponent ``e`` (in float32:
        ``floor(e/3 + 1/6)``) and ``m`` in ``[1, 8)`` (exponent bits), ``cbrt(a) =
        cbrt(m) 2^k``.  ``y0`` a degree-3 polynomial in ``m`` (0.53%); then, with
        ``inv = 1/m`` (the one division) and ``d = (y^3 - m) inv`` (``y^3 = m (1 + d)``),
        ``y (1 + d)^(-1/3) = y (1 - c)``, ``c = d (1/3 - 2d/9)`` (the series to ``d^2``:
        an error of ``14/81 d^3``): once from ``y0`` with ``y0^3`` rounded (``d < 0.016``,
        ``y1`` within 1e-6), once from ``y1`` with ``y1^3 - m`` exact (``y1^2 = s + sl``
        and ``s y1 = t + tl`` by FMAs, ``t - m`` exact by Sterbenz: ``r = (t - m) + tl
        + sl y1``), ``y2 = y1 - y1 c`` rounded once by an FMA (the sum within about 1e-13
        of ``cbrt(m)``), times ``2^k`` by the exponent bits (the result is a normal
        float).  With :data:`CBRT_SCALEF` where the target has ``vgetexpps`` and
        ``vscalefps`` (AVX-512), the common lanes take ``e`` from the one and ``m = a
        2^(-3k)`` and the product by ``2^k`` from the other (exact: the same bits);
        elsewhere ``k`` is ``floor((e + 127)/3 + 1/6 - 127/3)`` of the biased exponent.
        The sign of ``x``; ``cbrt(+-0) = +-0``, ``cbrt(+-inf) = +-inf``, NaN
        stays NaN.  Lanes that are not a normal float take a branch, once per vector
        that has one, which computes the whole vector with the scaling and the special
        values (the same bits for the other lanes)."""
        if not (self.policy.has_fma and CBRT_F32_LANES):
            return self.cbrt_f64_lanes(x)
        b, ty, _, C, _, _ = self._kit(x)
        ax = b.call(self._fn1("llvm.fabs", ty), [x])
        odd = b.or_(b.fcmp_unordered("<", ax, C(1.1754943508222875e-38)),
                    b.fcmp_unordered("==", ax, C(float("inf"))))
        return self._slow_where(odd, "cbrt.special", lambda x: self._cbrt_f32_lanes(x, True),
                                x, self._cbrt_f32_lanes(x, False))

    def _cbrt_f32_lanes(self, x, general: bool):
        """:meth:`cbrt_f32` in float32 lanes; ``general``: with subnormal inputs' scaling
        and the special values (else for normal ``x`` only)."""
        b, ty, ity, C, I, madd = self._kit(x)
        ax = b.call(self._fn1("llvm.fabs", ty), [x])
        if general:
            tiny = b.fcmp_ordered("<", ax, C(1.1754943508222875e-38))
            xs = b.select(tiny, b.fmul(ax, C(16777216.0)), ax)
        else:
            xs = ax
        getexp = self.policy.vector_op("getexp", ty) if CBRT_SCALEF and not general else None
        scalef = self.policy.vector_op("scalef", ty) if getexp is not None else None
        if scalef is not None:
            # (a normal a: its exponent e, k = floor(e/3), m = a 2^(-3k) exact)
            k = b.call(self._fn1("llvm.floor", ty),
                       [madd(getexp(b, self.mb, xs), C(1.0 / 3.0), C(1.0 / 6.0))])
            m = scalef(b, self.mb, xs, b.fmul(k, C(-3.0)))
        else:
            bits = b.bitcast(xs, ity)
            if CBRT_SCALEF:
                # floor((e + 127)/3 + 1/6 - 127/3) = floor(e/3 + 1/6) (margin 1/6)
                k = b.call(self._fn1("llvm.floor", ty),
                           [madd(b.sitofp(b.lshr(bits, I(23)), ty), C(1.0 / 3.0),
                                 C(1.0 / 6.0 - 127.0 / 3.0))])
            else:
                e = b.fsub(b.sitofp(b.lshr(bits, I(23)), ty), C(127.0))
                k = b.call(self._fn1("llvm.floor", ty), [madd(e, C(1.0 / 3.0), C(1.0 / 6.0))])
            m = b.bitcast(b.sub(bits, b.fptosi(b.fmul(k, C(3.0 * 2 ** 23)), ity)), ty)
        inv = b.fdiv(C(1.0), m)
        y = self._horner(self._CBRT_GUESS, m, madd)

        def corrected(y, r, terms):
            d = b.fmul(r, inv)
            c = b.fmul(d, self._horner(terms, d, madd))
            return madd(b.fneg(y), c, y)

        y = corrected(y, b.fsub(b.fmul(b.fmul(y, y), y), m),
                      (1.0 / 3.0, -2.0 / 9.0, 14.0 / 81.0))
        s = b.fmul(y, y)
        sl = madd(y, y, b.fneg(s))
        t = b.fmul(s, y)
        tl = madd(s, y, b.fneg(t))
        y = corrected(y, madd(sl, y, b.fadd(b.fsub(t, m), tl)), (1.0 / 3.0, -2.0 / 9.0))
        kr = b.fsub(k, b.select(tiny, C(8.0), C(0.0))) if general else k
        if scalef is not None:
            res = scalef(b, self.mb, y, kr)
        else:
            res = b.bitcast(b.add(b.bitcast(y, ity), b.fptosi(b.fmul(kr, C(2.0 ** 23)), ity)),
                            ty)
        res = b.call(self._fn1("llvm.copysign", ty, 2), [res, x])
        if not general:
            return res
        regular = b.and_(b.fcmp_ordered(">", ax, C(0.0)), b.fcmp_ordered("<", ax, C(float("inf"))))
        return b.select(regular, res, x)

    def pow_f32(self, x, y):
        """x**y for float32: :meth:`_pow_f32_lanes` where the target has FMA and a
        16-entry table instruction (and :data:`POW_F32_LANES` is on), else in float64
        lanes (:meth:`~tecomp.codegen.llvm.emit_math_wide._WideMathEmitter.pow_f64_lanes`)."""
        lookup = self.policy.vector_op("lookup16", x.type) \
            if self.policy.has_fma and POW_F32_LANES else None
        if lookup is None:
            return self.pow_f64_lanes(x, y)
        b, ty, _, C, _, _ = self._kit(x)
        lookup32 = self.policy.vector_op("lookup32", x.type) if POW_TABLE32 else None
        plan = self._POWN32 if lookup32 is not None else self._POWN16 if POW_LN16 else None
        if lookup32 is not None or plan is not None:
            lookup32 = lookup32 or lookup
            res, awh = self._pow_f32_ln(x, y, lookup32, False, plan)
            # (x not a positive normal float: its bits less 2^23, unsigned, are 0x7f000000
            # or more; one integer test where the float tests take four instructions)
            _, _, ity, _, I, _ = self._kit(x)
            odd = b.or_(b.icmp_unsigned(">=", b.sub(b.bitcast(x, ity), I(0x800000)),
                                        I(0x7F000000)),
                        b.fcmp_unordered(">=", awh, C(self._POW_LN_BIG)))
            return self._slow_where(
                odd, "pow.special",
                lambda x: self._pow_special_values(
                    x, y, self._pow_f32_ln(x, y, lookup32, True, plan)),
                x, res)
        # the common lanes (x a positive normal float, y finite) need neither the
        # subnormal scaling nor the special values: the others take a branch, once per
        # vector that has one, which computes the whole vector with them (the same bits
        # for the common lanes)
        if POW_LARGE_W_BRANCH:
            # (|w| >= 128 or NaN: y infinite or NaN included; x = +inf is not: w is 0
            # for y = 0, tiny for tiny y)
            res, awh = self._pow_f32_lanes(x, y, lookup, False)
            odd = b.or_(b.or_(b.fcmp_unordered("<", x, C(1.1754943508222875e-38)),
                              b.fcmp_unordered("==", x, C(float("inf")))),
                        b.fcmp_unordered(">=", awh, C(128.0)))
            return self._slow_where(
                odd, "pow.special",
                lambda x: self._pow_special_values(x, y, self._pow_f32_lanes(x, y, lookup, True)),
                x, res)
        ay = b.call(self._fn1("llvm.fabs", ty), [y])
        odd = b.or_(b.or_(b.fcmp_unordered("<", x, C(1.1754943508222875e-38)),
                          b.fcmp_unordered("==", x, C(float("inf")))),
                    b.fcmp_unordered("==", ay, C(float("inf"))))
        return self._slow_where(
            odd, "pow.special",
            lambda x: self._pow_special_values(x, y, self._pow_f32_lanes(x, y, lookup, True)),
            x, self._pow_f32_lanes(x, y, lookup, False))

    def _pow_f32_lanes(self, x, y, lookup, general: bool):
        """``|x|**y`` for float32 in float32 lanes (the sign and the special values:
        :meth:`_pow_special_values`): ``log2|x|`` as a double-float ``H + Lo`` (about
        2^-36 relative by design), ``w = y (H + Lo)`` as ``wh + wl`` (the product's rounding error by
        an FMA), then ``2^w = 2^n 2^r``, ``n = round(wh)``, ``r = (wh - n) + wl``, with
        ``exp2``'s polynomial and :meth:`_ldexp` (one rounding, subnormal results
        included; ``wh`` clamped to ``[-151, 129]``: 0 and inf beyond).  With
        :data:`POW_LARGE_W_BRANCH` on and ``general`` False: no clamp and no guard of
        ``wl`` (the caller sends the lanes with ``|wh| >= 128`` to the branch), and the
        result comes with ``|wh|``.

        ``log2|x|``: ``|x| = z 2^e`` with ``z`` in ``[0.699, 1.398)`` from the bits
        (subnormals scaled by 2^23 first), ``1/c`` and ``log2(c) = hi + lo`` from
        :data:`_POW_INVC` and :data:`_POW_LOGC` (``e + hi`` exact), ``z/c - 1 = r + rl``
        exactly (``z (1/c)`` and its rounding error, ``|r| < 0.03``; ``r = z - 1`` for the
        piece around 1, so that ``log2|x|`` keeps its relative accuracy near ``x = 1``),
        ``log2(1 + r) = r A + r^2 B + r^3 P(r)`` with ``r A``, ``r^2`` and ``r^2 B``
        each a float32 and its exact rounding error, summed by Fast2Sum."""
        b, ty, ity, C, I, madd = self._kit(x)
        ax, e, z, idx = self._pow_split(x, general, 0x3F330000, 19)
        invc = lookup(b, self.mb, self._POW_INVC, idx)
        # z/c - 1 = r + rl: p = z (1/c) and its error pe exactly, p - 1 exact (Sterbenz)
        p = b.fmul(z, invc)
        pe = madd(z, invc, b.fneg(p))
        r0 = b.fsub(p, C(1.0))
        r = b.fadd(r0, pe)
        rl = b.fadd(b.fsub(r0, r), pe)                  # (|r0| >= |pe| or r0 = 0)
        ah, al = self._POW_A
        bh, bl = self._POW_B
        t = b.fmul(r, C(ah))
        r2 = b.fmul(r, r)
        q0 = b.fmul(r2, C(bh))
        # the low part, summed as a tree (short dependency chains): t's and q0's rounding
        # errors, r2's, the second parts of A and B, rl times the derivative A + 2 B r,
        # and r^3 P(r) (P by Estrin's scheme)
        pp = self._POW_P
        poly = madd(r2, madd(r2, C(pp[4]), madd(r, C(pp[3]), C(pp[2]))),
                    madd(r, C(pp[1]), C(pp[0])))
        lo1 = madd(r, C(al), madd(r, C(ah), b.fneg(t)))
        lo2 = madd(rl, madd(r, C(2.0 * bh), C(ah)), madd(r2, C(bl), madd(r2, C(bh), b.fneg(q0))))
        lo3 = madd(madd(r, r, b.fneg(r2)), C(bh), b.fmul(b.fmul(r2, r), poly))
        s1 = b.fadd(t, q0)                              # (|t| > |q0|: Fast2Sum)
        lo = b.fadd(b.fadd(lo1, lo2), b.fadd(lo3, b.fadd(b.fsub(t, s1), q0)))
        # e + log2(c), exact; plus s1 (|e + log2 c| > |s1| unless it is 0: Fast2Sum)
        eh = b.fadd(e, lookup(b, self.mb, self._POW_LOGC[0], idx))
        hh = b.fadd(eh, s1)
        lo = b.fadd(b.fadd(b.fsub(eh, hh), s1),
                    b.fadd(lookup(b, self.mb, self._POW_LOGC[1], idx), lo))
        # w = y (hh + lo) = wh + wl (|x| 0 or inf: garbage, replaced at the end)
        wh = b.fmul(y, hh)
        wl = madd(y, lo, madd(y, hh, b.fneg(wh)))
        awh = b.call(self._fn1("llvm.fabs", ty), [wh])
        lean = POW_LARGE_W_BRANCH and not general   # (|wh| < 128: the lanes kept)
        if lean:
            whc = wh
        else:
            wl = b.select(b.fcmp_ordered("<", awh, C(256.0)), wl, C(0.0))
            whc = b.select(b.fcmp_ordered(">", wh, C(129.0)), C(129.0), wh)
            whc = b.select(b.fcmp_ordered("<", whc, C(-151.0)), C(-151.0), whc)
        # 2^w = 2^e 2^(j/16) 2^r: n = 16 e + j = round(16 wh), r = (wh - n/16) + wl
        # (the difference exact, |r| <= 1/32 and a hair), 2^r = 1 + e1 by its Taylor
        # polynomial, 2^(j/16) = th + tl from a table; th + (th e1 + tl) rounded once,
        # then times 2^e
        magic = 12582912.0
        s = madd(whc, C(16.0), C(magic))
        n = b.fsub(s, C(magic))
        rr = b.fadd(madd(n, C(-1.0 / 16.0), whc), wl)
        c = self._POW_EXP2_T
        e1 = b.fmul(madd(b.fmul(rr, rr), madd(rr, C(c[3]), C(c[2])), madd(rr, C(c[1]), C(c[0]))),
                    rr)
        ni = b.bitcast(s, ity)
        th = lookup(b, self.mb, self._EXP2_16THS[0], ni)
        tl = lookup(b, self.mb, self._EXP2_16THS[1], ni)
        q = b.fadd(th, madd(th, e1, tl))
        en = b.fmul(n, C(1.0 / 16.0))
        res = self._pow_scale(q, en)
        if lean:
            return res, awh
        if not general:
            return res
        return self._pow_zero_inf(ax, y, res)

    def _pow_split(self, x, general: bool, off: int, shift: int):
        """pow's ``|x| = z 2^e`` (``|x|``, ``e`` as a float, ``z``, the table index):
        ``z`` in ``[f(off), 2 f(off))`` (``f(off)`` the float of bits ``off``) from the
        bits of ``x`` less ``off``, the index its bits from ``shift`` up (the lookup keeps
        the low 4 or 5); ``general``: a subnormal ``|x|`` scaled by 2^23 first (else
        ``x`` is a positive normal float)."""
        b, ty, ity, C, I, _ = self._kit(x)
        ax = b.call(self._fn1("llvm.fabs", ty), [x])
        if general:
            tiny = b.fcmp_ordered("<", ax, C(1.1754943508222875e-38))
            ix = b.bitcast(b.select(tiny, b.fmul(ax, C(8388608.0)), ax), ity)
        else:
            ix = b.bitcast(x, ity)
        tmp = b.sub(ix, I(off))
        idx = b.lshr(tmp, I(shift))
        k = b.ashr(tmp, I(23))
        e = b.sitofp(b.sub(k, b.select(tiny, I(23), I(0))) if general else k, ty)
        z = b.bitcast(b.sub(ix, b.and_(tmp, I(-0x800000))), ty)
        return ax, e, z, idx

    def _pow_scale(self, q, en):
        """``q 2^floor(en)`` in one rounding (subnormal results included): ``vscalefps``
        with AVX-512 (it floors its exponent operand itself), else :meth:`_ldexp`."""
        b, ty = self.b, q.type
        scalef = self.policy.vector_op("scalef", ty)
        if scalef is not None:
            return scalef(b, self.mb, q, en)
        return self._ldexp(q, b.call(self._fn1("llvm.floor", ty), [en]))

    def _pow_zero_inf(self, ax, y, res):
        """``res`` where ``|x|`` (``ax``) is 0 (inf for ``y < 0``, else 0) or inf (the
        other way round) replaced."""
        b, _, _, C, _, _ = self._kit(ax)
        inf = C(float("inf"))
        yneg = b.fcmp_ordered("<", y, C(0.0))
        res = b.select(b.fcmp_ordered("==", ax, C(0.0)), b.select(yneg, inf, C(0.0)), res)
        return b.select(b.fcmp_ordered("==", ax, inf), b.select(yneg, C(0.0), inf), res)

    #: pow's tables of 32 (:meth:`_pow_f32_ln`): ``z`` in ``[0.6953125, 1.390625)``
    #: (bits ``0x3f320000`` on) cut into 32 pieces by bits 18-22 of ``bits(z) -
    #: 0x3f320000`` (piece 19, ``[0.9921875, 1.015625)``, around 1); per piece ``1/c`` as
    #: a float32 (``c`` near its middle, 1 for piece 19), so that ``|z/c - 1| <= 1/64``,
    #: and ``ln(c) = -ln(1/c)`` as a multiple of 2^-16 (``e ln2hi + hi`` exact) and the
    #: rest (mpmath); ``1/c`` is the float32 within 2048 ulps of the middle's whose
    #: logarithm is nearest a multiple of 2^-16 (the rest below 4.6e-9: Gal's accurate
    #: tables), so that the rest adds little to ``w``'s low part
    _POWN_INVC = (1.4220458269119263, 1.3910768032073975, 1.3617584705352783,
                  1.333566665649414, 1.3060780763626099, 1.2799761295318604,
                  1.2549127340316772, 1.2306405305862427, 1.2074087858200073,
                  1.1853388547897339, 1.1636900901794434, 1.142855167388916,
                  1.12285578250885, 1.1036441326141357, 1.084926724433899,
                  1.0665918588638306, 1.0491269826889038, 1.0323575735092163,
                  1.0160422325134277, 1.0, 0.969691812992096,
                  0.941149115562439, 0.9141716361045837, 0.8889977931976318,
                  0.864767849445343, 0.842187225818634, 0.8206093311309814,
                  0.8001090884208679, 0.7805972695350647, 0.7618750929832458,
                  0.7442262768745422, 0.7271527051925659)
    _POWN_LOGC = ((-0.3520965576171875, -0.330078125, -0.30877685546875,
                   -0.2878570556640625, -0.26702880859375, -0.2468414306640625,
                   -0.2270660400390625, -0.2075347900390625, -0.1884765625,
                   -0.1700286865234375, -0.1515960693359375, -0.1335296630859375,
                   -0.115875244140625, -0.0986175537109375, -0.081512451171875,
                   -0.0644683837890625, -0.0479583740234375, -0.0318450927734375,
                   -0.0159149169921875, 0.0, 0.0307769775390625,
                   0.0606536865234375, 0.0897369384765625, 0.1176605224609375,
                   0.145294189453125, 0.1717529296875, 0.1977081298828125,
                   0.2230072021484375, 0.2476959228515625, 0.27197265625,
                   0.29541015625, 0.3186187744140625),
                  (-3.2751021339372244e-10, -8.005112128728342e-10, -2.1242121395204094e-09,
                   -7.141987001801908e-10, -3.2933302751558813e-09, 1.7096618565304311e-09,
                   4.509074003067326e-09, -3.727957109678215e-10, -1.4977485918166167e-09,
                   -5.958314952536625e-10, 1.0266366645694802e-09, -1.0023927243807407e-09,
                   -1.738329813427697e-09, 1.4665304526317868e-09, 1.5440126954757716e-09,
                   -2.57396393088527e-09, 7.543471958193493e-10, -2.3207859245477636e-10,
                   1.2653230685444328e-09, 0.0, -1.0062679578481948e-09,
                   4.3029294016783126e-10, 1.0085358104205966e-09, 3.3527474130323753e-09,
                   7.621775433008793e-10, 1.3158526490641975e-09, -1.951814043721356e-09,
                   -2.064061144224638e-09, -7.044478889106642e-10, 4.5133094483951197e-10,
                   -1.4451654317682028e-09, 6.837022614725186e-10))
    #: ln2 as a multiple of 2^-16 and the rest
    _POWN_LN2 = (0.693145751953125, 1.428606765330187e-06)
    #: ln(1 + r) = r - r^2/2 + r^3 P(r), |r| <= 1/64 (fitted: 2^-40.4 relative to r)
    _POWN_P = (0.3333333432674408, -0.2500000298023224, 0.19998009502887726,
               -0.16637636721134186)
    #: exp(r) - 1 = r + r^2 (Q0 + Q1 r + Q2 r^2), |r| <= 0.025 (fitted: 2^-36.4 absolute;
    #: ``|r| <= ln2/64`` from ``wh``, and ``wl`` adds up to about 0.008)
    _POWN_Q = (0.5, 0.16667118668556213, 0.041667524725198746)
    #: 1/ln2; ln2 with 11 significant bits (``(n/32) C1`` exact for ``|n| < 8192``) and
    #: the rest
    _POWN_EXP = (1.4426950216293335, 0.693359375, -0.00021219444170128554)
    #: 2^(j/32), j = 0 ... 31, in two float32 parts (hi, lo)
    _EXP2_32NDS = ((1.0, 1.0218971967697144, 1.0442737340927124, 1.0671404600143433,
                    1.0905077457427979, 1.114386796951294, 1.1387885808944702,
                    1.1637248992919922, 1.1892070770263672, 1.215247392654419,
                    1.2418577671051025, 1.2690509557724, 1.2968395948410034,
                    1.3252366781234741, 1.3542555570602417, 1.3839099407196045,
                    1.4142135381698608, 1.4451807737350464, 1.4768261909484863,
                    1.5091644525527954, 1.5422108173370361, 1.5759809017181396,
                    1.610490322113037, 1.6457555294036865, 1.6817928552627563,
                    1.7186193466186523, 1.7562521696090698, 1.7947090864181519,
                    1.8340080976486206, 1.8741676807403564, 1.9152065515518188,
                    1.9571441411972046),
                   (0.0, -4.811559861650494e-08, 4.8334701574503924e-08,
                    -5.9337519786595294e-08, -1.3077539939843064e-08,
                    -5.435540018083884e-08, 5.386222312608879e-08,
                    -4.051441493402308e-08, 3.797635272917432e-08,
                    -3.267394887984665e-08, 4.496838101886169e-08,
                    1.419333317542737e-09, -4.018999533172973e-08,
                    -3.496373324196611e-08, -1.0123349269974824e-08,
                    -5.875577357983275e-08, 2.4203234971764687e-08,
                    3.324199937537742e-08, -4.500898853621038e-08,
                    -2.4959373234878512e-08, 8.070904833346049e-09,
                    -5.661025426206834e-08, 9.836217174097328e-09,
                    -5.124972091152813e-08, -2.4755326677450284e-08,
                    -4.8496175963919086e-08, -9.235770370707996e-09,
                    -1.141504490931311e-08, -1.1239277952768134e-08,
                    -4.663005626071026e-08, 9.845328108326612e-09,
                    -1.7021804410433106e-08))
    #: ``|w|`` (natural) from which :meth:`_pow_f32_ln`'s lanes take the branch: 128 ln2
    #: rounded (results near the overflow, and below 2^-128); its clamp: 129 ln2 and
    #: -151 ln2 (inf and 0 beyond)
    _POW_LN_BIG = 88.72283935546875
    _POW_LN_CLAMP = (89.41598510742188, -104.66522216796875)
    #: the 16 pieces of ``[0.703125, 1.40625)`` (bits ``0x3f340000`` on, bits 19-22;
    #: piece 9, ``[0.984375, 1.03125)``, around 1), chosen as :data:`_POWN_INVC` (the
    #: rest of ``ln c`` below 3.4e-9; mpmath)
    _POWN16_INVC = (1.3910768032073975, 1.333566665649414, 1.2799761295318604,
                    1.2306405305862427, 1.1853388547897339, 1.142855167388916,
                    1.1036441326141357, 1.0665918588638306, 1.0323575735092163, 1.0,
                    0.941149115562439, 0.8889977931976318, 0.842187225818634,
                    0.8001090884208679, 0.7618750929832458, 0.7271527051925659)
    _POWN16_LOGC = ((-0.330078125, -0.2878570556640625, -0.2468414306640625,
                     -0.2075347900390625, -0.1700286865234375, -0.1335296630859375,
                     -0.0986175537109375, -0.0644683837890625, -0.0318450927734375, 0.0,
                     0.0606536865234375, 0.1176605224609375, 0.1717529296875,
                     0.2230072021484375, 0.27197265625, 0.3186187744140625),
                    (-8.005112128728342e-10, -7.141987001801908e-10, 1.7096618565304311e-09,
                     -3.727957109678215e-10, -5.958314952536625e-10, -1.0023927243807407e-09,
                     1.4665304526317868e-09, -2.57396393088527e-09, -2.3207859245477636e-10,
                     0.0, 4.3029294016783126e-10, 3.3527474130323753e-09,
                     1.3158526490641975e-09, -2.064061144224638e-09, 4.5133094483951197e-10,
                     6.837022614725186e-10))
    #: ln(1 + r) = r - r^2/2 + r^3 P(r), -0.0295 <= r <= 1/32 (fitted: 2^-40.0 relative
    #: to r); exp(r) - 1 = r + r^2 (Q0 + Q1 r + Q2 r^2 + Q3 r^3), |r| <= 0.055 (2^-37.8)
    _POWN16_P = (0.3333333432674408, -0.2499999850988388, 0.19996893405914307,
                 -0.16678136587142944, 0.16459263861179352)
    _POWN16_Q = (0.5, 0.1666666716337204, 0.041670408099889755, 0.00833229161798954)


    _POWN32 = _PowPlan(32, 0x3F320000, 18, _POWN_INVC, _POWN_LOGC, _POWN_P, _POWN_Q,
                       _EXP2_32NDS)
    _POWN16 = _PowPlan(16, 0x3F340000, 19, _POWN16_INVC, _POWN16_LOGC, _POWN16_P,
                       _POWN16_Q, (_EXP2_32NDS[0][::2], _EXP2_32NDS[1][::2]))

    def _pow_f32_ln(self, x, y, lookup, general: bool, plan):
        """``|x|**y`` for float32 in float32 lanes with tables of 32 (:data:`POW_TABLE32`;
        ``plan`` :data:`_POWN32`) or 16 (:data:`POW_LN16`, ``plan`` :data:`_POWN16`: the
        same steps with 16 pieces, ``|r0| <= 1/32``, ``P`` of five terms, ``n/16`` and
        ``exp`` by a degree-5 polynomial on ``|r| <= 0.055``; the sign and the special
        values: :meth:`_pow_special_values`): ``ln|x|`` as a
        double-float ``h + lo``, ``w = y (h + lo)`` as
        ``wh + wl``, then ``exp(w) = 2^(n/32) exp(r)``, ``n = round(32 wh/ln2)``, ``r =
        (wh - n C1) + (wl - n C2)`` (``C1 + C2 = ln2/32``, ``n C1`` exact), ``exp(r) - 1 =
        e1`` by a degree-4 polynomial, ``2^(j/32) = th + tl`` from a table (``j = n mod
        32``), ``th + (th e1 + tl)`` rounded once, times ``2^floor(n/32)`` (``vscalefps``).
        Not ``general``: for positive normal ``x`` with ``|wh| < 128 ln2`` (the caller
        sends the other lanes to the branch); the result comes with ``|wh|``.
        ``general``: subnormal ``x`` scaled by 2^23 first, ``wh`` clamped to ``[-151 ln2,
        129 ln2]`` (0 and inf beyond), ``x`` 0 or inf as in :meth:`_pow_f32_lanes`.

        ``ln|x|``: ``|x| = z 2^e`` with ``z`` in ``[0.695, 1.391)`` from the bits, ``1/c``
        and ``ln(c) = hi + lo`` from :data:`_POWN_INVC` and :data:`_POWN_LOGC` (``e ln2hi +
        hi`` exact), ``z/c - 1 = r0 + pe`` exactly (``p = z (1/c)`` rounded, ``pe`` its
        error by an FMA, ``r0 = p - 1`` exact by Sterbenz; ``|r0| <= 1/64``; ``r0 = z - 1``
        and ``pe = 0`` for the piece around 1, so that ``ln|x|`` keeps its relative
        accuracy near ``x = 1``), ``ln(1 + r) = r - r^2/2 + r^3 P(r)``: ``r0^2 = s + se``
        exactly, ``K + r0`` and then ``+ (-s/2)`` (exact) by Fast2Sum, the rest -- both
        sums' errors, ``pe (1 - r0 + r0^2)``, ``-se/2``, ``r0^3 P(r0)``, ``e ln2lo + lo``
        -- in one float32."""
        b, ty, ity, C, I, madd = self._kit(x)
        ax, e, z, idx = self._pow_split(x, general, plan.off, plan.shift)
        invc = lookup(b, self.mb, plan.invc, idx)
        p = b.fmul(z, invc)
        pe = madd(z, invc, b.fneg(p))
        r0 = b.fsub(p, C(1.0))
        s = b.fmul(r0, r0)
        se = madd(r0, r0, b.fneg(s))
        q0 = b.fmul(s, C(-0.5))
        ln2h, ln2l = self._POWN_LN2
        kk = madd(e, C(ln2h), lookup(b, self.mb, plan.logc[0], idx))
        # K + r0 (|K| >= |r0| unless K = 0), then + q0 (|hh| > |q0|): Fast2Sum twice
        hh = b.fadd(kk, r0)
        e2 = b.fadd(b.fsub(kk, hh), r0)
        h = b.fadd(hh, q0)
        e1 = b.fadd(b.fsub(hh, h), q0)
        pp = plan.p
        hi_terms = madd(r0, C(pp[3]), C(pp[2])) if len(pp) == 4 else \
            madd(s, C(pp[4]), madd(r0, C(pp[3]), C(pp[2])))
        poly = madd(s, hi_terms, madd(r0, C(pp[1]), C(pp[0])))
        d = madd(e, C(ln2l), lookup(b, self.mb, plan.logc[1], idx))
        lo = madd(pe, madd(r0, b.fsub(r0, C(1.0)), C(1.0)), d)
        lo = madd(se, C(-0.5), lo)
        lo = madd(b.fmul(s, r0), poly, lo)
        lo = b.fadd(b.fadd(e1, e2), lo)
        # w = y (h + lo) = wh + wl (|x| 0 or inf: garbage, replaced at the end)
        wh = b.fmul(y, h)
        wl = madd(y, lo, madd(y, h, b.fneg(wh)))
        awh = b.call(self._fn1("llvm.fabs", ty), [wh])
        if general:
            wl = b.select(b.fcmp_ordered("<", awh, C(2 * self._POW_LN_BIG)), wl, C(0.0))
            top, bottom = self._POW_LN_CLAMP
            whc = b.select(b.fcmp_ordered(">", wh, C(top)), C(top), wh)
            whc = b.select(b.fcmp_ordered("<", whc, C(bottom)), C(bottom), whc)
        else:
            whc = wh
        # n/32 = round(32 wh/ln2)/32 directly (a magic number of 1.5 2^18: the float's
        # last 5 bits are j = n mod 32; with 16 pieces 1.5 2^19 and n/16), so that no
        # product by 1/32 is needed
        inv, c1, c2 = self._POWN_EXP
        magic = 1.5 * 2.0 ** 23 / plan.pieces
        sn = madd(whc, C(inv), C(magic))
        en = b.fsub(sn, C(magic))
        rr = b.fadd(madd(en, C(-c1), whc), madd(en, C(-c2), wl))
        qq = plan.q
        r2 = b.fmul(rr, rr)
        inner = madd(r2, C(qq[2]), madd(rr, C(qq[1]), C(qq[0]))) if len(qq) == 3 else \
            madd(r2, madd(rr, C(qq[3]), C(qq[2])), madd(rr, C(qq[1]), C(qq[0])))
        em1 = madd(r2, inner, rr)
        ni = b.bitcast(sn, ity)
        th = lookup(b, self.mb, plan.exp[0], ni)
        tl = lookup(b, self.mb, plan.exp[1], ni)
        q = b.fadd(th, madd(th, em1, tl))
        res = self._pow_scale(q, en)
        if not general:
            return res, awh
        return self._pow_zero_inf(ax, y, res)

    #: atan(u) = u + u z P(z), z = u^2, 0 <= u <= 1 (fitted: 2.6e-9 relative)
    _ATAN01_P = (-0.33333298563957214, 0.1999853402376175, -0.14264100790023804,
                 0.10951489210128784, -0.08401504158973694, 0.057925451546907425,
                 -0.031146740540862083, 0.010898301377892494, -0.001790048205293715)
    #: pi/2 as a float32 and the rest
    _PIO2_F32 = (1.5707963705062866, -4.371139000186243e-08)

    def atan_f32(self, x):
        """atan(x) for float32 in float32 lanes: ``a = |x|``; ``u = a`` for ``a < 1``,
        else ``u = -1/a`` and ``pi/2`` added (in two parts: ``hi + (lo + p)``);
        ``p = u + u z P(z)`` with a degree-8 ``P``, ``z = u^2``; the sign of ``x``.
        ``atan(+-inf) = +-pi/2`` (rounded), ``atan(+-0) = +-0``, NaN stays NaN."""
        b, ty, _, C, _, madd = self._kit(x)
        a = b.call(self._fn1("llvm.fabs", ty), [x])
        high = b.fcmp_ordered(">=", a, C(1.0))      # (atan(1) rounds right this way)
        u = b.select(high, b.fdiv(C(-1.0), a), a)
        z = b.fmul(u, u)
        p = madd(b.fmul(u, z), self._horner(self._ATAN01_P, z, madd), u)
        hi, lo = self._PIO2_F32
        res = b.select(high, b.fadd(C(hi), b.fadd(p, C(lo))), p)
        res = b.call(self._fn1("llvm.copysign", ty, 2), [res, x])
        return b.select(b.fcmp_unordered("uno", x, x), x, res)

    def fast_erfc_f32(self, x):
        """``fast_erfc``: where the target has the table instruction and FMA of
        :meth:`erfc_f32`'s segments, their steps without the compensations (about 15%
        fewer instructions, 2.8 ulp against 0.93); elsewhere
        :meth:`_fast_erfc_f32_no_table`."""
        lookup = self._erfc_lookup(x.type)
        if lookup is not None:
            return self._erfc_f32_segments(x, lookup, compensated=False)
        return self._fast_erfc_f32_no_table(x)

    def _fast_erfc_f32_no_table(self, x):
        """``fast_erfc`` without a table instruction: erfc(x) = 1 - erf(x) for float32 in
        float32 lanes, about twice as fast as ``erfc`` there (:meth:`erfc_f64_lanes`,
        float64 lanes) at 2.3 ulp against 0.6;
        accurate in the tail (relative error down to the subnormal results near ``x =
        10``).  ``a = |x|``
        (clamped to 10.1, where erfc rounds to 0).  ``a < 0.5``: ``1 - erf(a)`` from
        the polynomial of :meth:`_erf_f32_two_branches`, ``(1 - a c0_hi) - a t`` in two
        FMAs.  Beyond:
        ``exp(-a^2) erfcx(a)`` with ``erfcx`` a polynomial in ``a - 1.25`` below 2, and
        ``u G(u^2)`` above, ``u = 1/a`` (one Horner evaluation, the coefficients selected
        per lane), ``a^2 = h + l`` split exactly, ``exp(-h) = 2^n (1 + e1)`` as in
        :meth:`exp_f32`, and the corrections (``1 - l``, and ``u``'s exact residual)
        gathered in ``w``: ``2^n (b + b w)``, ``b`` the polynomial's part, rounded once
        (subnormal results included); with FMA ``b`` is carried as ``b + bl`` (the
        rounding of the polynomial's last step and of ``u q``): ``2^n (b + (bl + b w))``.
        ``2 - erfc(|x|)`` for ``x < 0``.  ``erfc(+inf) = 0``, ``erfc(-inf) = 2``,
        ``erfc(+-0) = 1``, NaN stays NaN."""
        b, ty, ity, C, I, madd = self._kit(x)
        ax = b.call(self._fn1("llvm.fabs", ty), [x])
        a = b.call(self._fn1("llvm.minnum", ty, 2), [ax, C(10.1)])
        # a < 0.5: 1 - erf(a)
        z2 = b.fmul(a, a)
        t = madd(z2, self._horner(self._ERF_P, z2, madd), C(self._ERF_C0[1]))
        small = madd(b.fneg(a), t, madd(b.fneg(a), C(self._ERF_C0[0]), C(1.0)))
        # erfcx(a): P(a - 1.25) below 2, (1/a) G(1/a^2) above
        big = b.fcmp_ordered(">=", a, C(2.0))
        u = b.fdiv(C(1.0), a)
        v = b.select(big, b.fmul(u, u), b.fsub(a, C(1.25)))
        q = b.select(big, C(self._ERFCX_G[-1]), C(self._ERFCX_P[-1]))
        for cp, cg in zip(reversed(self._ERFCX_P[1:-1]), reversed(self._ERFCX_G[1:-1])):
            q = madd(q, v, b.select(big, C(cg), C(cp)))
        c0 = b.select(big, C(self._ERFCX_G[0]), C(self._ERFCX_P[0]))
        q1 = q
        q = madd(q1, v, c0)
        # the product erfcx(a) exp(-a^2), rounded once into 2^n base (1 + w): base = q, or
        # u q with 1/a = u (1 + rho) (rho = 1 - a u, exact with FMA); a^2 = h + l, exact
        # (FMA: l = fma(a, a, -h); without, Dekker's product of 12-bit halves), and
        # exp(-a^2) = 2^n (1 + e1) (1 - l) (exp(-h) as exp_f32 computes it)
        base = b.select(big, b.fmul(u, q), q)
        blo = None
        if self.policy.has_fma:
            # base kept as base + blo (double-float): q's last rounding, ql = q1 v + c0 - q
            # (c0 - q is exact: q lies within a factor 2 of c0 on both pieces), and the
            # rounding of u q (an FMA)
            ql = madd(q1, v, b.fsub(c0, q))
            blo = b.select(big, madd(u, ql, madd(u, q, b.fneg(base))), ql)
        rho = b.select(big, madd(b.fneg(a), u, C(1.0)), C(0.0))
        h = z2
        if self.policy.has_fma:
            lo = madd(a, a, b.fneg(h))
        else:
            ah = b.bitcast(b.and_(b.bitcast(a, ity), I(-4096)), ty)
            al = b.fsub(a, ah)
            lo = b.fadd(b.fadd(b.fsub(b.fmul(ah, ah), h), b.fmul(b.fadd(ah, ah), al)),
                        b.fmul(al, al))
        n, r = self._exp_reduce(b.fneg(h), None, None)    # (-h in [-102.01, 0])
        e1 = self._expm1_poly(r)
        corr = b.fsub(rho, lo)
        w = madd(e1, corr, b.fadd(e1, corr))
        if blo is None:
            large = self._ldexp(madd(base, w, base), n)
        else:   # 2^n (base + (blo + base w))
            large = self._ldexp(b.fadd(base, madd(base, w, blo)), n)
        res = b.select(b.fcmp_ordered("<", a, C(0.5)), small, large)
        res = b.select(b.fcmp_ordered("<", x, C(0.0)), b.fsub(C(2.0), res), res)
        return b.select(b.fcmp_unordered("uno", x, x), x, res)

    #: erfcx(a) = erfc(a) exp(a^2) = C_hi + (t H + (C_lo + t (L + t (p2 + t (p3 + ... + t
    #: p7))))) on 16 segments of a = |x|: k = round(a / w), w = 21/32, t = a - k w (exact),
    #: |t| <= 0.33 (the last segment up to a = 10.1); one row per k: (C_hi, C_lo, H, L, p2,
    #: ..., p7), C = erfcx(k w) and H + L the slope in two float32 parts.  Fitted for tecomp
    #: (Lawson's iteration towards the minimax relative error against scipy's erfcx, the
    #: coefficients rounded to float32 one at a time, the others refitted: 8e-9 or better)
    _ERFCX_SEGMENTS = (
        (1.0, -1.221364120951307e-10, -1.1283791065216064, -1.4729697461746127e-08,
         0.9999971389770508, -0.7521844506263733, 0.4991917908191681, -0.29563459753990173,
         0.1471339613199234, -0.04578612372279167),
        (0.5435773730278015, 4.5140302606938576e-10, -0.41493386030197144,
         -8.064973577859291e-09, 0.2712782621383667, -0.15793856978416443, 0.08376003801822662,
         -0.0411665104329586, 0.019708193838596344, -0.008449156768620014),
        (0.35517677664756775, 9.357870922599432e-09, -0.1960401087999344,
         5.683777892784292e-09, 0.09787429124116898, -0.04505351185798645,
         0.019364463165402412, -0.007850646041333675, 0.0031107289250940084,
         -0.0011353862937539816),
        (0.25877436995506287, -4.222098226591697e-09, -0.10945510119199753,
         -5.772617939214797e-10, 0.04328465461730957, -0.01615898683667183,
         0.0057348827831447124, -0.0019464418292045593, 0.0006480100564658642,
         -0.00020289582607802004),
        (0.20188754796981812, 6.561258203419129e-09, -0.06846950203180313,
         -3.7018992316006916e-09, 0.02215510606765747, -0.006874909158796072,
         0.002054048702120781, -0.000592979893554002, 0.0001685218303464353,
         -4.5684759243158624e-05),
        (0.1648728996515274, -2.4815656196608415e-09, -0.046400777995586395,
         -1.3991748870623155e-09, 0.012620341032743454, -0.0033268597908318043,
         0.0008519876864738762, -0.0002124309539794922, 5.235832213656977e-05,
         -1.2414332559274044e-05),
        (0.13905300199985504, 2.776956442573919e-09, -0.03333675488829613,
         4.1801270778130117e-10, 0.007789534516632557, -0.0017769761616364121,
         0.0003963268536608666, -8.654327393742278e-05, 1.8743523469311185e-05,
         -3.931933861167636e-06),
        (0.1200924962759018, -2.3739066268291253e-09, -0.02502937987446785,
         5.064957897538136e-10, 0.005113782361149788, -0.0010252941865473986,
         0.00020191885414533317, -3.909280349034816e-05, 7.47714420867851e-06,
         -1.3996883581057773e-06),
        (0.10561273247003555, 2.9987405891773733e-09, -0.019445445388555527,
         7.164105420010003e-10, 0.0035241509322077036, -0.000629101472441107,
         0.00011068369349231943, -1.9204373529646546e-05, 3.301636297692312e-06,
         -5.560760882872273e-07),
        (0.09421001374721527, 2.738497428822484e-09, -0.015523347072303295,
         -2.851860969599329e-10, 0.002525246236473322, -0.0004057415062561631,
         6.441513687605038e-05, -1.0109514732903335e-05, 1.5901092638159753e-06,
         -2.4335420789611817e-07),
        (0.08500651270151138, -1.1722370851785513e-09, -0.012668703682720661,
         4.091910976722346e-10, 0.0018681463552638888, -0.0002726621460169554,
         3.9398732042172924e-05, -5.638150923914509e-06, 8.127658475132193e-07,
         -1.1461629156883646e-07),
        (0.07742683589458466, 1.7520866979481298e-09, -0.010529198683798313,
         1.1223154350314957e-10, 0.0014191854279488325, -0.00018963569891639054,
         2.5127212211373262e-05, -3.3018222893588245e-06, 4.260216144302831e-07,
         -5.5737586990289856e-08),
        (0.07107894122600555, -3.4001155224672175e-09, -0.008885896764695644,
         4.2701989166893384e-10, 0.0011025042040273547, -0.0001357840228592977,
         1.6601419702055864e-05, -2.0155046058789594e-06, 2.5049448026948085e-07,
         -3.020866401470812e-08),
        (0.06568685173988342, 1.7640818805730873e-09, -0.007597228977829218,
         -2.0623869279035034e-10, 0.0008729920373298228, -9.967730147764087e-05,
         1.1309732144582085e-05, -1.2754079534715856e-06, 1.4509532775264233e-07,
         -1.6182745810056076e-08),
        (0.06105092167854309, -1.571990204674023e-09, -0.006568510085344315,
         -5.223553881106291e-11, 0.0007027332321740687, -7.476580503862351e-05,
         7.910782187536824e-06, -8.3252143667778e-07, 9.003130685414362e-08,
         -9.667437517180133e-09),
        (0.057023219764232635, -5.715870554645619e-10, -0.005734539125114679,
         -1.1517909542790861e-10, 0.0005738485488109291, -5.714507642551325e-05,
         5.663224328600336e-06, -5.587345413005096e-07, 5.6030035722187677e-08,
         -3.5428335820597567e-09),
    )
    #: the segments' width of :data:`_ERFCX_SEGMENTS`
    _ERFCX_W = 21.0 / 32.0
    #: 2^(j/16), j = 0 ... 15, in two float32 parts (hi, lo)
    _EXP2_16THS = ((1.0, 1.0442737340927124, 1.0905077457427979,
                    1.1387885808944702, 1.1892070770263672, 1.2418577671051025,
                    1.2968395948410034, 1.3542555570602417, 1.4142135381698608,
                    1.4768261909484863, 1.5422108173370361, 1.610490322113037,
                    1.6817928552627563, 1.7562521696090698, 1.8340080976486206,
                    1.9152065515518188),
                   (0.0, 4.8334701574503924e-08, -1.3077539939843064e-08,
                    5.386222312608879e-08, 3.797635272917432e-08,
                    4.496838101886169e-08, -4.018999533172973e-08,
                    -1.0123349269974824e-08, 2.4203234971764687e-08,
                    -4.500898853621038e-08, 8.070904833346049e-09,
                    9.836217174097328e-09, -2.4755326677450284e-08,
                    -9.235770370707996e-09, -1.1239277952768134e-08,
                    9.845328108326612e-09))
    #: ln2/16 in two float32 parts
    _LN2_16 = (0.043321698904037476, -1.1904088825787085e-10)

    def erfc_f32(self, x):
        """erfc(x) = 1 - erf(x) for float32: :meth:`_erfc_f32_segments` where the target has
        fused multiply-adds and a 16-entry table instruction (x86 with AVX2 or AVX-512, as
        :meth:`erf_f32`; :data:`ERFC_SEGMENTS`), else in
        float64 lanes (:meth:`erfc_f64_lanes`)."""
        lookup = self._erfc_lookup(x.type)
        if lookup is None:
            return self.erfc_f64_lanes(x)
        return self._erfc_f32_segments(x, lookup)

    def _erfc_lookup(self, ty):
        """The 16-entry table instruction of :meth:`_erfc_f32_segments` on values of type
        ``ty`` where the target has it and FMA (and :data:`ERFC_SEGMENTS` is on), else
        None."""
        if not (self.policy.has_fma and ERFC_SEGMENTS):
            return None
        return self.policy.vector_op("lookup16", ty)

    def _erfc_f32_segments(self, x, lookup, compensated: bool = True):
        """erfc(x) for float32 in float32 lanes, accurate in the tail (relative error down
        to the subnormal results near ``x = 10``): ``a = |x|`` clamped to 10.1 (a NaN
        kept: erfc rounds to 0 from 10.0546 on), ``erfc(a) = exp(-a^2) erfcx(a)``.
        ``erfcx`` one degree-7 polynomial per segment of ``a`` (:data:`_ERFCX_SEGMENTS`,
        its coefficients read per lane with ``lookup``), its value kept as ``bh + bl``
        (the last addition's rounding error, Fast2Sum).  ``a^2 = h + l`` exactly (an FMA),
        ``-h = (16 e + j) ln2/16 + r`` (``r`` exact up to the second part of ``ln2/16``;
        ``l`` taken off it), ``exp(r) = 1 + e1`` by its Taylor polynomial (``|r| <=
        ln2/32``) and ``2^(j/16)`` from a table of 16 in two parts, ``Th + Tl``; then
        ``p = bh Th`` with its exact rounding error, the small terms gathered, ``(p + (p
        e1 + ...)) 2^e`` rounded (``vscalefps`` with AVX-512, which floors ``n/16`` itself,
        else :meth:`_ldexp`: subnormal results included, the same bits).
        ``2 - erfc(|x|)`` for ``x < 0``.  ``erfc(+inf) = 0``, ``erfc(-inf) = 2``,
        ``erfc(+-0) = 1``, NaN stays NaN (it goes through every step).  ``compensated``
        False (``fast_erfc``): ``bl`` and ``Tl`` left out, ``p (1 + e1) 2^e``."""
        b, ty, ity, C, _, madd = self._kit(x)
        ax = b.call(self._fn1("llvm.fabs", ty), [x])
        # min(ax, 10.1) that keeps a NaN (one vminps, the NaN as its second operand)
        a = b.select(b.fcmp_ordered(">", ax, C(10.1)), C(10.1), ax)
        # erfcx(a) = c_hi + u: k = round(a / w) <= 15 (a <= 10.1), t = a - k w exact
        c_hi, u = self._segment_parts(lookup, self._ERFCX_SEGMENTS, a, 1.0 / self._ERFCX_W,
                                      clamp=False)
        bh = b.fadd(c_hi, u)
        # exp(-a^2) = 2^e 2^(j/16) exp(r): a^2 = h + l, n = 16 e + j = round(-h 16/ln2)
        h = b.fmul(a, a)
        lo = madd(a, a, b.fneg(h))
        magic = 12582912.0
        s2 = madd(h, C(-16.0 / 0.6931471805599453), C(magic))
        n = b.fsub(s2, C(magic))
        c1, c2 = self._LN2_16
        r = madd(n, C(-c2), b.fsub(madd(n, C(-c1), b.fneg(h)), lo))
        e1 = madd(b.fmul(self._horner((0.5, 1.0 / 6.0, 1.0 / 24.0), r, madd), r), r, r)
        ni = b.bitcast(s2, ity)
        th = lookup(b, self.mb, self._EXP2_16THS[0], ni)
        p = b.fmul(bh, th)
        if compensated:
            bl = b.fadd(b.fsub(c_hi, bh), u)          # (|c_hi| >= |u|: exact)
            tl = lookup(b, self.mb, self._EXP2_16THS[1], ni)
            # (bh + bl)(th + tl)(1 + e1) = p + (p e1 + (pl + bh tl + bl th)), p + pl = bh th
            pl = madd(bh, th, b.fneg(p))
            m = madd(p, e1, madd(bl, th, madd(bh, tl, pl)))
        else:
            m = b.fmul(p, e1)
        # times 2^e, e = floor(n/16): vscalefps floors its exponent operand itself
        en = b.fmul(n, C(1.0 / 16.0))
        scalef = self.policy.vector_op("scalef", ty)
        if scalef is not None:
            res = scalef(b, self.mb, b.fadd(p, m), en)
        else:
            res = self._ldexp(b.fadd(p, m), b.call(self._fn1("llvm.floor", ty), [en]))
        return b.select(b.fcmp_ordered("<", x, C(0.0)), b.fsub(C(2.0), res), res)

    def _slow_where(self, cond, label: str, slow_fn, x, res):
        """``res`` with the lanes where ``cond`` holds replaced by ``slow_fn(x)``'s, in a
        branch (named ``label``) taken only when some lane needs it."""
        b = self.b
        ty = x.type
        if isinstance(ty, ir.VectorType):
            ity = ir.IntType(ty.count)
            anyc = b.icmp_unsigned("!=", b.bitcast(cond, ity), ir.Constant(ity, 0))
        else:
            anyc = cond
        entry = b.block
        slow_bb = self.fn.append_basic_block(label)
        end_bb = self.fn.append_basic_block(f"{label}.end")
        b.cbranch(anyc, slow_bb, end_bb)
        b.position_at_end(slow_bb)
        slow = slow_fn(x)
        if isinstance(ty, ir.VectorType):
            slow = b.select(cond, slow, res)
        slow_end = b.block
        b.branch(end_bb)
        b.position_at_end(end_bb)
        phi = b.phi(ty)
        phi.add_incoming(res, entry)
        phi.add_incoming(slow, slow_end)
        return phi
