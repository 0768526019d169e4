"""Batch norm's gradient (``tecomp.nn.batch_norm``'s analytic backward, stages tagged
``batch_norm_grad``): bound by memory.

The gradient needs two per-channel sums over ``(n, h, w)`` -- of the incoming gradient
``dy`` and of ``dy * (x - mean)``, one reduction with two outputs -- before any element
of the data gradient ``dx``.  Computed at the root, the sums are a pass over ``x`` and
``dy`` from memory before the second (``dx``).

* NCHW: as PyTorch's CPU kernel does, a task is one channel (the channels in parallel):
  its sums, then its ``dx`` planes, which read ``x`` and ``dy`` again while the channel
  is in the cache (L2: a channel of a 16 x 56 x 56 batch is 400 KB of ``x`` and ``dy``).
  The sums are computed at ``dx``'s channel loop with ``store_root``, so that the scale
  and shift gradients read them, whole, after it.  They accumulate four images' rows at
  once, one vector along each row (``rfactor`` of ``n``, then of ``w``: eight
  independent chains of additions); ``dx`` is each plane as one contiguous run (``h, w``
  fused), four vectors a step.
* NHWC: a channel is strided in memory, so the sums are a pass of their own: each thread
  sums a share of the pixels into partial results, whole rows of channels (contiguous)
  one vector at a time, added up after; then ``dx`` (the rules: vectorized along the
  channels, in parallel).

NCHW with fewer than four channels per thread: the generic rules (their plane
reduction takes the two sums in one pass).
"""
from __future__ import annotations

from typing import Optional

from ...ir.expr import ProducerLoad, Var
from ...ir.functor import collect
from ...schedule.schedule import Schedule
from ...te.tensor import ComputeOp
from .._common import _cint, _has_tag, _is_injective
from ...target import CpuModel

#: the tag of the gradient's stages (tecomp.nn.norm)
TAG = "batch_norm_grad"


def _lanes(dtype: str, info: CpuModel) -> int:
    return max(1, info.lanes * 32 // (64 if dtype == "float64" else 32))


def _parts(out):
    """``(channel axis, the sums)`` of a data-gradient stage ``out`` (4-d, elementwise,
    tagged ``batch_norm_grad``, reading both outputs of one 2-output sum over the three
    other axes, indexed by one of its axes), or None."""
    op = out.op
    if not _has_tag(op, TAG) or op.reduce_axis or len(op.axis) != 4 or len(op.bodies) != 1:
        return None
    reds = {id(t.op): t.op for t in op.input_tensors if isinstance(t.op, ComputeOp)
            and _has_tag(t.op, TAG) and t.op.reduce_axis}
    if len(reds) != 1:
        return None
    sums = next(iter(reds.values()))
    if len(sums.axis) != 1 or len(sums.reduce_axis) != 3 or len(sums.bodies) != 2:
        return None
    loads = collect(op.body, lambda e: isinstance(e, ProducerLoad) and e.producer.op is sums)
    axes = [a.var for a in op.axis]
    ks = {axes.index(ld.indices[0]) if ld.indices[0] in axes else -1 for ld in loads}
    if len(ks) != 1 or next(iter(ks)) not in (1, 3):
        return None
    k = ks.pop()
    if _cint(sums.axis[0].dom.extent) != _cint(op.axis[k].dom.extent):
        return None
    return k, sums


def _bn_grad_part(s: Schedule, out, knobs, info: CpuModel) -> Optional[set]:
    """The template for batch norm's data gradient ``out`` and its sums inside a
    gradient DAG (a part template, :data:`tecomp.strategy.PART_TEMPLATES`): the ids of
    the operations it scheduled, or None when ``out`` is not one or its channels are too
    few to share among the threads."""
    found = _parts(out)
    if found is None:
        return None
    k, sums = found
    op = out.op
    C = _cint(op.axis[k].dom.extent)
    L = _lanes(op.dtype, info)
    threads = max(1, info.threads)
    if C is None or (k == 1 and C < 4 * threads):
        return None
    if not knobs.choose(f"{op.name}.bn_grad", [True, False], True):
        return None
    done = {id(sums)}
    # the forward output (the ReLU's mask reads it) and other elementwise helpers:
    # recomputed where they are read
    for t in {id(x.op): x for x in op.input_tensors + sums.input_tensors}.values():
        st = s[t.op] if isinstance(t.op, ComputeOp) else None
        if st is not None and _is_injective(t.op) and not st.is_output \
                and st.attach_type == "root" and not st.relations:
            st.compute_inline()
            done.add(id(t.op))
    if k == 1:
        return done | _nchw(s, out, sums, L, threads)
    return done | _nhwc(s, sums, L, threads)


def _nchw(s: Schedule, out, sums, L: int, threads: int) -> set:
    """One task per channel: its sums, then its planes (``h, w`` fused into one
    contiguous run, four vectors a step)."""
    st = s[out]
    op = out.op
    n, c, h, w = st.op.axis
    hw = st.fuse(h, w)
    if _cint(op.axis[2].dom.extent) * _cint(op.axis[3].dom.extent) >= 4 * L:
        o, i = st.split(hw, factor=4 * L)
        io, ii = st.split(i, factor=L)
        st.reorder(c, n, o, io, ii)
        st.unroll(io)
    else:
        o, ii = st.split(hw, factor=L)
        st.reorder(c, n, o, ii)
    st.vectorize(ii)
    if threads > 1:
        st.parallel(c)
    # the sums' partial results: `chains` images' rows at once (independent additions,
    # not one chain of dependent ones), each one vector along the row
    N = _cint(op.axis[0].dom.extent)
    chains = next((a for a in (4, 2) if N is not None and N % a == 0), 1)
    rs = s[sums]
    _, wi = rs.split(rs.op.reduce_axis[-1], factor=L)
    lanes = s[s.rfactor(sums.output(0), wi, factor_axis=1)]
    _, ni = lanes.split(lanes.op.reduce_axis[0], factor=chains)
    rf = s[s.rfactor(lanes.op.output(0), ni, factor_axis=1)]
    c_, a_, l_ = rf.op.axis
    rf.reorder(*([c_] + list(rf.op.reduce_axis) + [a_, l_]))
    rf.vectorize(l_)
    if chains > 1:
        rf.unroll(a_)
    # the chains added up a vector at a time, then the lanes
    c_, l_ = lanes.op.axis
    lanes.reorder(c_, lanes.op.reduce_axis[0], l_)
    lanes.vectorize(l_)
    ps = lanes
    for x in (rf, ps, rs):
        x.compute_at(st, c)
    rs.store_root()
    return {id(out.op), id(rf.op), id(ps.op), id(rs.op)}


def _nhwc(s: Schedule, sums, L: int, threads: int) -> set:
    """Each thread sums a share of the pixels (of the images, or of the rows where the
    images are fewer than the threads) into partial results, whole rows of channels
    (contiguous) one vector at a time; those are added up after; ``dx`` is left to the
    rules (vectorized along the channels, in parallel)."""
    rs = s[sums]
    red = rs.op.reduce_axis
    ax = next((r for r in red[:2] if (_cint(r.dom.extent) or 0) >= threads), red[0])
    parts = max(1, min(threads, _cint(ax.dom.extent) or 1))
    no, _ = rs.split(ax, nparts=parts)
    part = s.rfactor(sums.output(0), no, factor_axis=0)
    ps = s[part]
    t, c = ps.op.axis
    ci_o, ci = ps.split(c, factor=L)
    ps.reorder(*([t] + list(ps.op.reduce_axis) + [ci_o, ci]))
    ps.vectorize(ci)
    if threads > 1:
        ps.parallel(t)
    rs = s[sums]
    c, = rs.op.axis
    co, ci = rs.split(c, factor=L)
    rs.reorder(*([co] + list(rs.op.reduce_axis) + [ci]))
    rs.vectorize(ci)
    return {id(ps.op), id(rs.op)}
