"""The gradients of the convolutions (:func:`~tecomp.nn.ops.conv2d_nchw`,
:func:`~tecomp.nn.ops.conv2d_nhwc`) that ``tc.gradient`` derives: the weight gradient in the
formulation its shape suits (NHWC, panels, flat rows) and the data gradient as
convolutions of the adjoint with the flipped weights, phase by phase for a stride.
Registered for the operators' tags when :mod:`tecomp.nn` loads.  Target-free: the same
compute definitions on every target (see the model below)."""
from __future__ import annotations

import math

from .. import te as _te
from ..autodiff.rules import register_tag_derivative as _register_tag_derivative
from ..ir import dtype as _dt
from ..ir.expr import Const
from ._common import _bytes, _largest_divisor_at_most
from ._common import _c, _int, _rounded
from .conv import _conv_compute, _depthwise_compute
from .transform import _padded

# The gradients below choose between reformulations of a convolution's gradient (NHWC,
# panels, flat rows) for a fixed vector model, never for the machine: ``tc.gradient``
# gives the same compute definitions on every target (AVX2 or AVX-512, this machine or
# another), and the schedules adapt them to the target.  The model is an AVX-512 core with
# 2 MiB of L2 (the machine these choices were measured on).
_GRAD_LANES = 16          # float32 lanes of a vector
_GRAD_VREGS = 32          # vector registers
_GRAD_L2_BYTES = 2 << 20  # L2 per core

#: an NCHW weight gradient of at most this many elements (with a row that is not a
#: multiple of 16, or any stride above 1) is computed in NHWC; larger ones over flat rows
_WGRAD_NHWC_MAX = 1 << 18


def _conv_weight_grad(op, src, weight, adjoint):
    """``weight``'s gradient of the convolution ``op`` (which reads ``src``: the data or
    its padding): ``sum over n, y, x`` of the adjoint times the window of ``src``, as a
    compute tagged ``conv2d_*_wgrad`` that the conv schedules know
    (:func:`~tecomp.strategy.cpu.schedule_conv2d_into`), summed in the dtype of ``op`` (its
    accumulation dtype) and rounded once to ``weight``'s by a stage ``<W>.grad`` when
    they differ (the sum is then ``<W>.grad.acc``)."""
    acc = op.output(0).dtype
    name = f"{weight.name}.grad"
    if weight.dtype == acc:
        return _conv_weight_grad_acc(op, src, weight, adjoint, name)
    g = _conv_weight_grad_acc(op, src, weight, adjoint, f"{name}.acc")
    return _rounded(g, weight.dtype, name, tag="injective")


def _conv_weight_grad_acc(op, src, weight, adjoint, name: str):
    """:func:`_conv_weight_grad` in the accumulation dtype, as the stage ``name``.

    NCHW: that schedule vectorizes the reduction along the rows of both operands, which
    wastes lanes when a row is not a multiple of 16 (56 columns: 8-lane vectors, or a
    masked tail) and gathers when the stride is above 1.  In those cases:

    * with a stride above 1, a gradient of at most ``_WGRAD_NHWC_MAX`` elements (64
      or 128 channels, 3x3), or one that the NHWC form reads from panels (256 channels
      and more at 14x14 and below: :func:`_wgrad_panels`), both operands are first
      transposed to NHWC and the gradient is the NHWC one (a GEMM over the pixels,
      vectorized over the output channels), transposed back: ``<W>.grad.hwio``
      (:func:`_nhwc_weight_grad`);
    * else (256 channels and more on larger images: the transposed gradient alone is
      2.4 MB) both operands are copied into flat rows of one pitch (:func:`_flat_rows`).

    Interleaved, 2 threads, batch 4, ms, flat rows against NHWC (PyTorch): 64 channels
    at 56x56 7.5 vs 7.2 (8.6), stride 2 3.3 vs 2.5 (2.7); 128 at 28x28 8.7 vs 7.2 (8.2);
    256 at 14x14 9.7 vs 11.4 (6.8), stride 2 6.1 vs 4.1 (3.4); 512 at 7x7 19.9 vs 22.4
    (18.0).  With the panels: 256 at 14x14 9.6 vs 6.9 (6.5); 512 at 7x7 19.7 vs 13.5
    (17.6)."""
    (sh, sw), _, (dh, dw) = op.attrs["conv2d"]
    nchw = "conv2d_nchw" in op.tag.split(",")
    attrs = {"conv2d": op.attrs["conv2d"]}
    acc = op.output(0).dtype
    if not nchw:
        return _nhwc_weight_grad(src, adjoint, weight.shape, op.attrs["conv2d"], name, acc)
    N, _, OH, OW = adjoint.shape
    if (sh, sw) != (1, 1) or _int(OW, "adjoint extent") % _GRAD_LANES:
        ext = [int(e.value) if isinstance(e, Const) else None for e in weight.shape]
        large = None not in ext and math.prod(ext) > _WGRAD_NHWC_MAX   # (symbolic: NHWC)
        O, C, KH, KW = weight.shape
        if (sh, sw) == (1, 1) and large and \
                _wgrad_panels(src, adjoint, (KH, KW, C, O)) is None:
            return _te.compute(weight.shape, _flat_rows(op, src, adjoint), name=name,
                               tag="conv2d_nchw_wgrad", attrs=attrs)
        xt = _te.compute((src.shape[0], src.shape[2], src.shape[3], src.shape[1]),
                         lambda n_, i, j, c: src[n_, c, i, j], name=f"{src.name}.nhwc",
                         tag="injective,layout_transform")
        at = _te.compute((N, OH, OW, O), lambda n_, i, j, o: adjoint[n_, o, i, j],
                         name=f"{adjoint.name}.nhwc", tag="injective,layout_transform")
        g = _nhwc_weight_grad(xt, at, (KH, KW, C, O), op.attrs["conv2d"], f"{name}.hwio", acc)
        return _te.compute(weight.shape, lambda o, c, ky, kx: g[ky, kx, c, o], name=name,
                           tag="injective,layout_transform")
    n = _te.reduce_axis(N, name="n")
    y = _te.reduce_axis(OH, name="y")
    x = _te.reduce_axis(OW, name="x")
    return _te.compute(weight.shape, lambda o, c, ky, kx: _te.sum(
        adjoint[n, o, y, x].astype(acc) *
        src[n, c, y * sh + ky * dh, x * sw + kx * dw].astype(acc), axis=[n, y, x]),
        name=name, tag="conv2d_nchw_wgrad", attrs=attrs)


def _nhwc_weight_grad(src, adjoint, shape, conf, name: str, acc: str):
    """The NHWC weight gradient ``[KH, KW, C, O]``: ``sum over n, y, x of src[n, y*sh +
    ky*dh, x*sw + kx*dw, c] * adjoint[n, y, x, o]`` (``conv2d_nhwc_wgrad``), summed in
    ``acc``.

    A gradient larger than L2 over operands that fit in it (256 channels and more at
    14x14 and below) reads them from panels (:func:`_wgrad_panels`): the schedule
    accumulates each block of the gradient over all the pixels, and the panels make
    those pixels one contiguous stream per operand."""
    (sh, sw), _, (dh, dw) = conf
    N, OH, OW, _ = adjoint.shape
    n = _te.reduce_axis(N, name="n")
    y = _te.reduce_axis(OH, name="y")
    x = _te.reduce_axis(OW, name="x")
    panels = _wgrad_panels(src, adjoint, shape)
    if panels is not None:
        nr, cb = panels
        O, C = shape[3], shape[2]
        ap = _te.compute(
            ((O + nr - 1) // nr, N, OH, OW, nr), lambda b, n_, i, j, oi: _te.if_then_else(
                b * nr + oi < O, adjoint[n_, i, j, b * nr + oi], _c(0, adjoint.dtype)),
            name=f"{adjoint.name}.panels", tag="conv2d_wgrad_panels")
        sp = _te.compute(
            (C // cb, N, src.shape[1], src.shape[2], cb),
            lambda b, n_, i, j, ci: src[n_, i, j, b * cb + ci],
            name=f"{src.name}.panels", tag="conv2d_wgrad_panels")
        return _te.compute(shape, lambda ky, kx, c, o: _te.sum(
            sp[c // cb, n, y * sh + ky * dh, x * sw + kx * dw, c % cb].astype(acc)
            * ap[o // nr, n, y, x, o % nr].astype(acc), axis=[n, y, x]),
            name=name, tag="conv2d_nhwc_wgrad", attrs={"conv2d": conf, "nr": nr, "cb": cb})
    return _te.compute(shape, lambda ky, kx, c, o: _te.sum(
        src[n, y * sh + ky * dh, x * sw + kx * dw, c].astype(acc) *
        adjoint[n, y, x, o].astype(acc), axis=[n, y, x]),
        name=name, tag="conv2d_nhwc_wgrad", attrs={"conv2d": conf})


def _wgrad_panels(src, adjoint, shape):
    """``(NR, CB)`` when the NHWC weight gradient ``shape`` (``[KH, KW, C, O]``) of
    ``src`` and ``adjoint`` should read them from panels, else None: when every extent is
    constant and the gradient is larger than L2 while both operands fit in it (the
    schedule then runs the gradient's blocks as its parallel loop, each over all the
    pixels).  The panels are ``adjoint.panels[O/NR, N, OH, OW, NR]`` (zero past ``O``)
    and ``src.panels[C/CB, N, H, W, CB]``: a block of ``CB`` input channels by ``NR``
    output channels then reads ``NR`` contiguous adjoint values and ``CB`` contiguous
    inputs per pixel, pixel after pixel.  ``NR``: three vectors (24 accumulators with
    ``CB`` = 8); ``CB``: the largest divisor of ``C`` that fits the registers."""
    sizes = [_bytes(t) for t in (src, adjoint)]
    ext = [int(e.value) if isinstance(e, Const) else None for e in shape]
    if None in sizes or None in ext or adjoint.dtype not in ("float32", "float64"):
        return None
    bits = _dt.bits(adjoint.dtype)
    grad = math.prod(ext) * bits // 8
    if grad <= _GRAD_L2_BYTES or max(sizes) > _GRAD_L2_BYTES:
        return None
    L = _GRAD_LANES * 32 // bits   # elements per vector register
    C, O = ext[2], ext[3]
    nvec = 3 if O >= 3 * L else max(1, -(-O // L))
    cb = _largest_divisor_at_most(C, max(1, min((_GRAD_VREGS - nvec - 2) // nvec, 12)))
    return nvec * L, cb


def _flat_rows(op, src, adjoint):
    """The body of a stride-1 NCHW weight gradient over flat rows (see
    :func:`_conv_weight_grad`):

    * ``<src>.rows[n, c, t]``: ``src`` (``Hp x Wp``) stored flat, ``t = i*Wp + j``, zero
      past the end;
    * ``<adjoint>.rows[n, o, p]``: the adjoint at the same pitch, ``p = y*Wp + x``, zero
      for ``x >= OW`` and past the last row (``p`` up to a multiple of 16);
    * the tap ``(ky, kx)`` reads ``<src>.rows`` at ``p + ky*dh*Wp + kx*dw``: the
      reduction over ``(n, p)`` runs in whole vectors along both operands.

    Both stages carry ``attrs["pitch"] = Wp`` for the schedule."""
    _, _, (dh, dw) = op.attrs["conv2d"]
    N, C, Hp, Wp = src.shape
    Hp, Wp = (_int(e, f"conv2d {op.name}: extent") for e in (Hp, Wp))
    _, O, OH, OW = adjoint.shape
    OH, OW = (_int(e, f"conv2d {op.name}: extent") for e in (OH, OW))
    KH, KW = (_int(e, f"conv2d {op.name}: extent") for e in op.input_tensors[1].shape[2:])
    P = -(-OH * Wp // 16) * 16
    T = P + (KH - 1) * dh * Wp + (KW - 1) * dw
    zero = _c(0, src.dtype)
    srows = _te.compute(
        (N, C, T), lambda n_, c, t: _te.if_then_else(
            t // Wp < Hp, src[n_, c, t // Wp, t % Wp], zero),
        name=f"{src.name}.rows", tag="injective,conv2d_wgrad_rows", attrs={"pitch": Wp})
    arows = _te.compute(
        (N, O, P), lambda n_, o, p: _te.if_then_else(
            _te.all(p % Wp < OW, p // Wp < OH), adjoint[n_, o, p // Wp, p % Wp],
            _c(0, adjoint.dtype)),
        name=f"{adjoint.name}.rows", tag="injective,conv2d_wgrad_rows", attrs={"pitch": Wp})
    n = _te.reduce_axis(N, name="n")
    p = _te.reduce_axis(P, name="p")
    acc = op.output(0).dtype
    return lambda o, c, ky, kx: _te.sum(
        arows[n, o, p].astype(acc) * srows[n, c, p + ky * dh * Wp + kx * dw].astype(acc),
        axis=[n, p])


def _phase_taps(k: int, s: int, p: int, d: int, size: int):
    """One dimension of the data gradient of a stride-``s`` convolution, split by the
    phase ``r = y % s`` of the data index ``y = s*q + r``: the pairs ``(r, (taps, dil,
    lo, count))`` of the phases some tap reaches that are not empty, by increasing ``r``
    -- the kernel taps ``ky`` that land on it (``(r + p - ky*d) % s == 0``, increasing,
    evenly spaced), the dilation of the phase's convolution (``d / gcd(s, d)``), the
    adjoint index that its first tap reads at ``q = 0``, and the phase's length
    ``ceil((size - r) / s)``.  The phase's gradient is a stride-1 convolution of the
    adjoint shifted by ``lo`` (zero outside it) with the taps in reverse order:
    ``g[q] = sum_j adj[q + lo + j*dil] * w[taps[-1 - j]]``.  Found from the taps (at
    most ``k`` phases), so a stride of up to 2**31 - 1 costs no loop over its phases."""
    dil = d // math.gcd(s, d)
    taps: dict = {}
    for ky in range(k):
        r = (ky * d - p) % s
        if r < size:                      # (else the phase is empty: ceil((size - r) / s) <= 0)
            taps.setdefault(r, []).append(ky)
    return [(r, (t, dil, (r + p - t[-1] * d) // s, -(-(size - r) // s)))
            for r, t in sorted(taps.items())]


def _window(adjoint, sp, lo, size, name: str):
    """``adjoint`` shifted by ``lo`` along its spatial dimensions ``sp`` and cut to
    ``size`` there, zero outside it (a padding, tagged ``pad``, when ``lo <= 0``); the
    adjoint itself when that is the same."""
    ext = [_int(adjoint.shape[i], "adjoint extent") for i in sp]
    if all(a == 0 and n == e for a, n, e in zip(lo, size, ext)):
        return adjoint

    def f(*i):
        idx, conds = list(i), []
        for d, a, e in zip(sp, lo, ext):
            idx[d] = i[d] + a
            conds += [idx[d] >= 0, idx[d] < e]
        return _te.if_then_else(_te.all(*conds), adjoint[tuple(idx)], _c(0, adjoint.dtype))

    shape = list(adjoint.shape)
    for d, n in zip(sp, size):
        shape[d] = n
    return _te.compute(tuple(shape), f, name=name, tag="injective,pad")


def _conv_data_grad(out, adjoint, wanted):
    """The gradients of a ``conv2d_nchw``/``conv2d_nhwc`` (the rule that ``tc.gradient``
    uses for them, see ``register_tag_derivative``).  The weight gradient, any stride:
    :func:`_conv_weight_grad`.  The data gradient: convolutions of the adjoint with the
    kernel flipped in both spatial dimensions and its channel axes swapped, which the
    conv schedules run as fast as a forward pass.  Stride 1: one convolution, stride 1
    and the same dilation, padded by ``dilation*(k-1) - padding``.  Stride ``s``: one
    per phase ``(y % s, x % s)`` of the data (:func:`_phase_taps`), each with the taps
    of the kernel that land on that phase -- 3x3 stride 2 gives 1x1, 1x2, 2x1 and 2x2
    kernels, no multiplication by an inserted zero -- and a stage ``<data>.grad`` that
    interleaves them.  In NCHW, phases at most half a vector wide that the NCHW schedule
    cannot vectorize across their output channels are NHWC convolutions of the
    transposed adjoint (:func:`_narrow_phases`; then ``<data>.grad`` also transposes, at
    stride 1 too).  For a head of ones (``adjoint`` None) both gradients
    keep the derived gather form.  The gradients are summed in the convolution's dtype
    (its accumulation dtype: float32 for float16 operands) and rounded once to the
    data's and weight's dtypes."""
    op = out.op
    conf = op.attrs.get("conv2d")
    if adjoint is None or conf is None or len(op.input_tensors) != 2:
        return None
    (sh, sw), ((ph, _), (pw, _)), (dh, dw) = conf     # (the padding after: in OH, OW)
    nchw = "conv2d_nchw" in op.tag.split(",")
    src, weight = op.input_tensors
    data = src
    if any(b or a for b, a in conf[1]):
        if "pad" not in (getattr(src.op, "tag", "") or "").split(","):
            return None
        data = src.op.input_tensors[0]
    if data is weight:
        return None
    res = {}
    if any(d is weight for d in wanted):
        res[weight] = _conv_weight_grad(op, src, weight, adjoint)
    if not any(d is data for d in wanted):
        return res
    res[data] = transposed_conv2d(adjoint, weight, nchw, ((sh, sw), (ph, pw), (dh, dw)),
                                  data.shape, data.dtype, op.output(0).dtype,
                                  f"{data.name}.grad")
    return res


def transposed_conv2d(adjoint, weight, nchw: bool, conf, shape, dtype: str, acc: str,
                      name: str):
    """The data gradient of a convolution (see :func:`_conv_data_grad`) as the stage
    ``name``: ``adjoint`` (``[N, O, OH, OW]``, NHWC: ``[N, OH, OW, O]``) convolved back
    through ``weight`` (the convolution's OIHW, NHWC: HWIO) onto a tensor of ``shape``
    (the data's, ``[N, C, H, W]`` or ``[N, H, W, C]``) and ``dtype``, summed in ``acc``;
    ``conf``: the convolution's ``(stride, padding, dilation)``, the padding its
    ``before`` rows and columns (the ``after`` ones follow from ``shape``).  It is also
    :func:`tecomp.nn.conv2d_transpose_nchw`'s compute definition."""
    (sh, sw), (ph, pw), (dh, dw) = conf
    sp = (2, 3) if nchw else (1, 2)          # the spatial dimensions of data and adjoint
    KH, KW = (_int(e, f"conv2d {name}: extent") for e in
              ((weight.shape[2], weight.shape[3]) if nchw else (weight.shape[0], weight.shape[1])))
    H, W = (_int(shape[i], f"conv2d {name}: extent") for i in sp)
    OH, OW = (_int(adjoint.shape[i], f"conv2d {name}: extent") for i in sp)
    rows, cols = _phase_taps(KH, sh, ph, dh, H), _phase_taps(KW, sw, pw, dw, W)
    O, C = (weight.shape[0], weight.shape[1]) if nchw else (weight.shape[3], weight.shape[2])
    # NCHW phases at most half a vector wide run as NHWC convolutions (vectorized over
    # the data's channels instead of a row that fills half a vector or less) between
    # transposes of the adjoint and of the result, unless the NCHW schedule can
    # vectorize them across the data's channels itself
    via_nhwc = nchw and _narrow_phases(rows, cols, shape[1], weight.shape[0])
    single = sh == sw == 1 and not via_nhwc    # the gradient is one convolution
    out_name = name
    name = name + (".acc" if single and dtype != acc else "")
    if via_nhwc:
        adjoint = _te.compute(
            (adjoint.shape[0], OH, OW, adjoint.shape[1]),
            lambda n_, i, j, o: adjoint[n_, o, i, j], name=f"{adjoint.name}.nhwc",
            tag="injective,layout_transform")
        sp = (1, 2)
    phases = {}
    for ry, py in rows:
        for rx, px in cols:
            (ty, ddy, ly, qy), (tx, ddx, lx, qx) = py, px
            sy, sx = ty[1] - ty[0] if len(ty) > 1 else 1, tx[1] - tx[0] if len(tx) > 1 else 1
            y0, x0 = ty[-1], tx[-1]
            tag = "" if sh == sw == 1 else f".p{ry}{rx}"
            # the taps of this phase, flipped, with the channel axes swapped: OIHW ->
            # [C, O, len(ty), len(tx)] for an NCHW phase, else [len(ty), len(tx), O, C]
            def tap(o, c, ky, kx, y0=y0, x0=x0, sy=sy, sx=sx):
                i, j = y0 - ky * sy, x0 - kx * sx
                return weight[o, c, i, j] if nchw else weight[i, j, c, o]

            if nchw and not via_nhwc:
                fshape, fbody = (C, O, len(ty), len(tx)), lambda c, o, ky, kx: tap(o, c, ky, kx)
            else:
                fshape, fbody = (len(ty), len(tx), O, C), lambda ky, kx, o, c: tap(o, c, ky, kx)
            flip = _te.compute(fshape, fbody, name=f"{weight.name}.flip{tag}",
                               tag="injective,conv2d_weight_flip")
            g = name + tag + (".nhwc" if via_nhwc else "")
            size = (qy + (len(ty) - 1) * ddy, qx + (len(tx) - 1) * ddx)
            src = _window(adjoint, sp, (ly, lx), size, f"{g}.pad")
            # a second derivative (this convolution's own gradient rule) reads the
            # padding from ``attrs``: given when the window pads the adjoint (before and
            # after), not when it crops it (then the gather form)
            pads = tuple((-a, a + n - e) for a, n, e in zip((ly, lx), size, (OH, OW)))
            attrs = ({"conv2d": ((1, 1), pads, (ddy, ddx))}
                     if all(b >= 0 and e >= 0 for b, e in pads) else {})
            phases[ry, rx] = _conv_compute(nchw and not via_nhwc, src, flip, (qy, qx),
                                           (1, 1), (ddy, ddx), g, attrs, acc)
    if single:
        return _rounded(phases[0, 0], dtype, out_name, tag="injective")
    zero = _c(0, acc)
    items = sorted(phases.items())
    dsp = (2, 3) if nchw else (1, 2)         # the spatial dimensions of the data

    def interleave(*i):
        y, x = i[dsp[0]], i[dsp[1]]
        idx = list(i)
        idx[dsp[0]], idx[dsp[1]] = y // sh, x // sw
        if via_nhwc:   # (n, c, y, x) -> the phases' (n, y, x, c)
            idx = [idx[0], idx[2], idx[3], idx[1]]
        idx = tuple(idx)
        rest = list(items)
        # with every phase present, the last one needs no test
        val = rest.pop()[1][idx] if len(rest) == sh * sw else zero
        for (ry, rx), g in reversed(rest):
            conds = (([(y % sh).equal(ry)] if sh > 1 else [])
                     + ([(x % sw).equal(rx)] if sw > 1 else []))
            val = _te.if_then_else(_te.all(*conds), g[idx], val)
        return val.astype(dtype)

    tag = f"injective,conv2d_{'nchw' if nchw else 'nhwc'}_phases"
    if sh == sw == 1:
        tag = "injective,layout_transform"
    # ``phases``, the strides, where the phases are NCHW rows as the output is: the
    # schedule then stores each phase's rows in turn (``strategy.cpu.conv_nd``)
    attrs = {"phases": (sh, sw)} if nchw and not via_nhwc and (sh, sw) != (1, 1) else {}
    return _te.compute(tuple(shape), interleave, name=name, tag=tag, attrs=attrs)


def _narrow_phases(rows, cols, channels, adjoint_channels) -> bool:
    """Whether the phases of an NCHW data gradient (:func:`_phase_taps` of its rows and
    columns) run as NHWC convolutions: when they are all at most half a vector wide
    while the data has a vector of channels or more, and the NCHW schedule cannot put
    its vectors across their output channels instead (the data's channels do not make
    whole 2-vector blocks, or there are fewer than 256 adjoint channels; see
    ``tecomp.strategy.cpu.conv2d._nchw_by_channels``).  Batch 4, 2 threads, interleaved, ms, against
    NCHW phases with row vectors (PyTorch): 512 channels at 7x7 7.1 vs 12.6 (6.4); 256
    at 14x14 stride 2 3.8 vs 5.1 (3.8); 512 at 14x14 stride 2 9.2 vs 21.7 (9.8); one
    thread, 13.4 vs 23.5 (11.8) and 4.4 vs 8.8 (5.3).  NCHW phases with channel
    vectors, against these NHWC ones: 512 at 7x7 7.0 vs 8.3, 512 at 14x14 stride 2 9.7
    vs 10.6, 256 at 14x14 stride 2 3.3 vs 3.7 (PyTorch 8.4, 14.0, 4.6); 256 at 7x7
    stride 2 1.25-1.29 vs 1.46-1.47, though its single-tap phase (fewer than 512
    channels) keeps row vectors."""
    C = channels.value if isinstance(channels, Const) else None
    O = adjoint_channels.value if isinstance(adjoint_channels, Const) else None
    L = _GRAD_LANES
    widths = [p[3] for _, p in cols]
    narrow = C is not None and C >= L and bool(widths) and max(widths) <= L // 2 and \
        bool(rows)
    by_channels = C is not None and O is not None and C % (2 * L) == 0 and O >= 256
    return narrow and not by_channels


def _depthwise_data_grad(out, adjoint, wanted):
    """The data gradient of a stride-1 depthwise convolution with one filter per channel
    (the rule ``tc.gradient`` uses for ``depthwise_conv2d_*``): the depthwise
    convolution of the adjoint, padded by ``dilation * (k - 1) - padding`` on each side
    (before and after apart), with the kernel flipped -- the depthwise stage again,
    which its template runs at a forward pass's speed -- summed in the convolution's
    dtype and rounded once to the data's (``<data>.grad``).  None (the derived gather
    form) for a stride, a channel multiplier, a padding wider than the dilated kernel,
    or a head of ones; the weight's gradient is always the derived one (a reduction over
    the images and pixels)."""
    op = out.op
    conf = op.attrs.get("depthwise_conv2d")
    if adjoint is None or conf is None or len(op.input_tensors) != 2:
        return None
    stride, pads, (dh, dw), mult = conf
    nchw = "depthwise_conv2d_nchw" in op.tag.split(",")
    src, weight = op.input_tensors
    data = src
    if any(b or a for b, a in pads):
        if "pad" not in (getattr(src.op, "tag", "") or "").split(","):
            return None
        data = src.op.input_tensors[0]
    if stride != (1, 1) or mult != 1 or data is weight or not any(d is data for d in wanted):
        return None
    KH, KW = (_int(e, f"depthwise_conv2d {op.name}: extent") for e in
              (weight.shape[2:] if nchw else weight.shape[:2]))
    back = tuple((d * (k - 1) - b, d * (k - 1) - a) for (b, a), d, k in
                 zip(pads, (dh, dw), (KH, KW)))
    if min(min(p) for p in back) < 0:
        return None
    # the kernel flipped, a stage of its own ([C, 1, KH, KW] or [KH, KW, C, 1]) that the
    # gradient's convolution reads as a forward one reads its weight (a second
    # derivative by this rule sees a plain weight)
    C = data.shape[1 if nchw else 3]
    hwc1 = not nchw and _int(weight.shape[2], "channels") != 1   # [KH, KW, C, 1]
    if nchw:
        flip = _te.compute((C, 1, KH, KW), lambda o, z, ky, kx: weight[
            o, 0, KH - 1 - ky, KW - 1 - kx], name=f"{weight.name}.flip",
            tag="injective,conv2d_weight_flip")
    else:
        flip = _te.compute((KH, KW, C, 1), lambda ky, kx, o, z: weight[
            KH - 1 - ky, KW - 1 - kx, o if hwc1 else 0, 0 if hwc1 else o],
            name=f"{weight.name}.flip", tag="injective,conv2d_weight_flip")
    sp = (2, 3) if nchw else (1, 2)
    acc = op.output(0).dtype
    name = f"{data.name}.grad"
    g = _depthwise_compute(nchw, _padded(nchw, adjoint, back, name),
                           (lambda o, ky, kx: flip[o, 0, ky, kx]) if nchw else
                           (lambda o, ky, kx: flip[ky, kx, o, 0]), C, 1,
                           (KH, KW), tuple(data.shape[i] for i in sp), (1, 1), (dh, dw),
                           name if data.dtype == acc else f"{name}.acc",
                           {"depthwise_conv2d": ((1, 1), back, (dh, dw), 1)}, acc)
    return {data: _rounded(g, data.dtype, name, tag="injective")}


_register_tag_derivative("conv2d_nchw", _conv_data_grad, override=True)
_register_tag_derivative("conv2d_nhwc", _conv_data_grad, override=True)
_register_tag_derivative("depthwise_conv2d_nchw", _depthwise_data_grad, override=True)
_register_tag_derivative("depthwise_conv2d_nhwc", _depthwise_data_grad, override=True)
