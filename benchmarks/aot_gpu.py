"""GPU libraries: ``tc.load_module`` of an exported CUDA library + its first launch, in
fresh processes that have neither nvcc (not on their PATH) nor pycuda (blocked).

    python3 benchmarks/aot_gpu.py [--rounds 7]     # a CUDA GPU, nvcc and torch

Two libraries are exported once (nvcc: cubins for sm_80 and sm_90 and PTX): ``scale``
(``B = A * 2`` over a symbolic n) and ``dense`` float16 1000 x 3072 x 768 on the wgmma
template's TMA producer warp (sm_90a: only on an sm_90 GPU). Each child imports tecomp and
torch and makes torch's CUDA context first (printed apart: a PyTorch user has paid it),
then times ``tc.load_module(path)`` and the first call with torch CUDA tensors up to its
end (``torch.cuda.synchronize()``): the driver loads the cubin there, and the TMA library
encodes its tensor maps. The target of issue 55: load + first launch <= 50 ms, no
compiler invoked. Each child checks its result against torch."""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

_CHILD = r"""
import json, sys, time
sys.modules["pycuda"] = None          # the library must not need pycuda
t0 = time.perf_counter()
import torch
import tecomp as tc
t1 = time.perf_counter()
torch.cuda.init(); torch.zeros(1, device="cuda"); torch.cuda.synchronize()
kind, path = sys.argv[1], sys.argv[2]
if kind == "scale":
    a = torch.randn(1 << 20, device="cuda"); out = torch.empty_like(a)
    args = (a, out); want = lambda: a * 2
else:
    x = torch.randn(1000, 768, device="cuda").half()
    w = torch.randn(3072, 768, device="cuda").half()
    out = torch.empty(1000, 3072, device="cuda").half()
    args = (x, w, out); want = lambda: (x.float() @ w.float().T).half()
torch.cuda.synchronize()
t2 = time.perf_counter()
g = tc.load_module(path)
t3 = time.perf_counter()
g(*args); torch.cuda.synchronize()
t4 = time.perf_counter()
ref = want()
err = float(((out.float() - ref.float()).abs() / (ref.float().abs() + 1)).max())
print(json.dumps({"import": t1 - t0, "context": t2 - t1, "load": t3 - t2,
                  "first": t4 - t3, "err": err}))
"""


def export(tmp: str, sm90: bool) -> dict:
    """The libraries' paths, exported by this process (nvcc)."""
    import tecomp as tc
    from tecomp.strategy import cuda as sc

    libs = {}
    n = tc.var("n")
    A = tc.placeholder((n,), name="A")
    B = tc.compute((n,), lambda i: A[i] * 2.0, name="B")
    s = tc.create_schedule(B.op)
    bx, tx = s[B].split(B.op.axis[0], factor=256)
    s[B].bind(bx, tc.thread_axis("blockIdx.x"))
    s[B].bind(tx, tc.thread_axis("threadIdx.x"))
    libs["scale"] = os.path.join(tmp, "scale.so")
    tc.build(s, [A, B], target="cuda", name="scale").export_library(libs["scale"])
    if sm90:
        t = "cuda -arch=sm_90a"
        X = tc.placeholder((1000, 768), "float16", name="X")
        W = tc.placeholder((3072, 768), "float16", name="W")
        Y = tc.nn.dense(X, W)
        libs["dense"] = os.path.join(tmp, "dense.so")
        tc.build(sc.schedule_dense(Y, t), [X, W, Y], target=t,
                 name="dense").export_library(libs["dense"])
    return libs


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=7)
    args = p.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("needs torch with CUDA")
        return 2
    if not torch.cuda.is_available():
        print("no CUDA GPU: nothing to time")
        return 2
    sm90 = torch.cuda.get_device_capability() == (9, 0)
    env = dict(os.environ, PATH="/usr/bin:/bin", PYTHONPATH=ROOT)   # no nvcc on its PATH
    print(f"# {torch.cuda.get_device_name()}; torch {torch.__version__}; medians of "
          f"{args.rounds} fresh processes, ms")
    with tempfile.TemporaryDirectory() as tmp:
        libs = export(tmp, sm90)
        rows = {k: [] for k in libs}
        for _ in range(args.rounds):
            for kind, path in libs.items():
                proc = subprocess.run([sys.executable, "-c", _CHILD, kind, path],
                                      capture_output=True, text=True, timeout=300, env=env)
                if proc.returncode != 0:
                    print(f"{kind}: the child failed:\n{proc.stderr[-2000:]}")
                    return 1
                rows[kind].append(json.loads(proc.stdout.strip().splitlines()[-1]))
    print(f"{'library':10} {'import':>8} {'context':>8} {'load':>8} {'first':>8} "
          f"{'load+first':>11} {'error':>8}")
    for kind, rs in rows.items():
        med = {k: statistics.median(r[k] for r in rs) * 1e3 for k in
               ("import", "context", "load", "first")}
        both = statistics.median((r["load"] + r["first"]) * 1e3 for r in rs)
        print(f"{kind:10} {med['import']:8.1f} {med['context']:8.1f} {med['load']:8.2f} "
              f"{med['first']:8.2f} {both:11.2f} {max(r['err'] for r in rs):8.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
