"""Activations with their own stages and tags: ``relu``, ``sigmoid``, ``tanh``, ``gelu``,
``bias_add`` (the elementwise math operators are in :mod:`tecomp.nn.elementwise`)."""
from __future__ import annotations

import math

from .. import te as _te
from ..te.tensor import Tensor
from ._check import Args
from ._common import _c, _elementwise

__all__ = ["relu", "sigmoid", "tanh", "gelu", "bias_add"]


# ---------------------------------------------------------------------------------
# elementwise


def relu(x: Tensor, name: str = "relu") -> Tensor:
    """``max(x, 0)``; its gradient is 0 at 0 (PyTorch's).

    Parameters
    ----------
    x : Tensor
        A number tensor.
    name : str, optional
        The output stage's name; helper stages are ``<name>.<what>``.

    Returns
    -------
    Tensor
        The output.

    Raises
    ------
    ShapeError, DTypeError
        For an argument of the wrong rank, dtype or extent (the message names it).
    """
    return _elementwise(x, lambda v: _te.if_then_else(v > 0, v, _c(0, x.dtype)), "relu", name,
                        "number")


def sigmoid(x: Tensor, name: str = "sigmoid") -> Tensor:
    """``1 / (1 + exp(-x))``, elementwise (``tc.sigmoid`` of each element).

    Parameters
    ----------
    x : Tensor
        A float tensor.
    name : str, optional
        The output stage's name; helper stages are ``<name>.<what>``.

    Returns
    -------
    Tensor
        The output.

    Raises
    ------
    ShapeError, DTypeError
        For an argument of the wrong rank, dtype or extent (the message names it).
    """
    return _elementwise(x, _te.sigmoid, "sigmoid", name)


def tanh(x: Tensor, name: str = "tanh") -> Tensor:
    """The hyperbolic tangent, elementwise (``tc.tanh`` of each element).

    Parameters
    ----------
    x : Tensor
        A float tensor.
    name : str, optional
        The output stage's name; helper stages are ``<name>.<what>``.

    Returns
    -------
    Tensor
        The output.

    Raises
    ------
    ShapeError, DTypeError
        For an argument of the wrong rank, dtype or extent (the message names it).
    """
    return _elementwise(x, _te.tanh, "tanh", name)


def gelu(x: Tensor, name: str = "gelu") -> Tensor:
    """``0.5 * x * (1 + erf(x / sqrt(2)))`` (the exact, erf form).

    Parameters
    ----------
    x : Tensor
        A float tensor.
    name : str, optional
        The output stage's name; helper stages are ``<name>.<what>``.

    Returns
    -------
    Tensor
        The output.

    Raises
    ------
    ShapeError, DTypeError
        For an argument of the wrong rank, dtype or extent (the message names it).
    """
    return _elementwise(x, lambda v: 0.5 * v * (1.0 + _te.erf(v * (1.0 / math.sqrt(2.0)))),
                        "gelu", name)


def bias_add(x: Tensor, bias: Tensor, axis: int = 1, name: str = "bias_add") -> Tensor:
    """``x + bias`` broadcast along ``axis``.

    Parameters
    ----------
    x : Tensor
        The tensor.
    bias : Tensor
        1-d, of ``x``'s extent along ``axis``.
    axis : int, optional
        The channel axis 1 of NCHW by default; -1 for the last.
    name : str, optional
        The output stage's name; helper stages are ``<name>.<what>``.

    Returns
    -------
    Tensor
        The output.

    Raises
    ------
    ShapeError, DTypeError
        For an argument of the wrong rank, dtype or extent (the message names it).
    """
    a = Args("bias_add", name)
    a.tensor("x", x, dtype="number")
    a.tensor("bias", bias, 1, "[channels]", like=("x", x), dtype="number")
    ax = a.axis("axis", axis, x.ndim, f"x ({x.name})")
    a.match("bias", bias, 0, "x", x, ax, "elements", f"one bias per element of axis {axis}")
    return _te.compute(x.shape, lambda *i: x[i] + bias[i[ax]], name=name, tag="bias_add")
