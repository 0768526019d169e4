"""Grouped convolutions (``schedule_group_conv2d_nchw`` / ``schedule_group_conv2d_nhwc``:
``tecomp.nn.conv2d_*`` with ``groups`` between 1 and the channels, tag
``group_conv2d_*``).

Output channel ``o`` sums the ``I`` input channels of its group ``o // P`` (``P`` output
channels per group).  A register block of outputs therefore shares its input vectors
only while it stays inside one group:

* Channel blocks (``channel_blocks``, :func:`_group_blocks_into`; both layouts): a
  block is ``YB x XB`` pixels x ``OB`` output channels of one group (vectors across the
  channels, ``OB`` divides ``P``): each pixel broadcasts one input value per input
  channel and tap, the weights are ``OB / L`` vector loads, as in the dense NHWC
  kernel (:func:`.conv2d.schedule_conv2d_nhwc`).  A task is an image's
  ``groups_per_task`` groups: it first copies their input, padded, into a buffer
  stored group by group (``[group, row, column, channel]`` for NHWC, the group's
  planes for NCHW), and the weights are copied once, group by group (``[group, ...,
  P]``): every block then reads contiguous memory.  Read in place, a group's slice of
  an NHWC pixel is 64 bytes every ``C * 4`` bytes, and a 512-channel image's block
  kept 2 KB-strided lines, a few L1 sets' worth, where it needed 60.  The default
  where the groups make whole vectors (``P`` a multiple of ``L``), and for an NHWC
  convolution without a stride.  NCHW: each output row of a block (``XB`` pixels x
  ``L`` channels) is stored through one register transpose
  (``x86.transpose_f32_<XB>x<L>``, ``transpose_out``) into the ``L`` channel planes,
  where a vector per pixel was a scatter across them (Zen 5, one thread, batch 8, under
  load: 512x14x14 2.25 -> 1.59 ms, 1024x7x7 1.69 -> 1.27 ms, 512x28x28 stride 2 2.53
  -> 2.17 ms; batch 1 7-8% faster); such a block keeps at most half the vector
  registers as accumulators, the rest for the transposes (:data:`NCHW_TRANSPOSE_ROOM`).  An elementwise epilogue (bias, ReLU) is computed
  into a register tile of its own first, which the transposes store (with a bias and
  a ReLU, batch 8: 512x14x14 2.15 -> 1.39 ms, 1024x7x7 1.70 -> 1.29 ms).
* Rows (NCHW, :func:`.depthwise._nchw_rows_into`): a block is ``OB`` output channels
  of one group (``OB`` divides ``P``) x ``YB`` rows x one vector of columns; the
  block's channels read the same input rows, so each input vector loaded feeds ``OB``
  FMAs (the weights are broadcasts; multiplies and adds contracted, :data:`ROWS_FMA`:
  Zen 4, one thread, CPU time, under load, batch 8: 256x28x28 3.73 -> 2.87 ms, 128x56x56
  3.65 -> 3.06 ms, 256x56x56 stride 2 5.51 -> 4.80 ms).  Tasks are the (image, channel block) pairs; each
  copies its group's input planes first where the data outgrow the caches
  (``copy_input``, :func:`group_conv2d_params`).
* Pixels (NHWC, :func:`.depthwise._nhwc_pixels_into`): a block is ``XB`` pixels x
  ``OB`` output channels, vectors along the channels, the input read in place.  Tasks
  are blocks of output rows.  Where a group is at most a quarter of a vector
  (:func:`_across_groups`: ResNeXt's 128 channels in 32 groups of 4, 16 float32 lanes)
  a vector spans several groups: each lane reads its own group's input channel, one
  contiguous load and a shuffle per pixel, channel and tap (the code generator's
  ``lane_pattern``), where a vector of the group's channels would fill a quarter of
  its lanes.  This is the default there, in both strides.

* Interleaved vectors (NHWC, :func:`_interleaved_into`; the default where a group's
  ``P`` output channels divide a vector into ``Q = L / P >= 2`` groups): lane ``k * Q +
  t`` of a vector is channel ``k`` of the ``t``-th of ``Q`` groups, so that an input
  channel's ``Q`` values (one per group), stored side by side in a padded copy, are one
  broadcast (``vbroadcastsd`` for ``Q = 2``) feeding a whole FMA; the weights are copied
  in the same lane order and the accumulators go back to channel order with one shuffle
  per vector on their way out.  A block is up to ``vregs - 4 - (KW - 1)`` pixels x one
  vector, the window's columns inside the input channel (:data:`SHARE_TAP_BROADCASTS`):
  each broadcast of an input column feeds up to ``KW`` FMAs.
  Measured on Zen 5 (batch 8, one thread, CPU time, under load): 128x56x56 (groups of 4)
  1.51x -> 2.95x PyTorch, 256x56x56 stride 2 (groups of 8) 0.82x -> 1.65x, 256x28x28
  1.12x -> 2.13x (benchmarks/DECISIONS.md, "Grouped NHWC: interleaved vectors").
  Groups of one vector (``P == L``: ResNeXt's 512 channels in 32 groups of 16) are
  interleaved two to two vectors (:func:`_interleave_shape`), each vector half of both
  groups' channels, so that a broadcast feeds two FMAs; the tasks are an image's pairs
  of groups over the whole plane where its padded copy fits in L1.  Measured on Zen 5
  (batch 8, one thread, CPU time, medians of 150 interleaved rounds, under load),
  against channel blocks: 512x14x14 1.21 -> 1.17 ms and 1.16 -> 1.13 ms (two runs),
  512x28x28 stride 2 2.09 -> 1.83 ms and 2.11 -> 1.80 ms.

In the rows and pixels blockings the padding is read in place and the blocks inside the image are
partitioned off the border ones (as the depthwise template, :mod:`.depthwise`): on a
14x14 or 7x7 plane every block touches the border, and each of its loads is a select.

Measured (ResNeXt-50 32x4d's layers at batch 8, one thread, interleaved with
PyTorch, under load): with 16 or 32 channels per group, channel blocks took
512x14x14 from 0.6x to 1.0x PyTorch and 1024x7x7 from 0.35-0.6x to 1.0x in both
layouts; with 4 or 8, rows and channel blocks ran as fast in NCHW, and in NHWC channel
blocks ran faster without a stride (256x28x28: 1.0x against 0.85x) and slower with one
(256x56x56 stride 2: 0.83x against 1.09x)."""
from __future__ import annotations

from typing import Optional

from ...ir import dtype as _dt
from ...errors import ScheduleError
from ...schedule.schedule import Schedule
from .._common import _bytes, _cint, _largest_divisor_at_most
from .common import (_NoTemplate, _template_or_rules, _vector_split, check_positive_int,
                     config_fields)
from .conv2d import (_conv_block_nhwc, _conv_parts, _conv_weight, _own_pad,
                     _pixels_by_channels)
from .conv2d_tasks import _weight_transpose
from ...te.tensor_intrin import transpose_intrin
from .depthwise import _block, _lanes, _nchw_rows_into, _nhwc_pixels_into
from .elementwise import _epilogue, _fusable_epilogue
from ...target import CpuModel

#: the fields of a grouped convolution template's ``config``
GROUP_CONV_FIELDS = ("channel_blocks", "ob", "yb", "xb", "groups_per_task", "interleave",
                     "copy_input", "transpose_out")


def _per_group(conv) -> int:
    """Output channels per group of a ``group_conv2d_*`` stage."""
    groups = conv.op.attrs["group_conv2d"][3]
    O = _cint(conv.shape[1] if "group_conv2d_nchw" in conv.op.tag.split(",")
              else conv.shape[3])
    return O // groups


def _group_dims(conv):
    """(N, O, OH, OW, G, P, I): a grouped stage's batch, output channels and plane, its
    groups, output and input channels per group (None where not constant)."""
    nchw = "group_conv2d_nchw" in conv.op.tag.split(",")
    if nchw:
        N, O, OH, OW = (_cint(e) for e in conv.shape)
    else:
        N, OH, OW, O = (_cint(e) for e in conv.shape)
    G = conv.op.attrs["group_conv2d"][3]
    I = _cint(conv.op.reduce_axis[0 if nchw else 2].dom.extent)
    return N, O, OH, OW, G, O // G, I


def _packed_bytes(conv, gpt: int) -> Optional[int]:
    """Bytes of a channel-block task's padded input copy of ``gpt`` groups (None where
    the plane or the channels are symbolic)."""
    src = conv.op.input_tensors[0]
    nchw = "group_conv2d_nchw" in conv.op.tag.split(",")
    hw = [_cint(e) for e in (src.shape[2:] if nchw else src.shape[1:3])]
    I = _group_dims(conv)[6]
    if None in hw or I is None:
        return None
    return gpt * I * hw[0] * hw[1] * (_dt.bits(src.dtype) // 8)


def _across_groups(conv, info: CpuModel) -> bool:
    """Whether the NHWC stage ``conv``'s vectors span several groups: where a group is
    at most a quarter of a vector (and the vectors hold whole groups).  Its lanes then
    read each group's input channel with one load and an in-register shuffle per
    pixel, channel and tap, and each FMA fills the vector; a vector of the group's
    ``P`` channels fills ``P / L`` of its lanes with one broadcast load.  Two FMAs a
    cycle against one shuffle: the wider vector does twice the work per cycle where
    ``P <= L / 4`` and no more at ``L / 2`` (measured, one thread, under load, batch 8:
    128x56x56 in groups of 4 1.4-1.5x PyTorch against 1.0x; 256x28x28 in groups of 8
    2.5x slower)."""
    N, O, OH, OW, G, P, I = _group_dims(conv)
    L = _lanes(conv, info)
    return (P is not None and O is not None and 4 * P <= L and L % P == 0
            and O % L == 0 and I is not None and I <= 2 * L)


#: whether groups of a whole vector of output channels (``P == L``) are interleaved too
#: (:func:`_interleave_shape`: two groups to 2 vectors); off, they take channel blocks,
#: one vector per pixel, as before (the A/B switch of ``benchmarks/depthwise_conv.py
#: --ab``)
INTERLEAVE_WHOLE_VECTORS = True


#: whether the NCHW rows blocking copies each task's input planes first where they fit
#: (``copy_input``, :func:`group_conv2d_params`); off, the rows read them in place, as
#: before (an A/B switch of ``benchmarks/depthwise_conv.py --ab COPY_NCHW_INPUT``)
COPY_NCHW_INPUT = True

#: whether the interleaved NHWC template's groups narrower than a vector (one vector of
#: ``Q`` groups) take an image's block of ``Q`` groups over the whole plane as a task
#: where its tasks of rows would copy each input row twice or more (few rows per task:
#: a small batch) and the plane's padded copy fits in a quarter of L2; off, tasks of rows
#: there, as before (``benchmarks/depthwise_conv.py --ab PLANE_TASKS_ONE_VECTOR``)
PLANE_TASKS_ONE_VECTOR = True

#: whether the interleaved NHWC template's groups narrower than a vector (one vector of
#: ``Q`` groups) loop over the input channel outside the window's columns (unrolled), so
#: that a block of ``XB`` pixels reads ``XB + KW - 1`` input columns per channel and row
#: of the window, each broadcast once and feeding up to ``KW`` FMAs (the loads of one
#: column are one value to LLVM), where each FMA had a broadcast of its own; the block
#: leaves ``KW - 1`` registers more for the weights.  Off: the columns outside the
#: channel, as before (``benchmarks/depthwise_conv.py --ab SHARE_TAP_BROADCASTS``)
SHARE_TAP_BROADCASTS = True

#: whether the NCHW rows blocking fuses each multiply and add into an FMA (``pragma
#: fp_contract``, as the depthwise rows do); off, a multiply and an add per tap, as before
#: (``benchmarks/depthwise_conv.py --ab ROWS_FMA``)
ROWS_FMA = True

#: whether the NCHW channel blocks store their output through register transposes
#: (``transpose_out``, :func:`_transposes_out`); off, one scatter per vector, as before
#: (``benchmarks/depthwise_conv.py --ab NCHW_TRANSPOSE_OUT``)
NCHW_TRANSPOSE_OUT = True


#: whether the NCHW channel blocks that store through register transposes keep at most
#: half the vector registers as accumulators (fewer rows of pixels), the rest for the
#: transposes; off, the NHWC kernel's block, as before
#: (``benchmarks/depthwise_conv.py --ab NCHW_TRANSPOSE_ROOM``)
NCHW_TRANSPOSE_ROOM = True


def _transposes_out(conv, info: CpuModel, ob: int, yb: int, xb: int) -> bool:
    """Whether the NCHW channel blocks of ``ob`` channels x ``yb x xb`` pixels of the
    grouped stage ``conv`` can store each output row of a block through ``x86.transpose_
    f32_<xb>x<L>`` (``xb`` pixels x ``L`` channels into ``L`` rows of ``xb``): float32,
    whole vectors of channels, a row of at most a vector, and blocks that tile the
    rows (no guarded columns; a guarded row at the bottom edge is one row less)."""
    N, O, OH, OW, G, P, I = _group_dims(conv)
    L = _lanes(conv, info)
    return (conv.dtype == "float32" and None not in (OH, OW) and ob % L == 0
            and 2 <= xb <= L and OW % xb == 0
            and transpose_intrin(info.target, L, "float32", xb) is not None)


def _interleave_shape(P: int, L: int):
    """``(Q, V)``: ``Q`` groups to a vector and ``V`` vectors to a block of ``Q`` groups
    (``P * Q == V * L``), or None where ``P`` output channels per group do not
    interleave.  A group narrower than a vector (``P`` dividing ``L``): ``Q = L / P``,
    one vector.  A group of one vector (``P == L``, :data:`INTERLEAVE_WHOLE_VECTORS`):
    ``Q = 2``, each vector holding half of both groups' channels, so that each
    2-element input broadcast feeds ``V = 2`` FMAs, where a vector of one group's
    channels takes one broadcast load per FMA (on Zen 5, one core, a loop of 28 FMAs
    each with its broadcast from memory ran at 88% of the FMA peak, 14 pixels x 2
    vectors with the broadcast in a register at 100%)."""
    if P < L and L % P == 0:
        return L // P, 1
    if P == L and L % 2 == 0 and INTERLEAVE_WHOLE_VECTORS:
        return 2, 2
    return None


def _block_plane_bytes(conv, Q: int) -> int:
    """About the bytes of the padded input plane of ``Q`` groups of the grouped NHWC
    stage ``conv`` (the window's reach beyond the plane as padding), constant shapes."""
    weight = _conv_weight(conv)
    src = [t for t in conv.op.input_tensors if t is not weight][0]
    dh, dw = conv.op.attrs["group_conv2d"][2]
    H, W = _cint(src.shape[1]), _cint(src.shape[2])
    KH, KW = _cint(weight.shape[0]), _cint(weight.shape[1])
    I = _group_dims(conv)[6]
    return (H + (KH - 1) * dh) * (W + (KW - 1) * dw) * I * Q * (_dt.bits(src.dtype) // 8)


def _interleaves(conv, info: CpuModel) -> bool:
    """Whether the NHWC stage ``conv`` can run in interleaved vectors
    (:func:`_interleaved_into`): float32, a group narrower than a vector and dividing
    it (``Q = L / P`` groups to a vector, at least 2), the output channels whole
    vectors, a constant plane, and the padded input rows that one output row reads
    (every task copies them) within L2 (a bound on the tasks' buffers, not a measured
    threshold: ResNeXt's largest, 256x56x56 stride 2, copies 178 KB a row)."""
    if "group_conv2d_nhwc" not in conv.op.tag.split(","):
        return False
    N, O, OH, OW, G, P, I = _group_dims(conv)
    L = _lanes(conv, info)
    if not (all(t.dtype == "float32" for t in [conv] + list(conv.op.input_tensors))
            and None not in (O, OH, OW, P, I) and len(conv.op.input_tensors) == 2
            and (qv := _interleave_shape(P, L)) is not None and O % (P * qv[0]) == 0):
        return False
    weight = _conv_weight(conv)
    src = [t for t in conv.op.input_tensors if t is not weight][0]
    KH, dh = _cint(weight.shape[0]), conv.op.attrs["group_conv2d"][2][0]
    W, C = _cint(src.shape[2]), _cint(src.shape[3])
    return None not in (KH, W, C) and ((KH - 1) * dh + 1) * W * C * 4 <= info.l2_bytes


def group_conv2d_params(conv, info: CpuModel) -> dict:
    """The heuristic's config of the grouped stage ``conv`` (a dict of
    :data:`GROUP_CONV_FIELDS`, see :func:`schedule_group_conv2d_nchw`)."""
    N, O, OH, OW, G, P, I = _group_dims(conv)
    nchw = "group_conv2d_nchw" in conv.op.tag.split(",")
    L = _lanes(conv, info)
    ob, yb, xb = _conv_block_nhwc(P, OH, OW, info)
    # a block is whole vectors of one group: the largest divisor of P up to 2 vectors
    ob = P if P <= 2 * L else (2 * L if P % (2 * L) == 0 else _largest_divisor_at_most(P, 2 * L))
    one = _packed_bytes(conv, 1)
    # (the data and the weight one tensor: the channel blocks cannot copy both)
    fits = one is not None and one <= info.l2_bytes // 4 and len(conv.op.input_tensors) > 1
    # NCHW: rows where the groups are narrower than a vector (2.7x and 1.2x PyTorch at
    # 4 and 8 channels per group, as fast either way); NHWC: pixels read in place
    # where a strided window's copy (4x the input per output) feeds half-empty vectors
    # (256x56x56 stride 2 in groups of 8: 0.83x against 1.09x), channel blocks in the
    # other cases measured (1.0-1.2x against 0.6-1.0x)
    strided = any(v > 1 for v in conv.op.attrs["group_conv2d"][0])
    blocks = fits and (P % L == 0 or (not nchw and not strided
                                      and not _across_groups(conv, info)))
    if (nchw and blocks and NCHW_TRANSPOSE_ROOM
            and _transpose_out_default(conv, info, blocks, ob, yb, xb)):
        # (a block row's transpose needs about a vector register per row it makes:
        # the accumulators keep half of them.  512x14x14 at batch 8, one thread, CPU
        # time, Zen 4, under load: 2 rows x 14 pixels, 28 accumulators, spilled around the
        # transposes; 1 row 2.68 -> 2.39 ms, 512x28x28 stride 2 3.37 -> 3.14 ms,
        # 1024x7x7 (2 vectors x 2 rows x 7 -> 1 row) 2.29 -> 2.24 ms)
        pix = max(1, (info.vregs // 2) // -(-ob // L))
        if yb * xb > pix and xb <= pix:
            yb = max(1, pix // xb)
    gpt = 1
    if fits:
        # groups per task: a task reads at least 128 channels of a pixel (512 bytes
        # in a row) while its copy stays within a quarter of L2 and there are still
        # 4 tasks per thread
        while (G % (2 * gpt) == 0 and gpt * I < 128
               and _packed_bytes(conv, 2 * gpt) <= info.l2_bytes // 4
               and (N or 1) * (G // (2 * gpt)) >= 4 * max(1, info.threads)):
            gpt *= 2
    # NCHW rows: a task (an image's block of channels of one group) copies the group's
    # input planes first where they fit in a quarter of L2 and the input and output
    # together outgrow a quarter of L3 (or the batch is symbolic).  Read in place, row
    # by row, the planes came from memory at 6 GB/s there (Zen 5, one thread, under
    # load, batch 8: 128x56x56 4.0 -> 1.9 ms, 256x56x56 stride 2 12.2 -> 3.4 ms,
    # 256x28x28 2.5 -> 1.6 ms; 128x56x56 ran at 175 GFLOP/s in place up to batch 2,
    # 6.4 MB, and at 50 from batch 3, 9.6 MB); with the input in the cache the copy
    # cost 3-9% (batch 1, the same layers)
    both = None if N is None or one is None else N * _packed_bytes(conv, G) + _bytes(conv)
    copy = (nchw and not blocks and COPY_NCHW_INPUT and one is not None
            and one <= info.l2_bytes // 4 and (both is None or both > info.l3_bytes // 4))
    return {"channel_blocks": blocks, "ob": ob, "yb": yb, "xb": xb, "groups_per_task": gpt,
            "interleave": not nchw and _interleaves(conv, info), "copy_input": copy,
            "transpose_out": _transpose_out_default(conv, info, blocks, ob, yb, xb)}


def _transpose_out_default(conv, info: CpuModel, blocks: bool, ob: int, yb: int,
                           xb: int) -> bool:
    """The heuristic's ``transpose_out``: NCHW channel blocks store through register
    transposes wherever they can (:func:`_transposes_out`).  Measured: see
    :data:`NCHW_TRANSPOSE_OUT`."""
    return ("group_conv2d_nchw" in conv.op.tag.split(",") and blocks and NCHW_TRANSPOSE_OUT
            and _transposes_out(conv, info, ob, yb, xb))


def _group_config(conv, info: CpuModel, config, layout: str) -> dict:
    """``config`` (None or a dict of some of :data:`GROUP_CONV_FIELDS`) over the
    heuristic's (:func:`group_conv2d_params`), checked."""
    who = f"group_conv2d_{layout} schedule"
    p = group_conv2d_params(conv, info)
    given = config_fields(config, who, GROUP_CONV_FIELDS)
    p.update(given)
    for k in ("ob", "yb", "xb", "groups_per_task"):
        check_positive_int(who, k, p[k])
    for k in ("channel_blocks", "interleave", "copy_input", "transpose_out"):
        if not isinstance(p[k], bool):
            raise ScheduleError(f"{who}: {k} must be True or False, got {p[k]!r:.40}")
    if "transpose_out" not in given:
        # (the heuristic's for the blocking and the block given)
        p["transpose_out"] = _transpose_out_default(conv, info, p["channel_blocks"], p["ob"],
                                                    p["yb"], p["xb"])
    if p["copy_input"] and layout != "nchw":
        raise ScheduleError(f"{who}: copy_input=True is an option of the NCHW rows blocking "
                            f"(its tasks copy their input planes); an NHWC convolution's "
                            f"blockings choose their own copies: leave copy_input out")
    if p["transpose_out"] and not (layout == "nchw" and p["channel_blocks"] and
                                   _transposes_out(conv, info, p["ob"], p["yb"], p["xb"])):
        raise ScheduleError(
            f"{who}: transpose_out=True needs the NCHW channel blocks (channel_blocks=True) "
            f"of a float32 convolution on a target with register transposes, ob a multiple "
            f"of the {_lanes(conv, info)} lanes, and xb from 2 to the lanes dividing the "
            f"output's columns; use transpose_out=False")
    if p["interleave"] and (layout != "nhwc" or not _interleaves(conv, info)):
        raise ScheduleError(
            f"{who}: interleave=True needs an NHWC float32 convolution whose groups' output "
            f"channels divide a vector ({_lanes(conv, info)} lanes here) into 2 or more "
            f"groups, or fill exactly one (in an even number of groups), with whole vectors "
            f"of output channels and a constant shape; "
            f"{conv.op.name} has {_per_group(conv)} per group: use interleave=False")
    N, O, OH, OW, G, P, I = _group_dims(conv)
    if P % p["ob"]:
        raise ScheduleError(f"{who}: ob={p['ob']} must divide the {P} output channels of a "
                            f"group (a block stays in one group); give a divisor of {P}")
    if G % p["groups_per_task"]:
        raise ScheduleError(f"{who}: groups_per_task={p['groups_per_task']} must divide the "
                            f"{G} groups; give a divisor of {G}")
    return p


def _group_blocks_into(s: Schedule, outs, info: CpuModel, nchw: bool, p: dict) -> None:
    """Schedule the grouped stage under ``outs`` in channel blocks (see the module):
    ``p["ob"]`` output channels of one group x ``p["yb"] x p["xb"]`` pixels in
    registers over the window and the group's input channels (the input channel
    innermost: each step one weight load per vector and one broadcast per pixel); tasks
    of ``p["groups_per_task"]`` groups of an image, each copying their padded input
    group by group first; the weights copied group by group at the root."""
    tag = "group_conv2d_nchw" if nchw else "group_conv2d_nhwc"
    conv, pad = _conv_parts(outs, tag)
    pad = _own_pad(s, pad)
    N, O, OH, OW, G, P, I = _group_dims(conv)
    L = _lanes(conv, info)
    ob, yb, xb, gpt = p["ob"], p["yb"], p["xb"], p["groups_per_task"]
    weight = _conv_weight(conv)
    src = [t for t in conv.op.input_tensors if t is not weight]
    if not src:
        raise ScheduleError(f"{tag} schedule of {conv.op.name}: channel blocks copy the data "
                            f"and the weight apart, but they are one tensor "
                            f"({weight.op.name}); use channel_blocks=False")
    fused = _fusable_epilogue(outs, conv)
    # (the input channel innermost, as the dense NHWC kernel: with it outside the
    # window instead, within the noise or slower)
    # (an epilogue rounding to another dtype keeps the scatter: the transposes are
    # float32's)
    transpose = nchw and p["transpose_out"] and (fused is None or fused.dtype == "float32")
    if transpose and fused is not None:
        # the epilogue into a register tile of its own (its stage computed at the
        # output's tile loop), the output a plain copy of it: transposed below
        tile = s.cache_write(fused, "local")
        a = s[tile].op.axis
        # (stored channels innermost, as the accumulators: whole vectors, the rows of
        # the transposes)
        s[tile].storage_order(a[0], a[2], a[3], a[1])
        _, _, cs = _pixels_by_channels(s, conv, ob, yb, xb, tile, nchw)
        st = s[fused]
        n, a = st.op.axis[0], st.op.axis[1:]
        (oc, oi), (yc, yi), (xc, xi) = (st.split(x, factor=f) for x, f in zip(a, (ob, yb, xb)))
        st.reorder(n, oc, yc, xc, yi, xi, oi)
        s[tile].compute_at(st, xc)
    else:
        st, (n, oc, yc, xc), cs = _pixels_by_channels(s, conv, ob, yb, xb, fused, nchw)
    if transpose:
        # the block's L-channel vectors stored to the channel planes through register
        # transposes: per output row of the block, L channels x xb pixels
        xi, oi = st.leaf_iter_vars[-2:]
        ov, ol = st.split(oi, factor=L)
        st.reorder(ov, ol, xi)
        st.tensorize(ol, transpose_intrin(info.target, L, conv.dtype, xb))
    go, gi = st.split(oc, factor=gpt * (P // ob))
    st.reorder(n, go, gi, yc, xc)
    task = st.fuse(n, go)
    if info.threads > 1:
        st.parallel(task)
    # the task's input, padded, group by group (NHWC: [n, group, row, column, channel];
    # NCHW: the group's planes, contiguous already)
    pk = s.cache_read(src[0], "global", [cs],
                      blocks=None if nchw else [(3, I)])
    if not nchw:
        a = s[pk].op.axis
        # (the copy runs in the source's order: each pixel's channels read in a row)
        s[pk].storage_order(a[0], a[3], a[1], a[2], a[4])
    if pad is not None:
        s[pad].compute_inline()
    s[pk].compute_at(st, task)
    _vector_split(s[pk], s[pk].op.axis[-1], _cint(pk.shape[-1]), L)
    # the weights, group by group: [group, ky, kx, c, P] (NHWC) or [group, c, ky, kx, P]
    # (NCHW, transposed in L x L tiles in registers where they make whole tiles)
    wk = s.cache_read(weight, "global", [cs], blocks=[(0 if nchw else 3, P)])
    ws = s[wk]
    a = ws.op.axis
    if not nchw:
        ws.storage_order(a[3], a[0], a[1], a[2], a[4])
        ws.reorder(a[3], a[0], a[1], a[2], a[4])
    intrin = _weight_transpose(weight, 0, P, info) if nchw else None
    if intrin is not None:
        f = ws.fuse(*a[1:4])
        fo, po, fi, pi = ws.tile(f, a[4], L, L)
        ws.reorder(a[0], fo, po, fi, pi)
        ws.tensorize(fi, intrin)
    else:
        _vector_split(ws, a[4], P, L)
    if info.threads > 1 and (_bytes(weight) or 0) > info.l2_bytes // 4:
        ws.parallel(a[0] if nchw else a[3])
    st.pragma(st.leaf_iter_vars[0], "fp_contract")
    _epilogue(s, outs, conv, info, fused)


def _interleaved_into(s: Schedule, outs, info: CpuModel) -> None:
    """Schedule the grouped NHWC stage under ``outs`` in interleaved vectors: a vector
    holds ``P`` output channels of each of ``Q = L / P`` groups, lane ``k * Q + t``
    being channel ``k`` of the ``t``-th group.  For input channel ``c`` its lanes then
    read ``Q`` values, channel ``c`` of each group, which the padded input copy stores
    side by side (``[n, row, column, Q-group block, c, Q]``): one ``Q``-element
    broadcast (``vbroadcastsd`` for 2 groups) per input pixel, channel and row of the
    window, every lane of the FMA useful; the weights are copied to the same lanes
    (``[ky, kx, c, block, P, Q]``), and a block of up to ``vregs - 4 - (KW - 1)``
    pixels x one vector is accumulated in that order, the window's columns inside the
    channel (each column's broadcast feeding up to ``KW`` FMAs,
    :data:`SHARE_TAP_BROADCASTS`) (``cache_write`` blocked twice) and put back in channel order with one
    shuffle per vector on its way out.  Both copies are chained blocked
    ``cache_read``s (by ``I``/``P``, then by ``Q``).  Tasks are up to 4 output rows of
    an image (while there are 8 tasks per thread); each copies (and pads) the input
    rows it reads.

    Groups of one vector (``P == L``, :func:`_interleave_shape`): ``Q = 2`` groups to
    ``V = 2`` vectors, vector ``j`` holding channels ``j * L / 2`` to ``(j + 1) * L / 2
    - 1`` of both groups; a block is up to ``(vregs - 4) / 2`` pixels x 2 vectors, each
    broadcast feeding both; the weights are stored block by block, and the tasks are an
    image's pairs of groups over the whole plane where there are 4 per thread and its
    padded copy fits in L1 (:func:`_block_plane_bytes`), else rows as above.  Groups
    narrower than a vector take such tasks too (an image's ``Q`` groups over the plane)
    where the tasks of rows would copy each input row twice or more and the plane's copy
    fits in a quarter of L2 (:data:`PLANE_TASKS_ONE_VECTOR`)."""
    conv, pad = _conv_parts(outs, "group_conv2d_nhwc")
    pad = _own_pad(s, pad)
    N, O, OH, OW, G, P, I = _group_dims(conv)
    L = _lanes(conv, info)
    Q, V = _interleave_shape(P, L)
    weight = _conv_weight(conv)
    src = [t for t in conv.op.input_tensors if t is not weight][0]
    fused = _fusable_epilogue(outs, conv)
    # the accumulators: [n, y, x, O / P, P] and then [n, y, x, O / L, P, Q]
    acc1 = s.cache_write(conv, "local", blocks=[(3, P)])
    acc = s.cache_write(acc1, "local", blocks=[(3, Q)])
    s[acc1].compute_inline()
    if fused is not None:
        s[conv].compute_inline()
        st = s[fused]
    else:
        st = s[conv]
    n, y, x, o = st.op.axis
    # a block: xb pixels x V vectors, beside V weight vectors and the broadcasts
    kw = _cint(weight.shape[1])
    # (Zen 4, one thread, CPU time, under load (load average 13), batch 8, 11 rounds:
    # 256x28x28 3.33 -> 2.74 ms, 128x56x56 4.16 -> 3.30, 256x56x56 stride 2 6.43 ->
    # 4.09; batch 1 256x28x28 0.353 -> 0.270.  On Zen 4 a 512-bit broadcast per FMA
    # held the kernel near 70% of the FMA peak)
    # (while the weights' KW vectors leave at least half the registers as accumulators)
    share = (V == 1 and SHARE_TAP_BROADCASTS and kw is not None
             and 2 * (kw - 1) <= info.vregs - 4)
    xb = _block(OW, max(1, (info.vregs - 4 - ((kw - 1) if share else 0)) // V))
    xo, xi = st.split(x, factor=xb)
    # a pixel's output vector: a block's Q groups, V * L lanes (V > 1: one vector of
    # V * L lanes, its V accumulator vectors shuffled back to channel order together,
    # where each L-lane piece alone read them from memory, L - 1 lanes off alignment)
    oo, oi = st.split(o, factor=L * V)
    T = max(1, info.threads)
    R = next((r for r in (4, 2) if OH % r == 0 and (OH // r) * (N or 1) >= 8 * T), 1)
    attach = oo
    plane = _block_plane_bytes(conv, Q)
    kh, sh = _cint(weight.shape[0]), conv.op.attrs["group_conv2d"][0][0]
    # (a task of R rows copies (R - 1) * stride + KH input rows for R * stride.  Zen 4,
    # 2 threads, wall, under load (load average 11-12), 21 rounds, batch 1, plane tasks
    # against rows: 256x28x28 (one row a task) 0.428 -> 0.386 ms, 128x56x56 (2 rows)
    # 0.478 -> 0.442; at batch 8 (4 rows a task, 1.5x copied) plane tasks ran 6-7%
    # slower and are not taken)
    recopied = kh is not None and (R - 1) * sh + kh >= 2 * R * sh
    if (N or 1) * (G // Q) >= 4 * T and (
            (V > 1 and plane <= info.l1_bytes)
            or (V == 1 and PLANE_TASKS_ONE_VECTOR and recopied
                and plane <= info.l2_bytes // 4)):
        # tasks: an image's block of Q groups over the whole plane, where its padded
        # copy (Q * I channels of the plane, read once) fits in L1, where a task of
        # rows copies every channel of its rows and of the rows around them
        # (measured on Zen 5, one thread, under load, batch 8, medians: 512x14x14 as
        # fast either way or 3% faster, 512x28x28 stride 2, a 115 KB plane, 7% slower)
        st.reorder(n, oo, y, xo, xi, oi)
        task = st.fuse(n, oo)
        attach = xo
    elif R > 1:
        yo, yi = st.split(y, factor=R)
        st.reorder(n, yo, yi, xo, oo, xi, oi)
        task = st.fuse(n, yo)
    else:
        st.reorder(n, y, xo, oo, xi, oi)
        task = st.fuse(n, y)
    st.unroll(xi)
    st.vectorize(oi)
    if info.threads > 1:
        st.parallel(task)
    st.pragma(task, "fp_contract")
    cs = s[acc]
    cs.compute_at(st, attach)
    an, ay, ax, ag, ak, at = cs.op.axis
    ky, kx, c = cs.op.reduce_axis
    # (split by the block as the output is: a block of constant size at the right edge
    # too, guarded there)
    axo, ax = cs.split(ax, factor=xb)
    if V > 1:
        # V vectors of L / Q channels of each of the Q groups: one broadcast, V FMAs
        akv, ak = cs.split(ak, factor=L // Q)
        cs.reorder(an, ay, axo, ag, ky, kx, c, ax, akv, ak, at)
        cs.unroll(akv)
    elif share:
        cs.reorder(an, ay, axo, ag, ky, c, kx, ax, ak, at)
        cs.unroll(kx)
    else:
        cs.reorder(an, ay, axo, ag, ky, kx, c, ax, ak, at)
    lanes = cs.fuse(ak, at)
    cs.unroll(ax)
    cs.vectorize(lanes)
    # the input, padded, Q groups' channels side by side: [n, row, column, O/L, I, Q]
    x1 = s.cache_read(src, "global", [cs], blocks=[(3, I)])
    xq = s.cache_read(x1, "global", [cs], blocks=[(3, Q)])
    s[x1].compute_inline()
    if pad is not None:
        s[pad].compute_inline()
    xs = s[xq]
    xs.compute_at(st, task)
    _vector_split(xs, xs.fuse(*xs.op.axis[4:]), I * Q, L)
    # the weights the same way: [ky, kx, c, O/L, P, Q]
    w1 = s.cache_read(weight, "global", [cs], blocks=[(3, P)])
    wq = s.cache_read(w1, "global", [cs], blocks=[(3, Q)])
    s[w1].compute_inline()
    ws = s[wq]
    if V > 1:
        # stored block by block ([G/Q, ky, kx, c, P, Q]): a block's 9 * I * V vectors
        # contiguous, where a block's V vectors for one (ky, kx, c) were O * 4 bytes
        # from the next (2 KB at 512 channels: the block's weights in 4 L1 sets)
        a = ws.op.axis
        ws.storage_order(a[3], a[0], a[1], a[2], a[4], a[5])
    _vector_split(ws, ws.fuse(*ws.op.axis[4:]), P * Q, L)
    if info.threads > 1 and (_bytes(weight) or 0) > info.l2_bytes // 4:
        ws.parallel(ws.op.axis[0])
    _epilogue(s, outs, conv, info, fused)


def _grouped_part(s: Schedule, out, knobs, info: CpuModel):
    """The interleaved template (:func:`_interleaved_into`) for a grouped NHWC
    convolution inside a larger DAG (a ResNeXt block): the ids of the operations it
    scheduled (the stage, its inlined padding, the copies and accumulators it made), or
    None where the groups cannot be interleaved (the generic rules take it)."""
    if not _interleaves(out, info):
        return None
    before = {id(st.op) for st in s.stages}
    try:
        _, pad = _conv_parts([out], "group_conv2d_nhwc")
    except _NoTemplate:
        return None
    inlined = pad is not None and _own_pad(s, pad) is not None
    _interleaved_into(s, [out], info)
    return ({id(out.op)} | ({id(pad.op)} if inlined else set())
            | {id(st.op) for st in s.stages if id(st.op) not in before})

def _grouped_nchw_into(s: Schedule, outs, info: CpuModel, config=None) -> None:
    conv, _ = _conv_parts(outs, "group_conv2d_nchw")
    p = _group_config(conv, info, config, "nchw")
    if p["channel_blocks"]:
        _group_blocks_into(s, outs, info, True, p)
        return
    # up to 8 channels of one group share the input vectors
    _nchw_rows_into(s, outs, info, "group_conv2d_nchw",
                    _largest_divisor_at_most(_per_group(conv), 8), fma=ROWS_FMA,
                    copy=p["copy_input"])


def _grouped_nhwc_into(s: Schedule, outs, info: CpuModel, config=None) -> None:
    conv, _ = _conv_parts(outs, "group_conv2d_nhwc")
    p = _group_config(conv, info, config, "nhwc")
    if p["interleave"]:
        _interleaved_into(s, outs, info)
        return
    if p["channel_blocks"]:
        _group_blocks_into(s, outs, info, False, p)
        return
    L = _lanes(conv, info)
    P = _per_group(conv)
    if _across_groups(conv, info):
        # a vector spans L / P groups (see group_conv2d_params)
        _nhwc_pixels_into(s, outs, info, "group_conv2d_nhwc", L, across=True)
        return
    # a vector of channels inside one group: its lanes read one input value (a
    # broadcast); groups narrower than a vector get vectors of their width, wider ones
    # two vectors where they divide them
    ob = 2 * L if P % (2 * L) == 0 else L if P % L == 0 else P if P < L else \
        _largest_divisor_at_most(P, L)
    _nhwc_pixels_into(s, outs, info, "group_conv2d_nhwc", ob)


def schedule_group_conv2d_nchw(outs, target: str = "llvm", config=None) -> Schedule:
    """The CPU schedule of ``tecomp.nn.conv2d_nchw`` with ``groups`` (a stage tagged
    ``group_conv2d_nchw``), plus any elementwise epilogue (see the module); other DAGs
    get the auto-scheduler's rules.

    Parameters
    ----------
    outs : Tensor or list of Tensor
        The operator's output (or the epilogue's).
    target : str or Target, optional
        An LLVM CPU target; its machine model sizes the blocks.
    config : dict, optional
        Pins the template's decisions (the others are the heuristic's): a dict of some
        of ``channel_blocks`` (True: blocks of output channels of one group, vectors
        across them, over a padded copy of each task's groups; False: blocks of rows,
        vectors along them, the input read in place), ``ob``, ``yb``, ``xb`` (the
        channel blocks' register block: ``ob`` channels, a divisor of a group's, x
        ``yb`` x ``xb`` pixels), ``groups_per_task`` (a divisor of the groups) and
        ``copy_input`` (rows: True copies each task's input planes, unpadded, before
        its blocks read them; the heuristic's choice where they fit in a quarter of
        L2).  Every choice computes the same result.

    Returns
    -------
    Schedule
        The schedule.

    Raises
    ------
    ScheduleError
        An unknown field in ``config``, or a value out of its range.

    Examples
    --------
    >>> import tecomp as tc
    >>> import tecomp.nn as nn
    >>> from tecomp.strategy import cpu
    >>> X = tc.placeholder((1, 64, 14, 14), name="X")
    >>> W = tc.placeholder((64, 16, 3, 3), name="W")
    >>> Y = nn.conv2d_nchw(X, W, padding=1, groups=4)
    >>> s = cpu.schedule_group_conv2d_nchw(Y, config={"channel_blocks": True, "ob": 16})
    >>> f = tc.build(s, [X, W, Y])
    """
    return _template_or_rules(lambda s, o, info: _grouped_nchw_into(s, o, info, config),
                              outs, target)


def schedule_group_conv2d_nhwc(outs, target: str = "llvm", config=None) -> Schedule:
    """The CPU schedule of ``tecomp.nn.conv2d_nhwc`` with ``groups`` (a stage tagged
    ``group_conv2d_nhwc``), plus any elementwise epilogue (see the module); other DAGs
    get the auto-scheduler's rules.

    Parameters
    ----------
    outs : Tensor or list of Tensor
        The operator's output (or the epilogue's).
    target : str or Target, optional
        An LLVM CPU target; its machine model sizes the blocks.
    config : dict, optional
        As :func:`schedule_group_conv2d_nchw`'s (``channel_blocks`` False: blocks of
        pixels, vectors across the channels, the input read in place; no
        ``copy_input``) and ``interleave`` (True: interleaved vectors, where the
        groups divide a vector or fill one).

    Returns
    -------
    Schedule
        The schedule.

    Raises
    ------
    ScheduleError
        An unknown field in ``config``, or a value out of its range.
    """
    return _template_or_rules(lambda s, o, info: _grouped_nhwc_into(s, o, info, config),
                              outs, target)


def group_conv2d_knobs(conv, knobs, info: CpuModel) -> dict:
    """The grouped template's config for the stage ``conv`` with its decisions as the
    auto-scheduler's knobs (the heuristic's choice first): ``group_conv2d.channel_blocks``
    and, for channel blocks, ``group_conv2d.groups_per_task`` (the heuristic's, half
    and twice it, where they divide the groups), for NCHW rows
    ``group_conv2d.copy_input``; first, where the groups can be
    interleaved (:func:`_interleaves`), ``group_conv2d.interleave`` (True first).  Applied by
    ``schedule_group_conv2d_*(outs, target, config)``."""
    out = conv.output(0)
    p = group_conv2d_params(out, info)
    G = _group_dims(out)[4]
    if p["interleave"]:
        p["interleave"] = knobs.choose("group_conv2d.interleave", [True, False], True)
        if p["interleave"]:
            return p
    p["channel_blocks"] = knobs.choose("group_conv2d.channel_blocks",
                                       [p["channel_blocks"], not p["channel_blocks"]],
                                       p["channel_blocks"])
    if not p["channel_blocks"] and "group_conv2d_nchw" in out.op.tag.split(","):
        c = p["copy_input"]
        p["copy_input"] = knobs.choose("group_conv2d.copy_input", [c, not c], c)
    p["transpose_out"] = _transpose_out_default(out, info, p["channel_blocks"], p["ob"],
                                                p["yb"], p["xb"])
    if p["channel_blocks"]:
        g = p["groups_per_task"]
        choices = [g] + [v for v in (g // 2, 2 * g) if v >= 1 and G % v == 0 and v != g]
        p["groups_per_task"] = knobs.choose("group_conv2d.groups_per_task", choices, g)
    return p

