"""Calls that must fail the same way on every runtime: the CPU (llvm) build and the CUDA
emulation build of one computation get the same bad arguments, and both raise the same
ArgumentError with the same message -- the checks and their wording live in one place,
tecomp.runtime.argcheck.  (The CUDA half is skipped without a C++ compiler.)"""
import re

import numpy as np
import pytest

import tecomp as tc
from tecomp.codegen.cuda_emu import find_cxx


def _have_cxx() -> bool:
    try:
        find_cxx()
        return True
    except tc.RuntimeUnavailableError:
        return False


HAVE_CXX = _have_cxx()


def _computation():
    """B[2n, 4] = A[i // 2, j] * alpha + W[i // 2, j] + k: n from A, alpha a float32 and k
    an int8 scalar."""
    n = tc.var("n")
    alpha = tc.var("alpha", "float32")
    k = tc.var("k", "int8")
    A = tc.placeholder((n, 4), name="A")
    W = tc.placeholder((n, 4), name="W")
    B = tc.compute((n * 2, 4), lambda i, j: A[i // 2, j] * alpha + W[i // 2, j]
                   + k.astype("float32"), name="B")
    return A, W, B, alpha, k


@pytest.fixture(scope="module")
def modules():
    A, W, B, alpha, k = _computation()
    args = [A, W, B, alpha, k]
    cpu = tc.build(tc.create_schedule(B.op), args, target="llvm")
    gpu = None
    if HAVE_CXX:
        s = tc.create_schedule(B.op)
        fused = s[B].fuse(*B.op.axis)
        bx, tx = s[B].split(fused, factor=32)
        s[B].bind(bx, tc.thread_axis("blockIdx.x"))
        s[B].bind(tx, tc.thread_axis("threadIdx.x"))
        gpu = tc.build(s, args, target="cuda-emu")
    return cpu, gpu


def _a(n=3, dtype="float32"):
    return np.arange(n * 4, dtype=dtype).reshape(n, 4)


def _w(n=3):
    return np.ones((n, 4), "float32")


def _b(n=3):
    return np.zeros((2 * n, 4), "float32")


class _BadIndex:
    def __index__(self):
        raise RuntimeError("no index")

    def __repr__(self):
        return "<_BadIndex>"


def _read_only(x):
    x.flags.writeable = False
    return x


# name -> (the arguments, the message every runtime gives)
CASES = {
    "too few arguments": (
        lambda: (_a(), _w(), _b()),
        r"main expects 5 arguments \(A, W, B, alpha, k\), got 3"),
    "too many arguments": (
        lambda: (_a(), _w(), _b(), 1.0, 2, 3),
        r"main expects 5 arguments \(A, W, B, alpha, k\), got 6"),
    "a list for an array": (
        lambda: ([[1.0] * 4] * 3, _w(), _b(), 1.0, 2),
        r"parameter A \(argument 1\) expects an array \(numpy\.ndarray, [^)]*\) of float32 with shape \(n, 4\), "
        r"got a list: convert with np\.asarray\(\.\.\., dtype=np\.float32\)"),
    "a numpy scalar for an array": (
        lambda: (np.float32(1), _w(), _b(), 1.0, 2),
        r"parameter A \(argument 1\) expects an array \(numpy\.ndarray, [^)]*\) of float32 with shape \(n, 4\), "
        r"got float32 np\.float32\(1\.0\)"),
    "dtype": (
        lambda: (_a(dtype="float64"), _w(), _b(), 1.0, 2),
        r"parameter A \(argument 1\) expects float32, got float64: convert with "
        r"a\.astype\(np\.float32\)"),
    "byte order": (
        lambda: (_a().astype(">f4"), _w(), _b(), 1.0, 2),
        r"parameter A \(argument 1\) expects float32, got float32 with non-native byte order "
        r"\(>f4\)"),
    "a masked array as input": (
        lambda: (np.ma.masked_less(_a(), 2.0), _w(), _b(), 1.0, 2),
        r"parameter A \(argument 1\): the numpy masked array masks 2 of its 12 elements, and "
        r"tecomp ignores masks \(the kernel reads its data, masked elements included, as "
        r"values\): pass x\.filled\(value\)"),
    "a masked array as output": (
        lambda: (_a(), _w(), np.ma.masked_array(_b(), mask=np.eye(6, 4, dtype=bool)), 1.0, 2),
        r"parameter B \(argument 3\): the numpy masked array masks 4 of its 24 elements, and "
        r"tecomp ignores masks \(the kernel writes its data, and the results under the mask "
        r"would stay hidden\): pass a plain array"),
    "ndim": (
        lambda: (_a(), _w(), _b()[:, :, None], 1.0, 2),
        r"parameter B \(argument 3\) expects a 2-d array of shape \(n\*2, 4\), got a 3-d array "
        r"of shape \(6, 4, 1\)"),
    "constant extent": (
        lambda: (np.zeros((3, 5), "float32"), _w(), _b(), 1.0, 2),
        r"parameter A \(argument 1\) expects A\.shape\[1\] = 4, got 5 \(expected shape "
        r"\(n, 4\), got \(3, 5\)\)"),
    "symbolic extent": (
        lambda: (_a(), _w(), np.zeros((5, 4), "float32"), 1.0, 2),
        r"B\.shape\[0\] = 5 but parameter B \(argument 3\) expects n\*2 = 6 "
        r"\(n = 3 from A\.shape\[0\]\)"),
    "symbolic extent bound elsewhere": (
        lambda: (_a(), _w(2), _b(), 1.0, 2),
        r"n = 3 from A\.shape\[0\] but W\.shape\[0\] = 2 \(parameter W \(argument 2\) "
        r"expects shape \(n, 4\)\)"),
    "read-only output": (
        lambda: (_a(), _w(), _read_only(_b()), 1.0, 2),
        r"parameter B \(argument 3\) is written by main, but the array is read-only \(a "
        r"broadcast view or an array with flags\.writeable=False\): pass a writeable array, "
        r"e\.g\. a copy"),
    "broadcast view as output": (
        lambda: (_a(), _w(), np.broadcast_to(np.float32(0), (6, 4)), 1.0, 2),
        r"parameter B \(argument 3\) is written by main, but the array is read-only"),
    "a string for a float scalar": (
        lambda: (_a(), _w(), _b(), "x", 2),
        r"parameter alpha \(argument 4\) expects a number \(float32\), got str 'x'"),
    "a bool for a float scalar": (
        lambda: (_a(), _w(), _b(), True, 2),
        r"parameter alpha \(argument 4\) expects a number \(float32\), got bool True"),
    "a float for an int scalar": (
        lambda: (_a(), _w(), _b(), 1.0, 2.5),
        r"parameter k \(argument 5\) expects an integer \(int8\), got float 2\.5"),
    "an int scalar out of range": (
        lambda: (_a(), _w(), _b(), 1.0, 300),
        r"parameter k \(argument 5\) = 300 does not fit int8 \[-128, 127\]"),
    "an int scalar far out of range": (
        lambda: (_a(), _w(), _b(), 1.0, 2**70),
        r"parameter k \(argument 5\) = 1180591620717411303424 does not fit int8"),
    "an int too large for any float": (
        lambda: (_a(), _w(), _b(), 2**2000, 2),
        r"parameter alpha \(argument 4\) = an integer of 2001 bits does not fit float32"),
    "a float that float32 cannot hold": (
        lambda: (_a(), _w(), _b(), 1e39, 2),
        r"parameter alpha \(argument 4\) = 1e\+39 does not fit float32 \(its largest finite "
        r"value is 3\.4028235e\+38\): it would become infinite"),
    "an __index__ that raises": (
        lambda: (_a(), _w(), _b(), 1.0, _BadIndex()),
        r"parameter k \(argument 5\) expects an integer \(int8\), got _BadIndex .*whose "
        r"__index__ raised RuntimeError: no index"),
    "a masked 0-d array for a float scalar": (
        lambda: (_a(), _w(), _b(), np.ma.masked_array(np.float32(2), mask=True), 2),
        r"parameter alpha \(argument 4\) expects a number \(float32\), got a 0-d float32 "
        r"masked array whose element is masked \(it has no value, and tecomp ignores masks\): "
        r"pass a number, or x\.filled\(value\)"),
    "a masked 0-d array for an int scalar": (
        lambda: (_a(), _w(), _b(), 1.0, np.ma.masked_array(np.int8(2), mask=True)),
        r"parameter k \(argument 5\) expects an integer \(int8\), got a 0-d int8 masked "
        r"array whose element is masked"),
    "numpy.ma.masked for a float scalar": (
        lambda: (_a(), _w(), _b(), np.ma.masked, 2),
        r"parameter alpha \(argument 4\) expects a number \(float32\), got a 0-d float64 "
        r"masked array whose element is masked"),
    "a numpy bool for an int scalar": (
        lambda: (_a(), _w(), _b(), 1.0, np.bool_(True)),
        r"parameter k \(argument 5\) expects an integer \(int8\), got bool"),
    "an output overlapping an input": (
        lambda: (lambda m: (m[:3], _w(), m[2:8], 1.0, 2))(np.zeros((8, 4), "float32")),
        r"parameter A \(argument 1\) and parameter B \(argument 3\) share memory, and main "
        r"writes B: an output must not overlap another argument"),
    "a stride-0 output": (
        lambda: (_a(), _w(), np.lib.stride_tricks.as_strided(
            np.zeros(4, "float32"), (6, 4), (0, 4), writeable=True), 1.0, 2),
        r"parameter B \(argument 3\) is written by main, but its elements overlap: B\[0, 0\] "
        r"and B\[1, 0\] are the same memory"),
}


def _error(f, args):
    with pytest.raises(tc.ArgumentError) as info:
        f(*args)
    return type(info.value), str(info.value)


@pytest.mark.parametrize("case", list(CASES))
def test_same_error_on_cpu_and_cuda_emulation(modules, case):
    cpu, gpu = modules
    make, message = CASES[case]
    cls, text = _error(cpu, make())
    assert cls is tc.ArgumentError
    assert re.search(message, text), text
    if gpu is None:
        pytest.skip("no C++ compiler: the cuda-emu half needs g++ (or $CXX)")
    assert _error(gpu, make()) == (cls, text)


def test_both_still_work_after_the_errors(modules):
    cpu, gpu = modules
    want = np.repeat(_a(), 2, axis=0) * np.float32(2) + np.float32(1) + np.float32(-1)
    for f in (cpu, gpu):
        if f is None:
            continue
        for _, (make, _) in CASES.items():
            with pytest.raises(tc.ArgumentError):
                f(*make())
        b = _b()
        f(_a(), _w(), b, 2.0, -1)
        np.testing.assert_array_equal(b, want)


def test_a_masked_array_that_masks_nothing_is_its_data(modules):
    """(the counterpart of the masked-array refusals: the mask is refused, not the type)"""
    want = np.repeat(_a(), 2, axis=0) * np.float32(2) + np.float32(1) + np.float32(-1)
    for f in modules:
        if f is None:
            continue
        b = np.ma.masked_array(_b(), mask=False)
        f(np.ma.masked_array(_a()), _w(), b, 2.0, -1)
        np.testing.assert_array_equal(b.data, want)
        assert not b.mask.any()
        b = _b()   # (a 0-d masked array whose element is not masked: its value)
        f(_a(), _w(), b, np.ma.masked_array(np.float32(2), mask=False),
          np.ma.masked_array(np.int8(-1)))
        np.testing.assert_array_equal(b, want)
