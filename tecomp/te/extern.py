"""``tc.extern``: a stage computed by a function outside tecomp (numpy, a C library through
ctypes, PyTorch), as TVM's ``te.extern``.

    C = tc.extern((n, m), [A, B], lambda ins, outs: tc.call_packed(my_gemm, ins[0], ins[1],
                  outs[0]), name="C")

``fcompute(ins, outs)`` gets one :class:`ExternBuffer` per input and per output and returns
``tc.call_packed(func, *args)``: ``func`` a Python callable, or the name given to
:func:`register_func`; ``args`` buffers (passed as numpy arrays: zero-copy views of the
kernel's memory, the outputs writable), and integer or float expressions (a shape extent,
``ins[0].shape[1]``, or a constant; passed as Python numbers).  The kernel calls ``func``
where the stage runs; what it returns is ignored, an exception it raises is re-raised by
the kernel's call.

The stage is computed at the root, whole; it has no loops to schedule.  Its inputs must
be in memory (arguments, or stages computed at the root).  The other stages are scheduled
as usual around it.  It runs on the CPU (LLVM and the reference interpreter); the CUDA
backends, ``export_library`` and ``tc.gradient`` refuse it.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

from ..errors import ComputeError, ExprError
from ..ir import dtype as _dt
from ..ir.expr import Expr, as_expr
from .tensor import Operation, Tensor, _shape

#: functions registered by name (TVM's ``tvm.register_func``)
_REGISTRY: Dict[str, Callable] = {}


def register_func(name: str, f: Optional[Callable] = None, override: bool = False) -> Callable:
    """Register ``f`` under ``name`` for ``tc.call_packed(name, ...)`` (TVM's
    ``tvm.register_func``).

    Parameters
    ----------
    name : str
        A non-empty name.
    f : callable, optional
        The function; without it, ``register_func`` returns a decorator
        (``@tc.register_func("my.gemm")``).
    override : bool, optional
        Replace a function registered under ``name`` already (otherwise an error).

    Returns
    -------
    callable
        ``f`` (or the decorator).

    Raises
    ------
    ExprError
        For an empty name, a function that is not callable, or a name registered
        already without ``override=True``.

    Examples
    --------
    >>> import numpy as np
    >>> import tecomp as tc
    >>> @tc.register_func("doc.example.copy", override=True)
    ... def copy(a, b):
    ...     b[...] = a
    """
    if not isinstance(name, str) or not name:
        raise ExprError(f"tc.register_func: name must be a non-empty string, got {name!r:.60}")

    def reg(fn):
        if not callable(fn):
            raise ExprError(f"tc.register_func({name!r:.60}): {fn!r:.60} is not callable")
        if name in _REGISTRY and not override and _REGISTRY[name] is not fn:
            raise ExprError(f"tc.register_func: {name!r:.60} is registered already; pass "
                            "override=True to replace it")
        _REGISTRY[name] = fn
        return fn

    return reg if f is None else reg(f)


def get_global_func(name: str, allow_missing: bool = False) -> Optional[Callable]:
    """The function registered as ``name`` with :func:`register_func`.

    Parameters
    ----------
    name : str
        The registered name.
    allow_missing : bool, optional
        Return None instead of raising when nothing is registered under ``name``.

    Returns
    -------
    callable or None
        The function.

    Raises
    ------
    ExprError
        When nothing is registered as ``name`` (and ``allow_missing`` is False).
    """
    f = _REGISTRY.get(name)
    if f is None and not allow_missing:
        raise ExprError(f"no function is registered as {name!r:.60}; register it with "
                        f"tc.register_func({name!r:.60}, fn)")
    return f


class ExternBuffer:
    """An input or output of an extern stage, as ``fcompute`` sees it: ``shape``,
    ``dtype``, ``name``; pass it to ``tc.call_packed``."""

    __slots__ = ("tensor", "shape", "dtype", "name", "is_output")

    def __init__(self, tensor: Tensor, is_output: bool):
        self.tensor = tensor
        self.shape = tuple(tensor.shape)
        self.dtype = tensor.dtype
        self.name = tensor.name
        self.is_output = is_output

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __repr__(self):
        return f"ExternBuffer({self.name}, {'output' if self.is_output else 'input'})"


class PackedCall:
    """What ``tc.call_packed`` returns: the call an extern stage makes."""

    __slots__ = ("func", "name", "args")

    def __init__(self, func: Callable, name: str, args: Tuple[Union[ExternBuffer, Expr], ...]):
        self.func = func
        self.name = name
        self.args = args

    def __repr__(self):
        return f"call_packed({self.name}, {len(self.args)} args)"


def _func_name(f) -> str:
    mod = getattr(f, "__module__", None) or ""
    qual = getattr(f, "__qualname__", None) or getattr(f, "__name__", None) or type(f).__name__
    return f"{mod}.{qual}" if mod and mod != "builtins" else str(qual)


def call_packed(func: Union[Callable, str], *args: Union[ExternBuffer, Expr, int, float]) -> PackedCall:
    """A call of ``func`` from a compiled kernel: what an extern stage's ``fcompute``
    returns.

    Parameters
    ----------
    func : callable or str
        A Python callable, or a name given to :func:`register_func`.
    *args : ExternBuffer or Expr or int or float
        The ``ins``/``outs`` buffers ``fcompute(ins, outs)`` received (passed to ``func``
        as numpy arrays over the kernel's memory, the outputs writable), and integer or
        float scalars (passed as Python numbers).

    Returns
    -------
    PackedCall
        The call, for :func:`extern`.

    Raises
    ------
    ExprError
        For an unregistered name, a tensor instead of a buffer, or an argument of
        another kind.
    """
    if isinstance(func, str):
        f = _REGISTRY.get(func)
        if f is None:
            raise ExprError(f"tc.call_packed: no function is registered as {func!r:.60}; "
                            f"register it first with tc.register_func({func!r:.60}, fn)")
        name = func
    elif callable(func):
        f, name = func, _func_name(func)
    else:
        raise ExprError(f"tc.call_packed: the function must be a callable or a registered "
                        f"name, got {func!r:.60}")
    out = []
    for n, a in enumerate(args):
        if isinstance(a, ExternBuffer):
            out.append(a)
            continue
        if isinstance(a, Tensor):
            raise ExprError(
                f"tc.call_packed({name}): argument {n} is the tensor {a.name}; pass the buffers "
                "fcompute(ins, outs) receives (ins[i], outs[j]), which the stage binds to memory")
        if isinstance(a, bool) or not isinstance(a, (int, float, Expr)):
            raise ExprError(f"tc.call_packed({name}): argument {n} is {a!r:.60}; pass buffers "
                            "(ins[i], outs[j]) and int or float scalars")
        e = as_expr(a)
        if not (_dt.is_int(e.dtype) or _dt.is_float(e.dtype)):
            raise ExprError(f"tc.call_packed({name}): argument {n} has dtype {e.dtype}; "
                            "scalars are ints or floats")
        out.append(e)
    return PackedCall(f, name, tuple(out))


class ExternOp(Operation):
    """A stage computed by a call (``tc.extern``): no axes, computed whole at the root.

    Made by :func:`extern`; ``op.call`` is the :func:`call_packed` its ``fcompute``
    returned.

    Parameters
    ----------
    name : str
        The stage's name.
    inputs : list of Tensor
        The tensors it reads.
    shapes : list of tuple of Expr
        One shape per output.
    dtypes : list of str
        One dtype per output.
    fcompute : callable
        ``fcompute(ins, outs)`` returning a :func:`call_packed`.
    tag : str, optional
        A label for schedules.
    attrs : dict, optional
        Free-form attributes.
    """

    def __init__(self, name, inputs, shapes, dtypes, fcompute, tag="", attrs=None):
        self.name = name
        self.tag = tag
        self.attrs = dict(attrs or {})
        self.inputs = list(inputs)
        self.shapes = tuple(shapes)
        self.dtypes = tuple(dtypes)
        self.axis = ()
        self.reduce_axis = ()
        self._outs = tuple(Tensor(self, i) for i in range(len(shapes)))
        self.fcompute = fcompute   # (a copy of the stage for other dtypes calls it again)
        ins = [ExternBuffer(t, False) for t in self.inputs]
        outs = [ExternBuffer(t, True) for t in self._outs]
        call = fcompute(ins, outs)
        if not isinstance(call, PackedCall):
            raise ComputeError(
                f"extern {name}: fcompute(ins, outs) returned {call!r:.60}; return "
                "tc.call_packed(func, *ins, *outs, ...) (a call of your function)")
        mine = {id(b) for b in ins + outs}
        for a in call.args:
            if isinstance(a, ExternBuffer) and id(a) not in mine:
                raise ComputeError(
                    f"extern {name}: tc.call_packed({call.name}) gets buffer {a.name} of another "
                    "extern stage; pass the ins/outs this fcompute received")
        passed = {id(a) for a in call.args if isinstance(a, ExternBuffer)}
        missing = [b.name for b in outs if id(b) not in passed]
        if missing:
            raise ComputeError(
                f"extern {name}: output {', '.join(missing)} is not passed to "
                f"tc.call_packed({call.name}), so nothing would write it; pass every outs[j]")
        self.call = call

    @property
    def shape(self):
        return self.shapes[0]

    @property
    def dtype(self) -> str:
        return self.dtypes[0]

    @property
    def body(self):
        raise ComputeError(
            f"extern {self.name} is computed by a call ({self.call.name}), not by an expression; "
            "this step takes computes only")

    @property
    def bodies(self) -> tuple:
        return ()

    @property
    def input_tensors(self) -> list:
        return list(self.inputs)


def extern(shape: Union[Sequence[Union[int, Expr]], List[Sequence[Union[int, Expr]]]],
           inputs: Sequence[Tensor], fcompute: Callable[[list, list], PackedCall],
           name: str = "extern", dtype: Union[str, Sequence[str], None] = None, tag: str = "",
           attrs: Optional[dict] = None) -> Union[Tensor, List[Tensor]]:
    """A stage computed by a function outside tecomp (numpy, a C library through ctypes),
    as TVM's ``te.extern``.

    The kernel calls the function where the stage runs (at the root, whole); what it
    returns is ignored, an exception it raises is re-raised by the kernel's call.  CPU
    only: the CUDA backends, ``export_library`` and ``tc.gradient`` refuse it.

    Parameters
    ----------
    shape : sequence of int or Expr, or list of them
        The output's shape, or a list of shapes (one output each).
    inputs : list of Tensor
        The tensors the function reads (in memory: arguments, or stages at the root).
    fcompute : callable
        ``fcompute(ins, outs)`` gets one buffer per input and per output and returns
        ``tc.call_packed(func, *args)``.
    name : str, optional
        The stage's name.
    dtype : str or list of str, optional
        The outputs' dtype, or one per output (default: the first input's, else float32).
    tag : str, optional
        A label for schedules.
    attrs : dict, optional
        Free-form attributes.

    Returns
    -------
    Tensor or list of Tensor
        The output, or a list of them when ``shape`` is a list of shapes.

    Raises
    ------
    ComputeError
        For inputs that are not tensors, an ``fcompute`` that does not return a call or
        does not pass every output buffer.

    Examples
    --------
    >>> import numpy as np
    >>> import tecomp as tc
    >>> A = tc.placeholder((4, 8), name="A")
    >>> B = tc.placeholder((8, 2), name="B")
    >>> C = tc.extern((4, 2), [A, B], lambda ins, outs: tc.call_packed(
    ...     lambda a, b, c: np.matmul(a, b, out=c), ins[0], ins[1], outs[0]), name="C")
    """
    if not isinstance(name, str):
        raise ExprError(f"tc.extern: name must be a string, got {name!r:.60}")
    if isinstance(inputs, Tensor) or not isinstance(inputs, (list, tuple)):
        raise ComputeError(f"extern {name}: inputs must be a list of tensors, got {inputs!r:.60}")
    for n, t in enumerate(inputs):
        if not isinstance(t, Tensor):
            raise ComputeError(f"extern {name}: input {n} is {t!r:.60}, not a tensor")
    if not callable(fcompute):
        raise ComputeError(f"extern {name}: fcompute must be a function of (ins, outs), got "
                           f"{fcompute!r:.60}")
    multi = isinstance(shape, list) and shape and isinstance(shape[0], (list, tuple))
    shapes = [_shape(s, f"extern {name}") for s in (shape if multi else [shape])]
    if dtype is None:
        dtypes = [inputs[0].dtype if inputs else "float32"] * len(shapes)
    elif isinstance(dtype, (list, tuple)):
        if len(dtype) != len(shapes):
            raise ComputeError(f"extern {name}: {len(dtype)} dtypes for {len(shapes)} outputs")
        dtypes = [_dt.canon(d) for d in dtype]
    else:
        dtypes = [_dt.canon(dtype)] * len(shapes)
    op = ExternOp(name, inputs, shapes, dtypes, fcompute, tag, attrs)
    return list(op._outs) if multi else op._outs[0]


__all__ = ["ExternBuffer", "ExternOp", "PackedCall", "call_packed", "extern",
           "get_global_func", "register_func"]
