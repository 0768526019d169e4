"""The reference interpreter of the loop IR: slow, exact, and the oracle of every other backend.

Differential fuzzing compares the LLVM build, the CUDA emulation and numpy against it,
and pass-by-pass checking runs it before and after every lowering pass.  It therefore
implements the semantics stated in :mod:`tecomp.ir.expr` *exactly*, and where compiled
code would do something undefined it raises instead of guessing.

Entry points
------------
* :func:`run` ``(func, *args, check_bounds=True, check_races=True)`` calls a PrimFunc like
  a compiled kernel: numpy arrays for Buffer parameters (outputs are written in place; any
  numpy view works, non-contiguous included, since buffers are indexed with multi-dim
  indices, never through raw memory), Python/numpy scalars for scalar Var parameters.
* :func:`run_stmt` ``(stmt, env)`` runs one statement with ``env`` mapping Vars to values
  and Buffers to arrays (the env is updated in place).
* :func:`eval_expr` ``(expr, env=None)`` evaluates an expression (e.g. to check a
  simplifier rule on sample values).
* :class:`Interpreter` holds the options and a cache of compiled functions.

The IR is compiled once into nested Python closures (one per node), so the inner loop
never re-dispatches on node types; a 16x16x16 matmul runs in a few milliseconds.

Values
------
Every value carries its IR dtype.  Integers (``int8`` ... ``int64``, ``uint8``) are Python
ints kept in range by wrapping after every operation (two's complement, as LLVM's
``add``/``mul``); ``bool`` is a Python bool; ``float64`` is a Python float; ``float32`` is a
Python float that is always exactly a float32: every operation is done in double and
rounded to float32 (for + - * / that double-then-round is bit-identical to a float32
operation).  A ``float32`` accumulation ``C[i] = C[i] + A[k]*B[k]`` therefore rounds at
each step, as compiled code without fast-math does.  ``float16`` is storage only: a load
from a float16 buffer widens to float32, a store to it rounds to nearest float16, and an
Expr whose dtype is ``float16`` computes in float32 (:func:`tecomp.ir.dtype.compute_dtype`):
``Add(a, b, "float16")`` is a float32 addition.  Two float16 nodes do round to half
precision (the value they give is still used as a float32; ``bfloat16`` is the same with its
own rounding, through float32): a ``Const`` of dtype float16
has the nearest float16 value, and ``Cast(x, "float16")`` rounds ``x`` to the nearest
float16 (from float64 directly; an int goes through float32 first, as C's
``(half)(float)i``).

* ``FloorDiv``/``FloorMod`` round toward -inf, ``TruncDiv``/``TruncMod`` toward 0.  An
  integer division or modulo by zero (undefined in a kernel) raises
  :class:`~tecomp.errors.ExprError` ``integer division by zero in <expr>``; the one
  overflowing quotient, ``MIN // -1``, wraps to ``MIN`` (and ``MIN % -1`` is 0) like all
  integer arithmetic (the C backend's helpers do the same instead of trapping).  Float
  division by zero gives inf/nan as IEEE.
* ``Cast`` float->int truncates toward zero; an out-of-range finite value wraps the
  truncated value into the target type (C leaves it undefined); NaN or inf raise
  ``ExprError``.  int->int wraps, int->float rounds to nearest (correctly rounded, also
  for int64 -> float32), anything->bool is ``!= 0``, bool->number is 0/1.
* ``Min``/``Max`` of floats propagate NaN (``min(a, b) = (a < b || a != a) ? a : b``, so
  ``min(-0.0, 0.0)`` is ``0.0``, as the C backend's helpers); comparisons with NaN are
  False except ``NE``.
* ``Select`` is lazy; ``And``/``Or`` evaluate both operands (they are pure, so a load in
  either is checked).
* ``Call`` intrinsics are evaluated in double and rounded once to the dtype (so
  ``rsqrt``/``sigmoid`` are the correctly rounded values of 1/sqrt(x) and 1/(1+exp(-x)),
  ``exp`` and ``fast_exp`` are both the double exp rounded once: the oracle is exact;
  the LLVM backend's float32 ``exp``/``fast_exp``/``sigmoid`` are its own vector code,
  within 1 ulp of that for ``exp`` (``docs/numerics.md``), so a comparison of compiled
  float32 exp with this oracle needs a tolerance); ``round`` is half to even, ``abs`` of
  an int wraps (``abs(INT_MIN) == INT_MIN``).
* An operand may be of a narrower int dtype than its node (``int32 + int64 -> int64``
  without a Cast, as :func:`tecomp.ir.op.add` builds it): its value is kept, as C's
  promotion does (likewise a narrower int value stored into a wider int buffer).  Other
  mismatches are malformed IR (a float32 operand of a float64
  node, an int64 operand of an int32 node, a store of an int into a float buffer, a
  TE-only ``Reduce``/``ProducerLoad``): they raise
  :class:`~tecomp.errors.InternalError` when the function is compiled.

Memory
------
* ``Allocate`` creates a numpy array of the evaluated shape filled with poison: NaN for
  floats, the byte pattern ``0x5A`` for ints (``0x5A5A5A5A`` for int32), True for bool,
  so reading uninitialized memory shows up as a mismatch.  A buffer allocated inside a
  loop body gets fresh poison at every execution.
* Every ``BufferLoad``/``BufferStore`` is checked against the extents (the shape; strides
  are a codegen concern only).  With ``check_bounds=True`` an index outside ``[0, extent)``
  in any dimension raises :class:`~tecomp.errors.BoundsError` naming the buffer, the
  dimension, the index value, the extent, the printed IR and the loop variables.  With
  ``check_bounds=False`` the access is resolved as compiled code would resolve it: the
  indices are flattened row-major (``A[i, 4]`` of a 4-wide A is ``A[i + 1, 0]``) and only an
  access outside the whole buffer raises (there is no memory to model there); buffers
  with explicit ``strides`` keep the per-dimension check.
* ``AssertStmt`` raises ``BoundsError`` with its message when false.
* ``Prefetch`` reads and writes nothing (it is a cache hint); its indices are evaluated
  and, with ``check_bounds=True``, checked like an access's (an element outside the
  buffer would be a tecomp bug: the ``prefetch`` pass clamps every index).

Loops and the GPU model
-----------------------
``serial``, ``unrolled``, ``parallel`` and ``vectorized`` loops run serially in order.  With
``check_races=True`` (the default) the iterations of a ``parallel`` or ``vectorized`` loop are
checked for independence: if one iteration writes an element that another iteration
reads or writes (with a different value), :class:`RaceError` is raised, since such a loop
gives a different answer when its iterations run at once (as the compiled code runs
them).  Writes of the same value by several iterations, or writes that do not change the
element, are benign and allowed.

A ``For`` of kind ``thread`` (tags ``blockIdx.x/y/z``, ``threadIdx.x/y/z``) that is not inside
another thread loop starts a *kernel* (so two such loops one after the other are two
kernels, launched in order): the whole loop nest under it is run SPMD, the way CUDA
runs it:

* The launch size of each tag is the largest extent of the thread loops with that tag in
  the kernel, evaluated at the start: a grid size may only depend on variables bound
  outside the kernel, a block size also on blockIdx loop variables (it is then the
  largest over all blocks, as one block size serves every block); a tag that does not
  appear has size 1.
* Blocks run one after another.  Every thread of a block runs the *whole* kernel body
  (code that is not under a threadIdx loop is run by every thread, as on the GPU); a
  thread loop binds its variable to ``min + coordinate`` of the thread when the
  coordinate is below the loop's extent, and skips its body otherwise.
* The threads of a block are Python generators interleaved at ``syncthreads`` barriers:
  thread 0 runs until its next barrier, then thread 1, ... (threadIdx.x fastest, then y,
  then z), then all continue.  So a
  program missing a barrier reads stale or uninitialized (poisoned) shared memory.
* ``Allocate`` of scope ``shared`` inside a kernel is one array per block (allocated,
  poisoned, by the first thread that reaches it; it keeps its contents if reached again,
  as CUDA's static shared memory does); every other scope is one array per thread.  A
  non-global buffer allocated *around* the kernel keeps that meaning: each block (shared)
  or thread (other scopes) gets its own fresh, poisoned copy when the kernel starts.
* With ``check_races=True`` every access is logged per barrier interval: two threads of a
  block touching the same element (a write and a read, or two writes of different
  values) without a barrier between them raises :class:`RaceError`, and so do two
  *blocks* touching the same global element in one launch (blocks cannot synchronise).
* A barrier reached by only some threads of a block, or different barriers reached in
  one interval, raises :class:`GPUModelError` (undefined behaviour on the GPU), as do a
  barrier outside any kernel or inside a parallel/vectorized loop, a thread tag other
  than the six above, and a thread extent that depends on a variable bound inside the
  kernel.
"""
from __future__ import annotations

import itertools
import math
import operator
import struct
import weakref
from typing import Any, Callable, Dict, Optional

import numpy as np

from ..errors import (  # GPUModelError, RaceError: defined in tecomp.errors, importable here
    ArgumentError, BoundsError, ExprError, GPUModelError, InternalError, KernelMemoryError,
    LowerError, RaceError, ShapeError,
)
from . import dtype as _dt
# Node classes are dispatched on by name (``_e_<Class>``/``_s_<Class>``); only the ones
# tested with isinstance are imported.
from .expr import (
    INTRINSICS, Buffer, BufferLoad, Call, Cast, Const, Expr, Let, ProducerLoad, Reduce, Var,
)
from .deep import deep_entry
from .extern_sites import site as extern_site
from .functor import free_vars, post_order
from .host_eval import compile_shape_expr
from .printer import Printer, to_str
from .stmt import (
    Allocate, AssertStmt, AttrStmt, BufferStore, Evaluate, ExternCall, For, IfThenElse, LetStmt,
    TensorIntrinCall,
    Prefetch, PrimFunc, SeqStmt, Stmt,
)

__all__ = [
    "run", "run_stmt", "eval_expr", "Interpreter", "GPUModelError", "RaceError",
    "poison_value", "THREAD_TAGS",
]


BLOCK_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z")
THREAD_IDX_TAGS = ("threadIdx.x", "threadIdx.y", "threadIdx.z")
THREAD_TAGS = BLOCK_TAGS + THREAD_IDX_TAGS

# Private keys of the environment (strings never collide with Var/Buffer keys).
_COORD = "__interp_coord__"  # {tag: coordinate} of the running GPU thread
_BLOCK = "__interp_block__"  # {Buffer: array} shared allocations of the running block
_LOGS = "__interp_logs__"    # ((AccessLog, actor), ...) race logs the access goes to
_MISSING = object()

# ---------------------------------------------------------------------------------
# numerics

_F32 = struct.Struct("<f")
_f32_pack, _f32_unpack = _F32.pack, _F32.unpack
_INF = math.inf


def _r32(x: float) -> float:
    """Round a double to the nearest float32 (overflow -> inf, NaN stays NaN)."""
    try:
        return _f32_unpack(_f32_pack(x))[0]
    except OverflowError:  # only raised when the rounded value is infinite
        return math.copysign(_INF, x)


def _int_params(dtype: str):
    b = _dt.bits(dtype)
    return (not _dt.is_uint(dtype)), 1 << (b - 1), (1 << b) - 1


def _wrapper(dtype: str) -> Callable[[int], int]:
    signed, half, mask = _int_params(dtype)
    if signed:
        return lambda v: ((v + half) & mask) - half
    return lambda v: v & mask


def _int_to_f32(x: int) -> float:
    if -(1 << 53) <= x <= (1 << 53):
        return _r32(float(x))  # exact in double, one rounding
    return float(np.array(x, dtype=np.int64).astype(np.float32))  # C's correctly rounded cast


def _value_of(dtype: str, x):
    """Python value ``x`` as a value of ``dtype`` (wrapped / rounded)."""
    if dtype == "bool":
        return bool(x)
    if _dt.is_int(dtype):
        return _wrapper(dtype)(int(x))
    if dtype == "float64":
        return float(x)
    if _dt.is_storage_float(dtype):
        return _dt.round_storage(dtype, float(x))
    return _r32(float(x))


def poison_value(dtype: str):
    """The value an uninitialized element of an allocation of ``dtype`` holds."""
    if _dt.is_float(dtype):
        return math.nan
    if dtype == "bool":
        return True
    b = _dt.bits(dtype)
    return _wrapper(dtype)(int("5A" * (b // 8), 16))


def _fdiv(a: float, b: float) -> float:
    try:
        return a / b
    except ZeroDivisionError:
        if a != a or a == 0.0:
            return math.nan
        return math.copysign(_INF, a) * math.copysign(1.0, b)


def _fmin(a, b):
    return a if (a < b or a != a) else b  # NaN in either operand propagates


def _fmax(a, b):
    return a if (a > b or a != a) else b


def _r16(x: float) -> float:
    """Round to the nearest float16 (the value keeps computing as a float32)."""
    return float(np.float16(x))


def _np1(fn):
    return lambda x: float(fn(x))


# Math intrinsics on doubles; the result is rounded to the Call's dtype afterwards.
_MATH = {
    "exp": _np1(np.exp),
    "fast_exp": _np1(np.exp),
    "log": _np1(np.log),
    "sqrt": _np1(np.sqrt),
    "rsqrt": lambda x: float(1.0 / np.sqrt(np.float64(x))),
    "tanh": _np1(np.tanh),
    "sigmoid": lambda x: float(1.0 / (1.0 + np.exp(-np.float64(x)))),
    "erf": math.erf,
    "abs": abs,
    "floor": _np1(np.floor),
    "ceil": _np1(np.ceil),
    "round": _np1(np.rint),  # half to even
    "sin": _np1(np.sin),
    "cos": _np1(np.cos),
    "pow": lambda a, b: float(np.power(np.float64(a), np.float64(b))),
    "fma": lambda a, b, c: _fma(a, b, c),
    "exp2": _np1(np.exp2),
    "expm1": _np1(np.expm1),
    "log2": _np1(np.log2),
    "log1p": _np1(np.log1p),
    "softplus": _np1(lambda x: np.logaddexp(0.0, np.float64(x))),
    "tan": _np1(np.tan),
    "atan": _np1(np.arctan),
    "atan2": lambda y, x: float(np.arctan2(np.float64(y), np.float64(x))),
    "cbrt": _np1(np.cbrt),
    "erfc": math.erfc,
    "fast_erfc": math.erfc,
    "fast_log": _np1(np.log),
}
assert set(_MATH) == set(INTRINSICS), "every IR intrinsic needs an interpreter rule"


def _fma(a, b, c) -> float:
    """``a * b + c`` with one rounding (to float64: exact through fractions; the result
    of a float32 fma is then rounded once more, to float32, by the caller)."""
    from fractions import Fraction

    a, b, c = float(a), float(b), float(c)
    if not (math.isfinite(a) and math.isfinite(b) and math.isfinite(c)):
        return a * b + c
    return float(Fraction(a) * Fraction(b) + Fraction(c))


def _vkey(v):
    """A hashable key of a value in which every NaN is the same."""
    return v if v == v else "nan"


# ---------------------------------------------------------------------------------
# race logs


class _AccessLog:
    """Accesses of one synchronisation interval, by actor (thread, block or iteration).

    ``check`` raises :class:`RaceError` when one actor changes an element that another
    actor reads (before writing it itself), or two actors write different values.
    """

    __slots__ = ("entries", "keep", "describe", "where", "advice")

    def __init__(self, describe, where: str, advice: str):
        self.entries: Dict[tuple, list] = {}
        self.keep: Dict[int, Any] = {}
        self.describe = describe
        self.where = where
        self.advice = advice

    def _entry(self, arr, idx, buf, v0):
        key = (id(arr), idx)
        e = self.entries.get(key)
        if e is None:
            self.keep[id(arr)] = arr  # keep it alive so that its id is not reused
            e = self.entries[key] = [buf, idx, _vkey(v0), {}, {}]
        return e

    # (read and write look the entry up themselves: they run once per traced access)
    def read(self, arr, idx, actor, value, buf, node):
        e = self.entries.get((id(arr), idx))
        if e is None:
            e = self._entry(arr, idx, buf, value)
        if actor not in e[3]:  # reads after the actor's own write see that write
            r = e[4]
            if actor not in r:
                r[actor] = node

    def write(self, arr, idx, actor, old, new, buf, node):
        e = self.entries.get((id(arr), idx))
        if e is None:
            e = self._entry(arr, idx, buf, old)
        w = e[3].get(actor)
        if w is None:
            e[3][actor] = [{new if new == new else "nan"}, node]
        else:
            w[0].add(new if new == new else "nan")

    def check(self):
        try:
            for buf, idx, v0, writers, readers in self.entries.values():
                if not writers:
                    continue
                if len(writers) > 1:
                    items = list(writers.items())
                    a, (va, na) = items[0]
                    for b, (vb, nb) in items[1:]:
                        if va != vb or len(va) > 1:
                            self._fail(buf, idx, a, "writes", na, b, "writes", nb)
                if readers:
                    for a, (vals, na) in writers.items():
                        if vals == {v0}:
                            continue  # this actor never changed the element
                        for b, nb in readers.items():
                            if b != a:
                                self._fail(buf, idx, a, "writes", na, b, "reads", nb)
        finally:
            self.entries.clear()
            self.keep.clear()

    def _fail(self, buf, idx, a, what_a, node_a, b, what_b, node_b):
        el = f"{buf.name}[{', '.join(str(i) for i in idx)}]"
        raise RaceError(
            f"data race on {el} ({buf.scope} buffer) {self.where}: {self.describe(a)} "
            f"{what_a} it (`{_line(node_a)}`) and {self.describe(b)} {what_b} it "
            f"(`{_line(node_b)}`); {self.advice}")


def _line(node) -> str:
    text = to_str(node)
    return text.splitlines()[0] if text else text


def _tag_desc(tags, coords) -> str:
    return ", ".join(f"{t}={c}" for t, c in zip(tags, coords))


# ---------------------------------------------------------------------------------
# the compiler of IR into closures


def _contains_barrier(s, memo) -> bool:
    key = id(s)
    r = memo.get(key)
    if r is not None:
        return r
    if isinstance(s, Evaluate):
        r = isinstance(s.value, Call) and s.value.op == "syncthreads"
    elif isinstance(s, SeqStmt):
        r = any([_contains_barrier(x, memo) for x in s.seq])
    elif isinstance(s, IfThenElse):
        r = _contains_barrier(s.then_case, memo) or (
            s.else_case is not None and _contains_barrier(s.else_case, memo))
    elif isinstance(s, (For, Allocate, LetStmt, AttrStmt, AssertStmt)):
        r = _contains_barrier(s.body, memo)
    else:
        r = False
    memo[key] = r
    return r


class _BarrierSite:
    __slots__ = ("index", "node")

    def __init__(self, index, node):
        self.index = index
        self.node = node


def _int_widens(src: str, dst: str) -> bool:
    """Whether every value of int dtype ``src`` is a value of int dtype ``dst`` (the
    implicit promotions of :func:`tecomp.ir.dtype.promote`)."""
    if _dt.is_uint(dst):
        return _dt.is_uint(src) and _dt.bits(src) <= _dt.bits(dst)
    if _dt.is_uint(src):
        return _dt.bits(src) < _dt.bits(dst)
    return _dt.bits(src) <= _dt.bits(dst)


def _malformed(msg: str):
    raise InternalError(f"malformed loop IR reached the interpreter: {msg}")


class _Compiler:
    """Turns IR nodes into closures ``f(env)``.  ``kernel``: inside a GPU kernel (thread
    loops bind coordinates); ``traced``: loads/stores report to the race logs."""

    def __init__(self, check_bounds: bool, check_races: bool):
        self.check_bounds = check_bounds
        self.check_races = check_races
        self.kernel = False
        self.traced = False
        self.ctx: Optional[Stmt] = None  # the statement whose expressions are compiled
        self.barrier_memo: Dict[int, bool] = {}
        self.n_barriers = 0

    # ---------------------------------------------------------------- expressions
    def expr(self, e) -> Callable:
        m = getattr(self, "_e_" + type(e).__name__, None)
        if m is None:
            if isinstance(e, (Reduce, ProducerLoad)):
                raise InternalError(
                    f"{type(e).__name__} `{to_str(e)}` reached the interpreter: TE-only nodes "
                    "must be removed by lowering")
            _malformed(f"the interpreter has no rule for {type(e).__name__} `{e!r}`")
        return m(e)

    def _e_Const(self, e: Const):
        v = _value_of(e.dtype, e.value)
        return lambda env: v

    def _e_Var(self, e: Var):
        return operator.itemgetter(e)

    def _operands(self, e, *ops):
        cd = _dt.compute_dtype(e.dtype)
        for o in ops:
            od = _dt.compute_dtype(o.dtype)
            ok = (od == cd) or (_dt.is_int(od) and _dt.is_int(cd) and _int_widens(od, cd))
            if not ok:
                _malformed(f"operand `{to_str(o)}` of dtype {o.dtype} in {e.dtype} expression "
                           f"`{to_str(e)}`; lowering must insert a Cast")
        return [self.expr(o) for o in ops]

    def _int_addsubmul(self, e, pyop):
        fa, fb = self._operands(e, e.a, e.b)
        signed, half, mask = _int_params(e.dtype)
        ca = _value_of(e.a.dtype, e.a.value) if isinstance(e.a, Const) else None
        cb = _value_of(e.b.dtype, e.b.value) if isinstance(e.b, Const) else None
        if not signed:
            if cb is not None:
                return lambda env: pyop(fa(env), cb) & mask
            return lambda env: pyop(fa(env), fb(env)) & mask
        if pyop is operator.add:
            if cb is not None:
                k = cb + half
                return lambda env: ((fa(env) + k) & mask) - half
            if ca is not None:
                k = ca + half
                return lambda env: ((fb(env) + k) & mask) - half
            return lambda env: ((fa(env) + fb(env) + half) & mask) - half
        if pyop is operator.sub:
            if cb is not None:
                k = half - cb
                return lambda env: ((fa(env) + k) & mask) - half
            return lambda env: ((fa(env) - fb(env) + half) & mask) - half
        if cb is not None:
            return lambda env: ((fa(env) * cb + half) & mask) - half
        if ca is not None:
            return lambda env: ((fb(env) * ca + half) & mask) - half
        return lambda env: ((fa(env) * fb(env) + half) & mask) - half

    def _float_binop(self, e, pyop):
        fa, fb = self._operands(e, e.a, e.b)
        if _dt.compute_dtype(e.dtype) == "float64":
            return lambda env: pyop(fa(env), fb(env))
        r32 = _r32
        return lambda env: r32(pyop(fa(env), fb(env)))

    def _arith(self, e, pyop):
        if _dt.is_int(e.dtype):
            return self._int_addsubmul(e, pyop)
        if _dt.is_float(e.dtype):
            return self._float_binop(e, pyop)
        _malformed(f"arithmetic on {e.dtype} in `{to_str(e)}`")

    def _e_Add(self, e):
        return self._arith(e, operator.add)

    def _e_Sub(self, e):
        return self._arith(e, operator.sub)

    def _e_Mul(self, e):
        return self._arith(e, operator.mul)

    def _e_Div(self, e):
        if not _dt.is_float(e.dtype):
            _malformed(f"Div is true division of floats, got {e.dtype} `{to_str(e)}`")
        return self._float_binop(e, _fdiv)

    def _int_div(self, e, kind: str):
        if not _dt.is_int(e.dtype):
            _malformed(f"{type(e).__name__} needs integers, got {e.dtype} `{to_str(e)}`")
        fa, fb = self._operands(e, e.a, e.b)
        wrap = _wrapper(e.dtype)
        node = e

        def fail():
            raise ExprError(f"integer division by zero in {to_str(node)}")

        # Only a quotient can overflow (MIN // -1 == -MIN): it wraps back to MIN.
        if kind == "floordiv":
            def f(env):
                a = fa(env)
                b = fb(env)
                if b == 0:
                    fail()
                return wrap(a // b)
        elif kind == "floormod":
            def f(env):
                a = fa(env)
                b = fb(env)
                if b == 0:
                    fail()
                return a % b
        elif kind == "truncdiv":
            def f(env):
                a = fa(env)
                b = fb(env)
                if b == 0:
                    fail()
                q = abs(a) // abs(b)
                return wrap(q if (a < 0) == (b < 0) else -q)
        else:
            def f(env):
                a = fa(env)
                b = fb(env)
                if b == 0:
                    fail()
                q = abs(a) // abs(b)
                return a - b * (q if (a < 0) == (b < 0) else -q)
        return f

    def _e_FloorDiv(self, e):
        return self._int_div(e, "floordiv")

    def _e_FloorMod(self, e):
        return self._int_div(e, "floormod")

    def _e_TruncDiv(self, e):
        return self._int_div(e, "truncdiv")

    def _e_TruncMod(self, e):
        return self._int_div(e, "truncmod")

    def _minmax(self, e, is_min):
        fa, fb = self._operands(e, e.a, e.b)
        if _dt.is_float(e.dtype):
            g = _fmin if is_min else _fmax
        elif _dt.is_int(e.dtype):
            g = min if is_min else max
        else:
            _malformed(f"{'min' if is_min else 'max'} of {e.dtype} in `{to_str(e)}`")
        return lambda env: g(fa(env), fb(env))

    def _e_Min(self, e):
        return self._minmax(e, True)

    def _e_Max(self, e):
        return self._minmax(e, False)

    def _cmp(self, e, pyop):
        da, db = _dt.compute_dtype(e.a.dtype), _dt.compute_dtype(e.b.dtype)
        if not (da == db or (_dt.is_int(da) and _dt.is_int(db))):
            _malformed(f"comparison of {e.a.dtype} with {e.b.dtype} in `{to_str(e)}`")
        fa, fb = self.expr(e.a), self.expr(e.b)
        return lambda env: pyop(fa(env), fb(env))

    def _e_EQ(self, e):
        return self._cmp(e, operator.eq)

    def _e_NE(self, e):
        return self._cmp(e, operator.ne)

    def _e_LT(self, e):
        return self._cmp(e, operator.lt)

    def _e_LE(self, e):
        return self._cmp(e, operator.le)

    def _e_GT(self, e):
        return self._cmp(e, operator.gt)

    def _e_GE(self, e):
        return self._cmp(e, operator.ge)

    def _bool_operand(self, e, o):
        if o.dtype != "bool":
            _malformed(f"logic on {o.dtype} operand `{to_str(o)}` in `{to_str(e)}`")
        return self.expr(o)

    def _e_And(self, e):
        fa, fb = self._bool_operand(e, e.a), self._bool_operand(e, e.b)

        def f(env):
            a = fa(env)
            b = fb(env)  # both operands are evaluated (pure; loads in both are checked)
            return a and b
        return f

    def _e_Or(self, e):
        fa, fb = self._bool_operand(e, e.a), self._bool_operand(e, e.b)

        def f(env):
            a = fa(env)
            b = fb(env)
            return a or b
        return f

    def _e_Not(self, e):
        fa = self._bool_operand(e, e.a)
        return lambda env: not fa(env)

    def _e_Select(self, e):
        if e.cond.dtype != "bool":
            _malformed(f"select condition of dtype {e.cond.dtype} in `{to_str(e)}`")
        fc = self.expr(e.cond)
        ft, ff = self._operands(e, e.true_value, e.false_value)
        return lambda env: ft(env) if fc(env) else ff(env)  # lazy

    def _caster(self, src: str, dst: str, node) -> Optional[Callable]:
        if src == dst:
            return None
        if dst == "float16":
            # rounds to float16 precision; the value keeps computing as a float32
            if _dt.is_float(src):
                return _r16  # float64 rounds straight to half, as __double2half
            if src == "bool":
                return float
            return lambda x: _r16(_int_to_f32(int(x)))  # (half)(float)i, as C does
        if dst == "bfloat16":
            # through float32 (the int as C converts it), then to nearest bfloat16
            if src == "bool":
                return float
            if _dt.is_float(src):
                return _dt.round_bf16
            return lambda x: _dt.round_bf16(_int_to_f32(int(x)))
        s, d = _dt.compute_dtype(src), _dt.compute_dtype(dst)
        if s == d:
            return None
        if d == "bool":
            return lambda x: x != 0
        if _dt.is_int(d):
            wrap = _wrapper(d)
            if _dt.is_float(s):
                def f2i(x):
                    if x != x or x == _INF or x == -_INF:
                        raise ExprError(f"the cast of {x} to {dst} in {to_str(node)} is "
                                        "undefined (NaN or infinite value)")
                    return wrap(int(x))
                return f2i
            return lambda x: wrap(int(x))
        if d == "float64":
            return float
        # d == float32
        if s == "float64":
            return _r32
        return lambda x: _int_to_f32(int(x))

    def _e_Cast(self, e: Cast):
        fv = self.expr(e.value)
        c = self._caster(e.value.dtype, e.dtype, e)
        if c is None:
            return fv
        return lambda env: c(fv(env))

    def _e_Call(self, e: Call):
        if e.op == "syncthreads":
            _malformed("syncthreads() used as a value: it is a statement (Evaluate) only")
        fn = _MATH.get(e.op)
        if fn is None or len(e.args) != INTRINSICS[e.op]:
            _malformed(f"unknown intrinsic call `{to_str(e)}`")
        fs = self._operands(e, *e.args)
        if e.op == "abs" and _dt.is_int(e.dtype):
            wrap = _wrapper(e.dtype)
            f0 = fs[0]
            return lambda env: wrap(abs(f0(env)))
        if not _dt.is_float(e.dtype):
            _malformed(f"intrinsic {e.op} of dtype {e.dtype} in `{to_str(e)}`")
        rnd = (lambda x: x) if e.dtype == "float64" else _r32
        if len(fs) == 1:
            f0 = fs[0]
            return lambda env: rnd(fn(f0(env)))
        if len(fs) == 2:
            f0, f1 = fs
            return lambda env: rnd(fn(f0(env), f1(env)))
        f0, f1, f2 = fs
        return lambda env: rnd(fn(f0(env), f1(env), f2(env)))

    def _e_Let(self, e: Let):
        fv = self._let_value(e.var, e.value, e)
        fb = self.expr(e.body)
        var = e.var

        def f(env):
            old = env.get(var, _MISSING)
            env[var] = fv(env)
            try:
                return fb(env)
            finally:
                if old is _MISSING:
                    del env[var]
                else:
                    env[var] = old
        return f

    def _let_value(self, var, value, node):
        fv = self.expr(value)
        vd, xd = _dt.compute_dtype(var.dtype), _dt.compute_dtype(value.dtype)
        if vd == xd:
            return fv
        if _dt.is_int(vd) and _dt.is_int(xd):
            c = self._caster(value.dtype, var.dtype, node)
            return lambda env: c(fv(env))
        _malformed(f"{value.dtype} value bound to {var.dtype} variable {var.name} in "
                   f"`{_line(node)}`")

    # ---------------------------------------------------------------- memory access
    def _indexer(self, buf: Buffer, indices):
        if len(indices) != len(buf.shape):
            _malformed(f"{len(indices)} indices for {len(buf.shape)}-dimensional buffer "
                       f"{buf.name}")
        for i in indices:
            if not _dt.is_int(i.dtype):
                _malformed(f"index `{to_str(i)}` of {buf.name} has dtype {i.dtype}")
        fs = [self.expr(i) for i in indices]
        if len(fs) == 1:
            f0 = fs[0]
            return lambda env: (f0(env),)
        if len(fs) == 2:
            f0, f1 = fs
            return lambda env: (f0(env), f1(env))
        fs = tuple(fs)
        return lambda env: tuple([f(env) for f in fs])

    def _out_of_bounds(self, what, buf, arr, idx, node, ctx, env):
        """Resolve an access with some index outside its extent, or raise BoundsError."""
        shape = arr.shape
        if not self.check_bounds and buf.strides is None:
            flat = 0
            for i, n in zip(idx, shape):
                flat = flat * n + i
            if 0 <= flat < arr.size:
                return tuple(int(x) for x in np.unravel_index(flat, shape))
            problem = (f"its row-major offset {flat} is outside the buffer's "
                       f"[0, {arr.size}) elements")
        else:
            d = next(d for d, (i, n) in enumerate(zip(idx, shape)) if not 0 <= i < n)
            problem = f"index {d} = {idx[d]} is outside [0, {shape[d]})"
        p = Printer()
        text = _first_line(p, node)
        where = ""
        if ctx is not None and ctx is not node:
            where = f" (in statement: {_first_line(p, ctx)})"
        binds = [f"{p.name_of(v)} = {env[v]}" for v in free_vars(ctx if ctx is not None else node)
                 if v in env]
        if binds:
            where += " with " + ", ".join(binds)
        el = f"{buf.name}[{', '.join(str(i) for i in idx)}]"
        raise BoundsError(f"{what} {el} out of bounds: {problem} in: {text}{where}")

    def _check_access_dtype(self, buf, vdtype, node, store=False):
        vd, bd = _dt.compute_dtype(vdtype), _dt.compute_dtype(buf.dtype)
        if store and _dt.is_int(vd) and _dt.is_int(bd) and _int_widens(vd, bd):
            return  # a narrower int stored into a wider buffer keeps its value, as in C
        if vd != bd:
            _malformed(f"{vdtype} access of {buf.dtype} buffer {buf.name} in `{_line(node)}`")

    def _e_BufferLoad(self, e: BufferLoad):
        buf = e.buffer
        self._check_access_dtype(buf, e.dtype, e)
        fidx = self._indexer(buf, e.indices)
        oob, ctx = self._out_of_bounds, self.ctx
        if self.traced:
            def load_traced(env):
                idx = fidx(env)
                arr = env[buf]
                for i, n in zip(idx, arr.shape):
                    if not 0 <= i < n:
                        idx = oob("load from", buf, arr, idx, e, ctx, env)
                        break
                v = arr.item(idx)
                for log, actor in env[_LOGS]:
                    log.read(arr, idx, actor, v, buf, e)
                return v
            return load_traced
        if len(e.indices) == 1:
            (fi,) = [self.expr(i) for i in e.indices]

            def load1(env):
                i = fi(env)
                arr = env[buf]
                if 0 <= i < arr.shape[0]:
                    return arr.item(i)
                return arr.item(oob("load from", buf, arr, (i,), e, ctx, env))
            return load1
        if len(e.indices) == 2:
            fi, fj = [self.expr(i) for i in e.indices]

            def load2(env):
                i = fi(env)
                j = fj(env)
                arr = env[buf]
                n, m = arr.shape
                if 0 <= i < n and 0 <= j < m:
                    return arr.item(i, j)
                return arr.item(oob("load from", buf, arr, (i, j), e, ctx, env))
            return load2

        def load(env):
            idx = fidx(env)
            arr = env[buf]
            for i, n in zip(idx, arr.shape):
                if not 0 <= i < n:
                    idx = oob("load from", buf, arr, idx, e, ctx, env)
                    break
            return arr.item(idx)
        return load

    # ---------------------------------------------------------------- statements
    def stmt(self, s) -> Callable:
        m = getattr(self, "_s_" + type(s).__name__, None)
        if m is None:
            _malformed(f"the interpreter has no rule for statement {type(s).__name__}")
        saved = self.ctx
        self.ctx = s
        try:
            return m(s)
        finally:
            self.ctx = saved

    def _s_BufferStore(self, s: BufferStore):
        buf = s.buffer
        self._check_access_dtype(buf, s.value.dtype, s, store=True)
        fidx = self._indexer(buf, s.indices)
        fv = self.expr(s.value)
        oob = self._out_of_bounds
        if self.traced:
            def store_traced(env):
                idx = fidx(env)
                arr = env[buf]
                for i, n in zip(idx, arr.shape):
                    if not 0 <= i < n:
                        idx = oob("store to", buf, arr, idx, s, s, env)
                        break
                v = fv(env)
                old = arr.item(idx)
                arr[idx] = v
                new = arr.item(idx)
                for log, actor in env[_LOGS]:
                    log.write(arr, idx, actor, old, new, buf, s)
            return store_traced

        def store(env):
            idx = fidx(env)
            arr = env[buf]
            for i, n in zip(idx, arr.shape):
                if not 0 <= i < n:
                    idx = oob("store to", buf, arr, idx, s, s, env)
                    break
            arr[idx] = fv(env)
        return store

    def _s_Prefetch(self, s: Prefetch):
        # a cache hint: no load, no store, nothing logged for the race checks; the
        # indices are still evaluated and checked (the pass promises in-bounds elements)
        buf = s.buffer
        fidx = self._indexer(buf, s.indices)
        oob = self._out_of_bounds

        def prefetch(env):
            idx = fidx(env)
            arr = env.get(buf)
            if arr is None:
                return
            for i, n in zip(idx, arr.shape):
                if not 0 <= i < n:
                    oob("prefetch of", buf, arr, idx, s, s, env)
                    break
        return prefetch

    def _s_SeqStmt(self, s: SeqStmt):
        fs = tuple(self.stmt(x) for x in s.seq)
        if len(fs) == 0:
            return lambda env: None
        if len(fs) == 1:
            return fs[0]
        if len(fs) == 2:
            f0, f1 = fs

            def seq2(env):
                f0(env)
                f1(env)
            return seq2

        def seq(env):
            for f in fs:
                f(env)
        return seq

    def _loop_parts(self, s: For):
        for x in (s.min, s.extent):
            if not _dt.is_int(x.dtype):
                _malformed(f"loop bound `{to_str(x)}` of dtype {x.dtype}")
        if not _dt.is_int(s.var.dtype):
            _malformed(f"loop variable {s.var.name} of dtype {s.var.dtype}")
        return self.expr(s.min), self.expr(s.extent)

    def _s_For(self, s: For):
        if s.kind == "thread":
            if self.kernel:
                return self._thread_bind(s, gen=False)
            return self._launch(s)
        if s.kind not in ("serial", "unrolled", "parallel", "vectorized"):
            _malformed(f"unknown loop kind {s.kind!r} of loop {s.var.name}")
        fmin, fext = self._loop_parts(s)
        var = s.var
        if self.check_races and s.kind in ("parallel", "vectorized"):
            saved = self.traced
            self.traced = True
            try:
                body = self.stmt(s.body)
            finally:
                self.traced = saved
            return self._independent_loop(s, fmin, fext, body)
        body = self.stmt(s.body)

        def loop(env):
            lo = fmin(env)
            hi = lo + fext(env)
            old = env.get(var, _MISSING)
            for i in range(lo, hi):
                env[var] = i
                body(env)
            if old is _MISSING:
                env.pop(var, None)
            else:
                env[var] = old
        return loop

    def _independent_loop(self, s: For, fmin, fext, body):
        var, name, kind = s.var, s.var.name, s.kind
        header = _line(s)

        def describe(i):
            return f"iteration {name} = {i}"
        advice = (f"the iterations of a {kind} loop must not depend on each other; "
                  f"make the loop serial or change the schedule")

        def loop(env):
            lo = fmin(env)
            hi = lo + fext(env)
            log = _AccessLog(describe, f"between iterations of `{header}`", advice)
            outer = env.get(_LOGS, _MISSING)
            prefix = () if outer is _MISSING else outer
            old = env.get(var, _MISSING)
            for i in range(lo, hi):
                env[var] = i
                env[_LOGS] = prefix + ((log, i),)
                body(env)
            if old is _MISSING:
                env.pop(var, None)
            else:
                env[var] = old
            if outer is _MISSING:
                env.pop(_LOGS, None)
            else:
                env[_LOGS] = outer
            log.check()
        return loop

    def _s_IfThenElse(self, s: IfThenElse):
        if s.cond.dtype != "bool":
            _malformed(f"if condition of dtype {s.cond.dtype}: `{_line(s)}`")
        fc = self.expr(s.cond)
        ft = self.stmt(s.then_case)
        if s.else_case is None:
            def if_(env):
                if fc(env):
                    ft(env)
            return if_
        fe = self.stmt(s.else_case)

        def ifelse(env):
            if fc(env):
                ft(env)
            else:
                fe(env)
        return ifelse

    def _alloc_parts(self, s: Allocate):
        buf = s.buffer
        for x in buf.shape:
            if not _dt.is_int(x.dtype):
                _malformed(f"shape `{to_str(x)}` of {buf.name} has dtype {x.dtype}")
        fshape = [self.expr(x) for x in buf.shape]
        npd = _dt.numpy_dtype(buf.dtype)
        poison = poison_value(buf.dtype)

        def make(env):
            shape = tuple(f(env) for f in fshape)
            if any(n < 0 for n in shape):
                raise ShapeError(f"allocation of {buf.name} with negative shape {shape} in "
                                 f"`{_line(s)}`")
            try:
                return np.full(shape, poison, dtype=npd)
            except (MemoryError, ValueError) as e:  # numpy: out of memory, or past 64 bits
                raise KernelMemoryError(
                    f"could not allocate {buf.name} of shape {shape} in `{_line(s)}`: "
                    f"{str(e).splitlines()[0][:120]} (check the sizes passed)") from None
        return buf, make

    def _s_Allocate(self, s: Allocate):
        buf, make = self._alloc_parts(s)
        body = self.stmt(s.body)
        if self.kernel and buf.scope == "shared":
            get = _shared_getter(buf, make, s)

            def alloc_shared(env):
                old = env.get(buf, _MISSING)
                env[buf] = get(env)
                body(env)
                _restore(env, buf, old)
            return alloc_shared

        def alloc(env):
            old = env.get(buf, _MISSING)
            env[buf] = make(env)
            body(env)
            _restore(env, buf, old)
        return alloc

    def _s_TensorIntrinCall(self, s: TensorIntrinCall):
        """A tensorized region runs its declared computation (the loops it replaced)."""
        return self.stmt(s.fallback)

    def _s_ExternCall(self, s: ExternCall):
        """The extern stage's function on the buffers' arrays (inputs read-only)."""
        st = extern_site(s.site)
        fscal = [self.expr(e) for e in s.scalars]

        def call(env):
            args, bi, si = [], 0, 0
            for k in s.order:
                if k == "b":
                    arr = env[s.buffers[bi]]
                    if not st.buffers[bi][2]:
                        arr = arr.view()
                        arr.flags.writeable = False
                    args.append(arr)
                    bi += 1
                else:
                    v = fscal[si](env)
                    args.append(float(v) if st.scalars[si] else int(v))
                    si += 1
            st.fn(*args)
        return call

    def _s_LetStmt(self, s: LetStmt):
        fv = self._let_value(s.var, s.value, s)
        body = self.stmt(s.body)
        var = s.var

        def let(env):
            old = env.get(var, _MISSING)
            env[var] = fv(env)
            body(env)
            _restore(env, var, old)
        return let

    def _s_AttrStmt(self, s: AttrStmt):
        return self.stmt(s.body)

    def _s_AssertStmt(self, s: AssertStmt):
        fc = self.expr(s.cond)
        body = self.stmt(s.body)
        msg = s.message

        def assert_(env):
            if not fc(env):
                raise BoundsError(f"{msg} (assertion `{to_str(s.cond)}` failed)")
            body(env)
        return assert_

    def _s_Evaluate(self, s: Evaluate):
        if isinstance(s.value, Call) and s.value.op == "syncthreads":
            if not self.kernel:
                raise GPUModelError(
                    "syncthreads() outside any GPU thread loop: a barrier only means something "
                    "inside a kernel (under a blockIdx/threadIdx loop)")
            raise GPUModelError(
                "syncthreads() inside a parallel or vectorized loop of a GPU kernel: a barrier "
                "must be reached by the threads of the block, not by loop iterations")
        fv = self.expr(s.value)

        def evaluate(env):
            fv(env)
        return evaluate

    # ---------------------------------------------------------------- GPU kernels
    def _thread_bind(self, s: For, gen: bool):
        """A thread loop inside a kernel: the thread runs ``min + coordinate`` if its
        coordinate is below the extent, and skips the body otherwise."""
        fmin, fext = self._loop_parts(s)
        var, tag = s.var, s.thread_tag
        wrap = _wrapper(var.dtype)
        if gen:
            body = self.gen(s.body)

            def bind_gen(env):
                c = env[_COORD][tag]
                if c < fext(env):
                    old = env.get(var, _MISSING)
                    env[var] = wrap(fmin(env) + c)
                    yield from body(env)
                    _restore(env, var, old)
            return bind_gen
        body = self.stmt(s.body)

        def bind(env):
            c = env[_COORD][tag]
            if c < fext(env):
                old = env.get(var, _MISSING)
                env[var] = wrap(fmin(env) + c)
                body(env)
                _restore(env, var, old)
        return bind

    def _launch(self, root: For):
        loops, bound, allocated, used = [], set(), set(), {}

        def visit(n):
            if isinstance(n, For):
                bound.add(n.var)
                if n.kind == "thread":
                    loops.append(n)
            elif isinstance(n, (LetStmt, Let)):
                bound.add(n.var)
            elif isinstance(n, Allocate):
                allocated.add(n.buffer)
            elif isinstance(n, (BufferLoad, BufferStore)):
                used.setdefault(n.buffer, n)
        post_order(root, visit)
        block_loops = [lp for lp in loops if lp.thread_tag in BLOCK_TAGS]
        block_vars = {lp.var for lp in block_loops}
        per_block = False  # some threadIdx extent depends on a blockIdx variable
        for lp in loops:
            if lp.thread_tag not in THREAD_TAGS:
                raise GPUModelError(
                    f"loop {lp.var.name} is bound to the unknown thread tag {lp.thread_tag!r}; "
                    f"the GPU model knows {', '.join(THREAD_TAGS)}")
            # A grid size may only use values from outside the kernel; a block size may
            # also use blockIdx variables (the block size is then the largest over blocks).
            allowed = block_vars if lp.thread_tag in THREAD_IDX_TAGS else set()
            fv = free_vars(lp.extent)
            per_block |= any(v in block_vars for v in fv) and lp.thread_tag in THREAD_IDX_TAGS
            inner = [v.name for v in fv if v in bound and v not in allowed]
            if inner:
                raise GPUModelError(
                    f"the extent `{to_str(lp.extent)}` of thread loop {lp.var.name} "
                    f"({lp.thread_tag}) depends on {', '.join(inner)}, bound inside the kernel; "
                    "the launch size must be known when the kernel starts (a block size may "
                    "depend on blockIdx variables only)")
        if per_block:
            for lp in block_loops:
                inner = [v.name for v in free_vars(lp.min) if v in bound]
                if inner:
                    raise GPUModelError(
                        f"the start `{to_str(lp.min)}` of block loop {lp.var.name} depends on "
                        f"{', '.join(inner)}, bound inside the kernel, and a block size depends "
                        "on its variable")
        # Non-global buffers allocated around the kernel keep their scope's meaning: one
        # fresh (poisoned) array per block for shared memory, per thread for the others.
        outer_shared = [b for b in used if b.scope == "shared" and b not in allocated]
        outer_private = [b for b in used if b.scope not in ("global", "shared")
                         and b not in allocated]
        tags = sorted({lp.thread_tag for lp in loops}, key=THREAD_TAGS.index)
        block_tags = [t for t in BLOCK_TAGS if t in tags] or ["blockIdx.x"]
        thread_tags = [t for t in THREAD_IDX_TAGS if t in tags] or ["threadIdx.x"]
        fgrid = [(lp.thread_tag, self.expr(lp.extent)) for lp in block_loops]
        fblock = [(lp.thread_tag, self.expr(lp.extent)) for lp in loops
                  if lp.thread_tag in THREAD_IDX_TAGS]
        fbvars = [(lp.thread_tag, lp.var, _wrapper(lp.var.dtype), self.expr(lp.min))
                  for lp in block_loops] if per_block else []
        has_barrier = _contains_barrier(root, self.barrier_memo)
        saved = (self.kernel, self.traced)
        self.kernel, self.traced = True, self.check_races
        try:
            body = self.gen(root) if has_barrier else self.stmt(root)
        finally:
            self.kernel, self.traced = saved
        traced = self.check_races
        header = _line(root)

        def sizes(fexts, env, dims):
            seen = set()
            for tag, fe in fexts:
                n = fe(env)
                dims[tag] = max(dims[tag] if tag in seen else 0, n)
                seen.add(tag)

        def launch(env):
            dims = {t: 1 for t in THREAD_TAGS}
            sizes(fgrid, env, dims)
            grid = [range(dims[t]) for t in reversed(BLOCK_TAGS)]      # z, y, x: x fastest
            if not per_block:
                sizes(fblock, env, dims)
            else:  # the block size is the largest over the blocks
                best = {t: 0 for t, _ in fblock}
                for bz, by, bx in itertools.product(*grid):
                    c = {"blockIdx.x": bx, "blockIdx.y": by, "blockIdx.z": bz}
                    be = dict(env)
                    for tag, var, wrap, fmin in fbvars:
                        be[var] = wrap(fmin(env) + c[tag])
                    d = dict(dims)
                    sizes(fblock, be, d)
                    for t in best:
                        best[t] = max(best[t], d[t])
                dims.update(best)
            block = [range(dims[t]) for t in reversed(THREAD_IDX_TAGS)]
            outer = env.get(_LOGS, ())
            klog = None
            if traced:
                klog = _AccessLog(
                    lambda b: _tag_desc(block_tags, [b[BLOCK_TAGS.index(t)] for t in block_tags]),
                    f"in one launch of the kernel `{header}`",
                    "blocks cannot synchronise inside a kernel; give each block its own "
                    "elements or split the kernel")
            for bz, by, bx in itertools.product(*grid):
                bcoord = (bx, by, bz)
                bdesc = _tag_desc(block_tags, [bcoord[BLOCK_TAGS.index(t)] for t in block_tags])
                plog = None
                if traced:
                    plog = _AccessLog(
                        lambda t: _tag_desc(
                            thread_tags, [t[THREAD_IDX_TAGS.index(g)] for g in thread_tags]),
                        f"in block {bdesc} with no syncthreads() between the accesses",
                        "add a syncthreads() between them, or make each thread touch its own "
                        "elements")
                shared: Dict[Buffer, Any] = {}
                fresh = {b: _fresh_like(b, env[b]) for b in outer_shared}
                envs = []
                for tz, ty, tx in itertools.product(*block):
                    e = dict(env)
                    e.update(fresh)
                    for b in outer_private:
                        e[b] = _fresh_like(b, env[b])
                    e[_COORD] = {"blockIdx.x": bx, "blockIdx.y": by, "blockIdx.z": bz,
                                 "threadIdx.x": tx, "threadIdx.y": ty, "threadIdx.z": tz}
                    e[_BLOCK] = shared
                    if traced:
                        e[_LOGS] = outer + ((plog, (tx, ty, tz)), (klog, bcoord))
                    envs.append(e)
                if has_barrier:
                    _run_block_interleaved(envs, body, plog, thread_tags, bdesc)
                else:
                    for e in envs:
                        body(e)
                    if plog is not None:
                        plog.check()
            if klog is not None:
                klog.check()
        return launch

    # ---------------------------------------------------------------- generator form
    def gen(self, s) -> Callable:
        """Compile a statement of a kernel that contains a barrier into a generator
        function: it yields a _BarrierSite at every syncthreads() it reaches."""
        if not _contains_barrier(s, self.barrier_memo):
            f = self.stmt(s)

            def plain(env):
                f(env)
                return
                yield  # noqa: unreachable - makes this a generator
            return plain
        saved = self.ctx
        self.ctx = s
        try:
            return self._gen(s)
        finally:
            self.ctx = saved

    def _gen(self, s):
        if isinstance(s, Evaluate):
            self.n_barriers += 1
            site = _BarrierSite(self.n_barriers, s)

            def barrier(env):
                yield site
            return barrier
        if isinstance(s, SeqStmt):
            parts = []
            for x in s.seq:
                if _contains_barrier(x, self.barrier_memo):
                    parts.append((True, self.gen(x)))
                else:
                    parts.append((False, self.stmt(x)))
            parts = tuple(parts)

            def seq_gen(env):
                for is_gen, f in parts:
                    if is_gen:
                        yield from f(env)
                    else:
                        f(env)
            return seq_gen
        if isinstance(s, For):
            if s.kind == "thread":
                return self._thread_bind(s, gen=True)
            if s.kind in ("parallel", "vectorized"):
                raise GPUModelError(
                    f"syncthreads() inside the {s.kind} loop {s.var.name} of a GPU kernel: a "
                    "barrier must be reached by the threads of the block, not by loop iterations")
            fmin, fext = self._loop_parts(s)
            body = self.gen(s.body)
            var = s.var

            def loop_gen(env):
                lo = fmin(env)
                hi = lo + fext(env)
                old = env.get(var, _MISSING)
                for i in range(lo, hi):
                    env[var] = i
                    yield from body(env)
                _restore(env, var, old)
            return loop_gen
        if isinstance(s, IfThenElse):
            fc = self.expr(s.cond)
            ft = self.gen(s.then_case)
            fe = self.gen(s.else_case) if s.else_case is not None else None

            def if_gen(env):
                if fc(env):
                    yield from ft(env)
                elif fe is not None:
                    yield from fe(env)
            return if_gen
        if isinstance(s, Allocate):
            buf, make = self._alloc_parts(s)
            body = self.gen(s.body)
            get = _shared_getter(buf, make, s) if buf.scope == "shared" else make

            def alloc_gen(env):
                old = env.get(buf, _MISSING)
                env[buf] = get(env)
                yield from body(env)
                _restore(env, buf, old)
            return alloc_gen
        if isinstance(s, LetStmt):
            fv = self._let_value(s.var, s.value, s)
            body = self.gen(s.body)
            var = s.var

            def let_gen(env):
                old = env.get(var, _MISSING)
                env[var] = fv(env)
                yield from body(env)
                _restore(env, var, old)
            return let_gen
        if isinstance(s, AttrStmt):
            return self.gen(s.body)
        if isinstance(s, AssertStmt):
            fc = self.expr(s.cond)
            body = self.gen(s.body)

            def assert_gen(env):
                if not fc(env):
                    raise BoundsError(f"{s.message} (assertion `{to_str(s.cond)}` failed)")
                yield from body(env)
            return assert_gen
        _malformed(f"a barrier inside {type(s).__name__}")


def _first_line(p: Printer, node) -> str:
    if isinstance(node, Stmt):
        lines = p.stmt_lines(node, 0)
        return lines[0] if lines else ""
    return p.expr(node)


def _fresh_like(buf: Buffer, arr):
    return np.full(arr.shape, poison_value(buf.dtype), dtype=arr.dtype)


def _restore(env, key, old):
    if old is _MISSING:
        env.pop(key, None)
    else:
        env[key] = old


def _shared_getter(buf, make, node):
    """Shared memory: one array per block, created by the first thread that reaches the
    allocation and kept (with its contents) for the rest of the block."""
    def get(env):
        block = env[_BLOCK]
        arr = block.get(buf)
        if arr is None:
            arr = block[buf] = make(env)
        else:
            shape = make(env).shape
            if shape != arr.shape:
                raise GPUModelError(
                    f"threads of one block allocate shared buffer {buf.name} with different "
                    f"shapes {arr.shape} and {shape} in `{_line(node)}`")
        return arr
    return get


def _run_block_interleaved(envs, body, plog, thread_tags, bdesc):
    """Run the threads of one block as generators, in lockstep from barrier to barrier."""
    def desc(e):
        c = e[_COORD]
        return _tag_desc(thread_tags, [c[t] for t in thread_tags])

    live = [(e, body(e)) for e in envs]
    interval = 0
    while live:
        waiting, done = [], []
        for e, g in live:
            try:
                site = next(g)
            except StopIteration:
                done.append(e)
            else:
                waiting.append((e, g, site))
        if plog is not None:
            plog.check()
        if waiting and done:
            e, _, site = waiting[0]
            raise GPUModelError(
                f"divergent syncthreads() in block {bdesc}: thread {desc(done[0])} finished "
                f"while thread {desc(e)} waits at `syncthreads()` (barrier #{site.index}, "
                f"interval {interval}); every thread of a block must reach the same barriers "
                "(a barrier under a condition or loop that not all threads run is undefined "
                "behaviour on the GPU)")
        if waiting:
            first = waiting[0][2]
            for e, _, site in waiting:
                if site is not first:
                    raise GPUModelError(
                        f"divergent syncthreads() in block {bdesc}: thread {desc(waiting[0][0])} "
                        f"waits at barrier #{first.index} while thread {desc(e)} waits at barrier "
                        f"#{site.index}; every thread of a block must reach the same barriers")
        live = [(e, g) for e, g, _ in waiting]
        interval += 1


# ---------------------------------------------------------------------------------
# arguments


def _scalar_arg(func_name: str, p: Var, a):
    if isinstance(a, np.ndarray) and a.ndim == 0:
        a = a[()]
    dt = p.dtype
    what = f"argument {p.name} of {func_name} (a {dt} scalar)"
    if dt == "bool":
        if isinstance(a, (bool, np.bool_)):
            return bool(a)
        raise ArgumentError(f"{what} must be a bool, got {type(a).__name__} {a!r}")
    if isinstance(a, (bool, np.bool_)) or not isinstance(a, (int, float, np.integer, np.floating)):
        raise ArgumentError(f"{what} must be a number, got {type(a).__name__} {a!r}")
    if _dt.is_int(dt):
        if isinstance(a, (float, np.floating)):
            raise ArgumentError(f"{what} must be an integer, got the float {a!r}")
        v = int(a)
        if _value_of(dt, v) != v:
            raise ArgumentError(f"{what}: {v} does not fit in {dt}")
        return v
    return _value_of(dt, float(a))


def _bind_args(comp: _Compiler, func: PrimFunc, args) -> dict:
    params = func.params
    if len(args) != len(params):
        raise ArgumentError(
            f"{func.name} takes {len(params)} argument(s) "
            f"({', '.join(p.name for p in params)}), got {len(args)}")
    env: Dict[Any, Any] = {}
    bound_by: Dict[Var, str] = {}
    for p, a in zip(params, args):
        if isinstance(p, Var):
            env[p] = _scalar_arg(func.name, p, a)
            bound_by[p] = f"scalar argument {p.name}"
        elif not isinstance(p, Buffer):
            raise InternalError(f"parameter {p!r} of {func.name} is neither a Buffer nor a Var")
    for p, a in zip(params, args):
        if not isinstance(p, Buffer):
            continue
        if not isinstance(a, np.ndarray):
            raise ArgumentError(f"argument {p.name} of {func.name} must be a numpy array, got "
                                f"{type(a).__name__}")
        want = _dt.numpy_dtype(p.dtype)
        if a.dtype != want:
            raise ArgumentError(f"argument {p.name} of {func.name} must have dtype {p.dtype}, "
                                f"got {a.dtype}; convert it with .astype({p.dtype!r})")
        if a.ndim != len(p.shape):
            raise ArgumentError(f"argument {p.name} of {func.name} must have {len(p.shape)} "
                                f"dimension(s), got an array of shape {a.shape}")
        for d, (ext, n) in enumerate(zip(p.shape, a.shape)):
            if isinstance(ext, Var):
                if ext in env:
                    if env[ext] != n:
                        raise ArgumentError(
                            f"argument {p.name} of {func.name} has shape {a.shape}: dimension {d} "
                            f"is {ext.name} = {env[ext]} (from {bound_by[ext]}), got {n}")
                else:
                    if _value_of(ext.dtype, n) != n:
                        raise ArgumentError(f"dimension {d} of argument {p.name} = {n} does not "
                                            f"fit in {ext.name}: {ext.dtype}")
                    env[ext] = n
                    bound_by[ext] = f"dimension {d} of argument {p.name}"
        env[p] = a
    # the conditions lowering recorded (an extent given by a scalar >= 0, a symbolic split
    # factor >= 1): the same checks and messages as every runtime (runtime/argcheck.py)
    for pc in func.attrs.get("param_checks", ()):
        if all(v in env for v in free_vars(pc.expr)):
            value = compile_shape_expr(pc.expr)(env)   # exactly, as the runtimes do
            if not pc.holds(value):
                raise ArgumentError(pc.message(value, env, params))
    for p, a in zip(params, args):
        if not isinstance(p, Buffer):
            continue
        for d, (ext, n) in enumerate(zip(p.shape, a.shape)):
            if isinstance(ext, Var):
                continue
            try:
                want = comp.expr(ext)(env)
            except KeyError as ex:
                k = ex.args[0] if ex.args else None
                name = getattr(k, "name", repr(k))
                raise ArgumentError(
                    f"dimension {d} of parameter {p.name} of {func.name} is `{to_str(ext)}`, which "
                    f"uses {name}: no parameter and no dimension of a buffer parameter binds it"
                ) from None
            if want != n:
                raise ArgumentError(
                    f"argument {p.name} of {func.name} must have shape "
                    f"({', '.join(to_str(x) for x in p.shape)}) = "
                    f"{tuple(comp.expr(x)(env) for x in p.shape)}, got {a.shape} "
                    f"(dimension {d})")
    return env


def _stored_buffers(stmt) -> set:
    out = set()
    post_order(stmt, lambda n: out.add(n.buffer) if isinstance(n, BufferStore) else None)
    return out


def _convert_key_error(ex: KeyError):
    k = ex.args[0] if ex.args else None
    if isinstance(k, Var):
        return LowerError(
            f"variable {k.name} is used but not bound: it is not a parameter, not a dimension "
            "of a buffer parameter, and no enclosing loop or let binds it")
    if isinstance(k, Buffer):
        return LowerError(f"buffer {k.name} is used but is neither a parameter nor allocated "
                          "around its use")
    return None


# ---------------------------------------------------------------------------------
# public API


class Interpreter:
    """The reference interpreter with fixed options and a cache of compiled functions.

    ``check_bounds``: see the module doc (False resolves per-dimension overruns row-major,
    as compiled code does).  ``check_races``: check parallel/vectorized loops and GPU
    kernels for unsynchronised conflicting accesses.
    """

    def __init__(self, check_bounds: bool = True, check_races: bool = True):
        self.check_bounds = bool(check_bounds)
        self.check_races = bool(check_races)
        self._cache: "weakref.WeakKeyDictionary[PrimFunc, tuple]" = weakref.WeakKeyDictionary()

    def _compiler(self) -> _Compiler:
        return _Compiler(self.check_bounds, self.check_races)

    def compile(self, func: PrimFunc):
        """The compiled body of ``func`` (cached while ``func.body`` is unchanged)."""
        hit = self._cache.get(func)
        if hit is not None and hit[0] is func.body:
            return hit[1], hit[2]
        comp = self._compiler()
        body = comp.stmt(func.body)
        stored = _stored_buffers(func.body)
        self._cache[func] = (func.body, body, stored)
        return body, stored

    @deep_entry(lambda self, func, *a: ("the interpreter", func), ahead=True)
    def run(self, func: PrimFunc, *args) -> None:
        if not isinstance(func, PrimFunc):
            raise ArgumentError(f"run() needs a PrimFunc, got {type(func).__name__}")
        body, stored = self.compile(func)
        env = _bind_args(self._compiler(), func, args)
        for p, a in zip(func.params, args):
            if isinstance(p, Buffer) and p in stored and not a.flags.writeable:
                raise ArgumentError(f"argument {p.name} of {func.name} is written by the kernel "
                                    "but the array is read-only")
        self._execute(body, env)

    @deep_entry(lambda self, stmt, env: ("the interpreter", stmt), ahead=True)
    def run_stmt(self, stmt: Stmt, env: dict) -> dict:
        """Run ``stmt`` with ``env`` ({Var: value, Buffer: ndarray}); returns ``env``."""
        for k in list(env):
            if isinstance(k, Var):
                env[k] = _value_of(k.dtype, env[k])
        self._execute(self._compiler().stmt(stmt), env)
        return env

    @deep_entry(lambda self, expr, env=None: ("the interpreter", expr))
    def eval_expr(self, expr: Expr, env: Optional[dict] = None):
        """The value of ``expr`` (a Python int/float/bool of the expression's dtype)."""
        env = dict(env or {})
        for k in list(env):
            if isinstance(k, Var):
                env[k] = _value_of(k.dtype, env[k])
        f = self._compiler().expr(expr)
        with np.errstate(all="ignore"):
            try:
                return f(env)
            except KeyError as ex:
                err = _convert_key_error(ex)
                if err is None:
                    raise
                raise err from None

    def _execute(self, body, env):
        with np.errstate(all="ignore"):
            try:
                body(env)
            except KeyError as ex:
                err = _convert_key_error(ex)
                if err is None:
                    raise InternalError(f"interpreter lookup failed: {ex!r}") from ex
                raise err from None


_INTERPRETERS: Dict[tuple, Interpreter] = {}


def _interpreter(check_bounds: bool, check_races: bool) -> Interpreter:
    key = (bool(check_bounds), bool(check_races))
    it = _INTERPRETERS.get(key)
    if it is None:
        it = _INTERPRETERS[key] = Interpreter(*key)
    return it


def run(func: PrimFunc, *args, check_bounds: bool = True, check_races: bool = True) -> None:
    """Run ``func`` on ``args`` like a compiled kernel (outputs are written in place).

    Raises :class:`~tecomp.errors.ArgumentError` on a wrong argument count, dtype, ndim or
    shape, or a scalar that breaks a condition lowering recorded in
    ``func.attrs["param_checks"]`` (a negative extent, a split factor below 1),
    :class:`~tecomp.errors.BoundsError` on an out-of-bounds access, and
    :class:`RaceError`/:class:`GPUModelError` on unsynchronised or undefined GPU programs.
    """
    _interpreter(check_bounds, check_races).run(func, *args)


def run_stmt(stmt: Stmt, env: dict, check_bounds: bool = True, check_races: bool = True) -> dict:
    """Run one statement with ``env`` mapping Vars to values and Buffers to numpy arrays."""
    return Interpreter(check_bounds, check_races).run_stmt(stmt, env)


def eval_expr(expr: Expr, env: Optional[dict] = None):
    """Evaluate ``expr`` with ``env`` mapping Vars to values (and Buffers to arrays)."""
    return Interpreter().eval_expr(expr, env)
