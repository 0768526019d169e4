"""``tc.scan``: a recurrence over the first axis (an RNN cell, a cumulative sum), as TVM's
``te.scan``.

    X = tc.placeholder((T, n), name="X")
    state = tc.placeholder((T, n), name="state")          # the scan's own output, as read
    init = tc.compute((1, n), lambda _, i: X[0, i], name="init")
    update = tc.compute((T, n), lambda t, i: state[t - 1, i] + X[t, i], name="update")
    S = tc.scan(init, update, state, inputs=[X], name="S")   # cumulative sum over t

``S[0:m] = init`` (``m = init.shape[0]``); then for ``t`` in ``[m, T)``, in order,
``S[t, ...] = update[t, ...]``, where ``update`` (and the computes between it and the
state) read ``state`` as ``S`` as computed so far (``state[t - 1, i]``, or any earlier
step).  The computes that depend on the state run inside the time loop, one step at a
time: a schedule finds them computed at ``S``'s time axis (``S.op.scan_axis``), and may
move them further in (``compute_at`` a loop inside) or inline them; those that do not
depend on the state (``X @ W`` of an RNN) are computed for every step beforehand.
"""
from __future__ import annotations

from typing import Optional, Sequence

from ..errors import ComputeError
from ..ir import op as _op
from ..ir.expr import Const, IterVar, ProducerLoad, Range, Var
from ..ir.simplify import simplify
from .range_check import load_error
from .tensor import Operation, PlaceholderOp, Tensor, compute_ops


def _same(a, b) -> bool:
    if a is b or a == b:
        return True
    d = simplify(_op.sub(a, b))
    return isinstance(d, Const) and d.value == 0


class ScanOp(Operation):
    """A scan (``tc.scan``): its stage's loops are the time axis ``scan_axis`` over
    ``[init.shape[0], T)`` and the state's other axes; its body copies ``update[t, ...]``.

    Parameters
    ----------
    name : str
        The stage's name.
    init : Tensor
        The first steps of the state.
    update : Tensor
        The state at step ``t`` from earlier steps.
    state : Tensor
        The placeholder standing for the scan's output as ``update`` reads it.
    inputs : list of Tensor
        Other tensors the recurrence reads.
    tag : str, optional
        A label for schedules.
    attrs : dict, optional
        Free-form attributes.
    """

    def __init__(self, name, init, update, state, inputs, tag="", attrs=None):
        self.name = name
        self.tag = tag
        self.attrs = dict(attrs or {})
        self.init, self.update, self.state = init, update, state
        self.inputs = list(inputs or [])
        self.shape = tuple(state.shape)
        self.dtype = state.dtype
        m, T = init.shape[0], state.shape[0]
        steps = _op.index_sub(T, m)   # (the axes in their extents' dtypes: int64 past int32)
        self.scan_axis = IterVar(Var(f"{name}.t", steps.dtype),
                                 Range(_op.widen(m, steps.dtype), steps), "data_par")
        self.spatial_axis = tuple(
            IterVar(Var(f"{name}.i{d}", e.dtype), Range(Const(0, e.dtype), e), "data_par")
            for d, e in enumerate(state.shape[1:], 1))
        self.axis = (self.scan_axis,) + self.spatial_axis
        self.reduce_axis = ()
        self.bodies = (ProducerLoad(update, tuple(iv.var for iv in self.axis), update.dtype),)
        self._outs = (Tensor(self),)

    @property
    def body(self):
        return self.bodies[0]

    @property
    def input_tensors(self) -> list:
        return [self.init, self.update]

    def body_ops(self) -> list:
        """The computes between the state and ``update`` (``update`` included): those
        that run inside the time loop."""
        out = []
        dep = {id(self.state.op)}
        for op in compute_ops([self.update]):
            if any(id(t.op) in dep for t in op.input_tensors):
                dep.add(id(op))
                out.append(op)
        return out


def scan(init: Tensor, update: Tensor, state_placeholder: Tensor,
         inputs: Optional[Sequence[Tensor]] = None, name: str = "scan", tag: str = "",
         attrs: Optional[dict] = None) -> Tensor:
    """A recurrence over the first axis (an RNN cell, a cumulative sum), as TVM's
    ``te.scan``.

    ``S[0:m] = init`` (``m = init.shape[0]``); then for ``t`` in ``[m, T)``, in order,
    ``S[t, ...] = update[t, ...]``, where ``update`` reads ``state_placeholder`` as ``S``
    computed so far.

    Parameters
    ----------
    init : Tensor
        The first ``m`` steps, of the state's shape but for the first axis.
    update : Tensor
        A compute of the state's shape giving step ``t`` from earlier steps.
    state_placeholder : Tensor
        A ``tc.placeholder`` of the state's shape standing for the scan's output.
    inputs : sequence of Tensor, optional
        The other tensors the recurrence reads (TVM's ``inputs``).
    name : str, optional
        The stage's name.
    tag : str, optional
        A label for schedules.
    attrs : dict, optional
        Free-form attributes.

    Returns
    -------
    Tensor
        The scan's output, of the state's shape.

    Raises
    ------
    ComputeError
        For several states, a state that is not a placeholder, or shapes that do not
        agree.

    Examples
    --------
    >>> import tecomp as tc
    >>> T, n = 6, 4
    >>> X = tc.placeholder((T, n), name="X")
    >>> state = tc.placeholder((T, n), name="state")
    >>> init = tc.compute((1, n), lambda _, i: X[0, i], name="init")
    >>> update = tc.compute((T, n), lambda t, i: state[t - 1, i] + X[t, i], name="update")
    >>> S = tc.scan(init, update, state, inputs=[X], name="S")
    """
    one = lambda x: x[0] if isinstance(x, (list, tuple)) and len(x) == 1 else x  # noqa: E731
    init, update, state = one(init), one(update), one(state_placeholder)
    for what, t in (("init", init), ("update", update), ("state_placeholder", state)):
        if isinstance(t, (list, tuple)):
            raise ComputeError(f"scan {name}: {len(t)} {what} tensors; tecomp scans one state "
                               "(make one scan per state, or stack the states in one tensor)")
        if not isinstance(t, Tensor):
            raise ComputeError(f"scan {name}: {what} must be a tensor, got {t!r:.60}")
    if not isinstance(state.op, PlaceholderOp):
        raise ComputeError(f"scan {name}: state_placeholder {state.name} must be a "
                           "tc.placeholder (it stands for the scan's output as update reads it)")
    if len(state.shape) < 1:
        raise ComputeError(f"scan {name}: the state has no axis to scan over")
    for what, t in (("init", init), ("update", update)):
        if t.dtype != state.dtype:
            raise ComputeError(f"scan {name}: {what} {t.name} is {t.dtype} but the state "
                               f"{state.name} is {state.dtype}")
        if len(t.shape) != len(state.shape) or not all(
                _same(a, b) for a, b in zip(t.shape[1:], state.shape[1:])):
            raise ComputeError(
                f"scan {name}: {what} {t.name} has shape ({', '.join(map(str, t.shape))}) and the "
                f"state {state.name} ({', '.join(map(str, state.shape))}); they differ only in "
                "the first (time) axis")
    if not _same(update.shape[0], state.shape[0]):
        raise ComputeError(f"scan {name}: update {update.name} has {update.shape[0]} steps but "
                           f"the state {state.name} {state.shape[0]}; give both the same")
    reach = lambda t: {id(op) for op in compute_ops([t])} | {  # noqa: E731
        id(x.op) for op in compute_ops([t]) for x in op.input_tensors}
    if id(state.op) not in reach(update):
        raise ComputeError(f"scan {name}: update {update.name} does not read the state "
                           f"{state.name}; a scan's update reads the previous steps (e.g. "
                           f"{state.name}[t - 1, i])")
    if id(state.op) in reach(init) or init is state:
        raise ComputeError(f"scan {name}: init {init.name} reads the state {state.name}; the "
                           "first steps come from the inputs only")
    if not isinstance(name, str):
        raise ComputeError(f"tc.scan: name must be a string, got {name!r:.60}")
    op = ScanOp(name, init, update, state, inputs, tag, attrs)
    for b in op.body_ops():
        if getattr(b, "call", None) is not None or hasattr(b, "scan_axis"):
            raise ComputeError(
                f"scan {name}: {b.name} reads the state and is "
                f"{'an extern stage' if hasattr(b, 'call') else 'a scan'}; a scan's body is made "
                "of computes (they run one step at a time)")
    _recheck_state_reads(op)
    return op.output(0)


def _recheck_state_reads(op: ScanOp) -> None:
    """The reads of the state before its start that ``tc.compute`` deferred: in the body,
    where the time axis runs from the scan's first computed step, they must be in range."""
    m = op.init.shape[0]
    for bop in op.body_ops():
        keep = []
        for load, doms, msg in getattr(bop, "range_deferred", ()):
            if load.producer is not op.state:
                keep.append((load, doms, msg))
                continue
            t = bop.axis[0]
            doms = dict(doms)
            doms[t.var] = Range(m, _op.sub(t.dom.extent, m))
            err = load_error(bop.name, load, {k: _const_range(r) for k, r in doms.items()})
            if err is not None:
                raise ComputeError(
                    f"scan {op.name}: {err[2]} (the steps before {m} come from init; update reads "
                    f"at most {m} step(s) back)")
        bop.range_deferred = keep


def _const_range(r):
    return Range(simplify(r.min), simplify(r.extent))
