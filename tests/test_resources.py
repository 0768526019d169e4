"""Resources: memory stays bounded over many builds in one process (LLVM's optimiser
runs in a worker process that retires itself, see tecomp/codegen/llvm/optproc.py), and
the CUDA emulation's on-disk cache of compiled libraries survives concurrent writers and
corrupted files.

The 1,000-build measurement runs with TECOMP_LONG_TESTS=1 (it takes minutes); the default
suite builds 100 kernels with a generous bound.  The figure itself:
``python -m tecomp.testing.resources --builds 1000``.
"""
import os
import shutil
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import tecomp as tc

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LONG = os.environ.get("TECOMP_LONG_TESTS", "") not in ("", "0")
HAVE_CXX = shutil.which(os.environ.get("CXX", "g++")) is not None


def _env(**extra):
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


def _measure(builds, **env):
    p = subprocess.run([sys.executable, "-m", "tecomp.testing.resources", "--builds", str(builds),
                        "--warmup", "30"], capture_output=True, text=True, env=_env(**env),
                       timeout=3600)
    assert p.returncode == 0, p.stderr[-3000:]
    line = [x for x in p.stdout.splitlines() if x.startswith("builds:")][0]
    growth = float(line.split("growth:")[1].split("MiB")[0])
    worker = [x for x in p.stdout.splitlines() if x.startswith("LLVM optimiser worker:")][0]
    return growth, line + "\n" + worker


def _restarts(report):
    return int(report.split("restarts:")[1].split()[0])


@pytest.mark.skipif(LONG, reason="the 1,000-build version runs instead")
def test_memory_bounded_over_200_builds():
    growth, report = _measure(200)
    print(report)
    # 0.3-2 KiB per build is measured; LLVM's pipeline in this process leaked about
    # 85 KiB per build (17 MiB here) before it moved to the worker, and a global cache of
    # visitor handlers keyed by class, 35 KiB per build (7 MiB here)
    assert growth < 4, report


def test_worker_retires_and_parent_stays_bounded():
    # a worker allowed to grow by 4 MiB retires every ~50 builds; builds stay correct
    # (the resources tool calls every kernel) and the parent does not grow
    growth, report = _measure(100, TECOMP_LLVM_WORKER_MAX_MB="4")
    print(report)
    assert _restarts(report) >= 1, report
    assert growth < 8, report


@pytest.mark.slow
@pytest.mark.skipif(not LONG, reason="slow: set TECOMP_LONG_TESTS=1")
def test_memory_bounded_over_1000_builds():
    growth, report = _measure(1000)
    print(report)
    assert growth < 16, report


def test_visitor_classes_defined_per_call_are_freed():
    """Visitors defined inside a function (one class per call, as several passes do) are
    collected with their handler cache: a cache keyed by class kept every one alive."""
    import gc
    import weakref

    from tecomp.ir.functor import Visitor

    x = tc.var("x")
    e = (x + 1) * x

    def walk():
        seen = []

        class _V(Visitor):
            def visit_Var(self, v):
                seen.append(v)

        _V().visit(e)
        assert seen == [x, x]
        return weakref.ref(_V)

    refs = [walk() for _ in range(3)]
    gc.collect()
    assert all(r() is None for r in refs)


def test_modules_are_freed():
    import gc
    import weakref

    A = tc.placeholder((8,), name="A")
    C = tc.compute((8,), lambda i: A[i] + 1, name="C")
    s = tc.create_schedule(C.op)
    refs = []
    for _ in range(5):
        f = tc.build(s, [A, C])
        f(np.zeros(8, "float32"), np.zeros(8, "float32"))
        refs.append(weakref.ref(f))
        del f
    gc.collect()
    assert all(r() is None for r in refs)


def test_dsl_objects_are_freed():
    """Regression: the registries of axis and reduce-axis variables (weak dictionaries in
    te/tensor.py) stored the IterVar as the value, which refers to its key, so no
    compute's variables were ever freed."""
    import gc
    import weakref

    from tecomp.te import tensor as T

    def make():
        A = tc.placeholder((8, 8), name="A")
        r = tc.reduce_axis((0, 8), name="k")
        C = tc.compute((8,), lambda i: tc.sum(A[i, r], axis=r), name="C")
        return [weakref.ref(C.op.axis[0].var), weakref.ref(r.var)]

    gc.collect()
    before = len(T._AXIS_VARS) + len(T._REDUCE_VARS)
    refs = make()
    gc.collect()
    assert all(r() is None for r in refs)
    assert len(T._AXIS_VARS) + len(T._REDUCE_VARS) <= before


# ---------------------------------------------------------------------------------
# the CUDA emulation's disk cache

_EMU_SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np
    import tecomp as tc
    A = tc.placeholder((37,), name="A")
    B = tc.compute((37,), lambda i: A[i] * 3 + 1, name="B")
    s = tc.create_schedule(B.op)
    xo, xi = s[B].split(B.op.axis[0], factor=8)
    s[B].bind(xo, tc.thread_axis("blockIdx.x"))
    s[B].bind(xi, tc.thread_axis("threadIdx.x"))
    f = tc.build(s, [A, B], target="cuda-emu")
    a = np.arange(37, dtype="float32")
    b = np.zeros(37, "float32")
    f(a, b)
    assert np.array_equal(b, a * 3 + 1), b
    print("ok")
""")


def _emu_procs(cache, n):
    env = _env(TECOMP_CACHE_DIR=str(cache))
    procs = [subprocess.Popen([sys.executable, "-c", _EMU_SCRIPT], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for _ in range(n)]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0 and out.strip() == "ok", err[-3000:]


def _so_files(cache):
    d = cache / "cuda_emu"
    return sorted(x for x in d.iterdir() if x.suffix == ".so") if d.exists() else []


@pytest.mark.skipif(not HAVE_CXX, reason="the CUDA emulation needs a C++ compiler")
def test_emu_cache_concurrent_writers_and_corrupted_files(tmp_path):
    cache = tmp_path / "cache"
    # three processes compile the same kernel into an empty cache at the same time
    _emu_procs(cache, 3)
    libs = _so_files(cache)
    assert len(libs) == 1, libs
    # (header-*: the precompiled header the builds share, cuda_emu.PRECOMPILED_HEADER; a
    # process that lost the race to put its own there left no temporary directory either)
    leftovers = [x for x in (cache / "cuda_emu").iterdir()
                 if x.suffix not in (".so", ".sha256") and not x.name.startswith("header-")]
    assert not leftovers, leftovers
    # corrupted in two ways: garbage, empty -- each is rebuilt (truncated: see below)
    for bad in (b"this is not a shared library" * 10, b""):
        libs[0].write_bytes(bad)
        _emu_procs(cache, 1)
        assert libs[0].read_bytes()[:4] == b"\x7fELF" and len(libs[0].read_bytes()) > 1000
    # two processes find the same corrupted file at once
    libs[0].write_bytes(b"garbage")
    _emu_procs(cache, 2)


@pytest.mark.skipif(not HAVE_CXX, reason="the CUDA emulation needs a C++ compiler")
def test_emu_cache_truncated_library(tmp_path):
    """A truncated library (a crash mid-copy) is detected by its sha256 sidecar and rebuilt
    instead of being mapped (which would die with SIGBUS)."""
    cache = tmp_path / "cache"
    _emu_procs(cache, 1)
    lib = _so_files(cache)[0]
    good = lib.read_bytes()
    lib.write_bytes(good[: len(good) // 3])
    _emu_procs(cache, 1)


@pytest.mark.skipif(not HAVE_CXX, reason="the CUDA emulation needs a C++ compiler")
def test_emu_builds_from_threads_share_one_library(tmp_path, monkeypatch):
    monkeypatch.setenv("TECOMP_CACHE_DIR", str(tmp_path))
    A = tc.placeholder((50,), name="A")
    B = tc.compute((50,), lambda i: A[i] - 2, name="B")
    s = tc.create_schedule(B.op)
    xo, xi = s[B].split(B.op.axis[0], factor=16)
    s[B].bind(xo, tc.thread_axis("blockIdx.x"))
    s[B].bind(xi, tc.thread_axis("threadIdx.x"))
    func = tc.lower(s, [A, B], target="cuda-emu")
    results, errors = [], []
    barrier = threading.Barrier(4)

    def worker():
        try:
            barrier.wait()
            f = tc.build(func, target="cuda-emu")
            b = np.zeros(50, "float32")
            f(np.arange(50, dtype="float32"), b)
            results.append(np.array_equal(b, np.arange(50) - 2))
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    ts = [threading.Thread(target=worker) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors and results == [True] * 4
    assert len(_so_files(tmp_path)) <= 1


@pytest.mark.skipif(not HAVE_CXX, reason="the CUDA emulation needs a C++ compiler")
def test_emu_cache_dir_that_is_a_file(tmp_path, monkeypatch):
    f = tmp_path / "file"
    f.write_text("x")
    monkeypatch.setenv("TECOMP_CACHE_DIR", str(f))
    A = tc.placeholder((10,), name="A")
    B = tc.compute((10,), lambda i: A[i] * 5, name="B")
    s = tc.create_schedule(B.op)
    xo, xi = s[B].split(B.op.axis[0], factor=4)
    s[B].bind(xo, tc.thread_axis("blockIdx.x"))
    s[B].bind(xi, tc.thread_axis("threadIdx.x"))
    with pytest.raises(tc.BuildError, match=r"as the CUDA emulation cache .*point TECOMP_CACHE_DIR at a writable directory"):
        tc.build(s, [A, B], target="cuda-emu")
