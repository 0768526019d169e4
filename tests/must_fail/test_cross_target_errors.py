"""Mistakes with a target of another instruction set (``llvm -mtriple=aarch64-linux-gnu``
on this machine): each is a TecompError naming the target and saying what to do."""
import numpy as np
import pytest

import tecomp as tc
from tecomp.testing import qemu

NEON = "llvm -mtriple=aarch64-linux-gnu"


def _kernel(target=NEON):
    A = tc.placeholder((16,), name="A")
    B = tc.compute((16,), lambda i: A[i] + 1.0, name="B")
    return tc.build(tc.create_schedule(B.op), [A, B], target=target, name="inc")


def test_unknown_triple():
    with pytest.raises(tc.TargetError, match=r"-mtriple='riscv64-linux-gnu' is not supported "
                                             r"\(tecomp generates code for x86_64-\.\.\. and "
                                             r"aarch64-\.\.\. triples"):
        tc.Target("llvm -mtriple=riscv64-linux-gnu")


@pytest.mark.parametrize("triple", ["aarch64-apple-darwin", "arm64-apple-ios",
                                    "aarch64-pc-windows-msvc", "x86_64-apple-darwin"])
def test_triple_of_another_system(triple):
    """A Mach-O triple's export aborted the process (LLVM: 'invalid section specifier
    .tecomp_meta'); x86_64's system part was silently replaced by Linux's."""
    arch = triple.split("-")[0]
    with pytest.raises(tc.TargetError, match=rf"-mtriple='{triple}' names the system "
                                             rf"'.*', and tecomp generates Linux code only.*"
                                             rf"-mtriple={arch}-linux-gnu"):
        tc.Target("llvm -mtriple=" + triple)


@pytest.mark.parametrize("triple", ["aarch64-linux-gnu_ilp32", "x86_64-linux-gnux32"])
def test_triple_of_a_32_bit_pointer_abi(triple):
    with pytest.raises(tc.TargetError, match=rf"-mtriple='{triple}' names the environment "
                                             rf"'{triple.split('-')[-1]}'.*64-bit pointers"):
        tc.Target("llvm -mtriple=" + triple)


def test_native_cpu_of_another_isa():
    if tc.Target("llvm").isa == "aarch64":
        pytest.skip("this machine is an aarch64 one")
    with pytest.raises(tc.TargetError, match=r"-mcpu=native is this machine's CPU, which is "
                                             r"no aarch64 CPU; name one \(known: generic"):
        tc.Target(NEON + " -mcpu=native")


def test_x86_cpu_for_aarch64():
    with pytest.raises(tc.TargetError, match=r"unknown -mcpu='skylake' \(the aarch64 CPUs "
                                             r"known: generic, cortex-a53"):
        tc.Target(NEON + " -mcpu=skylake")


@pytest.mark.parametrize("mattr, msg", [
    ("+avx2", r"-mattr names 'avx2', which is not an AArch64 feature tecomp knows"),
    ("+sv", r"'sv'.*did you mean sve"),
    ("-neon", r"-mattr=-neon removes neon, which every AArch64 CPU has"),
])
def test_aarch64_features(mattr, msg):
    with pytest.raises(tc.TargetError, match=msg):
        tc.Target(f"{NEON} -mattr={mattr}")


def test_calling_aarch64_code_here():
    if tc.Target("llvm").isa == "aarch64":
        pytest.skip("this machine is an aarch64 one")
    f = _kernel()
    a = np.zeros(16, "float32")
    with pytest.raises(tc.TargetError, match=r"inc cannot run on this machine: code for llvm "
                                             r"-mtriple=aarch64-linux-gnu is aarch64 machine "
                                             r"code and this machine is x86-64: export it"):
        f(a, a.copy())


def test_measuring_aarch64_code_here():
    if tc.Target("llvm").isa == "aarch64":
        pytest.skip("this machine is an aarch64 one")
    A = tc.placeholder((64,), name="A")
    B = tc.compute((64,), lambda i: A[i] * 2.0, name="B")
    with pytest.raises(tc.AutoScheduleError, match=r"auto_schedule: cannot measure here: code "
                                                   r"for llvm -mtriple=aarch64-linux-gnu is "
                                                   r"aarch64 machine code.*use trials=0"):
        tc.auto_schedule([A, B], target=NEON, trials=4)


def test_no_cross_compiler(tmp_path, monkeypatch):
    monkeypatch.setenv("TECOMP_CC_AARCH64", "no-such-aarch64-cc")
    f = _kernel()
    with pytest.raises(tc.RuntimeUnavailableError, match=r"links aarch64 code into a shared "
                                                         r"library with a cross C compiler.*"
                                                         r"no-such-aarch64-cc not on the PATH"
                                                         r".*set TECOMP_CC_AARCH64"):
        f.export_library(tmp_path / "inc.so")
    assert not (tmp_path / "inc.so").exists()


@pytest.mark.skipif(qemu.unavailable(NEON) is not None, reason="no aarch64 cross toolchain")
def test_loading_an_aarch64_library_here(tmp_path):
    f = _kernel()
    f.export_library(tmp_path / "inc.so")
    with pytest.raises(tc.LoadError, match=r"is a library for AArch64, not for this x86-64 "
                                           r"machine"):
        tc.load_module(tmp_path / "inc.so")


@pytest.mark.skipif(qemu.unavailable(NEON) is not None, reason="no aarch64 cross toolchain")
def test_run_library_arguments(tmp_path):
    f = _kernel()
    f.export_library(tmp_path / "inc.so")
    a = np.zeros(16, "float32")
    with pytest.raises(tc.ArgumentError, match=r"inc takes 2 arguments \(A, B\); got 1"):
        qemu.run_library(tmp_path / "inc.so", a)
    with pytest.raises(tc.ArgumentError, match=r"B is float32 with 1 dimensions; got float64"):
        qemu.run_library(tmp_path / "inc.so", a, np.zeros(16))
    with pytest.raises(tc.ArgumentError, match=r"A has extent 15 in dimension 0; the kernel's "
                                               r"is 16"):
        qemu.run_library(tmp_path / "inc.so", a[:15].copy(), a.copy())
    with pytest.raises(tc.ArgumentError, match=r"B \(argument 1\) shares memory with another "
                                               r"argument"):
        qemu.run_library(tmp_path / "inc.so", a, a)
    with pytest.raises(tc.ArgumentError, match=r"cpu='max; rm -rf' is not a qemu -cpu value"):
        qemu.run_library(tmp_path / "inc.so", a, a.copy(), cpu="max; rm -rf")


@pytest.mark.parametrize("spec,msg", [
    (NEON + " -msve-vector-bits=256", r"-msve-vector-bits=256 fixes the length of SVE vectors, "
                                      r"and this target has no SVE; add -mattr=\+sve"),
    (NEON + " -mcpu=neoverse-v1 -msve-vector-bits=384",
     r"-msve-vector-bits='384' is not an SVE vector length .* give one of 128, 256, 512"),
    (NEON + " -mcpu=neoverse-v1 -msve-vector-bits=wide", r"'wide' is not an SVE vector length"),
    ("llvm -mtriple=x86_64-linux-gnu -msve-vector-bits=256",
     r"-msve-vector-bits is for aarch64 targets with SVE; this target's instruction set is "
     r"x86-64"),
])
def test_sve_vector_bits(spec, msg):
    with pytest.raises(tc.TargetError, match=msg):
        tc.Target(spec)


def test_fixed_length_sve_on_another_vector_length(tmp_path):
    """Code for 256-bit SVE vectors on a machine with other vectors (qemu's 512 and 128
    bits) raises KernelAssertionError before touching memory (its 256-bit stores would
    write past the arrays' ends on 512-bit vectors): the output is left as it was."""
    target = NEON + " -mcpu=neoverse-v1 -msve-vector-bits=256"
    if qemu.unavailable(target) is not None:
        pytest.skip(f"no qemu-user for aarch64: {qemu.unavailable(target)}")
    f = _kernel(target)
    f.export_library(tmp_path / "inc.so")
    a = np.ones(16, "float32")
    for cpu in ("max,sve512=on", "max,sve128=on"):
        b = np.full(16, 7.0, "float32")
        with pytest.raises(tc.KernelAssertionError, match=r"compiled for SVE vectors of 256 "
                                                          r"bits \(-msve-vector-bits=256\) and "
                                                          r"this machine's are not 256 bits"):
            qemu.run_library(tmp_path / "inc.so", a, b, cpu=cpu)
        assert (b == 7.0).all()
    b = np.zeros(16, "float32")
    qemu.run_library(tmp_path / "inc.so", a, b)      # qemu -cpu max,sve256=on
    assert (b == 2.0).all()
