"""Drawn machine models: the fuzzer's small shapes on the big-shape paths.

Many CPU schedule paths are gated on sizes relative to the target's machine model
(:class:`~tecomp.target.machine.CpuModel`): a pooling's output stored past the cache
(``stream_output_bytes``), a 3-d window's planes first, a column reduction's prefetch
(``column_prefetch_bytes``, past the L2), a skinny ``A @ W`` read as column strips
(``strip_prefetch_rows``), prefetch bursts, the L1/L2/L3 sizes themselves.  The fuzzer's
shapes are small, so on the host's model they never reach those paths.  A family that
schedules through the rules and templates draws, for a fraction of its seeds, a model
whose caches and thresholds are small (:func:`draw_machine`) and runs the case inside
:func:`drawn_machine`: every ``Target.machine`` (so :func:`tecomp.target.cpu_model` too)
is the host's with those fields replaced.  The instruction set is the host's (the lanes,
registers and features are not drawn), so the kernel still runs here and is compared as
any case.  The drawn fields are in the case's spec (``spec["machine"]``), so its
reproducer carries them.
"""
from __future__ import annotations

import contextlib
from dataclasses import replace

from ..target import Target
from .draw import RandomDraw

#: the fields drawn, each from a few small values (bytes, rows or lines); 0 for a
#: threshold means "not measured" (the path off), which is drawn too
CHOICES = {
    "l1_bytes": (512, 1024, 4096),
    "l2_bytes": (1024, 2048, 8192, 64 * 1024),
    "l3_bytes": (4096, 16 * 1024, 128 * 1024),
    "stream_output_bytes": (0, 64, 256, 1024),
    "column_prefetch_bytes": (0, 256, 1024, 4096),
    "row_prefetch_bytes": (0, 256, 2048),
    "selection_prefetch_bytes": (0, 512),
    "window_prefetch_bytes": (0, 128, 512, 3584),
    "strip_prefetch_rows": (0, 1, 4, 64),
    "prefetch_burst_lines": (0, 1, 8, 48),
    "read_streams": (1, 2, 8),
}


def draw_machine(r: RandomDraw) -> dict:
    """Drawn small machine facts (JSON-able ``{field: value}``), caches ordered
    ``l1 <= l2 <= l3``."""
    m = {k: r.choice(v) for k, v in CHOICES.items()}
    m["l2_bytes"] = max(m["l2_bytes"], m["l1_bytes"])
    m["l3_bytes"] = max(m["l3_bytes"], m["l2_bytes"])
    return m


def maybe_machine(seed: int, salt: int, p: float = 0.25):
    """For a fraction ``p`` of the seeds, drawn machine facts (else None), from a stream
    of their own (``RandomDraw(seed * 7919 + salt)``: the family's other draws stay)."""
    r = RandomDraw(seed * 7919 + salt)
    return draw_machine(r) if r.bool(p) else None


@contextlib.contextmanager
def drawn_machine(fields):
    """Within the block, every CPU target's machine model has ``fields`` replaced (None
    or ``{}``: unchanged)."""
    if not fields:
        yield
        return
    prop = Target.__dict__["machine"]

    def machine(self):
        return replace(prop.fget(self), **fields)

    Target.machine = property(machine, doc=prop.__doc__)
    try:
        yield
    finally:
        Target.machine = prop


def machine_line(fields) -> str:
    """The reproducer's comment saying the case runs under a drawn model (its runner
    applies ``spec["machine"]`` itself)."""
    return (f"# under a drawn machine model (the host's with {fields!r}; the runner "
            "applies spec['machine'])")
