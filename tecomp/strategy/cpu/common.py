"""Helpers of the CPU templates: finding stages, vector splits, config checks, and the
auto-scheduler's rules for the stages a template leaves alone."""
from __future__ import annotations

from typing import List, Optional

from .. import rules as _rules
from ...errors import ScheduleError
from ...ir.expr import ProducerLoad
from ...ir.functor import collect
from ...schedule.schedule import Schedule, Stage, create_schedule
from ...te.tensor import ComputeOp
from .._common import _outs, _walk
from ...target import CpuModel, cpu_model


def _find(outs, pred) -> List[ComputeOp]:
    return [op for op in _walk(outs) if pred(op)]


def _loads(expr, tensor) -> List[ProducerLoad]:
    return [n for n in collect(expr, lambda n: isinstance(n, ProducerLoad))
            if n.producer is tensor]


def _vector_split(s: Stage, axis, extent: Optional[int], lanes: int):
    """Split ``axis`` so that the inner part is one vector (whole extent when it fits)
    and vectorize it; return the outer axis (or None when the axis is all vector)."""
    if extent is not None and extent <= lanes:
        s.vectorize(axis)
        return None
    o, i = s.split(axis, factor=lanes)
    s.vectorize(i)
    return o


class _NoTemplate(ScheduleError):
    """The DAG is not what a template schedules (the public schedule_* functions then
    use the auto-scheduler's rules)."""


def _auto_rest(s: Schedule, outs, info: CpuModel) -> Schedule:
    """The stages a template left alone (other reductions under the outputs, or all of
    them when the template found nothing to schedule) get the auto-scheduler's rules
    (:func:`tecomp.strategy.rules.schedule_stages`)."""
    fresh = {id(st.op) for st in s.stages if isinstance(st.op, ComputeOp)
             and st.attach_type == "root" and not st.relations and not st.iter_attrs}
    if fresh:
        _rules.schedule_stages(s, outs, info, only=fresh)
    return s


def _template_or_rules(into, outs, target) -> Schedule:
    """A new schedule of ``outs`` with ``into(s, outs, info)`` (a template); where it
    finds nothing it schedules, or for the stages it leaves alone, the rules."""
    outs = _outs(outs)
    info = cpu_model(target)
    s = create_schedule([t.op for t in outs])
    try:
        into(s, outs, info)
    except _NoTemplate:
        s = create_schedule([t.op for t in outs])
    return _auto_rest(s, outs, info)


def _op_tags(op) -> set:
    """The tags of ``op`` (a compute's comma-separated ``tag``; a placeholder has none)."""
    return set(t.strip() for t in (getattr(op, "tag", None) or "").split(",") if t.strip())


def config_fields(config, who: str, names, cls=None) -> dict:
    """The fields a template's ``config`` sets, as a dict: None sets none, an instance of
    the template's config class ``cls`` (a dataclass) all of ``names``, a dict some of
    them (any other key is a ScheduleError naming ``who`` and the fields)."""
    if config is None:
        return {}
    if cls is not None and isinstance(config, cls):
        return {k: getattr(config, k) for k in names}
    if not isinstance(config, dict):
        what = f"a {cls.__name__} or " if cls is not None else ""
        raise ScheduleError(f"{who}: config must be {what}a dict of some of "
                            f"{', '.join(names)}, got {type(config).__name__}")
    bad = sorted(str(k) for k in config if k not in names)
    if bad:
        raise ScheduleError(f"{who}: unknown parameters {bad}; use {', '.join(names)}")
    return dict(config)


def check_positive_int(who: str, name: str, v) -> None:
    """A config's block size: an int >= 1 (a ScheduleError naming ``who`` otherwise)."""
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise ScheduleError(f"{who}: {name} must be a positive int, got {v!r:.40}")

