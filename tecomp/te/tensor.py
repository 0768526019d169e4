"""Tensors and operations: the user's compute DAG.

A ``Tensor`` is the output of an ``Operation``: a ``PlaceholderOp`` (an input given at
call time) or a ``ComputeOp`` (one value per output point, from an index lambda).
Tensors and operations have identity semantics.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence, Tuple

from ..errors import ComputeError, ExprError, ShapeError
from ..ir import dtype as _dt
from ..ir.expr import (
    Const, Expr, IterVar, ProducerLoad, Range, Reduce, TupleCommReducer, Var, as_expr, as_index, same_as,
)
from ..ir.deep import deep_entry
from ..ir.functor import Visitor, children, free_vars, substitute
from ..ir.op import sub, widen
from ..ir.stmt import THREAD_TAGS
from .range_check import check_reads_in_range


class Operation:
    """Base of operations.  ``output(i)`` is the ``i``-th tensor it produces (one for a
    placeholder; a compute whose function returns a tuple has one per element)."""

    name: str
    _outs: tuple

    @property
    def num_outputs(self) -> int:
        return len(self._outs)

    def output(self, i: int = 0) -> "Tensor":
        if not isinstance(i, int) or not 0 <= i < len(self._outs):
            raise ExprError(f"operation {self.name} has {len(self._outs)} output(s); asked for "
                            f"output {i!r}")
        return self._outs[i]

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
        self._outs = (Tensor(self),)


class ComputeOp(Operation):
    """``name[axis] = body``; ``body`` may be a ``Reduce`` at its top level only.

    A multi-output compute (its function returned a tuple) has ``bodies``, one per output,
    computed in one loop nest; if they are reductions, they are the elements of one tuple
    reduction (same axes and condition, ``value_index`` 0, 1, ...).  ``body`` and
    ``dtype`` are those of a single-output compute."""

    def __init__(self, name, axis, body, tag="", attrs=None):
        self.name = name
        self.axis = tuple(axis)
        self.bodies = tuple(body) if isinstance(body, (tuple, list)) else (body,)
        first = self.bodies[0]
        self.reduce_axis = tuple(first.axis) if isinstance(first, Reduce) else ()
        self.tag = tag
        self.attrs = dict(attrs or {})
        self.shape = tuple(iv.dom.extent for iv in self.axis)
        self.dtypes = tuple(b.dtype for b in self.bodies)
        self._outs = tuple(Tensor(self, i) for i in range(len(self.bodies)))

    def _single(self, what):
        if len(self.bodies) != 1:
            raise ComputeError(
                f"compute {self.name} has {len(self.bodies)} outputs (a multi-output compute), "
                f"and this step reads its {what} as one expression; it supports single-output "
                "computes only: compute each output in its own tc.compute")

    @property
    def body(self):
        self._single("body")
        return self.bodies[0]

    @property
    def dtype(self) -> str:
        self._single("dtype")
        return self.dtypes[0]

    @property
    def input_tensors(self) -> list:
        if len(self.bodies) == 1:
            return input_tensors_of(self.bodies[0])
        out = []
        for b in self.bodies:
            out += [t for t in input_tensors_of(b) if not any(t is x for x in out)]
        return out


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
    __pow__ = __rpow__ = __neg__ = __lt__ = __le__ = __gt__ = __ge__ = _partial

    def __bool__(self):
        self._as_expr()

    def __repr__(self):
        return f"TensorSlice({self.tensor.name}, {len(self.indices)} of {self.tensor.ndim} indices)"


class Tensor:
    """A multi-dimensional value: ``T[i, j]`` (or ``T[i][j]``) reads it inside a compute
    definition.

    Made by :func:`placeholder`, :func:`compute` and the other stages; ``T.shape``,
    ``T.dtype``, ``T.name``, ``T.ndim`` and ``T.op`` (the operation computing it) describe
    it.

    Parameters
    ----------
    op : Operation
        The operation whose output this is.
    value_index : int, optional
        Which output of ``op`` (a multi-output compute has several); 0 by default.
    """

    def __init__(self, op: Operation, value_index: int = 0):
        self.op = op
        self.value_index = value_index

    @property
    def name(self) -> str:
        op = self.op
        if len(op._outs) == 1:
            return op.name
        return f"{op.name}.v{self.value_index}"   # as TVM names the outputs of one op

    @property
    def shape(self) -> Tuple[Expr, ...]:
        shapes = getattr(self.op, "shapes", None)   # an extern's outputs: one shape each
        return self.op.shape if shapes is None else shapes[self.value_index]

    @property
    def dtype(self) -> str:
        dts = getattr(self.op, "dtypes", None)
        return self.op.dtype if dts is None else dts[self.value_index]

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
    __truediv__ = __floordiv__ = __mod__ = __pow__ = __rpow__ = __neg__ = _no_arith


def _shape_str(shape) -> str:
    return "(" + ", ".join(str(x) for x in shape) + ")"


def compute_ops(outs) -> list:
    """Every ComputeOp (and ExternOp: every operation with a stage) reachable from ``outs``
    (tensors or operations), producers first."""
    seen, order = set(), []

    def visit(op):
        if id(op) in seen:
            return
        seen.add(id(op))
        for t in op.input_tensors:
            visit(t.op)
        if not isinstance(op, PlaceholderOp):
            order.append(op)

    for o in outs:
        visit(o.op if isinstance(o, Tensor) else o)
    return order


def input_tensors_of(expr) -> list:
    """Tensors read in ``expr``, in order of first read."""
    out, seen = [], set()
    stack = [expr]   # a loop, not a recursion: any depth
    while stack:
        e = stack.pop()
        if isinstance(e, ProducerLoad):
            if id(e.producer) not in seen:
                seen.add(id(e.producer))
                out.append(e.producer)
        elif isinstance(e, Reduce):
            stack += (e.condition, e.source)
            continue
        stack += reversed(children(e))
    return out


# ---------------------------------------------------------------------------------
# the user API


def var(name: str = "v", dtype: str = "int32") -> Var:
    """A symbolic scalar: a shape extent bound at call time, or a scalar parameter.

    Parameters
    ----------
    name : str, optional
        The variable's name in the IR and in messages.
    dtype : str, optional
        Its dtype, ``"int32"`` by default (``"int64"`` for extents past 2**31; a float
        dtype for a float scalar parameter).

    Returns
    -------
    Var
        A new variable (two calls with one name are two variables).

    Raises
    ------
    ExprError
        When ``name`` is not a string.

    Examples
    --------
    >>> import tecomp as tc
    >>> n = tc.var("n")
    >>> A = tc.placeholder((n, 4), name="A")
    """
    if not isinstance(name, str):
        raise ExprError(f"tc.var takes the variable's name first, got {name!r}")
    return Var(name, _dt.canon(dtype))


def const(value: int | float | bool, dtype: str | None = None) -> Const:
    """A constant expression.

    Parameters
    ----------
    value : int or float or bool
        A Python or numpy number.
    dtype : str, optional
        The constant's dtype; by default int32 for an int, float32 for a float and bool
        for a bool.

    Returns
    -------
    Const
        The constant.

    Raises
    ------
    ExprError
        For a value that is not a number, a non-integral value with an integer dtype,
        or an integer that ``dtype`` cannot hold.

    Examples
    --------
    >>> import tecomp as tc
    >>> one = tc.const(1, "int8")
    """
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


def placeholder(shape: int | Expr | Sequence[int | Expr], dtype: str = "float32",
                name: str = "placeholder") -> Tensor:
    """An input tensor of ``shape`` and ``dtype``, given as an array at call time.

    Parameters
    ----------
    shape : int or Expr or sequence of int or Expr
        Positive extents; a symbolic one (``tc.var("n")``) is bound by the array's shape
        at call time.
    dtype : str, optional
        The element type, ``"float32"`` by default.
    name : str, optional
        The tensor's name in the IR and in messages.

    Returns
    -------
    Tensor
        The input tensor.

    Raises
    ------
    ShapeError
        For an extent that is not positive, or not an int or an int expression.
    DTypeError
        For an unknown dtype.

    Examples
    --------
    >>> import tecomp as tc
    >>> A = tc.placeholder((tc.var("n"), 128), name="A")
    """
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


def compute(shape: int | Expr | Sequence[int | Expr], fcompute: Callable[..., Any],
            name: str = "compute", tag: str = "", attrs: dict | None = None) -> Tensor | Tuple[Tensor, ...]:
    """``name[i, j, ...] = fcompute(i, j, ...)`` over ``shape``.

    Parameters
    ----------
    shape : int or Expr or sequence of int or Expr
        The output's positive extents.
    fcompute : callable
        Takes one index variable per output dimension (named after its parameters) and
        returns an expression, or a tuple of them (one output each).  A reduction
        (``tc.sum`` ...) may only be the whole body.
    name : str, optional
        The stage's name in the IR and in messages.
    tag : str, optional
        A label for schedules and rules to recognise the compute (``tecomp.nn`` tags its
        convolutions).
    attrs : dict, optional
        Free-form attributes kept on the operation.

    Returns
    -------
    Tensor or tuple of Tensor
        The output, or one tensor per value when ``fcompute`` returns a tuple.

    Raises
    ------
    ComputeError
        For an ``fcompute`` that takes the wrong number of indices, returns a tensor
        instead of an element, or nests reductions.
    ShapeError
        For an extent that is not positive, or a read out of a tensor's bounds (with
        the index and the iteration where it happens).

    Examples
    --------
    >>> import tecomp as tc
    >>> A = tc.placeholder((64, 32), name="A")
    >>> B = tc.placeholder((32, 16), name="B")
    >>> k = tc.reduce_axis((0, 32), name="k")
    >>> C = tc.compute((64, 16), lambda i, j: tc.sum(A[i, k] * B[k, j], axis=k), name="C")
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
    axis = tuple(IterVar(Var(n, e.dtype), Range(Const(0, e.dtype), e), "data_par")
                 for n, e in zip(names, shp))
    body = fcompute(*[iv.var for iv in axis])
    multi = isinstance(body, (list, tuple))
    bodies = list(body) if multi else [body]
    if multi and not bodies:
        raise ComputeError(f"compute {name}: fcompute returned an empty {type(body).__name__}; "
                           "return one expression, or a tuple of them (one per output)")
    for n, b in enumerate(bodies):
        if isinstance(b, Tensor):
            raise ComputeError(f"compute {name}: fcompute returned the tensor {b.name}"
                               f"{f' as value {n}' if multi else ''}; return an element, "
                               f"e.g. {b.name}[i, j]")
        if isinstance(b, (list, tuple)):
            raise ComputeError(f"compute {name}: value {n} of what fcompute returned is itself "
                               f"a {type(b).__name__}; return a flat tuple of expressions")
    return _make_compute(name, axis, [as_expr(b) for b in bodies], multi, tag, attrs)


@deep_entry(lambda name, axis, bodies, *_: (f"compute {name}", bodies))
def _make_compute(name, axis, bodies, multi, tag, attrs):
    """The rest of :func:`compute`, from what ``fcompute`` returned (a deep body runs
    again on a big stack: :mod:`tecomp.ir.deep`)."""
    deferred = []   # reads of a placeholder before its start: a scan's state, or an error
    for b in bodies:
        _check_body(name, b, axis)
        check_reads_in_range(name, b, axis, deferred,   # a read out of range at some iteration
                             lambda t: isinstance(t.op, PlaceholderOp))
    if multi:
        bodies = _tuple_bodies(name, bodies)
    elif isinstance(bodies[0], Reduce) and _is_tuple_reduce(bodies[0]):
        raise ComputeError(
            f"compute {name}: the body is one element of the tuple reduction "
            f"{bodies[0].combiner.name}, which gives {bodies[0].combiner.arity} values; return "
            "all of them from fcompute (e.g. lambda i: argmax((k, A[i, k]), axis=k)), which "
            "makes one output tensor each")
    for iv in axis:
        _AXIS_VARS[iv.var] = True  # a value that refers to the key would keep it alive
    op = ComputeOp(name, axis, tuple(bodies) if multi else bodies[0], tag, attrs)
    op.range_deferred = deferred   # tc.scan clears its state's; create_schedule raises the rest
    op.user_reads = True   # reads as written: lowering checks those the arguments decide
    return op._outs if multi else op.output(0)


def _is_tuple_reduce(e) -> bool:
    return isinstance(e.combiner, TupleCommReducer)


def _tuple_bodies(name, bodies) -> list:
    """The bodies of a multi-output compute, checked: all elementwise, or all the elements
    of one tuple reduction in order.  Single-value reductions over the same axes and
    condition (``tc.sum(x, axis=k), tc.sum(x * x, axis=k)``) become the elements of one
    tuple reduction made of their combiners, so they run in one pass."""
    reds = [isinstance(b, Reduce) for b in bodies]
    if not any(reds):
        return bodies
    if not all(reds):
        n = reds.index(False)
        raise ComputeError(
            f"compute {name}: value {n} is not a reduction but value {reds.index(True)} is; "
            "the values of a multi-output compute are all reductions over the same axes or "
            "none is: compute the others in their own tc.compute")
    first = bodies[0]
    for n, b in enumerate(bodies[1:], 1):
        if tuple(b.axis) != tuple(first.axis):
            raise ComputeError(
                f"compute {name}: value {n} reduces over "
                f"({', '.join(iv.name for iv in b.axis)}) but value 0 over "
                f"({', '.join(iv.name for iv in first.axis)}); the reductions of one compute "
                "share their axes")
        if not _same_expr(b.condition, first.condition):
            raise ComputeError(
                f"compute {name}: value {n} reduces where {b.condition} but value 0 where "
                f"{first.condition}; the reductions of one compute share their where= "
                "condition")
    tuple_red = next((b for b in bodies if _is_tuple_reduce(b)), None)
    if tuple_red is not None:
        comb = tuple_red.combiner
        ok = (all(b.combiner is comb for b in bodies) and len(bodies) == comb.arity
              and all(b.value_index == n for n, b in enumerate(bodies)))
        if not ok:
            raise ComputeError(
                f"compute {name}: a tuple reduction ({comb.name}) "
                "must be returned whole and alone: return exactly the values it gave, in "
                "order (e.g. lambda i: argmax((k, A[i, k]), axis=k))")
        return bodies

    lhs, rhs, res, ident = [], [], [], []
    for n, b in enumerate(bodies):
        c = b.combiner
        x, y = Var(f"{c.lhs.name}{n}", c.lhs.dtype), Var(f"{c.rhs.name}{n}", c.rhs.dtype)
        lhs.append(x)
        rhs.append(y)
        res.append(substitute(c.result, {c.lhs: x, c.rhs: y}))
        ident.append(c.identity)
    comb = TupleCommReducer("+".join(b.combiner.name for b in bodies), tuple(lhs), tuple(rhs),
                            tuple(res), tuple(ident))
    return [Reduce(comb, b.source, b.axis, first.condition, b.dtype, n)
            for n, b in enumerate(bodies)]


def _same_expr(a, b) -> bool:
    """Structurally equal (the IR's nodes compare by value, its variables by identity)."""
    return same_as(a, b)


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


def reduce_axis(dom: int | Expr | Tuple[int | Expr, int | Expr], name: str = "rv") -> IterVar:
    """A reduction axis over ``dom``.

    Parameters
    ----------
    dom : int or Expr or (lo, hi)
        The half-open range ``(lo, hi)``, or an extent (``(0, extent)``).
    name : str, optional
        The axis's name in the IR.

    Returns
    -------
    IterVar
        An axis to give a reducer's ``axis=``.

    Raises
    ------
    ShapeError
        For an empty range or a ``dom`` of another kind.

    Examples
    --------
    >>> import tecomp as tc
    >>> k = tc.reduce_axis((0, 128), name="k")
    """
    if not isinstance(name, str):
        raise ExprError(f"tc.reduce_axis: name must be a string, got {name!r}")
    if isinstance(dom, Range):
        rng = dom
    elif isinstance(dom, (tuple, list)) and len(dom) == 2:
        rng = _index_range(as_index(dom[0]), as_index(dom[1]))
    elif isinstance(dom, (int, Expr)) and not isinstance(dom, bool):
        ext = as_index(dom)
        rng = Range(Const(0, ext.dtype), ext)
    else:
        raise ShapeError(f"reduce_axis {name}: dom must be (lo, hi) or an extent, got {dom!r}")
    if isinstance(rng.extent, Const) and rng.extent.value <= 0:
        raise ShapeError(f"reduce_axis {name}: the range {dom!r} is empty; give lo < hi")
    iv = IterVar(Var(name, rng.extent.dtype), rng, "reduce")
    _REDUCE_VARS[iv.var] = True  # (not iv: iv.var would never die)
    return iv


def _index_range(lo: Expr, hi: Expr) -> Range:
    """The range ``[lo, hi)`` of an axis, in the dtype that holds its bounds and its
    extent: constant bounds are subtracted exactly (``(0, 2**31)`` has the int64 extent
    ``2**31``), never wrapped."""
    dt = _dt.promote(lo.dtype, hi.dtype, f"the bounds {lo} and {hi} of the range")
    if isinstance(lo, Const) and isinstance(hi, Const):
        ext = as_index(int(hi.value) - int(lo.value))   # int64 where int32 cannot hold it
        dt = _dt.promote(dt, ext.dtype)
        return Range(Const(int(lo.value), dt), Const(int(ext.value), dt))
    lo, hi = widen(lo, dt), widen(hi, dt)
    return Range(lo, sub(hi, lo))


def thread_axis(dom: str | int | Expr | Tuple[int | Expr, int | Expr] | None = None,
                tag: str = "", name: str = "") -> IterVar:
    """A GPU thread axis, to ``bind`` a loop to.

    Parameters
    ----------
    dom : str or int or Expr or (lo, hi), optional
        The axis's range (an extent, or ``(lo, hi)``); usually left out, the bound loop
        gives it.  A string here is taken as ``tag`` (``tc.thread_axis("threadIdx.x")``).
    tag : str
        One of ``blockIdx.x/y/z``, ``threadIdx.x/y/z`` and ``vthread``.
    name : str, optional
        The variable's name (default: the tag).

    Returns
    -------
    IterVar
        A thread axis.

    Raises
    ------
    ExprError
        For an unknown tag.

    Examples
    --------
    >>> import tecomp as tc
    >>> tx = tc.thread_axis("threadIdx.x")
    """
    if isinstance(dom, str):
        dom, tag = None, dom
    if tag not in THREAD_TAGS:
        raise ExprError(f"unknown thread tag {tag!r}; use one of {', '.join(THREAD_TAGS)}")
    rng = None
    if dom is not None:
        if isinstance(dom, (tuple, list)):
            rng = _index_range(as_index(dom[0]), as_index(dom[1]))
        else:
            rng = Range(Const(0, "int32"), as_index(dom))
    return IterVar(Var(name or tag, "int32"), rng, "thread", tag)
