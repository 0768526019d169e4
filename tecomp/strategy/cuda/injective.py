"""Elementwise / injective (``schedule_injective``, ``schedule_elementwise``).

Producers inlined; the output's axes fused, split by the block size (256 threads)
and bound to ``blockIdx.x`` / ``threadIdx.x``."""
from __future__ import annotations

import math
from typing import Optional

from ...errors import ScheduleError
from ...schedule.schedule import Schedule, Stage, create_schedule
from .._common import _cint, _inline_injective, _is_injective, _outs, _walk
from .common import ELEMENTWISE_THREADS, _bind, _check_target, _pow2_at_least


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
