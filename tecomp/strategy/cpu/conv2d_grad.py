"""The weight gradients of the convolutions (``conv2d_*_wgrad``, from ``tc.gradient``), and
:func:`schedule_conv2d_into`, which :func:`tecomp.strategy.schedule_backward` uses for the
convolutions among gradients (forward or weight gradient)."""
from __future__ import annotations

from ...errors import ScheduleError
from ...ir import dtype as _dt
from ...schedule.schedule import Schedule
from ...te.tensor import ComputeOp, Tensor
from .._common import _cint, _has_tag, _largest_divisor_at_most
from .common import _vector_split
from .conv2d import _conv2d_nchw_into, _conv2d_nhwc_into
from ...target import CpuModel, cpu_model
from .microkernel import accumulate_block, copy_out


def _conv_wgrad_nchw_into(s: Schedule, outs, info: CpuModel):
    """A convolution's weight gradient ``W.grad[o, c, ky, kx] = sum over n, y, x of
    dY[n, o, y, x] * X[n, c, y*s + ky*d, x*s + kx*d]`` (``conv2d_nchw_wgrad``), NCHW: the
    reduction runs along the rows of both operands, so ``x`` is split by the lanes and
    ``rfactor``-ed (``W.grad.rf[o, c, ky, kx, lane]``).  Per kernel row ``ky``, an
    ``OB x CB x KW`` block of lane vectors stays in registers over the whole reduction:
    each step loads ``OB`` adjoint vectors and ``CB x KW`` input vectors (the ``KW`` taps
    of a row are shifted loads) for ``OB*CB*KW`` FMAs, then the lanes are summed.

    When the rows are not a multiple of 16 (or the stride is above 1), ``tecomp.nn``
    gives this stage only large gradients (256 channels and more; the others go through
    NHWC, see ``nn.conv_grad._conv_weight_grad``), written over flat rows
    (``nn.conv_grad._flat_rows``: a reduction over ``(n, p)``, both operands copied to one row
    pitch first, here in parallel passes): whole 16-lane vectors, faster than the row
    form's 8-lane vectors.
    (measurements: benchmarks/DECISIONS.md, "NCHW weight gradient: whole vectors")"""
    gw = outs[0]
    op = gw.op
    O, C, KH, KW = (_cint(e) for e in gw.shape)
    x = op.reduce_axis[-1]   # (n, y, x), or (n, p) over flat rows (nn.conv_grad._flat_rows)
    OW = _cint(x.dom.extent)
    L = info.lanes
    if OW is not None and OW % L and OW % (L // 2) == 0:
        # (measurements: benchmarks/DECISIONS.md, "NCHW weight gradient: whole vectors")
        L //= 2   # whole vectors (a masked tail vector ran slower)
    for t in op.input_tensors:
        if isinstance(t.op, ComputeOp) and _has_tag(t.op, "conv2d_wgrad_rows"):
            _schedule_flat_rows(s, t, info)
    st = s[gw]
    _, xl = st.split(x, factor=L)
    rf = s.rfactor(gw, xl, factor_axis=4)
    st = s[gw]
    o, c, ky, kx = st.op.axis
    kw = KW if KW is not None and KW <= 5 else 1
    budget = max(1, (info.vregs - 4) // kw)   # accumulators per kernel row
    ob = _largest_divisor_at_most(O, 4) if O is not None else 4
    cb = _largest_divisor_at_most(C, max(1, budget // ob)) if C is not None else 1
    oo, oi = st.split(o, factor=ob)
    co, ci = st.split(c, factor=cb)
    kxo, kxi = st.split(kx, factor=kw)
    st.reorder(oo, co, ky, kxo, oi, ci, kxi)
    tile = st.fuse(oo, co)
    if info.threads > 1:
        st.parallel(tile)
    st.unroll(oi)
    st.unroll(ci)
    st.unroll(kxi)
    st.unroll(st.op.reduce_axis[0])
    rs = s[rf]
    rs.compute_at(st, kxo)
    fo, fc, fky, fkx, fl = rs.op.axis
    reds = rs.op.reduce_axis
    rs.reorder(fky, *reds, fo, fc, fkx, fl)
    rs.unroll(fo)
    rs.unroll(fc)
    rs.unroll(fkx)
    rs.vectorize(fl)
    rs.pragma(reds[-1], "fp_contract")


def _schedule_flat_rows(s: Schedule, t: Tensor, info: CpuModel):
    """A copy into flat rows of pitch ``E`` (``attrs["pitch"]``, see
    ``nn.conv_grad._flat_rows``): the flat axis split into rows of ``E`` (the row and column then
    index the source directly), the columns in vectors, the leading axes in parallel."""
    st = s[t]
    E = int(t.op.attrs["pitch"])
    axes = list(st.op.axis)
    _, col = st.split(axes[-1], factor=E)
    _vector_split(st, col, E, info.lanes)
    lead = axes[:-1]
    par = lead[0] if len(lead) == 1 else st.fuse(*lead)
    if info.threads > 1:
        st.parallel(par)


def _conv_wgrad_nhwc_into(s: Schedule, outs, info: CpuModel):
    """A convolution's weight gradient in NHWC (HWIO weights, ``conv2d_nhwc_wgrad``):
    ``W.grad[ky, kx, c, o] = sum over n, y, x of X[n, y*s + ky*d, x*s + kx*d, c] *
    dY[n, y, x, o]`` is a GEMM with rows ``(ky, kx, c)``, columns ``o`` and the pixels as
    its reduction.  The output rows ``y`` are split between the threads (``rfactor``:
    ``W.grad.rf[t, ky, kx, c, o]``, one partial gradient per thread, then summed); in
    each, per image row, every ``CB x OB`` block (input channels x output-channel
    vectors) is accumulated in registers along the row, each step broadcasting ``CB``
    inputs and loading ``OB/L`` adjoint vectors, so a row's inputs and adjoint stay in
    L1 while all the blocks use them (one thread: the same nest, no ``rfactor``).
    Faster than the same nest with the blocks as the parallel loop inside each row (a
    parallel region per row).
    (measurements: benchmarks/DECISIONS.md, "NHWC weight gradient: rows per thread")

    A gradient larger than L2 over operands that fit in it (256 channels and more at
    14x14 and below) is defined over panels of its operands and scheduled by
    :func:`_conv_wgrad_panels_into` instead: per image row, its blocks would be loaded
    and stored from L3 every few pixels."""
    gw = outs[0]
    if "nr" in gw.op.attrs:
        return _conv_wgrad_panels_into(s, gw, info)
    KH, KW, C, O = (_cint(e) for e in gw.shape)
    L = info.lanes
    nr = 2 * L if O is not None and O >= 2 * L else L
    nvec = max(1, nr // L)
    cb_max = max(1, min((info.vregs - nvec - 2) // nvec, 12))
    cb = _largest_divisor_at_most(C, cb_max) if C is not None else 4
    st = s[gw]
    rn, ry, rx = st.op.reduce_axis
    OH = _cint(ry.dom.extent)
    parts = max(1, min(info.threads, OH if OH is not None else info.threads))
    outer = []
    if parts > 1:
        yo, _ = st.split(ry, nparts=parts)
        rf = s.rfactor(gw, yo, factor_axis=0)
        # the sum of the partial gradients: a serial vector loop (a 64x64 3x3 gradient
        # is 147 KB per part)
        _vector_split(st, st.op.axis[-1], O, L)
        st = s[rf]
        t, ky, kx, c, o = st.op.axis
        rn, ry, rx = st.op.reduce_axis
        st.parallel(t)
        outer = [t]
    else:
        ky, kx, c, o = st.op.axis
    co, ci = st.split(c, factor=cb)
    oo, oi = st.split(o, factor=nr)
    st.reorder(*outer, rn, ry, ky, kx, co, oo, rx, ci, oi)
    st.unroll(ci)
    st.vectorize(oi)
    st.pragma(rx, "fp_contract")


def _conv_wgrad_panels_into(s: Schedule, gw: Tensor, info: CpuModel):
    """An NHWC weight gradient over panels (``tecomp.nn.conv_grad._wgrad_panels``: larger than
    L2, its operands in L2).  Each ``CB x NR`` block (input channels x output-channel
    vectors) is a task of the parallel loop and is accumulated over all the pixels in
    registers (``cache_write``), reading ``NR`` contiguous adjoint values and
    broadcasting ``CB`` contiguous inputs per pixel.  The output-channel panel is the
    outer part of the task index, so consecutive tasks share it (in L2).  A last panel
    narrower than ``NR`` is computed whole over its zeros; only its copy out is masked.

    Faster than the blocks accumulated in the gradient itself from the tensors in place
    (which replaced the rows nest above for these shapes, being faster than it).
    (measurements: benchmarks/DECISIONS.md, "NHWC weight gradient: panels")"""
    nr, cb = int(gw.op.attrs["nr"]), int(gw.op.attrs["cb"])
    O = _cint(gw.shape[3])
    L = info.lanes * 32 // _dt.bits(gw.dtype)   # elements per vector register
    cons = s.consumers(s[gw])
    if len(cons) == 1 and _has_tag(cons[0].op, "layout_transform") and \
            len(cons[0].op.axis) == 4 and not cons[0].relations:
        # the NCHW gradient (OIHW), this HWIO one transposed: each block is stored
        # straight from the registers to its place there (a vector of output channels
        # to as many rows), with no HWIO gradient in memory: faster than a transposing
        # pass (measurements: benchmarks/DECISIONS.md, "NHWC weight gradient: OIHW store")
        CC = gw
        s[gw].set_scope("local")
        st = cons[0]
        o, c, ky, kx = st.op.axis
    else:
        CC = s.cache_write(gw, "local")
        st = s[gw]
        ky, kx, c, o = st.op.axis
    co, ci = st.split(c, factor=cb)
    oo, oi = st.split(o, factor=nr)
    # consecutive tasks write neighbouring memory: in HWIO the next channel block, in
    # OIHW the next tap of the same channels (with the taps outer, each line of the
    # OIHW gradient was written in 9 passes over the whole panel, slower)
    # (measurements: benchmarks/DECISIONS.md, "NHWC weight gradient: tile order")
    tiles = (oo, co, ky, kx) if CC is gw else (oo, ky, kx, co)
    st.reorder(*tiles, ci, oi)
    tile = st.fuse(*tiles)
    if info.threads > 1:
        st.parallel(tile)
    copy_vectors = copy_out(st, ci, oi, nr, L)
    cs = s[CC]
    cs.compute_at(st, tile)
    cky, ckx, cc, cod = cs.op.axis
    # the last panel's block over its zeros (see the micro-kernel)
    edge = O % nr != 0
    accumulate_block(cs, cc, cod, cs.op.reduce_axis, mr=cb, nr=nr, lanes=L, lead=(cky, ckx),
                     pad_cols=cod if edge else None)
    if edge:
        for ax in (tile, copy_vectors):
            if ax is not None:
                st.pragma(ax, "no_partition")
    for t in gw.op.input_tensors:
        if isinstance(t.op, ComputeOp) and _has_tag(t.op, "conv2d_wgrad_panels"):
            ps = s[t]
            b, n = ps.op.axis[:2]
            task = ps.fuse(b, n)
            if info.threads > 1:
                ps.parallel(task)
            _vector_split(ps, ps.op.axis[-1], _cint(t.shape[-1]), L)


def schedule_conv2d_into(s: Schedule, conv: Tensor, target: str = "llvm") -> None:
    """Schedule the ``conv2d_nchw``/``conv2d_nhwc`` stage ``conv`` (and its padding), or
    a convolution's weight gradient (``conv2d_*_wgrad``, from ``tc.gradient``), of an
    existing schedule ``s``, with ``conv`` as its own output (no epilogue): what
    :func:`tecomp.strategy.schedule_backward` uses for the convolutions among gradients."""
    into = None
    for tag in conv.op.tag.split(","):
        into = into or _CONV_INTO.get(tag)
    if into is None:
        raise ScheduleError(f"schedule_conv2d_into: {conv.name} is not a conv2d_nchw or "
                            "conv2d_nhwc stage, nor the weight gradient of one")
    into(s, [conv], cpu_model(target))


_CONV_INTO = {"conv2d_nchw": _conv2d_nchw_into, "conv2d_nhwc": _conv2d_nhwc_into,
              "conv2d_nchw_wgrad": _conv_wgrad_nchw_into,
              "conv2d_nhwc_wgrad": _conv_wgrad_nhwc_into}


CONV_TAGS = frozenset(_CONV_INTO)   # the stages schedule_conv2d_into takes
