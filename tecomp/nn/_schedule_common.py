"""Helpers shared by the CPU and CUDA operator schedules."""
from __future__ import annotations

from typing import List, Optional, Sequence

from ..errors import ScheduleError
from ..ir import dtype as _dt
from ..ir.expr import Const
from ..te.tensor import ComputeOp, Tensor, compute_ops


def _outs(outs) -> List[Tensor]:
    if isinstance(outs, Tensor):
        return [outs]
    if isinstance(outs, (list, tuple)) and outs and all(isinstance(t, Tensor) for t in outs):
        return list(outs)
    raise ScheduleError(f"a schedule_* function takes an output tensor or a list of them, "
                        f"got {outs!r}")


def _cint(e) -> Optional[int]:
    """The value of a constant extent, or None when symbolic."""
    return int(e.value) if isinstance(e, Const) else None


def _walk(outs: Sequence[Tensor]) -> List[ComputeOp]:
    """Every compute op reachable from ``outs``, producers first (no extern stage or scan:
    they have no body to schedule)."""
    return [op for op in compute_ops(outs) if isinstance(op, ComputeOp)]


def _bytes(t: Tensor) -> Optional[int]:
    """The size of ``t`` in bytes, or None when its shape is symbolic."""
    n = _dt.bits(t.dtype) // 8
    for e in t.shape:
        e = _cint(e)
        if e is None:
            return None
        n *= e
    return n


def _largest_divisor_at_most(n: int, cap: int) -> int:
    for d in range(min(n, cap), 0, -1):
        if n % d == 0:
            return d
    return 1
