"""The kernel ABI of the LLVM code generator: the exported entry points and the error
words (the runtime, :mod:`tecomp.runtime.llvm`, and the loader of exported
libraries, :mod:`tecomp.runtime.aot`, call kernels through it).

Kernel ABI
----------
Every kernel variant exports the C function::

    int32_t tecomp_<name>(void **data, int64_t *args, int64_t *err);

* ``data[k]``: the data pointer of the k-th *buffer* parameter (in parameter order).
* ``args``: 64-bit slots.  First one slot per "value variable": the scalar parameters in
  parameter order, then the symbolic shape variables that are not parameters, in order
  of first appearance (``n`` of ``A: float32[n]``).  Integers are stored sign-extended,
  ``bool`` as 0/1, floats as the bits of a ``double``.  Then, for each buffer parameter,
  ``ndim`` strides *in elements* (read only by the strided variant).
* ``err``: five int64 the kernel fills on failure: ``[code, site, dim, index, extent]``.
  Codes: 1 bounds check failed (``site`` indexes the check sites of the module, ``dim``,
  ``index`` and ``extent`` say which), 2 ``malloc`` returned NULL (``extent`` holds the
  byte count), 3 a checked ``AssertStmt`` failed (``site``), 4 an extern stage's
  function raised (``site``; :mod:`tecomp.runtime.extern` keeps the exception).
* returns 0 on success, else the code.

It unpacks the ABI (:func:`emit_entry`) and calls ``tecomp_<name>.body``, an internal
function taking every buffer pointer, value variable and stride as a typed argument
(:func:`body_params`).  Buffer pointers are marked ``noalias`` when the variant allows
it; the O3 inliner turns that into scoped alias metadata.  A second export,
``tecomp_<name>_pyarrays``, takes in ``data[k]`` the address of the k-th numpy array
*object* instead, reads its data pointer (the field ``PyArray_DATA`` reads, right after
the CPython object header) and calls the first: the Python runtime uses it because
``id(a)`` is much cheaper than ``a.ctypes.data`` (:func:`emit_pyarrays_entry`).

Variants (versioning by memory layout and aliasing)
---------------------------------------------------
A variant is ``(layout, noalias)``.  ``layout="contiguous"`` indexes every buffer
parameter with the strides the IR declares (compact row-major when ``strides`` is None),
so for constant shapes they are compile-time constants, exactly as fast as a kernel
that never heard of strides; ``layout="strided"`` reads each array's strides from
``args`` at run time, so any numpy view (transposes, steps, negative and zero strides)
runs without a copy.  ``noalias=True`` promises that no written array overlaps another
argument.  The contiguous no-alias variant is compiled eagerly by
:func:`~tecomp.codegen.llvm.compiler.build_llvm`; the others are compiled on the first
call that needs them and cached (see :mod:`tecomp.runtime.llvm`).
"""
from __future__ import annotations

from typing import List, Tuple

import llvmlite.ir as ir

from ...ir import dtype as _dt
from ...runtime.signature import Signature
from .intrinsics import _bf16_to_f32, _f32_to_bf16, _f64_to_f16
# the offset of the data pointer in a numpy array object is the runtime's (it checks it
# against ``a.ctypes.data`` before using the ``_pyarrays`` entry)
from ...runtime.llvm import PYOBJECT_DATA_OFFSET
from .values import _F32, _F64, _I8, _I32, _I64, _PTR, _REG, _sanitize

ERR_BOUNDS = 1
ERR_MALLOC = 2
ERR_ASSERT = 3
ERR_EXTERN = 4   # an extern stage's function raised (tecomp.runtime.extern keeps it)
ERR_WORDS = 5


def body_params(sig: Signature, layout: str) -> Tuple[List[object], List[str]]:
    """The types and names of the arguments of ``tecomp_<name>.body``: every buffer
    pointer, value variable and (``layout="strided"``) stride, then ``err``."""
    arg_types, arg_names = [], []
    for bp in sig.buffers:
        arg_types.append(_PTR)
        arg_names.append(_sanitize(bp.name))
    for v in sig.slot_vars:
        arg_types.append(_REG[v.dtype])
        arg_names.append(_sanitize(v.name))
    if layout == "strided":
        for bp in sig.buffers:
            for d in range(bp.ndim):
                arg_types.append(_I64)
                arg_names.append(f"{_sanitize(bp.name)}_stride{d}")
    arg_types.append(_PTR)
    arg_names.append("err")
    return arg_types, arg_names


def emit_entry(module: ir.Module, symbol: str, sig: Signature, layout: str,
               body_fn: ir.Function) -> ir.Function:
    """The exported function ``tecomp_<name>(data, args, err)``: unpack the ABI and
    call the body (which the optimiser inlines here)."""
    entry = ir.Function(module, ir.FunctionType(_I32, [_PTR, _PTR, _PTR]), name=symbol)
    entry.attributes.add("nounwind")
    entry.attributes.add("noinline")
    data, slots, err = entry.args
    data.name, slots.name, err.name = "data", "args", "err"
    b = ir.IRBuilder(entry.append_basic_block("entry"))
    for w in range(ERR_WORDS):
        b.store(ir.Constant(_I64, 0), b.gep(err, [ir.Constant(_I64, w)], source_etype=_I64),
                align=8)
    vals = []
    for bp in sig.buffers:
        p = b.gep(data, [ir.Constant(_I64, bp.data_index)], source_etype=_PTR)
        vals.append(b.load(p, typ=_PTR, align=8, name=_sanitize(bp.name)))
    for i, v in enumerate(sig.slot_vars):
        p = b.gep(slots, [ir.Constant(_I64, i)], source_etype=_I64)
        raw = b.load(p, typ=_I64, align=8)
        vals.append(_slot_to_value(b, raw, v.dtype, _sanitize(v.name)))
    if layout == "strided":
        for bp in sig.buffers:
            for d in range(bp.ndim):
                p = b.gep(slots, [ir.Constant(_I64, bp.stride_slot + d)], source_etype=_I64)
                vals.append(b.load(p, typ=_I64, align=8))
    vals.append(err)
    b.ret(b.call(body_fn, vals))
    return entry


def emit_pyarrays_entry(module: ir.Module, symbol: str, nbuffers: int,
                        main: ir.Function) -> None:
    """``tecomp_<name>_pyarrays(objs, args, err)``: ``objs[k]`` is the address of a
    numpy array object; read each data pointer from it (the field ``PyArray_DATA``
    reads, at ``PYOBJECT_DATA_OFFSET``) and call the main entry."""
    nb = nbuffers
    entry = ir.Function(module, ir.FunctionType(_I32, [_PTR, _PTR, _PTR]),
                        name=symbol + "_pyarrays")
    entry.attributes.add("nounwind")
    objs, slots, err = entry.args
    objs.name, slots.name, err.name = "objs", "args", "err"
    b = ir.IRBuilder(entry.append_basic_block("entry"))
    data = b.alloca(ir.ArrayType(_PTR, max(nb, 1)), name="data")
    data.type = _PTR
    for k in range(nb):
        idx = ir.Constant(_I64, k)
        obj = b.load(b.gep(objs, [idx], source_etype=_PTR), typ=_PTR, align=8)
        field = b.gep(obj, [ir.Constant(_I64, PYOBJECT_DATA_OFFSET)], source_etype=_I8)
        ptr = b.load(field, typ=_PTR, align=8)
        b.store(ptr, b.gep(data, [idx], source_etype=_PTR), align=8)
    b.ret(b.call(main, [data, slots, err]))


def _slot_to_value(b: ir.IRBuilder, raw, dtype: str, name: str):
    """Convert a 64-bit ABI slot into a value of ``dtype`` (its register type)."""
    if dtype == "bool":
        return b.icmp_unsigned("!=", raw, ir.Constant(_I64, 0), name=name)
    if _dt.is_int(dtype):
        return raw if dtype == "int64" else b.trunc(raw, _REG[dtype], name=name)
    d = b.bitcast(raw, _F64)
    if dtype == "float64":
        return d
    if dtype == "float32":
        return b.fptrunc(d, _F32, name=name)
    if dtype == "bfloat16":   # through float32, then to nearest bfloat16
        return _bf16_to_f32(b, _f32_to_bf16(b, b.fptrunc(d, _F32)))
    # float16: round once to half, compute in float32
    return b.fpext(_f64_to_f16(b, d), _F32, name=name)
