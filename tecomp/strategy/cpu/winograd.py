"""Winograd convolutions (:mod:`tecomp.nn.winograd`, ``algorithm="winograd"`` of
``tecomp.nn.conv2d_*``) on the CPU, and the rule that picks them (:func:`winograd_tile`).

The stages, each a parallel loop of its own:

* the weight transform ``<name>.wt`` ``[a, a, g, c, k]``: per (group, input channel), the
  output channels in vectors, the ``a x a`` points unrolled (the transform's selects fold
  to one sum per point, the partial sums shared);
* the input transform ``<name>.vt`` ``[a, a, p, C]``: per tile, the channels in vectors
  (NHWC: contiguous loads; NCHW: gathers across the channel planes, the stores
  contiguous), the points unrolled; the padding is read through selects (inlined), not
  copied;
* the GEMM ``<name>.gemm`` ``[a, a, p, g, k]`` per point and group: the micro-kernel of
  :mod:`.microkernel` (``MR`` tiles x ``NR`` output channels in registers, the input
  channels as the reduction), parallel over (point, group, block of tiles);
* the output transform ``<name>`` per tile: the ``m x m`` outputs unrolled, the output
  channels in vectors (the loads of ``M`` contiguous; NCHW's stores scattered across
  the output's channel planes).

A grouped convolution whose stages fit in L2 per group runs them fused, per (image,
group) task; where its transformed weights outgrow L2 too (ResNeXt's 1024x7x7 at F(4x4):
4.7 MB), a task is a group over every image, its weight transform first
(:data:`GROUP_TASKS`).  A fused NCHW one whose groups are whole vectors runs channels
last (:data:`NCHW_CHANNELS_LAST`): each task copies its image's group planes into a
``[row, column, channel]`` buffer (``x86.transpose_f32_<L>x<W>``: a row of ``L`` planes
into ``W`` channel vectors), its transforms then run on vectors of channels as NHWC's,
and the output transform writes a channels-last buffer that the output copies into the
planes (``x86.transpose_f32_<OW>x<L>``).  Zen 4, ResNeXt's 1024x7x7 at batch 8, F(4x4),
one thread, CPU time, under load (load average 8-10): 3.49 ms with the transforms one
channel at a time, 1.66 ms channels last, the direct template 2.09 ms, NHWC F(4x4) 1.41.

NCHW's transforms on vectors against one channel at a time (``NCHW_VECTORS``), F(4x4),
one thread, CPU time, Zen 5 under load: ResNet's 64x56 1.26 -> 0.65 ms (batch 1), 37.1
-> 8.8 ms (batch 8); 128x28 0.77 -> 0.54, 18.3 -> 5.3; 256x14 2.59 -> 1.82, 13.7 ->
7.0 (benchmarks/history/2026-11-30.md).  Grouped NCHW convolutions fused per group that
cannot run channels last, and channel counts past one vector that are not whole vectors,
keep a channel at a time.
"""
from __future__ import annotations

from ...schedule.schedule import Schedule, create_schedule
from ...ir import dtype as _dt
from .._common import _cint, _outs, _walk
from .common import _auto_rest, _op_tags
from .microkernel import accumulate_block, copy_out
from ...target import CpuModel, cpu_model
from ...te.tensor import PlaceholderOp
from ...te.tensor_intrin import transpose_intrin


#: NCHW's transforms on vectors of channels (gathers across the input's channel planes,
#: stores across the output's); False: one channel at a time (kept to measure against)
NCHW_VECTORS = True

#: whether a grouped Winograd convolution whose transformed weights outgrow L2 runs a task
#: per group over every image, transforming the group's weights first (they stay in L2
#: for the images), where its tasks were (image, group) pairs reading every group's
#: weights back from memory for each image.  Zen 4, ResNeXt's 1024x7x7 in NHWC at batch
#: 8, F(4x4) (4.7 MB of transformed weights), one thread, CPU time, under load (load
#: average 9): 1.97 -> 1.52 ms and 2.00 -> 1.59 ms, the direct template 2.08 / 2.09 ms.
#: Off: (image, group) tasks, as before (``benchmarks/depthwise_conv.py --ab GROUP_TASKS``)
GROUP_TASKS = True


#: whether a grouped NCHW Winograd convolution fused per group (:func:`_channels_last`)
#: copies each task's input planes into a channels-last buffer and computes its output
#: into one, stored to the channel planes through register transposes, so that its
#: transforms run on vectors of channels as NHWC's do; off, they run one channel at a
#: time on the planes, as before (``benchmarks/depthwise_conv.py --ab
#: NCHW_CHANNELS_LAST``)
NCHW_CHANNELS_LAST = True


def _channels_last(Y, data, I: int, kg: int, info: CpuModel):
    """The register transposes of a fused grouped NCHW Winograd convolution of ``data``
    into ``Y`` read and written channels last (:data:`NCHW_CHANNELS_LAST`): ``(out,
    in)``, ``x86.transpose_f32_<OW>x<L>`` (``L`` channels of an output row into their
    planes) and ``x86.transpose_f32_<L>x<W>`` (an input row of ``L`` planes into ``W``
    pixels' vectors), or None where there are none: float32, a group's ``I`` input and
    ``kg`` output channels whole vectors, and rows of 2 to ``L`` pixels."""
    L = info.lanes
    OW, W = _cint(Y.shape[3]), _cint(data.shape[3])
    if not (NCHW_CHANNELS_LAST and Y.dtype == data.dtype == "float32"
            and None not in (OW, W) and 2 <= min(OW, W) and max(OW, W) <= L
            and I % L == 0 and kg % L == 0):
        return None
    out = transpose_intrin(info.target, L, "float32", OW)
    inp = transpose_intrin(info.target, L, "float32", cols=W if W < L else 0)
    return None if out is None or inp is None else (out, inp)


def _nchw_vectors(channels: int, L: int) -> bool:
    """Whether an NCHW transform runs on vectors of ``channels``: one vector or whole
    ones (a tail's predicated lanes through the unrolled points made builds about 3x
    longer: 76 s against 27 s for 20 channels, under load)."""
    return NCHW_VECTORS and (channels <= L or channels % L == 0)


def _stage_of(outs, tag: str):
    found = [op for op in _walk(outs) if tag in _op_tags(op)]
    return found[0].output(0) if found else None


def _par(st, axes, info: CpuModel):
    ax = st.fuse(*axes) if len(axes) > 1 else axes[0]
    if info.threads > 1:
        st.parallel(ax)
    return ax


def _vec(st, axis, extent: int, L: int):
    """``axis`` (of ``extent``) in vectors of ``L`` (all of it where it is shorter):
    ``(outer, inner)``, the inner vectorized; outer None where it is one vector."""
    if extent <= L:
        st.vectorize(axis)
        return None, axis
    o, i = st.split(axis, factor=L)
    st.vectorize(i)
    return o, i


def _unfold(st, *axes):
    """Unroll ``axes`` in the IR itself (``unroll_explicit``): each copy's selects over
    the transform's points fold to its own sum before code generation (unrolled by the
    code generator, every copy carried all the points' sums to LLVM: builds 3-5x
    longer)."""
    for ax in axes:
        st.unroll(ax)
        st.pragma(ax, "unroll_explicit")


def winograd_into(s: Schedule, outs, info: CpuModel) -> None:
    """Schedule the Winograd stages of ``outs`` in ``s`` (the module's docstring)."""
    L = info.lanes
    Y = next(op for op in _walk(outs)
             if {"winograd_conv2d_nchw", "winograd_conv2d_nhwc"} & _op_tags(op)).output(0)
    nchw = "winograd_conv2d_nchw" in _op_tags(Y.op)
    m = Y.op.attrs["winograd"]
    M = _stage_of([Y], "winograd_gemm")
    V = _stage_of([Y], "winograd_vt")
    U = M.op.input_tensors[1]
    al, _, P, C = (_cint(e) for e in V.shape)
    G, kg = _cint(M.shape[3]), _cint(M.shape[4])
    N = _cint(Y.shape[0])     # (None: a symbolic batch, which conv2d_winograd takes)
    oh, ow = (_cint(e) for e in (Y.shape[2:4] if nchw else Y.shape[1:3]))
    per = (-(-oh // m)) * (-(-ow // m))      # the tiles of one image
    block = 2 * al * al * per * max(C // G, kg) * (_dt.bits(V.dtype) // 8)
    fused = G > 1 and block <= info.l2_bytes // 2
    # a fused NCHW convolution's input copied channels last ([n, row, column, channel])
    # and its output transform computed into a channels-last buffer that the output
    # copies through register transposes (NCHW_CHANNELS_LAST)
    src = V.op.input_tensors[0]
    # (the data itself, unpadded: the padding stays selects in the input transform)
    data = src.op.input_tensors[0] if V.op.attrs.get("winograd_padded") else src
    tr = _channels_last(Y, data, C // G, kg, info) if nchw and fused else None
    if tr is not None:
        tr, tin = tr
        xp = s.cache_read(data, "global", [src if data is not src else V])
        a = s[xp].op.axis
        s[xp].storage_order(a[0], a[2], a[3], a[1])
        yc = s.cache_write(Y, "global")
        a = s[yc].op.axis
        s[yc].storage_order(a[0], a[2], a[3], a[1])
    # the padding: read through selects in the input transform (or its copy)
    if "pad" in src.name.rsplit(".", 1)[-1] and not src.op.reduce_axis and \
            hasattr(src.op, "body"):
        s[src].compute_inline()
    # the weight transform (when it is a stage of the DAG)
    su = s[U] if "winograd_weight" in _op_tags(U.op) else None
    if su is not None:
        xi, nu, g, c, k = su.op.axis
        ko, ki = _vec(su, k, kg, L)
        su.reorder(g, c, *([ko] if ko is not None else []), xi, nu, ki)
        _unfold(su, xi, nu)
    # per (image, group) where a group's blocks fit in L2 (a grouped convolution: each
    # group's GEMM is small, its transforms as much work, and three passes over memory
    # cost more than the products saved); three passes otherwise
    sy = s[Y]
    if nchw:
        n, o, y, x = sy.op.axis
    else:
        n, y, x, o = sy.op.axis
    if tr is None:
        yo, yi = sy.split(y, factor=m)
        xo, xi_ = sy.split(x, factor=m)
    # tasks of a group over every image, each transforming its group's weights first,
    # where the transformed weights outgrow L2 (read back from memory by every image's
    # task otherwise) and a group's fit in a quarter of it, with 4 tasks per thread
    # (GROUP_TASKS)
    wbytes = al * al * (C // G) * kg * (_dt.bits(U.dtype) // 8)
    per_group = (fused and su is not None and GROUP_TASKS and N is not None and N > 1
                 and G >= 4 * max(1, info.threads) and G * wbytes > info.l2_bytes
                 and wbytes <= info.l2_bytes // 4)
    if fused:
        og, ok = sy.split(o, factor=kg)
        first = [og, n] if per_group else [n, og]
        if tr is not None:
            # per output row, L channels x the row's pixels transposed into the planes
            ov, ol = sy.split(ok, factor=L)
            sy.reorder(*first, ov, y, ol, x)
            sy.tensorize(ol, tr)
        elif nchw:
            sy.reorder(*first, ok, yo, xo, yi, xi_)
        else:
            oo, oi = _vec(sy, ok, kg, L)
            sy.reorder(*first, yo, xo, *([oo] if oo is not None else []), yi, xi_, oi)
        if per_group:
            if info.threads > 1:
                sy.parallel(og)
            su.compute_at(sy, og)
            at = n
        else:
            at = _par(sy, [n, og], info)
    elif nchw and _nchw_vectors(G * kg, L):
        # the output channels in vectors: contiguous loads of M, each of the m x m
        # outputs a store across L channel planes
        oo, oi = _vec(sy, o, G * kg, L)
        sy.reorder(n, *([oo] if oo is not None else []), yo, xo, yi, xi_, oi)
        at = _par(sy, [n] + ([oo] if oo is not None else []), info)
    elif nchw:
        sy.reorder(n, o, yo, xo, yi, xi_)
        at = _par(sy, [n, o], info)
    else:
        oo, oi = _vec(sy, o, G * kg, L)
        sy.reorder(n, yo, xo, *([oo] if oo is not None else []), yi, xi_, oi)
        at = _par(sy, [n, yo], info)
    if su is not None and not per_group:
        _par(su, [su.op.axis[2], su.op.axis[3]], info)
    if tr is not None:
        # the output transform as NHWC's: the channels in vectors, the tile unrolled
        sc = s[yc]
        n, o, y, x = sc.op.axis
        yo, yi = sc.split(y, factor=m)
        xo, xi_ = sc.split(x, factor=m)
        oo, oi = _vec(sc, o, kg, L)
        sc.reorder(n, yo, xo, *([oo] if oo is not None else []), yi, xi_, oi)
        _unfold(sc, yi, xi_)
        sc.compute_at(sy, at)
        xs = s[xp]
        n, c, y, x = xs.op.axis
        co, ci = xs.split(c, factor=L)
        xs.reorder(n, co, y, x, ci)
        if isinstance(data.op, PlaceholderOp):
            xs.tensorize(x, tin)
        else:
            # (a computed input may be inlined into the copy by the rules: no longer a
            # plain copy, it runs on channel vectors, each lane a plane apart)
            xs.vectorize(ci)
        xs.compute_at(sy, at)
    else:
        _unfold(sy, yi, xi_)
    # the input transform: per tile, channels in vectors (NHWC), the points unrolled
    sv = s[V]
    xi, nu, p, c = sv.op.axis
    if nchw and tr is None and (fused or not _nchw_vectors(C, L)):
        sv.reorder(p, c, xi, nu)
    else:
        co, ci = _vec(sv, c, C // G if fused else C, L)
        sv.reorder(p, *([co] if co is not None else []), xi, nu, ci)
    _unfold(sv, xi, nu)
    if fused:
        sv.compute_at(sy, at)
    else:
        _par(sv, [p], info)
    # the GEMM per point and group
    nr = kg if kg <= L else (2 * L if kg % (2 * L) == 0 else L)
    rows = per if fused or P is None else P
    mr = max(1, min(rows, (info.vregs - 4) // max(1, nr // L), 12))
    CC = s.cache_write(M, "local")
    sm = s[M]
    xi, nu, p, g, k = sm.op.axis
    ko, kr = sm.split(k, factor=nr)
    po, pi = sm.split(p, factor=mr)
    sm.reorder(xi, nu, g, ko, po, pi, kr)
    copy_out(sm, pi, kr, nr, L)
    if fused:
        sm.compute_at(sy, at)
    else:
        _par(sm, [xi, nu, g], info)
    cs = s[CC]
    cs.compute_at(sm, po)
    _, _, ci, _, ck = cs.op.axis
    accumulate_block(cs, ci, ck, cs.op.reduce_axis, mr=mr, nr=nr, lanes=L,
                     lead=(*cs.op.axis[:2], cs.op.axis[3]),
                     pragmas=(("unroll_count", 4), ("fp_contract", None)))


def schedule_winograd(outs, target="llvm") -> Schedule:
    """A CPU schedule of a Winograd convolution (``tecomp.nn.conv2d_*(...,
    algorithm="winograd")`` or :func:`tecomp.nn.conv2d_winograd`); stages after it (an
    epilogue) get the auto-scheduler's rules."""
    outs = _outs(outs)
    info = cpu_model(target)
    s = create_schedule([t.op for t in outs])
    winograd_into(s, outs, info)
    return _auto_rest(s, outs, info)
