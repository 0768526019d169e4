"""x86-64: the feature sets of the CPUs tecomp knows by name, the baseline ``-mattr``
cannot remove, and the facts of the x86 machine model (vector width and registers from the
features; what a microarchitecture's measurements say about its costs)."""
from __future__ import annotations

from typing import Dict, FrozenSet, Tuple

from ..errors import TargetError
from .machine import did_you_mean, features_with

#: the name of the instruction set, as a :class:`~tecomp.target.Target` reports it
ISA = "x86-64"
#: the first words of the LLVM triples of x86-64 code
TRIPLE_ARCHS = ("x86_64",)
#: the triple an x86-64 target compiles for where the host is another machine
DEFAULT_TRIPLE = "x86_64-unknown-linux-gnu"
#: the C compiler drivers that link a library of this instruction set's code on another
#: machine (``export_library`` tries them in this order); the variable that names one
CROSS_COMPILERS = ("x86_64-linux-gnu-gcc",)
CROSS_CC_VARIABLE = "TECOMP_CC_X86_64"
#: the ``-mcpu`` of a target that names none
DEFAULT_CPU = "x86-64"
#: an arithmetic instruction may read one operand from memory (an FMA's ``m512``
#: operand): ``CpuModel.memory_operands``
MEMORY_OPERANDS = True

# x86 feature sets by vector ISA: the features tecomp's code generator asks about, where
# LLVM cannot be asked for a CPU's (Target.features asks LLVM wherever it is there)
_SSE = frozenset({"sse", "sse2", "sse3", "ssse3", "sse4.1", "sse4.2"})
_AVX = _SSE | {"avx"}
_AVX2 = _AVX | {"avx2", "fma", "f16c", "bmi", "bmi2"}
_AVX512 = _AVX2 | {"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"}
_VNNI = _AVX512 | {"avx512vnni"}
_BF16 = _VNNI | {"avx512bf16"}

# what a feature given with -mattr brings along (and what removing it takes away)
_IMPLIES = {"avx": _SSE, "avx2": _AVX, "fma": _AVX, "avx512f": _AVX2,
            "avx512bw": _AVX2 | {"avx512f"}, "avx512dq": _AVX2 | {"avx512f"},
            "avx512vl": _AVX2 | {"avx512f"}, "avx512cd": _AVX2 | {"avx512f"},
            "avx512vnni": _AVX512, "avx512bf16": _VNNI}

BASELINE = frozenset({"64bit", "cmov", "cx8", "fxsr", "mmx", "sse", "sse2", "x87"})
"""The x86-64 baseline (LLVM's ``x86-64`` CPU): the calling convention passes floats in
SSE registers, the runtime's atomics need ``cx8``; ``-mattr`` cannot remove these."""

INTRINSIC_ONLY = frozenset({
    "aes", "vaes", "pclmul", "vpclmulqdq", "sha", "sha512", "sm3", "sm4",
    "amx-avx512", "amx-bf16", "amx-complex", "amx-fp16", "amx-fp8", "amx-int8", "amx-movrs",
    "amx-tf32", "amx-tile", "avx10.1", "avxneconvert", "avxvnniint8", "avxvnniint16",
    "cldemote", "clflushopt", "clwb", "clzero", "cmpccxadd", "enqcmd", "fsgsbase", "hreset",
    "invpcid", "kl", "widekl", "lwp", "movdir64b", "movdiri", "movrs", "mwaitx", "pconfig",
    "pku", "prefetchi", "ptwrite", "rdpid", "rdpru", "rdrnd", "rdseed", "rtm", "serialize",
    "sgx", "shstk", "tsxldtrk", "uintr", "usermsr", "waitpkg", "wbnoinvd", "xsave", "xsavec",
    "xsaveopt", "xsaves"})
"""Features whose instructions LLVM emits only for their own intrinsics (AES, SHA, AMX,
system, security and cache-control instructions, AVX10.1's, which are its AVX-512
features', the VEX forms of VNNI-INT8/16 and NE-CONVERT, which act on types tecomp's
code does not have): code tecomp generates never contains them, so a CPU without them
runs code compiled for one with them, and :attr:`Target.checked_features` leaves them
out.  A tensor intrinsic that calls one names it in ``requires``; then it is checked."""

CPUS: Dict[str, Tuple[FrozenSet[str], int, int, int]] = {
    "x86-64": (frozenset({"sse", "sse2"}), 32 << 10, 256 << 10, 8 << 20),
    "x86-64-v2": (_SSE, 32 << 10, 256 << 10, 8 << 20),
    "x86-64-v3": (_AVX2, 32 << 10, 256 << 10, 8 << 20),
    "x86-64-v4": (_AVX512, 32 << 10, 1 << 20, 16 << 20),
    "nehalem": (_SSE, 32 << 10, 256 << 10, 8 << 20),
    "sandybridge": (_AVX, 32 << 10, 256 << 10, 8 << 20),
    "ivybridge": (_AVX | {"f16c"}, 32 << 10, 256 << 10, 8 << 20),
    "haswell": (_AVX2, 32 << 10, 256 << 10, 8 << 20),
    "core-avx2": (_AVX2, 32 << 10, 256 << 10, 8 << 20),
    "broadwell": (_AVX2, 32 << 10, 256 << 10, 8 << 20),
    "skylake": (_AVX2, 32 << 10, 256 << 10, 8 << 20),
    "alderlake": (_AVX2, 48 << 10, 1280 << 10, 30 << 20),
    # (the client parts below: the performance cores' L1d and L2, the whole L3 of a
    # desktop or laptop part of the generation; their efficiency cores lack AVX-512)
    "raptorlake": (_AVX2, 48 << 10, 2 << 20, 36 << 20),
    "meteorlake": (_AVX2, 48 << 10, 2 << 20, 24 << 20),
    "arrowlake": (_AVX2, 48 << 10, 3 << 20, 36 << 20),
    "lunarlake": (_AVX2, 48 << 10, 2560 << 10, 12 << 20),
    "cannonlake": (_AVX512, 32 << 10, 256 << 10, 4 << 20),
    "icelake-client": (_VNNI, 48 << 10, 512 << 10, 8 << 20),
    "tigerlake": (_VNNI, 48 << 10, 1280 << 10, 12 << 20),
    "rocketlake": (_VNNI, 48 << 10, 512 << 10, 16 << 20),
    "skylake-avx512": (_AVX512, 32 << 10, 1 << 20, 32 << 20),
    "cascadelake": (_VNNI, 32 << 10, 1 << 20, 32 << 20),
    "cooperlake": (_BF16, 32 << 10, 1 << 20, 38 << 20),
    "icelake-server": (_VNNI, 48 << 10, 1280 << 10, 48 << 20),
    "sapphirerapids": (_BF16, 48 << 10, 2 << 20, 64 << 20),
    "emeraldrapids": (_BF16, 48 << 10, 2 << 20, 256 << 20),
    "graniterapids": (_BF16, 48 << 10, 2 << 20, 504 << 20),
    # (E-cores only: the L2 of a 4-core module, 4 MiB, a quarter per core)
    "sierraforest": (_AVX2, 32 << 10, 1 << 20, 96 << 20),
    # (AMD's own sse4a among them: code for a Zen may use it, so an Intel CPU, which
    # lacks it, refuses to run such code)
    "znver1": (_AVX2 | {"sse4a"}, 32 << 10, 512 << 10, 8 << 20),
    "znver2": (_AVX2 | {"sse4a"}, 32 << 10, 512 << 10, 16 << 20),
    "znver3": (_AVX2 | {"sse4a"}, 32 << 10, 512 << 10, 32 << 20),
    "znver4": (_BF16 | {"sse4a"}, 32 << 10, 1 << 20, 32 << 20),
    "znver5": (_BF16 | {"sse4a"}, 48 << 10, 1 << 20, 32 << 20),
}
"""The x86 ``-mcpu`` names tecomp knows: name -> (features, L1d bytes, L2 bytes per core,
L3 bytes).  The features are what tecomp's code generator asks about, for where LLVM
cannot be asked (``Target.features`` asks LLVM for the CPU's own wherever it is here);
the caches are their vendors' figures for a part of that generation.  A name LLVM knows
and this table does not is refused (LLVM itself aborts the process on a name it does not
know, so tecomp cannot pass names through unchecked): give the nearest CPU here and the
features it lacks with ``-mattr``."""


def check_feature(entry: str, known) -> None:
    """Refuse the ``-mattr`` entry ``entry`` (``+name`` or ``-name``) when LLVM does not
    know the feature (it would print a warning and ignore it) or it removes one of the
    x86-64 baseline (the code would crash: see :data:`BASELINE`); ``known``: the
    names LLVM knows (None without LLVM: nothing is refused for that)"""
    name = entry[1:]
    if known is not None and name not in known and name not in BASELINE:
        raise TargetError(f"target llvm: -mattr names {name!r:.40}, which is not a CPU feature "
                          f"LLVM knows; {did_you_mean(name, known)}give LLVM's names, e.g. +avx2, +fma, "
                          f"+avx512f, +avx512vnni")
    if entry[0] == "-" and name in BASELINE:
        raise TargetError(f"target llvm: -mattr={entry} removes {name}, which every x86-64 "
                          f"CPU has and tecomp's code needs (x86-64 passes floats in SSE "
                          f"registers; the thread pool's atomics need cx8): remove only "
                          f"features above the x86-64 baseline ({', '.join(sorted(BASELINE))}), "
                          f"e.g. -mattr=-avx512f, or pick an older CPU with -mcpu "
                          f"(-mcpu=x86-64 has nothing above it)")



HASWELL_FEATURES = CPUS["haswell"][0]


def cpu_features(cpu: str, mattr: Tuple[str, ...], base=None) -> FrozenSet[str]:
    """The features of code for ``cpu`` (a name of :data:`CPUS`) with the ``-mattr``
    entries ``mattr`` (on ``base`` instead of the CPU's own features when given), from
    the table: where LLVM cannot be asked
    (:func:`tecomp.target.host.llvm_cpu_features` asks it wherever it can)."""
    return features_with(CPUS[cpu][0] if base is None else base, mattr, _IMPLIES)


def vector_lanes(features: FrozenSet[str]) -> int:
    """float32 lanes of one vector register: 16 with AVX-512, 8 with AVX, 4 with SSE."""
    return 16 if "avx512f" in features else 8 if "avx" in features else 4


def vector_registers(features: FrozenSet[str]) -> int:
    """Architectural vector registers: 32 with AVX-512, 16 otherwise."""
    return 32 if "avx512f" in features else 16


#: what measurements on a microarchitecture (LLVM's CPU name) say about costs the schedules
#: weigh, where they differ from the defaults of :class:`~tecomp.target.machine.CpuModel`
#: (benchmarks/DECISIONS.md, "Conv NCHW: the weight copy's cost", "Conv NCHW: a 3x3 window's
#: weights transposed", "Conv tasks: aligned weights", "Zen 5: the machine model from
#: benchmarks/machine_probe.py"; ``python3 benchmarks/machine_probe.py`` prints the
#: entry for the host it runs on):
#:
#: * ``fma_bits``: the width one FMA operation computes; AMD Zen 4 runs a 512-bit
#:   operation as two 256-bit halves (an 8-lane vector costs half a 16-lane one there);
#:   Zen 5 runs it whole (16 lanes compute 1.98-1.99x the FLOPs of 8);
#: * ``gather_cost``: copying one float32 element with a strided vector load, in the time
#:   of one full-vector FMA (3.3-5.4 measured on Zen 4 in convolutions; 2.1 on Zen 5 by
#:   the probe's copy of 64 x 576 weights);
#: * ``transpose_cost``: copying one in ``L x L`` register transposes (0.65-0.86 on Zen 4;
#:   0.66-0.67 on Zen 5 by the probe);
#: * ``split_loads_cheap``: a vector load across two cache lines costs about what an
#:   aligned one does, so that an NHWC convolution reads its weights in place (it did, at
#:   +16 bytes, as fast on Zen 4).  On Zen 5 the probe's micro-kernel ran 1.00x with its
#:   loads split, but the decision the flag makes lost there: the 3x3 256x14x14 NHWC
#:   layer ran 0.93-0.96x with its weights in place (64x56x56: a tie)
#:   (``benchmarks/model_ab.py``), so Zen 5 keeps the copy;
#: * ``gemm_load_cost``: what a load of the GEMM micro-kernel costs beyond its FMAs, in
#:   FMAs, fitted from the times of a two- and a four-vector register block (0.32 by the
#:   probe under load on Zen 5, 0.4-0.6 from the 2048^3 blockings: 0.5; the blocks it
#:   picks are the same from 0.3 to 0.5 over 120 shapes): GEMMs of 128 columns or more
#:   take the block with the fewest loads per FMA (6 x 64 at 2048^3)
#:   (benchmarks/DECISIONS.md, "GEMM: the register block with the fewest loads per FMA");
#: * ``read_streams``: the rows of W a skinny GEMM's tile streams at once with 1 to 3
#:   rows of A (measured while the hardware prefetchers alone fetched them, without
#:   the tiles' own prefetch of W into L2): on Zen 5, 1 thread, under
#:   load, a GEMV of 11008 x 4096 read W at 97-102% of the read stream 2-4 rows at a time
#:   against 88-89% at 6-8, 2 rows of A at 80-91% 4 rows at a time against 72-79% at 2 or
#:   8 (the same in a C model of the kernel: ``benchmarks/skinny_ceiling.py``,
#:   benchmarks/history/2026-11-30.md).  The probe said 8 on 2026-12-02 (a GEMV
#:   without prefetches, 1 thread: 4 rows 43.0 GB/s, 8 rows 46.8); with the tiles' own
#:   prefetch of W into L2, 4 and 8 rows at a time ran within the noise at 1 to 3 rows
#:   of A, 2 rows 1.1x slower (benchmarks/DECISIONS.md, "Zen 5's read_streams stays 4");
#: * ``prefetch_burst_lines``: the lines of W a skinny ``A @ W`` tile's block of rows
#:   (which the tile before it prefetches at once) may hold: on Zen 4, 1 thread, CPU
#:   time, under load, 4096 x 11008 W, blocks of 4 rows at 1 row of A (8 vectors of
#:   columns a tile: 32 lines), 8 at 4 (6 vectors: 48), 16 at 8 and 16 (3 vectors: 48)
#:   ran fastest of 4, 8 and 16 rows, 5 and 6 rows fastest at 16 (``row_block``: at
#:   least 2 M rows) (benchmarks/DECISIONS.md, "Skinny GEMM: A @ W's
#:   block of rows by the lines a tile prefetches (Zen 4)"); unmeasured elsewhere (the
#:   Xeon's blocks of 16 rows kept);
#: * ``strip_prefetch_rows``: how many rows ahead a skinny ``A @ W`` read as column
#:   strips (``strategy.cpu.skinny._schedule_strips``, 5 to 12, 14 and 16 rows of A) prefetches W:
#:   on Zen 4, 1 thread, CPU time, under load, 4096 x 11008 W, 8 rows 1.20x and 1.51x
#:   faster than the blocks of rows in two runs 64 rows ahead (32: 1.20x in one), 6 rows
#:   1.32x, 5 rows 1.13-1.21x (three runs); 4 rows a tie, 3 rows 0.86x, 2 rows 0.61x
#:   (benchmarks/DECISIONS.md, "Skinny GEMM: A @ W as column strips (Zen 4)"; 9 to 12
#:   rows in one block of 2-3 vectors: "... up to 12 rows (Zen 4)"; 14 and 16 rows in
#:   blocks of rows: "... in blocks of rows (Zen 4)"); unmeasured elsewhere (0: no strips);
#: * ``selection_prefetch_bytes``: how far ahead an argmax/argmin along short rows
#:   prefetches its rows (Zen 5 has no ``row_prefetch_bytes``: a row sum over rows of 1
#:   KiB ran 0.87-1.05x with 1-16 KiB ahead, 1 thread, CPU time): there an int64
#:   argmax over the last axis of 8x64x128x256 ran 2.2x faster 4 KiB ahead than with
#:   none (2.23 against 5.01 ms, 71% of the read stream against 32%; argmin 2.1x; an
#:   int32 argmax 1.9x; 1 thread, CPU time, under load: benchmarks/history/2026-12-02.md,
#:   session 23).
#: * ``window_prefetch_bytes``: how far ahead a 2-d max pooling over short padded rows
#:   prefetches its data rows: on Zen 5 (session 23), max_pool2d 3x3/2 p1 over
#:   16x64x56x56 and 32x64x56x56 ran 1.4x faster 8 output rows (of 2 data rows of 224
#:   B: 3584 B) ahead than with none, 4 rows 1.15x slower than 8; on Zen 4 (session 24)
#:   the same kernel over 32x64x56x56 ran 0.79x as fast 8 rows ahead: none (1 thread,
#:   CPU time, under load: benchmarks/history/2026-12-02.md).
#: * ``column_prefetch_bytes``: how far ahead a column reduction prefetches the rows
#:   of its passes ahead into L2: on Zen 4 (session 25), a column sum of 4096 x 4096 float32 read 8 rows
#:   a pass (128 KiB) ran at 97-98% of the read stream 1 or 2 passes ahead, 77% with
#:   none; 4 rows a pass 87% 1 pass ahead, 91% 2, 89% 4; a column max 87-90% against
#:   74% (1 thread, CPU time, under load: benchmarks/DECISIONS.md, "Column reductions:
#:   the passes ahead prefetched").  128 KiB: one or two passes.
#: * ``dot_w_l2_share``: on Zen 4 (session 26) the int8 GEMM 1024^3 (its packed W 1 MiB,
#:   the whole L2) ran 2.5-4.8% faster row block by row block than column panel by column
#:   panel in ten interleaved runs (1 thread, CPU time, under load: benchmarks/
#:   DECISIONS.md, "Tensorize rule: rows outer on Zen 4, X and C prefetched"), where on
#:   Zen 5 (session 8) the column panels had won by 4% at the same size: 1.0 (the whole
#:   L2) on Zen 4, half of it elsewhere.
#: * ``stream_load_bytes``: on Zen 4 (session 29) a plain read of 64 MiB (2 MiB pages,
#:   1 thread, CPU time, under load) ran 1.08-1.11x faster with four 256-bit
#:   accumulators (PyTorch's loop) than with four 512-bit ones (tecomp's), every round
#:   faster in two runs (two 256-bit ones as four; eight 256-bit ones, 1-8 512-bit
#:   ones, 1 to 4 prefetches a step 0.5-4 KiB ahead, two streams a thread: nothing or a
#:   loss); the benchmark's float row sums, means and products so compiled 1.02-1.11x
#:   (1 thread) and 1.06-1.26x (2 threads); a row min 0.92-0.93x, a row max 0.92-0.99x:
#:   float sums, means and products only (benchmarks/DECISIONS.md, "Reductions: 256-bit
#:   loads from memory (Zen 4)").  The quiet re-measures of the merged code read ties
#:   (2 threads 0.83-1.16x and, over 15 rounds, 0.95-1.04x; 1 thread 0.92-1.29x against
#:   0.85-1.09x for rows it does not change): not set for Zen 4 (0: its registers' width)
#:   until a run shows the gain.
MEASURED: Dict[str, Dict[str, object]] = {
    "znver4": {"fma_bits": 256, "gather_cost": 4.0, "transpose_cost": 0.8,
               "split_loads_cheap": True, "prefetch_burst_lines": 48,
               "column_prefetch_bytes": 131072, "strip_prefetch_rows": 64,
               "dot_w_l2_share": 1.0},
    "znver5": {"fma_bits": 512, "gather_cost": 2.1, "transpose_cost": 0.66,
               "split_loads_cheap": False, "gemm_load_cost": 0.5, "read_streams": 4,
               "selection_prefetch_bytes": 4096, "window_prefetch_bytes": 3584},
}
