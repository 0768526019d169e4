"""What a tensor intrinsic's ``llvm`` function gets: the operands' regions as
:class:`IntrinView` and an :class:`IntrinBuilder` over the function being generated.

An emitter is plain Python over these (no llvmlite import needed); types are written
as LLVM writes them (``"i32"``, ``"<16 x i32>"``, ``"<32 x i8>"``)::

    def vnni(ib, ins, outs):                       # c[16] += a[4] . b[16, 4]
        a = ib.splat(ib.load(ins[0], "i32"), 16)   # the 4 bytes of a in every lane
        acc = ib.load(outs[0], "<16 x i32>")
        r = ib.call("llvm.x86.avx512.vpdpbusd.512", "<16 x i32>",
                    acc, a, ib.load(ins[1], "<16 x i32>"))
        ib.store(outs[0], r)

Loads and stores are unaligned (``align 1``) and read ``ty``'s bytes from the element at
``index`` (default: the region's first).  The region is as large as the declared
placeholder; what the emitter reads or writes beyond it is its own bug.
"""
from __future__ import annotations

import re
from typing import Sequence, Tuple

from llvmlite import ir

from ..errors import BuildError
from ..te.tensor_intrin import IntrinOperand

_PTR = ir.PointerType()
_I64 = ir.IntType(64)
_TYPE = re.compile(r"\s*(?:<\s*(\d+)\s*x\s*)?(i\d+|float|double|half)\s*>?\s*")


class IntrinView(IntrinOperand):
    """One operand of a tensor intrinsic for LLVM (see
    :class:`~tecomp.te.tensor_intrin.IntrinOperand`): ``strides`` are ints."""

    def __init__(self, name: str, buffer_name: str, dtype: str, shape: Tuple[int, ...],
                 strides: Tuple[int, ...], ptr, mem_type):
        super().__init__(name, buffer_name, dtype, shape, strides)
        self._ptr = ptr
        self._mem = mem_type


class IntrinBuilder:
    """Emits one tensor intrinsic into the function being generated.  ``b`` is the
    llvmlite ``IRBuilder`` for anything the helpers do not cover."""

    def __init__(self, fn_emitter, intrin_name: str):
        self._em = fn_emitter
        self.b = fn_emitter.b
        self.name = intrin_name

    # -- types -------------------------------------------------------------------------
    def type(self, ty):
        """An llvmlite type from its LLVM spelling (or an llvmlite type, returned as is)."""
        if isinstance(ty, ir.Type):
            return ty
        m = _TYPE.fullmatch(ty) if isinstance(ty, str) else None
        if m is None:
            raise BuildError(f"tensor intrinsic {self.name}: {ty!r:.40} is not an LLVM type "
                             "this builder knows (iN, float, double, half, or <L x one of them>)")
        lanes, scalar = m.groups()
        st = {"float": ir.FloatType(), "double": ir.DoubleType(), "half": ir.HalfType()}.get(
            scalar) or ir.IntType(int(scalar[1:]))
        return ir.VectorType(st, int(lanes)) if lanes else st

    # -- memory ------------------------------------------------------------------------
    def ptr(self, view: IntrinView, index: Sequence[int] = ()):
        """The address of ``view[index]`` (``index``: ints, default all 0)."""
        index = tuple(index) or (0,) * len(view.shape)
        if len(index) != len(view.shape) or not all(
                isinstance(i, int) and 0 <= i < n for i, n in zip(index, view.shape)):
            raise BuildError(f"tensor intrinsic {self.name}: index {index} is outside operand "
                             f"{view.name} of shape {view.shape}")
        off = sum(i * s for i, s in zip(index, view.strides))
        if off == 0:
            return view._ptr
        return self.b.gep(view._ptr, [ir.Constant(_I64, off)], source_etype=view._mem)

    def load(self, view: IntrinView, ty, index: Sequence[int] = ()):
        """Load a value of type ``ty`` from ``view[index]`` (unaligned)."""
        return self.b.load(self.ptr(view, index), typ=self.type(ty), align=1)

    def store(self, view: IntrinView, value, index: Sequence[int] = ()):
        """Store ``value`` at ``view[index]`` (unaligned)."""
        self.b.store(value, self.ptr(view, index), align=1)

    # -- values ------------------------------------------------------------------------
    def call(self, name: str, ret, *args):
        """Call the LLVM intrinsic (or function) ``name`` returning ``ret``."""
        fn = self._em.mb.declare(name, self.type(ret), [a.type for a in args])
        return self.b.call(fn, list(args))

    def splat(self, value, lanes: int):
        """``value`` (a scalar) in each of ``lanes`` lanes."""
        vty = ir.VectorType(value.type, lanes)
        v = self.b.insert_element(ir.Constant(vty, ir.Undefined), value, ir.Constant(ir.IntType(32), 0))
        return self.b.shuffle_vector(v, ir.Constant(vty, ir.Undefined),
                                     ir.Constant(ir.VectorType(ir.IntType(32), lanes), [0] * lanes))

    def shuffle(self, a, b, mask: Sequence[int]):
        """``shufflevector a, b, mask``."""
        return self.b.shuffle_vector(a, b, ir.Constant(ir.VectorType(ir.IntType(32), len(mask)),
                                                       list(mask)))

    def cast(self, how: str, value, ty):
        """``how`` (zext, sext, trunc, bitcast, sitofp, ...) of ``value`` to ``ty``."""
        fn = getattr(self.b, how, None)
        if how not in ("zext", "sext", "trunc", "bitcast", "sitofp", "uitofp", "fptosi",
                       "fpext", "fptrunc") or fn is None:
            raise BuildError(f"tensor intrinsic {self.name}: unknown cast {how!r:.20}")
        return fn(value, self.type(ty))

    def add(self, a, b):
        return self.b.add(a, b)
