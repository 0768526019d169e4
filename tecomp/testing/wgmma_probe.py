"""One ``wgmma.mma_async.m64n128k16`` on operands laid out in shared memory by the host, in
every major-ness and swizzle mode a 16-bit matrix descriptor describes: the probe that
checks the CUDA emulation's reading of the descriptors (``tecomp_emu::wgmma_addr``, the
``imm-trans-a`` / ``imm-trans-b`` bits) against the PTX ISA's canonical layouts, and, in a
GPU session, the hardware against the same layouts.

:func:`offsets` places each element as the PTX ISA's table of canonical layouts does
("Asynchronous Warpgroup Level Matrix Shared Memory Layout": "Canonical Layouts", in
CuTe's notation, ``T = 8`` 16-bit elements per 16 bytes, ``W`` the swizzle's bytes / 16),
written out here from that table rather than from the emulation's code::

    K-major,  no swizzle   ((8,m),(T,2k)):((1T,SBO),(1,LBO))
    K-major,  swizzled     ((8,m),(T,2k)):((WT,SBO),(1,T))
    MN-major, no swizzle   ((T,1,m),(8,k)):((1,T,SBO),(1T,LBO))
    MN-major, swizzled     ((T,W,m),(8,k)):((1,T,LBO),(WT,SBO))

then the swizzle ``Swizzle<log2 W, 4, 3>`` on the byte address (bits 4.. XORed with bits
7..).  :func:`case` picks LBO and SBO that differ (so that swapping them gives another
layout) and places A at shared byte 0, B at 8192; :func:`run_emu` runs the kernel in the
emulation, :class:`GpuProbe` on a device (sm_90a).
"""
from __future__ import annotations

import ctypes
import os
import subprocess
import tempfile
from typing import Dict, Tuple

import numpy as np

from ..codegen import cuda_emu
from ..codegen.cuda_hopper import TRANS_SUFFIX, prelude
from ..errors import BuildError

N = 128            # the probe's wgmma: m64n128k16
ARENA = 32768      # shared bytes: A at 0, B at B_AT
B_AT = 8192
#: the descriptor's swizzle modes and the bytes of a swizzled row
MODES = {"none": 0, "128B": 1, "64B": 2, "32B": 3}
ROW = {"128B": 128, "64B": 64, "32B": 32}

KERNEL = r"""
static __device__ __forceinline__ void tc_probe_NAME(const unsigned char* __restrict__ image,
                                                    const unsigned* __restrict__ desc,
                                                    float* __restrict__ D) {
#if defined(TECOMP_CUDA_EMU)
  __shared__ __align__(1024) unsigned char raw[ARENA];
  unsigned char* smem = raw;
  tc_smem_window(raw, ARENA);
#else
  __shared__ __align__(1024) unsigned char raw[ARENA + 1024];
  unsigned char* smem = raw + ((1024u - ((unsigned)__cvta_generic_to_shared(raw) & 1023u)) & 1023u);
#endif
  const int t = threadIdx.x;
  for (int i = t; i < ARENA; i += 128) smem[i] = image[i];
  tc_fence_proxy_async();   // (the stores, through the generic proxy, before wgmma's reads)
  __syncthreads();
  tc_fence_proxy_async();
  float d[64];
  for (int i = 0; i < 64; ++i) d[i] = 0.0f;
  const unsigned long long da = tc_wgmma_desc(smem + desc[0], desc[1], desc[2], desc[3]);
  const unsigned long long db = tc_wgmma_desc(smem + desc[4], desc[5], desc[6], desc[7]);
  tc_wgmma_fence();
  WGMMA(d, da, db, 0);
  tc_wgmma_commit();
  tc_wgmma_wait<0>();
  const int w = t / 32, g = (t % 32) / 4, q = t % 4;
  for (int i = 0; i < 64; ++i)
    D[(16 * w + g + 8 * ((i / 2) % 2)) * 128 + 8 * (i / 4) + 2 * q + i % 2] = d[i];
}
"""

_VARIANTS = [(ta, tb, bf) for ta in (0, 1) for tb in (0, 1) for bf in (0, 1)]


def source(device: bool = False) -> str:
    """The probe's text with an entry per (imm-trans-a, imm-trans-b, bf16); ``device``:
    for nvcc, else with the emulation's launch wrappers."""
    out = [prelude("static __device__ __forceinline__"), f"#define ARENA {ARENA}"]
    for ta, tb, bf in _VARIANTS:
        name = f"{ta}{tb}{bf}"
        wgmma = f"tc_wgmma_m64n{N}k16_{'bf16' if bf else 'f16'}{TRANS_SUFFIX[ta, tb]}"
        out.append(KERNEL.replace("NAME", name).replace("WGMMA", wgmma))
        if device:
            out.append(f'extern "C" __global__ void __launch_bounds__(128) tc_probe_{name}_k('
                       "const unsigned char* __restrict__ image, const unsigned* __restrict__ "
                       f"desc, float* __restrict__ D) {{ tc_probe_{name}(image, desc, D); }}")
            continue
        out.append(f"static void entry_{name}(void** a) {{ tc_probe_{name}("
                   "(const unsigned char*)a[0], (const unsigned*)a[1], (float*)a[2]); }\n"
                   f'extern "C" int run_{name}(void** args, const long long* dims, int mode, '
                   "char* err, int errlen) {\n"
                   f"  return tecomp_emu::launch(&entry_{name}, args, dims, mode, 1, 1 << 20, "
                   "err, errlen);\n}")
    return "\n".join(out) + "\n"


def offsets(rows: int, mn_major: bool, mode: str, lbo: int, sbo: int) -> np.ndarray:
    """``[rows, 16]``: the byte offset of element (row of M or N, k) from the descriptor's
    start, before the swizzle (the canonical layouts of the module doc; LBO and SBO in
    bytes)."""
    T = 8
    x = np.arange(rows)[:, None]    # M or N
    y = np.arange(16)[None, :]      # k
    le, se = lbo // 2, sbo // 2     # in elements
    if mode == "none":
        if mn_major:
            off = x % T + (x // T) * se + (y % 8) * T + (y // 8) * le
        else:
            off = (x % 8) * T + (x // 8) * se + y % T + (y // T) * le
    else:
        W = ROW[mode] // 16
        if mn_major:
            off = x % T + (x // T % W) * T + (x // (W * T)) * le + (y % 8) * W * T + \
                (y // 8) * se
        else:
            off = (x % 8) * W * T + (x // 8) * se + y % T + (y // T) * T
    return off * 2


def swizzled(addr: np.ndarray, mode: str) -> np.ndarray:
    """Byte addresses as the swizzle mode moves them (``Swizzle<B, 4, 3>``)."""
    if mode == "none":
        return addr
    b = {"32B": 1, "64B": 2, "128B": 3}[mode]
    return addr ^ (((addr >> 7) & ((1 << b) - 1)) << 4)


def case(rows: int, mn_major: bool, mode: str, flip: bool = False) -> Tuple[int, int]:
    """(LBO, SBO) in bytes of a ``rows x 16`` operand, distinct values: the blocks the
    layout repeats packed one way round (``flip``: the other)."""
    if mode == "none":   # 128-byte core matrices, LBO along k (2), SBO along M/N
        return (128, 256) if not flip else (128 * rows // 8, 128)
    atom = 8 * ROW[mode]   # 8 rows of the swizzle's bytes
    if not mn_major:       # (LBO unused for K-major swizzled: give 16, the ISA's "1")
        return 16, atom
    chunks = rows * 2 // ROW[mode]
    # LBO: the next chunk of M/N, SBO: the next 8 k
    return (atom, chunks * atom) if flip else (2 * atom, atom)


def image(a_bits: np.ndarray, b_bits: np.ndarray, ta: int, tb: int, mode_a: str,
          mode_b: str, flip: bool = False):
    """(the shared arena's bytes, the 8 descriptor words: A's start, LBO, SBO, mode,
    B's) for A ``[64, 16]`` and B ``[128, 16]`` (16-bit patterns)."""
    img = np.zeros(ARENA, np.uint8)
    words = []
    for bits, at, mn, mode in ((a_bits, 0, ta, mode_a), (b_bits, B_AT, tb, mode_b)):
        rows = bits.shape[0]
        lbo, sbo = case(rows, bool(mn), mode, flip)
        addr = swizzled(at + offsets(rows, bool(mn), mode, lbo, sbo), mode)
        if len(np.unique(addr)) != addr.size or addr.max() + 2 > ARENA:
            raise ValueError(f"probe layout overlaps or overflows ({mode}, mn={mn})")
        img.view(np.uint16)[addr // 2] = bits
        words += [at, lbo, sbo, MODES[mode]]
    return img, np.array(words, np.uint32)


_LIBS: Dict[str, ctypes.CDLL] = {}


def emu_library() -> ctypes.CDLL:
    """The probe compiled for the emulation (once per process)."""
    if "emu" in _LIBS:
        return _LIBS["emu"]
    cxx = cuda_emu.find_cxx()
    d = tempfile.mkdtemp(prefix="tecomp-wgmma-probe-")
    with open(os.path.join(d, cuda_emu.HEADER_NAME), "w") as f:
        f.write(cuda_emu.header_text())
    with open(os.path.join(d, "k.cc"), "w") as f:
        f.write(f'#include "{cuda_emu.HEADER_NAME}"\n' + source())
    out = os.path.join(d, "k.so")
    proc = subprocess.run([cxx, *cuda_emu.CXX_FLAGS, "-I", d, "-o", out,
                           os.path.join(d, "k.cc")], capture_output=True, text=True)
    if proc.returncode:
        raise BuildError(f"compiling the wgmma probe for the emulation failed:\n"
                         f"{proc.stderr[:6000]}")
    _LIBS["emu"] = ctypes.CDLL(out)
    return _LIBS["emu"]


def run_emu(img: np.ndarray, words: np.ndarray, ta: int, tb: int, bf16: bool) -> np.ndarray:
    """``D [64, 128]`` of the probe in the emulation (one warpgroup)."""
    lib = emu_library()
    d = np.full((64, N), np.nan, np.float32)
    img, words = np.ascontiguousarray(img), np.ascontiguousarray(words)
    ptrs = (ctypes.c_void_p * 3)(img.ctypes.data, words.ctypes.data, d.ctypes.data)
    dims = (ctypes.c_longlong * 6)(1, 1, 1, 128, 1, 1)
    err = ctypes.create_string_buffer(2048)
    fn = getattr(lib, f"run_{ta}{tb}{int(bf16)}")
    fn.restype = ctypes.c_int
    if fn(ptrs, dims, cuda_emu.MODES["serial"], err, len(err)):
        raise BuildError(err.value.decode("utf-8", "replace"))
    return d


class _Source:   # what the runtime's driver compiles: an object with the CUDA C text
    def __init__(self, text: str):
        self.source = text


class GpuProbe:
    """The probe on a device (sm_90a) through tecomp's runtime driver ``drv``."""

    def __init__(self, drv):
        self.drv = drv
        self.mod = drv.compile(_Source(source(device=True)), "sm_90a")

    def run(self, img: np.ndarray, words: np.ndarray, ta: int, tb: int,
            bf16: bool) -> np.ndarray:
        drv = self.drv
        fn = drv.get_function(self.mod, f"tc_probe_{ta}{tb}{int(bf16)}_k")
        host = [np.ascontiguousarray(img), np.ascontiguousarray(words),
                np.full((64, N), np.nan, np.float32)]
        dev = [drv.alloc(x.nbytes) for x in host]
        for p, x in zip(dev, host):
            drv.htod(p, x)
        drv.launch(fn, (1, 1, 1), (128, 1, 1), 0, "PPP", [int(p) for p in dev], stream=0)
        drv.synchronize()
        drv.dtoh(host[2], dev[2])
        return host[2]
