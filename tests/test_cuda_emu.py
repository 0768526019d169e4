"""The CUDA emulation: the generated CUDA C run on the CPU against numpy, in every
thread mode; a missing barrier gives a wrong answer; divergent barriers and traps are
errors; argument checks; the on-disk cache."""
import dataclasses
import os
import shutil
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import tecomp as tc

sys.path.insert(0, os.path.dirname(__file__))
from cuda_examples import (  # noqa: E402
    ALL_CASES, L, S, block_reverse, thread, vector_add,
)

from tecomp.errors import ArgumentError, BoundsError, BuildError  # noqa: E402
from tecomp.ir import AssertStmt, Buffer, Const, IfThenElse, PrimFunc, Var  # noqa: E402
from tecomp.codegen import cuda_emu  # noqa: E402
from tecomp.runtime.argcheck import bind_and_check  # noqa: E402
from tecomp.codegen.cuda import codegen_cuda  # noqa: E402
from tecomp.codegen.cuda_emu import (  # noqa: E402
    CudaEmuModule, build_cuda_emu, compile_emu_library, find_cxx,
)
from tecomp.testing.emu_entry import ATTACKS, run_attack  # noqa: E402

try:
    find_cxx()
except Exception:  # noqa: BLE001
    pytest.skip("no C++ compiler for the CUDA emulation", allow_module_level=True)

MODES = ("threads", "serial", "reverse")


_BIG_LOCALS = """
import sys
sys.path.insert(0, %r)
sys.path.insert(0, %r)
import numpy as np
import tecomp as tc
from cuda_examples import L, S, SYNC, local_row_per_thread, loop, thread
from tecomp.ir import Allocate, Buffer, Const, PrimFunc, Var, seq
from tecomp.codegen.cuda_emu import build_cuda_emu

W, T = 128 * 1024, 4                  # 512 KiB of float32 per thread: CUDA's local limit
A = Buffer("A", (Const(T), Const(W)), "float32")
B = Buffer("B", (Const(T), Const(W)), "float32")
Lc = Buffer("L.local", (Const(W),), "float32", scope="local")
t, k = Var("t"), Var("k")
# each thread: L = 2 A[t]; barrier (fibers in the serial modes); B[t] = reversed L + 1
body = thread(t, T, "threadIdx.x", Allocate(Lc, seq(
    loop(k, W, S(Lc, L(A, t, k) * 2.0, k)), SYNC,
    loop(k, W, S(B, L(Lc, (W - 1) - k) + 1.0, t, k)))))
m = build_cuda_emu(PrimFunc("big_local", (A, B), body))
a = np.random.default_rng(0).random((T, W), dtype=np.float32)
for mode in ("threads", "serial", "reverse"):
    b = np.zeros((T, W), np.float32)
    m(a, b, mode=mode)
    print(mode, float(np.abs(b - (a[:, ::-1] * 2 + 1)).max()))

# the same through the DSL: a 256 KiB local stage per thread, no barrier
s, args = local_row_per_thread(64 * 1024)
f = tc.build(s, list(args), target="cuda-emu")
x = np.random.default_rng(1).random((4, 64 * 1024), dtype=np.float32)
z = np.zeros_like(x)
f(x, z)
print("dsl", float(np.abs(z - (x[:, ::-1] * 2 + 1)).max()))
"""


def test_local_arrays_get_the_stack_they_need():
    """Each emulated thread had a 256 KiB stack, whatever its local arrays: a 256 KiB
    local array per thread killed the process (SIGSEGV) in the default mode and, on a
    fiber's malloc'ed stack, in the serial modes.  Each thread now gets its kernel's
    per-thread arrays plus the default; 512 KiB (CUDA's limit) runs in every mode.  In a
    child process: a regression would kill it."""
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    r = subprocess.run([sys.executable, "-c", _BIG_LOCALS % (root, os.path.dirname(__file__))],
                       capture_output=True, text=True, cwd=root, timeout=600)
    assert r.returncode == 0, (r.returncode, r.stderr[-3000:])
    errors = dict(line.split() for line in r.stdout.splitlines())
    assert set(errors) == {"threads", "serial", "reverse", "dsl"}, r.stdout
    assert all(float(e) == 0.0 for e in errors.values()), r.stdout


def test_thread_stack_size():
    kern = dataclasses.replace(codegen_cuda(vector_add().func).kernels[0], local_bytes=5000)
    assert cuda_emu.thread_stack_bytes(kern) == 256 * 1024 + 8192
    assert cuda_emu.thread_stack_bytes(kern, 1024) == 1024 * 1024 + 8192


def test_thread_stack_size_from_the_environment(monkeypatch):
    kern = codegen_cuda(vector_add().func).kernels[0]
    monkeypatch.setenv("TECOMP_CUDA_EMU_STACK_KIB", "2048")
    assert cuda_emu.thread_stack_bytes(kern) == 2048 * 1024
    monkeypatch.setenv("TECOMP_CUDA_EMU_STACK_KIB", "lots")   # (more: tests/must_fail)
    with pytest.raises(ArgumentError, match=r"TECOMP_CUDA_EMU_STACK_KIB='lots' is not an "
                                            r"integer from 0 to 1048576"):
        cuda_emu.thread_stack_bytes(kern)


@pytest.fixture(scope="module")
def modules():
    """Every example compiled once (in parallel: g++ is a separate process)."""
    cases = [mk() for mk in ALL_CASES]
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        mods = list(pool.map(lambda c: build_cuda_emu(c.func), cases))
    return {c.name: (c, m) for c, m in zip(cases, mods)}


def check(case, args):
    for k, want in case.expected(args).items():
        if case.rtol or case.atol:
            np.testing.assert_allclose(args[k], want, rtol=case.rtol, atol=case.atol)
        else:
            np.testing.assert_array_equal(args[k], want)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("index", range(len(ALL_CASES)))
def test_examples_match_numpy(modules, index, mode):
    case, mod = modules[ALL_CASES[index]().name]
    args = case.make_args(np.random.default_rng(index))
    mod(*args, mode=mode)
    check(case, args)


def test_same_text_as_nvcc_gets(modules):
    case, mod = modules["matmul"]
    assert mod.get_source("cuda") == codegen_cuda(case.func).source
    assert '#include "kernel.cu"' in mod.get_source("emu")
    with pytest.raises(ArgumentError, match="unknown source format 'ptx'"):
        mod.get_source("ptx")


def test_symbolic_sizes_at_call_time(modules):
    case, mod = modules["vector_add"]
    for n in (1, 63, 64, 65, 4097):
        args = case.make_args(np.random.default_rng(n), n)
        mod(*args)
        check(case, args)
    case, mod = modules["grid2d"]
    for shape in ((1, 1), (8, 32), (9, 33), (100, 3)):
        args = case.make_args(np.random.default_rng(0), shape)
        mod(*args)
        check(case, args)


def test_empty_launch_does_nothing(modules):
    _, mod = modules["vector_add"]
    a = np.zeros(0, "float32")
    mod(a, a.copy(), a.copy())  # grid (0 + 63) // 64 = 0 blocks: no launch


# --------------------------------------------------------------------------- barriers


@pytest.fixture(scope="module")
def reverse_modules():
    with ThreadPoolExecutor(max_workers=2) as pool:
        good, bad = pool.map(lambda c: (c, build_cuda_emu(c.func)),
                             [block_reverse(barrier=True), block_reverse(barrier=False)])
    return good, bad


@pytest.mark.parametrize("mode", ["serial", "reverse"])
def test_missing_barrier_gives_a_wrong_answer(reverse_modules, mode):
    """Thread t writes S[t] and reads S[63 - t].  In the deterministic modes the threads
    run one at a time from barrier to barrier, so without the barrier half of them read
    a slot that its writer has not written yet — every time."""
    (good, good_mod), (bad, bad_mod) = reverse_modules
    for _ in range(2):
        args = bad.make_args(None)
        bad_mod(*args, mode=mode)
        want = bad.expected(args)[1]
        assert np.count_nonzero(args[1] != want) == args[1].size // 2
        args = good.make_args(None)
        good_mod(*args, mode=mode)
        check(good, args)


def test_barrier_with_real_threads_many_times(reverse_modules):
    (good, good_mod), _ = reverse_modules
    for _ in range(20):
        args = good.make_args(None)
        good_mod(*args, mode="threads")
        check(good, args)


def test_full_1024_thread_blocks():
    case = block_reverse(nblocks=2, nthreads=1024)
    mod = build_cuda_emu(case.func)
    for mode in MODES:
        args = case.make_args(None)
        mod(*args, mode=mode)
        check(case, args)


def test_divergent_barrier_is_an_error_not_a_hang():
    """A __syncthreads() that half the threads skip (hand-edited source: tecomp itself
    refuses to generate one) is reported in every mode instead of deadlocking."""
    cs = codegen_cuda(block_reverse().func)
    bad = cs.source.replace("__syncthreads();", "if (threadIdx.x < 32) { __syncthreads(); }")
    assert bad != cs.source
    lib = compile_emu_library(dataclasses.replace(cs, source=bad))
    mod = CudaEmuModule(dataclasses.replace(cs, source=bad), lib)
    for mode in MODES:
        args = block_reverse().make_args(None)
        with pytest.raises(BuildError, match=r"__syncthreads\(\) was not reached by all threads "
                                             r"of block \(0, 0, 0\)"):
            mod(*args, mode=mode)


def test_failed_kernel_check_traps():
    n = Var("n")
    A = Buffer("A", (n,), "float32")
    bx, tx = Var("bx"), Var("tx")
    i = bx * 32 + tx
    body = thread(bx, (n + 31) // 32, "blockIdx.x", thread(tx, 32, "threadIdx.x", IfThenElse(
        i < n, AssertStmt(L(A, i) < Const(100.0, "float32"), "A[i] < 100", S(A, L(A, i) + 1.0, i)))))
    mod = build_cuda_emu(PrimFunc("checked", (A,), body))
    a = np.zeros(70, "float32")
    mod(a)
    assert (a == 1).all()
    a[37] = 500
    for mode in MODES:
        with pytest.raises(BoundsError, match=r"trapped in block \(1, 0, 0\), thread \(5, 0, 0\): "
                                              r"tecomp: check failed .*: A\[i\] < 100"):
            mod(a.copy(), mode=mode)


@pytest.mark.parametrize("ids_dtype", ["int32", "int64"])
def test_gather_ids_outside_the_table_are_a_bounds_error(ids_dtype):
    """A gather X[ids[i], j] and a scatter Y[ids[i]] on the GPU check each id where it is
    used (the kernel traps: a BoundsError in the emulation) instead of reading or writing
    outside the table (they ran silently before); an id that is not read (masked by a
    select) is not checked, as on the CPU."""
    import tecomp as tc

    V = tc.var("V")
    ids_t = tc.placeholder((6,), name="ids", dtype=ids_dtype)
    X = tc.placeholder((V, 3), name="X")
    G = tc.compute((6, 3), lambda i, j: tc.if_then_else(ids_t[i] >= 0, X[ids_t[i], j], 0.0),
                   name="G")
    s = tc.create_schedule(G.op)
    s[G].bind(G.op.axis[0], tc.thread_axis("blockIdx.x"))
    s[G].bind(G.op.axis[1], tc.thread_axis("threadIdx.x"))
    f = tc.build(s, [ids_t, X, G], target="cuda-emu")
    assert "tc_checked_index" in f.get_source("cuda")
    x = np.random.default_rng(3).random((7, 3), dtype=np.float32)
    ids = np.array([0, 6, -1, 2, -5, 1], ids_dtype)      # negative ids masked: not read
    g = np.zeros((6, 3), np.float32)
    f(ids, x, g)
    assert np.array_equal(g, np.where((ids >= 0)[:, None], x[np.maximum(ids, 0)], 0))
    for bad in (7, 1000, 2**31 - 1) + ((2**40,) if ids_dtype == "int64" else ()):
        ids[3] = bad
        with pytest.raises(BoundsError, match=rf"X\[ids\[i\]\] \(dimension 0 of X, extent V\): "
                                              rf"index {bad} is outside \[0, 7\)"):
            f(ids, x, g)

    # a scatter: Y[ids[i]] = v[i] (an extern-free store at an index read from memory)
    from tecomp.ir import BufferLoad, BufferStore
    Y = Buffer("Y", (Const(4, "int32"),), "float32")
    I = Buffer("I", (Const(3, "int32"),), ids_dtype)
    bx = Var("bx")
    body = thread(bx, 3, "blockIdx.x", BufferStore(
        Y, Const(1.0, "float32"), (BufferLoad(I, (bx,), ids_dtype),)))
    mod = build_cuda_emu(PrimFunc("scatter", (I, Y), body))
    y = np.zeros(4, np.float32)
    mod(np.array([0, 3, 1], ids_dtype), y)
    assert y.tolist() == [1, 1, 0, 1]
    with pytest.raises(BoundsError, match=r"Y\[I\[bx\]\] .*index -1 is outside \[0, 4\)"):
        mod(np.array([0, -1, 1], ids_dtype), y)


# --------------------------------------------------------------------------- arguments


def test_argument_errors(modules):
    case, mod = modules["vector_add"]
    a, b, c = case.make_args(np.random.default_rng(0), 100)
    with pytest.raises(ArgumentError, match=r"vector_add expects 3 arguments \(A, B, C\), got 2"):
        mod(a, b)
    with pytest.raises(ArgumentError, match=r"parameter B \(argument 2\) expects float32, got float64: convert with b\.astype\(np\.float32\)"):
        mod(a, b.astype("float64"), c)
    with pytest.raises(ArgumentError, match=r"parameter A \(argument 1\) expects a 1-d array of shape \(n,\), got a 2-d array of shape \(10, 10\)"):
        mod(a.reshape(10, 10), b, c)
    with pytest.raises(ArgumentError, match=r"n = 100 from A\.shape\[0\] but C\.shape\[0\] = 99 \(parameter C \(argument 3\) expects shape \(n,\)\)"):
        mod(a, b, c[:99])
    with pytest.raises(ArgumentError, match=r"parameter B \(argument 2\) expects an array \(numpy\.ndarray, [^)]*\) of float32 with shape \(n,\), got a list: convert with np\.asarray"):
        mod(a, list(b), c)
    ro = c.copy()
    ro.flags.writeable = False
    with pytest.raises(ArgumentError, match=r"parameter C \(argument 3\) is written by vector_add, but the array is read-only"):
        mod(a, b, ro)
    with pytest.raises(ArgumentError, match=r"parameter A \(argument 1\) expects float32, got float32 with non-native byte order"):
        mod(a.astype(a.dtype.newbyteorder()), b, c)
    # (a hand-written PrimFunc: nothing proves that C may be computed in place of A)
    with pytest.raises(ArgumentError, match=r"parameter A \(argument 1\) and parameter C \(argument 3\) are the "
                                            r"same array, and vector_add writes C, but tecomp cannot prove"):
        mod(a, b, a)
    both = np.zeros(2 * a.size, "float32")
    with pytest.raises(ArgumentError, match=r"parameter A \(argument 1\) and parameter C \(argument 3\) share memory"):
        mod(both[:a.size], b, both[1:a.size + 1])
    with pytest.raises(ArgumentError, match=r"unknown CUDA emulation mode 'fast'"):
        mod(a, b, c, mode="fast")


def test_constant_shape_and_scalar_errors(modules):
    case, mod = modules["matmul"]
    a, b, c = case.make_args(np.random.default_rng(0))
    with pytest.raises(ArgumentError, match=r"parameter B \(argument 2\) expects B\.shape\[1\] = 64, got 32"):
        mod(a, b[:, :32], c)
    case, mod = modules["shift_select"]
    a, b, alpha = case.make_args(np.random.default_rng(0))
    with pytest.raises(ArgumentError, match=r"parameter alpha \(argument 3\) expects a number \(float32\), got str"):
        mod(a, b, "0.5")
    mod(a, b, np.float32(2))  # numpy scalars are fine
    n, x = Var("n"), Var("x")
    A = Buffer("A", (n,), "int32")
    t = Var("t")
    f = PrimFunc("addx", (A, x), thread(t, n, "threadIdx.x", S(A, L(A, t) + x, t)))
    m = build_cuda_emu(f)
    arr = np.zeros(5, "int32")
    m(arr, 3)
    assert (arr == 3).all()
    with pytest.raises(ArgumentError, match=r"parameter x \(argument 2\) = 2147483648 does not fit int32"):
        m(arr, 2**31)
    with pytest.raises(ArgumentError, match=r"parameter x \(argument 2\) expects an integer \(int32\), got float"):
        m(arr, 1.5)
    # the launch is checked against CUDA's limits with the sizes the arguments give
    with pytest.raises(ArgumentError, match=r"threadIdx\.x has extent 2000, more than the 1024"):
        m(np.zeros(2000, "int32"), 1)


def test_bind_and_check_derived_shapes():
    n = Var("n")
    A, B = Buffer("A", (n,), "float32"), Buffer("B", (n + 1, 2 * n), "float32")
    env = bind_and_check((A, B), (np.zeros(3, "float32"), np.zeros((4, 6), "float32")))
    assert env == {n: 3}
    with pytest.raises(ArgumentError, match=r"B\.shape\[1\] = 7 but parameter B \(argument 2\) expects 2\*n = 6 \(n = 3 from A\.shape\[0\]\)"):
        bind_and_check((A, B), (np.zeros(3, "float32"), np.zeros((4, 7), "float32")))


def test_non_contiguous_arrays_are_copied_and_written_back(modules):
    case, mod = modules["grid2d"]
    big = np.random.default_rng(0).standard_normal((20, 30)).astype("float32")
    out_big = np.zeros((30, 20), "float32")
    a = big[::2, ::3]          # strided input
    out = out_big.T[:10, :10]  # transposed, strided output
    mod(a, out)
    np.testing.assert_array_equal(out, a * np.float32(2) + np.float32(1))
    assert np.count_nonzero(out_big) == 100  # nothing outside the view was touched


def test_explicit_strides_run_in_place():
    n, s0 = Var("n"), Var("s0")
    A = Buffer("A", (n, Const(4)), "float32", strides=(s0, Const(1)))
    B = Buffer("B", (n, Const(4)), "float32")
    bx, tx = Var("bx"), Var("tx")
    f = PrimFunc("strided", (A, B), thread(bx, n, "blockIdx.x", thread(tx, 4, "threadIdx.x",
                 S(B, L(A, bx, tx) * 3.0, bx, tx))))
    mod = build_cuda_emu(f)
    base = np.arange(60, dtype="float32").reshape(6, 10)
    b = np.zeros((6, 4), "float32")
    mod(base[:, 2:6], b)  # rows 10 floats apart
    np.testing.assert_array_equal(b, base[:, 2:6] * 3)


def test_workspace_is_allocated_per_call(modules):
    case, mod = modules["two_kernels"]
    for n in (5, 300):
        args = case.make_args(np.random.default_rng(n), n)
        mod(*args)
        check(case, args)


# --------------------------------------------------------------------------- cache


def test_disk_cache_survives_a_corrupted_library(tmp_path, monkeypatch):
    from tecomp.runtime.libfiles import write_sidecar

    monkeypatch.setenv("TECOMP_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cuda_emu, "_LIBS", {})
    case = vector_add(symbolic=False, n_const=77)
    cs = codegen_cuda(case.func)
    lib = compile_emu_library(cs)
    # (header-*: the precompiled header the builds share, cuda_emu.PRECOMPILED_HEADER)
    files = sorted(f for f in (tmp_path / "cuda_emu").iterdir() if not f.name.startswith("header-"))
    assert [f.suffixes[-1] for f in files] == [".so", ".sha256"]  # no temporary files left behind
    path = files[0]
    assert lib.path == str(path)
    # Corrupt it the way a crash or another writer would: a new file at that path.  (Writing
    # into the file in place would corrupt the pages this process has mapped: no library
    # survives that.)
    path.unlink()
    path.write_bytes(b"not a shared library")
    monkeypatch.setattr(cuda_emu, "_LIBS", {})
    mod = CudaEmuModule(cs, compile_emu_library(cs))
    args = case.make_args(np.random.default_rng(0), 77)
    mod(*args)
    check(case, args)
    assert path.read_bytes()[:4] == b"\x7fELF"  # rebuilt in place
    # this library copied to another kernel's entry with a sidecar of its own: its kernels
    # ran in place of the other's before; now the entry is rebuilt
    other = vector_add(symbolic=False, n_const=5)
    ocs = codegen_cuda(other.func)
    opath = tmp_path / "cuda_emu" / f"{cuda_emu._library_key(ocs)[0]}.so"
    shutil.copyfile(path, opath)
    write_sidecar(str(opath))
    mod = CudaEmuModule(ocs, compile_emu_library(ocs))
    args = other.make_args(np.random.default_rng(0), 5)
    mod(*args)
    check(other, args)
    assert opath.read_bytes() != path.read_bytes()


#: the attacks run by default, one of each kind (a planted library, the race, a resealed
#: damage, a link, the directory); the others (each a compile or two) with the long tests
#: and in the fuzzer's library_file family
DEFAULT_ATTACKS = ("other_key_section", "swap_after_check", "truncated_resealed",
                   "key_flip_resealed", "link_to_fifo", "directory")


@pytest.mark.parametrize("how", [h if h in DEFAULT_ATTACKS else
                                 pytest.param(h, marks=pytest.mark.slow) for h in ATTACKS])
def test_an_attacked_entry_is_compiled_again_and_none_of_it_runs(how):
    """The entry attacked (tecomp.testing.emu_entry): a library of another key with a
    sidecar of its own (its static constructors ran before: the key was compared after
    dlopen), one renamed onto the entry between its check and its load (loaded by path
    before: the planted one ran), truncated or flipped and resealed, a link, a FIFO...:
    compiled again, the right values, no constructor of another library run; a directory
    in its place is a BuildError."""
    kind, detail = run_attack(how, n=77 + ATTACKS.index(how), threads=32, k=ATTACKS.index(how))
    assert kind == ("refused" if how == "directory" else "ok"), detail


def test_precompiled_header_is_shared_and_a_broken_one_is_harmless(tmp_path, monkeypatch):
    """With GCC the header is precompiled once into the cache (header-*/) and the builds
    load it; a .gch that is not one (truncated, replaced) is ignored by GCC in favour of
    the header beside it, so the library still builds and runs right."""
    if not cuda_emu._gcc_like(find_cxx()):
        pytest.skip("the precompiled header is GCC's (.gch)")
    monkeypatch.setenv("TECOMP_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cuda_emu, "_LIBS", {})
    monkeypatch.setattr(cuda_emu, "PRECOMPILED_HEADER", True)
    case = vector_add(symbolic=False, n_const=79)
    compile_emu_library(codegen_cuda(case.func))
    (pch,) = (tmp_path / "cuda_emu").glob("header-*")
    gch = pch / (cuda_emu.HEADER_NAME + ".gch")
    assert gch.stat().st_size > 0 and (pch / cuda_emu.HEADER_NAME).read_text() == \
        cuda_emu.header_text()
    gch.unlink()
    gch.write_bytes(b"not a precompiled header")
    case = vector_add(symbolic=False, n_const=80)
    mod = build_cuda_emu(case.func)
    args = case.make_args(np.random.default_rng(0), 80)
    mod(*args)
    check(case, args)


def test_cache_directory_is_created_private(tmp_path, monkeypatch):
    """0700: the cache holds libraries this process loads and runs (one that other users
    may write to is refused: tests/must_fail/test_call_errors.py)."""
    monkeypatch.setenv("TECOMP_CACHE_DIR", str(tmp_path / "new"))
    monkeypatch.setattr(cuda_emu, "_LIBS", {})
    compile_emu_library(codegen_cuda(vector_add(symbolic=False, n_const=78).func))
    assert (tmp_path / "new" / "cuda_emu").stat().st_mode & 0o777 == 0o700


def test_env_mode_default(monkeypatch, modules):
    monkeypatch.setenv("TECOMP_CUDA_EMU_MODE", "reverse")
    case, mod = modules["block_reverse"]
    m2 = CudaEmuModule(mod.cuda_source, mod.lib)
    assert m2.mode == "reverse"
    monkeypatch.setenv("TECOMP_CUDA_EMU_MODE", "bogus")
    with pytest.raises(ArgumentError, match="TECOMP_CUDA_EMU_MODE='bogus'"):
        CudaEmuModule(mod.cuda_source, mod.lib)


def test_integer_division_by_zero_does_not_kill_the_process(modules):
    """x / 0 is undefined in the IR; the helpers give 0 (like the LLVM backend) instead of
    letting the CPU trap (SIGFPE would end the Python process)."""
    case, mod = modules["int_divmod_int32"]
    a, b, out = case.make_args(np.random.default_rng(0))
    b[10:20] = 0
    mod(a, b, out)
    assert (out[:4, 10:20] == 0).all()  # floordiv, floormod, truncdiv, truncmod by 0
    ok = b != 0
    check(case, [a[ok].copy(), b[ok].copy(), out[:, ok].copy()])


def test_atomic_add_of_many_threads_into_one_element():
    """atomicAdd on float32 (hand-edited source: tecomp emits it for FlashAttention-2's dq)
    is a real read-modify-write: 256 threads in 4 blocks each add A[i] into C[0] and
    C[i % 2], at once in the threads mode; the sums are right in every mode (the values
    are integers: no rounding whichever the order)."""
    case = vector_add(symbolic=False, n_const=256)
    cs = codegen_cuda(case.func)
    i = "(((int)blockIdx.x) * 64) + ((int)threadIdx.x)"
    store = f"C[{i}] = A[{i}] + B[{i}];"
    assert store in cs.source
    src = cs.source.replace(store, f"atomicAdd(C, A[{i}]); atomicAdd(C + 1 + (({i}) & 1), "
                                   f"B[{i}]);")
    mod = CudaEmuModule(dataclasses.replace(cs, source=src),
                        compile_emu_library(dataclasses.replace(cs, source=src)))
    a = np.arange(256, dtype="float32")
    b = np.ones(256, "float32")
    for mode in MODES + ("last_block_first",):
        for _ in range(3 if mode == "threads" else 1):
            c = np.zeros(256, "float32")
            mod(a, b, c, mode=mode)
            assert c[0] == a.sum() and c[1] == c[2] == 128 and not c[3:].any(), (mode, c[:3])


def _f16_matmul_with_async_copies():
    """A 64 x 64 x 64 float16 matmul on tensor cores whose tiles are copied with 16-byte
    cp.async (tecomp's default CUDA schedule), built for the emulation."""
    from tecomp.nn import ops
    from tecomp.strategy import cuda as sc

    A = tc.placeholder((64, 64), name="A", dtype="float16")
    B = tc.placeholder((64, 64), name="B", dtype="float16")
    C = ops.matmul(A, B)
    f = tc.build(sc.schedule_matmul(C, target="cuda-emu"), [A, B, C], target="cuda-emu")
    assert "tc_cp_async16" in f.get_source("cuda")
    return f


def _offset_views(offset):
    """float16 A and B ``offset`` elements into their buffers (``t[1:]`` of a tensor: 2
    bytes off the 16 a vector copy moves), and C (small integers: exact in float16)."""
    rng = np.random.default_rng(offset)
    bufs = [rng.integers(-3, 4, 64 * 64 + 8).astype("float16") for _ in range(2)]
    a, b = (x[offset:offset + 64 * 64].reshape(64, 64) for x in bufs)
    return a, b, np.zeros((64, 64), "float16")


@pytest.mark.parametrize("offset", [0, 1, 3])
def test_vector_copies_of_views_that_are_not_16_byte_aligned(offset):
    """An input a few float16 elements into its allocation (a view ``t[1:]``): the
    16-byte cp.async of its tiles would be a misaligned-address fault on a GPU; the
    generated code tests the addresses and copies such tiles element by element, and
    the emulation traps on a vector copy at a misaligned address, as the GPU faults."""
    f = _f16_matmul_with_async_copies()
    a, b, c = _offset_views(offset)
    f(a, b, c)
    np.testing.assert_array_equal(c, (a.astype("float32") @ b.astype("float32")).astype("float16"))


def test_emulation_traps_a_vector_copy_at_a_misaligned_address(monkeypatch):
    """With the generated code's address test taken away, the emulation finds the copy
    a GPU would fault on (a BoundsError naming it), rather than running it."""
    from tecomp.codegen import cuda as cg

    helpers = dict(cg.CudaRenderer.EXTRA_HELPERS)
    helpers["tc_aligned2"] = helpers["tc_aligned2"].replace(
        "return ((((unsigned long long)a) | ((unsigned long long)b)) & (n - 1ull)) == 0;",
        "return true;  // (the test taken away)")
    assert helpers["tc_aligned2"] != cg.CudaRenderer.EXTRA_HELPERS["tc_aligned2"]
    monkeypatch.setattr(cg.CudaRenderer, "EXTRA_HELPERS", helpers)
    f = _f16_matmul_with_async_copies()
    f(*_offset_views(0))
    with pytest.raises(BoundsError, match=r"a 16-byte cp.async from 0x[0-9a-f]+ to 0x[0-9a-f]+, "
                                          r"not 16-byte aligned: on a GPU a misaligned-address "
                                          r"fault"):
        f(*_offset_views(1))


def test_negation_and_subtraction_from_zero_keep_their_sign_of_zero():
    """CUDA C printed every 0 - x as (-x): right for -x (-0.0 - x of a float), wrong for
    0.0 - x, which is +0.0 at x = +0.0."""
    A = tc.placeholder((64,), name="A")
    a = np.zeros(64, "float32")
    for fn, sign in ((lambda i: -A[i], True), (lambda i: 0.0 - A[i], False)):
        B = tc.compute((64,), fn, name="B")
        s = tc.create_schedule(B.op)
        bx, tx = s[B].split(B.op.axis[0], 32)
        s[B].bind(bx, tc.thread_axis("blockIdx.x"))
        s[B].bind(tx, tc.thread_axis("threadIdx.x"))
        out = np.ones(64, "float32")
        tc.build(s, [A, B], target="cuda-emu")(a, out)
        assert np.signbit(out).all() == sign and not out.any()
