"""Schedule -> loop nest: iteration-variable values, bound inference, and the nests.

How bounds are found (``docs/bounds.md`` says the same for users):

1. Each stage's iteration variables get extents from the root down: a root axis runs
   over the region of it that is needed (below), ``split`` by ``f`` gives an inner
   extent ``f`` and an outer extent ``ceil(extent / f)``, ``fuse`` multiplies extents.
2. Every derived loop counter starts at 0; a root axis's value is
   ``min + (value derived from the leaf loop counters)``.
3. Stages are visited consumers first.  An output, or a stage computed at the root,
   needs its full shape.  A stage computed at ``(P, axis)`` needs, per dimension, the
   interval hull of the indices at which its consumers read it during ONE iteration of
   ``P``'s loop over ``axis``: the loop counters outside that loop (and ``axis`` itself)
   stay symbolic, every loop counter inside it (of ``P`` and of the consumers computed
   inside it) is relaxed over its range.  The hull is clipped to the tensor's shape.
4. Over-approximation: the hull is an interval per dimension (a strided read of every
   other element still gets the whole interval), reads guarded by ``if_then_else`` count
   as if they were always made (then clipped to the shape), and a buffer whose extent
   depends on outer loop counters is allocated at the largest extent over their ranges.
5. GPU tiles are not clipped: a ``shared`` or ``local`` stage computed inside a loop bound
   to blockIdx/threadIdx whose hull has a constant extent keeps that extent where the
   hull runs past the tensor's edge (a 64-row tile of a 100-row matrix stays 64 rows in
   the last block), so its loops and its buffer stay constant (unrollable, registers).
   Its iterations past the edge compute values no in-bounds result reads; they are
   guarded (``0 <= index < extent``) only when the stage reads memory that does not
   extend with it: a global buffer, or a tile that was clipped.
6. ``align_bounds(axis, f)`` (any target): the hull along ``axis`` is rounded out to
   multiples of ``f`` and not clipped; every read of the stage must provably stay inside
   the memory it reads (else ScheduleError), and the stage's nest is skipped where the
   region lies wholly past the edge.
"""
from __future__ import annotations

import dataclasses
import itertools
from typing import Dict, List, Optional, Tuple

from ..errors import InternalError, LowerError, ScheduleError, internal_assert
from ..ir import arith, dtype as _dt
from ..ir import op as _op
from ..ir.arith import Interval, prove
from ..ir.expr import (
    Add, GE, GT, LE, LT, And, Buffer, BufferLoad, Call, Cast, Const, Expr, IterVar, Max, Min, Not,
    Or, ProducerLoad, Range, Reduce, TupleCommReducer, Var, as_index, same_as,
)
from ..ir.functor import Mutator, Visitor, collect, free_vars, map_combiner, substitute, uses_var
from ..ir.names import display
from ..ir.simplify import simplify
from ..ir.stmt import (
    Allocate, AttrStmt, BufferStore, Evaluate, ExternCall, For, IfThenElse, LetStmt, ParamCheck, SeqStmt,
    TensorIntrinCall, seq,
)
from ..schedule.relations import covering_extent as _covering, reduce_in_order
from ..schedule.schedule import Fuse, Schedule, Split, Stage, prefetch_kind_problem
from ..ir.extern_sites import Site, register_site
from ..te.extern import ExternOp
from ..te.scatter import ScatterOp
from ..target import PER_THREAD_SCOPES
from ..te.range_check import symbolic_read_conditions
from ..te.scan import ScanOp
from ..te.tensor import ComputeOp, PlaceholderOp, Tensor, input_tensors_of
from .prefetch import PrefetchRequest
from .tensorize import declared_call, tensorize_call, unmasked_version
from ..te.tensor_intrin import tensor_intrin
from ..te.reduce import ZERO_WHERE
from .hoist_guards import conjuncts
from .vectorize import selects_only

#: whether a tuple reduction that only selects (an argmax), whose first point is an
#: element wherever it runs, starts its accumulator at that element and drops the
#: combine's tests that an index is the identity's (:meth:`LowerContext._seeded_selection`;
#: off: it starts at the identity; benchmarks/reductions.py --seed-off)
SEED_SELECTIONS = True

#: whether a float or integer ``max``/``min`` reduction whose reduce loops are all
#: unrolled, and whose first point is an element wherever its update runs, starts its
#: accumulator at that element and runs its update over the other points
#: (:meth:`LowerContext._first_point`, :func:`_without_first_point`): a max pooling
#: window's first tap a plain load, not ``max(-inf, x)`` (on x86 a ``vmaxps`` and its NaN
#: test a vector, which LLVM does not fold against the ``-inf``).  Exact: ``max(-inf, x)
#: == x`` for every ``x``, NaN too.  Off: the accumulator starts at the identity (an A/B
#: switch: ``benchmarks/pooling.py --ab SEED_FIRST_TAP``)
SEED_FIRST_TAP = True

#: ... and a pooling's sums (a stage of an op tagged ``pool_sum``: an average's window,
#: the local rows and lane trees the CPU template makes of it): one add a vector fewer,
#: where LLVM keeps ``0 + x`` (not ``x`` for ``x = -0.0``).  Exact but for a window of
#: -0.0 alone, whose sum is then -0.0 (IEEE's), not 0.  Off: from 0 (an A/B switch:
#: ``benchmarks/pooling.py --ab SEED_POOL_SUMS``; benchmarks/DECISIONS.md, "Pooling: a
#: small global plane unrolled, its sums seeded")
SEED_POOL_SUMS = True

#: whether a tuple reduction whose stage visits its reduce loops in their order combines
#: with its reducer's ``in_order`` result (an argmax's ties without index compares);
#: off: the general combine everywhere (benchmarks/reductions.py --new-off)
IN_ORDER_COMBINE = True


def _when_nonempty(extent: Expr) -> Expr:
    """``e`` for an extent ``max(e, 0)``: a loop body runs only where its extent is
    positive, so a bound proved for its iterations may assume ``e > 0`` (a region that
    lies past a tensor's edge is then empty, not ``[min, min - 1]`` clamped to zero)."""
    if isinstance(extent, Max) and isinstance(extent.b, Const) and extent.b.value == 0:
        return extent.a
    return extent


def _arith():
    return arith


def _simplify(e, ranges=None):
    return simplify(e, ranges)


def _ceildiv(a: Expr, b: Expr) -> Expr:
    return _simplify(_op.ceildiv(a, b))


def _range0(extent: Expr) -> Range:
    """``[0, extent)``, its bounds in ``extent``'s dtype."""
    return Range(Const(0, extent.dtype), extent)


def _in_dtype(e: Expr, dtype: str) -> Expr:
    """The index expression ``e`` as ``dtype`` (the dtype of the loop variable it bounds,
    which lowering chose to hold every value the loop takes)."""
    if e.dtype == dtype:
        return e
    if isinstance(e, Const):
        lo, hi = _dt.int_limits(dtype)
        internal_assert(lo <= int(e.value) <= hi, f"the index {e.value} does not fit the "
                        f"{dtype} variable that lowering gave it")
        return Const(int(e.value), dtype)
    return Cast(e, dtype)


def _narrowed(e: Expr, dtype: str) -> Expr:
    """``e`` as the narrower index ``dtype`` (a value known to fit it)."""
    if isinstance(e, Const):
        return _in_dtype(e, dtype)
    return Cast(e, dtype)


def _as_axis_dtype(e: Expr, dtype: str) -> Expr:
    """The index ``e`` as ``dtype``, the dtype of the axis it binds: an index in bounds
    fits both (one out of bounds reads an undefined value either way)."""
    if isinstance(e, Const) and e.dtype != dtype:
        lo, hi = _dt.int_limits(dtype)
        if not lo <= int(e.value) <= hi:
            return Cast(e, dtype)
    return _in_dtype(e, dtype)


class _InlineExpander(Mutator):
    """Replace reads of inlined stages by their bodies (recursively)."""

    def __init__(self, ctx):
        self.ctx = ctx

    def visit_ProducerLoad(self, e):
        idx = tuple(self.visit(i) for i in e.indices)
        st = self.ctx.stage_of_tensor(e.producer)
        if st is not None and st.attach_type == "inline":
            op = st.op
            # an int64 consumer's index into an int32 producer, or the reverse
            body = substitute(op.bodies[e.producer.value_index],
                              {iv.var: _as_axis_dtype(x, iv.var.dtype)
                               for iv, x in zip(op.axis, idx)})
            return self.visit(body)
        if all(a is b for a, b in zip(idx, e.indices)):
            return e
        return ProducerLoad(e.producer, idx, e.dtype)

    def visit_Reduce(self, e):
        src, cond = self.visit(e.source), self.visit(e.condition)
        comb = map_combiner(e.combiner, self.visit)
        if src is e.source and cond is e.condition and comb is e.combiner:
            return e
        return Reduce(comb, src, e.axis, cond, e.dtype, e.value_index)


class _StagesOf:
    """The ``stage_of_tensor`` of :class:`_InlineExpander`, for a schedule alone."""

    def __init__(self, sch: Schedule):
        self.sch = sch

    def stage_of_tensor(self, t: Tensor):
        return self.sch._stage_of.get(id(t.op))


def expand_inlined(sch: Schedule, e: Expr) -> Expr:
    """``e`` (a body of a stage of ``sch``) with every read of a stage that ``sch``
    inlines replaced by that stage's body, as lowering computes it: what the stage reads
    in the end (the auto-scheduler's rules look through inlined stages with it)."""
    return _InlineExpander(_StagesOf(sch)).visit(e)


class StageInfo:
    """What lowering learns about one (non-inlined) stage."""

    def __init__(self, stage: Stage, bodies: Tuple[Expr, ...]):
        self.stage = stage
        self.bodies = bodies  # one per output, inlined producers expanded
        self.extent: Dict[IterVar, Expr] = {}
        self.value: Dict[IterVar, Expr] = {}  # root and derived vars, in leaf loop counters
        self.root_min: Dict[IterVar, Expr] = {}
        self.guards: List[Expr] = []
        self.buffers: List[Buffer] = []  # one per output
        # per dimension, the needed extent before clipping to the shape (compute_at only):
        # often a constant even where the clipped extent depends on outer loops
        self.raw_extent: List[Expr] = []
        # per dimension, (lo, hi) of that needed region before clipping (compute_at only)
        self.needed: List[tuple] = []
        # GPU tiles past the tensor's edge (rule 5): dimension -> (lo, hi) of the needed
        # region, which the loops cover unclipped
        self.unclipped: Dict[int, tuple] = {}
        # align_bounds (rule 6): dimension -> (lo, hi) of the aligned, unclipped region,
        # and the condition that the region meets the tensor (the stage is skipped where
        # it does not)
        self.aligned: Dict[int, tuple] = {}
        self.region_guard: List[Expr] = []

    @property
    def body(self) -> Expr:
        """The body of a single-output stage."""
        internal_assert(len(self.bodies) == 1, f"stage {self.name} has {len(self.bodies)} "
                        "outputs; this step takes one body")
        return self.bodies[0]

    @property
    def buffer(self) -> Buffer:
        """The buffer of a single-output stage (of output 0 of the others)."""
        return self.buffers[0]

    def loads(self) -> list:
        """Tensors the stage's bodies read, in order of first read (an extern stage's
        inputs)."""
        if isinstance(self.stage.op, (ExternOp, ScatterOp)):
            return list(self.stage.op.input_tensors)
        out = []
        for b in self.bodies:
            out += [t for t in _loads_of(b) if not any(t is x for x in out)]
        return out

    @property
    def covers_reads(self) -> bool:
        """Whether the buffer holds every element its consumers' loops read (no dimension
        was clipped to the tensor's shape)."""
        return all(_same(e, r) or d in self.unclipped or d in self.aligned for d, (e, r) in enumerate(
            zip((self.extent[iv] for iv in self.stage.op.axis), self.raw_extent)))

    @property
    def name(self):
        return self.stage.name


class LowerContext:
    def __init__(self, sch: Schedule, args: list):
        self.sch = sch
        self.stages = [s for s in sch.stages if s.attach_type != "inline"]
        for st in sch.stages:
            if st.attach_type == "inline" and st.storage_perm is not None:
                raise ScheduleError(
                    f"storage_order on stage {st.name}: the stage is inlined (compute_inline), "
                    "so it has no buffer to lay out; drop the storage_order or the "
                    "compute_inline")
        expander = _InlineExpander(self)
        self.info: Dict[Stage, StageInfo] = {}
        for st in self.stages:
            self.info[st] = StageInfo(st, tuple(expander.visit(b) for b in st.op.bodies))
        self.arg_buffers: Dict[tuple, Buffer] = {}   # _key(tensor) -> its buffer
        #: id(state placeholder) -> the scan stage whose output it stands for
        self.scan_of_state: Dict[int, Stage] = {
            id(st.op.state.op): st for st in self.stages if isinstance(st.op, ScanOp)}
        self.params = []
        #: stage -> its _seeded_selection (None: not seeded), decided once
        self._seeds: Dict[Stage, Optional[tuple]] = {}
        #: (expr, use): splits with disable_predication that must divide (expr >= 0)
        self.unpredicated: List[tuple] = []
        self._bind_args(args)
        #: Stage._lockstep: per stage its factors' buffer; per (host stage, loop) the
        #: state's initialisation, emitted before that loop
        self.lockstep_factors: Dict[Stage, Buffer] = {}
        self._before_loop: Dict[tuple, list] = {}
        #: (Stage._lockstep with fragments) per stage its row tiles by name; per (host
        #: stage, loop) the state's stores, emitted after that loop
        self.lockstep_fragments: Dict[Stage, Dict[str, Buffer]] = {}
        self._after_loop: Dict[tuple, list] = {}
        self.readers: Dict[Stage, List[Stage]] = {st: [] for st in self.stages}
        for st in self.stages:
            for t in self.info[st].loads():
                p = self.stage_of_tensor(t)
                if p is not None and p in self.readers and st not in self.readers[p]:
                    self.readers[p].append(st)

    def stage_of_tensor(self, t: Tensor):
        return self.sch._stage_of.get(id(t.op))

    # -- conditions on the arguments ---------------------------------------------------
    def param_checks(self) -> tuple:
        """The :class:`~tecomp.ir.stmt.ParamCheck` conditions on the arguments (kept in
        ``PrimFunc.attrs["param_checks"]``): every extent of a stage (its axes and reduce
        axes) that depends on a variable is ``>= 0``, every split factor (or ``nparts``)
        that is not a constant is ``>= 1``, every read of a compute whose range depends
        on the arguments stays inside the tensor it reads.  A condition that already holds because the
        variables of the buffer parameters' shapes are never negative is left out, so
        is an extent that is exactly such a variable."""
        nonneg = {x: Interval(0, None) for p in self.params if isinstance(p, Buffer)
                  for x in p.shape if isinstance(x, Var)}
        found: Dict[tuple, list] = {}

        def need(e: Expr, lower: int, use: str, fix: str = "fix the shape or the split"):
            e = _simplify(e)
            if isinstance(e, Const) and e.value < lower:  # e.g. a shape (n - n - 1,)
                raise LowerError(f"{use} is {e.value}; it must be >= {lower}: {fix}")
            if isinstance(e, Const) or prove(GE(e, Const(lower, e.dtype)), nonneg):
                return
            uses = found.setdefault((e, lower), [])
            if use not in uses:
                uses.append(use)

        for st in self.sch.stages:
            for iv in st.op.axis:
                need(iv.dom.extent, 0, f"the extent of axis {iv.var.name} of stage {st.name}")
            for iv in getattr(st.op, "reduce_axis", ()):
                need(iv.dom.extent, 0, f"the extent of reduce axis {iv.var.name} of stage "
                                       f"{st.name}")
            if st.attach_type == "inline":
                continue
            for rel in st.relations:
                if isinstance(rel, Split):
                    what = "the split factor" if rel.factor is not None else \
                        "the nparts of the split"
                    need(rel.factor if rel.factor is not None else rel.nparts, 1,
                         f"{what} of axis {rel.parent.var.name} of stage {st.name}")
        for e, use in self.unpredicated:
            need(e, 0, use)
        # reads whose range depends on the arguments (``A[i + m]``; ``A[i]`` over 8 rows
        # of an ``A`` of ``n``): inside the tensor they read at every iteration of the
        # compute that makes them, or the call is refused before the kernel touches
        # memory outside an argument (a scan's state is read before its start by design)
        known = {p for p in self.params if isinstance(p, Var)} | set(nonneg)
        states = [st.op.state for st in self.sch.stages if isinstance(st.op, ScanOp)]
        seen = set()
        for st in self.sch.stages:
            for op in (st.origin_op, st.op):
                if id(op) in seen or not getattr(op, "user_reads", False):
                    continue
                seen.add(id(op))
                for e, use in symbolic_read_conditions(op, skip=states, ranges=nonneg):
                    if all(v in known for v in free_vars(e)):
                        need(e, 0, use, "fix the index")
        return tuple(ParamCheck(e, lower, tuple(uses)) for (e, lower), uses in found.items())

    def written_once(self) -> tuple:
        """The buffer parameters whose every element the function stores exactly once (kept
        in ``PrimFunc.attrs["written_once"]``, for :func:`tecomp.lower.in_place.in_place_pairs`):
        the outputs of the compute stages without a reduction.  A stage in the argument
        list is computed at the root, over its whole shape, and its loop nest (splits,
        fuses and reorders of its axes, imperfect splits guarded) visits each point of
        the shape once."""
        out = []
        for st in self.stages:
            op = st.op
            if type(op) is not ComputeOp or op.reduce_axis or st.attach_type != "root" \
                    or st.tensorized is not None \
                    or any(isinstance(b, Reduce) for b in op.bodies):
                continue
            for t in st.origin_op._outs:
                b = self.arg_buffers.get(_key(t))
                if b is not None:
                    out.append(b)
        return tuple(out)

    # -- arguments ---------------------------------------------------------------------
    def _bind_args(self, args):
        seen = set()
        for pos, a in enumerate(args):
            if isinstance(a, Tensor):
                if id(a) in seen:
                    raise LowerError(f"argument {pos} ({a.name}) appears twice in the argument list")
                seen.add(id(a))
                st = self.stage_of_tensor(a)
                # (a Stage._written_at stage writes it in full from inside a kernel)
                if st is not None and st.attach_type != "root" and st.written is None:
                    raise LowerError(
                        f"argument {pos}: tensor {a.name} is {'inlined' if st.attach_type == 'inline' else 'computed at ' + st.attach_stage.name}; "
                        f"a tensor in the argument list is written in full: compute_root() it or "
                        "drop it from the arguments")
                if st is None and not isinstance(a.op, PlaceholderOp):
                    raise LowerError(f"argument {pos}: tensor {a.name} is not part of this schedule")
                if id(a.op) in self.scan_of_state:
                    sc = self.scan_of_state[id(a.op)].name
                    raise LowerError(
                        f"argument {pos}: {a.name} is the state of the scan {sc}, which stands for "
                        f"{sc}'s own output as its update reads it; pass {sc} instead")
                buf = Buffer(a.name, tuple(a.shape), a.dtype)
                self.arg_buffers[_key(a)] = buf
                self.params.append(buf)
            elif isinstance(a, Var):
                if a in seen:
                    raise LowerError(f"argument {pos} ({a.name}) appears twice in the argument list")
                seen.add(a)
                self.params.append(a)
            else:
                raise LowerError(
                    f"argument {pos} is {a!r}; the argument list holds the input and output "
                    "tensors (placeholders and computes) and any scalar tc.var parameters")
        for st in self.stages:
            outs = st.origin_op._outs
            if st.is_output and not any(_key(t) in self.arg_buffers for t in outs):
                raise LowerError(
                    f"output {' and '.join(t.name for t in outs)} is not in the argument list; "
                    "add it (the caller passes the array it is written to)")
            for t in st.op.input_tensors:
                if isinstance(t.op, PlaceholderOp) and _key(t) not in self.arg_buffers \
                        and id(t.op) not in self.scan_of_state:
                    raise LowerError(f"tensor {t.name} is an input of stage {st.name} but is not "
                                     "in the argument list; add it")

    def buffer_of(self, t: Tensor):
        b = self.arg_buffers.get(_key(t))
        if b is not None:
            return b, None
        sst = self.scan_of_state.get(id(t.op))
        if sst is not None:   # a scan's state: the scan's own output, as computed so far
            return self.info[sst].buffer, None
        st = self.stage_of_tensor(t)
        if st is None or st not in self.info:
            raise InternalError(f"no buffer for tensor {t.name}")
        inf = self.info[st]
        return inf.buffers[t.value_index], inf

    # -- 1+2: extents and values ---------------------------------------------------------
    def infer_loops(self, st: Stage, root_ranges: Dict[IterVar, Range]):
        inf = self.info[st]
        for iv in list(st.op.axis) + list(st.op.reduce_axis):
            r = root_ranges[iv]
            inf.root_min[iv] = r.min
            inf.extent[iv] = r.extent
        self._derive_loops(st)
        # a reduction whose range reads an output index (a triangular sum over range(n)):
        # the index there is its value in this stage's loops, which a split of the output
        # axis or a region computed at a consumer's loop (a loop from 0) make differ from
        # the loop counter of the same name
        vmap = {iv.var: self.root_value(st, iv) for iv in st.op.axis}
        moved = False
        for iv in st.op.reduce_axis:
            mn, ext = substitute(inf.root_min[iv], vmap), substitute(inf.extent[iv], vmap)
            if mn is not inf.root_min[iv] or ext is not inf.extent[iv]:
                inf.root_min[iv], inf.extent[iv], moved = _simplify(mn), _simplify(ext), True
        if moved:   # (the output axes' loops do not depend on the reduction's)
            self._derive_loops(st)

    def _derive_loops(self, st: Stage):
        """The extents of the loops ``st``'s relations derive and the values of its root
        axes in its leaf loop counters (``inf.extent``, ``inf.value``, ``inf.guards``),
        from the extents of its root axes."""
        inf = self.info[st]
        inf.guards = []
        for rel in st.relations:
            # every extent in the dtype of its axis' variable (int64 where the schedule
            # found that int32 cannot hold it: Stage.split/fuse)
            if isinstance(rel, Split):
                dt = rel.inner.var.dtype
                ext = _in_dtype(inf.extent[rel.parent], dt)
                if rel.factor is not None:
                    f = _in_dtype(rel.factor, dt)
                    inf.extent[rel.inner] = _covering(f, ext)
                    inf.extent[rel.outer] = _ceildiv(ext, f)
                else:
                    f = _in_dtype(rel.nparts, dt)
                    inf.extent[rel.outer] = _covering(f, ext)
                    inf.extent[rel.inner] = _ceildiv(ext, f)
            elif isinstance(rel, Fuse):
                dt = rel.fused.var.dtype
                inf.extent[rel.fused] = _simplify(_op.index_mul(
                    _in_dtype(inf.extent[rel.outer], dt), _in_dtype(inf.extent[rel.inner], dt)))
        for iv in st.leaf_iter_vars:
            inf.value[iv] = iv.var
        ranges = self.leaf_ranges(st)
        for rel in reversed(st.relations):
            if isinstance(rel, Split):
                f = inf.extent[rel.inner]
                val = _op.add(_op.mul(inf.value[rel.outer], f), inf.value[rel.inner])
                inf.value[rel.parent] = _simplify(val, ranges)
                cover = _op.mul(inf.extent[rel.outer], f)
                if not _divides(cover, inf.extent[rel.parent]):
                    if rel.disable_predication:
                        self._unpredicated_split(st, rel, inf.extent[rel.parent], f)
                    else:
                        inf.guards.append(_op.compare(LT, inf.value[rel.parent],
                                                      inf.extent[rel.parent]))
            elif isinstance(rel, Fuse):
                ie = inf.extent[rel.inner]
                inf.value[rel.outer] = _simplify(_op.floordiv(inf.value[rel.fused], ie), ranges)
                inf.value[rel.inner] = _simplify(_op.floormod(inf.value[rel.fused], ie), ranges)
        inf.guards = [_simplify(g, ranges) for g in inf.guards]
        inf.guards = [g for g in inf.guards if not (isinstance(g, Const) and g.value is True)]
        # a root axis' value is computed in the dtype of the loops it derives from (int64
        # where they need it); the body sees it as its own variable's dtype, which holds
        # every value it takes where the guards hold
        for iv in list(st.op.axis) + list(st.op.reduce_axis):
            v = inf.value.get(iv)
            if v is not None and v.dtype != iv.var.dtype:
                inf.value[iv] = _simplify(_narrowed(v, iv.var.dtype), ranges)

    def _unpredicated_split(self, st: Stage, rel, ext: Expr, f: Expr) -> None:
        """A split with ``disable_predication`` that is not known to divide its axis: a
        ScheduleError for a constant extent, else a condition on the arguments (the
        extent a multiple of the inner extent ``f``) checked at every call."""
        what = (f"split of axis {rel.parent.var.name} of stage {st.name} with "
                f"disable_predication=True")
        ext, f = _simplify(ext), _simplify(f)
        if isinstance(ext, Const) and isinstance(f, Const):
            raise ScheduleError(
                f"{what}: the inner extent {f.value} does not divide the axis' extent "
                f"{ext.value}; the last iterations would run past the axis (outside the "
                f"arrays); drop disable_predication or split by a divisor of {ext.value}")

        known = {x for p in self.params for x in (
            [p] if isinstance(p, Var) else [v for e in p.shape for v in free_vars(e)])}
        if not all(v in known for v in free_vars(ext) + free_vars(f)):
            raise ScheduleError(
                f"{what}: its extent {ext} is not known when the kernel is called (it "
                f"depends on a loop), so that the split divides it cannot be checked; drop "
                f"disable_predication")
        self.unpredicated.append((_op.sub(Const(0, ext.dtype), _op.floormod(ext, f)),
                                  f"{what} (its extent {ext} must be a multiple of {f})"))

    def leaf_ranges(self, st: Stage) -> Dict[Var, Range]:
        inf = self.info[st]
        return {iv.var: _range0(inf.extent[iv]) for iv in st.leaf_iter_vars
                if iv in inf.extent}

    def root_value(self, st: Stage, iv: IterVar) -> Expr:
        """The value of root axis ``iv`` of ``st`` in its leaf loop counters (absolute)."""
        inf = self.info[st]
        v = _op.add(inf.root_min[iv], inf.value[iv])
        # (a region's bounds may be int64 where the consumer's loops are; the value is an
        # index of iv's own domain, which its dtype holds)
        if v.dtype != iv.var.dtype and _dt.bits(iv.var.dtype) < _dt.bits(v.dtype):
            v = _narrowed(v, iv.var.dtype)
        return v

    # -- 3: bound inference -------------------------------------------------------------
    def infer_bounds(self):
        self._check_prefetch_axes()
        for st in self.stages:
            tgt, iv = st.attach_stage, st.attach_ivar
            if st.attach_type == "scope" and iv not in tgt.leaf_iter_vars:
                raise ScheduleError(
                    f"compute_at of {st.name} at {tgt.name}.{iv.name}: axis {iv.name} is no "
                    f"longer a loop of stage {tgt.name} (it was split or fused after compute_at; "
                    f"its loops are now {', '.join(x.name for x in tgt.leaf_iter_vars)}); call "
                    f"compute_at with one of those axes")
        for st in reversed(self.stages):
            op = st.op
            ranges = {}
            for r, iv in enumerate(op.reduce_axis):
                ranges[iv] = iv.dom
                f = st.reduce_aligns.get(r)
                if f is not None:   # align_bounds on a reduce axis: its extent rounded up
                    ext = iv.dom.extent
                    ranges[iv] = Range(iv.dom.min, Const(-(-ext.value // f) * f, ext.dtype))
            if st.reduce_range is not None:
                # (Stage._reduce_range) a block's part of the reduction
                iv = op.reduce_axis[0]
                lo, n = st.reduce_range
                ranges[iv] = Range(_in_dtype(lo, iv.var.dtype), Const(n, iv.var.dtype))
            if st.lockstep is not None:
                # (Stage._lockstep) the elements of the host loop's current step
                iv, dt = op.reduce_axis[0], op.reduce_axis[0].var.dtype
                ko, n = st.attach_ivar.var, Const(st.lockstep[0], dt)
                ranges[iv] = Range(_op.add(iv.dom.min, _op.mul(
                    ko if ko.dtype == dt else Cast(ko, dt), n)), n)
            region = st.atomic if st.atomic is not None else st.written
            if region is not None:
                # (Stage._atomic_add, Stage._written_at) the region the template gives,
                # added (stored) into the whole
                inf = self.info[st]
                for iv, (lo, n) in zip(op.axis, region):
                    dt = iv.var.dtype
                    lo = _in_dtype(lo, dt) if isinstance(lo, Expr) else Const(int(lo), dt)
                    ranges[iv] = Range(lo, Const(int(n), dt))
                    inf.raw_extent.append(Const(int(n), dt))
                    inf.needed.append((lo, _op.add(lo, Const(int(n) - 1, dt))))
                    if st.written is not None:   # (guarded at the tensor's edge)
                        inf.unclipped[len(inf.needed) - 1] = inf.needed[-1]
            elif st.attach_type == "scope":
                needed = self._needed_region(st)
                for iv, r in zip(op.axis, needed):
                    ranges[iv] = r
            elif st.bound_aligns:
                ax = op.axis[min(st.bound_aligns)]
                raise ScheduleError(
                    f"align_bounds on stage {st.name}, axis {ax.name}: the stage is computed at "
                    f"the root, where its region is its whole shape; compute_at it at a loop of "
                    f"a consumer, where the region one iteration needs is rounded out")
            else:
                for iv in op.axis:
                    ranges[iv] = iv.dom
            self.infer_loops(st, ranges)
            self._check_loop_kinds(st)
            self._check_shared_reduction(st)
            self._make_buffer(st)
            if st.lockstep is not None:
                self._check_lockstep(st)
            elif st.atomic is not None:
                self._check_atomic(st)
            elif st.written is not None:
                self._check_written(st)
            elif self._stored_root(st):
                self._check_store_root(st)
        for st in self.stages:
            self._add_domain_guards(st)
            if self.info[st].aligned:
                self._check_aligned_reads(st)
            if st.reduce_aligns:
                self._check_reduce_aligned_reads(st)

    @staticmethod
    def _stored_root(st: Stage) -> bool:
        """A stage computed at a loop whose buffer is whole at the root (``store_root``):
        indexed as its tensor is, not from the start of its region."""
        return st.stored_root and st.attach_type == "scope"

    def _relative(self, st: Stage) -> bool:
        """Whether ``st``'s buffer holds its region from its start (a stage computed at a
        loop, not ``store_root``)."""
        return st.attach_type == "scope" and not st.stored_root

    def _check_store_root(self, st: Stage):
        """``store_root``: a global buffer on the CPU, no ``align_bounds``, no two
        iterations of an enclosing parallel loop computing the same element, and every
        element that a stage outside the loop nest reads computed by some iteration."""
        what = f"store_root on stage {st.name}"
        if st.scope != "global":
            raise ScheduleError(f"{what}: its scope is {st.scope}; a buffer kept at the root is "
                                "global: drop set_scope, or store_root")
        if st.bound_aligns or self._in_gpu_kernel(st) or self._thread_relax(st):
            why = ("align_bounds computes past the region its consumers read" if st.bound_aligns
                   else "it is computed inside a GPU kernel")
            raise ScheduleError(f"{what}: {why}; compute it at the root, or drop store_root")
        outer = self._outer_ranges(st)
        loops = []   # the loops around the attach point, innermost first
        x, axis = st.attach_stage, st.attach_ivar
        while x is not None:
            leaves = x.leaf_iter_vars
            for iv in reversed(leaves[:leaves.index(axis) + 1]):
                loops.append((x, iv))
            x, axis = x.attach_stage, x.attach_ivar
        for k, (x, iv) in enumerate(loops):
            a = x.iter_attrs.get(iv)
            if a is not None and a.kind == "parallel" and \
                    not self._disjoint_per_thread(st, iv.var, [v.var for _, v in loops[:k]], outer):
                raise ScheduleError(
                    f"{what}: iterations of the parallel loop {x.name}.{iv.name} may compute "
                    f"overlapping parts of {st.name} (two threads writing one element of "
                    f"its buffer); compute it at a loop inside which each iteration's part "
                    "is its own, drop parallel there, or drop store_root")
        self._check_store_root_covers(st, [v.var for _, v in loops], outer)

    def _check_lockstep(self, st: Stage) -> None:
        """``Stage._lockstep``: computed at the first reduction loop of a reduction
        tensorized onto an ``mma.accumulator`` inside that loop (the accumulator it
        rescales at each step), whose steps cover its own reduction; its state's axes
        the accumulator's first ones; its own reduction loop innermost and whole.  Makes
        the buffer of its factors."""
        host, ko = st.attach_stage, st.attach_ivar
        what = f"_lockstep of {st.name} at {host.name}.{ko.name}"
        leaves = host.leaf_iter_vars
        red = [iv for iv in leaves if iv.kind == "reduce"]
        hinf = self.info[host]
        steps, iv = st.lockstep[0], st.op.reduce_axis[0]
        ok = (host.tensorized is not None and host.scope == "mma.accumulator" and red
              and red[0] is ko and host.tensorized[0] in leaves
              and leaves.index(host.tensorized[0]) > leaves.index(ko)
              and st.leaf_iter_vars[-1] is iv
              and len(st.op.axis) == len(host.op.axis) - 1
              and all(_same(a.dom.extent, b.dom.extent)
                      for a, b in zip(st.op.axis, host.op.axis))
              and isinstance(hinf.extent[ko], Const) and isinstance(iv.dom.extent, Const)
              and hinf.extent[ko].value * steps == iv.dom.extent.value)
        if not ok:   # (only the FlashAttention template sets it)
            raise InternalError(f"{what}: not the form the online softmax takes (a tecomp "
                                "bug: the FlashAttention template made it)")
        spec = st.lockstep[2]
        if spec is not None:
            self._check_lockstep_fragments(st, spec, what)
            return
        shape = tuple(st.op.shape)
        self.lockstep_factors[st] = Buffer(f"{st.name}.rescale", shape, "float32")

    def _check_lockstep_fragments(self, st: Stage, spec: dict, what: str) -> None:
        """``Stage._lockstep`` with ``fragments``: its one input an ``mma.accumulator``
        stage computed at the same loop (whose tiles the step reads), its host's
        accumulator of 16-row tiles; makes the row tiles (``[rows, 16]`` fragments, the
        accumulator's rows)."""
        host, ko = st.attach_stage, st.attach_ivar
        ins = st.op.input_tensors
        x = self.stage_of_tensor(ins[0]) if len(ins) == 1 else None
        acc = self.info[host].buffer
        rows = acc.shape[-2]
        if x is None or x.scope != "mma.accumulator" or x.attach_stage is not host or \
                x.attach_ivar is not ko or not isinstance(rows, Const) or rows.value % 16 or \
                len(spec["state"]) != len(st.op.bodies):
            raise InternalError(f"{what}: not the form the online softmax in fragments takes "
                                "(a tecomp bug: the FlashAttention template made it)")
        names = list(spec["state"]) + [out for _, ops in spec["step"] for _, out, _ in ops]
        # (the tiles spec["columns"] names: one per 16 x 16 tile of x, [rows, the step])
        cols = Const(st.lockstep[0], rows.dtype)
        self.lockstep_fragments[st] = {
            n: Buffer(f"{st.name}.{n}", (rows, cols if n in spec.get("columns", ())
                                         else Const(16, rows.dtype)), "float32",
                      scope="mma.accumulator") for n in dict.fromkeys(names)}

    def _check_atomic(self, st: Stage) -> None:
        """``Stage._atomic_add``: a float32 global copy of a tensorized reduction, itself
        tensorized with ``cuda.mma_store_f32`` (lowered as its atomic twin), inside a GPU
        kernel."""
        what = f"_atomic_add of {st.name}"
        ok = (st.scope == "global" and st.op.dtype == "float32" and st.tensorized is not None
              and st.tensorized[1].name == "cuda.mma_store_f32" and self._in_gpu_kernel(st))
        if not ok:   # (only the FlashAttention template sets it)
            raise InternalError(f"{what}: not the form of FlashAttention-2's dq (a tecomp "
                                "bug: the FlashAttention template made it)")

    def _check_written(self, st: Stage) -> None:
        """``Stage._written_at``: a global buffer written from inside a GPU kernel, or from
        inside a CPU loop nest (one with no loop bound to the GPU's blocks or threads: the
        CPU attention template's tasks)."""
        root = _root_of(st)
        cpu = not any(_thread_tag(x, iv) for x in self.stages if _root_of(x) is root
                      for iv in x.leaf_iter_vars)
        if st.scope != "global" or not (cpu or self._in_gpu_kernel(st)):
            raise InternalError(f"_written_at of {st.name}: not a global buffer written in a "
                                "GPU kernel or a CPU loop nest (a tecomp bug: the attention "
                                "templates made it)")

    def _atomic_zero(self, st: Stage):
        """The kernel that sets an ``_atomic_add`` stage's buffer to 0 before the kernel
        that adds into it: 256 threads a block, an element each."""
        buf = self.info[st].buffer
        n = _prod(int(e.value) for e in buf.shape)
        dt = "int64" if n >= 2**31 else "int32"
        bx, tx = Var(f"{st.name}.zero.b", dt), Var(f"{st.name}.zero.t", dt)
        flat = _op.add(_op.mul(bx, Const(256, dt)), tx)
        idx, rest = [], flat
        for e in reversed(buf.shape):
            idx.append(_op.floormod(rest, Const(int(e.value), dt)))
            rest = _op.floordiv(rest, Const(int(e.value), dt))
        store = BufferStore(buf, Const(0.0, "float32"),
                            tuple(_simplify(_narrowed(x, "int32") if dt != "int32" else x)
                                  for x in reversed(idx)))
        body = IfThenElse(_op.compare(LT, flat, Const(n, dt)), store)
        body = For(tx, Const(0, dt), Const(256, dt), "thread", body, "threadIdx.x")
        return For(bx, Const(0, dt), Const(-(-n // 256), dt), "thread", body, "blockIdx.x")

    def _lockstep_nest(self, st: Stage, bufs, comb, update, init, store_idx, leaves, p, dguards):
        """A ``_lockstep`` stage's step at its host's loop: per element of its region the
        state before the step, the step's elements combined in, and the factor
        ``rescale(old, new)`` stored; then a barrier (the state and the factors are
        global: the threads that read them are not the ones that wrote them).  Its
        initialisation is kept for the host to emit before that loop."""
        inf = self.info[st]
        olds = tuple(Var(f"{b.name}.old", b.dtype) for b in bufs)
        curs = tuple(BufferLoad(b, store_idx, b.dtype) for b in bufs)
        factor = st.lockstep[1](olds, curs)
        body = seq(self._loops(st, leaves[p:], _guard(update, inf.guards)),
                   BufferStore(self.lockstep_factors[st], factor, store_idx))
        for o, c in reversed(list(zip(olds, curs))):
            body = LetStmt(o, c, body)
        key = (st.attach_stage, st.attach_ivar)
        self._before_loop.setdefault(key, []).append(
            self._loops(st, leaves[:p], _guard(init, dguards), attach=False))
        return seq(self._loops(st, leaves[:p], _guard(body, dguards)), _barrier())

    def _rescale_nest(self, st: Stage, lock: Stage, tic, leaves, t: int, p: int):
        """The accumulator of the tensorized reduction ``st`` multiplied, at its step loop
        ``leaves[p]``, by the factors of the ``_lockstep`` stage ``lock`` of its rows
        (``cuda.mma_scale_rows_f32`` per tile, looped over the accumulator's tiles; with
        fragments, by the factors' row tile, ``cuda.mma_mul_f32``)."""
        outside = [iv for iv in leaves[p + 1:t] if iv.kind != "reduce"]
        if lock in self.lockstep_fragments:
            acc = (tic.buffers[0], tic.base(0), tic.coefs[0])
            fac = self._row_tile(lock, lock.lockstep[2]["factor"], tic.base(0)[-2])
            call = declared_call(tensor_intrin("cuda.mma_mul_f32"), st.name, acc,
                                 {"a": acc, "b": fac})
            return self._loops(st, outside, call, attach=False)
        intrin = tensor_intrin("cuda.mma_scale_rows_f32")
        region = leaves[t:]
        zero = {iv.var: Const(0, iv.var.dtype) for iv in region}
        ranges = self.leaf_ranges(st)
        rows = [_simplify(substitute(self.root_value(st, iv), zero), ranges)
                for iv in st.op.axis[:len(lock.op.axis)]]
        fac = self.lockstep_factors[lock]
        nd = len(fac.shape)
        coefs = (tic.coefs[0], tic.coefs[0],
                 (tuple(int(d == nd - 1) for d in range(nd)), (0,) * nd))
        buf = tic.buffers[0]
        idx = tuple(self.info[st].value[iv] for iv in st.op.axis)
        fallback = self._loops(st, [iv for iv in region if iv.kind != "reduce"], BufferStore(
            buf, _op.mul(BufferLoad(buf, idx, buf.dtype), BufferLoad(
                fac, tuple(self.root_value(st, iv) for iv in st.op.axis[:nd]), fac.dtype)),
            idx), attach=False)
        call = TensorIntrinCall(intrin, st.name, (buf, buf, fac),
                                tuple(tic.base(0)) * 2 + tuple(rows), coefs, False, fallback)
        return self._loops(st, outside, call, attach=False)

    def _row_tile(self, st: Stage, name: str, row, col=0) -> tuple:
        """The region ``(buffer, base, coefs)`` of the 16 x 16 tile ``name`` of the
        ``_lockstep`` stage ``st`` (fragments) whose first row is ``row`` (a row tile; or
        of a tile of ``spec["columns"]``, at column ``col``)."""
        buf = self.lockstep_fragments[st][name]
        dt = buf.shape[0].dtype
        return buf, (_in_dtype(row, dt), _in_dtype(col, dt) if isinstance(col, Expr)
                     else Const(col, dt)), ((1, 0), (0, 1))

    @staticmethod
    def _tile(buf: Buffer, row: int, col: int) -> tuple:
        """The region of the 16 x 16 tile at ``(row, col)`` of a fragment buffer's last two
        dimensions (its others 0)."""
        nd = len(buf.shape)
        dt = buf.shape[-1].dtype
        base = tuple(Const(0, dt) for _ in range(nd - 2)) + (Const(row, dt), Const(col, dt))
        return buf, base, tuple(tuple(int(e == nd - 2 + d) for e in range(nd)) for d in (0, 1))

    def _lockstep_fragment_step(self, st: Stage):
        """A ``_lockstep`` stage with fragments at its host's loop: on each 16-row tile of
        the state, the step's intrinsics (a group ``per_column`` once per 16 x 16 tile of
        the input ``x``).  Its initialisation (the state's fills) is kept for the host to
        emit before that loop, and the state's stores into the stage's buffers (then a
        barrier: the threads that read them are not the lanes that wrote them) after it."""
        spec, tiles = st.lockstep[2], self.lockstep_fragments[st]
        x = self.info[self.stage_of_tensor(st.op.input_tensors[0])].buffer
        rows = int(tiles[spec["state"][0]].shape[0].value)
        cols = int(x.shape[-1].value)
        host, ko = st.attach_stage, st.attach_ivar
        hl = host.leaf_iter_vars
        zero = {iv.var: Const(0, iv.var.dtype) for iv in hl[hl.index(ko):]}
        first = [_simplify(substitute(self.root_value(host, iv), zero), self.leaf_ranges(host))
                 for iv in host.op.axis[:len(st.op.axis)]]
        step, init, store = [], [], []
        for r in range(0, rows, 16):
            for name, fill in zip(spec["state"], spec["init"]):
                init.append(declared_call(tensor_intrin(fill), st.name,
                                          self._row_tile(st, name, Const(r, "int32")), {}))
            for per_column, ops in spec["step"]:
                for c in (range(0, cols, 16) if per_column else (None,)):
                    tiles = {n: self._tile(x, r, c) if n == "x" else self._row_tile(
                        st, n, Const(r, "int32"), c if n in spec.get("columns", ()) else 0)
                        for _, out, ins in ops for n in (out, *ins.values())}
                    for intrin, out, ins in ops:
                        f = tensor_intrin(intrin)
                        step.append(declared_call(f, st.name, tiles[out], {
                            ph: tiles[n] for ph, n in ins.items()}, reduce=f.reduce))
            for name, buf in zip(spec["state"], self.info[st].buffers):
                nd = len(buf.shape)
                base = tuple(first[:-1]) + (_op.add(first[-1], Const(r, first[-1].dtype)),)
                out = (buf, base, (tuple(int(e == nd - 1) for e in range(nd)), (0,) * nd))
                store.append(declared_call(tensor_intrin(spec["store"]), st.name, out,
                                           {"a": self._row_tile(st, name, Const(r, "int32"))}))
        key = (host, ko)
        self._before_loop.setdefault(key, []).append(seq(*init))
        self._after_loop.setdefault(key, []).append(seq(*store, _barrier()))
        return seq(*step)

    def _lockstep_view_nest(self, st: Stage):
        """A ``_lockstep_view`` stage: its intrinsic on each 16 x 16 tile of its fragment,
        from the step's tiles that hold the tile's rows (the row tiles; a tile of
        ``spec["columns"]``: the one of the tile's columns, whose offset in the step is
        the stage's first column modulo the step's)."""
        lock, intrin, operands = st.lockstep_view
        buf = self.info[st].buffer
        if lock not in self.lockstep_fragments or buf.scope != "mma.accumulator":
            raise InternalError(f"_lockstep_view of {st.name}: not a fragment read from a "
                                "_lockstep stage's row tiles (a tecomp bug: the FlashAttention "
                                "template made it)")
        columns = lock.lockstep[2].get("columns", ())
        ref = next(iter(self.lockstep_fragments[lock].values()))
        steps = self.lockstep_fragments[lock][columns[0]].shape[-1] if columns else None
        zero = {iv.var: Const(0, iv.var.dtype) for iv in st.leaf_iter_vars}
        first = _simplify(_op.floormod(substitute(self.root_value(st, st.op.axis[-1]), zero),
                                       _in_dtype(steps, st.op.axis[-1].var.dtype)),
                          self.leaf_ranges(st)) if columns else 0
        f = tensor_intrin(intrin)
        calls = []
        for r in range(0, int(buf.shape[-2].value), 16):
            for c in range(0, int(buf.shape[-1].value), 16):
                col = _op.add(first, Const(c, first.dtype)) if columns else 0
                calls.append(declared_call(f, st.name, self._tile(buf, r, c), {
                    ph: self._row_tile(lock, n, Const(r, ref.shape[0].dtype),
                                       col if n in columns else 0)
                    for ph, n in operands.items()}))
        return seq(*calls)

    def _region_bounds(self, st: Stage) -> List[Tuple[Expr, Expr]]:
        """``[lo, hi]`` of ``st``'s region along each axis, in the enclosing loop counters."""
        inf = self.info[st]
        out = []
        for ax in st.op.axis:
            lo = inf.root_min[ax]
            out.append((lo, _op.sub(_op.add(lo, inf.extent[ax]), Const(1, lo.dtype))))
        return out

    def _disjoint_per_thread(self, st: Stage, v: Var, inner: List[Var], outer) -> bool:
        """Whether the parts of ``st`` that two iterations of the parallel loop ``v``
        compute (each over all its iterations of the loops ``inner``, between ``v`` and
        the attach point) are disjoint: along some axis, each iteration's part lies
        wholly past (or wholly before) the part of the iteration before it."""
        ext = outer[v].extent
        if isinstance(ext, Const) and ext.value <= 1:
            return True          # (one iteration)
        arith = _arith()
        nxt, pairs = _next_iteration(v, outer)
        one = Const(1, v.dtype)
        for lo, hi in self._region_bounds(st):
            lo, hi = _simplify(lo, outer), _simplify(hi, outer)
            if inner:
                lo = arith.eval_interval(lo, outer, relax=set(inner)).lo
                hi = arith.eval_interval(hi, outer, relax=set(inner)).hi
                if lo is None or hi is None:
                    continue
            for gap in (_op.sub(_op.sub(substitute(lo, nxt), hi), one),    # ascending
                        _op.sub(_op.sub(lo, substitute(hi, nxt)), one)):   # descending
                glo, _ = arith.const_interval(_simplify(gap, pairs), pairs)
                if glo is not None and glo >= 0:
                    return True
        return self._disjoint_counted(st, v, inner, outer)

    def _disjoint_counted(self, st: Stage, v: Var, inner: List[Var], outer) -> bool:
        """:meth:`_disjoint_per_thread` by counting, where the loop ``v`` and the loops
        outside it that the part depends on have constant ranges (4096 combinations at
        most): for each value of those outside, each iteration's part (its hull over the
        loops ``inner``, clipped to the stage's shape; an empty one computes nothing),
        and along some axis no two of them overlap."""
        shape = st.op.shape
        bounds = self._region_bounds(st)
        # v, and the loops outside it that the part depends on, take each value in turn
        fixed = [v] + [u for u in outer if u is not v and u not in inner
                       and any(uses_var(lo, u) or uses_var(hi, u) for lo, hi in bounds)]
        if not all(isinstance(e, Const) for e in shape) or not all(
                isinstance(outer[u].min, Const) and isinstance(outer[u].extent, Const)
                for u in fixed):
            return False
        rngs = [range(outer[u].min.value, outer[u].min.value + outer[u].extent.value)
                for u in fixed]
        if _prod(len(x) for x in rngs) > 4096:
            return False
        arith = _arith()
        for rest in itertools.product(*rngs[1:]):
            boxes = []
            for x in rngs[0]:
                sub = {u: Const(val, u.dtype) for u, val in zip(fixed, (x,) + rest)}
                box = []
                for (lo, hi), e in zip(bounds, shape):
                    a = arith.eval_interval(substitute(lo, sub), outer, relax=set(inner)).lo
                    b = arith.eval_interval(substitute(hi, sub), outer, relax=set(inner)).hi
                    if not (isinstance(a, Const) and isinstance(b, Const)):
                        return False
                    box.append((max(a.value, 0), min(b.value, e.value - 1)))
                if all(a <= b for a, b in box):
                    boxes.append(box)
            if not any(all(s[k + 1][0] > s[k][1] for k in range(len(s) - 1))
                       for s in (sorted(box[d] for box in boxes) for d in range(len(shape)))):
                return False
        return True

    def _check_store_root_covers(self, st: Stage, loops: List[Var], outer):
        """Every element of ``st`` that a stage outside its loop nest reads (after the
        nest) is computed by some iteration of the nest.  Each loop around the attach
        point may move the part an iteration computes along one axis only (so that the
        parts make up a box); along each axis, the elements the iterations compute are
        counted exactly where the loops moving along it have constant extents (4096
        iterations at most), else proved to join up without gaps (loop by loop,
        innermost first, each iteration's part touching the next one's)."""
        outside = [c for c in self.readers[st] if self._relax_set(c, st) is None]
        if not outside:
            return
        bounds = [(_simplify(lo, outer), _simplify(hi, outer)) for lo, hi in self._region_bounds(st)]
        moves = [[v for v in loops if uses_var(lo, v) or uses_var(hi, v)] for lo, hi in bounds]
        shared = len({v for m in moves for v in m}) < sum(len(m) for m in moves)
        # per axis: the computed elements as disjoint [lo, hi] pieces, or None (not known)
        # (the proof takes the parts before they are clipped to the shape, and clips their
        # union: an iteration past the edge computes nothing, yet its unclipped part
        # still touches the one before it)
        needed = self.info[st].needed
        if len(needed) != len(bounds):
            needed = bounds
        pieces = [None if shared else
                  (self._pieces_counted(lo, hi, m, outer, ext)
                   or self._pieces_proved(*needed[d], m, outer, ext))
                  for d, ((lo, hi), m, ext) in enumerate(zip(bounds, moves, st.op.shape))]
        root = _root_of(st)
        # (a shape's symbolic extents are at least 1 where anything is read at all)
        sizes = {v: Interval(Const(1, v.dtype), None) for e in st.op.shape for v in free_vars(e)}
        for c in outside:
            read = self._read_region(c, st)
            if all(p is not None and _within(p, rlo, rhi, sizes)
                   for p, (rlo, rhi) in zip(pieces, read)):
                continue
            computed = ", ".join("?" if p is None else " and ".join(_slices([x]) for x in p)
                                 for p in pieces)
            raise ScheduleError(
                f"store_root on stage {st.name}: the loop nest of {root.name} computes "
                f"{st.name}[{computed}] but {c.name} reads {st.name}[{_slices(read)}] after it: "
                f"it would read elements that are never written (or that lowering cannot "
                f"prove are); compute {st.name} at a loop of a stage that reads all of them, "
                "or at the root")

    def _pieces_counted(self, lo: Expr, hi: Expr, moves: List[Var], outer, extent: Expr):
        """The elements ``[lo, hi]`` covers over all values of the loop counters
        ``moves`` (constant ranges, 4096 combinations at most), as sorted disjoint
        ``[lo, hi]`` pieces of Consts clipped to ``[0, extent)``; None where that
        cannot be counted."""
        rngs = []
        for v in moves:
            r = outer[v]
            if not (isinstance(r.min, Const) and isinstance(r.extent, Const)):
                return None
            rngs.append(range(r.min.value, r.min.value + r.extent.value))
        if not isinstance(extent, Const) or _prod(len(r) for r in rngs) > 4096:
            return None
        spans = []
        for vals in itertools.product(*rngs):
            sub = {v: Const(x, v.dtype) for v, x in zip(moves, vals)}
            a, b = _simplify(substitute(lo, sub)), _simplify(substitute(hi, sub))
            if not (isinstance(a, Const) and isinstance(b, Const)):
                return None
            a, b = max(a.value, 0), min(b.value, extent.value - 1)
            if a <= b:
                spans.append((a, b))
        merged: List[List[int]] = []
        for a, b in sorted(spans):
            if merged and a <= merged[-1][1] + 1:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        return [(Const(a, lo.dtype), Const(b, lo.dtype)) for a, b in merged]

    def _pieces_proved(self, lo: Expr, hi: Expr, moves: List[Var], outer, extent: Expr):
        """``[(lo, hi)]``, the range the iterations of the loops ``moves`` (innermost
        first) cover where each iteration's part provably touches the next one's
        (ascending or descending), clipped to ``[0, extent)``; None where that is not
        proved."""
        arith = _arith()
        lo, hi = _simplify(lo, outer), _simplify(hi, outer)
        moves = [v for v in moves if uses_var(lo, v) or uses_var(hi, v)]
        for v in moves:
            ext = outer[v].extent
            if not (isinstance(ext, Const) and ext.value <= 1):
                nxt, pairs = _next_iteration(v, outer)
                one = Const(1, v.dtype)
                for gap in (_op.sub(_op.sub(substitute(lo, nxt), hi), one),
                            _op.sub(_op.sub(lo, substitute(hi, nxt)), one)):
                    _, ghi = arith.const_interval(_simplify(gap, pairs), pairs)
                    if ghi is None or ghi > 0:
                        return None
            lo = arith.eval_interval(lo, outer, relax={v}).lo
            hi = arith.eval_interval(hi, outer, relax={v}).hi
            if lo is None or hi is None:
                return None
        return [(_simplify(_op.maximum(lo, Const(0, lo.dtype))),
                 _simplify(_op.minimum(hi, _op.sub(extent, Const(1, extent.dtype)))))]

    def _read_region(self, c: Stage, st: Stage) -> List[Tuple[Optional[Expr], Optional[Expr]]]:
        """``[lo, hi]`` along each axis of what stage ``c`` reads of ``st`` in all of its
        run (every loop of ``c`` and of the stages it is computed in relaxed)."""
        run = {}
        x, axis = c, None
        while x is not None:
            leaves = x.leaf_iter_vars
            cut = len(leaves) if axis is None else leaves.index(axis) + 1
            for iv in leaves[:cut]:
                run[iv.var] = _range0(self.info[x].extent[iv])
            x, axis = x.attach_stage, x.attach_ivar
        arith = _arith()
        cinf = self.info[c]
        vmap = {iv.var: self.root_value(c, iv) for iv in list(c.op.axis) + list(c.op.reduce_axis)}
        out: List[Tuple[Optional[Expr], Optional[Expr]]] = []
        for load in (ld for t in st.op._outs for b in cinf.bodies for ld in _producer_loads(b, t)):
            for d, idx in enumerate(load.indices):
                itv = arith.eval_interval(_simplify(substitute(idx, vmap)), run)
                if d == len(out):
                    out.append((itv.lo, itv.hi))
                    continue
                lo, hi = out[d]
                out[d] = (None if lo is None or itv.lo is None else _simplify(_op.minimum(lo, itv.lo)),
                          None if hi is None or itv.hi is None else _simplify(_op.maximum(hi, itv.hi)))
        return out

    def _relax_set(self, consumer: Stage, producer: Stage) -> Optional[Dict[Var, Range]]:
        """Loop counters to relax for one iteration of producer's attach loop; None for a
        consumer outside that loop of a ``store_root`` producer (it reads the whole
        buffer after the loop nest)."""
        target, axis = producer.attach_stage, producer.attach_ivar
        relax: Dict[Var, Range] = {}
        # (a buffer of each thread's own, in a GPU kernel: a consumer's loop bound to the
        # tag of a loop enclosing the producer's attach point runs as that loop's thread,
        # not over all of them)
        same = self._enclosing_threads_of(producer) if producer.scope in \
            PER_THREAD_SCOPES else {}

        def over(x, iv):
            tag = _thread_tag(x, iv)
            ext = self.info[x].extent[iv]
            got = same.get(tag) if tag else None
            if got is not None and _same(got[1], ext):
                return Range(got[0], Const(1, got[0].dtype))
            return _range0(ext)
        x, below = consumer, None  # below: leaf of x under which the chain hangs (None: all)
        while True:
            leaves = x.leaf_iter_vars
            cut = len(leaves) if below is None else leaves.index(below) + 1
            # the chain must hang inside the producer's loop: at it or at a loop inside it
            # (a consumer computed at an enclosing loop of the same stage runs before it)
            outside = x is target and cut <= leaves.index(axis)
            if x is target and not outside:
                start = leaves.index(axis) + 1
                for iv in leaves[start:cut]:
                    relax[iv.var] = over(x, iv)
                return relax
            for iv in leaves[:cut]:
                relax[iv.var] = over(x, iv)
            if outside or x.attach_type != "scope":
                if producer.stored_root and (_root_of(consumer) is not _root_of(target)
                                             or consumer.written is not None):
                    # (read after the nest that computes it, or by a Stage._written_at
                    # after the loop, in the same kernel)
                    return None
                raise ScheduleError(
                    f"compute_at of {producer.name} at {target.name}.{axis.name}: its consumer "
                    f"{consumer.name} is not computed inside that loop, so {producer.name} would "
                    f"not be ready for it; compute {consumer.name} inside {target.name}'s loop "
                    f"too, or compute {producer.name} at a loop enclosing all its consumers")
            x, below = x.attach_stage, x.attach_ivar

    def _enclosing_threads_of(self, st: Stage) -> Dict[str, tuple]:
        """Per GPU thread tag, ``(var, extent)`` of the loop bound to it that encloses
        ``st``'s attach point (the innermost where several do)."""
        out: Dict[str, tuple] = {}
        x, axis = st.attach_stage, st.attach_ivar
        while x is not None:
            leaves = x.leaf_iter_vars
            cut = leaves.index(axis) + 1 if axis is not None else len(leaves)
            for iv in reversed(leaves[:cut]):
                tag = _thread_tag(x, iv)
                if tag.startswith("threadIdx") and tag not in out:
                    out[tag] = (iv.var, self.info[x].extent[iv])
            x, axis = x.attach_stage, x.attach_ivar
        return out

    def _thread_relax(self, st: Stage) -> Dict[Var, Range]:
        """Enclosing GPU thread loops over which ``st``'s buffer is shared.

        A ``shared`` buffer serves every thread of a block, so the loops bound to
        ``threadIdx.*`` around its attach point are relaxed; a ``global`` buffer serves
        the whole grid (``blockIdx.*`` too); a ``local`` one belongs to a single thread.
        """
        tags = {"shared": ("threadIdx", "vthread"), "global": ("threadIdx", "blockIdx", "vthread")}.get(st.scope)
        if st.lockstep is not None:   # (global, but each block computes its own region)
            tags = ("threadIdx", "vthread")
        out: Dict[Var, Range] = {}
        if not tags:
            return out
        x, axis = st.attach_stage, st.attach_ivar
        while x is not None:
            leaves = x.leaf_iter_vars
            cut = leaves.index(axis) + 1 if axis is not None else len(leaves)
            for iv in leaves[:cut]:
                a = x.iter_attrs.get(iv)
                if a is not None and a.thread is not None and a.thread.thread_tag.startswith(tags):
                    out[iv.var] = _range0(self.info[x].extent[iv])
            x, axis = x.attach_stage, x.attach_ivar
        return out

    def _needed_region(self, st: Stage) -> List[Range]:
        arith = _arith()
        outs = st.op._outs
        shape = st.op.shape
        ndim = len(shape)
        los: List[list] = [[] for _ in range(ndim)]
        his: List[list] = [[] for _ in range(ndim)]
        consumers = self.readers[st]
        if not consumers:
            raise ScheduleError(f"compute_at of {st.name}: no stage reads it")
        thread_relax = self._thread_relax(st)
        gpu_tile = (st.scope == "shared" or st.scope in PER_THREAD_SCOPES) and self._in_gpu_kernel(st)
        inside = 0
        for c in consumers:
            relax = self._relax_set(c, st)
            if relax is None:
                continue   # (store_root: read after the loop nest, whole)
            inside += 1
            relax = {**relax, **thread_relax}
            cinf = self.info[c]
            vmap = {iv.var: self.root_value(c, iv) for iv in list(c.op.axis) + list(c.op.reduce_axis)}
            for load in (ld for t in outs for b in cinf.bodies for ld in _producer_loads(b, t)):
                for d, idx in enumerate(load.indices):
                    e = _simplify(substitute(idx, vmap))
                    itv = arith.eval_interval(e, relax)
                    if itv.lo is None or itv.hi is None:
                        los[d].append(Const(0, shape[d].dtype))
                        his[d].append(_op.sub(shape[d], Const(1, shape[d].dtype)))
                    else:
                        los[d].append(itv.lo)
                        his[d].append(itv.hi)
        if not inside:
            raise ScheduleError(
                f"compute_at of {st.name} at {st.attach_stage.name}.{st.attach_ivar.name} "
                f"with store_root: no stage inside that loop reads {st.name} (its readers "
                f"{', '.join(c.name for c in consumers)} are outside it); compute it at a loop "
                "of a stage that reads it, or at the root")
        out = []
        # the loop counters enclosing the attach point have known ranges: simplifying
        # with them turns e.g. min(io*6 + 5, 479) - max(io*6, 0) + 1 into 6
        outer = self._outer_ranges(st)
        for d in range(ndim):
            lo, hi = los[d][0], his[d][0]
            for x in los[d][1:]:
                lo = _op.minimum(lo, x)
            for x in his[d][1:]:
                hi = _op.maximum(hi, x)
            lo, hi = _simplify(lo, outer), _simplify(hi, outer)
            f = st.bound_aligns.get(d)
            if f is not None:
                # rule 6: the hull rounded out to multiples of f, not clipped
                cf = Const(f, lo.dtype)
                lo = _simplify(_op.mul(_op.floordiv(lo, cf), cf), outer)
                hi = _simplify(_op.add(_op.mul(_op.floordiv(hi, cf), cf), Const(f - 1, hi.dtype)),
                               outer)
                ext = _simplify(_op.add(_op.sub(hi, lo), Const(1, hi.dtype)), outer)
                self.info[st].raw_extent.append(ext)
                self.info[st].aligned[d] = (lo, hi)
                for c in (_op.compare(LT, lo, shape[d]), _op.compare(GE, hi, Const(0, hi.dtype))):
                    c = _simplify(c, outer)
                    if not (isinstance(c, Const) and c.value is True):
                        self.info[st].region_guard.append(c)
                out.append(Range(lo, ext))
                continue
            raw_ext = _simplify(_op.add(_op.sub(hi, lo), Const(1, hi.dtype)), outer)
            self.info[st].needed.append((lo, hi))
            clo = _simplify(_op.maximum(lo, Const(0, lo.dtype)), outer)
            chi = _simplify(_op.minimum(hi, _op.sub(shape[d], Const(1, shape[d].dtype))), outer)
            # an extent is never negative: a region read only under guards can lie wholly
            # outside the tensor (a negative extent times another, in a fuse, would run)
            ext = _simplify(_op.maximum(_op.add(_op.sub(chi, clo), Const(1, chi.dtype)),
                                        Const(0, chi.dtype)), outer)
            self.info[st].raw_extent.append(raw_ext)
            if gpu_tile and isinstance(raw_ext, Const) and raw_ext.value > 0 \
                    and not _same(ext, raw_ext):
                # a GPU tile keeps its constant extent past the tensor's edge (rule 5)
                self.info[st].unclipped[d] = (lo, hi)
                out.append(Range(lo, raw_ext))
            else:
                out.append(Range(clo, ext))
        return out

    def _in_gpu_kernel(self, st: Stage) -> bool:
        """Whether ``st`` is computed inside a loop bound to blockIdx/threadIdx."""
        x, axis = st.attach_stage, st.attach_ivar
        while x is not None:
            leaves = x.leaf_iter_vars
            for iv in leaves[:leaves.index(axis) + 1]:
                if _thread_tag(x, iv).startswith(("blockIdx", "threadIdx")):
                    return True
            x, axis = x.attach_stage, x.attach_ivar
        return False

    def _add_domain_guards(self, st: Stage):
        """Rule 5: a GPU tile computed past its tensor's edge guards its iterations there
        when its body reads memory that does not extend with it (a global buffer, or a
        tile that was clipped); reads of unclipped tiles stay in their buffers."""
        inf = self.info[st]
        if not inf.unclipped:
            return
        safe = True
        for t in inf.loads():
            p = self.stage_of_tensor(t)
            pinf = self.info.get(p) if p is not None else None
            if pinf is None or p.attach_type != "scope" or (p.scope != "shared" and p.scope not in PER_THREAD_SCOPES) \
                    or not pinf.covers_reads:
                safe = False
        if safe and st.written is None:
            return
        outer = self._outer_ranges(st)
        ranges = {**outer, **self.leaf_ranges(st)}
        zero = Const(0, "int32")
        for d, (lo, hi) in inf.unclipped.items():
            iv = st.op.axis[d]
            v = self.root_value(st, iv)
            conds = []
            if not _proved(_op.compare(GE, lo, zero), outer):
                conds.append(_op.compare(GE, v, zero))
            if not _proved(_op.compare(LT, hi, st.op.shape[d]), outer):
                conds.append(_op.compare(LT, v, st.op.shape[d]))
            for c in conds:
                c = _simplify(c, ranges)
                if not (isinstance(c, Const) and c.value is True):
                    inf.guards.append(c)

    def _check_aligned_reads(self, st: Stage):
        """Rule 6: an ``align_bounds`` stage computes past its tensor's edge, so every
        read of its body must stay inside the memory it reads (an argument's shape, or
        the buffer of a stage computed at an enclosing loop) over the whole region; a
        read that cannot be proved so is an error (it could touch memory outside the
        arrays).  A read under ``if_then_else(cond, ...)`` may use ``cond``'s comparisons
        (``B[k, j]`` under ``j < n``)."""
        inf = self.info[st]
        # each root axis over its region (aligned: past the edge; the others stay inside
        # the shape: their splits' guards see to that), the enclosing loops over theirs
        ranges = {v: Range(r.min, _when_nonempty(r.extent))
                  for v, r in self._outer_ranges(st).items()}
        for iv in list(st.op.axis) + list(st.op.reduce_axis):
            ranges[iv.var] = Range(inf.root_min[iv], _when_nonempty(inf.extent[iv]))
        zero = Const(0, "int32")
        for ld, facts in (x for b in inf.bodies for x in _guarded_loads(b)):
            buf, pinf = self.buffer_of(ld.producer)
            for d, idx in enumerate(ld.indices):
                off = zero
                if pinf is not None and self._relative(pinf.stage):
                    off = pinf.root_min[pinf.stage.op.axis[d]]
                top = _op.sub(buf.shape[d], Const(1, buf.shape[d].dtype))
                # idx - off in [0, extent - 1], directly or through a fact x <= y
                up = _proved(_op.compare(LE, _op.sub(idx, off), top), ranges) or any(
                    _proved(_op.compare(LE, _op.sub(idx, x), zero), ranges)
                    and _proved(_op.compare(LE, _op.sub(y, off), top), ranges) for x, y in facts)
                low = _proved(_op.compare(GE, _op.sub(idx, off), zero), ranges) or any(
                    _proved(_op.compare(GE, _op.sub(idx, y), zero), ranges)
                    and _proved(_op.compare(GE, _op.sub(x, off), zero), ranges) for x, y in facts)
                if not (up and low):
                    dims = ", ".join(st.op.axis[k].name for k in sorted(inf.aligned))
                    raise ScheduleError(
                        f"align_bounds on stage {st.name} (axis {dims}): past the edge of "
                        f"{st.name}, its read of {ld.producer.name} (dimension {d}, index "
                        f"{idx}) may fall outside {buf.name}'s memory (extent {buf.shape[d]}); "
                        f"drop align_bounds there, or make {ld.producer.name} cover that region "
                        f"(a stage computed at an enclosing loop with align_bounds too, or the "
                        f"read guarded by tc.if_then_else(index < extent, ...))")

    def _check_reduce_aligned_reads(self, st: Stage):
        """``align_bounds`` on a reduce axis: past the axis' extent the stage reads its
        operands past their edge, so each read indexed by that axis must be of a stage
        whose buffer holds its region unclipped there (``align_bounds``, or a GPU tile:
        rule 5), not of an argument or a clipped buffer (memory outside it)."""
        op = st.op
        kvars = {op.reduce_axis[r].var: op.reduce_axis[r] for r in st.reduce_aligns}
        for ld, _ in (x for b in self.info[st].bodies for x in _guarded_loads(b)):
            _, pinf = self.buffer_of(ld.producer)
            for d, idx in enumerate(ld.indices):
                ks = [kvars[v] for v in free_vars(idx) if v in kvars]
                if ks and (pinf is None or not (d in pinf.unclipped or d in pinf.aligned)):
                    raise ScheduleError(
                        f"align_bounds on stage {st.name}, reduce axis {ks[0].name}: past the "
                        f"axis' extent {ks[0].dom.extent} the stage reads {ld.producer.name} "
                        f"(dimension {d}, index {idx}) past its edge, outside its memory; read "
                        f"it through a copy computed at a loop of {st.name} that holds the "
                        "whole tile, zeros past the edge (cache_read(..., pad=0.0) with "
                        "align_bounds)")

    def _check_loop_kinds(self, st: Stage):
        inf = self.info[st]
        for iv in st.leaf_iter_vars:
            a = st.iter_attrs.get(iv)
            if a is None:
                continue
            ext = inf.extent[iv]
            if a.kind in ("vectorized", "unrolled") and not isinstance(ext, Const):
                verb = "vectorize" if a.kind == "vectorized" else "unroll"
                big = [x.value for x in (getattr(ext, "a", None), getattr(ext, "b", None))
                       if isinstance(ext, Min) and isinstance(x, Const)]
                how = (f"it was split by {big[0]}, past the axis' extent, so it runs the "
                       f"whole (symbolic) axis; split by a vector width or a small unroll "
                       f"factor instead" if big else
                       f"split it by a constant factor and {verb} the inner axis (the tail "
                       f"is guarded)")
                raise ScheduleError(
                    f"{verb} on stage {st.name}: axis {iv.name} has extent {ext}, which is not a "
                    f"constant; {how}")

    def _check_shared_reduction(self, st: Stage):
        """A ``shared`` stage computed inside a loop bound to ``threadIdx.*`` whose own
        loops bind no loop to that thread axis runs whole in every thread of the block
        (its region is relaxed over the threads, section 5).  Plain stores then write the
        same values (redundant, not wrong); a reduction's updates add into the same shared
        elements at once: a data race, and wrong sums (``cache_write(C, "shared")``
        computed at C's threadIdx loop summed about 16 times too much on 16 threads)."""
        if st.scope != "shared" or not isinstance(self.info[st].bodies[0], Reduce):
            return
        own = {_thread_tag(st, iv) for iv in st.leaf_iter_vars} - {""}
        for x, iv in self._loops_around(st, [])[::-1]:
            tag = _thread_tag(x, iv)
            ext = self.info[x].extent[iv]
            if not tag.startswith("threadIdx") or tag in own or \
                    (isinstance(ext, Const) and ext.value == 1):
                continue
            raise ScheduleError(
                f"compute_at of {st.name}: it is a reduction into shared memory, computed "
                f"inside the loop {iv.name} of stage {x.name}, which is bound to {tag}, and no "
                f"loop of {st.name} is bound to {tag}: every thread of the block would run "
                f"the whole reduction, adding into the same shared elements at once (a data "
                f"race: wrong sums); bind a data-parallel axis of {st.name} to {tag} (split "
                f"it by {ext}) so that the threads share its elements, give it scope "
                f"'local', or compute it at a loop outside {iv.name}")

    def _make_buffer(self, st: Stage):
        inf = self.info[st]
        outs = st.origin_op._outs
        args = [self.arg_buffers.get(_key(t)) for t in outs]
        if all(a is not None for a in args):
            inf.buffers = args
            return
        if isinstance(st.op, (ExternOp, ScatterOp)):   # whole, at the root
            inf.buffers = [a if a is not None else Buffer(t.name, tuple(t.shape), t.dtype)
                           for t, a in zip(outs, args)]
            return
        arith = _arith()
        shape = []
        if self._stored_root(st):
            shape = list(st.op.shape)
        elif st.attach_type == "scope":
            outer = self._outer_ranges(st)
            raw = inf.raw_extent
            for d, iv in enumerate(st.op.axis):
                ext = inf.extent[iv]
                if not isinstance(ext, Const):
                    cands = [ext] + ([raw[d]] if d < len(raw) else [])
                    best = None
                    for c in cands:
                        lo, hi = arith.const_interval(c, outer)
                        if hi is not None and (best is None or hi < best):
                            best = hi
                    full = st.op.shape[d]
                    if best is not None and isinstance(full, Const) and d not in inf.aligned:
                        best = min(best, full.value)
                    if best is None and d in inf.aligned:
                        # past the edge the shape does not bound it: its largest value
                        # over the enclosing loops, in the symbolic shapes
                        full = arith.eval_interval(ext, outer).hi
                        if full is None:
                            raise ScheduleError(
                                f"align_bounds on stage {st.name}, axis {iv.name}: the aligned "
                                f"region's extent {ext} has no upper bound over the enclosing "
                                f"loops, so its buffer cannot be allocated; drop align_bounds "
                                f"there")
                    ext = as_index(int(best)) if best is not None else full
                if isinstance(ext, Const) and ext.value < 0:
                    # every read of this region is guarded off: the region is empty
                    ext = Const(0, ext.dtype)
                shape.append(ext)
        else:
            shape = [inf.extent[iv] for iv in st.op.axis]
        strides = None
        if st.storage_aligns or st.storage_perm:
            strides = _aligned_strides(shape, st.storage_aligns, st.name, st.storage_perm)
        # an output of a multi-output root stage that is not an argument (an argmax's
        # value, when only the index is wanted) gets a buffer of its own
        inf.buffers = [a if a is not None else Buffer(t.name, tuple(shape), t.dtype, strides, st.scope)
                       for t, a in zip(outs, args)]

    def _outer_ranges(self, st: Stage) -> Dict[Var, Range]:
        """Ranges of every loop counter that encloses st's attach point (the ones its
        region may depend on; relaxed thread loops do not count)."""
        out = {}
        relaxed = self._thread_relax(st)
        x, axis = st.attach_stage, st.attach_ivar
        while x is not None:
            leaves = x.leaf_iter_vars
            cut = leaves.index(axis) + 1 if axis is not None else len(leaves)
            for iv in leaves[:cut]:
                if iv.var not in relaxed:
                    out[iv.var] = _range0(self.info[x].extent[iv])
            x, axis = x.attach_stage, x.attach_ivar
        return out

    # -- 4: loop nests -------------------------------------------------------------------
    def make_nest(self, st: Stage):
        """The loop nest of stage ``st`` with the stages attached to it inside."""
        if isinstance(st.op, ExternOp):
            return self._extern_call(st)
        if isinstance(st.op, ScatterOp):
            return self._scatter_nest(st)
        if isinstance(st.op, ScanOp):
            return seq(self._scan_init(st), self._make_nest(st))
        if getattr(st, "persistent_blocks", None):
            # lower.persistent turns its block loops into a persistent tile loop
            return AttrStmt("persistent", st.persistent_blocks, self._make_nest(st))
        return self._make_nest(st)

    def _scan_init(self, st: Stage):
        """A scan's first steps (``S[0:m] = init``), after checking that its time loop
        stays the outermost serial loop and its body runs inside it."""
        op = st.op
        t = op.scan_axis
        a = st.iter_attrs.get(t)
        if t not in st.leaf_iter_vars or st.leaf_iter_vars[0] is not t or (
                a is not None and a.kind != "serial"):
            raise ScheduleError(
                f"scan {st.name}: its time axis {t.name} must stay its outermost loop, serial "
                f"and whole (step t reads the steps before it); its loops are "
                f"{', '.join(iv.name for iv in st.leaf_iter_vars)}: schedule the other axes only")
        for bop in op.body_ops():
            x = self.stage_of_tensor(bop.output(0))
            while x is not None and x.attach_type == "scope" and x.attach_stage is not st:
                x = x.attach_stage
            if x is None or (x.attach_type != "inline" and x.attach_stage is not st):
                raise ScheduleError(
                    f"scan {st.name}: {bop.name} reads the state {op.state.name}, so it must run "
                    f"inside the scan's time loop, one step at a time; keep it computed at "
                    f"s[{st.name}]'s axis {t.name} (or a loop inside it), or inline it")
        inf = self.info[st]
        buf = inf.buffer
        exts = [op.init.shape[0]] + list(op.shape[1:])
        idx = [Var(f"{st.name}.init{d}", e.dtype) for d, e in enumerate(exts)]
        value = self.lower_expr(_InlineExpander(self).visit(
            ProducerLoad(op.init, tuple(idx), op.init.dtype)))
        body = BufferStore(buf, value, tuple(idx))
        for v, e in reversed(list(zip(idx, exts))):
            body = For(v, Const(0, e.dtype), e, "serial", body)
        return body

    def _make_nest(self, st: Stage):
        if st.lockstep_view is not None:
            return self._lockstep_view_nest(st)
        if st in self.lockstep_fragments:
            return self._lockstep_fragment_step(st)
        inf = self.info[st]
        op = st.op
        bufs = inf.buffers
        vmap = {iv.var: self.root_value(st, iv) for iv in list(op.axis) + list(op.reduce_axis)}
        # (a buffer holds a stage's region from its start; a scan's time axis starts at
        # its first computed step, in the scan's whole output)
        where = (self.root_value if isinstance(op, ScanOp) or self._stored_root(st)
                 else lambda _, iv: inf.value[iv])
        store_idx = tuple(_simplify(where(st, iv), self.leaf_ranges(st)) for iv in op.axis)
        leaves = st.leaf_iter_vars
        body = inf.bodies[0]
        if isinstance(body, Reduce):
            comb, srcs, cond = self._reduce_parts(st)
            if len(bufs) == 1:
                buf = bufs[0]
                cur = BufferLoad(buf, store_idx, buf.dtype)
                update = BufferStore(buf, comb.combine(cur, srcs[0]), store_idx)
                first = self._first_point(st, comb, srcs[0], cond)
                init = BufferStore(buf, comb.identity if first is None else first, store_idx)
            else:
                # a tuple reduction: every element is combined from the old values; unless
                # each reads only its own (a sum and a sum of squares), they are bound first
                curs = tuple(BufferLoad(b, store_idx, b.dtype) for b in bufs)
                # (Stage._lockstep, the online softmax) each element bound once: its
                # reducer reads it in six places, each a masked load of the scores
                bound = [(Var(f"{b.name}.x", x.dtype), x) if st.lockstep is not None
                         and not isinstance(x, (Const, Var)) else (None, x)
                         for b, x in zip(bufs, srcs)]
                # (the elements in the order of the reduce axes: an argmax's ties need
                # no index test)
                ordered = IN_ORDER_COMBINE and st.lockstep is None and \
                    self._tensorized_at(st) is None and \
                    not any(iv.kind == "reduce" and _thread_tag(st, iv) for iv in leaves) \
                    and reduce_in_order(op, st.relations, leaves)
                seeded = self._seeded_selection(st)
                if seeded is not None:   # (the accumulator starts at the first element)
                    comb, first, _ = seeded
                    init = seq(*[BufferStore(b, x, store_idx) for b, x in zip(bufs, first)])
                else:
                    init = seq(*[BufferStore(b, x, store_idx)
                                 for b, x in zip(bufs, comb.identity)])
                new = comb.combine(curs, tuple(x if v is None else v for v, x in bound),
                                   in_order=ordered)
                if comb.independent:
                    update = seq(*[BufferStore(b, v, store_idx) for b, v in zip(bufs, new)])
                else:
                    tmps = [Var(f"{b.name}.new", b.dtype) for b in bufs]
                    update = seq(*[BufferStore(b, t, store_idx) for b, t in zip(bufs, tmps)])
                    for t, v in reversed(list(zip(tmps, new))):
                        update = LetStmt(t, v, update)
                for v, x in reversed(bound):
                    if v is not None:
                        update = LetStmt(v, x, update)
            if not (isinstance(cond, Const) and cond.value is True):
                update = IfThenElse(cond, update)
            p = next(i for i, iv in enumerate(leaves) if iv.kind == "reduce")
            if st.lockstep is not None:
                return self._lockstep_nest(
                    st, bufs, comb, update, init, store_idx, leaves, p,
                    [g for g in inf.guards if not _uses_reduce(g, st, inf)])
            tred = [iv for iv in leaves[p:] if iv.kind == "reduce" and _thread_tag(st, iv)]
            if tred:
                if len(bufs) > 1:
                    raise ScheduleError(
                        f"bind on stage {st.name}: reduction axis {tred[0].name} is bound to "
                        f"{_thread_tag(st, tred[0])}, but the stage is a tuple reduction "
                        f"({comb.name}); a cross-thread reduction takes a single-output "
                        "reducer: bind only its data-parallel axes")
                return self._loops(st, leaves[:p], self._cross_thread_reduce(
                    st, leaves, p, tred, comb, srcs[0], cond, store_idx))
            dguards = [g for g in inf.guards if not _uses_reduce(g, st, inf)]
            t = self._tensorized_at(st)
            if t is not None:
                # the intrinsic adds into the output: the reducer's identity is stored first
                # (around the region, or inside it over its data loops); an intrinsic with
                # an ``init`` companion (a tensor-core accumulator, which has no elements
                # to store to) writes it over each region with that
                tic = tensorize_call(self, st, leaves, t, srcs[0], store_idx, self._loops(
                    st, leaves[t:], _guard(update, inf.guards)), True)
                call = _guard(tic, inf.guards)
                init_intrin = st.tensorized[1].init
                region_data = [iv for iv in leaves[t:] if iv.kind != "reduce"]

                def init_over(data_loops):
                    if init_intrin is None:
                        return self._loops(st, data_loops, _guard(init, dguards), attach=False)
                    fill = TensorIntrinCall(init_intrin, st.name, tic.buffers[:1], tic.base(0),
                                            tic.coefs[:1], False, self._loops(
                                                st, region_data, init, attach=False),
                                            tic.flat[:1] if tic.is_flat(0) else ())
                    outside = [iv for iv in data_loops if iv not in region_data]
                    return self._loops(st, outside, _guard(fill, dguards), attach=False)
                lock = [x for x in self.stages if x.lockstep is not None
                        and x.attach_stage is st and x.attach_ivar is leaves[p]]
                if t >= p:
                    init_nest = init_over([iv for iv in leaves[p:] if iv.kind != "reduce"])
                    if lock:   # (Stage._lockstep) the accumulator rescaled at each step
                        inner = seq(self._rescale_nest(st, lock[0], tic, leaves, t, p),
                                    self._loops(st, leaves[p + 1:t], call))
                        return self._loops(st, leaves[:p], seq(init_nest, self._loops(
                            st, leaves[p:p + 1], inner)))
                    return self._loops(st, leaves[:p], seq(init_nest, self._loops(
                        st, leaves[p:t], call)))
                init_nest = init_over(region_data)
                return self._loops(st, leaves[:t], seq(init_nest, call))
            update_nest = self._loops(st, leaves[p:], _guard(update, inf.guards))
            if len(bufs) == 1 and first is not None:
                # (the accumulator starts at the first point's element: the update runs
                # over the other points)
                try:
                    update_nest = _without_first_point(
                        update_nest, {iv.var for iv in leaves[p:] if iv.kind == "reduce"})
                except _NotPeeled:
                    init = BufferStore(bufs[0], comb.identity, store_idx)
            init_nest = self._loops(st, [iv for iv in leaves[p:] if iv.kind != "reduce"],
                                    _guard(init, dguards), attach=False)
            inner = init_nest if update_nest is None else seq(init_nest, update_nest)
            return self._loops(st, leaves[:p], inner)
        values = [self.lower_expr(substitute(b, vmap)) for b in inf.bodies]
        stored = values
        if st.atomic is not None:   # (Stage._atomic_add) added in, not stored
            stored = [_op.add(BufferLoad(buf, store_idx, buf.dtype), v)
                      for buf, v in zip(bufs, values)]
        store = seq(*[BufferStore(buf, v, store_idx) for buf, v in zip(bufs, stored)])
        t = self._tensorized_at(st)
        if t is not None:
            tic = tensorize_call(self, st, leaves, t, values[0], store_idx,
                                 self._loops(st, leaves[t:], _guard(store, inf.guards)), False)
            if st.atomic is not None:
                tic = dataclasses.replace(tic, intrin=tensor_intrin("cuda.mma_atomic_add_f32"))
            if st.unmasked is not None:   # (Stage._tensorize_unmasked)
                tic = unmasked_version(self, st, leaves, t, vmap, store_idx, tic, lambda v: (
                    self._loops(st, leaves[t:], _guard(BufferStore(bufs[0], v, store_idx),
                                                       inf.guards))))
            return self._loops(st, leaves[:t], _guard(tic, inf.guards))
        return self._loops(st, leaves, _guard(store, inf.guards))

    def _reduce_parts(self, st: Stage):
        """``(combiner, sources, condition)`` of the reduction stage ``st``, lowered: in
        its leaf loop counters, the condition as its loops test it."""
        inf = self.info[st]
        op = st.op
        vmap = {iv.var: self.root_value(st, iv) for iv in list(op.axis) + list(op.reduce_axis)}
        body = inf.bodies[0]
        # (a user reducer's combiner and identity may read the indices too)
        comb = map_combiner(body.combiner, lambda e: self.lower_expr(substitute(e, vmap)))
        srcs = [self.lower_expr(substitute(b.source, vmap)) for b in inf.bodies]
        cond = _kept_terms(st, self.lower_expr(substitute(body.condition, vmap)),
                           self._tensorized_at(st) is not None)
        return comb, srcs, cond

    def _at_first_point(self, st: Stage, cond, unrolled: bool = False):
        """``(at_first, ranges)`` where the reduction stage ``st`` (its condition
        ``cond``) has an element at its first point wherever its update runs: every
        reduce loop of a constant extent of at least 1 (``unrolled``: and unrolled), none
        thread-bound, no stage computed inside them, and the condition and the guards
        that read a reduce loop proved there (a split's tail past the extent, a lane past
        a short axis: no element to start from).  ``at_first`` maps the reduce loops'
        counters to 0, ``ranges`` the loops around to their ranges (a source's root
        value reads the loops of the stages it is computed at too).  Else None."""
        inf = self.info[st]
        leaves = st.leaf_iter_vars
        p = next(i for i, iv in enumerate(leaves) if iv.kind == "reduce")
        inner = set(leaves[p:])
        if any(x.attach_type == "scope" and x.attach_stage is st and x.attach_ivar in inner
               for x in self.stages):
            return None
        red = [iv for iv in leaves[p:] if iv.kind == "reduce"]
        for iv in red:
            attrs = st.iter_attrs.get(iv)
            if (_thread_tag(st, iv) or not isinstance(inf.extent[iv], Const)
                    or int(inf.extent[iv].value) < 1
                    or unrolled and (attrs is None or attrs.kind != "unrolled")):
                return None
        ranges = {iv.var: _range0(self.info[x].extent[iv])
                  for x, iv in self._loops_around(st, st.leaf_iter_vars)
                  if iv in self.info[x].extent}
        at_first = {iv.var: Const(0, iv.var.dtype) for iv in red}
        tests = [g for g in inf.guards if _uses_reduce(g, st, inf)]
        if not (isinstance(cond, Const) and cond.value is True):
            tests.append(cond)
        if not all(prove(substitute(g, at_first), ranges) for g in tests):
            return None
        return at_first, ranges

    def _first_point(self, st: Stage, comb, src, cond):
        """The element at the first point of the reduction stage ``st`` (one buffer, its
        combiner ``comb`` a float or integer ``max``/``min`` of ``src``, the condition
        ``cond``) where its accumulator starts there (:data:`SEED_FIRST_TAP`; a pooling's
        sum too, :data:`SEED_POOL_SUMS`): every
        reduce loop unrolled (its copies made at code generation), no lockstep or
        intrinsic, and an element at the first point wherever the update runs
        (:meth:`_at_first_point`).  Else None."""
        if not SEED_FIRST_TAP or st.lockstep is not None or \
                self._tensorized_at(st) is not None:
            return None
        x, y = Var("x", src.dtype), Var("y", src.dtype)
        e = comb.combine(x, y)
        # (not a stage that prefetches along its loops: its first point's copy would
        # not, PREFETCH_WINDOW_ROWS' local rows)
        pool_sum = SEED_POOL_SUMS and isinstance(e, Add) and "pool_sum" in \
            [t.strip() for t in (getattr(st.op, "tag", None) or "").split(",")] and \
            not any(a.prefetches for a in st.iter_attrs.values())
        if not (isinstance(e, (Max, Min)) or pool_sum) \
                or not (e.a is x and e.b is y and isinstance(comb.identity, Const)):
            return None
        at = self._at_first_point(st, cond, unrolled=True)
        if at is None:
            return None
        at_first, _ = at
        return _simplify(substitute(src, at_first))

    def _seeded_selection(self, st: Stage):
        """``(combiner, first, ranges)`` for a tuple reduction stage ``st`` that only
        selects (:func:`~tecomp.lower.vectorize.selects_only`: an argmax) whose first
        point is an element wherever its update runs (the condition and every guard that
        reads a reduce loop proved there; every reduce loop a constant extent of at least
        1, no stage computed inside them, no lockstep, intrinsic or thread-bound reduce
        loop): its accumulator starts at that point's element ``first`` instead of the
        identity (exact: ``combine(identity, e) == e``, and combining that element again
        changes nothing), so each of its integer elements always holds one of the values
        its element takes (a selection computes nothing): ``ranges`` maps each buffer of
        the stage to that range, or None.  The element's range is its expression's over
        the loops, or that of the buffer it reads when the stage that writes the buffer
        is seeded too (the lanes an argmax's row was split into).  The combiner's results
        are simplified knowing both sides in those ranges: an argmax's test that an index
        is the identity's -1 drops out.  None when that simplifies nothing (or
        :data:`SEED_SELECTIONS` is off).  Decided once per stage."""
        if st in self._seeds:
            return self._seeds[st]
        self._seeds[st] = None   # (while deciding: a cycle through the buffers is none)
        out = self._seed(st) if SEED_SELECTIONS else None
        self._seeds[st] = out
        return out

    def _seed(self, st: Stage):
        inf = self.info[st]
        if not isinstance(inf.bodies[0], Reduce) or len(inf.buffers) < 2 or \
                st.lockstep is not None or self._tensorized_at(st) is not None:
            return None
        comb, srcs, cond = self._reduce_parts(st)
        if not selects_only(comb):
            return None
        at = self._at_first_point(st, cond)
        if at is None:
            return None
        at_first, ranges = at
        known, held = {}, {}
        for x, y, e, buf in zip(comb.lhs, comb.rhs, srcs, inf.buffers):
            if not _dt.is_int(e.dtype):
                continue
            r = self._held_range(e) if isinstance(e, BufferLoad) else None
            if r is None:
                lo, hi = arith.const_interval(e, ranges)
                if lo is None or hi is None:
                    continue
                r = Range(Const(lo, e.dtype), Const(hi - lo + 1, e.dtype))
            known[x] = known[y] = held[buf] = r
        if not known:
            return None
        result = tuple(_simplify(r, known) for r in comb.result)
        order = tuple(_simplify(r, known) for r in comb.in_order) \
            if comb.in_order is not None else None
        if all(same_as(a, b) for a, b in zip(result + (order or ()),
                                              comb.result + (comb.in_order or ()))):
            return None
        first = tuple(_simplify(substitute(e, at_first)) for e in srcs)
        return TupleCommReducer(comb.name, comb.lhs, comb.rhs, result, comb.identity,
                                order), first, held

    def _held_range(self, load: BufferLoad):
        """The range of the values in ``load``'s buffer, where a seeded selection stage
        (:meth:`_seeded_selection`) writes it; else None."""
        for x in self.stages:
            if load.buffer in self.info[x].buffers:
                seed = self._seeded_selection(x)
                return seed[2].get(load.buffer) if seed is not None else None
        return None

    @staticmethod
    def _tensorized_at(st: Stage):
        """The position among ``st``'s loops of its tensorized one, or None."""
        if st.tensorized is None:
            return None
        iv, intrin = st.tensorized
        if iv not in st.leaf_iter_vars:
            raise ScheduleError(
                f"tensorize on stage {st.name} with {intrin.name}: axis {iv.name} was split or "
                f"fused after tensorize (the loops are now "
                f"{', '.join(x.name for x in st.leaf_iter_vars)}); call tensorize last, on one "
                "of those loops")
        if len(st.op.bodies) != 1:
            raise ScheduleError(
                f"tensorize on stage {st.name}: the stage is a multi-output compute; an "
                "intrinsic computes one output: tensorize a single-output stage")
        return st.leaf_iter_vars.index(iv)

    def _scatter_nest(self, st: Stage):
        """A scatter-add: its output set to 0, then one loop nest over its domain adding
        each point's value at its index (where the index is inside the output and the
        condition holds), serial: two points may add to the same element."""
        op = st.op
        buf = self.info[st].buffer
        for t in op.input_tensors:
            p = self.stage_of_tensor(t)
            if p is not None and p.attach_type == "scope":
                raise ScheduleError(
                    f"scatter-add {st.name} reads {t.name}, which is computed at "
                    f"{p.attach_stage.name}; the scatter reads it at data-dependent indices, "
                    f"whole: compute_root() {t.name}")
        idx = [Var(f"{st.name}.i{d}", e.dtype) for d, e in enumerate(op.shape)]
        fill = BufferStore(buf, Const(0.0 if _dt.is_float(op.dtype) else 0, op.dtype), tuple(idx))
        for v, e in reversed(list(zip(idx, op.shape))):
            fill = For(v, Const(0, e.dtype), e, "serial", fill)
        lower = lambda e: self.lower_expr(_InlineExpander(self).visit(e))  # noqa: E731
        index = tuple(lower(e) for e in op.index)
        inside = [op.condition] if not (isinstance(op.condition, Const)
                                        and op.condition.value is True) else []
        for d, (i, n) in enumerate(zip(op.index, op.shape)):
            inside += [_op.compare(GE, i, Const(0, i.dtype)),
                       _op.compare(LT, i, n if n.dtype == i.dtype else n.astype(i.dtype))]
        cond = lower(_op.all_(*inside))
        cur = BufferLoad(buf, index, buf.dtype)
        upd = IfThenElse(cond, BufferStore(buf, _op.add(cur, lower(op.value)), index))
        for iv in reversed(op.domain):
            upd = For(iv.var, iv.dom.min, iv.dom.extent, "serial", upd)
        return seq(fill, upd)

    def _extern_call(self, st: Stage) -> ExternCall:
        """An extern stage: one call of its function on whole buffers."""
        op = st.op
        for t in op.inputs:
            p = self.stage_of_tensor(t)
            if p is not None and p.attach_type != "root":
                raise ScheduleError(
                    f"extern stage {st.name} reads {t.name}, which is "
                    f"{'inlined' if p.attach_type == 'inline' else 'computed at ' + p.attach_stage.name}; "
                    f"its function ({op.call.name}) reads {t.name} whole from memory: "
                    f"compute_root() {t.name}")
        bufs, scalars, order, binfo, kinds = [], [], "", [], []
        for a in op.call.args:
            if isinstance(a, Expr):
                scalars.append(a)
                kinds.append(_dt.is_float(a.dtype))
                order += "s"
            else:
                buf, _ = self.buffer_of(a.tensor)
                bufs.append(buf)
                binfo.append((buf.dtype, len(buf.shape), a.is_output))
                order += "b"
        site = register_site(Site(op.call.func, op.call.name, order, tuple(binfo), tuple(kinds)))
        return ExternCall(site, op.call.name, tuple(bufs), tuple(scalars), order)

    def _cross_thread_reduce(self, st, leaves, p, tred, comb, src, cond, store_idx):
        """A reduction axis bound to a GPU thread axis: each thread folds its share of the
        other reduction loops into a register, then the block combines the registers
        through shared memory in a tree (log2(T) steps, one barrier each), and thread 0
        writes the result."""
        inf = self.info[st]
        if len(tred) > 1:
            raise ScheduleError(
                f"bind on stage {st.name}: reduction axes {', '.join(iv.name for iv in tred)} are "
                "all bound to thread axes; a cross-thread reduction takes one thread axis: fuse "
                "them first and bind the fused axis")
        rt = tred[0]
        tag = _thread_tag(st, rt)
        ext = inf.extent[rt]
        if not isinstance(ext, Const):
            raise ScheduleError(f"bind on stage {st.name}: reduction axis {rt.name} bound to {tag} "
                                f"has extent {ext}; a cross-thread reduction needs a constant "
                                "extent: split it by a constant and bind the inner axis")
        late_data = [iv for iv in leaves[p:] if iv.kind != "reduce"]
        if late_data:
            raise ScheduleError(
                f"bind on stage {st.name}: with a reduction over {tag}, the data-parallel axes "
                f"({', '.join(iv.name for iv in late_data)}) must come before the reduction "
                "axes: reorder them outward")
        dt = st.op.output(0).dtype
        T = ext.value
        zero = Const(0, "int32")
        # threads of the block other than rt index separate rows of the shared buffer
        others = [(v, e) for v, e in self._enclosing_threads(st, leaves[:p]) if v is not rt.var]
        local = Buffer(f"{st.name}.red", (Const(1, "int32"),), dt, None, "local")
        shared = Buffer(f"{st.name}.red.shared", tuple(e for _, e in others) + (ext,), dt, None,
                        "shared")
        lead = tuple(v for v, _ in others)
        acc = BufferLoad(local, (zero,), dt)
        upd = BufferStore(local, comb.combine(acc, src), (zero,))
        if not (isinstance(cond, Const) and cond.value is True):
            upd = IfThenElse(cond, upd)
        # the thread loop becomes the outermost of the reduction's loops; a stage computed
        # at it (s[A2].compute_at(s[B], rt)) stays where rt was among the serial loops:
        # inside those that came before it, around those that came after
        red = leaves[p:]
        before = [iv for iv in red[:red.index(rt)]]
        after = [iv for iv in red[red.index(rt) + 1:]]
        fold = self._loops(st, before, self._attach_here(
            st, rt, self._loops(st, after, _guard(upd, inf.guards))))
        sh = lambda i: BufferLoad(shared, lead + (i,), dt)  # noqa: E731
        steps = []
        stride = 1
        while stride * 2 < T:
            stride *= 2
        barrier = _barrier()
        while stride >= 1:
            take = BufferStore(shared, comb.combine(sh(rt.var), sh(_op.add(rt.var, Const(stride, "int32")))),
                               lead + (rt.var,))
            c = _op.compare(LT, rt.var, Const(stride, "int32"))
            if stride * 2 > T:
                c = And(c, _op.compare(LT, _op.add(rt.var, Const(stride, "int32")), ext))
            steps += [IfThenElse(c, take), barrier]
            stride //= 2
        # the result is stored by thread 0 under the data guards (rows of a split that
        # does not divide them, e.g. 40 rows by 32 onto threadIdx.y, are past the output)
        dguards = [g for g in inf.guards if not _uses_reduce(g, st, inf)]
        write = IfThenElse(rt.var.equal(zero),
                           _guard(BufferStore(inf.buffer, sh(zero), store_idx), dguards))
        body = seq(BufferStore(local, comb.identity, (zero,)), fold,
                   BufferStore(shared, acc, lead + (rt.var,)), barrier, *steps, write)
        body = Allocate(local, Allocate(shared, body))
        return For(rt.var, zero, ext, "thread", body, tag)

    @staticmethod
    def _loops_around(st, leaves):
        """(stage, IterVar) of ``leaves`` of ``st``, then of the loops of the stages it is
        computed at, up to their attach points (innermost stage first)."""
        out = [(st, iv) for iv in leaves]
        x = st
        while x.attach_type == "scope":
            y = x.attach_stage
            out += [(y, iv) for iv in y.leaf_iter_vars[:y.leaf_iter_vars.index(x.attach_ivar) + 1]]
            x = y
        return out

    def _enclosing_threads(self, st, leaves):
        """(var, extent) of the threadIdx loops around and among ``leaves`` of ``st``."""
        return [(iv.var, self.info[x].extent[iv]) for x, iv in self._loops_around(st, leaves)
                if _thread_tag(x, iv).startswith("threadIdx")]

    def _loops(self, st: Stage, leaves, body, attach=True):
        inf = self.info[st]
        for iv in reversed(leaves):
            if attach:
                body = self._attach_here(st, iv, body)
            a = st.iter_attrs.get(iv)
            if attach and a is not None and a.prefetches:
                body = self._prefetch_attrs(st, iv, a, body)
            kind = a.kind if a is not None else "serial"
            tag = a.thread.thread_tag if (a is not None and a.thread is not None) else ""
            dt = iv.var.dtype
            if tag.startswith("threadIdx") and st.attach_type == "scope":
                # (_relax_set) a loop bound to the tag of an enclosing one is that loop's
                # thread: indices of a per-thread buffer computed between the two, taken
                # from the enclosing loop's counter, are this one's
                outer = self._enclosing_threads_of(st).get(tag)
                if outer is not None and outer[0] is not iv.var and _same(outer[1],
                                                                          inf.extent[iv]):
                    body = substitute(body, {outer[0]: iv.var})
            body = For(iv.var, Const(0, dt), _in_dtype(inf.extent[iv], dt), kind, body, tag)
            if a is not None:
                for name, val in reversed(a.pragmas):
                    body = AttrStmt("pragma_" + name, val, body)
            if attach and (st, iv) in self._before_loop:   # (Stage._lockstep)
                body = seq(*self._before_loop.pop((st, iv)), body)
            if attach and (st, iv) in self._after_loop:
                body = seq(body, *self._after_loop.pop((st, iv)))
        return body

    def _prefetch_attrs(self, st: Stage, iv: IterVar, a, body):
        """``s[st].prefetch(tensor, iv, offset)``: an ``AttrStmt("prefetch",
        PrefetchRequest(...))`` directly in the body of the loop over ``iv`` (around the
        stages attached there), which the ``prefetch`` pass expands (lower/prefetch.py)."""
        for tensor, offset, along, level, carry in reversed(a.prefetches):
            problem = prefetch_kind_problem(st.name, iv, a, tensor)
            if problem is not None:
                raise ScheduleError(problem)
            buf = self._prefetch_buffer(st, iv, tensor)
            around = (self._enclosing_ivars(st, iv) if along is not None or carry is not None
                      else ())
            for name, x, else_ in (("along", along, "to advance the axis itself"),
                                   ("carry", carry, "to clamp at the end of the axis's loop")):
                if x is not None and x not in around:
                    raise ScheduleError(
                        f"prefetch of {tensor.name} on stage {st.name}, axis {iv.name}: "
                        f"{name}={x.name} is not a loop around {iv.name} (the loops around "
                        f"it are {', '.join(v.name for v in around) or 'none'}); pass one of "
                        f"those, or leave {name} out {else_}")
            if along is not None and carry is not None:
                # (carry must be around along: the loops around iv, outermost first)
                nest = [x for grp in reversed(self._loops_by_stage(st, iv)) for x in grp]
                if nest.index(carry) > nest.index(along):
                    outside = ", ".join(x.name for x in nest[:nest.index(along)]) or "none"
                    raise ScheduleError(
                        f"prefetch of {tensor.name} on stage {st.name}, axis {iv.name}: "
                        f"carry={carry.name} is inside along={along.name}; carry must be a "
                        f"loop around {along.name} (the loops around it are {outside}): "
                        "pass one of those, or leave carry out to clamp")
            req = PrefetchRequest(buf, iv.var, offset, st.name, iv.name, tensor.name,
                                  along.var if along is not None else None,
                                  along.name if along is not None else "", level,
                                  carry.var if carry is not None else None)
            body = AttrStmt("prefetch", req, body)
        return body

    def _prefetch_buffer(self, st: Stage, iv: IterVar, t: Tensor) -> Buffer:
        what = f"prefetch of {t.name} on stage {st.name}, axis {iv.name}"
        b = self.arg_buffers.get(_key(t))
        if b is not None:
            return b
        pst = self.stage_of_tensor(t)
        if pst is None:
            raise ScheduleError(
                f"{what}: {t.name} is neither an argument of the function nor a stage of this "
                "schedule, so the loop cannot access it; prefetch a tensor the loop reads or "
                "writes")
        if pst.attach_type == "inline":
            raise ScheduleError(
                f"{what}: {t.name} is inlined (compute_inline), so it has no buffer in memory; "
                f"prefetch the tensors it reads, or s[{t.name}].compute_root() it")
        return self.info[pst].buffers[t.value_index]

    def _loops_by_stage(self, st: Stage, iv: IterVar):
        """The IterVars of the loops around ``st``'s loop over ``iv``, a list for each
        stage (outermost first within it), ``st``'s own first."""
        leaves = st.leaf_iter_vars
        groups, last = [], None
        for x, v in self._loops_around(st, leaves[:leaves.index(iv)]):
            if x is not last:
                groups.append([])
                last = x
            groups[-1].append(v)
        return groups

    def _enclosing_ivars(self, st: Stage, iv: IterVar):
        """The IterVars of the loops around ``st``'s loop over ``iv``."""
        leaves = st.leaf_iter_vars
        return [x for _, x in self._loops_around(st, leaves[:leaves.index(iv)])]

    def _check_prefetch_axes(self):
        """Prefetches recorded on axes that are no loops any more (split or fused
        afterwards) or on stages that were inlined afterwards."""
        for st in self.sch.stages:
            for iv, a in st.iter_attrs.items():
                if not a.prefetches:
                    continue
                t = a.prefetches[0][0]
                what = f"prefetch of {t.name} on stage {st.name}, axis {iv.name}"
                if st.attach_type == "inline":
                    raise ScheduleError(
                        f"{what}: the stage was inlined into its consumers afterwards and has "
                        f"no loops; call s[{st.name}].compute_root(), or prefetch at a loop of "
                        "a stage that reads the inlined body")
                if iv not in st.leaf_iter_vars:
                    raise ScheduleError(
                        f"{what}: axis {iv.name} was split or fused after the prefetch (the "
                        f"loops of stage {st.name} are now "
                        f"{', '.join(x.name for x in st.leaf_iter_vars)}); call prefetch with "
                        "one of those axes")

    def _attach_here(self, st: Stage, iv: IterVar, body):
        inner = [s for s in self.stages if s.attach_type == "scope" and s.attach_stage is st
                 and s.attach_ivar is iv]
        if not inner:
            return body
        nests = [_guard(self.make_nest(s), self.info[s].region_guard) for s in inner]
        out = seq(*nests, body)
        for s in reversed(inner):
            for lock, tiles in self.lockstep_fragments.items():
                if lock.attach_stage is s:   # (the state's row tiles: around their host)
                    for b in reversed(list(tiles.values())):
                        out = Allocate(b, out)
            if s.stored_root:
                continue   # (allocated at the root: make_body)
            for b in reversed(self.info[s].buffers):
                out = Allocate(b, out)
                if s.double_buffered:
                    # lower.double_buffer splits the loop's copies from its reads
                    out = AttrStmt("double_buffer", b, out)
                    if s.buffer_producer != "threads":
                        out = AttrStmt("buffer_producer", s.buffer_producer, out)
                    if s.buffer_swizzle != "none":
                        out = AttrStmt("buffer_swizzle", s.buffer_swizzle, out)
                    if s.buffer_stages != 2:
                        out = AttrStmt("buffer_stages", s.buffer_stages, out)
        return out

    def lower_expr(self, e: Expr) -> Expr:
        return _LoadLowering(self).visit(e)

    def make_body(self):
        for st in self.stages:
            if st.double_buffered and (st.attach_type != "scope" or st.scope != "shared"):
                where = ("is inlined" if st.attach_type == "inline" else "is computed at the root"
                         if st.attach_type == "root" else f"has scope {st.scope}")
                raise ScheduleError(
                    f"double_buffer on stage {display(st.name)}: the stage {where}; double "
                    "buffering needs a shared-memory stage computed at a serial loop of a GPU "
                    f"kernel (s[{display(st.name)}].compute_at(s[C], k_outer))")
        roots = [s for s in self.stages if s.attach_type == "root"]
        kept = [s for s in self.stages if self._stored_root(s)]
        if kept:
            roots = self._roots_in_order(roots)
        nests = []
        for s in roots:
            # (Stage._atomic_add) the buffers added into, set to 0 before their kernel
            nests += [self._atomic_zero(x) for x in self.stages
                      if x.atomic is not None and _root_of(x) is s]
            nests.append(self.make_nest(s))
        body = seq(*nests)
        for s in reversed(kept):
            for t, b in reversed(list(zip(s.origin_op._outs, self.info[s].buffers))):
                if _key(t) not in self.arg_buffers:   # (Stage._written_at: an argument)
                    body = Allocate(b, body)
            if s in self.lockstep_factors:
                body = Allocate(self.lockstep_factors[s], body)
        for s in reversed(roots):
            for t, b in reversed(list(zip(s.origin_op._outs, self.info[s].buffers))):
                if _key(t) not in self.arg_buffers:
                    body = Allocate(b, body)
        return body


    def _roots_in_order(self, roots: List[Stage]) -> List[Stage]:
        """The root stages in an order where every loop nest comes after the nests that
        compute what it reads: a ``store_root`` stage is computed inside its consumer's
        nest, which its readers outside that nest must follow (stable: the stages' own
        order where it is free)."""
        root_of = _root_of
        pos = {id(r): n for n, r in enumerate(roots)}
        after = {id(r): set() for r in roots}   # root -> roots its nest reads
        for p, cons in self.readers.items():
            if p.attach_type == "inline":
                continue
            rp = root_of(p)
            for c in cons:
                rc = root_of(c)
                if rc is not rp and id(rc) in after and id(rp) in pos:
                    after[id(rc)].add(id(rp))
        out, placed = [], set()
        while len(out) < len(roots):
            ready = [r for r in roots if id(r) not in placed and after[id(r)] <= placed]
            if not ready:
                left = [r.name for r in roots if id(r) not in placed]
                raise ScheduleError(
                    f"store_root: the loop nests of {', '.join(left)} cannot be ordered: each "
                    "reads what another computes (a store_root stage is computed inside its "
                    "consumer's nest, which must run before any stage outside it reads it); "
                    "compute_root the stage kept at the root, or the stages reading it")
            r = min(ready, key=lambda x: pos[id(x)])
            out.append(r)
            placed.add(id(r))
        return out


def _next_iteration(v: Var, ranges) -> tuple:
    """``({v: v + 1}, ranges)`` with ``v``'s range cut to the iterations that have a next
    one (``[0, extent - 1)``): what two consecutive iterations of loop ``v`` compare."""
    r = ranges[v]
    pairs = dict(ranges)
    pairs[v] = Range(r.min, _simplify(_op.sub(r.extent, Const(1, r.extent.dtype))))
    return {v: _op.add(v, Const(1, v.dtype))}, pairs


def _within(pieces, lo, hi, ranges) -> bool:
    """Whether ``[lo, hi]`` provably lies inside one of ``pieces`` (``ranges``: what is
    known of the variables)."""
    if lo is None or hi is None:
        return False
    for a, b in pieces:
        x, _ = _arith().const_interval(_simplify(_op.sub(lo, a), ranges), ranges)
        y, _ = _arith().const_interval(_simplify(_op.sub(b, hi), ranges), ranges)
        if x is not None and x >= 0 and y is not None and y >= 0:
            return True
    return False


def _prod(xs) -> int:
    out = 1
    for x in xs:
        out *= x
    return out


def _slices(bounds) -> str:
    """``lo:hi+1`` per axis (``?`` for a side that is not bounded)."""
    def side(e, plus=0):
        if e is None:
            return "?"
        e = _simplify(_op.add(e, Const(plus, e.dtype))) if plus else e
        return str(e.value) if isinstance(e, Const) else str(e)
    return ", ".join(f"{side(lo)}:{side(hi, 1)}" for lo, hi in bounds)


def _root_of(st: Stage) -> Stage:
    """The root stage whose loop nest ``st`` is computed in (``st`` itself at the root)."""
    while st.attach_type == "scope":
        st = st.attach_stage
    return st


class _LoadLowering(Mutator):
    def __init__(self, ctx: LowerContext):
        self.ctx = ctx

    def visit_ProducerLoad(self, e):
        idx = [self.visit(i) for i in e.indices]
        buf, inf = self.ctx.buffer_of(e.producer)
        if inf is not None and self.ctx._relative(inf.stage):
            idx = [_op.sub(i, inf.root_min[iv]) for i, iv in zip(idx, inf.stage.op.axis)]
        return BufferLoad(buf, tuple(_simplify(i) for i in idx), buf.dtype)


def _key(t: Tensor) -> tuple:
    """The key of a tensor's argument buffer (an operation may have several outputs)."""
    return id(t.op), t.value_index


def _loads_of(expr) -> list:
    return input_tensors_of(expr)


def _producer_loads(expr, t: Tensor) -> list:
    return [n for n in collect(expr, lambda n: isinstance(n, ProducerLoad)) if n.producer is t]


class _GuardedLoads(Visitor):
    """Collects ``(load, facts)`` for :func:`_guarded_loads`."""

    def __init__(self):
        self.facts, self.found = (), []

    def under(self, cond, e):
        outer = self.facts
        self.facts = outer + tuple(_le_facts(cond))
        self.visit(e)
        self.facts = outer

    def visit_ProducerLoad(self, e):
        self.found.append((e, self.facts))
        self.generic_visit(e)

    def visit_Select(self, e):
        self.visit(e.cond)
        self.under(e.cond, e.true_value)
        self.under(Not(e.cond), e.false_value)

    def visit_Reduce(self, e):
        self.visit(e.condition)
        self.under(e.condition, e.source)


def _guarded_loads(expr):
    """``[(load, facts)]`` for every ProducerLoad in ``expr``: ``facts`` are the pairs
    ``(x, y)`` meaning ``x <= y`` that hold where the load is evaluated (the comparisons
    of the enclosing ``if_then_else`` conditions, in their chosen branches)."""
    w = _GuardedLoads()
    w.visit(expr)
    return w.found


def _le_facts(cond):
    """``(x, y)`` pairs with ``x <= y`` implied by the bool expression ``cond`` (its
    integer comparisons: the dtype of indices), through ``&``, and through ``~`` of a
    comparison or of ``|`` (De Morgan: ``~(a | b)`` is ``~a & ~b``)."""
    if isinstance(cond, And):
        return _le_facts(cond.a) + _le_facts(cond.b)
    if isinstance(cond, Not):
        a = cond.a
        if isinstance(a, Not):
            return _le_facts(a.a)
        if isinstance(a, Or):
            return _le_facts(Not(a.a)) + _le_facts(Not(a.b))
        flip = {LT: GE, LE: GT, GT: LE, GE: LT}.get(type(a))
        if flip is not None and a.a.dtype in ("int32", "int64"):
            return _le_facts(flip(a.a, a.b))     # exact on integers
        return []
    if isinstance(cond, (LT, LE, GT, GE)) and cond.a.dtype == cond.b.dtype \
            and cond.a.dtype in ("int32", "int64"):
        a, b = cond.a, cond.b
        one = Const(1, a.dtype)
        return [{LT: (a, _op.sub(b, one)), LE: (a, b), GT: (b, _op.sub(a, one)),
                 GE: (b, a)}[type(cond)]]
    return []


def _thread_tag(st: Stage, iv: IterVar) -> str:
    a = st.iter_attrs.get(iv)
    return a.thread.thread_tag if a is not None and a.thread is not None else ""


def _barrier():
    return Evaluate(Call("syncthreads", (), "int32"))


def _same(a: Expr, b: Expr) -> bool:
    """Whether two extents are provably equal."""
    a, b = _simplify(a), _simplify(b)
    if isinstance(a, Const) and isinstance(b, Const):
        return a.value == b.value
    return _is_zero(_simplify(_op.sub(a, b)))


def _proved(cond: Expr, ranges) -> bool:
    c = _simplify(cond, ranges)
    return isinstance(c, Const) and c.value is True


def _divides(cover: Expr, ext: Expr) -> bool:
    """Whether ``cover`` (outer * factor) equals ``ext`` exactly."""
    c, e = _simplify(cover), _simplify(ext)
    if isinstance(c, Const) and isinstance(e, Const):
        return c.value == e.value
    return _is_zero(_simplify(_op.sub(c, e)))


def _is_zero(e: Expr) -> bool:
    return isinstance(e, Const) and e.value == 0


def _uses_reduce(g: Expr, st: Stage, inf: StageInfo) -> bool:
    return any(uses_var(g, iv.var) for iv in st.leaf_iter_vars if iv.kind == "reduce")


def _kept_terms(st: Stage, cond, tensorized: bool):
    """The reduction condition ``cond`` (lowered) of stage ``st`` as its loops test it.
    A stage whose ``where=`` leaves out only zero products (``ZERO_WHERE``: a
    convolution's taps on its zero padding) drops the terms that read one of its
    vectorized loops (every lane would test them: computing the zero products is
    cheaper), and the whole condition where it is tensorized (the intrinsic computes
    the full sum); the others are tested once per iteration of the loops they read
    (``hoist_guards``).  In a GPU kernel the condition is dropped too: its threads
    compute the zero products, as they did before convolutions skipped them (a test per
    tap in every thread, not measured on a device).  A stage with the pragma
    ``zero_terms`` on one of its loops computes them too (a template whose tap loops
    would otherwise get bounds read from its parallel task, not unrolled)."""
    if not st.op.attrs.get(ZERO_WHERE) or (isinstance(cond, Const) and cond.value is True):
        return cond
    if tensorized or _in_kernel(st) or any(
            name == "zero_terms" for a in st.iter_attrs.values() for name, _ in a.pragmas):
        return Const(True, "bool")
    lanes = [iv.var for iv in st.leaf_iter_vars
             if getattr(st.iter_attrs.get(iv), "kind", None) == "vectorized"]
    kept = [t for t in conjuncts(cond) if not any(uses_var(t, v) for v in lanes)]
    return _op.all_(*kept) if kept else Const(True, "bool")


def _in_kernel(st: Stage) -> bool:
    """Whether stage ``st`` runs in a GPU kernel: a loop of its own or of a stage it is
    computed at (up the chain) is bound to a thread axis."""
    seen = set()
    while st is not None and id(st) not in seen:
        seen.add(id(st))
        if any(_thread_tag(st, iv) for iv in st.leaf_iter_vars):
            return True
        st = st.attach_stage if st.attach_type == "scope" else None
    return False


def _loop_vars(stmt) -> list:
    """The counters of the loops in ``stmt``."""
    return [n.var for n in collect(stmt, lambda n: isinstance(n, For))]


def _rebind_loops(stmt, fresh: dict):
    """``stmt`` with each loop of a counter in ``fresh`` binding its new one."""
    class M(Mutator):
        def visit_For(self, s):
            s = self.generic_visit(s)
            return dataclasses.replace(s, var=fresh[s.var]) if s.var in fresh else s
    return M().visit(stmt)


class _NotPeeled(Exception):
    """:func:`_without_first_point`: a nest that is not loops around one update."""


def _without_first_point(stmt, rvars):
    """The loop nest ``stmt`` (loops, pragmas and guards around one update) over every
    point of its loops but the first of those of ``rvars`` (each from 0): at the
    outermost such loop ``r``, the rest of the nest at ``r = 0`` without its first point,
    then ``r`` from 1 (:data:`SEED_FIRST_TAP`).  None where nothing is left (one point);
    ``_NotPeeled`` for another shape of nest."""
    if isinstance(stmt, For) and stmt.var in rvars:
        # (the copy's loops get counters of their own: a pass may take a counter's
        # range from the loop it first sees binding it)
        body, fresh = substitute(stmt.body, {stmt.var: stmt.min}), {}
        for v in _loop_vars(body):
            fresh[v] = Var(v.name, v.dtype)
        body = _rebind_loops(substitute(body, fresh), fresh)
        rest = _without_first_point(body, {fresh.get(v, v) for v in rvars - {stmt.var}})
        n = int(stmt.extent.value)
        tail = dataclasses.replace(stmt, min=_simplify(stmt.min + 1),
                                   extent=Const(n - 1, stmt.extent.dtype)) if n > 1 else None
        parts = [x for x in (rest, tail) if x is not None]
        return seq(*parts) if parts else None
    if isinstance(stmt, (For, AttrStmt)):
        body = _without_first_point(stmt.body, rvars)
        return None if body is None else dataclasses.replace(stmt, body=body)
    if isinstance(stmt, IfThenElse) and stmt.else_case is None:
        body = _without_first_point(stmt.then_case, rvars)
        return None if body is None else dataclasses.replace(stmt, then_case=body)
    if rvars or not isinstance(stmt, BufferStore):
        raise _NotPeeled
    return None


def _guard(stmt, guards):
    if not guards:
        return stmt
    cond = guards[0]
    for g in guards[1:]:
        cond = And(cond, g)
    return IfThenElse(cond, stmt)


def _aligned_strides(shape, aligns, name, order=None):
    """The strides of a buffer of ``shape`` laid out with its dimensions in ``order``
    (outermost first; default: as they are, row major), each dimension in ``aligns``
    padded to ``factor * k + offset`` elements (``storage_align``)."""
    order = tuple(order) if order is not None else tuple(range(len(shape)))
    strides = [None] * len(shape)
    acc: Expr = Const(1, "int32")
    for d in reversed(order):
        if d in aligns and d == order[-1]:
            raise ScheduleError(f"storage_align on stage {name}: dimension {d} is the "
                                "innermost one in its storage_order, whose stride is 1; align "
                                "an outer dimension")
        if d in aligns:
            factor, offset = aligns[d]
            if not isinstance(acc, Const):
                raise ScheduleError(f"storage_align on stage {name}: the stride of dimension {d} "
                                    f"is {acc}, not a constant; storage_align needs constant "
                                    "inner extents")
            v = acc.value
            v = v + ((offset - v) % factor)
            acc = Const(v, acc.dtype)
        strides[d] = acc
        acc = _simplify(_op.index_mul(acc, shape[d]))
    return tuple(strides)


def schedule_to_stmt(sch: Schedule, args: list):
    """Return (params, body) for the schedule: the first step of lowering."""
    ctx = LowerContext(sch, args)
    ctx.infer_bounds()
    return ctx.params, ctx.make_body(), ctx
