"""Calls that must fail: a compiled kernel given arguments that do not match its
parameters.  Each raises ArgumentError naming the parameter (name and position), what it
expects and what it got -- before the kernel touches memory -- and the module still works
afterwards."""
import os
import re
import shutil

import numpy as np
import pytest

import tecomp as tc
import small_programs as sp  # tests/must_fail/small_programs.py
from tecomp.ir import interp


@pytest.fixture(scope="module")
def scaled():
    """B[2n, 4] = A[i // 2, j] * alpha, with n bound from A and alpha a float32 scalar."""
    n = tc.var("n")
    alpha = tc.var("alpha", "float32")
    A = tc.placeholder((n, 4), name="A")
    B = tc.compute((n * 2, 4), lambda i, j: A[i // 2, j] * alpha, name="B")
    s = tc.create_schedule(B.op)
    return tc.build(s, [A, B, alpha]), s, [A, B, alpha]


@pytest.fixture(scope="module")
def int_kernel():
    k = tc.var("k")
    X = tc.placeholder((4,), dtype="int8", name="X")
    Y = tc.compute((4,), lambda i: X[i] + k.astype("int8"), name="Y")
    s = tc.create_schedule(Y.op)
    return tc.build(s, [X, Y, k])


def _a(n=3):
    return np.ones((n, 4), "float32")


def _b(n=3):
    return np.zeros((2 * n, 4), "float32")


def _still_works(f):
    b = _b()
    f(_a(), b, 2.0)
    np.testing.assert_array_equal(b, np.full((6, 4), 2.0, "float32"))


def test_too_many_arguments(scaled):
    f = scaled[0]
    with pytest.raises(tc.ArgumentError, match=r"main expects 3 arguments \(A, B, alpha\), got 4"):
        f(_a(), _b(), 1.0, 2)
    _still_works(f)


def test_no_arguments(scaled):
    with pytest.raises(tc.ArgumentError, match=r"main expects 3 arguments \(A, B, alpha\), got 0"):
        scaled[0]()


def test_list_instead_of_array(scaled):
    with pytest.raises(tc.ArgumentError, match=r"parameter A \(argument 1\) expects an array \(numpy\.ndarray, [^)]*\) "
                                               r"of float32 with shape \(n, 4\), got a list: convert with np\.asarray"):
        scaled[0]([[1.0] * 4] * 3, _b(), 1.0)


def test_wrong_dtype_is_not_converted(scaled):
    with pytest.raises(tc.ArgumentError, match=r"parameter A \(argument 1\) expects float32, got "
                                               r"float64: convert with a\.astype\(np\.float32\)"):
        scaled[0](_a().astype("float64"), _b(), 1.0)


def test_wrong_ndim(scaled):
    with pytest.raises(tc.ArgumentError, match=r"parameter B \(argument 2\) expects a 2-d array of "
                                               r"shape \(n\*2, 4\), got a 3-d array of shape \(6, 4, 1\)"):
        scaled[0](_a(), _b()[:, :, None], 1.0)


def test_constant_extent_mismatch(scaled):
    with pytest.raises(tc.ArgumentError, match=r"parameter A \(argument 1\) expects A\.shape\[1\] = 4, "
                                               r"got 3"):
        scaled[0](np.ones((3, 3), "float32"), _b(), 1.0)


def test_transposed_view_has_the_wrong_shape(scaled):
    with pytest.raises(tc.ArgumentError, match=r"expects A\.shape\[1\] = 4, got 3 .*got \(4, 3\)"):
        scaled[0](np.ones((3, 4), "float32").T, _b(), 1.0)


def test_symbolic_shape_expression_mismatch(scaled):
    with pytest.raises(tc.ArgumentError, match=r"B\.shape\[0\] = 5 but parameter B \(argument 2\) "
                                               r"expects n\*2 = 6 \(n = 3 from A\.shape\[0\]\)"):
        scaled[0](_a(), np.zeros((5, 4), "float32"), 1.0)
    _still_works(scaled[0])


def test_read_only_output(scaled):
    b = _b()
    b.flags.writeable = False
    with pytest.raises(tc.ArgumentError, match=r"parameter B \(argument 2\) is written by main, but "
                                               r"the array is read-only"):
        scaled[0](_a(), b, 1.0)


def test_broadcast_view_as_output(scaled):
    with pytest.raises(tc.ArgumentError, match=r"parameter B \(argument 2\) is written by main.*read-only"):
        scaled[0](_a(), np.broadcast_to(np.float32(0), (6, 4)), 1.0)


def test_unaligned_view(scaled):
    raw = np.zeros(4 * 24 + 1, np.uint8)[1:].view(np.float32).reshape(6, 4)
    with pytest.raises(tc.ArgumentError, match=r"parameter B \(argument 2\): the array is not aligned "
                                               r"to its 4-byte elements"):
        scaled[0](_a(), raw, 1.0)


@pytest.mark.parametrize("bad,what", [("x", r"str 'x'"), (None, r"NoneType None"),
                                      (True, r"bool True"), (np.array([1.0]), r"a 1-d float64 array")])
def test_float_scalar_of_wrong_type(scaled, bad, what):
    with pytest.raises(tc.ArgumentError, match=r"parameter alpha \(argument 3\) expects a number "
                                               r"\(float32\), got " + what):
        scaled[0](_a(), _b(), bad)


def test_int_scalar_out_of_range(int_kernel):
    with pytest.raises(tc.ArgumentError, match=r"parameter k \(argument 3\) = 2147483648 does not fit "
                                               r"int32 \[-2147483648, 2147483647\]"):
        int_kernel(np.zeros(4, "int8"), np.zeros(4, "int8"), 2**31)


@pytest.mark.parametrize("bad,what", [(1.5, "float 1.5"), (np.float32(2.0), r"float32 np\.float32\(2\.0\)"),
                                      ("a", "str 'a'")])
def test_int_scalar_of_wrong_type(int_kernel, bad, what):
    with pytest.raises(tc.ArgumentError, match=r"parameter k \(argument 3\) expects an integer "
                                               r"\(int32\), got " + what):
        int_kernel(np.zeros(4, "int8"), np.zeros(4, "int8"), bad)


def test_numpy_integer_scalar_is_accepted(int_kernel):
    y = np.zeros(4, "int8")
    int_kernel(np.arange(4, dtype="int8"), y, np.int64(3))
    np.testing.assert_array_equal(y, np.arange(4, dtype="int8") + 3)


def test_integers_by_index_are_accepted(int_kernel):
    """Anything with __index__ is an integer (as Python's own int arguments take it): a
    0-d integer array or torch tensor, an object of one's own."""
    class Three:
        def __index__(self):
            return 3

    x = np.arange(4, dtype="int8")
    for k in (Three(), np.array(3), np.uint8(3)):
        y = np.zeros(4, "int8")
        int_kernel(x, y, k)
        np.testing.assert_array_equal(y, x + 3)
    torch = pytest.importorskip("torch")
    y = np.zeros(4, "int8")
    int_kernel(x, y, torch.tensor(3))
    np.testing.assert_array_equal(y, x + 3)
    with pytest.raises(tc.ArgumentError, match=r"parameter k \(argument 3\) expects an integer "
                                               r"\(int32\), got Tensor tensor\(3\.\), whose "
                                               r"__index__ raised TypeError"):
        int_kernel(x, y, torch.tensor(3.0))


def test_floats_that_stay_what_they_are_are_accepted(scaled):
    """inf and nan are passed as they are, the largest float32 too; a finite value that
    would round to infinity is refused (test_call_errors_unified.py)."""
    f = scaled[0]
    top = float(np.finfo(np.float32).max)
    for alpha, want in ((float("inf"), np.inf), (-float("inf"), -np.inf), (top, top),
                        (top * (1 + 2**-26), top), (2**100, 2.0**100), (np.float64(0.5), 0.5)):
        b = _b()
        f(_a(), b, alpha)
        np.testing.assert_array_equal(b, np.full((6, 4), want, "float32"))
    b = _b()
    f(_a(), b, float("nan"))
    assert np.isnan(b).all()
    with pytest.raises(tc.ArgumentError, match=r"parameter alpha \(argument 3\) = -1e\+39 does "
                                               r"not fit float32"):
        f(_a(), b, -1e39)
    with pytest.raises(tc.ArgumentError, match=r"parameter alpha \(argument 3\) = an integer of "
                                               r"1025 bits does not fit float32"):
        f(_a(), b, -2**1024)


def test_keyword_arguments(int_kernel):
    with pytest.raises(tc.ArgumentError, match=r"takes its arguments by position \(.*\); got keyword argument\(s\) X: pass them in that order"):
        int_kernel(X=np.zeros(4, "int8"))


def _scalar_extent():
    """C[0] = sum(B[k] for k < n), B[n] = A[i % 8] * 2: n is a scalar parameter used as
    an extent (of B's axis and of the reduce axis k), not derived from an array."""
    n = tc.var("n")
    A = tc.placeholder((8,), name="A")
    B = tc.compute((n,), lambda i: A[i % 8] * 2, name="B")
    k = tc.reduce_axis((0, n), name="k")
    C = tc.compute((1,), lambda i: tc.sum(B[k], axis=k), name="C")
    return tc.create_schedule(C.op), [A, C, n]


_NEGATIVE_N = (r"parameter n \(argument 3\) = -3 must be >= 0: it is the extent of axis i of "
               r"stage B and the extent of reduce axis k of stage C; pass n >= 0")


def test_negative_scalar_extent():
    """n = -3 (for `allocate B: float32[n]` and `for (k, 0, n)`) used to run in the LLVM
    build as if n were 0, while the interpreter raised ShapeError from the allocation.
    Lowering records that the extent n must be >= 0 (PrimFunc.attrs["param_checks"]); the
    CPU runtime (fast path and generic path) and the interpreter check it first."""
    s, args = _scalar_extent()
    f = tc.build(s, args)
    for n in (-3, np.int64(-3), np.array(-3, "int32")):  # the fast path, then the generic one
        with pytest.raises(tc.ArgumentError, match=_NEGATIVE_N):
            f(np.ones(8, "float32"), np.zeros(1, "float32"), n)
    with pytest.raises(tc.ArgumentError, match=_NEGATIVE_N):
        interp.run(tc.lower(s, args), np.ones(8, "float32"), np.zeros(1, "float32"), -3)
    c = np.zeros(1, "float32")
    f(np.ones(8, "float32"), c, 3)
    assert c[0] == 6


def test_negative_compound_scalar_extent():
    """A reduce axis (lo, hi) of two scalars: its extent hi - lo must be >= 0; lo alone
    (an offset) may be negative."""
    lo, hi = tc.var("lo"), tc.var("hi")
    A = tc.placeholder((16,), name="A")
    k = tc.reduce_axis((lo, hi), name="k")
    C = tc.compute((1,), lambda i: tc.sum(A[k % 16], axis=k), name="C")
    s = tc.create_schedule(C.op)
    args = [A, C, lo, hi]
    f = tc.build(s, args)
    a = np.arange(16, dtype="float32")
    msg = (r"hi - lo = -2 must be >= 0 \(hi = 3 from parameter hi \(argument 4\), lo = 5 from "
           r"parameter lo \(argument 3\)\): it is the extent of reduce axis k of stage C; pass "
           r"values of hi, lo for which hi - lo >= 0")
    with pytest.raises(tc.ArgumentError, match=msg):
        f(a, np.zeros(1, "float32"), 5, 3)
    with pytest.raises(tc.ArgumentError, match=msg):
        interp.run(tc.lower(s, args), a, np.zeros(1, "float32"), 5, 3)
    c = np.zeros(1, "float32")
    f(a, c, -2, 2)  # k in [-2, 2): A[14] + A[15] + A[0] + A[1]
    assert c[0] == 14 + 15 + 0 + 1


def _float_extent():
    """C[0] = sum(A[min(k, 7)] for k < int32(x)): the extent of k a float scalar cast to
    int32 (the build was an InternalError, "the extent of loop k `int32(x)` does not fit
    int32")."""
    x = tc.var("x", "float32")
    A = tc.placeholder((8,), name="A")
    k = tc.reduce_axis((0, x.astype("int32")), name="k")
    C = tc.compute((1,), lambda i: tc.sum(A[tc.min(k, 7)], axis=k), name="C")
    return tc.build(tc.create_schedule(C.op), [A, C, x])


_FLOAT_EXTENT = (r"`int32\(x\)` converts the float {} to int32, and a float outside int32's "
                 r"range \[-2147483648, 2147483647\] \(or NaN, an infinity\) has no defined "
                 r"conversion \(x = {}\): pass values for which it is in range")


def test_a_float_cast_to_an_extent_out_of_range_is_refused():
    """The call checks a float scalar's conversion where the host evaluates it (the
    extent's check, a launch size): NaN, an infinity or a float past int32 has no defined
    conversion, and the host's value (once a raw ValueError, or 1e30 wrapped to a positive
    extent) would not be the kernel's."""
    f = _float_extent()
    a = np.arange(8, dtype="float32")
    c = np.zeros(1, "float32")
    f(a, c, 3.9)
    assert c[0] == 3
    for v, text in ((float("nan"), "nan"), (float("inf"), "inf"), (-float("inf"), "-inf"),
                    (1e30, "1e\\+30"), (np.float32(3e9), "3000000000.0")):
        with pytest.raises(tc.ArgumentError, match=_FLOAT_EXTENT.format(text, ".*")):
            f(a, c, v)


@pytest.mark.parametrize("runner", ["llvm", "interp"])
def test_negative_scalar_offset_and_multiplier_are_fine(runner):
    """Scalars that are only values (an offset in an index, a multiplier) are not extents:
    no lower bound is recorded for them and negative values run.  (The one record is the
    int32 range of the index arithmetic ``i + off``, which ``%`` reads exactly: ``off`` at
    most 2**31 - 8; see test_index_dtype.py.)"""
    off, m = tc.var("off"), tc.var("m")
    A = tc.placeholder((8,), name="A")
    C = tc.compute((8,), lambda i: A[(i + off) % 8] * m.astype("float32"), name="C")
    s = tc.create_schedule(C.op)
    args = [A, C, off, m]
    func = tc.lower(s, args)
    checks = func.attrs["param_checks"]
    assert [(str(pc.expr), pc.lower, pc.upper) for pc in checks] == [
        ("off + 7", -(2**31), 2**31 - 1)]
    a = np.arange(8, dtype="float32")
    c = np.zeros(8, "float32")
    if runner == "llvm":
        tc.build(s, args)(a, c, -3, -2)
    else:
        interp.run(func, a, c, -3, -2)
    np.testing.assert_array_equal(c, np.roll(a, 3) * -2)


def _symbolic_split():
    """C[n] = A[i] + 1 with i split by the scalar parameter f."""
    n, f = tc.var("n"), tc.var("f")
    A = tc.placeholder((n,), name="A")
    C = tc.compute((n,), lambda i: A[i] + 1, name="C")
    s = tc.create_schedule(C.op)
    s[C].split(C.op.axis[0], factor=f)
    return s, [A, C, f]


@pytest.mark.parametrize("factor", [0, -2])
def test_symbolic_split_factor_below_one(factor):
    """A split by a symbolic factor f given 0 (or a negative value) used to compute nothing
    silently (the outer loop runs (n - 1) // f + 1 times, 0 with a division by zero)."""
    s, args = _symbolic_split()
    msg = (rf"parameter f \(argument 3\) = {factor} must be >= 1: it is the split factor of axis "
           rf"i of stage C; pass f >= 1")
    f = tc.build(s, args)
    with pytest.raises(tc.ArgumentError, match=msg):
        f(np.ones(10, "float32"), np.zeros(10, "float32"), factor)
    with pytest.raises(tc.ArgumentError, match=msg):
        interp.run(tc.lower(s, args), np.ones(10, "float32"), np.zeros(10, "float32"), factor)


def test_symbolic_split_nparts_below_one():
    p = tc.var("p")
    A = tc.placeholder((10,), name="A")
    C = tc.compute((10,), lambda i: A[i] + 1, name="C")
    s = tc.create_schedule(C.op)
    s[C].split(C.op.axis[0], nparts=p)
    f = tc.build(s, [A, C, p])
    with pytest.raises(tc.ArgumentError, match=r"parameter p \(argument 3\) = 0 must be >= 1: it is "
                                               r"the nparts of the split of axis i of stage C; "
                                               r"pass p >= 1"):
        f(np.ones(10, "float32"), np.zeros(10, "float32"), 0)
    c = np.zeros(10, "float32")
    f(np.ones(10, "float32"), c, 3)
    np.testing.assert_array_equal(c, np.full(10, 2, "float32"))


@pytest.mark.parametrize("factor", [1, 3, 10, 64])
def test_symbolic_split_factor_at_least_one_runs(factor):
    s, args = _symbolic_split()
    a = np.arange(10, dtype="float32")
    c = np.zeros(10, "float32")
    tc.build(s, args)(a, c, factor)
    np.testing.assert_array_equal(c, a + 1)
    c = np.zeros(10, "float32")
    interp.run(tc.lower(s, args), a, c, factor)
    np.testing.assert_array_equal(c, a + 1)


@pytest.mark.skipif(shutil.which(os.environ.get("CXX", "g++")) is None, reason="needs g++")
def test_negative_scalar_extent_in_the_cuda_emulation():
    """The CUDA runtimes share the check (tecomp.runtime.argcheck)."""
    n = tc.var("n")
    A = tc.placeholder((8,), name="A")
    k = tc.reduce_axis((0, n), name="k")
    C = tc.compute((8,), lambda i: tc.sum(A[(i + k) % 8], axis=k), name="C")
    s = tc.create_schedule(C.op)
    bx, tx = s[C].split(C.op.axis[0], factor=4)
    s[C].bind(bx, tc.thread_axis("blockIdx.x"))
    s[C].bind(tx, tc.thread_axis("threadIdx.x"))
    f = tc.build(s, [A, C, n], target="cuda-emu")
    with pytest.raises(tc.ArgumentError, match=r"parameter n \(argument 3\) = -1 must be >= 0: "
                                               r"it is the extent of reduce axis k of stage C"):
        f(np.ones(8, "float32"), np.zeros(8, "float32"), -1)
    c = np.zeros(8, "float32")
    f(np.ones(8, "float32"), c, 3)
    np.testing.assert_array_equal(c, np.full(8, 3, "float32"))


def test_zero_scalar_extent_is_fine():
    n = tc.var("n")
    A = tc.placeholder((8,), name="A")
    k = tc.reduce_axis((0, n), name="k")
    C = tc.compute((1,), lambda i: tc.sum(A[k % 8], axis=k), name="C")
    f = tc.build(tc.create_schedule(C.op), [A, C, n])
    c = np.full(1, 7.0, "float32")
    f(np.ones(8, "float32"), c, 0)
    assert c[0] == 0


def test_the_interpreter_checks_arguments_too(scaled):
    _, s, args = scaled
    func = tc.lower(s, args)
    with pytest.raises(tc.ArgumentError, match=r"main takes 3 argument\(s\) \(A, B, alpha\), got 1"):
        interp.run(func, _a())
    with pytest.raises(tc.ArgumentError, match=r"argument A of main must have dtype float32, got int16"):
        interp.run(func, _a().astype("int16"), _b(), 1.0)
    with pytest.raises(tc.ArgumentError, match=r"argument A of main must be a numpy array, got list"):
        interp.run(func, [1.0], _b(), 1.0)


@pytest.mark.skipif(shutil.which(os.environ.get("CXX", "g++")) is None, reason="needs g++")
def test_cuda_emulation_checks_arguments_like_the_cpu_runtime():
    n = tc.var("n")
    A = tc.placeholder((n,), name="A")
    B = tc.compute((n,), lambda i: A[i] + 1, name="B")
    s = tc.create_schedule(B.op)
    xo, xi = s[B].split(B.op.axis[0], factor=4)
    s[B].bind(xo, tc.thread_axis("blockIdx.x"))
    s[B].bind(xi, tc.thread_axis("threadIdx.x"))
    f = tc.build(s, [A, B], target="cuda-emu")
    with pytest.raises(tc.ArgumentError, match=r"expects? .*2 arguments|takes 2"):
        f(np.zeros(5, "float32"))
    with pytest.raises(tc.ArgumentError, match=r"float32.*float64|float64.*float32"):
        f(np.zeros(5), np.zeros(5, "float32"))
    with pytest.raises(tc.ArgumentError, match=r"B"):
        f(np.zeros(5, "float32"), np.zeros(6, "float32"))
    b = np.zeros(5, "float32")
    f(np.arange(5, dtype="float32"), b)
    np.testing.assert_array_equal(b, np.arange(5) + 1)


@pytest.mark.skipif(shutil.which(os.environ.get("CXX", "g++")) is None, reason="needs g++")
def test_cuda_emulation_refuses_a_cache_others_can_write(tmp_path, monkeypatch):
    """A library planted in a shared cache (with a matching sha256 sidecar) would be
    loaded and run: a cache directory other users may write to is refused."""
    shared = tmp_path / "shared"
    (shared / "cuda_emu").mkdir(parents=True)
    (shared / "cuda_emu").chmod(0o777)
    monkeypatch.setenv("TECOMP_CACHE_DIR", str(shared))
    A = tc.placeholder((8,), name="A")
    C = tc.compute((8,), lambda i: A[i] * 3.0, name="C")
    s = tc.create_schedule(C.op)
    s[C].bind(C.op.axis[0], tc.thread_axis("threadIdx.x"))
    with pytest.raises(tc.BuildError, match=r"the CUDA emulation cache .*cuda_emu is writable "
                                            r"by other users \(mode 777.*chmod 700"):
        tc.build(s, [A, C], target="cuda-emu")


def _emu_kernel_in(tmp_path, monkeypatch, k: float):
    """``C = A * k`` over 8 GPU threads, lowered for the CUDA emulation, with the
    emulation's library cache in ``tmp_path`` (none loaded yet): ``(s, A, C, func)``."""
    from tecomp.codegen import cuda_emu

    monkeypatch.setenv("TECOMP_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cuda_emu, "_LIBS", {})
    A = tc.placeholder((8,), name="A")
    C = tc.compute((8,), lambda i: A[i] * k, name="C")
    s = tc.create_schedule(C.op)
    s[C].bind(C.op.axis[0], tc.thread_axis("threadIdx.x"))
    return s, A, C, tc.lower(s, [A, C], target="cuda-emu")


@pytest.mark.skipif(shutil.which(os.environ.get("CXX", "g++")) is None, reason="needs g++")
def test_cuda_emulation_cache_entry_taken_by_a_directory(tmp_path, monkeypatch):
    """A directory where the library's cache entry goes: a BuildError naming the entry
    (the rename onto it raised a bare IsADirectoryError from the build before)."""
    from tecomp.codegen import cuda_emu
    from tecomp.codegen.cuda import codegen_cuda

    s, A, C, func = _emu_kernel_in(tmp_path, monkeypatch, 3.0)
    key = cuda_emu._library_key(codegen_cuda(func))[0]
    (tmp_path / "cuda_emu" / f"{key}.so").mkdir(parents=True)
    with pytest.raises(tc.BuildError, match=r"cannot write the CUDA emulation cache entry "
                                            r".*cuda_emu/[0-9a-f]{32}\.so or its sidecar \(Is a "
                                            r"directory\): remove what is in their place"):
        tc.build(s, [A, C], target="cuda-emu")


@pytest.mark.skipif(shutil.which(os.environ.get("CXX", "g++")) is None, reason="needs g++")
@pytest.mark.parametrize("limit", [8 << 10, 75 << 10])
def test_cuda_emulation_build_on_a_full_disk(tmp_path, monkeypatch, limit):
    """A disk that fills up (here: a file size limit, the same errors) while the library
    is built: a BuildError naming the directory and what to do, nothing left behind.
    8 KiB: the emulation header's copy cannot be written (a raw OSError from the build
    before); 75 KiB: the compiler's output cannot (reported as "likely a tecomp bug")."""
    import resource

    func = _emu_kernel_in(tmp_path, monkeypatch, 5.0)[3]
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        with pytest.raises(tc.BuildError, match=r"cannot write the CUDA emulation library's "
                                                r"build files in .*cuda_emu \((File too large|"
                                                r"File size limit exceeded)\): free space there"):
            tc.build(func, target="cuda-emu")
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert not [p for p in (tmp_path / "cuda_emu").iterdir() if p.name.startswith("build-")]


def test_cubin_cache_others_may_write_to(tmp_path, monkeypatch):
    """The cubin cache holds code that is loaded and run: one that other users may write
    to is refused, as the emulation's is."""
    from tecomp.runtime.nvcc import compile_cubin, find_nvcc

    if find_nvcc() is None:
        pytest.skip("nvcc is not on PATH")
    shared = tmp_path / "shared"
    (shared / "cuda").mkdir(parents=True)
    (shared / "cuda").chmod(0o777)
    monkeypatch.setenv("TECOMP_CACHE_DIR", str(shared))
    with pytest.raises(tc.BuildError, match=r"the CUDA compile cache .*cuda is writable by "
                                            r"other users \(mode 777.*chmod 700"):
        compile_cubin('extern "C" __global__ void k() {}', "sm_80")


def _double():
    A = tc.placeholder((64,), name="A")
    C = tc.compute((64,), lambda i: A[i] * 2.0, name="C")
    return tc.build(tc.create_schedule(C.op), [A, C])


class _Claims:
    """An object whose __array_interface__ claims 64 floats over a buffer of 4."""

    def __init__(self, small):
        self.small = small
        self.__array_interface__ = {"shape": (64,), "typestr": "<f4", "version": 3,
                                    "data": (small.__array_interface__["data"][0], False)}


def test_array_interface_claiming_more_than_its_buffer():
    f = _double()
    small = np.ones(4, "float32")
    with pytest.raises(tc.ArgumentError, match=r"A \(argument 1\): the array's memory comes from "
                                               r"a .*_Claims object through a raw pointer"):
        f(np.asarray(_Claims(small)), np.zeros(64, "float32"))


def test_as_strided_past_its_base():
    f = _double()
    x = np.ones(16, "float32")
    big = np.lib.stride_tricks.as_strided(x, shape=(64,), strides=(4,))
    with pytest.raises(tc.ArgumentError, match=r"A \(argument 1\): the array's elements span "
                                               r"bytes .* but the numpy.ndarray its memory comes "
                                               r"from holds .* \(64 bytes\)"):
        f(big, np.zeros(64, "float32"))
    out = np.lib.stride_tricks.as_strided(np.zeros(16, "float32"), shape=(64,), strides=(4,))
    with pytest.raises(tc.ArgumentError, match=r"C \(argument 2\): the array's elements span"):
        f(np.ones(64, "float32"), out)


def test_views_that_stay_inside_their_memory_are_accepted():
    f = _double()
    x = np.arange(128, dtype="float32")
    c = np.zeros(64, "float32")
    for a in (x[64:], x.reshape(2, 64)[1], x[::2],
              np.lib.stride_tricks.as_strided(x, shape=(64,), strides=(8,)),
              np.frombuffer(bytearray(x[:64].tobytes()), "float32"),
              np.asarray(memoryview(x[:64]))):
        f(a, c)
        np.testing.assert_array_equal(c, a * 2)


def test_torch_backed_arrays_are_accepted():
    torch = pytest.importorskip("torch")
    f = _double()
    t = torch.arange(128, dtype=torch.float32)
    c = np.zeros(64, "float32")
    a = t[64:].numpy()
    f(a, c)
    np.testing.assert_array_equal(c, a * 2)


# ---------------------------------------------------------------------------------
# calling compiled kernels (once tecomp.testing.bad_inputs)


def test_call_too_few():
    with pytest.raises(tc.ArgumentError, match=r"main expects 2 arguments \(A, B\), got 1"):
        f, A, B = sp.add_kernel()
        f(np.zeros(8, "float32"))


def test_call_list_argument():
    with pytest.raises(tc.ArgumentError,
                       match=r"expects an array \(numpy\.ndarray, [^)]*\) of float32"):
        f, A, B = sp.add_kernel()
        f([0.0] * 8, np.zeros(8, "float32"))


def test_call_none_argument():
    with pytest.raises(tc.ArgumentError,
                       match=r"expects an array \(numpy\.ndarray, [^)]*\) of float32"):
        f, A, B = sp.add_kernel()
        f(None, np.zeros(8, "float32"))


def test_call_wrong_dtype():
    with pytest.raises(tc.ArgumentError, match=r"expects float32, got float64"):
        f, A, B = sp.add_kernel()
        f(np.zeros(8), np.zeros(8, "float32"))


def test_call_empty_array():
    with pytest.raises(tc.ArgumentError, match=r"expects B\.shape\[0\] = 8, got 0"):
        f, A, B = sp.add_kernel()
        f(np.zeros(8, "float32"), np.zeros(0, "float32"))


def test_call_readonly_output():
    with pytest.raises(tc.ArgumentError, match=r"read-only"):
        f, A, B = sp.add_kernel()
        out = np.zeros(8, "float32")
        out.flags.writeable = False
        f(np.zeros(8, "float32"), out)


def test_call_numpy_scalar():
    with pytest.raises(tc.ArgumentError,
                       match=r"parameter A \(argument 1\) expects an array \(numpy\.ndarray, [^)]*\) of float32 with shape \(8,\), got float32"):
        f, A, B = sp.add_kernel()
        f(np.float32(1.0), np.zeros(8, "float32"))


def test_call_0d_array():
    with pytest.raises(tc.ArgumentError,
                       match=r"A \(argument 1\) expects a 1-d array|expects a 1-d array"):
        f, A, B = sp.add_kernel()
        f(np.array(1.0, "float32"), np.zeros(8, "float32"))


def _scratch_of_n():
    """C[i] = T[i] + 1 with T[n] a scratch buffer of the scalar extent n (int64)."""
    n = tc.var("n", "int64")
    A = tc.placeholder((4,), name="A")
    T = tc.compute((n,), lambda i: A[i % 4] * 2.0, name="T")
    C = tc.compute((4,), lambda i: T[i] + 1.0, name="C")
    return tc.create_schedule(C.op), [A, C, n]


@pytest.mark.parametrize("n", [2 ** 61, 2 ** 63 - 1])
def test_scratch_size_past_64_bits(n):
    """n * 4 bytes past 2^63 used to wrap to a small allocation that the loop then wrote
    past (a segfault); the size is computed without wrapping, and the call fails."""
    s, args = _scratch_of_n()
    f = tc.build(s, args)
    with pytest.raises(tc.KernelMemoryError, match=r"kernel main could not allocate T: its "
                       r"size in bytes does not fit 64 bits \(check the sizes passed\)"):
        f(np.ones(4, "float32"), np.zeros(4, "float32"), n)
    with pytest.raises(tc.KernelMemoryError, match=r"could not allocate T of shape "
                       rf"\({n},\) in `allocate T: float32\[n\] \(global\)`"):
        interp.run(tc.lower(s, args), np.ones(4, "float32"), np.zeros(4, "float32"), n)
    c = np.zeros(4, "float32")
    f(np.ones(4, "float32"), c, 4)
    np.testing.assert_array_equal(c, np.full(4, 3.0, "float32"))


def test_scratch_too_large_for_memory():
    s, args = _scratch_of_n()
    # 2^62 bytes: more than any address space, so malloc fails whatever the overcommit policy
    with pytest.raises(tc.KernelMemoryError, match=r"kernel main could not allocate "
                       r"4611686018427387904 bytes for T"):
        tc.build(s, args)(np.ones(4, "float32"), np.zeros(4, "float32"), 2 ** 60)


def test_a_2d_scratch_whose_element_count_overflows():
    m, k = tc.var("m", "int64"), tc.var("k", "int64")
    A = tc.placeholder((4,), name="A")
    T = tc.compute((m, k), lambda i, j: A[(i + j) % 4], name="T")
    C = tc.compute((4,), lambda i: T[i, i] + 1.0, name="C")
    f = tc.build(tc.create_schedule(C.op), [A, C, m, k])
    with pytest.raises(tc.KernelMemoryError, match=r"could not allocate T: its size in bytes "
                       r"does not fit 64 bits"):
        f(np.ones(4, "float32"), np.zeros(4, "float32"), 2 ** 31, 2 ** 31)


def test_constant_scratch_past_any_memory():
    A = tc.placeholder((4,), name="A")
    N = 2 ** 31 - 1
    T = tc.compute((N, N), lambda i, j: A[(i + j) % 4], name="T")
    C = tc.compute((4,), lambda i: T[i, i] + 1.0, name="C")
    with pytest.raises(tc.ResourceLimitError, match=r"buffer T would take 18446744056529682436 "
                       r"bytes, more than any machine's memory; compute it in smaller tiles"):
        tc.build(tc.create_schedule(C.op), [A, C])


# ---------------------------------------------------------------------------------------
# tc.empty / tc.aligned: aligned host arrays


@pytest.mark.parametrize("align", [0, 3, 48, -64, 2.0, True, "64"])
def test_empty_alignment_not_a_power_of_two(align):
    with pytest.raises(tc.ArgumentError, match=r"tc\.empty: align=.* power of two"):
        tc.empty((4, 4), align=align)
    with pytest.raises(tc.ArgumentError, match=r"tc\.aligned: align=.* power of two"):
        tc.aligned(np.zeros(3, "float32"), align=align)


@pytest.mark.parametrize("shape", [(-1,), (2, -3), (2.5,), ("4",), (True,)])
def test_empty_bad_shape(shape):
    with pytest.raises(tc.ShapeError, match=r"tc\.empty: shape .* non-negative integer"):
        tc.empty(shape)


@pytest.mark.parametrize("dtype", ["floaty", object])
def test_empty_bad_dtype(dtype):
    with pytest.raises(tc.DTypeError, match=r"tc\.empty: dtype"):
        tc.empty((2,), dtype)


def _refused_in_child(code):
    """The ArgumentError message a call in ``code`` raises, run in a child process (with
    the old int32 arithmetic, these calls wrote outside their arrays)."""
    import subprocess
    import sys
    import textwrap

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    prelude = textwrap.dedent("""
        import mmap, numpy as np, tecomp as tc
        from tecomp.ir import interp
        def lazy(shape, dtype):   # pages cost memory only once written (never here)
            n = int(np.prod(shape, dtype=object)) * np.dtype(dtype).itemsize
            m = mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
                          | getattr(mmap, "MAP_NORESERVE", 0))
            return np.frombuffer(m, dtype=dtype).reshape(shape)
    """)
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)],
                       capture_output=True, text=True, timeout=600, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout


@pytest.mark.parametrize("runner", ["llvm", "interp"])
def test_symbolic_sizes_that_would_wrap_int32_index_arithmetic(runner):
    """With int32 variables a kernel indexes in int32: a split by 7 computes n + 6, which
    passes int32 for n > 2**31 - 7 (its tail guard then let the loop run past the
    arrays); a loop over n*m fused needs n*m in int32.  Such sizes are refused, naming the
    arithmetic, the values and the fix (int64 variables)."""
    out = _refused_in_child(f"""
        runner = {runner!r}
        def call(s, args, *arrays):
            try:
                if runner == "llvm":
                    tc.build(s, args)(*arrays)
                else:
                    interp.run(tc.lower(s, args), *arrays)
            except tc.ArgumentError as e:
                print(e)
        n = tc.var("n")
        A = tc.placeholder((n,), name="A", dtype="int8")
        B = tc.compute((n,), lambda i: A[i] + tc.const(1, "int8"), name="B")
        s = tc.create_schedule(B.op)
        s[B].split(B.op.axis[0], factor=7)
        N = 2**31 - 3
        call(s, [A, B], lazy((N,), "int8"), lazy((N,), "int8"))
        m = tc.var("m")
        X = tc.placeholder((n, m), name="X", dtype="int8")
        Y = tc.compute((n, m), lambda i, j: X[i, j], name="Y")
        s = tc.create_schedule(Y.op)
        s[Y].fuse(*Y.op.axis)
        call(s, [X, Y], lazy((65536, 65537), "int8"), lazy((65536, 65537), "int8"))
    """)
    first, second = out.strip().splitlines()
    assert re.fullmatch(
        r"the index arithmetic `n \+ 6` \(an operand of `\(n \+ 6\) // 7`\) can reach "
        r"2147483651 with n \(from A\.shape\[0\]\) = 2147483645: outside int32 "
        r"\[-2147483648, 2147483647\], the type the kernel computes it in \(the dtype of its "
        r"variables\), where it would wrap; pass smaller sizes, or declare the variables int64 "
        r"\(tc\.var\('n', 'int64'\)\) and build again: the kernel then indexes in int64",
        first), first
    assert re.match(r"the index arithmetic `n\*m` \(the extent of loop i\.j\.fused\) can reach "
                    r"4295032832 with n \(from X\.shape\[0\]\) = 65536, m \(from "
                    r"X\.shape\[1\]\) = 65537: outside int32.*tc\.var\('n', 'int64'\), "
                    r"tc\.var\('m', 'int64'\)", second), second


def test_int64_extent_past_two_to_the_40():
    """An int64 symbolic extent is at most 2**40 (lowering proves its index arithmetic
    with that bound: tecomp.lower.ranges): a stride-0 view longer than that is refused
    before the kernel runs; the module still works afterwards."""
    n = tc.var("n", "int64")
    A = tc.placeholder((n,), name="A")
    B = tc.compute((n,), lambda i: A[i] + 1, name="B")
    s = tc.create_schedule(B.op)
    f = tc.build(s, [A, B])
    big = 2**40 + 1
    a = np.lib.stride_tricks.as_strided(np.zeros(1, "float32"), (big,), (0,))
    b = np.lib.stride_tricks.as_strided(np.zeros(1, "float32"), (big,), (0,))
    with pytest.raises(tc.ArgumentError, match=r"n \(from A.shape\[0\]\) = 1099511627777 is "
                                               r"outside \[0, 1099511627776\]: it is a symbolic "
                                               r"extent"):
        f(a, b)
    x = np.arange(5, dtype="float32")
    y = np.zeros(5, "float32")
    f(x, y)
    np.testing.assert_array_equal(y, x + 1)


def test_pickling_a_compiled_module(scaled, tmp_path):
    """A module is machine code loaded in this process: pickling it (pickle.dumps,
    torch.save, a multiprocessing argument) is refused, saying how to move it (it raised
    a TypeError about a thread lock, or a ctypes error for a loaded library, before)."""
    import pickle

    f = scaled[0]
    with pytest.raises(tc.ArgumentError, match=r"module main cannot be pickled \(its kernels "
                                               r"are machine code.*f.export_library\(path\).*"
                                               r"tc.load_module\(path\)"):
        pickle.dumps(f)
    f.export_library(str(tmp_path / "k.so"))
    g = tc.load_module(str(tmp_path / "k.so"))
    with pytest.raises(tc.ArgumentError, match=r"cannot be pickled.*export_library"):
        pickle.dumps(g)
    _still_works(f)
