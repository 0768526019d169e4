"""tecomp.autoschedule.measure: candidates built and timed in child processes; crashes,
hangs, exceptions and wrong results recorded as failures; the reference; symbolic shapes;
the dask runner against the local one.  No timing in assertions (times are only checked
to be positive and finite)."""
import math
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import tecomp as tc
from tecomp.autoschedule import measure
from tecomp.autoschedule.measure import LocalRunner, MeasureResult, get_runner, make_inputs
from tecomp.errors import AutoScheduleError

# short timings: these tests check behaviour, not speed
FAST = dict(repeat=2, min_repeat_seconds=0.002)


def matmul(n=24, m=20, k=16):
    A = tc.placeholder((n, k), name="A")
    B = tc.placeholder((k, m), name="B")
    r = tc.reduce_axis((0, k), name="r")
    C = tc.compute((n, m), lambda i, j: tc.sum(A[i, r] * B[r, j], axis=r), name="C")
    return [A, B, C]


def sym_matmul():
    n = tc.var("n")
    A = tc.placeholder((n, 12), name="A")
    B = tc.placeholder((12, 9), name="B")
    r = tc.reduce_axis((0, 12), name="r")
    C = tc.compute((n, 9), lambda i, j: tc.sum(A[i, r] * B[r, j], axis=r), name="C")
    return [A, B, C]


def _pid_file(payload):
    return payload["pid_file"] if isinstance(payload, dict) else None


# build_fn: module level, so that the dask workers (and a spawned child) import it
def build(args, payload):
    C = args[-1]
    kind = payload["kind"] if isinstance(payload, dict) else payload
    if kind == "default":
        return tc.create_schedule(C.op)
    if kind == "tiled":
        s = tc.create_schedule(C.op)
        io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 8, 4)
        s[C].vectorize(ji)
        s[C].parallel(io)
        return s
    if kind == "bad_split":
        s = tc.create_schedule(C.op)
        s[C].split(C.op.axis[0], factor=0)
        return s
    if kind == "segv":
        return lambda *arrays: os.kill(os.getpid(), signal.SIGSEGV)
    if kind == "exit3":
        return lambda *arrays: os._exit(3)
    if kind == "hang":
        def hang(*arrays):
            # a grandchild in the child's process group must go with it
            g = subprocess.Popen(["sleep", "1000"])
            with open(_pid_file(payload), "w") as f:
                f.write(f"{os.getpid()} {g.pid}")
            time.sleep(1000)
        return hang
    if kind == "wrong":
        def wrong(a, b, c):
            c[...] = a @ b
            c[1, 2] += 0.5
        return wrong
    if kind == "nan":
        def nan(a, b, c):
            c[...] = a @ b
            c[3, 4] = np.nan
        return nan
    if kind == "accumulate":
        def accumulate(a, b, c):
            c += a @ b   # correct from zeros, wrong on every later call
        return accumulate
    if kind == "hog":
        def hog(*arrays):
            # 2 GiB, touched: over a child's memory_limit_mb=256 -> MemoryError
            np.ones(2**31, np.uint8)
        return hog
    if kind == "threads":
        def threads(c):
            c[0] = tc.get_num_threads()
        return threads
    raise AssertionError(kind)


def _expected(args, shapes=None):
    a, b, _ = make_inputs(args, shapes)
    return a.astype(np.float64) @ b.astype(np.float64)


def _check_ok(r: MeasureResult, repeat=2):
    assert r.ok, r.error
    assert r.error is None and r.outputs is None
    assert len(r.times) == repeat
    assert all(math.isfinite(t) and t > 0 for t in r.times)
    assert r.build_seconds >= 0 and r.total_seconds > 0


def _gone(pid, wait=5.0):
    """The process is gone (or a zombie waiting for init to reap it)."""
    end = time.monotonic() + wait
    while time.monotonic() < end:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        except OSError:
            pass
        time.sleep(0.05)
    return False


# -- candidates that run ---------------------------------------------------------------


def test_schedules_run_and_match_numpy():
    args = matmul()
    runner = LocalRunner(**FAST)
    res = runner.run(args, build, ["default", "tiled"])
    for r in res:
        _check_ok(r)
        assert r.build_seconds > 0
    (ref,) = runner.reference
    assert ref.shape == (24, 20) and ref.dtype == np.float32
    np.testing.assert_allclose(ref, _expected(args), rtol=1e-5, atol=1e-5)


def test_fixed_number_of_calls():
    res = LocalRunner(number=3, repeat=4).run(matmul(), build, ["default"])
    _check_ok(res[0], repeat=4)


def test_symbolic_shape_bound_from_shapes():
    args = sym_matmul()
    runner = LocalRunner(**FAST)
    res = runner.run(args, build, ["default", "tiled"], shapes={"n": 37})
    for r in res:
        _check_ok(r)
    assert runner.reference[0].shape == (37, 9)
    np.testing.assert_allclose(runner.reference[0], _expected(args, {"n": 37}), rtol=1e-5,
                               atol=1e-5)


def test_unbound_symbolic_shape_is_an_error():
    with pytest.raises(AutoScheduleError):
        LocalRunner(**FAST).run(sym_matmul(), build, ["default"])
    with pytest.raises(AutoScheduleError):
        make_inputs(sym_matmul())


def test_child_uses_the_parents_thread_count():
    T = tc.compute((1,), lambda i: tc.const(0, "int32"), name="T")
    runner = LocalRunner(**FAST)
    (r,) = runner.run([T], build, ["threads"])
    _check_ok(r)
    # the reference is the output of the first candidate that ran
    assert int(runner.reference[0][0]) == tc.get_num_threads()
    one = LocalRunner(num_threads=1, **FAST)
    one.run([T], build, ["threads"])
    assert int(one.reference[0][0]) == 1


# -- candidates that fail --------------------------------------------------------------


def test_crash_is_recorded_and_the_next_candidate_runs():
    res = LocalRunner(**FAST).run(matmul(), build, ["segv", "exit3", "default"])
    assert [r.ok for r in res] == [False, False, True]
    assert res[0].error == "crashed: SIGSEGV"
    assert res[1].error == "crashed: exit code 3"
    assert res[0].times == [] and res[0].outputs is None
    _check_ok(res[2])


def test_memory_hog_fails_in_its_child():
    """A candidate that would exhaust memory fails in its child (address space capped at
    memory_limit_mb over the child's size when forked); the next one runs."""
    res = LocalRunner(memory_limit_mb=256, **FAST).run(matmul(), build, ["hog", "default"])
    assert [r.ok for r in res] == [False, True]
    assert res[0].error.startswith("crashed: MemoryError"), res[0].error
    _check_ok(res[1])


def test_hang_is_killed_with_its_process_group(tmp_path):
    pid_file = tmp_path / "pids"
    args = matmul()
    res = LocalRunner(timeout=2, **FAST).run(
        args, build, [{"kind": "hang", "pid_file": str(pid_file)}, "default"])
    assert [r.ok for r in res] == [False, True]
    assert res[0].error == "timed out after 2s"
    _check_ok(res[1])
    child, grandchild = map(int, pid_file.read_text().split())
    assert _gone(child) and _gone(grandchild)


def test_exception_in_build_fn_is_recorded():
    args = matmul()
    with pytest.raises(tc.ScheduleError) as ei:
        build(args, "bad_split")
    res = LocalRunner(**FAST).run(args, build, ["bad_split", "default"])
    assert [r.ok for r in res] == [False, True]
    assert res[0].error == f"ScheduleError: {str(ei.value).splitlines()[0]}"
    assert "factor=0 must be at least 1" in res[0].error


@pytest.mark.parametrize("kind,where", [("wrong", "(1, 2)"), ("nan", "(3, 4)")])
def test_wrong_result_is_rejected(kind, where):
    runner = LocalRunner(**FAST)
    res = runner.run(matmul(), build, ["default", kind, "tiled"])
    assert [r.ok for r in res] == [True, False, True]
    assert res[1].error.startswith(f"wrong result: output C max abs error ")
    assert f"at index {where}" in res[1].error
    assert "1 of 480 elements differ" in res[1].error
    assert res[1].outputs is None


def test_kernel_that_accumulates_into_its_output_is_rejected():
    res = LocalRunner(**FAST).run(matmul(), build, ["accumulate", "default"])
    assert [r.ok for r in res] == [False, True]
    assert res[0].error.startswith("wrong result: repeated calls disagree: output C")


def test_first_candidate_that_runs_is_the_reference():
    # a wrong first candidate makes the right ones wrong: the reference is whatever ran
    # first (the search puts its analytic schedule first)
    res = LocalRunner(**FAST).run(matmul(), build, ["segv", "wrong", "default"])
    assert [r.ok for r in res] == [False, True, False]


def test_reference_carries_over_between_runs_of_one_workload():
    args = matmul()
    runner = LocalRunner(**FAST)
    assert runner.run(args, build, ["default"])[0].ok
    ref = runner.reference
    (r,) = runner.run(args, build, ["wrong"])
    assert not r.ok and r.error.startswith("wrong result")
    assert runner.reference is ref
    # another workload (other tensor objects) starts afresh
    (r,) = runner.run(matmul(), build, ["wrong"])
    assert r.ok
    # an explicit reference wins
    bad = [ref[0] + 1]
    (r,) = runner.run(args, build, ["default"], reference=bad)
    assert not r.ok and "wrong result: output C max abs error 1 at index" in r.error
    # forgetting it
    runner.reference = None
    assert runner.run(args, build, ["wrong"])[0].ok


def test_spawned_child_where_there_is_no_fork(monkeypatch):
    monkeypatch.delattr(os, "fork")
    res = LocalRunner(**FAST).run(matmul(), build, ["segv", "default", "wrong"])
    assert [r.ok for r in res] == [False, True, False]
    assert res[0].error == "crashed: SIGSEGV"
    assert res[2].error.startswith("wrong result: output C")


def test_persistent_worker_measures_in_turn_and_is_replaced_after_a_failure(tmp_path):
    """LocalRunner(persistent=True) (the GPU's default): one spawned process measures the
    candidates one after another; a crash, a hang (killed with its process group) or an
    exception ends that worker and the next candidate gets a fresh one; the results are
    those of a child per candidate."""
    from tecomp.autoschedule import measure

    pid_file = tmp_path / "pids"
    args = matmul()
    runner = LocalRunner(timeout=20, persistent=True, **FAST)
    res = runner.run(args, build, ["default", "tiled", "segv", "default", "wrong",
                                   "bad_split", "tiled"])
    assert [r.ok for r in res] == [True, True, False, True, False, False, True]
    assert res[2].error == "crashed: SIGSEGV"
    assert res[4].error.startswith("wrong result: output C")
    assert "factor=0 must be at least 1" in res[5].error
    for r in (res[0], res[1], res[3], res[6]):
        _check_ok(r)
    (worker,) = measure._WORKERS.values()
    first = worker.proc.pid
    runner.run(args, build, ["default"])
    assert worker.proc.pid == first, "a worker serves one candidate after another"
    res = LocalRunner(timeout=3, persistent=True, **FAST).run(
        args, build, [{"kind": "hang", "pid_file": str(pid_file)}, "default"])
    assert [r.ok for r in res] == [False, True]
    assert res[0].error == "timed out after 3s"
    child, grandchild = map(int, pid_file.read_text().split())
    assert _gone(child) and _gone(grandchild)
    measure._close_workers()
    assert not measure._WORKERS


def test_persistent_option_is_checked():
    with pytest.raises(tc.AutoScheduleError, match=r"LocalRunner: persistent must be True, "
                                                   r"False or None \(for the GPU only\), got 'yes'"):
        LocalRunner(persistent="yes")


def _gpu_build(args, payload):
    """CUDA schedules of ``matmul()``: ``("tiles", t)`` a t x t block of threads, one
    output each; ``"bad_split"`` fails to schedule."""
    C = args[-1]
    s = tc.create_schedule(C.op)
    if payload == "bad_split":
        s[C].split(C.op.axis[0], factor=0)
        return s
    t = payload[1]
    i, j = C.op.axis
    bi, ti = s[C].split(i, factor=t)
    bj, tj = s[C].split(j, factor=t)
    s[C].reorder(bi, bj, ti, tj)
    s[C].bind(bi, tc.thread_axis("blockIdx.y"))
    s[C].bind(bj, tc.thread_axis("blockIdx.x"))
    s[C].bind(ti, tc.thread_axis("threadIdx.y"))
    s[C].bind(tj, tc.thread_axis("threadIdx.x"))
    return s


def test_cuda_candidates_compile_in_parallel_before_they_are_measured(tmp_path, monkeypatch):
    """LocalRunner(precompile=None) on cuda-emu: every candidate of a run is lowered here
    and compiled into the emulation's cache (the child finds its library there); one that
    fails to schedule is skipped and reported by its measurement, as without it."""
    import shutil

    if shutil.which("g++") is None:
        pytest.skip("the CUDA emulation needs g++")
    from tecomp.codegen import cuda_emu

    monkeypatch.setenv("TECOMP_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cuda_emu, "_LIBS", {})
    args = matmul()
    payloads = [("tiles", 4), "bad_split", ("tiles", 8)]
    assert measure._precompile(args, _gpu_build, payloads, "cuda-emu") == 2
    def libs(d):
        return {p.name: p.stat().st_ino for p in (d / "cuda_emu").glob("*.so")}

    before = libs(tmp_path)
    assert len(before) == 2 and not cuda_emu._LIBS, "compiled into the cache, not loaded here"
    res = LocalRunner(timeout=60, **FAST).run(args, _gpu_build, payloads, target="cuda-emu")
    assert [r.ok for r in res] == [True, False, True], [r.error for r in res]
    assert "factor=0 must be at least 1" in res[1].error
    assert libs(tmp_path) == before, "the child loaded the libraries, it rebuilt none"
    calls = []
    real = measure._precompile
    monkeypatch.setattr(measure, "_precompile", lambda *a: calls.append(a[2]) or real(*a))
    LocalRunner(timeout=60, **FAST).run(args, _gpu_build, payloads[:2], target="cuda-emu")
    assert calls == [payloads[:2]], "the default compiles a CUDA run's candidates ahead"
    LocalRunner(timeout=60, **FAST).run(args, build, ["default", "tiled"])
    assert len(calls) == 2 and calls[1] == ["default", "tiled"]  # (and compiles nothing)
    # off: the child compiles (a fresh cache stays empty until then)
    monkeypatch.setenv("TECOMP_CACHE_DIR", str(tmp_path / "off"))
    res = LocalRunner(timeout=60, precompile=False, **FAST).run(
        args, _gpu_build, [("tiles", 4), ("tiles", 2)], target="cuda-emu")
    assert [r.ok for r in res] == [True, True]
    assert len(libs(tmp_path / "off")) == 2 and len(calls) == 2
    with pytest.raises(tc.AutoScheduleError, match=r"precompile must be True, False or None"):
        LocalRunner(precompile=1)
    # a CPU target has nothing to compile ahead
    assert measure._precompile(args, build, ["default", "tiled"], "llvm") == 0


def test_sliced_comparison_is_numpys_isclose():
    """The comparison of large outputs runs in slices: the same verdict as
    ``np.isclose(..., equal_nan=True).all()`` on infinities, NaNs and near misses, and
    across a slice boundary."""
    rng = np.random.default_rng(5)
    vals = np.array([0, 1, -1, np.inf, -np.inf, np.nan, 1e-7, 1 + 1e-4, 1e30])
    for _ in range(500):
        o, r = rng.choice(vals, 7), rng.choice(vals, 7)
        for rtol, atol in ((1e-3, 1e-5), (0.0, 0.0), (1e-3, 1.0)):
            assert measure._all_close(o, r, rtol, atol) == \
                np.isclose(o, r, rtol=rtol, atol=atol, equal_nan=True).all(), (o, r)
    big = rng.random(3 * measure._SLICE + 5).astype(np.float32)
    assert measure._all_close(big, big.copy(), 0.0, 0.0)
    bad = big.copy()
    bad[measure._SLICE + 1] += 1
    assert not measure._all_close(big, bad, 1e-3, 1e-5)
    assert measure._finite_abs_max(np.array([np.inf, -3.0, np.nan, 2.0])) == 3.0


# -- inputs ------------------------------------------------------------------------------


def test_make_inputs():
    n = tc.var("n")
    F = tc.placeholder((n, 3), name="F")
    H = tc.placeholder((5,), name="H", dtype="float16")
    I = tc.placeholder((n * 2,), name="I", dtype="int32")
    U = tc.placeholder((7,), name="U", dtype="uint8")
    Bo = tc.placeholder((6,), name="Bo", dtype="bool")
    O = tc.compute((n, 3), lambda i, j: F[i, j] * 2, name="O")
    args = [F, H, I, U, Bo, O, n]
    xs = make_inputs(args, {"n": 40}, seed=3)
    f, h, i, u, bo, o, nv = xs
    assert nv == 40 and isinstance(nv, int)
    assert f.shape == (40, 3) and f.dtype == np.float32 and -1 <= f.min() and f.max() < 1
    assert h.dtype == np.float16 and h.shape == (5,)
    assert i.shape == (80,) and i.dtype == np.int32 and i.min() >= -3 and i.max() <= 3
    assert u.dtype == np.uint8 and u.max() <= 3
    assert bo.dtype == np.bool_
    assert o.shape == (40, 3) and not o.any()
    for a in xs[:-1]:
        assert a.flags.c_contiguous and a.ctypes.data % 64 == 0
    again = make_inputs(args, {"n": 40}, seed=3)
    for a, b in zip(xs[:-1], again[:-1]):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(make_inputs(args, {"n": 40}, seed=4)[0], f)
    # the arrays are what tc.build's kernel takes
    fn = tc.build(tc.create_schedule(O.op), [F, O, n])
    fn(f, o, nv)
    np.testing.assert_array_equal(o, f * 2)


def test_get_runner():
    assert isinstance(get_runner("local"), LocalRunner)
    assert isinstance(get_runner(None), LocalRunner)
    r = LocalRunner()
    assert get_runner(r) is r

    class Mine:
        def run(self, args, build_fn, payloads, shapes=None):
            return []

    m = Mine()
    assert get_runner(m) is m


def test_importing_measure_does_not_import_dask():
    code = ("import sys, tecomp.autoschedule.measure as m; m.LocalRunner(); "
            "print(any(k == 'dask' or k.startswith('dask.') or k == 'distributed' "
            "for k in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


# -- dask --------------------------------------------------------------------------------


def test_dask_runner_matches_local_runner():
    pytest.importorskip("dask.distributed")
    args = matmul()
    payloads = ["default", "segv", "tiled", "wrong"]
    local = LocalRunner(**FAST)
    want = local.run(args, build, payloads)
    with measure.DaskRunner(n_workers=2, **FAST) as runner:
        pids = runner.client.run(os.getpid)
        assert len(pids) == 2
        got = runner.run(args, build, payloads)
        # the segfault killed a child of a worker, not the worker
        assert runner.client.run(os.getpid) == pids
    assert [r.ok for r in got] == [r.ok for r in want] == [True, False, True, False]
    assert [r.error for r in got] == [r.error for r in want]
    for r in got:
        assert r.outputs is None
        if r.ok:
            _check_ok(r)
    np.testing.assert_array_equal(runner.reference[0], local.reference[0])
