"""``schedule_backward``: a default CPU schedule for derived gradients.

The gather form makes every gradient an ordinary compute whose data-parallel axes are the
input's axes and whose reduce axes are the free variables of the inverted index map.  This
schedule gives each such loop nest the shape a CPU likes, without knowing what it computes:

* cheap elementwise helper stages (an adjoint that only selects, adds or multiplies) are
  inlined into their readers, unless a reader is a reduction (a padded input read by a
  weight gradient is computed once, vectorized, rather than once per kernel tap);
* the innermost data-parallel axis is split by ``vector`` and vectorized, the one before it
  split by ``tile`` and unrolled: a ``tile x vector`` block of accumulators stays in registers
  while the reduce axes (the kernel window, the batch, ...) run outside it;
* the outermost data-parallel loop (fused with the next when it is short, e.g. a batch of 1)
  runs in parallel.

* the convolutions among the stages (``tecomp.nn``'s gradient rule makes a convolution's
  data gradient a ``conv2d_nchw``/``conv2d_nhwc`` of the adjoint, one per phase of the data
  for a stride above 1, and its weight gradient a ``conv2d_*_wgrad`` stage) get
  ``tecomp.nn``'s conv schedules (:func:`tecomp.strategy.cpu.schedule_conv2d_into`),
  whatever ``vector`` says;

* a sum whose output rows are too short to vectorize (a convolution's weight gradient,
  ``[O, C, 3, 3]``) is ``rfactor``-ed over ``vector`` lanes of its innermost reduce axis,
  which runs along contiguous memory.

It is a starting point for tuned schedules, not one.  Bounds conditions of the gather
form (``where=`` on the reduction) are peeled off by lowering's loop partitioning, so the
interior of a convolution's data gradient runs without them.
"""
from __future__ import annotations

from typing import Sequence, Union

from ..ir import dtype as _dt
from ..ir.expr import Call, Const, Div, Expr, Reduce
from ..ir.functor import Visitor, free_vars
from ..schedule.schedule import Schedule, create_schedule
from ..te import reduce as R
from ..te.tensor import ComputeOp, Tensor
from ..target import Target, cpu_model
from ..autodiff import rules as _rules
from .cpu import CONV_TAGS, schedule_conv2d_into
from .cpu.templates import PART_TEMPLATES
from .rules import schedule_stages


def _cheap(body: Expr) -> bool:
    """No intrinsic, no division: worth recomputing where it is read."""
    bad = []

    class _V(Visitor):
        def visit(self, n):
            if isinstance(n, (Call, Div, Reduce)):
                bad.append(n)
                return
            if not bad:
                super().visit(n)

    _V().visit(body)
    return not bad


def _reachable(outs):
    seen = set()
    work = [t.op for t in outs]
    while work:
        op = work.pop()
        if id(op) in seen:
            continue
        seen.add(id(op))
        work.extend(t.op for t in op.input_tensors)
    return seen


def _extent(iv):
    e = iv.dom.extent
    return int(e.value) if isinstance(e, Const) else None


def schedule_backward(outputs: Union[Tensor, Sequence[Tensor]], s: Schedule | None = None, *,
                      vector: int = 8, tile: int = 4, inline: bool = True,
                      parallel: bool = True, min_parallel: int = 4096, auto: bool = True,
                      target: Union[str, Target] = "llvm") -> Schedule:
    """Schedule ``outputs`` (gradient tensors, or any computes) for the CPU ``target``.

    Only the stages that ``outputs`` need and that nobody scheduled yet are touched, so a
    tuned schedule of some stages can come first.  The convolutions get their
    templates; the other stages the auto-scheduler's rules (``auto=True``) or a plain
    scheme (``auto=False``).

    Parameters
    ----------
    outputs : Tensor or sequence of Tensor
        The tensors to schedule.
    s : Schedule, optional
        A schedule to complete (default: a new ``tc.create_schedule(outputs)``).
    vector : int, optional
        (``auto=False``) SIMD lanes for the innermost data-parallel axis.
    tile : int, optional
        (``auto=False``) How many rows of the next axis to unroll around it.
    inline : bool, optional
        (``auto=False``) Inline cheap elementwise helper stages.
    parallel : bool, optional
        (``auto=False``) Run the outer loop on the thread pool when the stage has at
        least ``min_parallel`` output elements.
    min_parallel : int, optional
        See ``parallel``.
    auto : bool, optional
        Give the stages without a template the auto-scheduler's rules
        (:mod:`tecomp.strategy.rules`); the default.
    target : str or Target, optional
        A CPU target (the host by default).

    Returns
    -------
    Schedule
        ``s``, or the new schedule.

    Examples
    --------
    >>> import tecomp as tc
    >>> from tecomp import autodiff as ad
    >>> X = tc.placeholder((8, 16), name="X"); W = tc.placeholder((16, 4), name="W")
    >>> k = tc.reduce_axis((0, 16), name="k")
    >>> Y = tc.compute((8, 4), lambda i, j: tc.sum(X[i, k] * W[k, j], axis=k), name="Y")
    >>> gX, gW = tc.gradient(Y, [X, W])
    >>> s = tc.schedule_backward([gX, gW])
    >>> f = tc.build(s, [X, W, gX, gW])
    """
    outs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
    if s is None:
        s = create_schedule([t.op for t in outs])
    mine = _reachable(outs)
    # convolutions (a convolution's data gradient is one or several, see nn.ops): the
    # forward conv schedules, before the loop below touches their padding or weights
    convs = [st for st in s.stages if _fresh(st, mine) and isinstance(st.op, ComputeOp)
             and st.op.reduce_axis and CONV_TAGS & set(st.op.tag.split(","))]
    for st in convs:
        schedule_conv2d_into(s, st.op.output(0), target)
    if auto:
        fresh = {id(st.op) for st in s.stages if isinstance(st.op, ComputeOp)
                 and _fresh(st, mine) and st not in convs}
        return schedule_stages(s, outs, cpu_model(target), only=fresh, parts=PART_TEMPLATES)
    for st in list(s.stages):
        op = st.op
        if not isinstance(op, ComputeOp) or not _fresh(st, mine):
            continue  # not ours, or already scheduled by someone else
        cons = s.consumers(st)
        if (inline and not st.is_output and not op.reduce_axis and _cheap(op.body) and cons
                and not any(c.op.reduce_axis for c in cons)):
            st.compute_inline()  # (not into a reduction: it would run once per tap there)
            continue
        if _wants_rfactor(st, vector):
            _schedule_rfactor(s, st, vector, parallel, min_parallel)
        else:
            _schedule_stage(st, vector, tile, parallel, min_parallel)
    return s


def _fresh(st, mine) -> bool:
    """A root stage that ``outputs`` need and that nobody scheduled yet."""
    return (st.attach_type == "root" and id(st.op) in mine and not st.relations
            and not st.iter_attrs)


def _wants_rfactor(st, vector) -> bool:
    """A reduction whose output rows are too short to vectorize (a convolution's weight
    gradient, ``[O, C, 3, 3]``) but whose innermost reduce axis is long: vectorize that."""
    op = st.op
    if not op.reduce_axis or not _dt.is_float(op.dtype) or _dt.is_storage_float(op.dtype):
        return False

    if _rules.reducer_of(op.body.combiner) is not _sum_reducer():
        return False
    last = _extent(op.axis[-1]) if op.axis else None
    r = _extent(op.reduce_axis[-1])
    return (last is None or last < vector) and r is not None and r >= 2 * vector


def _sum_reducer():
    return R.sum


def _schedule_rfactor(s, st, vector, parallel, min_parallel):
    op = st.op
    t = op.output(0)
    rlast = op.reduce_axis[-1]
    ro, ri = st.split(rlast, factor=vector)
    rf = s.rfactor(t, ri, factor_axis=len(op.axis))
    r = s[rf]
    axes = list(r.op.axis)
    lane = axes[-1]
    reds = [iv for iv in r.leaf_iter_vars if iv.kind == "reduce"]
    r.reorder(*(axes[:-1] + reds + [lane]))
    r.vectorize(lane)
    exts = [_extent(a) for a in op.axis]
    total = 1
    for e in exts:
        total *= e if e is not None else 1 << 20
    if parallel and total >= min_parallel // vector and axes[:-1]:
        first = axes[0]
        if exts[0] is not None and exts[0] < 4 and len(axes) > 2:
            first = r.fuse(axes[0], axes[1])
        r.parallel(first)
    if parallel and total >= min_parallel and op.axis:
        st.parallel(st.op.axis[0])


def _schedule_stage(st, vector, tile, parallel, min_parallel):
    op = st.op
    axes = list(op.axis)
    red = list(op.reduce_axis)
    if not axes:
        return
    exts = [_extent(a) for a in axes]
    outer = axes[:]
    inner = []
    vec_ok = (exts[-1] is not None and exts[-1] >= vector and _dt.is_float(op.dtype)
              and not _dt.is_storage_float(op.dtype))
    if vec_ok:
        last = outer.pop()
        lo, li = st.split(last, factor=vector)
        inner.append(li)
        outer.append(lo)
        # the row tile: the innermost other axis that the reduction's bounds test does
        # not use (so loop partitioning still peels the borders off whole blocks)
        cond_vars = set()
        if isinstance(op.body, Reduce):
            cond_vars = set(free_vars(op.body.condition))
        cand = [k for k in range(len(axes) - 1)
                if exts[k] is not None and exts[k] >= tile and axes[k].var not in cond_vars]
        if cand and red:
            k = cand[-1]
            prev = axes[k]
            pos = outer.index(prev)
            outer.pop(pos)
            to, ti = st.split(prev, factor=tile)
            outer.insert(pos, to)
            inner.insert(0, ti)
    order = outer + red + inner
    if len(order) > 1:
        st.reorder(*order)
    if vec_ok:
        st.vectorize(inner[-1])
        if len(inner) == 2:
            st.unroll(inner[0])
    if parallel:
        total = 1
        for e in exts:
            total *= e if e is not None else 1 << 20
        if total >= min_parallel and outer:
            first = outer[0]
            if exts[0] is not None and exts[0] < 4 and len(outer) >= 2:
                first = st.fuse(outer[0], outer[1])
            st.parallel(first)
