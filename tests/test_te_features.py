"""TE features TVM users reach for (issue 21): chained indexing."""
import numpy as np
import pytest

import tecomp as tc


def test_chained_indexing_is_the_same_load():
    A = tc.placeholder((4, 5, 6), name="A")
    k = tc.reduce_axis((0, 6), name="k")
    B = tc.compute((4, 5), lambda i, j: tc.sum(A[i][j][k] * 2, axis=k), name="B")
    C = tc.compute((4, 5), lambda i, j: A[i][j, 0] + A[i, j][1] - A[i][j][2], name="C")
    D = tc.compute((4, 5), lambda i, j: A[i, j, 0] + A[i, j, 1] - A[i, j, 2], name="D")
    # the same IR as with one subscript
    text_c = str(tc.lower(tc.create_schedule(C.op), [A, C]))
    text_d = str(tc.lower(tc.create_schedule(D.op), [A, D])).replace("D", "C")
    assert text_c == text_d
    f = tc.build(tc.create_schedule([B.op, C.op]), [A, B, C])
    a = np.random.default_rng(0).random((4, 5, 6), dtype=np.float32)
    b, c = np.zeros((4, 5), "float32"), np.zeros((4, 5), "float32")
    f(a, b, c)
    np.testing.assert_allclose(b, 2 * a.sum(2), rtol=1e-5)
    np.testing.assert_allclose(c, a[:, :, 0] + a[:, :, 1] - a[:, :, 2], rtol=1e-5)


def test_partial_index_is_not_a_value():
    A = tc.placeholder((4, 5), name="A")
    s = A[1]
    assert "1 of 2 indices" in repr(s)
    for use in (lambda: s + 1, lambda: 1 + s, lambda: s * A[0, 0], lambda: tc.exp(s),
                lambda: bool(s), lambda: tc.compute((4,), lambda i: A[i], name="C")):
        with pytest.raises(tc.ShapeError, match=r"indexed with 1 index\(es\); index every "
                                                r"dimension, e.g. A\[i, j\] or A\[i\]\[j\]"):
            use()


def test_split_disable_predication_drops_the_guard():
    from tecomp.ir import interp

    n = tc.var("n")
    A = tc.placeholder((n,), name="A")
    B = tc.compute((n,), lambda i: A[i] * 2, name="B")
    s = tc.create_schedule(B.op)
    _, xi = s[B].split(B.op.axis[0], factor=8, disable_predication=True)
    s[B].vectorize(xi)
    text = str(tc.lower(s, [A, B]))
    assert "if (" not in text and "min(" not in text, text        # no guard, no tail
    assert "vectorized (i.inner, 0, 8)" in text, text
    # the same split with the guard: a partitioned tail
    s2 = tc.create_schedule(B.op)
    s2[B].split(B.op.axis[0], factor=8)
    assert "min(" in str(tc.lower(s2, [A, B]))
    f = tc.build(s, [A, B])
    a = np.arange(24, dtype="float32")
    b = np.zeros(24, "float32")
    f(a, b)
    np.testing.assert_array_equal(b, 2 * a)
    # an extent the split does not divide is refused at the call, by every runtime
    msg = r"split of axis i of stage B with disable_predication=True \(its extent n must " \
          r"be a multiple of 8\)"
    with pytest.raises(tc.ArgumentError, match=msg):
        f(np.zeros(13, "float32"), np.zeros(13, "float32"))
    with pytest.raises(tc.ArgumentError, match=msg):
        interp.run(tc.lower(s, [A, B]), np.zeros(13, "float32"), np.zeros(13, "float32"))
    # replayable
    assert "disable_predication=True" in s.trace.python([A, B])


def test_split_disable_predication_with_constant_extents():
    C = tc.placeholder((12,), name="C")
    D = tc.compute((12,), lambda i: C[i] + 1, name="D")
    s = tc.create_schedule(D.op)
    s[D].split(D.op.axis[0], nparts=3, disable_predication=True)   # divides: nothing to do
    assert "if (" not in str(tc.lower(s, [C, D]))
    s = tc.create_schedule(D.op)
    s[D].split(D.op.axis[0], factor=5, disable_predication=True)
    with pytest.raises(tc.ScheduleError, match=r"the inner extent 5 does not divide the "
                                               r"axis' extent 12"):
        tc.lower(s, [C, D])


# ---------------------------------------------------------------------------------------
# tc.fma: a * b + c rounded once


def test_fma_rounds_once_on_every_backend():
    from tecomp.ir import interp

    n = 4096
    A, B, C = (tc.placeholder((n,), name=nm) for nm in "ABC")
    D = tc.compute((n,), lambda i: tc.fma(A[i], B[i], C[i]), name="D")
    rng = np.random.default_rng(0)
    a, b, c = (rng.standard_normal(n).astype(np.float32) for _ in range(3))
    c[:100] = -(a[:100].astype(np.float64) * b[:100]).astype(np.float32)  # cancellation
    want = (a.astype(np.float64) * b + c).astype(np.float32)  # exact product in float64
    s = tc.create_schedule(D.op)
    xo, xi = s[D].split(D.op.axis[0], factor=16)
    s[D].vectorize(xi)
    f = tc.build(s, [A, B, C, D])
    d = np.empty(n, np.float32)
    f(a, b, c, d)
    np.testing.assert_array_equal(d, want)
    assert np.count_nonzero(d[:100]) > 50   # the product's rounding error, kept
    d2 = np.empty(n, np.float32)
    interp.run(tc.lower(s, [A, B, C, D]), a, b, c, d2)
    np.testing.assert_array_equal(d2, want)
    s2 = tc.create_schedule(D.op)
    bx, tx = s2[D].split(D.op.axis[0], factor=64)
    s2[D].bind(bx, tc.thread_axis("blockIdx.x"))
    s2[D].bind(tx, tc.thread_axis("threadIdx.x"))
    assert "fmaf(" in tc.build(s2, [A, B, C, D], target="cuda").get_source("cuda")
    gA, gB, gC = tc.gradient(D, [A, B, C])
    assert (str(gA.op.body), str(gB.op.body), str(gC.op.body)) == ("B[ax0]", "A[ax0]", "1f")
    with pytest.raises(tc.DTypeError, match=r"tc.fma needs a float argument"):
        tc.fma(tc.var("i"), 2, 3)
    with pytest.raises(tc.ExprError, match=r"tc.fma takes 3 argument\(s\), got 2"):
        tc.te.intrin._op.call("fma", A[0], B[0])


def test_power_operator_is_pow():
    """``a ** b`` on float expressions is ``tc.pow(a, b)`` (a Python number on either side
    taking the other side's dtype: ``x ** 2`` is pow by a constant 2, one multiply), the
    same bits as tc.pow, compiled and in the interpreter; ``**`` on an integer
    expression is a DTypeError (tests/must_fail)."""
    from tecomp.ir import interp

    n = 256
    A = tc.placeholder((n,), name="A")
    B = tc.placeholder((n,), name="B")
    C = tc.compute((n,), lambda i: A[i] ** B[i] + A[i] ** 2 + 2 ** A[i], name="C")
    D = tc.compute((n,), lambda i: tc.pow(A[i], B[i]) + tc.pow(A[i], 2.0) + tc.pow(2.0, A[i]),
                   name="D")
    assert str(C.op.body) == str(D.op.body)
    rng = np.random.default_rng(3)
    a = rng.uniform(0.1, 4.0, n).astype(np.float32)
    b = rng.uniform(-4.0, 4.0, n).astype(np.float32)
    outs = []
    for T in (C, D):
        s = tc.create_schedule(T.op)
        s[T].vectorize(s[T].split(T.op.axis[0], factor=16)[1])
        out = np.empty(n, np.float32)
        tc.build(s, [A, B, T])(a, b, out)
        outs.append(out)
    np.testing.assert_array_equal(outs[0], outs[1])
    want = a.astype(np.float64) ** b + a.astype(np.float64) ** 2 + 2.0 ** a
    np.testing.assert_allclose(outs[0], want, rtol=1e-6)
    ref = np.empty(n, np.float32)
    interp.run(tc.lower(tc.create_schedule(C.op), [A, B, C]), a, b, ref)
    np.testing.assert_allclose(ref, want, rtol=1e-6)


# ---------------------------------------------------------------------------------------
# create_group


def _chain():
    A = tc.placeholder((32, 32), name="A")
    B = tc.compute((32, 32), lambda i, j: A[i, j] + 1.0, name="B")
    C = tc.compute((32, 32), lambda i, j: B[i, j] * 2.0, name="C")
    D = tc.compute((32, 32), lambda i, j: C[i, j] - 1.0, name="D")
    return A, B, C, D


@pytest.mark.parametrize("backend", ["llvm", "interp"])
def test_create_group_computes_its_stages_together(backend):
    from tecomp.ir import interp

    A, B, C, D = _chain()
    s = tc.create_schedule(D.op)
    xo, yo, xi, yi = s[D].tile(D.op.axis[0], D.op.axis[1], 8, 8)
    g = s.create_group(outputs=C, inputs=A)
    assert [st.name for st in g.stages] == ["B", "C"]
    s[B].compute_at(s[C], s[C].op.axis[0])        # a member inside another stays there
    g.compute_at(s[D], yo)
    assert (s[C].attach_stage, s[C].attach_ivar) == (s[D], yo)
    assert s[B].attach_stage is s[C]
    a = np.random.default_rng(0).random((32, 32), dtype=np.float32)
    d = np.empty_like(a)
    if backend == "llvm":
        tc.build(s, [A, D])(a, d)
    else:
        interp.run(tc.lower(s, [A, D]), a, d)
    np.testing.assert_allclose(d, (a + 1) * 2 - 1, rtol=1e-6)
    assert "compute_at" in s.trace.python([A, D])  # replayable: the members' calls
    g.compute_root()
    assert s[C].attach_type == "root"
    s2 = tc.create_schedule(D.op)
    s2.create_group(outputs=C, inputs=A).compute_inline()
    assert s2[B].attach_type == s2[C].attach_type == "inline"
    g2 = s2.create_group(outputs=C, inputs=B, include_inputs=True)
    assert [st.name for st in g2.stages] == ["B", "C"]

