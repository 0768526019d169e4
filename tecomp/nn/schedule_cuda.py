"""CUDA schedules for the operators of :mod:`tecomp.nn.ops` (``target="cuda"`` or
``"cuda-emu"``), in the manner of TVM's classic topi CUDA schedules.

Every ``schedule_*(outs, target="cuda")`` takes the output tensor(s) of an operator (or a
list of them) and returns a :class:`~tecomp.schedule.schedule.Schedule`.  The shapes pick
the tiling (:func:`gemm_config`, :func:`conv_config`, :func:`softmax_config`); any shape
is correct: a tile that runs past a tensor's edge keeps its constant size (its shared and
local buffers too, see ``docs/bounds.md``, rule 5), its global loads and stores are
guarded, and the reduction tail is guarded and partitioned off.

GEMM (``schedule_matmul``, ``schedule_dense``)
    A ``BM x BN`` block of C per CUDA block of ``TM x TN`` threads; each thread owns an
    ``RM x RN`` micro-tile (``BM = TM*RM``) held in registers (a ``local`` stage,
    unrolled).  The reduction runs in ``KT``-long steps: per step the block copies an
    ``A`` tile (``BM x KT``) and a ``B`` tile (``KT x BN``) to shared memory, every
    thread taking a share of each copy with consecutive threads on consecutive
    addresses (coalesced), between two barriers; then each of the ``KT`` inner steps
    loads ``RM`` values of A and ``RN`` of B from shared memory into registers and does
    ``RM*RN`` multiply-adds.  With 4096x4096 operands: 128x128 blocks, 16x16 threads,
    8x8 registers per thread (64 accumulators + 16 operands), ``KT = 8``.  An
    elementwise epilogue (``dense``'s bias, an activation) is computed from the
    registers when C is stored.

Convolution (``schedule_conv2d_nchw``, ``schedule_conv2d_nhwc``)
    Direct convolution, tiled like the GEMM: a block computes ``KB`` output channels x a
    ``TH x TW`` patch of one image; each thread ``RK`` channels x ``RY x RX`` pixels in
    registers.  The reduction over input channels runs in ``CT``-channel steps: per
    step the block copies the padded input patch (``CT x (TH*s + halo) x (TW*s +
    halo)``; the padding is computed during the copy, it never exists in global memory)
    and the weights (``KB x CT x KH x KW``) to shared memory; the kernel window loops
    are unrolled.

Softmax (``schedule_softmax``; ``log_softmax`` too)
    One row per block.  When the row fits, it is copied to shared memory once; the
    maximum and the sum are cross-thread reductions (every thread folds its share of the
    row, then a tree in shared memory), ``exp`` is computed once into shared memory, and
    the normalized row is written out: one read and one write of global memory.  Rows
    too long for shared memory (or of symbolic length) read the input three times.

Elementwise / injective (``schedule_injective``, ``schedule_elementwise``)
    Producers inlined; the output's axes fused, split by the block size (256 threads)
    and bound to ``blockIdx.x`` / ``threadIdx.x``.

Not here because the CUDA backend has no support for them (yet): vector loads
(``float4``), virtual threads that interleave a thread's micro-tile (TVM's ``vthread``;
without them a thread's micro-tile is contiguous, and the reads of the B tile in shared
memory have 2- to 4-way bank conflicts), double buffering (the shared tiles of the next
step are loaded after the barrier, not during the current step).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence, Tuple

from ..errors import ScheduleError
from ..ir.expr import Const, ProducerLoad, Reduce
from ..schedule.schedule import Schedule, Stage, create_schedule
from ..te.tensor import ComputeOp, Tensor, thread_axis
from ._schedule_common import _cint, _outs, _walk

__all__ = [
    "schedule_matmul", "schedule_dense", "schedule_conv2d_nchw", "schedule_conv2d_nhwc",
    "schedule_softmax", "schedule_injective", "schedule_elementwise",
    "GemmConfig", "gemm_config", "ConvConfig", "conv_config", "SoftmaxConfig", "softmax_config",
]

TARGETS = ("cuda", "cuda-emu")
ELEMENTWISE_THREADS = 256
# a GEMM with fewer blocks than this uses smaller tiles (about two waves on 60-130 SMs)
MIN_BLOCKS = 128


# ---------------------------------------------------------------------------------
# small helpers


def _check_target(target) -> None:
    from ..errors import TargetError
    from ..target import as_target

    try:
        kind = as_target(target).kind
    except TargetError as exc:
        raise ScheduleError(f"the tecomp.nn CUDA schedules: {exc}") from None
    if kind not in TARGETS:
        raise ScheduleError(f"the tecomp.nn CUDA schedules are for target 'cuda' or 'cuda-emu', "
                            f"got {str(target)!r} (the CPU schedules are in "
                            f"tecomp.nn.schedule_cpu)")


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _pow2_at_least(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def _has_tag(op, *tags) -> bool:
    mine = {t.strip() for t in (op.tag or "").split(",")}
    return any(t in mine for t in tags)


def _is_injective(op) -> bool:
    return isinstance(op, ComputeOp) and not op.reduce_axis


def _inline_injective(s: Schedule, ops, keep=()) -> None:
    """Inline every injective stage of ``ops`` that is not an output nor in ``keep``."""
    for op in ops:
        if any(op is k for k in keep) or not _is_injective(op):
            continue
        st = s[op]
        if not st.is_output and st.attach_type == "root":
            st.compute_inline()


def _bind(st: Stage, axis, tag: str) -> None:
    st.bind(axis, thread_axis(tag))


def _cooperative_copy(st: Stage, threads: Sequence[Tuple[str, int]], tile_elems: int) -> None:
    """Spread the copy into a shared tile of ``tile_elems`` elements over the block: the
    tile's axes fused, split by the thread extents (innermost first: ``threadIdx.x`` on
    consecutive elements, so consecutive threads touch consecutive addresses) and bound;
    the remaining outer loop (each thread's share) is unrolled when short, so that the
    share's global loads are in flight together."""
    axis = st.fuse(*st.op.axis) if len(st.op.axis) > 1 else st.op.axis[0]
    bound, nthreads = [], 1
    for tag, ext in threads:  # innermost first
        if ext == 1:
            continue
        axis, inner = st.split(axis, factor=ext)
        bound.append((inner, tag))
        nthreads *= ext
    for inner, tag in bound:
        _bind(st, inner, tag)
    if _ceil(tile_elems, nthreads) <= 8:
        st.unroll(axis)


# ---------------------------------------------------------------------------------
# GEMM


@dataclass(frozen=True)
class GemmConfig:
    """The tiling of a GEMM: a block of ``threads_m x threads_n`` threads computes a
    ``block_m x block_n`` tile of C, each thread ``regs_m x regs_n`` of it in registers;
    the reduction advances ``k_tile`` at a time through shared memory."""

    threads_m: int
    threads_n: int
    regs_m: int
    regs_n: int
    k_tile: int

    @property
    def block_m(self) -> int:
        return self.threads_m * self.regs_m

    @property
    def block_n(self) -> int:
        return self.threads_n * self.regs_n

    @property
    def threads(self) -> int:
        return self.threads_m * self.threads_n


def gemm_config(M: Optional[int], N: Optional[int], K: Optional[int]) -> GemmConfig:
    """The tiling of an ``M x N x K`` GEMM (extents may be None when symbolic).

    16 x 16 threads (fewer along an extent below 16); the largest micro-tile of 8x8, 4x4,
    2x2 or 1x1 registers that still gives :data:`MIN_BLOCKS` blocks (a micro-tile side is
    also cut while its block would be more than twice the extent); ``k_tile`` 8 with 8x8
    micro-tiles (a 128 x 8 A tile: 4 loads per thread), else 16; never more than K."""
    def threads(E):
        return 16 if E is None else max(1, min(16, _pow2_at_least(E)))

    tm, tn = threads(M), threads(N)

    def regs(E, t, r):
        while r > 1 and E is not None and t * r >= 2 * E:
            r //= 2
        return r

    for r in (8, 4, 2, 1):
        rm, rn = regs(M, tm, r), regs(N, tn, r)
        if M is None or N is None or r == 1:
            break
        if _ceil(M, tm * rm) * _ceil(N, tn * rn) >= MIN_BLOCKS:
            break
    kt = 8 if max(rm, rn) >= 8 else 16
    if K is not None:
        kt = max(1, min(kt, K))
    return GemmConfig(tm, tn, rm, rn, kt)


def _gemm_operands(op: ComputeOp):
    """For ``C[i, j] = sum_k X[., .] * Y[., .]``: ``((a, a_kfirst), (b, b_kfirst))`` with
    ``a`` the operand indexed by ``(i, k)`` (or ``(k, i)``) and ``b`` by ``(k, j)`` (or
    ``(j, k)``)."""
    body = op.body
    if not isinstance(body, Reduce) or len(op.axis) != 2 or len(op.reduce_axis) != 1:
        raise ScheduleError(f"{op.name} is not a 2-d GEMM (C[i, j] = sum_k A[., .] * B[., .])")
    i, j = (iv.var for iv in op.axis)
    k = op.reduce_axis[0].var
    a = b = None
    from ..ir.functor import collect

    for ld in collect(body.source, lambda n: isinstance(n, ProducerLoad)):
        idx = ld.indices
        if len(idx) != 2:
            continue
        if (idx[0] is i and idx[1] is k) or (idx[0] is k and idx[1] is i):
            a = (ld.producer, idx[0] is k)
        elif (idx[0] is k and idx[1] is j) or (idx[0] is j and idx[1] is k):
            b = (ld.producer, idx[0] is k)
    if a is None or b is None:
        raise ScheduleError(f"{op.name}: could not find the two operands of the GEMM (each "
                            "indexed by one output axis and the reduction axis)")
    return a, b


def _epilogue_of(outs: List[Tensor], main: Tensor) -> Optional[Tensor]:
    """The output to tile when ``main`` (a GEMM or convolution) is followed by an
    elementwise chain of the same shape that reads it at the same index (bias,
    activation); None when ``main`` is itself the output."""
    if any(t.op is main.op for t in outs):
        return None
    if len(outs) != 1:
        raise ScheduleError(f"{main.name} with several outputs "
                            f"({', '.join(t.name for t in outs)}): schedule one output at a time")
    out = outs[0]
    if not _is_injective(out.op) or len(out.shape) != len(main.shape) or any(
            _cint(a) != _cint(b) or _cint(a) is None and a is not b
            for a, b in zip(out.shape, main.shape)):
        raise ScheduleError(
            f"the output {out.name} is not an elementwise function of {main.name} of the same "
            f"shape; schedule {main.name} on its own and {out.name} with schedule_injective")
    return out


def _check_same_index_reads(s: Schedule, out: Tensor, main: Tensor) -> None:
    """Every read of ``main`` by the (inlined) epilogue is at the output's own index (else
    each thread would need more of ``main`` than its own micro-tile in registers)."""
    from ..ir.functor import Mutator, collect, substitute

    class _Expand(Mutator):  # the epilogue's body with the inlined stages substituted
        def visit_ProducerLoad(self, e):
            idx = tuple(self.visit(i) for i in e.indices)
            t = e.producer
            if isinstance(t.op, ComputeOp) and t in s and s[t].attach_type == "inline":
                op = s[t].op
                return self.visit(substitute(op.body, {iv.var: x for iv, x in zip(op.axis, idx)}))
            return ProducerLoad(t, idx, e.dtype)

    body = _Expand().visit(s[out].op.body)
    axes = [iv.var for iv in s[out].op.axis]
    for ld in collect(body, lambda n: isinstance(n, ProducerLoad)):
        if ld.producer is main and not all(a is b for a, b in zip(ld.indices, axes)):
            raise ScheduleError(f"the epilogue {out.name} reads {main.name} at another index "
                                "than its own; schedule them separately")


def _schedule_gemm(s: Schedule, gemm: Tensor, out: Tensor, cfg: GemmConfig) -> None:
    """Tile ``out`` (the GEMM itself, or an elementwise epilogue reading it) over blocks
    and threads and compute the GEMM in registers inside each thread."""
    (a, a_kfirst), (b, b_kfirst) = _gemm_operands(gemm.op)
    if out.op is gemm.op:
        acc = s.cache_write(gemm, "local")
    else:
        acc = gemm
        s[acc].set_scope("local")
    AS = s.cache_read(a, "shared", [acc])
    BS = s.cache_read(b, "shared", [acc])
    AL = s.cache_read(AS, "local", [acc])
    BL = s.cache_read(BS, "local", [acc])

    TM, TN, RM, RN, KT = cfg.threads_m, cfg.threads_n, cfg.regs_m, cfg.regs_n, cfg.k_tile
    st = s[out]
    i, j = st.op.axis
    by, yi = st.split(i, factor=cfg.block_m)
    bx, xi = st.split(j, factor=cfg.block_n)
    ty, yi = st.split(yi, factor=RM)
    tx, xi = st.split(xi, factor=RN)
    st.reorder(by, bx, ty, tx, yi, xi)
    _bind(st, by, "blockIdx.y")
    _bind(st, bx, "blockIdx.x")
    _bind(st, ty, "threadIdx.y")
    _bind(st, tx, "threadIdx.x")
    for ax, r in ((yi, RM), (xi, RN)):
        if r > 1:
            st.unroll(ax)

    # the micro-tile: k outermost, the RM x RN multiply-adds unrolled innermost
    sa = s[acc]
    sa.compute_at(st, tx)
    ai, aj = sa.op.axis
    ko, ki = sa.split(sa.op.reduce_axis[0], factor=KT)
    sa.reorder(ko, ki, ai, aj)
    for ax, r in ((ai, RM), (aj, RN)):
        if r > 1:
            sa.unroll(ax)

    # shared tiles per k step, registers per k
    threads = [("threadIdx.x", TN), ("threadIdx.y", TM)]
    for S, L, kfirst, rows in ((AS, AL, a_kfirst, cfg.block_m), (BS, BL, b_kfirst, cfg.block_n)):
        s[S].compute_at(sa, ko)
        if not kfirst and KT > 1:
            # [rows][KT] tile read down a column: pad the rows so that the threads of a
            # warp (rows RM or RN apart) fall in different banks
            s[S].storage_align(s[S].op.axis[0], KT, 1)
        _cooperative_copy(s[S], threads, rows * KT)
        # this thread's RM (RN) values of the current k: registers
        s[L].compute_at(sa, ki)
        s[L].unroll(s[L].op.axis[1 if kfirst else 0])


def _schedule_gemm_like(outs, target, tags, config) -> Schedule:
    _check_target(target)
    outs = _outs(outs)
    s = create_schedule([t.op for t in outs])
    gemms = [op for op in _walk(outs) if _has_tag(op, *tags) and op.reduce_axis]
    if len(gemms) != 1:
        raise ScheduleError(f"expected one {'/'.join(tags)} stage under the outputs "
                            f"{', '.join(t.name for t in outs)}, found {len(gemms)}")
    gemm = gemms[0].output(0)
    out = _epilogue_of(outs, gemm) or gemm
    _inline_injective(s, _walk(outs), keep=[gemm.op])
    if out is not gemm:
        _check_same_index_reads(s, out, gemm)
    M, N = (_cint(e) for e in gemm.shape)
    K = _cint(gemm.op.reduce_axis[0].dom.extent)
    cfg = config if config is not None else gemm_config(M, N, K)
    if not isinstance(cfg, GemmConfig):
        raise ScheduleError(f"config must be a GemmConfig, got {cfg!r}")
    _schedule_gemm(s, gemm, out, cfg)
    return s


def schedule_matmul(outs, target: str = "cuda", config: Optional[GemmConfig] = None) -> Schedule:
    """The CUDA schedule of ``tecomp.nn.matmul`` (``A[M, K] @ B[K, N]``), with any
    elementwise epilogue on top (see the module docstring for the tiling).  ``config``
    overrides the tiling :func:`gemm_config` picks."""
    return _schedule_gemm_like(outs, target, ("matmul",), config)


def schedule_dense(outs, target: str = "cuda", config: Optional[GemmConfig] = None) -> Schedule:
    """The CUDA schedule of ``tecomp.nn.dense`` (``X[B, I] W[O, I]^T``, with or without a
    bias, plus any elementwise epilogue): the GEMM schedule with ``W`` tiles ``[BN][KT]``
    (rows padded against bank conflicts); the bias is added when C is stored.
    ``config`` overrides the tiling :func:`gemm_config` picks."""
    return _schedule_gemm_like(outs, target, ("dense",), config)


# ---------------------------------------------------------------------------------
# softmax


@dataclass(frozen=True)
class SoftmaxConfig:
    """How a softmax row is computed: ``threads`` per block (one row per block);
    ``row_in_shared``: the input row is copied to shared memory once;
    ``exp_in_shared``: ``exp(x - max)`` is computed once into shared memory (else it is
    recomputed by the sum and the normalization)."""

    threads: int
    row_in_shared: bool
    exp_in_shared: bool


def softmax_config(N: Optional[int], dtype_bytes: int = 4) -> SoftmaxConfig:
    """Threads: a quarter of the row rounded up to a power of two, between 32 (a warp)
    and 256.  Shared memory: the row and exp(row) when both fit in 32 KiB, the row alone
    when it fits in 40 KiB, else nothing (a row of symbolic length: nothing)."""
    if N is None:
        return SoftmaxConfig(256, False, False)
    t = max(32, min(256, _pow2_at_least(_ceil(N, 4))))
    row = N * dtype_bytes
    if 2 * row <= 32 * 1024:
        return SoftmaxConfig(t, True, True)
    if row <= 40 * 1024:
        return SoftmaxConfig(t, True, False)
    return SoftmaxConfig(t, False, False)


def _softmax_parts(outs):
    """(out, x, max, exp, sum) of a softmax / log_softmax built by ``tecomp.nn.ops``."""
    if len(outs) != 1:
        raise ScheduleError("schedule_softmax takes one output (the softmax)")
    out = outs[0]
    if not (_has_tag(out.op, "softmax", "log_softmax")):
        raise ScheduleError(f"{out.name} is not a softmax or log_softmax from tecomp.nn.ops "
                            f"(tag {out.op.tag!r})")
    by_name = {op.name: op.output(0) for op in _walk(outs)}
    try:
        mx, ex, sm = (by_name[f"{out.name}.{w}"] for w in ("max", "exp", "sum"))
    except KeyError as e:
        raise ScheduleError(f"{out.name}: missing the stage {e.args[0]} (stages .max, .exp, "
                            ".sum as tecomp.nn.ops.softmax makes them)") from None
    x = mx.op.input_tensors[0]
    return out, x, mx, ex, sm


def _cross_thread_rows(s: Schedule, red: Tensor, at: Stage, axis, T: int) -> None:
    """Reduce one row per block: the reduction over the last axis split by ``T`` and its
    inner part bound to ``threadIdx.x`` (each thread folds every T-th element, then a
    tree over the threads in shared memory); the result is one value in shared memory."""
    st = s[red]
    st.set_scope("shared")
    st.compute_at(at, axis)
    _, ki = st.split(st.op.reduce_axis[0], factor=T)
    _bind(st, ki, "threadIdx.x")


def _row_loop(st: Stage, T: int, N: Optional[int]) -> None:
    """The row's last axis split by ``T`` with the inner part bound to threadIdx.x."""
    o, tx = st.split(st.op.axis[-1], factor=T)
    _bind(st, tx, "threadIdx.x")
    if N is not None and _ceil(N, T) <= 8:
        st.unroll(o)


def schedule_softmax(outs, target: str = "cuda",
                     config: Optional[SoftmaxConfig] = None) -> Schedule:
    """The CUDA schedule of ``tecomp.nn.softmax`` / ``log_softmax`` over the last axis:
    one row per block (the leading axes fused and bound to ``blockIdx.x``), the max and
    the sum as cross-thread reductions, see the module docstring and
    :func:`softmax_config` (``config`` overrides it)."""
    _check_target(target)
    outs = _outs(outs)
    out, x, mx, ex, sm = _softmax_parts(outs)
    N = _cint(out.shape[-1])
    cfg = config if config is not None else softmax_config(N, 8 if out.dtype == "float64" else 4)
    if not isinstance(cfg, SoftmaxConfig):
        raise ScheduleError(f"config must be a SoftmaxConfig, got {cfg!r}")
    if N is None and (cfg.row_in_shared or cfg.exp_in_shared):
        raise ScheduleError(f"{out.name}: a row of symbolic length cannot be held in shared "
                            "memory (use row_in_shared=False, exp_in_shared=False)")
    T = cfg.threads
    s = create_schedule([out.op])
    so = s[out]
    lead = list(so.op.axis[:-1])
    row = so.fuse(*lead) if len(lead) > 1 else lead[0] if lead else None
    if row is None:
        raise ScheduleError(f"{out.name} is 1-d; schedule_softmax needs rows (a leading axis)")
    _bind(so, row, "blockIdx.x")
    if cfg.row_in_shared:
        readers = [t for t in (mx, ex, out) if any(r is x for r in t.op.input_tensors)]
        xs = s.cache_read(x, "shared", readers)
        s[xs].compute_at(so, row)
        _row_loop(s[xs], T, N)
    if cfg.exp_in_shared:
        s[ex].set_scope("shared")
        s[ex].compute_at(so, row)
        _row_loop(s[ex], T, N)
    else:
        s[ex].compute_inline()
    rcp = next((op for op in _walk(outs) if op.name == f"{out.name}.rcp"), None)
    if rcp is not None:
        # softmax's 1 / sum: inlined (each thread multiplies by 1 / sum[row], the same
        # rounding as the CPU's per-row reciprocal)
        s[rcp.output(0)].compute_inline()
    _cross_thread_rows(s, mx, so, row, T)
    _cross_thread_rows(s, sm, so, row, T)
    _row_loop(so, T, N)
    return s


# ---------------------------------------------------------------------------------
# elementwise / injective


def _schedule_injective_stage(st: Stage, total: Optional[int],
                              threads: int = ELEMENTWISE_THREADS) -> None:
    """All axes fused, split by the block size, bound (consecutive threads on
    consecutive elements of the row-major output: coalesced)."""
    fused = st.fuse(*st.op.axis) if len(st.op.axis) > 1 else st.op.axis[0]
    if total is not None:
        threads = max(1, min(threads, _pow2_at_least(total)))
    bx, tx = st.split(fused, factor=threads)
    _bind(st, bx, "blockIdx.x")
    _bind(st, tx, "threadIdx.x")


def schedule_injective(outs, target: str = "cuda") -> Schedule:
    """Elementwise / injective operators (relu, bias_add, pad, flatten, ...): every
    injective producer inlined, each output one kernel of 256-thread blocks over its
    fused axes (the last block guarded)."""
    _check_target(target)
    outs = _outs(outs)
    for t in outs:
        if not _is_injective(t.op):
            raise ScheduleError(f"schedule_injective: {t.name} is a reduction or an input; "
                                "use the operator's own schedule")
    s = create_schedule([t.op for t in outs])
    _inline_injective(s, _walk(outs))
    for t in outs:
        total = math.prod(_cint(e) for e in t.shape) if all(
            _cint(e) is not None for e in t.shape) else None
        _schedule_injective_stage(s[t], total)
    return s


schedule_elementwise = schedule_injective


# ---------------------------------------------------------------------------------
# convolution


@dataclass(frozen=True)
class ConvConfig:
    """The tiling of a direct convolution: a block of ``threads_k x threads_y x
    threads_x`` threads computes ``block_k`` output channels x a ``block_y x block_x``
    patch of one image, each thread ``regs_k x regs_y x regs_x`` outputs in registers;
    the reduction advances ``c_tile`` input channels at a time through shared memory."""

    threads_k: int
    threads_y: int
    threads_x: int
    regs_k: int
    regs_y: int
    regs_x: int
    c_tile: int

    @property
    def block_k(self) -> int:
        return self.threads_k * self.regs_k

    @property
    def block_y(self) -> int:
        return self.threads_y * self.regs_y

    @property
    def block_x(self) -> int:
        return self.threads_x * self.regs_x

    @property
    def threads(self) -> int:
        return self.threads_k * self.threads_y * self.threads_x


def _spatial_tile(E: Optional[int]) -> Tuple[int, int]:
    """(threads, registers) along one output spatial axis: little padding waste first,
    then two pixels per thread, then a tile close to 8."""
    if E is None:
        return 4, 2
    best = None
    for t in range(1, 9):
        for r in (1, 2):
            tile = t * r
            if tile > 2 * E and tile > 1:
                continue
            waste = _ceil(E, tile) * tile / E - 1
            cost = waste + 0.05 * abs(math.log2(tile / 8)) + (0.05 if r == 1 and E > 1 else 0)
            if best is None or cost < best[0] - 1e-9:
                best = (cost, t, r)
    return best[1], best[2]


def conv_config(K: Optional[int], OH: Optional[int], OW: Optional[int], C: Optional[int],
                window: Tuple[int, int], in_patch: Callable, dtype_bytes: int = 4) -> ConvConfig:
    """The tiling of a convolution with ``K`` output channels, an ``OH x OW`` output,
    ``C`` input channels and a ``KH x KW`` ``window``; ``in_patch(th, tw)`` gives the
    input rows/columns an output patch of ``th x tw`` reads.

    Spatial: per axis, :func:`_spatial_tile`.  Channels: 4 per thread (fewer when K is
    small), as many threads as keep the block at 256 threads or below.  ``c_tile``: the
    largest of 16, 8, 4, 2, 1 (at most C) whose shared tiles fit in 24 KiB."""
    ty, ry = _spatial_tile(OH)
    tx, rx = _spatial_tile(OW)
    rk = 4 if K is None else max(1, min(4, K))
    cap = 1
    while cap * 2 * ty * tx <= 256:
        cap *= 2
    tk = cap if K is None else max(1, min(cap, _pow2_at_least(_ceil(K, rk))))
    kh, kw = window
    ph, pw = in_patch(ty * ry, tx * rx)
    ct = 1
    for c in (16, 8, 4, 2):
        if C is not None and c > C:
            continue
        if dtype_bytes * c * (ph * pw + tk * rk * kh * kw) <= 24 * 1024:
            ct = c
            break
    return ConvConfig(tk, ty, tx, rk, ry, rx, ct)


# layout -> (output axis of (n, k, y, x), thread tag of (k, y, x), block tag of (n*k, y, x))
_CONV_LAYOUTS = {
    "conv2d_nchw": dict(out=(0, 1, 2, 3), threads=("threadIdx.z", "threadIdx.y", "threadIdx.x"),
                        weight_c=1, weight_k=0),
    "conv2d_nhwc": dict(out=(0, 3, 1, 2), threads=("threadIdx.x", "threadIdx.z", "threadIdx.y"),
                        weight_c=2, weight_k=3),
}


def _conv_parts(outs, tag):
    """(conv, pad or None, data, weight) of the ``tag`` convolution under ``outs``."""
    convs = [op for op in _walk(outs) if _has_tag(op, tag) and op.reduce_axis]
    if len(convs) != 1:
        raise ScheduleError(f"expected one {tag} stage under the outputs "
                            f"{', '.join(t.name for t in outs)}, found {len(convs)}")
    conv = convs[0]
    if len(conv.input_tensors) != 2:
        raise ScheduleError(f"{conv.name} reads {len(conv.input_tensors)} tensors; expected the "
                            "(padded) data and the weight")
    src, weight = conv.input_tensors
    pad = None
    if isinstance(src.op, ComputeOp):
        if not _has_tag(src.op, "pad"):
            raise ScheduleError(f"{conv.name} reads {src.name}, which is neither an input nor "
                                "its padding stage")
        pad, data = src, src.op.input_tensors[0]
    else:
        data = src
    return conv.output(0), pad, data, weight


def _conv_geometry(conv: Tensor, layout: str):
    """(stride, dilation) per spatial axis, read from the conv's input index ``y*s + ky*d``
    (they size the shared tiles in :func:`conv_config`; the bounds come from lowering)."""
    from ..ir.functor import collect
    from ..ir.expr import Add, Mul, Var

    lay = _CONV_LAYOUTS[layout]
    src = conv.op.input_tensors[0]
    loads = [n for n in collect(conv.op.body.source, lambda n: isinstance(n, ProducerLoad))
             if n.producer is src]
    # the data index of the spatial axes: NCHW (n, c, y, x), NHWC (n, y, x, c)
    pos = (2, 3) if layout == "conv2d_nchw" else (1, 2)
    out_axes = [conv.op.axis[lay["out"][2]].var, conv.op.axis[lay["out"][3]].var]
    geo = []
    for p, ov in zip(pos, out_axes):
        e = loads[0].indices[p]
        coef = {}

        def walk(x, scale=1):
            if isinstance(x, Add):
                walk(x.a, scale)
                walk(x.b, scale)
            elif isinstance(x, Mul) and isinstance(x.b, Const):
                walk(x.a, scale * int(x.b.value))
            elif isinstance(x, Mul) and isinstance(x.a, Const):
                walk(x.b, scale * int(x.a.value))
            elif isinstance(x, Var):
                coef[x] = coef.get(x, 0) + scale

        walk(e)
        s = coef.get(ov, 1)
        d = max([v for k, v in coef.items() if k is not ov] or [1])
        geo.append((s, d))
    return geo


def _schedule_conv(outs, target: str, layout: str, config: Optional[ConvConfig]) -> Schedule:
    _check_target(target)
    outs = _outs(outs)
    conv, pad, data, weight = _conv_parts(outs, layout)
    lay = _CONV_LAYOUTS[layout]
    s = create_schedule([t.op for t in outs])
    out = _epilogue_of(outs, conv) or conv
    keep = [conv.op] + ([pad.op] if pad is not None else [])
    _inline_injective(s, _walk(outs), keep=keep)
    if out is not conv:
        _check_same_index_reads(s, out, conv)

    oshape = [_cint(e) for e in conv.shape]
    K, OH, OW = (oshape[lay["out"][r]] for r in (1, 2, 3))
    wshape = [_cint(e) for e in weight.shape]
    C = wshape[lay["weight_c"]]
    sp_axes = (2, 3) if layout == "conv2d_nchw" else (0, 1)
    KH, KW = wshape[sp_axes[0]], wshape[sp_axes[1]]
    (sh, dh), (sw, dw) = _conv_geometry(conv, layout)
    cfg = config if config is not None else conv_config(
        K, OH, OW, C, (KH, KW),
        lambda th, tw: ((th - 1) * sh + (KH - 1) * dh + 1, (tw - 1) * sw + (KW - 1) * dw + 1),
        8 if conv.dtype == "float64" else 4)
    if not isinstance(cfg, ConvConfig):
        raise ScheduleError(f"config must be a ConvConfig, got {cfg!r}")

    # the output: blocks over (image x channel block, row block, column block), threads
    # over (channels, rows, columns), a micro-tile per thread
    if out is conv:
        acc = s.cache_write(conv, "local")
    else:
        acc = conv
        s[acc].set_scope("local")
    st = s[out]
    ax = st.op.axis
    n, k, y, x = (ax[lay["out"][r]] for r in range(4))
    bk, ki = st.split(k, factor=cfg.block_k)
    tk, rk = st.split(ki, factor=cfg.regs_k)
    by, yi = st.split(y, factor=cfg.block_y)
    ty, ry = st.split(yi, factor=cfg.regs_y)
    bx, xi = st.split(x, factor=cfg.block_x)
    tx, rx = st.split(xi, factor=cfg.regs_x)
    if layout == "conv2d_nchw":
        st.reorder(n, bk, by, bx, tk, ty, tx, rk, ry, rx)
    else:  # channels innermost: consecutive threads on consecutive addresses
        st.reorder(n, bk, by, bx, ty, tx, tk, ry, rx, rk)
    nk = st.fuse(n, bk)
    _bind(st, nk, "blockIdx.z")
    _bind(st, by, "blockIdx.y")
    _bind(st, bx, "blockIdx.x")
    tags = dict(zip(("k", "y", "x"), lay["threads"]))
    _bind(st, tk, tags["k"])
    _bind(st, ty, tags["y"])
    _bind(st, tx, tags["x"])
    last_thread = tk if layout == "conv2d_nhwc" else tx
    for a, r in ((rk, cfg.regs_k), (ry, cfg.regs_y), (rx, cfg.regs_x)):
        if r > 1:
            st.unroll(a)

    # the micro-tile: input channels in steps of c_tile, the window unrolled
    sa = s[acc]
    sa.compute_at(st, last_thread)
    red = sa.op.reduce_axis  # NCHW (c, ky, kx), NHWC (ky, kx, c)
    rc, rky, rkx = (red[0], red[1], red[2]) if layout == "conv2d_nchw" else (red[2], red[0], red[1])
    rco, rci = sa.split(rc, factor=cfg.c_tile)
    oax = sa.op.axis
    micro = [oax[lay["out"][r]] for r in (1, 2, 3)]  # k, y, x
    if layout == "conv2d_nhwc":
        micro = [micro[1], micro[2], micro[0]]
    sa.reorder(rco, rci, rky, rkx, *micro)
    if KH is not None and KW is not None and KH * KW <= 25:
        sa.unroll(rky)
        sa.unroll(rkx)
    for a, r in zip(micro, ((cfg.regs_y, cfg.regs_x, cfg.regs_k) if layout == "conv2d_nhwc"
                            else (cfg.regs_k, cfg.regs_y, cfg.regs_x))):
        if r > 1:
            sa.unroll(a)

    # shared tiles per channel step: the padded input patch (padding computed during the
    # copy) and the weights
    if pad is not None:
        ds = pad
        s[ds].set_scope("shared")
    else:
        ds = s.cache_read(data, "shared", [acc])
    ws = s.cache_read(weight, "shared", [acc])
    # threadIdx.x first (innermost: consecutive threads on consecutive elements)
    order = sorted(("k", "y", "x"), key=lambda r: tags[r])
    ext = {"k": cfg.threads_k, "y": cfg.threads_y, "x": cfg.threads_x}
    threads = [(tags[r], ext[r]) for r in order]
    ph = (cfg.block_y - 1) * sh + ((KH or 1) - 1) * dh + 1
    pw = (cfg.block_x - 1) * sw + ((KW or 1) - 1) * dw + 1
    for S, elems in ((ds, cfg.c_tile * ph * pw),
                     (ws, cfg.block_k * cfg.c_tile * (KH or 1) * (KW or 1))):
        s[S].compute_at(sa, rco)
        _cooperative_copy(s[S], threads, elems)
    return s


def schedule_conv2d_nchw(outs, target: str = "cuda",
                         config: Optional[ConvConfig] = None) -> Schedule:
    """The CUDA schedule of ``tecomp.nn.conv2d_nchw`` (any stride, padding, dilation),
    with any elementwise epilogue (bias, activation): direct convolution, see the module
    docstring and :func:`conv_config`.  Threads: ``threadIdx.x`` along the output columns
    (contiguous in NCHW), ``threadIdx.y`` along rows, ``threadIdx.z`` along channels.
    ``config`` overrides the tiling :func:`conv_config` picks."""
    return _schedule_conv(outs, target, "conv2d_nchw", config)


def schedule_conv2d_nhwc(outs, target: str = "cuda",
                         config: Optional[ConvConfig] = None) -> Schedule:
    """The CUDA schedule of ``tecomp.nn.conv2d_nhwc`` (weights HWIO): as the NCHW one with
    ``threadIdx.x`` along the output channels, which are contiguous in NHWC (coalesced
    stores and weight loads).  ``config`` overrides the tiling :func:`conv_config` picks."""
    return _schedule_conv(outs, target, "conv2d_nhwc", config)
