"""Per-tensor affine int8 quantization, as PyTorch defines it (compute definitions).

``real = scale * (q - zero_point)``; ``scale`` and ``zero_point`` are Python numbers (the
DAG's constants, as in TVM's QNN).  Each function reproduces the rounding of the PyTorch
kernel it stands for, bit for bit on this machine's float32 (tests/test_quant.py checks
millions of random values, every boundary included):

* :func:`quantize` -- ``torch.quantize_per_tensor``: ``clamp(rint(x * inv + zp))`` with
  ``inv = 1.0f / scale``, rounded half to even; for ``uint8``/``int8`` the multiply-add is
  rounded once (fbgemm's: ``tc.fma``), for ``int32`` the product and the sum are each
  rounded to float32 (as PyTorch does);
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
  QNN convention) is added to ``acc`` instead.

Quantized dtypes: ``uint8`` (PyTorch's ``quint8``), ``int8`` (``qint8``), ``int32``
(``qint32``).
"""
from __future__ import annotations

import math
import numbers
from typing import Sequence, Tuple

import numpy as np

from .. import te as _te
from ..errors import ComputeError
from ..ir.expr import Const
from .ops import concatenate

__all__ = ["quantize", "dequantize", "requantize", "quantized_add", "quantized_concatenate",
           "quantized_dense", "QDTYPES"]

#: the quantized dtypes and their ranges
QDTYPES = {"uint8": (0, 255), "int8": (-128, 127), "int32": (-2 ** 31, 2 ** 31 - 1)}


def _scale(v, what: str) -> float:
    if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v) or v <= 0:
        raise ComputeError(f"{what} must be a finite number > 0, got {v!r}")
    return float(v)


def _zp(v, dtype: str, what: str) -> int:
    lo, hi = QDTYPES[dtype]
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or not lo <= int(v) <= hi:
        raise ComputeError(f"{what} must be an int in [{lo}, {hi}] for {dtype}, got {v!r}")
    return int(v)


def _qdtype(dtype, what: str) -> str:
    if dtype not in QDTYPES:
        raise ComputeError(f"{what}: the quantized dtype must be one of "
                           f"{', '.join(QDTYPES)}, got {dtype!r}")
    return dtype


def _qtensor(q, what: str) -> str:
    if q.dtype not in QDTYPES:
        raise ComputeError(f"{what}: {q.name} is {q.dtype}, not a quantized dtype "
                           f"({', '.join(QDTYPES)})")
    return q.dtype


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


def _add_zero_point(v, zero_point: int, dtype: str):
    """``clamp(rint(v) + zero_point)`` as ``dtype``, ``v`` float32, the zero point added in
    int32 (the rounded value is first clamped to +-2**30 in float32, which keeps saturated
    values saturated)."""
    lo, hi = QDTYPES[dtype]
    r = _te.round(v)
    r = _te.minimum(_te.maximum(r, Const(-2.0 ** 30, "float32")), Const(2.0 ** 30, "float32"))
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
    dtype = _qdtype(dtype, f"quantize {name}")
    scale = _scale(scale, f"quantize {name}: scale")
    zero_point = _zp(zero_point, dtype, f"quantize {name}: zero_point")
    if x.dtype != "float32":
        raise ComputeError(f"quantize {name}: {x.name} is {x.dtype}; quantize float32 values "
                           f"(x.astype('float32') in the compute)")
    return _te.compute(x.shape, lambda *i: _quantize_expr(x[i], scale, zero_point, dtype),
                       name=name, tag="elemwise,quantize")


def dequantize(q, scale, zero_point, name: str = "dequantize"):
    """``q`` as float32: ``Tensor.dequantize()`` of a per-tensor quantized tensor."""
    dtype = _qtensor(q, f"dequantize {name}")
    scale = _scale(scale, f"dequantize {name}: scale")
    zero_point = _zp(zero_point, dtype, f"dequantize {name}: zero_point")
    return _te.compute(q.shape, lambda *i: _dequantize_expr(q[i], scale, zero_point),
                       name=name, tag="elemwise,dequantize")


def requantize(q, in_scale, in_zp, out_scale, out_zp, out_dtype=None,
               name: str = "requantize"):
    """``q`` to another scale and zero point (and dtype: ``out_dtype``, by default q's):
    ``quantize_per_tensor(q.dequantize(), out_scale, out_zp)``."""
    dtype = _qtensor(q, f"requantize {name}")
    out_dtype = _qdtype(out_dtype or dtype, f"requantize {name}")
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
    dtype = _qtensor(a, f"quantized_add {name}")
    if b.dtype != dtype:
        raise ComputeError(f"quantized_add {name}: {a.name} is {dtype} but {b.name} is "
                           f"{b.dtype}; both inputs have the output's quantized dtype")
    if len(a.shape) != len(b.shape) or any(
            isinstance(x, Const) and isinstance(y, Const) and int(x.value) != int(y.value)
            for x, y in zip(a.shape, b.shape)):
        raise ComputeError(f"quantized_add {name}: {a.name} and {b.name} have different shapes "
                           f"{tuple(a.shape)} and {tuple(b.shape)}")
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

    def f(*i):
        c = deq(a[i], sa, za) + deq(b[i], sb, zb)
        return _add_zero_point(c * Const(inv, "float32"), zo, dtype)  # rint(c * inv) + zp

    return _te.compute(a.shape, f, name=name, tag="elemwise,quantized_add")


def quantized_concatenate(inputs: Sequence[Tuple], axis: int, out_scale, out_zp,
                          name: str = "quantized_concatenate"):
    """``torch.ops.quantized.cat([q, ...], axis, out_scale, out_zp)``: ``inputs`` is a list
    of ``(tensor, scale, zero_point)``; each input is requantized to the output's scale
    and zero point, then they are joined along ``axis``."""
    items = list(inputs)
    if not items or not all(isinstance(t, tuple) and len(t) == 3 for t in items):
        raise ComputeError(f"quantized_concatenate {name}: inputs must be a non-empty list of "
                           f"(tensor, scale, zero_point) tuples")
    dtype = _qtensor(items[0][0], f"quantized_concatenate {name}")
    parts = []
    for k, (q, s, z) in enumerate(items):
        if q.dtype != dtype:
            raise ComputeError(f"quantized_concatenate {name}: {q.name} is {q.dtype}, "
                               f"{items[0][0].name} is {dtype}; they must agree")
        parts.append(requantize(q, s, z, out_scale, out_zp, name=f"{name}.requantize{k}"))
    return concatenate(parts, axis, name=name)


def quantized_dense(x, x_scale, x_zp, w, w_scale, w_zp, bias, out_scale, out_zp,
                    out_dtype="uint8", name: str = "quantized_dense"):
    """``x[B, I]`` (uint8) times ``w[O, I]^T`` (int8), accumulated in int32, plus ``bias[O]``
    (float32, as ``torch.ao.nn.quantized.Linear``; or int32, added to the accumulator; or
    None), requantized to ``out_scale``/``out_zp`` (see the module docstring)."""
    what = f"quantized_dense {name}"
    if x.ndim != 2 or w.ndim != 2:
        raise ComputeError(f"{what}: x and w must be 2-d ([batch, in] and [out, in]), got "
                           f"{x.ndim}-d and {w.ndim}-d")
    xd, wd = _qtensor(x, what), _qtensor(w, what)
    if xd == "int32" or wd == "int32":
        raise ComputeError(f"{what}: x and w are 8-bit (uint8 activations, int8 weights), got "
                           f"{xd} and {wd}")
    out_dtype = _qdtype(out_dtype, what)
    xs = _scale(x_scale, f"{what}: x_scale")
    ws = _scale(w_scale, f"{what}: w_scale")
    ys = _scale(out_scale, f"{what}: out_scale")
    xz = _zp(x_zp, xd, f"{what}: x_zp")
    wz = _zp(w_zp, wd, f"{what}: w_zp")
    yz = _zp(out_zp, out_dtype, f"{what}: out_zp")
    if bias is not None and (bias.ndim != 1 or bias.dtype not in ("float32", "int32")):
        raise ComputeError(f"{what}: bias must be a 1-d float32 or int32 tensor, got "
                           f"{bias.ndim}-d {bias.dtype}")
    k = _te.reduce_axis(x.shape[1], name="k")

    def q(v, z):
        v = v.astype("int32")
        return v - z if z else v

    acc = _te.compute((x.shape[0], w.shape[0]), lambda i, j: _te.sum(
        q(x[i, k], xz) * q(w[j, k], wz), axis=k), name=f"{name}.acc", tag="quantized_dense")
    s = np.float32(xs) * np.float32(ws)
    m = Const(_f32(s / np.float32(ys)), "float32")

    def f(i, j):
        a = acc[i, j]
        if bias is not None and bias.dtype == "int32":
            v = (a + bias[j]).astype("float32")
        elif bias is not None:
            v = a.astype("float32") + bias[j] / Const(float(s), "float32")
        else:
            v = a.astype("float32")
        return _add_zero_point(v * m, yz, out_dtype)

    return _te.compute(acc.shape, f, name=name, tag="elemwise,requantize")
