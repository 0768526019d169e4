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
  gradient as the head), scheduled by :func:`tecomp.strategy.schedule_backward`, compiled
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
import math
import numbers
import os
import re
import threading
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.autograd.forward_ad as _FORWARD_AD
import torch.distributed as dist

from .autodiff import gradient
from .strategy import schedule_backward
from .strategy._common import _has_tag
from .autoschedule import auto_schedule
from .build import build
from .errors import (ArgumentError, AutodiffError, ComputeError, DTypeError,
                     RuntimeUnavailableError, ScheduleError, ShapeError)
from .ir import dtype as _dt
from .ir.expr import Call, Var
from .ir.functor import collect, free_vars
from .nn import ops as _nn_ops
from .runtime.argcheck import compile_shape_expr, shape_text
from .schedule import Schedule
from .target import Target, as_target
from .te import compute, placeholder, reduce_axis as _te_reduce_axis, sum as _te_sum, \
    var as _te_var
from .te.retype import retype
from .te.tensor import ComputeOp, PlaceholderOp, Tensor

__all__ = ["Op", "op", "SyncBatchNorm", "convert_sync_batchnorm"]

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
#: torch.jit.trace's state (None outside a trace): a trace records only torch ops, so a
#: traced call goes through the registered custom op (a kernel called directly would
#: leave the trace an aten::empty, and the traced model uninitialised memory)
_tracing = torch._C._get_tracing_state
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
        every shape; False: always specialise (an extent of 0 always takes the kernel
        for every shape).
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

    __slots__ = ("inputs", "outputs", "fwd", "out_dtypes", "bwd", "training", "grad_op",
                 "lock")

    def __init__(self, inputs, outputs, fwd):
        self.inputs = inputs
        self.outputs = outputs
        self.fwd = fwd
        self.out_dtypes = [_TORCH_DTYPE[t.dtype] for t in outputs]
        self.bwd = None
        self.training = None
        self.grad_op = None       # the backward as an Op (for a second derivative)
        self.lock = threading.Lock()


#: intrinsics whose evaluation costs tens of instructions a vector (docs/numerics.md)
_TRANSCENDENTAL = frozenset({"exp", "fast_exp", "log", "erf", "tanh", "sigmoid", "pow",
                             "sin", "cos", "exp2", "expm1", "log2", "log1p", "softplus",
                             "tan", "atan", "atan2", "cbrt", "erfc",
                             "fast_erfc", "fast_log"})


def _transcendental(op) -> bool:
    """Whether compute ``op`` calls a transcendental intrinsic."""
    if not isinstance(op, ComputeOp):
        return False
    return any(collect(b, lambda n: isinstance(n, Call) and n.op in _TRANSCENDENTAL)
               for b in op.bodies)


def _fused_output(op) -> bool:
    """Whether compute ``op`` is the output of an operator whose stages run in one kernel
    (``scaled_dot_product_attention``'s: FlashAttention's on CUDA), so that the
    gradient reads it rather than the stages under it (saving those would keep them in
    memory, whole, off the operator's template)."""
    return isinstance(op, ComputeOp) and _has_tag(op, "sdpa")


def _statistic_of(op, forward: set) -> bool:
    """Whether compute ``op``, which only the gradient reads, is computed from the
    forward's reductions alone (e.g. ``scaled_dot_product_attention(backward="flash")``'s
    logsumexp from its row maximum and sum): the training forward writes it too, the
    statistics it reads staying inside the forward's kernels.  (Only reductions: a
    gradient-only elementwise function of the forward's other values stays in the
    backward.)"""
    ins = getattr(op, "input_tensors", ())
    return isinstance(op, ComputeOp) and bool(ins) and all(
        id(t.op) in forward and bool(getattr(t.op, "reduce_axis", ())) for t in ins)


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

    # An op is a function of its tensors (weights are arguments, not state) with a cache
    # of kernels: ``copy.deepcopy`` of a model that holds one (an EMA copy, a snapshot)
    # shares it, as it shares a function; pickling (``torch.save(model)``) is refused,
    # saying how.
    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def __reduce_ex__(self, protocol):
        raise ArgumentError(
            f"tecomp.torch op {NAMESPACE}::{self.name} cannot be pickled (its kernels are "
            f"machine code compiled in this process; torch.save(model) pickles the model's "
            f"attributes): save model.state_dict() with torch.save, and where you load it "
            f"make the model, its ops with tecomp.torch.op, again and call load_state_dict")

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
                        # an extent of 0 has no kernel of its own (a placeholder of no
                        # elements, e.g. the backward's incoming gradient, is refused):
                        # the shape-generic one runs it
                        generic = not vals or 0 in vals or self._generic(key[0])
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
        dmap: Dict[str, str] = {}
        seen: Dict[str, tuple] = {}   # declared float type -> (dtype it gets, the input)
        for x, td in zip(self.inputs, dtypes):
            want = _TC_DTYPE.get(td)
            floats = want is not None and _dt.is_float(want) and _dt.is_float(x.dtype)
            if floats:
                first, other = seen.setdefault(x.dtype, (want, x))
                if first == want:
                    if want != x.dtype:
                        dmap[x.dtype] = want
                    continue
                # (an input of the declared type itself counts: f(float32, float64) of two
                # float32 inputs compiled the op in float64 and refused the first tensor
                # with the kernel's message about numpy's astype)
                raise ArgumentError(
                    f"{self.name}: inputs {other.name} and {x.name} are both declared "
                    f"{x.dtype}, but got {_TORCH_DTYPE[first]} and {td} tensors: a float op "
                    f"is compiled for another float dtype only when every input of one "
                    f"declared float type gets the same one; convert them to one dtype "
                    f"(e.g. x.to({_TORCH_DTYPE[first]}))")
            if want == x.dtype:
                continue
            raise ArgumentError(
                f"{self.name}: input {x.name} is declared {x.dtype}, got a {td} tensor: "
                f"convert it (x.to({_TORCH_DTYPE.get(x.dtype, torch.float32)}))")
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
        s = self._backward_schedule(grads, args)
        return build(s, args, target=self.target, name=f"{self.name}_backward")

    def _backward_schedule(self, grads, args):
        """The schedule of a backward (``args``: its arguments, ``grads`` its outputs):
        :func:`~tecomp.strategy.schedule_backward` on the CPU, the GPU rules'
        (``tc.auto_schedule``, FlashAttention's backward on its template) on CUDA."""
        if self.target.is_cpu:
            return schedule_backward(grads, target=self.target)
        return auto_schedule(list(args), target=self.target, progress=False)

    def _grad_op(self, c: _Compiled) -> "Op":
        """The backward of ``c`` as an Op of (inputs, incoming gradients) -> the floating
        inputs' gradients: differentiable again (tc.gradient of the gradient), for a
        backward with ``create_graph=True``."""
        if c.grad_op is None:
            with c.lock:
                if c.grad_op is None:
                    heads, grads = self._gradients(c)
                    target = self.target
                    c.grad_op = Op(list(c.inputs) + heads, grads, target=target,
                                   name=f"{self.name}_grad", dynamic=True,
                                   schedule=(lambda outs: schedule_backward(outs, target=target))
                                   if target.is_cpu else None)
        return c.grad_op

    def _differentiable_backward(self, tensors, grad_outputs) -> List[torch.Tensor]:
        """The gradients of the floating inputs as :meth:`backward`'s, through autograd
        (``create_graph=True``: a gradient of the gradient is asked for)."""
        env = self._env(tensors)
        c = self.compiled([t.dtype for t in tensors], env)
        heads = self._heads(c, env, tensors, grad_outputs)
        out = self._grad_op(c)(*tensors, *heads)
        return [out] if isinstance(out, torch.Tensor) else list(out)

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
            elif save_inner and (id(t.op) in forward or _statistic_of(t.op, forward)) and (
                    t.op.reduce_axis or _transcendental(t.op) or _fused_output(t.op)):
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
        s = self._backward_schedule(new_grads, args)
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
        try:
            for var, (i, d) in self._binds.items():
                env[var] = tensors[i].shape[d]
        except (IndexError, RuntimeError):  # (a nested tensor has no sizes)
            self._check_ranks(tensors)
            raise
        return env

    def _check_ranks(self, tensors) -> None:
        """An ArgumentError for a tensor of another rank than its input's, or nested."""
        for k, (x, t) in enumerate(zip(self.inputs, tensors)):
            where = f"{self.name}: input {x.name} (argument {k + 1})"
            if t.is_nested:
                raise ArgumentError(
                    f"{where} is a nested tensor, and tecomp reads dense (strided) memory: "
                    f"pass x.to_padded_tensor(0.0), or call the op on each of its tensors")
            if t.dim() != len(x.shape):
                raise ArgumentError(
                    f"{where} has {len(x.shape)} dimension{'s' if len(x.shape) != 1 else ''} "
                    f"{shape_text(x.shape)}, got a {t.dim()}-d tensor of shape "
                    f"{tuple(t.shape)}: pass a tensor of rank {len(x.shape)} (reshape it, or "
                    f"declare the placeholder with its rank)")

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
            _launch(c.fwd, (*tensors, *outs))
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
        _launch(self._backward_module(c), (*tensors, *heads, *grads))
        return grads

    def _backward_saved(self, tensors, saved, outputs, grad_outputs) -> List[torch.Tensor]:
        """:meth:`backward` from what ``_run(..., training=True)`` saved."""
        env = self._env(tensors)
        c = self.compiled([t.dtype for t in tensors], env)
        tr = self._training(c)
        heads = self._heads(c, env, tensors, grad_outputs)
        grads = self._grads_like(tensors)
        read = [outputs[k] for k in tr.outputs_read]  # saved only when some are read
        _launch(tr.bwd, (*tensors, *heads, *saved, *read, *grads))
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

    def _check_dual(self, tensors):
        """An ArgumentError when a tensor carries a forward-mode AD tangent: the op has no
        forward-mode formula, and its output would carry none (silently)."""
        for k, (x, t) in enumerate(zip(self.inputs, tensors)):
            if _FORWARD_AD.unpack_dual(t).tangent is not None:
                raise ArgumentError(
                    f"{self.name}: input {x.name} (argument {k + 1}) is a forward-mode AD "
                    f"dual tensor (torch.autograd.forward_ad.make_dual), and tecomp.torch ops "
                    f"have no forward-mode formula (jvp): its output would have no tangent. "
                    f"Differentiate in reverse mode (x.requires_grad_(), y.backward() or "
                    f"torch.autograd.grad), or pass the primal, "
                    f"torch.autograd.forward_ad.unpack_dual(x).primal, for the values only")

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
        if _is_compiling() or _tracing():
            out = self._torch_op(*tensors)
            return out[0] if self.single and isinstance(out, (list, tuple)) else out
        self._check_call(tensors)
        if _FORWARD_AD._current_level >= 0:
            self._check_dual(tensors)
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
    def backward(ctx, *grad_outputs):
        op, n, nsaved = ctx.state
        result = [None] * (1 + n)
        if _create_graph((*ctx.saved_tensors[:n], *grad_outputs)):
            # create_graph=True: the gradients must be differentiable again (with the
            # saved path, once_differentiable's, they came back as constants: a gradient
            # penalty silently lost its second-order term)
            grads = op._differentiable_backward(ctx.saved_tensors[:n], grad_outputs)
        else:
            with torch.no_grad():
                st = [t.detach() if t.requires_grad else t for t in ctx.saved_tensors]
                tensors, saved, outs = st[:n], st[n:n + nsaved], st[n + nsaved:]
                grads = op._backward_saved(tensors, saved, outs, grad_outputs)
        for i, g in zip(op._diff, grads):
            if ctx.needs_input_grad[1 + i]:
                result[1 + i] = g
        return tuple(result)


def _fake_grads(o: Op, tensors) -> List[torch.Tensor]:
    """The backward custom op's fake outputs: the gradients its real implementation
    allocates (:meth:`Op._grads_like`: contiguous, whatever the inputs' strides; before
    session 31 ``empty_like`` kept a transposed input's, and torch.compile's inductor
    refused the real gradient's strides)."""
    return o._grads_like(tensors)


def _create_graph(tensors) -> bool:
    """Whether a backward runs with ``create_graph=True`` over ``tensors`` (its inputs
    and incoming gradients, None for some): grad mode on and one of them requiring grad,
    so its gradients must be a graph autograd can differentiate again."""
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def _call_grad_inputs(module, tensors, outs):
    """``module(*tensors, *outs)``, where input tensors may require grad."""
    call = getattr(module, "call_grad_inputs", None)
    if call is not None:
        call(*tensors, *outs)
    else:  # a GPU module
        _launch(module, (*[t.detach() if t.requires_grad else t for t in tensors], *outs))


def _launch(module, args) -> None:
    """``module(*args)``: a CUDA module on the current torch stream of the tensors' device,
    returning without waiting for its kernels (as a torch op does: the stream orders them
    with torch's work, and torch's caching allocator reuses the memory of a tensor freed
    meanwhile only for work queued after them on that stream)."""
    t = args[0] if args else None
    if isinstance(t, torch.Tensor) and t.is_cuda:
        module(*args, stream=_current_stream(t.get_device()))
    else:
        module(*args)


def _current_stream(index: int) -> int:
    """The CUstream handle of torch's current stream on CUDA device ``index``."""
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw(index)
    return torch.cuda.current_stream(index).cuda_stream


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
            return _fake_grads(o, args[:n])

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




# ---------------------------------------------------------------------------------
# SyncBatchNorm: batch norm across the processes of a torch.distributed group, whose
# kernels are tecomp ops

_DTYPES = (torch.float32, torch.float64)
_KERNELS: Dict[tuple, tuple] = {}
_LOCK = threading.Lock()


def _kernels(eps: float, affine: bool, device_type: str):
    """The tecomp ops of one ``(eps, affine, device)``: ``(stats, normalise, reduce,
    elemt)`` over a data view ``x[n, c, l]`` (declared in float32; float64 tensors get
    kernels retyped from the same definitions)."""
    key = (eps, affine, device_type)
    with _LOCK:
        k = _KERNELS.get(key)
        if k is not None:
            return k
        target = "cuda" if device_type == "cuda" else "llvm"
        n, c, l = _te_var("n"), _te_var("c"), _te_var("l")
        X = placeholder((n, c, l), name="X")
        DY = placeholder((n, c, l), name="DY")
        vec = {w: placeholder((c,), name=w) for w in ("MEAN", "VAR", "K", "SCALE", "MDY",
                                                          "W", "B")}
        MEAN = vec["MEAN"]

        def channel_sum(fn, name):
            rn, rl = _te_reduce_axis(n, name="rn"), _te_reduce_axis(l, name="rl")
            return compute((c,), lambda ch: _te_sum(fn(rn, ch, rl), axis=[rn, rl]),
                               name=name)

        # local statistics: the mean and the sum of squared deviations from it (two
        # passes, as tecomp.nn.batch_norm's), merged across processes with their counts
        s = channel_sum(lambda i, ch, j: X[i, ch, j], "syncbn.sum")
        mean = compute((c,), lambda ch: s[ch] / (n * l).astype("float32"),
                           name="syncbn.mean")
        m2 = channel_sum(lambda i, ch, j: (X[i, ch, j] - mean[ch]) *
                         (X[i, ch, j] - mean[ch]), "syncbn.m2")
        stats = op([X], [mean, m2], target=target, name="syncbn_stats")
        # the normalisation: tecomp.nn.batch_norm's inference form with the global
        # statistics (x viewed as [n, c, l, 1])
        X4 = placeholder((n, c, l, 1), name="X")
        W, B = (vec["W"], vec["B"]) if affine else (None, None)
        y = _nn_ops.batch_norm(X4, W, B, MEAN, vec["VAR"], training=False, eps=eps,
                            name="syncbn")
        normalise = op([X4, MEAN, vec["VAR"]] + ([W, B] if affine else []), [y],
                            target=target, name="syncbn_normalise")
        # backward: the local sums of dy and dy * (x - mean), all-reduced by the caller,
        # then dx = (dy - mean(dy) - (x - mean) * k) * scale per element
        sdy = channel_sum(lambda i, ch, j: DY[i, ch, j], "syncbn.sum_dy")
        sdyx = channel_sum(lambda i, ch, j: DY[i, ch, j] * (X[i, ch, j] - MEAN[ch]),
                           "syncbn.sum_dy_xmu")
        reduce = op([DY, X, MEAN], [sdy, sdyx], target=target, name="syncbn_reduce")
        dx = compute((n, c, l), lambda i, ch, j: (
            DY[i, ch, j] - vec["MDY"][ch] - (X[i, ch, j] - MEAN[ch]) * vec["K"][ch]) *
            vec["SCALE"][ch], name="syncbn.dx")
        elemt = op([DY, X, MEAN, vec["K"], vec["SCALE"], vec["MDY"]], [dx],
                        target=target, name="syncbn_elemt")
        k = (stats, normalise, reduce, elemt)
        _KERNELS[key] = k
        return k


def _view3(t: torch.Tensor) -> torch.Tensor:
    """``t`` ``[N, C, *]`` as a contiguous ``[N, C, L]``."""
    n, c = t.shape[0], t.shape[1]
    return t.contiguous().view(n, c, math.prod(t.shape[2:]))


def _local_stats(kern, x3: torch.Tensor, channels: int):
    """``(count, mean, m2)`` of this process's batch (zeros for an empty batch)."""
    count = x3.shape[0] * x3.shape[2]
    if count == 0:
        z = torch.zeros(channels, dtype=x3.dtype, device=x3.device)
        return 0, z, z
    mean, m2 = kern[0].forward(x3)
    return count, mean, m2


def _merge(counts, means, m2s):
    """The statistics of the union of the batches: ``(count, mean, m2)`` (float64,
    Chan et al.'s parallel formula; empty batches add nothing)."""
    keep = counts >= 1
    counts, means, m2s = counts[keep], means[keep], m2s[keep]
    total = counts.sum()
    mean = (counts[:, None] * means).sum(0) / total
    m2 = (m2s + counts[:, None] * (means - mean) ** 2).sum(0)
    return total, mean, m2


class _SyncBatchNormFunction(torch.autograd.Function):
    """The training forward and backward of :class:`SyncBatchNorm` (``group`` None: this
    process alone)."""

    @staticmethod
    def forward(ctx, x, weight, bias, running_mean, running_var, eps, momentum, group, kern):
        C = x.shape[1]
        originals = (x, weight, bias)   # (a second derivative recomputes from these)
        x = x.detach()   # the kernels read the tensors' memory: no autograd inside
        weight = weight.detach() if weight is not None else None
        bias = bias.detach() if bias is not None else None
        x3 = _view3(x)
        count, mean, m2 = _local_stats(kern, x3, C)
        if group is None:
            counts = torch.tensor([float(count)], dtype=torch.float64)
            total, gmean, gm2 = _merge(counts, mean.double()[None], m2.double()[None])
        else:
            # one all_gather of (mean, m2, count) per process, as torch's all_gather of
            # (mean, invstd, count): the counts may differ, and be 0
            packed = torch.cat([mean.double(), m2.double(),
                                torch.tensor([float(count)], dtype=torch.float64,
                                             device=x.device)])
            parts = [torch.empty_like(packed) for _ in range(dist.get_world_size(group))]
            dist.all_gather(parts, packed, group=group)
            allp = torch.stack(parts)
            total, gmean, gm2 = _merge(allp[:, 2 * C], allp[:, :C], allp[:, C:2 * C])
        total = float(total)
        if total <= 1 and group is None:
            raise ShapeError(f"SyncBatchNorm: expected more than 1 value per channel when "
                             f"training, got input of shape {tuple(x.shape)}; use a larger "
                             f"batch or eval()")
        var = gm2 / total
        if running_mean is not None:
            with torch.no_grad():
                unbiased = gm2 / (total - 1) if total > 1 else torch.full_like(gm2, math.nan)
                running_mean.mul_(1 - momentum).add_(gmean.to(running_mean.dtype) * momentum)
                running_var.mul_(1 - momentum).add_(unbiased.to(running_var.dtype) * momentum)
        mean_x = gmean.to(x.dtype)
        var_x = var.to(x.dtype)
        invstd = torch.rsqrt(var_x + eps)
        ctx.save_for_backward(x3, weight, mean_x, invstd, *originals)
        ctx.total, ctx.group, ctx.kern, ctx.shape = total, group, kern, x.shape
        ctx.eps = eps
        if count == 0:
            return torch.empty_like(x)
        args = [x3.unsqueeze(-1), mean_x, var_x] + ([weight, bias] if weight is not None
                                                     else [])
        return kern[1].forward(*args)[0].view(x.shape)

    @staticmethod
    def backward(ctx, grad):
        x3, weight, mean, invstd, *originals = ctx.saved_tensors
        if _create_graph((*originals, grad)):
            # create_graph=True: the gradients must be differentiable again (the kernels
            # below give constants: a gradient penalty silently lost its second-order term)
            return _SyncBatchNormFunction._differentiable_backward(ctx, originals, grad)
        kern, group, C = ctx.kern, ctx.group, x3.shape[1]
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        gx = gw = gb = None
        empty = x3.numel() == 0
        if empty:
            sdy = sdyx = torch.zeros(C, dtype=x3.dtype, device=x3.device)
        else:
            dy = _view3(grad.detach())
            sdy, sdyx = kern[2].forward(dy, x3, mean)
            if weight is not None and need_w:
                gw = (sdyx * invstd).to(weight.dtype)
            if weight is not None and need_b:
                gb = sdy.to(weight.dtype)
        if need_x:
            if group is not None:   # the sums over every process's batch
                both = torch.cat([sdy, sdyx])
                dist.all_reduce(both, op=dist.ReduceOp.SUM, group=group)
                sdy, sdyx = both[:C], both[C:]
            if empty:   # (an empty gradient, as the input)
                gx = torch.zeros(ctx.shape, dtype=x3.dtype, device=x3.device)
            else:
                mdy = sdy / ctx.total
                k = invstd * invstd * (sdyx / ctx.total)
                scale = invstd if weight is None else invstd * weight.to(invstd.dtype)
                gx = kern[3].forward(dy, x3, mean, k, scale, mdy)[0].view(ctx.shape)
        return gx, gw, gb, None, None, None, None, None, None

    @staticmethod
    def _differentiable_backward(ctx, originals, grad):
        """The gradients as a graph autograd can differentiate again: the training
        forward recomputed in torch operations from the inputs (this process's batch;
        across processes the statistics' derivatives would need the other processes'
        inputs: an AutodiffError)."""
        if ctx.group is not None:
            raise AutodiffError(
                "SyncBatchNorm: a second derivative (torch.autograd.grad(..., "
                "create_graph=True), a gradient penalty) through the statistics of a group "
                "of more than one process is not supported: the gradient would miss the "
                "other processes' terms. Compute the penalty with this process's batch "
                "alone (a SyncBatchNorm built with a process_group of this rank, "
                "torch.distributed.new_group([rank])), or in eval() mode")
        x, weight, bias = originals
        dims = [0] + list(range(2, x.dim()))
        along = (1, -1) + (1,) * (x.dim() - 2)
        with torch.enable_grad():
            wrt = [t for t, need in zip(originals, ctx.needs_input_grad[:3])
                   if need and t is not None]
            mean = x.mean(dims, keepdim=True)
            var = (x - mean).square().mean(dims, keepdim=True)
            y = (x - mean) * torch.rsqrt(var + ctx.eps)
            if weight is not None:
                y = y * weight.view(along) + bias.view(along)
            got = iter(torch.autograd.grad(y, wrt, grad, create_graph=True, allow_unused=True))
        grads = [next(got) if need and t is not None else None
                 for t, need in zip(originals, ctx.needs_input_grad[:3])]
        grads = [torch.zeros_like(t) if g is None and need and t is not None else g
                 for g, t, need in zip(grads, originals, ctx.needs_input_grad[:3])]
        return (*grads, None, None, None, None, None, None)


class SyncBatchNorm(torch.nn.modules.batchnorm._BatchNorm):
    r"""A drop-in for :class:`torch.nn.SyncBatchNorm` whose kernels are tecomp's.

    In training with ``torch.distributed`` initialised and a group of more than one
    process, each process computes its batch's per-channel count, mean and sum of squared
    deviations (a tecomp kernel), the processes exchange them with one ``all_gather`` (so
    batch sizes may differ, and a process may have an empty batch), and each normalises
    its batch with the statistics of the union (a tecomp kernel: the inference form of
    :func:`tecomp.nn.batch_norm`).  The backward computes the local sums of ``dy`` and
    ``dy * (x - mean)`` (a tecomp kernel), all-reduces them, and computes the input
    gradient (a tecomp kernel); the weight and bias gradients are this process's, summed
    across processes by ``DistributedDataParallel`` as with torch's.  Running statistics
    are updated as torch's: ``momentum`` (or a cumulative average with ``momentum=None``),
    the unbiased variance of the union.

    It is a ``torch.nn.modules.batchnorm._BatchNorm`` (as ``BatchNorm2d`` and torch's
    ``SyncBatchNorm`` are), not a subclass of torch's ``SyncBatchNorm``, whose CPU check
    ``DistributedDataParallel`` would apply to it.

    Not distributed (or a group of one), the same kernels run on this process's batch;
    in ``eval()`` mode the running statistics normalise (no communication).  Unlike
    torch's, CPU tensors are accepted (the gloo backend).  Inputs are ``[N, C, *]``,
    float32 or float64; parameters and buffers are as torch's (``state_dict``
    compatible).

    Parameters
    ----------
    num_features : int
        ``C``.
    eps : float, optional
        Added to the variance.
    momentum : float or None, optional
        The weight of the batch statistics in the running ones; None: cumulative average.
    affine : bool, optional
        Learnable ``weight`` and ``bias``.
    track_running_stats : bool, optional
        Keep running statistics (else batch statistics in eval mode too).
    process_group : torch.distributed.ProcessGroup, optional
        The group whose batches are normalised together (default: the world).
    device, dtype : optional
        Of the parameters and buffers (as torch's ``factory_kwargs``).

    Raises
    ------
    ShapeError
        For an input that is not ``[N, C, *]`` with ``C == num_features``, a
        ``num_features`` that differs between the processes, or one value per channel
        in training on one process.
    DTypeError
        For an input that is not float32 or float64, or whose dtype differs from the
        parameters' or another process's.
    RuntimeUnavailableError
        When a ``process_group`` was given but ``torch.distributed`` is no longer
        initialised.

    Examples
    --------
    >>> import torch
    >>> import tecomp.torch as tct
    >>> bn = tct.SyncBatchNorm(4)
    >>> y = bn(torch.randn(8, 4, 5, 5))   # not distributed: this process's batch
    >>> y.shape
    torch.Size([8, 4, 5, 5])
    """

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: Optional[float] = 0.1,
                 affine: bool = True, track_running_stats: bool = True,
                 process_group: Optional["dist.ProcessGroup"] = None,
                 device: Optional[torch.device] = None, dtype: Optional[torch.dtype] = None):
        if isinstance(num_features, bool) or not isinstance(num_features, numbers.Integral) \
                or num_features < 1:
            raise ShapeError(f"SyncBatchNorm: num_features must be an int >= 1 (the channels "
                             f"C of an [N, C, *] input), got {num_features!r}")
        if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not \
                math.isfinite(eps) or eps < 0:
            raise ArgumentError(f"SyncBatchNorm: eps must be a finite number >= 0, got {eps!r}")
        if momentum is not None and (isinstance(momentum, bool) or not isinstance(
                momentum, numbers.Real) or not 0 <= momentum <= 1):
            raise ArgumentError(f"SyncBatchNorm: momentum must be a number in [0, 1] or None "
                                f"(a cumulative average), got {momentum!r}")
        super().__init__(int(num_features), float(eps), momentum, affine, track_running_stats,
                         device=device, dtype=dtype)
        self.process_group = process_group
        self._tecomp_checked = set()

    def _check_input_dim(self, input):
        self._check(input)

    def _check(self, x):
        if not isinstance(x, torch.Tensor):
            raise ArgumentError(f"SyncBatchNorm: the input must be a torch tensor, got "
                                f"{type(x).__name__}")
        if x.dim() < 2:
            raise ShapeError(f"SyncBatchNorm: the input must be [N, C, *] (at least 2-d), got "
                             f"{x.dim()}-d {tuple(x.shape)}")
        if x.shape[1] != self.num_features:
            raise ShapeError(f"SyncBatchNorm: the input has {x.shape[1]} channels (axis 1) "
                             f"but the module has num_features={self.num_features}; give an "
                             f"[N, {self.num_features}, *] input or build the module with "
                             f"num_features={x.shape[1]}")
        if x.dtype not in _DTYPES:
            raise DTypeError(f"SyncBatchNorm: the input is {x.dtype}; give float32 or "
                             f"float64 (x.float())")
        if self.weight is not None and self.weight.dtype != x.dtype:
            raise DTypeError(f"SyncBatchNorm: the input is {x.dtype} but the weight is "
                             f"{self.weight.dtype}; give them one dtype (module.to({x.dtype}) "
                             f"or x.to({self.weight.dtype}))")

    def _check_group(self, group, x):
        """Once per group, channel count and dtype: every process must agree (an
        all_gather of both; each process raises the same error)."""
        key = (id(group), x.shape[1], x.dtype)
        if key in self._tecomp_checked:
            return
        mine = torch.tensor([x.shape[1], _DTYPES.index(x.dtype)], dtype=torch.int64,
                            device=x.device)
        parts = [torch.empty_like(mine) for _ in range(dist.get_world_size(group))]
        dist.all_gather(parts, mine, group=group)
        chans = [int(p[0]) for p in parts]
        if len(set(chans)) > 1:
            raise ShapeError(f"SyncBatchNorm: the processes have different num_features "
                             f"({', '.join(f'rank {r}: {c}' for r, c in enumerate(chans))}); "
                             f"build the module with one num_features on every process")
        kinds = [str(_DTYPES[int(p[1])]) for p in parts]
        if len(set(kinds)) > 1:
            raise DTypeError(f"SyncBatchNorm: the processes' inputs have different dtypes "
                             f"({', '.join(f'rank {r}: {k}' for r, k in enumerate(kinds))}); "
                             f"give every process one dtype")
        self._tecomp_checked.add(key)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        x = input
        self._check(x)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:
                factor = 1.0 / float(self.num_batches_tracked)
        bn_training = self.training or (self.running_mean is None and self.running_var is None)
        rm = self.running_mean if not self.training or self.track_running_stats else None
        rv = self.running_var if not self.training or self.track_running_stats else None
        kern = _kernels(self.eps, self.affine, x.device.type)
        if not bn_training:   # eval: the running statistics, no communication
            args = [_view3(x).unsqueeze(-1), rm.to(x.dtype), rv.to(x.dtype)]
            if self.affine:
                args += [self.weight, self.bias]
            return kern[1](*args).view(x.shape)   # (differentiable: a tecomp.torch.op)
        group = None
        if self.training and self.process_group is not None and not (
                dist.is_available() and dist.is_initialized()):
            raise RuntimeUnavailableError(
                "SyncBatchNorm: a process_group was given but torch.distributed is not "
                "initialised (destroyed?); call torch.distributed.init_process_group first, "
                "or build the module with process_group=None to normalise each process's "
                "batch alone")
        if self.training and dist.is_available() and dist.is_initialized():
            group = self.process_group or dist.group.WORLD
            if dist.get_world_size(group) > 1:
                self._check_group(group, x)
            else:
                group = None
        return _SyncBatchNormFunction.apply(x, self.weight, self.bias, rm, rv, self.eps,
                                            factor, group, kern)

    @classmethod
    def convert_sync_batchnorm(cls, module: torch.nn.Module,
                               process_group: Optional["dist.ProcessGroup"] = None):
        """:func:`convert_sync_batchnorm`."""
        return convert_sync_batchnorm(module, process_group)


def convert_sync_batchnorm(module: torch.nn.Module,
                           process_group: Optional["dist.ProcessGroup"] = None
                           ) -> torch.nn.Module:
    """Replace every batch-norm layer of ``module`` (``torch.nn.BatchNorm1d/2d/3d``,
    ``torch.nn.SyncBatchNorm``) by a :class:`SyncBatchNorm` with its parameters and
    buffers, as :meth:`torch.nn.SyncBatchNorm.convert_sync_batchnorm` does.

    Parameters
    ----------
    module : torch.nn.Module
        The model (a batch-norm layer itself is replaced and returned).
    process_group : torch.distributed.ProcessGroup, optional
        The group of the new layers (default: the world).

    Returns
    -------
    torch.nn.Module
        ``module`` with its layers replaced (the same object unless it was one).

    Raises
    ------
    ArgumentError
        For a ``module`` that is not a ``torch.nn.Module``.

    Examples
    --------
    >>> import torch
    >>> import tecomp.torch as tct
    >>> m = tct.convert_sync_batchnorm(torch.nn.Sequential(torch.nn.BatchNorm2d(3)))
    >>> type(m[0]).__name__
    'SyncBatchNorm'
    """
    if not isinstance(module, torch.nn.Module):
        raise ArgumentError(f"convert_sync_batchnorm: give a torch.nn.Module, got "
                            f"{type(module).__name__}")
    out = module
    if isinstance(module, torch.nn.modules.batchnorm._BatchNorm) and \
            not isinstance(module, SyncBatchNorm):
        out = SyncBatchNorm(module.num_features, module.eps, module.momentum, module.affine,
                            module.track_running_stats, process_group)
        if module.affine:
            with torch.no_grad():
                out.weight = module.weight
                out.bias = module.bias
        out.running_mean = module.running_mean
        out.running_var = module.running_var
        out.num_batches_tracked = module.num_batches_tracked
        out.training = module.training
        if hasattr(module, "qconfig"):
            out.qconfig = module.qconfig
    for name, child in module.named_children():
        out.add_module(name, convert_sync_batchnorm(child, process_group))
    del module
    return out
