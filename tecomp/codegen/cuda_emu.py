"""The CUDA emulation mode (target ``cuda-emu``): tecomp's CUDA C, run on the CPU.

The *same* text that :func:`tecomp.codegen.cuda.codegen_cuda` produces for nvcc is
compiled by a C++17 compiler (``g++``, or ``$CXX``) together with
``cuda_emu_header.h``, which maps the CUDA vocabulary onto CPU threads; that header's
comment documents the mapping.  In short:

* blocks run one at a time, in order; ``__shared__`` arrays are function-scope
  ``static`` arrays, which is exactly one copy per block when one block runs at a time;
* the threads of a block run in one of four modes, chosen per module or per call
  (``mode=``) or by ``$TECOMP_CUDA_EMU_MODE``:

  - ``"threads"`` (default): one OS thread per CUDA thread, ``__syncthreads()`` a real
    barrier.  Races are real, so a missing barrier can give a wrong answer — sometimes.
  - ``"serial"`` / ``"reverse"``: deterministic; each CUDA thread is a fiber and they run
    one at a time from barrier to barrier, in thread order or in reverse.  A missing
    barrier between a write and another thread's read gives a wrong answer every time
    (in one of the two orders at least): the way to test that a schedule's barriers
    are where they must be.
  - ``"last_block_first"``: ``"serial"``'s threads, the blocks run last first:
    ``atomicAdd``s of several blocks into one element come in the other order (their
    float sum rounds differently, as on a GPU from run to run).

* the warp-wide PTX operations of the ``cuda.mma_*`` intrinsics (``ldmatrix``,
  ``mma.sync``) run lane by lane: each thread holds its own lane's registers and the 32
  lanes of a warp meet at each operation to exchange them (in every mode);
* a barrier not reached by all threads of a block, a warp-wide operation not reached by
  all lanes of a warp, and a failed run-time check (``__trap()``), raise errors instead
  of hanging or aborting the process.

Calls take numpy arrays and check them exactly like the CPU runtime, with the same
messages (:class:`tecomp.runtime.argcheck.ArgChecker`).  Non-contiguous numpy arrays are
copied to contiguous ones for the call, and the copies of the buffers the function
writes are copied back afterwards.  Workspaces (global allocations) are allocated per
call.  Compiled libraries are cached on disk under ``$TECOMP_CACHE_DIR`` (default
``$XDG_CACHE_HOME/tecomp``, else ``~/.cache/tecomp``) in ``cuda_emu/`` (created ``0700``; one that other users may write
to is refused), by a hash of everything that goes into them;
files are written atomically (a temporary file, then ``os.replace``).  An entry is
used only when it is a regular file (a link there is not followed) whose bytes -- read
once, through one descriptor -- match its sha256 sidecar and name its key in their
section :data:`KEY_SECTION`; dlopen then maps that very file (through the descriptor),
so a library of another key copied over the entry is compiled again before any of it
runs, and one renamed onto the entry after the check is not the one loaded.  An entry
that fails those checks or fails to load is rebuilt.  With GCC the header is compiled once per
compiler, flags and header into a precompiled header there too (``header-<hash>/``,
:data:`PRECOMPILED_HEADER`), which every build loads instead of parsing the header.
"""
from __future__ import annotations

import ctypes
import errno
import hashlib
import logging
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Dict, Optional, Sequence

import numpy as np

from ..errors import ArgumentError, BoundsError, BuildError, LoadError, RuntimeUnavailableError
from ..ir import dtype as _dt
from ..ir.expr import Buffer
from ..ir.stmt import PrimFunc
from ..runtime.argcheck import eval_host_expr
from ..runtime.cuda_kernels import WORKSPACE_ALIGN, CudaSource, KernelInfo, workspace_elements
from .cuda import (MAX_BLOCK_DIMS, MAX_GRID_DIMS, MAX_THREADS_PER_BLOCK, CudaRenderer, codegen_cuda,
                   param_ctype)
from ..runtime.elf import read_sections
from ..runtime.libfiles import (FileRefused, cache_root, digest_bytes, dlopen_fd, open_regular,
                                private_dir, read_fd, read_sidecar, tool_identity, write_sidecar)
from ..runtime.cuda import CudaSourceModule, stream_handle
from ..lower.tma_pipeline import map_spec
from ..target import tma
from ..threads import choice_from_env, number_from_env
from .cuda import TENSOR_MAP

ABI_VERSION = 3
MODES = {"threads": 0, "serial": 1, "reverse": 2, "last_block_first": 3}
HEADER_NAME = "tecomp_cuda_emu.h"
CXX_FLAGS = ("-std=c++17", "-O1", "-shared", "-fPIC", "-fwrapv", "-fno-strict-aliasing",
             "-pthread", "-w")
#: compile the header once per compiler into a precompiled header (GCC's ``.gch``, kept in
#: the cache directory beside the libraries) that every library's build then loads instead
#: of parsing the header's C++ again (about 0.2 of the 0.55 CPU seconds of a small kernel's
#: build); False: every build parses the header (the A/B switch; the libraries are the same)
PRECOMPILED_HEADER = True
#: the stack of an emulated thread beyond its kernel's per-thread arrays (KiB; the
#: environment variable TECOMP_CUDA_EMU_STACK_KIB sets another)
DEFAULT_STACK_KIB = 256

#: the most ``$TECOMP_CUDA_EMU_STACK_KIB`` may ask for (1 GiB a thread)
MAX_STACK_KIB = 1 << 20

_log = logging.getLogger(__name__)

_CTYPES_SCALAR = {
    "int8": ctypes.c_int8, "int16": ctypes.c_int16, "int32": ctypes.c_int32,
    "int64": ctypes.c_int64, "uint8": ctypes.c_uint8, "bool": ctypes.c_bool,
    "float32": ctypes.c_float, "float16": ctypes.c_float, "bfloat16": ctypes.c_float,
    "float64": ctypes.c_double,
}


def header_text() -> str:
    """The emulation header (``cuda_emu_header.h`` beside this module)."""
    return (Path(__file__).with_name("cuda_emu_header.h")).read_text()


def cache_dir() -> Path:
    return cache_root() / "cuda_emu"


def default_mode() -> str:
    return choice_from_env("TECOMP_CUDA_EMU_MODE", tuple(MODES), "threads",
                           "how the CUDA emulation runs a block's threads", ArgumentError)


def _check_mode(mode: Optional[str]) -> str:
    if mode is None:
        return default_mode()
    if mode not in MODES:
        raise ArgumentError(f"unknown CUDA emulation mode {mode!r}; use one of {', '.join(MODES)}")
    return mode


def find_cxx() -> str:
    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("clang++")
    if not cxx or not shutil.which(cxx):
        raise RuntimeUnavailableError(
            "no C++ compiler found (g++ on PATH, or $CXX): the cuda-emu target compiles the "
            "generated CUDA C for the CPU with a C++17 compiler")
    return cxx


def launcher_source(cs: CudaSource) -> str:
    """C++ that includes the kernels and exports one launch function per kernel."""
    lines = [f'#include "{HEADER_NAME}"', '#include "kernel.cu"', ""]
    for k, kern in enumerate(cs.kernels):
        args = []
        for i, p in enumerate(kern.params):
            if p.is_buffer:
                args.append(f"({param_ctype(p).replace(' __restrict__', '')})a[{i}]")
            elif p.dtype == TENSOR_MAP:
                args.append(f"*(const tc_tensor_map*)a[{i}]")
            else:
                args.append(f"*({_scalar_ctype(p)}*)a[{i}]")
        lines.append(f"static void tecomp_entry_{k}(void** a) {{ {kern.name}({', '.join(args)}); }}")
        lines.append(
            f'extern "C" int tecomp_emu_launch_{k}(void** args, const long long* dims, int mode, '
            f"long long stack, char* err, int errlen) {{\n"
            f"  return tecomp_emu::launch(&tecomp_entry_{k}, args, dims, mode, "
            f"{1 if kern.has_barrier else 0}, stack, err, errlen);\n}}")
    lines.append(f'extern "C" int tecomp_emu_abi_version(void) {{ return {ABI_VERSION}; }}')
    lines.append('extern "C" void tecomp_emu_smem_stats(long long* out, int reset) {\n'
                 '  pthread_mutex_lock(tecomp_emu::smem_stats_lock());\n'
                 '  out[0] = tecomp_emu::smem_stats().phases;\n'
                 '  out[1] = tecomp_emu::smem_stats().wavefronts;\n'
                 '  out[2] = tecomp_emu::smem_stats().wgmma_phases;\n'
                 '  out[3] = tecomp_emu::smem_stats().wgmma_wavefronts;\n'
                 '  out[4] = tecomp_emu::smem_stats().cp_phases;\n'
                 '  out[5] = tecomp_emu::smem_stats().cp_wavefronts;\n'
                 '  if (reset) tecomp_emu::smem_stats_reset();\n'
                 '  pthread_mutex_unlock(tecomp_emu::smem_stats_lock());\n}')
    return "\n".join(lines) + "\n"


def _scalar_ctype(p) -> str:
    return CudaRenderer.TYPES[_dt.compute_dtype(p.dtype)]  # a storage float is a float


class EmuLibrary:
    """A compiled emulation library for one :class:`CudaSource`."""

    def __init__(self, cs: CudaSource, path: str, lib: ctypes.CDLL):
        self.source = cs
        self.path = path
        self.lib = lib
        self._launchers = []
        for k in range(len(cs.kernels)):
            fn = getattr(lib, f"tecomp_emu_launch_{k}")
            fn.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_longlong),
                           ctypes.c_int, ctypes.c_longlong, ctypes.c_char_p, ctypes.c_int]
            fn.restype = ctypes.c_int
            self._launchers.append(fn)

    def smem_stats(self, reset: bool = False) -> Dict[str, int]:
        """The shared-memory accounting of this library's warp-wide loads since it was
        loaded (or last reset): see :meth:`CudaEmuModule.shared_memory_stats`."""
        out = (ctypes.c_longlong * 6)()
        fn = self.lib.tecomp_emu_smem_stats
        fn.argtypes = [ctypes.POINTER(ctypes.c_longlong), ctypes.c_int]
        fn.restype = None
        fn(out, 1 if reset else 0)
        return {"ldmatrix_phases": out[0], "ldmatrix_wavefronts": out[1],
                "ldmatrix_bank_conflicts": out[1] - out[0],
                "wgmma_phases": out[2], "wgmma_wavefronts": out[3],
                "wgmma_bank_conflicts": out[3] - out[2],
                "cp_async_phases": out[4], "cp_async_wavefronts": out[5],
                "cp_async_bank_conflicts": out[5] - out[4]}

    def launch(self, k: int, args: Sequence, grid, block, mode: str = "threads",
               stack_kib: Optional[int] = None) -> None:
        """Run kernel ``k``: ``args`` are ints (buffer addresses) for buffer parameters and
        Python numbers for scalars, in the kernel's parameter order."""
        kern = self.source.kernels[k]
        if len(args) != len(kern.params):
            raise ArgumentError(f"{kern.name} expects {len(kern.params)} arguments, got {len(args)}")
        keep = []
        ptrs = (ctypes.c_void_p * max(1, len(args)))()
        for i, (p, a) in enumerate(zip(kern.params, args)):
            if p.is_buffer:
                ptrs[i] = int(a)
            elif p.dtype == TENSOR_MAP:   # a map's 128 bytes (tma.emu_bytes)
                box = ctypes.create_string_buffer(bytes(a), tma.MAP_BYTES)
                keep.append(box)
                ptrs[i] = ctypes.addressof(box)
            else:
                box = _CTYPES_SCALAR[p.dtype](a)
                keep.append(box)
                ptrs[i] = ctypes.addressof(box)
        dims = (ctypes.c_longlong * 6)(*grid, *block)
        err = ctypes.create_string_buffer(2048)
        rc = self._launchers[k](ptrs, dims, MODES[mode], thread_stack_bytes(kern, stack_kib),
                                err, len(err))
        if rc != 0:
            msg = err.value.decode("utf-8", "replace")
            where = f"{kern.name} (stage {kern.stage})"
            if msg.startswith("the kernel trapped"):
                raise BoundsError(f"{where}: {msg}")
            if msg.startswith("could not start"):
                raise RuntimeUnavailableError(f"{where}: {msg}")
            raise BuildError(f"{where}: {msg}")


def thread_stack_bytes(kern: KernelInfo, stack_kib: Optional[int] = None) -> int:
    """The stack each emulated thread of ``kern`` gets (an OS thread's, or a fiber's):
    its per-thread arrays (``local`` arrays and tensor-core fragments, which C puts on the
    stack: a 256 KiB local array overflowed the 256 KiB every thread had) and
    ``stack_kib`` KiB more (default :data:`DEFAULT_STACK_KIB`, or
    ``$TECOMP_CUDA_EMU_STACK_KIB``) for the rest of its frames; whole pages."""
    if stack_kib is None:
        # (at most 1 GiB a thread: 10**11 KiB was taken, and every launch failed with
        # "could not start 32 threads ... use the 'serial' emulation mode")
        stack_kib = number_from_env("TECOMP_CUDA_EMU_STACK_KIB", DEFAULT_STACK_KIB, low=0,
                                    high=MAX_STACK_KIB, integer=True, error=ArgumentError,
                                    use="the KiB of stack each emulated CUDA thread gets "
                                        "beyond its kernel's own arrays")
    nbytes = max(int(stack_kib), 64) * 1024 + kern.local_bytes
    return -(-nbytes // 4096) * 4096


_LIBS: Dict[str, EmuLibrary] = {}
_LIBS_LOCK = threading.Lock()
_KEY_LOCKS: Dict[str, threading.Lock] = {}


def _library_key(cs: CudaSource):
    cxx = find_cxx()
    header = header_text()
    launcher = launcher_source(cs)
    h = hashlib.sha256()
    for part in (str(ABI_VERSION), tool_identity(cxx), " ".join(CXX_FLAGS), header, launcher,
                 cs.source):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:32], cxx, header, launcher


def compile_emu_library(cs: CudaSource, load: bool = True) -> Optional[EmuLibrary]:
    """Compile (or load from the cache) the emulation library of ``cs``.  ``load=False``
    only makes sure the cache holds it (a search compiles its candidates in parallel so,
    for the process that measures them to load): None."""
    key, cxx, header, launcher = _library_key(cs)
    with _LIBS_LOCK:
        lib = _LIBS.get(key)
        if lib is not None:
            return lib if load else None
        key_lock = _KEY_LOCKS.setdefault(key, threading.Lock())
    with key_lock:  # one build per library; different libraries build in parallel
        lib = _LIBS.get(key)
        if lib is not None:
            return lib if load else None
        d = private_dir(cache_dir(), "the CUDA emulation cache", BuildError)
        final = d / f"{key}.so"
        # the entry is used only when it is what was written for this key (its sidecar,
        # and the key in its bytes: _open_entry); anything else is compiled again
        loaded = _open_entry(final, key, load)
        if loaded is None:
            _log.debug("cuda-emu cache miss: compiling %s", final)
            t0 = time.perf_counter()
            loaded = _build(cxx, header, launcher, cs.source, d, final, load, key)
            _log.debug("cuda-emu compiled %s in %.2f s", final.name, time.perf_counter() - t0)
        else:
            _log.debug("cuda-emu cache hit: %s", final)
        if not load:
            return None
        lib = EmuLibrary(cs, str(final), loaded)
        _LIBS[key] = lib
        return lib


#: the section of an emulation library that holds its key (``tecomp_emu_key``), read
#: from the file's bytes before the file is handed to dlopen
KEY_SECTION = ".tecomp_emu_key"
#: a cache entry larger than this is not one (read no further)
MAX_ENTRY_BYTES = 1 << 30


def entry_key(data: bytes, where: str = "the CUDA emulation library") -> Optional[str]:
    """The key the emulation library ``data`` (its bytes) was built for: the text of its
    :data:`KEY_SECTION` up to the first NUL; None for a file without one (not an ELF
    file, truncated, built before the section, not built by tecomp)."""
    try:
        sec = read_sections(data, where).get(KEY_SECTION)
    except LoadError:
        return None
    if sec is None:
        return None
    return sec.split(b"\0", 1)[0].decode("ascii", "replace")


def _open_entry(final: Path, key: str, load: bool):
    """The cache entry ``final`` if it is the library of ``key``, loaded (``load``) or
    True; None for a miss.

    It must be a regular file (a link is not followed: the rebuild replaces the link);
    its bytes are read once, through one descriptor, and must match its sidecar and
    name ``key`` in :data:`KEY_SECTION`.  A library of another key copied over the
    entry with a sidecar of its own is a miss *before* dlopen (its static constructors
    would run on load), and the file dlopen maps is the one that was read, through that
    descriptor (:func:`~tecomp.runtime.libfiles.dlopen_fd`), whatever has been renamed
    onto the entry's path since."""
    try:
        fd = open_regular(final, MAX_ENTRY_BYTES, follow=False)
    except (OSError, FileRefused):
        return None
    try:
        try:
            data = read_fd(fd, MAX_ENTRY_BYTES)
        except FileRefused:
            return None
        if read_sidecar(final) != digest_bytes(data) or entry_key(data, str(final)) != key:
            return None
        if not load:
            return True
        return _dlopen_checked(fd, str(final), key)
    finally:
        os.close(fd)


def _dlopen_checked(fd: int, path: str, key: str) -> Optional[ctypes.CDLL]:
    """The library the file ``fd`` reads, loaded (:func:`dlopen_fd`), if its code is of
    this ABI and the copy the loader gave names ``key``; None otherwise."""
    try:
        lib = dlopen_fd(fd, path)
        fn = lib.tecomp_emu_abi_version
        fn.restype = ctypes.c_int
        if fn() != ABI_VERSION:
            return None
        if (ctypes.c_char * (len(key) + 1)).in_dll(lib, "tecomp_emu_key").value != \
                key.encode():
            return None
        return lib
    except (OSError, AttributeError, ValueError):
        return None


_PCH_FAILED: Dict[str, bool] = {}
_PCH_LOCK = threading.Lock()


def _gcc_like(cxx: str) -> bool:
    """Whether ``cxx`` is GCC (whose ``#include`` picks up a ``.gch`` beside the header;
    clang's precompiled headers work otherwise and are not used)."""
    ident = tool_identity(cxx)
    return "clang" not in ident.lower() and ("GCC" in ident or "g++" in ident)


def _pch_dir(cxx: str, header: str, d: Path) -> Optional[str]:
    """A directory holding the header and its precompiled form for ``cxx`` and
    :data:`CXX_FLAGS` (built once and kept in the cache directory ``d``, keyed by the
    compiler, the flags and the header), or None: not GCC, switched off, or the build of
    the precompiled header failed (each library then parses the header itself).  A
    precompiled header GCC finds invalid is ignored by it in favour of the header beside
    it, so this can cost time, never change a library."""
    if not PRECOMPILED_HEADER or not _gcc_like(cxx):
        return None
    h = hashlib.sha256()
    for part in (str(ABI_VERSION), tool_identity(cxx), " ".join(CXX_FLAGS), header):
        h.update(part.encode())
        h.update(b"\0")
    final = d / f"header-{h.hexdigest()[:32]}"
    gch = final / (HEADER_NAME + ".gch")
    with _PCH_LOCK:
        if _PCH_FAILED.get(str(final)):
            return None
        if gch.is_file():    # asked each time: a test's cache directory comes and goes
            return str(final)
        tmp = None
        try:
            tmp = tempfile.mkdtemp(prefix="build-header-", dir=str(d))
            with open(os.path.join(tmp, HEADER_NAME), "w") as f:
                f.write(header)
            flags = [f for f in CXX_FLAGS if f != "-shared"]
            proc = subprocess.run([cxx, *flags, "-x", "c++-header", "-o",
                                   os.path.join(tmp, HEADER_NAME + ".gch"),
                                   os.path.join(tmp, HEADER_NAME)],
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                _log.debug("cuda-emu: no precompiled header (%s)", proc.stderr[:2000])
                _PCH_FAILED[str(final)] = True
                return None
            try:
                os.rename(tmp, final)   # atomic; another process's may be there first
                tmp = None
            except OSError:
                pass
            return str(final) if gch.is_file() else None
        except OSError as e:     # (a full disk: the library's own build says so)
            _log.debug("cuda-emu: no precompiled header (%s)", e)
            return None
        finally:
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)


#: what a compiler prints when it cannot write its output (a full disk, a quota, a limit)
_WRITE_FAILURES = ("No space left on device", "File too large", "Disk quota exceeded",
                   "File size limit exceeded")


def _signal_name(n: int) -> str:
    try:
        return f"{n} ({signal.Signals(n).name})"
    except ValueError:
        return str(n)


def _cannot_write(d: Path, why: str) -> BuildError:
    return BuildError(f"cannot write the CUDA emulation library's build files in {d} "
                      f"({why}): free space there (or raise the quota or the process's file "
                      f"size limit), or point TECOMP_CACHE_DIR at another directory")


def _build(cxx: str, header: str, launcher: str, source: str, d: Path, final: Path,
           load: bool = True, key: str = "") -> Optional[ctypes.CDLL]:
    pch = _pch_dir(cxx, header, d)
    try:
        tmp = tempfile.mkdtemp(prefix="build-", dir=str(d))
    except OSError as e:
        raise _cannot_write(d, e.strerror or str(e)) from None
    try:
        return _build_in(cxx, header, launcher, source, d, tmp, pch, final, load, key)
    except OSError as e:
        if e.errno not in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
            raise
        raise _cannot_write(d, e.strerror) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _build_in(cxx: str, header: str, launcher: str, source: str, d: Path, tmp: str,
              pch: Optional[str], final: Path, load: bool, key: str) -> Optional[ctypes.CDLL]:
    """:func:`_build` in its build directory ``tmp`` (in the cache directory ``d``)."""
    files = {"cuda_fp16.h": f'#include "{HEADER_NAME}"\n',
             "mma.h": f'#include "{HEADER_NAME}"\n',
             "cuda_bf16.h": f'#include "{HEADER_NAME}"\n',
             "kernel.cu": source,
             "launcher.cc": f'{launcher}\nextern "C" __attribute__((used, section('
                            f'"{KEY_SECTION}"))) const char tecomp_emu_key[] = "{key}";\n'}
    if pch is None:
        files[HEADER_NAME] = header
    # (with the precompiled header the build directory has no copy of the header: a
    # quoted #include looks beside launcher.cc first, and the header found there would
    # be parsed instead of the .gch of the directory named by -I)
    for name, text in files.items():
        with open(os.path.join(tmp, name), "w") as f:
            f.write(text)
    out = os.path.join(tmp, "lib.so")
    inc = ["-I", pch] if pch is not None else []
    cmd = [cxx, *CXX_FLAGS, *inc, "-I", tmp, "-o", out, os.path.join(tmp, "launcher.cc")]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    err = (proc.stderr or proc.stdout).strip()
    if proc.returncode < 0 or any(w in err for w in _WRITE_FAILURES):
        # (killed: SIGXFSZ past a file size limit, SIGKILL out of memory)
        raise _cannot_write(d, next((w for w in _WRITE_FAILURES if w in err),
                                    f"the compiler {cxx} was ended by signal "
                                    f"{_signal_name(-proc.returncode)}"))
    if proc.returncode != 0:
        raise BuildError(
            "compiling the CUDA emulation library failed (this is likely a tecomp bug; "
            f"please report it with the generated source):\n{' '.join(cmd)}\n{err[:8000]}")
    # the file is read once: the sidecar seals the bytes that were loaded
    fd = open_regular(out, MAX_ENTRY_BYTES, follow=False)
    try:
        digest = digest_bytes(read_fd(fd, MAX_ENTRY_BYTES))
        lib = _dlopen_checked(fd, out, key) if load else None
    finally:
        os.close(fd)
    if load and lib is None:
        raise BuildError(f"the freshly built CUDA emulation library {out} does not load "
                         f"(this is likely a tecomp bug; please report it)")
    try:
        os.replace(out, final)  # atomic: other processes see the old file or the new one
        # the sidecar is written last: a reader that sees a new library with an old (or
        # no) sidecar rebuilds, which is only wasted work
        write_sidecar(final, digest)
    except OSError as e:
        raise BuildError(
            f"cannot write the CUDA emulation cache entry {final} or its sidecar "
            f"({e.strerror}): remove what is in their place, or point TECOMP_CACHE_DIR "
            f"at another directory") from None
    return lib


# ---------------------------------------------------------------------------------
# the module


class CudaEmuModule(CudaSourceModule):
    """A PrimFunc compiled for the CUDA emulation: call it with numpy arrays.

    ``mode`` is the default thread mode of its calls (see the module doc).
    """

    def __init__(self, cs: CudaSource, lib: EmuLibrary, mode: Optional[str] = None):
        super().__init__(cs, device=False)
        self.lib = lib
        self.mode = _check_mode(mode)

    def shared_memory_stats(self, reset: bool = False) -> Dict[str, int]:
        """How the warp-wide shared-memory loads of this module's kernels met the 32 banks,
        over the calls since the library was loaded or last ``reset``:
        ``ldmatrix_phases`` (8 x 8 matrices loaded: 4 per ``ldmatrix.x4``),
        ``ldmatrix_wavefronts`` (the bank accesses they took: a bank serves one 4-byte word
        per wavefront) and ``ldmatrix_bank_conflicts`` (the wavefronts beyond one per
        phase: 0 when the tiles' layout, padded or swizzled, is conflict-free).  Counted
        once per warp.  ``wgmma_phases`` / ``_wavefronts`` / ``_bank_conflicts``: the same
        for wgmma's operand reads, each 8 x 8 core matrix of A and B a phase, once per
        wgmma of a warpgroup, its rows where the descriptor (layout, swizzle) puts them.
        ``cp_async_phases`` / ``_wavefronts`` / ``_bank_conflicts``: the same for the
        writes of ``cp.async`` into shared memory (a double-buffered tile's copies), a
        warp's n-th copies together, each 128 bytes of lanes a phase (8 lanes of 16
        bytes); plain stores are not counted.  The library is shared by every module built from the same source,
        so the counts are those of all their calls."""
        return self.lib.smem_stats(reset)

    def get_source(self, fmt: str = "cuda") -> str:
        """``"cuda"``: the CUDA C; ``"emu"``: the C++ launcher compiled around it."""
        if fmt in ("cuda", "cu", "c"):
            return self.cuda_source.source
        if fmt == "emu":
            return launcher_source(self.cuda_source)
        raise ArgumentError(f"unknown source format {fmt!r}; use 'cuda' or 'emu'")

    def __call__(self, *args, mode: Optional[str] = None, stream=None) -> None:
        """Run the kernels on the CPU.  ``stream`` is checked as a ``cuda`` module's is
        and otherwise ignored: the emulation runs each call to its end."""
        mode = _check_mode(mode) if mode is not None else self.mode
        if stream is not None:
            stream_handle(stream)
        cs, func = self.cuda_source, self.func
        given = args
        args, env, _ = self._checked(args)
        try:
            self._run(args, env, mode)
        finally:
            self._checker.mark_written(given)  # torch's version counters of the outputs

    def _run(self, args, env, mode: str) -> None:
        cs, func = self.cuda_source, self.func
        # the memory each buffer lives in for the call
        memory: Dict[Buffer, np.ndarray] = {}
        copy_back = []
        for p, a in zip(func.params, args):
            if not isinstance(p, Buffer):
                continue
            if p.strides is None and not (a.flags.c_contiguous and a.flags.aligned):
                c = np.ascontiguousarray(a)  # documented: emulation copies non-contiguous arrays
                memory[p] = c
                if p in cs.written:
                    copy_back.append((a, c))
            else:
                memory[p] = a
        for w in cs.workspaces:
            memory[w] = _aligned_empty(int(eval_host_expr(workspace_elements(w), env)),
                                       np.dtype(w.dtype))
        for k, kern, grid, block in self._launches(env):
            _check_launch(kern, grid, block)
            kargs = [memory[p.obj].ctypes.data if p.is_buffer else
                     _emu_map(p.obj, memory[p.obj.src]) if p.dtype == TENSOR_MAP else env[p.obj]
                     for p in kern.params]
            self.lib.launch(k, kargs, grid, block, mode)
        for orig, c in copy_back:
            orig[...] = c

    def __repr__(self):
        return f"<CudaEmuModule {self.func.name}: {len(self.kernels)} kernel(s), mode={self.mode}>"


def _emu_map(box, array: np.ndarray) -> bytes:
    """The emulation's tensor map of ``box`` over ``array`` (its run-time shape and address;
    C-contiguous: the emulation copies other arrays first)."""
    return tma.emu_bytes(map_spec(box, array.shape), array.ctypes.data)


def _aligned_empty(n: int, dtype: np.dtype) -> np.ndarray:
    """An uninitialised array of ``n`` elements whose first is ``WORKSPACE_ALIGN``-byte
    aligned (as the device's workspaces are: the generated code may assume it)."""
    raw = np.empty(n * dtype.itemsize + WORKSPACE_ALIGN, np.uint8)
    skip = -raw.ctypes.data % WORKSPACE_ALIGN
    return raw[skip:skip + n * dtype.itemsize].view(dtype)


def _check_launch(kern: KernelInfo, grid, block) -> None:
    dims = "xyz"
    for i in range(3):
        if block[i] > MAX_BLOCK_DIMS[i]:
            raise ArgumentError(f"{kern.name} (stage {kern.stage}): with these arguments "
                                f"threadIdx.{dims[i]} has extent {block[i]}, more than the "
                                f"{MAX_BLOCK_DIMS[i]} a CUDA block allows")
        if grid[i] > MAX_GRID_DIMS[i]:
            raise ArgumentError(f"{kern.name} (stage {kern.stage}): with these arguments "
                                f"blockIdx.{dims[i]} has extent {grid[i]}, more than the "
                                f"{MAX_GRID_DIMS[i]} a CUDA grid allows")
    n = block[0] * block[1] * block[2]
    if n > MAX_THREADS_PER_BLOCK:
        raise ArgumentError(f"{kern.name} (stage {kern.stage}): with these arguments a block has "
                            f"{n} threads, more than the {MAX_THREADS_PER_BLOCK} CUDA allows")


def build_cuda_emu(func: PrimFunc, mode: Optional[str] = None) -> CudaEmuModule:
    """Generate CUDA C for ``func`` and compile it for the CPU emulation."""
    cs = codegen_cuda(func)
    return CudaEmuModule(cs, compile_emu_library(cs), mode)
