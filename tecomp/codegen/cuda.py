"""CUDA C source generation for a PrimFunc (compiling it with nvcc:
:mod:`tecomp.runtime.nvcc`).

The renderer is the shared C walk (:mod:`tecomp.codegen.c_source`) plus a table of
strings (``half`` and its conversions, ``__expf``, ``rsqrtf``, ``__int_as_float``
infinities, ``__device__ __forceinline__`` helpers) and a few overrides: thread loops,
``__shared__`` arrays, ``__syncthreads()``, the kernel signature.

Kernels
-------
The lowering's codegen phase splits the function into the host's part and its kernels
(:mod:`tecomp.lower.device_split`: the rule, the launch sizes, the parameters, the
resource limits); this module renders each ``device_kernel`` as ONE ``__global__``
function, launched in order.  A thread loop does not exist on the GPU: its variable
becomes ``(min + (int)blockIdx.x)``.  When loops of one tag have different extents (two
stages computed at the same block with different ``threadIdx.x`` extents), the launch
uses the largest and the smaller loops get ``if (((int)threadIdx.x) < extent)``.  A
shared or local buffer with an extent of 0 (a tile whose region is empty) is declared
with one element, which its loops never touch.

A thread loop nested inside a loop of the same tag (a stage computed at the compute's
thread loops and bound to the same thread axes, e.g. a cooperative shared-memory load)
reuses the enclosing loop's threads: its extent must not exceed the enclosing one, and
its body must not use the enclosing loop's variable (on the GPU the two are one index).

Loops of tag ``vthread`` are emitted as serial loops (one thread runs every virtual
thread in turn), which is what virtual threads mean when no barrier sits inside them.

``__syncthreads()`` must be reached by all threads of a block: one under a condition
(or loop bound, or thread-loop guard) that differs between threads is a BuildError.

Cross-thread reduction: ``AttrStmt("cross_thread_reduce", (reducer, source,
BufferLoad(dest, indices), ("threadIdx.x", ...)), body)`` combines ``source`` over the
threads that differ only in the given thread axes and stores the result in ``dest``
for every thread, then runs ``body`` (see :meth:`CudaRenderer.cross_thread_reduce`).

Copies: a vectorized loop that copies 8 or 16 contiguous bytes between global and shared
memory becomes one move (``tc_move16``: a ``uint4``) where both addresses are aligned at
run time, else its element loop; where both are provably aligned (each a shared array or
a workspace, at an offset that is a multiple of the move), the move alone.  Inside ``AttrStmt("async_copy")`` (the copies of a
double-buffered tile, :mod:`tecomp.lower.double_buffer`) a copy from global to shared
memory is a ``cp.async`` on sm_80+ (``tc_cp_async4/8/16``), and in a kernel that issues
them every ``__syncthreads()`` is preceded by ``tc_cp_async_wait()`` (``cp.async.wait_all``),
so a barrier still means the shared memory written before it is there.  Before sm_80 and
in the emulation they are plain copies.

Determinism: the same PrimFunc gives byte-identical source.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Dict, List, Optional

from ..errors import BuildError, InternalError
from ..ir import dtype as _dt
from ..ir import op as _op
from ..ir.expr import (
    LT, Add, And, Buffer, BufferLoad, Call, Cast, Const, Expr, Mul, Select, Sub, Var, same_as,
)
from ..ir.functor import Visitor, collect, free_vars, reads_memory, substitute, uses_var
from ..ir.simplify import simplify
from ..ir.names import comment as _comment
from ..runtime.cuda import CudaModule
from ..runtime.cuda_kernels import WORKSPACE_ALIGN, CudaSource, KernelInfo, KernelParam
from ..ir.printer import to_str
from ..ir.stmt import (
    Allocate, AttrStmt, BufferStore, Evaluate, For, IfThenElse, LetStmt, PrimFunc, SeqStmt, Stmt,
    TensorIntrinCall,
)
from ..lower.double_buffer import ASYNC_COPY, ASYNC_GROUP, ASYNC_WAIT
from ..lower.device_split import (  # noqa: F401  (is_vthread, CROSS_THREAD_REDUCE: re-exported)
    CROSS_THREAD_REDUCE, buffers_in, dims_text, is_vthread, kernels_of, shared_array_bytes,
    stored_buffers, unpack_cross_thread_reduce,
)
from ..lower.pipeline import prepare_for_codegen
from ..lower.tensorize import operand_strides
from ..target import as_target
from ..te.intrin_cuda import tile_layout
from .c_source import CSource, Namer, c_identifier, c_string, declared_size
from .cuda_export import export_cuda_library

# thread tag -> (launch field, dimension)
THREAD_TAGS = {
    "blockIdx.x": ("grid", 0), "blockIdx.y": ("grid", 1), "blockIdx.z": ("grid", 2),
    "threadIdx.x": ("block", 0), "threadIdx.y": ("block", 1), "threadIdx.z": ("block", 2),
}
#: the AttrStmt key of ``pragma(axis, "min_blocks_per_sm", n)`` (``__launch_bounds__``)
MIN_BLOCKS_PRAGMA = "pragma_min_blocks_per_sm"
# the CUDA limits (their one home is tecomp.target)
from ..target import (  # noqa: E402,F401
    FRAGMENT_SCOPES, MAX_BLOCK_DIMS, MAX_GRID_DIMS, MAX_STATIC_SHARED_BYTES,
    MAX_THREADS_PER_BLOCK, MMA_MIN_SM, SHARED_ALIGN, WARP_SIZE, sm_number,
)
from .cuda_hopper import HOPPER_HELPERS, WARPGROUP, check_wgmma_target
from ..target import tma as _tma
from ..lower.tma_pipeline import (BUFFER_SWIZZLE, TMA_CONSUME, TMA_COPY, TMA_PIPELINE,
                                  TMA_PRODUCE, box_of)

#: the dtype of a kernel parameter that is a TMA tensor map (KernelParam.obj: its TmaBox)
TENSOR_MAP = "tensor_map"
from .cuda_intrin import (MMA_FRAGMENTS, MMA_HELPERS, MMA_TILE_REGS, CudaIntrinBuilder,
                          CudaIntrinView)

#: what a tensor-core fragment of each scope holds, as nvcuda::wmma's fragment type
#: (m16n16k16; the operands row major) and the dtype its buffer must have
_FRAGMENT_TYPES = {
    "wmma.matrix_a": ("nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, {elem}, "
                      "nvcuda::wmma::{layout}>", ("float16", "bfloat16")),
    "wmma.matrix_b": ("nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, {elem}, "
                      "nvcuda::wmma::{layout}>", ("float16", "bfloat16")),
    "wmma.accumulator": ("nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float>",
                         ("float32",)),
}

#: the bytes a wmma tile in memory must be aligned to (load_matrix_sync, store_matrix_sync)
WMMA_ALIGN = 32


def param_ctype(p: KernelParam) -> str:
    """The C type of a kernel parameter in the signature."""
    if p.dtype == TENSOR_MAP:   # a TMA tensor map, by value (its address taken in the kernel)
        return "const __grid_constant__ tc_tensor_map"
    if p.is_buffer:
        base = CudaRenderer.TYPES[p.dtype]
        return f"{'const ' if p.is_const else ''}{base}* __restrict__"
    return CudaRenderer.TYPES[_dt.compute_dtype(p.dtype)]  # a float16 scalar is a float


# ---------------------------------------------------------------------------------
# the renderer


@dataclasses.dataclass(frozen=True, slots=True)
class _CheckedIndex(Expr):
    """``index``, checked on the device to lie in ``[0, extent)`` (a data-dependent index:
    a gather's id; ``site``: the failure's text), rendered by :class:`CudaRenderer`."""

    index: Expr
    extent: Expr
    site: str
    dtype: str


def _conjuncts(c) -> list:
    return _conjuncts(c.a) + _conjuncts(c.b) if isinstance(c, And) else [c]


def _contiguous_innermost(buf: Buffer, idx, var: Var) -> bool:
    """Whether ``buf[idx]`` steps one element per ``var``: ``var`` only in the last index,
    as ``that index + var``, whose stride is 1 (what the flat index shows too, but
    through the widening casts of int64 indices -- a tensor past 2**31 elements -- the
    simplifier does not see it)."""
    if not idx or (buf.strides is not None and not (
            isinstance(buf.strides[-1], Const) and buf.strides[-1].value == 1)):
        return False
    if any(uses_var(i, var) for i in idx[:-1]):
        return False
    last = idx[-1]
    base = simplify(substitute(last, {var: Const(0, var.dtype)}))
    return simplify(_op.sub(last, base)) is var


def _multiple_of(e: Expr, m: int) -> bool:
    """Whether the integer index ``e`` is provably a multiple of ``m`` (sums, products
    by constants, widening casts: the int64 indices of large tensors; else the
    simplifier's ``e % m``)."""
    if m == 1:
        return True
    if isinstance(e, Const):
        return int(e.value) % m == 0
    if isinstance(e, (Add, Sub)):
        return _multiple_of(e.a, m) and _multiple_of(e.b, m)
    if isinstance(e, Mul):
        for c, x in ((e.a, e.b), (e.b, e.a)):
            if isinstance(c, Const):
                return _multiple_of(x, m // math.gcd(int(c.value), m))
        return _multiple_of(e.a, m) or _multiple_of(e.b, m)
    if isinstance(e, Cast) and _dt.is_int(e.dtype) and _dt.is_int(e.value.dtype) and \
            _dt.bits(e.dtype) >= _dt.bits(e.value.dtype):
        return _multiple_of(e.value, m)
    if isinstance(e, Select):
        return _multiple_of(e.true_value, m) and _multiple_of(e.false_value, m)
    rem = simplify(_op.floormod(e, Const(m, e.dtype)))
    return isinstance(rem, Const) and rem.value == 0


class CudaRenderer(CSource):
    TYPES = dict(CSource.TYPES)
    HELPER_QUALIFIER = "__device__ __forceinline__"
    INF_F32, NAN_F32 = "__int_as_float(0x7f800000)", "__int_as_float(0x7fc00000)"
    INF_F64 = "__longlong_as_double(0x7ff0000000000000LL)"
    NAN_F64 = "__longlong_as_double(0x7ff8000000000000LL)"
    INT_MINMAX = "{op}({a}, {b})"
    MATH_F32 = dict(CSource.MATH_F32, rsqrt="rsqrtf({0})", fast_exp="__expf({0})")
    MATH_F64 = dict(CSource.MATH_F64, rsqrt="rsqrt({0})")
    EXTRA_HELPERS = {
        "tc_assert_fail": (
            "// A failed run-time check: print it and abort the kernel (the launch fails).\n"
            "__device__ __noinline__ void tc_assert_fail(const char* msg) {{\n"
            "  printf(\"tecomp: check failed in block (%d, %d, %d), thread (%d, %d, %d): %s\\n\",\n"
            "         (int)blockIdx.x, (int)blockIdx.y, (int)blockIdx.z,\n"
            "         (int)threadIdx.x, (int)threadIdx.y, (int)threadIdx.z, msg);\n"
            "  __trap();\n"
            "}}"),
        # tensor intrinsics (tecomp.te.intrin_cuda): 4 bytes as one word, and dp4a, in
        # PTX on the device and in portable C in the emulation
        # a data-dependent index (a gather's id) outside its buffer's dimension
        "tc_index_fail": (
            "// An index read from memory outside its buffer: print it and abort the kernel.\n"
            "__device__ __noinline__ void tc_index_fail(const char* site, long long index,\n"
            "                                           long long extent) {{\n"
            "  printf(\"tecomp: check failed in block (%d, %d, %d), thread (%d, %d, %d): %s: \"\n"
            "         \"index %lld is outside [0, %lld)\\n\", (int)blockIdx.x, (int)blockIdx.y,\n"
            "         (int)blockIdx.z, (int)threadIdx.x, (int)threadIdx.y, (int)threadIdx.z,\n"
            "         site, index, extent);\n"
            "  __trap();\n"
            "}}"),
        "tc_checked_index": (
            "// index, where 0 <= index < extent; else the kernel aborts (tc_index_fail).\n"
            "__device__ __forceinline__ long long tc_checked_index(long long index, long long extent,\n"
            "                                                      const char* site) {{\n"
            "  if ((unsigned long long)index >= (unsigned long long)extent)\n"
            "    tc_index_fail(site, index, extent);\n"
            "  return index;\n"
            "}}"),
        "tc_ld_b32": (
            "// 4 bytes at p as one little-endian word (one load where p is 4-byte aligned).\n"
            "{q} unsigned int tc_ld_b32(const void* p) {{\n"
            "  const unsigned char* b = (const unsigned char*)p;\n"
            "  if ((((unsigned long long)b) & 3ull) == 0) return *(const unsigned int*)b;\n"
            "  return (unsigned int)b[0] | ((unsigned int)b[1] << 8) | ((unsigned int)b[2] << 16)\n"
            "         | ((unsigned int)b[3] << 24);\n"
            "}}"),
        "tc_dp4a_us": (
            "// c + the dot product of the 4 unsigned bytes of a and the 4 signed bytes of b.\n"
            "{q} int tc_dp4a_us(unsigned int a, unsigned int b, int c) {{\n"
            "#if defined(__CUDA_ARCH__)\n"
            "  int d;\n"
            "  asm(\"dp4a.u32.s32 %0, %1, %2, %3;\" : \"=r\"(d) : \"r\"(a), \"r\"(b), \"r\"(c));\n"
            "  return d;\n"
            "#else\n"
            "  unsigned int acc = (unsigned int)c;\n"
            "  for (int k = 0; k < 4; ++k)\n"
            "    acc += (unsigned int)((int)((a >> (8 * k)) & 255u) * (int)(signed char)(b >> (8 * k)));\n"
            "  return (int)acc;\n"
            "#endif\n"
            "}}"),
        "tc_dp4a_ss": (
            "// c + the dot product of the 4 signed bytes of a and of b.\n"
            "{q} int tc_dp4a_ss(unsigned int a, unsigned int b, int c) {{\n"
            "#if defined(__CUDA_ARCH__)\n"
            "  return __dp4a((int)a, (int)b, c);\n"
            "#else\n"
            "  unsigned int acc = (unsigned int)c;\n"
            "  for (int k = 0; k < 4; ++k)\n"
            "    acc += (unsigned int)((int)(signed char)(a >> (8 * k)) * (int)(signed char)(b >> (8 * k)));\n"
            "  return (int)acc;\n"
            "#endif\n"
            "}}"),
        # vector moves and asynchronous copies (vectorized copy loops, double-buffered
        # tiles): one instruction on the device, memcpy in the emulation
        "tc_aligned2": (
            "// Whether a and b are both n-byte aligned (n a power of two).\n"
            "{q} bool tc_aligned2(const void* a, const void* b, unsigned long long n) {{\n"
            "  return ((((unsigned long long)a) | ((unsigned long long)b)) & (n - 1ull)) == 0;\n"
            "}}"),
        "tc_move8": (
            "// 8 bytes from s to d, both 8-byte aligned, as one move.\n"
            "{q} void tc_move8(void* d, const void* s) {{\n"
            "#if defined(__CUDA_ARCH__)\n"
            "  *(uint2*)d = *(const uint2*)s;\n"
            "#else\n"
            "#ifdef TECOMP_CUDA_EMU\n"
            "  tecomp_emu::check_aligned(d, s, 8, \"move\");\n"
            "#endif\n"
            "  __builtin_memcpy(d, s, 8);\n"
            "#endif\n"
            "}}"),
        "tc_swizzled": (
            "// The element offset i of a swizzled tile (double_buffer(swizzle=)), its 16-byte\n"
            "// chunks exchanged within each row's span: chunk ^ (row % 8) over the bytes.\n"
            "{q} long long tc_swizzled(long long i, int hi, int lo, int mask) {{\n"
            "  return i ^ (((i >> hi) & mask) << lo);\n"
            "}}"),
        "tc_swizzled_ptr": (
            "// A pointer into a swizzled tile (its slots on 1024-byte boundaries) moved to\n"
            "// where the swizzle puts that 16-byte chunk (what ldmatrix's row addresses need).\n"
            "template <typename T> {q} T* tc_swizzled_ptr(T* p, unsigned mask) {{\n"
            "  unsigned long long a = (unsigned long long)p;\n"
            "  return (T*)(a ^ (((a >> 7) & mask) << 4));\n"
            "}}"),
        "tc_move16": (
            "// 16 bytes from s to d, both 16-byte aligned, as one move.\n"
            "{q} void tc_move16(void* d, const void* s) {{\n"
            "#if defined(__CUDA_ARCH__)\n"
            "  *(uint4*)d = *(const uint4*)s;\n"
            "#else\n"
            "#ifdef TECOMP_CUDA_EMU\n"
            "  tecomp_emu::check_aligned(d, s, 16, \"move\");\n"
            "#endif\n"
            "  __builtin_memcpy(d, s, 16);\n"
            "#endif\n"
            "}}"),
        **{f"tc_cp_async{n}": (
            f"// {n} bytes from global s to shared d, both {n}-byte aligned: an asynchronous\n"
            f"// copy on sm_80+ (tc_cp_async_wait waits for this thread's), else a plain one.\n"
            f"{{q}} void tc_cp_async{n}(void* d, const void* s) {{{{\n"
            f"#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800\n"
            f"  asm volatile(\"cp.async.{'cg' if n == 16 else 'ca'}.shared.global [%0], [%1], {n};\" "
            f":: \"r\"((unsigned)__cvta_generic_to_shared(d)), \"l\"(s) : \"memory\");\n"
            f"#elif defined(__CUDA_ARCH__)\n"
            f"  *({ {4: 'unsigned int', 8: 'uint2', 16: 'uint4'}[n]}*)d = "
            f"*(const { {4: 'unsigned int', 8: 'uint2', 16: 'uint4'}[n]}*)s;\n"
            f"#else\n"
            f"#ifdef TECOMP_CUDA_EMU\n"
            f"  tecomp_emu::cp_async_written(d, {n});   // (the emulation's bank count)\n"
            f"  tecomp_emu::check_aligned(d, s, {n}, \"cp.async\");\n"
            f"#endif\n"
            f"  __builtin_memcpy(d, s, {n});\n"
            f"#endif\n"
            f"}}}}") for n in (4, 8, 16)},
        **{f"tc_cp_async_zfill{n}": (
            f"// {n} bytes to shared d, both d and global s {n}-byte aligned: the first\n"
            f"// src_bytes (0 to {n}) from s, zeros after them (a tile's edge): an asynchronous\n"
            f"// copy on sm_80+ (cp.async's src-size form; s is not read past src_bytes), else\n"
            f"// a plain one.\n"
            f"{{q}} void tc_cp_async_zfill{n}(void* d, const void* s, int src_bytes) {{{{\n"
            f"#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800\n"
            f"  asm volatile(\"cp.async.{'cg' if n == 16 else 'ca'}.shared.global [%0], [%1], {n}, %2;\" "
            f":: \"r\"((unsigned)__cvta_generic_to_shared(d)), \"l\"(s), \"r\"(src_bytes) : "
            f"\"memory\");\n"
            f"#else\n"
            f"#ifdef TECOMP_CUDA_EMU\n"
            f"  tecomp_emu::cp_async_written(d, {n});   // (the emulation's bank count)\n"
            f"  tecomp_emu::check_aligned(d, s, {n}, \"cp.async\");\n"
            f"#endif\n"
            f"  for (int b = 0; b < {n}; ++b)\n"
            f"    ((char*)d)[b] = b < src_bytes ? ((const char*)s)[b] : (char)0;\n"
            f"#endif\n"
            f"}}}}") for n in (8, 16)},
        "tc_cp_async_wait": (
            "// Wait for this thread's asynchronous copies (before a barrier makes them visible).\n"
            "{q} void tc_cp_async_wait() {{\n"
            "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800\n"
            "  asm volatile(\"cp.async.wait_all;\" ::: \"memory\");\n"
            "#endif\n"
            "}}"),
        "tc_cp_async_commit": (
            "// Close this thread's group of asynchronous copies (a pipeline stage's tile).\n"
            "{q} void tc_cp_async_commit() {{\n"
            "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800\n"
            "  asm volatile(\"cp.async.commit_group;\" ::: \"memory\");\n"
            "#endif\n"
            "}}"),
        **{f"tc_cp_async_wait_group{k}": (
            f"// Wait for this thread's groups of asynchronous copies but the {k} latest.\n"
            f"{{q}} void tc_cp_async_wait_group{k}() {{{{\n"
            f"#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800\n"
            f"  asm volatile(\"cp.async.wait_group {k};\" ::: \"memory\");\n"
            f"#endif\n"
            f"}}}}") for k in range(1, 7)},
        **MMA_HELPERS,   # ldmatrix, mma.sync (the cuda.mma_* intrinsics)
        **HOPPER_HELPERS,   # mbarrier, cp.async.bulk, wgmma (sm_90a; cuda_hopper.py)
    }

    def __init__(self, namer: Namer, launch: Dict[str, Expr], shared: List[Buffer],
                 host_lets: Optional[Dict[Var, Expr]] = None,
                 red_bufs: Optional[Dict[str, Buffer]] = None):
        super().__init__(namer)
        self.red_bufs = red_bufs or {}  # compute dtype -> shared buffer of the reductions
        self.launch = launch            # tag -> launch extent (host expression)
        self.host_lets = host_lets or {}  # top-level lets the host computes
        self.shared = set(shared)       # shared buffers declared at the kernel's top
        self.active_tags: Dict[str, List[Expr]] = {}  # tag -> extents of the enclosing loops
        self.thread_var_tags: Dict[Var, str] = {}  # enclosing thread loops' vars -> tag
        self.shadowed: Dict[Var, For] = {}  # outer thread vars -> the inner loop of their tag
        self.tid_vars: set = set()      # vars whose value differs between threads of a block
        self.has_barrier = False
        self.async_depth = 0            # inside AttrStmt("async_copy"): copies may be cp.async
        self.waits_async = False        # the kernel issues cp.async: wait before each barrier
        self.async_pending = 0          # groups the next barrier may leave in flight
        self.lane_vars: set = set()     # vars whose value differs between the lanes of a warp
        self.fragment_layouts: Dict[Buffer, str] = {}  # fragment -> layout as the mma sees it
        self.lane_divergent: List[str] = []  # enclosing conditions that differ between lanes
        self.uses_wmma = False          # tensor-core fragments: #include <mma.h>
        self.bf16_fragments: List[str] = []   # wmma fragments of bfloat16 (sm_80 and later)
        self.param_align: Dict[Buffer, int] = {}  # global buffers holding wmma tiles
        self.tma_ring: List[tuple] = []  # the enclosing TMA rings: (barriers, stages, mode)
        self.tma_issuing = False        # rendering a producer warp's copies
        self.tma_maps: List[tuple] = []  # (parameter name, TmaBox) of each tensor map
        self.swizzles: Dict[Buffer, str] = {}  # swizzled TMA rings -> their swizzle
        # buffers whose first element is WORKSPACE_ALIGN-byte aligned: the workspaces (the
        # shared arrays are SHARED_ALIGN-aligned); a copy of such buffers at offsets
        # provably aligned needs no run-time check (see _aligned_else_loop)
        self.aligned_buffers: set = set()

    # thread loops -------------------------------------------------------------
    def thread_loop(self, s: For) -> None:
        tag = s.thread_tag
        if is_vthread(tag):
            self.serial_loop(s, comment=f"{tag} {s.var.name}: virtual threads run in turn")
            return
        if tag not in THREAD_TAGS:
            raise BuildError(f"loop {s.var.name} is bound to the unknown thread axis {tag!r}; "
                             f"use one of {', '.join(THREAD_TAGS)} or vthread")
        enclosing = self.active_tags.get(tag, [])
        if enclosing and not all(_fits_in(s.extent, e, self.host_lets) for e in enclosing):
            raise BuildError(
                f"loop {s.var.name} bound to {tag} has extent {to_str(s.extent)} inside a loop "
                f"bound to {tag} of extent {to_str(enclosing[-1])}: the inner loop reuses the "
                f"outer loop's threads, so its extent cannot be larger; split it by the outer "
                f"extent before binding")
        if tag.startswith("threadIdx") and not any(
                t.startswith("threadIdx") and e for t, e in self.active_tags.items()):
            for ring in _warp_rings(s):
                self.tma_warp_prelude(ring, s)
        ct = self.value_ctype(s.var.dtype)
        idx = f"(({ct}){tag})"
        if isinstance(s.min, Const) and s.min.value == 0:
            text = idx
        else:
            text = f"({self.expr(s.min)} + {idx})"
        self.var_text[s.var] = text
        if self.is_nonneg(s.min):
            self.nonneg_vars.add(s.var)
        if tag.startswith("threadIdx") or _uses_any(s.min, self.tid_vars):
            self.tid_vars.add(s.var)
        if tag == "threadIdx.x" or _uses_any(s.min, self.lane_vars):
            self.lane_vars.add(s.var)
        # a guard unless the launch has exactly this many threads (or an enclosing loop of
        # the same tag and extent already guards)
        guard = not _same_expr(self.launch[tag], s.extent, self.host_lets) and not any(
            _same_expr(e, s.extent, self.host_lets) for e in enclosing)
        if guard:
            # (a guard on blockIdx is uniform over the block: a barrier under it is fine)
            if tag.startswith("threadIdx") and _has_barrier(s.body):
                raise BuildError(
                    f"loop {s.var.name} bound to {tag} has extent {to_str(s.extent)}, smaller "
                    f"than the launch's {to_str(self.launch[tag])}, and __syncthreads() inside: "
                    f"the threads outside its extent would skip the barrier; bind loops of "
                    f"the same extent to {tag} in this kernel")
            self.open_block(f"if ({idx} < {self.expr_top(s.extent)})")
            if tag == "threadIdx.x":
                self.lane_divergent.append(f"{idx} < {to_str(s.extent)}")
        # The loops of this tag around this one run on the same hardware index: inside
        # it their variables cannot vary independently any more, so a use is an error.
        outer_vars = [v for v, t in self.thread_var_tags.items() if t == tag and v not in self.shadowed]
        for v in outer_vars:
            self.shadowed[v] = s
        self.thread_var_tags[s.var] = tag
        self.active_tags[tag] = enclosing + [s.extent]
        self.stmt(s.body)
        self.active_tags[tag] = enclosing
        del self.thread_var_tags[s.var]
        for v in outer_vars:
            del self.shadowed[v]
        if guard:
            if tag == "threadIdx.x":
                self.lane_divergent.pop()
            self.close_block()

    def parallel_loop(self, s: For) -> None:
        raise BuildError(
            f"loop {s.var.name} is parallel, which has no meaning in a CUDA kernel: bind it to "
            f"blockIdx/threadIdx instead (or make it serial)")

    def serial_loop(self, s: For, comment: str = "") -> None:
        if s.kind == "vectorized" and not comment and self.vector_copy(s):
            return
        if (_uses_any(s.min, self.tid_vars) or _uses_any(s.extent, self.tid_vars)):
            self.tid_vars.add(s.var)
            self._no_barrier_in(s.body, f"loop {s.var.name}, whose bounds differ between threads")
        lanes = _uses_any(s.min, self.lane_vars) or _uses_any(s.extent, self.lane_vars)
        if lanes:
            self.lane_vars.add(s.var)
            self.lane_divergent.append(f"the bounds of loop {s.var.name}")
        super().serial_loop(s, comment)
        if lanes:
            self.lane_divergent.pop()

    def _s_IfThenElse(self, s: IfThenElse) -> None:
        if _uses_any(s.cond, self.tid_vars):
            what = f"the condition `{to_str(s.cond)}`, which differs between threads,"
            self._no_barrier_in(s.then_case, what)
            if s.else_case is not None:
                self._no_barrier_in(s.else_case, what)
        lanes = _uses_any(s.cond, self.lane_vars)
        if lanes:
            self.lane_divergent.append(f"the condition `{to_str(s.cond)}`")
        super()._s_IfThenElse(s)
        if lanes:
            self.lane_divergent.pop()

    def _let(self, s: LetStmt) -> None:
        if _uses_any(s.value, self.tid_vars):
            self.tid_vars.add(s.var)
        if _uses_any(s.value, self.lane_vars):
            self.lane_vars.add(s.var)
        super()._let(s)

    def _no_barrier_in(self, body: Stmt, what: str) -> None:
        if _has_barrier(body):
            raise BuildError(
                f"__syncthreads() under {what}: the threads of a block would not all reach "
                f"the barrier (undefined behaviour in CUDA); move the barrier out of it")

    def _e_Var(self, e: Var) -> str:
        inner = self.shadowed.get(e)
        if inner is not None:
            raise BuildError(
                f"loop {inner.var.name} is bound to {inner.thread_tag} inside loop {e.name}, also "
                f"bound to {inner.thread_tag}, and uses {e.name}: on the GPU both are the same "
                f"thread index, so {e.name} cannot vary inside {inner.var.name}. A stage computed "
                f"inside thread-bound loops and bound to the same thread axes must not depend on "
                f"the enclosing thread indices (a shared-memory stage must cover the whole "
                f"block: its bounds are inferred with the thread axes relaxed)")
        return super()._e_Var(e)

    # copies: vector moves, asynchronous copies ---------------------------------------
    def vector_copy(self, s: For) -> bool:
        """A vectorized loop that copies 8 or 16 contiguous bytes between global and
        shared memory: one move (or, in an ``async_copy`` region from global to shared,
        one ``cp.async``) where both addresses are aligned at run time, else the
        element loop.  False (not handled) for any other vectorized loop."""
        st = s.body
        if isinstance(st, BufferStore) and isinstance(st.value, Select) and self.async_depth:
            return self.zero_fill_copy(s)
        if not (isinstance(s.extent, Const) and isinstance(s.min, Const) and s.min.value == 0
                and isinstance(st, BufferStore)
                and isinstance(st.value, BufferLoad) and st.value.dtype == st.buffer.dtype):
            return False
        src = st.value
        nbytes = int(s.extent.value) * _dt.bits(st.buffer.dtype) // 8
        scopes = ("global", "shared")
        if nbytes not in (8, 16) or st.buffer.scope not in scopes or src.buffer.scope not in scopes:
            return False
        if any(reads_memory(i) for i in (*st.indices, *src.indices)):
            return False  # a gather: its element loop, whose indices are checked
        ptrs = self.copy_pointers(s, st, src)
        if ptrs is None:
            return False
        aligned = self.provably_aligned(s, st, src, nbytes)
        asynchronous = (self.async_depth and st.buffer.scope == "shared"
                        and src.buffer.scope == "global")
        move = self.helper(f"tc_cp_async{nbytes}" if asynchronous else f"tc_move{nbytes}")
        self.waits_async |= bool(asynchronous)
        self.emit(_comment(f"vectorized {s.var.name}: {s.extent.value} elements in one "
                           f"{nbytes}-byte {'asynchronous copy' if asynchronous else 'move'} "
                           f"where both addresses are aligned"))
        self._aligned_else_loop(s, ptrs[0], ptrs[1], nbytes, f"{move}({ptrs[0]}, {ptrs[1]});",
                                aligned)
        return True

    def _aligned_else_loop(self, s: For, dst: str, src: str, nbytes: int, line: str,
                           aligned: bool = False):
        """``if (both addresses aligned to nbytes) line; else`` the loop ``s`` as it is;
        ``aligned`` (both addresses provably aligned: :meth:`provably_aligned`): ``line``
        alone."""
        if aligned:
            self.emit(line)
            return
        self.open_block(f"if ({self.helper('tc_aligned2')}({dst}, {src}, {nbytes}))")
        self.emit(line)
        self.indent -= 1
        self._scopes.pop()
        self.emit("} else {")
        self.indent += 1
        self._scopes.append(set())
        super().serial_loop(s)
        self.close_block()

    def provably_aligned(self, s: For, st: BufferStore, src: BufferLoad, nbytes: int) -> bool:
        """Whether both first elements of the vectorized copy ``s`` (``st`` of ``src``)
        are ``nbytes``-aligned for every thread and iteration: each buffer shared (its
        array SHARED_ALIGN-aligned) or a workspace (WORKSPACE_ALIGN-aligned) and not
        swizzled, and its element offset a provable multiple of ``nbytes`` bytes (a tile
        copied from a workspace whose rows are padded to 16 bytes: ``pack_rows`` of
        the tensor-core GEMM)."""
        for buf, idx in ((st.buffer, st.indices), (src.buffer, src.indices)):
            if buf.scope == "shared":
                align = SHARED_ALIGN
            elif buf in self.aligned_buffers:
                align = WORKSPACE_ALIGN
            else:
                return False
            size = _dt.bits(buf.dtype) // 8
            if align < nbytes or nbytes % size or self.swizzles.get(buf, "none") != "none":
                return False
            flat = simplify(substitute(self.flat_expr(buf, idx), {s.var: Const(0, s.var.dtype)}))
            if not _multiple_of(flat, nbytes // size):
                return False
        return True

    def copy_pointers(self, s: For, st: BufferStore, src: BufferLoad):
        """The C pointers to the first elements the vectorized copy ``s`` (``st`` of
        ``src``) writes and reads, ``[dst, src]``; None where either side is not
        contiguous in the loop."""
        ptrs = []
        for buf, idx in ((st.buffer, st.indices), (src.buffer, src.indices)):
            flat = self.flat_expr(buf, idx)
            base = simplify(substitute(flat, {s.var: Const(0, s.var.dtype)}))
            if not (simplify(_op.sub(flat, base)) is s.var
                    or _contiguous_innermost(buf, idx, s.var)):  # not contiguous
                return None
            ptrs.append(f"&{self.buffer_ref(buf)}[{self.swizzled(buf, self.expr_top(base))}]")
        return ptrs

    def zero_fill_copy(self, s: For) -> bool:
        """A vectorized loop of a double-buffered tile's copy from global to shared
        memory, zeros past the tensor's edge (``cache_read(..., pad=0)``, a padded
        tensor-core tile): ``d[.. v] = select(c, g[.. v], 0)`` with ``c`` the conjunction of
        conditions the same for every lane and at most one ``base + v < limit``: one
        8- or 16-byte ``cp.async`` of the lanes inside (``min(max(limit - base, 0), n)``
        of them) that zero-fills the rest, where both addresses are aligned, else the
        element loop.  False (not handled) for any other loop."""
        st, sel = s.body, s.body.value
        src = sel.true_value
        if not (isinstance(s.extent, Const) and isinstance(s.min, Const) and s.min.value == 0
                and isinstance(src, BufferLoad) and src.dtype == st.buffer.dtype
                and isinstance(sel.false_value, Const) and sel.false_value.value == 0
                and st.buffer.scope == "shared" and src.buffer.scope == "global"):
            return False
        n = int(s.extent.value)
        nbytes = n * _dt.bits(st.buffer.dtype) // 8
        if nbytes not in (8, 16) or any(reads_memory(i) for i in (*st.indices, *src.indices)):
            return False
        same, lanes = [], None   # lane-invariant conditions; the lanes inside (an Expr)
        for c in _conjuncts(sel.cond):
            if not _uses_any(c, {s.var}):
                same.append(c)
                continue
            if lanes is not None or not isinstance(c, LT) or _uses_any(c.b, {s.var}):
                return False
            base = simplify(substitute(c.a, {s.var: Const(0, s.var.dtype)}))
            if simplify(_op.sub(c.a, base)) is not s.var:
                return False
            lanes = _op.minimum(_op.maximum(simplify(_op.sub(c.b, base)),
                                            Const(0, base.dtype)), Const(n, base.dtype))
        ptrs = self.copy_pointers(s, st, src)
        if ptrs is None:
            return False
        size = _dt.bits(st.buffer.dtype) // 8
        valid = self.expr_top(lanes) if lanes is not None else str(n)
        if same:
            inside = _op.all_(*same)
            valid = f"(({self.expr_top(inside)}) ? {valid} : 0)"
        self.waits_async = True
        self.emit(_comment(f"vectorized {s.var.name}: {n} elements, zeros past the edge, in "
                           f"one {nbytes}-byte asynchronous copy where both addresses are "
                           f"aligned"))
        self.open_block("")
        self.emit(f"const int tc_in = {valid};")
        # (past the edge no byte of the source is read: its address is the tensor's own)
        self.emit(f"const void* tc_src = tc_in > 0 ? (const void*)({ptrs[1]}) : "
                  f"(const void*){self.buffer_ref(src.buffer)};")
        self._aligned_else_loop(s, ptrs[0], "tc_src", nbytes,
                                f"{self.helper(f'tc_cp_async_zfill{nbytes}')}({ptrs[0]}, "
                                f"tc_src, tc_in * {size});",
                                self.provably_aligned(s, st, src, nbytes))
        self.close_block()
        return True

    def flat_index(self, buf: Buffer, indices, logical: bool = False) -> str:
        # an index read from memory (a gather's id) is checked where it is used: no check
        # of the arguments before the launch can know where it points (as the CPU's)
        if any(reads_memory(i) for i in indices):
            indices = tuple(
                _CheckedIndex(i, buf.shape[d], f"{buf.name}[{to_str(i)}] (dimension {d} of "
                              f"{buf.name}, extent {to_str(buf.shape[d])})", i.dtype)
                if reads_memory(i) else i for d, i in enumerate(indices))
        flat = super().flat_index(buf, indices)
        return flat if logical else self.swizzled(buf, flat)

    def _e__CheckedIndex(self, e: _CheckedIndex) -> str:
        call = (f"{self.helper('tc_checked_index')}((long long)({self.expr_top(e.index)}), "
                f"(long long)({self.expr_top(e.extent)}), {c_string(e.site)})")
        self.helper("tc_index_fail")
        t = self.value_ctype(e.dtype)
        return call if t == "long long" else f"(({t}){call})"

    def _e_BufferLoad(self, e: BufferLoad) -> str:
        _no_fragment_element(e.buffer, "read")
        return super()._e_BufferLoad(e)

    def swizzled(self, buf: Buffer, offset: str) -> str:
        """C text of the element offset ``offset`` (C text) of ``buf`` where its swizzle
        (``double_buffer(swizzle=)``) puts it: each element access of a swizzled tile
        goes there, as the TMA copies and the readers that decode the swizzle do."""
        swz = self.swizzles.get(buf)
        if swz is None or swz == "none":
            return offset
        shift = {1: 0, 2: 1, 4: 2, 8: 3}[_dt.nbytes(buf.dtype)]
        mask = _tma.SWIZZLE_SPAN[swz] // 16 - 1
        return f"{self.helper('tc_swizzled')}({offset}, {7 - shift}, {4 - shift}, {mask})"

    def _s_BufferStore(self, s: BufferStore) -> None:
        _no_fragment_element(s.buffer, "written")
        v = s.value
        if (self.async_depth and s.buffer.scope == "shared" and isinstance(v, BufferLoad)
                and v.buffer.scope == "global" and v.dtype == s.buffer.dtype
                and _dt.bits(v.dtype) in (32, 64)):
            # one element of a double-buffered tile: an asynchronous copy (naturally aligned)
            n = _dt.bits(v.dtype) // 8
            self.waits_async = True
            self.emit(f"{self.helper(f'tc_cp_async{n}')}("
                      f"&{self.buffer_ref(s.buffer)}[{self.flat_index(s.buffer, s.indices)}], "
                      f"&{self.buffer_ref(v.buffer)}[{self.flat_index(v.buffer, v.indices)}]);")
            return
        super()._s_BufferStore(s)

    # cross-thread reduction ---------------------------------------------------------
    def _s_AttrStmt(self, s: AttrStmt) -> None:
        if s.key == CROSS_THREAD_REDUCE:
            self.cross_thread_reduce(s)
            self.stmt(s.body)
            return
        if s.key == ASYNC_COPY:
            self.async_depth += 1
            self.stmt(s.body)
            self.async_depth -= 1
            return
        if s.key == ASYNC_GROUP:   # one pipeline stage's copies (maybe none): one group
            self.stmt(s.body)
            self.emit(f"{self.helper('tc_cp_async_commit')}();")
            return
        if s.key == ASYNC_WAIT:
            self.async_pending = int(s.value)
            self.stmt(s.body)
            self.async_pending = 0
            return
        if s.key in (TMA_PIPELINE, TMA_PRODUCE, TMA_CONSUME, TMA_COPY):
            self.tma_stmt(s)
            return
        if s.key == BUFFER_SWIZZLE:   # (a swizzled ring: self.swizzles, set for the kernel)
            self.stmt(s.body)
            return
        super()._s_AttrStmt(s)

    # TMA rings (tecomp/lower/tma_pipeline.py) -------------------------------------------
    _TID = "(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z))"

    def tma_stmt(self, s: AttrStmt) -> None:
        """A TMA ring's statements: its mbarriers set up (``tma_pipeline``), a slot filled
        by thread 0 (``tma_produce``: wait until the slot is empty, expect the bytes, the
        ``tma_copy`` boxes), a slot read (``tma_consume``: wait until it is full, the body,
        arrive on its empty barrier)."""
        self.has_barrier = True   # (mbarrier waits: the emulation runs the threads in step)
        h = self.helper
        if s.key == TMA_PIPELINE:
            warp = s.value[2] == "warp"   # (its producer is the one more threadIdx.z)
            for tag, extents in self.active_tags.items():
                full = self.launch.get(tag)
                if warp and tag == "threadIdx.z" and extents:
                    full = _op.sub(full, Const(1, "int32"))
                if extents and full is not None and not _fits_in(full, extents[-1],
                                                                 self.host_lets):
                    # (the lowering gives a thread axis one extent per kernel)
                    raise InternalError(
                        f"the TMA ring of {self.buffer_ref(s.value[0])} is inside a "
                        f"{tag} loop of extent {to_str(extents[-1])}, fewer threads than the "
                        f"block's {to_str(full)}, which would never arrive at its barriers "
                        "(a tecomp bug)")
            bars, n, mode = s.value
            bar = f"reinterpret_cast<unsigned long long*>({self.buffer_ref(bars)})"
            if mode != "warp":   # (a producer warp's ring is set up before the thread loops)
                self.tma_ring_setup(bar, int(n), "blockDim.x * blockDim.y * blockDim.z")
            self.tma_ring.append((bar, int(n), mode))
            self.stmt(s.body)
            self.tma_ring.pop()
            return
        if not self.tma_ring:
            raise InternalError(f"AttrStmt {s.key} outside a tma_pipeline (a tecomp bug)")
        bar, n, mode = self.tma_ring[-1]
        rel = f"({self.expr(s.value)})"
        if s.key == TMA_CONSUME:
            self.emit(f"{h('tc_mbar_wait')}(&{bar}[{rel} % {n}], ({rel} / {n}) & 1);")
            self.stmt(s.body)
            self.emit(f"{h('tc_mbar_arrive')}(&{bar}[{n} + {rel} % {n}]);")
            return
        if s.key == TMA_COPY:
            raise InternalError("a tma_copy outside a tma_produce (a tecomp bug)")
        if mode == "warp" and not self.tma_issuing:
            return   # (the producer warp issues it: tma_warp_prelude)
        copies = collect(s.body, lambda x: isinstance(x, AttrStmt) and x.key == TMA_COPY)
        boxes = [(dataclasses.replace(b, swizzle=self.swizzles.get(b.dst, "none")),
                  c.value.indices) for c in copies for b in (box_of(c.body)[0],)]
        total = sum(b.nbytes for b, _ in boxes)
        if mode != "warp":
            self.open_block(f"if ({self._TID} == 0)")
        self.emit(f"{h('tc_mbar_wait')}(&{bar}[{n} + {rel} % {n}], (({rel} / {n}) & 1) ^ 1);")
        self.emit(f"{h('tc_mbar_arrive_expect_tx')}(&{bar}[{rel} % {n}], {total}u);")
        for box, origin in boxes:
            mp = self.tma_param(box)
            coords = ", ".join(self.expr(c) for c in box.coords(origin))
            dst = (f"&{self.buffer_ref(box.dst)}"
                   f"[{self.flat_index(box.dst, box.dst_origin, logical=True)}]")
            self.emit(f"{h(f'tc_tma_load_{len(box.dims)}d')}({dst}, &{mp}, {coords}, "
                      f"&{bar}[{rel} % {n}]);")
        if mode != "warp":
            self.close_block()

    def tma_ring_setup(self, bar: str, n: int, consumers: str) -> None:
        """Thread 0 initialises the ring's full (1 arrival) and empty (``consumers``)
        mbarriers; a barrier publishes them to the block (and one before: a ring set up
        again, for each tile of persistent blocks, after every thread is done with it)."""
        h = self.helper
        self.emit("__syncthreads();")
        self.emit(f"if ({self._TID} == 0) {{")
        self.emit(f"  for (int tc_s = 0; tc_s < {n}; ++tc_s) {{")
        self.emit(f"    {h('tc_mbar_init')}(&{bar}[tc_s], 1);")
        self.emit(f"    {h('tc_mbar_init')}(&{bar}[{n} + tc_s], {consumers});")
        self.emit("  }")
        self.emit(f"  {h('tc_mbar_init_fence')}();")
        self.emit("}")
        self.emit("__syncthreads();")

    def tma_warp_prelude(self, ring: AttrStmt, loop: For) -> None:
        """Before the outermost thread loop ``loop`` around a ``producer="tma_warp"`` ring:
        the ring's setup (every thread), then the producer warp (the last ``threadIdx.z``,
        which the computing threads' loops leave out): its first thread issues the copies
        of every iteration of the ring's loop, in order, each when its slot is empty."""
        self.has_barrier = True
        bars, n, _ = ring.value
        bar = f"reinterpret_cast<unsigned long long*>({self.buffer_ref(bars)})"
        z = self.launch["threadIdx.z"]
        self.tma_ring_setup(bar, int(n), f"blockDim.x * blockDim.y * (blockDim.z - 1)")
        ko_loop = next(x for x in collect(ring.body, lambda x: isinstance(x, For)) if collect(
            x.body, lambda y: isinstance(y, AttrStmt) and y.key == TMA_CONSUME))
        produce = next(iter(collect(ko_loop.body, lambda y: isinstance(y, AttrStmt)
                                    and y.key == TMA_PRODUCE)))
        r = Var("tc_r", ko_loop.var.dtype)
        ahead = _op.sub(_op.add(ko_loop.min, r), Const(int(n) - 1, r.dtype))
        body = simplify(substitute(produce, {ko_loop.var: ahead}))
        threads = {x.var for x in collect(loop, lambda x: isinstance(x, For)
                                         and x.kind == "thread")}
        used = set(free_vars(body)) & threads
        if used:
            raise BuildError(
                f"producer='tma_warp' on the ring of {self.buffer_ref(bars)}: its tiles' "
                f"origins depend on the computing threads' loops "
                f"({', '.join(sorted(v.name for v in used))}), which the "
                "producer warp does not run; use producer='tma'")
        self.open_block(f"if (threadIdx.z == {self.expr_top(_op.sub(z, Const(1, 'int32')))} "
                        "&& threadIdx.y == 0 && threadIdx.x == 0)")
        self.tma_ring.append((bar, int(n), "warp"))
        self.tma_issuing = True
        self.stmt(For(r, Const(0, r.dtype), ko_loop.extent, "serial", body))
        self.tma_issuing = False
        self.tma_ring.pop()
        self.close_block()

    def tma_param(self, box) -> str:
        """The name of the tensor-map parameter of ``box`` (one per distinct box)."""
        for name, b in self.tma_maps:
            if b.src is box.src and b.dims == box.dims and b.swizzle == box.swizzle:
                return name
        name = self.name.fresh(f"{self.name(box.src)}_tmap")
        self.tma_maps.append((name, box))
        return name

    def cross_thread_reduce(self, s: AttrStmt) -> None:
        """``AttrStmt("cross_thread_reduce", (reducer, source, BufferLoad(dest, idx), tags),
        body)``: every thread of the block contributes ``source``; afterwards ``dest[idx]``
        of every thread holds ``reducer`` over the threads that differ only in the thread
        axes ``tags`` (an all-reduce; threads that must not contribute give the identity).
        It synchronizes the block: all its threads must reach it.

        Emitted as a tree in shared memory (one buffer per dtype per kernel, reused): each
        thread stores its value, then log2(extent) halving steps, each followed by a
        barrier; a non-power-of-two extent first folds its top part.
        """
        reducer, source, dest, tags = unpack_cross_thread_reduce(s)
        block = [self.launch.get(f"threadIdx.{d}", Const(1, "int32")) for d in "xyz"]
        if not all(isinstance(b, Const) for b in block):
            raise BuildError(f"the cross-thread reduction into {dest.buffer.name} needs a block "
                             f"of constant size, got ({', '.join(to_str(b) for b in block)})")
        ext = [int(b.value) for b in block]
        for tag in tags:
            if tag not in self.launch or not tag.startswith("threadIdx"):
                raise BuildError(f"the cross-thread reduction into {dest.buffer.name} is over "
                                 f"{tag}, which no loop of this kernel is bound to")
        idx = {}
        for d, e in zip("xyz", ext):
            v = Var(f"threadIdx.{d}")
            self.var_text[v] = f"((int)threadIdx.{d})"
            self.nonneg_vars.add(v)
            self.tid_vars.add(v)
            idx[d] = (v, e)
        reduced = [d for d in "xyz" if f"threadIdx.{d}" in tags]
        others = [d for d in "xyz" if d not in reduced and idx[d][1] > 1]

        def flat(dims):
            out, stride = Const(0, "int32"), 1
            for d in dims:
                v, e = idx[d]
                if e > 1:
                    out = _op.add(out, _op.mul(v, Const(stride, "int32")))
                stride *= e
            return out, stride

        lane, R = flat(reduced)
        group, _ = flat(others)
        base = _op.mul(group, Const(R, "int32"))
        pos = _op.add(base, lane)
        buf = self.red_bufs[_dt.compute_dtype(source.dtype)]
        load = lambda i: BufferLoad(buf, (i,), buf.dtype)  # noqa: E731
        sync = Evaluate(Call("syncthreads", (), "int32"))
        steps = [BufferStore(buf, source, (pos,)), sync]
        P = 1
        while P * 2 <= R:
            P *= 2
        strides = ([P] if P < R else []) + [P >> k for k in range(1, P.bit_length()) if P >> k]
        for st in strides:
            limit = R - P if (st == P and P < R) else st
            steps.append(IfThenElse(LT(lane, Const(limit, "int32")), BufferStore(
                buf, reducer.combine(load(pos), load(_op.add(pos, Const(st, "int32")))), (pos,))))
            steps.append(sync)
        steps.append(BufferStore(dest.buffer, load(base), dest.indices))
        steps.append(sync)  # the buffer is free again for the next reduction
        axes = ", ".join(tags)
        self.emit(_comment(f"cross-thread {reducer.name} over {axes} ({R} threads) into "
                           f"{self.name(dest.buffer)}"))
        for st in steps:
            self.stmt(st)

    # memory ---------------------------------------------------------------------
    def _s_Allocate(self, s: Allocate) -> None:
        scope = s.buffer.scope
        if scope == "shared":
            if s.buffer not in self.shared:  # declared at the top of the kernel
                raise BuildError(f"shared buffer {s.buffer.name} is allocated twice")
            self.stmt(s.body)
        elif scope == "local":
            self.local_allocate(s)
        elif scope in FRAGMENT_SCOPES:
            self.fragment_allocate(s)
        elif scope == "global":
            raise BuildError(
                f"buffer {s.buffer.name} is allocated in global memory inside a kernel; use "
                f"scope 'local' (per thread) or 'shared' (per block), or compute it at root "
                f"so that the host allocates it")
        else:
            raise BuildError(f"buffer {s.buffer.name} has the unknown scope {scope!r}; "
                             "use 'global', 'shared', 'local' or a wmma / mma fragment scope")

    def fragment_allocate(self, s: Allocate) -> None:
        """A tensor-core fragment buffer: an array of ``nvcuda::wmma::fragment`` (an
        ``mma.*`` scope: of per-lane register arrays, :data:`MMA_FRAGMENTS`), one per 16 x
        16 tile of its last two dimensions (the tiles in row-major order)."""
        buf = s.buffer
        ftype, dtypes = _FRAGMENT_TYPES.get(buf.scope) or MMA_FRAGMENTS[buf.scope]
        shape = [int(d.value) if isinstance(d, Const) else None for d in buf.shape]
        if buf.dtype not in dtypes or len(shape) < 2 or None in shape or shape[-1] % 16 \
                or shape[-2] % 16 or buf.strides is not None:
            raise BuildError(
                f"buffer {buf.name} in scope {buf.scope!r} is {buf.dtype}"
                f"[{', '.join(to_str(d) for d in buf.shape)}]"
                f"{' with explicit strides' if buf.strides is not None else ''}; a "
                f"{buf.scope} fragment holds {_one_of(dtypes)} 16 x 16 tiles: its last two "
                "extents must be constant multiples of 16 (split the axes it is computed over "
                "by multiples of 16) and its dtype " + _one_of(dtypes))
        count = 1
        for n in shape[:-2]:
            count *= n
        count *= (shape[-2] // 16) * (shape[-1] // 16)
        layout = _fragment_layout(s)
        self.fragment_layouts[buf] = layout
        if buf.scope in MMA_FRAGMENTS:   # per-lane registers, exchanged by warp collectives
            size = f"[{MMA_TILE_REGS[buf.dtype]}]"
        else:
            ftype = ftype.replace("{layout}", layout).replace("{elem}", self.ctype(buf.dtype))
            size = ""
            self.uses_wmma = True
            if buf.dtype == "bfloat16":
                self.bf16_fragments.append(buf.name)

        def declare(b):
            self._scopes[-1].add(b)
            self.emit(f"{ftype} {self.name(b)}[{max(count, 1)}]{size};")
        self.local_allocate(s, declare)

    def fragment_ref(self, buf: Buffer, base) -> str:
        """C lvalue of the fragment of ``buf`` whose tile starts at ``base`` (one index
        per dimension, the last two multiples of 16)."""
        shape = [int(d.value) for d in buf.shape]
        for d in (-2, -1):
            m = simplify(_op.floormod(base[d], Const(16, base[d].dtype)))
            if not (isinstance(m, Const) and m.value == 0):
                raise BuildError(
                    f"a tensor-core tile of fragment {buf.name} starts at "
                    f"[{', '.join(to_str(x) for x in base)}], which is not on a 16 x 16 tile "
                    "boundary; split the fragment's axes by 16 from their start")
        dims = shape[:-2] + [shape[-2] // 16, shape[-1] // 16]
        idx = list(base[:-2]) + [_op.floordiv(base[-2], Const(16, base[-2].dtype)),
                                 _op.floordiv(base[-1], Const(16, base[-1].dtype))]
        flat = None
        for i, n in zip(idx, dims):
            flat = i if flat is None else _op.add(_op.mul(flat, Const(n, "int32")), i)
        return f"{self.name(buf)}[{self.expr_top(simplify(flat))}]"

    def _check_warp_call(self, s) -> None:
        """A warp-wide intrinsic (a wmma fragment among its operands) runs the same call in
        every lane of a warp: refuse what would make the lanes differ."""
        what = f"tensorize {s.intrin.name} (stage {s.stage})"
        frag = next(b for b in s.buffers if b.scope in FRAGMENT_SCOPES)
        op = "a wmma" if frag.scope.startswith("wmma.") else "an mma"
        bx = self.launch.get("threadIdx.x", Const(1, "int32"))
        if not (isinstance(bx, Const) and bx.value % WARP_SIZE == 0):
            raise BuildError(
                f"{what}: the kernel's blockDim.x is {to_str(bx)}; {op} operation is run by "
                f"a whole warp, whose {WARP_SIZE} lanes must be consecutive threadIdx.x: bind a "
                f"loop of extent {WARP_SIZE} (or a multiple) to threadIdx.x (e.g. in the "
                "shared-memory copies) and the warps to threadIdx.y / threadIdx.z")
        if self.lane_divergent:
            raise BuildError(
                f"{what}: it runs under {self.lane_divergent[-1]}, which differs between the "
                f"lanes of a warp; all 32 lanes must run {op} operation together: keep "
                "threadIdx.x out of the loops and conditions around the tensor-core stages")
        for n in range(len(s.buffers)):
            if _uses_any_of(s.base(n), self.lane_vars):
                raise BuildError(
                    f"{what}: the tile of {s.buffers[n].name} it works on depends on threadIdx.x, "
                    f"so the lanes of a warp would name different tiles; {op} tile belongs to "
                    "the whole warp: index it by the warp (threadIdx.y / threadIdx.z), not by "
                    "the lane")

    # tensor intrinsics ----------------------------------------------------------------
    def _s_TensorIntrinCall(self, s) -> None:
        """The intrinsic's ``cuda`` emitter, given each operand's region as a
        :class:`~tecomp.codegen.cuda_intrin.CudaIntrinView` (in a C block of its own, for
        its temporaries); without one, the loops it replaced.  A CUDA buffer's strides
        are the ones lowering saw, which checked a dense intrinsic's layout; any other
        intrinsic gets strides that are not constants as C text."""
        intrin = s.intrin
        fragments = [b for b in s.buffers if b.scope in FRAGMENT_SCOPES]
        if intrin.cuda is None:
            if fragments:
                raise BuildError(
                    f"tensorize {intrin.name} (stage {s.stage}): it has no CUDA code and "
                    f"{fragments[0].name} is a tensor-core fragment, whose elements only the "
                    f"cuda.{fragments[0].scope.split('.')[0]}_* intrinsics can touch")
            super()._s_TensorIntrinCall(s)
            return
        if fragments:
            self._check_warp_call(s)
        views = []
        for n, (ph, buf) in enumerate(zip([intrin.output] + list(intrin.inputs), s.buffers)):
            shape = tuple(int(x.value) for x in ph.shape)
            strides = []
            for d, e in enumerate(operand_strides(buf, s.coefs[n])):
                if isinstance(e, Const):
                    strides.append(int(e.value))
                elif shape[d] == 1:
                    strides.append(0)   # never stepped
                elif intrin.dense:
                    raise InternalError(f"tensorize {intrin.name} on stage {s.stage}: operand "
                                        f"{ph.name} has stride {e} after lowering checked "
                                        "its dense layout")
                else:
                    strides.append(f"({self.expr_top(e)})")
            if buf.scope in FRAGMENT_SCOPES:
                views.append(CudaIntrinView(ph.name, buf.name, buf.dtype, self.ctype(buf.dtype),
                                            shape, tuple(strides), self.buffer_ref(buf), "0",
                                            fragment=self.fragment_ref(buf, s.base(n)),
                                            scope=buf.scope,
                                            layout=self.fragment_layouts.get(buf)))
                continue
            if fragments:
                self._check_tile_alignment(s, buf, s.base(n))
            views.append(CudaIntrinView(ph.name, buf.name, buf.dtype, self.ctype(buf.dtype),
                                        shape, tuple(strides), self.buffer_ref(buf),
                                        self.flat_index(buf, s.base(n), logical=True),
                                        scope=buf.scope,
                                        swizzle=self.swizzles.get(buf, "none")))
        self.emit(_comment(f"tensorize {intrin.name} (stage {s.stage})"))
        self.emit("{")
        self.indent += 1
        self._scopes.append(set())
        intrin.cuda(CudaIntrinBuilder(self, intrin.name), views[1:], views[:1])
        self.close_block()

    def _check_tile_alignment(self, s, buf: Buffer, base) -> None:
        """A wmma tile in memory starts on a 32-byte boundary: its offset from the
        buffer's start must provably be; a global buffer's own start is checked when the
        kernel is called (shared arrays are declared aligned)."""
        per = WMMA_ALIGN * 8 // _dt.bits(buf.dtype)
        m = simplify(_op.floormod(self.flat_expr(buf, base), Const(per, "int32")))
        if not (isinstance(m, Const) and m.value == 0):
            raise BuildError(
                f"tensorize {s.intrin.name} (stage {s.stage}): its tile of {buf.name} starts at "
                f"[{', '.join(to_str(x) for x in base)}], which is not provably a multiple of "
                f"{per} elements ({WMMA_ALIGN} bytes) from the buffer's start, as wmma needs: "
                "split the axes by 16 from their start and pad rows to a multiple of 16 "
                "elements")
        if buf.scope == "global":
            self.param_align[buf] = WMMA_ALIGN

    # calls ------------------------------------------------------------------------
    def special_call(self, c: Call) -> None:
        if c.op == "syncthreads":
            self.has_barrier = True
            if self.waits_async and self.async_pending:
                self.emit(f"{self.helper(f'tc_cp_async_wait_group{self.async_pending}')}();")
            elif self.waits_async:
                self.emit(f"{self.helper('tc_cp_async_wait')}();")
            self.emit("__syncthreads();")
            return
        super().special_call(c)

    def _e_Call(self, e: Call) -> str:
        if e.op == "syncthreads":
            raise BuildError("syncthreads() is a statement (Evaluate), not a value")
        return super()._e_Call(e)


# ---------------------------------------------------------------------------------
# helpers over the IR


class _BarrierFinder(Visitor):
    def __init__(self):
        self.found = False

    def visit_Call(self, c):
        if c.op == "syncthreads":
            self.found = True

    def visit_AttrStmt(self, st):
        if st.key == CROSS_THREAD_REDUCE:  # a collective: it synchronizes the block
            self.found = True
        self.generic_visit(st)

    def visit_BufferLoad(self, e):  # no barrier in an expression; skip indices quickly
        return


def _warp_rings(body) -> List[AttrStmt]:
    """The ``producer="tma_warp"`` rings in ``body``."""
    return list(collect(body, lambda n: isinstance(n, AttrStmt) and n.key == TMA_PIPELINE
                        and n.value[2] == "warp"))


def _tma_rings(body) -> set:
    """The shared buffers TMA copies of ``body`` write (its rings, and their mbarriers)."""
    out = set()
    for p in collect(body, lambda n: isinstance(n, AttrStmt) and n.key == TMA_PIPELINE):
        out.add(p.value[0])
        for c in collect(p.body, lambda n: isinstance(n, AttrStmt) and n.key == TMA_COPY):
            out.add(box_of(c.body)[0].dst)
    return out


def _swizzled_rings(body) -> Dict[Buffer, str]:
    """The swizzled TMA rings of ``body`` and their swizzles (``double_buffer(swizzle=)``;
    known before the body is rendered: a producer warp's copies come first)."""
    return {n.value[0]: str(n.value[1]) for n in collect(
        body, lambda n: isinstance(n, AttrStmt) and n.key == BUFFER_SWIZZLE)}


def _check_swizzled_offsets(shared: List[Buffer], swz: Dict[Buffer, str]) -> None:
    """The swizzled rings lie first in the arena, each at a multiple of its pattern's
    repeat (8 rows: 1024 bytes for 128B, 512 for 64B, 256 for 32B; TMA and wgmma swizzle
    by the address's bits; each ring a whole number of patterns)."""
    off = 0
    for b in shared:
        if b in swz and off % (8 * _tma.SWIZZLE_SPAN[swz[b]]):
            raise InternalError(f"the swizzled TMA ring {b.name} would start at shared byte "
                                f"{off}, not a multiple of its {swz[b]} pattern's "
                                f"{8 * _tma.SWIZZLE_SPAN[swz[b]]} bytes (a tecomp bug)")
        off += shared_array_bytes(b)


def _has_async_copy(s) -> bool:
    return bool(collect(s, lambda n: isinstance(n, AttrStmt) and n.key == ASYNC_COPY))


def _has_barrier(s) -> bool:
    f = _BarrierFinder()
    f.visit(s)
    return f.found


def _fragment_layout(s: Allocate) -> str:
    """The layout an operand fragment is declared with: that of the memory tiles its
    loads read, seen as the mma that reads the fragment sees the matrix (``A[i, k]``,
    ``B[k, j]``): a tile of ``W[n, k]`` loaded into a fragment the mma reads as ``B[k,
    n]`` is column major.  ``row_major`` where no load says (the load's emitter then
    reports a tile that is neither)."""
    buf = s.buffer
    nd = len(buf.shape)
    calls = collect(s.body, lambda n: isinstance(n, TensorIntrinCall))

    def buffer_dims(call, n):
        # the buffer dimension each dimension of operand n of ``call`` steps along
        return [next((d for d, c in enumerate(row) if c), None) for row in call.coefs[n]]

    # how the mma (the call that reads the fragment) sees it: as stored, or transposed
    transposed = set()
    for call in calls:
        for n in range(1, len(call.buffers)):
            if call.buffers[n] is buf:
                dims = buffer_dims(call, n)
                if dims not in ([nd - 2, nd - 1], [nd - 1, nd - 2]):
                    raise BuildError(
                        f"tensorize {call.intrin.name} (stage {call.stage}) reads fragment "
                        f"{buf.name} along its dimensions {dims}; a wmma fragment is a 16 x 16 "
                        "tile of its last two dimensions")
                transposed.add(dims == [nd - 1, nd - 2])
    if len(transposed) > 1 or (transposed == {True} and buf.scope == "wmma.accumulator"):
        how = "both as stored and transposed" if len(transposed) > 1 else "transposed"
        raise BuildError(f"fragment {buf.name} is read {how}; a wmma fragment has one layout, "
                         "and an accumulator is read as stored: order the mma's loops as its "
                         "output's axes")
    found = {}
    for call in calls:
        if call.buffers[0] is not buf or len(call.buffers) < 2 or \
                call.intrin.name.startswith("cuda.wgmma_"):   # (no fragment type to declare)
            continue
        # the memory tile's strides along the fragment buffer's last two dimensions
        frag_dims = buffer_dims(call, 0)
        mem = [int(x.value) if isinstance(x, Const) else None
               for x in operand_strides(call.buffers[1], call.coefs[1])]
        along = dict(zip(frag_dims, mem))
        layout, _ = tile_layout([along.get(nd - 2), along.get(nd - 1)])
        if layout is not None:
            if transposed == {True}:
                layout = "col_major" if layout == "row_major" else "row_major"
            found.setdefault(layout, call.buffers[1].name)
    if len(found) > 1:
        raise BuildError(
            f"fragment {buf.name} is loaded from row-major tiles of {found['row_major']} and "
            f"column-major tiles of {found['col_major']}; a wmma fragment has one layout: "
            "load it from tiles of one layout")
    return next(iter(found), "row_major")


def _no_fragment_element(buf: Buffer, how: str) -> None:
    if buf.scope in FRAGMENT_SCOPES:
        raise BuildError(
            f"buffer {buf.name} in scope {buf.scope!r} is {how} element by element; a "
            "tensor-core fragment has no addressable elements: fill, compute and store it "
            f"only with the cuda.{buf.scope.split('.')[0]}_* intrinsics (s[...].tensorize on "
            "every stage that reads or writes it)")


def _one_of(names) -> str:
    """``a``, ``a or b``, ``a, b or c``."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def _uses_any_of(exprs, vars_: set) -> bool:
    return any(_uses_any(e, vars_) for e in exprs)


def _uses_any(e, vars_: set) -> bool:
    if not vars_:
        return False
    return any(v in vars_ for v in free_vars(e))


def _same_expr(a: Expr, b: Expr, lets: Dict[Var, Expr]) -> bool:
    return same_as(a, b) or same_as(substitute(a, lets), substitute(b, lets))


def _fits_in(inner: Expr, outer: Expr, lets: Dict[Var, Expr]) -> bool:
    """Whether ``inner <= outer`` is certain (equal expressions, or constants)."""
    if _same_expr(inner, outer, lets):
        return True
    i, o = substitute(inner, lets), substitute(outer, lets)
    return isinstance(i, Const) and isinstance(o, Const) and i.value <= o.value


def codegen_cuda(func: PrimFunc) -> CudaSource:
    """Generate CUDA C for ``func``: one ``__global__`` kernel per top-level statement."""
    if not isinstance(func, PrimFunc):
        raise TypeError(f"codegen_cuda takes a PrimFunc, got {type(func).__name__}")

    tgt = func.attrs.get("target")
    if tgt is None or not as_target(tgt).is_gpu:
        tgt = "cuda"  # a function lowered for another target: the same split
    split = prepare_for_codegen(func, tgt)
    hp = split.attrs["host"]
    params_buffers = [p for p in func.params if isinstance(p, Buffer)]
    workspaces = list(hp.workspaces)
    fname = c_identifier(func.name)
    shape_vars = {d for b in params_buffers for d in b.shape if isinstance(d, Var)}
    kernels: List[KernelInfo] = []
    texts: List[str] = []
    helpers: set = set()
    narrow = {b.dtype for b in params_buffers + workspaces if _dt.is_storage_float(b.dtype)}
    uses_wmma = False
    uses_tma = False
    bf16_fragments: List[str] = []

    for attr in kernels_of(split):
        kern = attr.value
        namer = Namer()
        params = []
        for b in kern.buffers:
            params.append(KernelParam(namer(b), b, b.dtype, True, is_const=b in kern.read_only))
        for v in kern.scalars:
            params.append(KernelParam(namer(v), v, v.dtype, False))
        kname = namer.fresh(f"{fname}_kernel{kern.index}")
        launch, block = kern.launch, kern.block
        if _warp_rings(attr.body):   # one more threadIdx.z: the producer warp
            launch, block = _with_producer_warp(kern, attr.body)
        r = CudaRenderer(namer, launch, list(kern.shared), hp.lets, kern.red_bufs)
        r.aligned_buffers = set(workspaces)
        r.nonneg_vars |= shape_vars  # a dimension is never negative
        r.size_vars |= shape_vars
        r.indent = 1
        r.waits_async = _has_async_copy(attr.body)  # (a barrier may come before the copy)
        # a TMA ring's slots are 128-byte aligned copy destinations: the rings first in
        # the arena (their sizes multiples of 128), each array aligned to 128
        rings = _tma_rings(attr.body)
        # (swizzled rings first: their slots start on their pattern's repeat, 1024 bytes)
        swz = _swizzled_rings(attr.body)
        shared = sorted(kern.shared, key=lambda b: (b not in swz, b not in rings)) \
            if rings or swz else list(kern.shared)
        _check_swizzled_offsets(shared, swz)
        r.swizzles = swz
        window = _uses_wgmma(attr.body) or bool(rings) or bool(swz)
        if kern.shared_bytes > MAX_STATIC_SHARED_BYTES:
            _dynamic_shared(r, namer, shared, kern.shared_bytes, window=window)
        elif window and kern.shared:
            # the emulation decodes wgmma descriptors as offsets into one shared arena
            r.emit("#if defined(TECOMP_CUDA_EMU)")
            _arena(r, namer, shared, kern.shared_bytes)
            r.emit("#else")
            for b in shared:
                r.emit(f"__shared__ __align__({1024 if b in swz else 128 if rings else SHARED_ALIGN}) "
                       f"{r.ctype(b.dtype)} {namer(b)}[{declared_size(b)}];")
            r.emit("#endif")
        else:
            for b in kern.shared:
                r.emit(f"__shared__ __align__({SHARED_ALIGN}) {r.ctype(b.dtype)} {namer(b)}"
                       f"[{declared_size(b)}];")
        r.stmt(attr.body)
        if r.param_align:
            params = [dataclasses.replace(p, align=r.param_align.get(p.obj, 0)) for p in params]
        params += [KernelParam(name, box, TENSOR_MAP, False) for name, box in r.tma_maps]
        uses_tma |= bool(r.tma_maps)
        helpers |= r.helpers
        narrow |= r.narrow_used
        uses_wmma |= r.uses_wmma
        bf16_fragments += r.bf16_fragments
        info = KernelInfo(kname, tuple(params), kern.grid, block, kern.shared_bytes,
                          kern.stage, r.has_barrier, kern.local_bytes)
        if any(h.startswith("tc_wgmma_m64") for h in r.helpers):
            _check_warpgroups(dataclasses.replace(info, block=kern.block))
        kernels.append(info)
        texts.append(_kernel_text(kern.index, info, r.lines, kern.stmt, _min_blocks(attr.body)))

    arch = as_target(tgt).arch
    if arch and sm_number(arch) < MMA_MIN_SM and bf16_fragments:
        raise BuildError(f"the wmma fragment {bf16_fragments[0]} holds bfloat16, which the "
                         f"tensor cores take from sm_{MMA_MIN_SM} on; this function is built for "
                         f"{arch}: build for 'cuda -arch=sm_{MMA_MIN_SM}' or later, or use "
                         "float16 operands")
    if arch and sm_number(arch) < MMA_MIN_SM and (
            helpers & {"tc_mma_m16n8k16_f16", "tc_mma_m16n8k16_bf16", "tc_mma_m16n8k8_tf32"}):
        raise BuildError(f"the cuda.mma_* tensor intrinsics (mma.sync.m16n8k16) need sm_"
                         f"{MMA_MIN_SM} or later; this function is built for {arch}: build for "
                         f"'cuda -arch=sm_{MMA_MIN_SM}' or later, or use the cuda.wmma_* "
                         "intrinsics and wmma.* fragment scopes")
    if uses_tma:
        _tma.check_target(arch)
    if helpers & {n for n in HOPPER_HELPERS if n.startswith("tc_wgmma_m64")}:
        check_wgmma_target(arch)
    head = [_comment(f"Generated by tecomp: CUDA C for `{func.name}` "
                     f"({len(kernels)} kernel{'s' if len(kernels) != 1 else ''}).")]
    if "float16" in narrow or uses_wmma:
        head.append("#include <cuda_fp16.h>")
    if "bfloat16" in narrow:
        head.append("#include <cuda_bf16.h>")
    if uses_wmma:
        head.append("#include <mma.h>")
    hr = CudaRenderer(Namer(), {}, [])
    hr.helpers = helpers
    helper_text = hr.helper_source()
    parts = ["\n".join(head)]
    if helper_text:
        parts.append(helper_text)
    parts.extend(texts)
    source = "\n\n".join(parts) + "\n"
    checks = tuple(split.attrs.get("param_checks", ()))
    if checks != tuple(func.attrs.get("param_checks", ())):
        # the codegen phase added conditions on the arguments (the int32 offsets of the
        # buffers the kernels flatten in int32): the runtimes check them with the rest
        func = PrimFunc(func.name, func.params, func.body, {**func.attrs, "param_checks": checks})
    return CudaSource(func, source, kernels, workspaces, list(hp.asserts), hp.written)


def _with_producer_warp(kern, body):
    """The launch extents and block of a kernel with a producer warp: one more
    ``threadIdx.z`` than the computing threads, whose statements must all lie in
    ``threadIdx.z`` loops (which leave the producer out) but for barriers."""
    z = kern.launch.get("threadIdx.z")
    if not isinstance(z, Const) or any(
            not isinstance(e, Const) for e in kern.launch.values()):
        raise BuildError(
            f"{kern.stage}: producer='tma_warp' needs constant thread extents and the "
            "computing threads bound along threadIdx.z (the producer warp is one more "
            "threadIdx.z); use producer='tma'")
    stray = _outside_z_loops(body)
    if stray:
        raise BuildError(
            f"{kern.stage}: producer='tma_warp': {stray} runs outside the kernel's threadIdx.z "
            "loops, so the producer warp (one more threadIdx.z) would run it too; bind every "
            "stage of the kernel along threadIdx.z, or use producer='tma'")
    launch = dict(kern.launch)
    launch["threadIdx.z"] = Const(int(z.value) + 1, z.dtype)
    bx, by, _ = kern.block
    return launch, (bx, by, launch["threadIdx.z"])


def _outside_z_loops(s) -> str:
    """A statement of ``s`` (its printed start) that is not in a ``threadIdx.z`` loop,
    barriers and the structure around the loops aside; "" if none."""
    if isinstance(s, For) and s.kind == "thread" and s.thread_tag == "threadIdx.z":
        return ""
    if isinstance(s, SeqStmt):
        for x in s.seq:
            w = _outside_z_loops(x)
            if w:
                return w
        return ""
    if isinstance(s, (For, Allocate, AttrStmt, LetStmt)):
        return _outside_z_loops(s.body)
    if isinstance(s, IfThenElse):
        return _outside_z_loops(s.then_case) or (
            _outside_z_loops(s.else_case) if s.else_case is not None else "")
    if isinstance(s, Evaluate) and isinstance(s.value, Call) and s.value.op == "syncthreads":
        return ""
    return to_str(s).strip().splitlines()[0][:80]


def _check_warpgroups(info: KernelInfo) -> None:
    """A kernel that issues wgmma runs whole warpgroups: its block's threads a multiple of
    128 (4 warps), where the launch extents are constants."""
    block = info.constant_block
    if block is not None and (block[0] * block[1] * block[2]) % WARPGROUP:
        raise BuildError(
            f"{info.name} (stage {info.stage}) issues wgmma, which a warpgroup of 4 warps "
            f"({WARPGROUP} threads) runs together, but its block is {block[0]} x {block[1]} x "
            f"{block[2]} = {block[0] * block[1] * block[2]} threads: bind the warps so that "
            f"the block has a multiple of {WARPGROUP} threads (e.g. WmmaConfig(4, 1, 1, ..., "
            "family='wgmma'): 4 warps on threadIdx.z)")


def _uses_wgmma(body) -> bool:
    return bool(collect(body, lambda n: isinstance(n, TensorIntrinCall)
                        and n.intrin.name.startswith("cuda.wgmma_")))


def _arena(r: CudaRenderer, namer: Namer, shared: List[Buffer], nbytes: int) -> None:
    """(The emulation's side of a wgmma kernel with static shared memory) every shared
    array a pointer into one byte array, named as the shared window (tc_smem_window)."""
    r.emit(f"  __shared__ __align__(1024) unsigned char tc_dynamic_smem[{nbytes}];")
    r.emit(f"  {r.helper('tc_smem_window')}(tc_dynamic_smem, {nbytes});")
    _shared_pointers(r, namer, shared)


def _dynamic_shared(r: CudaRenderer, namer: Namer, shared: List[Buffer], nbytes: int,
                    window: bool = False) -> None:
    """The shared arrays of a kernel that needs more than 48 KiB: one ``extern
    __shared__`` byte array (the launch passes its size), each array a pointer into it at
    a ``SHARED_ALIGN``-aligned offset.  The emulation, which has no dynamic shared memory,
    declares the byte array with its size (``window``: for wgmma's descriptors, as the
    shared window, :func:`_arena`)."""
    r.emit(f"// {nbytes} bytes of shared memory: dynamic (more than a kernel may declare "
           f"statically)")
    r.emit("#if defined(TECOMP_CUDA_EMU)")
    if window:
        r.emit(f"  __shared__ __align__(1024) unsigned char tc_dynamic_smem[{nbytes}];")
        r.emit(f"  {r.helper('tc_smem_window')}(tc_dynamic_smem, {nbytes});")
    else:
        r.emit(f"  __shared__ __align__({SHARED_ALIGN}) unsigned char tc_dynamic_smem[{nbytes}];")
    r.emit("#else")
    # (wgmma's swizzled tiles and TMA's destinations: aligned as the emulation's window)
    r.emit(f"  extern __shared__ __align__({1024 if window else SHARED_ALIGN}) unsigned char "
           "tc_dynamic_smem[];")
    r.emit("#endif")
    _shared_pointers(r, namer, shared)


def _shared_pointers(r: CudaRenderer, namer: Namer, shared: List[Buffer]) -> None:
    off = 0
    for b in shared:
        t = r.ctype(b.dtype)
        r.emit(f"{t}* const {namer(b)} = ({t}*)(tc_dynamic_smem + {off});")
        off += shared_array_bytes(b)


def _min_blocks(body) -> int:
    """The blocks per SM a ``pragma min_blocks_per_sm`` around a kernel asks for, or 0."""
    got = [int(n.value.value if isinstance(n.value, Const) else n.value) for n in collect(
        body, lambda n: isinstance(n, AttrStmt) and n.key == MIN_BLOCKS_PRAGMA)]
    return max(got, default=0)


def _kernel_text(k: int, info: KernelInfo, body_lines: List[str], stmt: Stmt,
                 min_blocks: int = 0) -> str:
    reads = [b.name for b in buffers_in(stmt)
             if b.scope == "global" and b not in set(stored_buffers(stmt))]
    text = f"kernel {k}: stage {info.stage}"
    if reads:
        text += f" (reads {', '.join(reads)})"
    lines = [_comment(text),
             _comment(f"launch: grid ({dims_text(info.grid)}), block ({dims_text(info.block)})"
                      + (f", {info.shared_bytes} bytes of shared memory" if info.shared_bytes
                         else "") + (" (dynamic)" if info.dynamic_shared else ""))]
    bounds = ""
    cb = info.constant_block
    if cb is not None:
        bounds = f"__launch_bounds__({cb[0] * cb[1] * cb[2]}" + (
            f", {min_blocks}) " if min_blocks else ") ")
    params = ", ".join(f"{param_ctype(p)} {p.name}" for p in info.params)
    lines.append(f'extern "C" __global__ void {bounds}{info.name}({params}) {{')
    lines.extend(body_lines)
    lines.append("}")
    return "\n".join(lines)


def build_cuda(func: PrimFunc, driver=None, target=None) -> CudaModule:
    """Generate CUDA C for ``func``; compiling and launching happen at the first call.

    Works without pycuda or a GPU (the source is available); calling then raises
    RuntimeUnavailableError.  ``driver`` replaces the pycuda driver (tests).
    """
    return CudaModule(codegen_cuda(func), driver, target, exporter=export_cuda_library)
