"""The fuzzer's ``threads`` family (tecomp/testing/concurrency.py): kernels, pools,
workspace and torch.compile used from several threads at once, every result compared bit
for bit with a serial run.  Short here; the long run (TECOMP_LONG_TESTS=1, or ``python -m
tecomp.testing.concurrency --burners 2 --iterations 40``) hammers each case longer."""
import os
import threading

import numpy as np
import pytest

import tecomp as tc
from tecomp.testing import concurrency as cc
from tecomp.testing.fuzz import case_for_seed, threads_family_residue
from helpers import fuzz_cli

LONG = os.environ.get("TECOMP_LONG_TESTS") == "1"


def _seed_of(scenario: str, skip: int = 0) -> int:
    """The first seed (after ``skip`` of them) whose case is of ``scenario``."""
    seeds = (s for s in range(1000) if cc.draw_threads_case(s).spec["scenario"] == scenario)
    for _ in range(skip):
        next(seeds)
    return next(seeds)


@pytest.mark.parametrize("scenario", cc.SCENARIOS)
def test_threads_family_runs_clean(scenario, monkeypatch, tmp_path):
    if scenario == "torch_compile":
        pytest.importorskip("torch")
    monkeypatch.setenv("TECOMP_CACHE_DIR", str(tmp_path))
    for k in range(3 if LONG else 1):
        case = cc.draw_threads_case(_seed_of(scenario, k), iterations=20 if LONG else 3)
        o = cc.run_threads_case(case)
        assert o.kind == "ok", o.report()


def test_threads_family_restores_the_settings_it_changes():
    """A case changes the thread count and the workspace limit from its threads; both are
    as before once it ends (a fuzz worker runs the next case with them)."""
    before = (tc.get_num_threads(), tc.threads.workspace_limit())
    o = cc.run_threads_case(cc.draw_threads_case(_seed_of("build_while_running"), 3))
    assert o.kind == "ok", o.report()
    assert (tc.get_num_threads(), tc.threads.workspace_limit()) == before


def test_threads_family_finds_bits_that_differ(monkeypatch):
    """A module whose output comes out different when called from another thread (one
    bit of one element) is a mismatch naming the thread."""
    real = cc.build_workload

    def corrupted(w, name):
        mod, inputs, outputs, ref = real(w, name)

        def call(*args):
            mod(*args)
            if threading.current_thread() is not threading.main_thread():
                out = args[-1]
                out.reshape(-1)[:1].view(np.uint8)[0] ^= 1
        return call, inputs, outputs, ref
    monkeypatch.setattr(cc, "build_workload", corrupted)
    o = cc.run_threads_case(cc.draw_threads_case(_seed_of("same_module"), 3))
    assert o.kind == "mismatch", o.report()
    assert "[call0]" in o.detail and "differ from the serial run" in o.detail, o.detail


def test_threads_family_reports_a_deadlock(monkeypatch):
    """A thread that never returns (here set_num_threads, blocked) makes the case a
    ``deadlock`` crash after the deadline, naming the thread, instead of hanging."""
    release = threading.Event()
    real = tc.set_num_threads
    monkeypatch.setattr(cc, "DEADLINE", 3.0)
    monkeypatch.setattr(tc, "set_num_threads",
                        lambda n: release.wait() if threading.current_thread().name.endswith(
                            "set_num_threads") else real(n))
    try:
        o = cc.run_threads_case(cc.draw_threads_case(_seed_of("same_module"), 3))
    finally:
        release.set()
    assert o.kind == "crash" and o.stage == "deadlock", o.report()
    assert "tecomp-threads-set_num_threads" in o.detail


def test_threads_family_in_the_fuzzer_rotation():
    """With --threads-every k, the seeds k*m + 9 % k are threads cases; without it (0, as
    case_for_seed's default) the same seed is what it was."""
    seed = 100 * 3 + threads_family_residue(100)
    assert isinstance(case_for_seed(seed, 0, threads_every=100), cc.ThreadsCase)
    assert not isinstance(case_for_seed(seed, 0), cc.ThreadsCase)
    assert not isinstance(case_for_seed(seed + 1, 0, threads_every=100), cc.ThreadsCase)
    assert threads_family_residue(1) == 0


def test_fuzz_only_threads(tmp_path):
    # seeds 5 and 6: a same_module and a fork case (quick: no torch.compile)
    p = fuzz_cli(tmp_path, "--only", "threads", "--cases", "2", "--seed", "5",
                 env_extra={"TECOMP_CACHE_DIR": str(tmp_path / "cache")}, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "cases run: 2 (threads:" in p.stdout and "mismatches: 0" in p.stdout, p.stdout


def _fork_while_held(lock, child) -> tuple:
    """Fork while another thread holds ``lock`` (a context manager) for 0.5 s after the
    fork is asked for; the child runs ``child()`` (its exit code).  Returns the child's
    exit code and whether the fork waited for the thread to let go."""
    import time

    inside, left = threading.Event(), []

    def holding():
        with lock:
            inside.set()
            time.sleep(0.5)
            left.append(time.monotonic())

    t = threading.Thread(target=holding)
    t.start()
    assert inside.wait(10)
    pid = os.fork()
    if pid == 0:   # (never back into pytest from the child)
        code = 2
        try:
            code = child()
        finally:
            os._exit(code)
    forked = time.monotonic()
    _, status = os.waitpid(pid, 0)
    t.join(10)
    return os.waitstatus_to_exitcode(status), bool(left) and forked >= left[0]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork() here")
def test_a_fork_waits_for_a_thread_inside_llvm():
    """A fork() while another thread is inside LLVM (holding the LLVM lock: parsing, JIT,
    emitting) waits until it is out: the child must not inherit LLVM's state half-changed
    by a thread it does not have (the threads family: 1 of 10 children forked while
    another thread built never finished its own build).  Forced: the thread holds the
    lock for 0.5 s after the fork is asked for."""
    from tecomp.target import host

    # the child: its own lock, free
    code, waited = _fork_while_held(
        host.LLVM_LOCK, lambda: 0 if host.LLVM_LOCK.acquire(timeout=5) else 1)
    assert code == 0
    assert waited, "the fork did not wait for the thread inside LLVM"
    assert host.LLVM_LOCK.acquire(timeout=5)   # released in the parent after the fork
    host.LLVM_LOCK.release()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork() here")
def test_a_fork_waits_for_llvmlites_own_lock():
    """llvmlite takes its own lock around each call into its library, also outside
    tecomp's (an engine disposed of by the garbage collector in any thread): a fork waits
    for that thread too, and the child gets a free lock (the threads family: children
    forked meanwhile hung in their first llvmlite call)."""
    llvm = pytest.importorskip("llvmlite.binding")
    from llvmlite.binding import ffi

    def child():   # an llvmlite call must not block
        if not ffi.lib._lock._lock.acquire(timeout=5):
            return 1   # (held by the thread the child does not have)
        llvm.address_of_symbol("malloc")   # (through the lock)
        return 0

    code, waited = _fork_while_held(ffi.lib._lock, child)
    assert code == 0
    assert waited, "the fork did not wait for llvmlite's lock"
