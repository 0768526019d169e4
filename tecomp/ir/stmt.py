"""Statement nodes of the loop IR, and PrimFunc."""
from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass, field
from typing import Any, Optional, Tuple

from .expr import SERVICES, Buffer, Expr, Node, Var


class Stmt(Node):
    __slots__ = ()


# Loop kinds.  "thread" loops are bound to a GPU thread axis named by ``thread_tag``
# (``blockIdx.x`` ...): on the GPU the loop does not exist; each thread runs one value.
LOOP_KINDS = ("serial", "parallel", "vectorized", "unrolled", "thread")
#: the GPU thread axes a ``thread`` loop may be bound to (``tc.thread_axis``)
THREAD_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x", "threadIdx.y",
               "threadIdx.z", "vthread")


@dataclass(frozen=True, slots=True)
class For(Stmt):
    """``for var in [min, min + extent)`` run ``body``, the way ``kind`` says.

    * ``serial``: in order.
    * ``parallel``: iterations may run at once on the CPU thread pool; they must not
      depend on each other (the schedule layer only allows data-parallel axes).
    * ``vectorized``: iterations run as the lanes of SIMD instructions.
    * ``unrolled``: the body is repeated ``extent`` times (the extent is constant).
    * ``thread``: bound to the GPU thread axis ``thread_tag``.
    """

    var: Var
    min: Expr
    extent: Expr
    kind: str
    body: Stmt
    thread_tag: str = ""


@dataclass(frozen=True, slots=True)
class BufferStore(Stmt):
    """``buffer[indices] = value``."""

    buffer: Buffer
    value: Expr
    indices: Tuple[Expr, ...]


@dataclass(frozen=True, slots=True)
class IfThenElse(Stmt):
    """``if cond: then_case else: else_case`` (else_case may be None)."""

    cond: Expr
    then_case: Stmt
    else_case: Optional[Stmt] = None


@dataclass(frozen=True, slots=True)
class SeqStmt(Stmt):
    """Statements run one after another."""

    seq: Tuple[Stmt, ...]


@dataclass(frozen=True, slots=True)
class Allocate(Stmt):
    """Allocate ``buffer`` (in its scope) for the duration of ``body``."""

    buffer: Buffer
    body: Stmt


@dataclass(frozen=True, slots=True)
class LetStmt(Stmt):
    """Bind ``var = value`` for ``body``."""

    var: Var
    value: Expr
    body: Stmt


@dataclass(frozen=True, slots=True)
class Evaluate(Stmt):
    """Evaluate ``value`` for its effect (e.g. the ``syncthreads`` barrier)."""

    value: Expr


@dataclass(frozen=True, slots=True)
class ExternCall(Stmt):
    """Call the function of an extern stage (``tc.extern``): ``site`` is its entry in
    :mod:`tecomp.runtime.extern` (the function and how its arguments are laid out),
    ``name`` the function's name for display; the arguments, in ``order`` (``"b"`` a
    buffer, ``"s"`` a scalar), are ``buffers`` (passed as arrays) and ``scalars``."""

    site: int
    name: str
    buffers: Tuple[Buffer, ...]
    scalars: Tuple[Expr, ...]
    order: str


@dataclass(frozen=True, slots=True)
class TensorIntrinCall(Stmt):
    """A loop nest run as the tensor intrinsic ``intrin`` (``s[C].tensorize``).

    Its operands are the outputs then the inputs of the declared computation
    (``intrin.output``, ``intrin.inputs``); operand ``n`` is the region of ``buffers[n]``
    whose first element is at ``base(n)`` (one index per buffer dimension: ``bases`` holds
    them all, operand after operand) and whose element ``x`` (one index per dimension of
    the declared placeholder) is at ``base(n)[e] + sum_d coefs[n][d][e] * x[d]``.  ``reduce``: the intrinsic adds into
    the output (it was written with the reducer's identity first); else it overwrites it.
    ``fallback`` is the loop nest it replaces, the declared computation on the same
    regions: what the interpreter and the backends without code for ``intrin`` run.
    ``stage`` names the stage, for messages.

    ``flat[n]`` (where ``flat`` is not empty): operand ``n``'s region steps by a constant
    only in the buffer's flattened memory (a fused axis ``f`` read as ``W[o, f // 9,
    f // 3 % 3, f % 3]``): its coefficients are then all in a dimension of stride 1 and
    count elements of memory, not of that dimension, and hold only while the buffer
    has the strides lowering saw (``Buffer.effective_strides``), which a backend checks
    where they are known only at run time."""

    intrin: Any
    stage: str
    buffers: Tuple[Buffer, ...]
    bases: Tuple[Expr, ...]
    coefs: Any
    reduce: bool
    fallback: "Stmt"
    flat: Tuple[bool, ...] = ()

    def is_flat(self, n: int) -> bool:
        """Whether operand ``n``'s region is affine only in flattened memory."""
        return bool(self.flat) and self.flat[n]

    def base(self, n: int) -> Tuple[Expr, ...]:
        """The indices of operand ``n``'s first element in ``buffers[n]``."""
        start = sum(len(b.shape) for b in self.buffers[:n])
        return self.bases[start:start + len(self.buffers[n].shape)]


_INTRINS: dict = {}    # name -> weak references to the intrinsics of that name, oldest first
_INTRINS_LOCK = threading.Lock()


def register_tensor_intrin(intrin) -> None:
    """Remember ``intrin`` (a ``tc.decl_tensor_intrin``) by its name, for
    :func:`tensor_intrins`."""
    with _INTRINS_LOCK:
        refs = [r for r in _INTRINS.get(intrin.name, ()) if r() is not None]
        _INTRINS[intrin.name] = refs + [weakref.ref(intrin)]


def tensor_intrins(name: str) -> list:
    """The tensor intrinsics named ``name`` declared in this process and still alive,
    oldest first (``tecomp.ir.parse`` reads a tensorize block's intrinsic by its name)."""
    with _INTRINS_LOCK:
        return [x for x in (r() for r in _INTRINS.get(name, ())) if x is not None]


@dataclass(frozen=True, slots=True)
class Prefetch(Stmt):
    """A hint to bring the cache line that holds ``buffer[indices]`` into the cache
    (``write``: with the intent to write it, x86 ``prefetchw``; else for reading,
    ``prefetcht0``), at cache ``level`` (1: L1 and every level below it; 2: L2, x86
    ``prefetcht1``; 3: the last level, ``prefetcht2``).

    It has no effect on any result: nothing is read or written, and a backend may emit
    nothing for it (the CUDA C backends emit a comment).  ``indices`` has one index per
    dimension, like a load, and the element is always inside the buffer (the
    ``prefetch`` lowering pass clamps every index into its dimension; the interpreter
    checks it, and does not load).  Made by ``s[T].prefetch(tensor, axis, offset)``.
    """

    buffer: Buffer
    indices: Tuple[Expr, ...]
    write: bool = False
    level: int = 1


@dataclass(frozen=True, slots=True)
class AttrStmt(Stmt):
    """An annotation ``key = value`` on ``body`` (pragmas, storage alignment)."""

    key: str
    value: Any
    body: Stmt


@dataclass(frozen=True, slots=True)
class AssertStmt(Stmt):
    """Check ``cond`` at run time; raise with ``message`` when false (checked builds)."""

    cond: Expr
    message: str
    body: Stmt


def annotated_loop(s: Stmt):
    """The For under a chain of AttrStmts (a loop and its pragmas), or None."""
    while isinstance(s, AttrStmt):
        s = s.body
    return s if isinstance(s, For) else None


def seq(*stmts) -> Stmt:
    """Flatten nested sequences and drop Nones; one statement is returned as is."""
    out = []
    for s in stmts:
        if s is None:
            continue
        if isinstance(s, SeqStmt):
            out.extend(s.seq)
        elif isinstance(s, (list, tuple)):
            inner = seq(*s)
            if isinstance(inner, SeqStmt):
                out.extend(inner.seq)
            elif inner is not None:
                out.append(inner)
        else:
            out.append(s)
    if not out:
        return SeqStmt(())
    if len(out) == 1:
        return out[0]
    return SeqStmt(tuple(out))


@dataclass(frozen=True)
class ParamCheck:
    """A condition on the values of a PrimFunc's parameters, ``expr >= lower`` (and
    ``expr <= upper`` where ``upper`` is given), that lowering derives from the schedule:
    an extent of a stage that depends on a variable must be ``>= 0``, a symbolic split
    factor ``>= 1``, a read whose range depends on the arguments (``A[i + off]``) must
    stay inside its tensor at the corners of its compute's domain
    (:func:`tecomp.te.range_check.symbolic_read_conditions`), and index arithmetic that the kernel computes in int32 must stay in
    int32's range (``upper``: the checks of :mod:`tecomp.lower.index_dtype`).  Kept in
    ``PrimFunc.attrs["param_checks"]`` (a tuple); every runtime (the shared
    :mod:`tecomp.runtime.argcheck`) and the interpreter check them before the body runs,
    evaluating ``expr`` exactly (Python integers, no wrapping), and raise
    :class:`~tecomp.errors.ArgumentError` with :meth:`message`.

    ``expr`` uses only the function's scalar parameters and the variables of its buffer
    parameters' shapes.  ``uses`` says what it is in the program, for the message
    (``"the extent of axis k of stage C"``, ``"the split factor of axis i of stage C"``).
    """

    expr: Expr
    lower: int
    uses: Tuple[str, ...]
    upper: Optional[int] = None

    def holds(self, value) -> bool:
        """Whether ``value`` (of ``expr``) meets the condition."""
        return value >= self.lower and (self.upper is None or value <= self.upper)

    def message(self, value, env: dict, params) -> str:
        """Why ``value`` (the value of ``expr`` with ``env``, outside the condition) is
        wrong; ``params`` are the function's parameters (they name the variables)."""
        free_vars, to_str = SERVICES.free_vars, SERVICES.to_str
        uses = list(self.uses)
        if len(uses) > 3:
            uses = uses[:3] + [f"{len(self.uses) - 3} more"]
        used = uses[0] if len(uses) == 1 else ", ".join(uses[:-1]) + " and " + uses[-1]
        e, lo = self.expr, self.lower
        if self.upper is not None and isinstance(e, Var) and e.dtype == "int64":
            # the bound every int64 symbolic extent has (tecomp.lower.ranges)
            return (f"{_var_origin(e, params)} = {value} is outside [{lo}, {self.upper}]: it is "
                    f"{used}; no array that long fits in memory (a stride-0 view can be): "
                    f"split the call along that dimension into parts of at most {self.upper}")
        if self.upper is not None:
            vals = ", ".join(f"{_var_origin(v, params)} = {env[v]}"
                             for v in free_vars(e) if v in env)
            wide = ", ".join(f"tc.var({v.name!r}, 'int64')" for v in free_vars(e)
                             if getattr(v, "dtype", "") == "int32")
            return (f"the index arithmetic {used} can reach {value} with {vals}: outside int32 "
                    f"[{lo}, {self.upper}], the type the kernel computes it in (the dtype of "
                    f"its variables), where it would wrap; pass smaller sizes, or declare the "
                    f"variables int64 ({wide or 'int64 variables'}) and build again: the "
                    f"kernel then indexes in int64")
        if isinstance(e, Var):
            return (f"{_var_origin(e, params)} = {value} must be >= {lo}: it is {used}; "
                    f"pass {e.name} >= {lo}")
        text = to_str(e)
        vals = ", ".join(f"{v.name} = {env[v]} from {_var_origin(v, params)}"
                         for v in free_vars(e) if v in env)
        names = ", ".join(v.name for v in free_vars(e))
        return (f"{text} = {value} must be >= {lo} ({vals}): it is {used}; pass values of "
                f"{names} for which {text} >= {lo}")


def _var_origin(v: Var, params) -> str:
    """``parameter n (argument 3)``, or ``n (from A.shape[0])``."""
    for i, p in enumerate(params):
        if p is v:
            return f"parameter {v.name} (argument {i + 1})"
    for p in params:
        if isinstance(p, Buffer):
            for d, x in enumerate(p.shape):
                if x is v:
                    return f"{v.name} (from {p.name}.shape[{d}])"
    return v.name


@dataclass(eq=False)
class PrimFunc(Node):
    """A lowered function: ``params`` (Buffers and scalar Vars) and a ``body``.

    ``attrs`` holds facts for code generation (``target``, the thread launch sizes
    for the GPU, ``param_checks``: the :class:`ParamCheck` conditions on the arguments,
    ...).  ``str()`` prints the loop IR.
    """

    name: str
    params: Tuple[Any, ...]
    body: Stmt
    attrs: dict = field(default_factory=dict)

    def with_body(self, body: Stmt) -> "PrimFunc":
        return PrimFunc(self.name, self.params, body, dict(self.attrs))

    def __repr__(self):
        return f"PrimFunc({self.name!r}, params={[p.name for p in self.params]})"

    def script(self) -> str:
        return SERVICES.to_str(self)
