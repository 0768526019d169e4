"""Reading the printed loop IR back: :func:`parse`.

``parse(str(func))`` gives a :class:`~tecomp.ir.stmt.PrimFunc` structurally equal to
``func`` (:func:`structural_equal`), whose ``str()`` is the same text; ``tc.build`` takes
it like the function ``tc.lower`` returns.  So a kernel can be printed, edited as text,
and built again (the role TVMScript plays for TVM).

The grammar is what :mod:`tecomp.ir.printer` writes, one statement per line:

* ``primfn name(A: float32[n, 16], n: int32) {`` ... ``}``; after it ``// var n: int64``
  (a shape variable's dtype, int32 when not said) and ``// param_check e >= 0: 'why'``
  (``// param_check e in [lo, hi]: 'why'``) lines.
* Loops ``for``/``parallel``/``vectorized``/``unrolled``/a thread tag ``(var, min,
  extent) {``; ``if (cond) {`` ... ``} else {`` ... ``}``; ``allocate B: float16[8, 8]
  (local)`` (``(shared, strides [9, 1])``), ``let x = e`` and ``// attr key = value``,
  ``assert(cond, 'message')``, whose body is the rest of the enclosing block; ``B[i, j] =
  e``; ``prefetch B[i]``, ``prefetch (write) B[i]``; ``call_extern f(B, n)`` (a function
  ``tc.extern`` declared in this process); ``tensorize name (accumulate) {`` with its
  ``// out`` and ``// in`` regions (an intrinsic declared in this process); ``{`` ... ``}``;
  ``syncthreads()``.
* Expressions with the printer's precedences (``||``, ``&&``, ``== !=``, ``< <= > >=``,
  ``+ -``, ``* / // %``, unary ``- !``); ``min``, ``max``, ``truncdiv``, ``truncmod``,
  ``select``, the intrinsics (``exp(x)``), casts ``float16(x)``, loads ``B[i]``, ``(let x
  = e in body)``; constants with their dtype's suffix (``1f``, ``0.5h``, ``2bf``,
  ``3i64``, ``2.0``, ``7``, ``True``, ``float32(inf)``).

Nothing is evaluated: the text is read by a hand-written recursive-descent parser whose
nesting is bounded (:data:`MAX_DEPTH`).  Every operand's dtype must agree as the IR
requires (``x + 1`` where ``x`` is float32 is an error: write ``x + 1f``).  A mistake
raises :class:`~tecomp.errors.IRParseError` naming the line and column, what was found
and what was expected.
"""
from __future__ import annotations

import ast
import math
import re
import unicodedata
from typing import Dict, List, Optional

from ..errors import IRParseError
from . import dtype as _dt
from .deep import SUPPORTED_DEPTH, deep_entry
from .expr import (
    EQ, GE, GT, INTRINSICS, LE, LT, NE, SPECIAL_CALLS, Add, And, Buffer, BufferLoad, Call,
    Cast, Const, Div, Expr, FloorDiv, FloorMod, Let, Max, Min, Mul, Not, Or, Select, Sub, TruncDiv,
    TruncMod, Var, same_as,
)
from .extern_sites import sites
from .functor import Mutator, free_vars
from .names import display_name
from .stmt import (
    THREAD_TAGS, Allocate, AssertStmt, AttrStmt, BufferStore, Evaluate, ExternCall, For,
    IfThenElse, LetStmt, ParamCheck, Prefetch, PrimFunc, Stmt, TensorIntrinCall, seq,
    tensor_intrins,
)

__all__ = ["parse", "structural_equal", "MAX_DEPTH"]

#: how deeply blocks and parenthesised expressions may nest in the text (the printer's
#: limit for expressions, :data:`tecomp.ir.deep.SUPPORTED_DEPTH`)
MAX_DEPTH = SUPPORTED_DEPTH

_LOOP_HEADS = {"for": "serial", "parallel": "parallel", "vectorized": "vectorized",
               "unrolled": "unrolled"}
_BINARY = {
    "||": (1, Or), "&&": (2, And), "==": (3, EQ), "!=": (3, NE), "<": (4, LT), "<=": (4, LE),
    ">": (4, GT), ">=": (4, GE), "+": (5, Add), "-": (5, Sub), "*": (6, Mul), "/": (6, Div),
    "//": (6, FloorDiv), "%": (6, FloorMod),
}
_FUNCS = {"min": Min, "max": Max, "truncdiv": TruncDiv, "truncmod": TruncMod}
_SUFFIX = {"f": "float32", "h": "float16", "bf": "bfloat16", "i64": "int64", "i16": "int16",
           "i8": "int8", "u8": "uint8"}
_SCOPES = ("global", "local", "shared")
#: attributes the codegen phase adds; build makes them again from the function
_CODEGEN_KEYS = ("vector_plan", "parallel_plan", "device_kernel")

_NUMBER = re.compile(r"[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?(bf|i64|i16|i8|u8|f|h)?")
_ESCAPE = re.compile(r"<U\+([0-9A-F]{4,6})>")
_OPS = ("//", "==", "!=", "<=", ">=", "&&", "||", "+", "-", "*", "/", "%", "<", ">", "!",
        "(", ")", "[", "]", "{", "}", ",", ":", "=")


class _Tok:
    __slots__ = ("kind", "text", "value", "col")

    def __init__(self, kind, text, value, col):
        self.kind, self.text, self.value, self.col = kind, text, value, col

    def __repr__(self):
        return self.text


def _name_char(ch: str, first: bool) -> bool:
    if ch.isascii():
        return ch.isalpha() or ch == "_" or (not first and (ch.isdigit() or ch == "."))
    return unicodedata.category(ch)[0] in ("L", "N", "M")


def _describe(tok: _Tok) -> str:
    if tok.kind == "end":
        return "the end of the line"
    text = tok.text if len(tok.text) <= 40 else tok.text[:40] + "..."
    return repr(text)


class _Line:
    """The tokens of one line of the text."""

    def __init__(self, parser: "_Parser", lineno: int, text: str):
        self.p, self.lineno, self.text = parser, lineno, text
        self.extern = None   # a call_extern's function name as printed, and its column
        m = re.match(r"(\s*call_extern )(.*)\(", text)
        start = 0
        if m is not None and text.rstrip().endswith(")"):
            # the function's name is display text (a Python qualname such as
            # `mod.f.<locals>.g`), not a token: it runs up to the `(` of the arguments
            start = self._args_start(text)
            if start > m.end(1):
                self.extern = (text[m.end(1):start], m.end(1) + 1)
        self.toks = self._lex(text, start)
        self.i = 0

    @staticmethod
    def _args_start(text: str) -> int:
        """Where the parenthesised arguments that end ``text`` begin."""
        depth = 0
        for k in range(len(text.rstrip()) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(text[k], 0)
            if depth == 0:
                return k
        return 0

    def error(self, col: int, msg: str) -> IRParseError:
        return self.p.error(self.lineno, col, msg)

    def _lex(self, s: str, i: int = 0) -> List[_Tok]:
        toks, n = [], len(s)
        while i < n:
            ch = s[i]
            if ch in " \t\r":
                i += 1
                continue
            start = i
            if _name_char(ch, True) or s.startswith("<U+", i):
                parts = []
                while i < n:
                    m = _ESCAPE.match(s, i) if s[i] == "<" else None
                    if m is not None:
                        code = int(m.group(1), 16)
                        if code > 0x10FFFF:
                            raise self.error(i + 1, f"{m.group(0)} is not a character")
                        parts.append(chr(code))
                        i = m.end()
                    elif _name_char(s[i], not parts):
                        parts.append(s[i])
                        i += 1
                    else:
                        break
                if not parts:
                    raise self.error(i + 1, f"unexpected {s[i:i + 8]!r}: a `<U+XXXX>` "
                                            f"escape needs 4 to 6 upper-case hex digits")
                toks.append(_Tok("name", s[start:i], "".join(parts), start + 1))
            elif ch.isdigit():
                m = _NUMBER.match(s, i)
                i = m.end()
                if i < n and (_name_char(s[i], False) and s[i] != "."):
                    raise self.error(start + 1, f"unexpected {s[start:i + 1]!r}: a number "
                                                f"takes one of the suffixes f, h, bf, i64, "
                                                f"i16, i8, u8 (or none: int32, float64)")
                toks.append(_Tok("num", s[start:i], None, start + 1))
            elif ch in "'\"":
                j = i + 1
                while j < n and s[j] != ch:
                    j += 2 if s[j] == "\\" else 1
                if j >= n:
                    raise self.error(start + 1, "a string is not closed on this line")
                i = j + 1
                try:   # a lone string literal: literal_eval evaluates nothing else
                    value = ast.literal_eval(s[start:i])
                except (ValueError, SyntaxError) as e:
                    raise self.error(start + 1, f"the string {s[start:i][:40]!r} is not a "
                                                f"valid literal ({e})") from None
                toks.append(_Tok("str", s[start:i], value, start + 1))
            else:
                op = next((o for o in _OPS if s.startswith(o, i)), None)
                if op is None:
                    raise self.error(start + 1, f"unexpected character {ch!r}")
                i += len(op)
                toks.append(_Tok("op", op, op, start + 1))
        toks.append(_Tok("end", "", None, len(s) + 1))
        return toks

    # -- the cursor ------------------------------------------------------------------
    @property
    def tok(self) -> _Tok:
        return self.toks[self.i]

    def peek(self, k: int = 1) -> _Tok:
        return self.toks[min(self.i + k, len(self.toks) - 1)]

    def next(self) -> _Tok:
        t = self.toks[self.i]
        if t.kind != "end":
            self.i += 1
        return t

    def at(self, text: str) -> bool:
        t = self.tok
        return t.kind in ("op", "name") and t.text == text

    def accept(self, text: str) -> bool:
        if self.at(text):
            self.i += 1
            return True
        return False

    def expect(self, text: str, what: str = "") -> _Tok:
        if not self.at(text):
            raise self.unexpected(f"`{text}`" + (f" {what}" if what else ""))
        return self.next()

    def unexpected(self, expected: str) -> IRParseError:
        t = self.tok
        return self.error(t.col, f"expected {expected}, found {_describe(t)}")

    def name(self, what: str) -> _Tok:
        if self.tok.kind != "name":
            raise self.unexpected(what)
        return self.next()

    def done(self) -> None:
        if self.tok.kind != "end":
            raise self.unexpected("the end of the line")


class _Parser:
    def __init__(self, text: str):
        self.lines = text.split("\n")
        self.k = 0                    # the next line
        self.depth = 0
        self.scope: Dict[str, object] = {}   # printed name -> Var or Buffer
        self.made: Dict[str, Buffer] = {}    # the buffers allocated, by name
        self.vars: Dict[str, Var] = {}       # the variables of loops and lets, by name
        self.first_pass = True
        self.unresolved = False   # an attribute named a variable bound after its block
        self.closing: Optional[_Line] = None  # the line that closed the last block

    def error(self, lineno: int, col: int, msg: str) -> IRParseError:
        line = self.lines[lineno - 1] if 0 < lineno <= len(self.lines) else ""
        shown = line if len(line) <= 120 else line[:117] + "..."
        return IRParseError(f"line {lineno}:{col}: {msg}\n  {shown}")

    def nest(self, ln: _Line) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise ln.error(ln.tok.col, f"the text nests deeper than {MAX_DEPTH} levels "
                                       f"(blocks and parentheses); tecomp.ir.parse reads "
                                       f"at most that")

    # -- lines -----------------------------------------------------------------------
    def next_line(self) -> Optional[_Line]:
        """The next line that is not blank or a plain comment, or None at the end."""
        while self.k < len(self.lines):
            self.k += 1
            text = self.lines[self.k - 1]
            stripped = text.strip()
            if not stripped:
                continue
            if stripped.startswith("//") and not re.match(
                    r"//\s*(attr|param_check|var)\b", stripped):
                continue
            return _Line(self, self.k, text)
        return None

    def peek_line(self) -> Optional[_Line]:
        k = self.k
        ln = self.next_line()
        self.k = k
        return ln

    # -- the function ----------------------------------------------------------------
    def func(self) -> PrimFunc:
        ln = self.next_line()
        if ln is None:
            raise IRParseError("the text is empty: expected a function, `primfn name(...) {`")
        ln.expect("primfn", "(a function begins `primfn name(params) {`)")
        name = ln.name("the function's name").value
        ln.expect("(")
        raw = []   # (name token, dtype, shape tokens start or None)
        while not ln.at(")"):
            if raw:
                ln.expect(",", "or `)` between parameters")
            pname = ln.name("a parameter name")
            ln.expect(":")
            dtype = self.dtype(ln)
            shape = None
            if ln.at("["):
                shape = ln.i
                depth = 0
                while True:   # skip to the matching `]`; read once the dtypes are known
                    t = ln.next()
                    if t.kind == "end":
                        raise ln.error(t.col, "the shape's `[` is not closed")
                    depth += t.text == "[" and t.kind == "op"
                    depth -= t.text == "]" and t.kind == "op"
                    if depth == 0:
                        break
            raw.append((pname, dtype, shape))
        ln.expect(")")
        ln.expect("{")
        ln.done()
        # the header's `// var` and `// param_check` lines
        declared = {p.value: dt for p, dt, shape in raw if shape is None}
        checks = []
        while True:
            nxt = self.peek_line()
            if nxt is None or not nxt.at("//"):
                break
            if nxt.peek().text == "var":
                self.next_line()
                nxt.next(), nxt.next()
                v = nxt.name("a variable name")
                nxt.expect(":")
                declared[v.value] = self.dtype(nxt)
                nxt.done()
            elif nxt.peek().text == "param_check":
                self.next_line()
                checks.append(nxt)
            else:
                break
        params, seen = [], set()
        for pname, dtype, shape in raw:
            if pname.value in seen:
                raise ln.error(pname.col, f"the parameter {pname.value!r} is declared twice")
            seen.add(pname.value)
            if shape is None:
                # (a shape before it may have used it: that Var, made with this dtype)
                v = self.scope.get(pname.value)
                if v is None:
                    v = self.bind(pname.value, Var(pname.value, dtype))
                params.append(v)
                continue
            if pname.value in self.scope:
                raise ln.error(pname.col, f"{pname.value!r} names a buffer parameter and a "
                                          f"variable of a shape before it")
            save = ln.i
            ln.i = shape + 1
            dims = self.items(ln, "]", "extents", lambda: self.expr(ln, free=declared))
            ln.i = save
            self.index_dtypes(ln, dims, "an extent of " + pname.value)
            params.append(self.bind(pname.value, Buffer(pname.value, tuple(dims), dtype)))
        pcs = tuple(self.param_check(c) for c in checks)
        body = self.block(ln)
        if self.peek_line() is not None:
            extra = self.next_line()
            raise extra.error(extra.tok.col, f"text after the end of function {name}: "
                                             f"expected nothing, found "
                                             f"{_describe(extra.tok)}")
        # (from_text: tc.build checks its accesses by default, as the user wrote them)
        attrs = {"param_checks": pcs, "from_text": True} if pcs else {"from_text": True}
        return PrimFunc(name, tuple(params), body, attrs)

    def param_check(self, ln: _Line) -> ParamCheck:
        ln.next(), ln.next()   # // param_check
        e = self.expr(ln, 5)
        self.index_dtypes(ln, [e], "a param_check")
        if ln.accept(">="):
            lower, upper = self.integer(ln), None
        elif ln.accept("in"):
            ln.expect("[")
            lower = self.integer(ln)
            ln.expect(",")
            upper = self.integer(ln)
            ln.expect("]")
        else:
            raise ln.unexpected("`>= lower` or `in [lower, upper]`")
        ln.expect(":", "and the uses, 'the extent of ...'")
        uses = []
        while True:
            t = ln.next()
            if t.kind != "str":
                raise ln.error(t.col, f"expected a quoted use, found {_describe(t)}")
            uses.append(t.value)
            if not ln.accept(","):
                break
        ln.done()
        return ParamCheck(e, lower, tuple(uses), upper)

    def items(self, ln: _Line, close: str, between: str, item) -> list:
        """``item()`` separated by commas, up to ``close`` (consumed)."""
        out = []
        while not ln.at(close):
            if out:
                ln.expect(",", f"or `{close}` between {between}")
            out.append(item())
        ln.next()
        return out

    def integer(self, ln: _Line) -> int:
        neg = ln.accept("-")
        t = ln.next()
        if t.kind != "num" or not t.text.isdigit():
            raise ln.error(t.col, f"expected an integer, found {_describe(t)}")
        return -int(t.text) if neg else int(t.text)

    def dtype(self, ln: _Line) -> str:
        t = ln.tok
        if t.kind != "name" or t.value not in _dt.ALL_DTYPES:
            raise ln.unexpected(f"a dtype ({', '.join(_dt.ALL_DTYPES)})")
        ln.next()
        return t.value

    def binding(self, ln: _Line, tok: _Tok, dtype: str) -> Var:
        """The Var that a loop or let named ``tok`` binds.  One name is one variable in
        the whole function, as the printer writes it (it names two variables apart): a
        name bound again in another block (loop partitioning copies a loop with its
        variable) is the same Var."""
        if tok.value in self.scope:
            raise ln.error(tok.col, f"{tok.value} is already bound here (a parameter, an "
                                    f"enclosing loop or a let): give this variable another "
                                    f"name")
        v = self.vars.get(tok.value)
        if v is None:
            v = self.vars[tok.value] = Var(tok.value, dtype)
        elif v.dtype != dtype:
            raise ln.error(tok.col, f"{tok.value} is {v.dtype} where it is bound elsewhere "
                                    f"and {dtype} here: one name is one variable; rename one")
        return v

    def bind(self, name: str, obj):
        self.scope[name] = obj
        return obj

    # -- statements ------------------------------------------------------------------
    def block(self, opener: _Line):
        """The statements up to the `}` that closes the block ``opener`` opened; ends on
        that line (``} else {`` is left to the caller)."""
        self.nest(opener)
        items = []       # statements, and (maker, None) for those whose body is the rest
        saved = []       # (name, previous binding) to restore at the end of the block
        while True:
            ln = self.next_line()
            if ln is None:
                raise self.error(opener.lineno, opener.toks[-2].col if len(opener.toks) > 1
                                 else 1, "this `{` is not closed: expected `}` before the "
                                         "end of the text")
            if ln.at("}"):
                self.closing = ln
                break
            items.append(self.stmt(ln, saved))
        for name, old in reversed(saved):
            if old is None:
                self.scope.pop(name, None)
            else:
                self.scope[name] = old
        self.depth -= 1
        body = []
        for it in reversed(items):   # a let, allocate, attr or assert holds the rest
            if callable(it):
                body = [it(seq(*body))]
            else:
                body.insert(0, it)
        return seq(*body)

    def close(self) -> _Line:
        """The line that closed the last block, past its `}`."""
        ln = self.closing
        ln.expect("}")
        return ln

    def declare(self, tok: _Tok, obj, saved) -> None:
        saved.append((tok.value, self.scope.get(tok.value)))
        self.scope[tok.value] = obj

    def stmt(self, ln: _Line, saved):
        t, t1 = ln.tok, ln.peek()
        word = t.value if t.kind == "name" else None
        if t.kind == "op" and t.text == "//":
            return self.attr(ln)
        if t.kind == "op" and t.text == "{" and t1.kind == "end":
            # a block of its own: a let, allocate, attr or assert whose body ends here
            body = self.block(ln)
            self.close().done()
            return body
        if word is not None and t1.text == "(" and (word in _LOOP_HEADS or word in THREAD_TAGS):
            return self.loop(ln, saved)
        if word == "if" and t1.text == "(":
            return self.if_(ln)
        if word == "allocate" and t1.kind == "name":
            return self.allocate(ln, saved)
        if word == "let" and t1.kind == "name":
            ln.next()
            v = ln.next()
            ln.expect("=")
            value = self.expr(ln)
            ln.done()
            var = self.binding(ln, v, value.dtype)
            self.declare(v, var, saved)
            return lambda body: LetStmt(var, value, body)
        if word == "assert" and t1.text == "(":
            ln.next(), ln.next()
            cond = self.cond(ln, "an assert's condition")
            ln.expect(",")
            msg = ln.next()
            if msg.kind != "str":
                raise ln.error(msg.col, f"expected the assert's message, a quoted string, "
                                        f"found {_describe(msg)}")
            ln.expect(")")
            ln.done()
            return lambda body: AssertStmt(cond, msg.value, body)
        if word == "prefetch" and (t1.kind == "name" or t1.text == "("):
            ln.next()
            write, level = False, 1
            if ln.accept("("):
                while True:
                    hint = ln.next()
                    if hint.text == "write" and not write:
                        write = True
                    elif hint.text in ("L2", "L3") and level == 1:
                        level = int(hint.text[1])
                    else:
                        raise ln.error(hint.col, f"expected write, L2 or L3 (a prefetch's "
                                                 f"hints), found {_describe(hint)}")
                    if not ln.accept(","):
                        break
                ln.expect(")")
            b, idx = self.access(ln)
            ln.done()
            return Prefetch(b, idx, write, level)
        if ln.extern is not None:
            return self.extern(ln)
        if word == "tensorize" and t1.kind == "name":
            return self.tensorize(ln)
        if t.kind == "name" and t1.text == "[":
            b, idx = self.access(ln)
            ln.expect("=", "(a store is `B[i] = value`)")
            value = self.expr(ln)
            ln.done()
            if value.dtype != b.dtype:
                raise ln.error(t.col, f"the value stored into {b.name} is {value.dtype}, the "
                                      f"buffer {b.dtype}: convert it, {b.dtype}(...)")
            return BufferStore(b, value, idx)
        if word is not None and t1.text == "(" and word not in SPECIAL_CALLS:
            raise ln.error(t.col, f"unknown statement {word!r}: a line is a loop (for, "
                                  f"parallel, vectorized, unrolled or a thread tag: "
                                  f"{', '.join(THREAD_TAGS)}), if, allocate, let, assert, "
                                  f"prefetch, call_extern, a store B[...] = value, "
                                  f"// attr, or {', '.join(c + '()' for c in SPECIAL_CALLS)}")
        if t.kind != "name" or word not in SPECIAL_CALLS:
            raise ln.unexpected("a statement (a loop, if, allocate, let, assert, prefetch, "
                                "call_extern, a store B[...] = value or // attr)")
        value = self.expr(ln)
        ln.done()
        return Evaluate(value)

    def loop(self, ln: _Line, saved):
        head = ln.next()
        ln.expect("(")
        v = ln.name("the loop variable")
        ln.expect(",")
        lo = self.expr(ln)
        ln.expect(",")
        ext = self.expr(ln)
        ln.expect(")")
        ln.expect("{")
        ln.done()
        self.index_dtypes(ln, [lo, ext], "the bounds of loop " + v.value)
        if lo.dtype != ext.dtype:
            raise ln.error(v.col, f"loop {v.value}'s min is {lo.dtype} and its extent "
                                  f"{ext.dtype}: write both in one dtype")
        var = self.binding(ln, v, lo.dtype)
        old = self.scope.get(v.value)
        self.scope[v.value] = var
        body = self.block(ln)
        self.close().done()
        if old is None:
            self.scope.pop(v.value, None)
        else:
            self.scope[v.value] = old
        kind = _LOOP_HEADS.get(head.value, "thread")
        return For(var, lo, ext, kind, body, head.value if kind == "thread" else "")

    def if_(self, ln: _Line):
        ln.next(), ln.next()
        cond = self.cond(ln, "the if's condition")
        ln.expect(")")
        ln.expect("{")
        ln.done()
        then = self.block(ln)
        end = self.close()
        other = None
        if end.accept("else"):
            end.expect("{")
            end.done()
            other = self.block(end)
            self.close().done()
        else:
            end.done()
        return IfThenElse(cond, then, other)

    def allocate(self, ln: _Line, saved):
        ln.next()
        tok, b = self.buffer_decl(ln)
        ln.expect("(")
        scope = ln.name("the scope (global, local or shared)")
        if scope.value not in _SCOPES and not scope.value.startswith(("wmma.", "mma.")):
            raise ln.error(scope.col, f"unknown scope {scope.value!r}: use one of "
                                      f"{', '.join(_SCOPES)}")
        strides = None
        if ln.accept(","):
            ln.expect("strides")
            ln.expect("[")
            strides = self.items(ln, "]", "strides", lambda: self.expr(ln))
            if len(strides) != len(b.shape):
                raise ln.error(tok.col, f"{tok.value} has {len(b.shape)} dimension(s) and "
                                        f"{len(strides)} stride(s)")
            self.index_dtypes(ln, strides, "a stride of " + tok.value)
            strides = tuple(strides)
        ln.expect(")")
        ln.done()
        buf = Buffer(tok.value, b.shape, b.dtype, strides, scope.value)
        if tok.value in self.scope:
            raise ln.error(tok.col, f"{tok.value} is already a name here (a parameter, an "
                                    f"enclosing allocation or a variable): give the buffer "
                                    f"another name")
        same = self.made.get(tok.value)
        if same is not None:
            # one name is one buffer (the printer names two buffers apart): allocated
            # again in another block, as loop partitioning copies a body
            if not same_as(same, buf, map_vars=True):
                raise ln.error(tok.col, f"the buffer {tok.value} is allocated elsewhere as "
                                        f"{same.dtype}[{', '.join(map(str, same.shape))}] "
                                        f"({same.scope}): one name is one buffer; rename one")
            buf = same
        self.declare(tok, buf, saved)
        self.made[tok.value] = buf
        return lambda body: Allocate(buf, body)

    def buffer_decl(self, ln: _Line):
        """``name: dtype[extents]``: the name token and a Buffer of that shape."""
        tok = ln.name("a buffer name")
        ln.expect(":")
        dtype = self.dtype(ln)
        ln.expect("[")
        dims = self.items(ln, "]", "extents", lambda: self.expr(ln))
        self.index_dtypes(ln, dims, "an extent of " + tok.value)
        return tok, Buffer(tok.value, tuple(dims), dtype)

    def attr(self, ln: _Line):
        ln.next()
        ln.expect("attr")
        key = ln.name("the attribute's key")
        if key.value in _CODEGEN_KEYS:
            raise ln.error(key.col, f"the attribute {key.value} is a decision of the codegen "
                                    f"phase, which tc.build makes again: parse the IR of "
                                    f"tc.lower(s, args) (phase='lower')")
        ln.expect("=")
        value = self.attr_value(ln)
        ln.done()
        return lambda body: AttrStmt(key.value, self.resolved(value), body)

    def attr_value(self, ln: _Line):
        t = ln.tok
        if t.kind == "name" and t.value in ("None", "True", "False") and \
                ln.peek().text in (",", ")", ""):
            ln.next()
            return {"None": None, "True": True, "False": False}[t.value]
        if t.kind == "str":
            return ln.next().value
        if t.kind == "op" and t.text == "(":
            self.nest(ln)
            ln.next()
            out = self.items(ln, ")", "the values of a tuple", lambda: self.attr_value(ln))
            self.depth -= 1
            return tuple(out)
        if t.kind == "name" and ln.peek().text == ":":
            # a buffer, declared here or by an allocate below (a double buffer's)
            tok, b = self.buffer_decl(ln)
            found = self.scope.get(tok.value)
            if isinstance(found, Buffer):
                return found
            return _BufferRef(tok.value, ln, tok.col)
        if t.kind == "name" and t.value not in self.scope and \
                ln.peek().text in (",", ")", ""):
            # a variable bound below (an async copy names the loop after it)
            ln.next()
            return _VarRef(t.value, ln, t.col)
        neg = t.kind == "op" and t.text == "-" and ln.peek().kind == "num"
        num = ln.peek() if neg else t
        if num.kind == "num" and re.fullmatch(r"[0-9.eE+-]+", num.text) and \
                ln.peek(2 if neg else 1).text in (",", ")", ""):
            ln.next()
            if neg:
                ln.next()
            v = float(num.text) if re.search(r"[.eE]", num.text) else int(num.text)
            return -v if neg else v
        return self.expr(ln)

    def resolved(self, value):
        """An attribute's value once its body is read: a buffer it names that the body
        allocates (a double buffer's attribute comes before the allocate) is that
        Buffer."""
        if type(value) is _BufferRef:
            found = self.made.get(value.name)
            if found is None:
                raise value.line.error(value.col, f"the attribute names the buffer "
                                                  f"{value.name!r}, which is neither a "
                                                  f"parameter nor allocated in its body")
            return found
        if isinstance(value, _VarRef):
            found = self.vars.get(value.name)
            if found is None and self.first_pass:
                self.unresolved = True   # bound further down: read again, knowing it
                return None
            if found is None:
                raise value.line.error(value.col, f"unknown name {value.name!r}: the "
                                                  f"attribute's variable is bound nowhere")
            return found
        if isinstance(value, tuple):
            return tuple(self.resolved(v) for v in value)
        return value

    def extern(self, ln: _Line):
        """``call_extern f(A, n)``: the function is the one of this process's extern
        sites (``tc.extern``) printed with that name, taking those kinds of arguments."""
        shown, col = ln.extern
        ln.expect("(")
        bufs, scalars, order = [], [], ""
        while not ln.at(")"):
            if order:
                ln.expect(",", "or `)` between arguments")
            t = ln.tok
            obj = self.scope.get(t.value) if t.kind == "name" else None
            if isinstance(obj, Buffer) and ln.peek().text in (",", ")"):
                ln.next()
                bufs.append(obj)
                order += "b"
            else:
                scalars.append(self.expr(ln))
                order += "s"
        ln.expect(")")
        ln.done()
        found = [k for k, site in sites() if display_name(site.name) == shown
                 and site.order == order and all((b.dtype, len(b.shape)) == (d, nd)
                                                 for b, (d, nd, _) in zip(bufs, site.buffers))]
        if not found:
            raise ln.error(col, f"no extern function {shown!r} taking "
                                     f"({', '.join('buffer' if c == 'b' else 'scalar' for c in order)}) "
                                     f"was declared in this process: a call_extern is read back "
                                     f"only where tc.extern declared it (lower the schedule with "
                                     f"the extern stage first)")
        fns = {id(s.fn) for k, s in sites() if k in found}
        if len(fns) > 1:
            raise ln.error(col, f"several extern functions are named {shown!r} in "
                                     f"this process: the text cannot say which one it calls; "
                                     f"give them different names")
        return ExternCall(found[-1], sites()[found[-1]][1].name, tuple(bufs), tuple(scalars),
                          order)

    def tensorize(self, ln: _Line):
        """``tensorize name (accumulate) {`` (``(store, stage C)`` where the stage is not
        named after its output), its operands' ``// out`` and ``// in`` lines, the loop
        nest it replaces, ``}``."""
        ln.next()
        name = ln.name("the intrinsic's name")
        ln.expect("(")
        how = ln.name("`accumulate` or `store`")
        if how.value not in ("accumulate", "store"):
            raise ln.error(how.col, f"expected `accumulate` or `store`, found {how.value!r}")
        stage = None   # (named after its output, unless the text says)
        if ln.accept(","):
            ln.expect("stage")
            stage = ln.name("the stage's name").value
        ln.expect(")")
        ln.expect("{")
        ln.done()
        operands = []
        while self.k < len(self.lines) and re.match(r"\s*//\s*(out|in)\b", self.lines[self.k]):
            self.k += 1
            op = _Line(self, self.k, self.lines[self.k - 1])
            op.next()
            role = op.next()
            ph = op.name("the intrinsic's operand")
            op.expect(":")
            operands.append((op, role.text, ph))
        roles = ["out"] + ["in"] * (len(operands) - 1)
        for (op, role, ph), want in zip(operands, roles):
            if role != want:
                raise op.error(1, f"expected `// {want}`: a tensorize block lists its output, "
                                  f"then its inputs")
        names = [ph.value for _, _, ph in operands]
        intrin = next((x for x in reversed(tensor_intrins(name.value))
                       if [x.output.name] + [p.name for p in x.inputs] == names), None)
        if intrin is None:
            raise ln.error(name.col, f"no tensor intrinsic {name.value!r} with the operands "
                                     f"{', '.join(names) or '(none)'} was declared in this "
                                     f"process: a tensorize block is read back only where "
                                     f"tc.decl_tensor_intrin declared its intrinsic")
        buffers, bases, coefs, flat = [], [], [], []
        for (op, _, ph), place in zip(operands, [intrin.output] + list(intrin.inputs)):
            b, base, rows, is_flat = self.region(op, len(place.shape))
            buffers.append(b)
            bases += base
            coefs.append(rows)
            flat.append(is_flat)
        fallback = self.block(ln)
        self.close().done()
        return TensorIntrinCall(intrin, buffers[0].name if stage is None else stage,
                                tuple(buffers), tuple(bases), tuple(coefs),
                                how.value == "accumulate", fallback,
                                tuple(flat) if any(flat) else ())

    def region(self, ln: _Line, rank: int):
        """An operand's region, ``B[i + x0, j + 16*x1]`` or ``B[i, j] + (9*x0 + x1 in
        memory)``: (buffer, base indices, coefficient rows, flat)."""
        xs = [Var(f"x{d}") for d in range(rank)]
        saved = [(x.name, self.scope.get(x.name)) for x in xs]
        for x in xs:
            self.scope[x.name] = x
        t = ln.tok
        b, idx = self.access(ln)
        steps = None
        if ln.accept("+"):
            ln.expect("(")
            steps = self.expr(ln, 5)
            ln.expect("in")
            ln.expect("memory")
            ln.expect(")")
        ln.done()
        for n, old in saved:
            if old is None:
                self.scope.pop(n, None)
            else:
                self.scope[n] = old
        base, per_index = [], []
        for e in idx:
            e, terms = _terms(e, xs)
            if _uses(e, xs):
                raise ln.error(t.col, f"an index of {b.name} is not its first element plus "
                                      f"steps c*x0 + c*x1 ... (at the end, one per x)")
            base.append(e)
            per_index.append(terms)
        if steps is None:
            rows = tuple(tuple(per_index[e].get(d, 0) for e in range(len(idx)))
                         for d in range(rank))
            return b, base, rows, False
        rest, terms = _terms(steps, xs)
        if any(per_index) or not (isinstance(rest, Const) and rest.value == 0):
            raise ln.error(t.col, "the steps in memory are c*x0 + c*x1 ... alone")
        ones = [d for d, st in enumerate(b.effective_strides())
                if isinstance(st, Const) and st.value == 1]
        if not ones:
            raise ln.error(t.col, f"{b.name} has no dimension of stride 1 to step in memory")
        d1 = ones[-1]
        rows = tuple(tuple(terms.get(d, 0) if e == d1 else 0 for e in range(len(idx)))
                     for d in range(rank))
        return b, base, rows, True

    # -- expressions -----------------------------------------------------------------
    def cond(self, ln: _Line, what: str):
        t = ln.tok
        e = self.expr(ln)
        if e.dtype != "bool":
            raise ln.error(t.col, f"{what} is {e.dtype}, not bool: compare it "
                                  f"(`{t.text} != 0`)")
        return e

    def index_dtypes(self, ln: _Line, es, what: str) -> None:
        for e in es:
            if not _dt.is_int(e.dtype):
                raise ln.error(ln.tok.col, f"{what} is {e.dtype}: indices, extents and "
                                           f"strides are integers")

    def expr(self, ln: _Line, min_prec: int = 1, free=None):
        lhs = self.unary(ln, free)
        while True:
            t = ln.tok
            op = _BINARY.get(t.text) if t.kind == "op" else None
            if op is None or op[0] < min_prec:
                return lhs
            ln.next()
            rhs = self.expr(ln, op[0] + 1, free)
            lhs = self.binary(ln, t, op[1], lhs, rhs)

    def binary(self, ln: _Line, t: _Tok, cls, a, b):
        if a.dtype != b.dtype:
            hint = ""
            for x in (a, b):
                if isinstance(x, Const) and not _dt.is_bool(x.dtype):
                    other = b.dtype if x is a else a.dtype
                    hint = f" (a {other} constant is written with its suffix: " \
                           f"{_example(other)})"
            raise ln.error(t.col, f"the operands of `{t.text}` are {a.dtype} and {b.dtype}; "
                                  f"the IR does not convert implicitly: write a cast, "
                                  f"{a.dtype}(...){hint}")
        if cls in (And, Or):
            if a.dtype != "bool":
                raise ln.error(t.col, f"`{t.text}` takes bool operands, not {a.dtype}")
            return cls(a, b)
        if cls in (EQ, NE, LT, LE, GT, GE):
            return cls(a, b)
        if _dt.is_bool(a.dtype):
            raise ln.error(t.col, f"`{t.text}` on bool operands: convert them, int32(...)")
        if cls is Div and not _dt.is_float(a.dtype):
            raise ln.error(t.col, f"`/` is true division, for floats; {a.dtype} operands use "
                                  f"`//` (floor) or truncdiv(a, b)")
        if cls in (FloorDiv, FloorMod) and not _dt.is_int(a.dtype):
            raise ln.error(t.col, f"`{t.text}` is integer floor division; {a.dtype} operands "
                                  f"use `/`")
        return cls(a, b, a.dtype)

    def unary(self, ln: _Line, free):
        t = ln.tok
        if t.kind == "op" and t.text == "-":
            ln.next()
            if ln.tok.kind == "num":
                c = self.number(ln, ln.next())
                return Const(-c.value, c.dtype)
            self.nest(ln)
            b = self.unary(ln, free)
            self.depth -= 1
            if _dt.is_bool(b.dtype):
                raise ln.error(t.col, "unary `-` of a bool")
            return Sub(Const(-0.0 if _dt.is_float(b.dtype) else 0, b.dtype), b, b.dtype)
        if t.kind == "op" and t.text == "!":
            ln.next()
            self.nest(ln)
            a = self.unary(ln, free)
            self.depth -= 1
            if a.dtype != "bool":
                raise ln.error(t.col, f"`!` takes a bool, not {a.dtype}")
            return Not(a)
        return self.primary(ln, free)

    def number(self, ln: _Line, t: _Tok) -> Const:
        m = _NUMBER.fullmatch(t.text)
        frac, exp, suffix = m.group(1), m.group(2), m.group(3)
        digits = t.text[:m.start(3)] if suffix else t.text
        if suffix:
            dtype = _SUFFIX[suffix]
        else:
            dtype = "float64" if (frac or exp) else "int32"
        if _dt.is_float(dtype):
            return Const(float(digits), dtype)
        if frac or exp:
            raise ln.error(t.col, f"{t.text} has a fraction or exponent but an integer suffix")
        v = int(digits)
        lo, hi = _dt.int_limits(dtype)
        if not lo <= v <= hi + 1:   # (+1: the magnitude of the smallest value)
            raise ln.error(t.col, f"{t.text} is out of range for {dtype}")
        return Const(v, dtype)

    def primary(self, ln: _Line, free):
        t = ln.next()
        if t.kind == "num":
            c = self.number(ln, t)
            lo, hi = _dt.int_limits(c.dtype) if _dt.is_int(c.dtype) else (None, None)
            if hi is not None and c.value > hi:
                raise ln.error(t.col, f"{t.text} is out of range for {c.dtype}")
            return c
        if t.kind == "op" and t.text == "(":
            self.nest(ln)
            if ln.at("let") and ln.peek().kind == "name" and ln.peek(2).text == "=":
                ln.next()
                v = ln.next()
                ln.expect("=")
                value = self.expr(ln, 1, free)
                ln.expect("in")
                var = self.binding(ln, v, value.dtype)
                old = self.scope.get(v.value)
                self.scope[v.value] = var
                body = self.expr(ln, 1, free)
                if old is None:
                    self.scope.pop(v.value, None)
                else:
                    self.scope[v.value] = old
                e = Let(var, value, body, body.dtype)
            else:
                e = self.expr(ln, 1, free)
            ln.expect(")", "to close the `(`")
            self.depth -= 1
            return e
        if t.kind != "name":
            raise self.error(ln.lineno, t.col, f"expected an expression, found {_describe(t)}")
        word = t.value
        if word in ("True", "False"):
            return Const(word == "True", "bool")
        if ln.at("(") and (word in _FUNCS or word in INTRINSICS or word in SPECIAL_CALLS
                           or word == "select" or word in _dt.ALL_DTYPES):
            return self.call(ln, t, free)
        if ln.at("["):
            ln.i -= 1
            b, idx = self.access(ln, free)
            return BufferLoad(b, idx, b.dtype)
        obj = self.scope.get(word)
        if isinstance(obj, Var):
            return obj
        if obj is None and free is not None:
            # a variable of the signature: made where it is first seen
            return self.bind(word, Var(word, free.get(word, "int32")))
        if isinstance(obj, Buffer):
            raise ln.error(t.col, f"{word} is a buffer: index it, {word}[...]")
        raise ln.error(t.col, f"unknown name {word!r}: a variable must be a parameter, a "
                              f"variable of a parameter's shape, a loop variable or a let")

    def call(self, ln: _Line, t: _Tok, free):
        word = t.value
        ln.expect("(")
        self.nest(ln)
        if word in _dt.ALL_DTYPES and _dt.is_float(word):
            # a non-finite constant: float32(inf), float64(-inf), float16(nan)
            neg = ln.at("-") and ln.peek().text == "inf"
            w = ln.peek(1 if neg else 0)
            if w.kind == "name" and w.text in ("inf", "nan") and \
                    ln.peek(2 if neg else 1).text == ")":
                ln.i += 3 if neg else 2
                self.depth -= 1
                return Const(-math.inf if neg else float(w.text), word)
        args = self.items(ln, ")", "arguments", lambda: self.expr(ln, 1, free))
        self.depth -= 1
        n = len(args)

        def arity(k):
            if n != k:
                raise ln.error(t.col, f"{word} takes {k} argument(s), got {n}")

        if word in _dt.ALL_DTYPES:
            arity(1)
            return Cast(args[0], word)
        if word == "select":
            arity(3)
            c, a, b = args
            if c.dtype != "bool":
                raise ln.error(t.col, f"select's condition is {c.dtype}, not bool")
            if a.dtype != b.dtype:
                raise ln.error(t.col, f"select's values are {a.dtype} and {b.dtype}: write a "
                                      f"cast, {a.dtype}(...)")
            return Select(c, a, b, a.dtype)
        if word in _FUNCS:
            arity(2)
            cls = _FUNCS[word]
            return self.binary(ln, t, cls, *args) if cls in (Min, Max) else \
                self._trunc(ln, t, cls, *args)
        if word in SPECIAL_CALLS:
            arity(SPECIAL_CALLS[word])
            return Call(word, (), "int32")
        arity(INTRINSICS[word])
        for a in args[1:]:
            if a.dtype != args[0].dtype:
                raise ln.error(t.col, f"the arguments of {word} are {args[0].dtype} and "
                                      f"{a.dtype}: write a cast")
        dt = args[0].dtype
        if not _dt.is_float(dt) and not (word == "abs" and _dt.is_int(dt)):
            raise ln.error(t.col, f"{word} needs a float argument, got {dt}")
        return Call(word, tuple(args), dt)

    def _trunc(self, ln, t, cls, a, b):
        if a.dtype != b.dtype or not _dt.is_int(a.dtype):
            raise ln.error(t.col, f"{t.value} takes two integers of one dtype, got {a.dtype} "
                                  f"and {b.dtype}")
        return cls(a, b, a.dtype)

    def access(self, ln: _Line, free=None):
        """``B[i, j]``: the Buffer and its indices."""
        t = ln.name("a buffer name")
        b = self.scope.get(t.value)
        if not isinstance(b, Buffer):
            raise ln.error(t.col, f"unknown buffer {t.value!r}: a buffer must be a parameter "
                                  f"or allocated before it is used" if b is None else
                                  f"{t.value} is a variable, not a buffer")
        ln.expect("[")
        self.nest(ln)
        idx = self.items(ln, "]", "indices", lambda: self.expr(ln, 1, free))
        self.depth -= 1
        if len(idx) != len(b.shape):
            raise ln.error(t.col, f"{t.value} has {len(b.shape)} dimension(s), indexed with "
                                  f"{len(idx)}")
        self.index_dtypes(ln, idx, "an index of " + t.value)
        return b, tuple(idx)


def _terms(e, xs):
    """``e`` as ``base + c*x_d + ...`` with the steps at the end, d rising (how the printer
    writes a tensorize region): (base, {d: c}); the base is 0 when only steps are left."""
    terms = {}
    while True:
        last, rest = (e.b, e.a) if isinstance(e, Add) else (e, None)
        c, x = (1, last) if isinstance(last, Var) else (
            (last.a.value, last.b) if isinstance(last, Mul) and isinstance(last.a, Const)
            and isinstance(last.b, Var) else (None, None))
        d = next((k for k, v in enumerate(xs) if v is x), None)
        if d is None or (terms and d >= min(terms)):
            return e, terms
        terms[d] = int(c)
        if rest is None:
            return Const(0, "int32"), terms
        e = rest


def _uses(e, xs) -> bool:
    return any(v in xs for v in free_vars(e)) if not isinstance(e, Const) else False


def _example(dtype: str) -> str:
    inv = {v: k for k, v in _SUFFIX.items()}
    if dtype == "float64":
        return "1.0"
    return "1" + inv.get(dtype, "")


class _BufferRef:
    """An attribute's buffer not declared yet where the attribute is read."""

    __slots__ = ("name", "line", "col")

    def __init__(self, name, line, col):
        self.name, self.line, self.col = name, line, col


class _VarRef(_BufferRef):
    """An attribute's variable not bound yet where the attribute is read."""

    __slots__ = ()


@deep_entry(lambda text: ("tc.ir.parse", ()))
def parse(text: str) -> PrimFunc:
    """Read the printed loop IR (``str(tc.lower(s, args))``) back into a PrimFunc.

    Parameters
    ----------
    text : str
        The text of one function, as the printer writes it (edited or not).

    Returns
    -------
    PrimFunc
        A function structurally equal to the one printed (:func:`structural_equal`), that
        ``tc.build`` compiles like the one ``tc.lower`` returns.

    Raises
    ------
    IRParseError
        The text is not printed IR: the message names the line and column, what was
        found and what was expected.

    Examples
    --------
    >>> import tecomp as tc
    >>> A = tc.placeholder((8,), name="A")
    >>> B = tc.compute((8,), lambda i: A[i] * 2.0, name="B")
    >>> text = str(tc.lower(tc.create_schedule(B.op), [A, B]))
    >>> f = tc.ir.parse(text.replace("2f", "3f"))
    >>> print(f)
    primfn main(A: float32[8], B: float32[8]) {
      for (i, 0, 8) {
        B[i] = A[i]*3f
      }
    }
    """
    if not isinstance(text, str):
        raise IRParseError(f"tc.ir.parse takes the printed IR as a str, got a "
                           f"{type(text).__name__}")
    p = _Parser(text)
    f = p.func()
    if p.unresolved:   # once more, with the variables of the whole function known
        again = _Parser(text)
        again.vars, again.first_pass = {n: Var(n, v.dtype) for n, v in p.vars.items()}, False
        f = again.func()
    return f


def structural_equal(a, b) -> bool:
    """Whether two functions (or statements, or expressions) are the same IR up to the
    names of their variables and buffers (:func:`~tecomp.ir.expr.same_as` with
    ``map_vars=True``); for functions, their names, parameters, bodies and
    ``param_checks``, the conditions on the arguments."""
    if isinstance(a, PrimFunc) and isinstance(b, PrimFunc):
        def parts(f):
            checks = tuple((pc.expr, pc.lower, pc.upper, pc.uses)
                           for pc in f.attrs.get("param_checks", ()))
            return (f.name, tuple(f.params), _flat(f.body), checks)

        return same_as(parts(a), parts(b), map_vars=True)
    return same_as(_flat(a), _flat(b), map_vars=True)


class _Flatten(Mutator):
    def visit(self, node):
        return node if isinstance(node, Expr) else super().visit(node)

    def visit_SeqStmt(self, s):
        return seq(*[self.visit(x) for x in s.seq])


def _flat(node):
    """``node`` with its statement sequences flattened (``SeqStmt((a, SeqStmt((b,))))``
    is ``SeqStmt((a, b))``, a sequence of one statement that statement): how sequences
    nest means nothing, and the text does not show it."""
    if isinstance(node, Stmt):
        return _Flatten().visit(node)
    return node
