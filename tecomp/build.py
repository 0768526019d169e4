"""``tc.build``: lower a schedule and generate code for a target."""
from __future__ import annotations

import gc
import time
from contextlib import contextmanager

from .errors import LowerError
from .ir.deep import deep_entry
from .ir.stmt import PrimFunc

from .lower.pipeline import lower
from .target import KINDS as TARGETS  # noqa: E402,F401  (the target kinds)
from .target import as_target


@contextmanager
def _gc_paused():
    """Python's cyclic collector off for the duration of a build: lowering and llvmlite
    allocate tens of thousands of short-lived objects, which would trigger several
    collections (1-5 ms a build, more with a large heap); what they leave is collected
    at the next collection after.  Left as it is where the caller turned it off."""
    was = gc.isenabled()
    if was:
        gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@deep_entry(lambda s_or_func, *a, **k: ("tc.build", s_or_func))
def build(s_or_func, args=None, target="llvm", name: str = "main", checks: bool = False):
    """Compile a schedule (or a lowered PrimFunc) for ``target``: a
    :class:`~tecomp.target.Target` or its string.

    * ``"llvm"``: the host CPU, through llvmlite; ``"llvm -mcpu=haswell"``,
      ``"llvm -mattr=+avx2,+fma"``: another x86 CPU (see :mod:`tecomp.target`).
    * ``"cuda"``: CUDA C run through pycuda (building and ``get_source`` work without it).
    * ``"cuda-emu"``: the same CUDA C compiled for the CPU with the machine's C++
      compiler, one block at a time; for checking GPU schedules without a GPU.

    ``checks=True`` (llvm) adds a bounds check to every load and store: an access out of
    bounds raises :class:`BoundsError` naming the buffer, the index and the statement.
    """
    with _gc_paused():
        return _build(s_or_func, args, target, name, checks)


class Backend:
    """How ``tc.build`` turns a lowered function into a module for one target kind."""

    kind = ""

    def start(self) -> None:
        """Called before lowering (work that may overlap it)."""

    def build(self, func: PrimFunc, target, checks: bool):
        raise NotImplementedError


class LlvmBackend(Backend):
    """The CPU, through llvmlite: a module run in this process (:mod:`tecomp.runtime.llvm`)."""

    kind = "llvm"

    def start(self) -> None:
        from .codegen.llvm import jit as llvm_jit

        # the first build of a process starts the LLVM optimiser worker while it lowers
        llvm_jit.start_worker()

    def build(self, func, target, checks):
        from .codegen.llvm import build_llvm

        return build_llvm(func, checks=checks, target=target)


class CudaBackend(Backend):
    """The GPU: CUDA C compiled by NVRTC/nvcc and run through pycuda."""

    kind = "cuda"

    def build(self, func, target, checks):
        from .runtime.cuda import build_cuda

        return build_cuda(func, target=target)


class CudaEmuBackend(Backend):
    """The CUDA C compiled for this CPU and run one block at a time (no GPU needed)."""

    kind = "cuda-emu"

    def build(self, func, target, checks):
        from .codegen.cuda_emu import build_cuda_emu

        return build_cuda_emu(func)


#: the backend of each target kind (:data:`tecomp.target.KINDS`)
BACKENDS = {b.kind: b for b in (LlvmBackend(), CudaBackend(), CudaEmuBackend())}


def backend_for(target) -> Backend:
    """The :class:`Backend` that builds for ``target`` (a Target or its string)."""
    return BACKENDS[as_target(target).kind]


def _build(s_or_func, args, target, name, checks):
    tgt = as_target(target)
    backend = BACKENDS[tgt.kind]
    t0 = time.perf_counter()
    backend.start()
    stats = {}
    if isinstance(s_or_func, PrimFunc):
        func = s_or_func
        if args is not None:
            raise LowerError("tc.build(func): a lowered PrimFunc already has its parameters; "
                             "do not pass args")
    else:
        if args is None:
            raise LowerError("tc.build(s, args): give the argument list (input and output tensors)")
        func = lower(s_or_func, args, name=name, target=tgt, stats=stats)
    mod = backend.build(func, tgt, checks)
    try:
        mod.lower_seconds = stats.get("lower_seconds", 0.0)
        mod.build_seconds = time.perf_counter() - t0
        mod.prim_func = func
    except AttributeError:
        pass
    return mod
