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
