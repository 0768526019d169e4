"""The plain-TE corpus (``tecomp.testing.te_corpus``): every operator right under the
default schedule (``tc.auto_schedule``, trials=0) and under the trivial one
(``tecomp.strategy.trivial``), against numpy; and the rules and the code generator's
choices its timings led to (a reduction vectorized along its output where every operand
is broadcast there, a masked store into a function's own stack buffer as a blend).
Speed is in ``benchmarks/te_corpus.py``, not here."""
import numpy as np
import pytest

import tecomp as tc
from tecomp.strategy import rules
from tecomp.strategy.trivial import trivial_schedule
from tecomp.testing import te_corpus


def _run(c, s):
    f = tc.build(s, c.args)
    o = c.empty_output()
    f(*c.inputs, o)
    return o


@pytest.mark.parametrize("name", te_corpus.names())
@pytest.mark.parametrize("kind", ["default", "trivial"])
def test_corpus_against_numpy(name, kind):
    if "bfloat16" in name:
        pytest.importorskip("ml_dtypes")
    c = te_corpus.make(name)
    s = tc.auto_schedule(c.args) if kind == "default" else trivial_schedule(c.args)
    o = _run(c, s)
    np.testing.assert_allclose(o.astype(np.float64), c.want, rtol=c.rtol, atol=c.atol)


def test_corpus_covers_dtypes_and_ranks():
    """The corpus reaches the integer and half-precision dtypes and 1-4 dimensions (a
    case dropped or narrowed would leave them untested under both schedules)."""
    dtypes, ranks = set(), set()
    for name in te_corpus.names():
        if "bfloat16" in name:
            continue   # (its inputs need ml_dtypes)
        for a in te_corpus.make(name).args:
            dtypes.add(a.dtype)
            ranks.add(len(a.shape))
    assert {"float32", "float16", "int32", "int64"} <= dtypes, dtypes
    assert {1, 2, 3, 4} <= ranks, ranks


def _cumsum(M=8, N=48, dtype="float32"):
    X = tc.placeholder((M, N), dtype, name="x")
    k = tc.reduce_axis(N, name="k")
    Y = tc.compute((M, N), lambda i, j: tc.sum(tc.if_then_else(k <= j, X[i, k], 0), axis=k),
                   name="y")
    return X, Y


def test_masked_reduction_is_vectorized_along_its_output():
    """A cumulative sum written as ``sum(where(k <= j, x[i, k], 0))``: every operand is
    broadcast along ``j``, so ``j`` takes the lanes (no reduction across lanes); with
    VECTOR_OUTPUTS off, the row reduction as before.  Both right."""
    X, Y = _cumsum()
    x = np.random.default_rng(1).standard_normal((8, 48)).astype(np.float32)
    s = tc.auto_schedule([X, Y])
    text = str(tc.lower(s, [X, Y]))
    assert "vectorized (j" in text and ".rf" not in text
    y = np.zeros_like(x)
    tc.build(s, [X, Y])(x, y)
    np.testing.assert_allclose(y, np.cumsum(x, 1), rtol=1e-5, atol=1e-5)
    old = rules.VECTOR_OUTPUTS
    rules.VECTOR_OUTPUTS = False
    try:
        s2 = tc.auto_schedule([X, Y])
    finally:
        rules.VECTOR_OUTPUTS = old
    assert ".rf" in str(tc.lower(s2, [X, Y]))
    y2 = np.zeros_like(x)
    tc.build(s2, [X, Y])(x, y2)
    np.testing.assert_allclose(y2, np.cumsum(x, 1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("N", [16, 40, 64, 100])
def test_vector_output_rows_of_any_length(N):
    """Rows of one vector, of a vector and a tail, of four vectors, of six and a tail
    (int32: exact)."""
    X, Y = _cumsum(5, N, "int32")
    x = np.random.default_rng(N).integers(-50, 50, (5, N)).astype(np.int32)
    s = tc.auto_schedule([X, Y])
    assert "vectorized (j" in str(tc.lower(s, [X, Y]))
    y = np.zeros_like(x)
    tc.build(s, [X, Y])(x, y)
    np.testing.assert_array_equal(y, np.cumsum(x, 1))


def test_row_reductions_keep_their_vectors():
    """A row sum (its operand moves along its output with a stride) and a matrix-vector
    product keep the reduction's vectors: only operands broadcast along the output
    move the lanes."""
    c = te_corpus.make("row_sum_odd")
    assert ".rf" in str(tc.lower(tc.auto_schedule(c.args), c.args))
    c = te_corpus.make("matvec_odd")
    assert ".rf" in str(tc.lower(tc.auto_schedule(c.args), c.args))


def _row_max(M=3, N=300):
    X = tc.placeholder((M, N), "int32", name="x")
    k = tc.reduce_axis(N, name="k")
    Y = tc.compute((M,), lambda i: tc.max(X[i, k], axis=k), name="y")
    return X, Y


def test_tail_of_a_row_reduction_blends_its_partial_results():
    """The masked tail step of a row reduction (300 steps: no whole number of four
    vectors at any width, 4 x 64 + 44 with AVX-512) updates its partial
    results on the stack with a blend and a plain store, not ``llvm.masked.store``
    (which kept them in memory); the lanes off keep their values: each row's maximum
    in a lane the tail leaves off (lane 50 of 64 with AVX-512), in the tail's last
    element, in its first."""
    X, Y = _row_max()
    f = tc.build(tc.auto_schedule([X, Y]), [X, Y])
    assert "llvm.masked.store" not in f.get_source("llvm")
    x = np.zeros((3, 300), np.int32) - 5
    x[0, 50] = 7          # a lane the tail leaves off
    x[1, 299] = 9         # the tail's last lane
    x[2, 256] = 4         # the tail's first lane
    x[2, 40] = 3
    y = np.zeros(3, np.int32)
    f(x, y)
    np.testing.assert_array_equal(y, x.max(1))
    x = np.random.default_rng(3).integers(-10 ** 9, 10 ** 9, (3, 300)).astype(np.int32)
    f(x, y)
    np.testing.assert_array_equal(y, x.max(1))


def test_masked_store_into_an_output_stays_masked():
    """A vectorized loop's tail storing into an argument (another thread's memory, or
    past the array's end) keeps ``llvm.masked.store``: only a function's own stack
    buffers are blended."""
    X = tc.placeholder((5, 40), name="x")
    Y = tc.compute((5, 40), lambda i, j: X[i, j] * 2.0, name="y")
    s = tc.create_schedule(Y.op)
    jo, ji = s[Y].split(Y.op.axis[1], factor=64)
    s[Y].vectorize(ji)
    f = tc.build(s, [X, Y])
    assert "llvm.masked.store" in f.get_source("llvm")
    x = np.arange(200, dtype=np.float32).reshape(5, 40)
    y = np.full((5, 40), -1, np.float32)
    f(x, y)
    np.testing.assert_array_equal(y, x * 2)


def _vector_step(s, args):
    """The split lines of ``s``'s trace (the vector steps' factors among them)."""
    return [ln for ln in s.trace.python(args).splitlines() if ".split(" in ln]


def test_a_row_cut_per_row_is_one_vector_a_step():
    """A causal mask fill (``j <= i``: loop partitioning cuts each row where it moves)
    steps one vector at a time; a concatenation's select (``j < 300``: the same cut in
    every row) and a plain row keep four vectors a step."""
    four = f"factor={4 * tc.target.cpu_model().lanes})"
    c = te_corpus.make("causal_mask_fill")
    assert rules._Rules._cut_per_row(c.out.op)
    assert [ln for ln in _vector_step(tc.auto_schedule(c.args), c.args)
            if four in ln] == []
    for name in ("concat_select", "float16_affine"):
        c = te_corpus.make(name)
        assert not rules._Rules._cut_per_row(c.out.op)
    c = te_corpus.make("float16_affine")
    assert any(four in ln for ln in _vector_step(tc.auto_schedule(c.args), c.args))
    old = rules.VECTOR_STEP_CUTS
    rules.VECTOR_STEP_CUTS = False
    try:
        c = te_corpus.make("causal_mask_fill")
        s = tc.auto_schedule(c.args)
    finally:
        rules.VECTOR_STEP_CUTS = old
    assert any(four in ln for ln in _vector_step(s, c.args))
    np.testing.assert_array_equal(_run(c, s), c.want)
