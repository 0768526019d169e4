"""2-d convolutions, NCHW (weight OIHW) and NHWC (weight HWIO)."""
from __future__ import annotations

from typing import Sequence

from .. import te as _te
from ..te.tensor import Tensor
from ._check import Args
from ._common import _acc, _rounded
from .transform import pad

__all__ = ["conv2d_nchw", "conv2d_nhwc"]


# ---------------------------------------------------------------------------------
# convolution


def _conv_compute(nchw: bool, src, weight, out_hw, stride, dilation, name: str, attrs,
                  acc=None):
    """The convolution stage itself: ``out_hw`` output rows and columns read from ``src``
    (the data, already padded) at ``y * stride + ky * dilation`` (and the same in x),
    both operands cast to ``acc`` (the accumulation dtype; None: ``src``'s) before they
    are multiplied and summed."""
    (sh, sw), (dh, dw) = stride, dilation
    acc = acc or src.dtype
    OH, OW = out_hw
    if nchw:
        N, C = src.shape[0], src.shape[1]
        O, KH, KW = weight.shape[0], weight.shape[2], weight.shape[3]
    else:
        N, C = src.shape[0], src.shape[3]
        KH, KW, O = weight.shape[0], weight.shape[1], weight.shape[3]
    c = _te.reduce_axis(C, name="c")
    ky = _te.reduce_axis(KH, name="ky")
    kx = _te.reduce_axis(KW, name="kx")
    if nchw:
        return _te.compute(
            (N, O, OH, OW),
            lambda n, o, y, x: _te.sum(
                src[n, c, y * sh + ky * dh, x * sw + kx * dw].astype(acc) *
                weight[o, c, ky, kx].astype(acc), axis=[c, ky, kx]),
            name=name, tag="conv2d_nchw", attrs=attrs)
    return _te.compute(
        (N, OH, OW, O),
        lambda n, y, x, o: _te.sum(src[n, y * sh + ky * dh, x * sw + kx * dw, c].astype(acc) *
                                   weight[ky, kx, c, o].astype(acc), axis=[ky, kx, c]),
        name=name, tag="conv2d_nhwc", attrs=attrs)


def _conv2d(nchw: bool, data, weight, stride, padding, dilation, name: str, out_dtype):
    op = "conv2d_nchw" if nchw else "conv2d_nhwc"
    a = Args(op, name)
    a.tensor("data", data, 4, "NCHW [batch, channels, height, width]" if nchw else
             "NHWC [batch, height, width, channels]", "number")
    a.tensor("weight", weight, 4, "OIHW [out, in, kh, kw]" if nchw else
             "HWIO [kh, kw, in, out]", "number")
    out_dtype = a.out_dtype(out_dtype, (data, weight))
    a.operands([("data", data), ("weight", weight)], out_dtype)
    stride = a.ints("stride", stride, 1)
    padding = a.ints("padding", padding, 0)
    dilation = a.ints("dilation", dilation, 1)
    dsp, wsp = ((2, 3), (2, 3)) if nchw else ((1, 2), (0, 1))
    a.match("weight", weight, 1 if nchw else 2, "data", data, 1 if nchw else 3,
            "input channels")
    hw = tuple(a.constant("data", data, d, what) for d, what in zip(dsp, ("height", "width")))
    khw = tuple(a.constant("weight", weight, d, what)
                for d, what in zip(wsp, ("kernel height", "kernel width")))
    OH, OW = a.window(hw, khw, stride, padding, dilation, "data")
    (ph, pw) = padding
    src = data
    if ph or pw:
        src = pad(data, (0, 0, ph, pw) if nchw else (0, ph, pw, 0), name=f"{name}.pad")
    acc = _acc(data.dtype, out_dtype)
    out = out_dtype or data.dtype
    conv = _conv_compute(nchw, src, weight, (OH, OW), stride, dilation,
                         name if acc == out else f"{name}.acc",
                         {"conv2d": (stride, padding, dilation)}, acc)
    return _rounded(conv, out, name)


def conv2d_nchw(data: Tensor, weight: Tensor, stride: int | Sequence[int] = 1,
                padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1,
                name: str = "conv2d_nchw", out_dtype: str | None = None) -> Tensor:
    """2-d convolution (cross-correlation, as PyTorch) in NCHW.

    Parameters
    ----------
    data : Tensor
        ``[N, C, H, W]``.
    weight : Tensor
        ``[O, C, KH, KW]``.
    stride : int or (int, int), optional
        The stride.
    padding : int or (int, int), optional
        Zeros added on both sides.
    dilation : int or (int, int), optional
        The kernel's dilation.
    out_dtype : str, optional
        As :func:`dense`'s: None keeps the data's dtype and sums float16/bfloat16
        products in float32 (the stage ``<name>.acc``, rounded once by ``<name>``); a
        dtype casts both operands to it and is the output's.
    name : str, optional
        The output stage's name; helper stages are ``<name>.<what>``.

    Returns
    -------
    Tensor
        ``[N, O, OH, OW]``.

    Raises
    ------
    ShapeError, DTypeError
        For an argument of the wrong rank, dtype or extent (the message names it).

    Examples
    --------
    >>> import tecomp as tc
    >>> import tecomp.nn as nn
    >>> X = tc.placeholder((1, 3, 8, 8), name="X"); W = tc.placeholder((4, 3, 3, 3), name="W")
    >>> tc.utils.get_const_tuple(nn.conv2d_nchw(X, W, padding=1).shape)
    (1, 4, 8, 8)
    """
    return _conv2d(True, data, weight, stride, padding, dilation, name, out_dtype)


def conv2d_nhwc(data: Tensor, weight: Tensor, stride: int | Sequence[int] = 1,
                padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1,
                name: str = "conv2d_nhwc", out_dtype: str | None = None) -> Tensor:
    """2-d convolution in NHWC, weights in HWIO (TensorFlow's and TVM's NHWC layout).

    Parameters
    ----------
    data : Tensor
        ``[N, H, W, C]``.
    weight : Tensor
        ``[KH, KW, C, O]``.
    stride, padding, dilation, out_dtype
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
        For an argument of the wrong rank, dtype or extent (the message names it).
    """
    return _conv2d(False, data, weight, stride, padding, dilation, name, out_dtype)
