"""The function emitter: lowers a PrimFunc's statements and expressions into one LLVM
function (:class:`_FnEmitter`; the module around it: :mod:`tecomp.codegen.llvm.module`).

:class:`_FnEmitter` is composed of one part per kind of construct, each in a module of
its own: ``emit_memory`` (the frame, index arithmetic, loads and stores, ``Allocate``,
``Prefetch``), ``emit_control`` (the error exit, branches, ``IfThenElse``, asserts, the
loops: serial, unrolled, vectorized, parallel), ``emit_expr`` (values in a lane context,
integer folding, arithmetic, comparisons, ``Select``, ``Cast``), ``emit_math`` (``Call``:
intrinsics, libm, tecomp's vector ``exp`` and ``erf``) and ``emit_calls`` (tensor
intrinsics, extern calls).  This module holds the emitter's state, the dispatch of
statements and expressions (an error names the node it came from), the scopes
(``Let``, ``LetStmt``, loop variables, ``AttrStmt``), and the rules every part follows:

Lowering
--------
* **Index arithmetic** runs in i64: an index expression made of ``+``, ``-``, ``*`` of
  int32/int64 terms is evaluated in 64 bits (other subterms are evaluated in their own
  dtype and sign-extended), then multiplied by the strides.  For every in-bounds access
  this equals the int32 result; an index whose int32 evaluation would wrap is out of
  bounds anyway.  Value arithmetic keeps the IR's wrapping semantics (no ``nsw``).
* **Loops**: ``serial`` loops are rotated i64 counted loops.  ``unrolled`` loops with a
  constant extent (up to 1024) are fully unrolled at code generation; so are those whose
  symbolic extent has a constant bound up to 16 (a split's tail, ``min(n - 8*i, 8)``:
  one copy per value, each under ``if k < extent``) while the unrolled loops around
  make at most 64 copies; otherwise, where no unrolled loop is around them, they are
  left to LLVM's unroller: ``llvm.loop.unroll.enable`` on a constant extent,
  ``llvm.loop.unroll.count`` 4 on a symbolic one (a trip count LLVM does not know: asked
  to ``enable`` it, LLVM printed "loop not unrolled" and did nothing); inside unrolled
  copies they stay loops.
* **vectorized** loops are *widened*: the body is emitted once with the loop variable
  as the vector ``<base, base+1, ..., base+L-1>``.  Values are tracked as uniform
  (scalar), affine (``base + lane*step``, integers) or general vectors: a load whose
  flattened offset is affine with step 1 is a vector load (an offset whose indices are
  not affine, as a fused axis's ``f // 14`` and ``f % 14``, is flattened in the IR and
  simplified first: ``(f // 14)*14 + f % 14`` is ``f``), a lane-invariant one a
  scalar load (+ broadcast), affine with a small constant step (x86: 2-4, a strided
  convolution's input row; ``policy.strided_wide_load``) one wider masked load and a
  shuffle (``wide_load``), constant lane offsets within a short span (a widened loop from
  a constant start: ``(i // 4)*4 + c``, a grouped convolution's vector across groups;
  ``policy.pattern_wide_load``) one masked load of the span and a shuffle
  (``lane_pattern``), anything else a ``llvm.masked.gather``; a store is a vector
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
* **Aliasing**: every load and store through a buffer carries ``!alias.scope`` and
  ``!noalias`` (:mod:`tecomp.codegen.llvm.alias`): a buffer tecomp allocates never
  aliases another buffer, in the serial kernel as in a parallel task (``noalias`` on
  the body function's arguments alone did not reach accesses through a workspace
  pointer in a large kernel).
* **Prefetch**: ``llvm.prefetch.p0(ptr, rw, 4 - level, 1)`` on the element's address, computed
  like a load's (both layouts) through a plain, non-``inbounds`` getelementptr; ``rw`` is
  1 for a write-intent prefetch (x86 ``prefetchw`` where the CPU has PRFCHW, else
  ``prefetcht0``), 0 for a read (``prefetcht0``).
* **Numerics**: see ``tecomp/ir/expr.py``.  Integer division by a zero divisor (and
  ``INT_MIN // -1``) does not trap: ``x // 0`` and ``x % 0`` give 0 (as numpy), so a
  kernel never kills the process; divisions by non-zero constants compile to plain
  LLVM divisions.  Float ``min(a, b)``/``max(a, b)`` of vectors are, on x86
  (``policy.vector_minmax_select``), the target's ``vminps``/``vmaxps`` (which keeps
  ``a`` when either is NaN) masked by a NaN test of ``b`` (a reduction's accumulator
  ``a`` goes through one instruction a step); of scalars the same ``vminss``/``vmaxss``
  in a kernel the schedule vectorized, else, and of vectors elsewhere,
  ``llvm.minimum``/``llvm.maximum`` (LLVM's loop vectorizer, which runs on kernels not
  vectorized by tecomp, hung on a scalar max reduction in the compare-select form):
  NaN propagates as in numpy, and which zero
  ``max(0.0, -0.0)`` gives is unspecified.  Float -> int
  conversion is ``fptosi`` (frozen, so an out-of-range value gives an unspecified
  number, never poison); to int8/int16/uint8 it goes through int32 and wraps, like
  numpy on x86.  ``float64 -> float16`` rounds
  once (an odd-rounding step through float32).  ``round`` is ``llvm.roundeven``.
  ``sqrt``, ``floor``, ``ceil``, ``abs`` and float64 ``sin``, ``cos`` and ``pow`` are
  LLVM intrinsics (libm calls per lane where the CPU has no instruction); float64
  ``tanh``, ``erf``, ``atan`` ... call libm per lane (``tan`` too where the target has
  no FMA); float32 ``erf``, ``tanh``, ``log``,
  ``sin`` ... are tecomp's own vector code (``_FnEmitter.erf_f32``, ``tanh_f32``,
  ``log_f32``: at most 1.62, 2.36 and 0.86 ulp, docs/numerics.md), and so are float32
  ``tan``, ``atan``, ``erfc``, ``pow`` and ``cbrt``
  (:mod:`~tecomp.codegen.llvm.emit_math_f32`, float32 lanes; ``pow`` where the target
  has FMA and a table instruction, ``cbrt`` where it has FMA), float32
  ``atan2``, ``cbrt`` and ``pow`` (elsewhere) and float64 ``exp``, ``log`` and
  ``tan`` (with FMA)
  (:mod:`~tecomp.codegen.llvm.emit_math_wide`: float32 in float64 lanes, rounded
  once);
  ``rsqrt`` is ``1/sqrt(x)``.
  Float32 ``exp`` is tecomp's own vector code (``_FnEmitter.exp_f32``; ``llvm.exp``
  would be one libm ``expf`` call per lane): a Cephes-style range reduction
  (``n = roundeven(x*log2 e)``, two-constant ``ln 2``), a polynomial (with FMA ``1 + r (1 +
  r P(r))``, ``P`` of degree 4) and an
  exponent scaling split in two steps, in plain vector instructions, with explicit
  ``llvm.fma`` where the target has FMA (``policy.has_fma``: x86 FMA3) and separate
  multiplies and adds elsewhere.  No step is ever contracted, so the schedule never
  changes the result (vectorized, scalar, unrolled, lane-invariant code: identical
  bits).  Both variants were run on all 2^32 float32 inputs against numpy's float64
  exp rounded to float32: at most **1 ulp** from it (FMA: 0.25% of inputs 1 ulp off,
  largest error 0.90 ulp of the exact value; no FMA: 0.42%, 0.99 ulp), subnormal results
  included;
  ``inf`` from 88.72284 up, 0 from -103.97209 down, NaN kept, ``exp(-0.0) = 1``.
  ``fast_exp`` is the same code (an alias kept for TVM's ``topi.fast_exp`` users);
  ``sigmoid`` is ``1/(1+exp(-x))`` with that exp (relative error < 3e-7, measured
  1.48e-7, down to -87.3; 0 below -88.72, where ``exp(-x)`` overflows).
* **Floating point** is strict IEEE by default (no reassociation, no FMA contraction),
  so elementwise arithmetic matches numpy bit for bit.  ``PrimFunc.attrs["fp_contract"] =
  True`` marks float ``+ - *`` ``contract`` so LLVM may fuse ``a*b + c`` into one FMA
  (TVM's default; faster reductions, one rounding less).  ``pragma fp_reciprocal`` on a
  nest makes its float divisions by a lane-invariant ``b`` ``a * (1 / b)``, the
  reciprocal of a loop-invariant ``b`` computed once before the loop (two roundings; a
  subnormal or huge ``b`` scaled by a power of two first, so zeros, infinities and NaN
  are the division's: ``_ExprEmitter._reciprocal_div``).
* **Non-temporal stores** (``pragma nontemporal`` on a nest): the nest is emitted twice,
  behind a run-time test that every buffer it stores to and does not allocate starts on
  a 64-byte line; in that copy a whole-vector store to them whose first element's offset
  is known a multiple of the vector's bytes (constants and the constant-bound variables
  of the index, and the strides: ``_MemoryEmitter._nontemporal_store``) carries
  ``!nontemporal`` and that alignment (x86 ``vmovntps``), every other store stays plain.
  Such stores are weakly ordered, so the streamed copy ends with a store fence (x86
  ``sfence``, ``TargetPolicy.store_fence``), and so does each parallel chunk emitted
  inside it, before the pool's join.
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

from typing import Callable, Dict, List

import llvmlite.ir as ir

from ...errors import InternalError, TecompError
from ...ir.expr import (
    EQ, GE, GT, LE, LT, NE, SPECIAL_CALLS, Add, And, Buffer, BufferLoad, Call, Cast, Const, Div,
    Expr, FloorDiv, FloorMod, Let, Max, Min, Mul, Not, Or, ProducerLoad, Reduce, Select, Sub,
    TruncDiv, TruncMod, Var,
)
from ...ir.stmt import (
    Allocate, AssertStmt, AttrStmt, BufferStore, Evaluate, ExternCall, For, IfThenElse, LetStmt,
    Prefetch, SeqStmt, Stmt, TensorIntrinCall,
)
from ...lower import parallel as _par
from ...lower import vectorize as _vec
from ...lower.vectorize import node_text
from .emit_calls import _CallEmitter
from .emit_control import _ControlEmitter
from .emit_expr import _ExprEmitter
from .emit_math import _MathEmitter
from .emit_memory import _MemoryEmitter
from .values import Val, _Buf


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


class _FnEmitter(_MemoryEmitter, _ControlEmitter, _ExprEmitter, _MathEmitter,
                 _CallEmitter):
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
        #: the pass-through of the masked load a select's true side makes
        #: (``emit_expr.FILL_MASKED_LOADS``), while it is emitted; else None
        self.fill = None
        self.heap_slots: List[object] = []
        #: the bytes of the frame the Allocates took so far, and which buffers go to the
        #: workspace for the frame's budget (:func:`frame_overflow`; set by the caller)
        self.stack_used = 0
        self.heap_first: set = set()
        #: this function's own stack buffers (no other task sees them) -> their element
        #: count: a masked vector store into one is a blend and a plain store
        #: (:meth:`_MemoryEmitter.store`)
        self.private_bufs: Dict[Buffer, int] = {}
        #: the private buffers that took a vector store not at a constant whole number
        #: of registers from their start (emit_memory.PRIVATE_SHIFTED_LOADS reads the
        #: others' registers where a contiguous load lies across two)
        self.shifted_stores: set = set()
        #: the private bool buffers whose stores of an ``or`` on the bytes leave any
        #: non-zero byte for true (emit_memory.BYTE_BOOL_LOGIC)
        self.loose_bufs: set = set()
        #: the buffers past the budget: one workspace block per call (its pointer in
        #: ``spill_slot``), each buffer at its offset in it
        self.spill_slot = None
        self.spill_bytes = 0
        self.spill_names: List[str] = []
        self._err_block = None
        self._stmt_stack: List[Stmt] = []
        #: id(For) -> llvm.loop.unroll.count (from pragma "unroll_count")
        self._unroll_count: Dict[int, int] = {}
        #: copies of the statement being emitted that enclosing unrolled loops make
        self._unroll_copies = 1
        #: ids of the float max/min nodes emitted with one NaN test per two values
        #: (``_ControlEmitter._minmax_chain``)
        self._minmax_pairs: set = set()
        #: ids of the IfThenElse statements that branch on any lane of their vector
        #: condition (``_ControlEmitter._selection_pairs``)
        self._any_lane_ifs: set = set()
        #: (op, operand keys) -> (block, value) for :meth:`_int_op`
        self._int_cse: Dict[tuple, tuple] = {}
        #: the constant lane offsets of loads, by flattened offset and widened loop
        #: (``lane_pattern``)
        self._lane_patterns: Dict[tuple, tuple] = {}

    # -- dispatch ----------------------------------------------------------------------------
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

    def s_seq(self, s: SeqStmt):
        for x in s.seq:
            self.stmt(x)

    def s_evaluate(self, s: Evaluate):
        v = s.value
        if isinstance(v, Call) and v.op in SPECIAL_CALLS:
            return  # a GPU barrier: nothing to do on the CPU, where no thread axis exists
        self.expr(v)

    # -- scopes ------------------------------------------------------------------------------
    def s_let(self, s: LetStmt):
        old = self.env.get(s.var)
        old64 = self.env64.pop(s.var, None)
        self.env[s.var] = self.expr(s.value)
        try:
            self.stmt(s.body)
        finally:
            _restore(self.env, s.var, old)
            _restore(self.env64, s.var, old64)

    def e_let(self, e: Let) -> Val:
        old = self.env.get(e.var)
        old64 = self.env64.pop(e.var, None)
        self.env[e.var] = self.expr(e.value)
        try:
            return self.expr(e.body)
        finally:
            _restore(self.env, e.var, old)
            _restore(self.env64, e.var, old64)

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
        if s.key == "pragma_nontemporal" and not self.mb.nontemporal:
            self.nontemporal_nest(s.body)
            return
        if s.key == "pragma_masked_wide_loads" and not self.mb.masked_wide_loads:
            # a schedule's word that its strided loads under a lane mask (a padded
            # window's first tap) are worth a wide masked load each, not a gather
            self.mb.masked_wide_loads = True
            try:
                self.stmt(s.body)
            finally:
                self.mb.masked_wide_loads = False
            return
        if s.key == "pragma_load_each_use" and isinstance(s.value, str):
            # a schedule's word that each use of this buffer's vectors in the nest loads
            # it on its own (an FMA's memory operand: a stream read by several FMAs,
            # strategy.cpu.skinny), not once into a register
            old = self.mb.load_each_use
            self.mb.load_each_use = old | {s.value}
            try:
                self.stmt(s.body)
            finally:
                self.mb.load_each_use = old
            return
        flag = _FLAG_PRAGMAS.get(s.key)
        if flag is not None and not getattr(self.mb, flag[0]):
            # a schedule's opt-in to fast-math flags in the nest: s[T].pragma(axis,
            # "fp_contract") (a*b + c may become one FMA: one rounding instead of two),
            # "fp_reciprocal" (a / b may be a * (1 / b): one reciprocal per
            # loop-invariant b, a per-row sum)
            setattr(self.mb, flag[0], flag[1])
            try:
                self.stmt(s.body)
            finally:
                setattr(self.mb, flag[0], ())
            return
        self.stmt(s.body)


#: the pragmas that set LLVM fast-math flags in their nest: the module builder's
#: attribute holding them and the flags
_FLAG_PRAGMAS = {"pragma_fp_contract": ("fp_flags", ("contract",)),
                 "pragma_fp_reciprocal": ("div_flags", ("arcp",))}


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
