"""Normalisations: ``batch_norm`` (training and inference, with its analytic gradient),
``batch_norm_train`` and ``layer_norm``."""
from __future__ import annotations

import math
from typing import Tuple

from .. import te as _te
from ..ir.expr import Const
from ..te.tensor import Tensor
from ..autodiff.reverse import stop_gradient
from ..autodiff.rules import register_tag_derivative as _register_tag_derivative
from ._check import Args, shape_text as _shape_text
from ._common import _acc, _c

__all__ = ["batch_norm", "batch_norm_train", "layer_norm"]


# ---------------------------------------------------------------------------------
# normalisation


def _norm_args(op: str, name: str, x, gamma, beta, eps, rank, layout: str, axis: int,
               what: str):
    """Check a normalisation's arguments (``gamma`` and ``beta`` one value per ``what``,
    ``x``'s axis ``axis``); return ``(Args, eps)``."""
    a = Args(op, name)
    a.tensor("x", x, rank, layout)
    for arg, t in (("gamma", gamma), ("beta", beta)):
        a.tensor(arg, t, 1, f"[{what}]", like=("x", x))
        a.match(arg, t, 0, "x", x, axis % x.ndim, what)
    return a, a.number("eps", eps, 0.0)


_BN_LAYOUTS = {"NCHW": (1, "NCHW [batch, channels, height, width]"),
               "NHWC": (3, "NHWC [batch, height, width, channels]")}


def batch_norm(x: Tensor, gamma: Tensor | None = None, beta: Tensor | None = None,
               running_mean: Tensor | None = None, running_var: Tensor | None = None,
               training: bool = True, momentum: float = 0.1, eps: float = 1e-5,
               layout: str = "NCHW", relu: bool = False,
               name: str = "batch_norm") -> Tensor | Tuple[Tensor, Tensor, Tensor]:
    """Batch norm over the channels of a 4-d ``x`` (``torch.nn.functional.batch_norm``).

    Training (``training=True``): the per-channel batch mean and biased variance (stages
    ``.mean``, ``.var``, ``.invstd``), then ``(x - mean) * invstd * gamma + beta``.  With
    ``running_mean`` and ``running_var`` it also returns their updated values, as PyTorch
    updates its buffers: ``(1 - momentum) * running + momentum * batch``, with the
    *unbiased* batch variance (``var * m / (m - 1)`` over ``m`` values per channel) in the
    running estimate and the biased one in the normalisation.

    Inference (``training=False``): ``(x - running_mean) * rsqrt(running_var + eps) *
    gamma + beta`` (stage ``.invstd``), one elementwise pass.

    ``relu=True`` applies ``max(., 0)`` in the same stage.  The statistics of
    float16/bfloat16 ``x`` are float32 (as PyTorch's), and so is the arithmetic of the
    output, rounded once.

    ``tc.gradient`` of the training form is analytic (registered for the tag
    ``batch_norm``): with ``g`` the incoming gradient (zero where the fused ReLU is),
    ``xhat = (x - mean) * invstd`` and ``m`` values per channel, ``d beta = sum g``,
    ``d gamma = sum g * xhat`` and ``d x = gamma * invstd * (g - (d beta + xhat * d gamma)
    / m)``: the two sums in one reduction (stage ``.grad_sums``, two outputs) and one
    elementwise pass, not the gradient of the statistics' reductions.  The statistics stages are constants for differentiation.

    Parameters
    ----------
    x : Tensor
        ``[N, C, H, W]`` (``layout="NCHW"``) or ``[N, H, W, C]`` (``"NHWC"``), float.
    gamma, beta : Tensor, optional
        ``[C]``, ``x``'s dtype; None: no scale (1) / no shift (0), PyTorch's
        ``affine=False``.
    running_mean, running_var : Tensor, optional
        ``[C]``, any float dtype (the updated values have it).  Required with
        ``training=False``; in training both or neither.
    training : bool, optional
        Batch statistics (True) or the running ones (False).
    momentum : float, optional
        In ``[0, 1]``: the weight of the batch statistics in the running ones.
    eps : float, optional
        Added to the variance: ``>= 0``, and ``> 0`` in training (as PyTorch's).
    layout : {"NCHW", "NHWC"}, optional
        Where the channels are.
    relu : bool, optional
        Fuse a following ReLU.
    name : str, optional
        The output stage's name; helper stages are ``<name>.<what>``.

    Returns
    -------
    Tensor or (Tensor, Tensor, Tensor)
        The output; in training with running statistics ``(output, new_running_mean,
        new_running_var)`` (stages ``<name>.running_mean`` and ``<name>.running_var``).

    Raises
    ------
    ShapeError, DTypeError
        For an argument of the wrong rank, dtype or extent, a bad ``momentum``, ``eps``
        or ``layout``, or running statistics missing where they are needed (the message
        names it).

    Examples
    --------
    >>> import tecomp as tc
    >>> import tecomp.nn as nn
    >>> X = tc.placeholder((8, 16, 4, 4), name="X")
    >>> G, B = tc.placeholder((16,), name="G"), tc.placeholder((16,), name="B")
    >>> RM, RV = tc.placeholder((16,), name="RM"), tc.placeholder((16,), name="RV")
    >>> y, rm, rv = nn.batch_norm(X, G, B, RM, RV, training=True, relu=True)
    >>> rm.name, rv.name
    ('batch_norm.running_mean', 'batch_norm.running_var')
    """
    a = Args("batch_norm", name)
    if layout not in _BN_LAYOUTS:
        a.fail(f"layout must be 'NCHW' or 'NHWC', got {layout!r}")
    if not isinstance(training, bool) or not isinstance(relu, bool):
        a.fail(f"training and relu must be bools, got {training!r} and {relu!r}")
    momentum = a.number("momentum", momentum, 0.0)
    if momentum > 1.0:
        a.fail(f"momentum must be in [0, 1], got {momentum}")
    return _batch_norm("batch_norm", name, x, gamma, beta, running_mean, running_var, training,
                       momentum, eps, layout, relu)[0]


def _batch_norm(op: str, name: str, x, gamma, beta, running_mean, running_var, training: bool,
                momentum: float, eps: float, layout: str, relu: bool):
    """:func:`batch_norm` (the operator ``op``, whose messages name it): ``(result, mean,
    var)``, ``result`` what :func:`batch_norm` returns, ``mean`` and ``var`` the batch
    statistics (None in inference)."""
    axis, desc = _BN_LAYOUTS[layout]
    a = Args(op, name)
    a.tensor("x", x, 4, desc)
    for arg, t in (("gamma", gamma), ("beta", beta)):
        if t is not None:
            a.tensor(arg, t, 1, "[channels]", like=("x", x))
            a.match(arg, t, 0, "x", x, axis, "channels")
    if (running_mean is None) != (running_var is None):
        a.fail("give both running_mean and running_var, or neither")
    if running_mean is None and not training:
        a.fail("inference (training=False) normalises with running_mean and running_var; "
               "give them")
    for arg, t in (("running_mean", running_mean), ("running_var", running_var)):
        if t is not None:
            a.tensor(arg, t, 1, "[channels]")
            a.match(arg, t, 0, "x", x, axis, "channels")
    eps = a.number("eps", eps, 0.0)
    if training and eps == 0.0:
        a.fail("eps must be > 0 in training, got 0.0: a channel whose values in the batch "
               "are all equal has variance 0, and rsqrt(0) makes its outputs NaN "
               "(PyTorch refuses it too); give a small positive eps such as 1e-5")
    acc = _acc(x.dtype)
    C = x.shape[axis]

    def at(idx, c):   # x's element at (n, h, w) of channel c
        n_, h_, w_ = idx
        return x[(n_, c, h_, w_) if axis == 1 else (n_, h_, w_, c)]

    def affine(v, c):
        if gamma is not None:
            v = v * gamma[c].astype(acc)
        if beta is not None:
            v = v + beta[c].astype(acc)
        if relu:
            v = _te.if_then_else(v > 0, v, _c(0, acc))
        return v.astype(x.dtype)

    def channel(*i):
        return i[axis], tuple(v for k, v in enumerate(i) if k != axis)

    tags = ("batch_norm" if training else "batch_norm_inference") + (",relu" if relu else "")
    if not training:
        invstd = _te.compute((C,), lambda c: _te.rsqrt(running_var[c].astype(acc) + eps),
                             name=f"{name}.invstd")

        def infer(*i):
            c, rest = channel(*i)
            return affine((at(rest, c).astype(acc) - running_mean[c].astype(acc)) * invstd[c],
                          c)

        return _te.compute(x.shape, infer, name=name, tag=tags), None, None
    dims = [d for d in range(4) if d != axis]
    M = _bn_count(x, dims)
    if isinstance(M, int) and M < 2:
        a.fail(f"x ({x.name}) {_shape_text(x.shape)} has {M} value per channel; training "
               f"needs more than 1 (as PyTorch's): a larger batch, or training=False")
    inv_m = _bn_inverse(M, acc)

    def raxes():
        return [_te.reduce_axis(x.shape[d], name=n) for d, n in zip(dims, "nhw")]

    r1 = raxes()
    mean = _te.compute((C,), lambda c: _te.sum(at(r1, c).astype(acc) * inv_m, axis=r1),
                       name=f"{name}.mean")
    r2 = raxes()

    def var_f(c):
        d = at(r2, c).astype(acc) - mean[c]
        return _te.sum(d * d * inv_m, axis=r2)

    var = _te.compute((C,), var_f, name=f"{name}.var")
    invstd = _te.compute((C,), lambda c: _te.rsqrt(var[c] + eps), name=f"{name}.invstd")
    for t in (mean, var, invstd):   # the gradient is the analytic one (_batch_norm_grad)
        stop_gradient(t)

    def train(*i):
        c, rest = channel(*i)
        return affine((at(rest, c).astype(acc) - mean[c]) * invstd[c], c)

    out = _te.compute(x.shape, train, name=name, tag=tags,
                      attrs={"batch_norm": (axis, relu, gamma is not None,
                                            beta is not None)})
    if running_mean is None:
        return out, mean, var
    # the unbiased variance m / (m - 1) * var in the running estimate
    unbias = M / (M - 1) if isinstance(M, int) else None
    new = []
    for what, r, stat, k in (("running_mean", running_mean, mean, 1.0),
                             ("running_var", running_var, var, unbias)):
        if k is None:   # a symbolic count m
            rd = _acc(r.dtype)
            m = M.astype(rd)
            k = m / (m - _c(1, rd))
            weight = k * _c(momentum, rd)
        else:
            weight = momentum * k
        new.append(_te.compute((C,), _running_update(r, stat, weight, momentum),
                               name=f"{name}.{what}"))
    return (out, new[0], new[1]), mean, var


def _bn_count(x, dims):
    """The number of values per channel of ``x`` (the product of the extents ``dims``): an
    int, or an expression of its symbolic extents."""
    ext = [x.shape[d] for d in dims]
    if all(isinstance(e, Const) for e in ext):
        return math.prod(int(e.value) for e in ext)
    m = ext[0]
    for e in ext[1:]:
        m = m * e
    return m


def _bn_inverse(M, dtype: str):
    """``1 / M`` (:func:`_bn_count`) as a ``dtype`` value."""
    if isinstance(M, int):
        return _c(1.0 / M, dtype)
    return _c(1.0, dtype) / M.astype(dtype)


def _running_update(r, stat, weight, momentum: float):
    """The body of a running statistic's update: ``(1 - momentum) * r + weight * stat``
    in ``r``'s dtype (its accumulation dtype for float16/bfloat16); ``weight`` a float or
    an expression."""
    rd = _acc(r.dtype)
    return lambda c: (r[c].astype(rd) * (1.0 - momentum) + stat[c].astype(rd) * weight
                      ).astype(r.dtype)


def _batch_norm_grad(out, adjoint, wanted):
    """The analytic gradient of a training batch norm's output stage (tag
    ``batch_norm``) for its wanted inputs (``x``, ``gamma``, ``beta``): see
    :func:`batch_norm`."""
    axis, relu, has_gamma, has_beta = out.op.attrs["batch_norm"]
    ins = list(out.op.input_tensors)
    stats = {t.name[len(out.name) + 1:]: t for t in ins if t.name.startswith(out.name + ".")}
    mean, invstd = stats.get("mean"), stats.get("invstd")
    xs = [t for t in ins if t.ndim == 4]
    params = [t for t in ins if t.ndim == 1 and t is not mean and t is not invstd]
    if mean is None or invstd is None or len(xs) != 1:
        return None
    x = xs[0]
    gamma = params[0] if has_gamma else None
    beta = (params[-1] if has_beta else None)
    acc = mean.dtype
    C = x.shape[axis]
    dims = [d for d in range(4) if d != axis]
    inv_m = _bn_inverse(_bn_count(x, dims), acc)

    def split(i):
        return i[axis], tuple(i[d] for d in dims)

    def g(i):   # the incoming gradient, zero where the fused ReLU is
        v = adjoint[i].astype(acc) if adjoint is not None else _c(1, acc)
        if relu:
            v = _te.if_then_else(out[i] > 0, v, _c(0, acc))
        return v

    def sums(c):   # both in one pass over x and the incoming gradient
        r = [_te.reduce_axis(x.shape[d], name=n) for d, n in zip(dims, "nhw")]
        idx = [None] * 4
        idx[axis] = c
        for d, v in zip(dims, r):
            idx[d] = v
        i = tuple(idx)
        return (_te.sum(g(i), axis=r), _te.sum(g(i) * (x[i].astype(acc) - mean[c]), axis=r))

    sum_g, sum_gx = _te.compute((C,), sums, name=f"{out.name}.grad_sums",
                                tag="batch_norm_grad")
    res = {}
    if any(t is x for t in wanted):
        def dx(*i):
            c, _ = split(i)
            scale = invstd[c] if gamma is None else invstd[c] * gamma[c].astype(acc)
            xhat = (x[i].astype(acc) - mean[c]) * invstd[c]
            return (scale * (g(i) - (sum_g[c] + xhat * sum_gx[c] * invstd[c]) * inv_m)
                    ).astype(x.dtype)
        res[x] = _te.compute(x.shape, dx, name=f"{x.name}.grad", tag="batch_norm_grad")
    dgamma = None
    if gamma is not None and any(t is gamma for t in wanted):
        dgamma = lambda c: sum_gx[c] * invstd[c]   # noqa: E731
    dbeta = None
    if beta is not None and any(t is beta for t in wanted):
        dbeta = lambda c: sum_g[c]   # noqa: E731
    if gamma is not None and gamma is beta and dgamma is not None:
        res[gamma] = _te.compute((C,), lambda c: (dgamma(c) + dbeta(c)).astype(gamma.dtype),
                                 name=f"{gamma.name}.grad", tag="batch_norm_grad")
        return res
    def cast(f, dtype):
        return lambda c: f(c).astype(dtype)

    for t, f in ((gamma, dgamma), (beta, dbeta)):
        if f is not None:
            res[t] = _te.compute((C,), cast(f, t.dtype), name=f"{t.name}.grad",
                                 tag="batch_norm_grad")
    return res


_register_tag_derivative("batch_norm", _batch_norm_grad)


def batch_norm_train(x: Tensor, gamma: Tensor, beta: Tensor, eps: float = 1e-5,
                     name: str = "batch_norm", return_stats: bool = False) -> Tensor | Tuple[Tensor, Tensor, Tensor]:
    """Batch norm in training mode over ``x[N, C, H, W]``: per-channel batch mean and
    biased variance (stages ``.mean``, ``.var``, ``.invstd``), then
    ``(x - mean) * invstd * gamma + beta``.

    The statistics of float16/bfloat16 ``x`` are float32 (as PyTorch's), and so is the
    arithmetic of the output, rounded once.  :func:`batch_norm` with ``training=True``
    and no running statistics; its gradient is the analytic one described there.

    Parameters
    ----------
    x : Tensor
        ``[N, C, H, W]``.
    gamma : Tensor
        ``[C]``.
    beta : Tensor
        ``[C]``.
    eps : float, optional
        Added to the variance, ``> 0`` (as PyTorch's in training).
    return_stats : bool, optional
        Also return ``(mean, var)`` (e.g. to update running statistics).
    name : str, optional
        The output stage's name; helper stages are ``<name>.<what>``.

    Returns
    -------
    Tensor or (Tensor, Tensor, Tensor)
        The output, or ``(output, mean, var)``.

    Raises
    ------
    ShapeError, DTypeError
        For an argument of the wrong rank, dtype or extent (the message names it).
    """
    out, mean, var = _batch_norm("batch_norm_train", name, x, gamma, beta, None, None, True,
                                 0.0, eps, "NCHW", False)
    return (out, mean, var) if return_stats else out


def layer_norm(x: Tensor, gamma: Tensor, beta: Tensor, eps: float = 1e-5,
               name: str = "layer_norm") -> Tensor:
    """Layer norm over the last axis of ``x[..., D]`` (biased variance, as PyTorch).

    The statistics (``.mean``, ``.var``, ``.invstd``) of float16/bfloat16 ``x`` are
    float32, and so is the arithmetic of the output, rounded once.

    Parameters
    ----------
    x : Tensor
        ``[..., D]``.
    gamma : Tensor
        ``[D]``.
    beta : Tensor
        ``[D]``.
    eps : float, optional
        Added to the variance.
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
    a, eps = _norm_args("layer_norm", name, x, gamma, beta, eps, (1, None), "[..., features]",
                        -1, "features")
    D = a.constant("x", x, x.ndim - 1, "normalised extent")
    acc = _acc(x.dtype)
    k = _te.reduce_axis(x.shape[-1], name="k")
    lead = x.shape[:-1]
    mean = _te.compute(lead, lambda *i: _te.sum(x[i + (k,)].astype(acc) * (1.0 / D), axis=k),
                       name=f"{name}.mean")
    k2 = _te.reduce_axis(x.shape[-1], name="k")

    def var_f(*i):
        d = x[i + (k2,)].astype(acc) - mean[i]
        return _te.sum(d * d * (1.0 / D), axis=k2)

    var = _te.compute(lead, var_f, name=f"{name}.var")
    invstd = _te.compute(lead, lambda *i: _te.rsqrt(var[i] + eps), name=f"{name}.invstd")
    return _te.compute(x.shape, lambda *i: (
        (x[i].astype(acc) - mean[i[:-1]]) * invstd[i[:-1]] * gamma[i[-1]].astype(acc) +
        beta[i[-1]].astype(acc)).astype(x.dtype), name=name, tag="layer_norm")
