"""``tc.build``: lower a schedule and generate code for a target."""
from __future__ import annotations

import gc
import logging
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Optional, Sequence, Union

import numpy as np

from .errors import ArgumentError, BuildError, LowerError, TargetError
from .codegen import cuda as _cuda_c, cuda_emu as _cuda_emu
from .runtime import nvcc as _nvcc
from .ir.deep import deep_entry
from .ir.stmt import PrimFunc

from .lower.pipeline import lower
from .target import KINDS as TARGETS  # noqa: E402,F401  (the target kinds)
from .target import Target, as_target

if TYPE_CHECKING:
    from .ir.expr import Var
    from .runtime.module import Module
    from .schedule.schedule import Schedule
    from .te.tensor import Tensor

_log = logging.getLogger(__name__)


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
def build(s_or_func: Union[Schedule, PrimFunc],
          args: Optional[Sequence[Union[Tensor, Var]]] = None,
          target: Union[str, Target] = "llvm", name: str = "main",
          checks: Optional[bool] = None, *, entry_name: Optional[str] = None,
          target_host: Union[str, Target, None] = None) -> Module:
    """Compile a schedule (or a lowered PrimFunc) for ``target``.

    Parameters
    ----------
    s_or_func : Schedule or PrimFunc
        A schedule, or what :func:`tecomp.lower` returned.
    args : sequence of Tensor or Var, optional
        The kernel's parameters in call order: the placeholders and outputs (and scalar
        ``tc.var``s); needed with a schedule, not with a PrimFunc.
    target : str or Target, optional
        ``"llvm"``: the host CPU, through llvmlite; ``"llvm -mcpu=haswell"``,
        ``"llvm -mattr=+avx2,+fma"``: another x86 CPU (see :mod:`tecomp.target`).
        ``"cuda"``: CUDA C run through pycuda (building and ``get_source`` work without
        it).  ``"cuda-emu"``: the same CUDA C compiled for the CPU with the machine's C++
        compiler, one block at a time; for checking GPU schedules without a GPU.
    name : str, optional
        The kernel's name (in the IR, the generated code and messages).
    checks : bool, optional
        (llvm) Add a bounds check to every load and store: an access out of bounds
        raises :class:`BoundsError` naming the buffer, the index and the statement.
        The default, ``None``, is ``False``, except for a function read from text by
        :func:`tecomp.ir.parse`: its indices are whatever the text says, so they are
        checked unless ``checks=False`` is given (which a GPU target, without checks,
        requires).
    entry_name : str, optional
        TVM's spelling of ``name`` (the module's ``entry_name`` is its name); giving
        both with different values is an :class:`ArgumentError`.
    target_host : str or Target, optional
        TVM's host target of a GPU module: accepted when it is this machine's CPU
        (``"llvm"``), where tecomp runs a CUDA module's host side anyway.

    Returns
    -------
    Module
        The compiled kernel: ``f(*arrays)`` runs it (destination passing),
        ``f.get_source(kind)`` shows the code, ``f.time_evaluator`` times it,
        ``f.export_library(path)`` writes a shared library (llvm).

    Raises
    ------
    LowerError
        For arguments that do not match the schedule.
    TargetError
        For a target string that is not valid.
    ScheduleError, BuildError
        For a schedule the target cannot compile (the message names the stage).

    Examples
    --------
    >>> import numpy as np
    >>> import tecomp as tc
    >>> A = tc.placeholder((16,), name="A")
    >>> B = tc.compute((16,), lambda i: A[i] + 1.0, name="B")
    >>> f = tc.build(tc.create_schedule(B.op), [A, B])
    >>> a = np.arange(16, dtype="float32"); b = np.empty(16, "float32")
    >>> f(a, b)
    >>> float(b[3])
    4.0
    """
    name = _entry_name(name, entry_name)
    _check_target_host(target, target_host)
    with _gc_paused():
        return _build(s_or_func, args, target, name, checks)


def _entry_name(name, entry_name):
    """``name``, or TVM's ``entry_name`` where only that was given."""
    if entry_name is None:
        return name
    if name != "main" and name != entry_name:
        raise ArgumentError(f"tc.build: name={name!r:.60} and entry_name={entry_name!r:.60} "
                            f"name the function twice; give one of them (name= is tecomp's)")
    return entry_name


def _check_target_host(target, target_host) -> None:
    """TVM's ``target_host``: accepted when it is this machine's CPU, else refused."""
    if target_host is None:
        return
    try:
        th = as_target(target_host)
    except TargetError as e:
        raise ArgumentError(f"tc.build: target_host: {e}") from None
    if not (th.is_cpu and th.is_host):
        raise ArgumentError(
            f"tc.build: target_host={str(th)!r:.80}: tecomp runs the host side of a module on "
            f"this machine's CPU and cannot compile it for another; drop target_host (or pass "
            f"'llvm'), and give the device in target= (e.g. target='cuda')")


class Backend:
    """How ``tc.build`` turns a lowered function into a module for one target kind (and,
    for CPUs, one instruction set): :data:`BACKENDS` holds one per ``name``."""

    kind = ""
    #: the key of :data:`BACKENDS`: the kind, and a CPU's instruction set
    name = ""

    def start(self) -> None:
        """Called before lowering (work that may overlap it)."""

    def build(self, func: PrimFunc, target, checks: bool):
        raise NotImplementedError

    def ahead_compiler(self, target):
        """How a search compiles its candidates ahead, side by side, into the caches the
        measuring process builds from: ``(prepare, compile)``, ``prepare(func)`` run in
        the caller's thread on a lowered function and ``compile(prepared)`` in a worker
        thread; or None where nothing is compiled ahead (the default: the measuring
        process builds each candidate itself)."""
        return None

    #: how the auto-scheduler starts the child process that measures a candidate:
    #: ``"fork"`` (cheap: a child per candidate) or ``"spawn"`` (a fresh interpreter,
    #: kept for the whole run: what a device runtime that does not survive a fork needs)
    measure_start = "fork"

    def timed_call(self, f, arrays):
        """``(call, fetch)`` for timing module ``f`` on the host arrays ``arrays``:
        ``call(*arrays)`` runs the kernel as it is timed (no copies), ``fetch()`` gives
        the arguments on the host as they are now.  Raises ValueError for a candidate
        that must not be timed."""
        return f, lambda: arrays


class LlvmBackend(Backend):
    """A CPU, through llvmlite: a module run in this process (:mod:`tecomp.runtime.llvm`)
    where the target's instruction set is this machine's; compiled, printed and exported
    (``export_library``, with the instruction set's cross compiler) but never called here
    where it is another's (:mod:`tecomp.testing.qemu` runs such a library under
    qemu-user).  One instance per instruction set of :data:`tecomp.target.ISAS`; the
    machine facts are the instruction set's module's (``Target.machine``), the code
    generator's decisions its policy's (``tecomp.codegen.llvm.module.POLICIES``)."""

    kind = "llvm"

    def __init__(self, isa: str, name: str):
        self.isa = isa
        self.name = name

    def start(self) -> None:
        # (lazy: llvmlite, which a GPU build or a process that loads libraries never needs)
        from .codegen.llvm import jit as llvm_jit

        # the first build of a process starts the LLVM optimiser worker while it lowers
        llvm_jit.start_worker()

    def build(self, func, target, checks):
        # (lazy: llvmlite, as above)
        from .codegen.llvm import build_llvm

        return build_llvm(func, checks=checks, target=target)


class CudaBackend(Backend):
    """The GPU: CUDA C compiled by NVRTC/nvcc and run through pycuda."""

    kind = name = "cuda"
    # CUDA does not survive a fork of a process that initialised it
    measure_start = "spawn"

    def build(self, func, target, checks):
        return _cuda_c.build_cuda(func, target=target)

    def ahead_compiler(self, target):
        """nvcc into the cubin cache, for the target's ``-arch`` or GPU 0's (None
        without nvcc or a GPU to read the architecture from)."""
        arch = getattr(target, "arch", None) or device_arch()
        if arch is None or _nvcc.find_nvcc() is None:
            return None
        return _cuda_c.codegen_cuda, lambda cs: _nvcc.compile_cubin(cs.source, arch)

    def timed_call(self, f, arrays):
        """The arrays copied to the GPU once (pycuda GPUArrays, so that a timed call is
        the launch and its wait); a kernel that keeps anything in local memory (spilled
        registers, an array indexed at run time) is rejected before it is timed."""
        # (lazy: pycuda, the optional `cuda` extra)
        import pycuda.gpuarray as gpuarray

        drv = f.driver()
        with drv.active():
            for k, fn in zip(f.kernels, f._kernel_functions(drv)):
                local = int(getattr(fn, "local_size_bytes", 0) or 0)
                if local:
                    raise ValueError(f"kernel {k.name} keeps {local} bytes per thread in "
                                     "local memory (spilled registers): rejected before "
                                     "timing")
            dev = [gpuarray.to_gpu(a) if isinstance(a, np.ndarray) else a for a in arrays]

        def call(*_):
            f(*dev)

        def fetch():
            with drv.active():
                return [d.get() if hasattr(d, "get") else d for d in dev]
        return call, fetch


class CudaEmuBackend(Backend):
    """The CUDA C compiled for this CPU and run one block at a time (no GPU needed)."""

    kind = name = "cuda-emu"

    def build(self, func, target, checks):
        return _cuda_emu.build_cuda_emu(func)

    def ahead_compiler(self, target):
        """The C++ compiler into the emulation's library cache."""
        return _cuda_c.codegen_cuda, lambda cs: _cuda_emu.compile_emu_library(cs, load=False)


_ARCH: Optional[str] = None


def device_arch() -> Optional[str]:
    """``sm_XY`` of GPU 0, through the driver (no context is made), or None."""
    global _ARCH
    if _ARCH is None:
        try:
            import pycuda.driver as cuda

            cuda.init()
            _ARCH = "sm_%d%d" % cuda.Device(0).compute_capability()
        except Exception:  # noqa: BLE001 - no pycuda, no driver, no device
            _ARCH = ""
    return _ARCH or None


#: the backends: one per target kind (:data:`tecomp.target.KINDS`), the CPU's one per
#: instruction set (:data:`tecomp.target.ISAS`)
BACKENDS = {b.name: b for b in (LlvmBackend("x86-64", "llvm-x86"),
                                LlvmBackend("aarch64", "llvm-aarch64"),
                                CudaBackend(), CudaEmuBackend())}
_CPU_BACKENDS = {b.isa: b for b in BACKENDS.values() if isinstance(b, LlvmBackend)}


def backend_for(target) -> Backend:
    """The :class:`Backend` that builds for ``target`` (a Target or its string)."""
    t = as_target(target)
    return _CPU_BACKENDS[t.isa] if t.is_cpu else BACKENDS[t.kind]


def _build(s_or_func, args, target, name, checks):
    tgt = as_target(target)
    backend = backend_for(tgt)
    t0 = time.perf_counter()
    backend.start()
    stats = {}
    if isinstance(s_or_func, PrimFunc):
        func = s_or_func
        if args is not None:
            raise LowerError("tc.build(func): a lowered PrimFunc already has its parameters; "
                             "do not pass args")
        if checks is None:
            # a function read from text (tc.ir.parse) is the user's program: its accesses
            # are checked unless the caller vouches for them with checks=False
            checks = bool(func.attrs.get("from_text"))
            if checks and not tgt.is_cpu:
                raise BuildError(
                    f"tc.build({func.name}, target={str(tgt)!r}): {func.name} was read from "
                    f"text (tc.ir.parse), whose indices tecomp does not check on GPU targets "
                    f"(checks=True is for llvm); pass checks=False to build it as written, "
                    f"taking care that every index stays inside its buffer, or try the edit "
                    f"on the CPU first (tecomp.ir.interp.run reports an access out of bounds)")
    else:
        if args is None:
            raise LowerError("tc.build(s, args): give the argument list (input and output tensors)")
        func = lower(s_or_func, args, name=name, target=tgt, stats=stats)
    checks = bool(checks)
    mod = backend.build(func, tgt, checks)
    try:
        mod.lower_seconds = stats.get("lower_seconds", 0.0)
        mod.build_seconds = time.perf_counter() - t0
        mod.prim_func = func
    except AttributeError:
        pass
    _log.debug("build %s for target %s (%s backend): %.3f s, lowering %.3f s", func.name, tgt,
               backend.name or backend.kind, time.perf_counter() - t0,
               stats.get("lower_seconds", 0.0))
    return mod
