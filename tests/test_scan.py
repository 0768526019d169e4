"""tc.scan (TVM's te.scan): recurrences over the first axis -- a cumulative sum and an RNN
cell -- against numpy, through the LLVM build and the reference interpreter, with the
body inlined, moved and scheduled, and through the auto-scheduler."""
import numpy as np
import pytest

import tecomp as tc
from helpers import run
from tecomp.testing.rnn import rnn_scan

BACKENDS = ["llvm", "interp"]


def _cumsum(T=None, n=16):
    T = T if T is not None else tc.var("T")
    X = tc.placeholder((T, n), name="X")
    state = tc.placeholder((T, n), name="state")
    init = tc.compute((1, n), lambda _, i: X[0, i], name="init")
    update = tc.compute((T, n), lambda t, i: state[t - 1, i] + X[t, i], name="update")
    return X, update, tc.scan(init, update, state, inputs=[X], name="S")


def test_scan_tensor_and_axes():
    X, update, S = _cumsum(T=10)
    assert S.shape[0].value == 10 and S.dtype == "float32" and S.name == "S"
    t = S.op.scan_axis
    assert (t.dom.min.value, t.dom.extent.value) == (1, 9)
    s = tc.create_schedule(S.op)
    assert s[update].attach_type == "scope" and s[update].attach_stage is s[S]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("inline", [False, True])
def test_cumulative_sum(backend, inline):
    X, update, S = _cumsum()
    s = tc.create_schedule(S.op)
    if inline:
        s[update].compute_inline()
    x = np.random.default_rng(0).random((10, 16)).astype("float32")
    out = np.zeros_like(x)
    run(s, [X, S], [x, out], backend)
    np.testing.assert_allclose(out, np.cumsum(x, 0), rtol=1e-5)


def test_printed_ir_of_the_inlined_cumulative_sum():
    X, update, S = _cumsum(T=6, n=4)
    s = tc.create_schedule(S.op)
    s[update].compute_inline()
    assert str(tc.lower(s, [X, S])) == """\
primfn main(X: float32[6, 4], S: float32[6, 4]) {
  allocate init: float32[1, 4] (global)
  for (i, 0, 4) {
    init[0, i] = X[0, i]
  }
  for (S.init1, 0, 4) {
    S[0, S.init1] = init[0, S.init1]
  }
  for (S.t, 0, 5) {
    for (S.i1, 0, 4) {
      S[S.t + 1, S.i1] = S[S.t, S.i1] + X[S.t + 1, S.i1]
    }
  }
}"""


def _rnn(T=12, B=4, n=32, d=24):
    """h[t] = tanh(U h[t-1] + W x[t]) (tecomp.testing.rnn), its data and a float64 reference."""
    args, body = rnn_scan(T, B, n, d)
    rng = np.random.default_rng(0)
    data = [rng.standard_normal((T, B, d)).astype("float32"),
            (rng.standard_normal((n, d)) * 0.2).astype("float32"),
            (rng.standard_normal((n, n)) * 0.2).astype("float32"),
            rng.standard_normal((B, n)).astype("float32")]
    x, w, u, hh = data
    ref = np.zeros((T, B, n))
    ref[0] = hh
    for t in range(1, T):
        ref[t] = np.tanh(ref[t - 1] @ u.T + x[t] @ w.T)
    return tuple(args), body, data, ref


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("variant", ["default", "inline", "scheduled", "auto"])
def test_rnn_cell(backend, variant):
    args, (XW, UH, upd), data, ref = _rnn()
    H = args[-1]
    s = tc.create_schedule(H.op)
    if variant in ("inline", "scheduled"):
        s[upd].compute_inline()
    if variant == "scheduled":
        s[UH].parallel(UH.op.axis[1])            # inside the time loop
        io, ii = s[H].split(H.op.axis[2], factor=8)
        s[H].vectorize(ii)
        s[UH].compute_at(s[H], H.op.axis[1])     # one batch row of U h per row of H
    if variant == "auto":
        s = tc.auto_schedule(list(args))
    out = np.zeros(ref.shape, "float32")
    run(s, list(args), data + [out], backend)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)


def test_a_read_two_steps_back_with_two_initial_steps():
    """fib-like: S[t] = S[t-1] + S[t-2], S[0:2] from init; update's reads start at t = 2."""
    T, n = 9, 3
    X = tc.placeholder((2, n), name="X")
    state = tc.placeholder((T, n), name="state")
    init = tc.compute((2, n), lambda t, i: X[t, i], name="init")
    update = tc.compute((T, n), lambda t, i: state[t - 1, i] + state[t - 2, i], name="update")
    S = tc.scan(init, update, state, name="S")
    s = tc.create_schedule(S.op)
    x = np.array([[1, 2, 3], [1, 3, 5]], "float32")
    out = np.zeros((T, n), "float32")
    run(s, [X, S], [x, out])
    ref = np.zeros((T, n), "float32")
    ref[:2] = x
    for t in range(2, T):
        ref[t] = ref[t - 1] + ref[t - 2]
    np.testing.assert_array_equal(out, ref)


from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(T=st.integers(3, 12), n=st.integers(1, 20), m=st.integers(1, 2), f=st.integers(1, 9),
       inline=st.booleans(), vec=st.booleans(), par=st.booleans(), at_row=st.booleans(),
       backend=st.sampled_from(BACKENDS))
def test_random_recurrences_under_random_schedules(T, n, m, f, inline, vec, par, at_row, backend):
    """S[t] = 0.5 S[t-1] + 0.25 S[t-m] + X[t] (m initial steps), with a body stage P
    between the state and update, through random schedules of the body and the scan."""
    X = tc.placeholder((T, n), name="X")
    state = tc.placeholder((T, n), name="state")
    init = tc.compute((m, n), lambda t, i: X[t, i], name="init")
    P = tc.compute((T, n), lambda t, i: state[t - 1, i] * 0.5 + state[t - m, i] * 0.25, name="P")
    update = tc.compute((T, n), lambda t, i: P[t, i] + X[t, i], name="update")
    S = tc.scan(init, update, state, inputs=[X], name="S")
    s = tc.create_schedule(S.op)
    if inline:
        s[update].compute_inline()
    io, ii = s[S].split(S.op.axis[1], factor=f)
    if vec:
        s[S].vectorize(ii)
    if par:
        s[P].parallel(P.op.axis[1])
    if at_row and inline:   # (S itself reads P then; an update at S.t would read it first)
        s[P].compute_at(s[S], io)
    x = np.random.default_rng(T * 100 + n).random((T, n)).astype("float32")
    out = np.zeros_like(x)
    run(s, [X, S], [x, out], backend)
    ref = np.zeros((T, n), "float64")
    ref[:m] = x[:m]
    for t in range(m, T):
        ref[t] = 0.5 * ref[t - 1] + 0.25 * ref[t - m] + x[t]
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)
