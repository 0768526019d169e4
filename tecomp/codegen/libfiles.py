"""The files of the libraries tecomp writes and loads: the paths users give, atomic
writes, and sha256 sidecars (a library is loaded only when the file beside it holds its
digest).

A library tecomp writes -- one the CUDA emulation caches, one ``Module.export_library``
exports -- gets a sidecar, ``<library>.sha256``, written *after* the library: one line
``<hex digest>  <file name>`` (the format of ``sha256sum``, so ``sha256sum -c
kernels.so.sha256`` checks it too).  A reader hashes the library and compares before it
hands the file to ``dlopen``: a truncated, half-written or replaced file is refused
(mapping a truncated library can kill the process with SIGBUS) instead of being run.

This is integrity, not authenticity: whoever can write the library can write its
sidecar too.  Where libraries come from is the caller's trust decision (docs/runtime.md).
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Optional, Type, Union

__all__ = ["file_path", "digest_bytes", "digest_file", "sidecar_path", "read_sidecar",
           "sidecar_matches", "write_atomic", "write_sidecar", "cache_root", "private_dir",
           "tool_identity"]

#: a sidecar larger than this is not one (read no further)
_MAX_SIDECAR_BYTES = 4096

PathLike = Union[str, os.PathLike]


def file_path(path, what: str, error: Type[Exception]) -> str:
    """A user's ``path`` (str or os.PathLike) as a str; ``error`` (its message starting
    with ``what``, the function that was given it) for anything else, bytes, an empty
    path or one with a NUL.  The path is a name to open, never part of a command line."""
    try:
        p = os.fspath(path)
    except TypeError:
        raise error(f"{what} expects a file path (str or os.PathLike), got "
                    f"{type(path).__name__}") from None
    if not isinstance(p, str):
        raise error(f"{what} expects the path as str, got {type(p).__name__}: decode it "
                    f"(os.fsdecode)")
    if not p or "\0" in p:
        raise error(f"{what}: {p!r:.80} is not a file path")
    return p


def digest_bytes(data: bytes) -> str:
    """The sha256 hex digest of ``data``."""
    return hashlib.sha256(data).hexdigest()


def digest_file(path: PathLike) -> str:
    """The sha256 hex digest of the file at ``path``."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def sidecar_path(library: PathLike) -> Path:
    """``<library>.sha256``, beside the library."""
    p = Path(library)
    return p.with_name(p.name + ".sha256")


def read_sidecar(library: PathLike) -> Optional[str]:
    """The digest the sidecar of ``library`` records (its first word, lower case), or
    None when there is no readable sidecar."""
    try:
        with open(sidecar_path(library), "rb") as f:
            raw = f.read(_MAX_SIDECAR_BYTES + 1)
    except OSError:
        return None
    if len(raw) > _MAX_SIDECAR_BYTES:
        return ""
    words = raw.decode("ascii", "replace").split()
    return words[0].lower() if words else ""


def sidecar_matches(library: PathLike) -> bool:
    """Whether ``library`` is exactly what was written: its sidecar records its digest."""
    want = read_sidecar(library)
    if not want:
        return False
    try:
        return want == digest_file(library)
    except OSError:
        return False


def write_atomic(path: PathLike, data: Union[str, bytes], mode: int = 0o644) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same directory and
    ``os.replace``: a reader sees the old file or the new one, never a part."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix="." + path.name[:64] + ".", dir=str(path.parent))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_sidecar(library: PathLike, digest: Optional[str] = None) -> None:
    """Write the sidecar of ``library`` (its digest, computed unless given); write it
    after the library, so that a reader never sees a new sidecar beside an old file."""
    if digest is None:
        digest = digest_file(library)
    name = Path(library).name
    # the name is for sha256sum -c only (readers take the first word): left out where
    # it would not stay one line of plain text
    line = f"{digest}  {name}\n" if name.isprintable() and name.strip() == name else \
        f"{digest}\n"
    write_atomic(sidecar_path(library), line)


def cache_root() -> Path:
    """Where tecomp caches what it compiles: ``$TECOMP_CACHE_DIR``, by default
    ``~/.cache/tecomp``."""
    root = os.environ.get("TECOMP_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache",
                                                              "tecomp")
    return Path(root)


def private_dir(d: Path, what: str, error: Type[Exception]) -> Path:
    """``d``, created ``0700`` if missing; ``error`` unless it belongs to this user and
    nobody else may write to it.  A cache of ``what`` holds code this process loads and
    runs: whoever can write there could plant some (with a matching sha256 sidecar)."""
    try:
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = d.stat()
    except OSError as e:
        raise error(f"cannot use {d} as {what} ({e.strerror}); point TECOMP_CACHE_DIR at a "
                    "writable directory") from None
    if st.st_uid != os.getuid() or st.st_mode & 0o022:
        raise error(
            f"{what} {d} is writable by other users (mode {st.st_mode & 0o777:o}, owner uid "
            f"{st.st_uid}): code planted there would be loaded and run; make it private "
            f"(chmod 700 {d}) or point TECOMP_CACHE_DIR at a directory of your own")
    return d


_IDENTITY: dict = {}
_IDENTITY_LOCK = threading.Lock()


def tool_identity(exe: str) -> str:
    """``exe`` and what its ``--version`` prints (asked once per process): part of the
    cache key of what it compiles."""
    with _IDENTITY_LOCK:
        ident = _IDENTITY.get(exe)
    if ident is None:
        try:
            out = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout
        except OSError:
            out = ""
        ident = f"{exe}\n{out.strip()}"
        with _IDENTITY_LOCK:
            _IDENTITY[exe] = ident
    return ident
