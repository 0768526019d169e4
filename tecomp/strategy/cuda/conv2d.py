"""Convolution (``schedule_conv2d_nchw``, ``schedule_conv2d_nhwc``).

Direct convolution, tiled like the GEMM: a block computes ``KB`` output channels x a
``TH x TW`` patch of one image; each thread ``RK`` channels x ``RY x RX`` pixels in
registers.  The reduction over input channels runs in ``CT``-channel steps: per
step the block copies the padded input patch (``CT x (TH*s + halo) x (TW*s +
halo)``; the padding is computed during the copy, it never exists in global memory)
and the weights (``KB x CT x KH x KW``) to shared memory; the kernel window loops
are unrolled."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, NamedTuple, Optional, Tuple, Union

from ...errors import ScheduleError
from ...ir.expr import Add, Const, Mul, ProducerLoad, Var
from ...ir.functor import collect
from ...schedule.schedule import Schedule, create_schedule
from ...target import MAX_STATIC_SHARED_BYTES, MAX_THREADS_PER_BLOCK
from ...te.tensor import ComputeOp, Tensor
from .._common import _ceil, _cint, _has_tag, _inline_injective, _outs, _walk
from .common import _bind, _check_target, _cooperative_copy, _pow2_at_least
from .gemm import _check_same_index_reads, _epilogue_of


class ConvShape(NamedTuple):
    """What a convolution's tiling is chosen from: output channels, output rows and
    columns, input channels, window rows and columns (None where symbolic)."""

    K: Optional[int]
    OH: Optional[int]
    OW: Optional[int]
    C: Optional[int]
    KH: Optional[int]
    KW: Optional[int]


@dataclass(frozen=True)
class ConvConfig:
    """The tiling of a direct convolution: a block of ``threads_k x threads_y x
    threads_x`` threads computes ``block_k`` output channels x a ``block_y x block_x``
    patch of one image, each thread ``regs_k x regs_y x regs_x`` outputs in registers;
    the reduction advances ``c_tile`` input channels at a time through shared memory;
    ``unroll_c`` unrolls those ``c_tile`` channels too (the window is always unrolled)."""

    threads_k: int
    threads_y: int
    threads_x: int
    regs_k: int
    regs_y: int
    regs_x: int
    c_tile: int
    unroll_c: bool = False

    @property
    def block_k(self) -> int:
        return self.threads_k * self.regs_k

    @property
    def block_y(self) -> int:
        return self.threads_y * self.regs_y

    @property
    def block_x(self) -> int:
        return self.threads_x * self.regs_x

    @property
    def threads(self) -> int:
        return self.threads_k * self.threads_y * self.threads_x


#: a tiling, or a function of the default tiling and the shape that returns one
ConfigArg = Union[None, ConvConfig, Callable[[ConvConfig, ConvShape], ConvConfig]]


def _shared_bytes(dtype_bytes: int, c_tile: int, ph: int, pw: int, block_k: int, kh: int,
                  kw: int) -> int:
    """The bytes of one channel step's shared tiles: the ``ph x pw`` input patch and the
    ``block_k`` channels' weights, ``c_tile`` channels of each."""
    return dtype_bytes * c_tile * (ph * pw + block_k * kh * kw)


def _spatial_tile(E: Optional[int]) -> Tuple[int, int]:
    """(threads, registers) along one output spatial axis: little padding waste first,
    then two pixels per thread, then a tile close to 8."""
    if E is None:
        return 4, 2
    best = None
    for t in range(1, 9):
        for r in (1, 2):
            tile = t * r
            if tile > 2 * E and tile > 1:
                continue
            waste = _ceil(E, tile) * tile / E - 1
            cost = waste + 0.05 * abs(math.log2(tile / 8)) + (0.05 if r == 1 and E > 1 else 0)
            if best is None or cost < best[0] - 1e-9:
                best = (cost, t, r)
    return best[1], best[2]


def conv_config(K: Optional[int], OH: Optional[int], OW: Optional[int], C: Optional[int],
                window: Tuple[int, int], in_patch: Callable, dtype_bytes: int = 4,
                channels_last: bool = False) -> ConvConfig:
    """The tiling of a convolution with ``K`` output channels, an ``OH x OW`` output,
    ``C`` input channels and a ``KH x KW`` ``window``; ``in_patch(th, tw)`` gives the
    input rows/columns an output patch of ``th x tw`` reads.

    Spatial: per axis, :func:`_spatial_tile`.  Channels: as many threads as keep the
    block at 256 threads or below, 8 channels per thread where the block's channels still
    fit in K, else 4 (fewer when K is small).  ``c_tile``: the largest of 16, 8, 4, 2, 1
    (at most 4 in NCHW, at most C) whose shared tiles fit in 24 KiB, its channels
    unrolled.  ``channels_last``: NHWC, where a copy's contiguous runs are ``c_tile``
    channels long (runs of 4 channels, 16 bytes, copied more slowly there).  (Measurements:
    benchmarks/DECISIONS.md, "CUDA convolution: channels unrolled, 8 per thread, 4 per
    NCHW step".)"""
    ty, ry = _spatial_tile(OH)
    tx, rx = _spatial_tile(OW)
    rk = 4 if K is None else max(1, min(4, K))
    cap = 1
    while cap * 2 * ty * tx <= 256:
        cap *= 2
    tk = cap if K is None else max(1, min(cap, _pow2_at_least(_ceil(K, rk))))
    if K is not None and rk == 4 and tk * 8 <= K:
        rk = 8
    kh, kw = window
    ph, pw = in_patch(ty * ry, tx * rx)
    ct = 1
    for c in (16, 8, 4, 2):
        if (C is not None and c > C) or (not channels_last and c > 4):
            continue
        if _shared_bytes(dtype_bytes, c, ph, pw, tk * rk, kh, kw) <= 24 * 1024:
            ct = c
            break
    return ConvConfig(tk, ty, tx, rk, ry, rx, ct, unroll_c=True)


# layout -> (output axis of (n, k, y, x), thread tag of (k, y, x), block tag of (n*k, y, x))
_CONV_LAYOUTS = {
    "conv2d_nchw": dict(out=(0, 1, 2, 3), threads=("threadIdx.z", "threadIdx.y", "threadIdx.x"),
                        weight_c=1, weight_k=0),
    "conv2d_nhwc": dict(out=(0, 3, 1, 2), threads=("threadIdx.x", "threadIdx.z", "threadIdx.y"),
                        weight_c=2, weight_k=3),
}


def _conv_parts(outs, tag):
    """(conv, pad or None, data, weight) of the ``tag`` convolution under ``outs``."""
    convs = [op for op in _walk(outs) if _has_tag(op, tag) and op.reduce_axis]
    if len(convs) != 1:
        raise ScheduleError(f"expected one {tag} stage under the outputs "
                            f"{', '.join(t.name for t in outs)}, found {len(convs)}")
    conv = convs[0]
    if len(conv.input_tensors) != 2:
        raise ScheduleError(f"{conv.name} reads {len(conv.input_tensors)} tensors; expected the "
                            "(padded) data and the weight")
    src, weight = conv.input_tensors
    pad = None
    if isinstance(src.op, ComputeOp):
        if not _has_tag(src.op, "pad"):
            raise ScheduleError(f"{conv.name} reads {src.name}, which is neither an input nor "
                                "its padding stage")
        pad, data = src, src.op.input_tensors[0]
    else:
        data = src
    return conv.output(0), pad, data, weight


def _conv_geometry(conv: Tensor, layout: str):
    """(stride, dilation) per spatial axis, read from the conv's input index ``y*s + ky*d``
    (they size the shared tiles in :func:`conv_config`; the bounds come from lowering)."""
    lay = _CONV_LAYOUTS[layout]
    src = conv.op.input_tensors[0]
    loads = [n for n in collect(conv.op.body.source, lambda n: isinstance(n, ProducerLoad))
             if n.producer is src]
    # the data index of the spatial axes: NCHW (n, c, y, x), NHWC (n, y, x, c)
    pos = (2, 3) if layout == "conv2d_nchw" else (1, 2)
    out_axes = [conv.op.axis[lay["out"][2]].var, conv.op.axis[lay["out"][3]].var]
    geo = []
    for p, ov in zip(pos, out_axes):
        e = loads[0].indices[p]
        coef = {}

        def walk(x, scale=1):
            if isinstance(x, Add):
                walk(x.a, scale)
                walk(x.b, scale)
            elif isinstance(x, Mul) and isinstance(x.b, Const):
                walk(x.a, scale * int(x.b.value))
            elif isinstance(x, Mul) and isinstance(x.a, Const):
                walk(x.b, scale * int(x.a.value))
            elif isinstance(x, Var):
                coef[x] = coef.get(x, 0) + scale

        walk(e)
        s = coef.get(ov, 1)
        d = max([v for k, v in coef.items() if k is not ov] or [1])
        geo.append((s, d))
    return geo


def _schedule_conv(outs, target: str, layout: str, config: ConfigArg) -> Schedule:
    _check_target(target)
    outs = _outs(outs)
    conv, pad, data, weight = _conv_parts(outs, layout)
    lay = _CONV_LAYOUTS[layout]
    s = create_schedule([t.op for t in outs])
    out = _epilogue_of(outs, conv) or conv
    keep = [conv.op] + ([pad.op] if pad is not None else [])
    _inline_injective(s, _walk(outs), keep=keep)
    if out is not conv:
        _check_same_index_reads(s, out, conv)

    oshape = [_cint(e) for e in conv.shape]
    K, OH, OW = (oshape[lay["out"][r]] for r in (1, 2, 3))
    wshape = [_cint(e) for e in weight.shape]
    C = wshape[lay["weight_c"]]
    sp_axes = (2, 3) if layout == "conv2d_nchw" else (0, 1)
    KH, KW = wshape[sp_axes[0]], wshape[sp_axes[1]]
    (sh, dh), (sw, dw) = _conv_geometry(conv, layout)
    dtype_bytes = 8 if conv.dtype == "float64" else 4
    cfg = config
    if cfg is None or callable(cfg):
        default = conv_config(
            K, OH, OW, C, (KH, KW),
            lambda th, tw: ((th - 1) * sh + (KH - 1) * dh + 1, (tw - 1) * sw + (KW - 1) * dw + 1),
            dtype_bytes, channels_last=layout == "conv2d_nhwc")
        cfg = default if cfg is None else cfg(default, ConvShape(K, OH, OW, C, KH, KW))
    if not isinstance(cfg, ConvConfig):
        raise ScheduleError(f"config must be a ConvConfig, got {cfg!r}")
    if cfg.threads > MAX_THREADS_PER_BLOCK:
        raise ScheduleError(
            f"{conv.name}: the tiling {cfg} has {cfg.threads} threads per block, more than "
            f"CUDA's {MAX_THREADS_PER_BLOCK}; use fewer threads_k x threads_y x threads_x")

    # the output: blocks over (image x channel block, row block, column block), threads
    # over (channels, rows, columns), a micro-tile per thread
    if out is conv:
        acc = s.cache_write(conv, "local")
    else:
        acc = conv
        s[acc].set_scope("local")
    st = s[out]
    ax = st.op.axis
    n, k, y, x = (ax[lay["out"][r]] for r in range(4))
    bk, ki = st.split(k, factor=cfg.block_k)
    tk, rk = st.split(ki, factor=cfg.regs_k)
    by, yi = st.split(y, factor=cfg.block_y)
    ty, ry = st.split(yi, factor=cfg.regs_y)
    bx, xi = st.split(x, factor=cfg.block_x)
    tx, rx = st.split(xi, factor=cfg.regs_x)
    if layout == "conv2d_nchw":
        st.reorder(n, bk, by, bx, tk, ty, tx, rk, ry, rx)
    else:  # channels innermost: consecutive threads on consecutive addresses
        st.reorder(n, bk, by, bx, ty, tx, tk, ry, rx, rk)
    nk = st.fuse(n, bk)
    _bind(st, nk, "blockIdx.z")
    _bind(st, by, "blockIdx.y")
    _bind(st, bx, "blockIdx.x")
    tags = dict(zip(("k", "y", "x"), lay["threads"]))
    _bind(st, tk, tags["k"])
    _bind(st, ty, tags["y"])
    _bind(st, tx, tags["x"])
    last_thread = tk if layout == "conv2d_nhwc" else tx
    for a, r in ((rk, cfg.regs_k), (ry, cfg.regs_y), (rx, cfg.regs_x)):
        if r > 1:
            st.unroll(a)

    # the micro-tile: input channels in steps of c_tile, the window unrolled
    sa = s[acc]
    sa.compute_at(st, last_thread)
    red = sa.op.reduce_axis  # NCHW (c, ky, kx), NHWC (ky, kx, c)
    rc, rky, rkx = (red[0], red[1], red[2]) if layout == "conv2d_nchw" else (red[2], red[0], red[1])
    rco, rci = sa.split(rc, factor=cfg.c_tile)
    oax = sa.op.axis
    micro = [oax[lay["out"][r]] for r in (1, 2, 3)]  # k, y, x
    if layout == "conv2d_nhwc":
        micro = [micro[1], micro[2], micro[0]]
    sa.reorder(rco, rci, rky, rkx, *micro)
    if cfg.unroll_c and cfg.c_tile > 1:
        sa.unroll(rci)
    if KH is not None and KW is not None and KH * KW <= 25:
        sa.unroll(rky)
        sa.unroll(rkx)
    for a, r in zip(micro, ((cfg.regs_y, cfg.regs_x, cfg.regs_k) if layout == "conv2d_nhwc"
                            else (cfg.regs_k, cfg.regs_y, cfg.regs_x))):
        if r > 1:
            sa.unroll(a)

    # shared tiles per channel step: the padded input patch (padding computed during the
    # copy) and the weights
    if pad is not None:
        ds = pad
        s[ds].set_scope("shared")
    else:
        ds = s.cache_read(data, "shared", [acc])
    ws = s.cache_read(weight, "shared", [acc])
    # threadIdx.x first (innermost: consecutive threads on consecutive elements)
    order = sorted(("k", "y", "x"), key=lambda r: tags[r])
    ext = {"k": cfg.threads_k, "y": cfg.threads_y, "x": cfg.threads_x}
    threads = [(tags[r], ext[r]) for r in order]
    ph = (cfg.block_y - 1) * sh + ((KH or 1) - 1) * dh + 1
    pw = (cfg.block_x - 1) * sw + ((KW or 1) - 1) * dw + 1
    shared = _shared_bytes(dtype_bytes, cfg.c_tile, ph, pw, cfg.block_k, KH or 1, KW or 1)
    if shared > MAX_STATIC_SHARED_BYTES:
        raise ScheduleError(
            f"{conv.name}: the tiling {cfg} needs {shared} bytes of shared memory per block, "
            f"more than the {MAX_STATIC_SHARED_BYTES} a kernel may declare statically; use a "
            "smaller c_tile or a smaller block (threads x registers)")
    for S, elems in ((ds, cfg.c_tile * ph * pw),
                     (ws, cfg.block_k * cfg.c_tile * (KH or 1) * (KW or 1))):
        s[S].compute_at(sa, rco)
        _cooperative_copy(s[S], threads, elems)
    return s


def schedule_conv2d_nchw(outs, target: str = "cuda",
                         config: ConfigArg = None) -> Schedule:
    """The CUDA schedule of ``tecomp.nn.conv2d_nchw`` (any stride, padding, dilation),
    with any elementwise epilogue (bias, activation): direct convolution, see the module
    docstring and :func:`conv_config`.  Threads: ``threadIdx.x`` along the output columns
    (contiguous in NCHW), ``threadIdx.y`` along rows, ``threadIdx.z`` along channels.
    ``config`` overrides the tiling :func:`conv_config` picks: a :class:`ConvConfig`, or a
    function ``config(default, shape)`` of that tiling and the :class:`ConvShape` that
    returns one (the auto-scheduler's knobs).  A tiling over CUDA's 1024 threads per
    block or 48 KiB of static shared memory is a ScheduleError."""
    return _schedule_conv(outs, target, "conv2d_nchw", config)


def schedule_conv2d_nhwc(outs, target: str = "cuda",
                         config: ConfigArg = None) -> Schedule:
    """The CUDA schedule of ``tecomp.nn.conv2d_nhwc`` (weights HWIO): as the NCHW one with
    ``threadIdx.x`` along the output channels, which are contiguous in NHWC (coalesced
    stores and weight loads).  ``config``: as in :func:`schedule_conv2d_nchw`."""
    return _schedule_conv(outs, target, "conv2d_nhwc", config)
