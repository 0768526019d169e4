"""Tuning records: the workload key (structural, name-free), appending from several
processes, a corrupted log, the cost model."""
import json
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tecomp as tc
from tecomp.autoschedule import records
from tecomp.autoschedule.cost_model import GBDT, CostModel

DAG = textwrap.dedent('''
    import tecomp as tc
    def dag(names=("A", "B", "k", "C"), n=32, c=2.0, dtype="float32", off=0, red=16):
        A = tc.placeholder((n, red), name=names[0], dtype=dtype)
        B = tc.placeholder((red, n), name=names[1], dtype=dtype)
        k = tc.reduce_axis((0, red), name=names[2])
        C = tc.compute((n, n), lambda i, j: tc.sum(A[i, k] * B[k, (j + off) % n] * c, axis=k),
                       name=names[3])
        return [A, B, C]
''')
ns = {}
exec(DAG, ns)  # noqa: S102
dag = ns["dag"]


def test_key_ignores_names_and_sees_structure():
    k = records.workload_key(dag())
    assert k == records.workload_key(dag(("X", "Y", "r", "Z")))
    assert k["target"] == "llvm" and k["shapes"] == {} and k["cpu"]
    for other in (dict(n=33), dict(dtype="float64"), dict(c=3.0), dict(off=1), dict(red=17)):
        assert records.workload_key(dag(**other))["hash"] != k["hash"], other
    assert records.workload_key(dag(), shapes={"n": 4}) != k


def test_key_names_the_microarchitecture(monkeypatch, tmp_path):
    """Two machines whose /proc/cpuinfo say the same ("AMD EPYC" on a VM's Zen 3, 4 and
    5) get other keys where LLVM names their cores apart: a record tuned on one is not
    replayed on the other."""
    from tecomp import target as tgt
    from tecomp import target as machine

    monkeypatch.setattr(machine, "cpu_name", lambda: "AMD EPYC")
    here = records.workload_key(dag())
    assert here["cpu"].startswith(f"AMD EPYC ({tc.Target('llvm').cpu}, ")
    args = dag()
    log = str(tmp_path / "log.jsonl")
    records.append_record(log, records.make_record(here, [], [1e-3]))
    assert records.best_record(log, records.workload_key(args)) is not None
    # the other machine: a Zen whose LLVM name is not this machine's (on a Zen 5, znver4)
    other = next(c for c in ("znver5", "znver4") if c != tc.Target("llvm").cpu)
    real = tgt.Target.cpu
    monkeypatch.setattr(tgt.Target, "cpu", property(
        lambda t: other if t.is_host else real.fget(t)))
    there = records.workload_key(args)
    assert there["cpu"].startswith(f"AMD EPYC ({other}, ") and there["hash"] == here["hash"]
    assert records.best_record(log, there) is None


def test_key_is_the_same_in_another_process():
    code = DAG + "\nfrom tecomp.autoschedule import records\nimport json\n" \
        "print(json.dumps(records.workload_key(dag())))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert json.loads(out) == records.workload_key(dag())


def test_round_trip_and_best(tmp_path):
    log = tmp_path / "sub" / "log.jsonl"
    key = records.workload_key(dag())
    other = records.workload_key(dag(n=8))
    records.append_record(log, records.make_record(key, [["a"]], [3e-3, 2e-3, 4e-3]))
    records.append_record(log, records.make_record(key, [["b"]], [1e-3, 1e-3, 9.0]))
    records.append_record(log, records.make_record(key, [["c"]], None, "crashed: SIGSEGV"))
    records.append_record(log, records.make_record(other, [["d"]], [1e-9]))
    records.append_record(log, records.make_record(key, [["e"]], [1e-3], trial=4))
    assert (log.stat().st_mode & 0o777) == 0o600
    got = records.load_records(log, key)
    assert [r["trace"] for r in got] == [[["a"]], [["b"]], [["c"]], [["e"]]]
    assert got[2]["ok"] is False and got[3]["trial"] == 4
    # lowest median; ties: the first in the log
    assert records.best_record(log, key)["trace"] == [["b"]]
    assert records.best_record(tmp_path / "missing.jsonl", key) is None


def test_corrupted_lines_are_skipped_with_a_warning(tmp_path):
    log = tmp_path / "log.jsonl"
    key = records.workload_key(dag())
    good = json.dumps(records.make_record(key, [["ok"]], [1e-3]))
    bad = [good[:40], "\x00\xff\xfe garbage", "[1, 2, 3]",
           json.dumps(dict(json.loads(good), times="fast")),
           json.dumps(dict(json.loads(good), trace={"not": "a list"})),
           "x" * 500]
    log.write_bytes(("\n".join([good] + bad + [good]) + "\n").encode("utf-8", "surrogateescape"))
    with pytest.warns(records.RecordWarning) as w:
        got = records.load_records(log, key)
    assert len(got) == 2
    msgs = [str(x.message) for x in w]
    assert len(msgs) == len(bad)
    assert all(m.startswith(f"{log}:") and "line skipped" in m for m in msgs)
    assert all(len(m) < len(str(log)) + 200 for m in msgs)      # no whole line echoed


def _append_many(path, who):
    from tecomp.autoschedule import records as r

    key = {"hash": "h", "shapes": {}, "target": "llvm", "cpu": "c"}
    for i in range(50):
        r.append_record(path, r.make_record(key, [["w", who, i, "x" * 300]], [1e-3]))


def test_appends_from_several_processes(tmp_path):
    import multiprocessing as mp

    log = str(tmp_path / "shared.jsonl")
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_append_many, args=(log, w)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    lines = open(log).read().splitlines()
    assert len(lines) == 200
    got = {(json.loads(x)["trace"][0][1], json.loads(x)["trace"][0][2]) for x in lines}
    assert got == {(w, i) for w in range(4) for i in range(50)}


def test_gbdt_fits_a_nonlinear_function():
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, (600, 6))
    y = X[:, 0] * X[:, 1] + np.sin(X[:, 2])
    m = GBDT(seed=1).fit(X[:500], y[:500])
    p = m.predict(X[500:])
    assert 1 - ((p - y[500:]) ** 2).mean() / y[500:].var() > 0.8
    assert np.array_equal(p, GBDT(seed=1).fit(X[:500], y[:500]).predict(X[500:]))
    # degenerate data: one sample, constant targets
    assert GBDT().fit(X[:1], y[:1]).predict(X[:3]).tolist() == [y[0]] * 3
    assert np.allclose(GBDT().fit(X[:50], np.ones(50)).predict(X[:5]), 1.0)


def test_cost_model_ranks_candidates():
    rng = np.random.default_rng(0)
    F = rng.integers(0, 6, (200, 5)).astype(float)
    secs = np.exp(0.3 * (F[:, 0] - 2) ** 2 + 0.2 * F[:, 1] * F[:, 2] / 5 + 0.01 *
                  rng.standard_normal(200)) * 1e-3
    secs[:5] = np.inf                                   # failures
    m = CostModel(seed=0)
    assert np.all(m.predict(list(F[:3])) == 0)          # untrained: no preference
    m.update(list(F[:150]), list(secs[:150]))
    score = m.predict(list(F[150:]))
    def ranks(v):
        return np.argsort(np.argsort(v))
    assert np.corrcoef(ranks(score), ranks(-secs[150:]))[0, 1] > 0.7   # Spearman


def test_best_record_prefers_the_final_measurements(tmp_path):
    """A search's finalists, measured again at its end (search "final"), outrank a
    single lucky early measurement of another candidate."""
    log = tmp_path / "r.jsonl"
    key = {"hash": "k", "shapes": {}, "target": "llvm", "cpu": "x"}
    lucky = [["split", {"s": 0}, [{"ax": [0, 0]}], {"factor": 4}]]
    steady = [["split", {"s": 0}, [{"ax": [0, 0]}], {"factor": 8}]]
    records.append_record(log, records.make_record(key, lucky, [0.9], search="model"))
    records.append_record(log, records.make_record(key, steady, [1.0], search="model"))
    assert records.best_record(log, key)["trace"] == lucky
    records.append_record(log, records.make_record(key, lucky, [0.9, 1.3, 1.3], search="final"))
    records.append_record(log, records.make_record(key, steady, [1.0, 1.0, 1.1], search="final"))
    assert records.best_record(log, key)["trace"] == steady


def _hostile_lines(good: str) -> dict:
    """Lines of a log written by somebody else: each must be skipped with a warning, and
    none may raise out of the reader (a RecursionError, an OverflowError...)."""
    deep = "[" * 100_000 + "]" * 100_000
    return {
        "100,000-deep JSON": deep,
        "a 100,000-deep trace": good.replace('"trace": []', f'"trace": [{deep}]'),
        "20-deep trace": good.replace('"trace": []', '"trace": ' + "[" * 20 + "]" * 20),
        "a time of 10**4000": good.replace("[0.001]", "[1" + "0" * 4000 + "]"),
        "a time of 10**20": good.replace("[0.001]", "[100000000000000000000]"),
        "a time of 1e400": good.replace("[0.001]", "[1e400]"),
        "NaN": good.replace("[0.001]", "[NaN]"),
        "-Infinity": good.replace("[0.001]", "[-Infinity]"),
        "a bool time": good.replace("[0.001]", "[true]"),
        "a key twice": good[:-1] + ', "times": [1e-9]}',
        "another version": good.replace('"v": 1', '"v": 2'),
        "version true": good.replace('"v": 1', '"v": true'),
        "an error that is no string": good.replace('"error": null', '"error": [1]'),
        "a line of 1 MiB": good.replace('"trace": []', '"trace": ["' + "x" * (1 << 20) + '"]'),
        "a lone surrogate": good.replace('"trace": []', '"trace": ["\\ud800"]'),
        "a surrogate in UTF-8": good.replace('"trace": []', '"trace": ["\xed\xa0\x80"]'),
    }


def test_hostile_lines_are_skipped_with_a_warning(tmp_path):
    args = dag()
    key = records.workload_key(args)
    good = json.dumps(records.make_record(key, [], [1e-3]))
    bad = _hostile_lines(good)
    log = tmp_path / "log.jsonl"
    log.write_bytes(("\n".join([good] + list(bad.values()) + [good]) + "\n").encode("latin-1"))
    with pytest.warns(records.RecordWarning) as w:
        got = records.load_records(log, key, lines=True)
    assert [n for n, _ in got] == [1, len(bad) + 2]
    msgs = [str(x.message) for x in w]
    assert [m.split(":")[1] for m in msgs] == [str(n) for n in range(2, len(bad) + 2)], msgs
    assert all(m.startswith(f"{log}:") and "line skipped" in m and len(m) < len(str(log)) + 200
               for m in msgs), msgs
    # and through auto_schedule: the analytic schedule, no raw Python error
    log.write_bytes(("\n".join(bad.values()) + "\n").encode("latin-1"))
    with pytest.warns(records.RecordWarning):
        s = tc.auto_schedule(args, log=str(log))
    assert s.trace.to_json() == tc.auto_schedule(args).trace.to_json()


def test_a_log_larger_than_the_limit(tmp_path, monkeypatch):
    log = tmp_path / "big.jsonl"
    log.write_bytes(b"\n" * 2000)
    monkeypatch.setattr(records, "MAX_LOG_BYTES", 1000)
    with pytest.raises(tc.AutoScheduleError, match=r"load_records: the log .*big\.jsonl' has "
                       r"2000 bytes, more than the 1000 tecomp reads"):
        tc.auto_schedule(dag(), log=str(log))


def _forged(key, trace, seconds, **extra):
    return json.dumps(records.make_record(key, trace, [seconds], **extra))


def test_forged_records_are_skipped_and_the_next_one_replays(tmp_path):
    """The fastest records of a workload that do not replay (forged: a split factor of
    2**32+1, which made the loop nest vanish; an explicit unroll of 16384 copies, which
    took minutes to build; a GPU thread on the CPU; a step that names an axis a later step
    makes) are skipped, each with a warning naming the line; the first that replays is the
    schedule, and it computes C."""
    from tecomp.autoschedule import AutoScheduleWarning

    A = tc.placeholder((128, 128), name="A")
    C = tc.compute((128, 128), lambda i, j: A[i, j] * 2.0 + 1.0, name="C")
    args = [A, C]
    key = records.workload_key(args)
    ax = lambda p: {"ax": [0, p]}  # noqa: E731
    forged = [
        [["split", {"s": 0}, [ax(0)], {"factor": 2**32 + 1}]],
        [["fuse", {"s": 0}, [ax(0), ax(1)], {}], ["pragma", {"s": 0}, [ax(2), "unroll_explicit"],
                                                  {}]],
        [["bind", {"s": 0}, [ax(1), {"thread": "threadIdx.x"}], {}]],
        [["vectorize", {"s": 0}, [ax(3)], {}], ["split", {"s": 0}, [ax(1)], {"factor": 16}]],
        [["split", {"s": 0}, [ax(1)], {"factor": 16.0}]],
    ]
    good = [["split", {"s": 0}, [ax(1)], {"factor": 16}], ["vectorize", {"s": 0}, [ax(3)], {}]]
    lines = [_forged(key, t, 1e-6 * (n + 1)) for n, t in enumerate(forged)]
    lines.append(_forged(key, good, 1.0))
    log = tmp_path / "forged.jsonl"
    log.write_text("\n".join(lines) + "\n")
    with pytest.warns(AutoScheduleWarning) as w:
        s = tc.auto_schedule(args, log=str(log))
    msgs = [str(x.message) for x in w if issubclass(x.category, AutoScheduleWarning)]
    assert [m.split(": auto_schedule:")[0] for m in msgs] == [f"{log}:{n}" for n in range(1, 6)]
    assert "factor=4294967297 for axis 'i' of extent 128; a factor is at most" in msgs[0]
    assert "16384 copies" in msgs[1]
    assert "GPU thread axis" in msgs[2]
    assert "names something this DAG does not have" in msgs[3]
    assert "factor=16.0 is not an int" in msgs[4]
    assert s.trace.to_json() == good
    a = np.random.default_rng(0).random((128, 128)).astype("float32")
    c = np.zeros_like(a)
    tc.build(s, args)(a, c)
    np.testing.assert_allclose(c, a * 2 + 1, rtol=1e-6)
    # only forged ones: the analytic schedule, with a warning that says so
    log.write_text("\n".join(lines[:-1]) + "\n")
    with pytest.warns(AutoScheduleWarning) as w:
        s = tc.auto_schedule(args, log=str(log))
    assert len(w) == 6 and re.fullmatch(r"auto_schedule: none of the 5 best records of this "
                                        r"workload in .* replays; using the analytic schedule",
                                        str(w[-1].message))
    assert s.trace.to_json() == tc.auto_schedule(args).trace.to_json()


def test_a_forged_pragma_value_prints_as_valid_python(tmp_path):
    """Strings a record holds reach the printed Python only as literals."""
    A = tc.placeholder((64,), name="A")
    C = tc.compute((64,), lambda i: A[i] + 1.0, name="C")
    value = "a'\"\n)\nimport os  # \u2028\\"
    steps = [["pragma", {"s": 0}, [{"ax": [0, 0]}, "note", value], {}]]
    from tecomp.schedule.trace import replay

    s = replay(steps, [C])
    src = s.trace.python([A, C])
    assert "import os" not in src.replace(repr(value), "")
    ns = {}
    exec("import tecomp as tc\n" + src, ns)  # noqa: S102 - our own printed trace
    assert ns["schedule"](A, C)[C].iter_attrs[C.op.axis[0]].pragmas == (("note", value),)
