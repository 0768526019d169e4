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
import re
import shutil
import stat
import subprocess
import sys

import numpy as np
import pytest

import tecomp as tc
from tecomp.runtime import aot_format
from tecomp.runtime import llvm as llvm_runtime
from tecomp.runtime.libfiles import write_sidecar
from tecomp.testing.edges import digest_rewritten

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


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


def patched(data: bytes, old: bytes, new: bytes, digest=True) -> bytes:
    """``data`` with the first occurrence of ``old`` (in the metadata: the only copy of
    it in the file) replaced by ``new`` of the same length: every offset stays; with
    ``digest``, the metadata's sha256 beside the code rewritten to match (so that the
    check under test, not the digest's, refuses it)."""
    assert len(old) == len(new) and old in data, old
    out = data.replace(old, new, 1)
    return digest_rewritten(data, out) if digest else out


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
    # each defines run(), which writes the marker file, and makes the loader run it --
    # or names libhelper.so, whose constructor writes the marker
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
    # the loader loads a filter library (and runs its constructor) with the library
    **{kind: ("", [f"-Wl,--{option}={{dir}}/libhelper.so"],
              r"asks the dynamic loader for more than the C runtime \(filter library "
              rf".*libhelper\.so \({tag}\)\)")
       for kind, option, tag in (("auxiliary filter", "auxiliary", "DT_AUXILIARY"),
                                 ("filter", "filter", "DT_FILTER"))},
    **{kind: ("", [f"-Wl,--{option}={{dir}}/libhelper.so"],
              rf"has dynamic entries libraries tecomp exports never have \({tag}\)")
       for kind, option, tag in (("audit library", "audit", "DT_AUDIT"),
                                 ("dependency audit library", "depaudit", "DT_DEPAUDIT"))},
    "executable stack": ("", ["-Wl,-z,execstack"],
                         r"asks for an executable stack .* would make every thread's stack "
                         r"executable"),
    # tecomp's metadata and nothing else: loaded (no code runs), then found wanting
    "metadata only": ("", [], r"does not define tecomp_\w+, which its metadata promises"),
}


def _cc():
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the planted library")
    return cc


def _planted(good, tmp_path, code, flags, name="planted.so"):
    """A library gcc links from ``code``, with the metadata of the good library and its
    sha256 (so that every check of the metadata passes and only ``code`` or ``flags`` are at fault), and
    ``libhelper.so`` beside it, whose constructor writes the marker file ``ran``."""
    from tecomp.runtime.elf import inspect_library

    cc = _cc()
    marker = tmp_path / "ran"
    helper = tmp_path / "helper.c"
    helper.write_text(f'#include <stdio.h>\n__attribute__((constructor)) static void h(void) '
                      f'{{ FILE *f = fopen("{marker}", "w"); if (f) fclose(f); }}\n')
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(tmp_path / "libhelper.so"), str(helper)],
                   check=True)
    meta = inspect_library(good, "good", aot_format.SECTION).section
    digest = aot_format.metadata_digest(meta.rstrip(b"\0"))
    src = tmp_path / "planted.c"
    src.write_text(
        '#include <stdio.h>\n'
        f'__attribute__((section("{aot_format.SECTION}"), used)) const char '
        f'{aot_format.METADATA_SYMBOL}[] = {{{", ".join(str(b) for b in meta)}}};\n'
        f'__attribute__((section("{aot_format.DIGEST_SECTION}"), used)) const unsigned char '
        f'{aot_format.DIGEST_SYMBOL}[] = {{{", ".join(str(b) for b in digest)}}};\n'
        f'static void run(void) {{ FILE *f = fopen("{marker}", "w"); if (f) fclose(f); }}\n'
        'void *keep_run = (void *)run;\n' + code + '\n')
    lib = tmp_path / name
    # -nostartfiles: no C runtime start-up code, as tecomp links, so only `code` is at fault
    subprocess.run([cc, "-shared", "-fPIC", "-nostartfiles", "-o", str(lib), str(src),
                    *[f.format(dir=tmp_path) for f in flags]], check=True)
    write_sidecar(lib)
    return lib, marker


@pytest.mark.parametrize("kind", list(_PLANTED))
def test_planted_library_is_refused_before_any_of_it_runs(good, tmp_path, kind):
    """A library that claims to be tecomp's (it has tecomp's metadata) but would make the
    dynamic loader run its code, or load other libraries, is refused before it is
    loaded: its code never runs (a filter library's constructor ran before the check)."""
    code, flags, match = _PLANTED[kind]
    lib, marker = _planted(good, tmp_path, code, flags)
    with pytest.raises(tc.LoadError, match=r"planted\.so'.? " + match):
        tc.load_module(lib)
    assert not marker.exists()


def test_ifunc_hidden_from_the_section_headers(good, tmp_path):
    """The loader finds symbols through the dynamic section, not the section headers: an
    IFUNC symbol whose section header says "not a symbol table" is still found."""
    import struct

    lib, marker = _planted(good, tmp_path, _PLANTED["ifunc, exported"][0], [])
    data = bytearray(lib.read_bytes())
    shoff, = struct.unpack_from("<Q", data, 40)
    shnum, = struct.unpack_from("<H", data, 60)
    for k in range(shnum):
        if struct.unpack_from("<I", data, shoff + 64 * k + 4)[0] == 11:  # SHT_DYNSYM
            struct.pack_into("<I", data, shoff + 64 * k + 4, 1)        # -> SHT_PROGBITS
    lib.write_bytes(bytes(data))
    write_sidecar(lib)
    with pytest.raises(tc.LoadError, match=r"has code that would run .*\(IFUNC resolvers "
                                           r"\(STT_GNU_IFUNC"):
        tc.load_module(lib)
    assert not marker.exists()


def _dynamic_entry(data: bytes, tag: int) -> int:
    """The file offset of the value of the dynamic entry ``tag`` (addresses are file
    offsets in the segments of a library tecomp links up to its dynamic section's)."""
    import struct

    phoff, = struct.unpack_from("<Q", data, 32)
    phnum, = struct.unpack_from("<H", data, 56)
    for k in range(phnum):
        p_type, _, p_offset, _, _, p_filesz, _, _ = struct.unpack_from("<IIQQQQQQ", data,
                                                                       phoff + 56 * k)
        if p_type == 2:  # PT_DYNAMIC
            for off in range(p_offset, p_offset + p_filesz, 16):
                if struct.unpack_from("<q", data, off)[0] == tag:
                    return off + 8
    raise AssertionError(f"no dynamic entry {tag:#x}")


@pytest.mark.parametrize("how", ["versym moved onto the string table",
                                 "a version index nothing declares"])
def test_damaged_symbol_versions(good, tmp_path, how):
    """The loader indexes its version table with each symbol's DT_VERSYM entry unchecked:
    a DT_VERSYM moved by one bit (onto the string table) made dlopen crash."""
    import struct

    data = bytearray(good)
    versym = _dynamic_entry(data, 0x6FFFFFF0)
    if how.startswith("versym moved"):
        strtab = struct.unpack_from("<Q", data, _dynamic_entry(data, 5))[0]
        struct.pack_into("<Q", data, versym, strtab)
    else:
        table = struct.unpack_from("<Q", data, versym)[0]
        struct.pack_into("<H", data, table + 2, 0x7FF0)    # the first symbol after the null one
    path = write(tmp_path, bytes(data))
    with pytest.raises(tc.LoadError, match=r"lib\.so' is damaged: its symbol version table "
                                           r"names versions \[.*\] that it does not declare; "
                                           r"export it again"):
        tc.load_module(path)


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


_LOAD_IN_CHILD = """
import sys
import tecomp as tc
try:
    tc.load_module(sys.argv[1])
except tc.LoadError as e:
    print("LoadError:", e)
else:
    print("loaded")
"""


def load_in_child(path) -> str:
    """What ``tc.load_module(path)`` does in a child process, which a hang (a FIFO read
    until a writer comes) or a crash cannot take the tests down with: its output."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", _LOAD_IN_CHILD, str(path)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.parametrize("kind, match", [
    ("fifo", r"its sha256 sidecar '.*lib\.so\.sha256' is a FIFO \(named pipe\), not a regular "
             r"file, so it is not the sidecar export_library writes: copy the library and its "
             r"sidecar together"),
    ("directory", r"its sha256 sidecar '.*' is a directory, so it is not the sidecar"),
    ("device", r"its sha256 sidecar '.*' is a character device, not a regular file"),
    ("8 GiB", r"its sha256 sidecar '.*' is 8589934592 bytes, more than 4096, so it is not "
              r"the sidecar"),
    ("garbage", r"its sha256 sidecar '.*' does not start with a sha256 digest \(64 hex "
                r"digits\), so it is not the sidecar"),
    ("empty", r"its sha256 sidecar '.*' does not start with a sha256 digest"),
])
def test_sidecar_that_is_not_one(good, tmp_path, kind, match):
    """The sidecar is read only when it is a small regular file: a FIFO made
    load_module wait forever for a writer; a huge file was read (in part)."""
    path = write(tmp_path, good, sidecar=False)
    side = tmp_path / "lib.so.sha256"
    if kind == "fifo":
        os.mkfifo(side)
    elif kind == "directory":
        side.mkdir()
    elif kind == "device":
        side.symlink_to("/dev/zero")
    elif kind == "8 GiB":
        with open(side, "wb") as f:   # sparse: no disk space used
            f.write(b"0" * 64 + b"  lib.so\n")
            f.truncate(8 << 30)
    elif kind == "garbage":
        side.write_bytes(b"\xff\xfe not a digest at all\n")
    else:
        side.write_bytes(b"")
    out = load_in_child(path)
    assert re.search(r"^LoadError: library '.*lib\.so': " + match, out), out


@pytest.mark.parametrize("kind, match", [
    ("fifo", r"is a FIFO \(named pipe\), not a regular file: give the path of the library "
             r"file Module.export_library wrote"),
    ("device", r"is a character device, not a regular file: give the path of the library"),
    ("dangling link", r"does not exist: give the path Module.export_library wrote"),
    ("link loop", r"cannot be read \(Too many levels of symbolic links\): give the path"),
])
def test_library_that_is_not_a_file(tmp_path, kind, match):
    path = tmp_path / "lib.so"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        path.symlink_to("/dev/zero")
    elif kind == "dangling link":
        path.symlink_to(tmp_path / "gone.so")
    else:
        path.symlink_to(tmp_path / "loop.so")
        (tmp_path / "loop.so").symlink_to(path)
    (tmp_path / "lib.so.sha256").write_text("0" * 64 + "  lib.so\n")
    out = load_in_child(path)
    assert re.search(r"^LoadError: library '.*lib\.so' " + match, out), out


def test_symbolic_link_to_a_library(good, tmp_path):
    """A link to a library loads (as dlopen follows links); the sidecar is looked for
    beside the path given."""
    real = write(tmp_path, good, "real.so")
    link = tmp_path / "link.so"
    link.symlink_to(real)
    with pytest.raises(tc.LoadError, match=r"link\.so' has no sha256 sidecar"):
        tc.load_module(link)
    shutil.copy(real + ".sha256", str(link) + ".sha256")
    c = np.empty(3, "float32")
    tc.load_module(link)(np.ones(3, "float32"), np.ones(3, "float32"), c)
    assert (c == 2).all()


def test_truncated_with_a_matching_sidecar(good, tmp_path):
    """A file cut short after its sidecar was written for the short file (the ELF checks
    do not rely on the sidecar)."""
    path = write(tmp_path, good[:len(good) // 2])
    with pytest.raises(tc.LoadError, match=r"lib\.so' is truncated or damaged"):
        tc.load_module(path)


def test_plain_library_with_a_matching_sidecar(tmp_path):
    """A library another program wrote, with a matching sidecar: not tecomp's."""
    src = tmp_path / "plain.c"
    src.write_text("int tecomp_vadd(void) { return 0; }\n")
    lib = tmp_path / "plain.so"
    subprocess.run([_cc(), "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    write_sidecar(lib)
    with pytest.raises(tc.LoadError, match=r"plain\.so' is a shared library but not one "
                                           r"tecomp exported"):
        tc.load_module(lib)


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
     r"was exported by tecomp '.*' in library format 7; this tecomp .* reads formats 2 \(CPU\) "
     r"and 4 \(GPU\): export it again"),
    # a CPU library that claims the GPU format
    (b'"format_version":2,', b'"format_version":4,',
     r"a GPU library format without device 'cuda'"),
    (b'"stride_slot":2,', b'"stride_slot":3,',
     r"the argument layout it was compiled with is not the one this tecomp .* derives from "
     r"its parameters"),
], ids=["unknown feature", "format version", "cpu library as gpu format", "argument layout"])
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


def test_metadata_that_is_not_the_codes(good, tmp_path):
    """An extent changed in the metadata (16 -> 56 elements, one bit), the sidecar written
    anew: refused, where it loaded and took arrays of 56 elements that its code, compiled
    for 16, computes over in part (a silent partial result)."""
    A = tc.placeholder((4, 16), name="A")
    B = tc.compute((4, 16), lambda i, j: A[i, j] * 2.0, name="B")
    f = tc.build(tc.create_schedule(B.op), [A, B], name="rows")
    f.export_library(str(tmp_path / "rows.so"))
    data = patched((tmp_path / "rows.so").read_bytes(), b'["const",16,', b'["const",56,',
                   digest=False)
    with pytest.raises(tc.LoadError, match=r"lib\.so': its metadata \(\.tecomp_meta, sha256 "
                                           r"\w+\.\.\.\) is not the metadata its code was "
                                           r"compiled for .*; export it again"):
        tc.load_module(write(tmp_path, data))


def test_metadata_without_its_digest(good, tmp_path):
    """A library without the metadata's sha256 (exported before tecomp wrote one, or its
    section's name damaged): refused, not loaded on the metadata's word."""
    data = patched(good, aot_format.DIGEST_SECTION.encode(), b".tecomp_meta_sha25X",
                   digest=False)
    with pytest.raises(tc.LoadError, match=r"has no \.tecomp_meta_sha256 section \(the sha256 "
                                           r"of its metadata, written with its code\): it was "
                                           r"exported by an older tecomp, or it is damaged; "
                                           r"export it again with this tecomp"):
        tc.load_module(write(tmp_path, data))


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


def test_export_onto_a_directory_that_is_not_there(small, tmp_path):
    """``"kernels/"`` where no such directory is: the library was written as a file named
    ``kernels`` (the separator dropped), and ``load_module("kernels/")`` refused it."""
    with pytest.raises(tc.BuildError, match=r"double.export_library: '.*kernels/' ends with "
                                            r"'/', so it names a directory, and there is none; "
                                            r"give a file name such as '.*kernels/double.so' "
                                            r"\(create the directory first\)"):
        small.export_library(str(tmp_path / "kernels") + "/")
    assert not (tmp_path / "kernels").exists()


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


def _old_export(small, tmp_path):
    """An export of ``small`` at tmp_path/k.so: the bytes of the library and sidecar."""
    small.export_library(tmp_path / "k.so")
    return (tmp_path / "k.so").read_bytes(), (tmp_path / "k.so.sha256").read_bytes()


def test_export_when_a_directory_has_the_sidecars_name(small, tmp_path):
    """The library is not replaced when its sidecar cannot be (the library was written,
    then os.replace of the sidecar raised IsADirectoryError out of export_library)."""
    old, _ = _old_export(small, tmp_path)
    os.unlink(tmp_path / "k.so.sha256")
    (tmp_path / "k.so.sha256").mkdir()
    A = tc.placeholder((4,), name="A")
    B = tc.compute((4,), lambda i: A[i] * 3, name="B")
    triple = tc.build(tc.create_schedule(B.op), [A, B], name="triple")
    with pytest.raises(tc.ExportError, match=r"triple.export_library could not write '.*k\.so' "
                                             r"or its sidecar '.*k\.so\.sha256' \(Is a "
                                             r"directory\): the files there are unchanged") as e:
        triple.export_library(tmp_path / "k.so")
    assert isinstance(e.value, OSError) and isinstance(e.value, tc.BuildError)
    assert (tmp_path / "k.so").read_bytes() == old
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k.so", "k.so.sha256"]
    os.unlink(tmp_path / "k.so")
    with pytest.raises(tc.ExportError):   # and where there was no library: none is left
        triple.export_library(tmp_path / "k.so")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k.so.sha256"]


@pytest.mark.parametrize("fail_on", [1, 2, 3])
def test_export_onto_a_full_disk(small, tmp_path, monkeypatch, fail_on):
    """Whichever write fails (the library's temporary file, the sidecar's, the rename of
    the sidecar), the old library and sidecar stay as they were, and the error is an
    ExportError naming the path and the reason."""
    import errno
    from tecomp.runtime import libfiles

    old = _old_export(small, tmp_path)
    calls = []
    real_temporary, real_replace = libfiles._temporary, os.replace

    def full(*args):
        calls.append(args)
        if len(calls) == fail_on:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(libfiles, "_temporary", lambda *a: full(*a) or real_temporary(*a))
    if fail_on == 3:   # the two temporaries are written; the sidecar's rename fails
        monkeypatch.setattr(libfiles.os, "replace", lambda a, b: (
            full(a, b) if str(b).endswith(".sha256") else None) or real_replace(a, b))
    with pytest.raises(tc.ExportError, match=r"double.export_library could not write '.*k\.so' "
                                             r"or its sidecar .* \(No space left on device\): "
                                             r"the files there are unchanged; check that the "
                                             r"directory is writable and has room"):
        small.export_library(tmp_path / "k.so")
    monkeypatch.undo()
    assert ((tmp_path / "k.so").read_bytes(), (tmp_path / "k.so.sha256").read_bytes()) == old
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k.so", "k.so.sha256"]
    tc.load_module(tmp_path / "k.so")


def test_export_to_a_name_too_long_for_its_sidecar(small, tmp_path):
    name = "k" * 250 + ".so"
    with pytest.raises(tc.BuildError, match=r"double.export_library: the file name 'kkk.* is "
                                            r"253 bytes long; its sidecar's name .* would be "
                                            r"260, more than the 255 this file system allows: "
                                            r"give a shorter file name"):
        small.export_library(tmp_path / name)
    assert list(tmp_path.iterdir()) == []


def test_export_of_a_name_past_the_format_limit(tmp_path):
    """Names up to 1 MiB round-trip (tests/test_aot.py); a longer one is refused by the
    export, which reads its metadata back as load_module will, instead of written and
    then called damaged by load_module."""
    A = tc.placeholder((4,), name="A")
    B = tc.compute((4,), lambda i: A[i] * 2, name="B")
    f = tc.build(tc.create_schedule(B.op), [A, B], name="k" * ((1 << 20) + 1))
    with pytest.raises(tc.BuildError, match=r"cannot export k{80}\.\.\.: field 'name' is "
                                            r"1048577 characters long \(at most 1048576\), "
                                            r"more than a library can describe; give it "
                                            r"shorter names"):
        f.export_library(tmp_path / "k.so")
    assert list(tmp_path.iterdir()) == []


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


@pytest.mark.parametrize("name", ["pool_shutdown", "metadata", "fatbin"])
def test_export_of_a_kernel_named_like_the_runtime(tmp_path, name):
    A = tc.placeholder((4,), name="A")
    B = tc.compute((4,), lambda i: A[i] + 1, name="B")
    f = tc.build(tc.create_schedule(B.op), [A, B], name=name)
    with pytest.raises(tc.BuildError, match=rf"cannot export {name}: its symbol tecomp_{name} is "
                                            rf"one of the library's runtime functions; build it "
                                            rf"under another name"):
        f.export_library(tmp_path / "k.so")


def _special_files(tmp_path):
    """(path, what) of a FIFO, a link to it and, where this user may make one, a
    character device node (the same device as /dev/null), all in ``tmp_path``."""
    fifo = tmp_path / "fifo.so"
    os.mkfifo(fifo)
    link = tmp_path / "link.so"
    link.symlink_to(fifo)
    out = [(fifo, r"is a FIFO \(named pipe\), not a regular file"),
           (link, r"is a symbolic link to '.*fifo\.so', which is a FIFO \(named pipe\), not a "
                  r"regular file")]
    try:
        os.mknod(tmp_path / "null.so", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        out.append((tmp_path / "null.so", "is a character device, not a regular file"))
    except (PermissionError, AttributeError):
        pass
    return out


def test_export_onto_a_device_or_a_fifo(small, tmp_path):
    """The library's temporary file was renamed onto the path, whatever was there:
    ``export_library("/dev/null")`` run as root replaced the system's /dev/null with a
    regular file (the library), and a FIFO or a socket with one too.  Now a device, a
    FIFO or a socket at the path or at its sidecar's, or a link to one, is refused and
    left as it was."""
    for path, what in _special_files(tmp_path):
        before = os.lstat(path)
        with pytest.raises(tc.BuildError, match=r"double.export_library: the path '.*' "
                                                + what + r": the file written \(renamed onto "
                                                r"the path\) would replace it, .*give the path "
                                                r"of a file, e.g. '.*double\.so'"):
            small.export_library(path)
        after = os.lstat(path)
        assert (after.st_mode, after.st_ino) == (before.st_mode, before.st_ino)
    os.mkfifo(tmp_path / "k.so.sha256")
    with pytest.raises(tc.BuildError, match=r"the sidecar's path '.*k\.so\.sha256' is a FIFO"):
        small.export_library(tmp_path / "k.so")
    assert stat.S_ISFIFO(os.lstat(tmp_path / "k.so.sha256").st_mode)
    assert not (tmp_path / "k.so").exists()


def _phdr(data: bytes, p_type: int, nth: int = 0) -> int:
    """The file offset of the ``nth`` program header of type ``p_type``."""
    import struct

    phoff, = struct.unpack_from("<Q", data, 32)
    phnum, = struct.unpack_from("<H", data, 56)
    found = [phoff + 56 * k for k in range(phnum)
             if struct.unpack_from("<I", data, phoff + 56 * k)[0] == p_type]
    return found[nth]


def _address_offset(data: bytes, vaddr: int) -> int:
    """The file offset of address ``vaddr`` (through the loadable segments)."""
    import struct

    for k in range(8):
        try:
            at = _phdr(data, 1, k)
        except IndexError:
            break
        _, _, off, lo, _, filesz, _, _ = struct.unpack_from("<IIQQQQQQ", data, at)
        if lo <= vaddr < lo + filesz:
            return off + vaddr - lo
    raise AssertionError(f"address {vaddr:#x} is not in the file")


def _damage(data: bytearray, how: str) -> None:
    import struct

    def dyn(tag):
        return struct.unpack_from("<Q", data, _dynamic_entry(data, tag))[0]

    if how == "read-only segment with memory past its file":
        at = _phdr(data, 1, 0)                      # the first PT_LOAD (read-only)
        struct.pack_into("<Q", data, at + 40, struct.unpack_from("<Q", data, at + 40)[0]
                         + 2**31)
    elif how == "segments overlap":
        first, second = _phdr(data, 1, 0), _phdr(data, 1, 1)
        data[second + 16:second + 24] = data[first + 16:first + 24]
    elif how == "read-only part over the variables":
        at = _phdr(data, 0x6474E552)                # PT_GNU_RELRO
        struct.pack_into("<Q", data, at + 40, 1 << 20)
    elif how == "PLT relocations shorter than their section":
        struct.pack_into("<Q", data, _dynamic_entry(data, 2), dyn(2) - 24)   # DT_PLTRELSZ
    elif how == "two relocations at one place":
        table = _address_offset(data, dyn(23))                              # DT_JMPREL
        data[table + 24:table + 32] = data[table:table + 8]
    elif how == "version needs of another library":
        need = _address_offset(data, dyn(0x6FFFFFFE))                        # DT_VERNEED
        struct.pack_into("<I", data, need + 4, struct.unpack_from("<I", data, need + 4)[0] + 1)
    else:
        raise ValueError(how)


@pytest.mark.parametrize("how, match", [
    ("read-only segment with memory past its file",
     r"its loadable segment 0 is read-only but takes 2147483648 bytes of memory past the "
     r"file's"),
    ("segments overlap", r"its loadable segment 1 at 0x0 overlaps the one before it "
                         r"\(which ends at 0x[0-9a-f]+\)"),
    ("read-only part over the variables",
     r"the part it makes read-only after relocation \(1048576 bytes at 0x[0-9a-f]+\) is not "
     r"the start of a writable segment's part read from the file"),
    ("PLT relocations shorter than their section",
     r"its PLT relocations \(\d+ bytes at 0x[0-9a-f]+\) are not its \.rela\.plt section "
     r"\(\d+ bytes at 0x[0-9a-f]+\)"),
    ("two relocations at one place",
     r"a relocation writes at 0x[0-9a-f]+, not a place of its own for a pointer"),
    ("version needs of another library",
     r"its version needs name a library it does not need"),
])
def test_damaged_loader_tables(good, tmp_path, how, match):
    """Session 26: one bit flipped where the dynamic loader reads a library -- a segment's
    size, a relocation's place, the read-only-after-relocation part, the size of the PLT
    relocations, the library a version is needed from --, the sidecar written anew,
    crashed the process in dlopen (or at the first call through a pointer left
    unrelocated; the loader aborted on the version).  Each is checked before dlopen."""
    data = bytearray(good)
    _damage(data, how)
    path = write(tmp_path, bytes(data))
    with pytest.raises(tc.LoadError, match=r"lib\.so' is damaged: " + match + "; export it "
                                           r"again"):
        tc.load_module(path)
