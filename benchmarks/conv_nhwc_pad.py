"""NHWC 3x3 convolutions with their padding inlined (``tecomp.strategy.cpu.conv2d.
NHWC_INLINE_PAD``, the default: where the taps on the padding are skipped, the block reads
the input in place) against the padded copy (the flag off), interleaved in one process,
medians, GFLOP/s (of the whole window's products, as ``benchmarks/run.py`` counts them).

    python3 benchmarks/conv_nhwc_pad.py [--threads 2] [--rounds 21] [--cpu-time] [--held]
        [--shapes 256x14,512x7,128x28,128x28s2,8x256x14]

A shape is ``CxH`` (C -> C channels, H x H, stride 1, padding 1, batch 1), with ``sS``
for stride S and an ``Nx`` prefix for batch N.  ``--cpu-time`` (with ``--threads 1``):
each call timed by the process's CPU time (a loaded machine).  ``--held`` (wall time):
count only the calls in which every thread held its core throughout (``common.
interleaved_turns``' ``held``).  Every result is checked against numpy first.  Speed
only: not a test.
"""
from __future__ import annotations

import re

from common import add_cpu_time, base_parser, clock_of, interleaved_turns, pin_threads


def _shape(text: str):
    m = re.fullmatch(r"(?:(\d+)x)?(\d+)x(\d+)(?:s(\d+))?", text)
    if m is None:
        raise SystemExit(f"--shapes: {text!r} is not [N x]C x H[sS] (e.g. 8x256x14s2)")
    n, c, h, st = m.groups()
    return int(n or 1), int(c), int(h), int(st or 1)


def main() -> None:
    ap = base_parser(__doc__, 21)
    add_cpu_time(ap)
    ap.add_argument("--shapes", default="256x14,64x56,128x28,512x7,128x28s2,8x256x14")
    ap.add_argument("--held", action="store_true")
    args = ap.parse_args()
    clock = clock_of(ap, args)
    pin_threads(args.threads)
    import os
    import numpy as np

    import tecomp as tc
    import tecomp.nn as nn
    from tecomp.strategy.cpu import conv2d as C2
    from run import uptime

    tc.set_num_threads(args.threads)
    print(f"# {args.threads} thread(s); {'CPU time' if args.cpu_time else 'wall time'}"
          f"{', held calls only' if args.held else ''}; cpu {tc.Target('llvm').cpu}; "
          f"{uptime()}")
    for text in args.shapes.split(","):
        N, C, H, S = _shape(text)
        rng = np.random.default_rng(0)
        x = rng.standard_normal((N, H, H, C)).astype("float32")
        w = rng.standard_normal((3, 3, C, C)).astype("float32")
        OH = (H + 2 - 3) // S + 1
        xp = np.pad(x.astype("float64"), ((0, 0), (1, 1), (1, 1), (0, 0)))
        ref = sum(np.einsum("nyxc,co->nyxo", xp[:, ky:ky + S * OH:S, kx:kx + S * OH:S],
                            w[ky, kx].astype("float64")) for ky in range(3) for kx in range(3))
        fns = {}
        for name, flag in (("padded", False), ("inlined", True)):
            C2.NHWC_INLINE_PAD = flag
            d = tc.placeholder((N, H, H, C), name="d")
            wt = tc.placeholder((3, 3, C, C), name="w")
            o = nn.conv2d_nhwc(d, wt, S, 1)
            f = tc.build(C2.schedule_conv2d_nhwc([o]), [d, wt, o])
            out = np.empty((N, OH, OH, C), "float32")
            f(x, w, out)
            np.testing.assert_allclose(out, ref, rtol=2e-4, atol=2e-3)
            fns[name] = (lambda f=f, out=out: f(x, w, out))
        C2.NHWC_INLINE_PAD = True
        kw = dict(clock) if clock else ({"held": args.threads} if args.held else {})
        med = interleaved_turns(fns, args.rounds, **kw)
        flops = 2 * N * C * C * 9 * OH * OH
        print(f"{text:>12}: padded {flops / med['padded'] / 1e9:6.1f}, inlined "
              f"{flops / med['inlined'] / 1e9:6.1f} GFLOP/s; inlined "
              f"{med['padded'] / med['inlined']:.3f}x", flush=True)
    print(f"# {uptime()}; load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
