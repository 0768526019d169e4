"""The loop-IR walk shared by every C-like target.

A target is this walk plus a few tables and overrides (tinygrad's renderer split): the
CUDA renderer (:mod:`tecomp.codegen.cuda`) changes the type of ``float16``, the
qualifier of helper functions, the math-function table, and adds thread loops, shared
memory and the barrier.  Everything else — expressions, casts, loops, conditionals,
allocations of local arrays, buffer accesses flattened through their strides, the
helper functions that give C the IR's semantics — lives here.

How the IR's semantics (``tecomp/ir/expr.py``) map onto C:

* Every binary operation is printed in parentheses, ``((i * 128) + k)``, as TVM's CUDA
  codegen does; the outermost pair is dropped where the context already delimits the
  expression (an index, the right side of an assignment, a call argument, a condition).
* ``FloorDiv``/``FloorMod`` become C's ``/``/``%`` when both operands are provably
  non-negative (loop counters from a non-negative start, thread indices, constants,
  unsigned values, ...), else the helpers ``tc_floordiv_i32`` ... (C's ``/`` truncates).
  ``TruncDiv``/``TruncMod`` are C's ``/``/``%`` except when the divisor may be ``-1``
  (``INT_MIN / -1`` traps on x86; the IR says it wraps): then a helper.
* Integer arithmetic wraps: int8/int16/uint8 results are cast back to their type (C
  computes them in ``int``); int32/int64 rely on the C compiler's two's complement
  behaviour (the CPU emulation compiles with ``-fwrapv``; nvcc wraps in practice, as
  every CUDA code generator relies on).
* ``Min``/``Max`` of floats propagate NaN like numpy (``fminf``/``fmaxf`` do *not*):
  helpers ``tc_fminf``/``tc_fmaxf``/``tc_fmin``/``tc_fmax``.
* ``Select`` is C's ``?:``, which evaluates only the chosen operand.
* float16 and bfloat16 are storage types: an expression of either dtype is a C ``float``
  value; loads widen, stores narrow with round-to-nearest-even (the conversions of
  ``NARROW_FLOATS``), and ``Cast(x, "float16")`` rounds to float16 precision
  (``Cast(x, "bfloat16")`` to bfloat16's; a float64 value rounds to float first, as the
  CPU code and the IR's interpreter do).
* ``round`` is ``rintf`` (half to even under the default rounding mode).
* ``Prefetch`` (a cache hint) is a comment: ``// prefetch x[...] (cache hint: no-op on
  this target)``.
* Names: IR names are made C identifiers (``i.outer`` -> ``i_outer``); two objects with
  the same name get ``_1``, ``_2`` suffixes in order of first appearance, exactly like
  the IR printer, so the generated source reads like ``str(func)``.

The output is deterministic: the same PrimFunc always gives byte-identical text.
"""
from __future__ import annotations

import math
import re
from typing import Dict, Iterable, List, Optional

from ..errors import BuildError, InternalError, TecompError
from ..ir import dtype as _dt
from ..ir import op as _op
from ..ir.expr import (
    Add, Buffer, BufferLoad, Call, Cast, Const, Expr, FloorDiv, FloorMod, Let, Max, Min, Mul,
    Select, TruncDiv, TruncMod, Var,
)
from ..ir.stmt import (
    Allocate, AssertStmt, AttrStmt, BufferStore, Evaluate, For, IfThenElse, LetStmt, Prefetch,
    SeqStmt, Stmt,
)
from ..ir.names import comment as _comment, display, identifier
from ..ir.printer import Printer, to_str
from ..lower.device_split import declared_size
from ..lower.index_dtype import offset_dtype

# Names a generated identifier must never take: C/C++ keywords, CUDA built-ins, the math
# functions the generated code calls, and the helpers below.
C_RESERVED = frozenset("""
alignas alignof and and_eq asm auto bitand bitor bool break case catch char char16_t char32_t
char8_t class compl concept const const_cast consteval constexpr constinit continue co_await
co_return co_yield decltype default delete do double dynamic_cast else enum explicit export
extern false float for friend goto if inline int long mutable namespace new noexcept not not_eq
nullptr operator or or_eq private protected public register reinterpret_cast requires restrict
return short signed sizeof static static_assert static_cast struct switch template this
thread_local throw true try typedef typeid typename union unsigned using virtual void volatile
wchar_t while xor xor_eq main NULL
threadIdx blockIdx blockDim gridDim warpSize dim3 uint3 half half2 __half
abs llabs fabs fabsf exp expf log logf sqrt sqrtf rsqrt rsqrtf tanh tanhf erf erff floor floorf
ceil ceilf rint rintf sin sinf cos cosf pow powf min max fmin fminf fmax fmaxf printf assert
INFINITY NAN
""".split())

def c_identifier(name: str) -> str:
    """Make ``name`` a valid C identifier (``i.outer`` -> ``i_outer``): see
    :mod:`tecomp.ir.names`, the one place where user names become generated text."""
    return identifier(name)


class Namer:
    """Unique C names for Vars and Buffers, by identity, in order of first appearance.

    The scheme is the IR printer's (``i``, ``i_1``, ``i_2``), applied after
    :func:`c_identifier`; reserved words count as already taken (``max`` -> ``max_1``).
    """

    def __init__(self, reserved: Iterable[str] = C_RESERVED):
        self.names: Dict[object, str] = {}
        self.taken = set(reserved)

    def __call__(self, obj) -> str:
        n = self.names.get(obj)
        if n is None:
            n = self.fresh(obj.name)
            self.names[obj] = n
        return n

    def fresh(self, hint: str) -> str:
        base = c_identifier(hint)
        n, k = base, 0
        while n in self.taken:
            k += 1
            n = f"{base}_{k}"
        self.taken.add(n)
        return n


def strip_parens(s: str) -> str:
    """Drop one pair of parentheses that encloses the whole of ``s``."""
    if len(s) < 2 or s[0] != "(" or s[-1] != ")":
        return s
    depth = 0
    for i, ch in enumerate(s):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0 and i != len(s) - 1:
                return s  # the first "(" closes before the end: "(a) + (b)"
    return s[1:-1]


# ---------------------------------------------------------------------------------
# helper functions: emitted once each, only when used, in this (fixed) order.

_HELPERS = {
    "tc_floordiv_i32": (
        "// Floor division (rounds toward -infinity; C's / rounds toward zero).  x / -1 wraps\n"
        "// and x / 0 is 0 (undefined in the IR; this keeps the CPU emulation from trapping).\n"
        "{q} int tc_floordiv_i32(int a, int b) {{\n"
        "  if (b == -1) return (int)(0u - (unsigned int)a);\n"
        "  if (b == 0) return 0;\n"
        "  int q = a / b;\n"
        "  return ((q * b != a) && ((a < 0) != (b < 0))) ? (q - 1) : q;\n"
        "}}"),
    "tc_floormod_i32": (
        "// Remainder of floor division: has the sign of the divisor (Python's %).\n"
        "{q} int tc_floormod_i32(int a, int b) {{\n"
        "  if (b == -1 || b == 0) return 0;\n"
        "  int r = a % b;\n"
        "  return ((r != 0) && ((r < 0) != (b < 0))) ? (r + b) : r;\n"
        "}}"),
    "tc_floordiv_i64": (
        "{q} long long tc_floordiv_i64(long long a, long long b) {{\n"
        "  if (b == -1) return (long long)(0ull - (unsigned long long)a);\n"
        "  if (b == 0) return 0;\n"
        "  long long q = a / b;\n"
        "  return ((q * b != a) && ((a < 0) != (b < 0))) ? (q - 1) : q;\n"
        "}}"),
    "tc_floormod_i64": (
        "{q} long long tc_floormod_i64(long long a, long long b) {{\n"
        "  if (b == -1 || b == 0) return 0;\n"
        "  long long r = a % b;\n"
        "  return ((r != 0) && ((r < 0) != (b < 0))) ? (r + b) : r;\n"
        "}}"),
    "tc_truncdiv_i32": (
        "// C division, except that x / -1 wraps instead of trapping on INT_MIN, and x / 0 is 0.\n"
        "{q} int tc_truncdiv_i32(int a, int b) {{\n"
        "  return (b == -1) ? (int)(0u - (unsigned int)a) : ((b == 0) ? 0 : (a / b));\n"
        "}}"),
    "tc_truncmod_i32": (
        "{q} int tc_truncmod_i32(int a, int b) {{\n"
        "  return (b == -1 || b == 0) ? 0 : (a % b);\n"
        "}}"),
    "tc_truncdiv_i64": (
        "{q} long long tc_truncdiv_i64(long long a, long long b) {{\n"
        "  return (b == -1) ? (long long)(0ull - (unsigned long long)a) : ((b == 0) ? 0 : (a / b));\n"
        "}}"),
    "tc_truncmod_i64": (
        "{q} long long tc_truncmod_i64(long long a, long long b) {{\n"
        "  return (b == -1 || b == 0) ? 0 : (a % b);\n"
        "}}"),
    "tc_fminf": (
        "// min/max that propagate NaN like numpy.minimum/maximum (fminf/fmaxf drop it).\n"
        "{q} float tc_fminf(float a, float b) {{ return ((a < b) || (a != a)) ? a : b; }}"),
    "tc_fmaxf": (
        "{q} float tc_fmaxf(float a, float b) {{ return ((a > b) || (a != a)) ? a : b; }}"),
    "tc_fmin": (
        "{q} double tc_fmin(double a, double b) {{ return ((a < b) || (a != a)) ? a : b; }}"),
    "tc_fmax": (
        "{q} double tc_fmax(double a, double b) {{ return ((a > b) || (a != a)) ? a : b; }}"),
    "tc_min_i32": (
        "{q} int tc_min_i32(int a, int b) {{ return (a < b) ? a : b; }}"),
    "tc_max_i32": (
        "{q} int tc_max_i32(int a, int b) {{ return (a > b) ? a : b; }}"),
    "tc_min_i64": (
        "{q} long long tc_min_i64(long long a, long long b) {{ return (a < b) ? a : b; }}"),
    "tc_max_i64": (
        "{q} long long tc_max_i64(long long a, long long b) {{ return (a > b) ? a : b; }}"),
}


def _fmt_float(value: float, dtype: str) -> Optional[str]:
    """Shortest round-tripping decimal text of a finite constant (no suffix)."""
    import numpy as np

    if dtype == "float64":
        s = repr(float(value))
    else:
        v = np.float32(_dt.round_storage(dtype, value) if _dt.is_storage_float(dtype)
                       else value)
        s = str(v)  # numpy prints the shortest text that round-trips in float32
    if "e" not in s and "." not in s:
        s += ".0"
    if "e" in s and "." not in s.split("e")[0]:
        mant, ex = s.split("e")
        s = f"{mant}.0e{ex}"
    return s


class CSource:
    """The C-like walk: ``expr(e) -> str`` and ``stmt(s)`` (appends lines).

    Subclasses change the tables below and override the hooks (``thread_loop``,
    ``parallel_loop``, ``special_call``, ``declare_local``, ``assert_stmt``).
    """

    #: C type of each dtype in memory (buffers, parameters, declarations).
    TYPES = {
        "float32": "float", "float64": "double", "float16": "half",
        "bfloat16": "__nv_bfloat16", "int8": "signed char",
        "int16": "short", "int32": "int", "int64": "long long", "uint8": "unsigned char",
        "bool": "bool",
    }
    #: qualifier of the helper functions.
    HELPER_QUALIFIER = "static inline"
    #: the storage floats: widen a loaded value to float, narrow a float (and a double,
    #: None: through float) with round-to-nearest-even.
    NARROW_FLOATS = {
        "float16": ("__half2float({0})", "__float2half({0})", "__double2half({0})"),
        "bfloat16": ("__bfloat162float({0})", "__float2bfloat16({0})", None),
    }
    #: float constants that have no decimal literal.
    INF_F32, NAN_F32 = "INFINITY", "NAN"
    INF_F64, NAN_F64 = "((double)INFINITY)", "((double)NAN)"
    #: target-specific helper functions (name -> text with {q} for the qualifier).
    EXTRA_HELPERS: Dict[str, str] = {
        "tc_assert_fail": "{q} void tc_assert_fail(const char* msg) {{ (void)msg; __builtin_trap(); }}",
    }
    #: integer min/max: a format with {a} {b}, or None for the tc_min_* helpers.
    INT_MINMAX: Optional[str] = None

    #: math intrinsics for float32 (and float16, which computes in float32) and float64.
    MATH_F32 = {
        "exp": "expf({0})", "log": "logf({0})", "sqrt": "sqrtf({0})",
        "rsqrt": "(1.f / sqrtf({0}))", "tanh": "tanhf({0})", "erf": "erff({0})",
        "abs": "fabsf({0})", "floor": "floorf({0})", "ceil": "ceilf({0})",
        "round": "rintf({0})", "sin": "sinf({0})", "cos": "cosf({0})", "pow": "powf({0}, {1})",
        "sigmoid": "(1.f / (1.f + expf(-({0}))))", "fast_exp": "expf({0})",
        "fma": "fmaf({0}, {1}, {2})", "exp2": "exp2f({0})", "expm1": "expm1f({0})",
        "log2": "log2f({0})", "log1p": "log1pf({0})",
        "softplus": "(fmaxf({0}, 0.f) + log1pf(expf(-fabsf({0}))))",
        "tan": "tanf({0})", "atan": "atanf({0})", "atan2": "atan2f({0}, {1})",
        "cbrt": "cbrtf({0})", "erfc": "erfcf({0})", "fast_erfc": "erfcf({0})",
        "fast_log": "logf({0})",
    }
    MATH_F64 = {
        "exp": "exp({0})", "log": "log({0})", "sqrt": "sqrt({0})", "rsqrt": "(1.0 / sqrt({0}))",
        "tanh": "tanh({0})", "erf": "erf({0})", "abs": "fabs({0})", "floor": "floor({0})",
        "ceil": "ceil({0})", "round": "rint({0})", "sin": "sin({0})", "cos": "cos({0})",
        "pow": "pow({0}, {1})", "sigmoid": "(1.0 / (1.0 + exp(-({0}))))", "fast_exp": "exp({0})",
        "fma": "fma({0}, {1}, {2})", "exp2": "exp2({0})", "expm1": "expm1({0})",
        "log2": "log2({0})", "log1p": "log1p({0})",
        "softplus": "(fmax({0}, 0.0) + log1p(exp(-fabs({0}))))",
        "tan": "tan({0})", "atan": "atan({0})", "atan2": "atan2({0}, {1})",
        "cbrt": "cbrt({0})", "erfc": "erfc({0})", "fast_erfc": "erfc({0})",
        "fast_log": "log({0})",
    }

    def __init__(self, namer: Optional[Namer] = None):
        self.name = namer or Namer()
        self.lines: List[str] = []
        self.indent = 0
        self.helpers: set = set()
        self.narrow_used: set = set()   # the storage floats the text uses
        # Var -> C text that replaces it (thread indices, ...).
        self.var_text: Dict[Var, str] = {}
        # Vars known to be >= 0 (loop counters from a non-negative start, ...).
        self.nonneg_vars: set = set()
        # Vars that are dimensions of the function's buffers (>= 0; nonzero wherever a
        # loop over them runs).
        self.size_vars: set = set()
        # Vars declared in each open C block (to avoid redeclaring one in the same block).
        self._scopes: List[set] = [set()]

    # ---------------------------------------------------------------- output
    def emit(self, line: str) -> None:
        self.lines.append("  " * self.indent + line if line else "")

    def open_block(self, head: str) -> None:
        self.emit(head + " {")
        self.indent += 1
        self._scopes.append(set())

    def close_block(self, tail: str = "}") -> None:
        self._scopes.pop()
        self.indent -= 1
        self.emit(tail)

    def helper(self, name: str) -> str:
        self.helpers.add(name)
        return name

    def helper_source(self) -> str:
        """The helper functions used so far, in their fixed order.

        Each sits in an include guard, so that several generated sources can be
        concatenated into one translation unit (one module with many kernels).
        """
        table = dict(_HELPERS, **self.EXTRA_HELPERS)
        order = {name: i for i, name in enumerate(table)}
        names = sorted(self.helpers, key=order.__getitem__)
        out = []
        for n in names:
            guard = "TECOMP_HELPER_" + n.upper()
            out.append(f"#ifndef {guard}\n#define {guard}\n"
                       f"{table[n].format(q=self.HELPER_QUALIFIER)}\n#endif")
        return "\n".join(out)

    # ---------------------------------------------------------------- types
    def ctype(self, dtype: str) -> str:
        """The C type of ``dtype`` in memory."""
        if dtype in self.NARROW_FLOATS:
            self.narrow_used.add(dtype)
        return self.TYPES[dtype]

    def widen(self, dtype: str, text: str) -> str:
        """The float value of the storage float ``text`` of ``dtype``."""
        self.narrow_used.add(dtype)
        return self.NARROW_FLOATS[dtype][0].format(text)

    def narrow(self, dtype: str, v: Expr) -> str:
        """The value of expression ``v`` rounded to the storage float ``dtype`` (a C
        ``half``/``__nv_bfloat16``)."""
        self.narrow_used.add(dtype)
        _, from_float, from_double = self.NARROW_FLOATS[dtype]
        src = v.dtype
        if src == "float64":
            if from_double is not None:
                return from_double.format(self.expr_top(v))
            return from_float.format(f"(float){self.expr(v)}")
        if src == "float32" or _dt.is_storage_float(src):
            return from_float.format(self.expr_top(v))
        return from_float.format(f"(float){self.expr(v)}")

    def value_ctype(self, dtype: str) -> str:
        """The C type a value of ``dtype`` computes in (float16 computes in float)."""
        return self.ctype(_dt.compute_dtype(dtype))

    # ---------------------------------------------------------------- facts
    def is_nonneg(self, e: Expr) -> bool:
        """A cheap, sound proof that the integer expression ``e`` is >= 0."""
        t = type(e)
        if _dt.is_uint(e.dtype) or _dt.is_bool(e.dtype):
            return True
        if t is Const:
            return e.value >= 0
        if t is Var:
            return e in self.nonneg_vars
        if t in (Add, Mul, FloorDiv, TruncDiv, Min):
            return self.is_nonneg(e.a) and self.is_nonneg(e.b)
        if t is Max:
            return self.is_nonneg(e.a) or self.is_nonneg(e.b)
        if t is FloorMod:
            return isinstance(e.b, Const) and e.b.value > 0 or (
                self.is_nonneg(e.a) and self.is_nonneg(e.b))
        if t is TruncMod:
            return self.is_nonneg(e.a)
        if t is Select:
            return self.is_nonneg(e.true_value) and self.is_nonneg(e.false_value)
        if t is Cast:
            v = e.value
            return (_dt.is_int(v.dtype) and _dt.is_int(e.dtype)
                    and _dt.bits(e.dtype) >= _dt.bits(v.dtype) and self.is_nonneg(v))
        return False

    def is_size(self, e: Expr) -> bool:
        """Whether ``e`` is built from dimensions (``size_vars``) and positive constants."""
        t = type(e)
        if t is Const:
            return e.value > 0
        if t is Var:
            return e in self.size_vars
        if t is Mul:
            return self.is_size(e.a) and self.is_size(e.b)
        if t is Add:
            return (self.is_size(e.a) and self.is_nonneg(e.b)) or (
                self.is_size(e.b) and self.is_nonneg(e.a))
        return False

    # ---------------------------------------------------------------- expressions
    def expr(self, e: Expr) -> str:
        """C text of ``e``; composite expressions come in parentheses."""
        m = getattr(self, "_e_" + type(e).__name__, None)
        if m is None:
            raise BuildError(f"the {type(e).__name__} expression `{to_str(e)}` cannot appear in "
                             f"lowered code (it should have been removed by lowering)")
        return m(e)

    def expr_top(self, e: Expr) -> str:
        """``expr`` without the outer parentheses, for contexts that delimit it."""
        return strip_parens(self.expr(e))

    def _e_Const(self, e: Const) -> str:
        v, dt = e.value, e.dtype
        if dt == "bool":
            return "true" if v else "false"
        if _dt.is_float(dt):
            f = float(v)
            if math.isnan(f):
                return self.NAN_F64 if dt == "float64" else self.NAN_F32
            if math.isinf(f):
                inf = self.INF_F64 if dt == "float64" else self.INF_F32
                return inf if f > 0 else f"(-{inf})"
            if dt != "float64":
                import numpy as np

                with np.errstate(over="ignore"):
                    r = (_dt.round_storage(dt, f) if _dt.is_storage_float(dt)
                         else float(np.float32(f)))
                if math.isinf(r):  # out of the dtype's range: the constant overflows
                    inf = self.INF_F32
                    return inf if r > 0 else f"(-{inf})"
            s = _fmt_float(f, dt) + ("" if dt == "float64" else "f")
            return f"({s})" if s.startswith("-") else s
        v = int(v)
        if dt == "int32":
            if v == -(2**31):
                return "(-2147483647 - 1)"
            return f"({v})" if v < 0 else str(v)
        if dt == "int64":
            if v == -(2**63):
                return "(-9223372036854775807LL - 1LL)"
            return f"({v}LL)" if v < 0 else f"{v}LL"
        return f"(({self.TYPES[dt]}){v})"

    def _e_Var(self, e: Var) -> str:
        t = self.var_text.get(e)
        return t if t is not None else self.name(e)

    def _narrow(self, dtype: str, text: str) -> str:
        """int8/int16/uint8 arithmetic runs in C's int: cast the result back (wraps)."""
        if dtype in ("int8", "int16", "uint8"):
            return f"(({self.TYPES[dtype]}){text})"
        return text

    def _binary(self, e, op: str) -> str:
        return self._narrow(e.dtype, f"({self.expr(e.a)} {op} {self.expr(e.b)})")

    def _e_Add(self, e):
        return self._binary(e, "+")

    def _e_Sub(self, e):
        # (-x of a float is -0.0 - x, IEEE's negation; 0.0 - x is +0.0 at x = +0.0)
        if isinstance(e.a, Const) and e.a.value == 0 and not _dt.is_uint(e.dtype) and \
                (not _dt.is_float(e.dtype) or math.copysign(1.0, e.a.value) < 0):
            return self._narrow(e.dtype, f"(-{self.expr(e.b)})")
        return self._binary(e, "-")

    def _e_Mul(self, e):
        return self._binary(e, "*")

    def _e_Div(self, e):
        if not _dt.is_float(e.dtype):
            raise BuildError(f"true division `{to_str(e)}` on {e.dtype} values; integer "
                             "division is FloorDiv or TruncDiv")
        return self._binary(e, "/")

    def _int_suffix(self, dtype: str) -> str:
        return "i64" if dtype == "int64" else "i32"

    def _e_FloorDiv(self, e):
        return self._divmod(e, "/", "tc_floordiv", floor=True)

    def _e_FloorMod(self, e):
        return self._divmod(e, "%", "tc_floormod", floor=True)

    def _e_TruncDiv(self, e):
        return self._divmod(e, "/", "tc_truncdiv", floor=False)

    def _e_TruncMod(self, e):
        return self._divmod(e, "%", "tc_truncmod", floor=False)

    def _divmod(self, e, op: str, helper: str, floor: bool) -> str:
        if not _dt.is_int(e.dtype):
            raise BuildError(f"integer division `{to_str(e)}` on {e.dtype} values")
        b = e.b
        if isinstance(b, Const):
            if b.value == 0:
                return self._narrow(e.dtype, "0") if e.dtype != "int64" else "0LL"
            plain = b.value > 0 and self.is_nonneg(e.a) if floor else b.value != -1
        else:
            # a dimension is nonzero wherever a division by it runs (a zero-sized
            # dimension runs no loop iteration)
            plain = self.is_size(b) and (self.is_nonneg(e.a) or not floor)
        if plain:
            return self._binary(e, op)
        name = self.helper(f"{helper}_{self._int_suffix(e.dtype)}")
        return self._narrow(e.dtype, f"{name}({self.expr_top(e.a)}, {self.expr_top(e.b)})")

    def _minmax(self, e, which: str) -> str:
        dt = e.dtype
        if _dt.is_float(dt):
            base = {"float64": "tc_f" + which}.get(dt, f"tc_f{which}f")
            name = self.helper(base)
            return f"{name}({self.expr_top(e.a)}, {self.expr_top(e.b)})"
        if not _dt.is_int(dt):
            raise BuildError(f"{which}() of {dt} values in `{to_str(e)}`")
        a, b = self._arg_as(e.a, dt), self._arg_as(e.b, dt)
        if self.INT_MINMAX is not None:
            text = self.INT_MINMAX.format(op=which, a=a, b=b)
        else:
            text = f"{self.helper(f'tc_{which}_{self._int_suffix(dt)}')}({a}, {b})"
        return self._narrow(dt, text)

    def _arg_as(self, e: Expr, dtype: str) -> str:
        """``e`` as a call argument of C type ``dtype`` (casts a mismatched int width)."""
        s = self.expr_top(e)
        if e.dtype != dtype and dtype == "int64":
            return f"(long long)({s})" if not _is_atom(s) else f"(long long){s}"
        return s

    def _e_Min(self, e):
        return self._minmax(e, "min")

    def _e_Max(self, e):
        return self._minmax(e, "max")

    def _cmp(self, e, op):
        return f"({self.expr(e.a)} {op} {self.expr(e.b)})"

    def _e_EQ(self, e):
        return self._cmp(e, "==")

    def _e_NE(self, e):
        return self._cmp(e, "!=")

    def _e_LT(self, e):
        return self._cmp(e, "<")

    def _e_LE(self, e):
        return self._cmp(e, "<=")

    def _e_GT(self, e):
        return self._cmp(e, ">")

    def _e_GE(self, e):
        return self._cmp(e, ">=")

    def _e_And(self, e):
        return self._cmp(e, "&&")

    def _e_Or(self, e):
        return self._cmp(e, "||")

    def _e_Not(self, e):
        return f"(!{self.expr(e.a)})"

    def _e_Select(self, e):
        return (f"({self.expr(e.cond)} ? {self.expr(e.true_value)} : "
                f"{self.expr(e.false_value)})")

    def _e_Cast(self, e: Cast) -> str:
        src, dst = e.value.dtype, e.dtype
        v = self.expr(e.value)
        if src == dst:
            return v
        if dst == "bool":
            zero = "0.f" if _dt.compute_dtype(src) == "float32" else ("0.0" if src == "float64" else "0")
            return f"({v} != {zero})"
        if dst in self.NARROW_FLOATS:
            # round to the storage float's precision; the value keeps computing in float
            return self.widen(dst, self.narrow(dst, e.value))
        if _dt.is_storage_float(src) and dst in ("float32", "float16", "bfloat16"):
            return v  # a storage float's value already is a float
        return f"(({self.value_ctype(dst)}){v})"

    def _e_Call(self, e: Call) -> str:
        dt = e.dtype
        if e.op not in self.MATH_F32:
            raise BuildError(f"`{to_str(e)}`: the intrinsic {e.op!r} has no C translation")
        args = [self.expr_top(a) for a in e.args]
        if e.op == "abs" and _dt.is_int(dt):
            if dt == "int64":
                return f"llabs({args[0]})"
            return self._narrow(dt, f"abs({args[0]})")
        if not _dt.is_float(dt):
            raise BuildError(f"`{to_str(e)}`: {e.op} needs a float argument, got {dt}")
        table = self.MATH_F64 if dt == "float64" else self.MATH_F32
        return table[e.op].format(*args)

    def _e_BufferLoad(self, e: BufferLoad) -> str:
        text = f"{self.buffer_ref(e.buffer)}[{self.flat_index(e.buffer, e.indices)}]"
        if e.buffer.dtype in self.NARROW_FLOATS:
            return self.widen(e.buffer.dtype, text)
        return text

    def _e_Let(self, e: Let) -> str:
        # C has no let-expression: an immediately invoked lambda keeps it an expression
        # (and keeps it lazy when it sits in one arm of a Select).
        name = self.name(e.var)
        if self.is_nonneg(e.value):
            self.nonneg_vars.add(e.var)
        return (f"([&]() -> {self.value_ctype(e.dtype)} {{ const {self.value_ctype(e.var.dtype)} "
                f"{name} = {self.expr_top(e.value)}; return {self.expr_top(e.body)}; }}())")

    # ---------------------------------------------------------------- buffers
    def buffer_ref(self, buf: Buffer) -> str:
        """The C name by which ``buf`` is accessed."""
        return self.name(buf)

    def flat_expr(self, buf: Buffer, indices) -> Expr:
        """The element offset of ``buf[indices]`` through its strides."""
        if len(indices) != len(buf.shape):
            raise BuildError(f"buffer {buf.name} has {len(buf.shape)} dimension(s) but is "
                             f"indexed with {len(indices)} index(es)")

        # in the buffer's offset dtype (int64 where its layout needs it); constants
        # multiply and add exactly
        wide = offset_dtype(buf) == "int64"
        flat = None
        for idx, stride in zip(indices, buf.effective_strides()):
            if isinstance(idx, Const) and idx.value == 0:
                continue  # a zero index adds nothing
            if wide:
                idx, stride = _op.widen(idx, "int64"), _op.widen(stride, "int64")
            term = _op.index_mul(idx, stride)
            flat = term if flat is None else _op.index_add(flat, term)
        return Const(0, "int32") if flat is None else flat

    def flat_index(self, buf: Buffer, indices) -> str:
        """The element offset of ``buf[indices]`` through its strides, as C text."""
        flat = self.flat_expr(buf, indices)
        return "0" if isinstance(flat, Const) and flat.value == 0 else self.expr_top(flat)

    # ---------------------------------------------------------------- statements
    def stmt(self, s: Stmt) -> None:
        m = getattr(self, "_s_" + type(s).__name__, None)
        if m is None:
            raise BuildError(f"the statement {type(s).__name__} cannot be generated as C")
        try:
            m(s)
        except TecompError:
            raise
        except Exception as exc:  # noqa: BLE001 - add the node to any unexpected failure
            first = to_str(s).splitlines()[0] if not isinstance(s, SeqStmt) else "a sequence"
            raise InternalError(f"generating C for `{first}` failed: "
                                f"{type(exc).__name__}: {exc}") from exc

    def _s_SeqStmt(self, s: SeqStmt) -> None:
        for x in s.seq:
            self.stmt(x)

    def _s_BufferStore(self, s: BufferStore) -> None:
        buf = s.buffer
        target = f"{self.buffer_ref(buf)}[{self.flat_index(buf, s.indices)}]"
        v = s.value
        if buf.dtype in self.NARROW_FLOATS:
            self.narrow_used.add(buf.dtype)
            if isinstance(v, BufferLoad) and v.buffer.dtype == buf.dtype:
                # a copy: move the bits, no round trip through float
                value = f"{self.buffer_ref(v.buffer)}[{self.flat_index(v.buffer, v.indices)}]"
            else:
                if isinstance(v, Cast) and v.dtype == buf.dtype:
                    v = v.value  # the store rounds anyway: round once
                value = self.narrow(buf.dtype, v)
        else:
            value = self.expr_top(v)
        self.emit(f"{target} = {value};")

    def _s_IfThenElse(self, s: IfThenElse) -> None:
        self.open_block(f"if ({self.expr_top(s.cond)})")
        self.stmt(s.then_case)
        if s.else_case is not None:
            self.indent -= 1
            self._scopes.pop()
            self.emit("} else {")
            self.indent += 1
            self._scopes.append(set())
            self.stmt(s.else_case)
        self.close_block()

    def _s_For(self, s: For) -> None:
        if _only_prefetches(s):
            self.prefetch_nest(s)
        elif s.kind == "thread":
            self.thread_loop(s)
        elif s.kind == "parallel":
            self.parallel_loop(s)
        elif s.kind in ("serial", "unrolled", "vectorized"):
            self.serial_loop(s)
        else:
            raise BuildError(f"loop {s.var.name} has the unknown kind {s.kind!r}")

    def serial_loop(self, s: For, comment: str = "") -> None:
        v = self.name(s.var)
        t = self.value_ctype(s.var.dtype)
        lo = self.expr_top(s.min)
        if isinstance(s.min, Const) and s.min.value == 0:
            end = self.expr(s.extent)
        else:
            end = f"({self.expr(s.min)} + {self.expr(s.extent)})"
        if self.is_nonneg(s.min):
            self.nonneg_vars.add(s.var)
        if comment:
            self.emit(_comment(comment))
        if s.kind == "unrolled":
            self.emit("#pragma unroll")
        self.open_block(f"for ({t} {v} = {lo}; {v} < {strip_parens(end)}; ++{v})")
        self.stmt(s.body)
        self.close_block()

    def parallel_loop(self, s: For) -> None:
        raise BuildError(f"loop {s.var.name} is parallel, which this target cannot run")

    def thread_loop(self, s: For) -> None:
        raise BuildError(f"loop {s.var.name} is bound to {s.thread_tag}, a GPU thread axis, "
                         "which this target cannot run")

    def _s_LetStmt(self, s: LetStmt) -> None:
        if s.var in self._scopes[-1]:
            # the same Var bound twice in one C block: give the second binding its own block
            self.open_block("")
            self._let(s)
            self.close_block()
        else:
            self._let(s)

    def _let(self, s: LetStmt) -> None:
        if self.is_nonneg(s.value):
            self.nonneg_vars.add(s.var)
        self._scopes[-1].add(s.var)
        self.emit(f"{self.value_ctype(s.var.dtype)} {self.name(s.var)} = {self.expr_top(s.value)};")
        self.stmt(s.body)

    def _s_Allocate(self, s: Allocate) -> None:
        self.local_allocate(s)

    def declare_local(self, buf: Buffer) -> None:
        self._scopes[-1].add(buf)
        self.emit(f"{self.ctype(buf.dtype)} {self.name(buf)}[{declared_size(buf)}];")

    def local_allocate(self, s: Allocate, declare=None) -> None:
        """``s.buffer`` declared as a local array (or by ``declare(buffer)``) and
        ``s.body``; a buffer allocated a second time in one C block (loop partitioning
        copies a body with its allocations: fuzz seed 6002174) gets its own block, as a
        Var bound twice does."""
        again = s.buffer in self._scopes[-1]
        if again:
            self.open_block("")
        (declare or self.declare_local)(s.buffer)
        self.stmt(s.body)
        if again:
            self.close_block()

    def _s_Evaluate(self, s: Evaluate) -> None:
        v = s.value
        if isinstance(v, Call) and v.op not in self.MATH_F32:
            self.special_call(v)
        elif isinstance(v, Const):
            return  # no-op
        else:
            self.emit(f"(void){self.expr(v)};")

    def special_call(self, c: Call) -> None:
        raise BuildError(f"`{c.op}()` cannot be generated for this target")

    def _s_Prefetch(self, s: Prefetch) -> None:
        # a CPU cache hint: nothing to do on the C-like targets; kept as a comment so
        # that the source reads like the IR
        self.emit(_comment(f"{to_str(s)} (cache hint: no-op on this target)"))

    def prefetch_nest(self, s: For) -> None:
        """A loop that holds nothing but prefetches: the printed IR as comments."""
        self.emit("// cache hints (no-op on this target):")
        for line in to_str(s).splitlines():
            self.emit(_comment(line))

    def _s_TensorIntrinCall(self, s) -> None:
        # no C code for the intrinsic: the declared computation, on the same regions
        self.emit(_comment(f"tensorize {display(s.intrin.name)}: its declared computation"))
        self.stmt(s.fallback)

    def _s_AttrStmt(self, s: AttrStmt) -> None:
        self.emit(_comment(f"attr {s.key} = {Printer()._attr_value(s.value)}"))
        self.stmt(s.body)

    def _s_AssertStmt(self, s: AssertStmt) -> None:
        self.assert_stmt(s)
        self.stmt(s.body)

    def assert_stmt(self, s: AssertStmt) -> None:
        msg = c_string(s.message)
        fail = self.helper("tc_assert_fail")
        self.emit(f"if (!({self.expr_top(s.cond)})) {{ {fail}({msg}); }}")


def _only_prefetches(s: Stmt) -> bool:
    """Whether ``s`` is a serial loop nest whose bodies are only ``Prefetch``es."""
    if isinstance(s, Prefetch):
        return True
    if isinstance(s, For) and s.kind == "serial":
        return _only_prefetches(s.body)
    if isinstance(s, SeqStmt):
        return bool(s.seq) and all(_only_prefetches(x) for x in s.seq)
    return False


def _is_atom(s: str) -> bool:
    return re.fullmatch(r"[A-Za-z_][A-Za-z_0-9]*|\d+", s) is not None


def c_string(text: str) -> str:
    """A C string literal holding ``text``."""
    out = ['"']
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif 32 <= ord(ch) < 127:
            out.append(ch)
        else:
            out.append("".join(f"\\x{b:02x}\"\"" for b in ch.encode("utf-8")))
    out.append('"')
    return "".join(out)
