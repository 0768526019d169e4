"""Auto-scheduling: tecomp's tc.auto_schedule against PyTorch, Halide's autoschedulers and
TVM MetaSchedule, on computes that tecomp has no hand-written schedule for (and on the
tecomp.nn ops whose templates are the auto-scheduler's starting points).

    python3 benchmarks/tune.py                       # trials=0 (analytic) for every workload
    python3 benchmarks/tune.py --trials 200          # + tecomp's measured search (model-guided)
    python3 benchmarks/tune.py --trials 200 --plot tune.png   # + random search, and the plot
    python3 benchmarks/tune.py --tvm-trials 200 --only bmm    # + TVM MetaSchedule (slow)
    python3 benchmarks/tune.py --trials 200 --tvm-trials 200 --tvm-only "conv,gemm"  # TVM on some
    python3 benchmarks/tune.py --quick --only "row"

Columns (every tool's output is checked against a float64 reference first; the tools take
turns in one process, the order rotating every round, and the table shows medians):

* ``tc a0``: ``tc.auto_schedule(args)`` (trials=0), with its generation time;
* ``tc N``: ``tc.auto_schedule(args, trials=N, log=...)`` (cost-model guided);
* ``torch``: PyTorch eager (``torch.set_num_threads`` = tecomp's threads);
* ``halide``: the pipeline written in Halide, scheduled by each autoscheduler the wheel
  ships (Mullapudi2016, Adams2019 with its bundled weights, Li2018), each given the
  machine (parallelism = threads, last-level cache from sysfs); the column shows the
  fastest of them and names it;
* ``tvm-ms``: TVM MetaSchedule (``tvm.s_tir.meta_schedule.tune_tir``) with ``--tvm-trials``
  (its LocalBuilder given ``--tvm-build-timeout`` seconds, default 600: with its own 30
  every candidate timed out on a 2-core VM).

Every tool reads the same 64-byte aligned input arrays (``tc.aligned``; MetaSchedule's
libraries read them in place through DLPack), and tecomp writes into ``tc.empty`` outputs: numpy's own large arrays start 16 bytes past a cache line, which made tecomp's
memory-bound kernels up to a quarter slower than on TVM's tensors
(benchmarks/DECISIONS.md, "Benchmarks: aligned arrays").

Ratios are tecomp's speed over the other's (> 1: tecomp is faster).  ``--plot`` runs the
search twice per workload (random and model-guided, same trial count), reads the best
time against trials back from the JSON-lines logs in ``--log-dir``, draws it (matplotlib)
and prints how many trials each mode needed to reach 90% of its final best speed; without
``--trials`` it plots the logs already in ``--log-dir``.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tecomp as tc  # noqa: E402
from autosched_workloads import all_workloads  # noqa: E402
from workloads import machine  # noqa: E402
from common import interleaved_turns as interleaved  # noqa: E402


class Skip(Exception):
    pass


def _outputs(args):
    return [a for a in args if isinstance(a.op, tc.te.tensor.ComputeOp)]


def auto_schedule(args, **kw):
    """``tc.auto_schedule(args, **kw)``; a tecomp without it gets the default schedule
    (``tc.create_schedule``), so that the other columns still run."""
    if hasattr(tc, "auto_schedule"):
        return tc.auto_schedule(args, **kw)
    if kw.get("trials"):
        raise Skip("this tecomp has no tc.auto_schedule")
    return tc.create_schedule([t.op for t in _outputs(args)])


def _check(got, ref, what):
    for g, r in zip(got, ref):
        g = np.asarray(g, dtype="float64")
        if g.shape != r.shape:
            raise AssertionError(f"{what}: shape {g.shape}, expected {r.shape}")
        err = float(np.abs(g - r).max() / max(1e-30, np.abs(r).max()))
        if not err < 1e-3:
            raise AssertionError(f"{what}: max relative error {err:.2e}")


# ---------------------------------------------------------------------------------------
# tools: each returns a zero-argument function that runs the workload once


def tecomp_fn(w, s, args):
    f = tc.build(s, args)
    outs = [tc.empty([int(d.value) for d in t.shape]) for t in _outputs(args)]
    for o in outs:
        o.fill(0)
    arrs = list(w.inputs) + outs
    f(*arrs)
    _check(outs, w.reference(), "tecomp")
    return lambda: f(*arrs)


def torch_fn(w, threads):
    try:
        import torch
    except ImportError as e:
        raise Skip(f"not installed ({e})")
    if w.torch is None:
        raise Skip("no PyTorch version")
    torch.set_num_threads(threads)
    ts = [torch.from_numpy(x) for x in w.inputs]
    grad = "grad of" in w.name
    with torch.set_grad_enabled(grad):
        out = w.torch(*ts)
    out = list(out) if isinstance(out, (tuple, list)) else [out]
    _check([o.detach().numpy() for o in out], w.reference(), "torch")
    if grad:
        return lambda: w.torch(*ts)

    def run():
        with torch.no_grad():
            w.torch(*ts)
    return run


def _l3_bytes():
    from tecomp.target.host import host_cache as _cache_size

    return _cache_size(3, 32 << 20)


HALIDE_SCHEDULERS = ("Mullapudi2016", "Adams2019", "Li2018")


def halide_fns(w, threads):
    """{autoscheduler name: run function} for each one that schedules and runs it."""
    try:
        import halide as hl
    except ImportError as e:
        raise Skip(f"not installed ({e})")
    if w.halide is None:
        raise Skip("no Halide version")
    libdir = os.path.join(os.path.dirname(hl.__file__), "lib64")
    params = {"Mullapudi2016": {"parallelism": str(threads),
                                "last_level_cache_size": str(_l3_bytes()), "balance": "40"},
              "Adams2019": {"parallelism": str(threads)},
              "Li2018": {"parallelism": str(threads)}}
    target = hl.get_jit_target_from_environment()
    out, errors = {}, {}
    for name in HALIDE_SCHEDULERS:
        try:
            hl.load_plugin(os.path.join(libdir, f"libautoschedule_{name.lower()}.so"))
            ins, outs = w.halide(hl)
            p = hl.Pipeline(outs)
            p.apply_autoscheduler(target, hl.AutoschedulerParams(name, params[name]))
            p.compile_jit(target)
            for ip, x in zip(ins, w.inputs):
                ip.set(hl.Buffer(np.ascontiguousarray(x)))
            bufs = [hl.Buffer(hl.Float(32), list(reversed(r.shape))) for r in w.reference()]
            p.realize(bufs)
            _check([np.asarray(b) for b in bufs], w.reference(), f"halide {name}")
            out[name] = (lambda p=p, bufs=bufs: p.realize(bufs))
        except Exception as e:  # noqa: BLE001 - an autoscheduler that fails on this pipeline
            errors[name] = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:100]}"
    if not out:
        raise Skip("; ".join(f"{k}: {v}" for k, v in errors.items()))
    return out, errors


# one tune_tir over all the workload's kernels (one MetaSchedule task each, the trial
# budget shared by its task scheduler, as for a Relax model), each kernel exported
_TVM_TUNE = r"""
import os, sys
sys.path.insert(0, {bench!r})
import tvm
from tvm import te
from tvm.s_tir import meta_schedule as ms
from autosched_workloads import all_workloads, te_kernels
w = [w for w in all_workloads() if w.name == {name!r}][0]
target = tvm.target.Target({target!r})
kernels, _, _ = te_kernels(w, te)
mod = tvm.IRModule({{f"k{{i}}": te.create_prim_func([t for _, t in k]).with_attr(
    "global_symbol", f"k{{i}}") for i, k in enumerate(kernels)}})
db = ms.tune_tir(mod, target, {work!r}, max_trials_global={trials},
                 num_trials_per_iter=max(1, min(64, {trials} // len(kernels))),
                 builder=ms.builder.LocalBuilder(timeout_sec={build_timeout}))
for i in range(len(kernels)):
    sch = ms.tir_integration.compile_tir(db, mod[f"k{{i}}"], target)
    if sch is None:
        print(f"no tuning record for kernel {{i}} of {{len(kernels)}}")
        sys.exit(3)
    tvm.compile(sch.mod, target=target).export_library(os.path.join({work!r}, f"k{{i}}.so"))
"""


def _tvm_hint(out):
    """What fixes the failures met with the PyPI wheels (apache-tvm 0.27.0.post1)."""
    if "ToJSONGraph" in out or "Segfault" in out:
        # the wheel asks for apache-tvm-ffi>=0.1.14.post0, and pip takes 0.1.15.post2,
        # which crashes in tvm.ir.save_json of any TIR function (MetaSchedule's builder
        # and database serialize every candidate); 0.1.14.post1 works
        return (" -- apache-tvm 0.27.0.post1 with apache-tvm-ffi 0.1.15 segfaults "
                "serializing TIR: pip install apache-tvm-ffi==0.1.14.post1")
    if "No module named 'xgboost'" in out:
        return (" -- MetaSchedule's cost model (XGBModel) needs xgboost: "
                "pip install xgboost-cpu")
    return ""


def _tvm_libraries_ready(w, work_dir) -> bool:
    """Whether ``work_dir`` holds the libraries a MetaSchedule tuning of ``w`` exported (one
    per kernel: ``k0.so``, ...)."""
    if not os.path.isdir(work_dir):
        return False
    try:
        from tvm import te

        from autosched_workloads import te_kernels
    except ImportError:
        return False
    kernels, _, _ = te_kernels(w, te)
    return all(os.path.exists(os.path.join(work_dir, f"k{i}.so")) for i in range(len(kernels)))


def tvm_fn(w, threads, trials, work_dir, build_timeout=600.0, reuse=False):
    """TVM MetaSchedule: tuned in a subprocess (a crash there skips the column instead of
    ending the benchmark), the library it exports loaded and timed here.  ``reuse``: the
    libraries an earlier tuning exported into ``work_dir`` (all there:
    :func:`_tvm_libraries_ready`) are timed again without tuning (``--from-logs``)."""
    try:
        import tvm  # noqa: F401
        from tvm.s_tir import meta_schedule  # noqa: F401
    except ImportError as e:
        raise Skip(f"not installed ({e})")
    if w.te is None:
        raise Skip("no TE version")
    import subprocess

    import llvmlite.binding as lb

    lb.initialize_native_target()
    target = {"kind": "llvm", "mcpu": lb.get_host_cpu_name(), "num-cores": threads}
    os.makedirs(work_dir, exist_ok=True)
    if reuse:
        return _tvm_load(w, work_dir)
    code = _TVM_TUNE.format(bench=os.path.dirname(os.path.abspath(__file__)), name=w.name,
                            target=target, work=work_dir, trials=trials,
                            build_timeout=float(build_timeout))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if r.returncode != 0:
        tail = [x for x in (r.stdout + r.stderr).splitlines()
                if x.strip() and not x.startswith("  File")][-2:]
        why = f"signal {-r.returncode}" if r.returncode < 0 else f"exit {r.returncode}"
        raise Skip(f"MetaSchedule's tuning process failed ({why}): {' | '.join(tail)[:200]}"
                   + _tvm_hint(r.stdout + r.stderr))
    return _tvm_load(w, work_dir)


def _tvm_load(w, work_dir):
    """The libraries MetaSchedule's tuning of ``w`` exported into ``work_dir``, loaded and
    checked against the reference: a function running them."""
    import tvm
    from tvm import te

    from autosched_workloads import te_kernels

    kernels, ins, outs = te_kernels(w, te)
    dev = tvm.cpu()
    # the inputs every other tool reads, in place (DLPack, no copy): a copy of its own
    # put MetaSchedule's reads elsewhere in memory than tecomp's and PyTorch's
    # (benchmarks/DECISIONS.md, "Benchmarks: MetaSchedule reads the same inputs")
    bufs = {k: tvm.runtime.from_dlpack(x) for k, x in zip(ins, w.inputs)}
    calls = []
    for i, kern in enumerate(kernels):
        for k, t in kern:
            if k not in bufs:       # an output, or a tensor from one kernel to the next
                bufs[k] = tvm.runtime.empty([int(d) for d in t.shape], t.dtype, dev)
        f = tvm.runtime.load_module(os.path.join(work_dir, f"k{i}.so"))[f"k{i}"]
        calls.append((f, [bufs[k] for k, _ in kern]))

    def run():
        for f, a in calls:
            f(*a)
    run()
    _check([bufs[k].numpy() for k in outs], w.reference(), "tvm-ms")
    return run


# ---------------------------------------------------------------------------------------
# timing


def _rounds(w, quick):
    return 3 if quick else 7


def read_histories(logs):
    """Best time against trials from JSON-lines tuning logs: ``logs`` maps a workload's
    name to its log files; the result maps it to ``{search mode: [(trial, best seconds
    so far), ...]}``, trials counted from 1.  A record is a dict with "times" (seconds
    or null), "ok", "trial" (its index in the search) and "search" ("model" or
    "random"); the candidate's time is the median of its times, as the search takes it.
    Lines that are not such records, and the search's "final" re-measurements, are
    skipped."""
    out = {}
    for name, paths in logs.items():
        per_mode = {}
        for path in paths:
            with open(path) as f:
                for line in f:
                    try:
                        rec = json.loads(line)
                        trial = int(rec["trial"])
                        times = rec.get("times") if rec.get("ok") is True else None
                        secs = float(statistics.median(times)) if times else math.inf
                    except (ValueError, KeyError, TypeError, AttributeError):
                        continue
                    mode = str(rec.get("search") or os.path.basename(path).split(".")[-2])
                    if mode == "final":
                        continue  # the finalists measured again after the search
                    per_mode.setdefault(mode, []).append((trial, secs))
        for mode, recs in per_mode.items():
            best, hist = math.inf, []
            for trial, secs in sorted(recs):
                best = min(best, secs)
                hist.append((trial + 1, best))
            out.setdefault(name, {})[mode] = hist
    return out


def to90(history):
    """Trials needed to come within 10% of the final best time: the first trial whose
    best is at most best/0.9 (the speed at least 90% of the final best's)."""
    fin = [(n, b) for n, b in history if math.isfinite(b)]
    if not fin:
        return None
    best = fin[-1][1]
    return next(n for n, b in fin if b <= best / 0.9)


def _slug(name):
    return "".join(c if c.isalnum() else "_" for c in name)


def _logs_in(log_dir, works):
    """{workload name: [its tuning logs in log_dir]} (files ``<slug>.<mode>.jsonl``)."""
    out = {}
    if not os.path.isdir(log_dir):
        return out
    for w in works:
        paths = sorted(os.path.join(log_dir, f) for f in os.listdir(log_dir)
                       if f.startswith(_slug(w.name) + ".") and f.endswith(".jsonl"))
        if paths:
            out[w.name] = paths
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--only", default="", help="workloads whose name contains this (or one of these, comma-separated)")
    p.add_argument("--quick", action="store_true", help="fewer rounds, no GEMM 2048")
    p.add_argument("--trials", type=int, default=0, help="tecomp's measured search (0: none)")
    p.add_argument("--tvm-trials", type=int, default=0, help="TVM MetaSchedule (0: none)")
    p.add_argument("--tvm-build-timeout", type=float, default=600.0,
                   help="seconds MetaSchedule's LocalBuilder may take (its own default, 30, "
                        "timed out every candidate of bmm Q.K^T on the 2-core Zen 3)")
    p.add_argument("--tvm-only", default="",
                   help="with --tvm-trials: tune TVM only on workloads whose name contains this "
                        "(several: separated by commas)")
    p.add_argument("--no-halide", action="store_true")
    p.add_argument("--log-dir", default=None, help="tuning logs (default: a temp folder)")
    p.add_argument("--plot", default=None, help="PNG of best time against trials")
    p.add_argument("--from-logs", action="store_true",
                   help="with --trials N: no search; the tuned column is the best record of "
                        "the model-guided logs already in --log-dir (to re-time a tuning); "
                        "with --tvm-trials: MetaSchedule's libraries exported there by an "
                        "earlier run are timed again, untuned (tuned where they are missing)")
    a = p.parse_args(argv)
    threads = a.threads or tc.get_num_threads()
    tc.set_num_threads(threads)
    os.environ.setdefault("HL_NUM_THREADS", str(threads))     # Halide's thread pool
    os.environ.setdefault("TVM_NUM_THREADS", str(threads))    # TVM's (set before import)
    os.environ.setdefault("TVM_THREAD_POOL_SPIN_COUNT", "2000")  # short, as in run.py
    # TVM pins its worker to a core, which never sped TVM's kernels up and was seen to
    # coincide with the other tools' kernels running up to 40% slower
    # (benchmarks/DECISIONS.md, "Benchmarks: TVM's threads unpinned")
    os.environ.setdefault("TVM_BIND_THREADS", "0")
    # (PyTorch keeps its default OpenMP spinning: OMP_WAIT_POLICY=PASSIVE, which run.py
    # sets, made its 0.08 ms batched matmul take 0.15 ms here: its best is without it)
    log_dir = a.log_dir or tempfile.mkdtemp(prefix="tecomp-tune-")
    os.makedirs(log_dir, exist_ok=True)
    print(f"machine: {machine()}; {threads} thread(s)")
    print(f"load before: {os.popen('uptime').read().strip()}")
    works = [w for w in all_workloads() if any(x in w.name for x in a.only.split(","))]
    if a.quick:
        works = [w for w in works if "2048" not in w.name]
    rows, skipped = [], {}
    for w in works:
        args = w.tecomp()
        fns, notes = {}, []
        t0 = time.perf_counter()
        s0 = auto_schedule(args)
        gen = time.perf_counter() - t0
        fns["tc a0"] = tecomp_fn(w, s0, args)
        tune_secs = None
        if a.trials and a.from_logs:
            log = os.path.join(log_dir, f"{_slug(w.name)}.model.jsonl")
            if os.path.exists(log):
                fns[f"tc {a.trials}"] = tecomp_fn(w, auto_schedule(args, log=log), args)
        for mode in (("random", "model") if a.plot else ("model",)) \
                if a.trials and not a.from_logs else ():
            log = os.path.join(log_dir, f"{_slug(w.name)}.{mode}.jsonl")
            if os.path.exists(log):
                os.remove(log)
            t0 = time.perf_counter()
            try:
                s = auto_schedule(args, trials=a.trials, log=log, search=mode, seed=0,
                                  progress=sys.stderr.isatty())
            except Skip as e:
                skipped.setdefault(f"tc {a.trials}", str(e))
                break
            secs = time.perf_counter() - t0
            if mode == "model":
                tune_secs = secs
                fns[f"tc {a.trials}"] = tecomp_fn(w, s, args)
        try:
            fns["torch"] = torch_fn(w, threads)
        except Skip as e:
            if str(e).startswith("not installed"):
                skipped.setdefault("torch", str(e))
            else:
                notes.append(f"torch skipped: {e}")
        if not a.no_halide:
            try:
                hfns, herr = halide_fns(w, threads)
                hts = interleaved(hfns, 3)
                best = min(hts, key=hts.get)
                fns["halide"] = hfns[best]
                notes.append(f"halide: {best}" + (f" ({len(herr)} autoscheduler(s) failed: "
                                                  f"{'; '.join(herr)})" if herr else ""))
            except Skip as e:
                if str(e).startswith("not installed"):
                    skipped.setdefault("halide", str(e))
                else:
                    notes.append(f"halide skipped: {e}")
        if a.tvm_trials and any(x in w.name for x in a.tvm_only.split(",")):
            try:
                wd = os.path.join(log_dir, "tvm-" + _slug(w.name))
                t0 = time.perf_counter()
                reused = a.from_logs and _tvm_libraries_ready(w, wd)
                fns["tvm-ms"] = tvm_fn(w, threads, a.tvm_trials, wd, a.tvm_build_timeout,
                                       reuse=reused)
                notes.append(f"tvm-ms re-timed from {wd}" if reused else
                             f"tvm-ms tuned in {time.perf_counter() - t0:.0f} s")
            except Skip as e:
                if str(e).startswith("not installed"):
                    skipped.setdefault("tvm-ms", str(e))
                else:
                    notes.append(f"tvm-ms skipped: {e}")
            except Exception as e:  # noqa: BLE001
                notes.append(f"tvm-ms failed: {type(e).__name__}: {str(e)[:120]}")
        med = interleaved(fns, _rounds(w, a.quick))
        rows.append((w, med, gen, tune_secs, notes))
        print(f"  done: {w.name}: " + ", ".join(f"{k} {v * 1e3:.3f} ms" for k, v in med.items()),
              file=sys.stderr, flush=True)
    print(f"load after: {os.popen('uptime').read().strip()}\n")
    _table(rows, a.trials)
    for k, v in skipped.items():
        print(f"{k} skipped: {v}")
    # best time against trials, read back from the tuning logs (also without --trials:
    # the logs already in --log-dir, e.g. of an earlier run, are plotted)
    histories = read_histories(_logs_in(log_dir, works))
    if histories:
        print("\ntrials to reach 90% of the final best speed (random / model-guided):")
        for name, h in histories.items():
            r, m = to90(h.get("random", [])), to90(h.get("model", []))
            n = max((len(v) for v in h.values()), default=0)
            print(f"  {name:40s} {r if r is not None else '-':>5} / "
                  f"{m if m is not None else '-':>5}   (of {n})")
        with open(os.path.join(log_dir, "histories.json"), "w") as f:
            json.dump(histories, f)
        print(f"logs: {log_dir}")
    if a.plot:
        if histories:
            _plot(histories, a.plot)
        else:
            print(f"--plot: no tuning logs in {log_dir} (give --trials N)")


def _table(rows, trials):
    """One table: GFLOP/s (ms) per column, then tecomp's speed over the others' (for
    trials=0, and for the tuned schedule after a slash when there is one)."""
    tuned = f"tc {trials}"
    cols = [c for c in ("tc a0", tuned, "torch", "halide", "tvm-ms")
            if any(c in med for _, med, *_ in rows)]
    others = [c for c in ("torch", "halide", "tvm-ms") if c in cols]
    nw = max([len("workload")] + [len(w.name) for w, *_ in rows])
    head = f"{'workload':{nw}s}  {'gen s':>5s}" + "".join(f"  {c:>17s}" for c in cols) + \
        "".join(f"  {'tc/' + o:>11s}" for o in others)
    print("GFLOP/s (ms), medians; tc/X: tecomp's speed over X's "
          f"(trials=0{' / tuned' if tuned in cols else ''})")
    print(head)
    print("-" * len(head))
    for w, med, gen, tune_secs, notes in rows:
        line = f"{w.name:{nw}s}  {gen:5.2f}"
        for c in cols:
            v = med.get(c)
            line += f"  {w.flops / v / 1e9:7.1f} ({v * 1e3:7.3f})" if v else f"  {'-':>17s}"
        for o in others:
            if o not in med:
                line += f"  {'-':>11s}"
                continue
            r = f"{med[o] / med['tc a0']:.2f}"
            if tuned in med:
                r += f"/{med[o] / med[tuned]:.2f}"
            line += f"  {r:>11s}"
        print(line)
    notes = [(w, tune_secs, n) for w, med, gen, tune_secs, n in rows
             if n or tune_secs or w.note]
    if notes:
        print()
    for w, tune_secs, ns in notes:
        extra = ([f"tuning {tune_secs:.0f} s"] if tune_secs else []) + ns + (
            [w.note] if w.note else [])
        print(f"  {w.name}: " + "; ".join(extra))
    sys.stdout.flush()


def _plot(histories, path):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("--plot: matplotlib is not installed (pip install matplotlib)")
        return
    n = len(histories)
    cols = min(3, n)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.4 * rows), squeeze=False)
    for ax, (name, h) in zip(axes.flat, histories.items()):
        for mode, style in (("random", "--"), ("model", "-")):
            if mode in h:
                xs = [n for n, _ in h[mode]]
                ys = [b * 1e3 if math.isfinite(b) else np.nan for _, b in h[mode]]
                n90 = to90(h[mode])
                ax.plot(xs, ys, style, label=("model-guided" if mode == "model" else mode)
                        + (f" (90% at {n90})" if n90 else ""))
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("trials")
        ax.set_ylabel("best time so far (ms)")
        ax.set_yscale("log")
        ax.legend(fontsize=8)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    print(f"plot: {path}")


if __name__ == "__main__":
    main()
