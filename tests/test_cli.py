"""``python -m tecomp``: info, show, tune and bench, run as a user runs them (a child
process).  A log or library that cannot be used is one line on stderr and exit status 2,
never a traceback; what a file holds is escaped before it is printed."""
import json
import os
import subprocess
import sys

import pytest

import tecomp as tc
from tecomp.autoschedule import records

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(*argv, timeout=120):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-m", "tecomp", *argv], capture_output=True,
                       text=True, timeout=timeout, env=env, cwd=ROOT)
    assert "Traceback" not in p.stderr, p.stderr
    return p


def _key(h="ab" * 32, target="llvm", shapes=None):
    return {"hash": h, "shapes": shapes or {}, "target": target, "cpu": "Some CPU"}


def _write_log(path, recs, extra_lines=()):
    for r in recs:
        records.append_record(path, r)
    with open(path, "a") as f:
        for x in extra_lines:
            f.write(x + "\n")


@pytest.fixture
def log(tmp_path):
    p = tmp_path / "t.jsonl"
    k1, k2 = _key("11" * 32), _key("22" * 32, shapes={"n": 64})
    _write_log(p, [
        records.make_record(k1, [], [3e-3, 3e-3, 3e-3], search="model", trial=0),
        records.make_record(k1, [], [1e-3, 1e-3, 1e-3], search="model", trial=1),
        records.make_record(k1, [], None, "crashed: SIGSEGV", search="model", trial=2),
        records.make_record(k2, [], [2e-3], search="random", trial=0),
        records.make_record(k1, [], [2e-3, 2e-3], search="final", trial=1),
    ])
    return p


def test_info():
    """python -m tecomp info, as a table and as JSON; the cache directory it names is
    the one tecomp resolves ($TECOMP_CACHE_DIR, $XDG_CACHE_HOME/tecomp or ~/.cache/tecomp:
    the test sets none of them)."""
    from tecomp.runtime.libfiles import cache_root

    p = run("info")
    assert p.returncode == 0, p.stderr
    lines = dict(x.split(None, 1) if " " in x else (x, "") for x in p.stdout.splitlines())
    assert lines["tecomp"] == tc.__version__
    assert lines["target"] == "llvm"
    assert "float32 lanes" in lines["vector"] and "L1d" in lines["caches"]
    assert lines["threads"].isdigit()
    assert lines["cache"].split(None, 1) == ["dir", str(cache_root())]
    import numpy

    assert lines["numpy"] == numpy.__version__
    d = json.loads(run("info", "--json").stdout)
    assert d["tecomp"] == tc.__version__ and d["features"] == sorted(tc.Target("llvm").features)
    assert d["cache_dir"] == str(cache_root())
    assert set(d["packages"]) >= {"llvmlite", "numpy", "torch", "pycuda"}


def test_show_is_a_table_of_every_record(log):
    p = run("show", str(log))
    assert p.returncode == 0 and p.stderr == "", p.stderr
    out = p.stdout.splitlines()
    assert out[0].split() == ["line", "workload", "target", "search", "trial", "ms", "runs",
                              "status"]
    rows = [x.split() for x in out[2:]]
    assert [r[0] for r in rows] == ["1", "2", "3", "4", "5"]
    assert rows[1][1:7] == ["1" * 12, "llvm", "model", "1", "1", "3"]
    assert " ".join(rows[2][6:]) == "0 failed: crashed: SIGSEGV" and rows[2][5] == "-"
    p = run("show", str(log), "--workload", "22")
    assert [x.split()[0] for x in p.stdout.splitlines()[2:]] == ["4"]
    p = run("show", str(log), "--limit", "2")
    assert len(p.stdout.splitlines()) == 2 + 2 + 1 and "3 more records" in p.stdout


def test_tune_is_the_best_record_per_workload(log):
    p = run("tune", str(log))
    assert p.returncode == 0, p.stderr
    out = p.stdout.splitlines()
    assert out[0].split() == ["workload", "target", "shapes", "ok", "best", "ms", "line",
                              "search", "cpu"]
    rows = [x.split() for x in out[2:]]
    # the first workload: the finalists' records come first (as auto_schedule replays)
    assert rows[0][:7] == ["1" * 12, "llvm", "-", "3/4", "2", "5", "final"]
    assert rows[1][:7] == ["2" * 12, "llvm", "n=64", "1/1", "2", "4", "random"]
    assert " ".join(rows[0][7:]) == "Some CPU"


def test_a_log_with_some_bad_lines_warns_and_shows_the_rest(log):
    with open(log, "a") as f:
        f.write("not json\n")
        f.write('{"v": 1, "workload": {}, "trace": [], "times": [NaN]}\n')
    p = run("show", str(log))
    assert p.returncode == 0
    err = p.stderr.splitlines()
    assert len(err) == 2 and all(x.startswith("tecomp show: warning: ") for x in err)
    assert f"{log}:6: not JSON" in err[0] and "NaN is not a JSON number" in err[1]
    assert len(p.stdout.splitlines()) == 2 + 5


def test_what_a_log_holds_is_escaped(tmp_path):
    p = tmp_path / "evil.jsonl"
    _write_log(p, [records.make_record(_key("\x1b[2J" + "0" * 60, target="llvm\x1b[31m"), [],
                                       None, "boom\r\x07\u202e", search="x\x1b")])
    for cmd in ("show", "tune"):
        r = run(cmd, str(p))
        assert r.returncode == 0
        assert not any(c in r.stdout for c in "\x1b\x07\r\u202e"), r.stdout
        assert "<U+001B>[2J" in r.stdout and "llvm<U+001B>[31m" in r.stdout


def test_records_with_odd_fields_are_shown_not_crashed_on(tmp_path):
    # valid records (the fields a search reads are checked) whose other fields are of
    # unexpected types: shown as JSON, escaped
    p = tmp_path / "odd.jsonl"
    with open(p, "w") as f:
        for w, extra in [({"hash": 7, "shapes": [1, 2], "target": {"a": 1}}, {"trial": {"x": []}}),
                         ({"shapes": {"n": "\x1b[31m", "m": [3]}, "cpu": 5}, {"trial": "t"}),
                         ({"hash": "ab" * 32, "shapes": "n=3"}, {})]:
            rec = {"v": 1, "workload": w, "trace": [], "times": [1e-3], "ok": True, **extra}
            f.write(json.dumps(rec) + "\n")
    for cmd in ("show", "tune"):
        r = run(cmd, str(p))
        assert r.returncode == 0 and r.stderr == "", r.stderr
        assert "\x1b" not in r.stdout
    out = run("tune", str(p)).stdout.splitlines()
    assert [x.split()[:3] for x in out[2:]] == [["?", '{"a":', "1}"],
                                                ["?", "-", "n=<U+001B>[31m,m=[3]"],
                                                ["ab" * 6, "-", "n=3"]]


@pytest.mark.parametrize("cmd", ["show", "tune"])
def test_unusable_logs_are_one_error_line_and_status_2(tmp_path, cmd):
    (tmp_path / "bin").write_bytes(bytes(range(256)) * 20)
    (tmp_path / "text.jsonl").write_text("hello\nworld\n")
    (tmp_path / "wrong.jsonl").write_text('{"v": 2, "workload": {}, "trace": []}\n')
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dir").mkdir()
    cases = {
        "missing": "does not exist",
        "bin": "is not a tuning log: none of its 21 lines is a record (line 1: not JSON",
        "text.jsonl": "is not a tuning log: none of its 2 lines is a record (line 1: not JSON",
        "wrong.jsonl": "(line 1: version 2, not 1",
        "fifo": "is a FIFO (named pipe), not a regular file",
        "dir": "is a directory",
    }
    for name, msg in cases.items():
        p = run(cmd, str(tmp_path / name))
        assert p.returncode == 2, (name, p.stdout, p.stderr)
        assert p.stdout == "" and len(p.stderr.splitlines()) == 1, (name, p.stderr)
        assert p.stderr.startswith(f"tecomp {cmd}: error: ") and msg in p.stderr, p.stderr


def test_an_empty_log_has_no_records(tmp_path):
    (tmp_path / "e.jsonl").write_text("")
    p = run("tune", str(tmp_path / "e.jsonl"))
    assert p.returncode == 0 and p.stdout.strip().endswith("no records")


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    d = tmp_path_factory.mktemp("lib")
    n = tc.var("n")
    A = tc.placeholder((n, 8), name="A")
    I = tc.placeholder((n,), name="I", dtype="int32")
    B = tc.compute((n, 8), lambda i, j: A[I[i], j] * 2.0, name="B")
    f = tc.build(tc.create_schedule(B.op), [A, I, B], name="gather2")
    path = str(d / "gather2.so")
    f.export_library(path)
    return path


def test_bench_times_a_library_on_inputs_of_its_shapes(library):
    p = run("bench", library, "--var", "n=100", "--number", "2", "--repeat", "2",
            "--min-repeat-ms", "0")
    assert p.returncode == 0, p.stderr
    out = p.stdout.splitlines()
    assert out[0] == "gather2(A: float32[100, 8], I: int32[100], B: float32[100, 8])"
    assert out[1].startswith("  median ") and "(2 repeats of 2 calls)" in out[1]


def test_bench_says_which_extent_needs_a_value(library):
    p = run("bench", library)
    assert p.returncode == 2 and p.stderr == (
        "tecomp bench: error: kernel gather2 has symbolic extents or scalar parameters (n): "
        "give each a value, e.g. --var n=64\n")
    p = run("bench", library, "--var", "m=3", "--var", "n=3")
    assert p.returncode == 2 and "--var names m, which kernel gather2 does not have" in p.stderr
    p = run("bench", library, "--var", "n")
    assert p.returncode == 2 and "is not NAME=NUMBER" in p.stderr
    p = run("bench", library, "--var", "n=-4")
    assert p.returncode == 2 and "A would have the shape (-4, 8): give --var values" in p.stderr
    for n in (10 ** 15, 2 ** 62):
        p = run("bench", library, "--var", f"n={n}")
        assert p.returncode == 2 and "more than half of this machine's" in p.stderr


def test_bench_refuses_unusable_libraries(tmp_path, library, log):
    import shutil

    shutil.copy(library, tmp_path / "nosidecar.so")
    data = bytearray(open(library, "rb").read())
    data[len(data) // 2] ^= 0xFF
    (tmp_path / "damaged.so").write_bytes(bytes(data))
    shutil.copy(library + ".sha256", tmp_path / "damaged.so.sha256")
    cases = {str(tmp_path / "missing.so"): "does not exist",
             str(log): "is not a shared library (not an ELF file)",
             str(tmp_path / "nosidecar.so"): "has no sha256 sidecar",
             str(tmp_path / "damaged.so"): "does not match its sha256 sidecar",
             str(tmp_path): "is a directory"}
    for path, msg in cases.items():
        p = run("bench", path, "--var", "n=4")
        assert p.returncode == 2, (path, p.stderr)
        assert p.stderr.startswith("tecomp bench: error: library ") and msg in p.stderr
        assert len(p.stderr.splitlines()) == 1


def test_usage_errors_exit_2():
    p = run()
    assert p.returncode == 2 and "COMMAND" in p.stderr
    p = run("bench", "x.so", "--number", "0")
    assert p.returncode == 2 and "is not an integer >= 1" in p.stderr
    p = run("show", "x.jsonl", "--limit", "-1")
    assert p.returncode == 2 and "'-1' is not an integer >= 0" in p.stderr


def test_verbose_logs_to_stderr(library):
    p = run("-vv", "bench", library, "--var", "n=4", "--number", "1", "--repeat", "1",
            "--min-repeat-ms", "0")
    assert p.returncode == 0, p.stderr
    p = run("-v", "info")
    assert p.returncode == 0


def test_load_module_is_logged_at_debug(library, caplog):
    import logging

    caplog.set_level(logging.DEBUG, logger="tecomp.runtime.aot")
    tc.load_module(library)
    (r,) = [r for r in caplog.records if r.name == "tecomp.runtime.aot"]
    assert r.levelno == logging.DEBUG and r.getMessage().startswith(
        f"load_module library '{library}': kernel gather2 for target 'llvm'")
