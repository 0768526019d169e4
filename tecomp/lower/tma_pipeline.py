"""The TMA producer of a ring of shared tiles (``s[S].double_buffer(stages=n,
producer="tma")``), a part of the double-buffering pass (tecomp/lower/double_buffer.py).

Where the threads' copies of the tiles at the top of a serial loop ``ko`` would become a
``cp.async`` ring, a ``tma`` stage's copy becomes one TMA copy of the whole tile, issued by
one thread, and the barriers become mbarriers (the PTX ISA's ``mbarrier`` and
``cp.async.bulk.tensor``; the CUDA renderer emits them).  The lowered loop, printed::

    // attr tma_pipeline = (X.shared.bars, 3, 'thread')   mbarriers: full[3], empty[3]
      // attr tma_produce = 0                      thread 0: wait until slot 0 is empty,
        // attr tma_copy = X[i0.outer*64, 0]       expect the bytes, copy each tile's box
          for (i0, ...) ... X.shared[0, i0, ...] = X[...]    (what the copy does, as loops)
      ...
      for (k.outer, 0, n) {
        if (k.outer + 2 < n)
          // attr tma_produce = k.outer + 2       the tile 2 iterations ahead
        // attr tma_consume = k.outer             wait for slot k.outer % 3 to be full,
          ...the reads of the tiles...            read it, then arrive on its empty barrier

The values are the iteration relative to the loop's start (``rel``: the slot is ``rel %
n``, the phase parity ``rel / n % 2``) and, for a copy, the element of the tensor at the
tile's origin.  With ``producer="tma_warp"`` the pipeline's value ends in ``'warp'``: the
CUDA renderer issues the copies from a warp of its own (the block one ``threadIdx.z``
larger), which loops over the iterations ahead of the others; the IR is the same (what
the interpreter runs).  The copy keeps its loops as its body: what the IR interpreter runs, and
what the renderer reads the box from (:func:`box_of`); the CUDA renderer emits
``tc_tma_load_<r>d`` instead, through a tensor map the runtime encodes at each call from
the tensor's shape and address (:func:`map_spec`).

A tile is one box of a tensor-map *view* of the tensor it copies: each dimension of the
tile (its own loop, ``S[i0, .., ir] = T[..]``) steps along one dimension of ``T`` with a
constant coefficient; dimensions of ``T`` that several tile dimensions step along
(``cache_read(..., blocks=)``'s core matrices: ``T[8 i0 + i2, ..]``) are split into a
whole inner part (its extent the outer coefficient) and an outer one (the tensor's extent
divided by it, which must be exact).  The tile's innermost dimension must step along
``T``'s innermost with coefficient 1 (TMA copies boxes as they lie: no transposition).
A loop clipped at the tensor's edge (``min(rest, c)``: an odd extent's last tile) is a box
of ``c``: the copy reads zeros past the edge into the part of the slot the clipped copy
leaves alone, which the readers of the clipped tile do not read.
"""
from __future__ import annotations

import dataclasses
from typing import Dict, List, Sequence, Tuple

from ..target import tma as _tma
from ..errors import ScheduleError
from ..ir import dtype as _dt, op as _op
from ..ir.expr import LT, Buffer, BufferLoad, Const, Expr, Min, Var
from ..ir.functor import substitute
from ..ir.names import display
from ..ir.simplify import simplify
from ..ir.stmt import AttrStmt, BufferStore, For, IfThenElse, SeqStmt, Stmt, seq

TMA_PIPELINE = "tma_pipeline"
TMA_PRODUCE = "tma_produce"
TMA_CONSUME = "tma_consume"
TMA_COPY = "tma_copy"
#: ``AttrStmt("buffer_producer", "tma", AttrStmt("double_buffer", ...))``
BUFFER_PRODUCER = "buffer_producer"
#: ``AttrStmt("buffer_swizzle", "128B", AttrStmt("double_buffer", ...))`` from the schedule;
#: after this pass ``AttrStmt("buffer_swizzle", (ring, "128B"), Allocate(ring, ...))``:
#: the ring's slots are swizzled (the TMA map's swizzle; the wgmma descriptors' mode)
BUFFER_SWIZZLE = "buffer_swizzle"


@dataclasses.dataclass(frozen=True)
class TmaDim:
    """One dimension of a box's tensor-map view, innermost first: tensor dimension
    ``axis`` stepped ``coef`` elements at a time, ``box`` of them; ``part``: "whole" (the
    tensor's dimension), "inner" (the first ``whole`` elements of each block of it: the
    view's extent is ``whole``, the coordinate 0) or "outer" (the blocks: extent
    ``shape / coef``, coordinate ``origin / coef``)."""
    axis: int
    coef: int
    box: int
    part: str
    whole: int = 0


@dataclasses.dataclass(frozen=True)
class TmaBox:
    """What one ``tc_tma_load`` copies: ``dims`` of the view of ``src`` (innermost
    first) into ``dst`` (its destination in the ring given by ``dst_origin``, the store's
    indices at the tile's first element)."""
    src: Buffer
    dst: Buffer
    dims: Tuple[TmaDim, ...]
    dst_origin: Tuple[Expr, ...]
    swizzle: str = "none"

    @property
    def nbytes(self) -> int:
        n = _dt.nbytes(self.src.dtype)
        for d in self.dims:
            n *= d.box
        return n

    def coords(self, origin: Sequence[Expr]) -> List[Expr]:
        """The view's coordinates (innermost first) of the tile at ``origin`` (the
        tensor's indices of its first element)."""
        out = []
        for d in self.dims:
            if d.part == "inner":
                out.append(Const(0, "int32"))
            elif d.part == "outer":
                out.append(simplify(_op.floordiv(origin[d.axis], Const(d.coef, "int32"))))
            else:
                out.append(origin[d.axis])
        return out


def _stage_name(buf: Buffer) -> str:
    return display(buf.name)


def _box_extent(e):
    """The box's extent along a copy loop of extent ``e``: a constant, or ``min(rest,
    c)`` -- the tile clipped at the tensor's edge, where the copy of the whole box
    reads zeros past the edge (TMA's out-of-bounds fill) into the part of the slot the
    clipped copy leaves alone; None otherwise."""
    if isinstance(e, Const):
        return int(e.value)
    if isinstance(e, Min):
        consts = [x for x in (e.a, e.b) if isinstance(x, Const)]
        if len(consts) == 1:
            return int(consts[0].value)
    return None


def _without_zero_fill(copy: Stmt):
    """``copy`` without its stores of zeros (and the loops left empty), and whether it
    had any: a padded copy (``cache_read(..., pad=0.0)`` computed whole at the edge)
    after loop partitioning is the plain copy of the part inside the tensor and zeros
    for the rest of the tile, which is what TMA's out-of-bounds fill writes."""
    found = []

    def strip(st):
        if isinstance(st, BufferStore) and isinstance(st.value, Const) and \
                not st.value.value:
            found.append(st.buffer)
            return None
        if isinstance(st, For):
            body = strip(st.body)
            if body is None:
                return None
            return st if body is st.body else For(st.var, st.min, st.extent, st.kind, body,
                                                  st.thread_tag)
        if isinstance(st, SeqStmt):
            items = [x for x in (strip(y) for y in st.seq) if x is not None]
            return seq(*items) if items else None
        return st

    out = strip(copy)
    return (copy if out is None else out), found


def box_of(copy: Stmt, what: str = "") -> Tuple[TmaBox, Tuple[Expr, ...]]:
    """The box of a tile's copy (a perfect nest of serial loops from 0 around one
    ``S[i0, .., ir] = T[f(i)]``, and maybe stores of zeros into the rest of ``S``: a
    padded copy at the tensor's edge, the box then the whole tile) and the tensor's
    indices at the tile's first element; ScheduleError where TMA cannot copy it (see the
    module doc)."""
    loops: List[For] = []
    s, zeros = _without_zero_fill(copy)
    while isinstance(s, For):
        loops.append(s)
        s = s.body
    store = s
    where = what or "a TMA tile copy"
    if not isinstance(store, BufferStore) or not isinstance(store.value, BufferLoad):
        raise ScheduleError(
            f"{where}: the tile's copy is not one loop nest around a plain copy of a tensor "
            "(a guard, a computed value, or loops of another stage inside): TMA copies a "
            "box of a tensor as it is; give the stage its own loops (no split, fuse or "
            "bind) and compute it where its tile lies inside the tensor")
    dst, load = store.buffer, store.value
    src = load.buffer
    if any(z is not dst for z in zeros):
        raise ScheduleError(f"{where}: the tile's copy also writes zeros into another buffer "
                            f"than {_stage_name(dst)}; a TMA copy fills one tile")
    ext = {}
    for lp in loops:
        full = _box_extent(lp.extent)
        if lp.kind != "serial" or not (isinstance(lp.min, Const) and lp.min.value == 0) \
                or full is None:
            raise ScheduleError(
                f"{where}: stage {_stage_name(dst)}'s loop {display(lp.var.name)} is "
                f"{lp.kind} or has a variable extent; a TMA copy is one box: leave the "
                "stage's loops as they are (no split, fuse, bind or vectorize)")
        ext[lp.var] = full
    ivars = [lp.var for lp in loops]
    lead = len(store.indices) - len(ivars)   # (a ring's slot comes first)
    if zeros and lead >= 0:
        # the zeros fill the tile past the tensor's edge: the box is the whole tile (its
        # elements outside the tensor TMA's out-of-bounds zeros)
        for d, v in enumerate(ivars):
            room = dst.shape[lead + d]
            if isinstance(room, Const):
                ext[v] = max(ext[v], int(room.value))
    if src.dtype not in _tma.DATA_TYPES:
        raise ScheduleError(
            f"{where}: stage {_stage_name(dst)} copies {display(src.name)} of {src.dtype}, "
            f"which TMA does not copy (its types: {', '.join(_tma.DATA_TYPES)}); use "
            "producer='threads'")
    if src.scope != "global" or src.strides is not None:
        raise ScheduleError(
            f"{where}: stage {_stage_name(dst)} reads {display(src.name)}, which is "
            f"{'in ' + src.scope + ' memory' if src.scope != 'global' else 'strided'}; a "
            "TMA copy reads a C-contiguous tensor in global memory")
    if lead < 0 or not ivars or any(not (isinstance(i, Var) and i is v)
                                    for i, v in zip(store.indices[lead:], ivars)):
        raise ScheduleError(
            f"{where}: stage {_stage_name(dst)} does not store its elements in the order of "
            "its own loops; a TMA copy fills the tile in its own order (leave the stage's "
            "loops as they are)")
    for d, v in enumerate(ivars):   # the whole box lands inside the slot
        room = dst.shape[lead + d]
        if not isinstance(room, Const) or int(room.value) < ext[v]:
            raise ScheduleError(
                f"{where}: stage {_stage_name(dst)}'s buffer has {room} elements along its "
                f"dimension {d}, fewer than the box's {ext[v]}")
    zero = {v: Const(0, v.dtype) for v in ivars}
    origin = tuple(simplify(substitute(e, zero)) for e in load.indices)
    dst_origin = tuple(simplify(substitute(e, zero)) for e in store.indices)
    # each tile dimension (its loop) steps along one tensor dimension by a constant
    steps: Dict[Var, Tuple[int, int]] = {}
    for axis, e in enumerate(load.indices):
        for v in ivars:
            one = dict(zero)
            one[v] = Const(1, v.dtype)
            c = simplify(_op.sub(substitute(e, one), origin[axis]))
            if not isinstance(c, Const):
                raise ScheduleError(
                    f"{where}: {display(src.name)}'s index {axis} in stage "
                    f"{_stage_name(dst)}'s copy is not linear in its loop "
                    f"{display(v.name)}; a TMA box is a linear view of the tensor")
            if int(c.value):
                if v in steps:
                    raise ScheduleError(
                        f"{where}: stage {_stage_name(dst)}'s loop {display(v.name)} steps "
                        f"along two dimensions of {display(src.name)}; a TMA box is not "
                        "diagonal")
                steps[v] = (axis, int(c.value))
    order = list(ivars)                           # the tile's dimensions, outermost first
    if any(v not in steps for v in order):
        raise ScheduleError(f"{where}: a loop of stage {_stage_name(dst)} does not move along "
                            f"{display(src.name)}; a TMA box has no broadcast dimension")
    last = steps[order[-1]]
    if last != (len(src.shape) - 1, 1):
        raise ScheduleError(
            f"{where}: stage {_stage_name(dst)}'s innermost dimension steps along "
            f"dimension {last[0]} of {display(src.name)} (by {last[1]}), not along its "
            f"innermost, contiguous one: TMA copies boxes as they lie in memory, it does not "
            f"transpose (read the tensor K-major, e.g. dense's W[N, K], or copy this tile with "
            f"producer='threads')")
    dims: List[TmaDim] = []
    for v in reversed(order):
        axis, coef = steps[v]
        same = sorted((steps[u][1], ext[u]) for u in order if steps[u][0] == axis)
        if len(same) == 1:
            if coef != 1:
                raise ScheduleError(f"{where}: stage {_stage_name(dst)}'s loop "
                                    f"{display(v.name)} strides {coef} elements of "
                                    f"{display(src.name)}; TMA boxes here step by 1")
            dims.append(TmaDim(axis, 1, ext[v], "whole"))
            continue
        if len(same) != 2 or same[0][0] != 1 or same[1][0] != same[0][1]:
            raise ScheduleError(
                f"{where}: stage {_stage_name(dst)} tiles dimension {axis} of "
                f"{display(src.name)} as {same} (coefficient, extent); a TMA view splits a "
                "dimension once, into whole blocks (cache_read(..., blocks=))")
        inner = same[0][1]
        if coef == 1:
            dims.append(TmaDim(axis, 1, ext[v], "inner", inner))
        else:
            rem = simplify(_op.floormod(origin[axis], Const(coef, "int32")))
            if not (isinstance(rem, Const) and int(rem.value) == 0):
                raise ScheduleError(
                    f"{where}: stage {_stage_name(dst)}'s tile starts at element "
                    f"{origin[axis]} of {display(src.name)}'s dimension {axis}, not at a "
                    f"multiple of its blocks of {coef}")
            dims.append(TmaDim(axis, coef, ext[v], "outer"))
    box = TmaBox(src, dst, tuple(dims), dst_origin)
    esize = _dt.nbytes(src.dtype)
    if any(d.box > _tma.MAX_BOX for d in dims) or dims[0].box * esize % 16:
        raise ScheduleError(
            f"{where}: stage {_stage_name(dst)}'s tile is a box of "
            f"{[d.box for d in reversed(dims)]}; TMA copies at most {_tma.MAX_BOX} elements "
            f"along each dimension, the innermost a multiple of 16 bytes")
    if box.nbytes % 128:
        raise ScheduleError(
            f"{where}: stage {_stage_name(dst)}'s tile is {box.nbytes} bytes; a TMA ring's "
            "slots are 128-byte aligned copy destinations: give the tile a multiple of 128 "
            "bytes")
    if len(dims) > _tma.MAX_RANK:
        raise ScheduleError(f"{where}: stage {_stage_name(dst)}'s tile has {len(dims)} "
                            f"dimensions; a tensor map has at most {_tma.MAX_RANK}")
    for d in dims:   # the view must not read past the tensor: whole blocks
        if d.part == "outer":
            n = src.shape[d.axis]
            if isinstance(n, Const) and int(n.value) % d.coef:
                raise ScheduleError(
                    f"{where}: {display(src.name)}'s dimension {d.axis} has {int(n.value)} "
                    f"elements, not whole blocks of {d.coef}: the tensor-map view of stage "
                    f"{_stage_name(dst)}'s blocked tile would read past its end")
    return box, origin


def map_spec(box: TmaBox, shape: Sequence[int], name: str = "") -> _tma.TensorMapSpec:
    """The tensor map of ``box`` over a C-contiguous tensor of ``shape`` (its run-time
    extents)."""
    esize = _dt.nbytes(box.src.dtype)
    row = [esize] * len(shape)       # bytes between consecutive elements of each dimension
    for a in range(len(shape) - 2, -1, -1):
        row[a] = row[a + 1] * int(shape[a + 1])
    dims, strides = [], []
    for i, d in enumerate(box.dims):
        n = int(shape[d.axis])
        if d.part == "inner":
            extent = d.whole
        elif d.part == "outer":
            if n % d.coef:
                raise _tma.TensorMapError(
                    f"tensor map of {box.src.name!r:.60}: its dimension {d.axis} has {n} "
                    f"elements, not whole blocks of {d.coef} (the tile's core matrices)")
            extent = n // d.coef
        else:
            extent = n
        dims.append(extent)
        if i:
            strides.append(row[d.axis] * d.coef)
    check_reach(box.src.name, shape, esize, dims, strides)
    return _tma.TensorMapSpec(box.src.dtype, tuple(dims), tuple(strides),
                              tuple(d.box for d in box.dims), swizzle=box.swizzle,
                              name=name or box.src.name)


def check_reach(name: str, shape: Sequence[int], esize: int, dims: Sequence[int],
                strides: Sequence[int]) -> None:
    """TensorMapError unless the map of ``dims`` (innermost first, the driver taking
    dimension 0 as contiguous) and byte ``strides`` reaches no byte past the C-contiguous
    tensor of ``shape``, whatever box made it: a GPU library's metadata says the box,
    and a forged one (an axis twice, an inner part run on past its block) would have
    the copies read past the argument."""
    total = esize
    for n in shape:
        total *= int(n)
    if not total or not all(dims):
        return   # (an empty map: tma.check refuses its extents)
    reach = (dims[0] - 1) * esize + sum((n - 1) * st for n, st in zip(dims[1:], strides))
    if reach + esize > total:
        raise _tma.TensorMapError(
            f"tensor map of {name!r:.60}: dimensions {list(dims)} with byte strides "
            f"{[esize] + list(strides)} reach byte {reach + esize} of a tensor of {total} "
            "bytes (shape " + "x".join(str(int(n)) for n in shape) + "): it would read "
            "past the tensor; its box is not one tecomp makes (a library's metadata "
            "edited?): export the library again")


def check_swizzle(box: TmaBox, ring: Buffer, swizzle: str, what: str) -> None:
    """ScheduleError unless the slots of ``ring`` can hold ``box`` swizzled: its rows
    (the box's innermost extent) exactly the swizzle's bytes, packed, and each slot a
    whole number of the pattern's repeat (8 rows), so that every slot starts on one."""
    span = _tma.SWIZZLE_SPAN[swizzle]
    esize = _dt.nbytes(box.src.dtype)
    row = box.dims[0].box * esize
    strides = [int(x.value) if isinstance(x, Const) else None for x in ring.strides]
    packed = all(x is not None for x in strides) and strides[-1] == 1 and (
        len(strides) < 3 or strides[-2] * esize == span)
    if row != span or not packed or strides[0] is None or strides[0] * esize % (8 * span):
        raise ScheduleError(
            f"{what}: swizzle={swizzle!r} on stage {_stage_name(box.dst)}, whose tile's rows "
            f"are {row} bytes ({box.dims[0].box} {box.src.dtype})"
            + ("" if packed else " with padding between them")
            + f"; a {swizzle} swizzled tile has rows of exactly {span} bytes, packed, in "
            f"slots of whole {8 * span}-byte patterns (k steps of {span // esize} "
            "elements, no storage_align; or swizzle='none')")


def tma_ring(loop: For, chain, copies, rest, marked, bufs, stages: int, what: str, retarget,
             allocate, warp: bool = False, swizzles=None) -> Stmt:
    """The loop with its marked stages' copies made a TMA ring (the module doc);
    ``copies`` and ``rest``: the statements of an iteration before and after its barrier
    (double_buffer.py's split), ``bufs`` the ring buffer of each marked stage,
    ``swizzles`` the swizzle of each (``double_buffer(swizzle=)``: default none)."""
    swizzles = {b: m for b, m in (swizzles or {}).items() if m != "none"}
    # a padded copy partitioned at the tensor's edge: its nests of zeros go with the
    # tile's copy (one TMA box, whose out-of-bounds fill writes them)
    zero_only, grouped = {}, []
    for c in copies:
        rest_, zeros = _without_zero_fill(c)
        if zeros and rest_ is c:   # nothing but zeros
            zero_only.setdefault(zeros[0], []).append(c)
        else:
            grouped.append(c)
    copies = []
    for c in grouped:
        st = _without_zero_fill(c)[0]
        while isinstance(st, For):
            st = st.body
        dst = st.buffer if isinstance(st, BufferStore) else None
        copies.append(seq(c, *zero_only.pop(dst, [])))
    if zero_only:
        b = next(iter(zero_only))
        raise ScheduleError(f"{what}: stage {_stage_name(b)} is only zeros in an iteration "
                            f"of loop {display(loop.var.name)}; a TMA ring's tile is a box of "
                            "a tensor")
    nests = []
    for c in copies:
        box, _ = box_of(c, what)
        if box.dst not in bufs:
            raise ScheduleError(f"{what}: the iteration of loop {display(loop.var.name)} also "
                                f"copies {display(box.dst.name)}, which has no TMA ring")
        if box.dst in swizzles:
            check_swizzle(box, bufs[box.dst], swizzles[box.dst], what)
        nests.append(c)
    ko, lo, ext = loop.var, loop.min, loop.extent
    end = _op.add(lo, ext)
    n = Const(stages, ko.dtype)

    def rel_of(it):
        return simplify(it if isinstance(lo, Const) and lo.value == 0 else _op.sub(it, lo))

    def produce(it):
        rel = rel_of(it)
        slot = simplify(_op.floormod(rel, n))
        parts = []
        for c in nests:
            body = retarget(bufs, slot).visit(simplify(substitute(c, {ko: it})))
            box, origin = box_of(body, what)
            parts.append(AttrStmt(TMA_COPY, BufferLoad(box.src, origin, box.src.dtype), body))
        return AttrStmt(TMA_PRODUCE, rel, seq(*parts))

    def guarded(it):
        cond = simplify(_op.compare(LT, it, end))
        if isinstance(cond, Const) and cond.value:
            return produce(it)
        return IfThenElse(cond, produce(it), None)

    rel_ko = rel_of(ko)
    body = seq(guarded(_op.add(ko, Const(stages - 1, ko.dtype))),
               AttrStmt(TMA_CONSUME, rel_ko,
                        retarget(bufs, simplify(_op.floormod(rel_ko, n))).visit(seq(*rest))))
    for c in reversed(chain):  # allocations of other stages stay in the loop
        if hasattr(c, "buffer") and not isinstance(c, AttrStmt) and c.buffer not in bufs:
            body = allocate(c.buffer, body)
    prologue = [guarded(_op.add(lo, Const(p, ko.dtype))) for p in range(stages - 1)]
    # full[stages], empty[stages]; at least 128 bytes, so that the arrays after it stay
    # 128-byte aligned (a TMA copy's destination)
    bars = Buffer(f"{marked[0].name}.bars", (Const(max(2 * stages, 16), "int32"),), "int64",
                  None, "shared")
    out = AttrStmt(TMA_PIPELINE, (bars, stages, "warp" if warp else "thread"),
                   seq(*prologue, For(ko, lo, ext, loop.kind, body, loop.thread_tag)))
    out = allocate(bars, out)
    for b in reversed(marked):
        out = allocate(bufs[b], out)
        if b in swizzles:
            out = AttrStmt(BUFFER_SWIZZLE, (bufs[b], swizzles[b]), out)
    return out
