"""Forward operator definitions: pure compute definitions, no schedules.

Every operator returns a ``tc.compute`` tensor built from its inputs (and helper stages
named ``<name>.<what>``, e.g. ``conv2d_nchw.pad``); the dtype follows the inputs (float16,
bfloat16, float32 or float64).  Reductions over float16 and bfloat16 values accumulate
in float32 and round once, when the result is stored (as PyTorch, cuBLAS and cuDNN do):
the GEMMs and convolutions then have a float32 stage ``<name>.matmul`` / ``<name>.acc``
under the output, and the normalisations keep their statistics in float32
(``docs/numerics.md``).  ``out_dtype=`` of a GEMM or convolution chooses the accumulation
(and output) dtype instead.  Every operator checks its arguments first (ranks, dtypes,
extents, strides...; :mod:`tecomp.nn._check`) and raises a ShapeError or DTypeError
naming the argument.  Their backward definitions come from :func:`tecomp.gradient` (the
convolutions' from :mod:`tecomp.nn.conv_grad`); tuned
schedules live in other modules of :mod:`tecomp.nn`.  The names of operators and stages
are stable: schedules look stages up by them.

Layouts
-------
* ``matmul(A, B)``: ``A[M, K] @ B[K, N] -> [M, N]``; ``batch_matmul(A, B, transpose_a,
  transpose_b)``: ``[b, m, k] x [b, k, n] -> [b, m, n]`` (``torch.bmm``).
* ``transpose``, ``reshape``, ``concatenate``, ``split``: as numpy's.
* ``dropout(x, p, seed)``: a counter-based mask (:func:`squares32`), the same in the
  gradient and under every schedule.  ``embedding(weight[V, D], ids)``: rows of weight.
* ``dense(X, W, bias)``: ``X[B, I]``, ``W[O, I]`` (PyTorch's ``nn.Linear``), ``bias[O]``
  -> ``[B, O]``.
* ``conv2d_nchw``: data ``[N, C, H, W]``, weight ``[O, C, KH, KW]`` (PyTorch's layout).
* ``conv2d_nhwc``: data ``[N, H, W, C]``, weight ``[KH, KW, C, O]`` (HWIO, TensorFlow's and
  TVM's NHWC layout); output ``[N, OH, OW, O]``.
* pooling: NCHW.  ``softmax``, ``log_softmax``, ``layer_norm``: over the last axis.
* ``cross_entropy``, ``mse_loss``: shape ``(1,)`` (the mean), as a one-element tensor.

Padding is a stage ``<name>.pad`` with ``tc.if_then_else`` (zero for convolutions and average
pooling, ``-inf`` for max pooling, as PyTorch); autodiff inlines it, so the data gradient
is one gather over the unpadded input.
"""
from __future__ import annotations

import math
from typing import List, Sequence, Tuple

import numpy as np

from .. import te as _te
from ..errors import DTypeError, ShapeError
from ..ir import dtype as _dt
from ..ir.expr import Const, Expr, Var
from ..te.tensor import Tensor
from ..autodiff.reverse import stop_gradient
from ..autodiff.rules import register_tag_derivative as _register_tag_derivative
from ._check import Args, same_extent as _same, shape_text as _shape_text

__all__ = [
    "matmul", "dense", "conv2d_nchw", "conv2d_nhwc", "max_pool2d", "avg_pool2d", "relu",
    "sigmoid", "tanh", "gelu", "bias_add", "softmax", "log_softmax", "cross_entropy",
    "mse_loss", "batch_norm", "batch_norm_train", "layer_norm", "pad", "flatten", "batch_matmul",
    "transpose", "reshape", "concatenate", "split", "dropout", "squares32", "embedding",
    "scaled_dot_product_attention",
]


# ---------------------------------------------------------------------------------
# helpers


def _int(e, what: str) -> int:
    if isinstance(e, Const):
        return int(e.value)
    raise ShapeError(f"{what} must be a constant extent, got {e}")


def _c(v, dtype) -> Const:
    return Const(float(v), dtype)


def _acc(dtype: str, out_dtype=None) -> str:
    """The dtype a reduction over ``dtype`` values accumulates in: ``out_dtype`` when
    given, else float32 for float16 and bfloat16 (as PyTorch, cuBLAS and cuDNN), else
    ``dtype`` itself."""
    return out_dtype if out_dtype is not None else _dt.compute_dtype(dtype)


def _rounded(t, dtype: str, name: str, tag: str = "elemwise"):
    """``t`` as ``dtype``: ``t`` itself when it has that dtype, else a stage ``name`` that
    rounds each element once (a float32 accumulator stored as float16)."""
    if t.dtype == dtype:
        return t
    return _te.compute(t.shape, lambda *i: t[i].astype(dtype), name=name, tag=tag)


def _elementwise(x, fn, op: str, name: str, kind: str = "float"):
    """The operator ``op``: ``fn`` of each element of ``x`` (a tensor of the dtype kind
    ``kind``, see :meth:`Args.tensor`)."""
    Args(op, name).tensor("x", x, dtype=kind)
    return _te.compute(x.shape, lambda *i: fn(x[i]), name=name, tag="elemwise")


def pad(data: Tensor, pad_before: Sequence[int], pad_after: Sequence[int] | None = None,
        value: float = 0.0, name: str = "pad") -> Tensor:
    """``data`` padded with ``value``, read through ``tc.if_then_else`` so no out-of-bounds
    read happens.

    Parameters
    ----------
    data : Tensor
        The tensor to pad.
    pad_before : sequence of int
        Elements added before each dimension (one per dimension).
    pad_after : sequence of int, optional
        Elements added after each dimension (default: ``pad_before``).
    value : float, optional
        The padding value (0 by default).
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

    Examples
    --------
    >>> import tecomp as tc
    >>> import tecomp.nn as nn
    >>> X = tc.placeholder((2, 3), name="X")
    >>> tc.utils.get_const_tuple(nn.pad(X, (1, 1)).shape)
    (4, 5)
    """
    a = Args("pad", name)
    a.tensor("data", data, dtype=None)
    pad_after = pad_before if pad_after is None else pad_after
    for arg, v in (("pad_before", pad_before), ("pad_after", pad_after)):
        if not isinstance(v, (tuple, list)) or len(v) != data.ndim:
            a.fail(f"{arg} must give one padding per dimension of data ({data.name}, "
                   f"{data.ndim}-d), got {v!r}")
        for d, x in enumerate(v):
            a.ints(f"{arg}[{d}]", x, 0, count=1)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) or \
            (not _dt.is_float(data.dtype) and (not math.isfinite(value) or value != int(value))):
        a.fail(f"value must be a number that data ({data.name}, {data.dtype}) can hold, got "
               f"{value!r}", DTypeError)
    shape = [e + b + a if (b or a) else e for e, b, a in zip(data.shape, pad_before, pad_after)]

    def f(*i):
        conds, idx = [], []
        for d, x in enumerate(i):
            b, a = pad_before[d], pad_after[d]
            if b or a:
                conds.append(x >= b)
                conds.append(x < data.shape[d] + b)
                idx.append(x - b)
            else:
                idx.append(x)
        val = data[tuple(idx)]
        if not conds:
            return val
        return _te.if_then_else(_te.all(*conds), val, _c(value, data.dtype))

    return _te.compute(tuple(shape), f, name=name, tag="injective,pad")


def flatten(data: Tensor, name: str = "flatten") -> Tensor:
    """``[N, d1, d2, ...] -> [N, d1*d2*...]`` (row-major, as ``torch.flatten(x, 1)``).

    Parameters
    ----------
    data : Tensor
        At least 2-d, constant extents after the first.
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
    a = Args("flatten", name)
    a.tensor("data", data, (2, None), "[batch, d1, d2, ...]", dtype=None)
    dims = [a.constant("data", data, d, "extent") for d in range(1, data.ndim)]
    total = math.prod(dims)
    strides = [math.prod(dims[k + 1:]) for k in range(len(dims))]

    def f(n, j):
        idx = [n]
        for k, (d, st) in enumerate(zip(dims, strides)):
            v = j if st == 1 else j // st
            idx.append(v % d if k > 0 else v)
        return data[tuple(idx)]

    return _te.compute((data.shape[0], total), f, name=name, tag="injective,reshape")


# ---------------------------------------------------------------------------------
# dense algebra
#
# ``out_dtype`` of the GEMMs and convolutions (TVM's name and meaning): None keeps the
# operands' dtype for the output and accumulates in :func:`_acc`'s dtype (float32 for
# float16 and bfloat16: a stage ``<name>.matmul`` / ``<name>.acc`` in float32, then the
# output ``<name>`` rounds it once); a dtype casts the operands to it before they are
# multiplied and summed, and the output has it (``out_dtype="float32"`` with float16
# operands: a float32 result, what tensor cores compute; ``out_dtype="float16"``: a
# float16 sum, TVM's default, faster and far less accurate).


def _gemm_args(op: str, name: str, pairs, out_dtype):
    """Check the operands (``(arg, tensor, rank, layout)``) of a GEMM and its
    ``out_dtype``; return ``(Args, accumulation dtype, output dtype)``."""
    a = Args(op, name)
    for arg, t, rank, layout in pairs:
        a.tensor(arg, t, rank, layout, "number")
    out_dtype = a.out_dtype(out_dtype, [p[1] for p in pairs])
    a.operands([(p[0], p[1]) for p in pairs], out_dtype)
    first = pairs[0][1].dtype
    return a, _acc(first, out_dtype), out_dtype or first


def _matmul_args(op: str, name: str, A, B, out_dtype):
    """:func:`_gemm_args` of ``A[M, K] @ B[K, N]``."""
    a, acc, out = _gemm_args(op, name, (("A", A, 2, "[M, K]"), ("B", B, 2, "[K, N]")),
                             out_dtype)
    a.match("B", B, 0, "A", A, 1, "rows", "the reduced extent K of A[M, K] @ B[K, N]")
    return a, acc, out


def _dense_args(op: str, name: str, X, W, bias, out_dtype):
    """:func:`_gemm_args` of ``X[B, I] W[O, I]^T + bias[O]`` (bias: the output's dtype)."""
    a, acc, out = _gemm_args(op, name, (("X", X, 2, "[batch, in]"), ("W", W, 2, "[out, in]")),
                             out_dtype)
    a.match("W", W, 1, "X", X, 1, "input features", "W is [out, in], as nn.Linear's weight")
    if bias is not None:
        a.tensor("bias", bias, 1, "[out]", (out,))
        a.match("bias", bias, 0, "W", W, 0, "elements", "one bias per output")
    return a, acc, out


def _gemm_output(shape, body, name: str, tag: str, acc: str, out: str, bias=None, attrs=None):
    """A GEMM's stages: the sum ``body`` (in ``acc``) as the output ``name``, or, when a
    ``bias`` (added to the last axis, in ``acc``) or a rounding to ``out`` follows it, as
    ``<name>.matmul`` under the output ``name``."""
    single = bias is None and acc == out
    mm = _te.compute(shape, body, name=name if single else f"{name}.matmul", tag=tag,
                     attrs=attrs)
    if bias is None:
        return _rounded(mm, out, name)
    return _te.compute(mm.shape, lambda *i: (mm[i] + bias[i[-1]].astype(acc)).astype(out),
                       name=name, tag="bias_add")


def matmul(A: Tensor, B: Tensor, name: str = "matmul", out_dtype: str | None = None) -> Tensor:
    """``A[M, K] @ B[K, N] -> [M, N]``.

    By default float16/bfloat16 operands are summed in float32 (the stage
    ``<name>.matmul``) and rounded once.

    Parameters
    ----------
    A : Tensor
        ``[M, K]``.
    B : Tensor
        ``[K, N]``, of A's dtype.
    out_dtype : str, optional
        As TVM's: the operands are cast to it before they are multiplied and summed
        (``out_dtype="float32"`` with float16 operands: float32 accumulation and result,
        what tensor cores compute).
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

    Examples
    --------
    >>> import tecomp as tc
    >>> import tecomp.nn as nn
    >>> A = tc.placeholder((8, 4), name="A"); B = tc.placeholder((4, 2), name="B")
    >>> tc.utils.get_const_tuple(nn.matmul(A, B).shape)
    (8, 2)
    """
    _, acc, out = _matmul_args("matmul", name, A, B, out_dtype)
    k = _te.reduce_axis(A.shape[1], name="k")
    return _gemm_output((A.shape[0], B.shape[1]), lambda i, j: _te.sum(
        A[i, k].astype(acc) * B[k, j].astype(acc), axis=k), name, "matmul", acc, out)


def dense(X: Tensor, W: Tensor, bias: Tensor | None = None, name: str = "dense",
          out_dtype: str | None = None) -> Tensor:
    """``X[B, I] W[O, I]^T (+ bias[O]) -> [B, O]`` (PyTorch's ``nn.Linear``).

    With a bias, or float16/bfloat16 operands summed in float32, the product is the
    stage ``<name>.matmul`` and ``<name>`` adds the bias (in the accumulation dtype) and
    rounds.

    Parameters
    ----------
    X : Tensor
        ``[B, I]``.
    W : Tensor
        ``[O, I]`` (PyTorch's layout).
    bias : Tensor, optional
        ``[O]``, of the output's dtype.
    out_dtype : str, optional
        The operands are cast to it before they are multiplied and summed (as
        :func:`matmul`'s).
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

    Examples
    --------
    >>> import tecomp as tc
    >>> import tecomp.nn as nn
    >>> X = tc.placeholder((8, 16), name="X"); W = tc.placeholder((4, 16), name="W")
    >>> tc.utils.get_const_tuple(nn.dense(X, W).shape)
    (8, 4)
    """
    _, acc, out = _dense_args("dense", name, X, W, bias, out_dtype)
    k = _te.reduce_axis(X.shape[1], name="k")
    return _gemm_output((X.shape[0], W.shape[0]), lambda b, o: _te.sum(
        X[b, k].astype(acc) * W[o, k].astype(acc), axis=k), name, "dense", acc, out, bias)


def batch_matmul(A: Tensor, B: Tensor, transpose_a: bool = False, transpose_b: bool = False,
                 name: str = "batch_matmul", out_dtype: str | None = None) -> Tensor:
    """``A[b, m, k] @ B[b, k, n] -> [b, m, n]`` (``torch.bmm``).

    A batch extent of 1 on one side broadcasts to the other's (as TVM's
    ``batch_matmul``).  By default float16/bfloat16 operands are summed in float32
    (``<name>.matmul``).

    Parameters
    ----------
    A : Tensor
        ``[b, m, k]`` (``[b, k, m]`` with ``transpose_a``).
    B : Tensor
        ``[b, k, n]`` (``[b, n, k]`` with ``transpose_b``: attention's ``Q K^T``).
    transpose_a : bool, optional
        Read A transposed.
    transpose_b : bool, optional
        Read B transposed.
    out_dtype : str, optional
        The operands are cast to it before they are multiplied and summed.
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
    a, acc, out = _gemm_args(
        "batch_matmul", name,
        (("A", A, 3, "[batch, k, m]" if transpose_a else "[batch, m, k]"),
         ("B", B, 3, "[batch, n, k]" if transpose_b else "[batch, k, n]")), out_dtype)
    ka = A.shape[1] if transpose_a else A.shape[2]
    kb = B.shape[2] if transpose_b else B.shape[1]
    if _same(ka, kb) is False:
        a.fail(f"the reduced extents differ: {A.name} gives {ka}, {B.name} gives {kb} "
               f"(transpose_a={transpose_a}, transpose_b={transpose_b})")
    ba, bb = A.shape[0], B.shape[0]
    one_a, one_b = _is_one(ba), _is_one(bb)
    if not (one_a or one_b) and _same(ba, bb) is False:
        a.fail(f"batch extents {ba} ({A.name}) and {bb} ({B.name}) differ; one of them may "
               "be 1 (broadcast)")
    batch = bb if one_a and not one_b else ba
    m = A.shape[2] if transpose_a else A.shape[1]
    n = B.shape[1] if transpose_b else B.shape[2]
    k = _te.reduce_axis(ka, name="k")

    def f(b, i, j):
        pa = 0 if one_a and not one_b else b
        pb = 0 if one_b and not one_a else b
        x = A[pa, k, i] if transpose_a else A[pa, i, k]
        y = B[pb, j, k] if transpose_b else B[pb, k, j]
        return _te.sum(x.astype(acc) * y.astype(acc), axis=k)

    return _gemm_output((batch, m, n), f, name, "batch_matmul", acc, out)


def _is_one(e) -> bool:
    return isinstance(e, Const) and int(e.value) == 1


# ---------------------------------------------------------------------------------
# layout: transpose, reshape, concatenate, split


def transpose(x: Tensor, axes: Sequence[int] | None = None, name: str = "transpose") -> Tensor:
    """``x`` with its dimensions permuted (``numpy.transpose``).

    Parameters
    ----------
    x : Tensor
        The tensor.
    axes : sequence of int, optional
        Output dimension ``d`` is input dimension ``axes[d]``; ``None`` reverses them.
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
    a = Args("transpose", name)
    a.tensor("x", x, dtype=None)
    nd = x.ndim
    axes = tuple(range(nd))[::-1] if axes is None else \
        tuple(axes) if isinstance(axes, (tuple, list)) else (axes,)
    ok = all(isinstance(a, int) and not isinstance(a, bool) and -nd <= a < nd for a in axes)
    if not ok or sorted(a % nd for a in axes) != list(range(nd)):
        a.fail(f"axes must be a permutation of 0..{nd - 1} for {x.name} ({nd}-d), got "
               f"{axes!r}")
    axes = tuple(a % nd for a in axes)
    inv = [0] * nd
    for d, a in enumerate(axes):
        inv[a] = d
    return _te.compute(tuple(x.shape[a] for a in axes),
                       lambda *i: x[tuple(i[inv[a]] for a in range(nd))],
                       name=name, tag="injective,transpose")


def reshape(x: Tensor, shape: Sequence[int], name: str = "reshape") -> Tensor:
    """``x`` with a new shape, elements in row-major order (``numpy.reshape``).

    Parameters
    ----------
    x : Tensor
        The tensor, with constant extents.
    shape : sequence of int
        The new extents; one may be -1 (inferred).
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
    a = Args("reshape", name)
    a.tensor("x", x, dtype=None)
    dims = [a.constant("x", x, d, "extent") for d in range(x.ndim)]
    total = math.prod(dims)
    shape = (shape,) if isinstance(shape, (int, Const)) else shape
    want = [int(v.value) if isinstance(v, Const) else int(v) for v in shape] if \
        isinstance(shape, (tuple, list)) and shape and all(
            (isinstance(v, int) and not isinstance(v, bool)) or
            (isinstance(v, Const) and _dt.is_int(v.dtype)) for v in shape) else None
    if want is None:
        a.fail(f"the new shape must be a non-empty tuple of ints, got {shape!r}")
    if want.count(-1) > 1 or any(v < 1 and v != -1 for v in want):
        a.fail(f"at most one extent may be -1, the others >= 1; got {tuple(want)}")
    if -1 in want:
        rest = math.prod(v for v in want if v != -1)
        if total % rest:
            a.fail(f"cannot infer -1 in {tuple(want)} for {total} elements")
        want[want.index(-1)] = total // rest
    if math.prod(want) != total:
        a.fail(f"{x.name} has {total} elements (shape {tuple(dims)}), the new shape "
               f"{tuple(want)} has {math.prod(want)}")
    out_strides = [math.prod(want[k + 1:]) for k in range(len(want))]
    in_strides = [math.prod(dims[k + 1:]) for k in range(len(dims))]

    def f(*i):
        flat = None
        for v, st in zip(i, out_strides):
            t = v * st if st != 1 else v
            flat = t if flat is None else flat + t
        if flat is None:
            flat = 0
        idx = []
        for k, (d, st) in enumerate(zip(dims, in_strides)):
            v = flat // st if st != 1 else flat
            idx.append(v % d if k > 0 else v)
        return x[tuple(idx)]

    return _te.compute(tuple(want), f, name=name, tag="injective,reshape")


def concatenate(tensors: Sequence[Tensor], axis: int = 0, name: str = "concatenate") -> Tensor:
    """The tensors joined along ``axis`` (``numpy.concatenate``).

    Parameters
    ----------
    tensors : sequence of Tensor
        The same shape but along ``axis``, where extents are constants.
    axis : int, optional
        The axis joined along (negative counts from the end).
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
    a = Args("concatenate", name)
    ts = list(tensors) if isinstance(tensors, (list, tuple)) else None
    if not ts:
        a.fail(f"give at least one tensor, in a list or tuple; got {tensors!r:.60}")
    for k, t in enumerate(ts):
        a.tensor(f"tensors[{k}]", t, None if k == 0 else ts[0].ndim, dtype=None,
                 like=None if k == 0 else ("tensors[0]", ts[0]))
    nd = ts[0].ndim
    ax = a.axis("axis", axis, nd, f"{nd}-d tensors")
    for t in ts[1:]:
        for d in range(nd):
            if d != ax and _same(t.shape[d], ts[0].shape[d]) is False:
                a.fail(f"{t.name}.shape[{d}] = {t.shape[d]} but {ts[0].name}.shape[{d}] = "
                       f"{ts[0].shape[d]}; the tensors differ only along axis {axis}")
    sizes = [a.constant(f"tensors[{k}]", t, ax, "extent along the axis")
             for k, t in enumerate(ts)]
    offsets = [sum(sizes[:k]) for k in range(len(ts))]
    shape = list(ts[0].shape)
    shape[ax] = sum(sizes)

    def f(*i):
        def read(k):
            idx = list(i)
            idx[ax] = i[ax] - offsets[k] if offsets[k] else i[ax]
            return ts[k][tuple(idx)]

        val = read(len(ts) - 1)
        for k in range(len(ts) - 2, -1, -1):
            val = _te.if_then_else(i[ax] < offsets[k] + sizes[k], read(k), val)
        return val

    return _te.compute(tuple(shape), f, name=name, tag="injective,concatenate")


def split(x: Tensor, sections: int | Sequence[int], axis: int = 0, name: str = "split") -> List[Tensor]:
    """``x`` cut along ``axis`` (``numpy.split``).

    Parameters
    ----------
    x : Tensor
        The tensor.
    sections : int or sequence of int
        That many equal parts, or the sorted indices where parts begin.
    axis : int, optional
        The axis cut along.
    name : str, optional
        The output stage's name; helper stages are ``<name>.<what>``.

    Returns
    -------
    list of Tensor
        The parts ``<name>.0``, ``<name>.1``, ...

    Raises
    ------
    ShapeError, DTypeError
        For an argument of the wrong rank, dtype or extent (the message names it).
    """
    chk = Args("split", name)
    chk.tensor("x", x, dtype=None)
    nd = x.ndim
    ax = chk.axis("axis", axis, nd, x.name)
    ext = chk.constant("x", x, ax, "extent along the axis")
    if isinstance(sections, int) and not isinstance(sections, bool):
        if sections < 1 or ext % sections:
            chk.fail(f"{ext} elements along axis {axis} do not divide into {sections} equal "
                     "parts")
        starts = [ext // sections * k for k in range(sections)]
    elif isinstance(sections, (list, tuple)) and all(
            isinstance(v, int) and not isinstance(v, bool) for v in sections):
        starts = [0] + [int(v) for v in sections]
        if any(b <= a for a, b in zip(starts, starts[1:])) or starts[-1] >= ext:
            chk.fail(f"the indices {list(sections)} must be sorted, increasing, between 1 and "
                     f"{ext - 1} (every part non-empty)")
    else:
        chk.fail(f"sections must be an int or a list of ints, got {sections!r}")
    ends = starts[1:] + [ext]
    out = []
    for k, (a, b) in enumerate(zip(starts, ends)):
        shape = list(x.shape)
        shape[ax] = b - a

        def f(*i, _a=a):
            idx = list(i)
            idx[ax] = i[ax] + _a if _a else i[ax]
            return x[tuple(idx)]

        out.append(_te.compute(tuple(shape), f, name=f"{name}.{k}", tag="injective,split"))
    return out


def embedding(weight: Tensor, ids: Tensor, name: str = "embedding") -> Tensor:
    """Rows of ``weight[V, D]`` picked by the integer tensor ``ids``:
    ``out[..., d] = weight[ids[...], d]`` (``F.embedding``).

    An id outside ``[0, V)`` reads no memory: its row is zeros (PyTorch raises an
    IndexError there).  Its gradient with respect to ``weight`` comes from
    ``tc.gradient``: a scatter-add (``tc.scatter_add``) of the output's gradient at the
    ids' rows, ``len(ids) * D`` work.

    Parameters
    ----------
    weight : Tensor
        ``[V, D]``.
    ids : Tensor
        Any shape, int32 or int64.
    name : str, optional
        The output stage's name; helper stages are ``<name>.<what>``.

    Returns
    -------
    Tensor
        ``ids.shape + (D,)``.

    Raises
    ------
    ShapeError, DTypeError
        For an argument of the wrong rank, dtype or extent (the message names it).
    """
    a = Args("embedding", name)
    a.tensor("weight", weight, 2, "[num_embeddings, dim]", "number")
    a.tensor("ids", ids, None, dtype="index")
    V = weight.shape[0]

    def f(*i):
        v = ids[i[:-1]]
        inside = _te.all(v >= 0, v < V.astype(v.dtype))
        safe = _te.if_then_else(inside, v, Const(0, v.dtype))
        return _te.if_then_else(inside, weight[safe, i[-1]], _c(0.0, weight.dtype))

    return _te.compute(tuple(ids.shape) + (weight.shape[1],), f, name=name, tag="embedding")


# ---------------------------------------------------------------------------------
# dropout: a counter-based random mask


#: the key of the Squares generator (Widynski 2020): an odd 64-bit constant whose hex digits
#: are all different, as the paper asks of a key
SQUARES_KEY = int(np.uint64(0xC8E4FD154CE32F6D).view(np.int64))
_T32 = 1 << 32


def squares32(counter):
    """32 random bits (an int64 in [0, 2**32)) of the int64 expression ``counter``: the
    Squares counter-based generator -- four rounds of ``x*x + y`` and a swap of the
    32-bit halves -- in int64 arithmetic that wraps as uint64 does (the swap through
    ``//`` and ``%`` by 2**32).  The same counter gives the same bits under every
    schedule, so a forward pass and its gradient draw the same mask."""
    if isinstance(counter, bool) or not (
            (isinstance(counter, Expr) and counter.dtype == "int64") or
            (isinstance(counter, int) and -2 ** 63 <= counter < 2 ** 63)):
        Args("squares32", "counter").fail(
            f"the counter must be an int64 expression (or an int in int64's range), got "
            f"{counter!r:.60}; convert an index with .astype('int64')", DTypeError)
    key = Const(SQUARES_KEY, "int64")
    t32 = Const(_T32, "int64")

    def rot(v):
        return (v % t32) * t32 + (v // t32) % t32

    x = y = counter * key
    z = y + key
    x = rot(x * x + y)
    x = rot(x * x + z)
    x = rot(x * x + y)
    return ((x * x + z) // t32) % t32


def dropout(x: Tensor, p: float, seed: int | Var = 0, name: str = "dropout") -> Tensor:
    """``x`` with each element zeroed with probability ``p`` and the others scaled by
    ``1 / (1 - p)`` (``F.dropout`` in training mode).

    The mask is a function of the element's row-major index and ``seed`` only
    (:func:`squares32` of ``seed * 2**40 + index``): deterministic, the same in the
    gradient, whatever the schedule.  Not PyTorch's generator: the same distribution,
    other draws.

    Parameters
    ----------
    x : Tensor
        A float tensor.
    p : float
        The probability of zeroing an element.
    seed : int or Var, optional
        An int, or an int64 ``tc.var`` (a new mask per call without recompiling).
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
    a = Args("dropout", name)
    a.tensor("x", x)
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= float(p) <= 1.0:
        a.fail(f"p must be a probability in [0, 1], got {p!r}")
    if isinstance(seed, bool) or not ((isinstance(seed, int) and -2 ** 23 <= seed < 2 ** 23) or
                                      (isinstance(seed, Var) and seed.dtype == "int64")):
        a.fail(f"seed must be an int or an int64 tc.var, got {seed!r:.60} (an int seed in "
               "[-2**23, 2**23): the counter is seed * 2**40 + index, in int64)")
    p = float(p)
    if p == 0.0:
        return _te.compute(x.shape, lambda *i: x[i], name=name, tag="elemwise,dropout")
    scale = _c(0.0 if p == 1.0 else 1.0 / (1.0 - p), x.dtype)
    threshold = min(int(p * _T32), _T32)  # keep where the 32 bits are >= p * 2**32
    strides = []  # row-major strides of x, as int64 expressions
    acc = Const(1, "int64")
    for e in reversed(x.shape):
        strides.append(acc)
        acc = acc * e.astype("int64")
    strides = strides[::-1]
    base = (Const(int(seed), "int64") if isinstance(seed, int) else seed) * Const(1 << 40, "int64")

    def f(*i):
        flat = base
        for v, st in zip(i, strides):
            flat = flat + v.astype("int64") * st
        keep = squares32(flat) >= Const(threshold, "int64")
        return _te.if_then_else(keep, x[i] * scale, _c(0.0, x.dtype))

    return _te.compute(x.shape, f, name=name, tag="elemwise,dropout")


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


# ---------------------------------------------------------------------------------
# softmax and losses


# The row maximum of softmax / log_softmax only shifts the exponent, so it is reduced
# with ``a > b ? a : b`` (one ``vmaxps``) rather than tc.max's NaN-propagating maximum
# (three instructions on x86): the outputs are the same.  A NaN in a row reaches the sum
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


def softmax(x: Tensor, name: str = "softmax") -> Tensor:
    """Softmax over the last axis.

    Stages ``.max`` (the row maximum), ``.exp`` (``exp(x - max)``), ``.sum``, ``.rcp``
    (``1 / sum``, one per row) and the output ``exp * rcp``: one reciprocal per row and
    a multiply per element, as PyTorch's CPU softmax does, at most one more rounding
    (6e-8 relative) than ``exp / sum`` (docs/numerics.md).  For float16/bfloat16 ``x``,
    ``.exp``, ``.sum`` and ``.rcp`` are float32 and the output rounds once.

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

    Examples
    --------
    >>> import tecomp as tc
    >>> import tecomp.nn as nn
    >>> X = tc.placeholder((4, 10), name="X")
    >>> [t.name for t in nn.softmax(X).op.input_tensors]
    ['softmax.exp', 'softmax.rcp']
    """
    return _softmax(x, "softmax", name, _te.exp)


def _softmax(x, op: str, name: str, exp):
    """:func:`softmax` with the exponential ``exp`` (``tc.exp`` or ``tc.fast_exp``)."""
    acc, m, e, s = _softmax_parts(x, op, name, exp)
    r = _te.compute(x.shape[:-1], lambda *i: _te.const(1.0, acc) / s[i], name=f"{name}.rcp")
    return _te.compute(x.shape, lambda *i: (e[i] * r[i[:-1]]).astype(x.dtype), name=name,
                       tag="softmax")


def log_softmax(x: Tensor, name: str = "log_softmax") -> Tensor:
    """Log-softmax over the last axis: ``x - max - log(sum(exp(x - max)))`` (in float32
    for float16/bfloat16 ``x``, rounded once).

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
    acc, m, e, s = _softmax_parts(x, "log_softmax", name)
    return _te.compute(x.shape, lambda *i: (x[i].astype(acc) - m[i[:-1]].astype(acc) -
                                            _te.log(s[i[:-1]])).astype(x.dtype), name=name,
                       tag="log_softmax")


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
    :func:`tecomp.nn.cpu.schedule_attention` (what ``tc.auto_schedule`` gives this op)
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
        The prediction.
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
        return _te.sum(d * d * (1.0 / n), axis=axes)

    loss = _te.compute((1,), f, name=name if acc == pred.dtype else f"{name}.acc", tag="loss")
    return _rounded(loss, pred.dtype, name)


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
    / m)``: two reductions and one elementwise pass, not the gradient of the statistics'
    reductions.  The statistics stages are constants for differentiation.

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
        Added to the variance.
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

    def reduce(fn, what):
        def body(c):
            r = [_te.reduce_axis(x.shape[d], name=n) for d, n in zip(dims, "nhw")]
            idx = [None] * 4
            idx[axis] = c
            for d, v in zip(dims, r):
                idx[d] = v
            return _te.sum(fn(tuple(idx), c), axis=r)
        return _te.compute((C,), body, name=f"{out.name}.{what}", tag="batch_norm_grad")

    sum_g = reduce(lambda i, c: g(i), "grad_sum")
    sum_gx = reduce(lambda i, c: g(i) * (x[i].astype(acc) - mean[c]), "grad_dot")
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
        Added to the variance.
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
