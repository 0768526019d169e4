"""The LLVM worker's CPU over build_time.py's kernels: by step, by LLVM pass, and a variant
of its settings against them, with the machine code compared.

The IR modules that ``tc.build`` sends to the LLVM worker for the 94 builds of
``benchmarks/build_time.py`` (the TE corpus for the host and ``-mcpu=haswell``, GEMMs,
convolutions, pooling) are collected once (built in this process, the worker doing its
usual work), then replayed in this process with the worker's own code
(:func:`tecomp.codegen.llvm.optproc.compile_module`: parse, verify, the O3 pipeline, the
bitcode, the machine code) on a TargetMachine made as the worker makes it.  The figure is
each step's thread CPU summed over the modules, medians over the rounds.

    python3 benchmarks/llvm_time.py [--rounds 3] [--passes] [--codegen-opt N] [--set=-OPT=VAL --reset=-OPT=DEFAULT ...]

``--passes``: LLVM's own pass timers, in a round of their own after the others (side A),
summed by pass name over the modules: the O3 pipeline's (its PassBuilder's) and the code
generator's (LLVM's legacy timers, ``-time-passes``).

``--codegen-opt N`` (the code generator's optimisation level, llvmlite's
``create_target_machine(opt=N)``; the worker's is 3) and ``--set`` (LLVM command-line
options, llvmlite's ``set_option``, in force for side B only: each ``--reset`` gives the
value side A runs with, normally the option's default) make a side B, replayed beside
the default (side A) module by module, the order alternating; each module's object code
is compared, and the modules whose machine code differs are listed.  Under load compare
the sides of one run only.
"""
from __future__ import annotations

import argparse
import collections
import hashlib
import os
import re
import statistics
import warnings

STEPS = ("parse", "verify", "optimize", "bitcode", "codegen")


def collect():
    """``[(ir_text, explicit)]``: the modules the worker gets for build_time.py's list
    (each distinct text once, in order)."""
    import build_time

    import tecomp as tc
    from tecomp.codegen.llvm import jit

    got, seen = [], set()
    orig = jit._optimize_in_worker

    def spy(ir_text, explicit, triple=""):
        if not triple and (ir_text, explicit) not in seen:
            seen.add((ir_text, explicit))
            got.append((ir_text, bool(explicit)))
        return orig(ir_text, explicit, triple)

    jit._optimize_in_worker = spy
    try:
        for j in build_time._jobs():
            s, args, tg = j()
            tc.build(s, args, target=tg, name="k")
    finally:
        jit._optimize_in_worker = orig
    return got


def pass_table(reports, top: int) -> list:
    """``[(seconds, pass name)]`` of LLVM timing reports, summed by pass name (user time;
    the code generator's ``Name #n`` per run folded into ``Name``), largest first."""
    acc = collections.Counter()
    for rep in reports:
        for line in rep.splitlines():
            times = re.findall(r"([\d.]+) \(\s*[\d.]+%\)", line)
            if not times:
                continue
            name = re.sub(r" #\d+$", "", re.split(r"[\d.]+ \(\s*[\d.]+%\)", line)[-1].strip())
            if name and name != "Total":
                acc[name] += float(times[0])
    return [(v, k) for k, v in acc.most_common(top)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--passes", action="store_true", help="LLVM's pass timers, by pass")
    ap.add_argument("--top", type=int, default=20, help="passes listed (--passes)")
    ap.add_argument("--limit", type=int, default=None, help="only the first N modules")
    ap.add_argument("--codegen-opt", type=int, choices=(0, 1, 2, 3), default=None,
                    help="side B: the code generator's optimisation level")
    ap.add_argument("--set", action="append", default=[], metavar="-OPT=VAL",
                    help="side B: an LLVM command-line option (repeatable)")
    ap.add_argument("--reset", action="append", default=[], metavar="-OPT=VAL",
                    help="side A: the value of an option --set changes (repeatable)")
    args = ap.parse_args()
    if bool(args.set) != bool(args.reset):
        ap.error("--set needs --reset (the value side A runs with), and the other way round")
    warnings.simplefilter("ignore")
    import llvmlite.binding as llvm

    from tecomp.codegen.llvm import jit, optproc

    mods = collect()[:args.limit]
    h = jit.host()
    tm_a = optproc.target_machine(h.triple, h.cpu, h.features)
    sides = {"A": tm_a}
    if args.codegen_opt is not None or args.set:
        sides["B"] = optproc.target_machine(h.triple, h.cpu, h.features,
                                            3 if args.codegen_opt is None else args.codegen_opt)
    layout = str(tm_a.target_data)
    print(f"{len(mods)} modules, {sum(len(t) for t, _ in mods) / 2**20:.1f} MiB of IR text "
          f"({sum(e for _, e in mods)} explicit); sides: {', '.join(sides)}", flush=True)
    got = {s: [] for s in sides}
    differ = set()
    for r in range(args.rounds):
        times = {s: {} for s in sides}
        for i, (text, explicit) in enumerate(mods):
            digest = {}
            for s in (list(sides) if (i + r) % 2 == 0 else list(sides)[::-1]):
                for o in (args.set if s == "B" else args.reset):
                    llvm.set_option("llvm_time", o)
                _, obj = optproc.compile_module(text, h.triple, layout, sides[s], explicit,
                                                times[s])
                digest[s] = hashlib.sha1(obj).digest()
            for o in args.reset:
                llvm.set_option("llvm_time", o)
            if len(set(digest.values())) > 1:
                differ.add(i)
        for s in sides:
            got[s].append(times[s])
            print(f"round {r} {s}: " + ", ".join(f"{k} {times[s].get(k, 0.0):.2f}" for k in STEPS)
                  + f" s; total {sum(times[s].values()):.2f} s (load {os.getloadavg()[0]:.1f})",
                  flush=True)
    for s in sides:
        med = {k: statistics.median(t.get(k, 0.0) for t in got[s]) for k in STEPS}
        tot = statistics.median(sum(t.values()) for t in got[s])
        print(f"{s}: total median {tot:.2f} s; " + ", ".join(
            f"{k} {med[k]:.2f} s ({med[k] / tot:.0%})" for k in STEPS))
    if "B" in sides:
        pairs = list(zip(got["A"], got["B"]))
        ratios = [sum(b.values()) / sum(a.values()) for a, b in pairs]
        step = {k: statistics.median(b[k] / a[k] for a, b in pairs)
                for k in ("optimize", "codegen")}
        print(f"B/A by round: {', '.join(f'{x:.3f}' for x in ratios)}; median "
              f"{statistics.median(ratios):.3f}; optimize {step['optimize']:.3f}, "
              f"codegen {step['codegen']:.3f}")
        print(f"machine code differs in {len(differ)} of {len(mods)} modules")
    if args.passes:
        # a round of its own, side A only: the timers slow what they time
        reports: list = []
        for text, explicit in mods:
            optproc.compile_module(text, h.triple, layout, tm_a, explicit, None, reports)
        # the code generator's alone: LLVM's legacy timers (which end the pipeline's
        # timing turns off, and which would time the pipeline too) over modules
        # optimised beforehand
        done = []
        for text, explicit in mods:
            m = llvm.parse_assembly(text)
            m.triple, m.data_layout = h.triple, layout
            optproc.run_pipeline(m, tm_a, explicit)
            done.append(m)
        llvm.set_option("llvm_time", "-time-passes")
        llvm.set_time_passes(True)
        for m in done:
            tm_a.emit_object(m)
        cg_report = llvm.report_and_reset_timings()
        llvm.set_time_passes(False)
        med = {k: statistics.median(t.get(k, 0.0) for t in got["A"]) for k in STEPS}
        for title, reps, step in (("the O3 pipeline", reports, "optimize"),
                                  ("the code generator", [cg_report], "codegen")):
            total = sum(v for v, _ in pass_table(reps, 10**6)) or 1.0
            print(f"LLVM's timers, {title} (side A; shares of the timers' sum, seconds as "
                  f"those shares of the step's median {med[step]:.2f} s):")
            for v, name in pass_table(reps, args.top):
                print(f"  {v / total * med[step]:7.3f} s {v / total:5.1%}  {name}")


if __name__ == "__main__":
    main()
