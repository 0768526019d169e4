"""Every fenced ```python block of README.md and docs/**/*.md runs as printed.

Each block is one test (its id is ``file:line`` of its opening fence), run in a fresh
namespace in a temporary working directory (files a block writes land there), in
process: the blocks are user code, which must not crash the process anyway, and one
process keeps the compile worker and the kernel cache warm, so the whole file stays fast.

The ``torch.compile(..., backend="tecomp")`` calls of a block write no disk cache unless
the block gives the ``cache`` option itself: exporting each kernel's library costs about
twice its build, in a background thread that slows the tests after it, and no block reads
those libraries back (tests/test_dynamo.py's disk cache tests do).

Two HTML comments, each on the last non-blank line before the block, change that:

* ``<!-- snippet: skip (reason) -->``: the block is not run (it needs a CUDA GPU, several
  processes, a download...); the test is skipped with the reason.
* ``<!-- snippet: output -->`` on the first non-blank line *after* the block, followed by a
  ```text block: what the block prints, compared with its standard output (trailing
  whitespace of each line and trailing blank lines ignored).

A ``<!-- snippet: ... -->`` comment that is not one of these, or not where it belongs, is
an error of the page (the collection test fails naming it), never silently ignored.
"""
from __future__ import annotations

import contextlib
import dataclasses
import io
import linecache
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`\n]*?)[ \t]*$")
_DIRECTIVE = re.compile(r"^\s*<!--\s*snippet:\s*(?P<body>.*?)\s*-->\s*$")
_SKIP = re.compile(r"^skip\s*\((?P<reason>.*\S.*)\)$")


@dataclasses.dataclass(frozen=True)
class Snippet:
    path: str            # relative to the repository root
    line: int            # 1-based line of the opening fence
    code: str            # dedented to the fence's indentation
    skip: str | None     # the reason given with <!-- snippet: skip (...) -->
    output: str | None   # the ```text block after <!-- snippet: output -->

    @property
    def id(self):
        return f"{self.path}:{self.line}"


@dataclasses.dataclass(frozen=True)
class _Block:
    start: int           # 0-based index of the opening fence line
    end: int             # 0-based index of the closing fence line
    lang: str
    body: list


def _blocks(lines):
    """The fenced blocks of a Markdown page, in order (CommonMark's fences: a closing
    fence of the same character, at least as long, nothing after it)."""
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if m is None:
            i += 1
            continue
        fence, indent = m["fence"], len(m["indent"].expandtabs())
        j = i + 1
        while j < len(lines):
            c = _FENCE.match(lines[j])
            if c and c["fence"][0] == fence[0] and len(c["fence"]) >= len(fence) and not c["info"]:
                break
            j += 1
        body = []
        for ln in lines[i + 1:j]:
            # CommonMark removes up to the opening fence's indentation from each line
            k = 0
            while k < min(indent, len(ln)) and ln[k] == " ":
                k += 1
            body.append(ln[k:])
        yield _Block(i, j, (m["info"].split() or [""])[0].lower(), body)
        i = j + 1


def _prev_nonblank(lines, i):
    i -= 1
    while i >= 0 and not lines[i].strip():
        i -= 1
    return i


def _next_nonblank(lines, i):
    i += 1
    while i < len(lines) and not lines[i].strip():
        i += 1
    return i


def parse_page(text, path):
    """The snippets of one Markdown page; raises ValueError naming ``path:line`` for a
    ``<!-- snippet: ... -->`` comment that is malformed or attached to nothing."""
    lines = text.split("\n")
    blocks = list(_blocks(lines))
    inside = {k for b in blocks for k in range(b.start, b.end + 1)}
    used = set()
    snippets = []
    for n, b in enumerate(blocks):
        if b.lang != "python":
            continue
        skip = output = None
        p = _prev_nonblank(lines, b.start)
        d = _DIRECTIVE.match(lines[p]) if p >= 0 and p not in inside else None
        if d:
            s = _SKIP.match(d["body"])
            if s is None:
                raise ValueError(f"{path}:{p + 1}: {lines[p].strip()!r} before a python block: "
                                 "write <!-- snippet: skip (the reason) -->")
            skip = s["reason"].strip()
            used.add(p)
        q = _next_nonblank(lines, b.end)
        d = _DIRECTIVE.match(lines[q]) if q < len(lines) else None
        if d and d["body"] == "output":
            nxt = blocks[n + 1] if n + 1 < len(blocks) else None
            if nxt is None or nxt.start != _next_nonblank(lines, q) or nxt.lang != "text":
                raise ValueError(f"{path}:{q + 1}: <!-- snippet: output --> must be followed by "
                                 "a ```text block holding what the python block above prints")
            output = "\n".join(nxt.body)
            used.add(q)
        snippets.append(Snippet(path, b.start + 1, "\n".join(b.body) + "\n", skip, output))
    for k, ln in enumerate(lines):
        if k not in inside and k not in used and _DIRECTIVE.match(ln):
            raise ValueError(f"{path}:{k + 1}: {ln.strip()!r} is attached to no python block: "
                             "<!-- snippet: skip (reason) --> goes on the line before a ```python "
                             "block, <!-- snippet: output --> on the line after one, followed by "
                             "a ```text block")
    return snippets


def pages(root=ROOT):
    return [root / "README.md"] + sorted((root / "docs").rglob("*.md"))


def collect(root=ROOT):
    out = []
    for p in pages(root):
        out += parse_page(p.read_text(encoding="utf-8"), p.relative_to(root).as_posix())
    return out


def _normalise(text):
    return "\n".join(ln.rstrip() for ln in text.rstrip().split("\n"))


try:
    SNIPPETS, _COLLECT_ERROR = collect(), None
except ValueError as e:      # reported by test_pages_parse, not as a collection crash
    SNIPPETS, _COLLECT_ERROR = [], e


def test_pages_parse():
    if _COLLECT_ERROR is not None:
        pytest.fail(str(_COLLECT_ERROR))
    assert SNIPPETS, "no ```python block found in README.md and docs/"


def _without_disk_cache(monkeypatch):
    """The backend's options with ``cache`` False where the call gave none (the module
    docstring says why): test_dynamo's, as its autouse fixture sets them."""
    import tecomp.dynamo as td
    from test_dynamo import _options_without_disk_cache

    monkeypatch.setattr(td, "_options", _options_without_disk_cache)


@pytest.mark.parametrize("snippet", SNIPPETS, ids=[s.id for s in SNIPPETS])
def test_snippet(snippet, tmp_path, monkeypatch):
    if snippet.skip is not None:
        pytest.skip(snippet.skip)
    import tecomp as tc

    if "tecomp" in snippet.code and "torch.compile" in snippet.code:
        _without_disk_cache(monkeypatch)
    monkeypatch.chdir(tmp_path)
    threads = tc.get_num_threads()
    # a traceback shows the block with the page's line numbers (it starts after the fence)
    source = "\n" * snippet.line + snippet.code
    name = f"<{snippet.id}>"
    linecache.cache[name] = (len(source), None, source.splitlines(True), name)
    code = compile(source, name, "exec")
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            exec(code, {"__name__": "__main__"})
    finally:
        tc.set_num_threads(threads)
    if snippet.output is not None:
        assert _normalise(out.getvalue()) == _normalise(snippet.output), (
            f"{snippet.id} printed\n{out.getvalue()}\nwhere the page shows\n{snippet.output}")


# --- the collector itself --------------------------------------------------------------

_PAGE = """\
# title

```python
print(1)
```

<!-- snippet: skip (needs a CUDA GPU) -->
```python
import pycuda
```

- a list item:

  ```python
  if True:
      x = 2
  ```

```python
print("a  ")
print()
```
<!-- snippet: output -->

```text
a
```

````markdown
```python
not collected: inside another block
```
````
"""


def test_collector_reads_directives_and_indented_blocks():
    s = parse_page(_PAGE, "p.md")
    assert [x.line for x in s] == [3, 8, 14, 19]
    assert s[0].skip is None and s[0].output is None and s[0].code == "print(1)\n"
    assert s[1].skip == "needs a CUDA GPU"
    assert s[2].code == "if True:\n    x = 2\n"
    assert s[3].output == "a" and _normalise("a  \n\n") == _normalise(s[3].output)


@pytest.mark.parametrize("page, msg", [
    ("<!-- snippet: skip -->\n```python\nx = 1\n```\n", r"p\.md:1: .*skip \(the reason\)"),
    ("<!-- snippet: skp (x) -->\n```python\nx = 1\n```\n", r"p\.md:1: .*skip \(the reason\)"),
    ("```python\nx = 1\n```\n<!-- snippet: output -->\nno block\n", r"p\.md:4: .*```text block"),
    ("text\n<!-- snippet: skip (why) -->\n\nmore text\n", r"p\.md:2: .*attached to no python"),
    ("```python\nx = 1\n```\n\nprose\n<!-- snippet: output -->\n```text\n1\n```\n",
     r"p\.md:6: .*attached to no python"),
])
def test_collector_refuses_misplaced_directives(page, msg):
    with pytest.raises(ValueError, match=msg):
        parse_page(page, "p.md")
