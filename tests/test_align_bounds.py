"""``s[T].align_bounds(axis, factor)`` (a stage computed past its tensor's edge in whole
blocks) and ``pragma(axis, "no_partition")`` (a loop that loop partitioning leaves
whole): the printed IR, the numbers through LLVM and the interpreter (which checks every
access against its buffer), and the GEMM schedule that uses both.  No timing here."""
import re

import numpy as np
import pytest

import tecomp as tc
from tecomp import nn
from tecomp.strategy import cpu as sc
from tecomp.testing import check_passes
from helpers import run

BACKENDS = ["llvm", "interp"]


def _scaled(n=100, block=16):
    """C = P + 1 with P = 2 * A (A's read guarded), P computed per block of C."""
    A = tc.placeholder((n,), name="A")
    P = tc.compute((n,), lambda i: tc.if_then_else(i < n, A[i], 0.0) * 2, name="P")
    C = tc.compute((n,), lambda i: P[i] + 1, name="C")
    s = tc.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=block)
    s[P].compute_at(s[C], xo)
    return s, A, P, C, xo, xi


@pytest.mark.parametrize("backend", BACKENDS)
def test_block_computed_whole_at_the_edge(backend):
    s, A, P, C, xo, xi = _scaled()
    s[P].align_bounds(P.op.axis[0], 16)
    s[C].pragma(xo, "no_partition")
    text = str(tc.lower(s, [A, C]))
    # one loop over the blocks, P always 16 wide, the read of A guarded by the
    # definition's if_then_else; C's own loop stops at the edge
    assert text.count("for (i.outer, 0, 7) {") == 1
    assert "for (i, 0, 16) {" in text
    assert "P[i] = select(i.outer*16 + i < 100, A[i.outer*16 + i], 0f)*2f" in text
    assert "for (i.inner, 0, min(100 - i.outer*16, 16)) {" in text
    a = np.arange(100, dtype="float32")
    c = np.full(100, np.nan, "float32")
    run(s, [A, C], [a, c], backend)
    np.testing.assert_array_equal(c, a * 2 + 1)


def test_without_align_the_block_is_clipped():
    s, A, P, C, xo, xi = _scaled()
    s[C].pragma(xo, "no_partition")
    text = str(tc.lower(s, [A, C]))
    assert re.search(r"for \(i, 0, min\(100 - i\.outer\*16, 16\)\)", text), text


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("factor", [1, 3, 8])
def test_factor_rounds_the_region_out(backend, factor):
    # P's region per block of 5 outputs of C is [5*io, 5*io + 4]; rounded out to
    # multiples of the factor it may start before and end after it
    n = 23
    A = tc.placeholder((n,), name="A")
    P = tc.compute((n,), lambda i: tc.if_then_else(i < n, A[i], 0.0) + 1, name="P")
    C = tc.compute((n,), lambda i: P[i] * 3, name="C")
    s = tc.create_schedule(C.op)
    xo, _ = s[C].split(C.op.axis[0], factor=5)
    s[P].compute_at(s[C], xo)
    s[P].align_bounds(P.op.axis[0], factor)
    func = tc.lower(s, [A, C])
    check_passes(s, [A, C])
    a = np.random.default_rng(1).standard_normal(n).astype("float32")
    c = np.full(n, np.nan, "float32")
    run(s, [A, C], [a, c], backend)
    np.testing.assert_allclose(c, (a + 1) * 3, rtol=1e-6)
    if factor == 1:
        assert "allocate P: float32[5]" in str(func)


def test_region_wholly_past_the_edge_is_skipped():
    # blocks of 4 panels of 8 over 52 columns: the last block's panel 3 lies past the
    # edge; the stage is skipped there, its result never read
    A = tc.placeholder((52,), name="A")
    P = tc.compute((52,), lambda i: tc.if_then_else(i < 52, A[i], 0.0) * 2, name="P")
    C = tc.compute((52,), lambda i: P[i] - 1, name="C")
    s = tc.create_schedule(C.op)
    bo, bi = s[C].split(C.op.axis[0], factor=32)
    po, pi = s[C].split(bi, factor=8)
    s[P].compute_at(s[C], po)
    s[P].align_bounds(P.op.axis[0], 8)
    for ax in (bo, po):
        s[C].pragma(ax, "no_partition")
    text = str(tc.lower(s, [A, C]))
    assert "if (i.outer*4 + i.inner.outer < 7) {" in text, text
    assert text.count("for (i, 0, 8) {") == 1
    for backend in BACKENDS:
        a = np.arange(52, dtype="float32")
        c = np.full(52, np.nan, "float32")
        run(s, [A, C], [a, c], backend)
        np.testing.assert_array_equal(c, a * 2 - 1)


@pytest.mark.parametrize("guard", [
    lambda i, n, A: tc.if_then_else(~(i >= n), A[i], 0.0),                  # ~ of a comparison
    lambda i, n, A: tc.if_then_else(~(~(i < n) | (i < 0)), A[i], 0.0),      # ~ of |
    lambda i, n, A: tc.if_then_else(i >= n, 0.0, A[i]),                     # the else branch
])
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_guard_through_negation_proves_the_read(guard, backend):
    """The fuzzer's conditions edge family (seed 9301744): a guard written through ~ and
    | (or a read in the else branch) proves the read in bounds as the plain guard does;
    align_bounds refused it (a ScheduleError)."""
    n = 100
    A = tc.placeholder((n,), name="A")
    P = tc.compute((n,), lambda i: guard(i, n, A) * 2, name="P")
    C = tc.compute((n,), lambda i: P[i] + 1, name="C")
    s = tc.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=16)
    s[P].compute_at(s[C], xo)
    s[P].align_bounds(P.op.axis[0], 16)
    a = np.arange(n, dtype="float32")
    c = np.zeros(n, "float32")
    run(s, [A, C], [a, c], backend)
    np.testing.assert_allclose(c, a * 2 + 1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_symbolic_extent(backend):
    n = tc.var("n")
    s, A, P, C, xo, xi = _scaled(n, block=8)
    s[P].align_bounds(P.op.axis[0], 8)
    assert "allocate P: float32[8]" in str(tc.lower(s, [A, C, n]))
    for size in (1, 8, 13):
        a = np.arange(size, dtype="float32")
        c = np.full(size, np.nan, "float32")
        run(s, [A, C, n], [a, c, size], backend)
        np.testing.assert_array_equal(c, a * 2 + 1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_partition_keeps_the_guard(backend):
    A = tc.placeholder((36,), name="A")
    C = tc.compute((36,), lambda i: A[i] * 2, name="C")
    s = tc.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=8)
    s[C].vectorize(xi)
    plain = str(tc.lower(s, [A, C]))
    # partitioned: 4 blocks of 8 lanes and a tail of 4, no guard
    assert "if (" not in plain
    assert "vectorized (i.inner, 0, 8)" in plain and "vectorized (i.inner, 0, 4)" in plain
    s[C].pragma(xo, "no_partition")
    held = str(tc.lower(s, [A, C]))
    assert "// attr pragma_no_partition = None" in held
    assert held.count("vectorized (i.inner, 0, 8)") == 1   # one loop, lanes masked
    assert "if (i.outer*8 + i.inner < 36) {" in held
    a = np.arange(36, dtype="float32")
    c = np.full(36, np.nan, "float32")
    run(s, [A, C], [a, c], backend)
    np.testing.assert_array_equal(c, a * 2)


def _micro_kernels(text):
    """The update statements of the GEMM register block (one per micro-kernel copy)."""
    return re.findall(r"matmul\.local\[[^\]]*\] = matmul\.local\[[^\]]*\] \+", text)


@pytest.mark.parametrize("shape", [(1000, 1000, 1000), (127, 509, 257), (64, 100, 40),
                                   (3, 37, 5), (50, 50, 50)])
@pytest.mark.parametrize("nr", [32, 48, 64, "plain"])
@pytest.mark.parametrize("threads", [1, 2])
def test_gemm_column_edge_is_one_kernel(shape, nr, threads):
    """matmul_packed (and plain matmul, whose copy of B is padded) with N not a multiple
    of the panel width: the last panel's block is computed over the zero-padded panel;
    one micro-kernel for every column panel (a second only for a row tail), the copy to
    C masked, wherever the reduction is one slice."""
    m, n, k = shape
    A = tc.placeholder((m, k), name="A")
    B = tc.placeholder((k, n), name="B")
    if nr == "plain":
        C = nn.matmul(A, B)
        nr = sc.gemm_params(m, n, k).nr
    else:
        C = sc.matmul_packed(A, B, nr=nr)
    old = tc.get_num_threads()
    tc.set_num_threads(threads)
    try:
        # (the template's blocking given: without a config a matmul of at most 16 rows
        # streams B in place, tests/test_skinny_gemm.py)
        s = sc.schedule_matmul(C, config={"nr": nr})
        text = str(tc.lower(s, [A, B, C]))
        f = tc.build(s, [A, B, C])
        p = sc.gemm_params(m, n, k, nr=nr)
    finally:
        tc.set_num_threads(old)
    # (a reduction longer than one slice, as K=1000 with a 512 KiB L2, accumulates in C
    # itself: its edge panel cannot be computed past C's edge, so it keeps an edge kernel)
    if n % nr and n > nr and p.kc == k:
        kernels = 1 if m % p.mr == 0 else 2   # (a row tail: a second micro-kernel)
        if p.par == "threads" and threads > 1 and -(-m // p.mr) % threads:
            # one copy of the nest per share length (_thread_shares); the row tail
            # only in the last share's
            kernels += 1
        assert len(_micro_kernels(text)) == kernels, text
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k)).astype("float32")
    b = rng.standard_normal((k, n)).astype("float32")
    c = np.full((m, n), np.nan, "float32")
    f(a, b, c)
    np.testing.assert_allclose(c, a.astype("float64") @ b.astype("float64"), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target", ["llvm -mcpu=skylake-avx512", "llvm -mcpu=haswell"])
@pytest.mark.parametrize("packed", [True, False])
def test_gemm_edge_through_the_interpreter(packed, target):
    """The interpreter checks every load and store against its buffer: the block past
    the edge reads only the packed panel (zero there) and writes only C's columns.  For
    AVX2 (6-row panels, two per 12-row block: the last block's second panel is empty)
    too; its read check once refused this schedule."""
    from tecomp.ir import interp

    A = tc.placeholder((13, 9), name="A")
    B = tc.placeholder((9, 70), name="B")
    C = sc.matmul_packed(A, B, nr=32) if packed else nn.matmul(A, B)
    s = sc.schedule_matmul(C, target=target)
    rng = np.random.default_rng(2)
    a = rng.standard_normal((13, 9)).astype("float32")
    b = rng.standard_normal((9, 70)).astype("float32")
    c = np.full((13, 70), np.nan, "float32")
    interp.run(tc.lower(s, [A, B, C], target=target), a, b, c)
    np.testing.assert_allclose(c, a.astype("float64") @ b.astype("float64"), rtol=1e-5, atol=1e-5)


def test_dense_packed_with_bias_at_the_edge():
    X = tc.placeholder((20, 33), name="X")
    W = tc.placeholder((70, 33), name="W")
    bias = tc.placeholder((70,), name="bias")
    Y = sc.dense_packed(X, W, bias, nr=32)
    f = tc.build(sc.schedule_dense(Y), [X, W, bias, Y])
    rng = np.random.default_rng(3)
    x = rng.standard_normal((20, 33)).astype("float32")
    w = rng.standard_normal((70, 33)).astype("float32")
    bb = rng.standard_normal(70).astype("float32")
    y = np.full((20, 70), np.nan, "float32")
    f(x, w, bb, y)
    np.testing.assert_allclose(y, x.astype("float64") @ w.T.astype("float64") + bb, rtol=1e-4,
                               atol=1e-4)


@pytest.mark.parametrize("backend", BACKENDS)
def test_cache_read_pad(backend):
    """cache_read(..., pad=v): the copy is v past the tensor's edge, so it can be
    computed there in whole blocks (its read of the tensor is guarded)."""
    A = tc.placeholder((30,), name="A")
    C = tc.compute((30,), lambda i: A[i] * 3, name="C")
    s = tc.create_schedule(C.op)
    AL = s.cache_read(A, "local", [C], pad=0.0)
    xo, xi = s[C].split(C.op.axis[0], factor=8)
    s[AL].compute_at(s[C], xo)
    s[AL].align_bounds(AL.op.axis[0], 8)
    text = str(tc.lower(s, [A, C]))
    assert "allocate A.local: float32[8] (local)" in text
    # partitioned: 3 whole blocks, then the last one padded past A's 30 elements (its
    # copy partitioned too: 6 elements copied, 2 zeros, no select)
    assert "A.local[i0] = A[i.outer*8 + i0]" in text, text
    assert "for (i0, 0, 6) {\n    A.local[i0] = A[i0 + 24]" in text, text
    assert "for (i0, 6, 2) {\n    A.local[i0] = 0f" in text, text
    a = np.arange(30, dtype="float32")
    c = np.full(30, np.nan, "float32")
    run(s, [A, C], [a, c], backend)
    np.testing.assert_array_equal(c, a * 3)


def _padded_dot(pad_b=True):
    """``S[i] = sum(A[i, k] * B[k], k < 100)`` run in steps of 16 to 112: A and B read
    through copies zero past their edge, computed whole per step (``align_bounds``)."""
    A = tc.placeholder((20, 100), name="A")
    B = tc.placeholder((100,), name="B")
    k = tc.reduce_axis((0, 100), name="k")
    S = tc.compute((20,), lambda i: tc.sum(A[i, k] * B[k], axis=k), name="S")
    s = tc.create_schedule(S.op)
    copies = [s.cache_read(A, "global", [S], pad=0.0)]
    if pad_b:
        copies.append(s.cache_read(B, "global", [S], pad=0.0))
    ko, _ = s[S].split(S.op.reduce_axis[0], factor=16)
    s[S].align_bounds(S.op.reduce_axis[0], 16)
    for P in copies:
        s[P].compute_at(s[S], ko)
        s[P].align_bounds(P.op.axis[-1], 16)
    return s, [A, B, S]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_reduction_aligned_runs_whole_steps_over_zeros(backend):
    """align_bounds on a reduce axis (what the tensor-core GEMM's odd K takes): the sum
    runs 7 whole steps of 16, no guard on its inner loop; the copies hold zeros past 100."""
    s, args = _padded_dot()
    text = str(tc.lower(s, args))
    assert "for (k.outer, 0, 7) {" in text and "for (k.inner, 0, 16) {" in text
    assert "k.outer*16 + k.inner < 100" not in text
    rng = np.random.default_rng(0)
    a, b = rng.random((20, 100), np.float32), rng.random(100, np.float32)
    out = np.full(20, np.nan, np.float32)
    run(s, args, [a, b, out], backend)
    np.testing.assert_allclose(out, a @ b, rtol=1e-5)
