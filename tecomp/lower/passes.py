"""The lowering passes (each a pure PrimFunc -> PrimFunc function)."""
from __future__ import annotations

from ..errors import ScheduleError, internal_assert
from ..ir import op
from ..ir.expr import Const, ProducerLoad, Reduce
from ..ir.functor import Mutator, Visitor, collect, substitute
from ..ir.names import display
from ..ir.simplify import simplify
from ..ir.stmt import Allocate, AttrStmt, BufferStore, For, LetStmt, PrimFunc, SeqStmt, seq
from .barriers import insert_barriers
from . import index_dtype as _index_dtype
from .double_buffer import double_buffer
from .loop_partition import loop_partition
from .prefetch import expand_prefetches
from .ranges import shape_var_ranges  # noqa: F401  (re-exported)


def simplify_pass(func: PrimFunc) -> PrimFunc:
    """Fold constants and canonicalise index arithmetic, using loop ranges."""
    body = simplify(func.body, shape_var_ranges(func))
    return func if body is func.body else func.with_body(body)


def prefetch_pass(func: PrimFunc) -> PrimFunc:
    """Expand ``s[T].prefetch(...)`` requests into loop nests of ``Prefetch`` statements
    at the start of their loops' bodies (see prefetch.py)."""
    return expand_prefetches(func)


def loop_partition_pass(func: PrimFunc) -> PrimFunc:
    """Remove split-tail guards from the main part of loops (see loop_partition.py)."""
    return loop_partition(func, simplify, shape_var_ranges(func))


class _UnrollExplicit(Mutator):
    def visit_AttrStmt(self, s):
        body = self.visit(s.body)
        if s.key == "pragma_unroll_explicit" and isinstance(body, For) and isinstance(body.extent, Const):
            f = body
            copies = [substitute(f.body, {f.var: _add(f.min, i)}) for i in range(f.extent.value)]
            return seq(*copies)
        return s if body is s.body else AttrStmt(s.key, s.value, body)


def _add(m, i):
    return op.add(m, Const(i, m.dtype))


#: the most copies of a statement that unrolling may make: the product of the constant
#: extents of the loops around it that are unrolled whole (``pragma(axis,
#: "unroll_explicit")`` here, ``unroll`` by the code generator, which rolls a loop longer
#: than its ``MAX_FULL_UNROLL``).  A nest of 64 x 64 copies takes 5-8 s to build, and the
#: time grows with the copies: past this, a ScheduleError.  tecomp's templates and rules
#: unroll at most 162 copies (3 x 3 x 9 x 2, a convolution's window and register block).
MAX_UNROLL_COPIES = 4096

#: an unrolled loop with a constant extent up to this is unrolled at code generation (the
#: LLVM emitter's rule, :mod:`tecomp.codegen.llvm.emit_control`); a longer one stays a loop
MAX_FULL_UNROLL = 1024


class _UnrollBudget(Visitor):
    def __init__(self, full_unroll: int):
        self.full = full_unroll
        self.chain = []      # (loop variable, extent) of the unrolled loops around
        self.copies = 1
        self.explicit = set()

    def visit_AttrStmt(self, s):
        if s.key == "pragma_unroll_explicit" and isinstance(s.body, For):
            self.explicit.add(id(s.body))
        self.generic_visit(s)

    def visit_For(self, s):
        n = s.extent.value if isinstance(s.extent, Const) else 1
        whole = s.kind == "unrolled" and (id(s) in self.explicit or n <= self.full)
        if not whole or n <= 1:
            self.generic_visit(s)
            return
        self.chain.append((s.var.name, n))
        self.copies *= n
        if self.copies > MAX_UNROLL_COPIES:
            loops = " x ".join(f"{display(v)} ({e})" for v, e in self.chain)
            raise ScheduleError(
                f"unrolling the loops over {loops} makes {self.copies} copies of their body, "
                f"more than the {MAX_UNROLL_COPIES} tecomp unrolls (a build of minutes): "
                f"unroll shorter loops (split an axis and unroll its inner part), or fewer of "
                f"them")
        self.generic_visit(s)
        self.copies //= n
        self.chain.pop()


def check_unroll_budget(func: PrimFunc) -> None:
    """A ScheduleError when unrolling would make more than :data:`MAX_UNROLL_COPIES`
    copies of a statement (see there)."""
    _UnrollBudget(MAX_FULL_UNROLL).visit(func.body)


def unroll_explicit_pass(func: PrimFunc) -> PrimFunc:
    """Loops with ``pragma(axis, "unroll_explicit")`` are unrolled in the IR itself (after
    :func:`check_unroll_budget`)."""
    check_unroll_budget(func)
    body = _UnrollExplicit().visit(func.body)
    if body is func.body:
        return func

    return func.with_body(simplify(body))


class _RemoveNoOp(Mutator):
    def visit_For(self, s):
        body = self.visit(s.body)
        if isinstance(body, SeqStmt) and not body.seq:
            return body
        if isinstance(s.extent, Const) and s.extent.value <= 0:
            return SeqStmt(())
        return s if body is s.body else For(s.var, s.min, s.extent, s.kind, body, s.thread_tag)

    def visit_SeqStmt(self, s):
        items = [self.visit(x) for x in s.seq]
        if all(a is b for a, b in zip(items, s.seq)):
            return s
        return seq(*items)


def remove_no_op_pass(func: PrimFunc) -> PrimFunc:
    """Drop loops with empty bodies or no iterations, and empty sequences."""
    body = _RemoveNoOp().visit(func.body)
    return func if body is func.body else func.with_body(body)


def insert_barriers_pass(func: PrimFunc) -> PrimFunc:
    """Insert __syncthreads() where shared memory written by some threads is read by
    others (GPU targets only)."""
    return insert_barriers(func)


def double_buffer_pass(func: PrimFunc) -> PrimFunc:
    """Pipeline the loops whose shared tiles are double-buffered (GPU targets;
    ``s[S].double_buffer()``): the next iteration's copy before this one's reads."""
    return double_buffer(func)


def verify_pass(func: PrimFunc) -> PrimFunc:
    """Check invariants the backends rely on; a failure is a tecomp bug."""
    class _V(Visitor):
        def visit_ProducerLoad(self, e):
            internal_assert(False, f"a tensor read survived lowering: {e}")

        def visit_Reduce(self, e):
            internal_assert(False, f"a reduction survived lowering: {e}")

        def visit_AttrStmt(self, s):
            internal_assert(s.key != "prefetch", f"a prefetch request survived lowering: {s.value}")
            self.generic_visit(s)

        def visit_Prefetch(self, s):
            internal_assert(len(s.indices) == len(s.buffer.shape),
                            f"a prefetch of {s.buffer.name} has {len(s.indices)} indices for "
                            f"{len(s.buffer.shape)} dimensions")
            self.generic_visit(s)

    _V().visit(func.body)
    return func


# Limits every CUDA device of compute capability >= 3.0 shares (from tecomp.target).
from ..target import MAX_BLOCK_DIMS as _MAX_BLOCK_DIMS, MAX_THREADS_PER_BLOCK  # noqa: E402

MAX_BLOCK_DIM = dict(zip(("threadIdx.x", "threadIdx.y", "threadIdx.z"), _MAX_BLOCK_DIMS))


def verify_thread_extents_pass(func: PrimFunc) -> PrimFunc:
    """In each kernel (a top-level statement with GPU-bound loops), every loop bound to
    the same thread tag has the same extent, and a block fits a CUDA device."""
    body = func.body
    while isinstance(body, (Allocate, LetStmt, AttrStmt)):
        body = body.body
    kernels = body.seq if isinstance(body, SeqStmt) else (body,)
    for kern in kernels:
        loops = _thread_loops_outer_first(kern)
        by_tag = {}
        for lp in loops:
            stores = collect(lp.body, lambda n: isinstance(n, BufferStore))
            who = f"{stores[0].buffer.name}'s loop {lp.var.name}" if stores else f"loop {lp.var.name}"
            by_tag.setdefault(lp.thread_tag, []).append((lp.extent, who))
        for tag, uses in by_tag.items():
            first_ext, first_who = uses[0]
            for ext, who in uses[1:]:
                # the same constant in int32 and int64 (a stage indexed in int64 beside
                # one in int32) is the same extent
                same = (ext.value == first_ext.value if isinstance(ext, Const)
                        and isinstance(first_ext, Const) else ext == first_ext)
                if not same:
                    raise ScheduleError(
                        f"{tag} is bound to loops of different extents in one kernel: "
                        f"{first_who} ({first_ext}) and {who} ({ext}); a thread axis has one "
                        f"extent per kernel: split the axes so that every loop bound to {tag} "
                        f"has extent {first_ext}")
        total = 1
        for tag, lim in MAX_BLOCK_DIM.items():
            if tag in by_tag and isinstance(by_tag[tag][0][0], Const):
                ext = by_tag[tag][0][0].value
                if ext > lim:
                    raise ScheduleError(f"{tag} has extent {ext} ({by_tag[tag][0][1]}), above the "
                                        f"CUDA limit of {lim}; split that axis further")
                total *= ext
        if total > MAX_THREADS_PER_BLOCK:
            dims = ", ".join(f"{t}={by_tag[t][0][0]}" for t in MAX_BLOCK_DIM if t in by_tag)
            raise ScheduleError(f"a block of {total} threads ({dims}) is above the CUDA limit of "
                                f"{MAX_THREADS_PER_BLOCK} threads per block; bind smaller axes to "
                                "threadIdx (split them further)")
    return func


def _thread_loops_outer_first(stmt) -> list:
    out = []

    class _V(Visitor):
        def visit_For(self, s):
            if s.kind == "thread":
                out.append(s)
            self.generic_visit(s)

    _V().visit(stmt)
    return out


def index_dtype_pass(func: PrimFunc) -> PrimFunc:
    """Widen int32 index arithmetic that could wrap; record the call-time checks of what
    depends on the parameters (see index_dtype.py)."""
    return _index_dtype.index_dtype_pass(func)


def offset_checks_pass(func: PrimFunc) -> PrimFunc:
    """The CUDA targets: record that every buffer flattened in int32 spans at most 2**31
    elements when the kernel is called (see index_dtype.py)."""
    return _index_dtype.offset_checks_pass(func)
