"""The LLVM host: the native target, one optimising TargetMachine, and the one compile
step every CPU module goes through (parse -> verify -> O3 -> MCJIT -> addresses).

* **One lock.**  llvmlite's calls go through ctypes, which releases the GIL, and LLVM's
  global context is not thread-safe: every call into LLVM (parsing, optimising, JIT,
  emitting assembly) holds :data:`LLVM_LOCK`.
* **Target machines.**  One TargetMachine for the host CPU (``llvm.get_host_cpu_name()``
  and ``llvm.get_host_cpu_features()``, opt level 3) is created once and reused for the
  optimisation pipeline (it supplies the cost model: vector width, FMA, ...) and for
  ``emit_assembly``.  MCJIT takes *ownership* of the TargetMachine it is created with
  (llvmlite marks it owned and the engine frees it), so each execution engine gets a
  fresh one; creating it costs about a millisecond.
* **Optimisation.**  llvmlite 0.50 only has LLVM's new pass manager: the default
  ``O3`` module pipeline from ``llvm.create_pass_builder(tm, PipelineTuningOptions)``
  with loop and SLP vectorisation and unrolling on.
* **Symbols.**  libm and libpthread functions (``erff``, ``tanhf``, ``pthread_create``,
  ...) resolve from the running process (loaded with ``load_library_permanently``);
  runtime functions written in LLVM IR (the thread pool) are registered by name with
  ``llvm.add_symbol`` so that kernels refer to them by name and their IR text stays the
  same in every process.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
import time
from typing import Dict, Iterable, Optional

import llvmlite.binding as llvm

#: Held around every call into LLVM (see the module docstring).
LLVM_LOCK = threading.RLock()


def _new_lock_in_child() -> None:
    # a fork() while another thread compiled would leave the child's lock held forever
    global LLVM_LOCK
    LLVM_LOCK = threading.RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_lock_in_child)


class Host:
    """The native target and the shared optimising TargetMachine."""

    def __init__(self):
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        llvm.initialize_native_asmparser()
        for lib in (ctypes.util.find_library("m"), ctypes.util.find_library("pthread")):
            if lib:
                try:
                    llvm.load_library_permanently(lib)
                except RuntimeError:  # pragma: no cover - the symbols are in-process anyway
                    pass
        self.triple = llvm.get_process_triple()
        self.target = llvm.Target.from_triple(self.triple)
        self.cpu = llvm.get_host_cpu_name()
        try:
            self.features = llvm.get_host_cpu_features().flatten()
        except RuntimeError:  # pragma: no cover - some hosts cannot report features
            self.features = ""
        self.tm = self.new_target_machine()
        self.data_layout = str(self.tm.target_data)
        self.is_x86 = self.triple.startswith(("x86_64", "i686", "i386"))
        self.is_aarch64 = self.triple.startswith(("aarch64", "arm64"))

    def new_target_machine(self):
        return self.target.create_target_machine(
            cpu=self.cpu, features=self.features, opt=3, reloc="default",
            codemodel="jitdefault", jit=True)

    def has_feature(self, name: str) -> bool:
        return ("+" + name) in self.features.split(",")


_HOST: Optional[Host] = None


def host() -> Host:
    """The process-wide :class:`Host` (created on first use)."""
    global _HOST
    if _HOST is None:
        with LLVM_LOCK:
            if _HOST is None:
                _HOST = Host()
    return _HOST


def optimize(mod, explicit: bool = False) -> None:
    """Run the O3 module pipeline on the llvmlite ``ModuleRef`` in place.

    ``explicit``: the schedule already vectorized and unrolled the kernel (every
    ``vectorized`` loop was widened by tecomp): LLVM's loop vectorizer, SLP vectorizer and
    loop unroller have nothing left to do but cost about two thirds of the optimisation
    and JIT time (they re-unroll the widened loops), so they are switched off; the rest
    of O3 (inlining, LICM's promotion of accumulators to registers, GVN, instcombine,
    instruction selection with FMA contraction) runs as usual."""
    h = host()
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = not explicit
    pto.slp_vectorization = not explicit
    pto.loop_unrolling = not explicit
    pb = llvm.create_pass_builder(h.tm, pto)
    mpm = pb.getModulePassManager()
    mpm.run(mod, pb)


class JitModule:
    """One compiled LLVM module: its engine, its IR before and after optimisation, the
    addresses of the requested functions, and how long each step took."""

    def __init__(self, engine, unopt_ir: str, opt_ir, addresses: Dict[str, int],
                 timings: Dict[str, float]):
        self.engine = engine
        self.unopt_ir = unopt_ir
        # the optimised module (kept alive by the engine); printed on first request
        self._opt = opt_ir
        self.addresses = addresses
        self.timings = timings
        self._asm: Optional[str] = None

    @property
    def opt_ir(self) -> str:
        """The optimised LLVM IR (printed on first request)."""
        if not isinstance(self._opt, str):
            with LLVM_LOCK:
                if not isinstance(self._opt, str):
                    self._opt = str(self._opt)
        return self._opt

    @property
    def asm(self) -> str:
        """Host assembly of the optimised module (generated on first request)."""
        if self._asm is None:
            with LLVM_LOCK:
                if self._asm is None:
                    mod = llvm.parse_assembly(self.opt_ir)
                    self._asm = host().tm.emit_assembly(mod)
        return self._asm


def compile_ir(ir_text: str, symbols: Iterable[str], *, opt: bool = True,
               explicit: bool = False) -> JitModule:
    """Parse, verify, optimise and JIT ``ir_text``; return the addresses of ``symbols``.
    ``explicit``: see :func:`optimize`.

    Raises whatever LLVM raises (``RuntimeError``); the caller wraps it.
    """
    h = host()
    timings = {}
    with LLVM_LOCK:
        t0 = time.perf_counter()
        mod = llvm.parse_assembly(ir_text)
        mod.triple = h.triple
        mod.data_layout = h.data_layout
        mod.verify()
        t1 = time.perf_counter()
        if opt:
            optimize(mod, explicit)
        t2 = time.perf_counter()
        engine = llvm.create_mcjit_compiler(mod, h.new_target_machine())
        engine.finalize_object()
        addresses = {}
        for s in symbols:
            a = engine.get_function_address(s)
            if not a:
                raise RuntimeError(f"symbol {s!r} not found in the JIT-compiled module")
            addresses[s] = a
        t3 = time.perf_counter()
    timings["parse"] = t1 - t0
    timings["optimize"] = t2 - t1
    timings["jit"] = t3 - t2
    return JitModule(engine, ir_text, mod, addresses, timings)


def add_symbol(name: str, address: int) -> None:
    """Make ``name`` resolve to ``address`` in every module JIT-compiled afterwards."""
    with LLVM_LOCK:
        llvm.add_symbol(name, address)
