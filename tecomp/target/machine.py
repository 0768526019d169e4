"""The machine model of a CPU target: what the schedules (the ``tecomp.nn`` CPU templates,
the auto-scheduler's rules, the gradients' schedules) adapt to, read from a
:class:`~tecomp.target.Target`, never assumed.  ``Target.machine`` (or
:func:`~tecomp.target.cpu_model`) gives it.

The vector width, the registers and the caches come from the target (LLVM's features for
its CPU, sysfs for the host, the table of :mod:`tecomp.target.x86` for a named CPU); the
costs the schedules weigh (an FMA's width, a gather's, a transpose's, split loads) are
the defaults below unless measurements on the target's microarchitecture say otherwise
(:data:`tecomp.target.x86.MEASURED`)."""
from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import FrozenSet, Iterable, Mapping

#: what copying one float32 element of weights that do not fit in half the last-level
#: cache costs, in the time of one full-vector FMA: the copy is a phase of its own,
#: waiting on memory (measured 1.24 on AMD Zen 4: 37.7 MB of 3x3 1024->1024 weights)
#: (benchmarks/DECISIONS.md, "Conv NCHW: a 3x3 window's weights transposed")
MEMORY_COPY_COST = 1.2

#: a gather's cost (see :attr:`CpuModel.gather_cost`) where none is measured: on the
#: project's Xeon, channel vectors that need the copy ran 1.4x faster than 7-of-16-lane
#: rows at 49 pixels, which puts it at 1.9 or less there
DEFAULT_GATHER_COST = 1.5

#: the function that gives the measured costs of the host's CPU, ``f(target, entry)``
#: with ``entry`` the CPU's :data:`tecomp.target.x86.MEASURED` entry (or None):
#: :mod:`tecomp.calibration` registers its cached measurement at first use here
#: (empty: the table's entry or the defaults)
HOST_COSTS: list = []


@dataclass(frozen=True)
class CpuModel:
    """What the CPU schedules adapt to: the facts of one target (see the module).

    ``Target.machine`` or :func:`~tecomp.target.cpu_model` gives it.

    Parameters
    ----------
    lanes : int
        Float32 lanes of one vector register.
    vregs : int
        Architectural vector registers.
    threads : int
        Threads of the parallel runtime.
    l1_bytes, l2_bytes, l3_bytes : int, optional
        Cache sizes in bytes (per core for L1 and L2).
    masks : bool, optional
        Whether the target has mask registers (AVX-512's).
    fma_lanes : int, optional
        The float32 lanes one FMA operation computes (0: ``lanes``).
    gather_cost : float, optional
        Copying one float32 element with a strided vector load, in the time of one
        full-vector FMA.
    transpose_cost : float, optional
        Copying one float32 element in register transposes, in the same unit.
    split_loads_cheap : bool, optional
        Whether a vector load straddling two cache lines costs about what one that does
        not costs.
    gemm_load_cost : float, optional
        What one load of the GEMM micro-kernel (a broadcast of A or a vector of B) costs
        beyond the FMAs it feeds, in the time of one full-vector FMA (0: not measured).
    fma_latency, fma_ports : int, optional
        Cycles from an FMA to one that needs its result, and FMAs issued per cycle.
    read_streams : int, optional
        The rows of a matrix read at once (a line of each per step) that the hardware
        prefetchers still keep up with.
    stream_bytes : int, optional
        Bytes one core reads and writes per cycle in a pass over arrays that stay in its
        L2 cache.
    prefetch_burst_lines : int, optional
        The most lines of a matrix streamed from memory that one burst of software
        prefetches (a skinny ``A @ W`` tile's, of the next tile's block of rows) asks for
        (0: not measured).
    strip_prefetch_rows : int, optional
        How many rows of W ahead a skinny ``A @ W`` read as column strips prefetches at
        every step (0: not measured; no strips, the tiles in blocks of rows).
    memory_operands : bool, optional
        Whether an arithmetic instruction may read one of its operands from memory (x86).
    stream_output_bytes : int, optional
        An elementwise pass's output of more than this many bytes, where that is less
        than half the last-level cache, is stored past the cache (0: not measured; more
        than half that cache).
    row_prefetch_bytes : int, optional
        How far ahead, in bytes, a reduction along short rows read from beyond the L2
        caches prefetches its input (0: not at all, the hardware prefetchers alone).
    selection_prefetch_bytes : int, optional
        The same for a selection along short rows (an argmax's, an argmin's), whose
        rows end in a longer tree (0: ``row_prefetch_bytes``).
    stream_load_bytes : int, optional
        The width, in bytes, of the vector loads that read a long stream from memory
        fastest, where that is narrower than a vector register (0: the registers').
    column_prefetch_bytes : int, optional
        How far ahead, in bytes of its passes, a column reduction (over a first or a
        middle axis) whose input is larger than the L2 cache prefetches the rows of its
        passes ahead into L2 (0: not at all).
    window_prefetch_bytes : int, optional
        How far ahead, in bytes of the data's rows, a 2-d max pooling over short padded
        rows prefetches the rows of the output rows ahead (0: not at all).
    dot_w_l2_share : float, optional
        The share of the L2 cache an int8 GEMM's packed W may take for its blocks to run
        row block by row block, each reading the whole packed W from L2 (past it: column
        panel by column panel).
    target : str, optional
        The target (its string) these facts are from.
    parallel_region_cycles : int, optional
        Cycles a parallel loop costs to start and join, however little it runs.
    """

    lanes: int          # float32 lanes of one vector register
    vregs: int          # architectural vector registers
    threads: int        # threads of the parallel runtime
    l1_bytes: int = 32 * 1024
    l2_bytes: int = 512 * 1024
    l3_bytes: int = 32 << 20
    #: whether the target has mask registers (AVX-512's): a vector guarded past a
    #: tensor's edge is then masked instructions; without them it runs lane by lane
    masks: bool = False
    #: the float32 lanes one FMA operation computes (half the register where the core
    #: runs a full-width operation as two halves: AMD Zen 4)
    fma_lanes: int = 0
    #: copying one float32 element with a strided vector load (a gather), in the time of
    #: one full-vector FMA (a convolution's weights copied across output channels)
    gather_cost: float = DEFAULT_GATHER_COST
    #: copying one float32 element in ``L x L`` register transposes
    #: (``x86.transpose_f32_LxL``), in the time of one full-vector FMA, for weights that
    #: stay in the last-level cache (from memory: :data:`MEMORY_COPY_COST`); half the
    #: gather's cost where unmeasured
    transpose_cost: float = DEFAULT_GATHER_COST / 2
    #: whether a vector load that straddles two cache lines costs about what one that
    #: does not costs (False where unmeasured)
    split_loads_cheap: bool = False
    #: what one load of the GEMM micro-kernel (a broadcast of A or a vector of B, with
    #: the whole reduction in one slice: streamed from L2) costs beyond the FMAs it
    #: feeds, in the time of one full-vector FMA, as fitted from the times of two
    #: register blocks (``benchmarks/machine_probe.py``); the GEMM's register block is
    #: then the one with the fewest such costs per FMA (``strategy.cpu.gemm``).  0
    #: where unmeasured: the block is two vectors wide, as rows as the registers allow
    gemm_load_cost: float = 0.0
    #: the latency of an FMA in cycles and the FMAs issued per cycle: a register block
    #: needs at least their product of independent accumulators to keep the FMA units
    #: busy (4 x 2 on the x86 cores of AVX2 and AVX-512 since Skylake and Zen 2)
    fma_latency: int = 4
    fma_ports: int = 2
    #: the rows of a matrix that a loop reading one line of each per step may stream at
    #: once and still have the hardware prefetchers keep up with memory (more rows, and
    #: each is followed less far ahead): a skinny GEMM's tile of 1 to 3 rows of A reads
    #: at most this many rows of W at a time (8 where unmeasured)
    read_streams: int = 8
    #: the bytes one core reads and writes per cycle in a pass over arrays that stay in
    #: its L2 (a Winograd convolution's transforms, ``nn.winograd.winograd_tile``): 32
    #: where unmeasured (half a 64-byte line each way)
    stream_bytes: int = 32
    #: the most lines of a matrix streamed from memory that one burst of software
    #: prefetches should ask for: a skinny ``A @ W`` (``W[k, j]``) tile prefetches, as it
    #: starts, the next tile's block of rows of W (its rows by its vectors of columns),
    #: and its block of rows is the largest power of two of rows whose lines fit in this
    #: (``strategy.cpu.skinny.row_block``; 48 on AMD Zen 4: 4 rows at 1 and 2 rows of A,
    #: 8 at 3 and 4, 16 from 5 on).  0 where unmeasured: blocks of ``skinny.K_BLOCK`` (16) rows
    prefetch_burst_lines: int = 0
    #: where measured (not 0), a skinny ``A @ W`` of 5 to 12 rows (one register block of
    #: all of them: 5 x 5, 6-8 x 3-4, 9 x 3, 10-12 x 2 vectors with 32 registers) reads W
    #: as column strips, each tile accumulating over all of K and
    #: prefetching W this many rows ahead at every step, and of 14 and 16 rows (two equal
    #: blocks of rows accumulating in turn over blocks of this many rows of W, prefetched
    #: a block ahead) (``strategy.cpu.skinny``, ``_schedule_strips``; 64 on AMD Zen 4)
    strip_prefetch_rows: int = 0
    #: whether an arithmetic instruction may read one of its operands straight from
    #: memory (x86: an FMA's memory operand; not AArch64, whose arithmetic reads
    #: registers only): a vector that several FMAs read may then be loaded by each of
    #: them rather than once into a register of its own (``pragma load_each_use``, the
    #: skinny GEMM's rows of W: ``strategy.cpu.skinny``)
    memory_operands: bool = False
    #: how far ahead, in bytes, a reduction along rows a few KiB long or shorter (a sum
    #: over the last axis of 8x64x128x256: rows of 1 KiB) prefetches its input where it
    #: streams from beyond the L2 caches: each row ends in a chain of dependent combines
    #: (its partial results folded, its lanes reduced), which holds back the loads of
    #: the rows after it, so fewer lines are on their way from memory than in a long
    #: row's loop; a prefetch retires without waiting for its line.  0 where unmeasured:
    #: the hardware prefetchers alone (``tecomp.calibration`` measures it on a host CPU
    #: without a :data:`~tecomp.target.x86.MEASURED` entry; ``strategy.rows.row_reduce_at``)
    row_prefetch_bytes: int = 0
    #: the same distance for a selection along such rows (an argmax's or argmin's index
    #: and value pairs, ``strategy.rules``' tuple row reduction), where the tree that
    #: ends each row is about 120 instructions, not a sum's 20: a CPU whose hardware
    #: prefetchers keep a row sum fed (no ``row_prefetch_bytes``) may still leave an
    #: argmax waiting on its next rows.  0: ``row_prefetch_bytes`` (what the
    #: calibration measures; it times no selection)
    selection_prefetch_bytes: int = 0
    #: the width, in bytes, of the vector loads that read a long stream from memory
    #: fastest, where that is narrower than a vector register: a float row sum whose
    #: input streams from beyond the L2 caches is then compiled for registers of that
    #: width (``pragma vector_bytes``, ``strategy.rules.STREAM_LOADS``).  0 where
    #: unmeasured: the registers' width
    stream_load_bytes: int = 0
    #: how far ahead, in bytes of its passes (the rows one pass over the tile reads), a
    #: column reduction (a sum over a matrix's rows, over an NCHW tensor's batch or
    #: channels: ``strategy.rules``' column reduction) whose input is larger than the L2
    #: cache prefetches the rows of its next passes into L2, at least one pass: each pass
    #: starts its rows' runs anew, and the hardware prefetchers start each run cold.  0
    #: where unmeasured: none (the calibration does not time it)
    column_prefetch_bytes: int = 0
    #: how far ahead, in bytes of the data's rows, a 2-d max pooling over short padded
    #: rows (channels first, its maxima kept in the output: ``strategy.cpu.pool``)
    #: prefetches the data rows of the output rows ahead: ``window_prefetch_bytes //
    #: (stride x row bytes)`` output rows, at least one.  0 where unmeasured: none, the
    #: hardware prefetchers alone (the calibration does not time it)
    window_prefetch_bytes: int = 0
    #: an int8 GEMM on the dot-product intrinsic (``strategy.tensorize``) computes its
    #: blocks of ``C`` row block by row block (a block's rows of X stay in L1, its
    #: output rows are written in order, the whole packed W is read from L2 for each
    #: block of rows) while the packed W takes at most this share of the L2, else
    #: column panel by column panel (each panel of W read from L2 by every block of
    #: rows; all of X read again for each panel): 0.5 where unmeasured (half the L2,
    #: measured on AMD Zen 5); 1.0 on AMD Zen 4, where 1024^3 ran 2.5-4.8% faster row
    #: block by row block (``tensorize.cols_outer_default``)
    dot_w_l2_share: float = 0.5
    #: the output of a plain elementwise pass (no other stage reads it) of more than this
    #: many bytes is stored past the cache (``pragma nontemporal``), where a measurement
    #: found a pass of twice that size faster so: on a VM the last-level cache the host
    #: reports (480 MiB by sysfs on session 21's Xeon VM) is shared with every other
    #: guest, and a 16M-float output there ran 1.25-1.38x faster streamed though it is
    #: 13% of that cache.  0 where unmeasured: more than half the last-level cache
    #: (``strategy._common._streams_past_cache``; ``tecomp.calibration`` measures it on a
    #: host CPU without a :data:`~tecomp.target.x86.MEASURED` entry)
    stream_output_bytes: int = 0
    target: str = "llvm"   # the tc.Target (its string) these facts are from
    #: what starting and joining one parallel region costs, in cycles, however little it
    #: runs: an empty kernel of 6 regions took 5.0-5.5 us a call on the 2-core Zen 4
    #: (about 0.6 us a region beyond the call itself; benchmarks/DECISIONS.md,
    #: "an empty kernel of 6 parallel regions"); the estimates of
    #: :mod:`tecomp.strategy.nest_cost` read it.  Not measured per CPU
    parallel_region_cycles: int = 2200

    def __post_init__(self):
        if not self.fma_lanes:
            object.__setattr__(self, "fma_lanes", self.lanes)



def features_with(base: Iterable[str], mattr: Iterable[str],
                  implies: Mapping[str, FrozenSet[str]]) -> FrozenSet[str]:
    """The features ``base`` with the ``-mattr`` entries ``mattr`` applied in order: a
    ``+name`` adds the feature and what it implies (``implies[name]``), a ``-name``
    removes it and every feature that implies it."""
    feats = set(base)
    for a in mattr:
        name = a[1:]
        if a[0] == "+":
            feats |= implies.get(name, frozenset()) | {name}
        else:   # and whatever needs it
            feats -= {f for f, needs in implies.items() if name in needs}
            feats.discard(name)
    return frozenset(feats)


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """``"did you mean a, b? "`` with the names of ``known`` closest to ``name`` (for a
    message about an unknown CPU feature), or ``""``."""
    close = difflib.get_close_matches(name, sorted(known), n=3)
    return f"did you mean {', '.join(close)}? " if close else ""
