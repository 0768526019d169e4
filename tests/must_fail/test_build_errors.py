"""Programs that must fail in tc.lower and tc.build: each names the object at fault."""
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import tecomp as tc
import small_programs as sp  # tests/must_fail/small_programs.py


# ---------------------------------------------------------------------------------
# lower and build (once tecomp.testing.bad_inputs)


def test_lower_args_not_list():
    with pytest.raises(tc.LowerError, match=r"tc\.lower\(s, args\): args must be a list"):
        A, B, C = sp.chain3()
        s = tc.create_schedule(C.op)
        tc.lower(s, C)


def test_lower_not_a_schedule():
    with pytest.raises(tc.LowerError,
                       match=r"tc\.lower takes a schedule made by tc\.create_schedule"):
        A, B, C = sp.chain3()
        tc.lower("s", [A, C])


def test_lower_bad_name():
    with pytest.raises(tc.LowerError,
                       match=r"function name 'my func' must be a Python-style identifier"):
        A, B, C = sp.chain3()
        s = tc.create_schedule(C.op)
        tc.lower(s, [A, C], name="my func")


def test_lower_int_argument():
    with pytest.raises(tc.LowerError, match=r"argument 2 is 5"):
        A, B, C = sp.chain3()
        s = tc.create_schedule(C.op)
        tc.lower(s, [A, C, 5])


def test_lower_repeated_argument():
    with pytest.raises(tc.LowerError, match=r"argument 1 \(A\) appears twice"):
        A, B, C = sp.chain3()
        s = tc.create_schedule(C.op)
        tc.lower(s, [A, A, C])


def test_lower_foreign_tensor():
    with pytest.raises(tc.LowerError, match=r"tensor X is not part of this schedule"):
        A, B, C = sp.chain3()
        X = tc.compute((4,), lambda i: i, name="X")
        s = tc.create_schedule(C.op)
        tc.lower(s, [A, C, X])


def test_lower_inlined_argument():
    with pytest.raises(tc.LowerError, match=r"tensor B is inlined"):
        A, B, C = sp.chain3()
        s = tc.create_schedule(C.op)
        s[B].compute_inline()
        tc.lower(s, [A, B, C])


def test_lower_symbolic_var_not_bound():
    with pytest.raises((tc.LowerError, tc.BuildError), match=r"variable `?n`? "):
        n = tc.var("n")
        A = tc.placeholder((8,), name="A")
        k = tc.reduce_axis((0, n), name="k")
        C = tc.compute((1,), lambda i: tc.sum(A[k], axis=k), name="C")
        s = tc.create_schedule(C.op)
        tc.build(s, [A, C])


@pytest.mark.parametrize("where", ["split factor", "split nparts", "condition", "lower"])
def test_var_left_out_of_the_arguments(where):
    """A tc.var that is a split factor or sits in a condition, not passed in the arguments:
    an InternalError from the index-dtype pass before ('loop i runs past int32 ... the
    schedule should have made it int64', 'the extent of loop i.outer ... does not fit
    int32'), now the same LowerError as for a value."""
    k = tc.var("k")
    A = tc.placeholder((37,), name="A")
    if where == "condition":
        C = tc.compute((37,), lambda i: tc.if_then_else(i < k, A[i], 0.0), name="C")
    else:
        C = tc.compute((37,), lambda i: A[i] * 2, name="C")
    s = tc.create_schedule(C.op)
    if where.startswith("split") or where == "lower":
        s[C].split(C.op.axis[0], **{"nparts" if where == "split nparts" else "factor": k})
    with pytest.raises(tc.LowerError, match=r"variable `k` is used in the body of main but is "
                                            r"neither a scalar parameter nor the extent of a "
                                            r"buffer parameter's dimension; add it to the "
                                            r"parameters .*tc\.build\(s, \[\.\.\., k\]\)"):
        (tc.lower if where == "lower" else tc.build)(s, [A, C])
    f = tc.build(s, [A, C, k])          # the fix the message names
    a, c = np.arange(37, dtype="float32"), np.zeros(37, "float32")
    f(a, c, 5)
    want = np.where(np.arange(37) < 5, a, 0) if where == "condition" else a * 2
    np.testing.assert_array_equal(c, want)


@pytest.mark.parametrize("name", ["parallel_for", "ws_alloc", "ws_free", "extern_call"])
def test_kernel_named_like_a_runtime_function_it_calls(name):
    """tecomp_<name> is the kernel's symbol: under the name of a runtime function the
    kernel calls (a parallel loop calls tecomp_parallel_for, a large buffer
    tecomp_ws_alloc/free), llvmlite raised DuplicatedNameError, an InternalError."""
    A = tc.placeholder((1 << 16,), name="A")
    B = tc.compute((1 << 16,), lambda i: A[i] * 2, name="B")
    C = tc.compute((1 << 16,), lambda i: B[i] + 1, name="C")       # B: 256 KiB, on the heap
    s = tc.create_schedule(C.op)
    o, _ = s[C].split(C.op.axis[0], 1024)
    s[C].parallel(o)
    with pytest.raises(tc.BuildError, match=rf"cannot build {name}: its symbol tecomp_{name} "
                                            rf"is one of tecomp's runtime functions, which its "
                                            rf"code may call; build it under another name"):
        tc.build(s, [A, C], name=name)
    a, c = np.ones(1 << 16, np.float32), np.zeros(1 << 16, np.float32)
    tc.build(s, [A, C], name=name + "_k")(a, c)
    assert (c == 3).all()


def test_build_target_int():
    with pytest.raises(tc.TargetError, match=r"a target is a string or a tc\.Target, got int"):
        A, B, C = sp.chain3()
        s = tc.create_schedule(C.op)
        tc.build(s, [A, C], target=5)


def test_build_target_unknown():
    with pytest.raises(tc.TargetError, match=r"unknown target kind 'gpu'"):
        A, B, C = sp.chain3()
        s = tc.create_schedule(C.op)
        tc.build(s, [A, C], target="gpu")


def test_build_target_empty():
    with pytest.raises(tc.TargetError, match=r"the target string is empty"):
        A, B, C = sp.chain3()
        s = tc.create_schedule(C.op)
        tc.build(s, [A, C], target="")


def test_target_unknown_cpu():
    with pytest.raises(tc.TargetError,
                       match=r"unknown -mcpu='pentium9'.*give its features with -mattr"):
        tc.Target("llvm -mcpu=pentium9")


def test_target_mattr_without_sign():
    with pytest.raises(tc.TargetError, match=r"-mattr entry 'avx2' is not \+feature or -feature"):
        tc.Target("llvm -mattr=avx2,+fma")


def test_target_option_of_another_kind():
    with pytest.raises(tc.TargetError, match=r"target llvm: unknown option '-arch=sm_90'"):
        tc.Target("llvm -arch=sm_90")


def test_target_unknown_arch():
    with pytest.raises(tc.TargetError, match=r"target cuda: unknown -arch='sm_9'"):
        tc.Target("cuda -arch=sm_9")


def test_target_zero_cores():
    with pytest.raises(tc.TargetError,
                       match=r"-num-cores must be an integer in 1\.\.1024, got '0'"):
        tc.Target("llvm -num-cores=0")


@pytest.mark.parametrize("mattr,feature", [("-cx8", "cx8"), ("-sse,-sse2,-x87", "sse"),
                                           ("+avx2,-sse2", "sse2"), ("-x87", "x87")])
def test_target_removes_the_x86_64_baseline(mattr, feature):
    # (without cx8 the thread pool's atomics were libatomic calls, without SSE floats were
    # soft-float calls: the module built and its first call crashed the process)
    with pytest.raises(tc.TargetError, match=rf"-mattr=-{feature} removes {feature}, which every "
                                             rf"x86-64 CPU has and tecomp's code needs.*remove "
                                             rf"only features above the x86-64 baseline"):
        tc.Target(f"llvm -mattr={mattr}")


def test_target_feature_llvm_does_not_know():
    # (LLVM printed a warning and compiled for the CPU without it)
    with pytest.raises(tc.TargetError, match=r"-mattr names 'avx512', which is not a CPU "
                                             r"feature LLVM knows; did you mean avx512f"):
        tc.Target("llvm -mcpu=haswell -mattr=+avx512")


def test_tensor_intrinsic_calling_a_function_nothing_defines():
    """A tensor intrinsic's ib.call of a function no library of the process defines: the
    JIT bound it to address 0 and the first call jumped there (SIGSEGV)."""
    a = tc.placeholder((8,), name="a")
    c = tc.compute((8,), lambda i: a[i] * 2.0, name="c")

    def emit(ib, ins, outs):
        for i in range(8):
            v = ib.load(ins[0], "float", (i,))
            ib.store(outs[0], ib.call("my_scale\n", "float", v), (i,))

    intrin = tc.decl_tensor_intrin(c, llvm=emit, name="my.scale")
    X = tc.placeholder((32,), name="X")
    Y = tc.compute((32,), lambda i: X[i] * 2.0, name="Y")
    s = tc.create_schedule(Y.op)
    _, inner = s[Y].split(Y.op.axis[0], factor=8)
    s[Y].tensorize(inner, intrin)
    with pytest.raises(tc.BuildError, match=r"the code LLVM generated for main calls "
                                            r"my_scale<U\+000A>, which nothing in this process "
                                            r"defines: a call would jump to a null address\. A "
                                            r"tensor intrinsic's ib\.call must name"):
        tc.build(s, [X, Y])


_CALLS = {
    # LLVM 22 changed this intrinsic's arguments to <64 x i8>: its auto-upgrade of the old
    # signature asserted on these types (SIGABRT of the worker, or of the caller with
    # TECOMP_LLVM_OPT_WORKER=0) before its verifier saw the module
    "types": ("llvm.x86.avx512.vpdpbusd.512", "float", 3),
    "arity": ("llvm.fma.f32", "float", 2),
    "return": ("llvm.sqrt.f32", "double", 1),
    "unknown": ("llvm.x86.no.such.intrinsic", "float", 1),
}

_INTRIN_PROGRAM = """
import sys
import tecomp as tc

def tensorized(emit, name):
    # Y = X * 2, its 16-element blocks tensorized with the intrinsic emit emits
    a = tc.placeholder((16,), name="a")
    c = tc.compute((16,), lambda i: a[i] * 2.0, name="c")
    intrin = tc.decl_tensor_intrin(c, llvm=emit, name=name)
    X = tc.placeholder((32,), name="X")
    Y = tc.compute((32,), lambda i: X[i] * 2.0, name="Y")
    s = tc.create_schedule(Y.op)
    _, inner = s[Y].split(Y.op.axis[0], factor=16)
    s[Y].tensorize(inner, intrin)
    return s, [X, Y]

def program(callee, ret, nargs):
    def emit(ib, ins, outs):
        for i in range(16):
            v = ib.load(ins[0], "float", (i,))
            ib.store(outs[0], ib.call(callee, ret, *[v] * nargs), (i,))
    return tensorized(emit, "my.dot")

def avx2_program():
    def emit(ib, ins, outs):
        v = ib.splat(ib.cast("fptosi", ib.load(ins[0], "float"), "i16"), 16)
        r = ib.call("llvm.x86.avx2.pmadd.wd", "<8 x i32>", v, v)
        ib.store(outs[0], ib.cast("sitofp", r, "<8 x float>"))
    return tensorized(emit, "my.madd")

if __name__ == "__main__":
    if sys.argv[1] == "avx2":
        s, args = avx2_program()
    else:
        s, args = program(sys.argv[1], sys.argv[2], int(sys.argv[3]))
    try:
        tc.build(s, args, target=sys.argv[2] if sys.argv[1] == "avx2" else "llvm")
        print("built")
    except tc.TecompError as e:
        print(type(e).__name__ + ":", e)
"""


def _intrin_program():
    ns = {"__name__": "intrin_program"}
    exec(compile(_INTRIN_PROGRAM, "<intrin program>", "exec"), ns)  # noqa: S102
    return ns


def build_in_child(*argv, worker=True) -> str:
    """What building the program of ``_INTRIN_PROGRAM`` does in a child process (LLVM
    aborted the process on these calls with TECOMP_LLVM_OPT_WORKER=0): its output."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""),
               TECOMP_LLVM_OPT_WORKER="1" if worker else "0")
    proc = subprocess.run([sys.executable, "-c", _INTRIN_PROGRAM, *map(str, argv)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-3000:])
    return proc.stdout


_WRONG_CALL = (r"tensor intrinsic my\.dot: its ib\.call of {name} as {sig} is not a call LLVM "
               r"can compile for target llvm: LLVM (aborted on it \(killed by signal \w+|"
               r"rejects it \()")


@pytest.mark.parametrize("case, match", [
    ("types", _WRONG_CALL.format(name=r"llvm\.x86\.avx512\.vpdpbusd\.512",
                                 sig=r"float \(float, float, float\)")),
    ("arity", _WRONG_CALL.format(name=r"llvm\.fma\.f32", sig=r"float \(float, float\)")),
    ("return", _WRONG_CALL.format(name=r"llvm\.sqrt\.f32", sig=r"double \(float\)")),
    ("unknown", r"tensor intrinsic my\.dot calls llvm\.x86\.no\.such\.intrinsic, which is not an "
                r"intrinsic LLVM \d+\.\d+ has: a name starting with 'llvm\.' is one of LLVM's own "
                r"\(check its spelling"),
])
def test_tensor_intrinsic_calls_an_llvm_intrinsic_wrongly(case, match):
    """The worker process died (SIGABRT) on the first and the build said LLVM crashed on
    tecomp's module (an InternalError); the next two were InternalErrors too; the last
    was a BuildError about a missing symbol."""
    s, args = _intrin_program()["program"](*_CALLS[case])
    with pytest.raises(tc.BuildError, match=match):
        tc.build(s, args)


def test_tensor_intrinsic_call_with_changed_signature_gives_llvm_types():
    import llvmlite.binding as llvm

    from tecomp.codegen.llvm import jit

    jit.host()
    old = "<16 x i32> (<16 x i32>, <16 x i32>, <16 x i32>)"
    declared = llvm.parse_assembly(f"declare {old.replace(' (', ' @llvm.x86.avx512.vpdpbusd.512(')}")
    if "<16 x i32>, <16 x i32>, <16 x i32>" in str(declared):
        pytest.skip("this LLVM keeps vpdpbusd's old signature")
    s, args = _intrin_program()["program"](*_CALLS["types"])
    with pytest.raises(tc.BuildError, match=r"LLVM declares llvm\.x86\.avx512\.vpdpbusd\.512 "
                                            r"as <16 x i32> \(<16 x i32>, <64 x i8>, <64 x i8>\): "
                                            r"give ib\.call that return type and arguments of "
                                            r"those types"):
        tc.build(s, args)


@pytest.mark.parametrize("case", sorted(_CALLS))
def test_tensor_intrinsic_calls_in_process_optimisation_do_not_abort(case):
    """With TECOMP_LLVM_OPT_WORKER=0 LLVM read the kernel in the calling process: the
    wrong types aborted it (an LLVM assertion); now each call is compiled alone in a
    child process first.  (A child process of the test: a regression would kill it.)"""
    name, ret, nargs = _CALLS[case]
    out = build_in_child(name, ret, nargs, worker=False)
    if case == "unknown":
        assert re.match(r"BuildError: tensor intrinsic my\.dot calls llvm\.x86\.no\.such\."
                        r"intrinsic, which is not an intrinsic LLVM \d+\.\d+ has", out), out
    else:
        assert re.match("BuildError: " + _WRONG_CALL.format(name=re.escape(name), sig=".*"),
                        out), out


@pytest.mark.parametrize("worker", [True, False])
def test_tensor_intrinsic_needs_an_instruction_the_target_lacks(worker):
    """An AVX2 intrinsic in code for plain x86-64 (the intrinsic declares no requires=):
    LLVM's instruction selection aborted (the worker, or the caller without it)."""
    from tecomp.target import Target

    out = build_in_child("avx2", "llvm -mcpu=x86-64", worker=worker)
    assert re.match(r"BuildError: tensor intrinsic my\.madd: its ib\.call of "
                    r"llvm\.x86\.avx2\.pmadd\.wd as <8 x i32> \(<16 x i16>, <16 x i16>\) is not "
                    r"a call LLVM can compile for target llvm -mcpu=x86-64: LLVM aborted on it",
                    out), out
    if Target("llvm").has_feature("avx2"):
        assert ("It compiles for this machine's CPU: target llvm -mcpu=x86-64 lacks an "
                "instruction it needs; tc.decl_tensor_intrin(..., requires=[...])") in out, out


def test_tensor_intrinsic_calls_one_function_with_two_types():
    """llvmlite's TypeError from the second call became an InternalError."""
    a = tc.placeholder((8,), name="a")
    c = tc.compute((8,), lambda i: tc.abs(a[i]), name="c")

    def emit(ib, ins, outs):
        v = ib.load(ins[0], "float")
        ib.call("llvm.fabs.f32", "float", v)
        ib.store(outs[0], ib.call("llvm.fabs.f32", "double", ib.cast("fpext", v, "double")))

    intrin = tc.decl_tensor_intrin(c, llvm=emit, name="my.abs")
    X = tc.placeholder((32,), name="X")
    Y = tc.compute((32,), lambda i: tc.abs(X[i]), name="Y")
    s = tc.create_schedule(Y.op)
    _, inner = s[Y].split(Y.op.axis[0], factor=8)
    s[Y].tensorize(inner, intrin)
    with pytest.raises(tc.BuildError, match=r"tensor intrinsic my\.abs: ib\.call of "
                                            r"llvm\.fabs\.f32 as double \(double\), but this "
                                            r"kernel already calls it as float \(float\)"):
        tc.build(s, [X, Y])


def test_call_module_built_for_a_missing_feature():
    with pytest.raises(tc.TargetError,
                       match=r"cannot run on this machine: code for llvm -mattr=\+fma4 may "
                             r"use fma4"):
        # AMD's FMA4: no Intel CPU has it (on a CPU that has it, this entry is skipped)
        from tecomp.target import Target
        if Target("llvm -mattr=+fma4").runs_here() is None:
            raise tc.TargetError("cannot run on this machine: code for llvm -mattr=+fma4 may use "
                                 "fma4 (skipped: this CPU has fma4)")
        A, B, C = sp.chain3()
        f = tc.build(tc.create_schedule(C.op), [A, C], target="llvm -mattr=+fma4")
        f(np.ones((16, 8), "float32"), np.zeros((16, 8), "float32"))


def test_build_without_args():
    with pytest.raises(tc.LowerError, match=r"tc\.build\(s, args\): give the argument list"):
        A, B, C = sp.chain3()
        tc.build(tc.create_schedule(C.op))


def test_build_func_with_args():
    with pytest.raises(tc.LowerError, match=r"a lowered PrimFunc already has its parameters"):
        A, B, C = sp.chain3()
        s = tc.create_schedule(C.op)
        f = tc.lower(s, [A, C])
        tc.build(f, [A, C])


def test_build_of_tensor():
    with pytest.raises(tc.LowerError, match=r"tc\.lower takes a schedule"):
        A, B, C = sp.chain3()
        tc.build(C, [A, C])


def test_index_provably_out_of_range():
    with pytest.raises(tc.ShapeError, match=(
            r"compute C: the read A\[i \+ 1\] is out of range: index 0 \(i \+ 1\) is 8 at "
            r"i = 7, but dimension 0 of tensor A has extent 8; .*tc\.if_then_else")):
        A = sp.vec(8)
        tc.compute((8,), lambda i: A[i + 1], name="C")


def test_index_provably_out_of_range_in_reduction():
    with pytest.raises(tc.ShapeError, match=(
            r"compute C: the read A\[i, k \+ 2\] is out of range: index 1 \(k \+ 2\) is -1 at "
            r"k = -3, but dimension 1 of tensor A has extent 6")):
        A = tc.placeholder((4, 6), name="A")
        k = tc.reduce_axis((-3, 3), name="k")
        tc.compute((4,), lambda i: tc.sum(A[i, k + 2], axis=k), name="C")


def test_index_provably_out_of_range_of_a_compute():
    with pytest.raises(tc.ShapeError,
                       match=r"compute C: the read B\[i // 2 \+ 3\] is out of range"):
        A = sp.vec(8)
        B = tc.compute((6,), lambda i: A[i], name="B")
        tc.compute((8,), lambda i: B[i // 2 + 3], name="C")


def test_set_num_threads_zero():
    with pytest.raises(tc.TecompError, match=r"set_num_threads expects a positive integer, got 0"):
        tc.set_num_threads(0)


def test_set_num_threads_string():
    with pytest.raises(tc.TecompError,
                       match=r"set_num_threads expects a positive integer, got '4'"):
        tc.set_num_threads("4")


@pytest.mark.parametrize("value, shown", [(-1, "-1"), ("1G", "'1G'"), (True, "True"),
                                          (2.5, "2.5")])
def test_set_workspace_limit_not_a_byte_count(value, shown):
    with pytest.raises(tc.TecompError,
                       match=rf"set_workspace_limit expects a byte count >= 0 \(an int; 0 keeps "
                             rf"none\), got {shown}"):
        tc.set_workspace_limit(value)


@pytest.mark.parametrize("key", ["vector_plan", "parallel_plan"])
def test_hand_written_ir_using_a_codegen_plan_key(key):
    from tecomp.ir import Buffer, BufferStore, Const, For, PrimFunc, Var
    from tecomp.ir.stmt import AttrStmt

    A = Buffer("A", (Const(16),), "float32")
    i = Var("i", "int32")
    kind = "vectorized" if key == "vector_plan" else "parallel"
    loop = For(i, Const(0), Const(16), kind, BufferStore(A, Const(1.0, "float32"), (i,)))
    f = PrimFunc("f", (A,), AttrStmt(key, "mine", loop), {"target": tc.Target("llvm")})
    with pytest.raises(tc.LowerError, match=rf"the AttrStmt key '{key}' is the lowering's "
                       r"own \(a \w+Plan on a loop\); name the attribute differently"):
        tc.build(f)
