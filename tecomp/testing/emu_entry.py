"""The CUDA emulation's cache entry attacked (the ``library_file`` family's ``emu_entry``
draw, and tests/test_cuda_emu.py).

A kernel's emulation library is compiled into a fresh cache, then what sits at its
entry (``cuda_emu/<key>.so``) or its sidecar is replaced as a careless user or whoever
can write the cache would (:data:`ATTACKS`), and the kernel is compiled again and called:

``other_key``, ``other_key_section``
    a library of another key, with a sidecar of its own, whose static constructor
    creates a marker file (its key in the ``tecomp_emu_key`` symbol, or in the key
    section, :data:`~tecomp.codegen.cuda_emu.KEY_SECTION`);
``other_entry``
    the genuine library of another kernel copied over the entry with its sidecar;
``swap_after_check``
    the marked library renamed onto the entry (its sidecar written) right after the
    entry's bytes were checked, before they are loaded (the race of a path hashed, then
    dlopened by name);
``truncated``, ``truncated_resealed``, ``empty_resealed``, ``key_flip_resealed``
    the entry cut at a drawn percentage of its length, its sidecar left or written anew;
    an empty entry resealed; one bit of its key section flipped and resealed;
``link_to_genuine``, ``link_to_fifo``, ``fifo``, ``sidecar_fifo``, ``sidecar_dev_zero``
    a symbolic link where the entry goes (to a genuine copy, to a FIFO), a FIFO there, a
    FIFO or a link to ``/dev/zero`` in the sidecar's place;
``directory``
    a directory in the entry's place: a ``BuildError`` naming the entry;
``disk_full`` (session 31, not in :data:`ATTACKS`: drawn apart)
    the entry removed and compiled again under a file size limit of 4-10 KiB (the errors
    of a full disk): a ``BuildError`` naming the cache directory, no build directory
    left, then, the limit lifted, the kernel's values (before session 31 a raw
    ``OSError``, or the compiler's death reported as "likely a tecomp bug").

The answer must be the kernel's values (``A * 2 + k``: exact in float32, contracted or
not), then again from the cache as the first call left it (as a new process would find
it), the marker must never appear (no code of another key ran), and the entry must be
the kernel's own library afterwards -- else a finding.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Optional, Tuple

import numpy as np

import tecomp as tc
from ..codegen import cuda_emu
from ..codegen.cuda import codegen_cuda
from ..runtime import elf
from ..runtime.libfiles import sidecar_path, write_sidecar

ATTACKS = ("other_key", "other_key_section", "other_entry", "swap_after_check", "truncated",
           "truncated_resealed", "empty_resealed", "key_flip_resealed", "link_to_genuine",
           "link_to_fifo", "fifo", "sidecar_fifo", "sidecar_dev_zero", "directory")

#: the key a planted library names (no kernel's)
OTHER_KEY = "0123456789abcdef0123456789abcdef"


def planted_library(d: Path, marker: Path, key_section: Optional[str] = None) -> Path:
    """A shared library put at an entry: its static constructor creates ``marker`` (so a
    test sees whether it was ever loaded), it has the entry points of an emulation
    library, and its key -- in the key section when ``key_section`` gives one -- names
    another library.  Compiled in ``d``; its path."""

    src = d / "planted.cc"
    sec = f'__attribute__((used, section("{cuda_emu.KEY_SECTION}"))) ' if key_section else ""
    src.write_text(
        '#include <cstdio>\n'
        f'struct Mark {{ Mark() {{ FILE* f = std::fopen("{marker}", "w"); '
        'if (f) std::fclose(f); } };\n'
        'static Mark mark;\n'
        f'extern "C" int tecomp_emu_abi_version(void) {{ return {cuda_emu.ABI_VERSION}; }}\n'
        f'extern "C" {sec}const char tecomp_emu_key[] = "{key_section or OTHER_KEY}";\n')
    out = d / "planted.so"
    subprocess.run([cuda_emu.find_cxx(), "-shared", "-fPIC", "-o", str(out), str(src)],
                   check=True, capture_output=True)
    return out


def _kernel(n: int, threads: int, k: int):
    """``C = A * 2 + k`` over ``n`` elements, ``threads`` a block: its CUDA source."""

    A = tc.placeholder((n,), name="A")
    C = tc.compute((n,), lambda i: A[i] * 2.0 + float(k), name="C")
    s = tc.create_schedule(C.op)
    bx, tx = s[C].split(C.op.axis[0], factor=threads)
    s[C].bind(bx, tc.thread_axis("blockIdx.x"))
    s[C].bind(tx, tc.thread_axis("threadIdx.x"))
    return codegen_cuda(tc.lower(s, [A, C], target="cuda-emu"))


def _flip_key(entry: Path) -> None:

    data = bytearray(entry.read_bytes())
    sec = elf.read_sections(bytes(data), str(entry))[cuda_emu.KEY_SECTION]
    at = bytes(data).find(sec)
    data[at + 3] ^= 0x04          # a hex digit of the key into another character
    entry.unlink()
    entry.write_bytes(bytes(data))


def _attack(how: str, entry: Path, d: Path, marker: Path, cut: int, other) -> None:
    """Do ``how`` to the entry (see the module doc); ``other``: (another kernel's CUDA
    source) for ``other_entry``."""

    side = sidecar_path(entry)
    genuine = entry.read_bytes()
    if how in ("other_key", "other_key_section"):
        planted = planted_library(d, marker, "f" * 32 if how == "other_key_section" else None)
        shutil.copyfile(planted, entry)
        write_sidecar(entry)
    elif how == "other_entry":
        cuda_emu.compile_emu_library(other, load=False)
        src = entry.with_name(f"{cuda_emu._library_key(other)[0]}.so")
        shutil.copyfile(src, entry)
        shutil.copyfile(sidecar_path(src), side)
    elif how in ("truncated", "truncated_resealed", "empty_resealed"):
        entry.unlink()
        entry.write_bytes(b"" if how == "empty_resealed" else genuine[:len(genuine) * cut // 100])
        if how.endswith("resealed"):
            write_sidecar(entry)
    elif how == "key_flip_resealed":
        _flip_key(entry)
        write_sidecar(entry)
    elif how in ("link_to_genuine", "link_to_fifo"):
        target = d / "elsewhere.so"
        if how == "link_to_genuine":
            target.write_bytes(genuine)
        else:
            os.mkfifo(target)
        entry.unlink()
        entry.symlink_to(target)
    elif how == "fifo":
        entry.unlink()
        os.mkfifo(entry)
    elif how == "sidecar_fifo":
        side.unlink()
        os.mkfifo(side)
    elif how == "sidecar_dev_zero":
        side.unlink()
        side.symlink_to("/dev/zero")
    elif how == "directory":
        entry.unlink()
        entry.mkdir()
    elif how == "disk_full":
        entry.unlink()
        side.unlink()
    elif how != "swap_after_check":
        raise ValueError(f"unknown attack {how!r}")


def _build_past_a_file_size_limit(cs, limit: int) -> Optional[str]:
    """Compile ``cs`` under a file size limit of ``limit`` bytes (a full disk's errors,
    in this process: its writes fail with EFBIG, a compiler it starts dies of SIGXFSZ):
    None where that is a BuildError naming the cache directory and leaves no build
    directory; else what happened."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        cuda_emu.compile_emu_library(cs)
        why = f"no BuildError under a file size limit of {limit} bytes"
    except tc.BuildError as e:
        why = None if "cannot write the CUDA emulation library's build files" in str(e) \
            else f"another BuildError: {str(e)[:300]}"
    except OSError as e:
        why = f"{type(e).__name__}: {e}"
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        cuda_emu._LIBS = {}
    left = [p.name for p in cuda_emu.cache_dir().iterdir() if p.name.startswith("build-")]
    if why is None and left:
        why = f"build directories left behind: {left}"
    return why


def run_attack(how: str, n: int = 100, threads: int = 64, k: int = 3,
               cut: int = 50) -> Tuple[str, str]:
    """Attack the entry of ``C = A * 2 + k`` (``how``, one of :data:`ATTACKS`), then
    compile and call it, in a cache of its own: ``(kind, detail)``, kind ``"ok"``,
    ``"refused"`` (the directory's BuildError) or ``"mismatch"`` (a finding, said in
    ``detail``).  Other exceptions propagate (the caller's crash)."""

    cs = _kernel(n, threads, k)
    other = _kernel(n, threads, k + 1) if how == "other_entry" else None
    key = cuda_emu._library_key(cs)[0]
    saved_env, saved_libs, saved_check = (os.environ.get("TECOMP_CACHE_DIR"), cuda_emu._LIBS,
                                          cuda_emu.entry_key)
    with tempfile.TemporaryDirectory(prefix="tecomp-edge-emu-") as tmp:
        d = Path(tmp)
        marker = d / "constructor-ran"
        try:
            os.environ["TECOMP_CACHE_DIR"] = str(d / "cache")
            cuda_emu._LIBS = {}
            cuda_emu.compile_emu_library(cs, load=False)
            entry = cuda_emu.cache_dir() / f"{key}.so"
            _attack(how, entry, d, marker, cut, other)
            if how == "swap_after_check":
                planted = planted_library(d, marker)
                swapped = []

                def check_then_swap(data, where="the CUDA emulation library"):
                    got = saved_check(data, where)
                    if not swapped:     # the race: renamed onto the entry right after
                        os.replace(planted, entry)
                        write_sidecar(entry)
                        swapped.append(True)
                    return got

                cuda_emu.entry_key = check_then_swap
            cuda_emu._LIBS = {}
            if how == "disk_full":
                why = _build_past_a_file_size_limit(cs, 4096 + cut * 64)
                if why is not None:
                    return "mismatch", f"the emulation library built on a full disk: {why}"
            try:
                mod = cuda_emu.CudaEmuModule(cs, cuda_emu.compile_emu_library(cs))
            except tc.BuildError as e:
                if how == "directory" and "cannot write the CUDA emulation cache entry" in str(e):
                    return "refused", str(e).splitlines()[0][:300]
                raise
            finally:
                cuda_emu.entry_key = saved_check
            a = np.random.default_rng(n).standard_normal(n).astype("float32")
            want = a * np.float32(2) + np.float32(k)
            problems = []
            # twice: as attacked, then from the cache as the first call left it (a fresh
            # process's view; after swap_after_check the entry holds the planted file)
            for round_ in ("attacked", "again"):
                if round_ == "again":
                    cuda_emu._LIBS = {}
                    mod = cuda_emu.CudaEmuModule(cs, cuda_emu.compile_emu_library(cs))
                c = np.zeros(n, "float32")
                mod(a, c)
                if not np.array_equal(c, want):
                    problems.append(f"{int((c != want).sum())} of {n} outputs wrong ({round_})")
            if marker.exists():
                problems.append("the static constructor of a library of another key ran")
            if how == "directory":
                problems.append("a directory in the entry's place: no BuildError")
            elif entry.is_symlink() or not entry.is_file() or \
                    cuda_emu.entry_key(entry.read_bytes()) != key:
                problems.append("the entry is not the kernel's library afterwards")
            if problems:
                return "mismatch", f"the emulation cache's entry attacked ({how}): " + \
                    "; ".join(problems)
            return "ok", ""
        finally:
            cuda_emu.entry_key = saved_check
            cuda_emu._LIBS = saved_libs
            if saved_env is None:
                os.environ.pop("TECOMP_CACHE_DIR", None)
            else:
                os.environ["TECOMP_CACHE_DIR"] = saved_env
