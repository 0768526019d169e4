"""Tensors and operations: the user's compute DAG.

A ``Tensor`` is the output of an ``Operation``: a ``PlaceholderOp`` (an input given at
call time) or a ``ComputeOp`` (one value per output point, from an index lambda).
Tensors and operations have identity semantics.
"""
from __future__ import annotations

from typing import Tuple

from ..errors import ComputeError, ExprError, ShapeError
from ..ir import dtype as _dt
from ..ir.expr import (
    Const, Expr, IterVar, ProducerLoad, Range, Reduce, Var, as_expr, as_index,
)
from ..ir.functor import Visitor


class Operation:
    """Base of operations.  ``output(0)`` is the tensor it produces."""

    name: str

    def output(self, i: int = 0) -> "Tensor":
        if i != 0:
            raise ExprError(f"operation {self.name} has one output; asked for output {i}")
        return self._out

    @property
    def input_tensors(self) -> list:
        return []

    def __repr__(self):
        return f"{type(self).__name__}({self.name})"


class PlaceholderOp(Operation):
    def __init__(self, name: str, shape: Tuple[Expr, ...], dtype: str):
        self.name = name
        self.shape = shape
        self.dtype = dtype
        self._out = Tensor(self)


class ComputeOp(Operation):
    """``name[axis] = body``; ``body`` may be a ``Reduce`` at its top level only."""

    def __init__(self, name, axis, body, tag="", attrs=None):
        self.name = name
        self.axis = tuple(axis)
        self.body = body
        self.reduce_axis = tuple(body.axis) if isinstance(body, Reduce) else ()
        self.tag = tag
        self.attrs = dict(attrs or {})
        self.shape = tuple(iv.dom.extent for iv in self.axis)
        self.dtype = body.dtype
        self._out = Tensor(self)

    @property
    def input_tensors(self) -> list:
        return input_tensors_of(self.body)


class TensorSlice:
    """``T[i]`` of a tensor with more dimensions: index it again (``T[i][j]`` is
    ``T[i, j]``).  Not a value until every dimension is indexed."""

    __slots__ = ("tensor", "indices")

    def __init__(self, tensor: "Tensor", indices: tuple):
        self.tensor = tensor
        self.indices = indices

    def __getitem__(self, more):
        if not isinstance(more, tuple):
            more = (more,)
        return self.tensor[self.indices + more]

    def _as_expr(self):
        # used as a value with dimensions left: the same error as T[i] always gave
        raise self.tensor._index_count_error(len(self.indices))

    def _partial(self, *_):
        self._as_expr()

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _partial
    __truediv__ = __rtruediv__ = __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = _partial
    __neg__ = __lt__ = __le__ = __gt__ = __ge__ = _partial

    def __bool__(self):
        self._as_expr()

    def __repr__(self):
        return f"TensorSlice({self.tensor.name}, {len(self.indices)} of {self.tensor.ndim} indices)"


class Tensor:
    """A multi-dimensional value: ``T[i, j]`` (or ``T[i][j]``) reads it inside a compute
    definition."""

    def __init__(self, op: Operation):
        self.op = op

    @property
    def name(self) -> str:
        return self.op.name

    @property
    def shape(self) -> Tuple[Expr, ...]:
        return self.op.shape

    @property
    def dtype(self) -> str:
        return self.op.dtype

    @property
    def ndim(self) -> int:
        return len(self.op.shape)

    def __getitem__(self, indices) -> Expr:
        if not isinstance(indices, tuple):
            indices = (indices,)
        if 0 < len(indices) < self.ndim:
            # chained indexing, as TVM's TensorSlice: A[i][j] is A[i, j]
            return TensorSlice(self, indices)
        if len(indices) != self.ndim:
            raise self._index_count_error(len(indices))
        idx = []
        for d, x in enumerate(indices):
            if isinstance(x, slice):
                raise ExprError(f"tensor {self.name}: slices are not supported in index {d}; "
                                "index with one expression per dimension")
            e = as_index(x)
            if isinstance(e, Const):
                ext = self.shape[d]
                if e.value < 0 or (isinstance(ext, Const) and e.value >= ext.value):
                    raise ShapeError(
                        f"index {e.value} is out of range for dimension {d} of tensor "
                        f"{self.name} with shape {_shape_str(self.shape)}")
            idx.append(e)
        return ProducerLoad(self, tuple(idx), self.dtype)

    def __call__(self, *indices):
        return self[indices]

    def _index_count_error(self, given: int) -> ShapeError:
        return ShapeError(
            f"tensor {self.name} has {self.ndim} dimension(s) {_shape_str(self.shape)} but "
            f"was indexed with {given} index(es); index every dimension, e.g. "
            f"{self.name}[{', '.join('ijklmn'[d % 6] for d in range(self.ndim))}] or "
            f"{self.name}{''.join('[' + 'ijklmn'[d % 6] + ']' for d in range(self.ndim))}")

    def __repr__(self):
        return f"Tensor({self.name}, shape={_shape_str(self.shape)}, dtype={self.dtype})"

    def __bool__(self):
        return True

    def __iter__(self):
        raise ExprError(f"tensor {self.name} cannot be iterated in Python; index it as "
                        f"{self.name}[i, ...] inside a compute definition")

    # Python arithmetic on whole tensors is a mistake worth naming.
    def _no_arith(self, *_):
        raise ExprError(
            f"arithmetic on the whole tensor {self.name} is not defined; index it inside "
            f"tc.compute, e.g. tc.compute(shape, lambda i, j: {self.name}[i, j] + 1)")

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _no_arith
    __truediv__ = __floordiv__ = __mod__ = __neg__ = _no_arith


def _shape_str(shape) -> str:
    return "(" + ", ".join(str(x) for x in shape) + ")"


def compute_ops(outs) -> list:
    """Every ComputeOp reachable from ``outs`` (tensors or operations), producers first."""
    seen, order = set(), []

    def visit(op):
        if id(op) in seen:
            return
        seen.add(id(op))
        for t in op.input_tensors:
            visit(t.op)
        if isinstance(op, ComputeOp):
            order.append(op)

    for o in outs:
        visit(o.op if isinstance(o, Tensor) else o)
    return order


def input_tensors_of(expr) -> list:
    """Tensors read in ``expr``, in order of first read."""
    out, seen = [], set()

    class _V(Visitor):
        def visit_ProducerLoad(self, e):
            if id(e.producer) not in seen:
                seen.add(id(e.producer))
                out.append(e.producer)
            self.generic_visit(e)

        def visit_Reduce(self, e):
            self.visit(e.source)
            self.visit(e.condition)

    _V().visit(expr)
    return out


# ---------------------------------------------------------------------------------
# the user API


def var(name: str = "v", dtype="int32") -> Var:
    """A symbolic scalar (a shape extent bound at call time, or a scalar parameter)."""
    if not isinstance(name, str):
        raise ExprError(f"tc.var takes the variable's name first, got {name!r}")
    return Var(name, _dt.canon(dtype))


def const(value, dtype=None) -> Const:
    """A constant; ``dtype`` defaults to int32 for ints and float32 for floats."""
    if dtype is None:
        return as_expr(value)
    d = _dt.canon(dtype)
    import math
    import numbers

    if isinstance(value, Expr) or not isinstance(value, numbers.Number) or isinstance(value, complex):
        raise ExprError(f"tc.const: the value must be a Python or numpy number, got {value!r}; "
                        "for an expression use .astype(dtype)")
    if _dt.is_bool(d):
        return Const(bool(value), d)
    if _dt.is_float(d):
        return Const(float(value), d)
    if isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral):
        if not math.isfinite(value) or value != int(value):
            raise ExprError(f"tc.const: {value!r} is not an integer, so it is not a {d} constant; "
                            f"round it first or use a float dtype")
    v = int(value)
    bits = _dt.bits(d)
    lo, hi = (0, 2**bits - 1) if _dt.is_uint(d) else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    if not lo <= v <= hi:
        raise ExprError(f"tc.const: {v} does not fit {d} [{lo}, {hi}]; use a wider dtype")
    return Const(v, d)


def _shape(shape, what: str) -> Tuple[Expr, ...]:
    if isinstance(shape, (int, Expr)) and not isinstance(shape, bool):
        shape = (shape,)
    if not isinstance(shape, (tuple, list)):
        raise ShapeError(f"{what}: shape must be a tuple of extents, got {shape!r}")
    out = []
    for d, x in enumerate(shape):
        if isinstance(x, bool) or not isinstance(x, (int, Expr)) and not hasattr(x, "__index__"):
            raise ShapeError(f"{what}: extent {d} is {x!r}; extents are positive ints or "
                             "int expressions such as tc.var('n')")
        e = as_index(x)
        if isinstance(e, Const) and e.value <= 0:
            raise ShapeError(f"{what}: extent {d} is {e.value}; extents must be positive")
        out.append(e)
    return tuple(out)


def placeholder(shape, dtype="float32", name: str = "placeholder") -> Tensor:
    """An input tensor of ``shape`` and ``dtype``, given as an array at call time."""
    if not isinstance(name, str):
        raise ExprError(f"tc.placeholder: name must be a string, got {name!r}")
    return PlaceholderOp(name, _shape(shape, f"placeholder {name}"), _dt.canon(dtype)).output(0)


def _arg_names(fcompute, ndim):
    import inspect

    try:
        sig = inspect.signature(fcompute)
    except (TypeError, ValueError):
        return [f"i{d}" for d in range(ndim)]
    params = list(sig.parameters.values())
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        return [f"i{d}" for d in range(ndim)]
    return [p.name for p in params]


def compute(shape, fcompute, name: str = "compute", tag: str = "", attrs=None) -> Tensor:
    """``name[i, j, ...] = fcompute(i, j, ...)`` over ``shape``.

    ``fcompute`` takes one index variable per output dimension (named after its
    parameters) and returns an expression; a reduction (``tc.sum`` ...) may only be
    the whole body.
    """
    if not isinstance(name, str):
        raise ExprError(f"tc.compute: name must be a string, got {name!r}")
    if not callable(fcompute):
        raise ComputeError(f"compute {name}: fcompute must be a function of the indices, "
                           f"got {fcompute!r}")
    shp = _shape(shape, f"compute {name}")
    names = _arg_names(fcompute, len(shp))
    if len(names) != len(shp):
        raise ComputeError(
            f"compute {name}: the shape has {len(shp)} dimension(s) but fcompute takes "
            f"{len(names)} index argument(s) ({', '.join(names)}); give one per dimension")
    axis = tuple(IterVar(Var(n, "int32"), Range(Const(0, "int32"), e), "data_par")
                 for n, e in zip(names, shp))
    body = fcompute(*[iv.var for iv in axis])
    if isinstance(body, (list, tuple)):
        raise ComputeError(f"compute {name}: fcompute returned {len(body)} values; tecomp "
                           "computes one tensor per compute (split it into several)")
    if isinstance(body, Tensor):
        raise ComputeError(f"compute {name}: fcompute returned the tensor {body.name}; "
                           f"return an element, e.g. {body.name}[i, j]")
    body = as_expr(body)
    _check_body(name, body, axis)
    from .range_check import check_reads_in_range

    check_reads_in_range(name, body, axis)  # a read out of range at some iteration
    for iv in axis:
        _AXIS_VARS[iv.var] = True  # a value that refers to the key would keep it alive
    return ComputeOp(name, axis, body, tag, attrs).output(0)


def _check_body(name, body, axis):
    own = {iv.var for iv in axis}
    red = set()
    if isinstance(body, Reduce):
        red = {iv.var for iv in body.axis}
        nested = _find(body.source, Reduce) or _find(body.condition, Reduce)
    else:
        nested = _find(body, Reduce)
    if nested is not None:
        raise ComputeError(
            f"compute {name}: a reduction ({nested.combiner.name} over "
            f"{', '.join(iv.name for iv in nested.axis)}) may only be the whole body of a "
            "compute, as in TVM; compute the reduction in its own tc.compute and use that "
            "tensor in this expression")
    from ..ir.functor import free_vars

    for v in free_vars(body):
        if v in own or v in red:
            continue
        iv = _REDUCE_VARS.get(v)
        if iv is not None:
            raise ComputeError(
                f"compute {name}: reduce axis {v.name} is used outside a reduction over it; "
                f"wrap the expression in tc.sum(..., axis={v.name}) (or another reducer)")
        if v in _AXIS_VARS:
            raise ComputeError(
                f"compute {name}: index variable {v.name} belongs to another compute; use "
                "this compute's own index arguments")


def _find(expr, cls):
    found = []

    class _V(Visitor):
        def visit(self, n):
            if not found and isinstance(n, cls):
                found.append(n)
                return
            if not found:
                super().visit(n)

    _V().visit(expr)
    return found[0] if found else None


# Registry of reduce-axis vars, so a stray one can be named in errors (weak: vars die
# with their axes).
import weakref  # noqa: E402

_REDUCE_VARS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_AXIS_VARS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def reduce_axis(dom, name: str = "rv") -> IterVar:
    """A reduction axis over ``dom``: ``(lo, hi)`` (half-open) or an extent."""
    if not isinstance(name, str):
        raise ExprError(f"tc.reduce_axis: name must be a string, got {name!r}")
    if isinstance(dom, Range):
        rng = dom
    elif isinstance(dom, (tuple, list)) and len(dom) == 2:
        lo, hi = as_index(dom[0]), as_index(dom[1])
        from ..ir.op import sub

        rng = Range(lo, sub(hi, lo))
    elif isinstance(dom, (int, Expr)) and not isinstance(dom, bool):
        rng = Range(Const(0, "int32"), as_index(dom))
    else:
        raise ShapeError(f"reduce_axis {name}: dom must be (lo, hi) or an extent, got {dom!r}")
    if isinstance(rng.extent, Const) and rng.extent.value <= 0:
        raise ShapeError(f"reduce_axis {name}: the range {dom!r} is empty; give lo < hi")
    iv = IterVar(Var(name, "int32"), rng, "reduce")
    _REDUCE_VARS[iv.var] = True  # (not iv: iv.var would never die)
    return iv


THREAD_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x", "threadIdx.y",
               "threadIdx.z", "vthread")


def thread_axis(dom=None, tag: str = "", name: str = "") -> IterVar:
    """A GPU thread axis: ``tc.thread_axis("threadIdx.x")`` or ``thread_axis((0, 32), "threadIdx.x")``."""
    if isinstance(dom, str):
        dom, tag = None, dom
    if tag not in THREAD_TAGS:
        raise ExprError(f"unknown thread tag {tag!r}; use one of {', '.join(THREAD_TAGS)}")
    rng = None
    if dom is not None:
        if isinstance(dom, (tuple, list)):
            from ..ir.op import sub

            rng = Range(as_index(dom[0]), sub(as_index(dom[1]), as_index(dom[0])))
        else:
            rng = Range(Const(0, "int32"), as_index(dom))
    return IterVar(Var(name or tag, "int32"), rng, "thread", tag)
