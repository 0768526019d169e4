"""CPU code generation: ``PrimFunc`` -> LLVM IR (llvmlite's IRBuilder) -> O3 -> MCJIT.

Entry point: :func:`build_llvm` returns a callable :class:`Module`
(:class:`tecomp.runtime.llvm.Module`); :class:`VariantCompiler` generates and
compiles the variants of one PrimFunc.

The modules of this package:

* ``compiler`` -- :class:`VariantCompiler`, :func:`build_llvm` and the build-time checks;
* ``module`` -- ``_ModuleBuilder``: the LLVM module of one variant (the body function,
  declarations, loop metadata, check sites, outlined parallel tasks) and
  ``policy_for``, which picks the target policy;
* ``abi`` -- the kernel ABI: the exported entry points, the error words, the variants
  (``(layout, noalias)``);
* ``emitter`` -- ``_FnEmitter``: statements and expressions into one LLVM function (its
  state, the dispatch of nodes, the scopes), and the lowering rules (index arithmetic,
  loops, widening, parallel tasks, allocation, numerics); the class is composed of one
  part per kind of construct: ``emit_memory`` (the frame, index arithmetic, loads and
  stores, allocations, prefetches), ``emit_control`` (the error exit, branches,
  conditions, asserts, loops: serial, unrolled, vectorized, parallel), ``emit_expr``
  (values in a lane context, integer folding, arithmetic, comparisons, selects, casts),
  ``emit_math`` (math functions: LLVM intrinsics, libm, tecomp's vector ``exp`` and
  ``erf``) and ``emit_calls`` (tensor intrinsics, extern calls);
* ``alias`` -- the scoped no-alias metadata of every load and store (each buffer tecomp
  allocates a scope of its own, the arguments one each or one together by variant);
* ``values`` -- the LLVM types of each dtype, the lane-context value ``Val``, buffers as a
  function sees them, constants;
* ``intrinsics`` -- intrinsic name mangling, the float16/bfloat16 conversions, and what
  a tensor intrinsic's ``llvm`` function gets (``IntrinView``, ``IntrinBuilder``);
* ``policy`` and ``x86`` -- the hook between the emitter and the CPU: the emitter asks
  its ``TargetPolicy`` (``self.policy``) every question whose answer depends on the CPU
  rather than on LLVM's semantics (register width, lane padding, strided loads, FMA,
  vector min/max); ``X86Policy`` answers for x86, the generic ``TargetPolicy`` for any
  other LLVM target;
* ``jit`` (parse, verify, O3, MCJIT; the host's target machine; the symbols machine
  code calls, checked before it is linked; a CPU's features as LLVM sees them),
  ``optproc`` (the O3 pipeline in a worker process), ``threadpool`` (the thread pool
  parallel loops run on, in LLVM IR), ``libcalls`` (the float16 / bfloat16 conversion
  helpers LLVM calls where the CPU has no instruction, in LLVM IR), ``export``
  (``Module.export_library``).  The callable :class:`Module` it
  returns (argument checks, variants, errors from inside the kernel) is the runtime's,
  :mod:`tecomp.runtime.llvm`.

Determinism: names come from the IR (loop variables, buffers) and counters in
emission order, never from ``id()`` or hashes; the same PrimFunc gives byte-identical
LLVM IR in every process.

Submodules are imported on use (llvmlite only when code is generated): this package
imports nothing itself and gives :func:`build_llvm`, :class:`VariantCompiler` and
:class:`Module` when they are first asked for.
"""
from __future__ import annotations

__all__ = ["VariantCompiler", "build_llvm", "Module"]


def __getattr__(name: str):
    if name in ("VariantCompiler", "build_llvm"):
        # (lazy: llvmlite, imported when code is first generated)
        from . import compiler

        return getattr(compiler, name)
    if name == "Module":
        # (lazy: the runtime's module, as above)
        from ...runtime.llvm import Module

        return Module
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + __all__)
