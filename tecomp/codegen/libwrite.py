"""Writing a library file, whatever code it holds (``export_library`` of an ``llvm`` or a
``cuda`` module): the destination the user gave, the C compiler driver that links, the
link (:data:`LINK_FLAGS`: no constructors, no executable stack, nothing undefined), the
checks ``load_module`` will make, made on the linked bytes, and the atomic write of the
library and its sha256 sidecar.  Nothing here needs llvmlite.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

from ..errors import ArgumentError, BuildError, ExportError, InternalError, LoadError, \
    RuntimeUnavailableError
from ..runtime import aot_format as fmt
from ..runtime.elf import check_plain, inspect_library
from ..runtime.libfiles import file_path, sidecar_path, special_file, write_with_sidecar
from ..target import ISAS, cross_compilers

__all__ = ["find_c_compiler", "destination", "link", "write_checked", "LINK_FLAGS"]

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


def destination(path, name: str) -> str:
    """``path`` as a str naming a file that can be written (its directory exists, and
    its name leaves room for the sidecar's)."""
    given = file_path(path, f"{name}.export_library", ArgumentError)
    p = os.path.abspath(given)
    if given.endswith(os.sep) and not os.path.isdir(p):
        # (abspath drops the separator: the library would be written as a file named
        # after the directory the user meant, and load_module of the same path refused)
        raise BuildError(f"{name}.export_library: {given!r:.200} ends with {os.sep!r}, so it "
                         f"names a directory, and there is none; give a file name such as "
                         f"{os.path.join(given, name + '.so')!r:.220} (create the directory "
                         f"first)")
    if os.path.isdir(p):
        raise BuildError(f"{name}.export_library: {p!r:.200} is a directory; give a file "
                         f"name such as {os.path.join(p, name + '.so')!r:.220}")
    d = os.path.dirname(p)
    if not os.path.isdir(d):
        raise BuildError(f"{name}.export_library: the directory of {p!r:.200} does not "
                         f"exist; create it first")
    for f, what in ((p, "the path"), (str(sidecar_path(p)), "the sidecar's path")):
        why = special_file(f)
        if why:
            raise BuildError(f"{name}.export_library: {what} {f!r:.200} {why}: the file "
                             f"written (renamed onto the path) would replace it, as it "
                             f"replaced /dev/null exported to as root; give the path of a "
                             f"file, e.g. {os.path.join(d, name + '.so')!r:.220}")
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


def write_checked(data: bytes, doc: str, machine, cc: str, name: str, dest: str) -> None:
    """Check the library ``data`` that ``cc`` linked as ``load_module`` will (for the ELF
    ``machine``; its metadata must be ``doc``), then write it and its sidecar at ``dest``
    (both or neither)."""
    try:  # what load_module will check, checked now
        image = inspect_library(data, f"the library {cc} linked for {name}", fmt.SECTION,
                                machine)
        check_plain(image, f"the library {cc} linked for {name}")
    except LoadError as exc:
        raise BuildError(f"the library {cc} linked for {name} is not one load_module accepts "
                         f"({exc}); link with gcc or clang (set CC)") from None
    if image.section is None or image.section.rstrip(b"\0") != doc.encode():
        raise InternalError(f"the library linked for {name} lost its metadata section "
                            f"{fmt.SECTION}")
    if image.sections.get(fmt.DIGEST_SECTION) != fmt.metadata_digest(doc.encode()):
        raise InternalError(f"the library linked for {name} lost the sha256 of its metadata "
                            f"({fmt.DIGEST_SECTION})")
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


def link(cc: str, obj: bytes, suffix: str, name: str) -> bytes:
    """The shared object ``cc`` links from ``obj``: object code (``suffix`` ``"o"``) or
    assembly (``"s"``, which ``cc`` assembles first)."""
    with tempfile.TemporaryDirectory(prefix="tecomp-export-") as tmp:
        o = os.path.join(tmp, "kernel." + suffix)
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
