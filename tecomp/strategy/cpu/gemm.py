"""GEMM (``schedule_matmul``, ``schedule_dense``, the packed layouts).

A register-blocked micro-kernel in the style of GotoBLAS/BLIS (:mod:`.microkernel`): an
``MR x NR`` block of C (``NR`` = two vectors, or where the machine model has a measured
cost of the micro-kernel's loads the width of 1, 2 or 4 vectors with the fewest loads
per FMA: 6 x 64 on Zen 5; ``matmul_packed(nr=...)`` chooses another width) held in
``MR * NR / lanes`` vector accumulators over a ``KC``-long slice of the reduction: the
``k`` loop is innermost-but-two, the ``MR`` rows are unrolled, the ``NR`` columns are one
widened vector (16-lane vectors, unrolled, beyond two), so each ``k`` step is
``NR/lanes`` vector loads of B, ``MR`` broadcasts of A and ``MR*NR/lanes`` FMAs
(``vfmadd231ps``, no spills: check with ``get_source("asm")``).  B is packed into
``NR``-wide panels (the compute stage of :func:`matmul_packed`, or a ``cache_read`` copy
for plain ``matmul``) per block of ``KC x NC``, sized to half of L2.  Loops, outermost
first::

    ic.jc (parallel)          MC rows x NC columns: one task (a packed B block
                              of KC x NC fits in L2)
      pc                      KC slice of the reduction; pack B's block here
        ir                    MR-row panels
          jr                  NR-wide panel of the packed block (from L2)
            k, i (unrolled), j (vector)

At a right edge that the panels do not divide, the last panel's register block is computed
over a zero-padded panel (``align_bounds``: the packed panel of ``matmul_packed`` /
``dense_packed``, or plain ``matmul``'s copy of B made with ``cache_read(..., pad=0.0)``)
and only its copy to C is masked: one micro-kernel in the code.

With several threads each task packs its own B block (``GemmParams.par == "blocks"``, at
least two tasks per thread, claimed dynamically), or, where the column blocks would share
the work out unevenly (few column panels), each thread takes one contiguous share of the
MR-row panels and packs every B block for itself (``"threads"``: one parallel region, no
packed block read by another core); on one thread ``ic`` has one iteration (``"rows"``).

The template's config is :class:`GemmParams` (:func:`gemm_params`: the heuristic, from
the target and the shapes); ``schedule_matmul(outs, target, config)`` applies one, and
:func:`gemm_knobs` exposes it to the auto-scheduler as named knobs.  A ``dense`` that reads
``W[O, I]`` in place runs the ``dense_nopack`` kernel instead (vectors along the
reduction)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional

from ... import te as _te
from ...errors import ScheduleError
from ...ir.expr import ProducerLoad
from ...schedule.schedule import Schedule, Stage, create_schedule
from ...te.tensor import ComputeOp, Tensor
from ...te.tensor_intrin import transpose_intrin
from .._common import _ceil, _cint, _gemm_operands, _has_tag, _outs
from ..rules import Knobs
from .common import _auto_rest, _find, _loads, _op_tags, check_positive_int, config_fields
from ...target import CpuModel, cpu_model
from .elementwise import _gemm_epilogues
from .microkernel import (accumulate_block, accumulate_lanes, copy_out, lane_vectors,
                          vector_columns)
from .skinny import _skinny_template
from ...nn.linalg import _dense_args, _gemm_output, _matmul_args


@dataclass(frozen=True)
class GemmParams:
    mr: int      # rows of the register block (unrolled)
    nr: int      # columns of the register block (one widened vector)
    kc: int      # reduction slice (C is loaded/stored once per slice)
    mc: int      # rows per task block (an A block mc x kc: L2)
    nc: int      # columns per block (a packed B block kc x nc: half of L2)
    lanes: int
    # how the threads share the work: "blocks" (one (MC x NC) block per task, each
    # packing its own B block), "threads" (one contiguous share of the MR-row panels per
    # thread, each packing every B block for itself; gemm_params takes it where it
    # balances the threads better than the blocks), or "rows" (every block is packed by
    # all threads, then its MR-row panels are handed out in small dynamic chunks; what
    # it gives for one thread, where the three are the same)
    par: str = "rows"


def gemm_params(M: Optional[int], N: Optional[int], K: Optional[int],
                info: Optional[CpuModel] = None, nr: Optional[int] = None) -> GemmParams:
    """The blocking of an ``M x N x K`` GEMM on this machine (extents may be None when
    symbolic).  See the module docstring for the loop nest.  ``nr``: the panel width to
    block for (e.g. the ``nr`` of :func:`matmul_packed`); by default chosen here."""
    info = info or cpu_model()
    L = info.lanes
    # NR: two vectors (one when N is small), never much wider than N.  Three vectors
    # (8 x 48: 24 accumulators, the shape of MKL's kernel; matmul_packed(nr=48)) are not
    # the default where the machine model has no measured cost of the micro-kernel's
    # loads: with the column edge computed over the padded panel (no edge kernel) they
    # take about twice as long to build (24 unrolled statements per k step instead of 8
    # widened ones) and were not consistently faster on the Xeon (a few percent either
    # way) (measurements: benchmarks/DECISIONS.md, "GEMM: NR, two vectors").  Where it
    # has one (gemm_load_cost), matrices of at least two of the widest panels take the
    # block with the fewest loads per FMA (_fewest_loads; narrower ones keep the rules
    # below, measured on their shapes)
    if nr is not None:
        nr = int(nr)
    elif N is not None and N <= L:
        nr = N
    elif N is not None and N <= 2 * L:
        nr = L
    elif N is not None and info.gemm_load_cost > 0 and N >= 2 * max(NR_VECTORS) * L:
        nr = _fewest_loads(M, N, info)
    elif (N is not None and info.vregs >= 32
          and (_ceil(N, 2 * L) * 2 * L - _ceil(N, L) * L) * NR_PAD_SHARE > N):
        # two vectors would pad the last panel by over 1/NR_PAD_SHARE of N more than one
        # vector does (77 columns: 96 against 80): the FMAs on the padding cost more than
        # the narrower block's extra loads (measured with AVX-512's 32 registers, where
        # one vector still gets 12 rows; not on AVX2's 16)
        # (measurements: benchmarks/DECISIONS.md, "GEMM: NR, one vector where two pad")
        nr = L
    else:
        nr = 2 * L
    mr = _rows(M, max(1, -(-nr // L)), info)
    # KC: the whole reduction in one slice (C's block then lives in registers from start
    # to end: see _schedule_gemm_write_cache) up to K = 8192, whatever the caches; longer
    # reductions in equal slices of at most that.  With several slices the block is
    # accumulated in C (loaded before each slice, stored after it, C zeroed first), and
    # it lost wherever it was measured, its L1/L2-sized slices included, on machines
    # with small and large L2 alike (measurements: benchmarks/DECISIONS.md, "GEMM: KC,
    # one slice")
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
    blocks = _blocks_params(M, N, mr, nr, kc, L, T, panels, fit, col_blocks, row_panels)
    # ("threads": each thread packs its share's blocks one panel at a time)
    threads = GemmParams(mr, nr, kc, M, nr, L, "threads")
    if blocks.par == "rows" or (N is not None and (
            _makespan(threads, M, N, T) * THREADS_GAIN < _makespan(blocks, M, N, T))):
        # the threads' shares of row panels balance the work better than the blocks
        # (few column panels in uneven blocks), or the blocks could only be shared rows
        # (measurements: benchmarks/DECISIONS.md, "GEMM: one share of rows per thread")
        return threads
    return blocks


#: see gemm_params's NR: one vector where two pad the columns by over 1/16 of N more
NR_PAD_SHARE = 16
#: the register block widths _fewest_loads chooses from, in vectors (ties keep the
#: first): three vectors divide no power-of-two column count (the last panel padded, and
#: column blocks of an odd number of panels: 61x1000x1024 ran 0.64 ms with 9 x 48 against
#: 0.56 with 6 x 64 on Zen 5, and 8 x 48 below 6 x 64 at 2048^3 and 4096x1024x1024), and
#: wider ones leave too few rows (2048^3, one thread: 5 x 80 ran 81% of the FMA peak,
#: 4 x 96 77%, 3 x 128 47%, 6 x 64 86-91%)
#: (measurements: benchmarks/DECISIONS.md, "GEMM: the register block with the fewest
#: loads per FMA")
NR_VECTORS = (2, 1, 4)


def _rows(M: Optional[int], nvec: int, info: CpuModel) -> int:
    """MR for a register block ``nvec`` vectors wide: as many rows as the accumulators
    allow (leaving room for the ``nvec`` vectors of B and a broadcast), at most 12: 12 x 2
    vectors with AVX-512's 32 registers, 9 x 3, 6 x 4; 6 x 2 with AVX2's 16.  Where M is
    not a multiple of it, a somewhat smaller count that divides M (no second, tail
    micro-kernel: less code to compile, and the tail rows run at full speed)."""
    budget = max(1, min((info.vregs - nvec - 2) // nvec, 12))
    mr = budget
    if M is not None and M < mr:
        mr = M
    elif M is not None and M % mr:
        low = -(-budget * 2 // 3) if budget >= 9 else budget - 1
        for cand in range(budget - 1, max(low, 1) - 1, -1):
            if M % cand == 0:
                mr = cand
                break
    return mr


def _fewest_loads(M: Optional[int], N: int, info: CpuModel) -> int:
    """The panel width (NR) of the register block ``MR x NR`` (``NR`` one of
    :data:`NR_VECTORS` vectors, ``MR`` from :func:`_rows`) that costs the least per
    useful FMA: each k step is ``MR * NR/L`` FMAs and ``MR + NR/L`` loads (broadcasts of
    A, vectors of B), each load costing ``info.gemm_load_cost`` FMAs, the FMAs on the
    columns padded past N wasted.  Blocks with fewer accumulators than the FMA latency x
    the FMA ports are left out (they would leave the FMA units waiting); ties keep two
    vectors.  (Zen 5, one thread: 2048^3 6 x 64 ran 1.08-1.15x 8 x 32, 2048x2000x2048
    1.09x, 4096x1024x1024 1.04x, 1024x1024x8192 1.16x; 1024^3 and 1000^3 even,
    512x768x3072 0.98-1.00x.)"""
    L, c = info.lanes, info.gemm_load_cost
    need = info.fma_latency * info.fma_ports
    best = None
    for nv in NR_VECTORS:
        mr = _rows(M, nv, info)
        if nv > _ceil(N, L) or (mr * nv < need and best is not None):
            continue
        cost = (1 + c * (mr + nv) / (mr * nv)) * (_ceil(N, nv * L) * nv * L) / N
        if best is None or cost < best[0] * (1 - 1e-9):
            best = (cost, nv * L)
    return best[1]


#: "threads" is taken over "blocks" where its slowest thread has this much less to do
THREADS_GAIN = 1.03
#: packing an element of B costs about as much as this many micro-kernel rows of it
#: (a load and a store per vector against one FMA per row)
PACK_ROWS = 4


def _makespan(p: GemmParams, M: int, N: int, T: int) -> int:
    """The work of the thread with the most, in micro-kernel rows x padded columns (each
    ``K`` FMAs), packing included (a block packed for ``c`` columns counts as
    ``PACK_ROWS x c``), when ``p``'s tasks are claimed in order by ``T`` threads, each
    taking the next task as it finishes one (the pool's dynamic chunks); ``"threads"``:
    each thread one contiguous share of the MR-row panels, packing all of B itself."""
    width = _ceil(N, p.nr) * p.nr
    if p.par == "threads":
        return (min(M, _ceil(_ceil(M, p.mr), T) * p.mr) + PACK_ROWS) * width
    loads = [0] * T
    for i in range(0, M, p.mc):
        for j in range(0, width, p.nc):
            t = loads.index(min(loads))
            loads[t] += (min(p.mc, M - i) + PACK_ROWS) * min(p.nc, width - j)
    return max(loads)


def _blocks_params(M, N, mr, nr, kc, L, T, panels, fit, col_blocks, row_panels) -> GemmParams:
    """gemm_params's blocking for several threads in ``"blocks"`` mode, or ``"rows"``
    where no block split fits (then "threads" is taken)."""
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
    per = _ceil(panels, col_blocks)
    if N is not None and N % nr == 0:
        # column blocks of equal whole panels: a ragged last block guards every
        # micro-kernel of the fused parallel loop, as a ragged row block does (where
        # N is not a multiple of NR the last panel is computed whole over its padding,
        # the block's edge with it: as fast)
        # (measurements: benchmarks/DECISIONS.md, "GEMM: equal row blocks")
        per = max(q for q in range(1, per + 1) if panels % q == 0)
    nc = nr * per
    col_blocks = _ceil(panels, per)
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
    # else no block split (the "rows" mode, every column block packed by all threads,
    # which then share its row panels: gemm_params takes "threads" instead)
    nc = nr * _ceil(panels, _ceil(panels, fit))
    return GemmParams(mr, nr, kc, M, nc, L, "rows")


_PARAMS = tuple(f.name for f in dataclasses.fields(GemmParams))


def _config_values(config) -> dict:
    """``config`` (None, a :class:`GemmParams` or a dict of some of its fields) as a dict
    of the fields it sets, checked."""
    config = config_fields(config, "GEMM schedule", [k for k in _PARAMS if k != "lanes"],
                           GemmParams)
    for k, v in config.items():
        if k == "par":
            if v not in ("rows", "blocks", "threads"):
                raise ScheduleError(f"GEMM schedule: par must be 'rows', 'blocks' or "
                                    f"'threads', got {v!r:.40}")
        else:
            check_positive_int("GEMM schedule", k, v)
    return config


def _overridden(p: GemmParams, M, N, K, info: CpuModel, packed_nr=None,
                over: Optional[dict] = None) -> GemmParams:
    """``p`` (the heuristic's blocking) with the fields ``over`` sets (a template's
    config), the others adjusted to them."""
    if not over:
        return p
    if "nr" in over and over["nr"] != p.nr and packed_nr is None:
        # the other blocking follows the panel width unless given too
        q = gemm_params(M, N, K, info, nr=over["nr"])
        p = dataclasses.replace(q, nc=q.nr if p.nc == p.nr else q.nc)
    p = dataclasses.replace(p, **{k: v for k, v in over.items() if k != "nr" or packed_nr is None})
    if p.par in ("rows", "threads") and info.threads > 1 and M is not None:
        p = dataclasses.replace(p, mc=M)
    if ("mr" in over or "mc" in over) and M is not None and p.mc < M and (
            p.mc % p.mr or M % p.mc):
        # row blocks are whole MR-row panels that divide M (a ragged row block guards
        # every micro-kernel, and its edge panels do not lower): the nearest such
        # block, or all the rows
        ok = [m for m in range(p.mr, M, p.mr) if M % m == 0]
        p = dataclasses.replace(p, mc=min(ok, key=lambda m: abs(m - p.mc)) if ok else M)
    return p


def _schedule_gemm_stage(s: Schedule, C: Tensor, info: CpuModel, packed: Optional[Tensor] = None,
                         config: Optional[dict] = None):
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
    p = _overridden(p, M, N, K, info, nr if packed is not None else None, config)
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
    vector_columns(st, ji, p.nr, p.lanes)
    st.pragma(ki, "unroll_count", 4)  # see _schedule_gemm_write_cache
    rows_par = info.threads > 1 and p.par == "rows"
    if rows_par:
        st.parallel(ir)
    elif info.threads > 1 and p.par == "threads":
        _thread_shares(st, ic, jc, ir, info.threads)
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
    # (B read as W[j, k] (dense) is read in place: the vector over j is a strided gather)
    _pack_b(s, st, pc, packed, _gemm_operands(op)[1], [st], p.nr, rows_par, info=info,
            kc=p.kc if K is not None and K % p.kc == 0 else None)
    return p


def _pack_b(s: Schedule, st: Stage, at, packed, b_operand, readers, nr: int, parallel: bool,
            pad: bool = False, info: Optional[CpuModel] = None,
            kc: Optional[int] = None) -> None:
    """B's block for the micro-kernels, made at ``st``'s loop ``at``: the panels of
    :func:`matmul_packed` / :func:`dense_packed` computed there (``kc``: the reduction
    slice they cover, when every slice is that long; see :func:`_transposed_panels`),
    or a copy of B (read as ``B[k, j]``, by ``readers``) in panels ``nr`` wide, its
    vector of constant width (the right edge masked; ``pad``: zero past B's edge, the
    last panel computed whole).  ``parallel``: the threads pack the block together.  A B
    read as ``W[j, k]`` is left in place."""
    if packed is not None:
        ps = s[packed]
        ps.compute_at(st, at)
        pjo, pk, pji = ps.op.axis
        if not _transposed_panels(ps, packed, pk, pji, nr, kc, info):
            ps.vectorize(pji)
        if parallel:
            ps.parallel(pjo)
        return
    if b_operand is None or not b_operand[1]:
        return
    bs = s[s.cache_read(b_operand[0], "local", readers, pad=0.0 if pad else None)]
    bs.compute_at(st, at)
    if pad:
        bs.align_bounds(bs.op.axis[1], nr)
    bk = bs.op.axis[0]
    _, bj = bs.split(bs.op.axis[1], factor=nr)
    bs.vectorize(bj)
    if parallel:
        bs.parallel(bk)


def _transposed_panels(ps: Stage, packed: Tensor, pk, pji, nr: int, kc: Optional[int],
                       info: Optional[CpuModel]) -> bool:
    """Schedule the panels ``P[jo, k, ji]`` of :func:`dense_packed`, which read W along
    its rows (``W[jo*NR + ji, k]``; a vector over ``ji`` is a gather, one insert per lane
    or a ``vgather``, which took most of a 61-row dense's time): in ``L x L`` tiles,
    each ``x86.transpose_f32_LxL`` (``L`` row loads, shuffles, ``L`` stores), where
    the tiles divide the panels and the reduction slices (``kc``) and every panel is
    whole (no edge test in the pack); else row by row in W's order, one element at a
    time (the stores ``NR`` apart).  False (nothing done) for panels that read their
    source along ``ji`` (:func:`matmul_packed`'s ``B[k, jo*NR + ji]``).
    (measurements: benchmarks/DECISIONS.md, "Dense: W's panels transposed in registers")"""
    lds = _loads(packed.op.body, packed.op.input_tensors[0])
    if not lds or lds[0].indices[-1] is not pk.var:
        return False
    intrin = None
    if info is not None:
        L = info.lanes
        intrin = transpose_intrin(info.target, L, packed.dtype)
    if intrin is not None and isinstance(packed.op.body, ProducerLoad) and nr % L == 0 and \
            kc is not None and kc % L == 0:
        ko, jo, ki, ji = ps.tile(pk, pji, L, L)
        ps.tensorize(ki, intrin)
    else:
        ps.reorder(pji, pk)
    return True


def _schedule_dense_nopack(s: Schedule, C: Tensor, info: CpuModel):
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
    rf, halves = lane_vectors(s, C, L)
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
    # the tile's accumulators: constant-size register blocks (a tile at the edge of C
    # is guarded, not a block of variable size)
    accumulate_lanes(s, rf, st, tile, bb, ob)
    _dense_aligned_copies(s, op, rf, st, oo if tile is bo else None, M,
                          _cint(op.reduce_axis[0].dom.extent), bb, L, info)
    return None


def _dense_aligned_copies(s: Schedule, op: ComputeOp, rf: Tensor, st: Stage, oo, M, K,
                          bb: int, L: int, info: CpuModel):
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
    if x_op is None or x_op[1] or w_op is None or w_op[1]:
        return   # X[b, k] and W[o, k] only
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


def _thread_shares(st: Stage, ic, jc, ir, threads: int):
    """``"threads"`` mode: the MR-row panels ``ir`` cut into one contiguous share per
    thread, the share loop outermost and parallel (one parallel region per call), every
    column block packed by each thread for itself where its columns begin (``jc``,
    returned).  No packed block is read by another core than the one that wrote it:
    sharing one between the threads ("rows") ran 0.32-0.41 ms on 333x77x1031 on the
    2-core Zen 4 depending on where the host placed the two vCPUs, this 0.30-0.31
    (measurements: benchmarks/DECISIONS.md, "GEMM: one share of rows per thread").
    Where the shares differ (37 panels: 19 and 18), loop partitioning gives the parallel
    body one copy of the nest per share length, each with constant extents."""
    it, ir = st.split(ir, nparts=threads)
    st.reorder(ic, it, jc, ir)
    st.parallel(it)
    return jc


def _schedule_gemm_write_cache(s: Schedule, C: Tensor, info: CpuModel, packed, p: GemmParams):
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
    copy_vectors = copy_out(st, ii, ji, p.nr, p.lanes)
    rows_par = info.threads > 1 and p.par == "rows"
    if rows_par:
        st.parallel(ir)
        pack_at = jc
    elif info.threads > 1 and p.par == "threads":
        pack_at = _thread_shares(st, ic, jc, ir, info.threads)
    elif info.threads > 1:
        pack_at = st.fuse(ic, jc)
        st.parallel(pack_at)
    else:
        pack_at = jc
    cs = s[CC]
    cs.compute_at(st, jr)
    ci, cj = cs.op.axis
    N = _cint(C.op.shape[1])
    b_operand = _gemm_operands(CC.op)[1]   # None for matmul_packed's panels
    kfirst = b_operand is not None and b_operand[1]
    # the right edge: the last panel's block is computed whole over the zero-padded
    # panel (align_bounds; matmul_packed's panels are zero past N, plain matmul's copy
    # of B is padded) and only its copy to C is masked (the loops around it are not
    # partitioned).  One micro-kernel in the code instead of a narrower second one and
    # copies of the parallel nest: faster to run and to build (measurements:
    # benchmarks/DECISIONS.md, "GEMM: the right edge over the padded panel")
    edge = N is not None and N % p.nr != 0 and (packed is not None or kfirst)
    # four k steps per loop iteration: the loop's own instructions (counter, pointer
    # bumps, branch) are paid once per 4 x MR x NR/L FMAs (measurably faster); LLVM
    # unrolls it (cheaper to compile than unrolling it in the IR)
    # (measurements: benchmarks/DECISIONS.md, "GEMM: four k steps per iteration")
    accumulate_block(cs, ci, cj, cs.op.reduce_axis, mr=p.mr, nr=p.nr, lanes=p.lanes,
                     pad_cols=cj if edge else None,
                     pragmas=(("unroll_count", 4), ("fp_contract", None)))
    if edge:
        for ax in (pack_at, jr, copy_vectors):
            if ax is not None:
                st.pragma(ax, "no_partition")
    _pack_b(s, st, pack_at, packed, b_operand, [cs], p.nr, rows_par, pad=edge, info=info,
            kc=_cint(C.op.reduce_axis[0].dom.extent))
    return p


def matmul_packed(A: Tensor, B: Tensor, nr: Optional[int] = None, name: str = "matmul",
                  target="llvm", out_dtype=None):
    """``A[M, K] @ B[K, N]`` with B packed into ``NR``-column panels by a compute stage
    ``<name>.packB[N/NR, K, NR] = B[k, jo*NR + ji]`` (zero beyond N), the array packing of
    the GEMM tutorials: each ``KC x NR`` micro-panel is contiguous.  Same result as
    ``tecomp.nn.matmul`` (``out_dtype`` and the float32 accumulation of float16/bfloat16
    operands too); schedule it with :func:`schedule_matmul`.  A layout for a
    target: ``nr`` by default as :func:`gemm_params` blocks ``N`` for ``target`` (two
    vectors; four on Zen 5 from 128 columns)."""
    a, acc, out = _matmul_args("matmul_packed", name, A, B, out_dtype)
    if nr is not None:
        nr = a.ints("nr", nr, 1, count=1)
    N = _cint(B.shape[1])
    if nr is None:
        nr = gemm_params(None, N, None, cpu_model(target)).nr
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
    return _gemm_output((A.shape[0], B.shape[1]), lambda i, j: _te.sum(
        A[i, k].astype(acc) * pb[j // nr, k, j % nr].astype(acc), axis=k), name,
        "matmul,matmul_packed", acc, out, attrs={"nr": nr})


def dense_packed(X: Tensor, W: Tensor, bias: Optional[Tensor] = None, nr: Optional[int] = None,
                 name: str = "dense", target="llvm", out_dtype=None):
    """``X[B, I] @ W[O, I]^T (+ bias)`` (``tecomp.nn.dense``, ``out_dtype`` and the
    accumulation as there) with W transposed into ``NR``-wide panels by a compute stage
    ``<name>.packW[O/NR, I, NR]`` (``nr``: as :func:`matmul_packed`)."""
    a, acc, out = _dense_args("dense_packed", name, X, W, bias, out_dtype)
    if nr is not None:
        nr = a.ints("nr", nr, 1, count=1)
    O = _cint(W.shape[0])
    if nr is None:
        nr = gemm_params(None, O, None, cpu_model(target)).nr
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
    return _gemm_output((X.shape[0], W.shape[0]), lambda b, o: _te.sum(
        X[b, k].astype(acc) * pw[o // nr, k, o % nr].astype(acc), axis=k), name,
        "dense,matmul_packed", acc, out, bias, attrs={"nr": nr})


def _schedule_gemm_like(outs, target, tags, config) -> Schedule:
    outs = _outs(outs)
    info = cpu_model(target)
    config = _config_values(config)
    s = create_schedule([t.op for t in outs])
    gemms = _find(outs, lambda op: _has_tag(op, *tags) and op.reduce_axis)
    if not gemms:
        # no template for this DAG (e.g. a batched matmul written as a compute): the
        # auto-scheduler's rules
        return _auto_rest(s, outs, info)
    if not config and len(gemms) == 1:
        # a GEMM of at most 16 rows (a GEMV, a decoding step) streams W in place, as
        # tc.auto_schedule schedules it (None: not a skinny GEMM)
        skinny = _skinny_template(outs, Knobs(), info)
        if skinny is not None:
            return skinny
    if not config and len(gemms) == 1 and "dense" in tags:
        if _dense_rows_for_generic_rules(gemms[0], Knobs()):
            # a plain dense with many rows: the rules, as tc.auto_schedule picks for it
            # (see DENSE_NOPACK_MAX_ROWS)
            return _auto_rest(s, outs, info)
    packs = {id(op): op for op in _find(outs, lambda op: _has_tag(op, "gemm_pack"))}
    for g in gemms:
        C = g.output(0)
        packed = None
        for t in g.input_tensors:
            if id(t.op) in packs:
                packed = t
        _schedule_gemm_stage(s, C, info, packed, config)
        if not s[C].is_output:
            s[C].compute_root()
    return _gemm_epilogues(s, outs, info, set(id(g) for g in gemms) | set(packs))


def schedule_matmul(outs, target: str = "llvm", config=None) -> Schedule:
    """The tuned GEMM schedule for ``tecomp.nn.matmul`` (B read in place and copied into
    micro-panels) and :func:`matmul_packed` (B packed by its own stage), plus any
    elementwise epilogue on top.  ``config``: the blocking, a :class:`GemmParams` or a
    dict of some of its fields (``mr``, ``nr``, ``kc``, ``mc``, ``nc``, ``par``); the
    others follow them.  By default :func:`gemm_params`, the heuristic; a float32 matmul
    of at most 16 rows with no ``config`` streams B in place instead (the skinny-GEMM
    schedule of :mod:`.skinny`, as ``tc.auto_schedule`` picks)."""
    return _schedule_gemm_like(outs, target, ("matmul", "matmul_packed"), config)


def schedule_dense(outs, target: str = "llvm", config=None) -> Schedule:
    """The tuned schedule of ``tecomp.nn.dense`` (with or without bias) and of
    :func:`dense_packed`.  Plain ``dense`` reads ``W[O, I]`` in place with the vector
    over the reduction (:func:`_schedule_dense_nopack`, TVM's ``dense_nopack``) up to
    :data:`DENSE_NOPACK_MAX_ROWS` rows (at most 16 float32 rows: the skinny-GEMM schedule
    of :mod:`.skinny`, W streamed once), and gets the auto-scheduler's rules above, as
    ``tc.auto_schedule`` does; :func:`dense_packed` packs W into panels first (transposed
    in registers, :func:`_transposed_panels`) and runs the GEMM micro-kernel, faster
    when the batch is large.  ``config``: as :func:`schedule_matmul` (the blocking of the
    GEMM micro-kernel, which it then applies at any batch; ``dense_nopack`` has none)."""
    return _schedule_gemm_like(outs, target, ("dense", "matmul_packed"), config)


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
    # a symbolic M (a batch that varies: torch.compile's dynamic shapes) takes the rules
    # too: 1.6-1.9x faster than dense_nopack from 61 to 256 rows, 1.5x slower at 8,
    # and built in less than half the time (256 -> 1024, Zen 5, under load:
    # benchmarks/history/2026-11-30.md, "symbolic extents")
    generic = M is None or M > DENSE_NOPACK_MAX_ROWS
    return knobs.choose("dense.generic_rules", [True, False], generic)


def gemm_knobs(gemm, knobs, info: CpuModel) -> dict:
    """The GEMM template's config for the GEMM stage ``gemm``: its knobs (``gemm.nr``,
    ``gemm.mr``, ``gemm.kc``, ``gemm.par``, ``gemm.nc_panels``, ``gemm.mc_rows``) chosen
    through ``knobs`` (:class:`tecomp.strategy.rules.Knobs`), their defaults the
    heuristic's (:func:`gemm_params`), as the ``config`` :func:`schedule_matmul` and
    :func:`schedule_dense` apply."""
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
        over["par"] = knobs.choose("gemm.par", ["blocks", "rows", "threads"], p.par)
    ncm = knobs.choose("gemm.nc_panels", [0, 1, 2, 4, 8, 16], 0)
    if ncm:
        over["nc"] = ncm * over["nr"]
    mcm = knobs.choose("gemm.mc_rows", [0, 48, 96, 192, 384], 0)
    if mcm:
        over["mc"] = max(over["mr"], mcm // over["mr"] * over["mr"])
    return over


def _gemm_template(outs, gemm, knobs, info: CpuModel) -> Schedule:
    """``schedule_matmul`` / ``schedule_dense`` with the config :func:`gemm_knobs` chooses."""
    config = gemm_knobs(gemm, knobs, info)
    if "dense" in _op_tags(gemm):
        return schedule_dense(outs, info.target, config)
    return schedule_matmul(outs, info.target, config)
