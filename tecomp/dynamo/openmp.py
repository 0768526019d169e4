"""tecomp's parallel loops on PyTorch's OpenMP threads (the backend's ``threads="torch"``).

PyTorch's CPU operators run on an OpenMP team whose idle threads spin before they sleep;
tecomp's kernels run on tecomp's pool, whose idle workers do the same.  In a training
step, where PyTorch's operators (the loss, autograd, the optimizer) and tecomp's kernels
alternate, the two pools' spinning threads compete for the same cores: on 2 cores a
region of either pool waits for a thread the other pool's spinning keeps from its core.
Run on PyTorch's own team (``GOMP_parallel`` of the libgomp PyTorch loaded, every
thread taking a contiguous share of the iterations), tecomp's kernels and PyTorch's
operators use one set of threads.

The glue is a small function in LLVM IR (:data:`_IR`), JIT-compiled once, that has the
signature of ``tecomp_parallel_for``.  Only the threads that run a compiled graph use it:
:func:`tecomp.threads.run_marked_threads_on` points every tecomp pool of the process at it
for the regions of a thread *marked* by a pthread key, and :func:`scope` marks the calling
thread for the duration of one graph's call (restoring the mark it found on return or
exception).  A tecomp kernel called outside a graph, or by another thread at the same
time, runs on tecomp's pool as before.  In a ``fork()``ed child the OpenMP team does not
exist (libgomp's threads did not survive the fork, and a region would wait for them
forever): there every graph runs its kernels on tecomp's pool, which starts new workers.
Only where PyTorch's parallel backend is OpenMP through libgomp (its ``GOMP_parallel``,
``omp_get_thread_num`` and ``omp_get_num_threads`` found in the library the process
loaded); elsewhere :func:`scope` leaves tecomp's pool in place.
"""
from __future__ import annotations

import collections
import contextlib
import ctypes
import logging
import os
import statistics
import threading
from typing import Optional

from .. import threads
from ..errors import InternalError
from ..codegen.llvm import jit as llvm_jit

log = logging.getLogger("tecomp.dynamo")
_WARNED: list = []

_IR = r"""
%ctx = type { ptr, ptr, i64, i32 }
@omp_parallel = internal global ptr null, align 8
@omp_thread = internal global ptr null, align 8
@omp_threads = internal global ptr null, align 8

define void @tecomp_omp_init(ptr %p, ptr %t, ptr %n) nounwind {
entry:
  store ptr %p, ptr @omp_parallel, align 8
  store ptr %t, ptr @omp_thread, align 8
  store ptr %n, ptr @omp_threads, align 8
  ret void
}

; one thread t of the team of n: a contiguous share of the iterations
define internal void @tecomp_omp_body(ptr %c) nounwind {
entry:
  %tf = load ptr, ptr @omp_thread, align 8
  %nf = load ptr, ptr @omp_threads, align 8
  %t32 = call i32 %tf()
  %n32 = call i32 %nf()
  %t = zext i32 %t32 to i64
  %n = zext i32 %n32 to i64
  %fnp = getelementptr %ctx, ptr %c, i32 0, i32 0
  %fn = load ptr, ptr %fnp, align 8
  %clp = getelementptr %ctx, ptr %c, i32 0, i32 1
  %cl = load ptr, ptr %clp, align 8
  %ep = getelementptr %ctx, ptr %c, i32 0, i32 2
  %e = load i64, ptr %ep, align 8
  ; extent = n * q + r: threads below r take q + 1 iterations, the others q
  %q = udiv i64 %e, %n
  %r = urem i64 %e, %n
  %tq = mul i64 %t, %q
  %below = icmp ult i64 %t, %r
  %extra = select i1 %below, i64 %t, i64 %r
  %lo = add i64 %tq, %extra
  %one = zext i1 %below to i64
  %len0 = add i64 %q, %one
  %hi = add i64 %lo, %len0
  %some = icmp ult i64 %lo, %hi
  br i1 %some, label %run, label %done
run:
  %rc = call i32 %fn(ptr %cl, i64 %lo, i64 %hi)
  %bad = icmp ne i32 %rc, 0
  br i1 %bad, label %err, label %done
err:
  %rp = getelementptr %ctx, ptr %c, i32 0, i32 3
  %x = cmpxchg ptr %rp, i32 0, i32 %rc seq_cst seq_cst
  br label %done
done:
  ret void
}

define i32 @tecomp_omp_parallel_for(ptr %fn, ptr %cl, i64 %extent) nounwind {
entry:
  %many = icmp sgt i64 %extent, 1
  br i1 %many, label %par, label %serial
serial:
  %any = icmp sgt i64 %extent, 0
  br i1 %any, label %one, label %zero
one:
  %rs = call i32 %fn(ptr %cl, i64 0, i64 %extent)
  ret i32 %rs
zero:
  ret i32 0
par:
  %c = alloca %ctx, align 8
  %fnp = getelementptr %ctx, ptr %c, i32 0, i32 0
  store ptr %fn, ptr %fnp, align 8
  %clp = getelementptr %ctx, ptr %c, i32 0, i32 1
  store ptr %cl, ptr %clp, align 8
  %ep = getelementptr %ctx, ptr %c, i32 0, i32 2
  store i64 %extent, ptr %ep, align 8
  %rp = getelementptr %ctx, ptr %c, i32 0, i32 3
  store i32 0, ptr %rp, align 4
  %pf = load ptr, ptr @omp_parallel, align 8
  call void %pf(ptr @tecomp_omp_body, ptr %c, i32 0, i32 0)
  %r = load atomic i32, ptr %rp seq_cst, align 4
  ret i32 %r
}
"""

_LOCK = threading.Lock()
_GLUE = None  # (the JIT module, kept alive; the address of tecomp_omp_parallel_for)


def _libgomp() -> Optional[ctypes.CDLL]:
    """The libgomp this process loaded (PyTorch's), or None."""
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "libgomp" in line and "/" in line}
    except OSError:
        return None
    for p in sorted(paths):
        try:
            lib = ctypes.CDLL(p)
            for name in ("GOMP_parallel", "omp_get_thread_num", "omp_get_num_threads"):
                getattr(lib, name)
            return lib
        except (OSError, AttributeError):
            continue
    return None


def parallel_for_address() -> Optional[int]:
    """The address of the glue's ``tecomp_omp_parallel_for`` (compiled on first use), or
    None where PyTorch does not run on libgomp's OpenMP."""
    global _GLUE
    with _LOCK:
        if _GLUE is not None:
            return _GLUE[1]
        import torch

        if "parallel backend: OpenMP" not in torch.__config__.parallel_info():
            return None
        lib = _libgomp()
        if lib is None:
            return None
        mod = llvm_jit.compile_ir(_IR, ("tecomp_omp_init", "tecomp_omp_parallel_for"))
        addr = {n: mod.addresses[n] for n in ("tecomp_omp_init", "tecomp_omp_parallel_for")}
        fns = [ctypes.cast(getattr(lib, n), ctypes.c_void_p).value
               for n in ("GOMP_parallel", "omp_get_thread_num", "omp_get_num_threads")]
        ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)(
            addr["tecomp_omp_init"])(*fns)
        _GLUE = (mod, addr["tecomp_omp_parallel_for"], lib)
        return _GLUE[1]


#: the pthread key that marks a thread running a graph with threads="torch" (its value:
#: NULL or 1), created with the glue; None where there is no glue
_KEY: Optional[int] = None
try:  # the C library's pthread functions (POSIX; elsewhere threads="torch" is off)
    _LIBC = ctypes.CDLL(None, use_errno=True)
    _SET = _LIBC.pthread_setspecific
    _SET.argtypes, _SET.restype = (ctypes.c_uint, ctypes.c_void_p), ctypes.c_int
except (OSError, TypeError, AttributeError):
    _LIBC = _SET = None
_MARK = ctypes.c_void_p(1)
#: whether this thread is marked (mirrors its value of _KEY, without a ctypes call)
_LOCAL = threading.local()
#: True in a fork()ed child: no OpenMP team there (see the module docstring)
_FORKED = False


def _marked_key() -> Optional[int]:
    """The pthread key of marked threads, with the glue compiled and every pool pointed
    at it on first use; None where the glue is unavailable (said once in the log)."""
    global _KEY
    if _KEY is not None:
        return _KEY
    addr = parallel_for_address() if _SET is not None else None
    if addr is None:
        if not _WARNED:
            _WARNED.append(True)
            log.info("tecomp.dynamo: threads='torch' needs PyTorch's OpenMP through libgomp "
                     "(%s); the kernels run on tecomp's threads",
                     "not this PyTorch's parallel backend" if _libgomp() is None else
                     "its functions not found")
        return None
    with _LOCK:
        if _KEY is None:
            key = ctypes.c_uint(0)
            if _LIBC.pthread_key_create(ctypes.byref(key), None) != 0:
                log.info("tecomp.dynamo: threads='torch': pthread_key_create failed (errno "
                         "%d); the kernels run on tecomp's threads", ctypes.get_errno())
                _WARNED.append(True)
                return None
            threads.run_marked_threads_on(addr, key.value)
            _KEY = key.value
    return _KEY


@contextlib.contextmanager
def scope(mode: str):
    """Within the block, the calling thread's tecomp kernels run their parallel loops on
    ``mode``'s threads: ``"torch"`` (PyTorch's OpenMP team, where PyTorch runs on
    libgomp and not in a fork()ed child) or ``"tecomp"`` (tecomp's pool); the thread's
    previous setting is back on exit, however the block ends.  Other threads are not
    affected."""
    on = mode == "torch" and not _FORKED and _marked_key() is not None
    was = getattr(_LOCAL, "on", False)
    if on == was:
        yield
        return
    _mark(on)
    try:
        yield
    finally:
        _mark(was)


def _mark(on: bool) -> None:
    on = on and not _FORKED
    if _SET(_KEY, _MARK if on else None) != 0:
        raise InternalError(f"pthread_setspecific failed for tecomp.dynamo's thread mark "
                            f"(errno {ctypes.get_errno()}): this is a tecomp bug")
    _LOCAL.on = on


def active() -> str:
    """Whose threads the calling thread's kernels run on now: ``"torch"`` or
    ``"tecomp"``."""
    return "torch" if getattr(_LOCAL, "on", False) else "tecomp"


def _after_fork_in_child() -> None:
    global _FORKED
    _FORKED = True
    if getattr(_LOCAL, "on", False):
        _mark(False)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def available() -> bool:
    """Whether the calling process can run kernels on PyTorch's OpenMP team (PyTorch on
    libgomp, not a ``fork()``ed child): where not, ``"torch"`` means tecomp's pool."""
    return not _FORKED and _SET is not None and _marked_key() is not None


class Chooser:
    """Whose threads run one training graph's kernels under ``threads="auto"``: the
    setting whose recent calls of the graph took less time, by measurement.

    In a training step PyTorch's own operators run between the graphs (the loss,
    autograd, the optimizer), and PyTorch's OpenMP threads spin for milliseconds after
    each of them (the small CNN's step: 7 ms after each of its three, through most of
    the next graph); tecomp's pool then competes with them for the cores, and its
    kernels get little of the second core (the CNN's step on 2 threads of the quiet Zen 5
    VM: 0.86x eager on tecomp's pool, 1.44x on PyTorch's team).  On PyTorch's team,
    though, a loop waits for a thread that has lost its core to another process
    (OpenMP's static schedule and join), where tecomp's pool hands its share to the
    others: with other processes on the cores a graph's call took 1.2-1.7 s there
    against 60-100 ms on tecomp's pool.  Neither is right on every machine at every
    moment, so each graph measures both:

    * the first calls alternate the two settings until each has :data:`MIN_SAMPLES`
      times;
    * then each call runs the setting whose median over its last :data:`WINDOW` calls
      is lower (the *best*), and one call tries the other once the best has run
      ``period`` times the other's last time, or :data:`MAX_CALLS` calls: a try costs
      at most about ``1 / period`` of the time, whatever the ratio of the two;
    * ``period`` starts at :data:`FIRST_PERIOD`, doubles each time a try is slower
      than the best's median, up to :data:`LAST_PERIOD`, and starts again where a try
      is faster (so that the other, once faster, is soon tried again);
    * the other takes over once its median is the lower.

    Only the calling thread's time of the graph's call is measured (``record``), from
    the graph's second call on (its first touches its memory for the first time)."""

    WINDOW = 5
    MIN_SAMPLES = 2
    FIRST_PERIOD = 8
    LAST_PERIOD = 64
    MAX_CALLS = 1024
    SETTINGS = ("tecomp", "torch")

    __slots__ = ("times", "best", "period", "spent", "calls")

    def __init__(self):
        self.times = {m: collections.deque(maxlen=self.WINDOW) for m in self.SETTINGS}
        self.best = "tecomp"
        self.period = self.FIRST_PERIOD
        self.spent = 0.0  # seconds the best has run since the last try of the other
        self.calls = 0    # and its calls

    def _other(self, mode: str) -> str:
        return "torch" if mode == "tecomp" else "tecomp"

    def pick(self) -> str:
        """The setting for the next call."""
        n = {m: len(v) for m, v in self.times.items()}
        if min(n.values()) < self.MIN_SAMPLES:  # warming up: each in turn
            return "tecomp" if n["tecomp"] <= n["torch"] else "torch"
        other = self._other(self.best)
        if self.spent >= self.period * self.times[other][-1] or self.calls >= self.MAX_CALLS:
            return other
        return self.best

    def record(self, mode: str, seconds: float) -> None:
        """A call of ``mode`` took ``seconds``."""
        times = self.times
        warm = min(len(v) for v in times.values()) >= self.MIN_SAMPLES
        if mode == self.best:
            self.spent += seconds
            self.calls += 1
        elif warm:  # a try of the other
            faster = seconds < statistics.median(times[self.best])
            self.period = self.FIRST_PERIOD if faster else \
                min(2 * self.period, self.LAST_PERIOD)
            self.spent, self.calls = 0.0, 0
        times[mode].append(seconds)
        if min(len(v) for v in times.values()) < self.MIN_SAMPLES:
            return
        other = self._other(self.best)
        if statistics.median(times[other]) < statistics.median(times[self.best]):
            self.best, self.period, self.spent, self.calls = other, self.FIRST_PERIOD, 0.0, 0
