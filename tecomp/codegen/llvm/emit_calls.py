"""Calls out of the LLVM function emitter (:class:`_CallEmitter`, a part of
:class:`~tecomp.codegen.llvm.emitter._FnEmitter`): ``TensorIntrinCall`` (the tensor
intrinsic's ``llvm`` function, given each operand's region; the loops it replaced where
it has none, or where the strides known only at run time are not those it needs) and
``ExternCall`` (the buffers and scalars handed to ``tecomp_extern_call``, see
:mod:`tecomp.runtime.extern`).
"""
from __future__ import annotations

import llvmlite.ir as ir

from ...errors import InternalError
from ...ir import dtype as _dt
from ...ir.expr import Const
from ...ir.stmt import ExternCall, TensorIntrinCall
from ...lower.vectorize import node_text
from ...runtime import extern as _ext
from ...te.tensor_intrin import builtin_name, row_major
from . import jit as llvm_jit
from .abi import ERR_BOUNDS, ERR_EXTERN
from .intrinsics import IntrinBuilder, IntrinView
from .values import _F64, _I32, _I64, _MEM, _PTR, Val, _Buf


class _CallEmitter:
    """The part of :class:`~tecomp.codegen.llvm.emitter._FnEmitter` that emits calls to tensor
    intrinsics and extern functions (the state it works on: ``_FnEmitter.__init__``)."""

    # -- tensor intrinsics -------------------------------------------------------------------
    def s_tensor_intrin_call(self, s: TensorIntrinCall):
        """The intrinsic's ``llvm`` function, given each operand's region as an
        :class:`~tecomp.codegen.llvm.intrinsics.IntrinView`; an intrinsic without one runs the
        loops it replaced.  Where a region's strides are known only at run time (the
        variant for strided arrays), a dense intrinsic runs when they are the declared
        layout's and the loops it replaced otherwise; any other intrinsic runs those loops.
        Checked builds test the first and last element of each region.

        A region that is affine only in its buffer's flattened memory (``s.is_flat``) holds
        for the strides lowering saw: where the buffer's are known only at run time, the
        intrinsic runs when they are those, and the loops it replaced otherwise; checked
        builds test its last element's offset against the buffer's last one."""
        intrin = s.intrin
        if intrin.llvm is None:
            self.stmt(s.fallback)
            return
        intrin.check_target(self.mb.target, s.stage)
        self.mb.required_features.update(intrin.requires)
        if self.mask is not None or self.lanes > 1:
            raise InternalError(f"the tensor intrinsic {intrin.name} is inside a vectorized loop")
        b = self.b
        views, known, checks = [], True, []
        for n, (ph, buf) in enumerate(zip([intrin.output] + list(intrin.inputs), s.buffers)):
            bi = self.buf(buf)
            off, idx = self.offset(bi, s.base(n))
            shape = tuple(int(x.value) for x in ph.shape)
            flat = s.is_flat(n)
            if flat:
                checks += self._flat_strides(bi, buf, s)
            if self.checks:
                self.bounds_check(bi, idx, s, "tensorize")
                if flat:
                    self._flat_last_check(bi, off, s, n, shape)
                else:
                    self.bounds_check(bi, [self.vadd(ix, Val(ir.Constant(_I64, sum(
                        s.coefs[n][d][e] * (shape[d] - 1) for d in range(len(shape))))))
                        for e, ix in enumerate(idx)], s, "tensorize")
            strides, want = [], row_major(shape)
            for d in range(len(shape)):
                acc = ir.Constant(_I64, 0)
                for e, c in enumerate(s.coefs[n][d]):
                    if c:
                        acc = self.iadd(acc, self.imul(ir.Constant(_I64, c), bi.strides[e]))
                if isinstance(acc, ir.Constant):
                    strides.append(int(acc.constant))
                else:
                    known = False
                    strides.append(want[d])
                    if shape[d] > 1:
                        checks.append(b.icmp_signed("==", acc, ir.Constant(_I64, want[d])))
            views.append(IntrinView(ph.name, buf.name, ph.dtype, shape, tuple(strides),
                                    self._elem_ptr(bi, off.s, False), _MEM[bi.dtype], buf))

        def emit():
            intrin.llvm(IntrinBuilder(self, intrin.name, builtin_name(intrin) is not None),
                        views[1:], views[:1])

        if not known and not intrin.dense:
            self.stmt(s.fallback)
        elif not checks:
            emit()
        else:
            ok = checks[0]
            for c in checks[1:]:
                ok = b.and_(ok, c)
            self.if_(ok, emit, lambda: self.stmt(s.fallback), name="tensorize.layout")

    def _flat_strides(self, bi: _Buf, buf, s: TensorIntrinCall) -> list:
        """The run-time tests that ``bi`` has the strides a flat region of ``s`` was found
        with (none where they are constants: those are the strides lowering saw)."""
        tests = []
        for e, (got, want) in enumerate(zip(bi.strides, buf.effective_strides())):
            w = ir.Constant(_I64, int(want.value))
            if isinstance(got, ir.Constant):
                if int(got.constant) != int(want.value):
                    raise InternalError(
                        f"tensorize {s.intrin.name} on stage {s.stage}: buffer {buf.name} has "
                        f"stride {got.constant} in dimension {e} and its flat region was found "
                        f"with {want.value}")
            elif not (isinstance(buf.shape[e], Const) and buf.shape[e].value == 1):
                tests.append(self.b.icmp_signed("==", got, w))
        return tests

    def _flat_last_check(self, bi: _Buf, off: Val, s: TensorIntrinCall, n: int, shape):
        """Checked builds: the last element of the flat region ``n`` of ``s`` at or before
        the buffer's last element in memory."""
        last = off.s
        for d in range(len(shape)):
            for e, c in enumerate(s.coefs[n][d]):
                if c:
                    last = self.iadd(last, self.imul(ir.Constant(_I64, c * (shape[d] - 1)),
                                                     bi.strides[e]))
        end = ir.Constant(_I64, 1)
        for st, ext in zip(bi.strides, bi.extents):
            end = self.iadd(end, self.imul(self.isub(ext, ir.Constant(_I64, 1)), st))
        stmt = self._stmt_stack[-1] if self._stmt_stack else s
        site = self.mb.add_site("tensorize.flat", bi.buffer.name, node_text(s), node_text(stmt))
        fail = self.b.icmp_unsigned(">=", last, end)
        self.guard(fail, lambda: self.report(ERR_BOUNDS, site, ir.Constant(_I64, -1), last, end),
                   name="bounds")

    # -- extern calls ------------------------------------------------------------------------
    def s_extern_call(self, s: ExternCall):
        """``tecomp_extern_call(site, data, ints, floats)`` (see tecomp.runtime.extern):
        the buffers' data pointers, their extents and strides (elements) then the integer
        scalars, and the float scalars, in stack arrays; a nonzero return is error 4."""
        _register_extern_symbol()
        if self.mask is not None or self.lanes > 1:
            raise InternalError(f"the extern call {s.name} is inside a vectorized loop")
        b = self.b
        bis = [self.buf(x) for x in s.buffers]
        ints, floats = [], []
        for bi in bis:
            ints += list(bi.extents) + list(bi.strides)
        for e in s.scalars:
            if _dt.is_float(e.dtype):
                floats.append(self.cast_value(self.expr(e).s, e.dtype, "float64"))
            else:
                ints.append(self.scalar_index(e))
        data = self.alloca(ir.ArrayType(_PTR, max(len(bis), 1)), name="extern.data", align=8)
        iarr = self.alloca(ir.ArrayType(_I64, max(len(ints), 1)), name="extern.ints", align=8)
        farr = self.alloca(ir.ArrayType(_F64, max(len(floats), 1)), name="extern.floats", align=8)
        zero = ir.Constant(_I32, 0)
        for arr, vals, ty in ((data, [bi.ptr for bi in bis], _PTR), (iarr, ints, _I64),
                              (farr, floats, _F64)):
            for n, v in enumerate(vals):
                b.store(v, b.gep(arr, [zero, ir.Constant(_I32, n)],
                                 source_etype=arr.allocated_type), align=8)
        fn = self.mb.declare(_ext.SYMBOL, _I32, [_I64, _PTR, _PTR, _PTR])
        rc = b.call(fn, [ir.Constant(_I64, s.site), data, iarr, farr], name="extern.rc")
        site = self.mb.add_site("extern", "", s.name, node_text(s))
        self.guard(b.icmp_signed("!=", rc, zero), lambda: self.report(ERR_EXTERN, site),
                   name="extern")


_EXTERN_SYMBOL_DONE = []


def _register_extern_symbol() -> None:
    """Make ``tecomp_extern_call`` resolve to the extern calls' entry point in the JIT."""
    if not _EXTERN_SYMBOL_DONE:
        llvm_jit.add_symbol(_ext.SYMBOL, _ext.address())
        _EXTERN_SYMBOL_DONE.append(True)
