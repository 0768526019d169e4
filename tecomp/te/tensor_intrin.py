"""Tensor intrinsics: a small declared computation that a backend runs as one instruction
sequence, and the ``s[C].tensorize(axis, intrin)`` that puts one in place of a loop nest.

An intrinsic is declared as TVM users know it: a ``tc.compute`` over placeholders (the
pattern), plus what to emit for it.  ``tc.decl_tensor_intrin(C, llvm=emit, requires=...)``:

* ``C`` -- the declared computation, e.g. 16 lanes of a 4-element u8 x s8 dot product::

      a = tc.placeholder((4,), "uint8", name="a")
      b = tc.placeholder((16, 4), "int8", name="b")
      r = tc.reduce_axis((0, 4), name="r")
      c = tc.compute((16,), lambda i: tc.sum(a[r].astype("int32") * b[i, r].astype("int32"),
                                             axis=r), name="c")

  Every placeholder is indexed by distinct axes of ``C`` (no arithmetic), shapes and
  extents are constants, and ``C`` reads nothing but placeholders.
* ``llvm(ib, ins, outs)`` -- what the LLVM backend emits in place of the loops, given an
  :class:`~tecomp.codegen.llvm.intrinsics.IntrinBuilder` ``ib`` and one
  :class:`~tecomp.codegen.llvm.intrinsics.IntrinView` per operand (the region of the
  stage's buffer that the declared placeholder stands for: its pointer, element
  strides).  For a reduction it *accumulates* into ``outs`` (TVM's ``update``); tecomp
  writes the reducer's identity itself before the first update.
* ``cuda(cb, ins, outs)`` -- what the CUDA C backends (``cuda`` and ``cuda-emu``, one
  text for both) emit in its place, given a
  :class:`~tecomp.codegen.cuda_intrin.CudaIntrinBuilder` ``cb`` (statements, temporaries,
  tecomp's device helpers such as ``tc_dp4a_us``) and one
  :class:`~tecomp.codegen.cuda_intrin.CudaIntrinView` per operand (C pointer text,
  element strides); it accumulates like ``llvm``.  A backend without an emitter for the
  intrinsic runs the loops it replaced.
* ``requires`` -- the CPU features the emitted code needs (``"avx512vnni"``); building
  for a target without them raises :class:`~tecomp.errors.TargetError`.
* ``init`` -- for a reduction whose output cannot be written element by element (a
  tensor-core accumulator fragment), the intrinsic that writes the reducer's identity
  over the output region (TVM's ``reduce_init``): a non-reducing intrinsic that reads no
  operand and stores a constant; lowering emits it where the identity is stored.
* ``dense`` (default True) -- each operand's region must be laid out as the declared
  placeholder: row major and contiguous (lowering checks the strides and says which
  operand to pack); ``dense=False`` hands any constant strides to ``llvm``.

The interpreter, and a backend the intrinsic has no emitter for, run the loops of the
declared computation (the ``fallback`` of :class:`~tecomp.ir.stmt.TensorIntrinCall`), so a
tensorized schedule gives the same result everywhere.  Built-in intrinsics
(``tc.tensor_intrin(name)``) live in :mod:`tecomp.te.intrin_x86`,
:mod:`tecomp.te.intrin_aarch64`, :mod:`tecomp.te.intrin_cuda`,
:mod:`tecomp.te.intrin_mma` and :mod:`tecomp.te.intrin_wgmma`; only those can be named in a stored trace or tuning record
(a record names an intrinsic, it never carries code).
"""
from __future__ import annotations

import threading
from typing import Callable, Dict, List, Optional, Sequence, Union

from ..errors import ComputeError, ScheduleError, TargetError
from ..ir.expr import Const, ProducerLoad, Reduce, Var
from ..ir.functor import collect
from ..ir.names import display
from ..ir.stmt import register_tensor_intrin
from ..target import MMA_MIN_SM, Target, as_target, sm_number
from . import intrin_aarch64, intrin_cuda, intrin_mma, intrin_wgmma, intrin_x86
from .tensor import ComputeOp, PlaceholderOp, Tensor


class TensorIntrin:
    """A declared tensor intrinsic (made by :func:`decl_tensor_intrin`).

    Parameters
    ----------
    name : str
        Its name.
    op : ComputeOp
        The declared computation.
    inputs : list of Tensor
        Its placeholders, in the order ``ins[]`` gets them.
    llvm : callable or None
        The LLVM emitter.
    requires : tuple of str
        The CPU features the emitted code needs.
    dense : bool
        Whether operands must be laid out as the declared placeholders.
    cuda : callable, optional
        The CUDA C emitter.
    init : TensorIntrin, optional
        The intrinsic that writes the reducer's identity over the output region.
    """

    def __init__(self, name, op, inputs, llvm, requires, dense, cuda=None, init=None):
        self.name = name
        self.init = init                     # a reduction's identity writer, or None
        self.op = op
        self.inputs = inputs                 # the placeholders, in the order ins[] gets them
        self.output = op.output(0)
        self.llvm = llvm
        self.cuda = cuda
        self.requires = requires
        self.dense = dense
        self.reduce = isinstance(op.body, Reduce)

    def __repr__(self):
        return f"TensorIntrin({display(self.name)})"

    def missing_features(self, target) -> list:
        """The features of ``requires`` that ``target`` (an llvm Target) lacks."""
        return sorted(f for f in self.requires if not target.has_feature(f))

    def check_target(self, target, stage: str) -> None:
        """Raise TargetError when code for ``target`` cannot use this intrinsic (LLVM
        would abort the process on an instruction the target lacks)."""
        missing = self.missing_features(target) if self.llvm is not None else []
        if missing:
            raise TargetError(
                f"tensorize on stage {display(stage)} with {display(self.name)}: the intrinsic "
                f"needs {', '.join(missing)}, which target {target} does not have; build for a "
                "target with them (e.g. 'llvm -mcpu=cascadelake' for avx512vnni), or tensorize "
                "with an intrinsic this target has (tc.tensor_intrins_for(target))")


class IntrinOperand:
    """What a backend's emitter knows of one operand of a tensor intrinsic: the region of
    buffer ``buffer_name`` that the declared placeholder ``name`` (``shape``, ``dtype``)
    stands for, ``strides`` in elements, one per dimension of ``shape`` (the backends'
    views add how to address it)."""

    def __init__(self, name: str, buffer_name: str, dtype: str, shape, strides):
        self.name = name
        self.buffer_name = buffer_name
        self.dtype = dtype
        self.shape = tuple(shape)
        self.strides = tuple(strides)

    def __repr__(self):
        return (f"{type(self).__name__}({self.name} -> {self.buffer_name}, {self.dtype}"
                f"{list(self.shape)}, strides={list(self.strides)})")


def decl_tensor_intrin(op: Union[Tensor, ComputeOp], llvm: Optional[Callable] = None,
                       name: Optional[str] = None, requires: Sequence[str] = (),
                       dense: bool = True, cuda: Optional[Callable] = None,
                       init: Optional[TensorIntrin] = None) -> TensorIntrin:
    """Declare a tensor intrinsic for ``s[C].tensorize(axis, intrin)`` (see the module
    docstring for the emitters' arguments).

    Parameters
    ----------
    op : Tensor or ComputeOp
        The declared computation: a ``tc.compute`` over placeholders, each indexed by
        distinct axes, constant shapes.
    llvm : callable, optional
        ``llvm(ib, ins, outs)``: what the LLVM backend emits in place of the loops.
    name : str, optional
        The intrinsic's name (default: the compute's).
    requires : sequence of str, optional
        The CPU features the emitted code needs (``"avx512vnni"``).
    dense : bool, optional
        Each operand's region must be row major and contiguous (default); False hands
        any constant strides to the emitter.
    cuda : callable, optional
        ``cuda(cb, ins, outs)``: what the CUDA C backends emit.
    init : TensorIntrin, optional
        For a reduction whose output cannot be written element by element: the
        intrinsic writing the reducer's identity.

    Returns
    -------
    TensorIntrin
        The intrinsic.

    Raises
    ------
    ComputeError
        For a declared computation that is not a compute over placeholders as above.
    """
    if isinstance(op, Tensor):
        op = op.op
    if not isinstance(op, ComputeOp):
        raise ComputeError(f"decl_tensor_intrin: the first argument is the declared computation "
                           f"(a tensor made by tc.compute over placeholders), got {op!r:.80}")
    if len(op.bodies) != 1:
        raise ComputeError(f"decl_tensor_intrin: {display(op.name)} has {len(op.bodies)} "
                           "outputs; an intrinsic declares one output tensor")
    if name is None:
        name = op.name
    if not isinstance(name, str) or not name:
        raise ComputeError(f"decl_tensor_intrin: name must be a non-empty string, got {name!r:.60}")
    what = f"decl_tensor_intrin {display(name)}"
    if llvm is not None and not callable(llvm):
        raise ComputeError(f"{what}: llvm must be a function (ib, ins, outs) that emits the "
                           f"intrinsic, or None; got {llvm!r:.60}")
    if cuda is not None and not callable(cuda):
        raise ComputeError(f"{what}: cuda must be a function (cb, ins, outs) that emits the "
                           f"intrinsic as CUDA C, or None; got {cuda!r:.60}")
    if isinstance(requires, str):
        requires = (requires,)
    try:
        requires = frozenset(requires)
    except TypeError:
        raise ComputeError(f"{what}: requires must be CPU feature names such as "
                           f"('avx512vnni',), got {requires!r:.60}") from None
    bad = [f for f in requires if not isinstance(f, str) or not f.replace("_", "").replace(
        ".", "").isalnum()]
    if bad:
        raise ComputeError(f"{what}: requires must be CPU feature names such as "
                           f"('avx512vnni',), got {bad[0]!r:.60}")
    axes = {iv.var: iv for iv in list(op.axis) + list(op.reduce_axis)}
    for iv in axes.values():
        if not _const_int(iv.dom.extent) or getattr(iv.dom.min, "value", None) != 0:
            raise ComputeError(f"{what}: axis {display(iv.name)} has extent {iv.dom.extent}; the "
                               "declared computation's extents must be constants")
    inputs = []
    for t in op.input_tensors:
        if not isinstance(t.op, PlaceholderOp):
            raise ComputeError(
                f"{what}: the declared computation reads {display(t.name)}, which is a compute; "
                "an intrinsic's computation reads placeholders only (declare one per operand)")
        if not all(_const_int(x) for x in t.shape):
            raise ComputeError(f"{what}: operand {display(t.name)} has shape {t.shape}; the "
                               "operands of an intrinsic have constant shapes")
        inputs.append(t)
    for ld in collect(op.body, lambda n: isinstance(n, ProducerLoad)):
        idx = ld.indices
        if not all(isinstance(i, Var) and i in axes for i in idx) or len(set(idx)) != len(idx):
            raise ComputeError(
                f"{what}: {display(ld.producer.name)} is read at "
                f"[{', '.join(str(i) for i in idx)}]; each operand of an intrinsic is indexed by "
                "distinct axes of the computation, with no arithmetic (put offsets and "
                "strides in the stage that is tensorized, not in the intrinsic)")
        for i, ext in zip(idx, ld.producer.shape):
            if axes[i].dom.extent.value != ext.value:
                raise ComputeError(
                    f"{what}: {display(ld.producer.name)} has extent {ext.value} in the "
                    f"dimension read with axis {display(axes[i].name)}, which runs "
                    f"{axes[i].dom.extent.value} times; make the shapes agree")
    body = op.body
    if isinstance(body, Reduce) and not (getattr(body.condition, "value", None) is True):
        raise ComputeError(f"{what}: the declared reduction has a where= condition; an "
                           "intrinsic computes whole blocks (leave out where=)")
    if init is not None:
        _check_init(what, op, init)
    intrin = TensorIntrin(name, op, tuple(inputs), llvm, requires, bool(dense), cuda, init)
    register_tensor_intrin(intrin)   # (tecomp.ir.parse finds it by name)
    return intrin


def _check_init(what: str, op, init) -> None:
    """``init`` must write the reducer's identity over the whole declared output."""
    body = op.body
    ok = (isinstance(init, TensorIntrin) and isinstance(body, Reduce) and not init.reduce
          and not init.inputs and init.output.dtype == op.output(0).dtype
          and [x.value for x in init.output.shape] == [x.value for x in op.output(0).shape]
          and isinstance(init.op.body, Const)
          and init.op.body.value == getattr(body.combiner.identity, "value", object()))
    if not ok:
        raise ComputeError(
            f"{what}: init must be a tensor intrinsic that writes the reducer's identity "
            "(a constant, reading no operand) over an output of the same shape and dtype, "
            "and the declared computation must be a reduction")


def row_major(shape) -> list:
    """Row-major strides (in elements) of ``shape`` (ints): a dense operand's layout."""
    out, acc = [], 1
    for n in reversed(list(shape)):
        out.append(acc)
        acc *= int(n)
    return out[::-1]


def _const_int(e) -> bool:
    return isinstance(getattr(e, "value", None), int) and not isinstance(e.value, bool)


# ---------------------------------------------------------------------------------------
# the built-in intrinsics, by name (what a trace or a tuning record may name)

_BUILTIN: Dict[str, TensorIntrin] = {}
_LOCK = threading.Lock()


def builtin_intrins() -> Dict[str, TensorIntrin]:
    """Every built-in intrinsic by name (declared once, on first use)."""
    with _LOCK:
        if not _BUILTIN:
            for op, emit, name, requires, dense in (intrin_x86.declarations()
                                                    + intrin_aarch64.declarations()):
                _BUILTIN[name] = decl_tensor_intrin(op, llvm=emit, name=name, requires=requires,
                                                    dense=dense)
            for op, emit, name, dense, init in (intrin_cuda.declarations()
                                                 + intrin_mma.declarations()
                                                 + intrin_wgmma.declarations()):
                _BUILTIN[name] = decl_tensor_intrin(
                    op, cuda=emit, name=name, dense=dense,
                    init=_BUILTIN[init] if init is not None else None)
    return _BUILTIN


def tensor_intrin(name: str) -> TensorIntrin:
    """The built-in tensor intrinsic called ``name``.

    Parameters
    ----------
    name : str
        E.g. ``"x86.vnni_u8s8s32_16x4"``; :func:`tensor_intrins_for` lists those a
        target may use.

    Returns
    -------
    TensorIntrin
        The intrinsic.

    Raises
    ------
    ScheduleError
        For a name that is not a built-in (the message lists them).

    Examples
    --------
    >>> import tecomp as tc
    >>> vnni = tc.tensor_intrin("x86.vnni_u8s8s32_16x4")
    """
    found = builtin_intrins().get(name) if isinstance(name, str) else None
    if found is None:
        raise ScheduleError(f"tensor_intrin: no built-in intrinsic is called {display(str(name))!r:.80}; "
                            f"the built-ins are {', '.join(sorted(builtin_intrins()))}")
    return found


def builtin_name(intrin) -> Optional[str]:
    """The name of ``intrin`` when it is a built-in (the very object), else None."""
    if isinstance(intrin, TensorIntrin) and builtin_intrins().get(intrin.name) is intrin:
        return intrin.name
    return None


def transpose_intrin(target, lanes: int, dtype: str, rows: int = 0,
                     cols: int = 0) -> Optional[TensorIntrin]:
    """The built-in ``lanes x lanes`` transpose (``x86.transpose_f32_<lanes>x<lanes>``),
    or with ``rows`` (2 to ``lanes``) the ``rows x lanes`` one
    (``x86.transpose_f32_<rows>x<lanes>``), or with ``cols`` (2 to ``lanes``) the
    ``lanes x cols`` one (``x86.transpose_f32_<lanes>x<cols>``: ``lanes`` rows of ``cols``
    into ``cols`` rows of ``lanes``), where ``target`` has it and ``dtype`` is float32,
    else None."""
    if dtype != "float32":
        return None
    name = (f"x86.transpose_f32_{lanes}x{cols}" if cols else
            f"x86.transpose_f32_{rows or lanes}x{lanes}")
    return next((t for t in tensor_intrins_for(target) if t.name == name), None)


def tensor_intrins_for(target: Union[str, Target] = "llvm") -> List[TensorIntrin]:
    """The built-in intrinsics that code for ``target`` may use, widest first.

    Parameters
    ----------
    target : str or Target, optional
        The target (the host CPU by default); for a CPU, the intrinsics whose
        required features it has; for ``cuda``/``cuda-emu``, the CUDA ones (without the
        ``cuda.mma_*`` ones, which need sm_80, for an older ``-arch``, and the
        ``cuda.wgmma_*`` ones for an ``-arch`` other than sm_90a).

    Returns
    -------
    list of TensorIntrin
        The intrinsics.

    Examples
    --------
    >>> import tecomp as tc
    >>> names = [t.name for t in tc.tensor_intrins_for("llvm -mcpu=haswell")]
    """
    tgt = as_target(target)
    if tgt.is_gpu:
        old = tgt.arch is not None and sm_number(tgt.arch) < MMA_MIN_SM
        # wgmma: sm_90a only (or the device's own arch, unnamed)
        no_wgmma = tgt.arch is not None and str(tgt.arch) != "sm_90a"
        return sorted((t for t in builtin_intrins().values() if t.cuda is not None
                       and not (old and (t.name.startswith("cuda.mma_")
                                         or "bf16" in t.name))
                       and not (no_wgmma and t.name.startswith("cuda.wgmma_"))),
                      key=lambda t: t.name)
    if not tgt.is_cpu:
        return []
    found = [t for t in builtin_intrins().values()
             if t.llvm is not None and not t.missing_features(tgt)]
    return sorted(found, key=lambda t: -int(t.output.shape[0].value))
