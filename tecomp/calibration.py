"""The machine model's measured costs, measured on this CPU at first use and cached.

The CPU schedules read a few costs that no datasheet gives (:class:`~tecomp.target.machine.
CpuModel`): ``fma_bits`` (does the core run a full-register FMA at once, or as two
halves), ``gather_cost`` and ``transpose_cost`` (copying weights across a row, in FMAs
per element), ``split_loads_cheap`` (a vector load across two cache lines costs what an
aligned one does), ``gemm_load_cost`` (what a load costs the GEMM micro-kernel beyond
its FMAs), ``row_prefetch_bytes`` (how far ahead a reduction along short rows
prefetches its input: a row sum timed with and without) and ``stream_output_bytes`` (from
what size an elementwise output is stored past the cache: a copy timed both ways).  For
the CPUs in :data:`tecomp.target.x86.MEASURED` they come from that table (measured with
``benchmarks/machine_probe.py`` and confirmed by A/B runs).  For any other host CPU, the
first schedule that reads the machine model measures them here with five small kernels,
a row sum over 64 MiB and a copy of 32 MiB (a few seconds, once) and keeps the result in
``$TECOMP_CACHE_DIR/machine/<cpu>-<hash>.json`` (the hash: the CPU's features, vector
width, this tecomp's version, the names of the costs it measures and the measurement's
:data:`METHOD`), which every later
process reads.

``TECOMP_CALIBRATE`` chooses: ``auto`` (the default: measure at first use where the table
has no entry), ``0`` / ``off`` (never measure; use a cached result if there is one, else
the defaults: the costs of a CPU without an entry), ``force`` (measure even where the table
has an entry, and use the measurement).  :func:`calibrate` measures on demand (also
``python -m tecomp calibrate``).

The measurement times kernels: on a busy machine its figures are those of a busy machine.
Run ``python -m tecomp calibrate`` on a quiet one to replace them.  A cache file is data
this process trusts: one that does not parse, names a cost this version does not know, or
holds a value outside the range the costs can take is ignored with a warning (and
replaced by the next measurement); so is anything there that is not a regular file of at
most 64 KiB (a FIFO, a device, a directory), which is never read."""
from __future__ import annotations

import functools
import hashlib
import json
import logging
import math
import os
import tempfile
import threading
import time
import warnings
from pathlib import Path
from typing import Dict, Optional

import numpy as np

from ._version import __version__
from .build import build
from .errors import TargetError
from .runtime.libfiles import FileRefused, cache_root, open_regular, private_dir, read_fd
from .runtime.timing import time_calls
from .schedule import create_schedule
from .strategy import cpu as _scpu
from .strategy.cpu.gemm import _rows
from .strategy.rows import row_reduce_at
from .strategy.rules import Knobs
from .target import as_target, machine as _machine
from .te import compute, placeholder, reduce_axis, sum as te_sum
from .te.tensor_intrin import transpose_intrin
from .threads import choice_from_env, get_num_threads, set_num_threads
from .viz.peaks import fma_peak

__all__ = ["calibrate", "cache_path", "MODES"]

_log = logging.getLogger("tecomp.calibrate")

#: the values of ``TECOMP_CALIBRATE``
MODES = ("auto", "0", "off", "force")

#: how the costs are measured, part of the cache file's name: a change of method (2: the
#: best round of each kernel, :func:`best_rounds`, the GEMM blocks and the split loads
#: timed by the thread's CPU time; 1: medians of wall times) measures again
METHOD = 2

#: the costs a calibration gives, each with the check a cached value must pass
_CHECKS = {
    "fma_bits": lambda v, lanes: isinstance(v, int) and not isinstance(v, bool)
    and v in (16 * lanes, 32 * lanes),
    "gather_cost": lambda v, lanes: _finite(v) and 0.0 < v <= 64.0,
    "transpose_cost": lambda v, lanes: _finite(v) and 0.0 < v <= 64.0,
    "split_loads_cheap": lambda v, lanes: isinstance(v, bool),
    "gemm_load_cost": lambda v, lanes: _finite(v) and 0.0 <= v <= 8.0,
    "row_prefetch_bytes": lambda v, lanes: isinstance(v, int) and not isinstance(v, bool)
    and 0 <= v <= 1 << 16,
    "stream_output_bytes": lambda v, lanes: isinstance(v, int) and not isinstance(v, bool)
    and 0 <= v <= 1 << 40,
}

#: the row reduction the calibration times with and without prefetching rows ahead:
#: rows of ROW_PREFETCH_ROW float32 (1 KiB), 64 MiB in all (past the L2 caches, and past
#: most last-level caches), prefetched ROW_PREFETCH_BYTES ahead; the model takes that
#: distance where it ran at least ROW_PREFETCH_GAIN times faster (1.24-1.40x on 1
#: thread, the project's Xeon VM under load; benchmarks/DECISIONS.md, "Row reductions:
#: the rows ahead prefetched")
ROW_PREFETCH_ROW = 256
ROW_PREFETCH_MIB = 64
ROW_PREFETCH_BYTES = 4096
ROW_PREFETCH_GAIN = 1.1

#: the elementwise copy the calibration times with its output stored past the cache and
#: through it: STREAM_COPY_MIB in, as many out (the row sum's input, halved); where the
#: streamed copy ran STREAM_GAIN times faster or more, outputs of more than half that size
#: are streamed (``stream_output_bytes``; a copy of 32 MiB 1.35x faster streamed, of 8 MiB
#: 0.96x, on the project's Xeon VM under load: benchmarks/DECISIONS.md, "Elementwise
#: outputs streamed past a VM's share of the cache")
STREAM_COPY_MIB = 32
STREAM_GAIN = 1.1

_LOCK = threading.Lock()
#: a measurement runs (in any thread): its own kernels, and any other build meanwhile, use
#: the defaults (no thread waits for it: a compile worker of the measuring thread would
#: wait for itself)
_BUSY = threading.Event()
_MEMO: Dict[str, Optional[dict]] = {}
#: the largest calibration file read (one is a few hundred bytes)
_MAX_FILE = 1 << 16


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def mode() -> str:
    """``TECOMP_CALIBRATE`` (``auto`` when unset or blank; any case, blanks around
    ignored: :func:`~tecomp.threads.choice_from_env`); a :class:`TargetError` for any other
    value."""
    return choice_from_env("TECOMP_CALIBRATE", MODES, "auto",
                           "when tecomp measures the host CPU's costs: auto (at first use), "
                           "0/off (never) or force (even CPUs tecomp has a table entry for)",
                           TargetError)


def cache_path(target) -> Path:
    """The file that keeps the calibration of the host ``target``'s CPU (its name hashes
    the CPU, its features and vector width, this tecomp's version and the costs it
    measures: a calibration kept before a cost was added is measured again)."""
    return cache_root() / "machine" / _file_name(target.cpu, target.lanes, target.features)


@functools.lru_cache(maxsize=16)
def _file_name(cpu: str, lanes: int, features: frozenset) -> str:
    key = f"{cpu}|{lanes}|{','.join(sorted(features))}|{__version__}|{METHOD}|{','.join(_CHECKS)}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in cpu)[:40] or "cpu"
    return f"{safe}-{digest}.json"


def _valid(entry, lanes: int) -> Optional[str]:
    """Why ``entry`` is not a calibration this version can use (None if it is one)."""
    if not isinstance(entry, dict):
        return "its costs are not a JSON object"
    for k, v in entry.items():
        if k not in _CHECKS:
            return f"it names {k!r}, not a cost tecomp measures"
        if not _CHECKS[k](v, lanes):
            return f"its {k} is {v!r}, outside what the cost can be"
    return None


def _load(path: Path, lanes: int) -> Optional[dict]:
    # (a FIFO there would block every process's first schedule, a device never end:
    # only a regular file of at most _MAX_FILE bytes is read)
    try:
        fd = open_regular(path, _MAX_FILE)
        try:
            text = read_fd(fd, _MAX_FILE).decode("utf-8", "replace")
        finally:
            os.close(fd)
    except FileNotFoundError:
        return None
    except FileRefused as e:
        warnings.warn(f"tecomp: ignoring the machine calibration {path}: it {e.reason}; "
                      "delete it or run `python -m tecomp calibrate` to measure again "
                      "(the machine model uses its defaults)", RuntimeWarning, stacklevel=3)
        return None
    try:
        doc = json.loads(text)
    except ValueError:
        why = "it is not JSON"
    else:
        why = ("it is not a JSON object" if not isinstance(doc, dict) else
               "it has no costs" if "costs" not in doc else _valid(doc["costs"], lanes))
    if why is not None:
        warnings.warn(f"tecomp: ignoring the machine calibration {path}: {why}; delete it or "
                      "run `python -m tecomp calibrate` to measure again", RuntimeWarning,
                      stacklevel=3)
        return None
    return dict(doc["costs"])


def _save(path: Path, costs: dict, figures: dict, target) -> None:
    d = private_dir(path.parent, "the machine calibration cache", TargetError)
    doc = {"cpu": target.cpu, "lanes": target.lanes, "tecomp": __version__,
           "costs": costs, "figures": figures}
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".calib-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _host_costs(target, table: Optional[dict]) -> dict:
    """The measured costs of the host ``target``'s CPU the machine model uses
    (:data:`tecomp.target.machine.HOST_COSTS`): ``table`` (its entry in
    :data:`tecomp.target.x86.MEASURED`, or None), else its calibration (kept, or measured
    now where ``TECOMP_CALIBRATE`` allows, the table's facts that a calibration does not
    measure kept: ``read_streams``, ``prefetch_burst_lines``, ``strip_prefetch_rows``),
    else ``{}`` (the
    defaults)."""
    m = mode()
    if table is not None and m != "force":
        return dict(table)
    path = cache_path(target)
    key = f"{path}|{m}"
    if key in _MEMO:
        return {**(table or {}), **(_MEMO[key] or {})}
    if _BUSY.is_set():        # the calibration's own kernels: the defaults
        return dict(table or {})
    costs = _load(path, target.lanes)
    if costs is None and m in ("auto", "force"):
        costs = _first_use(target, path)
    _MEMO[key] = costs
    return {**(table or {}), **(costs or {})}


def _first_use(target, path: Path) -> Optional[dict]:
    """Measure at first use.  A measurement that fails, or a cache dir it cannot be kept
    in, is a warning, not an error: the schedule that asked goes on with the defaults
    (or the measurement, unkept)."""
    try:
        costs, figures = _run(target, 3)
    except Exception as e:    # (a schedule must not fail because a timing did)
        warnings.warn(f"tecomp: could not measure this CPU's costs for the machine model "
                      f"({type(e).__name__}: {e}); using the defaults (set "
                      "TECOMP_CALIBRATE=0 to stop trying)", RuntimeWarning, stacklevel=4)
        return None
    try:
        _save(path, costs, figures, target)
    except (TargetError, OSError) as e:
        warnings.warn(f"tecomp: cannot keep the machine calibration in {path.parent} ({e}); "
                      "it is used in this process only", RuntimeWarning, stacklevel=4)
    return costs


def calibrate(target=None, *, rounds: int = 3, save: bool = True) -> dict:
    """Measure the machine model's costs on this CPU (the host ``llvm`` target ``target``,
    default ``tc.Target("llvm")``): ``rounds`` rounds of five small kernels, a row sum
    and a copy on one thread, the best round of each.  Returns the costs (a dict as :data:`tecomp.target.x86.MEASURED`'s
    entries) and, with ``save``, keeps them where :func:`measured_costs` reads them.

    >>> import tecomp as tc
    >>> costs = tc.calibration.calibrate(save=False)  # doctest: +SKIP
    >>> sorted(costs)                                 # doctest: +SKIP
    ['fma_bits', 'gather_cost', 'gemm_load_cost', 'row_prefetch_bytes', 'split_loads_cheap',
     'stream_output_bytes', 'transpose_cost']
    """
    target = as_target("llvm" if target is None else target)
    if not (target.is_cpu and target.is_host and target.is_native_isa):
        raise TargetError(f"cannot calibrate {target}: only this machine's own CPU can be "
                          "measured (tc.Target('llvm'))")
    if not isinstance(rounds, int) or isinstance(rounds, bool) or not 1 <= rounds <= 100:
        raise TargetError(f"calibrate(rounds={rounds!r}): give an int from 1 to 100")
    costs, figures = _run(target, rounds)
    if save:
        path = cache_path(target)
        _save(path, costs, figures, target)
        for k in [k for k in _MEMO if k.startswith(f"{path}|")]:
            del _MEMO[k]
    return costs


def _run(target, rounds: int):
    """(costs, figures) of one measurement, one at a time in this process."""
    with _LOCK:
        _BUSY.set()
        try:
            _log.info("tecomp: measuring this CPU's costs for the machine model (%s)",
                      target.cpu)
            return _measure(target, rounds)
        finally:
            _BUSY.clear()


# -- the kernels ----------------------------------------------------------------------------
# (benchmarks/machine_probe.py prints the same measurements with more rounds)

def aligned(shape, offset_bytes: int = 0):
    """A float32 numpy array of ``shape`` starting ``offset_bytes`` past a 64-byte
    boundary, filled with ones."""
    n = int(np.prod(shape))
    raw = np.empty(n * 4 + 128 + offset_bytes, np.uint8)
    start = (-raw.ctypes.data) % 64 + offset_bytes
    a = raw[start:start + n * 4].view(np.float32).reshape(shape)
    a[...] = 1.0
    return a


def copy_kernel(N: int, K: int, L: int, transpose: bool, target=None):
    """``out[k, n] = w[n, k]``: vectors of ``L`` along ``n`` read with a strided load, or
    ``L x L`` tiles through the transpose intrinsic (None where the target has none)."""
    target = target or "llvm"
    W = placeholder((N, K), name="w")
    O = compute((K, N), lambda k, n: W[n, k], name="out")
    s = create_schedule(O.op)
    k, n = s[O].op.axis
    if transpose:
        intrin = transpose_intrin("llvm", L, "float32")
        if intrin is None:
            return None
        ko, no, ki, ni = s[O].tile(k, n, L, L)
        s[O].tensorize(ki, intrin)
    else:
        no, ni = s[O].split(n, factor=L)
        s[O].reorder(k, no, ni)
        s[O].vectorize(ni)
    return build(s, [W, O], target=target,
                 name="transpose_copy" if transpose else "gather_copy")


def split_kernel(L: int, R: int, rows: int, steps: int, shared: bool, target=None):
    """FMAs into ``R x 2L`` accumulators reading vectors of ``x`` (``rows`` x ``2 L``, in
    L1) and broadcasts of ``c``: ``y[r, v] = sum_k x[k % rows, v] * c[k % 64, r]`` (with
    ``shared``: a GEMM/NHWC-conv micro-kernel, 2 vector loads per ``2 R`` FMAs), or
    ``x[(k + r) % rows, v]`` (each FMA its own vector load: as load-heavy as FMAs get)."""
    target = target or "llvm"
    X = placeholder((rows, 2 * L), name="x")
    C = placeholder((64, R), name="c")
    k = reduce_axis((0, steps), name="k")
    Y = compute((R, 2 * L), lambda r, v: te_sum(
        X[(k if shared else k + r) % rows, v] * C[k % 64, r], axis=k), name="y")
    s = create_schedule(Y.op)
    YL = s.cache_write(Y, "local")
    yr, yv = s[YL].op.axis
    yk, = s[YL].op.reduce_axis
    s[YL].reorder(yk, yr, yv)
    s[YL].unroll(yr)
    s[YL].vectorize(yv)
    s[YL].pragma(yk, "fp_contract")
    s[Y].vectorize(s[Y].op.axis[1])
    return build(s, [X, C, Y], target=target, name="split_fma")


def row_sum_kernel(rows: int, K: int, lanes: int, ahead_rows: int, target=None):
    """``y[i] = sum_k x[i, k]`` over rows of ``K``, each row's reduction vectorized as the
    rules do (:func:`tecomp.strategy.rows.row_reduce_at`), prefetching the row
    ``ahead_rows`` rows ahead (0: none)."""
    target = target or "llvm"
    X = placeholder((rows, K), name="x")
    k = reduce_axis((0, K), name="k")
    Y = compute((rows,), lambda i: te_sum(X[i, k], axis=k), name="y")
    s = create_schedule(Y.op)
    c = s.cache_write(Y, "local")
    _, ri = s[Y].split(s[Y].op.axis[0], factor=16)
    row_reduce_at(s, c, s[Y], ri, lanes, prefetch_rows=ahead_rows)
    return build(s, [X, Y], target=target, name=f"row_sum_ahead{ahead_rows}")


def copy_pass(n: int, streamed: bool, info, target=None):
    """``out[i] = x[i]`` over ``n`` float32 as the rules schedule an elementwise pass,
    its output stored past the cache or through it (the knob ``stream.copy``)."""
    target = target or "llvm"
    X = placeholder((n,), name="x")
    O = compute((n,), lambda i: X[i], name="copy")
    s = _scpu.apply_rules([X, O], Knobs({"stream.copy": streamed}), info)
    return build(s, [X, O], target=target, name=f"copy_streamed{int(streamed)}")


def gemm_blocks(info, M: int = 1536, N: int = 1024, K: int = 2048, target=None):
    """``matmul_packed`` ``M x N x K`` with register blocks two and four vectors wide
    (rows from ``gemm_params``): ``{vectors: (function, loads per FMA)}``."""
    target, out = target or "llvm", {}
    for nv in (2, 4):
        mr, nr = _rows(M, nv, info), nv * info.lanes
        A = placeholder((M, K), name="A")
        B = placeholder((K, N), name="B")
        C = _scpu.matmul_packed(A, B, nr=nr)
        f = build(_scpu.schedule_matmul(C, config={"nr": nr, "mr": mr}, target=target),
                  [A, B, C], target=target, name=f"gemm_{mr}x{nr}")
        out[nv] = (f, (mr + nv) / (mr * nv))
    return out


def costs_from(med: dict, L: int, N: int, K: int, gemm_loads: tuple) -> dict:
    """The costs that the figures ``med`` (the best rounds' seconds, and GFLOP/s for
    ``fma16``/``fma8``) of the kernels above give (``N x K`` copies; ``gemm_loads``: the two GEMM blocks'
    loads per FMA)."""
    t_fma = 2 * L / (med["fma16"] * 1e9)     # seconds per full-register FMA, one thread
    costs = {"fma_bits": 32 * L if med["fma16"] / med["fma8"] > 1.5 else 16 * L,
             "gather_cost": round(min(max(med["gather"] / (N * K) / t_fma, 0.01), 64.0), 2)}
    if "transpose" in med:
        costs["transpose_cost"] = round(
            min(max(med["transpose"] / (N * K) / t_fma, 0.01), 64.0), 2)
    costs["split_loads_cheap"] = bool(med["split"] / med["aligned"] < 1.10)
    r = med["gemm2"] / med["gemm4"]
    a2, a4 = gemm_loads
    load_cost = (r - 1) / (a2 - r * a4) if r > 1.01 and a2 > r * a4 else 0.0
    if load_cost > 0:
        costs["gemm_load_cost"] = round(min(load_cost, 8.0), 2)
    if "rows" in med and "rows_ahead" in med:
        costs["row_prefetch_bytes"] = ROW_PREFETCH_BYTES if \
            med["rows"] / med["rows_ahead"] >= ROW_PREFETCH_GAIN else 0
    if "copy" in med and "copy_streamed" in med:
        costs["stream_output_bytes"] = (STREAM_COPY_MIB << 20) // 2 if \
            med["copy"] / med["copy_streamed"] >= STREAM_GAIN else 0
    return costs


def _measure(target, rounds: int):
    """(costs, figures): the kernels above, ``rounds`` rounds interleaved, on one
    thread (the runtime's thread count is restored after)."""
    info = target.machine
    L = info.lanes
    N, K, rows, steps, R = 64, 576, 64, 20000, 7
    before = get_num_threads()
    set_num_threads(1)
    try:
        w, out = aligned((N, K)), aligned((K, N))
        gather = copy_kernel(N, K, L, False, target)
        trans = copy_kernel(N, K, L, True, target)
        micro = split_kernel(L, R, rows, steps, True, target)
        x_al, x_sp = aligned((rows, 2 * L)), aligned((rows, 2 * L), 16)
        c = np.full((64, R), 1e-6, np.float32)
        y = np.empty((R, 2 * L), np.float32)
        gemms = gemm_blocks(info, target=target)
        ga, gb, gc = aligned((1536, 2048)), aligned((2048, 1024)), aligned((1536, 1024))
        nrows = (ROW_PREFETCH_MIB << 20) // (4 * ROW_PREFETCH_ROW)
        rx, ry = aligned((nrows, ROW_PREFETCH_ROW)), aligned((nrows,))
        row_sums = {key: row_sum_kernel(nrows, ROW_PREFETCH_ROW, L, ahead, target)
                    for key, ahead in (("rows", 0), ("rows_ahead", ROW_PREFETCH_BYTES // (
                        4 * ROW_PREFETCH_ROW)))}
        ncopy = (STREAM_COPY_MIB << 20) // 4
        flat = rx.reshape(-1)
        cx, cy = flat[:ncopy], flat[ncopy:2 * ncopy]
        copies = {key: copy_pass(ncopy, streamed, info, target)
                  for key, streamed in (("copy", False), ("copy_streamed", True))}

        def t(f, a, n=20):
            f(*a)
            return min(time_calls(f, a, 1, n))

        def cpu(f, a, n):
            # the kernels whose ratio decides (the GEMM blocks, 40 ms a call; the split
            # loads) by this thread's CPU time (one thread: the kernel runs on it), which
            # a busy machine's time slices for other processes do not count: by the wall
            # clock, at load average 18 on the 2-core Xeon, one calibration in four still
            # timed the 4-vector block slower, and one in twelve the split loads cheap
            f(*a)
            best = math.inf
            for _ in range(n):
                t0 = time.thread_time()
                f(*a)
                best = min(best, time.thread_time() - t0)
            return best

        res = {k: [] for k in ("fma16", "fma8", "gather", "transpose", "aligned", "split",
                               "gemm2", "gemm4", "rows", "rows_ahead", "copy",
                               "copy_streamed")}
        for _ in range(rounds):
            res["fma16"].append(fma_peak(1, lanes=L, steps=50000, calls=3, bursts=2))
            res["fma8"].append(fma_peak(1, lanes=L // 2, steps=50000, calls=3, bursts=2))
            res["gather"].append(t(gather, (w, out)))
            if trans is not None:
                res["transpose"].append(t(trans, (w, out)))
            res["aligned"].append(cpu(micro, (x_al, c, y), 20))
            res["split"].append(cpu(micro, (x_sp, c, y), 20))
            for nv, (f, _) in gemms.items():
                res[f"gemm{nv}"].append(cpu(f, (ga, gb, gc), 2))
            for key, f in row_sums.items():
                res[key].append(cpu(f, (rx, ry), 5))
            for key, f in copies.items():
                res[key].append(cpu(f, (cx, cy), 5))
    finally:
        set_num_threads(before)
    best = best_rounds(res)
    return costs_from(best, L, N, K, (gemms[2][1], gemms[4][1])), best


def best_rounds(res: dict) -> dict:
    """The best round of each kernel's figures ``res`` (seconds; GFLOP/s for ``fma16`` /
    ``fma8``): on a busy machine a kernel only ever runs slower than the CPU can run it
    (another process took the core or its caches), so the fastest round is the closest to
    the CPU's own figure.  Medians of 3 rounds, on the 2-core Xeon under load (load
    average 6-12), once gave the 4-vector GEMM block slower than the 2-vector one (no
    gemm_load_cost: GEMMs kept 8 x 32, which ran 0.96x 6 x 64 at 2048^3)
    (measurements: benchmarks/DECISIONS.md, "Calibration: the best round")."""
    return {k: (max(v) if k in ("fma16", "fma8") else min(v)) for k, v in res.items() if v}


_machine.HOST_COSTS[:] = [_host_costs]
