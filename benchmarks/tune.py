"""Auto-scheduling: tecomp's tc.auto_schedule against PyTorch, Halide's autoschedulers and
TVM MetaSchedule, on computes that tecomp has no hand-written schedule for (and on the
tecomp.nn ops whose templates are the auto-scheduler's starting points).

    python3 benchmarks/tune.py                       # trials=0 (analytic) for every workload
    python3 benchmarks/tune.py --trials 200          # + tecomp's measured search (model-guided)
    python3 benchmarks/tune.py --trials 200 --plot tune.png   # + random search, and the plot
    python3 benchmarks/tune.py --tvm-trials 200 --only bmm    # + TVM MetaSchedule (slow)
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
* ``tvm-ms``: TVM MetaSchedule (``tvm.s_tir.meta_schedule.tune_tir``) with ``--tvm-trials``.

Ratios are tecomp's speed over the other's (> 1: tecomp is faster).  ``--plot`` runs the
search twice per workload (random and model-guided, same trial count) and draws the best
time against trials (matplotlib), and prints how many trials each needed to come within
10% of its final best.
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


class Skip(Exception):
    pass


def _outputs(args):
    return [a for a in args if isinstance(a.op, tc.te.tensor.ComputeOp)]


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
    outs = [np.zeros([int(d.value) for d in t.shape], "float32") for t in _outputs(args)]
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
    from tecomp.nn.schedule_cpu import _cache_size

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


_TVM_TUNE = r"""
import sys, pickle
sys.path.insert(0, {bench!r})
import tvm
from tvm import te
from tvm.s_tir import meta_schedule as ms
from autosched_workloads import all_workloads
w = [w for w in all_workloads() if w.name == {name!r}][0]
target = tvm.target.Target({target!r})
mod = tvm.IRModule({{"main": te.create_prim_func(w.te(te))}})
db = ms.tune_tir(mod, target, {work!r}, max_trials_global={trials},
                 num_trials_per_iter=min(64, {trials}))
sch = ms.tir_integration.compile_tir(db, mod, target)
if sch is None:
    sys.exit(3)
tvm.compile(sch.mod, target=target).export_library({lib!r})
"""


def tvm_fn(w, threads, trials, work_dir):
    """TVM MetaSchedule: tuned in a subprocess (a crash there skips the column instead of
    ending the benchmark), the library it exports loaded and timed here."""
    try:
        import tvm
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
    lib = os.path.join(work_dir, "tuned.so")
    code = _TVM_TUNE.format(bench=os.path.dirname(os.path.abspath(__file__)), name=w.name,
                            target=target, work=work_dir, trials=trials, lib=lib)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if r.returncode != 0:
        tail = [x for x in (r.stdout + r.stderr).splitlines()
                if x.strip() and not x.startswith("  File")][-2:]
        why = f"signal {-r.returncode}" if r.returncode < 0 else f"exit {r.returncode}"
        raise Skip(f"MetaSchedule's tuning process failed ({why}): {' | '.join(tail)[:200]}")
    f = tvm.runtime.load_module(lib)["main"]
    dev = tvm.cpu()
    targs = [tvm.runtime.tensor(x, dev) for x in w.inputs]
    touts = [tvm.runtime.empty(r_.shape, "float32", dev) for r_ in w.reference()]
    f(*targs, *touts)
    _check([t.numpy() for t in touts], w.reference(), "tvm-ms")
    return lambda: f(*targs, *touts)


# ---------------------------------------------------------------------------------------
# timing


def interleaved(fns: dict, rounds: int, turn_seconds: float = 0.1) -> dict:
    """Median seconds per call of each function.  The tools take turns (the order
    rotating every round); a turn is a block of back-to-back calls lasting about
    ``turn_seconds`` (at least four), of which the first quarter is not counted: on a
    2-core VM a tool's first calls after another tool's pay for waking its own sleeping
    threads and for the other's threads still spinning (PyTorch's OpenMP workers spin
    after each call), which would otherwise be charged to whichever tool runs second."""
    names = list(fns)
    times = {n: [] for n in names}
    for n in names:       # warm up
        fns[n]()
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for n in order:
            block = []
            t_end = time.perf_counter() + turn_seconds
            while len(block) < 4 or time.perf_counter() < t_end:
                t0 = time.perf_counter()
                fns[n]()
                block.append(time.perf_counter() - t0)
            times[n].extend(block[len(block) // 4:])
    return {n: statistics.median(v) for n, v in times.items()}


def _rounds(w, quick):
    return 3 if quick else 7


def to90(history):
    """Trials needed to come within 10% of the final best time (1-based)."""
    fin = [h for h in history if math.isfinite(h)]
    if not fin:
        return None
    best = fin[-1]
    for i, h in enumerate(history):
        if h <= best / 0.9:
            return i + 1
    return None


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--only", default="", help="workloads whose name contains this")
    p.add_argument("--quick", action="store_true", help="fewer rounds, no GEMM 2048")
    p.add_argument("--trials", type=int, default=0, help="tecomp's measured search (0: none)")
    p.add_argument("--tvm-trials", type=int, default=0, help="TVM MetaSchedule (0: none)")
    p.add_argument("--no-halide", action="store_true")
    p.add_argument("--log-dir", default=None, help="tuning logs (default: a temp folder)")
    p.add_argument("--plot", default=None, help="PNG of best time against trials")
    a = p.parse_args(argv)
    threads = a.threads or tc.get_num_threads()
    tc.set_num_threads(threads)
    os.environ.setdefault("HL_NUM_THREADS", str(threads))
    # (PyTorch keeps its default OpenMP spinning: OMP_WAIT_POLICY=PASSIVE, which run.py
    # sets, made its 0.08 ms batched matmul take 0.15 ms here: its best is without it)
    log_dir = a.log_dir or tempfile.mkdtemp(prefix="tecomp-tune-")
    os.makedirs(log_dir, exist_ok=True)
    print(f"machine: {machine()}; {threads} thread(s)")
    print(f"load before: {os.popen('uptime').read().strip()}")
    works = [w for w in all_workloads() if a.only in w.name]
    if a.quick:
        works = [w for w in works if "2048" not in w.name]
    rows, histories, skipped = [], {}, {}
    for w in works:
        args = w.tecomp()
        fns, notes = {}, []
        t0 = time.perf_counter()
        s0 = tc.auto_schedule(args)
        gen = time.perf_counter() - t0
        fns["tc a0"] = tecomp_fn(w, s0, args)
        tune_secs = None
        if a.trials:
            slug = "".join(c if c.isalnum() else "_" for c in w.name)
            for mode in (("random", "model") if a.plot else ("model",)):
                log = os.path.join(log_dir, f"{slug}.{mode}.jsonl")
                if os.path.exists(log):
                    os.remove(log)
                t0 = time.perf_counter()
                s = tc.auto_schedule(args, trials=a.trials, log=log, search=mode, seed=0,
                                     progress=sys.stderr.isatty())
                secs = time.perf_counter() - t0
                histories.setdefault(w.name, {})[mode] = s.tune_result.history
                if mode == "model":
                    tune_secs = secs
                    fns[f"tc {a.trials}"] = tecomp_fn(w, s, args)
        for col, make in (("torch", lambda: torch_fn(w, threads)),):
            try:
                fns[col] = make()
            except Skip as e:
                skipped.setdefault(col, str(e))
        if not a.no_halide:
            try:
                hfns, herr = halide_fns(w, threads)
                hts = interleaved(hfns, 3)
                best = min(hts, key=hts.get)
                fns["halide"] = hfns[best]
                notes.append(f"halide: {best}" + (f" ({len(herr)} autoscheduler(s) failed: "
                                                  f"{'; '.join(herr)})" if herr else ""))
            except Skip as e:
                notes.append(f"halide skipped: {e}")
        if a.tvm_trials:
            try:
                wd = os.path.join(log_dir, "tvm-" + "".join(c if c.isalnum() else "_"
                                                           for c in w.name))
                t0 = time.perf_counter()
                fns["tvm-ms"] = tvm_fn(w, threads, a.tvm_trials, wd)
                notes.append(f"tvm-ms tuned in {time.perf_counter() - t0:.0f} s")
            except Skip as e:
                notes.append(f"tvm-ms skipped: {e}")
            except Exception as e:  # noqa: BLE001
                notes.append(f"tvm-ms failed: {type(e).__name__}: {str(e)[:120]}")
        med = interleaved(fns, _rounds(w, a.quick))
        rows.append((w, med, gen, tune_secs, notes))
        _print_row(w, med, gen, tune_secs, notes, a.trials)
    print(f"load after: {os.popen('uptime').read().strip()}")
    for k, v in skipped.items():
        print(f"{k} skipped: {v}")
    if histories:
        print("\ntrials to come within 10% of the final best (random / model-guided):")
        for name, h in histories.items():
            r, m = to90(h.get("random", [])), to90(h.get("model", []))
            print(f"  {name:40s} {r if r is not None else '-':>5} / "
                  f"{m if m is not None else '-':>5}")
        with open(os.path.join(log_dir, "histories.json"), "w") as f:
            json.dump(histories, f)
        print(f"logs: {log_dir}")
    if a.plot and histories:
        _plot(histories, a.plot, a.trials)


def _print_row(w, med, gen, tune_secs, notes, trials):
    base = med["tc a0"] if f"tc {trials}" not in med else min(med["tc a0"], med[f"tc {trials}"])
    cols = []
    for k, v in med.items():
        cols.append(f"{k} {w.flops / v / 1e9:7.1f} GF/s ({v * 1e3:.3f} ms)")
    ratios = []
    for other in ("torch", "halide", "tvm-ms"):
        if other in med:
            ratios.append(f"x{other} a0 {med[other] / med['tc a0']:.2f}" + (
                f", tuned {med[other] / med[f'tc {trials}']:.2f}" if f"tc {trials}" in med
                else ""))
    print(f"{w.name}\n    " + "\n    ".join(cols))
    print(f"    ratios (tecomp speed / other's): {'; '.join(ratios)}")
    print(f"    schedule generation {gen:.2f} s" + (f", tuning {tune_secs:.0f} s" if tune_secs
                                                     else ""))
    for n in notes:
        print(f"    {n}")
    if w.note:
        print(f"    ({w.note})")
    sys.stdout.flush()


def _plot(histories, path, trials):
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
                ys = [v * 1e3 if math.isfinite(v) else np.nan for v in h[mode]]
                ax.plot(range(1, len(ys) + 1), ys, style, label=mode)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("trials")
        ax.set_ylabel("best ms")
        ax.legend(fontsize=8)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    print(f"plot: {path}")


if __name__ == "__main__":
    main()
