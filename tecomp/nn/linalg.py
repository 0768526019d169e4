"""Dense algebra: ``matmul``, ``dense`` (``nn.Linear``) and ``batch_matmul``."""
from __future__ import annotations

from .. import te as _te
from ..te.tensor import Tensor
from ._check import Args, same_extent as _same
from ._common import _acc, _is_one, _rounded

__all__ = ["matmul", "dense", "batch_matmul"]


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
        For an argument of the wrong rank, dtype or extent, or a ``transpose_a`` /
        ``transpose_b`` that is not a bool (the message names it).
    """
    a, acc, out = _gemm_args(
        "batch_matmul", name,
        (("A", A, 3, "[batch, k, m]" if transpose_a else "[batch, m, k]"),
         ("B", B, 3, "[batch, n, k]" if transpose_b else "[batch, k, n]")), out_dtype)
    a.flag("transpose_a", transpose_a)
    a.flag("transpose_b", transpose_b)
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
