"""Helpers of the CUDA templates: the targets they take, thread binding, cooperative
copies into shared memory."""
from __future__ import annotations

from typing import Sequence, Tuple

from ...errors import ScheduleError, TargetError
from ...schedule.schedule import Stage
from ...build import device_arch
from ...target import as_target
from ...target.cuda import block_shared_limit, blocks_per_sm_by_shared
from ...te.tensor import thread_axis
from .._common import _ceil


ELEMENTWISE_THREADS = 256


# a GEMM with fewer blocks than this uses smaller tiles (about two waves on 60-130 SMs)
MIN_BLOCKS = 128


def _check_target(target) -> None:
    try:
        gpu = as_target(target).is_gpu
    except TargetError as exc:
        raise ScheduleError(f"the tecomp.nn CUDA schedules: {exc}") from None
    if not gpu:
        raise ScheduleError(f"the tecomp.nn CUDA schedules are for target 'cuda' or 'cuda-emu', "
                            f"got {str(target)!r} (the CPU schedules are in "
                            f"tecomp.strategy.cpu)")


def max_shared_bytes(target) -> int:
    """The shared memory a block may take on ``target``'s GPU: its ``-arch``, else GPU 0's
    (``cuda``), else sm_80's (:func:`tecomp.target.cuda.block_shared_limit`)."""
    return block_shared_limit(sm_arch(target))


def sm_arch(target):
    """``target``'s ``-arch``, else GPU 0's (``cuda``), else None (sm_80's figures)."""
    t = as_target(target)
    return device_arch() if t.arch is None and t.kind == "cuda" else t.arch


def _pow2_at_least(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def _bind(st: Stage, axis, tag: str) -> None:
    st.bind(axis, thread_axis(tag))


def _cooperative_copy(st: Stage, threads: Sequence[Tuple[str, int]], tile_elems: int,
                      vector: int = 1) -> None:
    """Spread the copy into a shared tile of ``tile_elems`` elements over the block: the
    tile's axes fused, split by the thread extents (innermost first: ``threadIdx.x`` on
    consecutive elements, so consecutive threads touch consecutive addresses) and bound;
    the remaining outer loop (each thread's share) is unrolled when short, so that the
    share's global loads are in flight together.  ``vector`` > 1 (it must divide the
    tile's innermost extent): each thread copies ``vector`` consecutive elements at a
    time, a vectorized loop (one 16-byte move where the addresses are aligned)."""
    axes = list(st.op.axis)
    if vector > 1:
        outer, inner = st.split(axes[-1], factor=vector)
        st.vectorize(inner)
        axes[-1] = outer
        tile_elems //= vector
    axis = st.fuse(*axes) if len(axes) > 1 else axes[0]
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
