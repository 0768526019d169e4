"""The one place where user strings become generated text.

Every name a user gives (tensors, stages, axes, functions, buffers) may end up in
LLVM IR, CUDA C, the CUDA emulation's C++, the printed IR and the comments of all of
them.  A model definition may come from somebody else, so a name is hostile until it
has gone through one of these:

* :func:`identifier` -- a C / LLVM identifier: ``[A-Za-z0-9_]`` only, not starting with a
  digit or with ``__`` (``conv1.weight`` -> ``conv1_weight``).  Readable and
  deterministic; uniqueness is the caller's namer's job (``x``, ``x_1``, ...).
* :func:`display` -- text shown to a reader (the printed IR, comments in generated
  source): one line of printable characters.  Letters, digits and marks of any script and
  printable ASCII stay as they are; everything else (newlines, control and format
  characters such as bidi overrides, backslashes, which continue a ``//`` comment onto
  the next line) is written ``<U+XXXX>``.  ``A\\n#include`` -> ``A<U+000A>#include``.
  :func:`display_name` also writes a space at either end so (the printed IR's names, where
  a leading space would read as indentation).
* :func:`comment` -- a ``//`` comment line of :func:`display` text.
* :func:`ir_name` -- a name in the printed loop IR: one token, which
  :func:`tecomp.ir.parse` reads back as the same name.

Pragma names are checked where they are given (``Stage.pragma``): an identifier or a
ScheduleError.
"""
from __future__ import annotations

import hashlib
import re
import unicodedata

_IDENT_BAD = re.compile(r"[^0-9A-Za-z_]")
_PLAIN = re.compile(r"[ !-\[\]-~]*")     # printable ASCII without the backslash
_KEEP_CATEGORIES = ("L", "N", "M")      # letters, numbers, marks of any script


#: longer identifiers keep their first characters and a hash of the whole name: LLVM
#: truncates local value names at 1024 characters, so two long names that differ only
#: at the end became one ("redefinition of argument")
MAX_IDENTIFIER = 96


def identifier(name: str, default: str = "v", c: bool = True) -> str:
    """``name`` as a C identifier (see the module doc); with ``c=False`` an LLVM symbol
    or value name, which may start with a digit or ``__``."""
    name = str(name)
    s = _IDENT_BAD.sub("_", name) or default
    if c and (s[0].isdigit() or s.startswith("__")):   # __: reserved in C and C++
        s = default + s
    if len(s) > MAX_IDENTIFIER:
        digest = hashlib.sha1(name.encode("utf-8", "surrogatepass")).hexdigest()[:10]
        s = f"{s[:MAX_IDENTIFIER - 11]}_{digest}"
    return s


def display(text: str) -> str:
    """``text`` as one line of printable characters (see the module doc)."""
    text = str(text)
    if _PLAIN.fullmatch(text):
        return text
    out = []
    for ch in text:
        o = ord(ch)
        if (32 <= o < 127 and ch != "\\") or (
                o >= 128 and unicodedata.category(ch)[0] in _KEEP_CATEGORIES):
            out.append(ch)
        else:
            out.append(f"<U+{o:04X}>")
    return "".join(out)


def display_name(name: str) -> str:
    """A name as :func:`display` shows it, with a space at either end written
    ``<U+0020>``: a name begins statements of the printed IR, where a leading space would
    read as indentation."""
    d = display(name)
    if d.startswith(" "):
        d = "<U+0020>" + d[1:]
    if d.endswith(" "):
        d = d[:-1] + "<U+0020>"
    return d


#: words of the printed IR that a name must not read as (the first character is escaped)
IR_RESERVED = frozenset({"True", "False", "None", "inf", "nan", "in"})


def _ir_name_char(ch: str) -> bool:
    if ch.isascii():
        return ch.isalnum() or ch in "_."
    return unicodedata.category(ch)[0] in _KEEP_CATEGORIES


def ir_name(name: str) -> str:
    """``name`` as the printed loop IR writes it: one token that :func:`tecomp.ir.parse`
    reads back as ``name``.  Letters, digits and marks of any script, ``_`` and ``.``
    stay; every other character, a leading digit or ``.``, and the first character of a
    word the IR reserves (``True``, ``inf``, ``in``, ...) are written ``<U+XXXX>``
    (``conv1-weight`` -> ``conv1<U+002D>weight``).  The empty name is ``_``."""
    name = str(name)
    if name == "":
        return "_"
    if all(_ir_name_char(ch) for ch in name) and not (name[0].isdigit() or name[0] == ".") \
            and name not in IR_RESERVED:
        return name
    out = []
    for k, ch in enumerate(name):
        bad = not _ir_name_char(ch) or (k == 0 and (ch.isdigit() or ch == "."
                                                    or name in IR_RESERVED))
        out.append(f"<U+{ord(ch):04X}>" if bad else ch)
    return "".join(out)


def comment(text: str) -> str:
    """A ``//`` comment line holding ``text`` (made safe by :func:`display`)."""
    return "// " + display(text)


_PRAGMA = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def is_pragma_name(name) -> bool:
    """Whether ``name`` may name a pragma (an identifier)."""
    return isinstance(name, str) and _PRAGMA.fullmatch(name) is not None
