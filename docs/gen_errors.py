"""Generate docs/errors.md, the error catalogue, from the must-fail tests (tests/must_fail/).

    python3 docs/gen_errors.py            # runs tests/must_fail, records every expected
                                          # error's message, writes docs/errors.md

Each test there is a program a user could write that tecomp refuses; it asserts the error
class and its message with ``pytest.raises(Class, match=...)``.  The catalogue lists, per
error class, each such program (the test's code) and the message tecomp gave (recorded
while the tests ran).  tests/test_docs_site.py checks that the page is up to date with
the tests (it re-renders it from the tests' code and the messages recorded in the page).
"""
from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import textwrap
from typing import Dict, List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)   # (this checkout's tecomp, for the error classes' docstrings)
MUST_FAIL = os.path.join(ROOT, "tests", "must_fail")
PAGE = os.path.join(ROOT, "docs", "errors.md")
#: messages longer than this are cut in the page (a few embed whole IR listings)
MAX_MESSAGE = 1200
_ENTRY = re.compile(r"^<!-- must_fail: (\S+) -->$", re.M)
_RECORDED = re.compile(r"^<!-- raises: (\w+) -->\n```text\n(.*?)\n```$", re.M | re.S)


# ---------------------------------------------------------------------------------
# the tests, read statically

class Entry:
    """One must-fail test: where it is, its code, the error classes it expects."""

    def __init__(self, path: str, name: str, code: str, classes: List[str],
                 patterns: List[Tuple[str, str]]):
        self.path, self.name, self.code, self.classes = path, name, code, classes
        #: (class, match=) of each pytest.raises whose class and pattern are literal
        self.patterns = patterns

    @property
    def key(self) -> str:
        return f"{self.path}::{self.name}"

    @property
    def title(self) -> str:
        return self.name[len("test_"):].replace("_", " ")


def _raises(fn: ast.AST) -> Tuple[List[str], List[Tuple[str, str]]]:
    """The error classes ``fn`` expects, from its ``pytest.raises(X, ...)`` calls, and
    the ``(class, pattern)`` of those with one class and a literal ``match=``."""
    classes: List[str] = []
    patterns: List[Tuple[str, str]] = []
    for node in ast.walk(fn):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr == "raises" and node.args:
            first = node.args[0]
            names = first.elts if isinstance(first, ast.Tuple) else [first]
            found = [n.attr if isinstance(n, ast.Attribute) else getattr(n, "id", None)
                     for n in names]
            for name in found:
                if name and name not in classes:
                    classes.append(name)
            match = next((k.value for k in node.keywords if k.arg == "match"), None)
            if len(found) == 1 and found[0] and isinstance(match, ast.Constant) \
                    and isinstance(match.value, str):
                patterns.append((found[0], match.value))
    return classes, patterns


def read_tests(root: str = MUST_FAIL) -> List[Entry]:
    """Every test function of tests/must_fail that expects an error, in file order."""
    entries = []
    for fname in sorted(os.listdir(root)):
        if not (fname.startswith("test_") and fname.endswith(".py")):
            continue
        path = os.path.join(root, fname)
        src = open(path, encoding="utf-8").read()
        lines = src.splitlines()
        rel = os.path.relpath(path, ROOT).replace(os.sep, "/")
        for node in ast.parse(src).body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                classes, patterns = _raises(node)
                if not classes:
                    continue
                start = min([d.lineno for d in node.decorator_list] + [node.lineno])
                code = textwrap.dedent("\n".join(lines[start - 1:node.end_lineno]))
                entries.append(Entry(rel, node.name, code, classes, patterns))
    return entries


# ---------------------------------------------------------------------------------
# the messages, recorded while the tests run (a pytest plugin: -p gen_errors)

_RECORDS: Dict[str, List[Tuple[str, str]]] = {}
_CURRENT: List[str] = [""]


def pytest_configure(config):
    import pytest

    original = pytest.raises

    class _Recording:
        def __init__(self, cm):
            self.cm = cm

        def __enter__(self):
            return self.cm.__enter__()

        def __exit__(self, et, ev, tb):
            if ev is not None:
                _record(ev)
            return self.cm.__exit__(et, ev, tb)

    def raises(*args, **kwargs):
        got = original(*args, **kwargs)
        if hasattr(got, "__enter__"):
            return _Recording(got)
        _record(got.value)   # pytest.raises(Class, func, *args)
        return got

    pytest.raises = raises


def _stable(msg: str) -> str:
    """``msg`` without what changes from run to run: memory addresses (kept apart by
    their distances, from ``0x10000`` on) and pytest's numbered temporary dirs."""
    addrs = [int(a, 16) for a in re.findall(r"0x[0-9a-f]{8,}", msg)]
    if addrs:
        base = min(addrs)
        msg = re.sub(r"0x[0-9a-f]{8,}", lambda m: hex(0x10000 + int(m.group(0), 16) - base), msg)
    return re.sub(r"/tmp/pytest-of-[^/\s]+/pytest-\d+/", "/tmp/pytest/", msg)


def _record(exc: BaseException) -> None:
    key = _CURRENT[0].split("[", 1)[0]
    _RECORDS.setdefault(key, []).append((type(exc).__name__, _stable(str(exc))))


def pytest_runtest_call(item):
    _CURRENT[0] = item.nodeid


def pytest_unconfigure(config):
    out = os.environ.get("TECOMP_GEN_ERRORS_OUT")
    if out:
        with open(out, "w", encoding="utf-8") as f:
            json.dump(_RECORDS, f)


def record_messages() -> Dict[str, List[Tuple[str, str]]]:
    """Run tests/must_fail with the recording plugin; test key -> [(class, message)]."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "records.json")
        # (TECOMP_LONG_TESTS: the slow must-fail programs are in the catalogue too)
        env = dict(os.environ, TECOMP_GEN_ERRORS_OUT=out, TECOMP_LONG_TESTS="1",
                   PYTHONPATH=os.pathsep.join([os.path.join(ROOT, "docs"), ROOT,
                                               os.environ.get("PYTHONPATH", "")]))
        p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                            "-p", "gen_errors", MUST_FAIL], cwd=ROOT, env=env,
                           capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit(f"tests/must_fail failed; fix them first:\n{p.stdout[-3000:]}")
        with open(out, encoding="utf-8") as f:
            return {k: [tuple(x) for x in v] for k, v in json.load(f).items()}


def recorded_in_page(text: str) -> Dict[str, List[Tuple[str, str]]]:
    """The messages docs/errors.md records, by test key (to re-render it unchanged)."""
    out: Dict[str, List[Tuple[str, str]]] = {}
    marks = list(_ENTRY.finditer(text))
    for m, nxt in zip(marks, marks[1:] + [None]):
        body = text[m.end():nxt.start() if nxt else len(text)]
        out.setdefault(m.group(1), []).extend(_RECORDED.findall(body))
    return out


def stale_messages(entries: List[Entry],
                   messages: Dict[str, List[Tuple[str, str]]]) -> List[str]:
    """The tests whose literal ``match=`` no recorded message of its class satisfies any
    more (the message changed since the page was written)."""
    out = []
    for e in entries:
        got = messages.get(e.key, [])
        for cls, pattern in e.patterns:
            msgs = [m for c, m in got if c == cls or not any(c2 == cls for c2, _ in got)]
            if msgs and not any(re.search(pattern, m) or m.endswith(" [...]") for m in msgs):
                out.append(f"{e.key}: no recorded {cls} message matches {pattern!r}")
    return out


# ---------------------------------------------------------------------------------
# the page

def _doc_of(cls_name: str) -> str:
    import tecomp.errors as errors

    cls = getattr(errors, cls_name, None)
    doc = (cls.__doc__ or "") if cls is not None else ""
    doc = re.sub(r":\w+:`~?(?:[\w.]+\.)?([^`.]+)`", r"`\1`", doc)   # :class:`~a.B` -> `B`
    return " ".join(doc.replace("``", "`").split())


def _fence(text: str) -> str:
    """A code fence longer than any backtick run in ``text``."""
    n = max([3] + [len(r) + 1 for r in re.findall(r"`{3,}", text)])
    return "`" * n


def _cut(msg: str) -> str:
    return msg if len(msg) <= MAX_MESSAGE else msg[:MAX_MESSAGE] + " [...]"


def _parents(cls_name: str) -> str:
    import tecomp.errors as errors

    cls = getattr(errors, cls_name, None)
    if cls is None:
        return ""
    bases = [b.__name__ for b in cls.__mro__[1:] if b not in (object, BaseException, Exception)]
    return ", ".join(f"`{b}`" for b in bases)


def render(entries: List[Entry], messages: Dict[str, List[Tuple[str, str]]]) -> str:
    # each program under every class it raised (a parametrized test may raise several),
    # with the messages of that class; a program with no recorded message under the
    # classes its pytest.raises names
    by_class: Dict[str, List[Tuple[Entry, List[str]]]] = {}
    for e in entries:
        got: Dict[str, List[str]] = {}
        for cls, msg in messages.get(e.key, []):
            if msg not in got.setdefault(cls, []):
                got[cls].append(msg)
        for cls in got or {c: [] for c in e.classes}:
            by_class.setdefault(cls, []).append((e, got.get(cls, [])))
    order = sorted(by_class, key=lambda c: (c != "TecompError", c))
    out = ["<!-- Generated by docs/gen_errors.py from tests/must_fail/: do not edit; run "
           "`python3 docs/gen_errors.py` after changing those tests. -->",
           "", "# Error catalogue", "",
           "Every mistake tecomp can catch raises a subclass of `tecomp.TecompError` (all of "
           "them are importable from `tecomp` and `tecomp.errors`) whose message names the "
           "object at fault (the tensor, stage, axis, argument, file...) and says how to fix "
           "it. A broken invariant inside tecomp raises `InternalError` instead: that one is "
           "always a tecomp bug; please report it with the program.",
           "",
           "Below, for each error class, every program of the test suite's must-fail "
           "catalogue (`tests/must_fail/`) that raises it, and the message tecomp gives. The "
           "fix is in the message, after what went wrong. Catch the base class to handle "
           "any of them:",
           "",
           "```python",
           "import tecomp as tc",
           "",
           "try:",
           "    tc.placeholder((4, -3), name=\"A\")",
           "except tc.TecompError as e:",
           "    print(type(e).__name__, e)",
           "```",
           "",
           "<!-- snippet: output -->",
           "```text",
           "ShapeError placeholder A: extent 1 is -3; extents must be positive",
           "```",
           "",
           "| Error | Also a | What it means | Programs |",
           "|---|---|---|---|"]
    for c in order:
        out.append(f"| [`{c}`](#{c.lower()}) | {_parents(c)} | {_doc_of(c)} | "
                   f"{len(by_class[c])} |")
    for c in order:
        out += ["", f"## {c}", "", _doc_of(c) or f"`{c}`.", ""]
        for e, msgs in by_class[c]:
            out += [f"<!-- must_fail: {e.key} -->", f"### {e.title}", "",
                    f"From `{e.key}`:", "",
                    "<!-- snippet: skip (a must-fail test: it raises on purpose, under pytest) -->",
                    f"{_fence(e.code)}python", e.code, _fence(e.code), ""]
            for msg in msgs:
                out += [f"<!-- raises: {c} -->", "```text",
                        _cut(msg).replace("```", "'''"), "```", ""]
            if not msgs:
                out += ["(no message recorded: run `python3 docs/gen_errors.py`)", ""]
    return "\n".join(out).rstrip() + "\n"


def main(argv: Optional[List[str]] = None) -> None:
    import argparse

    ap = argparse.ArgumentParser(description="Write docs/errors.md from tests/must_fail.")
    ap.add_argument("--records", help="a JSON file of recorded messages: read it if it "
                    "exists (no test run), else write it after the run")
    a = ap.parse_args(argv)
    entries = read_tests()
    if a.records and os.path.exists(a.records):
        with open(a.records, encoding="utf-8") as f:
            messages = {k: [tuple(x) for x in v] for k, v in json.load(f).items()}
    else:
        messages = record_messages()
        if a.records:
            with open(a.records, "w", encoding="utf-8") as f:
                json.dump(messages, f)
    text = render(entries, messages)
    with open(PAGE, "w", encoding="utf-8") as f:
        f.write(text)
    n = sum(1 for e in entries if messages.get(e.key))
    print(f"wrote {os.path.relpath(PAGE, ROOT)}: {len(entries)} programs, {n} with messages")


if __name__ == "__main__":
    main()
