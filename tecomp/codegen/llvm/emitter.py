"""The function emitter: lowers a PrimFunc's statements and expressions into one LLVM
function (:class:`_FnEmitter`; the module around it: :mod:`tecomp.codegen.llvm.module`).

Lowering
--------
* **Index arithmetic** runs in i64: an index expression made of ``+``, ``-``, ``*`` of
  int32/int64 terms is evaluated in 64 bits (other subterms are evaluated in their own
  dtype and sign-extended), then multiplied by the strides.  For every in-bounds access
  this equals the int32 result; an index whose int32 evaluation would wrap is out of
  bounds anyway.  Value arithmetic keeps the IR's wrapping semantics (no ``nsw``).
* **Loops**: ``serial`` loops are rotated i64 counted loops.  ``unrolled`` loops with a
  constant extent (up to 1024) are fully unrolled at code generation; otherwise they
  get ``llvm.loop.unroll.enable``.
* **vectorized** loops are *widened*: the body is emitted once with the loop variable
  as the vector ``<base, base+1, ..., base+L-1>``.  Values are tracked as uniform
  (scalar), affine (``base + lane*step``, integers) or general vectors: a load whose
  flattened offset is affine with step 1 is a vector load (an offset whose indices are
  not affine, as a fused axis's ``f // 14`` and ``f % 14``, is flattened in the IR and
  simplified first: ``(f // 14)*14 + f % 14`` is ``f``), a lane-invariant one a
  scalar load (+ broadcast), affine with a small constant step (x86: 2-4, a strided
  convolution's input row; ``policy.strided_wide_load``) one wider masked load and a
  shuffle (``wide_load``), anything else a ``llvm.masked.gather``; a store is a vector
  store, a scalar store or a ``llvm.masked.scatter``.  An ``if`` whose condition
  depends on the lane, a ``Select`` with loads in its branches, and the tail of a loop
  with a symbolic extent are *predicated*: loads and stores under a lane mask become
  ``llvm.masked.load``/``store``/``gather``/``scatter``.  On AVX-512 (the x86 policy's
  ``pad_lanes``) an unmasked contiguous load or store whose lane count is not a power
  of two (14 float32: a 56-wide row in 4 blocks) is one ``llvm.masked.load``/``store``
  of the next power of two (or whole number of zmm registers) with a constant mask,
  instead of LLVM's 8 + 4 + 2 lane pieces and inserts (``_FnEmitter.pad_lanes``); not
  for buffers a store reads back (accumulators: LLVM keeps a plain load/store pair in a
  register across a loop, a masked one not).  A constant extent L up to 64
  is one vector of L lanes (LLVM splits wide vectors into native registers), except
  without AVX-512 when L is not a whole number of 256-bit registers (14 float32 on AVX2):
  then register-wide pieces and a shorter last one, in sequence; a larger
  or symbolic extent is strip-mined into chunks of the native width plus a remainder
  (a shorter vector for constant extents, a masked chunk for symbolic ones).  A masked
  load wider than a register (``policy.register_bytes``) is emitted as register-wide
  masked loads (``_FnEmitter.masked_load``: LLVM aborted on one whose upper half was
  masked off).  Nested loops inside a widened body run serially with lane-invariant
  bounds.  Widening assumes, as TVM does, that the iterations are independent.  It is
  not possible -- and the loop becomes a serial loop tagged
  ``llvm.loop.vectorize.enable`` for LLVM's own loop vectorizer -- when the body
  allocates a buffer, a nested loop's bounds depend on the lane, or a lane-dependent
  value is stored to a lane-invariant address (a reduction along the vectorized axis).
  Which of these a loop gets (and why) is the lowering's decision: the ``vector_plan``
  pass (``tecomp/lower/vectorize.py``) leaves a plan on every vectorized loop, and this
  module only follows it.
  ``Module.vectorize_notes`` says what happened to each vectorized loop.
* **parallel** loops are outlined into ``tecomp_<name>.par<k>(closure, begin, end)``
  (every captured non-constant value travels in a stack closure struct; constants such
  as compile-time strides stay constants) and dispatched with ``tecomp_parallel_for``
  (see :mod:`tecomp.codegen.llvm.threadpool`).  A parallel loop inside another parallel
  loop's body, or inside a widened body, runs serially.  What a task captures, and which
  loops are nested, is the ``parallel_plan`` pass's (``tecomp/lower/parallel.py``).
* **Allocate**: constant-size buffers up to 64 KiB are ``alloca``s in the entry block of
  the enclosing function (the outlined function inside a parallel body, so each task
  has its own), up to 512 KiB of them per function (:func:`frame_overflow` chooses, the
  innermost first); the others share one ``tecomp_ws_alloc`` block per call of the
  function (the "spill" block, taken before its body runs, each buffer at a 64-byte
  aligned offset); larger or symbolic ones use ``tecomp_ws_alloc`` (64-byte aligned, as
  the ``alloca``s) and ``tecomp_ws_free``, the thread pool's workspace cache, which keeps
  large freed blocks for the next call (NULL -> error code 2; an error exit frees every
  live heap buffer).  ``tecomp_ws_alloc`` is declared ``noalias``, as malloc is: its
  block is reached through no other pointer, so LLVM keeps values loaded from the
  kernel's arrays across stores to it (without it, attention's scratch past 64 KiB ran
  1.5x slower than the same scratch on the stack).
* **Prefetch**: ``llvm.prefetch.p0(ptr, rw, 3, 1)`` on the element's address, computed
  like a load's (both layouts) through a plain, non-``inbounds`` getelementptr; ``rw`` is
  1 for a write-intent prefetch (x86 ``prefetchw`` where the CPU has PRFCHW, else
  ``prefetcht0``), 0 for a read (``prefetcht0``).
* **Numerics**: see ``tecomp/ir/expr.py``.  Integer division by a zero divisor (and
  ``INT_MIN // -1``) does not trap: ``x // 0`` and ``x % 0`` give 0 (as numpy), so a
  kernel never kills the process; divisions by non-zero constants compile to plain
  LLVM divisions.  Float ``min``/``max`` of vectors are, on x86
  (``policy.vector_minmax_select``), a compare and select (``vminps``/``vmaxps``) plus a
  NaN test of the first operand; of scalars, and of vectors elsewhere,
  ``llvm.minimum``/``llvm.maximum`` (LLVM's loop vectorizer hung on a scalar max
  reduction in the compare-select form): NaN propagates as in numpy, and which zero
  ``max(0.0, -0.0)`` gives is unspecified.  Float -> int
  conversion is ``fptosi`` (frozen, so an out-of-range value gives an unspecified
  number, never poison); to int8/int16/uint8 it goes through int32 and wraps, like
  numpy on x86.  ``float64 -> float16`` rounds
  once (an odd-rounding step through float32).  ``round`` is ``llvm.roundeven``.
  ``log``, ``sqrt``, ``sin``, ``cos``, ``pow``, ``floor``, ``ceil``, ``abs`` and
  float64 ``exp`` are LLVM intrinsics (libm calls per lane where the CPU has no
  instruction); ``tanh`` and float64 ``erf`` call libm per lane; float32 ``erf`` is
  tecomp's own vector code (``_FnEmitter.erf_f32``, at most 1.62 ulp); ``rsqrt`` is
  ``1/sqrt(x)``.
  Float32 ``exp`` is tecomp's own vector code (``_FnEmitter.exp_f32``; ``llvm.exp``
  would be one libm ``expf`` call per lane): a Cephes-style range reduction
  (``n = roundeven(x*log2 e)``, two-constant ``ln 2``), a degree-6 polynomial and an
  exponent scaling split in two steps, in plain vector instructions, with explicit
  ``llvm.fma`` where the target has FMA (``policy.has_fma``: x86 FMA3) and separate
  multiplies and adds elsewhere.  No step is ever contracted, so the schedule never
  changes the result (vectorized, scalar, unrolled, lane-invariant code: identical
  bits).  Both variants were run on all 2^32 float32 inputs against numpy's float64
  exp rounded to float32: at most **1 ulp** from it (FMA: 0.40% of inputs 1 ulp off,
  largest error 1.02 ulp of the exact value; no FMA: 0.42%, 0.99 ulp), subnormal results
  included;
  ``inf`` from 88.72284 up, 0 from -103.97209 down, NaN kept, ``exp(-0.0) = 1``.
  ``fast_exp`` is the same code (an alias kept for TVM's ``topi.fast_exp`` users);
  ``sigmoid`` is ``1/(1+exp(-x))`` with that exp (relative error < 3e-7, measured
  1.48e-7, down to -87.3; 0 below -88.72, where ``exp(-x)`` overflows).
* **Floating point** is strict IEEE by default (no reassociation, no FMA contraction),
  so elementwise arithmetic matches numpy bit for bit.  ``PrimFunc.attrs["fp_contract"] =
  True`` marks float ``+ - *`` ``contract`` so LLVM may fuse ``a*b + c`` into one FMA
  (TVM's default; faster reductions, one rounding less).
* **checks=True**: every load and store checks each index against its dimension's
  extent (one unsigned compare); a failure records the site and returns code 1.  Check
  sites carry precomputed messages naming the buffer and the printed IR.

Where the instructions for a construct depend on the CPU rather than on LLVM's
semantics (register width, lane padding, strided loads, FMA, vector min/max), the
emitter asks its target policy, ``self.policy`` (:mod:`tecomp.codegen.llvm.policy`;
x86: :mod:`tecomp.codegen.llvm.x86`).

Errors while lowering a node are re-raised naming that node and its statement (the way
numba reports lowering errors): user-fixable problems as :class:`BuildError`, broken
invariants as :class:`InternalError`.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Optional, Tuple

import llvmlite.ir as ir

from ...errors import BuildError, InternalError, ResourceLimitError, TecompError
from ...ir import dtype as _dt
from ...ir.expr import (
    EQ, GE, GT, LE, LT, NE, SPECIAL_CALLS, Add, And, Buffer, BufferLoad, Call, Cast, CmpOp,
    Const, Div, Expr, FloorDiv, FloorMod, Let, Max, Min, Mul, Not, Or, ProducerLoad, Reduce,
    Select, Sub, TruncDiv, TruncMod, Var,
)
from ...ir.functor import children, collect
from ...ir.simplify import simplify
from ...ir.stmt import (
    Allocate, AssertStmt, AttrStmt, BufferStore, Evaluate, ExternCall, For, IfThenElse, LetStmt,
    Prefetch, SeqStmt, Stmt, TensorIntrinCall,
)
from ...lower import parallel as _par
from ...lower import vectorize as _vec
from ...lower.vectorize import node_text
from ...te.tensor_intrin import builtin_name, row_major
from . import jit as llvm_jit
from .abi import ERR_ASSERT, ERR_BOUNDS, ERR_EXTERN, ERR_MALLOC, ERR_WORDS
from .threadpool import WS_ALLOC, WS_FREE
from .intrinsics import IntrinBuilder, IntrinView, _bf16_to_f32, _f32_to_bf16, _f64_to_f16, _Freeze
from .values import (
    _F16, _F32, _F64, _I1, _I8, _I32, _I64, _IR_SIZE, _MEM, _PTR, _REG, _SIZE, Val, _Buf,
    _i64_at, _is_const, _lit, _operand_key, _poison, _sanitize, _splat, _splat_const, _unsigned,
    _with_lanes, _wrap_signed,
)

#: an unrolled loop with a constant extent up to this is unrolled at code generation
MAX_FULL_UNROLL = 1024
#: allocations up to this many bytes (constant size) live on the stack ...
MAX_STACK_ALLOC = 64 * 1024
#: ... as long as those of one function (the kernel's body, or one parallel task) take at
#: most this many bytes together: the rest go to the workspace (see :func:`frame_overflow`).
#: A task runs on a pool thread or the caller's, and the caller's frame holds its own
#: buffers meanwhile: 2 x 512 KiB stays well inside the smallest default thread stack
#: (2 MiB, glibc's where the stack limit is unlimited; 8 MiB is usual)
MAX_STACK_FRAME = 512 * 1024


#: a lazy vector select whose sides have more nodes than this runs them masked only:
#: its fast path (the side every lane takes, unmasked) copies each side once more, and a
#: chain of selects, each holding the ones below, would grow as the square of its depth
SELECT_FAST_PATH_NODES = 64


def _small(e) -> bool:
    """Whether ``e`` has at most :data:`SELECT_FAST_PATH_NODES` nodes (counted without
    recursion, stopping past the limit)."""
    n, todo = 0, [e]
    while todo:
        n += 1
        if n > SELECT_FAST_PATH_NODES:
            return False
        todo.extend(children(todo.pop()))
    return True


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


class _Annotated:
    """Marker attribute name on exceptions that already name their IR node."""

    attr = "_tecomp_lowering_context"


_INTERNAL_PREFIX = str(InternalError(""))


def _internal_message(exc: InternalError) -> str:
    """The message of an InternalError without the standard "this is a bug" prefix."""
    s = str(exc)
    return s[len(_INTERNAL_PREFIX):] if s.startswith(_INTERNAL_PREFIX) else s


def _annotate(exc: BaseException, node, stmt) -> BaseException:
    if getattr(exc, _Annotated.attr, False):
        return exc
    where = f"{type(node).__name__} `{node_text(node)}`"
    if stmt is not None and stmt is not node:
        where += f" in the statement `{node_text(stmt)}`"
    if isinstance(exc, InternalError):
        new = InternalError(f"{_internal_message(exc)}\n  while lowering {where}")
    elif isinstance(exc, TecompError):
        try:
            new = type(exc)(f"{exc}\n  while lowering {where}")
        except Exception:  # noqa: BLE001 - exotic constructor: keep the original
            new = exc
    else:
        new = InternalError(f"LLVM code generation failed with {type(exc).__name__}: {exc}\n"
                            f"  while lowering {where}")
    try:
        setattr(new, _Annotated.attr, True)
    except Exception:  # noqa: BLE001
        pass
    if new is not exc:
        new.__cause__ = exc
    return new



# ---------------------------------------------------------------------------------------
# function emitter


class _FnEmitter:
    """Lowers statements and expressions into one LLVM function."""

    def __init__(self, mb, fn: ir.Function, err, *, in_parallel: bool):
        self.mb = mb              # the module's _ModuleBuilder
        self.policy = mb.policy   # the target's decisions (policy.py, x86.py)
        self.fn = fn
        self.err = err
        self.in_parallel = in_parallel
        self.checks = mb.checks
        self.entry = fn.append_basic_block("entry")
        self.start = fn.append_basic_block("start")
        self.ab = ir.IRBuilder(self.entry)       # allocas and entry-time initialisation
        self.b = ir.IRBuilder(self.start)
        self.env: Dict[Var, Val] = {}
        self.env64: Dict[Var, Val] = {}
        self.bufs: Dict[Buffer, _Buf] = {}
        self.lanes = 1
        self.mask = None
        self.heap_slots: List[object] = []
        #: the bytes of the frame the Allocates took so far, and which buffers go to the
        #: workspace for the frame's budget (:func:`frame_overflow`; set by the caller)
        self.stack_used = 0
        self.heap_first: set = set()
        #: the buffers past the budget: one workspace block per call (its pointer in
        #: ``spill_slot``), each buffer at its offset in it
        self.spill_slot = None
        self.spill_bytes = 0
        self.spill_names: List[str] = []
        self._err_block = None
        self._stmt_stack: List[Stmt] = []
        #: id(For) -> llvm.loop.unroll.count (from pragma "unroll_count")
        self._unroll_count: Dict[int, int] = {}
        #: (op, operand keys) -> (block, value) for :meth:`_int_op`
        self._int_cse: Dict[tuple, tuple] = {}

    # -- function frame ---------------------------------------------------------------
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

    def error_block(self):
        if self._err_block is None:
            self._err_block = self.fn.append_basic_block("error")
        return self._err_block

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

    def report(self, code: int, site: int, dim=None, index=None, extent=None):
        """Record an error (first one wins) and jump to the error exit."""
        b = self.b
        pair = b.cmpxchg(self.err, ir.Constant(_I64, 0), ir.Constant(_I64, code),
                         "seq_cst", "seq_cst")
        won = b.extract_value(pair, 1)
        vals = [ir.Constant(_I64, site), dim, index, extent]

        def store_fields():
            for w, v in enumerate(vals, start=1):
                if v is None:
                    continue
                if isinstance(v, int):
                    v = ir.Constant(_I64, v)
                b.store(v, _i64_at(b, self.err, w), align=8)

        self.if_(won, store_fields)
        b.branch(self.error_block())

    def guard(self, fail, on_fail: Callable[[], None], name: str = "check"):
        """If ``fail`` (i1), run ``on_fail`` (which must end in a jump); else continue."""
        b = self.b
        bad = self.fn.append_basic_block(f"{name}.fail")
        ok = self.fn.append_basic_block(f"{name}.ok")
        br = b.cbranch(fail, bad, ok)
        br.set_weights([1, 1 << 20])
        b.position_at_end(bad)
        on_fail()
        b.position_at_end(ok)

    # -- control flow helpers --------------------------------------------------------
    def if_(self, cond, then_fn: Callable[[], None], else_fn: Optional[Callable[[], None]] = None,
            name: str = "if"):
        b = self.b
        then_bb = self.fn.append_basic_block(f"{name}.then")
        else_bb = self.fn.append_basic_block(f"{name}.else") if else_fn else None
        end_bb = self.fn.append_basic_block(f"{name}.end")
        b.cbranch(cond, then_bb, else_bb or end_bb)
        b.position_at_end(then_bb)
        then_fn()
        if not b.block.is_terminated:
            b.branch(end_bb)
        if else_fn:
            b.position_at_end(else_bb)
            else_fn()
            if not b.block.is_terminated:
                b.branch(end_bb)
        b.position_at_end(end_bb)

    def if_value(self, cond, then_fn: Callable[[], Val], else_fn: Callable[[], Val],
                 name: str = "sel") -> Val:
        """``cond ? then_fn() : else_fn()`` evaluating only one side (a branch + phi)."""
        b = self.b
        then_bb = self.fn.append_basic_block(f"{name}.then")
        else_bb = self.fn.append_basic_block(f"{name}.else")
        end_bb = self.fn.append_basic_block(f"{name}.end")
        b.cbranch(cond, then_bb, else_bb)
        b.position_at_end(then_bb)
        tv = then_fn()
        t_end = b.block
        b.position_at_end(else_bb)
        fv = else_fn()
        f_end = b.block
        both_uniform = tv.uniform and fv.uniform
        b.position_at_end(t_end)
        t = tv.s if both_uniform else self.vec(tv)
        b.branch(end_bb)
        b.position_at_end(f_end)
        f = fv.s if both_uniform else self.vec(fv)
        b.branch(end_bb)
        b.position_at_end(end_bb)
        phi = b.phi(t.type, name=name)
        phi.add_incoming(t, t_end)
        phi.add_incoming(f, f_end)
        return Val(phi) if both_uniform else Val(v=phi)

    def loop(self, name: str, lo, n, body_fn: Callable[[object], None], md=None):
        """``for iv in [lo, lo + n)`` (i64), guarded and rotated; ``md``: llvm.loop node."""
        b = self.b
        end = self.iadd(lo, n)
        pre = b.block
        body_bb = self.fn.append_basic_block(f"{name}.body")
        exit_bb = self.fn.append_basic_block(f"{name}.exit")
        b.cbranch(b.icmp_signed("<", lo, end), body_bb, exit_bb)
        b.position_at_end(body_bb)
        iv = b.phi(_I64, name=name)
        iv.add_incoming(lo, pre)
        body_fn(iv)
        nxt = b.add(iv, ir.Constant(_I64, 1), name=f"{name}.next", flags=["nsw"])
        latch = b.block
        br = b.cbranch(b.icmp_signed("<", nxt, end), body_bb, exit_bb)
        if md is not None:
            br.set_metadata("llvm.loop", md)
        iv.add_incoming(nxt, latch)
        b.position_at_end(exit_bb)

    def with_loop_var(self, var: Var, v64: Val, fn: Callable[[], None]):
        """Run ``fn`` with ``var`` bound to the i64 value ``v64`` (and its native dtype)."""
        old, old64 = self.env.get(var), self.env64.get(var)
        self.env64[var] = v64
        self.env[var] = self.int_convert(v64, "int64", var.dtype)
        try:
            fn()
        finally:
            _restore(self.env, var, old)
            _restore(self.env64, var, old64)

    # -- lane helpers ---------------------------------------------------------------------
    def vtype(self, scalar_ty):
        return ir.VectorType(scalar_ty, self.lanes)

    def bcast(self, s):
        """Broadcast the scalar ``s`` to a vector of ``self.lanes``."""
        vty = self.vtype(s.type)
        if isinstance(s, ir.Constant) and not isinstance(s.type, ir.PointerType):
            return _splat_const(vty, s)
        b = self.b
        v = b.insert_element(_poison(vty), s, ir.Constant(_I32, 0))
        return b.shuffle_vector(v, _poison(vty),
                                _lit(ir.VectorType(_I32, self.lanes), "zeroinitializer"))

    def vec(self, val: Val):
        """Materialise ``val`` as a vector of ``self.lanes``."""
        if val.v is not None:
            return val.v
        bc = self.bcast(val.s)
        if val.step == 0:
            return bc
        ty = val.s.type
        steps = ir.Constant(self.vtype(ty), [ir.Constant(ty, _wrap_signed(l * val.step, ty.width))
                                             for l in range(self.lanes)])
        return self.b.add(bc, steps)

    def lanes_iota(self):
        return ir.Constant(ir.VectorType(_I64, self.lanes),
                           [ir.Constant(_I64, l) for l in range(self.lanes)])

    def map1(self, val: Val, fn) -> Val:
        if val.uniform:
            return Val(fn(val.s))
        return Val(v=fn(self.vec(val)))

    def map2(self, a: Val, c: Val, fn) -> Val:
        if a.uniform and c.uniform:
            return Val(fn(a.s, c.s))
        return Val(v=fn(self.vec(a), self.vec(c)))

    def any_lane(self, mask_vec):
        """i1: is any lane of the <L x i1> ``mask_vec`` set?"""
        b = self.b
        bits = b.bitcast(mask_vec, ir.IntType(self.lanes))
        return b.icmp_unsigned("!=", bits, ir.Constant(ir.IntType(self.lanes), 0))

    def and_mask(self, m):
        """The current mask and ``m`` (a lane vector of i1)."""
        if self.mask is None:
            return m
        return self.b.and_(self.mask, m)

    def masked(self, mask, fn):
        """Run ``fn`` with ``mask`` as the lane mask, skipping it when no lane is on."""
        old = self.mask

        def run():
            self.mask = mask
            try:
                fn()
            finally:
                self.mask = old

        if mask is None:
            run()
        else:
            self.if_(self.any_lane(mask), run, name="lanes")

    # -- integer helpers with folding ----------------------------------------------------------
    def _int_op(self, op: str, x, y):
        """``x op y`` emitted once per basic block: the unrolled bodies index every load
        with the same few products and sums, and each copy is text for llvmlite to print,
        LLVM to parse and its passes to fold again.  A value from the current block
        dominates the builder's position (it only ever appends at a block's end)."""
        blk = self.b.block
        key = (op, _operand_key(x), _operand_key(y))
        hit = self._int_cse.get(key)
        if hit is not None and hit[0] is blk:
            return hit[1]
        r = getattr(self.b, op)(x, y)
        self._int_cse[key] = (blk, r)
        return r

    def iadd(self, x, y):
        if _is_const(x) and _is_const(y):
            return ir.Constant(x.type, _wrap_signed(x.constant + y.constant, x.type.width))
        if _is_const(x) and x.constant == 0:
            return y
        if _is_const(y) and y.constant == 0:
            return x
        return self._int_op("add", x, y)

    def isub(self, x, y):
        if _is_const(x) and _is_const(y):
            return ir.Constant(x.type, _wrap_signed(x.constant - y.constant, x.type.width))
        if _is_const(y) and y.constant == 0:
            return x
        return self._int_op("sub", x, y)

    def imul(self, x, y):
        if _is_const(x) and _is_const(y):
            return ir.Constant(x.type, _wrap_signed(x.constant * y.constant, x.type.width))
        if _is_const(x) and x.constant == 1:
            return y
        if _is_const(y) and y.constant == 1:
            return x
        if (_is_const(x) and x.constant == 0) or (_is_const(y) and y.constant == 0):
            return ir.Constant(x.type, 0)
        return self._int_op("mul", x, y)

    def vadd(self, a: Val, c: Val, sub: bool = False) -> Val:
        """Integer add/sub keeping affine structure."""
        if a.lane_affine and c.lane_affine:
            s = self.isub(a.s, c.s) if sub else self.iadd(a.s, c.s)
            return Val(s, a.step - c.step if sub else a.step + c.step)
        f = self.b.sub if sub else self.b.add
        return Val(v=f(self.vec(a), self.vec(c)))

    def vmul(self, a: Val, c: Val) -> Val:
        """Integer multiply keeping affine structure when one side is a constant."""
        if a.uniform and c.uniform:
            return Val(self.imul(a.s, c.s))
        if a.lane_affine and c.lane_affine:
            if c.uniform and _is_const(c.s):
                return Val(self.imul(a.s, c.s), a.step * c.s.constant)
            if a.uniform and _is_const(a.s):
                return Val(self.imul(a.s, c.s), c.step * a.s.constant)
        return Val(v=self.b.mul(self.vec(a), self.vec(c)))

    def int_convert(self, val: Val, src: str, dst: str) -> Val:
        """Integer -> integer conversion keeping affine structure (see the docstring)."""
        if src == dst:
            return val
        sb = 1 if src == "bool" else _dt.bits(src)
        db = 1 if dst == "bool" else _dt.bits(dst)
        ty = _REG[dst]
        b = self.b
        if dst == "bool":
            return self.map1(val, lambda x: b.icmp_unsigned("!=", x, _splat(x.type, 0)))
        if db == sb:
            return val
        if val.v is None and _is_const(val.s) and (val.step == 0 or not _unsigned(src)):
            # fold (unrolled and widened loops bind constants), as the affine case below
            c = val.s.constant
            if db > sb and _unsigned(src):
                c &= (1 << sb) - 1
            return Val(ir.Constant(ty, _wrap_signed(c, db)), val.step)
        if db < sb:
            f = lambda x: b.trunc(x, _with_lanes(ty, x.type))  # noqa: E731
        elif _unsigned(src):
            f = lambda x: b.zext(x, _with_lanes(ty, x.type))  # noqa: E731
        else:
            f = lambda x: b.sext(x, _with_lanes(ty, x.type))  # noqa: E731
        if val.v is None and val.step != 0 and not _unsigned(src):
            return Val(f(val.s), val.step)
        return self.map1(val, f)

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

    def declared_strides(self, buf: Buffer, extents) -> List[object]:
        if buf.strides is not None:
            return [self.scalar_index(s) for s in buf.strides]
        out = []
        acc = ir.Constant(_I64, 1)
        for ext in reversed(extents):
            out.append(acc)
            acc = self.imul(acc, ext)
        return list(reversed(out))

    # -- memory ------------------------------------------------------------------------
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

    def bounds_check(self, bi: _Buf, idx: List[Val], node, kind: str):
        stmt = self._stmt_stack[-1] if self._stmt_stack else node
        site = self.mb.add_site(kind, bi.buffer.name, node_text(node), node_text(stmt))
        b = self.b
        for d, (ix, ext) in enumerate(zip(idx, bi.extents)):
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

    def all_true(self):
        return ir.Constant(ir.VectorType(_I1, self.lanes), [ir.Constant(_I1, 1)] * self.lanes)

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

    def load(self, node: BufferLoad) -> Val:
        bi = self.buf(node.buffer)
        dtype = bi.dtype
        memty = _MEM[dtype]
        align = _SIZE[dtype]
        off, idx = self.offset(bi, node.indices)
        b = self.b
        if off.uniform:
            def scalar():
                if self.checks:
                    self.bounds_check(bi, idx, node, "load")
                return Val(self.from_mem(
                    b.load(self._elem_ptr(bi, off.s, True), typ=memty, align=align), dtype))

            if self.lanes > 1 and self.mask is not None:
                zero = Val(_splat(_REG[dtype], 0))
                return self.if_value(self.any_lane(self.mask), scalar, lambda: zero, name="ld")
            return scalar()
        if self.checks:
            self.bounds_check(bi, idx, node, "load")
        vty = self.vtype(memty)
        P = self.pad_lanes(bi, memty, off)
        if P != self.lanes:
            x = self.wide_load(bi, off, memty, align, P, 1)
        elif off.v is None and off.step == 1:
            p = self._elem_ptr(bi, off.s, self.mask is None)
            if self.mask is None:
                x = b.load(p, typ=vty, align=align)
            else:
                x = self.masked_load(p, vty, align, self.mask)
        elif (off.v is None and self.mask is None
              and self.policy.strided_wide_load(off.step, self.lanes, memty)):
            # a small constant step (x86: a stride-2 convolution's input row): one
            # contiguous load of step*lanes elements and a shuffle, instead of a gather
            x = self.wide_load(bi, off, memty, align, off.step * self.lanes, off.step)
        else:
            ptrs = self._vec_ptrs(bi, self.vec(off))
            pty = ir.VectorType(_PTR, self.lanes)
            f = self.mb.intrinsic("llvm.masked.gather", vty,
                                  [pty, _I32, self.vtype(_I1), vty], [vty, pty])
            m = self.mask if self.mask is not None else self.all_true()
            x = b.call(f, [ptrs, ir.Constant(_I32, align), m, _splat(vty, 0)])
        return Val(v=self.from_mem(x, dtype))

    def wide_load(self, bi, off, memty, align, width: int, step: int):
        """The lanes ``base + i*step`` as one ``llvm.masked.load`` of ``width`` contiguous
        elements and a shuffle that keeps every ``step``-th: an odd lane count padded to
        a whole register (``pad_lanes``, step 1) or a load of every ``step``-th element
        (``policy.strided_wide_load``).  The load is masked past the last element the
        lanes use, so it reads nothing they would not."""
        n = self.lanes
        wty = ir.VectorType(memty, width)
        w = self.masked_load(self._elem_ptr(bi, off.s, False), wty, align,
                             self._pad_mask(width, step * (n - 1) + 1))
        return self.b.shuffle_vector(w, _poison(wty), ir.Constant(
            ir.VectorType(_I32, n), [ir.Constant(_I32, i * step) for i in range(n)]))

    def masked_load(self, p, vty, align: int, mask):
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
            return b.call(f, [p, ir.Constant(_I32, align), mask, _splat(vty, 0)])
        pty = ir.VectorType(et, per)
        pieces = []
        for start in range(0, n, per):
            k = min(per, n - start)
            m = b.shuffle_vector(mask, _poison(mask.type), ir.Constant(
                ir.VectorType(_I32, per), [ir.Constant(_I32, start + i if i < k else start)
                                           for i in range(per)]))
            if k < per:   # past the end: lanes off
                m = b.and_(m, ir.Constant(ir.VectorType(_I1, per),
                                          [ir.Constant(_I1, int(i < k)) for i in range(per)]))
            q = b.gep(p, [ir.Constant(_I64, start)], source_etype=et)
            f = self.mb.intrinsic("llvm.masked.load", pty,
                                  [_PTR, _I32, ir.VectorType(_I1, per), pty], [pty, _PTR])
            pieces.append(b.call(f, [q, ir.Constant(_I32, align), m, _splat(pty, 0)]))
        while len(pieces) & (len(pieces) - 1):
            pieces.append(_splat(pieces[0].type, 0))
        while len(pieces) > 1:
            w = pieces[0].type.count
            idx = ir.Constant(ir.VectorType(_I32, 2 * w), [ir.Constant(_I32, i)
                                                          for i in range(2 * w)])
            pieces = [b.shuffle_vector(pieces[i], pieces[i + 1], idx)
                      for i in range(0, len(pieces), 2)]
        whole = pieces[0]
        if whole.type.count == n:
            return whole
        return b.shuffle_vector(whole, _poison(whole.type), ir.Constant(
            ir.VectorType(_I32, n), [ir.Constant(_I32, i) for i in range(n)]))

    def store(self, node: BufferStore, val: Val):
        bi = self.buf(node.buffer)
        dtype = bi.dtype
        memty = _MEM[dtype]
        align = _SIZE[dtype]
        off, idx = self.offset(bi, node.indices)
        b = self.b
        if off.uniform and val.uniform:
            def scalar():
                if self.checks:
                    self.bounds_check(bi, idx, node, "store")
                b.store(self.to_mem(val.s, dtype), self._elem_ptr(bi, off.s, True), align=align)

            if self.lanes > 1 and self.mask is not None:
                self.if_(self.any_lane(self.mask), scalar, name="st")
            else:
                scalar()
            return
        if self.checks:
            self.bounds_check(bi, idx, node, "store")
        vty = self.vtype(memty)
        x = self.to_mem(self.vec(val), dtype)
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
            b.call(f, [w, p, ir.Constant(_I32, align), self._pad_mask(P)])
        elif off.v is None and off.step == 1:
            p = self._elem_ptr(bi, off.s, self.mask is None)
            if self.mask is None:
                b.store(x, p, align=align)
            else:
                f = self.mb.intrinsic("llvm.masked.store", ir.VoidType(),
                                      [vty, _PTR, _I32, self.vtype(_I1)], [vty, _PTR])
                b.call(f, [x, p, ir.Constant(_I32, align), self.mask])
        else:
            # scatter: lanes are written in order, so a lane-invariant address keeps the
            # last lane's value, as the serial loop would
            ptrs = self._vec_ptrs(bi, self.vec(off))
            pty = ir.VectorType(_PTR, self.lanes)
            f = self.mb.intrinsic("llvm.masked.scatter", ir.VoidType(),
                                  [vty, pty, _I32, self.vtype(_I1)], [vty, pty])
            m = self.mask if self.mask is not None else self.all_true()
            b.call(f, [x, ptrs, ir.Constant(_I32, align), m])

    # -- statements --------------------------------------------------------------------
    def stmt(self, s: Stmt):
        m = _STMT.get(type(s))
        self._stmt_stack.append(s)
        try:
            if m is None:
                raise InternalError(f"the llvm backend cannot lower {type(s).__name__} statements")
            m(self, s)
        except Exception as exc:  # noqa: BLE001 - re-raised with the node named
            if getattr(exc, _Annotated.attr, False):
                raise
            raise _annotate(exc, s, None) from exc
        finally:
            self._stmt_stack.pop()

    def s_seq(self, s: SeqStmt):
        for x in s.seq:
            self.stmt(x)

    def s_store(self, s: BufferStore):
        if s.value.dtype != s.buffer.dtype:
            raise InternalError(f"a {s.value.dtype} value is stored into the {s.buffer.dtype} "
                                f"buffer {s.buffer.name}")
        val = self.expr(s.value)
        self.store(s, val)

    def s_if(self, s: IfThenElse):
        cond = self.expr(s.cond)
        then_fn = lambda: self.stmt(s.then_case)  # noqa: E731
        else_fn = (lambda: self.stmt(s.else_case)) if s.else_case is not None else None
        if cond.uniform:
            if isinstance(cond.s, ir.Constant):
                if cond.s.constant:
                    then_fn()
                elif else_fn:
                    else_fn()
                return
            self.if_(cond.s, then_fn, else_fn)
            return
        c = self.vec(cond)
        self.masked(self.and_mask(c), then_fn)
        if else_fn:
            self.masked(self.and_mask(self.b.xor(c, self.all_true())), else_fn)

    def s_let(self, s: LetStmt):
        old = self.env.get(s.var)
        old64 = self.env64.pop(s.var, None)
        self.env[s.var] = self.expr(s.value)
        try:
            self.stmt(s.body)
        finally:
            _restore(self.env, s.var, old)
            _restore(self.env64, s.var, old64)

    def s_attr(self, s: AttrStmt):
        if s.key in (_vec.KEY, _par.KEY):
            # the lowering's plan of the loop below (lower/vectorize.py, lower/parallel.py)
            self.s_for(s.body, s.value)
            return
        if s.key == "pragma_unroll_count" and isinstance(s.value, int) and s.value > 1:
            # s[T].pragma(axis, "unroll_count", n): LLVM unrolls the loop n times (its
            # unroller honours the count even when it does not unroll on its own); the
            # loop is the first one below this attribute (others may sit in between)
            body = s.body
            while isinstance(body, AttrStmt):
                body = body.body
            if isinstance(body, For) and body.kind == "serial":
                self._unroll_count[id(body)] = s.value
            self.stmt(s.body)
            return
        if s.key == "pragma_fp_contract" and not self.mb.fp_flags:
            # a schedule's opt-in (s[T].pragma(axis, "fp_contract")): a*b + c in the
            # loop nest may become one FMA (one rounding instead of two)
            self.mb.fp_flags = ("contract",)
            try:
                self.stmt(s.body)
            finally:
                self.mb.fp_flags = ()
            return
        self.stmt(s.body)

    def s_evaluate(self, s: Evaluate):
        v = s.value
        if isinstance(v, Call) and v.op in SPECIAL_CALLS:
            return  # a GPU barrier: nothing to do on the CPU, where no thread axis exists
        self.expr(v)

    def s_prefetch(self, s: Prefetch):
        """``llvm.prefetch(ptr, rw, locality 3, data cache)`` on the element's address
        (x86: ``prefetcht0``, or ``prefetchw`` for a write where the CPU has PRFCHW).  The
        address is flattened like a load's (declared or run-time strides) through a plain
        getelementptr.  Inside a widened body a lane-dependent address gets one prefetch
        per lane; under a lane mask nothing is emitted (it is only a hint)."""
        bi = self.buf(s.buffer)
        off, _ = self.offset(bi, s.indices)
        f = self.mb.intrinsic("llvm.prefetch", ir.VoidType(), [_PTR, _I32, _I32, _I32], [_PTR])
        hint = [ir.Constant(_I32, 1 if s.write else 0), ir.Constant(_I32, 3),
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
                                    self._elem_ptr(bi, off.s, False), _MEM[bi.dtype]))

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

    def s_extern_call(self, s: ExternCall):
        """``tecomp_extern_call(site, data, ints, floats)`` (see tecomp.runtime.extern):
        the buffers' data pointers, their extents and strides (elements) then the integer
        scalars, and the float scalars, in stack arrays; a nonzero return is error 4."""
        from ...runtime import extern as _ext

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

    def s_assert(self, s: AssertStmt):
        if self.checks:
            cond = self.expr(s.cond)
            site = self.mb.add_site("assert", "", s.message, node_text(s.cond))
            b = self.b
            if cond.uniform:
                fail = b.xor(cond.s, ir.Constant(_I1, 1))
                if self.mask is not None:
                    fail = b.and_(fail, self.any_lane(self.mask))
            else:
                fails = b.xor(self.vec(cond), self.all_true())
                fail = self.any_lane(self.and_mask(fails))
            self.guard(fail, lambda: self.report(ERR_ASSERT, site), name="assert")
        self.stmt(s.body)

    def s_allocate(self, s: Allocate):
        buf = s.buffer
        if buf in self.bufs:
            raise InternalError(f"buffer {buf.name} is allocated twice")
        _dt.canon(buf.dtype)
        extents = [self.scalar_index(x) for x in buf.shape]
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
            try:
                self.stmt(s.body)
            finally:
                del self.bufs[buf]
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

    # -- loops --------------------------------------------------------------------------
    def s_for(self, s: For, plan=None):
        kind = s.kind
        if kind == "thread":
            raise BuildError(
                f"the loop over `{s.var.name}` is bound to the GPU thread axis "
                f"{s.thread_tag or '(unnamed)'}; the llvm (CPU) target cannot run GPU-bound "
                f"loops: build with target='cuda' or remove the bind")
        if kind not in ("serial", "parallel", "vectorized", "unrolled"):
            raise BuildError(f"unknown loop kind {kind!r} for the loop over `{s.var.name}`")
        if self.lanes > 1:
            # inside a widened body: a loop with lane-invariant bounds
            if kind == "unrolled" and isinstance(s.extent, Const):
                self.unrolled(s)
            else:
                self.serial(s)
            return
        if kind == "serial":
            self.serial(s)
        elif kind == "unrolled":
            self.unrolled(s)
        elif kind == "vectorized":
            if not isinstance(plan, _vec.VectorPlan):
                raise InternalError(f"the vectorized loop over `{s.var.name}` has no vector "
                                    f"plan (lower.vectorize.vector_plan_pass did not run)")
            self.vectorized(s, plan)
        else:
            if not isinstance(plan, _par.ParallelPlan) or plan.nested != self.in_parallel:
                raise InternalError(f"the parallel loop over `{s.var.name}` has no plan that "
                                    f"fits where it is (lower.parallel.parallel_plan_pass)")
            if plan.nested:
                self.mb.notes.append(plan.note(s.var.name))
                self.serial(s)
            else:
                self.parallel(s, plan)

    def _bounds(self, s: For):
        return self.scalar_index(s.min), self.scalar_index(s.extent)

    def serial(self, s: For, md=None):
        lo, n = self._bounds(s)
        count = self._unroll_count.pop(id(s), None)
        if md is None and count is not None:
            md = self.mb.loop_md(("llvm.loop.unroll.count", count))
        self.loop(_sanitize(s.var.name), lo, n,
                  lambda iv: self.with_loop_var(s.var, Val(iv), lambda: self.stmt(s.body)), md)

    def unrolled(self, s: For):
        if not (isinstance(s.extent, Const) and s.extent.value <= MAX_FULL_UNROLL):
            self.serial(s, self.mb.loop_md(("llvm.loop.unroll.enable", True)))
            return
        lo = self.scalar_index(s.min)
        for k in range(int(s.extent.value)):
            self.with_loop_var(s.var, Val(self.iadd(lo, ir.Constant(_I64, k))),
                               lambda: self.stmt(s.body))

    def vectorized(self, s: For, plan):
        """Emit ``s`` as its plan says (lower/vectorize.py decides)."""
        name = s.var.name
        how = plan.how
        if how == "serial":
            self.mb.notes.append(plan.note(name))
            self.serial(s, self.mb.loop_md(("llvm.loop.vectorize.enable", True)))
            return
        lo = self.scalar_index(s.min)
        if how == "empty":
            return
        if how == "scalar":
            self.with_loop_var(s.var, Val(lo), lambda: self.stmt(s.body))
            return
        if how == "masked":
            self._masked_chunks(s, lo, plan)
            return
        self.mb.notes.append(plan.note(name))
        if how == "widen":
            self.widened(s, lo, plan.lanes, None)
            return
        W, nchunks, rem = plan.lanes, plan.chunks, plan.rem
        if how == "pieces":
            for c in range(nchunks):
                self.widened(s, self.iadd(lo, ir.Constant(_I64, c * W)), W, None)
        elif how == "chunks":
            self.loop(_sanitize(name) + ".chunk", ir.Constant(_I64, 0),
                      ir.Constant(_I64, nchunks),
                      lambda c: self.widened(
                          s, self.iadd(lo, self.b.mul(c, ir.Constant(_I64, W))), W, None))
        else:
            raise InternalError(f"unknown vector plan {how!r} for the loop over `{name}`")
        if rem == 1:
            self.with_loop_var(s.var, Val(self.iadd(lo, ir.Constant(_I64, nchunks * W))),
                               lambda: self.stmt(s.body))
        elif rem:
            self.widened(s, self.iadd(lo, ir.Constant(_I64, nchunks * W)), rem, None)

    def _masked_chunks(self, s: For, lo, plan):
        """A symbolic extent: chunks of W lanes, then one masked chunk for the tail."""
        b = self.b
        W = plan.lanes
        self.mb.notes.append(plan.note(s.var.name))
        n = self.scalar_index(s.extent)
        n = b.select(b.icmp_signed("<", n, ir.Constant(_I64, 0)), ir.Constant(_I64, 0), n)
        nchunks = b.sdiv(n, ir.Constant(_I64, W))
        self.loop(_sanitize(s.var.name) + ".chunk", ir.Constant(_I64, 0), nchunks,
                  lambda c: self.widened(
                      s, self.iadd(lo, b.mul(c, ir.Constant(_I64, W))), W, None))
        done = b.mul(nchunks, ir.Constant(_I64, W))
        rem = b.sub(n, done)

        def tail():
            old = self.lanes
            self.lanes = W
            try:
                mask = b.icmp_signed("<", self.lanes_iota(), self.bcast(rem))
            finally:
                self.lanes = old
            self.widened(s, self.iadd(lo, done), W, mask)

        self.if_(b.icmp_signed(">", rem, ir.Constant(_I64, 0)), tail, name="tail")

    def widened(self, s: For, base, lanes: int, mask):
        old = (self.lanes, self.mask)
        self.lanes, self.mask = lanes, mask
        try:
            self.with_loop_var(s.var, Val(base, 1), lambda: self.stmt(s.body))
        finally:
            self.lanes, self.mask = old

    def parallel(self, s: For, plan):
        """Outline ``s`` into a task capturing what its plan lists (lower/parallel.py)."""
        lo, n = self._bounds(s)
        captured = [v for v in plan.captured if v in self.env]
        used = list(plan.buffers)
        for v in captured:
            if not self.env[v].uniform:
                raise InternalError("a parallel loop inside a widened body")
        b = self.b
        # the region's error record: [lock, first failing chunk's begin, the five error
        # words of that chunk] (module.py, outline_parallel)
        perr = self.alloca(ir.ArrayType(_I64, 2 + ERR_WORDS), name="par.err", align=8)
        b.store(ir.Constant(_I64, 0), _i64_at(b, perr, 0), align=8)
        b.store(ir.Constant(_I64, 2 ** 63 - 1), _i64_at(b, perr, 1), align=8)
        task, captures = self.mb.outline_parallel(self, s, lo, captured, used, perr)
        st = ir.LiteralStructType([v.type for v in captures])
        closure = self.alloca(st, name="closure", align=8)
        for i, v in enumerate(captures):
            p = b.gep(closure, [ir.Constant(_I32, 0), ir.Constant(_I32, i)], inbounds=True,
                      source_etype=st)
            b.store(v, p)
        pf = self.mb.declare("tecomp_parallel_for", _I32, [_PTR, _PTR, _I64])
        rc = b.call(pf, [task, closure, n])

        def failed():
            # the error of the failing chunk that comes first in the loop's order (the
            # one a serial run reports), whichever thread ran it and when
            code = b.load(_i64_at(b, perr, 2), typ=_I64, align=8)
            pair = b.cmpxchg(self.err, ir.Constant(_I64, 0), code, "seq_cst", "seq_cst")

            def copy():
                for w in range(1, ERR_WORDS):
                    v = b.load(_i64_at(b, perr, 2 + w), typ=_I64, align=8)
                    b.store(v, _i64_at(b, self.err, w), align=8)
            self.if_(b.extract_value(pair, 1), copy)
            b.branch(self.error_block())
        self.guard(b.icmp_signed("!=", rc, ir.Constant(_I32, 0)), failed, name="par")

    # -- expressions -------------------------------------------------------------------
    def expr(self, e: Expr) -> Val:
        m = _EXPR.get(type(e))
        try:
            if m is None:
                if isinstance(e, (Reduce, ProducerLoad)):
                    raise InternalError(f"{type(e).__name__} reached code generation; lowering "
                                        f"must remove TE-level nodes")
                raise InternalError(f"the llvm backend cannot lower {type(e).__name__} nodes")
            return m(self, e)
        except Exception as exc:  # noqa: BLE001 - re-raised with the node named
            if getattr(exc, _Annotated.attr, False):
                raise
            stmt = self._stmt_stack[-1] if self._stmt_stack else None
            raise _annotate(exc, e, stmt) from exc

    def e_const(self, e: Const) -> Val:
        return Val(self.const(e.dtype, e.value))

    @staticmethod
    def const(dtype: str, value):
        ty = _REG[dtype]
        if dtype == "bool":
            return ir.Constant(_I1, 1 if value else 0)
        if _dt.is_float(dtype):
            v = float(value)
            if _dt.is_storage_float(dtype):
                v = _dt.round_storage(dtype, v)
            return ir.Constant(ty, v)
        return ir.Constant(ty, _wrap_signed(int(value), ty.width))

    def e_var(self, e: Var) -> Val:
        v = self.env.get(e)
        if v is None:
            raise BuildError(f"variable `{e.name}` is used outside the scope that defines it")
        return v

    def _operands(self, e):
        if e.a.dtype != e.b.dtype:
            raise InternalError(f"operands of {type(e).__name__} have dtypes {e.a.dtype} and "
                                f"{e.b.dtype}")
        return self.expr(e.a), self.expr(e.b), e.a.dtype

    def e_add(self, e):
        a, c, dt = self._operands(e)
        if _dt.is_float(dt):
            return self.map2(a, c, lambda x, y: self.b.fadd(x, y, flags=self.mb.fp_flags))
        return self.vadd(a, c)

    def e_sub(self, e):
        a, c, dt = self._operands(e)
        if _dt.is_float(dt):
            return self.map2(a, c, lambda x, y: self.b.fsub(x, y, flags=self.mb.fp_flags))
        return self.vadd(a, c, sub=True)

    def e_mul(self, e):
        a, c, dt = self._operands(e)
        if _dt.is_float(dt):
            return self.map2(a, c, lambda x, y: self.b.fmul(x, y, flags=self.mb.fp_flags))
        return self.vmul(a, c)

    def e_div(self, e):
        a, c, dt = self._operands(e)
        if not _dt.is_float(dt):
            raise InternalError(f"true division of {dt} operands (Div is for floats)")
        return self.map2(a, c, self.b.fdiv)

    def _intdiv(self, e, kind: str) -> Val:
        a, c, dt = self._operands(e)
        if _dt.is_float(dt) or dt == "bool":
            raise InternalError(f"{type(e).__name__} of {dt} operands")
        uns = _unsigned(dt)
        b = self.b
        cconst = c.s.constant if c.uniform and _is_const(c.s) else None
        needs_guard = cconst is None or cconst == 0 or (cconst == -1 and not uns)

        def fn(x, y):
            ty = x.type
            zero = None
            ys = y
            if needs_guard:
                zero = b.icmp_signed("==", y, _splat(ty, 0))
                bad = zero
                if not uns:
                    width = (ty.element if isinstance(ty, ir.VectorType) else ty).width
                    ovf = b.and_(b.icmp_signed("==", y, _splat(ty, -1)),
                                 b.icmp_signed("==", x, _splat(ty, -(1 << (width - 1)))))
                    bad = b.or_(zero, ovf)
                ys = b.select(bad, _splat(ty, 1), y)
            if uns:
                q, r = b.udiv(x, ys), b.urem(x, ys)
            else:
                q, r = b.sdiv(x, ys), b.srem(x, ys)
            if kind == "truncdiv":
                res = q
            elif kind == "truncmod":
                res = r
            else:
                if uns:
                    res = q if kind == "floordiv" else r
                else:
                    # floor: adjust when the remainder is non-zero and its sign differs
                    adj = b.and_(b.icmp_signed("!=", r, _splat(ty, 0)),
                                 b.icmp_signed("<", b.xor(r, ys), _splat(ty, 0)))
                    if kind == "floordiv":
                        res = b.sub(q, b.zext(adj, ty))
                    else:
                        res = b.add(r, b.select(adj, ys, _splat(ty, 0)))
            if zero is not None:
                res = b.select(zero, _splat(ty, 0), res)
            return res

        return self.map2(a, c, fn)

    def e_floordiv(self, e):
        return self._intdiv(e, "floordiv")

    def e_floormod(self, e):
        return self._intdiv(e, "floormod")

    def e_truncdiv(self, e):
        return self._intdiv(e, "truncdiv")

    def e_truncmod(self, e):
        return self._intdiv(e, "truncmod")

    def _minmax(self, e, is_min: bool) -> Val:
        a, c, dt = self._operands(e)
        b = self.b
        if _dt.is_float(dt):
            # vectors where the policy says so (x86): ``x < y ? x : y`` (one vminps /
            # vmaxps, which gives y when either is NaN), then x where x is NaN: NaN
            # propagates, the zero of min(0.0, -0.0) is unspecified (see ir.expr.Min).
            # Three instructions per vector where llvm.minimum / llvm.maximum, which also
            # orders -0 below +0, takes six.
            # Scalars use the intrinsic: LLVM's loop vectorizer (it runs on modules that
            # tecomp did not vectorize) never returned on a max reduction written as
            # this compare-select (a loop of ``acc = max(acc, alpha + x[k % 3])``)
            select = self.policy.vector_minmax_select

            def fn(x, y):
                if not (select and isinstance(x.type, ir.VectorType)):
                    name = "llvm.minimum" if is_min else "llvm.maximum"
                    return b.call(self.mb.intrinsic(name, x.type, [x.type, x.type], [x.type]),
                                  [x, y])
                r = b.select(b.fcmp_ordered("<" if is_min else ">", x, y), x, y)
                return b.select(b.fcmp_unordered("uno", x, x), x, r)
        else:
            cmp = b.icmp_unsigned if _unsigned(dt) else b.icmp_signed

            def fn(x, y):
                return b.select(cmp("<" if is_min else ">", x, y), x, y)
        return self.map2(a, c, fn)

    def e_min(self, e):
        return self._minmax(e, True)

    def e_max(self, e):
        return self._minmax(e, False)

    _CMP = {EQ: "==", NE: "!=", LT: "<", LE: "<=", GT: ">", GE: ">="}

    def e_cmp(self, e: CmpOp) -> Val:
        a, c, dt = self._operands(e)
        op = self._CMP[type(e)]
        b = self.b
        if _dt.is_float(dt):
            if op == "!=":
                return self.map2(a, c, lambda x, y: b.fcmp_unordered("!=", x, y))
            return self.map2(a, c, lambda x, y: b.fcmp_ordered(op, x, y))
        cmp = b.icmp_unsigned if _unsigned(dt) else b.icmp_signed
        return self.map2(a, c, lambda x, y: cmp(op, x, y))

    def e_and(self, e):
        return self.map2(self.expr(e.a), self.expr(e.b), self.b.and_)

    def e_or(self, e):
        return self.map2(self.expr(e.a), self.expr(e.b), self.b.or_)

    def e_not(self, e):
        return self.map1(self.expr(e.a), lambda x: self.b.xor(x, _splat(x.type, 1)))

    def e_select(self, e: Select) -> Val:
        cond = self.expr(e.cond)
        if cond.uniform and isinstance(cond.s, ir.Constant):
            return self.expr(e.true_value if cond.s.constant else e.false_value)
        safe = self._speculable((e.true_value, e.false_value), e.cond)
        b = self.b
        if cond.uniform:
            if safe:
                t, f = self.expr(e.true_value), self.expr(e.false_value)
                return self.map2(t, f, lambda x, y: b.select(cond.s, x, y))
            return self.if_value(cond.s, lambda: self.expr(e.true_value),
                                 lambda: self.expr(e.false_value))
        c = self.vec(cond)
        if safe:
            t, f = self.expr(e.true_value), self.expr(e.false_value)
            return Val(v=b.select(c, self.vec(t), self.vec(f)))

        def masked():
            old = self.mask
            try:
                self.mask = self.and_mask(c)
                t = self.expr(e.true_value)
                self.mask = old
                self.mask = self.and_mask(b.xor(c, self.all_true()))
                f = self.expr(e.false_value)
            finally:
                self.mask = old
            return Val(v=b.select(c, self.vec(t), self.vec(f)))

        if self.mask is not None or not (_small(e.true_value) and _small(e.false_value)):
            return masked()
        # where every lane takes the same side (a concatenation's inputs, a padded read
        # away from the edge) that side alone runs, unmasked: masked loads are slow on
        # AVX2 (bytes go one by one); the lanes that differ take the masked path
        # (inside it a mask is set, so nested selects add one copy each, not three)
        ity = ir.IntType(self.lanes)
        bits = b.bitcast(c, ity)
        all_true = b.icmp_unsigned("==", bits, ir.Constant(ity, (1 << self.lanes) - 1))
        none_true = b.icmp_unsigned("==", bits, ir.Constant(ity, 0))
        return self.if_value(all_true, lambda: self.expr(e.true_value), lambda: self.if_value(
            none_true, lambda: self.expr(e.false_value), masked, name="sel.none"),
            name="sel.all")

    def _speculable(self, operands, cond) -> bool:
        """Whether the select ``operands`` may be evaluated whatever the condition: each
        loads nothing (a load may be out of bounds where the condition is false: a
        padded read), or it is an expression the condition itself evaluates (a max
        reduction's ``select(a > b, a, b)``).  Both operands speculated, a vector select
        is one blend instead of three branches and masked loads: the softmax's row max
        ran at a third of the speed that way (benchmarks/DECISIONS.md, "Code generator:
        select operands the condition evaluates")."""
        loading = [x for x in operands if self.mb.has_load(x)]
        if not loading:
            return True
        try:
            evaluated = set(collect(cond, lambda n: isinstance(n, Expr)))
            return all(x in evaluated for x in loading)
        except TypeError:        # a node that is not hashable: keep the select lazy
            return False

    def e_cast(self, e: Cast) -> Val:
        src, dst = e.value.dtype, e.dtype
        val = self.expr(e.value)
        if src == dst:
            return val
        if (_dt.is_int(src) or src == "bool") and (_dt.is_int(dst) or dst == "bool"):
            return self.int_convert(val, src, dst)
        return self.map1(val, lambda x: self.cast_value(x, src, dst))

    def cast_value(self, x, src: str, dst: str):
        """Convert the scalar or vector register value ``x`` from ``src`` to ``dst``."""
        b = self.b
        T = lambda ty: _with_lanes(ty, x.type)  # noqa: E731
        if dst == "bool":
            if _dt.is_float(src):
                return b.fcmp_unordered("!=", x, _splat(x.type, 0.0))
            return b.icmp_unsigned("!=", x, _splat(x.type, 0))
        if dst == "bfloat16":
            if src == "float64":
                x = b.fptrunc(x, T(_F32))
            elif not _dt.is_float(src):
                x = (b.uitofp if _unsigned(src) else b.sitofp)(x, T(_F32))
            return _bf16_to_f32(b, _f32_to_bf16(b, x))   # (a storage float's value is f32)
        if _dt.is_float(dst):
            if _dt.is_float(src):
                if dst == "float16":
                    if src == "float16":
                        return x
                    h = _f64_to_f16(b, x) if src == "float64" else b.fptrunc(x, T(_F16))
                    return b.fpext(h, T(_F32))
                sw = _REG[src]
                dw = _REG[dst]
                if sw == dw:
                    return x
                if isinstance(dw, ir.DoubleType):
                    return b.fpext(x, T(dw))
                return b.fptrunc(x, T(dw))
            conv = b.uitofp if _unsigned(src) else b.sitofp
            if dst == "float16":
                return b.fpext(conv(x, T(_F16)), T(_F32))
            return conv(x, T(_REG[dst]))
        # float -> int
        if _dt.bits(dst) >= 32:
            return self._freeze(b.fptosi(x, T(_REG[dst])))
        return b.trunc(self._freeze(b.fptosi(x, T(_I32))), T(_REG[dst]))

    def _freeze(self, v):
        instr = _Freeze(self.b.block, v)
        self.b._insert(instr)
        return instr

    def e_let(self, e: Let) -> Val:
        old = self.env.get(e.var)
        old64 = self.env64.pop(e.var, None)
        self.env[e.var] = self.expr(e.value)
        try:
            return self.expr(e.body)
        finally:
            _restore(self.env, e.var, old)
            _restore(self.env64, e.var, old64)

    def e_load(self, e: BufferLoad) -> Val:
        return self.load(e)

    # -- intrinsics ----------------------------------------------------------------------
    _LLVM_UNARY = {"log": "llvm.log", "sqrt": "llvm.sqrt",
                   "floor": "llvm.floor", "ceil": "llvm.ceil", "round": "llvm.roundeven",
                   "sin": "llvm.sin", "cos": "llvm.cos", "abs": "llvm.fabs"}
    _LIBM = {"tanh": ("tanhf", "tanh"), "erf": ("erff", "erf")}

    def e_call(self, e: Call) -> Val:
        op = e.op
        if op in SPECIAL_CALLS:
            raise BuildError(f"{op}() is a statement (an Evaluate), not a value")
        args = [self.expr(a) for a in e.args]
        dt = e.dtype
        b = self.b
        if not _dt.is_float(dt):
            if op == "abs":
                x, = args
                if _unsigned(dt):
                    return x
                return self.map1(x, lambda v: b.select(
                    b.icmp_signed("<", v, _splat(v.type, 0)), b.sub(_splat(v.type, 0), v), v))
            raise InternalError(f"intrinsic {op} on {dt}")
        if op in self._LLVM_UNARY:
            name = self._LLVM_UNARY[op]
            return self.map1(args[0], lambda v: b.call(
                self.mb.intrinsic(name, v.type, [v.type], [v.type]), [v]))
        if op == "pow":
            return self.map2(args[0], args[1], lambda x, y: b.call(
                self.mb.intrinsic("llvm.pow", x.type, [x.type, x.type], [x.type]), [x, y]))
        if op == "fma":  # one rounding: llvm.fma (an instruction with FMA, else libm fma)
            x, y, z = args
            if x.uniform and y.uniform and z.uniform:
                return Val(b.call(self.mb.intrinsic("llvm.fma", x.s.type, [x.s.type] * 3,
                                                    [x.s.type]), [x.s, y.s, z.s]))
            vx, vy, vz = self.vec(x), self.vec(y), self.vec(z)
            return Val(v=b.call(self.mb.intrinsic("llvm.fma", vx.type, [vx.type] * 3,
                                                  [vx.type]), [vx, vy, vz]))
        if op == "rsqrt":
            return self.map1(args[0], lambda v: b.fdiv(_splat(v.type, 1.0), b.call(
                self.mb.intrinsic("llvm.sqrt", v.type, [v.type], [v.type]), [v])))
        if op in ("exp", "fast_exp"):  # one implementation: see exp_f32
            return self.map1(args[0], self.exp)
        if op == "sigmoid":
            return self.map1(args[0], lambda v: b.fdiv(
                _splat(v.type, 1.0), b.fadd(_splat(v.type, 1.0), self.exp(b.fneg(v)))))
        if op == "erf" and dt != "float64":
            return self.map1(args[0], self.erf_f32)
        if op in self._LIBM:
            return self.libm(self._LIBM[op], args[0], dt)
        raise InternalError(f"unknown intrinsic {op!r}")

    def exp(self, x):
        """exp of a float32 or float64 value (scalar or vector): :meth:`exp_f32` for
        float32 (and float16, which computes in float32), ``llvm.exp`` for float64."""
        el = x.type.element if isinstance(x.type, ir.VectorType) else x.type
        if isinstance(el, ir.DoubleType):
            return self.b.call(self.mb.intrinsic("llvm.exp", x.type, [x.type], [x.type]), [x])
        return self.exp_f32(x)

    def libm(self, names, val: Val, dtype: str) -> Val:
        """Call a libm function; on a vector, once per lane."""
        ty = _REG[dtype]
        fname = names[1] if dtype == "float64" else names[0]
        f = self.mb.declare(fname, ty, [ty])
        b = self.b
        if val.uniform:
            return Val(b.call(f, [val.s]))
        v = self.vec(val)
        out = _poison(v.type)
        for lane in range(self.lanes):
            i = ir.Constant(_I32, lane)
            out = b.insert_element(out, b.call(f, [b.extract_element(v, i)]), i)
        return Val(v=out)

    def _madd(self, ty):
        """``madd(u, v, w) = u*v + w`` on values of type ``ty``: an explicit ``llvm.fma``
        where the target has fused multiply-adds (``policy.has_fma``), else a multiply and
        an add (never contracted: the vector math functions give the same bits under every
        schedule)."""
        b = self.b
        if self.policy.has_fma:
            fma = self.mb.intrinsic("llvm.fma", ty, [ty, ty, ty], [ty])
            return lambda u, v, w: b.call(fma, [u, v, w])
        return lambda u, v, w: b.fadd(b.fmul(u, v), w)

    def exp_f32(self, x):
        """exp(x) for float32 (scalar or vector) in plain vector instructions: the
        ``exp``, ``fast_exp`` and ``sigmoid`` of the CPU backend (``llvm.exp`` would
        become one libm ``expf`` call per vector lane).

        Cephes-style: ``x`` is clamped to ``[-104, 89]`` (beyond, the result is 0 or
        inf anyway); ``n = roundeven(x * log2(e))``; ``r = x - n*ln2`` with ``ln2``
        split in two constants (``n * 0.693359375`` and ``x - n * 0.693359375`` are
        exact); ``exp(r) = 1 + r + r^2 * P(r)`` with a degree-5 ``P`` on
        ``|r| <~ ln2/2``; then a multiplication by ``2^n`` built from exponent bits in
        two halves (``2^(n>>1)``, then ``2^(n - (n>>1))``), so that neither factor
        overflows and a subnormal result is rounded once, by the last product.  A NaN
        is passed through by a select.

        Every step is one IEEE operation, never marked ``contract`` (whatever the
        function's ``fp_contract``): the result depends only on ``x``, so vectorized,
        scalar, unrolled and lane-invariant evaluations give bit-identical results.
        Where the target has fused multiply-adds (``policy.has_fma``) the reduction
        and the polynomial use explicit ``llvm.fma`` calls (one rounding each, about
        15% faster), else separate multiplies and adds; both variants were checked on
        *every* float32 input to be within 1 ulp of the correctly rounded exp
        (subnormal results included; docs/numerics.md), and they may differ from each
        other by 1 ulp on some inputs."""
        b = self.b
        ty = x.type
        ity = _with_lanes(_I32, ty)
        C = lambda v: _splat(ty, v)  # noqa: E731
        I = lambda v: _splat(ity, v)  # noqa: E731
        madd = self._madd(ty)
        mn = self.mb.intrinsic("llvm.minnum", ty, [ty, ty], [ty])
        mx = self.mb.intrinsic("llvm.maxnum", ty, [ty, ty], [ty])
        rnd = self.mb.intrinsic("llvm.roundeven", ty, [ty], [ty])
        xc = b.call(mx, [b.call(mn, [x, C(89.0)]), C(-104.0)])
        n = b.call(rnd, [b.fmul(xc, C(1.44269504088896341))])
        r = madd(n, C(-0.693359375), xc)
        r = madd(n, C(2.12194440e-4), r)
        p = C(1.9875691500e-4)
        for c in (1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1,
                  5.0000001201e-1):
            p = madd(p, r, C(c))
        p = b.fadd(madd(b.fmul(p, r), r, r), C(1.0))
        ni = b.fptosi(n, ity)
        h = b.ashr(ni, I(1))
        lo = b.sub(ni, h)
        s1 = b.bitcast(b.shl(b.add(h, I(127)), I(23)), ty)
        s2 = b.bitcast(b.shl(b.add(lo, I(127)), I(23)), ty)
        res = b.fmul(b.fmul(p, s1), s2)
        return b.select(b.fcmp_unordered("uno", x, x), x, res)

    #: erf(x) = x * (c0 + z * P(z)), z = x^2, for |x| < 1 (c0 = 2/sqrt(pi) split in two)
    _ERF_C0 = (1.128379225730896, -5.8635382771399236e-08)
    _ERF_P = (-0.3761262595653534, 0.1128358542919159, -0.02685382030904293,
              0.005188341718167067, -0.0008010306628420949, 7.854205614421517e-05)
    #: erfc(a) = exp(-a^2) * u * Q(u), u = 1/a, for 1 <= a <= 4
    _ERF_Q = (0.5642389059066772, -0.001535734161734581, -0.26221171021461487,
              -0.1433429718017578, 1.0590153932571411, -1.7567129135131836,
              1.6511608362197876, -0.9528770446777344, 0.31634604930877686,
              -0.04649728909134865)

    def erf_f32(self, x):
        """erf(x) for float32 (scalar or vector) in plain vector instructions (libm's
        ``erff`` would be one call per lane, where GELU spent about half its time)
        (measurements: benchmarks/DECISIONS.md, "Code generator: erf in vector instructions").

        Both branches are computed and one is selected per lane.  ``|x| < 1``:
        ``x * (c0 + z*P(z))`` with ``z = x*x``, a degree-6 ``P`` and ``c0 = 2/sqrt(pi)``
        in two parts (``fma(x, c0_hi, x * (z*P(z) + c0_lo))``).  ``|x| >= 1``:
        ``1 - exp(-a*a) * u * Q(u)`` with ``a = min(|x|, 4)`` (erf rounds to 1 from 3.92
        on), ``u = 1/a``, a degree-9 ``Q`` and :meth:`exp_f32`, then the sign of ``x``.
        The coefficients were fitted for this function (weighted least squares towards
        the minimax relative error, against mpmath: 1.2e-9 and 4.9e-9).  As
        :meth:`exp_f32`, no step is ever contracted, so every schedule gives the same
        bits; measured on every float32 input against float64 erf: see
        docs/numerics.md.  NaN stays NaN, ``erf(+-inf) = +-1``, ``erf(-0.0) = -0.0``."""
        b = self.b
        ty = x.type
        C = lambda v: _splat(ty, v)  # noqa: E731
        madd = self._madd(ty)
        fabs = self.mb.intrinsic("llvm.fabs", ty, [ty], [ty])
        mn = self.mb.intrinsic("llvm.minnum", ty, [ty, ty], [ty])
        copysign = self.mb.intrinsic("llvm.copysign", ty, [ty, ty], [ty])
        ax = b.call(fabs, [x])
        # |x| < 1
        z = b.fmul(x, x)
        p = C(self._ERF_P[-1])
        for c in reversed(self._ERF_P[:-1]):
            p = madd(p, z, C(c))
        t = madd(z, p, C(self._ERF_C0[1]))
        small = madd(x, C(self._ERF_C0[0]), b.fmul(x, t))
        # |x| >= 1
        a = b.call(mn, [ax, C(4.0)])
        u = b.fdiv(C(1.0), a)
        q = C(self._ERF_Q[-1])
        for c in reversed(self._ERF_Q[:-1]):
            q = madd(q, u, C(c))
        e = self.exp_f32(b.fneg(b.fmul(a, a)))
        large = madd(b.fneg(b.fmul(e, u)), q, C(1.0))
        # erf is odd: the sign of x (also makes erf(-0.0) = -0.0)
        res = b.call(copysign, [b.select(b.fcmp_ordered("<", ax, C(1.0)), small, large), x])
        return b.select(b.fcmp_unordered("uno", x, x), x, res)


_EXTERN_SYMBOL_DONE = []


def _register_extern_symbol() -> None:
    """Make ``tecomp_extern_call`` resolve to the extern calls' entry point in the JIT."""
    if not _EXTERN_SYMBOL_DONE:
        from ...runtime import extern as _ext

        llvm_jit.add_symbol(_ext.SYMBOL, _ext.address())
        _EXTERN_SYMBOL_DONE.append(True)


def _restore(d: dict, k, old):
    if old is None:
        d.pop(k, None)
    else:
        d[k] = old


_STMT = {
    SeqStmt: _FnEmitter.s_seq, BufferStore: _FnEmitter.s_store, IfThenElse: _FnEmitter.s_if,
    LetStmt: _FnEmitter.s_let, AttrStmt: _FnEmitter.s_attr, Evaluate: _FnEmitter.s_evaluate,
    AssertStmt: _FnEmitter.s_assert, Allocate: _FnEmitter.s_allocate, For: _FnEmitter.s_for,
    Prefetch: _FnEmitter.s_prefetch, ExternCall: _FnEmitter.s_extern_call,
    TensorIntrinCall: _FnEmitter.s_tensor_intrin_call,
}
_EXPR = {
    Const: _FnEmitter.e_const, Var: _FnEmitter.e_var, Add: _FnEmitter.e_add,
    Sub: _FnEmitter.e_sub, Mul: _FnEmitter.e_mul, Div: _FnEmitter.e_div,
    FloorDiv: _FnEmitter.e_floordiv, FloorMod: _FnEmitter.e_floormod,
    TruncDiv: _FnEmitter.e_truncdiv, TruncMod: _FnEmitter.e_truncmod,
    Min: _FnEmitter.e_min, Max: _FnEmitter.e_max,
    EQ: _FnEmitter.e_cmp, NE: _FnEmitter.e_cmp, LT: _FnEmitter.e_cmp, LE: _FnEmitter.e_cmp,
    GT: _FnEmitter.e_cmp, GE: _FnEmitter.e_cmp, And: _FnEmitter.e_and, Or: _FnEmitter.e_or,
    Not: _FnEmitter.e_not, Select: _FnEmitter.e_select, Cast: _FnEmitter.e_cast,
    Call: _FnEmitter.e_call, BufferLoad: _FnEmitter.e_load, Let: _FnEmitter.e_let,
}


# ---------------------------------------------------------------------------------------
# entry point
