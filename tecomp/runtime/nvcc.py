"""Compiling CUDA C with nvcc: :func:`compile_ptx` (PTX text, e.g. to check that the
generated source compiles for an architecture without a GPU), :func:`compile_cubin`
(the cubin the pycuda runtime loads, cached on disk), :func:`compile_fatbin` (the
fatbin ``export_library`` puts in a GPU library: cubins for several architectures and
PTX) and :func:`find_nvcc`.  The CUDA C
comes from :func:`tecomp.codegen.cuda.codegen_cuda` (a :class:`CudaSource` or its text).
"""
from __future__ import annotations

import collections
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
import threading
from typing import Optional

from ..errors import BuildError, RuntimeUnavailableError
from .cuda_kernels import CudaSource
from .libfiles import (
    FileRefused, cache_root, digest_bytes, open_regular, private_dir, read_fd, read_sidecar,
    tool_identity, write_with_sidecar,
)

_log = logging.getLogger(__name__)


def find_nvcc() -> Optional[str]:
    """The nvcc executable: on PATH, else under $CUDA_HOME or $CUDA_PATH."""
    exe = shutil.which("nvcc")
    if exe:
        return exe
    for env in ("CUDA_HOME", "CUDA_PATH"):
        root = os.environ.get(env)
        if root and os.path.isfile(os.path.join(root, "bin", "nvcc")):
            return os.path.join(root, "bin", "nvcc")
    return None


def _nvcc() -> str:
    nvcc = find_nvcc()
    if nvcc is None:
        raise RuntimeUnavailableError(
            "nvcc was not found on PATH (nor under $CUDA_HOME/bin): install the CUDA toolkit "
            "to compile CUDA C")
    return nvcc


def _run_nvcc(nvcc: str, src: str, arch, kind: str, options) -> bytes:
    """``nvcc -<kind> -arch=<arch> -std=c++17 <options>`` on ``src``: the output file.
    ``arch``: one architecture, or a tuple of nvcc's architecture flags (``-gencode``)."""
    with tempfile.TemporaryDirectory(prefix="tecomp-nvcc-") as d:
        cu, out = os.path.join(d, "kernel.cu"), os.path.join(d, "kernel." + kind)
        with open(cu, "w") as f:
            f.write(src)
        flags = [f"-arch={arch}"] if isinstance(arch, str) else list(arch)
        cmd = [nvcc, "-" + kind, *flags, "-std=c++17", *options, "-o", out, cu]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise BuildError(f"nvcc -{kind} {' '.join(flags)} failed (exit {proc.returncode}):\n"
                             f"{proc.stderr.strip() or proc.stdout.strip()}")
        with open(out, "rb") as f:
            return f.read()


#: the last PTX texts :func:`compile_ptx` made, by nvcc, architecture, options and source
_PTX: "collections.OrderedDict[tuple, str]" = collections.OrderedDict()
_PTX_KEPT = 16
_PTX_LOCK = threading.Lock()


def compile_ptx(source: str, arch: str = "sm_80", options=()) -> str:
    """Compile CUDA C ``source`` to PTX for ``arch`` with ``nvcc -ptx``; return the PTX.
    The last 16 results are kept in this process: a check that reads a kernel's PTX and
    then its ``ptxas`` report (:func:`tecomp.testing.gpu_resources.ptxas_build`, which
    assembles this PTX) runs nvcc's front end and optimiser once.

    Raises RuntimeUnavailableError when nvcc is missing and BuildError (with nvcc's
    messages) when compilation fails.
    """
    nvcc = _nvcc()
    src = source.source if isinstance(source, CudaSource) else source
    key = (tool_identity(nvcc), arch, tuple(options), src)
    with _PTX_LOCK:
        ptx = _PTX.get(key)
        if ptx is not None:
            _PTX.move_to_end(key)
            return ptx
    ptx = _run_nvcc(nvcc, src, arch, "ptx", tuple(options)).decode()
    with _PTX_LOCK:
        _PTX[key] = ptx
        while len(_PTX) > _PTX_KEPT:
            _PTX.popitem(last=False)
    return ptx


def compile_cubin(source: str, arch: str, options=()) -> bytes:
    """The cubin of CUDA C ``source`` for ``arch`` (``nvcc -cubin``), cached on disk under
    ``$TECOMP_CACHE_DIR/cuda`` by a hash of nvcc's version, ``arch``, the options and the
    source (a private directory; a cubin is used only when its sha256 sidecar matches).
    Any thread may call it: nothing here needs a GPU, so candidates of a search compile in
    parallel before one process loads and times them.

    Raises RuntimeUnavailableError when nvcc is missing and BuildError (with nvcc's
    messages) when compilation fails.
    """
    return _cached(source, arch, "cubin", options)


def gencode_flags(archs, ptx: str) -> tuple:
    """nvcc's flags for cubins of ``archs`` (``sm_80``...) and PTX ``ptx`` (``compute_90``)."""
    flags = [f"-gencode=arch=compute_{a[3:]},code={a}" for a in archs]
    return tuple(flags) + (f"-gencode=arch={ptx},code={ptx}",)


def compile_fatbin(source, archs, ptx: str, options=()) -> bytes:
    """The fatbin of CUDA C ``source``: a cubin for each of ``archs`` (``("sm_80",
    "sm_90")``) and the PTX of ``ptx`` (``"compute_90"``), which the driver compiles for
    newer GPUs (``nvcc -fatbin -gencode ...``); cached as :func:`compile_cubin`."""
    return _cached(source, gencode_flags(archs, ptx), "fatbin", options)


def _cached(source, arch, kind: str, options) -> bytes:
    nvcc = _nvcc()
    src = source.source if isinstance(source, CudaSource) else source
    options = tuple(options)
    h = hashlib.sha256()
    arch_text = arch if isinstance(arch, str) else " ".join(arch)
    for part in (tool_identity(nvcc), arch_text, "\0".join(options), src):
        h.update(part.encode())
        h.update(b"\0")
    d = private_dir(cache_root() / "cuda", "the CUDA compile cache", BuildError)
    path = d / f"{h.hexdigest()[:32]}.{kind}"
    # the entry starts with its whole key: a file of another source copied over it (with
    # a sidecar of its own) is a miss, not that source's code
    head = f"tecomp-nvcc-cache {h.hexdigest()}\n".encode()
    try:
        # (a regular file only: a FIFO in the entry's place would block the build)
        fd = open_regular(path, 1 << 32)
        try:
            data = read_fd(fd, 1 << 32)
        finally:
            os.close(fd)
        if read_sidecar(path) == digest_bytes(data) and data.startswith(head):
            _log.debug("nvcc cache hit: %s", path)
            return data[len(head):]
    except (OSError, FileRefused):
        pass
    _log.debug("nvcc cache miss: compiling %s for %s", path.name, arch_text)
    data = _run_nvcc(nvcc, src, arch, kind, options)
    write_with_sidecar(path, head + data, 0o600)
    return data
