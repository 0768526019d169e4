"""A successful build writes nothing to the process's stderr (fd 2): no LLVM remark
("loop not vectorized", "loop not unrolled") about a transformation tecomp asked for and
LLVM refused.  In a child process, whose fd 2 is captured whole."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# a vectorized loop with a reduction computed at each of its iterations: not widened
# (a loop inside), a serial loop, which LLVM's loop vectorizer (innermost loops only)
# was asked to vectorize and refused on stderr
_CHILD = """
import numpy as np
import tecomp as tc
A = tc.placeholder((64, 100), name="A")
k = tc.reduce_axis((0, 100), name="k")
C = tc.compute((64,), lambda i: tc.sum(A[i, k], axis=k), name="C")
E = tc.compute((64,), lambda i: C[i] + 1.0, name="E")
s = tc.create_schedule(E.op)
s[C].compute_at(s[E], E.op.axis[0])
s[E].vectorize(E.op.axis[0])
f = tc.build(s, [A, E])
a = np.random.rand(64, 100).astype("float32")
e = np.zeros(64, "float32")
f(a, e)
np.testing.assert_allclose(e, a.sum(axis=1) + 1.0, rtol=1e-5)
assert "llvm.loop.vectorize.enable" not in f.get_source("llvm")
print("ok")
"""


# issue 49: a split of a symbolic extent by more than 16, its inner axis unrolled: the
# full tiles unroll at code generation; the tail, `min(n - i.outer*F, F)` iterations (more
# than the 16 guarded copies), stays a loop that LLVM is asked to unroll.  Asked with
# `llvm.loop.unroll.enable`, LLVM (which does not know the trip count) unrolled nothing and
# printed "loop not unrolled" three times; a count (4) it honours, with a remainder loop.
# Alone, and with a reduction inside each iteration of the tail.
_CHILD_UNROLL = """
import numpy as np
import tecomp as tc
n = tc.var("n")
m = tc.var("m")
A = tc.placeholder((n,), name="A")
B = tc.compute((n,), lambda i: A[i] * 2.0 + 1.0, name="B")
R = tc.placeholder((n, m), name="R")
k = tc.reduce_axis((0, m), name="k")
S = tc.compute((n,), lambda i: tc.sum(R[i, k] * 2.0, axis=k), name="S")
for T, factor in ((B, 32), (B, 17), (S, 32)):
    s = tc.create_schedule(T.op)
    _, inner = s[T].split(T.op.axis[0], factor=factor)
    s[T].unroll(inner)
    args = [A, T] if T is B else [R, T]
    assert "min(" in str(tc.lower(s, args))          # the tail: a symbolic extent
    f = tc.build(s, args)
    assert '!"llvm.loop.unroll.count", i32 4' in f.get_source("llvm-unopt")
    for size in (0, 1, 5, factor - 1, factor, factor + 1, 3 * factor + 7, 1000):
        if T is B:
            a = np.random.rand(size).astype("float32")
            b = np.full(size, -1.0, "float32")
            f(a, b)
            np.testing.assert_allclose(b, a * 2 + 1, rtol=1e-6)
        else:
            r = np.random.rand(size, 13).astype("float32")
            b = np.full(size, -1.0, "float32")
            f(r, b)
            np.testing.assert_allclose(b, (r * 2).sum(axis=1), rtol=1e-5)
print("ok")
"""


def _run_quiet(child):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok"
    assert r.stderr == ""


def test_a_vectorized_loop_with_a_loop_inside_builds_quietly():
    _run_quiet(_CHILD)


def test_the_unrolled_tail_of_a_long_symbolic_split_builds_quietly():
    _run_quiet(_CHILD_UNROLL)
