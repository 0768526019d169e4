"""Per-tensor affine int8 quantization, as PyTorch defines it (compute definitions).

``real = scale * (q - zero_point)``; ``scale`` and ``zero_point`` are Python numbers (the
DAG's constants, as in TVM's QNN).  Each function reproduces the rounding of the PyTorch
kernel it stands for, bit for bit on this machine's float32 (tests/test_quant.py checks
millions of random values, every boundary included):

* :func:`quantize` -- ``torch.quantize_per_tensor``: ``clamp(rint(x * inv + zp))`` with
  ``inv = 1.0f / scale``, rounded half to even; for ``uint8``/``int8`` the multiply-add is
  rounded once (fbgemm's: ``tc.fma``), for ``int32`` the product and the sum are each
  rounded to float32 (as PyTorch does).  That is the pinned torch 2.13.0 (CPU build).
  Another build rounds before adding the zero point, ``clamp(rint(float32(x * inv)) +
  zp)``: torch 2.11.0+cu130 on an Intel Xeon (measured with its AVX-512 kernels and with
  ``ATEN_CPU_CAPABILITY=avx2``, so it is the build, not the CPU).  Against it tecomp
  differs by 1 where ``x * inv`` is within rounding of a half (218 of 300,007 values at
  scale 0.1, zero point 3, where 2,000 are exact halves); requantize and concatenate
  follow;
* :func:`dequantize` -- ``Tensor.dequantize()``: ``float(q - zp) * scale`` in float32;
* :func:`requantize` -- ``quantize_per_tensor(q.dequantize(), out_scale, out_zp)``;
* :func:`quantized_add` -- ``torch.ops.quantized.add``: each input dequantized as
  ``q * scale + (-zp * scale)`` with one rounding (the vector kernel's fused
  multiply-add, ``tc.fma``), the float32 sum, then ``clamp(rint(sum * inv) + zp)`` (its vector
  quantization: the product rounded to float32 first).  PyTorch's own result depends on
  where an element falls: the last ``n % 64`` elements of each thread's chunk go through
  its scalar path, which dequantizes ``(q - zp) * scale`` and quantizes with the fused
  form, and can differ from its vector path by 1 (seen: 1 element of 200,003 on 2
  threads); tecomp matches the vector path everywhere;
* :func:`quantized_concatenate` -- ``torch.ops.quantized.cat``: every input requantized to
  the output's scale and zero point (:func:`requantize`), then joined;
* :func:`quantized_dense` -- ``torch.ao.nn.quantized.Linear`` (fbgemm): ``acc = sum_k (x -
  x_zp)(w - w_zp)`` in int32, then ``clamp(rint((float(acc) + bias / s) * m) + out_zp)`` with
  ``s = x_scale * w_scale`` and ``m = s / out_scale`` in float32 (found by comparing
  formulas: the only one of eight that matched on 1.3M outputs).  An int32 ``bias`` (TVM's
  QNN convention) is added to ``acc`` instead;
* :func:`quantized_conv2d` -- ``torch.ao.nn.quantized.Conv2d`` (fbgemm), NCHW: the same
  int32 accumulator over the window (and the input channels of its group), the input
  padded with its zero point (the real 0), requantized as :func:`quantized_dense`.

The dense accumulator is computed as ``sum x w - w_zp sum x - x_zp sum w + K x_zp w_zp``
(int32 wraps, so this is the same value bit for bit): its first term is a plain u8 x s8
GEMM, which ``tc.auto_schedule`` runs on the target's dot-product intrinsic (VNNI's
``vpdpbusd`` where the CPU has it, see ``tecomp.te.intrin_x86``).

Both are exact: without VNNI, fbgemm sums pairs of ``u8 x s8`` products in saturating
int16 (AVX2's ``vpmaddubsw``), so with activations of more than 7 bits its result can
differ from these (and from the exact sum); with 7-bit activations (PyTorch's x86
``reduce_range``) they agree bit for bit.

Quantized dtypes: ``uint8`` (PyTorch's ``quint8``), ``int8`` (``qint8``), ``int32``
(``qint32``).  A scale, and the product ``x_scale * w_scale`` and the multiplier
``x_scale * w_scale / out_scale`` of a quantized GEMM, must be normal float32 numbers
(1.175e-38 to 3.403e38): the kernels hold them and their reciprocals in float32 (a
``ComputeError`` otherwise; PyTorch takes them and gives saturated or NaN-derived values).
"""
from __future__ import annotations

import math
import numbers
from typing import Optional, Sequence, Tuple

import numpy as np

from .. import te as _te
from ..errors import ComputeError, DTypeError
from ..ir.expr import Const
from ._check import Args, real
from .conv import _conv_compute
from .transform import concatenate, pad as _pad

__all__ = ["quantize", "dequantize", "requantize", "quantized_add", "quantized_concatenate",
           "quantized_dense", "quantized_conv2d", "QDTYPES"]

#: the quantized dtypes and their ranges
QDTYPES = {"uint8": (0, 255), "int8": (-128, 127), "int32": (-2 ** 31, 2 ** 31 - 1)}


#: the range of a scale (and of a product or ratio of scales): float32's normal numbers,
#: whose reciprocals are finite float32 too (the kernels hold both in float32)
_SCALE_MIN, _SCALE_MAX = float(np.finfo(np.float32).tiny), float(np.finfo(np.float32).max)


def _scale(v, what: str) -> float:
    f = real(v)     # (None for a bool or a non-number; +-inf for an int past float64)
    if f is None or not math.isfinite(f) or f <= 0:
        raise ComputeError(f"{what} must be a finite number > 0, got {v!r:.60}")
    _float32_scale(f, what)
    return f


def _float32_scale(v: float, what: str) -> None:
    """A ComputeError where ``v`` (a scale, or a product or ratio of scales that a kernel
    multiplies by) rounds to 0, a subnormal or infinity in float32 (every value computed
    with it would be 0, NaN or saturated: a scale of 1e-45 quantized 3e-45 to 127, one of
    1e39 quantized everything to the zero point)."""
    with np.errstate(over="ignore"):
        v32 = abs(_f32(v))
    if not _SCALE_MIN <= v32 <= _SCALE_MAX:
        raise ComputeError(f"{what} is {v:.4g}, outside float32's normal range [{_SCALE_MIN:.4g}, "
                           f"{_SCALE_MAX:.4g}] (the kernels compute in float32 with it and its "
                           f"reciprocal): rescale the tensor's values so that its scale is in "
                           f"that range")


def _zp(v, dtype: str, what: str) -> int:
    lo, hi = QDTYPES[dtype]
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or not lo <= int(v) <= hi:
        raise ComputeError(f"{what} must be an int in [{lo}, {hi}] for {dtype}, got {v!r}")
    return int(v)


def _qdtype(dtype, what: str) -> str:
    if not isinstance(dtype, str) or dtype not in QDTYPES:
        raise ComputeError(f"{what}: the quantized dtype must be one of "
                           f"{', '.join(QDTYPES)}, got {dtype!r}")
    return dtype


def _qtensor(a: Args, arg: str, q, like=None) -> str:
    """The quantized dtype of the tensor ``q`` (the argument ``arg``; ``like``: ``(arg,
    tensor)`` whose dtype it must have)."""
    return a.tensor(arg, q, dtype="quantized", like=like).dtype


def _f32(v: float) -> float:
    """``v`` rounded to float32 (as the C++ kernels hold their parameters)."""
    return float(np.float32(v))


def _round_clamp(t, dtype: str):
    """``t`` (float32) rounded half to even, clamped to ``dtype``'s range, as ``dtype``."""
    lo, hi = QDTYPES[dtype]
    r = _te.round(t)
    if dtype != "int32":  # the 8-bit ranges are exact in float32
        return _te.minimum(_te.maximum(r, Const(float(lo), "float32")),
                           Const(float(hi), "float32")).astype(dtype)
    r = r.astype("float64")  # float64 holds the int32 bounds exactly
    return _te.minimum(_te.maximum(r, Const(float(lo), "float64")),
                       Const(float(hi), "float64")).astype(dtype)


def _add_zero_point(v, zero_point: int, dtype: str, bound: Optional[float] = None):
    """``clamp(rint(v) + zero_point)`` as ``dtype``, ``v`` float32, the zero point added in
    int32 (the rounded value is first clamped to +-2**30 in float32, which keeps saturated
    values saturated; left out when ``bound``, a bound of ``|v|`` known from the inputs'
    dtypes and the scales, is below 2**29).  For ``int32`` the sum and the clamp are in
    float64, which holds every float32 and int32 exactly: a clamp to +-2**30 would leave
    a value in (2**30, 2**31) at 2**30 + zero_point instead of the value or int32's bound
    (session 25: quantized_dense to int32 gave 1073741834 for 2147483647)."""
    lo, hi = QDTYPES[dtype]
    r = _te.round(v)
    if dtype == "int32":
        r = r.astype("float64") + Const(float(zero_point), "float64")
        return _te.minimum(_te.maximum(r, Const(float(lo), "float64")),
                           Const(float(hi), "float64")).astype(dtype)
    if bound is None or not bound < 2.0 ** 29:
        r = _te.minimum(_te.maximum(r, Const(-2.0 ** 30, "float32")),
                        Const(2.0 ** 30, "float32"))
    r = r.astype("int32") + zero_point
    return _te.minimum(_te.maximum(r, lo), hi).astype(dtype)


def _quantize_expr(x, scale: float, zero_point: int, dtype: str):
    inv = _f32(np.float32(1.0) / np.float32(scale))
    if dtype == "int32":
        # qint32: the product and the sum each rounded to float32
        t = x * Const(inv, "float32") + Const(float(zero_point), "float32")
    else:
        # quint8 / qint8 (fbgemm): the multiply-add rounded once
        t = _te.fma(x, Const(inv, "float32"), Const(float(zero_point), "float32"))
    return _round_clamp(t, dtype)


def _dequantize_expr(q, scale: float, zero_point: int):
    d = q.astype("int32") - zero_point if zero_point else q.astype("int32")
    return d.astype("float32") * Const(_f32(scale), "float32")


def quantize(x, scale, zero_point, dtype="uint8", name: str = "quantize"):
    """``x`` (float32) quantized: ``torch.quantize_per_tensor(x, scale, zero_point, dtype)``."""
    Args("quantize", name).tensor("x", x, dtype=("float32",))
    dtype = _qdtype(dtype, f"quantize {name}")
    scale = _scale(scale, f"quantize {name}: scale")
    zero_point = _zp(zero_point, dtype, f"quantize {name}: zero_point")
    return _te.compute(x.shape, lambda *i: _quantize_expr(x[i], scale, zero_point, dtype),
                       name=name, tag="elemwise,quantize")


def dequantize(q, scale, zero_point, name: str = "dequantize"):
    """``q`` as float32: ``Tensor.dequantize()`` of a per-tensor quantized tensor."""
    dtype = _qtensor(Args("dequantize", name), "q", q)
    scale = _scale(scale, f"dequantize {name}: scale")
    zero_point = _zp(zero_point, dtype, f"dequantize {name}: zero_point")
    return _te.compute(q.shape, lambda *i: _dequantize_expr(q[i], scale, zero_point),
                       name=name, tag="elemwise,dequantize")


def requantize(q, in_scale, in_zp, out_scale, out_zp, out_dtype=None,
               name: str = "requantize"):
    """``q`` to another scale and zero point (and dtype: ``out_dtype``, by default q's):
    ``quantize_per_tensor(q.dequantize(), out_scale, out_zp)``."""
    dtype = _qtensor(Args("requantize", name), "q", q)
    out_dtype = _qdtype(dtype if out_dtype is None else out_dtype,
                        f"requantize {name}: out_dtype")
    in_scale = _scale(in_scale, f"requantize {name}: in_scale")
    in_zp = _zp(in_zp, dtype, f"requantize {name}: in_zp")
    out_scale = _scale(out_scale, f"requantize {name}: out_scale")
    out_zp = _zp(out_zp, out_dtype, f"requantize {name}: out_zp")
    return _te.compute(q.shape, lambda *i: _quantize_expr(
        _dequantize_expr(q[i], in_scale, in_zp), out_scale, out_zp, out_dtype),
        name=name, tag="elemwise,requantize")


def quantized_add(a, a_scale, a_zp, b, b_scale, b_zp, out_scale, out_zp,
                  name: str = "quantized_add"):
    """``torch.ops.quantized.add(a, b, out_scale, out_zp)`` of two tensors of one
    quantized dtype and one shape."""
    chk = Args("quantized_add", name)
    dtype = _qtensor(chk, "a", a)
    _qtensor(chk, "b", b, like=("a", a))
    chk.same_shape("b", b, "a", a)
    sa = _scale(a_scale, f"quantized_add {name}: a_scale")
    sb = _scale(b_scale, f"quantized_add {name}: b_scale")
    so = _scale(out_scale, f"quantized_add {name}: out_scale")
    za = _zp(a_zp, dtype, f"quantized_add {name}: a_zp")
    zb = _zp(b_zp, dtype, f"quantized_add {name}: b_zp")
    zo = _zp(out_zp, dtype, f"quantized_add {name}: out_zp")
    inv = _f32(np.float32(1.0) / np.float32(so))

    def deq(q, s, z):
        # q * s + (-z * s), the product and the sum rounded once (a fused multiply-add)
        pre = _f32(np.float32(s) * np.float32(-z))
        return _te.fma(q.astype("float32"), Const(_f32(s), "float32"), Const(pre, "float32"))

    # |q - z| <= the dtype's span, so |c * inv| is bounded (float32 rounding included)
    span = QDTYPES[dtype][1] - QDTYPES[dtype][0]
    bound = 1.01 * span * (float(sa) + float(sb)) * float(inv)

    def f(*i):
        c = deq(a[i], sa, za) + deq(b[i], sb, zb)
        return _add_zero_point(c * Const(inv, "float32"), zo, dtype, bound)  # rint(c*inv)+zp

    return _te.compute(a.shape, f, name=name, tag="elemwise,quantized_add")


def quantized_concatenate(inputs: Sequence[Tuple], axis: int, out_scale, out_zp,
                          name: str = "quantized_concatenate"):
    """``torch.ops.quantized.cat([q, ...], axis, out_scale, out_zp)``: ``inputs`` is a list
    of ``(tensor, scale, zero_point)``; each input is requantized to the output's scale
    and zero point, then they are joined along ``axis``."""
    chk = Args("quantized_concatenate", name)
    items = list(inputs) if isinstance(inputs, (list, tuple)) else []
    if not items or not all(isinstance(t, tuple) and len(t) == 3 for t in items):
        chk.fail("inputs must be a non-empty list of (tensor, scale, zero_point) tuples",
                 ComputeError)
    parts = []
    for k, (q, s, z) in enumerate(items):
        _qtensor(chk, f"inputs[{k}]", q, like=None if k == 0 else ("inputs[0]", items[0][0]))
        parts.append(requantize(q, s, z, out_scale, out_zp, name=f"{name}.requantize{k}"))
    return concatenate(parts, axis, name=name)


def _q(v, zero_point: int):
    """``v - zero_point`` in int32 (the real value over the scale, exactly)."""
    v = v.astype("int32")
    return v - zero_point if zero_point else v


def _qmm_args(chk: Args, x, x_scale, x_zp, w, w_scale, w_zp, bias, out_scale, out_zp,
              out_dtype, x_layout: str, w_layout: str):
    """Check the arguments shared by :func:`quantized_dense` and :func:`quantized_conv2d`
    (``x``/``w`` of the layouts given, channels on axis 1 of both, ``w``'s outputs on
    axis 0); return ``(x_zp, w_zp, requantization parameters)``."""
    what = chk.where
    for t, arg, layout in ((x, "x", x_layout), (w, "w", w_layout)):
        chk.tensor(arg, t, layout.count(",") + 1, layout, "quantized")
    xd, wd = x.dtype, w.dtype
    if xd == "int32" or wd == "int32":
        chk.fail(f"x and w are 8-bit (uint8 activations, int8 weights), got {x.name} {xd} and "
                 f"{w.name} {wd}; requantize them to 8 bits", DTypeError)
    out_dtype = _qdtype(out_dtype, f"{what}: out_dtype")
    scales = [_scale(v, f"{what}: {arg}") for v, arg in ((x_scale, "x_scale"),
                                                         (w_scale, "w_scale"),
                                                         (out_scale, "out_scale"))]
    xz = _zp(x_zp, xd, f"{what}: x_zp")
    wz = _zp(w_zp, wd, f"{what}: w_zp")
    yz = _zp(out_zp, out_dtype, f"{what}: out_zp")
    if bias is not None:
        chk.tensor("bias", bias, 1, "[out] (one value per output, or None)",
                   ("float32", "int32"))
        chk.match("bias", bias, 0, "w", w, 0, "elements", "one bias per output")
    return xz, wz, (scales, yz, out_dtype)


def _requantize_acc(acc, bias, out_axis: int, requant, name: str, correction=None,
                    where: Optional[str] = None):
    """The int32 accumulator ``acc`` of a quantized matmul/conv (plus ``correction(*i)``, an
    int32 expression, when given) plus ``bias`` (indexed by ``acc``'s axis ``out_axis``),
    requantized as fbgemm does (see the module docstring).  ``where``: the operator and
    its name, as its other refusals begin (``Args.where``)."""
    (xs, ws, ys), yz, out_dtype = requant
    where = where or name
    with np.errstate(over="ignore", under="ignore"):
        s = np.float32(xs) * np.float32(ws)
    _float32_scale(float(s), f"{where}: x_scale * w_scale (the accumulator's scale)")
    with np.errstate(over="ignore", under="ignore"):
        _float32_scale(float(s / np.float32(ys)), f"{where}: x_scale * w_scale / out_scale "
                       f"(the requantization multiplier)")
    m = Const(_f32(s / np.float32(ys)), "float32")

    def f(*i):
        a = acc[i]
        if correction is not None:
            a = a + correction(*i)
        if bias is not None and bias.dtype == "int32":
            v = (a + bias[i[out_axis]]).astype("float32")
        elif bias is not None:
            v = a.astype("float32") + bias[i[out_axis]] / Const(float(s), "float32")
        else:
            v = a.astype("float32")
        return _add_zero_point(v * m, yz, out_dtype)

    return _te.compute(acc.shape, f, name=name, tag="elemwise,requantize")


def quantized_dense(x, x_scale, x_zp, w, w_scale, w_zp, bias, out_scale, out_zp,
                    out_dtype="uint8", name: str = "quantized_dense"):
    """``x[B, I]`` (uint8) times ``w[O, I]^T`` (int8), accumulated in int32, plus ``bias[O]``
    (float32, as ``torch.ao.nn.quantized.Linear``; or int32, added to the accumulator; or
    None), requantized to ``out_scale``/``out_zp`` (see the module docstring)."""
    chk = Args("quantized_dense", name)
    xz, wz, requant = _qmm_args(chk, x, x_scale, x_zp, w, w_scale, w_zp, bias, out_scale,
                                out_zp, out_dtype, "[batch, in]", "[out, in]")
    chk.match("w", w, 1, "x", x, 1, "input features", "w is [out, in], as nn.Linear's weight")
    # sum_k (x - xz)(w - wz) = sum_k x w - wz sum_k x - xz sum_k w + K xz wz: the first
    # term is a plain 8-bit GEMM, which the auto-scheduler runs on the target's dot-product
    # intrinsic (VNNI, AVX2); the others are a row sum of each operand (int32 arithmetic
    # wraps, so the identity holds bit for bit)
    k = _te.reduce_axis(x.shape[1], name="k")
    acc = _te.compute((x.shape[0], w.shape[0]), lambda i, j: _te.sum(
        x[i, k].astype("int32") * w[j, k].astype("int32"), axis=k), name=f"{name}.acc",
        tag="quantized_dense")
    terms = []
    if wz:
        kx = _te.reduce_axis(x.shape[1], name="k")
        xsum = _te.compute((x.shape[0],), lambda i: _te.sum(x[i, kx].astype("int32"), axis=kx),
                           name=f"{name}.xsum")
        terms.append(lambda i, j: xsum[i] * Const(-wz, "int32"))
    if xz:
        kw = _te.reduce_axis(w.shape[1], name="k")
        wsum = _te.compute((w.shape[0],), lambda j: _te.sum(w[j, kw].astype("int32"), axis=kw),
                           name=f"{name}.wsum")
        terms.append(lambda i, j: wsum[j] * Const(-xz, "int32"))
    if xz and wz:
        kk = x.shape[1] if x.shape[1].dtype == "int32" else x.shape[1].astype("int32")
        terms.append(lambda i, j: kk * Const(xz * wz, "int32"))

    def correction(i, j):
        total = terms[0](i, j)
        for t in terms[1:]:
            total = total + t(i, j)
        return total

    return _requantize_acc(acc, bias, 1, requant, name, correction if terms else None,
                           where=chk.where)


def quantized_conv2d(x, x_scale, x_zp, w, w_scale, w_zp, bias, out_scale, out_zp, stride=1,
                     padding=0, dilation=1, out_dtype="uint8", name: str = "quantized_conv2d",
                     *, groups=1):
    """2-d convolution of ``x[N, C, H, W]`` (uint8) with ``w[O, C // groups, KH, KW]``
    (int8), accumulated in int32, plus ``bias[O]`` (float32, as
    ``torch.ao.nn.quantized.Conv2d``; or int32, added to the accumulator; or None),
    requantized to ``out_scale``/``out_zp`` exactly as :func:`quantized_dense` ->
    ``[N, O, OH, OW]`` of ``out_dtype``.  ``stride``, ``padding`` (both sides),
    ``dilation``: an int or a pair; a padded pixel is the real value 0 (``x``'s zero
    point).  ``groups``: ``C`` and ``O`` split into that many independent convolutions
    (``groups == C``: depthwise).

    Stages: ``<name>.shift`` (``x - x_zp`` in int32), ``<name>.pad`` (with 0) and
    ``<name>.acc``; for ``groups == 1`` also ``<name>.weight`` (``w - w_zp``), and the
    accumulator is :func:`tecomp.nn.conv2d_nchw`'s own stage (tag ``conv2d_nchw``), so that
    ``tc.auto_schedule`` gives it the tuned conv schedule with the requantization as its
    epilogue; grouped ones get the generic rules."""
    chk = Args("quantized_conv2d", name)
    xz, wz, requant = _qmm_args(chk, x, x_scale, x_zp, w, w_scale, w_zp, bias, out_scale,
                                out_zp, out_dtype, "NCHW [batch, channels, height, width]",
                                "[out, in // groups, kh, kw]")
    (sh, sw), (ph, pw), (dh, dw) = (chk.ints(arg, v, low) for v, arg, low in (
        (stride, "stride", 1), (padding, "padding", 0), (dilation, "dilation", 1)))
    groups = chk.ints("groups", groups, 1, count=1)
    dims = {}
    for t, arg, axes in ((x, "x", "NCHW"), (w, "w", "OIRS")):
        for d, a in enumerate(axes):
            dims[arg + a] = chk.constant(arg, t, d, "extent")
    C, O = dims["xC"], dims["wO"]
    if C % groups or O % groups or dims["wI"] * groups != C:
        chk.fail(f"x ({x.name}) has {C} channels (axis 1) and w ({w.name}) is "
                 f"{tuple(dims[k] for k in ('wO', 'wI', 'wR', 'wS'))} with groups={groups}; w "
                 f"must be [out, {C} // groups, kh, kw] and groups must divide {C} channels "
                 f"and {O} outputs")
    OH, OW = chk.window((dims["xH"], dims["xW"]), (dims["wR"], dims["wS"]), (sh, sw),
                        (ph, pw), (dh, dw), "x")
    # the activations less their zero point, padded with 0 (x padded with x_zp, the real
    # 0, as PyTorch pads), times the weights less theirs, summed in int32
    src = _te.compute(x.shape, lambda *i: _q(x[i], xz), name=f"{name}.shift", tag="elemwise")
    if ph or pw:
        src = _pad(src, (0, 0, ph, pw), value=0, name=f"{name}.pad")
    conf = ((sh, sw), ((ph, ph), (pw, pw)), (dh, dw))
    if groups == 1:
        wq = _te.compute(w.shape, lambda *i: _q(w[i], wz), name=f"{name}.weight",
                         tag="elemwise")
        acc = _conv_compute(True, src, wq, (OH, OW), conf[0], conf[2], f"{name}.acc",
                            {"conv2d": conf})
    else:
        per = O // groups
        c = _te.reduce_axis(dims["wI"], name="c")
        ky = _te.reduce_axis(dims["wR"], name="ky")
        kx = _te.reduce_axis(dims["wS"], name="kx")
        acc = _te.compute((dims["xN"], O, OH, OW), lambda n, o, y, xx: _te.sum(
            src[n, o // per * dims["wI"] + c, y * sh + ky * dh, xx * sw + kx * dw] *
            _q(w[o, c, ky, kx], wz), axis=[c, ky, kx]), name=f"{name}.acc",
            tag="quantized_conv2d_grouped")
    return _requantize_acc(acc, bias, 1, requant, name, where=chk.where)
