"""tecomp ops inside PyTorch models: a differentiable torch op from a compute definition.

    import torch, tecomp as tc, tecomp.nn as nn, tecomp.torch as tct
    X = tc.placeholder((tc.var("n"), 768), name="X"); W = tc.placeholder((3072, 768), name="W")
    b = tc.placeholder((3072,), name="b")
    Y = nn.gelu(nn.bias_add(nn.dense(X, W), b, axis=1))
    ffn = tct.op([X, W, b], [Y])     # forward compiled, backward derived by tc.gradient
    y = ffn(x, w, bias)              # torch tensors in and out, zero-copy; autograd works
    y.sum().backward()

:func:`op` returns an :class:`Op`, a callable that:

* takes one torch tensor per input placeholder, in order, and returns the output tensor
  (a tuple for several outputs), allocated by torch and written in place by the kernel;
  inputs are read in place (strided views too: no copy);
* binds the symbolic extents (``n`` above) from the inputs' shapes; every extent of an
  output must be an expression of the inputs' extents;
* compiles once per combination of input dtypes and caches: a float op declared in
  float32 and called with float64 tensors is compiled from the same definition in
  float64 (:func:`tecomp.te.retype.retype`), so ``torch.autograd.gradcheck`` runs on it;
* is differentiable with respect to every floating input: the backward is
  ``tc.gradient`` of the definition (the sum over the outputs, each with its incoming
  gradient as the head), scheduled by :func:`tecomp.autodiff.schedule_backward`, compiled
  on the first backward of each dtype combination; integer inputs get no gradient;
* is registered through ``torch.library`` as the custom op ``torch.ops.tecomp.<name>``
  (with a fake implementation and its autograd formula, itself a custom op), so
  ``torch.compile(model, fullgraph=True)`` runs a model that contains it without graph
  breaks.  In eager mode the op runs through a ``torch.autograd.Function`` directly,
  which costs less per call than the dispatcher; both run the same kernels.

``schedule=`` is a :class:`~tecomp.schedule.Schedule` of the declared outputs (used for
the declared dtypes; other dtypes get the default), a function ``outputs -> Schedule``
(called with the outputs of each dtype combination), or None: tecomp's default, the
auto-scheduler's schedule (``tc.auto_schedule(args, trials=trials, log=log)``: analytic
with ``trials=0``, whose rules use the ``tecomp.nn`` templates where an op has one; a
measured search of the forward kernels with ``trials > 0``, its records in ``log``).
"""
from __future__ import annotations

import itertools
import os
import re
import threading
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

import torch

from .autodiff import gradient, schedule_backward
from .autoschedule import auto_schedule
from .build import build
from .errors import ArgumentError, ComputeError, ScheduleError
from .ir import dtype as _dt
from .ir.expr import Call, Var
from .ir.functor import collect, free_vars
from .runtime.argcheck import compile_shape_expr
from .schedule import Schedule
from .target import Target, as_target
from .te import compute, placeholder
from .te.retype import retype
from .te.tensor import ComputeOp, PlaceholderOp, Tensor

__all__ = ["Op", "op"]

_TORCH_DTYPE = {
    "float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
    "float64": torch.float64,
    "int8": torch.int8, "int16": torch.int16, "int32": torch.int32, "int64": torch.int64,
    "uint8": torch.uint8, "bool": torch.bool,
}
_TC_DTYPE = {v: k for k, v in _TORCH_DTYPE.items()}

#: with ``dynamic=None``, how many shapes of one dtype combination get a kernel of their
#: own before the op compiles one kernel for every shape
SPECIALIZATIONS = 8

#: the torch.library namespace of every tecomp op
NAMESPACE = "tecomp"
_LIB: Optional[torch.library.Library] = None
_NAMES = itertools.count()
_LIB_LOCK = threading.Lock()
_is_compiling = torch.compiler.is_compiling
_grad_enabled = torch.is_grad_enabled


def op(inputs: Sequence[Tensor], outputs: Union[Tensor, Sequence[Tensor]], *,
       target: Union[str, Target] = "llvm", schedule: Union[Schedule, Callable, None] = None,
       name: Optional[str] = None, dynamic: Optional[bool] = None, trials: int = 0,
       log: Union[str, os.PathLike, None] = None) -> Op:
    """A differentiable torch op computing ``outputs`` from the placeholders ``inputs``
    (see the module docstring).

    The op takes one torch tensor per input, binds the symbolic extents from their
    shapes, compiles once per combination of input dtypes, and is differentiable with
    respect to every floating input (the backward is ``tc.gradient`` of the
    definition).  It is registered as ``torch.ops.tecomp.<name>``, so
    ``torch.compile(fullgraph=True)`` traces it.

    Parameters
    ----------
    inputs : sequence of Tensor
        The placeholders, in the order the op takes torch tensors.
    outputs : Tensor or sequence of Tensor
        The compute tensors it returns (a tuple for several).
    target : str or Target, optional
        ``"llvm"`` (CPU tensors) or ``"cuda"`` (CUDA tensors).
    schedule : Schedule or callable, optional
        A Schedule of the declared outputs (used for the declared dtypes; other dtypes
        get the default), a function ``outputs -> Schedule`` (called with the outputs of
        each dtype combination), or None: ``tc.auto_schedule(args, trials=trials,
        log=log)``.
    name : str, optional
        The op's name: ``torch.ops.tecomp.<name>`` (default: the first output's).
    dynamic : bool, optional
        None (the default): a kernel for each new value of the symbolic extents, up to
        8 per dtype combination, then one kernel for every shape; True: one kernel for
        every shape; False: always specialise.
    trials : int, optional
        Measured auto-scheduler trials for the forward kernels (0: analytic).
    log : str or os.PathLike, optional
        The auto-scheduler's log of records.

    Returns
    -------
    Op
        The op: ``y = op(x, w, ...)``.

    Raises
    ------
    ComputeError
        For inputs that are not placeholders, outputs that are not computes, a target
        torch tensors do not live on, or a bad ``dynamic`` or ``trials``.
    ScheduleError
        For a ``schedule`` of another kind.

    Examples
    --------
    >>> import torch
    >>> import tecomp as tc
    >>> import tecomp.torch as tct
    >>> X = tc.placeholder((tc.var("n"), 8), name="X")
    >>> Y = tc.compute(X.shape, lambda i, j: X[i, j] * X[i, j], name="square")
    >>> sq = tct.op([X], [Y])
    >>> x = torch.ones(3, 8, requires_grad=True)
    >>> sq(x).sum().backward()
    >>> float(x.grad[0, 0])
    2.0
    """
    return Op(inputs, outputs, target=target, schedule=schedule, name=name, dynamic=dynamic,
              trials=trials, log=log)


class _Compiled:
    """One dtype combination (and, where the op specialises, one shape): the DAG in those
    dtypes, its forward module, and what backward passes needed so far (compiled on
    first use): ``training`` for autograd in eager mode, ``bwd`` (which recomputes the
    forward's intermediates) for the custom op's autograd formula."""

    __slots__ = ("inputs", "outputs", "fwd", "out_dtypes", "bwd", "training", "lock")

    def __init__(self, inputs, outputs, fwd):
        self.inputs = inputs
        self.outputs = outputs
        self.fwd = fwd
        self.out_dtypes = [_TORCH_DTYPE[t.dtype] for t in outputs]
        self.bwd = None
        self.training = None
        self.lock = threading.Lock()


#: intrinsics whose evaluation costs tens of instructions a vector (docs/numerics.md)
_TRANSCENDENTAL = frozenset({"exp", "fast_exp", "log", "erf", "tanh", "sigmoid", "pow",
                             "sin", "cos", "exp2", "expm1", "log2", "log1p", "softplus"})


def _transcendental(op) -> bool:
    """Whether compute ``op`` calls a transcendental intrinsic."""
    if not isinstance(op, ComputeOp):
        return False
    return any(collect(b, lambda n: isinstance(n, Call) and n.op in _TRANSCENDENTAL)
               for b in op.bodies)


class _Training:
    """The forward that also writes the intermediates the gradient needs, and the
    backward that reads them instead of computing them again.

    Saved: every compute of the forward with a reduction (a GEMM, a convolution, a row
    statistic) that the gradient reads, and every elementwise one that calls a
    transcendental function (``exp``, ``erf``, ``tanh``, ...: GELU's output, a softmax's
    exponentials), as PyTorch's autograd saves them; the forward's outputs, where the
    gradient reads them, come for free.  Other elementwise intermediates are recomputed
    from those inside the backward kernel (cheaper than a round trip through memory).
    A transcendental one recomputed where a GEMM reads it costs more than it saves:
    BERT-base's FFN weight gradient with GELU recomputed in its B panels ran at 0.8x the
    speed of the same GEMM reading GELU's saved output (benchmarks/DECISIONS.md, "Torch
    bridge: transcendental intermediates saved")."""

    __slots__ = ("fwd", "saved", "outputs_read", "bwd")

    def __init__(self, fwd, saved, outputs_read, bwd):
        self.fwd = fwd                    # module: inputs, outputs, saved -> writes both
        self.saved = saved                # [(shape function, torch dtype)] per saved tensor
        self.outputs_read = outputs_read  # indexes of the outputs the backward reads
        self.bwd = bwd                    # module: inputs, heads, saved, outputs read, grads


class Op:
    """A tecomp computation as a torch op: made by :func:`op` (see it and the module
    docstring).

    Attributes: ``name`` (``torch.ops.tecomp.<name>`` is the registered op), ``inputs``,
    ``outputs``, ``target``; :meth:`compiled` gives the modules of one dtype combination.

    Parameters
    ----------
    inputs, outputs, target, schedule, name, dynamic, trials, log
        As :func:`op`'s.
    """

    def __init__(self, inputs, outputs, *, target="llvm", schedule=None, name=None,
                 dynamic: Optional[bool] = None, trials: int = 0, log=None):
        self.inputs = _placeholders(inputs)
        outs = [outputs] if isinstance(outputs, Tensor) else list(outputs) if isinstance(outputs, (list, tuple)) \
            else None
        if not outs or not all(isinstance(t, Tensor) and isinstance(t.op, ComputeOp)
                               for t in outs):
            raise ComputeError(f"tecomp.torch.op: outputs must be a compute tensor or a list of "
                               f"them, got {outputs!r:.80}")
        if len({id(t) for t in outs}) != len(outs):
            raise ComputeError("tecomp.torch.op: an output is listed twice")
        self.outputs = outs
        self.single = len(outs) == 1  # one output: a tensor, not a 1-tuple
        self.target = as_target(target)
        if self.target.is_emulated:
            raise ComputeError(f"tecomp.torch.op: target {self.target} is not one torch tensors "
                               f"live on; use 'llvm' (CPU tensors) or 'cuda' (CUDA tensors)")
        self.device_type = "cpu" if self.target.is_cpu else "cuda"
        if schedule is not None and not isinstance(schedule, Schedule) and not callable(schedule):
            raise ScheduleError(f"tecomp.torch.op: schedule must be a Schedule, a function "
                                f"outputs -> Schedule, or None, got {schedule!r:.80}")
        self.schedule = schedule
        if dynamic not in (None, True, False):
            raise ComputeError(f"tecomp.torch.op: dynamic must be None, True or False, got "
                               f"{dynamic!r}")
        self.dynamic = dynamic
        if isinstance(trials, bool) or not isinstance(trials, int) or trials < 0:
            raise ComputeError(f"tecomp.torch.op: trials must be an int >= 0, got {trials!r}")
        self.trials, self.log = trials, log
        self._check_reads()
        self._binds = _shape_binds(self.inputs)
        self._out_shapes = [self._shape_fn(t) for t in outs]
        self._diff = [i for i, x in enumerate(self.inputs) if _dt.is_float(x.dtype)]
        self._compiled: Dict[tuple, _Compiled] = {}
        self._last = None  # (key, _Compiled) of the latest call: most calls repeat it
        self._lock = threading.Lock()
        self.name = _register(self, name or outs[0].name)
        self._torch_op = getattr(getattr(torch.ops, NAMESPACE), self.name).default

    def __repr__(self):
        return (f"<tecomp.torch.Op {NAMESPACE}::{self.name} ({', '.join(x.name for x in self.inputs)})"
                f" -> ({', '.join(t.name for t in self.outputs)}) on {self.target}>")

    # -- definition checks ------------------------------------------------------------
    def _check_reads(self):
        mine = {id(x.op) for x in self.inputs}
        seen, stack = set(), [t.op for t in self.outputs]
        while stack:
            o = stack.pop()
            if id(o) in seen:
                continue
            seen.add(id(o))
            if isinstance(o, PlaceholderOp):
                if id(o) not in mine:
                    raise ComputeError(
                        f"tecomp.torch.op: the outputs read placeholder {o.name}, which is not "
                        f"among the inputs ({', '.join(x.name for x in self.inputs)}): add it")
            else:
                stack.extend(t.op for t in o.input_tensors)

    def _shape_fn(self, t: Tensor) -> Callable:
        fns = []
        for d, x in enumerate(t.shape):
            missing = [v.name for v in free_vars(x) if v not in self._binds]
            if missing:
                raise ComputeError(
                    f"tecomp.torch.op: output {t.name}'s extent {d} depends on "
                    f"{', '.join(missing)}, which is no extent of an input: a torch op takes "
                    f"tensors only, so every output extent must follow from the inputs' shapes")
            fns.append(compile_shape_expr(x))
        if not any(free_vars(x) for x in t.shape):
            const = tuple(int(f({})) for f in fns)
            return lambda env: const
        return lambda env: tuple(int(f(env)) for f in fns)

    # -- compiling --------------------------------------------------------------------
    def compiled(self, dtypes: Sequence, values: Optional[dict] = None) -> _Compiled:
        """The modules for input tensors of torch dtypes ``dtypes`` (one per input) and,
        where the op specialises (see ``dynamic``), the symbolic extents ``values``
        (``{var: int}``, as bound from the inputs' shapes); compiled on first use."""
        vals = tuple(values[v] for v in self._binds) if values and self._binds else ()
        key = (tuple(dtypes), vals)
        last = self._last
        if last is not None and last[0] == key:
            return last[1]
        c = self._compiled.get(key)
        if c is None:
            with self._lock:
                c = self._compiled.get(key)
                if c is None:
                    c = self._compiled.get((key[0], None))  # this dtype's shape-generic one
                    if c is None:
                        generic = not vals or self._generic(key[0])
                        c = self._compile(key[0], None if generic else dict(zip(self._binds, vals)))
                        self._compiled[(key[0], None) if generic else key] = c
        self._last = (key, c)
        return c

    def _generic(self, dtypes) -> bool:
        """Whether the next kernel of these dtypes is compiled for every value of the
        symbolic extents (True) or for the values of this call (False)."""
        if self.dynamic is not None:
            return self.dynamic
        if isinstance(self.schedule, Schedule):
            return True  # a Schedule of the declared, symbolic DAG
        made = sum(1 for k in self._compiled if k[0] == dtypes)
        return made >= SPECIALIZATIONS

    def _dtype_map(self, dtypes) -> Dict[str, str]:
        """The declared float types to compile in another one, for input tensors of torch
        dtypes ``dtypes``; an ArgumentError for a dtype that cannot stand in."""
        dmap = {}
        for x, td in zip(self.inputs, dtypes):
            want = _TC_DTYPE.get(td)
            if want == x.dtype:
                continue
            if want is not None and _dt.is_float(want) and _dt.is_float(x.dtype) \
                    and dmap.get(x.dtype, want) == want:
                dmap[x.dtype] = want
                continue
            raise ArgumentError(
                f"{self.name}: input {x.name} is declared {x.dtype}, got a {td} tensor: "
                f"convert it (x.to(torch.{_TORCH_DTYPE.get(x.dtype, torch.float32)}))" +
                ("; a float op is compiled for other float dtypes only when every input of "
                 "one declared float type gets the same one" if want and _dt.is_float(want)
                 else ""))
        return dmap

    def _compile(self, dtypes, values: Optional[dict]) -> _Compiled:
        dmap = self._dtype_map(dtypes)
        if dmap or values:
            outs, ins = retype(self.outputs, self.inputs, dmap, values)
        else:
            outs, ins = self.outputs, self.inputs
        s = self._schedule(outs, ins, declared=not (dmap or values))
        fwd = build(s, list(ins) + list(outs), target=self.target, name=self.name)
        return _Compiled(ins, outs, fwd)

    def _schedule(self, outs, ins, declared: bool):
        sch = self.schedule
        if isinstance(sch, Schedule):
            if declared:
                return sch
            sch = None  # a Schedule belongs to the declared DAG: the default for the others
        if callable(sch):
            s = sch(list(outs))
            if not isinstance(s, Schedule):
                raise ScheduleError(f"tecomp.torch.op {self.name}: the schedule function "
                                    f"returned {s!r:.60}, not a Schedule")
            return s
        if not self.target.is_cpu:
            raise ScheduleError(
                f"tecomp.torch.op {self.name}: target {self.target} has no default schedule "
                f"for arbitrary computes (the auto-scheduler is CPU-only): pass schedule=, a "
                f"Schedule or a function outputs -> Schedule (e.g. tecomp.nn's CUDA schedules)")

        return auto_schedule(list(ins) + list(outs), target=self.target, trials=self.trials,
                             log=self.log, progress=False)

    def _backward_module(self, c: _Compiled):
        if c.bwd is None:
            with c.lock:
                if c.bwd is None:
                    c.bwd = self._compile_backward(c)
        return c.bwd

    def _gradients(self, c: _Compiled):
        """(heads, grads): a placeholder per output for its incoming gradient, and the
        gradient of each floating input (the sum over the outputs)."""
        diff = [c.inputs[i] for i in self._diff]
        heads = [placeholder(t.shape, t.dtype, name=f"{t.name}_grad") for t in c.outputs]
        per_out = [gradient(t, diff, head=h) for t, h in zip(c.outputs, heads)]
        grads = []
        for k, x in enumerate(diff):
            terms = [g[k] for g in per_out]
            g = terms[0]
            if len(terms) > 1:
                g = compute(x.shape, lambda *i, _t=terms: _sum_at(_t, i), name=f"{x.name}_grad")
            grads.append(g)
        return heads, grads

    def _compile_backward(self, c: _Compiled):
        heads, grads = self._gradients(c)
        args = list(c.inputs) + heads + grads
        s = schedule_backward(grads, target=self.target)
        return build(s, args, target=self.target, name=f"{self.name}_backward")

    def _training(self, c: _Compiled) -> _Training:
        if c.training is None:
            with c.lock:
                if c.training is None:
                    c.training = self._compile_training(c)
        return c.training

    def _compile_training(self, c: _Compiled) -> _Training:
        heads, grads = self._gradients(c)
        forward = set()
        stack = [t.op for t in c.outputs]
        while stack:
            o = stack.pop()
            if id(o) not in forward and isinstance(o, ComputeOp):
                forward.add(id(o))
                stack.extend(t.op for t in o.input_tensors)
        outs = {id(t.op): k for k, t in enumerate(c.outputs)}
        # a Schedule (or a schedule function) given for the outputs knows nothing of saved
        # intermediates: then only the outputs are reused
        save_inner = self.schedule is None
        saved, outputs_read, seen = [], [], set()
        stack = list(grads)
        while stack:
            t = stack.pop()
            if id(t.op) in seen:
                continue
            seen.add(id(t.op))
            if id(t.op) in outs:
                outputs_read.append(outs[id(t.op)])
            elif save_inner and id(t.op) in forward and (t.op.reduce_axis or
                                                          _transcendental(t.op)):
                saved.append(t)
            elif isinstance(t.op, ComputeOp):
                stack.extend(t.op.input_tensors)
        saved.sort(key=lambda t: t.name)
        outputs_read.sort()
        replace = {t: placeholder(t.shape, t.dtype, name=f"{t.name}_saved") for t in saved}
        for k in outputs_read:
            t = c.outputs[k]
            replace[t] = placeholder(t.shape, t.dtype, name=f"{t.name}_out")
        new_grads, new_ins = retype(grads, list(c.inputs) + heads, replace=replace)
        args = new_ins + [replace[t] for t in saved] + \
            [replace[c.outputs[k]] for k in outputs_read] + new_grads
        s = schedule_backward(new_grads, target=self.target)
        bwd = build(s, args, target=self.target, name=f"{self.name}_backward")
        if saved:
            fargs = list(c.inputs) + list(c.outputs) + saved
            fwd = build(auto_schedule(fargs, target=self.target, trials=self.trials,
                                      log=self.log, progress=False),
                        fargs, target=self.target, name=f"{self.name}_train")
        else:
            fwd = c.fwd
        shapes = [(lambda env, _f=[compile_shape_expr(x) for x in t.shape]:
                   tuple(int(f(env)) for f in _f), _TORCH_DTYPE[t.dtype]) for t in saved]
        return _Training(fwd, shapes, outputs_read, bwd)

    # -- running ----------------------------------------------------------------------
    def _env(self, tensors) -> dict:
        env = {}
        for var, (i, d) in self._binds.items():
            env[var] = tensors[i].shape[d]
        return env

    def forward(self, *tensors) -> List[torch.Tensor]:
        """Run the forward kernel on ``tensors`` (no autograd); a list of outputs."""
        self._check_call(tensors)
        return self._run(tensors)

    def _run(self, tensors, training: bool = False):
        """The forward kernel on ``tensors``: the outputs; with ``training``, (outputs,
        saved intermediates, the :class:`_Training`) from the forward that also writes
        what the backward reads."""
        env = self._env(tensors) if self._binds else None
        c = self.compiled([t.dtype for t in tensors], env)
        if self.single and self.device_type == "cpu":
            shape = self._out_shapes[0](env)
            # (sizes as arguments: torch parses them faster than a tuple)
            outs = [torch.empty(*shape, dtype=c.out_dtypes[0]) if shape else
                    torch.empty(shape, dtype=c.out_dtypes[0])]
        else:
            dev = tensors[0].device if tensors else torch.device(self.device_type)
            outs = [torch.empty(f(env), dtype=dt, device=dev)
                    for f, dt in zip(self._out_shapes, c.out_dtypes)]
        if not training:
            c.fwd(*tensors, *outs)
            return outs
        # inside the autograd function: inputs that require grad are read in place
        tr = c.training or self._training(c)
        if tr.fwd is c.fwd:  # nothing to save but (perhaps) the outputs
            _call_grad_inputs(c.fwd, tensors, outs)
            return outs, (), tr
        dev = outs[0].device
        saved = [torch.empty(f(env), dtype=dt, device=dev) for f, dt in tr.saved]
        _call_grad_inputs(tr.fwd, tensors, outs + saved)
        return outs, saved, tr

    def _heads(self, c, env, tensors, grad_outputs):
        heads = []
        for k, g in enumerate(grad_outputs):
            if g is None:
                g = torch.zeros(self._out_shapes[k](env), dtype=c.out_dtypes[k],
                                device=tensors[0].device)
            heads.append(g)
        return heads

    def _grads_like(self, tensors):
        return [torch.empty(tensors[i].shape, dtype=tensors[i].dtype, device=tensors[i].device)
                for i in self._diff]

    def backward(self, tensors: Sequence[torch.Tensor],
                 grad_outputs: Sequence[Optional[torch.Tensor]]) -> List[torch.Tensor]:
        """The gradients of the floating inputs (in order), given the inputs and each
        output's incoming gradient (None: zeros); the forward's intermediates are
        computed again."""
        env = self._env(tensors)
        c = self.compiled([t.dtype for t in tensors], env)
        heads = self._heads(c, env, tensors, grad_outputs)
        grads = self._grads_like(tensors)
        self._backward_module(c)(*tensors, *heads, *grads)
        return grads

    def _backward_saved(self, tensors, saved, outputs, grad_outputs) -> List[torch.Tensor]:
        """:meth:`backward` from what ``_run(..., training=True)`` saved."""
        env = self._env(tensors)
        c = self.compiled([t.dtype for t in tensors], env)
        tr = self._training(c)
        heads = self._heads(c, env, tensors, grad_outputs)
        grads = self._grads_like(tensors)
        read = [outputs[k] for k in tr.outputs_read]  # saved only when some are read
        tr.bwd(*tensors, *heads, *saved, *read, *grads)
        return grads

    def _check_call(self, tensors):
        n = len(self.inputs)
        if len(tensors) != n:
            raise ArgumentError(f"{self.name} takes {n} tensor{'s' if n != 1 else ''} "
                                f"({', '.join(x.name for x in self.inputs)}), got {len(tensors)}")
        cpu = self.device_type == "cpu"
        for t in tensors:
            if not isinstance(t, torch.Tensor) or t.is_cpu != cpu:
                break
        else:
            return
        for k, (x, t) in enumerate(zip(self.inputs, tensors)):
            if not isinstance(t, torch.Tensor):
                raise ArgumentError(f"{self.name}: input {x.name} (argument {k + 1}) must be a "
                                    f"torch tensor, got {type(t).__name__}")
            if t.device.type != self.device_type:
                raise ArgumentError(
                    f"{self.name}: input {x.name} (argument {k + 1}) is on {t.device}, but the op "
                    f"runs on {self.device_type} (target {self.target}): move it with "
                    f".to({self.device_type!r})")

    def _check_transforms(self, tensors):
        """An ArgumentError when a tensor is a torch.func transform's (functorch) tensor."""
        from torch._C import _functorch

        for k, (x, t) in enumerate(zip(self.inputs, tensors)):
            if _functorch.is_functorch_wrapped_tensor(t):
                raise ArgumentError(
                    f"{self.name}: input {x.name} (argument {k + 1}) is a torch.func "
                    f"transform's tensor (torch.func.grad, vmap, jacrev...), and tecomp.torch "
                    f"ops do not support those transforms: differentiate with torch.autograd "
                    f"(x.requires_grad_(), y.backward() or torch.autograd.grad), or call the "
                    f"op outside the transform")

    def __call__(self, *tensors):
        if _is_compiling():
            out = self._torch_op(*tensors)
            return out[0] if self.single and isinstance(out, (list, tuple)) else out
        self._check_call(tensors)
        for t in tensors:
            if t.requires_grad:
                break
        else:  # nothing to differentiate: no autograd node
            outs = self._run(tensors)
            return outs[0] if self.single else tuple(outs)
        if _grad_enabled():
            try:
                return _Function.apply(self, *tensors)  # one output: the tensor itself
            except RuntimeError:
                self._check_transforms(tensors)  # torch.func.grad: say so
                raise
        outs = self._run([t.detach() for t in tensors])  # under no_grad
        return outs[0] if self.single else tuple(outs)


class _Function(torch.autograd.Function):
    """The eager path: forward and backward call the Op's kernels directly."""

    @staticmethod
    def forward(ctx, op: Op, *tensors):
        # Op.__call__ checked the tensors, and calls this only with grad mode on and some
        # input requiring grad; the kernels read the inputs in place
        outs, saved, tr = op._run(tensors, training=True)
        ctx.state = (op, len(tensors), len(saved))
        if tr.outputs_read:
            ctx.save_for_backward(*tensors, *saved, *outs)
        else:
            ctx.save_for_backward(*tensors, *saved)
        return outs[0] if op.single else tuple(outs)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, *grad_outputs):
        op, n, nsaved = ctx.state
        result = [None] * (1 + n)
        st = [t.detach() if t.requires_grad else t for t in ctx.saved_tensors]  # outputs do
        tensors, saved, outs = st[:n], st[n:n + nsaved], st[n + nsaved:]
        for i, g in zip(op._diff, op._backward_saved(tensors, saved, outs, grad_outputs)):
            if ctx.needs_input_grad[1 + i]:
                result[1 + i] = g
        return tuple(result)


def _call_grad_inputs(module, tensors, outs):
    """``module(*tensors, *outs)``, where input tensors may require grad."""
    call = getattr(module, "call_grad_inputs", None)
    if call is not None:
        call(*tensors, *outs)
    else:  # a GPU module
        module(*[t.detach() if t.requires_grad else t for t in tensors], *outs)


def _sum_at(terms, idx):
    e = terms[0][idx]
    for t in terms[1:]:
        e = e + t[idx]
    return e


def _placeholders(inputs) -> List[Tensor]:
    ins = list(inputs) if isinstance(inputs, (list, tuple)) else None
    if ins is None:
        raise ComputeError(f"tecomp.torch.op: inputs must be a list of placeholders, got "
                           f"{inputs!r:.80}")
    for x in ins:
        if not (isinstance(x, Tensor) and isinstance(x.op, PlaceholderOp)):
            raise ComputeError(f"tecomp.torch.op: every input must be a tc.placeholder, got "
                               f"{x!r:.80}")
        if x.dtype not in _TORCH_DTYPE:
            raise ComputeError(f"tecomp.torch.op: input {x.name} has dtype {x.dtype}, which "
                               f"torch has no tensor type for here")
    if len({id(x.op) for x in ins}) != len(ins):
        raise ComputeError("tecomp.torch.op: a placeholder is listed twice in inputs")
    return ins


def _shape_binds(inputs) -> Dict[Var, Tuple[int, int]]:
    """Each symbolic extent that is a whole dimension of an input: (input, dimension)."""
    binds: Dict[Var, Tuple[int, int]] = {}
    for i, x in enumerate(inputs):
        for d, e in enumerate(x.shape):
            if isinstance(e, Var) and e not in binds:
                binds[e] = (i, d)
    return binds


# ---------------------------------------------------------------------------------------
# torch.library registration


def _library() -> torch.library.Library:
    global _LIB
    if _LIB is None:
        _LIB = torch.library.Library(NAMESPACE, "FRAGMENT")
    return _LIB


def _op_name(name: str) -> str:
    """A torch op name from a user's name: identifier characters only (the name is
    untrusted text that goes into a schema string), unique in the namespace."""
    base = re.sub(r"[^0-9A-Za-z_]", "_", name if isinstance(name, str) else "op")[:48]
    if not base or not (base[0].isalpha() or base[0] == "_"):
        base = "op_" + base
    return f"{base}_{next(_NAMES)}"


def _register(o: Op, name: str) -> str:
    with _LIB_LOCK:
        lib = _library()
        opname = _op_name(name)
        n = len(o.inputs)
        params = ", ".join(f"Tensor x{i}" for i in range(n))
        ret = "Tensor" if len(o.outputs) == 1 else \
            "(" + ", ".join("Tensor" for _ in o.outputs) + ")"
        lib.define(f"{opname}({params}) -> {ret}")
        gparams = ", ".join([f"Tensor x{i}" for i in range(n)] +
                            [f"Tensor? g{k}" for k in range(len(o.outputs))])
        lib.define(f"{opname}_backward({gparams}) -> Tensor[]")
        key = "CPU" if o.device_type == "cpu" else "CUDA"

        # below autograd in the dispatcher, but the tensors may still say requires_grad
        def impl(*tensors):
            outs = o.forward(*[t.detach() for t in tensors])
            return outs[0] if len(outs) == 1 else tuple(outs)

        def fake(*tensors):
            o._check_call(tensors)
            env = o._env(tensors)
            dmap = o._dtype_map([t.dtype for t in tensors])
            dev = tensors[0].device if tensors else torch.device(o.device_type)
            outs = [torch.empty(f(env), dtype=_TORCH_DTYPE[dmap.get(t.dtype, t.dtype)],
                                device=dev) for f, t in zip(o._out_shapes, o.outputs)]
            return outs[0] if len(outs) == 1 else tuple(outs)

        def bwd_impl(*args):
            tensors = [t.detach() for t in args[:n]]
            grads = [None if g is None else g.detach() for g in args[n:]]
            return o.backward(tensors, grads)

        def bwd_fake(*args):
            return [torch.empty_like(args[i]) for i in o._diff]

        lib.impl(opname, impl, key)
        lib.impl(f"{opname}_backward", bwd_impl, key)
        torch.library.register_fake(f"{NAMESPACE}::{opname}", fake, lib=lib)
        torch.library.register_fake(f"{NAMESPACE}::{opname}_backward", bwd_fake, lib=lib)
        bwd_op = getattr(getattr(torch.ops, NAMESPACE), f"{opname}_backward").default

        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(*inputs)

        def backward(ctx, *grad_outputs):
            tensors = ctx.saved_tensors
            grads = bwd_op(*tensors, *grad_outputs)
            result = [None] * n
            for i, g in zip(o._diff, grads):
                result[i] = g
            return tuple(result)

        torch.library.register_autograd(f"{NAMESPACE}::{opname}", backward,
                                        setup_context=setup_context, lib=lib)
        return opname

