"""Tuning records: the workload key (structural, name-free), appending from several
processes, a corrupted log, the cost model."""
import json
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
    from tecomp.nn.cpu import machine

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
