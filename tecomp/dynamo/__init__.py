"""``torch.compile(model, backend="tecomp")``: whole PyTorch models through tecomp.

    import torch, tecomp.dynamo            # the import registers the backend "tecomp"
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(),
                                torch.nn.Linear(128, 10))
    fast = torch.compile(model, backend="tecomp")
    y = fast(torch.randn(8, 64))           # compiled on the first call
    y.sum().backward()                     # the backward graph runs through tecomp too

An installed tecomp (``pip install tecomp[torch]``) also registers the backend through
the ``torch_dynamo_backends`` entry point, so ``backend="tecomp"`` works without the
import.

TorchDynamo captures the model's graph; AOTAutograd decomposes it to core ATen and
splits training into a forward and a backward graph; :func:`backend` compiles each of
them (and the inference graph) with :class:`~tecomp.dynamo.graph.CompiledGraph`: the
supported ATen nodes are grouped into kernels (each GEMM, convolution, pooling, norm,
softmax or attention with its elementwise neighbours), each scheduled by
``tc.auto_schedule``, identical ones built once; the others run eagerly in the same
compiled callable (a
partition of the graph, not a graph break), each unsupported operator named once in the
log (logger ``tecomp.dynamo``, level INFO).  The supported operators:
docs/torch_compile.md.

Options (``torch.compile(model, backend="tecomp", options={...})``):

``trials`` (int, default 0)
    The auto-scheduler's measured trials per kernel (0: its analytic schedules).
``log`` (path, default None)
    The auto-scheduler's records (reused by later compilations).
``cache`` (bool, default True)
    Keep the kernels in ``$TECOMP_CACHE_DIR/dynamo`` for other processes.
``threads`` (``"auto"``, the default, ``"tecomp"`` or ``"torch"``)
    Whose threads the kernels' parallel loops run on while a compiled graph runs:
    tecomp's pool, or PyTorch's OpenMP team (where PyTorch runs on libgomp; elsewhere
    tecomp's pool, said once in the log).  PyTorch's and tecomp's idle threads both spin
    for a while before they sleep (PyTorch's for milliseconds), so where PyTorch's
    operators and tecomp's kernels alternate (a training step: the loss, autograd and
    the optimizer are PyTorch's), two pools' threads compete for the cores; ``"torch"``
    makes it one set of threads, every thread taking a contiguous share of each loop (as
    OpenMP's static schedule: a thread that loses its core to another process holds the
    loop up, where tecomp's pool hands its share to the others).  ``"torch"`` is faster
    on cores of one's own (a CNN's training step 1.6x on 2 threads) but where other
    processes load the cores, PyTorch's OpenMP regions, and the kernels on them, slow
    down many times more than tecomp's pool (benchmarks/history/2026-11-30.md).
    ``"auto"`` measures: each training graph (forward, backward) times its calls with
    either setting and runs the faster, trying the other now and then
    (:class:`~tecomp.dynamo.openmp.Chooser`); inference graphs, which need not have
    PyTorch's operators around them, run on tecomp's pool.  The setting holds for the
    calling thread during a graph's call only: a tecomp kernel called outside a graph,
    or by another thread meanwhile, runs on tecomp's pool; in a child process made by
    ``fork()`` (where the parent's OpenMP team does not exist) the graphs run on
    tecomp's pool.
``prepack`` (bool, default False)
    In an inference graph (``torch.no_grad()``, ``torch.inference_mode()``, or
    parameters without gradients), pack a convolution's weight once into the layout its
    kernel reads (where its template would copy it at every call: vectors across the
    output channels, a 1x1 convolution's GEMM) and reuse the packed copy while the
    weight is unchanged: the copy is keyed by the tensor, its version counter and its
    memory, so an in-place update (an optimizer's step, ``load_state_dict``,
    ``w.add_(1)`` under ``torch.no_grad()``) or a new tensor is packed again.  A change
    made behind the version counter (``w.data.copy_(v)``, an EMA updated through
    ``.data``) is not seen, and the kernels then read the stale copy: so it is off by
    default, as Inductor's ``freezing`` (:mod:`tecomp.dynamo.prepack`).  Training graphs
    are not affected.

``dynamic`` (bool, default True)
    In a graph with symbolic sizes (TorchDynamo's automatic dynamic shapes, or
    ``torch._dynamo.mark_dynamic``), build each kernel once with symbolic extents
    (``tc.var``), for every size (True), or for each new size (False: a kernel of
    constant extents per size, as for static graphs).

Shapes: a static graph (TorchDynamo's guards recompile it for new shapes) gets kernels of
its constant sizes; a graph with symbolic sizes gets kernels with symbolic extents, built
once and run for every size, except those that cannot be expressed so (each logged),
which are built for each new size (docs/torch_compile.md, "Shapes").
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import torch
from torch._decomp import core_aten_decompositions
from torch._dynamo.backends import registry as _registry
from torch._dynamo.backends.common import aot_autograd

from ..autoschedule.records import check_log_path
from ..errors import ArgumentError, TargetError
from ..target import as_target
from . import cache as _cache
from .graph import CompiledGraph

__all__ = ["backend", "Options", "STATS"]

#: the name ``torch.compile`` knows the backend by
NAME = "tecomp"

STATS = _cache.STATS
"""This process's region kernels by where they came from: ``built`` (compiled here),
``disk`` (loaded from ``$TECOMP_CACHE_DIR/dynamo``), ``memory`` (an identical region's
kernel reused) and ``failed`` (regions that run eagerly because they could not be
compiled, each logged)."""


class Options:
    """The backend's options (``torch.compile(..., options={...})``; see the module
    docstring).

    Parameters
    ----------
    trials : int, optional
        Measured auto-scheduler trials per kernel (0: analytic).
    log : str or os.PathLike, optional
        The auto-scheduler's log of records.
    cache : bool, optional
        Keep the kernels on disk (``$TECOMP_CACHE_DIR/dynamo``).
    target : str or Target, optional
        A CPU target (``"llvm"``, the default: this machine).
    threads : str, optional
        ``"auto"`` (the default), ``"tecomp"`` or ``"torch"``: whose threads run the
        kernels' parallel loops while a graph runs (see the module docstring).
    prepack : bool, optional
        Pack the convolutions' constant weights of inference graphs once (off by
        default; see the module docstring).
    dynamic : bool, optional
        Kernels with symbolic extents for a graph with symbolic sizes (True, the
        default), or a kernel per size (False).

    Raises
    ------
    ArgumentError
        For an option of the wrong type or value (a ``log`` that is no file path, or a
        directory, a device, a FIFO or a socket).
    TargetError
        For a target that is not this machine's CPU.
    """

    def __init__(self, trials: int = 0, log: Any = None, cache: bool = True,
                 target: Any = "llvm", threads: str = "auto", prepack: bool = False,
                 dynamic: bool = True):
        if isinstance(trials, bool) or not isinstance(trials, int) or trials < 0:
            raise ArgumentError(f"torch.compile(backend='tecomp'): option trials must be an "
                                f"int >= 0, got {trials!r:.60}")
        if log is not None:
            # a bad log failed every kernel's auto_schedule: the whole model ran eagerly,
            # with a warning per kernel
            log = check_log_path(log, "torch.compile(backend='tecomp'): option log",
                                 ArgumentError)
        if not isinstance(cache, bool):
            raise ArgumentError(f"torch.compile(backend='tecomp'): option cache must be True "
                                f"or False, got {cache!r:.60}")
        t = as_target(target)
        if not t.is_cpu or t.is_emulated or not t.is_native_isa:
            raise TargetError(
                f"torch.compile(backend='tecomp'): target {t} is not this machine's CPU; the "
                f"backend compiles for the CPU tensors live on: use target='llvm'")
        if threads not in ("auto", "tecomp", "torch"):
            raise ArgumentError(f"torch.compile(backend='tecomp'): option threads must be "
                                f"'auto', 'tecomp' or 'torch', got {threads!r:.60}")
        self.trials, self.log, self.cache, self.target = trials, log, cache, t
        if not isinstance(prepack, bool):
            raise ArgumentError(f"torch.compile(backend='tecomp'): option prepack must be "
                                f"True or False, got {prepack!r:.60}")
        if not isinstance(dynamic, bool):
            raise ArgumentError(f"torch.compile(backend='tecomp'): option dynamic must be "
                                f"True or False, got {dynamic!r:.60}")
        self.threads = threads
        self.prepack = prepack
        self.dynamic = dynamic

    def __repr__(self):
        return (f"Options(trials={self.trials}, log={self.log!r}, cache={self.cache}, "
                f"target='{self.target}', threads='{self.threads}', "
                f"prepack={self.prepack}, dynamic={self.dynamic})")


_OPTION_NAMES = ("trials", "log", "cache", "target", "threads", "prepack", "dynamic")


def _options(kwargs) -> Options:
    kwargs = dict(kwargs)
    nested = kwargs.pop("options", None)  # torch.compile(..., options={...}) passes them so
    if nested is not None:
        if not isinstance(nested, dict):
            raise ArgumentError(f"torch.compile(backend='tecomp'): options must be a dict, got "
                                f"{type(nested).__name__}")
        kwargs.update(nested)
    bad = sorted(set(kwargs) - set(_OPTION_NAMES))
    if bad:
        raise ArgumentError(
            f"torch.compile(backend='tecomp'): unknown option{'s' if len(bad) > 1 else ''} "
            f"{', '.join(repr(b)[:40] for b in bad)}; the options are "
            f"{', '.join(_OPTION_NAMES)}")
    return Options(**kwargs)


def _check_devices(example_inputs) -> None:
    for k, x in enumerate(example_inputs):
        if isinstance(x, torch.Tensor) and x.device.type != "cpu":
            raise TargetError(
                f"torch.compile(backend='tecomp'): graph input {k} (shape {list(x.shape)}) is "
                f"on {x.device}, and the backend compiles for the CPU only: move the model "
                f"and its inputs to the CPU (.to('cpu')), or use another backend for "
                f"{x.device.type} tensors")


#: core ATen decompositions the backend does not apply: PyTorch 2.13's decomposition of
#: CPU flash attention gives wrong gradients of the query/key/value projections in
#: training (a TransformerEncoderLayer's in_proj_weight.grad off by more than its own
#: magnitude); the operator is kept whole (lowered for inference, eager in training)
_KEEP = ("_scaled_dot_product_flash_attention_for_cpu", "scaled_dot_product_attention",
         "_scaled_dot_product_attention_math")


def _decompositions():
    return {op: fn for op, fn in core_aten_decompositions().items()
            if op.name().split("::")[-1].split(".")[0] not in _KEEP}


def backend(gm: torch.fx.GraphModule, example_inputs: Sequence, **options: Any) -> Callable:
    """The ``torch.compile`` backend (registered as ``"tecomp"``): AOTAutograd with core
    ATen decompositions, its forward, backward and inference graphs each compiled by
    :class:`~tecomp.dynamo.graph.CompiledGraph`.

    Parameters
    ----------
    gm : torch.fx.GraphModule
        The graph TorchDynamo captured.
    example_inputs : list
        Its (fake) example inputs.
    **options
        ``trials``, ``log``, ``cache``, ``target``, ``threads``, ``prepack``, ``dynamic`` (see
        :class:`Options`).

    Returns
    -------
    callable
        What TorchDynamo runs in place of the graph.

    Raises
    ------
    ArgumentError
        For an unknown option or a bad value.
    TargetError
        For inputs that are not CPU tensors.

    Examples
    --------
    >>> import torch
    >>> import tecomp.dynamo
    >>> f = torch.compile(torch.nn.Linear(4, 2), backend="tecomp")
    >>> f(torch.ones(3, 4)).shape
    torch.Size([3, 2])
    """
    opts = _options(options)
    _check_devices(example_inputs)

    def fw(g, ex):
        return _boxed(CompiledGraph(g, opts, "forward"))

    def bw(g, ex):
        return _boxed(CompiledGraph(g, opts, "backward"))

    def inference(g, ex):
        return _boxed(CompiledGraph(g, opts, "inference"))

    return aot_autograd(fw_compiler=fw, bw_compiler=bw, inference_compiler=inference,
                        decompositions=_decompositions())(gm, example_inputs)


def _boxed(compiled: CompiledGraph):
    """``compiled`` as a function that takes its arguments as one list (AOTAutograd's
    boxed convention, which frees each input as soon as it is read), marked in the
    function's ``__dict__`` so that the wrappers TorchDynamo puts around a backward
    (``functools.wraps``) keep the mark."""
    def run(args):
        return compiled(args)
    run._boxed_call = True
    run.compiled = compiled
    return run


def _register() -> None:
    """Register :func:`backend` as ``"tecomp"``, unless the entry point is loading this
    module (then the registry registers what it loads)."""
    if NAME in _registry._COMPILER_FNS or _registry._BACKENDS.get(NAME) is not None:
        return
    _registry.register_backend(backend, name=NAME)


_register()
