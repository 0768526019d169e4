"""Multi-output computes and tuple reducers (TVM's): an fcompute that returns a tuple makes
one output tensor per element, computed in one loop nest; a tuple reducer (argmax, or a sum
and a sum of squares) reduces several values in one pass.  Checked against numpy through
the LLVM build, the reference interpreter and the CUDA emulation, under the schedule
primitives that apply to them, and the auto-scheduler."""
import numpy as np
import pytest

import tecomp as tc
from helpers import run

BACKENDS = ["llvm", "interp"]


def _argmax():
    # ties keep the first index, as numpy's argmax
    return tc.comm_reducer(
        lambda x, y: (tc.if_then_else(x[1] >= y[1], x[0], y[0]), tc.max(x[1], y[1])),
        lambda t0, t1: (tc.const(-1, t0), tc.min_value(t1)), name="argmax")


def _argmax_rows(n=37, m=50, dtype="float32"):
    A = tc.placeholder((n, m), dtype=dtype, name="A")
    k = tc.reduce_axis((0, m), name="k")
    idx, val = tc.compute((n,), lambda i: _argmax()((k, A[i, k]), axis=k), name="am")
    return A, idx, val


def _data(n, m, dtype="float32", seed=0):
    rng = np.random.default_rng(seed)
    if dtype.startswith("int"):
        return rng.integers(-5, 5, (n, m)).astype(dtype)   # many ties
    return rng.random((n, m)).astype(dtype)


def test_outputs_are_tensors_named_as_in_tvm():
    A, idx, val = _argmax_rows()
    assert idx.op is val.op and idx.op.num_outputs == 2
    assert (idx.name, idx.dtype, idx.value_index) == ("am.v0", "int32", 0)
    assert (val.name, val.dtype, val.value_index) == ("am.v1", "float32", 1)
    assert idx.op.output(1) is val
    s = tc.create_schedule(idx.op)
    assert s[idx] is s[val]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", ["float32", "int32", "float64"])
def test_argmax_matches_numpy_ties_included(backend, dtype):
    A, idx, val = _argmax_rows(dtype=dtype)
    s = tc.create_schedule(idx.op)
    a = _data(37, 50, dtype)
    i, v = np.full(37, -7, "int32"), np.zeros(37, dtype)
    run(s, [A, idx, val], [a, i, v], backend)
    np.testing.assert_array_equal(i, a.argmax(1))
    np.testing.assert_array_equal(v, a.max(1))


def test_argmax_printed_ir():
    A, idx, val = _argmax_rows(4, 6)
    s = tc.create_schedule(idx.op)
    assert str(tc.lower(s, [A, idx, val])) == """\
primfn main(A: float32[4, 6], am.v0: int32[4], am.v1: float32[4]) {
  for (i, 0, 4) {
    am.v0[i] = -1
    am.v1[i] = float32(-inf)
    for (k, 0, 6) {
      let am.v0.new = select(am.v1[i] >= A[i, k], am.v0[i], k)
      let am.v1.new = max(am.v1[i], A[i, k])
      am.v0[i] = am.v0.new
      am.v1[i] = am.v1.new
    }
  }
}"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_argmax_split_parallel_vectorized_and_where(backend):
    n, m = 37, 50
    A = tc.placeholder((n, m), name="A")
    k = tc.reduce_axis((0, m), name="k")
    idx, val = tc.compute((n,), lambda i: _argmax()((k, A[i, k]), axis=k, where=tc.ne(k % 3, 1)),
                          name="am")
    s = tc.create_schedule(idx.op)
    io, ii = s[idx].split(idx.op.axis[0], factor=8)
    s[idx].parallel(io)
    s[val].vectorize(ii)     # one stage: s[idx] is s[val]
    ko, ki = s[idx].split(k, factor=4)
    s[idx].unroll(ki)
    a = _data(n, m)
    i, v = np.zeros(n, "int32"), np.zeros(n, "float32")
    run(s, [A, idx, val], [a, i, v], backend)
    keep = np.arange(m) % 3 != 1
    masked = np.where(keep[None, :], a, -np.inf)
    np.testing.assert_array_equal(i, masked.argmax(1))
    np.testing.assert_array_equal(v, masked.max(1))


@pytest.mark.parametrize("backend", BACKENDS)
def test_mean_and_variance_in_one_pass(backend):
    """Two tc.sum over the same axis in one compute become one tuple reduction: one read
    of each element, and no let (each element reads only its own old value)."""
    n, m = 16, 300
    X = tc.placeholder((n, m), name="X")
    k = tc.reduce_axis((0, m), name="k")
    S, Q = tc.compute((n,), lambda i: (tc.sum(X[i, k], axis=k), tc.sum(X[i, k] * X[i, k], axis=k)),
                      name="mom")
    mean = tc.compute((n,), lambda i: S[i] / m, name="mean")
    var = tc.compute((n,), lambda i: Q[i] / m - mean[i] * mean[i], name="var")
    s = tc.create_schedule([mean.op, var.op])
    text = str(tc.lower(s, [X, mean, var]))
    assert "let" not in text and text.count("for (k, 0, 300)") == 1
    x = _data(n, m, "float64").astype("float32")
    mu, vr = np.zeros(n, "float32"), np.zeros(n, "float32")
    run(s, [X, mean, var], [x, mu, vr], backend)
    np.testing.assert_allclose(mu, x.mean(1), rtol=1e-5)
    np.testing.assert_allclose(vr, x.var(1), rtol=1e-3, atol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_rfactor_of_a_tuple_reduction(backend):
    """rfactor factors every output of a sum and a sum of squares at once: one stage of
    partial results with two outputs, vectorized along the factored lanes, both updated
    from one read of each element."""
    n, m = 6, 45
    X = tc.placeholder((n, m), name="X")
    k = tc.reduce_axis((0, m), name="k")
    S, Q = tc.compute((n,), lambda i: (tc.sum(X[i, k], axis=k), tc.sum(X[i, k] * X[i, k], axis=k)),
                      name="mom")
    s = tc.create_schedule([S.op])
    _, ki = s[S].split(k, factor=8)
    rf = s.rfactor(S, ki, factor_axis=1)
    assert rf.op.num_outputs == 2 and rf.op.output(1).name == "mom.rf.v1"
    i, lanes = s[rf].op.axis
    s[rf].reorder(i, *s[rf].op.reduce_axis, lanes)
    s[rf].vectorize(lanes)
    text = str(tc.lower(s, [X, S, Q]))
    assert text.count("vectorized (k.inner, 0, 8)") == 2   # the init, and the update (+ tail)
    x = _data(n, m, "float64").astype("float32")
    a, b = np.zeros(n, "float32"), np.zeros(n, "float32")
    run(s, [X, S, Q], [x, a, b], backend)
    np.testing.assert_allclose(a, x.sum(1), rtol=1e-5)
    np.testing.assert_allclose(b, (x * x).sum(1), rtol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_rfactor_of_an_argmax(backend):
    """An argmax (whose index reads the values) rfactored: the partial winners per lane,
    then the winner of those; ties keep the first index."""
    A, idx, val = _argmax_rows(9, 40, "int32")
    s = tc.create_schedule(idx.op)
    k = s[idx].op.reduce_axis[0]
    ko, ki = s[idx].split(k, factor=8)
    s.rfactor(idx, ko, factor_axis=0)
    a = _data(9, 40, "int32")
    i, v = np.zeros(9, "int32"), np.zeros(9, "int32")
    run(s, [A, idx, val], [a, i, v], backend)
    np.testing.assert_array_equal(i, a.argmax(1))
    np.testing.assert_array_equal(v, a.max(1))


def test_a_three_element_tuple_reducer_of_mixed_dtypes():
    """count, sum and max of the positive elements of each row, in one pass."""
    n, m = 9, 40
    X = tc.placeholder((n, m), name="X")
    k = tc.reduce_axis((0, m), name="k")
    red = tc.comm_reducer(
        lambda x, y: (x[0] + y[0], x[1] + y[1], tc.max(x[1 + 1], y[2])),
        lambda t0, t1, t2: (tc.const(0, t0), tc.const(0, t1), tc.min_value(t2)), name="stats")
    cnt, tot, mx = tc.compute(
        (n,), lambda i: red((tc.const(1, "int64"), X[i, k], X[i, k]), axis=k, where=X[i, k] > 0),
        name="stats")
    assert (cnt.dtype, tot.dtype, mx.dtype) == ("int64", "float32", "float32")
    s = tc.create_schedule(cnt.op)
    x = _data(n, m) - 0.5
    c, t, mxx = np.zeros(n, "int64"), np.zeros(n, "float32"), np.zeros(n, "float32")
    run(s, [X, cnt, tot, mx], [x, c, t, mxx])
    pos = x > 0
    np.testing.assert_array_equal(c, pos.sum(1))
    np.testing.assert_allclose(t, np.where(pos, x, 0).sum(1), rtol=1e-5)
    np.testing.assert_array_equal(mxx, x.max(1))


@pytest.mark.parametrize("backend", BACKENDS)
def test_elementwise_outputs_inline_and_cache_read(backend):
    n, m = 13, 21
    A = tc.placeholder((n, m), name="A")
    B0, B1 = tc.compute((n, m), lambda i, j: (A[i, j] + 1, A[i, j] * 2), name="B")
    C = tc.compute((n, m), lambda i, j: B0[i, j] - B1[i, j], name="C")
    a = _data(n, m)
    want = (a + 1) - a * 2
    # both outputs inlined into C (each read takes its own body)
    s = tc.create_schedule(C.op)
    s[B0].compute_inline()
    assert "B." not in str(tc.lower(s, [A, C]))
    c = np.zeros_like(a)
    run(s, [A, C], [a, c], backend)
    np.testing.assert_allclose(c, want, rtol=1e-6)
    # all three outputs in the argument list
    s = tc.create_schedule(C.op)
    b0, b1, c = np.zeros_like(a), np.zeros_like(a), np.zeros_like(a)
    run(s, [A, B0, B1, C], [a, b0, b1, c], backend)
    np.testing.assert_allclose(b0, a + 1, rtol=1e-6)
    np.testing.assert_allclose(b1, a * 2, rtol=1e-6)
    np.testing.assert_allclose(c, want, rtol=1e-6)
    # a cache of one output for its reader
    s = tc.create_schedule(C.op)
    s.cache_read(B1, "local", [C])
    c = np.zeros_like(a)
    run(s, [A, C], [a, c], backend)
    np.testing.assert_allclose(c, want, rtol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_compute_at_a_consumer_and_one_output_as_argument(backend):
    A, idx, val = _argmax_rows()
    C = tc.compute((37,), lambda i: val[i] * 2 + tc.cast(idx[i], "float32"), name="C")
    s = tc.create_schedule(C.op)
    io, ii = s[C].split(C.op.axis[0], factor=4)
    s[idx].compute_at(s[C], io)
    a, c = _data(37, 50), np.zeros(37, "float32")
    run(s, [A, C], [a, c], backend)
    np.testing.assert_allclose(c, a.max(1) * 2 + a.argmax(1), rtol=1e-6)
    # only the index is wanted: the values get a buffer of their own
    A, idx, val = _argmax_rows()
    s = tc.create_schedule(idx.op)
    i = np.zeros(37, "int32")
    run(s, [A, idx], [a, i], backend)
    np.testing.assert_array_equal(i, a.argmax(1))


def test_cuda_emulation_runs_the_tuple_reduction():
    from tecomp.codegen.cuda_emu import find_cxx

    try:
        find_cxx()
    except Exception:  # noqa: BLE001
        pytest.skip("no C++ compiler for the CUDA emulation")
    A, idx, val = _argmax_rows()
    s = tc.create_schedule(idx.op)
    bx, tx = s[idx].split(idx.op.axis[0], factor=8)
    s[idx].bind(bx, tc.thread_axis("blockIdx.x"))
    s[idx].bind(tx, tc.thread_axis("threadIdx.x"))
    f = tc.build(s, [A, idx, val], target="cuda-emu")
    a, i, v = _data(37, 50), np.zeros(37, "int32"), np.zeros(37, "float32")
    f(a, i, v)
    np.testing.assert_array_equal(i, a.argmax(1))
    np.testing.assert_array_equal(v, a.max(1))


def test_auto_schedule_and_workload_keys():
    from tecomp.autoschedule.records import workload_key

    A, idx, val = _argmax_rows(64, 200)
    s = tc.auto_schedule([A, idx, val])
    f = tc.build(s, [A, idx, val])
    a, i, v = _data(64, 200), np.zeros(64, "int32"), np.zeros(64, "float32")
    f(a, i, v)
    np.testing.assert_array_equal(i, a.argmax(1))
    # the key tells an argmax from an argmin (the combiners differ, not only names)
    B = tc.placeholder((64, 200), name="A")
    k = tc.reduce_axis((0, 200), name="k")
    argmin = tc.comm_reducer(
        lambda x, y: (tc.if_then_else(x[1] <= y[1], x[0], y[0]), tc.min(x[1], y[1])),
        lambda t0, t1: (tc.const(-1, t0), tc.max_value(t1)), name="argmax")
    j, w = tc.compute((64,), lambda r: argmin((k, B[r, k]), axis=k), name="am")
    assert workload_key([A, idx, val])["hash"] != workload_key([B, j, w])["hash"]
    A2, idx2, val2 = _argmax_rows(64, 200)
    assert workload_key([A, idx, val])["hash"] == workload_key([A2, idx2, val2])["hash"]


def test_auto_schedule_of_elementwise_outputs_reading_a_tuple_reduction():
    n, m = 64, 300
    A = tc.placeholder((n, m), name="A")
    k = tc.reduce_axis((0, m), name="k")
    S, Q = tc.compute((n,), lambda i: (tc.sum(A[i, k], axis=k), tc.sum(A[i, k] * A[i, k], axis=k)),
                      name="mom")
    M = tc.compute((n, m), lambda i, j: (A[i, j] - S[i] / m) * Q[i], name="M")
    B0, B1 = tc.compute((n, m), lambda i, j: (M[i, j] + 1, M[i, j] * 2), name="B")
    s = tc.auto_schedule([A, B0, B1])
    a = _data(n, m)
    b0, b1 = np.zeros_like(a), np.zeros_like(a)
    tc.build(s, [A, B0, B1])(a, b0, b1)
    mm = (a - a.sum(1, keepdims=True) / m) * (a * a).sum(1, keepdims=True)
    np.testing.assert_allclose(b0, mm + 1, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(b1, mm * 2, rtol=1e-4, atol=1e-3)


from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 40), m=st.integers(1, 40), f=st.integers(1, 9), fk=st.integers(1, 9),
       vec=st.booleans(), par=st.booleans(), unroll=st.booleans(), reorder=st.booleans(),
       dtype=st.sampled_from(["float32", "int32", "float64"]), seed=st.integers(0, 99))
def test_tuple_reductions_under_random_schedules(n, m, f, fk, vec, par, unroll, reorder, dtype,
                                                 seed):
    """argmax and (sum, sum of squares) under split / reorder / vectorize / parallel /
    unroll of both axes, through LLVM, against numpy."""
    A = tc.placeholder((n, m), dtype=dtype, name="A")
    k = tc.reduce_axis((0, m), name="k")
    k2 = tc.reduce_axis((0, m), name="k2")
    idx, val = tc.compute((n,), lambda i: _argmax()((k, A[i, k]), axis=k), name="am")
    S, Q = tc.compute((n,), lambda i: (tc.sum(A[i, k2], axis=k2),
                                       tc.sum(A[i, k2] * A[i, k2], axis=k2)), name="mom")
    s = tc.create_schedule([idx.op, S.op])
    for T, red in ((idx, k), (S, k2)):
        io, ii = s[T].split(T.op.axis[0], factor=f)
        ko, ki = s[T].split(red, factor=fk)
        if reorder:
            s[T].reorder(io, ko, ii, ki)
        if unroll:
            s[T].unroll(ki)
        if vec:
            s[T].vectorize(ii)     # (the lanes run the reduction loops inside it)
        if par:
            s[T].parallel(io)
    a = _data(n, m, dtype, seed)
    i, v = np.zeros(n, "int32"), np.zeros(n, dtype)
    sm, sq = np.zeros(n, dtype), np.zeros(n, dtype)
    tc.build(s, [A, idx, val, S, Q])(a, i, v, sm, sq)
    np.testing.assert_array_equal(i, a.argmax(1))
    np.testing.assert_array_equal(v, a.max(1))
    tol = dict(rtol=1e-5) if dtype != "int32" else {}
    np.testing.assert_allclose(sm, a.sum(1, dtype=dtype), **tol)
    np.testing.assert_allclose(sq, (a * a).sum(1, dtype=dtype), **tol)
