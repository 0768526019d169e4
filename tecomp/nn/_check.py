"""The argument checks of every :mod:`tecomp.nn` operator, made before it builds a stage.

Each operator makes one :class:`Args` for its call and checks each argument with it; a
bad argument raises a :class:`~tecomp.errors.ShapeError` (a rank, an extent, a stride,
an axis...) or a :class:`~tecomp.errors.DTypeError` (a dtype) whose message begins with
the operator and its stage name (``conv2d_nchw conv2d_nchw: ...``), names the argument
and its tensor (``weight (W)``) and says what was expected.  Extents are compared where
both are known (constants, or the same symbolic extent); a symbolic extent is taken on
trust, as the compute definitions read it.
"""
from __future__ import annotations

import math
import numbers
from typing import Optional, Sequence, Tuple

from ..errors import DTypeError, ExprError, ShapeError
from ..ir import dtype as _dt
from ..ir.expr import Const
from ..te.tensor import Tensor

#: the float dtypes, as the messages list them
FLOATS = "float16, bfloat16, float32 or float64"

#: what a ``dtype=`` kind of :meth:`Args.tensor` accepts, and how a message says it
_KINDS = {
    "float": (_dt.is_float, f"a float tensor ({FLOATS})"),
    "number": (lambda d: _dt.is_float(d) or _dt.is_int(d), "a float or integer tensor"),
    "index": (lambda d: d in ("int32", "int64"), "an int32 or int64 tensor"),
    "quantized": (lambda d: d in ("uint8", "int8", "int32"),
                  "a quantized tensor (uint8, int8 or int32); quantize it first "
                  "(quant.quantize)"),
}


def shape_text(shape) -> str:
    """A shape as the user wrote it: ``(4, 72)``, ``(n, 8)``, ``(5,)``."""
    dims = [str(e) for e in shape]
    return f"({', '.join(dims)}{',' if len(dims) == 1 else ''})"


def same_extent(a, b) -> Optional[bool]:
    """True / False when two extents are known equal / different, None when unknown."""
    if isinstance(a, int):
        a = Const(a, "int32")
    if isinstance(b, int):
        b = Const(b, "int32")
    if isinstance(a, Const) and isinstance(b, Const):
        return int(a.value) == int(b.value)
    return True if a is b else None


#: the largest stride, dilation, kernel extent or count :meth:`Args.ints` takes: each is an
#: int32 constant of the index arithmetic (2**31 would not be one)
INT32_MAX = 2**31 - 1


def _rounded(dtype: str, f: float) -> float:
    """``f`` rounded to the float ``dtype`` (inf where it overflows)."""
    if dtype == "float64":
        return f
    if _dt.is_storage_float(dtype):
        return _dt.round_storage(dtype, f)
    import numpy as np

    with np.errstate(over="ignore"):
        return float(np.float32(f))


def real(v) -> Optional[float]:
    """``v`` as a float where it is a real number (not a bool), else None; an int past
    float64's range is +-inf (``float(10**400)`` raises OverflowError)."""
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        return None
    try:
        return float(v)
    except OverflowError:
        return math.inf if v > 0 else -math.inf


def _short(v) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


class Args:
    """The checks of one call of the operator ``op`` whose stage is called ``name``."""

    def __init__(self, op: str, name: str):
        if not isinstance(name, str):
            raise ExprError(f"{op} {_short(name)}: name must be a string (the output "
                            f"stage's name), got {_short(name)}")
        self.where = f"{op} {name}"

    def fail(self, msg: str, cls=ShapeError):
        raise cls(f"{self.where}: {msg}")

    def tensor(self, arg: str, t, ndim=None, layout: str = "", dtype="float", like=None):
        """``t`` when it is a tensor with ``ndim`` dimensions (an int, or ``(low, high)``
        with ``high`` None for no bound), ``layout`` describing them in the message, and a
        dtype of the kind ``dtype`` ("float", "number": float or integer, "index": int32
        or int64, "quantized", a tuple of dtypes, or None: any); ``like``: ``(arg,
        tensor)`` whose dtype ``t`` must have."""
        if not isinstance(t, Tensor):
            self.fail(f"{arg} must be a tensor (tc.placeholder or a compute), got {_short(t)}")
        desc = f"{arg} ({t.name})"
        if ndim is not None:
            low, high = (ndim, ndim) if isinstance(ndim, int) else ndim
            if t.ndim < low or (high is not None and t.ndim > high):
                want = (f"{low}-d" if low == high else f"at least {low}-d" if high is None
                        else f"{low}-d to {high}-d")
                self.fail(f"{desc} must be {want}{' ' + layout if layout else ''}, got "
                          f"{t.ndim}-d {shape_text(t.shape)}; reshape it (tecomp.nn.reshape)")
        if isinstance(dtype, tuple):
            if t.dtype not in dtype:
                self.fail(f"{desc} has dtype {t.dtype}; give {' or '.join(dtype)}", DTypeError)
        elif dtype is not None:
            ok, what = _KINDS[dtype]
            if not ok(t.dtype):
                self.fail(f"{desc} has dtype {t.dtype}; give {what}", DTypeError)
        if like is not None and t.dtype != like[1].dtype:
            self.fail(f"{desc} is {t.dtype} but {like[0]} ({like[1].name}) is "
                      f"{like[1].dtype}; give them one dtype (astype one of them)", DTypeError)
        return t

    def match(self, arg: str, t, axis: int, other: str, u, other_axis: int, what: str,
              hint: str = "") -> None:
        """``t.shape[axis]`` (``what``, e.g. "input channels") must equal
        ``u.shape[other_axis]`` where both are known."""
        a, b = t.shape[axis], u.shape[other_axis]
        if same_extent(a, b) is False:
            self.fail(f"{arg} ({t.name}) has {a} {what} (axis {axis}) but {other} ({u.name}) "
                      f"has {b} (axis {other_axis}); they must be equal"
                      + (f" ({hint})" if hint else ""))

    def same_shape(self, arg: str, t, other: str, u) -> None:
        """``t`` has ``u``'s shape (where the extents are known)."""
        if t.ndim != u.ndim or any(same_extent(a, b) is False for a, b in zip(t.shape, u.shape)):
            self.fail(f"{arg} ({t.name}) has shape {shape_text(t.shape)} but {other} "
                      f"({u.name}) has {shape_text(u.shape)}; they must have one shape")

    def constant(self, arg: str, t, axis: int, what: str) -> int:
        """The constant extent ``t.shape[axis]`` (``what``, e.g. "height")."""
        e = t.shape[axis]
        if not isinstance(e, Const):
            self.fail(f"{arg} ({t.name}): the {what} (axis {axis}) must be a constant extent, "
                      f"got {e}")
        return int(e.value)

    def ints(self, arg: str, v, low: int, count: int = 2, high: Optional[int] = INT32_MAX):
        """``v`` as a pair of ints ``>= low`` (rows, columns; one int stands for both), as
        ``count`` of them (one per spatial dimension) when ``count`` is more than 2, or as
        one int when ``count`` is 1; each at most ``high`` (None: any)."""
        many = count > 1 and isinstance(v, (tuple, list))
        vals = list(v) if many else [v]
        if (many and len(vals) != count) or not all(
                isinstance(x, numbers.Integral) and not isinstance(x, bool) and x >= low
                for x in vals):
            pair = ("" if count == 1 else " or a pair of them (rows, columns)" if count == 2
                    else f" or {count} of them (one per spatial dimension)")
            self.fail(f"{arg} must be an int >= {low}{pair}, got {_short(v)}")
        if high is not None and max(vals) > high:
            self.fail(f"{arg} must be at most {high} (an int32 of the index arithmetic), "
                      f"got {_short(v)}")
        vals = [int(x) for x in vals]
        if count == 1:
            return vals[0]
        return tuple(vals) if many else tuple(vals * count)

    def flag(self, arg: str, v) -> bool:
        """``v`` as a bool: True or False itself (``1``, ``"yes"`` or None is refused)."""
        if not isinstance(v, bool):
            self.fail(f"{arg} must be True or False, got {_short(v)}")
        return v

    def number(self, arg: str, v, low: Optional[float] = None) -> float:
        """``v`` as a finite float (``>= low`` when given)."""
        f = real(v)
        if f is None or not math.isfinite(f) or (low is not None and f < low):
            bound = "" if low is None else f" >= {low}"
            self.fail(f"{arg} must be a finite number{bound}, got {_short(v)}")
        return f

    def axis(self, arg: str, v, ndim: int, of: str) -> int:
        """``v`` as an axis of an ``ndim``-d tensor (``of`` names it), negative counting
        from the end."""
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            self.fail(f"{arg} must be an int (an axis of {of}), got {_short(v)}")
        if ndim == 0:
            self.fail(f"{arg} {_short(v)}: {of} is 0-d and has no axis; reshape it to (1,) "
                      "(tecomp.nn.reshape)")
        if not -ndim <= v < ndim:
            self.fail(f"{arg} {_short(v)} is out of range for {of} ({ndim}-d); give an int in "
                      f"[{-ndim}, {ndim - 1}]")
        return int(v) % ndim

    def scalar(self, arg: str, v, t, what: str = "x"):
        """``v`` as a number the dtype of ``t`` (the tensor ``what``) holds: for a float
        dtype any number but NaN that does not overflow it (+-inf itself is one), as a
        float; for an integer dtype an integral number in its range, as an int (300 would
        wrap to 44 in int8)."""
        desc = f"{what} ({t.name}, {t.dtype})"
        kind = "a number" if _dt.is_float(t.dtype) else "an integer"
        f = real(v)
        if f is None or math.isnan(f):
            self.fail(f"{arg} must be {kind} that {desc} can hold, got {_short(v)}",
                      DTypeError)
        if _dt.is_float(t.dtype):
            # (an int past float64 is a finite number that overflows it: 10**400)
            if (math.isfinite(f) or isinstance(v, numbers.Integral)) and \
                    not math.isfinite(_rounded(t.dtype, f)):
                self.fail(f"{arg} {_short(v)} overflows {desc} (it would be inf); give a "
                          f"finite number in its range, or inf itself", DTypeError)
            return f
        lo, hi = _dt.int_limits(t.dtype)
        if not (isinstance(v, numbers.Integral) or (math.isfinite(f) and f == int(f))) or \
                not lo <= int(v) <= hi:
            self.fail(f"{arg} must be an integer that {desc} can hold (in [{lo}, {hi}]), "
                      f"got {_short(v)}", DTypeError)
        return int(v)

    def out_dtype(self, v, operands: Sequence) -> Optional[str]:
        """``out_dtype=`` of a GEMM or convolution: None, or a float dtype (an int or
        float one for integer ``operands``, tensors)."""
        if v is None:
            return None
        try:
            d = _dt.canon(v)
        except DTypeError as exc:
            self.fail(f"out_dtype: {exc}", DTypeError)
        floats = any(_dt.is_float(t.dtype) for t in operands)
        if _dt.is_bool(d) or (floats and not _dt.is_float(d)):
            self.fail(f"out_dtype {d} cannot hold the sum of products of "
                      f"{' and '.join(sorted({t.dtype for t in operands}))} values; give "
                      + (f"a float dtype ({FLOATS})" if floats else "a float or integer dtype"),
                      DTypeError)
        return d

    def operands(self, pairs: Sequence[Tuple[str, object]], out_dtype) -> None:
        """The operands of a GEMM or convolution (``(arg, tensor)`` pairs, already checked
        as tensors) share a dtype, unless ``out_dtype`` casts them all."""
        (a0, t0), rest = pairs[0], pairs[1:]
        for a, t in rest:
            if t.dtype != t0.dtype and out_dtype is None:
                self.fail(f"{a} ({t.name}) is {t.dtype} but {a0} ({t0.name}) is {t0.dtype}; "
                          "give them one dtype (astype one of them), or out_dtype= to cast "
                          "both", DTypeError)

    def padding(self, v, size, kernel, stride, dilation, arg: str = "padding"):
        """``padding=`` of a convolution or pooling over ``len(size)`` spatial dimensions,
        as one ``(before, after)`` pair per dimension.

        ``v`` is one of: an int (every side); one int per dimension (both sides of it);
        one ``(before, after)`` pair per dimension; ``2 * n`` ints, the ``n`` befores then
        the ``n`` afters (TOPI's ``(top, left, bottom, right)`` in 2-d); ``"VALID"`` (no
        padding); ``"SAME"`` (TensorFlow's: ``ceil(size / stride)`` outputs, the padding
        split evenly with the odd row or column after)."""
        n = len(size)
        if isinstance(v, str):
            mode = v.upper()
            if mode == "VALID":
                return tuple((0, 0) for _ in range(n))
            if mode == "SAME":
                out = []
                for x, k, s_, d in zip(size, kernel, stride, dilation):
                    total = max((-(-x // s_) - 1) * s_ + (k - 1) * d + 1 - x, 0)
                    out.append((total // 2, total - total // 2))
                return tuple(out)
            self.fail(f"{arg} {_short(v)} is not a padding mode; give \"SAME\" or \"VALID\", "
                      "or ints")

        def nonneg(x):
            return isinstance(x, numbers.Integral) and not isinstance(x, bool) and x >= 0

        if nonneg(v):
            return tuple((int(v), int(v)) for _ in range(n))
        if isinstance(v, (tuple, list)):
            vals = list(v)
            if len(vals) == n and all(nonneg(x) for x in vals):
                return tuple((int(x), int(x)) for x in vals)
            if len(vals) == n and all(isinstance(x, (tuple, list)) and len(x) == 2
                                      and all(nonneg(y) for y in x) for x in vals):
                return tuple((int(x[0]), int(x[1])) for x in vals)
            if len(vals) == 2 * n and all(nonneg(x) for x in vals):
                return tuple((int(vals[i]), int(vals[n + i])) for i in range(n))
        self.fail(f"{arg} must be an int >= 0, {n} of them (one per spatial dimension), "
                  f"{n} (before, after) pairs, {2 * n} ints (the befores, then the afters), "
                  f"\"SAME\" or \"VALID\"; got {_short(v)}")

    def window(self, size, kernel, stride, padding, dilation, of: str) -> Tuple[int, ...]:
        """The output extents of a convolution or pooling over an input of ``size`` with
        ``kernel``, ``stride``, ``padding`` (per dimension an int for both sides or a
        ``(before, after)`` pair) and ``dilation``; a ShapeError when the kernel does not
        fit the padded input (``of``: the argument the input is)."""
        pads = [p if isinstance(p, tuple) else (p, p) for p in padding]
        out = tuple((n + b + a - d * (k - 1) - 1) // s + 1
                    for n, k, s, (b, a), d in zip(size, kernel, stride, pads, dilation))
        if min(out) <= 0:
            x = "x".join
            span = tuple(d * (k - 1) + 1 for k, d in zip(kernel, dilation))
            padded = x(str(b) if b == a else f"{b}+{a}" for b, a in pads)
            self.fail(f"the kernel does not fit: the {x(map(str, kernel))} kernel (dilation "
                      f"{x(map(str, dilation))}, spanning {x(map(str, span))}) is larger "
                      f"than the {x(map(str, size))} {of} padded by {padded} "
                      f"(the output would be {x(map(str, out))}); pad more or use a smaller "
                      "kernel")
        return out
