"""The CPU strategy: the templates as the auto-scheduler's starting points.  A DAG that is
one of ``tecomp.nn``'s operators (matmul/dense, softmax, attention, a convolution with an
elementwise epilogue) is scheduled by its template, with the template's decisions as
knobs (:mod:`tecomp.autoschedule.config`); a pooling (:func:`.pool.pool_into`); an
attention or a depthwise convolution inside a larger DAG too (``PART_TEMPLATES``); any other DAG by the generic rules
(:mod:`tecomp.strategy.rules`)."""
from __future__ import annotations

from typing import Dict, Optional

from .. import rules as _rules
from ...errors import AutoScheduleError, InternalError, ScheduleError, TecompError
from ...lower import lower
from ...schedule.schedule import Schedule, create_schedule
from .._common import _walk
from .attention import _attention_into, _attention_part
from .batch_norm import _bn_grad_part
from .common import _NoTemplate, _auto_rest, _op_tags
from .conv3d import _conv3d_template
from .conv_nd import _conv1d_template, _phases_template
from .conv2d import (_conv_for_generic_rules, conv2d_knobs, plain_nchw_conv,
                     schedule_conv2d_nchw, schedule_conv2d_nhwc)
from .depthwise import (_depthwise_part, schedule_depthwise_conv2d_nchw,
                        schedule_depthwise_conv2d_nhwc)
from .gemm import _dense_rows_for_generic_rules, _gemm_template
from .grouped import (_grouped_part, group_conv2d_knobs, schedule_group_conv2d_nchw,
                      schedule_group_conv2d_nhwc)
from .pool import pool_into
from .skinny import _skinny_template
from ...target import CpuModel
from .softmax import schedule_softmax
from ..trivial import prefer_trivial, trivial_schedule
from .winograd import winograd_into

#: the depthwise and grouped convolutions' templates, by their stages' tags, each with the
#: function that makes its config from the auto-scheduler's knobs (None: no config)
_WINDOWED = {"depthwise_conv2d_nchw": (schedule_depthwise_conv2d_nchw, None),
             "depthwise_conv2d_nhwc": (schedule_depthwise_conv2d_nhwc, None),
             "group_conv2d_nchw": (schedule_group_conv2d_nchw, group_conv2d_knobs),
             "group_conv2d_nhwc": (schedule_group_conv2d_nhwc, group_conv2d_knobs)}


def _auto_template(outs, knobs, info: CpuModel) -> Optional[Schedule]:
    """The template of a DAG that is one of tecomp.nn's operators (matmul/dense, softmax,
    scaled_dot_product_attention, conv2d NCHW/NHWC with an elementwise epilogue, an NCHW
    convolution written as a plain compute, a pooling, a depthwise or grouped
    convolution), for the auto-scheduler
    (:func:`apply_rules`); None for any other DAG."""
    ops = _walk(outs)
    reductions = [op for op in ops if op.reduce_axis]
    if len(outs) == 1 and any("winograd_gemm" in _op_tags(op) for op in reductions):
        s = create_schedule([outs[0].op])
        winograd_into(s, outs, info)
        return _auto_rest(s, outs, info)
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
    if len(outs) == 1 and any({"pool_max", "pool_sum"} & _op_tags(op) for op in reductions):
        s = create_schedule([outs[0].op])
        try:
            pool_into(s, outs, info)
        except _NoTemplate:
            return None
        return _auto_rest(s, outs, info)
    windowed = set(_WINDOWED) & _op_tags(reductions[0]) if len(reductions) == 1 else set()
    if windowed:
        schedule, config = _WINDOWED[windowed.pop()]
        if config is not None:
            return schedule(outs, info.target, config(reductions[0], knobs, info))
        return schedule(outs, info.target)
    convs = [op for op in reductions if {"conv2d_nchw", "conv2d_nhwc"} & _op_tags(op)
             or plain_nchw_conv(op) is not None]
    if len(convs) == 1 and len(reductions) == 1:
        if "conv2d_nhwc" not in _op_tags(convs[0]):
            if _conv_for_generic_rules(convs[0], knobs, info):
                return None
            return schedule_conv2d_nchw(outs, info.target, conv2d_knobs(convs[0], knobs, info))
        return schedule_conv2d_nhwc(outs, info.target, conv2d_knobs(convs[0], knobs, info))
    return None


#: the template functions ``fn(outs, knobs, info) -> Schedule or None`` (None: the DAG is
#: not theirs), in the order they are tried: a skinny GEMM (at most 16 rows, plain TE or
#: ``tecomp.nn``: :mod:`.skinny`) before the operators' templates
TEMPLATES = (_skinny_template, _auto_template, _phases_template, _conv1d_template,
             _conv3d_template)

#: templates of an operator inside a larger DAG, by the tag of its output stage (see
#: :func:`tecomp.strategy.rules.generic_rules`): attention inside a transformer layer, a
#: depthwise convolution inside a block, batch norm's data gradient with its two sums, a
#: grouped NHWC convolution whose groups interleave in the vectors
PART_TEMPLATES: Dict[str, object] = {"sdpa": _attention_part,
                                     "depthwise_conv2d_nchw": _depthwise_part,
                                     "depthwise_conv2d_nhwc": _depthwise_part,
                                     "group_conv2d_nhwc": _grouped_part,
                                     "batch_norm_grad": _bn_grad_part}


def _template(outs, knobs, info: CpuModel) -> Optional[Schedule]:
    """The template's schedule of ``outs`` when the knob ``template`` keeps it and the DAG
    is one a template schedules; else None (and no ``template`` knob is left)."""
    if not knobs.choose("template", [True, False], True):
        return None
    for fn in TEMPLATES:
        try:
            s = fn(outs, knobs, info)
        except AutoScheduleError:
            raise
        except TecompError:
            # a template that does not fit (``_NoTemplate``) or whose schedule tecomp's own
            # checks refuse: the generic rules schedule the DAG
            return None
        except Exception as exc:  # noqa: BLE001 - re-raised: a template's crash is a bug
            names = ", ".join(getattr(getattr(t, "op", t), "name", "?") for t in outs)
            raise InternalError(
                f"the CPU template {fn.__name__} failed on the outputs [{names}] with "
                f"{type(exc).__name__}: {exc}") from exc
        if s is not None:
            return s
    for d in (knobs.space, knobs.values, knobs.defaults):
        d.pop("template", None)
    return None


def apply_rules(args, knobs, info: CpuModel, shapes: Optional[dict] = None) -> Schedule:
    """The auto-scheduler's CPU schedule of ``args`` (the list ``tc.build`` takes): the
    operator's template where one fits (:func:`_auto_template`), else the generic rules
    (:func:`tecomp.strategy.rules.generic_rules`, with :data:`PART_TEMPLATES`); every
    decision taken from ``knobs`` (:class:`tecomp.strategy.rules.Knobs`).  The knob
    ``trivial`` replaces that schedule by the trivial one
    (:func:`tecomp.strategy.trivial.trivial_schedule`); its default is
    :func:`tecomp.strategy.trivial.prefer_trivial`'s comparison of the two."""
    s = _rules_schedule(args, knobs, info, shapes)
    # (the comparison lowers both schedules: not for a candidate whose value is given or
    # sampled, whose default nobody reads)
    asked = "trivial" in knobs.given or knobs.rng is not None
    if knobs.choose("trivial", [False, True],
                    not asked and prefer_trivial(s, args, info, shapes)):
        return trivial_schedule(args, info.lanes)
    return s


def _rules_schedule(args, knobs, info: CpuModel, shapes: Optional[dict]) -> Schedule:
    """:func:`apply_rules`' schedule before its comparison with the trivial one."""
    outs = _rules.outputs_of(args)
    s = _template(outs, knobs, info)
    if s is not None and _aligned_reads_hold(s, args, info):
        return s
    s = _rules.generic_rules(args, knobs, info, shapes, PART_TEMPLATES)
    if _aligned_reads_hold(s, args, info):
        return s
    return _rules.generic_rules(args, knobs, info, shapes)   # (no part template)


def _aligned_reads_hold(s: Schedule, args, info: CpuModel) -> bool:
    """Whether a template's ``align_bounds`` (a GEMM's padded panel, attention's query
    blocks) keep every read inside its memory: lowering proves it, or refuses the
    schedule (a ScheduleError); a template (or a part template) whose reads it cannot
    prove (an operand read through composed views, ``x[i*2 + (j*16 + k) // 64]``) leaves
    the DAG (or the part) to the rules.
    Schedules without ``align_bounds`` are not lowered here."""
    if not any(st.bound_aligns for st in s.stages):
        return True
    try:
        lower(s, list(args), target=info.target)
    except ScheduleError as exc:
        if "align_bounds" not in str(exc):
            raise
        return False
    return True
