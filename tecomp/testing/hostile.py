"""Hostile names: user strings that try to change the code tecomp generates.

A model definition may come from somebody else, and every name in it (tensors, axes,
stages, the function, pragma values) reaches generated text: the printed IR, LLVM IR,
CUDA C, the CUDA emulation's C++ and their comments.  :mod:`tecomp.ir.names` is the one
place where those strings are made safe; this module checks it.

:func:`check` builds one small program (an elementwise stage, a reduction, a pragma
with a string value) twice -- with plain names and with the hostile ones -- for one
backend, and compares the *structure* of the generated text: the same lines, the same
code once identifiers, comments and string constants are blanked out.  With
``run=True`` it also runs the LLVM or emulated build and compares the results.
:func:`check_value` does the same for a pragma value that is no plain string
(:data:`HOSTILE_VALUES`): shown as its plain value, or refused.

    python -m tecomp.testing.hostile          # every string on every backend, a summary
"""
from __future__ import annotations

import re
import sys
from typing import Dict, List, Tuple

import numpy as np
import tecomp as tc
from ..codegen.cuda import codegen_cuda
from ..schedule.trace import MAX_STRING

#: strings that have broken, or would break, a naive code generator; the first is the
#: one of issue 20 (a placeholder name that ran a shell command at load time)
HOSTILE: List[str] = [
    'A\n#include <cstdlib>\nstatic int x = std::system("touch FILE");\n//',
    "A\r\n#define float int\r\n//",
    "A\\",                                   # a // comment continued onto the next line
    "A??/",                                  # the same, as a trigraph
    "*/ int evil; /*",
    '"; system("id"); "',
    'A"\n}\ndefine void @evil() {\n  ret void\n}\n; "',   # LLVM IR
    "%x = call void @abort()",
    "A\u202e}; int evil;\u202c",             # bidi override (Trojan Source)
    "A\u2028B\u2029C\x85D",                  # Unicode line and paragraph separators
    "A\x00B",
    "\x1b[31mred",
    "",
    "1abc",
    "__global__",
    "main",
    "threadIdx",
    "for",
    "<U+000A>",                              # what an escaped newline looks like
    "конв.вес",
    "重み",
    "\U0001f600",
    "a" * 3000,
    "A B\tC",
    " ",                                     # a leading space read as indentation (hypothesis)
    "  A  ",
]



class _ReprStr(str):
    """A string whose own ``repr`` is the first hostile string."""
    def __repr__(self):
        return HOSTILE[0]


class _StrFloat(float):
    """A float whose ``str`` closes the loop nest in LLVM IR."""
    def __str__(self):
        return HOSTILE[6]

    __repr__ = __str__


class _Object:
    def __repr__(self):
        return HOSTILE[0]

    __str__ = __repr__


#: (session 31) pragma values that are not plain strings: a subclass of str or float
#: whose own repr/str spans lines (shown as the plain value), an object with such a repr,
#: an object whose repr is its address (a printed IR differing between processes), a
#: list, NaN, past int32, bytes, a string too long for a trace (refused: a
#: ScheduleError naming the pragma).  Before session 31 every one was taken, and the
#: multi-line ones broke the printed IR over lines.
HOSTILE_VALUES: List[object] = [_ReprStr("v"), _StrFloat(2.5), _Object(), object(),
                                [HOSTILE[0]], float("nan"), 2**40, HOSTILE[0].encode(),
                                "v" * 257]

BACKENDS = ("ir", "llvm", "cuda", "cuda-emu")

_C_COMMENT = re.compile(r"//[^\n]*")
_C_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"')
_C_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_LL_NAME = re.compile(r'[%@!](?:"[^"]*"|[-A-Za-z$._0-9]+)')
_LL_LABEL = re.compile(r'^(?:"[^"]*"|[-A-Za-z$._0-9]+):', re.M)
_LL_STR = re.compile(r'\bc"[^"]*"')
_LL_ARR = re.compile(r"\[\d+ x i8\]")


def skeleton(text: str, kind: str) -> List[str]:
    """``text`` with every name, comment and string constant blanked out, as lines."""
    if kind in ("cuda", "cuda-emu"):
        text = _C_COMMENT.sub("//", text)
        text = _C_STRING.sub('"S"', text)
        text = _C_IDENT.sub("X", text)
    elif kind == "llvm":
        text = _LL_NAME.sub("%X", text)
        text = _LL_LABEL.sub("X:", text)
        text = _LL_STR.sub('c"S"', text)
        text = _LL_ARR.sub("[N x i8]", text)
        text = re.sub(r"^;.*$", ";", text, flags=re.M)
    return text.splitlines()


def _ir_shape(text: str) -> List[int]:
    """The printed IR's layout: its lines and their indentation (names may be any
    printable text, so only the layout is compared)."""
    return [len(line) - len(line.lstrip(" ")) for line in text.splitlines()]


def _program(names: Dict[str, str], gpu: bool):
    n = 37
    A = tc.placeholder((n, 16), name=names["A"])
    B = tc.compute((n, 16), lambda i, j: A[i, j] * 2.0 + 1.0, name=names["B"])
    k = tc.reduce_axis((0, 16), name=names["k"])
    C = tc.compute((n,), lambda i: tc.sum(B[i, k], axis=k), name=names["C"])
    s = tc.create_schedule(C.op)
    s[B].compute_inline()
    if gpu:
        io, ii = s[C].split(C.op.axis[0], factor=8)
        s[C].bind(io, tc.thread_axis("blockIdx.x"))
        s[C].bind(ii, tc.thread_axis("threadIdx.x"))
        s[C].pragma(ii, "note", names["value"])
    else:
        io, ii = s[C].split(C.op.axis[0], factor=8)
        s[C].parallel(io)
        s[C].pragma(ii, "note", names["value"])
    return s, [A, C]


def _names(name: str) -> Dict[str, str]:
    # (a function name must be an identifier: tc.lower/tc.build reject any other)
    # (a pragma's value is a string of at most trace.MAX_STRING characters: a longer one
    # is a ScheduleError, HOSTILE_VALUES' case)
    return {"A": name, "B": name + "b", "C": name + "c", "k": name + "k",
            "value": name[:MAX_STRING], "func": "f"}


_PLAIN = {"A": "A", "B": "B", "C": "C", "k": "k", "value": "v", "func": "f"}


def _sources(names: Dict[str, str], backend: str, run: bool):
    s, args = _program(names, gpu=backend in ("cuda", "cuda-emu"))
    if backend == "ir":
        return str(tc.lower(s, args, name=names["func"])), None
    if backend == "llvm":
        f = tc.build(s, args, name=names["func"])
        return f.get_source("llvm-unopt"), (_run(f) if run else None)

    func = tc.lower(s, args, target="cuda", name=names["func"])
    if backend == "cuda":
        return codegen_cuda(func).source, None
    f = tc.build(tc.lower(s, args, target="cuda-emu", name=names["func"]), target="cuda-emu")
    return f.get_source("cuda") + "\n" + f.get_source("emu"), (_run(f) if run else None)


def _run(f):
    a = np.random.default_rng(0).random((37, 16)).astype("float32")
    c = np.zeros(37, "float32")
    f(a, c)
    return np.allclose(c, (a * 2 + 1).sum(1), rtol=1e-5)


def check(name: str, backend: str, run: bool = False) -> Tuple[bool, str]:
    """(True, "") when ``name`` (as every name of the program) leaves the generated text's
    structure as with plain names (and, with ``run``, the results right); else (False,
    why)."""
    plain, _ = _sources(_PLAIN, backend, False)
    text, ok = _sources(_names(name), backend, run)
    return _compare(plain, text, ok, backend)


def check_value(value, backend: str, run: bool = False) -> Tuple[bool, str]:
    """(True, "") when the pragma value ``value`` (:data:`HOSTILE_VALUES`) is refused
    with a ScheduleError naming the pragma, or leaves the generated text's structure as
    with a plain value; else (False, why)."""
    plain, _ = _sources(_PLAIN, backend, False)
    try:
        text, ok = _sources(dict(_PLAIN, value=value), backend, run)
    except tc.ScheduleError as e:
        if str(e).startswith("pragma note on stage C") and "the value" in str(e):
            return True, ""
        return False, f"another ScheduleError: {str(e)[:200]}"
    return _compare(plain, text, ok, backend)


def _compare(plain: str, text: str, ok, backend: str) -> Tuple[bool, str]:
    if ok is False:
        return False, "wrong results"
    if backend == "ir":
        if not all(ch.isprintable() for ch in text.replace("\n", "")):
            return False, "a non-printable character in the printed IR"
        if _ir_shape(text) != _ir_shape(plain):
            return False, "the printed IR's layout changed"
        return True, ""
    a, b = skeleton(plain, backend), skeleton(text, backend)
    if a != b:
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return False, f"line {i + 1}: {x.strip()[:80]!r} became {y.strip()[:80]!r}"
        return False, f"{len(a)} lines became {len(b)}"
    return True, ""


def main(argv=None) -> int:
    import shutil

    argv = sys.argv[1:] if argv is None else argv
    backends = [b for b in BACKENDS if b != "cuda-emu" or shutil.which("g++")]
    bad = 0
    for backend in backends:
        fails = []
        for name in HOSTILE:
            ok, why = check(name, backend, run=backend in ("llvm", "cuda-emu"))
            if not ok:
                fails.append((name, why))
        bad += len(fails)
        for value in HOSTILE_VALUES:
            ok, why = check_value(value, backend, run=backend in ("llvm", "cuda-emu"))
            if not ok:
                fails.append((value, why))
        print(f"{backend}: {len(HOSTILE)} hostile strings and {len(HOSTILE_VALUES)} pragma "
              f"values, {len(fails)} changed the generated code")
        for name, why in fails:
            print(f"  {name!r:.60}: {why}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
