"""What the measured search says: the ``tecomp`` loggers, the progress display (tqdm when
installed, a plain fallback, off on request), ``repr(TuneResult)`` and ``summary()``.

The searches here measure with a fake runner (no child process, times made up from the
candidate): what is checked is what the search reports, never a timing."""
import io
import logging
import sys
import types

import pytest

import tecomp as tc
from tecomp.autoschedule import search
from tecomp.autoschedule.measure import MeasureResult


class FakeRunner:
    """Measures nothing: a candidate's "time" is made from its trace (distinct,
    deterministic)."""

    def __init__(self):
        self.payloads = []

    def run(self, args, build_fn, payloads, shapes=None, **kw):
        self.payloads.extend(payloads)
        return [MeasureResult(True, [1e-3 + 1e-6 * (len(repr(p)) % 97)]) for p in payloads]


def _add_one(n):
    A = tc.placeholder((n,), name="A")
    B = tc.compute((n,), lambda i: A[i] + 1.0, name="B")
    return [A, B]


def _gemm(n=16):
    A = tc.placeholder((n, n), name="A")
    W = tc.placeholder((n, n), name="W")
    k = tc.reduce_axis((0, n), name="k")
    C = tc.compute((n, n), lambda i, j: tc.sum(A[i, k] * W[k, j], axis=k), name="C")
    return [A, W, C]


def test_tecomp_logger_is_quiet_by_default():
    root = logging.getLogger("tecomp")
    assert any(isinstance(h, logging.NullHandler) for h in root.handlers)
    assert logging.getLogger("tecomp.autoschedule.search").parent.name in (
        "tecomp.autoschedule", "tecomp")


def test_search_logs_space_trials_and_why_it_stopped_early(caplog):
    # 16 trials asked, but the space of this compute has 3 distinct schedules (the rules'
    # two, vectorized or not, and the trivial one): the search must say it measured 3
    # because there are 3
    caplog.set_level(logging.DEBUG, logger="tecomp")
    s = tc.auto_schedule(_add_one(4), trials=16, runner=FakeRunner(), progress=False)
    res = s.tune_result
    assert len(res.trials) == 3
    assert res.stopped.startswith("measured 3 of trials=16 because the search space has "
                                  "only 3 distinct schedules")
    msgs = [(r.name, r.levelno, r.getMessage()) for r in caplog.records]
    search_info = [m for n, lv, m in msgs
                   if n == "tecomp.autoschedule.search" and lv == logging.INFO]
    assert any("trials=16" in m and "knobs" in m for m in search_info), search_info
    assert any(res.stopped in m for m in search_info), search_info
    assert any(m.startswith("auto_schedule B: best") for m in search_info), search_info
    # every trial at DEBUG
    trials = [m for n, lv, m in msgs if lv == logging.DEBUG and ": trial " in m]
    assert len(trials) == 3


def test_search_that_uses_its_trials_says_no_stop_reason(caplog):
    caplog.set_level(logging.INFO, logger="tecomp")
    s = tc.auto_schedule(_gemm(), trials=3, runner=FakeRunner(), progress=False)
    assert len(s.tune_result.trials) == 3 and s.tune_result.stopped == ""
    assert not any("because" in r.getMessage() for r in caplog.records)


def test_timeout_is_a_stop_reason(caplog, monkeypatch):
    caplog.set_level(logging.INFO, logger="tecomp")
    calls = []

    def clock():   # the start and the first round at 0 s, then 100 s later
        calls.append(1)
        return 0.0 if len(calls) <= 2 else 100.0

    monkeypatch.setattr(search.time, "monotonic", clock)
    s = tc.auto_schedule(_gemm(), trials=50, timeout=1, runner=FakeRunner(), progress=False)
    res = s.tune_result
    assert res.stopped == f"the timeout of 1 s ran out after {len(res.trials)} of trials=50"
    assert 0 < len(res.trials) < 50 and res.finalists == []
    assert any(res.stopped in r.getMessage() for r in caplog.records)


def test_log_replay_and_analytic_schedule_are_logged(caplog, tmp_path):
    log = tmp_path / "t.jsonl"
    args = _add_one(4)
    tc.auto_schedule(args, trials=2, runner=FakeRunner(), progress=False, log=log)
    caplog.set_level(logging.DEBUG, logger="tecomp")
    tc.auto_schedule(args, log=log)
    tc.auto_schedule(_add_one(5), log=log)
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "the best record of this workload in" in text
    assert "no record of this workload" in text
    assert "the rule-based schedule" in text


def test_build_is_logged_at_debug(caplog):
    caplog.set_level(logging.DEBUG, logger="tecomp.build")
    A, B = _add_one(4)
    tc.build(tc.create_schedule(B.op), [A, B], name="add_one")
    assert any(r.name == "tecomp.build" and r.levelno == logging.DEBUG
               and "build add_one for target llvm" in r.getMessage() for r in caplog.records)


def test_tune_result_repr_is_one_short_line_and_summary_a_table(tmp_path):
    log = tmp_path / "g.jsonl"
    s = tc.auto_schedule(_gemm(), trials=4, runner=FakeRunner(), progress=False, log=log)
    res = s.tune_result
    r = repr(res)
    assert "\n" not in r and len(r) < 200, r
    assert r.startswith("TuneResult(workload='C', target='llvm', best ")
    assert "GFLOP/s" in r and "trials=4/4" in r and f"log={str(log)!r}" in r
    assert res.flops == 16 * 16 * 16 * 2
    assert res.gflops == pytest.approx(res.flops / res.best_seconds / 1e9)
    text = res.summary()
    lines = text.splitlines()
    assert lines[0] == "auto_schedule search of 'C' for target 'llvm'"
    assert any(x.split() == ["measured:", "4", "of", "trials=4"] for x in lines)
    head = lines.index(next(x for x in lines if x.startswith("rank")))
    assert lines[head].split() == ["rank", "trial", "ms", "GFLOP/s", "knobs"]
    rows = lines[head + 2:]
    assert len(rows) == 4 and [x.split()[0] for x in rows] == ["1", "2", "3", "4"]
    assert len(res.summary(top=2).splitlines()) == head + 4


def test_flops_of_a_symbolic_extent_needs_shapes():
    n = tc.var("n")
    A = tc.placeholder((n,), name="A")
    B = tc.compute((n,), lambda i: A[i] * 2.0 + 1.0, name="B")
    assert search.workload_flops([A, B]) is None
    assert search.workload_flops([A, B], {"n": 10}) == 20


# ---------------------------------------------------------------------------------------
# the progress display


class _Stream(io.StringIO):
    def __init__(self, tty):
        super().__init__()
        self.tty = tty

    def isatty(self):
        return self.tty


class _FakeTqdm:
    made = []

    def __init__(self, total, desc, unit, file, **kw):
        self.total, self.desc, self.n, self.post, self.closed = total, desc, 0, "", False
        _FakeTqdm.made.append(self)

    def set_postfix_str(self, s, refresh=True):
        self.post = s

    def set_description_str(self, s, refresh=True):
        self.desc = s

    def update(self, k):
        self.n += k

    def close(self):
        self.closed = True


def _with_tqdm(monkeypatch):
    auto = types.ModuleType("tqdm.auto")
    auto.tqdm = _FakeTqdm
    pkg = types.ModuleType("tqdm")
    pkg.auto = auto
    monkeypatch.setitem(sys.modules, "tqdm", pkg)
    monkeypatch.setitem(sys.modules, "tqdm.auto", auto)
    _FakeTqdm.made = []


def _without_tqdm(monkeypatch):
    # (None in sys.modules: `import tqdm` raises ImportError, as when it is absent)
    monkeypatch.setitem(sys.modules, "tqdm", None)
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)


def test_progress_uses_tqdm_on_a_terminal_when_installed(monkeypatch):
    _with_tqdm(monkeypatch)
    err = _Stream(tty=True)
    monkeypatch.setattr(sys, "stderr", err)
    tc.auto_schedule(_add_one(4), trials=16, runner=FakeRunner())
    (bar,) = _FakeTqdm.made
    assert bar.total == 16 and bar.n == 3 and bar.closed and bar.post.startswith("best ")
    # (the bar writes itself; the fake one does not) why it stopped: a line after the bar
    assert err.getvalue() == ("auto_schedule B: measured 3 of trials=16 because the search "
                              "space has only 3 distinct schedules that lower (its 16 knob "
                              "combinations give no other)\n")


def test_progress_without_tqdm_on_a_terminal_is_one_line(monkeypatch):
    _without_tqdm(monkeypatch)
    err = _Stream(tty=True)
    monkeypatch.setattr(sys, "stderr", err)
    tc.auto_schedule(_gemm(), trials=3, runner=FakeRunner())
    out = err.getvalue()
    assert out.count("\r") == 3 and out.endswith("\n") and out.count("\n") == 1
    assert "\rauto_schedule C: 3/3 trials, best " in out


def test_progress_in_a_log_is_plain_lines_without_carriage_returns(monkeypatch):
    # a CI job's stderr is no terminal: lines, about ten a search, never a \r, and tqdm
    # (which redraws with \r) is not used even where it is installed
    _with_tqdm(monkeypatch)
    err = _Stream(tty=False)
    monkeypatch.setattr(sys, "stderr", err)
    tc.auto_schedule(_add_one(4), trials=16, runner=FakeRunner())
    out = err.getvalue()
    assert _FakeTqdm.made == [] and "\r" not in out
    lines = out.splitlines()
    assert lines[:2] == [x for x in lines if "/16 trials" in x][:2]
    assert lines[0].startswith("auto_schedule B: 1/16 trials, best ")
    assert lines[-1].startswith("auto_schedule B: stopped at 3/16 trials: measured 3 of "
                                "trials=16 because the search space has only 3")


def test_progress_lines_are_about_ten_for_a_long_search(monkeypatch):
    err = _Stream(tty=False)
    monkeypatch.setattr(sys, "stderr", err)
    p = search.Progress(100, None, "x")
    for _ in range(100):
        p.update(1e-3, 0)
    p.close()
    counts = [int(x.split()[1].split("/")[0]) for x in err.getvalue().splitlines()]
    assert counts == list(range(1, 100, 10)) + [100]


@pytest.mark.parametrize("tty", [True, False])
def test_progress_false_shows_nothing(monkeypatch, tty):
    _with_tqdm(monkeypatch)
    err = _Stream(tty=tty)
    monkeypatch.setattr(sys, "stderr", err)
    tc.auto_schedule(_add_one(4), trials=16, runner=FakeRunner(), progress=False)
    assert err.getvalue() == "" and _FakeTqdm.made == []


def test_progress_in_jupyter_uses_tqdm_auto(monkeypatch):
    # a Jupyter kernel's stderr is no terminal; tqdm.auto picks the notebook widget
    _with_tqdm(monkeypatch)

    class ZMQInteractiveShell:
        pass

    ipy = types.ModuleType("IPython")
    ipy.get_ipython = lambda: ZMQInteractiveShell()
    monkeypatch.setitem(sys.modules, "IPython", ipy)
    monkeypatch.setattr(sys, "stderr", _Stream(tty=False))
    tc.auto_schedule(_add_one(4), trials=2, runner=FakeRunner())
    assert len(_FakeTqdm.made) == 1
