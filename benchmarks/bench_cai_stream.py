"""The host cost of reading the version-3 `stream` entry of __cuda_array_interface__ on
the CUDA runtime's plan path: `_signature` before (33d7240, taken from git) and now,
interleaved in one process (medians of 15 rounds of 20000 calls), over three CuPy-like
arrays (plain dicts) and a scalar.

    PYTHONPATH=. python benchmarks/bench_cai_stream.py
"""
import ast, subprocess, time, statistics, sys
import numpy as np
import tecomp.runtime.cuda as rc
old_src = subprocess.check_output(["git", "show", "33d7240:tecomp/runtime/cuda.py"], text=True)
tree = ast.parse(old_src)
fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "_signature")
ns = dict(vars(rc)); exec(compile(ast.Module([fn], []), "old", "exec"), ns)
old_sig, new_sig = ns["_signature"], rc._signature
class CAI:   # a CuPy-like array: a plain dict, version 3
    def __init__(self, d): self.__cuda_array_interface__ = d
def arr(p, stream=...):
    d = {"shape": (1024,), "typestr": "<f4", "data": (p, False), "strides": None, "version": 3}
    if stream is not ...: d["stream"] = stream
    return CAI(d)
bp = (True, True, True, False)
cases = {"no stream entry": [arr(4096), arr(8192), arr(12288), 1024],
         "stream None": [arr(4096, None), arr(8192, None), arr(12288, None), 1024],
         "stream 0x5000": [arr(4096, 0x5000), arr(8192, 0x5000), arr(12288, 0x5000), 1024]}
N = 20000
for name, args in cases.items():
    ro, rn = [], []
    for _ in range(15):
        for f, r in ((old_sig, ro), (new_sig, rn)):
            t = time.perf_counter()
            for _ in range(N): f(bp, args)
            r.append((time.perf_counter() - t) / N * 1e9)
    mo, mn = statistics.median(ro), statistics.median(rn)
    print(f"{name:16s} _signature old {mo:7.0f} ns  new {mn:7.0f} ns  new/old {mn/mo:.3f}")
