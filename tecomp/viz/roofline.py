"""``tc.roofline``: where a compiled kernel stands against this machine's roofs.

The roofline model bounds a kernel's speed by ``min(peak GFLOP/s, intensity x peak
GB/s)``, its arithmetic intensity being the floating-point operations it executes per
byte it must move.  :func:`roofline` times the kernel, counts both from its loop IR,
measures the machine's two roofs (:func:`tecomp.viz.peaks.host_peaks`) and returns a
:class:`Roofline`, which prints the numbers and plots the picture.
"""
from __future__ import annotations

import math
import numbers
import os
from typing import TYPE_CHECKING, Optional, Sequence

import numpy as np

from ..errors import ArgumentError
from ..ir import dtype as _dt
from ..ir.analysis import count_flops, shape_env
from ..ir.expr import Buffer
from ..ir.functor import collect
from ..ir.stmt import For
from ..target import as_target, cpu_name
from ..threads import get_num_threads
from . import _plot
from .peaks import host_peaks

if TYPE_CHECKING:
    from ..runtime.module import Module

__all__ = ["Roofline", "roofline", "plot_rooflines"]


class Roofline:
    """A kernel against the roofs (what :func:`roofline` returns).

    Attributes: ``name``; ``seconds`` (the median time of one call); ``flops`` (the
    floating-point operations of one call) and ``flops_exact`` (False: an upper bound,
    see :mod:`tecomp.ir.analysis`); ``bytes`` (the bytes one call must move: each
    argument read or written once); ``threads`` (the threads it ran on);
    ``peak_gflops`` and ``peak_gbps`` (the roofs) and ``peaks`` (where they come from:
    ``"measured"`` or ``"given"``); ``cpu``.  Derived: ``gflops``, ``gbps``,
    ``intensity`` (FLOPs per byte), ``ridge`` (the intensity where the roofs meet),
    ``bound`` (``"memory"`` or ``"compute"``), ``roof_gflops`` (the roof above the
    kernel) and ``fraction`` (``gflops / roof_gflops``).

    A kernel whose arguments fit in the caches can run above the memory roof (its
    bytes came from a cache between calls, not from memory): its fraction is then
    above 1.
    """

    def __init__(self, name: str, seconds: float, flops: float, nbytes: float, threads: int,
                 peak_gflops: float, peak_gbps: float, *, flops_exact: bool = True,
                 peaks: str = "measured", cpu: str = ""):
        self.name = name
        self.seconds = float(seconds)
        self.flops = flops
        self.flops_exact = flops_exact
        self.bytes = nbytes
        self.threads = threads
        self.peak_gflops = float(peak_gflops)
        self.peak_gbps = float(peak_gbps)
        self.peaks = peaks
        self.cpu = cpu

    @property
    def gflops(self) -> float:
        """Achieved GFLOP/s: ``flops / seconds / 1e9``."""
        return self.flops / self.seconds / 1e9

    @property
    def gbps(self) -> float:
        """Achieved GB/s of the bytes it must move: ``bytes / seconds / 1e9``."""
        return self.bytes / self.seconds / 1e9

    @property
    def intensity(self) -> float:
        """Arithmetic intensity: ``flops / bytes`` (FLOPs per byte)."""
        return self.flops / self.bytes

    @property
    def ridge(self) -> float:
        """The intensity where the memory roof meets the compute roof."""
        return self.peak_gflops / self.peak_gbps

    @property
    def bound(self) -> str:
        """``"memory"`` below the ridge, else ``"compute"``."""
        return "memory" if self.intensity < self.ridge else "compute"

    @property
    def roof_gflops(self) -> float:
        """The attainable GFLOP/s at this intensity: ``min(peak, intensity x GB/s)``."""
        return min(self.peak_gflops, self.intensity * self.peak_gbps)

    @property
    def fraction(self) -> float:
        """Achieved over attainable GFLOP/s."""
        return self.gflops / self.roof_gflops

    def __repr__(self):
        upper = "" if self.flops_exact else " (upper bound)"
        return (f"Roofline({self.name}: {self.seconds * 1e3:.4g} ms, "
                f"{self.gflops:.4g} GFLOP/s, {self.gbps:.4g} GB/s, "
                f"intensity {self.intensity:.3g} FLOP/B{upper}; {self.bound}-bound, "
                f"{self.fraction:.0%} of the roof {self.roof_gflops:.4g} GFLOP/s; "
                f"peaks {self.peak_gflops:.4g} GFLOP/s, {self.peak_gbps:.4g} GB/s "
                f"({self.peaks}, {self.threads} thread{'s' if self.threads != 1 else ''}))")

    def plot(self, path, *others: "Roofline", title: Optional[str] = None) -> str:
        """Draw the roofline with this kernel (and ``others``) on it into ``path`` (.png,
        .svg or .pdf, by its suffix); returns the path.  Needs matplotlib."""
        return plot_rooflines([self, *others], path, title=title)


def _number(v, what: str, owner: str = "tc.roofline") -> float:
    if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v) \
            or not v > 0:
        raise ArgumentError(f"{owner}: {what} must be a finite number > 0, got {v!r:.80}")
    return float(v)


def _argument_bytes(func, args) -> int:
    """Bytes of the arguments: each buffer parameter's elements (the shapes of the
    arrays given) times its element size."""
    total = 0
    for p, a in zip(func.params, args):
        if isinstance(p, Buffer):
            elem = max(1, _dt.bits(p.dtype) // 8)
            total += int(np.prod(np.shape(a), dtype=np.int64)) * elem
    return total


def roofline(f: "Module", args: Sequence, *, flops: Optional[float] = None,
             bytes: Optional[float] = None, peak_gflops: Optional[float] = None,
             peak_gbps: Optional[float] = None, number: int = 10, repeat: int = 3,
             min_repeat_ms: float = 20, name: Optional[str] = None) -> Roofline:
    """Time the compiled kernel ``f`` on ``args`` and place it against this machine's
    roofs.

    Parameters
    ----------
    f : Module
        A kernel compiled by ``tc.build`` (for ``llvm``: its roofs are this CPU's).
    args : list or tuple
        The arrays (and scalars) ``f`` is called with, as for ``f(*args)``.
    flops : float, optional
        The floating-point operations of one call.  Default: counted from ``f``'s loop
        IR (what it executes: padding included; see :mod:`tecomp.ir.analysis`).
    bytes : float, optional
        The bytes one call must move.  Default: every argument once (its inputs read
        and its outputs written once: a lower bound on the memory traffic, so the
        intensity is an upper bound).
    peak_gflops, peak_gbps : float, optional
        The roofs.  Default: measured here on the threads ``f`` runs on
        (:func:`tecomp.viz.host_peaks`: once per process).
    number, repeat, min_repeat_ms : int, int, float
        How ``f`` is timed (as ``f.time_evaluator``); the median repetition counts.
    name : str, optional
        The kernel's label (default: ``f``'s name).

    Returns
    -------
    Roofline
        The numbers (``gflops``, ``gbps``, ``intensity``, ``bound``, ``fraction``...)
        and ``.plot(path)``.

    Raises
    ------
    ArgumentError
        ``f`` is not a compiled kernel, ``args`` not a list, a count or roof not a
        positive number, the FLOPs cannot be counted (an extern call, a module loaded
        from a library: pass ``flops=``), or the roofs are not this machine's (a GPU
        kernel: pass ``peak_gflops=`` and ``peak_gbps=``).

    Examples
    --------
    >>> r = tc.roofline(f, [a, b, c])          # doctest: +SKIP
    >>> r.bound, round(r.fraction, 2)          # doctest: +SKIP
    ('compute', 0.41)
    """
    if not callable(getattr(f, "time_evaluator", None)):
        raise ArgumentError(f"tc.roofline: f must be a kernel compiled by tc.build (it is "
                            f"timed with f.time_evaluator), got {type(f).__name__}")
    if not isinstance(args, (list, tuple)):
        raise ArgumentError(f"tc.roofline(f, args): args must be a list or tuple of the "
                            f"arrays f is called with, got {type(args).__name__}")
    args = list(args)
    func = getattr(f, "prim_func", None)
    label = name if name is not None else getattr(f, "name", None) or "kernel"
    if not isinstance(label, str):
        raise ArgumentError(f"tc.roofline: name must be a str, got {type(label).__name__}")
    exact = True
    if flops is None:
        if func is None:
            raise ArgumentError(
                f"tc.roofline: {label} has no loop IR to count its operations from (a "
                f"module loaded from a library); pass flops= (and bytes=)")
        if len(args) != len(func.params):
            raise ArgumentError(f"tc.roofline: {label} takes {len(func.params)} arguments "
                                f"({', '.join(p.name for p in func.params)}), got {len(args)}")
        try:
            counted = count_flops(func, shape_env(func, [
                np.shape(a) if isinstance(p, Buffer) else a
                for p, a in zip(func.params, args)]))
        except KeyError as e:
            raise ArgumentError(f"tc.roofline: cannot count the operations of {label}: "
                                f"{e.args[0]}; pass flops=") from None
        if counted.opaque:
            raise ArgumentError(
                f"tc.roofline: {label} calls the extern function "
                f"{', '.join(counted.opaque)}, whose operations tecomp cannot count; pass "
                f"flops= (the floating-point operations of one call)")
        if counted.flops == 0:
            raise ArgumentError(
                f"tc.roofline: {label} executes no floating-point operations (a copy, or "
                f"integer arithmetic): a roofline places a kernel by its FLOPs per byte; "
                f"pass flops= to count other operations")
        flops, exact = counted.flops, counted.exact
    else:
        flops = _number(flops, "flops")
    if bytes is None:
        nbytes = _argument_bytes(func, args) if func is not None else sum(
            int(getattr(a, "nbytes", 0)) for a in args)
        if nbytes <= 0:
            raise ArgumentError(f"tc.roofline: {label} moves no array; pass bytes=")
    else:
        nbytes = _number(bytes, "bytes")
    parallel = func is None or bool(collect(
        func.body, lambda n: isinstance(n, For) and n.kind == "parallel"))
    threads = get_num_threads() if parallel else 1
    given = (peak_gflops is not None, peak_gbps is not None)
    if not all(given):
        tgt = getattr(f, "target", None)
        here = False
        try:
            t = as_target(tgt) if tgt is not None else None
            here = t is not None and t.is_cpu and t.is_native_isa
        except Exception:  # noqa: BLE001 - a target string tecomp does not know
            here = False
        if not here:
            raise ArgumentError(
                f"tc.roofline: {label} is compiled for {tgt}, not this CPU, whose roofs "
                f"tecomp measures; pass peak_gflops= and peak_gbps= (that machine's)")
        gf, bw = host_peaks(threads)
        peak_gflops = gf if peak_gflops is None else peak_gflops
        peak_gbps = bw if peak_gbps is None else peak_gbps
    peak_gflops = _number(peak_gflops, "peak_gflops")
    peak_gbps = _number(peak_gbps, "peak_gbps")
    res = f.time_evaluator(number=number, repeat=repeat, min_repeat_ms=min_repeat_ms)(*args)
    source = "given" if all(given) else ("measured" if not any(given) else "given and measured")
    return Roofline(label, res.median, flops, nbytes, threads, peak_gflops, peak_gbps,
                    flops_exact=exact, peaks=source, cpu=cpu_name())


def plot_rooflines(results: Sequence[Roofline], path, title: Optional[str] = None) -> str:
    """Draw the roofs of ``results[0]`` and every kernel of ``results`` as a point
    (labelled with its name and fraction of the roof) on one log-log chart, into
    ``path`` (.png, .svg or .pdf); returns the path.  Needs matplotlib."""
    what = "Roofline.plot"
    results = list(results)
    if not results or not all(isinstance(r, Roofline) for r in results):
        raise ArgumentError(f"{what}: give Roofline results (what tc.roofline returns)")
    fmt = _plot.image_format(path, what)
    plt = _plot.pyplot(what)
    r0 = results[0]
    lo = min([r.intensity for r in results] + [r0.ridge]) / 8
    hi = max([r.intensity for r in results] + [r0.ridge]) * 8
    xs = np.geomspace(lo, hi, 200)
    fig, ax = plt.subplots(figsize=(8, 5.5), dpi=110)
    try:
        ax.loglog(xs, np.minimum(r0.peak_gflops, xs * r0.peak_gbps), color="black", lw=2)
        ax.axvline(r0.ridge, color="grey", ls=":", lw=1)
        ax.annotate(f"FMA peak {r0.peak_gflops:.0f} GFLOP/s", (hi, r0.peak_gflops),
                    xytext=(-4, 5), textcoords="offset points", ha="right", fontsize=9)
        x_bw = max(lo * 1.5, r0.ridge / 30)
        ax.annotate(f"memory {r0.peak_gbps:.1f} GB/s", (x_bw, x_bw * r0.peak_gbps),
                    xytext=(4, 8), textcoords="offset points", rotation=27, fontsize=9)
        for i, r in enumerate(results):
            c = plt.cm.tab10(i % 10)
            ax.plot([r.intensity], [r.gflops], "o", ms=8, color=c,
                    label=_plot.text(f"{i + 1}. {r.name}: {r.gflops:.3g} GFLOP/s, "
                                     f"{r.fraction:.0%} of roof ({r.bound})"))
            ax.vlines(r.intensity, r.gflops, r.roof_gflops, colors=[c], linestyles="--",
                      lw=1)
            # the number of the legend's line (names of neighbouring points overlap)
            ax.annotate(str(i + 1), (r.intensity, r.gflops), xytext=(6, -10),
                        textcoords="offset points", fontsize=9, color=c, weight="bold")
        ax.set_xlabel("arithmetic intensity (FLOP / byte moved)")
        ax.set_ylabel("GFLOP/s")
        ymin = min([r.gflops for r in results] + [lo * r0.peak_gbps]) / 2
        ax.set_ylim(ymin, r0.peak_gflops * 2.5)
        ax.set_xlim(lo, hi)
        ax.grid(True, which="both", alpha=0.25)
        threads = f"{r0.threads} thread{'s' if r0.threads != 1 else ''}"
        ax.set_title(_plot.text(title if title is not None
                                else f"Roofline: {r0.cpu}, {threads}"), fontsize=10)
        ax.legend(loc="lower right", fontsize=8)
        fig.tight_layout()
        fig.savefig(os.fspath(path), format=fmt)
    finally:
        plt.close(fig)
    return os.fspath(path)
