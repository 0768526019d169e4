"""``tc.load_module(path)``: a kernel ``Module.export_library`` wrote, loaded and callable.

    f = tc.build(s, [A, B, C]); f.export_library("kernels.so")   # where tecomp compiles
    g = tc.load_module("kernels.so")                               # anywhere: numpy + tecomp
    g(a, b, c)                                                     # as f(a, b, c)

The module it returns is the runtime's own :class:`~tecomp.runtime.llvm.Module`,
made from the library's metadata: the same argument checks and messages
(:mod:`tecomp.runtime.argcheck`), the same variants (views and inputs passed in place
run as they do on ``f``: the library holds every variant and the metadata which inputs
may be passed in place of which outputs), the same BoundsError and
KernelMemoryError messages.  Loading imports no llvmlite.

Before anything of the library is mapped, loading reads the file (once, as data) and
refuses it with a :class:`~tecomp.errors.LoadError` naming the file and the fix when it

1. is missing, not a regular file (a FIFO or a device is never read), not ELF, for
   another machine, truncated or damaged (:mod:`tecomp.runtime.elf`);
2. has no tecomp metadata (a foreign library), or constructors, destructors or IFUNC
   resolvers, or needs libraries other than the C runtime's, names filter libraries or
   searches directories for them, or has dynamic tags or an executable stack a plain
   library does not (tecomp's libraries do none of these, so that loading one runs
   none of its code and loads no other library);
3. does not match its sha256 sidecar ``<path>.sha256`` (written by ``export_library``:
   :mod:`tecomp.runtime.libfiles`; a small regular file, read bounded), or has none --
   unless ``verify=False``, the escape hatch for a library you built yourself and whose
   sidecar is gone;
4. has metadata of another format version, or metadata that is damaged
   (:mod:`tecomp.runtime.aot_format` reads every field and rejects what it does not
   expect), or metadata that is not the document its code was compiled for (the sha256
   the library's code records beside it: changed after export, the sidecar written
   anew), or an argument layout this tecomp would not derive from its parameters;
5. needs a CPU feature this machine lacks (read from /proc/cpuinfo): it would die of
   SIGILL on its first call;
6. was exported by a Python whose numpy array objects keep their data pointer elsewhere
   (its fast entries read it there).

Only then is it loaded (``dlopen``, through the descriptor that was read and hashed, so
a file replaced meanwhile is not the one loaded; the loaded copy's metadata is compared
with what was checked), its thread pool joins those ``tc.set_num_threads`` controls,
and a Module is made.  Loading the same file twice gives two Modules over one loaded
copy; a library exported again to the same path is loaded anew.

Integrity is not trust: a library runs with the rights of the process, so load only
libraries you or someone you trust exported (docs/runtime.md, "Trust model").
"""
from __future__ import annotations

import ctypes
import logging
import os
import threading
import time
from typing import Dict, Optional, Tuple, Union

from . import aot_format as _fmt
from . import llvm as _rt
from .. import threads as _threads
from .libfiles import (
    FileRefused, digest_bytes, dlopen_fd, file_path, open_regular, read_fd, sidecar_digest, sidecar_path,
)
from .cuda_library import CudaLibraryModule
from .signature import Signature
from ..errors import BuildError, LoadError, TecompError
from ..ir.names import display
from ..ir.stmt import PrimFunc, SeqStmt
from .elf import check_plain, inspect_library

__all__ = ["load_module", "MAX_LIBRARY_BYTES"]

#: a file larger than this is not a kernel library (it is not read)
MAX_LIBRARY_BYTES = 1 << 30

_log = logging.getLogger(__name__)

_LOCK = threading.Lock()
#: dlopen handle -> the loaded library (its pool registered once)
_LOADED: Dict[int, ctypes.CDLL] = {}


def load_module(path: Union[str, os.PathLike], *,
                verify: bool = True) -> Union["_rt.Module", CudaLibraryModule]:
    """Load a library that ``Module.export_library`` wrote.

    Loading needs numpy and tecomp only (no llvmlite, no compiler); it checks the
    sidecar, the metadata and the CPU's features before any of the library's code runs.
    A GPU library (``export_library`` of a ``cuda`` module) gives a
    :class:`~tecomp.runtime.cuda_library.CudaLibraryModule`, which launches its kernels
    through the CUDA driver alone and takes device arrays.

    Parameters
    ----------
    path : str or os.PathLike
        The library (``kernels.so``); its ``kernels.so.sha256`` sidecar is checked.
    verify : bool, optional
        ``False`` skips only the sha256 sidecar (for a library you built yourself whose
        ``.sha256`` file is gone); every other check stays.

    Returns
    -------
    Module
        A module called like the one that was exported: the same checks, messages and
        results (a GPU library's module takes device arrays only).

    Raises
    ------
    LoadError
        For a library that is missing, truncated, not written by ``export_library``,
        whose sidecar is missing or does not match, written by an incompatible tecomp,
        or needing a CPU feature this machine lacks.  The message names the file.

    Examples
    --------
    >>> import os, tempfile
    >>> import numpy as np
    >>> import tecomp as tc
    >>> A = tc.placeholder((8,), name="A")
    >>> B = tc.compute((8,), lambda i: A[i] * 2.0, name="B")
    >>> f = tc.build(tc.create_schedule(B.op), [A, B])
    >>> path = os.path.join(tempfile.mkdtemp(), "double.so")
    >>> f.export_library(path)
    >>> g = tc.load_module(path)
    >>> b = np.empty(8, "float32"); g(np.ones(8, "float32"), b)
    >>> float(b[0])
    2.0
    """
    t0 = time.perf_counter()
    path = file_path(path, "load_module", LoadError)
    where = f"library '{display(path)}'"
    fd = _open(path, where)
    try:
        data = _read(fd, where)
        image = inspect_library(data, where, _fmt.SECTION)
        if image.section is None:
            raise LoadError(
                f"{where} is a shared library but not one tecomp exported (it has no "
                f"{_fmt.SECTION} section with tecomp's metadata): load libraries written by "
                f"Module.export_library")
        check_plain(image, where)
        if verify:
            _verify_sidecar(path, data, where)
        info = _fmt.parse_metadata(image.section.rstrip(b"\0"), where)
        _fmt.check_digest(image.sections, image.section.rstrip(b"\0"), where)
        if info.cuda is not None:
            return _gpu_library(info, image, path, where, t0)
        _check_cpu(info, where)
        _check_object_layout(info, where)
        func, sig = _signature(info, where)
        lib = _dlopen(fd, path, where, image.section)
    finally:
        os.close(fd)
    variants = _LibraryVariants(lib, info, where)
    code, build = variants.variant("contiguous", True)
    mod = _rt.Module(func, sig, variants, code, build, checks=info.checks,
                     compile_seconds=0.0, target=None)
    mod.prim_func = None            # the library holds machine code, not the loop IR
    return _loaded(mod, info, path, where, t0)


def _loaded(mod, info: "_fmt.LibraryInfo", path: str, where: str, t0: float):
    """``mod`` with what every loaded module tells: the file it was loaded from, its
    metadata (the JSON document, as read) and the seconds loading took."""
    mod.library_path = path
    mod.metadata = info.raw
    mod.load_seconds = time.perf_counter() - t0
    _log.debug("load_module %s: %s, in %.3f s", where, _fmt.library_description(info),
               mod.load_seconds)
    return mod


def _gpu_library(info: "_fmt.LibraryInfo", image, path: str, where: str,
                 t0: float) -> CudaLibraryModule:
    """The module of a GPU library (its metadata checked): nothing of it is mapped; its
    fatbin is handed to the CUDA driver at the first call."""
    _signature(info, where)
    fatbin = image.sections.get(_fmt.FATBIN_SECTION)
    if fatbin is None:
        raise LoadError(f"{where} is a GPU library without its GPU code (no "
                        f"{_fmt.FATBIN_SECTION} section): export it again")
    return _loaded(CudaLibraryModule(info, fatbin, where), info, path, where, t0)


# ---------------------------------------------------------------------------------------
# the file


def _open(path: str, where: str) -> int:
    """A read-only descriptor of the regular file ``path`` (a FIFO, a device or a
    directory is refused before anything is read from it)."""
    try:
        return open_regular(path, MAX_LIBRARY_BYTES)
    except FileNotFoundError:
        raise LoadError(f"{where} does not exist: give the path Module.export_library "
                        f"wrote") from None
    except FileRefused as e:
        raise LoadError(f"{where} {e.reason}: give the path of the library file "
                        f"Module.export_library wrote") from None


def _read(fd: int, where: str) -> bytes:
    try:
        return read_fd(fd, MAX_LIBRARY_BYTES)
    except FileRefused as e:
        raise LoadError(f"{where} {e.reason} (it changed while it was read?): load it once "
                        f"it is written") from None


def _verify_sidecar(path: str, data: bytes, where: str) -> None:
    side = f"'{display(str(sidecar_path(path)))}'"
    try:
        want = sidecar_digest(path)
    except FileNotFoundError:
        raise LoadError(
            f"{where} has no sha256 sidecar {side}: export_library writes one beside the "
            f"library; copy it along, or, for a library you built yourself, pass "
            f"load_module(..., verify=False)") from None
    except FileRefused as e:
        raise LoadError(
            f"{where}: its sha256 sidecar {side} {e.reason}, so it is not the sidecar "
            f"export_library writes: copy the library and its sidecar together, or "
            f"export it again") from None
    got = digest_bytes(data)
    if want != got:
        raise LoadError(
            f"{where} does not match its sha256 sidecar {side} (the file has sha256 "
            f"{got[:16]}..., the sidecar says {want[:16]}...): it is truncated, "
            f"half-written or was replaced; export it again, or copy the library and its "
            f"sidecar together")


def _check_cpu(info: "_fmt.LibraryInfo", where: str) -> None:
    have = _fmt.host_cpu_features()
    if have is None:
        raise LoadError(
            f"{where}: the CPU features of this machine cannot be read (/proc/cpuinfo), so "
            f"whether it can run the {_fmt.library_description(info)} is unknown")
    unreported = sorted(f for f in info.features if f in _fmt.UNREPORTED_FEATURES)
    if unreported:
        raise LoadError(
            f"{where} needs the CPU feature(s) {', '.join(unreported)}, which Linux does not "
            f"report in /proc/cpuinfo, so whether this CPU has them is unknown "
            f"({_fmt.library_description(info)}): its code could stop with an illegal "
            f"instruction. Export it for a target without them (-mattr="
            f"{','.join('-' + f for f in unreported)}), or build it with tc.build on the "
            f"machine that runs it")
    unknown = sorted(f for f in info.features if f not in _fmt.CHECKED_FEATURES)
    if unknown:
        raise LoadError(
            f"{where} needs the CPU feature(s) {', '.join(unknown)[:200]}, which this tecomp "
            f"cannot check ({_fmt.library_description(info)}): load it with the tecomp that "
            f"exported it, or export it again with this one")
    missing = sorted(set(info.features) - have)
    if missing:
        raise LoadError(
            f"{where} needs the CPU feature(s) {', '.join(missing)}, which this machine's CPU "
            f"does not have ({_fmt.library_description(info)}): its code would stop with "
            f"an illegal instruction. Export it for a CPU this one can run, e.g. "
            f"tc.build(..., target='llvm -mcpu=x86-64-v3') for any AVX2 machine, or export "
            f"it on this machine")


def _check_object_layout(info: "_fmt.LibraryInfo", where: str) -> None:
    if _rt._PYOBJ and info.pyobject_data_offset != _rt.PYOBJECT_DATA_OFFSET:
        raise LoadError(
            f"{where} was exported by a Python whose numpy arrays keep their data pointer "
            f"at byte {info.pyobject_data_offset} of the object, where this one keeps it at "
            f"{_rt.PYOBJECT_DATA_OFFSET}: export it again with this Python")


def _signature(info: "_fmt.LibraryInfo", where: str) -> Tuple[PrimFunc, Signature]:
    """The function (parameters and recorded checks, no body) and its ABI signature,
    checked against the positions the library was compiled with."""
    func = PrimFunc(info.name, info.params, SeqStmt(()),
                    {"param_checks": info.param_checks, "in_place": info.in_place})
    try:
        sig = Signature(func, written=info.written)
    except TecompError as exc:
        raise LoadError(f"{where}: its parameters are not valid ({exc}); export it "
                        f"again") from None
    _fmt.check_signature(info, sig, where)
    return func, sig


def _dlopen(fd: int, path: str, where: str, section: bytes) -> ctypes.CDLL:
    """dlopen the file ``fd`` reads -- the very file that was checked, even if ``path``
    names another one by now (:func:`~tecomp.runtime.libfiles.dlopen_fd`: a library
    exported again to the same path is loaded anew) -- and register its pool (once per
    loaded copy).  ``section`` (the metadata as checked) must then be the copy's
    metadata."""
    try:
        lib = dlopen_fd(fd, path)
    except UnicodeDecodeError:
        # (dlerror's message names what the library asks for, damaged names among it)
        raise LoadError(f"{where} could not be loaded: the dynamic loader's message is not "
                        f"text (a damaged name in the library?); export it again") from None
    except OSError as e:
        raise LoadError(f"{where} could not be loaded: {str(e)[:300]}; check that the "
                        f"libraries it needs (libm, libpthread, libc) are installed") from None
    try:
        addr = ctypes.addressof(ctypes.c_char.in_dll(lib, _fmt.METADATA_SYMBOL))
    except ValueError:
        addr = None
    if addr is None or ctypes.string_at(addr, len(section)) != section:
        raise LoadError(
            f"{where}: the copy the dynamic loader gave is not the file that was checked (a "
            f"file changed in place after it was loaded, e.g. by cp onto it, stays loaded "
            f"as it was): export to a new file name, or load it in a new process")
    with _LOCK:
        known = _LOADED.get(lib._handle)
        if known is not None:
            return known
        pool = _threads.PoolControls(lambda name: _address(lib, name, where), owner=lib,
                                     optional=lambda name: _optional_address(lib, name))
        _threads.register(pool)
        _LOADED[lib._handle] = lib
    return lib


def _optional_address(lib: ctypes.CDLL, name: str) -> Optional[int]:
    """The address of ``lib``'s function ``name``, or None where it has none."""
    try:
        return ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
    except AttributeError:
        return None


def _address(lib: ctypes.CDLL, name: str, where: str) -> int:
    addr = _optional_address(lib, name)
    if addr is None:
        raise LoadError(f"{where} does not define {name}, which its metadata promises: it "
                        f"is damaged; export it again")
    return addr


# ---------------------------------------------------------------------------------------
# the variants, as the runtime's Module reads compiled code


class _LibraryCode:
    """One variant's entries in a loaded library, where the runtime's Module reads a
    JIT-compiled variant (``tecomp.codegen.llvm.jit.JitModule``): their ``addresses``.
    There is no source: the library holds machine code only."""

    def __init__(self, addresses: Dict[str, int], where: str):
        self.addresses = addresses
        self.timings: Dict[str, float] = {}
        self._where = where

    def _no_source(self):
        raise LoadError(f"the module loaded from {self._where} has no source (the library "
                        f"holds machine code only): call get_source on the module tc.build "
                        f"returned, before export_library")

    opt_ir = unopt_ir = asm = property(lambda self: self._no_source())


class _LibraryBuild:
    """One variant's symbol, error sites and notes, where the runtime's Module reads
    them of the code generator's module builder."""

    def __init__(self, v: "_fmt.LibraryVariant"):
        self.symbol = v.symbol
        self.sites = v.sites
        self.notes = v.notes


class _LibraryVariants:
    """The runtime's variant compiler for a loaded library: every variant is in the
    library already, so compiling one is looking up its two entries."""

    def __init__(self, lib: ctypes.CDLL, info: "_fmt.LibraryInfo", where: str):
        self.lib = lib
        self.info = info
        self.where = where

    def variant(self, layout: str, noalias: bool):
        v = self.info.variants[(layout, noalias)]
        addresses = {s: _address(self.lib, s, self.where)
                     for s in (v.symbol, v.symbol + "_pyarrays")}
        return _LibraryCode(addresses, self.where), _LibraryBuild(v)

    def compile(self, layout: str, noalias: bool):
        """``(code, build, seconds)``, as ``llvm.VariantCompiler.compile`` returns."""
        code, build = self.variant(layout, noalias)
        return code, build, 0.0

    def export_library(self, mod, path) -> None:
        """A loaded library is not exported again: its file is the library."""
        raise BuildError(f"{mod.name} was loaded from {mod.library_path!r:.200}: that file is "
                         f"its library already; copy it together with its .sha256 sidecar")
