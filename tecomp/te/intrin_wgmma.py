"""Hopper's warpgroup MMA as tensor intrinsics: ``cuda.wgmma_{f16f16f32,bf16bf16f32}_n<N>``
(``wgmma.mma_async.sync.aligned.m64nNk16``, sm_90a), its operands read straight from
shared memory through matrix descriptors (:mod:`tecomp.codegen.cuda_hopper`).

A warpgroup is 4 consecutive warps (128 threads).  Each warp tensorizes its own ``16 x
N`` strip of the warpgroup's ``64 x N`` accumulator; the four warps of a warpgroup issue
the same wgmma together::

    AS = s.cache_read(A, "shared", [CF], blocks=[(0, 8), (1, 8)])   # A[M, K]: [M/8, K/8, 8, 8]
    BS = s.cache_read(W, "shared", [CF], blocks=[(0, 8), (1, 8)])   # W[N, K]: [N/8, K/8, 8, 8]
    CF = s.cache_write(C, "mma.accumulator")                        # per warp, 16 x N
    ...                                      # CF's loops: i -> (io 2, ii 8), j -> (jo N/8, ji 8),
    s[CF].tensorize(io, tc.tensor_intrin("cuda.wgmma_f16f16f32_n128"))   # k -> (ko 2, ki 8)

(``cuda.wgmma_*_n<N>_k32`` / ``_k64``: a whole k step, ``ko`` of 4 / 8: its 2 / 4 wgmmas
committed as one group and waited for once.)

``cuda.wgmma_{f16f16f32,bf16bf16f32}_n<N>_k<K>_rows`` (K 16, 32, 64) read their operands
as plain rows instead, ``a[i, k]`` (16 x K) and ``b[j, k]`` (N x K): the slots of a TMA ring
laid out swizzled (``double_buffer(stages, producer="tma", swizzle=...)``: rows of
exactly the swizzle's bytes, K = 64 with 128B, 32 with 64B, 16 with 32B), the
descriptors carrying the same swizzle mode (SBO the 8-row pattern's bytes).  The fill
for their accumulators is ``cuda.wgmma_fill_f32_n<N>_rows``.

``cuda.wgmma_{f16f16f32,bf16bf16f32}_n<N>_k<K>_rows_bmn<C>`` (C 64, 32, 16) read B
N-major, as ``B[K, N]`` lies: ``b[jo, ji, k]`` (``N / C`` chunks of ``C`` n, ``K`` rows
each), ``c[i, jo, ji]``: the tile of ``cache_read(B, ..., blocks=[(0, K), (1, C)])`` in
a ring swizzled by the chunk's bytes (C 64: 128B, 32: 64B, 16: 32B).  Each wgmma has its
imm-trans-b set (``tc_wgmma_m64n<N>k16_<t>_tb``) and B's descriptor is the PTX ISA's
MN-major swizzled layout: rows of C n, one per k, 8 k a pattern, SBO from 8 k to the next
8, LBO from one chunk of n to the next (each 16 of k two patterns further).  Their fill is
``cuda.wgmma_fill_f32_n<N>_rows_bmn<C>``.  Both ``_rows`` kinds read ``a`` M-major where
its strides are ``[1, C]`` (``A[K, M]``'s tile in chunks of C of m, ``K`` rows each, as
B's): imm-trans-a, the descriptor's start the warpgroup's block of the strip's chunk.

The declared computation, per warp, is ``c[io, ii, jo, ji] += f32(a[io, ko, ii, ki]) *
f32(b[ko, jo, ji, ki])`` -- a ``16 x 16`` block of A (row ``8 io + ii``, k ``8 ko + ki``)
and a ``16 x N`` block of B stored K-major, in 8 x 8 *core matrices* of 128 contiguous
bytes: the layout of ``cache_read(..., blocks=)`` with the operand's row (or column) and
k both blocked by 8, k's block innermost (``A[K, M]``: ``blocks=[(1, 8), (0, 8)]``;
``B[K, N]``: ``blocks=[(1, 8), (0, 8)]``).  That is the PTX ISA's K-major layout without
swizzle ("Shared Memory Matrix Layout"): the descriptor's leading byte offset is the
stride between core matrices along k, its stride byte offset the stride between them
along M (N).  The accumulator fragment is the ``mma.accumulator`` scope of the
``cuda.mma_*`` intrinsics: a warp's part of wgmma's D fragment ("Matrix fragments for
wgmma .m64nNk16": ``d[i] = D[16 w + g + 8 ((i / 2) % 2)][8 (i / 4) + 2 q + i % 2]``) is
exactly those fragments' per-lane layout over its ``16 x 16`` tiles, so
``cuda.mma_store_f32`` stores it and the fused epilogues work unchanged.

The warpgroup's 64-row A block starts 16 rows per warp before each warp's strip: the
warps of a warpgroup must hold consecutive 16-row strips of one A block and the same B
block (warps stacked along M, bound to ``threadIdx.z`` / ``threadIdx.y`` with
``blockDim.x == 32``); the emulation checks that the lanes of each warp agree on the
descriptors.  Each call is preceded by ``fence.proxy.async`` (the tiles were written
through the generic proxy, cp.async or stores; wgmma reads them through the async proxy)
and ``wgmma.fence``, committed and waited for (``wgmma.wait_group 0``): the operands'
shared tiles may be overwritten after it.
"""
from __future__ import annotations

from ..errors import BuildError
from .intrin_cuda import TC_DTYPES as WGMMA_DTYPES
from .intrin_mma import _fragment, _shared
from .tensor import compute, const, placeholder, reduce_axis
from .reduce import sum as _sum

#: the swizzle modes of a matrix descriptor, bits 62-63 (PTX ISA 8.x, "Asynchronous
#: Warpgroup Level Matrix Shared Memory Layout: Matrix Descriptor Format")
SWIZZLE = {"none": 0, "128B": 1, "64B": 2, "32B": 3}
#: the bytes of one row of a swizzle pattern (the k extent a K-major swizzled tile's row
#: holds), and the bytes after which the pattern repeats (8 rows)
SWIZZLE_ROW_BYTES = {"128B": 128, "64B": 64, "32B": 32}

#: the N of the declared intrinsics (one warpgroup's tile is 64 x N)
WGMMA_TILE_N = (16, 32, 64, 128, 256)
#: the k of the declared intrinsics: 16 (``cuda.wgmma_*_n<N>``), and whole k steps of 32
#: or 64 (``cuda.wgmma_*_n<N>_k<K>``: K / 16 wgmmas committed as one group, waited once)
WGMMA_TILE_K = (16, 32, 64)
#: the chunks of N of an N-major B tile (the ``_bmn<chunk>`` intrinsics): a row of 16-bit
#: elements of the 128B, 64B and 32B swizzles
MN_CHUNKS = (64, 32, 16)
#: the swizzle of each chunk's rows
MN_CHUNK_SWIZZLE = {64: "128B", 32: "64B", 16: "32B"}
#: the suffix of the wgmma helpers (tecomp.codegen.cuda_hopper) whose operands lie
#: MN-major in shared memory (imm-trans-a, imm-trans-b): A M-major, B N-major, both
TRANS_SUFFIX = {(0, 0): "", (1, 0): "_ta", (0, 1): "_tb", (1, 1): "_tab"}
#: C text of the warp's index within its warpgroup
WARP_IN_GROUP = ("((int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z))"
                 " >> 5 & 3)")


def _decl(dtype: str, n: int, k: int = 16):
    a = placeholder((2, k // 8, 8, 8), dtype, name="a")
    b = placeholder((k // 8, n // 8, 8, 8), dtype, name="b")
    ko = reduce_axis((0, k // 8), name="ko")
    ki = reduce_axis((0, 8), name="ki")
    return compute((2, 8, n // 8, 8), lambda io, ii, jo, ji: _sum(
        a[io, ko, ii, ki].astype("float32") * b[ko, jo, ji, ki].astype("float32"),
        axis=[ko, ki]), name="c")


def _rows_decl(dtype: str, n: int, k: int):
    a = placeholder((16, k), dtype, name="a")
    b = placeholder((n, k), dtype, name="b")
    r = reduce_axis((0, k), name="k")
    return compute((16, n), lambda i, j: _sum(
        a[i, r].astype("float32") * b[j, r].astype("float32"), axis=r), name="c")


def _rows_fill_decl(n: int):
    return compute((16, n), lambda i, j: const(0, "float32"), name="c")


def _rows_bmn_decl(dtype: str, n: int, k: int, chunk: int):
    a = placeholder((16, k), dtype, name="a")
    b = placeholder((n // chunk, chunk, k), dtype, name="b")
    r = reduce_axis((0, k), name="k")
    return compute((16, n // chunk, chunk), lambda i, jo, ji: _sum(
        a[i, r].astype("float32") * b[jo, ji, r].astype("float32"), axis=r), name="c")


def _rows_bmn_fill_decl(n: int, chunk: int):
    return compute((16, n // chunk, chunk), lambda i, jo, ji: const(0, "float32"), name="c")


def _fill_decl(n: int):
    return compute((2, 8, n // 8, 8), lambda io, ii, jo, ji: const(0, "float32"), name="c")


def _core_strides(name: str, view, outer: int):
    """(lbo, sbo) in bytes of a core-matrix operand: its strides ``[row-or-k blocks,
    ..., 8, 1]`` (``outer``: the dimension that steps along k)."""
    s = view.strides
    if not all(isinstance(x, int) for x in s) or s[2] != 8 or s[3] != 1 or any(
            x % 8 or x <= 0 or x * 2 >= 1 << 18 for x in s[:2]):
        raise BuildError(
            f"tensor intrinsic {name}: operand {view.name} is a block of {view.buffer_name} "
            f"with element strides {list(s)}; wgmma reads 8 x 8 core matrices of 128 contiguous "
            "bytes (strides [.., .., 8, 1], the outer two multiples of 8 below 2**17): copy the "
            "operand to shared memory with cache_read(..., blocks=) blocking its row and k "
            "dimensions by 8, k's block innermost")
    k_step = s[outer] * 2
    mn_step = s[1 - outer] * 2
    return k_step, mn_step


def _emit(name: str, t: str, n: int, k: int = 16):
    def emit(cb, ins, outs):
        c = _fragment(name, outs[0], "mma.accumulator")
        a = _shared(name, ins[0], "wgmma reads")
        b = _shared(name, ins[1], "wgmma reads")
        a_lbo, a_sbo = _core_strides(name, a, 1)   # a: [row blocks, k blocks, 8, 8]
        b_lbo, b_sbo = _core_strides(name, b, 0)   # b: [k blocks, col blocks, 8, 8]
        desc = cb.helper("tc_wgmma_desc")
        # the warpgroup's A block: this warp's strip is 16 rows (2 row blocks) per warp in
        row_block = a.strides[0]
        # the tiles were written through the generic proxy (cp.async, stores); wgmma reads
        # them through the async proxy
        cb.emit(f"{cb.helper('tc_fence_proxy_async')}();")
        cb.emit(f"{cb.helper('tc_wgmma_fence')}();")
        for kk in range(k // 16):   # k16 steps: 2 core matrices along k each, one group
            da = cb.tmp("unsigned long long",
                        f"{desc}({a.ptr} + {2 * kk * a.strides[1]} - {WARP_IN_GROUP} * "
                        f"{2 * row_block}, {a_lbo}, {a_sbo}, 0)", "da")
            db = cb.tmp("unsigned long long",
                        f"{desc}({b.ptr} + {2 * kk * b.strides[0]}, {b_lbo}, {b_sbo}, 0)", "db")
            cb.emit(f"{cb.helper(f'tc_wgmma_m64n{n}k16_{t}')}({c}, {da}, {db}, 1);")
        cb.emit(f"{cb.helper('tc_wgmma_commit')}();")
        cb.emit(f"{cb.helper('tc_wgmma_wait')}<0>();")
    return emit


def _swizzled_rows(name: str, view, k: int):
    """(swizzle mode, row stride in elements) of an operand of a ``_rows`` intrinsic: a
    tile of a swizzled TMA ring whose rows are the swizzle's bytes (BuildError else)."""
    swz = getattr(view, "swizzle", "none")
    s = view.strides
    span = SWIZZLE_ROW_BYTES.get(swz)
    if span is None or not all(isinstance(x, int) for x in s) or s[1] != 1 or \
            s[0] * 2 != span or k * 2 > span:
        raise BuildError(
            f"tensor intrinsic {name}: operand {view.name} is a block of {view.buffer_name} "
            f"(swizzle {swz!r}, element strides {list(s)}); the _rows intrinsics read the "
            "slots of a swizzled TMA ring whose rows hold the whole k step: "
            "double_buffer(stages, producer='tma', swizzle='128B') on a [rows, 64] tile "
            "(swizzle '64B' for k steps of 32, '32B' for 16)")
    return swz, s[0]


def _mn_rows(name: str, view, k: int):
    """(swizzle mode, LBO bytes, elements between k rows) of an N-major operand ``b[jo,
    ji, k]`` of a ``_bmn`` intrinsic: a tile of a swizzled TMA ring in chunks of N, each
    ``k`` rows (one per k) of exactly the swizzle's bytes of N, the chunks whole patterns
    apart (BuildError else)."""
    swz = getattr(view, "swizzle", "none")
    s, shape = view.strides, view.shape
    span = SWIZZLE_ROW_BYTES.get(swz)
    if span is None or not all(isinstance(x, int) for x in s) or s[1] != 1 or \
            s[2] * 2 != span or shape[1] * 2 != span or \
            (shape[0] > 1 and (s[0] * 2 % (8 * span) or s[0] < k * s[2] or
                               s[0] * 2 >= 1 << 18)):
        raise BuildError(
            f"tensor intrinsic {name}: operand {view.name} is a block of {view.buffer_name} "
            f"(swizzle {swz!r}, element strides {list(s)}, shape {list(shape)}); the _bmn "
            "intrinsics read N-major tiles of a swizzled TMA ring in chunks of N whose k "
            "rows hold exactly the swizzle's bytes: cache_read(B, 'shared', ..., "
            "blocks=[(0, k_tile), (1, 64)]) and double_buffer(stages, producer='tma', "
            "swizzle='128B') (chunks of 32 with '64B', 16 with '32B')")
    return swz, (s[0] * 2 if shape[0] > 1 else 0), s[2]


def _a_rows(name: str, a, k: int):
    """The warp's A strip of a ``_rows`` intrinsic as its warpgroup's descriptors see it:
    ``(m_major, C text from a.ptr to the warpgroup's block, elements per 16 of k, LBO,
    SBO, swizzle)``.  K-major (strides ``[row, 1]``): rows of the k step, the block 16
    rows per warp before the strip.  M-major (strides ``[1, C]``: ``A[K, M]``'s tile in
    chunks of C of m, ``k`` rows of C each, the chunks ``k * C`` elements apart:
    ``cache_read(A, ..., blocks=[(0, k), (1, C)])``): wgmma's imm-trans-a, LBO from one
    chunk of m to the next, SBO from 8 k to the next 8."""
    s = a.strides
    swz = getattr(a, "swizzle", "none")
    span = SWIZZLE_ROW_BYTES.get(swz)
    if span and len(s) == 2 and all(isinstance(x, int) for x in s) and s[0] == 1 and \
            s[1] * 2 == span:
        chunk = s[1]   # (16, 32 or 64: a warp's 16 rows lie in one chunk)
        back = (f" - (({WARP_IN_GROUP} * 16) / {chunk}) * {k * chunk}"
                f" - ({WARP_IN_GROUP} * 16) % {chunk}")
        return True, back, 16 * chunk, 2 * k * chunk, 8 * span, swz
    swz, row = _swizzled_rows(name, a, k)
    return False, f" - {WARP_IN_GROUP} * {16 * row}", 16, 16, 8 * span, swz


def _rows_emit(name: str, t: str, n: int, k: int, b_mn: bool = False):
    """A warp's ``16 x n`` strip of its warpgroup's ``64 x n`` accumulator over a k step
    of ``k``, A and B rows of a swizzled ring (the tensor maps' swizzle, the same mode in
    the descriptors: SBO the 8-row pattern, LBO unused, each 16 of k 32 bytes further
    along the row, as the hardware applies the XOR to the address it computes).  With
    ``b_mn`` B lies N-major (wgmma's imm-trans-b): rows of N, one per k, in chunks of the
    swizzle's bytes (SBO the 8 k rows of a pattern, LBO from one chunk of N to the next,
    each 16 of k two patterns further).  A may lie M-major the same way (its strides say
    which: :func:`_a_rows`; imm-trans-a)."""

    def emit(cb, ins, outs):
        c = _fragment(name, outs[0], "mma.accumulator")
        a = _shared(name, ins[0], "wgmma reads", swizzled=True)
        b = _shared(name, ins[1], "wgmma reads", swizzled=True)
        a_mn, a_back, a_step, a_lbo, a_sbo, swz = _a_rows(name, a, k)
        if b_mn:
            swz_b, b_lbo, b_krow = _mn_rows(name, b, k)
            b_step, b_sbo = 16 * b_krow, 8 * SWIZZLE_ROW_BYTES[swz_b]
        else:
            swz_b, _ = _swizzled_rows(name, b, k)
            if swz_b != swz and not a_mn:
                raise BuildError(f"tensor intrinsic {name}: operands {a.name} and {b.name} "
                                 f"have the swizzles {swz!r} and {swz_b!r}; give both rings "
                                 "one")
            b_step, b_lbo, b_sbo = 16, 16, 8 * SWIZZLE_ROW_BYTES[swz_b]
        desc = cb.helper("tc_wgmma_desc")
        mma = cb.helper(f"tc_wgmma_m64n{n}k16_{t}{TRANS_SUFFIX[int(a_mn), int(b_mn)]}")
        cb.emit(f"{cb.helper('tc_fence_proxy_async')}();")
        cb.emit(f"{cb.helper('tc_wgmma_fence')}();")
        for kk in range(k // 16):
            da = cb.tmp("unsigned long long",
                        f"{desc}({a.ptr} + {a_step * kk}{a_back}, {a_lbo}, {a_sbo}, "
                        f"{SWIZZLE[swz]})", "da")
            db = cb.tmp("unsigned long long",
                        f"{desc}({b.ptr} + {b_step * kk}, {b_lbo}, {b_sbo}, {SWIZZLE[swz_b]})",
                        "db")
            cb.emit(f"{mma}({c}, {da}, {db}, 1);")
        cb.emit(f"{cb.helper('tc_wgmma_commit')}();")
        cb.emit(f"{cb.helper('tc_wgmma_wait')}<0>();")
    return emit


def _fill_emit(name: str, n: int):
    def emit(cb, ins, outs):
        c = _fragment(name, outs[0], "mma.accumulator")
        cb.emit(f"for (int tc_r = 0; tc_r < {n // 2}; ++tc_r) ({c})[tc_r] = 0.0f;")
    return emit


def declarations():
    """The ``cuda.wgmma_*`` intrinsics, as :func:`tecomp.te.intrin_cuda.declarations`."""
    out = []
    for n in WGMMA_TILE_N:
        fill = f"cuda.wgmma_fill_f32_n{n}"
        out.append((_fill_decl(n), _fill_emit(fill, n), fill, False, None))
        rows_fill = f"{fill}_rows"
        out.append((_rows_fill_decl(n), _fill_emit(rows_fill, n), rows_fill, False, None))
        for dt, t in WGMMA_DTYPES.items():   # swizzled TMA rings: rows of a whole k step
            for k in WGMMA_TILE_K:
                name = f"cuda.wgmma_{t}{t}f32_n{n}_k{k}_rows"
                out.append((_rows_decl(dt, n, k), _rows_emit(name, t, n, k), name, False,
                            rows_fill))
        for chunk in MN_CHUNKS:   # B N-major: rows of N in chunks, one per k
            if chunk > n:
                continue
            bmn_fill = f"{rows_fill}_bmn{chunk}"
            out.append((_rows_bmn_fill_decl(n, chunk), _fill_emit(bmn_fill, n), bmn_fill,
                        False, None))
            for dt, t in WGMMA_DTYPES.items():
                for k in WGMMA_TILE_K:
                    name = f"cuda.wgmma_{t}{t}f32_n{n}_k{k}_rows_bmn{chunk}"
                    out.append((_rows_bmn_decl(dt, n, k, chunk),
                                _rows_emit(name, t, n, k, b_mn=True), name, False, bmn_fill))
        for dt, t in WGMMA_DTYPES.items():
            name = f"cuda.wgmma_{t}{t}f32_n{n}"
            out.append((_decl(dt, n), _emit(name, t, n), name, False, fill))
            for k in WGMMA_TILE_K[1:]:   # a whole k step: k / 16 wgmmas, one group
                name_k = f"{name}_k{k}"
                out.append((_decl(dt, n, k), _emit(name_k, t, n, k), name_k, False, fill))
    return out
