"""Skinny GEMMs: a few rows against a large weight matrix (a GEMV, LLM decoding).

``C[i, j] = sum_k A[i, k] * W[j, k]`` (``A @ W^T``, a linear layer: ``tecomp.nn.dense``)
or ``... * W[k, j]`` (``A @ W``: ``tecomp.nn.matmul``) with at most
:data:`SKINNY_MAX_ROWS` rows does ``2 * M`` flops per element of W, each read once: it
is bound by the speed W streams from memory, not by the FMAs.  The schedule reads W
once, in place (no packed copy, which would read and write it once more), each thread
streaming its own columns of C, the sums accumulated in vector registers:

* ``W[j, k]`` (each output reads one contiguous row of W): vectors along ``k``, a
  register tile of ``mb`` rows of A by ``nb`` rows of W (``mb * nb`` accumulators,
  ``mb + nb`` vector loads per ``mb * nb`` FMAs), their lanes summed at the end; the
  reduction in blocks of ``kb`` (A's ``M x kb`` block fills at most half of L1 and is
  re-read from there by every tile of the thread task's rows of W, the accumulators
  kept in the task's buffer between blocks; with whole rows of A re-read from L2
  instead, 16 rows ran 1.3x slower, 1 thread on the Xeon, under load); below
  :data:`A_IN_L2_MIN_ROWS` rows, a tile reads at most the machine model's
  ``read_streams`` rows of W at a time, each
  whole where all of A fits in L1 (each block of a row is a stream they pick up again;
  2 rows x 4096 columns, Zen 5, 1 thread, under load: 4 rows of W at a time, whole,
  83-91% of the read stream; in blocks of 2048 columns 80-87%; 8 rows 76%, 2 rows 72%);
  from :data:`A_IN_L2_MIN_ROWS` rows on, where A fits in a quarter of L2, the
  rows of W are read whole, A re-read from L2, and prefetched as they go (below; 1
  thread, Zen 4, under load: 8 rows 12.3 ms against 17.4 in blocks of 512 columns, 12
  rows 15.4 against 20.8); from :data:`PREFETCH_MIN_ROWS` rows on, A is read from a copy whose rows lie in
  different cache sets (``storage_align``; rows 16 KiB apart shared one set with the
  tile's rows of W) and, where A does not fit, each tile prefetches its rows of W in
  the next block (a task's rows are each read a block at a time: too many streams for
  the hardware prefetchers); each step of a tile also prefetches into L2 one line of
  each of its rows of W :data:`L2_PREFETCH_BYTES` ahead (a block of four
  such distances or more; in the tile's last steps, the start of the next tile's rows,
  ``SkinnyPlan.stream_carry``: clamped at the rows' ends instead, the next tile started
  on the hardware prefetchers alone, 1 thread, Zen 5, under load: 1 row 1.17x slower, 2
  rows 1.08x, 4 rows 1.03x, 8 rows 1.05x; 12 and 16 rows along A's rows the same) or of
  the next tile's rows (``SkinnyPlan.stream``,
  ``stream_level``; into L1 the prefetches held the loads up: 4 rows, 1 thread, Zen 4,
  under load, 48-53% of the read stream against 71-78%; below 4 rows too, against the
  hardware prefetchers alone, 1 thread, Zen 4, under load: 1 row 5.6 ms against 6.7,
  94% of the read stream against 79%, 2 rows
  5.9 against 6.6, 3 rows 6.4 against 7.0; 2 threads: 1 row 5.8 against 6.5); from 2
  rows on, where the
  machine model's FMAs take a memory operand (``memory_operands``: x86), each FMA loads
  its vector of W itself (``pragma load_each_use``, ``SkinnyPlan.w_each_use``) rather
  than the ``mb`` FMAs reading one load of it into a register: a renamed vector register
  fewer per vector of W in flight, so the core holds more lines of W on their way (4
  rows, 1 thread, Zen 4, under load: 6.7 ms against 7.8, 2 rows 6.7 against 7.2, 8 rows
  11.3 against 12.1; in C models of the 4 x 6 tile 81-90% of the read stream against
  68-81% with W's vectors held in registers, benchmarks/skinny_ceiling.py); where the
  rows leave their last vector more than half full (9 to 16 rows with AVX-512's 16
  lanes, :func:`rows_fill_lanes`), the vectors run along A's rows instead, W's
  elements broadcast, the lanes past ``M`` masked off (``SkinnyPlan.rows_in_lanes``,
  :func:`_schedule_rows_in_lanes`; by default where the FMAs take a broadcast operand
  and the loads a mask: AVX-512, the machine model's ``masks``); where those vectors
  would leave lanes idle (9 to 14 rows of 16 lanes) and the machine model's FMAs are
  narrower than a register (``fma_lanes``: AMD Zen 4), each vector runs across A's rows
  and a few steps of ``k`` instead, the FMAs of ``M`` rows exactly
  (:func:`rows_k_lanes`, :func:`_schedule_rows_k_lanes`, ``SkinnyPlan.k_lanes``:
  1 thread, Zen 4, under load, 9 to 13 rows 1.22-1.67x faster, 14 rows 1.02-1.13x);
* ``W[k, j]``: vectors along ``j``, a register block of ``mb`` rows by ``nv`` vectors,
  ``A[i, k]`` broadcast (``nv`` vector loads of one row of W and ``mb`` broadcasts per
  ``mb * nv`` FMAs; from 2 rows on, where the machine model's ``memory_operands`` and
  the block holds all the rows of A, each FMA loads its vector of W itself, as above:
  1 thread, Xeon, under load, 4 rows 13.1 ms against 15.0, 8 rows 13.8 against 15.2;
  with two blocks of rows each vector of W is loaded once per row, from L1 the second
  time, and the loads outnumber the FMAs: 16 rows 19.0-21.5 ms against 16.3-16.7 with
  W's vectors in registers), accumulated in registers over a block of :data:`K_BLOCK`
  rows of W and added into C after each (where a register block's rows of A, read at
  one column at every step, fill a set of L1, :func:`rows_fill_a_set`, from a copy of A
  with its rows in other sets: :data:`COPY_A_KFIRST`, the column strips below too).
  Each thread has one task
  (:func:`_row_task_tiles`): its share of the columns, whose tiles go across the same
  block of rows one after the other, so that each row of W is read as one run of the
  thread's columns, the block's rows side by side as streams the hardware prefetchers
  follow, and C's strip (``M`` rows by the task's columns) is loaded and stored once
  per block, from L2 (a task of fewer tiles where the strip would fill more than half
  of it).  (``A @ W``, 4096 x 11008, 1 thread, Xeon, under load: 4 rows 13.1 ms, 96%
  of the read stream, where tasks of 16 tiles and blocks of 1024 rows took 25.5-27.5,
  8 rows 13.8 against 37.7, 16 rows 16.3 against 65; with blocks of 16 rows, tasks of
  16 tiles 1.08x slower at 1 row, 1.59x at 4 and 1.33x at 16.)  Each tile, as it
  starts, prefetches into L2 the block of rows of the tile :data:`TILES_AHEAD` on (its
  ``kb`` rows by its columns, a line at a time: ``skinny.stream`` ``"tile"``,
  ``skinny.stream_level``, ``skinny.tiles_ahead``; the next tile's before): the
  hardware prefetchers alone fell behind where a tile's FMAs hold the core (16 rows: the
  second block of rows reads W from L1 and issues no misses).  (1 thread, Xeon, under
  load, two runs: 1 row 0.99-1.01x, 2 rows 1.05-1.07x, 4 rows 1.15-1.18x, 8 rows
  1.06-1.10x, 16 rows 1.08-1.09x faster than without, 80-86% of the read stream; into
  L1 instead 1.01-1.04x slower at 1-4 rows, 1.03-1.05x faster at 8 and 16.  Prefetched at each step of the rows instead, 1 tile to 4 KiB ahead, W ran
  no faster and 1.4-1.5x slower at 16 rows: with a prefetch in the step loop LLVM no
  longer keeps C's block in registers over the block of rows but stores it at every
  step.  A batched ``p @ V``, 32 x 1 x 4096 @ 4096 x 128,
  one tile a row: blocks of 16 to 4096 rows within the noise of the same schedule run
  twice, 12% on 1 thread and 22% on 2.)

The tiles are sized to the vector registers of the target's machine model (its lanes and
registers, :class:`~tecomp.target.CpuModel`), the reduction blocks to its L1; the
columns of C are shared out between the threads in tasks (``W[j, k]``: of up to
:data:`TASK_TILES` tiles, two tasks or more per thread; ``W[k, j]``: one a thread),
the rows of A (``M / mb`` blocks) re-read from cache inside each.

Batch axes in front (``C[b.., i, j]``, each batch with its own W: ``batch_matmul``, a
decoding step's ``q @ k^T`` per head) are fused with the column tasks into the one
parallel loop.

The auto-scheduler (:func:`tecomp.strategy.apply_rules`) gives every such GEMM this
schedule, whether written in plain TE or with ``tecomp.nn``, its decisions as knobs
(``skinny``, ``skinny.rows``, ``skinny.cols``, ``skinny.kblock``, ``skinny.copy_a``,
``skinny.prefetch``, ``skinny.stream``, ``skinny.stream_level``, ``skinny.stream_bytes``,
``skinny.stream_carry``, ``skinny.rows_in_lanes`` (also where the rows fill the FMAs'
fewer lanes, :func:`fma_lanes_rows`), ``skinny.k_lanes``, ``skinny.lanes_rows``,
``skinny.w_each_use``, ``skinny.task_tiles``, ``skinny.strip_ahead``,
``skinny.strip_carry``, ``skinny.strip_block``, ``skinny.tiles_ahead``).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Optional

from ...schedule.schedule import Schedule, Stage, create_schedule
from ...te.tensor import ComputeOp, PlaceholderOp, Tensor
from ...target import CpuModel
from .._common import _ceil, _cint, _contraction_operands, _is_injective, _walk
from ..rules import Knobs
from .elementwise import _gemm_epilogues
from .microkernel import accumulate_lanes, lane_vectors, vector_columns

#: the most rows (of C and A) a GEMM may have to be scheduled as a skinny one (above it
#: the register-blocked GEMM templates, which reuse W across more rows, take over)
SKINNY_MAX_ROWS = 16

#: ``W[k, j]``: the rows of W a register block accumulates over before it is added
#: into C: rows read side by side, each a stream of the thread's columns that the
#: hardware prefetchers follow (1 to 16 rows of A, 1 thread, Xeon, under load: blocks
#: of 8 rows 0.92-1.03x the time of 16, of 32 rows 0.99-1.12x, of 64 rows 2.1-2.3x;
#: measurements: benchmarks/DECISIONS.md, "Skinny GEMM: A @ W in blocks of 16 rows, one
#: task a thread"); fewer where the machine model's ``prefetch_burst_lines`` says so
#: (:func:`row_block`: AMD Zen 4)
K_BLOCK = 16

#: the bytes of one way of L1d (48 KiB in 12 ways on Zen 5, 32 in 8 on Intel cores):
#: rows this many bytes apart fall into the same sets
CACHE_WAY_BYTES = 4096

#: ``W[j, k]``: from this many rows on, A is read from a copy whose rows lie in other
#: cache sets and each tile's rows of W are prefetched a block of the reduction ahead
#: (16 rows, 1 thread, Zen 5, under load: 10.7-11.7 ms against 18-20; 8 rows 7.7
#: against 11.4; 4 rows, a block of 1024 columns, 6.8-7.9 against 6.3-7.0: slower)
PREFETCH_MIN_ROWS = 8

#: ``W[j, k]``: below this many rows a tile reads at most the machine model's
#: ``read_streams`` rows of W, each whole where all of A fits in L1; from it on (4 FMAs
#: or more per line of W) the rows of W are read whole where A fits in a quarter of L2,
#: A re-read from L2.  The tiles of any row count prefetch W as they stream it
#: (``SkinnyPlan.stream``, :func:`_stream_prefetch`): the FMAs held up by lines still
#: on their way fill the core's window, and the hardware prefetchers alone fall behind.
#: Into L2 (``prefetcht1``) 2 KiB ahead, not into L1: in C models of the 4 x 6 tile
#: (benchmarks/skinny_ceiling.py, 1 thread, Zen 4, under load) 82-87% of the read
#: stream against 73-76% without a prefetch and 64-67% with ``prefetcht0`` 1 KiB ahead;
#: ``prefetcht1`` 4 KiB 81-82%, 8 KiB 76%; tecomp's kernel 71-78% against 48-53% into L1
#: (1 and 2 rows, in earlier measurements into L1 on Zen 5: slower or no change; into
#: L2 on Zen 4: faster, see the module docstring)
A_IN_L2_MIN_ROWS = 4

#: ``W[j, k]``: the distance, in bytes of each row, that served best prefetching W into
#: L1 (the knobs ``skinny.stream_level`` 1 and ``skinny.stream_bytes`` 1024; 16 vector
#: steps of 16 lanes; 4 rows, 1 thread, Zen 5: 6.4 ms, against 6.6 at half the distance
#: and 6.7 at twice)
PREFETCH_BYTES = 1024

#: ``W[j, k]``: how far ahead a tile prefetches its own rows of W into L2
#: (``SkinnyPlan.stream_level`` 2, the default), in bytes of each row (32 vector steps
#: of 16 lanes; see :data:`A_IN_L2_MIN_ROWS`)
L2_PREFETCH_BYTES = 2048

#: ``W[k, j]``: from this many rows on (and where one register block holds them all),
#: a machine model with a ``strip_prefetch_rows`` has W read as column strips
#: (:func:`_schedule_strips`; 1 thread, Zen 4, under load: 5 rows 1.13-1.21x faster in
#: three runs, 6 rows 1.32x, 8 rows 1.20-1.51x, 4 rows a tie in three, 3 rows 0.86x, 2
#: rows 0.61x)
STRIP_MIN_ROWS = 5

#: ``W[k, j]``: the A/B switch of the strips past one block of :func:`skinny_tile`
#: (:func:`strip_tile`): True, a machine model with a ``strip_prefetch_rows`` reads W
#: as column strips from :data:`STRIP_MIN_ROWS` to :data:`STRIP_MAX_ROWS` rows, in one
#: register block of all the rows by two vectors or more (9 x 3, 10 to 12 x 2 with 32
#: registers) where :func:`skinny_tile` splits them into two blocks; False, only where
#: its block already holds all the rows (5 to 8 rows).  (1 thread,
#: Zen 4, CPU time, under load, W 4096 x 11008: 9 rows 1.19-1.31x faster in three
#: runs, 11 rows 1.14x in one, 10 rows 0.94-1.12x in three, 12 rows 0.91-1.13x in five:
#: a tie on one thread, where W's transfer and the FMAs hardly overlap; with W in L2,
#: 512 x 384, the FMAs alone, 77-94% of the FMA peak against 61-80% at every row count,
#: 1.2-1.4x: on two threads, where each core's FMAs at 12 rows need 85% of its peak
#: to keep up with 85% of the read stream, the case for the strips, unmeasured there;
#: benchmarks/DECISIONS.md, "Skinny GEMM: A @ W as column strips up to 12 rows (Zen 4)")
STRIPS_PAST_ONE_BLOCK = True

#: ``W[k, j]``: the most rows read as column strips (:func:`strip_tile`; 14 rows x 2
#: vectors, 1 thread, Zen 4, under load, 0.82-0.94x the blocks of rows, two runs)
STRIP_MAX_ROWS = 12

#: ``W[k, j]``: the A/B switch of column strips in blocks of rows (:func:`_schedule_strips`
#: with :func:`skinny_tile`'s blocks of rows): True, a machine model with a
#: ``strip_prefetch_rows`` reads W as column strips past :data:`STRIP_MAX_ROWS` rows too,
#: the reduction in blocks of that many rows of W, each block of rows of A accumulating
#: over it in registers in turn (W's block re-read from L1), W prefetched a block ahead,
#: where the blocks are equal (14 and 16 rows: 7 x 3, 8 x 3; 13 rows, 7 + 6, ran 0.88x);
#: False, those rows in :func:`skinny_tile`'s blocks of rows over the whole width (C's
#: strip loaded and stored from L2 once per :func:`row_block`).  (16 rows, 1 thread, Zen
#: 4, CPU time, under load: 1.04-1.23x faster; benchmarks/DECISIONS.md, "Skinny GEMM:
#: A @ W as column strips in blocks of rows (Zen 4)")
STRIP_ROW_BLOCKS = True

#: ``W[j, k]``: the A/B switch of vectors along A's rows where the rows fill more than
#: half of the FMAs' fewer lanes (:func:`fma_lanes_rows`: 5 to 8 rows on AMD Zen 4, one
#: vector of 8 lanes or fewer, the FMA time of the tile along ``k``): True, that form by
#: default there; False (the default), the tile along ``k``, the form through the knob
#: ``skinny.rows_in_lanes`` only.  (4096 x 11008, 1 thread, Zen 4, CPU time, under
#: load: 8 rows 0.97-1.34x in six runs, the median 1.0x, 0.96-1.10x in session 24's
#: three; 5 to 7 rows, part of each vector idle, 0.68-0.97x; benchmarks/DECISIONS.md,
#: "Skinny GEMM: A @ W^T of 5 to 8 rows along A's rows in the FMAs' lanes".)
#: Unmeasured on two threads, where each Zen 4 core's FMAs at 8 rows take about 60% of
#: the read stream's time rather than all of it.
FMA_LANES_ROWS = False

#: ``W[j, k]``: the A/B switch of vectors across A's rows and a few steps of ``k``
#: (:func:`rows_k_lanes`, :func:`_schedule_rows_k_lanes`) where vectors along A's rows
#: would leave lanes idle and the machine model's FMAs compute fewer lanes than a
#: register holds (AMD Zen 4: 12 rows as 3 vectors of 4 rows x 4 steps, the FMAs of 12
#: rows exactly, against one vector of 16 lanes, 4 of them masked off): True, that form
#: by default there; False, vectors along A's rows (the knob ``skinny.k_lanes`` only).
#: (4096 x 11008, 1 thread, Zen 4, CPU time, under load, two runs each: 9 / 10 / 11 / 12
#: / 13 / 14 rows 1.55-1.67x / 1.53-1.59x / 1.33-1.34x / 1.30x / 1.22-1.23x / 1.02-1.13x
#: faster; 5 to 8 rows, where the tile
#: along ``k`` is the default, through the knobs: 5 and 7 rows 0.93-0.96x, 6 rows 1.16x,
#: 8 rows 1.49x against a tile along ``k`` that varies from run to run;
#: benchmarks/DECISIONS.md, "Skinny GEMM: A @ W^T across A's rows and k steps (Zen 4)".)
#: Unmeasured on two threads and on full-width FMAs (Zen 5, Xeon: the knob).
K_LANES_ROWS = True

#: ``W[k, j]``: the A/B switch of A's copy with its rows in other cache sets
#: (:func:`_aligned_copy_of_a`) where a register block's rows of A, read at the same
#: column at every step, put as many lines into one set of L1 as it has ways
#: (:func:`rows_fill_a_set`: K = 4096, rows 16 KiB apart, 8 rows or more on an 8-way
#: L1): True, by default there, in the column strips and the blocks of rows alike;
#: False, the knob ``skinny.copy_a`` only.  (4096 x 11008, 1 thread, Zen 4, CPU time,
#: under load: 12 rows, 12 x 2 strips, 1.16-1.24x faster in five runs; 10 rows
#: 1.08-1.17x; 8, 9, 11, 15 and 16 rows 0.89-1.16x, a tie to a small gain; the same
#: schedule timed twice 0.92x; benchmarks/DECISIONS.md, "Skinny GEMM: A @ W reads A from
#: a copy where its rows fill a set of L1 (Zen 4)".)
COPY_A_KFIRST = True

#: ``W[k, j]`` in blocks of rows (``skinny.stream`` ``"tile"``): each tile, as it
#: starts, prefetches the block of rows of the tile this many on (knob
#: ``skinny.tiles_ahead``; 1, the next tile's, before): a tile of 4 rows took about 190
#: ns, under the latency of memory, and one tile's lines in flight bounded the rate
#: (4096 x 11008, 1 thread, Zen 4, CPU time, under load: 4 rows 1.23-1.34x faster than
#: the next tile's, 3 rows 1.10-1.31x, 1 and 2 rows 1.02-1.08x, 13 and 15 rows a tie; 2,
#: 4 and 6 tiles ahead within the noise of 3 at 3 and 4 rows; benchmarks/DECISIONS.md,
#: "Skinny GEMM: A @ W's tiles prefetch a block three tiles ahead")
TILES_AHEAD = 3

#: ``W[k, j]``, column strips of one register block of all the rows: the A/B switch of
#: a strip's last ``strip_ahead`` steps prefetching the next tile's first rows (knob
#: ``skinny.strip_carry``, ``prefetch(carry=)``; loop partitioning parts those steps
#: from the rest, whose prefetch index loses its clamp) rather than the strip's own last
#: row again (False: each strip started with no row of it prefetched).  (4096 x 11008, 1
#: thread, Zen 4, CPU time, under load, four runs: 5 to 12 rows 1.01-1.12x faster in
#: every one of 22 comparisons, 12 rows 1.07-1.08x; benchmarks/DECISIONS.md, "Skinny
#: GEMM: A @ W's strips prefetch the next tile's first rows (Zen 4)".)
STRIP_CARRY = True

#: ``W[k, j]``, column strips in blocks of rows (:data:`STRIP_ROW_BLOCKS`: 14 and 16 rows
#: on Zen 4): the A/B switch of :data:`STRIP_CARRY` there (the last block's steps
#: prefetch the next tile's first block, ``prefetch(along=, carry=)``): False, the knob
#: only (1 thread, Zen 4, under load, two runs: 14 rows 0.82-0.85x, 16 rows 0.73-0.75x
#: as fast; the asm spills accumulators to the stack in the step loop)
STRIP_CARRY_BLOCKS = False

#: ``W[k, j]``: at most this many tiles of columns in one thread task (the task's rows
#: of W are read as streams this many tiles long), fewer where the threads would get
#: fewer than two tasks each
TASK_TILES = 16


@dataclass(frozen=True)
class SkinnyPlan:
    """A skinny GEMM found by :func:`skinny_plan`: its extents, whether W is read along
    its rows (``W[j, k]``: ``rows_of_w``) and the register tile: ``mb`` rows of A by
    ``nb`` rows of W (``rows_of_w``) or ``nb`` vectors of W's columns, accumulated in
    registers over ``kb`` steps of the reduction (vectors along A's rows,
    ``rows_in_lanes``: ``nb`` rows of W a tile, :func:`lanes_tile`, over all of it)."""
    M: int
    N: int
    K: int
    rows_of_w: bool
    mb: int
    nb: int
    kb: int = K_BLOCK
    batch: int = 1      # the product of the batch axes' extents (a batched GEMV)
    copy_a: bool = False  # A read from a copy with its rows in other sets (W[k, j]:
    #                       where a block's rows fill a set of L1, rows_fill_a_set)
    prefetch: int = 0     # W[j, k]: a tile's W prefetched this many blocks of k ahead
    stream: str = "off"   # W[j, k]: at each step, prefetch "rows" (the tile's own,
    #                       stream_bytes ahead) or "tile" (the next tile's), or "off";
    #                       W[k, j]: "tile" (at each tile, the next tile's block of
    #                       rows) or "off"
    rows_in_lanes: bool = False  # W[j, k], M's last vector more than half full
    #                              (rows_fill_lanes): vectors along A's rows instead
    #                              (_schedule_rows_in_lanes) may be chosen (by default
    #                              where the target has AVX-512)
    stream_level: int = 2  # W[j, k]: the cache level `stream` prefetches into
    stream_bytes: int = L2_PREFETCH_BYTES  # ... and how far ahead ("rows"), in bytes
    w_each_use: bool = False  # each FMA loads its vector of W itself (its memory
    #                           operand) where a tile has 2 rows of A or more (by
    #                           default where the machine model's memory_operands)
    task_tiles: int = 0   # W[k, j]: the tiles of columns in one thread task
    #                       (_row_task_tiles); W[j, k]: 0 (_task_tiles decides)
    stream_carry: bool = True  # W[j, k], stream "rows": a tile's last steps prefetch the
    #                            next tile's rows (prefetch carry=), not its own ends again
    rows_in_fma_lanes: bool = False  # W[j, k], M fills more than half of the FMAs' fewer
    #                                  lanes (fma_lanes_rows): vectors along A's rows
    #                                  may be chosen too (by default with FMA_LANES_ROWS)
    k_lanes: int = 0      # W[j, k], vectors along A's rows: 0, or that many steps of k
    #                       in each vector besides the rows (rows_k_lanes,
    #                       _schedule_rows_k_lanes; by default with K_LANES_ROWS)
    tiles_ahead: int = 1  # W[k, j], stream "tile": the tile whose block of rows each
    #                       tile prefetches, this many tiles on (TILES_AHEAD)
    strip_ahead: int = 0  # W[k, j]: 0, or each tile a column strip over all of K, its
    #                       accumulators in a local buffer, W prefetched this many rows
    #                       ahead at every step (_schedule_strips; by default the machine
    #                       model's strip_prefetch_rows from STRIP_MIN_ROWS to
    #                       STRIP_MAX_ROWS rows: strip_tile; past them, in equal blocks
    #                       of rows: STRIP_ROW_BLOCKS)
    strip_carry: bool = False  # W[k, j], strips of one block of all the rows: the
    #                            strip's last steps prefetch the next tile's first rows
    #                            (prefetch carry=), not its own last row again
    strip_block: int = 0  # W[k, j], strips in blocks of rows: 0, or the rows of W in a
    #                       block of the reduction (else strip_ahead's; still prefetched
    #                       strip_ahead rows ahead, a whole number of blocks)


def skinny_plan(op, info: CpuModel) -> Optional[SkinnyPlan]:
    """The plan of ``op`` when it is a skinny float32 GEMM ``C[b.., i, j] = sum_k
    A[b.., i, k] * W[b.., ., .]`` (batch axes or none, each operand with all of them;
    constant extents, at most :data:`SKINNY_MAX_ROWS` rows, both operands inputs of the
    DAG and A read along ``k``); else None."""
    if not isinstance(op, ComputeOp) or op.output(0).dtype != "float32":
        return None
    found = _contraction_operands(op)
    if found is None:
        return None
    nbatch, (a, a_kfirst), (w, w_kfirst) = found
    if a_kfirst or not all(isinstance(t.op, PlaceholderOp) and t.dtype == "float32"
                           and len(t.shape) == nbatch + 2 for t in (a, w)):
        return None
    *bs, M, N = (_cint(e) for e in op.shape)
    K = _cint(op.reduce_axis[0].dom.extent)
    if None in (M, N, K, *bs) or M > SKINNY_MAX_ROWS:
        return None
    batch = math.prod(bs)
    mb, nb = skinny_tile(M, N, not w_kfirst, info, batch)
    # (W[k, j]: each FMA loads its vector of W where the blocks of rows hold them all,
    # also when the strips below take one block of all the rows instead)
    each = info.memory_operands and (not w_kfirst or mb == M)
    strip = (w_kfirst and M >= STRIP_MIN_ROWS and info.strip_prefetch_rows
             and (mb == M or strip_tile(M, info) is not None
                  or STRIP_ROW_BLOCKS and M % mb == 0))
    if strip and mb != M and strip_tile(M, info) is not None:
        # one block of all the rows (STRIPS_PAST_ONE_BLOCK), at least two tiles a thread
        # where the columns allow (else, STRIP_ROW_BLOCKS: skinny_tile's blocks of rows)
        mb, nb = M, strip_tile(M, info)
        while nb > 1 and _ceil(N, nb * info.lanes) * batch < 2 * info.threads:
            nb -= 1
    if w_kfirst:
        kb = row_block(M, K, nb, info)
    elif M < A_IN_L2_MIN_ROWS and 4 * M * K <= info.l1_bytes:
        kb = K  # few rows of A: the rows of W read whole, A kept in L1
    elif 4 * M * K <= info.l2_bytes // 4:
        kb = K  # rows of W streamed into L2 ahead of the tile (stream "rows"): read
        #         whole, A re-read from L2
    else:   # A's block of M x kb: at most half of L1, whole vectors, dividing K if it can
        L = info.lanes
        most = max(L, info.l1_bytes // 2 // (4 * M) // L * L)
        fit = [b for b in range(most, most // 2, -L) if K % b == 0]
        kb = K if K <= most else (fit[0] if fit else most)
    # W[j, k] with 8 rows or more: A copied with its rows in other cache sets, and each
    # tile's W for the next block of the reduction prefetched (one prefetch per line of
    # W feeds 8 FMAs or more); see _aligned_copy_of_a and _schedule_rows_of_w
    dense = not w_kfirst and M >= PREFETCH_MIN_ROWS
    tasks = _row_task_tiles(M, N, nb, batch, info) if w_kfirst else 0
    return SkinnyPlan(M, N, K, not w_kfirst, mb, nb, kb, batch,
                      copy_a=(dense and rows_share_sets(K, mb) or w_kfirst
                              and COPY_A_KFIRST and rows_fill_a_set(K, mb, info)),
                      prefetch=1 if dense and kb < K else 0,
                      stream=_stream_prefetch(kb, w_kfirst, info),
                      # (no batch axis: a batch of one still has 3-d operands, which
                      # _schedule_rows_in_lanes's 2-d copy of A cannot take)
                      rows_in_lanes=not w_kfirst and nbatch == 0
                      and rows_fill_lanes(M, info.lanes),
                      rows_in_fma_lanes=not w_kfirst and nbatch == 0
                      and fma_lanes_rows(M, info),
                      w_each_use=each,
                      task_tiles=tasks,
                      tiles_ahead=TILES_AHEAD if w_kfirst else 1,
                      strip_ahead=info.strip_prefetch_rows if strip else 0)


def strip_tile(M: int, info: CpuModel) -> Optional[int]:
    """``W[k, j]``, where :data:`STRIPS_PAST_ONE_BLOCK`: the vectors of columns of a
    column strip (:func:`_schedule_strips`) whose one register block holds all ``M``
    rows, where :func:`skinny_tile` would split them into blocks: as many as the
    machine model's vector registers hold besides their loads (``M x nb`` accumulators,
    ``nb`` vectors of W and a register to spare: 9 x 3, 12 x 2 with 32), if that is two
    or more (16 rows x 1 vector, 17 loads per 16 FMAs, ran 1.7x slower) and ``M`` at
    most :data:`STRIP_MAX_ROWS`; else None."""
    nb = min(8, (info.vregs - 2) // (M + 1))
    return nb if STRIPS_PAST_ONE_BLOCK and nb >= 2 and M <= STRIP_MAX_ROWS else None


def _row_task_tiles(M: int, N: int, nb: int, batch: int, info: CpuModel) -> int:
    """``W[k, j]``: the tiles (of ``nb`` vectors of columns) of one thread task: the
    threads' share of the ``batch`` GEMMs' tiles, one task each, so that each thread
    reads its columns of every row of W as one run, fewer where the task's strip of C
    (``M`` rows by its columns, loaded and stored once per block of rows) would fill
    more than half of L2."""
    cols = nb * info.lanes
    tiles = _ceil(N, cols)
    fit = max(1, info.l2_bytes // 2 // (4 * M * cols))
    return max(1, min(tiles, fit, _ceil(tiles * batch, info.threads)))


def row_block(M: int, K: int, nb: int, info: CpuModel) -> int:
    """``W[k, j]``: the rows of W a register block of ``nb`` vectors of columns
    accumulates over before it is added into C: :data:`K_BLOCK`, or where the machine
    model has a ``prefetch_burst_lines``, the largest power of two of rows (at most
    :data:`K_BLOCK`) whose lines (``nb`` vectors of the model's lanes in each row) fit
    in it: the tile before prefetches the block at once (``skinny.stream`` ``"tile"``);
    but no fewer rows than the power of two at or above ``2 * M`` (C's strip, ``M`` rows
    loaded and stored once per block, would otherwise move more than the rows of W the
    block adds: 5 and 6 rows in blocks of 8 ran 0.90-0.94x the speed of 16, 12 rows
    0.67-0.88x).  (1 thread, Zen 4, under load: blocks of 16 rows held 61-68% of the
    read stream at 1 row of A against 71-77% with 4, 4 rows 49-54% against 52-57% with
    8; benchmarks/DECISIONS.md, "Skinny GEMM: A @ W's block of rows by the lines a tile
    prefetches (Zen 4)".)  At most ``K``."""
    kb = K_BLOCK
    if info.prefetch_burst_lines:
        per_row = max(1, nb * info.lanes * 4 // 64)   # lines of one row of the block
        fit = max(1, info.prefetch_burst_lines // per_row)
        kb = min(kb, max(1 << (fit.bit_length() - 1), 1 << (2 * M - 1).bit_length()))
    return max(1, min(K, kb))


def _stream_prefetch(kb: int, w_kfirst: bool, info: CpuModel) -> str:
    """``W[j, k]``: each step of a tile prefetches its own rows :data:`L2_PREFETCH_BYTES`
    ahead (``"rows"``) where a block of the reduction is long enough for that to run
    ahead of most of it (four distances or more), else the next tile's rows at the same
    step (``"tile"``: a block of the tile's rows of A later).  ``W[k, j]``: ``"tile"``,
    each tile prefetching, as it starts, the next tile's block of rows (see the module
    docstring)."""
    if w_kfirst:
        return "tile"
    return "rows" if kb // info.lanes >= 4 * prefetch_steps(info, L2_PREFETCH_BYTES) else "tile"


def prefetch_steps(info: CpuModel, ahead: int = PREFETCH_BYTES) -> int:
    """``ahead`` bytes (:data:`PREFETCH_BYTES` unless given) in vector steps of the
    reduction (float32)."""
    return max(1, ahead // (4 * info.lanes))


def rows_share_sets(K: int, mb: int) -> bool:
    """Whether ``mb`` rows of ``K`` float32 fall into fewer than ``mb`` different sets of
    the cache at a given column (their distance a multiple of a large power of two)."""
    return CACHE_WAY_BYTES // math.gcd(4 * K, CACHE_WAY_BYTES) < mb


def rows_fill_a_set(K: int, mb: int, info: CpuModel) -> bool:
    """Whether ``mb`` rows of ``K`` float32 put as many lines into one set of L1, at a
    given column, as it has ways (the machine model's ``l1_bytes`` over
    :data:`CACHE_WAY_BYTES`): read at the same column in turn at every step, with the
    lines of W passing through, they evict each other (``W[k, j]``, K = 4096: 8 rows or
    more of a register block on an 8-way L1)."""
    sets = CACHE_WAY_BYTES // math.gcd(4 * K, CACHE_WAY_BYTES)
    return _ceil(mb, sets) >= max(1, info.l1_bytes // CACHE_WAY_BYTES)


def skinny_tile(M: int, N: int, rows_of_w: bool, info: CpuModel, batch: int = 1):
    """The register tile ``(mb, nb)`` of an ``M``-row GEMM with ``N`` columns: ``mb``
    rows of A (in equal blocks of at most a quarter of the vector registers), and as many
    ``nb`` (rows of W, or vectors of its columns) as the registers hold besides the
    ``mb * nb`` accumulators and the operands' loads, at most 8 (rows of W with fewer
    than :data:`A_IN_L2_MIN_ROWS` rows of A: at
    most the machine model's ``read_streams``), fewer where the tiles would not give
    every thread two (counting the ``batch`` GEMMs' tiles)."""
    R = info.vregs
    # mb*nb accumulators, nb vectors of W and a vector of A (W[j, k]: A's vectors read
    # by the FMAs from L1; W[k, j]: broadcasts, folded into the FMAs) live per k step;
    # at most a quarter of the registers' rows of A in a block (8 x 3 with 32
    # registers; 16 rows x 1 vector, 17 loads per 16 FMAs, ran 1.3-1.5x slower in both
    # layouts), the row blocks re-reading the tile's block of W from L1
    rows = max(1, R // 4)
    mb = _ceil(M, _ceil(M, rows))
    nb = (R - 2) // (mb + 1)
    width = 1 if rows_of_w else info.lanes
    nb = max(1, min(nb, 8))
    if rows_of_w and M < A_IN_L2_MIN_ROWS:
        # as many rows of W at a time as the hardware prefetchers follow far enough
        # ahead (the machine model's read_streams, measured without W's prefetch)
        nb = max(1, min(nb, info.read_streams))
    while nb > 1 and _ceil(N, nb * width) * batch < 2 * info.threads:
        nb -= 1
    return mb, nb


def skinny_knobs(plan: SkinnyPlan, knobs: Knobs, info: CpuModel) -> SkinnyPlan:
    """``plan`` with its tile chosen through ``knobs`` (``skinny.rows``, ``skinny.cols``,
    ``skinny.kblock``, ...; where W is prefetched as it streams, ``skinny.stream_level``
    and ``skinny.stream_bytes``; the defaults :func:`skinny_tile`'s and
    :func:`skinny_plan`'s)."""
    # (skinny_tile's blocks of rows offered too where the plan took one block of all the
    # rows for column strips: STRIPS_PAST_ONE_BLOCK)
    bmb, bnb = skinny_tile(plan.M, plan.N, plan.rows_of_w, info, plan.batch)
    rows = sorted({plan.mb, plan.M, bmb} | {m for m in (1, 2, 4, 8) if m < plan.M})
    mb = knobs.choose("skinny.rows", rows, plan.mb)
    nb = knobs.choose("skinny.cols", sorted({plan.nb, bnb, 1, 2, 3, 4, 6, 8}), plan.nb)
    blocks = (4, 8, 16, 32, 64, 256, 1024) if not plan.rows_of_w else (256, 1024, plan.K)
    # (W[k, j]: the block of rows for the chosen tile)
    kb = plan.kb if plan.rows_of_w else row_block(plan.M, plan.K, nb, info)
    kb = knobs.choose("skinny.kblock", sorted({kb} | {b for b in blocks if b <= plan.K}), kb)
    copy_a = knobs.choose("skinny.copy_a", [False, True], plan.copy_a)
    pf = knobs.choose("skinny.prefetch", [0, 1, 2], plan.prefetch) if plan.rows_of_w else 0
    stream = knobs.choose("skinny.stream", ["off", "rows", "tile"] if plan.rows_of_w
                          else ["off", "tile"], plan.stream)
    task = plan.task_tiles
    if not plan.rows_of_w:  # W[k, j]: the tiles of a thread task, for the chosen tile
        tiles = _ceil(plan.N, nb * info.lanes)
        task = _row_task_tiles(plan.M, plan.N, nb, plan.batch, info)
        task = knobs.choose("skinny.task_tiles", sorted(
            {task} | {t for t in (1, 4, 16, 64, tiles) if t <= tiles}), task)
    # (by default with AVX-512, whose FMAs take W's element as a broadcast operand; with
    # AVX2 each would be a broadcast load of its own: unmeasured, the knob only)
    # (also where the rows fill the FMAs' fewer lanes, fma_lanes_rows: by default there
    # only with FMA_LANES_ROWS)
    lanes = (plan.rows_in_lanes or plan.rows_in_fma_lanes) and knobs.choose(
        "skinny.rows_in_lanes", [True, False],
        info.masks and (plan.rows_in_lanes or FMA_LANES_ROWS))
    each = not lanes and knobs.choose("skinny.w_each_use", [True, False], plan.w_each_use)
    q = 0
    if lanes and rows_k_lanes(plan.M, info):
        # (vectors across A's rows and a few steps of k: by default where vectors along
        # A's rows leave lanes idle and the model's FMAs are narrower than a register,
        # with K_LANES_ROWS)
        q = rows_k_lanes(plan.M, info)
        q = knobs.choose("skinny.k_lanes", [0, q], q if (
            K_LANES_ROWS and plan.rows_in_lanes and info.fma_lanes < info.lanes) else 0)
    if lanes:   # the rows of W in a tile of _schedule_rows_in_lanes (against 8 rows at 12
        #         and 16 rows of A, 1 thread, Xeon, under load: 12 rows 1.10x slower, 16
        #         rows 1.16-1.17x, 24 rows 1.29-1.33x, 4 rows 1.16-1.18x)
        nb = lanes_tile(plan.M, info, q)
        most = lanes_tile_most(plan.M, info, q)
        nb = knobs.choose("skinny.lanes_rows",
                          sorted({nb} | {r for r in (4, 8, 12, 16, 24) if r <= most}), nb)
    level, ahead = plan.stream_level, plan.stream_bytes
    if stream != "off":
        level = knobs.choose("skinny.stream_level", [1, 2], level)
    if stream != "off" and plan.rows_of_w:
        ahead = knobs.choose("skinny.stream_bytes", [1024, 2048, 4096], ahead)
    carry = plan.stream_carry
    if plan.rows_of_w and (stream == "rows" or lanes and stream != "off"):
        carry = knobs.choose("skinny.stream_carry", [True, False], carry)
    strip = 0
    if not plan.rows_of_w and (mb == plan.M or STRIP_ROW_BLOCKS and info.strip_prefetch_rows):
        # (W[k, j], one register block of all the rows, or blocks of rows where the
        # machine model has a strip_prefetch_rows: column strips, W prefetched this many
        # rows ahead at every step; see _schedule_strips)
        strip = knobs.choose("skinny.strip_ahead", [0, 32, 64, 128], plan.strip_ahead)
    ahead_tiles = plan.tiles_ahead
    if not plan.rows_of_w and stream == "tile" and not strip:
        # (W[k, j] in blocks of rows: the tile whose block each tile prefetches)
        ahead_tiles = knobs.choose("skinny.tiles_ahead", [1, 2, 3, 4, 6], ahead_tiles)
    block = plan.strip_block
    if strip and mb < plan.M:
        # (W[k, j], strips in blocks of rows: the rows of W in a block, 0 for strip_ahead)
        block = knobs.choose("skinny.strip_block", [0, 8, 16, 32], block)
    strip_carry = plan.strip_carry
    if strip:
        # (W[k, j], strips: whether the last steps prefetch the next tile's first rows;
        # in blocks of rows, by default with STRIP_CARRY_BLOCKS)
        strip_carry = knobs.choose("skinny.strip_carry", [False, True], STRIP_CARRY and (
            mb == plan.M or STRIP_CARRY_BLOCKS))
    return dataclasses.replace(plan, mb=mb, nb=nb, kb=kb, copy_a=copy_a, prefetch=pf,
                               stream=stream, rows_in_lanes=lanes, stream_level=level,
                               stream_bytes=ahead, w_each_use=each, task_tiles=task,
                               stream_carry=carry, strip_ahead=strip,
                               tiles_ahead=ahead_tiles, strip_block=block,
                               strip_carry=strip_carry,
                               rows_in_fma_lanes=plan.rows_in_fma_lanes and lanes,
                               k_lanes=q)


def schedule_skinny_stage(s: Schedule, C: Tensor, info: CpuModel, plan: SkinnyPlan) -> None:
    """Schedule the skinny GEMM stage ``C`` by ``plan`` (see the module docstring)."""
    if plan.rows_in_lanes and plan.k_lanes:
        _schedule_rows_k_lanes(s, C, info, plan)
        return
    if plan.rows_in_lanes:
        _schedule_rows_in_lanes(s, C, info, plan)
        return
    if plan.rows_of_w:
        _schedule_rows_of_w(s, C, info, plan)
        return
    if plan.strip_ahead:
        _schedule_strips(s, C, info, plan)
        return
    L = info.lanes
    nr = plan.nb * L
    if plan.copy_a:
        # (by default where the block's rows of A fill a set of L1, COPY_A_KFIRST: 15
        # rows in blocks of 8 with K = 4096; the knob skinny.copy_a elsewhere: 1 thread,
        # Zen 4, under load, 8 to 16 rows 0.97-1.10x, the same schedule timed twice
        # differing by up to 9%)
        _aligned_copy_of_a(s, C, C, L)
    st = s[C]
    *bs, i, j = st.op.axis
    tiles = _ceil(plan.N, nr)
    per_task = max(1, min(plan.task_tiles, tiles))
    jo, jr = st.split(j, factor=per_task * nr)
    jt, ji = st.split(jr, factor=nr)
    io, ii = st.split(i, factor=plan.mb)
    ko, ki = st.split(st.op.reduce_axis[0], factor=plan.kb)
    st.reorder(*bs, jo, ko, jt, io, ki, ii, ji)
    st.unroll(ii)
    vector_columns(st, ji, nr, L)
    _parallel_tasks(st, bs, jo, plan.batch * _ceil(tiles, per_task), info)
    st.pragma(ki, "unroll_count", 4)
    st.pragma(ki, "fp_contract")
    if plan.stream == "tile":
        # at each tile, the next tile's block of rows (at the tile, not at each step:
        # a prefetch inside the step loop keeps LLVM from holding C's block in registers)
        st.prefetch(_contraction_operands(C.op)[2][0], jt, plan.tiles_ahead,
                    level=plan.stream_level)
    if plan.w_each_use and plan.mb > 1:
        # each of the mb FMAs of a vector of W loads it (see the module docstring)
        st.pragma(ki, "load_each_use", _contraction_operands(C.op)[2][0].name)


def _schedule_strips(s: Schedule, C: Tensor, info: CpuModel, plan: SkinnyPlan) -> None:
    """``C[i, j] = sum_k A[i, k] * W[k, j]`` as column strips (knob
    ``skinny.strip_ahead``): each tile of ``nb`` vectors of columns accumulates all
    ``M`` rows over the whole reduction in a local buffer (``cache_write``: registers,
    which a prefetch in the step loop does not cost, unlike C's block accumulated in
    place), and at every step prefetches the rows of W ``strip_ahead`` steps ahead (its
    columns, into ``stream_level``'s cache).  W is read a few lines of each row at a
    time, down the rows; the hardware prefetchers do not follow that, the prefetches
    do; in a strip's last ``strip_ahead`` steps, the next tile's first rows
    (:data:`STRIP_CARRY`, knob ``skinny.strip_carry``; in blocks of rows only through
    the knob, :data:`STRIP_CARRY_BLOCKS`).  By default where the machine model has a ``strip_prefetch_rows`` (the distance)
    from :data:`STRIP_MIN_ROWS` to :data:`STRIP_MAX_ROWS` rows (past 8 rows with 32
    registers, one block of all the rows by fewer vectors: :func:`strip_tile`; past
    :data:`STRIP_MAX_ROWS`, where :func:`skinny_tile`'s blocks of rows are equal, the
    tile's accumulators are reached a block of ``plan.mb`` rows at a time, the reduction
    in blocks of ``strip_ahead`` rows of W, each block of rows of A accumulating over one
    in turn and W prefetched a block ahead: :data:`STRIP_ROW_BLOCKS`; the knob
    ``skinny.strip_block`` makes the blocks smaller, W still prefetched ``strip_ahead``
    rows ahead: with N = 11008 a block of 64 rows of 3 lines falls into 12 sets of L1,
    more lines than they hold, which the next block of rows of A re-reads; 16 and 32 rows
    ran no faster, 1 thread, Zen 4, under load: benchmarks/DECISIONS.md, "Skinny GEMM:
    A @ W's strips prefetch the next tile's first rows (Zen 4)").  (W 4096 x 11008, 1
    thread, Zen 4, under load,
    against the blocks of rows: 8 rows 1.20x and 1.51x 64 rows ahead, 6 rows 1.32x, 4
    rows a tie, 2 and 3 rows 0.61x and 0.86x; 16 rows x 1 vector, 17 loads per 16 FMAs,
    1.7x slower: benchmarks/DECISIONS.md, "Skinny GEMM: A @ W as column strips
    (Zen 4)".)"""
    L = info.lanes
    nr = plan.nb * L
    W = _contraction_operands(C.op)[2][0]
    CL = s.cache_write(C, "local")
    if plan.copy_a:
        _aligned_copy_of_a(s, CL, CL, L)
    st = s[C]
    *bs, i, j = st.op.axis
    tiles = _ceil(plan.N, nr)
    per_task = max(1, min(plan.task_tiles or tiles, tiles))
    jo, jr = st.split(j, factor=per_task * nr)
    jt, ji = st.split(jr, factor=nr)
    st.reorder(*bs, jo, jt, i, ji)
    st.unroll(i)
    vector_columns(st, ji, nr, L)
    _parallel_tasks(st, bs, jo, plan.batch * _ceil(tiles, per_task), info)
    cs = s[CL]
    cs.compute_at(st, jt)
    *_, ci, cj = cs.op.axis
    ck, = cs.op.reduce_axis
    _, cv = cs.split(cj, factor=nr)    # a tile's columns (the last one's guarded)
    cvo, cvi = cs.split(cv, factor=L)
    if plan.mb < plan.M:
        # blocks of rows (STRIP_ROW_BLOCKS): the reduction in blocks of strip_ahead rows
        # of W, each block of mb rows of A accumulating over one in registers in turn
        # (the block's lines re-read from L1), W prefetched a block ahead at every step
        # (in blocks of strip_block rows where that is set, still prefetched strip_ahead
        # rows ahead: a whole number of blocks)
        block = plan.strip_block or plan.strip_ahead
        cko, step = cs.split(ck, factor=block)
        cio, rows = cs.split(ci, factor=plan.mb)
        cs.reorder(cko, cio, step, rows, cvo, cvi)
    else:
        step, rows = ck, ci
        cs.reorder(ck, ci, cvo, cvi)
    cs.unroll(rows)
    cs.unroll(cvo)
    cs.vectorize(cvi)
    cs.pragma(step, "fp_contract")
    cs.pragma(step, "unroll_count", 4)
    # (strip_carry: the strip's last steps prefetch the next tile's first rows)
    carry = jt if plan.strip_carry else None
    if plan.mb < plan.M:
        cs.prefetch(W, step, max(1, plan.strip_ahead // block), along=cko,
                    level=plan.stream_level, carry=carry)
    else:
        cs.prefetch(W, ck, plan.strip_ahead, level=plan.stream_level, carry=carry)


def _task_tiles(plan: SkinnyPlan, tiles: int, info: CpuModel) -> int:
    """The tiles of one thread task: :data:`TASK_TILES`, fewer where the threads would
    get fewer than two tasks each (over the ``batch`` GEMMs)."""
    return max(1, min(TASK_TILES, tiles, _ceil(tiles * plan.batch, 2 * info.threads)))


def _parallel_tasks(st: Stage, bs, jo, tasks: int, info: CpuModel):
    """The task loop (the batch axes ``bs`` fused with the column tasks ``jo``), run in
    parallel where there are threads and ``tasks`` (its extent) is more than one;
    returns it."""
    task = st.fuse(*bs, jo) if bs else jo
    if info.threads > 1 and tasks > 1:
        st.parallel(task)
    return task


def _schedule_rows_of_w(s: Schedule, C: Tensor, info: CpuModel, plan: SkinnyPlan) -> None:
    """``C[i, j] = sum_k A[i, k] * W[j, k]``: vectors along ``k`` (``C.rf[i, j, kl]``,
    their lanes summed as a tree at the end, :func:`.microkernel.lane_vectors`); per thread
    task of rows of W, for each block of ``kb`` columns of A and W, each tile of ``nb``
    rows of W and each block of ``mb`` rows of A, the ``mb x nb`` accumulators in
    registers over the block (A's block of ``M x kb`` stays in L1 while the task's rows
    of W go by; the accumulators wait in the task's buffer between blocks)."""
    L = info.lanes
    rf, halves = lane_vectors(s, C, L)
    if plan.copy_a:
        _aligned_copy_of_a(s, C, rf, L)
    st = s[C]
    *bs, i, j = st.op.axis
    tiles = _ceil(plan.N, plan.nb)
    per_task = _task_tiles(plan, tiles, info)
    jo, jr = st.split(j, factor=per_task * plan.nb)
    st.reorder(*bs, jo, i, jr)
    st.unroll(st.op.reduce_axis[0])
    jo = _parallel_tasks(st, bs, jo, plan.batch * _ceil(tiles, per_task), info)
    for h in halves:
        hs = s[h]
        hs.compute_at(st, jo)
        *_, hi, hj, hq = hs.op.axis
        hk, = hs.op.reduce_axis
        hs.reorder(hj, hi, hk, hq)
        hs.unroll(hk)
        hs.vectorize(hq)
    kbo, tile, step = accumulate_lanes(s, rf, st, jo, plan.mb, plan.nb,
                                       max(1, plan.kb // L))
    W = _contraction_operands(C.op)[2][0]
    if plan.w_each_use and plan.mb > 1:
        # each of the mb FMAs of a vector of W loads it (its memory operand) rather than
        # one load into a register they all read (see the module docstring)
        s[rf].pragma(step, "load_each_use", W.name)
    if plan.prefetch and kbo is not None and plan.kb < plan.K:
        # at each tile, its rows of W in the next block of the reduction
        s[rf].prefetch(W, tile, plan.prefetch, along=kbo)
    if plan.stream == "rows":
        # at each step, a line of each of the tile's rows, stream_bytes ahead (in the
        # tile's last steps, of the next tile's rows: stream_carry)
        s[rf].prefetch(W, step, prefetch_steps(info, plan.stream_bytes),
                       level=plan.stream_level,
                       carry=tile if plan.stream_carry and tile is not None else None)
    elif plan.stream == "tile":
        # at each step, the line of each row of the next tile that it reads there
        s[rf].prefetch(W, step, 1, along=tile, level=plan.stream_level)


def rows_fill_lanes(M: int, lanes: int) -> bool:
    """``W[j, k]``: whether ``M`` rows of A, in vectors of ``lanes``, leave their last
    vector more than half full, so that vectors along A's rows
    (:func:`_schedule_rows_in_lanes`: ``ceil(M / lanes)`` FMAs per element of W, the
    lanes past ``M`` masked off) do fewer than twice the FMAs of vectors along ``k``
    (``M / lanes`` per element, and ``M / nb`` loads of A per vector of W besides).  (1
    thread, Xeon, AVX-512, under load: 9 to 15 rows 1.12-1.38x faster along A's rows
    than along ``k``, two runs; 8 rows within 2%; see benchmarks/DECISIONS.md, "Skinny
    GEMM: A @ W^T along A's rows from 9 rows".)"""
    return 2 * (M % lanes or lanes) > lanes


def fma_lanes_rows(M: int, info: CpuModel) -> bool:
    """``W[j, k]``: whether the machine model's FMAs compute fewer lanes than a register
    holds (``fma_lanes``: 8 of 16 on AMD Zen 4), with masks, and ``M`` rows of A fill
    more than half of those lanes but not more than half a register (5 to 8 rows there:
    :func:`rows_fill_lanes`): vectors along A's rows (:func:`_schedule_rows_in_lanes`,
    one vector of ``M`` lanes, the rest of the FMAs' masked off) then cost the FMA time
    of vectors along ``k``, where on a core whose FMAs are a register wide they would
    cost up to twice it."""
    f = info.fma_lanes
    return bool(info.masks and f < info.lanes and M <= f and rows_fill_lanes(M, f)
                and not rows_fill_lanes(M, info.lanes))


def lanes_tile(M: int, info: CpuModel, q: int = 0) -> int:
    """The rows of W in one tile of :func:`_schedule_rows_in_lanes` (``M`` rows of A in
    ``ceil(M / lanes)`` vectors; with ``q``, :func:`_schedule_rows_k_lanes`'s ``M * q /
    lanes``): as many accumulators as keep the FMA units busy (the machine model's
    ``fma_latency x fma_ports``, each a vector of A's rows), fewer where the registers
    do not hold them with a vector of A."""
    return max(1, min(info.fma_latency * info.fma_ports, lanes_tile_most(M, info, q)))


def lanes_tile_most(M: int, info: CpuModel, q: int = 0) -> int:
    """The most rows of W a tile of :func:`_schedule_rows_in_lanes` may hold: their
    accumulators (``ceil(M / lanes)`` vectors each; with ``q``, ``M * q / lanes``), the
    vectors of one column of ``A^T`` and a register to spare in the machine model's
    vector registers."""
    vecs = _ceil(M * q, info.lanes) if q else _ceil(M, info.lanes)
    return max(1, (info.vregs - 1 - vecs) // vecs)


def rows_k_lanes(M: int, info: CpuModel) -> int:
    """``W[j, k]``: the fewest steps of ``k`` (``q``, a power of two below the machine
    model's lanes) whose ``M x q`` products fill whole vectors (``M * q`` a multiple of
    the lanes: 12 rows x 4 steps, 14 or 10 rows x 8 with 16 lanes; an odd ``M`` as ``M +
    1``, its last vector's lanes past ``M x q`` left out: 13 rows x 8 in 7 vectors, 11 x
    4 in 3), for :func:`_schedule_rows_k_lanes`; 0 where ``M`` (or ``M + 1``) fills whole
    vectors already (15 and 16 rows) or only ``q = lanes`` would (vectors along ``k``)."""
    L = info.lanes
    q = L // math.gcd(M + M % 2, L)
    return q if 1 < q < L else 0


def _schedule_rows_in_lanes(s: Schedule, C: Tensor, info: CpuModel,
                            plan: SkinnyPlan) -> None:
    """``C[i, j] = sum_k A[i, k] * W[j, k]`` with ``M`` rows in ``ceil(M / lanes)``
    vectors (:func:`rows_fill_lanes`; where ``M`` is not a multiple of the lanes, the
    last one's lanes past ``M`` left out: masked loads with AVX-512, one 512-bit vector
    for 12 rows): ``C^T = W @ A^T`` as a GEMM whose vectors run
    along A's rows.  A is copied transposed (``A^T[k, i]``, ``M x K``: a vector of its
    rows is contiguous); a tile of ``plan.nb`` rows of W (:func:`lanes_tile`, knob
    ``skinny.lanes_rows``) keeps one accumulator per row (a vector of ``C[:, j]``)
    over the whole reduction, each step an FMA of the vector ``A^T[k, :]`` by ``W[j,
    k]`` broadcast: one vector load per tile's rows of FMAs, against ``mb + nb`` per ``mb
    x nb`` with vectors along ``k`` (whose 8 x 3 tile's loop ran at half the FMA peak
    with W in L2), and no lane sums.  Each step of a line of W prefetches each row into
    L2 :data:`L2_PREFETCH_BYTES` ahead (``skinny.stream`` off: none; 16 rows, 1 thread,
    Zen 4, under load: 14.2 ms against 15.0 into L1 1 KiB ahead).  The accumulators are
    written out transposed once per tile.  (16 x 4096 @ (11008 x 4096)^T, 1 thread, Zen
    5, under load: 7.9 ms against 10.7 with the 8 x 3 tile along ``k``, the FMA peak's
    5.5; 12 rows of W a tile 10.6 ms, the prefetch 2 KiB ahead 8.2, one line 9.1.)"""
    L = info.lanes
    nb = plan.nb
    A, W = (t[0] for t in _contraction_operands(C.op)[1:])
    At = s.cache_read(A, "global", [C])
    ai, ak = s[At].op.axis
    s[At].storage_order(ak, ai)
    aio, aii = s[At].split(ai, factor=L)
    s[At].reorder(ak, aio, aii)
    s[At].vectorize(aii)
    CL = s.cache_write(C, "local")
    st = s[C]
    jt = _lanes_tasks(st, plan, info)
    cs = s[CL]
    cs.compute_at(st, jt)
    ci, cj = cs.op.axis
    ck, = cs.op.reduce_axis
    cjo, cji = cs.split(cj, factor=nb)
    cio, cii = cs.split(ci, factor=L)
    ko, kv = cs.split(ck, factor=L)     # a step: one line of each row of W
    cs.reorder(cjo, ko, kv, cji, cio, cii)
    cs.unroll(kv)
    cs.unroll(cji)
    cs.unroll(cio)
    cs.vectorize(cii)
    cs.storage_order(cj, ci)
    cs.pragma(ko, "fp_contract")
    _lanes_prefetch(cs, W, ko, jt, plan, info)


def _lanes_tasks(st: Stage, plan: SkinnyPlan, info: CpuModel):
    """``C``'s stage ``st`` of :func:`_schedule_rows_in_lanes` and
    :func:`_schedule_rows_k_lanes`: its columns in thread tasks of tiles of ``plan.nb``
    rows of W (:func:`_task_tiles`), run in parallel, A's rows innermost; returns the
    loop over a task's tiles (where the tile's accumulators are computed)."""
    i, j = st.op.axis
    tiles = _ceil(plan.N, plan.nb)
    per_task = _task_tiles(plan, tiles, info)
    jo, jr = st.split(j, factor=per_task * plan.nb)
    jt, ji = st.split(jr, factor=plan.nb)
    st.reorder(jo, jt, ji, i)
    _parallel_tasks(st, [], jo, _ceil(tiles, per_task), info)
    return jt


def _lanes_prefetch(stage: Stage, W: Tensor, step, jt, plan: SkinnyPlan,
                    info: CpuModel) -> None:
    """At each ``step`` (a line of each of the tile's rows of W), those rows
    ``plan.stream_bytes`` ahead (in the tile's last steps, the next tile's: ``jt``,
    ``stream_carry``), unless ``plan.stream`` is off."""
    if plan.stream != "off":
        stage.prefetch(W, step, prefetch_steps(info, plan.stream_bytes),
                       level=plan.stream_level, carry=jt if plan.stream_carry else None)


def _schedule_rows_k_lanes(s: Schedule, C: Tensor, info: CpuModel,
                           plan: SkinnyPlan) -> None:
    """``C[i, j] = sum_k A[i, k] * W[j, k]`` with each vector across A's rows and
    ``q = plan.k_lanes`` steps of ``k`` (:func:`rows_k_lanes`: lane ``i * q + kq``
    holds row ``i``'s products at ``k = ko * q + kq``; ``M * q / lanes`` vectors, none
    of its lanes idle): the FMAs of ``M`` rows exactly, where vectors along A's rows
    (:func:`_schedule_rows_in_lanes`) compute ``ceil(M / lanes)`` whole vectors (12
    rows: 16 lanes) and vectors along ``k`` read ``M / nb`` vectors of A per vector of
    W.  A is copied as ``[K / q, M, q]`` (``cache_read`` ``blocks=``, stored ``ko, i,
    kq``: a vector of it is contiguous); ``C.rf[i, kq, j]`` (rfactor of ``k``'s inner
    ``q``) keeps a tile of ``plan.nb`` rows of W's accumulators in registers over the
    whole reduction, each step one load of each of the tile's rows' ``q`` elements,
    repeated across the vector (``vbroadcastf32x4`` with AVX-512 at 12 rows), and an FMA
    of each of A's vectors by it; ``C`` sums the ``q`` lanes of each row at the end.
    W is prefetched as :func:`_schedule_rows_in_lanes` does."""
    L = info.lanes
    q, nb = plan.k_lanes, plan.nb
    A, W = (t[0] for t in _contraction_operands(C.op)[1:])
    st = s[C]
    _, kq = st.split(st.op.reduce_axis[0], factor=q)
    rf = s.rfactor(C, kq, factor_axis=1)
    Ab = s.cache_read(A, "global", [rf], pad=0.0, blocks=[(1, q)])
    ai, ako, akq = s[Ab].op.axis
    s[Ab].storage_order(ako, ai, akq)
    s[Ab].reorder(ako, ai, akq)
    s[Ab].vectorize(akq)
    st.unroll(st.op.reduce_axis[0])
    jt = _lanes_tasks(st, plan, info)
    rs = s[rf]
    rs.compute_at(st, jt)
    ri, rq, rj = rs.op.axis
    rk, = rs.op.reduce_axis
    rjo, rji = rs.split(rj, factor=nb)
    lane = rs.fuse(ri, rq)
    lo, li = rs.split(lane, factor=L)
    ko, kv = rs.split(rk, factor=max(1, L // q))   # a step: one line of each row of W
    rs.reorder(rjo, ko, kv, rji, lo, li)
    rs.unroll(kv)
    rs.unroll(rji)
    rs.unroll(lo)
    rs.vectorize(li)
    rs.storage_order(rj, ri, rq)
    rs.pragma(ko, "fp_contract")
    _lanes_prefetch(rs, W, ko, jt, plan, info)


def _aligned_copy_of_a(s: Schedule, C: Tensor, rf: Tensor, L: int) -> None:
    """The accumulation (the stage ``rf``) reads A from a copy whose rows are one cache
    line further apart than a multiple of :data:`CACHE_WAY_BYTES` (``storage_align``):
    a step reads the same columns of the ``mb`` rows of a block, which, rows of 4096
    float32 apart, all fell into one set of L1 with the ``nb`` rows of W (16 rows: 8 + 3
    lines a step in one set of 12 ways, with the lines of the steps before; ``W[k, j]``:
    the block's ``M`` lines of A, re-read by every tile, in one set).  A is ``M x K``, a
    few hundred KiB copied once; W is not copied."""
    copy = s.cache_read(_contraction_operands(C.op)[1][0], "global", [rf])
    cs = s[copy]
    *_, ci, ck = cs.op.axis
    cs.storage_align(ci, CACHE_WAY_BYTES // 4, 64 // 4)
    _, cv = cs.split(ck, factor=L)
    cs.vectorize(cv)


def _skinny_template(outs, knobs: Knobs, info: CpuModel) -> Optional[Schedule]:
    """The skinny-GEMM schedule of a DAG that is one skinny GEMM (:func:`skinny_plan`)
    under elementwise epilogues (a bias, an activation); None for any other DAG."""
    ops = _walk(outs)
    reductions = [op for op in ops if op.reduce_axis]
    if len(reductions) != 1 or not all(_is_injective(op) for op in ops
                                       if op is not reductions[0]):
        return None
    gemm = reductions[0]
    plan = skinny_plan(gemm, info)
    if plan is None or not knobs.choose("skinny", [True, False], True):
        return None
    plan = skinny_knobs(plan, knobs, info)
    s = create_schedule([t.op for t in outs])
    C = gemm.output(0)
    schedule_skinny_stage(s, C, info, plan)
    if not s[C].is_output:
        s[C].compute_root()
    return _gemm_epilogues(s, outs, info, {id(gemm)})
