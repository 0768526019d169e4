"""A batched GEMM of two symbolic extents (attention's ``q @ k^T``: ``[2, n, d] x [2, n,
d]^T``, ``n`` a ``tc.var``), auto-scheduled (trials=0) and built four ways: as before this
work (no full-tile versions, no divisions bound once), with the divisions by run-time
values bound once per loop iteration (``hoist_divisions``), with both that and the
full-tile versions of its parallel loop (``version_tiles``) as before session 13 (the
full tiles' row tails guarded unrolled copies: ``CONSTANT_FULL_TILES = False``), and the
default (the full tiles unroll only constant extents).  Prints each
variant's build time per round, its LLVM IR size (unoptimised, optimised), and the
median time of a call at several ``n``, interleaved in one process.  Every result is
checked against numpy first.

    python3 benchmarks/symbolic_tiles.py [--threads 2] [--rounds 9] [--d 64]
        [--sizes 32,77,83,128,200,384] [--builds 3]
"""
from __future__ import annotations

import importlib
import statistics
import time

from common import base_parser, pin_threads


def main() -> None:
    ap = base_parser(__doc__, rounds=9)
    ap.add_argument("--d", type=int, default=64, help="the reduction (head dimension)")
    ap.add_argument("--sizes", default="32,77,83,128,200,384")
    ap.add_argument("--builds", type=int, default=3, help="builds of each variant")
    args = ap.parse_args()
    pin_threads(args.threads)
    import numpy as np

    import tecomp as tc
    from tecomp.lower import version_tiles

    pipe = importlib.import_module("tecomp.lower.pipeline")
    full = list(pipe.CODEGEN_PASSES)
    no_hoist = [p for p in full if p[0] != "hoist_divisions"]
    # (the largest body version_tiles copies, the codegen passes, the full tiles' row
    # tails as loops)
    variants = {"before": (0, no_hoist, True), "divisions bound once": (0, full, True),
                "tails unrolled": (version_tiles.MAX_NODES, full, False),
                "both (default)": (version_tiles.MAX_NODES, full, True)}

    def kernel(d):
        n = tc.var("n", dtype="int64")
        q = tc.placeholder((2, n, d), name="q")
        k = tc.placeholder((2, n, d), name="k")
        r = tc.reduce_axis((0, d), name="r")
        s = tc.compute((2, n, n), lambda b, i, j: tc.sum(q[b, i, r] * k[b, j, r], axis=r),
                       name="s")
        return [q, k, s]

    builds = {v: [] for v in variants}
    fns, size = {}, {}
    saved = (version_tiles.MAX_NODES, list(pipe.CODEGEN_PASSES), version_tiles.CONSTANT_FULL_TILES)
    try:
        for rnd in range(args.builds):
            for name, (mx, passes, plain) in variants.items():
                version_tiles.MAX_NODES, version_tiles.CONSTANT_FULL_TILES = mx, plain
                pipe.CODEGEN_PASSES[:] = passes
                # another d each round: nothing comes from a cache
                ks = kernel(args.d + rnd)
                sch = tc.auto_schedule(ks)
                t0 = time.perf_counter()
                f = tc.build(sch, ks, target="llvm")
                builds[name].append(time.perf_counter() - t0)
                fns[name] = (f, args.d + rnd)
                size[name] = (len(f.get_source("llvm-unopt").splitlines()),
                              len(f.get_source("llvm").splitlines()))
    finally:
        version_tiles.MAX_NODES, pipe.CODEGEN_PASSES[:] = saved[0], saved[1]
        version_tiles.CONSTANT_FULL_TILES = saved[2]
    print(f"{tc.target.cpu_name()}, {args.threads} threads: 2 x n x n scores, "
          f"d = {args.d}..{args.d + args.builds - 1}")
    for name in variants:
        print(f"  {name:22s} build {', '.join(f'{b:.2f}' for b in builds[name])} s; LLVM IR "
              f"{size[name][0]} lines unoptimised, {size[name][1]} optimised")
    rng = np.random.default_rng(0)
    for n in (int(x) for x in args.sizes.split(",")):
        times = {v: [] for v in variants}
        for name, (f, d) in fns.items():
            a = rng.standard_normal((2, n, d)).astype("float32")
            b = rng.standard_normal((2, n, d)).astype("float32")
            o = np.zeros((2, n, n), "float32")
            f(a, b, o)
            np.testing.assert_allclose(o, a @ b.transpose(0, 2, 1), rtol=1e-4, atol=1e-3)
            fns[name] = (f, d, (a, b, o))
        for _ in range(args.rounds):
            for name, (f, d, arrs) in fns.items():
                t0 = time.perf_counter()
                for _ in range(20):
                    f(*arrs)
                times[name].append((time.perf_counter() - t0) / 20)
        for name in fns:
            fns[name] = fns[name][:2]
        med = {v: statistics.median(t) for v, t in times.items()}
        print(f"  n = {n:4d}: " + " | ".join(f"{v} {m * 1e6:8.1f} us" for v, m in med.items())
              + f" | before / default {med['before'] / med['both (default)']:.2f}x"
              + f" | tails unrolled / default "
              f"{med['tails unrolled'] / med['both (default)']:.2f}x")


if __name__ == "__main__":
    main()
