"""Tuning records: one JSON object per line, appended by the search, read by
``tc.auto_schedule(..., log=...)``.

A record::

    {"v": 1, "workload": {"hash": ..., "shapes": {...}, "target": "llvm", "cpu": ...},
     "trace": [...], "times": [seconds, ...] or null, "error": null or "...",
     "ok": true, "at": unix time, ...extra (knobs, trial, search)}

* ``workload`` is :func:`workload_key`: a structural hash of the compute DAG (names do not
  count, structure, shapes, dtypes and constants do), the bound symbolic extents, the
  target and the CPU (:func:`cpu_model`: its model name, LLVM's name of its
  microarchitecture and its vector width).  A record is used only for an equal key.
* ``trace`` is a schedule trace (:mod:`tecomp.schedule.trace`): data that names schedule
  primitives and positions, replayed by :func:`tecomp.schedule.trace.replay`.  Nothing in
  a log is ever executed or unpickled: lines are read with ``json.loads`` only.
* Appending is one ``write`` of the whole line under an exclusive ``flock`` on a file
  opened with ``O_APPEND`` (created ``0600``), so several processes can share a log.
* A log is data from outside: it is read only from a regular file (a FIFO, a device or
  a socket is refused before anything is read) of at most :data:`MAX_LOG_BYTES`, and a
  line that is not a valid record is skipped with a :class:`RecordWarning` naming the
  file and line (and at most 60 characters of it, escaped): a line longer than
  :data:`MAX_LINE_BYTES`, not UTF-8 JSON, nested deeper than :data:`MAX_DEPTH`, with
  ``NaN``/``Infinity``, an integer of more than 18 digits, a key twice in one object, a
  lone surrogate in a string, or fields of the wrong types.  The trace of a record is
  checked when it is replayed (:func:`tecomp.schedule.trace.replay`).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import stat
import statistics
import time
import warnings
from typing import List, Optional, Tuple

from ..errors import AutoScheduleError
from ..ir.expr import Var, CommReducer, TupleCommReducer
from ..runtime.libfiles import file_path, special_file
from .. import target as _machine  # cpu_model, cpu_name: looked up at call time (tests patch them)
from ..target import as_target
from ..te.scatter import ScatterOp
from ..te.tensor import Tensor, ComputeOp

__all__ = ["workload_key", "make_record", "append_record", "load_records", "best_record",
           "RecordWarning", "cpu_model"]

VERSION = 1
#: the largest log read (a search appends about 1 KiB a candidate)
MAX_LOG_BYTES = 256 << 20
#: a longer line is skipped (a record's trace has tens of steps: a few KiB)
MAX_LINE_BYTES = 1 << 20
#: how deeply the JSON of a record may nest (a record's axis references nest 7 levels)
MAX_DEPTH = 16


class RecordWarning(UserWarning):
    """A line of a tuning log that is not a valid record (it is skipped)."""


# ---------------------------------------------------------------------------------------
# the workload key


def cpu_model() -> str:
    """The CPU model name, LLVM's name of its microarchitecture and the vector width the
    schedules use, e.g. ``"AMD EPYC (znver4, 16 x float32 lanes)"``.  The model name
    alone does not tell the machines apart: a virtual machine's ``/proc/cpuinfo`` says
    "AMD EPYC" on Zen 3, Zen 4 and Zen 5 alike, and a schedule tuned on one is not the
    best on another (Zen 4 runs 512-bit FMAs as two halves, Zen 5 does not)."""
    try:
        return (f"{_machine.cpu_name()} ({as_target('llvm').cpu}, "
                f"{_machine.cpu_model().lanes} x float32 lanes)")
    except Exception:  # noqa: BLE001 - no LLVM: the name alone
        return _machine.cpu_name()


class _Canon:
    """A canonical, name-free text of a compute DAG."""

    def __init__(self):
        self.vars = {}
        self.tensors = {}
        self.order = []

    def tensor(self, t) -> str:
        k = (id(t.op), t.value_index)   # (the outputs of one operation differ)
        if k not in self.tensors:
            self.tensors[k] = len(self.tensors)
            self.order.append(t)
        return f"T{self.tensors[k]}"

    def var(self, v) -> str:
        k = id(v)
        if k not in self.vars:
            self.vars[k] = len(self.vars)
        return f"v{self.vars[k]}"

    def __call__(self, x):
        if x is None or isinstance(x, (bool, int, str)):
            return repr(x)
        if isinstance(x, float):
            return repr(x) if math.isfinite(x) else f"float({x!r})"
        if isinstance(x, Var):
            return f"{self.var(x)}:{x.dtype}"
        if isinstance(x, Tensor):
            return self.tensor(x)
        if isinstance(x, (list, tuple)):
            return "[" + ",".join(self(v) for v in x) + "]"
        if isinstance(x, dict):
            return "{" + ",".join(f"{k!r}:{self(x[k])}" for k in sorted(x, key=repr)) + "}"
        if dataclasses.is_dataclass(x):
            skip = ("name",) if isinstance(x, (CommReducer, TupleCommReducer)) else ()
            inner = ",".join(f"{f.name}={self(getattr(x, f.name))}"
                             for f in dataclasses.fields(x) if f.name not in skip)
            return f"{type(x).__name__}({inner})"
        return f"<{type(x).__name__}>"

    def op(self, t) -> str:
        op = t.op
        shape = self(tuple(op.shape))
        if isinstance(op, ComputeOp):
            if len(op.bodies) > 1:   # a multi-output compute; t is one of its outputs
                return (f"compute[{t.value_index}] {self(op.dtypes)} {shape} "
                        f"axis={self(op.axis)} bodies={self(op.bodies)} attrs={self(op.attrs)}")
            return (f"compute {op.dtype} {shape} axis={self(op.axis)} body={self(op.body)} "
                    f"attrs={self(op.attrs)}")
        if hasattr(op, "scan_axis"):   # a scan: its init, update and state
            return (f"scan {op.dtype} {shape} init={self.tensor(op.init)} "
                    f"update={self.tensor(op.update)} state={self.tensor(op.state)}")
        if isinstance(op, ScatterOp):   # a scatter-add
            return (f"scatter {op.dtype} {shape} domain={self(op.domain)} index={self(op.index)} "
                    f"value={self(op.value)} where={self(op.condition)}")
        call = getattr(op, "call", None)
        if call is not None:   # an extern stage: its function's name and arguments
            args = ",".join(self.tensor(a.tensor) if hasattr(a, "tensor") else self(a)
                            for a in call.args)
            return (f"extern[{t.value_index}] {self(op.dtypes)} {self(op.shapes)} "
                    f"call={call.name!r}({args}) inputs={self(op.inputs)}")
        return f"placeholder {op.dtype} {shape}"


def workload_key(args, target: str = "llvm", shapes: Optional[dict] = None) -> dict:
    """The key of the workload ``args`` (the list given to ``tc.build``): ``{"hash": sha256
    of the DAG's canonical text, "shapes": the bound symbolic extents, "target", "cpu"}``.
    Two DAGs built the same way with other names have the same hash."""
    c = _Canon()
    head = []
    for a in args:
        if isinstance(a, Tensor):
            head.append(c.tensor(a))
        elif isinstance(a, Var):
            head.append(c(a))
        else:
            raise AutoScheduleError(f"workload_key: {type(a).__name__} {a!r:.40} is not a "
                                    "tensor or a tc.var; pass the list you give tc.build")
    lines = ["args " + " ".join(head)]
    n = 0
    while n < len(c.order):          # every tensor reachable, in first-seen order
        t = c.order[n]
        lines.append(f"T{n} = {c.op(t)}")
        for x in t.op.input_tensors:
            c.tensor(x)
        n += 1
    text = "\n".join(lines)
    return {"hash": hashlib.sha256(text.encode()).hexdigest(),
            "shapes": {k: int(shapes[k]) for k in sorted(shapes or {})},
            "target": str(target), "cpu": cpu_model()}


# ---------------------------------------------------------------------------------------
# records


def make_record(key: dict, trace: list, times: Optional[List[float]], error: Optional[str] = None,
                **extra) -> dict:
    """A record of one measured candidate (see the module docstring)."""
    rec = {"v": VERSION, "workload": key, "trace": trace,
           "times": None if times is None else [float(t) for t in times], "error": error,
           "ok": error is None and bool(times), "at": round(time.time(), 3)}
    rec.update(extra)
    return rec


def check_log_path(path, what: str, error=AutoScheduleError) -> str:
    """``path`` of a tuning log as a str; ``error``, its message starting with ``what``,
    for anything else than a str or os.PathLike, for bytes, an empty path or one with a
    NUL, and for a directory, a device, a FIFO or a socket (or a link to one)."""
    p = file_path(path, what, error)
    if os.path.isdir(p):
        raise error(f"{what}: {p!r} is a directory; give a file path for the log, "
                    f"e.g. {os.path.join(p, 'tuning.jsonl')!r}")
    why = special_file(p)
    if why:
        raise error(f"{what}: {p!r:.200} {why}; give the path of a tuning log, e.g. "
                    f"'tuning.jsonl'")
    return p


def _open_log(p: str, flags: int, what: str) -> int:
    """A descriptor of the log ``p``, which must be a regular file: a FIFO, a device or a
    socket is refused before anything is read or written (opening does not wait for a
    FIFO's other end).  FileNotFoundError when there is none."""
    def refuse():
        raise AutoScheduleError(f"{what}: {p!r} is not a regular file (a FIFO, a device or a "
                                "socket); give the path of a tuning log, e.g. 'tuning.jsonl'")

    try:
        if not stat.S_ISREG(os.stat(p).st_mode):
            refuse()
    except OSError:   # (none yet, or unreadable: the open below says which)
        pass
    try:
        fd = os.open(p, flags | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0),
                     0o600)
    except FileNotFoundError:
        raise
    except OSError as e:
        raise AutoScheduleError(f"{what}: cannot open the log {p!r} ({e.strerror}); give the "
                                "path of a readable and writable file") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):   # (replaced since)
        os.close(fd)
        refuse()
    return fd


def append_record(path, record: dict) -> None:
    """Append ``record`` as one line of the log at ``path`` (created 0600, with its
    folders); safe when several processes append to the same log."""
    import fcntl

    p = check_log_path(path, "append_record")
    try:
        line = json.dumps(record, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except ValueError as e:
        raise AutoScheduleError(f"append_record: the record for {p!r} holds a value JSON "
                                f"cannot store ({e}): times must be finite") from None
    d = os.path.dirname(p)
    if d:
        os.makedirs(d, exist_ok=True)
    try:
        fd = _open_log(p, os.O_WRONLY | os.O_APPEND | os.O_CREAT, "append_record")
    except FileNotFoundError as e:   # (a folder removed meanwhile)
        raise AutoScheduleError(f"append_record: cannot open the log {p!r} for appending "
                                f"({e.strerror}); give a writable file path") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        data = (line + "\n").encode()
        while data:
            n = os.write(fd, data)
            data = data[n:]
    finally:
        os.close(fd)   # (releases the lock)


def _no_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def _bounded_int(text: str) -> int:
    # (10**4000 parses, then overflows float(); Python refuses 4300 digits and more)
    if len(text.lstrip("-")) > 18:
        raise ValueError("an integer of more than 18 digits")
    return int(text)


def _finite_float(text: str) -> float:
    x = float(text)
    if not math.isfinite(x):
        raise ValueError("a number too large for a float")
    return x


def _unique_keys(pairs) -> dict:
    d = dict(pairs)
    if len(d) != len(pairs):
        raise ValueError("a key appears twice in one object")
    return d


def _odd_structure(x, limit: int) -> Optional[str]:
    """Why the JSON value ``x`` is no record's: nested deeper than ``limit``, or a string
    that is not Unicode text (a lone surrogate, ``"\\ud800"``); else None.  (Without
    recursion.)"""
    todo = [(x, 1)]
    while todo:
        v, d = todo.pop()
        if isinstance(v, (list, dict)):
            if d > limit:
                return f"JSON nested deeper than {limit} levels"
            todo.extend((c, d + 1) for c in (v.values() if isinstance(v, dict) else v))
            if isinstance(v, dict):
                todo.extend((k, d) for k in v)
        elif isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                return "a string with a lone surrogate (not Unicode text)"
    return None


def _is_num(t) -> bool:
    return isinstance(t, (int, float)) and not isinstance(t, bool)


def _valid(rec) -> Optional[str]:
    if not isinstance(rec, dict):
        return f"a JSON {type(rec).__name__}, not a record"
    if rec.get("v") != VERSION or isinstance(rec.get("v"), bool):
        return (f"version {rec.get('v')!r:.20}, not {VERSION} (written by another tecomp, or "
                "not a record)")
    for k, typ in (("workload", dict), ("trace", list)):
        if not isinstance(rec.get(k), typ):
            return f"no {k!r} {typ.__name__}"
    times = rec.get("times")
    if times is not None and (not isinstance(times, list) or not all(
            _is_num(t) and math.isfinite(t) and t >= 0 for t in times)):
        return "'times' is not a list of seconds"
    if not isinstance(rec.get("ok", False), bool):
        return "'ok' is not a boolean"
    for k in ("error", "search"):
        if not isinstance(rec.get(k), (str, type(None))):
            return f"{k!r} is not a string"
    return None


def _parse(line: bytes) -> Tuple[Optional[dict], Optional[str]]:
    """The record on ``line`` and None, or None and why it is not one."""
    if len(line) > MAX_LINE_BYTES:
        return None, f"a line of {len(line)} bytes, more than the {MAX_LINE_BYTES} of a record"
    try:
        rec = json.loads(line.decode("utf-8"), parse_constant=_no_constant,
                         parse_int=_bounded_int, parse_float=_finite_float,
                         object_pairs_hook=_unique_keys)
    except RecursionError:
        return None, f"JSON nested deeper than {MAX_DEPTH} levels"
    except (UnicodeDecodeError, ValueError) as e:
        why = str(e).split(":")[0] if not isinstance(e, UnicodeDecodeError) else "not UTF-8"
        return None, f"not JSON ({type(e).__name__}: {why[:60]})"
    why = _odd_structure(rec, MAX_DEPTH) or _valid(rec)
    return (None, why) if why is not None else (rec, None)


def _read_log(p: str) -> Optional[bytes]:
    """The bytes of the log ``p`` (None when there is no such file)."""
    try:
        fd = _open_log(p, os.O_RDONLY, "load_records")
    except FileNotFoundError:
        return None
    try:
        size = os.fstat(fd).st_size
        if size > MAX_LOG_BYTES:
            raise AutoScheduleError(
                f"load_records: the log {p!r} has {size} bytes, more than the "
                f"{MAX_LOG_BYTES} tecomp reads; keep the records of one workload per log, or "
                "the ones worth keeping (grep its hash)")
        chunks, n = [], 0
        while n <= MAX_LOG_BYTES:
            b = os.read(fd, 1 << 20)
            if not b:
                break
            chunks.append(b)
            n += len(b)
        return b"".join(chunks)[:MAX_LOG_BYTES]
    except OSError as e:
        raise AutoScheduleError(f"load_records: cannot read the log {p!r} ({e.strerror})") \
            from None
    finally:
        os.close(fd)


def load_records(path, key: Optional[dict] = None, *, lines: bool = False) -> list:
    """The valid records of the log at ``path`` (those of workload ``key`` when given); a
    missing file has none.  ``lines=True``: ``(line number, record)`` pairs."""
    p = check_log_path(path, "load_records")
    pairs, skipped = scan_log(p, key)
    for n, why, head in skipped:
        warnings.warn(f"{p}:{n}: {why}; line skipped: {head!r}", RecordWarning, stacklevel=2)
    return pairs if lines else [r for _, r in pairs]


def scan_log(path, key: Optional[dict] = None) -> Tuple[List[Tuple[int, dict]],
                                                        List[Tuple[int, str, bytes]]]:
    """The ``(line number, record)`` pairs of the log at ``path`` (of workload ``key``
    when given) and its lines that are not records, as ``(line number, why, its first 60
    bytes)``; :func:`load_records` warns of those.  A missing file has neither."""
    p = check_log_path(path, "load_records")
    raw = _read_log(p)
    if raw is None:
        return [], []
    out, skipped = [], []
    for n, line in enumerate(raw.split(b"\n"), 1):
        if not line.strip():
            continue
        rec, why = _parse(line)
        if why is not None:
            skipped.append((n, why, line[:60]))
        elif key is None or rec["workload"] == key:
            out.append((n, rec))
    return out, skipped


def ranked_records(path, key: dict) -> List[Tuple[int, dict]]:
    """The records of workload ``key`` that ran correctly, best first, as ``(line number,
    record)``: by median time, of equal ones the first in the log.  Where a search ended
    with its finalists measured again (records with ``"search": "final"``: every timing of
    a candidate, interleaved with the others), those come first."""
    return rank(load_records(path, key, lines=True))


def rank(pairs) -> List[Tuple[int, dict]]:
    """The ``(line number, record)`` pairs that ran correctly, best first (the order of
    :func:`ranked_records`)."""
    recs = [(n, r) for n, r in pairs if r.get("ok") and r.get("times")]
    return sorted(recs, key=lambda nr: (nr[1].get("search") != "final",
                                        statistics.median(nr[1]["times"]), nr[0]))


def best_record(path, key: dict) -> Optional[dict]:
    """The fastest (median time) record of workload ``key`` that ran correctly, or None;
    of equal ones, the first in the log.  Where a search ended with its finalists measured
    again (records with ``"search": "final"``), only those records compete."""
    recs = ranked_records(path, key)
    return recs[0][1] if recs else None
