"""GEMM on tensor cores: float16 or bfloat16 operands, float32 accumulation and result
(``schedule_matmul``, ``schedule_dense`` and the GPU rules of ``auto_schedule``).

``C[.., i, j] = sum_k float32(A) * float32(B)``, ``A`` read ``[.., i, k]`` or ``[.., k,
i]`` and ``B`` ``[.., k, j]`` or ``[.., j, k]`` (``tc.nn.matmul(A, B,
out_dtype="float32")``, ``tc.nn.dense(X, W, out_dtype="float32")``,
``tc.nn.batch_matmul(..., out_dtype="float32")``; the batch axes on ``blockIdx.z``, an
operand stored the other way round, ``A[k, i]`` or ``W[j, k]``, loaded into column-major
fragments), on the ``cuda.wmma_*`` intrinsics
(:mod:`tecomp.te.intrin_cuda`): a ``block_m x block_n`` tile of C per CUDA block of
``warps_m x warps_n`` warps, each warp ``frags_m x frags_n`` 16 x 16 accumulator
fragments (``block_m = warps_m * frags_m * 16``).  The reduction advances ``k_tile`` at a
time: the block copies an ``A`` tile (``block_m x k_tile``) and a ``B`` tile (``k_tile x
block_n``), each in its tensor's own layout, to shared memory, 16 bytes per thread and
copy, the rows padded by 16 bytes (fewer bank conflicts for the fragment loads, rows still
16-byte aligned), and
double-buffered (``cp.async`` on sm_80+); then per 16 steps of k each warp loads
``frags_m`` A fragments and ``frags_n`` B fragments and does ``frags_m * frags_n``
``mma_sync``.  The accumulators are stored straight to C.  The default for large
GEMMs, 128 x 128 blocks of 4 warps of 64 x 64 with k steps of 64, takes 70 KiB of shared
memory (dynamic shared memory) and 230 registers a thread; it was the fastest of the H200
sweeps (4096^3: 0.47 ms against 0.61 for 8 warps of 64 x 32 with k steps of 32, cuBLAS
0.19; benchmarks/DECISIONS.md, "CUDA tensor cores").

An elementwise epilogue on top of ``C`` (``dense``'s bias, an activation, a residual,
the cast to float16 or bfloat16: anything that reads ``C`` at its own index) is fused:
the warps store their fragments to a ``block_m x block_n`` float32 tile in shared memory
instead of to C, and after a barrier the block's threads apply the epilogue to the tile,
each a few consecutive elements of a row, and write the output, coalesced (the tile adds
``block_m * (block_n + 4) * 4`` bytes of shared memory: :func:`shared_bytes`).

``WmmaConfig(..., family="mma")`` runs the same tiling on the ``cuda.mma_*`` intrinsics
(:mod:`tecomp.te.intrin_mma`: ``ldmatrix`` and ``mma.sync.m16n8k16`` in PTX, sm_80 and
later) instead of ``nvcuda::wmma``; the default stays ``"wmma"``.

Odd extents (not multiples of the tile, or of 16: 1000 x 768 x 3072, M = 4097, K = 100)
run on tensor cores in boundary tiles, since they compute whole 16 x 16 x 16 blocks: the
operands' shared tiles are copied whole with zeros past the edge
(``cache_read(..., pad=0.0)`` with ``align_bounds``: ``cp.async``'s zero-filling form on
sm_80+, the lanes inside the edge copied and the rest zeroed), the sum runs to a multiple
of ``k_tile`` over those zeros (``align_bounds`` on the reduce axis), the block grid covers
``ceil(M / block_m) x ceil(N / block_n)``, and where M or N is odd C goes through the
block's tile in shared memory, written out element by element under the edge's guard (a
GEMM without an epilogue gets the identity one).  Extents the tiles divide keep the code
they had: no guard, no padding, the fragments stored straight to C.  :func:`wmma_config`
picks the largest tiling that divides the extents, else the one that pads least
(:func:`waste`);
an operand whose rows are not a multiple of 16 bytes (K = 4095 or 100 of ``A[M, K]``, N =
4095 of ``B[K, N]``: most rows' tiles not 16-byte aligned, so each of their copies went
element by element) is first copied by a kernel of its own to a workspace whose rows are
(:func:`pack_rows`), and its tiles are copied from there, 16 bytes at a time;
``schedule_matmul`` falls back to the CUDA-core GEMM only for symbolic extents and where
even the least padding wastes more than :data:`WMMA_MAX_WASTE` of the work (a GEMV).  The
wgmma family pads its tiles the same way (:func:`wgmma_config`): its core-matrix copies
(``cache_read(..., pad=0.0, blocks=)``) hold zeros past the edge.

Fed by TMA (``WmmaConfig(..., family="wgmma", producer="tma" / "tma_warp")``) the wgmma
family copies its tiles as they lie: A ``[M, K]`` K-major rows, W ``[N, K]`` too, and
matmul's ``B[K, N]`` N-major, in chunks of 64 (else 32, 16) of N whose k rows are each
the swizzle's bytes, read by wgmma with its imm-trans-b set (:func:`_wgmma_tma_rows`); a
stored ``A[K, M]`` likewise in chunks of M (imm-trans-a).  The default takes these
MN-major rings with :data:`WGMMA_MN_MAJOR_BY_DEFAULT`, on GEMMs past
:data:`WGMMA_MN_MAJOR_MIN_MACS`.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

from ...errors import ScheduleError
from ...ir import dtype as _dt
from ...ir.expr import Cast, Mul
from ...schedule.schedule import Schedule
from ...te.tensor import Tensor
from ...te.tensor_intrin import tensor_intrin
from ...te.intrin_wgmma import MN_CHUNK_SWIZZLE, MN_CHUNKS, WGMMA_TILE_K, WGMMA_TILE_N
from ...target import as_target
from .._common import _cint, _contraction_operands
from .common import _bind, _cooperative_copy

FRAG = 16       # the wmma tile side (m16n16k16)
WARP = 32
#: the tensor-core families (:attr:`WmmaConfig.family`)
FAMILIES = ("wmma", "mma", "wgmma")
#: the operand dtypes of the tensor-core GEMM and their intrinsics' suffix (float32 as
#: tf32: only when a WmmaConfig asks for it, with the mma family)
OPERAND_DTYPES = {"float16": "f16", "bfloat16": "bf16", "float32": "tf32"}


def family_intrinsics(family: str, dtype: str) -> dict:
    """The intrinsics of a tensor-core ``family`` for ``dtype`` operands (``cuda.wmma_*``
    or ``cuda.mma_*``, :mod:`tecomp.te.intrin_cuda` / :mod:`tecomp.te.intrin_mma`)."""
    t = OPERAND_DTYPES[dtype]
    if family == "wgmma":
        return {"store": "cuda.mma_store_f32"}
    return {"load_a": f"cuda.{family}_load_a_{t}", "load_b": f"cuda.{family}_load_b_{t}",
            "mma": f"cuda.{family}_mma_{t}{t}f32" if family == "wmma" else f"cuda.mma_{t}{t}f32",
            "store": f"cuda.{family}_store_f32"}


@dataclass(frozen=True)
class WmmaConfig:
    """The tiling of a tensor-core GEMM: ``warps_m x warps_n`` warps per block, each
    ``frags_m x frags_n`` accumulator fragments of 16 x 16; ``k_tile`` (a multiple of 16)
    elements of the reduction per shared-memory step; ``double_buffer``: two buffers per
    shared tile, the next step's copied (``cp.async``) while the block computes;
    ``family``: the tensor-core intrinsics, ``"wmma"`` (``nvcuda::wmma``, the default)
    or ``"mma"`` (PTX ``ldmatrix`` and ``mma.sync.m16n8k16``, sm_80 and later: the
    ``cuda.mma_*`` intrinsics of :mod:`tecomp.te.intrin_mma`), on the same tiles;
    ``tf32``: a float32 GEMM on the tensor cores, its operands rounded to tf32 (10
    mantissa bits; the ``mma`` family only) -- off by default, as PyTorch's
    ``allow_tf32``, since it changes the result's precision; ``stages``: with
    ``double_buffer``, the shared tiles' ring of buffers (``double_buffer(stages=...)``:
    3 to 5 keep two to four k steps' copies in flight); ``producer``: who fills the ring,
    ``"threads"`` (every thread a share, cp.async), ``"tma"`` (the wgmma family on 2-d
    GEMMs, each operand as it lies, ``B[K, N]`` N-major and ``A[K, M]`` M-major in
    chunks (:func:`mn_chunk`): one thread issues a TMA copy of each tile, the ring
    guarded by mbarriers: ``double_buffer(producer="tma")``) or ``"tma_warp"`` (the
    same, issued by a producer warp of its own: the block gets one more warp);
    ``swizzle``: with the threads' copies and ``double_buffer``, the shared tiles laid
    out swizzled (``double_buffer(swizzle=)``: each row of a tile exactly 32, 64 or 128
    bytes, its 16-byte chunks exchanged) instead of padded or in core matrices -- the mma family's
    ldmatrix reads and cp.async writes both meet every bank once (a padded tile's copies
    do not), the wgmma family reads K-major rows with the swizzled descriptors of the TMA
    ring (``cuda.wgmma_*_rows``); a tile whose rows are another width keeps its layout.
    Off by default until measured on a GPU."""

    warps_m: int
    warps_n: int
    frags_m: int
    frags_n: int
    k_tile: int = 32
    double_buffer: bool = True
    family: str = "wmma"
    tf32: bool = False
    stages: int = 2
    producer: str = "threads"
    swizzle: bool = False

    @property
    def block_m(self) -> int:
        return self.warps_m * self.frags_m * FRAG

    @property
    def block_n(self) -> int:
        return self.warps_n * self.frags_n * FRAG

    @property
    def threads(self) -> int:
        return self.warps_m * self.warps_n * WARP


#: the tilings :func:`wmma_config` tries, largest block first
WMMA_CONFIGS = (
    WmmaConfig(2, 2, 4, 4, 64),   # 128 x 128, 4 warps of 64 x 64, k steps of 64 (dynamic shared)
    WmmaConfig(2, 4, 4, 2, 32),   # 128 x 128, 8 warps of 64 x 32
    WmmaConfig(2, 2, 4, 4, 32),   # 128 x 128, 4 warps of 64 x 64
    WmmaConfig(2, 2, 2, 2, 32),   # 64 x 64, 4 warps of 32 x 32
    WmmaConfig(2, 2, 1, 1, 32),   # 32 x 32, 4 warps of one fragment
    WmmaConfig(1, 1, 1, 1, 16),   # 16 x 16, one warp
)

#: fewer blocks than this and the next smaller tiling is taken (about two per SM of an
#: H100/H200)
WMMA_MIN_BLOCKS = 256


def fits(cfg: WmmaConfig, M: int, N: int, K: int) -> bool:
    """Whether ``cfg``'s tiles divide an ``M x N x K`` GEMM."""
    return M % cfg.block_m == 0 and N % cfg.block_n == 0 and K % cfg.k_tile == 0


#: the float32 elements a row of the epilogue's shared tile of C is padded by (16 bytes:
#: store_matrix_sync's leading dimension stays a multiple of 4, rows 16-byte aligned)
EPILOGUE_PAD = 4


def shared_bytes(cfg: WmmaConfig, dtype: str = "float16", epilogue: bool = False) -> int:
    """The shared memory a block of ``cfg``'s tiling takes with ``dtype`` operands: the A
    and B tiles (rows padded by 16 bytes; ``stages`` of each when double-buffered) and,
    with an ``epilogue``, the float32 tile of C it is applied from."""
    per16 = 16 // _dt.nbytes(dtype)
    copies = max(2, cfg.stages) if cfg.double_buffer else 1
    tiles = (cfg.block_m + cfg.block_n) * (cfg.k_tile + per16) * _dt.nbytes(dtype) * copies
    return tiles + (cfg.block_m * (cfg.block_n + EPILOGUE_PAD) * 4 if epilogue else 0)


#: the largest fraction of a padded GEMM's multiply-adds that may fall past the edge
#: (zeros) before :func:`wmma_config` leaves it to the CUDA cores: the tensor cores do
#: about 15 times the CUDA cores' float32 multiply-adds (H100), so even a quarter of
#: their work useful wins; a GEMV (M = 1: 15/16 of a 16-row tile wasted) does not
#: (unmeasured: a first guess, to be set on a GPU with benchmarks/gpu.py's odd shapes)
WMMA_MAX_WASTE = 0.75
#: among the tilings of odd extents, those within this much of the least waste count as
#: good as it (the larger block first, as for extents they divide)
WMMA_WASTE_SLACK = 0.05


def waste(cfg: WmmaConfig, M: int, N: int, K: int) -> float:
    """The fraction of the multiply-adds of ``cfg``'s padded tiles that fall past the
    edge of an ``M x N x K`` GEMM (0 where the tiles divide the extents)."""
    def up(x, t):
        return -(-x // t) * t
    return 1 - M * N * K / (up(M, cfg.block_m) * up(N, cfg.block_n) * up(K, cfg.k_tile))


def edge_k_tile(cfg: WmmaConfig, K: int) -> WmmaConfig:
    """``cfg`` with the k step (``k_tile``, 64, 32 or 16, at most its own) that pads
    ``K`` least, the larger on a tie (``K = 100``: 112 in steps of 16); at most 32 where
    ``K`` is not a multiple of 8 (with k steps of 64 the 128 x 128 blocks of 4 warps
    spill registers, ptxas sm_80 / sm_90a, 4095^3 bfloat16: before :func:`pack_rows`
    from each copy's element loop; with the packed rows still 16 bytes on sm_90a, 48 on
    sm_80 for ``dense``'s wmma, with its tile of C in shared memory)."""
    cap = cfg.k_tile if K % 8 == 0 else min(cfg.k_tile, 32)
    steps = [t for t in (cfg.k_tile, 64, 32, 16) if t <= cap]
    best = min(steps, key=lambda t: (-(-K // t) * t, -t))
    return cfg if best == cfg.k_tile else replace(cfg, k_tile=best)


def wmma_config(M: Optional[int], N: Optional[int], K: Optional[int],
                batch: Optional[int] = 1, epilogue: bool = False,
                max_shared: Optional[int] = None,
                dtype: str = "float16") -> Optional[WmmaConfig]:
    """The tiling of an ``M x N x K`` tensor-core GEMM (``batch`` of them): the first of
    :data:`WMMA_CONFIGS` whose tiles divide the extents and that gives
    :data:`WMMA_MIN_BLOCKS` blocks (counted over the batch; else the smallest that
    divides: the most blocks).  Where none divides them (an extent not a multiple of 16,
    or of any block), the tiles are padded at the edge (zero-filled copies, guarded
    stores: :func:`schedule_wmma_gemm`): the tilings are then ranked by the fraction of
    their work that falls past the edge (:func:`waste`; the k step of each the one that
    pads ``K`` least), and the first within :data:`WMMA_WASTE_SLACK` of the least that
    gives enough blocks is taken (else the smallest of those); None when even the least
    waste passes :data:`WMMA_MAX_WASTE` (a GEMV) or an extent is symbolic: the CUDA-core
    GEMM then.  ``max_shared``: only tilings whose blocks take at most that many bytes of
    shared memory (:func:`shared_bytes`, with the ``epilogue``'s tile of C)."""
    found = _pick(WMMA_CONFIGS, M, N, K, batch, epilogue, max_shared, dtype)
    if found is not None or None in (M, N, K, batch):
        return found
    return _pick_edge(WMMA_CONFIGS, M, N, K, batch, max_shared, dtype)


def _pick_edge(configs, M, N, K, batch, max_shared, dtype) -> Optional[WmmaConfig]:
    """The padded tiling of extents no tiling divides (see :func:`wmma_config`); their
    C goes through the shared tile of the epilogue, counted in the shared memory."""
    cands = [c for c in dict.fromkeys(edge_k_tile(c, K) for c in configs)
             if max_shared is None or shared_bytes(c, dtype, True) <= max_shared]
    if not cands:
        return None
    least = min(waste(c, M, N, K) for c in cands)
    if least > WMMA_MAX_WASTE:
        return None
    good = [c for c in cands if waste(c, M, N, K) <= least + WMMA_WASTE_SLACK]
    for c in good:
        if (batch or 1) * -(-M // c.block_m) * -(-N // c.block_n) >= WMMA_MIN_BLOCKS:
            return c
    return good[-1]


def _pick(configs, M, N, K, batch, epilogue, max_shared, dtype) -> Optional[WmmaConfig]:
    """The first of ``configs`` that divides the extents and gives enough blocks (see
    :func:`wmma_config`), else the smallest that divides; None when none does."""
    if None in (M, N, K):
        return None
    fitting = [c for c in configs if fits(c, M, N, K) and (
        max_shared is None or shared_bytes(c, dtype, epilogue) <= max_shared)]
    for c in fitting:
        if (batch or 1) * (M // c.block_m) * (N // c.block_n) >= WMMA_MIN_BLOCKS:
            return c
    return fitting[-1] if fitting else None


#: the wgmma tilings :func:`wgmma_config` tries (sm_90a), largest block first: warpgroups
#: of 4 warps stacked along M, each warp a 16 x block_n strip
WGMMA_CONFIGS = (
    # 128 x 128, 2 warpgroups, k 64, a ring of 4: on an H200 (2026-11-30) matmul 4096^3 f16
    # on the N-major ring ran 0.249 ms with 4 stages (benchmarks/gpu.py --family all) and
    # 0.275-0.297 ms with 3 (the default then); the ring of 3 where 4 do not fit
    WmmaConfig(8, 1, 1, 8, 64, family="wgmma", stages=4),
    WmmaConfig(8, 1, 1, 8, 64, family="wgmma", stages=3),
    WmmaConfig(4, 1, 1, 8, 64, family="wgmma", stages=3),   # 64 x 128, 1 warpgroup
    WmmaConfig(4, 1, 1, 4, 32, family="wgmma", stages=3),   # 64 x 64
)


#: whether ``schedule_matmul`` / ``schedule_dense`` take the wgmma family by themselves on
#: ``cuda -arch=sm_90a`` where its TMA producer can fill the ring (:func:`default_wgmma`).
#: On an H200 (2026-11-30) the family passed ``pytest -m gpu tests/test_hopper.py
#: tests/test_wgmma_template.py tests/test_tma_pipeline.py``, and on the odd dense shapes
#: of ``benchmarks/gpu.py --only odd`` (4097 x 4096 x 4096, 1000 x 3072 x 768, 1000 x 768
#: x 3072, M = 8..64 x 4096 x 4096) wgmma fed by a TMA producer warp ran 2.41x the best
#: of wmma and mma.sync (geometric mean over 7 shapes; worst 1.48x), by TMA copies issued
#: from the consumers' first thread 1.58x.  ``WmmaConfig(..., family="wgmma")`` asks for
#: it explicitly anywhere.
WGMMA_BY_DEFAULT = True

#: whether the default takes wgmma fed by the threads' cp.async copies where TMA cannot
#: fill the ring (operands stored ``A[K, M]`` / ``B[K, N]``, ``K`` not a multiple of 8
#: elements, a single k step): off, since on the same H200 run it was 1.01x the best of
#: wmma and mma.sync (geometric mean; worst 0.63x): no gain worth its losses.
WGMMA_THREADS_BY_DEFAULT = False

#: whether the default also takes wgmma fed by the TMA producer for ``B[K, N]`` as it lies
#: (``tc.nn.matmul``'s N-major B: its tile copied in chunks of N, wgmma's imm-trans-b;
#: N a multiple of 16; an ``A[K, M]`` likewise along M), for GEMMs of more than
#: :data:`WGMMA_MN_MAJOR_MIN_MACS` multiply-adds.  On an H200 (2026-11-30, float16
#: ``matmul(A, B)`` into float32, interleaved with ``torch.matmul``) it ran 1.94x the
#: best of wmma and mma.sync at 4096^3 (``benchmarks/gpu.py --family all``,
#: ``wgmma-te-tma-warp-nmajor``; 1.15x the same ring on a transposed B), and against
#: the wmma default: 2048^3 0.038 vs 0.065 ms, 8192^3 2.23 vs 4.63, 4096 x 768 x 3072
#: 0.051 vs 0.151, 1000 x 3072 x 768 0.020 vs 0.033, 512 x 3072 x 768 0.020 vs 0.021.
#: ``WmmaConfig(..., family="wgmma", producer="tma_warp")`` asks for it explicitly.
WGMMA_MN_MAJOR_BY_DEFAULT = True

#: the MN-major ring's floor: at 1024^3 (2**30 multiply-adds) wmma ran 0.022 ms against
#: its 0.032 on the same H200 run, so the default keeps wmma there and below
WGMMA_MN_MAJOR_MIN_MACS = 2 ** 30

#: the TMA producer :func:`default_wgmma` takes: ``"tma_warp"`` (a warp of its own issues
#: the copies; measured above) or ``"tma"``
WGMMA_DEFAULT_PRODUCER = "tma_warp"


def wgmma_target(target) -> bool:
    """Whether ``target`` names sm_90a (``cuda -arch=sm_90a``), where the GEMM templates
    take the wgmma family when a tiling divides the extents."""
    try:
        return str(as_target(target).arch) == "sm_90a"
    except Exception:   # noqa: BLE001 - a target the caller checks itself
        return False


def wgmma_config(M, N, K, batch=1, epilogue: bool = False, max_shared: Optional[int] = None,
                 dtype: str = "float16") -> Optional[WmmaConfig]:
    """The wgmma tiling of an ``M x N x K`` GEMM, as :func:`wmma_config` picks among
    :data:`WGMMA_CONFIGS`: one that divides the extents, else the padded one that wastes
    least (boundary tiles, as the other families'); None for symbolic extents, where even
    the least waste passes :data:`WMMA_MAX_WASTE`, or operands that are not float16 /
    bfloat16: the mma.sync family then."""
    if dtype not in ("float16", "bfloat16"):
        return None
    found = _pick(WGMMA_CONFIGS, M, N, K, batch, epilogue, max_shared, dtype)
    if found is not None or None in (M, N, K, batch):
        return found
    return _pick_edge(WGMMA_CONFIGS, M, N, K, batch, max_shared, dtype)


def default_wgmma(M, N, K, a_kfirst: bool, b_kfirst: bool, epilogue: bool = False,
                  max_shared: Optional[int] = None,
                  dtype: str = "float16") -> Optional[WmmaConfig]:
    """The wgmma tiling the 2-d GEMM templates take by themselves on sm_90a (with
    :data:`WGMMA_BY_DEFAULT`): :func:`wgmma_config`'s, filled by the TMA producer where it
    can be (``A[M, K]`` and ``W[N, K]`` as they lie, rows 16-byte aligned, two k steps or
    more: :data:`WGMMA_DEFAULT_PRODUCER`; with :data:`WGMMA_MN_MAJOR_BY_DEFAULT` also
    ``B[K, N]``, N a multiple of 16, past :data:`WGMMA_MN_MAJOR_MIN_MACS`:
    :func:`mn_chunk`); elsewhere the cp.async-fed
    tiling with :data:`WGMMA_THREADS_BY_DEFAULT`, else None (the wmma / mma.sync tiling
    then)."""
    cfg = wgmma_config(M, N, K, epilogue=epilogue, max_shared=max_shared, dtype=dtype)
    if cfg is None or None in (M, N, K):
        return None
    per16 = 16 // _dt.nbytes(dtype)
    big = M * N * K > WGMMA_MN_MAJOR_MIN_MACS
    mn_ok = all(not kfirst or (WGMMA_MN_MAJOR_BY_DEFAULT and big and ext % 16 == 0)
                for kfirst, ext in ((a_kfirst, M), (b_kfirst, N)))
    if mn_ok and K % per16 == 0 and -(-K // cfg.k_tile) >= 2:
        return replace(cfg, producer=WGMMA_DEFAULT_PRODUCER)
    return cfg if WGMMA_THREADS_BY_DEFAULT else None


def tensor_core_gemm(gemm: Tensor, tf32: bool = False) -> bool:
    """Whether ``gemm`` is a (batched) ``C[.., i, j] = sum_k f32(A) * f32(B)`` with ``A``
    read ``[.., i, k]`` or ``[.., k, i]``, ``B`` read ``[.., k, j]`` or ``[.., j, k]``,
    both float16 or both bfloat16 (with ``tf32``, both float32), ``C`` float32: what the
    tensor-core schedule computes."""
    op = gemm.op
    found = _contraction_operands(op)
    if found is None:
        return False
    nbatch, (a, a_kfirst), (b, b_kfirst) = found
    if a.dtype not in OPERAND_DTYPES or b.dtype != a.dtype or gemm.dtype != "float32":
        return False
    src = op.body.source
    if a.dtype == "float32":
        return tf32 and isinstance(src, Mul)
    return all(isinstance(x, Cast) and x.dtype == "float32" and x.value.dtype == a.dtype
               for x in (getattr(src, "a", None), getattr(src, "b", None)))


def schedule_wmma_gemm(s: Schedule, gemm: Tensor, cfg: WmmaConfig,
                       out: Optional[Tensor] = None) -> None:
    """Schedule ``gemm`` (:func:`tensor_core_gemm`) on tensor cores with ``cfg``'s tiling
    (constant extents; tiles that do not divide them are padded at the edge, see the
    module docstring).  Batch axes are fused onto ``blockIdx.z``; an
    operand stored with ``k`` in its other dimension (``A[k, i]``, ``W[j, k]``) is copied
    as it is stored and loaded into column-major fragments.  ``out``: the output, an
    elementwise epilogue of ``gemm`` of its shape that reads it at its own index, with the
    stages between them inlined (default: ``gemm`` is the output); the fragments then go
    through a float32 tile of C in shared memory (see the module docstring)."""
    *batch, M, N = (_cint(e) for e in gemm.shape)
    K = _cint(gemm.op.reduce_axis[0].dom.extent)
    if not isinstance(cfg, WmmaConfig):
        raise ScheduleError(f"the tensor-core GEMM {gemm.name} takes a WmmaConfig, got {cfg!r:.80}")
    if cfg.k_tile % FRAG or min(cfg.warps_m, cfg.warps_n, cfg.frags_m, cfg.frags_n) < 1:
        raise ScheduleError(f"{cfg}: k_tile must be a multiple of {FRAG} and the warp and "
                            "fragment counts at least 1")
    if None in (M, N, K) or None in batch:
        dims = " x ".join(str(e) if c is None else str(c) for e, c in zip(
            (*gemm.shape[-2:], gemm.op.reduce_axis[0].dom.extent), (M, N, K)))
        raise ScheduleError(
            f"the tensor-core GEMM {gemm.name} is {dims} with a symbolic extent; the "
            "tensor-core template takes constant extents: schedule it with a GemmConfig "
            "(the CUDA-core GEMM), or give the shapes")
    edge = not fits(cfg, M, N, K)   # boundary tiles: zero-filled copies, guarded stores
    if cfg.family not in FAMILIES:
        raise ScheduleError(f"{cfg}: family {cfg.family!r:.40} is not one of "
                            f"{', '.join(map(repr, FAMILIES))}")
    if cfg.threads > 1024:
        raise ScheduleError(f"{cfg} has {cfg.threads} threads per block; a CUDA block has at "
                            "most 1024")
    _, (a, a_kfirst), (b, b_kfirst) = _contraction_operands(gemm.op)
    if not tensor_core_gemm(gemm, tf32=cfg.tf32):
        raise ScheduleError(
            f"{gemm.name} is not a tensor-core GEMM: the tensor cores take float16 or bfloat16 "
            f"operands with a float32 result (sum of float32(A) * float32(B)), or float32 ones "
            f"with WmmaConfig(..., family='mma', tf32=True); {gemm.name} reads {a.dtype} and "
            f"{b.dtype} into {gemm.dtype}")
    if a.dtype == "float32" and cfg.family != "mma":
        raise ScheduleError(f"{cfg}: tf32 runs on the mma family only: use "
                            "WmmaConfig(..., family='mma', tf32=True)")
    if cfg.family == "wgmma":
        check_wgmma_config(cfg, a.dtype)
    if cfg.producer != "threads" and (cfg.family != "wgmma" or cfg.producer not in (
            "tma", "tma_warp") or not cfg.double_buffer):
        raise ScheduleError(
            f"{cfg}: producer={cfg.producer!r:.20}; the TMA producer ('tma', 'tma_warp') "
            "fills the double-buffered tiles of the wgmma family (WmmaConfig(..., "
            "family='wgmma', producer='tma')); the other families' tiles are copied by the "
            "threads")
    fam, names = cfg.family, family_intrinsics(cfg.family, a.dtype)
    per16 = 16 // _dt.nbytes(a.dtype)   # elements per 16-byte copy (and per row pad)
    a_chunk = b_chunk = 0   # (a TMA ring's M-major A, N-major B: their chunks)
    tma = cfg.producer in ("tma", "tma_warp")
    if (M % cfg.block_m or N % cfg.block_n or tma) and (out is None or out.op is gemm.op):
        # the fragments of a boundary tile cannot be stored whole: they go through a tile
        # of C in shared memory, copied out element by element under the edge's guard
        # (an odd K alone keeps the fragments' stores to C); so do a TMA ring's, whose
        # block has no other stage that spreads a warp's 32 lanes over threadIdx.x
        out, gemm = gemm, s.cache_write(gemm, "shared")
    if not tma:   # rows not 16-byte aligned: copied once to rows that are (see pack_rows)
        a, b = (pack_rows(s, t, gemm, per16) for t in (a, b))
    if fam == "wgmma":   # per warp: the mma.* accumulator layout (see intrin_wgmma)
        CF = s.cache_write(gemm, "mma.accumulator")
        pad = 0.0 if edge else None   # past the edge the copies hold zeros
        row_tiles = tma or (cfg.swizzle and cfg.double_buffer and not (a_kfirst or b_kfirst)
                       and cfg.k_tile * _dt.nbytes(a.dtype) in SWIZZLE_OF_ROW)
        if row_tiles:
            if tma and len(gemm.shape) > 2:
                raise ScheduleError(
                    f"{cfg}: the TMA producer copies the operands of a 2-d GEMM as they lie; "
                    f"{gemm.name} reads a batch of {'A[K, M]' if a_kfirst else 'A[M, K]'} and "
                    f"{'B[K, N]' if b_kfirst else 'W[N, K]'}: use producer='threads'")
            # plain rows of the k step, swizzled by the TMA copies or the threads' (see
            # _wgmma_mainloop); A[K, M] and B[K, N] in chunks of M / N, k rows each
            # (wgmma's M-major A, N-major B)
            chunks = []
            for t, kfirst, ext, blk, what in ((a, a_kfirst, M, cfg.block_m, "A[K, M]"),
                                              (b, b_kfirst, N, cfg.block_n, "B[K, N]")):
                chunk = mn_chunk(cfg, ext, blk, what) if kfirst else 0
                chunks.append(chunk)
                chunks.append(s.cache_read(t, "shared", [CF], pad=pad, blocks=[
                    (0, cfg.k_tile), (1, chunk)] if chunk else None))
            a_chunk, AS, b_chunk, BS = chunks
        else:
            # the operands in 8 x 8 core matrices, k's block innermost (wgmma's K-major
            # layout without swizzle)
            def core(t, kfirst):   # the last two dimensions, batch axes before them
                r, c = len(t.shape) - 2, len(t.shape) - 1
                return [(c, 8), (r, 8)] if kfirst else [(r, 8), (c, 8)]
            AS = s.cache_read(a, "shared", [CF], pad=pad, blocks=core(a, a_kfirst))
            BS = s.cache_read(b, "shared", [CF], pad=pad, blocks=core(b, b_kfirst))
    else:
        CF = s.cache_write(gemm, f"{fam}.accumulator")
        pad = 0.0 if edge else None   # past the edge the copies hold zeros
        AS = s.cache_read(a, "shared", [CF], pad=pad)
        BS = s.cache_read(b, "shared", [CF], pad=pad)
        AF = s.cache_read(AS, f"{fam}.matrix_a", [CF])
        BF = s.cache_read(BS, f"{fam}.matrix_b", [CF])

    if out is not None and out.op is not gemm.op:
        st, bx = _epilogue_blocks(s, out, cfg)
        s[gemm].set_scope("shared")
        s[gemm].compute_at(st, bx)
        s[gemm].storage_align(s[gemm].op.axis[-2], cfg.block_n, EPILOGUE_PAD)
    # C (or its tile in shared memory): blocks, warps (threadIdx.z / .y: each warp's 32
    # lanes share one fragment set), the warp's fragments stored one 16 x 16 tile at a time
    st = s[gemm]
    *bat, i, j = st.op.axis
    if out is not None and out.op is not gemm.op:
        by = bx = None   # the epilogue's blocks
    else:
        by, i = st.split(i, factor=cfg.block_m)
        bx, j = st.split(j, factor=cfg.block_n)
    wy, i = st.split(i, factor=cfg.frags_m * FRAG)
    wx, j = st.split(j, factor=cfg.frags_n * FRAG)
    fi, i = st.split(i, factor=FRAG)
    fj, j = st.split(j, factor=FRAG)
    if by is None:
        st.reorder(*bat, wy, wx, fi, fj, i, j)
    else:
        _blocks(st, bat, by, bx, wy, wx, fi, fj, i, j)
    _bind(st, wy, "threadIdx.z")
    _bind(st, wx, "threadIdx.y")
    st.tensorize(i, tensor_intrin(names["store"]))

    if fam == "wgmma":
        _wgmma_mainloop(s, CF, AS, BS, st, wx, cfg, a.dtype, edge, K, row_tiles,
                        (a_chunk, b_chunk))
        return
    # the accumulators: per k step of the shared tiles, per 16 k, every fragment pair
    sc = s[CF]
    sc.compute_at(st, wx)
    *cb, ci, cj = sc.op.axis
    ko, k = sc.split(sc.op.reduce_axis[0], factor=cfg.k_tile)
    kf, k = sc.split(k, factor=FRAG)
    fi, ci = sc.split(ci, factor=FRAG)
    fj, cj = sc.split(cj, factor=FRAG)
    sc.reorder(*cb, ko, kf, fi, fj, ci, cj, k)
    sc.tensorize(ci, tensor_intrin(names["mma"]))
    if K % cfg.k_tile:   # the last k step's zeros: the sum runs to a multiple of k_tile
        sc.align_bounds(sc.op.reduce_axis[0], cfg.k_tile)

    # the fragments of one 16-wide k step: the 16 x 16 tiles of the operand's last two
    # dimensions (in its own order), tiled along the one that is not k
    for F, kfirst, intrin in ((AF, a_kfirst, names["load_a"]), (BF, b_kfirst, names["load_b"])):
        sf = s[F]
        sf.compute_at(sc, kf)
        *fb, r, c = sf.op.axis
        if kfirst:              # [k, x]: x tiled
            co, c = sf.split(c, factor=FRAG)
            sf.reorder(*fb, co, r, c)
            sf.tensorize(r, tensor_intrin(intrin))
        else:                   # [x, k]
            ro, r = sf.split(r, factor=FRAG)
            sf.reorder(*fb, ro, r, c)
            sf.tensorize(r, tensor_intrin(intrin))

    # the shared tiles: 16-byte copies spread over the block, rows padded, double-buffered
    threads = [("threadIdx.x", WARP), ("threadIdx.y", cfg.warps_n), ("threadIdx.z", cfg.warps_m)]
    for S, rows, cols in ((AS, cfg.block_m, cfg.k_tile) if not a_kfirst else
                          (AS, cfg.k_tile, cfg.block_m),
                          (BS, cfg.k_tile, cfg.block_n) if b_kfirst else
                          (BS, cfg.block_n, cfg.k_tile)):
        ss = s[S]
        ss.compute_at(sc, ko)
        if edge:   # the whole tile, zeros past the edge (no guard: every element written)
            ss.align_bounds(ss.op.axis[-2], rows)
            ss.align_bounds(ss.op.axis[-1], cols)
        swz = SWIZZLE_OF_ROW.get(cols * _dt.nbytes(a.dtype)) if (
            cfg.swizzle and cfg.double_buffer) else None
        if swz is None:   # (rows padded by 16 bytes: ldmatrix's rows in distinct banks)
            ss.storage_align(ss.op.axis[-2], cols, per16)
        _cooperative_copy(ss, threads, rows * cols, per16)
        if cfg.double_buffer:
            ss.double_buffer(stages=cfg.stages, swizzle=swz or "none")


#: whether an operand whose rows are not 16-byte aligned (the innermost extent not a
#: multiple of 8 elements: K = 4095 of a K-major operand, N = 4095 of B[K, N]) is first
#: copied, in a kernel of its own, to a workspace whose rows are (:func:`pack_rows`)
PACK_MISALIGNED_ROWS = True
#: the threads per block of that copy
PACK_THREADS = 256


def pack_rows(s: Schedule, t: Tensor, reader: Tensor, per16: int) -> Tensor:
    """``t`` itself where its rows (its innermost dimension) hold a multiple of ``per16``
    elements (16 bytes), else a copy of it in global memory that ``reader`` reads
    instead, its rows padded to a multiple of 16 bytes (``storage_align``; the padding
    never read: the tiles' copies zero-fill past ``t``'s edge) and computed first, by a
    kernel of its own, one element per thread (2 x the tensor's bytes moved once).
    Every row of a tile then starts 16-byte aligned (the workspace does: the code
    generator drops the run-time check), and each copy into the shared tiles is one
    16-byte ``cp.async``: with rows of 4095 elements 7 in 8 rows were not aligned, and
    their copies went element by element, 2-byte loads waited for before the k step's
    multiply-adds (nothing in flight behind them), 15-20x slower on an H200."""
    if not PACK_MISALIGNED_ROWS or _cint(t.shape[-1]) % per16 == 0:
        return t
    P = s.cache_read(t, "global", [reader])
    sp = s[P]
    sp.storage_align(sp.op.axis[-2], per16, 0)
    e = sp.fuse(*sp.op.axis)
    bx, tx = sp.split(e, factor=PACK_THREADS)
    _bind(sp, bx, "blockIdx.x")
    _bind(sp, tx, "threadIdx.x")
    return P


def check_wgmma_config(cfg: WmmaConfig, dtype: str) -> None:
    """The tilings the wgmma family runs: warpgroups of 4 warps stacked along M
    (``warps_m`` a multiple of 4, ``warps_n`` 1), each warp one 16-row strip
    (``frags_m`` 1) of the warpgroup's ``64 x block_n`` tile, ``block_n`` one of
    :data:`tecomp.te.intrin_wgmma.WGMMA_TILE_N`; float16 or bfloat16 operands."""
    if dtype not in ("float16", "bfloat16"):
        raise ScheduleError(f"{cfg}: wgmma takes float16 or bfloat16 operands, not {dtype}")
    if cfg.warps_m % 4 or cfg.warps_n != 1 or cfg.frags_m != 1 or \
            cfg.block_n not in WGMMA_TILE_N:
        raise ScheduleError(
            f"{cfg}: the wgmma family computes 64 x N tiles on warpgroups of 4 warps (128 "
            "threads) stacked along M: warps_m a multiple of 4, warps_n 1, frags_m 1 and "
            f"frags_n * 16 one of {', '.join(map(str, WGMMA_TILE_N))} (e.g. "
            "WmmaConfig(8, 1, 1, 8, 64, family='wgmma'): 128 x 128 blocks of 2 warpgroups)")


def _wgmma_mainloop(s, CF, AS, BS, st, wx, cfg: WmmaConfig, dtype: str, edge: bool = False,
                    K: int = 0, rows: bool = False, chunks=(0, 0)) -> None:
    """The accumulators of the wgmma family: per k step of the shared tiles, per 16 k, one
    ``cuda.wgmma_*_n<block_n>`` per warp (its 16-row strip of its warpgroup's tile); the
    shared tiles in core matrices (:mod:`tecomp.te.intrin_wgmma`), 16-byte copies spread
    over the block, ``stages`` of them in a cp.async ring."""
    t = OPERAND_DTYPES[dtype]
    sc = s[CF]
    sc.compute_at(st, wx)
    *cb, ci, cj = sc.op.axis
    ko, k = sc.split(sc.op.reduce_axis[0], factor=cfg.k_tile)
    if rows:   # (swizzled rows: a TMA ring, or the threads' swizzled copies)
        _wgmma_tma_rows(s, sc, AS, BS, cb, ko, ci, cj, k, cfg, dtype, edge, K, chunks)
        return
    name = f"cuda.wgmma_{t}{t}f32_n{cfg.block_n}"
    cio, cii = sc.split(ci, factor=8)
    cjo, cji = sc.split(cj, factor=8)
    if cfg.k_tile in WGMMA_TILE_K[1:]:   # the k step's wgmmas as one group, waited once
        k8o, k8i = sc.split(k, factor=8)
        sc.reorder(*cb, ko, cio, cii, cjo, cji, k8o, k8i)
        name += f"_k{cfg.k_tile}"
    else:                                # one wgmma per 16 of k
        kf, k = sc.split(k, factor=FRAG)
        k8o, k8i = sc.split(k, factor=8)
        sc.reorder(*cb, ko, kf, cio, cii, cjo, cji, k8o, k8i)
    sc.tensorize(cio, tensor_intrin(name))
    if K % cfg.k_tile:   # the last k step's zeros: the sum runs to a multiple of k_tile
        sc.align_bounds(sc.op.reduce_axis[0], cfg.k_tile)
    per16 = 16 // _dt.nbytes(dtype)
    threads = [("threadIdx.x", WARP), ("threadIdx.y", cfg.warps_n), ("threadIdx.z", cfg.warps_m)]
    for S, rows in ((AS, cfg.block_m), (BS, cfg.block_n)):
        ss = s[S]
        ss.compute_at(sc, ko)
        if edge:   # the whole tile of core matrices, zeros past the edge
            for ax in ss.op.axis:
                ss.align_bounds(ax, 1)
        _cooperative_copy(ss, threads, rows * cfg.k_tile, per16)
        if cfg.double_buffer:
            ss.double_buffer(stages=cfg.stages)


#: the TMA swizzle whose rows hold a k step of this many bytes (the ``_rows`` intrinsics)
SWIZZLE_OF_ROW = {32: "32B", 64: "64B", 128: "128B"}


def mn_chunk(cfg: WmmaConfig, extent: int, block: Optional[int] = None,
             what: str = "B[K, N]") -> int:
    """The chunk (elements of M or N) in which the TMA ring holds an MN-major operand's
    tile (``B[K, N]``: ``[block_n / chunk, k_tile, chunk]``, rows of ``chunk`` along N,
    one per k; ``A[K, M]`` alike along M): the widest of
    :data:`~tecomp.te.intrin_wgmma.MN_CHUNKS` (128, 64 or 32 bytes of a 16-bit type: the
    128B, 64B or 32B swizzle) that divides the tile's ``block`` (default ``block_n``) and
    the tensor's ``extent`` (the tensor map views its rows as whole chunks); ScheduleError
    where none does (an extent not a multiple of 16)."""
    block = cfg.block_n if block is None else block
    for c in MN_CHUNKS:
        if block % c == 0 and extent % c == 0:
            return c
    dim = what[-2]
    raise ScheduleError(
        f"{cfg}: the TMA producer copies {what} {dim}-major in chunks of 64, 32 or 16 "
        f"elements of {dim} (the 128B, 64B, 32B swizzles); {dim} = {extent} is not a multiple "
        "of 16: use producer='threads' (its copies take any extent)")


def _wgmma_tma_rows(s, sc, AS, BS, cb, ko, ci, cj, k, cfg: WmmaConfig, dtype: str,
                    edge: bool, K: int, chunks=(0, 0)) -> None:
    """The wgmma mainloop on TMA rings: the A and B tiles ``[rows, k_tile]`` as they lie
    in the tensors, one TMA box each, their slots swizzled (``double_buffer(...,
    swizzle=)``: rows of ``k_tile`` elements, 128 bytes at k steps of 64 of a 16-bit
    type, the TMA map's CU_TENSOR_MAP_SWIZZLE_128B); per k step one
    ``cuda.wgmma_*_n<N>_k<k_tile>_rows`` per warp, whose descriptors carry the same
    swizzle.  Past the edge the boxes read zeros (TMA's out-of-bounds fill: the padded
    copies' zeros), so odd M, N and K take the same rings (K a multiple of 8: the
    tensor's rows 16-byte aligned, which the tensor map needs).  ``b_chunk``: B is
    ``B[K, N]`` (matmul), its tile ``[k_tile, block_n]`` copied as it lies, N-major, in
    chunks of ``b_chunk`` of N (:func:`mn_chunk`; one 3-d box: the chunk, k, the chunks),
    each chunk's k rows swizzled by the chunk's bytes, read by the ``_bmn<chunk>``
    intrinsics (wgmma's imm-trans-b); N a multiple of the chunk, odd M and K as above.
    ``chunks``: ``(a_chunk, b_chunk)``; ``a_chunk``: ``A[K, M]`` the same way along M
    (the intrinsics read it M-major by its strides: imm-trans-a)."""
    a_chunk, b_chunk = chunks
    t = OPERAND_DTYPES[dtype]
    row = cfg.k_tile * _dt.nbytes(dtype)
    tma = cfg.producer in ("tma", "tma_warp")
    threads = [("threadIdx.x", WARP), ("threadIdx.y", cfg.warps_n), ("threadIdx.z", cfg.warps_m)]
    if row not in SWIZZLE_OF_ROW:
        raise ScheduleError(f"{cfg}: a TMA ring's swizzled rows hold 32, 64 or 128 bytes of "
                            f"k; k_tile={cfg.k_tile} of {dtype} is {row}: give k_tile 16, 32 "
                            "or 64")
    if tma and K % (16 // _dt.nbytes(dtype)):
        raise ScheduleError(
            f"{cfg}: K = {K} is not a multiple of {16 // _dt.nbytes(dtype)}, so the rows of "
            "the operands are not 16-byte aligned, which a TMA tensor map needs: use "
            "producer='threads' (its copies zero-fill any K)")
    if tma and -(-K // cfg.k_tile) < 2:
        raise ScheduleError(
            f"{cfg}: K = {K} is one k step of {cfg.k_tile}; the TMA producer pipelines the "
            "k loop through its ring, which needs two steps or more: use producer='threads' "
            "(or a smaller k_tile)")
    name = f"cuda.wgmma_{t}{t}f32_n{cfg.block_n}_k{cfg.k_tile}_rows"
    if b_chunk:   # B's chunks of N: the intrinsic's b[jo, ji, k]
        cjo, cji = sc.split(cj, factor=b_chunk)
        sc.reorder(*cb, ko, ci, cjo, cji, k)
        name += f"_bmn{b_chunk}"
    else:
        sc.reorder(*cb, ko, ci, cj, k)
    sc.tensorize(ci, tensor_intrin(name))
    if K % cfg.k_tile:   # the last k step's zeros: the sum runs to a multiple of k_tile
        sc.align_bounds(sc.op.reduce_axis[0], cfg.k_tile)
    for S, rows, chunk in ((AS, cfg.block_m, a_chunk), (BS, cfg.block_n, b_chunk)):
        ss = s[S]
        ss.compute_at(sc, ko)
        swz = SWIZZLE_OF_ROW[row]
        if chunk:   # [K / k_tile, M or N / chunk, k_tile, chunk]
            swz = MN_CHUNK_SWIZZLE[chunk]
            if edge:   # the whole box (chunks past the edge: TMA's out-of-bounds zeros)
                for ax, f in zip(ss.op.axis, (1, rows // chunk, 1, 1)):
                    ss.align_bounds(ax, f)
        elif edge:   # the whole box, zeros past the edge (TMA's out-of-bounds fill)
            ss.align_bounds(ss.op.axis[-2], rows)
            ss.align_bounds(ss.op.axis[-1], cfg.k_tile)
        if not tma:   # the threads' copies, 16 bytes each, at their swizzled addresses
            _cooperative_copy(ss, threads, rows * cfg.k_tile, 16 // _dt.nbytes(dtype))
        ss.double_buffer(stages=cfg.stages, producer=cfg.producer, swizzle=swz)


def _blocks(st, bat, by, bx, *inner) -> None:
    """The block loops of a C tile, then the ``inner`` ones: the batch axes fused onto
    ``blockIdx.z``, ``by`` and ``bx`` on ``blockIdx.y`` / ``.x``."""
    if bat:
        bz = st.fuse(*bat) if len(bat) > 1 else bat[0]
        st.reorder(bz, by, bx, *inner)
        _bind(st, bz, "blockIdx.z")
    else:
        st.reorder(by, bx, *inner)
    _bind(st, by, "blockIdx.y")
    _bind(st, bx, "blockIdx.x")


def _epilogue_blocks(s: Schedule, out: Tensor, cfg: WmmaConfig):
    """Tile the epilogue ``out`` over blocks of ``block_m x block_n`` and spread each
    block's tile over its threads: ``vec`` consecutive elements of a row per thread and
    step (16 bytes of the output, at least 4 elements: both divide ``block_n``, a multiple
    of 16), consecutive threads on consecutive elements (coalesced).  Returns the stage; its last block loop is where
    the tile of C is computed: ``(stage, that loop)``."""
    st = s[out]
    *bat, i, j = st.op.axis
    by, i = st.split(i, factor=cfg.block_m)
    bx, j = st.split(j, factor=cfg.block_n)
    _blocks(st, bat, by, bx, i, j)
    vec = max(EPILOGUE_PAD, 16 // _dt.nbytes(out.dtype))
    e = st.fuse(i, j)
    e, v = st.split(e, factor=vec)
    for tag, ext in (("threadIdx.x", WARP), ("threadIdx.y", cfg.warps_n),
                     ("threadIdx.z", cfg.warps_m)):
        e, t = st.split(e, factor=ext)
        _bind(st, t, tag)
    st.vectorize(v)
    return st, bx
