"""Math functions in plain TE: a tanh-GELU epilogue and each unary function alone, auto-scheduled, against PyTorch.

``out = gelu_tanh(x + b) * y`` on 2048 x 4096 float32 (``gelu_tanh(v) = 0.5 v (1 +
tanh(sqrt(2/pi) (v + 0.044715 v^3)))``, PyTorch's ``gelu(approximate="tanh")``), and
``f(x)`` on the same size for f in exp, tanh, log, erf, sigmoid, exp2, expm1, log1p, log2,
softplus, sin, cos, tan, atan, erfc and cbrt (PyTorch has no cbrt: its ``pow(x, 1/3)`` on
positive ``x``), the looser ``fast_erfc`` and ``fast_log`` (against the same peers),
``atan2(x, y)`` and ``pow(|y|, x)`` (and a copy, ``x + 0``: the memory
floor), each written as one
compute and scheduled by ``tc.auto_schedule(args)`` (trials=0), against PyTorch's eager
ops on the same arrays (as written, each op allocating its result, and with every result
preallocated through the ``out=`` variants: PyTorch at its best here, torch.compile's
Inductor kernels also allocate theirs), interleaved, medians in ms (PyTorch's time over
tecomp's: > 1 means tecomp is faster).  Every result is checked against a float64
reference first.  Where gcc and SLEEF (``libsleef-dev``) are installed, SLEEF's 1.0-ulp
and 3.5-ulp vector functions of the host's widest vector (``Sleef_expf16_u10`` ... with
AVX-512; erfc's 1.5-ulp ``_u15``; benchmarks/sleef.py) are a third column for exp, tanh,
erf, log, erfc, tan, sin and cos; ``--ulps`` adds each tool's max ulp error for those
eight; ``--rows 4096`` makes the arrays 16M floats;
``--softplus-ab`` also times softplus built without its per-segment ``log1p``
(``tecomp.codegen.llvm.emit_math.SOFTPLUS_SEGMENTS`` off) in the same turns;
``--math20-ab`` also times the functions of session 20's changes (softplus without its
direct segments, ``SOFTPLUS_DIRECT`` off) built as before them, in the same turns (a
column ``tecomp NAME_s19`` in the function's row; its ratio: the old code's time over the
new's); ``--math21-ab`` the same for session 21's (erfc in float64 lanes,
``emit_math_f32.ERFC_SEGMENTS`` off; sin, cos and tan with ``roundeven`` for their quadrant,
``emit_math.QUADRANT_MAGIC`` off, and sin and cos reduced by pi/2 with two polynomials,
``SINCOS_BY_PI`` off; the column ``tecomp NAME_s20``); ``--math23-ab`` for session 23's
(pow in float64 lanes, ``emit_math_f32.POW_F32_LANES`` off; ``tecomp pow_s22``); ``--math24-ab``
for session 24's (cbrt in float64 lanes, ``emit_math_f32.CBRT_F32_LANES`` off; atan2 with
``llvm.maxnum``/``minnum``, ``emit_math_wide.ATAN2_SELECTS`` off; ``tecomp cbrt_s23``,
``tecomp atan2_s23``); ``--math25-ab`` for session 25's (atan2 with every step in float64
lanes and the degree-6 polynomial, ``emit_math_wide.ATAN2_NARROW`` off; pow with its
clamp of ``w`` on every lane, ``emit_math_f32.POW_LARGE_W_BRANCH`` off; ``tecomp
atan2_s24``, ``tecomp pow_s24``); ``--math26-ab`` for session 26's (pow by a base-2
logarithm and tables of 16, ``emit_math_f32.POW_TABLE32`` and ``POW_LN16`` off; ``tecomp
pow_s25``); ``--math27-ab`` for session 27's (softplus's segments with
their two-part ``C`` and slope, ``emit_math.SOFTPLUS_SHORT_SEGMENTS`` off; ``tecomp softplus_s26``);
``--math28-ab`` for session 28's (cbrt's exponent by bits and integer additions,
``emit_math_f32.CBRT_SCALEF`` off; log1p by a division with its special values selected
on every lane, ``emit_math.LOG1P_EXACT_ARG`` off; expm1 with its rare cases selected on
every lane, ``emit_math.EXPM1_BRANCH`` off; ``tecomp cbrt_s27``, ``tecomp log1p_s27``,
``tecomp expm1_s27``); ``--math29-ab`` for session 29's (log, log2 and log1p without
their table of 16, ``emit_math.LOG_TABLE`` off; ``tecomp log_s28`` ...); ``--math30-ab``
for session 30's (exp, sigmoid and softplus with exp's degree-5 polynomial,
``emit_math.EXP_SHORT_POLY`` off, sigmoid with ``x`` negated first, ``EXP_NEG_FOLDED``
off; expm1 with two scalings and a select of tiny ``x``,
``EXPM1_FMA_SIGN`` off; ``tecomp exp_s29`` ...); ``--math31-ab`` for session 31's (tan
with Knuth's TwoSum on every lane, ``emit_math_f32.TAN_FMA_RESIDUAL`` off; ``tecomp
tan_s30``);
``--cpu-time``
(with ``--threads 1``) times each call by the process's CPU time (a shared machine).

    python3 benchmarks/elementwise_math.py [--threads 2] [--rounds 15] [--only gelu,tanh]
                                           [--rows 4096] [--ulps] [--softplus-ab]
                                           [--math20-ab] [--math21-ab] [--math23-ab]
                                           [--math24-ab] [--math25-ab] [--math26-ab]
                                           [--math27-ab] [--math28-ab] [--math29-ab]
                                           [--math30-ab] [--math31-ab]
                                           [--cpu-time]
"""
from __future__ import annotations

import math
import platform

from common import (add_cpu_time, base_parser, clock_of, interleaved_turns, pin_threads,
                    torch_or_none)

#: session 20's A/B switches (``--math20-ab``): the function, and the module of
#: ``tecomp.codegen.llvm`` and its flags that turn its changes off (the old build's
#: assembly must differ: the check that it is not a cached one)
MATH20 = {"softplus": ("emit_math", ("SOFTPLUS_DIRECT",))}
#: session 21's (``--math21-ab``), the same way
MATH21 = {"erfc": ("emit_math_f32", ("ERFC_SEGMENTS",)),
          "sin": ("emit_math", ("QUADRANT_MAGIC", "SINCOS_BY_PI")),
          "cos": ("emit_math", ("QUADRANT_MAGIC", "SINCOS_BY_PI")),
          "tan": ("emit_math", ("QUADRANT_MAGIC",))}
#: session 23's (``--math23-ab``)
MATH23 = {"pow": ("emit_math_f32", ("POW_F32_LANES",))}
#: session 24's (``--math24-ab``)
MATH24 = {"cbrt": ("emit_math_f32", ("CBRT_F32_LANES",)),
          "atan2": ("emit_math_wide", ("ATAN2_SELECTS",))}
#: session 25's (``--math25-ab``)
MATH25 = {"atan2": ("emit_math_wide", ("ATAN2_NARROW",)),
          "pow": ("emit_math_f32", ("POW_LARGE_W_BRANCH",))}
#: session 26's (``--math26-ab``)
MATH26 = {"pow": ("emit_math_f32", ("POW_TABLE32", "POW_LN16"))}
#: session 27's (``--math27-ab``)
MATH27 = {"softplus": ("emit_math", ("SOFTPLUS_SHORT_SEGMENTS",))}
#: session 28's (``--math28-ab``)
MATH28 = {"cbrt": ("emit_math_f32", ("CBRT_SCALEF",)),
          "log1p": ("emit_math", ("LOG1P_EXACT_ARG",)),
          "expm1": ("emit_math", ("EXPM1_BRANCH",))}
#: session 29's (``--math29-ab``)
MATH29 = {fn: ("emit_math", ("LOG_TABLE",)) for fn in ("log", "log2", "log1p")}
#: session 30's (``--math30-ab``)
MATH30 = {"exp": ("emit_math", ("EXP_SHORT_POLY",)),
          "sigmoid": ("emit_math", ("EXP_SHORT_POLY", "EXP_NEG_FOLDED")),
          "softplus": ("emit_math", ("EXP_SHORT_POLY",)),
          "expm1": ("emit_math", ("EXPM1_FMA_SIGN",))}
#: session 31's (``--math31-ab``)
MATH31 = {"tan": ("emit_math_f32", ("TAN_FMA_RESIDUAL",))}
#: each session's switches, the tag of its A/B column and its flag's name
AB = ((MATH20, "s19", "math20_ab"), (MATH21, "s20", "math21_ab"), (MATH23, "s22", "math23_ab"),
      (MATH24, "s23", "math24_ab"), (MATH25, "s24", "math25_ab"),
      (MATH26, "s25", "math26_ab"), (MATH27, "s26", "math27_ab"), (MATH28, "s27", "math28_ab"),
      (MATH29, "s28", "math29_ab"), (MATH30, "s29", "math30_ab"),
      (MATH31, "s30", "math31_ab"))


def main() -> None:
    ap = base_parser(__doc__, rounds=15)
    ap.add_argument("--only", default="", help="comma-separated functions to time (and "
                    "the copy), e.g. tan,atan2 or gelu,tanh; all by default")
    ap.add_argument("--rows", type=int, default=2048, help="the arrays' rows (4096: 16M floats)")
    ap.add_argument("--ulps", action="store_true", help="also the max ulp error of tecomp, "
                    "SLEEF and PyTorch for exp, tanh, erf, log, erfc, tan, sin and cos, over float32 bit patterns "
                    "spread evenly over all 2^32, one per array element")
    ap.add_argument("--softplus-ab", action="store_true", help="also time softplus with "
                    "its log1p in one polynomial (SOFTPLUS_SEGMENTS off), in the same turns")
    for ab, _, opt in AB:
        n = opt[4:6]
        ap.add_argument("--" + opt.replace("_", "-"), action="store_true", help="also time "
                        + ", ".join(ab) + f" built without session {n}'s changes (their "
                        "flags off), in the same turns")
    add_cpu_time(ap)
    args = ap.parse_args()
    clock = clock_of(ap, args)
    pin_threads(args.threads)
    import numpy as np

    import tecomp as tc

    torch = torch_or_none(args.threads)
    M, N = args.rows, 4096
    rng = np.random.default_rng(0)
    x = tc.aligned(rng.standard_normal((M, N)).astype("float32"))
    y = tc.aligned(rng.standard_normal((M, N)).astype("float32"))
    bias = tc.aligned(rng.standard_normal(N).astype("float32"))
    out = tc.empty((M, N), "float32")

    X = tc.placeholder((M, N), name="x")
    Y = tc.placeholder((M, N), name="y")
    Bv = tc.placeholder((N,), name="b")
    c = math.sqrt(2.0 / math.pi)

    def gelu_tanh(v):
        return 0.5 * v * (1.0 + tc.tanh(c * (v + 0.044715 * v * v * v)))

    G = tc.compute((M, N), lambda i, j: gelu_tanh(X[i, j] + Bv[j]) * Y[i, j], name="out")
    gelu_args = [X, Bv, Y, G]
    f_gelu = tc.build(tc.auto_schedule(gelu_args), gelu_args)
    pos = tc.aligned(np.abs(y) + np.float32(1e-3))   # the logarithms' input: positive

    v64 = x.astype(np.float64) + bias
    want_gelu = 0.5 * v64 * (1 + np.tanh(c * (v64 + 0.044715 * v64 ** 3))) * y
    f_gelu(x, bias, y, out)
    np.testing.assert_allclose(out, want_gelu, rtol=1e-5, atol=1e-5)

    # name: (tecomp's function, float64 reference, torch's out= function, input)
    from scipy.special import erf as erf64
    from scipy.special import erfc as erfc64
    unary = {
        "copy": (lambda v: v + 0.0, lambda v: v, "copy", x),
        "exp": (tc.exp, np.exp, "exp", x), "tanh": (tc.tanh, np.tanh, "tanh", x),
        "log": (tc.log, np.log, "log", pos), "erf": (tc.erf, erf64, "erf", x),
        "sigmoid": (tc.sigmoid, lambda v: 1 / (1 + np.exp(-v)), "sigmoid", x),
        "exp2": (tc.exp2, np.exp2, "exp2", x), "expm1": (tc.expm1, np.expm1, "expm1", x),
        "log1p": (tc.log1p, np.log1p, "log1p", pos), "log2": (tc.log2, np.log2, "log2", pos),
        "softplus": (tc.softplus, lambda v: np.logaddexp(0, v), "softplus", x),
        "sin": (tc.sin, np.sin, "sin", x), "cos": (tc.cos, np.cos, "cos", x),
        "tan": (tc.tan, np.tan, "tan", x), "atan": (tc.atan, np.arctan, "atan", x),
        "erfc": (tc.erfc, erfc64, "erfc", x), "cbrt": (tc.cbrt, np.cbrt, "cbrt", pos),
        "fast_erfc": (tc.fast_erfc, erfc64, "erfc", x),
        "fast_log": (tc.fast_log, np.log, "log", pos),
    }
    # name: (tecomp's function, float64 reference, torch's out= function, inputs)
    binary = {"atan2": (tc.atan2, np.arctan2, "atan2", (x, y)),
              "pow": (tc.pow, np.power, "pow", (pos, x))}
    keep = set(args.only.split(",")) | {"copy"} if args.only else None
    gelu = keep is None or "gelu" in keep
    if keep is not None:
        unary = {k: v for k, v in unary.items() if k in keep}
        binary = {k: v for k, v in binary.items() if k in keep}
    fns = {"tecomp gelu": lambda: f_gelu(x, bias, y, out)} if gelu else {}
    built = {}
    for name, (fn, ref, _, a) in unary.items():
        T = tc.compute((M, N), (lambda fn: lambda i, j: fn(X[i, j]))(fn), name=name)
        f = built[name] = tc.build(tc.auto_schedule([X, T]), [X, T])
        f(a, out)
        np.testing.assert_allclose(out, ref(a.astype(np.float64)), rtol=3e-6, atol=1e-7)
        fns["tecomp " + name] = lambda f=f, a=a: f(a, out)
        if name == "softplus" and args.softplus_ab:
            from tecomp.codegen.llvm import emit_math
            emit_math.SOFTPLUS_SEGMENTS = False
            try:
                f_off = tc.build(tc.auto_schedule([X, T]), [X, T])
            finally:
                emit_math.SOFTPLUS_SEGMENTS = True
            assert "vpermps" not in f_off.get_source("asm"), "the A/B build was cached"
            f_off(a, out)
            np.testing.assert_allclose(out, ref(a.astype(np.float64)), rtol=3e-6, atol=1e-7)
            fns["tecomp softplus_off"] = lambda f=f_off, a=a: f(a, out)
        _ab_builds(np, tc, args, name, [X, T], f, (a,), ref, out, fns)
    for name, (fn, ref, _, (a, c)) in binary.items():
        T = tc.compute((M, N), (lambda fn: lambda i, j: fn(X[i, j], Y[i, j]))(fn), name=name)
        f = tc.build(tc.auto_schedule([X, Y, T]), [X, Y, T])
        f(a, c, out)
        np.testing.assert_allclose(out, ref(a.astype(np.float64), c), rtol=3e-6, atol=1e-7)
        fns["tecomp " + name] = lambda f=f, a=a, c=c: f(a, c, out)
        _ab_builds(np, tc, args, name, [X, Y, T], f, (a, c), ref, out, fns)
    if torch is not None:
        tx, ty, tb = (torch.from_numpy(a) for a in (x, y, bias))
        to = torch.from_numpy(out)
        F = torch.nn.functional
        got = (F.gelu(tx + tb, approximate="tanh") * ty).numpy()
        np.testing.assert_allclose(got, want_gelu, rtol=1e-5, atol=1e-5)

        t1 = torch.empty_like(tx)

        def torch_gelu():     # as it is written: each op allocates its result
            F.gelu(tx + tb, approximate="tanh").mul_(ty)

        def torch_gelu_out():  # PyTorch at its best here: every result preallocated
            torch.add(tx, tb, out=t1)
            torch.ops.aten.gelu.out(t1, approximate="tanh", out=t1)
            torch.mul(t1, ty, out=to)

        if gelu:
            fns["torch gelu"] = torch_gelu
            fns["torch gelu, out="] = torch_gelu_out
        for name, (_, _, tname, a) in unary.items():
            ta = torch.from_numpy(a)
            if tname == "copy":
                fns["torch copy, out="] = lambda ta=ta: to.copy_(ta)
            elif tname == "cbrt":
                fns["torch cbrt, out="] = lambda ta=ta: torch.pow(ta, 1.0 / 3.0, out=to)
            elif tname == "softplus":
                fns["torch softplus, out="] = lambda ta=ta: torch.ops.aten.softplus.out(
                    ta, 1, 20, out=to)
            else:
                fns[f"torch {tname}, out="] = lambda ta=ta, g=getattr(torch, tname): g(ta, out=to)
        for name, (_, _, tname, (a, c)) in binary.items():
            ta, tc_ = torch.from_numpy(a), torch.from_numpy(c)
            fns[f"torch {tname}, out="] = lambda ta=ta, tc_=tc_, g=getattr(torch, tname): g(
                ta, tc_, out=to)
    import sleef

    lib, why = sleef.load(args.threads)
    sleef_fns = {}      # name: [(label, SLEEF's name in the driver)]
    if lib is None:
        print(f"no SLEEF column: {why}")
    else:
        for sname, base, _ in sleef.FUNCTIONS:
            if base in unary:
                a = unary[base][3]
                lib.map(sname, a, out)
                np.testing.assert_allclose(out, unary[base][1](a.astype(np.float64)),
                                           rtol=3e-6, atol=1e-7)
                label = "sleef " + lib.label(sname)
                fns[label] = lambda sname=sname, a=a: lib.map(sname, a, out)
                sleef_fns.setdefault(base, []).append((label, sname))
    t = interleaved_turns(fns, args.rounds, **clock)
    print(f"{platform.processor() or platform.machine()}, {args.threads} threads, "
          f"{args.rounds} rounds, {M}x{N} float32 (ratio: the peer's time over tecomp's; "
          f"Gelem/s: elements per second)")
    rows = [("gelu", ("torch gelu", "torch gelu, out="))] + [
        (name, (f"torch {name.removeprefix('fast_')}, out=",)
         + tuple(lb for lb, _ in sleef_fns.get(name.removeprefix("fast_"), ())))
        for name in list(unary) + list(binary)]
    if "tecomp softplus_off" in t:
        rows.append(("softplus_off", ("tecomp softplus",)))
    rows = [(op, peers + tuple(f"tecomp {op}_{tag}" for _, tag, _ in AB
                               if f"tecomp {op}_{tag}" in t))
            for op, peers in rows]
    for op, peers in rows:
        if "tecomp " + op not in t:
            continue
        mine = t["tecomp " + op]
        line = f"  {op:9s} tecomp {mine * 1e3:7.2f} ms {M * N / mine / 1e9:5.2f} Gelem/s"
        for peer in peers:
            if peer in t:
                line += (f" | {peer} {t[peer] * 1e3:7.2f} ms {M * N / t[peer] / 1e9:5.2f} "
                         f"Gelem/s, ratio {t[peer] / mine:.2f}x")
        print(line)
    if args.ulps:
        _ulp_table(np, torch, built, unary, lib, sleef_fns, out)


def _ab_builds(np, tc, args, name, tensors, f, inputs, ref, out, fns):
    """For each session's A/B switch that is on (``--math2N-ab``) and covers ``name``: the
    function built with that session's flags off (``tecomp NAME_<tag>``, timed in the
    same turns), checked against the float64 reference."""
    import importlib
    for ab, tag, opt in AB:
        if name not in ab or not getattr(args, opt):
            continue
        mod, flags = ab[name]
        mod = importlib.import_module(f"tecomp.codegen.llvm.{mod}")
        for flag in flags:
            setattr(mod, flag, False)
        try:
            f_old = tc.build(tc.auto_schedule(tensors), tensors)
        finally:
            for flag in flags:
                setattr(mod, flag, True)
        assert f_old.get_source("asm") != f.get_source("asm"), "the A/B build was cached"
        f_old(*inputs, out)
        np.testing.assert_allclose(out, ref(*(v.astype(np.float64) for v in inputs)),
                                   rtol=3e-6, atol=1e-7)
        fns[f"tecomp {name}_{tag}"] = lambda f=f_old, v=inputs: f(*v, out)


def _ulp_error(np, got, want):
    """(max ulp error over the inputs whose float32 result is finite, number of inputs whose
    special result -- NaN, an infinity, an overflow -- differs)."""
    with np.errstate(all="ignore"):
        want32 = want.astype(np.float32)
        special = ~np.isfinite(want32)
        ulp = np.ldexp(1.0, np.maximum(np.frexp(want)[1] - 24, -149))
        err = np.abs(got.astype(np.float64) - want) / ulp
    ok = ~special & np.isfinite(got)
    bad = (special & ~((got == want32) | (np.isnan(got) & np.isnan(want32)))) | (
        ~special & ~np.isfinite(got))
    return float(err[ok].max()), int(bad.sum())


def _ulp_table(np, torch, built, unary, lib, sleef_fns, out):
    """Each tool's max ulp error on float32 bit patterns evenly spread over all 2^32 (every
    ``step``-th, ``step`` odd), against the float64 reference."""
    step = (2 ** 32 // out.size) | 1
    bits = (np.arange(out.size, dtype=np.uint64) * step % 2 ** 32).astype(np.uint32)
    sample = bits.view(np.float32).reshape(out.shape)
    print(f"max ulp error over {out.size} float32 inputs (bit patterns i*{step} mod 2^32; "
          "'n special' counts inputs whose NaN/inf/overflow result differs)")
    for name in ("exp", "tanh", "erf", "log", "erfc", "tan", "sin", "cos"):
        if name not in built:
            continue
        with np.errstate(all="ignore"):
            want = unary[name][1](sample.astype(np.float64))
        cols = []
        built[name](sample, out)
        cols.append(("tecomp", _ulp_error(np, out, want)))
        for label, sname in sleef_fns.get(name, ()):
            lib.map(sname, sample, out)
            cols.append((label.split()[1], _ulp_error(np, out, want)))
        if torch is not None:
            getattr(torch, name)(torch.from_numpy(sample), out=torch.from_numpy(out))
            cols.append(("torch", _ulp_error(np, out, want)))
        print(f"  {name:5s} " + " | ".join(f"{k} {e:.3f} ulp ({n} special)"
                                           for k, (e, n) in cols))


if __name__ == "__main__":
    main()
