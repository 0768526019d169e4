"""Tuned CPU schedules for the operators of :mod:`tecomp.nn.ops` (``target="llvm"``).

Every ``schedule_*(outs, target="llvm")`` takes the output tensor(s) of an operator (or a
list of them) and returns a :class:`~tecomp.schedule.schedule.Schedule`; the shapes decide
the blocking, and any shape is correct (tails are guarded, and loop partitioning gives
the full blocks guard-free code and the tail its own smaller unrolled kernel).

The machine model (:func:`cpu_info`) comes from the LLVM host: the SIMD width (16 float32
lanes with AVX-512, 8 with AVX2), the number of vector registers (32 / 16), and the
thread count of the runtime (``tc.set_num_threads``).

GEMM (``schedule_matmul``, ``schedule_dense``, the packed helpers)
    A register-blocked micro-kernel in the style of GotoBLAS/BLIS: an ``MR x NR`` block
    of C (``NR`` = two vectors; ``matmul_packed(nr=...)`` chooses another width) held in
    ``MR * NR / lanes`` vector accumulators over a
    ``KC``-long slice of the reduction: the ``k`` loop is innermost-but-two, the ``MR``
    rows are unrolled, the ``NR`` columns are one widened vector (16-lane vectors,
    unrolled, beyond two), so each ``k`` step is
    ``NR/lanes`` vector loads of B, ``MR`` broadcasts of A and ``MR*NR/lanes`` FMAs
    (``vfmadd231ps``, no spills: check with ``get_source("asm")``).  The C block is
    loaded before and stored after the ``k`` loop (LLVM's LICM promotes it to registers:
    the buffers are ``noalias``).  B is packed into ``NR``-wide panels (the compute stage
    of :func:`matmul_packed`, or a ``cache_read`` copy for plain ``matmul``) per block of
    ``KC x NC``, sized to half of L2.  Loops, outermost first::

        ic.jc (parallel)          MC rows x NC columns: one task (a packed B block
                                  of KC x NC fits in L2)
          pc                      KC slice of the reduction; pack B's block here
            ir                    MR-row panels
              jr                  NR-wide panel of the packed block (from L2)
                k, i (unrolled), j (vector)

    At a right edge that the panels do not divide, the last panel's register block is
    computed over a zero-padded panel (``align_bounds``: the packed panel of
    ``matmul_packed`` / ``dense_packed``, or plain ``matmul``'s copy of B made with
    ``cache_read(..., pad=0.0)``) and only its copy to C is masked: one micro-kernel in
    the code.

    With several threads each task packs its own B block (``GemmParams.par ==
    "blocks"``, at least two tasks per thread, claimed dynamically); on one thread
    ``ic`` has one iteration (``"rows"``).

Convolutions (``schedule_conv2d_nchw`` / ``_nhwc``)
    The same idea: a block of outputs accumulated in a local buffer (``cache_write``,
    kept in registers) over the whole reduction (channels x kernel window) and stored
    once, the padded input computed per output tile (``compute_at``), see each
    function.  An elementwise epilogue (``relu(bias_add(conv, b))``) is applied to the
    block on its way out (the conv is then the local buffer of the epilogue's tile).

Softmax, pooling, elementwise: one pass per row / tile, vectorized and parallel (softmax
prefetches the next row).

Attention (``schedule_attention``): every stage computed per block of query rows inside
one parallel task, FlashAttention's way: a ``rows x Lk`` scratch, never ``Lq x Lk``.
"""
from __future__ import annotations

import contextlib
import math
import os
import threading
import dataclasses
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

from .. import te as _te
from ..errors import ScheduleError
from ..ir import dtype as _dt
from ..ir.expr import ProducerLoad, Reduce
from ..schedule.schedule import Schedule, Stage, create_schedule
from ..te.tensor import ComputeOp, Tensor
from ._schedule_common import _bytes, _cint, _largest_divisor_at_most, _outs, _walk
from .ops import shift_max as _shift_max  # softmax's row maximum (see there)
from ..autoschedule import rules as _rules
from ..autoschedule.rows import row_reduce_at

__all__ = [
    "cpu_info", "CpuInfo", "schedule_matmul", "schedule_dense", "schedule_conv2d_nchw",
    "schedule_conv2d_nhwc", "schedule_softmax", "schedule_elementwise", "schedule_injective",
    "schedule_pool", "matmul_packed", "dense_packed", "softmax_fast", "gemm_params",
    "gemm_overrides", "schedule_attention", "attention_params",
]


# ---------------------------------------------------------------------------------
# the machine


@dataclass(frozen=True)
class CpuInfo:
    """What the schedules adapt to."""

    lanes: int          # float32 lanes of one vector register
    vregs: int          # architectural vector registers
    threads: int        # threads of the parallel runtime
    l1_bytes: int = 32 * 1024
    l2_bytes: int = 512 * 1024
    target: str = "llvm"   # the tc.Target (its string) these facts are from

    @property
    def masks(self) -> bool:
        """Whether the target has AVX-512's mask registers (a vector guarded past a
        tensor's edge is then masked instructions; without them, AVX2 runs its lanes one
        by one)."""
        from ..target import as_target

        return as_target(self.target).has_feature("avx512f")


def _cache_size(level: int, default: int) -> int:
    """L1d / L2 / L3 size of cpu0 (per core, sysfs), or ``default`` (see
    :mod:`tecomp.target`, which reads them once)."""
    from ..target import _host_cache

    return _host_cache(level, default)


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``), or what ``platform`` says."""
    import platform

    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown cpu"


def cpu_info(target="llvm") -> CpuInfo:
    """The vector width, register count, caches and thread count the schedules use, from
    the :class:`~tecomp.target.Target` (a string is parsed: ``"llvm"`` is the host,
    ``"llvm -mcpu=haswell"`` gives the AVX2 schedules on any machine).

    ``TECOMP_VECTOR_LANES`` (8 or 16) overrides the width of the host target (the AVX2
    blockings compiled for this CPU; cross-targeting compiles them for an AVX2 one)."""
    from ..errors import TargetError
    from ..target import as_target

    try:
        t = as_target(target)
    except TargetError as exc:
        raise ScheduleError(f"the tecomp.nn CPU schedules: {exc}") from None
    if t.kind != "llvm":
        raise ScheduleError(f"the tecomp.nn CPU schedules are for target='llvm', got {str(t)!r}")
    lanes = t.lanes
    vregs = t.vregs
    env = os.environ.get("TECOMP_VECTOR_LANES")
    if env and t.is_host:
        lanes = int(env)
        vregs = 32 if lanes == 16 else 16
    return CpuInfo(lanes, vregs, t.threads, t.l1_bytes, t.l2_bytes, str(t))


# ---------------------------------------------------------------------------------
# small helpers


def _find(outs, pred) -> List[ComputeOp]:
    return [op for op in _walk(outs) if pred(op)]


def _has_tag(op, *tags) -> bool:
    mine = set(t.strip() for t in (op.tag or "").split(","))
    return any(t in mine for t in tags)


def _is_injective(op) -> bool:
    return isinstance(op, ComputeOp) and not op.reduce_axis


def _inline_injective(s: Schedule, ops, keep=()):
    """Inline every injective (reduction-free) stage of ``ops`` that is not an output
    and not in ``keep``."""
    for op in ops:
        if op in keep or not _is_injective(op):
            continue
        st = s[op]
        if st.is_output or st.attach_type != "root":
            continue
        st.compute_inline()


def _loads(expr, tensor) -> List[ProducerLoad]:
    from ..ir.functor import collect

    return [n for n in collect(expr, lambda n: isinstance(n, ProducerLoad))
            if n.producer is tensor]


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _vector_split(s: Stage, axis, extent: Optional[int], lanes: int):
    """Split ``axis`` so that the inner part is one vector (whole extent when it fits)
    and vectorize it; return the outer axis (or None when the axis is all vector)."""
    if extent is not None and extent <= lanes:
        s.vectorize(axis)
        return None
    o, i = s.split(axis, factor=lanes)
    s.vectorize(i)
    return o


def _parallel_outer(s: Stage, axes: Sequence, extents: Sequence[Optional[int]], threads: int,
                    min_tasks: int = 1):
    """Fuse the leading ``axes`` until there are enough iterations for the threads and
    make the result parallel.  Returns the parallel axis (or None)."""
    if threads <= 1 or not axes:
        return None
    take, total = [], 1
    for ax, ext in zip(axes, extents):
        take.append(ax)
        if ext is None:
            total = None
            break
        total *= ext
        if total >= max(threads * 4, min_tasks):
            break
    if total is not None and total < 2:
        return None
    ax = take[0] if len(take) == 1 else s.fuse(*take)
    s.parallel(ax)
    return ax


# ---------------------------------------------------------------------------------
# GEMM


@dataclass(frozen=True)
class GemmParams:
    mr: int      # rows of the register block (unrolled)
    nr: int      # columns of the register block (one widened vector)
    kc: int      # reduction slice (C is loaded/stored once per slice)
    mc: int      # rows per task block (an A block mc x kc: L2)
    nc: int      # columns per block (a packed B block kc x nc: half of L2)
    lanes: int
    # how the threads share the work: "blocks" (one (MC x NC) block per task, each
    # packing its own B block: what gemm_params gives for several threads) or "rows"
    # (every block is packed by all threads, then its MR-row panels are handed out in
    # small dynamic chunks; what it gives for one thread, where the two are the same)
    par: str = "rows"


def gemm_params(M: Optional[int], N: Optional[int], K: Optional[int],
                info: Optional[CpuInfo] = None, nr: Optional[int] = None) -> GemmParams:
    """The blocking of an ``M x N x K`` GEMM on this machine (extents may be None when
    symbolic).  See the module docstring for the loop nest.  ``nr``: the panel width to
    block for (e.g. the ``nr`` of :func:`matmul_packed`); by default chosen here."""
    info = info or cpu_info()
    L = info.lanes
    # NR: two vectors (one when N is small), never much wider than N.  Three vectors
    # (8 x 48: 24 accumulators, the shape of MKL's kernel; matmul_packed(nr=48)) are not
    # the default: with the column edge computed over the padded panel (no edge kernel)
    # they take about twice as long to build (24 unrolled statements per k step instead
    # of 8 widened ones) and are not consistently faster (a few percent either way)
    # (measurements: benchmarks/DECISIONS.md, "GEMM: NR, two vectors")
    if nr is not None:
        nr = int(nr)
    elif N is not None and N <= L:
        nr = N
    elif N is not None and N <= 2 * L:
        nr = L
    else:
        nr = 2 * L
    nvec = max(1, -(-nr // L))
    # MR: as many rows as the accumulators allow (leave room for B and a broadcast):
    # 12 x 2 vectors with AVX-512's 32 registers (9 x 3 for NR = 48), 6 x 2 with AVX2's 16
    budget = max(1, min((info.vregs - nvec - 2) // nvec, 12))
    mr = budget
    if M is not None and M < mr:
        mr = M
    elif M is not None and M % mr:
        # a row count that divides M avoids a second (tail) micro-kernel: less code to
        # compile, and the tail rows run at full speed
        low = -(-budget * 2 // 3) if budget >= 9 else budget - 1
        for cand in range(budget - 1, max(low, 1) - 1, -1):
            if M % cand == 0:
                mr = cand
                break
    # KC: the whole reduction in one slice (C's block then lives in registers from start
    # to end: see _schedule_gemm_write_cache) up to K = 8192, whatever the caches; longer
    # reductions in equal slices of at most that.  With several slices the block is
    # accumulated in C itself, loaded and stored around every FMA, and it lost everywhere
    # it was measured, its L1/L2-sized slices included, on machines with small and large
    # L2 alike (measurements: benchmarks/DECISIONS.md, "GEMM: KC, one slice")
    kmax = 8192
    if K is None:
        kc = 256
    elif K <= kmax:
        kc = K
    else:
        kc = _ceil(K, _ceil(K, kmax))
    # NC: the packed B block (kc x nc) fills about half of L2
    T = info.threads
    panels = _ceil(N, nr) if N is not None else 64
    fit = max(1, (info.l2_bytes // 2) // (4 * kc * nr))   # panels per block
    col_blocks = _ceil(panels, fit)
    row_panels = _ceil(M, mr) if M is not None else 64
    if T == 1 or M is None:
        # (a symbolic M keeps its row blocks in a serial loop: their guard is then
        # peeled off per block, not tested in every micro-kernel of the parallel loop)
        nc = nr * _ceil(panels, col_blocks)
        return GemmParams(mr, nr, kc, M if M is not None else mr * 64, nc, L, "rows")
    # several threads: one task per (row block x column block), each packing its own B
    # block into its own L2; at least two tasks per thread where there are enough panels
    # (they are claimed dynamically: a thread that loses its core takes fewer), a
    # multiple of the thread count.  One task per block is faster on large shapes than
    # all threads packing each block together and then sharing its row panels (half of
    # the block then comes from the other core's cache, and a barrier per block waits
    # for the slower core), as fast on small ones
    # (measurements: benchmarks/DECISIONS.md, "GEMM: one packed B block per task")
    col_blocks = max(col_blocks, min(panels, 2 * T))
    if col_blocks > T and col_blocks % T:
        col_blocks = min(panels, _ceil(col_blocks, T) * T)
    nc = nr * _ceil(panels, col_blocks)
    col_blocks = _ceil(panels, _ceil(panels, col_blocks))
    if col_blocks >= 2 * T:
        return GemmParams(mr, nr, kc, M, nc, L, "blocks")
    # too few column panels: split the rows too, into equal blocks of whole MR-row
    # panels (a ragged row block would guard every micro-kernel of the fused parallel
    # loop, which then runs much slower)
    # (measurements: benchmarks/DECISIONS.md, "GEMM: equal row blocks")
    need = _ceil(2 * T, col_blocks)
    if M % mr == 0:
        for row_blocks in range(need, min(row_panels, 8 * need) + 1):
            if row_panels % row_blocks == 0:
                return GemmParams(mr, nr, kc, M // row_blocks, nc, L, "blocks")
    if row_panels < 4 * T:
        # few rows and no equal split: ragged row blocks all the same
        row_blocks = min(row_panels, need)
        return GemmParams(mr, nr, kc, mr * _ceil(row_panels, row_blocks), nc, L, "blocks")
    # else every column block is packed by all threads, which then share its row panels
    nc = nr * _ceil(panels, _ceil(panels, fit))
    return GemmParams(mr, nr, kc, M, nc, L, "rows")


class _NoTemplate(ScheduleError):
    """The DAG is not what a template schedules (the public schedule_* functions then
    use the auto-scheduler's rules)."""


_GEMM_OVERRIDES = threading.local()


@contextlib.contextmanager
def gemm_overrides(values: dict):
    """Within the ``with`` block, the GEMM schedules use ``values`` (fields of
    :class:`GemmParams`: ``mr``, ``nr``, ``kc``, ``mc``, ``nc``, ``par``) instead of their
    heuristic choices: the knobs the auto-scheduler searches (``tc.auto_schedule``)."""
    bad = set(values) - {f.name for f in dataclasses.fields(GemmParams)}
    if bad:
        raise ScheduleError(f"gemm_overrides: unknown GEMM parameters {sorted(bad)}; use "
                            f"{', '.join(f.name for f in dataclasses.fields(GemmParams))}")
    old = getattr(_GEMM_OVERRIDES, "values", None)
    _GEMM_OVERRIDES.values = dict(values)
    try:
        yield
    finally:
        _GEMM_OVERRIDES.values = old


def _overridden(p: GemmParams, M, N, K, info: CpuInfo, packed_nr=None) -> GemmParams:
    over = getattr(_GEMM_OVERRIDES, "values", None)
    if not over:
        return p
    if "nr" in over and over["nr"] != p.nr and packed_nr is None:
        # the other blocking follows the panel width unless given too
        q = gemm_params(M, N, K, info, nr=over["nr"])
        p = dataclasses.replace(q, nc=q.nr if p.nc == p.nr else q.nc)
    p = dataclasses.replace(p, **{k: v for k, v in over.items() if k != "nr" or packed_nr is None})
    if p.par == "rows" and info.threads > 1 and M is not None:
        p = dataclasses.replace(p, mc=M)
    if ("mr" in over or "mc" in over) and M is not None and p.mc < M and (
            p.mc % p.mr or M % p.mc):
        # row blocks are whole MR-row panels that divide M (a ragged row block guards
        # every micro-kernel, and its edge panels do not lower): the nearest such
        # block, or all the rows
        ok = [m for m in range(p.mr, M, p.mr) if M % m == 0]
        p = dataclasses.replace(p, mc=min(ok, key=lambda m: abs(m - p.mc)) if ok else M)
    return p


def _gemm_operands(op: ComputeOp):
    """For ``C[i, j] = sum_k X[.., ..] * Y[.., ..]``: (a, a_kfirst, b, b_kfirst) where
    ``a`` is the operand indexed by ``i`` and ``b`` the one indexed by ``j``; ``*_kfirst``
    says whether the reduction index comes first (``B[k, j]``) or last (``W[j, k]``)."""
    body = op.body
    if not isinstance(body, Reduce) or len(op.axis) != 2 or len(op.reduce_axis) != 1:
        raise ScheduleError(f"{op.name} is not a 2-d GEMM (C[i, j] = sum_k ...)")
    i, j = (iv.var for iv in op.axis)
    k = op.reduce_axis[0].var
    a = b = None
    for t in op.input_tensors:
        for ld in _loads(body.source, t):
            idx = ld.indices
            if len(idx) != 2:
                continue
            if idx[0] is i and idx[1] is k:
                a = (t, False)
            elif idx[0] is k and idx[1] is j:
                b = (t, True)
            elif idx[0] is j and idx[1] is k:
                b = (t, False)
    return a, b


def _schedule_gemm_stage(s: Schedule, C: Tensor, info: CpuInfo, packed: Optional[Tensor] = None):
    """The register-blocked GEMM schedule of stage ``C`` (see the module docstring).

    ``packed``: a compute stage ``P[jo, k, ji]`` holding B in ``NR``-wide panels (from
    :func:`matmul_packed`); it is computed per (column block, k slice).  Without it, B
    (read as ``B[k, j]``) is copied into a ``KC x NR`` block (one panel: the column
    blocks are ``NR`` wide) at the same loop."""
    op = C.op
    M, N = (_cint(e) for e in op.shape)
    K = _cint(op.reduce_axis[0].dom.extent)
    if packed is None and (K is None or K >= info.lanes):
        b_operand = _gemm_operands(op)[1]
        if b_operand is not None and not b_operand[1]:
            return _schedule_dense_nopack(s, C, info)
    if packed is not None:
        nr = int(op.attrs.get("nr", 0)) or _cint(packed.shape[2])
        # blocked for the panels' actual width (column blocks of whole panels)
        p = gemm_params(M, N, K, info, nr=nr)
        if nr < info.lanes:
            p = dataclasses.replace(p, mr=max(1, min(p.mr * 2, 12)))
    else:
        p = gemm_params(M, N, K, info)
        # B is copied into a row-major KC x NC block (cache_read keeps B's index order):
        # with NC = NR that block is one contiguous panel, as matmul_packed's layout,
        # instead of a k step striding NC floats: faster on large shapes, about even on
        # small ones (measurements: benchmarks/DECISIONS.md, "GEMM: B copied as one panel")
        p = dataclasses.replace(p, nc=p.nr)
    p = _overridden(p, M, N, K, info, nr if packed is not None else None)
    if M is not None and N is not None and K is not None and p.kc == K:
        # one K slice: the register-blocked nest, also when the blocks do not divide
        # the shape (its edge blocks are guarded and peeled off): faster than the general
        # nest below at every shape measured
        # (measurements: benchmarks/DECISIONS.md, "GEMM: the one-slice nest at any shape")
        return _schedule_gemm_write_cache(s, C, info, packed, p)
    st = s[C]
    i, j = op.axis
    k = op.reduce_axis[0]
    ic, ir_ = st.split(i, factor=p.mc)
    jc, jr_ = st.split(j, factor=p.nc)
    jr, ji = st.split(jr_, factor=p.nr)
    ir, ii = st.split(ir_, factor=p.mr)
    pc, ki = st.split(k, factor=p.kc)
    st.reorder(ic, jc, pc, ir, jr, ki, ii, ji)
    st.unroll(ii)
    _vector_columns(st, ji, p)
    st.pragma(ki, "unroll_count", 4)  # see _schedule_gemm_write_cache
    rows_par = info.threads > 1 and p.par == "rows"
    if rows_par:
        st.parallel(ir)
    elif info.threads > 1:
        nic = -(-M // p.mc) if M is not None else None
        njc = -(-N // p.nc) if N is not None else None
        if nic == 1:
            par = jc
        elif njc == 1:
            par = ic
        else:
            par = st.fuse(ic, jc)
        st.parallel(par)
    # c + a*b in the micro-kernel: one FMA (see docs/numerics.md)
    st.pragma(st.leaf_iter_vars[0], "fp_contract")
    if packed is not None:
        ps = s[packed]
        ps.compute_at(st, pc)
        pjo, pk, pji = ps.op.axis
        ps.vectorize(pji)
        if rows_par:
            ps.parallel(pjo)   # the threads pack the block's panels together
    else:
        bt, kfirst = _gemm_operands(op)[1]
        if kfirst:
            bb = s.cache_read(bt, "local", [st])
            s[bb].compute_at(st, pc)
            # the panel is nr wide, narrower at the right edge: split by nr so the
            # vector has a constant width (the edge is masked)
            bk = s[bb].op.axis[0]
            _, bj = s[bb].split(s[bb].op.axis[1], factor=p.nr)
            s[bb].vectorize(bj)
            if rows_par:
                s[bb].parallel(bk)
        # B read as W[j, k] (dense): read in place (vector over j is a strided gather)
    return p


def _schedule_dense_nopack(s: Schedule, C: Tensor, info: CpuInfo):
    """``C[b, o] = sum_k X[b, k] * W[o, k]`` read in place (``tecomp.nn.dense`` without
    :func:`dense_packed`): both operands are contiguous along ``k``, so the vector runs
    over ``k``.  The reduction is split by the lane count and ``rfactor``-ed into
    ``C.rf[b, o, kl]``; each ``BB x OB`` tile of C accumulates ``BB*OB`` vectors over
    ``K/L`` steps (per step ``BB + OB`` vector loads for ``BB*OB`` FMAs), then sums their
    lanes.  Parallel over the tiles.  Many times faster than the in-place read across
    ``o`` (a strided gather); :func:`dense_packed` (W packed into panels) is still faster
    for large batches.  Returns None (no GemmParams).
    (measurements: benchmarks/DECISIONS.md, "Dense: vectors along the reduction")"""
    op = C.op
    L = info.lanes
    M, N = (_cint(e) for e in op.shape)
    bb = 4 if info.vregs >= 32 else 3
    ob = 4
    if M is not None:
        bb = max(1, min(bb, M))
    if N is not None:
        ob = max(1, min(ob, N))
    st = s[C]
    k = op.reduce_axis[0]
    _, kl = st.split(k, factor=L)
    rf = s.rfactor(C, kl, factor_axis=2)
    # the L lanes of each accumulator are summed as a tree: L/2 + L/2, then L/4 + L/4,
    # ... (one rfactor per level: each a vector add of two halves of a register)
    # instead of L - 1 scalar adds in a row with a shuffle each: faster at every batch
    # and thread count measured
    # (measurements: benchmarks/DECISIONS.md, "Dense: lane sums as a tree")
    halves = []
    w = L
    while w > 2:
        w //= 2
        _, kq = s[C].split(s[C].op.reduce_axis[0], factor=w)
        halves.append(s.rfactor(C, kq, factor_axis=2))
    st = s[C]
    b, o = st.op.axis
    bo, bi = st.split(b, factor=bb)
    oo, oi = st.split(o, factor=ob)
    # output-channel tiles outer: a tile's OB rows of W stay in L1 while the batch
    # blocks (X: L2) go by, instead of W streaming from L3 once per batch block
    # (measurements: benchmarks/DECISIONS.md, "Dense: output-channel tiles outer")
    st.reorder(oo, bo, bi, oi)
    # parallel over the output-channel tiles, the batch blocks a serial loop inside:
    # its tail (a batch that 4 does not divide) is then partitioned off with constant
    # extents, where a fused (tile, block) loop left the unrolled loops a symbolic
    # extent in every tile: faster with a batch tail, about even without one.  Fused
    # only when there are too few output tiles for the threads
    # (measurements: benchmarks/DECISIONS.md, "Dense: parallel over the tiles")
    noo = _ceil(N, ob) if N is not None else None
    if info.threads > 1 and noo is not None and noo < 2 * info.threads:
        tile = st.fuse(oo, bo)
        st.parallel(tile)
    else:
        tile = bo
        if info.threads > 1:
            st.parallel(oo)
    # the tile's final sums unrolled: BB*OB independent additions, the accumulators
    # read from registers (as loops, one output at a time through the stack, the sums
    # over 16 lanes were chains of dependent adds, by the asm's latencies longer than
    # the k loop itself; unrolled ran faster)
    # (measurements: benchmarks/DECISIONS.md, "Dense: final sums unrolled")
    st.unroll(bi)
    st.unroll(oi)
    st.unroll(st.op.reduce_axis[0])
    for h in halves:
        hs = s[h]
        hs.compute_at(st, tile)
        hb, ho, hq = hs.op.axis
        hbo, hbi = hs.split(hb, factor=bb)
        hoo, hoi = hs.split(ho, factor=ob)
        hkh, = hs.op.reduce_axis
        hs.reorder(hbo, hoo, hbi, hoi, hkh, hq)
        hs.unroll(hbi)
        hs.unroll(hoi)
        hs.unroll(hkh)
        hs.vectorize(hq)
    rs = s[rf]
    rs.compute_at(st, tile)
    fb, fo, fk = rs.op.axis
    rko, = rs.op.reduce_axis
    # the tile's accumulators: constant-size register blocks (a tile at the edge of C
    # is guarded, not a block of variable size)
    fbo, fbi = rs.split(fb, factor=bb)
    foo, foi = rs.split(fo, factor=ob)
    rs.reorder(fbo, foo, rko, fbi, foi, fk)
    rs.unroll(fbi)
    rs.unroll(foi)
    rs.vectorize(fk)
    rs.pragma(rko, "fp_contract")
    rs.pragma(rko, "unroll_count", 2)
    _dense_aligned_copies(s, op, rf, st, oo if tile is bo else None, M,
                          _cint(op.reduce_axis[0].dom.extent), bb, L, info)
    return None


def _dense_aligned_copies(s: Schedule, op: ComputeOp, rf: Tensor, st: Stage, oo, M, K,
                          bb: int, L: int, info: CpuInfo):
    """The dense micro-kernel's vector loads of X and W from copies that start on a
    cache line: numpy's large arrays start 16 bytes past a page (malloc's header), so
    about every vector load of the operands in place straddles two lines.  X (re-read
    once per output-channel tile) is copied once, in parallel, at the root; W's ``OB``
    rows once per output-channel tile, where the batch blocks re-read them.  Not for a
    batch of one block.  Much faster with operands 16 bytes past a line (as numpy's large
    arrays), and still faster with aligned ones.
    (measurements: benchmarks/DECISIONS.md, "Dense: aligned copies of X and W")"""
    if M is None or K is None or K < L or M <= bb:
        return  # one batch block: each row of X and W is read once per tile, from L1
    x_op, w_op = _gemm_operands(op)
    if x_op is None or w_op is None or w_op[1]:
        return
    xx = s.cache_read(x_op[0], "global", [rf])
    xs = s[xx]
    xr, xk = xs.op.axis
    _, xl = xs.split(xk, factor=L)
    xs.vectorize(xl)
    if info.threads > 1 and M > 1:
        xs.parallel(xr)
    if oo is not None:
        ww = s.cache_read(w_op[0], "local", [rf])
        ws = s[ww]
        ws.compute_at(st, oo)
        _, wl = ws.split(ws.op.axis[1], factor=L)
        ws.vectorize(wl)


def _vector_columns(st: Stage, ji, p: GemmParams):
    """Vectorize the ``NR`` columns of the micro-kernel: one widened vector when ``NR``
    is one or two registers, else ``NR/L`` unrolled vectors of ``L`` lanes (LLVM
    legalizes a 48-lane accumulator carried around the ``k`` loop through the stack).
    Returns the loop over those vectors, or None."""
    L = p.lanes
    if p.nr > 2 * L and p.nr % L == 0:
        jv, jl = st.split(ji, factor=L)
        st.unroll(jv)
        st.vectorize(jl)
        return jv
    st.vectorize(ji)
    return None


def _schedule_gemm_write_cache(s: Schedule, C: Tensor, info: CpuInfo, packed, p: GemmParams):
    """The GEMM schedule when the whole reduction is one slice (``KC == K``; blocks that
    do not divide the shape are guarded at the edges of C and peeled off by loop
    partitioning): each ``MR x NR`` block of C is accumulated in a local
    buffer (``cache_write``; constant indices after unrolling, so LLVM keeps it in
    registers), zeroed there and written to C once.  This saves the separate pass that
    zeroes C and the reload of the C block before the ``k`` loop.  Loops::

        jc                      NC columns; pack B's K x NC block (parallel over panels)
          ir (parallel)         MR-row panels ("rows" mode; "blocks": ic.jc parallel)
            jr                  NR-wide panel; C.local[MR, NR] = 0
              k, i (unrolled), j (vector): C.local += A * B
            i, j: C = C.local
    """
    CC = s.cache_write(C, "local")
    st = s[C]
    i, j = st.op.axis
    ic, ir_ = st.split(i, factor=p.mc)
    jc, jr_ = st.split(j, factor=p.nc)
    jr, ji = st.split(jr_, factor=p.nr)
    ir, ii = st.split(ir_, factor=p.mr)
    st.reorder(ic, jc, ir, jr, ii, ji)
    st.unroll(ii)
    # the copy out of C.local in the same vectors as the micro-kernel's accumulators: a
    # 48-wide vector over 3 x 16-lane accumulators kept LLVM from promoting C.local to
    # registers, many times slower
    # (measurements: benchmarks/DECISIONS.md, "GEMM: copy-out vectors")
    copy_vectors = _vector_columns(st, ji, p)
    rows_par = info.threads > 1 and p.par == "rows"
    if rows_par:
        st.parallel(ir)
        pack_at = jc
    elif info.threads > 1:
        pack_at = st.fuse(ic, jc)
        st.parallel(pack_at)
    else:
        pack_at = jc
    cs = s[CC]
    cs.compute_at(st, jr)
    ci, cj = cs.op.axis
    ck, = cs.op.reduce_axis
    # constant-size blocks even at the bottom and right edges of C (the block there is
    # guarded; loop partitioning peels the edge panels off, so the inner panels run
    # unguarded in registers)
    cio, ci = cs.split(ci, factor=p.mr)
    cjo, cj = cs.split(cj, factor=p.nr)
    cs.reorder(cio, cjo, ck, ci, cj)
    cs.unroll(ci)
    _vector_columns(cs, cj, p)
    N = _cint(C.op.shape[1])
    b_operand = _gemm_operands(CC.op)[1]   # None for matmul_packed's panels
    bt, kfirst = b_operand if b_operand is not None else (None, False)
    # the right edge: the last panel's block is computed whole over the zero-padded
    # panel (align_bounds; matmul_packed's panels are zero past N, plain matmul's copy
    # of B is padded) and only its copy to C is masked (the loops around it are not
    # partitioned).  One micro-kernel in the code instead of a narrower second one and
    # copies of the parallel nest: faster to run and to build (measurements:
    # benchmarks/DECISIONS.md, "GEMM: the right edge over the padded panel")
    edge = N is not None and N % p.nr != 0 and (packed is not None or kfirst)
    if edge:
        cs.align_bounds(cs.op.axis[1], p.nr)
        for ax in (pack_at, jr, copy_vectors):
            if ax is not None:
                st.pragma(ax, "no_partition")
    # four k steps per loop iteration: the loop's own instructions (counter, pointer
    # bumps, branch) are paid once per 4 x MR x NR/L FMAs (measurably faster); LLVM
    # unrolls it (cheaper to compile than unrolling it in the IR)
    # (measurements: benchmarks/DECISIONS.md, "GEMM: four k steps per iteration")
    cs.pragma(ck, "unroll_count", 4)
    # c + a*b in the micro-kernel: one FMA (see docs/numerics.md)
    cs.pragma(ck, "fp_contract")
    if packed is not None:
        ps = s[packed]
        ps.compute_at(st, pack_at)
        pjo, pk, pji = ps.op.axis
        ps.vectorize(pji)
        if rows_par:
            ps.parallel(pjo)
    else:
        if kfirst:
            bb = s.cache_read(bt, "local", [cs], pad=0.0 if edge else None)
            s[bb].compute_at(st, pack_at)
            if edge:
                s[bb].align_bounds(s[bb].op.axis[1], p.nr)
            bk = s[bb].op.axis[0]
            _, bj = s[bb].split(s[bb].op.axis[1], factor=p.nr)
            s[bb].vectorize(bj)
            if rows_par:
                s[bb].parallel(bk)
    return p


def matmul_packed(A: Tensor, B: Tensor, nr: Optional[int] = None, name: str = "matmul",
                  target="llvm"):
    """``A[M, K] @ B[K, N]`` with B packed into ``NR``-column panels by a compute stage
    ``<name>.packB[N/NR, K, NR] = B[k, jo*NR + ji]`` (zero beyond N), the array packing of
    the GEMM tutorials: each ``KC x NR`` micro-panel is contiguous.  Same result as
    ``tecomp.nn.matmul``; schedule it with :func:`schedule_matmul`.  A layout for a
    target: ``nr`` by default from ``target``'s vector width (two vectors)."""
    if A.ndim != 2 or B.ndim != 2:
        raise ScheduleError(f"matmul_packed {name}: needs 2-d tensors")
    N = _cint(B.shape[1])
    if nr is None:
        nr = gemm_params(None, N, None, cpu_info(target)).nr
    K = B.shape[0]
    nb = (B.shape[1] + (nr - 1)) // nr
    Nn = B.shape[1]
    if N is not None and N % nr == 0:
        pb = _te.compute((nb, K, nr), lambda jo, k, ji: B[k, jo * nr + ji],
                         name=f"{name}.packB", tag="gemm_pack")
    else:
        pb = _te.compute((nb, K, nr), lambda jo, k, ji: _te.if_then_else(
            jo * nr + ji < Nn, B[k, jo * nr + ji], _te.const(0.0, B.dtype)),
            name=f"{name}.packB", tag="gemm_pack")
    k = _te.reduce_axis(A.shape[1], name="k")
    return _te.compute((A.shape[0], B.shape[1]),
                       lambda i, j: _te.sum(A[i, k] * pb[j // nr, k, j % nr], axis=k),
                       name=name, tag="matmul,matmul_packed", attrs={"nr": nr})


def dense_packed(X: Tensor, W: Tensor, bias: Optional[Tensor] = None, nr: Optional[int] = None,
                 name: str = "dense", target="llvm"):
    """``X[B, I] @ W[O, I]^T (+ bias)`` (``tecomp.nn.dense``) with W transposed into
    ``NR``-wide panels by a compute stage ``<name>.packW[O/NR, I, NR]`` (``nr``: as
    :func:`matmul_packed`)."""
    O = _cint(W.shape[0])
    if nr is None:
        nr = gemm_params(None, O, None, cpu_info(target)).nr
    nb = (W.shape[0] + (nr - 1)) // nr
    On = W.shape[0]
    if O is not None and O % nr == 0:
        pw = _te.compute((nb, W.shape[1], nr), lambda jo, k, ji: W[jo * nr + ji, k],
                         name=f"{name}.packW", tag="gemm_pack")
    else:
        pw = _te.compute((nb, W.shape[1], nr), lambda jo, k, ji: _te.if_then_else(
            jo * nr + ji < On, W[jo * nr + ji, k], _te.const(0.0, W.dtype)),
            name=f"{name}.packW", tag="gemm_pack")
    k = _te.reduce_axis(X.shape[1], name="k")
    mm = _te.compute((X.shape[0], W.shape[0]),
                     lambda b, o: _te.sum(X[b, k] * pw[o // nr, k, o % nr], axis=k),
                     name=name if bias is None else f"{name}.matmul",
                     tag="dense,matmul_packed", attrs={"nr": nr})
    if bias is None:
        return mm
    return _te.compute(mm.shape, lambda b, o: mm[b, o] + bias[o], name=name, tag="bias_add")


def _schedule_gemm_like(outs, target, tags) -> Schedule:
    outs = _outs(outs)
    info = cpu_info(target)
    s = create_schedule([t.op for t in outs])
    gemms = _find(outs, lambda op: _has_tag(op, *tags) and op.reduce_axis)
    if not gemms:
        # no template for this DAG (e.g. a batched matmul written as a compute): the
        # auto-scheduler's rules
        return _auto_rest(s, outs, info)
    packs = {id(op): op for op in _find(outs, lambda op: _has_tag(op, "gemm_pack"))}
    for g in gemms:
        C = g.output(0)
        packed = None
        for t in g.input_tensors:
            if id(t.op) in packs:
                packed = t
        _schedule_gemm_stage(s, C, info, packed)
        if not s[C].is_output:
            s[C].compute_root()
    # epilogues (bias, activation): inline the injective chain into the output and
    # schedule the output as an elementwise loop
    keep = set(id(g) for g in gemms) | set(packs)
    _inline_injective(s, [op for op in _walk(outs) if id(op) not in keep])
    for t in outs:
        if id(t.op) not in keep and _is_injective(t.op):
            _schedule_elementwise_stage(s, t, info)
    return _auto_rest(s, outs, info)


def _auto_rest(s: Schedule, outs, info: CpuInfo) -> Schedule:
    """The stages a template left alone (other reductions under the outputs, or all of
    them when the template found nothing to schedule) get the auto-scheduler's rules
    (:func:`tecomp.autoschedule.rules.schedule_stages`)."""
    fresh = {id(st.op) for st in s.stages if isinstance(st.op, ComputeOp)
             and st.attach_type == "root" and not st.relations and not st.iter_attrs}
    if fresh:
        _rules.schedule_stages(s, outs, info, only=fresh)
    return s


def _template_or_rules(into, outs, target) -> Schedule:
    """A new schedule of ``outs`` with ``into(s, outs, info)`` (a template); where it
    finds nothing it schedules, or for the stages it leaves alone, the rules."""
    outs = _outs(outs)
    info = cpu_info(target)
    s = create_schedule([t.op for t in outs])
    try:
        into(s, outs, info)
    except _NoTemplate:
        s = create_schedule([t.op for t in outs])
    return _auto_rest(s, outs, info)


def schedule_matmul(outs, target: str = "llvm") -> Schedule:
    """The tuned GEMM schedule for ``tecomp.nn.matmul`` (B read in place and copied into
    micro-panels) and :func:`matmul_packed` (B packed by its own stage), plus any
    elementwise epilogue on top."""
    return _schedule_gemm_like(outs, target, ("matmul", "matmul_packed"))


def schedule_dense(outs, target: str = "llvm") -> Schedule:
    """The tuned schedule of ``tecomp.nn.dense`` (with or without bias) and of
    :func:`dense_packed`.  Plain ``dense`` reads ``W[O, I]`` in place with the vector
    over the reduction (:func:`_schedule_dense_nopack`, TVM's ``dense_nopack``);
    :func:`dense_packed` packs W into panels first and runs the GEMM micro-kernel, faster
    when the batch is large."""
    return _schedule_gemm_like(outs, target, ("dense", "matmul_packed"))


# ---------------------------------------------------------------------------------
# elementwise / injective


def _schedule_elementwise_stage(s: Schedule, t: Tensor, info: CpuInfo):
    st = s[t]
    axes = list(st.op.axis)
    exts = [_cint(e) for e in t.shape]
    L = info.lanes
    inner = axes[-1]
    inner_ext = exts[-1]
    # vector over the last axis: one vector per iteration, or a few when it is long
    vec_outer = None
    if inner_ext is not None and inner_ext <= L:
        st.vectorize(inner)
    else:
        vec_outer, vi = st.split(inner, factor=L)
        st.vectorize(vi)
    outer_axes = axes[:-1] + ([vec_outer] if vec_outer is not None else [])
    outer_exts = exts[:-1] + ([-(-inner_ext // L)] if vec_outer is not None and inner_ext
                              is not None else ([None] if vec_outer is not None else []))
    if info.threads > 1 and outer_axes:
        total = 1
        for e in outer_exts:
            total = None if (e is None or total is None) else total * e
        if total is None or total >= 2:
            ax = st.fuse(*outer_axes) if len(outer_axes) > 1 else outer_axes[0]
            st.parallel(ax)


def schedule_elementwise(outs, target: str = "llvm") -> Schedule:
    """Elementwise / injective operators (relu, bias_add, pad, ...): every injective
    producer is inlined, the output is one parallel loop over its outer axes with the
    last axis vectorized."""
    outs = _outs(outs)
    info = cpu_info(target)
    s = create_schedule([t.op for t in outs])
    _inline_injective(s, _walk(outs))
    for t in outs:
        _schedule_elementwise_stage(s, t, info)
    return s


schedule_injective = schedule_elementwise


# ---------------------------------------------------------------------------------
# convolution


def _conv_parts(outs, tag):
    """(the conv stage, its padding stage or None).  ``outs`` of one element that is a
    convolution itself: that one (schedule_conv2d_into; other convolutions may lie under
    it, e.g. the forward under a gradient)."""
    if len(outs) == 1 and _has_tag(outs[0].op, tag) and outs[0].op.reduce_axis:
        convs = [outs[0].op]
    else:
        convs = _find(outs, lambda op: _has_tag(op, tag) and op.reduce_axis)
    if len(convs) != 1:
        raise _NoTemplate(f"expected one {tag} stage under the outputs, found {len(convs)}")
    conv = convs[0]
    pad = None
    for t in conv.input_tensors:
        if isinstance(t.op, ComputeOp) and _has_tag(t.op, "pad"):
            pad = t
    return conv.output(0), pad


def _own_pad(s: Schedule, pad):
    """``pad`` when the convolution is its only reader, else None: a padded input that
    another stage reads too (a weight gradient reads the forward's) stays a root stage
    for whoever schedules that reader, instead of being computed per task."""
    if pad is not None and len(s.consumers(s[pad])) > 1:
        return None
    return pad


def _divisors(n: int) -> List[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _conv_block_nchw(K, OH, OW, info: CpuInfo, N: int = 1, R: Optional[int] = 3,
                     S: Optional[int] = 3, x_stride: int = 1, small_weights: bool = False):
    """(OB, YB, XB): output channels x rows x columns held in registers.

    A tiny cost model of one input channel (the loop around the ``R x S`` window, see
    :func:`schedule_conv2d_nchw`): ``R*S*OB*YB*ceil(XB/L)`` FMAs; loads: the input
    vectors the taps share, ``(YB + R - 1) * S * ceil(XB/L)``, and ``R*S*OB`` weight
    broadcasts, at 2 FMAs and 1 load a cycle (what fits the measurements), plus a
    little loop overhead; a vector is only partly useful when ``XB`` is not a multiple
    of the lanes.  A block that does not divide the output leaves a tail, heavily
    penalised: when the tail dimension is part of the fused parallel loop the tail
    cannot be partitioned off, the accumulators stay under a guard in every task and
    the kernel runs several times slower.  Where the row blocks can be a serial loop in
    each task instead (:func:`_rows_peeled`), a row tail is peeled off that loop and
    costed as the smaller block it is: 13 or 11 rows then take 3- or 4-row blocks rather
    than single rows, whose weight broadcast per FMA ran well below larger blocks.  With
    a column stride (``x_stride`` > 1) an input vector is counted as 4 loads and the taps
    share none (what fit the measurements of a strided first layer); it was a gather
    then, it is now a wider load and a shuffle (codegen's ``wide_load``), but counting it
    as 2 loads picks the same blocks for the stride-2 convs of ResNet's shapes.
    (measurements: benchmarks/DECISIONS.md, "Conv NCHW: the block cost model")"""
    L = info.lanes
    R = R if R is not None else 3
    S = S if S is not None else 3
    budget = info.vregs - 8 if info.vregs >= 32 else info.vregs - 4
    best = None
    # a vector is at most one register or a whole number of them: LLVM legalizes e.g.
    # 28 or 56 float32 lanes on AVX-512 through the stack, many times slower
    # (measurements: benchmarks/DECISIONS.md, "Conv NCHW: whole registers per vector")
    # Without AVX-512's masks a tail block runs its guarded lanes one by one: any divisor
    # up to four registers instead, emitted as register-wide pieces and a shorter one (a
    # 13-wide row as 8 + 5), much faster than a block and a guarded tail
    # (measurements: benchmarks/DECISIONS.md, "Conv NCHW: divisor blocks without masks")
    masks = info.masks
    if OW is not None:
        xbs = [d for d in _divisors(OW)
               if d <= L or (d <= 4 * L and (d % L == 0 or not masks))]
        if max(xbs) < min(OW, L) // 2:
            xbs.append(min(OW, L))  # no good divisor: a tail block (masked)
    else:
        xbs = [L]

    def cycles(ob, yb, nvx):
        fmas = R * S * ob * yb * nvx
        if x_stride == 1:
            loads = (yb + R - 1) * S * nvx + R * S * ob
        else:
            loads = 4 * R * S * yb * nvx + R * S * ob
        # + loop, address and C-block overhead; and a little per load, since they share
        # the ports with the FMAs' broadcasts (of two blocks with as many accumulators
        # at the same modelled cycles, the one with fewer loads ran faster)
        # (measurements: benchmarks/DECISIONS.md, "Conv NCHW: a cost per load")
        return fmas, max(fmas / 2, loads) + 3 + loads / 8

    for xb in xbs:
        nvx = -(-xb // L)
        util = xb / (nvx * L)
        ybs = [1, 2, 3, 4]
        if OH is not None and all(OH % y for y in (2, 3, 4)):
            # no small row block divides the rows (7x7: every 2- to 4-row block leaves a
            # tail): the divisors up to 8 too
            ybs += [d for d in _divisors(OH) if 4 < d <= 8]
        for yb in ybs:
            if OH is not None and yb > OH:
                break
            top = min(budget // (nvx * yb), K if K is not None else 64)
            for ob in range(1, top + 1):
                fmas, cyc = cycles(ob, yb, nvx)
                # with a column stride not measured better
                # (measurements: benchmarks/DECISIONS.md, "Conv NCHW: strided rows not peeled")
                peeled = x_stride == 1 and _rows_peeled(N, K, ob, OH, yb, info)
                if peeled:
                    # the rows are a serial loop in each task, its last block peeled off
                    tf, tc_ = cycles(ob, OH % yb, nvx)
                    full = OH // yb
                    score = util * (full * fmas + tf) / (full * cyc + tc_)
                else:
                    score = util * fmas / cyc
                if K is not None and K % ob:
                    score *= 0.5  # a tail block: see above
                if peeled:
                    # the peeled block is a second copy of the unrolled kernel (the
                    # build takes longer, the more so the larger the block) and the
                    # tasks no longer pad their own rows (small weights: see
                    # _conv_tasks): a divisor block is kept unless the peeled one is
                    # clearly better (peeled blocks ran slower on small-weight layers)
                    # (measurements: benchmarks/DECISIONS.md, "Conv NCHW: peeled blocks")
                    score *= 0.65 if small_weights else 0.8
                elif OH is not None and OH % yb:
                    # a row tail in the parallel loop: a guard in every block, several
                    # times slower than blocks that leave no tail
                    # (measurements: benchmarks/DECISIONS.md, "Conv NCHW: a row tail")
                    score *= 0.2
                if OW is not None and OW % xb:
                    score *= 0.85
                if best is None or score > best[0] + 1e-9:
                    best = (score, ob, yb, xb)
    _, ob, yb, xb = best
    return ob, yb, xb


def _small_weights(weight: Tensor, info: CpuInfo) -> bool:
    """Whether a convolution's weights fit in a quarter of L2 (see :func:`_conv_tasks`)."""
    wbytes = _bytes(weight)
    return wbytes is not None and wbytes <= info.l2_bytes // 4


def _rows_peeled(N, K, ob, OH, yb, info: CpuInfo) -> bool:
    """Whether an NCHW convolution with ``OB x YB`` blocks runs its row blocks as a serial
    loop inside (batch, channel block) tasks, so that a row tail (``OH % YB`` rows) is
    peeled off that loop instead of guarding every block of the parallel loop: when the
    rows leave a tail and there are at least 4 such tasks per thread."""
    if OH is None or K is None or OH % yb == 0:
        return False
    return (N or 1) * _ceil(K, ob) >= 4 * info.threads


def _schedule_pad_at(s: Schedule, pad: Tensor, st: Stage, axis, info: CpuInfo,
                     vec_dim: int):
    """Compute the padding stage at ``st``'s loop ``axis`` (the region one iteration
    reads, with its halo), the dimension ``vec_dim`` vectorized."""
    ps = s[pad]
    ps.compute_at(st, axis)
    ax = ps.op.axis[vec_dim]
    ext = _cint(pad.shape[vec_dim])
    L = info.lanes
    if ext is not None and ext <= 64:
        # the region is at most this wide: one (wide) vector, masked where narrower
        _, vi = ps.split(ax, factor=ext)
        ps.vectorize(vi)
    else:
        _, vi = ps.split(ax, factor=L)
        ps.vectorize(vi)


def _conv_parallel(st: Stage, axes, exts, threads: int, min_tasks: int):
    """Fuse the leading axes until there are at least ``min_tasks`` tasks (or all are
    taken) and make the fused axis parallel; returns it."""
    take, total = [], 1
    for a, e in zip(axes, exts):
        take.append(a)
        total = total * e if (e is not None and total is not None) else None
        if total is None or total >= min_tasks:
            break
    ax = take[0] if len(take) == 1 else st.fuse(*take)
    if threads > 1:
        st.parallel(ax)
    return ax, len(take)


def schedule_conv2d_nchw(outs, target: str = "llvm") -> Schedule:
    """``tecomp.nn.conv2d_nchw`` (plus any elementwise epilogue).

    An ``OB x YB x XB`` block of the output (channels x rows x columns, the columns one
    widened vector) is accumulated in registers over the input channels (a loop) and
    the kernel window (unrolled): each tap loads ``YB`` input rows and broadcasts
    ``OB`` weights.  Rows that leave a tenth of the lanes or more idle (7, 13, 14 or 56
    of 16) have the vectors across output channels instead, the NHWC kernel's shape
    (:func:`_nchw_by_channels`): ``OB`` is 2 vectors of channels, the block's
    pixels broadcast one input value each per tap (any layout, any stride), the weights
    are 2 vector loads from a copy stored ``[C, KH, KW, O]`` and the block is stored
    channels innermost (``storage_order``), scattered to the NCHW output once.  Tasks
    and padding: see :func:`_conv_tasks`."""
    return _template_or_rules(_conv2d_nchw_into, outs, target)


def _conv2d_nchw_into(s: Schedule, outs, info: CpuInfo):
    conv, pad = _conv_parts(outs, "conv2d_nchw")
    pad = _own_pad(s, pad)
    N, K, OH, OW = (_cint(e) for e in conv.shape)
    c, ky, kx = conv.op.reduce_axis
    weight = _conv_weight(conv)
    ob, yb, xb = _conv_block_nchw(K, OH, OW, info, N, _cint(ky.dom.extent),
                                  _cint(kx.dom.extent), _conv_x_stride(conv),
                                  _small_weights(weight, info))
    by_channels = _nchw_by_channels(conv, info, xb)
    if by_channels is not None:
        ob, yb, xb = by_channels
    fused = _fusable_epilogue(outs, conv)
    st, (n, oc, yc, xc), cs, (cn, co, cy, cx), tiles = _conv_register_block(
        s, conv, (1, ob, yb, xb), out=fused, vec=1 if by_channels else None)
    c, ky, kx = cs.op.reduce_axis
    # the input channel is the loop around the kernel window (unrolled by LLVM: small
    # windows only), the register block lives across both: per channel the taps share
    # their input vectors (a 3x3 window with YB = 2 loads 4 rows x 3 shifts, not 9 x 2)
    # and the channel's input rows and weights stay in L1 (with the channel innermost,
    # every tap swept all the channels' rows: 59 KB for the 64-channel 56x56 case),
    # faster on both cases measured.  Across channels, the weight copy is then read in
    # order too (measurements: benchmarks/DECISIONS.md, "Conv NCHW: channel loop outside")
    if by_channels:
        cs.reorder(*tiles, cn, c, ky, kx, cy, cx, co)
        unrolled, vec = (cy, cx), co
    else:
        cs.reorder(*tiles, cn, c, ky, kx, co, cy, cx)
        unrolled, vec = (co, cy), cx
    _unroll_window(cs, ky, kx)
    for ax in unrolled:
        cs.unroll(ax)
    cs.vectorize(vec)
    _conv_tasks(s, st, cs, pad, weight, info, n, oc, yc, N, K, ob, OH, yb,
                pad_vec_dim=3, weight_vec_dim=0 if by_channels else None)
    if by_channels and _cint(ky.dom.extent) == _cint(kx.dom.extent) == 1 and \
            _conv_x_stride(conv) > 1:
        # a strided 1x1 window reads one line of a new input plane per channel step (7
        # or 8 cycles of FMAs), half of it used and a plane apart: the hardware
        # prefetcher loses that stream at page boundaries.  Prefetched 8 channels ahead:
        # faster with a stride, unchanged without one
        # (measurements: benchmarks/DECISIONS.md, "Conv NCHW: prefetch, strided 1x1")
        # (the convolution's own input: the block reads the weights from their copy)
        cs.prefetch([t for t in conv.op.input_tensors if t is not weight][0], c, 8)
    _epilogue(s, outs, conv, info, fused)


def _nchw_by_channels(conv: Tensor, info: CpuInfo,
                      row_xb: int) -> Optional[Tuple[int, int, int]]:
    """The register block (OB, YB, XB) when an NCHW convolution runs with its vectors
    across output channels (see :func:`schedule_conv2d_nchw`), else None.  ``row_xb``:
    the columns of the row-vector block (:func:`_conv_block_nchw`).

    Channel vectors are always full when the output channels make whole 2-vector blocks;
    row vectors are not when the row does not fill them: 7 of 16 lanes at 7x7, 14 of 16
    at 14x14 or 56x56, 13 at 13x13.  So channel vectors when the rows would leave more
    than a tenth of the lanes idle, and the reduction (``C*KH*KW``) is at least 256
    steps long: each block is scattered to NCHW once, 2 x ``XB`` scattered vectors
    against ``C*KH*KW`` steps of ``2 x XB`` FMAs (with 3 input channels, 27 steps, the
    row vectors ran faster).  A block is one output row of at most 8 pixels (or, for
    rows of fewer, the fewest rows that make 8) by 2 vectors: at most 16 accumulators
    (2 x 7 pixels spilled them with the unrolled window, and ran slower).  Not
    measured on AVX2 (16 registers): there, only rows of at most half a vector change.

    Channel vectors ran faster on every such row measured, at batch 1 and 4; rows that
    fill their vectors better stay faster as row vectors.
    (measurements: benchmarks/DECISIONS.md, "Conv NCHW: vectors across output channels")"""
    N, K, OH, OW = (_cint(e) for e in conv.shape)
    L = info.lanes
    ob = 2 * L
    C, KH, KW = (_cint(r.dom.extent) for r in conv.op.reduce_axis)
    if None in (N, K, OH, OW, C, KH, KW) or K % ob or C * KH * KW < 256:
        return None
    if KH * KW == 1 and (OW > L // 2 or C < 512):
        # a 1x1 window: only rows at most half a vector wide with 512 input channels or
        # more (faster there, slower on the other 1x1 shapes measured)
        # (measurements: benchmarks/DECISIONS.md, "Conv NCHW: channel vectors for a 1x1")
        return None
    pix = min(8, (info.vregs - 4) // 2)
    if OW <= L // 2:
        yb = max(d for d in _divisors(OH) if d == 1 or d * OW <= pix)
        return ob, yb, OW
    lanes_used = OW / (_ceil(OW, row_xb) * _ceil(row_xb, L) * L)
    if info.vregs < 32 or lanes_used >= 0.9:
        return None
    ds = [d for d in _divisors(OW) if pix - 2 <= d <= pix]
    return ob, 1, max(ds) if ds else pix


def _conv_register_block(s: Schedule, conv: Tensor, block, order=None, out=None,
                         vec: Optional[int] = None):
    """Split the convolution ``conv``'s output into ``block``-sized tiles (one factor per
    output axis; the last one vectorized, or the one at position ``vec``, which the
    tile's buffer then stores innermost), loop over the tiles with the output axes in
    ``order`` (positions; default: as they are) and accumulate each tile in a local buffer
    (``cache_write``) computed at the tile loop: constant indices after unrolling, so
    LLVM keeps the tile in registers across the whole reduction (input channels and
    window), zeroes it there and stores it to ``conv`` once, where accumulating in
    ``conv`` itself loaded and stored the tile around every loop of the reduction that
    is not innermost.  The tile has a constant size at the output's edges too (there it
    is guarded, and loop partitioning peels the edge tiles off).  A little faster than
    accumulating in ``conv`` on one case, within the noise on the others, build times
    too (measurements: benchmarks/DECISIONS.md, "Conv: the block in a local buffer").

    ``out``: an elementwise epilogue over ``conv`` (:func:`_fusable_epilogue`): it is
    the stage tiled, and ``conv`` itself is the local buffer, so that the epilogue
    (bias, activation) is applied to the tile in registers on its way out instead of
    in a second pass over the output: faster than that second pass in all but one run
    (measurements: benchmarks/DECISIONS.md, "Conv: the epilogue on the block").

    Returns (the output's stage, the output's tile loops, the buffer's stage, its
    loops over the tile (one per output axis; the caller orders them with the
    reduction), its loops over the tiles (one trip each: outermost))."""
    if out is not None:
        CC = conv
        s[conv].set_scope("local")
        st = s[out]
    else:
        CC = s.cache_write(conv, "local")
        st = s[conv]
    outer, inner = [], []
    last = len(block) - 1 if vec is None else vec
    vloop = None
    for k, (ax, f) in enumerate(zip(st.op.axis, block)):
        if f == 1 and k != last:
            outer.append(ax)
            continue
        o, i = st.split(ax, factor=f)
        outer.append(o)
        if k == last:
            vloop = i
        else:
            inner.append(i)
    outer = [outer[k] for k in (order or range(len(outer)))]
    st.reorder(*(outer + inner + [vloop]))
    for i in inner:
        st.unroll(i)
    st.vectorize(vloop)
    cs = s[CC]
    cs.compute_at(st, outer[-1])
    c_outer, c_inner = [], []
    for k, (ax, f) in enumerate(zip(list(cs.op.axis), block)):
        if f > 1 or k == last:
            o, ax = cs.split(ax, factor=f)
            c_outer.append(o)
        c_inner.append(ax)
    if vec is not None and vec != len(block) - 1:
        # the vector axis innermost in the buffer too (contiguous accumulators, which
        # LLVM keeps in registers; a strided vector of a local buffer is a gather)
        axes = list(cs.op.axis)
        cs.storage_order(*(axes[:vec] + axes[vec + 1:] + [axes[vec]]))
    return st, outer, cs, c_inner, c_outer


def _conv_x_stride(conv: Tensor) -> int:
    """How far the data index of the last dimension moves per output column (the
    convolution's stride along x; 0 when it cannot be read off the body)."""
    from ..ir.functor import substitute
    from ..ir.simplify import simplify
    from ..ir.expr import Const

    op = conv.op
    x = op.axis[-1].var
    weight = _conv_weight(conv)
    data = [t for t in op.input_tensors if t is not weight]
    if not data or not isinstance(op.body, Reduce):
        return 0
    loads = _loads(op.body.source, data[0])
    if not loads:
        return 0
    e = loads[0].indices[-1]
    zero = {iv.var: Const(0, iv.var.dtype) for iv in list(op.axis) + list(op.reduce_axis)}
    one = dict(zero)
    one[x] = Const(1, x.dtype)
    d = simplify(substitute(e, one) - substitute(e, zero))
    return int(d.value) if isinstance(d, Const) else 0


def _unroll_window(st: Stage, ky, kx):
    """Have LLVM unroll the kernel-window loops (``unroll_count`` pragmas: cheaper to
    compile than unrolling them in the IR): ``kx`` up to 8 taps, ``ky`` too when the
    whole window is at most 16 taps."""
    ey, ex = _cint(ky.dom.extent), _cint(kx.dom.extent)
    if ex is not None and 1 < ex <= 8:
        st.pragma(kx, "unroll_count", ex)
        if ey is not None and 1 < ey and ey * ex <= 16:
            st.pragma(ky, "unroll_count", ey)


def _conv_weight(conv: Tensor) -> Tensor:
    """The weight operand of a convolution stage (the input that is not the data)."""
    ins = conv.op.input_tensors
    return ins[1] if len(ins) > 1 else ins[0]


def _conv_tasks(s: Schedule, st: Stage, cs: Stage, pad, weight, info: CpuInfo, n, oc, yc,
                N, K, ob, OH, yb, pad_vec_dim: int, weight_vec_dim: Optional[int]):
    """Tasks, the padded input and the weights of a convolution whose output stage
    ``st`` has the loops ``n, oc, yc`` outermost and whose register block ``cs`` (the
    stage that reads the weights) is computed inside them.

    When the weights fit in a quarter of L2 (the 64-channel case: 147 KB), or there is
    one output-channel block, the tasks are (batch, row block) and each task pads just
    the rows it reads (``compute_at``: its tile plus the halo), saving a pass over the
    input.  Otherwise the padded input is computed once, at the root,
    in its own parallel pass, and the channel blocks are outer loops.  When a block's
    weights are strided (``weight_vec_dim`` is their output-channel dimension: HWIO,
    or OIHW read across output channels, whose copy is stored with them innermost, see
    :func:`_weight_copy`) each block first copies them into a compact buffer
    (``cache_read``: sequential reads, L2-resident across the block's rows; the
    256-channel case has 2.4 MB of weights, so every row re-reading them from the
    strided tensor would stream 14x that); the tasks are then the channel blocks (each
    over all the images) when there are at least 4 per thread, else the (batch, channel
    block) pairs, or, when there are still fewer than 4 per thread, the row blocks of
    one channel block at a time (all the threads copying the block's weights first).
    Small strided weights are copied once, at the root, into an aligned buffer (see the
    comment there).  When they are contiguous already (OIHW read as broadcasts) the
    tasks are (batch, channel block, row block)."""
    noc = _ceil(K, ob) if K is not None else None
    nyc = _ceil(OH, yb) if OH is not None else None
    T = info.threads
    small = _small_weights(weight, info)
    enough_rows = (N or 1) * (nyc or 1) >= 2 * T
    peel_rows = weight_vec_dim is None and _rows_peeled(N, K, ob, OH, yb, info)
    if not peel_rows and (noc == 1 or (small and enough_rows)):
        # the weights stay in L2 anyway: tasks are (batch, row block), each padding
        # just the rows it reads; the channel blocks are a loop inside the task.  A
        # task takes several (R) row blocks while there are still 8 tasks per thread:
        # it pads R*YB + KH - 1 input rows for R*YB output rows (with one 3x3 NHWC row
        # per task, 3 padded rows per output row; several rows per task were as fast or
        # a little faster) (measurements: benchmarks/DECISIONS.md, "Conv tasks: rows per task")
        rpt = 1
        if nyc is not None:
            want = 8 * T
            for r in range(min(8, nyc), 1, -1):
                if nyc % r == 0 and (nyc // r) * (N or 1) >= want:
                    rpt = r
                    break
        if rpt > 1:
            yt, yr = st.split(yc, factor=rpt)
            st.reorder(n, yt, yr, oc)
            task, _ = _conv_parallel(st, [n, yt], [N, nyc // rpt], T, 4 * T)
        else:
            st.reorder(n, yc, oc)
            task, _ = _conv_parallel(st, [n, yc], [N, nyc], T, 4 * T)
        if pad is not None:
            _schedule_pad_at(s, pad, st, task, info, pad_vec_dim)
        if weight_vec_dim is not None:
            # the weight vectors are read in place from the caller's array, which numpy
            # allocates at 16 bytes past a cache line when it is large: every 16-lane
            # load then straddles two lines.  A copy into tecomp's own (64-byte
            # aligned) buffer first: faster for such weights, about even for aligned
            # ones (measurements: benchmarks/DECISIONS.md, "Conv tasks: aligned weights")
            ww = s.cache_read(weight, "global", [cs])
            if weight_vec_dim != len(ww.shape) - 1:
                # (gathers: copied in parallel, a little faster or within the noise)
                # (measurements: benchmarks/DECISIONS.md, "Conv tasks: parallel weight gathers")
                blocks, _ = _weight_copy(s[ww], weight_vec_dim, ob)
                if T > 1:
                    s[ww].parallel(blocks)
            elif small:
                # a serial vector copy: as fast as a parallel one for small weights and
                # quicker to build (no outlined task)
                # (measurements: benchmarks/DECISIONS.md, "Conv tasks: serial weight copy")
                _vector_split(s[ww], s[ww].op.axis[-1], _cint(ww.shape[-1]), info.lanes)
            else:
                _schedule_elementwise_stage(s, ww, info)
    elif weight_vec_dim is None:
        # a block's weights are contiguous already: one parallel loop over (batch,
        # channel block, row block), channel blocks outer in the fused index so that a
        # chunk of consecutive tasks shares its weights.  When the row blocks leave a
        # tail, they are a serial loop in each (batch, channel block) task instead,
        # where loop partitioning peels the tail off (see _rows_peeled)
        task = st.fuse(n, oc) if peel_rows else st.fuse(n, oc, yc)
        if T > 1:
            st.parallel(task)
        if pad is not None:
            _schedule_elementwise_stage(s, pad, info)
    else:
        # each channel block copies its weights into a compact buffer once: with enough
        # blocks they are the tasks (each does all its rows); with few, the blocks run
        # in turn and their rows are the tasks
        nob = (N or 1) * noc if noc is not None else None
        if noc is not None and noc >= 4 * T:
            # the channel blocks alone are enough tasks: each copies its weights once
            # for all the images (as (image, block) tasks, each image copied them
            # again, which ran slower)
            # (measurements: benchmarks/DECISIONS.md, "Conv tasks: channel blocks")
            st.reorder(oc, n, yc)
            task = oc
            w_at = oc
        elif nob is not None and nob >= 4 * T:
            task = st.fuse(n, oc)
            w_at = task
        else:
            st.reorder(oc, n, yc)
            task = st.fuse(n, yc)
            w_at = oc
        if T > 1:
            st.parallel(task)
        if pad is not None:
            _schedule_elementwise_stage(s, pad, info)
        ww = s.cache_read(weight, "local", [cs])
        ws = s[ww]
        ws.compute_at(st, w_at)
        _, loops = _weight_copy(ws, weight_vec_dim, ob)
        if T > 1 and w_at is oc and task is not oc:
            # the blocks run in turn: copy each one's weights with all the threads
            # (faster with large blocks of weights)
            # (measurements: benchmarks/DECISIONS.md, "Conv tasks: block weights, all threads")
            ws.parallel(ws.fuse(*loops[:2]))
    st.pragma(st.leaf_iter_vars[0], "fp_contract")
    return task


def _weight_copy(ws: Stage, vec_dim: int, ob: int):
    """Schedule ``ws``, a copy of a convolution's weights read as vectors of ``ob``
    output channels along dimension ``vec_dim``: that dimension vectorized in blocks of
    ``ob``.  When it is not the last one (OIHW read along O), the copy is stored with it
    innermost (``storage_order``) and made in the source's order: each of the block's
    rows is read sequentially, one gather across them per vector.  Returns the loop over
    the blocks and the other axes, outermost first."""
    axes = list(ws.op.axis)
    rest = axes[:vec_dim] + axes[vec_dim + 1:]
    wo, wv = ws.split(axes[vec_dim], factor=ob)
    if vec_dim != len(axes) - 1:
        ws.storage_order(*(rest + [axes[vec_dim]]))
        ws.reorder(wo, *rest, wv)
    ws.vectorize(wv)
    return wo, rest


def _epilogue(s: Schedule, outs, main: Tensor, info: CpuInfo, fused=None):
    """Inline the injective stages between ``main`` and the outputs and schedule the
    outputs that are not ``main`` (nor ``fused``, scheduled with it) as elementwise
    loops."""
    below = set(id(op) for op in _walk([main]))
    _inline_injective(s, [op for op in _walk(outs) if id(op) not in below])
    for t in outs:
        if t.op is not main.op and _is_injective(t.op) and (fused is None
                                                              or t.op is not fused.op):
            _schedule_elementwise_stage(s, t, info)


def _fusable_epilogue(outs, main: Tensor) -> Optional[Tensor]:
    """The one output when it is an elementwise function of ``main`` (e.g.
    ``relu(bias_add(conv, b))``): every stage from it down to ``main`` is injective,
    has ``main``'s shape and reads the stages of the chain (and ``main``) at exactly its
    own indices.  (Every other stage under the output is a producer of ``main``, so
    nothing else reads it.)  Else None."""
    if len(outs) != 1 or outs[0].op is main.op:
        return None
    out = outs[0]
    shape = [_cint(e) for e in main.shape]
    if None in shape:
        return None
    below = set(id(o) for o in _walk([main]))
    chain = [op for op in _walk([out]) if id(op) not in below]
    ids = set(id(op) for op in chain) | {id(main.op)}
    for op in chain:
        if not _is_injective(op) or [_cint(e) for e in op.output(0).shape] != shape:
            return None
        axes = [iv.var for iv in op.axis]
        for t in op.input_tensors:
            if id(t.op) in ids:
                for ld in _loads(op.body, t):
                    if len(ld.indices) != len(axes) or any(
                            i is not v for i, v in zip(ld.indices, axes)):
                        return None
    return out


def _conv_block_nhwc(K, OH, OW, info: CpuInfo):
    """(OB, YB, XB) for NHWC: ``OB`` output channels (vectors) x ``YB*XB`` pixels."""
    L = info.lanes
    if K is None or K >= 2 * L:
        ob = 2 * L
    elif K > L:
        ob = K if K <= 2 * L else L
    else:
        ob = K
    nvo = -(-ob // L)
    # accumulators + the weight vectors + one broadcast register
    budget = info.vregs - nvo - 2
    pix = max(1, budget // nvo)
    yb = 1
    if OW is not None and OW < pix and OH is not None:
        yb = max(1, min(OH, pix // OW))
    xb = min(OW, pix // yb) if OW is not None else pix
    if OW is not None and OW % xb:
        # prefer a divisor of the width close to the budget (no tail kernel)
        ds = [d for d in _divisors(OW) if d <= pix // yb]
        if ds and max(ds) >= 0.75 * xb:
            xb = max(ds)
    # the smallest block the blocking leaves: the right edge's, in the bottom row
    corner = (OW % xb) * (OH % yb or yb) if OH is not None and OW is not None else 0
    if 0 < corner < 8 / nvo:
        # a row that the block leaves a sliver of (15 wide in 14-pixel blocks: a 1-pixel
        # tail block whose two accumulators wait on the FMA latency) is worth a
        # different block: the cheapest under _nhwc_block_cost, if clearly cheaper.  Only
        # blocks at least as wide as tall: taller ones, cheaper in the model, ran slower
        # (measurements: benchmarks/DECISIONS.md, "Conv NHWC: blocks as wide as tall")
        cur = _nhwc_block_cost(OH, OW, yb, xb, nvo, info.threads)
        cands = [(_nhwc_block_cost(OH, OW, y, x, nvo, info.threads), -y * x, y, x)
                 for y in range(1, min(OH, pix) + 1)
                 for x in range(y, min(OW, pix // y) + 1)]
        cost, _, y, x = min(cands)
        if cost < 0.95 * cur:
            yb, xb = y, x
    return ob, yb, xb


def _nhwc_block_cost(OH: int, OW: int, yb: int, xb: int, nvo: int, threads: int) -> float:
    """Relative time of an ``OH x OW`` output in ``yb x xb``-pixel register blocks (and
    the smaller blocks at the bottom and right edges): a block of ``p`` pixels costs ``p``
    FMA steps, but at least ``8 / nvo`` (two FMA ports x 4 cycles of latency need 8
    independent accumulators), plus 2 for the block's weight loads and loop; times the
    imbalance of the row blocks over the threads (they are the tasks when there are few
    channel blocks, see :func:`_conv_tasks`).  The model's choice ran fastest on two
    threads, about even with the best on one.
    (measurements: benchmarks/DECISIONS.md, "Conv NHWC: the block cost model")"""
    floor = -(-8 // nvo)
    cost = 0.0
    for ny, y in ((OH // yb, yb), (1 if OH % yb else 0, OH % yb)):
        for nx, x in ((OW // xb, xb), (1 if OW % xb else 0, OW % xb)):
            cost += ny * nx * (max(y * x, floor) + 2)
    rows = -(-OH // yb)
    return cost * (-(-rows // threads) * threads / rows)


def schedule_conv2d_nhwc(outs, target: str = "llvm") -> Schedule:
    """``tecomp.nn.conv2d_nhwc`` (HWIO weights, plus any elementwise epilogue).

    Like a GEMM whose rows are output pixels: ``YB x XB`` pixels x ``OB`` channels (two
    vectors) in registers; per input channel (the innermost loop) each pixel broadcasts
    one input value and the weights are ``OB/L`` vector loads.  Tasks and padding: see
    :func:`_conv_tasks`."""
    return _template_or_rules(_conv2d_nhwc_into, outs, target)


def _conv2d_nhwc_into(s: Schedule, outs, info: CpuInfo):
    conv, pad = _conv_parts(outs, "conv2d_nhwc")
    pad = _own_pad(s, pad)
    N, OH, OW, K = (_cint(e) for e in conv.shape)
    ob, yb, xb = _conv_block_nhwc(K, OH, OW, info)
    fused = _fusable_epilogue(outs, conv)
    st, (n, oc, yc, xc), cs, (cn, cy, cx, co), tiles = _conv_register_block(
        s, conv, (1, yb, xb, ob), order=(0, 3, 1, 2), out=fused)
    ky, kx, c = cs.op.reduce_axis
    cs.reorder(*tiles, cn, ky, kx, c, cy, cx, co)
    cs.unroll(cy)
    cs.unroll(cx)
    cs.vectorize(co)
    _conv_tasks(s, st, cs, pad, _conv_weight(conv), info, n, oc, yc, N, K, ob, OH, yb,
                pad_vec_dim=3, weight_vec_dim=3)
    _epilogue(s, outs, conv, info, fused)


def _conv_wgrad_nchw_into(s: Schedule, outs, info: CpuInfo):
    """A convolution's weight gradient ``W.grad[o, c, ky, kx] = sum over n, y, x of
    dY[n, o, y, x] * X[n, c, y*s + ky*d, x*s + kx*d]`` (``conv2d_nchw_wgrad``), NCHW: the
    reduction runs along the rows of both operands, so ``x`` is split by the lanes and
    ``rfactor``-ed (``W.grad.rf[o, c, ky, kx, lane]``).  Per kernel row ``ky``, an
    ``OB x CB x KW`` block of lane vectors stays in registers over the whole reduction:
    each step loads ``OB`` adjoint vectors and ``CB x KW`` input vectors (the ``KW`` taps
    of a row are shifted loads) for ``OB*CB*KW`` FMAs, then the lanes are summed.

    When the rows are not a multiple of 16 (or the stride is above 1), ``tecomp.nn``
    gives this stage only large gradients (256 channels and more; the others go through
    NHWC, see ``nn.ops._conv_weight_grad``), written over flat rows
    (``nn.ops._flat_rows``: a reduction over ``(n, p)``, both operands copied to one row
    pitch first, here in parallel passes): whole 16-lane vectors, faster than the row
    form's 8-lane vectors.
    (measurements: benchmarks/DECISIONS.md, "NCHW weight gradient: whole vectors")"""
    gw = outs[0]
    op = gw.op
    O, C, KH, KW = (_cint(e) for e in gw.shape)
    x = op.reduce_axis[-1]   # (n, y, x), or (n, p) over flat rows (nn.ops._flat_rows)
    OW = _cint(x.dom.extent)
    L = info.lanes
    if OW is not None and OW % L and OW % (L // 2) == 0:
        # (measurements: benchmarks/DECISIONS.md, "NCHW weight gradient: whole vectors")
        L //= 2   # whole vectors (a masked tail vector ran slower)
    for t in op.input_tensors:
        if isinstance(t.op, ComputeOp) and _has_tag(t.op, "conv2d_wgrad_rows"):
            _schedule_flat_rows(s, t, info)
    st = s[gw]
    _, xl = st.split(x, factor=L)
    rf = s.rfactor(gw, xl, factor_axis=4)
    st = s[gw]
    o, c, ky, kx = st.op.axis
    kw = KW if KW is not None and KW <= 5 else 1
    budget = max(1, (info.vregs - 4) // kw)   # accumulators per kernel row
    ob = _largest_divisor_at_most(O, 4) if O is not None else 4
    cb = _largest_divisor_at_most(C, max(1, budget // ob)) if C is not None else 1
    oo, oi = st.split(o, factor=ob)
    co, ci = st.split(c, factor=cb)
    kxo, kxi = st.split(kx, factor=kw)
    st.reorder(oo, co, ky, kxo, oi, ci, kxi)
    tile = st.fuse(oo, co)
    if info.threads > 1:
        st.parallel(tile)
    st.unroll(oi)
    st.unroll(ci)
    st.unroll(kxi)
    st.unroll(st.op.reduce_axis[0])
    rs = s[rf]
    rs.compute_at(st, kxo)
    fo, fc, fky, fkx, fl = rs.op.axis
    reds = rs.op.reduce_axis
    rs.reorder(fky, *reds, fo, fc, fkx, fl)
    rs.unroll(fo)
    rs.unroll(fc)
    rs.unroll(fkx)
    rs.vectorize(fl)
    rs.pragma(reds[-1], "fp_contract")


def _schedule_flat_rows(s: Schedule, t: Tensor, info: CpuInfo):
    """A copy into flat rows of pitch ``E`` (``attrs["pitch"]``, see
    ``nn.ops._flat_rows``): the flat axis split into rows of ``E`` (the row and column then
    index the source directly), the columns in vectors, the leading axes in parallel."""
    st = s[t]
    E = int(t.op.attrs["pitch"])
    axes = list(st.op.axis)
    _, col = st.split(axes[-1], factor=E)
    _vector_split(st, col, E, info.lanes)
    lead = axes[:-1]
    par = lead[0] if len(lead) == 1 else st.fuse(*lead)
    if info.threads > 1:
        st.parallel(par)


def _conv_wgrad_nhwc_into(s: Schedule, outs, info: CpuInfo):
    """A convolution's weight gradient in NHWC (HWIO weights, ``conv2d_nhwc_wgrad``):
    ``W.grad[ky, kx, c, o] = sum over n, y, x of X[n, y*s + ky*d, x*s + kx*d, c] *
    dY[n, y, x, o]`` is a GEMM with rows ``(ky, kx, c)``, columns ``o`` and the pixels as
    its reduction.  The output rows ``y`` are split between the threads (``rfactor``:
    ``W.grad.rf[t, ky, kx, c, o]``, one partial gradient per thread, then summed); in
    each, per image row, every ``CB x OB`` block (input channels x output-channel
    vectors) is accumulated in registers along the row, each step broadcasting ``CB``
    inputs and loading ``OB/L`` adjoint vectors, so a row's inputs and adjoint stay in
    L1 while all the blocks use them (one thread: the same nest, no ``rfactor``).
    Faster than the same nest with the blocks as the parallel loop inside each row (a
    parallel region per row).
    (measurements: benchmarks/DECISIONS.md, "NHWC weight gradient: rows per thread")

    A gradient larger than L2 over operands that fit in it (256 channels and more at
    14x14 and below) is defined over panels of its operands and scheduled by
    :func:`_conv_wgrad_panels_into` instead: per image row, its blocks would be loaded
    and stored from L3 every few pixels."""
    gw = outs[0]
    if "nr" in gw.op.attrs:
        return _conv_wgrad_panels_into(s, gw, info)
    KH, KW, C, O = (_cint(e) for e in gw.shape)
    L = info.lanes
    nr = 2 * L if O is not None and O >= 2 * L else L
    nvec = max(1, nr // L)
    cb_max = max(1, min((info.vregs - nvec - 2) // nvec, 12))
    cb = _largest_divisor_at_most(C, cb_max) if C is not None else 4
    st = s[gw]
    rn, ry, rx = st.op.reduce_axis
    OH = _cint(ry.dom.extent)
    parts = max(1, min(info.threads, OH if OH is not None else info.threads))
    outer = []
    if parts > 1:
        yo, _ = st.split(ry, nparts=parts)
        rf = s.rfactor(gw, yo, factor_axis=0)
        # the sum of the partial gradients: a serial vector loop (a 64x64 3x3 gradient
        # is 147 KB per part)
        _vector_split(st, st.op.axis[-1], O, L)
        st = s[rf]
        t, ky, kx, c, o = st.op.axis
        rn, ry, rx = st.op.reduce_axis
        st.parallel(t)
        outer = [t]
    else:
        ky, kx, c, o = st.op.axis
    co, ci = st.split(c, factor=cb)
    oo, oi = st.split(o, factor=nr)
    st.reorder(*outer, rn, ry, ky, kx, co, oo, rx, ci, oi)
    st.unroll(ci)
    st.vectorize(oi)
    st.pragma(rx, "fp_contract")


def _conv_wgrad_panels_into(s: Schedule, gw: Tensor, info: CpuInfo):
    """An NHWC weight gradient over panels (``tecomp.nn.ops._wgrad_panels``: larger than
    L2, its operands in L2).  Each ``CB x NR`` block (input channels x output-channel
    vectors) is a task of the parallel loop and is accumulated over all the pixels in
    registers (``cache_write``), reading ``NR`` contiguous adjoint values and
    broadcasting ``CB`` contiguous inputs per pixel.  The output-channel panel is the
    outer part of the task index, so consecutive tasks share it (in L2).  A last panel
    narrower than ``NR`` is computed whole over its zeros; only its copy out is masked.

    Faster than the blocks accumulated in the gradient itself from the tensors in place
    (which replaced the rows nest above for these shapes, being faster than it).
    (measurements: benchmarks/DECISIONS.md, "NHWC weight gradient: panels")"""
    nr, cb = int(gw.op.attrs["nr"]), int(gw.op.attrs["cb"])
    O = _cint(gw.shape[3])
    L = info.lanes * 32 // _dt.bits(gw.dtype)   # elements per vector register
    p = GemmParams(cb, nr, 1, cb, nr, L)
    cons = s.consumers(s[gw])
    if len(cons) == 1 and _has_tag(cons[0].op, "layout_transform") and \
            len(cons[0].op.axis) == 4 and not cons[0].relations:
        # the NCHW gradient (OIHW), this HWIO one transposed: each block is stored
        # straight from the registers to its place there (a vector of output channels
        # to as many rows), with no HWIO gradient in memory: faster than a transposing
        # pass (measurements: benchmarks/DECISIONS.md, "NHWC weight gradient: OIHW store")
        CC = gw
        s[gw].set_scope("local")
        st = cons[0]
        o, c, ky, kx = st.op.axis
    else:
        CC = s.cache_write(gw, "local")
        st = s[gw]
        ky, kx, c, o = st.op.axis
    co, ci = st.split(c, factor=cb)
    oo, oi = st.split(o, factor=nr)
    # consecutive tasks write neighbouring memory: in HWIO the next channel block, in
    # OIHW the next tap of the same channels (with the taps outer, each line of the
    # OIHW gradient was written in 9 passes over the whole panel, slower)
    # (measurements: benchmarks/DECISIONS.md, "NHWC weight gradient: tile order")
    tiles = (oo, co, ky, kx) if CC is gw else (oo, ky, kx, co)
    st.reorder(*tiles, ci, oi)
    tile = st.fuse(*tiles)
    if info.threads > 1:
        st.parallel(tile)
    st.unroll(ci)
    copy_vectors = _vector_columns(st, oi, p)
    cs = s[CC]
    cs.compute_at(st, tile)
    cky, ckx, cc, cod = cs.op.axis
    rn, ry, rx = cs.op.reduce_axis
    cco, cci = cs.split(cc, factor=cb)
    coo, coi = cs.split(cod, factor=nr)
    cs.reorder(cky, ckx, cco, coo, rn, ry, rx, cci, coi)
    if O % nr:
        # the last panel's block over its zeros (see _schedule_gemm_write_cache)
        cs.align_bounds(cs.op.axis[3], nr)
        for ax in (tile, copy_vectors):
            if ax is not None:
                st.pragma(ax, "no_partition")
    cs.unroll(cci)
    _vector_columns(cs, coi, p)
    cs.pragma(rx, "fp_contract")
    for t in gw.op.input_tensors:
        if isinstance(t.op, ComputeOp) and _has_tag(t.op, "conv2d_wgrad_panels"):
            ps = s[t]
            b, n = ps.op.axis[:2]
            task = ps.fuse(b, n)
            if info.threads > 1:
                ps.parallel(task)
            _vector_split(ps, ps.op.axis[-1], _cint(t.shape[-1]), L)


def schedule_conv2d_into(s: Schedule, conv: Tensor, target: str = "llvm") -> None:
    """Schedule the ``conv2d_nchw``/``conv2d_nhwc`` stage ``conv`` (and its padding), or
    a convolution's weight gradient (``conv2d_*_wgrad``, from ``tc.gradient``), of an
    existing schedule ``s``, with ``conv`` as its own output (no epilogue): what
    :func:`tecomp.autodiff.schedule_backward` uses for the convolutions among gradients."""
    into = None
    for tag in conv.op.tag.split(","):
        into = into or _CONV_INTO.get(tag)
    if into is None:
        raise ScheduleError(f"schedule_conv2d_into: {conv.name} is not a conv2d_nchw or "
                            "conv2d_nhwc stage, nor the weight gradient of one")
    into(s, [conv], cpu_info(target))


_CONV_INTO = {"conv2d_nchw": _conv2d_nchw_into, "conv2d_nhwc": _conv2d_nhwc_into,
              "conv2d_nchw_wgrad": _conv_wgrad_nchw_into,
              "conv2d_nhwc_wgrad": _conv_wgrad_nhwc_into}
CONV_TAGS = frozenset(_CONV_INTO)   # the stages schedule_conv2d_into takes


# ---------------------------------------------------------------------------------
# softmax


def softmax_fast(x: Tensor, name: str = "softmax"):
    """Softmax over the last axis with :func:`tecomp.fast_exp` and one reciprocal per
    row: stages ``.max``, ``.exp`` (``fast_exp(x - max)``), ``.sum``, ``.rcp``
    (``1 / sum``) and the output ``exp * rcp``.  Its error is bounded in
    ``docs/numerics.md``; ``tecomp.nn.softmax`` is the same with ``exp`` (on float32
    the same vector code as ``fast_exp``).  Schedule it with :func:`schedule_softmax`."""
    k = _te.reduce_axis(x.shape[-1], name="k")
    m = _te.compute(x.shape[:-1], lambda *i: _shift_max(x[i + (k,)], axis=k),
                    name=f"{name}.max")
    e = _te.compute(x.shape, lambda *i: _te.fast_exp(x[i] - m[i[:-1]]), name=f"{name}.exp")
    k2 = _te.reduce_axis(x.shape[-1], name="k")
    sm = _te.compute(x.shape[:-1], lambda *i: _te.sum(e[i + (k2,)], axis=k2), name=f"{name}.sum")
    r = _te.compute(x.shape[:-1], lambda *i: _te.const(1.0, x.dtype) / sm[i], name=f"{name}.rcp")
    return _te.compute(x.shape, lambda *i: e[i] * r[i[:-1]], name=name, tag="softmax")


def _row_stage_at(s: Schedule, t: Tensor, st: Stage, axis, info: CpuInfo):
    """Compute the full-row stage ``t`` at ``st``'s row loop ``axis``, one vector per
    step; return its loop over the vectors (None when the row is one vector)."""
    ts = s[t]
    ts.compute_at(st, axis)
    return _vector_split(ts, ts.op.axis[-1], _cint(t.shape[-1]), info.lanes)


def schedule_softmax(outs, target: str = "llvm") -> Schedule:
    """``tecomp.nn.softmax`` / ``log_softmax`` and :func:`softmax_fast`: one task per
    block of rows, every stage of a row computed at the row (the row stays in L1), each
    reduction over the row vectorized (``rfactor`` into one vector accumulator), and
    the input's next row prefetched during the exp pass (:func:`_prefetch_next_row`)."""
    outs = _outs(outs)
    info = cpu_info(target)
    s = create_schedule([t.op for t in outs])
    out = outs[0]
    st = s[out]
    rows = list(st.op.axis[:-1])
    row_exts = [_cint(e) for e in out.shape[:-1]]
    J = _cint(out.shape[-1])
    if rows:
        R = st.fuse(*rows) if len(rows) > 1 else rows[0]
        nrows = math.prod(row_exts) if all(e is not None for e in row_exts) else None
    else:
        R, nrows = None, 1
    jo = _vector_split(st, st.op.axis[-1], J, info.lanes)
    if R is not None and info.threads > 1 and (nrows is None or nrows > 1):
        st.parallel(R)
    st.pragma(st.leaf_iter_vars[0], "fp_contract")
    attach = R if R is not None else (jo if jo is not None else None)
    if attach is None:
        return s
    if R is None:
        # 1-d softmax: no row loop to attach to; stages stay at the root
        for op in _walk(outs):
            if op is out.op:
                continue
            t = op.output(0)
            if op.reduce_axis or not op.axis:
                continue
            _schedule_elementwise_stage(s, t, info)
        return s
    ndim = len(out.shape)
    ops_ = _walk([out])
    vec_loops = {}   # full-row stage computed at R -> its loop over the row's vectors
    for op in ops_:
        if op is out.op:
            continue
        t = op.output(0)
        if op.reduce_axis and len(op.axis) == ndim - 1:
            row_reduce_at(s, t, st, R, info.lanes)
        elif len(op.axis) == ndim - 1:
            s[t].compute_at(st, R)
        elif len(op.axis) == ndim:
            vec_loops[op] = _row_stage_at(s, t, st, R, info)
    _prefetch_next_row(s, out, ops_, vec_loops, st, R, J, info)
    return s


def _prefetch_next_row(s: Schedule, out: Tensor, ops_, vec_loops, st: Stage, R, J, info):
    """Prefetch the next row of each input of a row-wise kernel (softmax), spread over
    the row: in the vector loop of a full-row stage computed at the row that reads the
    input (softmax's exp pass, which has the most arithmetic per element), each step
    prefetches the same columns of the next row (``prefetch(x, j, 1, along=R)``).  A
    row of up to 4 KiB starts a new page, where the hardware prefetcher stops.  Spread
    over the exp pass, it measured best, ahead of the whole next row prefetched at the
    start of each row (the prefetches queue up) and of no prefetch.  Without such a loop
    (rows of one vector), the whole next row at the start of the row, for rows of at
    most L1 / 4 (more would evict the current row).
    (measurements: benchmarks/DECISIONS.md, "Softmax: next row prefetched")"""
    ndim = len(out.shape)
    inside = set(id(op) for op in ops_)
    ins = []
    for op in ops_:
        for t in op.input_tensors:
            if id(t.op) not in inside and len(t.shape) == ndim and t not in ins:
                ins.append(t)
    for t in ins:
        reader = next((o for o in reversed(ops_) if o in vec_loops
                       and vec_loops[o] is not None and t in o.input_tensors), None)
        if reader is not None:
            s[reader.output(0)].prefetch(t, vec_loops[reader], 1, along=R)
        elif J is not None and J * 4 <= info.l1_bytes // 4:
            st.prefetch(t, R, 1)


# ---------------------------------------------------------------------------------
# pooling


def schedule_pool(outs, target: str = "llvm") -> Schedule:
    """``max_pool2d`` / ``avg_pool2d`` (NCHW): the padding is inlined (a guarded load),
    tasks are (batch x channel x output row), the output row is vectorized and the
    window unrolled around it."""
    outs = _outs(outs)
    info = cpu_info(target)
    s = create_schedule([t.op for t in outs])
    pools = _find(outs, lambda op: op.reduce_axis and len(op.axis) == 4)
    if not pools:
        return _auto_rest(s, outs, info)
    pool = pools[-1]
    for op in _walk(outs):
        if _is_injective(op) and op is not outs[0].op and not s[op].is_output:
            s[op].compute_inline()
    out = outs[0]
    st = s[out]
    L = info.lanes
    n, c, y, x = st.op.axis
    OW = _cint(out.shape[3])
    rows = st.fuse(n, c, y)
    if OW is not None and OW <= L:
        xo, xi = None, x
    else:
        xo, xi = st.split(x, factor=L)
    if pool is out.op:
        ky, kx = st.op.reduce_axis
        st.reorder(*([rows] + ([xo] if xo is not None else []) + [ky, kx, xi]))
        st.unroll(ky)
        st.unroll(kx)
    st.vectorize(xi)
    if info.threads > 1:
        st.parallel(rows)
    if pool is not out.op:
        ps = s[pool.output(0)]
        ps.compute_at(st, xo if xo is not None else rows)
        pn, pc, py, px = ps.op.axis
        ky, kx = ps.op.reduce_axis
        pxo, pxi = ps.split(px, factor=L)  # the region is L wide, narrower at the edge
        ps.reorder(pn, pc, py, pxo, ky, kx, pxi)
        ps.unroll(ky)
        ps.unroll(kx)
        ps.vectorize(pxi)
    return s


# ---------------------------------------------------------------------------------
# attention


def _attention_parts(out: Tensor) -> dict:
    """The stages of ``tecomp.nn.scaled_dot_product_attention`` under its output ``out``
    (found by their tags and the way they read each other), or ``_NoTemplate``."""
    if not isinstance(out.op, ComputeOp) or not _has_tag(out.op, "sdpa"):
        raise _NoTemplate(f"{out.name} is not a scaled_dot_product_attention output")
    def tagged(ts, tag):
        return next((t for t in ts if isinstance(t.op, ComputeOp) and _has_tag(t.op, tag)),
                    None)

    ins = out.op.input_tensors
    pv = tagged(ins, "sdpa_pv")
    rc = next((t for t in ins if t is not pv), None)
    if pv is None or rc is None or not isinstance(rc.op, ComputeOp):
        raise _NoTemplate(f"{out.name}: not the stages scaled_dot_product_attention makes")
    ex = pv.op.input_tensors[0]
    sm = rc.op.input_tensors[0]
    sc = tagged(ex.op.input_tensors, "sdpa_scores")
    if sc is None:
        raise _NoTemplate(f"{out.name}: no sdpa_scores stage under {ex.name}")
    mx = next(t for t in ex.op.input_tensors if t.op.name.endswith(".max"))
    q, k = sc.op.input_tensors[:2]
    v = next(t for t in pv.op.input_tensors if t is not ex)
    rest = [t for t in ex.op.input_tensors if t is not sc and t is not mx]
    return dict(q=q, k=k, v=v, scores=sc, max=mx, exp=ex, sum=sm, rcp=rc, pv=pv,
                mask=rest[0] if rest else None)


def attention_params(out: Tensor, info: CpuInfo, knobs=None) -> dict:
    """The blocking of :func:`schedule_attention` for the target ``info``: ``rows``, the
    query rows of one task as a number of vectors (the scratch holds ``rows * lanes``
    score rows); ``keys``, the keys of a register block of the scores (``rows x keys``
    vector accumulators, one broadcast of ``k`` per key and step of the dot product);
    ``values``, the same for the ``exp @ v`` stage (columns of ``v`` per block);
    ``chunk``, the keys that stage walks for every block of columns before the next
    chunk (its slices of ``exp`` and ``v`` stay in L1).  ``knobs`` (the
    auto-scheduler's) may choose others."""
    from ..autoschedule.rules import Knobs

    knobs = knobs or Knobs()
    L = _attention_lanes(out, info)
    Lq = _cint(out.shape[2])
    Dv = _cint(out.shape[3])
    # two vectors of rows: with a register of broadcast and the row vectors, the
    # accumulators take the rest of the registers (6 keys x 2 rows of 8 lanes with
    # AVX2's 16 registers, 12 x 2 of 16 with AVX-512's 32); fewer when the query is short
    rows = 2 if Lq is None else max(1, min(2, -(-Lq // L)))
    rows = knobs.choose("sdpa.rows", [1, 2, 3], rows)
    keys = max(1, min(12, (info.vregs - rows - 2) // rows))
    keys = knobs.choose("sdpa.keys", sorted({keys, 4, 6, 8, 12}), keys)
    values = knobs.choose("sdpa.values", sorted({keys, 4, 6, 8, 12}), keys)
    itemsize = _dt.bits(out.dtype) // 8
    # half of L1 for a chunk of exp (rows x chunk) and of v (chunk x Dv)
    per_key = itemsize * (rows * L + (Dv if Dv is not None else 64))
    chunk = max(16, (info.l1_bytes // 2) // per_key // 16 * 16)
    chunk = knobs.choose("sdpa.chunk", sorted({chunk, 32, 64, 128, 256}), chunk)
    return dict(rows=rows, keys=keys, values=values, chunk=chunk, lanes=L)


def _attention_lanes(out: Tensor, info: CpuInfo) -> int:
    """The lanes of one vector register of ``out``'s dtype (8 float64 with AVX-512)."""
    return max(1, info.lanes * 32 // _dt.bits(out.dtype))


def schedule_attention(outs, target: str = "llvm") -> Schedule:
    """``tecomp.nn.scaled_dot_product_attention``, fused in the manner of FlashAttention:
    one task per (batch, head, block of query rows), parallel, and every stage of the op
    computed for that block inside the task (``compute_at``): the block's scores, their
    maximum, exp and sum over all keys, and ``exp @ v``.  Only a ``rows x Lk`` scratch
    of scores and one of exps exist per task (``rows`` = :func:`attention_params`'
    ``rows * lanes``, 16 with AVX2), never the ``Lq x Lk`` matrix.

    The vectors run along the query rows, which the task's buffers store innermost
    (``storage_order``): the scores are ``k[j, :] . q[i, :]`` for a block of keys (a
    broadcast of ``k`` per key and step) x the block's rows (q copied transposed per
    task), the row maximum and sum over the keys are vector operations with no
    horizontal step, and ``exp @ v`` is a broadcast of ``v[j, e]`` times a vector of
    exps, in register blocks of ``rows`` vectors x ``keys`` (or ``values``) columns.  A
    block at the end of the query is computed whole (``align_bounds``) over a copy of q
    (and of a mask that varies along the rows) padded past the edge, and only its rows
    inside are written.  The vector width, registers and L1 come from the target.

    A symbolic query length gives tasks of (batch, head) with the blocks a loop inside;
    a symbolic number of keys, stages over the block's rows one by one (``exp @ v``
    vectorized), and with both symbolic the scores' scratch is not bounded to the block
    (lowering's bounds of the clipped block are not simplified): give one a constant."""
    return _template_or_rules(lambda s, o, info: _attention_into(s, o, info), outs, target)


def _attention_into(s: Schedule, outs, info: CpuInfo, knobs=None):
    if len(outs) != 1:
        raise _NoTemplate("one attention output")
    out = outs[0]
    parts = _attention_parts(out)
    p = attention_params(out, info, knobs)
    L, rows = p["lanes"], p["rows"]
    T = rows * L
    st = s[out]
    b, h, i, e = st.op.axis
    io, ii = st.split(i, factor=T)
    if _cint(out.shape[2]) is not None:
        task = par = st.fuse(b, h, io)
    else:
        # a symbolic query length: tasks of (batch, head), the blocks of rows a loop
        # inside (the bounds of a block of a fused index over a symbolic number of
        # blocks are not simplified to the block: the scratch would be the whole query)
        par, task = st.fuse(b, h), io
    if info.threads > 1:
        st.parallel(par)
    st.pragma(par, "fp_contract")
    _vector_split(st, e, _cint(out.shape[3]), L)
    q, mask = parts["q"], parts["mask"]
    sc, mx, ex, sm, rc, pv = (parts[n] for n in ("scores", "max", "exp", "sum", "rcp", "pv"))
    if _cint(parts["k"].shape[2]) is None:
        # a symbolic number of keys: lowering cannot prove that the reads of k stay
        # inside k past the query's end, so the last block is clipped, and its vectors
        # along the rows would make the scratch's bounds unknown (the whole query):
        # the stages run over the task's rows one by one, ``exp @ v`` vectorized
        for t in (sc, mx, ex, sm, rc, pv):
            s[t].compute_at(st, task)
        ps = s[pv]
        ps.reorder(ps.op.axis[2], ps.op.reduce_axis[0], ps.op.axis[3])
        _vector_split(ps, ps.op.axis[3], _cint(pv.shape[3]), L)
        return
    # q's rows of the task, transposed ([d][i]: a vector of rows per step of the dot
    # product), zero past the query's end, where the last block is computed whole
    # (align_bounds: constant loops, the row vectors unrolled)
    qc = s.cache_read(q, "global", [sc], pad=0.0)
    copies = [(qc, 2)]
    if mask is not None and mask.ndim >= 2 and _cint(mask.shape[-2]) != 1:
        # a mask that varies along the rows: the task's rows, transposed the same way
        mc = s.cache_read(mask, "global", [mx, ex], pad=1 if mask.dtype == "bool" else 0.0)
        copies.append((mc, mask.ndim - 2))
    for t, row_dim in copies:
        cs = s[t]
        cs.compute_at(st, task)
        ax = list(cs.op.axis)
        cs.storage_order(*(ax[:row_dim] + ax[row_dim + 1:] + [ax[row_dim]]))
        cs.align_bounds(ax[row_dim], T)

    def at_task(t: Tensor, transposed: bool):
        """Compute ``t`` (a row stage) at the task, its rows aligned to the block and
        split into vectors; stored column-major when ``transposed``."""
        ts = s[t]
        ts.compute_at(st, task)
        ax = ts.op.axis
        ts.align_bounds(ax[2], T)
        if transposed:
            ts.storage_order(ax[0], ax[1], ax[3], ax[2])
        ro, rv = ts.split(ax[2], factor=L)
        return ts, ro, rv

    def vector_rows(ts: Stage, ro, rv):
        ts.unroll(ro)
        ts.vectorize(rv)

    # scores^T[j][i] = sum_d k[j, d] * q^T[d][i]: keys x rows in registers
    ts, ro, rv = at_task(sc, True)
    d, = ts.op.reduce_axis
    jo, ji = ts.split(ts.op.axis[3], factor=p["keys"])
    ts.reorder(jo, d, ji, ro, rv)
    ts.unroll(ji)
    vector_rows(ts, ro, rv)
    # the row maximum and sum: one vector accumulator per vector of rows, over the keys
    for t in (mx, sm):
        ts, ro, rv = at_task(t, False)
        ts.reorder(ts.op.reduce_axis[0], ro, rv)
        vector_rows(ts, ro, rv)
    ts, ro, rv = at_task(ex, True)
    ts.reorder(ts.op.axis[3], ro, rv)
    vector_rows(ts, ro, rv)
    ts, ro, rv = at_task(rc, False)
    ts.vectorize(rv)
    # pv^T[e][i] = sum_j v[j, e] * exp^T[j][i]: columns x rows in registers, the keys in
    # chunks whose exps and rows of v stay in L1 across the blocks of columns
    ts, ro, rv = at_task(pv, True)
    j, = ts.op.reduce_axis
    eo, ei = ts.split(ts.op.axis[3], factor=p["values"])
    jo, ji = ts.split(j, factor=p["chunk"])
    ts.reorder(jo, eo, ji, ei, ro, rv)
    ts.unroll(ei)
    vector_rows(ts, ro, rv)


# ---------------------------------------------------------------------------------
# the templates as the auto-scheduler's starting points


def _op_tags(op) -> set:
    return set(t.strip() for t in (op.tag or "").split(",") if t.strip())


#: from this many rows on, a ``dense`` that reads W[O, I] in place (the ``dense_nopack``
#: template: vectors along the reduction) is left to the auto-scheduler's register-blocked
#: rules (W copied in panels along the output, blocks of rows x 32 outputs), which were
#: faster or as fast at every such shape measured; below it the template was faster
#: (measurements: benchmarks/DECISIONS.md, "Dense: the rules for larger batches")
DENSE_NOPACK_MAX_ROWS = 127


def _dense_rows_for_generic_rules(gemm, knobs) -> bool:
    """Whether the auto-scheduler schedules this dense with its generic rules rather than
    the ``dense_nopack`` template (a knob; see :data:`DENSE_NOPACK_MAX_ROWS`)."""
    if "dense" not in _op_tags(gemm) or gemm.attrs.get("nr"):
        return False
    operands = _gemm_operands(gemm)
    if operands[1] is None or operands[1][1]:
        return False  # B read as B[k, j]: the GEMM template, not dense_nopack
    M = _cint(gemm.shape[0])
    generic = M is not None and M > DENSE_NOPACK_MAX_ROWS
    return knobs.choose("dense.generic_rules", [True, False], generic)


def _gemm_template(outs, gemm, knobs, info: CpuInfo) -> Schedule:
    """``schedule_matmul`` / ``schedule_dense`` with the blocking as knobs (their
    defaults: :func:`gemm_params`, the heuristic)."""
    M, N = (_cint(e) for e in gemm.shape)
    K = _cint(gemm.reduce_axis[0].dom.extent)
    packed_nr = int(gemm.attrs.get("nr", 0)) or None
    p = gemm_params(M, N, K, info, nr=packed_nr)
    L = info.lanes
    over = {}
    nr_choices = [p.nr] if packed_nr else sorted({p.nr, L, 2 * L, 3 * L})
    over["nr"] = knobs.choose("gemm.nr", nr_choices, p.nr)
    nv = max(1, -(-over["nr"] // L))
    budget = max(1, (info.vregs - nv - 2) // nv)
    over["mr"] = knobs.choose("gemm.mr", sorted({p.mr} | {m for m in (4, 6, 8, 9, 10, 12, 14)
                                                            if m <= budget}), p.mr)
    if K is not None:
        kcs = {p.kc} | {k for k in (128, 256, 384, 512, 768, 1024, 2048) if k < K} | {K}
        over["kc"] = knobs.choose("gemm.kc", sorted(kcs), p.kc)
    if info.threads > 1:
        over["par"] = knobs.choose("gemm.par", ["blocks", "rows"], p.par)
    ncm = knobs.choose("gemm.nc_panels", [0, 1, 2, 4, 8, 16], 0)
    if ncm:
        over["nc"] = ncm * over["nr"]
    mcm = knobs.choose("gemm.mc_rows", [0, 48, 96, 192, 384], 0)
    if mcm:
        over["mc"] = max(over["mr"], mcm // over["mr"] * over["mr"])
    with gemm_overrides(over):
        if "dense" in _op_tags(gemm):
            return schedule_dense(outs, info.target)
        return schedule_matmul(outs, info.target)


def _auto_template(outs, knobs, info: CpuInfo) -> Optional[Schedule]:
    """The template of a DAG that is one of tecomp.nn's operators (matmul/dense, softmax,
    scaled_dot_product_attention, conv2d NCHW/NHWC with an elementwise epilogue), for the auto-scheduler's rules
    (registered with :func:`tecomp.autoschedule.rules.register_template`); None for any
    other DAG."""
    ops = _walk(outs)
    reductions = [op for op in ops if op.reduce_axis]
    if len(reductions) == 1 and {"matmul", "dense", "matmul_packed"} & _op_tags(reductions[0]):
        if _dense_rows_for_generic_rules(reductions[0], knobs):
            return None
        return _gemm_template(outs, reductions[0], knobs, info)
    if len(outs) == 1 and any("softmax" in _op_tags(op) for op in ops) and \
            outs[0].op.tag == "softmax":
        return schedule_softmax(outs, info.target)
    if len(outs) == 1 and "sdpa" in _op_tags(outs[0].op):
        s = create_schedule([outs[0].op])
        _attention_into(s, outs, info, knobs)
        return _auto_rest(s, outs, info)
    convs = [op for op in reductions if {"conv2d_nchw", "conv2d_nhwc"} & _op_tags(op)]
    if len(convs) == 1 and len(reductions) == 1:
        if "conv2d_nchw" in _op_tags(convs[0]):
            if _conv_for_generic_rules(convs[0], knobs, info):
                return None
            return schedule_conv2d_nchw(outs, info.target)
        return schedule_conv2d_nhwc(outs, info.target)
    return None


def _conv_for_generic_rules(conv, knobs, info: CpuInfo) -> bool:
    """Whether the auto-scheduler schedules this NCHW convolution with its generic rules
    rather than the template (a knob).  By default on a CPU without AVX-512's masks, for
    a window larger than 1x1: there the rules' register blocks (12 accumulators, a row of
    up to four vectors as one block) beat the template's on the 3x3 layers of ResNet
    measured, and lose on a 1x1.
    (measurements: benchmarks/DECISIONS.md, "Conv NCHW: the rules without masks")"""
    weight = _conv_weight(conv.output(0))
    window = 1
    for e in weight.shape[2:]:
        window *= _cint(e) or 2
    return knobs.choose("conv2d_nchw.generic_rules", [True, False],
                        not info.masks and window > 1)


_rules.register_template(_auto_template)


def _attention_part(s: Schedule, out: Tensor, knobs, info: CpuInfo):
    """The attention template for an attention inside a larger DAG: the ids of the
    operations it scheduled (its own stages and the copies it made), or None."""
    try:
        parts = _attention_parts(out)
    except _NoTemplate:
        return None
    if any(s[parts[n]].is_output for n in ("scores", "max", "exp", "sum", "rcp", "pv")):
        return None   # (a training forward keeps them for the backward: in memory, whole)
    before = {id(st.op) for st in s.stages}
    _attention_into(s, [out], info, knobs)
    mine = {id(s[parts[n]].op) for n in ("scores", "max", "exp", "sum", "rcp", "pv")}
    return mine | {id(s[out].op)} | {id(st.op) for st in s.stages if id(st.op) not in before}


_rules.register_part_template("sdpa", _attention_part)
