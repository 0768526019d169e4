"""What the CPU templates adapt to: :class:`CpuInfo` (vector width, vector registers,
caches, threads), read from a :class:`~tecomp.target.Target`, never assumed."""
from __future__ import annotations

import os
from dataclasses import dataclass

from ...errors import ScheduleError, TargetError
from ...target import _host_cache, as_target


@dataclass(frozen=True)
class CpuInfo:
    """What the schedules adapt to."""

    lanes: int          # float32 lanes of one vector register
    vregs: int          # architectural vector registers
    threads: int        # threads of the parallel runtime
    l1_bytes: int = 32 * 1024
    l2_bytes: int = 512 * 1024
    target: str = "llvm"   # the tc.Target (its string) these facts are from

    @property
    def masks(self) -> bool:
        """Whether the target has AVX-512's mask registers (a vector guarded past a
        tensor's edge is then masked instructions; without them, AVX2 runs its lanes one
        by one)."""
        return as_target(self.target).has_feature("avx512f")

    @property
    def split_loads_cheap(self) -> bool:
        """Whether a vector load that straddles two cache lines costs about as much as
        one that does not.  Measured so on AMD Zen 4 (which runs a 512-bit load as two
        256-bit halves): an NHWC convolution read its weights in place at +16 bytes as
        fast as aligned; on the project's Xeon such loads made it 9% slower
        (benchmarks/DECISIONS.md, "Conv tasks: aligned weights").  False where unmeasured."""
        return self._zen4

    @property
    def _zen4(self) -> bool:
        """Whether the target's CPU is AMD Zen 4 (LLVM's ``znver4``)."""
        return as_target(self.target).cpu == "znver4"

    @property
    def fma_lanes(self) -> int:
        """The float32 lanes one FMA operation of the core computes: half a 512-bit
        register on AMD Zen 4, which runs 512-bit operations as two 256-bit halves
        (an 8-lane vector costs half a 16-lane one there: measured in
        benchmarks/DECISIONS.md, "Conv NCHW: the weight copy's cost"); the whole
        register elsewhere."""
        return 8 if self.lanes == 16 and self._zen4 else self.lanes

    @property
    def gather_cost(self) -> float:
        """What copying one float32 element with a strided vector load (a gather)
        costs, in the time of one full-vector FMA.  Measured 3.3-5.4 on AMD Zen 4
        (a convolution's weights copied across output channels); on the project's
        Xeon, channel vectors that need that copy ran 1.4x faster than 7-of-16-lane
        rows at 49 pixels, which puts it at 1.9 or less there: 1.5 where unmeasured.
        (benchmarks/DECISIONS.md, "Conv NCHW: the weight copy's cost")"""
        return 4.0 if self._zen4 else 1.5

    @property
    def transpose_cost(self) -> float:
        """What copying one float32 element in ``L x L`` register transposes costs
        (``x86.transpose_f32_LxL``: a convolution's weights copied across output
        channels), in the time of one full-vector FMA, for weights that stay in the
        last-level cache.  Measured 0.65-0.86 on AMD Zen 4 (against rows of 7 at batch
        1); elsewhere taken as half the gather's cost, unmeasured.  From memory the
        copy costs more (:data:`MEMORY_COPY_COST`).
        (benchmarks/DECISIONS.md, "Conv NCHW: a 3x3 window's weights transposed")"""
        return 0.8 if self._zen4 else self.gather_cost / 2

    @property
    def l3_bytes(self) -> int:
        """The last-level cache's size (the target's, see :mod:`tecomp.target`)."""
        return as_target(self.target).l3_bytes


#: what copying one float32 element of weights that do not fit in half the last-level
#: cache costs, in the time of one full-vector FMA: the copy is a phase of its own,
#: waiting on memory (measured 1.24 on AMD Zen 4: 37.7 MB of 3x3 1024->1024 weights)
#: (benchmarks/DECISIONS.md, "Conv NCHW: a 3x3 window's weights transposed")
MEMORY_COPY_COST = 1.2


def _cache_size(level: int, default: int) -> int:
    """L1d / L2 / L3 size of cpu0 (per core, sysfs), or ``default`` (see
    :mod:`tecomp.target`, which reads them once)."""
    return _host_cache(level, default)


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``), or what ``platform`` says."""
    import platform

    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown cpu"


def cpu_info(target="llvm") -> CpuInfo:
    """The vector width, register count, caches and thread count the schedules use, from
    the :class:`~tecomp.target.Target` (a string is parsed: ``"llvm"`` is the host,
    ``"llvm -mcpu=haswell"`` gives the AVX2 schedules on any machine).

    ``TECOMP_VECTOR_LANES`` (8 or 16) overrides the width of the host target (the AVX2
    blockings compiled for this CPU; cross-targeting compiles them for an AVX2 one)."""
    try:
        t = as_target(target)
    except TargetError as exc:
        raise ScheduleError(f"the tecomp.nn CPU schedules: {exc}") from None
    if t.kind != "llvm":
        raise ScheduleError(f"the tecomp.nn CPU schedules are for target='llvm', got {str(t)!r}")
    lanes = t.lanes
    vregs = t.vregs
    env = os.environ.get("TECOMP_VECTOR_LANES")
    if env and t.is_host:
        lanes = int(env)
        vregs = 32 if lanes == 16 else 16
    return CpuInfo(lanes, vregs, t.threads, t.l1_bytes, t.l2_bytes, str(t))
