#!/usr/bin/env python3
"""tecomp's CPU benchmarks: one command, one table.

    python3 benchmarks/run.py                 # every workload, 2 threads (all cores)
    python3 benchmarks/run.py --quick         # fewer repetitions, no 2048^3
    python3 benchmarks/run.py --threads 1     # everything pinned to one thread
    python3 benchmarks/run.py --only gemm     # workloads whose name contains "gemm"
    python3 benchmarks/run.py --threads 1 --cpu-time   # calls timed in CPU time (loaded machine)
    python3 benchmarks/run.py --odd           # odd shapes (benchmarks/odd.py) instead

Workloads: GEMM 512^3 / 1024^3 / 2048^3 (float32), conv2d 3x3 stride 1 pad 1 (N=1,
C=K=64 at 56x56 and C=K=256 at 14x14, NCHW and NHWC), row softmax of a 4096x1024 matrix
(tecomp with ``exp`` and with ``fast_exp``).  Tools: tecomp (the tuned schedules of
``tecomp.strategy.cpu``), numpy (OpenBLAS; convolutions as im2col + GEMM), PyTorch,
TVM and Halide where installed (hand-written schedules in ``benchmarks/others.py``).

Method: every tool's kernel is built first and checked against a float64 reference;
then the tools run interleaved in one process (each round, every tool runs three calls
back to back, the first untimed; the order rotates), and the table reports medians
(``--cpu-time``: of the process's CPU time per call, with ``--threads 1``: on a loaded
machine, the time slices the call ran, not those other processes took; the FMA peak in
the GEMM lines stays a wall-time best).  Output arrays are preallocated (destination
passing) wherever the tool allows it.  The machine's load (``uptime``) is
printed before and after.  Also reported: compile times (tecomp's lowering vs LLVM, and
TVM's and Halide's for the same kernels) and the thread pool's dispatch overhead per
parallel region.
"""
from __future__ import annotations

import argparse
import os
import sys


def _parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="fewer repetitions, skip GEMM 2048")
    p.add_argument("--threads", type=int, default=0,
                   help="threads for every tool (default: all cores)")
    p.add_argument("--only", default="", help="run the workloads whose name contains this")
    p.add_argument("--tools", default="", help="comma-separated subset of tools")
    p.add_argument("--no-compile", action="store_true", help="skip the compile-time table")
    p.add_argument("--cpu-time", action="store_true",
                   help="time the calls in the process's CPU time (needs --threads 1)")
    p.add_argument("--odd", action="store_true",
                   help="odd shapes (benchmarks/odd.py: primes, batch-1 dense, strided and "
                        "dilated convs, odd channel counts) against numpy and PyTorch")
    args = p.parse_args()
    if args.cpu_time and args.threads != 1:
        p.error("--cpu-time times one thread's calls: use it with --threads 1")
    return args


ARGS = _parse() if __name__ == "__main__" else None
# OpenBLAS's idle threads spin for 2^28 cycles (~0.1 s) after every call by default;
# in one process shared by five tools that spin lands on whoever runs next.  2^20 cycles
# (well under a millisecond) is in line with the other pools' spinning.
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "20")
# PyTorch's OpenMP threads wait for each other in a spinning barrier by default; on a
# shared 2-core VM that collapses its 2-thread convolutions (measured 7 GFLOP/s against
# 42 with OMP_WAIT_POLICY=PASSIVE): give it its best configuration.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# TVM's pool spins after every parallel region before its workers sleep; with two threads
# (see below) its default spin took the other tools' cores: numpy's GEMM 512^3 ran at
# 17 GFLOP/s right after TVM's (AMD EPYC Zen 3).  Short, as every other pool here.
os.environ.setdefault("TVM_THREAD_POOL_SPIN_COUNT", "2000")
# TVM pins its workers to cores, which never sped TVM's kernels up and was seen to
# coincide with the other tools' kernels running up to 40% slower (benchmarks/DECISIONS.md,
# "Benchmarks: TVM's threads unpinned")
os.environ.setdefault("TVM_BIND_THREADS", "0")
if ARGS is not None:
    # must happen before numpy / torch / TVM / Halide start their thread pools.  Set for
    # all cores too: TVM's runtime otherwise takes half of the logical CPUs (it assumes
    # two hyperthreads per core), one thread on a 2-core VM without SMT (AMD EPYC Zen 3:
    # its GEMM 1024^3 ran at 80 GFLOP/s on "2 threads", the same as on one)
    n = str(ARGS.threads or os.cpu_count())
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                "TVM_NUM_THREADS", "HL_NUM_THREADS", "TECOMP_NUM_THREADS"):
        os.environ[var] = n

import statistics  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tecomp as tc  # noqa: E402
import workloads as W  # noqa: E402


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return "uptime unavailable: load %s" % (os.getloadavg(),)


def interleaved(fns: dict, rounds: int, warmup: int = 2, batch: int = 3,
                clock=time.perf_counter) -> dict:
    """Median seconds per call of each callable, the tools taking turns: every round,
    each tool runs ``batch`` calls back to back and the first is not timed (it absorbs
    the previous tool's still-spinning worker threads and wakes its own pool); the
    order of the tools rotates every round.  ``clock``: ``time.process_time`` counts
    the CPU time of the process instead (on a loaded machine, one thread: the time
    slices the call ran, not those other processes took)."""
    for _ in range(warmup):
        for f in fns.values():
            f()
    names = list(fns)
    times = {k: [] for k in fns}
    for r in range(rounds):
        for k in names[r % len(names):] + names[:r % len(names)]:
            f = fns[k]
            f()
            for _ in range(batch - 1):
                t0 = clock()
                f()
                times[k].append(clock() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


def fmt_row(cells, widths):
    return "  ".join(str(c).rjust(w) if i else str(c).ljust(w)
                     for i, (c, w) in enumerate(zip(cells, widths)))


def main():
    args = ARGS
    threads = args.threads or os.cpu_count()
    tc.set_num_threads(threads)
    tools = W.available_tools(args.tools.split(",") if args.tools else None)
    if args.odd:  # TVM's and Halide's schedules in others.py are for the main shapes
        tools = [t for t in tools if t in ("tecomp", "numpy", "torch")]
    print(f"tecomp benchmarks: {threads} thread(s); tools: {', '.join(tools)}"
          + ("; calls timed in CPU time" if args.cpu_time else ""))
    print(f"machine: {W.machine()}")
    print(f"load before: {uptime()}")
    if args.odd:
        import odd

        works = [w for w in odd.ODD_WORKLOADS if args.only in w.name]
    else:
        works = [w for w in W.WORKLOADS if args.only in w.name]
    if args.quick:
        works = [w for w in works if "2048" not in w.name]
    rows = []
    for w in works:
        built, notes = {}, []
        ref = w.reference()
        for tool in tools:
            try:
                fn = w.make(tool, threads)
            except W.Skip as e:
                notes.append(f"{tool}: {e}")
                continue
            except Exception as e:  # noqa: BLE001 - one tool failing must not stop the rest
                notes.append(f"{tool}: FAILED {type(e).__name__}: {str(e)[:200]}")
                continue
            if fn is None:
                continue
            try:
                err = w.check(fn, ref)
            except Exception as e:  # noqa: BLE001
                notes.append(f"{tool}: wrong result ({type(e).__name__}: {str(e)[:200]})")
                continue
            built[tool] = fn
            notes.append(f"{tool}: max rel err {err:.1e}")
        rounds = w.rounds(args.quick)
        med = interleaved({k: f.run for k, f in built.items()}, rounds,
                          clock=time.process_time if args.cpu_time else time.perf_counter)
        rows.append((w, med, notes))
        line = "  ".join(f"{k} {w.metric(v)}" for k, v in med.items())
        print(f"  {w.name:<28} {line}", flush=True)

    # ---- the table ---------------------------------------------------------------
    print()
    print(f"Results ({threads} thread(s)): {W.UNIT_NOTE}")
    hdr = ["workload"] + [t for t in tools] + ["tecomp / best other", "best other"]
    widths = [28] + [max(9, len(t)) for t in tools] + [19, 12]
    print(fmt_row(hdr, widths))
    for w, med, _ in rows:
        cells = [w.name]
        for t in tools:
            cells.append(w.metric(med[t]) if t in med else "-")
        others = {t: v for t, v in med.items() if t not in ("tecomp", "tecomp-exact")}
        if "tecomp" in med and others:
            best_t = min(others, key=others.get)
            cells.append(f"{others[best_t] / med['tecomp']:.2f}x")
            cells.append(best_t)
        else:
            cells += ["-", "-"]
        print(fmt_row(cells, widths))
    print("  (ratio = best other tool's time / tecomp's time: > 1 means tecomp is faster)")
    for w, med, notes in rows:
        if "numpy" in med and "tecomp" in med and w.kind == "gemm":
            print(f"  {w.name}: tecomp / numpy time ratio {med['numpy'] / med['tecomp']:.2f}x, "
                  f"{w.gflops(med['tecomp']) / W.peak_gflops(threads) * 100:.0f}% of the "
                  f"FMA peak measured here ({W.peak_gflops(threads):.0f} GFLOP/s)")
    fast = [med for w, med, _ in rows if w.kind == "softmax" and w.fast]
    exact = [med for w, med, _ in rows if w.kind == "softmax" and not w.fast]
    if fast and exact and "tecomp" in fast[0]:
        t = fast[0]["tecomp"]
        parts = [f"{name} {other[k] / t:.2f}x" for name, other, k in
                 (("PyTorch (exact exp)", exact[0], "torch"), ("Halide (fast exp)", fast[0], "halide"),
                  ("TVM (fast exp)", fast[0], "tvm")) if k in other]
        print("  softmax: tecomp fast-exp against " + ", ".join(parts) +
              " (time ratios, > 1: tecomp faster)")
    print("  checks: " + "; ".join(f"{w.name}: " + ", ".join(n for n in notes)
                                   for w, _, notes in rows))

    if not args.no_compile and not args.odd:
        print()
        W.compile_table(tools, threads)
    print()
    W.dispatch_table(threads)
    print()
    print(f"load after: {uptime()}")


if __name__ == "__main__":
    main()
