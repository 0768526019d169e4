"""Argument checks shared by every runtime: match call arguments to a PrimFunc's params.

This module is the single implementation of the checks and of their messages: the CPU
runtime (:mod:`tecomp.runtime.llvm`, whose generated fast path only ever
*accepts* valid calls and hands everything else to these checks), the CUDA emulation
(:mod:`tecomp.codegen.cuda_emu`) and the pycuda runtime (:mod:`tecomp.runtime.cuda`).

:class:`ArgChecker` is built once per function; :meth:`ArgChecker.check` checks, in this
order, every scalar parameter (type; the range of integers), then each array: its type,
its dtype (exactly: tecomp never converts silently; byte order included), its number of
dimensions, every constant extent, the range of the symbolic extents it binds, the
writability of the buffers the function writes (and, where the runtime asks, element
alignment); then the conditions lowering recorded in ``PrimFunc.attrs["param_checks"]``
(:class:`~tecomp.ir.stmt.ParamCheck`, passed as ``param_checks``: an extent of a stage
that depends on a variable, such as ``n`` of ``tc.compute((n,), ...)`` with ``n`` a
scalar parameter, must be ``>= 0``, a symbolic split factor ``>= 1``; a scalar that is
only a value -- an offset, a multiplier -- may be negative); then every symbolic extent
(``n`` is bound from its scalar parameter, else from the first dimension whose extent is
exactly ``n``, then every shape expression such as ``n*2`` is evaluated and compared)
and, where the runtime asks, explicit strides; then overlap (:meth:`ArgChecker.check_overlap`:
no written array may share memory with itself or another argument, except the same
array for an input and an output of an ``in_place`` pair, :mod:`tecomp.lower.in_place`).
It returns the values of the variables.  :func:`bind_and_check` is the same
as a one-shot function.  Every error is an :class:`~tecomp.errors.ArgumentError` that
names the parameter by name and 1-based argument position (``parameter A (argument
1)``), says what it expects and what it got, and how to fix it.

Arrays are numpy arrays or, where the runtime takes them (``device=None`` or ``True``),
device arrays: anything with ``__cuda_array_interface__`` (CuPy, PyTorch, pycuda's
GPUArray, numba), described through :func:`array_meta`.
"""
from __future__ import annotations

import ctypes
import math
import numbers
import operator
import sys
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from ..errors import ArgumentError
from ..ir import dtype as _dt
from ..ir.expr import Buffer, Const, Expr, Var, as_index
from ..ir.functor import free_vars
from ..ir.host_eval import compile_shape_expr, eval_host_expr
from ..ir.printer import to_str
from ..lower.in_place import in_place_pairs

__all__ = [
    "ADDRESS_SPACE", "ArgChecker", "BufferSpec", "ArrayMeta", "FLOAT_MAX", "array_meta", "as_host_array",
    "bind_and_check", "check_memory", "check_scalar", "compile_shape_expr", "count_error",
    "cai_meta", "element_strides", "eval_host_expr", "in_place_of", "int_range", "is_from_dlpack",
    "param_checks_of", "param_label", "self_overlap", "shape_text", "unaligned_error",
]


@dataclass(frozen=True)
class ArrayMeta:
    """What the checks need to know about an array argument."""

    shape: Tuple[int, ...]
    dtype: np.dtype
    strides: Optional[Tuple[int, ...]]  # in bytes; None for C-contiguous device arrays
    writable: bool
    on_device: bool
    pointer: int = 0
    #: the stream a device array's producer may still be writing it on (version 3 of the
    #: interface: 1 the legacy default stream, 2 the per-thread one, else a CUstream
    #: handle); None: nothing to wait for
    stream: Optional[int] = None

    @property
    def c_contiguous(self) -> bool:
        if self.strides is None:
            return True
        expected, acc = [], self.dtype.itemsize
        for d in reversed(self.shape):
            expected.append(acc)
            acc *= d
        return all(d == 1 or s == e for d, s, e in zip(self.shape, self.strides, reversed(expected)))


def cai_meta(arg, cai: dict, name: Optional[str] = None, pos: int = 0) -> ArrayMeta:
    """The :class:`ArrayMeta` of device array ``arg`` from its ``__cuda_array_interface__``
    dict ``cai``, read once by the caller and checked as :func:`array_meta` checks it."""
    return _device_meta(arg, cai, name, pos)


def array_meta(arg, name: Optional[str] = None, pos: int = 0) -> Optional[ArrayMeta]:
    """Describe ``arg`` if it is an array (numpy or device), else return None.

    A device array's ``__cuda_array_interface__`` is read once and checked as the
    hostile input it may be (:func:`_device_meta`): an ArgumentError naming the parameter
    ``name`` (argument ``pos + 1``; None: "a device array") when it is malformed or
    describes memory no kernel may touch."""
    if isinstance(arg, np.ndarray):
        return ArrayMeta(tuple(arg.shape), arg.dtype, tuple(arg.strides), bool(arg.flags.writeable),
                         False, arg.ctypes.data)
    try:
        cai = getattr(arg, "__cuda_array_interface__", None)
    except Exception as e:  # noqa: BLE001 -- the producer's property is the user's code
        raise _bad_device_array(name, pos, f"reading its __cuda_array_interface__ raised "
                                f"{type(e).__name__}: {str(e)[:200]}") from None
    if isinstance(cai, dict):
        return _device_meta(arg, cai, name, pos)
    gpudata = getattr(arg, "gpudata", None)  # an older pycuda GPUArray
    if gpudata is not None and hasattr(arg, "shape") and hasattr(arg, "dtype"):
        return ArrayMeta(tuple(int(x) for x in arg.shape), np.dtype(arg.dtype),
                         tuple(int(s) for s in arg.strides), True, True, int(gpudata))
    return None


#: the bytes of the address space a device pointer lives in
ADDRESS_SPACE = 1 << 64
#: the numpy dtypes of the type strings device arrays gave (each parsed once)
_TYPESTRS: Dict[str, np.dtype] = {}


def _bad_device_array(name: Optional[str], pos: int, what: str) -> ArgumentError:
    who = param_label(name, pos) if name is not None else "a device array"
    return ArgumentError(
        f"{who}: {what}; tecomp reads a device array through its __cuda_array_interface__ "
        f"(a dict with 'shape', 'typestr', 'data' and 'strides', numba's protocol, version "
        f"0 to 3) and refuses one it cannot trust: pass the producer's own array (a CUDA "
        f"tensor, a CuPy array) or fix the object's __cuda_array_interface__")


def _ints(xs) -> Optional[Tuple[int, ...]]:
    """``xs`` as a tuple of Python ints where it is a tuple or list of Python or numpy
    integers (not bools), each read once (a hostile sequence or integer may give other
    values on a second read); else None."""
    if type(xs) is tuple:
        for x in xs:
            if type(x) is not int:
                break
        else:
            return xs   # (the common case: torch's, CuPy's)
    if not isinstance(xs, (tuple, list)):
        return None
    out = []
    for x in tuple(xs):
        if type(x) is int:
            out.append(x)
        elif isinstance(x, (np.integer, numbers.Integral)) and not isinstance(x, (bool, np.bool_)):
            try:
                out.append(int(operator.index(x)))
            except Exception:  # noqa: BLE001 -- the user's __index__
                return None
        else:
            return None
    return tuple(out)


def _device_meta(arg, cai: dict, name: Optional[str], pos: int) -> ArrayMeta:
    """The ArrayMeta of a device array from its ``__cuda_array_interface__`` dict (read
    once by the caller: the checks and the launch see the same description); an
    ArgumentError for a dict that is malformed (a missing key, a shape or strides that
    are not integers, one per dimension, a type string numpy does not read, ``data`` not
    a pair), that masks elements, or whose elements are not where a kernel may touch them
    (a null pointer, an address outside the 64-bit space, a pointer or extent reaching
    past it, a pointer not aligned to its elements: a misaligned-address fault on the
    GPU, which loses the CUDA context)."""
    try:
        shape, typestr, data = cai["shape"], cai["typestr"], cai["data"]
    except KeyError as e:
        raise _bad_device_array(name, pos, f"its __cuda_array_interface__ has no "
                                f"{e.args[0]!r}") from None
    dims = _ints(shape)
    if dims is None or any(x < 0 for x in dims):
        raise _bad_device_array(name, pos, f"its shape {shape!r:.80} is not a tuple of "
                                f"integers >= 0")
    shape = dims
    strides = cai.get("strides")
    if strides is not None:
        steps = _ints(strides)
        if steps is None or len(steps) != len(shape):
            raise _bad_device_array(name, pos, f"its strides {strides!r:.80} are not a tuple "
                                    f"of {len(shape)} integers (one per dimension of shape "
                                    f"{shape}) or None (C-contiguous)")
        strides = steps
    dt = _TYPESTRS.get(typestr) if type(typestr) is str else None
    if dt is None:
        try:
            if not isinstance(typestr, str):
                raise TypeError("not a string")
            dt = np.dtype(typestr)
        except Exception:  # noqa: BLE001 -- numpy's TypeError, ValueError, SyntaxError
            raise _bad_device_array(name, pos, f"its typestr {typestr!r:.40} is not a numpy "
                                    f"type string (such as '<f4')") from None
        if type(typestr) is str and len(_TYPESTRS) < 256:
            _TYPESTRS[typestr] = dt
    if dt.kind == "V" and dt.itemsize == 2:
        try:
            torch_dtype = str(getattr(arg, "dtype", ""))
        except Exception:  # noqa: BLE001 -- the user's attribute
            torch_dtype = ""
        if torch_dtype.endswith("bfloat16"):
            # torch exports a CUDA bfloat16 tensor's typestr as "<V2" (numpy has no bfloat16)
            dt = np.dtype(_dt.numpy_dtype("bfloat16"))
    if cai.get("mask") is not None:
        raise _bad_device_array(name, pos, "it is a masked array (its __cuda_array_interface__ "
                                "has a 'mask'), whose masked elements hold no values; tecomp "
                                "kernels read every element: fill the masked ones and pass "
                                "the data without a mask")
    if not (isinstance(data, (tuple, list)) and len(data) == 2):
        raise _bad_device_array(name, pos, f"its data {data!r:.60} is not a pair (pointer, "
                                f"read-only flag)")
    ptr, readonly = data
    if ptr is None and 0 in shape:
        ptr = 0
    if type(ptr) is not int:
        address = _ints((ptr,))
        if address is None:
            raise _bad_device_array(name, pos, f"its data pointer {ptr!r:.40} is not an "
                                    f"address (an integer in [0, 2**64))")
        ptr = address[0]
    if not 0 <= ptr < ADDRESS_SPACE:
        raise _bad_device_array(name, pos, f"its data pointer {ptr!r:.40} is not an address "
                                f"(an integer in [0, 2**64))")
    try:
        writable = not readonly
    except Exception:  # noqa: BLE001 -- the user's __bool__
        raise _bad_device_array(name, pos, "its read-only flag is not a bool") from None
    stream = cai.get("stream")
    if stream is not None:
        stream = _stream_entry(stream, name, pos)
    meta = ArrayMeta(shape, dt, strides, writable, True, ptr, stream)
    if 0 in shape:
        return meta
    if not ptr:
        raise _bad_device_array(name, pos, f"its data pointer is null (0), but its shape "
                                f"{shape} has elements: a kernel would read or write address 0")
    item = dt.itemsize
    if item and ptr % min(item, 16):
        raise _bad_device_array(name, pos, f"its data pointer {ptr:#x} is not aligned to its "
                                f"{item}-byte {dt.name} elements (a view of a byte buffer at an "
                                f"odd offset): the GPU faults on such a load or store (a "
                                f"misaligned address), and the CUDA context is lost; pass a "
                                f"contiguous copy, whose allocation is aligned")
    if strides is None:
        lo, hi = ptr, ptr + item * math.prod(shape)
    else:
        lo, hi = _span(meta)
    if lo < 0 or hi > ADDRESS_SPACE:
        raise _bad_device_array(name, pos, f"its elements (shape {shape}, byte strides "
                                f"{strides if strides is not None else 'C-contiguous'}, from "
                                f"{ptr:#x}) span bytes [{lo:#x}, {hi:#x}), outside the 64-bit "
                                f"address space: no memory holds them")
    return meta


def _stream_entry(stream, name: Optional[str], pos: int) -> int:
    """The CUstream handle of an interface's ``stream`` entry (not None): an integer > 0
    below 2**64; an ArgumentError for 0 (which version 3 of the protocol disallows: it
    would not say which default stream) or anything else."""
    got = _ints((stream,))
    if got is None or not 0 < got[0] < ADDRESS_SPACE:
        what = ("is 0, which the protocol (version 3) disallows as ambiguous: give 1 for "
                "the legacy default stream, 2 for the per-thread default stream" if
                got is not None and got[0] == 0 else "is not a CUDA stream: the protocol "
                "(version 3) wants None (nothing to wait for), 1 (the legacy default "
                "stream), 2 (the per-thread default stream) or a CUstream handle (an "
                "integer > 2)")
        raise _bad_device_array(name, pos, f"the 'stream' entry {stream!r:.40} of its "
                                f"__cuda_array_interface__ {what}")
    return got[0]


# ---------------------------------------------------------------------------------------
# host arrays that are not numpy arrays: torch tensors, DLPack, the array interface


def _is_torch_tensor(a) -> bool:
    """Whether ``a`` is a torch tensor, a subclass's defined anywhere included (one of
    ``__main__`` went through DLPack, unchecked, and raised under a dispatch mode)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(a, torch.Tensor)


def as_host_array(a, label: str, written: bool = False):
    """``a`` as a numpy array sharing its memory (nothing is copied), or ``a`` itself
    when it is not an array the host runtimes take (the checks then say what is
    expected).

    * a ``numpy.ndarray``: itself;
    * a torch tensor on the CPU: ``a.numpy()``, a view of the tensor's storage (strides
      included); its extent is later checked against the storage
      (:func:`check_memory`).  A tensor that requires grad is refused, as
      ``Tensor.numpy()`` refuses it (pass ``x.detach()``, or use
      :func:`tecomp.torch.op`, which is differentiable).  A tensor with torch's lazy
      negation or conjugation bit (``torch._neg_view(x)``, ``z.conj().imag``: its memory
      holds the negated values) is resolved into a copy when it is read only, and
      refused when the kernel writes it (``written``).  A tensor that is not dense
      memory (sparse, quantized, nested, MKL-DNN, a ``torch.func`` transform's wrapper
      such as vmap's BatchedTensor) is refused;
    * a numpy masked array (``numpy.ma``) that masks no element: itself (its data); one
      that masks any is refused (:func:`_check_unmasked`): a kernel ignores masks;
    * anything else with ``__dlpack__`` on the CPU: ``np.from_dlpack(a)``: the producer
      owns and describes the memory (DLPack's contract), and a producer that exports it
      read-only (DLPack 1.0) gets a read-only array;
    * anything with ``__array_interface__``: ``np.asarray(a)``.

    ``label`` names the parameter in the ArgumentError raised for an array on another
    device, of a dtype numpy has no type for, or one its producer refuses to export.  A
    torch bfloat16 tensor becomes an ``ml_dtypes.bfloat16`` view of its memory.
    """
    if type(a) is np.ndarray or isinstance(a, np.generic):
        return a  # a numpy scalar speaks DLPack too, but it is no array: the checks say so
    try:
        if _is_torch_tensor(a):
            a = _plain_tensor(a, label, written)
            if not a.is_cpu:
                return a  # a device tensor: a GPU runtime takes it, a CPU one refuses it
            if str(a.dtype) == "torch.bfloat16":
                # numpy has no bfloat16: the same memory as int16, seen as ml_dtypes' type
                import torch

                return a.view(torch.int16).numpy().view(_dt.numpy_dtype("bfloat16"))
            return a.numpy()
        if isinstance(a, np.ndarray):
            if "numpy.ma" in sys.modules and isinstance(a, sys.modules["numpy.ma"].MaskedArray):
                _check_unmasked(a, label, written)
            return a
        if hasattr(a, "__dlpack__"):
            dev = getattr(a, "__dlpack_device__", None)
            if callable(dev) and int(dev()[0]) != 1:  # kDLCPU
                return a
            return np.from_dlpack(a)
        if hasattr(a, "__array_interface__"):
            return np.asarray(a)
    except ArgumentError:
        raise
    except Exception as e:  # noqa: BLE001 -- the producer's protocol methods are the user's code
        raise ArgumentError(
            f"{label}: cannot view the {type(a).__module__}.{type(a).__qualname__} argument as "
            f"an array without copying ({type(e).__name__}: {str(e)[:300]}); tecomp takes numpy "
            f"arrays, torch CPU tensors and CPU arrays with __dlpack__ or __array_interface__ "
            f"of the dtypes numpy has (bfloat16 as torch tensors or ml_dtypes arrays): convert "
            f"it, e.g. x.float()") from None
    return a


def _check_unmasked(a, label: str, written: bool) -> None:
    """An ArgumentError where the numpy masked array ``a`` masks any element: a kernel
    reads and writes the data under the mask, not the mask (an input's masked elements
    would be read as values; an output's results under its mask would stay hidden).  A
    masked array that masks nothing is its data."""
    ma = sys.modules["numpy.ma"]
    if not ma.is_masked(a):
        return
    count = int(np.count_nonzero(ma.getmaskarray(a)))
    if written:
        fix = ("pass a plain array (out = np.empty(shape, dtype) or np.ma.getdata(x)) and "
               "mask the result afterwards: np.ma.masked_array(out, mask=...)")
        what = "writes its data, and the results under the mask would stay hidden"
    else:
        fix = ("pass x.filled(value) (the value to use in place of the masked elements), "
               "or np.ma.getdata(x) to read the data under the mask as it is")
        what = "reads its data, masked elements included, as values"
    raise ArgumentError(
        f"{label}: the numpy masked array masks {count} of its {a.size} elements, and tecomp "
        f"ignores masks (the kernel {what}): {fix}")


def _plain_tensor(t, label: str, written: bool):
    """The torch tensor ``t`` as dense memory with the values it shows: itself, or a
    resolved copy of an input with the negation or conjugation bit; an ArgumentError for
    anything a kernel cannot read or write in place."""
    _functorch = _functorch_module()
    if _functorch.is_functorch_wrapped_tensor(t):
        kind = "vmap's BatchedTensor" if _functorch.is_batchedtensor(t) else \
            "a wrapper of torch.func.grad, jvp or functionalize"
        raise ArgumentError(
            f"{label}: the torch tensor is a torch.func transform's tensor ({kind}), which "
            f"has no memory of its own for tecomp to read or write in place: call the kernel "
            f"outside torch.func transforms (e.g. loop over the batch and torch.stack the "
            f"results)")
    if jit_tracing():
        raise ArgumentError(
            f"{label}: a torch tensor passed while torch.jit.trace records, and a trace "
            f"records torch ops only: the kernel's call would be missing from the trace "
            f"(its outputs left as torch.empty's memory when the traced model runs): wrap "
            f"the computation with tecomp.torch.op(...), whose calls a trace records as "
            f"torch.ops.tecomp ops, or call the kernel outside the trace")
    if t.requires_grad:
        raise ArgumentError(
            f"{label}: the torch tensor requires grad, and tecomp reads and writes its "
            f"memory directly, outside autograd: pass x.detach(), or wrap the "
            f"computation with tecomp.torch.op(...) to make it differentiable")
    if forward_ad_level() >= 0 and dual_tangent(t) is not None:
        what = ("the kernel writes its values in place, and its tangent would not follow "
                "them" if written else "tecomp reads its memory outside autograd, and the "
                "result would have no tangent")
        raise ArgumentError(
            f"{label}: the torch tensor is a forward-mode AD dual tensor "
            f"(torch.autograd.forward_ad.make_dual), and {what}: pass its primal, "
            f"torch.autograd.forward_ad.unpack_dual(x).primal, to compute values only, or "
            f"differentiate in reverse mode (tecomp.torch.op(...) with x.requires_grad_())")
    layout = str(t.layout)
    if layout != "torch.strided" or t.is_quantized or t.is_nested:
        what, fix = (("quantized", "x.dequantize()") if t.is_quantized else
                     ("nested", "x.to_padded_tensor(0.0)") if t.is_nested else
                     (f"of layout {layout}", "x.to_dense()"))
        raise ArgumentError(
            f"{label}: the torch tensor is {what}; tecomp reads and writes dense (strided) "
            f"memory: pass {fix}")
    if t.is_meta:
        raise ArgumentError(
            f"{label}: the torch tensor is on the meta device, which holds no data: pass a "
            f"tensor with memory (e.g. torch.empty(shape) on the CPU)")
    if t._is_zerotensor():
        # torch._efficientzerotensor (a zero tangent of forward-mode AD and torch.func):
        # its elements read as 0 but it has no memory (data pointer 0)
        if written:
            raise ArgumentError(
                f"{label}: the torch tensor is a ZeroTensor (torch._efficientzerotensor, "
                f"a zero gradient or tangent of autograd's), which has no memory for the "
                f"kernel to write: pass a tensor with memory, e.g. out = torch.zeros_like(x) "
                f"or torch.empty(shape), and read the result from it")
        t = sys.modules["torch"].zeros(t.shape, dtype=t.dtype, device=t.device)
    _check_inside_storage(t, label, written)
    neg, conj = t.is_neg(), t.is_conj()
    if neg or conj:
        bit, views, held, fix = (("negation", "torch._neg_view(x) or z.conj().imag", "negated",
                                  "resolve_neg") if neg else
                                 ("conjugation", "z.conj()", "conjugated", "resolve_conj"))
        if written:
            raise ArgumentError(
                f"{label}: the torch tensor has the lazy {bit} bit set (a view such as "
                f"{views}, whose memory holds the {held} values), and the kernel writes it: "
                f"written in place, it would hold the wrong sign; pass a tensor without the "
                f"bit, e.g. out = x.{fix}() or x.clone(), and read the result from it")
        t = t.resolve_conj().resolve_neg()  # a copy with the values the view shows
    if type(t).__torch_dispatch__ is _plain_dispatch():
        # a subclass that only adds Python behaviour (nn.Parameter, one of __torch_function__):
        # its own memory, seen as a plain tensor (under a dispatch mode, such as the one
        # torch.compile's AOT runtime runs a graph in, Tensor.numpy() of a subclass raised)
        t = t.as_subclass(sys.modules["torch"].Tensor)
    return t


def _check_inside_storage(t, label: str, written: bool) -> None:
    """An ArgumentError unless the storage of the torch tensor ``t`` holds all of its
    elements.  torch does not keep a tensor inside its storage: ``untyped_storage().
    resize_()`` (FSDP's way of freeing a parameter's memory) shrinks the memory under
    tensors whose shapes stay, and ``Tensor.numpy()`` of a tensor whose storage is
    empty gives an array of memory numpy allocates (a kernel's output written there is
    lost)."""
    if t.numel() == 0:
        return
    try:
        have = t.untyped_storage().nbytes()
        if t.is_contiguous():   # (its elements are numel() consecutive ones)
            span = t.storage_offset() + t.numel() - 1
        else:
            span = t.storage_offset() + sum((d - 1) * st for d, st in zip(t.shape, t.stride()))
        need = (span + 1) * t.element_size()
    except Exception:  # noqa: BLE001 -- a subclass without storage: refused further on
        return
    if need > have:
        raise ArgumentError(
            f"{label}: the torch tensor's elements reach byte {need} of its storage, which "
            f"holds {have} bytes: the storage was shrunk (untyped_storage().resize_(), as "
            f"FSDP frees a parameter's memory) after the tensor was made, and the kernel "
            f"would {'write' if written else 'read'} past it; resize the storage back to "
            f"at least {need} bytes before the call, or pass a tensor that holds its "
            f"elements")


_FUNCTORCH = None


def _functorch_module():
    """``torch._C._functorch`` (imported once: an import statement a call cost microseconds)."""
    global _FUNCTORCH
    if _FUNCTORCH is None:
        from torch._C import _functorch

        _FUNCTORCH = _functorch
    return _FUNCTORCH


def forward_ad_level() -> int:
    """The forward-mode AD level in force (``torch.autograd.forward_ad.dual_level``), -1
    outside one (where no tensor has a tangent) or without torch."""
    fw = sys.modules.get("torch.autograd.forward_ad")
    return -1 if fw is None else fw._current_level


def jit_tracing() -> bool:
    """Whether ``torch.jit.trace`` records now (False without torch)."""
    torch = sys.modules.get("torch")
    return torch is not None and torch._C._get_tracing_state() is not None


def dual_tangent(t):
    """The tangent of the torch tensor ``t`` at the forward-mode AD level in force, or
    None."""
    return sys.modules["torch.autograd.forward_ad"].unpack_dual(t).tangent


def _plain_dispatch():
    """torch.Tensor's own ``__torch_dispatch__`` (a subclass with another one wraps or
    fakes its memory)."""
    return sys.modules["torch"].Tensor.__torch_dispatch__


# ---------------------------------------------------------------------------------------
# how parameters, arrays and values are named in messages


def param_label(name: str, pos: int) -> str:
    """``parameter A (argument 1)``: ``pos`` is the 0-based position in the parameters."""
    return f"parameter {name} (argument {pos + 1})"


def shape_text(shape) -> str:
    """A shape as Python prints a tuple, with the IR's expressions: ``(n*2, 4)``, ``(8,)``."""
    return "(" + ", ".join(to_str(x) for x in shape) + ("," if len(shape) == 1 else "") + ")"


def describe(a) -> str:
    """What the user passed, briefly: ``a list``, ``a 1-d float64 array of shape (3,)``,
    ``str 'x'``."""
    if isinstance(a, np.ndarray):
        return f"a {a.ndim}-d {a.dtype} array of shape {a.shape}"
    if isinstance(a, (list, tuple)):
        return f"a {type(a).__name__}"
    try:
        text = repr(a)
    except Exception:  # noqa: BLE001 -- the user's __repr__
        text = "(whose repr() fails)"
    return f"{type(a).__name__} {text}"[:120]


def dtype_name(dt: np.dtype) -> str:
    if dt.kind in "biuf" and not dt.isnative:
        return f"{dt.name} with non-native byte order ({dt.str})"
    return dt.name


def count_error(func_name: str, params: Sequence, nargs: int) -> ArgumentError:
    n = len(params)
    names = ", ".join(p.name for p in params)
    return ArgumentError(f"{func_name} expects {n} argument{'s' if n != 1 else ''} ({names}), "
                         f"got {nargs}")


_ARRAY_KIND = {False: "an array (numpy.ndarray, torch CPU tensor, __dlpack__ or "
                      "__array_interface__)",
               None: "an array (numpy.ndarray, torch tensor, __dlpack__ or "
                     "__array_interface__) or a device array (__cuda_array_interface__)",
               True: "a device array (__cuda_array_interface__)"}


def type_error(spec: "BufferSpec", a, device: Optional[bool] = False) -> ArgumentError:
    want = spec.np_dtype.name
    if device is True:
        fix = (f"pass a device array of {want} (CuPy, PyTorch, pycuda's GPUArray; tecomp does "
               f"not copy host arrays for this call)")
    else:
        fix = f"convert with np.asarray(..., dtype=np.{want})"
    got = describe(a)
    if device is True and (isinstance(a, np.ndarray) or hasattr(a, "__array_interface__")
                           or getattr(getattr(a, "device", None), "type", None) == "cpu"):
        got += " in host (CPU) memory"
    return ArgumentError(f"{spec.label} expects {_ARRAY_KIND[device]} of {want} with shape "
                         f"{spec.shape_text}, got {got}: {fix}")


def _library_of(a) -> str:
    """The library whose array ``a`` is: "torch" for a torch tensor or a numpy view of one
    (what the checks see of a torch CPU tensor: its ``base`` chain leads to the tensor),
    else the top-level module of ``a``'s type ("numpy", "cupy", ...)."""
    for _ in range(4):
        if _is_torch_tensor(a):
            return "torch"
        if not isinstance(a, np.ndarray) or a.base is None:
            break
        a = a.base
    return type(a).__module__.split(".")[0] if a is not None else "numpy"


def dtype_error(spec: "BufferSpec", got: np.dtype, a=None) -> ArgumentError:
    """The argument ``a`` (of dtype ``got``) of the wrong dtype; the fix in the words of
    the library it comes from (``.to(torch.float32)`` for a torch tensor, ``.astype`` for
    numpy and CuPy arrays)."""
    want = spec.np_dtype.name
    lib = _library_of(a)
    name = spec.name.lower()
    fix = (f"{name}.to(torch.{want})" if lib == "torch" else
           f"{name}.astype(cupy.{want})" if lib == "cupy" else f"{name}.astype(np.{want})")
    return ArgumentError(f"{spec.label} expects {want}, got {dtype_name(got)}: convert with "
                         f"{fix}")


def ndim_error(spec: "BufferSpec", shape) -> ArgumentError:
    return ArgumentError(f"{spec.label} expects a {spec.ndim}-d array of shape {spec.shape_text}, "
                         f"got a {len(shape)}-d array of shape {tuple(shape)}")


def const_dim_error(spec: "BufferSpec", shape) -> ArgumentError:
    """The first constant extent of ``spec`` that ``shape`` does not match."""
    for d, want in spec.consts:
        if shape[d] != want:
            return ArgumentError(
                f"{spec.label} expects {spec.name}.shape[{d}] = {want}, got {shape[d]} (expected "
                f"shape {spec.shape_text}, got {tuple(shape)})")
    raise ValueError("const_dim_error: the shape matches every constant extent")


def read_only_error(spec: "BufferSpec", func_name: str, on_device: bool = False,
                    dlpack: bool = False) -> ArgumentError:
    why = ("its __cuda_array_interface__ marks it read-only" if on_device else
           "its DLPack producer exported it read-only" if dlpack else
           "a broadcast view or an array with flags.writeable=False")
    return ArgumentError(f"{spec.label} is written by {func_name}, but the array is read-only "
                         f"({why}): pass a writeable array, e.g. a copy")


def unaligned_error(spec: "BufferSpec") -> ArgumentError:
    return ArgumentError(
        f"{spec.label}: the array is not aligned to its {spec.itemsize}-byte elements (an "
        f"unaligned view of a byte buffer); pass np.ascontiguousarray(...) or "
        f"np.require(..., requirements='A')")


def stride_multiple_error(spec: "BufferSpec", d: int, stride: int) -> ArgumentError:
    return ArgumentError(
        f"{spec.label}: the stride of dimension {d} is {stride} bytes, not a multiple of the "
        f"{spec.itemsize}-byte {spec.np_dtype.name} elements (a view of a byte buffer); pass "
        f"np.ascontiguousarray(...)")


def element_strides(spec: "BufferSpec", byte_strides) -> List[int]:
    """Byte strides (numpy's) as element strides; ArgumentError for one that is not a
    multiple of the element size."""
    item = spec.itemsize
    out = []
    for d, s in enumerate(byte_strides):
        q, r = divmod(s, item)
        if r:
            raise stride_multiple_error(spec, d, s)
        out.append(q)
    return out


def check_scalar(v, var: Var, label: str):
    """Check the value ``v`` of the scalar parameter ``var`` (named ``label``); return it
    as a Python bool, int or float.  Integers must fit the dtype (any object with
    ``__index__`` is one, as for Python's own integer arguments); floats must be finite
    where the dtype is, unless they are already infinite or NaN; 0-d arrays count as
    their element (a numpy masked one whose element is masked is refused: it has no
    value); bools are not numbers."""
    dt = var.dtype
    if isinstance(v, np.ndarray) and v.ndim == 0:
        if "numpy.ma" in sys.modules and isinstance(v, sys.modules["numpy.ma"].MaskedArray) \
                and sys.modules["numpy.ma"].is_masked(v):
            # (its element is numpy.ma.masked, a float64 whatever the array's dtype: the
            # message names the array the user passed)
            want = "a bool" if dt == "bool" else "an integer" if _dt.is_int(dt) else "a number"
            raise ArgumentError(
                f"{label} expects {want} ({dt}), got a 0-d {dtype_name(v.dtype)} masked "
                f"array whose element is masked (it has no value, and tecomp ignores masks): "
                f"pass {want}, or x.filled(value) for the value to use in its place")
        v = v[()]
    if dt == "bool":
        if isinstance(v, (bool, np.bool_)):
            return bool(v)
        raise ArgumentError(f"{label} expects a bool, got {describe(v)}")
    if isinstance(v, (bool, np.bool_)):
        raise ArgumentError(f"{label} expects {'an integer' if _dt.is_int(dt) else 'a number'} "
                            f"({dt}), got {describe(v)}")
    if _dt.is_int(dt):
        if not hasattr(type(v), "__index__") or \
                isinstance(v, numbers.Number) and not isinstance(v, numbers.Integral):
            raise ArgumentError(f"{label} expects an integer ({dt}), got {describe(v)}")
        try:
            iv = operator.index(v)
        except Exception as e:  # noqa: BLE001 -- the user's __index__ failed
            raise ArgumentError(
                f"{label} expects an integer ({dt}), got {describe(v)}, whose __index__ "
                f"raised {type(e).__name__}: {str(e)[:100]}") from None
        lo, hi = int_range(dt)
        if not lo <= iv <= hi:
            raise ArgumentError(f"{label} = {_short_int(iv)} does not fit {dt} [{lo}, {hi}]")
        return iv
    if _dt.is_float(dt):
        if not isinstance(v, numbers.Real):
            raise ArgumentError(f"{label} expects a number ({dt}), got {describe(v)}")
        try:
            fv = float(v)
        except (OverflowError, ValueError, TypeError) as e:
            raise ArgumentError(f"{label} = {_short_int(v)} does not fit {dt} ({e})") from None
        top = FLOAT_MAX.get(dt)
        if top is not None and math.isfinite(fv) and abs(fv) > top \
                and not math.isfinite(_rounded(fv, dt)):
            raise ArgumentError(
                f"{label} = {fv!r} does not fit {dt} (its largest finite value is "
                f"{top:.8g}): it would become infinite; pass inf explicitly if that is what "
                f"you mean")
        return fv
    raise ArgumentError(f"{label} has the dtype {dt}, which a scalar parameter cannot have; "
                        f"use a bool, integer or float dtype")


def _short_int(v) -> str:
    """An integer for a message: its digits, or its size when they are too many."""
    try:
        if isinstance(v, numbers.Integral) and abs(int(v)).bit_length() > 200:
            return f"an integer of {abs(int(v)).bit_length()} bits"
    except Exception:  # noqa: BLE001
        pass
    return str(v)[:80]


#: the largest finite value of each float dtype a scalar parameter may have
FLOAT_MAX = {"float16": 65504.0, "bfloat16": 3.3895313892515355e38,
             "float32": 3.4028234663852886e38, "float64": 1.7976931348623157e308}


def _rounded(fv: float, dt: str) -> float:
    """``fv`` rounded to the float dtype ``dt`` (to nearest, ties to even), as a float."""
    with np.errstate(over="ignore"):
        return float(np.asarray(fv, dtype=_dt.numpy_dtype(dt)))


# ---------------------------------------------------------------------------------------
# evaluating shape expressions on the host: tecomp.ir.host_eval (eval_host_expr,
# compile_shape_expr), shared with the interpreter


def int_range(dtype: str) -> Tuple[int, int]:
    """The smallest and largest value of the integer dtype."""
    return _dt.int_limits(dtype)


# ---------------------------------------------------------------------------------------
# the checker


class BufferSpec:
    """What the checks know about one buffer parameter (built once per function)."""

    __slots__ = ("buffer", "pos", "index", "name", "label", "np_dtype", "itemsize", "shape",
                 "ndim", "shape_text", "consts", "const_shape", "binds", "written", "strides",
                 "strides_text")

    def __init__(self, buffer: Buffer, pos: int, index: int, written: bool):
        self.buffer = buffer
        self.pos = pos      # among the parameters
        self.index = index  # among the buffer parameters
        self.name = buffer.name
        self.label = param_label(buffer.name, pos)
        self.np_dtype = _dt.numpy_dtype(buffer.dtype)
        self.itemsize = self.np_dtype.itemsize
        self.shape = tuple(x if isinstance(x, Expr) else as_index(x) for x in buffer.shape)
        self.ndim = len(self.shape)
        self.shape_text = shape_text(self.shape)
        #: (dim, extent) of the constant extents
        self.consts = [(d, int(x.value)) for d, x in enumerate(self.shape)
                       if isinstance(x, Const)]
        self.const_shape = tuple(w for _, w in self.consts) \
            if len(self.consts) == self.ndim else None
        #: (dim, var, largest value) of the dimensions that bind a variable
        self.binds: List[Tuple[int, Var, Optional[int]]] = []
        self.written = written
        self.strides = None if buffer.strides is None else \
            tuple(x if isinstance(x, Expr) else as_index(x) for x in buffer.strides)
        self.strides_text = None if self.strides is None else shape_text(self.strides)


class ArgChecker:
    """The checks of one function's arguments (see the module docstring).

    ``written``: the Buffers the function stores to (their arrays must be writable).
    ``device``: None accepts numpy and device arrays, False only numpy arrays, True only
    device arrays.  ``aligned``: also require every numpy array to be aligned to its
    elements (the CPU kernel reads them in place).  ``exact_strides``: a buffer with
    explicit IR strides must get an array with exactly those strides (the CUDA kernels
    use them as given; the CPU runtime instead picks its strided variant).
    ``param_checks``: the function's :class:`~tecomp.ir.stmt.ParamCheck` conditions
    (:func:`param_checks_of`).  ``in_place``: the ``(input, output)`` Buffers that may
    be passed the same array (:func:`in_place_of`); any other overlap of a written
    array with itself or another argument is refused.
    """

    def __init__(self, params: Sequence, *, func_name: str = "the function",
                 written: Iterable[Buffer] = (), device: Optional[bool] = None,
                 aligned: bool = False, exact_strides: bool = True, param_checks: Sequence = (),
                 in_place: Iterable[Tuple[Buffer, Buffer]] = ()):
        self.params = params = tuple(params)
        #: (ParamCheck, its value as a function of env, the variables it needs)
        self.param_checks = [(pc, compile_shape_expr(pc.expr), tuple(free_vars(pc.expr)))
                             for pc in param_checks]
        self.func_name = func_name
        self.device = device
        self.aligned = aligned
        written = set(written)
        #: (pos, var, label) of the scalar parameters
        self.scalars = [(i, p, param_label(p.name, i)) for i, p in enumerate(params)
                        if isinstance(p, Var)]
        self.buffers = [BufferSpec(p, i, k, p in written) for k, (i, p) in enumerate(
            (i, p) for i, p in enumerate(params) if isinstance(p, Buffer))]
        #: the positions of the arguments the kernels write
        self.written_positions = tuple(spec.pos for spec in self.buffers if spec.written)
        #: per written buffer: the other buffers its array must not overlap (each pair once)
        index = {spec.buffer: spec for spec in self.buffers}
        self.overlap_pairs = [(o, [q for q in self.buffers if q is not o and
                                   not (q.written and q.index < o.index)])
                              for o in self.buffers if o.written]
        #: (input index, output index) of the buffers that may be one array
        self.in_place = frozenset((index[i].index, index[o].index) for i, o in in_place
                                  if i in index and o in index)
        #: where each variable gets its value, for messages
        self.origin: Dict[Var, str] = {v: f"argument {i + 1} ({v.name})"
                                       for i, v, _ in self.scalars}
        bound_at: Dict[Var, Tuple[BufferSpec, int]] = {}
        for spec in self.buffers:
            for d, x in enumerate(spec.shape):
                if isinstance(x, Var) and x not in self.origin:
                    bound_at[x] = (spec, d)
                    self.origin[x] = f"{spec.name}.shape[{d}]"
                    hi = int_range(x.dtype)[1] if _dt.is_int(x.dtype) else None
                    spec.binds.append((d, x, hi))
        #: per buffer with checked strides: (spec, [(dim, var)] of the strides binding a
        #: variable); a variable only a stride gives is bound from the first such stride
        self.stride_binds: List[Tuple[BufferSpec, List[Tuple[int, Var]]]] = []
        if exact_strides:
            for spec in self.buffers:
                if spec.strides is None:
                    continue
                binds = []
                for k, x in enumerate(spec.strides):
                    if isinstance(x, Var) and x not in self.origin:
                        bound_at[x] = (spec, -1 - k)
                        self.origin[x] = f"{spec.name}.strides[{k}]"
                        binds.append((k, x))
                self.stride_binds.append((spec, binds))
        #: checks that need every variable: (spec, kind, dim, var or None, fn, expr)
        self.deferred = []
        for spec in self.buffers:
            items = [("shape", d, x) for d, x in enumerate(spec.shape)]
            if exact_strides and spec.strides is not None:
                items += [("strides", k, x) for k, x in enumerate(spec.strides)]
            for kind, d, x in items:
                if isinstance(x, Const) and kind == "shape":
                    continue  # checked with the array
                if isinstance(x, Var):
                    if bound_at.get(x) != (spec, d if kind == "shape" else -1 - d):
                        self.deferred.append((spec, kind, d, x, None, x))
                else:
                    self.deferred.append((spec, kind, d, None, compile_shape_expr(x), x))

    def __repr__(self):
        return f"<ArgChecker {self.func_name}({', '.join(p.name for p in self.params)})>"

    def check(self, args: Sequence, metas: Optional[Sequence] = None) -> Dict[Var, Any]:
        """Check ``args``; return the value of every scalar parameter and every variable
        of the parameters' shapes (and checked strides).  ``metas``: each argument's
        :func:`array_meta`, when the caller has them (one description per array a call)."""
        return self.check_with_flags(args, metas)[0]

    def check_overlap(self, args: Sequence, metas: Optional[Sequence] = None) -> bool:
        """Refuse a written array whose elements overlap each other, or that overlaps
        another argument's memory, except the same array for an ``in_place`` pair;
        return whether there is such a pair.  (Inputs may overlap each other: they are
        only read.)  ``args`` have passed the other checks."""
        aliased = False
        for o, others in self.overlap_pairs:
            a = args[o.pos]
            if isinstance(a, np.ndarray):
                ma = None
                if a.size == 0:
                    continue
                if a.size > 1 and not (a.flags.c_contiguous or a.flags.f_contiguous):
                    found = self_overlap(a.shape, a.strides, a.itemsize)
                    if found is not None:
                        raise self_overlap_error(self.func_name, o, a.shape, a.strides, found)
            else:
                ma = metas[o.pos] if metas is not None else array_meta(a)
                if not _nbytes_meta(ma):
                    continue
                found = self_overlap(ma.shape, ma.strides, ma.dtype.itemsize)
                if found is not None:
                    raise self_overlap_error(self.func_name, o, ma.shape, ma.strides, found)
            for q in others:
                b = args[q.pos]
                if isinstance(b, np.ndarray):
                    if b.size == 0:
                        continue
                    mb = None
                else:
                    mb = metas[q.pos] if metas is not None else array_meta(b)
                    if not _nbytes_meta(mb):
                        continue
                how = _overlap(a, b, ma, mb)
                if how is None:
                    continue
                if how == "same" and (q.index, o.index) in self.in_place:
                    aliased = True
                    continue
                x, y = (o, q) if o.pos < q.pos else (q, o)
                raise overlap_error(self.func_name, x, y, how)
        return aliased

    def mark_written(self, args: Sequence) -> None:
        """Tell torch's autograd that the torch tensors among ``args`` passed as outputs
        were written in place (their version counters go up, as an in-place torch op's
        do): a tensor that autograd saved for a backward and a kernel then overwrote makes
        that backward raise, as after ``x.copy_(...)``, instead of silently computing the
        gradient from the new values."""
        torch = sys.modules.get("torch")
        if torch is None:
            return
        ts = [a for a in (args[p] for p in self.written_positions) if isinstance(a, torch.Tensor)]
        if ts:
            torch._C._increment_version(ts)

    def host_arrays(self, args: Sequence) -> Sequence:
        """``args`` with every buffer argument that is a host array but not a
        ``numpy.ndarray`` (a torch CPU tensor, ``__dlpack__``, ``__array_interface__``)
        replaced by a numpy view of its memory (:func:`as_host_array`; nothing is
        copied).  Returns ``args`` itself when there is nothing to replace.  The caller
        keeps the result alive while the kernel runs."""
        if len(args) != len(self.params):
            raise count_error(self.func_name, self.params, len(args))
        out = None
        for spec in self.buffers:
            a = args[spec.pos]
            if type(a) is np.ndarray:
                continue
            h = as_host_array(a, spec.label, spec.written)
            if h is not a:
                if out is None:
                    out = list(args)
                out[spec.pos] = h
        return args if out is None else out

    def check_with_flags(self, args: Sequence,
                         metas: Optional[Sequence] = None) -> Tuple[Dict[Var, Any], list, bool]:
        """:meth:`check`, also returning the ``flags`` of each buffer's numpy array (None
        for a device array, or where neither writability nor alignment is checked), in
        the order of the buffer parameters, and whether an input and an output are one
        array (an ``in_place`` pair: the kernel must not assume they are apart)."""
        if len(args) != len(self.params):
            raise count_error(self.func_name, self.params, len(args))
        env: Dict[Var, Any] = {}
        for pos, var, label in self.scalars:
            env[var] = check_scalar(args[pos], var, label)
        device = self.device
        aligned = self.aligned
        shapes = []           # per buffer: its argument's shape
        all_flags = []        # per buffer: its numpy array's flags, or None
        strides = None        # spec -> byte strides (None: a C-contiguous device array)
        for spec in self.buffers:
            a = args[spec.pos]
            if device is not True and isinstance(a, np.ndarray):
                meta = None
                dt = a.dtype
                shape = a.shape
            else:
                meta = None if device is False else (
                    metas[spec.pos] if metas is not None else array_meta(a, spec.name, spec.pos))
                if meta is None or (device is True and not meta.on_device):
                    raise type_error(spec, a, device)
                dt = meta.dtype
                shape = meta.shape
            if dt != spec.np_dtype:
                raise dtype_error(spec, dt, a)
            if len(shape) != spec.ndim:
                raise ndim_error(spec, shape)
            if spec.const_shape is not None:
                if shape != spec.const_shape:
                    raise const_dim_error(spec, shape)
            else:
                for d, want in spec.consts:
                    if shape[d] != want:
                        raise const_dim_error(spec, shape)
                for d, var, hi in spec.binds:
                    n = shape[d]
                    if hi is not None and n > hi:
                        raise ArgumentError(
                            f"{spec.name}.shape[{d}] = {n} does not fit the {var.dtype} variable "
                            f"{var.name}: declare it as tc.var({var.name!r}, 'int64')")
                    env[var] = n
            shapes.append(shape)
            flags = None
            if meta is None and a.base is not None:
                check_memory(spec, a)
            if meta is None:
                if spec.written or aligned:
                    flags = a.flags
                    if spec.written and not flags.writeable:
                        raise read_only_error(spec, self.func_name, dlpack=is_from_dlpack(a))
                    if aligned and not flags.aligned:
                        element_strides(spec, a.strides)
                        raise unaligned_error(spec)
                if spec.strides is not None:
                    if strides is None:
                        strides = {}
                    strides[spec] = a.strides
            else:
                if spec.written and not meta.writable:
                    raise read_only_error(spec, self.func_name, True)
                if spec.strides is not None:
                    if strides is None:
                        strides = {}
                    strides[spec] = meta.strides
            all_flags.append(flags)
        elem = self._bind_strides(env, shapes, strides) if self.stride_binds else None
        if self.param_checks:
            self._check_params(env)
        if self.deferred:
            self._check_deferred(env, shapes, elem)
        aliased = self.check_overlap(args, metas) if self.overlap_pairs else False
        return env, all_flags, aliased

    def _bind_strides(self, env, shapes, strides):
        """Element strides of the buffers with checked strides; bind the variables only
        strides give."""
        elem = {}
        for spec, binds in self.stride_binds:
            st = strides[spec]
            if st is None:  # a C-contiguous device array
                acc, out = 1, []
                for n in reversed(shapes[spec.index]):
                    out.append(acc)
                    acc *= n
                elem[spec] = out[::-1]
            else:
                elem[spec] = element_strides(spec, st)
            for k, var in binds:
                env[var] = elem[spec][k]
        return elem

    def _check_params(self, env) -> None:
        for pc, fn, needs in self.param_checks:
            if not all(v in env for v in needs):
                continue  # a variable no argument gives: the build reports it
            value = fn(env)
            if not pc.holds(value):
                raise ArgumentError(pc.message(value, env, self.params))

    def _check_deferred(self, env, shapes, elem) -> None:
        for spec, kind, d, var, fn, expr in self.deferred:
            if kind == "shape":
                actual = shapes[spec.index][d]
            else:
                actual = elem[spec][d]
            if var is not None:
                want = env[var]
                if actual != want:
                    raise self._mismatch(spec, kind, d, actual, var, want, None)
                continue
            try:
                want = fn(env)
            except KeyError:
                want = None
            if actual != want:
                raise self._mismatch(spec, kind, d, actual, None, want, expr, env)

    def _mismatch(self, spec, kind, d, actual, var, want, expr, env=None) -> ArgumentError:
        if kind == "shape":
            what, unit, expected = f"{spec.name}.shape[{d}]", "", f"shape {spec.shape_text}"
        else:
            what, unit = f"{spec.name}.strides[{d}]", " elements"
            expected = f"strides {spec.strides_text} in elements"
        if var is not None:
            return ArgumentError(f"{var.name} = {want} from {self.origin[var]} but {what} = "
                                 f"{actual}{unit} ({spec.label} expects {expected})")
        missing = [v for v in free_vars(expr) if v not in env]
        if missing:
            return ArgumentError(
                f"{spec.label}: {what} is `{to_str(expr)}`, but no argument gives the value of "
                f"{missing[0].name}: pass {missing[0].name} as a scalar parameter")
        if isinstance(expr, Const):
            return ArgumentError(f"{spec.label} expects {what} = {want}, got {actual} "
                                 f"(expected {expected})")
        vals = ", ".join(f"{v.name} = {env[v]} from {self.origin[v]}" for v in free_vars(expr))
        return ArgumentError(f"{what} = {actual}{unit} but {spec.label} expects {to_str(expr)} = "
                             f"{want}" + (f" ({vals})" if vals else ""))


def param_checks_of(func) -> tuple:
    """The :class:`~tecomp.ir.stmt.ParamCheck` conditions lowering recorded for the
    PrimFunc ``func`` (none for a hand-made function)."""
    return tuple(func.attrs.get("param_checks", ()))


def bind_and_check(params: Sequence, args: Sequence, *, func_name: str = "the function",
                   written: Iterable[Buffer] = (), device: Optional[bool] = None,
                   aligned: bool = False, exact_strides: bool = True,
                   param_checks: Sequence = ()) -> Dict[Var, Any]:
    """Check ``args`` against ``params`` (a PrimFunc's Buffers and scalar Vars) and return
    the values of the variables: ``ArgChecker(params, ...).check(args)``.  A runtime that
    calls a function repeatedly keeps its :class:`ArgChecker`."""
    return ArgChecker(params, func_name=func_name, written=written, device=device,
                      aligned=aligned, exact_strides=exact_strides,
                      param_checks=param_checks).check(args)


def _memory_of(owner) -> Optional[Tuple[int, int]]:
    """[lo, hi) of the memory ``owner`` (the end of an array's ``base`` chain) holds, or
    None when it cannot tell (a raw pointer handed over by ``__array_interface__`` or a
    DLPack capsule)."""
    if isinstance(owner, np.ndarray):
        lo = owner.__array_interface__["data"][0]
        return lo, lo + owner.nbytes
    try:
        view = np.frombuffer(owner, dtype=np.uint8)  # bytes, bytearray, memoryview, mmap
    except (TypeError, ValueError, BufferError):
        view = None
    if view is not None:
        lo = view.__array_interface__["data"][0]
        return lo, lo + view.nbytes
    storage = getattr(owner, "untyped_storage", None)  # a torch tensor's memory
    if callable(storage) and type(owner).__module__.startswith("torch"):
        st = storage()
        return st.data_ptr(), st.data_ptr() + st.nbytes()
    return None


#: the names numpy gives the capsule an array made by ``np.from_dlpack`` keeps as its base
_DLPACK_BASES = (b"numpy_dltensor", b"numpy_dltensor_versioned")


_capsule_get_name = None


def _capsule_name(obj) -> Optional[bytes]:
    """The name of the PyCapsule ``obj``, or None for anything else."""
    global _capsule_get_name
    if type(obj).__name__ != "PyCapsule" or type(obj).__module__ != "builtins":
        return None
    if _capsule_get_name is None:
        get = ctypes.pythonapi.PyCapsule_GetName
        get.restype, get.argtypes = ctypes.c_char_p, [ctypes.py_object]
        _capsule_get_name = get
    return _capsule_get_name(obj)


def is_from_dlpack(a: np.ndarray) -> bool:
    """Whether the memory of ``a`` came from a DLPack producer (``np.from_dlpack``)."""
    b = a.base
    while isinstance(b, np.ndarray):
        b = b.base
    return b is not None and _capsule_name(b) in _DLPACK_BASES


def check_memory(spec: "BufferSpec", a: np.ndarray) -> None:
    """Raise unless the memory ``a`` comes from holds all of its elements: an array made
    by ``as_strided`` past its base, or by an ``__array_interface__`` that claims more
    than its buffer, would make the kernel read or write outside it.  Memory a DLPack
    producer exported (``np.from_dlpack``) is described by its producer, which owns it:
    its extent is the producer's word (as for numpy and torch, which take it so)."""
    owner, b, last = a, a.base, a
    while b is not None:
        if isinstance(owner, np.ndarray) and owner.flags.owndata:
            break
        last = owner
        owner, b = b, getattr(b, "base", None)
    if owner is a:
        return
    if _capsule_name(owner) in _DLPACK_BASES:
        if last is a:
            return  # the array np.from_dlpack made: as the producer describes it
        # a view of it (as_strided may reach past it): inside the elements it describes
        owner = last
        mem = _span(ArrayMeta(tuple(last.shape), last.dtype, tuple(last.strides), True, False,
                              last.__array_interface__["data"][0])) if last.size else (0, 0)
    else:
        mem = _memory_of(owner)
    what = f"{type(owner).__module__}.{type(owner).__qualname__}"
    if mem is None:
        raise ArgumentError(
            f"{spec.label}: the array's memory comes from a {what} object through a raw "
            f"pointer (an __array_interface__ whose data is an integer address), whose size "
            f"tecomp cannot check; pass an array that owns its memory (np.array(x) copies "
            f"it), or export it through DLPack (__dlpack__), where its producer describes it")
    if a.size == 0:
        return
    lo, hi = _span(ArrayMeta(tuple(a.shape), a.dtype, tuple(a.strides), True, False,
                             a.__array_interface__["data"][0]))
    if lo < mem[0] or hi > mem[1]:
        raise ArgumentError(
            f"{spec.label}: the array's elements span bytes [{lo:#x}, {hi:#x}) but the "
            f"{what} its memory comes from holds [{mem[0]:#x}, {mem[1]:#x}) ({mem[1] - mem[0]} "
            f"bytes): it was made (by as_strided or an __array_interface__) larger than its "
            f"memory; pass a copy that owns its memory (np.array(x))")


def _span(meta: ArrayMeta):
    """[lo, hi) of the bytes an array's elements occupy."""
    strides = meta.strides
    if strides is None:
        return meta.pointer, meta.pointer + _nbytes_meta(meta)
    lo = hi = meta.pointer
    for d, st in zip(meta.shape, strides):
        if st < 0:
            lo += (d - 1) * st
        else:
            hi += (d - 1) * st
    return lo, hi + meta.dtype.itemsize


def _nbytes_meta(meta: ArrayMeta) -> int:
    n = meta.dtype.itemsize
    for d in meta.shape:
        n *= d
    return n


# ---------------------------------------------------------------------------------------
# overlapping arrays

#: the work numpy's exact test (``numpy.shares_memory``) may spend on two arrays whose
#: address ranges meet before tecomp counts them as overlapping (interleaved views such
#: as ``x[::2]`` and ``x[1::2]`` are told apart well within it)
OVERLAP_WORK = 1 << 16
#: an output with unusual strides of at most this many elements has its elements'
#: addresses compared one by one; a larger one that no simple rule proves distinct is
#: refused
SELF_OVERLAP_ELEMENTS = 1 << 20

_TooHard = getattr(getattr(np, "exceptions", np), "TooHardError")


def self_overlap(shape, strides, itemsize: int):
    """Whether the elements of an array of ``shape`` and byte ``strides`` (None:
    C-contiguous) occupy distinct memory: None when they do, else the indices of two
    elements that overlap, or ``()`` when it cannot tell (a large array with strides no
    simple rule proves distinct)."""
    if strides is None or 0 in shape:
        return None
    dims = sorted((abs(st), d) for d, (n, st) in enumerate(zip(shape, strides)) if n > 1)
    reach = itemsize  # the bytes one block of the smaller dimensions spans
    for st, d in dims:
        if st < reach:
            break
        reach += st * (shape[d] - 1)
    else:
        return None  # each dimension steps past everything the smaller ones span
    for st, d in dims:
        if st == 0:
            j = [0] * len(shape)
            j[d] = 1
            return tuple([0] * len(shape)), tuple(j)
    count = math.prod(shape)
    if count > SELF_OVERLAP_ELEMENTS:
        return ()
    off = np.zeros((), np.int64)
    for n, st in zip(shape, strides):
        off = off[..., None] + np.arange(n, dtype=np.int64) * st
    flat = off.ravel()
    order = np.argsort(flat, kind="stable")
    close = np.flatnonzero(np.diff(flat[order]) < itemsize)
    if not close.size:
        return None
    k = int(close[0])
    return (tuple(int(x) for x in np.unravel_index(order[k], shape)),
            tuple(int(x) for x in np.unravel_index(order[k + 1], shape)))


def _element_strides_of(meta: ArrayMeta) -> Tuple[int, ...]:
    """Byte strides of ``meta`` (those of a C-contiguous array where it has None)."""
    if meta.strides is not None:
        return meta.strides
    out, acc = [], meta.dtype.itemsize
    for n in reversed(meta.shape):
        out.append(acc)
        acc *= n
    return tuple(reversed(out))


def _same_elements(ma: ArrayMeta, mb: ArrayMeta) -> bool:
    """Whether two arrays are the same elements: same address, shape, element size and
    strides (where an extent is more than 1)."""
    if ma.pointer != mb.pointer or ma.shape != mb.shape \
            or ma.dtype.itemsize != mb.dtype.itemsize or ma.on_device != mb.on_device:
        return False
    return all(n <= 1 or x == y for n, x, y in
               zip(ma.shape, _element_strides_of(ma), _element_strides_of(mb)))


def _overlap(a, b, ma: Optional[ArrayMeta], mb: Optional[ArrayMeta]):
    """How two non-empty arrays share memory: None (they do not), ``"same"`` (the same
    elements), ``"partly"`` or ``"may"`` (their address ranges meet and tecomp cannot
    tell whether an element is in both)."""
    if ma is None and mb is None:  # two numpy arrays
        if not np.may_share_memory(a, b):
            return None
        if a is b or (a.shape == b.shape and a.itemsize == b.itemsize
                      and all(n <= 1 or x == y for n, x, y in zip(a.shape, a.strides, b.strides))
                      and a.__array_interface__["data"][0] == b.__array_interface__["data"][0]):
            return "same"
        try:
            return "partly" if np.shares_memory(a, b, max_work=OVERLAP_WORK) else None
        except _TooHard:
            return "may"
    ma = ma if ma is not None else array_meta(a)
    mb = mb if mb is not None else array_meta(b)
    if ma.on_device != mb.on_device:
        return None
    (alo, ahi), (blo, bhi) = _span(ma), _span(mb)
    if not (alo < bhi and blo < ahi):
        return None
    if _same_elements(ma, mb):
        return "same"
    return "partly" if ma.strides is None and mb.strides is None else "may"


def _copy_hint(name: str) -> str:
    return f"pass a copy for {name} (np.array(x), x.clone())"


def overlap_error(func_name: str, x: "BufferSpec", y: "BufferSpec", how: str) -> ArgumentError:
    """The ArgumentError for the arguments of ``x`` and ``y`` (``x`` first in the
    parameters; one of them written) sharing memory in the way ``how`` says."""
    both = x.written and y.written
    writes = f"writes both" if both else f"writes {x.name if x.written else y.name}"
    src = y if x.written else x
    if how == "same":
        if both:
            return ArgumentError(f"{x.label} and {y.label} are the same array, and {func_name} "
                                 f"{writes}: pass a separate array for each output")
        out = x if x.written else y
        return ArgumentError(
            f"{x.label} and {y.label} are the same array, and {func_name} {writes}, but "
            f"tecomp cannot prove that it may compute {out.name} in place of {src.name}: only "
            f"a stage that computes each element of {out.name} once, from the same element of "
            f"{src.name} alone, can (not a stencil, a transpose, a reduction or a stage that "
            f"reads {src.name} through another; docs/runtime.md, \"Overlapping arrays\"); "
            + _copy_hint(src.name))
    what = "share memory" if how == "partly" else \
        "may share memory (their elements interleave in a way tecomp cannot tell apart)"
    return ArgumentError(
        f"{x.label} and {y.label} {what}, and {func_name} {writes}: an output must not "
        f"overlap another argument (the result would depend on the order the kernel runs "
        f"in); " + _copy_hint(src.name if not both else y.name))


def self_overlap_error(func_name: str, spec: "BufferSpec", shape, strides, found) -> ArgumentError:
    """The ArgumentError for the written argument of ``spec`` whose elements overlap
    (``found``: :func:`self_overlap`'s answer)."""
    st = tuple(strides)
    if found:
        i, j = (", ".join(str(k) for k in t) for t in found)
        return ArgumentError(
            f"{spec.label} is written by {func_name}, but its elements overlap: "
            f"{spec.name}[{i}] and {spec.name}[{j}] are the same memory (shape "
            f"{tuple(shape)}, byte strides {st}: a view with a zero or repeating stride, "
            f"such as as_strided, a broadcast made writeable or torch's expand); pass an "
            f"array whose elements are distinct, e.g. np.empty(shape) or x.clone()")
    return ArgumentError(
        f"{spec.label} is written by {func_name}, but tecomp cannot prove that its elements "
        f"are distinct (shape {tuple(shape)}, byte strides {st}); pass a contiguous array "
        f"(np.ascontiguousarray(x)) and copy the result back")


def in_place_of(func) -> tuple:
    """The ``(input, output)`` buffer parameters of the PrimFunc ``func`` that may be
    passed one array (:func:`tecomp.lower.in_place.in_place_pairs`)."""
    return in_place_pairs(func)
