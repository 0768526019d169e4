"""The AArch64 policy of the LLVM code generator (see :mod:`tecomp.codegen.llvm.policy`).

What the emitter does for 64-bit Arm CPUs (``llvm -mtriple=aarch64-linux-gnu``), from
the architecture's definition:

* **Register width**: 16 bytes (Advanced SIMD's ``q`` registers; code for a CPU with SVE is
  planned for its smallest vector length, see :mod:`tecomp.target.aarch64`), or the SVE
  vector length ``-msve-vector-bits`` fixes: every function then carries
  ``vscale_range(n, n)`` (``n`` = bits / 128), which lets LLVM compile vectors of that
  width (tecomp's 8 float32 lanes for 256 bits) to SVE instructions, predicated for the
  length, instead of splitting them into 128-bit NEON pieces.
* **FMA**: every AArch64 CPU has fused multiply-adds (``fmla``), so tecomp's vector
  ``exp``/``erf`` use ``llvm.fma``.
* **Float min/max**: ``fmin``/``fmax`` propagate NaN, which is what ``llvm.minimum`` /
  ``llvm.maximum`` are: one instruction each, the generic policy's choice.
* **No lane padding, no wide strided loads**: there are no masked vector loads without
  SVE; LLVM's own ``ld2``/``ld3``/``ld4`` lowering of a strided gather is left to it.
"""
from __future__ import annotations

from ...target.aarch64 import vscale_range
from .policy import TargetPolicy


class AArch64Policy(TargetPolicy):
    """The emitter's decisions for AArch64 CPUs (see the module docstring)."""

    def __init__(self, target):
        super().__init__(target)
        bits = target.sve_vector_bits
        self.register_bytes = 16 if bits is None else bits // 8
        self.has_fma = True
        self.function_attributes = vscale_range(bits)
