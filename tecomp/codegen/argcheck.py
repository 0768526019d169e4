"""Argument checks shared by the runtimes: match call arguments to a PrimFunc's params.

:func:`bind_and_check` is the one entry point: it checks the argument count, each
array's dtype (exactly: tecomp never converts silently), byte order, number of
dimensions, shape and (for buffers with explicit strides) strides, the writability of
the buffers the function writes, and scalar parameters; it binds the symbolic
variables of shapes (``n`` in ``A: float32[n]``) to the values the arguments give and
returns them.  Every error is an :class:`~tecomp.errors.ArgumentError` that names the
parameter and says what was expected.

Arrays are numpy arrays or device arrays: anything with ``__cuda_array_interface__``
(CuPy, PyTorch, pycuda's GPUArray, numba) is described through that interface.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, Iterable, Optional, Sequence, Tuple

import numpy as np

from ..errors import ArgumentError
from ..ir import dtype as _dt
from ..ir.expr import (
    EQ, GE, GT, LE, LT, NE, Add, And, Buffer, Cast, Const, Div, Expr, FloorDiv, FloorMod, Let,
    Max, Min, Mul, Not, Or, Select, Sub, TruncDiv, TruncMod, Var,
)
from ..ir.printer import to_str


@dataclass(frozen=True)
class ArrayMeta:
    """What the checks need to know about an array argument."""

    shape: Tuple[int, ...]
    dtype: np.dtype
    strides: Optional[Tuple[int, ...]]  # in bytes; None for C-contiguous device arrays
    writable: bool
    on_device: bool
    pointer: int = 0

    @property
    def c_contiguous(self) -> bool:
        if self.strides is None:
            return True
        expected, acc = [], self.dtype.itemsize
        for d in reversed(self.shape):
            expected.append(acc)
            acc *= d
        return all(d == 1 or s == e for d, s, e in zip(self.shape, self.strides, reversed(expected)))


def array_meta(arg) -> Optional[ArrayMeta]:
    """Describe ``arg`` if it is an array (numpy or device), else return None."""
    if isinstance(arg, np.ndarray):
        return ArrayMeta(tuple(arg.shape), arg.dtype, tuple(arg.strides), bool(arg.flags.writeable),
                         False, arg.ctypes.data)
    cai = getattr(arg, "__cuda_array_interface__", None)
    if isinstance(cai, dict):
        shape = tuple(int(x) for x in cai["shape"])
        dt = np.dtype(cai["typestr"])
        strides = cai.get("strides")
        ptr, readonly = cai["data"]
        return ArrayMeta(shape, dt, None if strides is None else tuple(int(s) for s in strides),
                         not readonly, True, int(ptr or 0))
    gpudata = getattr(arg, "gpudata", None)  # an older pycuda GPUArray
    if gpudata is not None and hasattr(arg, "shape") and hasattr(arg, "dtype"):
        return ArrayMeta(tuple(int(x) for x in arg.shape), np.dtype(arg.dtype),
                         tuple(int(s) for s in arg.strides), True, True, int(gpudata))
    return None


def _param_desc(p) -> str:
    if isinstance(p, Buffer):
        return f"{p.dtype}[{', '.join(to_str(d) for d in p.shape)}]"
    return f"{p.dtype} scalar"


def eval_host_expr(e: Expr, env: Dict[Var, Any]):
    """Evaluate an integer/float/bool expression of host-known variables in ``env``.

    Follows the IR's semantics (floor vs trunc division, integer wrapping on casts).
    Raises ArgumentError when a variable has no value.
    """
    t = type(e)
    if t is Const:
        return e.value
    if t is Var:
        try:
            return env[e]
        except KeyError:
            raise ArgumentError(f"the value of {e.name} is not known from the arguments") from None
    if t is Select:
        return eval_host_expr(e.true_value if eval_host_expr(e.cond, env) else e.false_value, env)
    if t is Not:
        return not eval_host_expr(e.a, env)
    if t is Cast:
        v = eval_host_expr(e.value, env)
        if e.dtype == "bool":
            return v != 0
        if _dt.is_float(e.dtype):
            return float(v)
        v = int(v) if not isinstance(v, float) else int(math.trunc(v))
        return _wrap(v, e.dtype)
    if t is Let:
        env2 = dict(env)
        env2[e.var] = eval_host_expr(e.value, env)
        return eval_host_expr(e.body, env2)
    a = eval_host_expr(e.a, env)
    b = eval_host_expr(e.b, env)
    if t is Add:
        r = a + b
    elif t is Sub:
        r = a - b
    elif t is Mul:
        r = a * b
    elif t is Div:
        return a / b
    elif t is FloorDiv:
        r = a // b
    elif t is FloorMod:
        r = a % b
    elif t is TruncDiv:
        q = abs(a) // abs(b)
        r = q if (a < 0) == (b < 0) else -q
    elif t is TruncMod:
        q = abs(a) // abs(b)
        r = a - (q if (a < 0) == (b < 0) else -q) * b
    elif t is Min:
        r = min(a, b)
    elif t is Max:
        r = max(a, b)
    elif t is EQ:
        return a == b
    elif t is NE:
        return a != b
    elif t is LT:
        return a < b
    elif t is LE:
        return a <= b
    elif t is GT:
        return a > b
    elif t is GE:
        return a >= b
    elif t is And:
        return bool(a) and bool(b)
    elif t is Or:
        return bool(a) or bool(b)
    else:
        raise ArgumentError(f"cannot evaluate `{to_str(e)}` on the host")
    if _dt.is_int(e.dtype):
        return _wrap(int(r), e.dtype)
    return r


def _wrap(v: int, dtype: str) -> int:
    b = _dt.bits(dtype)
    v &= (1 << b) - 1
    if not _dt.is_uint(dtype) and v >= (1 << (b - 1)):
        v -= 1 << b
    return v


def _int_range(dtype: str):
    b = _dt.bits(dtype)
    if _dt.is_uint(dtype):
        return 0, (1 << b) - 1
    return -(1 << (b - 1)), (1 << (b - 1)) - 1


def bind_and_check(params: Sequence, args: Sequence, *, func_name: str = "the function",
                   written: Iterable[Buffer] = (), device: Optional[bool] = None) -> Dict[Var, Any]:
    """Check ``args`` against ``params`` and return the values of the symbolic variables.

    ``params`` are Buffers and scalar Vars (a PrimFunc's params).  ``written`` are the
    Buffers the function stores to: their arrays must be writable.  ``device``: None
    accepts numpy and device arrays; False only numpy arrays; True only device arrays.
    The result maps every scalar parameter and every Var that appears in a parameter's
    shape or strides to its value.
    """
    params = tuple(params)
    names = ", ".join(p.name for p in params)
    if len(args) != len(params):
        raise ArgumentError(f"{func_name} takes {len(params)} argument"
                            f"{'s' if len(params) != 1 else ''} ({names}), got {len(args)}")
    written = set(written)
    env: Dict[Var, Any] = {}
    origin: Dict[Var, str] = {}   # where each variable got its value (for messages)
    deferred = []                 # (expr, actual, description) checked once all is bound
    metas = []

    def label(i, p):
        return f"argument {i} ({p.name})"

    # scalars first: they are the most explicit source of a variable's value
    for i, (p, a) in enumerate(zip(params, args)):
        if isinstance(p, Var):
            env[p] = _check_scalar(label(i, p), p, a)
            origin[p] = f"{label(i, p)}"
    for i, (p, a) in enumerate(zip(params, args)):
        if not isinstance(p, Buffer):
            continue
        lab = label(i, p)
        meta = array_meta(a)
        want_dt = _dt.numpy_dtype(p.dtype)
        if meta is None or (device is True and not meta.on_device) or (
                device is False and meta.on_device):
            kind = {None: "an array", False: "a numpy.ndarray", True: "a device array"}[device]
            raise ArgumentError(f"{lab} must be {kind} of {_param_desc(p)}, got "
                                f"{type(a).__name__}" + (f" {a!r}" if np.isscalar(a) else ""))
        metas.append((i, p, meta))
        if meta.dtype.kind in "biuf" and not meta.dtype.isnative:
            raise ArgumentError(f"{lab} has the non-native byte order {meta.dtype.str}; convert it "
                                f"with .astype({p.dtype!r})")
        if meta.dtype != want_dt:
            raise ArgumentError(f"{lab} has dtype {meta.dtype.name}, expected {p.dtype}; tecomp does "
                                f"not convert arguments: pass {p.name}.astype({p.dtype!r})")
        if len(meta.shape) != len(p.shape):
            raise ArgumentError(f"{lab} has {len(meta.shape)} dimension"
                                f"{'s' if len(meta.shape) != 1 else ''} (shape {meta.shape}), "
                                f"expected {len(p.shape)}: {_param_desc(p)}")
        if p in written and not meta.writable:
            raise ArgumentError(f"{lab} is read-only, but {func_name} writes it; pass a writable "
                                f"array (e.g. a copy)")
        for k, (dim, actual) in enumerate(zip(p.shape, meta.shape)):
            _bind(dim, actual, f"{lab}, dimension {k}", env, origin, deferred)
        if p.strides is not None:
            item = meta.dtype.itemsize
            actual_strides = meta.strides
            if actual_strides is None:  # C-contiguous device array
                acc, out = 1, []
                for d in reversed(meta.shape):
                    out.append(acc * item)
                    acc *= d
                actual_strides = tuple(reversed(out))
            for k, (st, actual) in enumerate(zip(p.strides, actual_strides)):
                if actual % item:
                    raise ArgumentError(f"{lab} has stride {actual} bytes in dimension {k}, not a "
                                        f"multiple of its {item}-byte elements")
                _bind(st, actual // item, f"{lab}, stride {k} (in elements)", env, origin, deferred)
    for expr, actual, where in deferred:
        try:
            want = eval_host_expr(expr, env)
        except ArgumentError:
            raise ArgumentError(f"{where}: cannot check it against `{to_str(expr)}`, whose "
                                f"variables no argument gives") from None
        if want != actual:
            vals = ", ".join(f"{v.name} = {env[v]}" for v in _vars(expr) if v in env)
            raise ArgumentError(f"{where} is {actual}, expected {to_str(expr)}"
                                + (f" = {want} (with {vals})" if vals else ""))
    return env


def _vars(e) -> list:
    from ..ir.functor import free_vars

    return free_vars(e)


def _bind(expr: Expr, actual: int, where: str, env, origin, deferred) -> None:
    if isinstance(expr, Const):
        if int(expr.value) != actual:
            raise ArgumentError(f"{where} is {actual}, expected {expr.value}")
    elif isinstance(expr, Var):
        if expr in env:
            if env[expr] != actual:
                raise ArgumentError(f"{where} is {actual}, but {expr.name} = {env[expr]} from "
                                    f"{origin[expr]}")
        else:
            env[expr] = actual
            origin[expr] = where
    else:
        deferred.append((expr, actual, where))


def _check_scalar(lab: str, p: Var, a) -> Any:
    dt = p.dtype
    if isinstance(a, np.ndarray) and a.ndim == 0:
        a = a[()]
    if dt == "bool":
        if isinstance(a, (bool, np.bool_)):
            return bool(a)
        raise ArgumentError(f"{lab} must be a bool, got {type(a).__name__} {a!r}")
    if _dt.is_int(dt):
        if isinstance(a, (bool, np.bool_)) or not isinstance(a, (int, np.integer)):
            raise ArgumentError(f"{lab} must be an integer ({dt}), got {type(a).__name__} {a!r}")
        lo, hi = _int_range(dt)
        v = int(a)
        if not lo <= v <= hi:
            raise ArgumentError(f"{lab} = {v} does not fit in {dt} [{lo}, {hi}]")
        return v
    if _dt.is_float(dt):
        if isinstance(a, (bool, np.bool_)) or not isinstance(a, (int, float, np.integer, np.floating)):
            raise ArgumentError(f"{lab} must be a number ({dt}), got {type(a).__name__} {a!r}")
        return float(a)
    raise ArgumentError(f"{lab} has the unsupported dtype {dt}")


def check_no_alias(params: Sequence, args: Sequence, written: Iterable[Buffer], *,
                   func_name: str = "the function") -> None:
    """Reject a written buffer whose array overlaps another argument's memory.

    Generated kernels declare their buffers ``__restrict__`` (no aliasing): passing the
    same memory as input and output is undefined.  A cheap test of the address ranges
    (numpy's ``may_share_memory`` for numpy arrays), so interleaved views count as
    overlapping.
    """
    written = set(written)
    arrays = [(i, p, a) for i, (p, a) in enumerate(zip(params, args))
              if isinstance(p, Buffer) and array_meta(a) is not None and _nbytes(a)]
    for x in range(len(arrays)):
        i, p, a = arrays[x]
        for y in range(x + 1, len(arrays)):
            j, q, b = arrays[y]
            if (p in written or q in written) and _may_overlap(a, b):
                raise ArgumentError(
                    f"argument {i} ({p.name}) and argument {j} ({q.name}) share memory, and "
                    f"{func_name} writes {p.name if p in written else q.name}; its buffers must "
                    f"not overlap: pass a copy")


def _nbytes(a) -> int:
    return _nbytes_meta(array_meta(a))


def _span(meta: ArrayMeta):
    """[lo, hi) of the bytes an array's elements occupy."""
    strides = meta.strides
    if strides is None:
        return meta.pointer, meta.pointer + _nbytes_meta(meta)
    lo = hi = meta.pointer
    for d, st in zip(meta.shape, strides):
        if st < 0:
            lo += (d - 1) * st
        else:
            hi += (d - 1) * st
    return lo, hi + meta.dtype.itemsize


def _nbytes_meta(meta: ArrayMeta) -> int:
    n = meta.dtype.itemsize
    for d in meta.shape:
        n *= d
    return n


def _may_overlap(a, b) -> bool:
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return np.may_share_memory(a, b)
    ma, mb = array_meta(a), array_meta(b)
    if ma.on_device != mb.on_device:
        return False
    (alo, ahi), (blo, bhi) = _span(ma), _span(mb)
    return alo < bhi and blo < ahi
