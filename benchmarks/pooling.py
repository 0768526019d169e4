"""Pooling (max/avg 1-, 2- and 3-d, channels first and last, adaptive and global), auto-scheduled, against PyTorch.

Each workload is one ``tecomp.nn`` pooling operator scheduled by
``tc.auto_schedule(args)`` (trials=0: the pooling template of ``tecomp.strategy.cpu``), timed
against PyTorch's ``torch.nn.functional`` operator on the same arrays (channels-last
data as PyTorch's ``channels_last`` memory format), interleaved in one process, medians
in ms.  ``ratio`` is PyTorch's time over tecomp's (> 1: tecomp is faster).  Every result
is checked against PyTorch's first.

The memory stream.  Pooling reads its input once and writes a smaller output: it is
bound by how fast the input is read.  ``GB/s`` counts the input read once and the output
written once over tecomp's median time (timed in turns with a read kernel, PyTorch's
spinning threads out of the way), and ``%`` compares it with the memory stream of the
row, which depends on where the input lives between calls (the benchmark calls the
kernel on the same arrays again and again):

* ``DRAM``: the input does not stay in the cache (on the Zen 5, L3 32 MiB: a footprint
  near or past the L3 with the other tenants' data).  Every call reads it from DRAM,
  and the stream is the machine's read stream, ``tc.viz.host_peaks(threads)`` (a
  tecomp kernel summing 64 MiB into vector accumulators, the best of 3 calls): the
  issue's "memory stream".
* ``cache``: the input stays in the L3 between calls, and DRAM is no bound (such a
  row can run at 150% of it).  The stream is then the same read kernel run over the
  row's own input (``tc.viz.peaks.read_kernel``), in turns with the pooling: the bar
  a bandwidth-bound kernel on cached data can reach.

Which one a row is, is measured, not guessed from its size: the read kernel runs over
every row's input in turns with the pooling, and a row whose input it reads more than
``CACHED`` times as fast as the DRAM stream is a ``cache`` row.  (A copy of the array,
the former reference, writes as many bytes as it reads: from the L3 it ran at 195-234
GB/s on the Zen 5, neither the DRAM stream nor the cache's read rate.)  Each row also
gives its share of the DRAM stream.

The roof.  A read stream is not what a pooling can reach: it also writes its output,
and each line written through the cache is read first (an NCHW 3x3/2 pooling writes a
quarter of what it reads: its bytes cost in + 2 x out/4 of traffic, 1.5/1.25 times the
read's).  So each row also runs, in the same turns, :func:`tecomp.viz.peaks.move_kernel`
over its own input: the same bytes read and written (one output float per ``in/out``
input floats), contiguous, nothing computed but a max, its stores through the cache
(``move``) and past it (``moveNT``).  ``roof`` is the faster of the two (in + out bytes
over its time), ``% roof`` tecomp's rate against it: the issue's "80% of the memory
stream" for a pass that reads and writes (on the Zen 4, 1 thread: the through-the-cache
move of a 4-to-1 pass at 73% of the read stream, the streamed one at 99%).

    python3 benchmarks/pooling.py [--threads 2] [--rounds 7] [--only max2d_nchw,...] [--ab]
        [--ab SEPARABLE] [--threads 1 --cpu-time] [--threads 2 --held]

``--ab``: each row also built with the template's switches of :data:`BEFORE` (the
template before this session's changes), timed in the same turns ("before", and the
speed-up over it); ``--ab NAME[,NAME...]``: only those switches off (their values in
:data:`BEFORE`, else False: ``--ab SEPARABLE`` the windows in one step, as before
2026-12-02's session 24; a switch of ``tecomp.lower.schedule_ops`` too: ``--ab
SEED_FIRST_TAP`` max pooling's windows from the identity, not their first tap; and of
``tecomp.codegen.llvm.emit_memory`` and ``emit_expr``: ``--ab FLAT_FUSED_OFFSETS``,
``--ab FILL_MASKED_LOADS``).
``--cpu-time`` (one thread): each call timed by the process's CPU
time, which leaves out the time other processes run on a loaded machine.  ``--held``
(wall time, more threads): count only the calls in which every thread held its core
throughout (``common.interleaved_turns``' ``held``; a row none of whose calls did prints
``nan``).
"""
from __future__ import annotations

import time

from common import base_parser, interleaved_turns, pin_threads, torch_or_none


#: a row whose input is read again (the read kernel, in turns with the pooling) this many
#: times faster than the DRAM stream stays in the cache between calls
CACHED = 1.5
#: ``--ab``: the switches of ``tecomp.strategy.cpu.pool`` that give its template of the
#: morning of 2026-11-30 (each row strided along the data, one half vector's sums a
#: global row, max pooling's rows in the output, a global plane by rows, short padded
#: rows with their tests and gathers), and channels last 4 vectors a step (as before
#: 2026-12-01's ``WHOLE_PIXELS``)
BEFORE = {"ROWS_THEN_WINDOWS": False, "HALF_VECTOR_ROWS": True, "MAX_IN_A_LOCAL": False,
          "WHOLE_PLANES": False, "SHORT_ROW_VECTORS": 0, "WHOLE_PIXELS": False,
          "SEPARABLE": False}


def workloads(nn):
    """name -> (input shape, layout, tecomp operator(X), torch function(x, channels_last))."""
    def F():
        import torch.nn.functional as F   # (lazy: torch is imported after pin_threads)
        return F

    return {
        "max2d_nchw 3x3/2 p1": ((8, 64, 112, 112), "NCHW",
                                lambda X: nn.max_pool2d(X, 3, 2, 1),
                                lambda x: F().max_pool2d(x, 3, 2, 1)),
        "max2d_nchw 3x3/2 p1 b1": ((1, 64, 112, 112), "NCHW",   # (from the cache)
                                   lambda X: nn.max_pool2d(X, 3, 2, 1),
                                   lambda x: F().max_pool2d(x, 3, 2, 1)),
        "max2d_nhwc 3x3/2 p1": ((8, 64, 112, 112), "NHWC",
                                lambda X: nn.max_pool2d(X, 3, 2, 1, layout="NHWC"),
                                lambda x: F().max_pool2d(x, 3, 2, 1)),
        "avg2d_nchw 3x3/1 p1": ((8, 64, 56, 56), "NCHW",
                                lambda X: nn.avg_pool2d(X, 3, 1, 1),
                                lambda x: F().avg_pool2d(x, 3, 1, 1)),
        "avg2d_nhwc 2x2/2": ((8, 256, 56, 56), "NHWC",
                             lambda X: nn.avg_pool2d(X, 2, layout="NHWC"),
                             lambda x: F().avg_pool2d(x, 2)),
        "max1d_ncw 3/2 p1": ((8, 256, 2048), "NCW",
                             lambda X: nn.max_pool1d(X, 3, 2, 1),
                             lambda x: F().max_pool1d(x, 3, 2, 1)),
        "avg1d_ncw 4/4": ((8, 256, 2048), "NCW",
                          lambda X: nn.avg_pool1d(X, 4),
                          lambda x: F().avg_pool1d(x, 4)),
        "max3d_ncdhw 3^3/2 p1": ((2, 32, 32, 56, 56), "NCDHW",
                                 lambda X: nn.max_pool3d(X, 3, 2, 1),
                                 lambda x: F().max_pool3d(x, 3, 2, 1)),
        "avg3d_ndhwc 2^3/2": ((2, 64, 32, 56, 56), "NDHWC",
                              lambda X: nn.avg_pool3d(X, 2, layout="NDHWC"),
                              lambda x: F().avg_pool3d(x, 2)),
        "global_avg_nchw 7x7": ((32, 2048, 7, 7), "NCHW",
                                lambda X: nn.global_avg_pool2d(X),
                                lambda x: F().adaptive_avg_pool2d(x, 1)),
        "global_avg_nchw 56x56": ((8, 256, 56, 56), "NCHW",
                                  lambda X: nn.global_avg_pool2d(X),
                                  lambda x: F().adaptive_avg_pool2d(x, 1)),
        "global_avg_nhwc 7x7": ((32, 2048, 7, 7), "NHWC",
                                lambda X: nn.global_avg_pool2d(X, layout="NHWC"),
                                lambda x: F().adaptive_avg_pool2d(x, 1)),
        "adaptive_avg_nchw 56->7": ((8, 256, 56, 56), "NCHW",
                                    lambda X: nn.adaptive_avg_pool2d(X, 7),
                                    lambda x: F().adaptive_avg_pool2d(x, 7)),
        "adaptive_max_nchw 50->7": ((8, 256, 50, 50), "NCHW",
                                    lambda X: nn.adaptive_max_pool2d(X, 7),
                                    lambda x: F().adaptive_max_pool2d(x, 7)),
    }


def channels_last(layout: str) -> bool:
    return layout[1] != "C"


def main() -> None:
    ap = base_parser(__doc__, rounds=7)
    ap.add_argument("--only", default="", help="comma-separated workload names (a prefix "
                    "each); default: all")
    ap.add_argument("--ab", nargs="?", const="", default=None, metavar="NAMES",
                    help="also time each row built with the switches of BEFORE (the "
                    "template of 2026-11-30 morning), or only the comma-separated switches "
                    "named, off")
    ap.add_argument("--cpu-time", action="store_true",
                    help="time by the process's CPU time (with --threads 1)")
    ap.add_argument("--held", action="store_true",
                    help="(wall time) count only the calls in which every thread held "
                    "its core throughout")
    args = ap.parse_args()
    if args.cpu_time and args.threads != 1:
        ap.error("--cpu-time times one thread's calls: use it with --threads 1")
    if args.cpu_time and args.held:
        ap.error("--held counts wall-time calls: use it without --cpu-time")
    clock = ({"clock": time.process_time} if args.cpu_time
             else {"held": args.threads} if args.held else {})
    pin_threads(args.threads)
    import numpy as np

    import tecomp as tc
    from tecomp import nn
    from tecomp.lower import schedule_ops
    from tecomp.codegen.llvm import emit_expr, emit_memory
    from tecomp.strategy.cpu import pool as pool_template
    from tecomp.viz.peaks import move_kernel, read_kernel

    torch = torch_or_none(args.threads)
    if torch is None:
        return
    rng = np.random.default_rng(0)
    info = tc.target.cpu_model()
    l3, V = (info.l3_bytes or 0) >> 20, 4 * info.lanes
    _, dram = tc.viz.host_peaks(args.threads)
    print(f"{tc.target.cpu_name()}, {args.threads} threads, {args.rounds} rounds, float32; "
          f"L3 {l3} MiB, DRAM read stream {dram:.1f} GB/s")
    if args.ab is not None:
        names = [n for n in args.ab.split(",") if n]
        mods = (pool_template, schedule_ops, emit_memory, emit_expr)
        unknown = [n for n in names if not any(hasattr(m, n) for m in mods)]
        if unknown:
            ap.error(f"--ab: no switch {unknown[0]!r} in tecomp.strategy.cpu.pool, "
                     "tecomp.lower.schedule_ops or tecomp.codegen.llvm.emit_memory / "
                     "emit_expr")
        off = {n: BEFORE.get(n, False) for n in names} if names else dict(BEFORE)
        owner = {n: next(m for m in mods if hasattr(m, n)) for n in off}
    picked = [p for p in args.only.split(",") if p]
    for name, (shape, layout, op, tfn) in workloads(nn).items():
        if picked and not any(name.startswith(p) for p in picked):
            continue
        x = rng.standard_normal(shape).astype("float32")
        tx = torch.from_numpy(x)
        if channels_last(layout):   # the same values, stored channels last
            perm = (0,) + tuple(range(2, len(shape))) + (1,)
            xl = tc.aligned(np.ascontiguousarray(x.transpose(perm)))
            tx = tx.contiguous(memory_format=torch.channels_last if len(shape) == 4
                               else torch.channels_last_3d) if len(shape) > 3 else tx
        else:
            perm, xl = None, tc.aligned(x)
        X = tc.placeholder(xl.shape, name="X")
        Y = op(X)
        f = tc.build(tc.auto_schedule([X, Y]), [X, Y])
        out = tc.empty(tuple(int(e.value) for e in Y.shape), "float32")
        want = tfn(tx)
        fns = {"tecomp": lambda: f(xl, out), "torch": lambda: tfn(tx)}
        if args.ab is not None:
            now = {k: getattr(owner[k], k) for k in off}
            try:
                for k, v in off.items():
                    setattr(owner[k], k, v)
                fb = tc.build(tc.auto_schedule([X, Y]), [X, Y])
            finally:
                for k, v in now.items():
                    setattr(owner[k], k, v)
            fns["before"] = lambda: fb(xl, out)
        for fn in fns.values():
            if fn is fns["torch"]:
                continue
            fn()
            got = out if perm is None else out.transpose(np.argsort(perm))
            np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-5)
        inout = xl.nbytes + out.nbytes
        # the read kernel over this input (its first P * per elements), in turns with
        # the pooling: as fast as the DRAM stream (x CACHED) where the input does not
        # stay in the cache between calls
        per = xl.size // args.threads // V * V
        rows = xl.reshape(-1)[:args.threads * per].reshape(args.threads, per)
        acc = tc.empty((args.threads, 1, V), "float32")
        read = read_kernel(args.threads, per)
        probes = {"tecomp": lambda: f(xl, out), "read": lambda: read(rows, acc)}
        # the roof: the same bytes read and written, contiguous, stores through the cache
        # and past it (the pass's own in + out bytes over the faster one's time)
        ratio = max(1, round(xl.size / out.size))
        for nt in (False, True):
            g, xs, ys = move_kernel(args.threads, xl.size, ratio, streamed=nt)
            mx = xl.reshape(-1)[:int(np.prod(xs))].reshape(xs)
            my = tc.empty(ys, "float32")
            probes["moveNT" if nt else "move"] = lambda g=g, mx=mx, my=my: g(mx, my)
        m = interleaved_turns(probes, args.rounds, **clock)
        again = rows.nbytes / m["read"] / 1e9
        where, stream = ("cache", again) if again > CACHED * dram else ("DRAM", dram)
        moved = mx.nbytes + my.nbytes   # (both moves the same bytes)
        roof = max(moved / m["move"], moved / m["moveNT"]) / 1e9
        t = interleaved_turns(fns, args.rounds, **clock)
        alone = m["tecomp"]
        gbs = inout / alone / 1e9
        print(f"  {name:26s} {'x'.join(map(str, xl.shape)):>16s}  tecomp {t['tecomp'] * 1e3:7.3f}"
              f" ms | torch {t['torch'] * 1e3:7.3f} ms | ratio {t['torch'] / t['tecomp']:5.2f}x"
              f" | {alone * 1e3:7.3f} ms {gbs:6.1f} GB/s ({100 * gbs / stream:4.0f}% of the "
              f"{where:5s} stream {stream:5.1f}; {100 * gbs / dram:4.0f}% of DRAM's)"
              f" | roof {roof:5.1f} GB/s (move {moved / m['move'] / 1e9:5.1f}, NT "
              f"{moved / m['moveNT'] / 1e9:5.1f}): {100 * gbs / roof:4.0f}% roof"
              + (f" | before {t['before'] * 1e3:7.3f} ms ({t['before'] / t['tecomp']:4.2f}x)"
                 if args.ab is not None else ""))

if __name__ == "__main__":
    main()
