"""A warp-specialised GEMM tile on Hopper's helpers (tecomp/codegen/cuda_hopper.py): the
vehicle that checks mbarriers, bulk copies and wgmma together, in the CUDA emulation and
through nvcc / ptxas for sm_90a (and, in a GPU session, on the device).

Each block computes a ``64 x BN`` tile of ``C = A . B^T (+ bias)`` (A ``[M, K]``, B
``[N, K]``: both K-major, float16 or bfloat16, C float32) with 160 threads: warps 0-3 are
the consumer warpgroup (``wgmma.m64nBNk16``, four per 64-wide k step), warp 4 the
producer, whose lane 0 issues, per k step, two bulk copies into a ring of ``STAGES``
shared buffers, each completing on the stage's *full* mbarrier; the consumers release a
stage through its *empty* mbarrier (128 arrivals) once their wgmmas have read it.

With ``tma`` (the fifth entry of a variant; :func:`run_emu`'s ``tma_maps``) the producer
copies boxes of ``A`` and ``B`` as they are through TMA tensor maps (:func:`tensor_maps`,
kernel parameters ``const __grid_constant__ tc_tensor_map``): swizzled on the way, the
rows and k past the operands' extents filled with zeros by the copy.  Otherwise the
copies are of contiguous bytes, so the host pre-tiles the operands (:func:`pretile`)
into the order the tiles take in shared memory: ``swizzle=1`` the 128-byte swizzle (rows
of 64 elements, 16-byte chunk ``c`` of row ``r`` at chunk ``c ^ (r % 8)``), ``swizzle=0``
the core-matrix layout without swizzle (8 x 8 blocks of 128 contiguous bytes, the k
blocks ``rows * 16`` bytes apart).  Extents that are not multiples of the tile are padded
with zeros there; the epilogue stores only the elements inside ``C``.

The persistent variant (the sixth entry of a variant) runs as many blocks as the GPU has
SMs (:func:`grid`), each taking output tiles ``blockIdx.x``, ``+ gridDim.x``, ... in a
grouped order (8 tile rows at a time, down a group's rows before its next column); its
producer runs on into the next tile's k steps while the consumers store the last one
(the ring's slots and phases count the block's k steps across its tiles).

``bug`` (a kernel argument) plants one misuse, for the emulation's checks: 1 the consumers
wait on the wrong parity, 2 a descriptor points past shared memory, 3 no wgmma.fence,
4 the producer expects more bytes than it copies, 5 one warp of the warpgroup gives
another B descriptor.
"""
from __future__ import annotations

import ctypes
import os
import subprocess
import tempfile
from typing import Dict, Tuple

import numpy as np

from ..codegen import cuda_emu
from ..runtime.cuda_driver import libcuda
from ..target import tma
from ..codegen.cuda_hopper import prelude
from ..errors import BoundsError, BuildError

KT = 64          # k elements per stage: one 128-byte swizzle row of 16-bit elements
BM = 64          # rows of a consumer warpgroup's tile (wgmma's M)
THREADS = 160    # the consumer warpgroup and the producer warp

KERNEL = r"""
#if defined(TECOMP_CUDA_EMU)
#define TC_BUG(n) (bug == (n))
#else
#define TC_BUG(n) 0   /* the planted misuse is the emulation's test only */
#endif
// Output tile t of a persistent block's sequence, in grouped order: GROUP_M tile rows at a
// time, down the rows of a group before the next column (so that the blocks running at
// once share A's and B's tiles in L2).
static __device__ __forceinline__ void tc_tile_of(int t, int tiles_m, int tiles_n, int* bm,
                                                  int* bn) {
  constexpr int GROUP_M = 8;
  const int per_group = GROUP_M * tiles_n;
  const int first_m = (t / per_group) * GROUP_M;
  const int rows = min(tiles_m - first_m, GROUP_M);
  *bm = first_m + (t % per_group) % rows;
  *bn = (t % per_group) / rows;
}
template <int BN, int STAGES, int SWZ, int BF16, int EPI, int TMA, int PERSIST>
static __device__ __forceinline__ void tc_hopper_gemm(
    const unsigned short* __restrict__ A, const unsigned short* __restrict__ B,
    const float* __restrict__ bias, float* __restrict__ C, int M, int N, int ktiles, int bug,
    const tc_tensor_map* ma, const tc_tensor_map* mb) {
  constexpr unsigned A_BYTES = 64 * 64 * 2, B_BYTES = BN * 64 * 2;
  constexpr unsigned STAGE = A_BYTES + B_BYTES;
  constexpr unsigned SMEM = STAGES * STAGE + 2 * STAGES * 8;
#if defined(TECOMP_CUDA_EMU)
  __shared__ __align__(1024) unsigned char raw[SMEM];
  unsigned char* smem = raw;
  tc_smem_window(raw, SMEM);
#else
  extern __shared__ __align__(1024) unsigned char raw[];   // SMEM + 1024 bytes
  unsigned char* smem = raw + ((1024u - ((unsigned)__cvta_generic_to_shared(raw) & 1023u)) & 1023u);
#endif
  unsigned long long* full = reinterpret_cast<unsigned long long*>(smem + STAGES * STAGE);
  unsigned long long* empty = full + STAGES;
  const int tid = threadIdx.x;
  // the output tiles of this block: its own (blockIdx.y, blockIdx.x), or (PERSIST) tiles
  // blockIdx.x, + gridDim.x, ... of all of them in grouped order; the ring's slot and
  // phase run on across tiles (it: the block's k steps so far)
  const int tiles_m = (M + 63) / 64, tiles_n = (N + BN - 1) / BN;
  const int ntiles = PERSIST ? tiles_m * tiles_n : 1;
  const int first = PERSIST ? (int)blockIdx.x : 0, step = PERSIST ? (int)gridDim.x : 1;
  if (tid == 0) {
    for (int s = 0; s < STAGES; ++s) {
      tc_mbar_init(&full[s], 1);
      tc_mbar_init(&empty[s], 128);
    }
    tc_mbar_init_fence();
  }
  __syncthreads();
  if (tid >= 128) {            // the producer warp: lane 0 issues the copies
    if (tid == 128) {
      if (TMA) {
        tc_tma_prefetch(ma);
        tc_tma_prefetch(mb);
      }
      int it = 0;
      for (int t = first; t < ntiles; t += step) {
      int bm = blockIdx.y, bn = blockIdx.x;
      if (PERSIST) tc_tile_of(t, tiles_m, tiles_n, &bm, &bn);
      for (int kt = 0; kt < ktiles; ++kt, ++it) {
        const int s = it % STAGES;
        const unsigned ph = (unsigned)(it / STAGES) & 1u;
        tc_mbar_wait(&empty[s], ph ^ 1u);     // a fresh barrier's "previous" phase has completed
        tc_mbar_arrive_expect_tx(&full[s], STAGE + (TC_BUG(4) ? 16u : 0u));
        if (TMA && SWZ) {          // boxes (64 k, rows) of A [M, K] and B [N, K], 128B-swizzled
          tc_tma_load_2d(smem + s * STAGE, ma, kt * 64, bm * 64, &full[s]);
          tc_tma_load_2d(smem + s * STAGE + A_BYTES, mb, kt * 64, bn * BN, &full[s]);
        } else if (TMA) {          // boxes (8 k, rows, 8 k blocks) of [K / 8, rows, 8] views
          tc_tma_load_3d(smem + s * STAGE, ma, 0, bm * 64, kt * 8, &full[s]);
          tc_tma_load_3d(smem + s * STAGE + A_BYTES, mb, 0, bn * BN, kt * 8, &full[s]);
        } else {
          tc_bulk_g2s(smem + s * STAGE, A + ((size_t)bm * ktiles + kt) * (64 * 64), A_BYTES,
                      &full[s]);
          tc_bulk_g2s(smem + s * STAGE + A_BYTES, B + ((size_t)bn * ktiles + kt) * (BN * 64),
                      B_BYTES, &full[s]);
        }
      }
      }
    }
    return;
  }
  int it = 0;
  for (int t = first; t < ntiles; t += step) {
  int bm = blockIdx.y, bn = blockIdx.x;
  if (PERSIST) tc_tile_of(t, tiles_m, tiles_n, &bm, &bn);
  float d[BN / 2];
  for (int i = 0; i < BN / 2; ++i) d[i] = 0.0f;
  for (int kt = 0; kt < ktiles; ++kt, ++it) {
    const int s = it % STAGES;
    const unsigned ph = (unsigned)(it / STAGES) & 1u;
    tc_mbar_wait(&full[s], TC_BUG(1) ? ph ^ 1u : ph);
    unsigned char* sa = smem + s * STAGE;
    unsigned char* sb = sa + A_BYTES;
    if (!TC_BUG(3)) tc_wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      unsigned long long da, db;
      if (SWZ) {   // 128B swizzle: k16 = 32 bytes along the row; 8-row groups 1024 bytes apart
        da = tc_wgmma_desc(sa + kk * 32, 16, 1024, 1);
        db = tc_wgmma_desc(sb + kk * 32 + (TC_BUG(2) ? SMEM : 0), 16, 1024, 1);
      } else {     // no swizzle: core matrices 128 bytes, k blocks rows * 16 bytes apart
        da = tc_wgmma_desc(sa + kk * 2 * (64 * 16), 64 * 16, 128, 0);
        db = tc_wgmma_desc(sb + kk * 2 * (BN * 16) + (TC_BUG(2) ? SMEM : 0), BN * 16, 128, 0);
      }
      if (TC_BUG(5) && (tid >> 5) == 1) db += 4;   // warp 1 reads B 64 bytes on
      if (BF16)
        TC_WGMMA_BF16(d, da, db, (kt > 0 || kk > 0) ? 1 : 0);
      else
        TC_WGMMA_F16(d, da, db, (kt > 0 || kk > 0) ? 1 : 0);
    }
    tc_wgmma_commit();
    tc_wgmma_wait<0>();
    tc_mbar_arrive(&empty[s]);
  }
  const int w = tid >> 5, g = (tid & 31) >> 2, q = tid & 3;
#pragma unroll
  for (int i = 0; i < BN / 2; ++i) {
    const int row = bm * 64 + 16 * w + g + 8 * ((i >> 1) & 1);
    const int col = bn * BN + 8 * (i >> 2) + 2 * q + (i & 1);
    if (row < M && col < N) C[(size_t)row * N + col] = d[i] + (EPI ? bias[col] : 0.0f);
  }
  }
}
"""


def _dispatch(bn: int) -> str:
    return (f"#define TC_WGMMA_F16 tc_wgmma_m64n{bn}k16_f16\n"
            f"#define TC_WGMMA_BF16 tc_wgmma_m64n{bn}k16_bf16\n")


def variant_name(bn, stages, swizzle, bf16, epilogue, tma=0, persistent=0) -> str:
    return (f"g{bn}_{stages}_{swizzle}_{bf16}_{epilogue}" + ("_tma" if tma else "")
            + ("_persistent" if persistent else ""))


def _full(variant) -> Tuple[int, int, int, int, int, int]:
    """``(stages, swizzle, bf16, epilogue, tma, persistent)`` (0 for the flags a shorter
    tuple omits)."""
    return tuple(variant) + (0,) * (6 - len(variant))


def source(bn: int, variants, device: bool = False) -> str:
    """The kernel text for block width ``bn`` with the explicit instantiations of
    ``variants`` (``(stages, swizzle, bf16, epilogue[, tma])`` tuples); ``device``: for
    nvcc, else with the emulation's launch wrappers.  The kernels take two tensor maps
    after the other arguments (``const __grid_constant__``; read only by the ``tma``
    variants, whose ``A`` and ``B`` are then unused)."""
    q = "static __device__ __forceinline__"
    out = [prelude(q), _dispatch(bn), KERNEL]
    for st, sw, bf, ep, tm, ps in map(_full, variants):
        name = variant_name(bn, st, sw, bf, ep, tm, ps)
        args = f"<{bn}, {st}, {sw}, {bf}, {ep}, {tm}, {ps}>"
        if device:
            out.append(
                f'extern "C" __global__ void __launch_bounds__(160) tc_hopper_gemm_{name}('
                "const unsigned short* __restrict__ A, const unsigned short* __restrict__ B, "
                "const float* __restrict__ bias, float* __restrict__ C, int M, int N, "
                "int ktiles, int bug, const __grid_constant__ tc_tensor_map ma, "
                f"const __grid_constant__ tc_tensor_map mb) {{\n  tc_hopper_gemm{args}("
                "A, B, bias, C, M, N, ktiles, bug, &ma, &mb);\n}")
            continue
        out.append(
            f"static void entry_{name}(void** a) {{ tc_hopper_gemm{args}("
            "(const unsigned short*)a[0], (const unsigned short*)a[1], (const float*)a[2], "
            "(float*)a[3], *(int*)a[4], *(int*)a[5], *(int*)a[6], *(int*)a[7], "
            "(const tc_tensor_map*)a[8], (const tc_tensor_map*)a[9]); }\n"
            f'extern "C" int run_{name}(void** args, const long long* dims, int mode, '
            "char* err, int errlen) {\n"
            f"  return tecomp_emu::launch(&entry_{name}, args, dims, mode, 1, 1 << 20, err, errlen);\n}}")
    return "\n".join(out) + "\n"


_LIBS: Dict[Tuple, ctypes.CDLL] = {}


def emu_library(bn: int, variants) -> ctypes.CDLL:
    """The emulation library of :func:`source` (compiled once per process)."""
    key = (bn, tuple(variants))
    if key in _LIBS:
        return _LIBS[key]
    cxx = cuda_emu.find_cxx()
    d = tempfile.mkdtemp(prefix="tecomp-hopper-")
    with open(os.path.join(d, cuda_emu.HEADER_NAME), "w") as f:
        f.write(cuda_emu.header_text())
    with open(os.path.join(d, "k.cc"), "w") as f:
        f.write(f'#include "{cuda_emu.HEADER_NAME}"\n' + source(bn, variants))
    out = os.path.join(d, "k.so")
    proc = subprocess.run([cxx, *cuda_emu.CXX_FLAGS, "-I", d, "-o", out, os.path.join(d, "k.cc")],
                          capture_output=True, text=True)
    if proc.returncode:
        raise BuildError(f"compiling the Hopper GEMM for the emulation failed:\n{proc.stderr[:6000]}")
    lib = _LIBS[key] = ctypes.CDLL(out)
    return lib


def round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def to_bits(x: np.ndarray, bf16: bool) -> np.ndarray:
    """float32 values as float16 or bfloat16 (round to nearest even) bit patterns."""
    if not bf16:
        return x.astype(np.float16).view(np.uint16)
    b = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)


def from_bits(b: np.ndarray, bf16: bool) -> np.ndarray:
    if not bf16:
        return b.view(np.float16).astype(np.float32)
    return (b.astype(np.uint32) << 16).view(np.float32)


def tile_offsets(rows: int, swizzle: int) -> np.ndarray:
    """``[rows, 64]``: the element offset of (row, k) within one pre-tiled ``rows x 64``
    tile, in the tile's shared-memory layout (see the module doc)."""
    r = np.arange(rows)[:, None]
    k = np.arange(KT)[None, :]
    if swizzle:
        byte = r * 128 + k * 2
        byte = byte ^ (((byte >> 7) & 7) << 4)
    else:
        byte = (k // 8) * (rows * 16) + (r // 8) * 128 + (r % 8) * 16 + (k % 8) * 2
    return byte // 2


def pretile(x_bits: np.ndarray, rows: int, swizzle: int) -> np.ndarray:
    """``x_bits`` (``[R, K]`` 16-bit patterns) padded to multiples of ``rows x 64`` and laid
    out tile after tile (``[R / rows][K / 64]``), each tile in its shared layout."""
    R, K = x_bits.shape
    Rp, Kp = round_up(R, rows), round_up(K, KT)
    pad = np.zeros((Rp, Kp), np.uint16)
    pad[:R, :K] = x_bits
    off = tile_offsets(rows, swizzle)
    out = np.zeros((Rp // rows, Kp // KT, rows * KT), np.uint16)
    for b in range(Rp // rows):
        for t in range(Kp // KT):
            out[b, t][off] = pad[b * rows:(b + 1) * rows, t * KT:(t + 1) * KT]
    return out.reshape(-1)


def tensor_maps(M: int, N: int, K: int, bn: int, swizzle: int, bf16: bool):
    """The :class:`~tecomp.target.tma.TensorMapSpec` of A ``[M, K]`` and B ``[N, K]``
    (C-contiguous) for the ``tma`` variants: ``swizzle=1`` boxes of ``64 k x rows``
    128B-swizzled (the layout of :func:`tile_offsets`); ``swizzle=0`` boxes ``(8 k, rows,
    8 k blocks)`` of the view ``[K / 8, rows, 8]`` (core matrices, k blocks ``rows * 16``
    bytes apart).  Extents past the tensors are the copy's zeros; K must be a multiple of 8
    (TMA's 16-byte row strides: a TensorMapError otherwise)."""
    dt = "bfloat16" if bf16 else "float16"
    specs = []
    for name, rows, R in (("A", BM, M), ("B", bn, N)):
        if swizzle:
            specs.append(tma.row_major(name, dt, (R, K), (rows, KT), swizzle="128B"))
        else:
            specs.append(tma.TensorMapSpec(dt, (8, R, -(-K // 8)), (K * 2, 16), (8, rows, KT // 8),
                                           name=name))
    return specs


def grid(M: int, N: int, bn: int, persistent_blocks: int = 0) -> Tuple[int, int, int]:
    """The launch grid: a block per ``64 x bn`` output tile, or (``persistent_blocks``)
    that many blocks, no more than the tiles, each looping over its share of them."""
    tiles_m, tiles_n = round_up(M, BM) // BM, round_up(N, bn) // bn
    if persistent_blocks:
        return (min(persistent_blocks, tiles_m * tiles_n), 1, 1)
    return (tiles_n, tiles_m, 1)


def run_emu(a: np.ndarray, b: np.ndarray, bias, *, bn=64, stages=2, swizzle=1, bf16=False,
            bug=0, mode="serial", variants=None, tma_maps=False,
            persistent_blocks=0) -> np.ndarray:
    """``a [M, K] . b[N, K]^T (+ bias)`` with the kernel in the CUDA emulation (``a``,
    ``b`` float32 values, rounded to the operand dtype).  ``tma_maps``: the operands
    stay as they are and the producer copies their tiles through tensor maps
    (:func:`tensor_maps`), else they are pre-tiled (:func:`pretile`).
    ``persistent_blocks``: that many blocks (as many as the GPU's SMs, on a GPU) each
    loop over the output tiles (the persistent variant), instead of one block a tile.
    Raises what the emulation reports (a misuse: BuildError; a trap: BoundsError)."""
    M, K = a.shape
    N = b.shape[0]
    epi = bias is not None
    tm, ps = int(bool(tma_maps)), int(persistent_blocks > 0)
    variants = variants or [(stages, swizzle, int(bf16), int(epi), tm, ps)]
    if tm:
        pa = np.ascontiguousarray(to_bits(a, bf16))
        pb = np.ascontiguousarray(to_bits(b, bf16))
        sa, sb = tensor_maps(M, N, K, bn, swizzle, bf16)
        maps = [np.frombuffer(tma.emu_bytes(sa, pa.ctypes.data), np.uint8).copy(),
                np.frombuffer(tma.emu_bytes(sb, pb.ctypes.data), np.uint8).copy()]
    else:
        pa = pretile(to_bits(a, bf16), BM, swizzle)
        pb = pretile(to_bits(b, bf16), bn, swizzle)
        maps = [np.zeros(tma.MAP_BYTES, np.uint8)] * 2
    lib = emu_library(bn, variants)
    c = np.full((M, N), np.nan, np.float32)
    bias_arr = np.ascontiguousarray(bias if epi else np.zeros(1), np.float32)
    boxes = [ctypes.c_int(M), ctypes.c_int(N), ctypes.c_int(round_up(K, KT) // KT), ctypes.c_int(bug)]
    ptrs = (ctypes.c_void_p * 10)(pa.ctypes.data, pb.ctypes.data, bias_arr.ctypes.data,
                                  c.ctypes.data, *(ctypes.addressof(x) for x in boxes),
                                  maps[0].ctypes.data, maps[1].ctypes.data)
    dims = (ctypes.c_longlong * 6)(*grid(M, N, bn, persistent_blocks), THREADS, 1, 1)
    err = ctypes.create_string_buffer(2048)
    fn = getattr(lib, "run_" + variant_name(bn, stages, swizzle, int(bf16), int(epi), tm, ps))
    fn.restype = ctypes.c_int
    rc = fn(ptrs, dims, cuda_emu.MODES[mode], err, len(err))
    if rc:
        msg = err.value.decode("utf-8", "replace")
        raise (BoundsError if msg.startswith("the kernel trapped") else BuildError)(msg)
    return c


def shared_bytes(bn: int, stages: int) -> int:
    """The dynamic shared memory a block takes on the GPU (the ring, the mbarriers, and
    1024 bytes to align the ring to the swizzle's repeat)."""
    return stages * (BM + bn) * KT * 2 + 2 * stages * 8 + 1024


class _Source:   # what the runtime's driver compiles: an object with the CUDA C text
    def __init__(self, text: str):
        self.source = text


class GpuTile:
    """The kernel on a GPU (sm_90a) for fixed ``M x N x K``: ``launch(a, b, bias, c)``
    takes device pointers to the pre-tiled operands (:func:`pretile`, uploaded by the
    caller), the bias (or 0) and ``C``; ``drv`` is tecomp's runtime driver
    (``tecomp.runtime.cuda.default_driver()``)."""

    def __init__(self, drv, M: int, N: int, K: int, *, bn=128, stages=4, swizzle=1,
                 bf16=False, epilogue=False, tma_maps=False, persistent=False):
        self.drv, self.M, self.N, self.K = drv, M, N, K
        self.bn, self.swizzle, self.bf16 = bn, swizzle, bf16
        self.tma = bool(tma_maps)
        self._maps: Dict[Tuple[int, int], list] = {}
        variant = (stages, swizzle, int(bf16), int(epilogue), int(self.tma), int(persistent))
        mod = drv.compile(_Source(source(bn, [variant], device=True)), "sm_90a")
        self.fn = drv.get_function(mod, "tc_hopper_gemm_" + variant_name(bn, *variant))
        self.grid = grid(M, N, bn, drv.multiprocessors if persistent else 0)
        self.shared = shared_bytes(bn, stages)
        self.ktiles = round_up(K, KT) // KT

    def launch(self, a_ptr: int, b_ptr: int, bias_ptr: int, c_ptr: int) -> None:
        """``a_ptr``, ``b_ptr``: the operands pre-tiled, or (``tma_maps``) as they are,
        ``[M, K]`` and ``[N, K]`` C-contiguous: their tensor maps are encoded here."""
        maps = [bytes(tma.MAP_BYTES)] * 2
        if self.tma:   # (encoded once per pair of operands)
            maps = self._maps.get((a_ptr, b_ptr))
            if maps is None:
                specs = tensor_maps(self.M, self.N, self.K, self.bn, self.swizzle, self.bf16)
                maps = self._maps[a_ptr, b_ptr] = [
                    tma.encode(sp, p, getattr(self.drv, "cu", None) or libcuda())
                    for sp, p in zip(specs, (a_ptr, b_ptr))]
        # (stream 0: the driver API's cuLaunchKernel, each argument at the offset the
        # kernel declares: the maps 64-byte aligned)
        self.drv.launch(self.fn, self.grid, (THREADS, 1, 1), self.shared, "PPPPiiiiTT",
                        [a_ptr, b_ptr, bias_ptr, c_ptr, self.M, self.N, self.ktiles, 0, *maps],
                        stream=0)


BOX_KERNEL = r"""
template <int RANK>
static void tc_box_entry(void** a) {
  __shared__ __align__(1024) unsigned char raw[16384 + 8];
  tc_smem_window(raw, sizeof raw);
  unsigned long long* bar = reinterpret_cast<unsigned long long*>(raw + 16384);
  const int* c = static_cast<const int*>(a[2]);
  const unsigned bytes = *static_cast<const unsigned*>(a[3]);
  const tc_tensor_map* map = static_cast<const tc_tensor_map*>(a[0]);
  tc_mbar_init(bar, 1);
  tc_mbar_init_fence();
  tc_mbar_arrive_expect_tx(bar, bytes);
  if (RANK == 2) tc_tma_load_2d(raw, map, c[0], c[1], bar);
  else tc_tma_load_3d(raw, map, c[0], c[1], c[2], bar);
  tc_mbar_wait(bar, 0);
  memcpy(a[1], raw, bytes);
}
extern "C" int run_box(void** args, const long long* dims, int rank, char* err, int errlen) {
  return tecomp_emu::launch(rank == 2 ? &tc_box_entry<2> : &tc_box_entry<3>, args, dims, 1, 1,
                            1 << 20, err, errlen);
}
"""


def tma_box_emu(spec, tensor: np.ndarray, coords, map_bytes: bytes = None) -> np.ndarray:
    """The bytes one ``tc_tma_load_{2,3}d`` of the box of ``spec`` at ``coords`` lands in
    shared memory, run by one thread in the CUDA emulation (``tensor``: the C-contiguous
    numpy array the map describes; ``map_bytes``: a map's bytes other than
    ``tma.emu_bytes(spec, tensor)``'s, to test the emulation's checks)."""
    if "box" not in _LIBS:
        cxx = cuda_emu.find_cxx()
        d = tempfile.mkdtemp(prefix="tecomp-tma-")
        with open(os.path.join(d, cuda_emu.HEADER_NAME), "w") as f:
            f.write(cuda_emu.header_text())
        with open(os.path.join(d, "k.cc"), "w") as f:
            f.write(f'#include "{cuda_emu.HEADER_NAME}"\n' + prelude() + BOX_KERNEL)
        out = os.path.join(d, "k.so")
        proc = subprocess.run([cxx, *cuda_emu.CXX_FLAGS, "-I", d, "-o", out,
                               os.path.join(d, "k.cc")], capture_output=True, text=True)
        if proc.returncode:
            raise BuildError(f"compiling the TMA box kernel failed:\n{proc.stderr[:6000]}")
        _LIBS["box"] = ctypes.CDLL(out)
    tensor = np.ascontiguousarray(tensor)
    raw = map_bytes if map_bytes is not None else tma.emu_bytes(spec, tensor.ctypes.data)
    m = np.frombuffer(raw, np.uint8).copy()
    out = np.zeros(max(16, spec.box_bytes), np.uint8)
    c = np.array(list(coords) + [0] * (3 - len(coords)), np.int32)
    n = ctypes.c_uint(spec.box_bytes)
    ptrs = (ctypes.c_void_p * 4)(m.ctypes.data, out.ctypes.data, c.ctypes.data,
                                 ctypes.addressof(n))
    dims = (ctypes.c_longlong * 6)(1, 1, 1, 1, 1, 1)
    err = ctypes.create_string_buffer(2048)
    rc = _LIBS["box"].run_box(ptrs, dims, len(spec.dims), err, len(err))
    if rc:
        raise BuildError(err.value.decode("utf-8", "replace"))
    return out[:spec.box_bytes]
