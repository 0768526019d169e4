"""Loop partitioning: split a loop where a guard is known to hold.

Rule: in ``for (v, m, E) { ... if (a*v + r < N) S ... }`` with ``a > 0`` a constant,
``N`` invariant in the loop and ``r`` an expression of loop counters *inside* the loop
(range ``[rlo, rhi]``, which must not depend on ``v``), the guard holds for every inner
iteration while ``v < (N - rhi - 1) // a + 1`` and fails for every one once
``v >= ceil((N - rlo) / a)``.  (Internally the guard is rewritten ``a*v + (r - N) < 0``.)  The loop
becomes a main part without the guard and a guarded tail::

    for (v, m, K) { ... S ... }           K = clamp((N - rhi - 1) // a + 1 - m, 0, E)
    for (v, m + K, E - K) { ... if (a*v + r < N) S ... }

An ``if`` term ``a >= b`` linear in ``v`` (a lower bound either way: a convolution's tap
inside the image, ``y + ky >= 1``) splits the loop too, as a select's bound (below):
the first output rows go apart, their tap loops starting past the padding (a part
where the guard fails for every inner value loses the guarded statement).

This is what makes a non-divisible split cheap: the vectorized or unrolled inner loop
of the main part has no guard, so it stays vectorized/unrolled.  Loops bound to GPU
threads are not partitioned, vectorized loops only where every part has a constant
width (on the CPU: otherwise the guard stays a per-lane mask), nor
is an unrolled loop inside a GPU kernel at a split point that is not a constant (it
would no longer unroll, and the register arrays it indexes would go to local memory),
nor a loop in a GPU kernel at a point that reads ``threadIdx`` where its body holds a
step of the whole block (a shared copy by the block's threads, a barrier): every thread
of the block must reach it the same number of times.

The same for the condition of a ``select`` that is a stored value, bounding the loop's
counter either way (a padded input ``P[y, x] = select(y >= 1 && y <= H && ..., X[y - 1,
...], 0)``): a lower bound ``rest < c*v`` gives a part where it is false (the select is
its false value), a part where it depends on the inner counters, and the main part
without it; an upper bound, as the rule above.  Only for loops that store into no other
buffer than the select's (the padding's own loops): a convolution's task loop around the
padding it computes per task would otherwise be copied whole per part.

A loop under ``pragma(axis, "partition")`` (Halide's ``Partition::Always``) is also
split on the conditions of the selects anywhere in the values its body stores, whatever
else it stores: a padded input inlined into a convolution
(``O += select(1 <= y + ry && ..., X[y + ry - 1, ...], 0) * W``) is then read without a
test in the blocks inside the image, with one in the border blocks.  The pragma is the
schedule's word that the copies of the body are worth it.

A loop under ``pragma(axis, "no_partition")`` (Halide's ``never_partition``) is not
split: its guards stay where they are, or are partitioned at the loops inside it.  A
guard that is tested once per iteration of a big body (whether a block lies inside the
tensor at all) costs less than a second copy of that body.

Partitioning copies loop bodies, and each copy may be partitioned again: a deep nest of
splits with run-time tails (six on a symbolic extent) grew 2.5 KB of IR into 2.4 MB, which
the passes after it and LLVM then took minutes over (found by the fuzzing campaign,
seeds 3010333 and 3011210).  So the IR nodes it adds are budgeted: at most
``GROWTH`` times the function's nodes (and at least ``MIN_BUDGET``).  Loops are
visited outermost first and each main part before its tails, so the budget goes to the
guard-free main parts; what is left over keeps its guards (correct, just not partitioned).

A ``parallel`` loop keeps one parallel region: its parts become the branches of its
body (``parallel (v, m, E) { if (v < m + K) main else tail }``), so that a short tail
part (often one iteration) does not run as a region of its own on one thread.
"""
from __future__ import annotations

from ..ir import op as _op
from ..ir.arith import eval_interval
from ..ir.expr import GE, GT, LE, LT, Add, And, Call, Const, Mul, Range, Select, Sub, Var
from ..ir.functor import Mutator, Visitor, _walk_vars, children, collect, substitute, uses_var
from ..ir.stmt import AttrStmt, For, IfThenElse, SeqStmt, annotated_loop, seq


def _linear(e, v):
    """(a, rest) with e == a*v + rest, a a Python int and rest free of v; or None.  ``v``
    is a loop counter, or any expression (a tile index ``f % c``), found by identity."""
    if e is v:
        return 1, Const(0, e.dtype)
    if not (uses_var(e, v) if type(v) is Var else collect(e, lambda x: x is v)):
        return 0, e
    t = type(e)
    if t is Add or t is Sub:
        la, lb = _linear(e.a, v), _linear(e.b, v)
        if la is None or lb is None:
            return None
        if t is Add:
            return la[0] + lb[0], _op.add(la[1], lb[1])
        return la[0] - lb[0], _op.sub(la[1], lb[1])
    if t is Mul:
        for x, y in ((e.a, e.b), (e.b, e.a)):
            if isinstance(y, Const):
                lx = _linear(x, v)
                if lx is None:
                    return None
                return lx[0] * y.value, _op.mul(lx[1], y)
    return None


def _terms(cond):
    if isinstance(cond, And):
        return _terms(cond.a) + _terms(cond.b)
    return [cond]


def _normalized(term, v):
    """``term`` (a comparison) as ``coef*v + rest < 0`` over the integers: (coef, rest),
    or None when it is not linear in ``v``."""
    t = type(term)
    if t is LT or t is LE:
        d = _op.sub(term.a, term.b)              # a - b < 0  /  a - b <= 0
    elif t is GT or t is GE:
        d = _op.sub(term.b, term.a)              # b - a < 0  /  b - a <= 0
    else:
        return None
    if d.dtype not in ("int32", "int64"):
        return None
    lin = _linear(d, v)
    if lin is None or lin[0] == 0:
        return None
    if t is LE or t is GE:                       # x <= 0  <=>  x - 1 < 0
        return lin[0], _op.sub(lin[1], Const(1, lin[1].dtype))
    return lin


class _FindGuards(Visitor):
    """Guard terms ``a*v + r < N`` under a loop, with the ranges of inner loop counters:
    the ``a < b`` terms (``a > 0``) of ``if`` conditions, and every comparison linear in
    the loop's counter of the condition of a ``select`` that is a stored value (a padded
    input: ``P[y, x] = select(1 <= y && y <= H, X[y - 1, x], 0)``), whichever way it
    bounds the counter; ``nested``: of every select in a stored value (the loop's
    ``partition`` pragma)."""

    def __init__(self, v, nested=False):
        self.v = v
        self.nested = nested
        self.inner = {}
        self.found = []
        self.selects = []
        self.nested_selects = []
        self.stored = set()

    def visit_For(self, s):
        self.inner[s.var] = Range(s.min, s.extent)
        self.generic_visit(s)

    def visit_IfThenElse(self, s):
        for term in _terms(s.cond):
            if isinstance(term, LT) and uses_var(term, self.v):
                # a < b  <=>  coef*v + rest < 0, rest free of v (inner counters are relaxed)
                lin = _linear(_op.sub(term.a, term.b), self.v)
                if lin is not None and lin[0] > 0:
                    self.found.append((term, lin, dict(self.inner)))
            elif isinstance(term, GE) and uses_var(term, self.v):
                # a >= b, either way (a convolution's tap inside the image, ``y + ky >=
                # 1``: its first taps split off the rows they skip)
                lin = _normalized(term, self.v)
                if lin is not None:
                    self.found.append((term, lin, dict(self.inner)))
        self.generic_visit(s)

    def visit_BufferStore(self, s):
        self.stored.add(s.buffer)
        if isinstance(s.value, Select) and not self.nested:
            self.selects += self._select_terms(s.value)
        if self.nested:
            for e in collect(s.value, lambda n: isinstance(n, Select)):
                self.nested_selects += self._select_terms(e)
        self.generic_visit(s)

    def _select_terms(self, e):
        out = []
        for term in _terms(e.cond):
            if uses_var(term, self.v):
                lin = _normalized(term, self.v)
                if lin is not None:
                    out.append((term, lin, dict(self.inner)))
        return out

    def guards(self):
        """The guards found; a select's only under a loop that stores nothing else than
        the stage the select is stored into (the padded input's own loops: partitioning
        a loop around other stages, e.g. a convolution's task loop around the padding
        it computes per task, would copy them whole for each part), or, under the
        ``partition`` pragma, any select's."""
        if self.nested:
            return self.found + self.nested_selects
        return self.found + (self.selects if len(self.stored) == 1 else [])


class _DropTerm(Mutator):
    """Replace one guard term by its known value (True or False) in every If and Select
    condition."""

    def __init__(self, term, value=True):
        self.term = term
        self.value = value

    def visit_Select(self, e):
        terms = _terms(e.cond)
        kept = [t for t in terms if t != self.term]
        if len(kept) == len(terms):
            return self.generic_visit(e)
        if not self.value:
            return self.visit(e.false_value)
        if not kept:
            return self.visit(e.true_value)
        cond = kept[0]
        for t in kept[1:]:
            cond = And(cond, t)
        return Select(cond, self.visit(e.true_value), self.visit(e.false_value), e.dtype)

    def visit_IfThenElse(self, s):
        then = self.visit(s.then_case)
        els = self.visit(s.else_case) if s.else_case is not None else None
        terms = [t for t in _terms(s.cond) if t != self.term]
        if len(terms) == len(_terms(s.cond)) and then is s.then_case and els is s.else_case:
            return s
        if len(terms) != len(_terms(s.cond)) and not self.value:
            return els if els is not None else SeqStmt(())
        if not terms:
            return then
        cond = terms[0]
        for t in terms[1:]:
            cond = And(cond, t)
        return IfThenElse(cond, then, els)


#: each subtree's size and condition variables worked out once per pass
#: (:class:`_Subtrees`); False: each loop walks its whole body again (the cost before;
#: ``benchmarks/build_time.py --ab`` times both)
WALK_ONCE = True

#: the IR nodes partitioning may add, as a multiple of the function's
GROWTH = 4
#: ... and at least this many
MIN_BUDGET = 2000


_NO_VARS = frozenset()


class _Subtrees:
    """What partitioning asks of each subtree, worked out once per node object: its size
    (the nodes the generic walk visits, itself included: statements and the expressions
    in them) and the Vars read by the conditions of the ``if`` statements and ``select``
    expressions in it (a loop whose counter none of them reads has no guard to partition
    on: its body is not searched).  Each loop of a nest asked this of its whole body, the
    walks costing depth times size; the mutator keeps unchanged subtrees as the same
    objects, so a partitioned loop's parts reuse what is known of them.  Nodes are kept
    alive by the table (an id is not reused while it holds them)."""

    def __init__(self):
        self.memo = {}   # id(node) -> (node, size, condition vars)

    def facts(self, node):
        """``(size, condition vars)`` of ``node``."""
        memo = self.memo
        got = memo.get(id(node))
        if got is not None:
            return got[1], got[2]
        stack = [node]
        pop, push = stack.pop, stack.append
        while stack:
            n = pop()
            if type(n) is tuple:          # (node,): its children are done
                n = n[0]
                kids = children(n)
                size = 1
                cv = _NO_VARS
                for k in kids:
                    _, ks, kv = memo[id(k)]
                    size += ks
                    if kv:
                        cv = kv if not cv else cv | kv
                if type(n) is IfThenElse or type(n) is Select:
                    own = frozenset(_walk_vars(n.cond)[0])   # as uses_var sees them
                    if own:
                        cv = own if not cv else cv | own
                memo[id(n)] = (n, size, cv)
                continue
            if id(n) in memo:
                continue
            push((n,))
            for k in children(n):
                if id(k) not in memo:
                    push(k)
        got = memo[id(node)]
        return got[1], got[2]

    def size(self, node) -> int:
        return self.facts(node)[0]


class _Count(Visitor):
    """The nodes of a tree (statements and the expressions in them)."""

    def __init__(self):
        self.n = 0

    def visit(self, node):
        self.n += 1
        return super().visit(node)


def _size(stmt) -> int:
    """The nodes of ``stmt`` (one walk; :class:`_Subtrees` for many questions)."""
    c = _Count()
    c.visit(stmt)
    return c.n


class LoopPartition(Mutator):
    def __init__(self, simplify, ranges=None, budget=None):
        self.simplify = simplify
        self.ranges = ranges or {}
        self.in_kernel = 0  # GPU thread loops around the visited statement
        self.lanes = []     # the threadIdx counters around it (they differ in a block)
        self.held = {}      # id -> the loops under pragma no_partition (kept alive)
        self.always = {}    # id -> the loops under pragma partition (kept alive)
        #: IR nodes partitioning may still add (None: unlimited)
        self.budget = budget
        #: partitions not made for the budget
        self.refused = 0
        self.subtrees = _Subtrees()

    def visit_AttrStmt(self, s):
        if s.key in ("pragma_no_partition", "pragma_partition"):
            x = annotated_loop(s.body)
            if x is not None:
                (self.held if s.key == "pragma_no_partition" else self.always)[id(x)] = x
        out = self.generic_visit(s)
        if s.key == "pragma_partition" and isinstance(out, AttrStmt) and \
                annotated_loop(out.body) is None:
            return out.body   # the loop was split into its parts: the pragma is spent
        return out

    def visit_For(self, s):
        if s.kind == "thread":
            self.in_kernel += 1
            lane = s.thread_tag.startswith("threadIdx")
            if lane:
                self.lanes.append(s.var)
            try:
                body = self.visit(s.body)
            finally:
                self.in_kernel -= 1
                if lane:
                    self.lanes.pop()
            return s if body is s.body else For(s.var, s.min, s.extent, s.kind, body, s.thread_tag)
        # Outermost loops first: partitioning i.outer leaves the whole main part guard-free.
        if s.kind in ("serial", "parallel", "unrolled", "vectorized") \
                and self.held.get(id(s)) is not s:
            found = self._partition(s)
            parts, main = found if found is not None else (None, 0)
            if parts is not None and s.kind == "vectorized" and (self.in_kernel or not (
                    all(_vector_width_ok(p.extent) for p in parts) or
                    len(parts) == 1 and _narrow_width_ok(parts[0].extent))):
                # a vectorized loop is split only into parts of power-of-two constant
                # widths, or narrowed to one part of at most 16 lanes (on the CPU): e.g.
                # the 48-lane tail panel whose last 16 lanes are guarded off becomes a
                # 32-lane loop, and the 16-lane vector over the last 12 pixels of a row of
                # 28 a 12-lane one (LLVM pads it to a register), without the per-lane
                # mask (an
                # accumulator under a mask is a masked load/store that LLVM cannot keep
                # in a register across the reduction loop: measured 10x slower than the
                # unmasked loop); other widths (a 29-lane accumulator) LLVM legalizes
                # worse than the mask (gemm 127x509x257: 30% slower)
                parts = None
            if parts is not None and s.kind == "unrolled" and self.in_kernel \
                    and not all(isinstance(p.extent, Const) for p in parts):
                # in a GPU kernel an unrolled loop indexes register arrays (a thread's
                # micro-tile): split at a run-time point, it would not unroll and the
                # arrays would go to local memory; the guard is cheaper (predication)
                parts = None
            if parts is not None and self.in_kernel and self._differs_in_block(parts) \
                    and _block_wide(s.body):
                # the block's threads would split the loop at different points, and a
                # block-wide step in it (a shared copy by the block's threads, a barrier)
                # must be reached by all of them the same number of times
                parts = None
            if parts is not None and self.budget is not None:
                extra = (self.subtrees.size(s.body) if WALK_ONCE else _size(s.body)) * \
                    (len(parts) - 1)
                if extra > self.budget:
                    parts = None   # over budget: this loop keeps its guards
                    self.refused += 1
                else:
                    self.budget -= extra
            if parts is not None and self.always.get(id(s)) is s:
                for t in parts:   # each part may be split again on another select
                    self.always[id(t)] = t
            if parts is not None and s.kind == "parallel" and len(parts) > 1:
                # one parallel region whose body picks its part: splitting it into
                # several parallel loops would run a short tail region (often a single
                # iteration) on one thread while the others wait
                return self._unswitch_parallel(s, parts, main)
            if parts is not None:
                # the main part may hold other guards: partition it again; the others
                # keep this guard, so only their bodies are visited
                out = []
                for i, t in enumerate(parts):
                    if i == main:
                        out.append(self.visit(t))
                        continue
                    tb = t.body
                    if isinstance(t.extent, Const) and t.extent.value == 1:
                        # a one-iteration tail (the last block of a split): its counter
                        # is a constant, so guards inside it on inner loops become
                        # constant bounds (a vectorized loop can then be narrowed)
                        tb = self.simplify(substitute(tb, {t.var: t.min}), self.ranges)
                    tbody = self.visit(tb)
                    out.append(For(t.var, t.min, t.extent, t.kind, tbody, t.thread_tag))
                return seq(*out)
        body = self.visit(s.body)
        return s if body is s.body else For(s.var, s.min, s.extent, s.kind, body, s.thread_tag)

    def _partition(self, s):
        """(main, tail) where the guard holds in main, or None.  The part of the tail
        where the guard is always false loses the guarded statement altogether."""
        if WALK_ONCE and s.var not in self.subtrees.facts(s.body)[1]:
            return None   # no condition in the body reads the counter: no guard on it
        finder = _FindGuards(s.var, nested=self.always.get(id(s)) is s)
        finder.visit(s.body)
        for term, (a, rest), inner in finder.guards():
            dt = _index_dtype(s, a)
            itv = eval_interval(self.simplify(rest, self.ranges), inner)
            if itv.hi is None or itv.lo is None or uses_var(itv.hi, s.var) or uses_var(itv.lo, s.var):
                continue
            if a < 0:
                parts = self._partition_lower(s, term, -a, itv)
                if parts is None:
                    continue
                return parts
            n, ca = Const(0, dt), Const(a, dt)
            # guard true for all inner values while a*v + hi < n
            end_true = _op.ceildiv(_op.sub(n, itv.hi), ca)
            # guard false for all inner values once a*v + lo >= n
            start_false = _op.ceildiv(_op.sub(n, itv.lo), ca)
            k = self._clamp(_op.sub(end_true, s.min), Const(0, dt), s.extent)
            if isinstance(k, Const) and k.value == 0:
                dead = self._dead_tail(s, term, start_false)
                if dead is not None:
                    return dead, -1
                continue
            end_true = self.simplify(end_true, self.ranges)
            sf = self.simplify(_op.sub(start_false, s.min), self.ranges)
            if self.simplify(start_false, self.ranges) == end_true:
                k2 = k  # no inner counter moves the guard: no guarded middle part
            elif sf == s.extent:
                k2 = s.extent
            else:
                k2 = self._clamp(sf, k, s.extent)
            parts = []
            body_true = self.simplify(_DropTerm(term, True).visit(s.body), self.ranges)
            parts.append(For(s.var, s.min, k, s.kind, body_true, s.thread_tag))
            mid = self.simplify(_op.sub(k2, k), self.ranges)
            if not (isinstance(mid, Const) and mid.value == 0):
                parts.append(For(s.var, self.simplify(_op.add(s.min, k), self.ranges), mid, s.kind,
                                 s.body, s.thread_tag))
            rest_ext = self.simplify(_op.sub(s.extent, k2), self.ranges)
            body_false = self.simplify(_DropTerm(term, False).visit(s.body), self.ranges)
            if not (isinstance(rest_ext, Const) and rest_ext.value == 0) and not _is_empty(body_false):
                parts.append(For(s.var, self.simplify(_op.add(s.min, k2), self.ranges), rest_ext,
                                 s.kind, body_false, s.thread_tag))
            return parts, 0
        return None

    def _dead_tail(self, s, term, start_false):
        """The parts of loop ``s`` whose guard holds for no iteration in full but fails
        for every inner value from a constant point on: the iterations before it (the
        guard kept) and those after it without the guarded statement (dropped when
        nothing else is left), or None.  The tail block of a split panel whose rows end
        inside its first vector (a row of 56 in panels of three vectors: the last block
        has 8 lanes) then runs one narrower vector instead of three guarded ones, two of
        them doing nothing (their accumulators masked, through memory).  Not for a
        parallel loop (its parts are branches of one region, see ``_unswitch_parallel``)."""
        if s.kind == "parallel" or not isinstance(s.extent, Const):
            return None
        sf = self.simplify(_op.sub(start_false, s.min), self.ranges)
        if not isinstance(sf, Const) or not 0 < sf.value < s.extent.value:
            return None
        parts = [For(s.var, s.min, sf, s.kind, s.body, s.thread_tag)]
        body_false = self.simplify(_DropTerm(term, False).visit(s.body), self.ranges)
        if not _is_empty(body_false):
            parts.append(For(s.var, self.simplify(_op.add(s.min, sf), self.ranges),
                             Const(s.extent.value - sf.value, s.extent.dtype), s.kind, body_false,
                             s.thread_tag))
        return parts

    def _partition_lower(self, s, term, c, itv):
        """The parts of loop ``s`` for a guard ``rest < c*v`` (``c > 0``; ``rest`` in
        ``itv`` over the inner counters), false for small ``v`` and true from some
        point on: a part where it is false for every inner value (its statement
        gone), a part where it depends on them (the guard kept), and the main part
        without it.  ((parts, index of the main part), or None.)"""
        dt = _index_dtype(s, c)
        one, cc = Const(1, dt), Const(c, dt)
        # false for every inner value while c*v <= lo; true for every one once c*v > hi
        end_false = _op.add(_op.floordiv(itv.lo, cc), one)
        start_true = _op.add(_op.floordiv(itv.hi, cc), one)
        kf = self._clamp(_op.sub(end_false, s.min), Const(0, dt), s.extent)
        if self.simplify(end_false, self.ranges) == self.simplify(start_true, self.ranges):
            kt = kf   # no inner counter moves the guard: no part where it depends on them
        else:
            kt = self._clamp(_op.sub(start_true, s.min), kf, s.extent)
        if isinstance(kt, Const) and isinstance(s.extent, Const) and kt.value == s.extent.value:
            return None   # no iteration where the guard is sure to hold
        parts = []
        if not (isinstance(kf, Const) and kf.value == 0):
            body_false = self.simplify(_DropTerm(term, False).visit(s.body), self.ranges)
            if not _is_empty(body_false):
                parts.append(For(s.var, s.min, kf, s.kind, body_false, s.thread_tag))
        mid = self.simplify(_op.sub(kt, kf), self.ranges)
        if not (isinstance(mid, Const) and mid.value == 0):
            parts.append(For(s.var, self.simplify(_op.add(s.min, kf), self.ranges), mid, s.kind,
                             s.body, s.thread_tag))
        if isinstance(kt, Const) and kt.value == 0:
            return None   # the guard holds everywhere already: nothing to split off
        body_true = self.simplify(_DropTerm(term, True).visit(s.body), self.ranges)
        parts.append(For(s.var, self.simplify(_op.add(s.min, kt), self.ranges),
                         self.simplify(_op.sub(s.extent, kt), self.ranges), s.kind, body_true,
                         s.thread_tag))
        return parts, len(parts) - 1

    def _unswitch_parallel(self, s, parts, index=0):
        """``parallel (v, m, E) { if (v < m + K1) main else if ... tail }``: the parts of
        a partitioned parallel loop as branches of one loop body (``index``: the main
        part's)."""
        main = self.visit(parts[index])  # may unswitch again on another guard of v
        if not (isinstance(main, For) and main.var is s.var):
            return seq(*[main if i == index else For(t.var, t.min, t.extent, t.kind,
                                                     self.visit(t.body), t.thread_tag)
                         for i, t in enumerate(parts)])
        bodies = [main.body if i == index else self.visit(t.body) for i, t in enumerate(parts)]
        out = bodies[-1]
        for t, b in zip(reversed(parts[1:]), reversed(bodies[:-1])):
            out = IfThenElse(_op.compare(LT, s.var, t.min), b, out)
        return For(s.var, s.min, s.extent, s.kind, out, s.thread_tag)

    def _differs_in_block(self, parts) -> bool:
        """Whether a bound of ``parts`` reads a ``threadIdx`` counter around the loop."""
        return any(uses_var(e, v) for t in parts for e in (t.min, t.extent)
                   for v in self.lanes)

    def _clamp(self, x, lo, hi):
        return self.simplify(_op.minimum(_op.maximum(x, lo), hi), self.ranges)


def _index_dtype(loop, coef: int) -> str:
    """The integer type of a partition point of ``loop`` for a guard ``coef*v + ...``: the
    loop counter's, or int64 where the coefficient (a split factor past 2**31) is out
    of int32's range."""
    if loop.var.dtype == "int64" or not -2**31 <= coef < 2**31:
        return "int64"
    return "int32"


def _vector_width_ok(extent) -> bool:
    """A constant power-of-two lane count (or 0: an empty part)."""
    if not isinstance(extent, Const):
        return False
    n = extent.value
    return n >= 0 and n & (n - 1) == 0


def _narrow_width_ok(extent) -> bool:
    """A constant lane count of at most 16 (one register)."""
    return isinstance(extent, Const) and 0 < extent.value <= 16


def _block_wide(stmt) -> bool:
    """Whether ``stmt`` holds a loop bound to a GPU thread axis or a ``syncthreads()``:
    a step all the threads of a block take together."""
    return bool(collect(stmt, lambda n: isinstance(n, For) and n.kind == "thread" or
                        isinstance(n, Call) and n.op == "syncthreads"))


def _is_empty(s):
    return isinstance(s, SeqStmt) and not s.seq


def loop_partition(func, simplify, ranges=None, budget="auto"):
    """``budget``: the IR nodes partitioning may add ("auto": ``GROWTH`` times the
    function's, at least ``MIN_BUDGET``; None: unlimited)."""
    lp = LoopPartition(simplify, ranges)
    if budget == "auto":
        budget = max(MIN_BUDGET, GROWTH * (lp.subtrees.size(func.body) if WALK_ONCE
                                           else _size(func.body)))
    lp.budget = budget
    body = lp.visit(func.body)
    return func if body is func.body else func.with_body(body)
