"""``python -m tecomp``: the machine, tuning logs and exported libraries, from a shell.

::

    python -m tecomp info                 # this machine as tecomp sees it
    python -m tecomp show tuning.jsonl    # every record of a tuning log, as a table
    python -m tecomp tune tuning.jsonl    # the best record of each workload in it
    python -m tecomp bench kernels.so --var n=1024   # time an exported library

A tuning log or a library named on the command line is data from outside: it is read
with the checks ``tc.auto_schedule(log=...)`` and ``tc.load_module`` apply (a FIFO, a
device, an oversized or damaged file is refused before anything of it is used), and
whatever it holds is escaped before it is printed.  A file that cannot be used is one
line on stderr (``tecomp <command>: error: ...``) and exit status 2; a line of a log
that is not a record is a warning and is skipped, as ``auto_schedule`` skips it.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
from typing import Dict, List, Optional, Sequence

import numpy as np

from . import threads
from ._version import __version__
from .autoschedule import records
from .autoschedule.search import format_table
from .calibration import cache_path, calibrate
from .errors import ArgumentError, TecompError
from .ir import dtype as _dt
from .ir.expr import Buffer, Var
from .ir.functor import collect
from .ir.host_eval import eval_host_expr
from .ir.names import display
from .runtime.aot import load_module
from .runtime.cuda_library import CudaLibraryModule
from .runtime.libfiles import cache_root
from .target import Target, cpu_name

__all__ = ["main"]

#: the packages ``info`` reports the versions of (without importing them)
PACKAGES = ("llvmlite", "numpy", "torch", "pycuda", "tqdm", "ml_dtypes")
#: how many skipped lines of a log are printed (then a count)
MAX_WARNINGS = 5


def _fail(command: str, msg: str) -> int:
    sys.stderr.write(f"tecomp {command}: error: {_printable(msg)}\n")
    return 2


def _version_of(name: str) -> Optional[str]:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _size(n: int) -> str:
    for unit, k in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k and n % k == 0:
            return f"{n // k} {unit}"
    return f"{n} B"


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.4g}"


def _table(head: List[str], rows: List[List[str]]) -> str:
    return "\n".join(format_table(head, rows))


# ---------------------------------------------------------------------------------------
# info


def info() -> Dict[str, object]:
    """What ``python -m tecomp info`` prints, as a dict."""
    out: Dict[str, object] = {"tecomp": __version__,
                              "python": platform.python_version(),
                              "platform": platform.platform()}
    try:
        t = Target("llvm")
        out.update({
            "target": str(t), "cpu": cpu_name(), "llvm_cpu": t.cpu, "triple": t.triple,
            "isa": t.isa, "features": sorted(t.features),
            "vector": {"float32_lanes": t.lanes, "registers": t.vregs},
            "caches": {"l1_bytes": t.l1_bytes, "l2_bytes": t.l2_bytes,
                       "l3_bytes": t.l3_bytes},
        })
    except TecompError as e:   # (no llvmlite: no host target)
        out["target"] = None
        out["target_error"] = str(e)
    out["threads"] = threads.get_num_threads()
    out["cache_dir"] = str(cache_root())
    out["packages"] = {p: _version_of(p) for p in PACKAGES}
    return out


def _cmd_info(a) -> int:
    d = info()
    if a.json:
        print(json.dumps(d, indent=2))
        return 0
    rows = [("tecomp", d["tecomp"]), ("python", f"{d['python']} ({d['platform']})")]
    if d.get("target") is None:
        rows.append(("target", f"none: {d['target_error']}"))
    else:
        c = d["caches"]
        rows += [("target", d["target"]),
                 ("cpu", f"{d['cpu']} (LLVM: {d['llvm_cpu']}, {d['triple']})"),
                 ("vector", f"{d['vector']['float32_lanes']} float32 lanes, "
                            f"{d['vector']['registers']} registers"),
                 ("caches", f"L1d {_size(c['l1_bytes'])}, L2 {_size(c['l2_bytes'])}, "
                            f"L3 {_size(c['l3_bytes'])}"),
                 ("features", " ".join(d["features"]))]
    rows += [("threads", str(d["threads"])), ("cache dir", d["cache_dir"])]
    rows += [(p, v or "not installed") for p, v in d["packages"].items()]
    w = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k.ljust(w)}  {v}")
    return 0


def _cmd_calibrate(a) -> int:
    t = Target("llvm")
    costs = calibrate(t, rounds=a.rounds, save=not a.dry_run)
    if a.json:
        print(json.dumps(costs, indent=2, sort_keys=True))
    else:
        print(f"{t.cpu}: " + ", ".join(f"{k} {v}" for k, v in sorted(costs.items())))
        if not a.dry_run:
            print(f"kept in {cache_path(t)}")
    return 0


# ---------------------------------------------------------------------------------------
# tuning logs


def _read_log(command: str, path: str):
    """The ``(line, record)`` pairs of the log ``path``; the first lines that are not
    records are warnings on stderr.  TecompError when the file cannot be used or holds
    no record."""
    if not os.path.lexists(path):
        raise ArgumentError(f"the tuning log {display(path)!r} does not exist: give the path "
                            f"of a log tc.auto_schedule(..., log=...) wrote")
    pairs, skipped = records.scan_log(path)
    if not pairs and skipped:
        n, why, _ = skipped[0]
        raise ArgumentError(
            f"{display(path)!r} is not a tuning log: none of its {len(skipped)} lines is a "
            f"record (line {n}: {why}); give a log written by tc.auto_schedule(..., log=...)")
    for n, why, head in skipped[:MAX_WARNINGS]:
        _warn(command, f"{display(path)}:{n}: {why}; line skipped: {head!r}")
    if len(skipped) > MAX_WARNINGS:
        _warn(command, f"{len(skipped) - MAX_WARNINGS} more lines that are not records "
                       f"skipped")
    return pairs


def _warn(command: str, msg: str) -> None:
    sys.stderr.write(f"tecomp {command}: warning: {_printable(msg)}\n")


def _printable(text: str) -> str:
    """``text`` with every character that is not printable (a control character, a
    terminal escape, a bidirectional override) written as a Python escape: for messages
    that tecomp made (whose parts from a file are escaped already)."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _median(rec) -> Optional[float]:
    t = rec.get("times")
    return statistics.median(t) if rec.get("ok") and t else None


def _workload(rec) -> str:
    w = rec["workload"]
    h = w.get("hash")
    return display(h[:12]) if isinstance(h, str) else "?"


def _text(rec, key: str, limit: int = 40) -> str:
    v = rec["workload"].get(key) if key in ("target", "cpu") else rec.get(key)
    if v is None:
        return "-"
    s = display(v if isinstance(v, str) else json.dumps(v, sort_keys=True))
    return s if len(s) <= limit else s[:limit - 3] + "..."


def _cmd_show(a) -> int:
    pairs = _read_log("show", a.log)
    if a.workload:
        pairs = [(n, r) for n, r in pairs
                 if str(r["workload"].get("hash", "")).startswith(a.workload)]
    rows = []
    for n, r in pairs[:a.limit] if a.limit else pairs:
        m = _median(r)
        status = "ok" if m is not None else "failed: " + _text(r, "error", 60)
        rows.append([str(n), _workload(r), _text(r, "target"), _text(r, "search", 12),
                     _text(r, "trial", 8), "-" if m is None else _ms(m),
                     str(len(r.get("times") or [])), status])
    if not rows:
        print(f"{display(a.log)}: no records" + (f" of workload {display(a.workload)}"
                                                 if a.workload else ""))
        return 0
    print(_table(["line", "workload", "target", "search", "trial", "ms", "runs", "status"],
                 rows))
    if a.limit and len(pairs) > a.limit:
        print(f"({len(pairs) - a.limit} more records; --limit 0 shows all)")
    return 0


def best_per_workload(pairs) -> List[tuple]:
    """``(workload, records of it, its best (line, record) or None)`` for each workload
    of a log's ``(line, record)`` pairs, in order of first appearance; the best is the
    one ``tc.auto_schedule(log=...)`` replays first (:func:`records.rank`)."""
    groups: Dict[str, list] = {}
    for n, r in pairs:
        groups.setdefault(json.dumps(r["workload"], sort_keys=True), []).append((n, r))
    out = []
    for g in groups.values():
        ranked = records.rank(g)
        out.append((g[0][1]["workload"], g, ranked[0] if ranked else None))
    return out


def _cmd_tune(a) -> int:
    pairs = _read_log("tune", a.log)
    rows = []
    for w, g, best in best_per_workload(pairs):
        ok = sum(1 for _, r in g if _median(r) is not None)
        shapes = w.get("shapes")
        shapes = (",".join(f"{display(k)}={_text({'v': v}, 'v', 20)}" for k, v in shapes.items())
                  if isinstance(shapes, dict) else _text(w, "shapes"))
        rows.append([_workload(g[0][1]), _text(g[0][1], "target"), shapes or "-",
                     f"{ok}/{len(g)}",
                     "-" if best is None else _ms(_median(best[1])),
                     "-" if best is None else str(best[0]),
                     "-" if best is None else _text(best[1], "search", 12),
                     _text(g[0][1], "cpu", 80)])
    if not rows:
        print(f"{display(a.log)}: no records")
        return 0
    print(_table(["workload", "target", "shapes", "ok", "best ms", "line", "search", "cpu"],
                 rows))
    return 0


# ---------------------------------------------------------------------------------------
# bench


def _vars(pairs: Sequence[str]) -> Dict[str, float]:
    """``--var NAME=VALUE`` options as a dict (an int, or a float for a float scalar)."""
    out: Dict[str, float] = {}
    for p in pairs:
        k, eq, v = p.partition("=")
        try:
            out[k] = int(v) if v.strip().lstrip("+-").isdigit() else float(v)
        except ValueError:
            eq = ""
        if not eq or not k:
            raise ArgumentError(f"--var {display(p)!r} is not NAME=NUMBER (e.g. --var n=1024)")
    return out


def bench_arrays(mod, values: Dict[str, int], seed: int = 0) -> list:
    """The arguments of the loaded library ``mod`` for a timing: random inputs (floats in
    [0, 1); integers and booleans zero, valid as indices), zeroed outputs, shapes and
    scalars from ``values`` (name -> int)."""
    env = {}
    needed = []
    for p in mod.params:
        for v in ([p] if isinstance(p, Var) else [x for e in p.shape for x in _free(e)]):
            if v.name in values:
                env[v] = values[v.name]
            elif v not in needed:
                needed.append(v)
    if needed:
        names = ", ".join(display(v.name) for v in needed)
        raise ArgumentError(
            f"kernel {display(mod.name)} has symbolic extents or scalar parameters ({names}): "
            f"give each a value, e.g. " + " ".join(f"--var {display(v.name)}=64"
                                                   for v in needed))
    unknown = sorted(set(values) - {v.name for v in env})
    if unknown:
        raise ArgumentError(f"--var names {', '.join(display(k) for k in unknown)}, which "
                            f"kernel {display(mod.name)} does not have")
    written = {p["name"] for p in mod.metadata["params"]
               if p.get("kind") == "buffer" and p.get("written")}
    shapes = {}
    for p in mod.params:
        if isinstance(p, Buffer):
            shape = tuple(int(eval_host_expr(e, env)) for e in p.shape)
            if any(d < 0 for d in shape):
                raise ArgumentError(f"{display(p.name)} would have the shape {shape}: give "
                                    f"--var values that make every extent >= 0")
            shapes[p] = shape
    need = sum(math.prod(s) * _dt.nbytes(p.dtype) for p, s in shapes.items())
    have = _physical_memory()
    if have is not None and need > have // 2:
        raise ArgumentError(
            f"the arrays of kernel {display(mod.name)} would take {need} bytes with these --var "
            f"values, more than half of this machine's {have} bytes of memory: give smaller "
            f"--var values")
    rng = np.random.default_rng(seed)
    args = []
    for p in mod.params:
        if isinstance(p, Var):
            args.append(env[p])
            continue
        dt = _dt.numpy_dtype(p.dtype)
        if p.name in written or not _dt.is_float(p.dtype):
            args.append(np.zeros(shapes[p], dt))
        else:
            args.append(rng.random(shapes[p], dtype=np.float64).astype(dt))
    return args


def _physical_memory() -> Optional[int]:
    """This machine's memory in bytes, or None where the system does not say."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _free(e):
    return collect(e, lambda n: isinstance(n, Var))


def _cmd_bench(a) -> int:
    values = _vars(a.var)
    mod = load_module(a.library, verify=not a.no_verify)
    if isinstance(mod, CudaLibraryModule):
        raise ArgumentError(
            f"library '{display(a.library)}' holds GPU kernels, which take device arrays: "
            f"tecomp bench times CPU libraries; time it in Python with "
            f"tc.load_module(path).time_evaluator(...) on torch CUDA tensors or CuPy arrays")
    args = bench_arrays(mod, values, a.seed)
    res = mod.time_evaluator(number=a.number, repeat=a.repeat, min_repeat_ms=a.min_repeat_ms)(
        *args)
    shapes = ", ".join(f"{display(p.name)}: {x.dtype}{list(x.shape)}" if hasattr(x, "shape")
                       else f"{display(p.name)}={x}" for p, x in zip(mod.params, args))
    nbytes = sum(x.nbytes for x in args if hasattr(x, "nbytes"))
    print(f"{display(mod.name)}({shapes})")
    print(f"  median {_ms(res.median)} ms, min {_ms(res.min)} ms, max {_ms(res.max)} ms "
          f"({len(res.results)} repeats of {res.number} calls)")
    if res.median > 0 and math.isfinite(res.median):
        print(f"  {nbytes / res.median / 1e9:.4g} GB/s if each array is read or written "
              f"once ({nbytes} bytes a call)")
    return 0


# ---------------------------------------------------------------------------------------


def _at_least(lo: int):
    def check(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            v = lo - 1
        if v < lo:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer >= {lo}")
        return v
    return check


_positive = _at_least(1)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m tecomp", description="tecomp: the machine, tuning logs and exported "
        "libraries. Logs and libraries are checked before use; a file that cannot be used "
        "exits with status 2.")
    p.add_argument("--version", action="version", version=f"tecomp {__version__}")
    p.add_argument("-v", "--verbose", action="count", default=0,
                   help="log tecomp's work to stderr (-v: INFO, -vv: DEBUG)")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    s = sub.add_parser("info", help="this machine as tecomp sees it (target, features, "
                       "caches, threads, cache dir, package versions)")
    s.add_argument("--json", action="store_true", help="print it as JSON")
    s.set_defaults(run=_cmd_info)
    s = sub.add_parser("calibrate", help="measure this CPU's costs for the machine model "
                       "(FMA width, weight copies, split loads, GEMM loads) and keep them "
                       "in the cache dir (run it on a quiet machine)")
    s.add_argument("--rounds", type=_positive, default=5, help="rounds of the kernels (5)")
    s.add_argument("--dry-run", action="store_true", help="print the costs, keep nothing")
    s.add_argument("--json", action="store_true", help="print them as JSON")
    s.set_defaults(run=_cmd_calibrate)
    s = sub.add_parser("show", help="the records of a tuning log, as a table")
    s.add_argument("log", help="a tuning log (JSON lines written by tc.auto_schedule)")
    s.add_argument("--workload", metavar="HASH", default="",
                   help="only the records of workloads whose hash starts with HASH")
    s.add_argument("--limit", type=_at_least(0), default=50, metavar="N",
                   help="show at most N records (default 50; 0: all)")
    s.set_defaults(run=_cmd_show)
    s = sub.add_parser("tune", help="the best record of each workload in a tuning log")
    s.add_argument("log", help="a tuning log (JSON lines written by tc.auto_schedule)")
    s.set_defaults(run=_cmd_tune)
    s = sub.add_parser("bench", help="time the kernel of a library Module.export_library "
                       "wrote, on random inputs of the shapes its metadata declares")
    s.add_argument("library", help="the .so file (with its .sha256 sidecar beside it)")
    s.add_argument("--var", action="append", default=[], metavar="NAME=NUMBER",
                   help="the value of a symbolic extent or scalar parameter (repeatable)")
    s.add_argument("--number", type=_positive, default=10, help="calls per repeat (10)")
    s.add_argument("--repeat", type=_positive, default=5, help="repeats (5)")
    s.add_argument("--min-repeat-ms", type=float, default=50.0,
                   help="make each repeat last at least this long (50)")
    s.add_argument("--seed", type=int, default=0, help="the random inputs' seed (0)")
    s.add_argument("--no-verify", action="store_true",
                   help="load without the sha256 sidecar (a library you built yourself)")
    s.set_defaults(run=_cmd_bench)
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run ``python -m tecomp`` with ``argv`` (default ``sys.argv[1:]``); the exit
    status: 0, 2 for a usage error or a file that cannot be used."""
    a = parser().parse_args(argv)
    if a.verbose:
        import logging

        h = logging.StreamHandler(sys.stderr)
        h.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        lg = logging.getLogger("tecomp")
        lg.addHandler(h)
        lg.setLevel(logging.DEBUG if a.verbose > 1 else logging.INFO)
    try:
        return a.run(a)
    except TecompError as e:
        return _fail(a.command, str(e))
    except BrokenPipeError:   # (python -m tecomp show big.jsonl | head)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
