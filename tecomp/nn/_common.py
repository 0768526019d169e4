"""Helpers the compute definitions of :mod:`tecomp.nn` share."""
from __future__ import annotations

from typing import Optional

from .. import te as _te
from ..errors import ShapeError
from ..ir import dtype as _dt
from ..ir.expr import Const, Expr, Var
from ..ir.functor import collect, substitute
from ..ir.simplify import simplify
from ..te.reduce import ZERO_WHERE  # noqa: F401 (the convolutions mark their where=)
from ..te.tensor import Tensor
from ._check import Args


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

def _is_one(e) -> bool:
    return isinstance(e, Const) and int(e.value) == 1


def _cint(e, shapes: Optional[dict] = None) -> Optional[int]:
    """The value of a constant extent, or None when symbolic (``shapes``: values of some
    symbolic variables by name, substituted first)."""
    if isinstance(e, Const):
        return int(e.value)
    if shapes and isinstance(e, Expr):
        vm = {v: Const(int(shapes[v.name]), v.dtype)
              for v in collect(e, lambda n: isinstance(n, Var)) if v.name in shapes}
        r = simplify(substitute(e, vm)) if vm else e
        if isinstance(r, Const):
            return int(r.value)
    return None


def _bytes(t: Tensor) -> Optional[int]:
    """The size of ``t`` in bytes, or None when its shape is symbolic."""
    n = _dt.nbytes(t.dtype)     # (a bool takes a byte: bits // 8 would be 0)
    for e in t.shape:
        e = _cint(e)
        if e is None:
            return None
        n *= e
    return n


def _largest_divisor_at_most(n: int, cap: int) -> int:
    for d in range(min(n, cap), 0, -1):
        if n % d == 0:
            return d
    return 1


def padded_taps(win, pads, size):
    """The ``where=`` of a convolution's sum that leaves out the taps in the zero
    padding: ``win[d]`` (the padded input's index of spatial dimension ``d``) inside
    ``[before, before + size[d])`` for each dimension padded (``pads[d] = (before,
    after)``); None where none is."""
    inside = [cond for y, (b, e), n in zip(win, pads, size) if b or e
              for cond in ((y >= b,) if b else ()) + ((y < b + n,) if e else ())]
    return _te.all(*inside) if inside else None
