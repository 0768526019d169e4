"""Overlapping arguments that every runtime takes: the same array for an input and the
output of an elementwise stage (in place, as numpy's ufuncs allow ``out=x``), views of
one array that share no element, inputs that overlap each other.  The refusals are in
tests/must_fail/test_overlap_errors.py."""
import numpy as np
import pytest

import tecomp as tc
from tecomp.lower.in_place import in_place_pairs
from tecomp.strategy import cuda as nn_cuda
from tecomp.runtime.argcheck import self_overlap


def _axpb(n=None):
    """B = A * 2 + W (A, W, B of one shape)."""
    n = n if n is not None else tc.var("n")
    A = tc.placeholder((n, 37), name="A")
    W = tc.placeholder((n, 37), name="W")
    B = tc.compute((n, 37), lambda i, j: A[i, j] * 2.0 + W[i, j], name="B")
    return A, W, B


def _schedules():
    """name -> a function (A, W, B) -> the schedule."""
    def plain(A, W, B):
        return tc.create_schedule(B.op)

    def fused(A, W, B):
        s = tc.create_schedule(B.op)
        f = s[B].fuse(*B.op.axis)
        o, i = s[B].split(f, factor=16)
        s[B].vectorize(i)
        s[B].parallel(o)
        return s

    def split_tail(A, W, B):          # an imperfect split: a partitioned, guarded tail
        s = tc.create_schedule(B.op)
        o, i = s[B].split(B.op.axis[1], factor=8)
        s[B].vectorize(i)
        s[B].reorder(o, B.op.axis[0], i)
        return s

    def inlined(A, W, B):             # two elementwise stages, one inlined into the other
        T = tc.compute(A.shape, lambda i, j: A[i, j] * 2.0, name="T")
        B2 = tc.compute(A.shape, lambda i, j: T[i, j] + W[i, j], name="B")
        s = tc.create_schedule(B2.op)
        s[T].compute_inline()
        return s, B2

    return {"plain": plain, "fused": fused, "split_tail": split_tail, "inlined": inlined}


def _modules(tmp_path, schedule):
    """The llvm module, the library it exports loaded back, and the cuda-emu module of
    one computation."""
    A, W, B = _axpb()
    s = schedule(A, W, B)
    if isinstance(s, tuple):
        s, B = s
    f = tc.build(s, [A, W, B])
    path = str(tmp_path / "axpb.so")
    f.export_library(path)
    g = tc.load_module(path)
    e = tc.build(nn_cuda.schedule_injective(B, "cuda-emu"), [A, W, B], target="cuda-emu")
    return f, g, e


@pytest.mark.parametrize("name", list(_schedules()))
def test_elementwise_stage_runs_in_place_everywhere(tmp_path, name):
    mods = _modules(tmp_path, _schedules()[name])
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 37)).astype("float32")
    w = rng.standard_normal((5, 37)).astype("float32")
    want = x * np.float32(2) + w
    for m in mods:
        for k in (0, 1):                       # B in place of A, then of W
            y = (x if k == 0 else w).copy()
            args = [x, w, y]
            args[k] = y
            m(*args)
            np.testing.assert_array_equal(y, want)
        # a strided view in place: the same view for A and B
        big = np.zeros((5, 74), "float32")
        v = big[:, ::2]
        v[...] = x
        m(v, w, v)
        np.testing.assert_array_equal(v, want)
        np.testing.assert_array_equal(big[:, 1::2], 0)
    f = mods[0]
    assert ("contiguous", False) in f.variants_compiled   # the aliasing-safe variant
    assert {(i.name, o.name) for i, o in in_place_pairs(f.prim_func)} == {("A", "B"), ("W", "B")}
    assert f.prim_func.attrs["written_once"] == (f.params[2],)


def test_interleaved_and_disjoint_views_share_no_element():
    A, W, B = _axpb()
    f = tc.build(tc.create_schedule(B.op), [A, W, B])
    base = np.arange(3 * 5 * 37, dtype="float32").reshape(3, 5, 37)
    flat = np.zeros(2 * 5 * 37, "float32")
    flat[0::2] = np.arange(5 * 37)
    # the output interleaved with an input (every other element), and rows of one array
    for a, w, out in ((flat[0::2].reshape(5, 37), base[1], flat[1::2].reshape(5, 37)),
                      (base[0], base[1], base[2]),
                      (base[0], base[0], base[2])):    # inputs may overlap each other
        out[...] = -1
        f(a, w, out)
        np.testing.assert_array_equal(out, a * 2 + w)


def test_a_transposed_or_negatively_strided_output_is_fine():
    A, W, B = _axpb(5)
    f = tc.build(tc.create_schedule(B.op), [A, W, B])
    x = np.ones((5, 37), "float32")
    for out in (np.zeros((37, 5), "float32").T, np.zeros((5, 37), "float32")[::-1, ::-1],
                np.zeros((10, 74), "float32")[::2, 1::2]):
        f(x, x, out)
        np.testing.assert_array_equal(out, 3)


def test_self_overlap_finds_two_elements_at_one_address():
    # distinct elements: contiguous, transposed, sliced, negative steps, one-element dims
    assert self_overlap((4, 4), (16, 4), 4) is None
    assert self_overlap((4, 4), (4, 16), 4) is None
    assert self_overlap((2, 3), (-48, 8), 4) is None
    assert self_overlap((1, 5), (0, 4), 4) is None          # stride 0 of a 1-extent dim
    assert self_overlap((0, 5), (0, 0), 4) is None          # no elements
    assert self_overlap((3, 2), (8, 12), 4) is None         # interleaved, yet distinct
    # repeats: a zero stride, sliding windows, strides that meet (4 * 1 == 1 * 4)
    assert self_overlap((3, 4), (0, 4), 4) == ((0, 0), (1, 0))
    assert self_overlap((3, 4), (8, 4), 4) == ((0, 2), (1, 0))
    assert self_overlap((4, 4), (4, 16), 16) is not None    # elements wider than a stride
    assert self_overlap((4, 4), (16, 4), 8) is not None     # 8-byte elements 4 bytes apart


def test_in_place_pairs_follow_the_computation():
    """Only inputs read at the output's own index, by the stage that writes it."""
    n = tc.var("n")
    A = tc.placeholder((n,), name="A")
    W = tc.placeholder((n,), name="W")
    k = tc.reduce_axis((0, n), "k")
    cases = {
        "elementwise": (lambda: tc.compute((n,), lambda i: A[i] * W[i], name="B"), {"A", "W"}),
        "stencil": (lambda: tc.compute((n,), lambda i: A[tc.min(i + 1, n - 1)] + W[i], name="B"),
                    {"W"}),
        "reverse": (lambda: tc.compute((n,), lambda i: A[n - 1 - i] + W[i], name="B"), {"W"}),
        "reduction": (lambda: tc.compute((n,), lambda i: tc.sum(A[k] * W[i], axis=k), name="B"),
                      set()),
        "select": (lambda: tc.compute((n,), lambda i: tc.if_then_else(A[i] > 0, A[i], W[i]),
                                      name="B"), {"A", "W"}),
    }
    for name, (make, want) in cases.items():
        B = make()
        f = tc.build(tc.create_schedule(B.op), [A, W, B])
        assert {i.name for i, _ in in_place_pairs(f.prim_func)} == want, name
    # a stage reading A through a cache: refused (A is loaded by the cache's stage)
    B = tc.compute((n,), lambda i: A[i] + W[i], name="B")
    s = tc.create_schedule(B.op)
    s.cache_read(A, "local", [B])
    f = tc.build(s, [A, W, B])
    assert {i.name for i, _ in in_place_pairs(f.prim_func)} == {"W"}
    # two outputs: each is written once, and A is read by both: in place of neither
    C = tc.compute((n,), lambda i: A[i] * 2.0, name="C")
    D = tc.compute((n,), lambda i: A[i] + 1.0, name="D")
    f = tc.build(tc.create_schedule([C.op, D.op]), [A, C, D])
    assert in_place_pairs(f.prim_func) == ()
