"""Winograd convolutions (:mod:`tecomp.nn.winograd`, ``algorithm="winograd"`` of
``tecomp.nn.conv2d_*``) on the CPU, and the rule that picks them (:func:`winograd_tile`).

The stages, each a parallel loop of its own:

* the weight transform ``<name>.wt`` ``[a, a, g, c, k]``: per (group, input channel), the
  output channels in vectors, the ``a x a`` points unrolled (the transform's selects fold
  to one sum per point, the partial sums shared);
* the input transform ``<name>.vt`` ``[a, a, p, C]``: per tile, the channels in vectors
  (NHWC: contiguous loads; NCHW: one channel at a time), the points unrolled; the
  padding is read through selects (inlined), not copied;
* the GEMM ``<name>.gemm`` ``[a, a, p, g, k]`` per point and group: the micro-kernel of
  :mod:`.microkernel` (``MR`` tiles x ``NR`` output channels in registers, the input
  channels as the reduction), parallel over (point, group, block of tiles);
* the output transform ``<name>`` per tile: the ``m x m`` outputs unrolled, the output
  channels in vectors (NHWC) or one output channel at a time (NCHW).
"""
from __future__ import annotations

from ...schedule.schedule import Schedule, create_schedule
from ...ir import dtype as _dt
from .._common import _cint, _outs, _walk
from .common import _auto_rest, _op_tags
from .microkernel import accumulate_block, copy_out
from ...target import CpuModel, cpu_model


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
    # the padding: read through selects in the input transform
    for t in V.op.input_tensors:
        if "pad" in t.name.rsplit(".", 1)[-1] and not t.op.reduce_axis and \
                hasattr(t.op, "body"):
            s[t].compute_inline()
    # the weight transform (when it is a stage of the DAG)
    if "winograd_weight" in _op_tags(U.op):
        su = s[U]
        xi, nu, g, c, k = su.op.axis
        ko, ki = _vec(su, k, kg, L)
        su.reorder(g, c, *([ko] if ko is not None else []), xi, nu, ki)
        _unfold(su, xi, nu)
        _par(su, [g, c], info)
    # per (image, group) where a group's blocks fit in L2 (a grouped convolution: each
    # group's GEMM is small, its transforms as much work, and three passes over memory
    # cost more than the products saved); three passes otherwise
    N = _cint(Y.shape[0])
    per = P // N
    block = 2 * al * al * per * max(C // G, kg) * (_dt.bits(V.dtype) // 8)
    fused = G > 1 and block <= info.l2_bytes // 2
    sy = s[Y]
    if nchw:
        n, o, y, x = sy.op.axis
    else:
        n, y, x, o = sy.op.axis
    yo, yi = sy.split(y, factor=m)
    xo, xi_ = sy.split(x, factor=m)
    if fused:
        og, ok = sy.split(o, factor=kg)
        if nchw:
            sy.reorder(n, og, ok, yo, xo, yi, xi_)
        else:
            oo, oi = _vec(sy, ok, kg, L)
            sy.reorder(n, og, yo, xo, *([oo] if oo is not None else []), yi, xi_, oi)
        at = _par(sy, [n, og], info)
    elif nchw:
        sy.reorder(n, o, yo, xo, yi, xi_)
        at = _par(sy, [n, o], info)
    else:
        oo, oi = _vec(sy, o, G * kg, L)
        sy.reorder(n, yo, xo, *([oo] if oo is not None else []), yi, xi_, oi)
        at = _par(sy, [n, yo], info)
    _unfold(sy, yi, xi_)
    # the input transform: per tile, channels in vectors (NHWC), the points unrolled
    sv = s[V]
    xi, nu, p, c = sv.op.axis
    if nchw:
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
    rows = per if fused else P
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


#: the fewest input and output channels (per group) for which ``algorithm="auto"``
#: considers Winograd
WINOGRAD_MIN_CHANNELS = 32

#: bytes a core moves per cycle through its caches, for the transforms' passes over
#: memory (the ``V`` and ``M`` arrays are written and read once each)
_BYTES_PER_CYCLE = 32


def winograd_tile(nchw: bool, N: int, C: int, O: int, groups: int, out_hw,
                  target="llvm") -> int:
    """``algorithm="auto"``'s choice for a 3x3 stride-1 convolution (``N`` images, ``C``
    input and ``O`` output channels, ``out_hw`` outputs): the Winograd tile ``m`` (4 or
    2), or 0 for the direct convolution.

    Per tile size, the rule weighs the products Winograd saves (``9 m^2`` per output tile
    and channel pair for the direct sum against ``a^2``, at the FMA rate of ``lanes`` x
    2 units per cycle) against what it adds: the transforms' passes over memory (``V``
    and ``M``, ``a^2`` values per tile and channel, written and read; the transformed
    weights, ``a^2`` per channel pair, written and read at every call) at
    ``_BYTES_PER_CYCLE``, and the weight transform's arithmetic; it picks the tile whose
    saving is largest past 3x that cost.  On Zen 5 (benchmarks/history/2026-11-30.md) it
    keeps batch 1's 256x14 on F(2x2) and 512x7 direct (F(4x4) ran 0.80x and 0.09x the
    direct template there, the weight transform of 37 MB per call at 512x7), and takes
    F(4x4) elsewhere on ResNet's layers (1.1-3x).  Measured exceptions: grouped
    convolutions (ResNeXt's 16 channels per group: 0.75-0.97x the direct template even
    with the stages fused per group) and NCHW (its transforms run a channel at a time:
    0.34-0.93x) stay direct."""
    if groups != 1 or nchw or min(C, O) < WINOGRAD_MIN_CHANNELS:
        return 0
    info = cpu_model(target)
    fma_per_cycle = 2 * info.lanes
    direct = 9 * N * out_hw[0] * out_hw[1] * C * O
    best, best_net = 0, 0.0
    for m in (4, 2):
        al = m + 2
        tiles = N * (-(-out_hw[0] // m)) * (-(-out_hw[1] // m))
        saved = (direct - al * al * tiles * C * O) / fma_per_cycle
        moved = (4 * al * al * tiles * (C + O) + 2 * al * al * C * O) * 4 / _BYTES_PER_CYCLE
        weights = al * al * 6 * C * O / fma_per_cycle
        net = saved - 3 * (moved + weights)
        if net > best_net:
            best, best_net = m, net
    return best
