"""Print a digest of the printed IR, the LLVM IR and the CUDA C of a fixed set of programs.

    python -m tecomp.testing.determinism          # one line per program: name, sha256s

``tests/test_determinism.py`` runs it in several processes with different
``PYTHONHASHSEED`` values: every line must be byte-identical.
"""
from __future__ import annotations

import hashlib
import sys
import tecomp as tc
from ..codegen.cuda import codegen_cuda
from .diff import draw_case
from .draw import RandomDraw
from .sched import apply_steps


def programs():
    """(name, schedule, args) of the programs whose output must be deterministic."""
    out = []
    # tiled GEMM, vectorized, parallel, unrolled, non-dividing split
    A = tc.placeholder((30, 17), name="A")
    B = tc.placeholder((17, 20), name="B")
    k = tc.reduce_axis((0, 17), name="k")
    C = tc.compute((30, 20), lambda i, j: tc.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = tc.create_schedule(C.op)
    xo, yo, xi, yi = s[C].tile(C.op.axis[0], C.op.axis[1], 8, 8)
    ko, ki = s[C].split(k, factor=4)
    s[C].reorder(xo, yo, ko, xi, ki, yi)
    s[C].vectorize(yi)
    s[C].unroll(ki)
    s[C].parallel(xo)
    out.append(("gemm", s, [A, B, C]))
    # padded conv computed at an output row, symbolic batch
    n = tc.var("n")
    data = tc.placeholder((n, 3, 9, 9), name="data")
    w = tc.placeholder((4, 3, 3, 3), name="w")
    pad = tc.compute((n, 3, 11, 11), lambda b, c, h, x: tc.if_then_else(
        tc.all(h >= 1, h < 10, x >= 1, x < 10), data[b, c, h - 1, x - 1], 0.0), name="pad")
    rc, ry, rx = (tc.reduce_axis((0, e), name=nm) for e, nm in ((3, "rc"), (3, "ry"), (3, "rx")))
    conv = tc.compute((n, 4, 9, 9), lambda b, f, y, x: tc.sum(
        pad[b, rc, y + ry, x + rx] * w[f, rc, ry, rx], axis=[rc, ry, rx]), name="conv")
    s = tc.create_schedule(conv.op)
    s[pad].compute_at(s[conv], conv.op.axis[2])
    out.append(("conv", s, [data, w, conv]))
    # softmax with a cache
    X = tc.placeholder((8, 37), name="X")
    k1 = tc.reduce_axis((0, 37), name="k1")
    k2 = tc.reduce_axis((0, 37), name="k2")
    mx = tc.compute((8,), lambda i: tc.max(X[i, k1], axis=k1), name="rowmax")
    ex = tc.compute((8, 37), lambda i, j: tc.exp(X[i, j] - mx[i]), name="exp")
    sm = tc.compute((8,), lambda i: tc.sum(ex[i, k2], axis=k2), name="rowsum")
    Y = tc.compute((8, 37), lambda i, j: ex[i, j] / sm[i], name="softmax")
    s = tc.create_schedule(Y.op)
    s.cache_read(X, "local", [ex])
    out.append(("softmax", s, [X, Y]))
    # random programs from the fuzzer
    for seed in (3, 11, 29, 41):
        case = draw_case(RandomDraw(seed))
        r = apply_steps(case.program, case.steps)
        out.append((f"fuzz{seed}", r.s, r.args))
    return out


def gpu_program():
    A = tc.placeholder((100, 64), name="A")
    r = tc.reduce_axis((0, 64), name="r")
    B = tc.compute((100,), lambda i: tc.sum(A[i, r] * A[i, r], axis=r), name="B")
    s = tc.create_schedule(B.op)
    bo, bi = s[B].split(B.op.axis[0], factor=32)
    s[B].bind(bo, tc.thread_axis("blockIdx.x"))
    s[B].bind(bi, tc.thread_axis("threadIdx.x"))
    return s, [A, B]


def digests():
    lines = []
    for name, s, args in programs():
        ir = str(tc.lower(s, args, name="k_" + name))
        ll = tc.build(s, args, name="k_" + name).get_source("llvm")
        lines.append(f"{name} ir={_h(ir)} llvm={_h(ll)}")
    s, args = gpu_program()
    lines.append(f"gpu ir={_h(str(tc.lower(s, args, target='cuda')))} cuda={_h(cuda_source(s, args))}")
    return lines


def cuda_source(s, args) -> str:
    return codegen_cuda(tc.lower(s, args, target="cuda")).source


def _h(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


if __name__ == "__main__":
    for line in digests():
        print(line)
    sys.exit(0)
