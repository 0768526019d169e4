"""Barrier insertion for GPU targets.

Rule: inside a kernel, each sequence of statements is scanned in order, keeping the
``shared`` buffers read and written since the last barrier.  A ``syncthreads()`` goes
before a statement that reads a buffer written since then (read-after-write across
threads) or writes one read since then (write-after-read).  Inside a serial loop the
accesses of the previous iteration count as well, so a tile loaded at the top of a
``k.outer`` loop waits for the readers of the previous tile.  Nowhere else: buffers in
``local`` scope and ``global`` buffers get no barrier (global memory written by one
block and read by another needs separate kernels, which the CUDA backend makes per
root stage).
"""
from __future__ import annotations

from ..ir.expr import Call, Const
from ..ir.functor import Mutator, Visitor
from ..ir.stmt import Evaluate, For, SeqStmt, seq


def _barrier():
    return Evaluate(Call("syncthreads", (), "int32"))


class Access(Visitor):
    """Buffers read and written under a statement (only those of ``scope`` when given);
    ``other``: buffers a node names otherwise (a tensorized region's operands)."""

    def __init__(self, scope=None):
        self.scope = scope
        self.reads, self.writes = set(), set()
        self.other = []

    def visit_BufferLoad(self, e):
        if self.scope is None or e.buffer.scope == self.scope:
            self.reads.add(e.buffer)
        self.generic_visit(e)

    def visit_BufferStore(self, s):
        if self.scope is None or s.buffer.scope == self.scope:
            self.writes.add(s.buffer)
        self.generic_visit(s)

    def visit_TensorIntrinCall(self, s):
        self.other.extend(s.buffers)
        self.generic_visit(s)


def access(stmt, scope=None) -> Access:
    a = Access(scope)
    a.visit(stmt)
    return a


class _Insert(Mutator):
    def __init__(self):
        self.serial_depth = 0  # serial loops inside thread-bound loops
        self.in_kernel = 0

    def visit_For(self, s):
        is_thread = s.kind == "thread"
        self.in_kernel += is_thread
        inner_serial = self.in_kernel > 0 and not is_thread
        self.serial_depth += inner_serial
        body = self.visit(s.body)
        self.serial_depth -= inner_serial
        self.in_kernel -= is_thread
        return s if body is s.body else For(s.var, s.min, s.extent, s.kind, body, s.thread_tag)

    def visit_SeqStmt(self, s):
        items = [self.visit(x) for x in s.seq]
        if not self.in_kernel:
            return s if all(a is b for a, b in zip(items, s.seq)) else seq(*items)
        acc = [access(x, "shared") for x in items]
        # Hazards since the last barrier.  Inside a serial loop the previous iteration's
        # accesses count too (a loop-carried write-after-read or read-after-write).
        reads, writes = set(), set()
        if self.serial_depth:
            for a in acc:
                reads |= a.reads
                writes |= a.writes
        out = []
        for x, a in zip(items, acc):
            if (a.reads & writes) or (a.writes & reads):
                if not (out and _is_barrier(out[-1])):
                    out.append(_barrier())
                reads, writes = set(), set()
            out.append(x)
            if _is_barrier(x):
                reads, writes = set(), set()
            else:
                reads |= a.reads
                writes |= a.writes
        if len(out) == len(items) and all(a is b for a, b in zip(out, s.seq)):
            return s
        return seq(*out)


def _is_barrier(s):
    return isinstance(s, Evaluate) and isinstance(s.value, Call) and s.value.op == "syncthreads"


def insert_barriers(func):
    body = _Insert().visit(func.body)
    return func if body is func.body else func.with_body(body)
