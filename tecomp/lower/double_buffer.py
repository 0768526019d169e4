"""Double buffering of shared-memory tiles (``s[S].double_buffer()``), a GPU pass.

Runs after barrier insertion.  ``schedule_ops`` marks the allocation of a
double-buffered stage with ``AttrStmt("double_buffer", buffer, Allocate(buffer, ...))``
where the stage is computed, inside a serial loop ``ko`` of a kernel.  After barrier
insertion the loop's body has the shape the cooperative copies of a tiled GEMM give::

    for ko:                           allocate S[2, ...]
      allocate S                      copies(ko = 0) into S[0]
        syncthreads()                 for ko:
        copies into S          ==>      syncthreads()
        syncthreads()                   if ko + 1 < n: copies(ko + 1) into S[(ko + 1) % 2]
        reads of S                      reads of S[ko % 2]

Where the loop is gone (an extent of 1, or an iteration that loop partitioning peeled
off the main loop), the tile keeps one buffer; so does a tile whose copy simplification
removed from a part of the loop (loop partitioning of a symbolic extent's tail can prove
its guard false there), and the part is left as it is where no tile is copied in it.

The copies of iteration ``ko + 1`` write the buffer that iteration ``ko - 1`` read, and
the one barrier at the top of an iteration is after every thread finished those reads
and after every thread's copy of the current tile; so one barrier an iteration is
enough.  The copies are wrapped in ``AttrStmt("async_copy", ko, ...)``: a code
generator may issue them asynchronously (CUDA: ``cp.async`` on sm_80+) provided it
waits for them before the next barrier, which the CUDA renderer does.

With ``double_buffer(stages=n)`` (``AttrStmt("buffer_stages", n, ...)`` around the
mark) the tile gets n buffers (no more than the loop's iterations plus one), a ring: the
copies of the first n - 1 iterations come before the loop (those past its end not at all), and iteration ``ko`` copies the tile of
``ko + n - 1`` into slot ``(ko + n - 1) % n``, the one iteration ``ko - 1`` read.  Each
of those copy regions is an ``AttrStmt("async_group")``, closed even where its guard
skips the copies, so that the groups count iterations, and the loop's barrier is an
``AttrStmt("async_wait", n - 2, ...)``: the code generator waits for all groups but the
n - 2 latest, i.e. for the tile of ``ko``, before it (CUDA: ``cp.async.commit_group`` /
``cp.async.wait_group``).

Barriers inside the iteration's reads (FlashAttention's step, which fills and reads
tiles of its own after the copies) are each an ``AttrStmt("async_wait", n - 1, ...)``,
and the copies of each iteration a group (two stages too): they wait for the thread's
copies but those of the iterations ahead, which only the next iterations read, after
their own barrier; the copies stay in flight through the whole iteration.

What does not have that shape is a ScheduleError naming the stage: a copy that reads
what the rest of the iteration writes, a shared stage copied in the same iteration but
not double-buffered (it would be overwritten while read), a stage not copied at the
top of its loop.
"""
from __future__ import annotations

import dataclasses
from typing import Dict

from ..errors import ScheduleError
from ..ir import dtype as _dt, op as _op
from ..ir.expr import LT, Buffer, BufferLoad, Call, Const
from ..ir.functor import Mutator, substitute
from ..ir.names import display
from ..ir.simplify import simplify
from ..ir.stmt import Allocate, AttrStmt, BufferStore, Evaluate, For, IfThenElse, SeqStmt, seq
from .barriers import Access, access
from .device_split import shared_array_bytes
from ..target import PER_THREAD_SCOPES, tma as _tma
from .tma_pipeline import BUFFER_PRODUCER, BUFFER_SWIZZLE, tma_ring

DOUBLE_BUFFER = "double_buffer"
#: ``AttrStmt("buffer_stages", n, AttrStmt("double_buffer", ...))``: n buffers
BUFFER_STAGES = "buffer_stages"
ASYNC_COPY = "async_copy"
#: ``AttrStmt("async_wait", k, barrier)``: before this barrier, wait for the
#: thread's asynchronous copies but the ``k`` latest groups of them
ASYNC_WAIT = "async_wait"
#: ``AttrStmt("async_group", 0, body)``: the asynchronous copies ``body`` issues
#: are one group, closed after it even where it issues none (a guard false near the end
#: of the loop), so that the groups count the loop's iterations
ASYNC_GROUP = "async_group"


def _is_barrier(s) -> bool:
    return isinstance(s, Evaluate) and isinstance(s.value, Call) and s.value.op == "syncthreads"


class _Retarget(Mutator):
    """Accesses of each old buffer go to slot ``slot`` of its doubled buffer."""

    def __init__(self, bufs: Dict[Buffer, Buffer], slot):
        self.bufs, self.slot = bufs, slot

    def visit_BufferLoad(self, e):
        idx = tuple(self.visit(i) for i in e.indices)
        nb = self.bufs.get(e.buffer)
        if nb is None:
            return e if all(a is b for a, b in zip(idx, e.indices)) else BufferLoad(e.buffer, idx, e.dtype)
        return BufferLoad(nb, (self.slot,) + idx, e.dtype)

    def visit_BufferStore(self, s):
        idx = tuple(self.visit(i) for i in s.indices)
        val = self.visit(s.value)
        nb = self.bufs.get(s.buffer)
        if nb is None:
            if val is s.value and all(a is b for a, b in zip(idx, s.indices)):
                return s
            return BufferStore(s.buffer, val, idx)
        return BufferStore(nb, val, (self.slot,) + idx)


    def visit_TensorIntrinCall(self, s):
        # a tensorized region's operands in a doubled buffer: that slot's region
        fallback = self.visit(s.fallback)
        if not any(b in self.bufs for b in s.buffers):
            return s if fallback is s.fallback else dataclasses.replace(s, fallback=fallback)
        bufs, bases, coefs = [], [], []
        for n, b in enumerate(s.buffers):
            base = tuple(self.visit(x) for x in s.base(n))
            nb = self.bufs.get(b)
            if nb is None:
                bufs.append(b)
                bases += base
                coefs.append(s.coefs[n])
            else:
                bufs.append(nb)
                bases += (self.slot,) + base
                coefs.append(tuple((0,) + tuple(row) for row in s.coefs[n]))
        return dataclasses.replace(s, buffers=tuple(bufs), bases=tuple(bases),
                                   coefs=tuple(coefs), fallback=fallback)


def _doubled(b: Buffer, stages: int = 2) -> Buffer:
    inner = b.strides if b.strides is not None else b.row_major_strides()
    # each slot starts as aligned as the first (vector moves, wmma tiles)
    span = Const(shared_array_bytes(b) // _dt.nbytes(b.dtype), "int32")
    return Buffer(b.name, (Const(stages, "int32"),) + tuple(b.shape), b.dtype,
                  (span,) + tuple(inner), b.scope)


class _DoubleBuffer(Mutator):
    def __init__(self):
        self.kernel_depth = 0

    def visit_For(self, s):
        is_thread = s.kind == "thread"
        self.kernel_depth += is_thread
        chain, inner = [], s.body
        while isinstance(inner, Allocate) or (isinstance(inner, AttrStmt) and inner.key in (
                DOUBLE_BUFFER, BUFFER_STAGES, BUFFER_PRODUCER, BUFFER_SWIZZLE)):
            chain.append(inner)
            inner = inner.body
        marked = [c.value for c in chain if isinstance(c, AttrStmt) and c.key == DOUBLE_BUFFER]
        if marked:
            out = self._transform(s, chain, self.visit(inner), marked)
            self.kernel_depth -= is_thread
            return out
        body = self.visit(s.body)
        self.kernel_depth -= is_thread
        return s if body is s.body else For(s.var, s.min, s.extent, s.kind, body, s.thread_tag)

    def visit_AttrStmt(self, s):
        if s.key in (DOUBLE_BUFFER, BUFFER_STAGES, BUFFER_PRODUCER, BUFFER_SWIZZLE):
            # its loop is gone (an extent of 1, or a part that loop partitioning peeled
            # off): one iteration has nothing to overlap, one buffer is enough (still laid
            # out swizzled where asked: its readers decode it)
            body = self.visit(s.body)
            if s.key == BUFFER_SWIZZLE and isinstance(s.value, str) and s.value != "none":
                inner = s.body
                while isinstance(inner, AttrStmt) and inner.key != DOUBLE_BUFFER:
                    inner = inner.body
                if isinstance(inner, AttrStmt) and isinstance(inner.value, Buffer):
                    check_swizzled_rows(inner.value, s.value, f"double_buffer on stage "
                                        f"{display(inner.value.name)}")
                    return AttrStmt(BUFFER_SWIZZLE, (inner.value, s.value), body)
            return body
        return self.generic_visit(s)

    def _transform(self, loop: For, chain, inner, marked) -> For:
        names = ", ".join(display(b.name) for b in marked)
        what = f"double_buffer on stage{'s' if len(marked) > 1 else ''} {names}"
        if loop.kind != "serial" or not self.kernel_depth:
            raise ScheduleError(
                f"{what}: computed at loop {display(loop.var.name)}, which is "
                f"{'a ' + loop.kind + ' loop' if loop.kind != 'serial' else 'outside any GPU kernel'}"
                f"; double buffering pipelines a serial loop inside the thread loops of a GPU "
                f"kernel (build for cuda or cuda-emu, compute the stage at e.g. k.outer)")
        used = access(inner)
        unread = {b for b in marked if b not in used.reads and b not in used.other}
        if unread:
            # simplification removed every read of the tile (a branch proven dead): its
            # copy, if still there, has no reader to overlap with; nothing to pipeline
            if len(unread) == len(marked):
                return _unpipelined(loop, chain, inner)
            gone = {b for b in unread if b not in used.writes}
            marked = [b for b in marked if b not in gone]
            chain = [c for c in chain if not (isinstance(c, Allocate) and c.buffer in gone)]
        uncopied = [b for b in marked if b not in used.writes]
        if uncopied:
            # read but never copied: simplification proved the copy's guard false in this
            # loop (a part that loop partitioning split off a symbolic tail, whose
            # iterations read no element of the tile: it never runs, or its reads are
            # guarded off); such a tile keeps one buffer, the loop as it is where no
            # marked tile is copied
            if len(uncopied) == len(marked):
                return _unpipelined(loop, chain, inner)
            marked = [b for b in marked if b not in uncopied]
        items = list(inner.seq) if isinstance(inner, SeqStmt) else [inner]
        n = 0
        while n < len(items) and _is_barrier(items[n]):
            n += 1
        copies = []
        while n < len(items) and not _is_barrier(items[n]):
            copies.append(items[n])
            n += 1
        rest = items[n + 1:]
        marked_set = set(marked)
        # (a statement there that writes only the threads' own buffers, reading no tile,
        # e.g. a register fragment's zeroing, is no copy: it runs with the rest, after
        # the barrier)
        own = [c for c in copies if _own_only(access(c), marked_set)]
        if own and len(own) < len(copies):
            copies = [c for c in copies if not any(c is o for o in own)]
            rest = own + rest
        acc_c = [access(c) for c in copies]
        acc_r = access(seq(*rest)) if rest else Access()
        written = set().union(*(a.writes for a in acc_c)) if acc_c else set()
        if not copies or not rest or not marked_set <= written:
            missing = [b for b in marked if b not in written]
            raise ScheduleError(
                f"{what}: the iteration of loop {display(loop.var.name)} does not first copy "
                f"{', '.join(display(b.name) for b in (missing or marked))} and then read it "
                f"(the shape double buffering pipelines: every thread's share of the tile "
                f"copied, a barrier, the reads)")
        shared_written = {b for b in written if b.scope == "shared"}
        others = [b for b in shared_written if b not in marked_set]
        if others:
            raise ScheduleError(
                f"{what}: {display(others[0].name)} is copied in the same iteration of loop "
                f"{display(loop.var.name)} but not double-buffered, so the early copy of the "
                f"next tile would overwrite it while it is read; call "
                f"s[{display(others[0].name)}].double_buffer() too")
        reads_c = set().union(*(a.reads for a in acc_c))
        clash = ((reads_c & acc_r.writes) | (written & (acc_r.writes | reads_c))
                 | ((written - marked_set) & acc_r.reads))
        # (a tensorized region counts through its fallback loops: the same regions the
        # intrinsic reads and writes)
        if clash:
            b = next(iter(clash))
            raise ScheduleError(
                f"{what}: the copies of loop {display(loop.var.name)}'s iteration and the rest "
                f"of it both use {display(b.name)}, so the next iteration's copy cannot run "
                f"before this iteration's reads")
        stages = _stages(chain, marked, what, loop)
        ko, lo, ext = loop.var, loop.min, loop.extent
        if isinstance(ext, Const):
            # no more buffers than the loop has tiles: every copy before the loop runs
            stages = max(2, min(stages, int(ext.value) + 1))
        bufs = {b: _doubled(b, stages) for b in marked}
        end = _op.add(lo, ext)
        producer = _producers(chain, marked, what, loop)
        if producer in ("tma", "tma_warp"):
            return tma_ring(loop, chain, copies, rest, marked, bufs, stages, what,
                            _Retarget, Allocate, warp=producer == "tma_warp",
                            swizzles=_swizzles(chain))

        def slot_of(it):
            rel = it if isinstance(lo, Const) and lo.value == 0 else _op.sub(it, lo)
            return _op.floormod(rel, Const(stages, ko.dtype))

        def copies_at(it, slot):
            body = _Retarget(bufs, slot).visit(simplify(substitute(seq(*copies), {ko: it})))
            return AttrStmt(ASYNC_COPY, ko, body)

        # the barriers inside the iteration (after its reads of other tiles, as
        # FlashAttention's) need not wait for the tiles of the iterations ahead: with
        # groups, they wait for all but those
        later = _LaterBarriers(min(stages - 1, MAX_WAIT_GROUP))
        rest = [later.visit(r) for r in rest]
        grouped = stages > 2 or later.found

        def group(stmt):
            # (more than two stages: the barrier waits for all groups but the latest)
            return AttrStmt(ASYNC_GROUP, 0, stmt) if grouped else stmt

        def guarded(it, stmt):
            cond = simplify(_op.compare(LT, it, end))
            if isinstance(cond, Const) and cond.value:
                return group(stmt)
            return group(IfThenElse(cond, stmt, None))

        ahead = _op.add(ko, Const(stages - 1, ko.dtype))
        barrier = Evaluate(Call("syncthreads", (), "int32"))
        if stages > 2:   # the tiles of the next stages - 2 iterations may still be in flight
            barrier = AttrStmt(ASYNC_WAIT, stages - 2, barrier)
        body = seq(
            barrier,
            group(IfThenElse(_op.compare(LT, ahead, end), copies_at(ahead, slot_of(ahead)),
                             None)),
            _Retarget(bufs, slot_of(ko)).visit(seq(*rest)),
        )
        for c in reversed(chain):  # allocations of other stages stay in the loop
            if isinstance(c, Allocate) and c.buffer not in marked_set:
                body = Allocate(c.buffer, body)
        prologue = [group(copies_at(lo, Const(0, ko.dtype)))]
        for p in range(1, stages - 1):   # the first stages - 1 tiles before the loop
            it = _op.add(lo, Const(p, ko.dtype))
            prologue.append(guarded(it, copies_at(it, Const(p, ko.dtype))))
        out = seq(*prologue, For(ko, lo, ext, loop.kind, body, loop.thread_tag))
        swizzles = _swizzles(chain)
        for b in reversed(marked):
            out = Allocate(bufs[b], out)
            if swizzles.get(b, "none") != "none":
                check_swizzled_rows(bufs[b], swizzles[b], what)
                out = AttrStmt(BUFFER_SWIZZLE, (bufs[b], swizzles[b]), out)
        return out


def _own_only(acc: Access, marked: set) -> bool:
    """Whether a statement of these accesses writes only per-thread buffers (registers,
    fragments) and reads none of the ``marked`` tiles."""
    return bool(acc.writes) and all(b.scope in PER_THREAD_SCOPES for b in acc.writes) \
        and not (acc.reads & marked)


def _unpipelined(loop: For, chain, inner) -> For:
    """The loop as it is, its tiles' allocations (one buffer each) back around ``inner``."""
    body = inner
    for c in reversed(chain):
        if isinstance(c, Allocate):
            body = Allocate(c.buffer, body)
    return For(loop.var, loop.min, loop.extent, loop.kind, body, loop.thread_tag)


#: the most groups of copies a barrier leaves in flight (``tc_cp_async_wait_group1..6``)
MAX_WAIT_GROUP = 6


class _LaterBarriers(Mutator):
    """The barriers of an iteration's reads, each ``AttrStmt("async_wait", n, ...)``:
    waiting for the thread's copies but the ``n`` latest groups (the tiles of the
    iterations ahead, which only the next iterations read, after their own barrier)."""

    def __init__(self, n: int):
        self.n, self.found = n, False

    def visit_Evaluate(self, s):
        if _is_barrier(s):
            self.found = True
            return AttrStmt(ASYNC_WAIT, self.n, s)
        return s

    def visit_AttrStmt(self, s):
        if s.key == ASYNC_WAIT:
            return s
        return self.generic_visit(s)


def _producers(chain, marked, what, loop) -> str:
    """The producer of the loop's marked stages (``double_buffer(producer=...)``): one
    for all of them."""
    found, n = {}, "threads"
    for c in chain:   # a BUFFER_PRODUCER attribute sits right around its DOUBLE_BUFFER one
        if isinstance(c, AttrStmt) and c.key == BUFFER_PRODUCER:
            n = str(c.value)
        elif isinstance(c, AttrStmt) and c.key == DOUBLE_BUFFER:
            found[c.value] = n
            n = "threads"
    kinds = sorted({found.get(b, "threads") for b in marked})
    if len(kinds) > 1:
        raise ScheduleError(
            f"{what}: the stages copied in loop {display(loop.var.name)}'s iteration have the "
            f"producers {' and '.join(map(repr, kinds))}; they share the loop's ring: give "
            "each the same double_buffer(producer=...)")
    return kinds[0]


def check_swizzled_rows(ring: Buffer, swizzle: str, what: str) -> None:
    """ScheduleError unless the slots of ``ring`` (``[stages, ..., rows, cols]``) hold
    rows of exactly the swizzle's bytes, packed, each slot whole 8-row patterns."""
    span = _tma.SWIZZLE_SPAN[swizzle]
    e = _dt.nbytes(ring.dtype)
    strides = [int(x.value) if isinstance(x, Const) else None for x in
               (ring.strides if ring.strides is not None else ring.row_major_strides())]
    cols, rows = ring.shape[-1], ring.shape[-2]
    ok = (isinstance(cols, Const) and int(cols.value) * e == span and strides[-1] == 1
          and strides[-2] == int(cols.value) and isinstance(rows, Const)
          and int(rows.value) % 8 == 0
          and all(x is not None and (x * e) % (8 * span) == 0 for x in strides[:-2]))
    if not ok:
        raise ScheduleError(
            f"{what}: swizzle={swizzle!r} needs the tile's rows of exactly {span} bytes "
            f"({span // e} elements of {ring.dtype}), packed (no storage_align), in whole "
            f"8-row patterns; its rows are {cols} elements (strides {list(ring.strides)}): "
            "give the tile that width, or swizzle='none'")


def _swizzles(chain) -> dict:
    """The swizzle of each marked stage (``double_buffer(swizzle=...)``: a
    ``BUFFER_SWIZZLE`` attribute right around its ``DOUBLE_BUFFER`` one)."""
    found, n = {}, "none"
    for c in chain:
        if isinstance(c, AttrStmt) and c.key == BUFFER_SWIZZLE:
            n = str(c.value)
        elif isinstance(c, AttrStmt) and c.key == DOUBLE_BUFFER:
            found[c.value] = n
            n = "none"
    return found


def _stages(chain, marked, what, loop) -> int:
    """The buffers of the loop's marked stages (``double_buffer(stages=...)``): one
    number for all of them, since they share the ring's slot."""
    counts, n = {}, 2
    for c in chain:   # a BUFFER_STAGES attribute sits around its DOUBLE_BUFFER one
        if isinstance(c, AttrStmt) and c.key == BUFFER_STAGES:
            n = int(c.value)
        elif isinstance(c, AttrStmt) and c.key == DOUBLE_BUFFER:
            counts[c.value] = n
            n = 2
    found = sorted({counts.get(b, 2) for b in marked})
    if len(found) > 1:
        raise ScheduleError(
            f"{what}: the stages copied in loop {display(loop.var.name)}'s iteration have "
            f"{' and '.join(map(str, found))} buffers; they share the loop's ring of "
            f"buffers: give each the same double_buffer(stages=...)")
    return found[0]


def double_buffer(func):
    body = _DoubleBuffer().visit(func.body)
    return func if body is func.body else func.with_body(body)
