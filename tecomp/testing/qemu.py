"""Run a library exported for another machine under qemu-user: check cross-compiled kernels.

Code for an instruction set other than this machine's (``llvm -mtriple=aarch64-linux-gnu``
on an x86-64 host) is built and exported here but cannot be called here.  This module
calls it the way a C program on that machine would: it compiles a small harness (C, the
library's C ABI: docs/runtime.md) with the target's cross compiler, writes the arguments
to a file, runs the harness under ``qemu-<arch>`` with the cross C library
(``/usr/aarch64-linux-gnu`` on Debian), and copies the buffers back into the numpy
arrays passed, as a call of a :class:`~tecomp.runtime.llvm.Module` would write them::

    f = tc.build(s, [A, B, C], target="llvm -mtriple=aarch64-linux-gnu")
    f.export_library("gemm.so")
    tecomp.testing.qemu.run_library("gemm.so", a, b, c)     # c now holds A @ B

Code for a CPU with SVE runs on qemu's ``-cpu max`` (vectors of 512 bits), and with
``-msve-vector-bits=N`` on ``-cpu max,sveN=on`` (vectors of exactly ``N`` bits, which
such code needs).  On Debian/Ubuntu the tools are ``apt-get install
gcc-aarch64-linux-gnu qemu-user``;
:func:`unavailable` says what is missing.  qemu runs the code instruction by instruction:
use it for correctness, never for timing.  The arguments are checked against the
library's metadata (dtypes, shapes, the shape variables bound from them) but not with
the runtime's full argument checks; the arrays are copied there (strided ones as
contiguous copies), so arguments may not share memory.
"""
from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import tempfile
import threading
from typing import Dict, Optional, Tuple

import numpy as np

from ..runtime import aot_format as fmt
from ..errors import (
    ArgumentError, BoundsError, InternalError, KernelAssertionError, KernelMemoryError,
    RuntimeUnavailableError, TecompError,
)
from ..ir import dtype as _dt
from ..ir.expr import Buffer, Var
from ..ir.interp import eval_expr
from ..runtime.elf import ISA_MACHINES, inspect_library
from ..target import ISAS, Target, cross_compilers

__all__ = ["run_library", "unavailable", "qemu_for", "sysroot_for"]

#: qemu-user's name for each instruction set
_QEMU_ARCH = {"aarch64": "aarch64", "x86-64": "x86_64"}
#: where Debian's cross C library for each instruction set lives
_SYSROOTS = {"aarch64": "/usr/aarch64-linux-gnu", "x86-64": "/usr/x86_64-linux-gnu"}
_HARNESS = os.path.join(os.path.dirname(__file__), "qemu_harness.h")
_BUILT: Dict[str, str] = {}
_LOCK = threading.Lock()


def qemu_for(isa: str) -> Optional[str]:
    """The qemu-user program for ``isa`` on the PATH (``qemu-aarch64``, or its static
    build), or None."""
    arch = _QEMU_ARCH.get(isa)
    if arch is None:
        return None
    return shutil.which(f"qemu-{arch}") or shutil.which(f"qemu-{arch}-static")


def sysroot_for(isa: str) -> Optional[str]:
    """The directory of ``isa``'s C library (``$QEMU_LD_PREFIX``, else Debian's cross
    library), or None."""
    d = os.environ.get("QEMU_LD_PREFIX") or _SYSROOTS.get(isa)
    return d if d and os.path.isdir(d) else None


def _cross_cc(target: Target) -> Optional[str]:
    return cross_compilers(target)[1]


def unavailable(target) -> Optional[str]:
    """None when kernels for ``target`` (another instruction set's ``llvm`` target) can
    be exported and run here under qemu-user, else what is missing and how to install it."""
    t = target if isinstance(target, Target) else Target(target)
    if not t.is_cpu or t.is_native_isa:
        return f"{t} is not another instruction set's CPU target: call its modules directly"
    missing = []
    facts = ISAS[t.isa]
    if _cross_cc(t) is None:
        missing.append(f"a cross C compiler ({', '.join(facts.CROSS_COMPILERS)} or "
                       f"${facts.CROSS_CC_VARIABLE})")
    if qemu_for(t.isa) is None:
        missing.append(f"qemu-{_QEMU_ARCH.get(t.isa, t.isa)}")
    if sysroot_for(t.isa) is None:
        missing.append(f"the {t.isa} C library ({_SYSROOTS.get(t.isa)}, or $QEMU_LD_PREFIX)")
    if missing:
        return (f"running {t.isa} code here needs {' and '.join(missing)}: on Debian/Ubuntu "
                f"apt-get install gcc-aarch64-linux-gnu qemu-user")
    return None


def _harness(target: Target) -> str:
    """The harness compiled for ``target``'s machine (once per process and compiler)."""
    cc = _cross_cc(target)
    with _LOCK:
        exe = _BUILT.get(cc or "")
        if exe is not None and os.path.exists(exe):
            return exe
        d = tempfile.mkdtemp(prefix="tecomp-qemu-")
        exe = os.path.join(d, "harness")
        src = os.path.join(d, "harness.c")
        shutil.copyfile(_HARNESS, src)
        r = subprocess.run([cc, "-O1", "-std=c11", "-D_DEFAULT_SOURCE", "-o", exe, src, "-ldl"],
                           capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            raise RuntimeUnavailableError(f"{cc} could not compile the qemu harness: "
                                          f"{(r.stderr or r.stdout).strip()[:2000]}")
        _BUILT[cc or ""] = exe
        return exe


def _library_info(path: str):
    with open(path, "rb") as f:
        data = f.read()
    # the machine is the library's own (whatever it is): its metadata names the target
    head = struct.unpack_from("<H", data, 18)[0] if len(data) >= 20 else None
    image = inspect_library(data, f"the library {path!r:.200}", fmt.SECTION,
                            head if head in ISA_MACHINES.values() else None)
    if image.section is None:
        raise ArgumentError(f"{path!r:.200} is not a library tecomp exported (no "
                            f"{fmt.SECTION} section)")
    return fmt.parse_metadata(image.section.rstrip(b"\0"), f"the library {path!r:.200}")


def _scalar_bits(value, var: Var, name: str) -> int:
    if _dt.is_float(var.dtype):
        return struct.unpack("<q", struct.pack("<d", float(value)))[0]
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ArgumentError(f"run_library: scalar {name} is an integer ({var.dtype}); got "
                            f"{type(value).__name__}")
    return int(value)


def run_library(path, *args, threads: int = 2, layout: str = "contiguous",
                noalias: bool = True, timeout: float = 600.0,
                cpu: Optional[str] = None) -> None:
    """Call the kernel of the library at ``path`` (exported for another machine) with
    ``args`` (numpy arrays and scalars, in parameter order) under qemu-user; the buffers
    the kernel writes are copied back into their arrays.  ``threads``: the pool's thread
    count there.  ``cpu``: qemu's ``-cpu`` (e.g. ``"max,sve512=on"``: SVE vectors of 512
    bits); by default the one the library's target needs (see the module docstring).  A
    kernel error raises what a call here would (BoundsError, KernelAssertionError,
    KernelMemoryError)."""
    path = os.fspath(path)
    info = _library_info(path)
    target = Target(info.target)
    why = unavailable(target)
    if why is not None:
        raise RuntimeUnavailableError(why)
    raw = info.raw
    params = raw["params"]
    if len(args) != len(info.params):
        raise ArgumentError(f"run_library: {info.name} takes {len(info.params)} arguments "
                            f"({', '.join(p['name'] for p in params)}); got {len(args)}")
    var_index = {v: i for i, v in enumerate(info.vars)}
    env: Dict[int, int] = {}
    arrays: Dict[int, np.ndarray] = {}
    for k, (p, a) in enumerate(zip(info.params, args)):
        if isinstance(p, Buffer):
            if not isinstance(a, np.ndarray):
                raise ArgumentError(f"run_library: {p.name} (argument {k}) must be a numpy "
                                    f"array, got {type(a).__name__}")
            if a.dtype != np.dtype(_dt.numpy_dtype(p.dtype)) or a.ndim != len(p.shape):
                raise ArgumentError(f"run_library: {p.name} is {p.dtype} with "
                                    f"{len(p.shape)} dimensions; got {a.dtype} {a.shape}")
            for j, other in enumerate(arrays.values()):
                if np.shares_memory(a, other):
                    raise ArgumentError(f"run_library: {p.name} (argument {k}) shares memory "
                                        f"with another argument; the arrays are copied to "
                                        f"the other machine, so pass separate arrays")
            arrays[params[k]["data_index"]] = a
        else:
            env[var_index[p]] = _scalar_bits(a, p, p.name)
    for vi, di, d in raw["shape_var_origin"]:
        env.setdefault(vi, int(arrays[di].shape[d]))
    # the shapes the metadata fixes, checked: a wrong one would be read past its end
    for k, p in enumerate(info.params):
        if isinstance(p, Buffer):
            a = arrays[params[k]["data_index"]]
            for d, e in enumerate(p.shape):
                want = _evaluate(e, {info.vars[i]: v for i, v in env.items()})
                if want is not None and want != a.shape[d]:
                    raise ArgumentError(f"run_library: {p.name} has extent {a.shape[d]} in "
                                        f"dimension {d}; the kernel's is {want}")
    slots = [0] * raw["slots"]["count"]
    for s, vi in enumerate(raw["slots"]["vars"]):
        slots[s] = env.get(vi, 0)
    for k, p in enumerate(info.params):
        if isinstance(p, Buffer):
            a = arrays[params[k]["data_index"]]
            s0 = params[k]["stride_slot"]
            stride = 1
            for d in reversed(range(a.ndim)):   # (of the contiguous copy sent)
                slots[s0 + d] = stride
                stride *= a.shape[d]
    nb = len(arrays)
    given = [arrays[i] for i in range(nb)]
    order = [np.ascontiguousarray(a) for a in given]   # (what the harness's memory holds)
    symbol = info.variants[(layout, bool(noalias))].symbol
    with tempfile.TemporaryDirectory(prefix="tecomp-qemu-run-") as tmp:
        fin, fout = os.path.join(tmp, "in"), os.path.join(tmp, "out")
        with open(fin, "wb") as f:
            f.write(struct.pack(f"<qq{nb}q{len(slots)}q", nb, len(slots),
                                *[a.nbytes for a in order], *slots))
            for a in order:
                f.write(a.tobytes())
        qemu = qemu_for(target.isa)
        cmd = [qemu, "-L", sysroot_for(target.isa)]
        if cpu is not None:
            if not isinstance(cpu, str) or not re.fullmatch(r"[a-z0-9][a-z0-9,=._-]*", cpu):
                raise ArgumentError(f"run_library: cpu={cpu!r:.60} is not a qemu -cpu value "
                                    f"(e.g. 'max' or 'max,sve256=on')")
            cmd += ["-cpu", cpu]
        elif "sve" in target.features:
            # qemu's largest CPU; a fixed SVE length (-msve-vector-bits) is its only one
            bits = target.sve_vector_bits
            cmd += ["-cpu", "max" if bits is None else f"max,sve{bits}=on"]
        cmd += [_harness(target), os.path.abspath(path), symbol, fin, fout, str(int(threads))]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise TecompError(f"run_library: {info.name} did not finish within {timeout:.0f} s "
                              f"under {os.path.basename(qemu)}") from None
        if r.returncode != 0:
            raise InternalError(f"run_library: the harness of {info.name} under "
                                f"{os.path.basename(qemu)} failed (exit status "
                                f"{r.returncode}): {(r.stderr or r.stdout).strip()[-2000:]}")
        with open(fout, "rb") as f:
            out = f.read()
    rc, *err = struct.unpack_from("<q5q", out, 0)
    pos = 48
    written = {params[k]["data_index"] for k, p in enumerate(info.params)
               if isinstance(p, Buffer) and params[k]["written"]}
    for i, (a, g) in enumerate(zip(order, given)):
        if i in written:
            g[...] = np.frombuffer(out, dtype=a.dtype, count=a.size, offset=pos).reshape(a.shape)
        pos += a.nbytes
    if rc:
        _raise(info, (layout, bool(noalias)), rc, err)


def _evaluate(e, env) -> Optional[int]:
    """The integer value of the shape expression ``e`` given ``env`` (None if unknown)."""
    try:
        return int(eval_expr(e, env))
    except Exception:  # noqa: BLE001 - a variable no argument binds
        return None


def _raise(info, key: Tuple[str, bool], rc: int, err) -> None:
    code, site, dim, index, extent = err
    code = code or rc
    sites = info.variants[key].sites
    s = sites[site] if 0 <= site < len(sites) else None
    if code == 1 and s is not None:
        raise BoundsError(f"out-of-bounds access of buffer {s.buffer}: index {index} is outside "
                          f"[0, {extent}) in dimension {dim}, at `{s.text}` (kernel "
                          f"{info.name}, under qemu)")
    if code == 2:
        raise KernelMemoryError(f"kernel {info.name} could not allocate {extent} bytes "
                                f"(under qemu)")
    if code == 3 and s is not None:
        raise KernelAssertionError(f"{s.text} (assert `{s.stmt}` failed in kernel "
                                   f"{info.name}, under qemu)")
    raise InternalError(f"kernel {info.name} returned the error code {rc} under qemu "
                        f"(words {code}, {site}, {dim}, {index}, {extent})")
