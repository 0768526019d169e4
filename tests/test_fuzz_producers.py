"""The fuzzer's producers family (tecomp.testing.producers): a templated operator meeting a
producer it does not expect (Winograd weights given transformed, packed weights as a
placeholder, a convolution of a ReLU / pad / cast / view, a GEMM of a transpose or of one
tensor twice, a pooling of a convolution, a softmax of a matmul, attention of one tensor
as q, k, v and mask, an output read again), auto-scheduled, built and run against numpy.
One small seed of each kind by default; TECOMP_LONG_TESTS=1 runs 200 more.  The campaign
is ``python -m tecomp.testing.fuzz --only producers --cases 300 --case-timeout 200``."""
import json

import numpy as np
import pytest

import tecomp as tc
from tecomp.errors import InternalError, ScheduleError, ShapeError
from tecomp.testing import producers
from tecomp.testing.fuzz import case_for_seed, producers_family_residue
from tecomp.testing.producers import (KINDS, LATE_KINDS, ProducerCase, draw_producer_case,
                                      run_producer_case)

from helpers import fuzz_cli


def _small(sp):
    """Cheap to schedule and build: one image of at most 36 pixels for the convolutions."""
    return sp.get("n", 1) == 1 and np.prod(sp.get("hw", [1])) <= 36


def _first_seed(pred, start=0):
    seed = start
    while not pred(draw_producer_case(seed).spec):
        seed += 1
    return seed


_DEFAULT = sorted({_first_seed(lambda sp, k=k: sp["kind"] == k and _small(sp))
                   for k in KINDS + LATE_KINDS})


@pytest.mark.parametrize("seed", _DEFAULT)
def test_one_small_case_of_each_kind(seed):
    out = run_producer_case(draw_producer_case(seed))
    assert out.kind == "ok", out.report()


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(40_000, 40_200))
def test_producers_campaign(seed):
    out = run_producer_case(draw_producer_case(seed))
    assert out.ok, out.report()


@pytest.mark.parametrize("u", ["ph", "scaled"])
def test_winograd_of_weights_given_transformed(u):
    """Session 23's class: the transformed weights a placeholder (or a compute of one,
    not the transform's stage), the data a strided view, an output read again."""
    sp = {"kind": "winograd_pre", "layout": "NCHW", "tile": 2, "groups": 1, "n": 1, "c": 2,
          "o": 3, "hw": [4, 5], "pad": 1, "data": "view", "epi": True, "u": u, "twice": True}
    out = run_producer_case(ProducerCase(sp, seed=3))
    assert out.kind == "ok", out.report()


def test_one_tensor_as_both_operands():
    """matmul(A, A), a convolution of X with itself as its weights, attention of one
    tensor as q, k, v and the mask."""
    for sp in ({"kind": "gemm", "op": "matmul", "m": 5, "n": 5, "k": 5, "b": 1, "same": True,
                "a": "relu", "bop": "ph", "bias": "none", "tb": False, "twice": False},
               {"kind": "conv", "layout": "NHWC", "depthwise": False, "groups": 1, "n": 1,
                "c": 3, "o": 3, "k": 3, "hw": [3, 3], "stride": 1, "pad": 1, "data": "same",
                "weight": "ph", "algorithm": "direct", "twice": False},
               {"kind": "sdpa", "b": 1, "h": 1, "lq": 4, "d": 4, "share": "all", "q": "ph",
                "mask": "none", "scale": None, "twice": True}):
        out = run_producer_case(ProducerCase(sp, seed=1))
        assert out.kind == "ok", out.report()


def test_the_checker_sees_each_kind_of_failure(monkeypatch):
    """A template's InternalError and any other exception are crashes, a TecompError the
    kind does not expect a crash too (a legal DAG refused), a wrong value a mismatch."""
    case = draw_producer_case(_DEFAULT[0])
    assert json.loads(json.dumps(case.spec)) == case.spec
    assert "run_producer_case" in case.source()

    def raising(exc):
        def f(*a, **k):
            raise exc
        return f

    monkeypatch.setattr(tc, "auto_schedule", raising(InternalError("a template crashed")))
    assert run_producer_case(case).kind == "crash"
    monkeypatch.setattr(tc, "auto_schedule", raising(IndexError("list index out of range")))
    assert run_producer_case(case).kind == "crash"
    monkeypatch.setattr(tc, "auto_schedule", raising(ShapeError("a documented refusal")))
    assert run_producer_case(case).kind == "crash"
    monkeypatch.setattr(tc, "auto_schedule", raising(ScheduleError("a template's refusal")))
    assert run_producer_case(case).kind == "crash"
    monkeypatch.undo()
    real = producers.build_case

    def wrong(c):
        ins, arrays, outs, refs, tol, sym = real(c)
        return ins, arrays, outs, [r + 1 for r in refs], tol, sym
    monkeypatch.setattr(producers, "build_case", wrong)
    assert run_producer_case(case).kind == "mismatch"


def test_the_family_is_in_the_rotation():
    assert producers_family_residue(50) == 10 and producers_family_residue(1) == 0
    assert isinstance(case_for_seed(60, 0, producers_every=50), ProducerCase)
    assert not isinstance(case_for_seed(61, 0, producers_every=50), ProducerCase)
    assert not isinstance(case_for_seed(60, 0), ProducerCase)


def test_fuzz_only_producers(tmp_path):
    p = fuzz_cli(tmp_path, "--only", "producers", "--cases", "2", "--seed", "1",
                 env_extra={"TECOMP_CACHE_DIR": str(tmp_path / "cache")}, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "cases run: 2 (producers:" in p.stdout and "mismatches: 0" in p.stdout, p.stdout


@pytest.mark.parametrize("kind", ["conv", "pool_conv"])
@pytest.mark.parametrize("change", [{}, {"layout": "NCHW"}, {"layout": "NCHW", "depthwise": True},
                                    {"groups": 2}, {"groups": 4}, {"groups": 2, "c": 2},
                                    {"groups": 4, "layout": "NCHW"}])
def test_a_padded_input_that_is_an_output_too(kind, change):
    """The family's first finding (seed 650, 'expose'): an nn.pad of the data returned
    beside the convolution (unpadded itself) that reads it, alone or under a pooling.
    The depthwise template took it for its own padding stage and inlined it, which raised
    a ScheduleError (an output must be computed whole at the root); _own_pad now leaves
    an output alone."""
    sp = {"kind": kind, "layout": "NHWC", "depthwise": False, "groups": 1, "n": 1, "c": 4,
          "o": 4, "k": 3, "hw": [5, 6], "stride": 1, "pad": 0, "data": "pad", "weight": "ph",
          "algorithm": "direct", "twice": False, "expose": True, "pool": "max", "pk": 2,
          "ps": 1, "relu": False}
    out = run_producer_case(ProducerCase(dict(sp, **change), seed=2))
    assert out.kind == "ok", out.report()


def test_a_batch_matmul_of_one_batch_with_b_transposed():
    """The family's second finding (seed 775): batch_matmul(A[1, 15, 7], B[1, 10, 7],
    transpose_b=True) -- a skinny GEMM whose rows fill the vector lanes -- crashed the
    skinny template (InternalError: its rows-in-lanes schedule unpacked the 3-d copy of A
    as 2-d); a batch of one no longer takes that schedule."""
    sp = {"kind": "gemm", "op": "batch_matmul", "m": 15, "n": 10, "k": 7, "b": 1,
          "same": False, "a": "ph", "bop": "ph", "bias": "none", "tb": True, "twice": False,
          "expose": False}
    out = run_producer_case(ProducerCase(sp, seed=57594))
    assert out.kind == "ok", out.report()


def test_each_kind_expects_only_its_documented_refusals():
    """Session 25: only Winograd of a depthwise grouping (or of a symbolic batch, through
    conv2d_nchw/nhwc) may be refused; a ShapeError with another message, or the right
    message in another class, is a crash."""
    sp = {"kind": "winograd", "layout": "NCHW", "groups": 2, "n": 1, "c": 2, "o": 2,
          "hw": [5, 3], "pad": 0, "data": "ph", "epi": False, "weight": "ph",
          "twice": False, "expose": False}
    out = run_producer_case(ProducerCase(sp, seed=4))
    assert out.kind == "refused" and "depthwise grouping" in out.detail, out.report()
    assert producers.expected_refusals(dict(sp, c=4)) == ()
    assert producers.expected_refusals({"kind": "gemm"}) == ()
    assert producers._expected(sp, ShapeError("x: a depthwise grouping (one input ...)"))
    assert not producers._expected(sp, ScheduleError("x: a depthwise grouping"))
    assert not producers._expected(sp, ShapeError("something else"))
    # one tensor [k, k, c, c] as NHWC data and its HWIO weights, c + 2 * pad < k: the
    # kernel does not fit its width (seed 9065, the first refusal the list caught)
    same = {"kind": "conv", "layout": "NHWC", "depthwise": False, "groups": 1, "n": 1,
            "c": 2, "o": 2, "k": 5, "hw": [6, 6], "stride": 2, "pad": 1, "data": "same",
            "weight": "ph", "algorithm": "direct", "twice": False, "expose": False}
    out = run_producer_case(ProducerCase(same, seed=6))
    assert out.kind == "refused" and "does not fit" in out.detail, out.report()


@pytest.mark.parametrize("change", [{}, {"layout": "NHWC", "groups": 1, "tile": 2,
                                         "data": "ph", "u": "scaled", "expose": True}])
def test_winograd_of_transformed_weights_over_a_symbolic_batch(change):
    """Session 25's first finding (producers seed 223, a symbolic batch): conv2d_winograd
    takes a symbolic batch, but the CPU template divided the transform's tiles by the
    batch (None) and crashed (InternalError, TypeError); the tiles of one image now come
    from the output plane."""
    sp = {"kind": "winograd_pre", "layout": "NCHW", "tile": 4, "groups": 2, "n": 2, "c": 4,
          "o": 2, "hw": [7, 3], "pad": 0, "data": "relu", "epi": True, "u": "ph",
          "twice": False, "expose": False, "sym": True}
    out = run_producer_case(ProducerCase(dict(sp, **change), seed=5))
    assert out.kind == "ok", out.report()


@pytest.mark.parametrize("kind,seed", [("gemm", 73), ("sdpa", 131), ("conv", 59),
                                       ("softmax_mm", 430)])
def test_a_symbolic_batch_through_a_template(kind, seed):
    case = draw_producer_case(seed)
    assert case.spec["kind"] == kind and case.spec["sym"]
    out = run_producer_case(case)
    assert out.kind == "ok", out.report()


@pytest.mark.parametrize("how", producers.KNOB_TWISTS)
def test_a_knob_set_by_hand(how):
    """Session 25: a knob of the template's schedule set through Config.set to its default
    written another way; 2.0 for channel_vectors' 2 reached the NHWC template (InternalError).
    A numpy integer is taken, the rest refused naming the knob."""
    sp = {"kind": "conv", "layout": "NHWC", "depthwise": False, "groups": 1, "n": 1, "c": 32,
          "o": 64, "k": 3, "hw": [12, 12], "stride": 1, "pad": 1, "data": "ph",
          "weight": "ph", "algorithm": "direct", "twice": False, "expose": False,
          "knob": {"how": how, "pick": 1}}     # (knob 1 of 5: conv2d_nhwc.channel_vectors)
    case = ProducerCase(sp, seed=7)
    tensors, _, outs, _, _, _ = producers.build_case(case)
    space = tc.autoschedule.default_config(tensors + outs, "llvm").space
    assert sorted(space)[1] == "conv2d_nhwc.channel_vectors", sorted(space)
    out = run_producer_case(case)
    assert out.kind == "ok", out.report()
    assert producers._knob_value(2, "float") == (2.0, False)
    assert producers._knob_value(True, "int_bool") == (1, False)
    assert producers._knob_value(4, "np_int") == (4, True)
