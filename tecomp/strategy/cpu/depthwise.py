"""Depthwise convolutions (``schedule_depthwise_conv2d_nchw`` /
``schedule_depthwise_conv2d_nhwc``): bound by memory, not by FMAs.

A depthwise 3x3 convolution does 9 FMAs per output element and reads each input element
once (from memory) and again 8 times from the cache; the schedule's job is to stream the
input and the output once, with no copy of the padded input (the padding is read in
place, and the blocks inside the image are partitioned off the border blocks so that
they read it with no test), and to keep the FMA loop free of guards and gathers:

* NCHW: tasks are the (image, channel) planes; a task accumulates ``YB`` rows x one
  vector of columns in registers over the window (the window unrolled, the rows' input
  vectors shared between taps by LLVM).  A stride along the row is one wide load and a
  shuffle per vector (``policy.strided_wide_load``), masked at the padding
  (:data:`STRIDED_MASKED_LOADS`).  Where the input comes from memory (the pass outgrows
  half the last-level cache), each block of rows prefetches the next one's input rows
  (:data:`PREFETCH_ROWS`).
* NHWC: tasks are blocks of output rows of an image (with a guarded tail where no
  block divides the rows, so that the border rows' padding tests stay apart from the
  inner rows': :data:`BORDER_ROWS_APART`); a task accumulates ``XB`` pixels x ``OB``
  channels (whole vectors along the channels, contiguous in memory) over the window.

The block sizes come from the machine model (``Target.machine``: the vector width and
the vector registers); an elementwise epilogue (bias, activation, the float32-to-float16
rounding) is applied to the block in registers on its way out.  The window's
multiply-adds are FMAs (``pragma fp_contract``), and the output of a pass over more than
half the last-level cache is stored past the cache (``pragma nontemporal``,
:func:`_streams_output`)."""
from __future__ import annotations

from typing import Optional

from ...schedule.schedule import Schedule
from .._common import (_bytes, _cint, _largest_divisor_at_most, _outgrows_llc,
                       _streams_past_llc)
from .common import _NoTemplate, _template_or_rules, _vector_split
from .conv2d import (_conv_parts, _conv_register_block, _conv_weight, _own_pad,
                     _unroll_window)
from .conv2d_tasks import _conv_parallel
from .elementwise import _epilogue, _fusable_epilogue
from ...target import CpuModel


#: ``a*b + c`` in the templates' window loops may be one FMA (one rounding instead of
#: two; ``pragma fp_contract``): LLVM emitted a multiply and an add per tap, and the
#: NHWC blocks spilled registers.  Off: the products rounded before the sum, as before
#: (measurements: benchmarks/history/2026-11-30.md, "Depthwise NHWC batch 8")
FMA = True

#: the templates' output stores bypass the cache (``pragma nontemporal``): None where
#: the pass's input and output take more than half the last-level cache
#: (:func:`_streams_output`), True / False everywhere / nowhere
STREAM_OUTPUT: Optional[bool] = None

#: the NCHW rows blocking with a column stride (a vector of every other input column)
#: reads its padded taps (a lane mask where the window meets the left or right
#: padding: every tap, since the mask depends on the tap) as one masked wide load and
#: a shuffle (``pragma masked_wide_loads``), not a gather.  Batch 8, one thread, CPU
#: time, Zen 4, under load: 256x28x28 stride 2 0.511 -> 0.184 ms, 512x14x14 0.264 -> 0.132,
#: 64x112x112 4.45 -> 2.24 (its input from memory), grouped 256x56x56 stride 2 in
#: groups of 8 6.60 -> 5.71.  Off: the gathers, as before
#: (``benchmarks/depthwise_conv.py --ab STRIDED_MASKED_LOADS``)
STRIDED_MASKED_LOADS = True

#: the NCHW rows blocking that reads its input in place (depthwise) prefetches, at each
#: block of rows, the input rows of the next block (into L1, ``prefetcht0``): None
#: where the input comes from memory (:func:`_input_from_memory`), True / False
#: everywhere / nowhere.  The hardware prefetchers alone brought a 112x112 plane read 9
#: rows at a time (a stride of 2) at 44% of the read stream.  Zen 5, batch 8, one
#: thread, CPU time, under load (load average 9-12), three runs: 64x112x112 stride 2
#: 1.74-2.06x faster (2.35 -> 1.19 ms), 32x112x112 1.30-1.63x, 128x56x56 1.01-1.13x;
#: forced on passes that stay in the cache (batch 1, 256x28x28 and smaller at batch 8)
#: moved 0.78-1.36x, within that load's noise, so they keep the hardware prefetchers.
#: Off: the hardware prefetchers alone, as before
#: (``benchmarks/depthwise_conv.py --ab PREFETCH_ROWS``)
PREFETCH_ROWS: Optional[bool] = None

#: the NHWC pixels blocking (depthwise, and grouped convolutions that take it) of
#: several images whose rows no block of 4 or 2 divides with enough tasks (7x7 outputs)
#: takes blocks of rows with a guarded tail, so that the border rows' padding tests are
#: parted from the inner rows' loads; off, a task per (image, row), its every tap behind
#: a test, as before (``benchmarks/depthwise_conv.py --ab BORDER_ROWS_APART``)
BORDER_ROWS_APART = True


def _lanes(conv, info: CpuModel) -> int:
    """Elements of the accumulation dtype in one vector register."""
    return max(1, info.lanes * 32 // (64 if conv.dtype == "float64" else 32))


def _streams_output(conv, out, info: CpuModel) -> bool:
    """Whether the template's stores to ``out`` (the convolution or its epilogue)
    should bypass the cache (:data:`STREAM_OUTPUT`).  A pass over more than half the
    last-level cache (or than the model's measured ``stream_output_bytes``: NHWC batch
    8 128x56x56 streamed 1.20-1.27x faster on the Intel Xeon VM, whose sysfs L3 is 480
    MiB, one thread, under load) leaves little of its output there for the next operator, and each
    line it writes through the cache is read first: streamed, the line is written once.
    Batch 8 MobileNet layers, one thread, under load: 32x112x112 NHWC 0.85 -> 0.56 ms,
    128x56x56 1.45 -> 1.03; the pass and a sum over its output (the worst next
    operator, which reads it back from memory) within 10% either way (32x112x112 0.99
    -> 0.96 and 1.02 -> 1.11 ms, 128x56x56 1.84 -> 1.70); at batch 1 (3.2 MB) that pair
    went 0.068 -> 0.086 ms, so smaller passes keep the cache (measurements:
    benchmarks/history/2026-11-30.md, "Depthwise NHWC batch 8")."""
    if STREAM_OUTPUT is not None:
        return STREAM_OUTPUT
    return _streams_past_llc([conv.op.input_tensors[0]], out, info,
                             limit=info.stream_output_bytes)


def _input_from_memory(conv, info: CpuModel) -> bool:
    """Whether the stage ``conv`` reads its input from memory call after call: its
    input, weights and output together take more than the part of the last-level cache
    a pass keeps (:func:`~tecomp.strategy._common._outgrows_llc`, the bound
    :func:`_streams_output` takes too)."""
    sizes = [_bytes(t) for t in list(conv.op.input_tensors) + [conv]]
    return None not in sizes and _outgrows_llc(sum(sizes), info,
                                               limit=info.stream_output_bytes)


def _column_stride(conv) -> int:
    """The stride along the columns of a depthwise or grouped convolution stage."""
    for key in ("depthwise_conv2d", "group_conv2d"):
        if key in conv.op.attrs:
            return conv.op.attrs[key][0][1]
    return 1


def _block(extent: Optional[int], most: int) -> int:
    """A block of at most ``most`` along an output axis of ``extent``: its largest
    divisor up to ``most`` when that is at least half of ``most`` (no tail), else
    ``most`` (a guarded tail)."""
    if extent is None:
        return most
    if extent <= most:
        return extent
    d = _largest_divisor_at_most(extent, most)
    return d if 2 * d >= most else most


def _inline_pad(s: Schedule, st, pad, loops) -> None:
    """The padding read in place (inlined: a select around each load) and the output's
    row and column block ``loops`` partitioned on its conditions (``pragma
    "partition"``): the blocks inside the image read the input with no test, the border
    blocks keep it.  Computing the padded input per task instead (in the cache) copied
    it once more: 1.5x-2.3x slower, single-threaded, interleaved (32 channels at
    112x112 NHWC 0.192 vs 0.129 ms, 256 at 28x28 0.090 vs 0.048; NCHW 32 at 112x112
    0.183 vs 0.116, 64 at 112x112 stride 2 0.264 vs 0.164; without padding 0.117 and
    0.039)."""
    if pad is None:
        return
    s[pad].compute_inline()
    for ax in loops:
        st.pragma(ax, "partition")


def _nchw_rows_into(s: Schedule, outs, info: CpuModel, tag: str, ob: int,
                    fma: bool = False, stream: bool = False, copy: bool = False) -> None:
    """Schedule the NCHW convolution stage tagged ``tag`` (depthwise or grouped) under
    ``outs``: blocks of ``ob`` output channels (which read the same input channels:
    ``ob`` divides a group's) x ``YB`` rows x one vector of columns (the whole row when
    it is narrower), accumulated in registers over the channels of the group (none for
    a depthwise one) and the window (unrolled; the rows' input vectors shared between
    taps and channels by LLVM); tasks are the (image, channel block) pairs.

    ``fma``: the window's multiply-adds contracted (``pragma fp_contract``); ``stream``:
    the output stored past the cache where :func:`_streams_output` says so (``pragma
    nontemporal``).  ``copy``: each task first copies the input channels it reads (a group's planes,
    contiguous in memory, unpadded: the padding is still read in place) into a buffer,
    one sequential stream of independent loads, where the blocks read the planes row
    by row in place (grouped, :mod:`.grouped`)."""
    conv, pad = _conv_parts(outs, tag)
    pad = _own_pad(s, pad)
    N, O, OH, OW = (_cint(e) for e in conv.shape)
    L = _lanes(conv, info)
    xb = OW if OW is not None and OW <= L else L
    # YB rows: up to 4, about half the vector registers of accumulators
    yb = _block(OH, max(1, min(4, (info.vregs // 2) // ob)))
    fused = _fusable_epilogue(outs, conv)
    st, (n, oc, yc, xc), cs, (cn, co, cy, cx), tiles = _conv_register_block(
        s, conv, (1, ob, yb, xb), out=fused)
    window = cs.op.reduce_axis[-2:]
    cs.reorder(*tiles, cn, *cs.op.reduce_axis, co, cy, cx)
    _unroll_window(cs, *window)
    cs.unroll(co)
    cs.unroll(cy)
    cs.vectorize(cx)
    task = st.fuse(n, oc)
    if info.threads > 1:
        st.parallel(task)
    # the input tensor (the padding's, where it is inlined)
    src = pad.op.input_tensors[0] if pad is not None else [
        t for t in conv.op.input_tensors if t is not _conv_weight(conv)][0]
    if copy:
        cp = s[s.cache_read(src, "global", [s[pad] if pad is not None else cs])]
        cp.compute_at(st, task)
        _vector_split(cp, cp.fuse(*cp.op.axis[2:]), None, L)
    _inline_pad(s, st, pad, (yc, xc))
    if not copy and (PREFETCH_ROWS if PREFETCH_ROWS is not None
                     else _input_from_memory(conv, info)):
        # the input rows of the next block of rows, one block ahead, into L1
        st.prefetch(src, yc, 1, level=1)
    if STRIDED_MASKED_LOADS and pad is not None and _column_stride(conv) > 1:
        st.pragma(task, "masked_wide_loads")
    if fma:
        st.pragma(task, "fp_contract")
    if stream and _streams_output(conv, fused if fused is not None else conv, info):
        st.pragma(task, "nontemporal")
    _epilogue(s, outs, conv, info, fused)


def _nhwc_pixels_into(s: Schedule, outs, info: CpuModel, tag: str, ob: int,
                      across: bool = False, fma: bool = False,
                      stream: bool = False) -> None:
    """Schedule the NHWC convolution stage tagged ``tag`` (depthwise or grouped) under
    ``outs``: blocks of ``XB`` pixels x ``ob`` output channels (whole vectors along the
    channels, contiguous in memory), accumulated in registers over the window and the
    channels of the group (none for a depthwise one); tasks are blocks of output rows
    of an image.

    ``across``: a vector spans several groups (grouped only): each lane reads its own
    group's input channel, a load and an in-register shuffle per pixel, channel and tap
    (``lane_pattern`` in the code generator); the group's channel loop is unrolled (its
    loads side by side) and multiplies and adds are fused."""
    conv, pad = _conv_parts(outs, tag)
    pad = _own_pad(s, pad)
    N, OH, OW, O = (_cint(e) for e in conv.shape)
    L = _lanes(conv, info)
    nvo = -(-ob // L)
    # XB pixels: up to 8, about half the vector registers of accumulators
    xb = _block(OW, max(1, min(8, (info.vregs // 2) // nvo)))
    fused = _fusable_epilogue(outs, conv)
    st, (n, y, xo, oo), cs, (cn, cy, cx, co), tiles = _conv_register_block(
        s, conv, (1, 1, xb, ob), out=fused)
    window = cs.op.reduce_axis[:2]
    cs.reorder(*tiles, cn, cy, *cs.op.reduce_axis, cx, co)
    _unroll_window(cs, *window)
    cs.unroll(cx)
    cs.vectorize(co)
    if across:
        cs.unroll(cs.op.reduce_axis[2])
    # a task is R output rows of an image (R while there are still 8 tasks per thread):
    # the (R - 1) * stride + KH input rows it reads stay in L2 across them
    T = max(1, info.threads)
    R = 1
    # (a vector across groups: one row, 12% faster than 4 on 128x56x56 in groups of 4,
    # batch 8, one thread, under load, CPU time)
    if OH is not None and not across:
        for r in (4, 2):
            if OH % r == 0 and (OH // r) * (N or 1) >= 8 * T:
                R = r
                break
        if R == 1 and N != 1 and OH > 1 and BORDER_ROWS_APART:
            # a task of one row of one of several images fuses the image and the row:
            # the row is then the task modulo OH, and the loop partition cannot part
            # the border rows' guards from the inner rows (every tap's load behind a
            # test).  Blocks of 4 or 2 rows, a guarded tail where they do not divide OH
            # (7 rows: 4 + 3), the rows a loop of their own that it does part
            R = next((r for r in (4, 2) if -(-OH // r) * (N or 1) >= 8 * T), 2)
    if R > 1:
        yo, yi = st.split(y, factor=R)
        st.reorder(n, yo, yi, xo, oo)
        task, _ = _conv_parallel(st, [n, yo], [N, -(-OH // R)], info.threads, 1 << 30)
    else:
        task, _ = _conv_parallel(st, [n, y], [N, OH], info.threads, 1 << 30)
    _inline_pad(s, st, pad, (yi if R > 1 else task, xo))
    if across or fma:
        st.pragma(st.leaf_iter_vars[0], "fp_contract")
    if stream and _streams_output(conv, fused if fused is not None else conv, info):
        st.pragma(st.leaf_iter_vars[0], "nontemporal")
    _epilogue(s, outs, conv, info, fused)


def _depthwise_nchw_into(s: Schedule, outs, info: CpuModel) -> None:
    # a task is one (image, channel) plane
    _nchw_rows_into(s, outs, info, "depthwise_conv2d_nchw", 1, fma=FMA, stream=True)


def _depthwise_nhwc_into(s: Schedule, outs, info: CpuModel) -> None:
    conv, _ = _conv_parts(outs, "depthwise_conv2d_nhwc")
    O = _cint(conv.shape[3])
    L = _lanes(conv, info)
    # two vectors of channels where they divide the channels, else one
    ob = 2 * L if O is not None and O % (2 * L) == 0 else (O if O is not None and O < L
                                                          else L)
    _nhwc_pixels_into(s, outs, info, "depthwise_conv2d_nhwc", ob, fma=FMA,
                      stream=True)


def schedule_depthwise_conv2d_nchw(outs, target: str = "llvm") -> Schedule:
    """The CPU schedule of :func:`tecomp.nn.depthwise_conv2d_nchw` (and of
    ``conv2d_nchw`` with ``groups`` equal to the channels), plus any elementwise
    epilogue (see the module); other DAGs get the auto-scheduler's rules.

    Parameters
    ----------
    outs : Tensor or list of Tensor
        The operator's output (or the epilogue's).
    target : str or Target, optional
        An LLVM CPU target; its machine model sizes the blocks.

    Returns
    -------
    Schedule
        The schedule.

    Examples
    --------
    >>> import tecomp as tc
    >>> import tecomp.nn as nn
    >>> from tecomp.strategy import cpu
    >>> X = tc.placeholder((1, 8, 16, 16), name="X"); W = tc.placeholder((8, 1, 3, 3), name="W")
    >>> Y = nn.depthwise_conv2d_nchw(X, W, padding=1)
    >>> f = tc.build(cpu.schedule_depthwise_conv2d_nchw(Y), [X, W, Y])
    """
    return _template_or_rules(_depthwise_nchw_into, outs, target)


def schedule_depthwise_conv2d_nhwc(outs, target: str = "llvm") -> Schedule:
    """The CPU schedule of :func:`tecomp.nn.depthwise_conv2d_nhwc` (and of
    ``conv2d_nhwc`` with ``groups`` equal to the channels), plus any elementwise
    epilogue (see the module); other DAGs get the auto-scheduler's rules.

    Parameters
    ----------
    outs : Tensor or list of Tensor
        The operator's output (or the epilogue's).
    target : str or Target, optional
        An LLVM CPU target; its machine model sizes the blocks.

    Returns
    -------
    Schedule
        The schedule.
    """
    return _template_or_rules(_depthwise_nhwc_into, outs, target)



def _depthwise_part(s: Schedule, out, knobs, info: CpuModel):
    """The depthwise template for a depthwise convolution inside a larger DAG (a data
    gradient next to the weight's, a layer of a network): the ids of the operations it
    scheduled (the stage, its inlined padding, the copies it made), or None."""
    nchw = "depthwise_conv2d_nchw" in out.op.tag.split(",")
    before = {id(st.op) for st in s.stages}
    try:
        _, pad = _conv_parts([out], "depthwise_conv2d_nchw" if nchw else
                             "depthwise_conv2d_nhwc")
    except _NoTemplate:
        return None
    inlined = pad is not None and _own_pad(s, pad) is not None
    (_depthwise_nchw_into if nchw else _depthwise_nhwc_into)(s, [out], info)
    return ({id(out.op)} | ({id(pad.op)} if inlined else set())
            | {id(st.op) for st in s.stages if id(st.op) not in before})
