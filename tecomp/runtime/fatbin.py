"""Just enough of NVIDIA's fatbin container to know what GPU code a library holds.

A fatbin (what ``nvcc -fatbin`` writes and ``cuModuleLoadData`` takes) is a 16-byte
header -- magic ``0xBA55ED50``, version 1, header size 16, then the size of what
follows -- and a list of entries, each a header (its kind: 1 PTX, 2 ELF cubin; its
header and payload sizes; the architecture, ``80`` for sm_80 / compute_80) and its
payload (a cubin is an ELF file for machine ``EM_CUDA``; PTX may be compressed).

:func:`read_fatbin` reads the entries as data, every offset checked against the bytes
(a damaged image is the caller's error, never a ``struct`` exception), and
:func:`pick_code` says which entry the driver would run on a device of a given compute
capability: a cubin of the same major version and a minor version at most the
device's, else PTX of a version at most the device's (which the driver compiles).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple, Type

__all__ = ["FATBIN_MAGIC", "FatbinEntry", "read_fatbin", "pick_code", "describe_code"]

FATBIN_MAGIC = 0xBA55ED50
#: entry kinds
PTX, CUBIN = 1, 2
#: the ELF machine of a cubin
EM_CUDA = 190
_HEADER = struct.Struct("<IHHQ")          # magic, version, header size, payload size
_ENTRY = struct.Struct("<HHIQ")           # kind, version, header size, payload size


@dataclass(frozen=True)
class FatbinEntry:
    """One image of a fatbin: ``kind`` ``"cubin"`` or ``"ptx"`` and its architecture
    (``(8, 0)``)."""

    kind: str
    arch: Tuple[int, int]
    payload: bytes
    specific: bool = False   # architecture-specific features (sm_90a: wgmma)

    @property
    def name(self) -> str:
        """``sm_80`` for a cubin, ``compute_90`` for PTX (``sm_90a`` / ``compute_90a`` for
        code of architecture-specific features)."""
        return (("sm_%d%d" if self.kind == "cubin" else "compute_%d%d") % self.arch
                + ("a" if self.specific else ""))


def read_fatbin(data: bytes, where: str, error: Type[Exception]) -> List[FatbinEntry]:
    """The entries of the fatbin ``data``; ``error`` (naming ``where``) when it is not one
    or is damaged."""
    def bad(what: str) -> Exception:
        return error(f"{where}: its GPU code is not a valid fatbin ({what}); export the "
                     f"library again")

    if len(data) < _HEADER.size:
        raise bad(f"{len(data)} bytes")
    magic, version, hsize, size = _HEADER.unpack_from(data, 0)
    if magic != FATBIN_MAGIC or version != 1 or hsize != _HEADER.size:
        raise bad(f"magic {magic:#x}, version {version}")
    if hsize + size > len(data):
        raise bad(f"it says {size} bytes follow its header, {len(data) - hsize} do")
    out: List[FatbinEntry] = []
    off, end = hsize, hsize + size
    while off < end:
        if off + 32 > end:
            raise bad(f"a truncated entry header at byte {off}")
        kind, _, ehsize, psize = _ENTRY.unpack_from(data, off)
        arch = struct.unpack_from("<I", data, off + 28)[0]
        if kind not in (PTX, CUBIN) or ehsize < 32 or off + ehsize + psize > end:
            raise bad(f"entry at byte {off}: kind {kind}, {psize} bytes")
        payload = data[off + ehsize:off + ehsize + psize]
        if kind == CUBIN and (payload[:4] != b"\x7fELF" or len(payload) < 20
                              or struct.unpack_from("<H", payload, 18)[0] != EM_CUDA):
            raise bad(f"the cubin at byte {off} is not a CUDA ELF file")
        # (the entry's flags at byte 40: bit 20 set for architecture-specific code, as nvcc
        # 12-13 write sm_90a / compute_90a entries)
        flags = struct.unpack_from("<I", data, off + 40)[0] if ehsize >= 44 else 0
        out.append(FatbinEntry("cubin" if kind == CUBIN else "ptx",
                               (arch // 10, arch % 10), payload, bool(flags >> 20 & 1)))
        off += ehsize + psize
    return out


def pick_code(entries: Sequence[FatbinEntry],
              capability: Tuple[int, int]) -> Optional[FatbinEntry]:
    """The entry the driver runs on a device of compute ``capability``: the newest cubin
    of its major version not newer than it, else the newest PTX not newer than it (JIT
    compiled); None when there is none."""
    cubins = [e for e in entries if e.kind == "cubin" and e.arch[0] == capability[0]
              and e.arch[1] <= capability[1]]
    if cubins:
        return max(cubins, key=lambda e: e.arch)
    ptx = [e for e in entries if e.kind == "ptx" and e.arch <= tuple(capability)]
    return max(ptx, key=lambda e: e.arch) if ptx else None


def describe_code(entries: Sequence[FatbinEntry]) -> str:
    """``sm_80, sm_90 and PTX compute_90``: what a fatbin holds, for messages."""
    cubins = sorted({e.arch for e in entries if e.kind == "cubin"})
    ptx = sorted({e.arch for e in entries if e.kind == "ptx"})
    parts = ["sm_%d%d" % a for a in cubins] + ["PTX compute_%d%d" % a for a in ptx]
    return ", ".join(parts) or "no code"
