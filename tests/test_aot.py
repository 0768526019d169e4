"""Ahead-of-time compiled kernels: ``Module.export_library`` and ``tc.load_module``.

A loaded module must behave exactly like the module that was exported: the same results
(contiguous arrays, strided views, aliased arguments, every dtype, symbolic shapes,
scalars, parallel loops), the same ArgumentError, BoundsError and KernelMemoryError
messages; loading must not import llvmlite; C code calls the library through the
documented ABI (examples/aot/).  The files that must not load are in
tests/must_fail/test_load_errors.py.
"""
import ctypes
import importlib.util
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import tecomp as tc
from tecomp.ir import Allocate, Buffer, BufferLoad, BufferStore, Const, For, PrimFunc, Var, seq
from tecomp.ir import dtype as _dt
from tecomp.ir.expr import as_expr

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def libdir(tmp_path_factory):
    return tmp_path_factory.mktemp("aot")


def roundtrip(f, libdir, name):
    """Export ``f`` to ``libdir/name.so`` and load it back."""
    path = str(libdir / f"{name}.so")
    f.export_library(path)
    return tc.load_module(path)


def same_error(f, g, *args):
    """Both modules raise the same error, with the same message; return it."""
    errors = []
    for m in (f, g):
        with pytest.raises(tc.TecompError) as info:
            m(*args)
        errors.append(info.value)
    assert type(errors[0]) is type(errors[1])
    assert str(errors[0]) == str(errors[1])
    return errors[1]


def example():
    """examples/aot/export.py, whose ``build()`` makes ``C = alpha * A + B`` over a
    symbolic n: parallel chunks of 4096, vectorized."""
    spec = importlib.util.spec_from_file_location(
        "tecomp_aot_example", os.path.join(ROOT, "examples", "aot", "export.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def saxpy_pair(libdir):
    f = example().build()
    return f, roundtrip(f, libdir, "saxpy")


def _ld(b, *idx):
    return BufferLoad(b, tuple(as_expr(i) for i in idx), b.dtype)


def _st(b, value, *idx):
    return BufferStore(b, as_expr(value, b.dtype), tuple(as_expr(i) for i in idx))


def _buf(name, shape, dtype="float32"):
    return Buffer(name, tuple(Const(s) if isinstance(s, int) else s for s in shape), dtype)


def oob_kernel():
    """B[i] = A[i + 3]: out of bounds for the last three i, caught with checks=True."""
    A, B = _buf("A", (16,)), _buf("B", (16,))
    i = Var("i")
    return PrimFunc("oob", (A, B), For(i, as_expr(0), as_expr(16), "parallel",
                                        _st(B, _ld(A, i + 3), i)))


# ---------------------------------------------------------------------------------------
# round trips


def test_saxpy_contiguous_views_and_aliasing(saxpy_pair):
    f, g = saxpy_pair
    assert g.name == "saxpy" and g.entry_symbol == "tecomp_saxpy"
    assert [p.name for p in g.params] == ["A", "B", "C", "alpha"]
    rng = np.random.default_rng(0)
    a = rng.random(10001).astype("float32")  # three parallel chunks
    b = rng.random(10001).astype("float32")
    want, got = np.empty_like(a), np.empty_like(a)
    f(a, b, want, 2.5)
    g(a, b, got, 2.5)
    np.testing.assert_array_equal(got, want)
    # a strided view of every argument (negative steps too): the strided variant
    want, got = np.empty(5001, "float32"), np.empty((5001, 2), "float32")[:, 1]
    f(a[::2], b[::-2], want, -1.0)
    g(a[::2], b[::-2], got, -1.0)
    np.testing.assert_array_equal(got, want)
    # the output is an input: the aliasing-safe variant
    a1, a2 = a.copy(), a.copy()
    f(a1, b, a1, 3.0)
    g(a2, b, a2, 3.0)
    np.testing.assert_array_equal(a2, a1)
    # (f has compiled every variant: export_library puts them all in the library)
    assert g.variants_compiled == [("contiguous", False), ("contiguous", True),
                                   ("strided", True)]
    assert g.vectorize_notes == f.vectorize_notes


def test_same_argument_errors(saxpy_pair):
    f, g = saxpy_pair
    a = np.ones(8, "float32")
    same_error(f, g, a, a)
    same_error(f, g, a, a, np.ones(9, "float32"), 1.0)
    same_error(f, g, a, a, a.astype("float64"), 1.0)
    same_error(f, g, a, a, np.ones((8, 1), "float32"), 1.0)
    same_error(f, g, a, a, a, "x")
    same_error(f, g, [1.0] * 8, a, a, 1.0)
    ro = np.ones(8, "float32")
    ro.flags.writeable = False
    e = same_error(f, g, a, a, ro, 1.0)
    assert "parameter C (argument 3) is written by saxpy" in str(e)


def test_symbolic_shape_expression(libdir):
    n = tc.var("n")
    alpha = tc.var("alpha", "float32")
    A = tc.placeholder((n, 4), name="A")
    B = tc.compute((n * 2, 4), lambda i, j: A[i // 2, j] * alpha, name="B")
    f = tc.build(tc.create_schedule(B.op), [A, B, alpha])
    g = roundtrip(f, libdir, "scaled")
    a = np.arange(12, dtype="float32").reshape(3, 4)
    out = np.empty((6, 4), "float32")
    g(a, out, 2.0)
    np.testing.assert_array_equal(out, np.repeat(a, 2, axis=0) * 2)
    e = same_error(f, g, a, np.empty((5, 4), "float32"), 2.0)
    assert "B.shape[0] = 5 but parameter B (argument 2) expects n*2 = 6" in str(e)


def test_scalar_extent_conditions(libdir):
    k = tc.var("k")
    A = tc.placeholder((4, 8), name="A")
    r = tc.reduce_axis((0, k), name="r")
    S = tc.compute((4,), lambda i: tc.sum(A[i, r], axis=r), name="S")
    f = tc.build(tc.create_schedule(S.op), [A, S, k], name="rowsum")
    g = roundtrip(f, libdir, "rowsum")
    a = np.arange(32, dtype="float32").reshape(4, 8)
    out = np.empty(4, "float32")
    g(a, out, 5)
    np.testing.assert_array_equal(out, a[:, :5].sum(axis=1))
    e = same_error(f, g, a, out, -3)
    assert "parameter k (argument 3) = -3 must be >= 0" in str(e)


def test_bounds_error_message_matches(libdir):
    f = tc.build(oob_kernel(), checks=True)
    g = roundtrip(f, libdir, "oob")
    assert g.checks
    a, b = np.zeros(16, "float32"), np.zeros(16, "float32")
    e = same_error(f, g, a, b)
    assert isinstance(e, tc.BoundsError)
    assert "load from buffer A: index 16 is outside [0, 16) in dimension 0" in str(e)
    # views take the strided variant, which reports the same sites
    same_error(f, g, np.zeros(32, "float32")[::2], b)


def test_kernel_memory_error_matches(libdir):
    A = _buf("A", (1,), "int64")
    size, pick = Var("size", "int64"), Var("pick", "int64")
    H = _buf("H", (size,), "int64")
    k = Var("k", "int64")
    body = Allocate(H, seq(For(k, as_expr(0, "int64"), size, "serial", _st(H, k * 3, k)),
                           _st(A, _ld(H, pick), 0)))
    f = tc.build(PrimFunc("big", (A, size, pick), body))
    g = roundtrip(f, libdir, "big")
    out = np.zeros(1, np.int64)
    g(out, 10, 7)
    assert out[0] == 21
    e = same_error(f, g, out, (2 ** 63 - 8) // 8, 0)
    assert isinstance(e, tc.KernelMemoryError)


def test_every_dtype(libdir):
    n = tc.var("n")
    ins, outs, scalars = [], [], []
    for d in _dt.ALL_DTYPES:
        X = tc.placeholder((n,), dtype=d, name=f"X_{d}")
        s = tc.var(f"s_{d}", d)

        def body(X=X, s=s, d=d):
            return (lambda i: tc.all(X[i], s)) if d == "bool" else (lambda i: X[i] + s)
        ins.append(X)
        scalars.append(s)
        outs.append(tc.compute((n,), body(), name=f"Y_{d}"))
    f = tc.build(tc.create_schedule([Y.op for Y in outs]), ins + outs + scalars,
                 name="alltypes")
    g = roundtrip(f, libdir, "alltypes")
    rng = np.random.default_rng(1)
    xs = [rng.random(9) > 0.5 if d == "bool" else (rng.random(9) * 50).astype(d)
          for d in _dt.ALL_DTYPES]
    vals = [True if d == "bool" else 3 if _dt.is_int(d) else -1.25 for d in _dt.ALL_DTYPES]
    want = [np.empty_like(x) for x in xs]
    got = [np.empty_like(x) for x in xs]
    f(*xs, *want, *vals)
    g(*xs, *got, *vals)
    for d, w, o in zip(_dt.ALL_DTYPES, want, got):
        assert o.dtype == np.dtype(_dt.numpy_dtype(d))
        np.testing.assert_array_equal(o, w, err_msg=d)
    same_error(f, g, *xs, *want, *vals[:-1], 300.5j)


def test_hostile_names_round_trip(libdir):
    """Names are data in the metadata (JSON, then an LLVM string): quotes, backslashes,
    newlines, NULs and non-ASCII come back as they were, in the same messages."""
    weird = ['A"\\n\n\x00', "B\u202e\u00e9\U0001f600", "}];{\"kind\":\"x\"}"]
    n = tc.var("n\n\"")
    X = tc.placeholder((n,), name=weird[0])
    Y = tc.placeholder((n,), name=weird[1])
    Z = tc.compute((n,), lambda i: X[i] + Y[i], name=weird[2])
    f = tc.build(tc.create_schedule(Z.op), [X, Y, Z], name="weird")
    g = roundtrip(f, libdir, "weird")
    assert [p.name for p in g.params] == [p.name for p in f.params]
    a = np.ones(3, "float32")
    same_error(f, g, a, a, np.ones(4, "float32"))
    same_error(f, g, a, a.astype("float64"), a)
    c = np.empty(3, "float32")
    g(a, a, c)
    assert (c == 2).all()


def test_long_names_and_deep_shapes_round_trip(libdir):
    """Whatever tc.build accepts and export_library writes, load_module reads back: a
    kernel name of 300 characters (its symbols are cut and hashed), a parameter name of
    5000, a shape expression nested 140 levels deep and a parameter of 70 dimensions
    (the loader called each of these exports damaged)."""
    n = tc.var("n")
    shape = n
    for k in range(70):
        shape = tc.min(shape + 1, 100000 + k)
    A = tc.placeholder((shape,), name="A" * 5000)
    B = tc.placeholder((1,) * 70, name="B")     # more than numpy's 64: from C only
    C = tc.compute((4,), lambda i: A[i] * 2, name="C")
    D = tc.compute((1,) * 70, lambda *i: B[i] + 1, name="D")
    name = "k" * 300
    f = tc.build(tc.create_schedule([C.op, D.op]), [n, A, B, C, D], name=name)
    g = roundtrip(f, libdir, "long")
    assert g.name == name and [p.name for p in g.params] == [p.name for p in f.params]
    assert [str(x) for x in g.params[1].shape] == [str(x) for x in f.params[1].shape]
    assert len(g.params[2].shape) == 70
    one = np.ones(1, "float32")
    err = same_error(f, g, 2, np.ones(72, "float32"), one, np.empty(4, "float32"), one)
    assert "expects a 70-d array" in str(err)


def test_thread_count_applies_to_the_library(saxpy_pair, libdir):
    f, g = saxpy_pair
    lib = ctypes.CDLL(g.library_path)  # the same loaded copy
    lib.tecomp_pool_get_threads.restype = ctypes.c_int32
    old = tc.get_num_threads()
    try:
        assert lib.tecomp_pool_get_threads() == old
        tc.set_num_threads(1)
        assert lib.tecomp_pool_get_threads() == 1
        a = np.ones(5000, "float32")
        c = np.empty_like(a)
        g(a, a, c, 1.0)
        assert (c == 2).all()
    finally:
        tc.set_num_threads(old)
    assert lib.tecomp_pool_get_threads() == old


def test_loaded_libraries_run_on_the_first_pool(saxpy_pair, libdir, monkeypatch):
    """With TECOMP_SHARED_POOL=1, a library loaded where a pool exists runs its parallel
    loops on that pool's threads, starting none of its own; by default on its own."""
    from tecomp import threads

    f, g = saxpy_pair
    monkeypatch.setenv("TECOMP_SHARED_POOL", "1")
    shared = roundtrip(f, libdir, "saxpy_shared_pool")
    old = tc.get_num_threads()
    a = np.arange(50000, dtype="float32")
    try:
        tc.set_num_threads(2)
        for m, workers in ((shared, 0), (g, 1)):
            c = np.empty_like(a)
            m(a, a, c, 2.0)
            np.testing.assert_array_equal(c, 3 * a)
            lib = ctypes.CDLL(m.library_path)  # the same loaded copy
            lib.tecomp_pool_num_workers.restype = ctypes.c_int32
            assert lib.tecomp_pool_num_workers() == workers
        assert threads._POOLS[0].num_workers() == 1
    finally:
        tc.set_num_threads(old)


def test_loaded_module_reports_what_it_is(saxpy_pair, libdir):
    f, g = saxpy_pair
    assert g.metadata["name"] == "saxpy" and g.metadata["format_version"] == 2
    assert g.metadata["tecomp_version"] == tc.__version__
    assert g.prim_func is None and g.library_path.endswith("saxpy.so")
    with pytest.raises(tc.LoadError, match="has no source .* call get_source on the module "
                                           "tc.build returned"):
        g.get_source("asm")
    with pytest.raises(tc.BuildError, match="that file is its library already"):
        g.export_library(str(libdir / "again.so"))
    again = tc.load_module(g.library_path)  # loading twice: one loaded copy, two Modules
    c = np.empty(3, "float32")
    again(np.ones(3, "float32"), np.ones(3, "float32"), c, 1.0)
    assert (c == 2).all()


def test_export_writes_a_matching_sidecar(saxpy_pair):
    import hashlib

    path = saxpy_pair[1].library_path
    with open(path, "rb") as fh:
        digest = hashlib.sha256(fh.read()).hexdigest()
    with open(path + ".sha256") as fh:
        assert fh.read() == f"{digest}  saxpy.so\n"  # sha256sum's format


def test_shape_expressions_survive_the_round_trip():
    """Every kind of integer expression the format describes comes back equal, its
    variables shared (one Var per entry of ``vars``)."""
    from tecomp.runtime.aot_format import _ExprEncoder, _Reader
    from tecomp.ir.expr import (
        Add, Cast, FloorDiv, FloorMod, Max, Min, Mul, Sub, TruncDiv, TruncMod,
    )

    n, m = Var("n"), Var("m", "int64")
    c = Const(3)
    exprs = [Add(n, c, "int32"), Sub(n, c, "int32"), Mul(n, c, "int32"),
             FloorDiv(n, c, "int32"), FloorMod(n, c, "int32"), TruncDiv(n, c, "int32"),
             TruncMod(n, c, "int32"), Min(n, c, "int32"), Max(Cast(n, "int64"), m, "int64"),
             Const(-2 ** 63, "int64"), n]
    enc = _ExprEncoder("f")
    encoded = json.loads(json.dumps([enc.expr(e) for e in exprs]))
    r = _Reader("a library")
    r.vars = [Var(v.name, v.dtype) for v in enc.vars]
    back = [r.expr(j) for j in encoded]
    env = {n: 17, m: -5}
    env_back = {r.vars[enc.vars.index(v)]: x for v, x in env.items()}
    from tecomp.runtime.argcheck import eval_host_expr

    for e, b in zip(exprs, back):
        assert type(b) is type(e) and b.dtype == e.dtype
        assert eval_host_expr(b, env_back) == eval_host_expr(e, env)
    assert back[0].a is back[1].a  # one variable n


# ---------------------------------------------------------------------------------------
# a deployment without llvmlite

_NO_LLVMLITE = r"""
import json, sys

class Block:
    attempts = []

    def find_spec(self, name, path=None, target=None):
        if name == "llvmlite" or name.startswith("llvmlite."):
            self.attempts.append(name)
            raise ImportError("llvmlite is not installed here")
        return None

sys.meta_path.insert(0, Block())
import numpy as np
import tecomp as tc

g = tc.load_module(sys.argv[1])
a = np.arange(10000, dtype="float32")
c = np.empty_like(a)
g(a, a, c, 2.0)
tc.set_num_threads(2)
g(a[::2], a[::2], c[:5000], 1.0)
checked = tc.load_module(sys.argv[2])
try:
    checked(np.zeros(16, "float32"), np.zeros(16, "float32"))
    bounds = None
except tc.BoundsError as e:
    bounds = str(e)
print(json.dumps({"ok": bool((c[:5000] == 2 * a[::2]).all()), "threads": tc.get_num_threads(),
                  "attempts": Block.attempts, "bounds": bounds,
                  "llvm": sorted(m for m in sys.modules if m.split(".")[0] == "llvmlite")}))
"""


def test_load_and_call_without_llvmlite(saxpy_pair, libdir):
    f = tc.build(oob_kernel(), checks=True)
    oob = str(libdir / "oob_nollvm.so")
    f.export_library(oob)
    with pytest.raises(tc.BoundsError) as info:
        f(np.zeros(16, "float32"), np.zeros(16, "float32"))
    proc = subprocess.run([sys.executable, "-c", _NO_LLVMLITE, saxpy_pair[1].library_path, oob],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": ROOT})
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {"ok": True, "threads": 2, "attempts": [], "bounds": str(info.value),
                   "llvm": []}


# ---------------------------------------------------------------------------------------
# C


def test_c_example(tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler (cc, gcc or clang) on the PATH to build examples/aot/main.c")
    lib = str(tmp_path / "saxpy.so")
    env = {**os.environ, "PYTHONPATH": ROOT, "TECOMP_NUM_THREADS": "3"}
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "aot", "export.py"),
                           lib], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    exe = str(tmp_path / "main")
    # main.c declares nothing itself: the ABI comes from tecomp_rt.h (tecomp.runtime.get_include)
    main_c = os.path.join(ROOT, "examples", "aot", "main.c")
    assert '#include "tecomp_rt.h"' in open(main_c).read()
    proc = subprocess.run([cc, "-O2", "-Wall", "-Wextra", "-Werror", "-I",
                           tc.runtime.get_include(), "-o", exe, main_c, "-ldl", "-lm"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    proc = subprocess.run([exe, lib], capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    # the library's pool takes TECOMP_NUM_THREADS when C code does not set a count
    assert proc.stdout.split() == ["threads", "3", "OK"]


def _header():
    import re

    text = open(os.path.join(tc.runtime.get_include(), "tecomp_rt.h")).read()
    defines = dict(re.findall(r"^#define (TECOMP_[A-Z0-9_]+) (\S+)", text, re.M))
    return text, defines


def test_c_header_matches_the_runtime():
    """tecomp_rt.h says what the code generator and the loader do: the format, the error
    codes and words, every pool function with its C types."""
    import re

    from tecomp.codegen.llvm import abi
    from tecomp.runtime import aot_format as fmt
    from tecomp.threads import POOL_FUNCTIONS

    text, d = _header()
    assert d["TECOMP_AOT_FORMAT"] == f'"{fmt.FORMAT}"'
    assert int(d["TECOMP_AOT_FORMAT_VERSION"]) == fmt.FORMAT_VERSION
    assert int(d["TECOMP_ERR_WORDS"]) == fmt.ERR_WORDS == abi.ERR_WORDS
    for code in ("BOUNDS", "MALLOC", "ASSERT", "EXTERN"):
        assert int(d[f"TECOMP_ERR_{code}"]) == getattr(abi, f"ERR_{code}")
    assert [int(d[f"TECOMP_ERR_{w}"]) for w in ("CODE", "SITE", "DIM", "INDEX", "EXTENT")] == \
        list(range(fmt.ERR_WORDS))
    ctype = {None: "void", ctypes.c_int32: "int32_t", ctypes.c_int64: "int64_t"}
    declared = {m[1]: (m[0], m[2]) for m in
                re.findall(r"^(void|int32_t|int64_t) (tecomp_pool_\w+)\(([^)]*)\);", text, re.M)}
    assert set(declared) == set(POOL_FUNCTIONS)
    for name, (restype, argtypes) in POOL_FUNCTIONS.items():
        ret, params = declared[name]
        assert ret == ctype[restype], name
        assert [p.split()[0] for p in params.split(",") if p.strip() != "void"] == \
            [ctype[a] for a in argtypes], name
        assert re.search(rf"typedef {ctype[restype]} \(\*{name}_fn\)", text), name


_LINKED = r"""
#include <stdio.h>
#include "tecomp_rt.h"
TECOMP_DECLARE_KERNEL(saxpy);
int main(void) {
    float a[5] = {1, 2, 3, 4, 5}, b[5] = {1, 1, 1, 1, 1}, c[5] = {0}, d[5] = {0};
    void *data[3] = {a, b, c};
    int64_t args[5] = {tecomp_slot_from_double(0.5), 5, 1, 1, 1};
    int64_t err[TECOMP_ERR_WORDS];
    tecomp_pool_set_threads(1);
    if (tecomp_saxpy(data, args, err) != TECOMP_OK) return 1;
    /* the strided variant reads the strides: every second element of c */
    float c2[10] = {0};
    void *data2[3] = {a, b, c2};
    int64_t args2[5] = {tecomp_slot_from_double(2.0), 5, 1, 1, 2};
    tecomp_kernel_fn strided = tecomp_saxpy_strided;
    if (strided(data2, args2, err) != TECOMP_OK) return 2;
    for (int i = 0; i < 5; i++) d[i] = c2[2 * i];
    printf("%g %g %g %g %g | %g %g %g %g %g | %d\n", c[0], c[1], c[2], c[3], c[4],
           d[0], d[1], d[2], d[3], d[4], (int)tecomp_pool_get_threads());
    return 0;
}
"""


@pytest.mark.parametrize("lang", ["c", "c++"])
def test_c_header_links_against_a_library(saxpy_pair, tmp_path, lang):
    """A program that links the library (no dlopen) with the header's declarations, in C
    and in C++ (extern "C"): the contiguous and the strided entries, a float slot."""
    cc = shutil.which("c++" if lang == "c++" else "cc") or shutil.which(
        "g++" if lang == "c++" else "gcc")
    if cc is None:
        pytest.skip(f"no {lang} compiler on the PATH")
    lib = saxpy_pair[1].library_path
    src = tmp_path / ("linked.cc" if lang == "c++" else "linked.c")
    src.write_text(_LINKED)
    exe = str(tmp_path / "linked")
    proc = subprocess.run([cc, "-O1", "-Wall", "-Wextra", "-Werror", "-I", tc.runtime.get_include(),
                           "-o", exe, str(src), lib, f"-Wl,-rpath,{os.path.dirname(lib)}"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    proc = subprocess.run([exe], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["1.5", "2", "2.5", "3", "3.5", "|",
                                   "3", "5", "7", "9", "11", "|", "1"]


def test_inputs_in_place_round_trip(libdir):
    """Which inputs may be passed in place of an output is proved by lowering and kept in
    the metadata (``in_place``): a loaded library takes the same in-place calls as the
    module it came from, and refuses the others the same way."""
    from tecomp.runtime import aot_format as fmt

    n = tc.var("n")
    A = tc.placeholder((n,), name="A")
    W = tc.placeholder((n,), name="W")
    B = tc.compute((n,), lambda i: A[i] * 2.0 + W[tc.min(i + 1, n - 1)], name="B")
    f = tc.build(tc.create_schedule(B.op), [A, W, B])
    g = roundtrip(f, libdir, "in_place")
    assert g.metadata["in_place"] == [[0, 2]]        # A may be B; W (a stencil) may not
    x = np.arange(10, dtype="float32")
    w = np.ones(10, "float32")
    for m in (f, g):
        y = x.copy()
        m(y, w, y)
        np.testing.assert_array_equal(y, x * 2 + 1)
    y = w.copy()
    err = same_error(f, g, x, y, y)
    assert "parameter W (argument 2) and parameter B (argument 3) are the same array" in str(err)
    # the field is checked as the rest of the metadata: only an input and an output of
    # one dtype and rank, by position
    raw = dict(g.metadata)
    for bad in ([[0, 1]], [[2, 0]], [[0, 7]], [[0]], [["0", 2]], [[True, 2]], "x"):
        doc = dict(raw, in_place=bad)
        with pytest.raises(tc.LoadError, match=r"its tecomp metadata is damaged"):
            fmt.parse_metadata(json.dumps(doc).encode(), "'lib.so'")
    # a library written before the field existed takes no input in place
    doc = {k: v for k, v in raw.items() if k != "in_place"}
    assert fmt.parse_metadata(json.dumps(doc).encode(), "'lib.so'").in_place == ()
