"""tecomp's own compile time: the CPU ``tc.build`` takes over a fixed list of kernels.

The list (94 builds): the TE corpus (:mod:`tecomp.testing.te_corpus`, bfloat16 cases
left out) under ``tc.auto_schedule`` for the host and for ``-mcpu=haswell``, GEMMs of
three shapes packed and not, three convolutions NCHW and NHWC, a max and an average
pooling.  Each round schedules and builds every kernel again; the figure is the thread
CPU time of the ``tc.build`` calls (lowering, code generation, printing the IR, linking;
the LLVM worker process's O3 and code generation, which runs while this thread waits,
is reported apart from ``/proc``).  Medians over the rounds after the first (a warm-up).

    python3 benchmarks/build_time.py [--rounds 5] [--ab [FLAG,...]] [--passes]

``--ab`` builds the list again in each round with the switches of :data:`AB_SWITCHES`
off ("before"), the two sides taking turns (which goes first alternates by round);
``--ab WALK_ONCE``: only that one.  Under load, CPU time moves less than wall time, but
still moves: compare sides of the same run only.  ``--passes`` also gives each lowering
pass's CPU (the passes of ``tecomp.lower.pipeline``), side by side: a change to one pass
shows there first, where the whole build's figure is within the load's noise.
"""
from __future__ import annotations

import argparse
import importlib
import os
import statistics
import time
import warnings

#: (module, flag): what ``--ab`` turns off for its "before" builds
AB_SWITCHES = (("tecomp.lower.loop_partition", "WALK_ONCE"),)


def _jobs():
    import tecomp as tc
    from tecomp.nn import ops
    from tecomp.strategy import cpu as sc
    from tecomp.testing import te_corpus

    jobs = []
    for n in te_corpus.names():
        if "bfloat16" in n:
            continue
        for tg in ("llvm", "llvm -mcpu=haswell"):
            jobs.append(lambda n=n, tg=tg: (lambda c: (tc.auto_schedule(c.args, target=tg),
                                                       c.args, tg))(te_corpus.make(n)))

    def gemm(M, N, K, packed):
        A = tc.placeholder((M, K), name="A")
        B = tc.placeholder((K, N), name="B")
        C = sc.matmul_packed(A, B) if packed else ops.matmul(A, B)
        return sc.schedule_matmul(C), [A, B, C], "llvm"

    def conv(N, C, H, W, O, R, st, p, nhwc):
        if nhwc:
            d = tc.placeholder((N, H, W, C), name="data")
            w = tc.placeholder((R, R, C, O), name="weight")
            o = ops.conv2d_nhwc(d, w, stride=st, padding=p)
            return sc.schedule_conv2d_nhwc(o), [d, w, o], "llvm"
        d = tc.placeholder((N, C, H, W), name="data")
        w = tc.placeholder((O, C, R, R), name="weight")
        o = ops.conv2d_nchw(d, w, stride=st, padding=p)
        return sc.schedule_conv2d_nchw(o), [d, w, o], "llvm"

    def pool(kind):
        d = tc.placeholder((1, 64, 56, 56), name="data")
        o = (ops.max_pool2d if kind == "max" else ops.avg_pool2d)(d, 3, stride=2, padding=1)
        return sc.schedule_pool(o), [d, o], "llvm"

    for s in [(64, 64, 64), (127, 509, 257), (37, 53, 29)]:
        for p in (False, True):
            jobs.append(lambda s=s, p=p: gemm(*s, p))
    for cs in [(1, 16, 14, 14, 32, 3, 1, 1), (2, 3, 17, 13, 8, 3, 2, 1),
               (1, 64, 28, 28, 64, 1, 1, 0)]:
        for nh in (False, True):
            jobs.append(lambda cs=cs, nh=nh: conv(*cs, nh))
    jobs += [lambda: pool("max"), lambda: pool("avg")]
    return jobs


def _worker_cpu() -> float:
    """CPU seconds of the LLVM worker processes so far (0 where /proc has none)."""
    from tecomp.codegen.llvm import jit

    total = 0.0
    for w in list(jit._WORKERS.values()):
        try:
            with open(f"/proc/{w.pid}/stat") as f:
                st = f.read().rsplit(")", 1)[1].split()
            total += (int(st[11]) + int(st[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            pass
    return total


#: pass name -> thread CPU seconds so far (``--passes``)
PASS_CPU: dict = {}


def _time_passes() -> None:
    """Wrap each pass of the lowering pipelines to add its thread CPU to :data:`PASS_CPU`."""
    from tecomp.lower import pipeline

    for table in (pipeline.PASSES, pipeline.CODEGEN_PASSES):
        for i, (name, fn, machine) in enumerate(table):
            def timed(func, fn=fn, name=name):
                t0 = time.thread_time()
                try:
                    return fn(func)
                finally:
                    PASS_CPU[name] = PASS_CPU.get(name, 0.0) + time.thread_time() - t0
            table[i] = (name, timed, machine)


def _round(tc, jobs) -> tuple:
    """(schedule CPU, build CPU, worker CPU, pass CPU) of one pass over ``jobs``."""
    t_sched = t_build = 0.0
    PASS_CPU.clear()
    w0 = _worker_cpu()
    for j in jobs:
        t0 = time.thread_time()
        s, args, tg = j()
        t1 = time.thread_time()
        tc.build(s, args, target=tg, name="k")
        t_build += time.thread_time() - t1
        t_sched += t1 - t0
    return t_sched, t_build, _worker_cpu() - w0, dict(PASS_CPU)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--ab", nargs="?", const="", default=None,
                    help="also build with the switches off (a comma list: only those)")
    ap.add_argument("--passes", action="store_true", help="also each lowering pass's CPU")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    import tecomp as tc

    only = None if not args.ab else set(args.ab.split(","))
    mods = [(importlib.import_module(m), f) for m, f in AB_SWITCHES
            if only is None or f in only]
    sides = ["after"] if args.ab is None else ["after", "before"]
    jobs = _jobs()
    if args.passes:
        _time_passes()
    got = {s: [] for s in sides}
    for r in range(args.rounds + 1):
        order = sides if r % 2 == 0 else sides[::-1]
        for side in order:
            for m, f in mods:
                setattr(m, f, side == "after")
            res = _round(tc, jobs)
            if r:
                got[side].append(res)
            print(f"round {r} {side}: schedule {res[0]:.2f} s, build {res[1]:.2f} s, "
                  f"LLVM worker {res[2]:.2f} s (load {os.getloadavg()[0]:.1f})", flush=True)
    for m, f in mods:
        setattr(m, f, True)
    for side in sides:
        b = [x[1] for x in got[side]]
        print(f"{side}: {len(jobs)} builds, tc.build CPU median {statistics.median(b):.2f} s "
              f"({', '.join(f'{x:.2f}' for x in b)}), LLVM worker median "
              f"{statistics.median(x[2] for x in got[side]):.2f} s")
    if args.passes:
        names = sorted(got[sides[0]][0][3], key=lambda n: -got[sides[0]][0][3][n])
        for n in names:
            med = [statistics.median(x[3].get(n, 0.0) for x in got[side]) for side in sides]
            print(f"  pass {n}: " + ", ".join(f"{side} {m:.3f} s" for side, m in zip(sides, med)))
    if len(sides) == 2:
        ratios = [a[1] / b[1] for a, b in zip(got["after"], got["before"])]
        print(f"after/before by round: {', '.join(f'{x:.3f}' for x in ratios)}; median "
              f"{statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
