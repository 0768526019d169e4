"""AArch64 (64-bit Arm): the machine facts of ``llvm -mtriple=aarch64-linux-gnu`` targets.

The CPUs tecomp knows by LLVM name, their features and caches, the features ``-mattr``
takes, and the vector width and registers of the machine model.  The facts of an x86
target are in :mod:`tecomp.target.x86`; :class:`~tecomp.target.Target` asks the module
of its instruction set.

* **Vectors.**  Every AArch64 CPU has Advanced SIMD (NEON): 32 registers of 128 bits, 4
  float32 lanes, fused multiply-adds, and ``fmin``/``fmax`` that propagate NaN (what
  ``llvm.minimum``/``llvm.maximum`` are).  tecomp's vectors have a fixed lane count, so
  code for a CPU with SVE (``-mattr=+sve``, ``-mcpu=neoverse-v1``) is planned for 128-bit
  vectors too: LLVM uses SVE instructions where they help (its own vectorizer's
  scalable loops), never wider registers than the smallest SVE implementation has.
* **Fixed-length SVE.**  ``-msve-vector-bits=N`` (N in :data:`SVE_VECTOR_BITS`, clang's
  option) says the machine's SVE vectors are ``N`` bits: tecomp plans ``N / 32``
  float32 lanes and every generated function carries ``vscale_range(N/128, N/128)``, so
  LLVM compiles tecomp's ``N``-bit vectors to SVE instructions (``z`` registers,
  predicated loads and stores) for exactly that length.  Such code runs only on
  machines whose vector length is ``N`` (Graviton3's is 256; under qemu:
  ``-cpu max,sveN=on``).
* **Caches** are per core, from the vendors' documents (a shared last-level cache divided
  by the cores that share it); ``generic`` is a small core.
* **Features** are LLVM's names.  Without a table of every AArch64 feature here (llvmlite
  lists a target's features for the host only), ``-mattr`` takes those of
  :data:`FEATURES`; a CPU's are its table entry's, plus what ``-mattr`` adds and implies,
  less what it removes and what needs that.
"""
from __future__ import annotations

from typing import Dict, FrozenSet, Tuple

from ..errors import TargetError
from .machine import did_you_mean, features_with

#: the name of the instruction set, as a :class:`~tecomp.target.Target` reports it
ISA = "aarch64"
#: the first words of the LLVM triples of AArch64 code
TRIPLE_ARCHS = ("aarch64", "arm64")
#: the triple an ``-mtriple=aarch64`` target compiles for when it names no other
DEFAULT_TRIPLE = "aarch64-unknown-linux-gnu"
#: the C compiler drivers that link a library of this instruction set's code on another
#: machine (``export_library`` tries them in this order); the variable that names one
CROSS_COMPILERS = ("aarch64-linux-gnu-gcc",)
CROSS_CC_VARIABLE = "TECOMP_CC_AARCH64"
#: the ``-mcpu`` of a target that names none
DEFAULT_CPU = "generic"
#: a load/store instruction set: arithmetic reads registers only
#: (``CpuModel.memory_operands``)
MEMORY_OPERANDS = False

_V8 = frozenset({"neon", "fp-armv8"})
_V82 = _V8 | {"fullfp16", "dotprod", "rcpc", "lse"}
_V84 = _V82 | {"bf16", "i8mm"}

#: the features ``-mattr`` takes, and what each brings along
FEATURES: Dict[str, FrozenSet[str]] = {
    "fp-armv8": frozenset(),
    "neon": frozenset({"fp-armv8"}),
    "crc": frozenset(),
    "lse": frozenset(),
    "rcpc": frozenset(),
    "fullfp16": frozenset({"fp-armv8"}),
    "dotprod": frozenset({"neon", "fp-armv8"}),
    "bf16": frozenset(),
    "i8mm": frozenset(),
    "sve": frozenset({"neon", "fp-armv8", "fullfp16"}),
    "sve2": frozenset({"sve", "neon", "fp-armv8", "fullfp16"}),
}

#: what every AArch64 CPU has and tecomp's code needs: the procedure call standard
#: passes floats in the SIMD registers; ``-mattr`` cannot remove these
BASELINE = _V8

#: ``-mcpu`` names tecomp knows: (features, L1d bytes, L2 bytes per core, L3 bytes per core)
CPUS: Dict[str, Tuple[FrozenSet[str], int, int, int]] = {
    "generic": (_V8, 32 << 10, 256 << 10, 1 << 20),
    "cortex-a53": (_V8 | {"crc"}, 32 << 10, 128 << 10, 128 << 10),
    "cortex-a72": (_V8 | {"crc"}, 32 << 10, 512 << 10, 512 << 10),
    "cortex-a76": (_V82 | {"crc"}, 64 << 10, 512 << 10, 1 << 20),
    "neoverse-n1": (_V82 | {"crc"}, 64 << 10, 1 << 20, 512 << 10),
    "neoverse-v1": (_V84 | {"crc", "sve"}, 64 << 10, 1 << 20, 512 << 10),
    "neoverse-n2": (_V84 | {"crc", "sve", "sve2"}, 64 << 10, 1 << 20, 512 << 10),
    "neoverse-v2": (_V84 | {"crc", "sve", "sve2"}, 64 << 10, 2 << 20, 1 << 20),
    "apple-m1": (_V82 | {"crc"}, 128 << 10, 3 << 20, 2 << 20),
}


def check_feature(entry: str, known=None) -> None:
    """Refuse the ``-mattr`` entry ``entry`` (``+name`` or ``-name``) when it names no
    feature of :data:`FEATURES` or removes one of :data:`BASELINE`."""
    name = entry[1:]
    if name not in FEATURES:
        raise TargetError(f"target llvm (aarch64): -mattr names {name!r:.40}, which is not an "
                          f"AArch64 feature tecomp knows; {did_you_mean(name, FEATURES)}known: "
                          f"{', '.join(sorted(FEATURES))}")
    if entry[0] == "-" and name in BASELINE:
        raise TargetError(f"target llvm (aarch64): -mattr={entry} removes {name}, which every "
                          f"AArch64 CPU has and tecomp's code needs (floats travel in the "
                          f"SIMD registers): remove only features above "
                          f"{', '.join(sorted(BASELINE))}")


def cpu_features(cpu: str, mattr: Tuple[str, ...], base=None) -> FrozenSet[str]:
    """The features of code for ``cpu`` with the ``-mattr`` entries ``mattr`` (on
    ``base`` instead of the CPU's own features when given)."""
    return features_with(CPUS[cpu][0] if base is None else base, mattr, FEATURES)


#: the SVE vector lengths ``-msve-vector-bits`` takes (the architecture's: multiples of
#: 128 up to 2048; LLVM's fixed-length lowering takes the powers of two)
SVE_VECTOR_BITS = (128, 256, 512, 1024, 2048)


def check_vector_bits(value: str, features: FrozenSet[str]) -> int:
    """The SVE vector length of ``-msve-vector-bits=value`` for code with ``features``;
    a TargetError where it is not one of :data:`SVE_VECTOR_BITS` or the target has no
    SVE."""
    known = ", ".join(map(str, SVE_VECTOR_BITS))
    if not value.isdigit() or int(value) not in SVE_VECTOR_BITS:
        raise TargetError(f"target llvm (aarch64): -msve-vector-bits={value!r:.20} is not an "
                          f"SVE vector length LLVM compiles fixed-length code for; give one "
                          f"of {known}")
    if "sve" not in features:
        raise TargetError(f"target llvm (aarch64): -msve-vector-bits={value} fixes the length "
                          f"of SVE vectors, and this target has no SVE; add -mattr=+sve or "
                          f"a CPU with it (-mcpu=neoverse-v1, neoverse-n2, neoverse-v2)")
    return int(value)


def vector_lanes(features: FrozenSet[str], vector_bits: int = 128) -> int:
    """float32 lanes of one vector register: 4 (128-bit NEON registers; SVE code is
    planned for its smallest vector length, see the module docstring), or those of
    ``vector_bits`` (``-msve-vector-bits``)."""
    return vector_bits // 32


def vscale_range(vector_bits: "int | None") -> str:
    """The LLVM function attribute of code for SVE vectors of ``vector_bits`` (empty for
    a length not fixed)."""
    if vector_bits is None:
        return ""
    n = vector_bits // 128
    return f"vscale_range({n},{n})"


def vector_registers(features: FrozenSet[str]) -> int:
    """Architectural vector registers: 32."""
    return 32
