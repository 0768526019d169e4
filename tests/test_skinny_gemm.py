"""Skinny GEMMs (M <= 16 rows: a GEMV, LLM decoding) auto-scheduled to stream W once, in
place (tecomp.strategy.cpu.skinny): results against numpy for both layouts of W, with
tails in N and K, written in plain TE and with tecomp.nn; no copy of W in the schedule;
tiles sized to the machine model's registers."""
import os
import random
import re

import numpy as np
import pytest

import tecomp as tc
import tecomp.nn as nn
from tecomp.strategy import Knobs, apply_rules
from tecomp.strategy.cpu import cpu_model, schedule_dense, schedule_matmul
from tecomp.strategy.cpu.skinny import (SKINNY_MAX_ROWS, prefetch_steps, skinny_plan,
                                        skinny_tile)
from tecomp.target import CpuModel
from tecomp.te.tensor import ComputeOp

LONG = os.environ.get("TECOMP_LONG_TESTS", "") not in ("", "0")
RNG = np.random.default_rng(49)


def _plain(M, N, K, layout):
    """``C = A @ W^T`` (W is N x K: ``"wt"``) or ``A @ W`` (W is K x N: ``"w"``) as a
    plain compute."""
    A = tc.placeholder((M, K), name="A")
    W = tc.placeholder((N, K) if layout == "wt" else (K, N), name="W")
    k = tc.reduce_axis((0, K), name="k")
    if layout == "wt":
        C = tc.compute((M, N), lambda i, j: tc.sum(A[i, k] * W[j, k], axis=k), name="C")
    else:
        C = tc.compute((M, N), lambda i, j: tc.sum(A[i, k] * W[k, j], axis=k), name="C")
    return A, W, C


def _zen4(threads=2):
    """The ``-mcpu=znver4`` machine model (AMD Zen 4: a ``strip_prefetch_rows``, FMAs half
    a register wide) with ``threads`` threads, whatever the host."""
    import dataclasses

    return dataclasses.replace(tc.Target("llvm -mcpu=znver4 -num-cores=2").machine,
                               threads=threads)


def _run(s, args, layout, bias=None):
    A, W, C = args[0], args[1], args[-1]
    a = RNG.standard_normal([int(d) for d in A.shape]).astype("float32")
    w = RNG.standard_normal([int(d) for d in W.shape]).astype("float32")
    ins = [a, w] + ([bias] if bias is not None else [])
    c = np.full([int(d) for d in C.shape], np.nan, "float32")
    tc.build(s, args)(*ins, c)
    want = a.astype(np.float64) @ (w.T if layout == "wt" else w).astype(np.float64)
    return c, want + (bias if bias is not None else 0)


def _prefetches_of(ir, name="W"):
    """The lines of the printed IR ``ir`` that prefetch ``name`` (into any cache level)."""
    return [ln.strip() for ln in ir.splitlines()
            if re.match(rf"\s*prefetch (\([^)]*\) )?{name}\[", ln)]


def _no_copy_of(s, args, W, limit=None):
    """W's only reader is the GEMM's accumulation (no copy stage, no cache_read of W
    in the schedule); with ``limit``, the lowered IR allocates no buffer of ``limit``
    elements or more.  Returns the lowered IR."""
    readers = [st.op for st in s.stages
               if isinstance(st.op, ComputeOp) and W in st.op.input_tensors]
    assert len(readers) == 1 and readers[0].reduce_axis, [op.name for op in readers]
    assert f"cache_read({W.name}," not in s.trace.python(args)
    ir = str(tc.lower(s, args))
    for name, shape in re.findall(r"allocate (\S+): \w+\[([^\]]*)\]", ir):
        assert limit is None or int(np.prod([int(d) for d in shape.split(",")])) < limit, \
            (name, shape)
    return ir


# (M, layout): every row count and layout with TECOMP_LONG_TESTS=1; by default each row
# count once, the layouts alternating, and M = 16 (two row blocks) in both
CASES = [(m, lay) for m in (1, 2, 4, 8, 16) for lay in ("wt", "w")]
DEFAULT = {(1, "wt"), (2, "w"), (4, "wt"), (8, "w"), (16, "wt"), (16, "w")}


@pytest.mark.parametrize("M, layout", CASES, ids=[f"M{m}-{lay}" for m, lay in CASES])
def test_plain_skinny_gemm_streams_w_in_place(M, layout):
    """A plain-TE skinny GEMM gets the skinny schedule (the ``skinny`` knob), no copy
    of W, and numpy's results with tails in N (not a multiple of the tile) and K (not
    a multiple of the vector or the row block)."""
    if not LONG and (M, layout) not in DEFAULT:
        pytest.skip("the full matrix: set TECOMP_LONG_TESTS=1")
    N, K = 83, 45
    args = _plain(M, N, K, layout)
    knobs = Knobs()
    s = apply_rules(args, knobs, cpu_model())
    assert knobs.values.get("skinny") is True
    _no_copy_of(s, args, args[1])
    c, want = _run(s, args, layout)
    np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-4)


def test_llm_decoding_shape_reads_w_in_place():
    """4 x 4096 @ (11008 x 4096)^T (lowered, not run): W read in place by the GEMM,
    no buffer of more than a thread task's accumulators (a thousandth of W), one
    parallel loop over W's rows; ``A @ W`` (W is 4096 x 11008) accumulates in C."""
    A, W, C = args = _plain(4, 11008, 4096, "wt")
    s = tc.auto_schedule(args)
    ir = _no_copy_of(s, args, W, 11008 * 4096 // 1000)
    assert ir.count("parallel (") == 1
    A, W, C = args = _plain(4, 11008, 4096, "w")
    s = tc.auto_schedule(args)
    assert "allocate" not in _no_copy_of(s, args, W)


def test_sixteen_rows_copy_a_and_prefetch_w():
    """16 x 4096 @ (11008 x 4096)^T with vectors along K (``skinny.rows_in_lanes`` off;
    lowered, not run) on a machine whose L2 (512 KiB) holds less than four copies of A:
    W still read in place, A read from a copy whose rows are a cache line further apart than 4 KiB (they shared one
    cache set with the tile's rows of W), each tile's rows of W prefetched a block of
    the reduction ahead, and at each step the next tile's line of each row (a block of
    16 steps: too short to prefetch ahead in the tile's own rows), into L2; with an L2
    of 1 MiB, whole rows of W, each row of the tile prefetched into L2 2 KiB ahead (one
    prefetch per row), no block ahead; 4 rows and a K whose rows fall into different
    sets anyway keep A in place."""
    import dataclasses

    from tecomp.strategy.cpu.skinny import rows_share_sets

    assert rows_share_sets(4096, 8) and not rows_share_sets(45, 8) \
        and not rows_share_sets(4096 + 16, 8)
    along_k = Knobs({"skinny.rows_in_lanes": False})
    A, W, C = args = _plain(16, 11008, 4096, "wt")
    small = dataclasses.replace(cpu_model(), l1_bytes=32 << 10, l2_bytes=512 << 10)
    s = apply_rules(args, along_k, small)
    ir = _no_copy_of(s, args, W, 16 * 4112 + 1)
    assert "allocate A.global: float32[16, 4096] (global, strides [4112, 1])" in ir, ir
    assert re.search(r"prefetch W\[.*min\(k\.outer\.outer \+ 1, 15\)\*256", ir), ir
    assert re.search(r"prefetch \(L2\) W\[j\.outer\*\d+ \+ min\(j\.outer_1 \+ 1, \d+\)\*\d+ \+ "
                     r"W\.pf0_1, k\.outer\.outer\*\d+ \+ k\.outer\.inner\*\d+\]", ir), ir
    info = dataclasses.replace(small, l2_bytes=1 << 20)
    for M in (16, 4):
        A, W, C = args = _plain(M, 11008, 4096, "wt")
        knobs = Knobs({"skinny.rows_in_lanes": False} if M == 16 else {})
        ir = _no_copy_of(apply_rules(args, knobs, info), args, W, 16 * 4112 + 1)
        assert ("A.global" in ir) == (M == 16)
        L, kb, nb = info.lanes, knobs.values["skinny.kblock"], knobs.values["skinny.cols"]
        assert kb == 4096 and knobs.values["skinny.stream"] == "rows"
        assert knobs.values["skinny.stream_level"] == 2 and knobs.values["skinny.prefetch"] == 0
        steps = prefetch_steps(info, knobs.values["skinny.stream_bytes"])
        ahead = f"min(k.outer.inner + {steps}, {kb // L - 1})*{L}]"
        # (skinny.stream_carry: the steps before the last `steps` of a tile prefetch its
        # own rows, the last ones the next tile's rows from their start, the loop split
        # in two there; the task's last tile clamped at its rows' ends)
        own, nxt = f"k.outer.inner*{L} + {steps * L}]", f"k.outer.inner*{L} - {kb - steps * L}]"
        assert knobs.values["skinny.stream_carry"] is True
        pf = [ln.strip() for ln in ir.splitlines() if "prefetch" in ln]
        assert pf and all(ln.startswith("prefetch (L2) W[") and ln.endswith((own, nxt, ahead))
                          for ln in pf), (ahead, pf)
        assert any(ln.endswith(nxt) for ln in pf) and any(ln.endswith(own) for ln in pf), pf
        assert ir.count(f"for (k.outer.inner, {kb // L - steps}, {steps})") >= 1, ir
        assert ir.count(f"unrolled (W.pf0, 0, {nb})") + ir.count(
            f"unrolled (W.pf0_1, 0, {nb})") == len(pf)
        knobs = Knobs({**knobs.values, "skinny.stream_carry": False})
        pf = _prefetches_of(str(tc.lower(apply_rules(args, knobs, info), args)))
        assert pf and all(ln.endswith(ahead) for ln in pf), (ahead, pf)
    args = _plain(16, 83, 45, "wt")
    ir = _no_copy_of(apply_rules(args, Knobs({"skinny.rows_in_lanes": False}), cpu_model()),
                     args, args[1])
    assert "A.global" not in ir and "k.outer.outer + 1" not in ir
    # run: 9 rows (a short row block), 1024 columns in blocks, 37 rows of W (a short tile)
    args = _plain(9, 37, 1024, "wt")
    s = apply_rules(args, along_k, cpu_model())
    ir = _no_copy_of(s, args, args[1])
    assert "A.global" in ir and _prefetches_of(ir), ir
    c, want = _run(s, args, "wt")
    np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-3)


def _dense_and_matmul_stream_w(M, N, K, dense_schedule, matmul_schedule):
    """``relu(dense(X, W, b))`` and ``matmul(X, W)`` scheduled by the two functions (each
    ``fn(args) -> Schedule``): no copy of W, numpy's results.  Returns the matmul's
    args."""
    X = tc.placeholder((M, K), name="X")
    Wd = tc.placeholder((N, K), name="Wd")
    b = tc.placeholder((N,), name="b")
    D = nn.relu(nn.dense(X, Wd, b))
    s = dense_schedule([X, Wd, b, D])
    _no_copy_of(s, [X, Wd, b, D], Wd)
    bias = RNG.standard_normal(N).astype("float32")
    c, want = _run(s, [X, Wd, b, D], "wt", bias)
    np.testing.assert_allclose(c, np.maximum(want, 0), rtol=1e-4, atol=1e-4)
    Wm = tc.placeholder((K, N), name="Wm")
    Mm = nn.matmul(X, Wm)
    s = matmul_schedule([X, Wm, Mm])
    _no_copy_of(s, [X, Wm, Mm], Wm)
    c, want = _run(s, [X, Wm, Mm], "w")
    np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-4)
    return [X, Wm, Mm]


def test_a_at_w_copy_a_knob():
    """``A @ W`` with the knob ``skinny.copy_a`` on (off by default there): A read from a
    copy whose rows are a cache line further apart than 4 KiB (rows 16 KiB apart fell
    into one set of L1), W still read in place (no copy of it), numpy's results with
    tails in N and K (the blocks of rows: a machine model without strip_prefetch_rows,
    whatever the host)."""
    import dataclasses
    info = dataclasses.replace(cpu_model(), strip_prefetch_rows=0)
    A, W, C = args = _plain(16, 1100, 4096, "w")
    s = apply_rules(args, Knobs({"skinny.copy_a": True}), info)
    ir = _no_copy_of(s, args, W, 16 * 4112 + 1)
    assert "allocate A.global: float32[16, 4096] (global, strides [4112, 1])" in ir, ir
    assert "A.global[" in ir.split("parallel (", 1)[1], ir
    for M in (3, 16):
        args = _plain(M, 83, 45, "w")
        s = apply_rules(args, Knobs({"skinny.copy_a": True}), info)
        _no_copy_of(s, args, args[1])
        c, want = _run(s, args, "w")
        np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-4)


def test_a_at_w_copy_of_a_where_its_rows_fill_a_set():
    """``A @ W`` reads A from a copy whose rows lie in other cache sets
    (``storage_align``: 4112 floats apart) by default where a register block's rows of
    A, at one column, put as many lines into one set of L1 as it has ways (K = 4096 on
    a 32 KiB L1 of 4 KiB ways: 8 rows or more, in the column strips, 12 rows x 2, and
    in the blocks of rows, 15 rows as 8 + 7), not where they fill fewer (6 rows; 14 rows
    as 7 + 7; K = 4100, the rows in different sets) nor on a 48 KiB L1 (12 ways) at 8
    rows, nor with ``COPY_A_KFIRST`` off; W read in place; numpy's results with the
    copy in the strips (9 rows, K = 1024: rows 4 KiB apart), with a tail in N, batched
    too."""
    import dataclasses

    from tecomp.strategy.cpu import skinny

    zen4 = _zen4()
    assert zen4.l1_bytes == 32 * 1024
    for M, K, want in ((12, 4096, True), (8, 4096, True), (15, 4096, True),
                       (6, 4096, False), (14, 4096, False), (12, 4100, False)):
        assert skinny_plan(_plain(M, 11008, K, "w")[2].op, zen4).copy_a == want, (M, K)
    l1_48k = dataclasses.replace(zen4, l1_bytes=48 * 1024)
    assert not skinny_plan(_plain(8, 11008, 4096, "w")[2].op, l1_48k).copy_a
    assert skinny_plan(_plain(12, 11008, 4096, "w")[2].op, l1_48k).copy_a
    args = _plain(12, 11008, 4096, "w")
    s = apply_rules(args, Knobs(), zen4)
    ir = _no_copy_of(s, args, args[1], 12 * 4112 + 1)
    assert "allocate A.global: float32[12, 4096] (global, strides [4112, 1])" in ir, ir
    assert "C.local" in ir and "A.global[i, k]*W[k, " in ir, ir
    # K = 1024: rows 4 KiB apart, one set too (the blocks of rows' copy: the knob's test)
    args = _plain(9, 83, 1024, "w")
    s = apply_rules(args, Knobs(), zen4)
    assert "A.global" in str(tc.lower(s, args))
    c, want = _run(s, args, "w")
    np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-4)
    A, W, C = _batched_a_at_w(2, 9, 1024, 40)
    s = apply_rules([A, W, C], Knobs(), zen4)
    assert "A.global" in str(tc.lower(s, [A, W, C]))
    a = RNG.standard_normal((2, 9, 1024)).astype("float32")
    w = RNG.standard_normal((2, 1024, 40)).astype("float32")
    c = np.full((2, 9, 40), np.nan, "float32")
    tc.build(s, [A, W, C])(a, w, c)
    np.testing.assert_allclose(c, a.astype(np.float64) @ w, rtol=1e-4, atol=1e-4)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(skinny, "COPY_A_KFIRST", False)
        assert not skinny_plan(_plain(12, 11008, 4096, "w")[2].op, zen4).copy_a


def _batched_a_at_w(batch, m, k, n):
    """A batched ``A @ W`` (W K-major) in plain TE: ``(A, W, C)``."""
    A = tc.placeholder((batch, m, k), name="A")
    W = tc.placeholder((batch, k, n), name="W")
    r = tc.reduce_axis((0, k), name="k")
    C = tc.compute((batch, m, n), lambda b, i, j: tc.sum(A[b, i, r] * W[b, r, j], axis=r),
                   name="C")
    return A, W, C


def test_a_at_w_column_strips_knob():
    """``A @ W`` with the knob ``skinny.strip_ahead`` (off by default): each tile of
    columns accumulates all the rows over the whole reduction in a local buffer, and
    every step prefetches W's rows that many steps ahead; W read in place; numpy's
    results with tails in N and K, batched and under an epilogue too; offered only where
    one register block holds all the rows."""
    A, W, C = args = _plain(8, 1100, 4096, "w")
    # (A read in place: its copy, where its rows fill a set of L1, has a test of its own)
    knobs = Knobs({"skinny.strip_ahead": 64, "skinny.copy_a": False})
    s = apply_rules(args, knobs, cpu_model())
    assert knobs.values["skinny.strip_ahead"] == 64
    ir = _no_copy_of(s, args, W, 8 * 64 + 1)
    assert re.search(r"allocate C\.local: float32\[8, \d+\] \(local\)", ir), ir
    assert re.search(r"prefetch \(L2\) W\[min\(k \+ 64, 4095\), ", ir), ir
    for M in (3, 8):
        args = _plain(M, 83, 45, "w")
        s = apply_rules(args, Knobs({"skinny.strip_ahead": 32}), cpu_model())
        _no_copy_of(s, args, args[1])
        c, want = _run(s, args, "w")
        np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-4)
    A, W, C = _batched_a_at_w(3, 4, 45, 83)
    R = tc.compute((3, 4, 83), lambda b, i, j: tc.max(C[b, i, j], tc.const(0.0, "float32")),
                   name="R")
    s = apply_rules([A, W, R], Knobs({"skinny.strip_ahead": 32}), cpu_model())
    a = RNG.standard_normal((3, 4, 45)).astype("float32")
    w = RNG.standard_normal((3, 45, 83)).astype("float32")
    r = np.full((3, 4, 83), np.nan, "float32")
    tc.build(s, [A, W, R])(a, w, r)
    np.testing.assert_allclose(r, np.maximum(a @ w, 0), rtol=1e-4, atol=1e-4)
    # 16 rows, two register blocks: on a machine model without strip_prefetch_rows, not
    # offered (with one, strips in blocks of rows: test_a_at_w_column_strips_in_blocks_of_rows)
    import dataclasses
    knobs = Knobs({"skinny.strip_ahead": 64})
    apply_rules(_plain(16, 83, 45, "w"), knobs,
                dataclasses.replace(cpu_model(), strip_prefetch_rows=0))
    assert "skinny.strip_ahead" not in knobs.values
    # 12 rows in one register block (skinny.rows 12): strips, numpy's results with tails
    args = _plain(12, 83, 45, "w")
    knobs = Knobs({"skinny.rows": 12, "skinny.cols": 2, "skinny.strip_ahead": 32})
    s = apply_rules(args, knobs, cpu_model())
    assert knobs.values["skinny.strip_ahead"] == 32
    ir = _no_copy_of(s, args, args[1])
    assert re.search(r"allocate C\.local: float32\[12, \d+\] \(local\)", ir), ir
    c, want = _run(s, args, "w")
    np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-4)


def test_a_at_w_column_strips_by_the_machine_model(monkeypatch):
    """By default ``A @ W`` reads W as column strips where the machine model has a
    ``strip_prefetch_rows`` (AMD Zen 4's 64, ``-mcpu=znver4``) from ``STRIP_MIN_ROWS``
    rows on while one register block holds them all (5, 6 and 8 rows) or, past
    ``skinny_tile``'s blocks, a block of all the rows by two vectors or more fits in
    three quarters of the registers (9 to 12 rows: ``M x 2``; not 4), past that in
    ``skinny_tile``'s blocks of rows where they are equal (16 rows: 8 x 3; not 13, 7 +
    6; ``STRIP_ROW_BLOCKS``); not on Zen 5 (unmeasured: 0) nor with the field set to 0;
    with ``STRIPS_PAST_ONE_BLOCK`` off (the A/B switch), 5 to 8 rows and 16 only,
    12 rows in blocks of 6; with ``STRIP_ROW_BLOCKS`` off too, 5 to 8 rows only."""
    import dataclasses

    from tecomp.strategy.cpu import skinny
    from tecomp.strategy.cpu.skinny import STRIP_MIN_ROWS

    zen4 = _zen4()
    zen5 = dataclasses.replace(tc.Target("llvm -mcpu=znver5 -num-cores=2").machine,
                               threads=2)
    assert zen4.strip_prefetch_rows == 64 and zen5.strip_prefetch_rows == 0
    assert STRIP_MIN_ROWS == 5
    for M in (4, 5, 6, 8, 9, 12, 13, 16):
        op = _plain(M, 11008, 4096, "w")[2].op
        want = 64 if 5 <= M and M != 13 else 0
        assert skinny_plan(op, zen4).strip_ahead == want, M
        assert skinny_plan(op, zen5).strip_ahead == 0, M
        off = dataclasses.replace(zen4, strip_prefetch_rows=0)
        assert skinny_plan(op, off).strip_ahead == 0, M
    for M, mb, nb in ((9, 9, 3), (12, 12, 2), (13, 7, 3), (16, 8, 3)):
        plan = skinny_plan(_plain(M, 11008, 4096, "w")[2].op, zen4)
        assert (plan.mb, plan.nb) == (mb, nb), M
    assert skinny_plan(_plain(8, 11008, 4096, "wt")[2].op, zen4).strip_ahead == 0
    monkeypatch.setattr(skinny, "STRIPS_PAST_ONE_BLOCK", False)
    plan = skinny_plan(_plain(12, 11008, 4096, "w")[2].op, zen4)
    assert (plan.mb, plan.nb, plan.strip_ahead) == (6, 4, 64)
    assert skinny_plan(_plain(8, 11008, 4096, "w")[2].op, zen4).strip_ahead == 64
    monkeypatch.setattr(skinny, "STRIP_ROW_BLOCKS", False)
    plan = skinny_plan(_plain(12, 11008, 4096, "w")[2].op, zen4)
    assert (plan.mb, plan.nb, plan.strip_ahead) == (6, 4, 0)
    plan = skinny_plan(_plain(16, 11008, 4096, "w")[2].op, zen4)
    assert (plan.mb, plan.nb, plan.strip_ahead) == (8, 3, 0)
    assert skinny_plan(_plain(8, 11008, 4096, "w")[2].op, zen4).strip_ahead == 64


@pytest.mark.parametrize("M", [14, 16])
def test_a_at_w_column_strips_in_blocks_of_rows(M, monkeypatch):
    """Past one register block of rows, on a machine model with a
    ``strip_prefetch_rows`` (``-mcpu=znver4``'s 64): column strips whose accumulators
    (all ``M`` rows, in a local buffer) are reached in ``skinny_tile``'s blocks of rows,
    the reduction in blocks of 64 rows of W, W prefetched a block ahead at every step; W
    read in place, no buffer larger than the tile's accumulators but, at 16 rows (blocks
    of 8 rows of A 16 KiB apart: one set of the 8-way L1), A's copy with its rows in
    other sets; numpy's results with
    tails in N and K (K shorter than a block, and not a multiple of it); 13 rows (blocks
    of 7 and 6) not by default, but through the knob ``skinny.strip_ahead`` (numpy's
    results); with ``STRIP_ROW_BLOCKS`` off, the blocks of rows over the whole width (no
    local buffer)."""
    from tecomp.strategy.cpu import skinny

    zen4 = _zen4()
    mb = -(-M // 2)
    args = _plain(M, 11008, 4096, "w")
    knobs = Knobs()
    s = apply_rules(args, knobs, zen4)
    assert (knobs.values["skinny.rows"], knobs.values["skinny.strip_ahead"]) == (mb, 64)
    ir = _no_copy_of(s, args, args[1], M * 4112 + 1)
    assert f"allocate C.local: float32[{M}, 48] (local)" in ir, ir
    allocs = re.findall(r"allocate (\S+): \w+\[([^\]]*)\]", ir)
    assert [a for a in allocs if a[0] != "C.local"] == (
        [("A.global", f"{M}, 4096")] if M == 16 else []), allocs
    assert re.search(r"prefetch \(L2\) W\[min\(k\.outer \+ 1, 63\)\*64 \+ k\.inner, ", ir), ir
    for N, K in ((83, 45), (83, 300)):
        args = _plain(M, N, K, "w")
        s = apply_rules(args, Knobs(), zen4)
        _no_copy_of(s, args, args[1])
        c, want = _run(s, args, "w")
        np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-4)
    args = _plain(13, 83, 300, "w")
    knobs = Knobs()
    apply_rules(args, knobs, zen4)
    assert knobs.values["skinny.strip_ahead"] == 0
    knobs = Knobs({"skinny.strip_ahead": 32})
    s = apply_rules(args, knobs, zen4)
    assert (knobs.values["skinny.rows"], knobs.values["skinny.strip_ahead"]) == (7, 32)
    c, want = _run(s, args, "w")
    np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-4)
    monkeypatch.setattr(skinny, "STRIP_ROW_BLOCKS", False)
    args = _plain(M, 11008, 4096, "w")
    assert "C.local" not in str(tc.lower(apply_rules(args, Knobs(), zen4), args))


def _chosen(args, model, given=None):
    """The skinny rules' schedule of ``args`` on ``model`` with the knob values
    ``given`` (a dict, or none: the defaults), and the values the knobs took."""
    knobs = Knobs(given)
    return apply_rules(args, knobs, model), knobs.values


def test_a_at_w_strips_prefetch_the_next_tiles_rows():
    """Column strips of one register block of all the rows (12 rows on
    ``-mcpu=znver4``, 64 rows ahead): a strip's last 64 steps prefetch the next tile's
    first rows (``skinny.strip_carry``, on by default: ``STRIP_CARRY``; loop partitioning
    parts the steps, no clamp left in the first 4032), off through the knob (clamped at
    the strip's last row); numpy's results with tails (K shorter than the distance, and
    not a multiple of it; N not a multiple of the tile), 2-d and batched; in blocks of
    rows (16 rows) off by default (``STRIP_CARRY_BLOCKS``), through the knob the last
    block's steps prefetch the next tile's first block (numpy's results)."""
    zen4 = _zen4()
    args = _plain(12, 11008, 4096, "w")
    s, chosen = _chosen(args, zen4)
    assert chosen["skinny.strip_carry"] is True
    ir = str(tc.lower(s, args))
    assert re.search(r"prefetch \(L2\) W\[k \+ 64, ", ir), ir
    assert re.search(r"prefetch \(L2\) W\[k - 4032, .* \+ 32\]", ir), ir
    ir = str(tc.lower(_chosen(args, zen4, {"skinny.strip_carry": False})[0], args))
    assert "W[k - 4032" not in ir and "W[min(k + 64, 4095), " in ir, ir
    for M, N, K in ((5, 83, 45), (12, 83, 300), (8, 100, 64)):
        args = _plain(M, N, K, "w")
        s, chosen = _chosen(args, zen4)
        assert chosen["skinny.strip_carry"] is True
        c, want = _run(s, args, "w")
        np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-4)
    A, W, C = _batched_a_at_w(3, 6, 300, 83)
    s, chosen = _chosen([A, W, C], zen4)
    assert chosen["skinny.strip_carry"] is True
    a = RNG.standard_normal((3, 6, 300)).astype("float32")
    w = RNG.standard_normal((3, 300, 83)).astype("float32")
    c = np.full((3, 6, 83), np.nan, "float32")
    tc.build(s, [A, W, C])(a, w, c)
    np.testing.assert_allclose(c, a @ w, rtol=1e-4, atol=1e-4)
    args = _plain(16, 11008, 4096, "w")
    assert _chosen(args, zen4)[1]["skinny.strip_carry"] is False
    ir = str(tc.lower(_chosen(args, zen4, {"skinny.strip_carry": True})[0], args))
    assert re.search(r"prefetch \(L2\) W\[k\.outer\*64 \+ k\.inner \+ 64, ", ir), ir
    assert re.search(r"prefetch \(L2\) W\[k\.inner, .* \+ 48\]", ir), ir
    for N, K in ((83, 45), (83, 300)):
        args = _plain(16, N, K, "w")
        c, want = _run(_chosen(args, zen4, {"skinny.strip_carry": True})[0], args, "w")
        np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-4)


def test_a_at_w_strips_in_smaller_blocks_of_rows():
    """The knob ``skinny.strip_block`` (strips in blocks of rows, 16 rows on
    ``-mcpu=znver4``): 0 by default (blocks of ``strip_ahead``'s 64 rows, a block
    ahead), 16: the reduction in blocks of 16 rows of W, still prefetched 64 rows (four
    blocks) ahead; W in place; numpy's results with tails (K shorter than the prefetch
    distance, not a multiple of the block); not offered where one register block holds
    all the rows."""
    zen4 = _zen4()
    args = _plain(16, 11008, 4096, "w")
    assert _chosen(args, zen4)[1]["skinny.strip_block"] == 0
    s, chosen = _chosen(args, zen4, {"skinny.strip_block": 16})
    assert chosen["skinny.strip_block"] == 16
    ir = _no_copy_of(s, args, args[1], 16 * 4112 + 1)
    assert re.search(r"prefetch \(L2\) W\[min\(k\.outer \+ 4, 255\)\*16 \+ k\.inner, ", ir), ir
    for N, K in ((83, 45), (83, 300)):
        args = _plain(16, N, K, "w")
        c, want = _run(_chosen(args, zen4, {"skinny.strip_block": 16})[0], args, "w")
        np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-4)
    chosen = _chosen(_plain(12, 11008, 4096, "w"), zen4, {"skinny.strip_block": 16})[1]
    assert "skinny.strip_block" not in chosen


def test_nn_dense_and_matmul_get_the_skinny_schedule():
    """``tecomp.nn.dense`` with a bias and a ReLU (the epilogue applied on the way
    out) and ``tecomp.nn.matmul`` of 3 rows: the skinny schedule, no copy of W."""
    def rules(args):
        knobs = Knobs()
        s = apply_rules(args, knobs, cpu_model())
        assert knobs.values.get("skinny") is True
        return s

    _dense_and_matmul_stream_w(3, 50, 37, rules, tc.auto_schedule)


def test_schedule_dense_and_matmul_called_directly_stream_w():
    """``schedule_dense`` / ``schedule_matmul`` called as TVM users call TOPI's schedules
    (no config) give a skinny GEMM the same in-place schedule; with a ``config`` they
    apply the GEMM template's blocking as asked (W copied into panels)."""
    args = _dense_and_matmul_stream_w(5, 70, 40, lambda a: schedule_dense([a[-1]]),
                                      lambda a: schedule_matmul([a[-1]]))
    s = schedule_matmul([args[-1]], config={"mr": 4, "nr": 16})
    assert "cache_read" in s.trace.python(args)
    c, want = _run(s, args, "w")
    np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("layout", ["wt", "w"])
def test_batched_gemv_streams_each_w_in_place(layout):
    """A batched skinny GEMM (``nn.batch_matmul`` of 3 x 2 rows against each batch's
    own W, ``transpose_b`` for W[b, j, k]; a plain compute with two batch axes): the
    skinny schedule, the batch fused with the column tasks into one parallel loop, no
    copy of W, numpy's results."""
    K, N = 37, 45
    A = tc.placeholder((3, 2, K), name="A")
    W = tc.placeholder((3, N, K) if layout == "wt" else (3, K, N), name="W")
    C = nn.batch_matmul(A, W, transpose_b=layout == "wt")
    knobs = Knobs()
    s = apply_rules([A, W, C], knobs, cpu_model())
    assert knobs.values.get("skinny") is True
    _no_copy_of(s, [A, W, C], W)
    a = RNG.standard_normal((3, 2, K)).astype("float32")
    w = RNG.standard_normal([int(d) for d in W.shape]).astype("float32")
    c = np.empty((3, 2, N), "float32")
    tc.build(s, [A, W, C])(a, w, c)
    want = a.astype(np.float64) @ (w.transpose(0, 2, 1) if layout == "wt" else w)
    np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-4)
    # two batch axes, one row (attention's q @ k^T while decoding)
    Q = tc.placeholder((2, 3, 1, K), name="Q")
    Kt = tc.placeholder((2, 3, N, K), name="Kt")
    k = tc.reduce_axis((0, K), name="k")
    S = tc.compute((2, 3, 1, N), lambda b, h, i, j: tc.sum(Q[b, h, i, k] * Kt[b, h, j, k],
                                                           axis=k), name="S")
    s = tc.auto_schedule([Q, Kt, S])
    assert str(tc.lower(s, [Q, Kt, S])).count("parallel (b.h.") == 1
    q = RNG.standard_normal((2, 3, 1, K)).astype("float32")
    kt = RNG.standard_normal((2, 3, N, K)).astype("float32")
    out = np.empty((2, 3, 1, N), "float32")
    tc.build(s, [Q, Kt, S])(q, kt, out)
    np.testing.assert_allclose(out, q @ kt.transpose(0, 1, 3, 2), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("seed", [0, 1])
def test_skinny_knobs_sampled_are_correct(seed):
    """Random choices of the skinny knobs (as the search samples them, the template
    off included) give numpy's results."""
    for layout in ("wt", "w"):
        args = _plain(5, 70, 33, layout)
        knobs = Knobs(rng=random.Random(seed))
        s = apply_rules(args, knobs, cpu_model())
        c, want = _run(s, args, layout)
        np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-4, err_msg=str(knobs.values))


def test_more_rows_or_other_dtypes_are_not_skinny():
    """Above SKINNY_MAX_ROWS rows, with a symbolic extent, float64, an operand that is
    not an input or a W shared by a batch, the GEMM is left to the other templates and
    the rules."""
    info = cpu_model()
    assert skinny_plan(_plain(SKINNY_MAX_ROWS, 64, 32, "wt")[2].op, info) is not None
    assert skinny_plan(_plain(SKINNY_MAX_ROWS + 1, 64, 32, "wt")[2].op, info) is None
    A = tc.placeholder((4, 32), name="A", dtype="float64")
    W = tc.placeholder((64, 32), name="W", dtype="float64")
    assert skinny_plan(nn.dense(A, W).op, info) is None
    n = tc.var("n")
    A = tc.placeholder((4, n), name="A")
    W = tc.placeholder((64, n), name="W")
    assert skinny_plan(nn.dense(A, W).op, info) is None
    A = tc.placeholder((4, 32), name="A")
    W = tc.placeholder((64, 32), name="W")
    assert skinny_plan(nn.dense(nn.relu(A), W).op, info) is None
    A3 = tc.placeholder((2, 4, 32), name="A3")    # one W for the whole batch: 8 rows
    k = tc.reduce_axis((0, 32), name="k")
    C3 = tc.compute((2, 4, 64), lambda b, i, j: tc.sum(A3[b, i, k] * W[j, k], axis=k))
    assert skinny_plan(C3.op, info) is None


@pytest.mark.parametrize("lanes, vregs", [(16, 32), (8, 16), (4, 32)])
def test_tiles_fit_the_machine_models_registers(lanes, vregs):
    """The register tile comes from the machine model: the accumulators, a tile's
    vectors of W and one of A fit its vector registers at every row count and thread
    count, two tiles or more per thread where N allows."""
    for threads in (1, 2, 8):
        info = CpuModel(lanes=lanes, vregs=vregs, threads=threads)
        for M in range(1, SKINNY_MAX_ROWS + 1):
            for N in (7, 100, 11008):
                for rows_of_w, width in ((True, 1), (False, lanes)):
                    mb, nb = skinny_tile(M, N, rows_of_w, info)
                    assert 1 <= mb <= M and 1 <= nb and mb * nb + nb + 1 <= vregs, \
                        (M, N, rows_of_w, mb, nb)
                    assert -(-N // (nb * width)) >= 2 * threads or nb == 1
                    if N == 11008:
                        assert nb >= 2 or (not rows_of_w and M * 2 + 3 > vregs), (M, mb, nb)


@pytest.mark.parametrize("streams", [1, 3])
def test_few_rows_read_at_most_read_streams_rows_of_w(streams):
    """Below A_IN_L2_MIN_ROWS rows of A a tile of ``A @ W^T`` reads at most the machine
    model's ``read_streams`` rows of W at a time, each whole where A fits in L1, and
    gives numpy's results; from there on the tile and the blocks do not depend on it;
    ``A @ W`` neither."""
    import dataclasses

    from tecomp.strategy.cpu.skinny import A_IN_L2_MIN_ROWS

    base = cpu_model()
    info = dataclasses.replace(base, read_streams=streams)
    wide = dataclasses.replace(base, read_streams=8)
    K = base.l1_bytes // 4 // 2          # 2 rows of A fill L1
    for M in range(1, SKINNY_MAX_ROWS + 1):
        for layout in ("wt", "w"):
            op = _plain(M, 11008, K, layout)[2].op
            plan, plan8 = skinny_plan(op, info), skinny_plan(op, wide)
            if layout == "wt" and M < A_IN_L2_MIN_ROWS:
                assert plan.nb == min(streams, plan8.nb), (M, plan)
                assert plan.kb == (K if M <= 2 else plan8.kb), (M, plan)
            else:
                assert plan == plan8, (M, layout, plan, plan8)
    args = _plain(2, 37, 45, "wt")
    knobs = Knobs()
    s = apply_rules(args, knobs, info)
    assert knobs.values["skinny.cols"] == streams
    _no_copy_of(s, args, args[1])
    c, want = _run(s, args, "wt")
    np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-4)


def test_rows_of_w_read_in_one_run_per_thread():
    """``A @ W`` (W is K x N): the register blocks accumulate over K_BLOCK rows of W (all
    of K where it is shorter), and each thread has one task, its share of the tiles of
    columns (a run of each row of W), fewer tiles where C's strip (M rows by the task's
    columns) would fill more than half of the machine model's L2; batched GEMMs share
    their tiles out the same way.  Whatever the CPU (its ``prefetch_burst_lines`` set to
    0, unmeasured: :func:`test_a_at_w_row_block_by_prefetch_burst_lines`)."""
    import dataclasses

    from tecomp.strategy.cpu.skinny import K_BLOCK

    base = dataclasses.replace(cpu_model(), prefetch_burst_lines=0, strip_prefetch_rows=0)
    for l2 in (64 << 10, 256 << 10, 2 << 20):
        for threads in (1, 2, 8):
            info = dataclasses.replace(base, l2_bytes=l2, threads=threads)
            for M in (1, 4, 16):
                for K in (9, 4096):
                    for N in (100, 11008):
                        plan = skinny_plan(_plain(M, N, K, "w")[2].op, info)
                        cols = plan.nb * info.lanes
                        tiles = -(-N // cols)
                        assert plan.kb == min(K, K_BLOCK), plan
                        assert plan.stream == "tile", plan
                        share = -(-tiles // threads)
                        fits = 4 * M * plan.task_tiles * cols <= l2 // 2
                        assert 1 <= plan.task_tiles <= share, (l2, threads, plan)
                        assert fits or plan.task_tiles == 1, (l2, threads, plan)
                        # one task a thread, unless C's strip would not fit in L2
                        assert plan.task_tiles == share or \
                            4 * M * (plan.task_tiles + 1) * cols > l2 // 2, (l2, plan)
    info = dataclasses.replace(base, threads=4)
    A = tc.placeholder((3, 2, 64), name="A")
    W = tc.placeholder((3, 64, 100), name="W")
    plan = skinny_plan(nn.batch_matmul(A, W).op, info)
    tiles = -(-100 // (plan.nb * info.lanes))
    assert plan.batch == 3 and plan.task_tiles == min(tiles, -(-3 * tiles // 4)), plan


def test_a_at_w_row_block_by_prefetch_burst_lines():
    """``A @ W`` (W is K x N) on a machine model with ``prefetch_burst_lines``: the block
    of rows of W (``skinny.kblock``) is the largest power of two whose lines (rows by
    the tile's vectors of columns) fit in it, at most K_BLOCK and K, and no fewer than
    the power of two at or above 2 M (AMD Zen 4's 48 lines, ``-mcpu=znver4``, 16 lanes: 4
    rows at 1 and 2 rows of A (8 vectors of columns), 8 at 3 (7) and 4 (6), 16 from 5);
    0 (unmeasured, ``-mcpu=znver5``): K_BLOCK rows; numpy's results with a block of 4
    rows and K = 37 (its last block one row); the knob ``skinny.kblock`` still chooses
    any block; ``A @ W^T`` unchanged."""
    import dataclasses

    from tecomp.strategy.cpu.skinny import K_BLOCK, row_block

    zen4 = _zen4(threads=1)
    zen5 = tc.Target("llvm -mcpu=znver5 -num-cores=2").machine
    assert zen4.prefetch_burst_lines == 48 and zen5.prefetch_burst_lines == 0
    want = {1: 4, 2: 4, 3: 8, 4: 8, 5: 16, 6: 16, 8: 16, 12: 16, 16: 16}
    for M, kb in want.items():
        plan = skinny_plan(_plain(M, 11008, 4096, "w")[2].op, zen4)
        assert (plan.kb, row_block(M, 4096, plan.nb, zen4)) == (kb, kb), (M, plan)
        assert skinny_plan(_plain(M, 11008, 4096, "w")[2].op, zen5).kb == K_BLOCK
        assert skinny_plan(_plain(M, 11008, 4096, "wt")[2].op, zen4) == \
            skinny_plan(_plain(M, 11008, 4096, "wt")[2].op,
                        dataclasses.replace(zen4, prefetch_burst_lines=0))
    for lines, nb, M, kb in ((48, 1, 1, 16), (1, 8, 1, 2), (64, 4, 3, 16), (32, 3, 2, 8),
                             (32, 3, 5, 16), (48, 8, 1, 4), (48, 7, 3, 8)):
        assert row_block(M, 4096, nb, dataclasses.replace(zen4, prefetch_burst_lines=lines)) \
            == kb, (lines, nb, M)
    assert row_block(1, 3, 8, zen4) == 3
    model = zen4     # (its schedule built for the host)
    args = _plain(1, 203, 37, "w")
    knobs = Knobs()
    s = apply_rules(args, knobs, model)
    nb = knobs.values["skinny.cols"]
    assert knobs.values["skinny.kblock"] == row_block(1, 37, nb, model) < K_BLOCK
    ir = _no_copy_of(s, args, args[1])
    assert re.search(rf"for \(k\.inner, 0, {knobs.values['skinny.kblock']}\)", ir), ir
    c, want = _run(s, args, "w")
    np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-3)
    s = apply_rules(args, Knobs({"skinny.kblock": 16}), model)
    assert re.search(r"for \(k\.inner, 0, 16\)", str(tc.lower(s, args)))
    c, want = _run(s, args, "w")
    np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-3)


def test_a_at_w_prefetches_blocks_tiles_ahead():
    """``A @ W`` in blocks of rows (4 rows: 4 x 6 tiles in blocks of 8 rows of W on
    ``-mcpu=znver4``): each tile prefetches into L2 the block of the tile ``TILES_AHEAD``
    (3) tiles on, clamped at the thread task's last tile; the knob
    ``skinny.tiles_ahead`` sets it (1: the next tile's); numpy's results with the
    distance past the task's tiles (N = 203, two tiles); not drawn for the strips."""
    from tecomp.strategy.cpu.skinny import TILES_AHEAD

    zen4 = _zen4()
    assert TILES_AHEAD == 3
    args = _plain(4, 11008, 4096, "w")
    for knobs, ahead in ((Knobs(), 3), (Knobs({"skinny.tiles_ahead": 1}), 1)):
        s = apply_rules(args, knobs, zen4)
        assert knobs.values["skinny.tiles_ahead"] == ahead
        assert knobs.values["skinny.strip_ahead"] == 0
        pf = _prefetches_of(str(tc.lower(s, args)))
        assert any(f"min(j.inner.outer + {ahead}, 57)*96" in ln for ln in pf), pf
    args = _plain(4, 203, 37, "w")
    s = apply_rules(args, Knobs({"skinny.tiles_ahead": 6}), zen4)
    c, want = _run(s, args, "w")
    np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-3)
    knobs = Knobs()
    apply_rules(_plain(8, 11008, 4096, "w"), knobs, zen4)
    assert knobs.values["skinny.strip_ahead"] and "skinny.tiles_ahead" not in knobs.values


# (M, threads, L2 bytes): A @ W with odd sizes for every row count; 1 and 2 threads, and
# an L2 too small for C's strip (a tile a task)
ROWS_W = [(m, t, l2) for m in range(1, SKINNY_MAX_ROWS + 1) for t, l2 in
          ((1, None), (2, None), (2, 256))]
ROWS_W_DEFAULT = {(1, 2, None), (3, 1, None), (5, 2, 256), (9, 2, None),
                  (16, 1, None), (16, 2, 256)}


@pytest.mark.parametrize("M, threads, l2", ROWS_W,
                         ids=[f"M{m}-t{t}-{'small' if l2 else 'l2'}" for m, t, l2 in ROWS_W])
def test_a_at_w_streams_each_thread_s_columns(M, threads, l2):
    """``A @ W`` (W is K x N) with N and K not multiples of the vector or of the block
    of rows (N = 203, K = 37: two blocks of 16 rows and 5): numpy's results, no copy of
    W, the reduction in blocks of K_BLOCK rows inside the thread task; one task a
    thread (a parallel loop of ``threads`` tasks, no parallel loop on one thread), a
    tile a task where the machine model's L2 does not hold C's strip; each FMA loads W
    itself only where the register block holds all M rows; each tile prefetches into L2
    the next tile's block of rows, outside the step loop (``skinny.stream`` ``"tile"``;
    nothing in a task of one tile), and with the knob off nothing is prefetched."""
    import dataclasses

    from tecomp.strategy.cpu.skinny import K_BLOCK

    if not LONG and (M, threads, l2) not in ROWS_W_DEFAULT:
        pytest.skip("the full matrix: set TECOMP_LONG_TESTS=1")
    info = dataclasses.replace(cpu_model(), threads=threads, memory_operands=True,
                               prefetch_burst_lines=0, strip_prefetch_rows=0)
    if l2 is not None:
        info = dataclasses.replace(info, l2_bytes=l2)
    N, K = 203, 37
    args = _plain(M, N, K, "w")
    knobs = Knobs()
    s = apply_rules(args, knobs, info)
    assert knobs.values["skinny"] is True and knobs.values["skinny.kblock"] == K_BLOCK
    ir = _no_copy_of(s, args, args[1])
    tasks = -(-N // (knobs.values["skinny.task_tiles"] * knobs.values["skinny.cols"]
                     * info.lanes))
    loops = re.findall(r"(parallel|for) \(j\.outer, 0, (\d+)\)", ir)
    if tasks > 1 or threads > 1:
        assert loops == [("parallel" if threads > 1 and tasks > 1 else "for", str(tasks))], \
            (loops, ir)
    if l2 is None:
        assert tasks == min(threads, -(-N // (knobs.values["skinny.cols"] * info.lanes)))
    else:
        assert knobs.values["skinny.task_tiles"] == 1, knobs.values
    assert re.search(rf"for \(k\.inner, 0, {K_BLOCK}\)", ir), ir
    each = knobs.values["skinny.rows"] == M > 1
    assert knobs.values["skinny.w_each_use"] is (knobs.values["skinny.rows"] == M)
    assert ("pragma_load_each_use = 'W'" in ir) == each, ir
    assert knobs.values["skinny.stream"] == "tile"
    pf = _prefetches_of(ir)
    # (at the tile: a block of rows, whatever the step; none in a task of one tile)
    assert bool(pf) == (knobs.values["skinny.task_tiles"] > 1), pf
    assert all(ln.startswith("prefetch (L2) W[") and "k.inner" not in ln for ln in pf), pf
    c, want = _run(s, args, "w")
    np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-3)
    off = apply_rules(args, Knobs({"skinny.stream": "off"}), info)
    assert not _prefetches_of(str(tc.lower(off, args)))
    c, want = _run(off, args, "w")
    np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-3)


# odd row counts (a short row block), both thread counts of the machine model; every
# row count from 1 to 16 with TECOMP_LONG_TESTS=1
ODD = [(m, t) for m in range(1, SKINNY_MAX_ROWS + 1) for t in (1, 2)]
ODD_DEFAULT = {(3, 1), (5, 2), (13, 1)}


@pytest.mark.parametrize("M, threads", ODD, ids=[f"M{m}-t{t}" for m, t in ODD])
def test_odd_rows_stream_prefetch_and_threads(M, threads):
    """``A @ W^T`` with odd M, N and K (tails of the row block, of the tile of W's rows
    and of the vectors along K), scheduled for 1 and 2 threads: numpy's results, no copy
    of W; each step prefetches W into L2 (one prefetch per row of the tile, the rows
    unrolled), from 1 row on, and with the ``skinny.stream`` knob off none."""
    import dataclasses

    if not LONG and (M, threads) not in ODD_DEFAULT:
        pytest.skip("the full matrix: set TECOMP_LONG_TESTS=1")
    info = dataclasses.replace(cpu_model(), threads=threads)
    # up to 7 rows, whole rows of W; one of 8 KiB or more (2100 columns: four distances
    # of the prefetch into L2) prefetches ahead in the tile's rows, a shorter block the
    # next tile's
    args = _plain(M, 71, 2100 if M <= 7 else 301, "wt")
    knobs = Knobs()
    s = apply_rules(args, knobs, info)
    assert knobs.values["skinny.stream"] != "off"
    if (LONG or M in (3, 5)) and info.lanes == 16:     # (kb from a 32-48 KiB L1)
        assert knobs.values["skinny.stream"] == ("rows" if M <= 7 else "tile")
    ir = _no_copy_of(s, args, args[1])
    assert ("parallel (" in ir) == (threads > 1)
    steps = [ln for ln in _prefetches_of(ir) if "pf1" not in ln]
    assert steps, ir
    assert all(ln.startswith("prefetch (L2) W[") for ln in steps), steps
    c, want = _run(s, args, "wt")
    np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-3)
    if LONG or M in (3, 5):
        s = apply_rules(args, Knobs({"skinny.stream": "off"}), info)
        ir = str(tc.lower(s, args))
        assert not [ln for ln in _prefetches_of(ir) if "pf1" not in ln]
        c, want = _run(s, args, "wt")
        np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-3)


def test_dense_and_batched_gemv_stream_like_plain_te():
    """``tecomp.nn.dense`` and a batched ``A @ W^T`` (``nn.batch_matmul``) of 6 rows get
    the plain compute's stream prefetch (the same kernel: the skinny plan of the GEMM)."""
    K, N = 1024, 40
    X = tc.placeholder((6, K), name="X")
    Wd = tc.placeholder((N, K), name="W")
    plain = Knobs()
    apply_rules(list(_plain(6, N, K, "wt")), plain, cpu_model())
    dense = Knobs()
    D = nn.dense(X, Wd)
    apply_rules([X, Wd, D], dense, cpu_model())
    Ab = tc.placeholder((2, 6, K), name="Ab")
    Wb = tc.placeholder((2, N, K), name="Wb")
    batched = Knobs()
    B = nn.batch_matmul(Ab, Wb, transpose_b=True)
    s = apply_rules([Ab, Wb, B], batched, cpu_model())
    assert plain.values["skinny.stream"] != "off"
    # (a 2-d GEMM of 6 rows may be offered vectors along A's rows where the FMAs' lanes
    # are fewer than a register's, fma_lanes_rows, a batched one not: not taken by
    # default, the same kernel)
    assert plain.values.get("skinny.rows_in_lanes") in (None, False)
    for kn in (dense, batched):
        assert {k: v for k, v in kn.values.items() if k.startswith("skinny")} == \
            {k: v for k, v in plain.values.items() if k.startswith("skinny")
             and (k != "skinny.rows_in_lanes" or k in kn.values)}, kn.values
    a = RNG.standard_normal((2, 6, K)).astype("float32")
    w = RNG.standard_normal((2, N, K)).astype("float32")
    c = np.empty((2, 6, N), "float32")
    tc.build(s, [Ab, Wb, B])(a, w, c)
    np.testing.assert_allclose(c, a @ w.transpose(0, 2, 1), rtol=1e-4, atol=1e-3)


# (rows of A, lanes of the machine model): one vector of A's rows, two (AVX2's 8 lanes),
# and rows that leave the last vector part empty (its lanes past M masked off)
LANES = [(16, 16), (8, 8), (16, 8), (12, 16), (9, 16), (15, 16), (13, 8)]
LANES_DEFAULT = {(16, 16), (12, 16)}


@pytest.mark.parametrize("M, lanes", LANES, ids=[f"M{m}-L{l}" for m, l in LANES])
def test_rows_in_lanes(M, lanes):
    """``A @ W^T`` whose rows leave their last vector of the machine model's lanes more
    than half full: vectors along A's rows (``skinny.rows_in_lanes``): A copied
    transposed, W read in place, no lane sums (no ``C.rf``), a tile of ``fma_latency x
    fma_ports`` rows of W (fewer where 16 registers do not hold them) each prefetched
    ahead, by default with AVX-512 (the model's masks), through the knob with AVX2's 8
    lanes; numpy's results with tails in N and K, on 1 and 2 threads (one of them by
    default); the knob off gives the tile along K."""
    import dataclasses

    from tecomp.strategy.cpu.skinny import lanes_tile

    if not LONG and (M, lanes) not in LANES_DEFAULT:
        pytest.skip("more row counts: set TECOMP_LONG_TESTS=1")

    # (FMAs a register wide: the k steps in the lanes are the default only where they
    # are narrower, test_rows_and_k_steps_in_lanes)
    info = dataclasses.replace(cpu_model(), lanes=lanes, vregs=32 if lanes == 16 else 16,
                               masks=lanes == 16, fma_lanes=lanes)
    vecs = -(-M // lanes)
    assert lanes_tile(M, info) == min(info.fma_latency * info.fma_ports,
                                      (info.vregs - 1 - vecs) // vecs)
    args = _plain(M, 37, 301, "wt")
    for threads in (1, 2) if LONG else (2 if lanes == 16 else 1,):
        info = dataclasses.replace(info, threads=threads)
        default = Knobs()
        apply_rules(args, default, info)
        assert default.values["skinny.rows_in_lanes"] is info.masks
        knobs = Knobs({"skinny.rows_in_lanes": True})
        s = apply_rules(args, knobs, info)
        ir = _no_copy_of(s, args, args[1])
        assert "C.rf" not in ir and _prefetches_of(ir), ir
        assert re.search(rf"allocate A\.global: float32\[{M}, 301\] \(global, strides "
                         r"\[1, " + str(M) + r"\]\)", ir), ir
        assert ("parallel (" in ir) == (threads > 1)
        c, want = _run(s, args, "wt")
        np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-3)
    s = apply_rules(args, Knobs({"skinny.rows_in_lanes": False}), info)
    assert "C.rf" in str(tc.lower(s, args))


def test_rows_in_lanes_from_a_half_full_vector():
    """``A @ W^T`` may run its vectors along A's rows (``SkinnyPlan.rows_in_lanes``) where
    the rows leave their last vector more than half full (:func:`rows_fill_lanes`): 9 to
    16 rows with 16 lanes, 5 to 8 and 13 to 16 with 8; never batched or for ``A @ W``.
    For an AVX-512 model (16 lanes, masks) the default schedule of every row count from
    1 to 16 (``TECOMP_LONG_TESTS=1``; by default 1, 8, 9, 15 and 16: both ends and
    both sides of the switch; odd N and K; 2 threads)
    gives numpy's results, W read in place, along A's
    rows (no lane sums) exactly from 9 rows on, with a tile of 8 rows of W
    (``skinny.lanes_rows``); sampled knobs give them too (with ``skinny.k_lanes``, the
    lanes' sums of :func:`_schedule_rows_k_lanes`).  FMAs a register wide: the model's
    ``fma_lanes`` pinned."""
    import dataclasses

    from tecomp.strategy.cpu.skinny import rows_fill_lanes

    want = {16: set(range(9, 17)), 8: set(range(5, 9)) | set(range(13, 17))}
    for lanes, rows in want.items():
        assert {m for m in range(1, 17) if rows_fill_lanes(m, lanes)} == rows
        info = dataclasses.replace(cpu_model(), lanes=lanes)
        for m in range(1, 17):
            assert skinny_plan(_plain(m, 37, 203, "wt")[2].op, info).rows_in_lanes \
                is (m in rows)
            assert not skinny_plan(_plain(m, 37, 203, "w")[2].op, info).rows_in_lanes
    info = dataclasses.replace(cpu_model(), lanes=16)
    assert skinny_plan(_plain(16, 40, 64, "wt")[2].op, info).rows_in_lanes
    A = tc.placeholder((2, 16, 64), name="A")
    W = tc.placeholder((2, 40, 64), name="W")
    assert not skinny_plan(nn.batch_matmul(A, W, transpose_b=True).op, info).rows_in_lanes
    info = dataclasses.replace(cpu_model(), lanes=16, vregs=32, masks=True, threads=2,
                               fma_latency=4, fma_ports=2, fma_lanes=16)
    for M in range(1, SKINNY_MAX_ROWS + 1) if LONG else (1, 8, 9, 15, 16):
        args = _plain(M, 37, 203, "wt")
        knobs = Knobs()
        s = apply_rules(args, knobs, info)
        ir = _no_copy_of(s, args, args[1])
        assert ("C.rf" not in ir) is (M >= 9), (M, ir)
        assert knobs.values.get("skinny.lanes_rows") == (8 if M >= 9 else None)
        c, want = _run(s, args, "wt")
        np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-3, err_msg=f"M={M}")
    for seed in range(3):
        args = _plain(12, 37, 203, "wt")
        knobs = Knobs({"skinny": True, "skinny.rows_in_lanes": True}, rng=random.Random(seed))
        s = apply_rules(args, knobs, info)
        # (lane sums only where the draw put k steps in the lanes too)
        assert ("C.rf" in str(tc.lower(s, args))) is bool(knobs.values.get("skinny.k_lanes"))
        c, want = _run(s, args, "wt")
        np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-3, err_msg=str(knobs.values))


@pytest.mark.parametrize("M", [5, 6, 7, 8])
def test_rows_in_the_fmas_lanes(M, monkeypatch):
    """Where the machine model's FMAs compute fewer lanes than a register holds (AMD Zen
    4, ``-mcpu=znver4``: 8 of 16) and 5 to 8 rows fill more than half of those
    (:func:`fma_lanes_rows`), ``A @ W^T`` may run its vectors along A's rows (knob
    ``skinny.rows_in_lanes``): A copied transposed in rows of ``M``, one vector of ``M``
    lanes, W read in place (no pack of W, no buffer past A's copy), no lane sums;
    numpy's results with tails in N and K (5 and 8 rows; 6 and 7 with
    ``TECOMP_LONG_TESTS=1``); the default stays along
    ``k`` (``FMA_LANES_ROWS`` off) and takes the form with the flag on; never on Zen 5
    (its FMAs a register wide), below 5 rows or past 8, for ``A @ W`` or batched.
    Compiled for Zen 4 (not run), every FMA of the kernel is an 8-lane one (``ymm``)
    taking W's element as a broadcast operand."""
    import dataclasses

    from tecomp.strategy.cpu import skinny
    from tecomp.strategy.cpu.skinny import fma_lanes_rows

    if not LONG and M in (6, 7):
        pytest.skip("more row counts: set TECOMP_LONG_TESTS=1")
    target = "llvm -mcpu=znver4 -num-cores=2"
    zen4 = dataclasses.replace(tc.Target(target).machine, threads=2)
    zen5 = dataclasses.replace(tc.Target("llvm -mcpu=znver5 -num-cores=2").machine,
                               threads=2)
    assert (zen4.lanes, zen4.fma_lanes, zen4.masks) == (16, 8, True)
    assert [m for m in range(1, 17) if fma_lanes_rows(m, zen4)] == [5, 6, 7, 8]
    assert not [m for m in range(1, 17) if fma_lanes_rows(m, zen5)]
    assert skinny_plan(_plain(M, 83, 45, "wt")[2].op, zen4).rows_in_fma_lanes
    assert not skinny_plan(_plain(M, 83, 45, "wt")[2].op, zen5).rows_in_fma_lanes
    assert not skinny_plan(_plain(M, 83, 45, "w")[2].op, zen4).rows_in_fma_lanes
    A = tc.placeholder((2, M, 45), name="A")
    W = tc.placeholder((2, 83, 45), name="W")
    assert not skinny_plan(nn.batch_matmul(A, W, transpose_b=True).op,
                           zen4).rows_in_fma_lanes
    args = _plain(M, 83, 45, "wt")
    default = Knobs()
    ir = str(tc.lower(apply_rules(args, default, zen4), args))
    assert default.values["skinny.rows_in_lanes"] is False and "C.rf" in ir
    wknobs = Knobs()
    apply_rules(_plain(M, 83, 45, "w"), wknobs, zen4)
    assert "skinny.rows_in_lanes" not in wknobs.values
    for N, K in ((83, 45), (37, 301)):
        args = _plain(M, N, K, "wt")
        s = apply_rules(args, Knobs({"skinny.rows_in_lanes": True}), zen4)
        ir = _no_copy_of(s, args, args[1], limit=M * K + 1)
        assert "C.rf" not in ir and _prefetches_of(ir), ir
        assert re.search(rf"allocate A\.global: float32\[{M}, {K}\] \(global, "
                         rf"strides \[1, {M}\]\)", ir), ir
        assert f"vectorized (i.inner, 0, {M})" in ir, ir
        c, want = _run(s, args, "wt")
        np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-3,
                                   err_msg=f"M={M} N={N} K={K}")
    monkeypatch.setattr(skinny, "FMA_LANES_ROWS", True)
    args = _plain(M, 48, 1024, "wt")
    knobs = Knobs()
    s = apply_rules(args, knobs, zen4)
    assert knobs.values["skinny.rows_in_lanes"] is True
    assert "C.rf" not in str(tc.lower(s, args))
    asm = tc.build(s, args, target=target).get_source("asm")
    fmas = re.findall(r"vfmadd\d+ps\s+([^\n]*)", asm)
    assert len([f for f in fmas if "{1to8}" in f and "%ymm" in f]) >= 16 * 8, fmas
    assert not [f for f in fmas if "%zmm" in f or "%xmm" in f], fmas
    knobs = Knobs()
    apply_rules(args, knobs, zen5)
    assert "skinny.rows_in_lanes" not in knobs.values


def test_twelve_rows_are_one_masked_vector():
    """For an AVX-512 x86 CPU (``-mcpu=znver4``, compiled only), 12 rows along A's rows
    (without k steps in the lanes: ``skinny.k_lanes`` 0) are one vector of 16 lanes,
    the last 4 masked off: every FMA of the kernel a 512-bit one taking W's element as a
    broadcast operand (16 steps of the 8 rows of W of a tile, unrolled), none split into
    256- and 128-bit halves."""
    target = "llvm -mcpu=znver4"
    info = tc.Target(target).machine
    assert info.masks and info.lanes == 16
    args = _plain(12, 48, 1024, "wt")
    knobs = Knobs({"skinny.k_lanes": 0})
    s = apply_rules(args, knobs, info)
    assert knobs.values["skinny.rows_in_lanes"] is True
    asm = tc.build(s, args, target=target).get_source("asm")
    fmas = re.findall(r"vfmadd\d+ps\s+([^\n]*)", asm)
    assert len([f for f in fmas if "{1to16}" in f and "%zmm" in f]) >= 16 * 8, fmas
    assert not [f for f in fmas if "%ymm" in f or "%xmm" in f], fmas


KQ = [12, 9, 10, 11, 13, 14]


@pytest.mark.parametrize("M", KQ, ids=[f"M{m}" for m in KQ])
def test_rows_and_k_steps_in_lanes(M, monkeypatch):
    """Where vectors along A's rows would leave lanes idle (9 to 14 rows of 16 lanes)
    and the machine model's FMAs compute fewer lanes than a register holds (AMD Zen 4,
    ``-mcpu=znver4``: 8 of 16), ``A @ W^T`` runs each vector across A's rows and ``q``
    steps of ``k`` (:func:`rows_k_lanes`: 12 and 11 rows x 4, 9, 10, 13 and 14 rows x 8;
    knob ``skinny.k_lanes``, flag ``K_LANES_ROWS``): A copied as ``[M, K/q, q]`` stored
    ``K/q, M, q`` (padded past K), ``C.rf[i, kq, j]`` accumulated, W read in place (no
    pack of W, no buffer past A's copy) and prefetched; numpy's results with tails in N
    and K, on 2 threads; never by default on Zen 5 (its FMAs a register wide; the knob
    offers it), with the flag off, past 14 rows or for ``A @ W``.  Compiled for Zen 4
    (12 rows, not run): W's 4 elements read by ``vbroadcastf32x4`` and every FMA a
    512-bit one on registers (3 per 4 elements of W: 12 rows' FMAs exactly, where one
    vector along A's rows would leave 4 of its 16 lanes idle).
    12 rows by default; the others with ``TECOMP_LONG_TESTS=1``."""
    import dataclasses

    from tecomp.strategy.cpu import skinny
    from tecomp.strategy.cpu.skinny import rows_k_lanes

    if not LONG and M != 12:
        pytest.skip("more row counts: set TECOMP_LONG_TESTS=1")
    target = "llvm -mcpu=znver4 -num-cores=2"
    zen4 = dataclasses.replace(tc.Target(target).machine, threads=2)
    zen5 = dataclasses.replace(tc.Target("llvm -mcpu=znver5 -num-cores=2").machine,
                               threads=2)
    assert (zen4.lanes, zen4.fma_lanes, zen5.fma_lanes) == (16, 8, 16)
    assert {m: rows_k_lanes(m, zen4) for m in range(9, 17)} == {
        9: 8, 10: 8, 11: 4, 12: 4, 13: 8, 14: 8, 15: 0, 16: 0}
    q = rows_k_lanes(M, zen4)
    for info, want in ((zen4, q), (zen5, 0)):
        knobs = Knobs()
        apply_rules(_plain(M, 83, 45, "wt"), knobs, info)
        assert knobs.values["skinny.k_lanes"] == want
    knobs = Knobs()
    apply_rules(_plain(M, 83, 45, "w"), knobs, zen4)
    assert "skinny.k_lanes" not in knobs.values
    for N, K in ((83, 45), (37, 301)):
        args = _plain(M, N, K, "wt")
        s = apply_rules(args, Knobs(), zen4)
        kq = -(-K // q)
        ir = _no_copy_of(s, args, args[1], limit=M * kq * q + 1)
        assert re.search(rf"allocate A\.global: float32\[{M}, {kq}, {q}\] \(global, "
                         rf"strides \[{q}, {M * q}, 1\]\)", ir), ir
        assert "C.rf" in ir and _prefetches_of(ir), ir
        assert "vectorized (i.k.inner.fused.inner, 0, 16)" in ir, ir
        c, want = _run(s, args, "wt")
        np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-3,
                                   err_msg=f"M={M} N={N} K={K}")
        if K != 45:
            continue
        # (Zen 5 through the knob: one shape)
        s = apply_rules(args, Knobs({"skinny.k_lanes": q}), zen5)
        assert f"A.global: float32[{M}, {kq}, {q}]" in str(tc.lower(s, args))
        c, want = _run(s, args, "wt")
        np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-3)
    if M == 12:
        args = _plain(M, 48, 256, "wt")
        asm = tc.build(apply_rules(args, Knobs(), zen4), args,
                       target=target).get_source("asm")
        fmas = re.findall(r"vfmadd\d+ps\s+([^\n]*)", asm)
        # (a step: a line of each of the tile's 8 rows, 4 times 4 elements, 3 vectors)
        assert len([f for f in fmas if "%zmm" in f and "(" not in f]) >= 4 * 3 * 8, fmas
        assert not [f for f in fmas if "{1to16}" in f or "%ymm" in f or "%xmm" in f], fmas
        assert len(re.findall(r"vbroadcastf32x4\s+-?\d*\(", asm)) >= 4 * 8, asm
    monkeypatch.setattr(skinny, "K_LANES_ROWS", False)
    knobs = Knobs()
    s = apply_rules(_plain(M, 83, 45, "wt"), knobs, zen4)
    assert knobs.values["skinny.k_lanes"] == 0


EACH = [(m, lay) for lay in ("wt", "w") for m in range(1, SKINNY_MAX_ROWS + 1)]
EACH_DEFAULT = {(1, "wt"), (2, "wt"), (7, "wt"), (16, "wt"), (3, "w"), (8, "w")}


@pytest.mark.parametrize("M, layout", EACH, ids=[f"M{m}-{lay}" for m, lay in EACH])
def test_each_fma_loads_its_vector_of_w(M, layout):
    """``A @ W^T`` and ``A @ W`` with odd N and K where the machine model's FMAs take a
    memory operand (x86: ``memory_operands``): a tile of 2 rows of A or more (``A @ W``:
    holding all M rows) reads W at each FMA (``pragma load_each_use`` on W at the step loop; LLVM's loads of W's
    vectors volatile, none merged), one row once per vector as before; numpy's results,
    no copy of W; with the knob ``skinny.w_each_use`` off, or for an AArch64 model, no
    such pragma."""
    import dataclasses

    if not LONG and (M, layout) not in EACH_DEFAULT:
        pytest.skip("the full matrix: set TECOMP_LONG_TESTS=1")
    # (no column strips for A @ W, whatever the host: test_a_at_w_column_strips_knob)
    info = dataclasses.replace(cpu_model(), memory_operands=True, strip_prefetch_rows=0)
    args = _plain(M, 37, 203, layout)
    knobs = Knobs()
    s = apply_rules(args, knobs, info)
    lanes = knobs.values.get("skinny.rows_in_lanes", False)
    # (vectors along A's rows, W's elements broadcast: no such choice)
    assert ("skinny.w_each_use" in knobs.values) is not lanes
    if layout == "w":
        assert knobs.values["skinny.w_each_use"] is (knobs.values["skinny.rows"] == M)
    each = (not lanes and knobs.values["skinny.w_each_use"]
            and knobs.values["skinny.rows"] > 1)
    ir = _no_copy_of(s, args, args[1])
    assert ("pragma_load_each_use = 'W'" in ir) == each, ir
    assert ("load volatile" in tc.build(s, args).get_source("llvm")) == each
    c, want = _run(s, args, layout)
    np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-3)
    if each:
        s = apply_rules(args, Knobs({"skinny.w_each_use": False}), info)
        assert "load_each_use" not in str(tc.lower(s, args))
        c, want = _run(s, args, layout)
        np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-3)
    arm = tc.Target("llvm -mtriple=aarch64-linux-gnu").machine
    assert not arm.memory_operands
    assert "load_each_use" not in str(tc.lower(apply_rules(args, Knobs(), arm), args))


def test_each_fma_of_four_rows_reads_w_from_memory():
    """For an x86 CPU (``-mcpu=znver4``, compiled only), the 4 x 6 tile's FMAs each take
    their vector of W as a memory operand (``vfmadd231ps`` from memory, 24 a step),
    rather than 6 loads into registers that 4 FMAs each read (a vector register fewer
    per FMA in flight; 1 thread, Zen 4, under load: 6.7 ms against 7.8); with the knob
    off, no FMA reads memory."""
    target = "llvm -mcpu=znver4"
    info = tc.Target(target).machine
    assert info.memory_operands and info.lanes == 16
    args = _plain(4, 48, 1024, "wt")
    counts = []
    for knobs in (Knobs(), Knobs({"skinny.w_each_use": False})):
        s = apply_rules(args, knobs, info)
        asm = tc.build(s, args, target=target).get_source("asm")
        counts.append(len(re.findall(r"vfmadd\d+ps\s+-?\d*\(", asm)))
    assert counts[0] >= 24 and counts[1] == 0, counts
