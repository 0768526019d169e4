"""Timing a compiled kernel: ``f.time_evaluator(...)`` as TVM users know it.

Every compiled module (``llvm``, ``cuda``, ``cuda-emu``) has
``f.time_evaluator(number=10, repeat=3, min_repeat_ms=0)``; it returns a callable that
takes the same arguments as ``f`` and returns a :class:`TimeResult`:

* one warm-up call (the first call of a module may compile a layout variant);
* ``repeat`` repetitions of ``number`` calls each, timed with ``time.perf_counter``
  with Python's garbage collector off (:func:`time_calls`, the timing the
  auto-scheduler's measurements use too);
* ``min_repeat_ms > 0`` raises ``number`` until one repetition lasts at least that
  long (as in TVM).

``TimeResult.results`` holds each repetition's mean seconds per call, ``mean`` and
``median`` summarise them.
"""
from __future__ import annotations

import gc
import math
import numbers
import statistics
import time
from typing import Callable, List, Optional, Sequence

from ..errors import ArgumentError
from .device import Device

__all__ = ["Timed", "TimeResult", "calls_per_repeat", "time_calls", "time_evaluator"]


def calls_per_repeat(f: Callable, args: Sequence, number: int,
                     min_repeat_seconds: float) -> int:
    """The number of calls of ``f(*args)`` (at least ``number``) that one repetition
    needs to last ``min_repeat_seconds``: the count is raised (by doubling, or by 10x
    while a repetition is far too short) until a run lasts a fifth of it, then scaled."""
    n = max(1, number)
    if min_repeat_seconds <= 0:
        return n
    while True:
        t = _timed(f, args, n)
        if t >= min_repeat_seconds / 5 or n >= 10 ** 7:
            return max(n, math.ceil(n * min_repeat_seconds / t)) if t > 0 else n
        n *= 2 if t * 2 >= min_repeat_seconds / 5 else 10


def time_calls(f: Callable, args: Sequence, number: int, repeat: int) -> List[float]:
    """Seconds per call of ``f(*args)``: ``repeat`` repetitions of ``number`` calls, each
    repetition's mean.  The caller decides about the garbage collector
    (:func:`time_evaluator` and the auto-scheduler's measurements turn it off)."""
    return [_timed(f, args, number) / number for _ in range(repeat)]


def _timed(f, args, n: int) -> float:
    clock = time.perf_counter
    t0 = clock()
    for _ in range(n):
        f(*args)
    return clock() - t0


class TimeResult:
    """What :func:`time_evaluator` measured: ``results`` (seconds per call, one per
    repetition), ``mean``, ``median``, ``std``, ``min``, ``max`` and ``number`` (calls
    per repetition)."""

    __slots__ = ("results", "number")

    def __init__(self, results: Sequence[float], number: int):
        self.results = tuple(float(r) for r in results)
        self.number = number

    @property
    def mean(self) -> float:
        return statistics.fmean(self.results)

    @property
    def median(self) -> float:
        return statistics.median(self.results)

    @property
    def std(self) -> float:
        return statistics.pstdev(self.results) if len(self.results) > 1 else 0.0

    @property
    def min(self) -> float:
        return min(self.results)

    @property
    def max(self) -> float:
        return max(self.results)

    def __repr__(self):
        ms = 1e3
        return (f"TimeResult(median={self.median * ms:.4g} ms, mean={self.mean * ms:.4g} ms, "
                f"min={self.min * ms:.4g} ms, max={self.max * ms:.4g} ms, "
                f"repeat={len(self.results)}, number={self.number})")


def _count(name: str, v, lo: int, owner: str) -> int:
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or int(v) < lo:
        raise ArgumentError(f"{owner}.time_evaluator: {name} must be an integer >= {lo}, "
                            f"got {v!r}")
    return int(v)


def time_evaluator(f: Callable, owner: str, args: tuple, number=10, repeat=3,
                   min_repeat_ms=0, warmup: int = 1,
                   device_type: int = 1) -> Callable[..., TimeResult]:
    """The evaluator of ``f`` (see the module docstring); ``owner`` names ``f`` in
    messages, ``args`` are the positional arguments the method was given: none, or
    TVM's ``func_name, dev`` where they name this function (``owner``) and its device
    (``device_type``: 1 the CPU, 2 CUDA GPU 0); anything else is refused."""
    if args:
        _tvm_args(owner, args, device_type)
    number = _count("number", number, 1, owner)
    repeat = _count("repeat", repeat, 1, owner)
    warmup = _count("warmup", warmup, 0, owner)
    if isinstance(min_repeat_ms, bool) or not isinstance(min_repeat_ms, numbers.Real) \
            or not min_repeat_ms >= 0 or math.isinf(min_repeat_ms):
        raise ArgumentError(f"{owner}.time_evaluator: min_repeat_ms must be a finite number "
                            f">= 0, got {min_repeat_ms!r}")

    def evaluate(*arrays) -> TimeResult:
        for _ in range(warmup):
            f(*arrays)  # also checks the arguments: a bad call raises here, untimed
        was = gc.isenabled()
        gc.disable()
        try:
            n = calls_per_repeat(f, arrays, number, min_repeat_ms / 1e3)
            results = time_calls(f, arrays, n, repeat)
        finally:
            if was:
                gc.enable()
        return TimeResult(results, n)

    return evaluate


def _tvm_args(owner: str, args: tuple, device_type: int) -> None:
    """Accept TVM's ``time_evaluator(func_name, dev)`` where it means this function on its
    own device; refuse anything else, naming tecomp's spelling."""
    spelling = (f"{owner}.time_evaluator takes keyword arguments only (a tecomp module "
                f"is one function on one device; TVM's func_name and dev are not needed): "
                f"call f.time_evaluator(number=10, repeat=3, min_repeat_ms=0)(*arrays)")
    if len(args) != 2:
        raise ArgumentError(spelling)
    name, dev = args
    if name != owner:
        raise ArgumentError(f"time_evaluator({name!r:.60}, ...): this module's function is "
                            f"{owner!r} (f.entry_name); {spelling}")
    want = Device(device_type, 0)
    if not isinstance(dev, Device) or dev != want:
        raise ArgumentError(f"time_evaluator(..., {dev!r:.60}): this module runs on "
                            f"tc.{want!r}; {spelling}")


class Timed:
    """Mixin of every compiled module class: ``f.time_evaluator(...)``."""

    __slots__ = ()

    def time_evaluator(self, *args, number: int = 10, repeat: int = 3, min_repeat_ms: float = 0,
                       warmup: int = 1):
        """A callable that times this kernel on the arrays it is given and returns a
        :class:`TimeResult` (``.mean``, ``.median``, ``.results`` in seconds), as TVM's
        ``time_evaluator``: ``repeat`` repetitions of ``number`` calls after ``warmup``
        calls (see :mod:`tecomp.runtime.timing`)."""
        return time_evaluator(self, self.entry_name, args, number, repeat, min_repeat_ms,
                              warmup, self._device_type())

    @property
    def entry_name(self) -> str:
        """The compiled function's name (``tc.build(..., name=)``; TVM's
        ``Module.entry_name``)."""
        return getattr(self, "name", None) or getattr(getattr(self, "func", None), "name",
                                                      "module")

    def _device_type(self) -> int:
        """DLPack's code of the device the module runs on: 1, the CPU (the CUDA modules
        say 2)."""
        return 1

    # A module is compiled code with its call caches: ``copy.copy`` and ``copy.deepcopy``
    # give the module itself, as they give a function itself (a model holding one can be
    # deep-copied; the copy calls the same kernels, which keep no state between calls
    # that a caller sees).  Pickling would need the code: refused, saying how.
    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def __reduce_ex__(self, protocol):
        how = ("write it with f.export_library(path) and load it there with "
               "tc.load_module(path), or build it again there"
               if hasattr(self, "export_library") else "build it again there")
        raise ArgumentError(
            f"module {self.entry_name} cannot be pickled (its kernels are machine code "
            f"loaded in this process; pickle.dumps, torch.save and multiprocessing's "
            f"arguments pickle): to use it in another process, {how}")
