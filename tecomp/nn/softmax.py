"""``softmax`` and ``log_softmax`` over any axis (the last by default), and the losses ``cross_entropy`` and
``mse_loss``."""
from __future__ import annotations

import math

from .. import te as _te
from ..te.tensor import Tensor
from ..autodiff.reverse import stop_gradient
from ._check import Args
from ._common import _acc, _rounded
from .transform import transpose

__all__ = ["softmax", "log_softmax", "cross_entropy", "mse_loss"]


# ---------------------------------------------------------------------------------
# softmax and losses


# The row maximum of softmax / log_softmax only shifts the exponent, so it is reduced
# with ``a > b ? a : b`` (one ``vmaxps``) rather than tc.max's NaN-propagating maximum
# (two instructions on x86): the outputs are the same.  A NaN in a row reaches the sum
# through exp (NaN - max is NaN), and +inf gives inf - inf = NaN there, so such a row
# comes out all NaN either way, as numpy's does.
shift_max = _te.comm_reducer(lambda a, b: _te.if_then_else(a > b, a, b),
                             lambda dt: _te.const(float("-inf"), dt), name="shift_max")


def _row_max(x, name):
    k = _te.reduce_axis(x.shape[-1], name="k")
    m = _te.compute(x.shape[:-1], lambda *i: shift_max(x[i + (k,)], axis=k), name=name)
    return stop_gradient(m)  # softmax does not depend on the shift: not differentiated


def _softmax_parts(x, op: str, name: str, exp=_te.exp):
    """The stages softmax and log_softmax share: ``(acc, max, exp, sum)``, the exps and
    their sum in ``acc`` (float32 for float16/bfloat16 ``x``; the maximum is exact in
    ``x``'s dtype)."""
    Args(op, name).tensor("x", x, (1, None), "[..., classes]")
    acc = _acc(x.dtype)
    m = _row_max(x, f"{name}.max")
    e = _te.compute(x.shape, lambda *i: exp(x[i].astype(acc) - m[i[:-1]].astype(acc)),
                    name=f"{name}.exp")
    k = _te.reduce_axis(x.shape[-1], name="k")
    s = _te.compute(x.shape[:-1], lambda *i: _te.sum(e[i + (k,)], axis=k), name=f"{name}.sum")
    return acc, m, e, s


def _along(x, op: str, name: str, axis, f):
    """``f(t, stage name)`` (an operator over the last axis of ``t``) over ``axis`` of
    ``x``: itself for the last axis, else between two transposes that swap ``axis`` and
    the last one (stages ``<name>.in`` and the output ``<name>``; ``f``'s output is
    ``<name>.last``)."""
    a = Args(op, name)
    a.tensor("x", x, (1, None), "[..., classes]")
    ax = a.axis("axis", axis, x.ndim, f"x ({x.name})")
    if ax == x.ndim - 1:
        return f(x, name)
    perm = list(range(x.ndim))
    perm[ax], perm[-1] = perm[-1], perm[ax]    # (a swap: its own inverse)
    y = f(transpose(x, perm, name=f"{name}.in"), f"{name}.last")
    return transpose(y, perm, name=name)


def softmax(x: Tensor, name: str = "softmax", *, axis: int = -1) -> Tensor:
    """Softmax over ``axis`` (the last by default; ``F.softmax``'s ``dim``).

    Stages ``.max`` (the row maximum), ``.exp`` (``exp(x - max)``), ``.sum``, ``.rcp``
    (``1 / sum``, one per row) and the output ``exp * rcp``: one reciprocal per row and
    a multiply per element, as PyTorch's CPU softmax does, at most one more rounding
    (6e-8 relative) than ``exp / sum`` (docs/numerics.md).  For float16/bfloat16 ``x``,
    ``.exp``, ``.sum`` and ``.rcp`` are float32 and the output rounds once.

    Over another axis than the last, the stages above compute the softmax of ``x`` with
    that axis swapped with the last (a transpose ``<name>.in``; the softmax's output is
    ``<name>.last``), and the output ``<name>`` swaps them back.

    Parameters
    ----------
    x : Tensor
        A float tensor, at least 1-d.
    name : str, optional
        The output stage's name; helper stages are ``<name>.<what>``.
    axis : int, optional
        The axis the softmax normalises (keyword only; negative ones count from the end).

    Returns
    -------
    Tensor
        The output.

    Raises
    ------
    ShapeError, DTypeError
        For an argument of the wrong rank, dtype or extent, or an axis out of range (the
        message names it).

    Examples
    --------
    >>> import tecomp as tc
    >>> import tecomp.nn as nn
    >>> X = tc.placeholder((4, 10), name="X")
    >>> [t.name for t in nn.softmax(X).op.input_tensors]
    ['softmax.exp', 'softmax.rcp']
    >>> tc.utils.get_const_tuple(nn.softmax(X, axis=0).shape)
    (4, 10)
    """
    return _along(x, "softmax", name, axis, lambda t, nm: _softmax(t, "softmax", nm, _te.exp))


def _softmax(x, op: str, name: str, exp):
    """:func:`softmax` with the exponential ``exp`` (``tc.exp`` or ``tc.fast_exp``)."""
    acc, m, e, s = _softmax_parts(x, op, name, exp)
    r = _te.compute(x.shape[:-1], lambda *i: _te.const(1.0, acc) / s[i], name=f"{name}.rcp")
    return _te.compute(x.shape, lambda *i: (e[i] * r[i[:-1]]).astype(x.dtype), name=name,
                       tag="softmax")


def log_softmax(x: Tensor, name: str = "log_softmax", *, axis: int = -1) -> Tensor:
    """Log-softmax over ``axis`` (the last by default): ``x - max - log(sum(exp(x -
    max)))`` (in float32 for float16/bfloat16 ``x``, rounded once); over another axis
    than the last between two transposes, as :func:`softmax`.

    Parameters
    ----------
    x : Tensor
        A float tensor, at least 1-d.
    name : str, optional
        The output stage's name; helper stages are ``<name>.<what>``.
    axis : int, optional
        The axis normalised (keyword only; negative ones count from the end).

    Returns
    -------
    Tensor
        The output.

    Raises
    ------
    ShapeError, DTypeError
        For an argument of the wrong rank, dtype or extent, or an axis out of range (the
        message names it).
    """
    return _along(x, "log_softmax", name, axis, _log_softmax)


def _log_softmax(x, name: str):
    acc, m, e, s = _softmax_parts(x, "log_softmax", name)
    return _te.compute(x.shape, lambda *i: (x[i].astype(acc) - m[i[:-1]].astype(acc) -
                                            _te.log(s[i[:-1]])).astype(x.dtype), name=name,
                       tag="log_softmax")

def cross_entropy(logits: Tensor, labels_onehot: Tensor, name: str = "cross_entropy") -> Tensor:
    """Mean over the batch of ``-sum_c labels[b, c] * log_softmax(logits)[b, c]`` (PyTorch's
    ``cross_entropy`` with probabilities as targets); summed in float32 for
    float16/bfloat16 logits.

    Parameters
    ----------
    logits : Tensor
        ``[B, C]``.
    labels_onehot : Tensor
        ``[B, C]``: probabilities (one-hot labels).
    name : str, optional
        The output stage's name; helper stages are ``<name>.<what>``.

    Returns
    -------
    Tensor
        Shape ``(1,)``: the mean.

    Raises
    ------
    ShapeError, DTypeError
        For an argument of the wrong rank, dtype or extent (the message names it).
    """
    a = Args("cross_entropy", name)
    a.tensor("logits", logits, 2, "[batch, classes]")
    a.tensor("labels_onehot", labels_onehot, 2, "[batch, classes]", like=("logits", logits))
    a.same_shape("labels_onehot", labels_onehot, "logits", logits)
    B = a.constant("logits", logits, 0, "batch")
    acc = _acc(logits.dtype)
    ls = log_softmax(logits, name=f"{name}.log_softmax")
    b = _te.reduce_axis(logits.shape[0], name="b")
    c = _te.reduce_axis(logits.shape[1], name="c")
    loss = _te.compute((1,), lambda i: _te.sum(
        labels_onehot[b, c].astype(acc) * ls[b, c].astype(acc) * (-1.0 / B), axis=[b, c]),
        name=name if acc == logits.dtype else f"{name}.acc", tag="loss")
    return _rounded(loss, logits.dtype, name)


def mse_loss(pred: Tensor, target: Tensor, name: str = "mse_loss") -> Tensor:
    """Mean of ``(pred - target)**2`` over every element (summed in float32 for
    float16/bfloat16 inputs).

    Parameters
    ----------
    pred : Tensor
        The prediction, any shape (0-d too).
    target : Tensor
        Of ``pred``'s shape and dtype.
    name : str, optional
        The output stage's name; helper stages are ``<name>.<what>``.

    Returns
    -------
    Tensor
        Shape ``(1,)``: the mean.

    Raises
    ------
    ShapeError, DTypeError
        For an argument of the wrong rank, dtype or extent (the message names it).
    """
    a = Args("mse_loss", name)
    a.tensor("pred", pred)
    a.tensor("target", target, pred.ndim, like=("pred", pred))
    a.same_shape("target", target, "pred", pred)
    n = math.prod(a.constant("pred", pred, d, "extent") for d in range(pred.ndim))
    acc = _acc(pred.dtype)
    axes = [_te.reduce_axis(e, name=f"k{d}") for d, e in enumerate(pred.shape)]

    def f(i):
        idx = tuple(ax.var for ax in axes)
        d = pred[idx].astype(acc) - target[idx].astype(acc)
        if not axes:    # 0-d tensors: the one squared difference (a sum over no axis is none)
            return d * d
        return _te.sum(d * d * (1.0 / n), axis=axes)

    loss = _te.compute((1,), f, name=name if acc == pred.dtype else f"{name}.acc", tag="loss")
    return _rounded(loss, pred.dtype, name)
