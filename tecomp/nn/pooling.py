"""2-d max and average pooling (NCHW)."""
from __future__ import annotations

import math
from typing import Sequence

from .. import te as _te
from ..te.tensor import Tensor
from ._check import Args
from ._common import _acc
from .transform import pad

__all__ = ["max_pool2d", "avg_pool2d"]


# ---------------------------------------------------------------------------------
# pooling (NCHW)


def _pool_args(op: str, name: str, data, kernel, stride, padding):
    """Check a pooling's arguments; return ``(kernel, stride, padding, (H, W), (OH, OW))``
    as pairs."""
    a = Args(op, name)
    a.tensor("data", data, 4, "NCHW [batch, channels, height, width]")
    k = a.ints("kernel", kernel, 1)
    s = a.ints("stride", kernel if stride is None else stride, 1)
    p = a.ints("padding", padding, 0)
    if p[0] > k[0] // 2 or p[1] > k[1] // 2:
        a.fail(f"padding {p[0]}x{p[1]} is more than half the {k[0]}x{k[1]} kernel; a window "
               "could then hold padding only (PyTorch's rule: padding <= kernel // 2)")
    hw = (a.constant("data", data, 2, "height"), a.constant("data", data, 3, "width"))
    return k, s, p, hw, a.window(hw, k, s, p, (1, 1), "data")


def max_pool2d(data: Tensor, kernel: int | Sequence[int],
               stride: int | Sequence[int] | None = None, padding: int | Sequence[int] = 0,
               name: str = "max_pool2d") -> Tensor:
    """Max pooling over ``[N, C, H, W]``; padding is ``-inf`` (never the maximum).

    The gradient goes to the first maximum of each window in row-major order
    (PyTorch's rule).

    Parameters
    ----------
    data : Tensor
        ``[N, C, H, W]``.
    kernel : int or (int, int)
        The window.
    stride : int or (int, int), optional
        The stride (default: the kernel).
    padding : int or (int, int), optional
        At most half the kernel (PyTorch's rule).
    name : str, optional
        The output stage's name; helper stages are ``<name>.<what>``.

    Returns
    -------
    Tensor
        ``[N, C, OH, OW]``.

    Raises
    ------
    ShapeError, DTypeError
        For an argument of the wrong rank, dtype or extent (the message names it).
    """
    (kh, kw), (sh, sw), (ph, pw), _, (OH, OW) = _pool_args("max_pool2d", name, data, kernel,
                                                          stride, padding)
    N, C = data.shape[:2]
    src = pad(data, (0, 0, ph, pw), value=-math.inf, name=f"{name}.pad") if (ph or pw) else data
    ky = _te.reduce_axis(kh, name="ky")
    kx = _te.reduce_axis(kw, name="kx")
    return _te.compute((N, C, OH, OW),
                       lambda n, c, y, x: _te.max(src[n, c, y * sh + ky, x * sw + kx],
                                                  axis=[ky, kx]),
                       name=name, tag="pool_max")


def avg_pool2d(data: Tensor, kernel: int | Sequence[int],
               stride: int | Sequence[int] | None = None, padding: int | Sequence[int] = 0,
               count_include_pad: bool = True, name: str = "avg_pool2d") -> Tensor:
    """Average pooling over ``[N, C, H, W]`` with zero padding.

    The window sums (``<name>.sum``) of float16/bfloat16 data are float32.

    Parameters
    ----------
    data : Tensor
        ``[N, C, H, W]``.
    kernel : int or (int, int)
        The window.
    stride : int or (int, int), optional
        The stride (default: the kernel).
    padding : int or (int, int), optional
        At most half the kernel.
    count_include_pad : bool, optional
        Divide by the window size (True, PyTorch's default) or by the number of
        unpadded elements.
    name : str, optional
        The output stage's name; helper stages are ``<name>.<what>``.

    Returns
    -------
    Tensor
        ``[N, C, OH, OW]``.

    Raises
    ------
    ShapeError, DTypeError
        For an argument of the wrong rank, dtype or extent (the message names it).
    """
    (kh, kw), (sh, sw), (ph, pw), (H, W), (OH, OW) = _pool_args(
        "avg_pool2d", name, data, kernel, stride, padding)
    N, C = data.shape[:2]
    acc = _acc(data.dtype)
    src = pad(data, (0, 0, ph, pw), name=f"{name}.pad") if (ph or pw) else data
    ky = _te.reduce_axis(kh, name="ky")
    kx = _te.reduce_axis(kw, name="kx")
    s = _te.compute((N, C, OH, OW),
                    lambda n, c, y, x: _te.sum(src[n, c, y * sh + ky, x * sw + kx].astype(acc),
                                               axis=[ky, kx]),
                    name=f"{name}.sum", tag="pool_sum")
    if count_include_pad or not (ph or pw):
        return _te.compute(s.shape, lambda n, c, y, x: (s[n, c, y, x] * (1.0 / (kh * kw))).astype(
            data.dtype), name=name, tag="pool_avg")

    def f(n, c, y, x):
        y0, x0 = y * sh - ph, x * sw - pw
        hh = _te.minimum(y0 + kh, H) - _te.maximum(y0, 0)
        ww = _te.minimum(x0 + kw, W) - _te.maximum(x0, 0)
        return (s[n, c, y, x] / (hh * ww).astype(acc)).astype(data.dtype)

    return _te.compute(s.shape, f, name=name, tag="pool_avg")
