"""``Module.export_library(path)``: a compiled CPU kernel as a shared library.

The library (its format: :mod:`tecomp.runtime.aot_format`) is made of

* the optimised LLVM IR of every call variant of the kernel -- the code the module runs
  in this process, compiled on demand here if a call has not needed it yet -- each
  variant's entries renamed to its own symbol;
* the thread pool (:func:`tecomp.codegen.llvm.threadpool.pool_ir`, the copy whose thread
  count defaults as Python's does when C code calls it);
* the metadata JSON, in a section of its own and behind ``tecomp_metadata()``, and its
  sha256 in another (``tecomp_metadata_sha256``);

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

import sys

from ...errors import BuildError, InternalError, RuntimeUnavailableError
from ...ir.functor import collect
from ...ir.stmt import ExternCall
from ...runtime.elf import ISA_MACHINES
from ...target import Target
from ...runtime import aot_format as fmt
from ..libwrite import LINK_FLAGS, destination, find_c_compiler, link, write_checked
from . import jit as llvm_jit
from .threadpool import pool_ir

__all__ = ["export_library", "find_c_compiler", "LINK_FLAGS"]


def _bytes_ir(data: bytes) -> str:
    """``data`` as an LLVM string constant's contents."""
    return "".join(chr(c) if 32 <= c < 127 and c not in (34, 92) else f"\\{c:02X}"
                   for c in data)


def _metadata_ir(doc: str) -> str:
    """The metadata as an LLVM global constant in :data:`fmt.SECTION`, its C accessor
    ``const char *tecomp_metadata(void)``, and its sha256 in :data:`fmt.DIGEST_SECTION`
    (compiled with the code: the loader refuses metadata that is not this document)."""
    data = doc.encode("ascii") + b"\0"
    digest = fmt.metadata_digest(doc.encode("ascii"))
    return (f'@{fmt.METADATA_SYMBOL} = constant [{len(data)} x i8] c"{_bytes_ir(data)}", '
            f'section "{fmt.SECTION}", align 1\n'
            f'@{fmt.DIGEST_SYMBOL} = constant [{len(digest)} x i8] c"{_bytes_ir(digest)}", '
            f'section "{fmt.DIGEST_SECTION}", align 1\n\n'
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
    dest = destination(path, name)
    if not sys.platform.startswith("linux"):
        raise RuntimeUnavailableError(f"{name}.export_library writes ELF shared libraries, "
                                      f"for Linux; this is {sys.platform}")
    target = mod.target if mod.target is not None else Target("llvm")
    cc = find_c_compiler(target)
    entry = mod.entry_symbol
    fmt.check_kernel_symbol(name, entry, "export")
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
    data = link(cc, obj, "o", name)
    write_checked(data, doc, ISA_MACHINES.get(target.isa), cc, name, dest)
