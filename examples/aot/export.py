"""Build a small kernel and export it as a shared library that C code (main.c) calls.

    python3 examples/aot/export.py [saxpy.so]

``C[i] = alpha * A[i] + B[i]`` over a symbolic length ``n``, vectorized and split into
parallel chunks (so the library's thread pool runs it).  The script writes the library
and its sha256 sidecar, loads it back with ``tc.load_module`` (as a deployment without
LLVM would) and checks both against numpy.
"""
import os
import sys

import numpy as np

import tecomp as tc


def build():
    n = tc.var("n")
    alpha = tc.var("alpha", "float32")
    A = tc.placeholder((n,), name="A")
    B = tc.placeholder((n,), name="B")
    C = tc.compute((n,), lambda i: alpha * A[i] + B[i], name="C")
    s = tc.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=4096)
    s[C].parallel(xo)
    xio, xii = s[C].split(xi, factor=16)
    s[C].vectorize(xii)
    # parameters in this order: the C program fills the argument block by it
    return tc.build(s, [A, B, C, alpha], name="saxpy")


def main(path: str) -> None:
    f = build()
    f.export_library(path)            # path and path + ".sha256"
    g = tc.load_module(path)          # the library, as any process would load it
    a = np.random.rand(100003).astype("float32")
    b = np.random.rand(100003).astype("float32")
    want = np.float32(2) * a + b
    for mod in (f, g):
        c = np.empty_like(a)
        mod(a, b, c, 2.0)
        np.testing.assert_array_equal(c, want)
    print(f"wrote {path} ({os.path.getsize(path)} bytes) and {path}.sha256; entry symbol "
          f"{f.entry_symbol}; load_module + call match numpy")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "saxpy.so")
