"""The thread count and spin settings of every CPU thread pool in the process.

Parallel loops run on a pool written in LLVM IR (:mod:`tecomp.codegen.llvm.threadpool`
describes it).  A process may hold several copies of it: the one JIT-compiled for the
kernels ``tc.build`` makes, and one inside each library ``tc.load_module`` loaded (an
exported library carries its own pool, so that it runs where LLVM is not installed).
Each is controlled through the same C functions (``tecomp_pool_set_threads``, ...);
this module keeps the list of them and applies every setting to all:

* ``set_num_threads(n)`` sets every pool's thread count, now and for pools registered
  later; ``get_num_threads()`` is that count.  The default, read when the first pool is
  registered, is the environment variable ``TECOMP_NUM_THREADS``, else
  :func:`available_cpus`: the CPUs the process may run on (its affinity mask:
  ``taskset``, cpusets), fewer where its cgroup's CPU quota allows fewer (``docker
  --cpus``, Kubernetes CPU limits), rounded up.
* ``TECOMP_SPIN`` and ``TECOMP_WAIT_SPIN`` (see ``llvm.threadpool``) apply to every pool.
* At exit every pool's workers are joined; in a ``fork()``ed child every pool forgets its
  workers (they did not survive the fork) and starts new ones when it next needs them.

It imports no llvmlite: loading a library needs only numpy and this runtime.
"""
from __future__ import annotations

import atexit
import ctypes
import math
import numbers
import os
import stat
import threading
import warnings
from typing import Callable, List, Optional

from .errors import TecompError

__all__ = ["PoolControls", "register", "set_num_threads", "get_num_threads",
           "default_num_threads", "available_cpus", "cgroup_cpu_limit", "spin_from_env",
           "DEFAULT_SPIN", "DEFAULT_WAIT_SPIN",
           "MAX_THREADS", "POOL_FUNCTIONS", "DEFAULT_WORKSPACE_LIMIT", "set_workspace_limit",
           "release_workspace", "workspace_cached", "workspace_limit_from_env",
           "workspace_limit", "on_release",
           "shared_pool_from_env", "number_from_env", "flag_from_env", "share_pool",
           "run_marked_threads_on",
           "PARALLEL_FOR", "DELEGATE_TO", "DELEGATE_MARKED"]

#: the most threads a pool runs
MAX_THREADS = 1024
#: the defaults of TECOMP_SPIN and TECOMP_WAIT_SPIN (see ``llvm.threadpool``)
DEFAULT_SPIN = 2000
DEFAULT_WAIT_SPIN = 1024
#: the most TECOMP_SPIN and TECOMP_WAIT_SPIN may ask for (about a minute of ``pause``)
MAX_SPIN = 2**31 - 1
#: the default of TECOMP_WORKSPACE_LIMIT: the most bytes each pool's workspace cache keeps
DEFAULT_WORKSPACE_LIMIT = 1 << 30

#: the function kernels call to run a parallel loop (see ``llvm.threadpool``)
PARALLEL_FOR = "tecomp_parallel_for"
#: ``void tecomp_pool_delegate_to(fn)``: the pool runs its regions by calling ``fn`` (another
#: pool's ``tecomp_parallel_for``) instead of on its own threads; NULL: on its own again.
#: Not in :data:`POOL_FUNCTIONS` (libraries exported before it existed lack it).
DELEGATE_TO = "tecomp_pool_delegate_to"
#: ``void tecomp_pool_delegate_marked(fn, key)``: the regions dispatched by a thread whose
#: value of the pthread key ``key`` is not NULL run by calling ``fn`` (checked before
#: ``tecomp_pool_delegate_to``'s); fn NULL: none.  Not in :data:`POOL_FUNCTIONS` either.
DELEGATE_MARKED = "tecomp_pool_delegate_marked"

#: the C functions that control a pool: name -> (restype, argtypes)
POOL_FUNCTIONS = {
    "tecomp_pool_set_threads": (None, (ctypes.c_int32,)),
    "tecomp_pool_get_threads": (ctypes.c_int32, ()),
    "tecomp_pool_num_workers": (ctypes.c_int32, ()),
    "tecomp_pool_set_spin": (None, (ctypes.c_int64,)),
    "tecomp_pool_set_wait_spin": (None, (ctypes.c_int64,)),
    "tecomp_pool_shutdown": (None, ()),
    "tecomp_pool_after_fork": (None, ()),
    "tecomp_pool_ws_release": (ctypes.c_int64, ()),
    "tecomp_pool_ws_set_limit": (None, (ctypes.c_int64,)),
    "tecomp_pool_ws_cached": (ctypes.c_int64, ()),
}


class PoolControls:
    """The control functions of one pool, as ctypes callables: ``set_threads(n)``,
    ``get_threads()``, ``num_workers()``, ``set_spin(n)``, ``set_wait_spin(n)``,
    ``shutdown()``, ``after_fork()``, and the workspace cache's ``ws_release()``,
    ``ws_set_limit(n)``, ``ws_cached()``; ``parallel_for`` (the address of its
    ``tecomp_parallel_for``), ``delegate_to(address)`` and ``delegate_marked(address,
    key)`` where the pool has them (a library exported before they existed lacks them:
    None)."""

    __slots__ = ("set_threads", "get_threads", "num_workers", "set_spin", "set_wait_spin",
                 "shutdown", "after_fork", "ws_release", "ws_set_limit", "ws_cached", "owner",
                 "parallel_for", "delegate_to", "delegate_marked")

    def __init__(self, lookup: Callable[[str], int], owner: object = None,
                 optional: Optional[Callable[[str], Optional[int]]] = None):
        """``lookup(name)`` gives the address of the C function ``name``; ``owner`` is
        kept alive as long as the controls (the JIT engine or the loaded library);
        ``optional(name)`` the address of a function the pool may lack, or None
        (default: ``lookup``)."""
        for name, (restype, argtypes) in POOL_FUNCTIONS.items():
            fn = ctypes.CFUNCTYPE(restype, *argtypes)(lookup(name))
            setattr(self, name[len("tecomp_pool_"):], fn)
        self.owner = owner
        optional = optional or lookup
        self.parallel_for = optional(PARALLEL_FOR)
        addr = optional(DELEGATE_TO)
        self.delegate_to = (ctypes.CFUNCTYPE(None, ctypes.c_void_p)(addr)
                            if addr and self.parallel_for else None)
        addr = optional(DELEGATE_MARKED)
        self.delegate_marked = (ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64)(addr)
                                if addr and self.parallel_for else None)


_LOCK = threading.Lock()
_POOLS: List[PoolControls] = []
#: the thread count every pool uses; None until set or until the first pool registers
_desired: Optional[int] = None
#: the workspace limit every pool uses; None until set (TECOMP_WORKSPACE_LIMIT then)
_ws_limit: Optional[int] = None
_hooks_installed = False
#: (function, pthread key): where the regions of marked threads run
#: (run_marked_threads_on), or None
_marked: Optional[tuple] = None


#: where the cgroup file systems are mounted, and the file naming this process's cgroups
CGROUP_ROOT = "/sys/fs/cgroup"
PROC_SELF_CGROUP = "/proc/self/cgroup"


def _read_small(path: str, limit: int = 4096) -> Optional[str]:
    """The first ``limit`` bytes of the regular file ``path`` as text, or None."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) |
                     getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, limit).decode("ascii", "replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def _positive(text: str) -> Optional[int]:
    try:
        v = int(text)
    except ValueError:
        return None
    return v if v > 0 else None


def _quota_cpus(quota: Optional[int], period: Optional[int]) -> Optional[int]:
    if quota is None or period is None:
        return None
    return max(1, -(-quota // period))


def cgroup_cpu_limit(cgroup_root: Optional[str] = None,
                     proc_cgroup: Optional[str] = None) -> Optional[int]:
    """The CPUs this process's cgroup CPU quota allows (``quota / period`` rounded up),
    or None where there is no quota or it cannot be read.

    cgroup v2: ``cpu.max`` (``"max 100000"``: none; ``"200000 100000"``: 2) of the cgroup
    ``/proc/self/cgroup`` names and of each of its ancestors; v1: ``cpu.cfs_quota_us`` and
    ``cpu.cfs_period_us`` in the ``cpu`` hierarchy (quota -1: none).  The smallest limit
    found applies.  The process's own cgroup directory is tried under ``cgroup_root``
    (default :data:`CGROUP_ROOT`) and, where it is not there (a container whose cgroup is
    mounted as the root), the root itself.  Missing, unreadable or malformed files count
    as no limit."""
    root = CGROUP_ROOT if cgroup_root is None else cgroup_root
    text = _read_small(PROC_SELF_CGROUP if proc_cgroup is None else proc_cgroup, 65536)
    v2_path, v1_path = "/", None
    for line in (text or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            v2_path = parts[2]
        elif "cpu" in parts[1].split(","):
            v1_path = (parts[1], parts[2])

    def ancestors(base: str, path: str):
        dirs, p = [], path.strip()
        while p.startswith("/") and p not in ("", "/"):
            dirs.append(os.path.join(base, p.lstrip("/")))
            p = os.path.dirname(p)
        dirs.append(base)
        return dirs

    limits = []
    for d in ancestors(root, v2_path):
        t = _read_small(os.path.join(d, "cpu.max"))
        if t is not None:
            f = t.split()
            if len(f) == 2 and f[0] != "max":
                limits.append(_quota_cpus(_positive(f[0]), _positive(f[1])))
    if v1_path is not None:
        for base in (os.path.join(root, v1_path[0]), os.path.join(root, "cpu"),
                     os.path.join(root, "cpu,cpuacct")):
            if not os.path.isdir(base):
                continue
            for d in ancestors(base, v1_path[1]):
                q = _read_small(os.path.join(d, "cpu.cfs_quota_us"))
                per = _read_small(os.path.join(d, "cpu.cfs_period_us"))
                if q is not None and per is not None:
                    limits.append(_quota_cpus(_positive(q.strip()), _positive(per.strip())))
            break
    limits = [n for n in limits if n is not None]
    return min(limits) if limits else None


def available_cpus(cgroup_root: Optional[str] = None,
                   proc_cgroup: Optional[str] = None) -> int:
    """The CPUs this process may use: those of its affinity mask
    (``os.sched_getaffinity``: ``taskset``, cpusets; ``os.cpu_count()`` where there is
    none), at most what its cgroup CPU quota allows (:func:`cgroup_cpu_limit`); at
    least 1."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    limit = cgroup_cpu_limit(cgroup_root, proc_cgroup)
    if limit is not None:
        n = min(n, limit)
    return max(1, n)


def _int_as_strtol_reads(text: str) -> Optional[int]:
    """The integer ``text`` spells as C's ``strtol(text, &end, 10)`` with nothing after it
    reads it (leading blanks, a sign, ASCII digits), else None: an exported library's
    pool, called from C, reads ``TECOMP_NUM_THREADS`` so, and Python must read the same
    count from the same text (Python's ``int`` also took ``"4 "``, ``"4_0"`` as 40 and
    other scripts' digits, which the library's pool refuses)."""
    body = text.lstrip(" \t\n\v\f\r")
    digits = body[1:] if body[:1] in ("+", "-") else body
    if not digits or not all("0" <= c <= "9" for c in digits):
        return None
    return int(body)


def default_num_threads() -> int:
    """``TECOMP_NUM_THREADS`` if it is a positive integer (a warning otherwise), else
    :func:`available_cpus`; at most :data:`MAX_THREADS`."""
    n = available_cpus()
    env = os.environ.get("TECOMP_NUM_THREADS")
    if env is not None and env.strip():
        v = _int_as_strtol_reads(env)
        if v is not None and v >= 1:
            n = v
        else:
            warnings.warn(f"TECOMP_NUM_THREADS={env!r} is not a positive integer; "
                          f"using {n} threads (the CPUs this process may use)",
                          RuntimeWarning, stacklevel=3)
    return min(n, MAX_THREADS)


def spin_from_env(name: str = "TECOMP_SPIN", high: Optional[int] = MAX_SPIN) -> Optional[int]:
    """The non-negative integer in the environment variable ``name``, at most ``high``
    (None: no bound), or None (unset, or not such an integer: then with a warning).
    (A spin count reaches the pool as an int64 it compares unsigned: 2**64 - 1 would
    have spun an idle worker for ever, 2**64 not at all.)"""
    env = os.environ.get(name)
    if env is None or not env.strip():
        return None
    try:
        v = int(env)
        if v < 0 or (high is not None and v > high):
            raise ValueError
        return v
    except ValueError:
        what = "a non-negative integer" if high is None else f"an integer from 0 to {high}"
        warnings.warn(f"{name}={env[:40]!r} is not {what}; ignored",
                      RuntimeWarning, stacklevel=3)
        return None


def number_from_env(name: str, default, *, low: float, high: float, integer: bool,
                    error: type, use: str, choices: tuple = (), unset: str = ""):
    """The number in the environment variable ``name`` (``default`` when it is unset or
    blank): an int where ``integer``, else a finite float, from ``low`` to ``high``
    (or one of ``choices`` where given); ``error`` (a :class:`TecompError` subclass)
    naming the variable, what it sets (``use``) and its legal values for anything else
    -- a variable set by mistake must not surface as a Python error deep in a build, or
    as a limit that every build fails (``nan`` seconds).  ``unset`` says what an unset
    variable means (default: ``default``)."""
    env = os.environ.get(name)
    if env is None or not env.strip():
        return default
    try:
        v = int(env) if integer else float(env)
    except ValueError:
        v = None
    if v is not None and (v in choices if choices else
                          (integer or math.isfinite(v)) and low <= v <= high):
        return v
    num = (lambda x: str(int(x))) if integer else (lambda x: f"{x:g}")  # (1048576, not 1.04858e+06)
    legal = (" or ".join(str(c) for c in choices) if choices else
             f"{'an integer' if integer else 'a number'} from {num(low)} to {num(high)}")
    raise error(f"{name}={env[:40]!r} is not {legal}: it sets {use}; set it to such a "
                f"value or unset it ({unset or f'default {default:g}'})")


#: the spellings of a switch in the environment (any case, blanks around ignored)
FLAG_WORDS = {"1": True, "true": True, "yes": True, "on": True,
              "0": False, "false": False, "no": False, "off": False}


def flag_from_env(name: str, default: bool, use: str) -> bool:
    """The switch in the environment variable ``name``: ``default`` when it is unset or
    blank, else one of :data:`FLAG_WORDS`; anything else is ignored with a warning
    naming the variable, what it sets (``use``) and its legal values (once ``off`` for
    ``TECOMP_DUMP_IR`` printed every pass's IR, and ``false`` for ``TECOMP_PY_BINDER`` or
    ``yes`` for ``TECOMP_SHARED_POOL`` were taken as their other value, silently)."""
    env = os.environ.get(name)
    if env is None or not env.strip():
        return default
    v = FLAG_WORDS.get(env.strip().lower())
    if v is None:
        warnings.warn(f"{name}={env[:40]!r} is not 1 or 0 (or true/false, yes/no, on/off): "
                      f"it sets {use}; ignored (default: {'on' if default else 'off'})",
                      RuntimeWarning, stacklevel=3)
        return default
    return v


def choice_from_env(name: str, choices: tuple, default: str, use: str,
                    error: Optional[type] = None) -> str:
    """The word in the environment variable ``name``, one of ``choices`` (lower case; the
    variable's word in any case, blanks around ignored), ``default`` when it is unset or
    blank.  Anything else is ``error`` (a :class:`TecompError` subclass) where given, else
    ignored with a warning; either names the variable, what it sets (``use``) and the
    legal words.  (Once ``TECOMP_COST_MODEL=XGBoost`` silently kept tecomp's trees and
    ``TECOMP_CUDA_EMU_MODE=" serial"`` was refused, where every other variable strips
    blanks.)"""
    env = os.environ.get(name)
    if env is None or not env.strip():
        return default
    word = env.strip().lower()
    if word in choices:
        return word
    what = f"{name}={env[:40]!r} is not one of {', '.join(choices)}: it sets {use}"
    if error is not None:
        raise error(f"{what}; set it to one of them or unset it (default: {default})")
    warnings.warn(f"{what}; ignored (default: {default})", RuntimeWarning, stacklevel=3)
    return default


def shared_pool_from_env() -> bool:
    """Whether the pools of a process share the first one's threads (see
    :func:`register`): where ``TECOMP_SHARED_POOL`` is on (:func:`flag_from_env`)."""
    return flag_from_env("TECOMP_SHARED_POOL", False,
                         "whether every loaded library runs on the process's first pool")


def register(pool: PoolControls) -> None:
    """Add ``pool`` to the pools every setting applies to, and give it the current
    thread count and the spin settings of the environment.  With
    ``TECOMP_SHARED_POOL=1``, a pool registered after another runs its parallel
    regions on the first one's threads (``tecomp_pool_delegate_to``): one set of workers
    per process, however many libraries are loaded."""
    global _desired, _hooks_installed
    with _LOCK:
        if _desired is None:
            _desired = default_num_threads()
        pool.set_threads(_desired)
        spin = spin_from_env()
        if spin is not None:
            pool.set_spin(spin)
        wspin = spin_from_env("TECOMP_WAIT_SPIN")
        if wspin is not None:
            pool.set_wait_spin(wspin)
        pool.ws_set_limit(_ws_limit if _ws_limit is not None else workspace_limit_from_env())
        primary = next((p for p in _POOLS if p.parallel_for), None)
        if _marked is not None and pool.delegate_marked is not None:
            pool.delegate_marked(*_marked)
        if primary is not None and pool.delegate_to is not None and shared_pool_from_env():
            # one pool for the process (opt-in): each pool has its own workers, which
            # spin on their core for a while after each region; kernels from many
            # libraries in a row wake a different pool each, whose worker competes for a
            # core with the previous pool's, still spinning (20 small kernels in a row:
            # 1.4-2x the time of one pool on 2 threads).  Not the default: on the models
            # measured (torch.compile's ResNet-50 and a CNN's training step, 2 threads,
            # under load) one always-warm worker kept PyTorch's OpenMP threads and the
            # caller from their cores more than the many pools' workers, which sleep
            # between their kernels (benchmarks/history/2026-11-29.md, session 8)
            pool.delegate_to(primary.parallel_for)
        _POOLS.append(pool)
        if not _hooks_installed:
            _hooks_installed = True
            atexit.register(_shutdown_at_exit)
            if hasattr(os, "register_at_fork"):
                os.register_at_fork(after_in_child=_after_fork_in_child)


def share_pool(owner: object) -> bool:
    """Run the parallel regions of the pool that ``owner`` (a loaded library) registered
    on the threads of the process's first pool (``tecomp_pool_delegate_to``), as
    ``TECOMP_SHARED_POOL=1`` does for every pool; True where it now does (False: no
    such pool, it is the first, or it lacks the function).

    ``tecomp.dynamo`` does so for the kernels it loads from its disk cache where
    ``tecomp.dynamo.cache.SHARE_POOLS`` is set: a model's kernels run one after
    another, and with a pool each every kernel wakes its own sleeping worker while the
    previous kernel's worker may still spin on the other core."""
    with _LOCK:
        primary = next((p for p in _POOLS if p.parallel_for), None)
        mine = next((p for p in _POOLS if p.owner is owner), None)
        if primary is None or mine is None or mine is primary or mine.delegate_to is None:
            return False
        mine.delegate_to(primary.parallel_for)
        return True


def run_marked_threads_on(parallel_for: Optional[int], key: int = 0) -> None:
    """Make every pool, now and registered later, run the parallel regions that a thread
    *marked* dispatches by calling the function at address ``parallel_for`` (with
    ``tecomp_parallel_for``'s signature: ``tecomp.dynamo.openmp``'s, on PyTorch's
    OpenMP threads) instead of on tecomp's threads.  A thread is marked while its value
    of the pthread key ``key`` (``pthread_key_create``) is not NULL; the others' regions
    run as before.  None: no thread's regions are redirected.  Pools of libraries
    exported before ``tecomp_pool_delegate_marked`` existed keep their own threads."""
    global _marked
    with _LOCK:
        _marked = None if parallel_for is None else (parallel_for, int(key))
        for p in _POOLS:
            if p.delegate_marked is not None:
                p.delegate_marked(*(_marked or (None, 0)))


def set_num_threads(n: int) -> None:
    """Use ``n`` threads (the calling thread included) for parallel loops from now on,
    in every pool (the JIT's and every loaded library's).

    Waits for a parallel region running in another thread to finish; the workers are
    restarted lazily by the next parallel region.
    """
    global _desired
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or int(n) < 1:
        raise TecompError(f"set_num_threads expects a positive integer, got {n!r}")
    n = min(int(n), MAX_THREADS)
    with _LOCK:
        _desired = n
        for p in _POOLS:
            p.set_threads(n)


def workspace_limit_from_env() -> int:
    """``TECOMP_WORKSPACE_LIMIT`` (bytes; a warning if it is not a non-negative
    integer), else :data:`DEFAULT_WORKSPACE_LIMIT`."""
    v = spin_from_env("TECOMP_WORKSPACE_LIMIT", high=None)
    return DEFAULT_WORKSPACE_LIMIT if v is None else min(v, 1 << 62)


def set_workspace_limit(nbytes: int) -> None:
    """Keep at most ``nbytes`` of freed kernel temporaries for reuse, in each pool (the
    JIT's and every loaded library's); 0 keeps none.  A pool that keeps more than the
    new limit frees everything it keeps."""
    global _ws_limit
    if isinstance(nbytes, bool) or not isinstance(nbytes, numbers.Integral) or int(nbytes) < 0:
        raise TecompError(f"set_workspace_limit expects a byte count >= 0 (an int; 0 keeps "
                          f"none), got {nbytes!r:.60}")
    n = min(int(nbytes), 1 << 62)
    with _LOCK:
        _ws_limit = n
        for p in _POOLS:
            p.ws_set_limit(n)


def workspace_limit() -> int:
    """The bytes of freed kernel temporaries each pool may keep (:func:`set_workspace_limit`,
    else ``TECOMP_WORKSPACE_LIMIT``, else :data:`DEFAULT_WORKSPACE_LIMIT`)."""
    v = _ws_limit
    return v if v is not None else workspace_limit_from_env()


#: functions that free other memory kept for reuse under the workspace limit, each
#: returning the bytes it freed (:func:`on_release`)
_RELEASERS: List[Callable[[], int]] = []


def on_release(fn: Callable[[], int]) -> None:
    """Have :func:`release_workspace` call ``fn()`` too: it frees other memory kept
    for reuse (``tecomp.dynamo``'s plans keep their released intermediates) and returns
    the bytes it freed."""
    with _LOCK:
        if fn not in _RELEASERS:
            _RELEASERS.append(fn)


def release_workspace() -> int:
    """Free the kernel temporaries every pool keeps for reuse, and what the functions
    given to :func:`on_release` keep; returns the bytes freed."""
    with _LOCK:
        freed = sum(int(p.ws_release()) for p in _POOLS)
        hooks = list(_RELEASERS)
    return freed + sum(int(fn()) for fn in hooks)


def workspace_cached() -> int:
    """Bytes of kernel temporaries the pools keep for reuse now."""
    with _LOCK:
        return sum(int(p.ws_cached()) for p in _POOLS)


def get_num_threads() -> int:
    """The number of threads parallel loops use (the calling thread included)."""
    d = _desired
    return d if d is not None else default_num_threads()


def _shutdown_at_exit() -> None:
    for p in list(_POOLS):
        p.shutdown()


def _after_fork_in_child() -> None:
    global _LOCK
    _LOCK = threading.Lock()  # a fork() while another thread held it would leave it held
    for p in _POOLS:
        p.after_fork()
