"""``tc.Target``: what code is generated for, parsed from strings as TVM users write them.

    tc.Target("llvm")                              # the host CPU (read once, from LLVM and sysfs)
    tc.Target("llvm -mcpu=skylake-avx512")         # another x86 CPU: cross-compiled
    tc.Target("llvm -mcpu=haswell")                # AVX2 code (runs on any AVX2 machine)
    tc.Target("llvm -mattr=+avx2,+fma")            # a generic x86-64 with these features
    tc.Target("llvm -mcpu=znver4 -num-cores=8")    # and the threads the schedules plan for
    tc.Target("llvm -mtriple=aarch64-linux-gnu")   # 64-bit Arm (NEON): cross-compiled
    tc.Target("llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-v1")  # Graviton3 (SVE)
    tc.Target("llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-v1 -msve-vector-bits=256")
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
for that CPU and ``-mattr`` (asked of LLVM, :func:`tecomp.target.host.llvm_cpu_features`),
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
``-mcpu=native`` is the host, as in LLVM; so is the host's own LLVM name where it describes
the host (:func:`names_host`: not where a hypervisor masks the model number and LLVM names
a server Xeon ``rocketlake``; that name is then LLVM's Rocket Lake, another CPU).

``-mtriple`` picks the instruction set: ``x86_64-...`` (the default on an x86-64 host) or
``aarch64-...`` (64-bit Arm); its system is Linux (``...-linux-gnu``, ``-musl``,
``-android``): another system's triple (``aarch64-apple-darwin``) or a 32-bit-pointer ABI
(``x86_64-linux-gnux32``) is a :class:`TargetError`.  The facts of each are in a module of their own
(:mod:`tecomp.target.x86`, :mod:`tecomp.target.aarch64`: CPUs, features, vector width,
registers).  Code for another instruction set than this machine's is compiled, printed
(``get_source``) and exported (``export_library``, linked with that machine's cross
compiler) but not run here: a call raises a :class:`TargetError`.

``-msve-vector-bits=N`` (clang's option of the same name) fixes the SVE vector length of
an aarch64 target with SVE: tecomp's vectors are then ``N`` bits wide (``lanes`` =
``N / 32``) and LLVM compiles them to SVE instructions for that length
(:mod:`tecomp.target.aarch64`); the code runs only where the vector length is ``N``.
"""
from __future__ import annotations

import os
import re
import shutil
from typing import Dict, FrozenSet, Optional, Tuple, Union

from ..errors import ScheduleError, TargetError
from ..threads import get_num_threads, number_from_env
from .cuda import (  # noqa: F401  (the CUDA limits, for the code that reads them here)
    CUDA_ARCHS, FRAGMENT_SCOPES, MAX_BLOCK_DIMS, MAX_DYNAMIC_SHARED_BYTES, MAX_GRID_DIMS,
    MMA_MIN_SM, MMA_SCOPES, WMMA_SCOPES, sm_number,
    MAX_LOCAL_BYTES_PER_THREAD, MAX_STATIC_SHARED_BYTES, MAX_THREADS_PER_BLOCK,
    PER_THREAD_SCOPES, SHARED_ALIGN, WARP_SIZE,
)
from . import aarch64 as _aarch64, x86 as _x86
from .host import (
    cpu_name, feature_names, host_cache, host_cpu, host_features, host_triple,
    llvm_cpu_features,
)
from .machine import HOST_COSTS, MEMORY_COPY_COST, CpuModel  # noqa: F401
from .x86 import BASELINE, CPUS, INTRINSIC_ONLY, MEASURED

__all__ = ["Target", "KINDS", "CPUS", "BASELINE", "INTRINSIC_ONLY", "CpuModel", "cpu_model",
           "cpu_name", "names_host"]

KINDS = ("llvm", "cuda", "cuda-emu")
"""The target kinds ``tc.build`` knows: the first word of a target string."""

#: the instruction sets of ``llvm`` targets: the module of each one's machine facts
ISAS = {m.ISA: m for m in (_x86, _aarch64)}


def isa_of_triple(triple: str) -> "str | None":
    """The instruction set (a key of :data:`ISAS`) of LLVM's target triple ``triple``,
    or None for one tecomp does not generate code for."""
    arch = triple.split("-", 1)[0].lower()
    return next((name for name, m in ISAS.items() if arch in m.TRIPLE_ARCHS), None)


#: the environments (the triple's part after ``linux``) of the 64-bit Linux ABI tecomp's
#: code and its exported ELF libraries follow (not ``gnux32``, ``gnu_ilp32``: 32-bit
#: pointers in a 64-bit instruction set)
LINUX_ENVIRONMENTS = ("gnu", "musl", "android")


def _triple_system_problem(triple: str) -> "str | None":
    """What is wrong with the system part of ``triple`` (whose instruction set tecomp
    knows), or None.  tecomp's code is Linux code: the kernels are JIT-compiled into this
    Linux process or exported as Linux ELF shared libraries (loaded by ``tc.load_module``,
    run under qemu-user), with 64-bit pointers.  Another system's object format (Mach-O,
    COFF) or ABI would make a library that cannot be linked or loaded -- LLVM itself aborts
    the process on tecomp's ELF metadata section in a Mach-O object -- and on this
    machine's instruction set the system part was silently replaced by Linux's."""
    parts = triple.lower().split("-")[1:]
    if "linux" not in parts:
        return (f"names the system {'-'.join(parts)!r:.40}, and tecomp generates Linux code "
                f"only (ELF libraries with the Linux ABI): write a Linux triple, e.g. "
                f"-mtriple={triple.split('-', 1)[0]}-linux-gnu")
    env = parts[parts.index("linux") + 1:]
    if env and (len(env) > 1 or env[0] not in LINUX_ENVIRONMENTS):
        return (f"names the environment {'-'.join(env)!r:.30}, and tecomp's code follows the "
                f"64-bit Linux ABI of {', '.join(LINUX_ENVIRONMENTS)} (64-bit pointers): write "
                f"-mtriple={triple.split('-', 1)[0]}-linux-gnu")
    return None


def host_isa() -> "str | None":
    """This machine's instruction set (a key of :data:`ISAS`), or None."""
    return isa_of_triple(host_triple())


_NAMES_HOST: Dict[str, bool] = {}


def names_host(cpu: str) -> bool:
    """Whether LLVM's CPU name ``cpu`` is this machine's CPU: LLVM names the host so, and
    the features LLVM gives a CPU of that name include every vector extension of the
    host's (``avx...``, :data:`INTRINSIC_ONLY` aside: other extras, a hypervisor's
    leftovers, do not make the host another part, and the host keeps its entry in
    :data:`tecomp.target.x86.MEASURED`).  Not where a hypervisor hides the
    CPU's model number and LLVM names the host after another part: a server Xeon with
    AVX512-FP16, AVX512-BF16 and AMX named ``rocketlake``, a client part without them.
    ``-mcpu=<that name>`` is then LLVM's CPU of the name (another machine's features and
    caches: code for a real one), not the host; ``tc.Target("llvm")`` and
    ``-mcpu=native`` stay the host.

    Parameters
    ----------
    cpu : str
        An LLVM CPU name.

    Returns
    -------
    bool
        False for any name but the host's; True without LLVM, or where LLVM names the
        host but cannot list its features (nothing to compare)."""
    if cpu != host_cpu() or host_isa() is None:
        return False
    got = _NAMES_HOST.get(cpu)
    if got is None:
        named = llvm_cpu_features(cpu, "")
        if named is None:   # LLVM names the CPU but cannot list features: nothing to compare
            got = True
        else:
            facts = ISAS[host_isa()]
            extra = host_features() - named - getattr(facts, "INTRINSIC_ONLY", frozenset())
            got = not any(f.startswith("avx") for f in extra)
        _NAMES_HOST[cpu] = got
    return got

_OPTIONS = {"llvm": ("mcpu", "mattr", "num-cores", "mtriple", "msve-vector-bits"),
            "cuda": ("arch",), "cuda-emu": ("arch",)}
_FEATURE = re.compile(r"^[+-][a-z0-9][a-z0-9._-]*$")


def _fix(what: str) -> str:
    return (f"{what}; write targets as TVM does, e.g. 'llvm', 'llvm -mcpu=skylake-avx512', "
            f"'llvm -mattr=+avx2,+fma', 'cuda -arch=sm_90'")


class Target:
    """A compilation target, parsed from the strings TVM users write (see the module
    docstring for the options).

    Equal targets have equal ``str()``.  Its properties are the machine facts the
    schedules read: ``lanes``, ``vregs``, ``l1_bytes``, ``l2_bytes``, ``l3_bytes``,
    ``threads``, ``features``, and for CUDA the device limits.

    Parameters
    ----------
    spec : str or Target, optional
        ``"llvm"`` (the host CPU, the default), ``"llvm -mcpu=haswell"``,
        ``"llvm -mattr=+avx2,+fma"``, ``"llvm -mtriple=aarch64-linux-gnu"``,
        ``"cuda -arch=sm_90"``, ``"cuda-emu"``, ...; a Target is copied.

    Raises
    ------
    TargetError
        For an unknown kind, option, CPU, feature or architecture (the message lists
        what is known).

    Examples
    --------
    >>> import tecomp as tc
    >>> t = tc.Target("llvm -mcpu=haswell")
    >>> t.lanes
    8
    """

    __slots__ = ("kind", "mcpu", "mattr", "num_cores", "arch", "mtriple", "sve_vector_bits",
                 "_isa", "_feats", "_caches", "_host")

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
        named_native = False
        mattr: Tuple[str, ...] = ()
        num_cores = None
        arch = None
        trip = opts.get("mtriple")
        isa = None
        if kind == "llvm":
            here = host_isa()
            if trip is not None:
                isa = isa_of_triple(trip)
                if isa is None or not re.fullmatch(r"[A-Za-z0-9_.]+(-[A-Za-z0-9_.]+){1,3}", trip):
                    raise TargetError(_fix(
                        f"target llvm: -mtriple={trip!r:.60} is not supported (tecomp "
                        f"generates code for x86_64-... and aarch64-... triples, e.g. "
                        f"-mtriple=aarch64-linux-gnu)"))
                system = _triple_system_problem(trip)
                if system:
                    raise TargetError(_fix(f"target llvm: -mtriple={trip!r:.60} {system}"))
            isa = isa or here or _x86.ISA
            facts = ISAS[isa]
            native = isa == here
            named_native = mcpu == "native"
            if named_native:
                if not native:
                    raise TargetError(_fix(f"target llvm: -mcpu=native is this machine's CPU, "
                                           f"which is no {isa} CPU; name one (known: "
                                           f"{', '.join(facts.CPUS)})"))
                mcpu = host_cpu()
            if mcpu is not None and mcpu not in facts.CPUS and not (native and mcpu == host_cpu()):
                mine = f", and this machine's {host_cpu()!r} or 'native'" if native else ""
                raise TargetError(_fix(
                    f"target llvm: unknown -mcpu={mcpu!r:.40} (the {isa} CPUs known: "
                    f"{', '.join(facts.CPUS)}{mine}); for another CPU give its features with "
                    f"-mattr"))
            if "mattr" in opts:
                parts = opts["mattr"].split(",")
                for p in parts:
                    if not _FEATURE.match(p):
                        raise TargetError(_fix(f"target llvm: -mattr entry {p!r:.40} is not "
                                               f"+feature or -feature"))
                    facts.check_feature(p, feature_names() if native else None)
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
        set_(self, "mtriple", trip)
        set_(self, "_isa", isa)
        # (the host's own LLVM name is the host where it describes the host: names_host)
        set_(self, "_host", kind == "llvm" and isa == host_isa() and not mattr
             and (mcpu is None or named_native or names_host(mcpu)))
        set_(self, "_feats", None)
        set_(self, "_caches", None)
        set_(self, "sve_vector_bits", None)
        if "msve-vector-bits" in opts:
            check = getattr(ISAS[isa], "check_vector_bits", None)
            if check is None:
                raise TargetError(_fix(f"target llvm: -msve-vector-bits is for aarch64 targets "
                                       f"with SVE; this target's instruction set is {isa}"))
            set_(self, "sve_vector_bits", check(opts["msve-vector-bits"], self.features))

    def __reduce__(self):
        return (Target, (str(self),))

    def __setattr__(self, name, value):
        raise AttributeError("a tc.Target is immutable: make a new one from its string")

    # -- identity ------------------------------------------------------------------
    def __str__(self) -> str:
        parts = [self.kind]
        if self.mtriple is not None:
            parts.append(f"-mtriple={self.mtriple}")
        if self.mcpu is not None and not (self._host and self.kind == "llvm"):
            parts.append(f"-mcpu={self.mcpu}")
        if self.mattr:
            parts.append("-mattr=" + ",".join(self.mattr))
        if self.num_cores is not None:
            parts.append(f"-num-cores={self.num_cores}")
        if self.sve_vector_bits is not None:
            parts.append(f"-msve-vector-bits={self.sve_vector_bits}")
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

    # -- what kind of machine ---------------------------------------------------------
    @property
    def is_cpu(self) -> bool:
        """Code for a CPU (``llvm``): built through LLVM, run in this process or exported."""
        return self.kind == "llvm"

    @property
    def is_gpu(self) -> bool:
        """Code for the GPU (``cuda``, and ``cuda-emu``, its CUDA C run on the CPU):
        thread-bound schedules, the GPU lowering passes, the CUDA C generator."""
        return self.kind in ("cuda", "cuda-emu")

    @property
    def is_emulated(self) -> bool:
        """The GPU's CUDA C compiled for this CPU and run one block at a time
        (``cuda-emu``): no device, no pycuda."""
        return self.kind == "cuda-emu"

    @property
    def machine(self) -> CpuModel:
        """The machine model of a CPU target (:class:`~tecomp.target.machine.CpuModel`):
        what the schedules adapt to.  ``TECOMP_VECTOR_LANES`` (8 or 16) overrides the
        host's vector width (8 also halves its registers: the AVX2 blockings)."""
        self._need("llvm", "machine")
        lanes, vregs = self.lanes, self.vregs
        env = number_from_env("TECOMP_VECTOR_LANES", None, low=8, high=16, integer=True,
                              choices=(8, 16), error=TargetError,
                              use="the vector width the schedules plan for on the host",
                              unset="the host CPU's width")
        if env is not None and self._host:
            lanes = env
            vregs = 32 if lanes == 16 else 16
        measured = measured_costs(self)
        fma_bits = measured.get("fma_bits")
        costs = {k: v for k, v in measured.items() if k != "fma_bits"}
        if "gather_cost" in costs and "transpose_cost" not in costs:
            costs["transpose_cost"] = costs["gather_cost"] / 2
        return CpuModel(
            lanes, vregs, self.threads, self.l1_bytes, self.l2_bytes, self.l3_bytes,
            masks="avx512f" in self.features,
            fma_lanes=min(lanes, fma_bits // 32) if fma_bits else lanes,
            memory_operands=ISAS[self._isa].MEMORY_OPERANDS, target=str(self), **costs)

    @property
    def isa(self) -> str:
        """The instruction set of an ``llvm`` target (``"x86-64"``, ``"aarch64"``: a key
        of :data:`ISAS`), from ``-mtriple``, else this machine's."""
        self._need("llvm", "isa")
        return self._isa

    @property
    def triple(self) -> str:
        """The LLVM target triple code is compiled for: this process's for this machine's
        instruction set (whatever ``-mtriple`` says of the vendor: the code is JIT-compiled
        here; its system is Linux, as every ``-mtriple`` says), else ``-mtriple``."""
        self._need("llvm", "triple")
        if self._isa == host_isa():
            return host_triple()
        return self.mtriple if self.mtriple is not None else ISAS[self._isa].DEFAULT_TRIPLE

    @property
    def is_native_isa(self) -> bool:
        """Code for this target has this machine's instruction set (it may still need
        features this CPU lacks: :meth:`runs_here`)."""
        return self.kind == "llvm" and self._isa == host_isa()

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
            return host_cpu()
        return self.mcpu if self.mcpu is not None else ISAS[self._isa].DEFAULT_CPU

    @property
    def features(self) -> FrozenSet[str]:
        """The CPU features (LLVM's names, without ``+``) LLVM compiles for: the host's,
        or those LLVM gives ``cpu`` with the ``-mattr`` entries (what they add and
        imply, less what they remove and what needs it)."""
        self._need("llvm", "features")
        if self._feats is None:
            facts = ISAS[self._isa]
            if self._host:
                feats = host_features()
            elif not self.is_native_isa:   # another machine's: tecomp's table
                feats = facts.cpu_features(self.cpu, self.mattr)
            else:
                feats = llvm_cpu_features(self.cpu, self.llvm_features)
            if feats is None:   # no LLVM here: tecomp's table
                feats = facts.cpu_features(   # (this machine's CPU by name: its features)
                    self.cpu, self.mattr, None if self.cpu in facts.CPUS else host_features())
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
        """float32 lanes of one vector register (of ``-msve-vector-bits`` where given)."""
        if self.sve_vector_bits is not None:
            return ISAS[self.isa].vector_lanes(self.features, self.sve_vector_bits)
        return ISAS[self.isa].vector_lanes(self.features)

    @property
    def vregs(self) -> int:
        """Architectural vector registers."""
        return ISAS[self.isa].vector_registers(self.features)

    def _cache_sizes(self) -> Tuple[int, int, int]:
        if self._caches is None:
            cpus = ISAS[self._isa].CPUS
            if self._host or (self.is_native_isa and self.cpu == host_cpu() and (
                    names_host(self.cpu) or self.cpu not in cpus)):
                # this machine's CPU (with other features, perhaps); a name LLVM gives
                # the host that describes another part (names_host) is that part's
                c = (host_cache(1, 32 << 10), host_cache(2, 512 << 10),
                     host_cache(3, 32 << 20))
            else:
                c = cpus[self.cpu][1:]
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
        return max(1, int(get_num_threads()))

    def missing_here(self, required=()) -> Tuple[str, ...]:
        """The features code for this target may use (:attr:`checked_features`, and
        ``required``: those a tensor intrinsic in it needs) that this machine's CPU lacks,
        sorted."""
        if self.kind != "llvm" or not self.is_native_isa:
            return ()
        need = set(required) if self._host else self.checked_features | set(required)
        return tuple(sorted(need - host_features()))

    def runs_here(self, required=()) -> Optional[str]:
        """None when code for this target runs on this machine, else why not
        (``required``: see :meth:`missing_here`)."""
        if self.kind == "llvm" and not self.is_native_isa:
            return (f"code for {self} is {self.isa} machine code and this machine is "
                    f"{host_isa() or host_triple()}: export it (export_library) and run it "
                    f"on an {self.isa} machine, or under qemu-user "
                    f"(tecomp.testing.qemu); get_source('asm') shows its code")
        missing = self.missing_here(required)
        if missing:
            return (f"code for {self} may use {', '.join(missing)}, which this CPU "
                    f"({host_cpu()}) does not have")
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


def cross_compilers(target: Target) -> Tuple[Tuple[str, ...], Optional[str]]:
    """The C compiler drivers that link a library of ``target``'s instruction set on
    another machine, in the order tried (``$TECOMP_CC_<ISA>`` alone where it is set, else
    the facts module's ``CROSS_COMPILERS``), and the first of them on the PATH (or None)."""
    facts = ISAS[target.isa]
    var = facts.CROSS_CC_VARIABLE
    names = (os.environ[var],) if os.environ.get(var) else tuple(facts.CROSS_COMPILERS)
    return names, next((shutil.which(n) for n in names if shutil.which(n)), None)


def measured_costs(target: "Target") -> dict:
    """The measured costs of the ``llvm`` target ``target``'s machine model: for the
    host's CPU, what :data:`tecomp.target.machine.HOST_COSTS` gives (its calibration);
    for any other, its entry in :data:`tecomp.target.x86.MEASURED` (``{}``: the
    defaults)."""
    table = MEASURED.get(target.cpu)
    if HOST_COSTS and target.is_host and target.is_native_isa:
        # (a name that is not the host's own part, names_host: another CPU's entry)
        return HOST_COSTS[0](target, table if names_host(target.cpu) else None)
    return dict(table or {})


def as_target(target) -> Target:
    """``target`` as a :class:`Target` (a string is parsed)."""
    return target if isinstance(target, Target) else Target(target)


def cpu_model(target: Union[str, Target] = "llvm") -> CpuModel:
    """The :class:`~tecomp.target.machine.CpuModel` of ``target``: what the CPU schedules
    read.

    Parameters
    ----------
    target : str or Target, optional
        A CPU target: ``"llvm"`` is the host, ``"llvm -mcpu=haswell"`` gives the AVX2
        schedules on any machine.

    Returns
    -------
    CpuModel
        The facts of that CPU.

    Raises
    ------
    ScheduleError
        For a target that is not valid or not a CPU.

    Examples
    --------
    >>> from tecomp.target import cpu_model
    >>> cpu_model("llvm -mcpu=haswell").vregs
    16
    """
    try:
        t = as_target(target)
    except TargetError as exc:
        raise ScheduleError(f"the tecomp.nn CPU schedules: {exc}") from None
    if not t.is_cpu:
        raise ScheduleError(f"the tecomp.nn CPU schedules are for target='llvm', got {str(t)!r}")
    return t.machine
