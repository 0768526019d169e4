"""A bounds-checked build (``tc.build(..., checks=True)``) names the buffer, the index and
the statement of an out-of-bounds access (BoundsError) instead of touching memory
outside the arrays."""
import numpy as np
import pytest

import tecomp as tc
from tecomp.ir.expr import Buffer, BufferLoad, Const, Var
from tecomp.ir.stmt import BufferStore, For, IfThenElse, PrimFunc


def _vec_bufs(n=8):
    return Buffer("A", (Const(n),), "float32"), Buffer("B", (Const(n),), "float32"), Var("i")


def _call(func):
    m = tc.build(func, checks=True)
    a, b = np.arange(8, dtype="float32"), np.zeros(8, "float32")
    m(a, b)
    return b


def test_checked_build_catches_out_of_bounds_store():
    A, B, i = _vec_bufs()
    body = For(i, Const(0), Const(8), "serial", BufferStore(B, BufferLoad(A, (i,), "float32"), (i * 2,)))
    with pytest.raises(tc.BoundsError, match=r"out-of-bounds store to buffer B: index 8 is outside "
                                              r"\[0, 8\) in dimension 0.*`B\[i\*2\] = A\[i\]`"):
        _call(PrimFunc("hand", (A, B), body, {"target": "llvm"}))


@pytest.mark.parametrize("kind", ["serial", "vectorized", "parallel", "unrolled"])
def test_checked_build_catches_out_of_bounds_load(kind):
    A, B, i = _vec_bufs()
    body = For(i, Const(0), Const(8), kind, BufferStore(B, BufferLoad(A, (i - 1,), "float32"), (i,)))
    with pytest.raises(tc.BoundsError, match=r"out-of-bounds load from buffer A: index -1 is outside "
                                              r"\[0, 8\) in dimension 0, at `A\[i - 1\]` in the statement "
                                              r"`B\[i\] = A\[i - 1\]`"):
        _call(PrimFunc("hand", (A, B), body, {"target": "llvm"}))


def test_checked_build_names_the_dimension_of_a_2d_buffer():
    A = Buffer("A", (Const(4), Const(3)), "float32")
    B = Buffer("B", (Const(4), Const(3)), "float32")
    i, j = Var("i"), Var("j")
    body = For(i, Const(0), Const(4), "serial", For(j, Const(0), Const(3), "serial", BufferStore(
        B, BufferLoad(A, (i, j + 1), "float32"), (i, j))))
    m = tc.build(PrimFunc("two_d", (A, B), body, {"target": "llvm"}), checks=True)
    with pytest.raises(tc.BoundsError, match=r"buffer A: index 3 is outside \[0, 3\) in dimension 1"):
        m(np.zeros((4, 3), "float32"), np.zeros((4, 3), "float32"))


def test_checked_build_of_a_schedule_wrong_on_purpose():
    """A compute whose read is out of range only for some value of a scalar parameter,
    through an index whose extremes lowering cannot place (``%``), so it cannot be
    rejected when defined nor before the call: an unchecked build would read past the
    end; the checked one names A, the index and the statement."""
    off = tc.var("off")
    A = tc.placeholder((8,), name="A")
    C = tc.compute((8,), lambda i: A[(i + off) % 9] * 2, name="C")
    s = tc.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=4)
    f = tc.build(s, [A, C, off], checks=True)
    c = np.zeros(8, "float32")
    f(np.arange(8, dtype="float32"), c, 0)
    np.testing.assert_array_equal(c, np.arange(8) * 2)
    with pytest.raises(tc.BoundsError, match=r"load from buffer A: index 8 is outside \[0, 8\).*"
                                              r"`C\[i\.outer\*4 \+ i\.inner\] = A\[\(i\.outer\*4 \+ i\.inner \+ off\) % 9\]\*2f`"):
        f(np.zeros(8, "float32"), np.zeros(8, "float32"), 1)


@pytest.mark.parametrize("checks", [False, True])
def test_read_out_of_range_for_a_scalar_parameter(checks):
    """``A[i + off]``: its range at the compute's first and last iteration is known from
    ``off`` when the kernel is called: a call with an ``off`` that would read outside A
    is refused before the kernel runs, checked build or not (the unchecked one read
    past A's end, or segfaulted for a large ``off``)."""
    off = tc.var("off")
    A = tc.placeholder((8,), name="A")
    C = tc.compute((6,), lambda i: A[i + off] * 2, name="C")
    s = tc.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=4)
    f = tc.build(s, [A, C, off], checks=checks)
    c = np.zeros(6, "float32")
    f(np.arange(8, dtype="float32"), c, 2)
    np.testing.assert_array_equal(c, np.arange(2, 8) * 2)
    with pytest.raises(tc.ArgumentError, match=r"2 - off = -1 must be >= 0 \(off = 3 from "
                                               r"parameter off \(argument 3\)\): it is the room "
                                               r"left in dimension 0 of A \(extent 8\) after index "
                                               r"0 of the read A\[i \+ off\] of compute C at i = 5"):
        f(np.zeros(8, "float32"), c, 3)
    for bad in (-1, 2**31 - 1, -2**31):
        with pytest.raises(tc.ArgumentError, match=r"the read A\[i \+ off\] of compute C"):
            f(np.zeros(8, "float32"), c, bad)


def test_read_past_a_symbolic_extent():
    """``A[i]`` over 8 rows of an ``A`` of ``n``: a call with ``n < 8`` is refused."""
    n = tc.var("n")
    A = tc.placeholder((n, 3), name="A")
    C = tc.compute((8,), lambda i: A[i, 0] + A[i, 2], name="C")
    f = tc.build(tc.create_schedule(C.op), [A, C])
    with pytest.raises(tc.ArgumentError, match=r"n - 8 = -3 must be >= 0 \(n = 5 from n \(from "
                                               r"A\.shape\[0\]\)\): it is the room left in "
                                               r"dimension 0 of A \(extent n\) after index 0 of "
                                               r"the read A\[i, 0\] of compute C at i = 7"):
        f(np.zeros((5, 3), "float32"), np.zeros(8, "float32"))
    c = np.zeros(8, "float32")
    f(np.ones((9, 3), "float32"), c)
    np.testing.assert_array_equal(c, 2)


def test_index_provably_out_of_range_is_rejected_when_defined():
    """The same read with a constant offset is rejected by tc.compute (ShapeError)."""
    A = tc.placeholder((8,), name="A")
    with pytest.raises(tc.ShapeError, match=r"compute C: the read A\[i \+ 1\] is out of range"):
        tc.compute((8,), lambda i: A[i + 1] * 2, name="C")
    # guarded, it is fine
    tc.compute((8,), lambda i: tc.if_then_else(i < 7, A[i + 1], 0.0), name="C")


def test_index_out_of_range_between_the_corners_is_rejected_when_defined():
    """An index whose extremes are not at the domain's corners -- ``(i % 7)*100`` over 10
    rows (in range at i = 0 and i = 9, 300 at i = 3), ``int8(i) + 100`` over 256 rows
    (the cast wraps at i = 128) -- is evaluated at every point of a small domain: a read
    outside is a ShapeError naming the point, where it read past the tensor unchecked."""
    A = tc.placeholder((300,), name="A")
    with pytest.raises(tc.ShapeError, match=r"compute C: the read A\[\(i % 7\)\*100\] is out "
                                            r"of range: index 0 .* is 300 at i = 3, but "
                                            r"dimension 0 of tensor A has extent 300"):
        tc.compute((10,), lambda i: A[i % 7 * 100], name="C")
    with pytest.raises(tc.ShapeError, match=r"A\[0, int32\(int8\(i\)\) \+ 100\] is out of "
                                            r"range: index 1 .* is -28 at i = 128"):
        # (in range at the corners: 100 at i = 0, 99 at i = 255)
        A2 = tc.placeholder((1, 300), name="A")
        tc.compute((256,), lambda i: A2[0, i.astype("int8").astype("int32") + 100], name="C")
    # in range at every point: built and equal to numpy (the cast wraps, as numpy's)
    C = tc.compute((10,), lambda i: A[i % 7 * 40], name="C")
    D = tc.compute((256,), lambda i: A[i.astype("int8").astype("int32") + 128], name="D")
    f = tc.build(tc.create_schedule([C.op, D.op]), [A, C, D])
    a, c, d = np.arange(300, dtype="float32"), np.zeros(10, "float32"), np.zeros(256, "float32")
    f(a, c, d)
    np.testing.assert_array_equal(c, a[np.arange(10) % 7 * 40])
    np.testing.assert_array_equal(d, a[np.arange(256).astype(np.int8).astype(np.int32) + 128])


def test_guarded_read_out_of_range_where_its_condition_holds():
    """A read under ``tc.if_then_else`` or a reduction's ``where=`` whose condition lets
    it read outside (the guard off by one: ``i < 8`` for ``A[i + 1]`` of an ``A`` of 8;
    the else branch reading ``A[0, i - 1]`` at ``i = 0``) is a ShapeError when defined,
    naming the condition and the point (it read past ``A`` unchecked); the right guards
    build, and give numpy's values."""
    A = tc.placeholder((8,), name="A")
    with pytest.raises(tc.ShapeError, match=r"compute C: the read A\[i \+ 1\] is out of range "
                                            r"where it is read \(where i < 8\): index 0 "
                                            r"\(i \+ 1\) is 8 at i = 7, but dimension 0 of "
                                            r"tensor A has extent 8; fix the index or the "
                                            r"condition that guards it"):
        tc.compute((8,), lambda i: tc.if_then_else(i < 8, A[i + 1], 0.0), name="C")
    A2 = tc.placeholder((3, 8), name="A2")
    with pytest.raises(tc.ShapeError, match=r"the read A2\[j, i - 1\] is out of range where it "
                                            r"is read \(where not \(i >= 1 && j < 3\)\): "
                                            r"index 1 \(i - 1\) is -1 at i = 0"):
        tc.compute((8, 3), lambda i, j: tc.if_then_else(tc.all(i >= 1, j < 3), 0.0,
                                                        A2[j, i - 1]), name="C")
    k = tc.reduce_axis((0, 8), name="k")
    with pytest.raises(tc.ShapeError, match=r"the read A\[k \+ 1\] is out of range where it is "
                                            r"read \(where k <= 7\)"):
        tc.compute((1,), lambda i: tc.sum(A[k + 1], axis=k, where=k <= 7), name="S")
    # the right guards: built, numpy's values (a condition on another axis only needs to
    # hold somewhere)
    C = tc.compute((8,), lambda i: tc.if_then_else(i < 7, A[i + 1], 0.0), name="C")
    D = tc.compute((8, 3), lambda i, j: tc.if_then_else(tc.all(i >= 1, j < 2), A2[j, i - 1],
                                                        -1.0), name="D")
    k = tc.reduce_axis((0, 8), name="k")
    S = tc.compute((1,), lambda i: tc.sum(A[k + 1], axis=k, where=k < 7), name="S")
    f = tc.build(tc.create_schedule([C.op, D.op, S.op]), [A, A2, C, D, S])
    a, a2 = np.arange(8, dtype="float32"), np.arange(24, dtype="float32").reshape(3, 8)
    c, d, s = np.zeros(8, "float32"), np.zeros((8, 3), "float32"), np.zeros(1, "float32")
    f(a, a2, c, d, s)
    np.testing.assert_array_equal(c, np.append(a[1:], 0))
    want = np.full((8, 3), -1, "float32")
    want[1:, :2] = a2[:2, :7].T
    np.testing.assert_array_equal(d, want)
    assert s[0] == a[1:].sum()


def test_narrowing_cast_in_a_symbolic_read_must_not_wrap():
    """``A[int32(k)]`` in a sum over an int64 ``N`` terms: at k = N - 1 = 2**32 the cast
    gives 0, in range, and the corners passed while k = 10 .. 2**31 - 1 read past ``A``
    (a segfault).  The cast's operand must fit int32 at the corners: ArgumentError."""
    N = tc.var("N", "int64")
    A = tc.placeholder((10,), name="A")
    B = tc.placeholder((N,), name="B")
    k = tc.reduce_axis((0, N), name="k")
    C = tc.compute((1,), lambda i: tc.sum(A[k.astype("int32")] + B[k], axis=k), name="C")
    f = tc.build(tc.create_schedule(C.op), [A, B, C])
    b = np.lib.stride_tricks.as_strided(np.zeros(1, "float32"), shape=(2**32 + 1,),
                                        strides=(0,))
    with pytest.raises(tc.ArgumentError, match=r"N = 4294967297 .*the value k cast to int32 in "
                                               r"the read A\[int32\(k\)\] of compute C at "
                                               r"k = N - 1i64, which must be <= 2147483647"):
        f(np.ones(10, "float32"), b, np.zeros(1, "float32"))
    c = np.zeros(1, "float32")
    f(np.arange(10, dtype="float32"), np.zeros(7, "float32"), c)
    assert c[0] == 21


def test_checked_build_symbolic_extent():
    n = tc.var("n")
    A = tc.placeholder((n,), name="A")
    C = tc.compute((n,), lambda i: A[(n - i) % (n + 1)], name="C")
    s = tc.create_schedule(C.op)
    f = tc.build(s, [A, C], checks=True)
    with pytest.raises(tc.BoundsError, match=r"buffer A: index 5 is outside \[0, 5\)"):
        f(np.zeros(5, "float32"), np.zeros(5, "float32"))


def test_read_out_of_range_for_every_symbolic_extent():
    """``A[n - i]`` over ``n`` rows reads ``A[n]`` first, whatever ``n`` is: refused when
    the kernel is lowered (the constant-extent version when it is defined)."""
    n = tc.var("n")
    A = tc.placeholder((n,), name="A")
    C = tc.compute((n,), lambda i: A[n - 1 - i + 1], name="C")
    with pytest.raises(tc.ShapeError, match=r"compute C: the read A\[n - 1 - i \+ 1\] is out "
                                            r"of range for every value of the arguments \(where "
                                            r"the compute is not empty\).* is -1; fix the index"):
        tc.build(tc.create_schedule(C.op), [A, C])


def test_checked_build_guarded_access_is_fine_and_results_match():
    """Guards (if_then_else padding, split tails) keep every access in bounds: the checked
    build runs and agrees with the unchecked one."""
    A = tc.placeholder((10,), name="A")
    C = tc.compute((13,), lambda i: tc.if_then_else(tc.all(i >= 2, i < 12), A[i - 2], -1.0), name="C")
    s = tc.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=4)
    s[C].vectorize(xi)
    a = np.arange(10, dtype="float32")
    outs = []
    for checks in (False, True):
        c = np.zeros(13, "float32")
        tc.build(s, [A, C], checks=checks)(a, c)
        outs.append(c)
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_array_equal(outs[1][2:12], a)


def test_checked_build_condition_guarding_a_store():
    A, B, i = _vec_bufs()
    body = For(i, Const(0), Const(10), "serial", IfThenElse(
        i < Const(8), BufferStore(B, BufferLoad(A, (i,), "float32"), (i,))))
    b = _call(PrimFunc("guarded", (A, B), body, {"target": "llvm"}))
    np.testing.assert_array_equal(b, np.arange(8, dtype="float32"))


@pytest.mark.parametrize("schedule", ["serial", "vectorized", "parallel"])
def test_index_read_from_memory_is_checked_without_checks(schedule):
    """A gather through an index tensor, built without checks=True: no check before the
    call can know where ids[i] points, so the access itself is checked.  Before, X[ids[i]]
    read past the table (id 100: garbage; id -1: the element before it)."""
    ids = tc.placeholder((6,), name="ids", dtype="int32")
    X = tc.placeholder((5, 4), name="X")
    G = tc.compute((6, 4), lambda i, j: X[ids[i], j] * 2, name="G")
    s = tc.create_schedule(G.op)
    if schedule == "vectorized":
        s[G].vectorize(G.op.axis[1])
    elif schedule == "parallel":
        s[G].parallel(G.op.axis[0])
    f = tc.build(s, [ids, X, G])
    x, g = np.arange(20, dtype="float32").reshape(5, 4), np.zeros((6, 4), "float32")
    f(np.array([4, 0, 3, 3, 1, 2], "int32"), x, g)
    np.testing.assert_array_equal(g, x[[4, 0, 3, 3, 1, 2]] * 2)
    for bad in (5, 100, -1):
        with pytest.raises(tc.BoundsError, match=rf"out-of-bounds load from buffer X: index {bad} "
                                                 rf"is outside \[0, 5\) in dimension 0, at "
                                                 rf"`X\[ids\[i\], j\]`"):
            f(np.array([4, 0, 3, bad, 1, 2], "int32"), x, g)
