"""Math functions in the LLVM function emitter (:class:`_MathEmitter`, a part of
:class:`~tecomp.codegen.llvm.emitter._FnEmitter`): the ``Call`` node -- LLVM intrinsics
(``sqrt``, ``floor``, ``pow``, ``fma``, ...), libm calls per lane (float64 ``log``,
``tanh`` and ``erf``), and tecomp's own vector code for float32 ``exp`` (also
``fast_exp`` and ``sigmoid``), ``log``, ``erf`` and ``tanh``, with explicit FMA where the target has it
(``policy.has_fma``).  Their accuracy: "Numerics" in the docstring of
:mod:`tecomp.codegen.llvm.emitter`, and docs/numerics.md.
"""
from __future__ import annotations

import llvmlite.ir as ir

from ...errors import BuildError, InternalError
from ...ir import dtype as _dt
from ...ir.expr import SPECIAL_CALLS, Call
from .values import _I32, _REG, Val, _poison, _splat, _unsigned, _with_lanes


class _MathEmitter:
    """The part of :class:`~tecomp.codegen.llvm.emitter._FnEmitter` that emits math functions
    (the state it works on: ``_FnEmitter.__init__``)."""

    # -- intrinsics ----------------------------------------------------------------------
    _LLVM_UNARY = {"log": "llvm.log", "sqrt": "llvm.sqrt",
                   "floor": "llvm.floor", "ceil": "llvm.ceil", "round": "llvm.roundeven",
                   "sin": "llvm.sin", "cos": "llvm.cos", "abs": "llvm.fabs"}
    _LIBM = {"tanh": ("tanhf", "tanh"), "erf": ("erff", "erf")}

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
        if op == "log" and dt != "float64":
            return self.map1(args[0], self.log_f32)
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
                _splat(v.type, 1.0), b.fadd(_splat(v.type, 1.0), self.exp(b.fneg(v)))))
        if op == "erf" and dt != "float64":
            return self.map1(args[0], self.erf_f32)
        if op == "tanh" and dt != "float64":
            return self.map1(args[0], self.tanh_f32)
        if op in self._LIBM:
            return self.libm(self._LIBM[op], args[0], dt)
        raise InternalError(f"unknown intrinsic {op!r}")

    def exp(self, x):
        """exp of a float32 or float64 value (scalar or vector): :meth:`exp_f32` for
        float32 (and float16, which computes in float32), ``llvm.exp`` for float64."""
        el = x.type.element if isinstance(x.type, ir.VectorType) else x.type
        if isinstance(el, ir.DoubleType):
            return self.b.call(self.mb.intrinsic("llvm.exp", x.type, [x.type], [x.type]), [x])
        return self.exp_f32(x)

    def libm(self, names, val: Val, dtype: str) -> Val:
        """Call a libm function; on a vector, once per lane."""
        ty = _REG[dtype]
        fname = names[1] if dtype == "float64" else names[0]
        f = self.mb.declare(fname, ty, [ty])
        b = self.b
        if val.uniform:
            return Val(b.call(f, [val.s]))
        v = self.vec(val)
        out = _poison(v.type)
        for lane in range(self.lanes):
            i = ir.Constant(_I32, lane)
            out = b.insert_element(out, b.call(f, [b.extract_element(v, i)]), i)
        return Val(v=out)

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

    def exp_f32(self, x):
        """exp(x) for float32 (scalar or vector) in plain vector instructions: the
        ``exp``, ``fast_exp`` and ``sigmoid`` of the CPU backend (``llvm.exp`` would
        become one libm ``expf`` call per vector lane).

        Cephes-style: ``x`` is clamped to ``[-104, 89]`` (beyond, the result is 0 or
        inf anyway); ``n = roundeven(x * log2(e))``; ``r = x - n*ln2`` with ``ln2``
        split in two constants (``n * 0.693359375`` and ``x - n * 0.693359375`` are
        exact); ``exp(r) = 1 + r + r^2 * P(r)`` with a degree-5 ``P`` on
        ``|r| <~ ln2/2``; then ``p * 2^n`` rounded once (:meth:`_ldexp`: one
        instruction with AVX-512).  A NaN is passed through by a select.

        Every step is one IEEE operation, never marked ``contract`` (whatever the
        function's ``fp_contract``): the result depends only on ``x``, so vectorized,
        scalar, unrolled and lane-invariant evaluations give bit-identical results.
        Where the target has fused multiply-adds (``policy.has_fma``) the reduction
        and the polynomial use explicit ``llvm.fma`` calls (one rounding each, about
        15% faster), else separate multiplies and adds; both variants were checked on
        *every* float32 input to be within 1 ulp of the correctly rounded exp
        (subnormal results included; docs/numerics.md), and they may differ from each
        other by 1 ulp on some inputs."""
        b, ty, ity, C, I, madd = self._kit(x)
        mn = self.mb.intrinsic("llvm.minnum", ty, [ty, ty], [ty])
        mx = self.mb.intrinsic("llvm.maxnum", ty, [ty, ty], [ty])
        rnd = self.mb.intrinsic("llvm.roundeven", ty, [ty], [ty])
        xc = b.call(mx, [b.call(mn, [x, C(89.0)]), C(-104.0)])
        n = b.call(rnd, [b.fmul(xc, C(1.44269504088896341))])
        r = madd(n, C(-0.693359375), xc)
        r = madd(n, C(2.12194440e-4), r)
        p = C(1.9875691500e-4)
        for c in (1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1,
                  5.0000001201e-1):
            p = madd(p, r, C(c))
        p = b.fadd(madd(b.fmul(p, r), r, r), C(1.0))
        res = self._ldexp(p, n)
        return b.select(b.fcmp_unordered("uno", x, x), x, res)

    def _ldexp(self, p, n):
        """``p * 2**n`` rounded once, for float32 ``p`` in ``[0.5, 2]`` and integral
        ``n`` in ``[-151, 129]`` (as :meth:`exp_f32` makes them): the target's one
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
    #: coefficients of Cephes' logf)
    _LOG_P = (3.3333331174e-1, -2.4999993993e-1, 2.0000714765e-1, -1.6668057665e-1,
              1.4249322787e-1, -1.2420140846e-1, 1.1676998740e-1, -1.1514610310e-1,
              7.0376836292e-2)

    def log_f32(self, x):
        """log(x) for float32 (scalar or vector) in plain vector instructions (``llvm.log``
        becomes one libm ``logf`` call per vector lane).

        ``x = m * 2^e`` with ``m`` in ``[sqrt(1/2), sqrt(2))`` read from the bits (a
        subnormal ``x`` is first scaled by ``2^23``), or with AVX-512's ``vgetmantps``
        and ``vgetexpps`` (``policy.vector_op``; the same ``m`` and ``e``); ``f = m - 1``;
        ``log(x) = e*ln2 + f - f^2/2 + f^3 P(f)`` with a degree-8 ``P`` and ``ln2`` in two
        parts (``e * 0.693359375`` is exact).  Never contracted: the same bits under every
        schedule; measured on every float32 input against float64 log: docs/numerics.md.
        ``log(0) = -inf``, ``log(x < 0) = NaN``, ``log(inf) = inf``, NaN stays NaN."""
        b, ty, ity, C, I, madd = self._kit(x)
        getmant = self.policy.vector_op("getmant", ty)
        getexp = self.policy.vector_op("getexp", ty)
        if getmant is not None and getexp is not None:
            # m in [1, 2) and floor(log2 x), subnormals included, in one instruction each;
            # m >= sqrt(2): m/2 - 1 and one more in the exponent, else m - 1 (the same f
            # and exponent as below, so the same bits)
            m = getmant(b, self.mb, x)
            e = getexp(b, self.mb, x)
            high = b.fcmp_ordered(">=", m, C(2 * 0.70710677))
            f = b.fsub(b.select(high, b.fmul(m, C(0.5)), m), C(1.0))
            ef = b.select(high, b.fadd(e, C(1.0)), e)
        else:
            # subnormals: scaled into the normal range first, their exponent corrected
            tiny = b.fcmp_ordered("<", x, C(1.1754943508222875e-38))
            xs = b.select(tiny, b.fmul(x, C(8388608.0)), x)
            bits = b.bitcast(xs, ity)
            e = b.sub(b.lshr(bits, I(23)), b.select(tiny, I(126 + 23), I(126)))
            # m in [0.5, 1): the bits of x with the exponent of 0.5
            m = b.bitcast(b.or_(b.and_(bits, I(0x007FFFFF)), I(0x3F000000)), ty)
            # m < sqrt(1/2): 2m - 1 and one less in the exponent, else m - 1
            low = b.fcmp_ordered("<", m, C(0.707106781186547524))
            f = b.fsub(b.select(low, b.fadd(m, m), m), C(1.0))
            ef = b.sitofp(b.select(low, b.sub(e, I(1)), e), ty)
        z = b.fmul(f, f)
        y = b.fmul(b.fmul(self._horner(self._LOG_P, f, madd), f), z)
        y = madd(ef, C(-2.12194440e-4), y)
        y = madd(z, C(-0.5), y)
        res = madd(ef, C(0.693359375), b.fadd(f, y))
        # specials: +inf, 0 (either sign), negative numbers, NaN
        res = b.select(b.fcmp_ordered("==", x, C(float("inf"))), x, res)
        res = b.select(b.fcmp_ordered("==", x, C(0.0)), C(float("-inf")), res)
        # (getmant gives a NaN for x < 0 too, but one with the sign bit set: the select
        # makes it the NaN of the code without getmant, so every schedule gives the same
        # bits)
        return b.select(b.fcmp_unordered("<", x, C(0.0)), C(float("nan")), res)

    #: tanh(x) = x + x * z * P(z), z = x^2, for |x| < 0.625 (the coefficients of Cephes'
    #: tanhf, a minimax fit on that interval)
    _TANH_P = (-3.33332819422e-1, 1.33314422036e-1, -5.37397155531e-2, 2.06390887954e-2,
               -5.70498872745e-3)

    def tanh_f32(self, x):
        """tanh(x) for float32 (scalar or vector) in plain vector instructions (libm's
        ``tanhf`` is one call per lane: a GELU written with ``tc.tanh`` ran at a tenth of
        PyTorch's speed).

        Both branches are computed and one is selected per lane.  ``|x| < 0.625``:
        ``x + x*z*P(z)`` with ``z = x*x`` and a degree-4 ``P``.  Beyond:
        ``1 - 2 / (exp(2|x|) + 1)`` with :meth:`exp_f32` (``exp`` overflows to inf from
        ``|x| ~ 44``, and the result is then exactly 1), then the sign of ``x``.  As
        :meth:`exp_f32`, no step is ever contracted, so every schedule gives the same
        bits; measured on every float32 input against float64 tanh: docs/numerics.md.
        NaN stays NaN, ``tanh(+-inf) = +-1``, ``tanh(-0.0) = -0.0``."""
        b, ty, _, C, _, madd = self._kit(x)
        ax = b.call(self._fn1("llvm.fabs", ty), [x])
        z = b.fmul(x, x)
        small = madd(b.fmul(x, z), self._horner(self._TANH_P, z, madd), x)
        e = self.exp_f32(b.fadd(ax, ax))
        large = b.fsub(C(1.0), b.fdiv(C(2.0), b.fadd(e, C(1.0))))
        # tanh is odd: the sign of x (also makes tanh(-0.0) = -0.0, which the polynomial
        # loses: -0 * z * P(z) is +0).  A NaN takes the second branch (the comparison is
        # false) and stays NaN through exp_f32, the division and copysign
        return b.call(self._fn1("llvm.copysign", ty, 2),
                      [b.select(b.fcmp_ordered("<", ax, C(0.625)), small, large), x])

    #: erf(x) = x * (c0 + z * P(z)), z = x^2, for |x| < 1 (c0 = 2/sqrt(pi) split in two)
    _ERF_C0 = (1.128379225730896, -5.8635382771399236e-08)

    _ERF_P = (-0.3761262595653534, 0.1128358542919159, -0.02685382030904293,
              0.005188341718167067, -0.0008010306628420949, 7.854205614421517e-05)

    #: erfc(a) = exp(-a^2) * u * Q(u), u = 1/a, for 1 <= a <= 4
    _ERF_Q = (0.5642389059066772, -0.001535734161734581, -0.26221171021461487,
              -0.1433429718017578, 1.0590153932571411, -1.7567129135131836,
              1.6511608362197876, -0.9528770446777344, 0.31634604930877686,
              -0.04649728909134865)

    def erf_f32(self, x):
        """erf(x) for float32 (scalar or vector) in plain vector instructions (libm's
        ``erff`` would be one call per lane, where GELU spent about half its time)
        (measurements: benchmarks/DECISIONS.md, "Code generator: erf in vector instructions").

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
        e = self.exp_f32(b.fneg(b.fmul(a, a)))
        large = madd(b.fneg(b.fmul(e, u)), q, C(1.0))
        # erf is odd: the sign of x (also makes erf(-0.0) = -0.0)
        res = b.call(self._fn1("llvm.copysign", ty, 2),
                     [b.select(b.fcmp_ordered("<", ax, C(1.0)), small, large), x])
        return b.select(b.fcmp_unordered("uno", x, x), x, res)
