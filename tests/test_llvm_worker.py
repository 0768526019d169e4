"""The LLVM optimiser worker process (tecomp/codegen/llvm/optproc.py): same code as
optimising in-process, a crash in it does not take the caller down, a worker that cannot
start falls back to in-process optimisation, and forked children get their own."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tecomp as tc
from tecomp.codegen.llvm import jit as llvm_jit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _kernel(n=67, name="C"):
    A = tc.placeholder((n,), name="A")
    C = tc.compute((n,), lambda i: A[i] * 2.0 + 1.0, name=name)
    s = tc.create_schedule(C.op)
    _, xi = s[C].split(C.op.axis[0], factor=8)
    s[C].vectorize(xi)
    return s, [A, C]


def _check(f, n=67):
    a = np.arange(n, dtype="float32")
    c = np.zeros(n, "float32")
    f(a, c)
    np.testing.assert_array_equal(c, a * 2 + 1)


def test_builds_use_the_worker_and_match_in_process_optimisation(monkeypatch):
    s, args = _kernel()
    f = tc.build(s, args)
    _check(f)
    assert llvm_jit.worker_pid() is not None and llvm_jit.worker_pid() != os.getpid()
    monkeypatch.setenv("TECOMP_LLVM_OPT_WORKER", "0")
    g = tc.build(s, args)
    _check(g)
    # the same machine code, whichever process ran the pipeline (the printed IR differs
    # only in the attributes LLVM re-derives for intrinsic declarations read from bitcode)
    assert f.get_source("asm") == g.get_source("asm")
    assert "optimize" in g.compile_stats and "optimize" in f.compile_stats


def test_a_killed_worker_is_replaced():
    s, args = _kernel()
    _check(tc.build(s, args))
    pid = llvm_jit.worker_pid()
    os.kill(pid, 9)
    _check(tc.build(s, args))
    assert llvm_jit.worker_pid() not in (None, pid)


# a worker program that starts, then dies on its first module as a crash in LLVM would
_CRASHING = ("import os, struct, sys\n"
             "sys.stdout.buffer.write(struct.pack('<BBI', 2, 0, 0)); sys.stdout.flush()\n"
             "sys.stdin.buffer.read(9)\n"
             "os.abort()\n")


def test_a_crash_in_the_optimiser_raises_and_the_next_build_works(monkeypatch):
    llvm_jit._stop_worker()
    monkeypatch.setattr(llvm_jit, "_BOOT", _CRASHING)
    s, args = _kernel(name="Crash")
    with pytest.raises(tc.errors.InternalError) as ei:
        tc.build(s, args)
    msg = str(ei.value)
    assert "LLVM's optimiser crashed" in msg and "SIGABRT" in msg and "generated for main" in msg
    monkeypatch.undo()
    _check(tc.build(s, args))


def test_a_worker_that_cannot_start_falls_back_in_process(monkeypatch):
    llvm_jit._stop_worker()
    monkeypatch.setattr(llvm_jit, "_BOOT", "import sys; sys.exit(3)")
    monkeypatch.setattr(llvm_jit, "_WORKER_OK", True)
    s, args = _kernel()
    with pytest.warns(RuntimeWarning, match="does not start here.*exit status 3"):
        f = tc.build(s, args)
    _check(f)
    assert not llvm_jit.worker_enabled() and llvm_jit.worker_pid() is None
    g = tc.build(s, args)  # no second warning, no worker: in-process
    _check(g)
    monkeypatch.undo()
    assert llvm_jit.worker_enabled()


def test_optimiser_errors_come_back_as_build_errors(monkeypatch, request):
    if not llvm_jit.worker_enabled():
        pytest.skip("the optimiser worker is turned off (TECOMP_LLVM_OPT_WORKER=0)")
    # a fresh worker that will not retire for its size during this test (and is stopped
    # after it, so that later tests get one with the default limit)
    llvm_jit._stop_worker()
    request.addfinalizer(llvm_jit._stop_worker)
    monkeypatch.setenv("TECOMP_LLVM_WORKER_MAX_MB", "100000")
    s, args = _kernel()
    _check(tc.build(s, args))          # a worker is running now
    pid = llvm_jit.worker_pid()
    assert pid is not None
    with pytest.raises(RuntimeError, match="expected"):
        llvm_jit.compile_ir("define void @f( {", ["f"])
    # the worker rejected the module and survived it: the next build uses the same one
    assert llvm_jit.worker_pid() == pid
    _check(tc.build(s, args))
    assert llvm_jit.worker_pid() == pid


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_forked_child_gets_its_own_worker():
    script = textwrap.dedent("""
        import os, sys
        import numpy as np
        import tecomp as tc
        from tecomp.codegen.llvm import jit as llvm_jit
        sys.path.insert(0, sys.argv[1])
        from test_llvm_worker import _kernel, _check
        s, args = _kernel()
        _check(tc.build(s, args))
        parent_worker = llvm_jit.worker_pid()
        pid = os.fork()
        if pid == 0:
            try:
                _check(tc.build(s, args))
                ok = llvm_jit.worker_pid() not in (None, parent_worker)
            except BaseException as e:
                print(repr(e)); ok = False
            os._exit(0 if ok else 1)
        _, st = os.waitpid(pid, 0)
        assert os.WEXITSTATUS(st) == 0, st
        _check(tc.build(s, args))
        assert llvm_jit.worker_pid() == parent_worker
        print("ok")
    """)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-c", script, os.path.join(ROOT, "tests")],
                       capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0 and p.stdout.strip().endswith("ok"), p.stdout + p.stderr


def test_a_first_build_that_fails_leaves_no_traceback_at_exit():
    """The worker starts while the first kernel is lowered; when that lowering fails
    (caught by the user) and the process exits, the worker's start-up message finds its
    pipe closed: it ends quietly, it does not print a BrokenPipeError traceback."""
    script = textwrap.dedent("""
        import tecomp as tc
        A = tc.placeholder((10,), name="A")
        B = tc.compute((10,), lambda i: A[i] + 1.0, name="B")
        s = tc.create_schedule(B.op)
        try:
            tc.build(s, [B])            # A is missing: a LowerError
        except tc.LowerError:
            print("caught")
    """)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for _ in range(3):      # a race with the worker's start-up: try it a few times
        p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                           timeout=300, env=env)
        assert p.returncode == 0 and p.stdout.strip() == "caught", p.stdout + p.stderr
        assert p.stderr == "", p.stderr


def test_a_busy_worker_exits_when_its_parent_is_killed():
    """A process killed in the middle of a build (a fuzzing worker over its time limit)
    left its optimiser worker optimising a module LLVM takes minutes over, with nobody to
    read the result (the campaign found two such orphans).  The worker now exits within
    a couple of seconds of its parent's death.  The module here is the kernel of fuzz
    seed 3024733, on which LLVM 20's O3 does not finish."""
    import signal
    import time

    script = textwrap.dedent("""
        import sys
        import tecomp as tc
        from tecomp.codegen.llvm import jit as llvm_jit
        sys.path.insert(0, sys.argv[1])
        from helpers import llvm_o3_hang_program
        s, args = llvm_o3_hang_program()
        llvm_jit.start_worker()
        print(llvm_jit.worker_pid(), flush=True)
        tc.build(s, args)
    """)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               TECOMP_LLVM_OPT_TIMEOUT="600")
    p = subprocess.Popen([sys.executable, "-c", script, os.path.dirname(os.path.abspath(__file__))],
                         stdout=subprocess.PIPE, text=True, env=env)
    try:
        wpid = int(p.stdout.readline())
        time.sleep(3)          # the worker is in LLVM's optimiser by now
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=30)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.kill(wpid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.2)
        else:
            os.kill(wpid, signal.SIGKILL)
            pytest.fail(f"the worker {wpid} outlived its killed parent by 10 s")
    finally:
        if p.poll() is None:
            p.kill()


@pytest.mark.parametrize("where", ["reply", "payload"])
def test_an_interrupted_build_leaves_no_reply_for_the_next_one(monkeypatch, where):
    """A KeyboardInterrupt (any signal handler's exception) while the worker's reply was
    read left that reply, or the rest of it, in the pipe; the next build read it as its
    own and linked the interrupted kernel's code under the new one (every build after
    one a module late: ``x * 3`` computed ``x * 2``, silently).  Now a worker with a
    request pending is killed and replaced."""
    def kernel(c):
        A = tc.placeholder((16,), name="A")
        B = tc.compute((16,), lambda i: A[i] * c, name="B")
        return tc.create_schedule(B.op), [A, B]

    tc.build(*kernel(1.0))   # the worker has started
    pid = llvm_jit.worker_pid()
    read = llvm_jit._optproc._read_exact
    seen = []

    def interrupted(f, n):
        seen.append(n)
        if where == "reply" or len(seen) == 2:   # before the header, or the payload
            raise KeyboardInterrupt
        return read(f, n)

    monkeypatch.setattr(llvm_jit._optproc, "_read_exact", interrupted)
    with pytest.raises(KeyboardInterrupt):
        tc.build(*kernel(2.0))
    monkeypatch.undo()
    f = tc.build(*kernel(3.0))
    a, b = np.arange(16, dtype="float32"), np.zeros(16, "float32")
    f(a, b)
    np.testing.assert_array_equal(b, a * 3)
    assert llvm_jit.worker_pid() not in (None, pid)


def test_compile_module_gives_the_workers_object_code_and_its_steps_times(monkeypatch):
    """``optproc.compile_module`` is the worker's work on a module: run in this process on
    the IR a build sent to the worker, it gives the same object code, each step's CPU
    (``times``) and LLVM's pass timing report of the pipeline (``report``), for
    benchmarks/llvm_time.py."""
    from tecomp.codegen.llvm import optproc
    from tecomp.target import host as host_mod

    sent = []
    orig = llvm_jit._optimize_in_worker

    def spy(text, explicit, triple=""):
        reply = orig(text, explicit, triple)
        sent.append((text, explicit, reply))
        return reply

    s, args = _kernel(n=71, name="C_steps")
    monkeypatch.setattr(llvm_jit, "_optimize_in_worker", spy)
    tc.build(s, args)
    assert sent, "the build sent nothing to the worker"
    text, explicit, reply = sent[-1]
    if reply is None:
        pytest.skip("no LLVM worker here (TECOMP_LLVM_OPT_WORKER=0)")
    n, = optproc._LEN.unpack_from(reply)
    h = llvm_jit.host()
    times, report = {}, []
    with host_mod.LLVM_LOCK:
        tm = optproc.target_machine(h.triple, h.cpu, h.features)
        bitcode, obj = optproc.compile_module(text, h.triple, h.data_layout, tm, explicit,
                                              times, report)
    assert obj == reply[optproc._LEN.size + n:]
    assert bitcode[:2] == b"BC"
    assert set(times) == {"parse", "verify", "optimize", "bitcode", "codegen"}
    assert all(t >= 0.0 for t in times.values())
    assert len(report) == 1 and "InstCombinePass" in report[0]
