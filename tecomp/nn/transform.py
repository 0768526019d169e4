"""Layout and data-movement operators: ``pad``, ``flatten``, ``transpose``, ``reshape``,
``concatenate``, ``split``, ``embedding``, and ``dropout`` with its counter-based mask."""
from __future__ import annotations

import math
import numbers
from typing import List, Sequence

import numpy as np

from .. import te as _te
from ..errors import DTypeError
from ..ir import dtype as _dt, op as _op
from ..ir.expr import Const, Expr, Var
from ..te.tensor import Tensor
from ._check import Args, real, same_extent as _same
from ._common import _c


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
        The padding value (0 by default): a number ``data``'s dtype holds (an integer in
        its range for an integer tensor, not NaN).
    name : str, optional
        The output stage's name; helper stages are ``<name>.<what>``.

    Returns
    -------
    Tensor
        The output.

    Raises
    ------
    ShapeError, DTypeError
        For an argument of the wrong rank, dtype or extent, or a ``value`` the dtype
        cannot hold (the message names it).

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
            a.ints(f"{arg}[{d}]", x, 0, count=1, high=None)
    value = a.scalar("value", value, data, "data")
    # exact (index_add): a constant extent padded past int32 becomes an int64 one, where
    # ``+`` would wrap it (2**31 - 4 rows padded by 3 and 3 made -2**31 + 2 of them)
    shape = [_op.index_add(_op.index_add(e, int(b)), int(a)) if (b or a) else e
             for e, b, a in zip(data.shape, pad_before, pad_after)]

    def f(*i):
        conds, idx = [], []
        for d, x in enumerate(i):
            b, a = pad_before[d], pad_after[d]
            if b or a:
                conds.append(x >= b)
                conds.append(x < _op.index_add(data.shape[d], int(b)))
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
        The new extents; one may be -1 (inferred); ``()`` for a tensor of one element
        (a 0-d result).
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
    def is_int(v):
        return (isinstance(v, numbers.Integral) and not isinstance(v, bool)) or \
            (isinstance(v, Const) and _dt.is_int(v.dtype))

    shape = (shape,) if is_int(shape) else shape
    # (numpy integers too, as the kernels and strides take them; () for one element: 0-d)
    want = [int(v.value) if isinstance(v, Const) else int(v) for v in shape] if \
        isinstance(shape, (tuple, list)) and (shape or total == 1) and all(
            is_int(v) for v in shape) else None
    if want is None:
        a.fail(f"the new shape must be a tuple of ints (() only for a tensor of one "
               f"element), got {shape!r:.60}")
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
    if nd == 0:
        a.fail("the tensors are 0-d: they have no axis to join along; reshape them to (1,) "
               "(tecomp.nn.reshape)")
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

__all__ = ["pad", "flatten", "transpose", "reshape", "concatenate", "split", "embedding", "dropout", "squares32"]


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
    # (numpy floats and ints are numbers too; an int past float64's range is inf, refused)
    pf = real(p)
    if pf is None or not 0.0 <= pf <= 1.0:
        a.fail(f"p must be a probability in [0, 1], got {p!r:.60}")
    if isinstance(seed, numbers.Integral) and not isinstance(seed, bool) and \
            -2 ** 23 <= int(seed) < 2 ** 23:
        seed = int(seed)
    elif not (isinstance(seed, Var) and seed.dtype == "int64"):
        a.fail(f"seed must be an int or an int64 tc.var, got {seed!r:.60} (an int seed in "
               "[-2**23, 2**23): the counter is seed * 2**40 + index, in int64)")
    p = pf
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


def _padded(nchw: bool, data, pads, name: str):
    """``data`` padded by ``pads`` (one ``(before, after)`` pair per spatial dimension),
    the stage ``<name>.pad``; ``data`` itself without padding."""
    if not any(b or a for b, a in pads):
        return data
    (pt, pb), (pl, pr) = pads
    before, after = ((0, 0, pt, pl), (0, 0, pb, pr)) if nchw else ((0, pt, pl, 0),
                                                                   (0, pb, pr, 0))
    return pad(data, before, after, name=f"{name}.pad")
