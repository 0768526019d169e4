"""Memory over many builds in one process.

    python -m tecomp.testing.resources --builds 1000

builds ``--builds`` kernels (a rotation of differently shaped and scheduled programs; every
module is called once, then dropped), and prints the resident set size after a warm-up
and at the end, and the growth per build; then the same for the LLVM optimiser worker
process (see :mod:`tecomp.codegen.llvm.optproc`), with how many times it was restarted.
``tests/test_resources.py`` runs it.
"""
from __future__ import annotations

import argparse
import gc
import sys
import time
import tecomp as tc
from ..codegen.llvm import jit as llvm_jit
from ..codegen.llvm.optproc import rss_bytes as _rss


def rss_bytes(pid=None) -> int:
    """The resident set size of this process (or of ``pid``; 0 where unknown)."""
    return _rss(pid)


def worker_rss_bytes() -> int:
    """The resident set size of the LLVM optimiser worker (0 when none runs)."""
    pid = llvm_jit.worker_pid()
    return rss_bytes(pid) if pid else 0


def _one_build(i: int):
    import numpy as np

    n = 8 + i % 13
    m = 4 + (i // 13) % 7
    A = tc.placeholder((n, m), name="A")
    B = tc.placeholder((m,), name="B")
    kind = i % 4
    if kind == 0:
        C = tc.compute((n, m), lambda x, y: A[x, y] * B[y] + 1.0, name="C")
        s = tc.create_schedule(C.op)
        xo, xi = s[C].split(C.op.axis[1], factor=4)
        s[C].vectorize(xi)
    elif kind == 1:
        k = tc.reduce_axis((0, m), name="k")
        C = tc.compute((n,), lambda x: tc.sum(A[x, k] * B[k], axis=k), name="C")
        s = tc.create_schedule(C.op)
        s[C].parallel(C.op.axis[0])
    elif kind == 2:
        T = tc.compute((n, m), lambda x, y: tc.exp(A[x, y]), name="T")
        C = tc.compute((n, m), lambda x, y: T[x, y] - B[y], name="C")
        s = tc.create_schedule(C.op)
        s[T].compute_at(s[C], C.op.axis[0])
    else:
        C = tc.compute((n, m), lambda x, y: tc.max(A[x, y], B[y]), name="C")
        s = tc.create_schedule(C.op)
        s[C].unroll(C.op.axis[1])
    f = tc.build(s, [A, B, C])
    a = np.ones((n, m), "float32")
    b = np.ones(m, "float32")
    c = np.zeros(tuple(int(e.value) for e in C.shape), "float32")
    f(a, b, c)


def measure(builds: int, warmup: int = 40) -> dict:
    t0 = time.time()
    for i in range(warmup):
        _one_build(i)
    gc.collect()
    base = rss_bytes()
    wbase = worker_rss_bytes()
    starts = llvm_jit.worker_starts
    wmax = wbase
    for i in range(warmup, warmup + builds):
        _one_build(i)
        if i % 50 == 0:
            wmax = max(wmax, worker_rss_bytes())
    gc.collect()
    end = rss_bytes()
    wend = worker_rss_bytes()
    return {"builds": builds, "rss_start_mb": base / 2**20, "rss_end_mb": end / 2**20,
            "growth_mb": (end - base) / 2**20, "growth_kb_per_build": (end - base) / 1024 / builds,
            "worker": llvm_jit.worker_enabled(), "worker_start_mb": wbase / 2**20,
            "worker_end_mb": wend / 2**20, "worker_max_mb": max(wmax, wend) / 2**20,
            "worker_restarts": llvm_jit.worker_starts - starts, "seconds": time.time() - t0}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tecomp.testing.resources")
    ap.add_argument("--builds", type=int, default=1000)
    ap.add_argument("--warmup", type=int, default=40)
    args = ap.parse_args(argv)
    r = measure(args.builds, args.warmup)
    print(f"builds: {r['builds']}  rss after warm-up: {r['rss_start_mb']:.1f} MiB  "
          f"rss at end: {r['rss_end_mb']:.1f} MiB  growth: {r['growth_mb']:.1f} MiB "
          f"({r['growth_kb_per_build']:.1f} KiB/build)  time: {r['seconds']:.0f}s")
    if r["worker"]:
        print(f"LLVM optimiser worker: rss {r['worker_start_mb']:.1f} -> {r['worker_end_mb']:.1f} "
              f"MiB (max {r['worker_max_mb']:.1f}), restarts: {r['worker_restarts']} "
              f"(it retires after growing TECOMP_LLVM_WORKER_MAX_MB, default 256)")
    else:
        print("LLVM optimiser worker: off (TECOMP_LLVM_OPT_WORKER=0): LLVM optimises in-process")
    return 0


if __name__ == "__main__":
    sys.exit(main())
