"""Property: any sequence of legal schedule primitives leaves what GEMM, conv2d and softmax
compute unchanged.

Sequences are drawn by construction from each stage's current leaf axes
(tecomp/testing/sched.py states the rules): split with dividing and non-dividing factors
and nparts, reorder, fuse, tile, compute_at / compute_inline / compute_root,
cache_read / cache_write, rfactor, set_scope, storage_align, then unroll / vectorize /
pragma unroll_explicit on axes whose extent after bound inference is a constant, and
parallel on data-parallel axes.  Every result is checked against numpy through the LLVM
build and the reference interpreter.  A legal sequence that raises ScheduleError, or
computes a wrong result, is a bug.  TECOMP_LONG_FUZZ=1 runs many more examples.
"""
import os

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tecomp as tc
from helpers import conv2d_nchw, conv2d_ref, softmax, softmax_ref
from tecomp.ir import interp
from tecomp.testing import HypothesisDraw
from tecomp.testing.sched import Replay, gen_schedule, steps_source

LONG = os.environ.get("TECOMP_LONG_FUZZ", "") not in ("", "0")
_SETTINGS = dict(deadline=None, derandomize=True, database=None, print_blob=True,
                 suppress_health_check=list(HealthCheck))
SIZES = (8, 1, 2, 3, 5, 7, 13, 16, 17)


def _gemm(d):
    sym = d.bool(0.25)
    n_val = d.choice(SIZES)
    m, K = d.choice(SIZES), d.choice(SIZES)
    n = tc.var("n") if sym else n_val
    A = tc.placeholder((n, K), name="A")
    B = tc.placeholder((K, m), name="B")
    k = tc.reduce_axis((0, K), name="k")
    C = tc.compute((n, m), lambda i, j: tc.sum(A[i, k] * B[k, j], axis=k), name="C")
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (n_val, K)).astype("float32")
    b = rng.uniform(-1, 1, (K, m)).astype("float32")

    def arrays():
        return [a.copy(), b.copy(), np.full((n_val, m), np.nan, "float32")]

    return dict(handles={"A": A, "B": B, "C": C}, outputs=[C], args=[A, B, C], arrays=arrays,
                check=lambda out: _close(out[2], a.astype("float64") @ b, "C"))


def _conv(d):
    N, C, H, W, K = d.choice((1, 2)), d.choice((3, 1, 2)), d.choice((7, 5, 8)), d.choice((7, 6, 9)), d.choice((4, 1, 3))
    R, stride, pad = d.choice((3, 1, 2)), d.choice((1, 2)), d.choice((1, 0, 2))
    data, weight, padded, out = conv2d_nchw(N=N, C=C, H=H, W=W, K=K, R=R, stride=stride, pad=pad)
    rng = np.random.default_rng(1)
    x = rng.uniform(-1, 1, (N, C, H, W)).astype("float32")
    w = rng.uniform(-1, 1, (K, C, R, R)).astype("float32")
    oshape = tuple(int(e.value) for e in out.shape)

    def arrays():
        return [x.copy(), w.copy(), np.full(oshape, np.nan, "float32")]

    return dict(handles={"data": data, "weight": weight, "pad": padded, "conv": out},
                outputs=[out], args=[data, weight, out], arrays=arrays,
                check=lambda o: _close(o[2], conv2d_ref(x, w, stride=stride, pad=pad), "conv"))


def _softmax(d):
    m, n = d.choice((8, 1, 3, 5)), d.choice((37, 1, 4, 16, 17))
    X, mx, ex, sm, Y = softmax(m=m, n=n)
    x = np.random.default_rng(2).uniform(-3, 3, (m, n)).astype("float32")

    def arrays():
        return [x.copy(), np.full((m, n), np.nan, "float32")]

    return dict(handles={"X": X, "rowmax": mx, "ex": ex, "rowsum": sm, "Y": Y}, outputs=[Y],
                args=[X, Y], arrays=arrays, check=lambda o: _close(o[1], softmax_ref(x), "softmax"))


WORKLOADS = {"gemm": _gemm, "conv2d": _conv, "softmax": _softmax}


def _close(got, want, what):
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * max(1.0, float(np.abs(want).max(initial=0))),
                               err_msg=what)


def _run(data, name):
    d = HypothesisDraw(data)
    w = WORKLOADS[name](d)
    r = Replay.of(w["handles"], w["outputs"], w["args"])
    try:
        steps = gen_schedule(d, replay=r, max_steps=8)
    except Exception as e:  # a legal sequence was refused: a bug
        raise AssertionError(f"a legal step raised {type(e).__name__}: {e}\nsteps:\n"
                             f"{steps_source(gen_schedule.last_steps)}") from e
    where = f"\nschedule steps:\n{steps_source(steps)}\n{r.s!r}"
    try:
        func = tc.lower(r.s, r.args)
        f = tc.build(func)
    except Exception as e:
        raise AssertionError(f"lowering/building a legal schedule raised {type(e).__name__}: {e}{where}") from e
    out = w["arrays"]()
    f(*out)
    try:
        w["check"](out)
    except AssertionError as e:
        raise AssertionError(f"LLVM: {e}{where}\n{func}") from None
    out = w["arrays"]()
    interp.run(func, *out)
    try:
        w["check"](out)
    except AssertionError as e:
        raise AssertionError(f"interpreter: {e}{where}\n{func}") from None


@settings(max_examples=300 if LONG else 12, **_SETTINGS)
@given(st.data())
def test_random_legal_schedules_gemm(data):
    _run(data, "gemm")


@settings(max_examples=300 if LONG else 10, **_SETTINGS)
@given(st.data())
def test_random_legal_schedules_conv2d(data):
    _run(data, "conv2d")


@settings(max_examples=300 if LONG else 10, **_SETTINGS)
@given(st.data())
def test_random_legal_schedules_softmax(data):
    _run(data, "softmax")
