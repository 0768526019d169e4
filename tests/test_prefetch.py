"""``s[T].prefetch(tensor, axis, offset)``: the printed IR, the numbers (unchanged, through
LLVM and the interpreter, every pass checked), the instructions in the assembly, symbolic
shapes, strided arrays and the CUDA C no-op.  No timing here: benchmarks measure speed."""
import importlib
import re

import numpy as np
import pytest

import tecomp as tc
from tecomp.codegen.llvm import jit as llvm_jit
from tecomp.ir import Buffer, Const, Prefetch, Var, interp, to_str
from tecomp.ir.simplify import simplify
from tecomp.schedule.trace import replay
from tecomp.testing import check_passes
from helpers import matmul, matmul_data, run, softmax, softmax_ref

BACKENDS = ["llvm", "interp"]


def _prefetch_lines(func):
    """The prefetches and the loops over their regions (``for (X.pf1, ...``)."""
    return [ln.strip() for ln in str(func).splitlines()
            if "prefetch" in ln or re.match(r"\s*for \(\w+\.pf\d*, ", ln)]


def _softmax_at_rows(m=16, n=300):
    """The softmax of helpers.py with every stage computed at the output's row loop."""
    X, mx, ex, sm, Y = softmax(m, n)
    s = tc.create_schedule(Y.op)
    R = Y.op.axis[0]
    for t in (mx, ex, sm):
        s[t].compute_at(s[Y], R)
    jo, ji = s[Y].split(Y.op.axis[1], factor=8)
    s[Y].vectorize(ji)
    return s, X, Y, R


@pytest.mark.parametrize("backend", BACKENDS)
def test_softmax_rows_prefetch_next_row(backend):
    s, X, Y, R = _softmax_at_rows()
    s[Y].prefetch(X, R, 1)
    func = tc.lower(s, [X, Y])
    # float32: 16 elements a line; the row of 300 elements spans at most 20 lines
    assert _prefetch_lines(func) == ["for (X.pf1, 0, 20) {",
                                     "prefetch X[min(i + 1, 15), min(X.pf1*16, 299)]"]
    x = np.random.default_rng(0).standard_normal((16, 300)).astype("float32")
    y = np.full_like(x, np.nan)
    run(s, [X, Y], [x, y], backend)
    np.testing.assert_allclose(y, softmax_ref(x.astype("float64")), rtol=1e-5, atol=1e-7)


def test_softmax_rows_parallel_asm_and_results_unchanged():
    s, X, Y, R = _softmax_at_rows(m=33, n=1024)
    s[Y].parallel(R)
    x = np.random.default_rng(1).standard_normal((33, 1024)).astype("float32")
    plain = tc.build(s, [X, Y])
    want = np.empty_like(x)
    plain(x, want)
    s2, X2, Y2, R2 = _softmax_at_rows(m=33, n=1024)
    s2[Y2].parallel(R2)
    s2[Y2].prefetch(X2, R2, 1)
    f = tc.build(s2, [X2, Y2])
    got = np.empty_like(x)
    f(x, got)
    np.testing.assert_array_equal(got, want)  # a hint: the very same bits
    assert "prefetch" not in plain.get_source("asm")
    asm = f.get_source("asm")
    assert "prefetcht0" in asm
    assert "prefetchw" not in asm  # X is only read
    assert re.search(r'@"?llvm\.prefetch\.p0"?\(ptr ', f.get_source("llvm-unopt"))


@pytest.mark.parametrize("backend", BACKENDS)
def test_tiled_elementwise_outer_tile_loop(backend):
    A = tc.placeholder((100, 70), name="A")
    B = tc.compute((100, 70), lambda i, j: A[i, j] * 2.0 + 1.0, name="B")
    s = tc.create_schedule(B.op)
    io, jo, ii, ji = s[B].tile(B.op.axis[0], B.op.axis[1], 16, 32)
    s[B].prefetch(A, io, 1)
    func = tc.lower(s, [A, B])
    lines = _prefetch_lines(func)
    # the next tile row: 16 rows (clipped to the array) of the whole width; loop
    # partitioning peeled the last tile row off (where the next one is the same row)
    assert lines == ["for (A.pf0, 0, min(84 - i.outer*16, 16)) {", "for (A.pf1, 0, 6) {",
                     "prefetch A[i.outer*16 + A.pf0 + 16, min(A.pf1*16, 69)]",
                     "for (A.pf0, 0, 4) {", "for (A.pf1, 0, 6) {",
                     "prefetch A[A.pf0 + 96, min(A.pf1*16, 69)]"]
    a = np.random.default_rng(2).random((100, 70), dtype="float64").astype("float32")
    b = np.full_like(a, np.nan)
    run(s, [A, B], [a, b], backend)
    np.testing.assert_array_equal(b, a * np.float32(2) + np.float32(1))


@pytest.mark.parametrize("backend", BACKENDS)
def test_reduction_axis_and_negative_offset(backend):
    A, B, C, k = matmul(n=24, m=20, K=40)
    s = tc.create_schedule(C.op)
    ko, ki = s[C].split(k, factor=8)
    s[C].prefetch(A, ko, 2)
    s[C].prefetch(B, ko, -1)
    func = tc.lower(s, [A, B, C])
    text = str(func)
    # A: 8 elements of row i, 8 further each step of k.outer (a stream: one prefetch
    # at its start, the steps together bring every line); B: 8 rows of column j, one
    # prefetch per row
    assert "prefetch A[i, min(k.outer + 2, 4)*8]" in text
    assert "A.pf1" not in text
    assert "prefetch B[max(k.outer - 1, 0)*8 + B.pf0, j]" in text
    a, b, c = matmul_data(A, B, C)
    run(s, [A, B, C], [a, b, c], backend)
    np.testing.assert_allclose(c, a.astype("float64") @ b, rtol=1e-5)


def _host_has_prefetchw() -> bool:
    h = llvm_jit.host()
    return h.has_feature("prfchw") or h.has_feature("prefetchwt1")


@pytest.mark.parametrize("backend", BACKENDS)
def test_own_output_is_a_write_prefetch(backend):
    A = tc.placeholder((64, 48), name="A")
    B = tc.compute((64, 48), lambda i, j: A[i, j] + 1.0, name="B")
    s = tc.create_schedule(B.op)
    io, ii = s[B].split(B.op.axis[0], factor=4)
    s[B].prefetch(B, io, 1)
    s[B].prefetch(A, io, 1)
    lines = _prefetch_lines(tc.lower(s, [A, B]))
    assert [x for x in lines if x.startswith("prefetch")] == [
        "prefetch (write) B[min(i.outer + 1, 15)*4 + B.pf0, min(B.pf1*16, 47)]",
        "prefetch A[min(i.outer + 1, 15)*4 + A.pf0, min(A.pf1*16, 47)]"]
    a = np.random.default_rng(3).random((64, 48), dtype="float64").astype("float32")
    b = np.full_like(a, np.nan)
    run(s, [A, B], [a, b], backend)
    np.testing.assert_array_equal(b, a + np.float32(1))
    if backend == "llvm":
        f = tc.build(s, [A, B])
        ll = f.get_source("llvm-unopt")
        # rw = 1 (write) for B, 0 (read) for A; locality 3, data cache
        assert re.search(r'@"?llvm\.prefetch\.p0"?\(ptr %[^,]+, i32 1, i32 3, i32 1\)', ll)
        assert re.search(r'@"?llvm\.prefetch\.p0"?\(ptr %[^,]+, i32 0, i32 3, i32 1\)', ll)
        asm = f.get_source("asm")
        assert "prefetcht0" in asm
        if _host_has_prefetchw():
            assert "prefetchw" in asm


@pytest.mark.parametrize("backend", BACKENDS)
def test_symbolic_shapes(backend):
    n, m = tc.var("n"), tc.var("m")
    A = tc.placeholder((n, m), name="A")
    B = tc.compute((n, m), lambda i, j: A[i, j] - 3.0, name="B")
    s = tc.create_schedule(B.op)
    s[B].prefetch(A, B.op.axis[0], 2)
    # ceil((m - 1) / 16) + 1 lines, none when m = 0 (the interpreter checks that no
    # prefetched element lies outside the array)
    assert _prefetch_lines(tc.lower(s, [A, B])) == [
        "for (A.pf1, 0, min((m + 30) // 16, m)) {",
        "prefetch A[min(i + 2, n - 1), min(A.pf1*16, m - 1)]"]
    for shape in [(37, 45), (1, 1), (2, 16), (5, 17), (3, 0), (0, 4)]:
        a = np.random.default_rng(4).random(shape, dtype="float64").astype("float32")
        b = np.full_like(a, np.nan)
        run(s, [A, B], [a, b], backend)
        np.testing.assert_array_equal(b, a - np.float32(3))


def test_strided_arrays():
    """The strided variant (numpy views) flattens the prefetch address through the
    run-time strides, as its loads do."""
    n = tc.var("n")
    A = tc.placeholder((n, 40), name="A")
    B = tc.compute((n, 40), lambda i, j: A[i, j] * 3.0, name="B")
    s = tc.create_schedule(B.op)
    io, ii = s[B].split(B.op.axis[0], factor=3)
    s[B].prefetch(A, io, 1)
    s[B].prefetch(B, io, 1)
    f = tc.build(s, [A, B])
    big = np.random.default_rng(5).random((50, 90), dtype="float64").astype("float32")
    a = big[::2, 5::2][:, :40]          # rows 2 apart, columns 2 apart
    out = np.full((50, 40), np.nan, "float32")
    b = out[::-2]                        # a negative row stride
    assert not a.flags.c_contiguous and not b.flags.c_contiguous
    f(a, b)
    np.testing.assert_array_equal(b, a * np.float32(3))
    assert f.get_source("llvm", layout="strided").count("@llvm.prefetch") >= 2


def test_every_pass_keeps_the_results():
    s, X, Y, R = _softmax_at_rows(m=5, n=40)
    s[Y].prefetch(X, R, 1)
    s[Y].prefetch(Y, R, -2)
    func = check_passes(s, [X, Y])
    lines = _prefetch_lines(func)
    assert any(ln.startswith("prefetch (write) softmax[max(i - 2, 0)") for ln in lines)


def test_prefetch_inside_an_attached_stage_and_guarded_tail():
    """A prefetch on a loop of a stage computed at another stage's loop, over a split
    whose tail is guarded: the region is clipped to the array (the interpreter checks
    every prefetched element is inside it)."""
    A = tc.placeholder((50, 30), name="A")
    B = tc.compute((50, 30), lambda i, j: A[i, j] * 2.0, name="B")
    C = tc.compute((50, 30), lambda i, j: B[i, j] + 1.0, name="C")
    s = tc.create_schedule(C.op)
    co, ci = s[C].split(C.op.axis[0], factor=8)
    s[B].compute_at(s[C], co)
    bo, bi = s[B].split(B.op.axis[1], factor=7)
    s[B].prefetch(A, bo, 1)
    s[C].prefetch(A, co, 1)
    func = tc.lower(s, [A, C])
    assert len([x for x in _prefetch_lines(func) if x.startswith("prefetch A")]) >= 2
    a = np.random.default_rng(6).random((50, 30), dtype="float64").astype("float32")
    for backend in BACKENDS:
        c = np.full_like(a, np.nan)
        run(s, [A, C], [a, c], backend)
        np.testing.assert_array_equal(c, a * np.float32(2) + np.float32(1))


def test_float16_and_offset_zero_and_one_iteration_loop():
    A = tc.placeholder((4, 200), dtype="float16", name="A")
    B = tc.compute((4, 200), lambda i, j: A[i, j] * tc.const(2.0, "float16"), name="B")
    s = tc.create_schedule(B.op)
    s[B].prefetch(A, B.op.axis[0], 0)
    assert _prefetch_lines(tc.lower(s, [A, B])) == [
        "for (A.pf1, 0, 8) {", "prefetch A[i, min(A.pf1*32, 199)]"]  # 32 halves a line
    # a loop of one iteration has no other iteration: its prefetch is dropped
    C = tc.compute((1, 200), lambda i, j: A[i, j] + tc.const(1.0, "float16"), name="C")
    s = tc.create_schedule(C.op)
    s[C].prefetch(A, C.op.axis[0], 1)
    assert _prefetch_lines(tc.lower(s, [A, C])) == []


def test_cuda_source_has_a_comment_only():
    from tecomp.codegen.cuda import codegen_cuda

    A, B, C, k = matmul(n=32, m=32, K=64)
    s = tc.create_schedule(C.op)
    s[C].bind(C.op.axis[0], tc.thread_axis("blockIdx.x"))
    s[C].bind(C.op.axis[1], tc.thread_axis("threadIdx.x"))
    ko, ki = s[C].split(k, factor=8)
    s[C].prefetch(A, ko, 1)
    func = tc.lower(s, [A, B, C], target="cuda")
    assert "prefetch A[i, min(k.outer + 1, 7)*8]" in str(func)
    src = codegen_cuda(func).source
    assert "// prefetch A[i, min(k.outer + 1, 7)*8] (cache hint: no-op on this target)" in src
    assert "A_pf" not in src  # no loop emitted for it
    try:
        from tecomp.codegen.cuda_emu import build_cuda_emu, find_cxx

        find_cxx()
    except Exception:  # noqa: BLE001 - no C++ compiler: the text check above is enough
        return
    m = build_cuda_emu(func)
    a, b, c = matmul_data(A, B, C)
    m(a, b, c)
    np.testing.assert_allclose(c, a.astype("float64") @ b, rtol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_prefetch_into_l2_and_l3(backend):
    """``level=2`` / ``level=3``: printed as ``prefetch (L2)`` / ``(write, L3)``, kept
    by a replayed trace, LLVM's locality 2 / 1 (x86 ``prefetcht1`` / ``t2``); the
    results unchanged."""
    A = tc.placeholder((64, 48), name="A")
    B = tc.compute((64, 48), lambda i, j: A[i, j] * 2.0, name="B")
    s = tc.create_schedule(B.op)
    io, ii = s[B].split(B.op.axis[0], factor=4)
    s[B].prefetch(A, io, 2, level=2)
    s[B].prefetch(B, io, 1, level=3)
    want = ["prefetch (L2) A[min(i.outer + 2, 15)*4 + A.pf0, min(A.pf1*16, 47)]",
            "prefetch (write, L3) B[min(i.outer + 1, 15)*4 + B.pf0, min(B.pf1*16, 47)]"]
    for sch in (s, replay(s.trace.to_json(), [B])):
        lines = _prefetch_lines(tc.lower(sch, [A, B]))
        assert [x for x in lines if x.startswith("prefetch")] == want
    a = np.random.default_rng(5).random((64, 48), dtype="float64").astype("float32")
    b = np.full_like(a, np.nan)
    run(s, [A, B], [a, b], backend)
    np.testing.assert_array_equal(b, a * np.float32(2))
    if backend == "llvm":
        ll = tc.build(s, [A, B]).get_source("llvm-unopt")
        assert re.search(r'@"?llvm\.prefetch\.p0"?\(ptr %[^,]+, i32 0, i32 2, i32 1\)', ll)
        assert re.search(r'@"?llvm\.prefetch\.p0"?\(ptr %[^,]+, i32 1, i32 1, i32 1\)', ll)


def test_prefetch_node_print_simplify_interp():
    """The IR node on its own: printed, simplified, a no-op in the interpreter that still
    checks its element is inside the buffer."""
    X = Buffer("X", (Const(4, "int32"), Const(8, "int32")), "float32")
    i = Var("i", "int32")
    p = Prefetch(X, (i + 1 - 1, i * 0 + 6), write=True)
    assert to_str(p) == "prefetch (write) X[i + 1 - 1, i*0 + 6]"
    assert to_str(simplify(p)) == "prefetch (write) X[i, 6]"
    assert to_str(Prefetch(X, (i, i))) == "prefetch X[i, i]"
    assert to_str(Prefetch(X, (i, i), level=2)) == "prefetch (L2) X[i, i]"
    x = np.arange(32, dtype="float32").reshape(4, 8)
    env = {X: x, i: 3}
    interp.run_stmt(simplify(p), env)
    np.testing.assert_array_equal(x, np.arange(32, dtype="float32").reshape(4, 8))
    with pytest.raises(tc.BoundsError, match=r"prefetch of X\[3, 9\] out of bounds"):
        interp.run_stmt(Prefetch(X, (i, Const(9, "int32"))), env)


@pytest.mark.parametrize("backend", BACKENDS)
def test_along_an_enclosing_loop(backend):
    """``along=R``: each step of the exp stage's loop prefetches the same columns of
    the next row (the prefetches spread over the row), clamped at the last row."""
    s, X, Y, R = _softmax_at_rows(m=10, n=64)
    ex = [st for st in s.stages if st.name == "exp"][0]
    jo, ji = ex.split(ex.op.axis[-1], factor=16)
    ex.vectorize(ji)
    ex.prefetch(X, jo, 1, along=R)
    func = tc.lower(s, [X, Y])
    # (a stream: 16 columns a step, one prefetch at their start)
    assert _prefetch_lines(func) == ["prefetch X[min(i + 1, 9), j.outer*16]"]
    x = np.random.default_rng(3).standard_normal((10, 64)).astype("float32")
    y = np.full_like(x, np.nan)
    run(s, [X, Y], [x, y], backend)
    np.testing.assert_allclose(y, softmax_ref(x.astype("float64")), rtol=1e-5, atol=1e-7)


def test_along_an_outer_axis_of_the_same_stage():
    A = tc.placeholder((6, 48), name="A")
    B = tc.compute((6, 48), lambda i, j: A[i, j] - 1.0, name="B")
    s = tc.create_schedule(B.op)
    jo, ji = s[B].split(B.op.axis[1], factor=16)
    s[B].prefetch(A, jo, -2, along=B.op.axis[0])
    # (3 steps of 16 columns: too short for a stream, a prefetch at each end of a step)
    assert _prefetch_lines(tc.lower(s, [A, B])) == [
        "for (A.pf1, 0, 2) {", "prefetch A[max(i - 2, 0), j.outer*16 + min(A.pf1*16, 15)]"]
    s[B].prefetch(A, jo, 1, along=jo)  # along the axis itself: the plain prefetch
    assert "prefetch A[i, min(j.outer + 1, 2)*16" in str(tc.lower(s, [A, B]))
    a = np.random.default_rng(4).random((6, 48), dtype="float64").astype("float32")
    b = np.full_like(a, np.nan)
    run(s, [A, B], [a, b], "llvm")
    np.testing.assert_array_equal(b, a - np.float32(1))


@pytest.mark.parametrize("backend", BACKENDS)
def test_along_an_enclosing_loop_at_a_loop_of_one_iteration(backend, monkeypatch):
    """A request ``along=`` an enclosing loop at a loop of one iteration (which simplify
    removes): that loop's iteration ahead, where the removed loop was (a column
    reduction's tile one step of vectors wide); rows of whole lines from a line: one
    prefetch per line.  Without ``along=`` (or with ALONG_AT_ONE_ITERATION off): none."""
    from tecomp.lower import prefetch as pf
    A = tc.placeholder((4, 6, 128), name="A")
    k = tc.reduce_axis((0, 4), name="k")
    B = tc.compute((6, 128), lambda i, j: tc.sum(A[k, i, j], axis=k), name="B")

    def sched(along):
        s = tc.create_schedule(B.op)
        jo, ji = s[B].split(B.op.axis[1], factor=128)   # (jo: one iteration)
        s[B].reorder(k, B.op.axis[0], jo, ji)
        s[B].vectorize(ji)
        s[B].prefetch(A, jo, 1, along=k if along else None)
        return s

    text = str(tc.lower(sched(True), [A, B]))
    assert _prefetch_lines(text) == ["prefetch A[min(k + 1, 3), i, A.pf2*16]"], text
    assert "unrolled (A.pf2, 0, 8) {" in text, text   # (128 floats: 8 lines)
    assert _prefetch_lines(tc.lower(sched(False), [A, B])) == []
    a = np.random.default_rng(7).random((4, 6, 128), dtype="float64").astype("float32")
    b = np.full((6, 128), np.nan, "float32")
    run(sched(True), [A, B], [a, b], backend)
    np.testing.assert_allclose(b, a.sum(0), rtol=1e-6)
    monkeypatch.setattr(pf, "ALONG_AT_ONE_ITERATION", False)
    assert _prefetch_lines(tc.lower(sched(True), [A, B])) == []


def test_one_iteration_loop_inside_a_vectorized_loop_prefetches_nothing():
    """A loop of one iteration inside a vectorized one (reordered under it): its request
    ``along=`` the row loop is dropped, not put in the vectorized loop's body, where a
    statement runs per lane (Stage.prefetch refuses a vectorized axis for that reason)."""
    A = tc.placeholder((4, 16), name="A")
    B = tc.compute((4, 16), lambda i, j: A[i, j] + 1.0, name="B")
    s = tc.create_schedule(B.op)
    jo, ji = s[B].split(B.op.axis[1], factor=16)   # (jo: one iteration)
    s[B].reorder(B.op.axis[0], ji, jo)
    s[B].vectorize(ji)
    s[B].prefetch(A, jo, 1, along=B.op.axis[0])
    assert _prefetch_lines(tc.lower(s, [A, B])) == []
    a = np.random.default_rng(8).random((4, 16), dtype="float64").astype("float32")
    b = np.full_like(a, np.nan)
    run(s, [A, B], [a, b], "llvm")
    np.testing.assert_array_equal(b, a + np.float32(1))


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_row_past_the_edge_clamped_into_the_array(backend):
    """A region of one row whose row runs past the array's end (a read under a condition
    that keeps it inside; the next iteration's row): the row clamped to the last one, as
    a wider region's rows are (the interpreter checks every prefetched address; fuzz
    stream 57 found it, seed 40)."""
    A = tc.placeholder((2, 5), name="A")
    B = tc.compute((5,), lambda i: tc.if_then_else(i < 2, A[i, i], tc.const(0.0, "float32")),
                   name="B")
    s = tc.create_schedule(B.op)
    s[B].prefetch(A, B.op.axis[0], 1)
    assert _prefetch_lines(tc.lower(s, [A, B])) == ["prefetch A[1, i + 1]",
                                                    "prefetch A[1, min(i + 1, 4)]"]
    a = np.arange(10, dtype="float32").reshape(2, 5)
    b = np.full(5, np.nan, "float32")
    run(s, [A, B], [a, b], backend)
    np.testing.assert_array_equal(b, [0, 6, 0, 0, 0])


@pytest.mark.parametrize("backend", BACKENDS)
def test_stream_past_the_edge_prefetches_inside_or_nothing(backend):
    """A stream (4 elements a step, under a condition that reads past the array's end):
    one prefetch per step at the next step's start while that is inside the array, none
    once the clip empties the region (the interpreter checks every prefetched element)."""
    A = tc.placeholder((100,), name="A")
    B = tc.compute((64,), lambda i: tc.if_then_else(i + 90 < 100, A[i + 90], 0.0), name="B")
    s = tc.create_schedule(B.op)
    io, ii = s[B].split(B.op.axis[0], factor=4)
    s[B].prefetch(A, io, 1)
    assert _prefetch_lines(tc.lower(s, [A, B])) == ["prefetch A[i.outer*4 + 94]"]
    a = np.arange(100, dtype="float32")
    b = np.full(64, np.nan, "float32")
    run(s, [A, B], [a, b], backend)
    np.testing.assert_array_equal(b, np.where(np.arange(64) < 10, np.arange(64) + 90, 0))


@pytest.mark.parametrize("backend", BACKENDS)
def test_stream_rows_before_the_edge_prefetch_nothing(backend):
    """A stream over 4 rows (unrolled) whose rows all lie before the array's start in the
    first block (a guarded read of row i - 7): no prefetch there (every prefetched
    element inside the array: the interpreter checks), one per row and step later."""
    A = tc.placeholder((12, 64), name="A")
    B = tc.compute((12, 64), lambda i, j: tc.if_then_else(i >= 7, A[i - 7, j], 0.0), name="B")
    s = tc.create_schedule(B.op)
    io, ii = s[B].split(B.op.axis[0], factor=4)
    jo, ji = s[B].split(B.op.axis[1], factor=16)
    s[B].reorder(io, jo, ii, ji)
    s[B].prefetch(A, jo, 0)
    text = str(tc.lower(s, [A, B]))
    assert "prefetch A[A.pf0 + 1, j.outer*16]" in text and "A.pf1" not in text, text
    a = np.arange(12 * 64, dtype="float32").reshape(12, 64)
    b = np.full((12, 64), np.nan, "float32")
    run(s, [A, B], [a, b], backend)
    want = np.zeros((12, 64), "float32")
    want[7:] = a[:5]
    np.testing.assert_array_equal(b, want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_wide_stream_one_prefetch_per_line(backend):
    """A wide stream (64 float32 a step, four lines, moving on by 64): four prefetches
    a step, a line apart, unrolled, not the five of an isolated region of unknown
    alignment; under a condition that reads past the array's end, none beyond the
    clipped region (the interpreter checks every prefetched element)."""
    A = tc.placeholder((1024,), name="A")
    B = tc.compute((1024,), lambda i: A[i] * 2.0, name="B")
    s = tc.create_schedule(B.op)
    io, ii = s[B].split(B.op.axis[0], factor=64)
    s[B].prefetch(A, io, 1)
    lines = [ln.strip() for ln in str(tc.lower(s, [A, B])).splitlines() if "pf" in ln]
    assert lines == ["unrolled (A.pf, 0, 4) {", "prefetch A[min(i.outer + 1, 15)*64 + A.pf*16]"], lines
    a = np.arange(1024, dtype="float32")
    b = np.zeros(1024, "float32")
    run(s, [A, B], [a, b], backend)
    np.testing.assert_array_equal(b, a * 2)
    # the region past the edge: 90 + 64 = 154 elements read of 100 (guarded)
    A = tc.placeholder((100,), name="A")
    B = tc.compute((128,), lambda i: tc.if_then_else(i < 100, A[i], 0.0), name="B")
    s = tc.create_schedule(B.op)
    io, ii = s[B].split(B.op.axis[0], factor=16)
    s[B].prefetch(A, io, 1)
    text = str(tc.lower(s, [A, B]))
    assert "A.pf" not in text, text   # (one line a step: a plain stream)
    B = tc.compute((192,), lambda i: tc.if_then_else(i < 100, A[i], 0.0), name="B")
    s = tc.create_schedule(B.op)
    io, ii = s[B].split(B.op.axis[0], factor=32)
    s[B].prefetch(A, io, 1)
    text = str(tc.lower(s, [A, B]))
    assert "prefetch A[" in text and "A.pf" in text, text
    a = np.arange(100, dtype="float32")
    b = np.full(192, np.nan, "float32")
    run(s, [A, B], [a, b], backend)
    np.testing.assert_array_equal(b, np.where(np.arange(192) < 100, np.arange(192), 0))


@pytest.mark.parametrize("backend", BACKENDS)
def test_carry_into_the_next_iteration_of_an_enclosing_loop(backend):
    """``carry=i``: the last steps of a row prefetch the start of the next row (as if
    the two loops were one), the last row clamped as without carry; a replayed trace
    gives the same IR, every pass keeps the results, and so do LLVM and the interpreter
    (which checks every prefetched element is inside the array)."""
    A = tc.placeholder((6, 48), name="A")
    B = tc.compute((6, 48), lambda i, j: A[i, j] - 1.0, name="B")
    s = tc.create_schedule(B.op)
    jo, ji = s[B].split(B.op.axis[1], factor=4)
    s[B].prefetch(A, jo, 5, carry=B.op.axis[0])
    func = tc.lower(s, [A, B])
    # (the if of the carried steps is split out of the loop by loop partitioning)
    assert _prefetch_lines(func) == ["prefetch A[i, j.outer*4 + 20]",
                                     "prefetch A[i + 1, j.outer*4 - 28]",
                                     "prefetch A[5, min(j.outer + 5, 11)*4]"]
    assert str(tc.lower(replay(s.trace.to_json(), [B]), [A, B])) == str(func)
    check_passes(s, [A, B])
    a = np.random.default_rng(5).random((6, 48), dtype="float64").astype("float32")
    b = np.full_like(a, np.nan)
    run(s, [A, B], [a, b], backend)
    np.testing.assert_array_equal(b, a - np.float32(1))


def test_carry_with_a_symbolic_carry_loop():
    """An enclosing loop of symbolic extent: the carried branch is an ``if`` on its
    counter (not split out); the results are unchanged, the last row clamped."""
    n = tc.var("n")
    A = tc.placeholder((n, 64), name="A")
    B = tc.compute((n, 64), lambda i, j: A[i, j] * 2.0, name="B")
    s = tc.create_schedule(B.op)
    jo, ji = s[B].split(B.op.axis[1], factor=16)
    s[B].vectorize(ji)
    s[B].prefetch(A, jo, 2, carry=B.op.axis[0], level=2)
    text = str(tc.lower(s, [A, B]))
    assert "prefetch (L2) A[i + 1, j.outer*16 - 32]" in text
    f = tc.build(s, [A, B])
    for rows in (1, 3):
        a = np.random.default_rng(rows).random((rows, 64), dtype="float64").astype("float32")
        b = np.full_like(a, np.nan)
        f(a, b)
        np.testing.assert_array_equal(b, a * np.float32(2))


@pytest.mark.parametrize("backend", BACKENDS)
def test_few_lines_of_one_row_unrolled(backend, monkeypatch):
    """A region of one row and a few lines that is not a stream (48 float32 of a row a
    step, down the rows: a skinny GEMM's column strip of W): its ``ceil(47 / 16) + 1``
    points unrolled (``UNROLL_FEW_LINES``), each clamped into the clipped region (the
    partial tile: 4 columns); the tile past the array's end (under a condition)
    prefetches nothing (the interpreter checks every prefetched element); the flag off
    (the default): a loop."""
    pf = importlib.import_module("tecomp.lower.prefetch")  # (tc.lower is the function)
    monkeypatch.setattr(pf, "UNROLL_FEW_LINES", True)

    def strip():
        A = tc.placeholder((32, 100), name="A")
        B = tc.compute((32, 192), lambda i, j: tc.if_then_else(j < 100, A[i, j], 0.0),
                       name="B")
        s = tc.create_schedule(B.op)
        i, j = B.op.axis
        jo, ji = s[B].split(j, factor=48)
        s[B].reorder(jo, i, ji)
        s[B].prefetch(A, i, 4)
        return s, A, B

    s, A, B = strip()
    text = str(tc.lower(s, [A, B]))
    assert _prefetch_lines(tc.lower(s, [A, B])) == [
        "prefetch A[min(i + 4, 31), j.outer*48 + min(A.pf1*16, 47)]",
        "prefetch A[min(i + 4, 31), min(A.pf1*16, 3) + 96]"], text
    assert text.count("unrolled (A.pf1, 0, 4) {") == 2, text
    a = np.random.default_rng(5).random((32, 100), dtype="float64").astype("float32")
    b = np.full((32, 192), np.nan, "float32")
    run(s, [A, B], [a, b], backend)
    np.testing.assert_array_equal(b, np.concatenate([a, np.zeros((32, 92), "float32")], 1))
    monkeypatch.setattr(pf, "UNROLL_FEW_LINES", False)
    s, A, B = strip()
    assert "for (A.pf1, 0, 4) {" in str(tc.lower(s, [A, B]))


@pytest.mark.parametrize("backend", BACKENDS)
def test_carry_along_an_outer_loop(backend):
    """``along=`` and ``carry=`` together: blocks ``k.outer`` of 16 steps, each step
    prefetching its row of the next block; the last block's steps prefetch the first
    block of the next ``t`` (loop partitioning parts that block off), and in ``t``'s
    last iteration the clamp."""
    A = tc.placeholder((4, 64, 16), name="A")
    B = tc.compute((4, 64, 16), lambda t, k, j: A[t, k, j] + 1.0, name="B")
    s = tc.create_schedule(B.op)
    t, k, j = B.op.axis
    ko, ki = s[B].split(k, factor=16)
    s[B].prefetch(A, ki, 1, along=ko, carry=t)
    lines = [ln for ln in _prefetch_lines(tc.lower(s, [A, B])) if ln.startswith("prefetch")]
    assert lines == ["prefetch A[t, k.outer*16 + k.inner + 16, min(A.pf2*16, 15)]",
                     "prefetch A[t + 1, k.inner, min(A.pf2_1*16, 15)]",
                     "prefetch A[3, min(k.outer + 1, 3)*16 + k.inner, min(A.pf2*16, 15)]"], lines
    a = np.random.default_rng(6).random((4, 64, 16), dtype="float64").astype("float32")
    b = np.full_like(a, np.nan)
    run(s, [A, B], [a, b], backend)
    np.testing.assert_array_equal(b, a + np.float32(1))
