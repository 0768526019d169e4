"""3-d convolutions channels first (:func:`tecomp.nn.conv3d_ncdhw`) with the vectors
across the output channels, as the NCHW convolution template runs rows that leave lanes
idle (``conv2d._nchw_by_channels``).

The rules' register blocks run along the output rows: a row of 14 fills 14 of 16 lanes,
and every tap broadcasts one weight per output channel of the block from a scattered
line (the weights of one output channel are ``C * 27`` floats apart).  Here a block is
``2 x lanes`` output channels by a few pixels of a row: per tap, two vector loads of
weights from a copy stored ``[O / 2L, C, KD, KH, KW, 2L]`` and one broadcast per pixel.
Interleaved with PyTorch, 1 thread, a loaded 2-core Xeon, ms: 128 -> 128 channels
4x14x14, batch 2: 38.4 with the rules' blocks, 24.6 with these (PyTorch 22.9); 64 -> 64
8x28x28: 27.5 and 20.3 (PyTorch 92.7).

A short reduction (a first layer: 3 input channels x 27 taps, 81 steps) takes the
template whatever its rows: the rules' row blocks broadcast 8 weights from 8 lines per
tap and spill.  Its block is stored along the output rows and its taps on the zero
padding are computed (see :func:`_conv3d_ncdhw_into`).  A longer one skips them: the
depth's and the rows' by tap loops bounded by the task's plane and row, the columns'
(``nn.conv_nd.SKIP_PADDED_COLUMNS``) by the first and last blocks of each row, which
``loop_partition`` splits off with their column taps over the pixels inside the data
(128 -> 128 channels 4x14x14: 0.76 of the taps read the data)."""
from __future__ import annotations

from typing import Optional

from ...schedule.schedule import Schedule, create_schedule
from ...te.tensor import ComputeOp
from .._common import _cint, _is_injective, _walk
from .common import _auto_rest, _op_tags, _vector_split
from .conv2d import _row_lane_use
from .conv_nd import _accumulate_block, _data_of, _unrolled_vectors
from ...target import CpuModel
from ...te.tensor_intrin import transpose_intrin

#: reductions (input channels x kernel taps) this long or longer take the template only
#: where the rows leave lanes idle (:data:`ROW_LANE_USE`); shorter ones (3 input
#: channels, 81 taps) always, their blocks stored by rows, their zero taps computed.
#: 1 thread, CPU time, interleaved, a loaded 2-core Zen 4 (load average 11), ms, C3D's
#: first layer (3 -> 64 channels, 16x56x56, batch 1): the rules' row blocks 23.5, this
#: template 6.7 (stores scattered across the channel planes: 15.7; taps on the padding
#: skipped: 7.5), PyTorch 13.7.  Longer reductions keep the scatter and the skipped taps
#: (64 -> 64 8x28x28: 11.5 vs 12.7 by rows; 128 -> 128 4x14x14: 10.7 vs 13.1)
MIN_REDUCTION = 256
#: the weight copy made of register transposes where the target has them
#: (:func:`_weight_copy`; off: a gather per vector).  1 thread, CPU time, interleaved, a
#: loaded Zen 4 (load average 9), ms, 128 -> 128 channels 4x14x14, batch 2: 10.06 ->
#: 10.02 and, in another run, 10.78 -> 10.67 (1.8 MB of weights copied per call)
TRANSPOSED_WEIGHT_COPY = True
#: rows whose vectors keep this share of the lanes busy or more stay with the rules'
#: row vectors (conv2d's threshold; 1 thread, loaded, ms, 64 -> 64 channels: rows of 32
#: 26.8 with the rules, 29.2 here; rows of 56, 7 of 8 lanes, 47.5 and 40.2)
ROW_LANE_USE = 0.9


def _conv3d_template(outs, knobs, info: CpuModel) -> Optional[Schedule]:
    """A DAG that is one float32 ``conv3d_ncdhw`` without groups (the output itself,
    constant extents but the batch) whose output channels make whole blocks of two
    vectors, and whose reduction is shorter than :data:`MIN_REDUCTION` steps or whose
    rows leave lanes of their vectors idle (:data:`ROW_LANE_USE`):
    :func:`_conv3d_ncdhw_into` (knobs ``template.conv3d_ncdhw.store``, "rows" or
    "scatter", and ``template.conv3d_ncdhw.zero_taps``, "compute" or "skip": by
    default the first of each for a short reduction, the second otherwise); None
    otherwise."""
    if len(outs) != 1:
        return None
    op = outs[0].op
    reductions = [o for o in _walk(outs) if o.reduce_axis]
    if reductions != [op] or "conv3d_ncdhw" not in _op_tags(op) or \
            op.attrs["conv"][3] != 1 or op.output(0).dtype != "float32":
        return None
    exts = [_cint(iv.dom.extent) for iv in list(op.axis[1:]) + list(op.reduce_axis)]
    if None in exts:
        return None
    O, OW, reduction = exts[0], exts[3], exts[4] * exts[5] * exts[6] * exts[7]
    if O % (2 * info.lanes) or (reduction >= MIN_REDUCTION and
                                _row_lane_use(OW, OW, info) >= ROW_LANE_USE):
        return None
    if not knobs.choose("template.conv3d_ncdhw", [True, False], True):
        return None
    s = create_schedule([op])
    # a short reduction (the first layer's 3 channels x 27 taps): the block stored to
    # the output along its rows, the taps on the zero padding computed (see
    # :func:`_conv3d_ncdhw_into`)
    short = reduction < MIN_REDUCTION
    store = knobs.choose("template.conv3d_ncdhw.store", ["rows", "scatter"],
                         "rows" if short else "scatter")
    zero_taps = knobs.choose("template.conv3d_ncdhw.zero_taps", ["compute", "skip"],
                             "compute" if short else "skip")
    _conv3d_ncdhw_into(s, outs[0], info, store=store, zero_taps=zero_taps == "compute")
    return _auto_rest(s, outs, info)


def _weight_copy(ws, weight, info: CpuModel) -> None:
    """The copy ``ws`` of the OIDHW ``weight`` stored ``[O / ob, C, KD, KH, KW, ob]``:
    where the target has the ``L x L`` register transpose and ``L`` divides ``C * KD * KH
    * KW`` (each output channel's weights are that many contiguous elements), in tiles
    of ``L`` output channels by ``L`` of those elements, each read as ``L`` vectors and
    transposed in registers (:data:`TRANSPOSED_WEIGHT_COPY`); else a gather across the
    ``ob`` output channels per vector.  Parallel (with threads) over the tiles' columns
    or the (block, input channel) rows."""
    L = info.lanes
    a, c, kd, kh, kw, lane = ws.op.axis
    taps = [_cint(e) for e in weight.shape[1:]]
    # (weights that are a placeholder: a computed one is read through its indices, which
    # the transpose's rows may not step through by a constant)
    intrin = transpose_intrin(info.target, L, weight.dtype) if TRANSPOSED_WEIGHT_COPY \
        and None not in taps and not isinstance(weight.op, ComputeOp) else None
    if intrin is not None and (taps[0] * taps[1] * taps[2] * taps[3]) % L == 0:
        fo, lo, fi, li = ws.tile(ws.fuse(c, kd, kh, kw), lane, L, L)
        # (the tile's columns outermost: a loop fused with the blocks' would step by
        # neither's constant, which the transpose needs)
        ws.reorder(fo, a, lo, fi, li)
        ws.tensorize(fi, intrin)
        if info.threads > 1:
            ws.parallel(fo)
        return
    rows = ws.fuse(a, c)
    if info.threads > 1:
        ws.parallel(rows)
    ws.vectorize(lane)


def _conv3d_ncdhw_into(s: Schedule, conv, info: CpuModel, store: str = "scatter",
                       zero_taps: bool = False) -> None:
    """``Y[n, o, z, y, x] = sum over c, kd, kh, kw of P[n, c, z*sd + kd*dd, ...] *
    W[o, c, kd, kh, kw]``: register blocks of ``2 x lanes`` output channels (two
    vectors) by ``XB`` pixels of one output row (at most 8: 16 accumulators, with the
    two weight vectors and a broadcast in the 32 registers; a divisor of the row where
    one is 6 to 8), accumulated over the whole reduction in a local buffer stored
    channels innermost, then written to the NCDHW output: ``store`` "scatter", a
    vector of channels per pixel, each a scatter across the channel planes; "rows", a
    vector of the block's pixels per channel, read back from the block's buffer (a
    gather in L1) and stored to the output row.  Tasks: (image, channel block, output
    plane, output row).  The padded input and the weight copy (:func:`_weight_copy`) are
    computed once, at the root, in parallel.  ``zero_taps``: the taps on the zero
    padding are computed (the pragma ``zero_terms``), so that the tap loops keep
    constant bounds and are unrolled; else skipped, their loops bounded by the task's
    plane and row, and by the block's pixels where it is a row's first or last (those
    blocks split off by ``loop_partition``, their tap and pixel loops constant)."""
    L = info.lanes
    ob = 2 * L
    op = conv.op
    data = _data_of(op)
    weight = next(t for t in op.input_tensors if t is not data)
    OW = _cint(op.axis[4].dom.extent)
    pix = min(8, (info.vregs - 4) // 2)
    if OW <= pix:
        xb = OW
    else:
        ds = [d for d in range(pix - 2, pix + 1) if OW % d == 0]
        xb = max(ds) if ds else pix
    wc = s.cache_read(weight, "global", [op], blocks=[(0, ob)])
    _weight_copy(s[wc], weight, info)
    if data in s and _is_injective(data.op):
        # the padding, at the root: every task reads 3 planes x 3 rows of each channel
        ps = s[data]
        pa = ps.op.axis
        _vector_split(ps, pa[-1], _cint(pa[-1].dom.extent), L)
        rows = ps.fuse(pa[0], pa[1])
        if info.threads > 1:
            ps.parallel(rows)
    CL = s.cache_write(conv, "local")
    st = s[conv]
    n, o, z, y, x = st.op.axis
    oo, oi = st.split(o, factor=ob)
    xo, xi = st.split(x, factor=xb)
    st.reorder(n, oo, z, y, xo, xi, oi)
    task = st.fuse(n, oo, z, y)
    if info.threads > 1:
        st.parallel(task)
    if store == "rows":
        # (vectors of the block's pixels: a split past them would widen the block)
        st.reorder(task, xo, oi, xi)
        _unrolled_vectors(st, oi, xi, min(L, xb))
    else:
        _unrolled_vectors(st, xi, oi, L)
    cs = s[CL]
    cs.compute_at(st, xo)
    cn, co, cz, cy, cx = cs.op.axis
    cs.storage_order(cn, cz, cy, cx, co)   # (the channels innermost: the vectors)
    # split by the block first: a partial block's extents are then bounded by constants
    _, cx = cs.split(cx, factor=xb)
    _, co = cs.split(co, factor=ob)
    _accumulate_block(cs, cx, co, L)
    if zero_taps:
        cs.pragma(cs.op.reduce_axis[0], "zero_terms")
