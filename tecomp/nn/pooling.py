"""Max and average pooling over 1, 2 or 3 spatial dimensions (channels first or last),
adaptive pooling to any output size, and global pooling.

Every operator reads its padding with :meth:`~tecomp.nn._check.Args.padding` (an int, one
per dimension, ``(before, after)`` pairs, TOPI's befores-then-afters, ``"SAME"``,
``"VALID"``).  The output size is PyTorch's: ``(size + before + after - dilation *
(kernel - 1) - 1) / stride + 1``, rounded down, or up with ``ceil_mode`` as long as the
last window starts inside the input or its left padding.  Padding is a stage
``<name>.pad`` (``-inf`` for max pooling, zero for average pooling) that the schedules
inline.  A max pooling window on padding only is ``-inf`` (PyTorch's result: with a
dilation its taps can step over the data); an average pooling window on padding only
(a padding past half the kernel, which PyTorch refuses) is refused.
"""
from __future__ import annotations

import math
import numbers
from typing import Optional, Sequence, Union

from .. import te as _te
from ..te.tensor import Tensor
from ._check import INT32_MAX, Args
from ._common import _acc
from .transform import pad

__all__ = ["max_pool1d", "max_pool2d", "max_pool3d", "avg_pool1d", "avg_pool2d", "avg_pool3d",
           "adaptive_max_pool1d", "adaptive_max_pool2d", "adaptive_max_pool3d",
           "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d",
           "global_max_pool2d", "global_avg_pool2d"]

#: the layouts of each number of spatial dimensions (channels first, channels last)
LAYOUTS = {1: ("NCW", "NWC"), 2: ("NCHW", "NHWC"), 3: ("NCDHW", "NDHWC")}
_WORDS = {"N": "batch", "C": "channels", "D": "depth", "H": "height", "W": "width"}
Size = Union[int, Sequence[int]]
#: a padding: an int, per dimension, ``(before, after)`` pairs, befores then afters, a mode
Padding = Union[int, str, Sequence[int], Sequence[Sequence[int]]]
#: an adaptive pooling's output size (None keeps a dimension's size)
OutSize = Union[int, Sequence[Optional[int]]]


class _Pool:
    """The checked arguments of one pooling call: the layout, the spatial axes of the
    data and their constant extents."""

    def __init__(self, op: str, name: str, data, nd: int, layout):
        self.a = a = Args(op, name)
        if layout not in LAYOUTS[nd]:
            a.fail(f"layout must be {' or '.join(repr(x) for x in LAYOUTS[nd])} (the {nd}-d "
                   f"layouts, channels first or last), got {layout!r:.40}")
        self.layout = layout
        words = ", ".join(_WORDS[c] for c in layout)
        a.tensor("data", data, nd + 2, f"{layout} [{words}]")
        self.data, self.nd = data, nd
        self.axes = tuple(i for i, c in enumerate(layout) if c in "DHW")
        self.size = tuple(a.constant("data", data, ax, _WORDS[layout[ax]]) for ax in self.axes)
        self.words = tuple(_WORDS[layout[ax]] for ax in self.axes)

    def sizes(self, arg: str, v, low: int):
        """``v`` (an int, or one per spatial dimension) as one int per dimension."""
        if self.nd == 1:
            one = v[0] if isinstance(v, (tuple, list)) and len(v) == 1 else v
            return (self.a.ints(arg, one, low, 1),)
        return self.a.ints(arg, v, low, self.nd)

    def window(self, kernel, stride, padding, dilation, ceil_mode, padding_only: bool):
        """``(kernel, stride, dilation, padding, pads, out)``: ``padding`` the user's
        ``(before, after)`` pair per spatial dimension, ``pads`` the same with the after
        side grown to cover ``ceil_mode``'s last window.  ``padding_only``: whether a
        window may lie on padding only (max pooling's ``-inf``); if not, such a
        window is refused."""
        a = self.a
        k = self.sizes("kernel", kernel, 1)
        s = self.sizes("stride", kernel if stride is None else stride, 1)
        d = self.sizes("dilation", dilation, 1)
        a.flag("ceil_mode", ceil_mode)
        p = a.padding(padding, self.size, k, s, d)
        out = list(a.window(self.size, k, s, p, d, "data"))
        pads = []
        for i, (n, kk, ss, dd, (b, e)) in enumerate(zip(self.size, k, s, d, p)):
            if ceil_mode:
                o = -(-(n + b + e - dd * (kk - 1) - 1) // ss) + 1
                if (o - 1) * ss >= n + b:   # (PyTorch's rule: the last window starts inside)
                    o -= 1
                out[i] = o
            e = max(e, (out[i] - 1) * ss + dd * (kk - 1) + 1 - n - b)
            for o in () if padding_only else (0, out[i] - 1) if dd == 1 else range(out[i]):
                t0 = o * ss - b
                j = max(0, -(-(-t0) // dd))   # the first tap at or after 0
                if j >= kk or t0 + j * dd >= n:
                    a.fail(f"padding {padding!r:.40} leaves window {o} of the {self.words[i]} "
                           f"on padding only (the {kk}-wide kernel, stride {ss}, dilation "
                           f"{dd}, over {n} elements padded by {b}+{e}); pad less (at most "
                           "kernel // 2 on each side, PyTorch's rule, always fits)")
            pads.append((b, e))
        return k, s, d, p, tuple(pads), tuple(out)

    def out_shape(self, out):
        shape = list(self.data.shape)
        for ax, o in zip(self.axes, out):
            shape[ax] = o
        return tuple(shape)

    def padded(self, pads, value, name):
        if not any(b or e for b, e in pads):
            return self.data
        before, after = [0] * (self.nd + 2), [0] * (self.nd + 2)
        for ax, (b, e) in zip(self.axes, pads):
            before[ax], after[ax] = b, e
        return pad(self.data, before, after, value=value, name=f"{name}.pad")

    def reduce_axes(self, extents):
        names = {1: ("kx",), 2: ("ky", "kx"), 3: ("kz", "ky", "kx")}[self.nd]
        return [_te.reduce_axis(e, name=n) for e, n in zip(extents, names)]

    def index(self, i, at):
        """The data index of output index ``i`` with spatial positions ``at(j, i[ax])``."""
        idx = list(i)
        for j, ax in enumerate(self.axes):
            idx[ax] = at(j, i[ax])
        return tuple(idx)


# ---------------------------------------------------------------------------------
# max / average pooling


def _max_pool(op, nd, data, kernel, stride, padding, dilation, ceil_mode, layout, name):
    p = _Pool(op, name, data, nd, layout)
    k, s, d, _, pads, out = p.window(kernel, stride, padding, dilation, ceil_mode, True)
    src = p.padded(pads, -math.inf, name)
    rk = p.reduce_axes(k)
    return _te.compute(
        p.out_shape(out),
        lambda *i: _te.max(src[p.index(i, lambda j, o: o * s[j] + rk[j] * d[j])], axis=rk),
        name=name, tag="pool_max", attrs={"layout": p.layout})


def _avg_pool(op, nd, data, kernel, stride, padding, ceil_mode, count_include_pad, layout,
              name):
    p = _Pool(op, name, data, nd, layout)
    p.a.flag("count_include_pad", count_include_pad)
    k, s, _, user, pads, out = p.window(kernel, stride, padding, 1, ceil_mode, False)
    acc = _acc(data.dtype)
    src = p.padded(pads, 0.0, name)
    rk = p.reduce_axes(k)
    sums = _te.compute(
        p.out_shape(out),
        lambda *i: _te.sum(src[p.index(i, lambda j, o: o * s[j] + rk[j])].astype(acc), axis=rk),
        name=f"{name}.sum", tag="pool_sum", attrs={"layout": p.layout})
    # the elements each window counts, per dimension: the kernel, less what lies past the
    # padding (a ceil_mode window) or, without count_include_pad, past the data
    counts = []
    for j, n in enumerate(p.size):
        (b, e), last = user[j], (out[j] - 1) * s[j] - user[j][0]
        hi = n + (e if count_include_pad else 0)
        lo = -b if count_include_pad else 0
        if last + k[j] <= hi and -b >= lo:
            counts.append(k[j])
        else:
            counts.append((j, lo, hi))
    total = math.prod(c for c in counts if isinstance(c, int))

    def f(*i):
        c = None
        for item in counts:
            if isinstance(item, int):
                continue
            j, lo, hi = item
            start = i[p.axes[j]] * s[j] - user[j][0]
            w = _te.minimum(start + k[j], hi) - _te.maximum(start, lo)
            c = w if c is None else c * w
        if c is None:
            return (sums[i] * (1.0 / total)).astype(data.dtype)
        return (sums[i] / (c * total).astype(acc)).astype(data.dtype)

    return _te.compute(sums.shape, f, name=name, tag="pool_avg", attrs={"layout": p.layout})


def _pool_doc(kind: str, nd: int, ref: str) -> str:
    first, last = LAYOUTS[nd]
    shape = ", ".join(_WORDS[c][0].upper() if c in "DHW" else c for c in first)
    oshape = ", ".join("O" + _WORDS[c][0].upper() if c in "DHW" else c for c in first)
    head = {"max": f"Max pooling over ``[{shape}]`` ({first}, or {last} with ``layout=``); "
                   "padding is ``-inf`` (never\n    the maximum; a window on padding only, "
                   "which a dilation allows, is ``-inf``).\n\n    The gradient goes "
                   "to the first maximum of each window in row-major order,\n    never to "
                   "the padding, or to the window's last NaN (PyTorch's rule).",
            "avg": f"Average pooling over ``[{shape}]`` ({first}, or {last} with "
                   "``layout=``) with zero\n    padding.\n\n    The window sums "
                   "(``<name>.sum``) of float16/bfloat16 data are float32."}[kind]
    dil = ("    dilation : int or sequence of int, optional\n        The spacing of the "
           "window's taps (default 1).\n") if kind == "max" else ""
    cip = ("    count_include_pad : bool, optional\n        Divide by the window's size "
           "within the padding (True, PyTorch's default)\n        or by the number of data "
           "elements in it.\n") if kind == "avg" else ""
    pad_rule = ("." if kind == "max" else
                "; no window may lie\n        on padding only (at most half the kernel "
                "on each side always fits).")
    return f"""{head}  PyTorch's ``{ref}``, TOPI's ``pool{nd}d``.

    Parameters
    ----------
    data : Tensor
        ``[{shape}]`` (``layout``); the batch and channels may be symbolic.
    kernel : int or sequence of int
        The window (one int for every spatial dimension, or one per dimension).
    stride : int or sequence of int, optional
        The stride (default: the kernel).
    padding : int, sequence or str, optional
        An int, one per dimension, one ``(before, after)`` pair per dimension, the
        befores then the afters (TOPI's), ``"SAME"`` or ``"VALID"``{pad_rule}
{cip}    name : str, optional
        The output stage's name; helper stages are ``<name>.<what>``.
{dil}    ceil_mode : bool, optional
        Round the output size up (the last window must start inside the data or its
        left padding).
    layout : str, optional
        ``"{first}"`` (the default) or ``"{last}"``.

    Returns
    -------
    Tensor
        ``[{oshape}]`` in ``layout``.

    Raises
    ------
    ShapeError, DTypeError
        For an argument of the wrong rank, dtype, size or layout (the message names it).
    """


def _max_op(nd: int):
    """The public ``max_pool{nd}d``."""
    op = f"max_pool{nd}d"

    def pool(data: Tensor, kernel: Size, stride: Optional[Size] = None, padding: Padding = 0,
             name: str = op, *, dilation: Size = 1, ceil_mode: bool = False,
             layout: str = LAYOUTS[nd][0]) -> Tensor:
        return _max_pool(op, nd, data, kernel, stride, padding, dilation, ceil_mode, layout,
                         name)

    pool.__name__ = pool.__qualname__ = op
    pool.__doc__ = _pool_doc("max", nd, f"torch.nn.functional.{op}")
    return pool


def _avg_op(nd: int):
    """The public ``avg_pool{nd}d``."""
    op = f"avg_pool{nd}d"

    def pool(data: Tensor, kernel: Size, stride: Optional[Size] = None, padding: Padding = 0,
             count_include_pad: bool = True, name: str = op, *, ceil_mode: bool = False,
             layout: str = LAYOUTS[nd][0]) -> Tensor:
        return _avg_pool(op, nd, data, kernel, stride, padding, ceil_mode, count_include_pad,
                         layout, name)

    pool.__name__ = pool.__qualname__ = op
    pool.__doc__ = _pool_doc("avg", nd, f"torch.nn.functional.{op}")
    return pool


max_pool1d, max_pool2d, max_pool3d = _max_op(1), _max_op(2), _max_op(3)
avg_pool1d, avg_pool2d, avg_pool3d = _avg_op(1), _avg_op(2), _avg_op(3)


# ---------------------------------------------------------------------------------
# adaptive and global pooling


def adaptive_span(n: int, o: int):
    """``(the largest extent of the windows, whether they are all of it)`` of adaptive
    pooling of ``n`` elements to ``o`` outputs.  Window ``i`` is ``[i*n // o, ceil((i+1)*n
    / o))``: with ``q, r = divmod(n, o)`` and ``r > 0`` its extent is ``q + ceil((t + r) /
    o)`` for ``t = i*r mod o``, which takes every multiple of ``g = gcd(r, o)`` below ``o``;
    so the largest is ``q + 2`` where ``r > g`` (``t = o - g``), else ``q + 1``.  (A loop
    over the ``o`` windows took minutes for an output_size of 2**30.)"""
    q, r = divmod(n, o)
    return (q, True) if r == 0 else (q + (2 if r > math.gcd(r, o) else 1), False)


def _adaptive(kind: str, op: str, nd: int, data, output_size, layout, name):
    """PyTorch's adaptive pooling: output ``i`` of a dimension of ``n`` elements pools
    ``[floor(i * n / out), ceil((i + 1) * n / out))``; where ``out`` divides ``n`` that
    is a plain pooling with kernel and stride ``n / out``."""
    p = _Pool(op, name, data, nd, layout)
    a = p.a
    many = isinstance(output_size, (tuple, list))
    vals = list(output_size) if many else [output_size] * nd
    if len(vals) != nd or not all(
            v is None or (isinstance(v, numbers.Integral) and not isinstance(v, bool) and v >= 1)
            for v in vals):
        many = f" or {nd} of them (None keeps a dimension's size)" if nd > 1 else ""
        a.fail(f"output_size must be an int >= 1{many}, got {output_size!r:.60}")
    # (numpy integers, as the kernels and strides take them: plain ints from here on)
    out = tuple(n if v is None else int(v) for n, v in zip(p.size, vals))
    for n, o, w in zip(p.size, out, p.words):
        if o * (n + 1) - 1 > INT32_MAX:   # (the largest: (i + 1) * n + o - 1, i = o - 1)
            a.fail(f"output_size {o} over the {n} elements of the {w}: the windows' bounds "
                   f"(up to {o} * {n + 1} - 1) pass {INT32_MAX} (the int32 index "
                   "arithmetic); give a smaller output_size")
    # per dimension: (the window's largest extent, uniform)
    spans = [adaptive_span(n, o) for n, o in zip(p.size, out)]
    rk = p.reduce_axes([w for w, _ in spans])

    def start(j, o):
        n, m = p.size[j], out[j]
        return o * (n // m) if spans[j][1] else (o * n) // m

    def at(j, o):
        if spans[j][1]:
            return start(j, o) + rk[j]
        return _te.minimum(start(j, o) + rk[j], p.size[j] - 1)

    def inside(i):
        conds = [rk[j] < (((i[ax] + 1) * p.size[j] + out[j] - 1) // out[j] - start(j, i[ax]))
                 for j, ax in enumerate(p.axes) if not spans[j][1]]
        c = None
        for x in conds:
            c = x if c is None else c & x
        return c

    shape = p.out_shape(out)
    x = p.data
    if kind == "max":
        return _te.compute(shape, lambda *i: _te.max(x[p.index(i, at)], axis=rk,
                                                     where=inside(i)),
                           name=name, tag="pool_max", attrs={"layout": p.layout})
    acc = _acc(x.dtype)
    sums = _te.compute(shape, lambda *i: _te.sum(x[p.index(i, at)].astype(acc), axis=rk,
                                                 where=inside(i)),
                       name=f"{name}.sum", tag="pool_sum", attrs={"layout": p.layout})

    def f(*i):
        c, total = None, 1
        for j, ax in enumerate(p.axes):
            if spans[j][1]:
                total *= spans[j][0]
                continue
            n, m = p.size[j], out[j]
            w = ((i[ax] + 1) * n + m - 1) // m - (i[ax] * n) // m
            c = w if c is None else c * w
        if c is None:
            return (sums[i] * (1.0 / total)).astype(x.dtype)
        return (sums[i] / (c * total).astype(acc)).astype(x.dtype)

    return _te.compute(shape, f, name=name, tag="pool_avg", attrs={"layout": p.layout})


def _adaptive_doc(kind: str, nd: int) -> str:
    first, last = LAYOUTS[nd]
    what = {"max": "The maximum", "avg": "The mean"}[kind]
    extra = ("  The gradient goes to the first\n    maximum of each window." if kind == "max"
             else "  float16/bfloat16 windows are summed in float32.")
    return f"""{what} over each of ``output_size`` windows that tile the spatial
    dimensions (PyTorch's ``adaptive_{kind}_pool{nd}d``, TOPI's ``adaptive_pool``):
    output ``i`` of a dimension of ``n`` elements pools elements
    ``floor(i * n / out)`` to ``ceil((i + 1) * n / out)`` (exclusive); windows of
    unequal sizes where ``out`` does not divide ``n``.{extra}

    Parameters
    ----------
    data : Tensor
        ``{first}`` (the default) or ``{last}`` (``layout``); the batch and channels may
        be symbolic.
    output_size : int or sequence of (int or None)
        The output's spatial size (one int for every dimension, or one per dimension;
        None keeps that dimension's size), at least 1 (tecomp has no zero-size
        tensors) and with ``out * (n + 1) - 1`` within int32 (the windows' bounds).
    layout : str, optional
        ``"{first}"`` or ``"{last}"``.
    name : str, optional
        The output stage's name; helper stages are ``<name>.<what>``.

    Returns
    -------
    Tensor
        The pooled tensor in ``layout``.

    Raises
    ------
    ShapeError, DTypeError
        For an argument of the wrong rank, dtype, size or layout (the message names it).
    """


def _adaptive_op(kind: str, nd: int):
    """The public ``adaptive_{kind}_pool{nd}d``."""
    op = f"adaptive_{kind}_pool{nd}d"

    def pool(data: Tensor, output_size: OutSize, layout: str = LAYOUTS[nd][0],
             name: str = op) -> Tensor:
        return _adaptive(kind, op, nd, data, output_size, layout, name)

    pool.__name__ = pool.__qualname__ = op
    pool.__doc__ = _adaptive_doc(kind, nd)
    return pool


adaptive_max_pool1d = _adaptive_op("max", 1)
adaptive_max_pool2d = _adaptive_op("max", 2)
adaptive_max_pool3d = _adaptive_op("max", 3)
adaptive_avg_pool1d = _adaptive_op("avg", 1)
adaptive_avg_pool2d = _adaptive_op("avg", 2)
adaptive_avg_pool3d = _adaptive_op("avg", 3)


def _global_op(kind: str):
    """The public ``global_{kind}_pool2d``: ``adaptive_{kind}_pool2d(data, 1)``."""
    op = f"global_{kind}_pool2d"

    def pool(data: Tensor, layout: str = "NCHW", name: str = op) -> Tensor:
        return _adaptive(kind, op, 2, data, 1, layout, name)

    what = {"max": "maximum", "avg": "mean"}[kind]
    pool.__name__ = pool.__qualname__ = op
    pool.__doc__ = f"""The {what} over the height and width (TOPI's ``global_pool`` with
    ``"{kind}"``): ``adaptive_{kind}_pool2d(data, 1)``, the spatial dimensions kept with
    size 1{"; the sums of float16/bfloat16 data are float32" if kind == "avg" else ""}.

    Parameters
    ----------
    data : Tensor
        ``[N, C, H, W]`` (``"NCHW"``) or ``[N, H, W, C]`` (``"NHWC"``).
    layout : str, optional
        ``"NCHW"`` or ``"NHWC"``.
    name : str, optional
        The output stage's name{"; the sums are ``<name>.sum``" if kind == "avg" else ""}.

    Returns
    -------
    Tensor
        ``[N, C, 1, 1]`` or ``[N, 1, 1, C]``.

    Raises
    ------
    ShapeError, DTypeError
        For an argument of the wrong rank, dtype or layout (the message names it).
    """
    return pool


global_max_pool2d = _global_op("max")
global_avg_pool2d = _global_op("avg")
