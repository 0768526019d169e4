"""Memory in the LLVM function emitter (:class:`_MemoryEmitter`, a part of
:class:`~tecomp.codegen.llvm.emitter._FnEmitter`): the function's frame (``alloca``s in
the entry block, the spill block taken from the workspace, the return and the frees on
the way out), index arithmetic in i64 and the offset of an access, bounds checks, loads
and stores (scalar, vector, padded to a whole register, strided wide loads, masked loads,
gathers and scatters; the float16 / bfloat16 / bool conversions to and from memory),
``BufferStore``, ``Allocate`` (the stack, the spill block or the workspace) and
``Prefetch``; and :func:`frame_overflow`, which picks before emission the constant-size
buffers that leave the stack for the frame's budget.  The rules: "Index arithmetic",
"vectorized", "Allocate", "Prefetch" and "checks=True" in the docstring of
:mod:`tecomp.codegen.llvm.emitter`.
"""
from __future__ import annotations

from typing import List, Optional, Tuple

import llvmlite.ir as ir

from ...errors import BuildError, InternalError, ResourceLimitError
from ...ir import dtype as _dt
from ...ir.expr import (Add, And, Buffer, BufferLoad, Cast, Const, Expr, FloorDiv, FloorMod,
                        Mul, Or, Sub, Var)
from ...ir.functor import collect, free_vars, reads_memory, substitute
from ...ir.simplify import simplify
from ...ir.stmt import (
    Allocate, BufferStore, For, IfThenElse, Prefetch, SeqStmt, Stmt, TensorIntrinCall,
)
from ...lower.vectorize import MAX_WIDEN_LANES, node_text
from .abi import ERR_BOUNDS, ERR_MALLOC
from .threadpool import WS_ALLOC, WS_FREE
from .intrinsics import _VolatileLoad, _bf16_to_f32, _f32_to_bf16
from .values import (
    _F16, _F32, _I1, _I8, _I32, _I64, _IR_SIZE, _MEM, _PTR, _REG, _SIZE, Val, _Buf, _is_const,
    _join_pieces, _piece, _poison, _sanitize, _splat, _with_lanes,
)


#: allocations up to this many bytes (constant size) live on the stack ...
MAX_STACK_ALLOC = 64 * 1024
#: ... as long as those of one function (the kernel's body, or one parallel task) take at
#: most this many bytes together: the rest go to the workspace (see :func:`frame_overflow`).
#: A task runs on a pool thread or the caller's, and the caller's frame holds its own
#: buffers meanwhile: 2 x 512 KiB stays well inside the smallest default thread stack
#: (2 MiB, glibc's where the stack limit is unlimited; 8 MiB is usual)
MAX_STACK_FRAME = 512 * 1024
#: a strided load under a mask (a padded pooling window's first tap: lane 0 on the
#: padding) as lane 0's own load and one masked load of the others' span and a shuffle
#: (:meth:`_MemoryEmitter.strided_masked_load`), where the policy loads the step wide
#: unmasked, in every kernel; False: only in the nests under ``pragma
#: masked_wide_loads``, a gather elsewhere.  (In a cached input 1.5x as fast as the
#: gather, but 0.75x over rows of whole vectors from the L3's edge or DRAM: the
#: schedule decides, see :mod:`tecomp.strategy.cpu.pool`.)
MASKED_WIDE_LOADS = False

#: an access whose indices divide a fused loop's counter back into its axes (``f //
#: 2048``, ``f % 2048``) but whose flattened offset, simplified, divides less (``f *
#: 196 + 192``) is addressed by that offset (the per-dimension indices stay for the
#: bounds checks), in every kernel: a global pooling's tail element and output, whose
#: tasks are the fused (batch x channels), computed their addresses with the divisions
#: (about 15 integer instructions a plane of 49).  Off by default: the quiet survey read
#: max2d NHWC 0.77-0.97x slower with it in three runs and global avg 7x7 only 1.04x
#: faster, and it changes the code of every kernel.  False: each dimension's index
#: times its stride (benchmarks/DECISIONS.md, "Pooling: a small global plane unrolled,
#: its sums seeded")
FLAT_FUSED_OFFSETS = False

#: a vector store of a bool ``and`` of bool loads (an ``all`` reduction's update
#: ``acc && x``) computed on the bytes: their ``umin`` (a byte is true where it is not
#: 0; the result byte 0 or 1), instead of each vector tested into a mask register and
#: the masks combined; an ``or`` (``any``'s) as their ``umax``, into the function's own
#: stack buffer only (its partial results: any non-zero byte for true there).  ``all``
#: of 8x64x128x256 bools over the middle axis, the planes or everything ran 1.30-1.91x
#: faster on Zen 5 (1 thread), ``any`` over the planes or everything 1.33-1.66x; the
#: last axis 0.75-1.26x, noise at 0.3 ms (benchmarks/history/2026-12-02.md, session
#: 23).  Off: the masks.
BYTE_BOOL_LOGIC = True

#: a strided vector read of the function's own stack buffer at a constant offset as
#: the whole register-wide pieces stored there and a shuffle
#: (:meth:`_MemoryEmitter.private_whole_load`), not a gather or a wide load across two
#: stores: adaptive_max_pool2d 50 -> 7 1.64x faster on the Zen 5
#: (measurements: benchmarks/DECISIONS.md, "Max pooling's odd rows: padded min/max
#: pieces, strided reads of a local row from its registers, 3-d maxima in a local
#: block").  False: as before (an A/B switch)
PRIVATE_WHOLE_LOADS = True
#: ... and a contiguous vector read of it at a constant offset that is no whole number
#: of registers (a stride-1 window's taps from its row of column sums): the two
#: registers it lies across and a shuffle, not a load across two stores (a
#: store-forwarding stall each).  False: a plain (unaligned) load, as before (an A/B
#: switch; benchmarks/DECISIONS.md, "Stride-1 pooling windows in two steps")
PRIVATE_SHIFTED_LOADS = True


#: a nest's stores bypass the cache (pragma nontemporal) where the buffer starts on a
#: multiple of these bytes (a cache line; a 64-byte vector's non-temporal store faults
#: on an address that is not)
NONTEMPORAL_ALIGN = 64


def _pow2_const(v: int) -> int:
    """``k``: ``2**k`` divides ``v`` (64 for 0)."""
    return 64 if v == 0 else min(64, (v & -v).bit_length() - 1)


def _constant_bytes(buf: Buffer) -> Optional[int]:
    """The bytes an allocation of ``buf`` takes when its shape (and strides) are
    constants, as :meth:`_FnEmitter.alloc_count` counts them; None otherwise."""
    dims = list(buf.shape) + list(buf.strides or ())
    if not all(isinstance(d, Const) for d in dims):
        return None
    if buf.strides is None:
        n = 1
        for e in buf.shape:
            n *= max(int(e.value), 0)
    else:
        n = 1 + sum((max(int(e.value), 1) - 1) * int(st.value)
                    for e, st in zip(buf.shape, buf.strides))
    return n * _SIZE[buf.dtype]


_reads_memory = reads_memory   # (the CUDA renderer checks the same accesses)


def frame_overflow(body: Stmt, in_parallel: bool) -> set:
    """The constant-size allocations up to :data:`MAX_STACK_ALLOC` that ``body`` makes in
    its own function (not in the parallel tasks it outlines) which go to the workspace
    because the others take the function's :data:`MAX_STACK_FRAME` (200 buffers of 64 KiB
    overflowed the 8 MiB stack): the stack keeps the innermost first (a workspace block
    in an inner loop is taken and given back on every iteration), then the smallest.
    The emitter counts the bytes again as it places them (a buffer in an unrolled loop
    is allocated once per copy)."""
    found: List[Tuple[int, int, int, Buffer]] = []

    def walk(node, depth: int) -> None:
        if isinstance(node, Allocate):
            size = _constant_bytes(node.buffer)
            if size is not None and size <= MAX_STACK_ALLOC:
                found.append((-depth, size, len(found), node.buffer))
        elif isinstance(node, For):
            if node.kind == "parallel" and not in_parallel:
                return          # an outlined task: a function (and a frame) of its own
            depth += 1
        for child in _child_stmts(node):
            walk(child, depth)

    walk(body, 0)
    heap, used = set(), 0
    for _, size, _, buf in sorted(found, key=lambda t: t[:3]):
        if used + _stack_bytes(size) <= MAX_STACK_FRAME:
            used += _stack_bytes(size)
        else:
            heap.add(buf)
    return heap


def _stack_bytes(size: int) -> int:
    """What an ``alloca`` of ``size`` bytes, 64-byte aligned, takes of the frame."""
    return -(-max(size, 1) // 64) * 64


def _child_stmts(node) -> List[Stmt]:
    if isinstance(node, SeqStmt):
        return list(node.seq)
    if isinstance(node, IfThenElse):
        return [node.then_case] + ([node.else_case] if node.else_case is not None else [])
    if isinstance(node, TensorIntrinCall):
        return [node.fallback]      # the loops the intrinsic replaced, where it runs them
    body = getattr(node, "body", None)
    return [body] if isinstance(body, Stmt) else []


def _divisions(exprs) -> int:
    """The floor divisions and modulos in ``exprs`` (:data:`FLAT_FUSED_OFFSETS`)."""
    return sum(len(collect(e, lambda n: isinstance(n, (FloorDiv, FloorMod)))) for e in exprs)


class _MemoryEmitter:
    """The part of :class:`~tecomp.codegen.llvm.emitter._FnEmitter` that emits memory accesses
    and the frame (the state it works on: ``_FnEmitter.__init__``)."""

    # -- function frame ----------------------------------------------------------------------
    def alloca(self, ty, name: str = "", align: Optional[int] = None):
        a = self.ab.alloca(ty, name=name)
        a.type = _PTR  # an opaque pointer, whatever llvmlite infers
        if align:
            a.align = align
        return a

    def _allocate_spill(self):
        """Between the entry block and the body: take the spill block from the workspace
        (a failure is error 2, KernelMemoryError, as a heap buffer's)."""
        b = self.b
        block = self.fn.append_basic_block("spill")
        self.ab.branch(block)
        b.position_at_end(block)
        names = ", ".join(dict.fromkeys(self.spill_names))
        site = self.mb.add_site(
            "malloc", names if len(names) <= 200 else names[:200] + "...",
            f"allocate {names[:200]}",
            f"{len(self.spill_names)} buffers past the {MAX_STACK_FRAME // 1024} KiB the "
            f"stack may hold in one function, from the workspace together")
        size = ir.Constant(_I64, self.spill_bytes)
        p = b.call(self._ws_alloc(), [size], name="spill")
        b.store(p, self.spill_slot, align=8)
        self.guard(b.icmp_unsigned("==", p, ir.Constant(_PTR, None)),
                   lambda: self.report(ERR_MALLOC, site, None, None, size), name="malloc")
        b.branch(self.start)

    def _ws_alloc(self):
        """``tecomp_ws_alloc``, declared ``noalias`` (its block is reached through no other
        pointer, as malloc's: without it LLVM must assume the kernel's stores to it may
        change its inputs, and reloads them: attention's 64 KiB+ scratch ran 1.5x slower
        than on the stack)."""
        alloc = self.mb.declare(WS_ALLOC, _PTR, [_I64])
        if "noalias" not in alloc.return_value.attributes:
            alloc.return_value.add_attribute("noalias")
        return alloc

    def finish_ok(self):
        """Return 0 from the current block, close the entry block and the error exit."""
        if self.spill_slot is not None:
            self.b.call(self.mb.declare(WS_FREE, ir.VoidType(), [_PTR]),
                        [self.b.load(self.spill_slot, typ=_PTR, align=8)])
        self.b.ret(ir.Constant(_I32, 0))
        if self.spill_slot is None:
            self.ab.branch(self.start)
        else:
            self._allocate_spill()
        if self._err_block is not None:
            b = ir.IRBuilder(self._err_block)
            for slot in self.heap_slots:
                p = b.load(slot, typ=_PTR, align=8)
                b.call(self.mb.declare(WS_FREE, ir.VoidType(), [_PTR]), [p])
            code = b.load(self.err, typ=_I64, align=8)
            b.ret(b.trunc(code, _I32))

    # -- index arithmetic in i64 -------------------------------------------------------------
    def index64(self, e: Expr) -> Val:
        t = type(e)
        if t is Const and _dt.is_int(e.dtype):
            return Val(ir.Constant(_I64, int(e.value)))
        if t is Var:
            v = self.env64.get(e)
            if v is not None:
                return v
            return self.int_convert(self.expr(e), e.dtype, "int64")
        if t in (Add, Sub, Mul) and e.dtype in ("int32", "int64") \
                and e.a.dtype == e.dtype and e.b.dtype == e.dtype:
            a = self.index64(e.a)
            c = self.index64(e.b)
            if t is Add:
                return self.vadd(a, c)
            if t is Sub:
                return self.vadd(a, c, sub=True)
            return self.vmul(a, c)
        if t is Cast and e.dtype in ("int32", "int64") and e.value.dtype in ("int32", "int64") \
                and _dt.bits(e.value.dtype) <= _dt.bits(e.dtype):
            return self.index64(e.value)
        if not (_dt.is_int(e.dtype) or e.dtype == "bool"):
            raise InternalError(f"an index must be an integer, got {e.dtype} `{node_text(e)}`")
        return self.int_convert(self.expr(e), e.dtype, "int64")

    def scalar_index(self, e: Expr):
        """A lane-invariant i64 index value (loop bounds, extents, sizes)."""
        v = self.index64(e)
        if not v.uniform:
            raise InternalError(f"`{node_text(e)}` must not depend on a vectorized lane here")
        return v.s

    def non_negative(self, v):
        """``max(v, 0)`` of an i64 value."""
        if _is_const(v):
            return v if v.constant >= 0 else ir.Constant(_I64, 0)
        zero = ir.Constant(_I64, 0)
        return self.b.select(self.b.icmp_signed("<", v, zero), zero, v)

    def declared_strides(self, buf: Buffer, extents) -> List[object]:
        if buf.strides is not None:
            return [self.scalar_index(s) for s in buf.strides]
        out = []
        acc = ir.Constant(_I64, 1)
        for ext in reversed(extents):
            out.append(acc)
            acc = self.imul(acc, ext)
        return list(reversed(out))

    # -- memory ------------------------------------------------------------------------------
    def buf(self, b: Buffer) -> _Buf:
        bi = self.bufs.get(b)
        if bi is None:
            raise BuildError(f"buffer {b.name} is used outside the scope that allocates it")
        return bi

    def offset(self, bi: _Buf, indices) -> Tuple[Val, List[Val]]:
        if len(indices) != len(bi.strides):
            raise InternalError(f"buffer {bi.buffer.name} has {len(bi.strides)} dimensions but "
                                f"is indexed with {len(indices)} indices")
        idx = [self.index64(i) for i in indices]
        if self.lanes > 1 and any(ix.v is not None for ix in idx):
            # a lane-dependent index that is not affine (a fused axis: y = f // 14,
            # x = f % 14) may still give an affine offset (y*14 + x = f): flattened and
            # simplified, it is a vector load, not a gather (the per-dimension indices
            # stay for the bounds checks)
            flat = self._flat_offset(bi, indices)
            if flat is not None:
                fv = self.index64(flat)
                if fv.v is None:
                    return fv, idx
        elif FLAT_FUSED_OFFSETS and all(ix.v is None for ix in idx):
            divs = _divisions(indices)
            if divs:
                flat = self._flat_offset(bi, indices)
                if flat is not None and _divisions([flat]) < divs:
                    return self.index64(flat), idx
        off = Val(ir.Constant(_I64, 0))
        for ix, st in zip(idx, bi.strides):
            off = self.vadd(off, self.vmul(ix, Val(st)))
        return off, idx

    def _flat_offset(self, bi: _Buf, indices) -> Optional[Expr]:
        """``sum(index*stride)`` over the dimensions of ``bi``, simplified, when every
        stride is a constant and every index of one integer dtype that holds the
        buffer's largest offset; else None."""
        dts = {i.dtype for i in indices}
        if len(dts) != 1 or not all(isinstance(st, ir.Constant) for st in bi.strides):
            return None
        dt = dts.pop()
        strides = [int(st.constant) for st in bi.strides]
        exts = [e.constant if isinstance(e, ir.Constant) else None for e in bi.extents]
        if dt not in ("int32", "int64") or any(e is None for e in exts):
            return None
        last = sum((int(e) - 1) * st for e, st in zip(exts, strides) if int(e) > 0)
        if last >= 2 ** (_dt.bits(dt) - 1) or any(st < 0 for st in strides):
            return None
        flat = None
        for i, st in zip(indices, strides):
            term = i if st == 1 else Mul(i, Const(st, dt), dt)
            flat = term if flat is None else Add(flat, term, dt)
        return simplify(flat)

    def access_checked(self, node):
        """The dimensions of the access ``node`` (a BufferLoad or BufferStore) that are
        bounds-checked: every one with ``checks=True``; else those whose index reads
        memory (a gather ``X[ids[i], j]``, a scatter ``Y[ids[i]] = ...``), since no check
        before the call can know where such an index points: an id past the table read
        (or wrote) memory outside the arrays.  The others are proved in bounds by
        lowering or by the argument checks."""
        if self.checks:
            return range(len(node.indices))
        return [d for d, i in enumerate(node.indices) if _reads_memory(i)]

    def bounds_check(self, bi: _Buf, idx: List[Val], node, kind: str, dims=None):
        """Check the indices ``idx`` of dimensions ``dims`` (default: all)."""
        stmt = self._stmt_stack[-1] if self._stmt_stack else node
        site = self.mb.add_site(kind, bi.buffer.name, node_text(node), node_text(stmt))
        b = self.b
        for d, (ix, ext) in enumerate(zip(idx, bi.extents)):
            if dims is not None and d not in dims:
                continue
            if ix.uniform:
                fail = b.icmp_unsigned(">=", ix.s, ext)
                if self.mask is not None:
                    fail = b.and_(fail, self.any_lane(self.mask))
                index = ix.s
                self.guard(fail, lambda d=d, index=index, ext=ext:
                           self.report(ERR_BOUNDS, site, d, index, ext), name="bounds")
            else:
                vi = self.vec(ix)
                fails = b.icmp_unsigned(">=", vi, self.bcast(ext))
                if self.mask is not None:
                    fails = b.and_(fails, self.mask)

                def on_fail(d=d, vi=vi, fails=fails, ext=ext):
                    bits = b.bitcast(fails, ir.IntType(self.lanes))
                    lane = b.cttz(bits, ir.Constant(_I1, 0))
                    index = b.extract_element(vi, lane)
                    self.report(ERR_BOUNDS, site, d, index, ext)

                self.guard(self.any_lane(fails), on_fail, name="bounds")

    # -- non-temporal stores (pragma nontemporal) ---------------------------------------
    def nontemporal_nest(self, body: Stmt):
        """The nest ``body`` under ``pragma nontemporal``, twice: where every buffer it
        stores to and does not allocate starts on a cache line (a test at run time),
        with its whole-vector stores to them non-temporal (:meth:`_nontemporal_store`);
        else as it is."""
        inner = {s.buffer for s in collect(body, lambda n: isinstance(n, Allocate))}
        outs = []
        for st in collect(body, lambda n: isinstance(n, BufferStore)):
            if st.buffer not in inner and st.buffer not in outs and st.buffer in self.bufs:
                outs.append(st.buffer)
        if not outs:
            self.stmt(body)
            return
        b = self.b
        line = ir.Constant(_I64, NONTEMPORAL_ALIGN - 1)
        ok = None
        for buf in outs:
            low = b.and_(b.ptrtoint(self.buf(buf).ptr, _I64), line)
            c = b.icmp_unsigned("==", low, ir.Constant(_I64, 0))
            ok = c if ok is None else b.and_(ok, c)

        def streamed():
            self.mb.nontemporal = frozenset(outs)
            try:
                self.stmt(body)
            finally:
                self.mb.nontemporal = frozenset()
            # non-temporal stores are weakly ordered (x86): fence them before anything
            # after the nest (another thread's read once the call returns) can see them
            self.mb.policy.store_fence(self.mb, self.b)
        self.if_(ok, streamed, lambda: self.stmt(body), name="nt")

    def _nontemporal_store(self, bi: _Buf, indices, x, p, align: int):
        """A vector store to ``bi`` inside a nest whose stores to it bypass the cache:
        non-temporal (``!nontemporal``, x86 ``vmovntps``) where its first element's
        offset is known to be a multiple of the vector's bytes (up to a cache line; the
        buffer starts on one), else a plain store.  LLVM needs the alignment to emit the
        instruction, and an aligned store to an address that is not faults."""
        b = self.b
        size = _SIZE[bi.dtype]
        e = 64
        for i, st in zip(indices, bi.strides):
            k = self._pow2_factor(i)
            if k < 64:
                k += _pow2_const(st.constant) if isinstance(st, ir.Constant) else 0
            e = min(e, k)
        known = min(NONTEMPORAL_ALIGN, size << min(e, 16))
        if known < min(NONTEMPORAL_ALIGN, size * self.lanes):
            self._tag(b.store(x, p, align=align), bi)
            return
        if isinstance(x, ir.CastInstr) and x.opname == "fptrunc" and \
                isinstance(x.type, ir.VectorType) and isinstance(x.type.element, ir.HalfType):
            # float32 rounded to float16 where it is stored: LLVM's x86 backend selects no
            # non-temporal store for a vector of half (a plain vmovaps, AVX512-FP16 or
            # not), and folds a bitcast of it to i16 away; the rounding to bits is what
            # it stores past the cache (the fptrunc left dead)
            src = x.operands[0]
            # (a float16 value is float32 rounded to float16 and widened back: round
            # what was rounded, once)
            while isinstance(src, ir.CastInstr) and src.opname == "fpext" and \
                    isinstance(src.operands[0], ir.CastInstr) and \
                    src.operands[0].opname == "fptrunc" and \
                    src.operands[0].operands[0].type == src.type:
                src = src.operands[0].operands[0]
            conv = self.mb.policy.vector_op("half_bits", src.type)
            if conv is not None:
                x = conv(b, self.mb, src)
        inst = b.store(x, p, align=known)
        inst.set_metadata("nontemporal", self.mb.module.add_metadata([ir.Constant(_I32, 1)]))
        self._tag(inst, bi)

    def _pow2_factor(self, e: Expr) -> int:
        """``k``: ``2**k`` divides the value of the index ``e`` in the first lane,
        whatever the variables hold (64: it is 0).  Constants and the variables bound to
        constants (unrolled loops, a widened loop's first lane) count; other variables
        divide by 1."""
        t = type(e)
        if t is Const:
            return _pow2_const(int(e.value))
        if t is Var:
            v = self.env64.get(e) or self.env.get(e)
            if v is not None and v.v is None and isinstance(v.s, ir.Constant):
                return _pow2_const(int(v.s.constant))
            return 0
        if t in (Add, Sub):
            return min(self._pow2_factor(e.a), self._pow2_factor(e.b))
        if t is Mul:
            return min(64, self._pow2_factor(e.a) + self._pow2_factor(e.b))
        if t is Cast and _dt.is_int(e.dtype) and _dt.is_int(e.value.dtype):
            return self._pow2_factor(e.value)
        return 0

    def _tag(self, inst, bi: _Buf):
        """``inst`` (a load, store or masked memory intrinsic through ``bi``) with the
        buffer's alias scopes (:mod:`tecomp.codegen.llvm.alias`)."""
        return self.mb.alias.tag(inst, bi.buffer)

    def _elem_ptr(self, bi: _Buf, off, inbounds: bool):
        return self.b.gep(bi.ptr, [off], inbounds=inbounds, source_etype=_MEM[bi.dtype])

    def _vec_ptrs(self, bi: _Buf, off_vec):
        g = self.b.gep(bi.ptr, [off_vec], source_etype=_MEM[bi.dtype])
        g.type = ir.VectorType(_PTR, self.lanes)
        return g

    def from_mem(self, x, dtype: str):
        b = self.b
        if dtype == "float16":
            return b.fpext(x, _with_lanes(_F32, x.type))
        if dtype == "bfloat16":
            return _bf16_to_f32(b, x)
        if dtype == "bool":
            return b.icmp_unsigned("!=", x, _splat(x.type, 0))
        return x

    def to_mem(self, x, dtype: str):
        b = self.b
        if dtype == "float16":
            return b.fptrunc(x, _with_lanes(_F16, x.type))
        if dtype == "bfloat16":
            return _f32_to_bf16(b, x)
        if dtype == "bool":
            return b.zext(x, _with_lanes(_I8, x.type))
        return x

    def pad_lanes(self, bi, memty, off) -> int:
        """The lane count an unmasked contiguous vector access (offset ``off``) of
        ``memty`` is widened to, as one masked access with a constant mask: the policy's
        :meth:`~tecomp.codegen.llvm.policy.TargetPolicy.pad_lanes` (AVX-512: the next
        power of two or whole number of zmm registers), never for a buffer a store reads
        back (``_ModuleBuilder.no_pad``).  Returns ``self.lanes`` when no widening
        applies."""
        n = self.lanes
        if (off.v is not None or off.step != 1 or self.mask is not None
                or bi.buffer in self.mb.no_pad):
            return n
        return self.policy.pad_lanes(n, memty)

    def _pad_mask(self, P: int, used: Optional[int] = None):
        """``<P x i1>``: true on the first ``used`` lanes (default ``self.lanes``), false
        on the rest."""
        n = self.lanes if used is None else used
        return ir.Constant(ir.VectorType(_I1, P),
                           [ir.Constant(_I1, 1 if i < n else 0) for i in range(P)])

    def load(self, node: BufferLoad, raw: bool = False) -> Val:
        """The value ``node`` loads (``raw``: as it is in memory, a bool's byte)."""
        bi = self.buf(node.buffer)
        dtype = bi.dtype
        conv = (lambda x, dtype: x) if raw else self.from_mem
        memty = _MEM[dtype]
        align = _SIZE[dtype]
        off, idx = self.offset(bi, node.indices)
        b = self.b
        dims = self.access_checked(node)
        if off.uniform:
            def scalar():
                if dims:
                    self.bounds_check(bi, idx, node, "load", dims)
                return Val(conv(self._tag(
                    b.load(self._elem_ptr(bi, off.s, True), typ=memty, align=align), bi), dtype))

            if self.lanes > 1 and self.mask is not None:
                zero = Val(_splat(memty if raw else _REG[dtype], 0))
                return self.if_value(self.any_lane(self.mask), scalar, lambda: zero, name="ld")
            return scalar()
        if dims:
            self.bounds_check(bi, idx, node, "load", dims)
        vty = self.vtype(memty)
        P = self.pad_lanes(bi, memty, off)
        if P != self.lanes:
            x = self.wide_load(bi, off, memty, align, P, 1)
        elif (off.v is None and off.step == 1 and self.mask is None and PRIVATE_SHIFTED_LOADS
              and _is_const(off.s) and not self._register_aligned(off, memty)
              and bi.buffer not in self.shifted_stores
              and (x := self.private_whole_load(bi, off, memty, align,
                                                list(range(self.lanes)))) is not None):
            # a contiguous read of this function's own stack buffer at a constant
            # offset across two of its stored registers (a stride-1 window's taps from
            # the row of partial results): those registers and a shuffle (``valignd``)
            pass
        elif off.v is None and off.step == 1:
            p = self._elem_ptr(bi, off.s, self.mask is None)
            if self.mask is None:
                x = self._tag(self._vector_load(p, vty, align, bi), bi)
            else:
                x = self.masked_load(p, vty, align, self.mask, bi)
        elif (off.v is None and self.mask is None and off.step > 1
              and (x := self.private_whole_load(
                  bi, off, memty, align, [i * off.step for i in range(self.lanes)]))
              is not None):
            # a strided read of this function's own stack buffer at a constant offset
            # (a window's taps from the row of partial results): the whole registers it
            # was stored in and a shuffle, which LLVM keeps in registers
            pass
        elif (off.v is None and self.mask is None
              and self.policy.strided_wide_load(off.step, self.lanes, memty)):
            # a small constant step (x86: a stride-2 convolution's input row): one
            # contiguous load of step*lanes elements and a shuffle, instead of a gather
            x = self.wide_load(bi, off, memty, align, off.step * self.lanes, off.step)
        elif (off.v is None and self.mask is not None
              and (MASKED_WIDE_LOADS or self.mb.masked_wide_loads)
              and self.policy.strided_wide_load(off.step, self.lanes, memty)):
            # the same under a mask (a padded window's first tap: lane 0 on the
            # padding): lane 0 alone, the others one load from lane 1's element
            x = self.strided_masked_load(bi, off, memty, align, off.step)
        elif (self.mask is None
              and (pat := self.lane_pattern(bi, node.indices, memty)) is not None):
            # constant lane offsets within a short span (a grouped convolution's vector
            # across groups: each group's lanes read one input channel): one contiguous
            # load of the span and a shuffle, instead of a gather
            x = self.pattern_load(bi, pat[0], memty, align, pat[1])
        else:
            ptrs = self._vec_ptrs(bi, self.vec(off))
            pty = ir.VectorType(_PTR, self.lanes)
            f = self.mb.intrinsic("llvm.masked.gather", vty,
                                  [pty, _I32, self.vtype(_I1), vty], [vty, pty])
            m = self.mask if self.mask is not None else self.all_true()
            x = self._tag(b.call(f, [ptrs, ir.Constant(_I32, align), m,
                                     self._fill_of(vty)]), bi)
        return Val(v=conv(x, dtype))

    def _vector_load(self, p, vty, align: int, bi: _Buf):
        """A plain vector load of ``vty`` at ``p``: volatile where the nest loads each use
        of ``bi``'s vectors on its own (``pragma load_each_use``), so that LLVM neither
        merges it with another load of the same vector nor keeps it in a register, and
        folds it into the instruction that uses it where the target can."""
        if bi.buffer.name not in self.mb.load_each_use:
            return self.b.load(p, typ=vty, align=align)
        ld = _VolatileLoad(self.b.block, p, typ=vty)
        ld.align = align
        self.b._insert(ld)
        return ld

    def wide_load(self, bi, off, memty, align, width: int, step: int):
        """The lanes ``base + i*step`` as one ``llvm.masked.load`` of ``width`` contiguous
        elements and a shuffle that keeps every ``step``-th: an odd lane count padded to
        a whole register (``pad_lanes``, step 1) or a load of every ``step``-th element
        (``policy.strided_wide_load``).  The load is masked past the last element the
        lanes use, so it reads nothing they would not."""
        return self.pattern_load(bi, off.s, memty, align,
                                 [i * step for i in range(self.lanes)], width)

    def _register_aligned(self, off, memty) -> bool:
        """Whether the vector access at ``off`` starts at a constant whole number of
        the target's registers of ``memty`` from its buffer's start."""
        per = max(1, self.policy.register_bytes // _IR_SIZE[memty])
        return off.v is None and _is_const(off.s) and off.s.constant % per == 0

    def private_whole_load(self, bi, off, memty, align, offsets):
        """The lanes ``off + offsets[i]`` (``off`` a constant, ``offsets`` constants from
        0 up) of this function's own stack buffer ``bi`` (:attr:`private_bufs`) as plain
        loads of the whole register-wide pieces of the buffer that hold them (the last
        one cut at the buffer's end) and a shuffle; None where ``bi`` is not such a
        buffer, ``off`` not a constant, or the span wider than ``MAX_WIDEN_LANES``.  The
        pieces lie where the vector stores that wrote the buffer put them, so that LLVM
        forwards the stored registers instead of loading across two stores (a
        store-forwarding stall per load: adaptive_max_pool2d 50 -> 7, a window's 8 taps
        read as every 8th element of a local row stored as 16-lane vectors) or
        gathering."""
        n = self.private_bufs.get(bi.buffer)
        if n is None or not PRIVATE_WHOLE_LOADS or not _is_const(off.s):
            return None
        per = max(1, self.policy.register_bytes // _IR_SIZE[memty])
        c = off.s.constant
        start = c - c % per
        end = c + max(offsets) + 1
        if c < 0 or end > n or end - start > MAX_WIDEN_LANES:
            return None
        b = self.b
        pieces = []
        for at in range(start, end, per):
            k = min(per, n - at)
            x = self._tag(b.load(self._elem_ptr(bi, ir.Constant(_I64, at), True),
                                 typ=ir.VectorType(memty, k), align=align), bi)
            pieces.append(x if k == per else b.shuffle_vector(x, _poison(x.type), ir.Constant(
                ir.VectorType(_I32, per), [ir.Constant(_I32, min(i, k - 1))
                                           for i in range(per)])))
        w = _join_pieces(b, pieces, len(pieces) * per)
        return b.shuffle_vector(w, _poison(w.type), ir.Constant(
            ir.VectorType(_I32, len(offsets)), [ir.Constant(_I32, c - start + o)
                                                for o in offsets]))

    def strided_masked_load(self, bi, off, memty, align, step: int):
        """The lanes ``base + i*step`` under ``self.mask`` (lanes off: zero, as a masked
        gather gives): lane 0 a one-element masked load, lanes 1.. one
        ``llvm.masked.load`` of ``step * lanes`` contiguous elements from lane 1's
        element, on at the elements between two lanes that are on (it reads nothing
        outside what they read), and a shuffle that keeps every ``step``-th.  Where the
        padding leaves lane 0 off (a padded window's first tap), LLVM drops its load
        and the wide load starts on data a lane reads: not on the element before it,
        alone in the cache line before (a load masked from there ran a 3x3/2 max
        pooling over 64-byte rows 0.70x as fast; from lane 1's, 0.81x; the gather 1x)."""
        b, L = self.b, self.lanes
        width = step * L
        i1v = ir.VectorType(_I1, L)
        off_ = ir.Constant(i1v, [ir.Constant(_I1, 0)] * L)

        def lanes_at(pick):
            # element j of the wide load: the mask of lane 1 + pick(j) (off past the last)
            return b.shuffle_vector(self.mask, off_, ir.Constant(
                ir.VectorType(_I32, width),
                [ir.Constant(_I32, min(1 + pick(j), L)) for j in range(width)]))
        m = b.and_(lanes_at(lambda j: j // step), lanes_at(lambda j: -(-j // step)))
        wty = ir.VectorType(memty, width)
        p1 = self._elem_ptr(bi, self.iadd(off.s, ir.Constant(_I64, step)), False)
        w = self.masked_load(p1, wty, align, m, bi)
        v = b.shuffle_vector(w, _poison(wty), ir.Constant(
            ir.VectorType(_I32, L), [ir.Constant(_I32, max(0, (i - 1) * step))
                                     for i in range(L)]))
        m0 = b.shuffle_vector(self.mask, off_, ir.Constant(ir.VectorType(_I32, 1),
                                                           [ir.Constant(_I32, 0)]))
        x0 = self.masked_load(self._elem_ptr(bi, off.s, False), ir.VectorType(memty, 1),
                              align, m0, bi)
        return b.insert_element(v, b.extract_element(x0, ir.Constant(_I32, 0)),
                                ir.Constant(_I32, 0))

    def pattern_load(self, bi, base, memty, align, offsets, width: Optional[int] = None):
        """The lanes ``base + offsets[i]`` (``offsets`` constants from 0 up) as one
        ``llvm.masked.load`` of ``width`` contiguous elements from ``base`` (default:
        the span of ``offsets`` rounded up to a power of two) and a shuffle.  The load is
        masked past the last element the lanes use: every element it reads lies between
        two that the lanes read."""
        span = max(offsets) + 1
        width = width or 1 << (span - 1).bit_length()
        wty = ir.VectorType(memty, width)
        w = self.masked_load(self._elem_ptr(bi, base, False), wty, align,
                             self._pad_mask(width, span), bi)
        return self.b.shuffle_vector(w, _poison(wty), ir.Constant(
            ir.VectorType(_I32, len(offsets)), [ir.Constant(_I32, o) for o in offsets]))

    def lane_pattern(self, bi: _Buf, indices, memty):
        """``(base, offsets)`` where the lanes of the load of ``bi`` at ``indices`` read
        ``base + offsets[i]``, ``offsets`` constants from 0 whose span the policy loads
        whole (``policy.pattern_wide_load``), ``base`` a scalar i64; else None.  Applies
        where exactly one variable of the flattened offset differs between lanes, the
        widened loop's, bound to a constant start (a vectorized inner loop): the offset is
        simplified with each lane's value of it, and every difference from lane 0 must
        be a constant (``(o // 4) * 4 + c`` over ``o`` in 0..15: 0, 0, 0, 0, 4, ...)."""
        flat = self._flat_offset(bi, indices)
        if flat is None:
            return None
        wide, fixed = None, {}
        for v in free_vars(flat):
            val = self.env64.get(v, self.env.get(v))
            if val is None:
                continue
            if val.uniform:
                # (a counter of an unrolled loop around: a constant in this copy, so
                # the lanes' offsets may differ by constants only in it: adaptive
                # pooling's x * 50 // 7 over a row of unrolled vectors)
                if _is_const(val.s):
                    fixed[v] = int(val.s.constant)
                continue
            if wide is not None or val.v is not None or not _is_const(val.s):
                return None
            wide = (v, val.s.constant, val.step)
        if wide is None:
            return None
        key = (node_text(flat), wide, self.lanes, tuple(sorted(
            (v.name, id(v), k) for v, k in fixed.items())))
        hit = self._lane_patterns.get(key)
        if hit is None:
            v, start, step = wide
            at = {u: Const(k, u.dtype) for u, k in fixed.items()}
            lanes = [simplify(substitute(flat, {**at, v: Const(start + i * step, v.dtype)}))
                     for i in range(self.lanes)]
            diffs = [simplify(Sub(e, lanes[0], e.dtype)) for e in lanes]
            hit = (None,)
            if all(isinstance(d, Const) for d in diffs):
                d = [int(x.value) for x in diffs]
                lo = min(d)
                offsets = [x - lo for x in d]
                if self.policy.pattern_wide_load(max(offsets) + 1, self.lanes, memty):
                    hit = (lanes[0], lo, offsets)
            if len(self._lane_patterns) > 4096:
                self._lane_patterns.clear()
            self._lane_patterns[key] = hit
        if hit[0] is None:
            return None
        e0, lo, offsets = hit
        base = self.index64(e0)
        if not base.uniform:
            return None
        return self.iadd(base.s, ir.Constant(_I64, lo)), offsets

    def _fill_of(self, vty):
        """The pass-through of a masked load or gather of ``vty``: the select's constant
        that the emitter set for it (``self.fill``, ``emit_expr.FILL_MASKED_LOADS``),
        else zeros."""
        fill = self.fill
        return fill if fill is not None and fill.type == vty else _splat(vty, 0)

    def masked_load(self, p, vty, align: int, mask, bi: _Buf):
        """``llvm.masked.load`` of ``vty`` at ``p`` (zero where ``mask`` is false), as
        register-wide pieces where ``vty`` is wider than a register
        (``policy.register_bytes``).  LLVM's backend splits a wider one itself, and
        aborts the process (an assertion in its alias analysis, llvmlite 0.50 on an AVX2
        Zen 3) when a piece's mask is all false: ``<8 x double>`` masked to its first 4
        lanes, from a fuzzed program."""
        b = self.b
        n, et = vty.count, vty.element
        per = max(1, self.policy.register_bytes // _IR_SIZE[et])
        if n <= per:
            f = self.mb.intrinsic("llvm.masked.load", vty,
                                  [_PTR, _I32, ir.VectorType(_I1, n), vty], [vty, _PTR])
            return self._tag(b.call(f, [p, ir.Constant(_I32, align), mask,
                                        self._fill_of(vty)]), bi)
        pty = ir.VectorType(et, per)
        pieces = []
        for start in range(0, n, per):
            k = min(per, n - start)
            m = _piece(b, mask, start, per)
            if k < per:   # past the end: lanes off
                m = b.and_(m, ir.Constant(ir.VectorType(_I1, per),
                                          [ir.Constant(_I1, int(i < k)) for i in range(per)]))
            q = b.gep(p, [ir.Constant(_I64, start)], source_etype=et)
            f = self.mb.intrinsic("llvm.masked.load", pty,
                                  [_PTR, _I32, ir.VectorType(_I1, per), pty], [pty, _PTR])
            pieces.append(self._tag(b.call(f, [q, ir.Constant(_I32, align), m,
                                               _splat(pty, 0)]), bi))
        return _join_pieces(b, pieces, n)

    def store(self, node: BufferStore, val: Val, raw: bool = False):
        """Store ``val`` (``raw``: already as it is in memory) at ``node``'s place."""
        bi = self.buf(node.buffer)
        dtype = bi.dtype
        memty = _MEM[dtype]
        align = _SIZE[dtype]
        off, idx = self.offset(bi, node.indices)
        b = self.b
        dims = self.access_checked(node)
        if off.uniform and val.uniform:
            def scalar():
                if dims:
                    self.bounds_check(bi, idx, node, "store", dims)
                self._tag(b.store(val.s if raw else self.to_mem(val.s, dtype),
                                  self._elem_ptr(bi, off.s, True), align=align), bi)

            if self.lanes > 1 and self.mask is not None:
                self.if_(self.any_lane(self.mask), scalar, name="st")
            else:
                scalar()
            return
        if dims:
            self.bounds_check(bi, idx, node, "store", dims)
        if bi.buffer in self.private_bufs and not self._register_aligned(off, memty):
            self.shifted_stores.add(bi.buffer)
        vty = self.vtype(memty)
        x = self.vec(val) if raw else self.to_mem(self.vec(val), dtype)
        P = self.pad_lanes(bi, memty, off)
        if P != self.lanes:
            n = self.lanes
            p = self._elem_ptr(bi, off.s, False)
            wty = ir.VectorType(memty, P)
            w = b.shuffle_vector(x, _poison(vty),
                                 ir.Constant(ir.VectorType(_I32, P),
                                             [ir.Constant(_I32, min(i, n)) for i in range(P)]))
            f = self.mb.intrinsic("llvm.masked.store", ir.VoidType(),
                                  [wty, _PTR, _I32, ir.VectorType(_I1, P)], [wty, _PTR])
            self._tag(b.call(f, [w, p, ir.Constant(_I32, align), self._pad_mask(P)]), bi)
        elif off.v is None and off.step == 1:
            p = self._elem_ptr(bi, off.s, self.mask is None)
            if self.mask is None and bi.buffer in self.mb.nontemporal:
                self._nontemporal_store(bi, node.indices, x, p, align)
            elif self.mask is None:
                self._tag(b.store(x, p, align=align), bi)
            elif self._blends(bi, off):
                # this function's own stack buffer, the whole vector inside it: the
                # lanes off keep the values they had (a reduction's partial results
                # under a tail's mask stay in registers, where a masked store kept
                # them in memory)
                old = self._tag(b.load(p, typ=vty, align=align), bi)
                self._tag(b.store(b.select(self.mask, x, old), p, align=align), bi)
            else:
                f = self.mb.intrinsic("llvm.masked.store", ir.VoidType(),
                                      [vty, _PTR, _I32, self.vtype(_I1)], [vty, _PTR])
                self._tag(b.call(f, [x, p, ir.Constant(_I32, align), self.mask]), bi)
        else:
            # scatter: lanes are written in order, so a lane-invariant address keeps the
            # last lane's value, as the serial loop would
            ptrs = self._vec_ptrs(bi, self.vec(off))
            pty = ir.VectorType(_PTR, self.lanes)
            f = self.mb.intrinsic("llvm.masked.scatter", ir.VoidType(),
                                  [vty, pty, _I32, self.vtype(_I1)], [vty, pty])
            m = self.mask if self.mask is not None else self.all_true()
            self._tag(b.call(f, [x, ptrs, ir.Constant(_I32, align), m]), bi)

    def _blends(self, bi: _Buf, off: Val) -> bool:
        """Whether a masked vector store at the constant element offset ``off`` of
        ``bi`` may be a plain store of the old values blended with the new: ``bi`` is
        this function's own stack buffer (:attr:`private_bufs`; no other thread writes
        it) and the whole vector lies inside it."""
        n = self.private_bufs.get(bi.buffer)
        return n is not None and _is_const(off.s) and \
            0 <= off.s.constant and off.s.constant + self.lanes <= n

    def e_load(self, e: BufferLoad) -> Val:
        return self.load(e)

    def s_store(self, s: BufferStore):
        if s.value.dtype != s.buffer.dtype:
            raise InternalError(f"a {s.value.dtype} value is stored into the {s.buffer.dtype} "
                                f"buffer {s.buffer.name}")
        loose = s.buffer in self.loose_bufs
        if BYTE_BOOL_LOGIC and self.lanes > 1 and s.buffer.dtype == "bool" and \
                (isinstance(s.value, And) or (loose and isinstance(s.value, Or))):
            got = self._bool_bytes(s.value)
            if got is not None:
                x, canonical = got
                if not (canonical or loose):
                    x = self._umin(x, 1)
                self.store(s, x, raw=True)
                return
        val = self.expr(s.value)
        self.store(s, val)

    def _umin(self, x: Val, y) -> Val:
        """The unsigned minimum of bytes ``x`` and ``y`` (a Val, or an int for every lane)."""
        if isinstance(y, int):
            y = Val(ir.Constant(_I8, y))
        return self._bytes_op("llvm.umin", x, y)

    def _bytes_op(self, name: str, x: Val, y: Val) -> Val:
        b = self.b
        if x.uniform and y.uniform:
            f = self.mb.intrinsic(name, _I8, [_I8, _I8], [_I8])
            return Val(b.call(f, [x.s, y.s]))
        vx, vy = self.vec(x), self.vec(y)
        f = self.mb.intrinsic(name, vx.type, [vx.type, vx.type], [vx.type])
        return Val(v=b.call(f, [vx, vy]))

    def _bool_bytes(self, e: Expr) -> Optional[Tuple[Val, bool]]:
        """``e``, a bool ``and``/``or`` tree of bool loads, on the bytes in memory (see
        :data:`BYTE_BOOL_LOGIC`): ``(value, canonical)`` (``canonical``: every byte 0 or
        1; a loaded byte may be any non-zero value for true, except in this function's
        own stack buffers, which hold what its stores wrote, but for the
        :attr:`loose_bufs`), or None for any other expression.  ``and`` is the bytes'
        ``umin``, its first operand made 0 or 1 (``umin`` with 1) where neither is;
        ``or`` their ``umax``.  An ``or`` is stored so only into a loose buffer (any
        non-zero byte for true, as every load reads it): made 0 or 1 for any other
        buffer, LLVM turns it back into a mask test (``any`` ran 0.69-1.27x so)."""
        if isinstance(e, BufferLoad):
            if e.dtype != "bool" or e.buffer.dtype != "bool":
                return None
            # (this function's own stack buffer holds only what its stores wrote: 0 or 1,
            # but for one an `or` on the bytes writes)
            return self.load(e, raw=True), \
                e.buffer in self.private_bufs and e.buffer not in self.loose_bufs
        if not isinstance(e, (And, Or)):
            return None
        a = self._bool_bytes(e.a)
        if a is None:
            return None
        c = self._bool_bytes(e.b)
        if c is None:
            return None
        (x, xc), (y, yc) = a, c
        if isinstance(e, Or):
            return self._bytes_op("llvm.umax", x, y), xc and yc
        # (the first operand made 0 or 1 where neither is: a reduction's accumulator, which
        # LLVM then knows is over unrolled steps)
        return self._bytes_op("llvm.umin", x if xc or yc else self._umin(x, 1), y), True

    # -- allocation and prefetch -------------------------------------------------------------
    def s_allocate(self, s: Allocate):
        buf = s.buffer
        if buf in self.bufs:
            raise InternalError(f"buffer {buf.name} is allocated twice")
        _dt.canon(buf.dtype)
        # a negative extent (lowering checks its own symbolic ones at the call; an edited
        # or hand-built function may still have one) is 0: no element, so that every
        # access fails the bounds checks, whose unsigned compare let any index past a
        # negative extent (the stores of `allocate B: float32[n - 5]` at n = 3 wrote past
        # the 1-byte block: "double free or corruption")
        extents = [self.non_negative(self.scalar_index(x)) for x in buf.shape]
        strides = self.declared_strides(buf, extents)
        elem = _SIZE[buf.dtype]
        count, overflow = self.alloc_count(buf, extents, strides)
        name = _sanitize(buf.name)
        if _is_const(count) and count.constant * elem <= MAX_STACK_ALLOC:
            size = _stack_bytes(count.constant * elem)
            if buf not in self.heap_first and self.stack_used + size <= MAX_STACK_FRAME:
                self.stack_used += size
                ptr = self.alloca(ir.ArrayType(_MEM[buf.dtype], max(count.constant, 1)),
                                  name=name, align=64)
            else:   # past the stack budget: in the spill block, 64-byte aligned too
                if self.spill_slot is None:
                    self.spill_slot = self.alloca(_PTR, name="spill.slot", align=8)
                    self.ab.store(ir.Constant(_PTR, None), self.spill_slot, align=8)
                    self.heap_slots.append(self.spill_slot)
                base = self.b.load(self.spill_slot, typ=_PTR, align=8)
                ptr = self.b.gep(base, [ir.Constant(_I64, self.spill_bytes)], inbounds=True,
                                 source_etype=_I8, name=name)
                self.spill_bytes += size
                self.spill_names.append(buf.name)
            self.bufs[buf] = _Buf(buf, ptr, strides, extents)
            private = buf not in self.heap_first and isinstance(ptr, ir.AllocaInstr)
            if private:
                self.private_bufs[buf] = count.constant
                if BYTE_BOOL_LOGIC and buf.dtype == "bool" and collect(
                        s.body, lambda n: isinstance(n, BufferStore) and n.buffer is buf
                        and isinstance(n.value, Or)):
                    self.loose_bufs.add(buf)
            try:
                self.stmt(s.body)
            finally:
                del self.bufs[buf]
                self.private_bufs.pop(buf, None)
                self.loose_bufs.discard(buf)
            return
        b = self.b
        slot = self.alloca(_PTR, name=name + ".slot", align=8)
        self.ab.store(ir.Constant(_PTR, None), slot, align=8)
        self.heap_slots.append(slot)
        site = self.mb.add_site("malloc", buf.name, f"allocate {buf.name}",
                                node_text(s))
        if overflow is not None:
            nbytes, o = self.checked("smul", count, ir.Constant(_I64, elem))
            overflow = b.or_(overflow, o)
            # a size past 64 bits: the error, with -1 for the byte count
            self.guard(overflow, lambda: self.report(ERR_MALLOC, site, None, None, -1),
                       name="size")
        else:
            nbytes = self.imul(count, ir.Constant(_I64, elem))
        if not _is_const(nbytes):
            nbytes = b.select(b.icmp_signed("<", nbytes, ir.Constant(_I64, 1)),
                              ir.Constant(_I64, 1), nbytes)
        elif nbytes.constant < 1:
            nbytes = ir.Constant(_I64, 1)
        # 64-byte aligned, as the stack buffers: a 16-lane vector at a 16-byte offset
        # straddles two cache lines (the packed GEMM's B panels ran faster aligned)
        # (measurements: benchmarks/DECISIONS.md, "Code generator: aligned heap buffers")
        # (tecomp_ws_alloc: the thread pool's workspace cache, which keeps large freed
        # blocks for the next call instead of giving them back to the system)
        p = b.call(self._ws_alloc(), [nbytes], name=name)
        self.guard(b.icmp_unsigned("==", p, ir.Constant(_PTR, None)),
                   lambda: self.report(ERR_MALLOC, site, None, None, nbytes), name="malloc")
        b.store(p, slot, align=8)
        self.bufs[buf] = _Buf(buf, p, strides, extents)
        try:
            self.stmt(s.body)
        finally:
            del self.bufs[buf]
        b.call(self.mb.declare(WS_FREE, ir.VoidType(), [_PTR]), [p])
        b.store(ir.Constant(_PTR, None), slot, align=8)

    def checked(self, op: str, x, y):
        """``(x op y, overflowed)`` of i64 values, ``op`` "smul" or "sadd": overflowed when
        the result does not fit a signed i64 (``llvm.<op>.with.overflow``)."""
        b = self.b
        f = self.mb.intrinsic(f"llvm.{op}.with.overflow",
                              ir.LiteralStructType([_I64, _I1]), [_I64, _I64], [_I64])
        r = b.call(f, [x, y])
        return b.extract_value(r, 0), b.extract_value(r, 1)

    def alloc_count(self, buf: Buffer, extents, strides):
        """Elements of an allocation of ``buf``: ``(count, None)`` for a constant size
        (a ResourceLimitError past 2^62 bytes), else ``(count, overflowed)``, computed
        without wrapping (a negative extent counts as 0; the loops over it run 0 times)."""
        if all(_is_const(e) for e in extents) and all(_is_const(x) for x in strides):
            if buf.strides is None:
                n = 1
                for e in extents:
                    n *= max(int(e.constant), 0)
            else:
                n = 1 + sum((max(int(e.constant), 1) - 1) * int(st.constant)
                            for e, st in zip(extents, strides))
            if n * _SIZE[buf.dtype] >= 2 ** 62:
                raise ResourceLimitError(
                    f"buffer {buf.name} would take {n * _SIZE[buf.dtype]} bytes, more than "
                    f"any machine's memory; compute it in smaller tiles (compute_at)")
            return ir.Constant(_I64, n), None
        b = self.b
        zero, one = ir.Constant(_I64, 0), ir.Constant(_I64, 1)
        overflow = ir.Constant(_I1, 0)
        count = one
        for k, e in enumerate(extents):
            if buf.strides is None:
                e = b.select(b.icmp_signed("<", e, zero), zero, e)
                count, o = self.checked("smul", count, e)
            else:
                # padded strides (storage_align): the span is 1 + sum((extent - 1) * stride)
                e = b.select(b.icmp_signed("<", e, one), one, e)
                term, o = self.checked("smul", b.sub(e, one), strides[k])
                overflow = b.or_(overflow, o)
                count, o = self.checked("sadd", count, term)
            overflow = b.or_(overflow, o)
        return count, overflow

    def s_prefetch(self, s: Prefetch):
        """``llvm.prefetch(ptr, rw, locality, data cache)`` on the element's address,
        locality ``4 - level`` (x86: ``prefetcht0``, ``t1`` or ``t2`` for cache level 1, 2
        or 3, or ``prefetchw`` for a write where the CPU has PRFCHW).  The
        address is flattened like a load's (declared or run-time strides) through a plain
        getelementptr.  Inside a widened body a lane-dependent address gets one prefetch
        per lane; under a lane mask nothing is emitted (it is only a hint)."""
        bi = self.buf(s.buffer)
        off, _ = self.offset(bi, s.indices)
        f = self.mb.intrinsic("llvm.prefetch", ir.VoidType(), [_PTR, _I32, _I32, _I32], [_PTR])
        hint = [ir.Constant(_I32, 1 if s.write else 0), ir.Constant(_I32, 4 - s.level),
                ir.Constant(_I32, 1)]
        b = self.b
        if off.uniform:
            b.call(f, [self._elem_ptr(bi, off.s, False)] + hint)
            return
        if self.mask is not None:
            return
        vec = self.vec(off)
        for lane in range(self.lanes):
            o = b.extract_element(vec, ir.Constant(_I32, lane))
            b.call(f, [self._elem_ptr(bi, o, False)] + hint)
