"""Batch norm's gradient (``tecomp.nn.batch_norm``'s analytic backward, stages tagged
``batch_norm_grad``): bound by memory.

The gradient needs two per-channel sums over ``(n, h, w)`` -- of the incoming gradient
``dy`` and of ``dy * (x - mean)`` -- before any element of the data gradient ``dx``.
Computed as separate stages at the root, they are two passes over ``x`` and ``dy`` from
memory before the third (``dx``).  Here, as PyTorch's CPU kernel does, a task is a block
of channels: its two sums, then its ``dx`` elements, which read ``x`` and ``dy`` again
while the block is in the cache (L2: a channel of a 16 x 56 x 56 batch is 400 KB of
``x`` and ``dy``).  The sums are ``store_root`` stages computed at the channel loop of
``dx``: the scale and shift gradients read them, whole, after it.

* NCHW: a task is one channel (the channels in parallel); each sum runs over ``n, h``
  with one vector of partial results along the row (``rfactor`` of ``w``), ``dx`` is
  the channel's planes, each one contiguous run (``h, w`` fused), four vectors a step.
* NHWC: a task is a block of whole vectors of channels (contiguous in memory); the sums
  accumulate the block's vectors over ``n, h, w``, ``dx`` runs over the block's pixels.

Too few channels to share among the threads (NCHW: fewer than four per thread; NHWC:
fewer than two vectors): the generic rules.
"""
from __future__ import annotations

import math
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
    """``(channel axis, [the per-channel sums])`` of a data-gradient stage ``out``
    (4-d, elementwise, tagged ``batch_norm_grad``, reading two 1-d sums over the three
    other axes that index it by one of its axes), or None."""
    op = out.op
    if not _has_tag(op, TAG) or op.reduce_axis or len(op.axis) != 4 or len(op.bodies) != 1:
        return None
    sums = [t for t in op.input_tensors if isinstance(t.op, ComputeOp) and _has_tag(t.op, TAG)
            and len(t.op.axis) == 1 and len(t.op.reduce_axis) == 3 and len(t.op.bodies) == 1]
    if len(sums) != 2:
        return None
    loads = collect(op.body, lambda e: isinstance(e, ProducerLoad)
                    and any(e.producer is t for t in sums))
    axes = [a.var for a in op.axis]
    ks = {axes.index(ld.indices[0]) for ld in loads
          if isinstance(ld.indices[0], Var) and ld.indices[0] in axes}
    if len(ks) != 1 or ks.pop() not in (1, 3):
        return None
    k = next(axes.index(ld.indices[0]) for ld in loads)
    if any(_cint(t.op.axis[0].dom.extent) != _cint(op.axis[k].dom.extent) for t in sums):
        return None
    return k, sums


def _bn_grad_part(s: Schedule, out, knobs, info: CpuModel) -> Optional[set]:
    """The template for batch norm's data gradient ``out`` and its two sums inside a
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
    if C is None:
        return None
    if k == 1 and C < 4 * threads:
        return None
    block = 0
    if k == 3:
        for b in (4 * L, 2 * L, L):
            if C >= b * 2 * threads or b == L:
                block = b
                break
        if -(-C // block) < 2 * threads and threads > 1:
            return None
        pixels = [_cint(a.dom.extent) for a in op.axis[:3]]
        item = 8 if op.dtype == "float64" else 4
        if None in pixels or math.prod(pixels) * block * 2 * item > info.l2_bytes // 2:
            return None   # (the block's x and dy would not stay in L2 for dx)
    if not knobs.choose(f"{op.name}.bn_grad", [True, False], True):
        return None
    done = {id(op)} | {id(t.op) for t in sums}
    # the forward output (the ReLU's mask reads it) and other elementwise helpers:
    # recomputed where they are read
    for t in {id(x.op): x for t in [out] + sums for x in t.op.input_tensors}.values():
        st = s[t.op] if isinstance(t.op, ComputeOp) else None
        if st is not None and _is_injective(t.op) and not st.is_output \
                and st.attach_type == "root" and not st.relations:
            st.compute_inline()
            done.add(id(t.op))
    st = s[out]
    n, a1, a2, a3 = st.op.axis
    if k == 1:
        c = a1
        hw = st.fuse(a2, a3)
        ext = _cint(op.axis[2].dom.extent) * _cint(op.axis[3].dom.extent)
        if ext >= 4 * L:
            o, i = st.split(hw, factor=4 * L)
            io, ii = st.split(i, factor=L)
            st.reorder(c, n, o, io, ii)
            st.unroll(io)
        else:
            o, ii = st.split(hw, factor=L)
            st.reorder(c, n, o, ii)
        st.vectorize(ii)
        task = c
    else:
        co, ci = st.split(a3, factor=block)
        cio, cii = st.split(ci, factor=L)
        st.reorder(co, n, a1, a2, cio, cii)
        st.vectorize(cii)
        st.unroll(cio)
        task = co
    if threads > 1:
        st.parallel(task)
    N = _cint(op.axis[0].dom.extent)
    chains = next((a for a in (4, 2) if N is not None and N % a == 0), 1)
    for t in sums:
        rs = s[t]
        if k == 1:
            # partial sums: `chains` images' rows at once (independent additions, not one
            # chain of dependent ones), each one vector along the row
            rn = rs.op.reduce_axis[0]
            _, ni = rs.split(rn, factor=chains)
            part = s.rfactor(t, ni, factor_axis=1)
            ps = s[part]
            _, wi = ps.split(ps.op.reduce_axis[-1], factor=L)
            rf = s[s.rfactor(part, wi, factor_axis=2)]
            c_, a_, l_ = rf.op.axis
            rf.reorder(*([c_] + list(rf.op.reduce_axis) + [a_, l_]))
            rf.vectorize(l_)
            if chains > 1:
                rf.unroll(a_)
            for x in (rf, ps):
                x.compute_at(st, task)
                done.add(id(x.op))
        else:
            # the block's sums in registers (a local stage), stored once
            loc = s[s.cache_write(t, "local")]
            c, = loc.op.axis
            cio, cii = loc.split(c, factor=L)
            loc.reorder(*(list(loc.op.reduce_axis) + [cio, cii]))
            loc.vectorize(cii)
            if C % block == 0:   # (a last, shorter block: its loop's extent varies)
                loc.unroll(cio)
            loc.compute_at(st, task)
            done.add(id(loc.op))
            rs = s[t]
            c, = rs.op.axis
            _, cii = rs.split(c, factor=L)
            rs.vectorize(cii)
        rs.compute_at(st, task)
        rs.store_root()
        done.add(id(rs.op))   # (cache_write gave the stage a new operation)
    return done
