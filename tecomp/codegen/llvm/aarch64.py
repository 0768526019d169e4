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
* **The vector length, checked**: code for a fixed SVE length computes wrong results,
  and stores past its arrays' ends, on a machine with longer vectors; each kernel first
  compares the vector length (``rdvl``) with the one it was compiled for and returns the assertion
  error (``KernelAssertionError``) instead (one ``rdvl`` and a compare per call).
* **No lane padding, no wide strided loads**: there are no masked vector loads without
  SVE; LLVM's own ``ld2``/``ld3``/``ld4`` lowering of a strided gather is left to it.
"""
from __future__ import annotations

import llvmlite.ir as ir

from ...target.aarch64 import vscale_range
from .abi import ERR_ASSERT
from .policy import TargetPolicy
from .values import _I64


class AArch64Policy(TargetPolicy):
    """The emitter's decisions for AArch64 CPUs (see the module docstring)."""

    def __init__(self, target, vector_bytes: int = 0):
        super().__init__(target)
        bits = target.sve_vector_bits
        self.register_bytes = 16 if bits is None else bits // 8
        self.has_fma = True
        self.function_attributes = vscale_range(bits)

    #: the function that reads the vector length: it alone gets no ``vscale_range`` (in
    #: a function with one, LLVM folds ``llvm.vscale`` to the length assumed)
    VECTOR_LENGTH_FN = "tecomp.sve_vector_bytes"

    def _vector_length(self, mb) -> ir.Function:
        """``i64 tecomp.sve_vector_bytes()``: this machine's SVE vector length in bytes
        (``llvm.vscale`` * 16: ``rdvl``), never inlined."""
        fn = mb.module.globals.get(self.VECTOR_LENGTH_FN)
        if fn is not None:
            return fn
        fn = ir.Function(mb.module, ir.FunctionType(_I64, []), name=self.VECTOR_LENGTH_FN)
        fn.linkage = "internal"
        fn.attributes.add("noinline")
        fn.attributes.add("nounwind")
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        vscale = b.call(mb.intrinsic("llvm.vscale", _I64, [], [_I64]), [])
        b.ret(b.mul(vscale, ir.Constant(_I64, 16)))
        self.unconstrained = (self.VECTOR_LENGTH_FN,)
        return fn

    def prologue(self, em) -> None:
        """With ``-msve-vector-bits=N``: fail with an assertion error unless this
        machine's SVE vectors are ``N`` bits (see the module docstring)."""
        bits = self.target.sve_vector_bits
        if bits is None:
            return
        b = em.b
        vl = b.call(self._vector_length(em.mb), [])
        site = em.mb.add_site(
            "assert", "", f"the kernel was compiled for SVE vectors of {bits} bits "
            f"(-msve-vector-bits={bits}) and this machine's are not {bits} bits: build it "
            f"for this machine's vector length, or without -msve-vector-bits",
            f"rdvl == {bits // 8}")
        fail = b.icmp_unsigned("!=", vl, ir.Constant(_I64, bits // 8))
        em.guard(fail, lambda: em.report(ERR_ASSERT, site), name="vector_length")
