"""The transposed convolutions (:func:`tecomp.nn.conv2d_transpose_nchw` /
``_nhwc``) as the auto-scheduler's starting point: without groups and with a stride above
1 such an operator is several stride-1 convolutions, one per phase of its output, and a
stage that interleaves them (``nn.conv_grad.transposed_conv2d``; a convolution's data
gradient has the same form).  Each convolution gets the convolution template, as
:func:`tecomp.autodiff.schedule_backward` gives them in a backward pass; the rest (the
interleaving, the adjoint's windows) the rules.  (A single convolution, stride 1, is
the convolution template's own.)"""
from __future__ import annotations

from typing import Optional

from ...autoschedule import rules as _rules
from ...schedule.schedule import Schedule, create_schedule
from .._schedule_common import _walk
from .common import _auto_rest, _op_tags
from .conv2d import _conv_for_generic_rules
from .conv2d_grad import schedule_conv2d_into
from ...target import CpuModel


def _phases_template(outs, knobs, info: CpuModel) -> Optional[Schedule]:
    """A DAG whose reductions are all forward convolutions (``conv2d_nchw``/``_nhwc``),
    two or more of them, under one output (the phases of a transposed convolution):
    each convolution by the template, the other stages by the rules; None otherwise.
    An NCHW phase that the convolution template leaves to the rules (a 1x1 one on a
    large plane, as a U-Net's 2x2 stride-2 up-convolution has:
    ``conv2d._conv_for_generic_rules``) stays with them.  Interleaved, 2 threads, ms,
    against the rules for every phase (PyTorch), on a loaded 2-core machine: 256 to 128
    channels 4x4 stride 2 on 16x16, batch 8, 32.9 vs 38.1 (99.9), again 43.8 vs 45.2
    (131.5); 128 to 64 on 32x32 41.5 vs 42.4 (135.0), again 49.6 vs 43.6 (159.9)."""
    if len(outs) != 1:
        return None
    reductions = [op for op in _walk(outs) if op.reduce_axis]
    convs = [op for op in reductions if {"conv2d_nchw", "conv2d_nhwc"} & _op_tags(op)]
    if len(reductions) < 2 or len(convs) != len(reductions):
        return None
    if not knobs.choose("template.phases", [True, False], True):
        return None
    s = create_schedule([t.op for t in outs])
    mine = [op for op in convs if "conv2d_nhwc" in _op_tags(op)
            or not _conv_for_generic_rules(op, knobs, info)]
    if not mine:
        return None
    for op in mine:
        schedule_conv2d_into(s, op.output(0), info.target)
    return _auto_rest(s, outs, info)


_rules.register_template(_phases_template)
