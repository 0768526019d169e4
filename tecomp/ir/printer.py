"""The loop-IR printer: deterministic, one loop per line, close to what a C programmer reads.

* Loops: ``for (i, 0, n) {``; the kind leads for the others: ``parallel (i.outer, 0, 8) {``,
  ``vectorized (j.inner, 0, 8) {``, ``unrolled (k, 0, 4) {``, and for GPU-bound loops
  ``blockIdx.x (i.outer, 0, 16) {``.
* Allocations: ``allocate C.local: float32[8, 8] (local)``; the buffer lives until the end
  of the enclosing block.  So do a ``let``, an ``// attr`` and an ``assert``: where one's
  body ends before its block does, it is printed in a block of its own, ``{`` ... ``}``.
* Prefetches: ``prefetch x[min(i + 1, 127), j]``, ``prefetch (write) y[...]`` (a cache hint).
* Variables and buffers that share a name get suffixes in order of appearance
  (``i``, ``i_1``); the same program always prints the same text.  A name is one token
  (:func:`~tecomp.ir.names.ir_name`: ``conv1-weight`` prints ``conv1<U+002D>weight``).
* A function's signature line is followed by the dtype of each variable of its buffers'
  shapes that is not int32 and not a parameter (``// var n: int64``) and the conditions
  its arguments must meet (``// param_check n - 1 >= 0: 'the extent of ...'``), so that
  :func:`tecomp.ir.parse` reads back the same function.
* Constants: int32 plain (``8``), int64 ``8i64``, float32 ``1f``/``0.5f``, float64 ``0.5``,
  float16 ``0.5h``, other ints ``8i8``, bools ``True``/``False``; non-finite floats
  ``float32(inf)``, ``float64(nan)``; a negative zero ``-0f``, ``-0.0``.
* A division or modulo that is an operand of ``*`` gets parentheses: ``(f // 16)*16``.
"""
from __future__ import annotations

import math

from . import dtype as _dt
from .expr import (
    SERVICES, EQ, GE, GT, LE, LT, NE, Add, And, Buffer, BufferLoad, Call, Cast, CommReducer, Const, Div,
    Expr, FloorDiv, FloorMod, IterVar, Let, Max, Min, Mul, Not, Or, ProducerLoad, Range,
    Reduce, Select, Sub, TruncDiv, TruncMod, TupleCommReducer, Var,
)
from .deep import deep_entry
from .functor import free_vars
from .names import display, display_name, ir_name
from .stmt import (
    Allocate, AssertStmt, AttrStmt, BufferStore, Evaluate, ExternCall, For, IfThenElse, LetStmt,
    TensorIntrinCall,
    Prefetch, PrimFunc, SeqStmt, Stmt,
)

# precedence: higher binds tighter
_BIN = {
    Or: ("||", 1), And: ("&&", 2),
    EQ: ("==", 3), NE: ("!=", 3), LT: ("<", 4), LE: ("<=", 4), GT: (">", 4), GE: (">=", 4),
    Add: ("+", 5), Sub: ("-", 5),
    Mul: ("*", 6), Div: ("/", 6), FloorDiv: ("//", 6), FloorMod: ("%", 6),
}


_FLOAT_SUFFIX = {"float32": "f", "float16": "h", "bfloat16": "bf", "float64": ""}
_INT_SUFFIX = {"int32": "", "int64": "i64", "int16": "i16", "int8": "i8", "uint8": "u8"}


def format_const(c: Const) -> str:
    v, dt = c.value, c.dtype
    if dt == "bool":
        return "True" if v else "False"
    if _dt.is_float(dt):
        if math.isnan(v) or math.isinf(v):
            return f"{dt}({'nan' if math.isnan(v) else ('inf' if v > 0 else '-inf')})"
        if v == int(v) and abs(v) < 1e16:
            s = str(int(v)) if (v or math.copysign(1.0, v) > 0) else "-0"
            return s + (".0" if dt == "float64" else _FLOAT_SUFFIX[dt])
        return repr(float(v)) + _FLOAT_SUFFIX[dt]
    return f"{v}{_INT_SUFFIX.get(dt, dt)}"


class Printer:
    def __init__(self):
        self.names = {}  # Var/Buffer -> unique name
        self.used = {}
        self.lines = []
        self.declared = set()   # shape variables whose dtype the header states

    # names -------------------------------------------------------------------
    def name_of(self, obj) -> str:
        n = self.names.get(obj)
        if n is None:
            base = ir_name(obj.name)
            k = self.used.get(base, 0)
            n = base if k == 0 else f"{base}_{k}"
            while n in self.used and k > 0:
                k += 1
                n = f"{base}_{k}"
            self.used[base] = k + 1
            self.used.setdefault(n, 1)
            self.names[obj] = n
        return n

    # expressions ---------------------------------------------------------------
    def expr(self, e, parent_prec: int = 0) -> str:
        t = type(e)
        if t is Const:
            s = format_const(e)
            return f"({s})" if s.startswith("-") and parent_prec > 0 else s
        if t is Var:
            return self.name_of(e)
        if t is IterVar:
            return self.name_of(e.var)
        if t in _BIN:
            op, prec = _BIN[t]
            if t is Sub and _is_negation_zero(e.a) and not isinstance(e.b, Const) \
                    and not _dt.is_bool(e.dtype):
                # `-x`; not for a constant (`-5` is the constant, `0 - 5` the subtraction)
                s = "-" + self.expr(e.b, 7)
                return f"({s})" if parent_prec > 5 else s
            # left-associative: the right operand needs parens at equal precedence
            if t is Mul:
                # `a*b` is printed tight; a division operand gets parentheses so that
                # `(f // 16)*16` does not read as `f // (16*16)`
                a = self.expr(e.a, 7 if isinstance(e.a, (Div, FloorDiv, FloorMod)) else prec)
                s = f"{a}*{self.expr(e.b, prec + 1)}"
            else:
                s = f"{self.expr(e.a, prec)} {op} {self.expr(e.b, prec + 1)}"
            return f"({s})" if prec < parent_prec else s
        if t is Not:
            return "!" + self.expr(e.a, 7)
        if t is Min or t is Max:
            return f"{'min' if t is Min else 'max'}({self.expr(e.a)}, {self.expr(e.b)})"
        if t is TruncDiv or t is TruncMod:
            return f"{'truncdiv' if t is TruncDiv else 'truncmod'}({self.expr(e.a)}, {self.expr(e.b)})"
        if t is Select:
            return (f"select({self.expr(e.cond)}, {self.expr(e.true_value)}, "
                    f"{self.expr(e.false_value)})")
        if t is Cast:
            return f"{e.dtype}({self.expr(e.value)})"
        if t is Call:
            return f"{e.op}({', '.join(self.expr(a) for a in e.args)})"
        if t is BufferLoad:
            return f"{self.name_of(e.buffer)}[{', '.join(self.expr(i) for i in e.indices)}]"
        if t is ProducerLoad:
            return f"{display_name(e.producer.name)}[{', '.join(self.expr(i) for i in e.indices)}]"
        if t is Let:
            return f"(let {self.name_of(e.var)} = {self.expr(e.value)} in {self.expr(e.body)})"
        if t is Reduce:
            axes = ", ".join(
                f"{self.name_of(iv.var)} in [{self.expr(iv.dom.min)}, {self.expr(iv.dom.extent)})"
                for iv in e.axis)
            cond = "" if (isinstance(e.condition, Const) and e.condition.value is True) \
                else f", where={self.expr(e.condition)}"
            part = f".v{e.value_index}" if isinstance(e.combiner, TupleCommReducer) else ""
            return f"{display_name(e.combiner.name)}{part}({self.expr(e.source)}, axis=[{axes}]{cond})"
        if t is Range:
            return f"[{self.expr(e.min)}, {self.expr(e.min)} + {self.expr(e.extent)})"
        if isinstance(e, Stmt):
            return "\n".join(self.stmt_lines(e, 0))
        if t is Buffer:
            return self.buffer_decl(e)
        if t is CommReducer or t is TupleCommReducer:
            return f"comm_reducer {display_name(e.name)}"
        return repr(e)

    def buffer_decl(self, b: Buffer) -> str:
        return f"{self.name_of(b)}: {b.dtype}[{', '.join(self.expr(x) for x in b.shape)}]"

    # statements ----------------------------------------------------------------
    def stmt_lines(self, s, ind: int) -> list:
        out = []
        self._stmt(s, ind, out)
        return out

    def _stmt(self, s, ind, out):
        pad = "  " * ind
        t = type(s)
        if t is SeqStmt:
            flat = _flatten(s)
            for k, x in enumerate(flat):
                if k < len(flat) - 1 and type(x) in _HOLDS_REST:
                    # its body ends before the block does: a block of its own says where
                    out.append(pad + "{")
                    self._stmt(x, ind + 1, out)
                    out.append(pad + "}")
                else:
                    self._stmt(x, ind, out)
        elif t is For:
            head = "for" if s.kind == "serial" else (s.thread_tag if s.kind == "thread" else s.kind)
            rng = f"{self.expr(s.min)}, {self.expr(s.extent)}"
            out.append(f"{pad}{head} ({self.name_of(s.var)}, {rng}) {{")
            self._stmt(s.body, ind + 1, out)
            out.append(pad + "}")
        elif t is BufferStore:
            idx = ", ".join(self.expr(i) for i in s.indices)
            out.append(f"{pad}{self.name_of(s.buffer)}[{idx}] = {self.expr(s.value)}")
        elif t is IfThenElse:
            out.append(f"{pad}if ({self.expr(s.cond)}) {{")
            self._stmt(s.then_case, ind + 1, out)
            if s.else_case is not None:
                out.append(pad + "} else {")
                self._stmt(s.else_case, ind + 1, out)
            out.append(pad + "}")
        elif t is Allocate:
            b = s.buffer
            how = b.scope
            strides = None if b.strides is None else [self.expr(x) for x in b.strides]
            if strides is not None and strides != [self.expr(x) for x in b.row_major_strides()]:
                # storage_order / storage_align: the layout is not row major
                how += ", strides [" + ", ".join(strides) + "]"
            out.append(f"{pad}allocate {self.buffer_decl(b)} ({how})")
            self._stmt(s.body, ind, out)
        elif t is LetStmt:
            out.append(f"{pad}let {self.name_of(s.var)} = {self.expr(s.value)}")
            self._stmt(s.body, ind, out)
        elif t is AttrStmt:
            out.append(f"{pad}// attr {display(s.key)} = {self._attr_value(s.value)}")
            self._stmt(s.body, ind, out)
        elif t is AssertStmt:
            out.append(f"{pad}assert({self.expr(s.cond)}, {s.message!r})")
            self._stmt(s.body, ind, out)
        elif t is Evaluate:
            out.append(pad + self.expr(s.value))
        elif t is ExternCall:
            bufs, scal = iter(s.buffers), iter(s.scalars)
            args = ", ".join(self.name_of(next(bufs)) if k == "b" else self.expr(next(scal))
                             for k in s.order)
            out.append(f"{pad}call_extern {display_name(s.name)}({args})")
        elif t is TensorIntrinCall:
            how = "accumulate" if s.reduce else "store"
            if s.stage != s.buffers[0].name:   # (the stage is named after its output)
                how += f", stage {ir_name(s.stage)}"
            out.append(f"{pad}tensorize {ir_name(s.intrin.name)} ({how}) {{")
            names = [s.intrin.output] + list(s.intrin.inputs)
            for n, (ph, buf) in enumerate(zip(names, s.buffers)):
                role = "out" if n == 0 else "in"
                out.append(f"{pad}  // {role} {ir_name(ph.name)}: "
                           f"{self.name_of(buf)}{self._region(s, n, len(ph.shape))}")
            self._stmt(s.fallback, ind + 1, out)
            out.append(pad + "}")
        elif t is Prefetch:
            idx = ", ".join(self.expr(i) for i in s.indices)
            hints = (["write"] if s.write else []) + ([f"L{s.level}"] if s.level != 1 else [])
            how = f"prefetch ({', '.join(hints)})" if hints else "prefetch"
            out.append(f"{pad}{how} {self.name_of(s.buffer)}[{idx}]")
        else:
            out.append(pad + repr(s))

    def _region(self, s, n: int, rank: int) -> str:
        """Operand ``n`` of a tensorize as indices of its buffer, with ``x0``, ``x1``, ...
        the indices into the declared placeholder: ``[i + x0, j + 16*x1]``, or for a
        region affine only in flattened memory, its first element and the elements of
        memory it steps, ``[i, j, k] + (4608*x0 + x1 in memory)``."""
        flat = s.is_flat(n)
        parts, steps = [], []
        for e, base in enumerate(s.base(n)):
            text = self.expr(base)
            terms = []
            for d in range(rank):
                c = s.coefs[n][d][e]
                if c:
                    terms.append(f"x{d}" if c == 1 else f"{c}*x{d}")
            if flat:
                steps += terms
            elif terms:
                text = " + ".join(([] if text == "0" else [text]) + terms)
            parts.append(text)
        if flat:
            return f"[{', '.join(parts)}] + ({' + '.join(steps)} in memory)"
        return f"[{', '.join(parts)}]"

    def _attr_value(self, v):
        if isinstance(v, (Expr, Buffer)):
            return self.expr(v)
        if isinstance(v, tuple):
            return "(" + ", ".join(self._attr_value(x) for x in v) + ")"
        return display(repr(v) if isinstance(v, str) else str(v))   # (one line, always)

    def func(self, f: PrimFunc) -> str:
        params = []
        for p in f.params:
            if isinstance(p, Buffer):
                params.append(self.buffer_decl(p))
            else:
                params.append(f"{self.name_of(p)}: {p.dtype}")
        lines = [f"primfn {display_name(f.name)}({', '.join(params)}) {{"]
        # what the signature does not say: the dtypes of the shape variables that are not
        # parameters (int32 unless said) and the conditions on the arguments
        scalars = {p for p in f.params if isinstance(p, Var)}
        for p in f.params:
            for v in (_shape_vars(p) if isinstance(p, Buffer) else ()):
                if v not in scalars and v.dtype != "int32" and v not in self.declared:
                    self.declared.add(v)
                    lines.append(f"  // var {self.name_of(v)}: {v.dtype}")
        for pc in f.attrs.get("param_checks", ()):
            cond = f">= {pc.lower}" if pc.upper is None else f"in [{pc.lower}, {pc.upper}]"
            uses = ", ".join(repr(u) for u in pc.uses)
            lines.append(f"  // param_check {self.expr(pc.expr, 5)} {cond}: {uses}")
        lines += self.stmt_lines(f.body, 1)
        lines.append("}")
        return "\n".join(lines)


#: statements printed as one line whose body is the rest of the enclosing block
_HOLDS_REST = (Allocate, LetStmt, AttrStmt, AssertStmt)


def _flatten(s: SeqStmt) -> list:
    """The statements of ``s``, nested sequences spliced in."""
    out, todo = [], list(reversed(s.seq))
    while todo:
        x = todo.pop()
        if type(x) is SeqStmt:
            todo += reversed(x.seq)
        else:
            out.append(x)
    return out


def _is_negation_zero(e) -> bool:
    """What ``-x`` subtracts from: an integer 0, a float -0.0 (``-x`` of a float is
    ``-0.0 - x``, IEEE's negation; ``0.0 - x`` is a subtraction, +0.0 for x = +0.0)."""
    if not isinstance(e, Const) or e.value != 0:
        return False
    return math.copysign(1.0, e.value) < 0 if _dt.is_float(e.dtype) else True


def _shape_vars(b: Buffer) -> list:
    """The variables of ``b``'s shape, in order of appearance."""
    out = []
    for x in b.shape:
        out += [v for v in free_vars(x) if v not in out]
    return out


@deep_entry(lambda node: ("printing the IR", node))
def to_str(node) -> str:
    p = Printer()
    if isinstance(node, PrimFunc):
        return p.func(node)
    if isinstance(node, Stmt):
        return "\n".join(p.stmt_lines(node, 0))
    return p.expr(node)


# what expressions and statements use from this module (tecomp.ir.expr.SERVICES)
SERVICES.to_str = to_str
