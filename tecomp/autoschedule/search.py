"""Measured search over the rules' knobs (``tc.auto_schedule(..., trials=N)``).

Candidates are the rules of :mod:`tecomp.strategy.rules` (for a cuda target, those of
:mod:`tecomp.strategy.cuda_rules`) with other knob values: the
analytic schedule first and, on the CPU, the trivial schedule
(:func:`tecomp.strategy.trivial.trivial_schedule`, the knob ``trivial``; where the
analytic schedule is the trivial one, the rules' schedule) in the same first batch
(even with ``trials=1``), then batches of candidates made by sampling every knob at random
(``search="random"``), or (the default, ``search="model"``) by mutating the best measured
ones and crossing them, ranked by a cost model trained on every measurement so far
(:class:`tecomp.autoschedule.cost_model.CostModel`), with a few random ones mixed in so the
model sees more of the space.  Two candidates whose schedules are the same trace are
measured once.

Each candidate is measured by a runner (:mod:`tecomp.autoschedule.measure`) in a child
process: a crash, a hang or a wrong result (compared with the first candidate that ran) is
recorded as a failure and never returned.  Every measurement is appended to the log (JSON
lines, :mod:`tecomp.autoschedule.records`) when there is one.

At the end the :data:`FINALISTS` fastest candidates, the analytic one and the trivial
one are measured again, :data:`FINAL_ROUNDS` times, in an order that rotates every round (unless the
search used up its ``timeout``), and the fastest median over all of each one's timings
wins (``Trial.final_seconds``; logged as records with ``"search": "final"``, which
``log=`` replays first).  One measurement per candidate,
minutes apart on a busy machine, picked slower schedules than the analytic one where a
few percent separated them (conv 1x1, GEMM 127x509x257 on the Zen 3;
benchmarks/history/2026-11-26.md, "TE features, and the measured search on the Zen 3").
So a search returns nothing measured slower than the analytic or the trivial schedule
(by the finalists' medians), and neither does ``log=`` replaying its log (the final
records come first).
"""
from __future__ import annotations

import json
import logging
import math
import os
import random
import sys
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import numpy as np

from ..codegen.cuda import codegen_cuda
from ..errors import AutoScheduleError, ScheduleError, TecompError
from ..ir import dtype as _dt
from ..ir.expr import BinaryOp, Call, Const, Reduce, Var
from ..ir.functor import collect, substitute
from ..ir.simplify import simplify
from ..te.tensor import ComputeOp, compute_ops
from ..lower import lower
from ..schedule.trace import replay
from ..target import as_target
from . import measure, records
from .cost_model import CostModel
from ..strategy import apply_rules
from ..strategy.rules import Knobs, outputs_of

BATCH = 8           # candidates measured per round
POOL = 96           # candidates the model ranks per round
EXPLORE = 0.25      # share of each batch picked at random (model-guided search)
FINALISTS = 4       # the fastest candidates measured again at the end (with the analytic one)
FINAL_ROUNDS = 2    # how many times

_log = logging.getLogger(__name__)


def build_candidate(args, payload):
    """The runners' ``build_fn``: the schedule of ``payload["trace"]`` on ``args``."""
    return replay(payload["trace"], outputs_of(args))


def check_candidate(s, args, target="llvm") -> None:
    """A TecompError when the schedule ``s`` of ``args`` cannot be built for ``target``
    as far as can be told without compiling it: it does not lower (lowering refuses an
    unroll of too many copies, a vectorized reduction...), it binds GPU threads for the
    CPU, or for the GPU its CUDA C is refused (a tile over the shared memory, a block of
    too many threads).  What every candidate passes before it is measured, and a record
    of a log before ``auto_schedule`` returns it."""
    tgt = as_target(target)
    if tgt.is_gpu:
        codegen_cuda(lower(s, args, target=tgt))
        return
    for st in s.stages:
        for iv, a in st.iter_attrs.items():
            if a.thread is not None:
                raise ScheduleError(
                    f"bind on stage {st.name}: axis {iv.name} is bound to "
                    f"{a.thread.thread_tag}, a GPU thread axis, and target {tgt} is the CPU")
    lower(s, args, target=tgt)


@dataclass
class Trial:
    """One measured candidate."""

    index: int
    knobs: dict
    trace: list
    seconds: float            # median time, inf when it failed
    error: Optional[str] = None
    times: List[float] = field(default_factory=list)   # every timing, the final ones too
    final_seconds: Optional[float] = None   # the median of ``times``, for a finalist


@dataclass
class TuneResult:
    """What a measured search did (``s.tune_result`` of ``tc.auto_schedule(...,
    trials=N)``).  ``repr`` is one line; :meth:`summary` is a table of the best
    candidates."""

    best: Optional[Trial]     # the fastest finalist (by final_seconds), else by seconds
    trials: List[Trial] = field(default_factory=list)
    history: List[float] = field(default_factory=list)   # best seconds after each trial
    finalists: List[Trial] = field(default_factory=list)
    #: the name of the (first) output the search scheduled
    workload: str = ""
    #: the target searched for, as a string
    target: str = "llvm"
    #: the log the measurements were appended to, or None
    log: Optional[str] = None
    #: the ``trials=`` asked for
    requested: int = 0
    #: how many knob combinations the rules offer (an upper bound on the distinct
    #: schedules: two combinations may give one schedule); None when not counted
    space_size: Optional[int] = None
    #: why the search measured fewer than ``requested`` candidates ("" when it did not)
    stopped: str = ""
    #: floating-point operations of one call (None when an extent is symbolic and unbound)
    flops: Optional[int] = None

    @property
    def best_seconds(self) -> Optional[float]:
        """The best candidate's time: its final median when it was measured again, else
        its first median; None when no candidate ran."""
        if self.best is None:
            return None
        return self.best.final_seconds if self.best.final_seconds is not None \
            else self.best.seconds

    @property
    def gflops(self) -> Optional[float]:
        """GFLOP/s of the best candidate (None when the FLOPs or a time are unknown)."""
        t = self.best_seconds
        if self.flops is None or t is None or not t > 0 or not math.isfinite(t):
            return None
        return self.flops / t / 1e9

    def __repr__(self) -> str:
        failed = sum(1 for t in self.trials if t.error)
        if self.best is None:
            best = "no candidate ran"
        else:
            best = f"best {self.best_seconds * 1e3:.4g} ms"
            g = self.gflops
            if g is not None:
                best += f" ({g:.4g} GFLOP/s)"
        parts = [f"workload={self.workload!r}", f"target={self.target!r}", best,
                 f"trials={len(self.trials)}/{self.requested}"]
        if failed:
            parts.append(f"failed={failed}")
        if self.log is not None:
            parts.append(f"log={self.log!r}")
        return f"TuneResult({', '.join(parts)})"

    def summary(self, top: int = 5) -> str:
        """The search as a readable table.

        Parameters
        ----------
        top : int
            How many of the fastest candidates to list (default 5).

        Returns
        -------
        str
            The workload, target, space size, trials measured, why the search stopped
            early, the log, the FLOPs of a call, then one row per candidate: rank, trial,
            milliseconds, GFLOP/s and knobs.
        """
        failed = sum(1 for t in self.trials if t.error)
        space = "not counted" if self.space_size is None else f"{self.space_size} knob combinations"
        lines = [f"auto_schedule search of {self.workload!r} for target {self.target!r}",
                 f"  space:    {space}",
                 f"  measured: {len(self.trials)} of trials={self.requested}"
                 + (f" ({failed} failed)" if failed else ""),
                 ]
        if self.stopped:
            lines.append(f"  stopped:  {self.stopped}")
        if self.log is not None:
            lines.append(f"  log:      {self.log}")
        if self.flops is not None:
            lines.append(f"  work:     {self.flops} FLOPs a call")
        ok = sorted((t for t in self.trials if math.isfinite(t.seconds)),
                    key=lambda t: (t.final_seconds if t.final_seconds is not None
                                   else t.seconds, t.index))
        if not ok:
            lines.append("  no candidate ran correctly")
            return "\n".join(lines)
        head = ["rank", "trial", "ms", "GFLOP/s", "knobs"]
        rows = []
        for rank, t in enumerate(ok[:max(1, int(top))], 1):
            secs = t.final_seconds if t.final_seconds is not None else t.seconds
            g = f"{self.flops / secs / 1e9:.4g}" if self.flops is not None and secs > 0 else "-"
            knobs = ", ".join(f"{k}={v}" for k, v in sorted(t.knobs.items(), key=lambda kv:
                                                            str(kv[0])))
            role = " (analytic)" if t.index == 0 else \
                " (trivial)" if t.knobs.get("trivial") is True else ""
            rows.append([str(rank), str(t.index) + role,
                         f"{secs * 1e3:.4g}", g, knobs or "(the analytic defaults)"])
        lines.append("")
        lines.extend(format_table(head, rows))
        return "\n".join(lines)


def format_table(head: List[str], rows: List[List[str]]) -> List[str]:
    """``rows`` under ``head`` as aligned text lines (the last column is not padded)."""
    widths = [max(len(r[i]) for r in [head] + rows) for i in range(len(head))]

    def line(r):
        return "  ".join(c.ljust(w) if i < len(r) - 1 else c
                         for i, (c, w) in enumerate(zip(r, widths))).rstrip()

    return [line(head), line(["-" * w for w in widths])] + [line(r) for r in rows]


def space_size(space: Dict[str, list]) -> int:
    """How many knob combinations ``space`` (knob name -> its choices) holds."""
    n = 1
    for ch in space.values():
        n *= max(1, len(ch))
    return n


def _features(space: Dict[str, list], values: dict, names: List[str]) -> np.ndarray:
    out = []
    for n in names:
        ch = space.get(n)
        v = values.get(n)
        if ch is None or v is None:
            out.append(-1.0)
        elif isinstance(v, bool):
            out.append(float(v))
        elif isinstance(v, (int, float)):
            out.append(math.log2(float(v) + 1.0))
        else:
            out.append(float(ch.index(v)) if v in ch else -1.0)
    return np.asarray(out, dtype=np.float64)


def _in_notebook() -> bool:
    """Whether this process is a Jupyter kernel (its stderr is no terminal, but a
    progress bar shows)."""
    ip = sys.modules.get("IPython")
    get = getattr(ip, "get_ipython", None) if ip is not None else None
    try:
        shell = get() if get is not None else None
    except Exception:  # noqa: BLE001 - IPython's own state: no notebook then
        return False
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


def _is_tty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except Exception:  # noqa: BLE001 - a replaced stderr without isatty, or closed
        return False


class Progress:
    """The progress of a search, on stderr (read when it starts: a test may replace it).

    ``enabled``: ``False`` shows nothing; ``True`` always shows it; ``None`` (the
    default) shows it on a terminal, in Jupyter and in a log (a CI job's stderr).  On a
    terminal or in Jupyter it is a tqdm bar (``tqdm.auto``) when tqdm is installed, else
    one line rewritten in place (``\\r``, a terminal only); where stderr is not a
    terminal (a CI log, a file) it is a plain line at every tenth of the trials and at
    the end, never a ``\\r``.  Whatever is shown, the search also logs to the
    ``tecomp.autoschedule.search`` logger."""

    def __init__(self, total: int, enabled: Optional[bool], desc: str):
        self.stream = sys.stderr
        self.n, self.total, self.desc = 0, total, desc
        self.bar = None
        live = _is_tty(self.stream) or _in_notebook()
        self.enabled = enabled is not False
        if not self.enabled:
            self.mode = "off"
            return
        self.mode = "live" if live else "lines"
        if live:
            try:
                from tqdm.auto import tqdm
            except ImportError:
                tqdm = None
            if tqdm is not None:
                self.bar = tqdm(total=total, desc=desc, unit="trial", file=self.stream,
                                dynamic_ncols=True, leave=True)
                self.mode = "tqdm"
        self._next_line = 0

    def update(self, best: float, failed: int) -> None:
        self.n += 1
        if not self.enabled:
            return
        post = f"best {best * 1e3:.4g} ms" if math.isfinite(best) else "no result yet"
        if failed:
            post += f", {failed} failed"
        if self.bar is not None:
            self.bar.set_postfix_str(post, refresh=False)
            self.bar.update(1)
        elif self.mode == "live":
            self.stream.write(f"\r{self.desc}: {self.n}/{self.total} trials, {post}")
            self.stream.flush()
        elif self.n >= self._next_line or self.n == self.total:
            # (about ten lines a search, whatever its size)
            self._next_line = self.n + max(1, self.total // 10)
            self.stream.write(f"{self.desc}: {self.n}/{self.total} trials, {post}\n")
            self.stream.flush()

    def close(self, why: str = "") -> None:
        if self.bar is not None:
            self.bar.close()
            if why:   # (a line of its own: a bar is cut to the terminal's width)
                self.stream.write(f"{self.desc}: {why}\n")
                self.stream.flush()
        elif self.mode == "live":
            self.stream.write("\n" if not why else f" ({why})\n")
            self.stream.flush()
        elif self.mode == "lines" and why:
            self.stream.write(f"{self.desc}: stopped at {self.n}/{self.total} trials: "
                              f"{why}\n")
            self.stream.flush()


def tune(args, info, *, trials: int, shapes=None, seed: int = 0, runner=None,
         log=None, key=None, timeout: Optional[float] = None, progress=None,
         strategy: str = "model", target="llvm", rules=apply_rules,
         only_start: bool = False) -> TuneResult:
    """Measure up to ``trials`` candidates of ``args``; the best one that ran correctly
    and the history.  ``rules(args, knobs, info, shapes)`` makes a candidate's schedule
    (the CPU rules by default; the GPU rules for a cuda target).  The first candidates
    are the analytic schedule and, on the CPU, the other of it and the trivial schedule
    (the knob ``trivial``); ``only_start``: only those, measured once each (no final
    round: ``tc.auto_schedule(..., check_trivial=True)``)."""
    if strategy not in ("model", "random"):
        raise AutoScheduleError(f"auto_schedule: search={strategy!r} is not a search; use "
                                "'model' (cost-model guided) or 'random'")
    rng = random.Random(seed)
    run = measure.get_runner(runner)
    start = time.monotonic()
    base = Knobs()
    rules(args, base, info, shapes)
    space: Dict[str, list] = dict(base.space)
    seen: Dict[str, Optional[Trial]] = {}
    name = outputs_of(args)[0].name
    result = TuneResult(None, workload=name, target=str(target),
                        log=None if log is None else os.fspath(log), requested=trials,
                        flops=workload_flops(args, shapes))
    model = None
    feats: List[np.ndarray] = []
    costs: List[float] = []
    _log.info("auto_schedule %s (target %s): search=%s, trials=%d%s%s; the analytic "
              "schedule's knobs: %s (%d combinations; other choices may add knobs)", name,
              target, strategy, trials, f", timeout {timeout:g} s" if timeout is not None
              else "", f", log {result.log!r}" if log is not None else "",
              _space_text(space), space_size(space))
    bar = Progress(trials, progress, f"auto_schedule {name}")
    lowered = set()
    refused = [0]

    def realize(values=None) -> Optional[tuple]:
        """(knob values, trace, its signature) of a candidate, or None when the
        primitives or lowering refuse it (checked before anything is measured)."""
        k = Knobs(values, rng=rng if values is None else None)
        try:
            s = rules(args, k, info, shapes)
            tr = s.trace.to_json()
            sig = json.dumps(tr, sort_keys=True)
            if sig not in lowered:
                check_candidate(s, args, target)
                lowered.add(sig)
        except TecompError as e:
            refused[0] += 1
            _log.debug("auto_schedule %s: candidate %s refused before measuring: %s", name,
                       k.values, str(e)[:200])
            return None
        space.update(k.space)
        return k.values, tr, sig

    def sample() -> Optional[tuple]:
        return realize(None)

    def mutate(values: dict) -> dict:
        v = dict(values)
        names = [n for n in v if len(space.get(n, [])) > 1]
        if not names:
            return v
        for _ in range(1 + (rng.random() < 0.3)):
            n = rng.choice(names)
            ch = [c for c in space[n] if c != v[n]]
            if ch:
                v[n] = rng.choice(ch)
        return v

    def crossover(a: dict, b: dict) -> dict:
        return {n: (a if rng.random() < 0.5 else b).get(n, a.get(n)) for n in set(a) | set(b)}

    first = realize(base.values)
    pending = [first] if first is not None else []
    if "trivial" in base.space:
        # the other of the rules' schedule and the trivial one (the CPU's knob
        # ``trivial``): both measured first, so that no search returns a schedule
        # measured slower than either
        other = realize({**base.values, "trivial": not base.values["trivial"]})
        if other is not None and all(other[2] != p[2] for p in pending):
            pending.append(other)
    starts = [p[2] for p in pending]
    if only_start:
        trials = result.requested = len(pending)
    stopped = ""
    while len(result.trials) < trials:
        if timeout is not None and time.monotonic() - start > timeout:
            stopped = (f"the timeout of {timeout:g} s ran out after {len(result.trials)} "
                       f"of trials={trials}")
            break
        want = min(BATCH, trials - len(result.trials)) - len(pending)
        tries = 0
        if want > 0 and (strategy == "random" or not result.trials):
            while want > 0 and tries < 50 * BATCH:
                tries += 1
                c = sample()
                if c is not None and c[2] not in seen and all(c[2] != p[2] for p in pending):
                    pending.append(c)
                    want -= 1
        elif want > 0:
            good = sorted((t for t in result.trials if math.isfinite(t.seconds)),
                          key=lambda t: t.seconds)[:8]
            pool = []
            while len(pool) < POOL and tries < 10 * POOL:
                tries += 1
                r = rng.random()
                if not good or r < 0.15:
                    c = sample()
                elif r < 0.35 and len(good) > 1:
                    a, b = rng.sample(good, 2)
                    c = realize(mutate(crossover(a.knobs, b.knobs)))
                else:
                    c = realize(mutate(rng.choice(good).knobs))
                if c is not None and c[2] not in seen and all(c[2] != p[2] for p in pool + pending):
                    pool.append(c)
            if pool:
                names = sorted(space)
                scores = model.predict([_features(space, c[0], names) for c in pool]) \
                    if model is not None else np.zeros(len(pool))
                order = list(np.argsort(-np.asarray(scores), kind="stable"))
                n_rand = max(1, int(round(want * EXPLORE))) if want > 1 else 0
                picked = [pool[i] for i in order[:want - n_rand]]
                rest = [pool[i] for i in order[want - n_rand:]]
                rng.shuffle(rest)
                pending.extend(picked + rest[:n_rand])
        if not pending:   # the space is exhausted
            stopped = _exhausted(len(seen), trials, space, refused[0])
            break
        batch, pending = pending, []
        res = run.run(args, build_candidate, [{"trace": c[1]} for c in batch], shapes=shapes,
                      **({} if str(target) == "llvm" else {"target": str(target)}))
        for c, r in zip(batch, res):
            secs = float(np.median(r.times)) if r.ok and r.times else math.inf
            t = Trial(len(result.trials), c[0], c[1], secs, None if r.ok else r.error,
                      list(r.times) if r.ok else [])
            seen[c[2]] = t
            result.trials.append(t)
            if math.isfinite(secs) and (result.best is None or secs < result.best.seconds):
                result.best = t
            result.history.append(result.best.seconds if result.best else math.inf)
            if log is not None:
                records.append_record(log, records.make_record(
                    key, c[1], list(r.times) if r.ok else None, None if r.ok else (
                        r.error or "failed"), knobs=_jsonable(c[0]), trial=t.index,
                    search=strategy))
            _log.debug("auto_schedule %s: trial %d %s: %s", name, t.index, c[0],
                       f"{secs * 1e3:.4g} ms" if r.ok else f"failed: {(r.error or '')[:200]}")
            feats.append(c[0])
            costs.append(secs)
            bar.update(result.best.seconds if result.best else math.inf,
                       sum(1 for x in result.trials if x.error))
        if strategy == "model":
            # refit on everything (new knobs may have appeared: the features grow)
            names = sorted(space)
            model = CostModel(seed=seed)
            model.update([_features(space, v, names) for v in feats], costs)
    result.space_size = space_size(space)
    result.stopped = stopped
    bar.close(stopped)
    if stopped:
        _log.info("auto_schedule %s: %s", name, stopped)
    if not only_start and (timeout is None or time.monotonic() - start <= timeout):
        _final(result, run, args, shapes, target, log, key,
               [seen[sig] for sig in starts if seen.get(sig) is not None])
        if result.finalists:
            _log.info("auto_schedule %s: measured the %d fastest candidates again (%d rounds)",
                      name, len(result.finalists), FINAL_ROUNDS)
    elif result.trials:
        _log.info("auto_schedule %s: no final measurement of the fastest candidates (the "
                  "timeout ran out)", name)
    failed = sum(1 for t in result.trials if t.error)
    if result.best is None:
        _log.warning("auto_schedule %s: none of the %d candidates ran correctly", name,
                     len(result.trials))
    else:
        _log.info("auto_schedule %s: best %.4g ms (trial %d%s) of %d measured%s, in %.1f s",
                  name, result.best_seconds * 1e3, result.best.index,
                  ", the analytic schedule" if result.best.index == 0 else "",
                  len(result.trials), f", {failed} failed" if failed else "",
                  time.monotonic() - start)
    return result


def _space_text(space: Dict[str, list]) -> str:
    """``space`` as ``name: n choices``, for the log."""
    return ", ".join(f"{k}: {len(v)}" for k, v in sorted(space.items())) or "no knobs"


def _exhausted(distinct: int, trials: int, space: Dict[str, list], refused: int) -> str:
    """Why a search that ran out of new candidates measured ``distinct`` of ``trials``."""
    n = space_size(space)
    why = (f"the search space has only {distinct} distinct "
           f"schedule{'s' if distinct != 1 else ''}")
    if distinct < n:
        why += (f" that lower{'s' if distinct == 1 else ''} (its {n} knob combinations "
                f"give no other)")
    if refused:
        why += f"; {refused} sampled candidates did not lower and were not measured"
    return f"measured {distinct} of trials={trials} because {why}"


def workload_flops(args, shapes=None) -> Optional[int]:
    """Floating-point operations of one call of the computes of ``args``: for each
    compute, its points (times its reduction's points) times the floating-point
    arithmetic and math calls of its body (a reduction's combine counts
    one).  None when an extent is symbolic and not bound by ``shapes``."""
    def extent(e) -> Optional[int]:
        if shapes:
            vmap = {v: Const(int(shapes[v.name]), v.dtype)
                    for v in collect(e, lambda n: isinstance(n, Var)) if v.name in shapes}
            e = substitute(e, vmap) if vmap else e
        e = simplify(e)
        return int(e.value) if isinstance(e, Const) else None

    def ops(e) -> int:
        return len(collect(e, lambda n: isinstance(n, (BinaryOp, Call))
                           and _dt.is_float(n.dtype)))

    def points(ivs) -> Optional[int]:
        n = 1
        for iv in ivs:
            x = extent(iv.dom.extent)
            if x is None:
                return None
            n *= x
        return n

    total = 0
    outs = [t for t in args if hasattr(t, "op")]
    for op in compute_ops([t.op for t in outs]):
        if not isinstance(op, ComputeOp):
            continue
        pts = points(op.axis)
        if pts is None:
            return None
        for body in op.bodies:
            red = points(body.axis) if isinstance(body, Reduce) else 1
            if red is None:
                return None
            total += pts * red * (ops(body.source) + 1) if isinstance(body, Reduce) \
                else pts * ops(body)
    return total


def _final(result: TuneResult, run, args, shapes, target, log, key, starts) -> None:
    """Measure the fastest candidates and the ``starts`` (the analytic schedule and the
    trivial one) again (see the module docstring) and make the fastest by the median of
    all its timings ``result.best``."""
    ok = sorted((t for t in result.trials if math.isfinite(t.seconds)), key=lambda t: t.seconds)
    finalists = ok[:FINALISTS]
    for start in starts:
        if math.isfinite(start.seconds) and start not in finalists:
            finalists.append(start)
    if len(finalists) < 2:
        return
    extra = {} if str(target) == "llvm" else {"target": str(target)}
    dropped = set()
    for rnd in range(FINAL_ROUNDS):
        k = rnd % len(finalists)
        order = finalists[k:] + finalists[:k]
        res = run.run(args, build_candidate, [{"trace": t.trace} for t in order],
                      shapes=shapes, **extra)
        for t, r in zip(order, res):
            if r.ok and r.times:
                t.times.extend(r.times)
            else:   # (it ran before: a flaky candidate is not returned)
                dropped.add(t.index)
    result.finalists = [t for t in finalists if t.index not in dropped]
    for t in result.finalists:
        t.final_seconds = float(np.median(t.times))
    if result.finalists:
        result.best = min(result.finalists, key=lambda t: t.final_seconds)
    if log is not None:
        for t in result.finalists:
            records.append_record(log, records.make_record(
                key, t.trace, list(t.times), None, knobs=_jsonable(t.knobs), trial=t.index,
                search="final"))


def _jsonable(values: dict) -> dict:
    return {k: v for k, v in values.items()}
