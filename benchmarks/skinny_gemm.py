"""Skinny GEMMs (LLM decoding: M <= 16 rows against a weight matrix larger than the caches), written in plain TE and auto-scheduled (trials=0), against PyTorch and the read stream.

``C[i, j] = sum_k A[i, k] * W[j, k]`` (W is N x K, the ``A @ W^T`` of a linear layer:
``--layout wt``) and ``C[i, j] = sum_k A[i, k] * W[k, j]`` (W is K x N: ``--layout w``)
for K = 4096, N = 11008 (W: 180 MB float32) and M in ``--m`` (1: a GEMV).  Each is
written as a plain compute and scheduled by ``tc.auto_schedule(args)`` with no
measurement, and through ``tecomp.nn.dense`` / ``tecomp.nn.matmul`` (auto-scheduled the
same way); the peer is PyTorch (``torch.matmul(a, w.T, out=c)`` / ``torch.matmul(a, w,
out=c)``).  Such a GEMM is bound by reading W once: the table gives W's bytes per second
and that as a share of the machine's read stream, measured in the same process on the
same W (the best of a plain-TE row sum ``S[j] = sum_k W[j, k]`` and ``torch.sum(w, 1,
out=s)``).  Interleaved in one process (medians of blocks of calls, tools in rotating
order); every result is checked against numpy first.

Each row ends with its roof on this host, as two times: the stream's (A, W and C moved
once at the read stream above) and the FMAs' (``2 * M * K * N`` FLOPs at the FMA peak:
measured here, ``tc.viz.fma_peak`` on the same threads, the best of bursts, or given by
``--peak``; where the default schedule computes more lanes than there are rows, vectors
along A's rows with lanes masked off, e.g. 16 lanes for 12 rows, its FMAs' time too, in
brackets); the roof is the larger of the two, and each tool's share of it is given.  (On
a Zen 4 core, two 256-bit FMA pipes, 115-118 GFLOP/s, 16 rows of a 180 MB W need 12.5
ms of FMAs against 6.8 ms to read W on one thread: 85% of the read stream is out of
reach there; on two threads 6.3 against about 6.0.)

``--cpu-time`` (with ``--threads 1``) times each call by the process's CPU time rather
than the wall clock: on a machine shared with other work, the time they take the core
is left out (the read stream is timed the same way).  The share of W in transparent huge
pages (2 MiB) is printed with the read stream: in 4 KiB pages the row sum and the GEMMs
ran 1.2-1.6x slower (1 thread, Zen 4, under load), and which pages an allocation gets
depends on the host's memory at that moment.  ``--knobs '{"skinny.stream": "off"}'`` adds the plain compute
scheduled with those knob values (the rest as ``auto_schedule`` chooses them) as one
more tool: an A/B of a schedule decision in the same process (given again, one more
tool for each).  ``--flip tecomp.lower.prefetch.UNROLL_FEW_LINES`` adds the plain compute
built with that module flag (a bool) negated: an A/B of a code generator decision that no
knob reaches (given again, one more tool for each).  ``--held`` (with more than one thread): the wall clock, but counting
only the calls in which every thread held its core throughout (the process's CPU time
97-103% of the threads times the call; ``common.interleaved_turns``), each tool's
calls counted shown; on a loaded machine, with a smaller W (``--n 4104``: 67 MB) so
that some calls find the cores free.

    python3 benchmarks/skinny_gemm.py [--threads 2] [--rounds 7] [--m 1,2,4,8,16] [--layout wt,w] [--knobs JSON ...] [--flip module.FLAG ...] [--cpu-time | --held] [--peak GFLOPS]
"""
from __future__ import annotations

import os
import time

from common import base_parser, huge_page_share, interleaved_turns, pin_threads, torch_or_none


def main() -> None:
    ap = base_parser(__doc__, rounds=7)
    ap.add_argument("--m", default="1,2,4,8,16", help="row counts, comma-separated")
    ap.add_argument("--layout", default="wt,w", help="wt (W is N x K), w (W is K x N)")
    ap.add_argument("--k", type=int, default=4096)
    ap.add_argument("--n", type=int, default=11008)
    ap.add_argument("--knobs", action="append", default=[],
                    help="JSON knob values: one more tool, plain TE with them (repeatable)")
    ap.add_argument("--flip", action="append", default=[],
                    help="a module flag (module.NAME, a bool): one more tool, plain TE "
                         "built with it negated (repeatable)")
    ap.add_argument("--cpu-time", action="store_true",
                    help="time calls by the process's CPU time (needs --threads 1)")
    ap.add_argument("--held", action="store_true",
                    help="count only the calls in which every thread held its core")
    ap.add_argument("--peak", type=float, default=0.0,
                    help="the FMA peak of these threads, GFLOP/s (default: measured)")
    args = ap.parse_args()
    if args.cpu_time and args.threads != 1:
        ap.error("--cpu-time times one thread's calls: use it with --threads 1")
    if args.held and (args.cpu_time or args.threads < 2):
        ap.error("--held counts calls on several threads by the wall clock: use it with "
                 "--threads 2 or more, without --cpu-time")
    pin_threads(args.threads)
    import numpy as np

    import importlib
    import json

    import tecomp as tc
    import tecomp.nn as nn
    from tecomp.strategy import Knobs, apply_rules
    from tecomp.strategy.cpu import cpu_model
    from tecomp.strategy.cpu.skinny import skinny_knobs, skinny_plan

    torch = torch_or_none(args.threads)
    K, N = args.k, args.n
    ms = [int(m) for m in args.m.split(",")]
    layouts = args.layout.split(",")
    rng = np.random.default_rng(0)
    fns, rows, wbytes, huge = {}, [], {}, {}
    for layout in layouts:
        shape = (N, K) if layout == "wt" else (K, N)
        w = tc.aligned(rng.standard_normal(shape, dtype=np.float32))
        wbytes[layout] = w.nbytes
        huge[layout] = huge_page_share(w)
        W = tc.placeholder(shape, name="W")
        # the read stream over the same array: a row sum (W's rows are contiguous)
        r = tc.reduce_axis((0, shape[1]), name="r")
        S = tc.compute((shape[0],), lambda j: tc.sum(W[j, r], axis=r), name="rowsum")
        f_s = tc.build(tc.auto_schedule([W, S]), [W, S])
        s_out = tc.empty((shape[0],), "float32")
        f_s(w, s_out)
        np.testing.assert_allclose(s_out, w.sum(1, dtype=np.float64), rtol=1e-3, atol=1e-2)
        fns[f"stream {layout}: tecomp row sum"] = lambda f=f_s, w=w, o=s_out: f(w, o)
        if torch is not None:
            tw, ts = torch.from_numpy(w), torch.from_numpy(s_out)
            fns[f"stream {layout}: torch.sum"] = lambda tw=tw, ts=ts: torch.sum(tw, 1, out=ts)
        for M in ms:
            a = tc.aligned(rng.standard_normal((M, K), dtype=np.float32))
            want = a.astype(np.float64) @ (w.T if layout == "wt" else w).astype(np.float64)
            A = tc.placeholder((M, K), name="A")
            k = tc.reduce_axis((0, K), name="k")
            if layout == "wt":
                C = tc.compute((M, N), lambda i, j: tc.sum(A[i, k] * W[j, k], axis=k), name="C")
                Cn = nn.dense(A, W)
            else:
                C = tc.compute((M, N), lambda i, j: tc.sum(A[i, k] * W[k, j], axis=k), name="C")
                Cn = nn.matmul(A, W)
            c = tc.empty((M, N), "float32")
            key = (layout, M)
            # the rows the default schedule's FMAs compute (vectors along A's rows: whole
            # vectors of lanes)
            info = cpu_model()
            plan = skinny_plan(C.op, info)
            plan = plan and skinny_knobs(plan, Knobs(), info)
            # (in the FMAs' fewer lanes where the rows fill them: fma_lanes_rows)
            width = plan and (info.fma_lanes if plan.rows_in_fma_lanes else info.lanes)
            lanes_rows = -(-M // width) * width if plan and plan.rows_in_lanes else M
            if plan and plan.rows_in_lanes and plan.k_lanes:
                # (k steps in the lanes too: whole vectors of M x q lanes, 13 rows as 14)
                q = plan.k_lanes
                lanes_rows = -(-M * q // info.lanes) * info.lanes // q
            row = {"key": key, "tools": [], "lanes_rows": lanes_rows}
            tools = [("plain TE", C, None, None), ("tecomp.nn", Cn, None, None)]
            for kn in args.knobs:
                tools.append((f"plain TE {kn}", C, json.loads(kn), None))
            for flag in args.flip:
                tools.append((f"plain TE, {flag.rsplit('.', 1)[1]} negated", C, None, flag))
            for tool, T, over, flag in tools:
                targs = [A, W, T]
                if flag:
                    mod, attr = flag.rsplit(".", 1)
                    mod = importlib.import_module(mod)
                    was = getattr(mod, attr)
                    setattr(mod, attr, not was)
                try:
                    s = (tc.auto_schedule(targs) if over is None
                         else apply_rules(targs, Knobs(over), cpu_model()))
                    f = tc.build(s, targs)
                finally:
                    if flag:
                        setattr(mod, attr, was)
                c[...] = np.nan
                f(a, w, c)
                np.testing.assert_allclose(c, want, rtol=1e-3, atol=1e-2)
                name = f"{layout} M={M}: {tool}"
                fns[name] = lambda f=f, a=a, w=w, c=c: f(a, w, c)
                row["tools"].append(name)
            if torch is not None:
                ta, tw, tcc = torch.from_numpy(a), torch.from_numpy(w), torch.from_numpy(c)
                twx = tw.t() if layout == "wt" else tw
                name = f"{layout} M={M}: torch"
                fns[name] = lambda ta=ta, twx=twx, tcc=tcc: torch.matmul(ta, twx, out=tcc)
                row["tools"].append(name)
            rows.append(row)
    counts = {}
    t = interleaved_turns(fns, args.rounds, clock=time.process_time if args.cpu_time
                          else time.perf_counter, held=args.threads if args.held else 0,
                          counts=counts)
    print(f"{tc.target.cpu_name()}, {args.threads} threads, {args.rounds} rounds, "
          f"{'CPU time' if args.cpu_time else 'wall clock'}"
          f"{' (calls with every thread on its core)' if args.held else ''}, "
          f"K={K}, N={N} float32 (W {wbytes[layouts[0]] / 1e6:.0f} MB), "
          f"tecomp auto_schedule trials=0, load {os.getloadavg()[0]:.1f}")
    if args.held:
        print("  calls counted: " + ", ".join(f"{n} {k}/{m}" for n, (k, m) in counts.items()))
    # the compute roof: the host's FMA peak on these threads (wall clock: the best of
    # bursts of calls, what the core does when it is left to run), or as given
    peak = args.peak or tc.viz.fma_peak(args.threads, calls=15, bursts=3, pause=0.2)
    print(f"  FMA peak ({args.threads} threads): {peak:.0f} GFLOP/s"
          f"{' (given)' if args.peak else ''}")
    stream = {}
    for layout in layouts:
        cands = {n: wbytes[layout] / t[n] / 1e9 for n in t if n.startswith(f"stream {layout}:")}
        stream[layout] = max(cands.values())
        print(f"  read stream ({layout}): " + ", ".join(
            f"{n.split(': ', 1)[1]} {v:.1f} GB/s" for n, v in cands.items())
            + ("" if huge[layout] is None
               else f"; W {huge[layout]:.0%} in 2 MiB pages"))
    for row in rows:
        layout, M = row["key"]
        line = f"  {'A @ W^T' if layout == 'wt' else 'A @ W  '} M={M:<3d}"
        for name in row["tools"]:
            gbs = wbytes[layout] / t[name] / 1e9
            line += (f" | {name.split(': ', 1)[1]} {t[name] * 1e3:6.2f} ms {gbs:5.1f} GB/s "
                     f"{100 * gbs / stream[layout]:3.0f}%")
        # the roof: the larger of the stream's time (A, W, C moved once) and the FMAs'
        t_mem = (wbytes[layout] + 4.0 * M * (K + args.n)) / stream[layout] / 1e9
        t_fma = 2.0 * M * K * args.n / peak / 1e9
        t_lanes = t_fma * row["lanes_rows"] / M
        roof = max(t_mem, t_fma)
        line += (f" || roof: stream {t_mem * 1e3:.2f} ms, FMAs {t_fma * 1e3:.2f} ms"
                 + (f" ({row['lanes_rows']} lanes: {t_lanes * 1e3:.2f})"
                    if row["lanes_rows"] != M else "")
                 + f" -> {roof * 1e3:.2f} ms ({'compute' if t_fma > t_mem else 'memory'}); "
                 + ", ".join(f"{name.split(': ', 1)[1]} {roof / t[name]:.0%}"
                             for name in row["tools"]))
        print(line)


if __name__ == "__main__":
    main()
