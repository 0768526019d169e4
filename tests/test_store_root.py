"""``Stage.store_root``: a stage computed at a consumer's loop into its whole buffer at the
root, read there by the consumer and, after the loop nest, by stages outside it."""
import numpy as np
import pytest

import tecomp as tc
from tecomp.schedule.trace import replay
from helpers import channel_sum as _dag  # tests/helpers.py


@pytest.mark.parametrize("outputs_first", ["D", "G"])
def test_store_root_is_read_inside_and_after_the_loop(outputs_first):
    """S is computed per channel inside D's parallel channel loop, once, and G (an output
    at the root) reads the whole of it after that nest, whichever output comes first."""
    X, S, D, G = _dag()
    outs = [D, G] if outputs_first == "D" else [G, D]
    s = tc.create_schedule([t.op for t in outs])
    i, c, j = s[D].op.axis
    s[D].reorder(c, i, j)
    s[D].parallel(c)
    s[S].compute_at(s[D], c)
    s[S].store_root()
    args = [X] + outs
    text = str(tc.lower(s, args))
    assert text.count("allocate S: float32[9]") == 1
    assert text.index("allocate S") < text.index("parallel (c")
    assert "S[c] = S[c] + X[n, c, w]" in text          # indexed as the tensor, per channel
    assert text.index("parallel (c") < text.index("G[")  # G after D's nest
    f = tc.build(s, args)
    x = np.random.default_rng(0).standard_normal((3, 9, 13)).astype("float32")
    d, g = np.empty_like(x), np.empty(9, "float32")
    f(x, *([d, g] if outputs_first == "D" else [g, d]))
    ref = x.sum(axis=(0, 2))
    np.testing.assert_allclose(g, 2 * ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(d, x - ref[None, :, None], rtol=1e-5, atol=1e-5)
    assert "s[S].store_root()" in s.trace.python()
    again = replay(s.trace.to_json(), outs)   # (a tuning log's trace)
    assert str(tc.lower(again, args)) == text


def test_store_root_of_a_block_of_channels():
    """Computed at the outer loop of a split (a block of 4 channels, the last one short)."""
    X, S, D, G = _dag()
    s = tc.create_schedule([D.op, G.op])
    i, c, j = s[D].op.axis
    co, ci = s[D].split(c, factor=4)
    s[D].reorder(co, i, ci, j)
    s[D].parallel(co)
    s[S].compute_at(s[D], co)
    s[S].store_root()
    f = tc.build(s, [X, D, G])
    x = np.random.default_rng(1).standard_normal((3, 9, 13)).astype("float32")
    d, g = np.empty_like(x), np.empty(9, "float32")
    f(x, d, g)
    ref = x.sum(axis=(0, 2))
    np.testing.assert_allclose(g, 2 * ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(d, x - ref[None, :, None], rtol=1e-5, atol=1e-5)


def test_store_root_at_the_root_changes_nothing():
    X, S, D, G = _dag()
    s0 = tc.create_schedule([D.op, G.op])
    s1 = tc.create_schedule([D.op, G.op])
    s1[S].store_root()
    assert str(tc.lower(s0, [X, D, G])) == str(tc.lower(s1, [X, D, G]))


def _run(s, args, x):
    """The kernel's outputs for input ``x`` (NaN-filled before the call)."""
    f = tc.build(s, args)
    outs = [np.full([int(e) for e in t.shape], np.nan, "float32") for t in args[1:]]
    f(x, *outs)
    return outs


@pytest.mark.parametrize("split", [None, 8])
def test_store_root_under_a_parallel_loop_read_in_reverse(split):
    """D reads S[8 - c] in a parallel loop over c (or over the inner part of c split by 8,
    whose last iteration is guarded off): each iteration computes its own element, in
    descending order.  (The fuzzer's store_root family: refused before, as if it
    overlapped; the check compared only ascending parts.)"""
    X, S, D, G = _dag()
    D = tc.compute((3, 9, 13), lambda i, c, j: X[i, c, j] - S[8 - c], name="D")
    s = tc.create_schedule([D.op, G.op])
    i, c, j = s[D].op.axis
    if split:
        co, c = s[D].split(c, factor=split)
        s[D].reorder(co, c, i, j)
    else:
        s[D].reorder(c, i, j)
    s[D].parallel(c)
    s[S].compute_at(s[D], c)
    s[S].store_root()
    x = np.random.default_rng(2).standard_normal((3, 9, 13)).astype("float32")
    d, g = _run(s, [X, D, G], x)
    ref = x.sum(axis=(0, 2))
    np.testing.assert_allclose(g, 2 * ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(d, x - ref[::-1][None, :, None], rtol=1e-5, atol=1e-5)


def test_store_root_under_a_parallel_loop_of_one_iteration():
    """A parallel loop that runs once has no two iterations to overlap (refused before:
    with one channel, each iteration's part did not start past the last one's)."""
    X = tc.placeholder((3, 1, 5), name="X")
    n, w = tc.reduce_axis((0, 3), name="n"), tc.reduce_axis((0, 5), name="w")
    S = tc.compute((1,), lambda c: tc.sum(X[n, c, w], axis=[n, w]), name="S")
    D = tc.compute((3, 1, 5), lambda i, c, j: X[i, c, j] - S[c], name="D")
    G = tc.compute((1,), lambda c: S[c] * 2.0, name="G")
    s = tc.create_schedule([D.op, G.op])
    i, c, j = s[D].op.axis
    s[D].reorder(c, i, j)
    s[D].parallel(c)
    s[S].compute_at(s[D], i)
    s[S].store_root()
    x = np.random.default_rng(3).standard_normal((3, 1, 5)).astype("float32")
    d, g = _run(s, [X, D, G], x)
    np.testing.assert_allclose(g, [2 * x.sum()], rtol=1e-5)
    np.testing.assert_allclose(d, x - x.sum(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("read", ["window", "pair"])
def test_store_root_whose_parts_overlap_covers_what_is_read_after(read):
    """Serial iterations whose parts overlap (D reads a sliding window S[i + c], or S[c]
    and S[min(c + 1, 8)] with c split by 4) still compute every element G reads after
    the nest: lowering counts them, and the values are right."""
    X = tc.placeholder((3, 12), name="X")
    r = tc.reduce_axis((0, 3), name="r")
    S = tc.compute((12,), lambda k: tc.sum(X[r, k], axis=r), name="S")
    G = tc.compute((12,), lambda k: S[k] * 2.0, name="G")
    if read == "window":
        D = tc.compute((4, 9), lambda i, c: S[i + c], name="D")
    else:
        D = tc.compute((4, 12), lambda i, c: S[c] + S[tc.min(c + 1, 11)], name="D")
    s = tc.create_schedule([D.op, G.op])
    i, c = s[D].op.axis
    if read == "pair":
        _, c = s[D].split(c, factor=4)
    s[S].compute_at(s[D], c)
    s[S].store_root()
    x = np.random.default_rng(4).standard_normal((3, 12)).astype("float32")
    d, g = _run(s, [X, D, G], x)
    ref = x.sum(axis=0)
    np.testing.assert_allclose(g, 2 * ref, rtol=1e-5, atol=1e-5)
    if read == "window":
        want = np.stack([ref[k:k + 9] for k in range(4)])
    else:
        want = np.broadcast_to(ref + ref[np.minimum(np.arange(12) + 1, 11)], (4, 12))
    np.testing.assert_allclose(d, want, rtol=1e-5, atol=1e-5)


def test_store_root_with_a_symbolic_channel_count_split_by_4():
    """n channels split by 4, the blocks in parallel: lowering proves that the blocks'
    channels join up to all n (the last block, past the edge where 4 does not divide n,
    computes fewer), so G may read all of S after the nest."""
    n = tc.var("n")
    X = tc.placeholder((3, n, 5), name="X")
    b, w = tc.reduce_axis((0, 3), name="b"), tc.reduce_axis((0, 5), name="w")
    S = tc.compute((n,), lambda c: tc.sum(X[b, c, w], axis=[b, w]), name="S")
    D = tc.compute((3, n, 5), lambda i, c, j: X[i, c, j] - S[c], name="D")
    G = tc.compute((n,), lambda c: S[c] * 2.0, name="G")
    s = tc.create_schedule([D.op, G.op])
    i, c, j = s[D].op.axis
    co, ci = s[D].split(c, factor=4)
    s[D].reorder(co, ci, i, j)
    s[D].parallel(co)
    s[S].compute_at(s[D], ci)
    s[S].store_root()
    f = tc.build(s, [X, D, G, n])
    x = np.random.default_rng(5).standard_normal((3, 7, 5)).astype("float32")
    d, g = np.full_like(x, np.nan), np.full(7, np.nan, "float32")
    f(x, d, g, 7)
    ref = x.sum(axis=(0, 2))
    np.testing.assert_allclose(g, 2 * ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(d, x - ref[None, :, None], rtol=1e-5, atol=1e-5)


def test_store_root_of_all_n_channels_at_an_outer_loop():
    """S computed whole (all n channels) at D's loop over the batch of 1, inside E's
    nest: lowering knows n >= 1 where anything is read, so S[0:max(n, 0) - 1 + 1] is
    S[0:n], all that G reads after the nest (refused before: fuzzer, store_root family,
    seed 630)."""
    n = tc.var("n")
    X = tc.placeholder((1, n, 2), name="X")
    b, w = tc.reduce_axis((0, 1), name="b"), tc.reduce_axis((0, 2), name="w")
    S = tc.compute((n,), lambda c: tc.sum(X[b, c, w], axis=[b, w]), name="S")
    D = tc.compute((1, n, 2), lambda i, c, j: X[i, c, j] - S[c] + S[tc.min(c + 1, n - 1)],
                   name="D")
    E = tc.compute((1, n, 2), lambda i, c, j: D[i, c, j] * 2.0, name="E")
    G = tc.compute((n,), lambda c: S[c] * 2.0, name="G")
    s = tc.create_schedule([E.op, G.op])
    i = s[E].op.axis[0]
    s[D].compute_at(s[E], i)
    s[S].compute_at(s[E], i)
    s[S].store_root()
    f = tc.build(s, [X, E, G, n])
    x = np.random.default_rng(6).standard_normal((1, 6, 2)).astype("float32")
    e, g = np.full_like(x, np.nan), np.full(6, np.nan, "float32")
    f(x, e, g, 6)
    ref = x.sum(axis=(0, 2))
    np.testing.assert_allclose(g, 2 * ref, rtol=1e-5, atol=1e-5)
    want = x - ref[None, :, None] + ref[np.minimum(np.arange(6) + 1, 5)][None, :, None]
    np.testing.assert_allclose(e, 2 * want, rtol=1e-5, atol=1e-5)
