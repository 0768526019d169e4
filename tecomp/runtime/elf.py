"""Just enough of ELF to judge a shared library before ``dlopen`` sees it.

:func:`inspect_library` reads the bytes of a file -- as data: nothing of it is mapped or
run -- and returns its :class:`LibraryImage`: the machine it is for, the contents of one
named section, and everything that would make the dynamic loader run code or look for
files when it loads the library:

* constructors and destructors: the dynamic tags ``DT_INIT``, ``DT_INIT_ARRAY``,
  ``DT_PREINIT_ARRAY``, ``DT_FINI``, ``DT_FINI_ARRAY``;
* IFUNC resolvers (relocations ``R_X86_64_IRELATIVE``, symbols ``STT_GNU_IFUNC``): the
  loader calls a function of the library to resolve them;
* the libraries it needs (``DT_NEEDED``: their constructors run too), the filter
  libraries it names (``DT_AUXILIARY``, ``DT_FILTER``: the loader loads them with it,
  and runs their constructors) and the directories it asks the loader to search for them
  (``DT_RPATH``, ``DT_RUNPATH``);
* any dynamic tag outside those a plain shared library has (:data:`PLAIN_TAGS`): audit
  libraries (``DT_AUDIT``, ``DT_DEPAUDIT``), text relocations, prelink tables... --
  whatever the loader might act on that tecomp's libraries never ask for;
* an executable stack (``PT_GNU_STACK`` with the execute bit, or none): loading it would
  make the stacks of every thread of the process executable.

Every offset and size is checked against the file, so a truncated or damaged file is a
:class:`~tecomp.errors.LoadError` naming it, never an exception from ``struct`` nor a
SIGBUS from mapping a file shorter than its headers claim.
"""
from __future__ import annotations

import platform
import re
import struct
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

from ..errors import LoadError
from ..ir.names import display

__all__ = ["LibraryImage", "inspect_library", "read_sections", "check_plain", "host_machine",
           "SYSTEM_LIBRARIES", "PLAIN_TAGS"]

ET_DYN = 3
PT_LOAD, PT_DYNAMIC, PT_GNU_STACK, PF_X = 1, 2, 0x6474E551, 1
PT_TLS, PT_GNU_RELRO, PF_W = 7, 0x6474E552, 2
DT_PLTREL, DT_RELAENT = 20, 9
DT_RELRSZ, DT_RELR, DT_RELRENT = 35, 36, 37
STT_TLS, SHN_ABS = 6, 0xFFF1
#: the relocation types of the libraries tecomp links, by ELF machine (x86-64: 64,
#: GLOB_DAT, JUMP_SLOT, RELATIVE; AArch64: ABS64, GLOB_DAT, JUMP_SLOT, RELATIVE); the
#: IRELATIVE ones are reported as code that runs (:func:`check_plain`)
RELOCATION_TYPES = {62: frozenset({1, 6, 7, 8, 37}),
                    183: frozenset({257, 1025, 1026, 1027, 1032})}
#: the relocation types that name no symbol (RELATIVE, IRELATIVE)
_SYMBOL_FREE = {62: frozenset({8, 37}), 183: frozenset({1027, 1032})}
#: the JUMP_SLOT relocation types (x86-64, AArch64)
_JUMP_SLOT = frozenset({7, 1026})
DT_PLTGOT = 3
SHT_NOBITS = 8
STT_GNU_IFUNC = 10
DT_NEEDED, DT_STRTAB, DT_STRSZ, DT_RELA, DT_RELASZ = 1, 5, 10, 7, 8
DT_HASH, DT_SYMTAB, DT_SYMENT, DT_GNU_HASH = 4, 6, 11, 0x6FFFFEF5
DT_RPATH, DT_RUNPATH, DT_JMPREL, DT_PLTRELSZ = 15, 29, 23, 2
DT_VERSYM, DT_VERDEF, DT_VERDEFNUM = 0x6FFFFFF0, 0x6FFFFFFC, 0x6FFFFFFD
DT_VERNEED, DT_VERNEEDNUM = 0x6FFFFFFE, 0x6FFFFFFF
#: dynamic tags that come in pairs (a table and its size): one without the other made the
#: loader read a table of any size, or none
_PAIRED = ((DT_RELA, DT_RELASZ, "DT_RELA", "DT_RELASZ"),
           (DT_JMPREL, DT_PLTRELSZ, "DT_JMPREL", "DT_PLTRELSZ"),
           (DT_RELR, DT_RELRSZ, "DT_RELR", "DT_RELRSZ"),
           (DT_STRTAB, DT_STRSZ, "DT_STRTAB", "DT_STRSZ"))
#: filter libraries: the loader loads (and initialises) them together with the library
FILTER_TAGS = {0x7FFFFFFD: "DT_AUXILIARY", 0x7FFFFFFF: "DT_FILTER"}
#: dynamic tags whose code the dynamic loader runs on load or unload
RUN_TAGS = {12: "DT_INIT", 13: "DT_FINI", 25: "DT_INIT_ARRAY", 26: "DT_FINI_ARRAY",
            32: "DT_PREINIT_ARRAY"}
#: ELF machine numbers of the machines tecomp generates code for, and the relocation
#: type whose resolver the loader calls (IRELATIVE)
MACHINES = {62: "x86-64", 183: "AArch64"}
#: the ELF machine of each instruction set (:data:`tecomp.target.ISAS`)
ISA_MACHINES = {"x86-64": 62, "aarch64": 183}
IRELATIVE = {62: 37, 183: 1032}
_HOST_MACHINES = {"x86_64": 62, "amd64": 62, "aarch64": 183, "arm64": 183}
#: the libraries a library tecomp exports may need: what ``export_library`` links
#: (-lm -lpthread, the C library, libgcc_s where the driver adds it, the dynamic loader
#: itself), all of the C runtime a Python process has loaded already
SYSTEM_LIBRARIES = re.compile(r"(libc|libm|libpthread|libgcc_s)\.so(\.[0-9]+)*"
                              r"|ld-linux[A-Za-z0-9_.-]*\.so(\.[0-9]+)*")
#: the dynamic tags of a plain shared library (tables the loader reads, flags): every
#: other tag -- besides DT_NEEDED and those checked above -- makes a library refused
PLAIN_TAGS = frozenset({
    2, 3, 4, 5, 6, 7, 8, 9, 10, 11,   # PLTRELSZ PLTGOT HASH STRTAB SYMTAB RELA RELASZ RELAENT STRSZ SYMENT
    14, 16, 17, 18, 19, 20, 21, 23,   # SONAME SYMBOLIC REL RELSZ RELENT PLTREL DEBUG JMPREL
    24, 30, 34, 35, 36, 37,           # BIND_NOW FLAGS SYMTAB_SHNDX RELRSZ RELR RELRENT
    0x6FFFFEF5, 0x6FFFFEF6, 0x6FFFFEF7,                 # GNU_HASH TLSDESC_PLT TLSDESC_GOT
    0x6FFFFDF4, 0x6FFFFDF8, 0x6FFFFDFC,                 # GNU_FLAGS_1 CHECKSUM FEATURE_1
    0x6FFFFFF0, 0x6FFFFFF9, 0x6FFFFFFA, 0x6FFFFFFB,     # VERSYM RELACOUNT RELCOUNT FLAGS_1
    0x6FFFFFFC, 0x6FFFFFFD, 0x6FFFFFFE, 0x6FFFFFFF,     # VERDEF VERDEFNUM VERNEED VERNEEDNUM
})
#: processor-specific tags of a plain library, by ELF machine (x86-64: the IBT PLT)
PLAIN_MACHINE_TAGS = {62: frozenset({0x70000000, 0x70000001, 0x70000003})}
#: names of tags a library may have that tecomp's never do, for messages
_TAG_NAMES = {15: "DT_RPATH", 29: "DT_RUNPATH", 22: "DT_TEXTREL", 0x6FFFFEFC: "DT_AUDIT",
              0x6FFFFEFB: "DT_DEPAUDIT", 0x6FFFFEFA: "DT_CONFIG", 0x6FFFFEF9: "DT_GNU_LIBLIST",
              0x6FFFFEF8: "DT_GNU_CONFLICT", 0x7FFFFFFE: "DT_USED", **FILTER_TAGS, **RUN_TAGS}


@dataclass
class LibraryImage:
    """What :func:`inspect_library` found."""

    machine: int
    run_tags: Tuple[str, ...]        # what would run code when it is loaded or unloaded
    needed: Tuple[str, ...]          # DT_NEEDED: the libraries it needs
    search_paths: Tuple[str, ...]    # DT_RPATH, DT_RUNPATH
    section: Optional[bytes]         # the named section's contents, None if absent
    filters: Tuple[Tuple[str, str], ...] = ()   # (DT_FILTER or DT_AUXILIARY, library)
    other_tags: Tuple[str, ...] = () # tags outside PLAIN_TAGS and those above, by name
    exec_stack: bool = False         # asks for an executable stack
    #: every section with contents, by name (the first of a name)
    sections: Dict[str, bytes] = field(default_factory=dict)


def host_machine() -> Optional[int]:
    """The ELF machine number of this process's CPU, None if tecomp does not know it."""
    return _HOST_MACHINES.get(platform.machine().lower())


def inspect_library(data: bytes, where: str, section_name: str,
                    machine: Optional[int] = None) -> LibraryImage:
    """Check that ``data`` is a complete 64-bit little-endian ELF shared object for this
    machine (or for the ELF ``machine`` given, a key of :data:`MACHINES`) and read it (see
    the module docstring).  ``where`` names the file in messages."""
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
    host = host_machine() if machine is None else machine
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
    # a library with the named section (one tecomp wrote, or says so) is held to what the
    # linkers tecomp runs write: every part the loader trusts is checked (another is only
    # read, to be refused for what it is)
    strict = section_name in _sections(data, where, e_shoff, e_shnum, e_shstrndx, need)
    loads: List[Tuple[int, int, int]] = []      # (vaddr, file offset, file size)
    dynamics: List[Tuple[int, int, int]] = []   # PT_DYNAMIC: (vaddr, file offset, size)
    segments: List[Tuple[int, int, int, int]] = []   # PT_LOAD: (vaddr, memsz, flags, filesz)
    relro: List[Tuple[int, int]] = []           # PT_GNU_RELRO: (vaddr, memory size)
    has_tls = False
    exec_stack = True                           # the default without PT_GNU_STACK
    for k in range(e_phnum):
        p_type, p_flags, p_offset, p_vaddr, _, p_filesz, p_memsz, p_align = struct.unpack_from(
            "<IIQQQQQQ", data, e_phoff + 56 * k)
        if p_type == PT_GNU_STACK:
            exec_stack = bool(p_flags & PF_X)
        elif p_type == PT_LOAD:
            need(p_offset, p_filesz, f"loadable segment {k}")
            if strict:
                _check_segment(where, k, p_flags, p_offset, p_vaddr, p_filesz, p_memsz, p_align)
            loads.append((p_vaddr, p_offset, p_filesz))
            segments.append((p_vaddr, p_memsz, p_flags, p_filesz))
        elif p_type == PT_DYNAMIC:
            need(p_offset, p_filesz, "dynamic section")
            dynamics.append((p_vaddr, p_offset, p_filesz))
        elif p_type == PT_GNU_RELRO:
            relro.append((p_vaddr, p_memsz))
        elif p_type == PT_TLS:
            has_tls = True
    if strict:
        _check_layout(where, segments, relro)

    def at(vaddr: int, length: int, what: str) -> int:
        """The file offset of ``length`` bytes at address ``vaddr``, where the loader
        maps them."""
        for lo, off, n in loads:
            if lo <= vaddr and vaddr + length <= lo + n:
                return off + (vaddr - lo)
        raise LoadError(f"{where} is damaged: its {what} is not in the file; export it "
                        f"again")

    if len(dynamics) > 1:
        raise LoadError(f"{where} is damaged: it has {len(dynamics)} dynamic sections; export "
                        f"it again")
    dynamic: List[Tuple[int, int]] = []         # (tag, value)
    if dynamics:
        # read where the loader reads it: at its address, through the loadable segments
        vaddr, p_offset, p_filesz = dynamics[0]
        start = at(vaddr, p_filesz, "dynamic section")
        if start != p_offset:
            raise LoadError(f"{where} is damaged: its dynamic section is at two places; "
                            f"export it again")
        for off in range(start, start + p_filesz - 15, 16):
            tag, value = struct.unpack_from("<qQ", data, off)
            if tag == 0:
                break
            dynamic.append((tag, value))
    run_tags = sorted({RUN_TAGS[t] for t, _ in dynamic if t in RUN_TAGS})
    tags: Dict[int, int] = {}
    for t, v in dynamic:
        tags[t] = v         # the last of a tag counts, as for the loader

    def damaged(what: str) -> LoadError:
        return LoadError(f"{where} is damaged: {what}; export it again")

    for table, size_tag, name, size_name in _PAIRED if strict else ():
        if (table in tags) != (size_tag in tags):
            raise damaged(f"it has {name if table in tags else size_name} without "
                          f"{size_name if table in tags else name}")
    if DT_JMPREL in tags and tags.get(DT_PLTREL, DT_RELA) != DT_RELA:
        # (the loader asserts it and aborts the process)
        raise damaged(f"its PLT relocations are of kind {tags[DT_PLTREL]}, not RELA")
    if tags.get(DT_RELAENT, 24) != 24:
        raise damaged(f"its relocation entries are {tags[DT_RELAENT]} bytes, not 24")
    relocs: List[Tuple[int, int, int]] = []     # (offset, type, symbol)
    relocated: List[int] = []   # the symbols relocations refer to
    if IRELATIVE.get(e_machine) is not None:
        for table, size_tag in ((DT_RELA, DT_RELASZ), (DT_JMPREL, DT_PLTRELSZ)):
            if table in tags and tags.get(size_tag, 0):
                n = tags[size_tag]
                start = at(tags[table], n, "relocation table")
                for off in range(start, start + n - 23, 24):
                    r_offset, info = struct.unpack_from("<QQ", data, off)
                    if info & 0xFFFFFFFF == IRELATIVE[e_machine]:
                        run_tags.append("IFUNC resolvers (IRELATIVE relocations)")
                    relocated.append(info >> 32)
                    relocs.append((r_offset, info & 0xFFFFFFFF, info >> 32))
    if _ifunc_symbols(data, where, tags, relocated, at):
        run_tags.append("IFUNC resolvers (STT_GNU_IFUNC symbols)")
    if strict and tags.get(DT_RELRSZ):
        if tags.get(DT_RELRENT, 8) != 8:
            raise damaged(f"its relative relocation entries are {tags[DT_RELRENT]} bytes, "
                          f"not 8")
        relocs += _relr(data, at(tags[DT_RELR], tags[DT_RELRSZ], "relocation table"),
                        tags[DT_RELRSZ], e_machine)
    count = _symbol_count(data, where, tags, relocated, at)
    if strict:
        _check_relocations(where, e_machine, relocs, segments,
                           _hashed_count(data, where, tags, at), [(v, n) for v, _, n in dynamics],
                           tags.get(DT_PLTGOT))
        _check_symbols(data, where, tags, count, segments, has_tls, at)
    _check_versions(data, where, tags, dynamic, count, at)
    names = _strings(data, where, tags, dynamic, at)
    sections = _sections(data, where, e_shoff, e_shnum, e_shstrndx, need)
    plt = _section_place(data, e_shoff, e_shnum, e_shstrndx, ".rela.plt")
    if strict and plt is not None and DT_JMPREL in tags and \
            plt != (tags[DT_JMPREL], tags[DT_PLTRELSZ]):
        # (the loader reads the table the dynamic section says; one shorter than the
        # linker's left pointers unrelocated, which the first call through them followed)
        raise damaged(f"its PLT relocations ({tags[DT_PLTRELSZ]} bytes at "
                      f"{tags[DT_JMPREL]:#x}) are not its .rela.plt section ({plt[1]} bytes "
                      f"at {plt[0]:#x})")
    plain = PLAIN_TAGS | PLAIN_MACHINE_TAGS.get(e_machine, frozenset())
    checked = {DT_NEEDED, DT_RPATH, DT_RUNPATH, *FILTER_TAGS, *RUN_TAGS}
    other = sorted({t for t, _ in dynamic if t not in plain and t not in checked})
    return LibraryImage(
        e_machine, tuple(sorted(set(run_tags))),
        tuple(names(v) for t, v in dynamic if t == DT_NEEDED),
        tuple(names(v) for t, v in dynamic if t in (DT_RPATH, DT_RUNPATH)),
        sections.get(section_name),
        filters=tuple((FILTER_TAGS[t], names(v)) for t, v in dynamic if t in FILTER_TAGS),
        other_tags=tuple(_TAG_NAMES.get(t, f"dynamic tag {t:#x}") for t in other),
        exec_stack=exec_stack, sections=sections)


def _strings(data: bytes, where: str, tags: Dict[int, int], dynamic,
             at: Callable) -> Callable[[int], str]:
    """A function: offset in the dynamic string table -> the string there."""
    if not any(t in (DT_NEEDED, DT_RPATH, DT_RUNPATH) or t in FILTER_TAGS for t, _ in dynamic):
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


def read_sections(data: bytes, where: str) -> Dict[str, bytes]:
    """The contents of the sections of the 64-bit little-endian ELF file ``data``, by
    name (the first of a name; read as data, nothing else of the file is checked): what
    a library says of itself, read before ``dlopen`` runs any of it.  A LoadError naming
    ``where`` for a file that is not such an ELF file or whose section table or sections
    lie outside it."""
    if len(data) < 64 or data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise LoadError(f"{where} is not a 64-bit little-endian ELF file")
    (e_shoff,) = struct.unpack_from("<Q", data, 40)
    e_shentsize, e_shnum, e_shstrndx = struct.unpack_from("<HHH", data, 58)
    if e_shentsize not in (0, 64):
        raise LoadError(f"{where} is damaged: its ELF header gives sections of "
                        f"{e_shentsize} bytes")

    def need(offset: int, length: int, what: str) -> None:
        if offset < 0 or length < 0 or offset + length > len(data):
            raise LoadError(f"{where} is truncated or damaged: its {what} lies at bytes "
                            f"[{offset}, {offset + length}) of a {len(data)}-byte file")

    return _sections(data, where, e_shoff, e_shnum, e_shstrndx, need)


def _sections(data: bytes, where: str, e_shoff: int, e_shnum: int, e_shstrndx: int,
              need) -> Dict[str, bytes]:
    """name -> contents of every section with contents (no section table: none)."""
    if e_shoff == 0 or e_shnum == 0:
        return {}
    need(e_shoff, e_shnum * 64, "section header table")
    heads = [struct.unpack_from("<IIQQQQIIQQ", data, e_shoff + 64 * k) for k in range(e_shnum)]
    if not 0 <= e_shstrndx < e_shnum:
        raise LoadError(f"{where} is damaged: no section name table; export it again")
    _, _, _, _, str_off, str_size, _, _, _, _ = heads[e_shstrndx]
    need(str_off, str_size, "section name table")
    names = data[str_off:str_off + str_size]
    out: Dict[str, bytes] = {}
    for k, (sh_name, sh_type, _, _, sh_offset, sh_size, _, _, _, _) in enumerate(heads):
        if sh_type == SHT_NOBITS:
            continue
        end = names.find(b"\0", sh_name)
        name = names[sh_name:end if end >= 0 else len(names)].decode("ascii", "replace")
        need(sh_offset, sh_size, f"section {name!r:.40}")
        if sh_name < len(names):
            out.setdefault(name, data[sh_offset:sh_offset + sh_size])
    return out


def _section_place(data: bytes, e_shoff: int, e_shnum: int, e_shstrndx: int,
                   name: str) -> Optional[Tuple[int, int]]:
    """(address, size) of the first section called ``name`` (the section table checked by
    :func:`_sections`), None if there is none."""
    if e_shoff == 0 or e_shnum == 0:
        return None
    heads = [struct.unpack_from("<IIQQQQIIQQ", data, e_shoff + 64 * k) for k in range(e_shnum)]
    str_off, str_size = heads[e_shstrndx][4], heads[e_shstrndx][5]
    want = name.encode() + b"\0"
    for h in heads:
        if h[0] < str_size and data[str_off + h[0]:str_off + h[0] + len(want)] == want:
            return h[3], h[5]
    return None


def _ifunc_symbols(data: bytes, where: str, tags: Dict[int, int], relocated: List[int],
                   at: Callable) -> bool:
    """Whether a symbol the loader can reach -- through a relocation, or by name through
    the hash tables (``dlsym``) -- is an IFUNC defined in the library: looking it up
    calls its resolver.  The symbol table is the one ``DT_SYMTAB`` gives (what the loader
    reads; the section headers may say otherwise)."""
    count = _symbol_count(data, where, tags, relocated, at)
    if count == 0:
        return False
    if DT_SYMTAB not in tags or tags.get(DT_SYMENT, 24) != 24:
        raise LoadError(f"{where} is damaged: it has symbols but no symbol table of 24-byte "
                        f"entries; export it again")
    start = at(tags[DT_SYMTAB], 24 * count, "symbol table")
    for st_name, st_info, st_other, st_shndx, _, _ in struct.iter_unpack(
            "<IBBHQQ", memoryview(data)[start:start + 24 * count]):
        if st_info & 0xF == STT_GNU_IFUNC and st_shndx != 0:
            return True
    return False


def _symbol_count(data: bytes, where: str, tags: Dict[int, int], relocated: List[int],
                  at: Callable) -> int:
    """How many symbols the loader may read: those relocations refer to and those the
    hash tables cover."""
    count = max(relocated, default=-1) + 1
    if DT_HASH in tags:      # nbucket, nchain: nchain symbols
        count = max(count, struct.unpack_from("<II", data, at(tags[DT_HASH], 8, "hash table"))[1])
    if DT_GNU_HASH in tags:
        count = max(count, _gnu_hash_count(data, where, tags[DT_GNU_HASH], at))
    return count


def _check_segment(where: str, k: int, flags: int, offset: int, vaddr: int, filesz: int,
                   memsz: int, align: int) -> None:
    """A LoadError unless loadable segment ``k`` can be mapped as it says: the loader
    zero-fills the memory past the file's part, which it can only write in a writable
    segment (a read-only one with more memory than file crashed ``dlopen``)."""
    what = None
    if memsz < filesz:
        what = f"takes {memsz} bytes of memory for {filesz} of the file"
    elif memsz > filesz and not flags & PF_W:
        what = f"is read-only but takes {memsz - filesz} bytes of memory past the file's"
    elif memsz > 1 << 40 or vaddr > 1 << 47:
        what = f"lies at {vaddr:#x}, {memsz} bytes long"
    elif align & (align - 1) or (align > 1 and (vaddr - offset) % align):
        what = f"is aligned to {align} at address {vaddr:#x} and file offset {offset:#x}"
    if what:
        raise LoadError(f"{where} is damaged: its loadable segment {k} {what}; export it "
                        f"again")


def _check_layout(where: str, segments: List[Tuple[int, int, int, int]],
                  relro: List[Tuple[int, int]]) -> None:
    """A LoadError unless the loadable segments follow one another in memory without
    overlapping, and the part made read-only after relocation (PT_GNU_RELRO) lies in a
    writable one (one mapped over another, or a read-only part of gigabytes, crashed
    ``dlopen``)."""
    end = 0
    for k, (vaddr, memsz, _, _) in enumerate(segments):
        if vaddr < end:
            raise LoadError(f"{where} is damaged: its loadable segment {k} at {vaddr:#x} "
                            f"overlaps the one before it (which ends at {end:#x}); export it "
                            f"again")
        end = vaddr + memsz
    for vaddr, memsz in relro:
        # (at the start of its segment, within the part read from the file up to its last
        # page -- lld pads it so --: one moved over the zero-filled variables made their
        # first write crash)
        if not any(lo == vaddr and vaddr + memsz <= min(lo + n, -(-(lo + filesz) // 4096) * 4096)
                   and flags & PF_W for lo, n, flags, filesz in segments):
            raise LoadError(f"{where} is damaged: the part it makes read-only after "
                            f"relocation ({memsz} bytes at {vaddr:#x}) is not the start of a "
                            f"writable segment's part read from the file; export it again")


def _in_segment(segments, addr: int, size: int, flag: int) -> bool:
    """Whether ``size`` bytes at ``addr`` lie in one loadable segment with ``flag``."""
    return any(lo <= addr and addr + size <= lo + n and (flags & flag) == flag
               for lo, n, flags, _ in segments)


def _check_relocations(where: str, machine: int, relocs, segments, symbols: Optional[int],
                       dynamic: List[Tuple[int, int]], pltgot: Optional[int]) -> None:
    """A LoadError unless every relocation is of a kind tecomp's libraries have, writes
    8 bytes inside a writable segment and names a symbol of the table (``symbols``: its
    length where the hash tables give it): the loader writes where a relocation says,
    with the symbol's value (a damaged one crashed ``dlopen``)."""
    kinds = RELOCATION_TYPES.get(machine)
    if kinds is None:
        return
    seen = set()
    # the PLT's slots: after the three words the ABI reserves at DT_PLTGOT, one per
    # JUMP_SLOT relocation (x86-64 and AArch64 alike)
    slots = sum(1 for _, kind, _ in relocs if kind in _JUMP_SLOT)
    plt_slots = None if pltgot is None else (pltgot + 24, pltgot + 24 + 8 * slots)
    for offset, kind, sym in relocs:
        what = None
        if kind not in kinds:
            what = f"a relocation of type {kind}, which tecomp's libraries never have"
        elif not _in_segment(segments, offset, 8, PF_W):
            what = f"a relocation writes at {offset:#x}, outside its writable segments"
        elif offset % 8 or offset in seen or any(lo <= offset < lo + n for lo, n in dynamic):
            # (a pointer half over another, one place twice -- another one's place then
            # not relocated --, or the loader's own table)
            what = (f"a relocation writes at {offset:#x}, not a place of its own for a "
                    f"pointer")
        elif kind in _JUMP_SLOT and plt_slots is not None and not (
                plt_slots[0] <= offset < plt_slots[1]):
            # (a slot left unrelocated sent the first call through it anywhere)
            what = (f"a PLT relocation writes at {offset:#x}, outside the PLT's slots "
                    f"[{plt_slots[0]:#x}, {plt_slots[1]:#x})")
        elif kind in _SYMBOL_FREE[machine]:
            what = f"a relocation of type {kind} names symbol {sym}" if sym else None
        elif sym == 0 or (symbols is not None and sym >= symbols):
            what = f"a relocation names symbol {sym}, not one of its {symbols} symbols"
        if what:
            raise LoadError(f"{where} is damaged: {what}; export it again")
        seen.add(offset)


def _relr(data: bytes, start: int, size: int, machine: int) -> List[Tuple[int, int, int]]:
    """The places a DT_RELR table relocates, as (offset, RELATIVE, 0) entries: an even
    entry is an address, an odd one a bitmap of the 63 words after the last."""
    out: List[Tuple[int, int, int]] = []
    relative = min(_SYMBOL_FREE.get(machine, {0}))
    base = 0
    for (e,) in struct.iter_unpack("<Q", data[start:start + size - size % 8]):
        if not e & 1:
            out.append((e, relative, 0))
            base = e + 8
        else:
            out += [(base + 8 * i, relative, 0) for i in range(63) if e >> (i + 1) & 1]
            base += 63 * 8
        if len(out) > 1 << 20:
            break
    return out


def _hashed_count(data: bytes, where: str, tags: Dict[int, int], at: Callable
                  ) -> Optional[int]:
    """The length of the symbol table the hash tables give, None without them."""
    if DT_HASH in tags:
        return struct.unpack_from("<II", data, at(tags[DT_HASH], 8, "hash table"))[1]
    if DT_GNU_HASH in tags:
        return _gnu_hash_count(data, where, tags[DT_GNU_HASH], at)
    return None


def _check_symbols(data: bytes, where: str, tags: Dict[int, int], count: int, segments,
                   has_tls: bool, at: Callable) -> None:
    """A LoadError unless every symbol the loader may read has its name in the string
    table, a kind it can bind (no thread-local one without a TLS segment) and, where the
    library defines it, lies in a loadable segment -- a function in an executable one
    (the loader binds calls to it: one at address 0 ran the ELF header)."""
    if count == 0 or DT_SYMTAB not in tags:
        return
    strsz = tags.get(DT_STRSZ, 0)
    start = at(tags[DT_SYMTAB], 24 * count, "symbol table")
    table = struct.iter_unpack("<IBBHQQ", memoryview(data)[start:start + 24 * count])
    for k, (st_name, st_info, st_other, st_shndx, st_value, st_size) in enumerate(table):
        kind, bind = st_info & 0xF, st_info >> 4
        what = None
        if st_name >= max(strsz, 1):
            what = f"its name at {st_name}, outside the string table"
        elif bind > 2 or kind in (5, 7, 8, 9) or kind > 10 or (kind == STT_TLS and not has_tls):
            what = f"kind {kind} and binding {bind}, which the loader cannot bind here"
        elif k and st_shndx == 0 and st_other & 3:
            # (a hidden or protected symbol is never looked up elsewhere: bound to nothing)
            what = f"visibility {st_other & 3} but no definition"
        elif st_shndx not in (0, SHN_ABS) and kind in (1, 2) and not _in_segment(
                segments, st_value, max(st_size, 1), PF_X if kind == 2 else 0):
            what = (f"a {'function' if kind == 2 else 'variable'} at {st_value:#x}, outside "
                    f"its {'executable ' if kind == 2 else ''}segments")
        if what:
            raise LoadError(f"{where} is damaged: its symbol {k} has {what}; export it "
                            f"again")


def _check_versions(data: bytes, where: str, tags: Dict[int, int], dynamic, count: int,
                    at: Callable) -> None:
    """A LoadError unless the symbol versions are whole: the loader indexes its table of
    versions (those ``DT_VERNEED`` and ``DT_VERDEF`` declare) with each symbol's entry of
    ``DT_VERSYM`` unchecked, and reads their names in the string table (a damaged one
    made ``dlopen`` crash)."""
    if DT_VERSYM not in tags or count == 0:
        return

    def damaged(what: str) -> LoadError:
        return LoadError(f"{where} is damaged: {what}; export it again")

    strsz = tags.get(DT_STRSZ, 0)
    needed = {_c_string(data, tags, v, at) for t, v in dynamic if t == DT_NEEDED}
    known = {0, 1}          # local and global: no version table entry
    for tag, num_tag, size, what in ((DT_VERNEED, DT_VERNEEDNUM, 16, "version needs"),
                                     (DT_VERDEF, DT_VERDEFNUM, 20, "version definitions")):
        if tag not in tags:
            continue
        addr, num = tags[tag], tags.get(num_tag, 0)
        if num > 4096:
            raise damaged(f"it declares {num} {what}")
        for k in range(4097):
            # (the loader follows the records' links to the one whose link is 0, whatever
            # the count says: one linked past them read anything as a record)
            if k == 4096 or (k >= num and num):
                raise damaged(f"its {what} are linked past the {num} it declares")
            off = at(addr, size, what)
            if tag == DT_VERNEED:
                version, cnt, file, aux, nxt = struct.unpack_from("<HHIII", data, off)
                names = [file]
            else:
                version, _, ndx, cnt, _, aux, nxt = struct.unpack_from("<HHHHIII", data, off)
                known.add(ndx & 0x7FFF)
                names = []
            if version != 1 or cnt > 4096:
                raise damaged(f"its {what} are not version 1 records")
            a = addr + aux
            for _ in range(cnt):
                aoff = at(a, 16 if tag == DT_VERNEED else 8, what)
                if tag == DT_VERNEED:
                    _, _, other, name, anext = struct.unpack_from("<IHHII", data, aoff)
                    known.add(other & 0x7FFF)
                else:
                    name, anext = struct.unpack_from("<II", data, aoff)
                names.append(name)
                a += anext
            if anext:   # (the loader follows the links, not the count)
                raise damaged(f"its {what} are linked past the {cnt} names they declare")
            if any(n >= strsz for n in names):
                raise damaged(f"its {what} name strings outside the string table")
            if tag == DT_VERNEED and _c_string(data, tags, names[0], at) not in needed:
                # (the loader asserts that the library a version is needed from is one it
                # loaded, and aborts the process)
                raise damaged("its version needs name a library it does not need")
            if nxt == 0:
                break
            addr += nxt
    start = at(tags[DT_VERSYM], 2 * count, "symbol version table")
    bad = sorted({v & 0x7FFF for v in struct.unpack_from(f"<{count}H", data, start)} - known)
    if bad:
        raise damaged(f"its symbol version table names versions {bad[:4]} that it does not "
                      f"declare")


def _c_string(data: bytes, tags: Dict[int, int], off: int, at: Callable) -> bytes:
    """The string at ``off`` in the dynamic string table (b"" where there is none)."""
    if DT_STRTAB not in tags or off >= tags.get(DT_STRSZ, 0):
        return b""
    start = at(tags[DT_STRTAB], tags[DT_STRSZ], "dynamic string table")
    end = data.find(b"\0", start + off, start + tags[DT_STRSZ])
    return data[start + off:end if end >= 0 else start + tags[DT_STRSZ]]


def _gnu_hash_count(data: bytes, where: str, addr: int, at: Callable) -> int:
    """The number of symbols a ``DT_GNU_HASH`` table covers (the end of its last chain)."""
    nbuckets, symoffset, bloom_size, _ = struct.unpack_from("<IIII", data,
                                                           at(addr, 16, "GNU hash table"))
    buckets = addr + 16 + 8 * bloom_size
    starts = struct.unpack_from(f"<{nbuckets}I", data, at(buckets, 4 * nbuckets,
                                                        "GNU hash table"))
    if nbuckets == 0 or any(0 < b < symoffset for b in starts):
        # (the loader divides by the number of buckets, and reads the chain of such a
        # bucket before the table)
        raise LoadError(f"{where} is damaged: its GNU hash table has no buckets or one "
                        f"that starts before its first hashed symbol; export it again")
    top = max(starts, default=0)
    if top < symoffset:
        return symoffset
    chains = buckets + 4 * nbuckets
    while not struct.unpack_from("<I", data,
                                 at(chains + 4 * (top - symoffset), 4, "GNU hash table"))[0] & 1:
        top += 1
    return top + 1


def check_plain(image: LibraryImage, where: str) -> None:
    """Raise LoadError unless loading the library runs none of its code and brings in no
    library but the C runtime's, as every library tecomp exports."""
    if image.run_tags:
        raise LoadError(
            f"{where} has code that would run when it is loaded or unloaded "
            f"({', '.join(image.run_tags)}); libraries tecomp exports have none, so this "
            f"one was not written by tecomp or was changed since: export it again")
    others = [n for n in image.needed if not SYSTEM_LIBRARIES.fullmatch(n)]
    if others or image.search_paths or image.filters:
        what = ", ".join(others + [f"search path {p}" for p in image.search_paths] +
                         [f"filter library {lib} ({tag})" for tag, lib in image.filters])
        raise LoadError(
            f"{where} asks the dynamic loader for more than the C runtime ({display(what)[:300]}); "
            f"libraries tecomp exports need only libc, libm and libpthread, so this one was "
            f"not written by tecomp or was changed since: export it again")
    if image.other_tags:
        raise LoadError(
            f"{where} has dynamic entries libraries tecomp exports never have "
            f"({', '.join(image.other_tags)[:300]}), which may make the dynamic loader do "
            f"more than map it, so this one was not written by tecomp or was changed since: "
            f"export it again")
    if image.exec_stack:
        raise LoadError(
            f"{where} asks for an executable stack (its PT_GNU_STACK program header is "
            f"missing or has the execute bit): loading it would make every thread's stack "
            f"executable; libraries tecomp exports never ask for one, so this one was not "
            f"written by tecomp or was changed since: export it again")
