"""The ``prefetch`` pass: expand ``s[T].prefetch(tensor, axis, offset)`` into ``Prefetch``
statements.

Lowering (``schedule_ops``) leaves ``AttrStmt("prefetch", PrefetchRequest(...), body)``
directly in the body of the loop over ``axis``.  This pass, which runs after the first
``simplify`` (so the indices are in canonical form and one-iteration loops are gone),
replaces each by a small loop nest at the start of that body:

1. Every load and store of the buffer in the loop body (stages computed inside the loop
   included) is collected with the ranges of the loops around it inside the body.
2. Per dimension, the interval of each index over those inner loops
   (:func:`tecomp.ir.arith.eval_interval`; the loop's own counter and the loops outside
   stay symbolic); the hull over every access, clipped to the buffer's shape.  Accesses
   under a condition count as if always made (the clip keeps the region inside the
   array).
3. The loop counter ``v`` of ``for (v, m, E)`` (or, with ``along=``, the counter of that
   enclosing loop) is replaced by the iteration to prefetch for, clamped into its loop:
   ``min(v + offset, m + E - 1)`` (``max(v + offset, m)`` for a negative offset).  With
   ``carry=`` (an enclosing loop ``c`` of ``[cm, cm + CE)``), an iteration past the end
   is taken from the next iteration of ``c``: ``if (v + offset >= m + E && c < cm + CE -
   1)`` the region for ``v + offset - E`` of ``c + 1``, else the clamped one (a branch
   the step loop predicts, rather than index arithmetic at every step).
4. The region becomes serial loops over its outer dimensions and, along the innermost
   one, one ``Prefetch`` per cache line: ``L = 64 // itemsize`` elements apart, at
   ``lo + min(p*L, hi - lo)`` for ``p`` in ``[0, ceil((hi - lo) / L) + 1)`` (none when
   ``hi < lo``).  The last point is ``hi`` itself, so every line of ``[lo, hi]`` gets one
   whatever the array's alignment (at most one prefetch more than the number of lines;
   a loop unrolled where those points are a constant few: :data:`UNROLL_FEW_LINES`).
   A *stream* -- an innermost region narrower than a line (before the clip) whose start
   moves on by at most a line (at least one element) each iteration of a loop that runs
   :data:`MIN_STREAM_STEPS` times or more -- gets one prefetch, at ``lo`` (none where
   the clip empties the region): the iterations' starts together fall in every line the
   loop walks but perhaps the last, whatever the alignment (a vector step of a row,
   where two prefetches per step would ask for each line twice); its outer dimensions,
   when they span a constant fewer
   than :data:`MAX_UNROLLED_ROWS` rows, are an unrolled loop over that span, each row
   clamped into the array, none where the clip empties them (a few rows of a matrix
   streamed side by side).  A *wide stream* -- an innermost region a whole number
   ``n`` of lines wide whose start moves on by exactly its width each iteration (four
   vectors a step along a row) -- gets ``n`` prefetches, ``L`` elements apart from
   ``lo`` (fewer where the clip shortens the region), unrolled: the regions tile a
   contiguous run, so every line of it but perhaps the last is asked for once.

It is a ``Prefetch(write=True)`` when the body stores to the buffer, at the request's
cache ``level``.  A loop of one
iteration (removed by ``simplify``) has no other iteration to prefetch for: its request
is dropped.  A region that cannot be bounded raises :class:`ScheduleError`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional

from ..errors import ScheduleError
from ..ir import dtype as _dt
from ..ir import op as _op
from ..ir.arith import eval_interval
from ..ir.expr import GE, LT, Buffer, Const, Expr, Range, Var
from ..ir.functor import Mutator, Visitor, free_vars, substitute
from ..ir.printer import to_str
from ..ir.simplify import simplify
from ..ir.stmt import AttrStmt, For, IfThenElse, Prefetch, PrimFunc, seq
from .ranges import shape_var_ranges

#: bytes per cache line (x86 and most AArch64 cores)
CACHE_LINE_BYTES = 64

PREFETCH_ATTR = "prefetch"

#: a loop of fewer iterations prefetches a region narrower than a line at both ends,
#: never as a stream (``_streams``: its last iteration's end would be a share of the lines)
MIN_STREAM_STEPS = 4

#: whether a wide stream (an innermost region a whole number of lines wide, moving on by
#: its width each iteration: four vectors a step along a row) gets one prefetch per line,
#: unrolled (else the ``ceil(span / L) + 1`` of a region of unknown alignment, in a loop)
WIDE_STREAMS = True

#: whether a region of one row and a constant few lines (fewer points than
#: :data:`MAX_UNROLLED_ROWS`) that is neither a stream nor a wide stream -- a skinny
#: GEMM's column strip of W, two to five vectors of one row a step, down the rows -- gets
#: its ``ceil(span / L) + 1``
#: prefetches unrolled, each at a constant offset, rather than a loop of a compare, a
#: select and a branch per line at every step (an A/B switch, off: the skinny GEMM's
#: column strips, 1 thread, Zen 4, under load, ran 1.00-1.03x faster with W in L2 but
#: 0.85-0.94x as fast at 5 to 8 rows of a 180 MB W, in three runs of four;
#: benchmarks/DECISIONS.md, "Skinny GEMM: A @ W's strips prefetch the next tile's first
#: rows (Zen 4)")
UNROLL_FEW_LINES = False

#: whether a request along an enclosing loop (``along=``) at a loop of one iteration,
#: which simplify removed, is expanded where that loop was (each iteration of the
#: enclosing loops prefetches the region of its ``along`` loop's iteration ahead), not
#: dropped: a column reduction whose tile's vectors are one step (``any`` over the middle
#: axis of 32x64x128x256 bools) asked for its passes ahead and got none; with them 1.10-1.14x
#: (Zen 4, under load: benchmarks/DECISIONS.md, "Column reductions: a prefetch along the
#: passes at a loop of one iteration kept"; ``reductions.py --along1-off``)
ALONG_AT_ONE_ITERATION = True

#: a stream's prefetches (one line in each of a few rows, see ``_streams``) are unrolled
#: up to this many rows (a skinny GEMM's tile of rows of W, ``strategy.cpu.skinny``)
MAX_UNROLLED_ROWS = 8


@dataclass(frozen=True, eq=False)
class PrefetchRequest:
    """The value of an ``AttrStmt("prefetch")``: prefetch ``buffer`` for iteration
    ``loop_var + offset`` of the loop whose body the attribute is (the names are for
    messages)."""

    buffer: Buffer
    loop_var: Var
    offset: int
    stage: str
    axis: str
    tensor: str
    along: Optional[Var] = None   # the enclosing loop advanced by offset (None: loop_var)
    along_name: str = ""
    level: int = 1                # the cache level (Prefetch.level)
    carry: Optional[Var] = None   # the enclosing loop whose next iteration continues
    #                               the prefetch past the end of loop_var's (None: clamped)

    def __str__(self):
        sign = '+' if self.offset >= 0 else '-'
        into = f" into L{self.level}" if self.level != 1 else ""
        if self.carry is not None:
            into += f", carried into {self.carry.name}"
        if self.along is not None:
            return (f"{self.tensor} at {self.axis}, {self.along_name} {sign} "
                    f"{abs(self.offset)}{into}")
        return f"{self.tensor} at {self.axis} {sign} {abs(self.offset)}{into}"

    def what(self) -> str:
        return f"prefetch of {self.tensor} on stage {self.stage}, axis {self.axis}"


class _Accesses(Visitor):
    """Loads and stores of one buffer, each with the ranges of the loops around it."""

    def __init__(self, buf: Buffer):
        self.buf = buf
        self.inner: Dict[Var, Range] = {}
        self.bound = set()  # variables bound inside the body (loops, lets)
        self.found: List[tuple] = []  # (indices, inner ranges)
        self.stores = False
        self.allocated = False

    def visit_For(self, s):
        self.visit(s.min)
        self.visit(s.extent)
        old = self.inner.get(s.var)
        self.inner[s.var] = Range(s.min, s.extent)
        self.bound.add(s.var)
        self.visit(s.body)
        if old is None:
            del self.inner[s.var]
        else:
            self.inner[s.var] = old

    def visit_LetStmt(self, s):
        self.bound.add(s.var)
        self.generic_visit(s)

    def visit_Let(self, e):
        self.bound.add(e.var)
        self.generic_visit(e)

    def visit_Allocate(self, s):
        if s.buffer is self.buf:
            self.allocated = True
        self.generic_visit(s)

    def visit_BufferLoad(self, e):
        if e.buffer is self.buf:
            self.found.append((e.indices, dict(self.inner)))
        self.generic_visit(e)

    def visit_BufferStore(self, s):
        if s.buffer is self.buf:
            self.stores = True
            self.found.append((s.indices, dict(self.inner)))
        self.generic_visit(s)


def _itemsize(dtype: str) -> int:
    return 1 if dtype == "bool" else max(1, _dt.bits(dtype) // 8)


class _Expand(Mutator):
    def __init__(self, func: PrimFunc):
        self.outer: Dict[Var, Range] = dict(shape_var_ranges(func))
        self.lanes = 0   # (the vectorized or GPU-thread loops around: no prefetch there)

    def visit_For(self, s: For):
        body = s.body
        reqs, gone = [], []   # (gone: the requests of a loop of one iteration, below)
        while isinstance(body, AttrStmt) and body.key == PREFETCH_ATTR:
            (reqs if body.value.loop_var is s.var else gone).append(body.value)
            body = body.body
        old = self.outer.get(s.var)
        self.outer[s.var] = Range(s.min, s.extent)
        lanes = s.kind == "vectorized" or bool(s.thread_tag)
        self.lanes += lanes
        try:
            new_body = self.visit(body)
            # (a request along an enclosing loop of one iteration, which simplify
            # removed, has no other iteration to prefetch for: dropped)
            nests = [self._expand(s, r, body) for r in reqs
                     if r.along is None or r.along in self.outer]
            nests += self._of_one_iteration(gone, body, s)
        finally:
            self.lanes -= lanes
            if old is None:
                del self.outer[s.var]
            else:
                self.outer[s.var] = old
        if not reqs and not gone and new_body is s.body:
            return s
        return For(s.var, s.min, s.extent, s.kind, seq(*nests, new_body), s.thread_tag)

    def visit_AttrStmt(self, s: AttrStmt):
        if s.key == PREFETCH_ATTR:
            gone, body = [], s
            while isinstance(body, AttrStmt) and body.key == PREFETCH_ATTR:
                gone.append(body.value)
                body = body.body
            return seq(*self._of_one_iteration(gone, body), self.visit(body))
        return self.generic_visit(s)

    def _of_one_iteration(self, reqs, body, around: Optional[For] = None) -> list:
        """The prefetches of requests not in the body of their loop: that loop had one
        iteration and simplify put its body (``body``) in its place.  Without ``along=``
        there is no other iteration to prefetch for: none.  Along an enclosing loop
        (:data:`ALONG_AT_ONE_ITERATION`), that loop's iteration ahead, here (not inside a
        vectorized or GPU-thread loop, where a statement runs per lane); where the
        place is the start of the body of loop ``around``, the region's lines are counted
        as its iterations walk them (a stream: see ``_streams``, ``_wide_stream``)."""
        return [self._expand(around if around is not None else For(
            r.loop_var, Const(0, r.loop_var.dtype), Const(1, r.loop_var.dtype), "serial",
            body), r, body, whole_lines=True)
            for r in reqs if ALONG_AT_ONE_ITERATION and r.along in self.outer and not self.lanes]

    def _expand(self, loop: For, req: PrefetchRequest, body, whole_lines: bool = False):
        """The prefetches of ``req`` at the start of ``loop``'s body (``body``: without
        the requests).  ``whole_lines``: an innermost region whole lines wide, starting
        on a line of rows a whole number of lines long, gets one prefetch per line (a
        request of a loop of one iteration: :meth:`_of_one_iteration`)."""
        buf = req.buffer
        acc = _Accesses(buf)
        acc.visit(body)
        what = req.what()
        if acc.allocated:
            raise ScheduleError(
                f"{what}: {req.tensor} is computed inside the loop over {req.axis} (compute_at), "
                "so its buffer exists for one iteration only; prefetch the tensors it reads "
                "instead, or compute it at an outer loop")
        if not acc.found:
            raise ScheduleError(
                f"{what}: the loop over {req.axis} neither reads nor writes {req.tensor} (nor do "
                f"the stages computed inside it); prefetch a tensor that the loop body "
                f"accesses, or pick a loop that accesses {req.tensor}")
        ndim = len(buf.shape)
        outer = dict(self.outer)
        zero, one = Const(0, "int32"), Const(1, "int32")
        los: List[Expr] = []
        his: List[Expr] = []
        spans: List[Expr] = []   # hi - lo before the clip into the buffer
        for d in range(ndim):
            lo = hi = None
            for indices, inner in acc.found:
                idx = indices[d]
                itv = eval_interval(idx, {**outer, **inner}, relax=list(inner))
                bad = itv.lo is None or itv.hi is None or any(
                    v in acc.bound for x in (itv.lo, itv.hi) for v in free_vars(x))
                if bad:
                    raise ScheduleError(
                        f"{what}: the region of {req.tensor} that one iteration accesses cannot "
                        f"be bounded (dimension {d} is indexed with `{to_str(idx)}`); prefetch "
                        "at a loop whose accesses of it are affine in the loop counters, or "
                        "drop the prefetch")
                lo = itv.lo if lo is None else _op.minimum(lo, itv.lo)
                hi = itv.hi if hi is None else _op.maximum(hi, itv.hi)
            ext = buf.shape[d]
            los.append(simplify(_op.maximum(lo, zero), outer))
            his.append(simplify(_op.minimum(hi, _op.sub(ext, one)), outer))
            spans.append(simplify(_op.sub(hi, lo), outer))
            raw = (lo, hi)
        # the iteration to prefetch for (of this loop, or of the enclosing loop named by
        # along=), clamped into that loop
        v, off = loop.var, req.offset
        vmin, vext = loop.min, loop.extent
        if req.along is not None:
            v = req.along
            vmin, vext = self.outer[v].min, self.outer[v].extent
        if isinstance(vext, Const):
            # an offset beyond the loop's extent prefetches for its first or last
            # iteration; say so with a small constant (v + off must not wrap)
            n = int(vext.value)
            off = max(-n, min(n, off))
        shifted = _op.add(v, Const(off, v.dtype))
        carried = None   # (the condition, the iterations) where carry= takes the next one
        if off > 0:
            last = _op.sub(_op.add(vmin, vext), Const(1, v.dtype))
            target = _op.minimum(shifted, last)
            c = req.carry
            if c is not None and c in self.outer and c.dtype == v.dtype:
                # past the loop's end (off <= vext: into the next iteration of the carry
                # loop at most), while the carry loop has one: that iteration, as if the
                # two were one loop; else clamped as without carry (and where the carry
                # loop had one iteration, which simplify removed: not in outer)
                crange = self.outer[c]
                clast = _op.sub(_op.add(crange.min, crange.extent), Const(1, c.dtype))
                cond = _op.all_(_op.compare(GE, shifted, _op.add(vmin, vext)),
                                _op.compare(LT, c, clast))
                carried = (cond, {v: _op.sub(shifted, vext), c: _op.add(c, Const(1, c.dtype))})
        elif off < 0:
            target = _op.maximum(shifted, vmin)
        else:
            target = v
        L = max(1, CACHE_LINE_BYTES // _itemsize(buf.dtype))
        stream = _streams(*raw, loop, L, outer)   # (the innermost, before the clip)
        lines = 0 if stream or not WIDE_STREAMS else _wide_stream(*raw, loop, L, outer)
        if whole_lines and not stream and not lines:
            lines = _whole_lines(*raw, buf.shape[-1], L, outer)
        stmt = self._nest(buf, {v: target}, los, his, spans, stream, lines, L, outer,
                          acc.stores, req.level)
        if carried is not None:
            stmt = IfThenElse(carried[0], self._nest(buf, carried[1], los, his, spans, stream,
                                                     lines, L, outer, acc.stores, req.level),
                              stmt)
        return simplify(stmt, outer)

    @staticmethod
    def _nest(buf, vmap, los, his, spans, stream, lines, L, outer, stores, level):
        """The loop nest of prefetches of the region ``[los, his]`` with the iterations
        ``vmap`` (the loop counters to prefetch for) substituted."""
        ndim = len(buf.shape)
        zero, one = Const(0, "int32"), Const(1, "int32")
        los = [substitute(x, vmap) for x in los]
        his = [substitute(x, vmap) for x in his]
        indices: List[Expr] = []
        loops = []
        clipped: List[Expr] = []   # the unrolled rows' counts after the clip
        guards: List[Expr] = []    # conditions for the nest (a region left non-empty)
        for d in range(ndim):
            q = Var(f"{buf.name}.pf{d}" if ndim > 1 else f"{buf.name}.pf", "int32")
            lo, hi = los[d], his[d]
            if d < ndim - 1 and isinstance(spans[d], Const) and spans[d].value == 0:
                # one row, clamped into the buffer (a row past its end: accesses under a
                # condition, or the iteration ahead of a loop longer than the buffer)
                indices.append(simplify(_op.minimum(lo, _op.sub(buf.shape[d], one)), outer))
            elif d < ndim - 1 and stream and isinstance(spans[d], Const) \
                    and spans[d].value < MAX_UNROLLED_ROWS:
                # a few rows: unrolled over the region's extent before the clip, each
                # index clamped into the buffer (at its edge a row is prefetched twice)
                loops.append((q, Const(spans[d].value + 1, "int32"), "unrolled"))
                indices.append(_op.minimum(_op.add(lo, q), his[d]))
                clipped.append(_op.add(_op.sub(hi, lo), one))   # 0 or less: no rows
            elif d < ndim - 1:
                loops.append((q, _op.add(_op.sub(hi, lo), one), "serial"))
                indices.append(_op.add(lo, q))
            elif stream:
                # one prefetch at lo; none where the clip emptied the region (accesses
                # under a condition past the array's edge)
                count = _op.minimum(one, _op.add(_op.sub(hi, lo), one))
                for rows in clipped:
                    count = _op.minimum(count, rows)
                loops.append((q, count, "serial"))
                indices.append(lo)
            elif lines:
                # a wide stream: one prefetch per line of the region, none past its
                # clipped end
                Lc = Const(L, "int32")
                count = simplify(_op.minimum(Const(lines, "int32"), _op.floordiv(
                    _op.add(_op.sub(hi, lo), Lc), Lc)), outer)
                loops.append((q, count, "unrolled" if isinstance(count, Const) else "serial"))
                indices.append(_op.add(lo, _op.mul(q, Lc)))
            else:
                Lc = Const(L, "int32")
                # ceil((hi - lo) / L) + 1 points, none for an empty region (hi < lo)
                span = _op.sub(hi, lo)
                count = _op.minimum(_op.floordiv(_op.add(span, Const(2 * L - 1, "int32")), Lc),
                                    _op.add(span, one))
                # (a region of one row, or of a few rows unrolled: straight-line code)
                few = (_few_lines(spans[d], L) if UNROLL_FEW_LINES
                       and all(kind == "unrolled" for *_, kind in loops) else 0)
                if few:
                    # the points of the region before the clip, unrolled (each clamped to
                    # the clipped end; none where the clip empties the region)
                    loops.append((q, Const(few, "int32"), "unrolled"))
                    guards.append(_op.compare(GE, hi, lo))
                else:
                    loops.append((q, count, "serial"))
                indices.append(_op.add(lo, _op.minimum(_op.mul(q, Lc), _op.sub(hi, lo))))
        stmt = Prefetch(buf, tuple(indices), stores, level)
        for q, ext, kind in reversed(loops):
            stmt = For(q, zero, ext, kind, stmt)
        for cond in guards:
            cond = simplify(cond, outer)
            if not (isinstance(cond, Const) and cond.value):
                stmt = IfThenElse(cond, stmt)
        return stmt


def _few_lines(span: Expr, L: int) -> int:
    """The ``ceil(span / L) + 1`` prefetch points of a region ``span + 1`` elements wide
    (before the clip) where ``span`` is a constant and they are fewer than
    :data:`MAX_UNROLLED_ROWS` (:data:`UNROLL_FEW_LINES`), else 0."""
    if not isinstance(span, Const) or span.value < 0:
        return 0
    n = min((int(span.value) + 2 * L - 1) // L, int(span.value) + 1)
    return n if n < MAX_UNROLLED_ROWS else 0


def _streams(lo: Expr, hi: Expr, loop: For, L: int, outer) -> bool:
    """Whether the innermost dimension's region ``[lo, hi]`` (in terms of the counter of
    ``loop``, which runs :data:`MIN_STREAM_STEPS` times or more) is less than a line
    wide and moves on by at most a line (at least one element) each iteration: one
    prefetch at ``lo`` per iteration then brings every line that the iterations walk
    but, where the alignment puts it in a line of its own, the end of the last one."""
    v = loop.var
    if isinstance(loop.extent, Const) and loop.extent.value < MIN_STREAM_STEPS:
        return False
    span = simplify(_op.sub(hi, lo), outer)
    step = simplify(_op.sub(substitute(lo, {v: _op.add(v, Const(1, v.dtype))}), lo), outer)
    return (isinstance(span, Const) and 0 <= span.value < L
            and isinstance(step, Const) and 0 < step.value <= L)


def _whole_lines(lo: Expr, hi: Expr, row: Expr, L: int, outer) -> int:
    """The lines of the innermost region ``[lo, hi]`` where it is a whole number of lines
    wide, starts on a multiple of ``L`` and the rows (``row`` elements) are a whole
    number of lines long: from a line-aligned buffer, exactly its lines; else 0."""
    span = simplify(_op.sub(hi, lo), outer)
    if not (isinstance(span, Const) and isinstance(row, Const)) or row.value % L:
        return 0
    width = int(span.value) + 1
    start = simplify(_op.floormod(lo, Const(L, lo.dtype)), outer)
    if width % L or not (isinstance(start, Const) and start.value == 0):
        return 0
    return width // L


def _wide_stream(lo: Expr, hi: Expr, loop: For, L: int, outer) -> int:
    """The lines of a *wide stream*, else 0: the innermost region ``[lo, hi]`` is a whole
    number of lines wide and its start moves on by exactly its width each iteration of
    ``loop`` (which runs :data:`MIN_STREAM_STEPS` times or more), so the iterations'
    regions tile a contiguous run; one prefetch per line, ``L`` elements apart from
    ``lo``, brings every line of the run but, where the alignment puts it in a line of
    its own, the end of the last region (a step of four vectors along a row)."""
    v = loop.var
    if not isinstance(loop.extent, Const) or loop.extent.value < MIN_STREAM_STEPS:
        return 0
    span = simplify(_op.sub(hi, lo), outer)
    step = simplify(_op.sub(substitute(lo, {v: _op.add(v, Const(1, v.dtype))}), lo), outer)
    if not (isinstance(span, Const) and isinstance(step, Const)):
        return 0
    width = int(span.value) + 1
    if width < L or width % L or int(step.value) != width:
        return 0
    return width // L


def expand_prefetches(func: PrimFunc) -> PrimFunc:
    """Replace every ``AttrStmt("prefetch")`` by its loop nest of ``Prefetch`` statements."""
    body = _Expand(func).visit(func.body)
    return func if body is func.body else func.with_body(body)
