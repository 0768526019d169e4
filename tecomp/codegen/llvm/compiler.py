"""Compiling a PrimFunc for the CPU: :class:`VariantCompiler` generates a variant's module
(:mod:`tecomp.codegen.llvm.module`) and compiles it (:mod:`tecomp.codegen.llvm.jit`);
:func:`build_llvm` checks the function and returns the callable
:class:`~tecomp.runtime.llvm.Module`, its contiguous no-alias variant compiled.
"""
from __future__ import annotations

import time

from ...errors import BuildError, InternalError, TecompError
from ...ir.deep import deep_entry
from ...ir.functor import Visitor
from ...ir.names import display
from ...ir.stmt import PrimFunc
from ...lower.pipeline import check_bound_vars, prepare_for_codegen
from ...lower.vectorize import buffer_uses
from ...runtime.llvm import PYOBJECT_DATA_OFFSET, Module
from ...target import as_target
from ...runtime.signature import Signature
from . import export as _export, jit as llvm_jit
from .emitter import _internal_message
from .intrinsics import check_calls, unknown_intrinsic_message
from .module import _ModuleBuilder
from .threadpool import ensure_pool


def _check_func(func: PrimFunc, sig: Signature) -> None:
    """Build-time checks of things the CPU target cannot run or the IR gets wrong."""
    check_bound_vars(func.name, func.params, func.body, BuildError)
    params = {bp.buffer for bp in sig.buffers}
    uses = buffer_uses(func.body)
    for b in uses.used:
        if b not in params and b not in uses.allocated:
            raise BuildError(f"buffer {b.name} is used in {func.name} but is neither a parameter "
                             f"nor allocated in the body; add it to the arguments")

    class _Threads(Visitor):
        def visit_For(self, s):
            if s.kind == "thread":
                raise BuildError(
                    f"the loop over `{s.var.name}` is bound to the GPU thread axis "
                    f"{s.thread_tag or '(unnamed)'}; the llvm (CPU) target cannot run GPU-bound "
                    f"loops: build with target='cuda' or remove the bind")
            self.generic_visit(s)

    _Threads().visit(func.body)



class VariantCompiler:
    """Generates and compiles the variants of one PrimFunc (used by the runtime)."""

    def __init__(self, func: PrimFunc, sig: Signature, checks: bool, target=None):
        self.target = as_target(target if target is not None else "llvm")
        #: ``func`` after the target's codegen passes (vector plans, parallel tasks)
        self.func = prepare_for_codegen(func, self.target)
        self.sig = sig
        self.checks = checks

    def generate(self, layout: str, noalias: bool) -> _ModuleBuilder:
        mb = _ModuleBuilder(self.func, self.sig, layout, noalias, self.checks, self.target)
        try:
            mb.build()
        except (TecompError, InternalError) as exc:
            raise _with_func(exc, self.func) from exc
        except Exception as exc:  # noqa: BLE001 - anything else is our bug
            raise InternalError(f"LLVM code generation of {self.func.name} failed: "
                                f"{type(exc).__name__}: {exc}") from exc
        return mb

    @staticmethod
    def compile_binder(ir_text: str, symbols):
        """JIT-compile the runtime's argument binder (:func:`tecomp.runtime.llvm._binder`)."""
        return llvm_jit.compile_ir(ir_text, symbols)

    @staticmethod
    def export_library(mod, path) -> None:
        """``mod.export_library(path)`` of a module this compiler built."""
        _export.export_library(mod, path, pyobject_data_offset=PYOBJECT_DATA_OFFSET)

    @deep_entry(lambda self, *a: ("tc.build", self.func))
    def compile(self, layout: str, noalias: bool):
        """Return ``(JitModule, _ModuleBuilder, seconds)`` for the variant."""
        t0 = time.perf_counter()
        mb = self.generate(layout, noalias)
        text = mb.text()
        t1 = time.perf_counter()
        if self.target.is_native_isa and ("tecomp_parallel_for" in text or "tecomp_ws_" in text):
            ensure_pool()
        # the LLVM intrinsics the tensor intrinsics call: LLVM aborts the process that
        # reads some wrong calls, so each is compiled alone in a child process first where
        # this process would read the kernel (TECOMP_LLVM_OPT_WORKER=0), and after the
        # worker failed on it (to tell the user's call from tecomp's bug) otherwise
        calls = [c for c in mb.user_calls.values() if c.is_llvm]
        if not self.target.is_native_isa:
            # tecomp's own intrinsics for another instruction set are checked by its tests
            # (under qemu); a user's cannot be checked here
            calls = [c for c in calls if not c.builtin]
        if calls and not self.target.is_native_isa:
            raise BuildError(
                f"{display(self.func.name)} tensorizes with {display(calls[0].intrin)}, whose "
                f"ib.call of the LLVM intrinsic {display(calls[0].name)} tecomp checks by "
                f"compiling it for this machine's instruction set, not for {self.target} "
                f"({self.target.isa}): tensorize with an intrinsic written in plain "
                f"operations (ib.emit) for that target, or build it on an "
                f"{self.target.isa} machine")
        try:
            jm = llvm_jit.compile_ir(text, [mb.symbol, mb.symbol + "_pyarrays"],
                                     explicit=mb.explicitly_vectorized(),
                                     check=(lambda: check_calls(calls, self.target))
                                     if calls else None, target=self.target)
        except llvm_jit.UnresolvedSymbolError as exc:
            unknown = [c for c in calls if c.name in exc.symbols]
            if unknown:
                raise BuildError(unknown_intrinsic_message(unknown[0])) from None
            raise BuildError(unresolved_message(self.func.name, exc.symbols, self.target,
                                                "nothing in this process defines")) from None
        except BuildError:       # (a user's setting, e.g. TECOMP_LLVM_OPT_TIMEOUT)
            raise
        except RuntimeError as exc:
            check_calls(calls, self.target)
            raise InternalError(f"LLVM rejected the module generated for {self.func.name} "
                                f"({layout}, noalias={noalias}): {exc}") from exc
        jm.timings["codegen"] = t1 - t0
        return jm, mb, time.perf_counter() - t0


def unresolved_message(name: str, symbols, target, where: str) -> str:
    """What a BuildError says of the functions ``symbols`` the code of kernel ``name``
    calls and ``where`` (e.g. "nothing in this process defines") describes."""
    shown = ", ".join(display(s)[:100] for s in list(symbols)[:8])
    more = f" and {len(symbols) - 8} more" if len(symbols) > 8 else ""
    return (f"the code LLVM generated for {display(name)} calls {shown}{more}, which "
            f"{where}: a call would jump to a null address. A tensor intrinsic's ib.call "
            f"must name an LLVM intrinsic (e.g. 'llvm.fma.v8f32') or a function of a "
            f"library loaded in this process (libc, libm); a name starting with '__' is a "
            f"helper LLVM calls for an operation target {target} has no instruction for: "
            f"build for a target with the features it needs")


def _with_func(exc, func: PrimFunc):
    """``exc`` again, its message ending with the name of the function being built."""
    if isinstance(exc, InternalError):
        return InternalError(f"{_internal_message(exc)}\n  in primfn {func.name}")
    try:
        return type(exc)(f"{exc}\n  in primfn {func.name}")
    except Exception:  # noqa: BLE001 - an exotic constructor: keep the original
        return exc


def build_llvm(func: PrimFunc, *, checks: bool = False, target=None):
    """Compile ``func`` for ``target`` (an ``llvm`` :class:`~tecomp.target.Target`, by
    default the one it was lowered for, else the host CPU); return a callable
    :class:`~tecomp.runtime.llvm.Module`.

    The contiguous, no-alias variant is compiled now; the strided and aliasing variants
    when a call first needs them.  ``checks=True`` bounds-checks every load and store.
    """
    if not isinstance(func, PrimFunc):
        raise BuildError(f"build_llvm expects a PrimFunc, got {type(func).__name__}")
    t0 = time.perf_counter()
    sig = Signature(func)
    _check_func(func, sig)

    tgt = as_target(target if target is not None else func.attrs.get("target", "llvm"))
    if not tgt.is_cpu:
        raise BuildError(f"build_llvm: {func.name} was lowered for target {str(tgt)!r}; "
                         f"build it with tc.build(..., target={tgt.kind!r})")
    vc = VariantCompiler(func, sig, checks, tgt)
    jm, mb, _ = vc.compile("contiguous", True)
    seconds = time.perf_counter() - t0
    return Module(func, sig, vc, jm, mb, checks=checks, compile_seconds=seconds, target=tgt)
