"""Helpers shared by the CPU and CUDA operator schedules."""
from __future__ import annotations

from typing import List, Sequence

from ..errors import ScheduleError
from ..ir.expr import ProducerLoad, Reduce
from ..ir.functor import collect
from ..schedule.schedule import Schedule
from ..te.tensor import ComputeOp, Tensor, compute_ops
from ..nn._common import _bytes, _cint, _largest_divisor_at_most  # noqa: F401  (shared with nn)


def _outs(outs) -> List[Tensor]:
    if isinstance(outs, Tensor):
        return [outs]
    if isinstance(outs, (list, tuple)) and outs and all(isinstance(t, Tensor) for t in outs):
        return list(outs)
    raise ScheduleError(f"a schedule_* function takes an output tensor or a list of them, "
                        f"got {outs!r}")


def _walk(outs: Sequence[Tensor]) -> List[ComputeOp]:
    """Every compute op reachable from ``outs``, producers first (no extern stage or scan:
    they have no body to schedule)."""
    return [op for op in compute_ops(outs) if isinstance(op, ComputeOp)]


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _has_tag(op, *tags) -> bool:
    """Whether ``op``'s comma-separated tag holds one of ``tags``."""
    mine = {t.strip() for t in (op.tag or "").split(",")}
    return any(t in mine for t in tags)


def _is_injective(op) -> bool:
    return isinstance(op, ComputeOp) and not op.reduce_axis


def _inline_injective(s: Schedule, ops, keep=()) -> None:
    """Inline every injective (reduction-free) stage of ``ops`` that is not an output,
    not attached somewhere, and not in ``keep``."""
    for op in ops:
        if any(op is k for k in keep) or not _is_injective(op):
            continue
        st = s[op]
        if not st.is_output and st.attach_type == "root":
            st.compute_inline()


def _contraction_operands(op: ComputeOp):
    """For a (batched) GEMM ``C[b.., i, j] = sum_k X[b.., i, k] * Y[b.., k, j]`` (either
    operand's last two indices in either order, its leading indices batch axes of C or
    none -- a broadcast operand): ``(nbatch, (a, a_kfirst), (b, b_kfirst))``, as
    :func:`_gemm_operands` with ``nbatch`` leading batch axes; None when ``op`` is not
    one (two data axes or more, one reduction axis, a sum of a product of the two
    operands read that way; a multi-output compute, an argmax, is none)."""
    if len(op.bodies) != 1:
        return None
    body = op.body
    if not isinstance(body, Reduce) or len(op.axis) < 2 or len(op.reduce_axis) != 1 \
            or body.combiner.name != "sum":
        return None
    *batch, i, j = (iv.var for iv in op.axis)
    k = op.reduce_axis[0].var
    loads = collect(body.source, lambda n: isinstance(n, ProducerLoad))
    if len(loads) != 2:
        return None
    a = b = None
    for ld in loads:
        idx = ld.indices
        if len(idx) < 2 or not all(x in batch for x in idx[:-2]):
            return None
        last = idx[-2:]
        if (last[0] is i and last[1] is k) or (last[0] is k and last[1] is i):
            a = (ld.producer, last[0] is k)
        elif (last[0] is k and last[1] is j) or (last[0] is j and last[1] is k):
            b = (ld.producer, last[0] is k)
    if a is None or b is None:
        return None
    return len(batch), a, b


def _gemm_operands(op: ComputeOp, required: bool = False):
    """For ``C[i, j] = sum_k X[., .] * Y[., .]``: ``((a, a_kfirst), (b, b_kfirst))`` with
    ``a`` the operand indexed by ``(i, k)`` (or ``(k, i)``) and ``b`` by ``(k, j)`` (or
    ``(j, k)``); ``*_kfirst`` says whether the reduction index comes first (``B[k, j]``)
    or last (``W[j, k]``).  An operand not read that way (``matmul_packed``'s panels) is
    None, or a ScheduleError when ``required``."""
    body = op.body
    if not isinstance(body, Reduce) or len(op.axis) != 2 or len(op.reduce_axis) != 1:
        raise ScheduleError(f"{op.name} is not a 2-d GEMM (C[i, j] = sum_k A[., .] * B[., .])")
    i, j = (iv.var for iv in op.axis)
    k = op.reduce_axis[0].var
    a = b = None
    for ld in collect(body.source, lambda n: isinstance(n, ProducerLoad)):
        idx = ld.indices
        if len(idx) != 2:
            continue
        if (idx[0] is i and idx[1] is k) or (idx[0] is k and idx[1] is i):
            a = (ld.producer, idx[0] is k)
        elif (idx[0] is k and idx[1] is j) or (idx[0] is j and idx[1] is k):
            b = (ld.producer, idx[0] is k)
    if required and (a is None or b is None):
        raise ScheduleError(f"{op.name}: could not find the two operands of the GEMM (each "
                            "indexed by one output axis and the reduction axis)")
    return a, b
