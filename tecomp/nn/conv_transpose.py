"""2-d transposed convolutions (``conv2d_transpose_nchw``, ``conv2d_transpose_nhwc``): the
data gradient of a convolution as an operator, with PyTorch's ``conv_transpose2d``
semantics."""
from __future__ import annotations

from typing import Sequence

from .. import te as _te
from ..ir.expr import Const
from ..te.tensor import Tensor
from ._check import INT32_MAX, Args
from ._common import _acc, _c, _rounded
from .conv_grad import transposed_conv2d
from .conv_nd import RAISES, groups_of, per_dim
from .linalg import matmul
from .transform import concatenate, split

#: a grouped transposed convolution with at least this many input channels per group and
#: at most this many groups is one transposed convolution per group (each as fast as an
#: ungrouped one); the others (depthwise) one sum over the taps that land.  Interleaved,
#: 2 threads, loaded machine, ms: 128 to 128 channels, 2 groups, 4x4 stride 2 on 16x16,
#: batch 4: the sum 1003.0 (PyTorch 115.1); depthwise 64 channels on 32x32, the sum
#: 10.9 (46.3)
_GROUP_MIN_CHANNELS = 8
_GROUPS_MAX = 16

__all__ = ["conv2d_transpose_nchw", "conv2d_transpose_nhwc"]


def _conv2d_transpose(nchw: bool, data, weight, stride, padding, output_padding, dilation,
                      groups, name: str, out_dtype):
    op = "conv2d_transpose_nchw" if nchw else "conv2d_transpose_nhwc"
    a = Args(op, name)
    a.tensor("data", data, 4, "NCHW [batch, in channels, height, width]" if nchw else
             "NHWC [batch, height, width, in channels]", "number")
    a.tensor("weight", weight, 4, "[in, out/groups, kh, kw] (PyTorch's)" if nchw else
             "[kh, kw, out/groups, in] (TensorFlow's)", "number")
    out_dtype = a.out_dtype(out_dtype, (data, weight))
    a.operands([("data", data), ("weight", weight)], out_dtype)
    stride = per_dim(a, "stride", stride, 1, 2)
    dilation = per_dim(a, "dilation", dilation, 1, 2)
    opad = per_dim(a, "output_padding", output_padding, 0, 2)
    dsp, wsp = ((2, 3), (2, 3)) if nchw else ((1, 2), (0, 1))
    dc, wi, wo = (1, 0, 1) if nchw else (3, 3, 2)
    a.match("weight", weight, wi, "data", data, dc, "input channels")
    g = groups_of(a, groups, ("data", data, dc), ("data", data, dc))
    names = ("height", "width")
    size = tuple(a.constant("data", data, d, w) for d, w in zip(dsp, names))
    kernel = tuple(a.constant("weight", weight, d, f"kernel {w}") for d, w in zip(wsp, names))
    if isinstance(padding, str):
        a.fail(f"padding {padding!r:.40} is a mode of the forward convolution; give ints (an "
               "int, one per dimension, (before, after) pairs, or the befores then the "
               "afters), the rows and columns removed from the output's borders")
    pads = a.padding(padding, size, kernel, stride, dilation)
    for o, s, d, w in zip(opad, stride, dilation, names):
        if o >= s and o >= d:
            a.fail(f"output_padding {o} ({w}) must be smaller than the stride ({s}) or the "
                   f"dilation ({d}): it adds the rows or columns a strided convolution "
                   "drops; give a smaller one")
    out_sp = tuple((n - 1) * s - b - e + d * (k - 1) + o + 1 for n, s, (b, e), d, k, o in
                   zip(size, stride, pads, dilation, kernel, opad))
    if min(out_sp) <= 0:
        a.fail(f"the output would be {'x'.join(map(str, out_sp))}: padding "
               f"{tuple(pads)} removes more than the {'x'.join(map(str, size))} data "
               "spreads to; give less padding")
    if max(out_sp) > INT32_MAX:
        a.fail(f"the output would be {'x'.join(map(str, out_sp))}, an extent past "
               f"{INT32_MAX} (its int32 extents): the {'x'.join(map(str, size))} data spread "
               f"{'x'.join(map(str, stride))} apart (stride); give a smaller stride or "
               "dilation")
    acc = _acc(data.dtype, out_dtype)
    out = out_dtype or data.dtype
    N = data.shape[0]
    Cout = a.constant("weight", weight, wo, "output channels per group") * g
    ext = [Const(e, "int32") for e in (Cout, *out_sp)]
    shape = (N, *ext) if nchw else (N, *ext[1:], ext[0])
    conf = (stride, tuple(b for b, _ in pads), dilation)
    tiles = kernel == stride and dilation == (1, 1) and opad == (0, 0) and \
        all(p == (0, 0) for p in pads)
    if g == 1 and tiles and isinstance(N, Const):
        return _tiles(nchw, data, weight, kernel, int(N.value), ext, out_dtype, name)
    if g == 1:
        return transposed_conv2d(data, weight, nchw, conf, shape, out, acc, name)
    cin_g = a.constant("data", data, dc, "input channels") // g
    if cin_g >= _GROUP_MIN_CHANNELS and g <= _GROUPS_MAX:
        # one transposed convolution per group (its phases run by the conv template),
        # joined along the channels
        cout_g = int(Cout) // g
        parts = []
        for k, (d, w) in enumerate(zip(split(data, g, axis=dc, name=f"{name}.data"),
                                       split(weight, g, axis=wi, name=f"{name}.weight"))):
            part = (N, Const(cout_g, "int32"), *ext[1:]) if nchw else \
                (N, *ext[1:], Const(cout_g, "int32"))
            parts.append(transposed_conv2d(d, w, nchw, conf, part, out, acc, f"{name}.g{k}"))
        return concatenate(parts, axis=dc, name=name)
    return _grouped(nchw, data, weight, conf, shape, g, acc, out, name)


def _tiles(nchw: bool, data, weight, kernel, N: int, ext, out_dtype, name: str):
    """A transposed convolution whose kernel equals its stride, without padding or
    dilation (a U-Net's 2x2 stride-2 up-convolution): each input pixel writes its own
    ``KH x KW`` tile of the output, so it is one GEMM, ``[C_out*KH*KW, C_in] @ [C_in,
    N*H*W]`` (NHWC: ``[N*H*W, C_in] @ [C_in, KH*KW*C_out]``, the data as it is), run by
    the GEMM template, and a stage that places each tile (``<name>`` over
    ``<name>.gemm``; ``<name>.data``/``<name>.weight`` the operands' views).
    Interleaved, one thread, ms, against the phases (PyTorch), loaded machine: 512 to
    256 channels on 32x32 35.8 vs 50.8 (40.8); 256 to 128 on 64x64 26.6 vs 31.8 (60.9);
    128 to 64 on 128x128 34.5 vs 41.2 (167.6)."""
    KH, KW = kernel
    H, W = (int(e.value) for e in ((data.shape[2], data.shape[3]) if nchw else
                                   (data.shape[1], data.shape[2])))
    C = int(weight.shape[0 if nchw else 3].value)
    O, OH, OW = (int(e.value) for e in ext)
    P = N * H * W
    zero = _c(0, data.dtype)
    if nchw:
        # (the reads guarded: the GEMM template packs whole blocks of its operands)
        d = _te.compute((C, P), lambda c, q: _te.if_then_else(
            q // (H * W) < N, data[q // (H * W), c, q // W % H, q % W], zero),
            name=f"{name}.data", tag="injective,layout_transform")
        w = _te.compute((O * KH * KW, C), lambda m, c: _te.if_then_else(
            m // (KH * KW) < O, weight[c, m // (KH * KW), m // KW % KH, m % KW], zero),
            name=f"{name}.weight", tag="injective,layout_transform")
        G = matmul(w, d, name=f"{name}.gemm", out_dtype=out_dtype)
        return _te.compute(
            (N, O, OH, OW), lambda n, o, y, x: G[(o * KH + y % KH) * KW + x % KW,
                                                 (n * H + y // KH) * W + x // KW],
            name=name, tag="injective,conv2d_transpose_tiles")
    d = _te.compute((P, C), lambda q, c: _te.if_then_else(
        q // (H * W) < N, data[q // (H * W), q // W % H, q % W, c], zero),
        name=f"{name}.data", tag="injective,reshape")
    w = _te.compute((C, KH * KW * O), lambda c, m: _te.if_then_else(
        m // (KW * O) < KH, weight[m // (KW * O), m // O % KW, m % O, c], zero),
        name=f"{name}.weight", tag="injective,layout_transform")
    G = matmul(d, w, name=f"{name}.gemm", out_dtype=out_dtype)
    return _te.compute(
        (N, OH, OW, O), lambda n, y, x, o: G[(n * H + y // KH) * W + x // KW,
                                             ((y % KH) * KW + x % KW) * O + o],
        name=name, tag="injective,conv2d_transpose_tiles")


def _grouped(nchw: bool, data, weight, conf, shape, g: int, acc: str, out: str, name: str):
    """A grouped transposed convolution as one sum over the kernel taps that land on each
    output element (``where=``): ``out[n, co, y, x] = sum over ci, ky, kx with y + p -
    ky*d = s*qy (and the same in x) of data[n, ci, qy, qx] * weight[ci, co % (C/g), ky,
    kx]``, ``ci`` running over the group of ``co``."""
    (sh, sw), (ph, pw), (dh, dw) = conf
    H, W = (data.shape[2], data.shape[3]) if nchw else (data.shape[1], data.shape[2])
    cin_g = int(weight.shape[0 if nchw else 3].value) // g
    cout_g = int(weight.shape[1 if nchw else 2].value)
    KH, KW = (weight.shape[2], weight.shape[3]) if nchw else (weight.shape[0], weight.shape[1])
    ci = _te.reduce_axis(cin_g, name="ci")
    ky = _te.reduce_axis(KH, name="ky")
    kx = _te.reduce_axis(KW, name="kx")

    def body(*i):
        n, co, y, x = i if nchw else (i[0], i[3], i[1], i[2])
        ty, tx = y + ph - ky * dh, x + pw - kx * dw
        c = (co // cout_g) * cin_g + ci
        qy, qx = ty // sh, tx // sw
        v = data[n, c, qy, qx] if nchw else data[n, qy, qx, c]
        w = weight[c, co % cout_g, ky, kx] if nchw else weight[ky, kx, co % cout_g, c]
        cond = _te.all(ty >= 0, tx >= 0, qy < H, qx < W, (ty % sh).equal(0),
                       (tx % sw).equal(0))
        return _te.sum(_te.if_then_else(cond, v.astype(acc) * w.astype(acc), _c(0, acc)),
                       axis=[ci, ky, kx])

    conv = _te.compute(shape, body, name=name if acc == out else f"{name}.acc",
                       tag="conv2d_transpose_grouped")
    return _rounded(conv, out, name)


_DOC_PARAMS = """    stride : int or (int, int), optional
        The stride of the convolution this one transposes: the data's rows and columns
        land ``stride`` apart in the output.
    padding : int or sequence, optional
        Rows and columns removed from the output's borders (PyTorch's ``padding``): an
        int, one per dimension, ``(before, after)`` pairs, or the befores then the afters.
    output_padding : int or (int, int), optional
        Rows and columns added after the output (PyTorch's ``output_padding``): each
        smaller than the stride or the dilation.
    dilation : int or (int, int), optional
        The kernel's dilation.
    groups : int, optional
        As PyTorch's: both channel counts split into ``groups`` groups.
    name : str, optional
        The output stage's name; helper stages are ``<name>.<what>``.
    out_dtype : str, optional
        As :func:`~tecomp.nn.conv2d_nchw`'s (float16/bfloat16 sum in float32 and round
        once).
"""


def conv2d_transpose_nchw(data: Tensor, weight: Tensor, stride: int | Sequence[int] = 1,
                          padding: int | Sequence = 0, output_padding: int | Sequence[int] = 0,
                          dilation: int | Sequence[int] = 1, groups: int = 1,
                          name: str = "conv2d_transpose_nchw",
                          out_dtype: str | None = None) -> Tensor:
    return _conv2d_transpose(True, data, weight, stride, padding, output_padding, dilation,
                             groups, name, out_dtype)


def conv2d_transpose_nhwc(data: Tensor, weight: Tensor, stride: int | Sequence[int] = 1,
                          padding: int | Sequence = 0, output_padding: int | Sequence[int] = 0,
                          dilation: int | Sequence[int] = 1, groups: int = 1,
                          name: str = "conv2d_transpose_nhwc",
                          out_dtype: str | None = None) -> Tensor:
    return _conv2d_transpose(False, data, weight, stride, padding, output_padding, dilation,
                             groups, name, out_dtype)


conv2d_transpose_nchw.__doc__ = f"""2-d transposed convolution in NCHW
    (``torch.nn.functional.conv_transpose2d``): the gradient of ``conv2d_nchw`` with
    respect to its data, as an operator (a decoder's up-convolution).

    It is built as that gradient is (one stride-1 convolution per phase ``(y % stride,
    x % stride)`` of the output, each with only the kernel taps that land on it: no
    multiplication by inserted zeros), so the convolution schedules run it; a kernel
    equal to the stride without padding, dilation or output_padding (constant batch) is
    one GEMM (each input pixel writes its own tile of the output); with groups
    of 8 input channels or more (16 groups at most), one such per group, joined along
    the channels; with narrower groups (depthwise), one sum over the taps that land on
    each output.

    Parameters
    ----------
    data : Tensor
        ``[N, C_in, H, W]`` (``N`` may be symbolic).
    weight : Tensor
        ``[C_in, C_out/groups, KH, KW]`` (PyTorch's layout).
{_DOC_PARAMS}
    Returns
    -------
    Tensor
        ``[N, C_out, OH, OW]``, ``OH = (H - 1)*stride - pad_before - pad_after +
        dilation*(KH - 1) + output_padding + 1`` (and the same for ``OW``).

{RAISES}
    Examples
    --------
    >>> import tecomp as tc
    >>> import tecomp.nn as nn
    >>> X = tc.placeholder((1, 8, 16, 16), name="X")
    >>> W = tc.placeholder((8, 4, 4, 4), name="W")
    >>> tc.utils.get_const_tuple(nn.conv2d_transpose_nchw(X, W, stride=2, padding=1).shape)
    (1, 4, 32, 32)
    """

conv2d_transpose_nhwc.__doc__ = f"""2-d transposed convolution in NHWC, weights
    ``[KH, KW, C_out/groups, C_in]`` (TensorFlow's ``conv2d_transpose`` filter).

    Parameters
    ----------
    data : Tensor
        ``[N, H, W, C_in]``.
    weight : Tensor
        ``[KH, KW, C_out/groups, C_in]``.
{_DOC_PARAMS}
    Returns
    -------
    Tensor
        ``[N, OH, OW, C_out]`` (as :func:`conv2d_transpose_nchw`'s).

{RAISES}    """
