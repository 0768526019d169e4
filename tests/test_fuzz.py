"""Differential fuzzing: random programs x random legal schedules x dtypes x shapes, built
with LLVM (a few in the CUDA emulation), run against the reference interpreter and numpy.

The default suite runs a bounded, derandomized number of examples (half of those of
TECOMP_LONG_TESTS=1); TECOMP_LONG_FUZZ=1 runs many more.  The long run proper is
``python -m tecomp.testing.fuzz --cases N``.  Every bug the fuzzer found is pinned below as
a minimal regression test.
"""
import os
import shutil

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tecomp as tc
from tecomp.ir import interp
from tecomp.testing import HypothesisDraw, RandomDraw, draw_case, run_case

from helpers import build_and_interp, fuzz_cli

LONG = os.environ.get("TECOMP_LONG_FUZZ", "") not in ("", "0")
LONG_TESTS = os.environ.get("TECOMP_LONG_TESTS", "") not in ("", "0")


def _half(n):
    """``n`` cases with TECOMP_LONG_TESTS=1, half of them (rounded up) by default: the
    suite's budget; the bugs the fuzzer found are pinned seeds below."""
    return n if LONG_TESTS else (n + 1) // 2

HAVE_CXX = shutil.which(os.environ.get("CXX", "g++")) is not None

_SETTINGS = dict(deadline=None, derandomize=True, database=None, print_blob=True,
                 suppress_health_check=list(HealthCheck))


@settings(max_examples=1000 if LONG else _half(30), **_SETTINGS)
@given(st.data())
def test_fuzz_llvm_vs_interp_vs_numpy(data):
    case = draw_case(HypothesisDraw(data), name="hypothesis llvm")
    out = run_case(case)
    assert out.ok, out.report()


@pytest.mark.skipif(not HAVE_CXX, reason="the CUDA emulation needs a C++ compiler")
@settings(max_examples=60 if LONG else _half(3), **_SETTINGS)
@given(st.data())
def test_fuzz_gpu_schedules_in_cuda_emulation(data):
    case = draw_case(HypothesisDraw(data), target="cuda-emu", name="hypothesis cuda-emu")
    out = run_case(case)
    assert out.ok, out.report()


@pytest.mark.skipif(not HAVE_CXX, reason="the CUDA emulation needs a C++ compiler")
def test_gpu_fuzzer_draws_global_copies_with_padded_rows():
    """Seed 37: the GPU schedule copies input T0 (int32[6, 4, 33]) to a global workspace
    whose rows are padded (storage_align 3, 1: 34 elements apart, 815 in all), a kernel
    of its own, as the tensor-core GEMM packs operands whose rows are not 16-byte
    aligned.  The workspace was allocated to its shape's product (792), and the copy
    wrote past its end (the emulation's heap was corrupted: the process aborted)."""
    case = draw_case(RandomDraw(37), target="cuda-emu", name="seed 37")
    assert ("cache_read", "T0", "global", ["T1"]) in case.steps
    assert any(st[0] == "storage_align" and st[1] == "c0" for st in case.steps)
    out = run_case(case)
    assert out.ok, out.report()


@settings(max_examples=400 if LONG else _half(25), **_SETTINGS)
@given(st.data())
def test_fuzz_auto_schedule(data):
    """The auto-scheduler's schedules (analytic, and its rules with random knobs) of random
    programs agree with the interpreter and numpy."""
    case = draw_case(HypothesisDraw(data), name="hypothesis auto_schedule", auto=True)
    out = run_case(case)
    assert out.ok, out.report()


@pytest.mark.parametrize("seed", range(200 if LONG else _half(8)))
def test_fuzz_seeds_with_pass_checking(seed):
    """The long-run fuzzer's cases (random.Random seeds), with the pass-by-pass checker on."""
    case = draw_case(RandomDraw(10_000 + seed), name=f"seed {10_000 + seed}")
    out = run_case(case, check_passes=True)
    assert out.ok, out.report()


@pytest.mark.parametrize("seed", range(40 if LONG else 6))
def test_fuzz_seeds_with_torch_tensors_and_exported_libraries(seed):
    """The same kernels called with torch tensors over the arrays' memory, and exported
    with export_library and loaded with tc.load_module: the same outputs."""
    pytest.importorskip("torch")
    case = draw_case(RandomDraw(20_000 + seed), name=f"seed {20_000 + seed}")
    out = run_case(case, interp=False, also=("torch", "aot"))
    assert out.ok, out.report()


@settings(max_examples=150 if LONG else _half(10), **_SETTINGS)
@given(st.data())
def test_fuzz_tensorized_int8_gemms(data):
    """Int8 GEMMs over the whole 8-bit ranges, auto-scheduled (tensorized with the target's
    dot-product intrinsic where the shape allows, random knobs), exported and loaded too:
    exact against numpy and the interpreter (which runs the declared computation)."""
    from tecomp.testing.diff import draw_int8_gemm_case

    case = draw_int8_gemm_case(HypothesisDraw(data), name="hypothesis int8 gemm")
    out = run_case(case, also=("aot",))
    assert out.ok, out.report()


def test_fuzzer_int8_gemm_cases_are_tensorized_often():
    from tecomp.testing.diff import auto_schedule_case, draw_int8_gemm_case

    if not tc.Target("llvm").has_feature("avx2"):
        pytest.skip("no dot-product intrinsic for this CPU")
    hits = 0
    for seed in range(40):
        case = draw_int8_gemm_case(RandomDraw(seed))
        built, nvar = case.program.build()
        s = auto_schedule_case(case, case.program.args(built, nvar))
        hits += any(step[0] == "tensorize" for step in s.trace.to_json())
    assert 8 <= hits <= 32


@pytest.mark.parametrize("seed", range(60 if LONG else _half(8)))
def test_fuzz_gpu_int8_gemms_with_dp4a(seed):
    """Int8 GEMMs in the CUDA emulation, the reduction run as cuda.dp4a_u8s8s32 where the
    layout allows (sometimes into a local accumulator): exact against numpy and the
    interpreter; the reproducer names the intrinsic."""
    import shutil

    from tecomp.testing.diff import draw_gpu_int8_gemm_case

    if not shutil.which("g++"):
        pytest.skip("no C++ compiler for the CUDA emulation")
    case = draw_gpu_int8_gemm_case(RandomDraw(30_000 + seed), name=f"seed {30_000 + seed}")
    out = run_case(case)
    assert out.ok, out.report()
    if any(st[0] == "tensorize" for st in case.steps):
        assert 'tc.tensor_intrin("cuda.dp4a_u8s8s32")' in case.source()


def test_fuzzer_gpu_int8_gemm_cases_are_tensorized_often():
    from tecomp.testing.diff import draw_gpu_int8_gemm_case

    hits = sum(any(st[0] == "tensorize" for st in draw_gpu_int8_gemm_case(
        RandomDraw(seed)).steps) for seed in range(60))
    assert 6 <= hits <= 40


@pytest.mark.parametrize("seed", range(60) if LONG else
                         [0, 1, pytest.param(2, marks=pytest.mark.slow)])
def test_fuzz_tensor_core_gemms_with_epilogues(seed):
    """float16 / bfloat16 GEMMs summed in float32, extents multiples of 16 or odd
    (boundary tiles), maybe batched, with either operand layout and maybe an epilogue
    (bias, max/min/tanh, a 16-bit result), under the GPU rules with their default tiling
    or random knobs (warps, fragments, k step, rings, wmma or mma), in the CUDA
    emulation: against numpy and the interpreter; the reproducer replays the same
    knobs.  (The two default seeds draw multiples of 16, as before: the odd extents
    are drawn last; tests/test_tensorcore_edges.py runs odd shapes by default.  Seed 0
    is a batched bfloat16 GEMM with a 16-bit result and random knobs, seed 1 a float16
    one with the other operand layout, a bias and the default tiling; seed 2, a larger
    batched bfloat16 case that the interpreter's race tracing takes 20 s over, is slow:
    TECOMP_LONG_TESTS=1; TECOMP_LONG_FUZZ=1 runs 60 seeds.)"""
    import shutil

    from tecomp.testing.diff import draw_tensor_core_case

    if not shutil.which("g++"):
        pytest.skip("no C++ compiler for the CUDA emulation")
    case = draw_tensor_core_case(RandomDraw(40_000 + seed), name=f"seed {40_000 + seed}")
    out = run_case(case)
    assert out.ok, out.report()
    assert "knobs=Knobs(rng=" in case.source()


def test_fuzzer_tensor_core_cases_reach_the_tensor_cores():
    """The family's cases run on tensor cores (any tiling the knobs draw divides the
    extents, or pads odd ones at the edge), most with an epilogue, in both families of
    intrinsics; some of odd extents."""
    from tecomp.testing.diff import auto_schedule_case, draw_tensor_core_case

    kinds, odd = [], 0
    for seed in range(24):
        case = draw_tensor_core_case(RandomDraw(seed))
        built, nvar = case.program.build()
        args = case.program.args(built, nvar)
        text = str(tc.lower(auto_schedule_case(case, args), args))
        wmma = "tensorize cuda.wmma_mma_" in text
        assert wmma or "tensorize cuda.mma_f" in text or "tensorize cuda.mma_bf" in text, seed
        # an epilogue: the output is an elementwise stage, not the GEMM
        out = case.program.tensors[case.program.outputs[0]]
        kinds.append(("wmma" if wmma else "mma", out.reduce is None))
        c = case.program.tensors[[t.name for t in case.program.tensors].index("C")]
        odd += any(x % 16 for x in c.shape) or c.reduce.extents[0] % 16 != 0
    assert {k for k, _ in kinds} == {"wmma", "mma"}
    assert 4 <= odd <= 20
    assert 10 <= sum(e for _, e in kinds) <= 23


# ---------------------------------------------------------------------------------
# the fuzzer itself


def test_reproducer_source_runs():
    """A case's reproducer is valid, standalone Python that rebuilds and reruns it."""
    for seed in (1, 2, 3):
        case = draw_case(RandomDraw(seed))
        src = case.source()
        ns = {}
        exec(compile(src, f"<reproducer {seed}>", "exec"), ns)  # noqa: S102
        assert "s" in ns and "args" in ns


def test_fuzzer_detects_a_wrong_pass(monkeypatch):
    """A deliberately broken pass (it drops the last iteration of every serial loop with
    a constant extent > 1) is caught as a mismatch."""
    from tecomp.ir.expr import Const
    from tecomp.ir.functor import Mutator
    from tecomp.ir.stmt import For
    from tecomp.lower import pipeline

    class _Drop(Mutator):
        def visit_For(self, s):
            body = self.visit(s.body)
            ext = s.extent
            if isinstance(ext, Const) and ext.value > 1 and s.kind == "serial":
                ext = Const(ext.value - 1, ext.dtype)
            return For(s.var, s.min, ext, s.kind, body, s.thread_tag)

    def broken(func):
        return func.with_body(_Drop().visit(func.body))

    monkeypatch.setattr(pipeline, "PASSES", list(pipeline.PASSES) + [("broken", broken, None)])
    found = 0
    for seed in range(6):
        out = run_case(draw_case(RandomDraw(seed)))
        found += out.kind == "mismatch"
    assert found >= 3


def test_reference_does_not_vouch_for_a_product_that_overflows_float32():
    """Seed 151928: a product of 48 float32 factors passes float32's range before a zero
    factor (tecomp's order: inf * 0 = nan; numpy's float64: 0). The reference marks that
    output unknown, the case passes (the kernel is still compared with the interpreter),
    and a product that stays in range is still vouched for."""
    import numpy as np
    from tecomp.testing.fuzz import case_for_seed

    case = case_for_seed(151928, 0)
    prog = case.program
    inputs = prog.random_inputs(case.n, np.random.default_rng(case.seed))
    _, unknown = prog.numpy_reference(inputs, case.n)
    assert any(u is not None and u.all() for i, u in unknown.items() if i in prog.outputs)
    assert run_case(case).kind == "ok"
    from tecomp.testing.program import Ax, Load, Program, ReduceSpec, TSpec
    small = Program([TSpec("A", (4, 3), "float32"),
                     TSpec("B", (4,), "float32", Load(0, (Ax(0), Ax(1))),
                           ReduceSpec("prod", (3,)))], [1])
    vals, unk = small.numpy_reference({0: np.full((4, 3), 2.0, np.float32)}, 5)
    assert unk[1] is None and np.all(vals[1] == 8.0)


@pytest.mark.skipif(not HAVE_CXX, reason="the CUDA emulation needs a C++ compiler")
def test_a_missing_barrier_is_caught(monkeypatch):
    """Without the insert_barriers pass, a shared-memory tile read by other threads than
    the ones that wrote it is wrong in the emulation's deterministic modes, and the
    interpreter reports the race: the checks the GPU fuzz cases run would see it."""
    from tecomp.ir.interp import RaceError
    from tecomp.lower import pipeline

    from helpers import gpu_shared_tile

    s, args = gpu_shared_tile()
    a = np.arange(64, dtype="float32")
    monkeypatch.setattr(pipeline, "PASSES", [p for p in pipeline.PASSES if p[0] != "insert_barriers"])
    func = tc.lower(s, args, target="cuda-emu")
    f = tc.build(func, target="cuda-emu")
    wrong = 0
    for mode in ("serial", "reverse"):
        b = np.zeros(64, "float32")
        f(a, b, mode=mode)
        wrong += not np.array_equal(b, a[::-1] * 2)
    assert wrong >= 1
    with pytest.raises(RaceError, match=r"data race on A\.shared"):
        interp.run(func, a, np.zeros(64, "float32"))


def _run_fuzz(tmp_path, cases, gpu_every, seed, extra=(), env_extra=None):
    """``python -m tecomp.testing.fuzz`` in a subprocess, with this checkout importable
    (no edge, tensor-core, threads, nnargs or producers cases unless ``extra`` asks: the seeds
    pinned here are the generator's)."""
    return fuzz_cli(tmp_path, "--cases", str(cases), "--gpu-every", str(gpu_every),
                    "--seed", str(seed), "--edge-every", "0", "--tensor-core-every", "0",
                    "--threads-every", "0", "--args-every", "0", "--producers-every", "0",
                    *extra, env_extra=env_extra)


def test_fuzz_entry_point_records_a_hang_and_goes_on(tmp_path):
    """A case that never ends (seed 8 sleeps, by the test hook) has its worker killed
    after --case-timeout: recorded as a hang with its seed, the run fails, and the cases
    after it run in a new worker."""
    # (30 s for the ordinary cases: one takes up to about 4 s on a busy 2-core machine, but
    # seed 9 took 30 s at a load of 13 (session 24) and was recorded as a second hang with
    # 10 s; the hung case alone gets 2 s ("8:2"), or the worker it holds idles for 30 s)
    # (seeds 8 and 9: the hung case first, the case after it in a new worker)
    p = _run_fuzz(tmp_path, cases=2, gpu_every=0, seed=8, extra=("--case-timeout", "30"),
                  env_extra={"TECOMP_FUZZ_TEST_HANG": "8:2"})
    out = p.stdout
    assert "cases run: 2" in out, out + p.stderr
    assert "hangs (over --case-timeout): 1" in out and "crashes: 0" in out, out
    assert "[1x] hang: the case ran over 2s (compile or run); its worker was killed  " \
        "(seeds 8)" in out, out
    assert p.returncode == 1


def test_fuzz_entry_point_prints_figures(tmp_path):
    p = _run_fuzz(tmp_path, cases=3, gpu_every=0, seed=7)
    assert "cases run: 3" in p.stdout, p.stdout + p.stderr
    assert "mismatches: 0" in p.stdout and "crashes: 0" in p.stdout, p.stdout
    assert "rejected schedules (a documented resource limit of the target, not failures): 0" \
        in p.stdout, p.stdout
    assert p.returncode == 0


@pytest.mark.parametrize("error,kind", [
    (tc.ResourceLimitError("stage C: the shared buffers A.shared take 65536 bytes per block"),
     "rejected"),
    (tc.BuildError("stage C: buffer X is used but is neither a parameter nor allocated"), "crash"),
    (RuntimeError("boom"), "crash"),
])
def test_fuzzer_rejects_only_resource_limits(monkeypatch, error, kind):
    """A schedule the target refuses for a documented resource limit (ResourceLimitError)
    is a rejected schedule, not a failure; any other exception is still a crash."""
    import tecomp

    def refuse(*a, **k):
        raise error

    case = draw_case(RandomDraw(3))
    monkeypatch.setattr(tecomp, "build", refuse)
    out = run_case(case)
    assert out.kind == kind, out.report()
    assert out.stage == "build"
    assert out.ok is (kind == "rejected") and out.rejected is (kind == "rejected")
    assert type(error).__name__ in out.reason and str(error) in out.reason


@pytest.mark.skipif(not HAVE_CXX, reason="the CUDA emulation needs a C++ compiler")
def test_fuzz_entry_point_reports_rejected_schedules_apart(tmp_path):
    """Seed 111474 (a GPU case) draws a shared tile of 462080 bytes, over the 227 KiB
    limit: the build's correct ResourceLimitError used to be counted as a crash (exit
    status 1); it is now a rejected schedule, reported on its own line, and the run
    passes.  (The seed was 50049 until the GPU generator learnt cross-thread reductions,
    then 71074, whose 192512-byte tile became legal with dynamic shared memory: it is
    run below.)"""
    p = _run_fuzz(tmp_path, cases=1, gpu_every=25, seed=111474)
    out = p.stdout
    assert "cases run: 1 (cuda-emu: 1)" in out, out + p.stderr
    assert "rejected schedules (a documented resource limit of the target, not failures): 1" \
        in out, out
    assert "[1x] build: tecomp.errors.ResourceLimitError: stage C1: the shared buffers " \
        "P0.shared take 462080 bytes per block" in out, out
    assert "mismatches: 0" in out and "crashes: 0" in out, out
    assert p.returncode == 0
    # seed 71074: 192512 bytes of shared memory, dynamic now, and right in the emulation
    p = _run_fuzz(tmp_path / "b", cases=1, gpu_every=25, seed=71074)
    out = p.stdout
    assert "rejected schedules (a documented resource limit of the target, not failures): 0" \
        in out and "mismatches: 0" in out and "crashes: 0" in out, out + p.stderr
    assert p.returncode == 0


# ---------------------------------------------------------------------------------
# regression tests: one per bug the fuzzer found (minimized by hand)


def test_regression_region_read_entirely_outside_the_tensor():
    """Fuzz seed 1358: a stage computed at a loop where every read of it is guarded off
    (the region lies outside its shape) got an allocation with a *negative* extent
    (`allocate B: float32[-5]`); the interpreter rejected it.  Fixed in
    lower/schedule_ops.py (_make_buffer clamps an empty region to 0)."""
    A = tc.placeholder((4,), name="A")
    B = tc.compute((4,), lambda i: A[i] + 1, name="B")
    C = tc.compute((3,), lambda i: tc.if_then_else(i + 5 < 4, B[i + 5], 0.0), name="C")
    s = tc.create_schedule(C.op)
    s[B].compute_at(s[C], C.op.axis[0])
    func = tc.lower(s, [A, C])
    for buf in _allocations(func):
        assert all(getattr(e, "value", 0) >= 0 for e in buf.shape), str(func)
    r1, r2 = build_and_interp(s, [A, C], lambda: [np.ones(4, "float32"), np.full(3, np.nan, "float32")])
    np.testing.assert_array_equal(r1[1], np.zeros(3, "float32"))
    np.testing.assert_array_equal(r2[1], np.zeros(3, "float32"))


def test_regression_split_of_compute_at_axis_is_a_schedule_error():
    """Splitting the axis a producer is computed at (after compute_at) raised a raw
    ValueError (`IterVar(i...) is not in list`) from lowering; now a ScheduleError that
    names both stages, the axis and the current loops."""
    A = tc.placeholder((16,), name="A")
    B = tc.compute((16,), lambda i: A[i] * 2, name="B")
    C = tc.compute((16,), lambda i: B[i] + 1, name="C")
    s = tc.create_schedule(C.op)
    s[B].compute_at(s[C], C.op.axis[0])
    s[C].split(C.op.axis[0], factor=4)
    with pytest.raises(tc.ScheduleError, match=r"compute_at of B at C\.i: axis i is no longer a "
                                               r"loop of stage C .*i\.outer, i\.inner"):
        tc.lower(s, [A, C])


def test_regression_fused_empty_regions_do_not_run():
    """Fuzz seed 100040: a stage computed at a loop, read only under a guard, got a region
    that lies wholly outside its shape near the border; both of its extents were then
    negative (min(n - i - 2, 1)), and fusing its axes multiplied them into a *positive*
    trip count: the loop ran and read and wrote out of bounds (silently in the LLVM build;
    BoundsError in the interpreter).  Fixed in lower/schedule_ops.py (_needed_region
    clamps a region's extent at 0)."""
    n = tc.var("n")
    A = tc.placeholder((n,), name="A")
    B = tc.compute((n, n), lambda i, j: A[i] * 2 + A[j], name="B")
    C = tc.compute((n,), lambda i: tc.if_then_else(i + 2 < n, B[i + 2, i + 2], 0.0), name="C")
    s = tc.create_schedule(C.op)
    s[B].compute_at(s[C], C.op.axis[0])
    s[B].fuse(*s[B].leaf_iter_vars)
    a = np.arange(5, dtype="float32")
    want = np.where(np.arange(5) + 2 < 5, 3 * np.roll(a, -2), 0).astype("float32")
    c = np.zeros(5, "float32")
    interp.run(tc.lower(s, [A, C]), a, c)
    np.testing.assert_array_equal(c, want)
    c = np.zeros(5, "float32")
    tc.build(s, [A, C], checks=True)(a, c)
    np.testing.assert_array_equal(c, want)


@pytest.mark.skipif(not HAVE_CXX, reason="the CUDA emulation needs a C++ compiler")
def test_regression_empty_shared_tile_builds_for_the_gpu():
    """Fuzz seed 301119 (GPU case), minimized: a shared tile whose region is empty in every
    block (all reads of it are guarded off) has an extent of 0, and the CUDA C generator
    refused it (BuildError 'buffer A.shared has 0 elements'), where the interpreter and
    LLVM accept it.  Fixed in codegen/c_source.py (declared_size: an empty buffer is
    declared with one element, which its loops never touch)."""
    A = tc.placeholder((1, 2), name="A")
    B = tc.compute((4, 5), lambda i, j: tc.if_then_else(i * 2 + 1 < 1, A[i * 2 + 1, 0], 0.0) + 1.0,
                   name="B")
    s = tc.create_schedule(B.op)
    AA = s.cache_read(A, "shared", [B])
    bo, bi = s[B].split(s[B].fuse(*B.op.axis), factor=4)
    s[B].bind(bo, tc.thread_axis("blockIdx.x"))
    s[B].bind(bi, tc.thread_axis("threadIdx.x"))
    s[AA].compute_at(s[B], bo)
    ao, ai = s[AA].split(s[AA].fuse(*s[AA].op.axis), factor=4)
    s[AA].bind(ai, tc.thread_axis("threadIdx.x"))
    f = tc.build(s, [A, B], target="cuda-emu")
    assert "__shared__ __align__(32) float A_shared[1];" in f.get_source(), f.get_source()
    for mode in ("serial", "reverse"):
        b = np.zeros((4, 5), "float32")
        f(np.ones((1, 2), "float32"), b, mode=mode)
        np.testing.assert_array_equal(b, np.ones((4, 5), "float32"))
    b = np.zeros((4, 5), "float32")
    interp.run(tc.lower(s, [A, B], target="cuda-emu"), np.ones((1, 2), "float32"), b)
    np.testing.assert_array_equal(b, np.ones((4, 5), "float32"))


def _allocations(func):
    from tecomp.ir.functor import collect
    from tecomp.ir.stmt import Allocate

    return [a.buffer for a in collect(func.body, lambda n: isinstance(n, Allocate))]


def test_campaign_seeds_3010333_and_3011210_loop_partition_stays_bounded():
    """Six splits of a symbolic extent, each with a run-time tail: partitioning every
    copy again grew 2.5 KB of IR into 2.4 MB, and the case ran for minutes (the campaign
    recorded two such hangs).  The nodes partitioning adds are now budgeted
    (loop_partition.GROWTH x the function's, at least MIN_BUDGET); the main parts come
    first, what is left over keeps its guards, and the result is still right."""
    import importlib

    lp = importlib.import_module("tecomp.lower.loop_partition")
    n = tc.var("n")
    P0 = tc.placeholder((n, n), dtype="float64", name="P0")
    P1 = tc.placeholder((n, n), dtype="float64", name="P1")
    C = tc.compute((n, n), lambda i, j: P0[i, j] * P1[i, i], name="C")
    s = tc.create_schedule(C.op)
    st_ = s[C]
    st_.tile(st_.leaf_iter_vars[0], st_.leaf_iter_vars[1], 8, 5)
    st_.fuse(*st_.leaf_iter_vars[2:4])
    st_.tile(st_.leaf_iter_vars[0], st_.leaf_iter_vars[1], 5, 16)
    st_.tile(st_.leaf_iter_vars[0], st_.leaf_iter_vars[3], 8, 5)
    st_.split(st_.leaf_iter_vars[0], factor=8)
    st_.split(st_.leaf_iter_vars[1], nparts=4)
    func = tc.lower(s, [P0, P1, C])
    assert lp._size(func.body) < lp.MIN_BUDGET * 3, lp._size(func.body)
    f = tc.build(s, [P0, P1, C])
    for N in (1, 2, 37, 83):
        a0, a1 = np.random.rand(N, N), np.random.rand(N, N)
        out = np.zeros((N, N))
        f(a0, a1, out)
        np.testing.assert_allclose(out, a0 * np.diag(a1)[:, None], rtol=1e-12)
    out = np.zeros((5, 5))
    a0, a1 = np.random.rand(5, 5), np.random.rand(5, 5)
    interp.run(func, a0, a1, out)
    np.testing.assert_allclose(out, a0 * np.diag(a1)[:, None], rtol=1e-12)


def test_campaign_seed_3016817_pack_of_an_operand_the_reduction_does_not_index():
    """The auto-scheduler's rules with random knobs packed (transposed copy) an operand
    read along the block's row axis but not along the last reduction axis: nothing to
    transpose, and an IndexError.  Such an operand is not packed now."""
    import random

    from tecomp.strategy import Knobs, apply_rules
    from tecomp.strategy.cpu import cpu_model

    T0 = tc.placeholder((2,), name="P0")
    k0 = tc.reduce_axis((0, 8), name="k0")
    k1 = tc.reduce_axis((0, 2), name="k1")
    T1 = tc.compute((13,), lambda i0: tc.prod(T0[k1 % 2], axis=[k0, k1], where=(
        tc.if_then_else(k0 * 3 < 2, T0[k0 * 3], tc.const(0, "float32")) > tc.const(0, "float32"))),
        name="C1")
    k2 = tc.reduce_axis((0, 1), name="k0")
    T2 = tc.compute((16, 16), lambda i0, i1: tc.max(
        tc.if_then_else(i0 < 13, T1[i0], tc.const(0, "float32"))
        - tc.if_then_else(i1 // 3 < 2, T0[i1 // 3], tc.const(0, "float32")), axis=[k2]),
        name="C2")
    T3 = tc.placeholder((8, 3, 29), name="P3")
    T4 = tc.compute((13, 8), lambda i0, i1: T2[(i0 * 2 + i1) % 16, 12 - i0] * tc.if_then_else(
        T0[(i1 * 2) % 2] > tc.const(0, "float32"),
        tc.if_then_else(i1 // 3 < 2, T0[i1 // 3], tc.const(0, "float32")),
        T3[i1, i1 // 3, i1 * 2 + i0]), name="C4")
    args = [T0, T3, T4]
    s = apply_rules(args, Knobs(rng=random.Random(41966)), cpu_model(), {})
    f = tc.build(s, args)
    rng = np.random.default_rng(0)
    a0 = rng.uniform(-1, 1, 2).astype("float32")
    a3 = rng.uniform(-1, 1, (8, 3, 29)).astype("float32")
    got, want = np.zeros((13, 8), "float32"), np.zeros((13, 8), "float32")
    f(a0, a3, got)
    interp.run(tc.lower(s, args), a0, a3, want)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_campaign_seed_3024733_llvm_optimiser_time_limit(monkeypatch):
    """LLVM's O3 with both its loop vectorizer and its unroller did not finish, in
    minutes, on this small kernel of float64 reductions under selects (each alone: 0.1-0.4
    s).  The optimiser worker now has a time limit (TECOMP_LLVM_OPT_TIMEOUT); past it the
    kernel is optimised without them, with a warning, and runs right."""
    import warnings

    from helpers import llvm_o3_hang_program

    monkeypatch.setenv("TECOMP_LLVM_OPT_TIMEOUT", "3")
    s, args = llvm_o3_hang_program()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        f = tc.build(s, args)
    for w in caught:   # (a future LLVM may finish in time: then there is none)
        assert "did not finish within 3 s on this kernel" in str(w.message)
    rng = np.random.default_rng(0)
    a0 = rng.uniform(-1, 1, 2)
    a3 = rng.integers(-8, 9, (5, 4)).astype("int32")
    got, want = np.zeros((3, 1, 5)), np.zeros((3, 1, 5))
    f(a0, a3, got)
    interp.run(tc.lower(s, args), a0, a3, want)
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_campaign_seed_3046424_non_constant_local_array_is_a_rejected_schedule(tmp_path):
    """A GPU case caches an input in a local array over a region that depends on the
    symbolic extent: CUDA C cannot declare it, and the BuildError saying so was counted as
    a crash.  It is a ResourceLimitError now (the target's limit, like 48 KiB of shared
    memory): a rejected schedule, not a failure."""
    p = _run_fuzz(tmp_path, cases=1, gpu_every=25, seed=3046424)
    out = p.stdout
    assert "rejected schedules (a documented resource limit of the target, not failures): 1" \
        in out, out + p.stderr
    assert "ResourceLimitError: buffer P0.local in scope 'local' has the non-constant shape" \
        in out, out
    assert "crashes: 0" in out and p.returncode == 0, out


def test_fuzz_entry_point_cross_target(tmp_path):
    """--cpu-target builds the CPU cases for another CPU (here AVX2 code, which runs on
    this machine): the same programs and schedules, checked against the interpreter."""
    p = _run_fuzz(tmp_path, cases=4, gpu_every=0, seed=7,
                  extra=("--cpu-target", "llvm -mcpu=haswell"))
    out = p.stdout
    assert "cases run: 4 (llvm -mcpu=haswell: 4)" in out, out + p.stderr
    assert "mismatches: 0" in out and "crashes: 0" in out and p.returncode == 0, out


# --gpu-target cuda: the GPU cases on the real GPU, compared with the interpreter and with
# the emulation


def _gpu_seeds(gpu_every, count):
    """The first ``count`` seeds the fuzzer draws as GPU cases with ``--gpu-every``."""
    return [s for s in range(gpu_every * count) if s % gpu_every == gpu_every - 1]


@pytest.mark.skipif(not HAVE_CXX, reason="the CUDA emulation needs a C++ compiler")
def test_fuzzer_gpu_cases_are_the_same_whatever_the_gpu_target():
    """--gpu-target picks only what a GPU case is built for: the program, the schedule,
    the size and the data seed are those of the emulation's case (int8 GEMMs run as dp4a
    among them); CPU cases are not changed."""
    from tecomp.testing.fuzz import case_for_seed

    seen_dp4a = False
    for seed in _gpu_seeds(3, 8):
        emu = case_for_seed(seed, 3, 5, "llvm", 10)
        gpu = case_for_seed(seed, 3, 5, "llvm", 10, gpu_target="cuda")
        assert (emu.target, gpu.target) == ("cuda-emu", "cuda")
        assert gpu.program.source() == emu.program.source()
        assert (gpu.steps, gpu.n, gpu.seed, gpu.auto) == (emu.steps, emu.n, emu.seed, emu.auto)
        seen_dp4a |= "int8 GEMM" in gpu.name
        assert 'target="cuda")' in gpu.source()
    assert seen_dp4a
    for seed in (0, 1, 3):
        emu, gpu = case_for_seed(seed, 3, 5), case_for_seed(seed, 3, 5, gpu_target="cuda")
        assert emu.target == gpu.target == "llvm" and emu.source() == gpu.source()


def _wrong_gpu_driver():
    """A stand-in GPU driver (the emulation, as in test_cuda_gpu.py) whose copies back to
    the host are off by one: a GPU that disagrees with the emulation."""
    from test_cuda_gpu import EmuDriver

    class WrongGpu(EmuDriver):
        def dtoh(self, host, ptr):
            super().dtoh(host, ptr)
            if host.dtype == bool:
                np.logical_not(host, out=host)
            else:
                host += np.ones((), host.dtype)

    return WrongGpu()


@pytest.mark.skipif(not HAVE_CXX, reason="the CUDA emulation needs a C++ compiler")
def test_gpu_target_cuda_compares_the_gpu_with_the_emulation(monkeypatch):
    """A cuda case runs on the GPU (here the emulation standing in for the driver) and in
    the emulation; outputs that differ are a mismatch led by 'cuda vs cuda-emu', and the
    report's reproducer builds for target="cuda"."""
    from test_cuda_gpu import EmuDriver

    from tecomp.runtime import cuda as runtime_cuda
    from tecomp.testing.diff import compare as _compare
    from tecomp.testing import diff
    from tecomp.testing.fuzz import case_for_seed

    seed = _gpu_seeds(3, 1)[0]
    case = case_for_seed(seed, 3, 5, "llvm", 10, gpu_target="cuda")
    whats = []

    def compare(got, ref, dtype, what, widen=1.0):
        whats.append(what.split(",")[0])
        return _compare(got, ref, dtype, what, widen)

    monkeypatch.setattr(diff, "compare", compare)
    monkeypatch.setattr(runtime_cuda, "_DRIVER", EmuDriver())
    out = run_case(case)
    assert out.kind == "ok", out.report()
    assert {"cuda vs numpy", "cuda-emu vs numpy", "cuda-emu reverse vs numpy", "cuda vs interp",
            "cuda-emu vs interp", "cuda vs cuda-emu"} <= set(whats), whats

    monkeypatch.setattr(runtime_cuda, "_DRIVER", _wrong_gpu_driver())
    out = run_case(case)
    assert out.kind == "mismatch" and out.stage == "compare", out.report()
    assert out.detail.startswith("cuda vs cuda-emu, output "), out.detail
    assert "cuda vs interp" in out.detail and "cuda-emu vs interp" not in out.detail
    report = out.report()
    assert f"seed={case.seed}, target=cuda)" in report.splitlines()[0]
    src = report.split("-- reproducer --\n", 1)[1]
    assert 'f = tc.build(s, args, target="cuda")' in src
    assert 'emu = tc.build(s, args, target="cuda-emu")' in src
    compile(src, "<reproducer>", "exec")


@pytest.mark.parametrize("extra", [("--cases", "3"), ("--replay", "2")], ids=["run", "replay"])
def test_gpu_target_cuda_without_a_gpu_exits_2_at_once(tmp_path, extra):
    """Where pycuda or a GPU is missing, --gpu-target cuda stops at the start with exit
    status 2 and one line saying why (no traceback, no case run)."""
    from tecomp.testing.fuzz import cuda_unavailable

    if HAVE_CXX and cuda_unavailable() is None:
        pytest.skip("a GPU is here: the fuzzer runs")
    p = _run_fuzz(tmp_path, cases=3, gpu_every=1, seed=0, extra=("--gpu-target", "cuda", *extra))
    assert p.returncode == 2, p.stdout + p.stderr
    assert p.stdout == "", p.stdout
    lines = p.stderr.splitlines()
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith("python -m tecomp.testing.fuzz: --gpu-target cuda needs a CUDA "
                               "GPU with pycuda and nvcc: "), lines[0]


@pytest.fixture
def cuda_gpu():
    from tecomp.errors import RuntimeUnavailableError
    from tecomp.runtime import cuda as runtime_cuda

    if not HAVE_CXX:
        pytest.skip("the CUDA emulation needs a C++ compiler")
    try:
        return runtime_cuda.default_driver()
    except RuntimeUnavailableError as exc:
        pytest.skip(str(exc))


@pytest.mark.gpu
def test_fuzz_entry_point_gpu_target_cuda(tmp_path, cuda_gpu):
    """12 GPU cases (3 of them int8 GEMMs as dp4a) on the GPU: each agrees with the
    interpreter, numpy and the emulation (or is a rejected schedule); a seed replays."""
    p = _run_fuzz(tmp_path, cases=12, gpu_every=1, seed=0,
                  extra=("--gpu-target", "cuda", "--jobs", "4"))
    out = p.stdout
    assert "cases run: 12 (cuda: 12)" in out, out + p.stderr
    assert "of which the GPU and the emulation disagree (cuda vs cuda-emu): 0" in out, out
    assert p.returncode == 0, out
    p = _run_fuzz(tmp_path, cases=1, gpu_every=1, seed=0,
                  extra=("--gpu-target", "cuda", "--replay", "3"))
    assert p.returncode == 0, p.stdout + p.stderr
    assert 'target="cuda")' in p.stdout, p.stdout


def test_campaign_seed_3055292_producer_of_a_root_copy_stays_at_the_root():
    """The auto-scheduler's analytic schedule computed an elementwise producer (C3) at
    the reduction's task loop while its only reader was a transposed copy of it made at
    the root: lowering refused the schedule (ScheduleError).  A producer read through a
    copy made outside the task loop is left at the root now."""
    n = tc.var("n")
    T0 = tc.placeholder((2, 1, 1), name="P0")
    r0, r1 = tc.reduce_axis((0, n), name="k0"), tc.reduce_axis((0, n), name="k1")
    T1 = tc.compute((n, 1), lambda i0, i1: tc.sum(T0[i1, i1 // 2, i1 * 2], axis=[r0, r1]),
                    name="C1")
    T2 = tc.placeholder((3, 10), name="P2")
    T3 = tc.compute((n, 8, n), lambda i0, i1, i2: T1[i2, 0] * tc.if_then_else(
        i1 // 2 < 3, T2[i1 // 2, i1], tc.const(0, "float32")), name="C3")
    T4 = tc.placeholder((16, 11, 4), name="P4")
    q = tc.reduce_axis((0, 2), name="k0")
    T5 = tc.compute((8, n, 8), lambda i0, i1, i2: tc.min(
        T3[i1, q, i1] + T4[i0 * 2 + q, q + i2, q], axis=[q]), name="C5")
    args = [T0, T2, T4, T5]
    s = tc.auto_schedule(args, shapes={"n": 2})
    f = tc.build(s, args)
    rng = np.random.default_rng(0)
    for N in (2, 5):
        ins = [rng.uniform(-1, 1, (2, 1, 1)).astype("float32"),
               rng.uniform(-1, 1, (3, 10)).astype("float32"),
               rng.uniform(-1, 1, (16, 11, 4)).astype("float32")]
        got, want = np.zeros((8, N, 8), "float32"), np.zeros((8, N, 8), "float32")
        f(*ins, got)
        interp.run(tc.lower(s, args), *ins, want)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_campaign_seed_3060755_slp_vectorizer_is_off():
    """LLVM 20's SLP vectorizer turned the 8 unrolled loads of a reversed column (stride 13
    bytes) into one masked load of 92 bytes that read zeros on this project's Emerald
    Rapids machine: wrong results with no error.  It is off for every kernel now."""
    A = tc.placeholder((2,), dtype="uint8", name="A")
    C = tc.placeholder((8, 13), dtype="uint8", name="C")
    B = tc.compute((13, 8), lambda i, j: A[(12 - i) % 2] * (C[7 - j, i % 3] // 3), name="B")
    f = tc.build(tc.create_schedule(B.op), [A, C, B])
    a = np.array([4, 7], "uint8")
    c = np.arange(104, dtype="uint8").reshape(8, 13)
    b = np.zeros((13, 8), "uint8")
    f(a, c, b)
    i, j = np.meshgrid(np.arange(13), np.arange(8), indexing="ij")
    want = (a[(12 - i) % 2].astype(np.int64) * (c[7 - j, i % 3] // 3)).astype("uint8")
    np.testing.assert_array_equal(b, want)
    assert "masked.load" not in f.get_source("llvm")


def test_campaign_seed_3063566_reference_truncmod_of_the_most_negative_int(tmp_path):
    """An empty min-reduction (identity 2**63 - 1) plus 1 wraps to -2**63, then truncmod by
    3: LLVM and the interpreter gave C's -2, the fuzzer's numpy reference computed |a|,
    which overflows, and disagreed.  The reference uses np.fmod now."""
    p = _run_fuzz(tmp_path, cases=1, gpu_every=25, seed=3063566)
    assert "cases run: 1" in p.stdout and "mismatches: 0" in p.stdout, p.stdout + p.stderr
    assert p.returncode == 0


def test_campaign_seed_3085194_generator_keeps_only_legal_storage_align(tmp_path):
    """The schedule generator put storage_align on a stage that rfactor made from a
    symbolic reduction (an inner extent of (n + 2) // 3), which lowering rightly refuses;
    the generator now keeps such a step only if lowering accepts it."""
    p = _run_fuzz(tmp_path, cases=1, gpu_every=25, seed=3085194)
    assert "cases run: 1" in p.stdout and "crashes: 0" in p.stdout, p.stdout + p.stderr
    assert p.returncode == 0


@pytest.mark.skipif(not HAVE_CXX, reason="the CUDA emulation needs a C++ compiler")
def test_campaign_seed_6002174_local_buffer_allocated_twice_in_one_c_block():
    """Loop partitioning copied a body with its allocation of a local buffer (P2.local),
    so the generated CUDA C declared the same array twice in one block and did not
    compile (the 4000-case campaign on the AVX2 Zen 3, seeds 6000000-6003999, default
    --gpu-every 25)."""
    from tecomp.testing.fuzz import case_for_seed

    out = run_case(case_for_seed(6002174, 25, 3))
    assert out.ok, out.report()


def test_campaign_seed_6203552_bfloat16_product_within_the_widened_tolerance():
    """A bfloat16 product of 11 terms (over a bfloat16 sum of 11) rounds at every step in
    its output, as TVM and Halide accumulate: 5.7% from numpy's float64 product, LLVM and
    the interpreter equal (the campaign at 3716094, chunk of seeds 6200000-6204999).
    The fuzzer's tolerance against numpy now adds up the terms of every 16-bit float
    reduction; LLVM against the interpreter stays strict."""
    from tecomp.testing.fuzz import case_for_seed

    out = run_case(case_for_seed(6203552, 25, 3))
    assert out.ok, out.report()


@pytest.mark.skipif(not HAVE_CXX, reason="the CUDA emulation needs a C++ compiler")
def test_fuzzer_gpu_cases_include_the_gpu_rules():
    """A quarter of the GPU cases have the auto-scheduler's GPU schedule
    (auto_schedule(target="cuda")'s rules) of a random program; they run in the
    emulation against the interpreter and numpy, and their reproducer calls the rules."""
    from tecomp.testing.fuzz import case_for_seed

    seeds = [s for s in range(40) if s % 2 == 1 and (s // 2) % 4 == 1]
    for seed in seeds[:4]:
        case = case_for_seed(seed, 2, 5, "llvm", 10)
        assert case.target == "cuda-emu" and case.auto == -1 and "auto_schedule" in case.name
        assert "apply_cuda_rules(args" in case.source()
        out = run_case(case)
        assert out.ok, out.report()


@pytest.mark.skipif(not HAVE_CXX, reason="the CUDA emulation needs a C++ compiler")
@pytest.mark.parametrize("seed,pipelined", [(60044, True), (60122, True), (60540, True),
                                            (60060, False)])
def test_fuzzer_gpu_reductions_with_double_buffered_tiles(seed, pipelined):
    """The GPU generator copies an input tile per step of a reduction's outer loop and
    sometimes double-buffers it, or makes a ring of 3 or 4 buffers (seeds pinned: 60044
    and 60122 pipeline their loop, 60540 in a ring of 4 (async_wait); 60060's reduction
    has one step, so its tile keeps one buffer); the emulation and the interpreter (no
    race) agree with numpy."""
    from tecomp.testing.fuzz import case_for_seed
    from tecomp.testing.sched import apply_steps

    case = case_for_seed(seed, 1, 5, "llvm", 10)
    assert case.target == "cuda-emu"
    assert any(st[0] == "double_buffer" for st in case.steps), case.steps
    assert ".double_buffer(" in case.source()
    r = apply_steps(case.program, case.steps)
    text = str(tc.lower(r.s, r.args, target="cuda-emu"))
    assert ("async_copy" in text) == pipelined
    assert ("async_wait" in text) == (seed == 60540)
    out = run_case(case)
    assert out.ok, out.report()


def test_campaign_seed_with_a_symbolic_unrolled_nest_builds():
    """Seed 10022977 (the campaign's defaults): a uint8 product reduction with a symbolic
    extent, auto-scheduled, had 224 loops of symbolic extent inside unrolled copies, each
    marked for LLVM's unroller, and LLVM's optimiser did not finish in 100 s (an
    InternalError); the case now builds and is right."""
    from tecomp.testing.fuzz import case_for_seed

    case = case_for_seed(10022977, 25, 5, "llvm", 10, "cuda-emu", 5)
    out = run_case(case)
    assert out.kind == "ok", out.report()


def test_campaign_seed_with_a_narrowed_loop_extent_runs():
    """Seed 10077838 (the campaign's defaults): a min-reduction over a scalar n, split
    three times and rfactored twice; a loop extent computed in int64 and narrowed back to
    int32 (``int32(min(...))``) was bounded by int32's whole range (a cast keeps no
    symbols in the interval analysis, and ``|min(a, b)|`` took the larger side), so the
    call-time check refused n = 11 (``can reach 12884901895``).  The bound of a loop
    counter now uses an upper bound of its extent (``min(a, b) <= b``) and a narrowing
    cast the bound of its value."""
    from tecomp.testing.fuzz import case_for_seed

    case = case_for_seed(10077838, 25, 5, "llvm", 10, "cuda-emu", 5)
    out = run_case(case)
    assert out.kind == "ok", out.report()


@pytest.mark.parametrize("seed", range(40 if LONG else _half(8)))
def test_fuzz_gemm_template_through_views(seed):
    """A GEMM the GEMM template takes, an operand read through a view with composed
    ``//`` and ``%`` indices (``gen.gen_view_gemm``), auto-scheduled (defaults or random
    knobs): it builds and computes the GEMM, on any CPU."""
    from tecomp.testing.diff import draw_view_gemm_case

    out = run_case(draw_view_gemm_case(RandomDraw(40_000 + seed), name=f"seed {40_000 + seed}"))
    assert out.ok, out.report()


@pytest.mark.parametrize("seed", [37, 77, 117] + ([157, 197, 237, 277, 317] if LONG else []))
def test_fuzz_skinny_gemms(seed):
    """Half the fuzzer's GEMM slot of the auto-scheduled cases (``--auto-every``) is a
    skinny float32 GEMM (``gen.gen_skinny_gemm``), auto-scheduled (defaults or random
    knobs): it builds and computes the GEMM, on any CPU."""
    from tecomp.testing.fuzz import case_for_seed

    case = case_for_seed(seed, 0, 5)
    assert "a skinny GEMM" in case.name and case.auto != 0
    out = run_case(case)
    assert out.ok, out.report()


def test_fuzzer_skinny_gemms_take_the_skinny_schedule():
    """The skinny GEMMs cover 1 to 16 rows, odd N and K, both layouts of W, and with the
    default knobs (scheduled for an AVX-512 CPU model, not run) nearly all get the
    skinny template (the ``skinny`` knob): its tiles, prefetches and rows in lanes are
    what the fuzzer reaches."""
    from tecomp.strategy import Knobs, apply_rules
    from tecomp.strategy.cpu import cpu_model
    from tecomp.testing.gen import gen_skinny_gemm

    info = cpu_model("llvm -mcpu=skylake-avx512")
    rows, odd, skinny, layouts = set(), 0, 0, set()
    for seed in range(60):
        prog = gen_skinny_gemm(RandomDraw(seed))
        built, env = prog.build()
        A, W = (built[0].shape, built[1].shape)
        M, K = int(A[-2]), int(A[-1])
        N = int(W[-2]) if int(W[-1]) == K else int(W[-1])
        rows.add(M)
        odd += N % 2 == 1 and K % 2 == 1
        layouts.add(int(W[-1]) == K)
        knobs = Knobs()
        apply_rules(prog.args(built, env), knobs, info)
        skinny += knobs.values.get("skinny") is True
    assert rows == set(range(1, 17)), sorted(rows)
    assert odd >= 20 and layouts == {True, False} and skinny >= 50, (odd, layouts, skinny)


def test_fuzzer_view_gemms_reach_unprovable_padded_panels():
    """The view GEMMs reach the bug class they were added for: the GEMM template's
    padded panels (align_bounds) over a view whose reads lowering cannot prove inside
    memory, which lowering refuses; the CPU strategy then leaves the GEMM to the rules,
    whose schedule lowers.  Scheduled and lowered for an AVX-512 CPU model, run nowhere."""
    from tecomp.strategy import Knobs, apply_rules
    from tecomp.strategy.cpu import cpu_model
    from tecomp.strategy.cpu.templates import _template
    from tecomp.testing.gen import gen_view_gemm

    info = cpu_model("llvm -mcpu=skylake-avx512")
    refused = templated = 0
    for seed in range(40):
        prog = gen_view_gemm(RandomDraw(seed))
        built, env = prog.build()
        args = prog.args(built, env)
        s = _template([built[i] for i in prog.outputs], Knobs(), info)
        if s is None:
            continue
        templated += 1
        try:
            tc.lower(s, args, target=info.target)
        except tc.ScheduleError as e:
            assert "align_bounds" in str(e), e
            refused += 1
            # what the auto-scheduler gives instead lowers (the rules' schedule)
            tc.lower(apply_rules(args, Knobs(), info), args, target=info.target)
    assert templated >= 30 and 2 <= refused < templated, (templated, refused)


def test_campaign_seed_3001590_partitioned_loop_clamped_by_a_symbolic_extent():
    """Loop partitioning's last part of a loop over ``n`` split at ``i0`` runs
    ``[min(i0, n), min(i0, n) + max(n - i0, 0))``: the index-dtype pass took its start
    for an int32 that might wrap and its end for one past int32 (an InternalError in
    lower), though a min of int32 values is one and the end is ``max(i0, n)`` (session
    18's campaign, seeds 3000000-, --edge-every 3)."""
    from tecomp.testing.fuzz import case_for_seed

    out = run_case(case_for_seed(3001590, 25, 5, "llvm", 10, edge_every=3,
                                 store_root_every=20, tensor_core_every=1))
    assert out.kind == "ok", out.report()


def test_campaign_seed_3001971_no_parameter_check_that_no_call_passes():
    """``i0*2 + int32(f // ((n + 4) // 5))`` (a fused loop's row, below 8, though the
    analysis bounds the cast by int32's limit): the index-dtype pass put a call-time check
    of the constant ``max(0, 14) + 2**31`` into int32, which every call failed (an
    ArgumentError on a legal schedule); a check that no call could pass is int64
    arithmetic instead (session 18's campaign, seeds 3000000-, --edge-every 3)."""
    from tecomp.testing.fuzz import case_for_seed

    out = run_case(case_for_seed(3001971, 25, 5, "llvm", 10, edge_every=3,
                                 store_root_every=20, tensor_core_every=1))
    assert out.kind == "ok", out.report()


def test_campaign_seed_5010624_no_thread_dependent_split_around_a_shared_copy():
    """A GPU row sum whose ``where=`` reads the output's index (``i2 + k0 >= 1``), its
    input copied to shared memory per step of ``k0.outer`` (double-buffered, 3 stages):
    loop partitioning split ``k0.outer`` at a point that reads ``threadIdx``, so the
    block's threads would have run the copy and its barriers different numbers of times,
    and the build refused a barrier the user never wrote.  A loop holding a step of the
    whole block is no longer split at a point that differs between its threads
    (session 19's campaign, seeds 5010000-, --edge-every 3)."""
    from tecomp.testing.fuzz import case_for_seed

    out = run_case(case_for_seed(5010624, 25, 5, "llvm", 10, edge_every=3,
                                 store_root_every=20, tensor_core_every=1))
    assert out.kind == "ok", out.report()


def test_the_spec_families_reproducers_run():
    """Every spec family's reproducer (``case.source()``, the lines the fuzz report
    prints) is Python that rebuilds the case and runs it to the same outcome."""
    import contextlib
    import io

    from tecomp.testing.concurrency import draw_threads_case
    from tecomp.testing.nnargs import draw_nnargs_case
    from tecomp.testing.ops import draw_op_case
    from tecomp.testing.producers import draw_producer_case

    for case in (draw_op_case(3), draw_nnargs_case(1), draw_producer_case(1),
                 draw_threads_case(2)):
        src = case.source()
        assert f"--replay {case.fuzz_seed}" in src, src
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(src, f"<{case.family} reproducer>", "exec"), {})
        assert out.getvalue().split()[0] in ("ok", "refused"), src + "\n" + out.getvalue()
