"""tecomp: a tensor compiler driven from Python, in the style of TVM's compute/schedule API.

    import tecomp as tc
    A = tc.placeholder((n, K), name="A"); B = tc.placeholder((K, m), name="B")
    k = tc.reduce_axis((0, K), name="k")
    C = tc.compute((n, m), lambda i, j: tc.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = tc.create_schedule(C.op)
    print(tc.lower(s, [A, B, C]))
    f = tc.build(s, [A, B, C], target="llvm")
"""
import logging as _logging
import sys

# every module logs to a child of the "tecomp" logger ("tecomp.autoschedule.search", ...);
# quiet unless the application configures logging (logging.basicConfig(level="INFO"))
_logging.getLogger(__name__).addHandler(_logging.NullHandler())

from .errors import (  # noqa: E402
    ArgumentError, AutodiffError, AutoScheduleError, BoundsError, BuildError, ComputeError, DeviceCodeError,
    DTypeError, ExprError,
    ExportError, GPUModelError, InternalError, IRParseError, KernelAssertionError, KernelMemoryError, LoadError,
    LowerError, RaceError, ResourceLimitError, RuntimeUnavailableError, ScheduleError, ShapeError,
    TargetError, TecompError, TensorMapError, UnknownNameError,
)
from .ir import dtype as _dtype_mod
from .ir.expr import Expr, IterVar, Var
from .te import (
    Tensor, abs, all, any, cast, ceil, comm_reducer, compute, const, cos, eq, erf, exp, exp2,
    expm1, fast_exp, floor, floordiv, floormod, fma, if_then_else, log, log1p, log2, max,
    max_value, maximum, min, min_value, minimum, ne,
    placeholder, pow, prod, reduce_axis, round, rsqrt, select, sigmoid, sin, softplus, sqrt, sum,
    tanh, tan, sign, trunc, isnan, isinf, isfinite, atan, atan2, cbrt, erfc, fast_erfc,
    fast_log,
    thread_axis, truncdiv, truncmod, var,
)
from .te import ExternOp, call_packed, extern, get_global_func, register_func  # noqa: E402
from .te import ScanOp, scan  # noqa: E402
from .te import ScatterOp, scatter_add  # noqa: E402
from .te.tensor_intrin import (  # noqa: E402
    TensorIntrin, decl_tensor_intrin, tensor_intrin, tensor_intrins_for,
)
from .schedule import Schedule, Stage, create_schedule
from .target import Target
from .lower import lower
from .build import build
from .runtime.aot import load_module  # noqa: E402  (exported libraries: Module.export_library)
from .runtime.arrays import aligned, empty  # noqa: E402  (64-byte aligned host arrays)
from .runtime.device import Device, cpu, cuda, device  # noqa: E402  (TVM's devices)
from .runtime import ndarray as nd  # noqa: E402  (tc.nd.array, as tvm.nd.array)
from . import utils  # noqa: E402  (tc.utils.get_const_tuple, as tvm.topi.utils)
from . import threads as _threads  # noqa: E402  (no llvmlite)
from .runtime import llvm as _runtime_llvm  # noqa: E402  (loaded by runtime.aot: no llvmlite)

from ._version import __version__  # noqa: E402


def set_num_threads(n: int) -> None:
    """Set how many CPU threads parallel loops use, in every thread pool (the JIT's and
    every loaded library's).

    The default is the CPUs this process may use (its affinity mask and cgroup quota),
    or the environment variable ``TECOMP_NUM_THREADS``.  Waits for a parallel region
    running in another thread to finish.

    Parameters
    ----------
    n : int
        The number of threads, the calling thread included (at least 1; at most 1024).

    Raises
    ------
    TecompError
        For a value that is not a positive integer.
    """
    _runtime_llvm.set_num_threads(n)


def get_num_threads() -> int:
    """The number of threads parallel loops use (the calling thread included).

    Returns
    -------
    int
        What :func:`set_num_threads` set, else the default (the CPUs this process may
        use, or ``TECOMP_NUM_THREADS``).
    """
    return _runtime_llvm.get_num_threads()


def release_workspace() -> int:
    """Free the temporaries that compiled CPU kernels keep for their next call.

    Each thread pool keeps a workspace cache (docs/runtime.md, "Workspace"), and each
    graph compiled by ``torch.compile(backend="tecomp")`` keeps its kernels' released
    intermediates for its next call (docs/torch_compile.md, "Memory").

    Returns
    -------
    int
        The bytes freed.
    """
    return _threads.release_workspace()


def set_workspace_limit(nbytes: int) -> None:
    """Keep at most ``nbytes`` of freed kernel temporaries for reuse, per thread pool
    (and as much again over the graphs of ``torch.compile(backend="tecomp")``).

    A pool that keeps more than the new limit frees everything it keeps.

    Parameters
    ----------
    nbytes : int
        The byte limit (default 1 GiB, or the environment variable
        ``TECOMP_WORKSPACE_LIMIT``); 0 keeps none.

    Raises
    ------
    TecompError
        For a value that is not an integer >= 0.
    """
    _threads.set_workspace_limit(nbytes)


def workspace_cached() -> int:
    """Bytes of freed kernel temporaries kept for reuse now, over every thread pool.

    Returns
    -------
    int
        The bytes kept.
    """
    return _threads.workspace_cached()


from .autodiff import gradient  # noqa: E402  (tc.gradient; tecomp.autodiff has the rest)
from .autoschedule import auto_schedule  # noqa: E402  (tc.auto_schedule)
from .strategy import schedule_backward  # noqa: E402  (tc.schedule_backward)
from . import viz  # noqa: E402  (pictures: tc.roofline, tc.draw_schedule)
from .viz import draw_schedule, roofline  # noqa: E402
from . import calibration  # noqa: E402  (the host CPU's costs measured at first use)


_GRAPHS = ("tecomp compiles tensor expressions, not model graphs: write the operators with "
           "tc.compute or tecomp.nn, and call them from PyTorch with tecomp.torch")
_TUNING = ("tc.auto_schedule(args, trials=N, log='tuning.jsonl') searches and logs; "
           "tc.auto_schedule(args, log=...) replays the best record")
_TARGETS = ("tecomp generates code for CPUs (target='llvm') and CUDA GPUs (target='cuda', or "
            "'cuda-emu' to check a GPU schedule on the CPU)")

#: TVM names tecomp does not have -> what to use instead (``tc.<name>`` raises an
#: UnknownNameError saying so)
_TVM_NAMES = {
    "tir": "tc.lower(s, args) returns the lowered loop IR (a PrimFunc: print it); its node "
           "classes are in tecomp.ir",
    "IRModule": "tc.lower(s, args) returns one PrimFunc, not an IRModule; tc.build takes "
                "the schedule (or that PrimFunc)",
    "transform": "tc.lower and tc.build run every lowering pass themselves; there is no pass "
                 "manager to call",
    "relay": _GRAPHS, "relax": _GRAPHS,
    "topi": "tecomp.nn holds the operators with their schedules (import tecomp.nn; "
            "tecomp.nn.conv2d_nchw, tecomp.nn.dense, ...)",
    "autotvm": _TUNING, "auto_scheduler": _TUNING, "meta_schedule": _TUNING,
    "gpu": "tc.cuda(0) (TVM renamed tvm.gpu to tvm.cuda)",
    "context": "tc.device('cuda', 0), tc.cpu(0) or tc.cuda(0) (TVM renamed tvm.context to "
               "tvm.device)",
    "rocm": _TARGETS, "opencl": _TARGETS, "vulkan": _TARGETS, "metal": _TARGETS,
    "contrib": "export a compiled module with f.export_library('k.so') and load it with "
               "tc.load_module('k.so'); tc.extern and tc.register_func call your own code",
    "driver": "tc.build(s, args, target) and tc.lower(s, args)",
    "script": "print(tc.lower(s, args)) gives the loop IR; tc.ir.parse(text) reads it back "
              "(edited or not) and tc.build builds it",
    "ndarray": "tc.nd.array(x) (an NDArray: a numpy array with asnumpy()) or plain numpy "
               "arrays, which compiled functions take directly",
}


def __getattr__(name: str):
    """A subpackage not imported yet (``tc.nn``, ``tc.testing``, ``tc.torch``...) is
    imported on first use; a TVM name tecomp does not have raises an UnknownNameError
    saying what to use instead."""
    import importlib
    import importlib.util

    if name.isidentifier() and not name.startswith("_"):
        if name in _TVM_NAMES:
            raise UnknownNameError(f"tecomp has no {name!r} (a TVM name): "
                                   f"{_TVM_NAMES[name]}")
        if importlib.util.find_spec(f"{__name__}.{name}") is not None:
            return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}", name=name,
                         obj=sys.modules[__name__])

#: the public names of ``import tecomp as tc`` (the API reference lists these)
__all__ = [
    # the language: tensors, computes, reductions, expressions
    "Tensor", "Expr", "Var", "IterVar", "placeholder", "compute", "reduce_axis", "thread_axis",
    "var", "const", "sum", "max", "min", "prod", "comm_reducer", "max_value", "min_value",
    "abs", "all", "any", "cast", "ceil", "cos", "eq", "erf", "exp", "exp2", "expm1", "fast_exp",
    "floor", "floordiv", "floormod", "fma", "if_then_else", "log", "log1p", "log2", "maximum",
    "minimum", "ne", "pow", "round", "rsqrt", "select", "sigmoid", "sin", "softplus", "sqrt",
    "tanh", "truncdiv", "truncmod", "tan", "sign", "trunc", "isnan", "isinf", "isfinite",
    "atan", "atan2", "cbrt", "erfc", "fast_erfc", "fast_log",
    "ExternOp", "extern", "call_packed", "register_func", "get_global_func",
    "ScanOp", "scan", "ScatterOp", "scatter_add",
    "TensorIntrin", "decl_tensor_intrin", "tensor_intrin", "tensor_intrins_for",
    # schedules, lowering, building, running
    "Schedule", "Stage", "create_schedule", "auto_schedule", "gradient", "schedule_backward",
    "Target", "lower",
    "build", "load_module", "empty", "aligned", "set_num_threads", "get_num_threads",
    "release_workspace", "set_workspace_limit", "workspace_cached",
    # TVM's spellings of devices and arrays
    "Device", "device", "cpu", "cuda", "nd",
    # pictures
    "viz", "roofline", "draw_schedule",
    # errors (tecomp.errors)
    "TecompError", "ArgumentError", "AutodiffError", "AutoScheduleError", "BoundsError",
    "BuildError", "ComputeError", "DeviceCodeError", "DTypeError", "ExprError", "ExportError",
    "GPUModelError",
    "InternalError", "KernelAssertionError", "KernelMemoryError", "LoadError", "LowerError",
    "RaceError", "ResourceLimitError", "RuntimeUnavailableError", "ScheduleError", "ShapeError",
    "TargetError", "TensorMapError", "UnknownNameError", "IRParseError",
]
