"""2-d convolutions, NCHW (weight OIHW) and NHWC (weight HWIO): dense, grouped and
depthwise."""
from __future__ import annotations

from typing import Sequence

from .. import te as _te
from ..autodiff.rules import register_tag_equivalent
from ..te.tensor import Tensor
from ._check import Args
from ._common import ZERO_WHERE, _acc, _int, _rounded, padded_taps
from .transform import _padded
from .winograd import (WINOGRAD_DTYPES, _weight_transform, _winograd_stages,
                       _tags, winograd_tile, winograd_unsupported)
from ..ir.expr import Const

__all__ = ["conv2d_nchw", "conv2d_nhwc", "depthwise_conv2d_nchw", "depthwise_conv2d_nhwc"]


# ---------------------------------------------------------------------------------
# convolution


#: leave the taps that read the zero padding out of a 2-d convolution's sum (a ``where=``
#: that lowering may drop: see ``tecomp.te.reduce.ZERO_WHERE``)
SKIP_PADDED_TAPS = True

#: ... where at least this share of the products reads the padding.  The border blocks
#: split off cost more than they save below it (measured on Zen 5, 1 thread, CPU time,
#: under load: ResNet's 64x56x56, 2.4% of its taps on the padding, 0.96-0.98x; 128x28x28,
#: 4.7%, 1.05x; 512x7x7, 18%, 1.18-1.22x)
SKIP_SHARE = 0.04


def padded_share(hw, khw, pads, stride, dilation, out_hw) -> float:
    """The share of a convolution's products (output pixel x tap) that read its zero
    padding: the ``hw`` plane padded by ``pads``, a ``khw`` kernel, ``out_hw`` outputs."""
    inside = total = 1
    for n, K, (b, _), s, d, out in zip(hw, khw, pads, stride, dilation, out_hw):
        valid = 0
        for k in range(K):
            # outputs y with 0 <= y*s + k*d - b < n
            lo = max(0, -((k * d - b) // s))
            hi = min(out - 1, (n - 1 + b - k * d) // s)
            valid += max(0, hi - lo + 1)
        inside *= valid
        total *= out * K
    return 1 - inside / total if total else 0.0


def _skipped_share(pads, hw, khw, stride, dilation, out_hw) -> float:
    """The share of a direct convolution's products that it skips on the padding: its
    :func:`padded_share` where ``SKIP_PADDED_TAPS`` and that share is at least
    ``SKIP_SHARE``, else 0."""
    if not (SKIP_PADDED_TAPS and pads is not None and any(b or e for b, e in pads)):
        return 0.0
    share = padded_share(hw, [e if isinstance(e, int) else _int(e, "kernel extent")
                              for e in khw], pads, stride, dilation,
                         [e if isinstance(e, int) else _int(e, "output extent")
                          for e in out_hw])
    return share if share >= SKIP_SHARE else 0.0


def _skipping(attrs, pads, hw, khw=None, stride=None, dilation=None, out_hw=None):
    """``(attrs, where)`` of a convolution of the ``hw`` plane padded by ``pads`` (None:
    not padded): ``attrs`` marked (``ZERO_WHERE``) where taps are skipped, and
    ``where(window)`` the ``where=`` of its sum at the padded input's ``(row, column)``
    (None: every tap).  Skipped where ``SKIP_PADDED_TAPS`` and at least ``SKIP_SHARE``
    of the products read the padding."""
    if not _skipped_share(pads, hw, khw, stride, dilation, out_hw):
        return attrs, lambda win: None
    return {**attrs, ZERO_WHERE: True}, lambda win: padded_taps(win, pads, hw)


def _conv_compute(nchw: bool, src, weight, out_hw, stride, dilation, name: str, attrs,
                  acc=None, groups: int = 1, pads=None, hw=None):
    """The convolution stage itself: ``out_hw`` output rows and columns read from ``src``
    (the data, already padded) at ``y * stride + ky * dilation`` (and the same in x),
    both operands cast to ``acc`` (the accumulation dtype; None: ``src``'s) before they
    are multiplied and summed.  With ``groups`` above 1 (tag ``group_conv2d_*``), output
    channel ``o`` of ``O`` sums the weight's ``I = C / groups`` input channels of its
    group ``o // (O / groups)``.  With ``pads`` (``src`` is the ``hw`` plane padded by
    these ``(before, after)`` pairs), the taps in the padding are left out of the sum
    (:func:`_skipping`)."""
    (sh, sw), (dh, dw) = stride, dilation
    acc = acc or src.dtype
    OH, OW = out_hw
    if nchw:
        (N, C), (O, I, KH, KW) = src.shape[:2], weight.shape
    else:
        (N, C), (KH, KW, I, O) = (src.shape[0], src.shape[3]), weight.shape
    c = _te.reduce_axis(C if groups == 1 else I, name="c")
    ky = _te.reduce_axis(KH, name="ky")
    kx = _te.reduce_axis(KW, name="kx")
    if groups == 1:
        def cin(o):
            return c
    else:
        per, ci = _int(O, "output channels") // groups, _int(I, "input channels")

        def cin(o):
            return o // per * ci + c
    tag = ("group_" if groups > 1 else "") + ("conv2d_nchw" if nchw else "conv2d_nhwc")
    attrs, where = _skipping(attrs, pads, hw, (KH, KW), stride, dilation, out_hw)

    def window(y, x):
        return y * sh + ky * dh, x * sw + kx * dw

    if nchw:
        return _te.compute(
            (N, O, OH, OW),
            lambda n, o, y, x: _te.sum(
                src[(n, cin(o)) + window(y, x)].astype(acc) *
                weight[o, c, ky, kx].astype(acc), axis=[c, ky, kx],
                where=where(window(y, x))),
            name=name, tag=tag, attrs=attrs)
    return _te.compute(
        (N, OH, OW, O),
        lambda n, y, x, o: _te.sum(
            src[(n,) + window(y, x) + (cin(o),)].astype(acc) *
            weight[ky, kx, c, o].astype(acc), axis=[ky, kx, c],
            where=where(window(y, x))),
        name=name, tag=tag, attrs=attrs)


def _depthwise_compute(nchw: bool, src, wload, channels, mult: int, kernel, out_hw, stride,
                       dilation, name: str, attrs, acc):
    """A depthwise convolution over ``src`` (already padded): output channel ``o`` (of
    ``channels * mult``) is input channel ``o // mult`` times its own ``KH x KW`` filter
    ``wload(o, ky, kx)``, summed in ``acc``."""
    (sh, sw), (dh, dw), (KH, KW) = stride, dilation, kernel
    OH, OW = out_hw
    N = src.shape[0]
    ky = _te.reduce_axis(KH, name="ky")
    kx = _te.reduce_axis(KW, name="kx")

    def cin(o):
        return o if mult == 1 else o // mult

    if nchw:
        return _te.compute(
            (N, channels * mult, OH, OW),
            lambda n, o, y, x: _te.sum(
                src[n, cin(o), y * sh + ky * dh, x * sw + kx * dw].astype(acc) *
                wload(o, ky, kx).astype(acc), axis=[ky, kx]),
            name=name, tag="depthwise_conv2d_nchw", attrs=attrs)
    return _te.compute(
        (N, OH, OW, channels * mult),
        lambda n, y, x, o: _te.sum(
            src[n, y * sh + ky * dh, x * sw + kx * dw, cin(o)].astype(acc) *
            wload(o, ky, kx).astype(acc), axis=[ky, kx]),
        name=name, tag="depthwise_conv2d_nhwc", attrs=attrs)


def _window_args(a: Args, nchw: bool, data, weight, stride, padding, dilation, wsp):
    """The stride, dilation, padding (``(before, after)`` pairs), kernel extents, output
    extents and data's plane of a 2-d convolution of ``data`` with ``weight`` (its
    spatial dimensions ``wsp``)."""
    stride = a.ints("stride", stride, 1)
    dilation = a.ints("dilation", dilation, 1)
    dsp = (2, 3) if nchw else (1, 2)
    hw = tuple(a.constant("data", data, d, what) for d, what in zip(dsp, ("height", "width")))
    khw = tuple(a.constant("weight", weight, d, what)
                for d, what in zip(wsp, ("kernel height", "kernel width")))
    pads = a.padding(padding, hw, khw, stride, dilation)
    return (stride, dilation, pads, khw, a.window(hw, khw, stride, pads, dilation, "data"),
            hw)


def _conv2d(nchw: bool, data, weight, stride, padding, dilation, name: str, out_dtype,
            groups=1, algorithm="direct"):
    op = "conv2d_nchw" if nchw else "conv2d_nhwc"
    a = Args(op, name)
    groups = a.ints("groups", groups, 1, count=1)
    if not isinstance(algorithm, str) or algorithm not in ALGORITHMS:
        a.fail(f"algorithm {algorithm!r:.40} is not one tecomp has; give "
               + ", ".join(f'"{x}"' for x in ALGORITHMS))
    per = "" if groups == 1 else " // groups"
    a.tensor("data", data, 4, "NCHW [batch, channels, height, width]" if nchw else
             "NHWC [batch, height, width, channels]", "number")
    a.tensor("weight", weight, 4, f"OIHW [out, in{per}, kh, kw]" if nchw else
             f"HWIO [kh, kw, in{per}, out]", "number")
    out_dtype = a.out_dtype(out_dtype, (data, weight))
    a.operands([("data", data), ("weight", weight)], out_dtype)
    stride, dilation, pads, khw, (OH, OW), hw = _window_args(
        a, nchw, data, weight, stride, padding, dilation, (2, 3) if nchw else (0, 1))
    cd, (od, idim) = (1, (0, 1)) if nchw else (3, (3, 2))
    if groups == 1:
        a.match("weight", weight, idim, "data", data, cd, "input channels")
    else:
        C = a.constant("data", data, cd, "channels")
        O = a.constant("weight", weight, od, "output channels")
        I = a.constant("weight", weight, idim, "input channels")
        if C % groups or O % groups:
            a.fail(f"groups={groups} must divide the {C} channels of data ({data.name}) "
                   f"and the {O} output channels of weight ({weight.name}); give a common "
                   "divisor of them")
        if I * groups != C:
            a.fail(f"weight ({weight.name}) has {I} input channels per group (axis {idim}) "
                   f"but data ({data.name}) has {C} channels in {groups} groups "
                   f"({C // groups} per group); weight must be "
                   + (f"[{O}, {C // groups}, kh, kw]" if nchw else
                      f"[kh, kw, {C // groups}, {O}]"))
    acc = _acc(data.dtype, out_dtype)
    out = out_dtype or data.dtype
    if algorithm != "direct":
        tile = _winograd_choice(a, algorithm, nchw, data, weight, khw, stride, dilation,
                                groups, (OH, OW), acc, out,
                                _skipped_share(pads, hw, khw, stride, dilation, (OH, OW)))
        if tile:
            U = _weight_transform(nchw, weight, tile, groups,
                                  int(weight.shape[0 if nchw else 3].value) // groups,
                                  int(weight.shape[1 if nchw else 2].value), f"{name}.wt")
            return _winograd_stages(nchw, data, U, pads, (OH, OW), tile, groups, name)
    src = _padded(nchw, data, pads, name)
    cname = name if acc == out else f"{name}.acc"
    if groups == 1:
        conv = _conv_compute(nchw, src, weight, (OH, OW), stride, dilation, cname,
                             {"conv2d": (stride, pads, dilation)}, acc, pads=pads, hw=hw)
    elif I == 1:
        # one input channel per group: depthwise, the weight read as [C, O / C, KH, KW]
        # (NCHW) or [KH, KW, C, O / C] (NHWC), the same memory
        conv = _depthwise_compute(
            nchw, src, (lambda o, ky, kx: weight[o, 0, ky, kx]) if nchw else
            (lambda o, ky, kx: weight[ky, kx, 0, o]), C, O // C, khw, (OH, OW), stride,
            dilation, cname, {"depthwise_conv2d": (stride, pads, dilation, O // C)}, acc)
    else:
        conv = _conv_compute(nchw, src, weight, (OH, OW), stride, dilation, cname,
                             {"group_conv2d": (stride, pads, dilation, groups)}, acc, groups,
                             pads, hw)
    return _rounded(conv, out, name)


#: the ``algorithm=`` values of :func:`conv2d_nchw` / :func:`conv2d_nhwc`
ALGORITHMS = ("direct", "winograd", "auto")


def _winograd_choice(a: Args, algorithm: str, nchw: bool, data, weight, khw, stride,
                     dilation, groups: int, out_hw, acc: str, out: str,
                     skipped: float = 0.0) -> int:
    """The Winograd tile ``m`` of a convolution whose ``algorithm=`` is "winograd" (a
    ShapeError where it cannot be one) or "auto" (0 where the direct one is chosen:
    :func:`tecomp.nn.winograd.winograd_tile`; ``skipped``: the share of the direct
    sum's products it would skip on the padding)."""
    why = winograd_unsupported(khw, stride, dilation)
    if not why and not (acc == out == data.dtype and data.dtype in WINOGRAD_DTYPES
                        and weight.dtype == data.dtype):
        why = f"dtype {data.dtype} (out_dtype {out})"
    if not why and groups > 1 and weight.shape[1 if nchw else 2].value == 1:
        why = "a depthwise grouping (one input channel per group)"
    if not why and not isinstance(data.shape[0], Const):
        why = "a symbolic batch"
    if why:
        if algorithm == "winograd":
            a.fail(f"algorithm=\"winograd\" is for 3x3 convolutions with stride 1 and "
                   f"dilation 1 over float32/float64 of a constant batch; this one has "
                   f"{why}: use algorithm=\"direct\" (or \"auto\", which picks it)")
        return 0
    C = int(data.shape[1 if nchw else 3].value)
    O = int(weight.shape[0 if nchw else 3].value)
    W = data.shape[3 if nchw else 2]
    tile = winograd_tile(nchw, int(data.shape[0].value), C, O, groups, out_hw,
                         skipped=skipped, in_w=W.value if isinstance(W, Const) else None,
                         dtype=data.dtype)
    if algorithm == "winograd":
        return tile or 4 if min(out_hw) >= 4 else 2
    return tile


def _depthwise(nchw: bool, data, weight, stride, padding, dilation, name: str, out_dtype):
    op = f"depthwise_conv2d_{'nchw' if nchw else 'nhwc'}"
    a = Args(op, name)
    a.tensor("data", data, 4, "NCHW [batch, channels, height, width]" if nchw else
             "NHWC [batch, height, width, channels]", "number")
    a.tensor("weight", weight, 4, "[channels, multiplier, kh, kw]" if nchw else
             "[kh, kw, channels, multiplier]", "number")
    out_dtype = a.out_dtype(out_dtype, (data, weight))
    a.operands([("data", data), ("weight", weight)], out_dtype)
    stride, dilation, pads, khw, (OH, OW), _ = _window_args(
        a, nchw, data, weight, stride, padding, dilation, (2, 3) if nchw else (0, 1))
    cd, (wc, wm) = (1, (0, 1)) if nchw else (3, (2, 3))
    a.match("weight", weight, wc, "data", data, cd, "channels",
            "the weight is [channels, multiplier, kh, kw]" if nchw else
            "the weight is [kh, kw, channels, multiplier]")
    M = a.constant("weight", weight, wm, "channel multiplier")
    C = data.shape[cd]
    src = _padded(nchw, data, pads, name)
    acc = _acc(data.dtype, out_dtype)
    out = out_dtype or data.dtype
    if nchw:
        wload = ((lambda o, ky, kx: weight[o, 0, ky, kx]) if M == 1 else
                 (lambda o, ky, kx: weight[o // M, o % M, ky, kx]))
    else:
        wload = ((lambda o, ky, kx: weight[ky, kx, o, 0]) if M == 1 else
                 (lambda o, ky, kx: weight[ky, kx, o // M, o % M]))
    conv = _depthwise_compute(nchw, src, wload, C, M, khw, (OH, OW), stride, dilation,
                              name if acc == out else f"{name}.acc",
                              {"depthwise_conv2d": (stride, pads, dilation, M)}, acc)
    return _rounded(conv, out, name)


def conv2d_nchw(data: Tensor, weight: Tensor, stride: int | Sequence[int] = 1,
                padding: int | str | Sequence = 0, dilation: int | Sequence[int] = 1,
                name: str = "conv2d_nchw", out_dtype: str | None = None,
                groups: int = 1, algorithm: str = "direct") -> Tensor:
    """2-d convolution (cross-correlation, as PyTorch) in NCHW.

    Parameters
    ----------
    data : Tensor
        ``[N, C, H, W]``.
    weight : Tensor
        ``[O, C // groups, KH, KW]`` (PyTorch's layout).
    stride : int or (int, int), optional
        The stride.
    padding : int, str or sequence, optional
        Zeros added around the image: an int (every side); ``(ph, pw)`` (both sides of
        each dimension); ``((top, bottom), (left, right))``; TOPI's ``(top, left, bottom,
        right)``; ``"VALID"`` (none) or ``"SAME"`` (TensorFlow's: ``ceil(H / stride)``
        rows, the odd row or column of padding after).
    dilation : int or (int, int), optional
        The kernel's dilation.
    out_dtype : str, optional
        As :func:`dense`'s: None keeps the data's dtype and sums float16/bfloat16
        products in float32 (the stage ``<name>.acc``, rounded once by ``<name>``); a
        dtype casts both operands to it and is the output's.
    groups : int, optional
        The channels and the output channels split into ``groups`` independent
        convolutions (``torch.nn.functional.conv2d``'s ``groups``); ``groups == C`` with
        ``weight`` ``[C * M, 1, KH, KW]`` is a depthwise convolution (the stage of
        :func:`depthwise_conv2d_nchw`, tag ``depthwise_conv2d_nchw``), other groupings
        a stage tagged ``group_conv2d_nchw``.
    algorithm : {"direct", "winograd", "auto"}, optional
        ``"direct"``: the sum over the window, one stage.  ``"winograd"``: Winograd's
        F(m x m, 3 x 3) (:mod:`tecomp.nn.winograd`: a weight transform, an input transform,
        a batched GEMM per transform point and an output transform; fewer products, an
        error a few times the direct one's, docs/numerics.md) -- only for 3x3 kernels,
        stride 1, dilation 1, float32/float64, a constant batch and not depthwise (a
        ShapeError otherwise).  ``"auto"``: Winograd where the CPU cost rule
        (:func:`tecomp.nn.winograd.winograd_tile`) says it is faster, else direct.
        ``tc.gradient`` through Winograd is correct but takes minutes to build: train
        with ``"direct"``.
    name : str, optional
        The output stage's name; helper stages are ``<name>.<what>``.

    Returns
    -------
    Tensor
        ``[N, O, OH, OW]``.

    Raises
    ------
    ShapeError, DTypeError
        For an argument of the wrong rank, dtype or extent, a padding it cannot read, or
        ``groups`` that does not divide the channels (the message names it).

    Notes
    -----
    The taps that fall in the zero padding are left out of the sum where they are at
    least ``tecomp.nn.conv.SKIP_SHARE`` (4%) of its products (a ``where=`` marked
    ``tecomp.te.reduce.ZERO_WHERE``, dense and grouped alike; depthwise convolutions,
    bound by memory, read their padding): the compiled loops split the border rows and
    columns off, their tap loops starting past the padding (on a 7 x 7 plane, a 3 x 3
    kernel skips 18% of its products; on 56 x 56, 2.4%, it computes them all).  Where the vectors run along the columns, the
    columns' test is dropped and the padding's zeros multiplied instead; a tensorized
    stage computes the full sum.  The result is the padded convolution's, but where a
    weight at such a tap is ``inf`` or NaN: it may add nothing to the outputs on the
    border, where PyTorch adds ``0 * inf = NaN`` (the outputs inside, which read it, are
    NaN in both; whether a border output is depends on the schedule).

    Examples
    --------
    >>> import tecomp as tc
    >>> import tecomp.nn as nn
    >>> X = tc.placeholder((1, 3, 8, 8), name="X"); W = tc.placeholder((4, 3, 3, 3), name="W")
    >>> tc.utils.get_const_tuple(nn.conv2d_nchw(X, W, padding=1).shape)
    (1, 4, 8, 8)
    >>> tc.utils.get_const_tuple(nn.conv2d_nchw(X, W, padding=(0, 0, 1, 1)).shape)
    (1, 4, 7, 7)
    >>> G = tc.placeholder((8, 2, 3, 3), name="G"); X4 = tc.placeholder((1, 4, 8, 8), name="X4")
    >>> tc.utils.get_const_tuple(nn.conv2d_nchw(X4, G, padding="SAME", groups=2).shape)
    (1, 8, 8, 8)
    """
    return _conv2d(True, data, weight, stride, padding, dilation, name, out_dtype, groups,
                   algorithm)


def conv2d_nhwc(data: Tensor, weight: Tensor, stride: int | Sequence[int] = 1,
                padding: int | str | Sequence = 0, dilation: int | Sequence[int] = 1,
                name: str = "conv2d_nhwc", out_dtype: str | None = None,
                groups: int = 1, kernel_layout: str = "HWIO",
                algorithm: str = "direct") -> Tensor:
    """2-d convolution in NHWC, weights in HWIO (TensorFlow's and TVM's NHWC layout), or
    OHWI / HWOI (``kernel_layout=``, as TOPI's ``conv2d_nhwc``).

    Parameters
    ----------
    data : Tensor
        ``[N, H, W, C]``.
    weight : Tensor
        ``[KH, KW, C // groups, O]`` (HWIO; with groups, ``I`` is the channels of one
        group and output channel ``o`` belongs to group ``o // (O // groups)``, as in
        NCHW).
    stride, padding, dilation, out_dtype
        As :func:`conv2d_nchw`'s.
    groups : int, optional
        As :func:`conv2d_nchw`'s; ``groups == C`` with weight ``[KH, KW, 1, C * M]`` is
        the depthwise convolution of :func:`depthwise_conv2d_nhwc` (the same memory as
        its ``[KH, KW, C, M]``).
    kernel_layout : {"HWIO", "OHWI", "HWOI"}, optional
        The weight's layout: ``[KH, KW, I, O]``, ``[O, KH, KW, I]`` or ``[KH, KW, O, I]``.
        Another than HWIO is read through a stage ``<name>.hwio`` that puts it in HWIO
        (the templates copy their weights anyway).
    algorithm : {"direct", "winograd", "auto"}, optional
        As :func:`conv2d_nchw`'s.
    name : str, optional
        The output stage's name; helper stages are ``<name>.<what>``.

    Returns
    -------
    Tensor
        ``[N, OH, OW, O]``.

    Raises
    ------
    ShapeError, DTypeError
        For an argument of the wrong rank, dtype or extent, a padding it cannot read, or
        ``groups`` that does not divide the channels (the message names it).

    Notes
    -----
    The taps in the zero padding are left out of the sum, as in :func:`conv2d_nchw`
    (the same ``inf``/NaN caveat).
    """
    if kernel_layout != "HWIO":
        weight = _hwio(weight, kernel_layout, name, data, groups)
    return _conv2d(False, data, weight, stride, padding, dilation, name, out_dtype, groups,
                   algorithm)


#: the NHWC convolutions' kernel layouts: ``(h, w, i, o)`` -> the weight's index
_KERNEL_LAYOUTS = {"OHWI": lambda h, w, i, o: (o, h, w, i),
                   "HWOI": lambda h, w, i, o: (h, w, o, i)}


def _hwio(weight, layout, name: str, data, groups):
    """``weight`` in ``layout`` (OHWI or HWOI) as an HWIO stage ``<name>.hwio``; without
    groups its input channels are checked against ``data``'s here, where the message can
    name the weight and its layout (not the stage)."""
    a = Args("conv2d_nhwc", name)
    if not isinstance(layout, str) or layout not in _KERNEL_LAYOUTS:
        a.fail(f"kernel_layout {layout!r:.40} is not one tecomp reads; give \"HWIO\" "
               f"([kh, kw, in, out]), \"OHWI\" ([out, kh, kw, in]) or \"HWOI\" "
               f"([kh, kw, out, in])")
    a.tensor("weight", weight, 4, {"OHWI": "OHWI [out, kh, kw, in]",
                                   "HWOI": "HWOI [kh, kw, out, in]"}[layout], "number")
    if groups == 1 and isinstance(data, Tensor) and data.ndim == 4:
        a.match("weight", weight, 3, "data", data, 3, "input channels",
                f"the weight is {layout}: its input channels are its last axis")
    at = _KERNEL_LAYOUTS[layout]
    shape = [None] * 4
    for d, e in zip(at(0, 1, 2, 3), weight.shape):
        shape[d] = e
    return _te.compute(tuple(shape), lambda h, w, i, o: weight[at(h, w, i, o)],
                       name=f"{name}.hwio", tag="injective,layout_transform")


def depthwise_conv2d_nchw(data: Tensor, weight: Tensor, stride: int | Sequence[int] = 1,
                          padding: int | str | Sequence = 0,
                          dilation: int | Sequence[int] = 1,
                          name: str = "depthwise_conv2d_nchw",
                          out_dtype: str | None = None) -> Tensor:
    """Depthwise 2-d convolution in NCHW (TOPI's ``depthwise_conv2d_nchw``): each input
    channel ``c`` convolved with its own ``M`` filters (the channel multiplier), output
    channel ``c * M + m``.  The same as ``torch.nn.functional.conv2d(data,
    weight.reshape(C * M, 1, KH, KW), groups=C)``.

    Parameters
    ----------
    data : Tensor
        ``[N, C, H, W]``.
    weight : Tensor
        ``[C, M, KH, KW]`` (TOPI's layout; the same memory as PyTorch's
        ``[C * M, 1, KH, KW]``, which :func:`conv2d_nchw` takes with ``groups=C``).
    stride, padding, dilation, out_dtype
        As :func:`conv2d_nchw`'s (float16/bfloat16 sum in float32).
    name : str, optional
        The output stage's name (tag ``depthwise_conv2d_nchw``); helper stages are
        ``<name>.<what>``.

    Returns
    -------
    Tensor
        ``[N, C * M, OH, OW]``.

    Raises
    ------
    ShapeError, DTypeError
        For an argument of the wrong rank, dtype or extent, or a padding it cannot read
        (the message names it).

    Examples
    --------
    >>> import tecomp as tc
    >>> import tecomp.nn as nn
    >>> X = tc.placeholder((1, 8, 14, 14), name="X"); W = tc.placeholder((8, 2, 3, 3), name="W")
    >>> tc.utils.get_const_tuple(nn.depthwise_conv2d_nchw(X, W, stride=2, padding=1).shape)
    (1, 16, 7, 7)
    """
    return _depthwise(True, data, weight, stride, padding, dilation, name, out_dtype)


def depthwise_conv2d_nhwc(data: Tensor, weight: Tensor, stride: int | Sequence[int] = 1,
                          padding: int | str | Sequence = 0,
                          dilation: int | Sequence[int] = 1,
                          name: str = "depthwise_conv2d_nhwc",
                          out_dtype: str | None = None) -> Tensor:
    """Depthwise 2-d convolution in NHWC (TOPI's ``depthwise_conv2d_nhwc``), output
    channel ``c * M + m``.

    Parameters
    ----------
    data : Tensor
        ``[N, H, W, C]``.
    weight : Tensor
        ``[KH, KW, C, M]`` (TOPI's and TensorFlow's layout; the same memory as
        :func:`conv2d_nhwc`'s ``[KH, KW, 1, C * M]`` with ``groups=C``).
    stride, padding, dilation, out_dtype
        As :func:`conv2d_nchw`'s.
    name : str, optional
        The output stage's name (tag ``depthwise_conv2d_nhwc``); helper stages are
        ``<name>.<what>``.

    Returns
    -------
    Tensor
        ``[N, OH, OW, C * M]``.

    Raises
    ------
    ShapeError, DTypeError
        For an argument of the wrong rank, dtype or extent, or a padding it cannot read
        (the message names it).
    """
    return _depthwise(False, data, weight, stride, padding, dilation, name, out_dtype)


# -- a Winograd convolution's gradient is the direct convolution's --------------------

def _direct_equivalent(out: Tensor):
    """The direct convolution a Winograd output ``out`` equals, and the data and weight it
    reads, or None where the weights come transformed (a placeholder: there is no weight
    to read).  ``tc.gradient`` differentiates it in ``out``'s place
    (:func:`tecomp.autodiff.register_tag_equivalent`): the data gradient is a
    convolution, the weight gradient a ``conv2d_*_wgrad``, as for ``algorithm="direct"``,
    instead of the adjoints of the transforms."""
    op = out.op
    conf = op.attrs.get("conv2d")
    ins = op.input_tensors
    if conf is None or len(ins) != 1 or "winograd_gemm" not in _tags(ins[0]):
        return None
    stages = {_tags(x)[0]: x for x in ins[0].op.input_tensors}
    V, U = stages.get("winograd_vt"), stages.get("winograd_weight")
    if V is None or U is None or len(V.op.input_tensors) != 1 \
            or len(U.op.input_tensors) != 1:
        return None
    weight, src = U.op.input_tensors[0], V.op.input_tensors[0]
    data = src.op.input_tensors[0] if V.op.attrs.get("winograd_padded") else src
    stride, pads, dilation = conf
    conv = conv2d_nchw if "winograd_conv2d_nchw" in _tags(out) else conv2d_nhwc
    direct = conv(data, weight, stride, pads, dilation, name=f"{op.name}.direct",
                  groups=int(U.shape[2].value))
    return direct, (data, weight)


register_tag_equivalent("winograd_conv2d_nchw", _direct_equivalent, override=True)
register_tag_equivalent("winograd_conv2d_nhwc", _direct_equivalent, override=True)
