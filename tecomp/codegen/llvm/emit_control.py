"""Control flow in the LLVM function emitter (:class:`_ControlEmitter`, a part of
:class:`~tecomp.codegen.llvm.emitter._FnEmitter`): the error exit (:meth:`report` records
the first error and jumps there, :meth:`guard` branches to a failure path), builders of
``if``, of a value chosen by a branch and of counted loops, code run under a lane mask,
``IfThenElse`` and ``AssertStmt``, and the loops: serial, unrolled, vectorized (as the
``vector_plan`` pass planned it: widened, in pieces, in chunks, a masked tail) and
parallel (outlined into a task that the thread pool runs).  The rules: "Loops",
"vectorized" and "parallel" in the docstring of :mod:`tecomp.codegen.llvm.emitter`.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable, Optional

import llvmlite.ir as ir

from ...errors import BuildError, InternalError
from ...ir import dtype as _dt
from ...ir.arith import Analyzer
from ...ir.expr import (EQ, GE, GT, LE, LT, NE, And, BufferLoad, Const, Expr, Max, Min, Not, Or,
                        Select, Var, same_as)
from ...ir.functor import Mutator, collect, substitute, uses_var
from ...ir.stmt import AssertStmt, AttrStmt, BufferStore, For, IfThenElse, LetStmt, SeqStmt
from ...lower import parallel as _par
from ...lower import vectorize as _vec
from ...lower.passes import MAX_FULL_UNROLL  # (the unroll budget counts with it)
from ...lower.vectorize import node_text
from .abi import ERR_ASSERT, ERR_WORDS
from .values import _I1, _I32, _I64, _PTR, Val, _i64_at, _poison, _sanitize


#: an unrolled loop whose extent is symbolic (a tail that loop partitioning left, a block
#: of a symbolic shape: ``min(n - 8*i, 8)``) but at most this is unrolled at code
#: generation too, each copy under ``if k < extent``, where the unrolled loops around it
#: and it make at most ``MAX_GUARDED_COPIES`` copies of its body
MAX_GUARDED_UNROLL = 16
MAX_GUARDED_COPIES = 64

#: past those budgets, such a loop (its trip count unknown to LLVM) is left to LLVM's
#: unroller with this count (``llvm.loop.unroll.count``; the bound is over 16 there): a
#: count it honours, with a remainder loop.  Asked only to ``unroll.enable`` a loop whose
#: trip count it does not know, LLVM does nothing and prints "loop not unrolled" to the
#: process's stderr (the tail of ``split(x, factor=32)`` of a symbolic ``x``: issue 49).
RUNTIME_UNROLL_COUNT = 4

#: an unrolled loop of float ``max``/``min`` updates of one accumulator (a column
#: reduction's rows, ``acc[j] = max(acc[j], x[k, j])`` for the copies' ``k``) is one
#: update of the accumulator by every copy's value (``max(max(acc, x0), x1)``, the same
#: order), whose pairs of values get one NaN test each (``_ExprEmitter._minmax_pair``)
#: where the policy says so (``paired_nan_tests``: AVX-512, the test a compare into a
#: mask register)
PAIRED_NAN_TESTS = True

#: an unrolled loop of a float argmax's (argmin's) updates of one accumulator pair (a
#: column argmax's rows: keep the value where ``acc >= x || acc != acc``) runs two rows
#: a step under one NaN test of them: where neither row holds a NaN in any lane, each
#: row's update is one ordered compare (keep where ``!(x > acc)``: a NaN accumulator
#: stays), else the exact update (``_ControlEmitter._selection_pairs``); where the
#: policy says so (``paired_nan_tests``)
PAIRED_SELECTION_TESTS = True

#: whether an argmax's or argmin's lanes (a float value and its index, the first or the
#: last index among equal values, NaN first) are combined by matching
#: (:meth:`Emitter._selection_match`): the lanes' max (min) in one reduction, the lanes
#: equal to it (or, where a lane is NaN, the NaN lanes) masked, the smallest (largest)
#: index among them in a second; off: the tree of pairs combined with the full
#: condition at every step (``reductions.py --match-off``)
SELECTION_MATCH = True
#: whether an argmax's (argmin's) lanes over integer values (signed or not, any width)
#: are matched too (with :data:`SELECTION_MATCH`): the lanes' integer max (min), no NaN
#: lanes; off: their tree, as before session 28 (``reductions.py --match-ints-off``).
#: int32 rows of 256 / 64 in cache 1.19-1.20x / 1.26x faster (Zen 4, 1 thread)
SELECTION_MATCH_INTS = True
#: the fewest lanes matched so (a block of fewer: the tree; 2 lanes by matching ran 1.4x
#: slower than their one combine, argmin over rows of 3, Zen 4)
SELECTION_MATCH_LANES = 8

#: the accumulator pair of such a run (:data:`PAIRED_SELECTION_TESTS`) held in registers
#: through it: loaded once before its first step, each step's two branches joined by
#: phis, stored once after its last (``_ControlEmitter._selection_pairs_in_registers``);
#: off: each step's branches store the pair and the next step loads it back, which
#: LLVM did not forward across the branches (a column argmax of 8x64x128x256 over the
#: middle axis stored both accumulators and reloaded the index every two rows)
SELECTION_PAIRS_IN_REGISTERS = True


def guarded_unroll_count(extent: Expr) -> Optional[int]:
    """The constant upper bound of the symbolic ``extent`` where there is one of at most
    :data:`MAX_GUARDED_UNROLL`, else None."""
    hi = Analyzer().cbound(extent)[1]
    return max(hi, 0) if hi is not None and hi <= MAX_GUARDED_UNROLL else None


class _ControlEmitter:
    """The part of :class:`~tecomp.codegen.llvm.emitter._FnEmitter` that emits control flow
    (the state it works on: ``_FnEmitter.__init__``)."""

    # -- error exits -------------------------------------------------------------------------
    def error_block(self):
        if self._err_block is None:
            self._err_block = self.fn.append_basic_block("error")
        return self._err_block

    def report(self, code: int, site: int, dim=None, index=None, extent=None):
        """Record an error (first one wins) and jump to the error exit."""
        b = self.b
        pair = b.cmpxchg(self.err, ir.Constant(_I64, 0), ir.Constant(_I64, code),
                         "seq_cst", "seq_cst")
        won = b.extract_value(pair, 1)
        vals = [ir.Constant(_I64, site), dim, index, extent]

        def store_fields():
            for w, v in enumerate(vals, start=1):
                if v is None:
                    continue
                if isinstance(v, int):
                    v = ir.Constant(_I64, v)
                b.store(v, _i64_at(b, self.err, w), align=8)

        self.if_(won, store_fields)
        b.branch(self.error_block())

    def guard(self, fail, on_fail: Callable[[], None], name: str = "check"):
        """If ``fail`` (i1), run ``on_fail`` (which must end in a jump); else continue."""
        b = self.b
        bad = self.fn.append_basic_block(f"{name}.fail")
        ok = self.fn.append_basic_block(f"{name}.ok")
        br = b.cbranch(fail, bad, ok)
        br.set_weights([1, 1 << 20])
        b.position_at_end(bad)
        on_fail()
        b.position_at_end(ok)

    # -- control flow helpers ----------------------------------------------------------------
    def if_(self, cond, then_fn: Callable[[], None], else_fn: Optional[Callable[[], None]] = None,
            name: str = "if"):
        b = self.b
        then_bb = self.fn.append_basic_block(f"{name}.then")
        else_bb = self.fn.append_basic_block(f"{name}.else") if else_fn else None
        end_bb = self.fn.append_basic_block(f"{name}.end")
        b.cbranch(cond, then_bb, else_bb or end_bb)
        b.position_at_end(then_bb)
        then_fn()
        if not b.block.is_terminated:
            b.branch(end_bb)
        if else_fn:
            b.position_at_end(else_bb)
            else_fn()
            if not b.block.is_terminated:
                b.branch(end_bb)
        b.position_at_end(end_bb)

    def if_value(self, cond, then_fn: Callable[[], Val], else_fn: Callable[[], Val],
                 name: str = "sel") -> Val:
        """``cond ? then_fn() : else_fn()`` evaluating only one side (a branch + phi)."""
        b = self.b
        then_bb = self.fn.append_basic_block(f"{name}.then")
        else_bb = self.fn.append_basic_block(f"{name}.else")
        end_bb = self.fn.append_basic_block(f"{name}.end")
        b.cbranch(cond, then_bb, else_bb)
        b.position_at_end(then_bb)
        tv = then_fn()
        t_end = b.block
        b.position_at_end(else_bb)
        fv = else_fn()
        f_end = b.block
        both_uniform = tv.uniform and fv.uniform
        b.position_at_end(t_end)
        t = tv.s if both_uniform else self.vec(tv)
        b.branch(end_bb)
        b.position_at_end(f_end)
        f = fv.s if both_uniform else self.vec(fv)
        b.branch(end_bb)
        b.position_at_end(end_bb)
        phi = b.phi(t.type, name=name)
        phi.add_incoming(t, t_end)
        phi.add_incoming(f, f_end)
        return Val(phi) if both_uniform else Val(v=phi)

    def loop(self, name: str, lo, n, body_fn: Callable[[object], None], md=None):
        """``for iv in [lo, lo + n)`` (i64), guarded and rotated; ``md``: llvm.loop node."""
        b = self.b
        end = self.iadd(lo, n)
        pre = b.block
        body_bb = self.fn.append_basic_block(f"{name}.body")
        exit_bb = self.fn.append_basic_block(f"{name}.exit")
        b.cbranch(b.icmp_signed("<", lo, end), body_bb, exit_bb)
        b.position_at_end(body_bb)
        iv = b.phi(_I64, name=name)
        iv.add_incoming(lo, pre)
        body_fn(iv)
        nxt = b.add(iv, ir.Constant(_I64, 1), name=f"{name}.next", flags=["nsw"])
        latch = b.block
        br = b.cbranch(b.icmp_signed("<", nxt, end), body_bb, exit_bb)
        if md is not None:
            br.set_metadata("llvm.loop", md)
        iv.add_incoming(nxt, latch)
        b.position_at_end(exit_bb)

    def masked(self, mask, fn):
        """Run ``fn`` with ``mask`` as the lane mask, skipping it when no lane is on."""
        old = self.mask

        def run():
            self.mask = mask
            try:
                fn()
            finally:
                self.mask = old

        if mask is None:
            run()
        else:
            self.if_(self.any_lane(mask), run, name="lanes")

    # -- conditions and assertions -----------------------------------------------------------
    def s_if(self, s: IfThenElse):
        cond = self.expr(s.cond)
        then_fn = lambda: self.stmt(s.then_case)  # noqa: E731
        else_fn = (lambda: self.stmt(s.else_case)) if s.else_case is not None else None
        if id(s) in self._any_lane_ifs and not cond.uniform:
            # (_selection_pairs) a branch on any lane of the condition, not a mask
            self.if_(self.any_lane(self.and_mask(self.vec(cond))), then_fn, else_fn,
                     name="nan")
            return
        if cond.uniform:
            if isinstance(cond.s, ir.Constant):
                if cond.s.constant:
                    then_fn()
                elif else_fn:
                    else_fn()
                return
            self.if_(cond.s, then_fn, else_fn)
            return
        c = self.vec(cond)
        self.masked(self.and_mask(c), then_fn)
        if else_fn:
            self.masked(self.and_mask(self.b.xor(c, self.all_true())), else_fn)

    def s_assert(self, s: AssertStmt):
        if self.checks:
            cond = self.expr(s.cond)
            site = self.mb.add_site("assert", "", s.message, node_text(s.cond))
            b = self.b
            if cond.uniform:
                fail = b.xor(cond.s, ir.Constant(_I1, 1))
                if self.mask is not None:
                    fail = b.and_(fail, self.any_lane(self.mask))
            else:
                fails = b.xor(self.vec(cond), self.all_true())
                fail = self.any_lane(self.and_mask(fails))
            self.guard(fail, lambda: self.report(ERR_ASSERT, site), name="assert")
        self.stmt(s.body)

    # -- loops -------------------------------------------------------------------------------
    def s_for(self, s: For, plan=None):
        kind = s.kind
        if kind == "thread":
            raise BuildError(
                f"the loop over `{s.var.name}` is bound to the GPU thread axis "
                f"{s.thread_tag or '(unnamed)'}; the llvm (CPU) target cannot run GPU-bound "
                f"loops: build with target='cuda' or remove the bind")
        if kind not in ("serial", "parallel", "vectorized", "unrolled"):
            raise BuildError(f"unknown loop kind {kind!r} for the loop over `{s.var.name}`")
        if kind == "serial" and self.lanes == 1 and isinstance(plan, _vec.VectorPlan) and \
                plan.how == "reduce":
            self.horizontal(s, plan)
            return
        if self.lanes > 1:
            # inside a widened body: a loop with lane-invariant bounds
            if kind == "unrolled" and isinstance(s.extent, Const):
                self.unrolled(s)
            else:
                self.serial(s)
            return
        if kind == "serial":
            self.serial(s)
        elif kind == "unrolled":
            self.unrolled(s)
        elif kind == "vectorized":
            if not isinstance(plan, _vec.VectorPlan):
                raise InternalError(f"the vectorized loop over `{s.var.name}` has no vector "
                                    f"plan (lower.vectorize.vector_plan_pass did not run)")
            self.vectorized(s, plan)
        else:
            if not isinstance(plan, _par.ParallelPlan) or plan.nested != self.in_parallel:
                raise InternalError(f"the parallel loop over `{s.var.name}` has no plan that "
                                    f"fits where it is (lower.parallel.parallel_plan_pass)")
            if plan.nested:
                self.mb.notes.append(plan.note(s.var.name))
                self.serial(s)
            else:
                self.parallel(s, plan)

    def _bounds(self, s: For):
        return self.scalar_index(s.min), self.scalar_index(s.extent)

    def serial(self, s: For, md=None):
        lo, n = self._bounds(s)
        count = self._unroll_count.pop(id(s), None)
        if md is None and count is not None:
            md = self.mb.loop_md(("llvm.loop.unroll.count", count))
        self.loop(_sanitize(s.var.name), lo, n,
                  lambda iv: self.with_loop_var(s.var, Val(iv), lambda: self.stmt(s.body)), md)

    def unrolled(self, s: For):
        """An unrolled loop: copies of its body at code generation where its extent is a
        constant (up to ``MAX_FULL_UNROLL``) or has a small constant bound (guarded
        copies, within ``MAX_GUARDED_COPIES``); else a loop, which LLVM is asked to unroll
        only where no unrolled loop is around it: forced on the loops inside unrolled
        copies, LLVM's unroller made functions it took minutes to optimise (a symbolic
        product reduction, fuzz seed 10022977: 224 such loops)."""
        outer = self._unroll_copies
        if isinstance(s.extent, Const) and s.extent.value <= MAX_FULL_UNROLL and \
                (self._minmax_chain(s) or self._selection_pairs(s)):
            return
        if isinstance(s.extent, Const) and s.extent.value <= MAX_FULL_UNROLL:
            lo = self.scalar_index(s.min)
            self._unroll_copies = outer * max(int(s.extent.value), 1)
            for k in range(int(s.extent.value)):
                self.with_loop_var(s.var, Val(self.iadd(lo, ir.Constant(_I64, k))),
                                   lambda: self.stmt(s.body))
            self._unroll_copies = outer
            return
        count = None if isinstance(s.extent, Const) else guarded_unroll_count(s.extent)
        if count is None or outer * count > MAX_GUARDED_COPIES:
            self.serial(s, self._llvm_unroll_md(s.extent) if outer == 1 else None)
            return
        lo, n = self._bounds(s)
        self._unroll_copies = outer * max(count, 1)
        for k in range(count):
            kk = ir.Constant(_I64, k)
            self.if_(self.b.icmp_signed("<", kk, n),
                     lambda: self.with_loop_var(s.var, Val(self.iadd(lo, kk)),
                                                lambda: self.stmt(s.body)),
                     name=f"{_sanitize(s.var.name)}.{k}")
        self._unroll_copies = outer

    def _minmax_chain(self, s: For) -> bool:
        """Emit the unrolled loop ``s`` (a constant extent of at least 2) as one update
        ``acc = max(max(acc, v(k0)), v(k0 + 1)) ...`` of its copies' values where its
        body, under at most one vectorized loop, is ``acc = max(acc, v(k))`` (or ``min``)
        of a float accumulator at an index and in a buffer that no ``v`` reads, and the
        policy pairs NaN tests (:data:`PAIRED_NAN_TESTS`); the chain's nodes are marked
        for :meth:`_ExprEmitter._minmax_pair`.  False (nothing emitted) otherwise."""
        if not (PAIRED_NAN_TESTS and self.policy.paired_nan_tests) or s.extent.value < 2:
            return False
        body, wrap = s.body, None
        if isinstance(body, AttrStmt) and body.key == _vec.KEY and \
                isinstance(body.body, For) and body.body.kind == "vectorized":
            wrap, body = body, body.body.body
        if not isinstance(body, BufferStore) or not isinstance(body.value, (Max, Min)):
            return False
        op, acc, v = type(body.value), body.value.a, body.value.b
        if not (_dt.is_float(body.value.dtype) and isinstance(acc, BufferLoad) and
                acc.buffer is body.buffer and acc.indices == body.indices and
                not any(uses_var(i, s.var) for i in body.indices) and
                not collect(v, lambda n: isinstance(n, BufferLoad) and
                            n.buffer is body.buffer)):
            return False
        chain, marked = acc, []
        for k in range(int(s.extent.value)):
            chain = op(chain, substitute(v, {s.var: s.var + k}) if k else v, v.dtype)
            if k % 2:
                marked.append(id(chain))
        store = BufferStore(body.buffer, chain, body.indices)
        if wrap is not None:
            store = replace(wrap, body=replace(wrap.body, body=store))
        lo = self.scalar_index(s.min)
        # (the marks are ids of nodes alive only while ``store`` is: taken back after,
        # so a later node at a freed address is never read as one of them)
        self._minmax_pairs.update(marked)
        try:
            self.with_loop_var(s.var, Val(lo), lambda: self.stmt(store))
        finally:
            self._minmax_pairs.difference_update(marked)
        return True

    def _selection_pairs(self, s: For) -> bool:
        """Emit the unrolled loop ``s`` (a constant even extent) two copies a step, each
        step's two under one any-lane NaN test of their new values: the copies as they
        are where a lane holds a NaN, else with the keep condition ``acc >= x || acc !=
        acc`` (``<=``: argmin) as ``!(x > acc)`` (``<``), one ordered compare.  Where the
        body, under at most one vectorized loop, is a selection's update (two lets of
        selects on that condition, then stores) of a float value at an index without
        ``s``'s counter; the policy pairs NaN tests (:data:`PAIRED_SELECTION_TESTS`).
        False (nothing emitted) otherwise."""
        if not (PAIRED_SELECTION_TESTS and self.policy.paired_nan_tests) or \
                s.extent.value < 2 or s.extent.value % 2:
            return False
        body, wrap = s.body, None
        if isinstance(body, AttrStmt) and body.key == _vec.KEY and \
                isinstance(body.body, For) and body.body.kind == "vectorized":
            wrap, body = body, body.body.body
        if not (isinstance(body, LetStmt) and isinstance(body.body, LetStmt)):
            return False
        l0, l1 = body, body.body
        if not (isinstance(l0.value, Select) and isinstance(l1.value, Select)):
            return False
        cond = l0.value.cond
        if l1.value.cond != cond or not isinstance(cond, Or) or \
                not isinstance(cond.a, (GE, LE)) or not isinstance(cond.b, NE):
            return False
        acc, x = cond.a.a, cond.a.b
        if not (isinstance(acc, BufferLoad) and _dt.is_float(acc.dtype) and
                cond.b.a == acc and cond.b.b == acc and uses_var(x, s.var) and
                not any(uses_var(i, s.var) for i in acc.indices)):
            return False
        fast = Not(GT(x, acc) if isinstance(cond.a, GE) else LT(x, acc))

        def fast_copy(st):
            return replace(st, value=replace(st.value, cond=fast))

        fast_body = replace(fast_copy(l0), body=fast_copy(l1))
        if SELECTION_PAIRS_IN_REGISTERS and \
                self._selection_pairs_in_registers(s, wrap, l0, l1, fast, x):
            return True
        nxt = {s.var: s.var + 1}
        x1 = substitute(x, nxt)
        test = IfThenElse(Or(NE(x, x), NE(x1, x1)),
                          SeqStmt((body, substitute(body, nxt))),
                          SeqStmt((fast_body, substitute(fast_body, nxt))))
        step = test
        if wrap is not None:
            step = replace(wrap, body=replace(wrap.body, body=test))
        lo = self.scalar_index(s.min)
        outer = self._unroll_copies
        self._unroll_copies = outer * max(int(s.extent.value), 1)
        self._any_lane_ifs.add(id(test))     # (taken back after, as _minmax_chain's marks)
        try:
            for k in range(0, int(s.extent.value), 2):
                self.with_loop_var(s.var, Val(self.iadd(lo, ir.Constant(_I64, k))),
                                   lambda: self.stmt(step))
        finally:
            self._any_lane_ifs.discard(id(test))
            self._unroll_copies = outer
        return True

    def _selection_pairs_in_registers(self, s: For, wrap, l0: LetStmt, l1: LetStmt, fast,
                                      x: Expr) -> bool:
        """:meth:`_selection_pairs`'s run with its accumulator pair in registers
        (:data:`SELECTION_PAIRS_IN_REGISTERS`): the pair loaded once, each step's two
        copies under the any-lane NaN test of their values (``x`` at the step's two
        counters) as a branch whose sides' new pairs meet in phis (the exact update
        where a lane holds a NaN, else the keep condition ``fast``), the last pair
        stored once.  Where the lets' body is the pair's two stores of the lets' values
        into two buffers, nothing else reads those buffers, and the vectorized loop
        around them (``wrap``, if any) is planned as one vector; False (nothing emitted)
        otherwise."""
        seq = l1.body.seq if isinstance(l1.body, SeqStmt) else (l1.body,)
        if len(seq) != 2 or not all(isinstance(st, BufferStore) for st in seq):
            return False
        by_let = {st.value: st for st in seq}
        if set(by_let) != {l0.var, l1.var} or seq[0].buffer is seq[1].buffer:
            return False
        stores = [by_let[l0.var], by_let[l1.var]]
        regs = [Var(f"{st.buffer.name}.reg", st.value.dtype) for st in stores]
        accs = {st.buffer: (st.indices, r) for st, r in zip(stores, regs)}
        strays = []

        class _Regs(Mutator):
            def visit_BufferLoad(self, e):
                hit = accs.get(e.buffer)
                if hit is None:
                    return self.generic_visit(e)
                if e.indices != hit[0]:
                    strays.append(e)
                return hit[1]

        exact = [_Regs().visit(l0.value), _Regs().visit(l1.value)]
        quick = [_Regs().visit(replace(let.value, cond=fast)) for let in (l0, l1)]
        if strays or collect(x, lambda n: isinstance(n, BufferLoad) and n.buffer in accs):
            return False
        lanes = self.lanes
        if wrap is not None:
            plan = wrap.value
            if not isinstance(plan, _vec.VectorPlan) or plan.how != "widen":
                return False
            lanes = plan.lanes
        lets = [l0.var, l1.var]
        lo = self.scalar_index(s.min)
        nxt = {s.var: s.var + 1}
        test = Or(NE(x, x), NE(substitute(x, nxt), substitute(x, nxt)))
        b = self.b

        def raw(v: Val):
            return self.vec(v) if lanes > 1 else v.s

        def steps(pair, k: int, forms):
            """The pair after the copies ``k`` and ``k + 1`` of ``forms``, as LLVM values."""
            for j in (0, 1):
                def one(pair=pair):
                    self.env.update(zip(regs, pair))
                    out = []
                    for let, e in zip(lets, forms):
                        out.append(self.expr(e))
                        self.env[let] = out[-1]
                    return out
                pair = self._at_counter(s.var, lo, k + j, one)
            return [raw(v) for v in pair]

        def run():
            saved = [(v, self.env.get(v), self.env64.pop(v, None)) for v in regs + lets]
            try:
                pair = [self.expr(BufferLoad(st.buffer, st.indices, st.value.dtype))
                        for st in stores]
                for k in range(0, int(s.extent.value), 2):
                    nan = self._at_counter(s.var, lo, k, lambda: self.expr(test))
                    if nan.uniform:     # (a scalar run: one branch on the pair's test)
                        cond = nan.s
                    else:
                        cond = self.any_lane(self.and_mask(self.vec(nan)))
                    then_bb = self.fn.append_basic_block("nan.then")
                    else_bb = self.fn.append_basic_block("nan.else")
                    end_bb = self.fn.append_basic_block("nan.end")
                    b.cbranch(cond, then_bb, else_bb)
                    sides = []
                    for bb, forms in ((then_bb, exact), (else_bb, quick)):
                        b.position_at_end(bb)
                        vals = steps(pair, k, forms)
                        sides.append((b.block, vals))
                        b.branch(end_bb)
                    b.position_at_end(end_bb)
                    pair = []
                    for i, let in enumerate(lets):
                        phi = b.phi(sides[0][1][i].type, name=f"{_sanitize(let.name)}.pair")
                        for blk, vals in sides:
                            phi.add_incoming(vals[i], blk)
                        pair.append(Val(v=phi) if lanes > 1 else Val(phi))
                for st, v in zip(stores, pair):
                    self.store(st, v)
            finally:
                for v, old, old64 in saved:
                    for d, o in ((self.env, old), (self.env64, old64)):
                        if o is None:
                            d.pop(v, None)
                        else:
                            d[v] = o

        outer = self._unroll_copies
        self._unroll_copies = outer * max(int(s.extent.value), 1)
        try:
            if wrap is None:
                run()
            else:
                vf = wrap.body
                self.mb.notes.append(plan.note(vf.var.name))
                old = (self.lanes, self.mask)
                self.lanes, self.mask = lanes, None
                try:
                    self.with_loop_var(vf.var, Val(self.scalar_index(vf.min), 1), run)
                finally:
                    self.lanes, self.mask = old
        finally:
            self._unroll_copies = outer
        return True

    def _at_counter(self, var: Var, lo, k: int, fn):
        """``fn()`` with the loop counter ``var`` bound to ``lo + k``; its result."""
        out = []
        self.with_loop_var(var, Val(self.iadd(lo, ir.Constant(_I64, k))),
                           lambda: out.append(fn()))
        return out[0]

    def _llvm_unroll_md(self, extent: Expr):
        """The unroll request to LLVM for an unrolled loop that stays a loop: a long
        constant extent, which its unroller unrolls in part (``unroll.enable``); a symbolic
        one (past the guarded copies' budgets: a bound over ``MAX_GUARDED_UNROLL``, or
        none), a count of :data:`RUNTIME_UNROLL_COUNT`."""
        if isinstance(extent, Const):
            return self.mb.loop_md(("llvm.loop.unroll.enable", True))
        return self.mb.loop_md(("llvm.loop.unroll.count", RUNTIME_UNROLL_COUNT))

    def vectorized(self, s: For, plan):
        """Emit ``s`` as its plan says (lower/vectorize.py decides)."""
        name = s.var.name
        how = plan.how
        if how == "serial":
            self.mb.notes.append(plan.note(name))
            # LLVM's loop vectorizer takes innermost loops only: asked to vectorize one
            # with a loop inside (a reduction computed at each of its iterations), it
            # refuses and says so on stderr ("loop not vectorized")
            ask = not collect(s.body, _is_loop)
            self.serial(s, self.mb.loop_md(("llvm.loop.vectorize.enable", True)) if ask
                        else None)
            return
        lo = self.scalar_index(s.min)
        if how == "empty":
            return
        if how == "scalar":
            self.with_loop_var(s.var, Val(lo), lambda: self.stmt(s.body))
            return
        if how == "masked":
            self._masked_chunks(s, lo, plan)
            return
        self.mb.notes.append(plan.note(name))
        if how == "widen":
            self.widened(s, lo, plan.lanes, None)
            return
        W, nchunks, rem = plan.lanes, plan.chunks, plan.rem
        if how == "pieces":
            for c in range(nchunks):
                self.widened(s, self.iadd(lo, ir.Constant(_I64, c * W)), W, None)
        elif how == "chunks":
            self.loop(_sanitize(name) + ".chunk", ir.Constant(_I64, 0),
                      ir.Constant(_I64, nchunks),
                      lambda c: self.widened(
                          s, self.iadd(lo, self.b.mul(c, ir.Constant(_I64, W))), W, None))
        else:
            raise InternalError(f"unknown vector plan {how!r} for the loop over `{name}`")
        if rem == 1:
            self.with_loop_var(s.var, Val(self.iadd(lo, ir.Constant(_I64, nchunks * W))),
                               lambda: self.stmt(s.body))
        elif rem:
            self.widened(s, self.iadd(lo, ir.Constant(_I64, nchunks * W)), rem, None)

    def horizontal(self, s: For, plan):
        """A serial reduction loop ``acc[I] = acc[I] op e(k)`` planned ``reduce``
        (:func:`tecomp.lower.vectorize.horizontal_reduction`): ``e`` over the loop's
        iterations as one vector, reduced across its lanes, then combined with ``acc``."""
        if plan.reason == _vec.SELECT:
            self.horizontal_selection(s, plan)
            return
        found = _vec.horizontal_reduction(s, {s.body.buffer})
        if found is None:
            raise InternalError(f"the serial loop over `{s.var.name}` is planned as a "
                                f"horizontal reduction but is not one")
        op, acc_load, e = found
        self.mb.notes.append(plan.note(s.var.name))
        b = self.b
        lo = self.scalar_index(s.min)
        got = []
        old = (self.lanes, self.mask)
        self.lanes, self.mask = plan.lanes, None
        try:
            self.with_loop_var(s.var, Val(lo, 1), lambda: got.append(self.vec(self.expr(e))))
        finally:
            self.lanes, self.mask = old
        v = got[0]
        ety = v.type.element
        if _dt.is_float(e.dtype):   # (max or min: a tree of halves, each step the max)
            self.store(s.body, self._minmax_tree(op, acc_load, e.dtype, v, plan.lanes))
            return
        signed = not _dt.is_uint(e.dtype)
        name = {"or": "or", "and": "and", "add": "add",
                "max": "smax" if signed else "umax", "min": "smin" if signed else "umin"}[op]
        fn = self.mb.intrinsic(f"llvm.vector.reduce.{name}", ety, [v.type], [v.type])
        r = b.call(fn, [v])
        acc = self.expr(acc_load).s
        if op == "or":
            out = b.or_(acc, r)
        elif op == "and":
            out = b.and_(acc, r)
        elif op == "add":
            out = b.add(acc, r)
        else:
            cmp = b.icmp_signed if signed else b.icmp_unsigned
            out = b.select(cmp(">" if op == "max" else "<", acc, r), acc, r)
        self.store(s.body, Val(out))

    def _bound_exprs(self, env: dict, lanes: int, exprs) -> list:
        """``exprs`` evaluated over ``lanes`` lanes (no mask) with the variables of
        ``env`` bound to its Vals: vector register values where ``lanes > 1``, else
        scalar Vals."""
        saved = [(v, self.env.get(v)) for v in env]
        old = (self.lanes, self.mask)
        self.lanes, self.mask = lanes, None
        try:
            self.env.update(env)
            out = [self.expr(e) for e in exprs]
            return [self.vec(x) for x in out] if lanes > 1 else out
        finally:
            self.lanes, self.mask = old
            for v, x in saved:
                if x is None:
                    self.env.pop(v, None)
                else:
                    self.env[v] = x

    def _minmax_tree(self, op: str, acc_load, dtype: str, v, n: int) -> Val:
        """``acc op`` the ``n`` lanes of the vector ``v``, a float max or min: lanes
        ``0..h`` against ``h..2h`` (``h = n // 2``), and so on to one lane, each step the
        IR's own :class:`~tecomp.ir.expr.Max` (NaN propagates); an odd lane out joins at
        the end."""
        b = self.b
        node = Max if op == "max" else Min
        x, y = Var("tree.a", dtype), Var("tree.b", dtype)

        def apply(p, q, lanes):
            return self._bound_exprs({x: p, y: q}, lanes, [node(x, y, dtype)])[0]

        def lanes_of(picks):
            return _lanes_of(b, v, picks)

        def lane(vec, i):
            return Val(b.extract_element(vec, ir.Constant(_I32, i)))

        rest = []
        while n > 1:
            h = n // 2
            if n % 2:
                rest.append(lane(v, n - 1))
            if h == 1:
                out = apply(lane(v, 0), lane(v, 1), 1)
                break
            v = apply(Val(v=lanes_of(range(h))), Val(v=lanes_of(range(h, 2 * h))), h)
            n = h
        else:
            out = lane(v, 0)
        for r in rest:
            out = apply(out, r, 1)
        return apply(self.expr(acc_load), out, 1)

    def horizontal_selection(self, s: For, plan):
        """A serial loop of selections planned ``reduce``
        (:func:`tecomp.lower.vectorize.selection_reduction`): each ``e_j`` over the loop's
        iterations as one vector; its lanes in blocks of a power of two (the largest that
        fits, then the next: 64, or 8 + 4 of 12), in order, each reduced as a tree of
        neighbouring lanes combined pairwise (lane ``2i`` on the accumulator's side: an
        in-order combine stays in order) and combined with ``acc``."""
        found = _vec.selection_reduction(s, {x.buffer for x in _stores_of(s.body)})
        if found is None:
            raise InternalError(f"the serial loop over `{s.var.name}` is planned as a "
                                f"horizontal selection but is not one")
        self.mb.notes.append(plan.note(s.var.name))
        b = self.b
        n = plan.lanes
        lo = self.scalar_index(s.min)
        old = (self.lanes, self.mask)
        self.lanes, self.mask = n, None
        try:
            vecs = []
            self.with_loop_var(s.var, Val(lo, 1), lambda: vecs.extend(
                self.vec(self.expr(e)) for e in found.elems))
        finally:
            self.lanes, self.mask = old

        def lanes_of(v, picks):
            return _lanes_of(b, v, picks)

        def combine(lhs, rhs, lanes):
            """The new accumulators from ``lhs`` (earlier) and ``rhs``: Vals."""
            return self._bound_exprs(dict(zip(found.acc + found.new, list(lhs) + list(rhs))),
                                     lanes, found.values)

        match = _selection_match_form(found) if SELECTION_MATCH else None
        if match is not None:
            self.mb.notes.append(f"{s.var.name}: the lanes' selection by matching")

        def tree(cur, w):
            """Lanes ``0..w`` (a power of two) of ``cur`` combined: scalar Vals."""
            if match is not None and w >= SELECTION_MATCH_LANES:
                return self._selection_match(cur, w, *match)
            while w > 1:
                h = w // 2
                evens = [lanes_of(v, range(0, w, 2)) for v in cur]
                odds = [lanes_of(v, range(1, w, 2)) for v in cur]
                if h == 1:
                    return combine([Val(b.extract_element(v, ir.Constant(_I32, 0)))
                                    for v in evens],
                                   [Val(b.extract_element(v, ir.Constant(_I32, 0)))
                                    for v in odds], 1)
                cur = combine([Val(v=v) for v in evens], [Val(v=v) for v in odds], h)
                w = h
            return [Val(b.extract_element(v, ir.Constant(_I32, 0))) for v in cur]

        out = [self.expr(BufferLoad(x.buffer, x.indices, x.buffer.dtype))
               for x in found.stores]
        start = 0
        while start < n:   # (blocks of a power of two lanes each, in order)
            w = 1 << ((n - start).bit_length() - 1)
            block = vecs if w == n else [lanes_of(v, range(start, start + w)) for v in vecs]
            out = combine(out, tree(block, w), 1)
            start += w
        for x, v in zip(found.stores, out):
            self.store(x, v)

    def _selection_match(self, cur, w: int, ii: int, iv: int, big: bool, first: bool,
                         in_order: bool, unsigned: bool = False):
        """The ``w`` lanes of the vectors ``cur`` (an index vector at ``ii``, a float
        value vector at ``iv``) combined as :func:`_selection_match_form`'s condition
        combines them, without a tree of it: where any lane is NaN, the NaN lanes are
        the candidates, else the lanes equal (``==``: signed zeros alike) to the lanes'
        max (``big``; else min), one reduction; the chosen index is the smallest
        (``first``; else largest) of the candidates', a second; the lane returned is
        the highest candidate lane holding that index (the tree's choice where two
        lanes tie in everything: it keeps the later side).  ``in_order`` (lanes in the
        row's order, the earlier kept on a tie): the lowest candidate lane, no index
        compared.  Integer values (``unsigned``: compared as such): the lanes equal to
        their max (min), no NaN.  Scalar Vals, in ``cur``'s order."""
        b = self.b
        vi, vv = cur[ii], cur[iv]
        bits_t = ir.IntType(w)

        def splat(x):
            v = b.insert_element(_poison(ir.VectorType(x.type, w)), x, ir.Constant(_I32, 0))
            return b.shuffle_vector(v, _poison(v.type),
                                    ir.Constant(ir.VectorType(_I32, w), [ir.Constant(_I32, 0)] * w))

        fty, ity = vv.type.element, vi.type.element
        if isinstance(fty, ir.IntType):     # (integer values: no NaN lanes)
            how = ("u" if unsigned else "s") + ("max" if big else "min")
            red = self.mb.intrinsic(f"llvm.vector.reduce.{how}", fty, [vv.type],
                                    [vv.type])
            cand = b.icmp_unsigned("==", vv, splat(b.call(red, [vv])))
        else:
            nan = b.fcmp_unordered("uno", vv, vv)
            anynan = b.icmp_unsigned("!=", b.bitcast(nan, bits_t), ir.Constant(bits_t, 0))
            red = self.mb.intrinsic(f"llvm.vector.reduce.{'fmax' if big else 'fmin'}",
                                    fty, [vv.type], [vv.type])
            # (the NaN lanes out first: the reduction is then a plain tree of max, no
            # NaN test at each step; where a lane is NaN its result is not used)
            fill = ir.Constant(fty, float("-inf") if big else float("inf"))
            top = b.call(red, [b.select(nan, splat(fill), vv)], fastmath=("nnan",))
            cand = b.select(anynan, nan, b.fcmp_ordered("==", vv, splat(top)))
        if in_order:
            lane = b.cttz(b.bitcast(cand, bits_t), ir.Constant(_I1, 0))
        else:
            width = ity.width
            far = (1 << (width - 1)) - 1 if first else -(1 << (width - 1))
            pick = self.mb.intrinsic(f"llvm.vector.reduce.{'smin' if first else 'smax'}",
                                     ity, [vi.type], [vi.type])
            idx = b.call(pick, [b.select(cand, vi, splat(ir.Constant(ity, far)))])
            hit = b.and_(cand, b.icmp_signed("==", vi, splat(idx)))
            lead = b.ctlz(b.bitcast(hit, bits_t), ir.Constant(_I1, 0))
            lane = b.sub(ir.Constant(bits_t, w - 1), lead)
        lane = b.zext(lane, _I32) if w < 32 else b.trunc(lane, _I32) if w > 32 else lane
        out = [None] * len(cur)
        out[ii] = Val(b.extract_element(vi, lane))
        out[iv] = Val(b.extract_element(vv, lane))
        return out

    def _masked_chunks(self, s: For, lo, plan):
        """A symbolic extent: chunks of W lanes, then one masked chunk for the tail."""
        b = self.b
        W = plan.lanes
        self.mb.notes.append(plan.note(s.var.name))
        n = self.scalar_index(s.extent)
        n = b.select(b.icmp_signed("<", n, ir.Constant(_I64, 0)), ir.Constant(_I64, 0), n)
        nchunks = b.sdiv(n, ir.Constant(_I64, W))
        self.loop(_sanitize(s.var.name) + ".chunk", ir.Constant(_I64, 0), nchunks,
                  lambda c: self.widened(
                      s, self.iadd(lo, b.mul(c, ir.Constant(_I64, W))), W, None))
        done = b.mul(nchunks, ir.Constant(_I64, W))
        rem = b.sub(n, done)

        def tail():
            old = self.lanes
            self.lanes = W
            try:
                mask = b.icmp_signed("<", self.lanes_iota(), self.bcast(rem))
            finally:
                self.lanes = old
            self.widened(s, self.iadd(lo, done), W, mask)

        self.if_(b.icmp_signed(">", rem, ir.Constant(_I64, 0)), tail, name="tail")

    def widened(self, s: For, base, lanes: int, mask):
        old = (self.lanes, self.mask)
        self.lanes, self.mask = lanes, mask
        try:
            self.with_loop_var(s.var, Val(base, 1), lambda: self.stmt(s.body))
        finally:
            self.lanes, self.mask = old

    def parallel(self, s: For, plan):
        """Outline ``s`` into a task capturing what its plan lists (lower/parallel.py)."""
        lo, n = self._bounds(s)
        captured = [v for v in plan.captured if v in self.env]
        used = list(plan.buffers)
        for v in captured:
            if not self.env[v].uniform:
                raise InternalError("a parallel loop inside a widened body")
        b = self.b
        # the region's error record: [lock, first failing chunk's begin, the five error
        # words of that chunk] (module.py, outline_parallel)
        perr = self.alloca(ir.ArrayType(_I64, 2 + ERR_WORDS), name="par.err", align=8)
        b.store(ir.Constant(_I64, 0), _i64_at(b, perr, 0), align=8)
        b.store(ir.Constant(_I64, 2 ** 63 - 1), _i64_at(b, perr, 1), align=8)
        task, captures = self.mb.outline_parallel(self, s, lo, captured, used, perr)
        st = ir.LiteralStructType([v.type for v in captures])
        closure = self.alloca(st, name="closure", align=8)
        for i, v in enumerate(captures):
            p = b.gep(closure, [ir.Constant(_I32, 0), ir.Constant(_I32, i)], inbounds=True,
                      source_etype=st)
            b.store(v, p)
        pf = self.mb.declare("tecomp_parallel_for", _I32, [_PTR, _PTR, _I64])
        rc = b.call(pf, [task, closure, n])

        def failed():
            # the error of the failing chunk that comes first in the loop's order (the
            # one a serial run reports), whichever thread ran it and when
            code = b.load(_i64_at(b, perr, 2), typ=_I64, align=8)
            pair = b.cmpxchg(self.err, ir.Constant(_I64, 0), code, "seq_cst", "seq_cst")

            def copy():
                for w in range(1, ERR_WORDS):
                    v = b.load(_i64_at(b, perr, 2 + w), typ=_I64, align=8)
                    b.store(v, _i64_at(b, self.err, w), align=8)
            self.if_(b.extract_value(pair, 1), copy)
            b.branch(self.error_block())
        self.guard(b.icmp_signed("!=", rc, ir.Constant(_I32, 0)), failed, name="par")


def _is_loop(n) -> bool:
    """Whether ``n`` is a loop the code generator emits as a loop (not a constant one it
    unrolls into copies)."""
    return type(n) is For and not (n.kind == "unrolled" and isinstance(n.extent, Const)
                                   and n.extent.value <= MAX_FULL_UNROLL)


def _stores_of(body) -> list:
    """The stores under the lets of a loop body (a :class:`SelectionReduction`'s)."""
    while isinstance(body, LetStmt):
        body = body.body
    seq = body.seq if isinstance(body, SeqStmt) else (body,)
    return [x for x in seq if isinstance(x, BufferStore)]


def _selection_match_form(found):
    """``(ii, iv, big, first, in_order, unsigned)`` where the selection ``found`` (a
    :class:`tecomp.lower.vectorize.SelectionReduction`) keeps two values, an integer
    index (at ``ii``) and a float32 or float64 value (at ``iv``), each new one
    ``select(c, acc, new)`` on the one condition ``c`` of an argmax (``big``; ``<`` for
    an argmin) keeping the first index among equal values (``first``; ``>``: the last)
    and a NaN over any number, exactly as ``tecomp.nn``'s argmax builds it::

        pv > qv || pv == qv && pi < qi || pv != pv && (qv == qv || pi < qi)

    (``p`` the accumulator, ``q`` the new element), or (``in_order``) the in-order
    combine of lanes in the row's order, ``pv >= qv || pv != pv`` (``<=``: an argmin;
    the first NaN, else the first of the extreme values); None otherwise (the tree of
    the condition combines the lanes).  An integer value (any width, signed or not:
    :data:`SELECTION_MATCH_INTS`; the index then the one not compared as a value) the
    same without the NaN clauses, ``pv > qv || pv == qv && pi < qi`` and ``pv >= qv``;
    a sixth field says whether that value is unsigned."""
    if len(found.acc) != 2:
        return None
    kinds = [_dt.is_float(v.dtype) for v in found.acc]
    if sorted(kinds) == [False, True]:
        sides = [kinds.index(True)]
    elif kinds == [False, False] and SELECTION_MATCH_INTS:
        sides = [0, 1]   # (the value is the one the condition compares as a value)
    else:
        return None
    vals = found.values
    if not all(type(vals[j]) is Select and same_as(vals[j].true_value, found.acc[j]) and
               same_as(vals[j].false_value, found.new[j]) for j in (0, 1)) or \
            not same_as(vals[0].cond, vals[1].cond):
        return None
    for iv in sides:
        ii = 1 - iv
        pi, pv, qi, qv = found.acc[ii], found.acc[iv], found.new[ii], found.new[iv]
        floats = _dt.is_float(pv.dtype)
        if (pv.dtype not in ("float32", "float64") if floats else
                not _dt.is_int(pv.dtype)) or not _dt.is_int(pi.dtype) or \
                _dt.is_uint(pi.dtype):
            continue
        unsigned = _dt.is_uint(pv.dtype)
        for big in (True, False):
            # the in-order combine (the accumulator's elements all before the new one's:
            # lanes in the row's order): the earlier kept where not smaller, or NaN
            keep = GE(pv, qv) if big else LE(pv, qv)
            if same_as(vals[0].cond, Or(keep, NE(pv, pv)) if floats else keep):
                return ii, iv, big, True, True, unsigned
            for first in (True, False):
                beats = GT(pv, qv) if big else LT(pv, qv)
                order = LT(pi, qi) if first else GT(pi, qi)
                want = Or(beats, And(EQ(pv, qv), order))
                if floats:
                    want = Or(want, And(NE(pv, pv), Or(EQ(qv, qv), order)))
                if same_as(vals[0].cond, want):
                    return ii, iv, big, first, False, unsigned
    return None


def _lanes_of(b, v, picks):
    """The lanes ``picks`` of the vector register value ``v``, as a vector."""
    return b.shuffle_vector(v, _poison(v.type), ir.Constant(
        ir.VectorType(_I32, len(picks)), [ir.Constant(_I32, i) for i in picks]))
