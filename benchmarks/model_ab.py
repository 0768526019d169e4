"""A/B of the host's machine-model entry (``tecomp.target.x86.MEASURED``): each workload
built with the host's measured entry and with the defaults (no entry), interleaved in one
process with the peers, medians; the FMA peak (``tecomp.viz.fma_peak``, the best of
the probes before and after each workload's rounds) on as many threads.

    python3 benchmarks/model_ab.py [--threads 2] [--rounds 15] [--only conv] [--cpu-time]
        [--gemm-config nr=48,mr=8] [--conv-config weight_copy=false ...]

Workloads: conv 3x3 64->64 56x56 NHWC and NCHW, conv 256x14x14 NHWC and NCHW, GEMM
2048^3 (the ``benchmarks/run.py`` workloads).  Prints GFLOP/s, each against the FMA
peak and the best peer.  ``--gemm-config`` / ``--conv-config`` (repeatable): also the GEMM
/ the convolutions with that config, in the same turns.  ``--cpu-time``: the calls timed in CPU time (with
``--threads 1`` on a loaded machine; the FMA peak stays a wall-time best).  Speed only:
not a test.
"""
from __future__ import annotations

import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from common import base_parser, pin_threads  # noqa: E402


def main() -> int:
    ap = base_parser(__doc__, 15)
    ap.add_argument("--only", default="")
    ap.add_argument("--tools", default="torch,tvm,halide")
    ap.add_argument("--gemm-config", default="",
                    help="also the GEMM with this blocking, e.g. nr=48,mr=8 "
                         "(schedule_matmul's config)")
    ap.add_argument("--conv-config", action="append", default=[],
                    help="also the convolutions with this config (repeatable), e.g. "
                         "weight_copy=false or rows_per_task=1,tasks=rows "
                         "(schedule_conv2d_nhwc / _nchw's ConvParams fields)")
    ap.add_argument("--cpu-time", action="store_true",
                    help="time CPU time (process_time) instead of wall time: on a loaded "
                         "machine, with --threads 1")
    args = ap.parse_args()
    pin_threads(args.threads)
    import numpy as np

    import tecomp as tc
    from tecomp.target import x86
    from tecomp.viz.peaks import fma_peak
    import workloads as W
    from run import interleaved, uptime

    tc.set_num_threads(args.threads)
    cpu = tc.Target("llvm").cpu
    entry = x86.MEASURED.get(cpu)
    print(f"# {W.machine()}; LLVM cpu {cpu}; {args.threads} threads; {uptime()}")
    print(f"# measured entry: {entry}")
    loads = [W.Conv(64, 56, "NHWC"), W.Conv(64, 56, "NCHW"), W.Conv(256, 14, "NHWC"),
             W.Conv(256, 14, "NCHW"), W.Gemm(2048)]
    tools = W.available_tools(args.tools.split(","))
    for wl in loads:
        if args.only and args.only not in wl.name:
            continue
        fns, ref = {}, wl.reference()
        for label, meas in (("measured", entry), ("defaults", None)):
            if meas is None:
                x86.MEASURED.pop(cpu, None)
            else:
                x86.MEASURED[cpu] = meas
            r = wl.make("tecomp", args.threads)
            r.run()
            np.testing.assert_allclose(r.output(), ref, rtol=2e-3, atol=2e-3)
            fns[f"tecomp {label}"] = r.run
        if entry is not None:
            x86.MEASURED[cpu] = entry
        if args.gemm_config and isinstance(wl, W.Gemm):
            cfg = _config(args.gemm_config)
            A = tc.placeholder((wl.n, wl.n), name="A")
            B = tc.placeholder((wl.n, wl.n), name="B")
            C = W.sc.matmul_packed(A, B, nr=cfg.get("nr"))
            g = tc.build(W.sc.schedule_matmul(C, config=cfg), [A, B, C], name="gemm")
            out = tc.empty((wl.n, wl.n), "float32")
            g(wl.a, wl.b, out)
            np.testing.assert_allclose(out.numpy() if hasattr(out, "numpy") else out, ref,
                                       rtol=2e-3, atol=2e-3)
            fns[f"tecomp {args.gemm_config}"] = lambda g=g, out=out: g(wl.a, wl.b, out)
        if isinstance(wl, W.Conv):
            for text in args.conv_config:
                r = wl.make("tecomp", args.threads, config=_config(text))
                r.run()
                np.testing.assert_allclose(r.output(), ref, rtol=2e-3, atol=2e-3)
                fns[f"tecomp {text}"] = r.run
        for t in tools:
            if t in ("tecomp", "numpy"):
                continue
            try:
                r = wl.make(t, args.threads)
                r.run()
                fns[t] = r.run
            except W.Skip:
                pass
        peak = {"g": fma_peak(args.threads)}
        med = interleaved(fns, args.rounds, clock=time.process_time if args.cpu_time else
                          time.perf_counter)
        peak["g"] = max(peak["g"], fma_peak(args.threads))
        g = {k: wl.flops / v / 1e9 for k, v in med.items()}
        best = max((v for k, v in g.items() if not k.startswith("tecomp")), default=None)
        cells = [f"{k} {v:.1f}" for k, v in g.items()]
        print(f"{wl.name}: " + ", ".join(cells) + f"; FMA peak {peak['g']:.1f}")
        for k in [k for k in g if k.startswith("tecomp")]:
            print(f"    {k}: {g[k] / peak['g']:.1%} of the FMA peak"
                  + (f", {g[k] / best:.2f}x the best peer" if best else ""))
    print(f"# {uptime()}")
    return 0


def _config(text: str) -> dict:
    """``k=v,k=v`` as a config dict: ints, ``true``/``false``, else strings."""
    out = {}
    for kv in text.split(","):
        k, v = kv.split("=")
        out[k] = int(v) if v.isdigit() else {"true": True, "false": False}.get(v.lower(), v)
    return out


if __name__ == "__main__":
    sys.exit(main())
