"""``tc.auto_schedule``: a schedule for any compute definition, without writing one.

::

    s = tc.auto_schedule([Q, K, S])                          # analytic, no measurement
    s = tc.auto_schedule([Q, K, S], check_trivial=True)      # against the trivial, once
    s = tc.auto_schedule([Q, K, S], trials=200, log="attn.jsonl")   # measured search
    s = tc.auto_schedule([Q, K, S], log="attn.jsonl")        # the best record, no search
    print(s.trace.python([Q, K, S]))                         # the schedule as Python

The result is an ordinary :class:`~tecomp.schedule.Schedule`: ``tc.build(s, args)``
compiles it, ``tc.lower`` prints it.  See :mod:`tecomp.strategy.rules` for the rules
and their knobs, :mod:`~tecomp.autoschedule.search` for the search,
:mod:`~tecomp.autoschedule.measure` for the runners and
:mod:`~tecomp.autoschedule.records` for the log.
"""
from __future__ import annotations

import logging
import os
import warnings
from typing import TYPE_CHECKING, Optional, Sequence, Union

from ..errors import AutoScheduleError, TargetError, TecompError
from ..ir.deep import deep_entry
from ..schedule.trace import replay
from ..target import Target, as_target, cpu_model
from .checks import check_args, check_shapes, cpu_target
from . import records
from ..strategy.cuda_rules import gpu_rules, measure_unavailable
from ..strategy import apply_rules
from ..strategy.rules import Knobs, outputs_of

_log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from ..ir.expr import Var
    from ..schedule.schedule import Schedule
    from ..te.tensor import Tensor

__all__ = ["auto_schedule", "AutoScheduleWarning", "Config", "default_config", "apply_config"]


class AutoScheduleWarning(UserWarning):
    """The auto-scheduler fell back to something other than what was asked (a record
    that no longer replays, a search that was cut short)."""


def _gpu_kind(target) -> bool:
    """Whether ``target`` names the GPU (cuda or cuda-emu); a bad target is left to
    ``cpu_target``'s message."""
    try:
        return as_target(target).is_gpu
    except TargetError:
        return False


@deep_entry(lambda args, *a, **k: ("tc.auto_schedule", args), ahead=True)
def auto_schedule(args: Sequence[Union[Tensor, Var]], target: Union[str, Target] = "llvm",
                  trials: int = 0, log: Union[str, os.PathLike, None] = None, seed: int = 0,
                  timeout: Optional[float] = None, progress: Optional[bool] = None,
                  shapes: Optional[dict] = None, runner: Union[str, object] = "local",
                  search: str = "model", check_trivial: bool = False) -> Schedule:
    """A schedule for the computes in ``args`` (the list you give ``tc.build``).

    With ``trials=0``, the rule-based schedule (:mod:`tecomp.strategy.rules`), read
    from the compute DAG and the machine; no measurement.  With ``trials=0`` and
    ``check_trivial=True``, that schedule and the trivial one
    (:func:`tecomp.strategy.trivial.trivial_schedule`: outer axes parallel, the
    innermost vectorized) measured once each, the faster returned.  With ``trials=N``, a
    measured search of N candidates, each run in a child process (a crash, a hang or a
    wrong result is a failed candidate, never the answer), the rule-based and the
    trivial schedules among the first (so ``trials=1`` measures those two).  For ``target="cuda"`` (or
    ``"cuda-emu"``): the GPU rules (:mod:`tecomp.strategy.cuda_rules`), and with
    ``trials=N`` a search over their knobs measured on the GPU (``"cuda-emu"``: in the
    emulation, which checks the search but says nothing of a GPU's speed).

    Parameters
    ----------
    args : sequence of Tensor or Var
        The kernel's parameters, as for ``tc.build``.
    target : str or Target, optional
        The CPU (``"llvm"``, ``"llvm -mcpu=..."``) or GPU (``"cuda"``, ``"cuda-emu"``)
        to schedule for.
    trials : int, optional
        How many candidates to measure; 0 (the default) measures nothing.
    log : str or os.PathLike, optional
        A JSON-lines file: every measurement is appended to it; with ``trials=0``, the
        best record of this workload in it that replays is the schedule.
    seed : int, optional
        The search's random seed.
    timeout : float, optional
        Seconds after which the search stops early.
    progress : bool, optional
        ``None`` (the default) shows the search's progress on stderr: a tqdm bar on a
        terminal or in Jupyter (a line rewritten in place without tqdm), a plain line
        every tenth of the trials where stderr is not a terminal (a CI log); ``False``
        shows nothing; ``True`` always shows it.  The search also logs to
        ``logging.getLogger("tecomp")`` (INFO: the space, the trials, why it stopped
        early, the best; DEBUG: every candidate), and ``s.tune_result`` says the same
        (``print(s.tune_result.summary())``).
    shapes : dict, optional
        Values for symbolic extents (``{"n": 1024}``) for the decisions and the
        measurements; the schedule stays correct for any value.
    runner : str or object, optional
        Where candidates run: ``"local"``, ``"dask"`` or a runner object
        (:mod:`tecomp.autoschedule.measure`).
    search : {"model", "random"}, optional
        Candidates chosen by a cost model trained on the measurements, or at random.
    check_trivial : bool, optional
        With ``trials=0`` on a CPU: measure the rule-based schedule and the trivial one
        once each (two candidates, as a search measures them, appended to ``log``) and
        return the faster (``s.tune_result`` says both times); False (the default)
        measures nothing.  A search (``trials >= 1``) always measures the two.

    Returns
    -------
    Schedule
        An ordinary schedule; ``s.trace.python(args)`` prints it as Python.

    Raises
    ------
    AutoScheduleError
        For bad arguments, measuring where it cannot run (another CPU's code, no GPU),
        or a search where no candidate ran correctly.

    Examples
    --------
    >>> import tecomp as tc
    >>> A = tc.placeholder((64, 64), name="A")
    >>> B = tc.placeholder((64, 64), name="B")
    >>> k = tc.reduce_axis((0, 64), name="k")
    >>> C = tc.compute((64, 64), lambda i, j: tc.sum(A[i, k] * B[k, j], axis=k), name="C")
    >>> s = tc.auto_schedule([A, B, C])
    >>> f = tc.build(s, [A, B, C])
    """
    args = check_args(args)
    gpu = _gpu_kind(target)
    if gpu:
        rules = gpu_rules
        target = as_target(target)
    else:
        rules = apply_rules
        target = cpu_target(target, "auto_schedule")
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 0:
        raise AutoScheduleError(f"auto_schedule: trials must be an int >= 0 (0: no "
                                f"measurement), got {trials!r:.60}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise AutoScheduleError(f"auto_schedule: seed must be an int, got {seed!r:.60}")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(
            timeout, (int, float)) or not timeout > 0):
        raise AutoScheduleError(f"auto_schedule: timeout must be a positive number of "
                                f"seconds or None, got {timeout!r:.60}")
    if progress is not None and not isinstance(progress, bool):
        raise AutoScheduleError(f"auto_schedule: progress must be True, False or None (None: "
                                f"shown on a terminal, in Jupyter and in CI logs), got "
                                f"{progress!r:.60}")
    if log is not None and not isinstance(log, (str, os.PathLike)):
        raise AutoScheduleError(f"auto_schedule: log must be a file path (str or Path) or "
                                f"None, got {type(log).__name__}")
    if not isinstance(check_trivial, bool):
        raise AutoScheduleError(f"auto_schedule: check_trivial must be True or False (True: "
                                f"measure the rule-based schedule against the trivial one "
                                f"once), got {check_trivial!r:.60}")
    if check_trivial and gpu:
        raise AutoScheduleError(f"auto_schedule: check_trivial=True is for CPU targets (the "
                                f"trivial schedule is a CPU schedule), and target is "
                                f"{target}; use trials=N to measure the GPU rules' knobs")
    if log is not None:
        records.check_log_path(log, "auto_schedule: log")
    shapes = check_shapes(args, shapes)
    measures = trials or check_trivial
    why = (measure_unavailable(target) if gpu else target.runs_here()) if measures else None
    if why is not None:
        raise AutoScheduleError(f"auto_schedule: cannot measure here: {why}; "
                                f"use trials=0 (the analytic schedule, without "
                                f"check_trivial) or a log measured on such a machine")
    info = None if gpu else cpu_model(target)
    key = None
    if log is not None:
        key = records.workload_key(args, target, shapes)
    if trials == 0 and not check_trivial:
        if log is not None:
            s = _from_log(args, log, key, target, shapes)
            if s is not None:
                return s
        _log.debug("auto_schedule %s: the rule-based schedule for %s (no measurement)",
                   outputs_of(args)[0].name, target)
        return rules(args, Knobs(), info, shapes)
    if gpu:
        s = rules(args, Knobs(), info, shapes)
        if not s.trace.replayable:
            # a template whose schedule is no trace (flash_attention's single pass, which
            # no primitive makes): there is nothing to search, and no record to replay
            _log.info("auto_schedule %s: the template's schedule (%s); nothing to search",
                      outputs_of(args)[0].name, s.trace.problem)
            return s
    # (lazy: the search measures through llvmlite, which `import tecomp` does not load)
    from .search import tune

    res = tune(args, info, trials=trials or 2, shapes=shapes, seed=seed, runner=runner,
               log=log, key=key, timeout=timeout, progress=progress, strategy=search,
               target=target, rules=rules, only_start=trials == 0)
    if res.best is None:
        errors = sorted({t.error for t in res.trials if t.error})
        raise AutoScheduleError(
            f"auto_schedule: none of the {len(res.trials)} candidates ran correctly "
            f"({'; '.join(e[:120] for e in errors[:3])}); check the computes with "
            "tc.create_schedule first")
    s = replay(res.best.trace, outputs_of(args), shapes)
    s.tune_result = res
    return s


#: how many of a log's best records of a workload ``auto_schedule`` tries before it
#: gives the analytic schedule (each one that does not replay is skipped with a warning)
MAX_LOG_CANDIDATES = 16


def _from_log(args, log, key, target, shapes):
    """The schedule of the best record of workload ``key`` in ``log`` that replays and
    lowers (:func:`~tecomp.autoschedule.search.check_candidate`), or None."""
    from .search import check_candidate  # (lazy: llvmlite, as in auto_schedule)

    ranked = records.ranked_records(log, key)
    p = os.fspath(log)
    for line, rec in ranked[:MAX_LOG_CANDIDATES]:
        try:
            s = replay(rec["trace"], outputs_of(args), shapes)
            check_candidate(s, args, target)
            _log.info("auto_schedule %s: the best record of this workload in %s (line %d, "
                      "%d records of it), no search", outputs_of(args)[0].name, p, line,
                      len(ranked))
            return s
        except TecompError as e:
            warnings.warn(f"{p}:{line}: auto_schedule: the record does not replay on this "
                          f"compute ({str(e)[:400]}); skipped", AutoScheduleWarning,
                          stacklevel=3)
    if not ranked:
        _log.info("auto_schedule %s: no record of this workload (hash %s) in %s",
                  outputs_of(args)[0].name, key["hash"][:12], p)
    if ranked:
        warnings.warn(f"auto_schedule: none of the {min(len(ranked), MAX_LOG_CANDIDATES)} best "
                      f"records of this workload in {p!r} replays; using the analytic "
                      "schedule", AutoScheduleWarning, stacklevel=3)
    return None


from .config import Config, apply_config, default_config  # noqa: E402
