"""Load: many threads calling kernels, several building, a tuner, all in one process.

    python -m tecomp.testing.load --seconds 600            # 16 callers, 4 builders, a tuner
    python -m tecomp.testing.load --seconds 30 --callers 4 --builders 2

For ``--seconds``, ``--callers`` threads call a rotation of prebuilt kernels (a GEMM
with parallel and vector loops, a symbolic elementwise kernel whose shape changes from
call to call, a reduction with a scalar parameter, an int8 kernel) and check every
result against numpy; ``--builders`` threads build differently shaped and scheduled
programs (those of :mod:`tecomp.testing.resources`), run each once and check it; one
thread runs ``tc.auto_schedule(..., trials=N)`` on a small matmul again and again (its
candidates measured in forked children while the other threads run).  Every
``--every`` seconds it prints the process's resident set size and the LLVM optimiser
worker's, and at the end the counts, the errors (there must be none), the RSS curve and
its growth over the second half of the run.  Exit status 1 on any error.
"""
from __future__ import annotations

import argparse
import sys
import threading
import time
import traceback
from typing import Callable, Dict, List, Tuple

import numpy as np
import tecomp as tc
from .resources import _one_build, rss_bytes, worker_rss_bytes


def kernels() -> Dict[str, Tuple[Callable, Callable, Callable, int]]:
    """name -> (kernel, make_args(rng), reference(args), output position)."""
    out = {}
    A = tc.placeholder((32, 16), name="A")
    B = tc.placeholder((16, 24), name="B")
    k = tc.reduce_axis((0, 16), name="k")
    C = tc.compute((32, 24), lambda i, j: tc.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = tc.create_schedule(C.op)
    xo, yo, xi, yi = s[C].tile(C.op.axis[0], C.op.axis[1], 8, 8)
    s[C].reorder(xo, yo, k, xi, yi)
    s[C].vectorize(yi)
    s[C].parallel(xo)
    out["gemm"] = (tc.build(s, [A, B, C]),
                   lambda r: [r.random((32, 16), dtype="float32"),
                              r.random((16, 24), dtype="float32"), np.zeros((32, 24), "float32")],
                   lambda a: a[0].astype("float64") @ a[1], 2)
    n = tc.var("n")
    X = tc.placeholder((n,), name="X")
    Y = tc.compute((n,), lambda i: tc.exp(X[i]) * 2 - X[i], name="Y")
    s = tc.create_schedule(Y.op)
    xo, xi = s[Y].split(Y.op.axis[0], factor=8)
    s[Y].vectorize(xi)

    def ew_args(r):
        m = int(r.integers(0, 100))
        return [r.random(m, dtype="float32"), np.zeros(m, "float32")]

    out["elementwise"] = (tc.build(s, [X, Y]), ew_args,
                          lambda a: np.exp(a[0].astype("float64")) * 2 - a[0], 1)
    alpha = tc.var("alpha", "float32")
    M = tc.placeholder((17, 33), name="M")
    r = tc.reduce_axis((0, 33), name="r")
    R = tc.compute((17,), lambda i: tc.sum(M[i, r] * alpha, axis=r), name="R")
    s = tc.create_schedule(R.op)
    s[R].parallel(R.op.axis[0])
    out["reduce"] = (tc.build(s, [M, R, alpha]),
                     lambda g: [g.random((17, 33), dtype="float32"), np.zeros(17, "float32"),
                                float(g.random())],
                     lambda a: (a[0].astype("float64") * a[2]).sum(1), 1)
    P = tc.placeholder((64,), dtype="int8", name="P")
    Q = tc.compute((64,), lambda i: P[i] * 3 + P[63 - i], name="Q")
    s = tc.create_schedule(Q.op)
    out["int8"] = (tc.build(s, [P, Q]),
                   lambda g: [g.integers(-128, 128, 64).astype("int8"), np.zeros(64, "int8")],
                   lambda a: a[0] * np.int8(3) + a[0][::-1], 1)
    return out


def check_call(name, kern, rng) -> bool:
    """Call one kernel on fresh arguments; whether its output matches numpy."""
    f, make, ref, outpos = kern
    args = make(rng)
    f(*args)
    got, want = args[outpos], ref(args)
    if name == "int8":
        return bool(np.array_equal(got, want))
    return bool(np.allclose(got, want, rtol=1e-4, atol=1e-5))


def _tune_workload():
    A = tc.placeholder((48, 40), name="A")
    B = tc.placeholder((40, 56), name="B")
    k = tc.reduce_axis((0, 40), name="k")
    C = tc.compute((48, 56), lambda i, j: tc.sum(A[i, k] * B[k, j], axis=k), name="C")
    return [A, B, C]


def run(seconds: float, callers: int = 16, builders: int = 4, tuner: bool = True,
        trials: int = 8, every: float = 30.0, out=sys.stdout) -> dict:
    """Run the load; return {"calls", "builds", "tunes", "errors", "rss": [(t, MiB,
    worker MiB)]}."""
    ks = kernels()
    names = sorted(ks)
    stop = threading.Event()
    lock = threading.Lock()
    counts = {"calls": 0, "builds": 0, "tunes": 0}
    errors: List[str] = []

    def fail(what):
        with lock:
            if len(errors) < 50:
                errors.append(what)

    def caller(t):
        rng = np.random.default_rng(t)
        c = 0
        while not stop.is_set():
            name = names[(t + c) % len(names)]
            try:
                if not check_call(name, ks[name], rng):
                    fail(f"caller {t}, call {c} ({name}): wrong result")
            except Exception:  # noqa: BLE001 - the finding
                fail(f"caller {t}, call {c} ({name}): {traceback.format_exc(limit=3)}")
            c += 1
        with lock:
            counts["calls"] += c

    def builder(t):
        i = t
        done = 0
        while not stop.is_set():
            try:
                _one_build(i)
            except Exception:  # noqa: BLE001
                fail(f"builder {t}, build {i}: {traceback.format_exc(limit=3)}")
            i += builders
            done += 1
        with lock:
            counts["builds"] += done

    def tune():
        args = _tune_workload()
        a = np.random.default_rng(0).random((48, 40), dtype="float32")
        b = np.random.default_rng(1).random((40, 56), dtype="float32")
        done = 0
        while not stop.is_set():
            try:
                s = tc.auto_schedule(args, trials=trials, seed=done, progress=False)
                c = np.zeros((48, 56), "float32")
                tc.build(s, args)(a, b, c)
                if not np.allclose(c, a.astype("float64") @ b, rtol=1e-4, atol=1e-4):
                    fail(f"tuner round {done}: the tuned kernel's result is wrong")
            except Exception:  # noqa: BLE001
                fail(f"tuner round {done}: {traceback.format_exc(limit=3)}")
            done += 1
        with lock:
            counts["tunes"] += done

    threads = [threading.Thread(target=caller, args=(t,), daemon=True) for t in range(callers)]
    threads += [threading.Thread(target=builder, args=(t,), daemon=True)
                for t in range(builders)]
    if tuner:
        threads.append(threading.Thread(target=tune, daemon=True))
    rss = []
    t0 = time.perf_counter()
    for th in threads:
        th.start()
    next_report = 0.0
    while True:
        now = time.perf_counter() - t0
        if now >= next_report:
            rss.append((round(now), rss_bytes() / 2**20, worker_rss_bytes() / 2**20))
            print(f"  t={now:6.0f} s  RSS {rss[-1][1]:7.1f} MiB  LLVM worker "
                  f"{rss[-1][2]:6.1f} MiB", file=out, flush=True)
            next_report += every
        if now >= seconds:
            break
        time.sleep(min(1.0, max(0.05, seconds - now)))
    stop.set()
    for th in threads:
        th.join(timeout=120)
    hung = [th.name for th in threads if th.is_alive()]
    if hung:
        errors.append(f"{len(hung)} thread(s) did not finish within 120 s of the stop")
    now = time.perf_counter() - t0
    rss.append((round(now), rss_bytes() / 2**20, worker_rss_bytes() / 2**20))
    return dict(counts, errors=errors, rss=rss, seconds=now)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--callers", type=int, default=16)
    ap.add_argument("--builders", type=int, default=4)
    ap.add_argument("--no-tuner", action="store_true")
    ap.add_argument("--trials", type=int, default=8)
    ap.add_argument("--every", type=float, default=30.0)
    a = ap.parse_args(argv)
    print(f"load: {a.callers} callers, {a.builders} builders"
          f"{'' if a.no_tuner else ', a tuner'} for {a.seconds:g} s", flush=True)
    r = run(a.seconds, a.callers, a.builders, not a.no_tuner, a.trials, a.every)
    print(f"calls {r['calls']}, builds {r['builds']}, tuning rounds {r['tunes']} in "
          f"{r['seconds']:.0f} s; errors: {len(r['errors'])}")
    half = [x for x in r["rss"] if x[0] >= r["seconds"] / 2]
    if len(half) >= 2:
        print(f"RSS over the second half: {half[0][1]:.1f} -> {half[-1][1]:.1f} MiB "
              f"({half[-1][1] - half[0][1]:+.1f} MiB in {half[-1][0] - half[0][0]} s)")
    for e in r["errors"][:10]:
        print("  " + e.strip().replace("\n", "\n    "))
    return 1 if r["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
