"""The fuzzer's store_root family (tecomp.testing.store_root): legal schedules compute what
numpy computes, illegal ones raise the documented ScheduleError; the family's seeds leave
every other family's draws as they were.  A few seeds by default; TECOMP_LONG_TESTS=1 runs
more.  The campaign is ``python -m tecomp.testing.fuzz --cases 600 --store-root-every 1
--edge-every 0 --gpu-every 0``."""
import os

import numpy as np
import pytest

import tecomp as tc
from tecomp.testing.fuzz import case_for_seed, store_root_family_residue
from tecomp.testing.store_root import (
    ILLEGAL, StoreRootCase, build_case, case_input, draw_store_root_case, reference,
    run_store_root_case,
)

LONG = os.environ.get("TECOMP_LONG_TESTS") == "1"


def _first_seeds(variant, count, start=0):
    """The first ``count`` seeds (from ``start``) whose case is ``variant``."""
    out, seed = [], start
    while len(out) < count:
        if draw_store_root_case(seed).variant == variant:
            out.append(seed)
        seed += 1
    return out


@pytest.mark.parametrize("seed", list(range(5_000, 5_000 + (120 if LONG else 0)))
                         + _first_seeds("legal", 0 if LONG else 4, 5_000))
def test_store_root_cases_run_clean(seed):
    """Legal cases agree with numpy and the interpreter; illegal ones are refused as
    documented (the default run: four legal cases; the long run: 120 seeds)."""
    out = run_store_root_case(draw_store_root_case(seed))
    assert out.kind in ("ok", "refused"), out.report()
    assert (out.kind == "ok") == (out.case.variant == "legal"), out.report()


@pytest.mark.parametrize("variant", sorted(ILLEGAL))
def test_every_illegal_variant_is_refused_as_documented(variant):
    """Each way of using store_root wrongly (its first seed; two more in the long run)
    raises the ScheduleError docs/schedule.md names, never a wrong value or a crash."""
    for seed in _first_seeds(variant, 3 if LONG else 1):
        out = run_store_root_case(draw_store_root_case(seed))
        assert out.kind == "refused", out.report()


def test_a_legal_case_reaches_the_interesting_schedules():
    """The legal cases the generator draws include multi-output reductions, a second
    store_root stage, parallel and vectorized loops, rfactor, nests two deep, a symbolic
    channel count and every kind of outside reader (drawn, not run: cheap)."""
    seen = set()
    for seed in range(300):
        sp = draw_store_root_case(seed).spec
        if sp["variant"] != "legal":
            continue
        seen.add(("red", sp["red"]))
        seen.add(("imap", sp["imap"]))
        seen.add(("outside", sp["outside"]))
        seen.add(("nest", sp["nest"]))
        seen.update({("chain",)} if sp["chain"] else set())
        seen.update({("rfactor",)} if sp["rfactor"] else set())
        seen.update({("vectorize",)} if sp["vectorize"] else set())
        seen.update({("symbolic",)} if sp["sym"] else set())
        if sp["parallel"] is not None:
            seen.add(("parallel above" if sp["parallel"] <= sp["at"] else "parallel inside",))
    want = {("red", r) for r in ("sum", "max", "pair")} | \
        {("imap", m) for m in ("id", "rev", "pair", "window")} | \
        {("outside", o) for o in ("map", "total", "via", "at")} | \
        {("nest", n) for n in ("plain", "under")} | \
        {("chain",), ("rfactor",), ("vectorize",), ("parallel above",), ("parallel inside",),
         ("symbolic",)}
    assert want <= seen, want - seen


def test_the_reproducer_is_the_case():
    """A case's reproducer builds the same lowered function as the runner, and its
    reference agrees with the interpreter on it."""
    from tecomp.ir import interp

    seed = _first_seeds("legal", 1, 300)[0]
    case = draw_store_root_case(seed)
    ns = {}
    src = case.source()
    exec(compile(src.split("print(tc.lower")[0], "<reproducer>", "exec"), ns)  # noqa: S102
    s, args = build_case(case)
    assert str(tc.lower(ns["s"], ns["args"])) == str(tc.lower(s, args))
    x = case_input(case)
    outs = [x] + [np.zeros([int(e) for e in t.shape], t.dtype) for t in args[1:]]
    interp.run(tc.lower(s, args), *outs)
    ref = reference(case.spec, x)
    for t, got in zip(args[1:], outs[1:]):
        np.testing.assert_allclose(got, ref[t.name], rtol=1e-4, atol=1e-4)


def test_the_family_takes_only_its_own_seeds():
    """With the fuzzer's defaults the family's seeds are those ``seed % 20 == 15`` (no edge
    or GPU seed), and every other seed draws the case it drew without the family."""
    assert store_root_family_residue(20) == 15 and store_root_family_residue(1) == 0
    for seed in range(0, 40):
        with_it = case_for_seed(seed, 25, 5, "llvm", 10, "cuda-emu", 5, 20)
        if seed % 20 == 15:
            assert isinstance(with_it, StoreRootCase) and with_it.fuzz_seed == seed
            continue
        without = case_for_seed(seed, 25, 5, "llvm", 10, "cuda-emu", 5)
        assert not isinstance(with_it, StoreRootCase)
        assert (type(with_it), with_it.steps, with_it.n, with_it.seed, with_it.target,
                with_it.auto) == (type(without), without.steps, without.n, without.seed,
                                  without.target, without.auto)
        assert with_it.program.source() == without.program.source()
    assert all(isinstance(case_for_seed(s, 25, 5, store_root_every=1, edge_every=0),
                          StoreRootCase) for s in (3, 24))
