"""Libraries that must not load, and exports that must not be written.

``tc.load_module`` reads a file as data before anything of it runs; each bad file --
missing, not ELF, truncated, a foreign library, a library with constructors, one for
another machine or CPU, one whose sidecar is missing or does not match, one whose
metadata is damaged or of another format -- raises a LoadError that names the file and
says how to fix it: never a crash, never SIGILL.  Most cases start from a good library
and change a few bytes of it (keeping its length), then write a matching sidecar, so
that exactly one check fails.
"""
import ctypes
import ctypes.util
import os
import shutil
import subprocess

import numpy as np
import pytest

import tecomp as tc
from tecomp.codegen import aot_format
from tecomp.runtime import llvm as llvm_runtime
from tecomp.codegen.libfiles import write_sidecar


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    """The bytes of a library for any AVX2 machine (x86-64-v3): C = A + B."""
    n = tc.var("n")
    A = tc.placeholder((n,), name="A")
    B = tc.placeholder((n,), name="B")
    C = tc.compute((n,), lambda i: A[i] + B[i], name="C")
    f = tc.build(tc.create_schedule(C.op), [A, B, C], name="vadd",
                 target="llvm -mcpu=x86-64-v3")
    path = tmp_path_factory.mktemp("good") / "vadd.so"
    f.export_library(str(path))
    return path.read_bytes()


def write(tmp_path, data: bytes, name="lib.so", sidecar=True) -> str:
    path = tmp_path / name
    path.write_bytes(data)
    if sidecar:
        write_sidecar(path)
    return str(path)


def patched(data: bytes, old: bytes, new: bytes) -> bytes:
    """``data`` with the first occurrence of ``old`` (in the metadata: the only copy of
    it in the file) replaced by ``new`` of the same length: every offset stays."""
    assert len(old) == len(new) and old in data, old
    return data.replace(old, new, 1)


def test_the_good_library_loads(good, tmp_path):
    g = tc.load_module(write(tmp_path, good))
    c = np.empty(4, "float32")
    g(np.ones(4, "float32"), np.ones(4, "float32"), c)
    assert (c == 2).all()


# ---------------------------------------------------------------------------------------
# the file


def test_missing_file(tmp_path):
    with pytest.raises(tc.LoadError, match=r"library '.*nothing\.so' does not exist: give the "
                                           r"path Module.export_library wrote"):
        tc.load_module(tmp_path / "nothing.so")


def test_hostile_path_is_shown_as_one_line(tmp_path):
    with pytest.raises(tc.LoadError, match=r"evil<U\+000A><U\+001B>\[2J\.so' does not exist"):
        tc.load_module(str(tmp_path / "evil\n\x1b[2J.so"))


@pytest.mark.parametrize("path, match", [
    (3, "load_module expects a file path .str or os.PathLike., got int"),
    (b"lib.so", "expects the path as str, got bytes: decode it"),
    ("", "is not a file path"),
    ("lib\0.so", "is not a file path"),
])
def test_not_a_path(path, match):
    with pytest.raises(tc.LoadError, match=match):
        tc.load_module(path)


def test_a_directory(tmp_path):
    with pytest.raises(tc.LoadError, match="is a directory: give the path of the library file"):
        tc.load_module(tmp_path)


def test_not_elf(tmp_path):
    path = write(tmp_path, b"#!/bin/sh\necho not a library\n" * 10, "script.so")
    with pytest.raises(tc.LoadError, match=r"script\.so' is not a shared library \(not an ELF "
                                           r"file\)"):
        tc.load_module(path)


@pytest.mark.parametrize("keep", [0.5, 0.99])
def test_truncated(good, tmp_path, keep):
    path = write(tmp_path, good[:int(len(good) * keep)], sidecar=False)
    with pytest.raises(tc.LoadError, match=r"lib\.so' is truncated or damaged: its .* lies at "
                                           r"bytes .* export it again"):
        tc.load_module(path, verify=False)


def test_foreign_library(tmp_path):
    name = ctypes.util.find_library("m")
    ctypes.CDLL(name)  # loaded (numpy has it already): its path is in /proc/self/maps
    with open("/proc/self/maps") as f:
        paths = {line.split()[-1] for line in f if "/" in line and name in line}
    if not paths:
        pytest.skip(f"{name} has no path in /proc/self/maps")
    path = sorted(paths)[0]
    for verify in (True, False):
        with pytest.raises(tc.LoadError, match=r"is a shared library but not one tecomp "
                                               r"exported \(it has no \.tecomp_meta section"):
            tc.load_module(path, verify=verify)


_PLANTED = {
    # each defines run(), which writes the marker file, and makes the loader run it
    "constructor": ("__attribute__((constructor)) static void boom(void) { run(); }", [],
                    r"has code that would run when it is loaded or unloaded \(.*DT_INIT.*\)"),
    "ifunc, exported": ("static void real(void) {}\n"
                        "static void (*pick(void))(void) { run(); return real; }\n"
                        "void tecomp_x(void) __attribute__((ifunc(\"pick\")));",
                        [], r"has code that would run .*\(IFUNC resolvers \(STT_GNU_IFUNC"),
    "ifunc, called inside": ("static void real(void) {}\n"
                             "static void (*pick(void))(void) { run(); return real; }\n"
                             "static void x(void) __attribute__((ifunc(\"pick\")));\n"
                             "void tecomp_call(void) { x(); }",
                             [], r"has code that would run .*\(IFUNC resolvers \(IRELATIVE"),
    "search path": ("", ["-Wl,-rpath,/opt/planted"],
                    r"asks the dynamic loader for more than the C runtime \(search path "
                    r"/opt/planted\)"),
    "needed library": ("", ["-L{dir}", "-Wl,--no-as-needed", "-lhelper"],
                       r"asks the dynamic loader for more than the C runtime \(libhelper\.so\)"),
}


@pytest.mark.parametrize("kind", list(_PLANTED))
def test_planted_library_is_refused_before_any_of_it_runs(tmp_path, kind):
    """A library that claims to be tecomp's (it has the metadata section) but would make
    the dynamic loader run its code, or load other libraries, is refused before it is
    loaded: its code never runs."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the planted library")
    code, flags, match = _PLANTED[kind]
    marker = tmp_path / "ran"
    helper = tmp_path / "helper.c"
    helper.write_text(f'#include <stdio.h>\n__attribute__((constructor)) static void h(void) '
                      f'{{ FILE *f = fopen("{marker}", "w"); if (f) fclose(f); }}\n')
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(tmp_path / "libhelper.so"), str(helper)],
                   check=True)
    src = tmp_path / "planted.c"
    src.write_text(
        '#include <stdio.h>\n'
        '__attribute__((section(".tecomp_meta"), used)) const char meta[] = "{}";\n'
        f'static void run(void) {{ FILE *f = fopen("{marker}", "w"); if (f) fclose(f); }}\n'
        'void *keep_run = (void *)run;\n' + code + '\n')
    lib = tmp_path / "planted.so"
    # -nostartfiles: no C runtime start-up code, as tecomp links, so only `code` is at fault
    subprocess.run([cc, "-shared", "-fPIC", "-nostartfiles", "-o", str(lib), str(src),
                    *[f.format(dir=tmp_path) for f in flags]], check=True)
    write_sidecar(lib)
    with pytest.raises(tc.LoadError, match=r"planted\.so' " + match):
        tc.load_module(lib)
    assert not marker.exists()


def test_library_for_another_machine(good, tmp_path):
    data = bytearray(good)
    data[18:20] = (183).to_bytes(2, "little")  # e_machine: AArch64
    with pytest.raises(tc.LoadError, match=r"is a library for AArch64, not for this x86-64 "
                                           r"machine"):
        tc.load_module(write(tmp_path, bytes(data)))


# ---------------------------------------------------------------------------------------
# the sidecar


def test_no_sidecar(good, tmp_path):
    path = write(tmp_path, good, sidecar=False)
    with pytest.raises(tc.LoadError, match=r"has no sha256 sidecar '.*lib\.so\.sha256': "
                                           r"export_library writes one .* verify=False"):
        tc.load_module(path)
    tc.load_module(path, verify=False)  # the documented escape hatch


def test_sidecar_mismatch(good, tmp_path):
    path = write(tmp_path, good)
    with open(path, "r+b") as f:  # one byte of the code changed after the export
        f.seek(len(good) // 3)
        b = f.read(1)
        f.seek(len(good) // 3)
        f.write(bytes([b[0] ^ 0xFF]))
    with pytest.raises(tc.LoadError, match=r"does not match its sha256 sidecar .* it is "
                                           r"truncated, half-written or was replaced"):
        tc.load_module(path)
    (tmp_path / "lib.so.sha256").write_text("0" * 64 + "  lib.so\n")
    tmp_path.joinpath("lib.so").write_bytes(good)
    with pytest.raises(tc.LoadError, match="does not match its sha256 sidecar"):
        tc.load_module(path)


# ---------------------------------------------------------------------------------------
# the CPU


def test_missing_cpu_feature(good, tmp_path, monkeypatch):
    """A library for AVX2 on a CPU without it (simulated): refused before it is loaded."""
    monkeypatch.setattr(aot_format, "host_cpu_features",
                        lambda: frozenset(aot_format.CHECKED_FEATURES) - {"avx2"})
    with pytest.raises(tc.LoadError, match=r"needs the CPU feature\(s\) avx2, which this "
                                           r"machine's CPU does not have .* illegal instruction. "
                                           r"Export it for a CPU this one can run"):
        tc.load_module(write(tmp_path, good))


def test_patched_feature_list(good, tmp_path):
    """The feature list read from the file itself: a library that says it needs XOP (an
    AMD feature) on a CPU without it."""
    if "xop" in (aot_format.host_cpu_features() or ()):
        pytest.skip("this CPU has XOP")
    data = patched(good, b'"fma",', b'"xop",')
    with pytest.raises(tc.LoadError, match=r"needs the CPU feature\(s\) xop, which this "
                                           r"machine's CPU does not have"):
        tc.load_module(write(tmp_path, data))


def test_unreadable_cpu_features(good, tmp_path, monkeypatch):
    monkeypatch.setattr(aot_format, "host_cpu_features", lambda: None)
    with pytest.raises(tc.LoadError, match=r"the CPU features of this machine cannot be read"):
        tc.load_module(write(tmp_path, good))


# ---------------------------------------------------------------------------------------
# the metadata


@pytest.mark.parametrize("old, new, match", [
    (b'"fma",', b'"zzz",', r"needs the CPU feature\(s\) zzz, which this tecomp cannot check"),
    (b'"format_version":2,', b'"format_version":7,',
     r"was exported by tecomp '.*' in library format 7; this tecomp .* reads format 2: export "
     r"it again"),
    (b'"stride_slot":2,', b'"stride_slot":3,',
     r"the argument layout it was compiled with is not the one this tecomp .* derives from "
     r"its parameters"),
], ids=["unknown feature", "format version", "argument layout"])
def test_metadata_this_tecomp_does_not_accept(good, tmp_path, old, new, match):
    with pytest.raises(tc.LoadError, match=match):
        tc.load_module(write(tmp_path, patched(good, old, new)))


@pytest.mark.parametrize("old, new, match", [
    (b'["var",0]', b'["vax",0]', r"an expression of kind 'vax'"),
    (b'"dtype":"float32"', b'"dtype":"float99"', r"dtype 'float99'"),
    (b'"format_version":2,', b'"format_version":2}', r"not JSON"),
    (b'"kind":"buffer"', b'"kind":"tensor"', r"parameter kind 'tensor'"),
    (b'"symbol":"tecomp_vadd_strided"', b'"symbol":"tecomp_vadd_STRIDED"',
     r"the symbol 'tecomp_vadd_STRIDED' of variant"),
    (b'"entry":"tecomp_vadd"', b'"entry":"tecomp_vxdd"', r"the symbol 'tecomp_vadd' of variant"),
    (b'"name":"vadd"', b'"name":"v dd"', r"the kernel name 'v dd'"),
])
def test_damaged_metadata(good, tmp_path, old, new, match):
    with pytest.raises(tc.LoadError, match=r"its tecomp metadata is damaged or not tecomp's \("
                                           + match):
        tc.load_module(write(tmp_path, patched(good, old, new)))


def test_other_array_object_layout(good, tmp_path):
    if not llvm_runtime._PYOBJ:
        pytest.skip("this Python passes data pointers, not array objects")
    off = str(llvm_runtime.PYOBJECT_DATA_OFFSET).encode()
    other = str(llvm_runtime.PYOBJECT_DATA_OFFSET + 8).encode()[:len(off)].rjust(len(off), b"9")
    data = patched(good, b'"pyobject_data_offset":' + off, b'"pyobject_data_offset":' + other)
    with pytest.raises(tc.LoadError, match=r"exported by a Python whose numpy arrays keep their "
                                           r"data pointer at byte .*: export it again with this "
                                           r"Python"):
        tc.load_module(write(tmp_path, data))


# ---------------------------------------------------------------------------------------
# exporting


@pytest.fixture(scope="module")
def small():
    A = tc.placeholder((4,), name="A")
    B = tc.compute((4,), lambda i: A[i] * 2, name="B")
    return tc.build(tc.create_schedule(B.op), [A, B], name="double")


def test_export_into_a_missing_directory(small, tmp_path):
    with pytest.raises(tc.BuildError, match=r"double.export_library: the directory of .* does "
                                            r"not exist; create it first"):
        small.export_library(tmp_path / "no" / "such" / "dir" / "k.so")


def test_export_onto_a_directory(small, tmp_path):
    with pytest.raises(tc.BuildError, match=r"is a directory; give a file name such as"):
        small.export_library(tmp_path)


def test_export_path_of_the_wrong_type(small):
    with pytest.raises(tc.ArgumentError, match=r"double.export_library expects a file path "
                                               r"\(str or os.PathLike\), got list"):
        small.export_library(["k.so"])


def test_export_without_a_c_compiler(small, tmp_path, monkeypatch):
    monkeypatch.setenv("CC", "no-such-compiler-tecomp")
    with pytest.raises(tc.RuntimeUnavailableError, match=r"export_library links the kernel .* "
                                                         r"with the system's C compiler, and none "
                                                         r"was found .*set CC to its path"):
        small.export_library(tmp_path / "k.so")
    assert not (tmp_path / "k.so").exists()


def test_export_of_a_shape_condition_the_format_cannot_describe(tmp_path):
    """A condition on the scalars (here, made by hand, with a select) that the
    library format cannot carry: the export says which, and writes nothing."""
    from tecomp.ir import Buffer, BufferStore, Const, For, PrimFunc, Var
    from tecomp.ir.expr import GT, Select
    from tecomp.ir.stmt import ParamCheck

    m = Var("m")
    A = Buffer("A", (Const(4),), "float32")
    i = Var("i")
    body = For(i, Const(0), Const(4), "serial", BufferStore(A, Const(1.0, "float32"), (i,)))
    check = ParamCheck(Select(GT(m, Const(0)), m, Const(1), "int32"), 1, ("a test",))
    f = tc.build(PrimFunc("sel", (A, m), body, {"param_checks": (check,)}))
    with pytest.raises(tc.BuildError, match=r"cannot export sel: the shape expression "
                                            r"`.*m.*` uses Select \(int32\), which an exported "
                                            r"library cannot describe"):
        f.export_library(tmp_path / "sel.so")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", ["parallel_for", "pool_shutdown", "metadata"])
def test_export_of_a_kernel_named_like_the_runtime(tmp_path, name):
    A = tc.placeholder((4,), name="A")
    B = tc.compute((4,), lambda i: A[i] + 1, name="B")
    f = tc.build(tc.create_schedule(B.op), [A, B], name=name)
    with pytest.raises(tc.BuildError, match=rf"cannot export {name}: its symbol tecomp_{name} is "
                                            rf"one of the library's runtime functions; build it "
                                            rf"under another name"):
        f.export_library(tmp_path / "k.so")
