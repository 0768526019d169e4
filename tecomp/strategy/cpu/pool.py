"""Pooling (``max_pool*`` / ``avg_pool*`` / ``adaptive_*`` / ``global_*``, 1-, 2- and 3-d,
channels first or last): the output's last axis vectorized (the width channels first,
the channels channels last), a few vectors a step (channels last: a pixel's channels, up
to half the vector registers, :data:`WHOLE_PIXELS`), the window unrolled around them."""
from __future__ import annotations

import math

from ...schedule.schedule import Schedule
from ...schedule.separate import _separable_load
from ...ir.dtype import bits
from ...ir.expr import Const
from ...ir.simplify import simplify
from ...ir.functor import substitute, uses_var
from .._common import (_bytes, _cint, _is_injective, _is_padding, _loads, _outgrows_llc,
                       _reads_through_inline, _streams_past_llc, _walk)
from .common import _NoTemplate, _find, _op_tags, _template_or_rules
from ...target import CpuModel

#: the pooling stages' tags (the maximum, the window sums of an average)
POOL_TAGS = {"pool_max", "pool_sum"}
#: windows of at most this many elements are unrolled
UNROLL_WINDOW = 64
#: vectors of an output row computed together (their window loops interleaved)
VECTORS = 4
#: windows side by side along the rows (kernel = stride), channels first: each window
#: row reduced in contiguous vectors into a local row, then the windows from it
#: (:func:`_rows_then_windows`); False: the output row vectorized over the window's
#: taps (strided loads of the data), as before (an A/B switch)
ROWS_THEN_WINDOWS = True
#: a window row of whole half vectors (56 floats) in half-vector partial results
#: (one chain of adds a row: 392 on a 56x56 map), as before; False: in the whole row's
#: partial results where it takes at most VECTORS vectors (four chains, the last
#: vector partial); an A/B switch
HALF_VECTOR_ROWS = False
#: a global pooling's plane (channels first) as one run of contiguous elements in whole
#: vectors, their lanes summed as a tree (:func:`_plane_in_vectors`); False: its rows
#: along the data, one partial result a column (an A/B switch)
WHOLE_PLANES = True
#: ... a plane of at most UNROLL_WINDOW elements (a 7x7 map's 49): its vectors' loop
#: unrolled (loads at constant offsets from the plane's start, no loop), so that its
#: sum too starts at its first point, not at 0, as the tree's levels do
#: (``schedule_ops.SEED_POOL_SUMS``: one add fewer each, no adds of a zero vector).
#: Zen 4, global_avg_pool2d over 32x2048x7x7, one thread, CPU time, under load, the
#: unrolling and the seeding together: 1.09-1.19x (with ``emit_memory.
#: FLAT_FUSED_OFFSETS`` too 1.33-1.43x; that switch is off by default).  False: a loop of vector adds
#: from 0, as before (an A/B switch; benchmarks/DECISIONS.md, "Pooling: a small global
#: plane unrolled, its sums seeded")
LEAN_PLANES = True
#: max pooling whose output row is narrower than a vector (adaptive pooling to 7): the
#: maxima in a local block copied out (``cache_write``), not kept in the output (a
#: masked store and load back per tap); False: as before (an A/B switch)
MAX_IN_A_LOCAL = True
#: windows that overlap along the row (adaptive pooling by a size that does not divide
#: the data's) take the rows-then-windows path where their row (kernel x outputs) is at
#: most this many times the data row (50 -> 7: windows of 8, 56 / 50)
OVERLAP = 1.25
#: the narrowest window row reduced along the data in vector partial results (a
#: masked vector of 4-15 lanes); narrower rows are summed in scalars
ALONG_MIN = 4
#: padded rows of at most this many vectors, channels first (:func:`_short_padded_rows`):
#: the outer spatial loops partitioned on the padding's tests and the row's first
#: vector read under its lane mask by wide masked loads, not gathers; 0: neither (an
#: A/B switch)
SHORT_ROW_VECTORS = 2
#: ... for a window whose sums go to a local block (average pooling): at least this
#: many taps (3-d)
SHORT_ROW_TAPS = 27
#: max pooling over such short padded rows (:func:`_short_padded_rows`) with a window
#: of at least SHORT_ROW_TAPS taps: the maxima in a local block copied out, as
#: :data:`MAX_IN_A_LOCAL` (the row's last, partial vector then stays in a register);
#: 2-d windows (9 taps) keep theirs in the output (their A/B was within the noise).
#: False: as before (an A/B switch)
SHORT_ROWS_IN_A_LOCAL = True
#: 2-d max pooling over short padded rows, its maxima in the output: the data rows of
#: the output rows ahead prefetched at each output row, as far ahead as the machine
#: model's ``window_prefetch_bytes`` (:func:`_rows_ahead`: on Zen 5 8 output rows of
#: 56-wide data, where x86's padded min/max pieces halved the loop, which then outran
#: the hardware prefetcher from batch 16 up; none on Zen 4, where it lost); False: none
#: (an A/B switch).  Measured in benchmarks/DECISIONS.md, "Max pooling's odd rows:
#: padded min/max pieces, strided reads of a local row from its registers, 3-d maxima
#: in a local block"
PREFETCH_ROWS = True
#: windows that overlap along the rows (a stride below the kernel: 3x3/2, 3^3/2),
#: channels first, 2-d and 3-d: the window reduced in two steps (``Schedule.separate``,
#: :func:`_separated`): per output row, the window's rows reduced into a local row over
#: the data's columns (each column's taps contiguous vectors, each data element once),
#: then each output the reduction of its K taps of that row; False: the output row
#: vectorized over the window's R x K taps (strided loads of the data), as before (an
#: A/B switch; benchmarks/DECISIONS.md, "Pooling windows in two steps")
SEPARABLE = True
#: ... the outer spatial loops partitioned on the padding's tests (``pragma
#: partition``: the inner rows' local rows read the data with no row test); False: not
#: (an A/B switch)
SEPARATE_PARTITION = True
#: ... a stride of 1 too (avg_pool2d 3x3/1: the column sums of the window's rows in a
#: local row, then each output the sum of its K neighbours there, the output row's
#: vectors unrolled where it takes at most ``2 * VECTORS`` of them, so that its taps
#: are read from the registers the row was stored in and shuffled,
#: ``emit_memory.PRIVATE_SHIFTED_LOADS``).  Zen 4, one thread, CPU time: avg_pool2d
#: 3x3/1 p1 over 8x64x56x56 2.0-2.1x, 5x5/1 3.1x, max_pool2d 3x3/1 1.4-1.6x.  False:
#: strides of 2 and up only, as before (an A/B switch; benchmarks/DECISIONS.md,
#: "Stride-1 pooling windows in two steps")
STRIDE1_SEPARABLE = True
#: ... a stride of 2 or more, where the data and output stay in the cache (at most half
#: the last-level cache and the model's ``stream_output_bytes``, :func:`_from_memory`):
#: the output row's vectors unrolled as at a stride of 1, so that each output vector's
#: strided taps are shuffled from the registers the local row was stored in, not loaded
#: from the stack across two of its stores (a store-forwarding stall each).  Zen 4, one
#: thread, CPU time, under load: max_pool2d 3x3/2 p1 over 1x64x112x112 1.71x, over
#: 2x64x112x112 1.73x, avg_pool2d 3x3/2 p1 over 2x64x112x112 1.88x; from memory it lost
#: (8x64x112x112 0.92-0.93x, 16x64x112x112 0.85x; 0.65-0.74x in sessions 26-27), so not
#: taken there.  False: the row's vectors a loop, as before (an A/B switch;
#: benchmarks/DECISIONS.md, "Pooling: a strided output row from the registers where the
#: data stay in the cache")
STRIDED_ROW_IN_REGISTERS = True
#: ... but from memory the loop, as before; False: unrolled there too (the switch for a
#: quiet two-thread A/B, ``pooling.py --ab STRIDED_ROW_LOOP_FROM_MEMORY``: there
#: max_pool2d over 8x64x112x112 stays in the L3 and is compute-bound)
STRIDED_ROW_LOOP_FROM_MEMORY = True
#: ... 3-d: the window's planes first (``Schedule.separate`` of its first axis, then of
#: its last, :func:`_planes_first`): each task reduces every data plane it reads, in
#: turn, to that plane's 2-d windows (a local block of the task's planes of windows,
#: where it takes at most half the machine model's L2), then each output from its
#: planes of it; the data read as one sequential stream, where a local row over the
#: window's 3 x 3 data rows read three planes at once.  Only where the data come from
#: memory (more than half the last-level cache with the output: :func:`_planes_fit`).
#: Zen 4, max_pool3d 3^3/2 p1 over 2x32x32x56x56, one thread, CPU time, under load:
#: 1.16-1.32x, avg_pool3d 1.07-1.21x, ceil_mode over 31x55x55 1.9-2.0x; from the L3
#: (1x8x32x56x56) 0.93x, so not taken there.  False: a local
#: row per output row, as before (an A/B switch; benchmarks/DECISIONS.md, "Pooling:
#: a 3-d window's planes first")
PLANES_FIRST = True
#: ... the next data plane's rows prefetched into the L2 along the current plane's
#: (``prefetch(.., along=the planes' loop)`` at each vector of a local row,
#: :func:`_planes_first`): the planes are read in order, each once, yet the hardware's
#: prefetcher left their loads waiting on memory.  Zen 4, one thread, CPU time, under
#: load: max_pool3d 3^3/2 p1 over 2x32x32x56x56 1.08-1.33x, ceil mode over
#: 2x32x31x55x55 1.19x, over 4x16x16x112x112 1.19x, 3^3/1 p1 1.10x, avg_pool3d 3^3/2
#: p1 1.05x; into the L1 0.72x, the L3 as the L2, two planes ahead no better (the
#: planes first are only taken from memory: :func:`_planes_fit`).  False: none (an A/B
#: switch; benchmarks/DECISIONS.md, "Pooling: the next data plane of a 3-d window, the
#: next output row of windows side by side, prefetched")
PREFETCH_NEXT_PLANE = True
#: 1-d windows side by side along the row (kernel = stride, an even kernel of 4 or
#: more, no padding along the row), channels first: the window's pairs first
#: (:func:`_pairs_first`): ``rfactor`` of the window split in pairs makes a local row of
#: each pair's sum (or maximum) over the outputs of a step (two taps of the data at a
#: stride of 2), then each output the reduction of its ``K / 2`` pairs there (from the
#: registers the row was stored in).  avg_pool1d 4/4 over 8x256x2048 went from 16
#: loads, 8 ``vpermt2ps`` and 4 ``vshuff64x2`` an output vector (each tap a stride-4
#: read of the data) to 8 loads (4 of them operands of a ``vpermt2ps``) and 6
#: ``vpermt2ps``: 1.3-1.9x, one thread, under load.  False: the output row vectorized
#: over the window's strided taps, as before (an A/B switch; benchmarks/DECISIONS.md,
#: "Pooling: 1-d windows in pairs first")
PAIRS_FIRST = True
#: channels last: a step covers a pixel's channels in up to half the vector registers
#: (:func:`_channel_vectors`), all the window's loads of the pixel before its stores,
#: where VECTORS vectors a step stored each part of the output pixel between the
#: window's loads of the next part.  Zen 4, avg_pool2d 2x2/2 over 8x56x56x256 (25.7 MB
#: read, 6.4 MB written), one thread, CPU time, under load (load average 13-14): 2.32
#: -> 1.11 ms, the bytes of a contiguous 4-to-1 sum 1.04-1.15 ms, PyTorch 1.52 ms; 8
#: vectors a step 2.34 ms.  False: VECTORS a step, as before (an A/B switch)
WHOLE_PIXELS = True
#: channels last over padded data: the tasks are the output rows (batch x rows), each
#: row's pixels a loop inside them with its border pixels partitioned off (``pragma
#: partition``: the inner pixels read their window with no padding test and step their
#: addresses, where a task a pixel tested each tap and recomputed its address from the
#: fused index); False: a task a pixel, as before (an A/B switch)
PEEL_PIXELS = True
#: ... max pooling: a pixel's maxima in a local block (registers) copied out
#: (``cache_write``), not kept in the output (LLVM kept a streamed store of the output's
#: ``-inf`` start before the window's maxima).  Zen 4, one thread, CPU time:
#: max_pool3d 3^3/2 p1 NDHWC 1.5x, the 2-d rows within the noise.  False: in the output
#: (an A/B switch)
PEEL_MAX_IN_A_LOCAL = True
#: a step's vectors of the output copied from a local block (an average's sums, the
#: maxima of :data:`MAX_IN_A_LOCAL`, :data:`SHORT_ROWS_IN_A_LOCAL`,
#: :data:`PEEL_MAX_IN_A_LOCAL`) unrolled: the block then stays in registers, where
#: LLVM kept it on the stack for the copy's loop (four stores and four loads of the
#: stack a pixel of 64 channels).  False: the copy a loop, as before (an A/B switch)
UNROLL_COPY_OUT = True
#: a pooling whose data and output come from memory (more than half the last-level
#: cache, or the machine model's ``stream_output_bytes``, as :data:`STREAM_OUTPUT`),
#: tasks of output rows: the data of the next output row prefetched into the L2 along
#: the current one (``prefetch(.., along=the rows' loop)``: at each pixel of a
#: channels-last row, :data:`PEEL_PIXELS`, or each vector of a channels-first local
#: row, :func:`_separated`), a row's time ahead of its loads, where the hardware's
#: prefetcher left the loads of the window's new rows waiting on memory; a window
#: stepping by 2 or more along the rows (:func:`_next_row_from_memory`).  Zen 4, one
#: thread, CPU time, under load: max_pool2d 3x3/2 p1 NHWC over 8x112x112x64 1.14-1.32x,
#: ceil mode over 8x111x111x64 1.38x, avg_pool2d 3x3/2 p1 NHWC over 8x56x56x256 1.16x,
#: max_pool3d 3^3/2 p1 NDHWC over 2x32x56x56x64 1.31-1.43x (over 32 channels
#: 0.85-1.03x), NCHW max_pool2d 3x3/2 p1 0.98-1.09x.  False: none (an A/B switch;
#: benchmarks/DECISIONS.md, "Pooling: the next output row's data prefetched")
PREFETCH_NEXT_ROW = True
#: ... and windows side by side along the rows (:func:`_rows_then_windows`: 2x2/2,
#: adaptive pooling by a divisor), channels first: the next output row's window rows
#: prefetched into the L2 at each vector of the current row's local row (each data row
#: read once, in order, yet left waiting on memory).  Zen 4, one thread, CPU time,
#: under load: adaptive_avg_pool2d 56->7 over 8x256x56x56 1.29-1.55x (benchmarks/
#: pooling.py 1.47x), 56->14 1.03-1.05x, adaptive_max_pool2d 56->7 1.07x, avg_pool2d
#: 4x4/4 over 8x64x112x112 1.35x, 2x2/2 0.91x and 1.08x, max_pool2d 2x2/2 1.02x; two
#: output rows ahead less than one.  False: none (an A/B switch; benchmarks/
#: DECISIONS.md, "Pooling: the next data plane of a 3-d window, the next output row of
#: windows side by side, prefetched")
PREFETCH_WINDOW_ROWS = True
#: the output of a pooling whose input and output take more than half the last-level
#: cache (or the machine model's ``stream_output_bytes``) is stored past the cache
#: (``pragma nontemporal`` on the tasks' loop) where its rows are whole cache lines
#: (channels last: a pixel's channels; :func:`_streams_output`): each line written
#: through the cache is read first, a fifth of the traffic of a 2x2/2 or 3x3/2 window
#: (in + out/4 read, out/4 written).  False: stored through the cache, as before (an
#: A/B switch; benchmarks/DECISIONS.md, "Pooling: outputs past the cache")
STREAM_OUTPUT = True


def _channel_vectors(last, lanes: int, vregs: int, first: bool) -> int:
    """Vectors of the output row per step: up to :data:`VECTORS`; channels last
    (:data:`WHOLE_PIXELS`), the row's (a pixel's channels) where they take at most half
    the ``vregs`` vector registers, else the most up to that which divide it."""
    if last is None:
        return 1
    n = -(-last // lanes)
    if first or not WHOLE_PIXELS or n <= VECTORS:
        return max(1, min(VECTORS, n))
    if n <= vregs // 2:
        return n
    return max((d for d in range(VECTORS, vregs // 2 + 1) if last % (lanes * d) == 0),
               default=VECTORS)


def _pool_stage(outs):
    """The pooling stage of ``outs`` (an operator of :mod:`tecomp.nn.pooling`) whose
    output is ``outs[0]`` (itself, or the division of its sums), or None."""
    pools = _find(outs, lambda op: bool(POOL_TAGS & _op_tags(op)) and op.reduce_axis)
    if len(pools) != 1 or len(outs) != 1:
        return None
    pool, out = pools[0], outs[0].op
    if out is not pool and not (_is_injective(out) and "pool_avg" in _op_tags(out)):
        return None
    return pool


def pool_into(s: Schedule, outs, info: CpuModel) -> None:
    """Schedule the pooling ``outs`` (see :func:`schedule_pool`) into ``s``; a
    ``_NoTemplate`` where it is not one, or for a window too large to unroll over an
    output row narrower than a vector whose data rows are narrower than a vector too
    (channels last, or a short row: the rules)."""
    pool = _pool_stage(outs)
    if pool is None:
        raise _NoTemplate("not a pooling")
    L = info.lanes
    out = outs[0]
    window = [_cint(iv.dom.extent) for iv in pool.reduce_axis]
    small = None not in window and math.prod(window) <= UNROLL_WINDOW
    last = _cint(out.shape[-1])
    for op in _walk(outs):
        if _is_injective(op) and op is not out.op and not s[op].is_output:
            s[op].compute_inline()
    first = pool.attrs.get("layout", "NC")[1] == "C"
    K = _cint(pool.reduce_axis[-1].dom.extent)
    plane = _whole_plane(pool.output(0)) if WHOLE_PLANES and first else None
    if plane is not None and len(window) > 1:
        _plane_in_vectors(s, out, pool.output(0), info, plane)
        return
    if not small and (last is None or last < L):
        if not first or K is None or K < ALONG_MIN:
            raise _NoTemplate("a large window over a narrow row, not along the data")
        _window_along_the_data(s, out, pool.output(0), info, small)
        return
    tiled = ROWS_THEN_WINDOWS and first and len(window) > 1 and _tiles_rows(pool, L)
    if tiled:
        # windows side by side along the data row (kernel = stride, adaptive pooling by
        # a divisor): the rows reduced whole in contiguous vectors, then each row's
        # windows (gathers of one row from a local buffer, not of the whole window)
        if _max_in_a_local(pool, out, last is not None and last < L):
            pool = s.cache_write(out, "local").op
        _rows_then_windows(s, out, pool.output(0), info, small)
        return
    if first and last == 1 and K is not None and K >= ALONG_MIN:
        # one output a row (global pooling of a 7x7 map): a vector over the outputs
        # would be one lane, a scalar add a tap; along the data, a vector a window row
        _window_along_the_data(s, out, pool.output(0), info, small)
        return
    if first and _pairs(pool, small, last, L):
        _pairs_first(s, out, pool.output(0), info)
        return
    if _separable(pool, first, small, last, L):
        if _planes_fit(s, pool, out, info):
            _planes_first(s, out, pool.output(0), info, small)
        else:
            _separated(s, out, pool.output(0), info, small)
        return
    short = first and _short_padded_rows(pool, out, last, L)
    peel = not first and _peels_pixels(pool, len(out.shape) - 1)
    if _max_in_a_local(pool, out, last is not None and last < L):
        pool = s.cache_write(out, "local").op
        # (a row narrower than a vector: its window's taps go to the local block, so
        # the padding's rules are those of an average's sums)
        short = first and _short_padded_rows(pool, out, last, L)
    elif (SHORT_ROWS_IN_A_LOCAL and short and pool is out.op
          and math.prod(w or 0 for w in window) >= SHORT_ROW_TAPS):
        pool = s.cache_write(out, "local").op
    elif peel and PEEL_MAX_IN_A_LOCAL and pool is out.op:
        # (channels last, the pixels peeled: a pixel's maxima in registers, stored once;
        # in the output, LLVM kept a streamed store of the -inf start before the window)
        pool = s.cache_write(out, "local").op
    st = s[out]
    *outer, x = st.op.axis
    if first and len(outer) > 2:
        # channels first: tasks over (batch, channels), the outer spatial loops serial
        # inside, so that their first and last rows (the padding) are partitioned off
        rows = st.fuse(outer[0], outer[1])
        outer = [rows] + outer[2:]
    elif peel:
        # channels last, padded: tasks over the output rows, each row's pixels a loop
        # inside, its first and last pixels (the padding) partitioned off
        rows = st.fuse(*outer[:-1])
        outer = [rows, outer[-1]]
        st.pragma(outer[-1], "partition")
    else:
        rows = st.fuse(*outer) if len(outer) > 1 else outer[0]
        outer = [rows]
    # U vectors of the row per step, the window's loads and maxima/sums interleaved
    # across them (independent chains: the latency of one hidden by the others)
    U = _channel_vectors(last, L, info.vregs, first)
    if pool is not out.op and last is not None and last > L * U and last % (L * U):
        U = 1   # (an average's sums: their region at the row's end would not be constant)
    if last is not None and last <= L:
        xo, xm, xi = None, None, x
    else:
        xo, xi = st.split(x, factor=L * U)
        xm, xi = st.split(xi, factor=L) if U > 1 else (None, xi)
    at = outer + ([xo] if xo is not None else [])
    if pool is out.op:
        st.reorder(*(at + list(st.op.reduce_axis) + ([xm] if xm is not None else []) + [xi]))
        if small:
            for k in st.op.reduce_axis:
                st.unroll(k)
        if xm is not None:
            st.unroll(xm)
    elif xm is not None:
        st.reorder(*(at + [xm, xi]))
        if UNROLL_COPY_OUT:
            st.unroll(xm)
    st.vectorize(xi)
    if info.threads > 1:
        st.parallel(rows)
    if _streams_output(s, pool, out, info):
        st.pragma(rows, "nontemporal")
    if short:
        for ax in outer[1:]:
            st.pragma(ax, "partition")
        st.pragma(rows, "masked_wide_loads")
    if peel and _next_row_from_memory(s, pool, out, info):
        # (channels last: the next output row's window rows, a pixel's at each pixel)
        st.prefetch(_data(pool), outer[-1], offset=1, level=2, along=rows)
    ahead = _rows_ahead(pool, info) if PREFETCH_ROWS else 0
    if ahead and short and len(window) == 2 and len(outer) > 1 and pool is out.op:
        # (2-d max pooling over short padded rows, channels first: the data rows
        # of the output rows ``ahead``, in each output row's loop)
        data = pool.input_tensors[0]
        st.prefetch(data.op.input_tensors[0] if _is_padding(data.op) else data, outer[-1],
                    offset=ahead)
    if pool is not out.op:
        ps = s[pool.output(0)]
        ps.set_scope("local")
        ps.compute_at(st, at[-1])
        *pouter, px = ps.op.axis
        # the region is L * U wide (narrower at the row's end): its vectors' loop inside
        # the window's, their sums independent
        pxo, pxi = ps.split(px, factor=L)
        ps.reorder(*(list(pouter) + list(ps.op.reduce_axis) + [pxo, pxi]))
        if small:
            for k in ps.op.reduce_axis:
                ps.unroll(k)
        if U > 1:
            ps.unroll(pxo)
        ps.vectorize(pxi)


def _peels_pixels(pool, outer: int) -> bool:
    """Whether the channels-last pooling ``pool`` (``outer`` output axes before the
    channels) runs each output row's pixels as a loop of its own, its border pixels
    partitioned off (:data:`PEEL_PIXELS`): its data is padded, and it is 2-d or 3-d (a
    1-d one's rows would be its batch: tasks too few to share)."""
    if not PEEL_PIXELS or outer < 3:
        return False
    return any(_is_padding(ld.producer.op) for ld in _loads(pool.body.source))


def _next_row_from_memory(s: Schedule, pool, out, info: CpuModel) -> bool:
    """Whether the next output row's data are prefetched along the current one
    (:data:`PREFETCH_NEXT_ROW`): the window steps by 2 or more along the rows (the next
    output row then reads at least 2 of its ``K`` rows anew; the prefetches cover all
    ``K``), and the data that ``pool`` reads and its output ``out`` take more than half
    the last-level cache or the model's ``stream_output_bytes`` (they come from memory
    call after call).  Not taken (Zen 4, one thread, CPU time, under load): from the
    L3, where max_pool2d 3x3/2 NHWC ran 0.68x as fast with the prefetches; at a stride
    of 1 (avg_pool2d 3x3/1 p1 NHWC over 8x112x112x64: 0.74-0.87x)."""
    first = pool.attrs.get("layout", "NC")[1] == "C"
    if not PREFETCH_NEXT_ROW or (_stride(pool, -2 if first else -3) or 0) < 2:
        return False
    return _from_memory(s, pool, out, info)


def _from_memory(s: Schedule, pool, out, info: CpuModel) -> bool:
    """Whether the data that ``pool`` reads and its output ``out`` take more than half
    the last-level cache or the model's ``stream_output_bytes``: they come from memory
    call after call."""
    sizes = [_bytes(t) for t in _reads_through_inline(s, pool) + [out]]
    return _outgrows_llc(None if None in sizes else sum(sizes), info,
                         limit=info.stream_output_bytes)


def _data(pool):
    """The tensor that the window of ``pool`` reads (the padding's input where it reads
    a padding inlined into it)."""
    t = _loads(pool.body.source)[0].producer
    return t.op.input_tensors[0] if _is_padding(t.op) else t


def _streams_output(s: Schedule, pool, out, info: CpuModel) -> bool:
    """Whether the output ``out`` of ``pool`` goes past the cache
    (:data:`STREAM_OUTPUT`): the data it reads and the output take more than half the
    last-level cache or the model's ``stream_output_bytes`` (they do not stay there
    from one call to the next), and its rows are whole cache lines
    (``_streams_past_llc``: the streamed stores start on one)."""
    return STREAM_OUTPUT and _streams_past_llc(_reads_through_inline(s, pool), out, info,
                                               limit=info.stream_output_bytes)


def _rows_ahead(pool, info: CpuModel) -> int:
    """Output rows of ``pool`` (channels first) whose data rows are the machine model's
    ``window_prefetch_bytes`` ahead: that over the bytes of data rows an output row
    moves on by (its stride along the rows times a data row), at least 1; 0 where the
    model has none or the rows' sizes are not constants."""
    want = info.window_prefetch_bytes
    lds = _loads(pool.body.source)
    if not want or len(lds) != 1 or len(pool.axis) < 2:
        return 0
    src, y = lds[0].producer, pool.axis[-2]
    e = lds[0].indices[-2]
    ranges = {iv.var: iv.dom for iv in list(pool.axis) + list(pool.reduce_axis)}
    step = simplify(substitute(e, {y.var: y.var + 1}) - e, ranges)
    width = _cint((src.op.input_tensors[0] if _is_padding(src.op) else src).shape[-1])
    if not isinstance(step, Const) or width is None:
        return 0
    row = max(1, int(step.value)) * width * (bits(src.dtype) // 8)
    return max(1, want // row)


def _short_padded_rows(pool, out, last, lanes: int) -> bool:
    """Whether the data of ``pool`` is padded along its rows, its output row takes at
    most :data:`SHORT_ROW_VECTORS` vectors, and either the window's taps go into the
    output itself (max pooling) or the window has at least :data:`SHORT_ROW_TAPS`
    taps.  Then the padding's tests on the outer rows (and planes) are partitioned off
    (``pragma partition``: the inner rows read with no test), and the first vector's
    taps that reach into the padding (a lane mask: its first lane's) read the data as a
    wide masked load and a shuffle (``pragma masked_wide_loads``), not a gather: on a
    short row a large share of the taps (3^3/2 p1 over 56x56 planes: 9 of each row's
    54 vector taps).

    Measured on the Zen 5, one thread, CPU time, under load (benchmarks/history/
    2026-11-30.md, "h15-pool2"): max_pool3d 3^3/2 p1 2x32x32x56x56 2.2x as fast,
    avg_pool3d the same 2.1x, max_pool2d 3x3/2 p1 32x64x56x56 1.15-1.27x, ceil_mode
    32x64x56x57 1.7x.  Not taken: avg_pool2d 3x3/2 p1 32x64x56x56 ran 0.70-0.75x as
    fast (its 1.5-1.8x in the L2 lost at the L3's edge; the partition alone 0.84x, the
    wide loads alone 0.76x), and rows of more vectors (max_pool2d 3x3/2 p1
    8x64x112x112, rows of 3.5 vectors: the wide loads 0.75x, the partition 0.93x, 1.5x
    together in the L2).  Why the faster code loses from the L3's edge is not known."""
    if not SHORT_ROW_VECTORS or last is None or last > SHORT_ROW_VECTORS * lanes:
        return False
    taps = math.prod(_cint(iv.dom.extent) or 0 for iv in pool.reduce_axis)
    if pool is not out.op and taps < SHORT_ROW_TAPS:
        return False
    src = [ld.producer for ld in _loads(pool.body.source)]
    return any(_is_padding(t.op) and _cint(t.shape[-1])
               != _cint(t.op.input_tensors[0].shape[-1]) for t in src)


def _max_in_a_local(pool, out, narrow: bool) -> bool:
    """Whether the maxima of ``pool`` (the output ``out`` itself) go to a local block
    copied out (``cache_write``), not into the output: where its row is narrower than a
    vector (``narrow``: adaptive pooling to 7), each tap would otherwise read, max and
    write back that row through a masked store, which the next tap's load waits for
    (adaptive_max_pool2d 56->7: 2.02 -> 1.45 ms, one thread, CPU time; rows that only
    end in a partial vector, 28 or 56 wide: no better)."""
    return MAX_IN_A_LOCAL and pool is out.op and narrow


def _tiles_rows(pool, lanes: int) -> bool:
    """Whether the windows of ``pool`` (channels first) lie side by side along the data
    rows: its one load's last index is ``g(x) + kx`` (``kx`` the window's last axis, of
    ``K`` > 1 taps, ``x`` the output's last axis), no padding along the row, no
    ``where=`` (windows of other sizes), and either ``g(x) = x * K`` (kernel = stride)
    or the windows' row (``K`` per output) at most :data:`OVERLAP` times the data row
    and within ``2 * VECTORS`` vectors (adaptive pooling to a size that does not divide
    the data's: ``g(x) = x * n // out``, read in constant patterns where the row's
    vectors are unrolled)."""
    body = pool.body
    lds = _loads(body.source)
    ranges = {iv.var: iv.dom for iv in list(pool.axis) + list(pool.reduce_axis)}
    cond = simplify(body.condition, ranges)
    if len(lds) != 1 or not (isinstance(cond, Const) and bool(cond.value)):
        return False
    src = lds[0].producer
    if (_is_padding(src.op) and _cint(src.shape[-1])
            != _cint(src.op.input_tensors[0].shape[-1])):
        return False
    kx, x = pool.reduce_axis[-1], pool.axis[-1]
    K = _cint(kx.dom.extent)
    if K is None or K < 2:
        return False
    g = simplify(lds[0].indices[-1] - kx.var, ranges)
    if uses_var(g, kx.var):
        return False
    d = simplify(g - x.var * K)
    if isinstance(d, Const) and int(d.value) == 0:
        return True
    n, out = _cint(src.shape[-1]), _cint(x.dom.extent)
    return (n is not None and out is not None and out * K <= OVERLAP * n
            and out * K <= 2 * VECTORS * lanes)


def _channel_rows_tasks(s: Schedule, out, info: CpuModel):
    """The output's stage of a channels-first pooling with (batch x channels) fused into
    its tasks (parallel where the target has threads): ``(stage, the fused loop, the
    outer spatial loops, the row's loop, the loop a row's local buffer goes at)``."""
    st = s[out]
    n, c, *outer, x = st.op.axis
    rows = st.fuse(n, c)
    if info.threads > 1:
        st.parallel(rows)
    return st, rows, outer, x, (outer[-1] if outer else rows)


def _rows_then_windows(s: Schedule, out, red, info: CpuModel, small: bool) -> None:
    """Windows side by side along the rows (:func:`_tiles_rows`), channels first: per
    output row, the window's rows reduced over its other axes into a local row
    (``rfactor`` of the window's last axis: ``red.rf[x, kx]``, the data row's element
    ``x * K + kx``) in contiguous vectors, then each output the reduction of its ``K``
    elements of that row, vectorized along the outputs; the tasks are (batch x
    channels), the outer spatial loops inside."""
    L = info.lanes
    rs = s[red]
    rf = s[s.rfactor(red, rs.op.reduce_axis[-1], factor_axis=len(rs.op.axis))]
    ahead = (PREFETCH_WINDOW_ROWS and _next_row_from_memory(s, red.op, out, info)
             and _data(red.op))
    st, rows, outer, x, at = _channel_rows_tasks(s, out, info)
    width = math.prod(_cint(a.dom.extent) or UNROLL_WINDOW for a in rf.op.axis[-2:])
    ro = _local_rf_row(rf, st, at, L, small, width <= 2 * VECTORS * L)
    if outer and ahead is not False:
        # (the next output row's window rows, a vector of the data row at each of the
        # local row's)
        rf.prefetch(ahead, ro, offset=1, level=2, along=outer[-1])
    _windows_from_the_row(s, out, red, st, [rows] + outer, at, L)


def _local_rf_row(rf, st, at, L: int, small: bool, unroll: bool):
    """The ``rfactor`` stage ``rf`` of a window's last axis (``rf[.., x, k]``) kept
    local and computed at the loop ``at`` of ``st``: its ``(x, k)`` fused into one row
    in vectors of ``L`` lanes inside the window's other axes (unrolled where
    ``small``), the vectors unrolled where ``unroll``.  Returns the loop of the
    vectors."""
    rf.set_scope("local")
    rf.compute_at(st, at)
    *ra, rx, rk = rf.op.axis
    rf.reorder(*(ra + list(rf.op.reduce_axis) + [rx, rk]))
    ro, ri = rf.split(rf.fuse(rx, rk), factor=L)
    if small:
        for k in rf.op.reduce_axis:
            rf.unroll(k)
    if unroll:
        rf.unroll(ro)
    rf.vectorize(ri)
    return ro


def _windows_from_the_row(s: Schedule, out, red, st, lead, at, L: int,
                          unroll: bool = False) -> None:
    """Each output of ``red`` (and of ``out``, its division where it is not ``red``):
    its K elements of the local row (a strided load from it), vectorized along the
    outputs, inside the loop ``at`` of ``st`` (the output's stage, loops ``lead``)."""
    stages = [(st, lead)]
    if red.op is not out.op:
        s[red].set_scope("local")
        s[red].compute_at(st, at)
        stages.append((s[red], list(s[red].op.axis[:-1])))
    for sg, lead in stages:
        x = sg.op.axis[-1]
        xo, xi = sg.split(x, factor=L)
        sg.reorder(*(lead + [xo] + list(sg.op.reduce_axis) + [xi]))
        for k in sg.op.reduce_axis:
            if (_cint(k.dom.extent) or UNROLL_WINDOW + 1) <= UNROLL_WINDOW:
                sg.unroll(k)
        if unroll and (_cint(x.dom.extent) or UNROLL_WINDOW * L) <= 2 * VECTORS * L:
            sg.unroll(xo)
        sg.vectorize(xi)


def _separable(pool, first: bool, small: bool, last, lanes: int) -> bool:
    """Whether the window of ``pool`` (channels first, 2-d or 3-d, unrolled, an output
    row of a vector or more) overlaps along the rows: its load's last index steps by
    more than 1 and less than the kernel per output (:data:`SEPARABLE`), or by 1
    (:data:`STRIDE1_SEPARABLE`: its taps of the local row then read from the registers
    the row was stored in; with a load of the row across two stores instead,
    avg_pool2d 3x3/1 p1 over 8x64x56x56 ran 0.74-0.93x in two steps)."""
    if not (SEPARABLE and first and small and len(pool.reduce_axis) > 1
            and last is not None and last >= lanes):
        return False
    lds = _loads(pool.body.source)
    kx, x = pool.reduce_axis[-1], pool.axis[-1]
    ranges = {iv.var: iv.dom for iv in list(pool.axis) + list(pool.reduce_axis)}
    cond = simplify(pool.body.condition, ranges)
    others = [r for r in pool.reduce_axis if r is not kx]
    if (len(lds) != 1 or not (isinstance(cond, Const) and bool(cond.value))
            or _separable_load(lds, kx, [a.var for a in pool.axis], others) is None):
        return False   # (Schedule.separate's own conditions: no where=, one load)
    step, K = _stride(pool), _cint(kx.dom.extent)
    return (step is not None and K is not None
            and (0 if STRIDE1_SEPARABLE else 1) < step < K)


def _stride(pool, dim: int = -1):
    """The step of the data element that the window of ``pool`` (one load) reads along
    its axis ``dim`` (the last: channels first, the row) from one output to the next
    (its stride there), or None where it is not a constant."""
    lds = _loads(pool.body.source)
    if len(lds) != 1:
        return None
    x = pool.axis[dim]
    ranges = {iv.var: iv.dom for iv in list(pool.axis) + list(pool.reduce_axis)}
    e = lds[0].indices[dim]
    step = simplify(substitute(e, {x.var: x.var + 1}) - e, ranges)
    return int(step.value) if isinstance(step, Const) else None


def _separated(s: Schedule, out, red, info: CpuModel, small: bool) -> None:
    """Overlapping windows, channels first (:func:`_separable`): ``Schedule.separate``
    of the window's last axis; per output row, the window's other axes reduced into a
    local row over the data's columns (``red.sep``: contiguous vectors, each element
    once, the padding's tests inlined), then each output from its K taps of that row
    (:func:`_windows_from_the_row`).  The tasks are (batch x channels), the outer
    spatial loops inside."""
    L = info.lanes
    ahead = _next_row_from_memory(s, red.op, out, info) and _data(red.op)
    sep = s.separate(red, red.op.reduce_axis[-1])
    st, rows, outer, x, at = _channel_rows_tasks(s, out, info)
    wo = _local_rows(s[sep], st, at, L, small)
    if outer and ahead is not False:
        # (the next output row's window rows, a vector of the data's columns at each of
        # the local row's)
        s[sep].prefetch(ahead, wo, offset=1, level=2, along=outer[-1])
    if SEPARATE_PARTITION:
        for ax in outer:
            st.pragma(ax, "partition")
    step = _stride(red.op)
    _windows_from_the_row(s, out, red, st, [rows] + outer, at, L,
                          unroll=(STRIDE1_SEPARABLE and step == 1) or (
                              STRIDED_ROW_IN_REGISTERS and (step or 0) > 1
                              and not (STRIDED_ROW_LOOP_FROM_MEMORY
                                       and _from_memory(s, red.op, out, info))))


def _pairs(pool, small: bool, last, lanes: int) -> bool:
    """Whether the 1-d window of ``pool`` (channels first: checked by the caller) is
    reduced in pairs first (:data:`PAIRS_FIRST`): one window axis of an even ``K`` >= 4
    taps, unrolled, the windows side by side along the row (``g(x) = x * K``, no padding
    along it: :func:`_tiles_rows`' first form), an output row of whole vectors (a
    step's local rows then of constant sizes, unrolled)."""
    if not (PAIRS_FIRST and small and len(pool.reduce_axis) == 1
            and last is not None and last >= lanes and last % lanes == 0):
        return False
    K = _cint(pool.reduce_axis[0].dom.extent)
    if K is None or K < 4 or K % 2 or not _tiles_rows(pool, lanes):
        return False
    lds = _loads(pool.body.source)
    ranges = {iv.var: iv.dom for iv in list(pool.axis) + list(pool.reduce_axis)}
    g = simplify(lds[0].indices[-1] - pool.reduce_axis[0].var - pool.axis[-1].var * K,
                 ranges)
    return isinstance(g, Const) and int(g.value) == 0


def _pairs_first(s: Schedule, out, red, info: CpuModel) -> None:
    """1-d windows side by side along the row, channels first (:func:`_pairs`): the
    window split in pairs and ``rfactor`` of the pairs' axis (``red.rf[x, p]``: the
    reduction of the data's elements ``x * K + 2p`` and ``+ 1``, the local row of a
    step's output vectors, in contiguous vectors of two stride-2 taps of the data),
    then each output the reduction of its ``K / 2`` elements of that row (a stride of
    ``K / 2``), the step's vectors unrolled; the tasks are (batch x channels), the
    output row in steps of up to ``VECTORS`` vectors (the most that divide it)
    inside."""
    L = info.lanes
    rs = s[red]
    ko, _ = rs.split(rs.op.reduce_axis[0], factor=2)
    rf = s[s.rfactor(red, ko, factor_axis=len(rs.op.axis))]
    st = s[out]
    n, c, x = st.op.axis
    rows = st.fuse(n, c)
    last = _cint(x.dom.extent)   # (whole vectors: _pairs)
    U = max(u for u in range(VECTORS, 0, -1) if last % (L * u) == 0)
    xo, xi = st.split(x, factor=L * U)
    if info.threads > 1:
        st.parallel(rows)
    if _streams_output(s, red.op, out, info):
        st.pragma(rows, "nontemporal")
    _local_rf_row(rf, st, xo, L, True, True)
    stages = [st]
    if red.op is not out.op:
        s[red].set_scope("local")
        s[red].compute_at(st, xo)
        xm, xv = st.split(xi, factor=L)
        st.unroll(xm)
        st.vectorize(xv)
        stages = [s[red]]
    for sg in stages:
        a, v = sg.split(sg.op.axis[-1] if sg is not st else xi, factor=L)
        lead = list(sg.op.axis[:-1]) if sg is not st else [rows, xo]
        sg.reorder(*(lead + [a] + list(sg.op.reduce_axis) + [v]))
        for k in sg.op.reduce_axis:
            sg.unroll(k)
        sg.unroll(a)
        sg.vectorize(v)


def _planes_fit(s: Schedule, pool, out, info: CpuModel) -> bool:
    """Whether the 3-d window of ``pool`` (separable: :func:`_separable`) is reduced
    planes first (:data:`PLANES_FIRST`): its data and output take more than half the
    last-level cache (or the model's ``stream_output_bytes``: they come from memory
    call after call; from the cache the planes ran 0.93x as fast), and a task's planes
    of 2-d windows (the data's planes along the window's first axis, each the output's
    plane: constant sizes) take at most half the machine model's L2."""
    if not PLANES_FIRST or len(pool.reduce_axis) != 3 or not _from_memory(s, pool, out, info):
        return False
    src = _loads(pool.body.source)[0].producer
    d = _cint(src.shape[-3])
    plane = math.prod(_cint(e) or 0 for e in pool.output(0).shape[-2:])
    return bool(d and plane) and d * plane * (bits(pool.output(0).dtype) // 8) \
        <= info.l2_bytes // 2


def _planes_first(s: Schedule, out, red, info: CpuModel, small: bool) -> None:
    """A 3-d window that overlaps along strided rows (:func:`_separable`,
    :func:`_planes_fit`), channels first, its planes first: ``Schedule.separate`` of the
    window's first axis (``red.sep[.., d, y, x]``: the 2-d windows of each data plane
    ``d``) computed whole in each task, plane after plane (the data read in order, each
    element once), each plane's windows in two steps as :func:`_separated`'s (a local
    row ``red.sep.sep`` over the data's columns per output row of the plane, then its
    K taps); then each output the reduction of its planes of ``red.sep``
    (:func:`_windows_from_the_row`).  The tasks are (batch x channels)."""
    L = info.lanes
    data = _data(red.op)
    planes = s.separate(red, red.op.reduce_axis[0])
    row = s.separate(planes, s[planes].op.reduce_axis[-1])
    st, rows, outer, x, at = _channel_rows_tasks(s, out, info)
    ps = s[planes]
    _local_rows(ps, st, rows, L, small)
    pd, py = ps.op.axis[-3:-1]
    if SEPARATE_PARTITION:
        ps.pragma(pd, "partition")
        ps.pragma(py, "partition")
    wo = _local_rows(s[row], ps, py, L, small)
    if PREFETCH_NEXT_PLANE:
        # (the next data plane's rows of this local row, a vector at each of its vectors)
        s[row].prefetch(data, wo, offset=1, level=2, along=pd)
    _windows_from_the_row(s, out, red, st, [rows] + outer, at, L)


def _local_rows(ts, st, at, L: int, small: bool) -> None:
    """A stage ``ts`` of ``separate`` (its last axis along the data's row) kept local
    and computed at the loop ``at`` of ``st``: its rows in vectors of ``L`` lanes inside
    the window's (unrolled where ``small``), the vectors unrolled where a row takes at
    most ``2 * VECTORS`` of them."""
    ts.set_scope("local")
    ts.compute_at(st, at)
    *ta, tw = ts.op.axis
    wo, wi = ts.split(tw, factor=L)
    ts.reorder(*(ta + [wo] + list(ts.op.reduce_axis) + [wi]))
    if small:
        for k in ts.op.reduce_axis:
            ts.unroll(k)
    if (_cint(tw.dom.extent) or UNROLL_WINDOW * L) <= 2 * VECTORS * L:
        ts.unroll(wo)
    ts.vectorize(wi)
    return wo


def _window_along_the_data(s: Schedule, out, red, info: CpuModel, small: bool) -> None:
    """A window over a narrow output row, channels first (global pooling): the window's
    last axis, contiguous in the data, is reduced in up to ``VECTORS * lanes`` partial
    results (``rfactor``: independent vector accumulators), then those in order; the
    tasks are the outputs.  ``small``: the window's other axes are unrolled."""
    rs = s[red]
    K = _cint(rs.op.reduce_axis[-1].dom.extent)
    # partial results: the most whole vectors that divide the window's row, up to
    # VECTORS of them (a partial vector at the row's end would shuffle lanes); else the
    # whole row where it takes at most VECTORS vectors (a row of 7 or 14: one partial
    # vector; of 56: 3.5 vectors, four chains of adds, not one of half vectors), else
    # half vectors that divide it, else one vector (a guarded tail)
    L = info.lanes
    halves = [L // 2] if HALF_VECTOR_ROWS else []
    F = next((f for f in [L * v for v in range(VECTORS, 0, -1)] + halves if K % f == 0),
             K if K <= VECTORS * L else next((f for f in [L // 2] if K % f == 0), L))
    if F == K:
        kxi = rs.op.reduce_axis[-1]
    else:
        _, kxi = rs.split(rs.op.reduce_axis[-1], factor=F)
    rf = s[s.rfactor(red, kxi, factor_axis=len(rs.op.axis))]
    st = s[out]
    rows = st.fuse(*st.op.axis) if len(st.op.axis) > 1 else st.op.axis[0]
    if info.threads > 1:
        st.parallel(rows)
    if red.op is not out.op:
        s[red].compute_at(st, rows)
    rf.compute_at(st, rows)
    lane = rf.op.axis[-1]
    rf.reorder(*(list(rf.op.axis[:-1]) + list(rf.op.reduce_axis) + [lane]))
    if small:
        for k in rf.op.reduce_axis:
            rf.unroll(k)
    if F > L and F % L:
        lo, lane = rf.split(lane, factor=L)
        rf.unroll(lo)
    rf.vectorize(lane)


def _whole_plane(red):
    """The elements of the data's plane where the window of the reduction ``red`` is
    all of it (its reduce axes as long as the trailing axes of its one input, every
    output extent there 1: global pooling, channels first, unpadded); else None."""
    nd = len(red.op.reduce_axis)
    if len(red.op.input_tensors) != 1:
        return None
    window = [_cint(iv.dom.extent) for iv in red.op.reduce_axis]
    size = [_cint(e) for e in red.op.input_tensors[0].shape[-nd:]]
    if None in window or window != size or any(_cint(e) != 1 for e in red.shape[-nd:]):
        return None
    return math.prod(window)


def _plane_in_vectors(s: Schedule, out, red, info: CpuModel, plane: int) -> None:
    """Global pooling, channels first (:func:`_whole_plane`): the plane one contiguous
    run (the window's axes fused), reduced in up to ``VECTORS`` whole vectors of
    partial results (one vector, its last step guarded, where none divides the plane:
    a 7x7 map's 49 = 3 vectors and a lane, not 7 rows of 7 lanes), then their lanes as
    a tree (``lane_vectors``' halves: ``L/2 + L/2``, ...), not one after another."""
    L = info.lanes
    rs = s[red]
    run = rs.fuse(*rs.op.reduce_axis)
    F = next((L * v for v in range(VECTORS, 0, -1) if plane % (L * v) == 0), L)
    _, ri = rs.split(run, factor=F)
    rf = s[s.rfactor(red, ri, factor_axis=len(rs.op.axis))]
    halves, w = [], L
    while w > 2:   # (F lanes: first the vectors onto one, then halves of it)
        w = L if F > L and not halves else w // 2
        _, kq = s[red].split(s[red].op.reduce_axis[0], factor=w)
        halves.append(s[s.rfactor(red, kq, factor_axis=len(rs.op.axis))])
    st = s[out]
    rows = st.fuse(*st.op.axis) if len(st.op.axis) > 1 else st.op.axis[0]
    if info.threads > 1:
        st.parallel(rows)
    for stage in [rf] + halves:
        stage.compute_at(st, rows)
        lane = stage.op.axis[-1]
        stage.reorder(*(list(stage.op.axis[:-1]) + list(stage.op.reduce_axis) + [lane]))
        if stage is not rf:
            for k in stage.op.reduce_axis:
                stage.unroll(k)
        if _cint(lane.dom.extent) > L:
            lo, lane = stage.split(lane, factor=L)
            stage.unroll(lo)
        stage.vectorize(lane)
    if red.op is not out.op:
        s[red].compute_at(st, rows)
    s[red].unroll(s[red].op.reduce_axis[0])
    if LEAN_PLANES and plane <= UNROLL_WINDOW:
        for k in rf.op.reduce_axis:
            rf.unroll(k)


def schedule_pool(outs, target: str = "llvm") -> Schedule:
    """Max, average, adaptive and global pooling (1-, 2- and 3-d, channels first or
    last): the padding inlined (a guarded load); the tasks are (batch x channels) with
    the outer spatial loops inside them (channels first: their padded first and last
    rows partitioned off; over short padded rows, a 3-d max pooling's maxima in a
    local block, a 2-d one's data rows prefetched ahead) or every output row (channels
    last: a pixel; over padded data, 2-d and 3-d, a row of pixels, its border pixels
    partitioned off and a max pooling's maxima in a local block, :data:`PEEL_PIXELS`);
    the last axis is
    vectorized, up to four vectors of it a step, with the window unrolled around them
    (an average's sums computed per step).  Global pooling channels first: the plane
    one contiguous run in whole vectors of partial results, their lanes as a tree
    (:func:`_plane_in_vectors`; a plane of at most :data:`UNROLL_WINDOW` unrolled,
    :data:`LEAN_PLANES`).  Channels first, a window too large to
    unroll over a row narrower than a vector, or any window over rows of one output
    (global pooling), is reduced along the data rows in vector partial results
    (``rfactor``; a 7x7 map's: one partial vector of 7 lanes, a sum per column) where
    the window's rows are 4 elements or wider.  Channels first, windows side by side
    along the rows (kernel = stride there, no padding along them: 2x2/2, adaptive
    pooling by a divisor, or to a size whose windows are all as wide and overlap a
    little: 50 -> 7), 2-d and 3-d: per output row, the window's rows reduced in
    contiguous vectors into a local row, then each output from its part of that row
    (a strided load from the cache, not one per tap from the data).  Channels first,
    windows that overlap along strided rows (3x3/2, 3^3/2), 2-d and 3-d: the window in
    two steps (``Schedule.separate``, :func:`_separated`), per output row a local row of
    the window's rows reduced over the data's columns, then each output from its taps
    of it.  Channels first, 1-d windows side by side along a row of whole vectors, of
    an even kernel of 4 or more: the window's pairs first (:func:`_pairs_first`), then
    each output from its pairs.  The peeled pixels' rows and the two-step local rows of
    a window that steps by 2 or more along the rows, where its data and output come
    from memory: the next output row's data prefetched into the L2 along the current
    row (:data:`PREFETCH_NEXT_ROW`), and so do the local rows of windows side by side
    (:data:`PREFETCH_WINDOW_ROWS`); a 3-d window's planes first, the next data plane's
    rows (:data:`PREFETCH_NEXT_PLANE`).  Otherwise, and for any other DAG, the
    auto-scheduler's rules."""
    return _template_or_rules(pool_into, outs, target)
