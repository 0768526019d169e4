"""Deeply nested expressions: the public entry points that walk the IR run again on a big
stack when Python's recursion limit stops them.

tecomp's passes (the visitors, the simplifier, the printer, the code generators, the
interpreter) are recursive Python: each level of an expression takes a few Python frames.
A TVM user's ``lambda i: sum(A[i, j] for j in range(5000))`` is a left-leaning chain of
5000 ``+``, deeper than Python's default recursion limit (1000 frames) lets them walk.

:func:`deep_entry` wraps the entry points (``tc.compute``, ``tc.create_schedule``, the
schedule primitives, ``tc.lower``, ``tc.build``, the lazily compiled variants of a CPU
kernel, ``str()`` of the IR, ``tc.gradient``, ``tc.auto_schedule``, the reference
interpreter).  An ordinary call runs as it is, in the caller's thread, at the cost of a
``try`` and two counter updates.  A call that raises ``RecursionError`` (or an error
caused by one) runs once more, from the start, in a helper thread with a stack of
:data:`STACK_BYTES` and the recursion limit raised to :data:`RECURSION_LIMIT`; the caller
waits for it and gets its result or its exception.  (An entry point whose first run
would change something before failing, such as a schedule primitive, measures the depth
first, without recursion, and goes to the helper at once.)  Expressions
:data:`SUPPORTED_DEPTH` levels deep compile this way; a deeper one raises
:class:`~tecomp.errors.ExprError` saying how deep it is and how to restructure it.

Why this cannot crash the process: Python 3.11+ keeps Python frames on the heap; the C
stack holds only what C code recursing through Python takes (hashing or printing a
nested object, a generator driven by ``tuple()``), at most about 600 bytes a level.  The
helper's stack gives each unit of the limit :data:`BYTES_PER_FRAME`, so the limit is
reached before its stack overflows.  The limit is one number for the whole process,
though, and other threads have ordinary stacks: so while it is raised no entry point
runs at the ordinary limit anywhere (they all go to helpers), and it is raised only once
the runs at the ordinary limit in other threads have ended; it is restored when the
last helper ends (unless someone else changed it meanwhile).  Code of the caller's own
that recurses deeply in another thread at that moment is the one thing left unguarded.
"""
from __future__ import annotations

import contextvars
import functools
import os
import sys
import threading
import weakref
from typing import Callable, Optional, Tuple

from ..errors import ExprError, TecompError
from .expr import Node, Range
from .functor import children as _children
from .stmt import PrimFunc

#: expression levels every entry point handles on the helper's stack (the tests check it)
SUPPORTED_DEPTH = 20_000
#: the recursion limit while a helper runs: the passes take at most 8 Python frames per
#: level of an expression (measured over sums, chains of min, and random trees of
#: + * min max select and casts); 25 leave a margin
RECURSION_LIMIT = SUPPORTED_DEPTH * 25
#: C stack per unit of the recursion limit on the helper thread
BYTES_PER_FRAME = 2048
#: the helper thread's stack (address space: only the pages it touches take memory)
STACK_BYTES = RECURSION_LIMIT * BYTES_PER_FRAME
#: how long raising the limit waits for the runs at the ordinary limit in other threads
#: (a run that waits for a lock the helper's caller holds would otherwise never end)
_DRAIN_SECONDS = 30.0

_TLS = threading.local()
_COND = threading.Condition()
_attempts = 0           # entry points running at the ordinary limit, in any thread
_raised = 0             # helpers running, or about to (the limit is raised for them)
_saved_limit = None     # the limit before the first of them
_set_limit = None       # the limit they set
_limit_up = False       # whether it is raised now
_raising = False        # whether a thread is raising it (it waits for the runs above)


def _reset_in_child() -> None:
    """After ``fork()``: the child has only the thread that forked (which may be a run at
    the ordinary limit, or a helper); the other threads' runs and locks are not there."""
    global _COND, _START_LOCK, _attempts, _raising
    _COND = threading.Condition()
    _START_LOCK = threading.Lock()
    here = getattr(_TLS, "active", False) and not getattr(_TLS, "helper", False)
    _attempts = 1 if here else 0
    _raising = False


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_in_child)


def _from_recursion(exc: BaseException) -> bool:
    """Whether ``exc`` is a RecursionError, or an error tecomp raised because of one (an
    InternalError or a raw error whose cause or context is one).  A TecompError is a
    deliberate verdict on the program and never counts."""
    e, n = exc, 0
    while e is not None and n < 50:
        if isinstance(e, RecursionError):
            return True
        if isinstance(e, TecompError):
            return False
        e, n = e.__cause__ or e.__context__, n + 1
    return False


def _raise_limit() -> int:
    """Raise the process's recursion limit for one more helper; return the limit."""
    global _raised, _saved_limit, _set_limit, _limit_up, _raising
    with _COND:
        _raised += 1            # from now on, entry points go to helpers
        while not _limit_up:
            if _raising:        # another thread is raising it
                _COND.wait()
                continue
            _raising = True
            try:
                _COND.wait_for(lambda: _attempts == 0, _DRAIN_SECONDS)
                _saved_limit = sys.getrecursionlimit()
                _set_limit = max(_saved_limit, RECURSION_LIMIT)
                if _set_limit != _saved_limit:
                    sys.setrecursionlimit(_set_limit)
                _limit_up = True
            finally:
                _raising = False
                _COND.notify_all()
        return _set_limit


def _restore_limit() -> None:
    global _raised, _limit_up
    with _COND:
        _raised -= 1
        if _raised == 0 and _limit_up:
            if sys.getrecursionlimit() == _set_limit != _saved_limit:
                sys.setrecursionlimit(_saved_limit)
            _limit_up = False


_START_LOCK = threading.Lock()


class _NoHelper(Exception):
    def __init__(self, why):
        super().__init__(f"tecomp could not start a thread with a {STACK_BYTES >> 20} MiB "
                         f"stack to walk it ({why})")


def run_on_big_stack(fn: Callable, *args, **kwargs):
    """``fn(*args, **kwargs)`` in a helper thread with a stack of :data:`STACK_BYTES` and
    the recursion limit raised (the caller's context variables go with it).  Returns
    ``(True, result)``, or ``(False, exc)`` when ``fn`` raised ``exc`` or no such thread
    could be started (``exc`` then says why)."""
    ctx = contextvars.copy_context()
    box: dict = {}

    def body():
        _TLS.active = _TLS.helper = True
        try:
            box["value"] = ctx.run(fn, *args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            box["error"] = exc

    try:
        limit = _raise_limit()
        t = threading.Thread(target=body, name="tecomp-deep", daemon=True)
        with _START_LOCK:   # the stack size is a process-wide setting: restored at once
            # (a caller that raised the limit above ours gets a stack to match)
            old = threading.stack_size(max(STACK_BYTES, limit * BYTES_PER_FRAME))
            try:
                t.start()
            except RuntimeError as exc:   # no address space that big (ulimit -v)
                return False, _NoHelper(exc)
            finally:
                threading.stack_size(old)
        t.join()
    finally:
        _restore_limit()
    if "error" in box:
        return False, box.pop("error")
    return True, box.get("value")


#: an entry point with ``ahead=True`` runs on the helper at once when the program it
#: is given is deeper than this (a first run would fail, and might have done half of it)
AHEAD_DEPTH = 200


def deep_call(fn, args, kwargs, describe, ahead: bool = False):
    """``fn(*args, **kwargs)`` as an entry point (see :func:`deep_entry`)."""
    global _attempts
    if getattr(_TLS, "active", False):
        return fn(*args, **kwargs)   # inside another entry point (or a helper)
    deep = False
    if ahead:
        try:
            deep = deepest(describe(*args, **kwargs)[1])[0] > AHEAD_DEPTH
        except TypeError:   # arguments fn does not take: its own call says so
            pass
    with _COND:
        here = not deep and not _raised
        if here:
            _attempts += 1
    if here:
        _TLS.active = True
        try:
            return fn(*args, **kwargs)
        except BaseException as exc:
            if not _from_recursion(exc):
                raise
        finally:
            _TLS.active = False
            with _COND:
                _attempts -= 1
                if not _attempts:
                    _COND.notify_all()
    ok, got = run_on_big_stack(fn, *args, **kwargs)
    if ok:
        return got
    if _from_recursion(got) or isinstance(got, _NoHelper):
        what, roots = describe(*args, **kwargs)
        raise too_deep(what, roots, got if isinstance(got, _NoHelper) else None) from None
    raise got


def deep_entry(describe: Callable[..., Tuple[str, object]], ahead: bool = False):
    """Decorator of a public entry point that walks the IR: see the module docstring.

    ``describe(*args, **kwargs)`` gives ``(what, roots)`` for the error raised when even
    the helper runs out of recursion: ``what`` names the call (``"tc.build"``), ``roots``
    are what it was given (tensors, a schedule, a PrimFunc, expressions), searched for
    the deepest expression.  ``ahead=True``, for an entry point that changes something
    before it is done (a schedule primitive, a tuning log, the interpreter's outputs):
    measure that depth first (without recursion; an operation's once) and go to the
    helper at once past :data:`AHEAD_DEPTH`."""
    def deco(fn):
        @functools.wraps(fn)
        def entry(*args, **kwargs):
            return deep_call(fn, args, kwargs, describe, ahead)
        return entry
    return deco


# -- how deep is it ---------------------------------------------------------------------

def node_depth(root) -> int:
    """The number of nodes on the longest path from ``root`` down (without recursion;
    shared subtrees are walked once)."""
    done = {}
    stack = [[root, iter(_children(root)), 0]]
    while stack:
        top = stack[-1]
        for c in top[1]:
            d = done.get(id(c))
            if d is None:
                stack.append([c, iter(_children(c)), 0])
                break
            if d > top[2]:
                top[2] = d
        else:
            stack.pop()
            d = top[2] + 1
            done[id(top[0])] = d
            if stack and d > stack[-1][2]:
                stack[-1][2] = d
    return done[id(root)]


_OP_DEPTH: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def op_depth(op) -> int:
    """The depth of the deepest expression of an operation (its bodies, shapes, ...);
    computed once per operation (they do not change)."""
    try:
        return _OP_DEPTH[op]
    except (KeyError, TypeError):
        pass
    d = 0
    for v in vars(op).values() if hasattr(op, "__dict__") else ():
        for x in (v if isinstance(v, (tuple, list)) else (v,)):
            if isinstance(x, Node):
                d = max(d, node_depth(x))
    try:
        _OP_DEPTH[op] = d
    except TypeError:
        pass
    return d


def deepest(roots) -> Tuple[int, Optional[str]]:
    """``(depth, where)``: the deepest expression reachable from ``roots`` (tensors,
    operations, schedules, PrimFuncs, IR nodes, or lists of them) and the name of the
    operation or function it is in (None when it is in neither).  A schedule's
    operations are its stages'; a tensor's, its own and its inputs'."""
    best, where = 0, None
    todo = [(roots, True)]
    seen = set()
    while todo:
        r, inputs = todo.pop()
        if r is None or isinstance(r, (str, bytes, int, float)) or id(r) in seen:
            continue
        seen.add(id(r))
        if isinstance(r, (list, tuple)):
            todo += ((x, inputs) for x in r)
            continue
        if isinstance(r, (Node, Range, PrimFunc)):
            d = node_depth(r)
            if d > best:
                best, where = d, r.name if isinstance(r, PrimFunc) else None
            continue
        try:
            stages = getattr(r, "stages", None)
            if stages is not None:                       # a schedule
                todo += ((getattr(st, "op", None), False) for st in stages)
                continue
            op = getattr(r, "op", None)
            if op is not None:                           # a tensor (or a stage)
                todo.append((op, inputs))
                continue
            if hasattr(r, "_outs"):                      # an operation
                d = op_depth(r)
                if d > best:
                    best, where = d, getattr(r, "name", None)
                if inputs:
                    todo += ((t, True) for t in getattr(r, "input_tensors", ()) or ())
        except Exception:  # noqa: BLE001 - something that is not tecomp's: no depth
            continue
    return best, where


def too_deep(what: str, roots, no_helper=None) -> ExprError:
    """The error of an entry point ``what`` that ran out of recursion on the helper (or
    could not start one: ``no_helper``)."""
    depth, where = deepest(roots)
    found = (f"the deepest expression{f' (in {where})' if where else ''} is {depth:,} "
             f"levels deep" if depth else "the program nests too deeply")
    limit = (f"and {no_helper}" if no_helper is not None else
             f"more than tecomp's passes can walk (about {SUPPORTED_DEPTH:,} levels; "
             f"Python's recursion limit)")
    return ExprError(
        f"{what}: {found}, {limit}. Restructure it: a sum, "
        f"product, min or max over many terms is a reduction (k = tc.reduce_axis((0, n)); "
        f"tc.sum(A[i, k], axis=k)), or build the chain as a balanced tree (combine pairs, "
        f"then pairs of pairs), which is also a shorter dependency chain for the CPU")
