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


def test_a_vectorized_loop_with_a_loop_inside_builds_quietly():
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok"
    assert r.stderr == ""
