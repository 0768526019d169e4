"""The fuzzer's nnargs family (tecomp.testing.nnargs): one tecomp.nn call whose arguments a
careless user or an attacker wrote (True, 1.5, NaN, 2**31, 300 for an int8 bound,
"SAMEE", an axis out of range...): refused with a TecompError that begins with the
operator and names the argument, or computed as numpy / PyTorch compute it.  One legal and
one illegal seed of each kind by default; TECOMP_LONG_TESTS=1 runs 300 more.  The
campaign is ``python -m tecomp.testing.fuzz --only nnargs --cases 2000``."""
import json

import pytest

from tecomp.testing.fuzz import args_family_residue, case_for_seed
from tecomp.testing.nnargs import (KINDS, LATE_KINDS, ArgsCase, decode, draw_nnargs_case,
                                   run_nnargs_case)

from helpers import fuzz_cli


def _first_seed(pred, start=0):
    seed = start
    while not pred(draw_nnargs_case(seed).spec):
        seed += 1
    return seed


_DEFAULT = sorted({_first_seed(lambda sp, k=k, bad=bad: sp["kind"] == k
                               and bool(sp.get("illegal")) == bad)
                   for k in KINDS + LATE_KINDS for bad in (False, True)})


@pytest.mark.parametrize("seed", _DEFAULT)
def test_one_legal_and_one_illegal_case_of_each_kind(seed):
    case = draw_nnargs_case(seed)
    out = run_nnargs_case(case)
    assert out.kind == ("refused" if case.spec.get("illegal") else "ok"), out.report()


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(30_000, 30_300))
def test_nnargs_campaign(seed):
    out = run_nnargs_case(draw_nnargs_case(seed))
    assert out.ok, out.report()


def test_the_spec_is_json_and_decodes_hostile_values():
    """The reproducer holds the spec as JSON; numpy scalars, NaN and tc.var come back."""
    import numpy as np
    import tecomp as tc

    for seed in range(40):
        case = draw_nnargs_case(seed)
        json.dumps(case.spec)
        assert "nn." + case.spec["op"] in case.source()
    assert isinstance(decode({"$": "int64", "v": 2}), np.int64)
    assert str(decode({"$": "float", "v": "nan"})) == "nan"
    assert isinstance(decode({"$": "var"}), tc.Var)
    assert decode({"$": "tuple", "v": [1, {"$": "tuple", "v": [2, 3]}]}) == (1, (2, 3))


def test_the_checker_sees_each_kind_of_failure(monkeypatch):
    """An illegal call accepted, a legal one refused, a refusal that names another
    argument, a Python exception and a wrong value are each reported."""
    from tecomp import nn
    from tecomp.testing import nnargs

    legal = ArgsCase({"op": "clip", "kind": "scalar", "inputs": [[[2, 3], "int8"]],
                      "kwargs": {"a_min": -3, "a_max": 100}}, seed=1)
    assert run_nnargs_case(legal).kind == "ok"
    wraps = ArgsCase(dict(legal.spec, kwargs={"a_min": None, "a_max": 300},
                          illegal="a_max", illegal_any=["a_max"]), seed=1)
    assert run_nnargs_case(wraps).kind == "refused"
    other = ArgsCase(dict(wraps.spec, illegal="a_min", illegal_any=["a_min"]), seed=1)
    assert run_nnargs_case(other).kind == "mismatch"
    refused = ArgsCase(dict(legal.spec, kwargs={"a_min": None, "a_max": None}), seed=1)
    out = run_nnargs_case(refused)
    assert out.kind == "crash" and "a legal call refused" in out.detail
    accepted = ArgsCase(dict(legal.spec, illegal="a_min", illegal_any=["a_min"]), seed=1)
    assert run_nnargs_case(accepted).kind == "mismatch"
    monkeypatch.setattr(nn, "clip", lambda *a, **k: [][1])
    assert run_nnargs_case(legal).kind == "crash"
    monkeypatch.undo()
    monkeypatch.setattr(nnargs, "_reference", lambda sp, arrays, dtype: (arrays[0] + 1, True))
    assert run_nnargs_case(legal).kind == "mismatch"


def test_the_new_kinds_first_findings():
    """What the pool / attention / quant kinds found first: dropout refused a numpy float
    p and a numpy int seed, raised OverflowError for p = 10**400, and requantize's refusal
    of out_dtype did not name it."""
    cases = [({"op": "dropout", "kind": "attention", "inputs": [[[2, 9], "float32"]],
               "kwargs": {"p": {"$": "float32", "v": 0.5}, "seed": {"$": "int32", "v": -2}}},
              "ok"),
             ({"op": "dropout", "kind": "attention", "inputs": [[[2, 9], "float32"]],
               "kwargs": {"p": 10**400}, "illegal": "p", "illegal_any": ["p"]}, "refused"),
             ({"op": "requantize", "kind": "quant", "inputs": [[[2, 5], "int8"]],
               "kwargs": {"in_scale": 0.1, "in_zp": 0, "out_scale": 0.2, "out_zp": 3,
                          "out_dtype": "int16"}, "qdtype": "int16",
               "illegal": "out_dtype", "illegal_any": ["out_dtype"]}, "refused"),
             ({"op": "requantize", "kind": "quant", "inputs": [[[2, 5], "int8"]],
               "kwargs": {"in_scale": 0.1, "in_zp": -3, "out_scale": 0.02, "out_zp": 100,
                          "out_dtype": "uint8"}, "qdtype": "uint8"}, "ok")]
    for sp, want in cases:
        out = run_nnargs_case(ArgsCase(sp, seed=5))
        assert out.kind == want, out.report()


def test_an_int32_argmax_past_int32_positions_is_drawn_and_refused():
    """Session 26: nn.argmax over 2**31 + 7 constant positions with its int32 index gave
    a truncated position (5 for the last element's maximum), not an error.  The axis
    kind widens some legal argmax calls so (seed 892 the first), an illegal dtype."""
    sp = draw_nnargs_case(892).spec
    assert sp["op"] == "argmax" and sp["illegal"] == "dtype"
    assert max(max(s) for s, _ in sp["inputs"]) > 2**31 - 1
    out = run_nnargs_case(draw_nnargs_case(892))
    assert out.kind == "refused" and "dtype='int64'" in out.detail, out.report()


def test_the_family_is_in_the_rotation():
    r = args_family_residue(50)
    assert r == 4 and args_family_residue(1) == 0
    assert isinstance(case_for_seed(54, 0, args_every=50), ArgsCase)
    assert not isinstance(case_for_seed(55, 0, args_every=50), ArgsCase)
    assert not isinstance(case_for_seed(54, 0), ArgsCase)


def test_fuzz_only_nnargs(tmp_path):
    p = fuzz_cli(tmp_path, "--only", "nnargs", "--cases", "3", "--seed", "0",
                 env_extra={"TECOMP_CACHE_DIR": str(tmp_path / "cache")}, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "cases run: 3 (nnargs:" in p.stdout and "mismatches: 0" in p.stdout, p.stdout


@pytest.mark.parametrize("seed", [110, 384, 1688, 351, 1481])
def test_quantized_dense_to_int32_and_its_refusals(seed):
    """Session 25's qdense kind found: (110, 384, 1688) quantized_dense to int32 of a value
    in (2**30, 2**31) gave 2**30 + out_zp (the 8-bit clamp to +-2**30 before the zero
    point), not the value or int32's bound; (351, 1481) the refusal of a product of scales
    outside float32 began "quantized_dense:", not "quantized_dense <name>:" as the others."""
    case = draw_nnargs_case(seed)
    assert case.spec["op"] == "quantized_dense"
    out = run_nnargs_case(case)
    assert out.kind == ("refused" if case.spec.get("illegal") else "ok"), out.report()
