"""ATen's neural-network operators as ``tecomp.nn`` computes (the rules of
:mod:`tecomp.dynamo.lowering` for matmuls, convolution, pooling, softmax, the norms,
embedding and attention), so that ``tc.auto_schedule`` gives each its template."""
from __future__ import annotations

import operator
from typing import Dict, Optional, Tuple

import torch

from .. import nn as _nn
from .. import te as _te
from ..autodiff import gradient as _gradient
from ..errors import BoundsError, InternalError, TecompError
from ..ir.expr import Const
from ..strategy.cpu.conv2d import _conv_for_generic_rules, conv2d_nchw_params
from ..strategy.cpu.conv2d_tasks import PREPACKED_WEIGHT
from ..strategy.rules import NO_INLINE, Knobs
from ..target import cpu_model
from .lowering import VIEWS, _float_only, _shape, bound_args, rule, same
from .prepack import Pack, _blocked, _pack  # noqa: F401  (Pack: the type weight_packs returns)

aten = torch.ops.aten

#: operators lowered through ``tc.gradient``: a region with one is scheduled by
#: :func:`tecomp.strategy.schedule_backward` (the gradients' templates)
GRADIENT_OPS = {aten.convolution_backward.default, aten.avg_pool2d_backward.default}


def _users_only_first(node, vals):
    """A reason unless every user of the multi-output ``node`` reads output 0 only."""
    for u in node.users:
        if u.target is not operator.getitem or u.args[1] != 0:
            return "an output other than the first is used (indices, statistics)"
    return None


# -- matrix products ------------------------------------------------------------------
def _matmul2d(lw, node, a, b, name):
    """``a @ b`` for 2-d tecomp tensors; ``nn.dense`` when ``b`` is a transposed matrix of
    the region (a linear layer's weight), so the GEMM reads it as it lies."""
    src = lw.transposed.get(id(b))
    if src is not None:
        return _nn.dense(a, src, name=name)
    return _nn.matmul(a, b, name=name)


@rule(aten.mm.default, check=_float_only, anchor="op")
def _mm(lw, node):
    return _matmul2d(lw, node, lw.arg(node.args[0]), lw.arg(node.args[1]), lw.name(node))


@rule(aten.addmm.default, check=_float_only, anchor="op")
def _addmm(lw, node):
    bias, a, b = (lw.arg(x) for x in node.args[:3])
    beta = node.kwargs.get("beta", 1)
    alpha = node.kwargs.get("alpha", 1)
    p = _matmul2d(lw, node, a, b, lw.name(node) + "_mm")
    shape = _shape(p)
    dt = p.dtype
    bs = _shape(bias)

    def body(i, j):
        bi = bias[tuple(([] if len(bs) < 2 else [0 if same(bs[0], 1) else i]) +
                        ([0 if same(bs[-1], 1) else j] if bs else []))]
        v = p[i, j]
        if alpha != 1:
            v = v * _te.const(alpha, dt)
        if beta == 0:
            return v
        return v + (bi if beta == 1 else bi * _te.const(beta, dt))

    return _te.compute(shape, body, name=lw.name(node))


@rule(aten.bmm.default, check=_float_only, anchor="op")
def _bmm(lw, node):
    return _nn.batch_matmul(lw.arg(node.args[0]), lw.arg(node.args[1]), name=lw.name(node))


# -- convolution and pooling ----------------------------------------------------------
def _conv_kind(x, w, transposed, groups):
    """Why a convolution of ``x`` and ``w`` cannot be lowered (None where it can)."""
    if x.dim() != 4 or w.dim() != 4:
        return "not a 2-d convolution"
    if transposed:
        return "a transposed convolution"
    if groups != 1:
        return "a grouped convolution"
    if not x.dtype.is_floating_point:
        return "an integer convolution"
    return None


def _conv_check(node, vals):
    return _conv_kind(vals[node.args[0]], vals[node.args[1]], node.args[6], node.args[8])


#: the output planes (pixels, least and most) of the 1x1 convolutions written as GEMMs
GEMM_1X1_PLANES = (14 * 14, 28 * 28)

#: the planes (least and most) outside :data:`GEMM_1X1_PLANES` where a 1x1 convolution is
#: a GEMM too when its channels favour it: a smaller plane where it has more output
#: channels than input channels (ResNet-50's 512->2048 at 7x7, and its 1024->2048 stride-2
#: downsample onto 7x7, with :data:`GEMM_1X1_STRIDED`), a larger one where it has at most
#: as many, stride 1 (256->64, 256->128, 64->64 at 56x56).  On those layers at batch 8 the
#: GEMM took 0.80-0.87 of the template's time on one thread (0.80-0.95 on two); on the
#: others (64->256 at 56x56, 2048->512 at 7x7) 1.11-1.18 (Zen 5, under load:
#: benchmarks/history/2026-11-30.md, "h12-resnet").  None: only GEMM_1X1_PLANES
GEMM_1X1_BY_CHANNELS: Optional[Tuple[int, int]] = (7 * 7, 56 * 56)

#: whether a strided 1x1 convolution (a ResNet downsample) is written as a GEMM too,
#: over a subsampled copy of its input (see :func:`_conv_1x1_as_gemm`)
GEMM_1X1_STRIDED = True

#: the least batch from which a GEMM whose plane is not a whole number of vectors
#: (``P % lanes`` pixels left over: 4 at 14x14, 1 at 7x7 with 16 float32 lanes) leaves
#: those last pixels of every image to a GEMM of their own, ``W @ [C, N * (P % lanes)]``
#: (the stages ``<name>.tail_pixels``, a copy, and ``<name>.tail_gemm``), rather than to
#: a narrow register block per image that costs as much as a whole one.  The output then
#: reads two products, so its batch norm and ReLU are a pass of their own.  On
#: ResNet-50's 1x1 layers at 14x14 and 7x7, batch 8, the layer took 0.79-1.01 of the
#: time (Zen 5, under load: benchmarks/history/2026-11-30.md, "h13-gemm1x1"); at batch 1
#: there is no block to save.  None: never
GEMM_1X1_FOLD_TAIL: Optional[int] = 8


def _gemm_1x1_plane(xs, ws, stride, padding, dtype):
    """``(OH, OW)`` where a convolution of data ``xs`` and weight ``ws`` (shapes) is one
    :func:`_conv_1x1_as_gemm` writes as a GEMM, else None."""
    N, C, H, W = xs
    K, _, R, S = ws
    if None in (N, C, H, W, K) or (R, S) != (1, 1) or any(p != 0 for p in padding) or \
            (any(t != 1 for t in stride) and not GEMM_1X1_STRIDED) or dtype != "float32":
        return None
    OH, OW = (H - 1) // stride[0] + 1, (W - 1) // stride[1] + 1
    lo, hi = GEMM_1X1_PLANES
    if lo <= OH * OW <= hi:
        return OH, OW
    wide = GEMM_1X1_BY_CHANNELS
    if wide is not None and ((wide[0] <= OH * OW < lo and K > C) or (
            hi < OH * OW <= wide[1] and C >= K and (stride[0], stride[1]) == (1, 1))):
        return OH, OW
    return None


def _conv_1x1_as_gemm(x, w, stride, padding, name, packed=None):
    """A 1x1 float32 convolution without padding, whose output plane has
    :data:`GEMM_1X1_PLANES` pixels (or :data:`GEMM_1X1_BY_CHANNELS` with the channels
    that favour it), as the GEMM it is: ``W[k, c] @ X[n, c, pixels]`` for
    each image (``batch_matmul`` of the weights broadcast over the batch, the image
    plane flattened), so that the GEMM template schedules it; else None.  On ResNet-50's
    1x1 layers at 28x28 and 14x14 (with the batch norm and ReLU as epilogue) the GEMM
    took 0.79-0.89 of the convolution template's time at batch 8 and 0.89-1.0 at batch
    1; at 7x7 and at 56x56 (batch 8) more on some layers, less on others (one thread,
    Zen 5: benchmarks/history/2026-11-30.md).

    A strided one (ResNet's downsample, stride 2; with :data:`GEMM_1X1_STRIDED`) first
    copies the pixels it reads into a compact plane of its own (the stage
    ``<name>.subsample``, ``X[n, c, i*S, j*T]``, kept in memory: tagged
    ``rules.NO_INLINE``), and the GEMM reads that plane as a stride-1 one: the GEMM's
    panels read with a stride of 2 (the gather inlined into them) ran 1.27x slower than
    the copy and the GEMM, and the convolution template 1.43x; the subsample inlined
    into the flattened plane (a gather per element, by division) 1.24x
    (benchmarks/history/2026-11-30.md, "downsample 1x1 512->1024 stride 2").

    A plane of ``P`` pixels that is not a whole number of vectors (14x14, 7x7; from a
    batch of :data:`GEMM_1X1_FOLD_TAIL`) is a ``batch_matmul`` over each image's first
    ``P - P % lanes`` pixels and one ``matmul`` (``<name>.tail_gemm``) over the last
    ``P % lanes`` of every image, copied side by side (``<name>.tail_pixels``,
    ``[C, N * (P % lanes)]``); the output reads each pixel from one of the two.

    ``packed``: the weights as ``[1, K, C]`` already (:data:`tecomp.dynamo.prepack.PACKS` ``"gemm_1x1"``),
    read in place; else the stage ``<name>.weights`` reads them from ``w``."""
    dims = [tuple(e.value if isinstance(e, Const) else None for e in t.shape) for t in (x, w)]
    plane = _gemm_1x1_plane(*dims, stride, padding, x.dtype if x.dtype == w.dtype else None)
    if plane is None:
        return None
    (N, C, _, _), (K, _, _, _) = dims
    OH, OW = plane
    sh, sw = stride
    if (sh, sw) != (1, 1):
        x = _te.compute((N, C, OH, OW), lambda n, c, i, j: x[n, c, i * sh, j * sw],
                        name=name + ".subsample", tag=NO_INLINE)
    wk = packed if packed is not None else \
        _te.compute((1, K, C), lambda _, k, c: w[k, c, 0, 0], name=name + ".weights")
    P = OH * OW
    fold = GEMM_1X1_FOLD_TAIL is not None and N >= GEMM_1X1_FOLD_TAIL
    R = P % cpu_model().lanes if fold else 0
    R = 0 if R == P else R
    # the plane's whole vectors per image (all of it where R is 0), then its last R
    # pixels of every image as one GEMM of N*R columns (see GEMM_1X1_FOLD_TAIL)
    Pm = P - R
    flat = _te.compute((N, C, Pm), lambda n, c, p: x[n, c, p // OW, p % OW],
                       name=name + ".pixels")
    g = _nn.batch_matmul(wk, flat, name=name + ".gemm")
    if not R:
        return _te.compute((N, K, OH, OW), lambda n, k, i, j: g[n, k, i * OW + j], name=name)
    tail = _te.compute((C, N * R), lambda c, q: x[q // R, c, (Pm + q % R) // OW,
                                                  (Pm + q % R) % OW],
                       name=name + ".tail_pixels", tag=NO_INLINE)
    wt = _te.compute((K, C), lambda k, c: wk[0, k, c], name=name + ".tail_weights")
    g2 = _nn.matmul(wt, tail, name=name + ".tail_gemm")

    def read(n, k, i, j):
        p = i * OW + j
        return _te.if_then_else(p < Pm, g[n, k, _te.minimum(p, Pm - 1)],
                                g2[k, n * R + _te.maximum(p - Pm, 0)])
    return _te.compute((N, K, OH, OW), read, name=name)


def _conv_pack(node, vals) -> Optional[str]:
    """The pack of the weight of the convolution ``node`` (see :func:`weight_packs`):
    ``"gemm_1x1"`` for a 1x1 convolution written as a GEMM, ``"oihw_blocked<OB>"`` where
    the NCHW template, given packed weights, runs its vectors across the output channels
    (it then reads them in place; else it copies them across the output channels at
    every call), else None."""
    x, w = vals[node.args[0]], vals[node.args[1]]
    if x.dtype != torch.float32 or w.dtype != torch.float32 or node.args[6] or \
            node.args[8] != 1:
        return None
    stride, padding, dilation = (list(a) for a in node.args[3:6])
    xs, ws = tuple(int(e) for e in x.shape), tuple(int(e) for e in w.shape)
    if _gemm_1x1_plane(xs, ws, stride, padding, "float32") is not None:
        return "gemm_1x1"
    info = cpu_model()
    X = _te.placeholder(xs, "float32", name="X")
    P = _te.placeholder((1,) + ws[1:] + (ws[0],), "float32", name="P")
    view = _blocked(ws[0]).view(P, ws, "W")
    conv = _nn.conv2d_nchw(X, view, stride=stride, padding=padding, dilation=dilation)
    if _conv_for_generic_rules(conv.op, Knobs(), info):
        return None
    p = conv2d_nchw_params(conv, info)
    if not p.by_channels or ws[0] % p.ob:
        return None
    return f"oihw_blocked{p.ob}"


def weight_packs(region, vals) -> tuple:
    """Per input of ``region``: the name of the :class:`Pack` its kernel reads it in, or
    None (as it is).  Only the weights of convolutions that read them alone in the region
    (the backend packs those of an inference graph, which are the same tensors call
    after call: :mod:`tecomp.dynamo.prepack` keeps each packed copy while its weight is
    unchanged)."""
    members = set(region.nodes)
    out = []
    for n in region.inputs:
        readers = [u for u in n.users if u in members]
        conv = readers[0] if len(readers) == 1 else None
        name = None
        if n.op == "placeholder" and conv is not None and \
                conv.target is aten.convolution.default and conv.args[1] is n and \
                not any(a is n for a in conv.args[:1] + conv.args[2:3]):
            try:
                name = _conv_pack(conv, vals)
            except TecompError:
                name = None
        out.append(name)
    return tuple(out)


@rule(aten.convolution.default, check=_conv_check, anchor="op")
def _conv(lw, node):
    x, w, b = (lw.arg(a) for a in node.args[:3])
    stride, padding, dilation = node.args[3:6]
    name = lw.name(node) + ("_conv" if b is not None else "")
    pack, packed = lw.packs.get(node.args[1], (None, None))
    y = _conv_1x1_as_gemm(x, w, list(stride), list(padding), name,
                          packed if pack is not None and pack.name == "gemm_1x1" else None)
    if y is None:
        if pack is not None and pack.name.startswith("oihw_blocked"):
            # the pack's view, tagged: the template reads the packed weights in place
            w = pack.view(packed, _shape(w), name + ".w")
        y = _nn.conv2d_nchw(x, w, stride=list(stride), padding=list(padding),
                            dilation=list(dilation), name=name)
    if b is None:
        return y
    return _nn.bias_add(y, b, axis=1, name=lw.name(node))


def _maxpool_check(node, vals):
    x = vals[node.args[0]]
    dil = node.args[4] if len(node.args) > 4 else 1
    ceil = node.args[5] if len(node.args) > 5 else False
    if x.dim() != 4:
        return "not 2-d pooling of a batch"
    if ceil:
        return "ceil_mode"
    if any(d != 1 for d in (dil if isinstance(dil, (list, tuple)) else [dil])):
        return "dilation"
    return _float_only(node, vals)


def _window(lw, node):
    """A pooling node's input, kernel, stride (the kernel where empty) and padding."""
    k = list(node.args[1])
    s = list(node.args[2]) if len(node.args) > 2 and node.args[2] else k
    p = list(node.args[3]) if len(node.args) > 3 else [0, 0]
    return lw.arg(node.args[0]), k, s, p


@rule(aten.max_pool2d_with_indices.default, check=_maxpool_check, anchor="op")
def _maxpool(lw, node):
    """The pooled values (the pooling template) or, where the indices are read (the
    backward of training reads them), both from one window scan (PyTorch's
    indices: ``y * W + x`` in the input's image, the first maximum, the last NaN)."""
    x, k, s, p = _window(lw, node)
    if _users_only_first(node, lw.vals) is None:
        return (_nn.max_pool2d(x, k, stride=s, padding=p, name=lw.name(node)),)
    return _max_with_indices(x, k, s, p, _shape(lw.out(node)), lw.name(node))


#: (index, value) pairs scanned in order: the later one wins where it is larger or NaN,
#: or where nothing was taken yet (a window of -inf has an index)
_ARGMAX = _te.comm_reducer(
    lambda a, b: (_te.if_then_else(_te.any(b[1] > a[1], _te.isnan(b[1]), a[0] < 0), b[0],
                                   a[0]),
                  _te.if_then_else(_te.any(b[1] > a[1], _te.isnan(b[1]), a[0] < 0), b[1],
                                   a[1])),
    lambda t0, t1: (_te.const(-1, t0), _te.min_value(t1)), name="pool_argmax")


def _max_with_indices(x, k, s, p, out_shape, name):
    _, _, H, W = _shape(x)
    ry, rx = _te.reduce_axis((0, k[0]), name="ky"), _te.reduce_axis((0, k[1]), name="kx")

    def f(n, c, i, j):
        iy, ix = i * s[0] - p[0] + ry, j * s[1] - p[1] + rx
        inside = _te.all(iy >= 0, iy < H, ix >= 0, ix < W)
        sy = _te.if_then_else(inside, iy, 0)
        sx = _te.if_then_else(inside, ix, 0)
        # in int64 before the product: an image of more than 2**31 elements
        pos = _te.cast(iy, "int64") * _te.const(W, "int64") + _te.cast(ix, "int64")
        return _ARGMAX((pos, x[n, c, sy, sx]), axis=[ry, rx], where=inside)

    idx, val = _te.compute(out_shape, f, name=name)
    return (val, idx)


def _avgpool_check(node, vals):
    x = vals[node.args[0]]
    ceil = node.args[4] if len(node.args) > 4 else False
    div = node.args[6] if len(node.args) > 6 else None
    if x.dim() != 4:
        return "not 2-d pooling of a batch"
    if ceil:
        return "ceil_mode"
    if div is not None:
        return "divisor_override"
    return _float_only(node, vals)


@rule(aten.avg_pool2d.default, check=_avgpool_check, anchor="op")
def _avgpool(lw, node):
    x, k, s, p = _window(lw, node)
    cip = node.args[5] if len(node.args) > 5 else True
    return _nn.avg_pool2d(x, k, stride=s, padding=p, count_include_pad=cip, name=lw.name(node))


def _adaptive_check(node, vals):
    x, out = vals[node.args[0]], vals[node]
    if x.dim() != 4:
        return "not 2-d pooling of a batch"
    if x.shape[2] % out.shape[2] or x.shape[3] % out.shape[3]:
        return "windows of unequal sizes"
    return _float_only(node, vals)


@rule(aten._adaptive_avg_pool2d.default, check=_adaptive_check, anchor="op")
def _adaptive(lw, node):
    x = lw.arg(node.args[0])
    xs, os_ = _shape(x), _shape(lw.out(node))
    kh, kw = xs[2] // os_[2], xs[3] // os_[3]
    if kh == 1 and kw == 1:
        return x
    return _nn.avg_pool2d(x, [kh, kw], stride=[kh, kw], name=lw.name(node))


# -- softmax and the norms ------------------------------------------------------------
def _softmax_check(node, vals):
    x = vals[node.args[0]]
    if node.args[1] % max(x.dim(), 1) != max(x.dim(), 1) - 1:
        return "not over the last dimension"
    if node.args[2]:
        return "half_to_float"
    return _float_only(node, vals)


@rule(aten._softmax.default, aten._log_softmax.default, check=_softmax_check, anchor="op")
def _softmax(lw, node):
    f = _nn.softmax if node.target is aten._softmax.default else _nn.log_softmax
    return f(lw.arg(node.args[0]), name=lw.name(node))


def _layer_norm_check(node, vals):
    if len(node.args[1]) != 1:
        return "normalised over several dimensions"
    if len(node.args) < 4 or node.args[2] is None or node.args[3] is None:
        return "no weight or bias"
    return _float_only(node, vals)


@rule(aten.native_layer_norm.default, check=_layer_norm_check, anchor="op")
def _layer_norm(lw, node):
    x, w, b = lw.arg(node.args[0]), lw.arg(node.args[2]), lw.arg(node.args[3])
    eps = float(node.args[4])
    name = lw.name(node)
    y = _nn.layer_norm(x, w, b, eps=eps, name=name)
    # the statistics (read by the backward): [..., 1]
    xs = _shape(x)
    D = xs[-1]
    dt = x.dtype
    k = _te.reduce_axis((0, D), name="k")
    mean = _te.compute(xs[:-1] + (1,), lambda *i: _te.sum(x[i[:-1] + (k,)] *
                                                           _te.const(1.0 / D, dt), axis=k),
                       name=name + "_mean")
    k2 = _te.reduce_axis((0, D), name="k")

    def var(*i):
        d = x[i[:-1] + (k2,)] - mean[i]
        return _te.sum(d * d * _te.const(1.0 / D, dt), axis=k2)
    v = _te.compute(xs[:-1] + (1,), var, name=name + "_var")
    rstd = _te.compute(v.shape, lambda *i: _te.rsqrt(v[i] + _te.const(eps, dt)),
                       name=name + "_rstd")
    return (y, mean, rstd)


def _bn_args(node, vals):
    """Why a batch norm node's input, weight and bias cannot be lowered (or None)."""
    if node.args[1] is None or node.args[2] is None:
        return "no weight or bias"
    if vals[node.args[0]].dim() < 2:
        return "fewer than 2 dimensions"
    return _float_only(node, vals)


def _bn_check(node, vals):
    return _bn_args(node, vals) or _users_only_first(node, vals)


@rule(aten._native_batch_norm_legit_no_training.default, check=_bn_check)
def _bn_inference(lw, node):
    x, w, b, rm, rv = (lw.arg(a) for a in node.args[:5])
    eps = float(node.args[6])
    name = lw.name(node)
    if len(x.shape) == 4:
        return (_nn.batch_norm(x, w, b, rm, rv, training=False, eps=eps, name=name),)
    dt = x.dtype
    scale = _te.compute(w.shape, lambda c: w[c] * _te.rsqrt(rv[c] + _te.const(eps, dt)),
                        name=name + "_scale")
    return (_te.compute(x.shape, lambda *i: (x[i] - rm[i[1]]) * scale[i[1]] + b[i[1]],
                        name=name),)


def _embedding_check(node, vals):
    w = vals[node.args[0]]
    if w.dim() != 2:
        return "a weight that is not 2-d"
    if not w.dtype.is_floating_point:
        return "an integer weight"
    return None


@rule(aten.embedding.default, check=_embedding_check)
def _embedding(lw, node):
    return _nn.embedding(lw.arg(node.args[0]), lw.arg(node.args[1]), name=lw.name(node))


def index_guards(region, vals):
    """The run-time checks of the ids that ``region``'s embeddings read: tc.nn.embedding
    gives an id outside ``[0, V)`` a row of zeros, where eager PyTorch raises an
    IndexError.  Returns ``(guards, inner)``: ``guards`` a list of ``(input position,
    views, V, node)`` -- the ids are the region's input at that position seen through
    the chain of ``views`` (FX view nodes of the region, replayed on the tensor) -- and
    ``inner`` the embeddings whose ids the region computes (no tensor to check before
    the kernel runs: they must run eagerly)."""
    guards, inner = [], []
    for n in region.nodes:
        if n.target is not aten.embedding.default:
            continue
        chain, ids = [], n.args[1]
        while ids not in region.inputs and ids in region.nodes and ids.target in VIEWS:
            chain.append(ids)
            ids = ids.args[0]
        if ids in region.inputs:
            guards.append((region.inputs.index(ids), chain[::-1],
                           int(vals[n.args[0]].shape[0]), n))
        else:
            inner.append(n)
    return guards, inner


def check_ids(ins, guards, vals) -> None:
    """Raise BoundsError where an embedding's ids (see :func:`index_guards`) are outside
    its table, as eager PyTorch raises IndexError."""
    for pos, chain, rows, node in guards:
        t = ins[pos]
        for v in chain:
            a, kw = bound_args(v, vals)
            t = v.target(t, *a[1:], **kw)
        if t.numel() == 0:
            continue
        lo, hi = torch.aminmax(t)
        if lo < 0 or hi >= rows:
            bad = int(lo) if lo < 0 else int(hi)
            raise BoundsError(
                f"torch.compile(backend='tecomp'): {node.name} (aten.embedding of a table of "
                f"{rows} rows) is given id {bad}, outside [0, {rows}), in its ids of shape "
                f"{list(t.shape)} (eager PyTorch raises 'index out of range in self'): pass "
                f"ids below the table's num_embeddings, or make the table larger")


def _sdpa_check(node, vals):
    q = vals[node.args[0]]
    if q.dim() != 4:
        return "not [batch, heads, length, dim]"
    kw = node.kwargs
    if kw.get("dropout_p", 0.0) or (len(node.args) > 3 and node.args[3]):
        return "dropout"
    if kw.get("is_causal", False) or (len(node.args) > 4 and node.args[4]):
        return "is_causal"
    return _users_only_first(node, vals) or _float_only(node, vals)


@rule(aten._scaled_dot_product_flash_attention_for_cpu.default, check=_sdpa_check, anchor="op")
def _sdpa(lw, node):
    q, k, v = (lw.arg(a) for a in node.args[:3])
    mask = node.kwargs.get("attn_mask")
    scale = node.kwargs.get("scale")
    m = lw.arg(mask) if mask is not None else None
    return (_nn.scaled_dot_product_attention(q, k, v, mask=m, scale=scale,
                                             name=lw.name(node)),)


# -- training -------------------------------------------------------------------------
def _bn_train_check(node, vals):
    return _bn_args(node, vals) or (None if node.args[5] else "not training")


@rule(aten._native_batch_norm_legit_functional.default, check=_bn_train_check, anchor="op")
def _bn_train(lw, node):
    """Batch statistics: (output, mean, invstd, new running mean, new running var), the
    running variance updated with the unbiased batch variance (as PyTorch)."""
    x, w, b, rm, rv = (lw.arg(a) for a in node.args[:5])
    momentum, eps = float(node.args[6]), float(node.args[7])
    name = lw.name(node)
    xs = _shape(x)
    dt = x.dtype
    C = xs[1]
    m = 1
    for d, s in enumerate(xs):
        if d != 1:
            m *= s
    rest = [(0, s) for d, s in enumerate(xs) if d != 1]

    def at(ax, c):
        return tuple(ax[:1]) + (c,) + tuple(ax[1:])

    r1 = [_te.reduce_axis(r, name=f"r{k}") for k, r in enumerate(rest)]
    mean = _te.compute((C,), lambda c: _te.sum(x[at(r1, c)] * _te.const(1.0 / m, dt), axis=r1),
                       name=name + "_mean")
    r2 = [_te.reduce_axis(r, name=f"r{k}") for k, r in enumerate(rest)]

    def var(c):
        d = x[at(r2, c)] - mean[c]
        return _te.sum(d * d * _te.const(1.0 / m, dt), axis=r2)
    v = _te.compute((C,), var, name=name + "_var")
    invstd = _te.compute((C,), lambda c: _te.rsqrt(v[c] + _te.const(eps, dt)),
                         name=name + "_invstd")
    out = _te.compute(xs, lambda *i: (x[i] - mean[i[1]]) * invstd[i[1]] * w[i[1]] + b[i[1]],
                      name=name)
    k = _te.const(momentum, rm.dtype)
    keep = _te.const(1.0 - momentum, rm.dtype)
    new_rm = _te.compute((C,), lambda c: rm[c] * keep + _te.cast(mean[c], rm.dtype) * k,
                         name=name + "_running_mean")
    unbias = _te.const(m / max(m - 1, 1), rv.dtype)
    new_rv = _te.compute((C,), lambda c: rv[c] * keep + _te.cast(v[c], rv.dtype) * unbias * k,
                         name=name + "_running_var")
    return (out, mean, invstd, new_rm, new_rv)


def _conv_backward_check(node, vals):
    return _conv_kind(vals[node.args[1]], vals[node.args[2]], node.args[7], node.args[9])


@rule(aten.convolution_backward.default, check=_conv_backward_check, anchor="op")
def _conv_backward(lw, node):
    """(data gradient, weight gradient, bias gradient), each None where ``output_mask``
    does not ask for it: ``tc.gradient`` of ``nn.conv2d_nchw`` (its registered
    derivatives, which the convolution templates schedule) with the incoming gradient as
    the head, and the bias gradient a sum over batch and image."""
    g, x, w = (lw.arg(a) for a in node.args[:3])
    stride, padding, dilation = node.args[4:7]
    mask = node.args[10]
    name = lw.name(node)
    y = _nn.conv2d_nchw(x, w, stride=list(stride), padding=list(padding),
                        dilation=list(dilation), name=name + "_fwd")
    wanted = [t for t, on in zip((x, w), mask[:2]) if on]
    grads = _gradient(y, wanted, head=g) if wanted else []
    if not isinstance(grads, list):
        grads = [grads]
    out, k = [], 0
    for on in mask[:2]:
        out.append(grads[k] if on else None)
        k += bool(on)
    if mask[2]:
        gs = _shape(g)
        r = [_te.reduce_axis((0, gs[0]), name="n"), _te.reduce_axis((0, gs[2]), name="y"),
             _te.reduce_axis((0, gs[3]), name="x")]
        out.append(_te.compute((gs[1],), lambda c: _te.sum(g[r[0], c, r[1], r[2]], axis=r),
                               name=name + "_bias"))
    else:
        out.append(None)
    return tuple(out)


def _maxpool_backward_check(node, vals):
    x = vals[node.args[1]]
    dil = node.args[5]
    if x.dim() != 4:
        return "not 2-d pooling of a batch"
    if node.args[6]:
        return "ceil_mode"
    if any(d != 1 for d in dil):
        return "dilation"
    return _float_only(node, vals)


@rule(aten.max_pool2d_with_indices_backward.default, check=_maxpool_backward_check,
      anchor="op")
def _maxpool_backward(lw, node):
    """Each input element gets the incoming gradient of every window whose maximum it was
    (the forward's indices, flat in the image): a sum over the window offsets."""
    g, x = lw.arg(node.args[0]), lw.arg(node.args[1])
    idx = lw.arg(node.args[7])
    kh, kw = node.args[2]
    sh, sw = node.args[3] if node.args[3] else node.args[2]
    ph, pw = node.args[4]
    _, _, H, W = _shape(x)
    _, _, OH, OW = _shape(g)
    dt = g.dtype
    zero = _te.const(0.0, dt)
    if (sh, sw) == (kh, kw) and (ph, pw) == (0, 0):
        # windows that tile the image: each element is in at most one, no sum
        def tiled(n, c, i, j):
            qy, qx = _te.floordiv(i, sh), _te.floordiv(j, sw)
            inside = _te.all(qy < OH, qx < OW)
            sy, sx = _te.if_then_else(inside, qy, 0), _te.if_then_else(inside, qx, 0)
            hit = _te.all(inside, idx[n, c, sy, sx] == _te.cast(i * W + j, idx.dtype))
            return _te.if_then_else(hit, g[n, c, sy, sx], zero)
        return _te.compute(_shape(x), tiled, name=lw.name(node))
    ry, rx = _te.reduce_axis((0, kh), name="ky"), _te.reduce_axis((0, kw), name="kx")

    def f(n, c, i, j):
        oy, ox = i + ph - ry, j + pw - rx
        qy, qx = _te.floordiv(oy, sh), _te.floordiv(ox, sw)
        ok = _te.all(oy >= 0, ox >= 0, _te.floormod(oy, sh) == 0, _te.floormod(ox, sw) == 0,
                     qy < OH, qx < OW)
        sy = _te.if_then_else(ok, qy, 0)
        sx = _te.if_then_else(ok, qx, 0)
        hit = _te.all(ok, idx[n, c, sy, sx] == _te.cast(i * W + j, idx.dtype))
        return _te.sum(_te.if_then_else(hit, g[n, c, sy, sx], zero), axis=[ry, rx])

    return _te.compute(_shape(x), f, name=lw.name(node))


def _avgpool_backward_check(node, vals):
    x = vals[node.args[1]]
    if x.dim() != 4:
        return "not 2-d pooling of a batch"
    if node.args[5]:
        return "ceil_mode"
    if node.args[7] is not None:
        return "divisor_override"
    return _float_only(node, vals)


@rule(aten.avg_pool2d_backward.default, check=_avgpool_backward_check, anchor="op")
def _avgpool_backward(lw, node):
    """``tc.gradient`` of ``nn.avg_pool2d`` with the incoming gradient as the head."""
    g, x = lw.arg(node.args[0]), lw.arg(node.args[1])
    k = list(node.args[2])
    s = list(node.args[3]) if node.args[3] else k
    name = lw.name(node)
    y = _nn.avg_pool2d(x, k, stride=s, padding=list(node.args[4]),
                       count_include_pad=node.args[6], name=name + "_fwd")
    return _gradient(y, x, head=g)
