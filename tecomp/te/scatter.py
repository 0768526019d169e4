"""Scatter-add: ``out = 0; for each point u of a domain: out[index(u)] += value(u)``.

A compute is a gather (each output element says what it reads); a scatter is its
transpose, where each point of a domain says which element it adds to, through indices
that may read tensors (``ids[b, s]``).  It is what the gradient of a gather through an
index tensor is: the embedding's ``W.grad[ids[b, s], d] += out.grad[b, s, d]`` costs
``len(ids) * D`` instead of the ``V * len(ids) * D`` of a gather over every row of ``W``.
``tc.gradient`` makes one wherever a read's index is data-dependent.

``tc.scatter_add(shape, domain, f, dtype="float32", name="scatter")``: ``f(*u)`` returns
``(index_tuple, value)`` or ``(index_tuple, value, condition)``.  A point whose index
falls outside ``shape`` (or whose condition is false) adds nothing.  The stage runs whole,
at the root, in its own loops (it has no schedulable loops: points of the domain may add
to the same element, so they run one after another on the CPU); the CUDA C backends do
not generate it yet.
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence, Union

from ..errors import ComputeError, ExprError
from ..ir.expr import Const, Expr, IterVar, Range, Var, as_expr
from .tensor import Operation, Tensor, _arg_names, _shape, input_tensors_of


class ScatterOp(Operation):
    """``out[index(u)] += value(u)`` over ``domain`` where ``condition(u)``; ``out`` starts
    at 0.  No loops to schedule: computed whole at the root (see the module doc).

    Parameters
    ----------
    name : str
        The stage's name.
    shape : tuple of Expr
        The output's shape.
    dtype : str
        The output's dtype.
    domain : tuple of IterVar
        The points ``u``.
    index : tuple of Expr
        The element each point adds to.
    value : Expr
        What it adds.
    condition : Expr
        Where it adds.
    tag : str, optional
        A label for schedules.
    attrs : dict, optional
        Free-form attributes.
    """

    def __init__(self, name, shape, dtype, domain, index, value, condition, tag="", attrs=None):
        self.name = name
        self.shape = tuple(shape)
        self.dtype = dtype
        self.dtypes = (dtype,)
        self.domain = tuple(domain)
        self.index = tuple(index)
        self.value = value
        self.condition = condition
        self.tag = tag
        self.attrs = dict(attrs or {})
        self.axis = ()
        self.reduce_axis = ()
        self._outs = (Tensor(self),)

    @property
    def bodies(self) -> tuple:
        return ()

    @property
    def body(self):
        raise ComputeError(f"scatter {self.name} adds values at computed indices; it has no "
                           "body of one output point; this step takes computes only")

    @property
    def input_tensors(self) -> list:
        out, seen = [], set()
        for e in self.index + (self.value, self.condition):
            for t in input_tensors_of(e):
                if id(t) not in seen:
                    seen.add(id(t))
                    out.append(t)
        return out


def scatter_add(shape: Sequence[Union[int, Expr]], domain: Sequence[Union[int, Expr]],
                f: Callable[..., tuple], dtype: str = "float32", name: str = "scatter",
                tag: str = "", attrs: Optional[dict] = None) -> Tensor:
    """A scatter-add stage: ``out = 0``; for each point ``u`` of ``domain``,
    ``out[index(u)] += value(u)``.

    A point whose index falls outside ``shape`` (or whose condition is false) adds
    nothing.  The stage runs whole, at the root, one point after another (CPU only).

    Parameters
    ----------
    shape : sequence of int or Expr
        The output's shape.
    domain : sequence of int or Expr
        The extents of the points ``u``.
    f : callable
        ``f(*u)`` returns ``(index_tuple, value)`` or ``(index_tuple, value, condition)``.
    dtype : str, optional
        The output's dtype.
    name : str, optional
        The stage's name.
    tag : str, optional
        A label for schedules.
    attrs : dict, optional
        Free-form attributes.

    Returns
    -------
    Tensor
        The output.

    Raises
    ------
    ComputeError
        For an ``f`` that takes the wrong number of indices or returns something else.

    Examples
    --------
    >>> import tecomp as tc
    >>> V, D, B = 10, 4, 6
    >>> ids = tc.placeholder((B,), dtype="int32", name="ids")
    >>> G = tc.placeholder((B, D), name="G")
    >>> Wg = tc.scatter_add((V, D), (B, D), lambda b, d: ((ids[b], d), G[b, d]))
    """
    if not isinstance(name, str):
        raise ExprError(f"tc.scatter_add: name must be a string, got {name!r}")
    shp = _shape(shape, f"scatter {name}")
    dom = _shape(domain, f"scatter {name} (its domain)")
    if not callable(f):
        raise ComputeError(f"scatter {name}: f must be a function of the domain's indices "
                           f"returning (index, value), got {f!r:.60}")
    names = _arg_names(f, len(dom))
    if len(names) != len(dom):
        raise ComputeError(f"scatter {name}: the domain has {len(dom)} dimension(s) but f takes "
                           f"{len(names)} index argument(s); give one per dimension")
    axes = tuple(IterVar(Var(n, e.dtype), Range(Const(0, e.dtype), e), "data_par")
                 for n, e in zip(names, dom))
    got = f(*[iv.var for iv in axes])
    if not isinstance(got, (tuple, list)) or len(got) not in (2, 3) or not isinstance(
            got[0], (tuple, list)):
        raise ComputeError(f"scatter {name}: f must return (index_tuple, value) or (index_tuple, "
                           f"value, condition), got {got!r:.80}")
    index = tuple(as_expr(i) for i in got[0])
    if len(index) != len(shp):
        raise ComputeError(f"scatter {name}: the index has {len(index)} component(s) for a "
                           f"{len(shp)}-d output; give one per dimension")
    for i in index:
        if i.dtype not in ("int32", "int64"):
            raise ComputeError(f"scatter {name}: an index is {i.dtype}; indices are int32 or int64")
    value = as_expr(got[1])
    if value.dtype != dtype:
        value = value.astype(dtype)
    cond = as_expr(got[2]) if len(got) == 3 else Const(True, "bool")
    if cond.dtype != "bool":
        raise ComputeError(f"scatter {name}: the condition is {cond.dtype}; give a comparison")
    return ScatterOp(name, shp, dtype, axes, index, value, cond, tag, attrs).output(0)
