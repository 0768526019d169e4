"""Every schedule primitive lowers to loops that compute the same values (numerics vs
numpy), through the LLVM build and through the reference interpreter."""
import numpy as np
import pytest

import tecomp as tc
from helpers import (conv2d_nchw, conv2d_ref, matmul, matmul_data, run, softmax, softmax_ref,
                     triangular_sum)

BACKENDS = ["llvm", "interp"]


def _check_mm(s, A, B, C, backend, rtol=1e-5):
    a, b, c = matmul_data(A, B, C)
    run(s, [A, B, C], [a, b, c], backend)
    np.testing.assert_allclose(c, a.astype("float64") @ b, rtol=rtol)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("factor", [1, 4, 5, 8, 32, 40])
def test_split_factor(backend, factor):
    A, B, C, k = matmul(n=32, m=24, K=16)
    s = tc.create_schedule(C.op)
    s[C].split(C.op.axis[0], factor=factor)
    _check_mm(s, A, B, C, backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("nparts", [1, 3, 7])
def test_split_nparts(backend, nparts):
    A, B, C, k = matmul(n=20, m=9, K=7)
    s = tc.create_schedule(C.op)
    s[C].split(C.op.axis[1], nparts=nparts)
    _check_mm(s, A, B, C, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_split_reduce_axis_non_divisible(backend):
    A, B, C, k = matmul(n=8, m=8, K=13)
    s = tc.create_schedule(C.op)
    ko, ki = s[C].split(k, factor=4)
    s[C].reorder(ko, C.op.axis[0], ki, C.op.axis[1])
    _check_mm(s, A, B, C, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_tile_reorder_vectorize_parallel_unroll(backend):
    A, B, C, k = matmul(n=30, m=20, K=12)
    s = tc.create_schedule(C.op)
    xo, yo, xi, yi = s[C].tile(C.op.axis[0], C.op.axis[1], 8, 8)
    ko, ki = s[C].split(k, factor=4)
    s[C].reorder(xo, yo, ko, xi, ki, yi)
    s[C].vectorize(yi)
    s[C].unroll(ki)
    s[C].parallel(xo)
    _check_mm(s, A, B, C, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_fuse(backend):
    A, B, C, k = matmul(n=6, m=10, K=5)
    s = tc.create_schedule(C.op)
    f = s[C].fuse(*C.op.axis)
    fo, fi = s[C].split(f, factor=7)
    s[C].parallel(fo)
    _check_mm(s, A, B, C, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_fuse_reduce_axes(backend):
    X = tc.placeholder((5, 6, 7), name="X")
    r1 = tc.reduce_axis((0, 6), name="r1")
    r2 = tc.reduce_axis((0, 7), name="r2")
    Y = tc.compute((5,), lambda i: tc.sum(X[i, r1, r2], axis=[r1, r2]), name="Y")
    s = tc.create_schedule(Y.op)
    s[Y].fuse(r1, r2)
    x = np.random.rand(5, 6, 7).astype("float32")
    y = np.empty(5, "float32")
    run(s, [X, Y], [x, y], backend)
    np.testing.assert_allclose(y, x.sum(axis=(1, 2)), rtol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_compute_at_pad_conv(backend):
    data, weight, padded, out = conv2d_nchw(C=3, H=9, W=9, K=4, stride=2, pad=1)
    s = tc.create_schedule(out.op)
    n, kk, y, x = out.op.axis
    yo, yi = s[out].split(y, factor=2)
    s[padded].compute_at(s[out], yo)
    d = np.random.rand(1, 3, 9, 9).astype("float32")
    w = np.random.rand(4, 3, 3, 3).astype("float32")
    o = np.empty([int(e.value) for e in out.shape], "float32")
    run(s, [data, weight, out], [d, w, o], backend)
    np.testing.assert_allclose(o, conv2d_ref(d, w, stride=2, pad=1), rtol=1e-5)


def test_compute_at_region_is_tile_plus_halo():
    data, weight, padded, out = conv2d_nchw(C=2, H=16, W=16, K=2, stride=1, pad=1)
    s = tc.create_schedule(out.op)
    n, kk, y, x = out.op.axis
    yo, xo, yi, xi = s[out].tile(y, x, 4, 4)
    s[padded].compute_at(s[out], xo)
    text = str(tc.lower(s, [data, weight, out]))
    # a 4x4 output tile of a 3x3 conv reads a 6x6 input tile (all channels)
    assert "allocate pad: float32[1, 2, 6, 6] (global)" in text


@pytest.mark.parametrize("backend", BACKENDS)
def test_compute_inline(backend):
    A = tc.placeholder((16,), name="A")
    B = tc.compute((16,), lambda i: A[i] * 2, name="B")
    C = tc.compute((16,), lambda i: B[i] + B[15 - i], name="C")
    s = tc.create_schedule(C.op)
    s[B].compute_inline()
    text = str(tc.lower(s, [A, C]))
    assert "B[" not in text and "allocate" not in text
    a = np.random.rand(16).astype("float32")
    c = np.empty(16, "float32")
    run(s, [A, C], [a, c], backend)
    np.testing.assert_allclose(c, a * 2 + (a * 2)[::-1], rtol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_compute_root_after_compute_at(backend):
    A = tc.placeholder((16,), name="A")
    B = tc.compute((16,), lambda i: A[i] * 2, name="B")
    C = tc.compute((16,), lambda i: B[i] + 1, name="C")
    s = tc.create_schedule(C.op)
    s[B].compute_at(s[C], C.op.axis[0])
    s[B].compute_root()
    a = np.random.rand(16).astype("float32")
    c = np.empty(16, "float32")
    run(s, [A, C], [a, c], backend)
    np.testing.assert_allclose(c, a * 2 + 1, rtol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_cache_read_write(backend):
    A, B, C, k = matmul(n=16, m=16, K=8)
    s = tc.create_schedule(C.op)
    AL = s.cache_read(A, "local", [C])
    CL = s.cache_write(C, "local")
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 4, 4)
    s[CL].compute_at(s[C], jo)
    s[AL].compute_at(s[CL], s[CL].op.reduce_axis[0])
    text = str(tc.lower(s, [A, B, C]))
    assert "allocate C.local: float32[4, 4] (local)" in text
    _check_mm(s, A, B, C, backend)


def test_cache_write_blocks():
    """``cache_write(..., blocks=)``: the cache stored blocked as ``cache_read``'s copy
    is (the outer parts, then the inner ones in the order listed), twice in a row, the
    middle one inlined: C[16, 32] accumulated as [16, 2, 8, 2] (column ``j`` at
    ``[j // 16, j % 8, j // 8 % 2]``), a vector of the last two dimensions; the trace
    replays it."""
    from tecomp.schedule.trace import replay

    A, B, C, k = matmul(n=16, m=32, K=8)
    s = tc.create_schedule(C.op)
    C1 = s.cache_write(C, "local", blocks=[(1, 8)])
    C2 = s.cache_write(C1, "local", blocks=[(1, 2)])
    assert [int(e.value) for e in C1.shape] == [16, 4, 8]
    assert [int(e.value) for e in C2.shape] == [16, 2, 8, 2]
    s[C1].compute_inline()
    jo, ji = s[C].split(C.op.axis[1], factor=16)
    s[C].vectorize(ji)
    s[C2].compute_at(s[C], jo)
    i, j, q, r = s[C2].op.axis
    s[C2].reorder(i, j, s[C2].op.reduce_axis[0], q, r)
    s[C2].vectorize(s[C2].fuse(q, r))
    text = str(tc.lower(s, [A, B, C]))
    assert "C.local.local[0, 0, j.inner % 8, j.inner // 8]" in text, text
    _check_mm(s, A, B, C, "llvm")
    s2 = replay(s.trace.to_json(), [C])
    assert str(tc.lower(s2, [A, B, C])) == text


@pytest.mark.parametrize("seed", range(6))
def test_cache_write_blocks_random(seed):
    """Random blocked caches of a 3-d reduction (each dimension blocked or not, by a
    random divisor, in a random order, once or twice in a row), computed at a random
    loop of the output or at the root, the last dimension vectorized or not: every one
    computes the sum."""
    rng = np.random.default_rng(seed)
    shape = [int(rng.choice([4, 6, 8, 12])) for _ in range(3)]
    X = tc.placeholder(tuple(shape) + (5,), name="X")
    r = tc.reduce_axis((0, 5), name="r")
    Y = tc.compute(tuple(shape), lambda i, j, k: tc.sum(X[i, j, k, r] * 2.0, axis=r), name="Y")
    s = tc.create_schedule(Y.op)
    src, made = Y, []
    for _ in range(int(rng.integers(1, 3))):
        dims = [int(d) for d in rng.permutation(len(src.shape))[:int(rng.integers(1, 3))]]
        blocks = []
        for d in dims:
            ext = int(src.shape[d].value)
            blocks.append((d, int(rng.choice([f for f in range(1, ext + 1) if ext % f == 0]))))
        src = s.cache_write(src, "local", blocks=blocks)
        made.append(src)
    for c in made[:-1]:
        s[c].compute_inline()
    last = s[made[-1]]
    if rng.random() < 0.5:
        last.compute_at(s[Y], s[Y].op.axis[int(rng.integers(0, 3))])
    if rng.random() < 0.5:
        last.vectorize(last.op.axis[-1])
    x = np.random.default_rng(seed).random(tuple(shape) + (5,)).astype("float32")
    y = np.full(shape, np.nan, "float32")
    tc.build(s, [X, Y], checks=True)(x, y)
    np.testing.assert_allclose(y, 2 * x.sum(axis=3), rtol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("factor_axis", [0, 1])
def test_rfactor(backend, factor_axis):
    X = tc.placeholder((6, 50), name="X")
    k = tc.reduce_axis((0, 50), name="k")
    Y = tc.compute((6,), lambda i: tc.sum(X[i, k], axis=k), name="Y")
    s = tc.create_schedule(Y.op)
    ko, ki = s[Y].split(k, factor=8)
    YF = s.rfactor(Y, ki, factor_axis=factor_axis)
    assert tuple(int(e.value) for e in YF.shape) == ((8, 6) if factor_axis == 0 else (6, 8))
    s[YF].vectorize(s[YF].op.axis[factor_axis])
    x = np.random.rand(6, 50).astype("float32")
    y = np.empty(6, "float32")
    run(s, [X, Y], [x, y], backend)
    np.testing.assert_allclose(y, x.sum(axis=1), rtol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("split", [None, 8])
def test_rfactor_of_fused_reduce_axes(backend, split):
    """Reduce axes fused (a global pooling's plane as one run), the run itself or its
    inner part (a guarded tail: 30 = 3 x 8 + 6) factored; a reduce axis that starts
    past 0 (``r2`` in 1..6) kept where it starts."""
    X = tc.placeholder((4, 6, 6), name="X")
    r1 = tc.reduce_axis((0, 6), name="r1")
    r2 = tc.reduce_axis((1, 6), name="r2")
    Y = tc.compute((4,), lambda i: tc.max(X[i, r1, r2], axis=[r1, r2]), name="Y")
    s = tc.create_schedule(Y.op)
    run_ = s[Y].fuse(r1, r2)
    axis = run_ if split is None else s[Y].split(run_, factor=split)[1]
    YF = s.rfactor(Y, axis, factor_axis=1)
    assert tuple(int(e.value) for e in YF.shape) == (4, 30 if split is None else split)
    s[YF].vectorize(s[YF].op.axis[1])
    x = np.random.default_rng(5).standard_normal((4, 6, 6)).astype("float32")
    y = np.empty(4, "float32")
    run(s, [X, Y], [x, y], backend)
    np.testing.assert_array_equal(y, x[:, :, 1:].max(axis=(1, 2)))


def test_rfactor_of_fused_reduce_axes_past_int32():
    """A fused run longer than int32 (a 65536 x 65537 plane: 2**32 + 65536 elements)
    keeps its extent in int64 (an int32 product wrapped to 65536: 1024 steps of 64,
    the row index always 0), each axis recovered from it in int64."""
    X = tc.placeholder((2, 65536, 65537), name="X")
    r1 = tc.reduce_axis((0, 65536), name="r1")
    r2 = tc.reduce_axis((0, 65537), name="r2")
    Y = tc.compute((2,), lambda i: tc.sum(X[i, r1, r2], axis=[r1, r2]), name="Y")
    s = tc.create_schedule(Y.op)
    _, ri = s[Y].split(s[Y].fuse(r1, r2), factor=64)
    s.rfactor(Y, ri, factor_axis=1)
    text = str(tc.lower(s, [X, Y]))
    assert f"r1.r2.fused.outer, 0i64, {(65536 * 65537) // 64}i64)" in text, text
    assert "// 65537i64)" in text and "% 65537i64)" in text, text


@pytest.mark.parametrize("backend", BACKENDS)
def test_reduce_where_and_multiple_axes(backend):
    X = tc.placeholder((4, 5, 6), name="X")
    r1 = tc.reduce_axis((0, 5), name="r1")
    r2 = tc.reduce_axis((1, 6), name="r2")
    Y = tc.compute((4,), lambda i: tc.sum(X[i, r1, r2], axis=[r1, r2], where=r1 < r2), name="Y")
    s = tc.create_schedule(Y.op)
    x = np.random.rand(4, 5, 6).astype("float32")
    y = np.empty(4, "float32")
    run(s, [X, Y], [x, y], backend)
    mask = np.arange(5)[:, None] < np.arange(6)[None, :]
    mask[:, 0] = False
    np.testing.assert_allclose(y, (x * mask).sum(axis=(1, 2)), rtol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_max_min_prod_comm_reducer(backend):
    X = tc.placeholder((3, 7), name="X")
    k = tc.reduce_axis((0, 7), name="k")
    mx = tc.compute((3,), lambda i: tc.max(X[i, k], axis=k), name="mx")
    k2 = tc.reduce_axis((0, 7), name="k2")
    mn = tc.compute((3,), lambda i: tc.min(X[i, k2], axis=k2), name="mn")
    k3 = tc.reduce_axis((0, 7), name="k3")
    mul = tc.comm_reducer(lambda a, b: a * b, lambda t: tc.const(1, t), name="product")
    pr = tc.compute((3,), lambda i: mul(X[i, k3], axis=k3), name="pr")
    s = tc.create_schedule([mx.op, mn.op, pr.op])
    x = np.random.rand(3, 7).astype("float32") + 0.5
    outs = [np.empty(3, "float32") for _ in range(3)]
    run(s, [X, mx, mn, pr], [x] + outs, backend)
    np.testing.assert_allclose(outs[0], x.max(1))
    np.testing.assert_allclose(outs[1], x.min(1))
    np.testing.assert_allclose(outs[2], x.prod(1), rtol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_softmax_compute_at(backend):
    X, mx, ex, sm, Y = softmax(m=5, n=37)
    s = tc.create_schedule(Y.op)
    for t in (mx, ex, sm):
        s[t].compute_at(s[Y], Y.op.axis[0])
    jo, ji = s[Y].split(Y.op.axis[1], factor=8)
    s[Y].vectorize(ji)
    x = np.random.randn(5, 37).astype("float32")
    y = np.empty_like(x)
    run(s, [X, Y], [x, y], backend)
    np.testing.assert_allclose(y, softmax_ref(x), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("backend", BACKENDS)
def test_storage_align(backend):
    A = tc.placeholder((8, 10), name="A")
    B = tc.compute((8, 10), lambda i, j: A[i, j] + 1, name="B")
    C = tc.compute((8, 10), lambda i, j: B[i, j] * 2, name="C")
    s = tc.create_schedule(C.op)
    s[B].storage_align(B.op.axis[0], 16, 4)
    f = tc.lower(s, [A, C])
    alloc = [b for b in _allocs(f) if b.name == "B"][0]
    assert [int(x.value) for x in alloc.strides] == [20, 1]
    a = np.random.rand(8, 10).astype("float32")
    c = np.empty_like(a)
    run(s, [A, C], [a, c], backend)
    np.testing.assert_allclose(c, (a + 1) * 2, rtol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_storage_order(backend):
    """storage_order lays a buffer out in another order of its dimensions (indices and
    values stay): the strides follow the order, storage_align pads within it, and the
    printed IR shows the strides."""
    A = tc.placeholder((4, 6, 3), name="A")
    B = tc.compute((4, 6, 3), lambda i, j, k: A[i, j, k] * 2.0, name="B")
    C = tc.compute((4, 6, 3), lambda i, j, k: B[i, j, k] + 1.0, name="C")
    a = np.random.rand(4, 6, 3).astype("float32")
    for align, strides in ((None, [6, 1, 24]), (8, [8, 1, 32])):
        s = tc.create_schedule(C.op)
        i, j, k = B.op.axis
        s[B].storage_order(k, i, j)
        if align:
            s[B].storage_align(i, align, 0)
        f = tc.lower(s, [A, C])
        alloc = [b for b in _allocs(f) if b.name == "B"][0]
        assert [int(x.value) for x in alloc.strides] == strides
        assert f"allocate B: float32[4, 6, 3] (global, strides {strides})" in str(f)
        c = np.empty_like(a)
        run(s, [A, C], [a, c], backend)
        np.testing.assert_allclose(c, a * 2 + 1, rtol=1e-6)
    s = tc.create_schedule(C.op)
    s[B].storage_order(*B.op.axis)   # the identity: row major, printed as before
    assert "allocate B: float32[4, 6, 3] (global)" in str(tc.lower(s, [A, C]))


def test_storage_order_makes_a_transposing_copy_contiguous():
    """A copy of W[o, c] read along o, stored c-major: the vector along o is one
    contiguous load instead of a gather."""
    W = tc.placeholder((32, 5), name="W")
    C = tc.compute((5, 32), lambda c, o: W[o, c] * 2.0, name="C")
    w = np.random.rand(32, 5).astype("float32")
    for order in (False, True):
        s = tc.create_schedule(C.op)
        Wc = s.cache_read(W, "global", [C])
        if order:
            s[Wc].storage_order(Wc.op.axis[1], Wc.op.axis[0])
        s[C].vectorize(C.op.axis[1])
        f = tc.build(s, [W, C])
        ir = f.get_source("llvm-unopt")
        assert ("llvm.masked.gather" in ir) != order
        c = np.empty((5, 32), "float32")
        f(w, c)
        np.testing.assert_allclose(c, w.T * 2, rtol=1e-6)


def test_storage_order_of_a_shared_buffer_in_cuda():
    """The CUDA C indexes (and sizes) a shared array through its storage order: a tile
    of A read transposed, stored so that the threads of a warp read consecutive words."""
    A = tc.placeholder((64, 32), name="A")
    C = tc.compute((32, 64), lambda i, j: A[j, i] + 1.0, name="C")
    s = tc.create_schedule(C.op)
    As = s.cache_read(A, "shared", [C])
    s[As].storage_order(As.op.axis[1], As.op.axis[0])
    io, ii = s[C].split(C.op.axis[0], factor=8)
    s[C].bind(io, tc.thread_axis("blockIdx.x"))
    s[C].bind(C.op.axis[1], tc.thread_axis("threadIdx.x"))
    s[As].compute_at(s[C], io)
    s[As].bind(As.op.axis[0], tc.thread_axis("threadIdx.x"))
    f = tc.build(s, [A, C], target="cuda-emu")
    src = f.get_source("cuda")
    # stored [i1][i0]: consecutive threads (i0) touch consecutive words (no bank conflict)
    assert "__shared__ __align__(32) float A_shared[512];" in src
    assert "A_shared[((int)threadIdx.x) + (i_inner * 64)]" in src, src
    a = np.random.rand(64, 32).astype("float32")
    c = np.empty((32, 64), "float32")
    f(a, c)
    np.testing.assert_allclose(c, a.T + 1, rtol=1e-6)


def _allocs(f):
    from tecomp.ir.functor import collect
    from tecomp.ir.stmt import Allocate

    return [a.buffer for a in collect(f.body, lambda n: isinstance(n, Allocate))]


@pytest.mark.parametrize("backend", BACKENDS)
def test_pragma_unroll_explicit(backend):
    A = tc.placeholder((4, 3), name="A")
    B = tc.compute((4, 3), lambda i, j: A[i, j] * 3, name="B")
    s = tc.create_schedule(B.op)
    s[B].pragma(B.op.axis[1], "unroll_explicit")
    text = str(tc.lower(s, [A, B]))
    assert "B[i, 2] = A[i, 2]*3f" in text and "(j," not in text
    a = np.random.rand(4, 3).astype("float32")
    b = np.empty_like(a)
    run(s, [A, B], [a, b], backend)
    np.testing.assert_allclose(b, a * 3, rtol=1e-6)


def test_pragma_values_print_on_one_line():
    """A pragma's value is one line of the printed IR whatever it holds: a newline in a
    string escaped, a str subclass shown as the string (its own ``__repr__`` spanned
    lines), a float subclass as the float; the trace replays to the same IR."""
    class Str(str):
        def __repr__(self):
            return "s\n}\nB[0] = 1"

    class Float(float):
        def __str__(self):
            return "2.5\nB[0] = 1"

    A = tc.placeholder((4,), name="A")
    B = tc.compute((4,), lambda i: A[i] * 3, name="B")
    s = tc.create_schedule(B.op)
    s[B].pragma(B.op.axis[0], "note", "x\ny")
    s[B].pragma(B.op.axis[0], "sub", Str("ab"))
    s[B].pragma(B.op.axis[0], "num", Float(2.5))
    text = str(tc.lower(s, [A, B]))
    lines = [ln.strip() for ln in text.splitlines() if "attr pragma" in ln]
    assert lines == ["// attr pragma_note = 'x<U+005C>ny'", "// attr pragma_sub = 'ab'",
                     "// attr pragma_num = 2.5"], text
    assert "B[0] = 1" not in text
    from tecomp.schedule.trace import replay

    s2 = replay(s.trace.to_json(), [B])
    assert str(tc.lower(s2, [A, B])) == text


@pytest.mark.parametrize("backend", BACKENDS)
def test_symbolic_extent_split(backend):
    n = tc.var("n")
    A = tc.placeholder((n,), name="A")
    B = tc.compute((n,), lambda i: A[i] * 2 + 1, name="B")
    s = tc.create_schedule(B.op)
    xo, xi = s[B].split(B.op.axis[0], factor=8)
    s[B].vectorize(xi)
    for length in (1, 7, 8, 9, 33):
        a = np.random.rand(length).astype("float32")
        b = np.empty_like(a)
        run(s, [A, B], [a, b], backend)
        np.testing.assert_allclose(b, a * 2 + 1, rtol=1e-6)


def test_schedule_repr():
    A, B, C, k = matmul()
    s = tc.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=8)
    s[C].parallel(xo)
    s[C].vectorize(C.op.axis[1])
    assert repr(s) == ("schedule(\n  C: [i.outer:parallel, i.inner, j:vectorized, k] root, output\n)")


def test_normalize_returns_schedule():
    A, B, C, k = matmul()
    s = tc.create_schedule(C.op)
    assert s.normalize() is s


@pytest.mark.parametrize("backend", BACKENDS)
def test_cache_write_rebinds_a_dependent_reduce_extent(backend):
    A, B, a, want = triangular_sum()
    s = tc.create_schedule(B.op)
    BL = s.cache_write(B, "local")
    ko, ki = s[BL].split(s[BL].op.reduce_axis[0], factor=3)
    b = np.zeros(10, "float32")
    run(s, [A, B], [a, b], backend)
    np.testing.assert_allclose(b, want, rtol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_rfactor_of_a_dependent_reduce_extent(backend):
    A, B, a, want = triangular_sum()
    s = tc.create_schedule(B.op)
    ro, ri = s[B].split(B.op.reduce_axis[0], factor=4)
    s.rfactor(B, ri)
    b = np.zeros(10, "float32")
    run(s, [A, B], [a, b], backend)
    np.testing.assert_allclose(b, want, rtol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_cache_write_after_the_output_axes_were_scheduled(backend):
    """TVM code splits and annotates a stage, then caches its accumulation: the loops made
    of the output axes stay on the copy-out stage, the reduction moves to the cache, and
    the cache is computed at one of those loops (TVM itself drops the earlier split)."""
    A, B, C, k = matmul()
    s = tc.create_schedule(C.op)
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 4, 4)
    s[C].reorder(io, jo, k, ii, ji)      # the reduce axis among them: dropped with it
    s[C].parallel(io)
    CL = s.cache_write(C, "local")
    s[CL].compute_at(s[C], jo)
    assert [iv.name for iv in s[C].leaf_iter_vars] == ["i.outer", "j.outer", "i.inner",
                                                       "j.inner"]
    a, b, c = matmul_data(A, B, C)
    run(s, [A, B, C], [a, b, c], backend)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)
    assert "C.local[" in str(tc.lower(s, [A, B, C]))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("how", ["split", "compute_at"])
def test_dependent_reduce_extent_under_a_split_or_compute_at(backend, how):
    """The range of the reduction reads the output index i: under a split of i (i is
    i.outer*3 + i.inner) or computed at a consumer's loop (a region from 0) it is the
    index's value, not the loop counter named i (which gave an unbound i, or every row
    summed over the first row's range)."""
    A, B, a, want = triangular_sum()
    if how == "split":
        s = tc.create_schedule(B.op)
        s[B].split(B.op.axis[0], factor=3)
        out, args = B, [A, B]
    else:
        out = tc.compute((10,), lambda i: B[i] + 1.0, name="D")
        s = tc.create_schedule(out.op)
        s[B].compute_at(s[out], out.op.axis[0])
        args, want = [A, out], want + 1.0
    b = np.zeros(10, "float32")
    run(s, args, [a, b], backend)
    np.testing.assert_allclose(b, want, rtol=1e-5)


def _index_reducer_sum(X):
    """TVM's test_loop_dep_reduce_cache_write: a user reducer whose combiner and identity
    read the output index n (not associative: it is folded in order)."""
    def f(n):
        rv = tc.reduce_axis((0, n), name="rv")
        red = tc.comm_reducer(lambda x, y: tc.max(x + y, n.astype("float32")),
                              lambda t: tc.if_then_else(n > 1, tc.const(0, t), n.astype(t)),
                              name="sum")
        return red(X[rv], axis=rv)

    return tc.compute(X.shape, f, name="y")


def _index_reducer_sum_ref(x):
    out = np.zeros(len(x), "float32")
    for n in range(len(x)):
        acc = np.float32(0 if n > 1 else n)
        for r in range(n):
            acc = max(acc + x[r], np.float32(n))
        out[n] = acc
    return out


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("how", ["plain", "cache_write", "split", "compute_at"])
def test_reducer_reading_the_output_index(backend, how):
    X = tc.placeholder((10,), name="x")
    Y = _index_reducer_sum(X)
    x = np.random.default_rng(0).uniform(0, 1, 10).astype("float32")
    want = _index_reducer_sum_ref(x)
    out, args = Y, [X, Y]
    if how == "compute_at":
        out = tc.compute((10,), lambda i: Y[i] * 2.0, name="z")
        args, want = [X, out], want * 2
    s = tc.create_schedule(out.op)
    if how == "cache_write":
        YL = s.cache_write(Y, "local")
        assert "y.local" in str(tc.lower(s, args))
    elif how == "split":
        s[Y].split(Y.op.axis[0], factor=3)
    elif how == "compute_at":
        s[Y].compute_at(s[out], out.op.axis[0])
    y = np.zeros(10, "float32")
    run(s, args, [x, y], backend)
    np.testing.assert_allclose(y, want, rtol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("inner", [True, False])
def test_rfactor_of_a_reducer_reading_the_output_index(backend, inner):
    """rfactor makes y.rf with its own output axes: the combiner and the identity read
    those (a max clamped below at n, with identity n: associative, so any order folds
    to the same)."""
    X = tc.placeholder((10,), name="x")

    def f(n):
        rv = tc.reduce_axis((0, 7), name="rv")
        red = tc.comm_reducer(lambda x, y: tc.max(x, tc.max(y, n.astype("float32") * 2.0)),
                              lambda t: n.astype(t) * 2.0, name="clamped_max")
        return red(X[rv] * 20.0, axis=rv)

    Y = tc.compute((10,), f, name="y")
    s = tc.create_schedule(Y.op)
    ro, ri = s[Y].split(Y.op.reduce_axis[0], factor=3)
    YF = s.rfactor(Y, ri if inner else ro)
    if not inner:
        s[YF].split(s[YF].op.axis[1], factor=4)
    x = np.random.default_rng(1).uniform(0, 1, 10).astype("float32")
    want = np.maximum(np.arange(10) * 2.0, (x[:7] * 20).max()).astype("float32")
    y = np.zeros(10, "float32")
    run(s, [X, Y], [x, y], backend)
    np.testing.assert_allclose(y, want, rtol=1e-6)
