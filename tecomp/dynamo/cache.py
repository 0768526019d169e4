"""The kernels of the ``torch.compile`` backend, cached in this process and on disk.

A region's key is the sha256 of what determines its kernel: its operators and their
arguments in order (nodes named by position in the region, not by their names in the
graph, so the twelve identical layers of a BERT share one kernel), the shapes, dtypes
and strides of its inputs (and the layouts its constant weights are packed in), which
nodes it returns, the target, the auto-scheduler's trials and log, and the source of
the tecomp that compiles it.  A region of a graph
with symbolic sizes (:mod:`tecomp.dynamo.symbolic`) is keyed by its symbolic signature
instead -- its inputs' shapes as expressions of the symbols, renamed in the order the
region meets them, without strides (the kernel reads any) --, so that one kernel, built
with ``tc.var`` extents, serves every size; a region that cannot be expressed so is keyed
and built per size, as a static one, said once in the log.  (In such a graph a static
region's key has no strides either: its input may be a view of a tensor of symbolic
size, BERT's pooler reading the first token.)

On disk the kernels are shared libraries (``Module.export_library``) under
``$TECOMP_CACHE_DIR/dynamo/`` (see :func:`tecomp.runtime.libfiles.cache_root`; a private
directory), each with its sha256 sidecar, loaded by ``tc.load_module`` with all its
checks: a second process builds nothing that the first built.  A library that cannot be
loaded (damaged, for another CPU) is built again and replaced; one that cannot be
written (no C compiler to link with) only stays in memory, said once in the log.
Libraries are written by a background thread (exporting compiles every call variant of
a kernel: about twice the time of building it), which the process waits for when it
exits (:func:`flush` waits for it now).
"""
from __future__ import annotations

import collections
import hashlib
import logging
import os
import threading
from pathlib import Path
from typing import Dict, Optional

import torch

from ..strategy import schedule_backward
from ..autoschedule import auto_schedule
from ..build import build
from ..errors import InternalError, LoadError, TecompError
from .. import threads as _threads
from ..runtime.aot import load_module
from ..runtime.libfiles import cache_root, private_dir
from .lowering import bound_args, lower_region
from .symbolic import NotSymbolic
from .lowering_nn import GRADIENT_OPS

log = logging.getLogger("tecomp.dynamo")

_MEMORY: Dict[str, object] = {}
_LOCK = threading.Lock()
_SOURCE: Optional[str] = None
_WARNED = set()
#: symbolic keys whose kernel could not be built with symbolic extents -> why
_NOT_SYMBOLIC: Dict[str, str] = {}

#: counts of this process's region kernels by where they came from (for tests and logs)
STATS = {"built": 0, "disk": 0, "memory": 0, "failed": 0}

#: whether the kernels loaded from the disk cache run their parallel loops on the
#: process's first thread pool (:func:`tecomp.threads.share_pool`) instead of a pool of
#: their own each (every library carries one), as the process that built them ran them
#: on the JIT's one pool.  On: ResNet-50 on 2 threads of the quiet Zen 5 VM, two runs
#: (``benchmarks/torch_compile.py --ab shared-pools`` at 730ca5b, medians of 7), batch 1:
#: 26.4 against 29.0 ms and 27.8 against 29.1; batch 8: 176.1 against 179.7 and 198.8
#: against 198.6 (``--ab own-pools`` is the comparison since).
#: (Under load, on one pool ResNet-50 at batch 1 ran slower: median 81.8 against 62.8 ms.)
SHARE_POOLS = True


def source_digest() -> str:
    """The sha256 of tecomp's Python sources (a kernel built by other code is not reused)."""
    global _SOURCE
    if _SOURCE is None:
        root = Path(__file__).resolve().parent.parent
        h = hashlib.sha256()
        for p in sorted(root.rglob("*.py")):
            h.update(str(p.relative_to(root)).encode())
            h.update(p.read_bytes())
        _SOURCE = h.hexdigest()
    return _SOURCE


def _describe(a, local) -> str:
    if isinstance(a, torch.fx.Node):
        return local.get(a, "?")
    if isinstance(a, (list, tuple)):
        return "[" + ",".join(_describe(x, local) for x in a) + "]"
    if isinstance(a, dict):
        return "{" + ",".join(f"{k}:{_describe(v, local)}" for k, v in sorted(a.items())) + "}"
    return repr(a)


def region_key(region, vals, options, symbolic: bool = False, strides: bool = True) -> str:
    """The sha256 that names a region's kernel (see the module docstring); ``symbolic``:
    ``vals`` are a symbolic region's (:class:`~tecomp.dynamo.symbolic.SymMeta`);
    ``strides``: whether the inputs' strides are part of it (not in a graph of symbolic
    sizes, where a static region's input may be a view of a tensor of symbolic size: its
    strides change with the size, the kernel, which reads any, does not)."""
    local = {}
    parts = [source_digest(), str(options.target), f"trials={options.trials}",
             f"log={options.log}"]
    if symbolic:
        parts.append("symbolic")
    packs = region.packs or (None,) * len(region.inputs)
    for k, (n, pk) in enumerate(zip(region.inputs, packs)):
        local[n] = f"in{k}"
        v = vals[n]
        layout = "" if symbolic or not strides else tuple(v.stride())
        parts.append(f"in{k}:{v.dtype}{tuple(v.shape)}{layout}" +
                     (f" packed {pk}" if pk is not None else ""))
    for k, n in enumerate(region.nodes):
        local[n] = f"%{k}"
        args = _describe(region_value(n, vals, local), local)
        parts.append(f"%{k}={n.target}({args})")
    parts.append("out:" + ",".join(local[n] for n in region.outputs))
    if symbolic:  # the outputs' shapes (an extent no input has)
        parts.append("shapes:" + ",".join(repr(vals[n]) for n in region.outputs))
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def region_value(n, vals, local):
    """A node's arguments with the Python values of nodes outside the region (the
    integers of a specialised shape) put in."""
    return bound_args(n, vals, local)


def out_spec(v, gaps: bool = False) -> tuple:
    """(shape, strides, dtype) of the tensor a region's kernel writes output ``v`` to:
    ``v``'s own strides where they lay its elements out densely without overlap, else
    row-major ones -- eager PyTorch can return a broadcast view (an ``expand``, strides
    0) or a strided slice where the kernel writes every element once.  ``gaps``: keep
    strides with gaps between the elements too (only overlap is refused), for a tensor
    that eager nodes read, whose own results' layouts (and so whether a later ``view``
    of them is legal) follow it."""
    shape, strides = tuple(int(e) for e in v.shape), tuple(int(e) for e in v.stride())
    step = 1
    for e, st in sorted(zip(shape, strides), key=lambda p: p[1]):
        if e != 1:
            if st < step or (st != step and not gaps):  # overlap (or a gap)
                strides = tuple(torch.empty(shape, device="meta").stride())
                break
            step = st * e
    return shape, strides, v.dtype


def compile_region(region, vals, options, sym=None) -> Optional[Exception]:
    """Give ``region`` its kernel: from memory, from disk, or built (and saved); for a
    region that cannot be compiled, ``module`` stays None and the error is returned.
    ``sym``: the graph's :class:`~tecomp.dynamo.symbolic.SymbolicGraph` where its sizes
    are symbolic (the kernel is then built for every size where it can be)."""
    region.out_specs = [out_spec(vals[n]) for n in region.outputs]
    if sym is not None and _compile_symbolic(region, options, sym):
        return None
    key = region_key(region, vals, options, strides=sym is None)
    return _compile(region, key, options, lambda: lower_region(region, vals))


def _compile_symbolic(region, options, sym) -> bool:
    """Give ``region`` its kernel with symbolic extents (True), or say why it is
    specialised per size instead (False: it has no symbolic size, or cannot be
    expressed or built with symbolic extents -- logged once per kernel)."""
    try:
        got = sym.region(region)
    except NotSymbolic as e:
        _log_specialised(region, None, str(e))
        return False
    if got is None:
        return False  # nothing symbolic: a static kernel
    svals, symbols = got
    try:
        key = region_key(region, svals, options, symbolic=True)
        scalars = sym.scalars(region, svals, symbols)
    except NotSymbolic as e:
        _log_specialised(region, None, str(e))
        return False
    if key in _NOT_SYMBOLIC:
        return False

    def lower():
        ins, outs = lower_region(region, svals, ranges=symbols.ranges)
        return ins, outs, [v for v, _ in scalars]
    err = _compile(region, key, options, lower)
    if err is None:
        region.scalars = [k for _, k in scalars]
        return True
    why = f"{type(err).__name__}: {str(err)[:300]}"
    if isinstance(err, InternalError) and isinstance(err.__cause__, NotSymbolic):
        why = str(err.__cause__)
    _log_specialised(region, key, why)
    return False


def _log_specialised(region, key, why) -> None:
    ops = " ".join(dict.fromkeys(str(n.target).replace("aten.", "") for n in region.nodes
                                 if isinstance(n.target, torch._ops.OpOverload)))
    with _LOCK:  # once per kernel (or, where it has no symbolic key, per operators and why)
        seen = key if key is not None else f"{ops}\n{why}"
        if seen in _NOT_SYMBOLIC:
            return
        _NOT_SYMBOLIC[seen] = why
    log.info("tecomp.dynamo: a kernel (%s) is built for each size, not once with symbolic "
             "extents: %s", ops[:200], why)


def _compile(region, key, options, lower) -> Optional[Exception]:
    """``region``'s kernel of ``key`` from memory, disk, or built from ``lower()`` (its
    placeholders and outputs)."""
    region.key = key
    with _LOCK:
        mod = _MEMORY.get(key)
    if mod is not None:
        STATS["memory"] += 1
        region.module, region.origin = mod, "memory"
        return None
    path = _path(key) if options.cache else None
    if path is not None and path.exists():
        try:
            mod = load_module(path)
            if getattr(mod, "name", None) != _kernel_name(key):
                # a library with a valid sidecar that holds another kernel (a file copied
                # or renamed over this one): its shapes may even match this region's
                raise LoadError(f"library '{path}' holds kernel {str(mod.name)[:60]!r}, "
                                f"not {_kernel_name(key)!r}")
            STATS["disk"] += 1
            region.origin = "disk"
            if SHARE_POOLS:
                _threads.share_pool(getattr(getattr(mod, "_compiler", None), "lib", None))
        except TecompError as e:
            log.info("tecomp.dynamo: cached kernel %s not loaded (%s): building it again",
                     path, e)
            mod = None
    if mod is None:
        try:
            ins, outs, *extra = lower()
            args = list(ins) + list(outs)
            if options.trials == 0 and any(n.target in GRADIENT_OPS for n in region.nodes):
                # computes from tc.gradient: the backward scheduler gives the convolution
                # gradients their templates (the auto-scheduler does not know them)
                s = schedule_backward(outs, target=options.target)
            else:
                s = auto_schedule(args, target=options.target, trials=options.trials,
                                  log=options.log, progress=False)
            mod = build(s, args + (extra[0] if extra else []), target=options.target,
                        name=_kernel_name(key))
        except (TecompError, InternalError) as e:
            return e
        except NotSymbolic as e:
            err = InternalError(f"tecomp.dynamo: {e}")
            err.__cause__ = e
            return err
        except Exception as e:  # noqa: BLE001  (any other is a bug: the kernel runs eagerly)
            return InternalError(f"tecomp.dynamo: compiling a kernel raised "
                                 f"{type(e).__name__}: {e}")
        STATS["built"] += 1
        region.origin = "built"
        if path is not None:
            _save_later(mod, path)
    with _LOCK:
        _MEMORY[key] = mod
    region.module = mod
    return None


def _kernel_name(key: str) -> str:
    """The name of the kernel of ``key`` (which its library on disk must carry)."""
    return f"tecomp_dynamo_{key[:16]}"


def log_failure(region, e) -> None:
    """Say that ``region`` runs eagerly because compiling it raised ``e``."""
    ops = sorted({str(n.target) for n in region.nodes
                  if isinstance(n.target, torch._ops.OpOverload)})
    log.warning("tecomp.dynamo: a region of %d node%s (%s) could not be compiled and runs "
                "eagerly%s: %s: %s", len(region.nodes), "s" if len(region.nodes) != 1 else "",
                ", ".join(ops)[:300],
                " (a tecomp bug: please report it)" if isinstance(e, InternalError) else "",
                type(e).__name__, str(e)[:500])
    STATS["failed"] += 1


def _path(key: str) -> Optional[Path]:
    try:
        d = private_dir(cache_root() / "dynamo", "the torch.compile kernel cache", TecompError)
    except TecompError as e:
        _warn_once("dir", "tecomp.dynamo: kernels are not cached on disk: %s", e)
        return None
    return d / f"{key}.so"


_PENDING: collections.deque = collections.deque()
_WRITER: Optional[threading.Thread] = None


def _save_later(mod, path: Path) -> None:
    """Write ``mod`` to ``path`` in a background thread (exporting compiles every call
    variant of the kernel, twice the time of building it): the first call of a model
    does not wait for it.  The thread is not a daemon: the process writes what it built
    before it exits."""
    global _WRITER
    with _LOCK:
        _PENDING.append((mod, path))
        if _WRITER is None:
            _WRITER = threading.Thread(target=_write_pending, name="tecomp-dynamo-cache")
            _WRITER.start()


def _write_pending() -> None:
    global _WRITER
    ended = False
    try:
        while True:
            with _LOCK:
                if not _PENDING:
                    _WRITER = None
                    ended = True
                    return
                mod, path = _PENDING.popleft()
            try:
                _save(mod, path)
            except Exception as e:  # noqa: BLE001  (a kernel not cached is not an error)
                _warn_once("save", "tecomp.dynamo: kernels are not cached on disk: %s: %s",
                           type(e).__name__, e)
    finally:
        if not ended:
            # the thread ends on a BaseException (a SystemExit a library raised): a writer
            # left registered made flush() (and every fork) join the dead thread forever,
            # and was never replaced; the next kernel built starts a new one (which writes
            # those still pending too)
            with _LOCK:
                _WRITER = None


def flush() -> None:
    """Wait until the kernels this process built are written to the disk cache."""
    while True:
        with _LOCK:
            w = _WRITER
        if w is None or w is threading.current_thread():
            return
        w.join()


# A process forked while the writer compiles (the auto-scheduler's measuring workers,
# multiprocessing's "fork") would inherit LLVM's lock held by a thread that does not
# exist in the child: the fork waits for the writer first.
if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=flush)


def _save(mod, path: Path) -> None:
    try:
        mod.export_library(os.fspath(path))
    except TecompError as e:
        _warn_once("save", "tecomp.dynamo: kernels are not cached on disk: %s", e)


def _warn_once(what, msg, *args):
    if what not in _WARNED:
        _WARNED.add(what)
        log.warning(msg, *args)


def clear_memory() -> None:
    """Forget the kernels of this process (the disk cache stays), and which could not be
    built with symbolic extents."""
    with _LOCK:
        _MEMORY.clear()
        _NOT_SYMBOLIC.clear()
