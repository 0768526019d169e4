"""The IR round trip: tc.ir.parse reads the printed loop IR back into the same function
(structurally equal, printing the same text), which tc.build compiles; property-tested on
the fuzzer's programs and the tecomp.nn templates.  The mistakes are in
tests/must_fail/test_ir_parse_errors.py."""
import math
import os

import numpy as np
import pytest

import tecomp as tc
from tecomp.ir import (
    Allocate, AssertStmt, AttrStmt, Buffer, BufferLoad, BufferStore, Call, Cast, Const,
    Evaluate, For, IfThenElse, Let, LetStmt, PrimFunc, Prefetch, Select, Sub, Var, parse, seq,
    structural_equal,
)
from tecomp.ir.stmt import ParamCheck
from tecomp.strategy import cpu as sc
from tecomp.nn import ops
from tecomp.testing import RandomDraw, draw_case
from tecomp.ir import interp
from tecomp.testing.fuzz import case_for_seed
from tecomp.testing.diff import draw_gpu_int8_gemm_case, draw_int8_gemm_case, schedule_case

from helpers import matmul

LONG = os.environ.get("TECOMP_LONG_TESTS", "") not in ("", "0")


def round_trip(func):
    """Print, parse, and check the parsed function against the printed one."""
    text = str(func)
    back = parse(text)
    assert structural_equal(func, back), text
    assert str(back) == text
    return back


# ---------------------------------------------------------------------------------
# every construct the printer writes


def test_loops_of_every_kind_allocations_and_guards():
    A, B, C, k = matmul(n=20, m=16, K=8)
    s = tc.create_schedule(C.op)
    CL = s.cache_write(C, "local")
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 8, 8)
    s[CL].compute_at(s[C], jo)
    s[C].parallel(io)
    s[C].vectorize(ji)
    s[C].unroll(ii)
    s[C].pragma(jo, "no_partition")
    f = tc.lower(s, [A, B, C])
    text = str(f)
    for word in ("parallel (", "vectorized (", "unrolled (", "allocate C.local", "(local)",
                 "// attr pragma_no_partition = None", "if ("):
        assert word in text, word
    round_trip(f)


def test_gpu_bound_loops_shared_memory_barriers_and_double_buffers():
    A, B, C, k = matmul(n=64, m=64, K=64)
    s = tc.create_schedule(C.op)
    AS = s.cache_read(A, "shared", [C])
    i, j = C.op.axis
    bi, ti = s[C].split(i, factor=16)
    s[C].bind(bi, tc.thread_axis("blockIdx.x"))
    s[C].bind(ti, tc.thread_axis("threadIdx.x"))
    ko, ki = s[C].split(k, factor=8)
    s[AS].compute_at(s[C], ko)
    s[AS].double_buffer()
    f = tc.lower(s, [A, B, C], target="cuda-emu")
    text = str(f)
    for word in ("blockIdx.x (", "threadIdx.x (", "(shared)", "syncthreads()",
                 "// attr async_copy = k.outer", "A.shared[k.outer % 2"):
        assert word in text, word
    round_trip(f)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "int8", "uint8", "int16", "int64",
                                   "float64"])
def test_dtypes_casts_selects_and_intrinsics(dtype):
    A = tc.placeholder((6, 7), dtype=dtype, name="A")
    P = tc.compute((8, 9), lambda i, j: tc.if_then_else(
        tc.all(i >= 1, i <= 6, j >= 1, j <= 7), A[i - 1, j - 1], tc.const(0, dtype)), name="P")
    if tc.ir.dtype.is_float(dtype):
        Y = tc.compute((8, 9), lambda i, j: tc.exp(P[i, j].astype("float32")).astype(dtype)
                       + P[i, j], name="Y")
    else:
        Y = tc.compute((8, 9), lambda i, j: (P[i, j] // 3 + P[i, j] % 5) * 2, name="Y")
    s = tc.create_schedule(Y.op)
    s[P].pragma(P.op.axis[0], "no_partition")
    s[P].pragma(P.op.axis[1], "no_partition")
    f = tc.lower(s, [A, Y])
    assert "select(" in str(f)
    round_trip(f)


def test_symbolic_shapes_scalar_parameters_and_their_checks():
    n = tc.var("n")
    m = tc.var("m", "int64")
    alpha = tc.var("alpha", "float32")
    f_ = tc.var("f")
    A = tc.placeholder((n, m), name="A")
    B = tc.compute((n, m), lambda i, j: A[i, j] * alpha, name="B")
    s = tc.create_schedule(B.op)
    s[B].split(B.op.axis[0], factor=f_)
    f = tc.lower(s, [A, B, alpha, f_])
    text = str(f)
    assert "// var m: int64" in text and "// param_check f >= 1" in text
    back = round_trip(f)
    assert [pc.uses for pc in back.attrs["param_checks"]] == \
        [pc.uses for pc in f.attrs["param_checks"]]


def test_statements_and_expressions_the_schedules_rarely_make():
    """let (statement and expression), assert, prefetch, an evaluated call, an allocation
    with strides, constants of every form, truncdiv/truncmod, casts and nested selects."""
    n = Var("n")
    A = Buffer("A", (n, Const(4)), "float32")
    B = Buffer("B", (n,), "float16")
    T = Buffer("T", (Const(2), Const(3)), "float32", (Const(4), Const(1)), "local")
    i, x, y = Var("i"), Var("x", "float32"), Var("y", "int64")
    ld = BufferLoad(A, (i, Const(3)), "float32")
    val = Let(x, ld, Select(tc.ir.LT(x, Const(-0.0, "float32")), Const(math.inf, "float32"),
                            Call("fma", (x, x, Const(1e-30, "float32")), "float32"),
                            "float32"), "float32")
    body = seq(
        Prefetch(A, (i, Const(0)), False),
        Prefetch(A, (i, Const(1)), True),
        Prefetch(A, (i, Const(2)), False, 2),
        Prefetch(A, (i, Const(3)), True, 3),
        BufferStore(T, Const(0.5, "float32"), (Const(1), Const(2))),
        LetStmt(y, Cast(i, "int64"), BufferStore(
            B, Cast(Sub(Const(0, "float32"), val, "float32"), "float16"),
            (Cast(tc.ir.TruncMod(y, Const(-3, "int64"), "int64"), "int32"),))),
        Evaluate(Call("syncthreads", (), "int32")),
        IfThenElse(tc.ir.EQ(tc.ir.TruncDiv(i, Const(2), "int32"), Const(0)),
                   BufferStore(B, Const(float("nan"), "float16"), (i,)),
                   BufferStore(B, Cast(Const(-2147483648), "float16"), (i,))),
    )
    f = PrimFunc("edge", (A, B, n), Allocate(T, AssertStmt(
        tc.ir.GE(n, Const(0)), "n >= 0 'quoted' \\ and\nnewline",
        For(i, Const(0), n, "serial", body))))
    round_trip(f)


def test_a_let_allocate_attr_or_assert_that_ends_before_its_block():
    """Its own block, { ... }, says where its body ends."""
    A = Buffer("A", (Const(4),), "int32")
    T = Buffer("T", (Const(4),), "int32", None, "local")
    i = Var("i")
    store = BufferStore(A, Const(1), (Const(0),))
    f = PrimFunc("main", (A,), seq(
        Allocate(T, For(i, Const(0), Const(4), "serial",
                        BufferStore(T, i, (i,)))),
        AttrStmt("pragma_x", 3, store),
        For(i, Const(0), Const(4), "serial", BufferStore(A, i, (i,))),
    ))
    text = str(f)
    assert text.count("{") == text.count("}") == 5
    round_trip(f)


def test_deeply_nested_expressions():
    """3000 levels of min(...) and of parentheses: read on the big stack of
    tecomp.ir.deep, like every entry point that walks the IR."""
    A = Buffer("A", (Const(4),), "int32")
    i = Var("i")
    e = tc.ir.Mul(i, Const(3), "int32")
    for k in range(3000):
        e = tc.ir.Min(Const(k), e, "int32") if k % 2 else tc.ir.Sub(Const(k), e, "int32")
    f = PrimFunc("main", (A,), For(i, Const(0), Const(4), "serial",
                                   BufferStore(A, tc.ir.FloorMod(e, Const(4), "int32"), (i,))))
    round_trip(f)


def test_names_that_are_not_identifiers():
    A = tc.placeholder((4,), name="input tensor [0]")
    B = tc.compute((4,), lambda i: A[i] + 1.0, name="out\n#include <x>")
    f = tc.lower(tc.create_schedule(B.op), [A, B])
    text = str(f)
    assert "input<U+0020>tensor<U+0020><U+005B>0<U+005D>" in text
    back = round_trip(f)
    assert [p.name for p in back.params] == ["input tensor [0]", "out\n#include <x>"]


def test_extern_call():
    A = tc.placeholder((8, 4), name="A")
    B = tc.placeholder((4, 6), name="B")

    def gemm(a, b, c):
        np.matmul(a, b, out=c)

    C = tc.extern((8, 6), [A, B], lambda ins, outs: tc.call_packed(gemm, ins[0], ins[1],
                                                                   outs[0]), name="C")
    D = tc.compute((8, 6), lambda i, j: tc.max(C[i, j], 0.0), name="D")
    f = tc.lower(tc.create_schedule(D.op), [A, B, D])
    assert "call_extern" in str(f)
    back = round_trip(f)
    a = np.random.default_rng(0).random((8, 4), dtype=np.float32)
    b = np.random.default_rng(1).random((4, 6), dtype=np.float32) - 0.5
    d = np.zeros((8, 6), np.float32)
    tc.build(back)(a, b, d)
    np.testing.assert_allclose(d, np.maximum(a @ b, 0), rtol=1e-5)


def _transposed_window_tiles():
    """A tensorize whose operand W steps by constants only in its flattened memory
    (printed `W[...] + (72*x0 + x1 in memory)`), as in test_tensorize."""
    W = tc.placeholder((16, 8, 3, 3), name="W")
    T = tc.compute((8, 3, 3, 16), lambda c, y, x, o: W[o, c, y, x], name="T")
    s = tc.create_schedule(T.op)
    c, y, x, o = T.op.axis
    f = s[T].fuse(c, y, x)
    fo, oo, fi, oi = s[T].tile(f, o, 8, 8)
    s[T].tensorize(fi, tc.tensor_intrin("x86.transpose_f32_8x8"))
    return s, [W, T]


def test_tensorize_blocks():
    A = tc.placeholder((4, 8), "uint8", name="A")
    B = tc.placeholder((8, 16), "int8", name="B")
    k = tc.reduce_axis((0, 8), name="k")
    C = tc.compute((4, 16), lambda i, j: tc.sum(A[i, k].astype("int32") * B[k, j].astype(
        "int32"), axis=k), name="C")
    s = tc.create_schedule(C.op)
    s.cache_read(B, "global", [C], blocks=[(1, 8), (0, 4)])
    jo, ji = s[C].split(C.op.axis[1], factor=8)
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=4)
    s[C].reorder(C.op.axis[0], jo, ko, ji, ki)
    s[C].tensorize(ji, tc.tensor_intrin("x86.avx2_u8s8s32_8x4"))
    f = tc.lower(s, [A, B, C])
    assert "tensorize x86.avx2_u8s8s32_8x4 (accumulate) {" in str(f)
    round_trip(f)

    s, args = _transposed_window_tiles()
    f = tc.lower(s, args)
    assert "+ (72*x0 + x1 in memory)" in str(f)
    back = round_trip(f)
    w = np.random.default_rng(3).standard_normal((16, 8, 3, 3)).astype(np.float32)
    out = np.zeros((8, 3, 3, 16), np.float32)
    interp.run(back, w, out)
    np.testing.assert_array_equal(out, w.transpose(1, 2, 3, 0))


def test_fuzzer_tensorized_int8_gemms_round_trip():
    seeds = range(40 if LONG else 6)
    for seed in seeds:
        for draw in (draw_int8_gemm_case, draw_gpu_int8_gemm_case):
            case = draw(RandomDraw(seed), name=f"seed {seed}")
            s, args, func = schedule_case(case)
            round_trip(tc.lower(s, args, target=case.target))


# ---------------------------------------------------------------------------------
# print, edit, parse, build


def test_an_edited_kernel_builds_and_computes_the_edit():
    A, B, C, k = matmul(n=16, m=16, K=8)
    D = tc.compute((16, 16), lambda i, j: C[i, j] * 2.0 + 1.0, name="D")
    s = tc.create_schedule(D.op)
    s[D].vectorize(D.op.axis[1])
    text = str(tc.lower(s, [A, B, D]))
    assert text.count("*2f + 1f") == 1
    edited = text.replace("*2f + 1f", "*3f - 0.5f")
    f = tc.build(parse(edited))
    rng = np.random.default_rng(0)
    a = rng.random((16, 8), dtype=np.float32)
    b = rng.random((8, 16), dtype=np.float32)
    d = np.zeros((16, 16), np.float32)
    f(a, b, d)
    np.testing.assert_allclose(d, (a @ b) * 3 - 0.5, rtol=1e-5)
    # and the unedited text computes what the schedule does
    tc.build(parse(text))(a, b, d)
    np.testing.assert_allclose(d, (a @ b) * 2 + 1, rtol=1e-5)


def test_an_edit_that_indexes_out_of_bounds_raises_instead_of_reading_memory():
    """A function read from text is built with bounds checks (checks=False opts out)."""
    A = tc.placeholder((8,), name="A")
    B = tc.compute((8,), lambda i: A[i] * 2.0, name="B")
    text = str(tc.lower(tc.create_schedule(B.op), [A, B]))
    mod = tc.build(parse(text.replace("A[i]", "A[i + 8]")))
    with pytest.raises(tc.BoundsError, match=r"out-of-bounds load from buffer A: index 8 is "
                                             r"outside \[0, 8\)"):
        mod(np.ones(8, np.float32), np.zeros(8, np.float32))


_NEGATIVE_ALLOCATION = """primfn main(A: float32[n], C: float32[n]) {
  allocate B: float32[EXT] (global)
  for (i, 0, 1000) {
    B[i] = 2f
  }
  for (i_1, 0, n) {
    C[i_1] = 1f
  }
}"""


@pytest.mark.parametrize("ext", ["-1", "n - 5"])
def test_an_allocation_of_negative_extent_has_no_element(ext):
    """An edited allocation of negative extent (a constant, or a symbolic one negative at
    the call): its stores are out of bounds.  Before, the bounds checks compared unsigned,
    so every index passed: the constant one ran silently, the symbolic one wrote past the
    1-byte block it got (glibc: 'double free or corruption', the process aborted)."""
    import subprocess
    import sys
    code = f"""
import numpy as np, tecomp as tc
f = tc.build(tc.ir.parse({_NEGATIVE_ALLOCATION.replace("EXT", ext)!r}))
for n in (8, 3):
    try:
        f(np.ones(n, np.float32), np.zeros(n, np.float32))
        print(n, "ran")
    except tc.BoundsError as e:
        print(n, "BoundsError", e)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    want_8 = "8 BoundsError out-of-bounds store to buffer B: index 0 is outside [0, 0)" \
        if ext == "-1" else "8 BoundsError out-of-bounds store to buffer B: index 3 is outside [0, 3)"
    assert lines[0].startswith(want_8), lines
    assert lines[1].startswith("3 BoundsError out-of-bounds store to buffer B: index 0 is "
                               "outside [0, 0) in dimension 0"), lines


def test_a_parsed_function_keeps_the_checks_on_its_arguments():
    n, f_ = tc.var("n"), tc.var("f")
    A = tc.placeholder((n,), name="A")
    B = tc.compute((n,), lambda i: A[i] + 1.0, name="B")
    s = tc.create_schedule(B.op)
    s[B].split(B.op.axis[0], factor=f_)
    mod = tc.build(parse(str(tc.lower(s, [A, B, f_]))))
    a = np.arange(10, dtype=np.float32)
    b = np.zeros(10, np.float32)
    mod(a, b, 4)
    np.testing.assert_array_equal(b, a + 1)
    with pytest.raises(tc.ArgumentError, match="f .* must be >= 1"):
        mod(a, b, 0)


def test_a_parsed_gpu_function_runs_in_the_cuda_emulation():
    from tecomp.testing.fuzz import _have_cxx

    if not _have_cxx():
        pytest.skip("no C++ compiler for the CUDA emulation")
    A = tc.placeholder((100,), name="A")
    B = tc.compute((100,), lambda i: A[i] * 2.0, name="B")
    s = tc.create_schedule(B.op)
    bo, bi = s[B].split(B.op.axis[0], factor=32)
    s[B].bind(bo, tc.thread_axis("blockIdx.x"))
    s[B].bind(bi, tc.thread_axis("threadIdx.x"))
    text = str(tc.lower(s, [A, B], target="cuda-emu"))
    # the emulation does not check indices: building text for it takes checks=False
    mod = tc.build(parse(text.replace("2f", "4f")), target="cuda-emu", checks=False)
    a = np.arange(100, dtype=np.float32)
    b = np.zeros(100, np.float32)
    mod(a, b)
    np.testing.assert_array_equal(b, a * 4)


# ---------------------------------------------------------------------------------
# the property: every fuzzer program and every tecomp.nn template


def _fuzz_round_trip(case):
    try:
        s, args, func = schedule_case(case)
        func = tc.lower(s, args, target=case.target)
    except tc.TecompError:
        return False   # a schedule the fuzzer drew that tecomp refuses: nothing printed
    round_trip(func)
    return True


def test_every_fuzzer_program_round_trips():
    """The cases of `python -m tecomp.testing.fuzz` with its defaults: drawn programs and
    schedules, auto-scheduled ones, tensorized int8 GEMMs, GPU schedules for the CUDA
    emulation (1 in 25) and the edge cases."""
    seeds = range(3000 if LONG else 200)
    done = sum(_fuzz_round_trip(case_for_seed(seed, gpu_every=25, auto_every=5,
                                              tensorize_every=10, edge_every=5))
               for seed in seeds)
    assert done > len(seeds) * 0.9


def test_every_fuzzer_gpu_program_round_trips():
    seeds = range(1000 if LONG else 100)
    done = sum(_fuzz_round_trip(draw_case(RandomDraw(seed), name=f"seed {seed}",
                                          target="cuda-emu")) for seed in seeds)
    assert done > len(seeds) * 0.8


def _gemm():
    A = tc.placeholder((64, 48), name="A")
    B = tc.placeholder((48, 40), name="B")
    C = ops.matmul(A, B)
    return sc.schedule_matmul(C), [A, B, C]


def _dense():
    X = tc.placeholder((8, 64), name="X")
    W = tc.placeholder((32, 64), name="W")
    Y = ops.dense(X, W)
    return sc.schedule_dense(Y), [X, W, Y]


def _conv2d():
    d = tc.placeholder((1, 8, 14, 14), name="data")
    w = tc.placeholder((16, 8, 3, 3), name="weight")
    out = ops.conv2d_nchw(d, w, stride=1, padding=1)
    return sc.schedule_conv2d_nchw(out), [d, w, out]


def _softmax():
    X = tc.placeholder((12, 100), name="X")
    Y = ops.softmax(X)
    return sc.schedule_softmax(Y), [X, Y]


def _layer_norm():
    X = tc.placeholder((19, 72), name="X")
    g = tc.placeholder((72,), name="gamma")
    b = tc.placeholder((72,), name="beta")
    Y = ops.layer_norm(X, g, b)
    args = [X, g, b, Y]
    return tc.auto_schedule(args), args


def _attention():
    q = tc.placeholder((1, 2, 16, 32), name="q")
    k = tc.placeholder((1, 2, 24, 32), name="k")
    v = tc.placeholder((1, 2, 24, 32), name="v")
    out = ops.scaled_dot_product_attention(q, k, v)
    return sc.schedule_attention(out), [q, k, v, out]


@pytest.mark.parametrize("make", [_gemm, _dense, _conv2d, _softmax, _layer_norm, _attention],
                         ids=lambda f: f.__name__.strip("_"))
def test_the_nn_templates_round_trip(make):
    s, args = make()
    round_trip(tc.lower(s, args))


def test_negation_and_subtraction_from_zero_print_apart():
    """A float's -x is -0.0 - x (IEEE's negation: -0.0 at +0.0), printed `-x`; 0.0 - x is a
    subtraction (+0.0 at +0.0), printed `0f - x`; both parse back to themselves and run
    with their own sign of zero."""
    A = tc.placeholder((2,), name="A")
    B = tc.compute((2,), lambda i: -A[i], name="B")
    C = tc.compute((2,), lambda i: 0.0 - A[i], name="C")
    a = np.array([0.0, -0.0], "float32")
    for T, text, signs in ((B, "B[i] = -A[i]", [True, False]),
                           (C, "C[i] = 0f - A[i]", [False, False])):
        s = tc.create_schedule(T.op)
        fn = tc.lower(s, [A, T])
        assert text in str(fn)
        round_trip(fn)
        out = np.ones(2, "float32")
        tc.build(s, [A, T])(a, out)
        assert np.signbit(out).tolist() == signs
    I = tc.placeholder((2,), "int32", name="I")    # an integer's -x is 0 - x
    assert "J[i] = -I[i]" in str(tc.lower(tc.create_schedule(
        (J := tc.compute((2,), lambda i: -I[i], name="J")).op), [I, J]))
