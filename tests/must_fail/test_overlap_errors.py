"""Outputs that overlap another argument or themselves: refused by every module kind (the
JIT llvm module, a loaded library, the CUDA emulation; the torch bridge in
test_torch_errors.py) with one ArgumentError naming both parameters, before the kernel
runs (the arrays are left as they were).  What is taken is in tests/test_in_place.py."""
import numpy as np
import pytest

import tecomp as tc
from tecomp.strategy import cuda as nn_cuda
from tecomp.runtime import argcheck


def _kinds(tmp_path, B, args, gpu_schedule=None):
    s = tc.create_schedule(B.op)
    f = tc.build(s, args)
    path = str(tmp_path / "k.so")
    f.export_library(path)
    e = tc.build(gpu_schedule() if gpu_schedule else nn_cuda.schedule_injective(B, "cuda-emu"),
                 args, target="cuda-emu")
    return {"llvm": f, "library": tc.load_module(path), "cuda-emu": e}


@pytest.fixture(scope="module")
def shift(tmp_path_factory):
    """B[i] = A[i] + 1 on every module kind."""
    n = tc.var("n")
    A = tc.placeholder((n,), name="A")
    B = tc.compute((n,), lambda i: A[i] + 1.0, name="B")
    return _kinds(tmp_path_factory.mktemp("shift"), B, [A, B])


def _refused(m, args, match):
    before = [np.array(a, copy=True) for a in args]
    with pytest.raises(tc.ArgumentError, match=match):
        m(*args)
    for a, b in zip(args, before):
        np.testing.assert_array_equal(a, b)          # the kernel did not run


@pytest.mark.parametrize("kind", ["llvm", "library", "cuda-emu"])
def test_an_output_overlapping_an_input(shift, kind):
    m = shift[kind]
    x = np.arange(17, dtype="float32")
    # B one element past A: a sequential loop and a vectorized one disagree on the result
    _refused(m, (x[:16], x[1:]), r"parameter A \(argument 1\) and parameter B \(argument 2\) "
                                 r"share memory, and main writes B: an output must not overlap "
                                 r"another argument .*pass a copy for A")
    _refused(m, (x[1:], x[:16]), r"share memory, and main writes B")
    # a view through a reversed step, and a contiguous block inside a strided input
    _refused(m, (x[15::-1], x[:16]), r"share memory, and main writes B")
    y = np.arange(32, dtype="float32")
    _refused(m, (y[::2], y[8:24]), r"share memory, and main writes B")
    # the same elements, but not the same array: A backwards, B forwards
    _refused(m, (x[:16][::-1], x[:16]), r"share memory, and main writes B")


@pytest.mark.parametrize("kind", ["llvm", "library", "cuda-emu"])
def test_an_output_overlapping_itself(shift, kind):
    m = shift[kind]
    a = np.ones(16, "float32")
    zero = np.lib.stride_tricks.as_strided(np.zeros(1, "float32"), (16,), (0,), writeable=True)
    _refused(m, (a, zero), r"parameter B \(argument 2\) is written by main, but its elements "
                           r"overlap: B\[0\] and B\[1\] are the same memory \(shape \(16,\), "
                           r"byte strides \(0,\): .*np\.empty\(shape\)")


def test_rows_that_overlap_and_strides_that_repeat(tmp_path):
    A = tc.placeholder((tc.var("n"), 4), name="A")
    B = tc.compute(A.shape, lambda i, j: A[i, j] * 2.0, name="B")
    for m in _kinds(tmp_path, B, [A, B]).values():
        a = np.ones((6, 4), "float32")
        mem = np.zeros(40, "float32")
        windows = np.lib.stride_tricks.as_strided(mem, (6, 4), (8, 4), writeable=True)
        _refused(m, (a, windows), r"parameter B \(argument 2\) is written by main, but its "
                                  r"elements overlap: B\[0, 2\] and B\[1, 0\] are the same memory")
        # element strides (1, 4) over 6 rows: B[4, 0] and B[0, 1] are one element
        sq = np.lib.stride_tricks.as_strided(mem, (6, 4), (4, 16), writeable=True)
        _refused(m, (a, sq), r"but its elements overlap: B\[\d, \d\] and B\[\d, \d\] are the "
                             r"same memory")


def test_strides_tecomp_cannot_prove_distinct(monkeypatch):
    """An output with strides no simple rule proves distinct: its elements' addresses are
    compared; past SELF_OVERLAP_ELEMENTS it is refused as unproved."""
    A = tc.placeholder((3, 2), name="A")
    B = tc.compute(A.shape, lambda i, j: A[i, j] + 1.0, name="B")
    f = tc.build(tc.create_schedule(B.op), [A, B])
    mem = np.zeros(8, "float32")
    out = np.lib.stride_tricks.as_strided(mem, (3, 2), (8, 12), writeable=True)  # distinct
    a = np.arange(6, dtype="float32").reshape(3, 2)
    f(a, out)
    np.testing.assert_array_equal(out, a + 1)
    monkeypatch.setattr(argcheck, "SELF_OVERLAP_ELEMENTS", 4)
    _refused(f, (a, out), r"parameter B \(argument 2\) is written by main, but tecomp cannot "
                          r"prove that its elements are distinct \(shape \(3, 2\), byte strides "
                          r"\(8, 12\)\).*np\.ascontiguousarray")


def test_views_numpy_cannot_tell_apart_in_bounded_work(shift, monkeypatch):
    """Interleaved views are compared exactly (numpy.shares_memory) within OVERLAP_WORK;
    where that is not enough they count as overlapping."""
    x = np.arange(32, dtype="float32")
    m = shift["llvm"]
    m(x[0::2], x[1::2])                              # told apart: no element in both
    np.testing.assert_array_equal(x[1::2], x[0::2] + 1)
    monkeypatch.setattr(argcheck, "OVERLAP_WORK", 0)
    _refused(m, (x[0::2], x[1::2]), r"parameter A \(argument 1\) and parameter B \(argument 2\) "
                                    r"may share memory \(their elements interleave in a way "
                                    r"tecomp cannot tell apart\), and main writes B")


def test_two_outputs_in_one_array(tmp_path):
    A = tc.placeholder((8,), name="A")
    C = tc.compute((8,), lambda i: A[i] * 2.0, name="C")
    D = tc.compute((8,), lambda i: A[i] + 1.0, name="D")
    f = tc.build(tc.create_schedule([C.op, D.op]), [A, C, D])
    a, c = np.ones(8, "float32"), np.zeros(8, "float32")
    _refused(f, (a, c, c), r"parameter C \(argument 2\) and parameter D \(argument 3\) are the "
                           r"same array, and main writes both: pass a separate array for each "
                           r"output")
    # A is read by both stages: in place of neither
    _refused(f, (a, a, c), r"parameter A \(argument 1\) and parameter C \(argument 2\) are the "
                           r"same array, and main writes C, but tecomp cannot prove")


def _not_elementwise():
    """name -> (output, inputs): computations that may not run in place of A."""
    n = 16
    A = tc.placeholder((n,), name="A")
    k = tc.reduce_axis((0, n), "k")
    A2 = tc.placeholder((4, 4), name="A")
    return {
        "stencil": (tc.compute((n,), lambda i: A[i] + A[tc.min(i + 1, n - 1)], name="B"), [A]),
        "reverse": (tc.compute((n,), lambda i: A[n - 1 - i], name="B"), [A]),
        "transpose": (tc.compute((4, 4), lambda i, j: A2[j, i], name="B"), [A2]),
        "reduction": (tc.compute((n,), lambda i: tc.sum(A[k] * A[i], axis=k), name="B"), [A]),
    }


@pytest.mark.parametrize("name", list(_not_elementwise()))
def test_in_place_of_a_stage_that_is_not_elementwise(tmp_path, name):
    B, ins = _not_elementwise()[name]
    args = ins + [B]

    def gpu():
        s = tc.create_schedule(B.op)
        ax = s[B].fuse(*B.op.axis) if len(B.op.axis) > 1 else B.op.axis[0]
        s[B].bind(ax, tc.thread_axis("threadIdx.x"))
        return s

    for kind, m in _kinds(tmp_path, B, args, gpu).items():
        x = np.arange(16, dtype="float32").reshape(tuple(int(d) for d in ins[0].shape))
        _refused(m, (x, x), r"parameter A \(argument 1\) and parameter B \(argument 2\) are the "
                            r"same array, and main writes B, but tecomp cannot prove that it may "
                            r"compute B in place of A: only a stage that computes each element "
                            r"of B once, from the same element of A alone, can")


def test_in_place_where_a_gpu_store_runs_on_threads_it_is_not_bound_to():
    """B is bound to blockIdx.x only, in a kernel whose shared-memory stage uses
    threadIdx.x: every thread of a block runs B's store, and in place the second run
    would read what the first wrote.  W (read only by B's store) is refused in place."""
    n = 64
    A = tc.placeholder((n,), name="A")
    W = tc.placeholder((n,), name="W")
    B = tc.compute((n,), lambda i: A[i] * 2.0 + W[i], name="B")
    s = tc.create_schedule(B.op)
    AS = s.cache_read(A, "shared", [B])
    bo, _ = s[B].split(B.op.axis[0], factor=16)
    s[B].bind(bo, tc.thread_axis("blockIdx.x"))
    s[AS].compute_at(s[B], bo)
    s[AS].bind(s[AS].op.axis[0], tc.thread_axis("threadIdx.x"))
    f = tc.build(s, [A, W, B], target="cuda-emu")
    a = np.arange(n, dtype="float32")
    w = np.ones(n, "float32")
    _refused(f, (a, w, w), r"parameter W \(argument 2\) and parameter B \(argument 3\) are the "
                           r"same array, and main writes B, but tecomp cannot prove")
    out = np.zeros(n, "float32")
    f(a, w, out, mode="serial")                      # apart, it is right
    np.testing.assert_array_equal(out, a * 2 + 1)
