"""CPU code generation: ``PrimFunc`` -> LLVM IR (llvmlite's IRBuilder) -> O3 -> MCJIT.

Entry point: :func:`build_llvm` returns a callable
:class:`tecomp.codegen.llvm_runtime.Module`.

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
  byte count), 3 a checked ``AssertStmt`` failed (``site``).
* returns 0 on success, else the code.

It unpacks the ABI and calls ``tecomp_<name>.body``, an internal function taking every
buffer pointer, value variable and stride as a typed argument.  Buffer pointers are
marked ``noalias`` when the variant allows it; the O3 inliner turns that into scoped
alias metadata.  A second export, ``tecomp_<name>_pyarrays``, takes in ``data[k]`` the
address of the k-th numpy array *object* instead, reads its data pointer (the field
``PyArray_DATA`` reads, right after the CPython object header) and calls the first:
the Python runtime uses it because ``id(a)`` is much cheaper than ``a.ctypes.data``.

Variants (versioning by memory layout and aliasing)
---------------------------------------------------
A variant is ``(layout, noalias)``.  ``layout="contiguous"`` indexes every buffer
parameter with the strides the IR declares (compact row-major when ``strides`` is None),
so for constant shapes they are compile-time constants, exactly as fast as a kernel
that never heard of strides; ``layout="strided"`` reads each array's strides from
``args`` at run time, so any numpy view (transposes, steps, negative and zero strides)
runs without a copy.  ``noalias=True`` promises that no written array overlaps another
argument.  The contiguous no-alias variant is compiled eagerly by :func:`build_llvm`;
the others are compiled on the first call that needs them and cached (see
``llvm_runtime``).

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
  flattened offset is affine with step 1 is a vector load, a lane-invariant one a
  scalar load (+ broadcast), affine with a small constant step (2-4: a strided
  convolution's input row) one wider masked load and a shuffle (``wide_load``),
  anything else a ``llvm.masked.gather``; a store is a vector store, a scalar store
  or a ``llvm.masked.scatter``.  An ``if`` whose condition
  depends on the lane, a ``Select`` with loads in its branches, and the tail of a loop
  with a symbolic extent are *predicated*: loads and stores under a lane mask become
  ``llvm.masked.load``/``store``/``gather``/``scatter``.  On AVX-512 an unmasked
  contiguous load or store whose lane count is not a power of two (14 float32: a
  56-wide row in 4 blocks) is one ``llvm.masked.load``/``store`` of the next power of
  two (or whole number of zmm registers) with a constant mask, instead of LLVM's
  8 + 4 + 2 lane pieces and inserts (``_FnEmitter.pad_lanes``); not for buffers a
  store reads back (accumulators: LLVM keeps a plain load/store pair in a register
  across a loop, a masked one not).  A constant extent L up to 64
  is one vector of L lanes (LLVM splits wide vectors into native registers), except
  without AVX-512 when L is not a whole number of 256-bit registers (14 float32 on AVX2):
  then register-wide pieces and a shorter last one, in sequence; a larger
  or symbolic extent is strip-mined into chunks of the native width plus a remainder
  (a shorter vector for constant extents, a masked chunk for symbolic ones).  A masked
  load wider than a register is emitted as register-wide masked loads
  (``_FnEmitter.masked_load``: LLVM aborted on one whose upper half was masked off).  Nested
  loops inside a widened body run serially with lane-invariant bounds.  Widening
  assumes, as TVM does, that the iterations are independent.  It is not possible -- and
  the loop becomes a serial loop tagged ``llvm.loop.vectorize.enable`` for LLVM's own
  loop vectorizer -- when the body allocates a buffer, a nested loop's bounds depend on
  the lane, or a lane-dependent value is stored to a lane-invariant address (a
  reduction along the vectorized axis).  Which of these a loop gets (and why) is the
  lowering's decision: the ``vector_plan`` pass (``tecomp/lower/vectorize.py``) leaves a
  plan on every vectorized loop, and this module only follows it.
  ``Module.vectorize_notes`` says what happened to each vectorized loop.
* **parallel** loops are outlined into ``tecomp_<name>.par<k>(closure, begin, end)``
  (every captured non-constant value travels in a stack closure struct; constants such
  as compile-time strides stay constants) and dispatched with
  ``tecomp_parallel_for`` (see ``llvm_threadpool``).  A parallel loop inside another
  parallel loop's body, or inside a widened body, runs serially.  What a task captures,
  and which loops are nested, is the ``parallel_plan`` pass's
  (``tecomp/lower/parallel.py``).
* **Allocate**: constant-size buffers up to 64 KiB are ``alloca``s in the entry block of
  the enclosing function (the outlined function inside a parallel body, so each task
  has its own); larger or symbolic ones use ``aligned_alloc`` (64 bytes, as the
  ``alloca``s) and ``free`` (NULL -> error code 2; an error exit frees every live heap
  buffer).
* **Prefetch**: ``llvm.prefetch.p0(ptr, rw, 3, 1)`` on the element's address, computed
  like a load's (both layouts) through a plain, non-``inbounds`` getelementptr; ``rw`` is
  1 for a write-intent prefetch (x86 ``prefetchw`` where the CPU has PRFCHW, else
  ``prefetcht0``), 0 for a read (``prefetcht0``).
* **Numerics**: see ``tecomp/ir/expr.py``.  Integer division by a zero divisor (and
  ``INT_MIN // -1``) does not trap: ``x // 0`` and ``x % 0`` give 0 (as numpy), so a
  kernel never kills the process; divisions by non-zero constants compile to plain
  LLVM divisions.  Float ``min``/``max`` of vectors are a compare and select (x86:
  ``vminps``/``vmaxps``) plus a NaN test of the first operand, of scalars
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
  ``llvm.fma`` where the host has FMA (x86 FMA3, AArch64) and separate multiplies and
  adds elsewhere.  No step is ever contracted, so the schedule never changes the
  result (vectorized, scalar, unrolled, lane-invariant code: identical bits).  Both
  variants were run on all 2^32 float32 inputs against numpy's float64 exp rounded to
  float32: at most **1 ulp** from it (FMA: 0.40% of inputs 1 ulp off, largest error
  1.02 ulp of the exact value; no FMA: 0.42%, 0.99 ulp), subnormal results included;
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

Determinism: names come from the IR (loop variables, buffers) and counters in
emission order, never from ``id()`` or hashes; the same PrimFunc gives byte-identical
LLVM IR in every process.

Errors while lowering a node are re-raised naming that node and its statement (the way
numba reports lowering errors): user-fixable problems as :class:`BuildError`, broken
invariants as :class:`InternalError`.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

import llvmlite.ir as ir
import numpy as np

from ..errors import BuildError, InternalError, ResourceLimitError, TecompError
from ..ir import dtype as _dt
from ..ir.expr import (
    EQ, GE, GT, LE, LT, NE, SPECIAL_CALLS, Add, And, Buffer, BufferLoad, Call, Cast, CmpOp,
    Const, Div, Expr, FloorDiv, FloorMod, Let, Max, Min, Mul, Not, Or, ProducerLoad, Reduce,
    Select, Sub, TruncDiv, TruncMod, Var,
)
from ..ir.functor import Visitor, free_vars, post_order
from ..ir.names import identifier
from ..ir.stmt import (
    Allocate, AssertStmt, AttrStmt, BufferStore, Evaluate, ExternCall, For, IfThenElse, LetStmt,
    Prefetch, PrimFunc, SeqStmt, Stmt, TensorIntrinCall,
)
from ..lower import parallel as _par
from ..lower import vectorize as _vec
from ..lower.vectorize import MAX_WIDEN_LANES, buffer_uses, node_text
from . import llvm_jit
from .signature import BufferParam, CheckSite, ScalarParam, Signature  # noqa: F401

# ---------------------------------------------------------------------------------------
# types

_I1 = ir.IntType(1)
_I8 = ir.IntType(8)
_I16 = ir.IntType(16)
_I32 = ir.IntType(32)
_I64 = ir.IntType(64)
_F16 = ir.HalfType()
_F32 = ir.FloatType()
_F64 = ir.DoubleType()
_PTR = ir.PointerType()

#: register (compute) type of each dtype: float16 computes in float32, bool is i1
_REG = {"bool": _I1, "int8": _I8, "uint8": _I8, "int16": _I16, "int32": _I32, "int64": _I64,
        "float16": _F32, "bfloat16": _F32, "float32": _F32, "float64": _F64}
#: memory type of each dtype: bool is a byte (numpy's layout), float16 is half, bfloat16
#: the upper 16 bits of a float32 (converted by integer code: no bfloat instruction needed)
_MEM = {"bool": _I8, "int8": _I8, "uint8": _I8, "int16": _I16, "int32": _I32, "int64": _I64,
        "float16": _F16, "bfloat16": _I16, "float32": _F32, "float64": _F64}
_SIZE = {"bool": 1, "int8": 1, "uint8": 1, "int16": 2, "int32": 4, "int64": 8,
         "float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}

#: bytes of each LLVM element type
_IR_SIZE = {_MEM[d]: _SIZE[d] for d in _MEM}

#: a vector load of every 2nd, ..., MAX_STRIDED_STEP-th element is a wider load and a
#: shuffle (``_FnEmitter.wide_load``), a larger step a gather
MAX_STRIDED_STEP = 4
#: an unrolled loop with a constant extent up to this is unrolled at code generation
MAX_FULL_UNROLL = 1024
#: allocations up to this many bytes (constant size) live on the stack
MAX_STACK_ALLOC = 64 * 1024

#: offset of the data pointer in a numpy array object (defined by the runtime, which checks
#: it against ``a.ctypes.data`` before using the ``_pyarrays`` entry)
from .llvm_runtime import PYOBJECT_DATA_OFFSET  # noqa: E402

ERR_BOUNDS = 1
ERR_MALLOC = 2
ERR_ASSERT = 3
ERR_EXTERN = 4   # an extern stage's function raised (tecomp.runtime.extern keeps it)
ERR_WORDS = 5


def _unsigned(dtype: str) -> bool:
    return dtype == "bool" or _dt.is_uint(dtype)


def _wrap_signed(v: int, bits: int) -> int:
    v &= (1 << bits) - 1
    if v >= 1 << (bits - 1):
        v -= 1 << bits
    return v


def _mangle(ty) -> str:
    if isinstance(ty, ir.VectorType):
        return f"v{ty.count}{_mangle(ty.element)}"
    if isinstance(ty, ir.HalfType):
        return "f16"
    if isinstance(ty, ir.FloatType):
        return "f32"
    if isinstance(ty, ir.DoubleType):
        return "f64"
    if isinstance(ty, ir.IntType):
        return f"i{ty.width}"
    if isinstance(ty, ir.PointerType):
        return "p0"
    raise InternalError(f"no intrinsic mangling for type {ty}")


def _with_lanes(scalar_ty, like):
    """``scalar_ty``, or a vector of it with as many lanes as the type ``like``."""
    if isinstance(like, ir.VectorType):
        return ir.VectorType(scalar_ty, like.count)
    return scalar_ty


def _operand_key(v):
    """A hashable identity of an LLVM operand: scalar integer constants by value (they are
    built afresh at each use), everything else by object (kept alive by the cache entry's
    instruction, which uses it)."""
    if _is_const(v):
        return (v.type.width, v.constant)
    return id(v)


def _is_const(v) -> bool:
    return isinstance(v, ir.Constant) and isinstance(v.type, ir.IntType) and \
        isinstance(v.constant, int)


class _Freeze(ir.Instruction):
    """``freeze``: turns poison (e.g. an out-of-range fptosi) into an arbitrary value."""

    def __init__(self, parent, value, name=""):
        super().__init__(parent, value.type, "freeze", [value], name=name)

    def descr(self, buf):
        v, = self.operands
        buf.append(f"freeze {v.type} {v.get_reference()}\n")


def _sanitize(name: str) -> str:
    return identifier(name, "kernel", c=False)


# ---------------------------------------------------------------------------------------
# signature analysis: tecomp/codegen/signature.py (shared with the runtime and the loader
# of exported libraries, which must not import llvmlite)


def _rmw_buffers(body) -> set:
    """Buffers some store reads back (``B[i] = B[i] + ...``: accumulators)."""
    out = set()

    class _V(Visitor):
        def visit_BufferStore(self, s):
            if s.buffer not in out:
                def hit(n):
                    if isinstance(n, BufferLoad) and n.buffer is s.buffer:
                        out.add(s.buffer)
                post_order(s.value, hit)
            self.generic_visit(s)

    _V().visit(body)
    return out


def _check_func(func: PrimFunc, sig: Signature) -> None:
    """Build-time checks of things the CPU target cannot run or the IR gets wrong."""
    known = set(sig.slot_vars)
    for v in free_vars(func.body):
        if v not in known:
            raise BuildError(
                f"variable `{v.name}` is used in the body of {func.name} but is neither a "
                f"scalar parameter nor the extent of a buffer parameter's dimension; add it "
                f"to the parameters")
    params = {bp.buffer for bp in sig.buffers}
    uses = buffer_uses(func.body)
    for b in uses.used:
        if b not in params and b not in uses.allocated:
            raise BuildError(f"buffer {b.name} is used in {func.name} but is neither a parameter "
                             f"nor allocated in the body; add it to the arguments")

    class _Threads(Visitor):
        def visit_For(self, s):
            if s.kind == "thread":
                raise BuildError(
                    f"the loop over `{s.var.name}` is bound to the GPU thread axis "
                    f"{s.thread_tag or '(unnamed)'}; the llvm (CPU) target cannot run GPU-bound "
                    f"loops: build with target='cuda' or remove the bind")
            self.generic_visit(s)

    _Threads().visit(func.body)


# ---------------------------------------------------------------------------------------
# values


class Val:
    """The value of an IR expression in the current lane context.

    * uniform: ``s`` is a scalar LLVM value, the same in every lane (``step == 0``);
    * affine (integers only): lane ``l`` holds ``s + l*step``;
    * vector: ``v`` is an LLVM vector with one element per lane.
    Outside widened loops every value is uniform.
    """

    __slots__ = ("s", "step", "v")

    def __init__(self, s=None, step: int = 0, v=None):
        self.s = s
        self.step = step
        self.v = v

    @property
    def uniform(self) -> bool:
        return self.v is None and self.step == 0

    @property
    def lane_affine(self) -> bool:
        """Uniform or affine (no materialised vector)."""
        return self.v is None

    @property
    def type(self):
        return self.s.type if self.v is None else self.v.type.element

    def __repr__(self):  # pragma: no cover - debugging aid
        if self.v is not None:
            return f"Val(vec {self.v.type})"
        return f"Val({self.s.type}, step={self.step})"


@dataclass
class _Buf:
    """A buffer as the current function sees it."""

    buffer: Buffer
    ptr: object                 # ir.Value (ptr)
    strides: List[object]       # i64 ir.Values (ir.Constant when known)
    extents: List[object]       # i64 ir.Values (for bounds checks)

    @property
    def dtype(self) -> str:
        return self.buffer.dtype


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
# module builder


class _ModuleBuilder:
    """Builds the LLVM module of one variant of one PrimFunc."""

    def __init__(self, func: PrimFunc, sig: Signature, layout: str, noalias: bool,
                 checks: bool, target=None):
        from ..target import as_target

        h = llvm_jit.host()
        self.target = as_target(target if target is not None else "llvm")
        self.func = func
        self.sig = sig
        self.layout = layout
        self.noalias = noalias
        self.checks = checks
        self.symbol = "tecomp_" + _sanitize(func.name)
        self.module = ir.Module(name=self.symbol)
        self.module.triple = h.triple
        self.module.data_layout = h.data_layout
        self.decls: Dict[str, ir.Function] = {}
        self.sites: List[CheckSite] = []
        self.notes: List[str] = []
        self._loop_ids = 0
        self._par_count = 0
        self._has_load: Dict[int, bool] = {}
        # AVX-512: a contiguous access of a lane count that is not a power of two (e.g.
        # 14 float32) is one masked access of the next power of two (_FnEmitter.pad_lanes)
        # (not for accumulators: LICM keeps a plain load/store pair in registers across a
        # loop, but not a masked one)
        self.masked_pad = self.target.has_feature("avx512f")
        #: bytes of one vector register (masked loads wider than it are split: masked_load)
        self.register_bytes = 64 if self.masked_pad else 32
        #: fused multiply-adds in hardware (exp_f32's polynomial uses them)
        self.has_fma = self.target.has_feature("fma")
        self.no_pad = _rmw_buffers(func.body) if self.masked_pad else set()
        #: fast-math flags on float +, -, *: "contract" lets LLVM fuse a*b+c into an FMA
        #: (one rounding instead of two); opt in with PrimFunc.attrs["fp_contract"] = True
        self.fp_flags = ("contract",) if func.attrs.get("fp_contract", False) else ()

    # -- declarations ----------------------------------------------------------------
    def declare(self, name: str, ret, args) -> ir.Function:
        f = self.decls.get(name)
        if f is None:
            f = self.module.globals.get(name)
            if f is None:
                f = ir.Function(self.module, ir.FunctionType(ret, list(args)), name=name)
            self.decls[name] = f
        return f

    def intrinsic(self, base: str, ret, args, mangle_types) -> ir.Function:
        name = base + "".join("." + _mangle(t) for t in mangle_types)
        return self.declare(name, ret, args)

    def loop_md(self, *props):
        """A distinct ``llvm.loop`` node carrying ``props`` (pairs of name, value)."""
        self._loop_ids += 1
        ops = [ir.MetaDataString(self.module, f"tecomp.loopid.{self._loop_ids}")]
        for key, val in props:
            if isinstance(val, bool):
                c = ir.Constant(_I1, 1 if val else 0)
            else:
                c = ir.Constant(_I32, int(val))
            ops.append(self.module.add_metadata([ir.MetaDataString(self.module, key), c]))
        return self.module.add_metadata(ops)

    def has_load(self, e) -> bool:
        k = id(e)
        r = self._has_load.get(k)
        if r is None:
            found = []

            class _V(Visitor):
                def visit_BufferLoad(self, x):
                    found.append(x)

            _V().visit(e)
            r = bool(found)
            self._has_load[k] = r
        return r

    def explicitly_vectorized(self) -> bool:
        """Whether the schedule vectorized the kernel itself: at least one loop was
        widened and none was left to LLVM's loop vectorizer (then the optimiser skips
        its own vectorizers and unroller, see ``llvm_jit.optimize``)."""
        widened = any(n.startswith("vectorized loop") and "not widened" not in n
                      for n in self.notes)
        fallback = any("not widened" in n for n in self.notes)
        return widened and not fallback

    def add_site(self, kind, buffer, text, stmt) -> int:
        self.sites.append(CheckSite(kind, buffer, text, stmt))
        return len(self.sites) - 1

    # -- the kernel -----------------------------------------------------------------
    def build(self) -> str:
        sig = self.sig
        # the body function: typed arguments
        arg_types, arg_names = [], []
        for bp in sig.buffers:
            arg_types.append(_PTR)
            arg_names.append(_sanitize(bp.name))
        for v in sig.slot_vars:
            arg_types.append(_REG[v.dtype])
            arg_names.append(_sanitize(v.name))
        if self.layout == "strided":
            for bp in sig.buffers:
                for d in range(bp.ndim):
                    arg_types.append(_I64)
                    arg_names.append(f"{_sanitize(bp.name)}_stride{d}")
        arg_types.append(_PTR)
        arg_names.append("err")
        body_fn = ir.Function(self.module, ir.FunctionType(_I32, arg_types),
                              name=self.symbol + ".body")
        body_fn.linkage = "internal"
        body_fn.attributes.add("nounwind")
        body_fn.attributes.add("alwaysinline")
        for a, n in zip(body_fn.args, arg_names):
            a.name = n
        nb = len(sig.buffers)
        for k in range(nb):
            if self.noalias:
                body_fn.args[k].add_attribute("noalias")
        body_fn.args[-1].add_attribute("noalias")

        em = _FnEmitter(self, body_fn, body_fn.args[-1], in_parallel=False)
        args = list(body_fn.args)
        for i, v in enumerate(sig.slot_vars):
            em.env[v] = Val(args[nb + i])
        stride_args = args[nb + len(sig.slot_vars):-1]
        si = 0
        for k, bp in enumerate(sig.buffers):
            b = bp.buffer
            extents = [em.scalar_index(x) for x in b.shape]
            if self.layout == "strided":
                strides = list(stride_args[si:si + bp.ndim])
                si += bp.ndim
            else:
                strides = em.declared_strides(b, extents)
            em.bufs[b] = _Buf(b, args[k], strides, extents)
        em.stmt(self.func.body)
        em.finish_ok()

        main = self._emit_entry(body_fn)
        self._emit_pyarrays_entry(main)

    def _emit_entry(self, body_fn) -> ir.Function:
        """The exported function ``tecomp_<name>(data, args, err)``: unpack the ABI and
        call the body (which the optimiser inlines here)."""
        sig = self.sig
        entry = ir.Function(self.module, ir.FunctionType(_I32, [_PTR, _PTR, _PTR]),
                            name=self.symbol)
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
        if self.layout == "strided":
            for bp in sig.buffers:
                for d in range(bp.ndim):
                    p = b.gep(slots, [ir.Constant(_I64, bp.stride_slot + d)], source_etype=_I64)
                    vals.append(b.load(p, typ=_I64, align=8))
        vals.append(err)
        b.ret(b.call(body_fn, vals))
        return entry

    def _emit_pyarrays_entry(self, main: ir.Function) -> None:
        """``tecomp_<name>_pyarrays(objs, args, err)``: ``objs[k]`` is the address of a
        numpy array object; read each data pointer from it (the field ``PyArray_DATA``
        reads, at ``PYOBJECT_DATA_OFFSET``) and call the main entry."""
        nb = len(self.sig.buffers)
        entry = ir.Function(self.module, ir.FunctionType(_I32, [_PTR, _PTR, _PTR]),
                            name=self.symbol + "_pyarrays")
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

    def text(self) -> str:
        s = str(self.module)
        if not self.target.is_host:
            # every function compiled for the target's CPU: LLVM takes the subtarget (the
            # instructions, the vector width its cost model assumes) from these
            # attributes instead of the host's TargetMachine defaults
            # (both: a function without "target-features" would get the host's, AVX-512
            # included, on top of the CPU's own)
            attrs = (f' "target-cpu"="{self.target.cpu}"'
                     f' "target-features"="{self.target.llvm_features}"')
            s = re.sub(r"^(define [^\n]*?)\s*\{$", lambda m: m.group(1) + attrs + " {", s,
                       flags=re.M)
        # llvmlite cannot build self-referential metadata: loop ids are emitted as
        # !{!"tecomp.loopid.K", ...} and patched into distinct !{!N, ...} here.
        return re.sub(r'^(!\d+) = !\{\s*!"tecomp\.loopid\.\d+"\s*,\s*',
                      lambda m: f"{m.group(1)} = distinct !{{{m.group(1)}, ",
                      s, flags=re.M)

    # -- parallel outlining ---------------------------------------------------------
    def outline_parallel(self, parent: "_FnEmitter", loop: For, lo, captured_vars,
                         used_bufs) -> Tuple[ir.Function, List[object]]:
        """Emit the task function of ``loop``; return it and the captured values."""
        k = self._par_count
        self._par_count += 1
        name = f"{self.symbol}.par{k}"
        captures: List[object] = []
        index: Dict[int, int] = {}

        def cap(v):
            if isinstance(v, ir.Constant):
                return v
            i = index.get(id(v))
            if i is None:
                i = len(captures)
                index[id(v)] = i
                captures.append(v)
            return ("cap", i)

        var_plan = []
        for var in captured_vars:
            val = parent.env[var]
            v64 = parent.env64.get(var)
            var_plan.append((var, cap(val.s), cap(v64.s) if v64 is not None else None))
        buf_plan = []
        param_bufs = {bp.buffer for bp in self.sig.buffers}
        for b in used_bufs:
            bi = parent.bufs[b]
            buf_plan.append((b, cap(bi.ptr), [cap(s) for s in bi.strides],
                             [cap(e) for e in bi.extents],
                             self.noalias or b not in param_bufs))
        lo_ref = cap(lo)
        err_ref = cap(parent.err)

        # body function: typed, noalias pointers; inlined into the task wrapper
        types = [v.type for v in captures] + [_I64, _I64]
        body = ir.Function(self.module, ir.FunctionType(_I32, types), name=name + ".body")
        body.linkage = "internal"
        body.attributes.add("nounwind")
        body.attributes.add("alwaysinline")
        for b, pref, _, _, na in buf_plan:
            if na and isinstance(pref, tuple):
                body.args[pref[1]].add_attribute("noalias")
        for i, a in enumerate(body.args[:len(captures)]):
            a.name = f"c{i}"
        begin, end = body.args[-2], body.args[-1]
        begin.name, end.name = "begin", "end"

        def get(ref):
            return body.args[ref[1]] if isinstance(ref, tuple) else ref

        em = _FnEmitter(self, body, get(err_ref), in_parallel=True)
        for var, sref, s64ref in var_plan:
            em.env[var] = Val(get(sref))
            if s64ref is not None:
                em.env64[var] = Val(get(s64ref))
        for b, pref, srefs, erefs, _ in buf_plan:
            em.bufs[b] = _Buf(b, get(pref), [get(r) for r in srefs], [get(r) for r in erefs])
        lo_v = get(lo_ref)
        start = em.iadd(lo_v, begin)
        stop_n = em.b.sub(end, begin)
        em.loop(_sanitize(loop.var.name), start, stop_n,
                lambda iv: em.with_loop_var(loop.var, Val(iv), lambda: em.stmt(loop.body)))
        em.finish_ok()

        # task wrapper: i32 (ptr closure, i64 begin, i64 end)
        task = ir.Function(self.module, ir.FunctionType(_I32, [_PTR, _I64, _I64]), name=name)
        task.linkage = "internal"
        task.attributes.add("nounwind")
        cl, tb, te = task.args
        cl.name, tb.name, te.name = "closure", "begin", "end"
        bb = ir.IRBuilder(task.append_basic_block("entry"))
        st = ir.LiteralStructType([v.type for v in captures])
        vals = []
        for i, v in enumerate(captures):
            p = bb.gep(cl, [ir.Constant(_I32, 0), ir.Constant(_I32, i)], inbounds=True,
                       source_etype=st)
            vals.append(bb.load(p, typ=v.type))
        bb.ret(bb.call(body, vals + [tb, te]))
        return task, captures


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


def _bf16_to_f32(b: ir.IRBuilder, x):
    """The float32 whose upper half is the bfloat16 bits ``x`` (i16, scalar or vector)."""
    i32 = _with_lanes(_I32, x.type)
    w = b.shl(b.zext(x, i32), _splat(i32, 16))
    return b.bitcast(w, _with_lanes(_F32, x.type))


def _f32_to_bf16(b: ir.IRBuilder, x):
    """float32 ``x`` rounded to the nearest bfloat16 (ties to even), as i16 bits; a NaN
    stays a (quiet) NaN of the same sign."""
    i32 = _with_lanes(_I32, x.type)
    i16 = _with_lanes(_I16, x.type)
    u = b.bitcast(x, i32)
    hi = b.lshr(u, _splat(i32, 16))
    bias = b.add(_splat(i32, 0x7FFF), b.and_(hi, _splat(i32, 1)))
    rounded = b.trunc(b.lshr(b.add(u, bias), _splat(i32, 16)), i16)
    quiet = b.trunc(b.or_(hi, _splat(i32, 0x40)), i16)
    return b.select(b.fcmp_unordered("uno", x, x), quiet, rounded)


def _f64_to_f16(b: ir.IRBuilder, x):
    """``fptrunc double -> half`` rounding once, without a libcall (x: scalar or vector).

    x86 without AVX512-FP16 has no direct instruction and the compiler-rt helper is not
    in the process.  Round to float32 *to odd* (truncate, then set the last bit when
    inexact), then to half: the odd bit keeps the second rounding correct.
    """
    f32 = _with_lanes(_F32, x.type)
    i32 = _with_lanes(_I32, x.type)
    r = b.fptrunc(x, f32)
    back = b.fpext(r, x.type)
    # truncate toward zero: if |r| > |x|, step r one ulp toward zero
    ar = b.call(_fabs_decl(b, back.type), [back])
    ax = b.call(_fabs_decl(b, x.type), [x])
    too_big = b.fcmp_ordered(">", ar, ax)
    bits = b.bitcast(r, i32)
    one = _splat(i32, 1)
    bits = b.select(too_big, b.sub(bits, one), bits)
    inexact = b.fcmp_ordered("!=", b.fpext(b.bitcast(bits, f32), x.type), x)
    bits = b.select(inexact, b.or_(bits, one), bits)
    odd = b.bitcast(bits, f32)
    isnan = b.fcmp_unordered("uno", x, x)
    odd = b.select(isnan, r, odd)
    return b.fptrunc(odd, _with_lanes(_F16, x.type))


def _fabs_decl(b: ir.IRBuilder, ty):
    mod = b.module
    name = "llvm.fabs." + _mangle(ty)
    f = mod.globals.get(name)
    if f is None:
        f = ir.Function(mod, ir.FunctionType(ty, [ty]), name=name)
    return f


def _int_const_value(value, width: int) -> int:
    if width == 1:
        return int(value) & 1
    return _wrap_signed(int(value), width)


class _Lit(ir.Constant):
    """A vector constant written in LLVM's short forms (``poison``, ``zeroinitializer``,
    ``splat (float 1.0)``) instead of llvmlite's element list: a 32-lane ``undef`` vector
    is 32 formatted elements, on every use, in text that LLVM then parses again."""

    def __init__(self, ty, text: str):
        super().__init__(ty, None)
        self.text = text

    def _get_reference(self):
        return self.text


_LITS: Dict[Tuple[str, str], _Lit] = {}


def _lit(ty, text: str) -> _Lit:
    """The shared constant for ``(ty, text)`` (it caches its own text).  The cache is
    emptied when it grows past 4096 entries: a process that builds kernels with ever new
    constants must not grow with them."""
    key = (str(ty), text)
    c = _LITS.get(key)
    if c is None:
        if len(_LITS) >= 4096:
            _LITS.clear()
        c = _LITS[key] = _Lit(ty, text)
    return c


def _poison(ty) -> _Lit:
    return _lit(ty, "poison")


def _splat_const(vty, c) -> _Lit:
    """The vector of type ``vty`` with every element the scalar constant ``c``."""
    return _lit(vty, f"splat ({c.type} {c.get_reference()})")


def _splat(ty, value):
    """A constant of type ``ty`` (scalar or vector) with every element ``value``."""
    if isinstance(ty, ir.VectorType):
        el = ty.element
        if isinstance(el, ir.IntType):
            value = _int_const_value(value, el.width)
        return _splat_const(ty, ir.Constant(el, value))
    if isinstance(ty, ir.IntType):
        value = _int_const_value(value, ty.width)
    return ir.Constant(ty, value)


# ---------------------------------------------------------------------------------------
# function emitter


class _FnEmitter:
    """Lowers statements and expressions into one LLVM function."""

    def __init__(self, mb: _ModuleBuilder, fn: ir.Function, err, *, in_parallel: bool):
        self.mb = mb
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

    def error_block(self):
        if self._err_block is None:
            self._err_block = self.fn.append_basic_block("error")
        return self._err_block

    def finish_ok(self):
        """Return 0 from the current block, close the entry block and the error exit."""
        self.b.ret(ir.Constant(_I32, 0))
        self.ab.branch(self.start)
        if self._err_block is not None:
            b = ir.IRBuilder(self._err_block)
            for slot in self.heap_slots:
                p = b.load(slot, typ=_PTR, align=8)
                b.call(self.mb.declare("free", ir.VoidType(), [_PTR]), [p])
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
                b.store(v, b.gep(self.err, [ir.Constant(_I64, w)], source_etype=_I64), align=8)

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
        off = Val(ir.Constant(_I64, 0))
        for ix, st in zip(idx, bi.strides):
            off = self.vadd(off, self.vmul(ix, Val(st)))
        return off, idx

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
        ``memty`` is widened to: the next
        power of two when ``self.lanes`` is not one and less than a zmm register, else
        the next whole number of zmm registers (AVX-512 only, 32- and 64-bit
        elements).  LLVM otherwise splits e.g. a 14-lane float32 load into 8 + 4 + 2
        lane loads and two inserts (on port 5, shared with the second FMA unit) and a
        store into three stores; one masked access (``vmovups`` with a ``k`` mask) is a
        single instruction.  Returns ``self.lanes`` when no widening applies."""
        n = self.lanes
        if off.v is not None or off.step != 1 or self.mask is not None:
            return n
        if (n <= 2 or n & (n - 1) == 0 or n > MAX_WIDEN_LANES or not self.mb.masked_pad
                or memty not in (_F32, _I32, _F64, _I64) or bi.buffer in self.mb.no_pad):
            return n
        per_reg = 64 // (4 if memty in (_F32, _I32) else 8)
        if n % per_reg == 0:
            return n        # whole zmm registers (e.g. 48 float32): LLVM splits it cleanly
        if n > per_reg:
            return -(-n // per_reg) * per_reg   # e.g. 58 -> 64: whole registers
        return 1 << (n - 1).bit_length()

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
        elif (off.v is None and 2 <= off.step <= MAX_STRIDED_STEP and self.mask is None
              and off.step * self.lanes <= MAX_WIDEN_LANES
              and memty in (_F32, _I32, _F64, _I64)):
            # a small constant step (a stride-2 convolution's input row): one contiguous
            # load of step*lanes elements and a shuffle, instead of a gather (16 lanes:
            # two loads and a vpermt2ps against a 16-element vgatherdps)
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
        a whole register (``pad_lanes``, step 1) or a load of every 2nd to
        ``MAX_STRIDED_STEP``-th element.  The load is masked past the last element the
        lanes use, so it reads nothing they would not."""
        n = self.lanes
        wty = ir.VectorType(memty, width)
        w = self.masked_load(self._elem_ptr(bi, off.s, False), wty, align,
                             self._pad_mask(width, step * (n - 1) + 1))
        return self.b.shuffle_vector(w, _poison(wty), ir.Constant(
            ir.VectorType(_I32, n), [ir.Constant(_I32, i * step) for i in range(n)]))

    def masked_load(self, p, vty, align: int, mask):
        """``llvm.masked.load`` of ``vty`` at ``p`` (zero where ``mask`` is false), as
        register-wide pieces where ``vty`` is wider than a register.  LLVM's backend
        splits a wider one itself, and aborts the process (an assertion in its alias
        analysis, llvmlite 0.50 on an AVX2 Zen 3) when a piece's mask is all false:
        ``<8 x double>`` masked to its first 4 lanes, from a fuzzed program."""
        b = self.b
        n, et = vty.count, vty.element
        per = max(1, self.mb.register_bytes // _IR_SIZE[et])
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
        :class:`~tecomp.codegen.llvm_intrin.IntrinView`; an intrinsic without one runs the
        loops it replaced.  Where a region's strides are known only at run time (the
        variant for strided arrays), a dense intrinsic runs when they are the declared
        layout's and the loops it replaced otherwise; any other intrinsic runs those loops.
        Checked builds test the first and last element of each region."""
        from ..te.tensor_intrin import row_major
        from .llvm_intrin import IntrinBuilder, IntrinView

        intrin = s.intrin
        if intrin.llvm is None:
            self.stmt(s.fallback)
            return
        intrin.check_target(self.mb.target, s.stage)
        if self.mask is not None or self.lanes > 1:
            raise InternalError(f"the tensor intrinsic {intrin.name} is inside a vectorized loop")
        b = self.b
        views, known, checks = [], True, []
        for n, (ph, buf) in enumerate(zip([intrin.output] + list(intrin.inputs), s.buffers)):
            bi = self.buf(buf)
            off, idx = self.offset(bi, s.base(n))
            shape = tuple(int(x.value) for x in ph.shape)
            if self.checks:
                self.bounds_check(bi, idx, s, "tensorize")
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
            intrin.llvm(IntrinBuilder(self, intrin.name), views[1:], views[:1])

        if known or (intrin.dense and not checks):
            emit()
        elif not intrin.dense:
            self.stmt(s.fallback)
        else:
            ok = checks[0]
            for c in checks[1:]:
                ok = b.and_(ok, c)
            self.if_(ok, emit, lambda: self.stmt(s.fallback), name="tensorize.layout")

    def s_extern_call(self, s: ExternCall):
        """``tecomp_extern_call(site, data, ints, floats)`` (see tecomp.runtime.extern):
        the buffers' data pointers, their extents and strides (elements) then the integer
        scalars, and the float scalars, in stack arrays; a nonzero return is error 4."""
        from ..runtime import extern as _ext

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
            n = max(count.constant, 1)
            ptr = self.alloca(ir.ArrayType(_MEM[buf.dtype], n), name=name, align=64)
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
        rounded = self.iadd(nbytes, ir.Constant(_I64, 63))
        rounded = b.and_(rounded, ir.Constant(_I64, -64)) if not _is_const(rounded) else \
            ir.Constant(_I64, rounded.constant & -64)
        p = b.call(self.mb.declare("aligned_alloc", _PTR, [_I64, _I64]),
                   [ir.Constant(_I64, 64), rounded], name=name)
        self.guard(b.icmp_unsigned("==", p, ir.Constant(_PTR, None)),
                   lambda: self.report(ERR_MALLOC, site, None, None, nbytes), name="malloc")
        b.store(p, slot, align=8)
        self.bufs[buf] = _Buf(buf, p, strides, extents)
        try:
            self.stmt(s.body)
        finally:
            del self.bufs[buf]
        b.call(self.mb.declare("free", ir.VoidType(), [_PTR]), [p])
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
        task, captures = self.mb.outline_parallel(self, s, lo, captured, used)
        b = self.b
        st = ir.LiteralStructType([v.type for v in captures])
        closure = self.alloca(st, name="closure", align=8)
        for i, v in enumerate(captures):
            p = b.gep(closure, [ir.Constant(_I32, 0), ir.Constant(_I32, i)], inbounds=True,
                      source_etype=st)
            b.store(v, p)
        pf = self.mb.declare("tecomp_parallel_for", _I32, [_PTR, _PTR, _I64])
        rc = b.call(pf, [task, closure, n])
        self.guard(b.icmp_signed("!=", rc, ir.Constant(_I32, 0)),
                   lambda: b.branch(self.error_block()), name="par")

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
            # ``x < y ? x : y`` (x86: one vminps / vmaxps, which gives y when either is
            # NaN), then x where x is NaN: NaN propagates, the zero of min(0.0, -0.0) is
            # unspecified (see ir.expr.Min).  Three instructions per vector where
            # llvm.minimum / llvm.maximum, which also orders -0 below +0, takes six
            # Scalars use the intrinsic: LLVM's loop vectorizer (it runs on modules that
            # tecomp did not vectorize) never returned on a max reduction written as
            # this compare-select (a loop of ``acc = max(acc, alpha + x[k % 3])``)
            def fn(x, y):
                if not isinstance(x.type, ir.VectorType):
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
        safe = not (self.mb.has_load(e.true_value) or self.mb.has_load(e.false_value))
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

        if self.mask is not None:
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
        where the target has fused multiply-adds, else a multiply and an add (never
        contracted: the vector math functions give the same bits under every schedule)."""
        b = self.b
        if self.mb.has_fma:
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
        Where the target has fused multiply-adds (``_ModuleBuilder.has_fma``) the reduction
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
        from ..runtime import extern as _ext

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


class VariantCompiler:
    """Generates and compiles the variants of one PrimFunc (used by the runtime)."""

    def __init__(self, func: PrimFunc, sig: Signature, checks: bool, target=None):
        from ..lower.pipeline import prepare_for_codegen
        from ..target import as_target

        self.target = as_target(target if target is not None else "llvm")
        #: ``func`` after the target's codegen passes (vector plans, parallel tasks)
        self.func = prepare_for_codegen(func, self.target)
        self.sig = sig
        self.checks = checks

    def generate(self, layout: str, noalias: bool) -> _ModuleBuilder:
        mb = _ModuleBuilder(self.func, self.sig, layout, noalias, self.checks, self.target)
        try:
            mb.build()
        except (TecompError, InternalError) as exc:
            raise _with_func(exc, self.func) from exc
        except Exception as exc:  # noqa: BLE001 - anything else is our bug
            raise InternalError(f"LLVM code generation of {self.func.name} failed: "
                                f"{type(exc).__name__}: {exc}") from exc
        return mb

    def compile(self, layout: str, noalias: bool):
        """Return ``(JitModule, _ModuleBuilder, seconds)`` for the variant."""
        from .llvm_threadpool import ensure_pool

        t0 = time.perf_counter()
        mb = self.generate(layout, noalias)
        text = mb.text()
        t1 = time.perf_counter()
        if "tecomp_parallel_for" in text:
            ensure_pool()
        try:
            jm = llvm_jit.compile_ir(text, [mb.symbol, mb.symbol + "_pyarrays"],
                                     explicit=mb.explicitly_vectorized())
        except RuntimeError as exc:
            raise InternalError(f"LLVM rejected the module generated for {self.func.name} "
                                f"({layout}, noalias={noalias}): {exc}") from exc
        jm.timings["codegen"] = t1 - t0
        return jm, mb, time.perf_counter() - t0


def _with_func(exc, func: PrimFunc):
    """``exc`` again, its message ending with the name of the function being built."""
    if isinstance(exc, InternalError):
        return InternalError(f"{_internal_message(exc)}\n  in primfn {func.name}")
    try:
        return type(exc)(f"{exc}\n  in primfn {func.name}")
    except Exception:  # noqa: BLE001 - an exotic constructor: keep the original
        return exc


def build_llvm(func: PrimFunc, *, checks: bool = False, target=None):
    """Compile ``func`` for ``target`` (an ``llvm`` :class:`~tecomp.target.Target`, by
    default the one it was lowered for, else the host CPU); return a callable
    :class:`~tecomp.codegen.llvm_runtime.Module`.

    The contiguous, no-alias variant is compiled now; the strided and aliasing variants
    when a call first needs them.  ``checks=True`` bounds-checks every load and store.
    """
    from .llvm_runtime import Module

    if not isinstance(func, PrimFunc):
        raise BuildError(f"build_llvm expects a PrimFunc, got {type(func).__name__}")
    t0 = time.perf_counter()
    sig = Signature(func)
    _check_func(func, sig)
    from ..target import as_target

    tgt = as_target(target if target is not None else func.attrs.get("target", "llvm"))
    if tgt.kind != "llvm":
        raise BuildError(f"build_llvm: {func.name} was lowered for target {str(tgt)!r}; "
                         f"build it with tc.build(..., target={tgt.kind!r})")
    vc = VariantCompiler(func, sig, checks, tgt)
    jm, mb, _ = vc.compile("contiguous", True)
    seconds = time.perf_counter() - t0
    return Module(func, sig, vc, jm, mb, checks=checks, compile_seconds=seconds, target=tgt)
