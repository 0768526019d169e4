"""``export_library`` of a ``cuda`` module: its kernels as a GPU library.

The library is the same kind of file as a CPU library (:mod:`tecomp.codegen.llvm.export`,
format :mod:`tecomp.runtime.aot_format`): an ELF shared object for this machine, with
its sha256 sidecar, holding

* the kernels as one fatbin (``nvcc -fatbin -gencode ...``): a cubin for each of
  :data:`ARCHS` (those at least the target's ``-arch``; the target's own when it is
  newer) and the PTX of the newest, which the CUDA driver compiles for GPUs newer than
  every cubin; in the section ``.tecomp_fatbin`` (symbol ``tecomp_fatbin``, so C code
  can hand it to ``cuModuleLoadData`` itself);
* the metadata JSON in its section (symbol ``tecomp_metadata_json``; format
  :data:`~tecomp.runtime.aot_format.CUDA_FORMAT_VERSION`): the parameters and their
  checks, and for each kernel its name, parameters, grid and block as expressions of
  the sizes, and shared memory; the workspaces; the host assertions; for a kernel that
  copies tiles with TMA, each tensor-map parameter's box (the parameter it views, its
  dimensions, swizzle), from which the loader encodes the map at each call through the
  driver's ``cuTensorMapEncodeTiled`` (no compiler at load time);
* the metadata's sha256 in its section (symbol ``tecomp_metadata_sha256``): the loader
  refuses metadata that is not the document the fatbin was built with;

and no host code: the three constants are assembled and linked by the C compiler driver
(:mod:`tecomp.codegen.libwrite`, as every library is linked; no llvmlite), and
``tc.load_module`` launches the kernels through the CUDA driver API
(:mod:`tecomp.runtime.cuda_driver`).  The fatbin is read back before the library is
written: it must hold a cubin of every architecture and the PTX the metadata names.
"""
from __future__ import annotations

import re
import sys

from ..errors import BuildError, RuntimeUnavailableError
from ..ir.names import identifier
from ..runtime import aot_format as fmt
from ..runtime.fatbin import describe_code, read_fatbin
from ..runtime.nvcc import compile_fatbin
from ..runtime.elf import host_machine
from ..runtime.signature import Signature
from ..target import Target
from .libwrite import destination, find_c_compiler, link, write_checked

__all__ = ["export_cuda_library", "ARCHS"]

#: the architectures a GPU library holds cubins of (A100 and H100/H200 generations)
ARCHS = ("sm_80", "sm_90")


def library_archs(target) -> tuple:
    """``(archs, ptx)``: the cubins and PTX a library for ``target`` holds."""
    want = getattr(target, "arch", None)
    archs = list(ARCHS)
    if want is not None and re.fullmatch(r"sm_\d+a", want):
        # architecture-specific features (sm_90a's wgmma): that architecture's code only,
        # which no other runs (its PTX neither: compute_90a is not forward-compatible)
        return (want,), "compute_" + want[3:]
    if want is not None:
        num = _arch_number(want)
        archs = [a for a in archs if _arch_number(a) >= num]
        if want not in archs and re.fullmatch(r"sm_\d+a?", want):
            archs.append(want)
        archs.sort(key=_arch_number)
    newest = archs[-1]
    return tuple(archs), "compute_" + newest[3:]


def _arch_number(arch: str) -> int:
    return int(re.sub(r"\D", "", arch) or 0)


def export_cuda_library(mod, path) -> None:
    """Write the ``cuda`` module ``mod`` (a :class:`~tecomp.runtime.cuda.CudaModule`) as a
    GPU library at ``path`` and its sidecar at ``path + ".sha256"``: see the module
    docstring."""
    cs = mod.cuda_source
    name = cs.func.name
    dest = destination(path, name)
    if not sys.platform.startswith("linux"):
        raise RuntimeUnavailableError(f"{name}.export_library writes ELF shared libraries, "
                                      f"for Linux; this is {sys.platform}")
    host = Target("llvm")
    cc = find_c_compiler(host)
    archs, ptx = library_archs(mod.target)
    try:
        fatbin = compile_fatbin(cs, archs, ptx)
    except BuildError as exc:
        raise BuildError(f"cannot export {name}: nvcc failed to compile its CUDA C for "
                         f"{', '.join(archs)} and {ptx}: {exc}") from None
    where = f"the fatbin nvcc wrote for {name}"
    entries = read_fatbin(fatbin, where, BuildError)
    have = {e.name for e in entries}
    missing = [a for a in archs + (ptx,) if a not in have]
    if missing:
        raise BuildError(f"{where} holds {describe_code(entries)}, not {', '.join(missing)}: "
                         f"check the CUDA toolkit (nvcc --list-gpu-code)")
    sig = Signature(cs.func, written=cs.written)
    entry = "tecomp_" + identifier(name)[:200]
    doc = fmt.build_cuda_metadata(func=cs.func, sig=sig, cs=cs, entry=entry,
                                  target=mod.target or "cuda", archs=archs, ptx=ptx,
                                  fatbin_bytes=len(fatbin))
    # read back as load_module will: a kernel the format cannot describe is refused now
    fmt.parse_metadata(doc.encode(), f"the library of {name}", exporting=name)
    data = link(cc, _assembly(doc.encode("ascii") + b"\0", fatbin), "s", name)
    write_checked(data, doc, host_machine(), cc, name, dest)


def _assembly(meta: bytes, fatbin: bytes) -> bytes:
    """The library's three constants (metadata, its sha256 and the fatbin, each in its
    own section, each a global symbol), in the GNU assembler's syntax of every ELF
    machine; no code."""
    lines = []
    digest = fmt.metadata_digest(meta.rstrip(b"\0"))
    for symbol, section, data, align in ((fmt.METADATA_SYMBOL, fmt.SECTION, meta, 1),
                                         (fmt.DIGEST_SYMBOL, fmt.DIGEST_SECTION, digest, 1),
                                         (fmt.FATBIN_SYMBOL, fmt.FATBIN_SECTION, fatbin, 16)):
        lines += [f'.section {section},"a",%progbits', f".balign {align}",
                  f".globl {symbol}", f".type {symbol},%object", f".size {symbol},{len(data)}",
                  f"{symbol}:"]
        lines += [".byte " + ",".join(str(b) for b in data[i:i + 64])
                  for i in range(0, len(data), 64)]
    lines.append('.section .note.GNU-stack,"",%progbits')
    return ("\n".join(lines) + "\n").encode("ascii")
