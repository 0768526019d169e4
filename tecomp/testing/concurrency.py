"""The ``threads`` family: compiled kernels, pools and caches used from many threads at once.

The other families attack one call at a time.  A case here runs a small random workload
(an elementwise chain, a row reduction, or two stages with a heap temporary that goes
through the pools' workspace cache, all with ``parallel`` loops) from several Python
threads AT THE SAME TIME, in one of these scenarios:

``same_module``
    one compiled ``Module`` called from 2-4 threads at once, each with its own output
    (and its own input, or one input shared by all), while another thread changes
    ``tc.set_num_threads`` (1-4: more threads than CPUs, to force preemption).
``many_modules``
    2-3 modules, JIT-built or exported with ``export_library`` and loaded with
    ``tc.load_module`` (with ``TECOMP_SHARED_POOL=1`` or without, and with
    ``tecomp.threads.share_pool`` on some), each thread calling them in a random order.
``build_while_running``
    threads call kernels while another builds new kernels with ``tc.build`` and exports
    them (the pattern of ``tecomp.dynamo``'s disk-cache writer), and another calls
    ``tc.release_workspace()`` and ``tc.set_workspace_limit()`` (0 among the limits).
``torch_compile``
    a small function or module compiled with ``torch.compile(backend="tecomp")`` (with
    a disk cache of its own, so the background writer runs), first called from 2 threads
    at once, then from 2-4 threads with distinct inputs or one shared input, while others
    change the thread count and free the kept workspace (the graphs' kept intermediates
    with it).
``fork``
    a thread runs a kernel in a loop while the process forks (maybe in the middle of a
    parallel region), and in half the cases another builds kernels (maybe inside LLVM);
    the child runs the kernel and checks its bits (in those cases it builds and checks
    one too), then exits.  (The process has built before it forks: a fork while another
    thread imports the code generator for the first time can leave the child blocked
    in CPython's import locks, docs/runtime.md.)

Every result is compared bit for bit with a serial run of the same kernel (the same
kernel on the same input gives the same bits, whatever the thread count: the family's
parallel loops never split a reduction), and that serial run with numpy; a thread that
does not finish within the case's deadline is a ``deadlock``.  A case takes a few tenths
of a second to a few seconds (most of it building); ``iterations`` sets how hard it
hammers.

    python -m tecomp.testing.fuzz --only threads --cases 100      # the fuzzer's family
    python -m tecomp.testing.concurrency --cases 50 --iterations 40 --burners 2
    python -m tecomp.testing.concurrency --replay 17

The second form is the long run: ``--burners`` processes spin on the CPUs beside it, so
that the case's threads (and the pools' workers) lose their cores at random moments.
"""
from __future__ import annotations

import argparse
import faulthandler
import multiprocessing
import os
import random
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional

import numpy as np

import tecomp as tc
from .. import threads as _threads
from .diff import Outcome, SpecCase

FAMILY = "threads"
SCENARIOS = ("same_module", "many_modules", "build_while_running", "torch_compile", "fork")
WORKLOADS = ("ew", "rowsum", "staged")
#: seconds a case's threads may take before the case is a deadlock
DEADLINE = 120.0


@dataclass
class ThreadsCase(SpecCase):
    """One case: ``spec`` (JSON-able: the scenario, its workloads, thread counts and
    iterations) and the seed of its data."""

    family: str = FAMILY

    def source(self) -> str:
        return "\n".join([
            f"# threads family: {self.spec['scenario']} ({self.name})",
            *self.replay_lines("tecomp.testing.concurrency", "concurrency",
                               "run_threads_case", target=False)])


def _workload(d: random.Random) -> dict:
    kind = d.choice(WORKLOADS)
    rows = d.choice((1, 3, 8, 17, 64, 130))
    cols = d.choice((5, 16, 33, 256, 700))
    if kind == "staged":   # a temporary of 256 KiB or more: the workspace cache
        rows, cols = d.choice(((64, 1024), (100, 700), (256, 257), (300, 300)))
    return {"kind": kind, "rows": rows, "cols": cols, "dtype": d.choice(("float32", "float64")),
            "vector": d.choice((0, 4, 8)), "salt": d.randrange(1, 9)}


def draw_threads_case(seed: int, iterations: Optional[int] = None) -> ThreadsCase:
    """Case ``seed`` of the family (its own random stream); ``iterations``: the calls each
    thread makes (default: a few, drawn)."""
    d = random.Random(seed * 7919 + 17)
    scenario = SCENARIOS[seed % len(SCENARIOS)] if d.random() < 0.5 else d.choice(SCENARIOS)
    spec = {"scenario": scenario, "threads": d.choice((2, 3, 4)),
            "pool_threads": [d.choice((1, 2, 3, 4)) for _ in range(4)],
            "iterations": iterations if iterations is not None else d.choice((3, 6, 10)),
            "workloads": [_workload(d) for _ in range(3)],
            "shared_input": d.random() < 0.5,
            "export": [d.random() < 0.5 for _ in range(3)],
            "env_shared_pool": d.random() < 0.3,
            "share_pool": [d.random() < 0.5 for _ in range(3)],
            "limits": [d.choice((0, 1 << 18, 1 << 20, 1 << 30)) for _ in range(4)],
            "torch_model": d.choice(("chain", "linear_gelu", "sort_between")),
            "sleep": d.choice((0.0, 0.0005, 0.002)),
            "fork_build": d.random() < 0.5}
    return ThreadsCase(spec=spec, seed=seed, name=f"threads seed {seed} ({scenario})",
                       fuzz_seed=seed)


# ---------------------------------------------------------------------------------
# the workloads


def build_workload(w: dict, name: str):
    """``(module, make_inputs, make_outputs, reference)`` of workload ``w``: the module
    takes the inputs then the outputs; ``reference(inputs)`` numpy's answer."""
    rows, cols, dt, kind, salt = w["rows"], w["cols"], w["dtype"], w["kind"], w["salt"]
    A = tc.placeholder((rows, cols), dtype=dt, name="A")
    k = float(salt) / 8.0
    if kind == "ew":
        C = tc.compute((rows, cols), lambda i, j: tc.tanh(A[i, j] * k) + tc.exp(A[i, j] * 0.25),
                       name="C")

        def ref(a):
            return np.tanh(a * k) + np.exp(a * 0.25)
        stages, out = [C], C
    elif kind == "rowsum":
        r = tc.reduce_axis((0, cols), name="r")
        C = tc.compute((rows,), lambda i: tc.sum(A[i, r] * A[i, r] + k, axis=r), name="C")

        def ref(a):
            return (a * a + k).sum(axis=1)
        stages, out = [C], C
    else:
        B = tc.compute((rows, cols), lambda i, j: tc.exp(A[i, j] * 0.5) * k, name="B")
        C = tc.compute((rows, cols), lambda i, j: B[i, j] + B[i, cols - 1 - j], name="C")

        def ref(a):
            b = np.exp(a * 0.5) * k
            return b + b[:, ::-1]
        stages, out = [B, C], C
    s = tc.create_schedule(out.op)
    for st in stages:
        axes = st.op.axis
        if len(axes) == 2 and w["vector"] and cols % w["vector"] == 0:
            _, ji = s[st].split(axes[1], factor=w["vector"])
            s[st].vectorize(ji)
        s[st].parallel(axes[0])
    mod = tc.build(s, [A, out], name=name)
    shape_out = (rows,) if kind == "rowsum" else (rows, cols)

    def inputs(rng):
        return [rng.uniform(-2, 2, (rows, cols)).astype(dt)]

    def outputs():
        return [np.full(shape_out, np.nan, dtype=dt)]
    return mod, inputs, outputs, ref


class _Kernel:
    """A built workload, its module (JIT or loaded), and its inputs with their serial bits."""

    def __init__(self, w: dict, name: str, rng: np.random.Generator):
        self.w = w
        self.mod, self._inputs, self._outputs, self.ref = build_workload(w, name)
        self.name = name
        self.inputs = self._inputs(rng)
        self.expect = self.serial(self.inputs)

    def serial(self, inputs) -> np.ndarray:
        out = self._outputs()
        self.mod(*inputs, *out)
        want = self.ref(*inputs)
        tol = 1e-4 if self.w["dtype"] == "float32" else 1e-9
        if not np.allclose(out[0], want, rtol=tol, atol=tol):
            raise _Mismatch(f"{self.name}: the serial run differs from numpy "
                            f"(max |diff| {np.nanmax(np.abs(out[0] - want)):.3g})")
        return out[0]

    def call_check(self, inputs=None, expect=None, mod=None) -> None:
        out = self._outputs()
        (mod or self.mod)(*(inputs or self.inputs), *out)
        _same_bits(out[0], self.expect if expect is None else expect, self.name)


class _Mismatch(Exception):
    pass


def _same_bits(got: np.ndarray, want: np.ndarray, what: str) -> None:
    g = np.ascontiguousarray(got).view(np.uint8)
    e = np.ascontiguousarray(want).view(np.uint8)
    if got.shape != want.shape or not np.array_equal(g, e):
        bad = ~((got == want) | (np.isnan(got) & np.isnan(want)))
        idx = np.argwhere(bad)
        raise _Mismatch(f"{what}: {int(bad.sum())} of {got.size} elements differ from the "
                        f"serial run (first at {tuple(int(v) for v in idx[0]) if len(idx) else '?'}; "
                        f"max |diff| {np.nanmax(np.abs(got - want)) if got.size else 0:.3g})")


# ---------------------------------------------------------------------------------
# running threads


class _Group:
    """Threads started together; the first exception any of them raised, and whether
    they all ended before the deadline."""

    def __init__(self):
        self.threads: List[threading.Thread] = []
        self.errors: List[str] = []
        self.stop = threading.Event()
        self.go = threading.Barrier(1)

    def add(self, fn: Callable[[], None], name: str, until_stopped: bool = False) -> None:
        def body():
            try:
                self.go.wait(DEADLINE)
                if until_stopped:
                    while not self.stop.is_set():
                        fn()
                else:
                    fn()
            except threading.BrokenBarrierError:
                pass
            except _Mismatch as e:
                self.errors.append(f"[{name}] {e}")
            except BaseException:  # noqa: BLE001 - reported as the case's crash
                self.errors.append(f"[{name}] {traceback.format_exc()}")
        self.threads.append(threading.Thread(target=body, name=f"tecomp-threads-{name}",
                                             daemon=True))

    def run(self, workers: int) -> Optional[str]:
        """Start every thread at once; ``workers``: how many (the first ones) the group
        waits for, after which the others are stopped.  Returns a deadlock's
        description, else what the threads raised, or None."""
        self.go = threading.Barrier(len(self.threads))
        for t in self.threads:
            t.start()
        end = time.monotonic() + DEADLINE
        for t in self.threads[:workers]:
            t.join(max(0.0, end - time.monotonic()))
        self.stop.set()
        for t in self.threads[workers:]:
            t.join(max(0.0, end - time.monotonic()))
        stuck = [t.name for t in self.threads if t.is_alive()]
        if stuck:
            return f"threads still running after {DEADLINE:g} s: {', '.join(stuck)}"
        return _join(self.errors) if self.errors else None


def _restore_settings():
    threads, limit = tc.get_num_threads(), _threads.workspace_limit()

    def restore():
        tc.set_num_threads(threads)
        tc.set_workspace_limit(limit)
    return restore


def _toggler(spec, d: random.Random):
    counts = list(spec["pool_threads"])

    def toggle():
        tc.set_num_threads(d.choice(counts))
        time.sleep(spec["sleep"] or 0.0005)
    return toggle


def _workspace(spec, d: random.Random):
    """A thread's body that frees the kept workspace (the pools' and the compiled graphs'
    intermediates) or sets a new limit (0 among them)."""
    limits = list(spec["limits"])

    def workspace():
        if d.random() < 0.5:
            tc.release_workspace()
        else:
            tc.set_workspace_limit(d.choice(limits))
        time.sleep(spec["sleep"] or 0.0005)
    return workspace


def _run_same_module(case: ThreadsCase, rng, d, tmp) -> Optional[str]:
    sp = case.spec
    k = _Kernel(sp["workloads"][0], "threads_same", rng)
    g = _Group()
    own = [k._inputs(rng) for _ in range(sp["threads"])]
    mine = [None if sp["shared_input"] else k.serial(own[t]) for t in range(sp["threads"])]

    def caller(t):
        def fn():
            for _ in range(sp["iterations"]):
                if sp["shared_input"]:
                    k.call_check()
                else:
                    k.call_check(own[t], mine[t])
        return fn
    for t in range(sp["threads"]):
        g.add(caller(t), f"call{t}")
    g.add(_toggler(sp, d), "set_num_threads", until_stopped=True)
    return g.run(sp["threads"])


def _loaded(k: _Kernel, tmp: str, i: int, env_shared: bool, share: bool):
    path = os.path.join(tmp, f"k{i}.so")
    k.mod.export_library(path)
    old = os.environ.get("TECOMP_SHARED_POOL")
    os.environ["TECOMP_SHARED_POOL"] = "1" if env_shared else "0"
    try:
        mod = tc.load_module(path)
    finally:
        if old is None:
            del os.environ["TECOMP_SHARED_POOL"]
        else:
            os.environ["TECOMP_SHARED_POOL"] = old
    if share:
        _threads.share_pool(getattr(getattr(mod, "_compiler", None), "lib", None))
    return mod


def _run_many_modules(case: ThreadsCase, rng, d, tmp) -> Optional[str]:
    sp = case.spec
    n = d.choice((2, 3))
    kernels = [_Kernel(sp["workloads"][i], f"threads_many{i}", rng) for i in range(n)]
    mods = []
    for i, k in enumerate(kernels):
        m = k.mod
        if sp["export"][i]:
            m = _loaded(k, tmp, i, sp["env_shared_pool"], sp["share_pool"][i])
            k.call_check(mod=m)   # the library's serial run: the JIT's bits
        mods.append(m)
    g = _Group()
    orders = [[d.randrange(n) for _ in range(sp["iterations"] * n)] for _ in range(sp["threads"])]

    def caller(t):
        def fn():
            for i in orders[t]:
                kernels[i].call_check(mod=mods[i])
        return fn
    for t in range(sp["threads"]):
        g.add(caller(t), f"call{t}")
    g.add(_toggler(sp, d), "set_num_threads", until_stopped=True)
    return g.run(sp["threads"])


def _run_build_while_running(case: ThreadsCase, rng, d, tmp) -> Optional[str]:
    sp = case.spec
    kernels = [_Kernel(sp["workloads"][i], f"threads_bwr{i}", rng) for i in range(2)]
    g = _Group()
    orders = [[d.randrange(2) for _ in range(sp["iterations"] * 2)]
              for _ in range(max(1, sp["threads"] - 1))]
    built = []

    def caller(t):
        def fn():
            for i in orders[t]:
                kernels[i].call_check()
        return fn

    def builder():
        for b in range(1 + sp["iterations"] // 6):
            k = _Kernel(sp["workloads"][2], f"threads_bwr_new{b}", np.random.default_rng(b))
            k.mod.export_library(os.path.join(tmp, f"new{b}.so"))
            built.append(k)
            k.call_check()
    g.add(builder, "build")
    for t in range(len(orders)):
        g.add(caller(t), f"call{t}", until_stopped=True)
    g.add(_workspace(sp, d), "workspace", until_stopped=True)
    return g.run(1)


def _torch_fn(which: str):
    import torch
    if which == "linear_gelu":
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU())
        return m, (lambda g: torch.randn(3, 8, generator=g))
    if which == "sort_between":
        def f(t):
            return torch.sort(torch.tanh(t) * 3, dim=1)[0].exp() + 1
        return f, (lambda g: torch.randn(64, 256, generator=g))

    def chain(t):
        return torch.sigmoid(t * 2 - 1) * torch.tanh(t) + t.exp().sum(dim=1, keepdim=True)
    return chain, (lambda g: torch.randn(33, 70, generator=g))


def _run_torch_compile(case: ThreadsCase, rng, d, tmp) -> Optional[str]:
    import torch

    sp = case.spec
    fn, draw = _torch_fn(sp["torch_model"])
    gen = torch.Generator().manual_seed(case.seed)
    xs = [draw(gen) for _ in range(sp["threads"])]
    old = os.environ.get("TECOMP_CACHE_DIR")
    os.environ["TECOMP_CACHE_DIR"] = os.path.join(tmp, "cache")
    try:
        torch._dynamo.reset()
        with torch.no_grad():
            c = torch.compile(fn, backend="tecomp")
            first: Dict[int, object] = {}
            g = _Group()

            def first_call(t):
                def go():
                    with torch.no_grad():
                        first[t] = c(xs[t])
                return go
            for t in range(2):
                g.add(first_call(t), f"first{t}")
            bad = g.run(2)
            if bad:
                return bad
            want = [c(x) for x in xs]   # the serial runs
            for t in range(2):
                _same_bits(first[t].numpy(), want[t].numpy(), f"compiled call {t} (first)")
            for t, x in enumerate(xs):
                e = fn(x)
                if not torch.allclose(want[t], e, rtol=2e-5, atol=2e-5):
                    raise _Mismatch(f"compiled model differs from eager on input {t} "
                                    f"(max |diff| {(want[t] - e).abs().max().item():.3g})")
            g = _Group()

            def caller(t):
                def go():
                    with torch.no_grad():
                        for _ in range(sp["iterations"]):
                            i = 0 if sp["shared_input"] else t
                            _same_bits(c(xs[i]).numpy(), want[i].numpy(),
                                       f"compiled call from thread {t}")
                return go
            for t in range(sp["threads"]):
                g.add(caller(t), f"call{t}")
            g.add(_toggler(sp, d), "set_num_threads", until_stopped=True)
            g.add(_workspace(sp, d), "workspace", until_stopped=True)
            bad = g.run(sp["threads"])
            if bad:
                return bad
        # the disk writer's libraries written before the cache directory goes (the
        # backend imported the module; not imported here: testing stays below dynamo)
        dcache = sys.modules.get("tecomp.dynamo.cache")
        if dcache is not None:
            dcache.flush()
    finally:
        if old is None:
            os.environ.pop("TECOMP_CACHE_DIR", None)
        else:
            os.environ["TECOMP_CACHE_DIR"] = old
    return None


def _run_fork(case: ThreadsCase, rng, d, tmp) -> Optional[str]:
    sp = case.spec
    k = _Kernel(sp["workloads"][0], "threads_fork", rng)
    if not hasattr(os, "fork"):
        return None
    g = _Group()
    g.add(k.call_check, "call", until_stopped=True)
    results = []
    if sp.get("fork_build"):   # and builds in the parent while it forks (inside LLVM)
        built = [0]

        def builder():
            _Kernel(sp["workloads"][1], f"threads_fork_b{built[0]}",
                    np.random.default_rng(built[0])).call_check()
            built[0] += 1
        g.add(builder, "build", until_stopped=True)

    def forker():
        for _ in range(max(1, sp["iterations"] // 3)):
            time.sleep(sp["sleep"])
            pid = os.fork()
            if pid == 0:   # the child: run the kernel (new workers), check its bits
                code = 3
                # where a child hangs: its threads' stacks on stderr before it is killed
                faulthandler.dump_traceback_later(50)
                try:
                    k.call_check()
                    if sp.get("fork_build"):   # and build one (its own LLVM worker)
                        _Kernel(sp["workloads"][2], "threads_fork_child",
                                np.random.default_rng(1)).call_check()
                    code = 0
                except _Mismatch:
                    code = 1
                except BaseException:  # noqa: BLE001
                    code = 2
                os._exit(code)
            end = time.monotonic() + 60
            while True:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    results.append(os.waitstatus_to_exitcode(status))
                    break
                if time.monotonic() > end:
                    os.kill(pid, 9)
                    os.waitpid(pid, 0)
                    results.append("hang")
                    break
                time.sleep(0.01)
    g.add(forker, "fork")
    g.threads.reverse()   # the forker first: it is the one the group waits for
    bad = g.run(1)
    if bad is None and any(r != 0 for r in results):
        what = ("a forked child hung" if "hang" in results else
                "a forked child's bits differ from the serial run" if 1 in results else
                "a forked child failed")
        bad = (f"{what}: exit codes {results} (1: wrong bits, 2: an exception, 'hang': no "
               f"exit within 60 s, negative: a signal)")
    return bad


_RUNNERS = {"same_module": _run_same_module, "many_modules": _run_many_modules,
            "build_while_running": _run_build_while_running,
            "torch_compile": _run_torch_compile, "fork": _run_fork}


def _join(errors: List[str]) -> str:
    return "\n".join(errors[:5]) + (f"\n... and {len(errors) - 5} more" if len(errors) > 5
                                     else "")


def run_threads_case(case: ThreadsCase, check_passes: bool = False) -> Outcome:
    """Run the case; ``ok``, ``mismatch`` (bits that differ from the serial run, or a
    serial run that differs from numpy), or ``crash`` (an exception in any thread, or a
    ``deadlock``)."""
    sp = case.spec
    if sp["scenario"] == "torch_compile":
        try:
            import torch  # noqa: F401
        except ImportError:
            return Outcome("ok", case, "torch", "torch is not installed")
    rng = np.random.default_rng(case.seed)
    d = random.Random(case.seed)
    restore = _restore_settings()
    errors: List[str] = []
    try:
        with tempfile.TemporaryDirectory(prefix="tecomp-threads-") as tmp:
            try:
                runner = _RUNNERS[sp["scenario"]]
                g_errors = runner(case, rng, d, tmp)
            except _Mismatch as e:
                return Outcome("mismatch", case, sp["scenario"], str(e))
            except Exception:  # noqa: BLE001
                return Outcome("crash", case, sp["scenario"], traceback.format_exc())
            if g_errors:
                errors.append(g_errors)
    finally:
        restore()
    if not errors:
        return Outcome("ok", case, sp["scenario"])
    text = _join(errors)
    if "threads still running" in text or "a forked child hung" in text:
        return Outcome("crash", case, "deadlock", text)
    kind = "mismatch" if "differ" in text and "Traceback" not in text else "crash"
    return Outcome(kind, case, sp["scenario"], text)


# ---------------------------------------------------------------------------------
# the long run


def _burn(stop) -> None:   # pragma: no cover - runs in a child process
    x = 0
    while not stop.is_set():
        for _ in range(100000):
            x = (x * 1103515245 + 12345) & 0xFFFFFFFF


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tecomp.testing.concurrency",
                                 description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=20, help="number of cases (default 20)")
    ap.add_argument("--seed", type=int, default=0, help="first seed (default 0)")
    ap.add_argument("--iterations", type=int, default=None,
                    help="calls each thread makes (default: drawn, 3-10)")
    ap.add_argument("--burners", type=int, default=0,
                    help="processes that spin on the CPUs beside the cases (default 0)")
    ap.add_argument("--scenario", choices=SCENARIOS, default=None,
                    help="run only the cases of one scenario")
    ap.add_argument("--replay", type=int, default=None, help="run one seed, print its report")
    args = ap.parse_args(argv)
    ctx = multiprocessing.get_context("spawn")
    stop = ctx.Event()
    burners = [ctx.Process(target=_burn, args=(stop,), daemon=True)
               for _ in range(args.burners)]
    for p in burners:
        p.start()
    failed = 0
    try:
        seeds = ([args.replay] if args.replay is not None else
                 range(args.seed, args.seed + args.cases))
        for seed in seeds:
            case = draw_threads_case(seed, args.iterations)
            if args.scenario and case.spec["scenario"] != args.scenario and args.replay is None:
                continue
            t0 = time.perf_counter()
            o = run_threads_case(case)
            print(f"seed {seed}: {o.kind} ({case.spec['scenario']}, "
                  f"{time.perf_counter() - t0:.1f}s)", flush=True)
            if not o.ok:
                failed += 1
                print(o.report(), flush=True)
    finally:
        stop.set()
        for p in burners:
            p.join(5)
    print(f"failed: {failed}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
