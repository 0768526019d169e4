"""Small operators in plain TE (``tecomp.testing.te_corpus``): the default schedule against the trivial one.

Each operator of the corpus (elementwise chains with broadcasts, transposes, gathers,
slices, padding, cumulative sums, reductions on odd shapes, tiny shapes, outer products,
depthwise and causal convolutions, a resize, masks; int32, int64, float16, bfloat16) is
built twice: ``tc.auto_schedule(args)`` (trials=0) and
:func:`tecomp.strategy.trivial.trivial_schedule` (outer axes parallel, the innermost
vectorized).  Both are checked against numpy, then timed in interleaved turns, the two
of one operator back to back, on the same 64-byte aligned arrays; medians in
microseconds, and the trivial schedule's time over the default's (> 1: the default is
faster); "the same loops" where the two lower to the same IR.

    python3 benchmarks/te_corpus.py [--threads 2] [--rounds 9] [--only NAME,...]
        [--threads 1 --cpu-time] [--repeat 2]

``--repeat N`` times each operator's pair N times (separate series of turns) and prints
every ratio, so that a row can be told from the noise; ``--only`` takes case names
(``tecomp.testing.te_corpus.names()``).
"""
from __future__ import annotations

import os

from common import add_cpu_time, base_parser, clock_of, interleaved_turns, pin_threads


def main() -> None:
    ap = base_parser(__doc__, rounds=9)
    ap.add_argument("--only", default=None, metavar="NAME,...",
                    help="only these cases of tecomp.testing.te_corpus")
    ap.add_argument("--repeat", type=int, default=1,
                    help="time each pair this many times (separate series)")
    add_cpu_time(ap)
    args = ap.parse_args()
    clock = clock_of(ap, args)
    pin_threads(args.threads)
    import numpy as np

    import tecomp as tc
    from tecomp.strategy.trivial import trivial_schedule
    from tecomp.testing import te_corpus

    names = te_corpus.names()
    if args.only:
        wanted = args.only.split(",")
        unknown = [n for n in wanted if n not in names]
        if unknown:
            ap.error(f"--only: no case {', '.join(unknown)} (cases: {', '.join(names)})")
        names = wanted
    print(f"{os.uname().machine}, {args.threads} threads, {args.rounds} rounds, "
          f"tecomp auto_schedule trials=0 against the trivial schedule "
          f"({'CPU' if args.cpu_time else 'wall'} time, medians)")
    print(f"  {'case':32s} {'default us':>11s} {'trivial us':>11s}  trivial/default")
    for name in names:
        c = te_corpus.make(name)
        fns, irs = {}, []
        # (every array on a 64-byte line: the two schedules read and write the same ones)
        inputs = [tc.aligned(a) for a in c.inputs]
        o = tc.aligned(c.empty_output())
        for kind, s in (("default", tc.auto_schedule(c.args)),
                        ("trivial", trivial_schedule(c.args))):
            irs.append(str(tc.lower(s, c.args)))
            f = tc.build(s, c.args)
            o[...] = 0
            f(*inputs, o)
            np.testing.assert_allclose(o.astype(np.float64), c.want, rtol=c.rtol,
                                       atol=c.atol, err_msg=f"{name}, {kind} schedule")
            fns[kind] = (lambda f=f: f(*inputs, o))
        ratios, last = [], None
        for _ in range(args.repeat):
            last = interleaved_turns(fns, args.rounds, turn_seconds=0.05, **clock)
            ratios.append(last["trivial"] / last["default"])
        print(f"  {name:32s} {last['default'] * 1e6:11.1f} {last['trivial'] * 1e6:11.1f}  "
              + " ".join(f"{r:.2f}x" for r in ratios)
              + ("  (the same loops)" if irs[0] == irs[1] else ""), flush=True)


if __name__ == "__main__":
    main()
