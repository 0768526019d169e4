"""The trivial CPU schedule: every stage at its own root, its outer axes fused and run in
parallel, its innermost axis vectorized.

What a user writes first (``parallel`` + ``vectorize``), and the floor the rules'
default should never fall below (``benchmarks/te_corpus.py`` times the two side by
side; ``benchmarks/plain_te.py`` has it as its "trivial" column)::

    s = tc.strategy.trivial.trivial_schedule([A, B, C])
    f = tc.build(s, [A, B, C])
"""
from __future__ import annotations

from typing import Optional, Sequence

from ..schedule.schedule import Schedule, create_schedule
from ..target import cpu_model
from ..te.tensor import ComputeOp
from .rules import outputs_of


def trivial_schedule(args: Sequence, lanes: Optional[int] = None) -> Schedule:
    """The trivial schedule of the computes in ``args`` (the list you give ``tc.build``):
    every compute stage at its own root; with two axes or more, all but the last fused
    and parallel, the last split by ``lanes`` (the target's float32 lanes by default) and
    vectorized; a stage of one axis split by ``lanes``, the outer part parallel and the
    inner vectorized, or, for a reduction to one axis, that axis parallel; a stage of no
    axis left as it is."""
    L = lanes or cpu_model().lanes
    outs = outputs_of(args)
    s = create_schedule([t.op for t in outs])
    for st in s.stages:
        if type(st.op) is not ComputeOp or st.attach_type != "root":
            continue   # (an extern call, a scan and its body stay as they are)
        axes = list(st.op.axis)
        if len(axes) >= 2:
            st.parallel(st.fuse(*axes[:-1]) if len(axes) > 2 else axes[0])
            st.vectorize(st.split(axes[-1], factor=L)[1])
        elif axes and st.op.reduce_axis:
            st.parallel(axes[0])
        elif axes:
            vo, vi = st.split(axes[0], factor=L)
            st.parallel(vo)
            st.vectorize(vi)
    return s
