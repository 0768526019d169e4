"""Ahead-of-time libraries: ``tc.load_module`` + the first call, against ``tc.build``.

    python3 benchmarks/aot.py [--rounds 7] [--n 1024] [--threads N]

The GEMM ``n``^3 (float32) with ``tecomp.nn``'s tuned CPU schedule (``matmul_packed`` +
``schedule_matmul``, as in run.py) is exported once; then, alternately, fresh Python
processes either build it from scratch (``tc.build``: lowering, code generation, LLVM's
O3 in the optimiser worker it starts, JIT) and call it once, or load the library
(``tc.load_module``) and call it once.  Each child reports its own times (after ``import
tecomp``, which both pay and which is printed apart); the table shows medians, in ms.
The target of issue 22: load + first call <= 20 ms.  Speed only: tests/test_aot.py checks
the results.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile

_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import numpy as np
import tecomp as tc
t1 = time.perf_counter()
mode, path, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
a = np.random.default_rng(0).standard_normal((n, n)).astype("float32")
b = np.random.default_rng(1).standard_normal((n, n)).astype("float32")
c = np.empty((n, n), "float32")
t2 = time.perf_counter()
if mode == "build":
    from tecomp.strategy import cpu as sc
    A = tc.placeholder((n, n), name="A")
    B = tc.placeholder((n, n), name="B")
    C = sc.matmul_packed(A, B)
    f = tc.build(sc.schedule_matmul(C), [A, B, C], name="gemm")
else:
    f = tc.load_module(path)
t3 = time.perf_counter()
f(a, b, c)
t4 = time.perf_counter()
err = float(np.abs(c[:64, :64] - a[:64] @ b[:, :64]).max())
print(json.dumps({"import": t1 - t0, "make": t3 - t2, "call": t4 - t3, "err": err,
                  "llvmlite": "llvmlite" in sys.modules}))
"""


def _child(mode: str, path: str, n: int) -> dict:
    proc = subprocess.run([sys.executable, "-c", _CHILD, mode, path, str(n)],
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"the {mode} child failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    from common import parser, pin_threads

    ap = parser(__doc__, rounds=7)
    ap.add_argument("--n", type=int, default=1024)
    args = ap.parse_args(argv)
    pin_threads(args.threads)
    import tecomp as tc
    from tecomp.strategy import cpu as sc
    from workloads import machine

    print(machine())
    n = args.n
    with tempfile.TemporaryDirectory(prefix="tecomp-aot-bench-") as tmp:
        path = os.path.join(tmp, "gemm.so")
        A = tc.placeholder((n, n), name="A")
        B = tc.placeholder((n, n), name="B")
        C = sc.matmul_packed(A, B)
        f = tc.build(sc.schedule_matmul(C), [A, B, C], name="gemm")
        f.export_library(path)
        print(f"gemm {n}^3 library: {os.path.getsize(path)} bytes, {args.threads} threads, "
              f"{args.rounds} rounds of fresh processes (medians, ms)")
        runs = {"build": [], "load": []}
        for _ in range(args.rounds):
            for mode in ("build", "load"):
                runs[mode].append(_child(mode, path, n))
    for mode, rs in runs.items():
        assert max(r["err"] for r in rs) < 1e-2, rs
        med = {k: statistics.median(r[k] for r in rs) * 1e3 for k in ("import", "make", "call")}
        what = "tc.build" if mode == "build" else "tc.load_module"
        print(f"  {what:15s} {med['make']:8.1f}  + first call {med['call']:6.1f}  = "
              f"{med['make'] + med['call']:8.1f}   (import tecomp {med['import']:.0f}; "
              f"llvmlite imported: {any(r['llvmlite'] for r in rs)})")
    load = statistics.median((r["make"] + r["call"]) * 1e3 for r in runs["load"])
    print(f"load + first call: {load:.1f} ms (target <= 20 ms: "
          f"{'met' if load <= 20 else 'NOT met'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
