"""Helpers shared by the CPU and CUDA operator schedules and the generic rules: reading a
compute DAG (constant extents, the loads of an expression, how a load moves along a loop
variable, the kinds of stage: padding, injective, cheap to recompute; whether a pass
stores its output past the cache)."""
from __future__ import annotations

from typing import List, Optional, Sequence

from ..errors import ScheduleError
from ..ir import dtype as _dt
from ..ir.expr import Call, Const, Div, Expr, ProducerLoad, Reduce, Select, Var
from ..ir.functor import collect, substitute, uses_var
from ..ir.simplify import simplify
from ..schedule.schedule import Schedule
from ..te.tensor import ComputeOp, PlaceholderOp, Tensor, compute_ops
from ..nn._common import _bytes, _cint, _largest_divisor_at_most  # noqa: F401  (shared with nn)


def _read_by_nest(s: Schedule, st, loop) -> List[Tensor]:
    """The tensors the nest of stage ``st`` reads from memory: what ``st`` and the stages
    computed at its loop ``loop`` read (:func:`_reads_through_inline`; a stage computed
    inside some loop is the nest's own)."""
    ops_ = [st.op] + [x.op for x in s.stages if x.attach_stage is st and x.attach_ivar is loop]
    out, seen = [], set()
    for op in ops_:
        for t in _reads_through_inline(s, op):
            if id(t.op) not in seen:
                seen.add(id(t.op))
                out.append(t)
    return out


def _reads_through_inline(s: Schedule, op) -> list:
    """The tensors with a buffer that ``op`` reads: its inputs, an inlined stage's
    replaced by what that stage reads (layer norm's ``x - mean``, inlined into its
    output, reads ``x``)."""
    out, todo, seen = [], list(op.input_tensors), set()
    while todo:
        t = todo.pop(0)
        if id(t.op) in seen:
            continue
        seen.add(id(t.op))
        if not isinstance(t.op, PlaceholderOp) and s[t].attach_type == "inline":
            todo.extend(t.op.input_tensors)
        elif isinstance(t.op, PlaceholderOp) or s[t].attach_type == "root":
            out.append(t)
    return out


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


def _tags(op) -> set:
    """The names in ``op``'s comma-separated tag."""
    return set(t.strip() for t in (op.tag or "").split(",") if t.strip())


def _has_tag(op, *tags) -> bool:
    """Whether ``op``'s comma-separated tag holds one of ``tags``."""
    mine = _tags(op)
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


def _loads(expr) -> List[ProducerLoad]:
    return collect(expr, lambda n: isinstance(n, ProducerLoad))


def _reused_across_outputs(red_op, t) -> bool:
    """Whether ``red_op`` reads each element of ``t`` for more outputs than its window
    covers: some output axis indexes none of ``t``'s loads (a convolution's output
    channels, each reading every input channel), so a copy of ``t`` made once per task
    serves all of them.  (A depthwise convolution's padded input: every output axis
    indexes it.)"""
    loads = [ld for ld in _loads(red_op.body.source) if ld.producer is t]
    return any(not any(uses_var(i, a.var) for ld in loads for i in ld.indices)
               for a in red_op.axis)


def _is_padding(op) -> bool:
    """Whether ``op`` is a padding: one output, each element a ``select`` on its own
    position between a load of one input and a constant
    (``P[y, x] = select(1 <= y && y <= H && ..., X[y - 1, x - 1], 0)``)."""
    if not isinstance(op, ComputeOp) or op.reduce_axis or len(op.bodies) != 1:
        return False
    b = op.body
    if not isinstance(b, Select) or not isinstance(b.false_value, Const):
        return False
    return isinstance(b.true_value, ProducerLoad) and len(op.input_tensors) == 1


def _is_view(op) -> bool:
    """Whether ``op`` only re-indexes one tensor: one output, its body a load whose
    indices are each a constant or one of ``op``'s own axes, each axis at most once and
    in ``op``'s order (``W[k, c, 0, 0]`` as ``[1, K, C]``: unit dimensions added or
    dropped).  Read in place, such a stage costs its readers nothing: the memory is
    walked in the same order."""
    if not isinstance(op, ComputeOp) or op.reduce_axis or len(op.bodies) != 1:
        return False
    b = op.body
    if not isinstance(b, ProducerLoad):
        return False
    pos = {a.var: d for d, a in enumerate(op.axis)}
    seen = []
    for i in b.indices:
        if isinstance(i, Const):
            continue
        if not isinstance(i, Var) or i not in pos:
            return False
        seen.append(pos[i])
    return seen == sorted(set(seen))


def _cheap(body, along: Optional[Var] = None) -> bool:
    """No call to an intrinsic, no division: worth recomputing where it is read (with
    ``along``: none that moves with that loop variable; one that does not, a per-row
    ``total / n``, is computed once per row by the code generator's hoisting)."""
    return not collect(body, lambda n: isinstance(n, (Call, Div)) and (
        along is None or uses_var(n, along)))


def _stride_along(idx: Sequence[Expr], var: Var) -> str:
    """How a load with indices ``idx`` moves along ``var``: ``"bcast"`` (not at all),
    ``"unit"`` (only the last index moves, by one), or ``"strided"``."""
    moving = [d for d, e in enumerate(idx) if uses_var(e, var)]
    if not moving:
        return "bcast"
    if moving != [len(idx) - 1]:
        return "strided"
    e = idx[-1]
    step = simplify(substitute(e, {var: var + 1}) - e)
    return "unit" if isinstance(step, Const) and int(step.value) == 1 else "strided"


def _elems(t: Tensor, shapes) -> Optional[int]:
    n = 1
    for e in t.shape:
        c = _cint(e, shapes)
        if c is None:
            return None
        n *= c
    return n


#: the cache line: the code generator streams a store past the cache (``pragma
#: nontemporal``) only where it knows the address a multiple of it
CACHE_LINE = 64


def _streams_past_cache(nbytes: Optional[int], run: Optional[int], dtype: str,
                        info, over: float = 0.5, limit: Optional[int] = None) -> bool:
    """Whether a pass should store its output past the cache (``pragma nontemporal``)
    where what it moves (``nbytes``: its output, or its inputs and output, as the caller
    measured; None: symbolic) is more than ``over`` times (by default half) the last-level
    cache (``info.l3_bytes``, the machine model's): it leaves little of its output there for the next operator,
    and each line it writes through the cache is read first (a third of an elementwise
    pass's traffic); streamed, the line is written once.  Only where the output's
    contiguous runs of stores (``run`` elements of ``dtype``) are whole cache lines, so
    that every run starts on one: runs of part lines mix streamed stores with cached
    ones (slower than caching them all).  A smaller pass keeps its output in the cache,
    where the next operator reads it.  ``limit`` (bytes; 0 or None: none) lowers that
    bound to itself (a measured share of the cache: ``CpuModel.stream_output_bytes``)."""
    return _outgrows_llc(nbytes, info, over, limit) and \
        run is not None and run > 0 and run * _dt.nbytes(dtype) % CACHE_LINE == 0


def _outgrows_llc(nbytes: Optional[int], info, over: float = 0.5,
                  limit: Optional[int] = None) -> bool:
    """Whether a pass that moves ``nbytes`` (None: symbolic, False) moves more than
    ``over`` times the last-level cache (``info.l3_bytes``) or than ``limit`` bytes (0 or
    None: no limit; ``CpuModel.stream_output_bytes``, a VM's measured share of it): its
    data do not stay in the cache from one call to the next, its input comes from memory."""
    bound = info.l3_bytes * over if not limit else min(info.l3_bytes * over, limit)
    return nbytes is not None and nbytes > bound


def _streams_past_llc(ins, out, info, run: Optional[int] = None, over: float = 0.5,
                      limit: Optional[int] = None) -> bool:
    """Whether a pass that reads the tensors ``ins`` and writes ``out`` should store
    ``out`` past the cache (:func:`_streams_past_cache` of what they take together, more
    than ``over`` times the last-level cache or than ``limit`` bytes (0 or None: no
    limit; a pass's own kernel passes the model's measured share,
    ``CpuModel.stream_output_bytes``), in runs of ``run`` elements: by default
    ``out``'s rows)."""
    sizes = [_bytes(t) for t in list(ins) + [out]]
    return _streams_past_cache(None if None in sizes else sum(sizes),
                               _cint(out.shape[-1]) if run is None else run, out.dtype, info,
                               over, limit)
