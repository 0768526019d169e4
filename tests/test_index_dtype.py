"""Sizes past int32: extents, split factors, fused loops and index arithmetic of 2**31 and
more are computed in int64 where they need it (constant sizes), checked when the kernel is
called (symbolic sizes of int32 variables), or int64 throughout (int64 variables); the
CUDA C flattens in 64 bits the buffers that need it.  Ordinary programs keep int32 (the
golden IR tests pin them).

Memory stays small: big inputs are stride-0 views of one element or anonymous
``MAP_NORESERVE`` mappings, of which only the touched pages cost memory; outputs are
small.  Runs that a bug could turn into a crash run in a child process."""
import mmap
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tecomp as tc
from tecomp.errors import ArgumentError
from tecomp.ir import interp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LONG = os.environ.get("TECOMP_LONG_TESTS", "") not in ("", "0")
INT32_MAX = 2**31 - 1


def lazy(shape, dtype):
    """A zero-filled array of ``shape`` whose pages cost memory only once written."""
    n = int(np.prod(shape, dtype=object)) * np.dtype(dtype).itemsize
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_NORESERVE", 0)
    return np.frombuffer(mmap.mmap(-1, n, flags=flags), dtype=dtype).reshape(shape)


def zero_stride(shape, dtype, value=1):
    """A read-only view of one element as an array of ``shape`` (every stride 0)."""
    one = np.full(1, value, dtype)
    return np.lib.stride_tricks.as_strided(one, shape=shape, strides=(0,) * len(shape),
                                           writeable=False)


def in_child(code: str, timeout: int = 600) -> str:
    """Run ``code`` (after ``import numpy as np, tecomp as tc`` and this file's helpers)
    in a fresh Python; return its stdout (a crash fails the test, not the run)."""
    prelude = ("import numpy as np, tecomp as tc\n"
               f"import sys; sys.path.insert(0, {os.path.dirname(__file__)!r})\n"
               "from test_index_dtype import lazy, zero_stride\n")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)],
                       capture_output=True, text=True, timeout=timeout, env=env)
    assert p.returncode == 0, f"the child exited with {p.returncode}:\n{p.stderr[-3000:]}"
    return p.stdout


# ---------------------------------------------------------------------------------------
# the front end: constants past int32 are int64, never wrapped


def test_extents_past_int32_make_int64_axes():
    C = tc.compute((2**31 + 5,), lambda i: tc.const(1, "int8"), name="C")
    (ax,) = C.op.axis
    assert C.shape[0].value == 2**31 + 5 and C.shape[0].dtype == "int64"
    assert ax.var.dtype == "int64"
    k = tc.reduce_axis((0, 2**31), name="k")   # was "the range (0, 2147483648) is empty"
    assert (k.dom.extent.value, k.dom.extent.dtype, k.var.dtype) == (2**31, "int64", "int64")
    k2 = tc.reduce_axis((2**31 - 2, 2**31 + 3), name="k2")
    assert (k2.dom.min.value, k2.dom.extent.value, k2.var.dtype) == (2**31 - 2, 5, "int64")
    small = tc.compute((7, 5), lambda i, j: tc.const(0, "int8"), name="small")
    assert [iv.var.dtype for iv in small.op.axis] == ["int32", "int32"]   # as before


@pytest.mark.parametrize("kw", [dict(factor=2**32 + 1), dict(factor=2**31),
                                dict(nparts=2**32 + 1), dict(nparts=2**31 - 1),
                                dict(factor=1000), dict(nparts=101), dict(factor=7)])
@pytest.mark.parametrize("runner", ["llvm", "interp"])
def test_split_factor_beyond_the_extent(kw, runner):
    """A factor (or nparts) past the extent is one outer (inner) iteration; past int32 it
    used to wrap (2**32 + 1 gave an empty loop nest and nothing computed)."""
    A = tc.placeholder((100,), name="A")
    B = tc.compute((100,), lambda i: A[i] * 2, name="B")
    s = tc.create_schedule(B.op)
    s[B].split(B.op.axis[0], **kw)
    a, b = np.arange(100, dtype="float32"), np.zeros(100, "float32")
    if runner == "llvm":
        tc.build(s, [A, B])(a, b)
    else:
        interp.run(tc.lower(s, [A, B]), a, b)
    np.testing.assert_array_equal(b, a * 2)


@pytest.mark.parametrize("kw", [dict(factor=2**32 + 1), dict(nparts=2**40)])
@pytest.mark.parametrize("symbolic", [False, True])
def test_a_big_split_runs_the_extent_where_the_loop_is_not_partitioned(kw, symbolic):
    """The fuzzer's big_split edge family (seed 9100089): with pragma no_partition the
    inner loop of a split by 2**32 + 1 ran its 2**32 + 1 guarded iterations (a hang); a
    big factor's loop now runs at most the axis' extent (``min(factor, n)``)."""
    n = tc.var("n") if symbolic else 100
    A = tc.placeholder((n,), name="A")
    B = tc.compute((n,), lambda i: A[i] * 2, name="B")
    s = tc.create_schedule(B.op)
    outer, inner = s[B].split(B.op.axis[0], **kw)
    s[B].pragma(outer, "no_partition")
    s[B].pragma(inner, "no_partition")
    args = [A, B] + ([n] if symbolic else [])
    text = str(tc.lower(s, args))
    big = next(iter(kw.values()))
    assert f"0i64, {big}i64)" not in text, text      # no loop over the whole factor
    a, b = np.arange(100, dtype="float32"), np.zeros(100, "float32")
    tc.build(s, args)(a, b, *([100] if symbolic else []))
    np.testing.assert_array_equal(b, a * 2)


@pytest.mark.parametrize("kw", [dict(factor=2**31), dict(factor=2**40), dict(nparts=2**31 + 1)])
@pytest.mark.parametrize("runner", ["llvm", "interp"])
def test_rfactor_of_a_split_past_the_extent(kw, runner):
    """The fuzzer's big_split edge family (seed 15): rfactor of a reduction split by 2**31
    with a where= condition gave an InternalError (an int64 axis compared with an int32
    constant) and a partial-sum buffer C.rf of 2**31 elements per row; C.rf now has the
    reduction's extent, and the condition its axis' type."""
    A = tc.placeholder((3, 5), name="A")
    k = tc.reduce_axis((0, 5), name="k")
    C = tc.compute((3,), lambda i: tc.sum(A[i, k], axis=k, where=k != 2), name="C")
    s = tc.create_schedule(C.op)
    ko, ki = s[C].split(k, **kw)
    rf = s.rfactor(C, ki if "factor" in kw else ko, 1)
    assert all(int(e) <= 5 for e in rf.shape)
    a, c = np.random.default_rng(0).random((3, 5), dtype=np.float32), np.zeros(3, "float32")
    if runner == "llvm":
        tc.build(s, [A, C])(a, c)
    else:
        interp.run(tc.lower(s, [A, C]), a, c)
    np.testing.assert_allclose(c, a.sum(1) - a[:, 2], rtol=1e-6)



@pytest.mark.parametrize("kw", [dict(factor=2**40), dict(nparts=2**31 + 1)])
def test_rfactor_of_a_big_split_of_a_symbolic_reduction(kw):
    """Campaign seed 10036621: C.rf of a symbolic reduction split by 2**40 had 2**40 rows
    (a KernelMemoryError for 17.6 TB at the call); it has min(n, 2**40), the rows lowering
    runs (int64(n) for the factor: an int32 n is always below it)."""
    n = tc.var("n")
    A = tc.placeholder((3, n), name="A")
    k = tc.reduce_axis((0, n), name="k")
    C = tc.compute((3,), lambda i: tc.sum(A[i, k], axis=k), name="C")
    s = tc.create_schedule(C.op)
    ko, ki = s[C].split(k, **kw)
    rf = s.rfactor(C, ki if "factor" in kw else ko, 1)
    rows = str(rf.shape[1])
    assert "n" in rows and str(2**40) not in rows and str(2**31 + 1) not in rows, rows
    a, c = np.random.default_rng(0).random((3, 7), dtype=np.float32), np.zeros(3, "float32")
    tc.build(s, [A, C])(a, c)
    np.testing.assert_allclose(c, a.sum(1), rtol=1e-6)

def test_a_fused_extent_past_int32_is_int64():
    """65536 x 65537 fused: 4295032832 iterations (the int32 product wrapped to 65536: only
    row 0 ran); each original axis is the int32 value of the int64 fused counter."""
    ki, kj = tc.reduce_axis((0, 65536), "ki"), tc.reduce_axis((0, 65537), "kj")
    D = tc.compute((1,), lambda z: tc.sum(ki.astype("float64") * 65537 + kj.astype("float64"),
                                          axis=[ki, kj], where=ki >= 65535), name="D")
    s = tc.create_schedule(D.op)
    fused = s[D].fuse(ki, kj)
    assert fused.var.dtype == "int64"
    text = str(tc.lower(s, [D]))
    assert "for (ki.kj.fused, 0i64, 4295032832i64)" in text
    assert "int32(ki.kj.fused // 65537i64) >= 65535" in text
    # fusing small axes stays int32
    X = tc.placeholder((8, 12), name="X")
    Y = tc.compute((8, 12), lambda i, j: X[i, j], name="Y")
    s2 = tc.create_schedule(Y.op)
    assert s2[Y].fuse(*Y.op.axis).var.dtype == "int32"


@pytest.mark.slow
@pytest.mark.skipif(not LONG, reason="slow (4.3e9 iterations): set TECOMP_LONG_TESTS=1")
def test_a_fused_reduction_past_int32_runs_every_row():
    out = in_child("""
        ki, kj = tc.reduce_axis((0, 65536), "ki"), tc.reduce_axis((0, 65537), "kj")
        D = tc.compute((1,), lambda z: tc.sum(ki.astype("float64") * 65537
                                              + kj.astype("float64"), axis=[ki, kj],
                                              where=ki >= 65535), name="D")
        s = tc.create_schedule(D.op)
        s[D].fuse(ki, kj)
        d = np.zeros(1)
        tc.build(s, [D])(d)
        print(int(d[0]))
    """)
    assert int(out) == sum(65535 * 65537 + j for j in range(65537))


def test_a_reduction_over_more_than_int32_terms():
    """2**31 + 1 terms of a stride-0 input: every one is added (LLVM)."""
    out = in_child("""
        N = 2**31 + 1
        X = tc.placeholder((N,), name="X", dtype="int8")
        k = tc.reduce_axis((0, N), "k")
        S = tc.compute((1,), lambda _: tc.sum(X[k].astype("int64"), axis=k), name="S")
        s = tc.create_schedule(S.op)
        out = np.zeros(1, "int64")
        tc.build(s, [X, S])(zero_stride((N,), "int8"), out)
        print(int(out[0]))
    """)
    assert int(out) == 2**31 + 1


def test_a_symbolic_reduction_split_past_int32_keeps_its_tail():
    """The fuzzer's big_extent edge family (seed 95): a sum over n = 2**31 + 785 terms
    with an int64 n, split by 2**31 + 7, lost its last 785 terms: loop partitioning made
    the tail's bounds with the factor as an int32 constant (wrapped)."""
    out = in_child("""
        n = tc.var("n", "int64")
        X = tc.placeholder((n,), name="X", dtype="int8")
        k = tc.reduce_axis((0, n), "k")
        S = tc.compute((1,), lambda _: tc.sum(X[k].astype("int64"), axis=k), name="S")
        s = tc.create_schedule(S.op)
        s[S].split(k, factor=2**31 + 7)
        N = 2**31 + 785
        out = np.zeros(1, "int64")
        tc.build(s, [X, S, n])(zero_stride((N,), "int8"), out, N)
        print(int(out[0]))
    """)
    assert int(out) == 2**31 + 785


# ---------------------------------------------------------------------------------------
# index arithmetic the user writes


def _scaled_gather(n, scale):
    A = tc.placeholder((n * scale // 3 + 1,), name="A", dtype="int8")
    C = tc.compute((n,), lambda i: A[(i * scale) // 3], name="C")
    return A, C


def _scaled_gather_run(runner):
    """Run ``_scaled_gather(3000, 10**6)`` with marked elements; True when right."""
    A, C = _scaled_gather(3000, 10**6)
    s = tc.create_schedule(C.op)
    a = lazy((A.shape[0].value,), "int8")
    want = np.zeros(3000, "int8")
    for i in (0, 1, 2147, 2148, 2999):   # around the int32 boundary, and the last
        a[i * 10**6 // 3] = want[i] = i % 100 + 1
    c = np.zeros(3000, "int8")
    if runner == "llvm":
        tc.build(s, [A, C])(a, c)
    else:
        interp.run(tc.lower(s, [A, C]), a, c)
    return bool(np.array_equal(c, want))


@pytest.mark.parametrize("runner", ["llvm", "interp"])
def test_index_arithmetic_that_would_wrap_is_computed_in_int64(runner):
    """``A[(i * 10**6) // 3]`` with i < 3000: i * 10**6 passes int32 before the division,
    which int32 arithmetic would have wrapped (a read far outside A, or a wrong element);
    the pass computes that index in int64 (and nothing else changes).  (A wrong index
    can crash the process: the run is in a child.)"""
    A, C = _scaled_gather(3000, 10**6)
    assert "A[int32(int64(i)*1000000i64 // 3i64)]" in str(tc.lower(tc.create_schedule(C.op),
                                                                   [A, C]))
    out = in_child(f"""
        import test_index_dtype as t
        print(t._scaled_gather_run({runner!r}))
    """)
    assert out.strip() == "True"


def test_ordinary_index_arithmetic_is_unchanged():
    A, C = _scaled_gather(2000, 10**6)   # 1999 * 10**6 fits int32: nothing to widen
    text = str(tc.lower(tc.create_schedule(C.op), [A, C]))
    assert "A[i*1000000 // 3]" in text and "int64" not in text


@pytest.mark.parametrize("symbolic", [False, True])
def test_strided_views_into_a_big_buffer(symbolic):
    """Element strides past int32 (a view of every 2**31 + 3rd byte of a 8 GiB mapping):
    the offsets from the strides the call gives are computed in 64 bits."""
    big = lazy((2**33 + 64,), "int8")
    v = np.lib.stride_tricks.as_strided(big, shape=(3, 4), strides=(2**31 + 3, 2**30 + 1))
    v[...] = np.arange(12, dtype="int8").reshape(3, 4) + 1
    n, m = (tc.var("n"), tc.var("m")) if symbolic else (3, 4)
    A = tc.placeholder((n, m), name="A", dtype="int8")
    B = tc.compute((n, m), lambda i, j: A[i, j] * tc.const(2, "int8"), name="B")
    b = np.zeros((3, 4), "int8")
    tc.build(tc.create_schedule(B.op), [A, B])(v, b)
    np.testing.assert_array_equal(b, v * 2)


# ---------------------------------------------------------------------------------------
# symbolic sizes: int32 variables are checked when the kernel is called, int64 variables
# index in int64


def _fused_sum(dtype):
    """The sum of an n x m int8 array over its two axes fused into one loop."""
    n, m = tc.var("n", dtype), tc.var("m", dtype)
    X = tc.placeholder((n, m), name="X", dtype="int8")
    ki, kj = tc.reduce_axis((0, n), "ki"), tc.reduce_axis((0, m), "kj")
    Y = tc.compute((1,), lambda _: tc.sum(X[ki, kj].astype("int64"), axis=[ki, kj]), name="Y")
    s = tc.create_schedule(Y.op)
    s[Y].fuse(ki, kj)
    return s, [X, Y]


def test_int32_variables_get_a_call_time_check_not_int64_code():
    s, args = _fused_sum("int32")
    func = tc.lower(s, args)
    assert "for (ki.kj.fused, 0, n*m)" in str(func)   # int32, as printed before
    checks = [(str(pc.expr), pc.lower, pc.upper) for pc in func.attrs["param_checks"]]
    assert checks == [("n*m", -(2**31), INT32_MAX)]
    x = np.ones((300, 7), "int8")
    y = np.zeros(1, "int64")
    tc.build(s, args)(x, y)
    assert y[0] == 2100


def test_int64_variables_index_in_int64():
    s, args = _fused_sum("int64")
    func = tc.lower(s, args)
    assert "for (ki.kj.fused, 0i64, n*m)" in str(func)
    # nothing about int32 index arithmetic: only the bound of every int64 extent
    assert {(pc.expr.name, pc.lower, pc.upper) for pc in func.attrs["param_checks"]} == \
        {("n", 0, 2**40), ("m", 0, 2**40)}
    y = np.zeros(1, "int64")
    tc.build(s, args)(np.ones((300, 7), "int8"), y)
    assert y[0] == 2100


@pytest.mark.slow
@pytest.mark.skipif(not LONG, reason="slow (4.3e9 iterations): set TECOMP_LONG_TESTS=1")
def test_int64_variables_past_int32_run():
    out = in_child("""
        import test_index_dtype as t
        s, args = t._fused_sum("int64")
        y = np.zeros(1, "int64")
        tc.build(s, args)(zero_stride((65536, 65537), "int8"), y)
        print(int(y[0]))
    """)
    assert int(out) == 65536 * 65537


def test_symbolic_checks_are_few():
    """An elementwise kernel over int32 variables records nothing; a split by f records
    only that ``n + f - 1`` (its rounded-up extent's numerator) fits int32, a bound on n
    that the compiled argument binder checks with the shape."""
    n = tc.var("n")
    A = tc.placeholder((n, 16), name="A")
    B = tc.compute((n, 16), lambda i, j: A[i, j] + 1, name="B")
    s = tc.create_schedule(B.op)
    assert tc.lower(s, [A, B]).attrs["param_checks"] == ()
    for f in (64, 7):
        s = tc.create_schedule(B.op)
        s[B].split(B.op.axis[0], factor=f)
        checks = tc.lower(s, [A, B]).attrs["param_checks"]
        assert [(str(pc.expr), pc.upper) for pc in checks] == [(f"n + {f - 1}", INT32_MAX)]
        a, b = np.ones((5, 16), "float32"), np.zeros((5, 16), "float32")
        tc.build(s, [A, B])(a, b)
        np.testing.assert_array_equal(b, a + 1)


# ---------------------------------------------------------------------------------------
# CUDA C


def _big_rows_cuda(N=50000):
    A = tc.placeholder((N, N), name="A")
    C = tc.compute((N,), lambda i: A[N - 1, i] + A[i, N - 1], name="C")
    s = tc.create_schedule(C.op)
    bx, tx = s[C].split(C.op.axis[0], factor=128)
    s[C].bind(bx, tc.thread_axis("blockIdx.x"))
    s[C].bind(tx, tc.thread_axis("threadIdx.x"))
    return s, [A, C]


def test_cuda_flattens_big_buffers_in_64_bits():
    """A 50000 x 50000 float32 array (2.5e9 elements): its offsets are long long, the
    small one's stay int."""
    from tecomp.codegen.cuda import codegen_cuda

    s, args = _big_rows_cuda()
    src = codegen_cuda(tc.lower(s, args, target="cuda")).source
    assert "A[2499950000LL + ((long long)" in src
    assert "* 50000LL) + 49999LL]" in src
    assert "C[(((int)blockIdx.x) * 128) + ((int)threadIdx.x)]" in src


needs_cxx = pytest.mark.skipif(
    subprocess.run(["sh", "-c", "command -v ${CXX:-g++}"], capture_output=True).returncode,
    reason="the CUDA emulation needs a C++ compiler")


@needs_cxx
def test_cuda_emu_reads_a_big_array_correctly():
    """It used to die with SIGSEGV (an int offset of -1795017296): in a child process."""
    out = in_child("""
        import test_index_dtype as t
        s, args = t._big_rows_cuda()
        f = tc.build(s, args, target="cuda-emu")
        N = 50000
        a = lazy((N, N), "float32")
        a[N - 1, :] = np.arange(N)
        a[:, N - 1] = 1
        c = np.zeros(N, "float32")
        f(a, c)
        want = a[N - 1, :] + a[:, N - 1]
        print(bool(np.array_equal(c, want)))
    """)
    assert out.strip() == "True"


def _symbolic_cuda(dtype):
    n, m = tc.var("n", dtype), tc.var("m", dtype)
    A = tc.placeholder((n, m), name="A")
    C = tc.compute((n,), lambda i: A[i, m - 1] * 2, name="C")
    s = tc.create_schedule(C.op)
    bx, tx = s[C].split(C.op.axis[0], factor=64)
    s[C].bind(bx, tc.thread_axis("blockIdx.x"))
    s[C].bind(tx, tc.thread_axis("threadIdx.x"))
    return s, [A, C]


@needs_cxx
def test_cuda_symbolic_buffers_are_checked_or_int64():
    """int32 variables: the kernel flattens A in int32, and a call whose A spans more than
    2**31 elements is refused; int64 variables: long long offsets, and it runs."""
    s, args = _symbolic_cuda("int32")
    f = tc.build(s, args, target="cuda-emu")
    assert "long long" not in f.get_source()
    a = np.arange(12, dtype="float32").reshape(3, 4)
    c = np.zeros(3, "float32")
    f(a, c)
    np.testing.assert_array_equal(c, a[:, 3] * 2)
    out = in_child("""
        import test_index_dtype as t
        from tecomp.errors import ArgumentError
        s, args = t._symbolic_cuda("int32")
        f = tc.build(s, args, target="cuda-emu")
        try:   # (it used to read far outside A: SIGSEGV)
            f(lazy((65536, 65536), "float32"), np.zeros(65536, "float32"))
        except ArgumentError as e:
            print(e)
    """)
    assert re.search(r"offset of the last element of A\) can reach 4294967295.*"
                     r"tc\.var\('n', 'int64'\)", out), out
    s, args = _symbolic_cuda("int64")
    f = tc.build(s, args, target="cuda-emu")
    assert "long long" in f.get_source()
    f(a, c)
    np.testing.assert_array_equal(c, a[:, 3] * 2)


def test_big_grids_index_in_64_bits_and_nvcc_compiles_them():
    """A 1-d stage of 2**31 + 5 elements over blockIdx.x x threadIdx.x: the block and thread
    indices are long long (their product passes int32); the source compiles with nvcc."""
    from tecomp.codegen.cuda import codegen_cuda
    from tecomp.runtime.nvcc import compile_ptx, find_nvcc

    N = 2**31 + 5
    A = tc.placeholder((N,), name="A", dtype="int8")
    B = tc.compute((N,), lambda i: A[i] + tc.const(1, "int8"), name="B")
    s = tc.create_schedule(B.op)
    bx, tx = s[B].split(B.op.axis[0], factor=1024)
    s[B].bind(bx, tc.thread_axis("blockIdx.x"))
    s[B].bind(tx, tc.thread_axis("threadIdx.x"))
    src = codegen_cuda(tc.lower(s, [A, B], target="cuda")).source
    assert "((long long)blockIdx.x) * 1024LL" in src
    big = _big_rows_cuda()
    if find_nvcc() is None:
        pytest.skip("nvcc is not on PATH")
    sources = [src, codegen_cuda(tc.lower(big[0], big[1], target="cuda")).source,
               codegen_cuda(tc.lower(*_symbolic_cuda("int64"), target="cuda")).source]
    for text in sources:
        assert ".entry" in compile_ptx(text, "sm_80")


def test_exported_libraries_keep_the_checks(tmp_path):
    """The int32 range conditions travel with an exported library (its metadata) and its
    calls check them as the JIT's do."""
    s, args = _fused_sum("int32")
    f = tc.build(s, args)
    path = str(tmp_path / "fused.so")
    f.export_library(path)
    g = tc.load_module(path)
    y = np.zeros(1, "int64")
    g(np.ones((300, 7), "int8"), y)
    assert y[0] == 2100
    with pytest.raises(ArgumentError, match=r"`n\*m` \(the extent of loop ki\.kj\.fused\) "
                                            r"can reach 4295032832"):
        g(zero_stride((65536, 65537), "int8"), y)   # refused before the kernel runs


def test_a_split_by_2_31_minus_1_of_an_int32_size_needs_no_check():
    """The fuzzer's big_split edge family (seed 9200025): the outer extent of a split by
    2**31 - 1 was (n + 2147483646) // 2147483647, which passes int32 for any n > 1, so
    every call was refused; it is (n - 1) // 2147483647 + 1 now (the simplifier keeps a
    big divisor's numerator as it is)."""
    n = tc.var("n")
    A = tc.placeholder((n,), name="A")
    B = tc.compute((n,), lambda i: A[i] + 1, name="B")
    s = tc.create_schedule(B.op)
    s[B].split(B.op.axis[0], factor=2**31 - 1)
    assert "2147483646" not in str(tc.lower(s, [A, B]))
    a = np.arange(5, dtype="float32")
    b = np.zeros(5, "float32")
    tc.build(s, [A, B])(a, b)
    np.testing.assert_array_equal(b, a + 1)


@pytest.mark.parametrize("runner", ["llvm", "interp"])
def test_compute_at_an_int64_loop_keeps_the_producers_int32_axes(runner):
    """The fuzzer's big_extent edge family (seed 9200351): a producer with int32 axes
    computed at a consumer's loop over an int64 size got its axis as int64(i1) in a
    comparison with an int32 constant (an InternalError at code generation)."""
    n = tc.var("n", "int64")
    A = tc.placeholder((n,), name="A")
    P = tc.compute((2, 8), lambda i, j: tc.if_then_else(j < 2, A[0] * 2.0, A[0] + 1.0), name="P")
    k = tc.reduce_axis((0, n), name="k")
    C = tc.compute((n,), lambda i: tc.sum(P[0, k % 8], axis=k), name="C")
    s = tc.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=4)
    s[P].compute_at(s[C], xo)
    a, c = np.full(6, 3.0, "float32"), np.zeros(6, "float32")
    if runner == "llvm":
        tc.build(s, [A, C, n])(a, c, 6)
    else:
        interp.run(tc.lower(s, [A, C, n]), a, c, 6)
    want = sum((6.0 if j % 8 < 2 else 4.0) for j in range(6))
    np.testing.assert_allclose(c, want)


@pytest.mark.parametrize("runner", ["llvm", "interp"])
@pytest.mark.parametrize("wide", ["consumer", "producer"])
def test_inlining_across_index_dtypes(runner, wide):
    # an int64 consumer inlining an int32 producer whose body does arithmetic on its axis
    # (3 - i, i % 3: the operands must share a dtype), and the reverse; fuzz seed 10011706
    n = tc.var("n", "int64" if wide == "consumer" else "int32")
    m = tc.var("m", "int64" if wide == "producer" else "int32")
    A = tc.placeholder((6, 11), name="A")
    T1 = tc.compute((m,), lambda i: A[3 - i % 4, i % 4 * 3 + 1] / (i % 3 + 1).astype("float32"),
                    name="T1")
    T2 = tc.compute((n,), lambda i: T1[i % 4] + i.astype("float32"), name="T2")
    s = tc.create_schedule(T2.op)
    s[T1].compute_inline()
    xo, xi = s[T2].split(T2.op.axis[0], factor=16)
    args = [A, T2, m]
    a = np.random.default_rng(0).uniform(-1, 1, (6, 11)).astype("float32")
    out = np.zeros(37, "float32")
    if runner == "llvm":
        tc.build(s, args)(a, out, 4)
    else:
        interp.run(tc.lower(s, args), a, out, 4)
    i = np.arange(37)
    want = a[3 - i % 4, i % 4 * 3 + 1] / (i % 4 % 3 + 1) + i
    np.testing.assert_allclose(out, want, rtol=1e-6)


def _holds_for(func, **sizes) -> bool:
    """Whether every call-time check of ``func`` passes with the variables ``sizes``."""
    from tecomp.ir.functor import free_vars
    from tecomp.runtime.argcheck import compile_shape_expr
    for pc in func.attrs["param_checks"]:
        env = {v: sizes[v.name] for v in free_vars(pc.expr)}
        if not pc.holds(compile_shape_expr(pc.expr)(env)):
            return False
    return True


@pytest.mark.parametrize("runner", ["llvm", "interp"])
def test_a_big_split_of_a_fused_symbolic_axis_is_checked_by_its_real_bound(runner):
    """Campaign seed 10063711 (big_split family): a fused axis split by 2**31 - 1 is
    decomposed by ``// n``, which the interval analysis cannot bound; the cruder bound
    that replaced it took the outer loop's extent ``(n*7 - 1) // 2147483647 + 1`` to be
    ``n*7 + 2``, so the call-time check refused n = 11 (``can reach 339302416303``).  The
    bound now starts from the dividend's own interval: small sizes run, sizes whose fused
    index passes int32 are still refused."""
    n = tc.var("n")
    A = tc.placeholder((7, 6), "float64", name="A")
    C = tc.compute((7, n, n), lambda i, j, k: tc.if_then_else(i >= 1, A[i, i - 1], 0.0),
                   name="C")
    s = tc.create_schedule(C.op)
    f = s[C].fuse(C.op.axis[0], C.op.axis[1])
    s[C].split(f, factor=2**31 - 1)
    func = tc.lower(s, [A, C])
    assert _holds_for(func, n=11) and _holds_for(func, n=2**31 // 7)
    assert not _holds_for(func, n=2**31 // 7 + 2)
    a = np.random.default_rng(0).uniform(-1, 1, (7, 6))
    c = np.zeros((7, 11, 11))
    if runner == "llvm":
        tc.build(s, [A, C])(a, c)
    else:
        interp.run(func, a, c)
    want = np.r_[0.0, a[np.arange(1, 7), np.arange(6)]]
    np.testing.assert_array_equal(c, np.broadcast_to(want[:, None, None], (7, 11, 11)))


@pytest.mark.parametrize("runner", ["llvm", "interp"])
def test_an_int32_cast_of_an_int64_loop_keeps_its_range(runner):
    """Campaign seed 10066051 (big_split family): an axis split by 2**32 + 1 is int64 and
    the int32 index ``n - 1 - i`` of a producer reads it as ``int32(i.inner)``; the
    analysis knew nothing of that cast's upper end (the int64 ``int64(n)`` had no bound),
    so ``n - int32(i.inner) - 1`` got a check that refused n = 3.  A cast's value is one of
    its source's dtype: ``int64(n)`` is at most 2**31 - 1, and no check is needed."""
    n = tc.var("n")
    A = tc.placeholder((n,), name="A")
    P = tc.compute((n,), lambda i: A[i] * 2.0, name="P")
    C = tc.compute((8, n), lambda j, i: P[n - 1 - i] + j.astype("float32"), name="C")
    s = tc.create_schedule(C.op)
    io, ii = s[C].split(C.op.axis[1], factor=2**32 + 1)
    s[P].compute_at(s[C], ii)
    func = tc.lower(s, [A, C])
    assert "int32(i.inner)" in str(func)
    assert func.attrs["param_checks"] == ()
    a = np.arange(3, dtype="float32")
    c = np.zeros((8, 3), "float32")
    if runner == "llvm":
        tc.build(s, [A, C])(a, c)
    else:
        interp.run(func, a, c)
    np.testing.assert_array_equal(c, a[::-1] * 2 + np.arange(8, dtype="float32")[:, None])


def _te_argmax(n, m=None):
    """TVM's tuple-reducer argmax of X[4, n] (or of X[4, n, m] over the flattened last
    two axes), its running index an int32 read back from memory each step."""
    def combine(p, q):
        c = (q[0] < 0) | (p[1] > q[1])
        return tc.if_then_else(c, p[0], q[0]), tc.if_then_else(c, p[1], q[1])

    reducer = tc.comm_reducer(combine, lambda ti, tv: (tc.const(-1, ti), tc.min_value(tv)),
                              name="argmax")
    if m is None:
        X = tc.placeholder((4, n), name="X")
        k = tc.reduce_axis((0, n), "k")
        idx, _ = tc.compute((4,), lambda i: reducer((k, X[i, k]), axis=k), name="A")
    else:
        X = tc.placeholder((4, n, m), name="X")
        k, j = tc.reduce_axis((0, n), "k"), tc.reduce_axis((0, m), "j")
        idx, _ = tc.compute((4,), lambda i: reducer((k * m + j, X[i, k, j]), axis=[k, j]),
                            name="A")
    return X, idx


@pytest.mark.parametrize("runner", ["llvm", "interp"])
def test_an_argmax_over_a_symbolic_axis_needs_no_check(runner):
    """An argmax's running index is a select between its value read back from memory (an
    int32: |INT32_MIN| bounds its magnitude) and the loop counter k < n: the pass took it
    to reach 2**31 and refused every call (`... can reach 2147483648 with n = 7`); a
    select of int32 values fits where each does."""
    X, A = _te_argmax(tc.var("n"))
    s = tc.create_schedule(A.op)
    func = tc.lower(s, [X, A])
    assert func.attrs["param_checks"] == ()
    x = rng_normal((4, 7))
    a = np.zeros(4, "int32")
    if runner == "llvm":
        tc.build(s, [X, A])(x, a)
    else:
        interp.run(func, x, a)
    np.testing.assert_array_equal(a, x.argmax(1))


def test_an_argmax_whose_flat_index_passes_int32_is_refused():
    """Over two int32 sizes the flat index k*m + j may pass int32: still checked when the
    kernel is called (nn.argmax's too), and refused for 65536 x 65537."""
    X, A = _te_argmax(tc.var("n"), tc.var("m"))
    s = tc.create_schedule(A.op)
    assert [str(pc.expr) for pc in tc.lower(s, [X, A]).attrs["param_checks"]] != []
    x = rng_normal((4, 5, 6))
    a = np.zeros(4, "int32")
    tc.build(s, [X, A])(x, a)
    np.testing.assert_array_equal(a, x.reshape(4, -1).argmax(1))
    out = in_child("""
        import test_index_dtype as t
        from tecomp import nn
        from tecomp.errors import ArgumentError
        X, A = t._te_argmax(tc.var("n"), tc.var("m"))
        Xn = tc.placeholder((4, tc.var("n"), tc.var("m")), name="Xn")
        An = nn.argmax(Xn, axis=(1, 2))
        for args in ([X, A], [Xn, An]):
            f = tc.build(tc.create_schedule(args[1].op), args)
            try:   # (a missing check would run 4 * 2**32 steps and give wrapped indices)
                f(zero_stride((4, 65536, 65537), "float32"), np.zeros(4, "int32"))
                print("ran")
            except ArgumentError as e:
                print("refused", "can reach" in str(e))
    """)
    assert out.split() == ["refused", "True"] * 2, out


def rng_normal(shape):
    return np.random.default_rng(0).standard_normal(shape).astype("float32")
