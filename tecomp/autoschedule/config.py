"""A schedule as a config of named knobs, in AutoTVM's manner.

Every decision the auto-scheduler's rules and the ``tecomp.nn`` templates take (a GEMM's
register block and cache blocks, a convolution's choice between its template and the
generic rules, a tile size, an unroll) is a named knob with its choices and a default:
the heuristic, read from the target and the shapes.  :func:`default_config` records
them for one workload; :func:`apply_config` builds the schedule a config says, and only
that::

    cfg = tc.autoschedule.default_config([A, B, C])
    print(cfg)                                  # every knob, its choices, its value
    cfg = cfg.set("gemm.mr", 4).set("gemm.kc", 256)
    s = tc.autoschedule.apply_config([A, B, C], cfg)

The search (``tc.auto_schedule(..., trials=N)``) samples and mutates these same knobs.
Knobs depend on each other (a GEMM's row block is chosen among the ones its column block
leaves registers for; the generic rules' knobs exist only when a template is not used), so
:meth:`Config.set` checks a value against the choices recorded with the other values,
and :func:`apply_config` checks that every knob set by hand was met and honoured.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Dict, FrozenSet, Optional, Sequence, Tuple, Union

from ..errors import AutoScheduleError
from ..target import Target, cpu_model
from .checks import check_args, check_shapes, cpu_target
from ..strategy import Knobs, apply_rules
from ..strategy.rules import _NONE, choice_of

if TYPE_CHECKING:
    from ..ir.expr import Var
    from ..schedule.schedule import Schedule
    from ..te.tensor import Tensor


@dataclass(frozen=True)
class Config:
    """The knobs of one workload's schedule, for ``target``.

    Made by :func:`default_config`; ``cfg.set(name, value)`` gives a copy with one knob
    changed (checked against its choices), ``cfg[name]`` reads one, ``print(cfg)``
    lists them all.

    Parameters
    ----------
    target : str
        The target the knobs were read for.
    values : dict
        Knob name -> value.
    space : dict
        Knob name -> its choices.
    defaults : dict
        Knob name -> the heuristic's value.
    shapes : dict, optional
        The values of symbolic extents the decisions used.
    explicit : frozenset of str, optional
        The knobs set with :meth:`set`.
    """

    target: str
    values: Dict[str, object]
    space: Dict[str, Tuple]
    defaults: Dict[str, object]
    shapes: Dict[str, int] = field(default_factory=dict)
    explicit: FrozenSet[str] = frozenset()   # the knobs set with :meth:`set`

    def set(self, name: str, value) -> "Config":
        """A copy with knob ``name`` set to ``value`` (one of its choices)."""
        if name not in self.space:
            raise AutoScheduleError(
                f"config: no knob {name!r:.80} in this workload's schedule; its knobs: "
                f"{', '.join(sorted(self.space)) or '(none)'}")
        choice = choice_of(value, self.space[name])
        if choice is _NONE:
            like = [c for c in self.space[name] if _equal(c, value)]
            raise AutoScheduleError(
                f"config: knob {name} cannot be {value!r:.60}; its choices: "
                f"{', '.join(repr(c) for c in self.space[name])}" + (
                    f" ({value!r:.30} is a {type(value).__name__}: give the choice itself, "
                    f"{like[0]!r}, of type {type(like[0]).__name__})" if like else ""))
        values = dict(self.values)
        values[name] = choice
        return Config(self.target, values, self.space, self.defaults, self.shapes,
                      self.explicit | {name})

    def __getitem__(self, name: str):
        return self.values[name]

    def __str__(self):
        if not self.values:
            return f"config for {self.target}: no knobs"
        w = max(len(k) for k in self.values)
        lines = [f"config for {self.target} ({len(self.values)} knobs; * = not the default)"]
        for k in self.values:
            mark = " " if self.values[k] == self.defaults.get(k) else "*"
            choices = ", ".join(repr(c) for c in self.space[k])
            lines.append(f" {mark} {k:{w}s} = {self.values[k]!r}   of [{choices}]")
        return "\n".join(lines)


def _equal(a, b) -> bool:
    try:
        return bool(a == b)
    except (TypeError, ValueError):
        return False


def _run(args, target, shapes, values):
    args = check_args(args)
    tgt = cpu_target(target, "config")
    shapes = check_shapes(args, shapes)
    knobs = Knobs(values)
    s = apply_rules(args, knobs, cpu_model(tgt), shapes)
    return s, knobs, str(tgt), shapes


def default_config(args: Sequence[Union[Tensor, Var]], target: Union[str, Target] = "llvm",
                   shapes: Optional[dict] = None) -> Config:
    """The knobs of ``args``' schedule at their defaults: the schedule
    ``tc.auto_schedule(args, target)`` gives.

    Parameters
    ----------
    args : sequence of Tensor or Var
        The list you give ``tc.build``.
    target : str or Target, optional
        A CPU target.
    shapes : dict, optional
        Values for symbolic extents, as ``tc.auto_schedule``'s.

    Returns
    -------
    Config
        Every knob, its choices and its value.

    Raises
    ------
    AutoScheduleError
        For bad arguments or a target that is not a CPU.

    Examples
    --------
    >>> import tecomp as tc
    >>> A = tc.placeholder((64, 64), name="A"); B = tc.placeholder((64, 64), name="B")
    >>> k = tc.reduce_axis((0, 64), name="k")
    >>> C = tc.compute((64, 64), lambda i, j: tc.sum(A[i, k] * B[k, j], axis=k), name="C")
    >>> cfg = tc.autoschedule.default_config([A, B, C])
    >>> s = tc.autoschedule.apply_config([A, B, C], cfg)
    """
    _, knobs, tgt, shapes = _run(args, target, shapes, None)
    return Config(tgt, dict(knobs.values), {k: tuple(v) for k, v in knobs.space.items()},
                  dict(knobs.defaults), shapes)


def apply_config(args: Sequence[Union[Tensor, Var]], config: Config) -> Schedule:
    """The schedule of ``args`` that ``config`` says (for its target and shapes).

    Parameters
    ----------
    args : sequence of Tensor or Var
        The list you give ``tc.build``.
    config : Config
        From :func:`default_config`, with knobs changed by ``Config.set``.

    Returns
    -------
    Schedule
        The schedule.

    Raises
    ------
    AutoScheduleError
        For a config of another kind, or a knob set by hand that this schedule does not
        have or cannot honour with the other knobs' values.
    """
    if not isinstance(config, Config):
        raise AutoScheduleError(f"apply_config: config must be a Config from default_config, "
                                f"got {type(config).__name__}")
    s, knobs, _, _ = _run(args, config.target, config.shapes, config.values)
    for name in sorted(config.explicit):
        if name not in knobs.values:
            raise AutoScheduleError(
                f"apply_config: knob {name} was set, but this schedule has no such decision "
                f"with the other knobs' values (its knobs: {', '.join(sorted(knobs.values))})")
        if knobs.values[name] != config.values[name]:
            raise AutoScheduleError(
                f"apply_config: knob {name} = {config.values[name]!r:.60} is not one of its "
                f"choices with the other knobs' values: "
                f"{', '.join(repr(c) for c in knobs.space[name])}")
    return s
