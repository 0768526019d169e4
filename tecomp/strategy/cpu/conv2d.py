"""Convolutions (``schedule_conv2d_nchw`` / ``schedule_conv2d_nhwc``).

A block of outputs accumulated in a local buffer (``cache_write``, kept in registers) over
the whole reduction (channels x kernel window) and stored once, the padded input computed
per output tile (``compute_at``), see each function.  An elementwise epilogue
(``relu(bias_add(conv, b))``) is applied to the block on its way out (the conv is then the
local buffer of the epilogue's tile)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import List, Optional, Tuple

from ...errors import ScheduleError
from ...ir.expr import Const, Mul, ProducerLoad, Reduce
from ...ir.functor import substitute
from ...ir.simplify import affine_steps, simplify
from ...schedule.schedule import Schedule, Stage
from ...te.reduce import ZERO_WHERE
from ...te.tensor import ComputeOp, Tensor
from .._common import _bytes, _ceil, _cint, _has_tag
from .._common import _is_padding
from .common import (_NoTemplate, _find, _loads, _op_tags, _template_or_rules,
                     check_positive_int, config_fields)
from .elementwise import _epilogue, _fusable_epilogue
from ...target import MEMORY_COPY_COST, CpuModel, cpu_model
from .conv2d_tasks import (_conv_tasks, _rows_peeled, _small_weights, _weight_transpose,
                           _window, prepacked)


def _conv_parts(outs, tag):
    """(the conv stage, its padding stage or None).  ``outs`` of one element that is a
    convolution itself: that one (schedule_conv2d_into; other convolutions may lie under
    it, e.g. the forward under a gradient).  For ``conv2d_nchw``, an NCHW convolution
    written as a plain compute counts too (:func:`plain_nchw_conv`)."""
    def is_conv(op):
        return (_has_tag(op, tag) and bool(op.reduce_axis)) or \
            (tag == "conv2d_nchw" and plain_nchw_conv(op) is not None)

    if len(outs) == 1 and is_conv(outs[0].op):
        convs = [outs[0].op]
    else:
        convs = _find(outs, is_conv)
    if len(convs) != 1:
        raise _NoTemplate(f"expected one {tag} stage under the outputs, found {len(convs)}")
    conv = convs[0]
    pad = None
    plain = plain_nchw_conv(conv)
    if plain is not None:
        if _is_padding(plain[0].op):
            pad = plain[0]
        return conv.output(0), pad
    for t in conv.input_tensors:
        if isinstance(t.op, ComputeOp) and _has_tag(t.op, "pad"):
            pad = t
    return conv.output(0), pad


def plain_nchw_conv(op) -> Optional[Tuple[Tensor, Tensor]]:
    """``(data, weight)`` when ``op`` is an NCHW convolution written as a plain compute
    (no ``tecomp.nn`` tag), so that the convolution template schedules it as it does
    ``tecomp.nn.conv2d_nchw``: float32 ``Y[n, o, y, x] = sum(D[n, c, S*y + E*ky, T*x +
    F*kx] * W[o, c, ky, kx], axis=[c, ky, kx])`` with positive constant strides and
    dilations, the factors in either order (``D`` may be a padding stage, as
    ``tc.if_then_else(<inside>, X[...], 0)``), a window larger than 1x1 (a 1x1 one
    stays with the generic rules, whose image-plane vectors beat the template's blocks on
    the 1x1 planes measured: benchmarks/DECISIONS.md, "Conv NCHW: a plain compute is a
    convolution"); else None."""
    if not isinstance(op, ComputeOp) or len(op.axis) != 4 or len(op.reduce_axis) != 3 or \
            len(op.bodies) != 1 or any(t.startswith("conv2d") for t in _op_tags(op)):
        return None
    body = op.body
    if not isinstance(body, Reduce) or body.combiner.name != "sum" or \
            not (isinstance(body.condition, Const) and body.condition.value is True):
        return None
    src = body.source
    if not isinstance(src, Mul) or not isinstance(src.a, ProducerLoad) or \
            not isinstance(src.b, ProducerLoad) or op.output(0).dtype != "float32":
        return None
    if all(_cint(r.dom.extent) == 1 for r in op.reduce_axis[1:]):
        return None
    n, o, y, x = (a.var for a in op.axis)
    c, ky, kx = (r.var for r in op.reduce_axis)
    for d, w in ((src.a, src.b), (src.b, src.a)):
        if d.producer is w.producer or d.dtype != "float32" or w.dtype != "float32":
            continue
        if len(w.indices) != 4 or any(i is not v for i, v in zip(w.indices, (o, c, ky, kx))):
            continue
        if len(d.indices) != 4 or d.indices[0] is not n or d.indices[1] is not c:
            continue
        if _strided_window(d.indices[2], y, ky) and _strided_window(d.indices[3], x, kx):
            return d.producer, w.producer
    return None


def _strided_window(e, v, r) -> bool:
    """Whether ``e`` is ``S*v + E*r`` for constants ``S, E >= 1``."""
    got = affine_steps([e], [v, r])
    if got is None:
        return False
    (base,), ((sv,), (sr,)) = got
    return isinstance(base, Const) and base.value == 0 and sv >= 1 and sr >= 1


def _own_pad(s: Schedule, pad):
    """``pad`` when the convolution is its only reader and it is no output, else None: a
    padded input that another stage reads too (a weight gradient reads the forward's)
    stays a root stage for whoever schedules that reader, instead of being computed per
    task; one that is an output of the schedule (a user's ``nn.pad`` returned beside the
    convolution) is computed whole at the root (inlining it raised a ScheduleError)."""
    if pad is not None and (s[pad].is_output or len(s.consumers(s[pad])) > 1):
        return None
    return pad


def _divisors(n: int) -> List[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _conv_block_nchw(K, OH, OW, info: CpuModel, N: int = 1, R: Optional[int] = 3,
                     S: Optional[int] = 3, x_stride: int = 1, small_weights: bool = False):
    """(OB, YB, XB): output channels x rows x columns held in registers: the best of
    :func:`_conv_blocks_nchw`."""
    return _conv_blocks_nchw(K, OH, OW, info, N, R, S, x_stride, small_weights)[0]


def _conv_blocks_nchw(K, OH, OW, info: CpuModel, N: int = 1, R: Optional[int] = 3,
                      S: Optional[int] = 3, x_stride: int = 1, small_weights: bool = False,
                      count: int = 1) -> List[Tuple[int, int, int]]:
    """The ``count`` best (OB, YB, XB) blocks (output channels x rows x columns held in
    registers) by the model below, the best first.

    A tiny cost model of one input channel (the loop around the ``R x S`` window, see
    :func:`schedule_conv2d_nchw`): ``R*S*OB*YB*ceil(XB/L)`` FMAs; loads: the input
    vectors the taps share, ``(YB + R - 1) * S * ceil(XB/L)``, and ``R*S*OB`` weight
    broadcasts, at 2 FMAs and 1 load a cycle (what fits the measurements), plus a
    little loop overhead; a vector is only partly useful when ``XB`` is not a multiple
    of the lanes.  A block that does not divide the output leaves a tail, heavily
    penalised: when the tail dimension is part of the fused parallel loop the tail
    cannot be partitioned off, the accumulators stay under a guard in every task and
    the kernel runs several times slower.  Where the row blocks can be a serial loop in
    each task instead (:func:`_rows_peeled`), a row tail is peeled off that loop and
    costed as the smaller block it is: 13 or 11 rows then take 3- or 4-row blocks rather
    than single rows, whose weight broadcast per FMA ran well below larger blocks.  With
    a column stride (``x_stride`` > 1) an input vector is counted as 4 loads and the taps
    share none (what fit the measurements of a strided first layer); it was a gather
    then, it is now a wider load and a shuffle (codegen's ``wide_load``), but counting it
    as 2 loads picks the same blocks for the stride-2 convs of ResNet's shapes.
    (measurements: benchmarks/DECISIONS.md, "Conv NCHW: the block cost model")"""
    L = info.lanes
    R = R if R is not None else 3
    S = S if S is not None else 3
    budget = info.vregs - 8 if info.vregs >= 32 else info.vregs - 4
    best = None
    scored = []
    # a vector is at most one register or a whole number of them: LLVM legalizes e.g.
    # 28 or 56 float32 lanes on AVX-512 through the stack, many times slower
    # (measurements: benchmarks/DECISIONS.md, "Conv NCHW: whole registers per vector")
    # Without AVX-512's masks a tail block runs its guarded lanes one by one: any divisor
    # up to four registers instead, emitted as register-wide pieces and a shorter one (a
    # 13-wide row as 8 + 5), much faster than a block and a guarded tail
    # (measurements: benchmarks/DECISIONS.md, "Conv NCHW: divisor blocks without masks")
    masks = info.masks
    if OW is not None:
        xbs = [d for d in _divisors(OW)
               if d <= L or (d <= 4 * L and (d % L == 0 or not masks))]
        if max(xbs) < min(OW, L) // 2:
            xbs.append(min(OW, L))  # no good divisor: a tail block (masked)
    else:
        xbs = [L]

    def cycles(ob, yb, nvx):
        fmas = R * S * ob * yb * nvx
        if x_stride == 1:
            loads = (yb + R - 1) * S * nvx + R * S * ob
        else:
            loads = 4 * R * S * yb * nvx + R * S * ob
        # + loop, address and C-block overhead; and a little per load, since they share
        # the ports with the FMAs' broadcasts (of two blocks with as many accumulators
        # at the same modelled cycles, the one with fewer loads ran faster)
        # (measurements: benchmarks/DECISIONS.md, "Conv NCHW: a cost per load")
        return fmas, max(fmas / 2, loads) + 3 + loads / 8

    for xb in xbs:
        nvx = -(-xb // L)
        util = xb / (nvx * L)
        ybs = [1, 2, 3, 4]
        if OH is not None and all(OH % y for y in (2, 3, 4)):
            # no small row block divides the rows (7x7: every 2- to 4-row block leaves a
            # tail): the divisors up to 8 too
            ybs += [d for d in _divisors(OH) if 4 < d <= 8]
        for yb in ybs:
            if OH is not None and yb > OH:
                break
            top = min(budget // (nvx * yb), K if K is not None else 64)
            for ob in range(1, top + 1):
                fmas, cyc = cycles(ob, yb, nvx)
                # with a column stride not measured better
                # (measurements: benchmarks/DECISIONS.md, "Conv NCHW: strided rows not peeled")
                peeled = x_stride == 1 and _rows_peeled(N, K, ob, OH, yb, info)
                if peeled:
                    # the rows are a serial loop in each task, its last block peeled off
                    tf, tc_ = cycles(ob, OH % yb, nvx)
                    full = OH // yb
                    score = util * (full * fmas + tf) / (full * cyc + tc_)
                else:
                    score = util * fmas / cyc
                if K is not None and K % ob:
                    score *= 0.5  # a tail block: see above
                if peeled:
                    # the peeled block is a second copy of the unrolled kernel (the
                    # build takes longer, the more so the larger the block) and the
                    # tasks no longer pad their own rows (small weights: see
                    # _conv_tasks): a divisor block is kept unless the peeled one is
                    # clearly better (peeled blocks ran slower on small-weight layers)
                    # (measurements: benchmarks/DECISIONS.md, "Conv NCHW: peeled blocks")
                    score *= 0.65 if small_weights else 0.8
                elif OH is not None and OH % yb:
                    # a row tail in the parallel loop: a guard in every block, several
                    # times slower than blocks that leave no tail
                    # (measurements: benchmarks/DECISIONS.md, "Conv NCHW: a row tail")
                    score *= 0.2
                if OW is not None and OW % xb:
                    score *= 0.85
                scored.append((score, ob, yb, xb))
                if best is None or score > best[0] + 1e-9:
                    best = scored[-1]
    rest = sorted((c for c in scored if c is not best), key=lambda c: -c[0])
    return [c[1:] for c in [best] + rest[:count - 1]]










def schedule_conv2d_nchw(outs, target: str = "llvm", config=None) -> Schedule:
    """``tecomp.nn.conv2d_nchw`` (plus any elementwise epilogue).

    An ``OB x YB x XB`` block of the output (channels x rows x columns, the columns one
    widened vector) is accumulated in registers over the input channels (a loop) and
    the kernel window (unrolled): each tap loads ``YB`` input rows and broadcasts
    ``OB`` weights.  Rows that leave a tenth of the lanes or more idle (7, 13, 14 or 56
    of 16) have the vectors across output channels instead, the NHWC kernel's shape
    (:func:`_nchw_by_channels`): ``OB`` is 2 vectors of channels, the block's
    pixels broadcast one input value each per tap (any layout, any stride), the weights
    are 2 vector loads from a copy stored ``[C, KH, KW, O]`` and the block is stored
    channels innermost (``storage_order``), scattered to the NCHW output once.  Tasks
    and padding: see :func:`_conv_tasks`.

    ``config``: the register block, a :class:`ConvParams` or a dict of some of its fields
    (``ob``, ``yb``, ``xb``, ``by_channels``); by default :func:`conv2d_nchw_params`, the
    heuristic.  Any block is correct (edge blocks are guarded)."""
    return _template_or_rules(
        lambda s, o, info: _conv2d_nchw_into(s, o, info, config), outs, target)


@dataclass(frozen=True)
class ConvParams:
    """The CPU convolution templates' config: the register block of ``ob`` output channels
    x ``yb`` rows x ``xb`` columns accumulated in registers over the whole reduction and,
    for NCHW, whether its vectors run across the output channels (``by_channels``: the
    NHWC kernel's shape) instead of along the rows.  NHWC's vectors always run across the
    channels (``by_channels`` is False there and means nothing).  ``weight_copy`` (NHWC):
    the weights are first copied into an aligned buffer (True: by each channel block
    where they are too large to stay in L2 whole, else once per call) or read in place
    (False).

    ``tasks``: how the work is split between threads (:data:`CONV_TASKS`; ``""``, the
    default, is the heuristic's choice for the block, see :func:`_conv_tasks`):

    * ``"rows"`` -- tasks of (image, ``rows_per_task`` row blocks), each padding the input
      rows it reads, the channel blocks a loop inside; weights copied once per call;
    * ``"blocks"`` -- one parallel loop over (image, channel block, row block), weights
      read in place;
    * ``"channels"`` -- the channel blocks, each copying its weights once for all images;
    * ``"image_channels"`` -- (image, channel block) pairs, each copying its block's
      weights;
    * ``"block_rows"`` -- the channel blocks in turn, all threads copying a block's weights
      and then sharing its (image, row block) tasks.

    ``rows_per_task`` (``"rows"`` only; 0: the heuristic's): row blocks per task, a
    divisor of the row blocks.  Every choice computes the same result; they differ in
    speed."""

    ob: int
    yb: int
    xb: int
    by_channels: bool = False
    weight_copy: bool = True
    tasks: str = ""
    rows_per_task: int = 0


#: the thread splits a convolution template can be pinned to (``ConvParams.tasks``)
CONV_TASKS = ("rows", "blocks", "channels", "image_channels", "block_rows")


#: how many of the NCHW block model's best blocks the auto-scheduler may search
CONV_BLOCK_CHOICES = 8


def _nchw_blocks(conv: Tensor, info: CpuModel, count: int = 1) -> List[Tuple[int, int, int]]:
    N, K, OH, OW = (_cint(e) for e in conv.shape)
    c, ky, kx = conv.op.reduce_axis
    return _conv_blocks_nchw(K, OH, OW, info, N, _cint(ky.dom.extent), _cint(kx.dom.extent),
                             _conv_x_stride(conv), _small_weights(_conv_weight(conv), info),
                             count)


def conv2d_nchw_params(conv: Tensor, info: Optional[CpuModel] = None) -> ConvParams:
    """The heuristic's config for the ``conv2d_nchw`` stage ``conv`` on ``info``'s machine
    (the block model of :func:`_conv_blocks_nchw`, or channel vectors where
    :func:`_nchw_by_channels` takes them)."""
    info = info or cpu_model()
    ob, yb, xb = _nchw_blocks(conv, info)[0]
    by_channels = _nchw_by_channels(conv, info, xb)
    if by_channels is not None:
        return ConvParams(*by_channels, True)
    return ConvParams(ob, yb, xb)


def conv2d_nhwc_params(conv: Tensor, info: Optional[CpuModel] = None) -> ConvParams:
    """The heuristic's config for the ``conv2d_nhwc`` stage ``conv`` (see
    :func:`_conv_block_nhwc`)."""
    info = info or cpu_model()
    N, OH, OW, K = (_cint(e) for e in conv.shape)
    # the weights copied unless the CPU reads vectors across cache lines at no cost
    # (measurements: benchmarks/DECISIONS.md, "Conv tasks: weights in place on Zen 4")
    return ConvParams(*_conv_block_nhwc(K, OH, OW, info),
                      weight_copy=not info.split_loads_cheap)


def _conv_config(default: ConvParams, config, layout: str) -> ConvParams:
    """``config`` (None, a :class:`ConvParams` or a dict of some of its fields) over the
    heuristic's ``default``, checked."""
    if config is None:
        return default
    p = dataclasses.replace(default, **config_fields(
        config, f"conv2d_{layout} schedule", [f.name for f in dataclasses.fields(ConvParams)],
        ConvParams))
    for k in ("ob", "yb", "xb"):
        check_positive_int(f"conv2d_{layout} schedule", k, getattr(p, k))
    if not isinstance(p.weight_copy, bool):
        raise ScheduleError(f"conv2d_{layout} schedule: weight_copy must be True or False, "
                            f"got {p.weight_copy!r:.40}")
    if not isinstance(p.by_channels, bool) or (layout == "nhwc" and p.by_channels):
        want = "False (NHWC's vectors run across channels already)" if layout == "nhwc" \
            else "True or False"
        raise ScheduleError(f"conv2d_{layout} schedule: by_channels must be {want}, got "
                            f"{p.by_channels!r:.40}")
    if p.tasks != "" and p.tasks not in CONV_TASKS:
        raise ScheduleError(f"conv2d_{layout} schedule: tasks must be one of "
                            f"{', '.join(map(repr, CONV_TASKS))} (or '' for the heuristic's), "
                            f"got {p.tasks!r:.40}")
    if isinstance(p.rows_per_task, bool) or not isinstance(p.rows_per_task, int) or \
            p.rows_per_task < 0:
        raise ScheduleError(f"conv2d_{layout} schedule: rows_per_task must be an int >= 0 "
                            f"(0: the heuristic's), got {p.rows_per_task!r:.40}")
    if p.rows_per_task and p.tasks not in ("", "rows"):
        raise ScheduleError(f"conv2d_{layout} schedule: rows_per_task is for tasks='rows', "
                            f"not {p.tasks!r}")
    return p


def _conv2d_nchw_into(s: Schedule, outs, info: CpuModel, config=None):
    conv, pad = _conv_parts(outs, "conv2d_nchw")
    pad = _own_pad(s, pad)
    N, K, OH, OW = (_cint(e) for e in conv.shape)
    c, ky, kx = conv.op.reduce_axis
    weight = _conv_weight(conv)
    p = _conv_config(conv2d_nchw_params(conv, info), config, "nchw")
    ob, yb, xb, by_channels = p.ob, p.yb, p.xb, p.by_channels
    fused = _fusable_epilogue(outs, conv)
    if prepacked(weight):
        # weights packed ahead of the call: the block reads them in place, no copy
        s[weight].compute_inline()
    st, (n, oc, yc, xc), cs, (cn, co, cy, cx), tiles = _conv_register_block(
        s, conv, (1, ob, yb, xb), out=fused, vec=1 if by_channels else None)
    c, ky, kx = cs.op.reduce_axis
    # the input channel is the loop around the kernel window (unrolled by LLVM: small
    # windows only), the register block lives across both: per channel the taps share
    # their input vectors (a 3x3 window with YB = 2 loads 4 rows x 3 shifts, not 9 x 2)
    # and the channel's input rows and weights stay in L1 (with the channel innermost,
    # every tap swept all the channels' rows: 59 KB for the 64-channel 56x56 case),
    # faster on both cases measured.  Across channels, the weight copy is then read in
    # order too (measurements: benchmarks/DECISIONS.md, "Conv NCHW: channel loop outside")
    if by_channels:
        cs.reorder(*tiles, cn, c, ky, kx, cy, cx, co)
        unrolled, vec = (cy, cx), co
    else:
        cs.reorder(*tiles, cn, c, ky, kx, co, cy, cx)
        unrolled, vec = (co, cy), cx
    _unroll_window(cs, ky, kx)
    for ax in unrolled:
        cs.unroll(ax)
    cs.vectorize(vec)
    _conv_tasks(s, st, cs, pad, weight, info, n, oc, yc, N, K, ob, OH, yb,
                pad_vec_dim=3, weight_vec_dim=0 if by_channels else None,
                tasks=p.tasks, rows_per_task=p.rows_per_task)
    if by_channels and _cint(ky.dom.extent) == _cint(kx.dom.extent) == 1 and \
            _conv_x_stride(conv) > 1:
        # a strided 1x1 window reads one line of a new input plane per channel step (7
        # or 8 cycles of FMAs), half of it used and a plane apart: the hardware
        # prefetcher loses that stream at page boundaries.  Prefetched 8 channels ahead:
        # faster with a stride, unchanged without one
        # (measurements: benchmarks/DECISIONS.md, "Conv NCHW: prefetch, strided 1x1")
        # (the convolution's own input: the block reads the weights from their copy)
        cs.prefetch([t for t in conv.op.input_tensors if t is not weight][0], c, 8)
    _epilogue(s, outs, conv, info, fused)


def _nchw_by_channels(conv: Tensor, info: CpuModel,
                      row_xb: int) -> Optional[Tuple[int, int, int]]:
    """The register block (OB, YB, XB) when an NCHW convolution runs with its vectors
    across output channels (see :func:`schedule_conv2d_nchw`), else None.  ``row_xb``:
    the columns of the row-vector block (:func:`_conv_block_nchw`).

    Channel vectors are always full when the output channels make whole 2-vector blocks;
    row vectors are not when the row does not fill them: 7 of 16 lanes at 7x7, 14 of 16
    at 14x14 or 56x56, 13 at 13x13.  So channel vectors when the rows would leave more
    than a tenth of the lanes idle, and the reduction (``C*KH*KW``) is at least 256
    steps long: each block is scattered to NCHW once, 2 x ``XB`` scattered vectors
    against ``C*KH*KW`` steps of ``2 x XB`` FMAs (with 3 input channels, 27 steps, the
    row vectors ran faster).  A block is one output row of at most 8 pixels (or, for
    rows of fewer, the fewest rows that make 8) by 2 vectors: at most 16 accumulators
    (2 x 7 pixels spilled them with the unrolled window, and ran slower).  Not
    measured on AVX2 (16 registers): there, only rows of at most half a vector change.

    Channel vectors ran faster on every such row measured on the project's Xeon, at
    batch 1 and 4; rows that fill their vectors better stay faster as row vectors.
    (measurements: benchmarks/DECISIONS.md, "Conv NCHW: vectors across output channels")

    But the channel vectors need the weights copied across the output channels first,
    a strided gather per vector, once per call (unless they were packed ahead of the
    calls: ``conv2d_tasks.PREPACKED_WEIGHT``): rows are kept where the lanes they
    leave idle (:func:`_row_lane_use`, which knows that Zen 4 runs an 8-lane vector at
    half a 16-lane one's cost) cost less than that copy does for this batch and image
    (:func:`_channel_lane_use`): on Zen 4, rows of 7 at batch 1 and 4 and rows of 14 at
    batch 1 (stride 1 only; strided rows load more than they use).
    (measurements: benchmarks/DECISIONS.md, "Conv NCHW: the weight copy's cost")"""
    N, K, OH, OW = (_cint(e) for e in conv.shape)
    L = info.lanes
    ob = 2 * L
    C, KH, KW = (_cint(r.dom.extent) for r in conv.op.reduce_axis)
    if None in (N, K, OH, OW, C, KH, KW) or K % ob or C * KH * KW < 256:
        return None
    if KH * KW == 1 and (OW > L // 2 or C < 512):
        # a 1x1 window: only rows at most half a vector wide with 512 input channels or
        # more (faster there, slower on the other 1x1 shapes measured)
        # (measurements: benchmarks/DECISIONS.md, "Conv NCHW: channel vectors for a 1x1")
        return None
    rows_use = _row_lane_use(OW, row_xb, info)
    if _conv_x_stride(conv) == 1 and \
            rows_use >= _channel_lane_use(weight_elems=K * C * KH * KW,
                                          fmas=N * K * C * KH * KW * OH * OW / L,
                                          copy_cost=_weight_copy_cost(conv, ob, info)):
        # the weight copy costs more than the row vectors leave idle: 7x7 at batch 1 and
        # 4, 14x14 at batch 1 on Zen 4
        # (measurements: benchmarks/DECISIONS.md, "Conv NCHW: the weight copy's cost")
        return None
    if OW > L // 2 and (info.vregs < 32 or rows_use >= 0.9):
        return None
    return _nchw_channel_block(conv, info)


def _nchw_channel_block(conv: Tensor, info: CpuModel) -> Optional[Tuple[int, int, int]]:
    """The register block (OB, YB, XB) of an NCHW convolution with its vectors across
    output channels (see :func:`_nchw_by_channels`), or None where the output
    channels do not make whole 2-vector blocks."""
    N, K, OH, OW = (_cint(e) for e in conv.shape)
    L = info.lanes
    ob = 2 * L
    if None in (K, OH, OW) or K % ob:
        return None
    pix = min(8, (info.vregs - 4) // 2)
    if OW <= L // 2:
        yb = max(d for d in _divisors(OH) if d == 1 or d * OW <= pix)
        return ob, yb, OW
    ds = [d for d in _divisors(OW) if pix - 2 <= d <= pix]
    return ob, 1, max(ds) if ds else pix


def _row_lane_use(OW: int, xb: int, info: CpuModel) -> float:
    """The share of the FMA units' lanes a row of ``OW`` pixels in blocks of ``xb``
    columns keeps busy: each block is whole vectors and a narrower last one, and a
    vector of ``w`` lanes costs ``ceil(w / info.fma_lanes)`` operations (on Zen 4 a
    row of 7 is an 8-lane vector at half a 16-lane one's cost: 7/8 of the lanes busy,
    not 7/16)."""
    g, L = info.fma_lanes, info.lanes
    ops = 0
    for b in range(0, OW, xb):
        w = min(xb, OW - b)
        ops += (w // L) * (L // g) + _ceil(w % L, g)
    return OW / (ops * g)


def _weight_copy_cost(conv: Tensor, ob: int, info: CpuModel) -> float:
    """What copying one element of ``conv``'s weights across its output channels costs,
    in full-vector FMAs: a strided gather per vector (``CpuModel.gather_cost``), or
    register transposes where they apply (:func:`_weight_transpose`;
    ``CpuModel.transpose_cost``), at least :data:`MEMORY_COPY_COST` for weights that
    do not fit in half the last-level cache.
    (measurements: benchmarks/DECISIONS.md, "Conv NCHW: a 3x3 window's weights transposed")"""
    weight = _conv_weight(conv)
    if prepacked(weight):
        return 0.0  # packed once, ahead of the calls
    if _weight_transpose(weight, 0, ob, info) is None:
        return info.gather_cost
    if _bytes(weight) > info.l3_bytes // 2:
        return max(info.transpose_cost, MEMORY_COPY_COST)
    return info.transpose_cost


def _channel_lane_use(weight_elems: int, fmas: float, copy_cost: float) -> float:
    """The share of the FMA units' time that channel vectors spend on FMAs: every lane
    is busy, but the weights are first copied across the output channels, at
    ``copy_cost`` FMAs' time per element (``CpuModel.gather_cost`` for a strided gather
    per vector, ``CpuModel.transpose_cost`` for register transposes), for ``fmas``
    full-vector FMAs of the convolution.
    (measurements: benchmarks/DECISIONS.md, "Conv NCHW: the weight copy's cost" and
    "Conv NCHW: a 3x3 window's weights transposed")"""
    return 1.0 / (1.0 + copy_cost * weight_elems / fmas)


def _conv_register_block(s: Schedule, conv: Tensor, block, order=None, out=None,
                         vec: Optional[int] = None):
    """Split the convolution ``conv``'s output into ``block``-sized tiles (one factor per
    output axis; the last one vectorized, or the one at position ``vec``, which the
    tile's buffer then stores innermost), loop over the tiles with the output axes in
    ``order`` (positions; default: as they are) and accumulate each tile in a local buffer
    (``cache_write``) computed at the tile loop: constant indices after unrolling, so
    LLVM keeps the tile in registers across the whole reduction (input channels and
    window), zeroes it there and stores it to ``conv`` once, where accumulating in
    ``conv`` itself loaded and stored the tile around every loop of the reduction that
    is not innermost.  The tile has a constant size at the output's edges too (there it
    is guarded, and loop partitioning peels the edge tiles off).  A little faster than
    accumulating in ``conv`` on one case, within the noise on the others, build times
    too (measurements: benchmarks/DECISIONS.md, "Conv: the block in a local buffer").

    ``out``: an elementwise epilogue over ``conv`` (:func:`_fusable_epilogue`): it is
    the stage tiled, and ``conv`` itself is the local buffer, so that the epilogue
    (bias, activation) is applied to the tile in registers on its way out instead of
    in a second pass over the output: faster than that second pass in all but one run
    (measurements: benchmarks/DECISIONS.md, "Conv: the epilogue on the block").

    Returns (the output's stage, the output's tile loops, the buffer's stage, its
    loops over the tile (one per output axis; the caller orders them with the
    reduction), its loops over the tiles (one trip each: outermost))."""
    if out is not None:
        CC = conv
        s[conv].set_scope("local")
        st = s[out]
    else:
        CC = s.cache_write(conv, "local")
        st = s[conv]
    outer, inner = [], []
    last = len(block) - 1 if vec is None else vec
    vloop = None
    for k, (ax, f) in enumerate(zip(st.op.axis, block)):
        if f == 1 and k != last:
            outer.append(ax)
            continue
        o, i = st.split(ax, factor=f)
        outer.append(o)
        if k == last:
            vloop = i
        else:
            inner.append(i)
    outer = [outer[k] for k in (order or range(len(outer)))]
    st.reorder(*(outer + inner + [vloop]))
    for i in inner:
        st.unroll(i)
    st.vectorize(vloop)
    cs = s[CC]
    cs.compute_at(st, outer[-1])
    c_outer, c_inner = [], []
    for k, (ax, f) in enumerate(zip(list(cs.op.axis), block)):
        if f > 1 or k == last:
            o, ax = cs.split(ax, factor=f)
            c_outer.append(o)
        c_inner.append(ax)
    if vec is not None and vec != len(block) - 1:
        # the vector axis innermost in the buffer too (contiguous accumulators, which
        # LLVM keeps in registers; a strided vector of a local buffer is a gather)
        axes = list(cs.op.axis)
        cs.storage_order(*(axes[:vec] + axes[vec + 1:] + [axes[vec]]))
    return st, outer, cs, c_inner, c_outer


def _conv_x_stride(conv: Tensor) -> int:
    """How far the data index of the last dimension moves per output column (the
    convolution's stride along x; 0 when it cannot be read off the body)."""
    op = conv.op
    x = op.axis[-1].var
    weight = _conv_weight(conv)
    data = [t for t in op.input_tensors if t is not weight]
    if not data or not isinstance(op.body, Reduce):
        return 0
    loads = _loads(op.body.source, data[0])
    if not loads:
        return 0
    e = loads[0].indices[-1]
    zero = {iv.var: Const(0, iv.var.dtype) for iv in list(op.axis) + list(op.reduce_axis)}
    one = dict(zero)
    one[x] = Const(1, x.dtype)
    d = simplify(substitute(e, one) - substitute(e, zero))
    return int(d.value) if isinstance(d, Const) else 0


def _unroll_window(st: Stage, ky, kx):
    """Have LLVM unroll the kernel-window loops (``unroll_count`` pragmas: cheaper to
    compile than unrolling them in the IR): ``kx`` up to 8 taps, ``ky`` too when the
    whole window is at most 16 taps."""
    ey, ex = _cint(ky.dom.extent), _cint(kx.dom.extent)
    if ex is not None and 1 < ex <= 8:
        st.pragma(kx, "unroll_count", ex)
        if ey is not None and 1 < ey and ey * ex <= 16:
            st.pragma(ky, "unroll_count", ey)




def _conv_weight(conv: Tensor) -> Tensor:
    """The weight operand of a convolution stage (the input that is not the data)."""
    plain = plain_nchw_conv(conv.op)
    if plain is not None:
        return plain[1]
    ins = conv.op.input_tensors
    return ins[1] if len(ins) > 1 else ins[0]












def _conv_block_nhwc(K, OH, OW, info: CpuModel):
    """(OB, YB, XB) for NHWC: ``OB`` output channels (vectors) x ``YB*XB`` pixels."""
    L = info.lanes
    if K is None or K >= 2 * L:
        ob = 2 * L
    elif K > L:
        ob = K if K <= 2 * L else L
    else:
        ob = K
    nvo = -(-ob // L)
    # accumulators + the weight vectors + one broadcast register
    budget = info.vregs - nvo - 2
    pix = max(1, budget // nvo)
    yb = 1
    if OW is not None and OW < pix and OH is not None:
        yb = max(1, min(OH, pix // OW))
    xb = min(OW, pix // yb) if OW is not None else pix
    if OW is not None and OW % xb:
        # prefer a divisor of the width close to the budget (no tail kernel)
        ds = [d for d in _divisors(OW) if d <= pix // yb]
        if ds and max(ds) >= 0.75 * xb:
            xb = max(ds)
    # the smallest block the blocking leaves: the right edge's, in the bottom row
    corner = (OW % xb) * (OH % yb or yb) if OH is not None and OW is not None else 0
    if 0 < corner < 8 / nvo:
        # a row that the block leaves a sliver of (15 wide in 14-pixel blocks: a 1-pixel
        # tail block whose two accumulators wait on the FMA latency) is worth a
        # different block: the cheapest under _nhwc_block_cost, if clearly cheaper.  Only
        # blocks at least as wide as tall: taller ones, cheaper in the model, ran slower
        # (measurements: benchmarks/DECISIONS.md, "Conv NHWC: blocks as wide as tall")
        cur = _nhwc_block_cost(OH, OW, yb, xb, nvo, info.threads)
        cost, _, y, x = _nhwc_candidates(OH, OW, nvo, pix, info.threads)[0]
        if cost < 0.95 * cur:
            yb, xb = y, x
    return ob, yb, xb


def _nhwc_candidates(OH: int, OW: int, nvo: int, pix: int, threads: int):
    """Every ``(cost, -pixels, YB, XB)`` NHWC pixel block of at most ``pix`` pixels, at
    least as wide as tall, cheapest first under :func:`_nhwc_block_cost` (the larger block
    first among equal costs)."""
    return sorted((_nhwc_block_cost(OH, OW, y, x, nvo, threads), -y * x, y, x)
                  for y in range(1, min(OH, pix) + 1)
                  for x in range(y, min(OW, pix // y) + 1))


def _nhwc_block_cost(OH: int, OW: int, yb: int, xb: int, nvo: int, threads: int) -> float:
    """Relative time of an ``OH x OW`` output in ``yb x xb``-pixel register blocks (and
    the smaller blocks at the bottom and right edges): a block of ``p`` pixels costs ``p``
    FMA steps, but at least ``8 / nvo`` (two FMA ports x 4 cycles of latency need 8
    independent accumulators), plus 2 for the block's weight loads and loop; times the
    imbalance of the row blocks over the threads (they are the tasks when there are few
    channel blocks, see :func:`_conv_tasks`).  The model's choice ran fastest on two
    threads, about even with the best on one.
    (measurements: benchmarks/DECISIONS.md, "Conv NHWC: the block cost model")"""
    floor = -(-8 // nvo)
    cost = 0.0
    for ny, y in ((OH // yb, yb), (1 if OH % yb else 0, OH % yb)):
        for nx, x in ((OW // xb, xb), (1 if OW % xb else 0, OW % xb)):
            cost += ny * nx * (max(y * x, floor) + 2)
    rows = -(-OH // yb)
    return cost * (-(-rows // threads) * threads / rows)


def schedule_conv2d_nhwc(outs, target: str = "llvm", config=None) -> Schedule:
    """``tecomp.nn.conv2d_nhwc`` (HWIO weights, plus any elementwise epilogue).

    Like a GEMM whose rows are output pixels: ``YB x XB`` pixels x ``OB`` channels (two
    vectors) in registers; per input channel (the innermost loop) each pixel broadcasts
    one input value and the weights are ``OB/L`` vector loads.  Tasks and padding: see
    :func:`_conv_tasks`.  ``config``: the register block (``ob``, ``yb``, ``xb``), as
    :func:`schedule_conv2d_nchw`'s; by default :func:`conv2d_nhwc_params`."""
    return _template_or_rules(
        lambda s, o, info: _conv2d_nhwc_into(s, o, info, config), outs, target)


#: NHWC: where the convolution leaves its taps on the zero padding out of its sum, the
#: padding stage is inlined (the block reads the input in place) rather than computed in
#: a pass of its own: see :func:`_pad_inlined`
NHWC_INLINE_PAD = True


def _pad_inlined(s: Schedule, conv: Tensor, pad) -> bool:
    """Inline ``pad``, the NHWC convolution ``conv``'s own padding stage (or None), where
    ``conv`` skips its taps on the padding (``tecomp.nn.conv.SKIP_PADDED_TAPS``: its sum's
    ``where=`` is marked ``ZERO_WHERE``); returns whether it did.  The block's vectors run
    across the output channels, which the ``where=`` does not read, so lowering keeps every
    term of it: the tap loops are partitioned on it (``hoist_guards``) and in each part
    the inlined padding's select is proven true and simplified away, leaving plain reads
    of the input.  That saves the padded copy (a write and a read of the input and, where
    it is computed at the root, a parallel region of its own).
    (measurements: benchmarks/DECISIONS.md, "Conv NHWC: the padding inlined")"""
    if not NHWC_INLINE_PAD or pad is None or not conv.op.attrs.get(ZERO_WHERE):
        return False
    s[pad].compute_inline()
    return True


def _conv2d_nhwc_into(s: Schedule, outs, info: CpuModel, config=None):
    conv, pad = _conv_parts(outs, "conv2d_nhwc")
    pad = _own_pad(s, pad)
    if _pad_inlined(s, conv, pad):
        pad = None
    N, OH, OW, K = (_cint(e) for e in conv.shape)
    p = _conv_config(conv2d_nhwc_params(conv, info), config, "nhwc")
    ob, yb, xb = p.ob, p.yb, p.xb
    fused = _fusable_epilogue(outs, conv)
    st, (n, oc, yc, xc), cs = _pixels_by_channels(s, conv, ob, yb, xb, fused)
    _conv_tasks(s, st, cs, pad, _conv_weight(conv), info, n, oc, yc, N, K, ob, OH, yb,
                pad_vec_dim=3, weight_vec_dim=3, weight_copy=p.weight_copy,
                tasks=p.tasks, rows_per_task=p.rows_per_task)
    _epilogue(s, outs, conv, info, fused)


def _pixels_by_channels(s: Schedule, conv: Tensor, ob: int, yb: int, xb: int, fused,
                        nchw: bool = False):
    """The NHWC kernel's register block (:func:`schedule_conv2d_nhwc`) of ``conv``: ``yb
    x xb`` pixels x ``ob`` output channels (vectors), accumulated over the window and,
    innermost, the input channels (each step one weight load per vector and one
    broadcast per pixel).  ``nchw``: the same block of an NCHW stage, stored channels
    innermost (``_conv_register_block``'s ``vec``).  Returns (the output's stage, its
    tile loops ``n, oc, yc, xc``, the block's stage)."""
    if nchw:
        st, tiles4, cs, (cn, co, cy, cx), tiles = _conv_register_block(
            s, conv, (1, ob, yb, xb), out=fused, vec=1)
        c, ky, kx = cs.op.reduce_axis
    else:
        st, tiles4, cs, (cn, cy, cx, co), tiles = _conv_register_block(
            s, conv, (1, yb, xb, ob), order=(0, 3, 1, 2), out=fused)
        ky, kx, c = cs.op.reduce_axis
    cs.reorder(*tiles, cn, ky, kx, c, cy, cx, co)
    cs.unroll(cy)
    cs.unroll(cx)
    cs.vectorize(co)
    return st, tiles4, cs


def conv2d_knobs(conv, knobs, info: CpuModel) -> ConvParams:
    """The convolution template's config for the ``conv2d_nchw``/``conv2d_nhwc`` stage
    ``conv``, its knobs chosen through ``knobs``: ``conv2d_nchw.by_channels`` (where the
    heuristic takes channel vectors) and ``conv2d_nchw.block`` / ``conv2d_nhwc.block``,
    the rank of the register block among the block model's best
    (:data:`CONV_BLOCK_CHOICES`; 0, the default, is the heuristic's),
    ``conv2d_nhwc.channel_vectors`` (the block's output-channel vectors: the heuristic's
    2, or 4 where they divide the channels; its blocks are then the model's best for 4)
    and ``conv2d_nhwc.weight_copy`` (:class:`ConvParams`; the heuristic's first).  Applied
    by ``schedule_conv2d_*(outs, target, config)``."""
    out = conv.output(0)
    if "conv2d_nhwc" in _op_tags(conv):
        default = conv2d_nhwc_params(out, info)
        ob = _nhwc_channel_block(out, default.ob, knobs, info)
        first = [(default.yb, default.xb)] if ob == default.ob else []
        blocks = first + [b for b in _nhwc_blocks(out, info, ob, CONV_BLOCK_CHOICES)
                          if b not in first][:CONV_BLOCK_CHOICES - len(first)]
        r = knobs.choose("conv2d_nhwc.block", list(range(len(blocks))), 0)
        wc = knobs.choose("conv2d_nhwc.weight_copy", [default.weight_copy,
                                                      not default.weight_copy],
                          default.weight_copy)
        return dataclasses.replace(default, ob=ob, yb=blocks[r][0], xb=blocks[r][1],
                                   weight_copy=wc)
    default = conv2d_nchw_params(out, info)
    chan = _nchw_channel_block(out, info)
    if chan is not None and knobs.choose("conv2d_nchw.by_channels", [True, False],
                                         default.by_channels):
        return default if default.by_channels else ConvParams(*chan, True)
    blocks = _nchw_blocks(out, info, CONV_BLOCK_CHOICES)
    r = knobs.choose("conv2d_nchw.block", list(range(len(blocks))), 0)
    return ConvParams(*blocks[r])


def _nhwc_channel_block(conv: Tensor, ob: int, knobs, info: CpuModel) -> int:
    """The output channels of an NHWC register block whose heuristic has ``ob``: the
    knob ``conv2d_nhwc.channel_vectors`` where the heuristic's two vectors
    could be four (whole blocks of ``4 * lanes`` channels), with 2 its default.  Four
    vectors take fewer loads per FMA (a 4 x 4-pixel block: 8 loads for 16 FMAs, the
    heuristic's 2 x 14: 16 for 28) and stream their block's weights again for every 4
    pixels: on Zen 4 (1 thread, CPU time, under load) 1.03x the heuristic's block on 3x3
    64->64 56x56 in the paired medians, as fast in the best calls, 0.84-0.93x on 256->256
    14x14 (measurements: benchmarks/DECISIONS.md, "Conv NHWC: two channel vectors on Zen
    4"): a choice for the search, not the default."""
    L = info.lanes
    _, OH, OW, K = (_cint(e) for e in conv.shape)
    if ob != 2 * L or None in (OH, OW, K) or K % (4 * L):
        return ob
    return knobs.choose("conv2d_nhwc.channel_vectors", [2, 4], 2) * L


def _nhwc_blocks(conv: Tensor, info: CpuModel, ob: int, count: int) -> List[Tuple[int, int]]:
    """The ``count`` cheapest ``(YB, XB)`` pixel blocks of an NHWC convolution with ``ob``
    output channels per block (:func:`_nhwc_candidates`)."""
    N, OH, OW, K = (_cint(e) for e in conv.shape)
    if OH is None or OW is None:
        return []
    nvo = -(-ob // info.lanes)
    pix = max(1, (info.vregs - nvo - 2) // nvo)
    return [(y, x) for _, _, y, x in _nhwc_candidates(OH, OW, nvo, pix, info.threads)[:count]]


def _conv_for_generic_rules(conv, knobs, info: CpuModel) -> bool:
    """Whether the auto-scheduler schedules this NCHW convolution with its generic rules
    rather than the template (a knob).  By default on a CPU without AVX-512's masks, for
    a window larger than 1x1: there the rules' register blocks (12 accumulators, a row of
    up to four vectors as one block) beat the template's on the 3x3 layers of ResNet
    measured, and lose on a 1x1.
    (measurements: benchmarks/DECISIONS.md, "Conv NCHW: the rules without masks")
    And for a 1x1 window whose output plane has 28x28 pixels or more: there the rules'
    rows (whole vectors and a narrower unmasked last one) ran faster than the template's
    14-pixel blocks on Zen 4, and slower on smaller planes.
    (measurements: benchmarks/DECISIONS.md, "Conv NCHW: the rules for large 1x1 planes")"""
    out = conv.output(0)
    window = _window(_conv_weight(out))
    OH, OW = (_cint(e) for e in out.shape[2:])
    large_1x1 = window == 1 and OH is not None and OW is not None and OH * OW >= 28 * 28
    return knobs.choose("conv2d_nchw.generic_rules", [True, False],
                        (not info.masks and window > 1) or large_1x1)
