"""Just enough of ELF to judge a shared library before ``dlopen`` sees it.

:func:`inspect_library` reads the bytes of a file -- as data: nothing of it is mapped or
run -- and returns its :class:`LibraryImage`: the machine it is for, the contents of one
named section, and everything that would make the dynamic loader run code or look for
files when it loads the library:

* constructors and destructors: the dynamic tags ``DT_INIT``, ``DT_INIT_ARRAY``,
  ``DT_PREINIT_ARRAY``, ``DT_FINI``, ``DT_FINI_ARRAY``;
* IFUNC resolvers (relocations ``R_X86_64_IRELATIVE``, symbols ``STT_GNU_IFUNC``): the
  loader calls a function of the library to resolve them;
* the libraries it needs (``DT_NEEDED``: their constructors run too) and the
  directories it asks the loader to search for them (``DT_RPATH``, ``DT_RUNPATH``).

Every offset and size is checked against the file, so a truncated or damaged file is a
:class:`~tecomp.errors.LoadError` naming it, never an exception from ``struct`` nor a
SIGBUS from mapping a file shorter than its headers claim.
"""
from __future__ import annotations

import platform
import re
import struct
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

from ..errors import LoadError

__all__ = ["LibraryImage", "inspect_library", "check_plain", "host_machine", "SYSTEM_LIBRARIES"]

ET_DYN = 3
PT_LOAD, PT_DYNAMIC = 1, 2
SHT_NOBITS, SHT_DYNSYM = 8, 11
STT_GNU_IFUNC = 10
DT_NEEDED, DT_STRTAB, DT_STRSZ, DT_RELA, DT_RELASZ = 1, 5, 10, 7, 8
DT_RPATH, DT_RUNPATH, DT_JMPREL, DT_PLTRELSZ = 15, 29, 23, 2
#: dynamic tags whose code the dynamic loader runs on load or unload
RUN_TAGS = {12: "DT_INIT", 13: "DT_FINI", 25: "DT_INIT_ARRAY", 26: "DT_FINI_ARRAY",
            32: "DT_PREINIT_ARRAY"}
#: ELF machine numbers of the machines tecomp generates code for, and the relocation
#: type whose resolver the loader calls (IRELATIVE)
MACHINES = {62: "x86-64", 183: "AArch64"}
IRELATIVE = {62: 37, 183: 1032}
_HOST_MACHINES = {"x86_64": 62, "amd64": 62, "aarch64": 183, "arm64": 183}
#: the libraries a library tecomp exports may need: the C runtime's (loaded already)
SYSTEM_LIBRARIES = re.compile(r"(libc|libm|libpthread|libdl|librt|libgcc_s)\.so(\.[0-9]+)*"
                              r"|ld-linux[A-Za-z0-9_.-]*\.so(\.[0-9]+)*")


@dataclass
class LibraryImage:
    """What :func:`inspect_library` found."""

    machine: int
    run_tags: Tuple[str, ...]        # what would run code when it is loaded or unloaded
    needed: Tuple[str, ...]          # DT_NEEDED: the libraries it needs
    search_paths: Tuple[str, ...]    # DT_RPATH, DT_RUNPATH
    section: Optional[bytes]         # the named section's contents, None if absent


def host_machine() -> Optional[int]:
    """The ELF machine number of this process's CPU, None if tecomp does not know it."""
    return _HOST_MACHINES.get(platform.machine().lower())


def inspect_library(data: bytes, where: str, section_name: str) -> LibraryImage:
    """Check that ``data`` is a complete 64-bit little-endian ELF shared object for this
    machine and read it (see the module docstring).  ``where`` names the file in
    messages."""
    if len(data) < 64 or data[:4] != b"\x7fELF":
        raise LoadError(f"{where} is not a shared library (not an ELF file): give the path of "
                        f"a library Module.export_library wrote")
    if data[4] != 2 or data[5] != 1:
        raise LoadError(f"{where} is a {'32' if data[4] == 1 else '?'}-bit or big-endian ELF "
                        f"file, not a 64-bit little-endian library for this machine: export "
                        f"the kernel on (or for) this kind of machine")
    (e_type, e_machine, _, _, e_phoff, e_shoff, _, _, e_phentsize, e_phnum, e_shentsize,
     e_shnum, e_shstrndx) = struct.unpack_from("<HHIQQQIHHHHHH", data, 16)
    if e_type != ET_DYN:
        raise LoadError(f"{where} is an ELF file but not a shared library (ELF type "
                        f"{e_type}): give the path of a library Module.export_library wrote")
    host = host_machine()
    if host is not None and e_machine != host:
        theirs = MACHINES.get(e_machine, f"ELF machine {e_machine}")
        raise LoadError(f"{where} is a library for {theirs}, not for this "
                        f"{MACHINES.get(host, platform.machine())} machine: export the kernel "
                        f"on this kind of machine")
    size = len(data)

    def need(offset: int, length: int, what: str) -> None:
        if offset < 0 or length < 0 or offset + length > size:
            raise LoadError(f"{where} is truncated or damaged: its {what} lies at bytes "
                            f"[{offset}, {offset + length}) of a {size}-byte file; export it "
                            f"again (or copy the whole file)")

    if e_phentsize != 56 or e_shentsize not in (0, 64):
        raise LoadError(f"{where} is damaged: its ELF header gives entry sizes "
                        f"{e_phentsize}/{e_shentsize}; export it again")
    need(e_phoff, e_phnum * 56, "program header table")
    loads: List[Tuple[int, int, int]] = []      # (vaddr, file offset, file size)
    dynamic: List[Tuple[int, int]] = []         # (tag, value)
    for k in range(e_phnum):
        p_type, _, p_offset, p_vaddr, _, p_filesz, _, _ = struct.unpack_from(
            "<IIQQQQQQ", data, e_phoff + 56 * k)
        if p_type == PT_LOAD:
            need(p_offset, p_filesz, f"loadable segment {k}")
            loads.append((p_vaddr, p_offset, p_filesz))
        elif p_type == PT_DYNAMIC:
            need(p_offset, p_filesz, "dynamic section")
            for off in range(p_offset, p_offset + p_filesz - 15, 16):
                tag, value = struct.unpack_from("<qQ", data, off)
                if tag == 0:
                    break
                dynamic.append((tag, value))
    run_tags = sorted({RUN_TAGS[t] for t, _ in dynamic if t in RUN_TAGS})
    tags: Dict[int, int] = {}
    for t, v in dynamic:
        tags.setdefault(t, v)

    def at(vaddr: int, length: int, what: str) -> int:
        """The file offset of ``length`` bytes at address ``vaddr``."""
        for lo, off, n in loads:
            if lo <= vaddr and vaddr + length <= lo + n:
                return off + (vaddr - lo)
        raise LoadError(f"{where} is damaged: its {what} is not in the file; export it "
                        f"again")

    if IRELATIVE.get(e_machine) is not None:
        for table, size_tag in ((DT_RELA, DT_RELASZ), (DT_JMPREL, DT_PLTRELSZ)):
            if table in tags and tags.get(size_tag, 0):
                n = tags[size_tag]
                start = at(tags[table], n, "relocation table")
                for off in range(start, start + n - 23, 24):
                    if struct.unpack_from("<QQ", data, off)[1] & 0xFFFFFFFF == \
                            IRELATIVE[e_machine]:
                        run_tags.append("IFUNC resolvers (IRELATIVE relocations)")
                        break
    names = _strings(data, where, tags, dynamic, at)
    sections, dynsyms = _sections(data, where, e_shoff, e_shnum, e_shstrndx, need)
    for off in range(0, len(dynsyms) - 23, 24):
        st_info, _, st_shndx = struct.unpack_from("<BBH", dynsyms, off + 4)
        if st_info & 0xF == STT_GNU_IFUNC and st_shndx != 0:
            run_tags.append("IFUNC resolvers (STT_GNU_IFUNC symbols)")
            break
    return LibraryImage(
        e_machine, tuple(sorted(set(run_tags))),
        tuple(names(v) for t, v in dynamic if t == DT_NEEDED),
        tuple(names(v) for t, v in dynamic if t in (DT_RPATH, DT_RUNPATH)),
        sections.get(section_name))


def _strings(data: bytes, where: str, tags: Dict[int, int], dynamic,
             at: Callable) -> Callable[[int], str]:
    """A function: offset in the dynamic string table -> the string there."""
    if not any(t in (DT_NEEDED, DT_RPATH, DT_RUNPATH) for t, _ in dynamic):
        return lambda off: ""
    if DT_STRTAB not in tags or DT_STRSZ not in tags:
        raise LoadError(f"{where} is damaged: it names libraries but has no string table; "
                        f"export it again")
    start, n = at(tags[DT_STRTAB], tags[DT_STRSZ], "dynamic string table"), tags[DT_STRSZ]
    table = data[start:start + n]

    def name(off: int) -> str:
        if off >= len(table):
            return "?"
        end = table.find(b"\0", off)
        return table[off:end if end >= 0 else len(table)].decode("ascii", "replace")

    return name


def _sections(data: bytes, where: str, e_shoff: int, e_shnum: int, e_shstrndx: int,
              need) -> Tuple[Dict[str, bytes], bytes]:
    """name -> contents of every section with contents (no section table: none), and
    the contents of the dynamic symbol table."""
    if e_shoff == 0 or e_shnum == 0:
        return {}, b""
    need(e_shoff, e_shnum * 64, "section header table")
    heads = [struct.unpack_from("<IIQQQQIIQQ", data, e_shoff + 64 * k) for k in range(e_shnum)]
    if not 0 <= e_shstrndx < e_shnum:
        raise LoadError(f"{where} is damaged: no section name table; export it again")
    _, _, _, _, str_off, str_size, _, _, _, _ = heads[e_shstrndx]
    need(str_off, str_size, "section name table")
    names = data[str_off:str_off + str_size]
    out: Dict[str, bytes] = {}
    dynsyms = b""
    for k, (sh_name, sh_type, _, _, sh_offset, sh_size, _, _, _, _) in enumerate(heads):
        if sh_type == SHT_NOBITS:
            continue
        end = names.find(b"\0", sh_name)
        name = names[sh_name:end if end >= 0 else len(names)].decode("ascii", "replace")
        need(sh_offset, sh_size, f"section {name!r:.40}")
        if sh_type == SHT_DYNSYM:
            dynsyms += data[sh_offset:sh_offset + sh_size]
        if sh_name < len(names):
            out.setdefault(name, data[sh_offset:sh_offset + sh_size])
    return out, dynsyms


def check_plain(image: LibraryImage, where: str) -> None:
    """Raise LoadError unless loading the library runs none of its code and brings in no
    library but the C runtime's, as every library tecomp exports."""
    if image.run_tags:
        raise LoadError(
            f"{where} has code that would run when it is loaded or unloaded "
            f"({', '.join(image.run_tags)}); libraries tecomp exports have none, so this "
            f"one was not written by tecomp or was changed since: export it again")
    others = [n for n in image.needed if not SYSTEM_LIBRARIES.fullmatch(n)]
    if others or image.search_paths:
        what = ", ".join(others + [f"search path {p}" for p in image.search_paths])
        raise LoadError(
            f"{where} asks the dynamic loader for more than the C runtime ({what[:300]}); "
            f"libraries tecomp exports need only libc and libm, so this one was not written "
            f"by tecomp or was changed since: export it again")
