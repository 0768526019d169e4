"""GPU schedules through lowering: shared-memory bounds cover the block, barriers go
exactly where threads exchange data, and results match numpy in the CUDA emulation and
in the reference interpreter (which also reports data races)."""
import json
import shutil

import numpy as np
import pytest

import tecomp as tc
from tecomp.ir import interp
from tecomp.lower import PASSES, run_passes
from tecomp.lower.schedule_ops import schedule_to_stmt
from tecomp.ir.stmt import PrimFunc
from tecomp.schedule.trace import replay


def tiled_matmul(n=64, tile=16):
    A = tc.placeholder((n, n), name="A")
    B = tc.placeholder((n, n), name="B")
    k = tc.reduce_axis((0, n), name="k")
    C = tc.compute((n, n), lambda i, j: tc.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = tc.create_schedule(C.op)
    AS = s.cache_read(A, "shared", [C])
    BS = s.cache_read(B, "shared", [C])
    CL = s.cache_write(C, "local")
    by, bx = tc.thread_axis("blockIdx.y"), tc.thread_axis("blockIdx.x")
    ty, tx = tc.thread_axis("threadIdx.y"), tc.thread_axis("threadIdx.x")
    io, jo, ii, ji = s[C].tile(*C.op.axis, tile, tile)
    s[C].bind(io, by)
    s[C].bind(jo, bx)
    s[C].bind(ii, ty)
    s[C].bind(ji, tx)
    s[CL].compute_at(s[C], ji)
    ko, ki = s[CL].split(s[CL].op.reduce_axis[0], factor=tile)
    for S in (AS, BS):
        s[S].compute_at(s[CL], ko)
        s[S].bind(s[S].op.axis[0], ty)
        s[S].bind(s[S].op.axis[1], tx)
    return s, [A, B, C]


def test_shared_tiles_cover_the_block_and_barriers_are_minimal():
    s, args = tiled_matmul(64, 16)
    text = str(tc.lower(s, args))
    assert "allocate A.shared: float32[16, 16] (shared)" in text
    assert "allocate B.shared: float32[16, 16] (shared)" in text
    assert "allocate C.local: float32[1, 1] (local)" in text
    # one barrier before the tiles are overwritten, one before they are read
    assert text.count("syncthreads()") == 2
    body = text[text.index("for (k.outer"):]
    assert body.index("syncthreads()") < body.index("B.shared[i0, i1] =")
    assert body.index("A.shared[i0_1, i1_1] =") < body.rindex("syncthreads()") < body.index("for (k.inner")


def _interp_matches_numpy(f, n=32):
    """The interpreter (threads interleaved between barriers; a race raises) runs the
    lowered n x n matmul ``f`` and gets numpy's result."""
    a, b = np.random.rand(n, n).astype("float32"), np.random.rand(n, n).astype("float32")
    c = np.zeros((n, n), "float32")
    interp.run(f, a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)


def test_interpreter_matches_and_finds_no_race():
    s, args = tiled_matmul(32, 8)
    f = tc.lower(s, args)
    _interp_matches_numpy(f)


def test_without_barriers_the_interpreter_reports_a_race():
    s, args = tiled_matmul(32, 8)
    params, body, _ = schedule_to_stmt(s, args)
    func = PrimFunc("main", tuple(params), body, {})
    saved = list(PASSES)
    try:
        PASSES[:] = [p for p in PASSES if p[0] != "insert_barriers"]
        f = run_passes(func)
    finally:
        PASSES[:] = saved
    assert "syncthreads" not in str(f)
    a, b = np.random.rand(32, 32).astype("float32"), np.random.rand(32, 32).astype("float32")
    c = np.zeros((32, 32), "float32")
    with pytest.raises(interp.RaceError):
        interp.run(f, a, b, c)


def _double_buffered(n, tile):
    s, args = tiled_matmul(n, tile)
    for st in s.stages:
        if st.scope == "shared":
            st.double_buffer()
    return s, args


def test_double_buffered_tiles_one_barrier_per_step_no_race():
    """Each tile in two buffers: the first copied before k.outer, the next one after the
    loop's one barrier; the interpreter (which interleaves threads between barriers and
    reports races) gets numpy's result."""
    s, args = _double_buffered(32, 8)
    f = tc.lower(s, args, target="cuda")
    text = str(f)
    assert "allocate A.shared: float32[2, 8, 8] (shared)" in text
    assert "allocate B.shared: float32[2, 8, 8] (shared)" in text
    loop = text[text.index("for (k.outer"):]
    assert loop.count("syncthreads()") == 1
    assert "if (k.outer + 1 < 4) {" in loop
    assert "A.shared[(k.outer + 1) % 2, i0_1, i1_1] = A[i.outer*8 + i0_1, k.outer*8 + i1_1 + 8]" in loop
    assert "A.shared[k.outer % 2, " in loop
    _interp_matches_numpy(f)


def test_double_buffer_is_traced_and_replays():
    s, args = _double_buffered(32, 8)
    code = s.trace.python(args)
    assert code.count(".double_buffer()") == 2
    again = replay(json.loads(json.dumps(s.trace.to_json())), args[-1:])
    assert str(tc.lower(again, args, target="cuda")) == str(tc.lower(s, args, target="cuda"))


@pytest.mark.parametrize("n, stages", [(32, 3), (32, 4), (16, 4)],
                         ids=["4 steps, 3 stages", "4 steps, 4 stages", "2 steps, 4 stages"])
def test_pipeline_of_more_stages_no_race(n, stages):
    """``double_buffer(stages=n)``: a ring of n tiles (at most the steps + 1), the first
    n - 1 copied before the loop, the copy n - 1 steps ahead after the
    one barrier, each step's copies one group and the barrier waiting for all groups but
    the n - 2 latest; the interpreter (threads interleaved between barriers, races
    reported) gets numpy's result."""
    s, args = tiled_matmul(n, 8)
    for st in s.stages:
        if st.scope == "shared":
            st.double_buffer(stages=stages)
    f = tc.lower(s, args, target="cuda")
    text = str(f)
    steps = n // 8
    stages = min(stages, steps + 1)   # no more buffers than tiles (+ 1)
    assert f"allocate A.shared: float32[{stages}, 8, 8] (shared)" in text
    head, loop = text[:text.index("for (k.outer")], text[text.index("for (k.outer"):]
    assert head.count("attr async_group") == stages - 1
    assert head.count("attr async_copy") == min(stages - 1, steps)
    assert loop.count("syncthreads()") == 1
    assert f"attr async_wait = {stages - 2}" in loop
    assert f"if (k.outer + {stages - 1} < {steps}) {{" in loop
    assert f"A.shared[(k.outer + {stages - 1}) % {stages}, " in loop
    assert f"A.shared[k.outer % {stages}, " in loop
    _interp_matches_numpy(f, n)


def test_pipeline_stages_are_traced_and_replay():
    s, args = tiled_matmul(32, 8)
    for st in s.stages:
        if st.scope == "shared":
            st.double_buffer(stages=3)
    assert s.trace.python(args).count(".double_buffer(stages=3)") == 2
    again = replay(json.loads(json.dumps(s.trace.to_json())), args[-1:])
    assert str(tc.lower(again, args, target="cuda")) == str(tc.lower(s, args, target="cuda"))


def test_double_buffer_where_the_loop_is_gone():
    """One k.outer iteration (K = the tile): no loop to pipeline, one buffer per tile."""
    s, args = _double_buffered(16, 16)
    text = str(tc.lower(s, args, target="cuda"))
    assert "allocate A.shared: float32[16, 16] (shared)" in text
    assert "async_copy" not in text


def test_double_buffer_of_a_tile_nobody_reads():
    """Fuzz seed 4 (on Zen 4): the only read of the double-buffered tile is in a branch
    that simplification proves dead (there the copy went too; here it stays, unread):
    double buffering is then a no-op, not a ScheduleError about the loop's shape."""
    P = tc.placeholder((2, 4), name="P")
    k = tc.reduce_axis((0, 8), name="k")
    C = tc.compute((4,), lambda i: tc.sum(tc.if_then_else(i * 2 + 1 < 1, P[k // 4, i],
                                                          tc.const(0, "float32")), axis=k),
                   name="C")
    s = tc.create_schedule(C.op)
    PS = s.cache_read(P, "shared", [C])
    s[C].bind(s[C].op.axis[0], tc.thread_axis("threadIdx.x"))
    ko, _ = s[C].split(s[C].op.reduce_axis[0], factor=2)
    s[PS].compute_at(s[C], ko)
    s[PS].double_buffer()
    text = str(tc.lower(s, [P, C], target="cuda"))
    assert "allocate P.shared: float32[1, 4] (shared)" in text and "async_copy" not in text
    got = np.full(4, 7, "float32")
    interp.run(tc.lower(s, [P, C], target="cuda"), np.ones((2, 4), "float32"), got)
    np.testing.assert_array_equal(got, 0)


@pytest.mark.skipif(shutil.which("g++") is None, reason="the CUDA emulation needs g++")
def test_emulation_matches_numpy():
    s, args = tiled_matmul(64, 16)
    f = tc.build(s, args, target="cuda-emu")
    src = f.get_source("cuda")
    assert src.count("__syncthreads();") == 2 and "__shared__ __align__(32) float A_shared[256];" in src
    a, b = np.random.rand(64, 64).astype("float32"), np.random.rand(64, 64).astype("float32")
    c = np.zeros((64, 64), "float32")
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)


def _row_sum(m, n, threads, rows_per_block=1, reducer="sum"):
    X = tc.placeholder((m, n), name="X")
    k = tc.reduce_axis((0, n), name="k")
    red = tc.sum if reducer == "sum" else tc.max
    Y = tc.compute((m,), lambda i: red(X[i, k], axis=k), name="Y")
    s = tc.create_schedule(Y.op)
    ko, ki = s[Y].split(k, factor=threads)
    if rows_per_block > 1:
        io, ii = s[Y].split(Y.op.axis[0], factor=rows_per_block)
        s[Y].bind(io, tc.thread_axis("blockIdx.x"))
        s[Y].bind(ii, tc.thread_axis("threadIdx.y"))
    else:
        s[Y].bind(Y.op.axis[0], tc.thread_axis("blockIdx.x"))
    s[Y].bind(ki, tc.thread_axis("threadIdx.x"))
    return s, [X, Y]


@pytest.mark.parametrize("threads,rows,reducer,m", [
    (48, 1, "sum", 8), (32, 4, "sum", 8), (64, 2, "max", 8),
    # 40 rows split by 32 onto threadIdx.y: the last block's rows 40..63 are past Y (the
    # final store was unguarded: 24 floats written past the end)
    (32, 32, "sum", 40), (16, 3, "max", 7)])
def test_cross_thread_reduction(threads, rows, reducer, m):
    n = 100
    s, args = _row_sum(m, n, threads, rows, reducer)
    f = tc.lower(s, args)
    text = str(f)
    assert "allocate Y.red: float32[1] (local)" in text
    shared_shape = f"[{rows}, {threads}]" if rows > 1 else f"[{threads}]"
    assert f"allocate Y.red.shared: float32{shared_shape} (shared)" in text
    x = np.random.rand(m, n).astype("float32")
    ref = x.sum(1) if reducer == "sum" else x.max(1)
    y = np.zeros(m, "float32")
    interp.run(f, x, y)  # checks for races too
    np.testing.assert_allclose(y, ref, rtol=1e-5)
    if shutil.which("g++"):
        canary = np.full(m + 64, 7.0, "float32")    # Y, then 64 floats that must stay 7
        tc.build(s, args, target="cuda-emu")(x, canary[:m])
        np.testing.assert_allclose(canary[:m], ref, rtol=1e-5)
        assert (canary[m:] == 7.0).all(), "the kernel wrote past the end of Y"



@pytest.mark.parametrize("thread_outer", [False, True])
def test_stage_computed_at_the_thread_axis_of_a_cross_thread_reduction(thread_outer):
    """``s[A2].compute_at(s[B], ki)`` with ``ki`` the reduce axis bound to threadIdx.x: the
    stage was dropped (the IR read A.local, never computed).  It is computed where ki was
    among the reduction's loops: per element inside k.outer, or for all of k.outer when
    the thread axis came first."""
    A = tc.placeholder((16, 64), name="A")
    k = tc.reduce_axis((0, 64), name="k")
    B = tc.compute((16,), lambda i: tc.sum(A[i, k] * 2.0, axis=k), name="B")
    s = tc.create_schedule(B.op)
    A2 = s.cache_read(A, "local", [B])
    ko, ki = s[B].split(k, factor=32)
    if thread_outer:
        s[B].reorder(ki, ko)
    s[B].bind(B.op.axis[0], tc.thread_axis("blockIdx.x"))
    s[B].bind(ki, tc.thread_axis("threadIdx.x"))
    s[A2].compute_at(s[B], ki)
    f = tc.lower(s, [A, B])
    text = str(f)
    assert "A.local[" in text and "] = A[i, " in text, text
    a = np.random.default_rng(1).random((16, 64)).astype("float32")
    b = np.zeros(16, "float32")
    interp.run(f, a, b)
    np.testing.assert_allclose(b, 2 * a.sum(1), rtol=1e-5)
    if shutil.which("g++"):
        b[:] = 0
        tc.build(s, [A, B], target="cuda-emu")(a, b)
        np.testing.assert_allclose(b, 2 * a.sum(1), rtol=1e-5)
