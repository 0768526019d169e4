"""The templates as the auto-scheduler's starting points: a DAG that is one of
``tecomp.nn``'s operators (matmul/dense, softmax, attention, a convolution with an
elementwise epilogue) is scheduled by its template, with the template's decisions as
knobs (:mod:`tecomp.autoschedule.config`); an attention or a depthwise convolution
inside a larger DAG too."""
from __future__ import annotations

from typing import Optional

from ...autoschedule import rules as _rules
from ...schedule.schedule import Schedule, create_schedule
from .._schedule_common import _walk
from .attention import _attention_into, _attention_part
from .common import _auto_rest, _op_tags
from .conv2d import (_conv_for_generic_rules, conv2d_knobs, plain_nchw_conv,
                     schedule_conv2d_nchw, schedule_conv2d_nhwc)
from .depthwise import (_depthwise_part, schedule_depthwise_conv2d_nchw,
                        schedule_depthwise_conv2d_nhwc)
from .gemm import _dense_rows_for_generic_rules, _gemm_template
from .grouped import schedule_group_conv2d_nchw, schedule_group_conv2d_nhwc
from ...target import CpuModel
from .softmax import schedule_softmax

#: the depthwise and grouped convolutions' templates, by their stages' tags
_WINDOWED = {"depthwise_conv2d_nchw": schedule_depthwise_conv2d_nchw,
             "depthwise_conv2d_nhwc": schedule_depthwise_conv2d_nhwc,
             "group_conv2d_nchw": schedule_group_conv2d_nchw,
             "group_conv2d_nhwc": schedule_group_conv2d_nhwc}


def _auto_template(outs, knobs, info: CpuModel) -> Optional[Schedule]:
    """The template of a DAG that is one of tecomp.nn's operators (matmul/dense, softmax,
    scaled_dot_product_attention, conv2d NCHW/NHWC with an elementwise epilogue, an NCHW
    convolution written as a plain compute, a depthwise or grouped convolution), for the
    auto-scheduler's rules (registered with
    :func:`tecomp.autoschedule.rules.register_template`); None for any other DAG."""
    ops = _walk(outs)
    reductions = [op for op in ops if op.reduce_axis]
    if len(reductions) == 1 and {"matmul", "dense", "matmul_packed"} & _op_tags(reductions[0]):
        if _dense_rows_for_generic_rules(reductions[0], knobs):
            return None
        return _gemm_template(outs, reductions[0], knobs, info)
    if len(outs) == 1 and any("softmax" in _op_tags(op) for op in ops) and \
            outs[0].op.tag == "softmax":
        return schedule_softmax(outs, info.target)
    if len(outs) == 1 and "sdpa" in _op_tags(outs[0].op):
        s = create_schedule([outs[0].op])
        _attention_into(s, outs, info, knobs)
        return _auto_rest(s, outs, info)
    windowed = set(_WINDOWED) & _op_tags(reductions[0]) if len(reductions) == 1 else set()
    if windowed:
        return _WINDOWED[windowed.pop()](outs, info.target)
    convs = [op for op in reductions if {"conv2d_nchw", "conv2d_nhwc"} & _op_tags(op)
             or plain_nchw_conv(op) is not None]
    if len(convs) == 1 and len(reductions) == 1:
        if "conv2d_nhwc" not in _op_tags(convs[0]):
            if _conv_for_generic_rules(convs[0], knobs, info):
                return None
            return schedule_conv2d_nchw(outs, info.target, conv2d_knobs(convs[0], knobs, info))
        return schedule_conv2d_nhwc(outs, info.target, conv2d_knobs(convs[0], knobs, info))
    return None


_rules.register_template(_auto_template)
_rules.register_part_template("sdpa", _attention_part)
_rules.register_part_template("depthwise_conv2d_nchw", _depthwise_part)
_rules.register_part_template("depthwise_conv2d_nhwc", _depthwise_part)
