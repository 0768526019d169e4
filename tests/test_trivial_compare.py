"""The rules' default against the trivial schedule (issue 49, item 5): the knob
``trivial`` of ``apply_rules``, whose default the analytic estimate of
``tecomp.strategy.nest_cost`` takes for tiny DAGs; the search measuring both first;
``tc.auto_schedule(..., check_trivial=True)``.  Fake runners: nothing is timed."""
import dataclasses
import json

import numpy as np
import pytest

import tecomp as tc
from tecomp.autoschedule.measure import MeasureResult
from tecomp.strategy import Knobs, apply_rules
from tecomp.strategy import trivial
from tecomp.strategy.nest_cost import nest_cycles
from tecomp.target import cpu_model
from tecomp.testing import te_corpus

#: a fixed machine (AVX-512, 2 threads), whatever CPU runs the tests
ZEN4 = dataclasses.replace(cpu_model(tc.Target("llvm -mcpu=znver4")), threads=2)


def _sig(trace) -> str:
    return json.dumps(trace, sort_keys=True)


class _Runner:
    """Measures nothing: the trivial schedule of ``args`` takes ``fast`` seconds, any
    other candidate ``slow``; records what it was given."""

    def __init__(self, args, fast=1e-3, slow=2e-3):
        self.triv = _sig(trivial.trivial_schedule(args).trace.to_json())
        self.fast, self.slow = fast, slow
        self.batches = []

    def run(self, args, build_fn, payloads, shapes=None, **kw):
        self.batches.append([_sig(p["trace"]) for p in payloads])
        return [MeasureResult(True, [self.fast if _sig(p["trace"]) == self.triv
                                     else self.slow] * 3) for p in payloads]


def _add(M=64, N=256):
    A = tc.placeholder((M, N), name="A")
    B = tc.compute((M, N), lambda i, j: A[i, j] * 2.0 + 1.0, name="B")
    return [A, B]


def _lowered(s, args):
    return str(tc.lower(s, args, target=ZEN4.target))


# -- the model side ---------------------------------------------------------------------

def test_the_model_takes_the_trivial_schedule_where_it_costs_less():
    # 1x2x3x4 int64, y = x * 2 - v[d]: the rules leave the row of 4 int64 scalar (a
    # broadcast operand keeps it from being fused with the rows), the trivial schedule
    # makes it one vector; both start one parallel region
    c = te_corpus.make("tiny_4d_1x2x3x4")
    assert trivial.tiny(c.args, ZEN4)
    k = Knobs()
    s = apply_rules(c.args, k, ZEN4)
    assert k.defaults["trivial"] is True and k.values["trivial"] is True
    want = _lowered(trivial.trivial_schedule(c.args, ZEN4.lanes), c.args)
    assert _lowered(s, c.args) == want and "vectorized (d.inner, 0, 4)" in want
    rules = apply_rules(c.args, Knobs({"trivial": False}), ZEN4)
    assert "vectorized" not in _lowered(rules, c.args)
    f = tc.build(s, c.args)
    x, v = c.inputs
    y = c.empty_output()
    f(x, v, y)
    np.testing.assert_array_equal(y, c.want)


def test_the_model_keeps_the_rules_where_the_trivial_schedule_costs_more():
    # 3x5: the rules' one serial loop of 15, against a parallel region over 3 rows
    c = te_corpus.make("tiny_add_3x5")
    k = Knobs()
    s = apply_rules(c.args, k, ZEN4)
    assert k.defaults["trivial"] is False
    ir = _lowered(s, c.args)
    assert "parallel" not in ir
    assert "parallel" in _lowered(trivial.trivial_schedule(c.args, ZEN4.lanes), c.args)
    triv = nest_cycles(tc.lower(trivial.trivial_schedule(c.args, ZEN4.lanes), c.args), ZEN4)
    mine = nest_cycles(tc.lower(s, c.args), ZEN4)
    assert mine < triv


def test_the_switch_turns_the_comparison_off(monkeypatch):
    c = te_corpus.make("tiny_4d_1x2x3x4")
    monkeypatch.setattr(trivial, "COMPARE_TINY", False)
    k = Knobs()
    apply_rules(c.args, k, ZEN4)
    assert k.defaults["trivial"] is False


def test_no_comparison_beyond_tiny_dags(monkeypatch):
    # neither lowered nor scored: more points than a parallel region's cycles on every
    # thread (a GEMM in L1), or more data than L1
    def fail(*a, **k):
        raise AssertionError("scored")
    monkeypatch.setattr(trivial, "nest_cycles", fail)
    A = tc.placeholder((30, 50), name="A")
    B = tc.placeholder((30, 70), name="B")
    r = tc.reduce_axis((0, 30), name="r")
    C = tc.compute((50, 70), lambda i, j: tc.sum(A[r, i] * B[r, j], axis=r), name="C")
    for args in ([A, B, C], _add()):
        assert not trivial.tiny(args, ZEN4)
        k = Knobs()
        apply_rules(args, k, ZEN4)
        assert k.defaults["trivial"] is False


@pytest.mark.parametrize("name", te_corpus.names())
def test_corpus_defaults_that_the_model_changes(name):
    # of the 41 operators, the comparison changes one default: tiny_4d_1x2x3x4, whose
    # two schedules measured the same (0.99x-1.01x, benchmarks/history/2026-12-01.md,
    # "h19-trivial"); every operator where the rules were measured faster keeps them
    c = te_corpus.make(name)
    k = Knobs()
    apply_rules(c.args, k, ZEN4)
    assert k.defaults["trivial"] is (name == "tiny_4d_1x2x3x4")


def test_the_estimate_counts_parallel_regions_vectors_and_gathers():
    A = tc.placeholder((4, 64), name="A")
    B = tc.compute((4, 64), lambda i, j: A[i, j] + 1.0, name="B")
    T = tc.compute((64, 4), lambda i, j: A[j, i] + 1.0, name="T")

    def cycles(out, how):
        s = tc.create_schedule(out.op)
        i, j = s[out].op.axis
        how(s[out], i, j)
        return nest_cycles(tc.lower(s, [A, out]), ZEN4)

    serial = cycles(B, lambda st, i, j: None)
    vec = cycles(B, lambda st, i, j: st.vectorize(st.split(j, factor=16)[1]))
    par = cycles(B, lambda st, i, j: st.parallel(i))
    assert vec < serial < par and par > ZEN4.parallel_region_cycles
    # T[i, j] = A[j, i]: a vector along j reads A's column, a gather (one load a lane);
    # along i, A's row
    gather = cycles(T, lambda st, i, j: st.vectorize(j))
    row = cycles(T, lambda st, i, j: st.vectorize(st.split(i, factor=16)[1]))
    assert gather > 2 * row
    n = tc.var("n")
    X = tc.placeholder((n,), name="X")
    Y = tc.compute((n,), lambda i: X[i] * 2.0, name="Y")
    assert nest_cycles(tc.lower(tc.create_schedule(Y.op), [X, Y]), ZEN4) is None


# -- the measured side -------------------------------------------------------------------

def test_a_search_measures_the_default_and_the_trivial_schedule_first():
    args = _add()
    run = _Runner(args)
    s = tc.auto_schedule(args, trials=1, runner=run, progress=False)
    default = _sig(apply_rules(args, Knobs(), cpu_model()).trace.to_json())
    assert run.batches[0] == [default, run.triv]
    res = s.tune_result
    assert [t.knobs["trivial"] for t in res.trials] == [False, True]
    # the trivial one measured faster: returned
    assert _sig(res.best.trace) == run.triv
    assert _sig(s.trace.to_json()) == run.triv


def test_a_search_returns_nothing_measured_slower_than_either(tmp_path):
    args = _add()
    run = _Runner(args, fast=1e-3, slow=5e-3)
    log = tmp_path / "t.jsonl"
    s = tc.auto_schedule(args, trials=6, runner=run, progress=False, log=str(log), seed=3)
    res = s.tune_result
    assert run.batches[0][:2] == [res.trials[0].trace and _sig(res.trials[0].trace), run.triv]
    # (every other candidate "took" 5 ms): the trivial one, a finalist
    assert _sig(s.trace.to_json()) == run.triv
    assert any(_sig(t.trace) == run.triv for t in res.finalists)
    # the log replays it
    again = tc.auto_schedule(args, log=str(log))
    assert _sig(again.trace.to_json()) == run.triv


def test_check_trivial_measures_the_two_once():
    args = _add()
    run = _Runner(args, fast=3e-3, slow=1e-3)   # the rules' schedule faster
    s = tc.auto_schedule(args, check_trivial=True, runner=run, progress=False)
    assert len(run.batches) == 1 and len(run.batches[0]) == 2   # no final round
    assert _sig(s.trace.to_json()) != run.triv
    assert len(s.tune_result.trials) == 2 and s.tune_result.requested == 2
    run = _Runner(args, fast=1e-3, slow=3e-3)
    s = tc.auto_schedule(args, check_trivial=True, runner=run, progress=False)
    assert _sig(s.trace.to_json()) == run.triv


def test_nothing_is_measured_unless_asked():
    args = _add()
    run = _Runner(args)
    s = tc.auto_schedule(args, runner=run)
    assert run.batches == [] and getattr(s, "tune_result", None) is None
    s = tc.auto_schedule(args, check_trivial=False, runner=run)
    assert run.batches == []


def test_config_sets_the_trivial_schedule():
    args = _add()
    cfg = tc.autoschedule.default_config(args)
    assert cfg["trivial"] is False
    s = tc.autoschedule.apply_config(args, cfg.set("trivial", True))
    assert _sig(s.trace.to_json()) == _sig(trivial.trivial_schedule(args).trace.to_json())


def test_no_comparison_where_the_rules_made_stages_of_their_own(monkeypatch):
    # an argmax along rows of 40: the rules' vector partial pairs (rfactor), whose lanes
    # the code generator combines as a tree, where the IR shows a serial loop of 16
    def fail(*a, **k):
        raise AssertionError("scored")
    monkeypatch.setattr(trivial, "nest_cycles", fail)
    X = tc.placeholder((6, 40), name="X")
    Y = tc.nn.argmax(X, axis=-1)
    assert trivial.tiny([X, Y], ZEN4)
    k = Knobs()
    apply_rules([X, Y], k, ZEN4)
    assert k.defaults["trivial"] is False and k.values.get("argmax.tuple_rows") is True
