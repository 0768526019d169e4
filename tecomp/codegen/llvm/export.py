"""``Module.export_library(path)``: a compiled CPU kernel as a shared library.

The library (its format: :mod:`tecomp.runtime.aot_format`) is made of

* the optimised LLVM IR of every call variant of the kernel -- the code the module runs
  in this process, compiled on demand here if a call has not needed it yet -- each
  variant's entries renamed to its own symbol;
* the thread pool (:func:`tecomp.codegen.llvm.threadpool.pool_ir`, the copy whose thread
  count defaults as Python's does when C code calls it);
* the metadata JSON, in a section of its own and behind ``tecomp_metadata()``;

linked into one LLVM module, written as position-independent object code for the
module's :class:`~tecomp.target.Target` (llvmlite's ``emit_object``) and linked into a
shared object by the system's C compiler driver (``cc``, or ``$CC``) with
``-nostartfiles`` (no constructors: loading runs none of the library's code) and
``-Bsymbolic`` (its kernels call its own pool even where another library defines the
same names).  The library and its sha256 sidecar (:mod:`tecomp.runtime.libfiles`) are
written to temporary files beside ``path``, then renamed into place together: a failed
write (an :class:`~tecomp.errors.ExportError`) leaves the files there as they were.  The
path is only ever a file name to write: it never reaches a command line.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

from ...errors import (
    ArgumentError, BuildError, ExportError, InternalError, LoadError, RuntimeUnavailableError,
)
from ...ir.functor import collect
from ...ir.stmt import ExternCall
from ...runtime.elf import ISA_MACHINES, check_plain, inspect_library
from ...target import ISAS, Target, cross_compilers
from ...runtime import aot_format as fmt
from . import jit as llvm_jit
from ...runtime.libfiles import file_path, sidecar_path, write_with_sidecar
from .threadpool import pool_ir

__all__ = ["export_library", "find_c_compiler", "LINK_FLAGS"]

#: how the object code is linked (see the module docstring)
LINK_FLAGS = ("-shared", "-nostartfiles", "-Wl,-Bsymbolic", "-Wl,-z,now",
              "-Wl,-z,noexecstack", "-Wl,--no-undefined")
LINK_LIBS = ("-lm", "-lpthread")


def find_c_compiler(target=None) -> str:
    """The C compiler driver that links libraries: ``$CC`` (a program name or path),
    else ``cc``, ``gcc`` or ``clang`` on the PATH.  For a ``target`` of another
    instruction set than this machine's: its cross compiler, the variable
    ``TECOMP_CC_<ISA>`` (``TECOMP_CC_AARCH64``) or the drivers its facts name
    (``aarch64-linux-gnu-gcc``)."""
    if target is not None and not target.is_native_isa:
        var = ISAS[target.isa].CROSS_CC_VARIABLE
        names, found = cross_compilers(target)
        if found is not None:
            return found
        raise RuntimeUnavailableError(
            f"export_library links {target.isa} code into a shared library with a cross C "
            f"compiler for {target.isa}, and none was found ({', '.join(names)} not on the "
            f"PATH): install one (on Debian/Ubuntu: apt-get install gcc-aarch64-linux-gnu) "
            f"or set {var} to its path")
    cc = os.environ.get("CC") or "cc"
    found = shutil.which(cc)
    if found is None and "CC" not in os.environ:
        found = shutil.which("gcc") or shutil.which("clang")
    if found is None:
        why = (f"$CC={cc!r:.100} is not a program on the PATH" if "CC" in os.environ else
               "cc, gcc and clang are not on the PATH")
        raise RuntimeUnavailableError(
            f"export_library links the kernel into a shared library with the system's C "
            f"compiler, and none was found ({why}): install one (e.g. apt-get install gcc) "
            f"or set CC to its path")
    return found


def _destination(path, name: str) -> str:
    """``path`` as a str naming a file that can be written (its directory exists, and
    its name leaves room for the sidecar's)."""
    p = os.path.abspath(file_path(path, f"{name}.export_library", ArgumentError))
    if os.path.isdir(p):
        raise BuildError(f"{name}.export_library: {p!r:.200} is a directory; give a file "
                         f"name such as {os.path.join(p, name + '.so')!r:.220}")
    d = os.path.dirname(p)
    if not os.path.isdir(d):
        raise BuildError(f"{name}.export_library: the directory of {p!r:.200} does not "
                         f"exist; create it first")
    side = os.fsencode(sidecar_path(p).name)
    try:
        limit = os.pathconf(d, "PC_NAME_MAX")
    except (OSError, ValueError):
        limit = 255
    if limit > 0 and len(side) > limit:
        raise BuildError(f"{name}.export_library: the file name {os.path.basename(p)!r:.80} "
                         f"is {len(side) - 7} bytes long; its sidecar's name (the same + "
                         f"'.sha256') would be {len(side)}, more than the {limit} this file "
                         f"system allows: give a shorter file name")
    return p


def _metadata_ir(doc: str) -> str:
    """The metadata as an LLVM global constant in :data:`fmt.SECTION`, and its C
    accessor ``const char *tecomp_metadata(void)``."""
    data = doc.encode("ascii") + b"\0"
    text = "".join(chr(c) if 32 <= c < 127 and c not in (34, 92) else f"\\{c:02X}"
                   for c in data)
    return (f'@{fmt.METADATA_SYMBOL} = constant [{len(data)} x i8] c"{text}", '
            f'section "{fmt.SECTION}", align 1\n\n'
            f"define ptr @{fmt.METADATA_FUNCTION}() nounwind {{\n"
            f"entry:\n  ret ptr @{fmt.METADATA_SYMBOL}\n}}\n")


def export_library(mod, path, *, pyobject_data_offset: int) -> None:
    """Write ``mod`` (an llvm :class:`~tecomp.runtime.llvm.Module`) as a shared
    library at ``path`` and its sidecar at ``path + ".sha256"``: see the module
    docstring.  ``pyobject_data_offset``: where the kernels' ``_pyarrays`` entries read
    a numpy array's data pointer (``runtime.PYOBJECT_DATA_OFFSET``)."""
    name = mod.name
    func = getattr(mod, "prim_func", None)
    if func is not None:
        calls = collect(func.body, lambda n: isinstance(n, ExternCall))
        if calls:
            raise BuildError(
                f"cannot export {name}: it calls {calls[0].name} through an extern stage "
                "(tc.extern), a function of this Python process, which a library loaded "
                "elsewhere cannot call; export the kernels around it instead")
    dest = _destination(path, name)
    if not sys.platform.startswith("linux"):
        raise RuntimeUnavailableError(f"{name}.export_library writes ELF shared libraries, "
                                      f"for Linux; this is {sys.platform}")
    target = mod.target if mod.target is not None else Target("llvm")
    cc = find_c_compiler(target)
    entry = mod.entry_symbol
    clash = {fmt.variant_symbol(entry, *key) for key in fmt.VARIANTS} & fmt.reserved_symbols()
    if clash:
        raise BuildError(f"cannot export {name}: its symbol {sorted(clash)[0]} is one of the "
                         f"library's runtime functions; build it under another name "
                         f"(tc.build(..., name=...))")
    variants = {key: mod._variant(*key) for key in fmt.VARIANTS}
    sig = mod._plan.sig
    doc = fmt.build_metadata(
        func=sig.func, sig=sig, checks=mod.checks, entry=entry, target=target,
        cpu=target.cpu, variants={k: (v.sites, v.notes) for k, v in variants.items()},
        pyobject_data_offset=pyobject_data_offset,
        required_features=set().union(*(v.required_features for v in variants.values())))
    # read back as load_module will: a kernel the format cannot describe is refused now
    fmt.parse_metadata(doc.encode(), f"the library of {name}", exporting=name)
    parts = []
    for (layout, noalias), v in variants.items():
        sym = fmt.variant_symbol(entry, layout, noalias)
        renames = {} if sym == entry else {entry: sym, entry + "_pyarrays": sym + "_pyarrays"}
        parts.append((v.jit.opt_ir, False, renames))
    parts.append((pool_ir(for_library=True, target=target), True, {}))
    parts.append((_metadata_ir(doc), False, {}))
    try:
        obj = llvm_jit.emit_object(parts, target)
    except (RuntimeError, NameError) as exc:  # NameError: a function to rename is missing
        raise InternalError(f"LLVM could not write the object code of {name}: {exc}") from exc
    data = _link(cc, obj, name)
    try:  # what load_module will check, checked now
        image = inspect_library(data, f"the library {cc} linked for {name}", fmt.SECTION,
                                ISA_MACHINES.get(target.isa))
        check_plain(image, f"the library {cc} linked for {name}")
    except LoadError as exc:
        raise BuildError(f"the library {cc} linked for {name} is not one load_module accepts "
                         f"({exc}); link with gcc or clang (set CC)") from None
    if image.section is None or image.section.rstrip(b"\0") != doc.encode():
        raise InternalError(f"the library linked for {name} lost its metadata section "
                            f"{fmt.SECTION}")
    try:
        # the library and its sidecar replace the old ones together, or neither does
        write_with_sidecar(dest, data, 0o755)
    except OSError as e:
        what = e.strerror or str(e)
        raise ExportError(
            f"{name}.export_library could not write {dest!r:.200} or its sidecar "
            f"{str(sidecar_path(dest))!r:.200} ({what[:200]}): the files there are "
            f"unchanged; check that the directory is writable and has room for "
            f"{len(data)} bytes, and that no directory has the sidecar's name, or export "
            f"to another path") from None


def _link(cc: str, obj: bytes, name: str) -> bytes:
    """The shared object ``cc`` links from the object code ``obj``."""
    with tempfile.TemporaryDirectory(prefix="tecomp-export-") as tmp:
        o = os.path.join(tmp, "kernel.o")
        so = os.path.join(tmp, "kernel.so")
        with open(o, "wb") as f:
            f.write(obj)
        cmd = [cc, *LINK_FLAGS, "-o", so, o, *LINK_LIBS]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise BuildError(f"linking {name} with {cc} failed: {exc}") from None
        if proc.returncode != 0:
            raise BuildError(
                f"linking {name} into a shared library failed ({' '.join(cmd)}):\n"
                f"{(proc.stderr or proc.stdout).strip()[:4000]}\nset CC to a working gcc or "
                f"clang")
        with open(so, "rb") as f:
            return f.read()
