"""Pass-by-pass checking: run the reference interpreter on the IR before and after every
lowering pass, on the same small random inputs, and report the first pass that changes
a result (with both IRs printed and a diff).

    from tecomp.testing import check_passes
    func = check_passes(s, [A, B, C])          # the lowered PrimFunc, as tc.lower returns it
    check_passes(s, args, sizes={"n": 7})      # values of symbolic extents (default: small random)

A pass that changes a result raises :class:`PassCheckError`; its ``pass_name``, ``before``
and ``after`` (PrimFuncs) and ``detail`` say what changed.  It hooks into
``tecomp.lower.pipeline.run_passes(..., check=callback)``.
"""
from __future__ import annotations

import difflib
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Union

import numpy as np

from ..ir import dtype as _dt, interp
from ..ir.expr import Buffer, Var
from ..ir.functor import free_vars
from ..ir.interp import eval_expr
from ..ir.stmt import PrimFunc

if TYPE_CHECKING:
    from ..schedule.schedule import Schedule
    from ..te.tensor import Tensor
from ..lower import pipeline
from ..lower.pipeline import run_passes
from ..lower.schedule_ops import schedule_to_stmt
from ..target import as_target


class PassCheckError(AssertionError):
    """A lowering pass changed what the program computes (a tecomp bug)."""

    def __init__(self, pass_name: str, before, after, detail: str):
        self.pass_name = pass_name
        self.before = before
        self.after = after
        self.detail = detail
        b, a = str(before), str(after)
        diff = "\n".join(difflib.unified_diff(b.splitlines(), a.splitlines(), "before " + pass_name,
                                              "after " + pass_name, lineterm="", n=2))
        super().__init__(
            f"lowering pass `{pass_name}` changed the result (this is a tecomp bug):\n{detail}\n"
            f"---- IR before {pass_name} ----\n{b}\n---- IR after {pass_name} ----\n{a}\n"
            f"---- diff ----\n{diff}")


def _shape_env(func, sizes: Optional[dict], rng) -> Dict[Var, int]:
    """Values for the free variables of the buffer shapes and the scalar parameters."""
    env: Dict[Var, int] = {}
    byname = dict(sizes or {})
    for p in func.params:
        vs = free_vars(p) if isinstance(p, Var) else [v for e in p.shape for v in free_vars(e)]
        for v in vs:
            if v in env:
                continue
            if v.name in byname:
                env[v] = byname[v.name]
            elif _dt.is_float(v.dtype):
                env[v] = float(rng.uniform(-1, 1))
            elif _dt.is_bool(v.dtype):
                env[v] = bool(rng.integers(0, 2))
            else:
                env[v] = int(rng.integers(1, 8))
    return env


def make_args(func: PrimFunc, sizes: Optional[dict] = None, seed: int = 0) -> list:
    """Random arguments for ``func``: every buffer filled with random data (so an output
    element a pass forgets to write still differs), every scalar a small value.

    Parameters
    ----------
    func : PrimFunc
        A lowered function.
    sizes : dict, optional
        Values of symbolic extents (by name); others are drawn small.
    seed : int, optional
        The random seed.

    Returns
    -------
    list
        One numpy array or scalar per parameter of ``func``.
    """
    rng = np.random.default_rng(seed)
    env = _shape_env(func, sizes, rng)
    out = []
    for p in func.params:
        if isinstance(p, Var):
            out.append(env[p])
            continue
        shape = tuple(int(eval_expr(e, env)) for e in p.shape)
        dt = p.dtype
        if _dt.is_float(dt):
            a = rng.uniform(-1, 1, size=shape).astype(dt)
        elif _dt.is_bool(dt):
            a = rng.integers(0, 2, size=shape).astype(bool)
        elif _dt.is_uint(dt):
            a = rng.integers(0, 8, size=shape).astype(dt)
        else:
            a = rng.integers(-8, 9, size=shape).astype(dt)
        out.append(a)
    return out


def _copy(args):
    return [a.copy() if isinstance(a, np.ndarray) else a for a in args]


def _diff_results(func, r1, r2) -> Optional[str]:
    lines = []
    for p, a, b in zip(func.params, r1, r2):
        if not isinstance(p, Buffer):
            continue
        if _dt.is_float(p.dtype):
            same = np.isclose(a.astype(np.float64), b.astype(np.float64), rtol=1e-5, atol=1e-6,
                              equal_nan=True)
        else:
            same = a == b
        if not same.all():
            bad = np.argwhere(~same)
            lines.append(f"buffer {p.name}: {int((~same).sum())} of {same.size} elements differ")
            for ix in bad[:4]:
                t = tuple(int(x) for x in ix)
                lines.append(f"  {p.name}{list(t)}: before {a[t]!r}, after {b[t]!r}")
    return "\n".join(lines) if lines else None


class _Checker:
    """Compares the interpreter's results before and after each pass.

    GPU targets: until ``insert_barriers`` has run, a kernel that shares memory between
    threads *is* racy (adding the barriers is that pass's job), so the interpreter runs
    without race checks there (its thread order is deterministic, so the passes before
    can still be compared); ``insert_barriers`` itself is not compared (it may change
    what a racy program computed), but after it the interpreter must find no race.
    """

    def __init__(self, args, check_races: bool, target: str = "llvm"):
        self.args = args
        self.check_races = check_races
        self.gpu = as_target(target).is_gpu
        self.barriers_done = not self.gpu
        self.last = None  # (func, results or exception)
        self.passes_checked: List[str] = []

    def _run(self, func, races=None):
        if races is None:
            races = self.check_races and self.barriers_done
        a = _copy(self.args)
        try:
            interp.run(func, *a, check_races=races)
        except Exception as e:  # noqa: BLE001 - compared below
            return e
        return a

    def __call__(self, name, before, after):
        self.passes_checked.append(name)
        if self.gpu and name == "insert_barriers":
            self.barriers_done = True
            r1 = self._run(after)
            if isinstance(r1, Exception):
                raise PassCheckError(name, before, after,
                                     f"after `{name}` the interpreter raises {type(r1).__name__}: {r1}")
            self.last = (after, r1)
            return
        if self.last is None or self.last[0] is not before:
            self.last = (before, self._run(before))
        r0 = self.last[1]
        r1 = self._run(after)
        if isinstance(r0, Exception):
            if isinstance(r1, Exception):
                self.last = (after, r1)
                return
            # the IR before the first pass already fails: schedule_ops' output is wrong
            raise PassCheckError(
                "schedule_ops" if len(self.passes_checked) == 1 else name, before, after,
                f"the IR before `{name}` fails in the interpreter: {type(r0).__name__}: {r0}")
        if isinstance(r1, Exception):
            raise PassCheckError(name, before, after,
                                 f"after `{name}` the interpreter raises {type(r1).__name__}: {r1}")
        d = _diff_results(before, r0, r1)
        if d is not None:
            raise PassCheckError(name, before, after, d)
        self.last = (after, r1)


def check_func_passes(func: PrimFunc, target: str = "llvm", *, args: Optional[list] = None,
                      sizes: Optional[dict] = None, seed: int = 0, check_races: bool = True) -> PrimFunc:
    """Run the lowering passes on the PrimFunc ``func`` (the output of schedule_ops, or a
    hand-made one), checking each with the reference interpreter.

    Parameters
    ----------
    func : PrimFunc
        The function before the passes.
    target : str, optional
        The target whose passes run.
    args : list, optional
        The arguments the interpreter runs with (default: :func:`make_args`).
    sizes : dict, optional
        Values of symbolic extents for :func:`make_args`.
    seed : int, optional
        The seed for :func:`make_args`.
    check_races : bool, optional
        Also check parallel and GPU loops for races.

    Returns
    -------
    PrimFunc
        The final function.

    Raises
    ------
    PassCheckError
        Naming the first pass that changes a result, with both IRs.
    """
    if args is None:
        args = make_args(func, sizes, seed)
    chk = _Checker(args, check_races, target)
    out = run_passes(func, target, False, check=chk)
    return out


def check_passes(s: Schedule, args: Sequence[Union[Tensor, Var]], *, name: str = "main",
                 target: str = "llvm", sizes: Optional[dict] = None, seed: int = 0,
                 check_races: bool = True) -> PrimFunc:
    """Lower ``s`` like ``tc.lower(s, args)`` while running the reference interpreter
    before and after every lowering pass.

    Parameters
    ----------
    s : Schedule
        The schedule.
    args : sequence of Tensor or Var
        As for ``tc.lower``.
    name : str, optional
        The function's name.
    target : str, optional
        The target whose passes run.
    sizes : dict, optional
        Values of symbolic extents for the random arguments.
    seed : int, optional
        The seed of the random arguments.
    check_races : bool, optional
        Also check parallel and GPU loops for races.

    Returns
    -------
    PrimFunc
        The lowered function.

    Raises
    ------
    PassCheckError
        Naming the first pass that changes a result, with both IRs.

    Examples
    --------
    >>> import tecomp as tc
    >>> from tecomp.testing import check_passes
    >>> A = tc.placeholder((16,), name="A")
    >>> B = tc.compute((16,), lambda i: A[i] + 1.0, name="B")
    >>> s = tc.create_schedule(B.op)
    >>> xo, xi = s[B].split(B.op.axis[0], factor=4)
    >>> func = check_passes(s, [A, B])
    """
    state = {}

    def hook(pname, before, after):
        chk = state.get("chk")
        if chk is None:
            chk = state["chk"] = _Checker(make_args(before, sizes, seed), check_races, target)
        chk(pname, before, after)

    lower = pipeline.lower
    import inspect

    if "check" in inspect.signature(lower).parameters:
        return lower(s, args, name=name, target=target, check=hook)
    # fallback while lower() has no check= keyword: the same two steps it takes

    params, body, _ = schedule_to_stmt(s, list(args))
    func = PrimFunc(name, tuple(params), body, {"target": target})
    return pipeline.run_passes(func, target, False, check=hook)
