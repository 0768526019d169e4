"""The fuzzer's ``store_root`` family: a stage computed inside a consumer's loop nest
(``compute_at``) into its whole buffer at the root (``store_root``), read by another
stage after that nest.

Each case is drawn from its own random stream (``RandomDraw(seed * 7907 + 29)``), so the
family changes no other family's draws.  The program is a channel statistic of an input
``X`` (rank 2 or 3, the channel at any position, sometimes a symbolic number ``n`` of
channels, from a stream of its own):

* ``S[c]``, a reduction of ``X`` over its other axes (``sum`` or ``max``), or a
  multi-output reduction ``S, Q`` (the sum and the sum of squares in one pass);
* sometimes ``T[c] = S[c] * 2 + 1``, a second ``store_root`` stage at the same loop;
* ``D``, an output (or an intermediate computed at the loop of the output ``E = D * 2``)
  that reads ``S`` (and ``Q``, ``T``) per channel: ``S[c]``, ``S[C - 1 - c]``,
  ``S[c] + S[min(c + 1, C - 1)]`` (regions that overlap) or ``S[b + c]`` (``b`` another
  axis: a sliding window);
* ``G``, read after ``D``'s nest: an output ``G[c] = 2 S[c] (+ Q[c] + T[c])``, a sum of all
  of ``S``, or an intermediate read by an output ``H = G + 1`` (``G`` at the root or
  computed at ``H``'s loop).

The schedule of ``D``'s nest (or ``E``'s): its channel axis split or not, the loops
reordered (channel first, as declared, or another axis first), ``S`` (and ``T``; sometimes
the partial results of ``rfactor`` of ``S``'s split reduction) computed at one of its
loops with ``store_root``, and where that is legal a ``parallel`` loop (the channel loop
above the one ``S`` is computed at, or a loop inside it), a vectorized innermost loop, an
unrolled reduction; the outputs in either order.  A legal case must compute what numpy
computes (the interpreter and the LLVM build of the lowered function alike).

Two cases in five are illegal, each in one way that docs/schedule.md documents; lowering
(or the schedule call) must raise :class:`~tecomp.errors.ScheduleError` with the
documented message, never compute a wrong value or crash:

=================  ===========================================================================
``local``          ``S`` in ``local`` scope
``align_bounds``   ``S`` with ``align_bounds``
``gpu``            ``S`` computed inside a loop bound to ``blockIdx.x``
``overlap``        ``S`` computed at the channel loop under a ``parallel`` loop over another axis
``window``         ``S[b + c]`` under a ``parallel`` loop: consecutive iterations' windows overlap
``cycle``          ``D`` also reads ``G``, which reads ``S`` after ``D``'s nest
``no_reader``      ``S`` computed at the loop of ``H``, which reads ``G`` (at the root), not ``S``
``output``         ``store_root`` of an output
``forgot``         ``compute_at`` without ``store_root`` while ``G`` reads ``S`` outside the nest
``partial``        ``D`` covers fewer channels than ``S`` has, and ``G`` reads all of ``S``
=================  ===========================================================================

A case's outcome is ``ok``, ``refused`` (an illegal case refused as documented),
``rejected`` (a resource limit), ``mismatch`` (a wrong value; or an illegal schedule
accepted) or ``crash`` (any other exception, or the wrong one).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

import tecomp as tc
from ..ir import interp as _interp
from .diff import Outcome, _cross, _exc_text, call_built, compare
from .draw import RandomDraw
from .pass_check import check_passes as _check_passes

FAMILY = "store_root"

#: the ways a case is illegal, and the start of the error each must raise (a regex)
ILLEGAL = {
    "local": r"store_root on stage [ST]: its scope is local",
    "align_bounds": r"store_root on stage S: align_bounds computes past",
    "gpu": r"store_root on stage [ST]: it is computed inside a GPU kernel",
    "overlap": r"store_root on stage [ST]: iterations of the parallel loop [\w.]+ may compute "
               r"overlapping parts of [ST]",
    "window": r"store_root on stage [ST]: iterations of the parallel loop [\w.]+ may compute "
              r"overlapping parts of [ST]",
    "cycle": r"store_root: the loop nests of .+ cannot be ordered",
    "no_reader": r"compute_at of ([ST]) at H\.[\w.]+ with store_root: no stage inside that "
                 r"loop reads \1",
    "output": r"store_root on stage [DE]: it is an output",
    "forgot": r"compute_at of S at [DE]\.[\w.]+: its consumer [GT] is not computed inside "
              r"that loop",
    "partial": r"store_root on stage [ST]: the loop nest of [DE] computes [ST]\[\d+:\d+\] "
               r"but [GH] reads [ST]\[\d+:\d+\] after it",
}


@dataclass
class StoreRootCase:
    """One case of the family: the drawn spec (``spec``), its Python source
    (:meth:`program_source`: the program and the schedule, which the runner executes as
    it is) and the seed of its data."""

    spec: dict
    seed: int = 0                 # the seed of the input data
    target: str = "llvm"
    name: str = ""
    fuzz_seed: int = 0
    family: str = FAMILY
    n: int = 0                    # the value of n, where the channel count is symbolic
    twist: dict = field(default_factory=dict)

    @property
    def variant(self) -> str:
        return self.spec["variant"]

    def program_source(self) -> str:
        """Python that builds the program and its schedule: ``s``, ``args``."""
        return _source(self.spec)

    def source(self) -> str:
        """A standalone reproducer: the program, the schedule, a build and a call compared
        with the interpreter (an illegal case: the call that must raise)."""
        sp = self.spec
        head = [f"# store_root family, variant {sp['variant']!r}"
                + (f": must raise ScheduleError matching {ILLEGAL[sp['variant']]!r}"
                   if sp["variant"] != "legal" else ""),
                f"# replay: python -m tecomp.testing.fuzz --replay {self.fuzz_seed} "
                "--store-root-every 1 --edge-every 0 --gpu-every 0",
                "import numpy as np", "import tecomp as tc", "from tecomp.ir import interp", ""]
        body = self.program_source().splitlines()
        C = sp["ext"][sp["cpos"]]
        # (a symbolic channel count: n is the last argument, C its value)
        outs, call = ("args[1:-1]", f"*got, {C}") if sp["sym"] else ("args[1:]", "*got")
        tail = ["print(tc.lower(s, args))",
                f'f = tc.build(s, args, target="{self.target}")',
                f"rng = np.random.default_rng({self.seed})",
                f"x = {_input_src(sp)}",
                f"got = [x] + [np.zeros([int(e.value) if hasattr(e, 'value') else {C} "
                f"for e in t.shape], t.dtype) for t in {outs}]",
                "want = [x] + [np.zeros_like(a) for a in got[1:]]",
                f"f({call})",
                f"interp.run(tc.lower(s, args), {call.replace('got', 'want')})  "
                "# the reference interpreter",
                "for g, w in zip(got[1:], want[1:]):",
                "    print(np.max(np.abs(g.astype('float64') - w), initial=0))"]
        return "\n".join(head + body + tail)


def draw_store_root_case(seed: int, target: str = "llvm") -> StoreRootCase:
    """Case ``seed`` of the family (its own random stream: see the module doc)."""
    d = RandomDraw(seed * 7907 + 29)
    variant = "legal" if d.bool(0.6) else d.choice(tuple(ILLEGAL))
    sp = _draw_spec(d, variant)
    # a symbolic channel count n (its own stream: the draws above stay as they were), where
    # D covers every channel, no vectorized loop runs over them and the channel loop is
    # not split (with n channels split by a factor, lowering proves what the iterations
    # compute only in simple cases, and refuses the others as documented)
    C = sp["ext"][sp["cpos"]]
    sp["sym"] = (RandomDraw(seed * 7907 + 30).bool(0.3) and sp["cd"] == C
                 and not sp["split"] and not (sp["vectorize"] and sp["loops"][-1] == "c"))
    return StoreRootCase(sp, d.int(0, 2**16), target, f"fuzz seed {seed} (store_root: "
                         f"{variant})", fuzz_seed=seed, n=C if sp["sym"] else 0,
                         twist={"variant": variant})


# ---------------------------------------------------------------------------------
# drawing


def _draw_spec(d, variant: str) -> dict:
    rank = d.choice((2, 3))
    cpos = d.int(0, rank - 1)
    ext = [d.choice((1, 2, 3, 4, 7)) for _ in range(rank)]
    ext[cpos] = d.choice((1, 2, 3, 5, 8, 9, 16))
    bpos = next(k for k in range(rank) if k != cpos)
    sp = {"variant": variant, "rank": rank, "cpos": cpos, "bpos": bpos,
          "dtype": d.choice(("float32", "float32", "float64", "int32")),
          "red": d.choice(("sum", "sum", "max", "pair")),
          "imap": d.choice(("id", "id", "rev", "pair", "window")),
          "chain": d.bool(0.3),
          "outside": d.choice(("map", "map", "total", "via", "at")),
          "nest": d.choice(("plain", "plain", "under")),
          "order": d.choice(("c_first", "c_first", "natural", "b_first")),
          "split": d.choice((None, None, 2, 3, 4, 8)),
          "ci_inner": d.bool(0.3),
          "rfactor": d.choice((None, None, 2, 3, 4)),
          "rf_at": d.bool(0.5),
          "unroll": d.bool(0.3),
          "g_parallel": d.bool(0.3),
          "outputs_first": d.choice(("M", "G")),
          "align": d.choice((2, 4, 8))}
    # the illegal variants need their shape
    if variant in ("overlap", "window"):
        ext[bpos] = max(ext[bpos], 2)
    if variant == "overlap":
        sp["imap"], sp["order"] = d.choice(("id", "rev")), "b_first"
    if variant == "window":
        sp["imap"], sp["split"] = "window", None
        sp["order"] = d.choice(("c_first", "b_first"))
        ext[cpos] = max(ext[cpos], ext[bpos] + 1)      # two channels or more in each window
    if variant == "partial":
        # (a split channel loop may compute past D's channels, up to S's: not partial)
        ext[cpos] = max(ext[cpos], 2)
        sp["imap"], sp["split"] = "id", None
    if variant == "cycle":
        sp["outside"] = "map"
    if variant == "no_reader":
        sp["outside"] = "via"
    if sp["imap"] == "window":
        ext[cpos] = max(ext[cpos], ext[bpos])
    sp["ext"] = ext
    C = ext[cpos]
    if variant == "partial":
        sp["cd"] = d.int(1, C - 1)
    elif sp["imap"] == "window":
        sp["cd"] = C - ext[bpos] + 1
    else:
        sp["cd"] = C
    # the loops of the main stage M (D, or E where D is computed at E's loop)
    loops = _loops(sp)
    chan = [k for k, name in enumerate(loops) if name in ("c", "co", "ci")]
    sp["loops"] = loops
    if variant == "overlap":
        p = d.choice(chan)                      # under the parallel loop over b (loop 0)
    elif variant == "window":
        # at the inner of b's loop and c's, under a parallel outer one: each thread's
        # window S[b + c] overlaps the next thread's
        p = max(loops.index("c"), loops.index(f"m{bpos}"))
    else:
        p = d.choice(chan + list(range(len(loops))))
    sp["at"] = p
    sp["d_at"] = d.int(p, len(loops) - 1)       # D's loop in E's nest: inside S's
    sp["parallel"] = _draw_parallel(d, sp, variant)
    last = len(loops) - 1
    deepest = max(p, sp["d_at"]) if sp["nest"] == "under" else p
    sp["vectorize"] = (variant != "gpu" and last > deepest and sp["parallel"] != last
                       and d.bool(0.5))
    return sp


def _loops(sp) -> list:
    """The names of the main stage's loops, outermost first, as the schedule leaves them."""
    rank, cpos, bpos = sp["rank"], sp["cpos"], sp["bpos"]
    axes = [f"m{k}" for k in range(rank)]
    chan = ["co", "ci"] if sp["split"] else ["c"]
    rest = [a for k, a in enumerate(axes) if k != cpos]
    if sp["order"] == "c_first":
        if sp["split"] and sp["ci_inner"]:
            return ["co"] + rest + ["ci"]
        return chan + rest
    if sp["order"] == "b_first":
        others = [a for k, a in enumerate(axes) if k not in (cpos, bpos)]
        return [axes[bpos]] + chan + others
    out = []
    for k, a in enumerate(axes):
        out.extend(chan if k == cpos else [a])
    return out


def _draw_parallel(d, sp, variant) -> Optional[int]:
    """The loop made parallel (an index into ``sp["loops"]``), or None."""
    loops, p = sp["loops"], sp["at"]
    if variant == "gpu":
        return None
    if variant == "overlap":
        return 0
    if variant == "window":
        return min(loops.index("c"), loops.index(f"m{sp['bpos']}"))
    if not d.bool(0.6):
        return None
    cands = list(range(p + 1, len(loops)))      # inside the loop S is computed at
    C, f = sp["ext"][sp["cpos"]], sp["split"]
    # (not where T reads S[C - 1 - c] and the channel split leaves iterations past the
    # edge: there the region lowering gives S is S[0] where T's is empty, so the threads
    # of the last block all compute S[0], which store_root refuses as documented)
    past_edge = sp["chain"] and sp["imap"] == "rev" and f and C % f
    if sp["imap"] in ("id", "rev") and not past_edge:
        # a channel loop above it (or it) under which no other channel loop varies
        for q in range(p + 1):
            if loops[q] in ("c", "co", "ci") and not any(
                    loops[k] in ("c", "co", "ci") for k in range(q + 1, p + 1)):
                cands.append(q)
    return d.choice(cands) if cands else None


# ---------------------------------------------------------------------------------
# source


def _source(sp) -> str:
    rank, cpos, bpos, dt = sp["rank"], sp["cpos"], sp["bpos"], sp["dtype"]
    ext, cd = sp["ext"], sp["cd"]
    # the channel count, and one less: "n" and "n - 1" where it is symbolic
    C, C1 = ("n", "n - 1") if sp["sym"] else (sp["ext"][cpos], sp["ext"][cpos] - 1)

    def shape(cext):
        return "(" + "".join(f"{cext if k == cpos else e}, " for k, e in enumerate(ext)) + ")"

    fl = dt != "int32"
    two = "2.0" if fl else "2"
    one = "1.0" if fl else "1"
    red_axes = [k for k in range(rank) if k != cpos]
    L = (['n = tc.var("n")'] if sp["sym"] else []) + \
        [f'X = tc.placeholder({shape(C)}, dtype="{dt}", name="X")']
    rnames = [f"r{k}" for k in red_axes]
    for k in red_axes:
        L.append(f'r{k} = tc.reduce_axis((0, {ext[k]}), name="r{k}")')

    def xat(c, names):
        idx = [c if k == cpos else names[k] for k in range(rank)]
        return f"X[{', '.join(idx)}]"

    xr = xat("c", {k: f"r{k}" for k in red_axes})
    ax = f"axis=[{', '.join(rnames)}]"
    if sp["red"] == "pair":
        L.append(f"S, Q = tc.compute(({C},), lambda c: (tc.sum({xr}, {ax}), "
                 f'tc.sum({xr} * {xr}, {ax})), name="S")')
    else:
        L.append(f'S = tc.compute(({C},), lambda c: tc.{sp["red"]}({xr}, {ax}), name="S")')
    if sp["chain"]:
        L.append(f'T = tc.compute(({C},), lambda c: S[c] * {two} + {one}, name="T")')
    # G, first where D reads it (the cycle)
    gterms = ["S[c] * " + two] + (["Q[c]"] if sp["red"] == "pair" else []) \
        + (["T[c]"] if sp["chain"] else [])
    if sp["outside"] == "total":
        kt = " + ".join(t.replace("[c]", "[k]") for t in ["S[c]"] + gterms[1:])
        L.append(f'k = tc.reduce_axis((0, {C}), name="k")')
        L.append(f'G = tc.compute((1,), lambda z: tc.sum({kt}, axis=k), name="G")')
    else:
        L.append(f'G = tc.compute(({C},), lambda c: {" + ".join(gterms)}, name="G")')
    if sp["outside"] in ("via", "at"):
        L.append(f'H = tc.compute(({C},), lambda c: G[c] + {one}, name="H")')
    # D
    dshape = shape(C if sp["sym"] else cd)
    names = [f"i{k}" for k in range(rank)]
    c, b = names[cpos], names[bpos]
    m = {"id": c, "rev": f"{C1} - {c}", "pair": c, "window": f"{b} + {c}"}[sp["imap"]]
    terms = [xat(c, names), f"S[{m}]"]
    ops = [" - "]
    if sp["imap"] == "pair":
        terms.append(f"S[tc.min({c} + 1, {C1})]")
        ops.append(" + ")
    if sp["red"] == "pair":
        terms.append(f"Q[{m}]")
        ops.append(" + ")
    if sp["chain"]:
        terms.append(f"T[{m}]")
        ops.append(" - ")
    if sp["variant"] == "cycle":
        terms.append(f"G[({c} + 1) % {C}]")
        ops.append(" + ")
    body = terms[0] + "".join(o + t for o, t in zip(ops, terms[1:]))
    L.append(f'D = tc.compute({dshape}, lambda {", ".join(names)}: {body}, name="D")')
    if sp["nest"] == "under":
        L.append(f'E = tc.compute({dshape}, lambda {", ".join(names)}: '
                 f'D[{", ".join(names)}] * {two}, name="E")')
    M = "E" if sp["nest"] == "under" else "D"
    gout = "H" if sp["outside"] in ("via", "at") else "G"
    outs = [M, gout] if sp["outputs_first"] == "M" else [gout, M]
    L.append(f"outs = [{', '.join(outs)}]")
    L.append(f"args = [X, {', '.join(outs)}{', n' if sp['sym'] else ''}]")
    L.append("s = tc.create_schedule([t.op for t in outs])")
    L += _schedule_source(sp, M)
    return "\n".join(L)


def _schedule_source(sp, M) -> list:
    rank, cpos = sp["rank"], sp["cpos"]
    loops, p, variant = sp["loops"], sp["at"], sp["variant"]
    L = [f"{', '.join(f'm{k}' for k in range(rank))}{',' if rank == 1 else ''} = s[{M}].op.axis"]
    natural = [f"m{k}" for k in range(rank)]
    if sp["split"]:
        L.append(f"co, ci = s[{M}].split(m{cpos}, factor={sp['split']})")
        natural[cpos:cpos + 1] = ["co", "ci"]
    else:
        L.append(f"c = m{cpos}")
        natural[cpos] = "c"
    if loops != natural:
        L.append(f"s[{M}].reorder({', '.join(loops)})")
    if sp["rfactor"]:
        L.append(f"ko, ki = s[S].split(s[S].op.reduce_axis[-1], factor={sp['rfactor']})")
        L.append("SR = s.rfactor(S, ki)")
    # where S (and T, SR) are computed
    if variant == "no_reader":
        at = "s[H], s[H].op.axis[0]"       # H reads G, which reads S at the root
    else:
        at = f"s[{M}], {loops[p]}"
    if M == "E":
        L.append(f"s[D].compute_at(s[E], {loops[sp['d_at']]})")
    L.append(f"s[S].compute_at({at})")
    if sp["rfactor"] and sp["rf_at"]:
        L.append(f"s[SR].compute_at({at})")
    if variant != "forgot":
        L.append("s[S].store_root()")
    if sp["chain"]:
        L.append(f"s[T].compute_at({at})")
        L.append("s[T].store_root()")
    if sp["outside"] == "at":
        L.append("s[G].compute_at(s[H], s[H].op.axis[0])")
    if sp["unroll"]:
        L.append("s[S].unroll(s[S].op.reduce_axis[0])" if not sp["rfactor"] else
                 "s[S].unroll(s[S].op.reduce_axis[-1])")
    if sp["parallel"] is not None:
        L.append(f"s[{M}].parallel({loops[sp['parallel']]})")
    if sp["vectorize"]:
        L.append(f"s[{M}].vectorize({loops[-1]})")
    if sp["g_parallel"] and sp["outside"] != "total":
        L.append("s[G].parallel(s[G].op.axis[0])" if sp["outside"] != "at" else
                 "s[H].parallel(s[H].op.axis[0])")
    # the illegal twists
    if variant == "local":
        L.append('s[S].set_scope("local")')
    elif variant == "align_bounds":
        L.append(f"s[S].align_bounds(s[S].op.axis[0], {sp['align']})")
    elif variant == "gpu":
        L.append(f's[{M}].bind({loops[0]}, tc.thread_axis("blockIdx.x"))')
    elif variant == "output":
        L.append(f"s[{M}].store_root()")
    return L


def _input_src(sp) -> str:
    shape = tuple(sp["ext"])
    if sp["dtype"] == "int32":
        return f'rng.integers(-8, 9, size={shape}).astype("int32")'
    return f'rng.uniform(-1, 1, size={shape}).astype("{sp["dtype"]}")'


def case_input(case: StoreRootCase) -> np.ndarray:
    """The input ``X`` of the case (what its reproducer draws too)."""
    rng = np.random.default_rng(case.seed)
    shape = tuple(case.spec["ext"])
    if case.spec["dtype"] == "int32":
        return rng.integers(-8, 9, size=shape).astype("int32")
    return rng.uniform(-1, 1, size=shape).astype(case.spec["dtype"])


# ---------------------------------------------------------------------------------
# the numpy reference


def reference(sp, x: np.ndarray) -> dict:
    """{name: array} of every stage, with numpy (floats in float64 rounded to the dtype
    after each stage, ints exactly)."""
    dt = np.dtype(sp["dtype"])
    fl = dt.kind == "f"

    def rnd(a):
        return a.astype(dt).astype(np.float64) if fl else np.asarray(a).astype(np.int64)

    rank, cpos, bpos, C, cd = sp["rank"], sp["cpos"], sp["bpos"], sp["ext"][sp["cpos"]], sp["cd"]
    X = x.astype(np.float64) if fl else x.astype(np.int64)
    red = tuple(k for k in range(rank) if k != cpos)
    v = {}
    if sp["red"] == "max":
        v["S"] = rnd(X.max(axis=red))
    else:
        v["S"] = rnd(X.sum(axis=red))
    if sp["red"] == "pair":
        v["Q"] = rnd((rnd(X * X)).sum(axis=red))
    if sp["chain"]:
        v["T"] = rnd(v["S"] * 2 + 1)
    g = v["S"] * 2
    if sp["red"] == "pair":
        g = rnd(g) + v["Q"]
    if sp["chain"]:
        g = rnd(g) + v["T"]
    if sp["outside"] == "total":
        tot = v["S"].copy()
        if sp["red"] == "pair":
            tot = rnd(tot + v["Q"])
        if sp["chain"]:
            tot = rnd(tot + v["T"])
        v["G"] = rnd(np.array([tot.sum()]))
    else:
        v["G"] = rnd(g)
    if sp["outside"] in ("via", "at"):
        v["H"] = rnd(v["G"] + 1)
    dshape = list(sp["ext"])
    dshape[cpos] = cd
    grid = np.indices(dshape)
    c, b = grid[cpos], grid[bpos]
    m = {"id": c, "rev": C - 1 - c, "pair": c, "window": b + c}[sp["imap"]]
    val = rnd(np.take(X, range(cd), axis=cpos) - v["S"][m])
    if sp["imap"] == "pair":
        val = rnd(val + v["S"][np.minimum(c + 1, C - 1)])
    if sp["red"] == "pair":
        val = rnd(val + v["Q"][m])
    if sp["chain"]:
        val = rnd(val - v["T"][m])
    if sp["variant"] == "cycle":
        val = rnd(val + v["G"][(c + 1) % C])
    v["D"] = val
    if sp["nest"] == "under":
        v["E"] = rnd(val * 2)
    return v


# ---------------------------------------------------------------------------------
# running


def build_case(case: StoreRootCase):
    """Run the case's source: ``(s, args)`` (raises what tecomp raises)."""
    ns: dict = {"tc": tc}
    exec(compile(case.program_source(), f"<store_root case {case.fuzz_seed}>", "exec"), ns)  # noqa: S102
    return ns["s"], ns["args"]


def run_store_root_case(case: StoreRootCase, check_passes: bool = False) -> Outcome:
    """Run a case (see the module doc): never raises for a finding."""
    legal = case.variant == "legal"
    want = None if legal else ILLEGAL[case.variant]
    stage, ir = "schedule", ""
    try:
        s, args = build_case(case)
        stage = "lower"
        if check_passes and legal:
            stage = "check_passes"
            _check_passes(s, args, seed=case.seed)
            stage = "lower"
        func = tc.lower(s, args)
        ir = str(func)
    except Exception as e:  # noqa: BLE001
        return _refusal_or_crash(case, stage, e, want, ir)
    stage = "build"
    try:
        mod = tc.build(func, target=case.target)
        x = case_input(case)
        ref = reference(case.spec, x)

        outs = args[1:-1] if case.spec["sym"] else args[1:]
        scalars = [x.shape[case.spec["cpos"]]] if case.spec["sym"] else []

        def fresh():
            return [x.copy()] + [np.full(ref[t.name].shape, _poison(t.dtype), t.dtype)
                                 for t in outs] + scalars

        results = {}
        stage = case.target
        arrs = fresh()
        if _cross(case.target):
            stage = f"{case.target} under qemu"
        call_built(mod, case.target, arrs)
        results[case.target] = arrs
        stage = "interp"
        arrs = fresh()
        _interp.run(func, *arrs)
        results["interp"] = arrs
    except Exception as e:  # noqa: BLE001
        return _refusal_or_crash(case, stage, e, None, ir)
    problems = []
    dt = case.spec["dtype"]
    for pos, t in enumerate(outs, start=1):
        w = ref[t.name]
        for name, arrs in results.items():
            msg = compare(arrs[pos], w, dt, f"{name} vs numpy, output {t.name}")
            if msg:
                problems.append(msg)
        msg = compare(results[case.target][pos], results["interp"][pos].astype(np.float64)
                      if dt != "int32" else results["interp"][pos], dt,
                      f"{case.target} vs interp, output {t.name}")
        if msg:
            problems.append(msg)
    if not legal:
        what = (f"an illegal schedule ({case.variant}) accepted: expected a ScheduleError "
                f"matching {want!r}")
        return Outcome("mismatch", case, "not refused",
                       "\n".join([what] + (problems or ["(its values happen to be right)"])), ir)
    if problems:
        return Outcome("mismatch", case, "compare", "\n".join(problems), ir)
    return Outcome("ok", case, "", "", ir)


def _poison(dtype: str):
    return np.nan if dtype != "int32" else np.iinfo(np.int32).max // 3


def _refusal_or_crash(case, stage, e, want, ir) -> Outcome:
    """The outcome of the exception ``e`` at ``stage``: ``rejected`` for a resource limit,
    ``refused`` where the case is illegal (``want``: the documented message) and ``e``
    is that ScheduleError, else a crash (an error for a legal case, or the wrong one)."""
    if isinstance(e, tc.ResourceLimitError):
        return Outcome("rejected", case, stage, _exc_text(e), ir)
    if want is not None and isinstance(e, tc.ScheduleError) and re.match(want, str(e)):
        return Outcome("refused", case, stage, str(e).splitlines()[0][:300], ir)
    if want is not None:
        return Outcome("crash", case, stage, f"expected a ScheduleError matching {want!r}, "
                       f"got\n{_exc_text(e)}", ir)
    return Outcome("crash", case, stage, _exc_text(e), ir)


__all__ = ["StoreRootCase", "draw_store_root_case", "run_store_root_case", "build_case",
           "case_input", "reference", "ILLEGAL", "FAMILY"]
