"""Scaled dot-product attention (``torch.nn.functional.scaled_dot_product_attention``)."""
from __future__ import annotations

import math
import weakref
from typing import Tuple

from .. import te as _te
from ..errors import ArgumentError, AutodiffError, DTypeError, ShapeError
from ..ir import op as _op
from ..ir.expr import Const
from ..te.tensor import Tensor
from ..autodiff.reverse import stop_gradient
from ..autodiff.rules import register_derivative
from ._check import Args, same_extent as _same, shape_text as _shape_text
from ._common import _acc, _c, _is_one
from .softmax import shift_max

__all__ = ["scaled_dot_product_attention", "flash_attention", "flash_attention_backward"]


# ---------------------------------------------------------------------------------
# attention


def _attention_args(q, k, v, mask, scale, name, op="scaled_dot_product_attention"):
    """Check :func:`scaled_dot_product_attention`'s (or ``op``'s) arguments; return the
    scale (a float)."""
    a = Args(op, name)
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
                                 scale: float | None = None, name: str = "sdpa",
                                 backward: str = "stages") -> Tensor:
    """``softmax(q k^T * scale + mask) v`` per batch and head
    (``F.scaled_dot_product_attention``).

    Stages, all ordinary computes (``tc.gradient`` differentiates them):
    ``<name>.scores`` (``sum_d q k``), ``<name>.max`` (the row maximum of the scaled,
    masked scores, a constant for autodiff), ``<name>.exp`` (``exp(scores * scale + mask -
    max)``), ``<name>.sum``, ``<name>.rcp`` (``1 / sum``), ``<name>.pv`` (``exp @ v``) and
    the output ``pv * rcp``.  For float16/bfloat16 inputs every stage but the output is
    float32 (the output rounds once).  As written they hold ``Lq x Lk`` scores;
    :func:`tecomp.strategy.cpu.schedule_attention` (what ``tc.auto_schedule`` gives this op)
    computes them per block of rows of the output, FlashAttention's way.  On CUDA
    targets ``tc.auto_schedule`` computes it as :func:`flash_attention` (the tensor
    cores) for float16/bfloat16 without a mask or with an additive padding mask
    (``(b, 1, 1, Lk)``), alone or inside a larger graph, unless a gradient reads its
    stages; else the generic GPU rules, which hold the scores whole.  For a causal
    attention use :func:`flash_attention`.

    ``tc.gradient`` of the output differentiates these stages (they hold the scores),
    or with ``backward="flash"`` is FlashAttention's backward
    (:func:`flash_attention_backward`, ``<name>.flash_grad.*`` stages), which never
    holds an ``Lq x Lk`` matrix once scheduled: on CUDA targets the GPU rules run it on
    its template, inside a larger graph too (a layer's gradient).  It reads the output
    and ``<name>.lse``, the rows' logsumexp ``max + log(sum)`` of the forward's own
    statistics (float32; ``-inf`` for a row with no key), which FlashAttention's forward
    kernel writes beside the output on CUDA: no forward is computed again
    (``tecomp.torch`` saves both for the backward); on the CPU the template's tasks
    write it, each its block of rows, from the statistics they compute.
    ``"flash"`` takes what :func:`flash_attention` takes (float16/bfloat16, head dims
    multiples of 16 up to 128, no mask or an additive padding mask).

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
    backward : str, optional
        ``"stages"`` (the default) or ``"flash"``: what ``tc.gradient`` of the output is
        (above).

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
    out = _te.compute((B, H, Lq, Dv),
                      lambda b, h, i, e: (pv[b, h, i, e] * rc[b, h, i]).astype(q.dtype),
                      name=name, tag="sdpa")
    if backward == "flash":
        # the rows' logsumexp from the forward's own statistics (FlashAttention saves
        # it): the backward reads it and the output, and computes no forward again
        lse = _te.compute((B, H, Lq), lambda b, h, i: _te.if_then_else(
            sm[b, h, i] > _c(0.0, dt), mx[b, h, i] + _te.log(sm[b, h, i]),
            _c(-math.inf, dt)).astype("float32"), name=f"{name}.lse", tag="sdpa_lse")
        _flash_forward(q, k, v, False, scale, f"{name}.flash", mask)   # (its checks)
        _flash_derivative(out, q, k, v, False, scale, name, mask, lse, f"{name}.flash_grad")
    elif backward != "stages":
        Args("scaled_dot_product_attention", name).fail(
            f"backward is \"stages\" (tc.gradient differentiates the stages) or \"flash\" "
            f"(FlashAttention's backward), got {backward!r:.40}", ArgumentError)
    return out


def _flash_derivative(out, q, k, v, causal, scale, name, mask, lse, grad_name) -> None:
    """``tc.gradient`` of ``out`` (an attention's output): :func:`flash_attention_backward`
    straight to q, k and v (and the mask's gradient, plain computes, where it is asked
    for), from ``out`` and the rows' logsumexp ``lse`` (float32, ``[b, h, Lq]``) its
    forward computed; the backward's stages are ``<grad_name>.*``."""
    # (the rule holds the output weakly: the registry's key must not be kept alive by its
    # value; the logsumexp strongly: the caller may have dropped it)
    out_ref = weakref.ref(out.op)

    def vjp(adjoint, *_):
        o = out_ref().output(0)
        dq, dk, dv = flash_attention_backward(q, k, v, o, adjoint, lse, causal, scale,
                                              grad_name, mask)
        if mask is None:
            return {q: dq, k: dk, v: dv}
        return {q: dq, k: dk, v: dv,
                mask: _mask_grad(q, k, v, o, adjoint, lse, causal, scale, mask, grad_name)}
    register_derivative(out, vjp)


# ---------------------------------------------------------------------------------
# FlashAttention (the tensor-core form of the GPU)

#: the query and key lengths of :func:`flash_attention` are padded to a multiple of this
#: (its stages compute whole tiles: 128 is a multiple of every tile the CUDA schedule takes)
FLASH_PAD = 128
#: the operand dtypes of :func:`flash_attention` (the tensor cores' 16-bit inputs)
FLASH_DTYPES = ("float16", "bfloat16")
#: the largest head dimension of :func:`flash_attention` (its accumulators stay in registers)
FLASH_MAX_DIM = 128


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m


def _online_softmax(base2: bool = False):
    """The reducer of a row's softmax statistics ``(m, l)``: the running maximum and the
    running sum of ``exp(x - m)`` (``base2``: of ``2^(x - m)``, the rows' values in base-2
    units, ``x = s log2(e)``: the same ``l`` as ``exp`` of ``s``, ``m`` times ``log2(e)``).  Combining two partial rows keeps the larger maximum and
    rescales the other row's sum by ``exp(smaller - larger)`` (one exp per combine; a
    partial row of no keys is ``(-inf, 0)``): FlashAttention's online softmax.  Where
    the smaller is ``-inf`` (or NaN) the exp's argument is ``-inf``, whose exp is 0: a
    select of the argument, not of the result, so that the exp runs unconditionally
    (nvcc made the other form a branch around it: 91 -> 79 instructions of SASS per 4
    keys of the CUDA kernel's statistics' loop at head dim 64)."""
    f32 = "float32"

    def combine(x, y):
        m1, l1 = x
        m2, l2 = y
        first = m1 >= m2
        hi, lo = _te.max(m1, m2), _te.min(m1, m2)
        keep = _te.if_then_else(first, l1, l2)
        other = _te.if_then_else(first, l2, l1)
        scale = (_te.exp2 if base2 else _te.fast_exp)(_te.if_then_else(
            lo > _c(-math.inf, f32), lo - hi, _c(-math.inf, f32)))
        return hi, keep + other * scale

    return _te.comm_reducer(combine, lambda t0, t1: (_c(-math.inf, f32), _c(0.0, f32)),
                            name="online_softmax2" if base2 else "online_softmax")


def flash_attention(q: Tensor, k: Tensor, v: Tensor, causal: bool = False,
                    scale: float | None = None, name: str = "flash",
                    mask: Tensor | None = None) -> Tuple[Tensor, Tensor]:
    """FlashAttention's forward: ``softmax(q k^T * scale) v`` per batch and head, and the
    rows' logsumexp (what the backward recomputes the probabilities from), in computes
    that never hold an ``Lq x Lk`` matrix once scheduled
    (:func:`tecomp.strategy.cuda.schedule_flash_attention`, the tensor cores).

    Stages (``<name>.<what>``): ``q``, ``k``, ``v`` padded with zeros to a multiple of
    :data:`FLASH_PAD` rows (the tensor cores compute whole tiles); ``scores`` (``q k^T``,
    float32); ``stats``, the rows' maximum ``m`` and sum ``l`` of ``exp(s - m)`` over the
    keys (:func:`_online_softmax`'s reducer: the rescaling of the online softmax as a
    reduction), ``lse = m + log(l)``; ``p = exp(s - lse)`` in q's dtype (normalised) and
    ``pv`` (float32); the output casts ``pv`` to q's dtype.  As computes these are
    three passes (the statistics before ``p``); the CUDA schedule runs them as
    FlashAttention-2's one: per tile of keys the scores once, the statistics updated in
    step, ``p`` from the running ``lse`` and the accumulators of ``p v`` rescaled by
    ``exp(lse_old - lse_new)`` first (two GEMMs per tile; see
    :mod:`tecomp.strategy.cuda.attention`).  Keys past ``Lk`` and, with ``causal``, keys
    ``j > i`` (PyTorch's ``is_causal``: the mask aligned top-left) are left out; a row
    with no key left is 0 and its logsumexp ``-inf``.  The statistics' and ``p``'s
    exponentials are ``tc.fast_exp`` (on CUDA ``__expf``, ``ex2.approx``: within ``2 +
    1.2 |x|`` float32 ulps, CUDA's bound, far under the rounding of the 16-bit ``p``; the
    same code as ``exp`` on the CPU), the kernel's most frequent instruction sequence.

    ``tc.gradient(out, [q, k, v], head)`` is :func:`flash_attention_backward`'s computes
    (a derivative registered for ``out``); the logsumexp has no gradient (an
    AutodiffError says so).

    Parameters
    ----------
    q, k, v : Tensor
        ``[b, h, Lq, d]``, ``[b, h, Lk, d]``, ``[b, h, Lk, dv]``, all float16 or all
        bfloat16; ``d`` and ``dv`` constant multiples of 16 up to :data:`FLASH_MAX_DIM`.
    causal : bool, optional
        Query ``i`` attends to keys ``j <= i``.
    scale : float, optional
        Defaults to ``1/sqrt(d)``.
    name : str, optional
        The output stage's name.
    mask : Tensor, optional
        An additive mask of q's dtype over the keys, broadcast over the heads and the
        queries (``(b, 1, 1, Lk)``, ``(1, 1, 1, Lk)`` or ``(1, Lk)``: a padding mask;
        ``-inf`` leaves a key out): added to the scaled scores, as
        ``scaled_dot_product_attention``'s (FlashAttention's backward goes to
        q, k and v; the mask's, where ``tc.gradient`` is asked for it, is computed by
        plain computes that hold the ``Lq x Lk`` scores, for the CPU: the CUDA
        template refuses it).

    Returns
    -------
    (Tensor, Tensor)
        The output ``[b, h, Lq, dv]`` (q's dtype) and the logsumexp ``[b, h, Lq]``
        (float32; ``<name>.lse``), both outputs of the schedule.

    Raises
    ------
    ShapeError, DTypeError
        For an argument of the wrong rank, dtype or extent (the message names it).
    """
    out, lse = _flash_forward(q, k, v, causal, scale, name, mask)
    # tc.gradient of the output: flash_attention_backward, straight to q, k and v
    _flash_derivative(out, q, k, v, causal, out.op.attrs["scale"], name, mask, lse,
                      f"{name}_grad")

    lse_name = lse.name   # (not the tensor: the registry's key)

    def no_vjp(adjoint, *_):
        # the statistics are marked constant for the output's derivative: a derived
        # gradient through them would be silently zero
        raise AutodiffError(
            f"tc.gradient: {lse_name}, flash_attention's logsumexp, has no derivative "
            "in tecomp yet; differentiate its output (flash_attention's first result), or "
            "compute the logsumexp with tecomp.nn ops (e.g. scaled_dot_product_attention's "
            "stages) where you need its gradient")
    register_derivative(lse, no_vjp)
    return out, lse


def _key_mask(mask, q, name, op):
    """A function ``(b, j) -> float32`` of ``mask`` (None: no mask), an additive mask
    of q's dtype that broadcasts over the heads and the queries (``(b|1, 1, 1, Lk)``,
    ``(1, Lk)``, ...: a padding mask), read at key ``j`` (clamped: the padded keys are
    left out anyway); a ShapeError or DTypeError for another."""
    if mask is None:
        return None
    a = Args(op, name)
    if mask.dtype != q.dtype:
        a.fail(f"mask ({mask.name}) is {mask.dtype}; flash_attention takes an additive mask "
               f"of q's dtype {q.dtype} (a bool mask: where(mask, 0, -inf) in that dtype)",
               DTypeError)
    nd = mask.ndim
    for d, label in ((-3, "heads"), (-2, "queries")):
        if nd >= -d and not _is_one(mask.shape[d]):
            a.fail(f"mask ({mask.name}) has shape {_shape_text(mask.shape)}; flash_attention "
                   f"takes a mask over the keys that broadcasts over the {label} (extent 1 "
                   "there: (batch, 1, 1, Lk) or (1, Lk), a padding mask); use "
                   "scaled_dot_product_attention for another", ShapeError)
    Lk = int(mask.shape[-1].value) if not _is_one(mask.shape[-1]) else 1
    f32 = "float32"

    def read(b, j):
        idx = [0] * nd
        if nd == 4 and not _is_one(mask.shape[0]):
            idx[0] = b
        idx[-1] = _te.min(j, Lk - 1) if Lk > 1 else 0
        return mask[tuple(idx)].astype(f32)
    return read


def _mask_grad(q, k, v, out, dout, lse, causal, scale, mask, name):
    """The gradient of :func:`flash_attention`'s additive mask: ``dmask[.., j]``, the sum
    of ``p (dout v^T - delta)`` over the heads, the queries (and the batches, where the
    mask broadcasts over them), in plain computes that hold the ``Lq x Lk`` scores
    (``<name>.dmask``; the CUDA template refuses them:
    :func:`tecomp.strategy.cuda.schedule_flash_attention_backward`)."""
    B, H, Lq, D = (int(e.value) for e in q.shape)
    Lk, Dv = int(k.shape[2].value), int(v.shape[3].value)
    f32 = "float32"
    key_mask = _key_mask(mask, q, name, "flash_attention")
    rd, re_, re2 = (_te.reduce_axis(n, name=x) for n, x in ((D, "d"), (Dv, "e"), (Dv, "e")))
    sc = _te.compute((B, H, Lq, Lk), lambda b, h, i, j: _te.sum(
        q[b, h, i, rd].astype(f32) * k[b, h, j, rd].astype(f32), axis=rd),
        name=f"{name}.mask_scores")
    dp = _te.compute((B, H, Lq, Lk), lambda b, h, i, j: _te.sum(
        dout[b, h, i, re_].astype(f32) * v[b, h, j, re_].astype(f32), axis=re_),
        name=f"{name}.mask_dp")
    delta = _te.compute((B, H, Lq), lambda b, h, i: _te.sum(
        dout[b, h, i, re2].astype(f32) * out[b, h, i, re2].astype(f32), axis=re2),
        name=f"{name}.mask_delta")

    def ds(b, h, i, j):
        ls = lse[b, h, i]
        keep = ls > _c(-math.inf, f32)
        if causal:
            keep = _op.all_(keep, j <= i)
        p = _te.if_then_else(keep, _te.exp(sc[b, h, i, j] * _c(scale, f32)
                                           + key_mask(b, j) - ls), _c(0.0, f32))
        return p * (dp[b, h, i, j] - delta[b, h, i])
    dsm = _te.compute((B, H, Lq, Lk), ds, name=f"{name}.mask_ds")
    nd = mask.ndim
    over_b = not (nd == 4 and not _is_one(mask.shape[0]))
    over_j = _is_one(mask.shape[-1])
    axes = [_te.reduce_axis(H, name="h"), _te.reduce_axis(Lq, name="i")]
    if over_b:
        axes.append(_te.reduce_axis(B, name="b"))
    if over_j:
        axes.append(_te.reduce_axis(Lk, name="j"))

    def body(*idx):
        b = axes[2] if over_b else idx[0]
        j = axes[-1] if over_j else idx[-1]
        return _te.sum(dsm[b, axes[0], axes[1], j], axis=axes)
    acc = _te.compute(tuple(mask.shape), body, name=f"{name}.dmask_acc")
    return _te.compute(tuple(mask.shape), lambda *idx: acc[idx].astype(mask.dtype),
                       name=f"{name}.dmask", tag="flash_attention_dmask")


def _flash_forward(q, k, v, causal, scale, name, mask=None):
    """:func:`flash_attention`'s computes (without the derivative's registration)."""
    scale = _attention_args(q, k, v, mask, scale, name, "flash_attention")
    key_mask = _key_mask(mask, q, name, "flash_attention")
    a = Args("flash_attention", name)
    if q.dtype not in FLASH_DTYPES:
        a.fail(f"q ({q.name}) is {q.dtype}; FlashAttention runs on the tensor cores, which take "
               "float16 or bfloat16 (astype one of them; scaled_dot_product_attention takes "
               "any float)", DTypeError)
    a.flag("causal", causal)
    dims = {}
    for what, t, ax in (("q", q, 2), ("k", k, 2), ("q", q, 3), ("v", v, 3), ("q", q, 0),
                        ("q", q, 1)):
        e = t.shape[ax]
        if not isinstance(e, Const):
            a.fail(f"{what} ({t.name}).shape[{ax}] = {e} is symbolic; flash_attention takes "
                   "constant shapes (its tiles are chosen from them)")
        dims[(what, ax)] = int(e.value)
    for what, ax in (("q", 3), ("v", 3)):
        d = dims[(what, ax)]
        if d % 16 or not 16 <= d <= FLASH_MAX_DIM:
            a.fail(f"{what}'s head dim is {d}; the tensor-core FlashAttention takes a multiple "
                   f"of 16 from 16 to {FLASH_MAX_DIM} (pad the head dim with zeros, or use "
                   "scaled_dot_product_attention, which takes any)", ShapeError)
    B, H = dims[("q", 0)], dims[("q", 1)]
    Lq, Lk, D, Dv = dims[("q", 2)], dims[("k", 2)], dims[("q", 3)], dims[("v", 3)]
    if min(Lq, Lk) < 1:
        a.fail(f"q has {Lq} queries and k {Lk} keys; give at least one of each")
    dt, f32 = q.dtype, "float32"
    Lqp, Lkp = _round_up(Lq, FLASH_PAD), _round_up(Lk, FLASH_PAD)
    attrs = {"causal": causal, "scale": scale, "Lq": Lq, "Lk": Lk, "masked": mask is not None}

    def padded(x, L, Lp, what):
        dim = int(x.shape[3].value)
        return _te.compute((B, H, Lp, dim), lambda b, h, i, d: _te.if_then_else(
            i < L, x[b, h, _te.min(i, L - 1), d], _c(0.0, dt)),
            name=f"{name}.{what}", tag="flash_pad")

    def scores(qp, kp, what):
        d = _te.reduce_axis(D, name="d")
        return _te.compute((B, H, Lqp, Lkp), lambda b, h, i, j: _te.sum(
            qp[b, h, i, d].astype(f32) * kp[b, h, j, d].astype(f32), axis=d),
            name=f"{name}.{what}", tag="flash_scores")

    def logit(s, b, h, i, j):
        keep = j < Lk
        if causal:
            keep = _op.all_(keep, j <= i)
        x = s[b, h, i, j] * _c(scale, f32)
        if key_mask is not None:
            x = x + key_mask(b, j)
        return _te.if_then_else(keep, x, _c(-math.inf, f32))

    sc = scores(padded(q, Lq, Lqp, "q"), padded(k, Lk, Lkp, "k"), "scores")
    rj = _te.reduce_axis(Lkp, name="j")
    m, l = _te.compute((B, H, Lqp), lambda b, h, i: _online_softmax()(
        (logit(sc, b, h, i, rj), _c(1.0, f32)), axis=rj), name=f"{name}.stats",
        tag="flash_stats", attrs=dict(attrs))
    # constant for tc.gradient: flash_attention's derivative goes straight to q, k, v
    stop_gradient(m)
    lse = _te.compute((B, H, Lqp), lambda b, h, i: _te.if_then_else(
        l[b, h, i] > _c(0.0, f32), m[b, h, i] + _te.log(l[b, h, i]), _c(-math.inf, f32)),
        name=f"{name}.lse_padded")
    p = _te.compute((B, H, Lqp, Lkp), lambda b, h, i, j: _te.if_then_else(
        lse[b, h, i] > _c(-math.inf, f32), _te.fast_exp(logit(sc, b, h, i, j) - lse[b, h, i]),
        _c(0.0, f32)).astype(dt), name=f"{name}.p", tag="flash_p")
    vp = padded(v, Lk, Lkp, "v")
    rj2 = _te.reduce_axis(Lkp, name="j")
    pv = _te.compute((B, H, Lqp, Dv), lambda b, h, i, e: _te.sum(
        p[b, h, i, rj2].astype(f32) * vp[b, h, rj2, e].astype(f32), axis=rj2),
        name=f"{name}.pv", tag="flash_pv")
    out = _te.compute((B, H, Lq, Dv), lambda b, h, i, e: pv[b, h, i, e].astype(dt),
                      name=name, tag="flash_attention", attrs=attrs)
    lse_out = _te.compute((B, H, Lq), lambda b, h, i: lse[b, h, i], name=f"{name}.lse",
                          tag="flash_attention_lse", attrs=attrs)
    return out, lse_out


def flash_attention_backward(q: Tensor, k: Tensor, v: Tensor, out: Tensor, dout: Tensor,
                             lse: Tensor, causal: bool = False, scale: float | None = None,
                             name: str = "flash_grad",
                             mask: Tensor | None = None) -> Tuple[Tensor, Tensor, Tensor]:
    """FlashAttention's backward: the gradients ``(dq, dk, dv)`` of
    :func:`flash_attention`'s output contracted with ``dout``, from the forward's output
    ``out`` and logsumexp ``lse``, in computes that never hold an ``Lq x Lk`` matrix once
    scheduled (:func:`tecomp.strategy.cuda.schedule_flash_attention_backward`).

    With ``p = exp(s * scale - lse)`` recomputed from ``q``, ``k`` and ``lse``: ``delta =
    rowsum(dout * out)`` (float32), ``dv = p^T dout``, ``ds = p * (dout v^T - delta) *
    scale``, ``dk = ds^T q``, ``dq = ds k``.  Stages (``<name>.<what>``): the inputs padded
    to a multiple of :data:`FLASH_PAD` rows; ``delta``; for ``dk`` and ``dv`` (rows are
    keys) ``do_q``, ``dout`` and ``q`` stacked (``[b, h, 2, Lq, w]``, ``w`` the larger head
    dim, zero columns past each one's), the scores ``scores_k`` (``k q^T``) and ``dpt``
    (``v dout^T``), ``pt_dst``, ``p^T`` and ``ds^T`` stacked the same way (q's dtype), and
    ``dkv_acc``, the stacked products (float32): ``dv`` and ``dk`` as one reduction over
    the queries, so that the CUDA schedule runs both in one loop with two accumulators
    (FlashAttention-2's kernel: four GEMMs per tile); ``dkv``, their cast, has both as
    outputs (``dk`` its first, ``dv`` its second; where the head dims differ the narrower
    is sliced by a stage ``<name>.dk`` or ``<name>.dv``).  For ``dq`` (rows are
    queries) its own pass: ``scores_q`` and ``dp`` recomputed, ``ds``, ``dq_acc`` and
    the cast ``dq`` (three GEMMs per tile).  The CUDA schedule runs that pass only with
    ``FlashConfig(dq="recompute")`` (seven GEMMs); by default (``"atomic"``) it computes
    ``dq_acc`` from ``pt_dst``'s ``ds^T`` in the ``dk``/``dv`` loop and adds it into a
    float32 ``dq`` with atomics, FlashAttention-2's five GEMMs.

    Parameters
    ----------
    q, k, v, causal, scale, mask
        As given to :func:`flash_attention`.
    out : Tensor
        Its output ``[b, h, Lq, dv]``.
    dout : Tensor
        The gradient of the loss with respect to ``out`` (its shape and dtype).
    lse : Tensor
        Its logsumexp ``[b, h, Lq]``, float32.
    name : str, optional
        The prefix of the stages' names.

    Returns
    -------
    (Tensor, Tensor, Tensor)
        ``dq``, ``dk``, ``dv`` (``<name>.dq``, ``<name>.dkv.v0``, ``<name>.dkv.v1``), of
        q's, k's and v's shapes and dtype.

    Raises
    ------
    ShapeError, DTypeError
        For an argument of the wrong rank, dtype or extent (the message names it).
    """
    fwd_out, fwd_lse = _flash_forward(q, k, v, causal, scale, name, mask)  # checks q, k, v
    key_mask = _key_mask(mask, q, name, "flash_attention_backward")
    a = Args("flash_attention_backward", name)
    for what, t, like in (("out", out, fwd_out), ("dout", dout, fwd_out), ("lse", lse, fwd_lse)):
        a.tensor(what, t, like.ndim, dtype=(like.dtype,))
        for d in range(like.ndim):
            if _same(t.shape[d], like.shape[d]) is not True:
                a.fail(f"{what} ({t.name}) has shape {_shape_text(t.shape)}; it must be "
                       f"{_shape_text(like.shape)}, as flash_attention's "
                       f"{'logsumexp' if what == 'lse' else 'output'}")
    attrs = fwd_out.op.attrs
    scale = attrs["scale"]
    B, H, Lq, D = (int(e.value) for e in q.shape)
    Lk, Dv = int(k.shape[2].value), int(v.shape[3].value)
    dt, f32 = q.dtype, "float32"
    Lqp, Lkp = _round_up(Lq, FLASH_PAD), _round_up(Lk, FLASH_PAD)
    n = iter(range(100))

    def padded(x, L, Lp, what):
        dim = int(x.shape[3].value)
        return _te.compute((B, H, Lp, dim), lambda b, h, i, d: _te.if_then_else(
            i < L, x[b, h, _te.min(i, L - 1), d], _c(0.0, dt)),
            name=f"{name}.{what}{next(n)}", tag="flash_pad")

    def gemm_t(A, Bt, rows, cols, what):
        """``A[r, :] . Bt[c, :]`` in float32: a score tile's compute."""
        d = _te.reduce_axis(int(A.shape[3].value), name="d")
        return _te.compute((B, H, rows, cols), lambda b, h, r, c: _te.sum(
            A[b, h, r, d].astype(f32) * Bt[b, h, c, d].astype(f32), axis=d),
            name=f"{name}.{what}", tag="flash_scores")

    rd = _te.reduce_axis(Dv, name="e")
    delta = _te.compute((B, H, Lqp), lambda b, h, i: _te.sum(_te.if_then_else(
        i < Lq, dout[b, h, _te.min(i, Lq - 1), rd].astype(f32)
        * out[b, h, _te.min(i, Lq - 1), rd].astype(f32), _c(0.0, f32)), axis=rd),
        name=f"{name}.delta", tag="flash_delta")

    def prob(s, b, h, i, j, key_major):
        """p[i, j] in float32 from the scores tile ``s`` (``s[j, i]`` when key_major)."""
        keep = _op.all_(i < Lq, j < Lk)
        if causal:
            keep = _op.all_(keep, j <= i)
        x = (s[b, h, j, i] if key_major else s[b, h, i, j]) * _c(scale, f32)
        ls = lse[b, h, _te.min(i, Lq - 1)]
        if key_mask is not None:
            x = x + key_mask(b, j)
            # (a row whose every key the mask leaves out: lse -inf and every x -inf;
            # p = exp(-inf - the lowest float) = 0, not exp(-inf + inf))
            ls = _te.max(ls, _c(-3.4028234663852886e38, f32))
        return _te.if_then_else(keep, _te.exp(x - ls), _c(0.0, f32))

    def grad_scores(prob_of, dp, b, h, i, j, key_major):
        dpij = dp[b, h, j, i] if key_major else dp[b, h, i, j]
        return (prob_of * (dpij - delta[b, h, i]) * _c(scale, f32)).astype(dt)

    def accumulate(T, X, rows, cols, dim, what):
        r = _te.reduce_axis(cols, name="c")
        return _te.compute((B, H, rows, dim), lambda b, h, x, y: _te.sum(
            T[b, h, x, r].astype(f32) * X[b, h, r, y].astype(f32), axis=r),
            name=f"{name}.{what}_acc", tag="flash_grad_acc")

    def cast(acc, L, dim, what):
        return _te.compute((B, H, L, dim), lambda b, h, x, y: acc[b, h, x, y].astype(dt),
                           name=f"{name}.{what}", tag=f"flash_attention_{what}",
                           attrs=attrs)

    # dk and dv in one pass over the queries (rows are keys): the step's operands stacked,
    # [.., 0] dout and [.., 1] q (zero columns past their dims); the scores k q^T and
    # dout v^T from them; p^T and ds^T stacked the same way, so that dv = p^T dout and
    # dk = ds^T q are one reduction of two accumulators (one loop, four GEMMs)
    W = max(D, Dv)

    def stacked(b, h, w, i, y):
        def side(x, dim):
            val = x[b, h, _te.min(i, Lq - 1), _te.min(y, dim - 1)]
            return val if dim == W else _te.if_then_else(y < dim, val, _c(0.0, dt))
        return _te.if_then_else(i < Lq, _te.if_then_else(w == 0, side(dout, Dv), side(q, D)),
                                _c(0.0, dt))
    xs = _te.compute((B, H, 2, Lqp, W), stacked, name=f"{name}.do_q", tag="flash_pad")

    def from_stack(A, w, dim, what):
        """``A[j, :] . xs[w, i, :dim]``: a score tile of the dk and dv kernel."""
        d = _te.reduce_axis(dim, name="d")
        return _te.compute((B, H, Lkp, Lqp), lambda b, h, j, i: _te.sum(
            A[b, h, j, d].astype(f32) * xs[b, h, w, i, d].astype(f32), axis=d),
            name=f"{name}.{what}", tag="flash_scores")
    st = from_stack(padded(k, Lk, Lkp, "k"), 1, D, "scores_k")
    dpt = from_stack(padded(v, Lk, Lkp, "v"), 0, Dv, "dpt")

    def p_ds(b, h, w, j, i):
        pij = prob(st, b, h, i, j, True)
        return _te.if_then_else(w == 0, pij.astype(dt),
                                grad_scores(pij, dpt, b, h, i, j, True))
    pds = _te.compute((B, H, 2, Lkp, Lqp), p_ds, name=f"{name}.pt_dst", tag="flash_pds")
    rc = _te.reduce_axis(Lqp, name="c")
    acc = _te.compute((B, H, 2, Lkp, W), lambda b, h, w, x, y: _te.sum(
        pds[b, h, w, x, rc].astype(f32) * xs[b, h, w, rc, y].astype(f32), axis=rc),
        name=f"{name}.dkv_acc", tag="flash_grad_acc")
    dkw, dvw = _te.compute((B, H, Lk, W), lambda b, h, x, y: (
        acc[b, h, 1, x, y].astype(dt), acc[b, h, 0, x, y].astype(dt)),
        name=f"{name}.dkv", tag="flash_attention_dkv", attrs=attrs)

    def narrow(t, dim, what):   # (dims of k and v that differ: the stack is the wider)
        if dim == W:
            return t
        return _te.compute((B, H, Lk, dim), lambda b, h, x, y: t[b, h, x, y],
                           name=f"{name}.{what}", tag="flash_narrow")
    dk, dv = narrow(dkw, D, "dk"), narrow(dvw, Dv, "dv")

    # dq (rows are queries): its own pass over the keys, the scores and dout v^T
    # recomputed, then ds k (three GEMMs; the CUDA schedule's default reads ds from the
    # stacked tile instead and adds ds k into dq with atomics)
    qp, dop = padded(q, Lq, Lqp, "q"), padded(dout, Lq, Lqp, "do")
    kq, vq = padded(k, Lk, Lkp, "k"), padded(v, Lk, Lkp, "v")
    sc = gemm_t(qp, kq, Lqp, Lkp, "scores_q")
    dp = gemm_t(dop, vq, Lqp, Lkp, "dp")
    ds = _te.compute((B, H, Lqp, Lkp), lambda b, h, i, j: grad_scores(
        prob(sc, b, h, i, j, False), dp, b, h, i, j, False), name=f"{name}.ds", tag="flash_ds")
    dq = cast(accumulate(ds, kq, Lqp, Lkp, D, "dq"), Lq, D, "dq")
    return dq, dk, dv
