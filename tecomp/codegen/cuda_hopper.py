"""Hopper's (sm_90a) asynchronous tensor-core machinery as device helpers: mbarriers,
bulk asynchronous copies completing on an mbarrier, and ``wgmma.mma_async`` with
shared-memory matrix descriptors.  Each helper is inline PTX on the GPU and, in the CUDA
emulation (``TECOMP_CUDA_EMU``), the per-thread implementation of
``tecomp/codegen/cuda_emu_header.h`` (its "Hopper" section), which checks the misuse the
GPU would hang or corrupt on: a wait on a parity that never completes, a descriptor or
copy outside shared memory, a warpgroup that is not 128 threads, a missing
``wgmma.fence``.

The helpers (``{q}`` is the renderer's qualifier, ``__device__ __forceinline__``)::

    tc_smem_window(base, bytes)        // the emulation's shared arena (no-op on the GPU)
    tc_mbar_init(bar, count)           // mbarrier.init.shared::cta.b64
    tc_mbar_init_fence()               // fence.mbarrier_init + fence.proxy.async
    tc_mbar_arrive(bar)                // mbarrier.arrive.shared::cta.b64
    tc_mbar_arrive_expect_tx(bar, n)   // mbarrier.arrive.expect_tx.shared::cta.b64
    tc_mbar_wait(bar, parity)          // mbarrier.try_wait.parity.shared::cta.b64 loop
    tc_bulk_g2s(dst, src, n, bar)      // cp.async.bulk.shared::cluster.global
                                       //   .mbarrier::complete_tx::bytes
    tc_tma_load_2d(dst, map, c0, c1, bar)
    tc_tma_load_3d(dst, map, c0, c1, c2, bar)
                                       // cp.async.bulk.tensor.{2,3}d.shared::cluster.global
                                       //   .mbarrier::complete_tx::bytes (TMA: the box of a
                                       //   tensor map, a const __grid_constant__
                                       //   tc_tensor_map kernel parameter)
    tc_tma_prefetch(map)               // prefetch.tensormap
    tc_wgmma_desc(p, lbo, sbo, swz)    // a shared-memory matrix descriptor (64 bits)
    tc_fence_proxy_async()             // fence.proxy.async.shared::cta
    tc_wgmma_fence()                   // wgmma.fence.sync.aligned
    tc_wgmma_commit()                  // wgmma.commit_group.sync.aligned
    tc_wgmma_wait<N>()                 // wgmma.wait_group.sync.aligned N
    tc_wgmma_m64n<N>k16_<t>(d, da, db, scale_d)
                                       // wgmma.mma_async.sync.aligned.m64nNk16.f32.t.t
    tc_wgmma_m64n<N>k16_<t>_tb / _ta / _tab(...)
                                       // the same, B N-major / A M-major / both in shared
                                       //   memory (imm-trans-b / imm-trans-a 1)

``tc_bulk_g2s`` copies contiguous bytes (a tile pre-tiled in global memory, already in its
shared layout); ``tc_tma_load_*d`` copy a box of a tensor (TMA), swizzled on the way and
zero-filled outside the tensor, through a tensor map built on the host
(:mod:`tecomp.target.tma`: checked there, then encoded by the driver's
``cuTensorMapEncodeTiled``, or in the emulation's own layout, whose ``tma_load``
implements the box, element strides, swizzle, zero fill and complete_tx).
"""
from __future__ import annotations

from typing import Dict

from ..errors import ScheduleError, TargetError
from ..target.cuda import sm_number
# the descriptors' swizzle modes: the tensor intrinsics' (te) facts, read here too
from ..te.intrin_wgmma import SWIZZLE, SWIZZLE_ROW_BYTES, TRANS_SUFFIX  # noqa: F401

#: warpgroup: the 4 consecutive warps that issue one wgmma together
WARPGROUP = 128
#: the N extents of wgmma.mma_async.m64nNk16 for f16 / bf16 operands (PTX ISA, "Matrix
#: shape": N a multiple of 8 from 8 to 256)
WGMMA_N = tuple(range(8, 257, 8))
WGMMA_DTYPES = {"float16": "f16", "bfloat16": "bf16"}


def wgmma_desc(address: int, lbo: int, sbo: int, swizzle: str = "128B") -> int:
    """The 64-bit shared-memory matrix descriptor of a wgmma operand (the PTX ISA's
    "Matrix Descriptor Format"): bits 0-13 the start address, 16-29 the leading
    dimension byte offset, 32-45 the stride dimension byte offset, each in units of 16
    bytes (the address taken modulo 2**18), bits 49-51 the matrix base offset (0 here:
    tiles aligned to their swizzle pattern's repeat), 62-63 the swizzle mode
    (:data:`SWIZZLE`).  The same encoding as the ``tc_wgmma_desc`` helper."""
    if swizzle not in SWIZZLE:
        raise ScheduleError(f"wgmma descriptor: swizzle {swizzle!r:.20} is not one of "
                            f"{', '.join(SWIZZLE)}")
    for name, v in (("address", address), ("lbo", lbo), ("sbo", sbo)):
        if not isinstance(v, int) or v < 0 or v % 16 or (name != "address" and v >= 1 << 18):
            raise ScheduleError(f"wgmma descriptor: {name}={v!r:.20} must be a multiple of 16 "
                                "bytes (the offsets below 2**18)")
    return (((address & 0x3FFFF) >> 4) | ((lbo >> 4) & 0x3FFF) << 16
            | ((sbo >> 4) & 0x3FFF) << 32 | SWIZZLE[swizzle] << 62)


def check_wgmma_target(arch) -> None:
    """TargetError unless ``arch`` is ``sm_90a`` or unnamed (``cuda`` without ``-arch``:
    the device's own, checked by nvcc's ``#error`` when it compiles)."""
    if arch and str(arch) != "sm_90a":
        raise TargetError(
            f"wgmma.mma_async (the cuda.wgmma_* intrinsics, WmmaConfig(family='wgmma')) needs "
            f"target 'cuda -arch=sm_90a' (Hopper, with its architecture-specific features); "
            f"this function is built for {arch}.  Use the mma.sync family "
            "(WmmaConfig(..., family='mma')) below sm_90a")


def check_wgmma(arch, n: int, dtype: str, threads: int) -> None:
    """Raise the error a wgmma schedule the hardware cannot run gets at build time:
    TargetError for an architecture other than ``sm_90a`` (wgmma is an sm_90a feature:
    ``sm_90`` code may not use it, and later architectures replace it), ScheduleError
    for an N that ``m64nNk16`` does not have, a dtype other than float16 / bfloat16, or a
    block whose consumer threads are not whole warpgroups of 128."""
    if not arch or str(arch) != "sm_90a":
        have = f"-arch={arch}" if arch else "no -arch"
        raise TargetError(
            f"wgmma.mma_async needs target 'cuda -arch=sm_90a' (Hopper, with its "
            f"architecture-specific features); the target has {have}.  Use the mma.sync "
            f"family (WmmaConfig(..., family='mma')) below sm_90a")
    if n not in WGMMA_N:
        raise ScheduleError(f"wgmma.m64nNk16: N={n!r:.20} is not a multiple of 8 in [8, 256]")
    if dtype not in WGMMA_DTYPES:
        raise ScheduleError(f"wgmma.m64nNk16 takes float16 or bfloat16 operands, not {dtype!r:.20}")
    if not isinstance(threads, int) or threads <= 0 or threads % WARPGROUP:
        raise ScheduleError(
            f"a warpgroup is {WARPGROUP} threads (4 warps); the consumer threads number "
            f"{threads!r:.20}: give them a multiple of {WARPGROUP}")


def needs_sm90(arch) -> bool:
    """Whether ``arch`` can run the mbarrier / bulk-copy helpers (sm_90 and later)."""
    return bool(arch) and sm_number(str(arch)) >= 90


_EMU, _GPU = "#if defined(TECOMP_CUDA_EMU)", "#else"
_NEED90 = ('#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900\n'
           '#error "tecomp: mbarrier expect_tx / cp.async.bulk / TMA need sm_90 or later"')
_NEED90A = ('#elif defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)\n'
            '#error "tecomp: wgmma needs -arch=sm_90a"')


def _helper(comment: str, sig: str, emu: str, gpu: str, need: str = _NEED90) -> str:
    """One helper's text: ``{q} sig { #if emu / #elif too old: #error / #else gpu }``
    (braces doubled for the renderer's ``format(q=...)``)."""
    body = f"{_EMU}\n{emu}\n{need}\n{_GPU}\n{gpu}\n#endif"
    text = f"{comment}\n{{q}} {sig} {{\n{body}\n}}"
    return text.replace("{", "{{").replace("}", "}}").replace("{{q}}", "{q}")


_SMEM = "(unsigned)__cvta_generic_to_shared"


def _wgmma(n: int, t: str, ta: int = 0, tb: int = 0) -> str:
    regs = n // 2
    dlist = ", ".join(f"%{i}" for i in range(regs))
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(regs))
    gpu = (f'  asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{regs + 2}, 0;\\n"\n'
           f'               "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{t}.{t} "\n'
           f'               "{{{dlist}}}, %{regs}, %{regs + 1}, p, 1, 1, {ta}, {tb};\\n}}\\n"\n'
           f'               : {outs}\n'
           f'               : "l"(da), "l"(db), "r"(scale_d));')
    major = (f"A ({'M' if ta else 'K'}-major)", f"B ({'N' if tb else 'K'}-major)")
    return _helper(
        f"// d (= or +=) A . B^T, wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{t}.{t}: {major[0]}\n"
        f"// (64 x 16) and {major[1]} (N x 16) in shared memory (descriptors da, db;\n"
        f"// imm-trans-a {ta}, imm-trans-b {tb}), d the thread's {regs} floats of the 64 x {n}\n"
        "// accumulator (the PTX ISA's wgmma D fragment: d[i] = D[16 w + g + 8 ((i / 2) % 2)]\n"
        "// [8 (i / 4) + 2 q + i % 2], w the warp in the warpgroup, g = lane / 4, q = lane %\n"
        "// 4); scale_d 0: d = A . B^T.",
        f"void tc_wgmma_m64n{n}k16_{t}{TRANS_SUFFIX[ta, tb]}(float* d, unsigned long long da, "
        "unsigned long long db, int scale_d)",
        f"  tecomp_emu::wgmma_m64nNk16(d, da, db, scale_d, {n}, {int(t == 'bf16')}, {ta}, {tb});",
        gpu, _NEED90A)


#: the CUtensorMap of a kernel parameter (``const __grid_constant__ tc_tensor_map``): 128
#: opaque bytes, 64-byte aligned, encoded on the host (tecomp.target.tma: by the driver's
#: cuTensorMapEncodeTiled for a GPU, in the emulation's own layout for TECOMP_CUDA_EMU)
_TENSOR_MAP_TYPE = (
    "#ifndef TECOMP_TC_TENSOR_MAP\n#define TECOMP_TC_TENSOR_MAP\n"
    "// A TMA tensor map (CUtensorMap): 128 opaque bytes encoded on the host.\n"
    "struct __align__(64) tc_tensor_map {{ unsigned long long opaque[16]; }};\n#endif\n")


def _tma_load(rank: int) -> str:
    coords = ", ".join(f"c{i}" for i in range(rank))
    regs = ", ".join(f"%{i + 2}" for i in range(rank))
    ins = ", ".join(f'"r"(c{i})' for i in range(rank))
    return _TENSOR_MAP_TYPE + _helper(
        f"// cp.async.bulk.tensor.{rank}d.shared::cluster.global.mbarrier::complete_tx::bytes:\n"
        f"// the box of tensor map `map` at element coordinates ({coords}) (innermost first;\n"
        "// those outside the tensor read as zeros) to shared dst (128-byte aligned; the\n"
        "// swizzle's repeat for a swizzled map), completing the box's bytes on `bar`.",
        f"void tc_tma_load_{rank}d(void* dst, const tc_tensor_map* map, "
        + ", ".join(f"int c{i}" for i in range(rank)) + ", unsigned long long* bar)",
        f"  const int c[{rank}] = {{{coords}}};\n"
        f"  tecomp_emu::tma_load(dst, map, c, {rank}, bar);\n  tecomp_emu::note_progress();",
        f'  asm volatile("cp.async.bulk.tensor.{rank}d.shared::cluster.global.mbarrier::"\n'
        f'               "complete_tx::bytes [%0], [%1, {{{regs}}}], [%{rank + 2}];"\n'
        f'               :: "r"({_SMEM}(dst)), "l"(map), {ins}, "r"({_SMEM}(bar))\n'
        '               : "memory");')


HOPPER_HELPERS: Dict[str, str] = {
    "tc_smem_window": _helper(
        "// The emulation's shared arena (where descriptors and mbarrier addresses point);\n"
        "// nothing on the GPU, whose shared window is the block's.",
        "void tc_smem_window(void* base, unsigned long long bytes)",
        "  tecomp_emu::set_smem_window(base, bytes);", "  (void)base; (void)bytes;",
        "#elif 0"),
    "tc_mbar_init": _helper(
        "// mbarrier.init.shared::cta.b64: phase 0, `count` arrivals expected per phase.",
        "void tc_mbar_init(unsigned long long* bar, unsigned count)",
        "  tecomp_emu::mbar_init(bar, count);",
        f'  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"({_SMEM}(bar)), '
        '"r"(count) : "memory");'),
    "tc_mbar_init_fence": _helper(
        "// Make initialized mbarriers visible to the async proxy (the bulk copies' side).",
        "void tc_mbar_init_fence()", "",
        '  asm volatile("fence.mbarrier_init.release.cluster;\\n"\n'
        '               "fence.proxy.async.shared::cta;" ::: "memory");'),
    "tc_mbar_arrive": _helper(
        "// mbarrier.arrive.shared::cta.b64: one arrival on the current phase.",
        "void tc_mbar_arrive(unsigned long long* bar)",
        '  tecomp_emu::mbar_tx_and_arrive("mbarrier.arrive", bar, 0, 1);',
        f'  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"({_SMEM}(bar)) '
        ': "memory");'),
    "tc_mbar_arrive_expect_tx": _helper(
        "// mbarrier.arrive.expect_tx.shared::cta.b64: the phase also waits for `bytes` of\n"
        "// asynchronous copies (their complete_tx), then one arrival.",
        "void tc_mbar_arrive_expect_tx(unsigned long long* bar, unsigned bytes)",
        '  tecomp_emu::mbar_tx_and_arrive("mbarrier.arrive.expect_tx", bar, (long long)bytes, 1);',
        '  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"\n'
        f'               :: "r"({_SMEM}(bar)), "r"(bytes) : "memory");'),
    "tc_mbar_wait": _helper(
        "// Wait until the phase of parity `parity` of the mbarrier has completed\n"
        "// (mbarrier.try_wait.parity.shared::cta.b64 until it answers true).",
        "void tc_mbar_wait(unsigned long long* bar, unsigned parity)",
        "  tecomp_emu::mbar_wait(bar, parity);",
        "  unsigned done = 0;\n"
        "  while (!done)\n"
        '    asm volatile("{\\n.reg .pred p;\\n"\n'
        '                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\\n"\n'
        '                 "selp.u32 %0, 1, 0, p;\\n}"\n'
        f'                 : "=r"(done) : "r"({_SMEM}(bar)), "r"(parity) : "memory");'),
    "tc_bulk_g2s": _helper(
        "// cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes: `bytes` (a\n"
        "// multiple of 16, both ends 16-byte aligned) from global src to shared dst,\n"
        "// completing `bytes` of the mbarrier's tx-count when they have landed.",
        "void tc_bulk_g2s(void* dst, const void* src, unsigned bytes, unsigned long long* bar)",
        "  tecomp_emu::bulk_g2s(dst, src, bytes, bar);\n  tecomp_emu::note_progress();",
        '  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes "\n'
        '               "[%0], [%1], %2, [%3];"\n'
        f'               :: "r"({_SMEM}(dst)), "l"(src), "r"(bytes), "r"({_SMEM}(bar))\n'
        '               : "memory");'),
    **{f"tc_tma_load_{r}d": _tma_load(r) for r in range(1, 6)},
    "tc_tma_prefetch": _TENSOR_MAP_TYPE + _helper(
        "// prefetch.tensormap: bring the tensor map (a __grid_constant__ kernel parameter)\n"
        "// into the TMA unit's cache ahead of the first copy through it.",
        "void tc_tma_prefetch(const tc_tensor_map* map)", "  (void)map;",
        '  asm volatile("prefetch.tensormap [%0];" :: "l"(map) : "memory");'),
    "tc_wgmma_desc": _helper(
        "// A wgmma shared-memory matrix descriptor (PTX ISA, \"Matrix Descriptor Format\"):\n"
        "// start address >> 4 in bits 0-13, leading byte offset >> 4 in 16-29, stride byte\n"
        "// offset >> 4 in 32-45, base offset 0 (49-51), swizzle mode in 62-63 (0 none,\n"
        "// 1 128B, 2 64B, 3 32B).",
        "unsigned long long tc_wgmma_desc(const void* p, unsigned lbo, unsigned sbo, "
        "unsigned swizzle)",
        '  unsigned a = tecomp_emu::smem_offset("wgmma descriptor", p, 16, 16);\n'
        "  return (unsigned long long)((a & 0x3FFFFu) >> 4)\n"
        "       | (unsigned long long)((lbo >> 4) & 0x3FFFu) << 16\n"
        "       | (unsigned long long)((sbo >> 4) & 0x3FFFu) << 32\n"
        "       | (unsigned long long)(swizzle & 3u) << 62;",
        f"  unsigned a = {_SMEM}(p);\n"
        "  return (unsigned long long)((a & 0x3FFFFu) >> 4)\n"
        "       | (unsigned long long)((lbo >> 4) & 0x3FFFu) << 16\n"
        "       | (unsigned long long)((sbo >> 4) & 0x3FFFu) << 32\n"
        "       | (unsigned long long)(swizzle & 3u) << 62;", _NEED90A),
    "tc_fence_proxy_async": _helper(
        "// fence.proxy.async.shared::cta: shared memory written through the generic proxy\n"
        "// (stores, cp.async) made visible to the async proxy (wgmma's operand reads, bulk\n"
        "// copies) after the barrier that published it (PTX ISA, \"Memory Consistency\n"
        "// Model: proxies\").",
        "void tc_fence_proxy_async()", "",
        '  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");'),
    "tc_wgmma_fence": _helper(
        "// wgmma.fence.sync.aligned: order the accumulator registers and shared memory\n"
        "// written before it ahead of the next wgmma.mma_async.",
        "void tc_wgmma_fence()", "  tecomp_emu::wgmma_fence();",
        '  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");', _NEED90A),
    "tc_wgmma_commit": _helper(
        "// wgmma.commit_group.sync.aligned: the wgmma.mma_async issued since the last\n"
        "// commit form one group.",
        "void tc_wgmma_commit()", "",
        '  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");', _NEED90A),
    "tc_wgmma_wait": "template <int N>\n" + _helper(
        "// wgmma.wait_group.sync.aligned N: all but the N latest groups have completed\n"
        "// (their accumulators may be read, their shared operands overwritten).",
        "void tc_wgmma_wait()", "  tecomp_emu::wgmma_wait_group(N);",
        '  asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(N) : "memory");',
        _NEED90A),
    **{f"tc_wgmma_m64n{n}k16_{t}{sfx}": _wgmma(n, t, *tr) for tr, sfx in TRANS_SUFFIX.items()
       for t in ("f16", "bf16") for n in WGMMA_N},
}

#: the helpers that make their threads wait for each other (the emulation then runs the
#: kernel's threads as fibers or blocking OS threads: has_barrier)
HOPPER_COLLECTIVES = tuple(n for n in HOPPER_HELPERS if n not in ("tc_wgmma_desc", "tc_tma_prefetch"))


def prelude(qualifier: str = "static __device__ __forceinline__") -> str:
    """Every helper's text, for a hand-written kernel (tests, the GPU session's checks)."""
    return "\n".join(text.format(q=qualifier) for text in HOPPER_HELPERS.values()) + "\n"
