"""TE features TVM users reach for (issue 21): chained indexing."""
import numpy as np
import pytest

import tecomp as tc


def test_chained_indexing_is_the_same_load():
    A = tc.placeholder((4, 5, 6), name="A")
    k = tc.reduce_axis((0, 6), name="k")
    B = tc.compute((4, 5), lambda i, j: tc.sum(A[i][j][k] * 2, axis=k), name="B")
    C = tc.compute((4, 5), lambda i, j: A[i][j, 0] + A[i, j][1] - A[i][j][2], name="C")
    D = tc.compute((4, 5), lambda i, j: A[i, j, 0] + A[i, j, 1] - A[i, j, 2], name="D")
    # the same IR as with one subscript
    text_c = str(tc.lower(tc.create_schedule(C.op), [A, C]))
    text_d = str(tc.lower(tc.create_schedule(D.op), [A, D])).replace("D", "C")
    assert text_c == text_d
    f = tc.build(tc.create_schedule([B.op, C.op]), [A, B, C])
    a = np.random.default_rng(0).random((4, 5, 6), dtype=np.float32)
    b, c = np.zeros((4, 5), "float32"), np.zeros((4, 5), "float32")
    f(a, b, c)
    np.testing.assert_allclose(b, 2 * a.sum(2), rtol=1e-5)
    np.testing.assert_allclose(c, a[:, :, 0] + a[:, :, 1] - a[:, :, 2], rtol=1e-5)


def test_partial_index_is_not_a_value():
    A = tc.placeholder((4, 5), name="A")
    s = A[1]
    assert "1 of 2 indices" in repr(s)
    for use in (lambda: s + 1, lambda: 1 + s, lambda: s * A[0, 0], lambda: tc.exp(s),
                lambda: bool(s), lambda: tc.compute((4,), lambda i: A[i], name="C")):
        with pytest.raises(tc.ShapeError, match=r"indexed with 1 index\(es\); index every "
                                                r"dimension, e.g. A\[i, j\] or A\[i\]\[j\]"):
            use()
