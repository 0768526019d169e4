"""``tc.Target``: what code is generated for, parsed from strings as TVM users write them.

    tc.Target("llvm")                              # the host CPU (read once, from LLVM and sysfs)
    tc.Target("llvm -mcpu=skylake-avx512")         # another x86 CPU: cross-compiled
    tc.Target("llvm -mcpu=haswell")                # AVX2 code (runs on any AVX2 machine)
    tc.Target("llvm -mattr=+avx2,+fma")            # a generic x86-64 with these features
    tc.Target("llvm -mcpu=znver4 -num-cores=8")    # and the threads the schedules plan for
    tc.Target("cuda -arch=sm_90")                  # CUDA C for this compute capability
    tc.Target("cuda-emu")                          # the CUDA C run in the CPU emulation

A Target is the one home of every machine fact a schedule or a code generator reads: the
vector width (``lanes``: float32 lanes of a vector register), the vector registers
(``vregs``), the caches (``l1_bytes``, ``l2_bytes``, ``l3_bytes``: per core), the threads
(``threads``) and, for CUDA, the device limits (``max_threads_per_block``,
``max_block_dims``, ``max_grid_dims``, ``max_static_shared_bytes``, ``warp_size``).
``tc.build``, ``tc.lower``, the ``tecomp.nn`` schedules and ``tc.auto_schedule`` take a
Target or its string wherever they take ``target=``.

An ``llvm`` target for a CPU other than the host compiles every function for that CPU (its
LLVM ``target-cpu`` and ``target-features``).  Its :attr:`Target.features` are LLVM's own
for that CPU and ``-mattr`` (asked of LLVM, :func:`tecomp.codegen.llvm.jit.cpu_features`),
not a table's: ``-mcpu=sapphirerapids`` brings AVX512-FP16, AMX and the rest.  Such a
module runs here when this CPU has every feature the code may use
(:attr:`Target.checked_features`: AVX2 code on an AVX-512 machine), and a call of one
that needs more (AVX-512 code on an AVX2 machine, FP16 code on a Zen 4) raises a
:class:`TargetError` naming the features instead of executing an illegal instruction.
Its source (``get_source("asm")``) is there either way.

``-mattr`` names LLVM's features (a name LLVM does not know is a :class:`TargetError`,
not a warning LLVM prints and ignores) and cannot remove the x86-64 baseline
(:data:`BASELINE`): without SSE there is no floating point in the x86-64 calling
convention, without ``cx8`` LLVM calls libatomic for the thread pool's atomics.

Caches and threads of another CPU are not measured: the table below gives the caches of
the CPUs it names (per core, from their vendors' documents), and ``threads`` is the
runtime's thread count (``tc.set_num_threads``) unless ``-num-cores`` says otherwise.
``-mcpu=native`` is the host, as in LLVM.
"""
from __future__ import annotations

import os
import re
import threading
from typing import Dict, FrozenSet, Optional, Tuple

from .errors import TargetError

__all__ = ["Target", "KINDS", "CPUS", "BASELINE", "INTRINSIC_ONLY"]

#: the target kinds ``tc.build`` knows
KINDS = ("llvm", "cuda", "cuda-emu")

# x86 feature sets by vector ISA: the features tecomp's code generator asks about, where
# LLVM cannot be asked for a CPU's (Target.features asks LLVM wherever it is there)
_SSE = frozenset({"sse", "sse2", "sse3", "ssse3", "sse4.1", "sse4.2"})
_AVX = _SSE | {"avx"}
_AVX2 = _AVX | {"avx2", "fma", "f16c", "bmi", "bmi2"}
_AVX512 = _AVX2 | {"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"}
_VNNI = _AVX512 | {"avx512vnni"}
_BF16 = _VNNI | {"avx512bf16"}

# what a feature given with -mattr brings along (and what removing it takes away)
_IMPLIES = {"avx": _SSE, "avx2": _AVX, "fma": _AVX, "avx512f": _AVX2,
            "avx512bw": _AVX2 | {"avx512f"}, "avx512dq": _AVX2 | {"avx512f"},
            "avx512vl": _AVX2 | {"avx512f"}, "avx512cd": _AVX2 | {"avx512f"},
            "avx512vnni": _AVX512, "avx512bf16": _VNNI}

#: the x86-64 baseline (LLVM's ``x86-64`` CPU): the calling convention passes floats in
#: SSE registers, the runtime's atomics need ``cx8``; ``-mattr`` cannot remove these
BASELINE = frozenset({"64bit", "cmov", "cx8", "fxsr", "mmx", "sse", "sse2", "x87"})

#: features whose instructions LLVM emits only for their own intrinsics (AES, SHA, AMX,
#: system, security and cache-control instructions, AVX10.1's, which are its AVX-512
#: features', the VEX forms of VNNI-INT8/16 and NE-CONVERT, which act on types tecomp's
#: code does not have): code tecomp generates never contains them, so a CPU without them
#: runs code compiled for one with them, and :attr:`Target.checked_features` leaves them
#: out.  A tensor intrinsic that calls one names it in ``requires``; then it is checked.
INTRINSIC_ONLY = frozenset({
    "aes", "vaes", "pclmul", "vpclmulqdq", "sha", "sha512", "sm3", "sm4",
    "amx-avx512", "amx-bf16", "amx-complex", "amx-fp16", "amx-fp8", "amx-int8", "amx-movrs",
    "amx-tf32", "amx-tile", "avx10.1", "avxneconvert", "avxvnniint8", "avxvnniint16",
    "cldemote", "clflushopt", "clwb", "clzero", "cmpccxadd", "enqcmd", "fsgsbase", "hreset",
    "invpcid", "kl", "widekl", "lwp", "movdir64b", "movdiri", "movrs", "mwaitx", "pconfig",
    "pku", "prefetchi", "ptwrite", "rdpid", "rdpru", "rdrnd", "rdseed", "rtm", "serialize",
    "sgx", "shstk", "tsxldtrk", "uintr", "usermsr", "waitpkg", "wbnoinvd", "xsave", "xsavec",
    "xsaveopt", "xsaves"})

#: ``-mcpu`` names tecomp knows: (features, L1d bytes, L2 bytes per core, L3 bytes)
CPUS: Dict[str, Tuple[FrozenSet[str], int, int, int]] = {
    "x86-64": (frozenset({"sse", "sse2"}), 32 << 10, 256 << 10, 8 << 20),
    "x86-64-v2": (_SSE, 32 << 10, 256 << 10, 8 << 20),
    "x86-64-v3": (_AVX2, 32 << 10, 256 << 10, 8 << 20),
    "x86-64-v4": (_AVX512, 32 << 10, 1 << 20, 16 << 20),
    "nehalem": (_SSE, 32 << 10, 256 << 10, 8 << 20),
    "sandybridge": (_AVX, 32 << 10, 256 << 10, 8 << 20),
    "ivybridge": (_AVX | {"f16c"}, 32 << 10, 256 << 10, 8 << 20),
    "haswell": (_AVX2, 32 << 10, 256 << 10, 8 << 20),
    "core-avx2": (_AVX2, 32 << 10, 256 << 10, 8 << 20),
    "broadwell": (_AVX2, 32 << 10, 256 << 10, 8 << 20),
    "skylake": (_AVX2, 32 << 10, 256 << 10, 8 << 20),
    "alderlake": (_AVX2, 48 << 10, 1280 << 10, 30 << 20),
    "skylake-avx512": (_AVX512, 32 << 10, 1 << 20, 32 << 20),
    "cascadelake": (_VNNI, 32 << 10, 1 << 20, 32 << 20),
    "icelake-server": (_VNNI, 48 << 10, 1280 << 10, 48 << 20),
    "sapphirerapids": (_BF16, 48 << 10, 2 << 20, 64 << 20),
    "emeraldrapids": (_BF16, 48 << 10, 2 << 20, 256 << 20),
    # (AMD's own sse4a among them: code for a Zen may use it, so an Intel CPU, which
    # lacks it, refuses to run such code)
    "znver2": (_AVX2 | {"sse4a"}, 32 << 10, 512 << 10, 16 << 20),
    "znver3": (_AVX2 | {"sse4a"}, 32 << 10, 512 << 10, 32 << 20),
    "znver4": (_BF16 | {"sse4a"}, 32 << 10, 1 << 20, 32 << 20),
    "znver5": (_BF16 | {"sse4a"}, 48 << 10, 1 << 20, 32 << 20),
}

# CUDA limits every device of compute capability >= 3.0 shares (the one home of them)
MAX_THREADS_PER_BLOCK = 1024
MAX_BLOCK_DIMS = (1024, 1024, 64)
MAX_GRID_DIMS = (2**31 - 1, 65535, 65535)
MAX_STATIC_SHARED_BYTES = 48 * 1024   # a kernel's static __shared__ arrays, on every GPU
#: a block's shared memory beyond that is dynamic (``extern __shared__``, opted in per
#: kernel): at most this much on an sm_90 device (227 KiB; sm_80 163 KiB, sm_86/89 99 KiB),
#: the device's own limit checked when the kernel is launched
MAX_DYNAMIC_SHARED_BYTES = 227 * 1024
#: the local memory (``local`` arrays: the stack of a CUDA thread) one thread may use, on
#: every device since compute capability 2.0
MAX_LOCAL_BYTES_PER_THREAD = 512 * 1024
# bytes: each __shared__ array starts on this boundary (16-byte vector loads; the 32-byte
# alignment wmma's load_matrix_sync / store_matrix_sync need of a tile's first element)
SHARED_ALIGN = 32
#: the scopes of tensor-core fragments (nvcuda::wmma): per warp, 16 x 16 tiles held in
#: registers, read and written only by the ``cuda.wmma_*`` tensor intrinsics
FRAGMENT_SCOPES = ("wmma.matrix_a", "wmma.matrix_b", "wmma.accumulator")
#: scopes whose buffer belongs to one thread (a fragment: to one warp, every lane of
#: which runs the same code on it)
PER_THREAD_SCOPES = ("local",) + FRAGMENT_SCOPES
WARP_SIZE = 32
CUDA_ARCHS = ("sm_70", "sm_75", "sm_80", "sm_86", "sm_87", "sm_89", "sm_90", "sm_90a",
              "sm_100", "sm_120")

_OPTIONS = {"llvm": ("mcpu", "mattr", "num-cores", "mtriple"),
            "cuda": ("arch",), "cuda-emu": ("arch",)}
_FEATURE = re.compile(r"^[+-][a-z0-9][a-z0-9._-]*$")


def _check_feature(entry: str) -> None:
    """Refuse the ``-mattr`` entry ``entry`` (``+name`` or ``-name``) when LLVM does not
    know the feature (it would print a warning and ignore it) or it removes one of the
    x86-64 baseline (the code would crash: see :data:`BASELINE`)."""
    name = entry[1:]
    known = _feature_names()
    if known is not None and name not in known and name not in BASELINE:
        import difflib

        close = difflib.get_close_matches(name, sorted(known), n=3)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        raise TargetError(f"target llvm: -mattr names {name!r:.40}, which is not a CPU feature "
                          f"LLVM knows; {hint}give LLVM's names, e.g. +avx2, +fma, "
                          f"+avx512f, +avx512vnni")
    if entry[0] == "-" and name in BASELINE:
        raise TargetError(f"target llvm: -mattr={entry} removes {name}, which every x86-64 "
                          f"CPU has and tecomp's code needs (x86-64 passes floats in SSE "
                          f"registers; the thread pool's atomics need cx8): remove only "
                          f"features above the x86-64 baseline ({', '.join(sorted(BASELINE))}), "
                          f"e.g. -mattr=-avx512f, or pick an older CPU with -mcpu "
                          f"(-mcpu=x86-64 has nothing above it)")


def _fix(what: str) -> str:
    return (f"{what}; write targets as TVM does, e.g. 'llvm', 'llvm -mcpu=skylake-avx512', "
            f"'llvm -mattr=+avx2,+fma', 'cuda -arch=sm_90'")


class Target:
    """A compilation target (see the module docstring).  ``Target(str_or_target)``;
    equal targets have equal ``str()``."""

    __slots__ = ("kind", "mcpu", "mattr", "num_cores", "arch", "_feats", "_caches", "_host")

    def __init__(self, spec="llvm"):
        if isinstance(spec, Target):
            for k in self.__slots__:
                object.__setattr__(self, k, getattr(spec, k))
            return
        if not isinstance(spec, str):
            raise TargetError(_fix(f"a target is a string or a tc.Target, got "
                                   f"{type(spec).__name__}"))
        words = spec.split()
        if not words:
            raise TargetError(_fix("the target string is empty"))
        kind = words[0]
        if kind not in KINDS:
            raise TargetError(_fix(f"unknown target kind {kind!r:.40} (known: "
                                   f"{', '.join(KINDS)})"))
        opts: Dict[str, str] = {}
        for w in words[1:]:
            m = re.fullmatch(r"-{1,2}([a-z][a-z0-9-]*)=(\S+)", w)
            if m is None or m.group(1) not in _OPTIONS[kind]:
                raise TargetError(_fix(f"target {kind}: unknown option {w!r:.60} (options of "
                                       f"{kind}: {', '.join('-' + o for o in _OPTIONS[kind])})"))
            if m.group(1) in opts:
                raise TargetError(_fix(f"target {kind}: option -{m.group(1)} given twice"))
            opts[m.group(1)] = m.group(2)
        mcpu = opts.get("mcpu")
        mattr: Tuple[str, ...] = ()
        num_cores = None
        arch = None
        if kind == "llvm":
            trip = opts.get("mtriple")
            if trip is not None and not trip.startswith("x86_64"):
                raise TargetError(_fix(f"target llvm: -mtriple={trip!r:.60} is not supported "
                                       f"(tecomp generates x86-64 code)"))
            if mcpu == "native":
                mcpu = _host_cpu()
            if mcpu is not None and mcpu not in CPUS and mcpu != _host_cpu():
                raise TargetError(_fix(
                    f"target llvm: unknown -mcpu={mcpu!r:.40} (known: {', '.join(CPUS)}, and "
                    f"this machine's {_host_cpu()!r} or 'native'); for another CPU give its "
                    f"features with -mattr"))
            if "mattr" in opts:
                parts = opts["mattr"].split(",")
                for p in parts:
                    if not _FEATURE.match(p):
                        raise TargetError(_fix(f"target llvm: -mattr entry {p!r:.40} is not "
                                               f"+feature or -feature"))
                    _check_feature(p)
                mattr = tuple(parts)
            if "num-cores" in opts:
                try:
                    num_cores = int(opts["num-cores"])
                except ValueError:
                    num_cores = 0
                if not 1 <= num_cores <= 1024:
                    raise TargetError(_fix(f"target llvm: -num-cores must be an integer in "
                                           f"1..1024, got {opts['num-cores']!r:.20}"))
        else:
            arch = opts.get("arch")
            if arch is not None and arch not in CUDA_ARCHS:
                raise TargetError(_fix(f"target {kind}: unknown -arch={arch!r:.20} (known: "
                                       f"{', '.join(CUDA_ARCHS)})"))
        set_ = object.__setattr__
        set_(self, "kind", kind)
        set_(self, "mcpu", mcpu)
        set_(self, "mattr", mattr)
        set_(self, "num_cores", num_cores)
        set_(self, "arch", arch)
        set_(self, "_host", kind == "llvm" and not mattr and (mcpu is None or mcpu == _host_cpu()))
        set_(self, "_feats", None)
        set_(self, "_caches", None)

    def __reduce__(self):
        return (Target, (str(self),))

    def __setattr__(self, name, value):
        raise AttributeError("a tc.Target is immutable: make a new one from its string")

    # -- identity ------------------------------------------------------------------
    def __str__(self) -> str:
        parts = [self.kind]
        if self.mcpu is not None and not (self._host and self.kind == "llvm"):
            parts.append(f"-mcpu={self.mcpu}")
        if self.mattr:
            parts.append("-mattr=" + ",".join(self.mattr))
        if self.num_cores is not None:
            parts.append(f"-num-cores={self.num_cores}")
        if self.arch is not None:
            parts.append(f"-arch={self.arch}")
        return " ".join(parts)

    def __repr__(self) -> str:
        return f"tc.Target({str(self)!r})"

    def __eq__(self, other) -> bool:
        if isinstance(other, str):
            try:
                other = Target(other)
            except TargetError:
                return False
        return isinstance(other, Target) and str(self) == str(other)

    def __hash__(self) -> int:
        return hash(str(self))

    @property
    def is_host(self) -> bool:
        """An ``llvm`` target for this machine's CPU as it is (no -mcpu of another CPU, no
        -mattr)."""
        return self._host

    # -- the CPU ---------------------------------------------------------------------
    @property
    def cpu(self) -> str:
        """The LLVM CPU name code is compiled for."""
        self._need("llvm", "cpu")
        if self._host:
            return _host_cpu()
        return self.mcpu if self.mcpu is not None else "x86-64"

    @property
    def features(self) -> FrozenSet[str]:
        """The CPU features (LLVM's names, without ``+``) LLVM compiles for: the host's,
        or those LLVM gives ``cpu`` with the ``-mattr`` entries (what they add and
        imply, less what they remove and what needs it)."""
        self._need("llvm", "features")
        if self._feats is None:
            if self._host:
                feats = _host_features()
            else:
                feats = _llvm_cpu_features(self.cpu, self.llvm_features)
            if feats is None:   # no LLVM here: tecomp's table
                feats = set(CPUS[self.mcpu][0] if self.mcpu in CPUS else
                            (_host_features() if self.mcpu is not None else CPUS["x86-64"][0]))
                for a in self.mattr:
                    name = a[1:]
                    if a[0] == "+":
                        feats |= _IMPLIES.get(name, frozenset()) | {name}
                    else:   # and whatever needs it
                        feats -= {f for f, needs in _IMPLIES.items() if name in needs}
                        feats.discard(name)
            object.__setattr__(self, "_feats", frozenset(feats))
        return self._feats

    @property
    def checked_features(self) -> FrozenSet[str]:
        """The features code for this target may use, compared with a machine's before the
        code runs there (a call of a module, ``tc.load_module``): :attr:`features` but
        those LLVM emits only for their own intrinsics (:data:`INTRINSIC_ONLY`)."""
        return self.features - INTRINSIC_ONLY

    @property
    def llvm_features(self) -> str:
        """The ``target-features`` string for LLVM (the -mattr entries as given)."""
        self._need("llvm", "llvm_features")
        return ",".join(self.mattr)

    def has_feature(self, name: str) -> bool:
        return name in self.features

    @property
    def lanes(self) -> int:
        """float32 lanes of one vector register."""
        f = self.features
        return 16 if "avx512f" in f else 8 if "avx" in f else 4

    @property
    def vregs(self) -> int:
        """Architectural vector registers."""
        return 32 if "avx512f" in self.features else 16

    def _cache_sizes(self) -> Tuple[int, int, int]:
        if self._caches is None:
            if self._host:
                c = (_host_cache(1, 32 << 10), _host_cache(2, 512 << 10),
                     _host_cache(3, 32 << 20))
            elif self.mcpu in CPUS:
                c = CPUS[self.mcpu][1:]
            elif self.mcpu is not None:   # this machine's CPU with other features
                c = (_host_cache(1, 32 << 10), _host_cache(2, 512 << 10),
                     _host_cache(3, 32 << 20))
            else:
                c = CPUS["x86-64"][1:]
            object.__setattr__(self, "_caches", tuple(c))
        return self._caches

    @property
    def l1_bytes(self) -> int:
        self._need("llvm", "l1_bytes")
        return self._cache_sizes()[0]

    @property
    def l2_bytes(self) -> int:
        self._need("llvm", "l2_bytes")
        return self._cache_sizes()[1]

    @property
    def l3_bytes(self) -> int:
        self._need("llvm", "l3_bytes")
        return self._cache_sizes()[2]

    @property
    def threads(self) -> int:
        """The threads parallel loops are planned for: ``-num-cores``, else the runtime's
        current thread count (``tc.set_num_threads``)."""
        if self.num_cores is not None:
            return self.num_cores
        try:
            from .codegen.threads import get_num_threads

            return max(1, int(get_num_threads()))
        except Exception:  # noqa: BLE001 - no runtime: the cores
            return os.cpu_count() or 1

    def missing_here(self, required=()) -> Tuple[str, ...]:
        """The features code for this target may use (:attr:`checked_features`, and
        ``required``: those a tensor intrinsic in it needs) that this machine's CPU lacks,
        sorted."""
        if self.kind != "llvm":
            return ()
        need = set(required) if self._host else self.checked_features | set(required)
        return tuple(sorted(need - _host_features()))

    def runs_here(self, required=()) -> Optional[str]:
        """None when code for this target runs on this machine, else why not
        (``required``: see :meth:`missing_here`)."""
        missing = self.missing_here(required)
        if missing:
            return (f"code for {self} may use {', '.join(missing)}, which this CPU "
                    f"({_host_cpu()}) does not have")
        return None

    # -- CUDA ------------------------------------------------------------------------
    max_threads_per_block = MAX_THREADS_PER_BLOCK
    max_block_dims = MAX_BLOCK_DIMS
    max_grid_dims = MAX_GRID_DIMS
    max_static_shared_bytes = MAX_STATIC_SHARED_BYTES
    max_dynamic_shared_bytes = MAX_DYNAMIC_SHARED_BYTES
    max_local_bytes_per_thread = MAX_LOCAL_BYTES_PER_THREAD
    warp_size = WARP_SIZE

    def _need(self, kind: str, what: str) -> None:
        if self.kind != kind:
            raise TargetError(f"target {self}: {what} is a property of {kind} targets")


# ---------------------------------------------------------------------------------------
# the host, read once

_LOCK = threading.Lock()
_HOST_INFO: Dict[str, object] = {}


def _host_cpu() -> str:
    if "cpu" not in _HOST_INFO:
        _read_host()
    return _HOST_INFO["cpu"]  # type: ignore[return-value]


def _host_features() -> FrozenSet[str]:
    if "features" not in _HOST_INFO:
        _read_host()
    return _HOST_INFO["features"]  # type: ignore[return-value]


def _feature_names() -> Optional[FrozenSet[str]]:
    """Every feature name LLVM knows (None without LLVM)."""
    if "features" not in _HOST_INFO:
        _read_host()
    return _HOST_INFO["names"]  # type: ignore[return-value]


def _read_host() -> None:
    with _LOCK:
        if "features" in _HOST_INFO:
            return
        try:
            from .codegen.llvm import jit as llvm_jit

            h = llvm_jit.host()
            cpu = h.cpu
            feats = frozenset(f[1:] for f in h.features.split(",") if f.startswith("+"))
            names = h.feature_names or None
        except Exception:  # noqa: BLE001 - no LLVM here: a plain AVX2 machine
            cpu, feats, names = "haswell", CPUS["haswell"][0], None
        _HOST_INFO["cpu"] = cpu
        _HOST_INFO["names"] = names
        _HOST_INFO["features"] = feats


def _llvm_cpu_features(cpu: str, features: str) -> Optional[FrozenSet[str]]:
    """LLVM's features for ``cpu`` with ``features`` (None without LLVM)."""
    if _feature_names() is None:
        return None
    from .codegen.llvm import jit as llvm_jit

    return llvm_jit.cpu_features(cpu, features)


def _host_cache(level: int, default: int) -> int:
    """L1d / L2 / L3 size of cpu0 from sysfs, or ``default``."""
    key = f"cache{level}"
    if key in _HOST_INFO:
        return _HOST_INFO[key]  # type: ignore[return-value]
    base = "/sys/devices/system/cpu/cpu0/cache"
    size = default
    try:
        for d in sorted(os.listdir(base)):
            p = os.path.join(base, d)
            with open(os.path.join(p, "level")) as f:
                lvl = int(f.read())
            with open(os.path.join(p, "type")) as f:
                typ = f.read().strip()
            if lvl == level and typ in ("Data", "Unified"):
                with open(os.path.join(p, "size")) as f:
                    txt = f.read().strip()
                mult = {"K": 1024, "M": 1024 * 1024}.get(txt[-1], 1)
                size = int(txt.rstrip("KM")) * mult
                break
    except (OSError, ValueError):
        pass
    _HOST_INFO[key] = size
    return size


def as_target(target) -> Target:
    """``target`` as a :class:`Target` (a string is parsed)."""
    return target if isinstance(target, Target) else Target(target)
