"""Correctness of the tuned CPU schedules of tecomp.strategy.cpu (never their speed).

Every shipped schedule is checked against numpy (float64 references) on small versions of
the benchmarked shapes and on odd ones (primes, 1s, tails in every blocked dimension),
with the AVX-512 and the AVX2 blockings (``TECOMP_VECTOR_LANES``) and 1 or 2 threads.
"""
import math
import os
import re

import numpy as np
import pytest

import tecomp as tc
from tecomp.nn import ops
from tecomp.strategy import Knobs, apply_rules, cpu as sc
from tecomp.testing.builds import BuildMemo

from helpers import with_fma_model, with_l2

RNG = np.random.default_rng(1234)
#: the long matrices (TECOMP_LONG_TESTS=1); by default a part of each
LONG = os.environ.get("TECOMP_LONG_TESTS", "") not in ("", "0")


@pytest.fixture(params=[16, 8], ids=["lanes16", "lanes8"])
def lanes(request, monkeypatch):
    monkeypatch.setenv("TECOMP_VECTOR_LANES", str(request.param))
    return request.param


@pytest.fixture
def threads():
    old = tc.get_num_threads()
    yield
    tc.set_num_threads(old)


def _arr(shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype("float32")


def _shape(t):
    return tuple(int(e.value) for e in t.shape)


#: the kernels of this file's tests, each built once (a matrix over the data's offsets,
#: the thread counts whose schedules lower alike: the same function is not compiled again)
_BUILDS = BuildMemo()


def _run(s, args, inputs):
    f = _BUILDS.build(s, args, target="llvm")
    out = np.full(_shape(args[-1]), np.nan, "float32")
    f(*inputs, out)
    return out


def _close(got, ref, tol=2e-5):
    """float32 kernels against float64 references, relative to the data's scale."""
    scale = max(1.0, float(np.abs(ref).max())) if ref.size else 1.0
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * scale)


# ---------------------------------------------------------------------------------
# GEMM

GEMM_SHAPES = [
    (64, 64, 64),      # the benchmark's 512^3 / 1024^3 / 2048^3, small
    (96, 160, 600),    # several k slices (kc tail), several column blocks
    (37, 53, 29),      # primes: row, column and vector tails
    (1, 1, 1),
    (1, 17, 5),
    (7, 200, 3),
    (130, 33, 1),
]


@pytest.mark.parametrize("packed", [False, True], ids=["matmul", "matmul_packed"])
@pytest.mark.parametrize("M,N,K", GEMM_SHAPES)
def test_matmul(M, N, K, packed, lanes):
    A = tc.placeholder((M, K), name="A")
    B = tc.placeholder((K, N), name="B")
    C = sc.matmul_packed(A, B) if packed else ops.matmul(A, B)
    s = sc.schedule_matmul(C)
    a, b = _arr((M, K)), _arr((K, N))
    _close(_run(s, [A, B, C], [a, b]), a.astype("float64") @ b)


@pytest.mark.parametrize("M,N,K", [(127, 509, 257), (37, 53, 29), (333, 77, 100)])
def test_matmul_odd_shapes_use_the_register_block(M, N, K, threads):
    """Blocks that do not divide the shape still accumulate in the local register block
    (its edge blocks guarded and peeled off), not in C through memory; C is never
    zeroed in a separate pass, and every element is right."""
    tc.set_num_threads(2)
    A = tc.placeholder((M, K), name="A")
    B = tc.placeholder((K, N), name="B")
    C = ops.matmul(A, B)
    s = sc.schedule_matmul(C)
    text = str(tc.lower(s, [A, B, C]))
    assert "matmul.local" in text
    assert "matmul[" not in text.split("matmul.local")[0]  # no zeroing pass before it
    a, b = _arr((M, K)), _arr((K, N))
    _close(_run(s, [A, B, C], [a, b]), a.astype("float64") @ b)


def test_matmul_packed_wide_panel_copies_out_in_accumulator_vectors(lanes):
    """A panel of three vectors (NR = 48 with 16 lanes): the copy out of C.local uses
    the micro-kernel's 16-lane vectors, not one 48-lane vector (that mix kept LLVM from
    keeping C.local in registers: 11 against 86 GFLOP/s), and the result is right."""
    L = sc.cpu_model().lanes
    nr = 3 * L
    A = tc.placeholder((40, 70), name="A")
    B = tc.placeholder((70, 2 * nr + 5), name="B")
    C = sc.matmul_packed(A, B, nr=nr)
    s = sc.schedule_matmul(C)
    text = str(tc.lower(s, [A, B, C]))
    # the loops that store C from C.local (masked at the right edge)
    widths = re.findall(r"vectorized \([\w.]+, 0, (\d+)\) \{\n(?:\s*if \(.*\) \{\n)?\s*matmul\[",
                        text)
    assert widths and set(widths) == {str(L)}, widths
    a, b = _arr((40, 70)), _arr((70, 2 * nr + 5))
    _close(_run(s, [A, B, C], [a, b]), a.astype("float64") @ b)


@pytest.mark.parametrize("nthreads", [1, 2])
def test_matmul_threads_and_symbolic_rows(nthreads, threads):
    tc.set_num_threads(nthreads)
    m = tc.var("m")
    A = tc.placeholder((m, 40), name="A")
    B = tc.placeholder((40, 70), name="B")
    C = sc.matmul_packed(A, B)
    f = tc.build(sc.schedule_matmul(C), [A, B, C])
    b = _arr((40, 70))
    for M in (0, 1, 9, 100):
        a = _arr((M, 40))
        c = np.full((M, 70), np.nan, "float32")
        f(a, b, c)
        _close(c, a.astype("float64") @ b)


@pytest.mark.parametrize("sym", ["n", "k"])
@pytest.mark.parametrize("packed", [False, True])
def test_matmul_symbolic_columns_or_reduction_on_two_threads(sym, packed, threads):
    """A known row count with symbolic columns or a symbolic reduction, 2 threads: the
    heuristic picks its mode without the unknown extent (the threads' shares of rows
    where the reduction is unknown), and the kernel runs right for several values."""
    tc.set_num_threads(2)
    n = tc.var("n") if sym == "n" else 37
    k = tc.var("k") if sym == "k" else 29
    A = tc.placeholder((70, k), name="A")
    B = tc.placeholder((k, n), name="B")
    C = sc.matmul_packed(A, B) if packed else ops.matmul(A, B)
    f = tc.build(sc.schedule_matmul(C), [A, B, C])
    for v in (1, 17, 40):
        a = _arr((70, v if sym == "k" else 29))
        b = _arr((a.shape[1], v if sym == "n" else 37))
        c = np.full((70, b.shape[1]), np.nan, "float32")
        f(a, b, c)
        _close(c, a.astype("float64") @ b)


@pytest.mark.parametrize("M", [64, 7])
def test_matmul_schedule_shape(M, threads):
    """The micro-kernel structure: rows unrolled, columns one vector, FMA pragma, and a
    parallel loop (over row panels, or over column blocks when rows are few).  (Without
    a config a matmul of at most 16 rows streams B in place: tests/test_skinny_gemm.py.)"""
    tc.set_num_threads(2)
    A = tc.placeholder((M, 64), name="A")
    B = tc.placeholder((64, 64), name="B")
    C = ops.matmul(A, B)
    config = {"nr": sc.gemm_params(M, 64, 64).nr}
    text = str(tc.lower(sc.schedule_matmul(C, config=config), [A, B, C]))
    assert "pragma_fp_contract" in text
    assert "unrolled (i.inner" in text and "vectorized (j.inner.inner" in text
    assert "B.local" in text  # the packed block of B
    assert "parallel (" in text


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("packed", [False, True], ids=["dense", "dense_packed"])
@pytest.mark.parametrize("Bt,I,O", [(16, 48, 40), (3, 7, 5), (1, 1, 1), (1, 100, 37),
                                    (7, 33, 9), (5, 64, 6)])
def test_dense(Bt, I, O, packed, bias):
    X = tc.placeholder((Bt, I), name="X")
    W = tc.placeholder((O, I), name="W")
    bv = tc.placeholder((O,), name="bias") if bias else None
    Y = (sc.dense_packed if packed else ops.dense)(X, W, bv)
    Y = ops.relu(Y)
    s = sc.schedule_dense(Y)
    x, w, bb = _arr((Bt, I)), _arr((O, I)), _arr((O,))
    args = [X, W] + ([bv] if bias else []) + [Y]
    ins = [x, w] + ([bb] if bias else [])
    ref = x.astype("float64") @ w.T.astype("float64") + (bb if bias else 0)
    _close(_run(s, args, ins), np.maximum(ref, 0))


@pytest.mark.parametrize("O", [64, 40])
def test_dense_packed_transposes_its_panels(O, lanes):
    """dense_packed's panels read W across its rows: in L x L register transposes where
    every panel is whole (O a multiple of NR) and the tiles divide the reduction; else
    row by row in W's order (no vector across W's rows, which is a gather); right
    either way, with a view of W too."""
    X = tc.placeholder((20, 96), name="X")
    W = tc.placeholder((O, 96), name="W")
    Y = sc.dense_packed(X, W, nr=32)
    s = sc.schedule_dense(Y)
    text = str(tc.lower(s, [X, W, Y]))
    assert (f"x86.transpose_f32_{lanes}x{lanes}" in text) == (O % 32 == 0), text
    assert not re.search(r"vectorized \(ji", text), text
    if O % 32:
        assert re.search(r"for \(ji, 0, .*\{\n\s+for \(k, 0, 96\)", text), text
    x, w = _arr((20, 96)), _arr((O, 104))[:, :96]
    _close(_run(s, [X, W, Y], [x, w]), x.astype("float64") @ w.T.astype("float64"))


def test_schedule_dense_takes_the_rules_for_many_rows():
    """tecomp.nn's schedule_dense on a plain dense of more than DENSE_NOPACK_MAX_ROWS
    rows gives what tc.auto_schedule does (the rules' register blocks, W copied in
    panels), not dense_nopack's vectors along the reduction; a config keeps the
    template; right either way."""
    from tecomp.strategy.cpu.gemm import DENSE_NOPACK_MAX_ROWS

    rows = DENSE_NOPACK_MAX_ROWS + 1
    X = tc.placeholder((rows, 64), name="X")
    W = tc.placeholder((48, 64), name="W")
    b = tc.placeholder((48,), name="b")
    Y = ops.relu(ops.dense(X, W, b))
    args = [X, W, b, Y]
    s = sc.schedule_dense(Y)
    text = str(tc.lower(s, args))
    assert "dense.matmul.rf" not in text and "dense.rf" not in text, text
    assert text == str(tc.lower(tc.auto_schedule(args), args))
    x, w, bb = _arr((rows, 64)), _arr((48, 64)), _arr((48,))
    ref = np.maximum(x.astype("float64") @ w.T.astype("float64") + bb, 0)
    _close(_run(s, args, [x, w, bb]), ref)
    s2 = sc.schedule_dense(Y, config={"mr": 4})
    assert str(tc.lower(s2, args)) != text
    _close(_run(s2, args, [x, w, bb]), ref)


def test_dense_in_place_vectorizes_the_reduction():
    """Plain dense reads W[o, k] in place: the vector runs over k (rfactor), not across
    the rows of W (a gather)."""
    X = tc.placeholder((7, 64), name="X")
    W = tc.placeholder((9, 64), name="W")
    Y = ops.dense(X, W)
    text = str(tc.lower(sc.schedule_dense(Y), [X, W, Y]))
    assert "dense.rf" in text and "vectorized (k.inner" in text
    assert "unrolled (b.inner" in text and "unrolled (o.inner" in text


@pytest.mark.parametrize("offset", [0, 1, 4])
def test_dense_in_place_reads_aligned_copies(offset):
    """X is copied once (root) and W's rows once per output tile into buffers of their
    own, for operands at any offset from a cache line (numpy's large arrays start 16
    bytes past one); a batch of one block reads both in place (the template asked for
    by its knobs: at most 16 rows get the skinny schedule by default)."""
    X = tc.placeholder((29, 70), name="X")
    W = tc.placeholder((21, 70), name="W")
    Y = ops.dense(X, W)
    s = sc.schedule_dense(Y)
    text = str(tc.lower(s, [X, W, Y]))
    assert "allocate X.global" in text and "allocate W.local" in text, text
    buf = _arr(29 * 70 + 21 * 70 + 8)
    x = buf[offset:offset + 29 * 70].reshape(29, 70)
    w = buf[offset + 29 * 70 + 3:offset + 29 * 70 + 3 + 21 * 70].reshape(21, 70)
    _close(_run(s, [X, W, Y], [x, w]), x.astype("float64") @ w.T.astype("float64"))
    X1 = tc.placeholder((3, 70), name="X")
    Y1 = ops.dense(X1, W)
    knobs = Knobs({"skinny": False})
    s1 = apply_rules([X1, W, Y1], knobs, sc.cpu_model())
    text = str(tc.lower(s1, [X1, W, Y1]))
    assert knobs.values["skinny"] is False and "dense.rf" in text
    assert "X.global" not in text and "W.local" not in text


@pytest.mark.parametrize("nthreads", [1, 2])
def test_dense_in_place_batch_tail_has_constant_extents(nthreads, threads):
    """Batch 61 in blocks of 4: the blocks are a serial loop inside the parallel loop
    over output tiles, so the last block is partitioned off and every register block,
    the tail's too, has constant (unrolled) extents; the lanes' final sums are unrolled
    (16 independent chains), not a loop over the accumulators in memory."""
    tc.set_num_threads(nthreads)
    X = tc.placeholder((61, 64), name="X")
    W = tc.placeholder((40, 64), name="W")
    Y = ops.dense(X, W)
    # blocks of 4 rows with AVX-512's 32 registers, 3 with AVX2's 16 (61 = 20*3 + 1):
    # both lowered on any machine
    for target, bb in (("llvm -mcpu=skylake-avx512", 4), ("llvm -mcpu=haswell", 3)):
        text = str(tc.lower(sc.schedule_dense(Y, target=target), [X, W, Y], target=target))
        assert not re.search(r"unrolled \([\w.]+, 0, min\(", text), text
        assert "for (k.inner" not in text        # the final sums: unrolled
        assert f"unrolled (b.inner, 0, {bb})" in text and "unrolled (b.inner, 0, 1)" in text
    s = sc.schedule_dense(Y)
    x, w = _arr((61, 64)), _arr((40, 64))
    _close(_run(s, [X, W, Y], [x, w]), x.astype("float64") @ w.T.astype("float64"))


# ---------------------------------------------------------------------------------
# convolution


def _conv_ref(d, w, stride, pad, dil):
    """NCHW data, OIHW weights, float64."""
    N, C, H, W = d.shape
    O, _, R, S = w.shape
    dp = np.pad(d.astype("float64"), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    OH = (H + 2 * pad - dil * (R - 1) - 1) // stride + 1
    OW = (W + 2 * pad - dil * (S - 1) - 1) // stride + 1
    out = np.zeros((N, O, OH, OW))
    for r in range(R):
        for t in range(S):
            patch = dp[:, :, r * dil: r * dil + stride * (OH - 1) + 1: stride,
                       t * dil: t * dil + stride * (OW - 1) + 1: stride]
            out += np.einsum("nchw,oc->nohw", patch, w[:, :, r, t].astype("float64"))
    return out


CONV_CASES = [
    # N, C, H, W, O, R, stride, pad, dilation
    (1, 16, 56, 56, 16, 3, 1, 1, 1),   # the 64-channel 56x56 benchmark, fewer channels
    (1, 32, 14, 14, 48, 3, 1, 1, 1),   # the 256-channel 14x14 benchmark, fewer channels
    (2, 3, 11, 13, 5, 3, 2, 1, 1),     # odd sizes, stride 2
    (1, 7, 9, 9, 17, 3, 1, 2, 2),      # dilation, wide padding
    (1, 5, 8, 8, 33, 1, 1, 0, 1),      # 1x1, channel tail
    (1, 1, 1, 1, 1, 1, 1, 0, 1),
    (1, 3, 5, 5, 2, 5, 1, 0, 1),       # kernel as large as the input
    (1, 24, 15, 15, 40, 5, 1, 2, 1),   # 15 wide: NHWC blocks chosen to leave no sliver
    (1, 128, 9, 9, 64, 5, 1, 2, 1),    # 800 KB of weights, 2 channel blocks: run in turn
    (2, 64, 7, 7, 64, 3, 1, 1, 1),     # 7 rows: a 7-row register block (ResNet's last stage)
    (2, 64, 5, 5, 256, 3, 1, 1, 1),    # 590 KB of weights, 8 channel blocks: the tasks (NHWC)
]


@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: "x".join(map(str, c)))
def test_conv2d_nchw(case, lanes):
    N, C, H, W, O, R, st, p, dl = case
    d = tc.placeholder((N, C, H, W), name="data")
    w = tc.placeholder((O, C, R, R), name="weight")
    out = ops.conv2d_nchw(d, w, stride=st, padding=p, dilation=dl)
    s = sc.schedule_conv2d_nchw(out)
    dn, wn = _arr((N, C, H, W)), _arr((O, C, R, R))
    _close(_run(s, [d, w, out], [dn, wn]), _conv_ref(dn, wn, st, p, dl), 5e-5)


@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: "x".join(map(str, c)))
def test_conv2d_nhwc(case, lanes):
    N, C, H, W, O, R, st, p, dl = case
    d = tc.placeholder((N, H, W, C), name="data")
    w = tc.placeholder((R, R, C, O), name="weight")
    out = ops.conv2d_nhwc(d, w, stride=st, padding=p, dilation=dl)
    s = sc.schedule_conv2d_nhwc(out)
    dn, wn = _arr((N, H, W, C)), _arr((R, R, C, O))
    ref = _conv_ref(dn.transpose(0, 3, 1, 2), wn.transpose(3, 2, 0, 1), st, p, dl)
    _close(_run(s, [d, w, out], [dn, wn]), ref.transpose(0, 2, 3, 1), 5e-5)


@pytest.mark.parametrize("batch, cores", [(1, 2), (1, 3), (1, 4), (1, 5), (8, 2), (8, 3),
                                          (9, 2), (17, 3)])
def test_conv2d_nhwc_row_tasks_split_evenly(batch, cores):
    """The NHWC template's row tasks (small weights: tasks of a few rows, each padding the
    rows it reads; whole images where there are enough and they split as evenly) are
    planned for the target's threads so that the busiest thread gets as few rows as any
    split of the batch's rows could give it (the pool gives each thread ``tasks /
    threads`` tasks, give or take one): 56 rows on 3 threads are 56 tasks of one row (19
    rows at most; 28 tasks of two left one thread 20); 9 images on 2 threads are (image,
    rows) tasks (5 whole images on one thread: 280 rows against 252)."""
    rows = 56
    d = tc.placeholder((batch, rows, rows, 16), name="data")
    w = tc.placeholder((3, 3, 16, 16), name="weight")
    out = ops.conv2d_nhwc(d, w, padding=1)
    target = f"llvm -mcpu=skylake-avx512 -num-cores={cores}"
    p = sc.conv2d.conv2d_nhwc_params(out, sc.cpu_model(target))
    assert p.yb == 1
    text = str(tc.lower(sc.schedule_conv2d_nhwc(out, target=target), [d, w, out]))
    var, tasks = re.search(r"parallel \(([^,]+), 0, (\d+)\)", text).groups()
    tasks = int(tasks)
    per_task = rows if var == "n" else batch * rows // tasks
    assert tasks * per_task == batch * rows and tasks >= 4 * cores, (var, tasks)
    busiest = -(-tasks // cores) * per_task
    assert busiest == -(-batch * rows // cores), (var, tasks, busiest)


@pytest.mark.parametrize("case", [(2, 19, 13, 11, 37), (3, 5, 9, 17, 20), (1, 33, 7, 29, 18)],
                         ids=lambda c: "x".join(map(str, c)))
def test_conv2d_nhwc_same_bits_on_any_thread_count(case, threads):
    """Odd shapes (channels not a multiple of the vector, odd planes, a batch) built for
    and run on 1, 2 and 3 threads, the heuristic's config against numpy.  With the
    register block pinned (the heuristic's block may change with the threads, and a
    different block may round differently in the last bit), the thread split (row
    tasks, the weights copied or read in place) changes no output's sum order: every
    build gives the same bits."""
    N, C, H, W, O = case
    d = tc.placeholder((N, H, W, C), name="data")
    w = tc.placeholder((3, 3, C, O), name="weight")
    out = ops.conv2d_nhwc(d, w, padding=1)
    dn, wn = _arr((N, H, W, C)), _arr((3, 3, C, O))
    ref = _conv_ref(dn.transpose(0, 3, 1, 2), wn.transpose(3, 2, 0, 1), 1, 1, 1)
    ref = ref.transpose(0, 2, 3, 1)
    tc.set_num_threads(1)
    p = sc.conv2d.conv2d_nhwc_params(out, sc.cpu_model())
    block = {"ob": p.ob, "yb": p.yb, "xb": p.xb}
    got = []
    for copy in (True, False):
        for t in (1, 2, 3):
            tc.set_num_threads(t)
            if copy:   # the heuristic's own block for this thread count
                own = sc.schedule_conv2d_nhwc(out)
                _close(_run(own, [d, w, out], [dn, wn]), ref, 5e-5)
            s = sc.schedule_conv2d_nhwc(out, config=dict(block, weight_copy=copy))
            got.append(_run(s, [d, w, out], [dn, wn]))
    _close(got[0], ref, 5e-5)
    for g in got[1:]:
        np.testing.assert_array_equal(g, got[0])


@pytest.mark.parametrize("hw", [15, 29, 30, 56])
def test_conv2d_nhwc_blocks_leave_no_sliver(hw, lanes):
    """The NHWC register block leaves no 1-pixel edge block (one per row of 15 with
    14-pixel blocks, whose two accumulators wait on the FMA latency: the whole conv ran
    10-20% slower), keeps the benchmark's 14-pixel rows at 56, and stays within the
    registers."""
    info = sc.cpu_model()
    ob, yb, xb = sc.conv2d._conv_block_nhwc(128, hw, hw, info)
    nvo = -(-ob // info.lanes)
    assert nvo * yb * xb <= info.vregs - nvo - 2
    for y in {yb, hw % yb} - {0}:
        for x in {xb, hw % xb} - {0}:
            assert y * x > 1, (hw, yb, xb)
    if hw == 56 and info.lanes == 16:
        assert (yb, xb) == (1, 14)


@pytest.mark.parametrize("cores", [1, 2])
@pytest.mark.parametrize("c,hw", [(64, 56), (256, 14)])
def test_conv2d_nhwc_zen4_block_is_two_channel_vectors(c, hw, cores):
    """On Zen 4's machine model (16-lane registers, 8-lane FMAs: ``fma_lanes`` 8) the
    NHWC 3x3 template keeps two channel vectors x 14 pixels (28 accumulators), weights
    read in place: on the benchmark's layers, 1 thread, blocks of four channel vectors
    ran at most 1.03x its speed on 64x56x56 (the quartiles of the paired ratios around
    1) and 0.88-0.99x on 256x14x14 (benchmarks/DECISIONS.md, "Conv NHWC: two channel
    vectors on Zen 4").  An explicit target: the same on any host."""
    d = tc.placeholder((1, hw, hw, c), name="data")
    w = tc.placeholder((3, 3, c, c), name="weight")
    out = ops.conv2d_nhwc(d, w, padding=1)
    info = sc.cpu_model(f"llvm -mcpu=znver4 -num-cores={cores}")
    assert (info.lanes, info.fma_lanes, info.vregs) == (16, 8, 32)
    p = sc.conv2d_nhwc_params(out, info)
    assert (p.ob, p.yb, p.xb, p.weight_copy) == (32, 1, 14, False)


def test_conv2d_nhwc_four_channel_vectors_knob():
    """``conv2d_nhwc.channel_vectors``: where the heuristic's two channel vectors could
    be four (whole blocks of four vectors), the search may take four, whose blocks are
    then the block model's best for four vectors (the 4x4-pixel block among them); the
    default stays two.  Not offered where four vectors do not divide the channels.
    Every offered block computes the convolution (odd plane: edge blocks)."""
    info = sc.cpu_model("llvm -mcpu=znver4 -num-cores=1")

    def conv(c, k, h, w):
        d = tc.placeholder((1, h, w, c), name="data")
        wt = tc.placeholder((3, 3, c, k), name="weight")
        return d, wt, ops.conv2d_nhwc(d, wt, padding=1)

    _, _, big = conv(64, 64, 56, 56)
    knobs = Knobs()
    assert sc.conv2d_knobs(big.op, knobs, info) == sc.conv2d_nhwc_params(big, info)
    assert knobs.space["conv2d_nhwc.channel_vectors"] == [2, 4]
    four = [sc.conv2d_knobs(big.op, Knobs({"conv2d_nhwc.channel_vectors": 4,
                                           "conv2d_nhwc.block": r}), info)
            for r in range(len(knobs.space["conv2d_nhwc.block"]))]
    assert {p.ob for p in four} == {64} and (1, 4) in {(p.yb, p.xb) for p in four}
    assert all(p.yb * p.xb * 4 <= info.vregs - 4 - 2 for p in four)
    for k in (32, 96):
        knobs = Knobs({"conv2d_nhwc.channel_vectors": 4})
        _, _, other = conv(64, k, 56, 56)
        assert sc.conv2d_knobs(other.op, knobs, info).ob == sc.conv2d_nhwc_params(
            other, info).ob
        assert "conv2d_nhwc.channel_vectors" not in knobs.space
    # run on the host, with its own lanes
    host = sc.cpu_model()
    d, wt, out = conv(24, 4 * host.lanes, 9, 11)
    dn, wn = _arr((1, 9, 11, 24)), _arr((3, 3, 24, 4 * host.lanes))
    ref = _conv_ref(dn.transpose(0, 3, 1, 2), wn.transpose(3, 2, 0, 1), 1, 1, 1)
    ref = ref.transpose(0, 2, 3, 1)
    for r in (0, 3):
        p = sc.conv2d_knobs(out.op, Knobs({"conv2d_nhwc.channel_vectors": 4,
                                           "conv2d_nhwc.block": r}), host)
        assert p.ob == 4 * host.lanes
        _close(_run(sc.schedule_conv2d_nhwc(out, config=p), [d, wt, out], [dn, wn]), ref,
               5e-5)


@pytest.mark.parametrize("case", [
    # N, H, W, C, O, kernel, stride, padding, dilation, relu epilogue
    (1, 14, 14, 32, 48, 3, 1, 1, 1, False),           # the 256x14 benchmark, fewer channels
    (2, 11, 13, 3, 5, 3, 2, 1, 1, True),              # odd plane, stride 2, a batch, ReLU
    (1, 9, 9, 7, 17, 3, 1, 2, 2, False),              # dilation, wide padding
    (1, 6, 7, 4, 4, 3, 1, ((1, 0), (2, 1)), 1, False),  # asymmetric padding
    (1, 15, 15, 24, 40, 5, 1, 2, 1, True),            # 5x5, channel tail, 15-wide rows
    (2, 5, 5, 64, 256, 3, 1, 1, 1, False),            # 8 channel blocks: channel tasks
], ids=lambda c: "x".join(map(str, c)))
def test_conv2d_nhwc_reads_the_input_in_place_where_taps_are_skipped(case, lanes, monkeypatch):
    """Where the NHWC convolution leaves its taps on the zero padding out of its sum
    (``ZERO_WHERE``), the template inlines the padding stage: no padded buffer in the
    lowered IR and no select on the input left of it (the tap loops are partitioned on the ``where=``,
    inside which the padding's test is proven true); the values are the padded
    convolution's.  With ``conv2d.NHWC_INLINE_PAD`` off, the padded copy is back."""
    from tecomp.nn import relu
    from tecomp.te.reduce import ZERO_WHERE
    N, H, W, C, O, R, st, p, dl, act = case
    d = tc.placeholder((N, H, W, C), name="data")
    w = tc.placeholder((R, R, C, O), name="weight")
    conv = ops.conv2d_nhwc(d, w, stride=st, padding=p, dilation=dl)
    out = relu(conv) if act else conv
    assert conv.op.attrs.get(ZERO_WHERE), "the case must skip its padded taps"
    text = str(tc.lower(sc.schedule_conv2d_nhwc(out), [d, w, out]))
    assert "conv2d_nhwc.pad" not in text and not re.search(r"select\([^\n]*data\[", text), text
    dn, wn = _arr((N, H, W, C)), _arr((R, R, C, O))
    pads = p if isinstance(p, tuple) else ((p, p), (p, p))
    dp = np.pad(dn, ((0, 0), pads[0], pads[1], (0, 0)))
    ref = _conv_ref(dp.transpose(0, 3, 1, 2), wn.transpose(3, 2, 0, 1), st, 0, dl)
    ref = ref.transpose(0, 2, 3, 1)
    if act:
        ref = np.maximum(ref, 0)
    _close(_run(sc.schedule_conv2d_nhwc(out), [d, w, out], [dn, wn]), ref, 5e-5)
    monkeypatch.setattr(sc.conv2d, "NHWC_INLINE_PAD", False)
    s = sc.schedule_conv2d_nhwc(out)
    assert "conv2d_nhwc.pad" in str(tc.lower(s, [d, w, out]))
    _close(_run(s, [d, w, out], [dn, wn]), ref, 5e-5)


def test_conv2d_nhwc_keeps_its_padded_copy_where_taps_are_computed():
    """A 56x56 plane padded by 1 (2.4% of the products on the padding: the taps computed,
    no ``where=``) keeps the padded copy (inlined, its select would test every tap)."""
    d = tc.placeholder((1, 56, 56, 16), name="data")
    w = tc.placeholder((3, 3, 16, 16), name="weight")
    out = ops.conv2d_nhwc(d, w, padding=1)
    text = str(tc.lower(sc.schedule_conv2d_nhwc(out), [d, w, out]))
    assert "conv2d_nhwc.pad" in text and "select(" not in text.split("conv2d_nhwc.local")[1]


@pytest.mark.parametrize("oh", [5, 7, 11, 13, 49])
def test_conv2d_nchw_block_leaves_no_row_tail_in_the_parallel_loop(oh, lanes):
    """A row block that does not divide the rows is only chosen where the row blocks are a
    serial loop in each (batch, channel block) task, whose tail is peeled off.  A tail in
    the parallel loop kept every block under a guard (512 channels at 7x7: 57 ms against
    8.9 with 7-row blocks; PyTorch 6.0)."""
    info = sc.cpu_model()
    for n in (1, 4):
        ob, yb, xb = sc.conv2d._conv_block_nchw(512, oh, oh, info, n, 3, 3)
        assert oh % yb == 0 or sc.conv2d._rows_peeled(n, 512, ob, oh, yb, info), (n, oh, ob, yb)
        assert ob * yb * -(-xb // info.lanes) <= info.vregs


@pytest.mark.parametrize("N,K", [(1, 64), (2, 48)])
def test_conv2d_nchw_peeled_row_tail_runs_unguarded(N, K, lanes, threads):
    """13 rows (AlexNet's 13x13 layers) take 3- or 4-row blocks with a tail, not single
    rows (which need a weight broadcast per FMA: 256 channels at 13x13 ran at 76-85
    GFLOP/s against 121-125 with 8x3 blocks).  The tail is peeled off the serial row
    loop: no guard is left inside the reduction over the input channels (but the masked
    lanes of a column tail), and the result is right.  (2 threads: with 8 channel blocks,
    4 tasks per thread.)  Without AVX-512's masks (AVX2) the 13 columns are one
    unguarded vector of 8 + 5 lanes instead (a guarded 5-lane tail ran lane by lane: 24
    -> 64 channels 107.2 GFLOP/s against 12.4 on a Zen 3): nothing is guarded at all."""
    from tecomp.ir.functor import collect, free_vars
    from tecomp.ir.stmt import For, IfThenElse

    tc.set_num_threads(2)
    C, H = 24, 13
    d = tc.placeholder((N, C, H, H), name="data")
    w = tc.placeholder((K, C, 3, 3), name="weight")
    out = ops.conv2d_nchw(d, w, padding=1)
    s = sc.schedule_conv2d_nchw(out)
    f = tc.lower(s, [d, w, out])
    reductions = collect(f.body, lambda n: isinstance(n, For) and n.var.name == "c")
    if sc.cpu_model().masks:
        assert len(reductions) >= 2   # the main blocks and the peeled tail
    for loop in reductions:
        for g in collect(loop.body, lambda n: isinstance(n, IfThenElse)):
            # only the masked lanes of a column tail (13 columns in 8-lane vectors)
            assert sc.cpu_model().masks, g.cond
            assert {v.name for v in free_vars(g.cond)} == {"x.inner"}, g.cond
    if sc.cpu_model().masks:
        rows = [n for n in collect(f.body, lambda n: isinstance(n, For) and n.kind == "serial")
                if n.var.name.startswith("y")]
        assert rows, "the row blocks are a serial loop"
    dn, wn = _arr((N, C, H, H)), _arr((K, C, 3, 3))
    _close(_run(s, [d, w, out], [dn, wn]), _conv_ref(dn, wn, 1, 1, 1), 5e-5)


BY_CHANNELS_CASES = [
    # N, C, H, W, O, R, stride, pad, dilation; channel vectors with 16 lanes, with 8
    ((2, 32, 7, 7, 32, 3, 1, 1, 1), True, False),     # ResNet's last stage, fewer channels
    ((1, 32, 14, 14, 64, 3, 2, 1, 1), True, False),   # stride 2 to 7x7
    ((3, 512, 7, 7, 64, 1, 1, 0, 1), True, False),    # 1x1
    ((2, 512, 14, 13, 64, 1, 2, 0, 1), True, False),  # 1x1 stride 2: input planes prefetched
    ((1, 256, 7, 7, 64, 1, 1, 0, 1), False, False),   # 1x1 over fewer than 512 channels
    ((1, 512, 14, 14, 64, 1, 1, 0, 1), False, False),  # 1x1 on rows wider than half a vector
    ((1, 29, 9, 6, 32, 3, 1, 2, 2), True, False),     # dilation, wide padding, odd channels
    ((2, 32, 4, 3, 64, 3, 1, 1, 1), True, True),      # 3-wide rows: blocks of 2 rows
    ((1, 32, 8, 4, 32, 3, 2, 1, 1), True, True),      # stride 2 to 4x2: blocks of 4 or 2 rows
    ((1, 29, 6, 4, 16, 3, 1, 1, 1), False, True),     # 16 channels: whole blocks on AVX2 only
    ((1, 32, 7, 7, 48, 3, 1, 1, 1), False, False),    # 48: no whole 2-vector blocks on AVX-512
    ((1, 32, 14, 14, 32, 3, 1, 1, 1), True, False),   # 14 of 16 lanes: 7-pixel blocks
    ((1, 32, 13, 13, 64, 3, 1, 1, 1), True, False),   # 13 of 16 lanes: 8 pixels and a tail of 5
    ((1, 32, 16, 16, 32, 3, 1, 1, 1), False, False),  # rows that fill their vectors
    ((1, 2, 7, 7, 32, 3, 1, 1, 1), False, False),     # 18 reduction steps per scattered block
]


@pytest.mark.parametrize("l2", [16 << 10, 4 << 20], ids=["large_weights", "small_weights"])
@pytest.mark.parametrize("case,on16,on8", BY_CHANNELS_CASES,
                         ids=lambda c: "x".join(map(str, c)) if isinstance(c, tuple) else None)
def test_conv2d_nchw_by_channels(case, on16, on8, l2, lanes, monkeypatch):
    """NCHW rows that leave a tenth of the lanes or more idle (at most half a vector on
    AVX2), with output channels that make whole 2-vector blocks and a reduction of at
    least 256 steps, run with the vectors across output channels: the weight copy
    (per channel-block task for large weights, at the root for small ones) and the
    register block are stored channels innermost (stride 1), a strided 1x1 window
    prefetches its input planes, and the result is right for strides, dilation, 1x1, row
    tails and blocks of several rows.  The others keep the row vectors.  (The machine
    model of a CPU with full-width FMAs, where gathering the weights costs 1.5 FMAs per
    element: see test_conv2d_nchw_channel_vectors_weigh_the_weight_copy for Zen 4's.)
    Every channel-vector kernel runs; a row-vector one once per case (16 lanes, large
    weights) by default, in every pair with TECOMP_LONG_TESTS=1."""
    with_l2(monkeypatch, l2)
    with_fma_model(monkeypatch, half_width=False, gather_cost=1.5)
    N, C, H, W, O, R, st, p, dl = case
    d = tc.placeholder((N, C, H, W), name="data")
    w = tc.placeholder((O, C, R, R), name="weight")
    out = ops.conv2d_nchw(d, w, stride=st, padding=p, dilation=dl)
    OH, OW = _shape(out)[2:]
    info = sc.cpu_model()
    row_xb = sc.conv2d._conv_block_nchw(O, OH, OW, info, N, R, R, st)[2]
    block = sc.conv2d._nchw_by_channels(out, info, row_xb)
    assert (block is not None) == (on16 if lanes == 16 else on8), block
    s = sc.schedule_conv2d_nchw(out)
    text = str(tc.lower(s, [d, w, out]))
    if block is not None:
        ob, yb, xb = block
        assert ob == 2 * lanes and yb * xb <= 8 and OH % yb == 0 and (yb == 1 or xb == OW)
        assert re.search(r"allocate weight\.\w+: float32\[[^]]*\] \(\w+, strides \[1, ", text), text
        assert re.search(r"allocate conv2d_nchw\.local: float32\[[^]]*\] \(local, strides "
                         r"\[\d+, 1, ", text), text
    else:
        assert "strides" not in text
    assert ("prefetch data[" in text) == (block is not None and R == 1 and st > 1), text
    if not LONG and block is None and (lanes, l2) != (16, 16 << 10):
        return  # the row vectors' kernel runs once per case (and in test_conv2d_nchw)
    dn, wn = _arr((N, C, H, W)), _arr((O, C, R, R))
    _close(_run(s, [d, w, out], [dn, wn]), _conv_ref(dn, wn, st, p, dl), 5e-5)


ZEN4_CHANNEL_CASES = [
    # N, C, H, O, R, stride; channel vectors on Zen 4's model
    ((1, 512, 7, 512, 3, 1), False),   # 49 pixels: even the transposed copy costs > 1/8
    ((4, 512, 7, 512, 3, 1), True),    # 196 pixels: the transposed copy costs less
    ((4, 520, 7, 512, 3, 1), False),   # C*9 not a multiple of 16: a gathered copy
    ((1, 256, 14, 256, 3, 1), True),   # 14 of 16 lanes, 196 pixels: transposes
    ((1, 264, 14, 256, 3, 1), False),  # the same with gathers
    ((2, 512, 7, 512, 3, 1), True),    # 98 pixels, 9.4 MB of weights: in the L3
    ((2, 1024, 7, 1024, 3, 1), False),  # 37.7 MB: copied from memory
    ((4, 128, 28, 128, 3, 1), True),
    ((1, 2048, 7, 512, 1, 1), False),  # a 1x1 window likewise
    ((4, 2048, 7, 512, 1, 1), True),
    ((1, 256, 14, 512, 3, 2), True),   # a stride: the rows load more than they use
]


@pytest.mark.parametrize("case,chan", ZEN4_CHANNEL_CASES,
                         ids=lambda c: "x".join(map(str, c)) if isinstance(c, tuple) else None)
def test_conv2d_nchw_channel_vectors_weigh_the_weight_copy(case, chan, monkeypatch):
    """On Zen 4's model (FMAs of half a 512-bit register, a gathered element at 4 FMAs'
    time, one copied in register transposes at 0.8 while the weights fit in half the
    32 MiB L3, 1.2 from memory) an NCHW convolution keeps its row vectors where their
    idle lanes cost less than copying the weights across the output channels would for
    that many pixels; on a full-width model with cheaper gathers every layer here takes
    channel vectors.  The search may take either (the knob is offered both ways), and
    both compute the convolution."""
    from tecomp.strategy import Knobs, apply_rules

    monkeypatch.setenv("TECOMP_VECTOR_LANES", "16")
    N, C, H, O, R, st = case
    d = tc.placeholder((N, C, H, H), name="data")
    w = tc.placeholder((O, C, R, R), name="weight")
    out = ops.conv2d_nchw(d, w, stride=st, padding=R // 2)
    info = sc.cpu_model()
    OH, OW = _shape(out)[2:]
    row_xb = sc.conv2d._conv_block_nchw(O, OH, OW, info, N, R, R, st)[2]
    with_fma_model(monkeypatch, half_width=True, gather_cost=4.0, transpose_cost=0.8)
    info = sc.cpu_model()
    assert sc.conv2d._row_lane_use(7, 7, info) == 7 / 8
    assert (sc.conv2d._nchw_by_channels(out, info, row_xb) is not None) == chan
    assert sc.conv2d_nchw_params(out, info).by_channels == chan
    with_fma_model(monkeypatch, half_width=False, gather_cost=1.5)
    info = sc.cpu_model()
    assert sc.conv2d._row_lane_use(7, 7, info) == 7 / 16
    assert sc.conv2d._nchw_by_channels(out, info, row_xb) is not None
    if N * C * H > 4096:
        return   # (the large layers: the decision only; the small ones run both ways)
    with_fma_model(monkeypatch, half_width=True, gather_cost=4.0, transpose_cost=0.8)
    info = sc.cpu_model()
    dn, wn = _arr((N, C, H, H)), _arr((O, C, R, R))
    ref = _conv_ref(dn, wn, st, R // 2, 1)
    for by_channels in (True, False):
        knobs = Knobs({"conv2d_nchw.by_channels": by_channels})
        s = apply_rules([d, w, out], knobs, info)
        assert knobs.space["conv2d_nchw.by_channels"] == [True, False]
        text = str(tc.lower(s, [d, w, out]))
        assert ("strides [1, " in text) == by_channels, text
        _close(_run(s, [d, w, out], [dn, wn]), ref, 5e-4)


@pytest.mark.parametrize("R,C,copy", [(1, 512, "transposes"), (1, 520, "rows"),
                                      (3, 512, "transposes"), (3, 520, "gathers")])
def test_conv2d_nchw_weight_copy_across_output_channels(R, C, copy, monkeypatch):
    """Channel vectors whose channel blocks are the tasks, each copying its own block of
    large weights: in 16 x 16 register transposes of (output channels, C*R*R) where the
    tiles divide C*R*R (a 3x3 window's tiles are affine in W's flattened memory only);
    else a 1x1 window's block row by row, element by element (no gathers), and a 3x3
    window's with one gathered vector across the block's rows.  Right each way."""
    monkeypatch.setenv("TECOMP_VECTOR_LANES", "16")
    with_l2(monkeypatch, 16 << 10)
    d = tc.placeholder((1, C, 14, 14), name="data")
    w = tc.placeholder((512, C, R, R), name="weight")
    out = ops.conv2d_nchw(d, w, stride=2, padding=R // 2)
    assert sc.conv2d_nchw_params(out).by_channels
    s = sc.schedule_conv2d_nchw(out)
    text = str(tc.lower(s, [d, w, out]))
    row_copy = re.search(r"parallel \(o\.outer, 0, 16\) \{\s+allocate weight\.local: [^(]+"
                         r"\(local, strides \[1, [^]]*\]\)\s+for \(i0\.inner, 0, 32\) \{\s+"
                         rf"for \(i1\.i2\.fused\.i3\.fused, 0, {C}\)", text)
    assert bool(row_copy) == (copy == "rows"), text
    assert ("x86.transpose_f32_16x16" in text) == (copy == "transposes"), text
    assert ("vectorized (i0.inner, 0, 32)" in text) == (copy == "gathers"), text
    dn, wn = _arr((1, C, 14, 14)), _arr((512, C, R, R))
    _close(_run(s, [d, w, out], [dn, wn]), _conv_ref(dn, wn, 2, R // 2, 1), 5e-4)


def test_conv2d_nchw_by_channels_fused_epilogue(monkeypatch):
    """relu(bias_add(conv)) on the channel-vector schedule: applied to the register block
    on its way out (the conv is only a local buffer).  (16 lanes, full-width FMAs: 7-wide
    rows take the channel vectors there.)"""
    monkeypatch.setenv("TECOMP_VECTOR_LANES", "16")
    with_fma_model(monkeypatch, half_width=False, gather_cost=1.5)
    d = tc.placeholder((2, 32, 14, 14), name="data")
    w = tc.placeholder((64, 32, 3, 3), name="weight")
    b = tc.placeholder((64,), name="bias")
    conv = ops.conv2d_nchw(d, w, stride=2, padding=1)
    out = ops.relu(ops.bias_add(conv, b))
    s = sc.schedule_conv2d_nchw(out)
    text = str(tc.lower(s, [d, w, b, out]))
    assert all("(local" in line for line in text.splitlines() if f"allocate {conv.name}:" in line)
    assert sc.conv2d._nchw_by_channels(conv, sc.cpu_model(), 7) is not None
    dn, wn, bn = _arr((2, 32, 14, 14)), _arr((64, 32, 3, 3)), _arr((64,))
    ref = np.maximum(_conv_ref(dn, wn, 2, 1, 1) + bn[None, :, None, None], 0)
    _close(_run(s, [d, w, b, out], [dn, wn, bn]), ref, 5e-5)


def test_conv2d_with_epilogue():
    d = tc.placeholder((1, 8, 10, 10), name="data")
    w = tc.placeholder((12, 8, 3, 3), name="weight")
    b = tc.placeholder((12,), name="bias")
    out = ops.relu(ops.bias_add(ops.conv2d_nchw(d, w, padding=1), b))
    s = sc.schedule_conv2d_nchw(out)
    dn, wn, bn = _arr((1, 8, 10, 10)), _arr((12, 8, 3, 3)), _arr((12,))
    ref = np.maximum(_conv_ref(dn, wn, 1, 1, 1) + bn[None, :, None, None], 0)
    _close(_run(s, [d, w, b, out], [dn, wn, bn]), ref, 5e-5)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("C,K,H,W", [(8, 12, 10, 10), (5, 40, 13, 17), (16, 64, 28, 28)])
def test_conv2d_fused_epilogue(layout, C, K, H, W):
    """relu(bias_add(conv)) is applied to each register tile on its way out: the conv
    is a local buffer inside the output's tile loop (no second pass over the output),
    also for tiles cut by the edges."""
    b = tc.placeholder((K,), name="bias")
    dn, wn, bn = _arr((1, C, H, W)), _arr((K, C, 3, 3)), _arr((K,))
    ref = np.maximum(_conv_ref(dn, wn, 1, 1, 1) + bn[None, :, None, None], 0)
    if layout == "NCHW":
        d = tc.placeholder((1, C, H, W), name="data")
        w = tc.placeholder((K, C, 3, 3), name="weight")
        conv = ops.conv2d_nchw(d, w, padding=1)
        out = ops.relu(ops.bias_add(conv, b))
        s = sc.schedule_conv2d_nchw(out)
        inputs = [dn, wn, bn]
    else:
        d = tc.placeholder((1, H, W, C), name="data")
        w = tc.placeholder((3, 3, C, K), name="weight")
        conv = ops.conv2d_nhwc(d, w, padding=1)
        out = ops.relu(ops.bias_add(conv, b, axis=3))
        s = sc.schedule_conv2d_nhwc(out)
        inputs = [np.ascontiguousarray(dn.transpose(0, 2, 3, 1)),
                  np.ascontiguousarray(wn.transpose(2, 3, 1, 0)), bn]
        ref = ref.transpose(0, 2, 3, 1)
    text = str(tc.lower(s, [d, w, b, out]))
    assert re.search(rf"allocate {conv.name}: float32\[[^]]*\] \(local\)", text), text
    # no buffer for the whole conv: the epilogue has no pass of its own
    assert all("(local)" in line for line in text.splitlines()
               if f"allocate {conv.name}:" in line), text
    _close(_run(s, [d, w, b, out], inputs), ref, 5e-5)


def test_conv2d_epilogue_not_fused_when_read_at_other_indices():
    """An epilogue that reads the conv at other indices (a transpose) is its own pass
    over a conv computed in full."""
    d = tc.placeholder((1, 8, 10, 10), name="data")
    w = tc.placeholder((8, 8, 3, 3), name="weight")
    conv = ops.conv2d_nchw(d, w, padding=1)
    out = tc.compute((1, 8, 10, 10), lambda n, k, y, x: conv[n, k, x, y] * 2.0, name="tr")
    s = sc.schedule_conv2d_nchw(out)
    text = str(tc.lower(s, [d, w, out]))
    assert re.search(rf"allocate {conv.name}: float32\[1, 8, 10, 10\]", text), text
    dn, wn = _arr((1, 8, 10, 10)), _arr((8, 8, 3, 3))
    ref = _conv_ref(dn, wn, 1, 1, 1).transpose(0, 1, 3, 2) * 2.0
    _close(_run(s, [d, w, out], [dn, wn]), ref, 5e-5)


def _nhwc_copied_and_in_place_agree(d, w, out, x, wt):
    """Run the NHWC template with its weights copied and read in place: the same output
    (returned)."""
    outs = []
    for wc in (True, False):
        f = tc.build(sc.schedule_conv2d_nhwc(out, config={"weight_copy": wc}), [d, w, out])
        o = np.zeros(_shape(out), "float32")
        f(x, wt, o)
        outs.append(o)
    np.testing.assert_array_equal(outs[0], outs[1])
    return outs[1]


def test_conv2d_pad_placement():
    """Weights that fit in cache: each task pads the rows it reads (allocated inside the
    task loop); large weights (2.4 MB): the pad is one root pass and the channel blocks
    are the outer part of the tasks; HWIO weights are copied per channel block (small
    ones once per call), or read in place (``weight_copy=False``, the default where split
    loads cost nothing)."""
    d = tc.placeholder((1, 8, 28, 28), name="data")
    w = tc.placeholder((64, 8, 3, 3), name="weight")
    out = ops.conv2d_nchw(d, w, padding=1)
    text = str(tc.lower(sc.schedule_conv2d_nchw(out), [d, w, out]))
    assert text.index("parallel") < text.index("allocate conv2d_nchw.pad")
    d2 = tc.placeholder((1, 256, 16, 16), name="data")
    w2 = tc.placeholder((256, 256, 3, 3), name="weight")
    out2 = ops.conv2d_nchw(d2, w2, padding=1)
    text2 = str(tc.lower(sc.schedule_conv2d_nchw(out2), [d2, w2, out2]))
    assert text2.index("allocate conv2d_nchw.pad") < text2.index("parallel")
    assert "parallel (n.o.outer.fused.y.outer.fused" in text2
    d3 = tc.placeholder((1, 6, 6, 256), name="data")
    w3 = tc.placeholder((3, 3, 256, 256), name="weight")
    out3 = ops.conv2d_nhwc(d3, w3, padding=1)
    copied = str(tc.lower(sc.schedule_conv2d_nhwc(out3, config={"weight_copy": True}),
                          [d3, w3, out3]))
    assert "allocate weight.local" in copied
    in_place = str(tc.lower(sc.schedule_conv2d_nhwc(out3, config={"weight_copy": False}),
                            [d3, w3, out3]))
    assert "weight.local" not in in_place and "parallel (o.outer" in in_place
    default = str(tc.lower(sc.schedule_conv2d_nhwc(out3), [d3, w3, out3]))
    assert default == (in_place if sc.cpu_model().split_loads_cheap else copied)
    assert sc.conv2d_nhwc_params(out3, sc.cpu_model("llvm -mcpu=skylake-avx512")).weight_copy
    assert not sc.conv2d_nhwc_params(out3, sc.cpu_model("llvm -mcpu=znver4")).weight_copy
    # both compute the convolution
    rng = np.random.default_rng(3)
    x = rng.uniform(-1, 1, (1, 6, 6, 256)).astype("float32")
    wt = rng.uniform(-1, 1, (3, 3, 256, 256)).astype("float32")
    _nhwc_copied_and_in_place_agree(d3, w3, out3, x, wt)
    # small HWIO weights (147 KB): copied once at the root into an aligned buffer, or
    # read in place with weight_copy=False (the default where split loads cost nothing)
    d4 = tc.placeholder((1, 14, 14, 64), name="data")
    w4 = tc.placeholder((3, 3, 64, 64), name="weight")
    out4 = ops.conv2d_nhwc(d4, w4, padding=1)
    texts = {wc: str(tc.lower(sc.schedule_conv2d_nhwc(out4, config={"weight_copy": wc}),
                              [d4, w4, out4])) for wc in (True, False)}
    assert "allocate weight.global" in texts[True]
    assert texts[True].index("allocate weight.global") < texts[True].index("parallel")
    assert "weight.global" not in texts[False] and "weight.local" not in texts[False]
    default = str(tc.lower(sc.schedule_conv2d_nhwc(out4), [d4, w4, out4]))
    assert default == texts[not sc.cpu_model().split_loads_cheap]
    x = rng.uniform(-1, 1, (1, 14, 14, 64)).astype("float32")
    wt = rng.uniform(-1, 1, (3, 3, 64, 64)).astype("float32")
    # weights at 16 bytes past a cache line, as numpy places large arrays
    buf = np.empty(wt.size + 32, "float32")
    start = (-(buf.ctypes.data // 4)) % 16 + 4
    wt_off = buf[start:start + wt.size].reshape(wt.shape)
    wt_off[...] = wt
    got = _nhwc_copied_and_in_place_agree(d4, w4, out4, x, wt_off)
    _close(got.transpose(0, 3, 1, 2),
           _conv_ref(x.transpose(0, 3, 1, 2), wt.transpose(3, 2, 0, 1), 1, 1, 1), 5e-5)


# ---------------------------------------------------------------------------------
# softmax


def _softmax_ref(x):
    x = x.astype("float64")
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize("fast", [False, True], ids=["exp", "fast_exp"])
@pytest.mark.parametrize("shape", [(64, 1024), (7, 13), (1, 1), (3, 1000), (2, 3, 37), (50,)])
def test_softmax(shape, fast, lanes):
    X = tc.placeholder(shape, name="X")
    Y = sc.softmax_fast(X) if fast else ops.softmax(X)
    s = sc.schedule_softmax(Y)
    x = _arr(shape, 4.0)
    got = _run(s, [X, Y], [x])
    # float32 row sums of ~1000 terms: ~1e-6 relative; exp (= fast_exp) adds <= 1 ulp per
    # element, softmax_fast one reciprocal per row (docs/numerics.md)
    np.testing.assert_allclose(got, _softmax_ref(x), rtol=5e-6 if fast else 3e-6, atol=1e-9)


@pytest.mark.parametrize("which", ["softmax", "softmax_fast", "log_softmax"])
def test_softmax_nan_and_inf_rows(which):
    """The row maximum ignores NaN ordering (a > b ? a : b), but a NaN or +inf in a row
    still makes the whole row NaN, as numpy's softmax does (docs/numerics.md); NaN at
    the first and the last position too."""
    X = tc.placeholder((5, 40), name="X")
    Y = {"softmax": ops.softmax, "softmax_fast": sc.softmax_fast,
         "log_softmax": ops.log_softmax}[which](X)
    x = _arr((5, 40))
    x[1, 5] = np.nan
    x[2, 7] = np.inf
    x[3, 0] = np.nan
    x[4, 39] = np.nan
    got = _run(sc.schedule_softmax(Y), [X, Y], [x])
    with np.errstate(invalid="ignore"):
        ref = _softmax_ref(x)
    if which == "log_softmax":
        with np.errstate(invalid="ignore", divide="ignore"):
            ref = np.log(ref)
    assert np.isnan(got[1:]).all()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    np.testing.assert_allclose(got[0], ref[0], rtol=5e-6, atol=1e-6)


def test_softmax_prefetches_rows():
    """schedule_softmax prefetches the input's next row during the exp pass, one vector's
    columns per step (along the row loop); a row of one vector at the row's start, only
    while it is at most a quarter of L1."""
    X = tc.placeholder((64, 1024), name="X")
    Y = ops.softmax(X)
    X2 = tc.placeholder((8, 12), name="X2")
    Y2 = ops.log_softmax(X2)
    # 16 lanes (AVX-512) and 8 (AVX2), lowered on any machine: one prefetch per vector
    # step, which covers a line (16 floats) in one step or in two (the short row: one
    # vector or two, too few steps for a stream: a prefetch at each end of a step)
    short = {16: ["prefetch X2[min(i0 + 1, 7), min(X2.pf1*16, 11)]"],
             8: ["prefetch X2[min(i0 + 1, 7), min(X2.pf1*16, 7)]",       # 12 = 8 + 4
                 "prefetch X2[min(i0 + 1, 7), min(X2.pf1*16, 3) + 8]"]}
    for target, L in (("llvm -mcpu=skylake-avx512", 16), ("llvm -mcpu=haswell", 8)):
        text = str(tc.lower(sc.schedule_softmax(Y, target=target), [X, Y], target=target))
        pf = [ln.strip() for ln in text.splitlines() if "prefetch" in ln]
        # (a stream: one prefetch at the step's start, the steps cover every line)
        assert pf == [f"prefetch X[min(i0 + 1, 63), i1.outer*{L}]"], pf
        assert "prefetch (write)" not in text
        text = str(tc.lower(sc.schedule_softmax(Y2, target=target), [X2, Y2], target=target))
        pf = [ln.strip() for ln in text.splitlines() if "prefetch" in ln]
        assert pf == short[L], pf
    s = sc.schedule_softmax(Y)
    x = _arr((64, 1024), 4.0)
    got = _run(s, [X, Y], [x])
    np.testing.assert_allclose(got, _softmax_ref(x), rtol=3e-6, atol=1e-9)


def test_log_softmax():
    X = tc.placeholder((9, 70), name="X")
    Y = ops.log_softmax(X)
    x = _arr((9, 70), 3.0)
    got = _run(sc.schedule_softmax(Y), [X, Y], [x])
    np.testing.assert_allclose(got, np.log(_softmax_ref(x)), rtol=1e-5, atol=1e-5)


def test_fast_exp_error_bound():
    """tc.fast_exp (the same code as float32 tc.exp) in a tuned elementwise schedule:
    within 1 ulp of the rounded exp, so < 1.8e-7 relative over the range where exp is a
    normal float32 ([-87.3, 88.7]); the all-inputs check is in test_codegen_llvm.py."""
    n = 1 << 20
    X = tc.placeholder((n,), name="X")
    Y = tc.compute((n,), lambda i: tc.fast_exp(X[i]), name="Y")
    s = sc.schedule_elementwise(Y)
    x = np.linspace(-87.3, 88.7, n, dtype="float64").astype("float32")
    y = _run(s, [X, Y], [x])
    ref = np.exp(x.astype("float64"))
    rel = np.abs(y.astype("float64") - ref) / ref
    assert rel.max() < 1.8e-7, rel.max()
    # and around 0, where softmax's largest terms live
    x2 = RNG.uniform(-10, 0, n).astype("float32")
    y2 = _run(s, [X, Y], [x2])
    ref2 = np.exp(x2.astype("float64"))
    assert (np.abs(y2 - ref2) / ref2).max() < 1.8e-7


# ---------------------------------------------------------------------------------
# pooling and elementwise


@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("case", [(1, 64, 56, 56, 3, 2, 1), (2, 3, 7, 9, 2, 2, 0),
                                  (1, 5, 13, 11, 3, 1, 1), (1, 1, 1, 1, 1, 1, 0)],
                         ids=lambda c: "x".join(map(str, c)))
def test_pool(kind, case):
    N, C, H, W, k, st, p = case
    d = tc.placeholder((N, C, H, W), name="data")
    out = (ops.max_pool2d if kind == "max" else ops.avg_pool2d)(d, k, stride=st, padding=p)
    s = sc.schedule_pool(out)
    dn = _arr((N, C, H, W))
    fill = -np.inf if kind == "max" else 0.0
    dp = np.pad(dn.astype("float64"), ((0, 0), (0, 0), (p, p), (p, p)), constant_values=fill)
    OH, OW = (H + 2 * p - k) // st + 1, (W + 2 * p - k) // st + 1
    wins = np.stack([dp[:, :, a: a + st * (OH - 1) + 1: st, b: b + st * (OW - 1) + 1: st]
                     for a in range(k) for b in range(k)])
    ref = wins.max(0) if kind == "max" else wins.sum(0) / (k * k)
    _close(_run(s, [d, out], [dn]), ref)


@pytest.mark.parametrize("shape", [(4, 64, 56, 56), (3, 7), (1,), (2, 3, 5, 17)])
def test_elementwise(shape):
    X = tc.placeholder(shape, name="X")
    b = tc.placeholder((shape[-1],), name="b")
    Y = ops.relu(ops.bias_add(X, b, axis=-1))
    s = sc.schedule_elementwise(Y)
    x, bn = _arr(shape), _arr((shape[-1],))
    _close(_run(s, [X, b, Y], [x, bn]), np.maximum(x.astype("float64") + bn, 0))
    assert sc.schedule_injective is sc.schedule_elementwise


def test_wrong_target_and_outputs():
    X = tc.placeholder((4, 4), name="X")
    with pytest.raises(tc.ScheduleError, match="target='llvm'"):
        sc.schedule_softmax(ops.softmax(X), target="cuda")
    with pytest.raises(tc.ScheduleError, match="output tensor"):
        sc.schedule_matmul("C")
    # no matmul stage: not an error, the auto-scheduler's rules schedule the DAG
    Y = ops.relu(X)
    x = _arr((4, 4))
    _close(_run(sc.schedule_matmul(Y), [X, Y], [x]), np.maximum(x.astype("float64"), 0))


def test_cpu_info_follows_threads(threads):
    tc.set_num_threads(1)
    assert sc.cpu_model().threads == 1
    assert sc.gemm_params(512, 512, 512).par == "rows"
    tc.set_num_threads(2)
    assert sc.cpu_model().threads == 2
    # 2 threads: (row block x column block) tasks, at least two per thread, each packing
    # its own B block
    p = sc.gemm_params(512, 512, 512)
    assert p.par == "blocks" and -(-512 // p.nc) * -(-512 // p.mc) >= 4
    assert sc.gemm_params(16, 4096, 256).par == "blocks"
    L = sc.cpu_model().lanes
    p = sc.gemm_params(4096, L, 256)       # one column panel: the rows are split instead
    assert p.nc == L and -(-4096 // p.mc) >= 4
    p = sc.gemm_params(1024, 1024, 1024)
    assert p.nr % sc.cpu_model().lanes == 0
    # AVX-512's 32 registers: 8 x 32 (12 rows would leave a row tail); AVX2's 16: 6 x 16
    # (12 accumulators; the 4-row tail is a second micro-kernel)
    p = sc.gemm_params(1024, 1024, 1024, sc.cpu_model("llvm -mcpu=skylake-avx512"))
    assert (p.mr, p.nr) == (8, 32)
    p = sc.gemm_params(1024, 1024, 1024, sc.cpu_model("llvm -mcpu=haswell"))
    assert (p.mr, p.nr) == (6, 16)


def test_gemm_block_with_fewest_loads(threads):
    """Where the machine model has a measured cost of the micro-kernel's loads
    (``gemm_load_cost``: Zen 5), a matrix of at least 128 columns (AVX-512) takes the
    register block with the fewest loads per useful FMA among 1, 2 and 4 vectors: 6 x 64
    at 2048^3 (10 loads for 24 FMAs, against 8 x 32's 10 for 16), its rows dividing M
    where a nearby count does (1000: 5); narrower matrices keep their rules (77: one
    vector), and without the cost (Skylake-AVX512, or the cost 0) nothing changes."""
    import dataclasses
    tc.set_num_threads(2)
    z5 = sc.cpu_model("llvm -mcpu=znver5")
    assert z5.gemm_load_cost > 0 and z5.fma_latency * z5.fma_ports <= 24
    for M, N, K, block in [(2048, 2048, 2048, (6, 64)), (1024, 1024, 1024, (6, 64)),
                           (1000, 1000, 1000, (5, 64)), (333, 77, 1031, (9, 16)),
                           (200, 96, 2000, (10, 32)), (1024, 40, 1024, (8, 16))]:
        p = sc.gemm_params(M, N, K, z5)
        assert (p.mr, p.nr) == block, (M, N, K, p)
        q = sc.gemm_params(M, N, K, dataclasses.replace(z5, gemm_load_cost=0.0))
        assert q == sc.gemm_params(M, N, K, dataclasses.replace(
            sc.cpu_model("llvm -mcpu=skylake-avx512"), threads=z5.threads,
            l1_bytes=z5.l1_bytes, l2_bytes=z5.l2_bytes)), (M, N, K)
    # a padded last panel counts: 16 x 64 columns pad 1000 to 1024, 2 vectors too, so
    # the wider block still wins; a cost of loads so small that padding dominates keeps
    # the narrower block where it pads less (the 77-column rule's domain is not reached)
    cheap = dataclasses.replace(z5, gemm_load_cost=1e-3)
    assert sc.gemm_params(2048, 2048, 2048, cheap).nr == 64
    assert sc.gemm_params(2048, 2000, 2048, cheap).nr == 16   # 2000 = 125 x 16
    # symbolic extents: the panel width from N alone (matmul_packed's default)
    assert sc.gemm_params(None, 2048, None, z5).nr == 64


def test_gemm_wide_block_stays_in_registers():
    """The 6 x 64 block Zen 5's model picks (24 accumulators, 4 vectors of B, one
    broadcast: 29 of the 32 registers), compiled for znver5 (the assembly only): its k
    loop is broadcasts of A and FMAs with register operands, 4 FMAs per broadcast, and
    nothing from or to the stack."""
    target = "llvm -mcpu=znver5"
    if tc.Target("llvm").isa != "x86-64":
        pytest.skip("x86 assembly")
    A = tc.placeholder((120, 256), name="A")
    B = tc.placeholder((256, 256), name="B")
    C = sc.matmul_packed(A, B, target=target)
    assert C.op.attrs["nr"] == 64
    asm = tc.build(sc.schedule_matmul(C, target), [A, B, C], target=target,
                   name="mm").get_source("asm")
    loops = re.split(r"\n\.LBB\S*:", asm)
    # (each block up to its branch back: the loop)
    body = max((re.split(r"\n\tj", b)[0] for b in loops), key=lambda b: b.count("vfmadd231ps"))
    fmas, bcasts = body.count("vfmadd231ps"), body.count("vbroadcastss")
    assert fmas >= 24 and fmas == 4 * bcasts, body
    assert "rsp" not in body and not re.search(r"vfmadd231ps\s+[^%\n]*\(", body), body


def test_gemm_column_blocks_are_whole_panels(threads):
    """With several threads, where N is a multiple of NR, the column blocks of the
    "blocks" mode divide the panels evenly: a ragged last block put a guard on every
    micro-kernel of the fused parallel loop (1024x160x1024: 5 panels of 32 in blocks of
    2 ran 3x slower than blocks of 1)."""
    tc.set_num_threads(2)
    for model in (sc.cpu_model(), sc.cpu_model("llvm -mcpu=skylake-avx512")):
        for M, N, K in [(1024, 160, 1024), (512, 224, 256), (2048, 2048, 2048), (256, 96, 64)]:
            p = sc.gemm_params(M, N, K, model)
            if p.par == "blocks" and N % p.nr == 0:
                assert (N // p.nr) % (p.nc // p.nr) == 0, (M, N, K, p)
    A = tc.placeholder((64, 64), name="A")
    B = tc.placeholder((64, 160), name="B")
    C = sc.matmul_packed(A, B, nr=32)
    text = str(tc.lower(sc.schedule_matmul(C, config={"par": "blocks", "mr": 8}),
                        [A, B, C]))
    assert "parallel" in text and "if (j.inner <" not in text, text


def test_gemm_threads_mode_where_blocks_share_unevenly(threads):
    """Two threads, AVX-512: "threads" (one contiguous share of row panels per thread,
    each packing B itself) where no block split exists (333 rows = 37 panels of 9) or the
    column blocks would split unevenly (200 columns: 13 panels in blocks of 4); "blocks"
    where those split evenly and the rows would not (127 rows), and for the square
    shapes.  One vector per panel where two would pad N by over 1/16 more (77: 96 against
    80 columns; not 1000: 1024 against 1008); AVX2 keeps two."""
    tc.set_num_threads(2)
    avx512 = sc.cpu_model("llvm -mcpu=skylake-avx512")
    p = sc.gemm_params(333, 77, 1031, avx512)
    assert (p.par, p.nr, p.mr, p.nc) == ("threads", 16, 9, 16), p
    assert sc.gemm_params(512, 200, 512, avx512).par == "threads"
    assert sc.gemm_params(127, 509, 257, avx512).par == "blocks"
    p = sc.gemm_params(61, 1000, 1024, avx512)
    assert (p.mr, p.nr, p.par) == (12, 32, "blocks"), p
    for n in (512, 1024, 2048):
        assert sc.gemm_params(n, n, n, avx512).par == "blocks"
    assert sc.gemm_params(333, 77, 1031, sc.cpu_model("llvm -mcpu=haswell")).nr == 16
    tc.set_num_threads(1)
    assert sc.gemm_params(333, 77, 1031, sc.cpu_model("llvm -mcpu=skylake-avx512")).par == "rows"


@pytest.mark.parametrize("nthreads", [2, 3, 4])
@pytest.mark.parametrize("M,N,K,config", [
    (63, 77, 12, {"mr": 9}),                              # 7 panels: shares 4 + 3
    (70, 45, 24, {"par": "threads", "mr": 8}),            # a ragged row panel (70 = 8*8 + 6)
    (9, 40, 24, {"par": "threads", "mr": 4}),             # 3 panels for up to 4 threads
    (40, 33, 48, {"par": "threads", "kc": 16}),           # slices: C accumulated per slice
])
@pytest.mark.parametrize("packed", [False, True])
def test_gemm_threads_mode_runs_right(threads, nthreads, M, N, K, config, packed):
    if not LONG and (nthreads == 4 and M != 9 or nthreads == 3 and packed):
        pytest.skip("the whole threads x shapes x packing matrix: set TECOMP_LONG_TESTS=1 (by "
                    "default 2 threads for all, 3 unpacked, 4 where panels are fewer)")
    """"threads" mode on shares that differ, a ragged last row panel, fewer panels than
    threads, several reduction slices, plain and packed B: the interpreter (which fails
    on two iterations of a parallel loop writing the same element) and LLVM agree with
    numpy, and the parallel loop is the share loop, outermost."""
    from tecomp.ir import interp

    tc.set_num_threads(nthreads)
    A, B = tc.placeholder((M, K), name="A"), tc.placeholder((K, N), name="B")
    C = sc.matmul_packed(A, B) if packed else ops.matmul(A, B)
    args = [A, B, C]
    s = sc.schedule_matmul(C, config=dict(config, par="threads"))
    text = str(tc.lower(s, args))
    loops = re.findall(r"parallel \(([^,]+), 0, (\d+)\)", text)
    assert len(loops) == 1 and int(loops[0][1]) == nthreads, text
    assert text.split("\n")[1].lstrip().startswith(("parallel", "// attr")), text
    a, b = _arr((M, K)), _arr((K, N))
    ref = a.astype("float64") @ b.astype("float64")
    _close(_run(s, args, [a, b]), ref)
    got = np.full((M, N), np.nan, "float32")
    interp.run(tc.lower(s, args), a, b, got)
    _close(got, ref)


@pytest.mark.parametrize("OW", [13, 27, 14, 56, 7])
def test_conv2d_nchw_row_vector_without_masks_divides_the_row(OW):
    """AVX2 has no mask registers: an NCHW block's columns divide the row (a 13- or
    27-wide row as one vector of register-wide pieces, up to four registers) instead of
    8 lanes and a guarded tail run lane by lane (Zen 3: 384 -> 256 channels at 13x13 106.9
    against 12.8 GFLOP/s).  AVX-512 keeps its masked tails.  Lowered for both targets on
    any machine and run through the interpreter."""
    from tecomp.ir import interp

    info = sc.cpu_model("llvm -mcpu=haswell")
    ob, yb, xb = sc.conv2d._conv_block_nchw(64, OW, OW, info)
    assert OW % xb == 0 and xb <= 4 * info.lanes, (ob, yb, xb)
    if OW not in (13, 27):
        return
    d = tc.placeholder((1, 2, OW, OW), name="data")
    w = tc.placeholder((4, 2, 3, 3), name="weight")
    out = ops.conv2d_nchw(d, w, padding=1)
    dn, wn = _arr((1, 2, OW, OW)), _arr((4, 2, 3, 3))
    got = np.full((1, 4, OW, OW), np.nan, "float32")
    s = sc.schedule_conv2d_nchw(out, target="llvm -mcpu=haswell")
    interp.run(tc.lower(s, [d, w, out], target="llvm -mcpu=haswell"), dn, wn, got)
    _close(got, _conv_ref(dn, wn, 1, 1, 1), 5e-5)


def test_matmul_config_is_applied_and_defaults_to_the_heuristic():
    """``schedule_matmul(outs, target, config)``: the template's config (GemmParams, or a
    dict of some of its fields) is what the schedule applies; the heuristic's own config
    gives the default schedule, another one another schedule with the same result."""
    M, N, K = 70, 45, 64
    A, B = tc.placeholder((M, K), name="A"), tc.placeholder((K, N), name="B")
    C = ops.matmul(A, B)
    args = [A, B, C]
    default = str(tc.lower(sc.schedule_matmul(C), args))
    p = sc.gemm_params(M, N, K)
    assert p.nc == p.nr  # (plain matmul's B is copied as one panel: the default's NC)
    assert str(tc.lower(sc.schedule_matmul(C, config=p), args)) == default
    assert str(tc.lower(sc.schedule_matmul(C, config={}), args)) == default
    other = str(tc.lower(sc.schedule_matmul(C, config={"mr": 2, "kc": 16}), args))
    # two rows in the micro-kernel, the reduction in slices of 16
    assert "unrolled (i.inner.inner, 0, 2)" in other and "for (k.inner, 0, 16)" in other
    a, b = _arr((M, K)), _arr((K, N))
    ref = a.astype("float64") @ b.astype("float64")
    for cfg in ({"mr": 2, "kc": 16}, {"nr": sc.cpu_model().lanes, "mr": 3}, {"par": "rows"}, p):
        _close(_run(sc.schedule_matmul(C, config=cfg), args, [a, b]), ref)


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_conv2d_config_is_applied_and_defaults_to_the_heuristic(layout):
    """``schedule_conv2d_*(outs, target, config)``: the heuristic's ConvParams gives the
    default schedule; other register blocks (the model's other candidates, channel
    vectors forced on an NCHW shape whose heuristic runs row vectors, blocks with tails)
    compute the same convolution."""
    N, C, H, O, R = 1, 16, 13, 24, 3
    if layout == "nchw":
        d, w = tc.placeholder((N, C, H, H), name="data"), tc.placeholder((O, C, R, R), name="w")
        out = ops.conv2d_nchw(d, w, padding=1)
        sched, params = sc.schedule_conv2d_nchw, sc.conv2d_nchw_params
        dn, wn = _arr((N, C, H, H)), _arr((O, C, R, R))
        ref = _conv_ref(dn, wn, 1, 1, 1)
    else:
        d, w = tc.placeholder((N, H, H, C), name="data"), tc.placeholder((R, R, C, O), name="w")
        out = ops.conv2d_nhwc(d, w, padding=1)
        sched, params = sc.schedule_conv2d_nhwc, sc.conv2d_nhwc_params
        dn, wn = _arr((N, H, H, C)), _arr((R, R, C, O))
        ref = _conv_ref(dn.transpose(0, 3, 1, 2), wn.transpose(3, 2, 0, 1), 1, 1, 1)
        ref = ref.transpose(0, 2, 3, 1)
    args = [d, w, out]
    p = params(out)
    assert isinstance(p, sc.ConvParams) and not (layout == "nhwc" and p.by_channels)
    default = str(tc.lower(sched(out), args))
    assert str(tc.lower(sched(out, config=p), args)) == default
    configs = [{"ob": 3, "yb": 2, "xb": 5}, {"yb": 1, "xb": 1}]
    if layout == "nchw":
        configs.append({"ob": 8, "yb": 1, "xb": 4, "by_channels": True})
    for cfg in configs:
        s = sched(out, config=cfg)
        assert str(tc.lower(s, args)) != default
        _close(_run(s, args, [dn, wn]), ref, 5e-5)


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_conv2d_block_knob_searches_the_models_candidates(layout):
    """tc.autoschedule.default_config of a convolution records the block knob (rank 0: the
    heuristic); another rank gives another schedule with the same result."""
    N, C, H, O = 1, 8, 12, 16
    if layout == "nchw":
        d, w = tc.placeholder((N, C, H, H), name="data"), tc.placeholder((O, C, 1, 1), name="w")
        out = ops.conv2d_nchw(d, w)   # 1x1: the template also without AVX-512's masks
        dn, wn = _arr((N, C, H, H)), _arr((O, C, 1, 1))
        ref = _conv_ref(dn, wn, 1, 0, 1)
    else:
        d, w = tc.placeholder((N, H, H, C), name="data"), tc.placeholder((3, 3, C, O), name="w")
        out = ops.conv2d_nhwc(d, w, padding=1)
        dn, wn = _arr((N, H, H, C)), _arr((3, 3, C, O))
        ref = _conv_ref(dn.transpose(0, 3, 1, 2), wn.transpose(3, 2, 0, 1), 1, 1, 1)
        ref = ref.transpose(0, 2, 3, 1)
    args = [d, w, out]
    cfg = tc.autoschedule.default_config(args)
    knob = f"conv2d_{layout}.block"
    assert cfg[knob] == 0 and len(cfg.space[knob]) > 2
    default = str(tc.lower(tc.autoschedule.apply_config(args, cfg), args))
    assert default == str(tc.lower(tc.auto_schedule(args), args))
    s = tc.autoschedule.apply_config(args, cfg.set(knob, 2))
    assert str(tc.lower(s, args)) != default
    _close(_run(s, args, [dn, wn]), ref, 5e-5)


# ---------------------------------------------------------------------------------
# float16 / bfloat16 definitions (float32 sums, a rounding epilogue) under the templates


def _loops(s):
    """The loop structure the schedule gives each reduction stage: its leaf axes and their
    kinds, and where it is attached."""
    return {st.op.tag or st.op.name: [(iv.var.name, getattr(st.iter_attrs.get(iv), "kind",
                                                            "serial"))
                                      for iv in st.leaf_iter_vars] + [st.attach_type]
            for st in s.stages if getattr(st.op, "reduce_axis", None)}


def _half_gemm(dt, packed=False):
    X, W = tc.placeholder((40, 600), dt, name="X"), tc.placeholder((600, 70), dt, name="W")
    return (sc.matmul_packed(X, W) if packed else ops.matmul(X, W)), [X, W]


def _half_conv(dt, nchw):
    if nchw:
        X, W = (tc.placeholder((2, 64, 14, 14), dt, name="X"),
                tc.placeholder((32, 64, 3, 3), dt, name="W"))
        return ops.conv2d_nchw(X, W, 1, 1), [X, W]
    X, W = (tc.placeholder((2, 14, 14, 64), dt, name="X"),
            tc.placeholder((3, 3, 64, 32), dt, name="W"))
    return ops.conv2d_nhwc(X, W, 1, 1), [X, W]


def _half_dense(dt, packed=False):
    X, W, b = (tc.placeholder((24, 900), dt, name="X"), tc.placeholder((50, 900), dt, name="W"),
               tc.placeholder((50,), dt, name="b"))
    return (sc.dense_packed(X, W, b) if packed else ops.dense(X, W, b)), [X, W, b]


def _half_single(build, shape, dt):
    X = tc.placeholder(shape, dt, name="X")
    return build(X), [X]


def _half_attention(dt):
    q, k, v = (tc.placeholder(s, dt, name=n) for s, n in (
        ((1, 2, 40, 32), "q"), ((1, 2, 300, 32), "k"), ((1, 2, 300, 16), "v")))
    return ops.scaled_dot_product_attention(q, k, v), [q, k, v]


# name, definition(dtype) -> (output, inputs), schedule, float64 reference
HALF_TEMPLATES = [
    ("matmul", _half_gemm, sc.schedule_matmul, lambda a, b: a @ b),
    ("matmul_packed", lambda dt: _half_gemm(dt, True), sc.schedule_matmul, lambda a, b: a @ b),
    ("dense", _half_dense, sc.schedule_dense, lambda x, w, b: x @ w.T + b),
    ("dense_packed", lambda dt: _half_dense(dt, True), sc.schedule_dense,
     lambda x, w, b: x @ w.T + b),
    ("conv2d_nchw", lambda dt: _half_conv(dt, True), sc.schedule_conv2d_nchw,
     lambda x, w: _conv_ref(x, w, 1, 1, 1)),
    ("conv2d_nhwc", lambda dt: _half_conv(dt, False), sc.schedule_conv2d_nhwc,
     lambda x, w: _conv_ref(x.transpose(0, 3, 1, 2), w.transpose(3, 2, 0, 1), 1, 1,
                            1).transpose(0, 2, 3, 1)),
    ("softmax", lambda dt: _half_single(ops.softmax, (20, 700), dt), sc.schedule_softmax,
     lambda x: _softmax_ref(x)),
    ("softmax_fast", lambda dt: _half_single(sc.softmax_fast, (20, 700), dt),
     sc.schedule_softmax, lambda x: _softmax_ref(x)),
    ("log_softmax", lambda dt: _half_single(ops.log_softmax, (20, 700), dt),
     sc.schedule_softmax, lambda x: np.log(_softmax_ref(x))),
    ("avg_pool2d", lambda dt: _half_single(lambda x: ops.avg_pool2d(x, 3, 2, 1),
                                           (2, 8, 33, 33), dt), sc.schedule_pool,
     lambda x: _pool_sum_ref(x, 3, 2, 1) / 9),
    ("attention", _half_attention, sc.schedule_attention,
     lambda q, k, v: _softmax_ref(q @ k.transpose(0, 1, 3, 2) / math.sqrt(32)) @ v),
]


def _pool_sum_ref(x, k, stride, pad):
    from numpy.lib.stride_tricks import sliding_window_view
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    return sliding_window_view(xp, (k, k), axis=(2, 3))[:, :, ::stride, ::stride].sum((-1, -2))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name,define,schedule,ref", HALF_TEMPLATES,
                         ids=[c[0] for c in HALF_TEMPLATES])
def test_templates_schedule_half_precision_definitions(name, define, schedule, ref, dtype,
                                                       lanes, monkeypatch):
    """The float16/bfloat16 definitions (float32 sums under a rounding epilogue) get the
    template's own loop nest -- the one it gives the float32 operator with an
    elementwise epilogue -- and the float32-accurate result (by default, float16's with
    16 lanes and bfloat16's with 8; every pair with TECOMP_LONG_TESTS=1)."""
    if dtype == "bfloat16":
        half = pytest.importorskip("ml_dtypes").bfloat16
    else:
        half = np.float16
    # (whether an NCHW convolution takes channel vectors depends on the gather's cost,
    # and near the line also on the input's bytes: pinned to a model with full-width
    # FMAs and cheap gathers, not the host's; with Zen 4's gathers, 4.0, the float16
    # definition takes rows while float32's takes channel vectors)
    with_fma_model(monkeypatch, False, gather_cost=2.1, transpose_cost=0.66,
                   l1_bytes=48 << 10)
    out, ins = define(dtype)
    s = schedule(out)
    out32, _ = define("float32")
    if out32.op.reduce_axis and not out.op.reduce_axis:
        # the rounding is an epilogue: compare with the float32 operator under one
        out32 = tc.compute(out32.shape, lambda *i: out32[i] * 2.0, name="epilogue",
                           tag="elemwise")
    assert _loops(s) == _loops(schedule(out32))
    if not LONG and (dtype == "float16") != (lanes == 16):
        return  # the kernels run float16 with AVX-512's lanes, bfloat16 with AVX2's
    vals = [RNG.uniform(-1.0, 1.0, _shape(t)).astype(half) for t in ins]
    got = np.zeros(_shape(out), half)
    tc.build(s, ins + [out], target="llvm")(*vals, got)
    want = ref(*[v.astype(np.float64) for v in vals])
    err = np.abs(got.astype(np.float64) - want).max() / np.abs(want).max()
    assert err <= (2 * 2.0 ** -11 if dtype == "float16" else 2 * 2.0 ** -8), err


@pytest.mark.parametrize("layout, by_channels", [("nchw", False), ("nchw", True), ("nhwc", False)])
def test_conv_thread_split_is_pinned_by_the_config(layout, by_channels):
    """Every thread split of ConvParams.tasks (and rows_per_task) computes the same
    convolution; each is applied (its own loop nest), and '' is the heuristic's."""
    N, C, H, O = 2, 16, 12, 32
    if layout == "nchw":
        d, w = tc.placeholder((N, C, H, H), name="d"), tc.placeholder((O, C, 3, 3), name="w")
        out, sched = ops.conv2d_nchw(d, w, padding=1), sc.schedule_conv2d_nchw
        dn, wn = _arr((N, C, H, H)), _arr((O, C, 3, 3))
        ref = _conv_ref(dn, wn, 1, 1, 1)
        inputs = [dn, wn]
        base = {"by_channels": True, "ob": 16, "yb": 2, "xb": 4} if by_channels else \
            {"ob": 8, "yb": 2, "xb": 12}
    else:
        d, w = tc.placeholder((N, H, H, C), name="d"), tc.placeholder((3, 3, C, O), name="w")
        out, sched = ops.conv2d_nhwc(d, w, padding=1), sc.schedule_conv2d_nhwc
        dn, wn = _arr((N, C, H, H)), _arr((O, C, 3, 3))
        ref = _conv_ref(dn, wn, 1, 1, 1).transpose(0, 2, 3, 1)
        inputs = [dn.transpose(0, 2, 3, 1).copy(), wn.transpose(2, 3, 1, 0).copy()]
        base = {"ob": 16, "yb": 2, "xb": 4}
    args = [d, w, out]
    texts = {}
    # every split is lowered; by default each template runs every other split's kernel
    # (the NCHW channel-vector one the odd ones, the others the even ones: each split
    # runs in one NCHW template at least), all of them with TECOMP_LONG_TESTS=1
    first = 1 if by_channels else 0
    for k, (tasks, rpt) in enumerate([("rows", 0), ("rows", 3), ("blocks", 0), ("channels", 0),
                                      ("image_channels", 0), ("block_rows", 0)]):
        s = sched(out, config=dict(base, tasks=tasks, rows_per_task=rpt))
        texts[tasks, rpt] = str(tc.lower(s, args))
        if LONG or k % 2 == first:
            _close(_run(s, args, inputs), ref, 5e-5)
    # the splits are different loop nests (the copy splits differ where weights are copied)
    assert len(set(texts.values())) >= 4
    default = str(tc.lower(sched(out, config=base), args))
    assert default in texts.values()
    assert str(tc.lower(sched(out, config=dict(base, tasks="")), args)) == default
