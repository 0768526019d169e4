"""CUDA: the limits every device of compute capability 3.0 or later shares, and the
architectures ``-arch`` names."""
from __future__ import annotations

# CUDA limits every device of compute capability >= 3.0 shares (the one home of them)
MAX_THREADS_PER_BLOCK = 1024
MAX_BLOCK_DIMS = (1024, 1024, 64)
MAX_GRID_DIMS = (2**31 - 1, 65535, 65535)
MAX_STATIC_SHARED_BYTES = 48 * 1024   # a kernel's static __shared__ arrays, on every GPU
#: a block's shared memory beyond that is dynamic (``extern __shared__``, opted in per
#: kernel): at most this much on an sm_90 device (227 KiB; sm_80 163 KiB, sm_86/89 99 KiB),
#: the device's own limit checked when the kernel is launched
MAX_DYNAMIC_SHARED_BYTES = 227 * 1024
#: the local memory (``local`` arrays: the stack of a CUDA thread) one thread may use, on
#: every device since compute capability 2.0
MAX_LOCAL_BYTES_PER_THREAD = 512 * 1024
# bytes: each __shared__ array starts on this boundary (16-byte vector loads; the 32-byte
# alignment wmma's load_matrix_sync / store_matrix_sync need of a tile's first element)
SHARED_ALIGN = 32
#: the scopes of tensor-core fragments: per warp, 16 x 16 tiles held in registers, read
#: and written only by the tensor intrinsics of their family (``wmma.*``: nvcuda::wmma,
#: the ``cuda.wmma_*`` intrinsics; ``mma.*``: PTX ldmatrix / mma.sync, the ``cuda.mma_*``
#: intrinsics)
WMMA_SCOPES = ("wmma.matrix_a", "wmma.matrix_b", "wmma.accumulator")
MMA_SCOPES = ("mma.matrix_a", "mma.matrix_b", "mma.accumulator")
FRAGMENT_SCOPES = WMMA_SCOPES + MMA_SCOPES
#: scopes whose buffer belongs to one thread (a fragment: to one warp, every lane of
#: which runs the same code on it)
PER_THREAD_SCOPES = ("local",) + FRAGMENT_SCOPES
WARP_SIZE = 32
#: the oldest architecture the cuda.mma_* intrinsics run on (mma.sync.m16n8k16)
MMA_MIN_SM = 80


#: the most shared memory (static and dynamic) one block may take, by compute capability
MAX_BLOCK_SHARED_BYTES = {70: 96 * 1024, 75: 64 * 1024, 80: 163 * 1024, 86: 99 * 1024,
                          87: 163 * 1024, 89: 99 * 1024, 90: 227 * 1024, 100: 227 * 1024,
                          120: 99 * 1024}


#: the shared memory of one SM, by compute capability (what its resident blocks share)
SM_SHARED_BYTES = {70: 96 * 1024, 75: 64 * 1024, 80: 164 * 1024, 86: 100 * 1024,
                   87: 164 * 1024, 89: 100 * 1024, 90: 228 * 1024, 100: 228 * 1024,
                   120: 100 * 1024}
#: the shared memory the system reserves per resident block from sm_80 on
BLOCK_RESERVED_SHARED_BYTES = 1024


def blocks_per_sm_by_shared(arch, shared: int) -> int:
    """How many blocks of ``shared`` bytes of shared memory one SM of ``arch`` holds (at
    least 1; the registers and the threads may allow fewer); for an unknown or unnamed
    architecture, sm_80's."""
    sm = sm_number(arch) if arch else 80
    per_block = shared + (BLOCK_RESERVED_SHARED_BYTES if sm >= 80 else 0)
    return max(1, SM_SHARED_BYTES.get(sm, SM_SHARED_BYTES[80]) // max(1, per_block))


def block_shared_limit(arch) -> int:
    """The shared memory one block of ``arch`` (``"sm_86"``) may take; for an unknown or
    unnamed architecture, sm_80's (A100, and less than Hopper's)."""
    sm = sm_number(arch) if arch else 80
    return MAX_BLOCK_SHARED_BYTES.get(sm, MAX_BLOCK_SHARED_BYTES[80])


def sm_number(arch: str) -> int:
    """The compute capability of ``arch`` as a number: 90 for ``"sm_90a"``."""
    return int("".join(c for c in arch if c.isdigit()))
CUDA_ARCHS = ("sm_70", "sm_75", "sm_80", "sm_86", "sm_87", "sm_89", "sm_90", "sm_90a",
              "sm_100", "sm_120")
