"""The 1-d convolutions in NCW (:func:`tecomp.nn.conv1d_ncw`) and the transposed
convolutions (:func:`tecomp.nn.conv2d_transpose_nchw` / ``_nhwc``) as the auto-scheduler's
starting points.

``conv1d_ncw``: register blocks of a few output channels by vectors along the row, in
tasks of output channels whose weights stay in L2, the row a serial loop inside, the
input channels in chunks that stay in L1 (:func:`_conv1d_ncw_into`).

A transposed convolution: without groups and with a stride above
1 such an operator is several stride-1 convolutions, one per phase of its output, and a
stage that interleaves them (``nn.conv_grad.transposed_conv2d``; a convolution's data
gradient has the same form).  Each convolution gets the convolution template, as
:func:`tecomp.strategy.schedule_backward` gives them in a backward pass, reading its
flipped weights through the flip (no flipped copy: the template's own copy, where it
makes one, gathers from the weights themselves); the NCHW interleave stores each phase
in turn (:func:`_interleave_by_phase`); the rest (the adjoint's windows) the rules.
(A single convolution, stride 1, is the convolution template's own.)"""
from __future__ import annotations

from typing import Optional

from ...ir import dtype as _dt
from ...ir.expr import ProducerLoad
from ...ir.functor import collect
from ...schedule.schedule import Schedule, create_schedule
from ...te.tensor_intrin import transpose_intrin
from .._common import _cint, _is_injective, _largest_divisor_at_most, _walk
from .common import _auto_rest, _op_tags, _vector_split
from .conv2d import _conv_for_generic_rules, _conv_weight
from .conv2d_grad import schedule_conv2d_into
from .conv2d_tasks import _channel_tiles
from ...target import CpuModel


def _phases_template(outs, knobs, info: CpuModel) -> Optional[Schedule]:
    """A DAG whose reductions are all forward convolutions (``conv2d_nchw``/``_nhwc``),
    two or more of them, under one output (the phases of a transposed convolution):
    each convolution by the template, the other stages by the rules; None otherwise.
    An NCHW phase that the convolution template leaves to the rules (a 1x1 one on a
    large plane, as a U-Net's 2x2 stride-2 up-convolution has:
    ``conv2d._conv_for_generic_rules``) stays with them.  Interleaved, 2 threads, ms,
    against the rules for every phase (PyTorch), on a loaded 2-core machine: 256 to 128
    channels 4x4 stride 2 on 16x16, batch 8, 32.9 vs 38.1 (99.9), again 43.8 vs 45.2
    (131.5); 128 to 64 on 32x32 41.5 vs 42.4 (135.0), again 49.6 vs 43.6 (159.9).

    An NCHW phase's flipped weights (``<weight>.flip.pRC``, a gather of the taps that
    land on it) are inlined into their reader (knob ``template.phases.flip``, "root"
    keeps them a pass of their own): the register block's broadcasts, or the template's
    copy of a block's weights across output channels (itself a gather), read the
    weights in place, one pass over them fewer per phase.  (Not an NHWC phase's: its
    block may read the flipped weights' contiguous vectors in place, which would become
    gathers.  Nor where the template copies them in register transposes: it keeps them
    a stage then, ``conv2d_tasks._flip_kept``.)  1 thread, CPU time, interleaved, a loaded Zen 4
    (load average 10-14), ms, DCGAN shapes, batch 16, 4x4 stride 2, the interleave by
    phase in both: 256 to 128 on 8x8 12.63 -> 12.43, 128 to 64 on 16x16 11.64 -> 11.50,
    512 to 256 on 4x4 16.42 -> 16.45.

    Where the template keeps two or more phases' flips a stage, the convolutions are
    scheduled again, the flips reading one packed copy of the weights instead
    (:func:`_pack_flip_source`, knob ``template.phases.pack``)."""
    if len(outs) != 1:
        return None
    reductions = [op for op in _walk(outs) if op.reduce_axis]
    convs = [op for op in reductions if {"conv2d_nchw", "conv2d_nhwc"} & _op_tags(op)]
    if len(reductions) < 2 or len(convs) != len(reductions):
        return None
    if not knobs.choose("template.phases", [True, False], True):
        return None
    s = create_schedule([t.op for t in outs])
    mine = [op for op in convs if "conv2d_nhwc" in _op_tags(op)
            or not _conv_for_generic_rules(op, knobs, info)]
    if not mine:
        return None
    for op in mine:
        schedule_conv2d_into(s, op.output(0), info.target)
    nchw = [op for op in mine if "conv2d_nchw" in _op_tags(op)]
    kept = [w for w in (_conv_weight(op.output(0)) for op in nchw)
            if "conv2d_weight_flip" in _op_tags(w.op) and s[w].relations]
    if len(kept) > 1 and \
            knobs.choose("template.phases.pack", ["once", "per_phase"], "once") == "once":
        # the same convolutions again, their flips reading one packed copy of the weights
        s = create_schedule([t.op for t in outs])
        _pack_flip_source(s, kept, info)
        for op in mine:
            schedule_conv2d_into(s, op.output(0), info.target)
    if nchw and knobs.choose("template.phases.flip", ["inline", "root"], "inline") == "inline":
        for op in nchw:
            w = _conv_weight(op.output(0))
            # (not where the template kept it a stage: its copy transposes its buffer)
            if "conv2d_weight_flip" in _op_tags(w.op) and s[w].attach_type == "root" and \
                    not s[w].relations and not s[w].iter_attrs:
                s[w].compute_inline()
    if "phases" in outs[0].op.attrs and \
            knobs.choose("template.phases.interleave", ["by_phase", "rules"], "by_phase") \
            == "by_phase":
        _interleave_by_phase(s, outs[0], info)
    return _auto_rest(s, outs, info)


def _pack_flip_source(s: Schedule, flips, info: CpuModel) -> None:
    """The NCHW phases' flipped weights (``flips``, each ``[C, O, ty, tx]``, a gather of
    its taps from the OIHW weights ``w[O, C, KH, KW]``) that the template would keep as
    root stages (``conv2d_tasks._flip_kept``: each pass reads all of ``w`` for a
    fraction of its taps, then the convolution's copy transposes it) read instead one
    copy of ``w`` stored ``[KH, KW, O, C]`` (``<w>.global``, ``storage_order``), made in
    one pass, in 16 x 16 tiles of the two channel axes: each tap is then a plane whose
    rows run along the phase's output channels, so that the flips are inlined into the
    convolutions' copies, contiguous vectors of that plane (knob
    ``template.phases.pack``: "once"; "per_phase": a flip pass per phase).  1 thread,
    CPU time, interleaved, a Zen 4 under load (load average 3.8), ms, DCGAN 512 to 256
    channels on 4x4, 4x4 stride 2, batch 16: 13.95 per phase, 11.94 once (PyTorch
    11.74)."""
    src = flips[0].op.input_tensors[0]
    if len(src.shape) != 4 or any(f.op.input_tensors[0] is not src for f in flips):
        return
    wc = s.cache_read(src, "global", [f.op for f in flips])
    st = s[wc]
    o, c, i, j = st.op.axis
    st.storage_order(i, j, o, c)
    L = info.lanes
    intrin = transpose_intrin(info.target, L, src.dtype)
    C, KH, KW = (_cint(e) for e in src.shape[1:])
    if intrin is not None and None not in (C, KH, KW) and C % L == 0 and (KH * KW) % L == 0:
        # per output channel, L x L register transposes of (taps, channels)
        t = st.fuse(i, j)
        to, co, ti, ci = st.tile(t, c, L, L)
        st.reorder(o, co, to, ti, ci)
        st.tensorize(ti, intrin)
        if info.threads > 1:
            st.parallel(o)
        return
    _channel_tiles(st, (o, c), (i, j), True, info)


def _interleave_by_phase(s: Schedule, out, info: CpuModel) -> None:
    """The stage that interleaves the NCHW phases of a transposed convolution (``out[n,
    c, y, x]`` from phase ``(y % sh, x % sw)`` at ``(y // sh, x // sw)``): a task per
    (image, channel), and in it, per row of the phases, each phase ``(ry, rx)`` in turn
    (unrolled: its selects fold away), its row loaded as vectors and stored every
    ``sw``-th element of the output row.  The rules vectorize the output row itself:
    every lane picks its phase, a masked gather per phase and vector (knob
    ``template.phases.interleave``: "rules").  Interleaved, 2 threads, a loaded 2-core
    Zen 4 (load average 6-14), ms: the four 8x8 phases of 128 channels, batch 16, into
    16x16, 0.711 (rules) vs 0.236; the whole transposed convolution (DCGAN, 4x4 stride
    2, batch 16, flips at the root), 1 thread, CPU time: 256 to 128 on 8x8 13.23 ->
    12.63, 128 to 64 on 16x16 13.00 -> 11.64, 512 to 256 on 4x4 (4-wide phases) 16.36
    -> 16.42."""
    sh, sw = out.op.attrs["phases"]
    st = s[out]
    n, c, y, x = st.op.axis
    OW = _cint(x.dom.extent)
    yo, ry = st.split(y, factor=sh)
    xo, rx = st.split(x, factor=sw)
    st.reorder(n, c, yo, ry, rx, xo)
    task = st.fuse(n, c)
    if info.threads > 1:
        st.parallel(task)
    st.unroll(ry)
    st.unroll(rx)
    _vector_split(st, xo, None if OW is None else -(-OW // sw), info.lanes)


def _conv1d_template(outs, knobs, info: CpuModel) -> Optional[Schedule]:
    """A DAG that is one ``conv1d_ncw`` without groups (float32 or float64, the output
    itself, constant extents but the batch) whose row ends in a partial block, whose
    weights do not fit in half of L2 or whose stride is above 2 (the rules' row loads
    would be gathers; here the data row is copied by phase: :func:`_phases_of_the_row`):
    :func:`_conv1d_ncw_into`; None otherwise.  (A stride of 2 with whole blocks stays
    with the rules: 1 thread, loaded, ms, batch 4, 256 channels, 2048 samples, kernel
    3: rules 30.5, this template with the copy 37.1, PyTorch 28.1.)
    (``conv1d_nwc`` stays with the rules: their blocks, with the weights of a task
    copied into a contiguous panel, ran twice as fast as this order without that
    copy.)"""
    if len(outs) != 1:
        return None
    op = outs[0].op
    reductions = [o for o in _walk(outs) if o.reduce_axis]
    if reductions != [op] or "conv1d_ncw" not in _op_tags(op) or \
            op.attrs["conv"][3] != 1 or op.output(0).dtype not in ("float32", "float64"):
        return None
    if any(_cint(iv.dom.extent) is None for iv in list(op.axis[1:]) + list(op.reduce_axis)):
        return None
    # where the rules' blocks are whole and the weights fit in L2, the rules (as fast,
    # within the noise, on the shapes measured)
    L = info.lanes * 32 // _dt.bits(op.output(0).dtype)
    OX = _cint(op.axis[2].dom.extent)
    weights = _cint(op.axis[1].dom.extent) * _cint(op.reduce_axis[0].dom.extent) * \
        _cint(op.reduce_axis[1].dom.extent) * _dt.bits(op.output(0).dtype) // 8
    if OX % (2 * L if OX >= 2 * L else L) == 0 and weights <= info.l2_bytes // 2 and \
            op.attrs["conv"][0][0] <= 2:
        return None
    if not knobs.choose("template.conv1d_ncw", [True, False], True):
        return None
    s = create_schedule([op])
    _conv1d_ncw_into(s, outs[0], info, wide=knobs.choose(
        "template.conv1d_ncw.block", ["wide", "narrow"], "wide") == "wide")
    return _auto_rest(s, outs, info)


def _conv1d_ncw_into(s: Schedule, conv, info: CpuModel, wide: bool = True):
    """A 1-d convolution ``Y[n, o, x] = sum over c, k of X[n, c, x*s + k*d] * W[o, c,
    k]``: register blocks of ``OB`` output channels x vectors along the row (the row
    loaded, the weights broadcast).  ``wide`` (knob ``template.conv1d_ncw.block``,
    "wide" or "narrow"): with 32 registers, :data:`WIDE_ROW_VECTORS` vectors (4
    channels x 6 vectors, 24 accumulators: per tap 10 loads for 24 FMAs), and the input
    channels in chunks whose data rows for the block (its outputs times the stride,
    plus the window) fill at most L1, where they make two chunks or more (else the
    narrow block): each chunk in turn for all the task's blocks of output channels at
    one block of outputs, their accumulators kept in a local buffer across the chunks
    (a GEMM's K blocking: the chunk's rows are read from L1 by every block of output
    channels, not from L2).  1 thread, CPU time, interleaved, a loaded 2-core Zen 4
    (load average 12-16), ms: wav2vec2's second layer (512 -> 512, kernel 3, stride 2,
    3199 samples) 35.3 narrow, 26.6 wide (PyTorch 25.5); 256 -> 256, kernel 3, 1024
    samples, batch 8: 32.9 and 30.8 (PyTorch 31.6).  "narrow": two vectors,
    as the rules make them, each block accumulated over the whole reduction.

    A task is ``BT`` such blocks of output channels (their weights fill half of L2;
    two tasks per thread at least) over the whole row, block of outputs after block of
    outputs along it, each of its blocks of output channels in turn there (the data of
    a block stays in L1).  The row is a serial loop, so that
    loop partitioning gives its last, partial block its own code: the rules fuse it
    into the parallel loop, where a partial block (a row of 1999 outputs) makes every
    block's accumulators an array in memory.  Interleaved, 2 threads, ms, batch 4, 512
    to 512 channels, kernel 3, on a loaded 2-core machine, against the rules (PyTorch):
    1999 outputs stride 1 218.7 vs 884.6 (202.2); stride 2 343.9 vs 1167.5 (212.7);
    batch 8, 256 channels, 1024 outputs (no partial block) 69.1 vs 75.7 (129.9).
    Where the data row, all its channels, fits in half of L2 (one input channel:
    wav2vec2's first layer, 512 x 3199 outputs from 16000 samples), each block of
    output channels is a task that walks the whole row: its output rows are written in
    long runs, not 32 elements of each of 128 rows in turn (1 thread, loaded, ms: 0.867
    -> 0.604; with the copy of :func:`_phases_of_the_row` 0.338, PyTorch 0.417)."""
    L = info.lanes * 32 // _dt.bits(conv.dtype)
    st = s[conv]
    n, o, x = st.op.axis
    O, OX = _cint(o.dom.extent), _cint(x.dom.extent)
    reds = st.op.reduce_axis
    C = _cint(reds[0].dom.extent)
    K = 1
    for r in reds[1:]:
        K *= _cint(r.dom.extent)
    # the wide block (WIDE_ROW_VECTORS vectors along the row, where 32 registers hold
    # them) with the input channels in chunks whose data rows (the block's outputs
    # times the stride, and the window) fill at most L1; where one chunk takes them all
    # (one input channel: wav2vec2's first layer), two vectors and no chunks
    xvecs, kblock = 2, C
    if wide and info.vregs >= 32 and OX >= WIDE_ROW_VECTORS * L:
        sx, dx = conv.op.attrs["conv"][0][0], conv.op.attrs["conv"][2][0]
        v = _row_vectors(OX, L)
        row_bytes = (v * L * sx + (K - 1) * dx + 1) * _dt.bits(conv.dtype) // 8
        kb = _largest_divisor_at_most(C, max(1, info.l1_bytes // row_bytes))
        if kb < C:
            xvecs, kblock = v, kb
    xb = xvecs * L if OX >= xvecs * L else L
    budget = max(1, (info.vregs - 4) // (xb // L))   # accumulator rows
    ob = _largest_divisor_at_most(O, budget)
    ob = ob if ob >= 4 else min(O, budget)
    # output channels per task: their weights (K * C each) fill half of L2, with at
    # least two tasks per thread, and no partial task (see above)
    nblocks = -(-O // ob)
    per_block = ob * C * K * _dt.bits(conv.dtype) // 8
    bt = max(1, min(nblocks, info.l2_bytes // 2 // max(per_block, 1)))
    N = _cint(n.dom.extent)
    if N is not None:
        bt = max(1, min(bt, nblocks // max(1, -(-2 * info.threads // N))))
    bt = _largest_divisor_at_most(nblocks, bt)
    # a data row (all its channels) that stays in L2 (one input channel: wav2vec2's
    # first layer): each block of output channels is a task of its own that walks the
    # whole row, writing its output rows in long runs
    Win = _cint(_data_of(conv.op).shape[2])
    if Win is not None and C * Win * _dt.bits(conv.dtype) // 8 <= info.l2_bytes // 2:
        bt = 1
    CL = s.cache_write(conv, "local")
    _phases_of_the_row(s, CL, L, info.threads)
    st = s[conv]
    oo, oi = st.split(o, factor=ob)
    ot, oo2 = st.split(oo, factor=bt)
    xo, xi = st.split(x, factor=xb)
    st.reorder(n, ot, xo, oo2, oi, xi)
    task = st.fuse(n, ot)
    if info.threads > 1:
        st.parallel(task)
    _unrolled_vectors(st, oi, xi, L)
    cs = s[CL]
    if kblock < C:
        # the block's accumulators over the task's output channels, in L1, each chunk of
        # input channels in turn for all of them: the chunk's data rows are read from L1
        cs.compute_at(st, xo)
        _, co, cx = cs.op.axis
        coo, co = cs.split(co, factor=ob)
        _, cx = cs.split(cx, factor=xb)
        c, *taps = cs.op.reduce_axis
        cko, cki = cs.split(c, factor=kblock)
        cs.reorder(cko, coo, cki, *taps, co, cx)
        _unrolled_vectors(cs, co, cx, L)
        for r in taps:
            if _cint(r.dom.extent) <= 8:
                cs.unroll(r)
        cs.pragma(cki, "fp_contract")
        return
    cs.compute_at(st, oo2)
    _, co, cx = cs.op.axis
    # split by the block first: a partial block's extents are then bounded by constants
    _, co = cs.split(co, factor=ob)
    _, cx = cs.split(cx, factor=xb)
    _accumulate_block(cs, co, cx, L)


#: the vectors along the row of the conv1d_ncw template's wide register block (with 32
#: registers): 4 output channels x 6 vectors, 24 accumulators
WIDE_ROW_VECTORS = 6

#: whether the wide block takes one vector less where its blocks then cover the row
#: with fewer outputs past its end (:func:`_row_vectors`); off, always
#: :data:`WIDE_ROW_VECTORS`, as before.  Zen 4, one thread, CPU time, under load (load
#: average 14-16), 7 rounds, two runs, ms, 6 / 5 vectors: wav2vec2's second layer (1599
#: outputs: 17 blocks of 96 = 1632, 20 of 80 = 1600) 26.58 / 25.85 and 26.39 / 25.39,
#: PyTorch 25.66 and 25.15; 256 -> 256 k3, 1024 outputs (1056 / 1040) 30.99 / 31.09 and
#: 30.30 / 30.56; 128 -> 128 k5, 2048 outputs (2112 / 2080) 25.44 / 25.20 and 25.24 /
#: 24.93
LEAST_ROW_TAIL = True


def _row_vectors(OX: int, lanes: int) -> int:
    """The wide block's vectors along a row of ``OX`` outputs: :data:`WIDE_ROW_VECTORS`,
    or one less where its blocks cover the row with fewer outputs computed past its end
    (:data:`LEAST_ROW_TAIL`; ties keep the wider block, 4 FMAs per load more)."""
    def covered(v):
        return -(-OX // (v * lanes)) * v * lanes
    v = WIDE_ROW_VECTORS
    return v - 1 if LEAST_ROW_TAIL and v > 1 and covered(v - 1) < covered(v) else v


def _unrolled_vectors(st, rows, vec, lanes: int) -> None:
    """A block's inner loops: ``rows`` unrolled, ``vec`` in unrolled vectors of
    ``lanes``."""
    st.unroll(rows)
    vo, vi = st.split(vec, factor=lanes)
    st.unroll(vo)
    st.vectorize(vi)


def _accumulate_block(cs, rows, vec, lanes: int) -> None:
    """The register block ``cs`` (a convolution's local buffer computed at its block's
    loop, ``rows`` and ``vec`` its block axes): the reduction outermost (the input
    channel, then the kernel taps, unrolled where 8 or fewer), ``rows`` unrolled inside
    it and ``vec`` in unrolled vectors of ``lanes``, the multiply-adds contracted."""
    reds = cs.op.reduce_axis
    cs.reorder(*reds, rows, vec)
    _unrolled_vectors(cs, rows, vec, lanes)
    for r in reds[1:]:
        if _cint(r.dom.extent) <= 8:
            cs.unroll(r)
    cs.pragma(reds[0], "fp_contract")


def _phases_of_the_row(s: Schedule, CL, lanes: int, threads: int) -> None:
    """The data of a strided 1-d convolution (``X[n, c, x*s + k*d]``, ``s`` of 2 or
    more: wav2vec2's feature extractor) copied once, at the root, de-interleaved by
    phase (``cache_read(blocks=[(2, s)])`` stored ``[n, c, s, ceil(W/s)]``): the
    register block's row loads, a gather of every ``s``-th element each or (``s`` up to
    4 on x86) two or more loads and a shuffle, the same ones again for every block of
    output channels, become contiguous loads ``copy[n, c, k*d % s, x + k*d // s]``.
    Interleaved with PyTorch, 1 thread, a loaded 2-core Xeon, ms: wav2vec2's first
    layer (1 -> 512 channels, kernel 10, stride 5, 16000 samples) 0.609 with the row
    gathered, 0.346 copied (PyTorch 0.468); its second (512 -> 512, kernel 3, stride 2,
    3200 samples) 41.6 with the wide loads, 33.6 copied (PyTorch 31.5)."""
    op = s[CL].op
    sx = op.attrs["conv"][0][0]
    X = _data_of(op)
    W = _cint(X.shape[2])
    if sx < 2 or W is None:
        return
    if X in s and _is_injective(X.op):
        s[X].compute_inline()   # (the padding: read through by the copy)
    # (a row that the stride does not divide: the copy's last block is rounded up)
    copy = s.cache_read(X, "global", [CL.op], blocks=[(2, sx)],
                        pad=None if W % sx == 0 else 0)
    cs = s[copy]
    n, c, xo, ph = cs.op.axis
    cs.storage_order(n, c, ph, xo)
    cs.reorder(n, c, ph, xo)
    _, xi = cs.split(xo, factor=lanes)
    cs.vectorize(xi)
    rows = cs.fuse(n, c, ph)
    if threads > 1:
        cs.parallel(rows)


def _data_of(op):
    """The data a convolution ``op`` reads (``X[n, c, ...]``, indexed by its batch
    axis; the weight is indexed by the output channel first)."""
    n = op.axis[0].var
    return next(ld.producer for ld in collect(op.body.source, lambda e: isinstance(
        e, ProducerLoad)) if ld.indices[0] is n)
