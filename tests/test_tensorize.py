"""tensorize (TVM's s[C].tensorize with te.decl_tensor_intrin): the built-in u8 x s8 -> s32
dot products (VNNI, AVX2), a user's own intrinsics, blocked copies (cache_read(blocks=)),
the interpreter and the CUDA emulation running the declared computation, traces, and the
auto-scheduler tensorizing an int8 GEMM written in plain TE.  Every result is exact
against an int64 reference."""
import numpy as np
import pytest

import tecomp as tc
from helpers import run
from tecomp.testing.hostile import HOSTILE

AVX2 = "x86.avx2_u8s8s32_8x4"
VNNI16 = "x86.vnni_u8s8s32_16x4"
VNNI8 = "x86.vnni_u8s8s32_8x4"
T8, T16 = "x86.transpose_f32_8x8", "x86.transpose_f32_16x16"
I8, I16 = "x86.interleave_s8_4x8", "x86.interleave_s8_4x16"
HOST = tc.Target("llvm")
HOST_BACKENDS = (["llvm"] if HOST.has_feature("avx2") else []) + ["interp"]


def _data(M, N, K, seed=0, extremes=True):
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 256, (M, K)).astype(np.uint8)
    b = rng.integers(-128, 128, (K, N)).astype(np.int8)
    if extremes:   # the largest products: 255 * -128 everywhere in the first row / column
        a[0, :] = 255
        b[:, 0] = -128
    return a, b


def _ref(a, b):
    return a.astype(np.int64) @ b.astype(np.int64)


def _gemm(M, N, K, swap=False):
    A = tc.placeholder((M, K), "uint8", name="A")
    B = tc.placeholder((K, N), "int8", name="B")
    k = tc.reduce_axis((0, K), name="k")
    if swap:
        f = lambda i, j: tc.sum(B[k, j].astype("int32") * A[i, k].astype("int32"), axis=k)  # noqa: E731
    else:
        f = lambda i, j: tc.sum(A[i, k].astype("int32") * B[k, j].astype("int32"), axis=k)  # noqa: E731
    return A, B, tc.compute((M, N), f, name="C")


def _hand(M, N, K, name=AVX2, swap=False, mr=None):
    """The GEMM with B copied into the intrinsic's panels and C tensorized."""
    L = int(tc.tensor_intrin(name).output.shape[0].value)
    A, B, C = _gemm(M, N, K, swap)
    s = tc.create_schedule(C.op)
    s.cache_read(B, "global", [C], blocks=[(1, L), (0, 4)])
    i, j = s[C].op.axis
    (k,) = s[C].op.reduce_axis
    jo, ji = s[C].split(j, factor=L)
    ko, ki = s[C].split(k, factor=4)
    if mr:
        io, ii = s[C].split(i, factor=mr)
        s[C].reorder(io, jo, ko, ii, ji, ki)
        s[C].unroll(ii)
    else:
        s[C].reorder(i, jo, ko, ji, ki)
    s[C].tensorize(ji, tc.tensor_intrin(name))
    return s, [A, B, C]


@pytest.mark.parametrize("backend", HOST_BACKENDS)
@pytest.mark.parametrize("swap", [False, True])
def test_avx2_dot_product_gemm_is_exact(backend, swap):
    s, args = _hand(12, 24, 32, swap=swap)
    a, b = _data(12, 24, 32)
    c = np.full((12, 24), 7, np.int32)
    run(s, args, [a, b, c], backend)
    np.testing.assert_array_equal(c, _ref(a, b))


def test_avx2_code_uses_pmaddwd_and_rows_outside_the_region_may_be_guarded():
    if not HOST.has_feature("avx2"):
        pytest.skip("this CPU has no AVX2")
    s, args = _hand(13, 16, 64, mr=4)          # 13 rows in blocks of 4: a guard around the call
    f = tc.build(s, args)
    assert "vpmaddwd" in f.get_source("asm")
    a, b = _data(13, 16, 64, seed=3)
    c = np.zeros((13, 16), np.int32)
    f(a, b, c)
    np.testing.assert_array_equal(c, _ref(a, b))
    fc = tc.build(s, args, checks=True)        # checked build: bounds of each region tested
    c[:] = 0
    fc(a, b, c)
    np.testing.assert_array_equal(c, _ref(a, b))


@pytest.mark.parametrize("name,target", [(VNNI16, "llvm -mcpu=cascadelake"),
                                         (VNNI8, "llvm -mcpu=cascadelake"),
                                         (VNNI16, "llvm -mcpu=znver4")])
def test_vnni_code_for_a_target_with_avx512_vnni(name, target):
    s, args = _hand(16, 32, 64, name=name)
    f = tc.build(s, args, target=target)
    asm = f.get_source("asm")
    assert "vpdpbusd" in asm
    if tc.Target(target).runs_here() is None:
        a, b = _data(16, 32, 64)
        c = np.zeros((16, 32), np.int32)
        f(a, b, c)
        np.testing.assert_array_equal(c, _ref(a, b))


def test_vnni_on_a_target_without_it_is_a_clear_error():
    s, args = _hand(16, 32, 64, name=VNNI16)
    with pytest.raises(tc.TargetError, match="needs avx512vnni, which target llvm -mcpu=haswell"):
        tc.build(s, args, target="llvm -mcpu=haswell")


def test_printed_ir_names_the_intrinsic_and_each_region():
    s, args = _hand(4, 16, 8)
    text = str(tc.lower(s, args))
    assert """\
      for (k.outer, 0, 2) {
        tensorize x86.avx2_u8s8s32_8x4 (accumulate) {
          // out c: C[i, j.outer*8 + x0]
          // in a: A[i, k.outer*4 + x0]
          // in b: B.global[k.outer, j.outer, x0, x1]
          for (j.inner, 0, 8) {
            for (k.inner, 0, 4) {
              C[i, j.outer*8 + j.inner] = C[i, j.outer*8 + j.inner] + int32(A[i, k.outer*4 + k.inner])*int32(B.global[k.outer, j.outer, j.inner, k.inner])
            }
          }
        }
      }""" in text
    assert "allocate B.global: int8[2, 2, 8, 4] (global)" in text


def test_cuda_emulation_runs_the_declared_computation():
    from tecomp.codegen.cuda_emu import find_cxx

    try:
        find_cxx()
    except Exception:  # noqa: BLE001
        pytest.skip("no C++ compiler for the CUDA emulation")
    s, args = _hand(8, 16, 16)
    C = args[2]
    for st in (s[C], s.stages[[x.name for x in s.stages].index("B.global")]):
        st.bind(st.leaf_iter_vars[0], tc.thread_axis("blockIdx.x"))
    f = tc.build(s, args, target="cuda-emu")
    a, b = _data(8, 16, 16)
    c = np.zeros((8, 16), np.int32)
    f(a, b, c)
    np.testing.assert_array_equal(c, _ref(a, b))


def test_trace_replays_and_prints_the_builtin_by_name():
    from tecomp.schedule.trace import replay

    s, args = _hand(8, 16, 16)
    steps = s.trace.to_json()
    assert ["tensorize"] == [st[0] for st in steps if st[0] == "tensorize"]
    assert f"tc.tensor_intrin('{AVX2}')" in s.trace.python(args)
    s2 = replay(steps, [args[2]])
    a, b = _data(8, 16, 16)
    c = np.zeros((8, 16), np.int32)
    run(s2, args, [a, b, c], HOST_BACKENDS[0])
    np.testing.assert_array_equal(c, _ref(a, b))


# -- a user's own intrinsics ---------------------------------------------------------------


def _fma8():
    """c[i] += sum_r a[r] * b[r, i] in float32, 8 lanes x 2, with vector FMAs; b's rows may
    lie anywhere (dense=False: ib.ptr steps by the region's strides), each row contiguous."""
    a = tc.placeholder((2,), name="a")
    b = tc.placeholder((2, 8), name="b")      # stored r-major: b[r, i]
    r = tc.reduce_axis((0, 2), name="r")
    c = tc.compute((8,), lambda i: tc.sum(a[r] * b[r, i], axis=r), name="c")

    def emit(ib, ins, outs):
        assert ins[1].strides[1] == 1 and outs[0].strides == (1,)
        acc = ib.load(outs[0], "<8 x float>")
        for rr in range(2):
            av = ib.splat(ib.load(ins[0], "float", (rr,)), 8)
            bv = ib.load(ins[1], "<8 x float>", (rr, 0))
            acc = ib.call("llvm.fma.v8f32", "<8 x float>", av, bv, acc)
        ib.store(outs[0], acc)
    return tc.decl_tensor_intrin(c, llvm=emit, name="my.fma8x2", requires=("avx2", "fma"),
                                 dense=False)


@pytest.mark.parametrize("backend", HOST_BACKENDS)
def test_a_user_declared_float_intrinsic(backend):
    if backend == "llvm" and not HOST.has_feature("fma"):
        pytest.skip("this CPU has no FMA")
    intrin = _fma8()
    X = tc.placeholder((6, 10), name="X")
    W = tc.placeholder((10, 16), name="W")
    k = tc.reduce_axis((0, 10), name="k")
    Y = tc.compute((6, 16), lambda i, j: tc.sum(X[i, k] * W[k, j], axis=k), name="Y")
    s = tc.create_schedule(Y.op)
    i, j = Y.op.axis
    jo, ji = s[Y].split(j, factor=8)
    ko, ki = s[Y].split(k, factor=2)
    s[Y].reorder(i, jo, ko, ki, ji)        # the region's loops: ki (reduction) then ji
    s[Y].tensorize(ki, intrin)
    rng = np.random.default_rng(1)
    x, w = rng.random((6, 10), np.float32), rng.random((10, 16), np.float32)
    y = np.zeros((6, 16), np.float32)
    run(s, [X, W, Y], [x, w, y], backend)
    np.testing.assert_allclose(y, x.astype(np.float64) @ w, rtol=1e-5)
    if backend == "llvm":   # a user intrinsic is no built-in: the trace says so
        assert not s.trace.replayable and "not a built-in" in s.trace.problem


@pytest.mark.parametrize("backend", HOST_BACKENDS)
@pytest.mark.parametrize("marked", [True, False])
def test_tensorize_computes_a_marked_where_in_full(backend, marked):
    """A sum whose where= leaves out zero products (the first two columns of X, zeros
    here: a padding; ``ZERO_WHERE``) tensorizes, the intrinsic (the interpreter: its
    declared loops) adding them; an unmarked where= is refused."""
    if backend == "llvm" and not HOST.has_feature("fma"):
        pytest.skip("this CPU has no FMA")
    from tecomp.te.reduce import ZERO_WHERE
    X = tc.placeholder((6, 10), name="X")
    W = tc.placeholder((10, 16), name="W")
    k = tc.reduce_axis((0, 10), name="k")
    Y = tc.compute((6, 16), lambda i, j: tc.sum(X[i, k] * W[k, j], axis=k, where=k >= 2),
                   name="Y", attrs={ZERO_WHERE: True} if marked else None)
    s = tc.create_schedule(Y.op)
    i, j = Y.op.axis
    jo, ji = s[Y].split(j, factor=8)
    ko, ki = s[Y].split(k, factor=2)
    s[Y].reorder(i, jo, ko, ki, ji)
    s[Y].tensorize(ki, _fma8())
    if not marked:
        with pytest.raises(tc.ScheduleError, match="where= condition"):
            tc.lower(s, [X, W, Y])
        return
    rng = np.random.default_rng(2)
    x, w = rng.random((6, 10), np.float32), rng.random((10, 16), np.float32)
    x[:, :2] = 0
    y = np.zeros((6, 16), np.float32)
    run(s, [X, W, Y], [x, w, y], backend)
    np.testing.assert_allclose(y, x.astype(np.float64) @ w, rtol=1e-5)


@pytest.mark.parametrize("backend", HOST_BACKENDS)
def test_an_elementwise_intrinsic_with_strides_it_reads_itself(backend):
    """A non-reduction intrinsic that overwrites its output, declared dense=False: it gets
    the region's strides (a column of a row-major matrix here) and handles them."""
    a = tc.placeholder((4,), name="a")
    c = tc.compute((4,), lambda i: a[i] * 2.0 + 1.0, name="c")
    seen = []

    def emit(ib, ins, outs):
        seen.append((ins[0].strides, outs[0].strides))
        for i in range(4):
            v = ib.load(ins[0], "float", (i,))
            v = ib.b.fadd(ib.b.fmul(v, ib.type("float")(2.0)), ib.type("float")(1.0))
            ib.store(outs[0], v, (i,))

    intrin = tc.decl_tensor_intrin(c, llvm=emit, name="my.affine4", dense=False)
    X = tc.placeholder((8, 5), name="X")
    Y = tc.compute((5, 8), lambda i, j: X[j, i] * 2.0 + 1.0, name="Y")   # a transpose
    s = tc.create_schedule(Y.op)
    jo, ji = s[Y].split(Y.op.axis[1], factor=4)
    s[Y].tensorize(ji, intrin)
    x = np.random.default_rng(2).random((8, 5), np.float32)
    y = np.zeros((5, 8), np.float32)
    run(s, [X, Y], [x, y], backend)
    np.testing.assert_allclose(y, x.T * 2 + 1, rtol=1e-6)
    if backend == "llvm":
        assert seen and seen[0] == ((5,), (1,))


# -- the auto-scheduler -----------------------------------------------------------------------


def _plain(shape_x, shape_w, fx, fw, M, N, K, batch=None):
    X = tc.placeholder(shape_x, "uint8", name="X")
    W = tc.placeholder(shape_w, "int8", name="W")
    k = tc.reduce_axis((0, K), name="k")
    if batch:
        C = tc.compute((batch, M, N), lambda q, i, j: tc.sum(
            X[fx(q, i, k)].astype("int32") * W[fw(q, k, j)].astype("int32"), axis=k), name="C")
    else:
        C = tc.compute((M, N), lambda i, j: tc.sum(
            X[fx(None, i, k)].astype("int32") * W[fw(None, k, j)].astype("int32"), axis=k),
            name="C")
    return X, W, C


CASES = {
    "gemm": ((13, 64), (64, 24), lambda q, i, k: (i, k), lambda q, k, j: (k, j), 13, 24, 64, None),
    "dense W[j, k]": ((5, 32), (16, 32), lambda q, i, k: (i, k), lambda q, k, j: (j, k),
                      5, 16, 32, None),
    "batched": ((2, 6, 16), (2, 16, 8), lambda q, i, k: (q, i, k), lambda q, k, j: (q, k, j),
                6, 8, 16, 2),
}


@pytest.mark.parametrize("case", list(CASES))
def test_auto_schedule_tensorizes_an_int8_gemm_written_in_plain_te(case):
    sx, sw, fx, fw, M, N, K, batch = CASES[case]
    X, W, C = _plain(sx, sw, fx, fw, M, N, K, batch)
    s = tc.auto_schedule([X, W, C])
    steps = s.trace.to_json()
    if HOST.has_feature("avx2"):
        assert any(st[0] == "tensorize" for st in steps)
        # W[k, j] is packed by interleaving 4 rows in registers; W[j, k] needs no shuffle
        code = s.trace.python([X, W, C])
        assert ("x86.interleave_s8_4x" in code) == (case != "dense W[j, k]"), code
    f = tc.build(s, [X, W, C])
    rng = np.random.default_rng(4)
    x = rng.integers(0, 256, sx).astype(np.uint8)
    w = rng.integers(-128, 128, sw).astype(np.int8)
    out = np.zeros(tuple(int(e.value) for e in C.shape), np.int32)
    f(x, w, out)
    x64, w64 = x.astype(np.int64), w.astype(np.int64)
    np.testing.assert_array_equal(out, x64 @ (w64.T if case == "dense W[j, k]" else w64))


def test_auto_schedule_picks_vnni_where_the_target_has_it():
    X, W, C = _plain((32, 64), (64, 32), lambda q, i, k: (i, k), lambda q, k, j: (k, j),
                     32, 32, 64)
    t = "llvm -mcpu=cascadelake"
    s = tc.auto_schedule([X, W, C], target=t)
    assert f"tc.tensor_intrin('{VNNI16}')" in s.trace.python([X, W, C])
    assert "vpdpbusd" in tc.build(s, [X, W, C], target=t).get_source("asm")
    # the sums in a local block (registers), not in C: LLVM stored C's at every step of
    # the serial kernel (one thread)
    assert "allocate C.local" in str(tc.lower(s, [X, W, C], target=t))
    # (the M x L transposes, M < L, after each square one)
    # (the L x M ones, M rows of L out, by M: the widest output first)
    rows16 = [f"x86.transpose_f32_{m}x16" for m in range(2, 16)]
    rows8 = [f"x86.transpose_f32_{m}x8" for m in range(2, 8)]
    cols16 = [f"x86.transpose_f32_16x{m}" for m in range(15, 8, -1)]
    cols = [f"x86.transpose_f32_{L}x{m}" for m in range(7, 1, -1) for L in (16, 8)]
    assert [x.name for x in tc.tensor_intrins_for(t)] == [
        VNNI16, T16, *rows16, I16, *cols16, VNNI8, AVX2, T8, *rows8, "x86.transpose_f32_16x8",
        I8, *cols]
    assert [x.name for x in tc.tensor_intrins_for("llvm -mcpu=haswell")] == [
        I16, AVX2, T8, *rows8, I8, *[c for c in cols if "_16x" not in c]]



def test_sums_in_c_stay_in_registers_on_one_thread():
    """The int8 GEMM's accumulators summed in C itself (knob tensorize.C.local off) on
    one thread (no parallel task): the packed B lives in the workspace (past the 64 KiB
    of the stack), and its loads carry alias scopes disjoint from C's, so LLVM keeps the
    24 sums in registers across the reduction loop: no store in the loop of the dot
    products (there were 24, one per sum, at every step).  Code for a named CPU, not run."""
    import re

    from tecomp.strategy import Knobs, apply_rules
    from tecomp.target import cpu_model

    A, B, C = _gemm(6, 64, 1040)
    t = "llvm -mcpu=cascadelake -num-cores=1"
    s = apply_rules([A, B, C], Knobs({"tensorize.C.local": False}), cpu_model(t))
    low = str(tc.lower(s, [A, B, C], target=t))
    assert "parallel" not in low and "C.local" not in low and "B.global: int8" in low
    asm = tc.build(s, [A, B, C], target=t).get_source("asm")
    loops = []
    for label in re.findall(r"^(\.LBB\d+_\d+):", asm, re.M):
        body = asm.split(label + ":", 1)[1]
        end = body.find("\tjne\t" + label + "\n")
        if end > 0 and "vpdpbusd" in body[:end] and "\n.LBB" not in body[:end]:
            loops.append(body[:end])
    assert len(loops) == 1 and loops[0].count("vpdpbusd") == 24, asm
    assert not re.findall(r"vmovdq\w*\s+%zmm\d+, [^%\n]*\(", loops[0]), loops[0]



@pytest.mark.parametrize("cols_outer", [False, True])
@pytest.mark.parametrize("panels", [False, True])
def test_int8_rule_orders_and_panels_are_exact(cols_outer, panels):
    """The rule's knobs: W packed in panels of the block's columns (each panel's groups
    of 4 rows one after another) or in blocks of one vector; the blocks of C column
    panel by column panel or row block by row block (13 rows: a short last block).
    The default order follows the machine model's L2 (cols_outer_default)."""
    from tecomp.strategy.tensorize import cols_outer_default
    from tecomp.target import cpu_model

    t = "llvm -mcpu=cascadelake"
    info = cpu_model(t)
    assert cols_outer_default(info, 1024, 1024, 64) and not cols_outer_default(
        info, 256, 256, 64) and not cols_outer_default(info, 64 << 20, 64, 64)
    low = _rule_exact(13, 128, 64, {"tensorize.C.cols_outer": cols_outer,
                                    "tensorize.C.panels": panels}, t)
    # [j / 64, k / 4, 64, 4] in panels, else [k / 4, j / 16, 16, 4]
    assert ("B.global: int8[16, 2, 64, 4] (global, strides [256, 4096, 4, 1])" in low) == panels
    assert ("B.global: int8[16, 8, 16, 4] (global)" in low) != panels
    assert "allocate C.local: int32[6, 64]" in low, low


def _rule_exact(M, N, K, knobs, t):
    """The int8 GEMM M x N x K scheduled by the rules with ``knobs`` for target ``t``:
    its lowered IR (text), after checking its result against numpy where ``t`` runs
    here."""
    from tecomp.strategy import Knobs, apply_rules
    from tecomp.target import cpu_model

    A, B, C = _gemm(M, N, K)
    s = apply_rules([A, B, C], Knobs(knobs), cpu_model(t))
    low = str(tc.lower(s, [A, B, C], target=t))
    if tc.Target(t).runs_here() is None:
        a, b = _data(M, N, K)
        c = np.zeros((M, N), np.int32)
        tc.build(s, [A, B, C], target=t)(a, b, c)
        np.testing.assert_array_equal(c, _ref(a, b))
    return low


def test_auto_schedule_leaves_what_does_not_fit_untensorized():
    # 20 columns: no multiple of 8; an int32 x int8 product: not u8 x s8
    for dx, N in (("uint8", 20), ("int32", 16)):
        X = tc.placeholder((8, 16), dx, name="X")
        W = tc.placeholder((16, N), "int8", name="W")
        k = tc.reduce_axis((0, 16), name="k")
        C = tc.compute((8, N), lambda i, j: tc.sum(X[i, k].astype("int32") * W[k, j].astype("int32"),
                                                   axis=k), name="C")
        s = tc.auto_schedule([X, W, C])
        assert not any(st[0] == "tensorize" for st in s.trace.to_json())


def test_cache_read_blocks_alone():
    """A blocked copy without tensorize: the readers read it through the index map."""
    A = tc.placeholder((8, 12), name="A")
    B = tc.compute((8, 12), lambda i, j: A[i, j] * 3.0, name="B")
    s = tc.create_schedule(B.op)
    Ab = s.cache_read(A, "global", [B], blocks=[(1, 4), (0, 2)])
    assert [int(e.value) for e in Ab.shape] == [4, 3, 4, 2]
    a = np.random.default_rng(0).random((8, 12), np.float32)
    for backend in ("llvm", "interp"):
        out = np.zeros((8, 12), np.float32)
        run(s, [A, B], [a, out], backend)
        np.testing.assert_allclose(out, a * 3)


def test_cache_read_blocks_rounded_up_with_pad():
    """A factor that does not divide its dimension, with pad=: the copy is rounded up
    to whole blocks (its last block holds pad past the edge) and read right."""
    A = tc.placeholder((7, 11), name="A")
    B = tc.compute((7, 11), lambda i, j: A[i, j] * 3.0, name="B")
    s = tc.create_schedule(B.op)
    Ab = s.cache_read(A, "global", [B], pad=-1.0, blocks=[(1, 4), (0, 2)])
    assert [int(e.value) for e in Ab.shape] == [4, 3, 4, 2]
    assert "= -1f" in str(tc.lower(s, [A, B]))    # (the tail holds pad, A not read past)
    a = np.random.default_rng(1).random((7, 11), np.float32)
    for backend in ("llvm", "interp"):
        out = np.zeros((7, 11), np.float32)
        run(s, [A, B], [a, out], backend)
        np.testing.assert_allclose(out, a * 3)


@pytest.mark.parametrize("step", [1, 2])
def test_strided_arrays_run_the_intrinsic_or_the_declared_loops(step):
    """Strided arrays run the variant whose strides are known only at run time: the
    intrinsic where the regions are laid out as declared (rows apart, elements
    contiguous: step 1), the loops it replaced where not (every other element: step 2)."""
    s, args = _hand(8, 16, 32, mr=4)
    f = tc.build(s, args) if HOST.has_feature("avx2") else None
    a, b = _data(8, 16, 32, seed=5)
    wide = np.zeros((8, 40 * step), np.uint8)
    av = wide[:, : 32 * step : step]
    av[:] = a
    outw = np.zeros((8, 20 * step), np.int32)
    cv = outw[:, : 16 * step : step]
    if f is None:
        pytest.skip("this CPU has no AVX2")
    f(av, b, cv)
    np.testing.assert_array_equal(cv, _ref(a, b))
    export = f.export_library if step == 1 else None   # the exported variants build too
    if export is not None:
        import os
        import tempfile

        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "k.so")
            export(p)
            g = tc.load_module(p)
            cv[:] = 0
            g(av, b, cv)
            np.testing.assert_array_equal(cv, _ref(a, b))


# -- float32 transposes: the panel copy of a dense layer's weight ------------------------------


def _transposed_copy(n, k, rows_apart=True):
    """T[kk, o] = W[o, kk] (W: n x k) tiled by 8 and tensorized with the 8x8 transpose;
    ``rows_apart=False`` declares the tile the other way round (T = W, both row major):
    the intrinsic's ``a`` then steps 1 across its rows and k along them, and the
    emitter copies element by element."""
    W = tc.placeholder((n, k), name="W")
    if rows_apart:
        T = tc.compute((k, n), lambda kk, o: W[o, kk], name="T")
    else:
        T = tc.compute((n, k), lambda o, kk: W[o, kk], name="T")
    s = tc.create_schedule(T.op)
    x, y = T.op.axis
    xo, yo, xi, yi = s[T].tile(x, y, 8, 8)
    s[T].tensorize(xi, tc.tensor_intrin(T8))
    return s, [W, T]


@pytest.mark.parametrize("rows_apart", [True, False])
@pytest.mark.parametrize("backend", HOST_BACKENDS)
def test_transpose_intrinsic_copies_tiles(backend, rows_apart):
    s, args = _transposed_copy(16, 24, rows_apart)
    w = np.random.default_rng(1).standard_normal((16, 24)).astype(np.float32)
    out = np.zeros((24, 16) if rows_apart else (16, 24), np.float32)
    run(s, args, [w, out], backend)
    np.testing.assert_array_equal(out, w.T if rows_apart else w)
    if backend == "llvm":
        ir = tc.build(s, args).get_source("llvm")
        # registers: row loads and shuffles (log2(8) rounds), no element-wise inserts
        assert ("shufflevector" in ir) == rows_apart
    if backend == "llvm" and rows_apart:
        # a strided view of W: its row stride is known only at run time, and the copy
        # runs the loops the intrinsic replaced
        f = tc.build(s, args)
        wide = np.zeros((16, 40), np.float32)
        wide[:, :24] = w
        out[:] = 0
        f(wide[:, :24], out)
        np.testing.assert_array_equal(out, w.T)


def _window_transposed(O=16, C=8, flip=False):
    """T[c, y, x, o] = W[o, c, y, x] for a 3x3 window (a convolution's weights copied
    across the output channels), the axes (c, y, x) fused into one of C*9 and tiled with
    the output channels by 8: W's tile ``W[o, f // 9, f // 3 % 3, f % 3]`` steps by a
    constant only in W's flattened memory (``o*C*9 + f``).  ``flip`` reads the window
    mirrored (``2 - f % 3``), which is not affine even there."""
    W = tc.placeholder((O, C, 3, 3), name="W")
    if flip:
        T = tc.compute((C, 3, 3, O), lambda c, y, x, o: W[o, c, y, 2 - x], name="T")
    else:
        T = tc.compute((C, 3, 3, O), lambda c, y, x, o: W[o, c, y, x], name="T")
    s = tc.create_schedule(T.op)
    c, y, x, o = T.op.axis
    f = s[T].fuse(c, y, x)
    fo, oo, fi, oi = s[T].tile(f, o, 8, 8)
    s[T].tensorize(fi, tc.tensor_intrin(T8))
    return s, [W, T]


@pytest.mark.parametrize("backend", HOST_BACKENDS)
def test_transpose_of_a_fused_window_is_affine_in_memory(backend):
    """A region whose indices are not affine one by one but whose flattened offset is:
    tensorized, printed as its first element plus the steps in memory, and right on
    every backend, in a checked build, and on a strided view of W (strides known only
    at run time: the loops the intrinsic replaced run)."""
    s, args = _window_transposed()
    text = str(tc.lower(s, args))
    assert "// in a: W[" in text and "+ (72*x0 + x1 in memory)" in text, text
    assert "+ (16*x0 + x1 in memory)" in text, text
    w = np.random.default_rng(3).standard_normal((16, 8, 3, 3)).astype(np.float32)
    want = w.transpose(1, 2, 3, 0)
    out = np.zeros(want.shape, np.float32)
    run(s, args, [w, out], backend)
    np.testing.assert_array_equal(out, want)
    if backend == "llvm":
        f = tc.build(s, args)
        assert "shufflevector" in f.get_source("llvm")
        out[:] = 0
        tc.build(s, args, checks=True)(w, out)
        np.testing.assert_array_equal(out, want)
        wide = np.zeros((16, 8, 3, 4), np.float32)
        wide[..., :3] = w
        out[:] = 0
        f(wide[..., :3], out)
        np.testing.assert_array_equal(out, want)


def test_a_window_read_mirrored_is_not_affine_even_in_memory():
    s, args = _window_transposed(flip=True)
    with pytest.raises(tc.ScheduleError, match=r"operand a is W\[.*does not step by a constant"):
        tc.lower(s, args)


def _packed_copy(K, N, L):
    """B[k, j] copied into the dot products' panels, each 4 x L block interleaved."""
    B = tc.placeholder((K, N), "int8", name="B")
    P = tc.compute((K // 4, N // L, L, 4), lambda a, b, c, d: B[a * 4 + d, b * L + c],
                   name="P")
    s = tc.create_schedule(P.op)
    s[P].tensorize(s[P].op.axis[2], tc.tensor_intrin(I16 if L == 16 else I8))
    return s, [B, P]


@pytest.mark.parametrize("L", [16, 8])
@pytest.mark.parametrize("backend", HOST_BACKENDS)
def test_interleave_intrinsic_packs_groups_of_four_rows(backend, L):
    s, args = _packed_copy(12, 2 * L, L)
    b = np.random.default_rng(2).integers(-128, 128, (12, 2 * L)).astype(np.int8)
    want = b.reshape(3, 4, 2, L).transpose(0, 2, 3, 1)
    out = np.zeros(want.shape, np.int8)
    run(s, args, [b, out], backend)
    np.testing.assert_array_equal(out, want)
    if backend == "llvm":
        assert "shufflevector" in tc.build(s, args).get_source("llvm")
        # a strided view of B (its row stride known only at run time): the same result
        f = tc.build(s, args)
        wide = np.zeros((12, 3 * L), np.int8)
        wide[:, :2 * L] = b
        out[:] = 0
        f(wide[:, :2 * L], out)
        np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("L, M, cols", [(16, 14, False), (16, 7, False), (8, 3, False),
                                     (16, 14, True), (16, 7, True), (16, 2, True),
                                     (8, 5, True), (8, 4, True)])
def test_transpose_of_fewer_rows_than_lanes(L, M, cols):
    """``x86.transpose_f32_<M>x<L>`` (c[i, j] = a[j, i], ``a`` M x L): ``M`` rows of
    ``L`` into ``L`` rows of ``M``; with ``cols``, ``x86.transpose_f32_<L>x<M>`` (``a``
    L x M): ``L`` rows of ``M`` into ``M`` rows of ``L``.  The rows of ``a`` lie 3 apart,
    the values around them NaN (a lane shuffled from outside a row would carry one into
    the result); where the CPU has the intrinsic."""
    rows, width = (L, M) if cols else (M, L)
    name = f"x86.transpose_f32_{rows}x{width}"
    if not any(t.name == name for t in tc.tensor_intrins_for("llvm")):
        pytest.skip(f"this CPU has no {name}")
    A = tc.placeholder((3, rows, width + 3), name="A")
    C = tc.compute((3, width, rows), lambda b, i, j: A[b, j, i + 1], name="C")
    s = tc.create_schedule(C.op)
    s[C].tensorize(s[C].op.axis[1], tc.tensor_intrin(name))
    assert f"tensorize {name}" in str(tc.lower(s, [A, C]))
    a = np.full((3, rows, width + 3), np.nan, np.float32)
    a[:, :, 1:width + 1] = np.random.default_rng(3).standard_normal((3, rows, width))
    out = np.zeros((3, width, rows), np.float32)
    tc.build(s, [A, C])(a, out)
    np.testing.assert_array_equal(out, a[:, :, 1:width + 1].transpose(0, 2, 1))


def _auto_transposed(args, *extents):
    """``tc.auto_schedule(args)``, checked to tensorize with the host's transpose exactly
    when it has one and tiles of its width divide every one of ``extents``."""
    L = HOST.lanes
    s = tc.auto_schedule(args)
    used = any(st[0] == "tensorize" for st in s.trace.to_json())
    have = any(t.name == f"x86.transpose_f32_{L}x{L}" for t in tc.tensor_intrins_for("llvm"))
    assert used == (have and all(e % L == 0 for e in extents))
    return s


@pytest.mark.parametrize("K", [64, 36])
def test_auto_schedule_transposes_dense_weight_panels_in_registers(K):
    """C = X W^T (W read across its rows): its panels are copied with the transpose
    where tiles of the vector width divide the panel and K (64), not where they do not
    (36); the results are right either way, and with W a strided view."""
    X = tc.placeholder((40, K), name="X")
    W = tc.placeholder((48, K), name="W")
    k = tc.reduce_axis((0, K), name="k")
    C = tc.compute((40, 48), lambda i, j: tc.sum(X[i, k] * W[j, k], axis=k), name="C")
    s = _auto_transposed([X, W, C], K, 48)
    rng = np.random.default_rng(2)
    x = rng.standard_normal((40, K)).astype(np.float32)
    w = rng.standard_normal((48, K)).astype(np.float32)
    f = tc.build(s, [X, W, C])
    out = np.zeros((40, 48), np.float32)
    f(x, w, out)
    np.testing.assert_allclose(out, x @ w.T, rtol=1e-5, atol=1e-4)
    wide = np.zeros((48, K + 8), np.float32)
    wide[:, :K] = w
    out[:] = 0
    f(x, wide[:, :K], out)
    np.testing.assert_allclose(out, x @ w.T, rtol=1e-5, atol=1e-4)


def test_auto_schedule_transposes_16x16_tiles_for_avx512():
    """Built (not run: this CPU may lack AVX-512) for an AVX-512 target: 16 x 16 tiles in
    zmm registers; the same schedule checked in the interpreter."""
    t = "llvm -mcpu=skylake-avx512"
    X = tc.placeholder((40, 64), name="X")
    W = tc.placeholder((64, 64), name="W")
    k = tc.reduce_axis((0, 64), name="k")
    C = tc.compute((40, 64), lambda i, j: tc.sum(X[i, k] * W[j, k], axis=k), name="C")
    s = tc.auto_schedule([X, W, C], target=t)
    assert f"tc.tensor_intrin('{T16}')" in s.trace.python([X, W, C])
    asm = tc.build(s, [X, W, C], target=t).get_source("asm")
    assert any("zmm" in ln and ("shuf" in ln or "unpck" in ln or "perm" in ln)
               for ln in asm.splitlines())
    rng = np.random.default_rng(4)
    x = rng.standard_normal((40, 64)).astype(np.float32)
    w = rng.standard_normal((64, 64)).astype(np.float32)
    out = np.zeros((40, 64), np.float32)
    run(s, [X, W, C], [x, w, out], "interp")
    np.testing.assert_allclose(out, x @ w.T, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("M", [64, 36])
def test_auto_schedule_transposes_a_transposed_operand_in_registers(M):
    """C = A^T B (A read down its columns): by default A is read in place (a reduction
    step's broadcasts A[k, i:i+mr] are consecutive); with knob C.pack_A (the search's)
    it is copied with its rows of k innermost, in transposed tiles where tiles of the
    vector width divide it (64, and 48 rows), else element by element (36); right every
    way."""
    L = HOST.lanes
    A = tc.placeholder((48, M), name="A")
    B = tc.placeholder((48, 48), name="B")
    k = tc.reduce_axis((0, 48), name="k")
    C = tc.compute((M, 48), lambda i, j: tc.sum(A[k, i] * B[k, j], axis=k), name="C")
    args = [A, B, C]
    cfg = tc.autoschedule.default_config(args)
    assert cfg["C.pack_A"] is False
    packed = tc.autoschedule.apply_config(args, cfg.set("C.pack_A", True))
    used = any(st[0] == "tensorize" for st in packed.trace.to_json())
    have = any(t.name == f"x86.transpose_f32_{L}x{L}" for t in tc.tensor_intrins_for("llvm"))
    assert used == (have and M % L == 0 and 48 % L == 0)
    rng = np.random.default_rng(3)
    a = rng.standard_normal((48, M)).astype(np.float32)
    b = rng.standard_normal((48, 48)).astype(np.float32)
    for s in (tc.auto_schedule(args), packed):
        out = np.zeros((M, 48), np.float32)
        tc.build(s, args)(a, b, out)
        np.testing.assert_allclose(out, a.T @ b, rtol=1e-5, atol=1e-4)


# -- CUDA: dp4a, and a user's CUDA C emitter ---------------------------------------------------


def _needs_cxx():
    from tecomp.codegen.cuda_emu import find_cxx

    try:
        find_cxx()
    except Exception:  # noqa: BLE001
        pytest.skip("no C++ compiler for the CUDA emulation")


def _dp4a_gemm(M, N, K, a_dtype="uint8", offset=0, gpu=True):
    """C[i, j] = sum_k A[i, k + offset] * B[j, k] (B as [N, K], both int8 rows read 4
    bytes at a time), one element per CUDA thread, the reduction split by 4 and the
    4-element step run as dp4a."""
    A = tc.placeholder((M, K + offset), a_dtype, name="A")
    B = tc.placeholder((N, K), "int8", name="B")
    k = tc.reduce_axis((0, K), name="k")
    C = tc.compute((M, N), lambda i, j: tc.sum(
        A[i, k + offset].astype("int32") * B[j, k].astype("int32"), axis=k), name="C")
    s = tc.create_schedule(C.op)
    i, j = C.op.axis
    io, ii = s[C].split(i, factor=4)
    jo, ji = s[C].split(j, factor=8)
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=4)
    s[C].reorder(io, jo, ii, ji, ko, ki)
    if gpu:
        for ax, tag in ((io, "blockIdx.y"), (jo, "blockIdx.x"), (ii, "threadIdx.y"),
                        (ji, "threadIdx.x")):
            s[C].bind(ax, tc.thread_axis(tag))
    name = "cuda.dp4a_u8s8s32" if a_dtype == "uint8" else "cuda.dp4a_s8s8s32"
    s[C].tensorize(ki, tc.tensor_intrin(name))
    return s, [A, B, C]


def _dp4a_data(M, N, K, a_dtype, offset=0, seed=3):
    rng = np.random.default_rng(seed)
    lo, hi = (0, 256) if a_dtype == "uint8" else (-128, 128)
    a = rng.integers(lo, hi, (M, K + offset)).astype(a_dtype)
    b = rng.integers(-128, 128, (N, K)).astype(np.int8)
    a[0, :] = hi - 1 if a_dtype == "uint8" else -128   # the extreme products
    b[0, :] = -128
    want = a[:, offset:].astype(np.int64) @ b.astype(np.int64).T
    return a, b, want


@pytest.mark.parametrize("a_dtype,offset", [("uint8", 0), ("int8", 0), ("uint8", 1)],
                         ids=["u8s8", "s8s8", "u8s8-unaligned"])
def test_cuda_dp4a_gemm_in_the_emulation(a_dtype, offset):
    """The CUDA C emitter's code (tc_dp4a_us / tc_dp4a_ss on words read by tc_ld_b32, byte
    by byte where a row starts off a 4-byte boundary) run by the CUDA emulation."""
    _needs_cxx()
    s, args = _dp4a_gemm(8, 16, 20, a_dtype, offset)
    f = tc.build(s, args, target="cuda-emu")
    src = f.get_source("cuda")
    helper = "tc_dp4a_us" if a_dtype == "uint8" else "tc_dp4a_ss"
    assert f"= {helper}(tc_a, tc_b, C[" in src and "tc_ld_b32(" in src
    a, b, want = _dp4a_data(8, 16, 20, a_dtype, offset)
    c = np.zeros((8, 16), np.int32)
    f(a, b, c)
    np.testing.assert_array_equal(c, want)


@pytest.mark.parametrize("a_dtype,ptx", [("uint8", "dp4a.u32.s32"), ("int8", "dp4a.s32.s32")])
def test_cuda_dp4a_compiles_to_the_ptx_instruction(a_dtype, ptx):
    from tecomp.codegen.cuda import codegen_cuda
    from tecomp.runtime.nvcc import compile_ptx, find_nvcc

    if find_nvcc() is None:
        pytest.skip("nvcc is not on PATH")
    s, args = _dp4a_gemm(8, 16, 20, a_dtype)
    text = compile_ptx(str(codegen_cuda(tc.lower(s, args))), "sm_90")
    assert ptx in text


@pytest.mark.parametrize("backend", HOST_BACKENDS)
def test_a_cuda_intrinsic_on_the_cpu_runs_its_loops(backend):
    """An intrinsic with only a CUDA emitter, in a CPU schedule: the declared loops."""
    s, args = _dp4a_gemm(8, 16, 12, gpu=False)
    a, b, want = _dp4a_data(8, 16, 12, "uint8")
    c = np.zeros((8, 16), np.int32)
    run(s, args, [a, b, c], backend)
    np.testing.assert_array_equal(c, want)


def test_tensor_intrins_for_a_cuda_target():
    names = [t.name for t in tc.tensor_intrins_for("cuda")]
    mma = ["cuda.mma_acc_to_a_bf16", "cuda.mma_acc_to_a_f16", "cuda.mma_add_cols_f32",
           "cuda.mma_atomic_add_f32", "cuda.mma_bf16bf16f32",
           "cuda.mma_exp2_diff_or_zero_f32", "cuda.mma_exp2_diff_or_zero_ftz_f32",
           "cuda.mma_exp_diff_f32",
           "cuda.mma_exp_diff_or_zero_f32", "cuda.mma_exp_diff_or_zero_ftz_f32",
           "cuda.mma_f16f16f32", "cuda.mma_fill_f32", "cuda.mma_fill_neg_inf_f32",
           "cuda.mma_load_a_bf16", "cuda.mma_load_a_f16", "cuda.mma_load_a_tf32",
           "cuda.mma_load_b_bf16", "cuda.mma_load_b_f16", "cuda.mma_load_b_tf32",
           "cuda.mma_mask_causal_f32", "cuda.mma_mul_f32", "cuda.mma_row_max_f32", "cuda.mma_row_sum_f32",
           "cuda.mma_rows_copy_f32", "cuda.mma_rows_exp2_diff_or_zero_f32",
           "cuda.mma_rows_exp2_diff_or_zero_ftz_f32", "cuda.mma_rows_exp_diff_or_zero_f32",
           "cuda.mma_rows_exp_diff_or_zero_ftz_f32", "cuda.mma_rows_mul_f32", "cuda.mma_rows_rcp_or_zero_f32",
           "cuda.mma_scale_rows_f32", "cuda.mma_store_bf16", "cuda.mma_store_f16",
           "cuda.mma_store_f32", "cuda.mma_store_rows_f32", "cuda.mma_tf32tf32f32"]
    wmma = ["cuda.wmma_fill_f32", "cuda.wmma_load_a_bf16", "cuda.wmma_load_a_f16",
            "cuda.wmma_load_b_bf16", "cuda.wmma_load_b_f16", "cuda.wmma_mma_bf16bf16f32",
            "cuda.wmma_mma_f16f16f32", "cuda.wmma_store_f32"]
    wgmma = sorted([f"cuda.wgmma_{t}{t}f32_n{n}{k}" for t in ("f16", "bf16")
                    for n in (16, 32, 64, 128, 256) for k in ("", "_k32", "_k64")]
                   + [f"cuda.wgmma_fill_f32_n{n}{r}" for n in (16, 32, 64, 128, 256)
                      for r in ("", "_rows")]
                   # (swizzled TMA rings' rows: a whole k step of 16, 32 or 64)
                   + [f"cuda.wgmma_{t}{t}f32_n{n}_k{k}_rows" for t in ("f16", "bf16")
                      for n in (16, 32, 64, 128, 256) for k in (16, 32, 64)]
                   # (B N-major in chunks of N: TMA rings of matmul's B[K, N] as it lies)
                   + [f"cuda.wgmma_fill_f32_n{n}_rows_bmn{c}" for n in (16, 32, 64, 128, 256)
                      for c in (16, 32, 64) if c <= n]
                   + [f"cuda.wgmma_{t}{t}f32_n{n}_k{k}_rows_bmn{c}" for t in ("f16", "bf16")
                      for n in (16, 32, 64, 128, 256) for k in (16, 32, 64)
                      for c in (16, 32, 64) if c <= n])
    assert names == ["cuda.dp4a_s8s8s32", "cuda.dp4a_u8s8s32"] + mma + wgmma + wmma
    assert names == [t.name for t in tc.tensor_intrins_for("cuda-emu")]
    assert names == [t.name for t in tc.tensor_intrins_for("cuda -arch=sm_90a")]
    # wgmma: sm_90a only
    assert [n for n in names if "wgmma" not in n] == \
        [t.name for t in tc.tensor_intrins_for("cuda -arch=sm_80")] == \
        [t.name for t in tc.tensor_intrins_for("cuda -arch=sm_90")]
    # ldmatrix / mma.sync m16n8k16 and bfloat16 fragments need sm_80
    assert [t.name for t in tc.tensor_intrins_for("cuda -arch=sm_75")] == \
        ["cuda.dp4a_s8s8s32", "cuda.dp4a_u8s8s32"] + [n for n in wmma if "bf16" not in n]
    assert not any(n.startswith("cuda.") for n in
                   (t.name for t in tc.tensor_intrins_for("llvm")))


def test_a_user_declared_cuda_intrinsic():
    """A float32 4-element dot product written as CUDA C through the builder: views'
    elements (at), temporaries (tmp) and the block it gets of its own."""
    _needs_cxx()
    a = tc.placeholder((4,), name="a")
    b = tc.placeholder((4,), name="b")
    r = tc.reduce_axis((0, 4), name="r")
    c = tc.compute((1,), lambda i: tc.sum(a[r] * b[r], axis=r), name="c")
    seen = []

    def emit(cb, ins, outs):
        seen.append((ins[0].strides, ins[1].strides, outs[0].shape))
        terms = " + ".join(f"{ins[0].at(q)} * {ins[1].at(q)}" for q in range(4))
        t = cb.tmp("float", f"({terms})", "dot")
        cb.emit(f"{outs[0].at(0)} += {t};  // my.dot4")

    intrin = tc.decl_tensor_intrin(c, cuda=emit, name="my.dot4")
    X = tc.placeholder((6, 8), name="X")
    W = tc.placeholder((5, 8), name="W")
    k = tc.reduce_axis((0, 8), name="k")
    Y = tc.compute((6, 5), lambda i, j: tc.sum(X[i, k] * W[j, k], axis=k), name="Y")
    s = tc.create_schedule(Y.op)
    i, j = Y.op.axis
    ko, ki = s[Y].split(k, factor=4)
    s[Y].bind(i, tc.thread_axis("blockIdx.x"))
    s[Y].bind(j, tc.thread_axis("threadIdx.x"))
    s[Y].tensorize(ki, intrin)
    f = tc.build(s, [X, W, Y], target="cuda-emu")
    assert "// my.dot4" in f.get_source("cuda") and seen == [((1,), (1,), (1,))]
    rng = np.random.default_rng(4)
    x, w = rng.random((6, 8), np.float32), rng.random((5, 8), np.float32)
    y = np.zeros((6, 5), np.float32)
    f(x, w, y)
    np.testing.assert_allclose(y, x.astype(np.float64) @ w.T, rtol=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("a_dtype,offset", [("uint8", 0), ("int8", 0), ("uint8", 1)],
                         ids=["u8s8", "s8s8", "u8s8-unaligned"])
def test_gpu_dp4a_gemm(a_dtype, offset):
    """The dp4a GEMM on a real GPU (``pytest -m gpu``): the PTX instruction itself."""
    from tecomp.errors import RuntimeUnavailableError
    from tecomp.runtime import cuda as runtime_cuda

    try:
        runtime_cuda.default_driver()
    except RuntimeUnavailableError as exc:
        pytest.skip(str(exc))
    s, args = _dp4a_gemm(64, 96, 132, a_dtype, offset)
    f = tc.build(s, args, target="cuda")
    a, b, want = _dp4a_data(64, 96, 132, a_dtype, offset)
    c = np.zeros((64, 96), np.int32)
    f(a, b, c)
    np.testing.assert_array_equal(c, want)


def _named_dp4a(names):
    """The dp4a GEMM of _dp4a_gemm with every tensor and axis named by ``names``."""
    A = tc.placeholder((8, 20), "uint8", name=names[0])
    B = tc.placeholder((16, 20), "int8", name=names[1])
    k = tc.reduce_axis((0, 20), name=names[2])
    C = tc.compute((8, 16), lambda i, j: tc.sum(A[i, k].astype("int32") * B[j, k].astype("int32"),
                                                axis=k), name=names[3])
    s = tc.create_schedule(C.op)
    i, j = C.op.axis
    ko, ki = s[C].split(k, factor=4)
    s[C].bind(i, tc.thread_axis("blockIdx.x"))
    s[C].bind(j, tc.thread_axis("threadIdx.x"))
    s[C].tensorize(ki, tc.tensor_intrin("cuda.dp4a_u8s8s32"))
    return s, [A, B, C]


@pytest.mark.parametrize("index", range(len(HOSTILE)))
def test_hostile_names_in_a_tensorized_cuda_kernel(index):
    """Every name of a dp4a kernel a hostile string (tecomp.testing.hostile): the CUDA C
    has the same structure as with plain names (identifiers, comments and strings
    blanked), and where the emulation can build it, the same results."""
    from tecomp.codegen.cuda import codegen_cuda
    from tecomp.testing.hostile import skeleton

    name = HOSTILE[index]
    plain = _named_dp4a(["A", "B", "k", "C"])
    evil = _named_dp4a([name, name + "b", name + "k", name + "c"])
    texts = [codegen_cuda(tc.lower(s, args, target="cuda")).source for s, args in (plain, evil)]
    assert skeleton(texts[0], "cuda") == skeleton(texts[1], "cuda")
    assert "tc_dp4a_us(" in texts[1]
    if index < 3:
        _needs_cxx()
        f = tc.build(*evil, target="cuda-emu")
        a, b, want = _dp4a_data(8, 16, 20, "uint8")
        c = np.zeros((8, 16), np.int32)
        f(a, b, c)
        np.testing.assert_array_equal(c, want)


@pytest.mark.parametrize("cols_outer", [False, True])
@pytest.mark.parametrize("prefetch", [False, True])
def test_int8_rule_prefetches_are_exact(cols_outer, prefetch):
    """The blocks of C announce the writes of the next block's lines of C (knob
    tensorize.C.prefetch_c) and, column panel by column panel, bring the next block's
    rows of X into L2 during their reduction (tensorize.C.prefetch_x, only in that
    order): the prefetched rows and columns clamped into C and X, next to the short
    last block of rows (27 rows in blocks of 6) and the last panel; exact either way.
    (On one thread, so that the blocks' loop is not fused with the panels' into tasks.)"""
    low = _rule_exact(27, 256, 64, {"tensorize.C.cols_outer": cols_outer,
                                    "tensorize.C.prefetch_c": prefetch,
                                    "tensorize.C.prefetch_x": prefetch},
                      "llvm -mcpu=cascadelake -num-cores=1")
    assert ("prefetch (write) C[" in low) == prefetch, low
    assert ("prefetch (L2) A[" in low) == (prefetch and cols_outer), low


def test_int8_rule_order_follows_the_machine_models_l2_share():
    """The blocks of C go row block by row block while the packed W takes at most the
    machine model's dot_w_l2_share of L2: all of it on Zen 4 (1024 x 1024 int8, 1 MiB,
    rows outer), half where unmeasured and on Zen 5 (the same W column panel by column
    panel).  Lowered for named CPUs, not run."""
    from tecomp.strategy.tensorize import cols_outer_default
    from tecomp.target import cpu_model

    z4, z5 = cpu_model("llvm -mcpu=znver4"), cpu_model("llvm -mcpu=znver5")
    assert z4.dot_w_l2_share == 1.0 and z5.dot_w_l2_share == 0.5
    assert cpu_model("llvm -mcpu=cascadelake").dot_w_l2_share == 0.5
    assert not cols_outer_default(z4, 1024, 1024, 64) and cols_outer_default(z4, 2048, 1024, 64)
    assert cols_outer_default(z5, 1024, 1024, 64)
    A, B, C = _gemm(1024, 1024, 1024)
    for t, outer in (("llvm -mcpu=znver4 -num-cores=2", "parallel (i.outer, 0, 171)"),
                     ("llvm -mcpu=znver5 -num-cores=2", "parallel (j.outer, 0, 16)")):
        s = tc.auto_schedule([A, B, C], target=t)
        low = str(tc.lower(s, [A, B, C], target=t))
        assert outer in low and "x86.vnni_u8s8s32_16x4" in low, low
