"""Vectorization legality and lane plans for the CPU (a codegen-phase pass, llvm only).

Every ``vectorized`` loop gets an ``AttrStmt("vector_plan", VectorPlan, loop)`` saying
how the code generator emits it; the code generator only follows the plan:

* ``serial``: the loop cannot be widened (:func:`widen_blocker` says why: the body
  allocates, a nested loop's bounds depend on the lane, or a lane-dependent value is
  stored to a lane-invariant address -- a reduction along the vectorized axis); it runs
  as a serial loop tagged ``llvm.loop.vectorize.enable`` for LLVM's loop vectorizer;
* ``widen``: a constant extent ``L <= MAX_WIDEN_LANES`` is one vector of ``L`` lanes
  (LLVM splits wide vectors into registers), where the target can: with AVX-512's
  masks any such ``L``; without them only ``L`` up to the chunk width or a whole
  number of chunks;
* ``pieces``: without masks, ``L <= MAX_WIDEN_LANES`` that is not a whole number of
  chunks (14 float32 on AVX2) runs as ``chunks`` register-wide pieces and a shorter
  last one, in sequence (as one 14-lane vector, LLVM rebuilt an accumulator carried
  around a loop from the stack in every iteration, much slower -- see
  ``strategy.blocks.BlockRules._whole``;
  measurements: benchmarks/DECISIONS.md, "Vectorizer: pieces without masks");
* ``chunks``: a larger constant extent is a loop over ``chunks`` chunks of ``lanes``
  lanes, then the remainder (one scalar iteration, or one shorter vector);
* ``masked``: a symbolic extent is a loop over chunks of ``lanes`` lanes and one
  masked chunk for the tail;
* ``empty`` (no iteration) and ``scalar`` (one);
* ``reduce``: a *serial* loop of a constant ``L <= MAX_REDUCE_LANES`` iterations whose
  body is one update ``acc[I] = acc[I] op e(k)`` of a buffer the function allocates,
  at a lane-invariant address, where ``op`` gives the same result in any order (``||``
  and ``&&`` of bools; ``+`` of integers; ``max``, ``min`` of integers and floats): ``e``
  over the ``L`` lanes as one vector, reduced across its lanes (``llvm.vector.reduce.*``;
  a float max or min as a tree of halves, each step the max itself), then combined with
  ``acc`` once (:func:`horizontal_reduction`; the last lanes of a row reduction of bools,
  integers or float maxima).  A float sum keeps its order (docs/numerics.md): it is not
  planned.
  Also (reason ``select``) a loop that updates several accumulators at once by choosing
  each new value among its old one and one element (an argmax's index and value pair):
  the elements as vectors, their lanes combined pairwise as a tree of neighbours, the
  earlier lane on the accumulator's side (:func:`selection_reduction`; a choice is
  exact in any grouping, and an in-order combine stays in order).

The chunk width is the target's preferred vector width over the widest element the
body touches (:func:`chunk_lanes`).  The plan depends only on the loop and the target:
a loop nested inside a widened body runs serially whatever its plan (the code
generator knows it is inside one).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Tuple

from ..errors import LowerError
from ..ir import dtype as _dt
from ..ir.expr import (
    And, Add, Buffer, BufferLoad, Const, Max, Min, Or, Select, TupleCommReducer, Var, same_as,
)
from ..ir.functor import Mutator, Visitor, free_vars
from ..ir.printer import to_str
from ..ir.stmt import (
    Allocate, AssertStmt, AttrStmt, BufferStore, For, IfThenElse, LetStmt, PrimFunc, SeqStmt,
)
from ..target import as_target

#: a vectorized loop with a constant extent up to this many lanes becomes one vector
MAX_WIDEN_LANES = 64

#: a serial reduction loop of up to this many steps runs as one vector reduced across
#: its lanes (the ``reduce`` plan; the 256 partial results of four vectors of packed
#: bytes: a plane reduction of bools)
MAX_REDUCE_LANES = 256

#: the vector width LLVM prefers on x86, AVX2 and most AVX-512 parts alike (256 bits:
#: it splits wider vectors itself where the CPU has 512-bit registers)
PREFERRED_VECTOR_BYTES = 32

KEY = "vector_plan"


@dataclass(frozen=True)
class VectorPlan:
    """How one vectorized loop is emitted (see the module doc)."""

    how: str                 # serial | widen | pieces | chunks | masked | empty | scalar
    #                          | reduce
    lanes: int = 0           # widen: L; pieces/chunks/masked: the chunk width
    chunks: int = 0          # pieces/chunks: how many whole chunks
    rem: int = 0             # pieces/chunks: the iterations left after them
    reason: str = ""         # serial: why it cannot be widened; reduce: the operator

    def note(self, name: str) -> Optional[str]:
        """The line ``Module.vectorize_notes`` shows for the loop over ``name``."""
        h = self.how
        if h == "serial":
            return (f"vectorized loop over `{name}`: not widened ({self.reason}); "
                    f"emitted as a serial loop with llvm.loop.vectorize.enable")
        if h == "widen":
            return f"vectorized loop over `{name}`: widened to {self.lanes} lanes"
        if h == "pieces":
            return (f"vectorized loop over `{name}`: {self.chunks} pieces of {self.lanes} "
                    f"lanes + {self.rem}")
        if h == "chunks":
            return (f"vectorized loop over `{name}`: {self.chunks} chunks of {self.lanes} lanes"
                    + (f" + {self.rem}" if self.rem else ""))
        if h == "reduce":
            return (f"serial loop over `{name}`: one vector of {self.lanes} lanes reduced "
                    f"across them ({self.reason})")
        if h == "masked":
            return (f"vectorized loop over `{name}`: chunks of {self.lanes} lanes + a masked "
                    f"tail (symbolic extent)")
        return None

    def __str__(self):
        h = self.how
        if h == "serial":
            return f"serial ({self.reason})"
        if h == "widen":
            return f"widen {self.lanes} lanes"
        if h in ("pieces", "chunks"):
            return f"{h} {self.chunks} x {self.lanes} lanes + {self.rem}"
        if h == "masked":
            return f"chunks of {self.lanes} lanes + masked tail"
        if h == "reduce":
            return f"reduce {self.lanes} lanes ({self.reason})"
        return h


class BufferUses(Visitor):
    """Buffers loaded/stored/allocated under a node, in order of first appearance."""

    def __init__(self):
        self.used: List[Buffer] = []
        self._seen = set()
        self.allocated = set()

    def _use(self, b):
        if b not in self._seen:
            self._seen.add(b)
            self.used.append(b)

    def visit_BufferLoad(self, e):
        self._use(e.buffer)
        self.generic_visit(e)

    def visit_BufferStore(self, s):
        self._use(s.buffer)
        self.generic_visit(s)

    def visit_ExternCall(self, s):
        for b in s.buffers:
            self._use(b)
        self.generic_visit(s)

    def visit_Prefetch(self, s):
        self._use(s.buffer)
        self.generic_visit(s)

    def visit_Allocate(self, s):
        self.allocated.add(s.buffer)
        self.generic_visit(s)


def buffer_uses(stmt) -> BufferUses:
    u = BufferUses()
    u.visit(stmt)
    return u


def node_text(node, limit: int = 300) -> str:
    """The first line of ``node`` printed, at most ``limit`` characters (for messages)."""
    try:
        s = to_str(node)
    except Exception:  # noqa: BLE001 - printing must not mask the real error
        s = repr(node)
    s = s.strip()
    if "\n" in s:
        s = s.splitlines()[0] + " ..."
    return s if len(s) <= limit else s[:limit] + " ..."


def widen_blocker(loop: For) -> Optional[str]:
    """Why the vectorized ``loop`` cannot be widened, or None (see the module doc)."""

    def dep(e, varying) -> bool:
        return any(v in varying for v in free_vars(e))

    def walk(s, varying) -> Optional[str]:
        t = type(s)
        if t is SeqStmt:
            for x in s.seq:
                r = walk(x, varying)
                if r:
                    return r
            return None
        if t is For:
            if dep(s.min, varying) or dep(s.extent, varying):
                return f"the bounds of the nested loop over `{s.var.name}` depend on the lane"
            return walk(s.body, varying)
        if t is BufferStore:
            vi = any(dep(i, varying) for i in s.indices)
            if dep(s.value, varying) and not vi:
                return (f"`{node_text(s)}` stores a lane-dependent value to a lane-invariant "
                        f"address (a reduction along the vectorized axis)")
            return None
        if t is IfThenElse:
            return walk(s.then_case, varying) or (
                walk(s.else_case, varying) if s.else_case is not None else None)
        if t is LetStmt:
            if dep(s.value, varying):
                varying = varying | {s.var}
            return walk(s.body, varying)
        if t is Allocate:
            return f"the body allocates {s.buffer.name}"
        if t in (AttrStmt, AssertStmt):
            return walk(s.body, varying)
        return None

    return walk(loop.body, frozenset([loop.var]))


def chunk_lanes(loop: For) -> int:
    """Lanes of one register-wide chunk of ``loop``: the preferred vector width over the
    widest element its body loads or stores (4 to 32)."""
    widest = max((_dt.nbytes(b.dtype) for b in buffer_uses(loop.body).used), default=4)
    return max(4, min(32, PREFERRED_VECTOR_BYTES // widest))


def plan_vector_loop(loop: For, masks: bool) -> VectorPlan:
    """The plan of the vectorized ``loop`` on a target with (``masks``: AVX-512) or without
    lane masks for loads and stores."""
    reason = widen_blocker(loop)
    if reason is not None:
        return VectorPlan("serial", reason=reason)
    if not isinstance(loop.extent, Const):
        return VectorPlan("masked", chunk_lanes(loop))
    L = int(loop.extent.value)
    if L <= 0:
        return VectorPlan("empty")
    if L == 1:
        return VectorPlan("scalar")
    W = None if L <= MAX_WIDEN_LANES and masks else chunk_lanes(loop)
    if L <= MAX_WIDEN_LANES and (W is None or L <= W or L % W == 0):
        return VectorPlan("widen", L)
    nchunks, rem = divmod(L, W)
    return VectorPlan("pieces" if L <= MAX_WIDEN_LANES else "chunks", W, nchunks, rem)


#: whether serial reduction loops are planned ``reduce`` (:func:`horizontal_reduction`;
#: off: they run as serial loops, as before the plan existed)
HORIZONTAL_REDUCTIONS = True

#: whether serial loops of selections (an argmax's combine of its partial results) are
#: planned ``reduce`` too (:func:`selection_reduction`; off: serial loops, and the
#: auto-scheduler's tuple row reductions keep their steps 4L -> L -> 4 -> 1)
SELECTION_REDUCTIONS = True

#: the operators a serial reduction loop may run across vector lanes, by dtype kind:
#: exact in any order (integer sums wrap; a float max or min propagates NaN, and which
#: zero ``max(0.0, -0.0)`` gives is unspecified: :class:`~tecomp.ir.expr.Max`)
_HORIZONTAL = {Or: ("or", "bool"), And: ("and", "bool"), Add: ("add", "int"),
               Max: ("max", "number"), Min: ("min", "number")}


def exact_in_any_order(op_type, dtype: str) -> Optional[str]:
    """The name of operator ``op_type`` (an IR node class) over ``dtype`` where its result
    does not depend on the order of the operands (:data:`_HORIZONTAL`), else None."""
    spec = _HORIZONTAL.get(op_type)
    if spec is None:
        return None
    name, kind = spec
    ok = _dt.is_bool(dtype) if kind == "bool" else _dt.is_int(dtype) or (
        kind == "number" and _dt.is_float(dtype) and FLOAT_MINMAX_REDUCTIONS)
    return name if ok else None


#: whether a float max or min is reduced across vector lanes too (a tree of halves, each
#: step the max itself; off: its row reductions fold to one vector and reduce the lanes
#: in order, as before session 19)
FLOAT_MINMAX_REDUCTIONS = True


def _reads(e, buf: Buffer) -> bool:
    found = []

    class _V(Visitor):
        def visit_BufferLoad(self, x):
            if x.buffer is buf:
                found.append(x)
            self.generic_visit(x)

    _V().visit(e)
    return bool(found)


def horizontal_reduction(loop: For, allocated) -> Optional[Tuple[str, BufferLoad, object]]:
    """``(operator, acc load, e)`` when the serial ``loop`` is a reduction
    ``acc[I] = acc[I] op e(k)`` (or ``e(k) op acc[I]``) that can run as one vector of its
    iterations reduced across the lanes: a constant extent of 2 to MAX_REDUCE_LANES, ``I``
    lane-invariant, ``acc`` a buffer in ``allocated`` (the function's own: no argument
    can alias it) that ``e`` does not read, ``op`` exact in any order
    (:data:`_HORIZONTAL`); else None."""
    if loop.kind != "serial" or not isinstance(loop.extent, Const) or \
            not 2 <= int(loop.extent.value) <= MAX_REDUCE_LANES:
        return None
    st = loop.body
    if type(st) is not BufferStore or st.buffer not in allocated:
        return None
    op = exact_in_any_order(type(st.value), st.value.dtype)
    if op is None:
        return None
    k = loop.var
    if any(k in free_vars(i) for i in st.indices):
        return None

    def is_acc(x):
        return type(x) is BufferLoad and x.buffer is st.buffer and \
            len(x.indices) == len(st.indices) and \
            all(same_as(a, b) for a, b in zip(x.indices, st.indices))

    a, b = st.value.a, st.value.b
    acc, e = (a, b) if is_acc(a) else (b, a) if is_acc(b) else (None, None)
    if acc is None or k not in free_vars(e) or _reads(e, st.buffer):
        return None
    return op, acc, e


@dataclass(frozen=True)
class SelectionReduction:
    """A serial loop that updates several accumulators at once by a *selection*
    (:func:`selection_reduction`): ``(acc_0, acc_1, ...) = pick((acc_j), (e_j(k)))``
    where every new ``acc_j`` is ``acc_j`` or ``e_j(k)``, chosen by conditions on all of
    them (an argmax's index and value)."""

    stores: Tuple[BufferStore, ...]   # acc_j[I] = ... (the loop's stores, in order)
    elems: Tuple[object, ...]         # e_j(k)
    acc: Tuple[Var, ...]              # the old acc_j in ``values``
    new: Tuple[Var, ...]              # e_j in ``values``
    values: Tuple[object, ...]        # the new acc_j over ``acc`` and ``new`` only


def _select_leaves(e) -> list:
    if type(e) is Select:
        return _select_leaves(e.true_value) + _select_leaves(e.false_value)
    return [e]


class _Operands(Mutator):
    """Replaces the loads of the accumulators (at their own address only: anything else
    is recorded as a failure) and the elements ``e_j`` by variables."""

    def __init__(self, stores, elems, acc, new):
        self.stores, self.elems, self.acc, self.new = stores, elems, acc, new
        self.ok = True

    def visit(self, node):
        for e, v in zip(self.elems, self.new):
            if node is e or (type(node) is type(e) and same_as(node, e)):
                return v
        if type(node) is BufferLoad:
            for st, v in zip(self.stores, self.acc):
                if node.buffer is st.buffer:
                    if len(node.indices) == len(st.indices) and \
                            all(same_as(a, b) for a, b in zip(node.indices, st.indices)):
                        return v
                    self.ok = False
                    return node
        return super().visit(node)


def selection_reduction(loop: For, allocated) -> Optional[SelectionReduction]:
    """The :class:`SelectionReduction` of the serial ``loop``, when it can run as one
    vector of its iterations combined across the lanes (a tree of neighbouring lanes,
    the earlier ones on the ``acc`` side: an in-order combine stays in order): a constant
    extent of 2 to MAX_REDUCE_LANES; a body ``let t_j = v_j; acc_j[I] = t_j`` for two or
    more distinct buffers at one lane-invariant address ``I``; each ``v_j`` a tree of
    selects whose leaves are ``acc_j[I]`` and one element ``e_j(k)`` (a selection is
    exact in any grouping: no value is computed, only chosen), which with the conditions
    reads the accumulators only as ``acc_j[I]``; ``e_j`` reads none of them, and reads
    only buffers in ``allocated`` unless every accumulator is one (no argument can
    alias an accumulator it reads); else None."""
    if loop.kind != "serial" or not isinstance(loop.extent, Const) or \
            not 2 <= int(loop.extent.value) <= MAX_REDUCE_LANES:
        return None
    lets, st = [], loop.body
    while type(st) is LetStmt:
        lets.append((st.var, st.value))
        st = st.body
    stores = tuple(st.seq) if type(st) is SeqStmt else (st,)
    if len(lets) < 2 or len(stores) != len(lets) or \
            not all(type(x) is BufferStore for x in stores) or \
            len({id(x.buffer) for x in stores}) != len(stores):
        return None
    k = loop.var
    I = stores[0].indices
    for x, (t, _) in zip(stores, lets):
        if x.value is not t or len(x.indices) != len(I) or \
                not all(same_as(a, b) for a, b in zip(x.indices, I)) or \
                any(k in free_vars(i) for i in x.indices):
            return None
    elems = []
    for x, (_, v) in zip(stores, lets):
        if type(v) is not Select:
            return None
        others = [e for e in _select_leaves(v) if not (
            type(e) is BufferLoad and e.buffer is x.buffer and
            all(same_as(a, b) for a, b in zip(e.indices, I)))]
        if not others or not all(same_as(e, others[0]) for e in others[1:]):
            return None
        e = others[0]
        if k not in free_vars(e) or any(_reads(e, y.buffer) for y in stores):
            return None
        elems.append(e)
    if not all(x.buffer in allocated for x in stores):
        used = BufferUses()
        for e in elems:
            used.visit(e)
        if not all(b in allocated for b in used.used):
            return None
    acc = tuple(Var(f"{x.buffer.name}.a", x.buffer.dtype) for x in stores)
    new = tuple(Var(f"{x.buffer.name}.b", x.buffer.dtype) for x in stores)
    sub = _Operands(stores, elems, acc, new)
    values = tuple(sub.visit(v) for _, v in lets)
    lets_vars = {t for t, _ in lets}
    if not sub.ok or any(k in free_vars(v) or lets_vars.intersection(free_vars(v))
                             for v in values):
        return None
    return SelectionReduction(stores, tuple(elems), acc, new, values)


def selection_reducer(comb) -> bool:
    """Whether ``comb`` is a tuple reducer (a :class:`~tecomp.ir.expr.TupleCommReducer`)
    that only selects (:func:`selects_only`: an argmax), so that a serial loop of its
    combines can be planned ``reduce`` (:func:`selection_reduction`) when
    :data:`HORIZONTAL_REDUCTIONS` and :data:`SELECTION_REDUCTIONS` are on."""
    return HORIZONTAL_REDUCTIONS and SELECTION_REDUCTIONS and selects_only(comb)


def selects_only(comb) -> bool:
    """Whether ``comb`` is a tuple reducer (a :class:`~tecomp.ir.expr.TupleCommReducer`)
    whose every element of its result (and of its in-order result) is a tree of selects
    whose leaves are that element of ``lhs`` or of ``rhs``: a combine that computes no
    value, only chooses (so ``combine(a, a) == a``, and each element of an accumulator
    is always one of the elements combined into it)."""
    if not isinstance(comb, TupleCommReducer):
        return False   # (a single reducer: horizontal_reduction's)
    for res in (comb.result, comb.in_order or comb.result):
        for j, r in enumerate(res):
            leaves = _select_leaves(r)
            if type(r) is not Select or \
                    not all(x is comb.lhs[j] or x is comb.rhs[j] for x in leaves):
                return False
    return True


#: the ``reason`` of a ``reduce`` plan of a :class:`SelectionReduction`
SELECT = "select"


class LoopPlanner(Mutator):
    """Wraps every loop of kind ``kind`` in ``AttrStmt(key, plan(loop), loop)`` (the
    codegen-phase plan passes); a loop planned already is kept, and a hand-written
    AttrStmt using ``key`` is a LowerError."""

    key, kind, plan_type = "", "", object

    def plan(self, loop: For):
        raise NotImplementedError

    def visit_body(self, s: For):
        return self.visit(s.body)

    def visit_For(self, s):
        body = self.visit_body(s)
        loop = s if body is s.body else For(s.var, s.min, s.extent, s.kind, body, s.thread_tag)
        if s.kind != self.kind:
            return loop
        return AttrStmt(self.key, self.plan(loop), loop)

    def visit_AttrStmt(self, s):
        if s.key == self.key:
            if isinstance(s.value, self.plan_type) and isinstance(s.body, For):
                return s  # planned already
            raise LowerError(f"the AttrStmt key {self.key!r} is the lowering's own (a "
                             f"{self.plan_type.__name__} on a loop); name the attribute "
                             f"differently")
        return self.generic_visit(s)


class _Plan(LoopPlanner):
    key, kind, plan_type = KEY, "vectorized", VectorPlan

    def __init__(self, masks: bool, allocated):
        self.masks = masks
        self.allocated = allocated

    def plan(self, loop: For) -> VectorPlan:
        return plan_vector_loop(loop, self.masks)

    def visit_For(self, s):
        out = super().visit_For(s)
        if s.kind == "serial" and out is s and HORIZONTAL_REDUCTIONS:
            h = horizontal_reduction(s, self.allocated)
            if h is not None:
                return AttrStmt(self.key, VectorPlan("reduce", int(s.extent.value),
                                                     reason=h[0]), s)
            if SELECTION_REDUCTIONS and selection_reduction(s, self.allocated) is not None:
                return AttrStmt(self.key, VectorPlan("reduce", int(s.extent.value),
                                                     reason=SELECT), s)
        return out


def vector_plan_pass(func: PrimFunc) -> PrimFunc:
    """Give every vectorized loop its :class:`VectorPlan` for ``func.attrs["target"]``."""
    masks = as_target(func.attrs.get("target", "llvm")).has_feature("avx512f")
    body = _Plan(masks, buffer_uses(func.body).allocated).visit(func.body)
    return func if body is func.body else func.with_body(body)

