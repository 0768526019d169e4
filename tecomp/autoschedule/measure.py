"""Measuring candidate schedules: each one built and timed in a child process.

A *workload* is ``args``, the list a user gives ``tc.build`` (placeholders, computes,
``tc.var`` scalars).  A *candidate* is a JSON-able ``payload`` that a module-level
``build_fn(args, payload)`` turns into a :class:`~tecomp.schedule.Schedule` (built here
with ``tc.build(s, args, target="llvm")``) or into any callable taking the argument arrays
in ``args`` order.  A runner measures a list of payloads and returns one
:class:`MeasureResult` per payload, in order::

    runner = LocalRunner(timeout=10)
    results = runner.run(args, build_fn, payloads, shapes={"n": 1024})

**Isolation.**  Every candidate runs in its own child process, forked from the process
that measures (``os.fork``; where there is none, a ``multiprocessing`` "spawn" child, for
which ``args``, ``build_fn`` and the payload must pickle).  The child builds, makes the
inputs (:func:`make_inputs`), calls the kernel once (its outputs are the candidate's
result), times it, checks that the timed calls left the same outputs (a kernel that
accumulates into its output without initialising it fails here), and sends the times and
the outputs back through a pipe.  The measuring process never calls generated code.

* A child that dies (a signal, ``os._exit``, ``sys.exit``, a ``MemoryError``):
  ``error="crashed: SIGSEGV"`` (or ``"crashed: exit code 3"``,
  ``"crashed: MemoryError: ..."``).  A child's address space is capped
  (``RLIMIT_AS``) at its size when forked plus ``memory_limit_mb`` (by default three
  quarters of the memory available then): a candidate that would exhaust the machine's
  memory fails in its child, not by the OOM killer's choice of process.
* One that takes more than ``timeout`` seconds (build and run together) is killed with
  SIGKILL, with its process group (the child makes one, so that whatever it started
  goes too): ``error="timed out after 10s"``.
* One that raises: ``error="ScheduleError: <the first line of the message>"``.

The child is forked with ``os.fork`` rather than ``multiprocessing``'s "fork" context
because dask's worker processes are daemonic, and ``multiprocessing`` refuses to start a
child from a daemonic process; :class:`DaskRunner` runs the same function in its
workers.  The child optimises LLVM modules itself (``TECOMP_LLVM_OPT_WORKER=0`` in the
child: a new optimiser worker process per candidate would cost about 0.2 s, and the
memory that LLVM leaks goes away with the child).  The measuring process imports the
code generator and initialises LLVM's native target once, so that every child inherits
them instead of paying for them.

**The persistent worker.**  ``LocalRunner(persistent=True)`` (the default for target
``cuda``) measures in one long-lived spawned process instead, candidate after candidate
(a fresh Python and CUDA context per candidate cost seconds each on the GPU).  A crash,
a hang (the worker is killed with its process group after ``timeout``) or any failure of a
candidate ends that worker, and the next candidate gets a fresh one, so a fault cannot
outlive the candidate that caused it; the failures read as above.

**The GPU.**  For target ``cuda`` the measuring process is a fresh one ("spawn": CUDA does
not survive a fork of a process that initialised it, and the measuring process may have),
which builds the module (its cubin loaded in a CUDA context of its own), rejects a kernel
that keeps anything in local memory (spilled registers), copies the inputs to the GPU
once, and times calls on the device arrays (each call waits for its kernels).

**Compiling in parallel.**  For targets ``cuda`` and ``cuda-emu`` ``LocalRunner`` first
lowers each candidate of a ``run`` in this process and compiles them all at once, one
compiler per core (:data:`COMPILE_JOBS`): nvcc into tecomp's cubin cache
(:func:`tecomp.runtime.nvcc.compile_cubin`; the device's architecture is read here
through the driver, without a context: the target's backend says how,
``tecomp.build.Backend.ahead_compiler``), g++ into the emulation's library cache.  The
measuring process then loads what it builds from those caches, so candidates are
measured one after another while their compilers ran side by side (nvcc takes seconds
per kernel; one candidate after the other, compiling dominated a GPU search).  This is
best effort: a candidate that fails to lower or compile here is left alone, and fails,
with its own message, where it is measured.  ``LocalRunner(precompile=False)`` turns it
off (``build_fn`` is then called only in the measuring process).  Target ``cuda-emu``
runs the emulation on numpy arrays (its times say nothing about a GPU; it checks the
search's plumbing).

**Timing.**  ``repeat`` repetitions of ``number`` calls each, timed with
``time.perf_counter`` with Python's garbage collector off; ``times`` holds each
repetition's mean seconds per call.  ``number=None`` picks the smallest count that makes
one repetition last at least ``min_repeat_seconds``.  The child uses the thread count of
the measuring process (``tc.get_num_threads()``) unless ``num_threads`` says otherwise.
Input arrays are 64-byte aligned, so that no candidate's time depends on where numpy put
its arrays.  Candidates are measured one at a time (on a machine with few cores, timings
that overlap measure the contention).

**Correctness.**  The outputs (the computes in ``args``) of the first candidate that ran
become the runner's ``reference``; every later candidate that ran is compared with it,
and a mismatch is a failure (``error="wrong result: output C max abs error 0.5 at index
(3, 7) ..."``).  The reference carries over from one ``run`` to the next while the
workload is the same (the same tensor objects in ``args``, the same ``shapes`` and
``seed``), so a search that measures in batches compares every batch with its first
correct candidate; ``run(..., reference=arrays)`` gives one explicitly, and
``runner.reference = None`` forgets it.

Tolerances: integers and bools must be equal.  A float output must satisfy
``|out - ref| <= atol_eff + rtol * |ref|`` elementwise, with NaN only where the reference
has NaN, where ``atol_eff = atol * sqrt(R) * max(1, max|ref|)``: ``R`` is the number of
terms the workload reduces over (the sum over its reduction stages of each one's
reduction size, at least 1), since reassociating a sum of ``R`` terms changes it by about
``sqrt(R)`` roundings of its magnitude.  Defaults by dtype: float32 ``rtol=1e-3,
atol=1e-5``; float16 (storage only) ``rtol=1e-2, atol=1e-3``; float64 ``rtol=1e-7,
atol=1e-12``.  ``rtol=``/``atol=`` given to a runner replace these and are used as they
are (no scaling).

:class:`DaskRunner` has the same contract on a ``dask.distributed`` cluster (an optional
dependency: ``pip install "tecomp[distributed]"``).
"""
from __future__ import annotations

import gc
import math
import numbers
import os
import signal
import sys
import time
import warnings
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np

from ..build import backend_for, build
from ..codegen.llvm import threadpool as tp, compiler as _compiler, jit as llvm_jit
from ..errors import AutoScheduleError
from ..ir import dtype as _dt
from ..ir.expr import Var
from ..ir.functor import collect
from ..lower.pipeline import lower
from ..runtime import llvm as _runtime
from ..runtime.argcheck import eval_host_expr
from ..runtime.arrays import empty
from ..runtime.timing import calls_per_repeat, time_calls
from ..schedule import Schedule, create_schedule, trace
from ..target import as_target
from ..te.tensor import PlaceholderOp, Tensor, compute_ops, compute, placeholder

__all__ = ["MeasureResult", "make_inputs", "LocalRunner", "DaskRunner", "get_runner"]

#: default (rtol, atol) per float dtype; atol is scaled, see the module docstring
DEFAULT_TOLERANCE = {"float16": (1e-2, 1e-3), "bfloat16": (2e-2, 1e-2), "float32": (1e-3, 1e-5),
                     "float64": (1e-7, 1e-12)}
#: extra seconds DaskRunner waits for a worker's answer beyond ``timeout`` (sending the
#: job, a worker's first import of tecomp, sending the outputs back)
DASK_MARGIN_SECONDS = 30.0
_ALIGN = 64


@dataclass
class MeasureResult:
    """One candidate's measurement.

    ``times``: seconds per call, one entry per timed repetition (empty when it failed
    before timing).  ``error``: why it failed (None when ``ok``).  ``build_seconds``:
    ``build_fn`` plus ``tc.build`` in the child.  ``outputs``: the output arrays, only
    while the runner compares them (None in what ``run`` returns).  ``total_seconds``:
    the whole measurement as the measuring process saw it (process start, build, inputs,
    runs, transfer)."""

    ok: bool
    times: List[float] = field(default_factory=list)
    error: Optional[str] = None
    build_seconds: float = 0.0
    outputs: Optional[List[np.ndarray]] = None
    total_seconds: float = 0.0


# ---------------------------------------------------------------------------------------
# the workload: which argument is what, with every extent bound


@dataclass
class _Arg:
    kind: str                       # "input", "output" or "scalar"
    name: str
    shape: tuple = ()
    dtype: str = ""
    value: Any = None               # scalars


@dataclass
class _Plan:
    args: List[_Arg]
    outputs: List[int]              # positions of the outputs in args
    reduce_terms: int               # R of the module docstring


def _vars_in(e) -> list:
    return collect(e, lambda n: isinstance(n, Var))


def _plan(args, shapes, what: str = "measure") -> _Plan:
    """Every argument's kind, concrete shape and dtype (or a scalar's value), from
    ``shapes``; an AutoScheduleError for anything unbound."""
    if isinstance(args, Tensor) or not isinstance(args, (list, tuple)):
        raise AutoScheduleError(f"{what}: args must be the list you pass to tc.build (e.g. "
                                f"[A, B, C]), got {type(args).__name__}")
    if shapes is None:
        shapes = {}
    if not isinstance(shapes, dict):
        raise AutoScheduleError(f"{what}: shapes must be a dict of symbolic extent names to "
                                f"ints (e.g. {{'n': 1024}}), got {shapes!r:.60}")
    env: Dict[Any, Any] = {}

    def bind(v: Var, where: str):
        if v in env:
            return
        if v.name not in shapes:
            raise AutoScheduleError(
                f"{what}: {where} has no value; pass "
                f"shapes={{{v.name!r}: ...}} with the value to measure at")
        x = shapes[v.name]
        if isinstance(x, bool) or not isinstance(x, numbers.Real) or (
                _dt.is_int(v.dtype) and not isinstance(x, numbers.Integral)):
            raise AutoScheduleError(f"{what}: shapes[{v.name!r}] must be a number of the "
                                    f"variable's dtype {v.dtype}, got {x!r:.60}")
        env[v] = int(x) if _dt.is_int(v.dtype) else (bool(x) if v.dtype == "bool" else float(x))

    out: List[_Arg] = []
    outputs: List[int] = []
    for pos, a in enumerate(args):
        if isinstance(a, Var):
            bind(a, f"the scalar argument {a.name} (argument {pos + 1})")
            out.append(_Arg("scalar", a.name, value=env[a]))
            continue
        if not isinstance(a, Tensor):
            raise AutoScheduleError(f"{what}: args[{pos}] is a {type(a).__name__}, not a tensor "
                                    "or a tc.var; pass the placeholders and computes you give "
                                    "tc.build")
        dims = []
        for d, e in enumerate(a.shape):
            for v in _vars_in(e):
                bind(v, f"dimension {d} of tensor {a.name} is symbolic ({v.name}) and")
            n = int(eval_host_expr(e, env))
            if n < 0:
                raise AutoScheduleError(f"{what}: dimension {d} of tensor {a.name} is {n} with "
                                        f"shapes={shapes!r:.80}; extents must be >= 0")
            dims.append(n)
        kind = "input" if isinstance(a.op, PlaceholderOp) else "output"
        if kind == "output":
            outputs.append(pos)
        out.append(_Arg(kind, a.name, tuple(dims), a.dtype))
    # the number of terms reduced over, for the float tolerance (best effort: an extent
    # that cannot be evaluated counts as 1)
    terms = 0
    for op in compute_ops([args[i] for i in outputs]):
        size = 1
        for iv in op.reduce_axis:
            try:
                size *= max(1, int(eval_host_expr(iv.dom.extent, env)))
            except Exception:  # noqa: BLE001 - an extent of a var not in shapes
                pass
        if op.reduce_axis:
            terms += size
    return _Plan(out, outputs, max(1, terms))


def _inputs_from_plan(plan: _Plan, seed: int) -> list:
    rng = np.random.default_rng(seed)
    arrays: list = []
    for a in plan.args:
        if a.kind == "scalar":
            arrays.append(a.value)
            continue
        arr = empty(a.shape, a.dtype, _ALIGN)
        if a.kind == "output":
            arr.fill(0)
        elif a.dtype == "bool":
            arr[...] = rng.random(a.shape) < 0.5
        elif a.dtype.startswith("float"):
            arr[...] = rng.uniform(-1.0, 1.0, a.shape)
        elif a.dtype.startswith("uint"):
            arr[...] = rng.integers(0, 4, a.shape)
        else:
            arr[...] = rng.integers(-3, 4, a.shape)
        arrays.append(arr)
    return arrays


def make_inputs(args, shapes: Optional[dict] = None, seed: int = 0) -> list:
    """Deterministic arguments for ``args`` (the list given to ``tc.build``), in order.

    Placeholders get random data of their dtype: floats uniform in [-1, 1), signed ints
    in [-3, 4), unsigned ints in [0, 4), bools half true.  Computes (the outputs) get
    zeros.  ``tc.var`` scalars get their value from ``shapes``; symbolic extents are
    evaluated with ``shapes`` (``{"n": 37}``), and one with no value raises
    :class:`~tecomp.errors.AutoScheduleError`.  Arrays are C-contiguous and 64-byte
    aligned; the same ``args``, ``shapes`` and ``seed`` give the same values."""
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise AutoScheduleError(f"make_inputs: seed must be an int, got {seed!r:.60}")
    return _inputs_from_plan(_plan(args, shapes, "make_inputs"), int(seed))


# ---------------------------------------------------------------------------------------
# comparing outputs


def _index_text(idx) -> str:
    return str(tuple(int(i) for i in idx))


#: elements per slice when comparing large outputs (float64 temporaries stay in cache)
_SLICE = 1 << 16


def _slices(a: np.ndarray):
    flat = a.reshape(-1)
    for i in range(0, flat.size, _SLICE):
        yield flat[i:i + _SLICE]


def _finite_abs_max(ref: np.ndarray) -> float:
    """The largest finite ``|ref|`` (0 when there is none)."""
    m = 0.0
    with np.errstate(invalid="ignore", over="ignore"):
        for r in _slices(np.ascontiguousarray(ref)):
            r = np.abs(r.astype(np.float64))
            m = max(m, float(np.max(r, where=np.isfinite(r), initial=0.0)))
    return m


def _all_close(out: np.ndarray, ref: np.ndarray, rtol: float, atol: float) -> bool:
    """``np.isclose(out, ref, rtol, atol, equal_nan=True).all()`` in float64, a slice at a
    time (no full-size temporaries)."""
    with np.errstate(invalid="ignore", over="ignore"):
        for o, r in zip(_slices(np.ascontiguousarray(out)), _slices(np.ascontiguousarray(ref))):
            o, r = o.astype(np.float64), r.astype(np.float64)
            ok = np.abs(o - r) <= atol + rtol * np.abs(r)
            ok &= np.isfinite(r)   # (an infinite reference matches only itself, below)
            if not ok.all():
                ok |= (o == r) | (np.isnan(o) & np.isnan(r))
                if not ok.all():
                    return False
    return True


def _compare(out, ref, name: str, dtype: str, terms: int, rtol=None, atol=None,
             what: str = "wrong result") -> Optional[str]:
    """None when ``out`` matches ``ref``, else the error message."""
    out = np.asarray(out)
    ref = np.asarray(ref)
    if out.shape != ref.shape or out.dtype != ref.dtype:
        return (f"{what}: output {name} is {out.dtype}{list(out.shape)}, the reference "
                f"{ref.dtype}{list(ref.shape)}")
    if out.size == 0:
        return None
    if out.dtype.kind == "f":
        d_rtol, d_atol = DEFAULT_TOLERANCE.get(dtype, DEFAULT_TOLERANCE["float32"])
        if rtol is None:
            rtol = d_rtol
        if atol is None:
            atol = d_atol * math.sqrt(terms) * max(1.0, _finite_abs_max(ref))
        if np.array_equal(out, ref) or _all_close(out, ref, rtol, atol):
            return None   # (the common case, in slices: outputs of 100 MB and more)
        o = out.astype(np.float64)
        r = ref.astype(np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            bad = ~np.isclose(o, r, rtol=rtol, atol=atol, equal_nan=True)
            if not bad.any():
                return None
            err = np.abs(o - r)
        err = np.where(np.isnan(err), np.inf, err)
        tol = f"; tolerance {atol:.2g} + {rtol:.2g}*|expected|"
    else:
        if np.array_equal(out, ref):
            return None
        bad = out != ref
        err = np.abs(out.astype(np.float64) - ref.astype(np.float64))
        tol = "; integers must be equal"
    k = int(np.argmax(np.where(bad.ravel(), err.ravel(), -1.0)))
    idx = np.unravel_index(k, out.shape)
    e = abs(float(out[idx]) - float(ref[idx]))
    return (f"{what}: output {name} max abs error {e:.3g} at index {_index_text(idx)} (got "
            f"{_value_text(out[idx])}, expected {_value_text(ref[idx])}; {int(bad.sum())} of "
            f"{out.size} elements differ{tol})")


def _value_text(v) -> str:
    v = v.item()
    return f"{v:.7g}" if isinstance(v, float) else str(v)


# ---------------------------------------------------------------------------------------
# one candidate in a child process


@dataclass
class _Job:
    """Everything a child needs; pickled for the spawn start method and for dask."""

    args: list
    build_fn: Callable
    payload: Any
    shapes: dict
    seed: int
    timeout: float
    number: Optional[int]
    repeat: int
    min_repeat_seconds: float
    num_threads: int
    rtol: Optional[float] = None
    atol: Optional[float] = None
    memory_limit_mb: Optional[float] = None
    target: str = "llvm"            # the tc.Target's string a Schedule is built for
    persistent: bool = False        # measured by the persistent worker (see _Worker)


def _first_line(e: BaseException) -> str:
    msg = str(e).strip().splitlines()
    text = msg[0] if msg else ""
    if len(text) > 200:
        text = text[:197] + "..."
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def _exit_text(code: Optional[int]) -> str:
    if code is None:
        return "exit status unknown"
    if code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


def _parent_threads() -> int:
    """The thread count of this process, without compiling the thread pool for it."""
    if tp._POOL is not None:
        return tp.get_num_threads()
    return tp._default_num_threads()


def _use_threads(n: int) -> None:
    if tp._POOL is not None:
        if tp.get_num_threads() != n:
            tp.set_num_threads(n)
    else:  # the pool is made (with this count) by the first parallel kernel, if any
        os.environ["TECOMP_NUM_THREADS"] = str(n)


def _time_calls(f, arrays, number: Optional[int], repeat: int, min_s: float) -> List[float]:
    """``number=None``: the smallest count that makes a repetition last ``min_s``."""
    n = calls_per_repeat(f, arrays, 1, min_s) if number is None else number
    return time_calls(f, arrays, n, repeat)


def _measure_here(job: _Job):
    """What the child does: (times, outputs, build_seconds); raises on failure."""
    os.environ["TECOMP_LLVM_OPT_WORKER"] = "0"
    _use_threads(job.num_threads)
    plan = _plan(job.args, job.shapes)
    t0 = time.perf_counter()
    obj = job.build_fn(job.args, job.payload)
    if isinstance(obj, Schedule):
        f = build(obj, job.args, target=job.target)
    elif callable(obj):
        f = obj
    else:
        raise TypeError(f"build_fn returned {obj!r:.40} ({type(obj).__name__}), not a "
                        "Schedule or a callable")
    arrays = _inputs_from_plan(plan, job.seed)
    call, fetch = backend_for(job.target).timed_call(f, arrays)
    build_seconds = time.perf_counter() - t0
    call(*arrays)
    outputs = [np.array(fetch()[i], copy=True) for i in plan.outputs]
    gc.disable()
    times = _time_calls(call, arrays, job.number, job.repeat, job.min_repeat_seconds)
    gc.enable()
    after = fetch()
    for k, i in enumerate(plan.outputs):
        a = plan.args[i]
        err = _compare(after[i], outputs[k], a.name, a.dtype, plan.reduce_terms, job.rtol,
                       job.atol, what="wrong result: repeated calls disagree")
        if err is not None:
            raise _WrongResult(err + "; does the kernel read its output before writing it?")
    return times, outputs, build_seconds


class _WrongResult(Exception):
    pass


def _flush_stdio() -> None:
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except Exception:  # noqa: BLE001 - a closed or replaced stream
            pass


def _child_main(conn, job: _Job) -> int:
    """The body of the child: measure, send one message, return the exit code.  The
    parent may kill the child as soon as the message has arrived."""
    _child_setup(job.memory_limit_mb)
    try:
        msg = _measure_message(job)
    except SystemExit as e:
        _flush_stdio()
        return e.code if isinstance(e.code, int) else 1
    _send(conn, msg)
    conn.close()
    return 0


def _child_setup(memory_limit_mb: Optional[float]) -> None:
    """A measuring process's own process group (killed whole), no crash dumps, no stdin,
    its address space capped."""
    try:
        os.setpgid(0, 0)
    except (OSError, AttributeError):
        pass
    try:  # a crash is the expected outcome of some candidates: no traceback dump for it
        import faulthandler

        faulthandler.disable()
    except Exception:  # noqa: BLE001
        pass
    try:
        fd = os.open(os.devnull, os.O_RDONLY)
        os.dup2(fd, 0)
        os.close(fd)
    except OSError:
        pass
    _limit_memory(memory_limit_mb)


def _measure_message(job: _Job) -> tuple:
    """``("ok", times, outputs, build_seconds)`` or ``("error", text)`` (SystemExit
    passes: the candidate ended the process)."""
    try:
        return ("ok",) + _measure_here(job)
    except _WrongResult as e:
        return ("error", str(e))
    except MemoryError as e:
        return ("error", "crashed: " + _first_line(e))
    except Exception as e:  # noqa: BLE001 - the candidate's failure, reported
        return ("error", _first_line(e))


def _send(conn, msg: tuple) -> None:
    _flush_stdio()
    try:
        conn.send(msg)
    except Exception as e:  # noqa: BLE001 - e.g. an output that does not pickle
        conn.send(("error", "could not send the result: " + _first_line(e)))


# -- the persistent worker: one long-lived process measures candidates in turn --------

#: seconds a new worker may take to start (a fresh Python importing tecomp)
WORKER_START_SECONDS = 120.0


def _worker_main(conn, memory_limit_mb: Optional[float]) -> None:
    """The persistent worker's loop: a job in, its message out, until the pipe closes."""
    _child_setup(memory_limit_mb)
    # (lazy: imported in the worker before it says ready: a job's timeout is its own)
    from .. import build  # noqa: F401

    conn.send(("ready",))
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):
            break
        try:
            msg = _measure_message(job)
        except SystemExit as e:
            _flush_stdio()
            sys.exit(e.code if isinstance(e.code, int) else 1)
        _send(conn, msg)


class _Worker:
    """A spawned process that measures candidates one after another (for the GPU: a
    fresh process and CUDA context per candidate cost seconds, one process costs them
    once).  After a candidate fails in any way the worker is replaced (a GPU fault leaves
    its context unusable)."""

    def __init__(self, memory_limit_mb: Optional[float]):
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        self.conn, theirs = ctx.Pipe(duplex=True)
        self.proc = ctx.Process(target=_worker_main, args=(theirs, memory_limit_mb),
                                daemon=True)
        self.proc.start()
        theirs.close()
        self.ready = False

    def _wait(self, deadline: float):
        """``("message", msg)``, ``("timeout", None)`` or ``("died", None)``."""
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return "timeout", None
            if self.conn.poll(min(remaining, 0.25)):
                try:
                    return "message", self.conn.recv()
                except (EOFError, OSError):
                    return "died", None
            if not self.proc.is_alive():
                return "died", None

    def measure(self, job: _Job):
        """(outcome, message) of one job, as ``measure_candidate`` reads a child's."""
        if not self.ready:
            outcome, msg = self._wait(time.monotonic() + WORKER_START_SECONDS)
            if outcome != "message":
                return "died", None
            self.ready = True
        self.conn.send(job)
        return self._wait(time.monotonic() + job.timeout)

    def close(self) -> Optional[int]:
        """Kill the worker and its process group; its exit status."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (OSError, AttributeError):
            pass
        self.proc.kill()
        self.proc.join(5)
        self.conn.close()
        return self.proc.exitcode


_WORKERS: Dict[tuple, _Worker] = {}


def _close_workers() -> None:
    for w in list(_WORKERS.values()):
        w.close()
    _WORKERS.clear()


import atexit  # noqa: E402

atexit.register(_close_workers)


def _measure_in_worker(job: _Job) -> MeasureResult:
    key = (job.target, job.memory_limit_mb)
    start = time.monotonic()
    w = _WORKERS.get(key)
    if w is None or not w.proc.is_alive():
        w = _WORKERS[key] = _Worker(job.memory_limit_mb)
    outcome, msg = w.measure(job)
    total = time.monotonic() - start
    if outcome == "message" and msg[0] == "ok":
        _, times, outputs, build_seconds = msg
        return MeasureResult(True, list(times), None, build_seconds, outputs, total)
    status = _WORKERS.pop(key).close()   # whatever went wrong, the next job gets a fresh one
    if outcome == "timeout":
        return MeasureResult(False, [], f"timed out after {job.timeout:g}s", total_seconds=total)
    if outcome != "message":
        return MeasureResult(False, [], f"crashed: {_exit_text(status)}", total_seconds=total)
    return MeasureResult(False, [], msg[1], total_seconds=total)


def _proc_kib(path: str, key: str) -> Optional[int]:
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def _limit_memory(limit_mb: Optional[float]) -> None:
    """Cap the child's address space at its size now plus ``limit_mb`` MiB (by default
    three quarters of the memory available now): a candidate that would exhaust the
    machine's memory fails with a MemoryError (or a kernel's failed allocation) in its
    child, instead of waking the OOM killer, which may pick the measuring process."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not on Linux/macOS
        return
    if limit_mb is None:
        avail = _proc_kib("/proc/meminfo", "MemAvailable")
        if avail is None:
            return
        limit_mb = 0.75 * avail / 1024
    vsize = _proc_kib("/proc/self/status", "VmSize")
    if vsize is None:
        return
    cap = int((vsize / 1024 + limit_mb) * 2**20)
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard != resource.RLIM_INFINITY:
            cap = min(cap, hard)
        if soft == resource.RLIM_INFINITY or cap < soft:
            resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    except (ValueError, OSError):
        pass


def _spawn_entry(conn, job: _Job) -> None:
    # multiprocessing "spawn" target (platforms without fork)
    code = _child_main(conn, job)
    sys.exit(code)


def _forks(job: _Job) -> bool:
    """Whether ``job``'s child is forked: where the platform can and the target's backend
    measures in a forked child (``Backend.measure_start``; not CUDA, which does not
    survive a fork: that child is a fresh process with a CUDA context of its own)."""
    return hasattr(os, "fork") and backend_for(job.target).measure_start == "fork"


class _Child:
    """One child process running ``_child_main``; forked where possible (:func:`_forks`)."""

    def __init__(self, job: _Job):
        import multiprocessing as mp

        self.recv, send = mp.Pipe(duplex=False)
        self.proc = None
        self.pid = None
        self.status: Optional[int] = None     # multiprocessing convention: -signal
        self._reaped = False
        if _forks(job):
            _flush_stdio()   # what is buffered now must not be written twice
            with warnings.catch_warnings():
                # Python 3.12+ warns about fork() in a process with threads: the child
                # only runs tecomp's code and the candidate, and leaves with os._exit
                warnings.simplefilter("ignore", DeprecationWarning)
                pid = os.fork()
            if pid == 0:  # the child: never return into the caller's stack
                code = 1
                try:
                    self.recv.close()
                    code = _child_main(send, job)
                except BaseException:  # noqa: BLE001
                    code = 1
                finally:
                    os._exit(code)
            self.pid = pid
            try:
                os.setpgid(pid, pid)   # also done by the child: whichever runs first
            except OSError:
                pass
        else:  # platforms without fork (tested with os.fork removed), and the GPU
            self.proc = mp.get_context("spawn").Process(target=_spawn_entry, args=(send, job))
            self.proc.start()
            self.pid = self.proc.pid
        send.close()

    # -- state, without reaping a forked child (its pid keeps naming its group) ---------
    def exited(self) -> bool:
        if self.proc is not None:
            return self.proc.exitcode is not None
        if self._reaped:
            return True
        if hasattr(os, "waitid"):
            try:
                r = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:   # reaped by someone else (a SIGCHLD handler)
                self._reaped = True
                return True
            return r is not None
        try:
            pid, st = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            self._reaped = True
            return True
        if pid:
            self._reaped = True
            self.status = os.waitstatus_to_exitcode(st)
        return bool(pid)

    def wait_exited(self, seconds: float) -> bool:
        end = time.monotonic() + seconds
        while not self.exited():
            if time.monotonic() >= end:
                return False
            time.sleep(0.002)
        return True

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            return
        if self._reaped:
            return
        for f, who in ((getattr(os, "killpg", None), self.pid), (os.kill, self.pid)):
            if f is None:
                continue
            try:
                f(who, signal.SIGKILL)
            except OSError:
                pass

    def reap(self) -> Optional[int]:
        """Kill whatever is left of the child's process group, wait for the child; its
        exit status."""
        if self.proc is not None:
            self.proc.join(5)
            if self.proc.exitcode is None:
                self.proc.kill()
                self.proc.join()
            self.status = self.proc.exitcode
        elif not self._reaped:
            try:
                os.killpg(self.pid, signal.SIGKILL)   # leftovers (the child is a zombie
            except (OSError, AttributeError):         # or gone: its pid still names them)
                pass
            try:
                _, st = os.waitpid(self.pid, 0)
                self.status = os.waitstatus_to_exitcode(st)
            except ChildProcessError:
                pass
            self._reaped = True
        try:
            self.recv.close()
        except OSError:
            pass
        return self.status


_WARM = False


def _prewarm() -> None:
    """Import the code generator and initialise LLVM's native target in this process, so
    that every forked child inherits them (none of it runs generated code)."""
    global _WARM
    if _WARM:
        return
    import numpy.random  # noqa: F401  (numpy imports it lazily: 8 ms in every child)


    llvm_jit.host()   # (takes the LLVM lock itself)
    # lowering imports the passes it needs on first use: lower a small compute here
    a = placeholder((16, 16), name="A")
    b = compute((16, 16), lambda i, j: a[i, j] * 2 + 1, name="B")
    lower(create_schedule(b.op), [a, b], name="warm", target="llvm")
    _WARM = True


def measure_candidate(job: _Job) -> MeasureResult:
    """Measure one candidate in a child process (see the module docstring), or in the
    persistent worker (``job.persistent``); the result still has its ``outputs`` (None
    when it failed), not compared with anything.  Both runners call this: LocalRunner in
    its own process, DaskRunner in a dask worker."""
    if job.persistent:
        return _measure_in_worker(job)
    if hasattr(os, "fork"):
        _prewarm()
    start = time.monotonic()
    child = _Child(job)
    deadline = start + job.timeout
    outcome, msg = "died", None
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                outcome = "timeout"
                break
            if child.recv.poll(min(remaining, 0.25)):
                try:
                    msg = child.recv.recv()
                    outcome = "message"
                except (EOFError, OSError):
                    outcome = "died"
                break
            if child.exited():
                if child.recv.poll(0):
                    try:
                        msg = child.recv.recv()
                        outcome = "message"
                    except (EOFError, OSError):
                        pass
                break
        if outcome == "died":
            # the pipe closed: the child is exiting; wait for its own status before
            # killing anything it left behind
            child.wait_exited(max(1.0, deadline - time.monotonic()))
        # timed out, or the message is in (the child has nothing left to do but exit)
    finally:
        child.kill()
        status = child.reap()
    total = time.monotonic() - start
    if outcome == "timeout":
        return MeasureResult(False, [], f"timed out after {job.timeout:g}s",
                             total_seconds=total)
    if outcome != "message":
        return MeasureResult(False, [], f"crashed: {_exit_text(status)}", total_seconds=total)
    if msg[0] != "ok":
        return MeasureResult(False, [], msg[1], total_seconds=total)
    _, times, outputs, build_seconds = msg
    return MeasureResult(True, list(times), None, build_seconds, outputs, total)


# ---------------------------------------------------------------------------------------
# the runners


def _check_options(cls: str, timeout, number, repeat, min_repeat_seconds, rtol, atol, seed,
                   num_threads, memory_limit_mb=None) -> None:
    def bad(name, value, want):
        raise AutoScheduleError(f"{cls}: {name} must be {want}, got {value!r:.60}")

    def is_num(x):
        return not isinstance(x, bool) and isinstance(x, numbers.Real) and math.isfinite(x)

    def is_int(x):
        return not isinstance(x, bool) and isinstance(x, numbers.Integral)

    if not is_num(timeout) or timeout <= 0:
        bad("timeout", timeout, "a positive number of seconds")
    if number is not None and (not is_int(number) or number < 1):
        bad("number", number, "an int >= 1 or None (chosen from min_repeat_seconds)")
    if not is_int(repeat) or repeat < 1:
        bad("repeat", repeat, "an int >= 1")
    if not is_num(min_repeat_seconds) or min_repeat_seconds < 0:
        bad("min_repeat_seconds", min_repeat_seconds, "a number of seconds >= 0")
    for name, v in (("rtol", rtol), ("atol", atol)):
        if v is not None and (not is_num(v) or v < 0):
            bad(name, v, "a number >= 0 or None (the default for the output's dtype)")
    if not is_int(seed):
        bad("seed", seed, "an int")
    if num_threads is not None and (not is_int(num_threads) or num_threads < 1):
        bad("num_threads", num_threads, "an int >= 1 or None (this process's thread count)")
    if memory_limit_mb is not None and (not is_num(memory_limit_mb) or memory_limit_mb <= 0):
        bad("memory_limit_mb", memory_limit_mb,
            "a positive number of MiB or None (three quarters of the available memory)")


class _Runner:
    """What both runners share: the options, the reference, the comparison."""

    _name = "runner"
    #: measure in the persistent worker: None = for the GPU (target cuda) only
    persistent: Optional[bool] = False
    #: compile a run's candidates in parallel first: None = for cuda and cuda-emu
    precompile: Optional[bool] = False

    def __init__(self, timeout, number, repeat, min_repeat_seconds, rtol, atol, seed,
                 num_threads, memory_limit_mb=None):
        _check_options(type(self).__name__, timeout, number, repeat, min_repeat_seconds,
                       rtol, atol, seed, num_threads, memory_limit_mb)
        self.memory_limit_mb = memory_limit_mb
        self.timeout = float(timeout)
        self.number = None if number is None else int(number)
        self.repeat = int(repeat)
        self.min_repeat_seconds = float(min_repeat_seconds)
        self.rtol = rtol
        self.atol = atol
        self.seed = int(seed)
        self.num_threads = num_threads
        #: the outputs every candidate is compared with (see the module docstring)
        self.reference: Optional[List[np.ndarray]] = None
        self._reference_of: Optional[tuple] = None

    def _measure(self, job: _Job) -> MeasureResult:  # pragma: no cover - abstract
        raise NotImplementedError

    def _same_workload(self, args, shapes) -> bool:
        k = self._reference_of
        return (k is not None and len(k[0]) == len(args)
                and all(a is b for a, b in zip(k[0], args)) and k[1] == shapes
                and k[2] == self.seed)

    def run(self, args, build_fn, payloads: Sequence, shapes: Optional[dict] = None,
            reference: Optional[Sequence[np.ndarray]] = None,
            target="llvm") -> List[MeasureResult]:
        """Measure each payload (one at a time, in order); one MeasureResult each.
        A Schedule that ``build_fn`` returns is built for ``target`` (an ``llvm``
        :class:`~tecomp.target.Target` that runs on the machines that measure).

        ``reference``: output arrays (one per compute in ``args``, in order) to compare
        every candidate with; by default the reference of the last ``run`` on the same
        workload, else the first candidate that runs.  ``runner.reference`` holds it
        afterwards."""
        cls = type(self).__name__
        if not callable(build_fn):
            raise AutoScheduleError(f"{cls}.run: build_fn must be a module-level function "
                                    f"build_fn(args, payload), got {type(build_fn).__name__}")
        if isinstance(payloads, (str, bytes, dict)) or not hasattr(payloads, "__iter__"):
            raise AutoScheduleError(f"{cls}.run: payloads must be a list of candidates, got "
                                    f"{type(payloads).__name__}")
        payloads = list(payloads)
        shapes = dict(shapes or {}) if isinstance(shapes, dict) or shapes is None else shapes
        plan = _plan(args, shapes, f"{cls}.run")
        args = list(args)
        if reference is not None:
            reference = [np.asarray(r) for r in reference]
            if len(reference) != len(plan.outputs):
                raise AutoScheduleError(
                    f"{cls}.run: reference has {len(reference)} array(s) but args has "
                    f"{len(plan.outputs)} output(s) ("
                    f"{', '.join(plan.args[i].name for i in plan.outputs)})")
            ref = reference
        elif self.reference is not None and self._same_workload(args, shapes):
            ref = self.reference
        else:
            ref = None
        threads = self.num_threads if self.num_threads is not None else _parent_threads()
        persistent = (self.persistent if self.persistent is not None
                      else backend_for(target).measure_start == "spawn")
        if self.precompile is not False and len(payloads) > 1:
            _precompile(args, build_fn, payloads, target)
        results = []
        for payload in payloads:
            job = _Job(args, build_fn, payload, shapes, self.seed, self.timeout, self.number,
                       self.repeat, self.min_repeat_seconds, threads, self.rtol, self.atol,
                       self.memory_limit_mb, str(target), persistent)
            r = self._measure(job)
            if r.ok:
                if ref is None:
                    ref = r.outputs
                else:
                    for k, i in enumerate(plan.outputs):
                        a = plan.args[i]
                        err = _compare(r.outputs[k], ref[k], a.name, a.dtype, plan.reduce_terms,
                                       self.rtol, self.atol)
                        if err is not None:
                            r.ok, r.error = False, err
                            break
            r.outputs = None
            results.append(r)
        self.reference = ref
        self._reference_of = (args, shapes, self.seed)
        return results


#: compilers a LocalRunner runs at once for CUDA candidates (None: one per core)
COMPILE_JOBS: Optional[int] = None

def _precompile(args, build_fn, payloads: Sequence, target) -> int:
    """Lower each payload's schedule here and compile them all in parallel into the
    caches the measuring process loads from (see "Compiling in parallel"); how many
    compiled.  Failures are left to the measuring process to report."""
    from concurrent.futures import ThreadPoolExecutor


    tgt = as_target(target)
    ahead = backend_for(tgt).ahead_compiler(tgt)
    if ahead is None:
        return 0
    prepare, compile_one = ahead
    try:
        jobs = COMPILE_JOBS or len(os.sched_getaffinity(0))
    except AttributeError:
        jobs = os.cpu_count() or 1
    futures = []
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for payload in payloads:
            try:
                obj = build_fn(args, payload)
                if not isinstance(obj, Schedule):
                    continue
                prepared = prepare(lower(obj, args, target=tgt))
            except Exception:  # noqa: BLE001 - the candidate's failure, reported when measured
                continue
            futures.append(pool.submit(compile_one, prepared))
    done = 0
    for f in futures:
        try:
            f.result()
            done += 1
        except Exception:  # noqa: BLE001 - as above
            pass
    return done


class LocalRunner(_Runner):
    """Measures each candidate in a child process of this one (see the module docstring
    for what a child does, the failures, the timing and the comparison), or with
    ``persistent=True`` in one long-lived worker process (default ``None``: for target
    ``cuda`` only; see "The persistent worker").  ``precompile`` (default ``None``: for
    targets ``cuda`` and ``cuda-emu``) compiles each ``run``'s candidates in parallel
    first (see "Compiling in parallel")."""

    def __init__(self, timeout: float = 10.0, number: Optional[int] = None, repeat: int = 5,
                 min_repeat_seconds: float = 0.02, rtol: Optional[float] = None,
                 atol: Optional[float] = None, seed: int = 0,
                 num_threads: Optional[int] = None, memory_limit_mb: Optional[float] = None,
                 persistent: Optional[bool] = None, precompile: Optional[bool] = None):
        super().__init__(timeout, number, repeat, min_repeat_seconds, rtol, atol, seed,
                         num_threads, memory_limit_mb)
        if not (persistent is None or isinstance(persistent, bool)):
            raise AutoScheduleError(f"LocalRunner: persistent must be True, False or None "
                                    f"(for the GPU only), got {persistent!r:.60}")
        if not (precompile is None or isinstance(precompile, bool)):
            raise AutoScheduleError(f"LocalRunner: precompile must be True, False or None "
                                    f"(for the CUDA targets), got {precompile!r:.60}")
        self.persistent = persistent
        self.precompile = precompile

    def _measure(self, job: _Job) -> MeasureResult:
        return measure_candidate(job)

    def close(self) -> None:
        """Nothing to release (for symmetry with DaskRunner)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _close_dask(client, cluster) -> None:
    for x in (client, cluster):
        if x is not None:
            try:
                x.close()
            except Exception:  # noqa: BLE001 - closing at exit, best effort
                pass


class DaskRunner(_Runner):
    """Measures each candidate on a ``dask.distributed`` cluster: the worker runs it in a
    child process exactly as :class:`LocalRunner` does (a crash kills the child, not the
    worker).

    ``address``: a scheduler address (``"tcp://host:8786"``) or a ``Client``; None
    starts a ``LocalCluster`` of ``n_workers`` single-threaded worker processes, which
    :meth:`close` (or leaving a ``with`` block) shuts down.

    Candidates are submitted **one at a time**: the next goes when the last has
    answered, so no two measurements overlap (on a machine whose cores the workers
    share, overlapping timings would measure each other).  The workers give isolation
    and a place to measure other than this machine, not parallel measurement.  ``args``,
    ``build_fn`` and the payloads are pickled: ``build_fn`` must be a module-level
    function that the workers can import.  The child uses this process's thread count
    unless ``num_threads`` says otherwise.  A worker that does not answer within
    ``timeout`` + :data:`DASK_MARGIN_SECONDS` seconds counts as a timeout."""

    def __init__(self, address=None, n_workers: int = 2, timeout: float = 60.0,
                 number: Optional[int] = None, repeat: int = 5,
                 min_repeat_seconds: float = 0.02, rtol: Optional[float] = None,
                 atol: Optional[float] = None, seed: int = 0,
                 num_threads: Optional[int] = None, memory_limit_mb: Optional[float] = None):
        super().__init__(timeout, number, repeat, min_repeat_seconds, rtol, atol, seed,
                         num_threads, memory_limit_mb)
        try:
            from dask.distributed import Client, LocalCluster
        except ImportError as e:
            raise AutoScheduleError(
                f"DaskRunner needs dask.distributed, which is not installed ({e}); install "
                f'it with: pip install "tecomp[distributed]"') from None
        if isinstance(n_workers, bool) or not isinstance(n_workers, numbers.Integral) \
                or n_workers < 1:
            raise AutoScheduleError(f"DaskRunner: n_workers must be an int >= 1, got "
                                    f"{n_workers!r:.60}")
        self.cluster = None
        if address is None:
            import logging

            self.cluster = LocalCluster(n_workers=int(n_workers), threads_per_worker=1,
                                        processes=True, dashboard_address=None,
                                        silence_logs=logging.ERROR)
            self.client = Client(self.cluster)
            self._owns_client = True
        elif isinstance(address, str):
            self.client = Client(address)
            self._owns_client = True
        elif hasattr(address, "submit"):
            self.client = address
            self._owns_client = False
        else:
            raise AutoScheduleError(f"DaskRunner: address must be a scheduler address "
                                    f"(str), a dask Client or None, got "
                                    f"{type(address).__name__}")
        self._finalizer = weakref.finalize(
            self, _close_dask, self.client if self._owns_client else None, self.cluster)

    def _measure(self, job: _Job) -> MeasureResult:
        start = time.monotonic()
        fut = self.client.submit(measure_candidate, job, pure=False)
        try:
            r = fut.result(timeout=job.timeout + DASK_MARGIN_SECONDS)
        except TimeoutError:
            fut.cancel()
            return MeasureResult(False, [], f"timed out after {job.timeout:g}s (the dask "
                                 f"worker did not answer)",
                                 total_seconds=time.monotonic() - start)
        except Exception as e:  # noqa: BLE001 - a lost worker, a job that does not pickle
            return MeasureResult(False, [], f"crashed: dask: {_first_line(e)}",
                                 total_seconds=time.monotonic() - start)
        r.total_seconds = time.monotonic() - start
        return r

    def close(self) -> None:
        """Close the client and the LocalCluster this runner started (if it did)."""
        self._finalizer()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def get_runner(runner):
    """``"local"`` or None: a :class:`LocalRunner`; ``"dask"``: a :class:`DaskRunner`
    on a LocalCluster; an object with a ``run`` method: itself."""
    if runner is None or (isinstance(runner, str) and runner == "local"):
        return LocalRunner()
    if isinstance(runner, str) and runner == "dask":
        return DaskRunner()
    if not isinstance(runner, str) and callable(getattr(runner, "run", None)):
        return runner
    raise AutoScheduleError(
        f"runner={runner!r:.60} is not a runner; use 'local', 'dask' (needs "
        f'pip install "tecomp[distributed]") or an object with a '
        f".run(args, build_fn, payloads, shapes=None) method")
