"""Measured search over the rules' knobs (``tc.auto_schedule(..., trials=N)``).

Candidates are the rules of :mod:`tecomp.autoschedule.rules` (for a cuda target, those of
:mod:`tecomp.autoschedule.cuda_rules`) with other knob values: the
analytic schedule first, then batches of candidates made by sampling every knob at random
(``search="random"``), or (the default, ``search="model"``) by mutating the best measured
ones and crossing them, ranked by a cost model trained on every measurement so far
(:class:`tecomp.autoschedule.cost_model.CostModel`), with a few random ones mixed in so the
model sees more of the space.  Two candidates whose schedules are the same trace are
measured once.

Each candidate is measured by a runner (:mod:`tecomp.autoschedule.measure`) in a child
process: a crash, a hang or a wrong result (compared with the first candidate that ran) is
recorded as a failure and never returned.  Every measurement is appended to the log (JSON
lines, :mod:`tecomp.autoschedule.records`) when there is one.

At the end the :data:`FINALISTS` fastest candidates and the analytic one are measured
again, :data:`FINAL_ROUNDS` times, in an order that rotates every round (unless the
search used up its ``timeout``), and the fastest median over all of each one's timings
wins (``Trial.final_seconds``; logged as records with ``"search": "final"``, which
``log=`` replays first).  One measurement per candidate,
minutes apart on a busy machine, picked slower schedules than the analytic one where a
few percent separated them (conv 1x1, GEMM 127x509x257 on the Zen 3;
benchmarks/history/2026-11-26.md, "TE features, and the measured search on the Zen 3").
"""
from __future__ import annotations

import json
import math
import random
import sys
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import numpy as np

from ..codegen.cuda import codegen_cuda
from ..errors import AutoScheduleError, ScheduleError, TecompError
from ..lower import lower
from ..schedule.trace import replay
from ..target import as_target
from . import measure, records
from .cost_model import CostModel
from .rules import Knobs, apply_rules, outputs_of

BATCH = 8           # candidates measured per round
POOL = 96           # candidates the model ranks per round
EXPLORE = 0.25      # share of each batch picked at random (model-guided search)
FINALISTS = 4       # the fastest candidates measured again at the end (with the analytic one)
FINAL_ROUNDS = 2    # how many times


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
    best: Optional[Trial]     # the fastest finalist (by final_seconds), else by seconds
    trials: List[Trial] = field(default_factory=list)
    history: List[float] = field(default_factory=list)   # best seconds after each trial
    finalists: List[Trial] = field(default_factory=list)


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


class _Progress:
    def __init__(self, total: int, enabled: Optional[bool], desc: str):
        if enabled is None:
            enabled = hasattr(sys.stderr, "isatty") and sys.stderr.isatty()
        self.enabled = bool(enabled)
        self.bar = None
        self.n, self.total, self.desc = 0, total, desc
        if self.enabled:
            try:
                from tqdm import tqdm

                self.bar = tqdm(total=total, desc=desc, unit="trial", file=sys.stderr)
            except ImportError:
                self.bar = None

    def update(self, best: float, failed: int):
        self.n += 1
        if not self.enabled:
            return
        post = f"best {best * 1e3:.3f} ms" if math.isfinite(best) else "no result yet"
        if failed:
            post += f", {failed} failed"
        if self.bar is not None:
            self.bar.set_postfix_str(post)
            self.bar.update(1)
        else:
            sys.stderr.write(f"\r{self.desc}: {self.n}/{self.total} trials, {post}")
            sys.stderr.flush()

    def close(self):
        if self.bar is not None:
            self.bar.close()
        elif self.enabled:
            sys.stderr.write("\n")


def tune(args, info, *, trials: int, shapes=None, seed: int = 0, runner=None,
         log=None, key=None, timeout: Optional[float] = None, progress=None,
         strategy: str = "model", target="llvm", rules=apply_rules) -> TuneResult:
    """Measure up to ``trials`` candidates of ``args``; the best one that ran correctly
    and the history.  ``rules(args, knobs, info, shapes)`` makes a candidate's schedule
    (the CPU rules by default; the GPU rules for a cuda target)."""
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
    result = TuneResult(None)
    model = None
    feats: List[np.ndarray] = []
    costs: List[float] = []
    bar = _Progress(trials, progress, f"auto_schedule {outputs_of(args)[0].name}")
    lowered = set()

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
        except TecompError:
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
    while len(result.trials) < trials:
        if timeout is not None and time.monotonic() - start > timeout:
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
        if not pending:
            break   # the space is exhausted
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
            feats.append(c[0])
            costs.append(secs)
            bar.update(result.best.seconds if result.best else math.inf,
                       sum(1 for x in result.trials if x.error))
        if strategy == "model":
            # refit on everything (new knobs may have appeared: the features grow)
            names = sorted(space)
            model = CostModel(seed=seed)
            model.update([_features(space, v, names) for v in feats], costs)
    bar.close()
    if timeout is None or time.monotonic() - start <= timeout:
        _final(result, run, args, shapes, target, log, key)
    return result


def _final(result: TuneResult, run, args, shapes, target, log, key) -> None:
    """Measure the fastest candidates and the analytic one again (see the module
    docstring) and make the fastest by the median of all its timings ``result.best``."""
    ok = sorted((t for t in result.trials if math.isfinite(t.seconds)), key=lambda t: t.seconds)
    finalists = ok[:FINALISTS]
    analytic = result.trials[0] if result.trials else None
    if analytic is not None and math.isfinite(analytic.seconds) and analytic not in finalists:
        finalists.append(analytic)
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
