"""Every error tecomp raises on purpose.

User mistakes raise a subclass of :class:`TecompError` whose message names the object
(stage, axis, tensor, argument) and says how to fix it.  A broken internal invariant
raises :class:`InternalError`, whose message says it is a tecomp bug.
"""

__all__ = ["TecompError", "ArgumentError", "AutodiffError", "AutoScheduleError", "BoundsError",
           "BuildError", "ComputeError", "DeviceCodeError", "DTypeError", "ExportError", "ExprError",
           "GPUModelError", "InternalError", "KernelAssertionError", "KernelMemoryError",
           "LoadError", "LowerError", "RaceError", "ResourceLimitError",
           "RuntimeUnavailableError", "ScheduleError", "ShapeError", "TargetError",
           "TensorMapError"]


class TecompError(Exception):
    """Base class of every error tecomp raises on purpose."""


class DTypeError(TecompError, TypeError):
    """An unknown dtype, or operands whose dtypes do not combine."""


class ExprError(TecompError, TypeError):
    """An expression was built or used in a way the DSL does not allow."""


class ShapeError(TecompError, ValueError):
    """A shape, extent or index that is not valid (zero or negative, wrong arity, ...)."""


class ComputeError(TecompError, ValueError):
    """A compute definition that cannot be lowered (a nested reduction, a stray axis, ...)."""


class ScheduleError(TecompError, ValueError):
    """An illegal schedule primitive: names the stage and axis and says how to fix it."""


class TargetError(TecompError, ValueError):
    """A target string or :class:`~tecomp.target.Target` that is not valid (an unknown
    kind, option, CPU or architecture), or a module built for a CPU feature this machine
    lacks being called."""


class TensorMapError(TecompError, ValueError):
    """A TMA tensor map (``cuTensorMapEncodeTiled``'s arguments: a global tensor's
    address, extents and strides, the box one ``cp.async.bulk.tensor`` copies, its element
    strides and swizzle) that the hardware cannot use: checked before the driver is
    called, the message names the field and the limit."""


class LowerError(TecompError, ValueError):
    """A schedule or argument list that cannot be lowered."""


class IRParseError(TecompError, ValueError):
    """Text given to ``tc.ir.parse`` that is not printed loop IR: the message names the
    line and column, what was found there and what was expected."""


class BuildError(TecompError, RuntimeError):
    """Code generation or compilation failed for a reason the user can act on."""


class ResourceLimitError(BuildError):
    """A schedule that needs more of a fixed, documented resource of the target than it
    has: CUDA's 48 KiB of static shared memory per block, 1024 threads per block, the block
    and grid dimensions, a local or shared array of constant size.  The program and the schedule are legal; the target refuses them
    (choose smaller tiles).  The fuzzer counts these as rejected schedules, not failures."""


class ExportError(BuildError, OSError):
    """``export_library`` could not write the library or its sha256 sidecar (a directory
    it may not write to, a full disk, a directory where the sidecar goes).  The message
    names the file and the system's reason; the files at that path are left as they were."""


class ArgumentError(TecompError, TypeError):
    """A compiled kernel was called with arguments that do not match its parameters."""


class BoundsError(TecompError, IndexError):
    """A bounds-checked kernel (``build(..., checks=True)``) caught an out-of-bounds access."""


class RuntimeUnavailableError(TecompError, RuntimeError):
    """The runtime that a target needs (pycuda, a GPU, a C++ compiler) is not available."""


class LoadError(TecompError, OSError):
    """A library given to ``tc.load_module`` that cannot be loaded: missing, truncated, not
    a library ``Module.export_library`` wrote, its sha256 sidecar missing or not matching,
    written by an incompatible tecomp, or needing a CPU feature this machine lacks.  The
    message names the file and says how to fix it; nothing of the library has run."""


class DeviceCodeError(LoadError):
    """A GPU library (``export_library`` of a ``cuda`` module) holds no code the GPU can
    run: no cubin of its architecture, and PTX only of a newer one.  Raised before the
    first launch; the message names the library, the GPU and what the library holds."""


class AutodiffError(TecompError, ValueError):
    """A compute definition that cannot be differentiated as asked."""


class KernelMemoryError(TecompError, MemoryError):
    """A kernel could not allocate a heap buffer (``malloc`` returned NULL)."""


class KernelAssertionError(TecompError, AssertionError):
    """A checked kernel (``checks=True``) found an ``AssertStmt`` condition false."""


class GPUModelError(TecompError):
    """A GPU program whose behaviour is undefined (a divergent barrier, ...) or a structure
    the interpreter's GPU model does not cover.  The message names the construct."""


class RaceError(GPUModelError):
    """Two GPU threads (or blocks, or iterations of a parallel/vectorized loop) touch the
    same element without synchronisation, so the compiled program's answer depends on
    timing."""


class AutoScheduleError(TecompError, ValueError):
    """The auto-scheduler cannot work on what it was given (an argument list, a tuning
    log, a runner), or a search found no candidate that ran correctly."""


class UnknownNameError(TecompError, AttributeError):
    """A name tecomp does not have, often one TVM has (``tc.relay``, ``tc.tir``): the
    message says what tecomp offers instead.  An AttributeError, so ``hasattr`` and
    ``getattr(tc, name, default)`` work as usual."""


class InternalError(RuntimeError):
    """A broken invariant inside tecomp: always a tecomp bug, never the user's fault."""

    def __init__(self, msg: str):
        super().__init__(
            f"internal error (this is a tecomp bug, please report it with the program "
            f"that triggered it): {msg}"
        )


def internal_assert(cond: bool, msg: str) -> None:
    """Raise :class:`InternalError` when ``cond`` is false."""
    if not cond:
        raise InternalError(msg)
