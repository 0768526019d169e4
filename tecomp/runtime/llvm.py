"""The callable CPU :class:`Module` that ``build(..., target="llvm")`` returns.

Calling
-------
``mod(*args)`` takes numpy arrays for buffer parameters and Python/numpy scalars for
scalar parameters, in parameter order.  Everything is checked before the kernel runs
(by :mod:`tecomp.runtime.argcheck`, the checks and messages every runtime shares; a
generated fast path accepts valid C-contiguous calls without them, and a kernel whose
parameters are all buffers has those checked in compiled code, see "The call's cost"
below), and every mismatch
raises :class:`~tecomp.errors.ArgumentError` naming the parameter
(by name and 1-based argument position), what it expects and what it got: the
argument count; the type (``numpy.ndarray``); the dtype (exactly, no silent
conversion); the number of dimensions; every constant extent; the symbolic extents (a
variable such as ``n`` is bound from the first dimension whose extent is exactly
``n``, or from its scalar parameter, and every shape expression such as ``n*2`` is then
evaluated and compared); writability of every buffer the kernel stores to; element
alignment of data pointers and strides; no written array overlapping itself or another
argument (except an input passed in place, below); the range of scalars; the conditions
lowering recorded on the scalars (an extent given by a scalar such as ``n`` must be
``>= 0``, a symbolic split factor ``>= 1``).  Zero-size extents are fine (loops simply
do not run).  With correct arguments an unchecked
kernel stays inside its arrays; ``checks=True`` also guards against wrong IR.

Variants (layout versioning)
----------------------------
Arrays are never copied.  Each call picks one compiled *variant* of the kernel:

* ``contiguous``: every array has the layout the IR declares (C-contiguous for the
  usual ``strides=None`` buffers).  Strides are compile-time constants when the
  shapes are, so this is as fast as a kernel that knows nothing about strides.  It is
  compiled eagerly by ``build``.
* ``strided``: at least one argument is a non-contiguous view (a transpose, ``::2``,
  a negative step, a broadcast view with stride 0, ...); the kernel reads every
  array's strides (numpy's byte strides divided by the item size; a stride that is
  not a multiple of the item size is an ArgumentError) from its argument block.
  Compiled on the first call that needs it, then cached.
* each layout exists with and without ``noalias`` on the buffer pointers.  An output
  must not overlap another argument or itself (:meth:`ArgChecker.check_overlap
  <tecomp.runtime.argcheck.ArgChecker.check_overlap>` refuses it), except the same
  array for an input and an output where lowering proved the kernel elementwise in
  them (:mod:`tecomp.lower.in_place`): that call runs the aliasing-safe variant
  (compiled lazily, cached).  The fast paths send every call whose arrays may overlap
  to those checks.

Lazy compilation holds the module's lock; variants are immutable once compiled.

The call's cost
---------------
A kernel whose parameters are all buffers is called through the compiled binder
(:mod:`tecomp.runtime.pybind`): one ctypes call, with the argument tuple, that
checks C-contiguous numpy arrays of the exact dtype, shape, flags and alignment, binds
the shape variables, compares byte ranges for overlap and runs the contiguous no-alias
variant.  Anything else (views, overlapping arrays, torch tensors, a mistake) comes back
before the kernel runs and takes the Python path: the generated fast binder
(:func:`_fast_path_source`), then the generic checks.  A call of a kernel with two
arrays: 1.53 us through the Python fast path, 0.65 us through the binder (Zen 4,
Python 3.11); TVM's compiled functions take 0.23 us without a parallel region.
``TECOMP_PY_BINDER=0`` turns the binder off.  Kernels with scalar parameters bind in
Python.

Threads
-------
A Module may be called from several Python threads at once: the kernel is called
through ctypes (the GIL is released while it runs), and the per-call argument block
(data pointers, scalar and stride slots, error words) is thread-local.  Parallel
loops share the process-wide thread pool (see ``tecomp.codegen.llvm.threadpool``),
which runs one parallel region at a time.

Ahead of time
-------------
``mod.export_library(path)`` writes the module as a shared library
(:mod:`tecomp.codegen.llvm.export`); ``tc.load_module(path)``
(:mod:`tecomp.runtime.aot`) makes a Module of it through this same constructor, its
variants looked up in the library instead of compiled: the same checks, messages and
variants, without llvmlite.

Errors from inside the kernel
-----------------------------
The kernel returns an error code and fills error words (see ``tecomp.codegen.llvm.abi``):
a failed bounds check raises :class:`~tecomp.errors.BoundsError` naming the buffer,
the index, the dimension and its extent, and the printed IR access and statement; a
failed ``malloc`` raises :class:`KernelMemoryError`; a failed checked assert raises
:class:`KernelAssertionError`.
"""
from __future__ import annotations

import ctypes
import os
import threading
from typing import Dict, List, Tuple

import numpy as np

# KernelMemoryError, KernelAssertionError: defined in tecomp.errors, importable here
from ..errors import (
    ArgumentError, BoundsError, InternalError, KernelAssertionError, KernelMemoryError, TargetError,
    TecompError, internal_assert,
)
from ..ir import dtype as _dt
from ..ir.expr import Add, Cast, Const, FloorDiv, FloorMod, Max, Min, Mul, Sub, Var
from .. import threads as _threads
from ..target.host import host_cpu as _host_cpu

#: offset of the data pointer in a numpy array object (after the CPython object header):
#: the ``_pyarrays`` entry of a kernel reads it there (see :func:`_probe_pyobj_layout`)
PYOBJECT_DATA_OFFSET = object.__basicsize__
from .argcheck import (
    FLOAT_MAX, ArgChecker, compile_shape_expr, count_error, element_strides, in_place_of,
    int_range, param_checks_of,
)
from .extern import take_error
from .pybind import (
    HEADER_WORDS, OP_APART, OP_ARRAY, OP_BIND, OP_DIM, OP_END, OP_SAME, SYMBOL, ObjectLayout,
    binder_ir,
)
from .timing import Timed
from .ndarray import NDArray

__all__ = ["Module", "set_num_threads", "get_num_threads", "KernelMemoryError",
           "KernelAssertionError"]

set_num_threads = _threads.set_num_threads
get_num_threads = _threads.get_num_threads

_KERNEL_T = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
_ERR_WORDS = 5


# ---------------------------------------------------------------------------------------
# handing arrays to the kernel


def _probe_pyobj_layout() -> bool:
    """Kernels have a second entry (``tecomp_<name>_pyarrays``) that takes the addresses
    of the numpy array *objects* and reads each data pointer from the field right after
    the CPython object header (what ``PyArray_DATA`` reads): ``id(a)`` costs tens of
    nanoseconds where ``a.ctypes.data`` costs microseconds.  Use it only if a probe
    confirms the layout on this interpreter; else pass ``a.ctypes.data`` to the plain
    entry."""
    read = ctypes.c_uint64.from_address
    try:
        base = np.arange(24, dtype=np.float64).reshape(4, 6)
        probes = [base, base[1:, 2:], base.T, base[::-1, ::2], np.zeros(0, np.int8),
                  np.broadcast_to(np.float32(1), (3, 3)), np.ascontiguousarray(base[::2]),
                  base.view(np.ndarray), np.asarray(bytearray(16)).view(np.int32)]
        return all(read(id(a) + PYOBJECT_DATA_OFFSET).value == a.ctypes.data for a in probes)
    except Exception:  # noqa: BLE001 - any surprise: use the portable path
        return False


_PYOBJ = _probe_pyobj_layout()


def _probe_binder_layout():
    """The field offsets the compiled binder reads (:mod:`tecomp.runtime.pybind`),
    each confirmed on probe objects against what Python and numpy report: a tuple's
    size and items, an array's type, data pointer, ndim, shape, base, dtype and flags.
    None (no binder: the Python path binds every call) if any differs."""
    H = object.__basicsize__
    lay = ObjectLayout(ob_type=H - 8, tuple_size=H, tuple_items=H + 8, data=H, nd=H + 8,
                       dims=H + 16, base=H + 32, descr=H + 40, flags=H + 48,
                       owndata=_NPY_OWNDATA)
    i64, i32 = ctypes.c_int64.from_address, ctypes.c_int32.from_address
    try:
        if H != 16 or tuple.__itemsize__ != 8 or tuple.__basicsize__ != H + 8 or \
                np.ndarray.__basicsize__ < lay.flags + 4:
            return None
        base = np.arange(24, dtype=np.float64).reshape(4, 6)
        ro = np.zeros(3, np.int32)
        ro.flags.writeable = False
        odd = np.zeros(9, np.uint8)[1:].view(np.int16)        # not aligned
        probes = [base, base[1:, 2:], base.T, base[::-1, ::2], np.zeros(0, np.int8), ro,
                  np.broadcast_to(np.float32(1), (3, 3)), np.ascontiguousarray(base[::2]),
                  base.view(np.ndarray), odd, np.zeros((2, 1, 3), np.float32),
                  np.ones((), np.float32)]
        for a in probes:
            o = id(a)
            flags = i32(o + lay.flags).value
            if (i64(o + lay.ob_type).value != id(type(a))
                    or i64(o + lay.data).value != a.ctypes.data
                    or i32(o + lay.nd).value != a.ndim
                    or [i64(i64(o + lay.dims).value + 8 * d).value for d in range(a.ndim)]
                    != list(a.shape)
                    or i64(o + lay.base).value != (0 if a.base is None else id(a.base))
                    or i64(o + lay.descr).value != id(a.dtype)
                    or bool(flags & _NPY_C_CONTIGUOUS) != a.flags.c_contiguous
                    or bool(flags & _NPY_ALIGNED) != a.flags.aligned
                    or bool(flags & _NPY_WRITEABLE) != a.flags.writeable
                    or bool(flags & _NPY_OWNDATA) != a.flags.owndata):
                return None
        for t in ((), (base,), (1, base, "x")):
            if i64(id(t) + lay.tuple_size).value != len(t) or any(
                    i64(id(t) + lay.tuple_items + 8 * k).value != id(x) for k, x in enumerate(t)):
                return None
    except Exception:  # noqa: BLE001 - any surprise: the Python path binds every call
        return None
    return lay


#: numpy's array flags (``NPY_ARRAY_*``), confirmed by :func:`_probe_binder_layout`
_NPY_C_CONTIGUOUS, _NPY_OWNDATA, _NPY_ALIGNED, _NPY_WRITEABLE = 0x1, 0x4, 0x100, 0x400
_BIND_T = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p,
                           ctypes.py_object)
_binder_state: list = []        # [the binder's ctypes function, or None], once per process
_binder_lock = threading.Lock()


def _binder(compile_ir=None):
    """The compiled binder (``tecomp.runtime.pybind``), compiled on first use with
    ``compile_ir(ir_text, symbols)`` (the code generator's JIT; a module the code generator
    built passes it, a library's kernel has none: it uses the binder when one was
    compiled already, else the Python path); None where the probe refused this
    interpreter's layout or ``TECOMP_PY_BINDER=0``."""
    if _binder_state:
        return _binder_state[0]
    if compile_ir is None:
        return None      # (a loaded library's kernel, before any kernel was compiled)
    with _binder_lock:
        if not _binder_state:
            fn = None
            lay = None if not _threads.flag_from_env(
                "TECOMP_PY_BINDER", True, "whether calls bind their arguments in compiled "
                "code (off: in Python)") else _probe_binder_layout()
            if lay is not None:
                jm = compile_ir(binder_ir(lay), [SYMBOL])
                fn = _BIND_T(jm.addresses[SYMBOL])
                fn.jit = jm          # (keeps the engine, and so the code, alive)
            _binder_state.append(fn)
    return _binder_state[0]


def _dims_to_check(plan: "_CallPlan", scalar_vars=frozenset()):
    """``(buffer plan, dimension, extent)`` of every dimension a fast binder compares once
    the shape variables are bound: all but the one each variable is bound from (a scalar
    parameter's variable is bound from the scalar, so every dimension of it is checked)."""
    origin = plan.sig.shape_var_origin
    for p in plan.bufs:
        for d, x in enumerate(p.bp.buffer.shape):
            if isinstance(x, Var) and x not in scalar_vars and origin.get(x) == (p.bp, d):
                continue
            yield p, d, x


def _binder_program(plan: "_CallPlan", entry: int):
    """The binder's program for a kernel (see :mod:`tecomp.runtime.pybind`), whose
    contiguous no-alias variant's entry is at ``entry``: a ctypes int64 array, or None
    where the binder cannot take its calls (scalar parameters, a shape the fast path
    does not inline, declared strides, conditions on the parameters)."""
    sig = plan.sig
    if plan.scalars or not all(p.row_major for p in plan.bufs):
        return None
    # conditions on one shape variable that are a bound on it (``n + 3`` within int32:
    # the index arithmetic of a split's extent) tighten its BIND limit; any other
    # condition leaves the call to the Python path
    limits: Dict[Var, int] = {}
    for pc in param_checks_of(sig.func):
        bound = _variable_bound(pc)
        if bound is None or bound[0] not in sig.shape_var_origin:
            return None
        var, hi = bound
        limits[var] = min(hi, limits.get(var, hi))
    steps = []
    for p in plan.bufs:
        need = _NPY_C_CONTIGUOUS | _NPY_ALIGNED | (_NPY_WRITEABLE if p.is_output else 0)
        steps.append((OP_ARRAY, p.pos, id(p.np_dtype), p.data_index, need, p.ndim,
                      p.itemsize))
    for var, (bp, d) in sig.shape_var_origin.items():
        steps.append((OP_BIND, bp.data_index, d, sig.slot_index[var],
                      min(int_range(var.dtype)[1], limits.get(var, int_range(var.dtype)[1]))))
    for p, d, x in _dims_to_check(plan):
        if isinstance(x, Const):
            steps.append((OP_DIM, p.data_index, d, int(x.value)))
        elif isinstance(x, Var):
            steps.append((OP_SAME, p.data_index, d, sig.slot_index[x]))
        else:
            return None   # (a shape expression: the Python path checks it)
    index = {p.pos: p.data_index for p in plan.bufs}
    for i, j in plan.alias_pairs:
        steps.append((OP_APART, index[i], index[j]))
    steps.append((OP_END,))
    words = [plan.nb, plan.nb, plan.err_base, entry, id(np.ndarray), plan.nparams, 0, 0]
    internal_assert(len(words) == HEADER_WORDS, "the binder's header has another length")
    for st in steps:
        words.extend(list(st) + [0] * (8 - len(st)))
    return (ctypes.c_int64 * len(words))(*words)


def _variable_bound(pc) -> "Tuple[Var, int] | None":
    """``(n, hi)`` when the condition ``pc`` on the values of a shape variable ``n >= 0``
    (``lower <= c*n + d <= upper``, ``c > 0``) holds exactly for ``n <= hi``; else None."""
    form = _affine(pc.expr)
    if form is None or len(form[0]) != 1:
        return None
    ((var, c),), d = form[0].items(), form[1]
    if c <= 0 or d < pc.lower:   # (it must hold at n = 0 for "n <= hi" to be all of it)
        return None
    if pc.upper is None:
        return var, int_range(var.dtype)[1]
    return var, (pc.upper - d) // c


def _affine(e) -> "Tuple[Dict[Var, int], int] | None":
    """``({var: coefficient}, constant)`` of an integer expression made of variables,
    constants, ``+``, ``-`` and products by constants (exactly, as the checks evaluate
    it); else None."""
    t = type(e)
    if t is Const:
        return {}, int(e.value)
    if t is Var:
        return {e: 1}, 0
    if t in (Add, Sub):
        a, b = _affine(e.a), _affine(e.b)
        if a is None or b is None:
            return None
        sign = 1 if t is Add else -1
        coefs = dict(a[0])
        for v, c in b[0].items():
            coefs[v] = coefs.get(v, 0) + sign * c
        return {v: c for v, c in coefs.items() if c}, a[1] + sign * b[1]
    if t is Mul:
        a, b = _affine(e.a), _affine(e.b)
        if a is None or b is None or (a[0] and b[0]):
            return None
        (f, k) = (a, b[1]) if a[0] else (b, a[1])
        return {v: c * k for v, c in f[0].items() if c * k}, f[1] * k
    return None


def _array_handle(a) -> int:
    """What the data slot of array ``a`` holds (see :func:`_probe_pyobj_layout`)."""
    return id(a) if _PYOBJ else a.ctypes.data


# ---------------------------------------------------------------------------------------
# the call plan


class _BufPlan:
    __slots__ = ("bp", "pos", "name", "spec", "np_dtype", "ndim", "is_output", "data_index",
                 "stride_slot", "itemsize", "row_major", "declared_strides")

    def __init__(self, bp, spec):
        b = bp.buffer
        self.bp = bp
        self.pos = bp.pos
        self.name = b.name
        self.spec = spec  # argcheck's BufferSpec: names it in messages
        self.np_dtype = _dt.numpy_dtype(b.dtype)
        self.ndim = len(b.shape)
        self.itemsize = self.np_dtype.itemsize
        self.is_output = bp.is_output
        self.data_index = bp.data_index
        self.stride_slot = bp.stride_slot
        self.row_major = b.strides is None
        self.declared_strides = None if spec.strides is None else \
            [compile_shape_expr(x) for x in spec.strides]


class _CallPlan:
    def __init__(self, sig):
        self.sig = sig
        func = sig.func
        self.nparams = len(sig.params)
        self.param_names = ", ".join(p.name for p in sig.params)
        #: the checks of the generic path, and every message (shared with the CUDA runtimes)
        self.checker = ArgChecker(func.params, func_name=func.name,
                                  written=[bp.buffer for bp in sig.buffers if bp.is_output],
                                  device=False, aligned=True, exact_strides=False,
                                  param_checks=param_checks_of(func),
                                  in_place=in_place_of(func))
        specs = {spec.pos: spec for spec in self.checker.buffers}
        self.bufs = [_BufPlan(bp, specs[bp.pos]) for bp in sig.buffers]
        internal_assert(all(p.spec.index == p.data_index for p in self.bufs),
                        "the buffers of the signature and of argcheck are numbered differently")
        self.nb = len(self.bufs)
        #: (pos, var, slot, is_float)
        self.scalars = [(sp.pos, sp.var, sp.slot, _dt.is_float(sp.var.dtype))
                        for sp in sig.scalars]
        scalar_vars = {sp.var for sp in sig.scalars}
        self.shape_slots = [(v, sig.slot_index[v]) for v in sig.slot_vars
                            if v not in scalar_vars]
        outs = [p for p in self.bufs if p.is_output]
        pairs = []
        for o in outs:
            for q in self.bufs:
                if q is not o and (q.pos, o.pos) not in pairs:
                    pairs.append((o.pos, q.pos))
        self.alias_pairs = pairs
        #: (input, output) positions of the in-place pairs (argcheck's, by position)
        bufs = self.checker.buffers
        self.in_place_positions = frozenset((bufs[i].pos, bufs[o].pos)
                                            for i, o in self.checker.in_place)
        self.output_positions = frozenset(p.pos for p in outs)
        self.size = self.nb + sig.num_slots + _ERR_WORDS
        self.err_base = self.nb + sig.num_slots


def _fast_path_source(plan: _CallPlan, tensors: bool = False, grad_inputs: bool = False) -> str:
    """Python source of the fast argument binder of one kernel.

    It handles the hot case -- exact ``numpy.ndarray`` arguments of the right dtype and
    shape, all C-contiguous, plain Python ``int``/``float``/``bool`` scalars -- in
    straight-line code with every constant inlined, and returns the variant key.  On anything else it returns
    None and the generic :meth:`Module._prepare` runs, which handles views and raises
    the detailed ArgumentError.

    ``tensors=True``: the same for exact ``torch.Tensor`` arguments (contiguous, on the
    CPU, not requiring grad), which it passes by data pointer (``tensor.data_ptr()``)
    to the kernel's plain entry; torch keeps every tensor inside its storage, and two
    contiguous tensors overlap exactly when their byte ranges do.  ``grad_inputs=True``
    (tecomp.torch's forward, inside an autograd function): input tensors may require
    grad (the kernel only reads them); outputs still may not.
    """
    L = ["def fast(args, sc):"]
    w = L.append
    sig = plan.sig
    nb = plan.nb
    names = []
    if tensors and plan.bufs:
        # (inside torch.autograd.forward_ad.dual_level a tensor may carry a tangent: the
        # generic path refuses one that does)
        # (and while torch.jit.trace records: the generic path refuses, since the trace
        # would not record the kernel)
        w("    if fwad._current_level >= 0 or tracing(): return None")
    for p in plan.bufs:
        nm = f"a{p.data_index}"
        names.append(nm)
        w(f"    {nm} = args[{p.pos}]")
        if tensors:
            # (a real dtype has no conjugate bit; the negation bit is read on the generic
            # path, which resolves it)
            grad = "" if grad_inputs and not p.is_output else f" or {nm}.requires_grad"
            w(f"    if type({nm}) is not Tensor or {nm}.dtype is not tdt{p.data_index} or "
              f"not {nm}.is_cpu{grad} or {nm}.is_neg(): return None")
        else:
            # (numpy's built-in dtypes are shared objects: the identity test mostly decides)
            w(f"    if type({nm}) is not ndarray: return None")
            w(f"    t = {nm}.dtype")
            w(f"    if t is not dt{p.data_index} and t != dt{p.data_index}: return None")
            # memory that is not an ndarray's own (as_strided, __array_interface__, a buffer
            # object): the generic path checks that it holds the elements
            w(f"    r{p.data_index} = b = {nm}.base")
            w("    if b is not None and (type(b) is not ndarray or not b.flags.owndata): "
              "return None")
        w(f"    s{p.data_index} = {nm}.shape")
        w(f"    if len(s{p.data_index}) != {p.ndim}: return None")
    scalar_vars = {sp.var for sp in sig.scalars}
    for pos, var, slot, _ in plan.scalars:
        vn = f"v{slot}"
        w(f"    {vn} = args[{pos}]")
        if var.dtype == "bool":
            w(f"    if type({vn}) is not bool: return None")
            w(f"    ints[{nb + slot}] = {vn}")
        elif _dt.is_int(var.dtype):
            lo, hi = int_range(var.dtype)
            w(f"    if type({vn}) is not int or not {lo} <= {vn} <= {hi}: return None")
            w(f"    ints[{nb + slot}] = {vn}")
        elif var.dtype == "float64":
            w(f"    if type({vn}) is not float: return None")
            w(f"    floats[{nb + slot}] = {vn}")
        else:  # a value past the dtype's largest (or inf, nan): the generic path decides
            top = FLOAT_MAX[var.dtype]
            w(f"    if type({vn}) is not float or not -{top!r} <= {vn} <= {top!r}: return None")
            w(f"    floats[{nb + slot}] = {vn}")
    var_name = {sp.var: f"v{sp.slot}" for sp in sig.scalars}
    # bind the shape variables, then check every dimension
    for var, (bp, d) in sig.shape_var_origin.items():
        if var in scalar_vars:
            continue
        vn = f"n{sig.slot_index[var]}"
        var_name[var] = vn
        w(f"    {vn} = s{bp.data_index}[{d}]")
        lo, hi = int_range(var.dtype)
        w(f"    if {vn} > {hi}: return None")
        w(f"    ints[{nb + sig.slot_index[var]}] = {vn}")
    # the conditions lowering recorded (a scalar extent >= 0, a split factor >= 1)
    for pc in param_checks_of(sig.func):
        py = _py_shape_expr(pc.expr, var_name)
        if py is None:
            return ""  # an unusual condition: the generic path checks it
        w(f"    if {py} < {pc.lower}: return None")
        if pc.upper is not None:
            w(f"    if {py} > {pc.upper}: return None")
    for p, d, x in _dims_to_check(plan, scalar_vars):
        ref = f"s{p.data_index}[{d}]"
        if isinstance(x, Const):
            w(f"    if {ref} != {int(x.value)}: return None")
        elif isinstance(x, Var):
            w(f"    if {ref} != {var_name[x]}: return None")
        else:
            py = _py_shape_expr(x, var_name)
            if py is None:
                return ""  # an unusual shape expression: the generic path checks it
            w(f"    if {ref} != {py}: return None")
    for p in plan.bufs:
        nm = names[p.data_index]
        k = p.data_index
        if not p.row_major:
            return ""
        aliased = any(p.pos in pair for pair in plan.alias_pairs)
        if tensors:
            w(f"    if not {nm}.is_contiguous(): return None")
            w(f"    d{k} = ints[{k}] = {nm}.data_ptr()")
            # a ZeroTensor (torch._efficientzerotensor, what forward-mode AD and
            # torch.func give for a zero tangent) has elements but no memory: its data
            # pointer is 0; the generic path reads it as zeros or refuses it as an output
            w(f"    if not d{k}: return None")
            # a tensor is not always inside its storage: untyped_storage().resize_()
            # (FSDP's way of freeing a parameter) shrinks the memory under a tensor whose
            # shape stays; the generic path refuses such a tensor
            shape = p.bp.buffer.shape
            size = (str(p.itemsize * int(np.prod([int(x.value) for x in shape], dtype=np.int64)))
                    if all(isinstance(x, Const) for x in shape) else f"{nm}.nbytes")
            w(f"    if {nm}.untyped_storage().nbytes() < {nm}.storage_offset() * {p.itemsize} "
              f"+ {size}: return None")
            if aliased:
                w(f"    e{k} = d{k} + {nm}.nbytes")
            continue
        w(f"    f = {nm}.flags")
        cond = "f.c_contiguous and f.aligned"
        if p.is_output:
            cond += " and f.writeable"
        w(f"    if not ({cond}): return None")
        if aliased:
            w(f"    if r{k} is None and f.owndata: r{k} = {nm}")
        w(f"    ints[{k}] = id({nm})")
    # the memory of an array that owns it, or of a view of one (r: that owner), is that
    # owner's alone: arrays of two owners cannot overlap; views of one owner, or memory
    # no ndarray owns (r None), may, numpy says (contiguous tensors: compare their byte
    # ranges).  Arrays that may overlap take the generic path, whose checks refuse them
    # or take them in place; the one array object for an input and an output the kernel
    # may compute in place of it (an in-place pair) runs the aliasing-safe variant here
    w("    key = NOALIAS")
    for i, j in plan.alias_pairs:
        x = next(p for p in plan.bufs if p.pos == i).data_index
        y = next(p for p in plan.bufs if p.pos == j).data_index
        test = f"d{x} < e{y} and d{y} < e{x}" if tensors else \
            f"(r{x} is r{y} or r{x} is None or r{y} is None) and may_share(a{x}, a{y})"
        if (j, i) in plan.in_place_positions:
            w(f"    if a{x} is a{y}: key = ALIASED")
            w(f"    elif {test}: return None")
        else:
            w(f"    if {test}: return None")
    outs = [names[p.data_index] for p in plan.bufs if p.is_output]
    if tensors and outs:
        # the outputs are written in place: their autograd version counters go up (as an
        # in-place torch op's; ArgChecker.mark_written on the generic path)
        w(f"    written(({', '.join(outs)},))")
    w("    return key")
    return "\n".join(L) + "\n"


def _py_shape_expr(e, names) -> "str | None":
    """Python source for the integer shape expression ``e`` (variables by ``names``), or
    None when it uses something the fast path does not inline."""
    t = type(e)
    if t is Const:
        return str(int(e.value))
    if t is Var:
        return names.get(e)
    if t is Cast and _dt.is_int(e.dtype) and _dt.is_int(e.value.dtype) \
            and _dt.bits(e.dtype) >= _dt.bits(e.value.dtype) and not _dt.is_uint(e.dtype):
        return _py_shape_expr(e.value, names)   # widening keeps the value
    ops = {Add: "+", Sub: "-", Mul: "*"}
    if t in ops or (t in (FloorDiv, FloorMod) and isinstance(e.b, Const) and e.b.value != 0):
        a, b = _py_shape_expr(e.a, names), _py_shape_expr(e.b, names)
        if a is None or b is None:
            return None
        op = ops.get(t) or ("//" if t is FloorDiv else "%")
        return f"({a} {op} {b})"
    if t in (Min, Max):
        a, b = _py_shape_expr(e.a, names), _py_shape_expr(e.b, names)
        if a is None or b is None:
            return None
        return f"{'min' if t is Min else 'max'}({a}, {b})"
    return None


def _compile_fast_path(src: str, plan: _CallPlan, tensors: bool = False):
    if not src or not (_PYOBJ or tensors):
        return None
    ns = {"ndarray": np.ndarray, "may_share": np.may_share_memory,
          "NOALIAS": ("contiguous", True), "ALIASED": ("contiguous", False)}
    if tensors:
        import torch

        ns["Tensor"] = torch.Tensor
        ns["written"] = torch._C._increment_version
        ns["fwad"] = torch.autograd.forward_ad
        ns["tracing"] = torch._C._get_tracing_state
        for p in plan.bufs:
            tdt = getattr(torch, p.np_dtype.name, None) if p.np_dtype.isnative else None
            if not isinstance(tdt, torch.dtype):
                return None  # a dtype torch has no tensors of: the generic path refuses it
            ns[f"tdt{p.data_index}"] = tdt
    for p in plan.bufs:
        ns[f"dt{p.data_index}"] = p.np_dtype
    code = src.replace("def fast(args, sc):",
                       "def fast(args, sc):\n    ints = sc.ints; floats = sc.floats", 1)
    exec(compile(code, "<tecomp fast argument binder>", "exec"), ns)  # noqa: S102
    return ns["fast"]


def _no_fast_path(args, sc):
    return None


def _try_binder(binder, args, sc):
    """``binder(args, sc)``, or None (the generic path, which says what is wrong) when a
    tensor it inspects raises: a tensor without storage (a torch.func transform's
    wrapper, a nested tensor) raises from ``shape`` or ``data_ptr()``."""
    try:
        return binder(args, sc)
    except TecompError:
        raise
    except Exception:  # noqa: BLE001
        return None


def _has_torch_tensor(args) -> bool:
    """Whether a call passes a torch tensor (torch is only imported if the caller did)."""
    for a in args:
        t = type(a)
        if t.__module__.startswith("torch"):
            return True
    return False


class _Scratch:
    """Per-thread argument block: [data handles | args slots | error words] (ctypes
    arrays: the cheapest item assignment from Python)."""

    __slots__ = ("ints", "uints", "floats", "base", "args_addr", "err_addr", "keep")

    def __init__(self, plan: _CallPlan):
        n = max(plan.size, 1)
        self.ints = (ctypes.c_int64 * n)()
        self.uints = (ctypes.c_uint64 * n).from_buffer(self.ints)
        self.floats = (ctypes.c_double * n).from_buffer(self.ints)
        self.base = ctypes.addressof(self.ints)
        self.args_addr = self.base + 8 * plan.nb
        self.err_addr = self.base + 8 * plan.err_base


class _Variant:
    def __init__(self, jm, mb, seconds: float):
        self.jit = jm
        self.sites = mb.sites
        self.notes = list(mb.notes)
        self.symbol = mb.symbol
        # the entry the runtime calls: array objects (fast) or data pointers (portable)
        sym = mb.symbol + "_pyarrays" if _PYOBJ else mb.symbol
        self.fn = _KERNEL_T(jm.addresses[sym])
        #: the entry that takes data pointers (torch tensors' fast path)
        self.fn_ptr = self.fn if sym == mb.symbol else _KERNEL_T(jm.addresses[mb.symbol])
        self.seconds = seconds
        #: the CPU features its tensor intrinsics require (none for a loaded library's)
        self.required_features = frozenset(getattr(mb, "required_features", ()))


# ---------------------------------------------------------------------------------------
# Module


class Module(Timed):
    """A compiled CPU kernel: call it with numpy arrays (see the module docstring).

    Attributes: ``name``, ``params`` (the PrimFunc's parameters), ``checks``,
    ``compile_seconds`` (code generation + LLVM for the eager variant),
    ``compile_stats`` (seconds per step), ``vectorize_notes`` (how each vectorized
    loop was compiled), ``entry_symbol`` (the exported C function).
    """

    def __init__(self, func, sig, compiler, jm, mb, *, checks: bool, compile_seconds: float,
                 target=None):
        self.name = func.name
        #: the :class:`~tecomp.target.Target` it was compiled for
        self.target = target
        self.params = tuple(func.params)
        self.prim_func = func
        self.checks = bool(checks)
        self.compile_seconds = compile_seconds
        self.compile_stats = dict(jm.timings)
        self.entry_symbol = mb.symbol
        self._compiler = compiler
        self._plan = _CallPlan(sig)
        self._lock = threading.Lock()
        self._tls = threading.local()
        self._variants: Dict[Tuple[str, bool], _Variant] = {
            ("contiguous", True): _Variant(jm, mb, compile_seconds)}
        self._fast_source = _fast_path_source(self._plan)
        self._fast = _compile_fast_path(self._fast_source, self._plan) or _no_fast_path
        self._fast_tensors = None  # the torch binder: made when a call first passes a tensor
        self._fast_grad = None  # the same for call_grad_inputs
        required = getattr(mb, "required_features", ())
        missing = target.missing_here(required) if target is not None else ()
        foreign = target.runs_here() if target is not None and not target.is_native_isa \
            else None
        #: the compiled binder and this kernel's program for it (see :meth:`__call__`)
        self._bind = self._bind_prog = None
        self._bind_addr = 0
        if not missing and foreign is None:
            prog = _binder_program(self._plan, jm.addresses[mb.symbol])
            fn = _binder(getattr(compiler, "compile_binder", None)) \
                if prog is not None else None
            if fn is not None:
                self._bind, self._bind_prog = fn, prog
                self._bind_addr = ctypes.addressof(prog)
        else:
            # compiled for a CPU feature this one lacks: a call would execute an illegal
            # instruction, so every call raises instead (the source is still there)
            why = (f"{self.name} cannot run on this machine: {foreign}" if foreign else
                   f"{self.name} cannot run on this machine: code for {target} may use "
                   f"{', '.join(missing)}, which this CPU ({_host_cpu()}) does "
                   f"not have. Build it for this CPU (target='llvm', or 'llvm -mcpu=native'), "
                   f"or without those features (-mattr="
                   f"{','.join('-' + f for f in missing)}), or for a CPU this one has every "
                   f"feature of; get_source('asm') shows its code")

            def refuse(args, sc, _why=why):
                raise TargetError(_why)
            self._fast = refuse

    # -- introspection ---------------------------------------------------------------
    @property
    def vectorize_notes(self) -> List[str]:
        """How each vectorized loop was compiled (repeated notes are counted once, with
        ``(xN)`` appended), in program order."""
        counts: Dict[str, int] = {}
        for n in self._variants[("contiguous", True)].notes:
            counts[n] = counts.get(n, 0) + 1
        return [n if k == 1 else f"{n} (x{k})" for n, k in counts.items()]

    @property
    def variants_compiled(self) -> List[Tuple[str, bool]]:
        """The ``(layout, noalias)`` variants compiled so far."""
        return sorted(self._variants)

    def __repr__(self):
        return f"<tecomp.Module {self.name} (llvm) params=({self._plan.param_names})>"

    def get_source(self, kind: str = "llvm", *, layout: str = "contiguous",
                   noalias: bool = True) -> str:
        """The code of one variant: ``"llvm"`` (or ``"ll"``) the optimised LLVM IR,
        ``"llvm-unopt"`` the IR as generated, ``"asm"`` the host assembly."""
        if layout not in ("contiguous", "strided"):
            raise ArgumentError(f"get_source: layout must be 'contiguous' or 'strided', got {layout!r}")
        v = self._variant(layout, bool(noalias))
        if kind in ("llvm", "ll"):
            return v.jit.opt_ir
        if kind == "llvm-unopt":
            return v.jit.unopt_ir
        if kind in ("asm", "s", "assembly"):
            return v.jit.asm
        raise ArgumentError(f"get_source: unknown source kind {kind!r}; use 'llvm', 'llvm-unopt' or 'asm'")

    def _variant(self, layout: str, noalias: bool) -> _Variant:
        key = (layout, noalias)
        v = self._variants.get(key)
        if v is None:
            with self._lock:
                v = self._variants.get(key)
                if v is None:
                    jm, mb, seconds = self._compiler.compile(layout, noalias)
                    v = _Variant(jm, mb, seconds)
                    self._variants[key] = v
        return v

    # -- ahead of time --------------------------------------------------------------------
    def export_library(self, path) -> None:
        """Write this kernel as a shared library at ``path`` (and its sha256 sidecar
        ``path + ".sha256"``): every call variant, the thread pool and the metadata
        that ``tc.load_module(path)`` needs to call it with the same checks, or C code
        to call it (docs/runtime.md, "Ahead-of-time compiled kernels").  Needs llvmlite
        and a C compiler to link with (``cc``, or ``$CC``); loading needs neither."""
        # the code generator that built it exports it (a loaded library's refuses)
        self._compiler.export_library(self, path)

    # -- calling -------------------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        if kwargs:
            raise ArgumentError(
                f"{self.name} takes its arguments by position ({', '.join(p.name for p in self.params)}); "
                f"got keyword argument(s) {', '.join(kwargs)}: pass them in that order")
        plan = self._plan
        try:
            sc = self._tls.s
        except AttributeError:
            sc = self._tls.s = _Scratch(plan)
        bind = self._bind
        if bind is not None:
            # numpy arrays of the right dtype, shape and layout: checked and passed in
            # compiled code (tecomp.runtime.pybind); anything else comes back
            # negative, before the kernel ran, and takes the Python path below
            rc = bind(self._bind_addr, sc.base, args)
            if rc >= 0:
                if rc:
                    self._raise_kernel_error(self._variants[("contiguous", True)], rc, sc)
                return
        if len(args) != plan.nparams:
            raise count_error(self.name, self.params, len(args))
        key = self._fast(args, sc)
        if key is not None:
            v = self._variants.get(key) or self._variant(*key)
            rc = v.fn(sc.base, sc.args_addr, sc.err_addr)
        else:
            ft = self._fast_tensors
            if ft is None and args and _has_torch_tensor(args):
                ft = self._fast_tensors = self._tensor_binder()
            key = _try_binder(ft, args, sc) if ft is not None else None
            if key is not None:
                v = self._variants.get(key) or self._variant(*key)
                rc = v.fn_ptr(sc.base, sc.args_addr, sc.err_addr)  # data pointers
            else:
                if any(type(a) is NDArray for a in args):
                    # tc.nd.array's arrays (TVM's spelling): the same memory as plain
                    # numpy arrays, which take the fast paths above
                    return self(*[a.view(np.ndarray) if type(a) is NDArray else a
                                  for a in args])
                # torch tensors, DLPack, the array interface: numpy views of their memory,
                # kept alive by ``args`` until the kernel returns
                given = args
                args = plan.checker.host_arrays(args)
                key = self._prepare(args, sc)
                v = self._variants.get(key) or self._variant(*key)
                rc = v.fn(sc.base, sc.args_addr, sc.err_addr)
                if args is not given:
                    plan.checker.mark_written(given)
        if rc:
            self._raise_kernel_error(v, rc, sc)

    def _tensor_binder(self, grad_inputs: bool = False):
        """The fast binder for torch tensors (see :func:`_fast_path_source`), or a function
        that always says no when this kernel has no such binder."""
        if self._fast.__name__ == "refuse":
            return self._fast  # compiled for a CPU this one is not: every call raises
        return _compile_fast_path(_fast_path_source(self._plan, tensors=True,
                                                    grad_inputs=grad_inputs),
                                  self._plan, tensors=True) or _no_fast_path

    def call_grad_inputs(self, *args):
        """Call with torch tensors whose inputs may require grad (tecomp.torch's forward,
        inside its autograd function, where the kernel's reads are not recorded anyway):
        the tensor binder without the detach; anything it does not take goes through
        :meth:`__call__` with the inputs detached."""
        sc = self._tls.__dict__.get("s")
        if sc is None:
            sc = _Scratch(self._plan)
            self._tls.s = sc
        fg = self._fast_grad
        if fg is None:
            fg = self._fast_grad = self._tensor_binder(grad_inputs=True)
        key = _try_binder(fg, args, sc) if len(args) == self._plan.nparams else None
        if key is None:  # (an output that requires grad is refused there)
            outs = self._plan.output_positions
            return self(*[a.detach() if k not in outs and getattr(a, "requires_grad", False)
                          else a for k, a in enumerate(args)])
        v = self._variants.get(key) or self._variant(*key)
        rc = v.fn_ptr(sc.base, sc.args_addr, sc.err_addr)
        if rc:
            self._raise_kernel_error(v, rc, sc)

    def _prepare(self, args, sc: _Scratch) -> Tuple[str, bool]:
        """Check (argcheck) and bind ``args`` into the scratch block; return the variant
        key."""
        plan = self._plan
        env, flags, aliased = plan.checker.check_with_flags(args)
        nb = plan.nb
        ints = sc.ints
        for pos, var, slot, is_float in plan.scalars:
            if is_float:
                sc.floats[nb + slot] = env[var]
            else:
                ints[nb + slot] = env[var]
        for var, slot in plan.shape_slots:
            ints[nb + slot] = env[var]
        contiguous = True
        handles = sc.uints
        for p in plan.bufs:
            if contiguous and not (p.row_major and flags[p.data_index].c_contiguous):
                contiguous = False
            handles[p.data_index] = _array_handle(args[p.pos])
        if not contiguous:
            contiguous = self._fill_strides(args, env, ints)
        return ("contiguous" if contiguous else "strided"), not aliased

    def _fill_strides(self, args, env, ints) -> bool:
        """Write every buffer's strides (in elements); return True if, after all, every
        array has its declared layout (only possible with explicit IR strides)."""
        plan = self._plan
        nb = plan.nb
        declared_ok = True
        for p in plan.bufs:
            a = args[p.pos]
            item = p.itemsize
            s0 = nb + p.stride_slot
            for d, s in enumerate(a.strides):
                q, r = divmod(s, item)
                if r:
                    element_strides(p.spec, a.strides)  # raises, naming the stride
                ints[s0 + d] = q
            if p.row_major:
                if not a.flags.c_contiguous:
                    declared_ok = False
            else:
                for d, fn in enumerate(p.declared_strides):
                    if a.shape[d] > 1 and ints[s0 + d] != fn(env):
                        declared_ok = False
        return declared_ok

    def _raise_kernel_error(self, v: _Variant, rc: int, sc: _Scratch):
        base = self._plan.err_base
        code, site, dim, index, extent = sc.ints[base:base + _ERR_WORDS]
        if code == 0:
            code = rc
        if code == 1 and 0 <= site < len(v.sites):
            s = v.sites[site]
            what = "store to" if s.kind == "store" else "load from"
            where = "in the buffer's flattened memory" if s.kind == "tensorize.flat" else \
                f"in dimension {dim}"
            raise BoundsError(
                f"out-of-bounds {what} buffer {s.buffer}: index {index} is outside [0, {extent}) "
                f"{where}, at `{s.text}` in the statement `{s.stmt}` (kernel "
                f"{self.name})")
        if code == 2:
            s = v.sites[site] if 0 <= site < len(v.sites) else None
            what = f" for {s.buffer}" if s else ""
            if extent == -1:
                raise KernelMemoryError(
                    f"kernel {self.name} could not allocate {s.buffer if s else 'a buffer'}: its "
                    f"size in bytes does not fit 64 bits (check the sizes passed)")
            raise KernelMemoryError(f"kernel {self.name} could not allocate {extent} bytes{what}")
        if code == 4:
            e = take_error()
            if e is not None:
                raise e
        if code == 3 and 0 <= site < len(v.sites):
            s = v.sites[site]
            raise KernelAssertionError(f"{s.text} (assert `{s.stmt}` failed in kernel "
                                       f"{self.name})")
        raise InternalError(f"kernel {self.name} returned the unknown error code {rc} "
                            f"(words {code}, {site}, {dim}, {index}, {extent})")
