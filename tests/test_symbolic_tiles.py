"""Kernels of symbolic extents whose tiles are fused into a parallel loop: the full
tiles run a version with constant extents, the last one a version with its tests
(tecomp/lower/version_tiles.py), each division by a symbolic value computed once per
iteration (tecomp/lower/hoist_divisions.py).  Checked at sizes below, at and around the
tile, against numpy."""
import re

import numpy as np
import pytest

import tecomp as tc


def _scores(d: int):
    n = tc.var("n", dtype="int64")
    q = tc.placeholder((2, n, d), name="q")
    k = tc.placeholder((2, n, d), name="k")
    r = tc.reduce_axis((0, d), name="r")
    s = tc.compute((2, n, n), lambda b, i, j: tc.sum(q[b, i, r] * k[b, j, r], axis=r), name="s")
    return [q, k, s]


@pytest.fixture(scope="module")
def scores_kernel():
    args = _scores(8)
    sch = tc.auto_schedule(args)
    return tc.lower(sch, args), tc.build(sch, args, target="llvm")


def test_full_tiles_have_their_own_version(scores_kernel):
    ir, _ = scores_kernel
    text = str(ir)
    # the batch and the column tiles fused: no loop counter is linear in the tile
    assert "parallel (b.j.outer.fused" in text, text
    # the version of full tiles: its condition, then the tail's `else`
    assert "} else {" in text
    ifs = [line.strip() for line in text.splitlines() if line.strip().startswith("if (n >= ")]
    assert ifs, text


def test_full_tiles_unroll_only_constant_extents(scores_kernel):
    """In the full tiles' version the column chunks are constant (its condition says the
    tile's 2 chunks of 16 are whole) and the row block's tail (``n - i.outer*14`` rows,
    13 at most) is a plain loop, not 13 guarded unrolled copies."""
    ir, _ = scores_kernel
    full = str(ir).split("} else {")[0]
    unrolled = re.findall(r"unrolled \(\S+, \S+, ([^)]*)\)", full)
    assert unrolled and all(re.fullmatch(r"\d+(i64)?", e) for e in unrolled), unrolled
    assert "for (i.inner, 0i64, n - i.outer*14i64)" in full, full


@pytest.mark.parametrize("n", [1, 5, 16, 31, 32, 33, 41, 47, 70])
def test_scores_at_every_size(scores_kernel, n):
    _, f = scores_kernel
    rng = np.random.default_rng(n)
    a = rng.standard_normal((2, n, 8)).astype("float32")
    b = rng.standard_normal((2, n, 8)).astype("float32")
    out = np.full((2, n, n), np.nan, "float32")
    f(a, b, out)
    np.testing.assert_allclose(out, a @ b.transpose(0, 2, 1), rtol=1e-5, atol=1e-4)


def test_an_empty_size_writes_nothing(scores_kernel):
    """n = 0: no tile is full or a tail; the memory around the empty output (a view into
    a larger array) keeps its values."""
    _, f = scores_kernel
    z = np.zeros((2, 0, 8), "float32")
    base = np.full((2, 4, 4), 7.0, "float32")
    f(z, z, base[:, :0, :0])
    assert (base == 7.0).all()
