"""The files of the libraries tecomp writes and loads: the paths users give, atomic
writes, and sha256 sidecars (a library is loaded only when the file beside it holds its
digest).

A library tecomp writes -- one the CUDA emulation caches, one ``Module.export_library``
exports -- gets a sidecar, ``<library>.sha256``, written *after* the library: one line
``<hex digest>  <file name>`` (the format of ``sha256sum``, so ``sha256sum -c
kernels.so.sha256`` checks it too).  A reader hashes the library and compares before it
hands the file to ``dlopen``: a truncated, half-written or replaced file is refused
(mapping a truncated library can kill the process with SIGBUS) instead of being run.
:func:`write_with_sidecar` writes a library and its sidecar together (both or neither).

Files are read only when they are regular files, through :func:`open_regular` and
:func:`read_fd`, which bound what they read: a FIFO (whose read blocks until a writer
comes), a device (``/dev/zero`` never ends) or a file of gigabytes where a sidecar
should be is refused, not read.

This is integrity, not authenticity: whoever can write the library can write its
sidecar too.  Where libraries come from is the caller's trust decision (docs/runtime.md).
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shutil
import stat
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Optional, Type, Union

__all__ = ["file_path", "digest_bytes", "digest_file", "sidecar_path", "read_sidecar",
           "sidecar_digest", "sidecar_matches", "special_file", "write_atomic", "write_sidecar",
           "write_with_sidecar", "open_regular", "read_fd", "FileRefused", "cache_root",
           "private_dir", "tool_identity", "dlopen_fd"]

#: a sidecar larger than this is not one (read no further)
MAX_SIDECAR_BYTES = 4096
_DIGEST = re.compile(r"[0-9a-f]{64}")

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


class FileRefused(Exception):
    """A file tecomp was to read and did not: ``reason`` says why, in words that follow
    the file's name in a message ("is a FIFO, not a regular file")."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def _not_regular(mode: int) -> FileRefused:
    if stat.S_ISDIR(mode):
        return FileRefused("is a directory")
    for test, what in ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return FileRefused(f"is {what}, not a regular file")
    return FileRefused("is not a regular file")


def special_file(path: PathLike) -> str:
    """How ``path`` names a device, a FIFO or a socket, or a symbolic link to one, in
    words that follow its name (``"is a FIFO (named pipe), not a regular file"``); ""
    for nothing there, a regular file, a directory, or a link to one of them.  A file
    tecomp writes is renamed onto its path: such a file would be replaced (a device node
    too), and one is never opened to be written either (a FIFO blocks until read)."""
    for look in (os.lstat, os.stat):
        try:
            mode = look(path).st_mode
        except (OSError, ValueError):
            continue
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
            why = _not_regular(mode).reason
            return why if look is os.lstat else \
                f"is a symbolic link to {os.path.realpath(path)!r:.120}, which {why}"
    return ""


def open_regular(path: PathLike, limit: int, follow: bool = True) -> int:
    """A read-only descriptor of the regular file ``path`` (symbolic links followed, or,
    with ``follow=False``, refused), at most ``limit`` bytes long.  FileNotFoundError
    when there is none; FileRefused for anything else that is not such a file -- a FIFO,
    a device or a directory is never read (it could block forever or never end), and one
    is opened only non-blocking."""
    try:
        st = os.stat(path) if follow else os.lstat(path)
    except FileNotFoundError:
        raise
    except OSError as e:
        raise FileRefused(f"cannot be read ({e.strerror})") from None
    if stat.S_ISLNK(st.st_mode):
        raise FileRefused("is a symbolic link, not a regular file")
    if not stat.S_ISREG(st.st_mode):
        raise _not_regular(st.st_mode)
    flags = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)
    if not follow:
        flags |= getattr(os, "O_NOFOLLOW", 0)   # (a link put there since the lstat)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise
    except OSError as e:
        raise FileRefused(f"cannot be opened ({e.strerror})") from None
    try:
        st = os.fstat(fd)   # what was opened, which may not be what was looked at
        if not stat.S_ISREG(st.st_mode):
            raise _not_regular(st.st_mode)
        if st.st_size > limit:
            raise FileRefused(f"is {st.st_size} bytes, more than {limit}")
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_fd(fd: int, limit: int) -> bytes:
    """The contents of the regular file ``fd`` reads, from its current position;
    FileRefused if it holds (or grows to) more than ``limit`` bytes."""
    chunks, n = [], 0
    while True:
        try:
            b = os.read(fd, min(1 << 20, limit + 1 - n))
        except OSError as e:
            raise FileRefused(f"cannot be read ({e.strerror})") from None
        if not b:
            return b"".join(chunks)
        chunks.append(b)
        n += len(b)
        if n > limit:
            raise FileRefused(f"holds more than {limit} bytes")


def digest_file(path: PathLike) -> str:
    """The sha256 hex digest of the regular file at ``path`` (OSError, or FileRefused
    for one that is not a regular file)."""
    fd = open_regular(path, 1 << 62)
    try:
        h = hashlib.sha256()
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                return h.hexdigest()
            h.update(b)
    finally:
        os.close(fd)


def sidecar_path(library: PathLike) -> Path:
    """``<library>.sha256``, beside the library."""
    p = Path(library)
    return p.with_name(p.name + ".sha256")


def sidecar_digest(library: PathLike) -> str:
    """The digest the sidecar of ``library`` records: its first word, which must be 64
    hex digits (either case).  FileNotFoundError when there is no sidecar, FileRefused
    when it is not one (not a regular file, larger than :data:`MAX_SIDECAR_BYTES`, no
    digest in it).  A FIFO, a device or a huge file there is never read."""
    fd = open_regular(sidecar_path(library), MAX_SIDECAR_BYTES)
    try:
        raw = read_fd(fd, MAX_SIDECAR_BYTES)
    finally:
        os.close(fd)
    words = raw.split(maxsplit=1)
    word = words[0].decode("ascii", "replace").lower() if words else ""
    if not _DIGEST.fullmatch(word):
        raise FileRefused("does not start with a sha256 digest (64 hex digits)")
    return word


def read_sidecar(library: PathLike) -> Optional[str]:
    """The digest the sidecar of ``library`` records (lower case), or None when there is
    no usable sidecar (see :func:`sidecar_digest`)."""
    try:
        return sidecar_digest(library)
    except (OSError, FileRefused):
        return None


def sidecar_matches(library: PathLike) -> bool:
    """Whether ``library`` is exactly what was written: its sidecar records its digest."""
    want = read_sidecar(library)
    if not want:
        return False
    try:
        return want == digest_file(library)
    except (OSError, FileRefused):
        return False


def _temporary(path: Path, data: Union[str, bytes], mode: int) -> str:
    """``data`` written to a new temporary file beside ``path`` (same directory, so that
    it can be renamed onto it), with permissions ``mode``; its name."""
    fd, tmp = tempfile.mkstemp(prefix="." + path.name[:64] + ".", dir=str(path.parent))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
        os.chmod(tmp, mode)
    except BaseException:
        _unlink(tmp)
        raise
    return tmp


def _unlink(path: Optional[str]) -> None:
    if path is not None:
        try:
            os.unlink(path)
        except OSError:
            pass


def write_atomic(path: PathLike, data: Union[str, bytes], mode: int = 0o644) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same directory and
    ``os.replace``: a reader sees the old file or the new one, never a part."""
    path = Path(path)
    tmp = _temporary(path, data, mode)
    try:
        os.replace(tmp, path)
    except BaseException:
        _unlink(tmp)
        raise


def _sidecar_line(name: str, digest: str) -> str:
    # the name is for sha256sum -c only (readers take the first word): left out where
    # it would not stay one line of plain text
    return f"{digest}  {name}\n" if name.isprintable() and name.strip() == name else \
        f"{digest}\n"


def write_sidecar(library: PathLike, digest: Optional[str] = None) -> None:
    """Write the sidecar of ``library`` (its digest, computed unless given); write it
    after the library, so that a reader never sees a new sidecar beside an old file."""
    if digest is None:
        digest = digest_file(library)
    write_atomic(sidecar_path(library), _sidecar_line(Path(library).name, digest))


def write_with_sidecar(path: PathLike, data: bytes, mode: int = 0o644) -> None:
    """Write the library ``data`` at ``path`` and its sidecar: both, or neither.

    Both are written to temporary files in the directory first (a full disk or a
    missing permission fails there, with nothing replaced); then the library is renamed
    onto ``path`` and the sidecar onto its place.  If the sidecar cannot be put there (a
    directory in the way, a name too long), the file that was at ``path`` before is put
    back (or the new one removed, where there was none).  Raises the OSError; the files
    at ``path`` and its sidecar are then as they were."""
    path = Path(path)
    side = sidecar_path(path)
    lib_tmp = side_tmp = backup = None
    try:
        lib_tmp = _temporary(path, data, mode)
        side_tmp = _temporary(side, _sidecar_line(path.name, digest_bytes(data)), 0o644)
        if os.path.lexists(path):
            backup = _backup(path)
        os.replace(lib_tmp, path)
        lib_tmp = None
        try:
            os.replace(side_tmp, side)
            side_tmp = None
        except BaseException:
            if backup is not None:
                os.replace(backup, path)
                backup = None
            else:
                _unlink(str(path))
            raise
    finally:
        for t in (lib_tmp, side_tmp, backup):
            _unlink(t)


def _backup(path: Path) -> str:
    """A second name for the file (or link) at ``path``, in its directory, to put it back
    with ``os.replace``: a hard link, else a copy."""
    fd, tmp = tempfile.mkstemp(prefix="." + path.name[:64] + ".old.", dir=str(path.parent))
    os.close(fd)
    try:
        os.unlink(tmp)
        try:
            os.link(path, tmp, follow_symlinks=False)
        except OSError:
            shutil.copy2(path, tmp, follow_symlinks=False)
    except BaseException:
        _unlink(tmp)
        raise
    return tmp


def dlopen_fd(fd: int, path: str) -> ctypes.CDLL:
    """dlopen the file ``fd`` reads -- the very file that was checked, even if ``path``
    names another one by now (a file swapped in between is not the one loaded).

    The dynamic loader returns a library it loaded before when the *name* matches, so
    the file is opened through a name used once (a symlink to ``/proc/self/fd/N`` in a
    fresh directory; ``path`` itself where there is no ``/proc``): a file written anew
    at the same path is then loaded anew, while the same file loaded twice is one copy
    (the loader also matches files).  Raises what ``ctypes.CDLL`` raises (OSError; a
    UnicodeDecodeError for a loader's message that is not text)."""
    proc = f"/proc/self/fd/{fd}"
    tmp = None
    try:
        if os.path.exists(proc):
            tmp = tempfile.mkdtemp(prefix="tecomp-load-")
            name = re.sub(r"[^A-Za-z0-9._-]", "_", os.path.basename(path))[:100] or "lib.so"
            target = os.path.join(tmp, name)
            os.symlink(proc, target)
        else:
            target = os.path.abspath(path)
        return ctypes.CDLL(target)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def cache_root() -> Path:
    """Where tecomp caches what it compiles: ``$TECOMP_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/tecomp``, else ``~/.cache/tecomp`` (an empty variable counts as
    unset, and so does a relative ``XDG_CACHE_HOME``, as the XDG base directory
    specification says)."""
    root = os.environ.get("TECOMP_CACHE_DIR")
    if root:
        return Path(root)
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "tecomp"
    return Path(os.path.expanduser("~")) / ".cache" / "tecomp"


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
