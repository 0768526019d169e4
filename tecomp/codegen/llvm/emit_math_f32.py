"""Float32 ``tan``, ``atan`` and ``fast_erfc`` in float32 lanes (:class:`_F32MathEmitter`, a
part of :class:`~tecomp.codegen.llvm.emit_math._MathEmitter`).

Range reduction and polynomials fitted for tecomp (weighted least squares towards the
minimax relative error, against mpmath, coefficients rounded to float32 one at a time
with the others refitted), evaluated in float32 with explicit FMAs where the target has
them (:meth:`_madd`): one float32 register per float32 register, where the float64 code
of :mod:`~tecomp.codegen.llvm.emit_math_wide` (0.5 ulp) takes two and a float64
division.  Errors of 1-3 ulp (docs/numerics.md gives the measured figures).  No step is
contracted: scalar, vectorized and unrolled evaluations give the same bits.
"""
from __future__ import annotations

import llvmlite.ir as ir


class _F32MathEmitter:
    """The float32-lane ``tan``, ``atan`` and ``fast_erfc`` (see the module's docstring)."""

    #: tan(r) = r + r z P(z), z = r^2, |r| <= pi/4 (fitted: 1.3e-9 relative)
    _TAN32_P = (0.33333349227905273, 0.13332675397396088, 0.05405890569090843,
                0.021286293864250183, 0.010827098973095417, 9.882983431452885e-05,
                0.004372341558337212)

    def tan_f32(self, x):
        """tan(x) for float32 in float32 lanes: ``q = roundeven(x 2/pi)``,
        ``r = x - q pi/2`` with pi/2 in three or four float32 parts (Cody and Waite, as
        ``sin``: ``_PIO2_FMA``, ``_PIO2_NOFMA``) kept as ``rh + rl`` (the rounding error
        of the next-to-last step carried), ``t = rh + (rh z P(z) + rl (1 + z))`` with a
        degree-6 ``P`` on ``|r| <= pi/4``, ``z = rh^2``, and for odd ``q`` ``-1/t``
        refined by a Newton step on the unrounded sum.  ``|x| < 2^-12`` gives
        ``x`` (``+-0`` included).  Where a lane has ``|x|`` above the reduction's limit
        (65536 with FMA, 125 without), inf or NaN, the vector takes a branch that
        computes such lanes in float64 (:meth:`tan_f64_lanes`, 0.5 ulp; libm's ``tanf``
        beyond 2^20)."""
        b, ty, ity, C, I, madd = self._kit(x)
        parts, limit = self._PIO2_FMA if self.policy.has_fma else self._PIO2_NOFMA
        q = b.call(self._fn1("llvm.roundeven", ty), [b.fmul(x, C(0.63661977236758134))])
        # r = rh + rl: the steps before the last two are exact; the next-to-last as
        # r - s (s = q * part rounded, se its exact rounding error, by an FMA; without FMA
        # the parts' trailing zeros make s exact and se 0), whose rounding error e
        # (Knuth's TwoSum, exact) goes to rl with se and the last part
        r = x
        for part in parts[:-2]:
            r = madd(q, C(-part), r)
        s = b.fmul(q, C(parts[-2]))
        se = madd(q, C(parts[-2]), b.fneg(s))
        rh = b.fsub(r, s)
        bb = b.fsub(rh, r)
        e = b.fadd(b.fsub(r, b.fsub(rh, bb)), b.fsub(b.fneg(s), bb))
        rl = madd(q, C(-parts[-1]), b.fsub(e, se))
        z = b.fmul(rh, rh)
        # tan(rh + rl) = rh + c, c = rh z P(z) + rl (1 + z) (tan' = 1 + tan^2)
        c = madd(b.fmul(rh, z), self._horner(self._TAN32_P, z, madd), madd(rl, z, rl))
        t = b.fadd(rh, c)
        # odd q: -1/(rh + c), the quotient y of the rounded t corrected by one Newton step
        # on the unrounded sum: y + y (1 + y rh + y c)
        y = b.fdiv(C(-1.0), t)
        y = madd(y, madd(y, c, madd(y, rh, C(1.0))), y)
        odd = b.icmp_unsigned("!=", b.and_(b.fptosi(q, ity), I(1)), I(0))
        res = b.select(odd, y, t)
        ax = b.call(self._fn1("llvm.fabs", ty), [x])
        res = b.select(b.fcmp_ordered("<", ax, C(2.0 ** -12)), x, res)
        big = b.fcmp_unordered(">", ax, C(limit))
        return self._slow_where(big, "tan.wide", self.tan_f64_lanes, x, res)

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
        """``fast_erfc``: erfc(x) = 1 - erf(x) for float32 in float32 lanes, about twice
        as fast as ``erfc`` (:meth:`erfc_f32`, float64 lanes) at 2.3 ulp against 0.6;
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
