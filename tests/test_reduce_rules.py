"""The auto-scheduler's rules for reductions that are not row reductions: column
reductions (over a first or middle axis: the innermost output axis vectorized, the
reduce axes outside the tile) and split reductions (to fewer values than threads, or
columns of too few tiles: the first reduce axis cut into parallel chunks by rfactor),
checked against numpy, odd extents and tails included; the machine model is this host's
with two threads, so the same rules apply on any CPU."""
import dataclasses
import re

import numpy as np
import pytest

import tecomp as tc
from helpers import softmax as softmax_computes, softmax_ref
from tecomp import nn
from tecomp.lower import schedule_ops, vectorize
from tecomp.nn import reduction
from tecomp.schedule.relations import reduce_in_order
from tecomp.strategy.cpu import apply_rules, cpu_model
from tecomp.strategy import rules
from tecomp.strategy.rules import Knobs
from tecomp.te.reduce import Reducer
from tecomp.testing.builds import BuildMemo

rng = np.random.default_rng(1552)
#: the kernels of this file's tests, each built once: many tests build the same argmax
#: (under two machine models that plan alike, or another test's case); a module shared
#: by tests that only call it
_build = BuildMemo().build


def info2():
    return dataclasses.replace(cpu_model("llvm"), threads=2)


def schedule(args):
    knobs = Knobs()
    return apply_rules(args, knobs, info2()), knobs


def data(shape, dtype, op):
    if dtype == "bool":
        return rng.random(shape) > (0.02 if op == "all" else 0.98)
    if dtype.startswith("int"):
        return rng.integers(-5, 6, shape).astype(dtype)
    if op == "prod":
        return (1 + 0.01 * rng.standard_normal(shape)).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def np_reduce(op, x, axis, keepdims):
    if op in ("argmax", "argmin"):
        if not isinstance(axis, tuple):
            return getattr(np, op)(x, axis=axis, keepdims=keepdims)
        rest = [d for d in range(x.ndim) if d not in axis]   # (the flat position)
        moved = np.transpose(x, rest + list(axis))
        return getattr(np, op)(moved.reshape(moved.shape[:len(rest)] + (-1,)), axis=-1)
    acc = x.astype("float64") if x.dtype.kind == "f" else x
    return getattr(np, op)(acc, axis=axis, keepdims=keepdims)


CASES = [
    # shape, op, axis, keepdims, dtype, the knob that says which rule applied
    ((3, 40, 6, 48), "sum", 1, False, "float32", "sum.columns"),
    ((3, 40, 6, 40), "max", 1, True, "float32", "max.columns"),      # a vector tail
    ((5, 7, 33), "mean", 0, False, "float32", "mean.sum.columns"),    # epilogue
    ((4, 9, 2, 64), "min", (0, 1), False, "float32", "min.columns"),
    ((3, 40, 6, 48), "sum", 1, False, "int32", "sum.columns"),
    ((3, 40, 6, 48), "sum", 1, False, "float16", "sum.acc.columns"),
    ((3, 40, 6, 48), "argmax", 1, False, "float32", "argmax.acc.columns"),
    ((3, 40, 6, 48), "argmin", 0, True, "float32", "argmin.acc.columns"),
    ((3, 40, 6, 64), "any", 1, False, "bool", "any.columns"),
    ((3, 40, 6, 64), "all", (0, 1), False, "bool", "all.columns"),
    ((1100, 20), "sum", 0, False, "float32", "sum.split"),            # too few tiles
    ((1100, 20), "argmax", 0, False, "float32", "argmax.acc.split"),
    ((4, 33, 50), "sum", None, False, "float32", "sum.split"),        # 0-d
    ((4, 33, 50), "prod", None, False, "float32", "prod.split"),
    ((4, 33, 50), "mean", None, True, "float32", "mean.sum.split"),
    ((3, 1030), "max", None, True, "float32", "max.split"),
    ((1030,), "sum", 0, False, "float32", "sum.split"),               # chunks with a tail
    ((2, 1030), "argmin", None, False, "float32", "argmin.acc.split"),
    ((2, 40, 30), "any", None, False, "bool", "any.split"),
    ((4, 8, 300), "argmax", -1, False, "float32", "argmax.acc.tuple_rows"),   # a lane tail
    ((6, 1000), "argmin", 1, True, "float32", "argmin.acc.tuple_rows"),
    ((3, 4, 6, 50), "argmax", (2, 3), False, "float32", "argmax.acc.tuple_rows"),
    ((4, 8, 300), "argmin", None, True, "float32", "argmin.acc.split"),   # pairs in lanes
    # planes of packed bytes, rows of bools and of half-width values
    ((6, 500), "max", 1, False, "float16", "max.rows_per_task"),
    ((6, 40, 256), "any", -1, False, "bool", "any.rows_per_task"),
    ((4, 6, 40, 64), "all", (2, 3), False, "bool", "all.plane"),
    ((2, 3, 5, 256), "any", (2, 3), True, "bool", "any.plane"),      # four byte vectors
]


@pytest.mark.parametrize("shape,op,axis,keepdims,dtype,knob", CASES)
def test_reduction_rules_against_numpy(shape, op, axis, keepdims, dtype, knob):
    X = tc.placeholder(shape, dtype, name="X")
    kw = {"dtype": "int64"} if op.startswith("arg") else {}
    Y = getattr(nn, op)(X, axis=axis, keepdims=keepdims, **kw)
    s, knobs = schedule([X, Y])
    assert knobs.values.get(knob, False) is not False, sorted(knobs.values)
    f = _build(s, [X, Y])
    x = data(shape, dtype, op)
    if op.startswith("arg"):   # ties: the first position wins
        x.flat[rng.integers(0, x.size, 3)] = x.max() if op == "argmax" else x.min()
    got = np.zeros(tuple(int(e.value) for e in Y.shape), Y.dtype)
    f(x, got)
    want = np_reduce(op, x, axis, keepdims)
    assert got.shape == want.shape
    if dtype == "float16":
        np.testing.assert_allclose(got.astype("float64"), want, rtol=2e-3, atol=2e-2)
    elif got.dtype.kind == "f":
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.sqrt(x.size))
    else:
        np.testing.assert_array_equal(got, want)


def test_column_reduction_streams_rows_into_a_tile():
    """A mean over a middle axis: the sum is computed per tile of the output (no
    full-size intermediate), the reduce axis outside the tile's vectorized rows."""
    X = tc.placeholder((4, 32, 16, 64), name="X")
    Y = nn.mean(X, axis=1)
    s, _ = schedule([X, Y])
    ir = str(tc.lower(s, [X, Y]))
    m = re.search(r"allocate mean\.sum: float32\[([\d, ]+)\]", ir)
    assert m, ir
    assert np.prod([int(d) for d in m.group(1).split(",")]) < 4 * 16 * 64, ir
    body = ir[ir.index("for (k1"):]
    assert "vectorized" in body and "X[" in body


def test_split_reduction_runs_chunks_in_parallel():
    """A 0-d sum: one vectorized partial per chunk, in parallel, then the partials."""
    X = tc.placeholder((8, 64, 32), name="X")
    Y = nn.sum(X)
    s, _ = schedule([X, Y])
    ir = str(tc.lower(s, [X, Y]))
    assert "parallel (k0.outer" in ir and "vectorized" in ir, ir


@pytest.mark.parametrize("op", ["argmax", "argmin"])
def test_row_argmax_in_vector_lanes_keeps_numpys_nan_and_ties(op):
    """Index and value pairs in vector lanes: the first NaN wins, else the first of
    equal extremes (or the last with ``select_last_index``), across lanes and chunks."""
    x = rng.standard_normal((5, 200)).astype("float32")
    x[0, [17, 150]] = np.nan
    x[1, [3, 99, 140]] = 50.0 if op == "argmax" else -50.0
    x[2, :] = 1.0
    x[3, 190] = np.inf if op == "argmax" else -np.inf
    for last in (False, True):
        X = tc.placeholder(x.shape, name="X")
        Y = getattr(nn, op)(X, axis=1, select_last_index=last)
        s, knobs = schedule([X, Y])
        assert knobs.values.get(f"{op}.tuple_rows") is True
        got = np.zeros(5, "int32")
        _build(s, [X, Y])(x, got)
        want = getattr(np, op)(x, axis=1)
        if last:   # numpy has no select_last_index: the reversed rows' first
            want = 199 - getattr(np, op)(x[:, ::-1], axis=1)
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("seed", range(3))
def test_random_knobs_of_the_reduction_rules_stay_correct(seed):
    """Any value of the new knobs (tile bytes, steps a pass with a tail, chunks, the
    rules on or off) gives the same results."""
    import random
    r = random.Random(seed)
    for shape, op, axis in (((3, 42, 6, 40), "sum", 1), ((1030, 24), "max", 0),
                            ((5, 37, 50), "mean", None), ((4, 9, 70), "argmax", -1)):
        X = tc.placeholder(shape, name="X")
        Y = getattr(nn, op)(X, axis=axis)
        s = apply_rules([X, Y], Knobs(rng=r), info2())
        x = data(shape, "float32", op)
        got = np.zeros(tuple(int(e.value) for e in Y.shape), Y.dtype)
        _build(s, [X, Y])(x, got)
        want = np_reduce(op, x, axis, False)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)


def test_column_reduction_inlines_an_elementwise_producer_read_once():
    """sum(exp(x), axis=1): each exp is read once, so it is computed in the reduction's
    loop (no full-size exp array); an exp that a second stage reads too (a softmax over
    channels) keeps the register block's per-task copy.  Both against numpy."""
    x = rng.standard_normal((3, 24, 8, 48)).astype("float32")
    X = tc.placeholder(x.shape, name="X")
    Y = nn.sum(nn.exp(X), axis=1)
    s, knobs = schedule([X, Y])
    assert knobs.values.get("sum.columns") is True
    assert "allocate exp" not in str(tc.lower(s, [X, Y]))
    got = np.zeros((3, 8, 48), "float32")
    _build(s, [X, Y])(x, got)
    np.testing.assert_allclose(got, np.exp(x.astype("float64")).sum(1), rtol=1e-5)
    E = nn.exp(X)
    S = nn.sum(E, axis=1, keepdims=True)
    P = tc.compute(x.shape, lambda n, c, h, w: E[n, c, h, w] / S[n, 0, h, w], name="P")
    s, knobs = schedule([X, P])
    assert "sum.columns" not in knobs.values
    got = np.zeros(x.shape, "float32")
    _build(s, [X, P])(x, got)
    e = np.exp(x.astype("float64"))
    np.testing.assert_allclose(got, e / e.sum(1, keepdims=True), rtol=1e-5)


@pytest.mark.parametrize("op", ["sum", "max", "argmax"])
def test_column_reduction_over_a_symbolic_axis(op):
    """A reduction over a symbolic first axis (``n`` rows of a batch) is a column
    reduction whose row count is known only at the call: one reduction step a pass
    (it raised a TypeError before; found by the ops fuzz family, seed 20572)."""
    n = tc.var("n")
    X = tc.placeholder((n, 8, 40), name="X")
    Y = getattr(nn, op)(X, axis=0, keepdims=True)
    f = _build(tc.auto_schedule([X, Y, n]), [X, Y, n])
    for rows in (1, 7):
        x = rng.standard_normal((rows, 8, 40)).astype("float32")
        got = np.zeros((1, 8, 40), Y.dtype)
        f(x, got, rows)
        want = getattr(np, op)(x, axis=0, keepdims=True)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


HORIZONTAL = [
    # shape, op, axis, keepdims, dtype: rows of bools and integers, whose last lanes are
    # reduced across one vector (the `reduce` plan), odd extents and vector tails
    ((6, 40, 256), "any", -1, False, "bool"),
    ((6, 40, 256), "all", 2, True, "bool"),
    ((5, 7, 301), "any", -1, True, "bool"),
    ((5, 7, 301), "all", -1, False, "bool"),
    ((9, 300), "max", 1, False, "int32"),
    ((9, 300), "min", -1, True, "int32"),
    ((9, 300), "sum", -1, False, "int32"),
    ((9, 130), "max", -1, False, "uint8"),
    ((9, 130), "min", -1, False, "uint8"),
    ((9, 130), "sum", -1, False, "int64"),
    # planes (several axes, the last contiguous): the output accumulates in a local
    ((4, 6, 40, 64), "all", (2, 3), False, "bool"),
    ((2, 3, 5, 256), "any", (-2, -1), True, "bool"),
    ((3, 5, 7, 48), "max", (2, 3), False, "int32"),
]


def _edge_data(shape, dtype, op):
    """Data whose answer hangs on one element per row, placed in a different lane (and
    in the tail) row by row: a reduction that dropped or repeated a lane fails."""
    x = data(shape, dtype, op)
    rows = x.reshape(-1, shape[-1])
    n = shape[-1]
    for r in range(rows.shape[0]):
        j = (r * 37 + 11) % n if r % 3 else n - 1
        if dtype == "bool":
            rows[r] = op == "all"
            if r % 2:
                rows[r, j] = op != "all"
        elif dtype == "uint8":
            rows[r] = rng.integers(100, 150, n)
            rows[r, j] = 255 if op == "max" else 1
        else:
            rows[r, j] = (1 << 20) if op == "max" else -(1 << 20) if op == "min" else 7
    return x


@pytest.mark.parametrize("shape,op,axis,keepdims,dtype", HORIZONTAL)
def test_row_reductions_exact_in_any_order_reduce_across_lanes(shape, op, axis, keepdims,
                                                               dtype):
    X = tc.placeholder(shape, dtype, name="X")
    Y = getattr(nn, op)(X, axis=axis, keepdims=keepdims)
    s, _ = schedule([X, Y])
    ir = str(tc.lower(s, [X, Y], phase="codegen"))
    assert re.search(r"vector_plan = reduce \d+ lanes \(" + {"any": "or", "all": "and"}.get(
        op, {"sum": "add"}.get(op, op)) + r"\)", ir), ir
    f = _build(s, [X, Y])
    x = _edge_data(shape, dtype, op)
    got = np.zeros(tuple(int(e.value) for e in Y.shape), Y.dtype)
    f(x, got)
    want = getattr(np, op)(x, axis=axis, keepdims=keepdims)
    np.testing.assert_array_equal(got, want.astype(got.dtype))


def test_float_row_sums_keep_their_order():
    """A float sum's last lanes are added in order (docs/numerics.md): no `reduce` plan."""
    X = tc.placeholder((9, 300), "float32", name="X")
    Y = nn.sum(X, axis=-1)
    s, _ = schedule([X, Y])
    ir = str(tc.lower(s, [X, Y], phase="codegen"))
    assert "vector_plan = reduce" not in ir and "vector_plan = widen" in ir, ir


@pytest.mark.parametrize("op", ["max", "min"])
@pytest.mark.parametrize("n", [2, 3, 5, 7, 64, 300])
def test_float_max_rows_reduce_their_lanes_as_a_tree(op, n):
    """A float max or min is exact in any order (NaN propagates): the last lanes of its
    row reduction are one vector reduced as a tree of halves (an odd lane out joined at
    the end), not folded to one vector and reduced in order; numpy's answers: a NaN in
    the first, the last or the middle lane, rows all of the identity's value, a row of
    one extreme, odd extents, keepdims."""
    x = rng.standard_normal((6, n)).astype("float32")
    x[0, -1] = np.nan
    x[1, 0] = np.nan
    x[2, :] = -np.inf if op == "max" else np.inf
    x[3, n // 2] = np.nan
    x[4, n // 2] = np.inf if op == "max" else -np.inf
    for keep in (False, True):
        X = tc.placeholder(x.shape, "float32", name="X")
        Y = getattr(nn, op)(X, axis=-1, keepdims=keep)
        if n < 16:   # (a row too short for the rules' partials: its own accumulator)
            s = tc.create_schedule(Y.op)
            acc = s.cache_write(Y, "local")
            s[acc].compute_at(s[Y], s[Y].op.axis[0])
        else:
            s, _ = schedule([X, Y])
        ir = str(tc.lower(s, [X, Y], phase="codegen"))
        assert re.search(rf"vector_plan = reduce \d+ lanes \({op}\)", ir), ir
        got = np.full((6, 1) if keep else (6,), 7, "float32")
        _build(s, [X, Y])(x, got)
        np.testing.assert_array_equal(got, getattr(np, op)(x, axis=-1, keepdims=keep))
    old = vectorize.FLOAT_MINMAX_REDUCTIONS
    vectorize.FLOAT_MINMAX_REDUCTIONS = False
    try:
        ir = str(tc.lower(s, [X, Y], phase="codegen"))
    finally:
        vectorize.FLOAT_MINMAX_REDUCTIONS = old
    assert "vector_plan = reduce" not in ir, ir


def test_reduce_plan_only_for_a_buffer_the_function_allocates():
    """A reduction written straight into an argument (no rule, no cache_write) stays a
    serial loop: another argument could alias it."""
    X = tc.placeholder((8, 64), "bool", name="X")
    Y = nn.any(X, axis=1)
    s = tc.create_schedule(Y.op)
    ir = str(tc.lower(s, [X, Y], phase="codegen"))
    assert "vector_plan = reduce" not in ir, ir
    x = rng.random((8, 64)) > 0.99
    got = np.zeros(8, "bool")
    _build(s, [X, Y])(x, got)
    np.testing.assert_array_equal(got, x.any(axis=1))


#: an argmax's index compared with another (a tie test), not with the identity's -1
INDEX_TEST = re.compile(r"\.v0(_\d+)?\[[^\]]*\] [<>] ")


def _arg_rows(op):
    """Rows of 300 whose answers hang on NaN, ties and infinities in different lanes."""
    x = rng.standard_normal((7, 300)).astype("float32")
    big = np.float32(50 if op == "argmax" else -50)
    x[0, [17, 150]] = np.nan            # the first NaN wins
    x[1, [3, 99, 140, 299]] = big       # ties: the first (or the last)
    x[2, :] = 1.0                       # all equal
    x[3, :] = -np.inf if op == "argmax" else np.inf   # all the identity's value
    x[4, 290] = np.inf if op == "argmax" else -np.inf  # in the tail
    x[5, [64, 65, 128]] = big           # ties in neighbouring lanes and steps
    x[6, 299] = np.nan                  # a NaN in the last element
    return x


@pytest.mark.parametrize("op", ["argmax", "argmin"])
@pytest.mark.parametrize("axis,keepdims", [(1, False), (-1, True), ((0, 1), False)])
def test_argmax_combines_elements_in_order_without_index_tests(op, axis, keepdims):
    """The stage that reads the elements visits them in order, so an argmax's ties need
    no index compare there (the ``in_order`` combine); numpy's answers, NaN first, ties,
    the last index with ``select_last_index``."""
    x = _arg_rows(op)
    for last in (False, True):
        X = tc.placeholder(x.shape, name="X")
        Y = getattr(nn, op)(X, axis=axis, keepdims=keepdims, select_last_index=last)
        s, _ = schedule([X, Y])
        ir = str(tc.lower(s, [X, Y]))
        data_stage = [ln for ln in ir.splitlines() if "= select(" in ln and "X[" in ln]
        assert data_stage and not any(INDEX_TEST.search(ln) for ln in data_stage), ir
        got = np.zeros(tuple(int(e.value) for e in Y.shape), "int32")
        _build(s, [X, Y])(x, got)
        flat = x.reshape(-1) if isinstance(axis, tuple) else x
        ax = None if isinstance(axis, tuple) else axis
        want = getattr(np, op)(flat, axis=ax, keepdims=keepdims)
        if last:   # numpy has no select_last_index: the reversed rows' first
            n = flat.shape[-1]
            want = n - 1 - getattr(np, op)(flat[..., ::-1], axis=ax, keepdims=keepdims)
            if ax is None:
                want = flat.size - 1 - getattr(np, op)(flat[::-1])
        np.testing.assert_array_equal(got, want)


#: an argmax's test that its running index is not the identity's -1
IDENTITY_TEST = re.compile(r"\.v0(_\d+)?\[[^\]]*\] (>= 0|< 0)\b")


def _data_stage(ir):
    """The lines of the stage that reads the elements: its updates and its start."""
    lines = ir.splitlines()
    return ([ln for ln in lines if "= select(" in ln and "X[" in ln],
            [ln.strip() for ln in lines if "X[" in ln and "= select(" not in ln])


@pytest.mark.parametrize("op", ["argmax", "argmin"])
@pytest.mark.parametrize("shape,axis,keepdims,dtype", [
    ((7, 300), 1, False, "int32"), ((7, 300), -1, True, "int64"), ((7, 256), -1, False,
                                                                    "int32"),
    ((300, 7), 0, False, "int64"), ((7, 300), (0, 1), False, "int32"),
    ((3, 4, 6, 50), (-2, -1), True, "int64"), ((5, 37), -1, False, "int32"),
    ((6, 1), -1, False, "int64"), ((1, 9), 0, True, "int32")])
def test_argmax_starts_at_its_first_element(op, shape, axis, keepdims, dtype):
    """The stage that reads the elements in order starts its accumulator at the first
    element (not the identity), so its combine drops the test that the running index is
    the identity's -1; numpy's answers (first NaN, ties, the last index with
    ``select_last_index``, rows all of the identity's value, odd extents and tails,
    extent 1, keepdims, negative axes, int64 positions), and the same as without the
    start (``SEED_SELECTIONS`` off)."""
    x = np.resize(_arg_rows(op), shape).astype("float32")
    if shape == (300, 7):
        x = np.ascontiguousarray(_arg_rows(op).T)
    for last in (False, True):
        X = tc.placeholder(shape, name="X")
        Y = getattr(nn, op)(X, axis=axis, keepdims=keepdims, dtype=dtype,
                            select_last_index=last)
        oshape = tuple(int(e.value) for e in Y.shape)
        outs = []
        for seed in (True, False):
            old = schedule_ops.SEED_SELECTIONS
            schedule_ops.SEED_SELECTIONS = seed
            try:
                s, _ = schedule([X, Y])
                ir = str(tc.lower(s, [X, Y]))
                f = _build(s, [X, Y])
            finally:
                schedule_ops.SEED_SELECTIONS = old
            updates, starts = _data_stage(ir)
            if seed and max(shape[d] for d in
                            (axis if isinstance(axis, tuple) else (axis,))) > 1:
                assert updates and not any(IDENTITY_TEST.search(ln) for ln in updates), ir
                assert any(ln.startswith(f"{op}") and ".v1[" in ln for ln in starts), ir
            elif not seed:
                assert any(IDENTITY_TEST.search(ln) for ln in updates), ir
            got = np.full(oshape, -7, dtype)
            f(x, got)
            outs.append(got)
        if isinstance(axis, tuple) and len(axis) == 2 and len(shape) == 4:
            x2 = x.reshape(shape[0], shape[1], -1)
            want = _arg_want(op, x2, 2, False, last).reshape(oshape) if not last else \
                (x2.shape[2] - 1 - getattr(np, op)(x2[..., ::-1], axis=2)).reshape(oshape)
        else:
            want = _arg_want(op, x, axis, keepdims, last)
        np.testing.assert_array_equal(outs[0], want)
        np.testing.assert_array_equal(outs[1], want)


@pytest.mark.parametrize("op", ["argmax", "argmin"])
def test_integer_argmax_starts_at_its_first_element(op):
    """Integer values: rows of the identity's value (the dtype's lowest, or highest),
    ties, odd extents; started at the first element, numpy's answers."""
    x = rng.integers(-3, 4, (5, 300)).astype("int32")
    x[0, :] = np.iinfo(np.int32).min if op == "argmax" else np.iinfo(np.int32).max
    x[1, [7, 150, 299]] = 9 if op == "argmax" else -9
    X = tc.placeholder(x.shape, "int32", name="X")
    Y = getattr(nn, op)(X, axis=-1, dtype="int64")
    s, _ = schedule([X, Y])
    updates, _ = _data_stage(str(tc.lower(s, [X, Y])))
    assert updates and not any(IDENTITY_TEST.search(ln) for ln in updates), updates
    got = np.full(5, -7, "int64")
    _build(s, [X, Y])(x, got)
    np.testing.assert_array_equal(got, getattr(np, op)(x, axis=-1))


def test_argmax_starts_at_the_identity_where_its_first_point_is_no_element():
    """A selection whose ``where=`` leaves out its first point (an argmax-like reducer
    over the columns from 3 on): its accumulator starts at the identity, its index
    tested; rows all -inf there answer 3, a NaN at 2 is not an element."""
    def wins(p, q):   # whether p = (index, value) is kept, p's elements before q's
        return (q[0] < 0) | ((p[0] >= 0) & ((p[1] >= q[1]) | (p[1] != p[1])))

    def combine(p, q):
        c = (q[0] < 0) | ((p[0] >= 0) & ((p[1] > q[1]) | (p[1] == q[1]) & (p[0] < q[0])))
        return tc.if_then_else(c, p[0], q[0]), tc.if_then_else(c, p[1], q[1])

    def in_order(p, q):
        c = wins(p, q)
        return tc.if_then_else(c, p[0], q[0]), tc.if_then_else(c, p[1], q[1])

    pick = Reducer("pick", combine, lambda ti, tv: (tc.const(-1, ti), tc.min_value(tv)),
                   fcombine_in_order=in_order)
    x = np.full((3, 9), -np.inf, "float32")
    x[:, 2] = np.nan
    x[1, 6] = 2.0
    X = tc.placeholder(x.shape, name="X")
    k = tc.reduce_axis((0, 9), name="k")
    idx, _ = tc.compute((3,), lambda i: pick((k.var, X[i, k]), axis=k, where=k >= 3),
                        name="argmax")
    s = tc.create_schedule(idx.op)
    ir = str(tc.lower(s, [X, idx]))
    updates, _ = _data_stage(ir)
    assert updates and all(IDENTITY_TEST.search(ln) for ln in updates), ir
    got = np.full(3, -7, "int32")
    _build(s, [X, idx])(x, got)
    np.testing.assert_array_equal(got, [3, 6, 3])
    # the same reducer without where=: started at its first element, tests dropped
    idx, _ = tc.compute((3,), lambda i: pick((k.var, X[i, k]), axis=k), name="argmax")
    s = tc.create_schedule(idx.op)
    updates, _ = _data_stage(str(tc.lower(s, [X, idx])))
    assert updates and not any(IDENTITY_TEST.search(ln) for ln in updates), updates
    got = np.full(3, -7, "int32")
    _build(s, [X, idx])(x, got)
    np.testing.assert_array_equal(got, [2, 2, 2])


def test_seeded_argmax_blends_its_index_without_branches():
    """The seeded stage's index update ``select(value test, acc index, position)`` no
    longer evaluates the index in its condition; the index accumulator is read where the
    condition reads the value accumulator (a buffer of the same shape), so the select is
    one blend, not branches on whether every lane keeps its index."""
    X = tc.placeholder((64, 256), name="X")
    Y = nn.argmax(X, axis=-1)
    s, _ = schedule([X, Y])
    ll = _build(s, [X, Y]).get_source("ll")
    assert "sel.all" not in ll and "sel.none" not in ll, ll


@pytest.mark.parametrize("k", [40, 256, 300, 1024])
def test_argmax_rows_take_four_vectors_a_step_only_over_long_rows(k):
    """An argmax along rows keeps four vectors of partial pairs only where its row has
    ``SELECTION_WIDE_STEPS`` steps of them (the tree over the lanes at the row's end
    costs a few steps), two where it has eight vectors, else one; by the model's lanes,
    so on any CPU; numpy's answers."""
    L = info2().lanes
    want = 4 * L if k >= 4 * L * rules.SELECTION_WIDE_STEPS else 2 * L if k >= 8 * L else L
    x = np.resize(_arg_rows("argmax"), (6, k)).astype("float32")
    X = tc.placeholder(x.shape, name="X")
    Y = nn.argmax(X, axis=-1)
    s, knobs = schedule([X, Y])
    assert knobs.values.get("argmax.tuple_rows") is True, knobs.values
    ir = str(tc.lower(s, [X, Y]))
    m = re.search(r"allocate argmax\.rf\.v0: int32\[(?:\d+, )*(\d+)\]", ir)
    assert m and int(m.group(1)) == want, ir
    got = np.zeros(6, "int32")
    _build(s, [X, Y])(x, got)
    np.testing.assert_array_equal(got, np.argmax(x, axis=-1))


def test_argmax_over_reordered_reduce_loops_keeps_the_index_tests():
    """Reduce loops out of their order (a user's reorder, then rfactor): the elements
    do not arrive in order, so every stage keeps the general combine; still numpy's
    first index among ties."""
    x = _arg_rows("argmax")
    X = tc.placeholder(x.shape, name="X")
    Y = nn.argmax(X, axis=(0, 1))
    s = tc.create_schedule(Y.op)
    k0, k1 = s[Y].op.reduce_axis
    s[Y].reorder(k1, k0)
    ir = str(tc.lower(s, [X, Y]))
    assert INDEX_TEST.search(ir), ir
    got = np.zeros((), "int32")
    _build(s, [X, Y])(x, got)
    assert got == np.argmax(x)
    s = tc.create_schedule(Y.op)
    k0, k1 = s[Y].op.reduce_axis
    k1o, k1i = s[Y].split(k1, factor=16)
    s[Y].reorder(k1o, k0, k1i)
    s.rfactor(Y, k1i)
    ir = str(tc.lower(s, [X, Y]))
    assert not any("X[" in ln and "= select(" in ln and not INDEX_TEST.search(ln)
                   for ln in ir.splitlines()), ir
    got = np.zeros((), "int32")
    _build(s, [X, Y])(x, got)
    assert got == np.argmax(x)


def _arg_want(op, x, axis, keepdims, last):
    """numpy's answer for ``_arg_rows``-like ``x`` (``axis`` a tuple: all of them)."""
    flat = x.reshape(-1) if isinstance(axis, tuple) else x
    ax = None if isinstance(axis, tuple) else axis
    if not last:
        return getattr(np, op)(flat, axis=ax, keepdims=keepdims)
    # numpy has no select_last_index: the reversed rows' first
    if ax is None:
        return flat.size - 1 - getattr(np, op)(flat[::-1])
    return flat.shape[ax] - 1 - getattr(np, op)(np.flip(flat, ax), axis=ax, keepdims=keepdims)


@pytest.mark.parametrize("op", ["argmax", "argmin"])
@pytest.mark.parametrize("axis,keepdims", [(1, False), (-1, True), ((0, 1), False),
                                           (0, True)])
def test_int64_argmax_counts_in_int32_where_the_positions_fit(op, axis, keepdims):
    """``dtype="int64"`` over extents int32 holds: the compute ``<name>.acc`` counts in
    int32 and ``<name>`` widens it; numpy's answers (first NaN, ties, rows all of the
    identity's value, the last index), as int64."""
    x = _arg_rows(op)
    for last in (False, True):
        X = tc.placeholder(x.shape, name="X")
        Y = getattr(nn, op)(X, axis=axis, keepdims=keepdims, dtype="int64",
                            select_last_index=last)
        acc = Y.op.input_tensors[0]
        assert (Y.op.name, Y.dtype, acc.op.name, acc.dtype) == (op, "int64", f"{op}.acc",
                                                                "int32")
        s, _ = schedule([X, Y])
        got = np.full(tuple(int(e.value) for e in Y.shape), -7, "int64")
        _build(s, [X, Y])(x, got)
        np.testing.assert_array_equal(got, _arg_want(op, x, axis, keepdims, last))


def test_int64_argmax_over_columns_widens_each_tile():
    """A column argmax counted in int32: the widening stage is the column reduction's
    epilogue (the reduction at its tiles, its pairs a tile's worth, not the output's)."""
    X = tc.placeholder((3, 40, 6, 48), name="X")
    Y = nn.argmax(X, axis=1, dtype="int64")
    s, knobs = schedule([X, Y])
    assert knobs.values.get("argmax.acc.columns") is True, knobs.values
    ir = str(tc.lower(s, [X, Y]))
    m = re.search(r"allocate argmax\.acc\.v0: int32\[([\d, ]+)\]", ir)
    assert m and np.prod([int(d) for d in m.group(1).split(",")]) < 3 * 6 * 48, ir
    assert ir.index("parallel") < m.start(), ir
    x = _arg_rows("argmax")[:6, :240].reshape(3, 40, 6, 2).repeat(24, axis=3)
    got = np.zeros((3, 6, 48), "int64")
    _build(s, [X, Y])(x, got)
    np.testing.assert_array_equal(got, np.argmax(x, axis=1))


def test_int64_argmax_keeps_int64_where_int32_cannot_hold_the_positions():
    """The int32 count only where every flat position fits: 2**31 - 1 elements do, 2**31
    do not; one symbolic int32 axis does, an int64 one or two int32 ones do not."""
    def inner(shape, axis):
        Y = nn.argmax(tc.placeholder(shape, name="X"), axis=axis, dtype="int64")
        assert Y.dtype == "int64"
        first = Y.op.input_tensors[0].op
        body = first if first.name == "argmax.acc" else Y.op
        return body.name, body.output(0).dtype

    assert inner((3, 2 ** 31 - 1), 1) == ("argmax.acc", "int32")
    assert inner((2 ** 8, 2 ** 15 - 1, 2 ** 8), (1, 0, 2)) == ("argmax.acc", "int32")
    assert inner((2 ** 16, 2 ** 15), None) == ("argmax", "int64")
    assert inner((2, 2 ** 31), 1) == ("argmax", "int64")
    n, m = tc.var("n"), tc.var("m")
    assert inner((3, n), 1) == ("argmax.acc", "int32")
    assert inner((3, tc.var("l", "int64")), 1) == ("argmax", "int64")
    assert inner((n, m), None) == ("argmax", "int64")
    # a symbolic int32 axis, run: int64 out
    X = tc.placeholder((3, n), name="X")
    Y = nn.argmin(X, axis=-1, dtype="int64")
    s, _ = schedule([X, Y])
    f = _build(s, [X, Y])
    x = _arg_rows("argmin")[:3]
    got = np.zeros(3, "int64")
    f(x, got)
    np.testing.assert_array_equal(got, np.argmin(x, axis=-1))


def test_reduce_in_order_follows_splits_fuses_and_reorders():
    A = tc.placeholder((8, 6, 10), name="A")
    k1 = tc.reduce_axis((0, 6), name="k1")
    k2 = tc.reduce_axis((0, 10), name="k2")
    B = tc.compute((8,), lambda i: tc.sum(A[i, k1, k2], axis=(k1, k2)), name="B")

    def check(edit):
        s = tc.create_schedule(B.op)
        edit(s[B], *s[B].op.reduce_axis)
        st = s[B]
        return reduce_in_order(st.op, st.relations, st.leaf_iter_vars)

    assert check(lambda st, a, b: None)
    assert check(lambda st, a, b: st.split(b, factor=3))
    assert check(lambda st, a, b: st.fuse(a, b))
    assert check(lambda st, a, b: st.reorder(a, st.op.axis[0], b))   # (data axes between)
    assert not check(lambda st, a, b: st.reorder(b, a))

    def split_swap(st, a, b):
        bo, bi = st.split(b, factor=3)
        st.reorder(a, bi, bo)
    assert not check(split_swap)


SELECT_NOTE = "reduced across them (select)"


@pytest.mark.parametrize("op", ["argmax", "argmin"])
@pytest.mark.parametrize("axis,keepdims,dtype", [(1, False, "int32"), (-1, True, "int64"),
                                                 (-1, False, "int64")])
def test_row_argmax_combines_its_partial_pairs_across_lanes(op, axis, keepdims, dtype):
    """The auto-scheduled row argmax: the partial pairs of its vectors combined across the
    lanes by the code generator (a ``reduce`` plan of selections: the output itself an
    argument, int32, or the int32 count of an int64 result), numpy's answers (first
    NaN, first of ties, all the identity's value, rows of 300: lanes of 64 with a
    tail; the last index)."""
    x = _arg_rows(op)
    for last in (False, True):
        X = tc.placeholder(x.shape, name="X")
        Y = getattr(nn, op)(X, axis=axis, keepdims=keepdims, dtype=dtype,
                            select_last_index=last)
        s, knobs = schedule([X, Y])
        assert any(v is True for k, v in knobs.values.items() if k.endswith("tuple_rows"))
        f = _build(s, [X, Y])
        assert any(SELECT_NOTE in n for n in f.vectorize_notes), f.vectorize_notes
        got = np.full(tuple(int(e.value) for e in Y.shape), -7, dtype)
        f(x, got)
        np.testing.assert_array_equal(got, _arg_want(op, x, axis, keepdims, last))


@pytest.mark.parametrize("shape", [(16, 16, 300), (7, 300), (2, 3, 65)])
def test_int64_row_argmax_widens_at_its_blocks_of_rows(shape):
    """An int64 row argmax counted in int32: the widening is the tuple row reduction's
    epilogue, one parallel loop over blocks of a vector of rows (256 rows: blocks of
    the lane count, widened as one vector; 7 or 6 rows: one at a time; rows of 65: one
    vector of pairs and a tail), the pairs reduced at each block; numpy's answers."""
    x = rng.standard_normal(shape).astype("float32")
    x.reshape(-1, shape[-1])[::3, 1::2] = 2.0    # ties
    x.reshape(-1, shape[-1])[1::4, -1] = np.nan
    X = tc.placeholder(x.shape, name="X")
    Y = nn.argmax(X, axis=-1, dtype="int64")
    s, knobs = schedule([X, Y])
    assert knobs.values.get("fuse_epilogue.argmax") is True, knobs.values
    ir = str(tc.lower(s, [X, Y]))
    assert ir.count("parallel (") == 1, ir
    lines = ir.splitlines()
    widen = next(i for i, ln in enumerate(lines) if ln.strip().startswith("argmax["))
    assert ("vectorized (" in lines[widen - 1]) == (x.size // x.shape[-1] >= 256), ir
    got = np.full(tuple(int(e.value) for e in Y.shape), -7, "int64")
    _build(s, [X, Y])(x, got)
    np.testing.assert_array_equal(got, np.argmax(x, axis=-1))


@pytest.mark.parametrize("n", [2, 3, 12, 64, 67, 200])
def test_serial_argmax_loop_in_order_across_lanes(n):
    """An unscheduled int64 argmax (its count in an int32 local) visits each row in order:
    its loop of ``n`` combines is planned as blocks of a power of two lanes (64 + 2 + 1 of
    67), each a tree of neighbouring lanes, the in-order combine (no index test) kept in
    order: the first of ties, the first NaN, rows all -inf."""
    x = rng.standard_normal((8, n)).astype("float32")
    x[0, :] = -np.inf
    x[1, :] = 3.0
    x[2, [n // 2, n - 1]] = np.nan
    x[3, ::2] = 9.0
    x[4, n - 1] = 9.0
    x[5, [n - 1, n // 2, n // 4]] = 9.0, 9.0, -9.0   # ties in lanes of different halves
    x[6, :] = rng.integers(0, 3, n)                  # ties anywhere
    x[7, [n // 4, n // 2]] = np.nan, 9.0
    for op in ("argmax", "argmin"):
        X = tc.placeholder(x.shape, name="X")
        Y = getattr(nn, op)(X, axis=-1, dtype="int64")
        s = tc.create_schedule(Y.op)
        f = _build(s, [X, Y])
        assert any(SELECT_NOTE in m for m in f.vectorize_notes), f.vectorize_notes
        got = np.full(8, -7, "int64")
        f(x, got)
        np.testing.assert_array_equal(got, getattr(np, op)(x, axis=-1))


def test_int64_argmax_counted_in_int64_combines_across_lanes(monkeypatch):
    """Positions past int32 are counted in int64: the lanes' tree combines int64 indices
    (here forced on 300 columns; an argmax over rows of 2**31 elements builds the same
    plan)."""
    monkeypatch.setattr(reduction, "INT32_INDEX", False)
    x = _arg_rows("argmax")
    X = tc.placeholder(x.shape, name="X")
    Y = nn.argmax(X, axis=-1, dtype="int64")
    assert Y.op.name == "argmax" and Y.op.input_tensors == [X]   # (no int32 count)
    s, _ = schedule([X, Y])
    f = _build(s, [X, Y])
    assert any(SELECT_NOTE in n for n in f.vectorize_notes), f.vectorize_notes
    got = np.zeros(7, "int64")
    f(x, got)
    np.testing.assert_array_equal(got, np.argmax(x, axis=-1))
    X = tc.placeholder((2, 2 ** 31), name="X")
    Y = nn.argmax(X, axis=-1, dtype="int64")
    s, _ = schedule([X, Y])
    f = _build(s, [X, Y])
    assert any(SELECT_NOTE in n for n in f.vectorize_notes), f.vectorize_notes


def test_tuple_reductions_that_compute_are_not_combined_across_lanes(monkeypatch):
    """A tuple reducer that computes (a sum and a count) is not a selection: its loops stay
    serial and in order (a float sum keeps its order), and the tuple row rule keeps its
    steps; with the switch off, an argmax's are not planned either."""
    def plus(a, b):
        return a[0] + b[0], a[1] + b[1]

    red = tc.comm_reducer(plus, lambda t0, t1: (tc.const(0, t0), tc.const(0, t1)),
                          name="sum_count")
    X = tc.placeholder((4, 64), name="X")
    k = tc.reduce_axis((0, 64), name="k")
    S, C = tc.compute((4,), lambda i: red((X[i, k], X[i, k] * 0 + 1), axis=k), name="S")
    assert not vectorize.selection_reducer(S.op.bodies[0].combiner)
    assert not vectorize.selection_reducer(nn.sum(X, axis=-1).op.body.combiner)
    f = _build(tc.create_schedule(S.op), [X, S, C])
    assert not any("(select)" in n for n in f.vectorize_notes), f.vectorize_notes
    x = rng.standard_normal((4, 64)).astype("float32")
    s_, c_ = np.zeros(4, "float32"), np.zeros(4, "float32")
    f(x, s_, c_)
    np.testing.assert_allclose(s_, x.sum(axis=1), rtol=1e-5)
    np.testing.assert_array_equal(c_, 64)
    Y = nn.argmax(tc.placeholder((4, 300), name="X"), axis=-1, dtype="int64")
    assert vectorize.selection_reducer(Y.op.input_tensors[0].op.bodies[0].combiner)
    monkeypatch.setattr(vectorize, "SELECTION_REDUCTIONS", False)
    assert not vectorize.selection_reducer(Y.op.input_tensors[0].op.bodies[0].combiner)
    X = Y.op.input_tensors[0].op.input_tensors[0]
    s, _ = schedule([X, Y])
    assert str(tc.lower(s, [X, Y])).count("allocate argmax.acc.rf") == 6
    f = _build(s, [X, Y])
    assert not any("(select)" in n for n in f.vectorize_notes), f.vectorize_notes


@pytest.mark.parametrize("op,dtype,c,steps,l2", [
    ("all", "bool", 24, 8, 0), ("any", "bool", 12, 4, 0), ("max", "int8", 16, 8, 0),
    ("sum", "float32", 16, 4, 0), ("any", "bool", 10, 1, 0), ("argmax", "float32", 16, 8, 0),
    ("argmin", "float32", 12, 4, 0), ("all", "bool", 48, 16, 4096), ("max", "int8", 24, 8, 4096),
    ("any", "bool", 32, 8, 1 << 20)])
def test_column_reductions_of_bytes_take_eight_steps_a_pass(op, dtype, c, steps, l2,
                                                            monkeypatch):
    """A column reduction of one-byte values (packed lanes) reads eight rows a pass where
    they divide the reduce axis (else four, else one), sixteen where its input is more
    than the L2 caches hold (``l2``: a model with that L2 and one thread) and they divide
    it, where ``COLUMN_STEPS_PACKED_PAST_L2`` asks for sixteen (not by default: 8); wider
    values four, but a reduction of several values at once (an argmax's index and value:
    two accumulators) eight; numpy's answers, keepdims and a negative axis."""
    if l2:
        monkeypatch.setattr(rules, "COLUMN_STEPS_PACKED_PAST_L2", 16)
    x = data((3, c, 4, 80), dtype, op)
    X = tc.placeholder(x.shape, dtype=dtype, name="X")
    Y = getattr(nn, op)(X, axis=-3, keepdims=True)
    if l2:
        knobs = Knobs()
        s = apply_rules([X, Y], knobs, dataclasses.replace(
            cpu_model("llvm -mcpu=znver4"), threads=1, l2_bytes=l2))
    else:
        s, knobs = schedule([X, Y])
    name = next(k for k in knobs.values if k.endswith(".columns"))
    assert knobs.values[name] is True, knobs.values
    assert knobs.values[name.replace(".columns", ".steps")] == steps, knobs.values
    got = np.zeros(tuple(int(e.value) for e in Y.shape), Y.dtype)
    _build(s, [X, Y])(x, got)
    want = np_reduce(op, x, -3, True)
    if dtype == "float32":
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    else:
        np.testing.assert_array_equal(got, want)


def _block_rows(op, rows, k):
    """``rows`` rows of ``k`` from :func:`_arg_rows`'s seven kinds (first NaN, ties, all
    equal, all the identity's value, an extreme in the tail, neighbouring ties, a NaN
    last), each rolled by its own amount: the rows of one block differ in where their
    answers lie."""
    base = _arg_rows(op)
    return np.stack([np.roll(np.resize(base[r % 7], k), (5 * r) % k)
                     for r in range(rows)]).astype("float32")


@pytest.mark.parametrize("op", ["argmax", "argmin"])
@pytest.mark.parametrize("shape,dtype,keepdims", [
    ((2, 64, 256), "int64", False), ((2, 64, 256), "int32", True), ((2, 64, 1024), "int64", False),
    ((12, 40), "int32", False), ((3, 5, 300), "int64", True), ((6, 1), "int32", False),
    ((7, 256), "int64", False)])
def test_argmax_rows_in_blocks_of_rows(op, shape, dtype, keepdims):
    """An argmax along rows takes ``SELECTION_ROW_BLOCK`` rows a step (fewer where their
    partial vectors would fill over half the model's vector registers; one where the
    block does not divide the last output axis, as with keepdims): its partials' buffer holds the block's
    rows, unrolled; numpy's answers (first NaN, ties, the last index, rows all of the
    identity's value, odd extents, extent 1, keepdims, the negative axis), the same with
    a row a step (knob ``row_block`` 1)."""
    info = info2()
    L, k = info.lanes, shape[-1]
    F = 4 * L if k >= 4 * L * rules.SELECTION_WIDE_STEPS else 2 * L if k >= 8 * L else L
    want = rules.SELECTION_ROW_BLOCK
    while want > 1 and want * (F // L) * 2 > info.vregs // 2:
        want //= 2
    rows = int(np.prod(shape[:-1]))
    x = _block_rows(op, rows, k).reshape(shape)
    name = f"{op}.acc" if dtype == "int64" else op
    X = tc.placeholder(shape, name="X")
    for last in (False, True):
        Y = getattr(nn, op)(X, axis=-1, keepdims=keepdims, dtype=dtype,
                            select_last_index=last)
        oshape = tuple(int(e.value) for e in Y.shape)
        want_x = _arg_want(op, x, -1, keepdims, last)
        for block in (None, 1):
            knobs = Knobs({} if block is None else {f"{name}.row_block": 1})
            s = apply_rules([X, Y], knobs, info)
            ir = str(tc.lower(s, [X, Y]))
            got = np.full(oshape, -7, dtype)
            _build(s, [X, Y])(x, got)
            np.testing.assert_array_equal(got, want_x)
            if block is None and k > 1:
                b = want if oshape[-1] % want == 0 else 1
                m = re.search(rf"allocate {re.escape(name)}\.rf\.v0: int32\[(?:\d+, )*(\d+), "
                              rf"(\d+)\]", ir)
                assert m and int(m.group(1)) == b and int(m.group(2)) == F, ir


@pytest.mark.parametrize("op,shape,dtype,hint", [
    ("argmax", ("n", 64), "int32", 64), ("argmin", ("n", 33), "int32", 4),
    ("argmax", ("n", 256), "int64", 4096), ("argmax", ("n", 8, 256), "int32", 8)])
def test_selection_rows_of_a_symbolic_batch_build(op, shape, dtype, hint):
    """An argmax along rows over a symbolic batch, the shapes' hint a multiple of the row
    block: the rules took the hint for the rows' extent, blocked them and unrolled the
    partials' rows at the block, whose extent (``min(n - i*4, 4)``) is not a constant --
    tc.build refused the rules' own schedule with a ScheduleError.  The block is taken
    only where the rows' extents are constants; numpy's answers for 0, 1, 5 and 37
    rows."""
    n = tc.var("n")
    X = tc.placeholder(tuple(n if e == "n" else e for e in shape), name="X")
    Y = getattr(nn, op)(X, axis=-1, dtype=dtype)
    f = _build(apply_rules([X, Y], Knobs(), info2(), shapes={"n": hint}), [X, Y])
    for m in (0, 1, 5, 37):
        x = rng.standard_normal((m,) + shape[1:]).astype("float32")
        x[..., 3] = 10.0 if op == "argmax" else -10.0     # (ties: the first index)
        x[..., 9] = x[..., 3]
        got = np.full(x.shape[:-1], -7, dtype)
        f(x, got)
        np.testing.assert_array_equal(got, getattr(np, op)(x, axis=-1))


def _prefetching(ahead=4096, **kw):
    """This host's model on two threads, with a small L2 (so that small inputs stream
    past it) and the rows ahead prefetched ``ahead`` bytes (CpuModel.row_prefetch_bytes;
    a selection's too, unless ``selection_prefetch_bytes`` is given: not the host's)."""
    kw.setdefault("selection_prefetch_bytes", 0)
    return dataclasses.replace(info2(), row_prefetch_bytes=ahead, l2_bytes=16 << 10, **kw)


@pytest.mark.parametrize("op,rows,k,ahead,task", [
    ("sum", 48, 256, 4, 16), ("max", 120, 256, 4, 16), ("mean", 48, 250, 4, 16),
    ("prod", 48, 100, 4, 16), ("prod", 120, 100, 8, 64), ("min", 120, 40, 16, 64),
    ("sum", 48, 700, 1, 16)])
def test_short_row_reductions_prefetch_the_rows_ahead(op, rows, k, ahead, task):
    """A reduction along rows shorter than the model's ``row_prefetch_bytes``, its input
    past the threads' L2 caches, prefetches the rows that far ahead (a power of two of
    whole rows) in its loop over the row, the same columns of a later row of its task
    (clamped to the task's last row: a quarter of the task at most, tasks of 64 rows
    where it asks for more than 4 and there are rows enough); the results are numpy's
    (odd row lengths, tails of vectors)."""
    X = tc.placeholder((5, rows, k), "float32", name="X")
    Y = getattr(nn, op)(X, axis=-1)
    knobs = Knobs()
    s = apply_rules([X, Y], knobs, _prefetching())
    name = "mean.sum" if op == "mean" else op
    assert knobs.values[f"{name}.prefetch_rows"] == ahead
    assert knobs.values[f"{name}.rows_per_task"] == task
    ir = str(tc.lower(s, [X, Y]))
    assert re.search(rf"prefetch X\[.*min\(.*\+ {ahead}, {task - 1}\)", ir), ir
    x = data((5, rows, k), "float32", op)
    got = np.zeros((5, rows), "float32")
    _build(s, [X, Y])(x, got)
    np.testing.assert_allclose(got, np_reduce(op, x, -1, False), rtol=1e-5, atol=1e-4)


def _selection_rows(op, rows, k, dtype, ramp=False):
    """An argmax/argmin (``op``) over the last axis of ``5 x rows x k`` floats with a NaN
    first in one row and last in another, a row all equal (ties) and, with ``ramp``, the
    row holding the last NaN rising before it: ``(x, X, Y, the selection's stage name,
    numpy's answer)``."""
    x = _block_rows(op, 5 * rows, k).reshape(5, rows, k)
    if ramp:
        x[1, 1, :] = np.arange(k)
    x[0, 0, 0] = x[1, 1, -1] = np.nan
    x[2, 2, :] = 3.0
    X = tc.placeholder(x.shape, "float32", name="X")
    Y = getattr(nn, op)(X, axis=-1, dtype=dtype)
    name = f"{op}.acc" if dtype == "int64" else op
    want = np.argmax(x, axis=-1) if op == "argmax" else np.argmin(x, axis=-1)
    return x, X, Y, name, want


@pytest.mark.parametrize("op", ["argmax", "argmin"])
@pytest.mark.parametrize("rows,k,dtype,ahead", [
    (64, 256, "int64", 4), (48, 256, "int32", 4), (40, 100, "int64", 8),
    (64, 37, "int32", 16), (24, 1000, "int64", 1), (16, 3000, "int32", 0)])
def test_row_argmax_prefetches_the_rows_ahead(op, rows, k, dtype, ahead):
    """An argmax along rows shorter than the model's ``row_prefetch_bytes``, its input
    past the threads' L2 caches, prefetches the rows that far ahead in its first
    partials' loop over the row (knob ``prefetch_rows``; rows as long as the distance:
    none), along the loop of tasks (an int64 argmax's: a task ahead, a block of a
    vector of rows); numpy's answers with and without it: a NaN first, a NaN last, the first of
    ties, rows all equal, rows all of the identity's value, odd row lengths (tails of
    vectors)."""
    x, X, Y, name, want = _selection_rows(op, rows, k, dtype, ramp=True)
    assert want[0, 0] == 0 and want[1, 1] == k - 1 and want[2, 2] == 0
    for knob in (None, 0):
        knobs = Knobs({} if knob is None else {f"{name}.prefetch_rows": knob})
        s = apply_rules([X, Y], knobs, _prefetching())
        assert knobs.values[f"{name}.tuple_rows"] is True, knobs.values
        assert knobs.values[f"{name}.prefetch_rows"] == (ahead if knob is None else 0)
        ir = str(tc.lower(s, [X, Y]))
        assert ("prefetch X[" in ir) == bool(knobs.values[f"{name}.prefetch_rows"]), ir
        if "prefetch X[" in ir:
            # along the parallel loop of tasks (a task's last rows prefetch the next's),
            # not clamped inside a task
            task, n = re.search(r"parallel \((\S+), 0, (\d+)\)", ir).groups()
            assert re.search(rf"prefetch X\[min\({re.escape(task)} \+ \d+, {int(n) - 1}\)",
                             ir), ir
        got = np.full((5, rows), -7, dtype)
        _build(s, [X, Y])(x, got)
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("op", ["argmax", "argmin"])
@pytest.mark.parametrize("rows,k,dtype,ahead", [
    (64, 256, "int64", 4), (48, 256, "int32", 4), (64, 37, "int32", 16),
    (24, 1000, "int64", 1), (16, 3000, "int32", 0)])
def test_selections_prefetch_their_own_distance(op, rows, k, dtype, ahead):
    """A model with ``selection_prefetch_bytes`` (a CPU whose row sums need no prefetch,
    ``row_prefetch_bytes`` 0, but whose argmax does: Zen 5's table entry) prefetches an
    argmax's rows that far ahead and a sum's not at all; one with both distances gives
    the argmax its own.  numpy's answers: a NaN first, a NaN last, ties, odd rows."""
    x, X, Y, name, want = _selection_rows(op, rows, k, dtype)
    for model in (_prefetching(0, selection_prefetch_bytes=4096),
                  _prefetching(256, selection_prefetch_bytes=4096)):
        knobs = Knobs()
        s = apply_rules([X, Y], knobs, model)
        assert knobs.values[f"{name}.prefetch_rows"] == ahead, knobs.values
        assert ("prefetch X[" in str(tc.lower(s, [X, Y]))) == bool(ahead)
        got = np.full((5, rows), -7, dtype)
        _build(s, [X, Y])(x, got)
        np.testing.assert_array_equal(got, want)
    # keepdims: the same rows, an axis of extent 1 kept
    K = getattr(nn, op)(X, axis=-1, dtype=dtype, keepdims=True)
    knobs = Knobs()
    s = apply_rules([X, K], knobs, _prefetching(0, selection_prefetch_bytes=4096))
    assert knobs.values[f"{name}.prefetch_rows"] == ahead, knobs.values
    got = np.full((5, rows, 1), -7, dtype)
    _build(s, [X, K])(x, got)
    np.testing.assert_array_equal(got, want[..., None])
    S = nn.sum(X, axis=-1)
    knobs = Knobs()
    s = apply_rules([X, S], knobs, _prefetching(0, selection_prefetch_bytes=4096))
    assert knobs.values["sum.prefetch_rows"] == 0
    assert "prefetch" not in str(tc.lower(s, [X, S]))


def test_selection_prefetch_distance_of_named_cpus():
    """Zen 5's table entry prefetches a selection's rows 4 KiB ahead and a row sum's
    not at all; a model without the entry takes ``row_prefetch_bytes`` for both."""
    from tecomp.strategy.rows import row_prefetch_rows
    z5 = cpu_model("llvm -mcpu=znver5")
    assert (z5.row_prefetch_bytes, z5.selection_prefetch_bytes) == (0, 4096)
    big = 1 << 30
    assert row_prefetch_rows(z5, 1024, big, selection=True) == 4
    assert row_prefetch_rows(z5, 1024, big) == 0
    for target in ("llvm -mcpu=znver4", "llvm -mcpu=sapphirerapids", "llvm -mcpu=haswell"):
        assert cpu_model(target).selection_prefetch_bytes == 0
    m = _prefetching(2048)
    assert row_prefetch_rows(m, 1024, big, selection=True) == 2 == \
        row_prefetch_rows(m, 1024, big)


def test_row_argmax_prefetches_only_where_the_model_asks():
    """A model that asks for no prefetch (a named target), or an input within the
    threads' L2 caches, or an argmax over several axes: no prefetch, the knob 0."""
    info = dataclasses.replace(cpu_model("llvm -mcpu=sapphirerapids"), threads=2)
    for model, shape, axis in [(info, (5, 48, 256), -1), (_prefetching(), (2, 8, 256), -1),
                               (_prefetching(), (40, 16, 64), (1, 2))]:
        X = tc.placeholder(shape, "float32", name="X")
        Y = nn.argmax(X, axis=axis)
        knobs = Knobs()
        s = apply_rules([X, Y], knobs, model)
        assert knobs.values.get("argmax.prefetch_rows", 0) == 0, knobs.values
        assert "prefetch" not in str(tc.lower(s, [X, Y]))


@pytest.mark.parametrize("target", ["llvm -mcpu=znver4", "llvm -mcpu=znver5",
                                    "llvm -mcpu=sapphirerapids", "llvm -mcpu=haswell"])
def test_row_reductions_prefetch_only_where_the_model_asks(target):
    """The CPUs whose model asks for no prefetch (named targets: the table or the
    defaults) keep their row reductions as they were: no prefetch, the knob 0; nor does
    a model that asks for it prefetch rows as long as its distance, or an input that
    fits in the threads' L2 caches."""
    info = dataclasses.replace(cpu_model(target), threads=2)
    assert info.row_prefetch_bytes == 0
    for model, shape in [(info, (5, 48, 256)), (_prefetching(), (5, 12, 1024)),
                         (_prefetching(), (2, 8, 256))]:
        X = tc.placeholder(shape, "float32", name="X")
        Y = nn.sum(X, axis=-1)
        knobs = Knobs()
        s = apply_rules([X, Y], knobs, model)
        assert knobs.values["sum.prefetch_rows"] == 0
        assert "prefetch" not in str(tc.lower(s, [X, Y]))


def test_row_prefetch_distance_from_the_model():
    """Whole rows, a power of two, at most MAX_PREFETCH_ROWS; none without the model's
    distance, a known row length or an input size past the L2 caches."""
    from tecomp.strategy.rows import MAX_PREFETCH_ROWS, row_prefetch_rows
    m = _prefetching()
    big = 1 << 30
    assert [row_prefetch_rows(m, r, big) for r in (64, 256, 1000, 1024, 1500, 2048, 4096)] == \
        [MAX_PREFETCH_ROWS, 16, 4, 4, 2, 2, 0]
    assert row_prefetch_rows(m, 1024, 2 * m.l2_bytes) == 0
    assert row_prefetch_rows(m, 1024, None) == 0 and row_prefetch_rows(m, None, big) == 0
    assert row_prefetch_rows(_prefetching(0), 1024, big) == 0


@pytest.mark.parametrize("limit,shape,streams", [
    (1 << 20, (256, 2048), True),      # 2 MiB out, over a measured 1 MiB
    (4 << 20, (256, 2048), False),     # under a measured 4 MiB
    (0, (256, 2048), False),           # unmeasured: half the last-level cache
    (1 << 20, (256, 1000), False),     # rows of part lines: never streamed
])
def test_elementwise_outputs_stream_past_a_measured_share_of_the_cache(limit, shape, streams):
    """A plain elementwise output of more than the model's ``stream_output_bytes`` (where
    measured; a VM's share of the last-level cache) is stored past the cache (``pragma
    nontemporal``), in runs of whole lines; where it is 0 the rule is half the
    last-level cache (32 MiB here); the values are numpy's either way."""
    info = dataclasses.replace(info2(), l3_bytes=64 << 20, stream_output_bytes=limit)
    X = tc.placeholder(shape, "float32", name="X")
    Y = nn.exp(X)
    knobs = Knobs()
    s = apply_rules([X, Y], knobs, info)
    assert knobs.values["stream.exp"] is streams
    assert ("nontemporal" in str(tc.lower(s, [X, Y]))) is streams
    x = rng.standard_normal(shape).astype("float32")
    got = np.zeros(shape, "float32")
    _build(s, [X, Y])(x, got)
    np.testing.assert_allclose(got, np.exp(x), rtol=1e-6)


@pytest.mark.parametrize("limit,rows,streams", [
    (1 << 20, 256, True),       # 2 MiB in, 2 MiB out: over a measured 1 MiB
    (8 << 20, 256, False),      # under a measured 8 MiB
    (0, 256, False),            # unmeasured: half the last-level cache (32 MiB here)
    (1 << 20, 96, True), (4 << 20, 96, False)])
def test_row_kernels_and_templates_stream_past_a_measured_share_of_the_cache(
        limit, rows, streams, monkeypatch):
    """A row kernel (a softmax written as four computes), the softmax template and the
    depthwise template store their output past the cache where what the pass reads and
    writes is more than the model's ``stream_output_bytes`` (where measured: a VM's
    share of the last-level cache), as a plain elementwise output does; half the
    last-level cache where it is 0; the values are numpy's either way."""
    from tecomp.strategy.cpu import depthwise, softmax
    info = dataclasses.replace(info2(), l3_bytes=64 << 20, stream_output_bytes=limit)
    C = 2048
    X, _, _, _, Y = softmax_computes(rows, C)
    knobs = Knobs()
    s = apply_rules([X, Y], knobs, info)
    assert knobs.values["stream.softmax"] is streams
    x = rng.standard_normal((rows, C)).astype("float32")
    want = softmax_ref(x)
    monkeypatch.setattr(softmax, "cpu_model", lambda target: info)
    Z = nn.softmax(X)
    for sched, out in ((s, Y), (softmax.schedule_softmax([Z]), Z)):
        assert ("nontemporal" in str(tc.lower(sched, [X, out]))) is streams
        got = np.zeros((rows, C), "float32")
        _build(sched, [X, out])(x, got)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    # a depthwise NHWC pass: rows / 16 x 16 x 16 x 128 in and out (as many bytes)
    D = tc.placeholder((rows // 16, 16, 16, 128), "float32", name="D")
    W = tc.placeholder((3, 3, 128, 1), "float32", name="W")
    conv = nn.depthwise_conv2d_nhwc(D, W, 1, 1)
    assert depthwise._streams_output(conv, conv, info) is streams


@pytest.mark.parametrize("target", ["llvm -mcpu=znver4", "llvm -mcpu=znver5",
                                    "llvm -mcpu=sapphirerapids"])
def test_named_cpus_stream_past_half_their_last_level_cache(target):
    """No named CPU's model measures ``stream_output_bytes``: an output streams past the
    cache where it is more than half its last-level cache, as before."""
    info = cpu_model(target)
    assert info.stream_output_bytes == 0
    half = info.l3_bytes // 2
    for n, streams in ((half // 4 + 1024, True), (half // 4 - 1024, False)):
        X = tc.placeholder((n // 1024, 1024), "float32", name="X")
        knobs = Knobs()
        apply_rules([X, nn.exp(X)], knobs, dataclasses.replace(info, threads=2))
        assert knobs.values["stream.exp"] is streams, (n, half)


def _bool_bytes(shape, seed=52):
    """Bools as bytes 0, 1, 2 and 255 (any non-zero byte is true: a uint8 array viewed
    as bool), mostly true, and numpy's view of them as 0/1."""
    raw = np.random.default_rng(seed).choice(np.array([0, 1, 2, 255], np.uint8), size=shape,
                                             p=[0.002, 0.5, 0.3, 0.198])
    return raw.view(bool), raw != 0


@pytest.mark.parametrize("byte_logic", [True, False])
@pytest.mark.parametrize("op", ["all", "any"])
def test_all_any_over_every_axis_combination_of_bool_bytes(op, byte_logic, monkeypatch):
    """``all`` (an ``and`` of bool loads computed on the bytes, ``emit_memory.
    BYTE_BOOL_LOGIC``: their ``umin``) and ``any`` over every combination of axes, with and
    without keepdims, of bools stored as any non-zero byte, odd extents (tails of
    vectors): numpy's answers, each output byte 0 or 1."""
    import itertools
    from tecomp.codegen.llvm import emit_memory
    monkeypatch.setattr(emit_memory, "BYTE_BOOL_LOGIC", byte_logic)
    shape = (3, 5, 67, 130)
    x, ref = _bool_bytes(shape)
    X = tc.placeholder(shape, "bool", name="X")
    for r in range(5):
        for axes in itertools.combinations(range(4), r):
            axis = axes if axes else None
            for keep in (False, True):
                Y = getattr(nn, op)(X, axis=axis, keepdims=keep)
                f = _build(tc.auto_schedule([X, Y]), [X, Y])
                got = tc.empty(tuple(int(e.value) for e in Y.shape), "bool")
                f(tc.aligned(x), got)
                want = getattr(np, op)(ref, axis=axis, keepdims=keep)
                np.testing.assert_array_equal(np.asarray(got).view(np.uint8),
                                              np.asarray(want).astype(np.uint8),
                                              err_msg=f"{op} axis={axis} keepdims={keep}")


def test_bool_and_of_loads_runs_on_the_bytes():
    """A vectorized ``and`` of bool loads (an ``all``'s update, an elementwise ``&``) is
    the bytes' ``umin``, its output bytes 0 or 1 whatever non-zero bytes the inputs hold;
    an ``or``, a compare or a flag off keeps the mask tests."""
    from tecomp.codegen.llvm import emit_memory
    a, ra = _bool_bytes((7, 129), 1)
    b, rb = _bool_bytes((7, 129), 2)
    A = tc.placeholder((7, 129), "bool", name="A")
    B = tc.placeholder((7, 129), "bool", name="B")
    for name, fn, want in [("and", lambda i, j: A[i, j] & B[i, j], ra & rb),
                           ("or", lambda i, j: A[i, j] | B[i, j], ra | rb),
                           ("and3", lambda i, j: A[i, j] & (B[i, j] & A[i, (j + 1) % 129]),
                            ra & rb & np.roll(ra, -1, axis=1))]:
        for flag in (True, False):
            old = emit_memory.BYTE_BOOL_LOGIC
            emit_memory.BYTE_BOOL_LOGIC = flag
            try:
                C = tc.compute((7, 129), fn, name="C")
                s = tc.create_schedule(C.op)
                _, ii = s[C].split(C.op.axis[1], factor=64)
                s[C].vectorize(ii)
                f = _build(s, [A, B, C])
            finally:
                emit_memory.BYTE_BOOL_LOGIC = old
            got = tc.empty((7, 129), "bool")
            f(tc.aligned(a), tc.aligned(b), got)
            np.testing.assert_array_equal(np.asarray(got).view(np.uint8), want.astype(np.uint8))
            if tc.target.cpu_model().masks:   # (the bytes' umin on AVX-512BW: vpminub)
                assert ("vpminub" in f.get_source("asm")) == (flag and name != "or"), name


@pytest.mark.parametrize("axis", [(2, 3), None, -1])
def test_any_partials_are_an_or_on_the_bytes(axis):
    """``any``'s vector partial results, in the function's own stack buffer, are the
    bytes' ``umax`` (any non-zero byte for true: the lanes' reduction tests != 0), the
    output still 0 or 1; an output buffer updated in place (the middle axis) keeps the
    mask tests."""
    shape = (2, 3, 33, 130)
    x, ref = _bool_bytes(shape, 7)
    x = (np.asarray(x).view(np.uint8) * (np.random.default_rng(3).random(shape) < 0.01)
         ).astype(np.uint8).view(bool)   # mostly false
    ref = np.asarray(x).view(np.uint8) != 0
    X = tc.placeholder(shape, "bool", name="X")
    Y = nn.any(X, axis=axis)
    f = _build(tc.auto_schedule([X, Y]), [X, Y])
    got = tc.empty(tuple(int(e.value) for e in Y.shape), "bool")
    f(tc.aligned(x), got)
    np.testing.assert_array_equal(np.asarray(got).view(np.uint8),
                                  np.any(ref, axis=axis).astype(np.uint8))
    if tc.target.cpu_model().masks:
        assert "vpmaxub" in f.get_source("asm")
    M = nn.any(X, axis=1)
    g = _build(tc.auto_schedule([X, M]), [X, M])
    if tc.target.cpu_model().masks:
        assert "vpmaxub" not in g.get_source("asm")


def _column_model(prefetch_bytes=131072):
    """Zen 4's model with an L2 of 64 KiB and one thread (so that a small input is
    "larger than L2" and the test stays fast), its ``column_prefetch_bytes`` as given."""
    return dataclasses.replace(cpu_model("llvm -mcpu=znver4"), threads=1, l2_bytes=65536,
                               column_prefetch_bytes=prefetch_bytes)


@pytest.mark.parametrize("op,shape,axis,keepdims", [
    ("sum", (1000, 1000), 0, False), ("max", (1000, 1000), 0, True),
    ("min", (999, 260), 0, False), ("argmax", (1000, 1000), 0, False),
    ("argmin", (6, 200, 72), 1, True), ("mean", (3, 96, 200), 1, False),
    ("sum", (40, 8, 1000), 0, True), ("sum", (8, 64, 64), 1, False)])
def test_column_reductions_prefetch_their_passes_ahead(op, shape, axis, keepdims):
    """A column reduction whose input is larger than L2, its tile's rows shorter than the
    model's ``column_prefetch_bytes``, prefetches into L2 the rows of the passes ahead
    (``prefetch (L2)`` in its pass loop) and reads 8 rows a pass where they divide the
    axis; odd extents (a vector tail, rows that no step count divides), keepdims, NaNs
    (max, min and argmax propagate the first NaN as numpy does) and ties all as numpy's;
    a tile one step of vectors wide (rows of 64 floats) too (its loop of one iteration
    gone, the prefetch along the passes stays)."""
    x = data(shape, "float32", op)
    flat = x.reshape(-1)
    flat[rng.choice(flat.size, 7, replace=False)] = np.nan
    x[(slice(None),) * axis + (-1,)] = np.nan   # (a NaN in the last pass's rows)
    if op.startswith("arg"):
        x[(slice(None),) * axis + (slice(0, 3),)] = 2.5   # ties, no NaN in some columns
    X = tc.placeholder(shape, name="X")
    kw = {"dtype": "int64"} if op.startswith("arg") else {}
    Y = getattr(nn, op)(X, axis=axis, keepdims=keepdims, **kw)
    knobs = Knobs()
    s = apply_rules([X, Y], knobs, _column_model())
    name = next(k for k in knobs.values if k.endswith(".columns"))
    assert knobs.values[name] is True, knobs.values
    passes = knobs.values[name.replace(".columns", ".prefetch_passes")]
    assert passes >= 1, knobs.values
    rows = shape[axis]
    if rows % 8 == 0:
        assert knobs.values[name.replace(".columns", ".steps")] == 8, knobs.values
    ir = str(tc.lower(s, [X, Y]))
    assert re.search(rf"prefetch \(L2\) X\[.*\+ {passes}", ir), ir
    got = np.zeros(tuple(int(e.value) for e in Y.shape), Y.dtype)
    _build(s, [X, Y])(x, got)
    want = np_reduce(op, x, axis, keepdims)
    if op.startswith("arg"):
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.sqrt(rows))


@pytest.mark.parametrize("why", ["flag", "model", "long runs", "in L2"])
def test_column_reductions_without_the_prefetch(monkeypatch, why):
    """No prefetch, and 4 rows a pass for a sum, with ``COLUMN_PREFETCH`` off, with a
    model that has no ``column_prefetch_bytes``, where the tile's rows are runs of at
    least that many bytes (the hardware prefetchers keep them fed), or where the input
    fits in L2; numpy's answers each way."""
    shape = (64, 1000) if why != "in L2" else (64, 200)
    model = _column_model(0 if why == "model" else 2048 if why == "long runs" else 131072)
    if why == "flag":
        monkeypatch.setattr(rules, "COLUMN_PREFETCH", False)
    x = data(shape, "float32", "sum")
    X = tc.placeholder(shape, name="X")
    Y = nn.sum(X, axis=0)
    knobs = Knobs()
    s = apply_rules([X, Y], knobs, model)
    assert knobs.values["sum.columns"] is True, knobs.values
    assert knobs.values.get("sum.prefetch_passes", 0) == 0, knobs.values
    assert knobs.values["sum.steps"] == 4, knobs.values
    assert "prefetch" not in str(tc.lower(s, [X, Y]))
    got = np.zeros(shape[1], "float32")
    _build(s, [X, Y])(x, got)
    np.testing.assert_allclose(got, x.astype("float64").sum(0), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("passes", [0, 2, 4])
def test_column_prefetch_passes_knob(passes):
    """The knob ``<stage>.prefetch_passes`` (as a search sets it): that many passes
    ahead in the IR (none for 0), numpy's answers either way (a NaN in the last rows)."""
    x = data((1000, 520), "float32", "max")
    x[-1, 5] = np.nan
    X = tc.placeholder(x.shape, name="X")
    Y = nn.max(X, axis=0)
    knobs = Knobs({"max.prefetch_passes": passes})
    s = apply_rules([X, Y], knobs, _column_model())
    assert knobs.values["max.prefetch_passes"] == passes
    ir = str(tc.lower(s, [X, Y]))
    assert ("prefetch (L2)" in ir) == (passes > 0), ir
    if passes:
        assert re.search(rf"prefetch \(L2\) X\[.*\+ {passes}", ir), ir
    got = np.zeros(520, "float32")
    _build(s, [X, Y])(x, got)
    np.testing.assert_array_equal(got, x.max(0))


def _window(kind, dtype, unroll=True, where=False, shape=(5, 7)):
    """``C[i] = max/min/sum over (r, k) of A[i + r, k]`` (a window over 3 rows of A),
    its reduce loops unrolled (or not), ``where=`` a condition on the first tap or not:
    ``(A, C, schedule)``."""
    n, m = shape
    A = tc.placeholder((n + 2, m), dtype, name="A")
    r = tc.reduce_axis((0, 3), "r")
    k = tc.reduce_axis((0, m), "k")
    fn = {"max": tc.max, "min": tc.min, "sum": tc.sum}[kind]
    cond = {"where": (r + k) % 4 == 1} if where else {}
    C = tc.compute((n,), lambda i: fn(A[i + r, k], axis=[r, k], **cond), name="C")
    s = tc.create_schedule(C.op)
    if unroll:
        s[C].unroll(r)
        s[C].unroll(k)
    return A, C, s


@pytest.mark.parametrize("kind,dtype,unroll,where,seeded", [
    ("max", "float32", True, False, True),
    ("min", "float32", True, False, True),
    ("max", "int32", True, False, True),
    ("min", "float64", True, False, True),
    # not seeded: reduce loops not unrolled, a condition that fails at the first tap, a sum
    ("max", "float32", False, False, False),
    ("max", "float32", True, True, False),
    ("sum", "float32", True, False, False),
])
def test_max_min_windows_start_at_their_first_tap(kind, dtype, unroll, where, seeded,
                                                  monkeypatch):
    """A ``max``/``min`` reduction whose reduce loops are all unrolled starts its
    accumulator at the first tap's element and updates with the others (the first
    reduce loop's copy at 0 runs the inner loops from 1, then the loop from 1:
    ``SEED_FIRST_TAP``); not where a loop stays a loop, the condition fails at the first
    tap, or for a sum (``0 + -0.0`` is ``+0.0``).  numpy's values, NaN and infinities in
    the windows (NaN propagates), the same as the identity's start."""
    A, C, s = _window(kind, dtype, unroll, where)
    text = str(tc.lower(s, [A, C]))
    start = re.search(r"\n\s*C\[i\] = (.*)\n", text)
    assert start, text
    if seeded:
        assert start.group(1) == "A[i, 0]", text
        assert re.search(r"unrolled \(k, 1, 6\)", text) and \
            re.search(r"unrolled \(r, 1, 2\)", text), text
    else:
        assert "A[" not in start.group(1), text
        assert not re.search(r"\((k|r), 1, ", text), text
    x = rng.standard_normal((7, 7)) * 5
    if dtype.startswith("float") and kind != "sum":
        x.reshape(-1)[[3, 20, 33]] = [np.nan, np.inf, -np.inf]
    x = x.astype(dtype)
    got = np.zeros(5, dtype)
    _build(s, [A, C])(x, got)
    monkeypatch.setattr(schedule_ops, "SEED_FIRST_TAP", False)
    A2, C2, s2 = _window(kind, dtype, unroll, where)
    plain = str(tc.lower(s2, [A2, C2]))
    assert not re.search(r"\n\s*C\[i\] = A\[", plain), plain
    before = np.zeros(5, dtype)
    _build(s2, [A2, C2])(x, before)
    np.testing.assert_array_equal(got, before)
    if not where:
        win = np.stack([x[i:i + 3] for i in range(5)]).reshape(5, -1)
        # (a float32 sum of 18 values in another order than numpy's: its rounding, up to
        # a few 1e-6 of the sum, depends on the draw, which depends on the tests before)
        ref = {"max": np.max, "min": np.min, "sum": np.sum}[kind](
            win.astype("float64") if kind == "sum" else win, axis=1)
        np.testing.assert_allclose(got, ref.astype(dtype), rtol=1e-5 if kind == "sum" else 1e-6)


def _streaming(vb=32, **kw):
    """This host's model on two threads with 16 float32 lanes (AVX-512's registers), a
    small L2 (so that small inputs stream past it), reading memory fastest with loads of
    ``vb`` bytes (CpuModel.stream_load_bytes)."""
    return dataclasses.replace(info2(), lanes=16, stream_load_bytes=vb, l2_bytes=16 << 10,
                               **kw)


@pytest.mark.parametrize("op,shape,keep", [
    ("sum", (5, 48, 256), False), ("mean", (3, 40, 1031), True),
    ("prod", (5, 48, 100), False), ("sum", (6, 20, 4099), True)])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_row_reductions_from_memory_take_the_models_stream_loads(op, shape, keep, dtype):
    """A row reduction at the root whose input is past the threads' L2 caches, on a
    model whose loads of ``stream_load_bytes`` (narrower than its registers) read memory
    fastest, is compiled for registers of that width (``pragma vector_bytes`` on its
    row loop; on an AVX-512 host: AVX2's policy, 256-bit registers); its results are
    numpy's (odd rows, tails of vectors, NaN in some rows, keepdims)."""
    X = tc.placeholder(shape, dtype, name="X")
    Y = getattr(nn, op)(X, axis=-1, keepdims=keep)
    s = apply_rules([X, Y], Knobs(), _streaming())
    ir = str(tc.lower(s, [X, Y]))
    assert ir.count("pragma_vector_bytes = 32") == 1, ir
    r = np.random.default_rng(29)       # (not the module's rng: the others' draws stay)
    x = (1 + 0.01 * r.standard_normal(shape) if op == "prod" else
         r.standard_normal(shape)).astype(dtype)
    x[0, 1, 5] = x[1, 2, -1] = np.nan
    got = np.zeros(tuple(int(e.value) for e in Y.shape), dtype)
    _build(s, [X, Y])(x, got)
    np.testing.assert_allclose(got, np_reduce(op, x, -1, keep), rtol=1e-5, atol=1e-4)


def test_row_reductions_keep_their_registers_unless_the_model_asks():
    """No ``pragma vector_bytes`` where the model gives no ``stream_load_bytes`` (every
    named CPU: Zen 4's 256-bit loads measured a tie, DECISIONS.md), where it is the registers' own width, where the input fits in
    the threads' L2 caches, for a max or min (or bools, integers), or with
    ``rules.STREAM_LOADS`` off."""
    for target in ("llvm -mcpu=znver4", "llvm -mcpu=znver5", "llvm -mcpu=sapphirerapids", "llvm -mcpu=haswell"):
        assert cpu_model(target).stream_load_bytes == 0
    cases = [(_streaming(0), (5, 48, 256)), (_streaming(64), (5, 48, 256)),
             (_streaming(), (2, 8, 256)),
             (dataclasses.replace(cpu_model("llvm -mcpu=znver5"), threads=2), (64, 1024, 256))]
    cases += [(_streaming(), (5, 48, 256), op, dtype) for op, dtype in
              [("max", "float32"), ("min", "float64"), ("sum", "int32"), ("any", "bool")]]
    for model, shape, *rest in cases:
        op, dtype = rest or ("sum", "float32")
        X = tc.placeholder(shape, dtype, name="X")
        Y = getattr(nn, op)(X, axis=-1)
        assert "vector_bytes" not in str(tc.lower(apply_rules([X, Y], Knobs(), model), [X, Y]))
    old = rules.STREAM_LOADS
    rules.STREAM_LOADS = False
    try:
        X = tc.placeholder((5, 48, 256), "float32", name="X")
        Y = nn.sum(X, axis=-1)
        assert "vector_bytes" not in str(tc.lower(apply_rules([X, Y], Knobs(), _streaming()),
                                                  [X, Y]))
    finally:
        rules.STREAM_LOADS = old
