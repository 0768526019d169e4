"""1-d and 3-d convolutions (TOPI's ``conv1d_ncw``/``conv1d_nwc`` and
``conv3d_ncdhw``/``conv3d_ndhwc``), with groups as PyTorch's ``conv1d``/``conv3d``."""
from __future__ import annotations

from typing import Sequence

from .. import te as _te
from ..te.tensor import Tensor
from ..ir.expr import Const
from ._check import Args
from ._common import ZERO_WHERE, _acc, _rounded, padded_taps
from .transform import pad

__all__ = ["conv1d_ncw", "conv1d_nwc", "conv3d_ncdhw", "conv3d_ndhwc"]

#: per operator: (spatial dimensions, channels first, the data's and the weight's layout
#: as the messages describe them)
#: leave the taps of the outer spatial dimensions that read the zero padding out of the
#: sum (a convolution's result is the same: they add ``0 * w``)
SKIP_PADDED_TAPS = True
#: ... and in ``conv3d_ncdhw`` those of the columns too: its template's register block
#: runs along a row, whose first and last blocks then go apart (``loop_partition``), each
#: column tap over the pixels that read the data (3x3x3 over 4 x 14 x 14: 40 of the 42
#: column taps of a row).  1 thread, CPU time, interleaved, a loaded Zen 4 (load average
#: 9), ms: 128 -> 128 channels 4x14x14, batch 2, 10.81 -> 10.23 (PyTorch 10.35); 64 -> 64
#: 8x28x28 11.39 -> 11.15.  Not ``conv3d_ndhwc`` (its rules: 128 channels 4x14x14 15.2 ->
#: 11.4 ms, but 64 channels 8x28x28 20.2 -> 25.8) nor the 1-d ones (their one dimension)
SKIP_PADDED_COLUMNS = True

_LAYOUTS = {
    "conv1d_ncw": (1, True, "NCW [batch, channels, width]", "OIW [out, in/groups, kw]"),
    "conv1d_nwc": (1, False, "NWC [batch, width, channels]", "WIO [kw, in/groups, out]"),
    "conv3d_ncdhw": (3, True, "NCDHW [batch, channels, depth, height, width]",
                     "OIDHW [out, in/groups, kd, kh, kw]"),
    "conv3d_ndhwc": (3, False, "NDHWC [batch, depth, height, width, channels]",
                     "DHWIO [kd, kh, kw, in/groups, out]"),
}

_SPATIAL = {1: ("width",), 2: ("height", "width"), 3: ("depth", "height", "width")}


def per_dim(a: Args, arg: str, v, low: int, n: int):
    """``v`` (an int, or ``n`` ints) as ``n`` ints ``>= low``: a stride, a dilation."""
    if n == 1:
        if isinstance(v, (tuple, list)) and len(v) == 1:
            v = v[0]
        return (a.ints(arg, v, low, 1),)
    return a.ints(arg, v, low, n)


def groups_of(a: Args, groups, data_ch, out_ch, w_in=None) -> int:
    """``groups=`` checked: an int >= 1 that divides the data's channels and the
    weight's output channels (``(arg, tensor, axis)`` each), the weight holding the
    data's channels / ``groups`` input channels (``w_in``: ``(arg, tensor, axis)``, or
    None: not checked)."""
    g = a.ints("groups", groups, 1, 1)
    for (arg, t, axis), desc in ((data_ch, "input channels"), (out_ch, "output channels")):
        e = t.shape[axis]
        if g > 1 and isinstance(e, Const) and int(e.value) % g:
            a.fail(f"{arg} ({t.name}) has {e} {desc} (axis {axis}), which groups={g} does "
                   f"not divide; give a groups that divides both channel counts")
    if w_in is None:
        return g
    arg, t, axis = data_ch
    warg, wt, waxis = w_in
    e, we = t.shape[axis], wt.shape[waxis]
    if isinstance(e, Const) and isinstance(we, Const) and int(e.value) != g * int(we.value):
        if g == 1:
            a.fail(f"{warg} ({wt.name}) has {we} input channels (axis {waxis}) but {arg} "
                   f"({t.name}) has {e} (axis {axis}); they must be equal (or give groups=, "
                   "the weight then holding the data's channels / groups)")
        a.fail(f"{warg} ({wt.name}) has {we} input channels (axis {waxis}) but {arg} "
               f"({t.name}) has {e} (axis {axis}); with groups={g} the weight must hold "
               f"{e}/{g} = {int(e.value) // g} input channels per group")
    return g


def conv_nd(op: str, data, weight, stride, padding, dilation, groups, name: str, out_dtype):
    """The convolution ``op`` (a key of ``_LAYOUTS``): checks, padding, the sum."""
    nsp, first, dlay, wlay = _LAYOUTS[op]
    a = Args(op, name)
    a.tensor("data", data, nsp + 2, dlay, "number")
    a.tensor("weight", weight, nsp + 2, wlay, "number")
    out_dtype = a.out_dtype(out_dtype, (data, weight))
    a.operands([("data", data), ("weight", weight)], out_dtype)
    stride = per_dim(a, "stride", stride, 1, nsp)
    dilation = per_dim(a, "dilation", dilation, 1, nsp)
    dsp = tuple(range(2, nsp + 2)) if first else tuple(range(1, nsp + 1))
    wsp = tuple(range(2, nsp + 2)) if first else tuple(range(nsp))
    dc, wi, wo = (1, 1, 0) if first else (nsp + 1, nsp, nsp + 1)
    g = groups_of(a, groups, ("data", data, dc), ("weight", weight, wo), ("weight", weight, wi))
    names = _SPATIAL[nsp]
    size = tuple(a.constant("data", data, d, w) for d, w in zip(dsp, names))
    kernel = tuple(a.constant("weight", weight, d, f"kernel {w}") for d, w in zip(wsp, names))
    pads = a.padding(padding, size, kernel, stride, dilation)
    out_sp = a.window(size, kernel, stride, pads, dilation, "data")
    src = data
    if any(b or e for b, e in pads):
        before = [0] * data.ndim
        after = [0] * data.ndim
        for d, (b, e) in zip(dsp, pads):
            before[d], after[d] = b, e
        src = pad(data, before, after, name=f"{name}.pad")
    acc = _acc(data.dtype, out_dtype)
    out = out_dtype or data.dtype
    N = data.shape[0]
    O = weight.shape[wo]
    Cg = weight.shape[wi]
    Og = a.constant("weight", weight, wo, "output channels") // g if g > 1 else None
    c = _te.reduce_axis(Cg, name="c")
    ks = [_te.reduce_axis(k, name=f"k{w[0]}") for k, w in zip(kernel, names)]

    def body(*i):
        n, o, ys = (i[0], i[1], i[2:]) if first else (i[0], i[-1], i[1:-1])
        ch = c if g == 1 else (o // Og) * Cg + c
        win = [y * s + k * d for y, k, s, d in zip(ys, ks, stride, dilation)]
        x = src[(n, ch, *win)] if first else src[(n, *win, ch)]
        w = weight[(o, c, *ks)] if first else weight[(*ks, c, o)]
        # the taps of the outer spatial dimensions (all three in NCDHW) that fall in the
        # zero padding are left out of the sum (tested once per tap, not per lane:
        # lower/hoist_guards.py; or the loops partitioned: lower/loop_partition.py)
        return _te.sum(x.astype(acc) * w.astype(acc), axis=[c, *ks],
                       where=padded_taps(win[:dims], pads[:dims], size[:dims]) if skip
                       else None)

    dims = nsp if SKIP_PADDED_COLUMNS and op == "conv3d_ncdhw" else nsp - 1
    skip = SKIP_PADDED_TAPS and any(b or e for b, e in pads[:dims])
    attrs = {"conv": (stride, pads, dilation, g)}
    shape = (N, O, *out_sp) if first else (N, *out_sp, O)
    conv = _te.compute(shape, body, name=name if acc == out else f"{name}.acc", tag=op,
                       attrs={**attrs, ZERO_WHERE: True} if skip else attrs)
    return _rounded(conv, out, name)


_PARAMS = """    stride : int or sequence of int, optional
        The stride, one for every spatial dimension or one per dimension.
    padding : int, sequence, "SAME" or "VALID", optional
        Zeros added around the spatial dimensions: an int (every side), one int per
        dimension, one ``(before, after)`` pair per dimension, the befores then the
        afters (TOPI's form), ``"VALID"`` (none) or ``"SAME"`` (TensorFlow's).
    dilation : int or sequence of int, optional
        The kernel's dilation.
    groups : int, optional
        As PyTorch's: the channels split into ``groups`` groups, the output channels
        of group ``g`` reading only the input channels of group ``g``; both channel
        counts must be multiples of it (``groups`` = channels: depthwise).
    name : str, optional
        The output stage's name; helper stages are ``<name>.<what>``.
    out_dtype : str, optional
        As :func:`~tecomp.nn.conv2d_nchw`'s: None keeps the data's dtype and sums
        float16/bfloat16 products in float32 (the stage ``<name>.acc``, rounded once by
        ``<name>``); a dtype casts both operands to it and is the output's.
"""

_SKIPPED = """    Notes
    -----
    The taps of the {dims} that fall in the zero padding are left out of the
    sum (a ``where=`` on the reduction marked ``tecomp.te.reduce.ZERO_WHERE``: the
    compiled loops split the border {parts} off, their tap loops starting past
    the padding, or test it once per tap; {share} of the work of a 3x3x3 kernel over 4
    planes of 14 x 14).  The result is the padded convolution's, but where a weight at
    such a tap is ``inf`` or NaN: it may add nothing to the outputs on the border here,
    where PyTorch adds ``0 * inf = NaN`` (the outputs inside, which read it, are NaN in
    both; whether a border output is depends on the schedule).
"""
_SKIPPED_NCDHW = _SKIPPED.format(dims="depth, height and width",
                                 parts="planes, rows and columns", share="a quarter")
_SKIPPED_NDHWC = _SKIPPED.format(dims="depth and height", parts="planes and rows",
                                 share="a fifth")

RAISES = """    Raises
    ------
    ShapeError, DTypeError
        For an argument of the wrong rank, dtype or extent (the message names it).
"""


def conv1d_ncw(data: Tensor, weight: Tensor, stride: int | Sequence[int] = 1,
               padding: int | str | Sequence = 0, dilation: int | Sequence[int] = 1,
               groups: int = 1,
               name: str = "conv1d_ncw", out_dtype: str | None = None) -> Tensor:
    return conv_nd("conv1d_ncw", data, weight, stride, padding, dilation, groups, name,
                   out_dtype)


def conv1d_nwc(data: Tensor, weight: Tensor, stride: int | Sequence[int] = 1,
               padding: int | str | Sequence = 0, dilation: int | Sequence[int] = 1,
               groups: int = 1,
               name: str = "conv1d_nwc", out_dtype: str | None = None) -> Tensor:
    return conv_nd("conv1d_nwc", data, weight, stride, padding, dilation, groups, name,
                   out_dtype)


def conv3d_ncdhw(data: Tensor, weight: Tensor, stride: int | Sequence[int] = 1,
                 padding: int | str | Sequence = 0, dilation: int | Sequence[int] = 1,
               groups: int = 1,
                 name: str = "conv3d_ncdhw", out_dtype: str | None = None) -> Tensor:
    return conv_nd("conv3d_ncdhw", data, weight, stride, padding, dilation, groups, name,
                   out_dtype)


def conv3d_ndhwc(data: Tensor, weight: Tensor, stride: int | Sequence[int] = 1,
                 padding: int | str | Sequence = 0, dilation: int | Sequence[int] = 1,
               groups: int = 1,
                 name: str = "conv3d_ndhwc", out_dtype: str | None = None) -> Tensor:
    return conv_nd("conv3d_ndhwc", data, weight, stride, padding, dilation, groups, name,
                   out_dtype)


conv1d_ncw.__doc__ = f"""1-d convolution (cross-correlation, as ``torch.nn.functional.conv1d``)
    in NCW, weights in OIW.

    Parameters
    ----------
    data : Tensor
        ``[N, C, W]`` (``N`` may be symbolic).
    weight : Tensor
        ``[O, C/groups, KW]`` (PyTorch's layout).
{_PARAMS}
    Returns
    -------
    Tensor
        ``[N, O, OW]``.

{RAISES}
    Examples
    --------
    >>> import tecomp as tc
    >>> import tecomp.nn as nn
    >>> X = tc.placeholder((1, 4, 100), name="X"); W = tc.placeholder((8, 4, 5), name="W")
    >>> tc.utils.get_const_tuple(nn.conv1d_ncw(X, W, stride=2, padding=2).shape)
    (1, 8, 50)
    """

conv1d_nwc.__doc__ = f"""1-d convolution in NWC, weights in WIO (TOPI's ``conv1d_nwc``).

    Parameters
    ----------
    data : Tensor
        ``[N, W, C]``.
    weight : Tensor
        ``[KW, C/groups, O]``.
{_PARAMS}
    Returns
    -------
    Tensor
        ``[N, OW, O]``.

{RAISES}"""

conv3d_ncdhw.__doc__ = f"""3-d convolution (as ``torch.nn.functional.conv3d``) in NCDHW,
    weights in OIDHW.

    Parameters
    ----------
    data : Tensor
        ``[N, C, D, H, W]`` (``N`` may be symbolic).
    weight : Tensor
        ``[O, C/groups, KD, KH, KW]`` (PyTorch's layout).
{_PARAMS}
    Returns
    -------
    Tensor
        ``[N, O, OD, OH, OW]``.

{_SKIPPED_NCDHW}
{RAISES}
    Examples
    --------
    >>> import tecomp as tc
    >>> import tecomp.nn as nn
    >>> X = tc.placeholder((1, 3, 8, 16, 16), name="X")
    >>> W = tc.placeholder((4, 3, 3, 3, 3), name="W")
    >>> tc.utils.get_const_tuple(nn.conv3d_ncdhw(X, W, padding=1).shape)
    (1, 4, 8, 16, 16)
    """

conv3d_ndhwc.__doc__ = f"""3-d convolution in NDHWC, weights in DHWIO (TOPI's
    ``conv3d_ndhwc``).

    Parameters
    ----------
    data : Tensor
        ``[N, D, H, W, C]``.
    weight : Tensor
        ``[KD, KH, KW, C/groups, O]``.
{_PARAMS}
    Returns
    -------
    Tensor
        ``[N, OD, OH, OW, O]``.

{_SKIPPED_NDHWC}
{RAISES}"""
