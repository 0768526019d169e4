"""Elementwise / injective operators, and the elementwise epilogues of the other
templates: one parallel loop over the outer axes, the last axis vectorized."""
from __future__ import annotations

from typing import Optional

from ...schedule.schedule import Schedule, create_schedule
from ...te.tensor import Tensor
from .._common import _cint, _inline_injective, _is_injective, _outs, _walk
from .common import _auto_rest, _loads
from ...target import CpuModel, cpu_model


def _schedule_elementwise_stage(s: Schedule, t: Tensor, info: CpuModel):
    st = s[t]
    axes = list(st.op.axis)
    exts = [_cint(e) for e in t.shape]
    L = info.lanes
    inner = axes[-1]
    inner_ext = exts[-1]
    # vector over the last axis: one vector per iteration, or a few when it is long
    vec_outer = None
    if inner_ext is not None and inner_ext <= L:
        st.vectorize(inner)
    else:
        vec_outer, vi = st.split(inner, factor=L)
        st.vectorize(vi)
    outer_axes = axes[:-1] + ([vec_outer] if vec_outer is not None else [])
    outer_exts = exts[:-1] + ([-(-inner_ext // L)] if vec_outer is not None and inner_ext
                              is not None else ([None] if vec_outer is not None else []))
    if info.threads > 1 and outer_axes:
        total = 1
        for e in outer_exts:
            total = None if (e is None or total is None) else total * e
        if total is None or total >= 2:
            ax = st.fuse(*outer_axes) if len(outer_axes) > 1 else outer_axes[0]
            st.parallel(ax)


def schedule_elementwise(outs, target: str = "llvm") -> Schedule:
    """Elementwise / injective operators (relu, bias_add, pad, ...): every injective
    producer is inlined, the output is one parallel loop over its outer axes with the
    last axis vectorized."""
    outs = _outs(outs)
    info = cpu_model(target)
    s = create_schedule([t.op for t in outs])
    _inline_injective(s, _walk(outs))
    for t in outs:
        _schedule_elementwise_stage(s, t, info)
    return s


schedule_injective = schedule_elementwise


def _epilogue(s: Schedule, outs, main: Tensor, info: CpuModel, fused=None):
    """Inline the injective stages between ``main`` and the outputs and schedule the
    outputs that are not ``main`` (nor ``fused``, scheduled with it) as elementwise
    loops."""
    below = set(id(op) for op in _walk([main]))
    _inline_injective(s, [op for op in _walk(outs) if id(op) not in below])
    for t in outs:
        if t.op is not main.op and _is_injective(t.op) and (fused is None
                                                              or t.op is not fused.op):
            _schedule_elementwise_stage(s, t, info)


def _fusable_epilogue(outs, main: Tensor) -> Optional[Tensor]:
    """The one output when it is an elementwise function of ``main`` (e.g.
    ``relu(bias_add(conv, b))``, a batch norm in inference): every stage from it down to
    ``main`` is injective, has ``main``'s shape and reads the stages of the chain (and
    ``main``) at exactly its own indices; injective stages that do not read ``main``
    (per-channel values of parameters) may have any shape.  (Every other stage under
    the output is a producer of ``main``, so nothing else reads it.)  Else None."""
    if len(outs) != 1 or outs[0].op is main.op:
        return None
    out = outs[0]
    shape = [_cint(e) for e in main.shape]
    if None in shape:
        return None
    below = set(id(o) for o in _walk([main]))
    chain = [op for op in _walk([out]) if id(op) not in below]
    # a stage of the chain that does not read main (a batch norm's per-channel
    # 1/sqrt(var + eps) from its running variance) is an input of the epilogue like a
    # placeholder: any shape, inlined with the rest
    memo = {id(main.op): True}

    def reads_main(op) -> bool:
        if id(op) not in memo:
            memo[id(op)] = False
            memo[id(op)] = any(reads_main(t.op) for t in op.input_tensors
                               if id(t.op) not in below or t.op is main.op)
        return memo[id(op)]

    if not all(_is_injective(op) for op in chain):
        return None
    chain = [op for op in chain if reads_main(op)]
    ids = set(id(op) for op in chain) | {id(main.op)}
    for op in chain:
        if [_cint(e) for e in op.output(0).shape] != shape:
            return None
        axes = [iv.var for iv in op.axis]
        for t in op.input_tensors:
            if id(t.op) in ids:
                for ld in _loads(op.body, t):
                    if len(ld.indices) != len(axes) or any(
                            i is not v for i, v in zip(ld.indices, axes)):
                        return None
    return out


def _gemm_epilogues(s: Schedule, outs, info: CpuModel, keep) -> Schedule:
    """The epilogues (bias, activation) of GEMM stages already scheduled (the ops whose
    ids are in ``keep``): the injective chain inlined into the output, which is
    scheduled as an elementwise loop; the rules for anything else."""
    _inline_injective(s, [op for op in _walk(outs) if id(op) not in keep])
    for t in outs:
        if id(t.op) not in keep and _is_injective(t.op):
            _schedule_elementwise_stage(s, t, info)
    return _auto_rest(s, outs, info)
