"""Scaled dot-product attention (``torch.nn.functional.scaled_dot_product_attention``)."""
from __future__ import annotations

import math

from .. import te as _te
from ..errors import DTypeError
from ..ir.expr import Const
from ..te.tensor import Tensor
from ..autodiff.reverse import stop_gradient
from ._check import Args, same_extent as _same, shape_text as _shape_text
from ._common import _acc, _c, _is_one
from .softmax import shift_max

__all__ = ["scaled_dot_product_attention"]


# ---------------------------------------------------------------------------------
# attention


def _attention_args(q, k, v, mask, scale, name):
    """Check :func:`scaled_dot_product_attention`'s arguments; return the scale (a float)."""
    a = Args("scaled_dot_product_attention", name)
    for what, t in (("q", q), ("k", k), ("v", v)):
        a.tensor(what, t, 4, "(batch, heads, seq, dim)",
                 like=None if what == "q" else ("q", q))
    for d, label in ((0, "batches"), (1, "heads")):
        for what, t in (("k", k), ("v", v)):
            a.match(what, t, d, "q", q, d, label)
    a.match("k", k, 3, "q", q, 3, "dims", "the scores q.k need the same dim")
    a.match("v", v, 2, "k", k, 2, "keys", "give v one row per key")
    if mask is not None:
        full = (q.shape[0], q.shape[1], q.shape[2], k.shape[2])
        broadcast = (f"broadcasting to (batch, heads, Lq, Lk) = {_shape_text(full)}, aligned "
                     "on the right as PyTorch's; a mask over the keys alone is (1, Lk)")
        a.tensor("mask", mask, (2, 4), f"({broadcast})", dtype=None)
        if mask.dtype not in ("bool", q.dtype):
            a.fail(f"mask ({mask.name}) is {mask.dtype}; give an additive mask of q's dtype "
                   f"{q.dtype} or a bool mask (True: attend)", DTypeError)
        for d in range(mask.ndim):
            e, want = mask.shape[-1 - d], full[-1 - d]
            if not (_is_one(e) or _same(e, want)):
                a.fail(f"mask ({mask.name}) has shape {_shape_text(mask.shape)}, which does "
                       f"not broadcast to (batch, heads, Lq, Lk) = {_shape_text(full)}: its "
                       f"axis {mask.ndim - 1 - d} is {e}, expected {want} or 1 (e.g. (batch, "
                       "1, 1, Lk) for padding, (Lq, Lk) for a causal mask)")
    if scale is None:
        if not isinstance(q.shape[3], Const):
            a.fail(f"q's dim ({q.name}.shape[3] = {q.shape[3]}) is symbolic, so the default "
                   "scale 1/sqrt(dim) is unknown; give scale= explicitly")
        return 1.0 / math.sqrt(int(q.shape[3].value))
    return a.number("scale (or None for 1/sqrt(dim))", scale)


def scaled_dot_product_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None,
                                 scale: float | None = None, name: str = "sdpa") -> Tensor:
    """``softmax(q k^T * scale + mask) v`` per batch and head
    (``F.scaled_dot_product_attention``).

    Stages, all ordinary computes (``tc.gradient`` differentiates them):
    ``<name>.scores`` (``sum_d q k``), ``<name>.max`` (the row maximum of the scaled,
    masked scores, a constant for autodiff), ``<name>.exp`` (``exp(scores * scale + mask -
    max)``), ``<name>.sum``, ``<name>.rcp`` (``1 / sum``), ``<name>.pv`` (``exp @ v``) and
    the output ``pv * rcp``.  For float16/bfloat16 inputs every stage but the output is
    float32 (the output rounds once).  As written they hold ``Lq x Lk`` scores;
    :func:`tecomp.strategy.cpu.schedule_attention` (what ``tc.auto_schedule`` gives this op)
    computes them per block of rows of the output, FlashAttention's way.

    Parameters
    ----------
    q : Tensor
        ``[b, h, Lq, d]``.
    k : Tensor
        ``[b, h, Lk, d]``.
    v : Tensor
        ``[b, h, Lk, dv]``.
    mask : Tensor, optional
        Broadcasts to ``(b, h, Lq, Lk)``: 2 to 4 dimensions aligned on the right, each
        the full extent or 1.  Of q's dtype it is added to the scores (``-inf`` excludes a
        key); a bool mask keeps the keys where it is True (PyTorch's conventions).  A row
        with no key left is 0, as PyTorch's.
    scale : float, optional
        Defaults to ``1/sqrt(d)`` (any finite number is taken).
    name : str, optional
        The output stage's name; helper stages are ``<name>.<what>``.

    Returns
    -------
    Tensor
        ``[b, h, Lq, dv]``.

    Raises
    ------
    ShapeError, DTypeError
        For an argument of the wrong rank, dtype or extent (the message names it).
    """
    scale = _attention_args(q, k, v, mask, scale, name)
    B, H, Lq, D = q.shape
    Lk, Dv = k.shape[2], v.shape[3]
    dt = _acc(q.dtype)
    full = (B, H, Lq, Lk)
    rd = _te.reduce_axis(D, name="d")
    sc = _te.compute(full, lambda b, h, i, j: _te.sum(
        q[b, h, i, rd].astype(dt) * k[b, h, j, rd].astype(dt), axis=rd),
        name=f"{name}.scores", tag="sdpa_scores")

    def logit(b, h, i, j):
        s = sc[b, h, i, j] * _c(scale, dt)
        if mask is None:
            return s
        idx = tuple(0 if _is_one(e) else x
                    for e, x in zip(mask.shape, (b, h, i, j)[4 - mask.ndim:]))
        if mask.dtype == "bool":
            return _te.if_then_else(mask[idx], s, _c(-math.inf, dt))
        return s + mask[idx].astype(dt)

    rj = _te.reduce_axis(Lk, name="j")
    mx = stop_gradient(_te.compute(
        (B, H, Lq), lambda b, h, i: shift_max(logit(b, h, i, rj), axis=rj),
        name=f"{name}.max"))
    # a row whose every key is masked out (max -inf) gets exps of 0 and then output 0,
    # as PyTorch's, instead of exp(-inf - -inf) = NaN
    ex = _te.compute(full, lambda b, h, i, j: _te.exp(logit(b, h, i, j) - _te.if_then_else(
        mx[b, h, i] > _c(-math.inf, dt), mx[b, h, i], _c(0.0, dt))), name=f"{name}.exp")
    rj2 = _te.reduce_axis(Lk, name="j")
    sm = _te.compute((B, H, Lq), lambda b, h, i: _te.sum(ex[b, h, i, rj2], axis=rj2),
                     name=f"{name}.sum")
    rc = _te.compute((B, H, Lq), lambda b, h, i: _te.if_then_else(
        sm[b, h, i] > _c(0.0, dt), _c(1.0, dt) / sm[b, h, i], _c(0.0, dt)), name=f"{name}.rcp")
    rj3 = _te.reduce_axis(Lk, name="j")
    pv = _te.compute((B, H, Lq, Dv),
                     lambda b, h, i, e: _te.sum(ex[b, h, i, rj3] * v[b, h, rj3, e].astype(dt),
                                                axis=rj3),
                     name=f"{name}.pv", tag="sdpa_pv")
    return _te.compute((B, H, Lq, Dv),
                       lambda b, h, i, e: (pv[b, h, i, e] * rc[b, h, i]).astype(q.dtype),
                       name=name, tag="sdpa")
