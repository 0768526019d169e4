"""The hook between the function emitter and the target: :class:`TargetPolicy`.

The emitter (:mod:`tecomp.codegen.llvm.emitter`) asks its policy (``self.policy``) every
question whose answer depends on the CPU rather than on LLVM's semantics: how wide a
vector register is, whether an odd lane count is padded into one masked access, whether
a small constant stride is one wide load and a shuffle, whether the CPU has fused
multiply-adds, how a vector float min/max is written.  The module builder picks the
policy once per module (:func:`tecomp.codegen.llvm.module.policy_for`).

:class:`TargetPolicy` is what any LLVM target gets: no special cases, the plain LLVM
operation everywhere (LLVM legalises it for the CPU).  :class:`X86Policy`
(:mod:`tecomp.codegen.llvm.x86`) overrides it for x86, the CPUs tecomp generates code
for today.  A policy for another architecture subclasses :class:`TargetPolicy` and is
returned by ``policy_for`` for its targets.
"""
from __future__ import annotations


class TargetPolicy:
    """The emitter's target-dependent decisions for an LLVM target with no special cases.

    Facts (attributes, set once per module):

    * ``register_bytes``: bytes of one vector register; a masked load wider than this is
      emitted as register-wide masked loads (``_FnEmitter.masked_load``).  16 here (the
      narrowest SIMD registers among LLVM's vector targets; smaller pieces are always
      correct).
    * ``has_fma``: fused multiply-adds in hardware, so tecomp's vector ``exp`` and ``erf``
      use explicit ``llvm.fma`` (``_FnEmitter._madd``).  False here: a multiply and an
      add (``llvm.fma`` without the instruction is a libm call per lane).
    * ``pads_lanes``: whether :meth:`pad_lanes` may widen an access (the module builder
      then finds the buffers a store reads back, which are never padded).
    * ``vector_minmax_select``: float ``min``/``max`` of vectors as a compare and select
      (the target's own instruction where :meth:`vector_op` gives one) plus a NaN test
      of the second operand; False here: ``llvm.minimum`` /
      ``llvm.maximum``, as for scalars (both propagate NaN; which zero ``max(0.0, -0.0)``
      gives is unspecified either way).
    * ``paired_nan_tests``: an unrolled run of float ``max``/``min`` updates of one
      accumulator is one chain whose values get one NaN test a pair
      (``emit_control.PAIRED_NAN_TESTS``), an argmax's two rows a step under one
      (``PAIRED_SELECTION_TESTS``); False here.
    * ``function_attributes``: LLVM function attributes every generated function gets
      besides the CPU and its features (AArch64's ``vscale_range`` of a fixed SVE
      vector length); none here.  ``unconstrained``: the names of functions that get
      the CPU and features but not these.
    * ``width_attributes``: LLVM function attributes of a register width narrower than the
      target's (a module under ``pragma vector_bytes``), on every function, the host's
      modules too; none here.

    ``vector_bytes`` (the module's ``pragma vector_bytes``, 0 for none): registers of that
    width asked for where the target's are wider; here, and on every target but x86
    with AVX-512 (where 32 makes it AVX2's policy on 256-bit registers:
    :class:`~tecomp.codegen.llvm.x86.X86Policy`), no effect.

    Questions (methods): :meth:`store_fence`, :meth:`pad_lanes`, :meth:`strided_wide_load`, :meth:`vector_op`,
    :meth:`prologue`.
    """

    def __init__(self, target, vector_bytes: int = 0):
        #: the :class:`~tecomp.target.Target` the module is generated for
        self.target = target
        self.register_bytes = 16
        self.has_fma = False
        self.pads_lanes = False
        self.vector_minmax_select = False
        self.paired_nan_tests = False
        self.function_attributes = ""
        self.unconstrained = ()
        self.width_attributes = ""

    def store_fence(self, mb, b) -> None:
        """Emit, at ``b``, the fence that orders the non-temporal stores before it
        (``pragma nontemporal``) with every memory access after it, in this thread and as
        other threads see them.  Here: LLVM's ``fence seq_cst``."""
        b.fence("seq_cst")

    def pad_lanes(self, lanes: int, memty) -> int:
        """The lane count an unmasked contiguous vector access of ``lanes`` elements of
        the LLVM type ``memty`` (not of a buffer a store reads back) is widened to, as one
        masked access with a constant mask; ``lanes`` for none.  Here: none."""
        return lanes

    def strided_wide_load(self, step: int, lanes: int, memty) -> bool:
        """Whether an unmasked load of the lanes ``base + i*step`` (``step`` a constant
        other than 0 and 1) of ``memty`` is one contiguous masked load of
        ``step * lanes`` elements and a shuffle (``_FnEmitter.wide_load``) instead of a
        ``llvm.masked.gather``.  Here: no (a gather, which LLVM lowers for any CPU)."""
        return False

    def pattern_wide_load(self, span: int, lanes: int, memty) -> bool:
        """Whether an unmasked load whose ``lanes`` lanes read constant offsets from one
        base, within ``span`` contiguous elements of ``memty`` (a grouped convolution's
        input channel repeated over each group's lanes), is one contiguous masked load of
        the span and a shuffle (``_FnEmitter.pattern_load``) instead of a
        ``llvm.masked.gather``.  Here: no."""
        return False

    def vector_op(self, op: str, ty):
        """The target's one instruction for the operation ``op`` on values of the LLVM
        vector type ``ty``, as a function ``emit(builder, module_builder, *operands)``
        returning the result, or None where it has none (the vector math functions then
        compute it from plain operations, with the same result):

        * ``"scalef"``, ``(p, n)``: ``p * 2**n`` for integral float ``n``, rounded once;
        * ``"getexp"``, ``(x,)``: ``floor(log2(|x|))`` as a float, subnormals included
          (``-inf`` for 0, ``inf`` for infinities);
        * ``"getmant"``, ``(x,)``: the significand of ``x`` scaled into ``[1, 2)``, a NaN
          for a negative ``x`` (but ``-0.0``), 0 for 0, 1 for ``inf``;
        * ``"getmant34"``, ``(x,)``: the significand of ``|x|`` scaled into ``[3/4, 3/2)``
          (``|x| = m 2^k`` with ``k`` ``getexp``'s or one more), 0 for 0, 1 for ``inf``;
        * ``"max"``/``"min"``, ``(x, y)``: ``x > y ? x : y`` / ``x < y ? x : y`` lane by
          lane, ``y`` where either is NaN (x86's ``maxps``/``minps``), as one instruction
          per register that LLVM does not merge with the selects around it;
        * ``"lookup16"``, ``(table, idx)``: ``table[idx & 15]`` lane by lane, ``table``
          16 float32 values (Python floats), ``idx`` int32 lanes, for a float32 ``ty``
          (scalar or vector), where the target reads vectors of them with a table
          instruction (x86's ``vpermps``; erf's coefficients are chosen this way);
        * ``"lookup32"``, ``(table, idx)``: the same with 32 values, ``table[idx & 31]``
          (AVX-512's ``vpermi2ps``; softplus's coefficients, pow's tables);
        * ``"half_bits"``, ``(x,)``: float32 lanes rounded to float16 as ``fptrunc``
          rounds them, as their bits (i16 lanes; x86's ``vcvtps2ph``): what a
          non-temporal store of float16 stores (LLVM's x86 backend has none for half).

        Here: None for all.
        """
        return None

    def prologue(self, em) -> None:
        """Emit, with the function emitter ``em`` at the start of a kernel's body, the
        checks that code for this target needs of the machine it runs on before it
        touches memory (AArch64: the SVE vector length the code was compiled for).
        Here: none."""

    def __repr__(self):
        return f"{type(self).__name__}({self.target})"
