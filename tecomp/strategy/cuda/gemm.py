"""GEMM (``schedule_matmul``, ``schedule_dense``).

A ``BM x BN`` block of C per CUDA block of ``TM x TN`` threads; each thread owns an
``RM x RN`` micro-tile (``BM = TM*RM``) held in registers (a ``local`` stage,
unrolled).  The reduction runs in ``KT``-long steps: per step the block copies an
``A`` tile (``BM x KT``) and a ``B`` tile (``KT x BN``) to shared memory, every
thread taking a share of each copy with consecutive threads on consecutive
addresses (coalesced), between two barriers; then each of the ``KT`` inner steps
loads ``RM`` values of A and ``RN`` of B from shared memory into registers and does
``RM*RN`` multiply-adds.  With 4096x4096 operands: 64x128 blocks, 8x16 threads, 8x8
registers per thread (64 accumulators + 16 operands), ``KT = 32`` with its steps
unrolled (a thread's reads of the shared tiles become 16-byte vector loads) was the
tiling of the H100 sweeps; since the H200 sweeps the same 64x128 block runs on 4x16
threads of 16x8 registers with ``KT = 16``, the tiles copied 16 bytes at a time and
double-buffered (``cp.async``).  An
elementwise epilogue (``dense``'s bias, an activation) is computed from the
registers when C is stored."""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

from ...errors import ScheduleError
from ...ir.expr import ProducerLoad
from ...ir.functor import Mutator, collect, substitute
from ...schedule.schedule import Schedule, create_schedule
from ...te.tensor import ComputeOp, Tensor
from .._common import (_ceil, _cint, _contraction_operands, _gemm_operands, _has_tag,
                               _inline_injective, _is_injective, _outs, _walk)
from .common import (MIN_BLOCKS, _bind, _check_target, _cooperative_copy, _pow2_at_least,
                     max_shared_bytes)
from . import tensorcore
from .tensorcore import (WmmaConfig, default_wgmma, schedule_wmma_gemm, tensor_core_gemm,
                         wgmma_target, wmma_config)


@dataclass(frozen=True)
class GemmConfig:
    """The tiling of a GEMM: a block of ``threads_m x threads_n`` threads computes a
    ``block_m x block_n`` tile of C, each thread ``regs_m x regs_n`` of it in registers;
    the reduction advances ``k_tile`` at a time through shared memory.  ``unroll_k``
    unrolls the ``k_tile`` steps inside a shared tile (nvcc can then merge a thread's
    shared-memory reads into 16-byte vector loads); ``pad`` pads the rows of a tile read
    down its columns by one element (fewer bank conflicts, but no vector loads).
    ``vector`` (1, 2 or 4): each thread copies that many consecutive elements of a tile
    row at a time (16-byte global loads and shared stores where aligned; a tile whose
    row it does not divide is copied element by element).  ``double_buffer``: two
    buffers per tile, the next k step's tile copied (asynchronously, ``cp.async`` on
    sm_80+) while the block computes from the current one."""

    threads_m: int
    threads_n: int
    regs_m: int
    regs_n: int
    k_tile: int
    unroll_k: bool = False
    pad: bool = True
    vector: int = 1
    double_buffer: bool = False

    @property
    def block_m(self) -> int:
        return self.threads_m * self.regs_m

    @property
    def block_n(self) -> int:
        return self.threads_n * self.regs_n

    @property
    def threads(self) -> int:
        return self.threads_m * self.threads_n


#: the longest reduction for which ``gemm_config`` prefers many small blocks over the
#: full 64 x 128 one (measured at K = 64 only)
SHORT_K = 64


#: the fewest full 64 x 128 blocks (of 64 threads each) that keep them: about four per SM
#: on the H100/H200's 114-132 SMs; with fewer, most SMs would hold a warp or two
FULL_BLOCK_MIN_BLOCKS = 512


def gemm_config(M: Optional[int], N: Optional[int], K: Optional[int],
                batch: Optional[int] = 1) -> GemmConfig:
    """The tiling of an ``M x N x K`` GEMM (extents may be None when symbolic).

    8 x 16 threads (``threads_m x threads_n``; fewer along an extent below 8 or 16); the
    largest micro-tile of 8x8, 4x4, 2x2 or 1x1 registers that still gives
    :data:`MIN_BLOCKS` blocks (a micro-tile side is also cut while its block would be
    more than twice the extent; ``batch`` GEMMs of that size count their blocks
    together); ``k_tile`` 32 (never more than K), its steps unrolled,
    the tiles unpadded: the fastest of the H100 sweeps (measurements:
    benchmarks/DECISIONS.md, "CUDA GEMM: 8 x 16 threads, 32 k steps unrolled").  The full
    64 x 128 block (8 x 8 registers on 8 x 16 threads) runs instead as 4 x 16 threads of
    16 x 8 registers with 16 k steps, its tile rows copied 16 bytes at a time and
    double-buffered: the fastest of two H200 sweeps (SGEMM 4096^3 3.24 against 3.38 ms;
    DECISIONS.md, "CUDA GEMM (GemmConfig.vector, .double_buffer)").  Where that block
    would meet a reduction of at most :data:`SHORT_K` it is a 64 x 32 block instead, 4 x
    16 threads of 16 x 2 registers, 8 k steps: the best of a search on an H200 (batched
    96 x 512 x 512 x 64: 0.133 against 0.259 ms; DECISIONS.md, "CUDA GEMM: short
    reductions").  Where the full blocks would number fewer than
    :data:`FULL_BLOCK_MIN_BLOCKS` (counted over the batch) it is a 64 x 64 block of 128
    threads, 8 x 16 of 8 x 4 registers, 32 k steps, 16-byte copies, double-buffered:
    1.75-2.5x faster than the full block in H200 sweeps of 1024^3 (128 full blocks) and
    of a convolution's im2col GEMMs (196 and 256; DECISIONS.md, "CUDA GEMM: 64 x 64
    blocks where the full ones are few")."""
    def threads(E, most):
        return most if E is None else max(1, min(most, _pow2_at_least(E)))

    tm, tn = threads(M, 8), threads(N, 16)

    def regs(E, t, r):
        while r > 1 and E is not None and t * r >= 2 * E:
            r //= 2
        return r

    for r in (8, 4, 2, 1):
        rm, rn = regs(M, tm, r), regs(N, tn, r)
        if M is None or N is None or r == 1:
            break
        if (batch or 1) * _ceil(M, tm * rm) * _ceil(N, tn * rn) >= MIN_BLOCKS:
            break
    if (tm, tn, rm, rn) == (8, 16, 8, 8) and K is not None and K <= SHORT_K:
        # a short reduction (attention's scores: K = 64): a block has a few k steps
        # to hide its first tile's load behind, so many small blocks in flight beat a
        # big block's register reuse: 64 x 32 tiles, 4 x 16 threads of 16 x 2 registers,
        # 8 k steps (what a 40-trial search found on an H200 for 96 x 512 x 512 x 64)
        return GemmConfig(4, 16, 16, 2, max(1, min(8, K)), unroll_k=True, pad=False,
                          vector=4, double_buffer=True)
    if (tm, tn, rm, rn) == (8, 16, 8, 8) and M is not None and N is not None and \
            (batch or 1) * _ceil(M, 64) * _ceil(N, 128) < FULL_BLOCK_MIN_BLOCKS:
        # too few full blocks of 64 threads to give every SM several (1024^3: 128):
        # 64 x 64 blocks of 128 threads, 8 x 16 of 8 x 4 registers, 32 k steps
        return GemmConfig(8, 16, 8, 4, 32 if K is None else max(1, min(32, K)),
                          unroll_k=True, pad=False, vector=4, double_buffer=True)
    if (tm, tn, rm, rn) == (8, 16, 8, 8):
        # the full 64 x 128 block: 4 x 16 threads of 16 x 8 registers, 16 k steps, the
        # tile rows copied 16 bytes at a time and double-buffered (cp.async)
        kt = 16 if K is None else max(1, min(16, K))
        return GemmConfig(4, 16, 16, 8, kt, unroll_k=True, pad=False, vector=4,
                          double_buffer=True)
    kt = 32 if K is None else max(1, min(32, K))
    return GemmConfig(tm, tn, rm, rn, kt, unroll_k=True, pad=False)


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
    if not reads_at_own_index(s, out, main):
        raise ScheduleError(f"the epilogue {out.name} reads {main.name} at another index "
                            "than its own; schedule them separately")


def reads_at_own_index(s: Schedule, out: Tensor, main: Tensor, ndim: Optional[int] = None) -> bool:
    """Whether every read of ``main`` in ``out``'s body, with the stages inlined into it
    substituted, is at ``out``'s own leading ``ndim`` indices (default: all of them)."""
    axes = [iv.var for iv in s[out].op.axis]
    axes = axes if ndim is None else axes[:ndim]
    for ld in expanded_loads(s, out):
        if ld.producer is main and not (len(ld.indices) == len(axes) and all(
                a is b for a, b in zip(ld.indices, axes))):
            return False
    return True


def expanded_loads(s: Schedule, out: Tensor) -> List[ProducerLoad]:
    """The reads in ``out``'s body once the stages inlined into it are substituted."""
    class _Expand(Mutator):  # the body with the inlined stages substituted
        def visit_ProducerLoad(self, e):
            idx = tuple(self.visit(i) for i in e.indices)
            t = e.producer
            if isinstance(t.op, ComputeOp) and t in s and s[t].attach_type == "inline":
                op = s[t].op
                return self.visit(substitute(op.body, {iv.var: x for iv, x in zip(op.axis, idx)}))
            return ProducerLoad(t, idx, e.dtype)

    body = _Expand().visit(s[out].op.body)
    return collect(body, lambda n: isinstance(n, ProducerLoad))


def _schedule_gemm(s: Schedule, gemm: Tensor, out: Tensor, cfg: GemmConfig) -> None:
    """Tile ``out`` (the GEMM itself, or an elementwise epilogue reading it) over blocks
    and threads and compute the GEMM in registers inside each thread.  A batched GEMM
    (``C[b.., i, j]``, :func:`_contraction_operands`) has its batch axes fused and bound
    to ``blockIdx.z``: one batch element's tile per block."""
    found = _contraction_operands(gemm.op)
    if found is None:
        _gemm_operands(gemm.op, required=True)  # raises, saying what is missing
        raise ScheduleError(f"{gemm.name} is not a (batched) GEMM")
    nbatch, (a, a_kfirst), (b, b_kfirst) = found
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
    *batch, i, j = st.op.axis
    by, yi = st.split(i, factor=cfg.block_m)
    bx, xi = st.split(j, factor=cfg.block_n)
    ty, yi = st.split(yi, factor=RM)
    tx, xi = st.split(xi, factor=RN)
    if batch:
        bz = st.fuse(*batch) if len(batch) > 1 else batch[0]
        st.reorder(bz, by, bx, ty, tx, yi, xi)
        _bind(st, bz, "blockIdx.z")
    else:
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
    ai, aj = sa.op.axis[-2:]
    ko, ki = sa.split(sa.op.reduce_axis[0], factor=KT)
    sa.reorder(ko, ki, ai, aj)
    if cfg.unroll_k and KT > 1:
        sa.unroll(ki)
    for ax, r in ((ai, RM), (aj, RN)):
        if r > 1:
            sa.unroll(ax)

    # shared tiles per k step, registers per k
    threads = [("threadIdx.x", TN), ("threadIdx.y", TM)]
    for S, L, kfirst, rows in ((AS, AL, a_kfirst, cfg.block_m), (BS, BL, b_kfirst, cfg.block_n)):
        s[S].compute_at(sa, ko)
        if not kfirst and KT > 1 and cfg.pad:
            # [rows][KT] tile read down a column: pad the rows so that the threads of a
            # warp (rows RM or RN apart) fall in different banks
            s[S].storage_align(s[S].op.axis[0], KT, 1)
        # the tile's innermost extent: rows when k comes first in the operand, else KT
        inner = rows if kfirst else KT
        vec = cfg.vector if cfg.vector > 1 and inner % cfg.vector == 0 and not (
            not kfirst and cfg.pad) else 1
        _cooperative_copy(s[S], threads, rows * KT, vec)
        if cfg.double_buffer:
            s[S].double_buffer()
        # this thread's RM (RN) values of the current k: registers
        s[L].compute_at(sa, ki)
        s[L].unroll(s[L].op.axis[-1 if kfirst else -2])


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
    if tensor_core_gemm(gemm, tf32=getattr(config, "tf32", False)):
        dtype = _contraction_operands(gemm.op)[1][0].dtype
        wcfg = config if isinstance(config, WmmaConfig) else None
        if config is None and tensorcore.WGMMA_BY_DEFAULT and wgmma_target(target):
            # sm_90a: wgmma where a tiling divides (once checked on a GPU)
            _, (_, a_kfirst), (_, b_kfirst) = _contraction_operands(gemm.op)
            wcfg = default_wgmma(M, N, K, a_kfirst, b_kfirst, epilogue=out is not gemm,
                                 max_shared=max_shared_bytes(target), dtype=dtype)
        if config is None and wcfg is None:
            wcfg = wmma_config(M, N, K, epilogue=out is not gemm,
                               max_shared=max_shared_bytes(target), dtype=dtype)
        if wcfg is not None:
            schedule_wmma_gemm(s, gemm, wcfg, out)
            return s
    if isinstance(config, WmmaConfig):
        raise ScheduleError(
            f"config is a WmmaConfig, but {gemm.name} is not a tensor-core GEMM (float16 or "
            "bfloat16 operands summed in float32, tc.nn.matmul(A, B, out_dtype='float32'), "
            "tc.nn.dense(X, W), with any elementwise epilogue; float32 operands with "
            "WmmaConfig(..., family='mma', tf32=True)); pass a GemmConfig")
    cfg = config if config is not None else gemm_config(M, N, K)
    if not isinstance(cfg, GemmConfig):
        raise ScheduleError(f"config must be a GemmConfig, got {cfg!r}")
    if cfg.vector not in (1, 2, 4):
        raise ScheduleError(f"GemmConfig.vector must be 1, 2 or 4 (elements a thread copies "
                            f"at a time), got {cfg.vector!r}")
    _schedule_gemm(s, gemm, out, cfg)
    return s


def schedule_matmul(outs, target: str = "cuda", config=None) -> Schedule:
    """The CUDA schedule of ``tecomp.nn.matmul`` (``A[M, K] @ B[K, N]``), with any
    elementwise epilogue on top (see the module docstring for the tiling).  ``config``
    overrides the tiling :func:`gemm_config` picks.  float16 operands with a float32
    result (``tc.nn.matmul(A, B, out_dtype="float32")``), with any elementwise epilogue,
    run on tensor cores (:mod:`.tensorcore`; ``config`` a :class:`WmmaConfig`), odd
    extents in boundary tiles (a GEMV and symbolic extents: the CUDA-core GEMM)."""
    return _schedule_gemm_like(outs, target, ("matmul",), config)


def schedule_dense(outs, target: str = "cuda", config=None) -> Schedule:
    """The CUDA schedule of ``tecomp.nn.dense`` (``X[B, I] W[O, I]^T``, with or without a
    bias, plus any elementwise epilogue): the GEMM schedule with ``W`` tiles ``[BN][KT]``
    (rows padded against bank conflicts); the bias is added when C is stored.
    ``config`` overrides the tiling :func:`gemm_config` picks.  float16 operands with a
    float32 result and no bias or epilogue (``tc.nn.dense(X, W, out_dtype="float32")``)
    run on tensor cores (``W``'s tiles loaded as column-major fragments)."""
    return _schedule_gemm_like(outs, target, ("dense",), config)
