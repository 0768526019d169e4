"""The default thread count: the CPUs the process may use (its affinity mask, its cgroup's
CPU quota), TECOMP_NUM_THREADS over it; for the JIT's pool, a loaded library's, and a
library's pool called from C."""
import os
import shutil
import subprocess
import sys
import warnings

import numpy as np
import pytest

import tecomp as tc
from tecomp import threads
from tecomp.testing import edges

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _pinned(code, *args, env=None):
    """Run ``code`` in a child process pinned to one CPU (taskset -c, else
    sched_setaffinity); its stdout."""
    cpu = min(os.sched_getaffinity(0))
    e = {k: v for k, v in os.environ.items() if k != "TECOMP_NUM_THREADS"}
    e.update({"PYTHONPATH": ROOT, **(env or {})})
    cmd = [sys.executable, "-c", code, *args]
    taskset = shutil.which("taskset")
    if taskset:
        p = subprocess.run([taskset, "-c", str(cpu), *cmd], capture_output=True, text=True,
                           timeout=300, env=e)
    else:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=e,
                           preexec_fn=lambda: os.sched_setaffinity(0, {cpu}))
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout.split()


_THREADS = ("import tecomp as tc\n"
            "print(tc.get_num_threads(), tc.Target('llvm').threads)")


def test_one_cpu_of_affinity_means_one_thread():
    # (os.cpu_count() gave every CPU of the machine: 2 threads on 1 CPU)
    assert _pinned(_THREADS) == ["1", "1"]


def test_tecomp_num_threads_still_overrides():
    assert _pinned(_THREADS, env={"TECOMP_NUM_THREADS": "3"}) == ["3", "3"]


_PARALLEL_LIB = """
import sys
import tecomp as tc
A = tc.placeholder((4096,), name="A")
B = tc.compute((4096,), lambda i: A[i] * 2.0, name="B")
s = tc.create_schedule(B.op)
o, i = s[B].split(B.op.axis[0], factor=256)
s[B].parallel(o)
tc.build(s, [A, B]).export_library(sys.argv[1])
"""

_FROM_C = """
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])   # as C code loads it: no tecomp, nobody sets a count
lib.tecomp_pool_get_threads.restype = ctypes.c_int32
print(lib.tecomp_pool_get_threads())
"""


def test_a_librarys_pool_called_from_c_follows_the_affinity_mask(tmp_path):
    lib = str(tmp_path / "par.so")
    subprocess.run([sys.executable, "-c", _PARALLEL_LIB, lib], check=True, timeout=300,
                   env={**os.environ, "PYTHONPATH": ROOT})
    assert _pinned(_FROM_C, lib) == ["1"]
    assert _pinned(_FROM_C, lib, env={"TECOMP_NUM_THREADS": "5"}) == ["5"]
    # a count with something after it is not one (as Python reads it: the next test)
    assert _pinned(_FROM_C, lib, env={"TECOMP_NUM_THREADS": "5 "}) == ["1"]


# ---------------------------------------------------------------------------------------
# the cgroup CPU quota, read from files laid out as the kernel does


def _cgroup(tmp_path, proc, files):
    for rel, text in files.items():
        p = tmp_path / "fs" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    (tmp_path / "proc").write_text(proc)
    return threads.cgroup_cpu_limit(str(tmp_path / "fs"), str(tmp_path / "proc"))


@pytest.mark.parametrize("proc,files,limit", [
    # cgroup v2: the process's cgroup and its ancestors, the smallest applies, rounded up
    ("0::/app.slice/job\n", {"app.slice/job/cpu.max": "150000 100000\n"}, 2),
    ("0::/app.slice/job\n", {"app.slice/job/cpu.max": "400000 100000\n",
                             "app.slice/cpu.max": "50000 100000\n"}, 1),
    ("0::/app.slice/job\n", {"app.slice/job/cpu.max": "max 100000\n"}, None),
    # a container: its cgroup is mounted as the root, /proc/self/cgroup names the host path
    ("0::/docker/0123abcd\n", {"cpu.max": "200000 100000\n"}, 2),
    # cgroup v1: the cpu hierarchy's quota and period
    ("4:memory:/x\n3:cpu,cpuacct:/docker/ab\n",
     {"cpu,cpuacct/docker/ab/cpu.cfs_quota_us": "250000\n",
      "cpu,cpuacct/docker/ab/cpu.cfs_period_us": "100000\n"}, 3),
    ("3:cpu,cpuacct:/\n", {"cpu,cpuacct/cpu.cfs_quota_us": "-1\n",
                           "cpu,cpuacct/cpu.cfs_period_us": "100000\n"}, None),
    # missing and malformed files are no quota
    ("0::/\n", {}, None),
    ("0::/\n", {"cpu.max": "lots 100000\n"}, None),
    ("0::/\n", {"cpu.max": "100000 0\n"}, None),
    ("0::/\n", {"cpu.max": "-5 100000\n"}, None),
    ("0::/\n", {"cpu.max": "\x00\xff garbage"}, None),
    ("garbage\n::\n", {"cpu.max": "300000 100000"}, 3),
    ("", {}, None),
], ids=["v2", "v2-ancestor", "v2-max", "v2-container", "v1", "v1-unlimited", "missing",
        "garbage-quota", "zero-period", "negative", "binary", "garbage-proc", "empty"])
def test_cgroup_cpu_limit(tmp_path, proc, files, limit):
    assert _cgroup(tmp_path, proc, files) == limit


def test_a_fifo_as_cpu_max_is_no_quota(tmp_path):
    (tmp_path / "fs").mkdir()
    os.mkfifo(tmp_path / "fs" / "cpu.max")   # a read would wait for a writer forever
    (tmp_path / "proc").write_text("0::/\n")
    assert threads.cgroup_cpu_limit(str(tmp_path / "fs"), str(tmp_path / "proc")) is None


def test_the_default_takes_the_quota(tmp_path, monkeypatch):
    (tmp_path / "cpu.max").write_text("100000 100000\n")
    (tmp_path / "proc").write_text("0::/\n")
    monkeypatch.setattr(threads, "CGROUP_ROOT", str(tmp_path))
    monkeypatch.setattr(threads, "PROC_SELF_CGROUP", str(tmp_path / "proc"))
    monkeypatch.delenv("TECOMP_NUM_THREADS", raising=False)
    assert threads.available_cpus() == 1 and threads.default_num_threads() == 1
    monkeypatch.setenv("TECOMP_NUM_THREADS", "4")
    assert threads.default_num_threads() == 4
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert threads.available_cpus() == len(os.sched_getaffinity(0))
    assert tc.get_num_threads() >= 1


@pytest.mark.parametrize("value, want", [
    ("2000", 2000), ("0", 0), ("2147483647", 2147483647), ("2147483648", None),
    ("18446744073709551615", None), ("18446744073709551616", None), ("-1", None), ("x", None)])
def test_a_spin_count_past_its_bound_is_ignored(monkeypatch, value, want):
    """TECOMP_SPIN / TECOMP_WAIT_SPIN reach the pool as an int64 it compares unsigned:
    2**64 - 1 spun an idle worker for ever, 2**64 (wrapped by ctypes to 0) not at all.
    Past 2**31 - 1 they are ignored with a warning, as any other bad value."""
    for name in ("TECOMP_SPIN", "TECOMP_WAIT_SPIN"):
        monkeypatch.setenv(name, value)
        if want is None:
            with pytest.warns(RuntimeWarning, match=rf"{name}='{value}' is not an integer from "
                                                    r"0 to 2147483647; ignored"):
                assert threads.spin_from_env(name) is None
        else:
            assert threads.spin_from_env(name) == want
    monkeypatch.setenv("TECOMP_WORKSPACE_LIMIT", "18446744073709551616")   # (bytes: no bound)
    assert threads.workspace_limit_from_env() == 1 << 62


#: (session 30) the on/off switches of the environment and a reader of each
SWITCHES = {
    "TECOMP_SHARED_POOL": (False, lambda: threads.shared_pool_from_env()),
    "TECOMP_LLVM_OPT_WORKER": (True, lambda: __import__(
        "tecomp.codegen.llvm.jit", fromlist=["jit"]).worker_enabled()),
    "TECOMP_DUMP_IR": (False, lambda: __import__(
        "tecomp.lower.pipeline", fromlist=["pipeline"])._dump_ir()),
    "TECOMP_PY_BINDER": (True, lambda: edges.compiled_binder_wanted()),
}


@pytest.mark.parametrize("name", list(SWITCHES))
def test_a_switch_reads_every_spelling_of_on_and_off(monkeypatch, name):
    """Each switch takes 1/0, true/false, yes/no, on/off in any case: once
    ``TECOMP_DUMP_IR=off`` printed every pass's IR, ``TECOMP_PY_BINDER=false`` kept the
    compiled binder and ``TECOMP_SHARED_POOL=yes`` was off, silently.  Anything else is
    ignored with a warning naming the variable; unset or blank is the default."""
    from tecomp.codegen.llvm import jit

    default, read = SWITCHES[name]
    if name == "TECOMP_LLVM_OPT_WORKER" and not jit._WORKER_OK:
        pytest.skip("no LLVM worker here")
    for value, want in (("1", True), (" On ", True), ("yes", True), ("TRUE", True),
                        ("0", False), ("off", False), ("No", False), ("false ", False),
                        ("", default), ("  ", default)):
        monkeypatch.setenv(name, value)
        assert read() is want, (name, value)
    monkeypatch.delenv(name)
    assert read() is default
    for value in ("abc", "2", "enable", "-1"):
        monkeypatch.setenv(name, value)
        with pytest.warns(RuntimeWarning, match=rf"{name}='{value}' is not 1 or 0 \(or "
                                                r"true/false, yes/no, on/off\): it sets .*; "
                                                rf"ignored \(default: {'on' if default else 'off'}\)"):
            assert read() is default


#: (session 31) the variables that take a word, a reader of each through the code that
#: reads it, their words and default, and what another word is (an error class or None:
#: ignored with a warning)
WORD_VARIABLES = {
    "TECOMP_CUDA_EMU_MODE": (lambda: __import__("tecomp.codegen.cuda_emu",
                                                fromlist=["x"]).default_mode(),
                             ("threads", "serial", "reverse", "last_block_first"), "threads",
                             tc.ArgumentError),
    "TECOMP_CALIBRATE": (lambda: __import__("tecomp.calibration", fromlist=["x"]).mode(),
                         ("auto", "0", "off", "force"), "auto", tc.TargetError),
    "TECOMP_COST_MODEL": (lambda: __import__("tecomp.autoschedule.cost_model",
                                             fromlist=["x"]).model_from_env(),
                          ("trees", "xgboost"), "trees", None),
}


@pytest.mark.parametrize("name", list(WORD_VARIABLES))
def test_a_word_variable_reads_every_spelling(monkeypatch, name):
    """Each takes its words in any case with blanks around: once
    ``TECOMP_COST_MODEL=XGBoost`` kept tecomp's trees silently and
    ``TECOMP_CUDA_EMU_MODE=" serial"`` was an error."""
    read, words, default, error = WORD_VARIABLES[name]
    for w in words:
        for value in (w, f" {w}", f"{w.upper()} ", f"\t{w.capitalize()}\n"):
            monkeypatch.setenv(name, value)
            assert read() == w, (name, value)
    for value in ("", "  "):
        monkeypatch.setenv(name, value)
        assert read() == default
    monkeypatch.delenv(name)
    assert read() == default
    for value in ("abc", words[1] + "s", words[1] + "," + words[0]):
        monkeypatch.setenv(name, value)
        pattern = rf"{name}='{value}' is not one of {', '.join(words)}: it sets "
        if error is None:
            with pytest.warns(RuntimeWarning, match=pattern + r".*; ignored \(default: "):
                assert read() == default
        else:
            with pytest.raises(error, match=pattern):
                read()


def test_xgboost_spelled_otherwise_is_xgboost(monkeypatch):
    """``TECOMP_COST_MODEL=" XGBoost"`` fits xgboost's model (through the search's own
    reader; a stand-in module for xgboost, whose import takes seconds)."""
    import types

    from tecomp.autoschedule import cost_model

    class XGBRegressor:
        def __init__(self, **kw):
            pass

        def fit(self, X, y):
            return self

    monkeypatch.setitem(sys.modules, "xgboost", types.SimpleNamespace(XGBRegressor=XGBRegressor))
    monkeypatch.setenv("TECOMP_COST_MODEL", " XGBoost")
    m = cost_model.CostModel(seed=0)
    m.update([np.array([float(i), 1.0]) for i in range(8)], [1e-3 * (i + 1) for i in range(8)])
    assert isinstance(m.model, XGBRegressor)
    monkeypatch.setitem(sys.modules, "xgboost", None)     # (cannot be imported)
    with pytest.warns(RuntimeWarning, match=r"TECOMP_COST_MODEL=xgboost, but xgboost cannot "
                                            r"be imported: the auto-scheduler uses tecomp's"):
        m.update([np.array([9.0, 1.0])], [1e-2])
    assert isinstance(m.model, cost_model.GBDT)


def test_dump_ir_off_prints_nothing(monkeypatch, capfd):
    """``TECOMP_DUMP_IR=off`` is off (it printed the IR after every pass)."""
    A = tc.placeholder((4,), name="A")
    B = tc.compute((4,), lambda i: A[i] + 1, name="B")
    monkeypatch.setenv("TECOMP_DUMP_IR", "off")
    tc.lower(tc.create_schedule(B.op), [A, B])
    assert "// ----" not in capfd.readouterr().err
    monkeypatch.setenv("TECOMP_DUMP_IR", "on")
    tc.lower(tc.create_schedule(B.op), [A, B])
    assert "// ---- schedule_ops ----" in capfd.readouterr().err


@pytest.mark.parametrize("value, want", [
    ("3", 3), (" 3", 3), ("+3", 3), ("\t2", 2),
    # what Python's int() took and a library's pool (strtol, nothing after) refuses:
    ("3 ", None), ("1_0", None), ("\u0663", None), ("3\n", None),
    ("0", None), ("-2", None), ("2.0", None), ("+", None)])
def test_the_thread_count_is_read_as_a_librarys_pool_reads_it(monkeypatch, value, want):
    # (Python read "1_0" as 10 threads and "3 " as 3 where an exported library's pool,
    # called from C, fell back to the CPUs: the same variable, two counts)
    monkeypatch.setattr(threads, "available_cpus", lambda *a, **k: 1)
    monkeypatch.setenv("TECOMP_NUM_THREADS", value)
    if want is None:
        with pytest.warns(RuntimeWarning, match="TECOMP_NUM_THREADS"):
            assert threads.default_num_threads() == 1
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert threads.default_num_threads() == want
