"""Import cycles among tecomp's modules, and the layers of its packages.

    python -m tecomp.testing.imports        # prints every cycle, every import against the
                                            # layers; exit status 1 if any is new

Every ``import`` and ``from ... import`` in ``tecomp/`` counts, at module level or inside a
function (a function-local import that dodges a cycle is still one).  The modules that
import each other, directly or around a longer loop, are the strongly connected
components of that graph.  ``KNOWN`` lists the cycles not broken yet, so that a new one
fails the test suite (``tests/test_imports.py``) while these are worked off.

Packages sit in ``LAYERS``, lowest first: a package imports only from layers below its
own.  ``KNOWN_UPWARD`` lists the package imports that break this today (each is work
left, not a permission); any other fails the test suite, and one fixed since must be
taken off the list.  ``LOCAL_IMPORTS`` is the number of function-local imports of tecomp
modules: it may only go down.
"""
from __future__ import annotations

import ast
import os
import re
import sys
from collections import defaultdict
from typing import Dict, List, Set

#: cycles not broken yet (each a set of modules); a cycle that is not one of these fails
KNOWN: list = []  # none left: the IR core registers its services instead (ir.expr.SERVICES, ir.arith.SIMPLIFY)


#: tecomp's packages, lowest layer first; packages in one layer do not import each other.
#: A package is ``tecomp.<name>`` (a subpackage or a top-level module); ``tecomp`` itself
#: is the public ``__init__``.
LAYERS: List[tuple] = [
    ("tecomp.errors", "tecomp._version"),
    ("tecomp.threads",),       # the thread count and the settings of every thread pool
    ("tecomp.ir", "tecomp.target"),
    ("tecomp.te", "tecomp.utils"),
    ("tecomp.schedule",),
    ("tecomp.lower",),
    ("tecomp.runtime",),       # module classes, argument checks, loading
    ("tecomp.codegen",),       # code generators
    ("tecomp.build",),
    ("tecomp.autodiff",),      # target-free gradients
    ("tecomp.nn",),            # operator computes (target-free) and their gradient rules
    ("tecomp.strategy",),      # how each operator is scheduled per target: templates, rules
    ("tecomp.autoschedule",),  # search, measurement, records, cost model
    ("tecomp.viz",),           # pictures: rooflines, loop nests
    ("tecomp.calibration",),   # the machine model's costs measured at first use
    ("tecomp",),
    ("tecomp.torch",),
    ("tecomp.testing", "tecomp.cli"),  # (the fuzzer's torch families use tecomp.torch)
    ("tecomp.dynamo",),        # torch.compile(backend="tecomp"): ATen graphs -> kernels
    ("tecomp.__main__",),      # python -m tecomp: the command line (tecomp.cli)
]

#: package imports that break ``LAYERS`` today: (importer, imported) -> why it is left
KNOWN_UPWARD: Dict[tuple, str] = {}  # none left

#: function-local imports of tecomp modules today (statements); only lower it
LOCAL_IMPORTS = 8

#: the reason a function-local import gives, in a comment on the line above it or on its
#: own lines: ``(lazy: ...)``, an optional or heavy dependency kept off the import path
#: (llvmlite, pycuda, the loader), or ``(cycle: ...)``, a package cycle of KNOWN_UPWARD
LOCAL_REASON = re.compile(r"#.*\((lazy|cycle): [^)]+\)")


def package(module: str) -> str:
    """``tecomp.ir.expr`` -> ``tecomp.ir``; ``tecomp.build`` -> ``tecomp.build``."""
    parts = module.split(".")
    return ".".join(parts[:2])


def _layer_of() -> Dict[str, int]:
    return {p: i for i, layer in enumerate(LAYERS) for p in layer}


def upward(root: str) -> Dict[tuple, List[tuple]]:
    """(importer package, imported package) -> [(module, imported module)] for every import
    that does not point to a lower layer (a package missing from ``LAYERS`` counts)."""
    rank = _layer_of()
    out: Dict[tuple, List[tuple]] = defaultdict(list)
    for m, targets in graph(root).items():
        a = package(m)
        for t in sorted(targets):
            b = package(t)
            if a == b:
                continue
            if a not in rank or b not in rank or rank[b] >= rank[a]:
                out[(a, b)].append((m, t))
    return dict(out)


def new_upward(root: str) -> Dict[tuple, List[tuple]]:
    return {k: v for k, v in upward(root).items() if k not in KNOWN_UPWARD}


def _scan(root: str):
    """``(edges, local)`` of the package at ``root``: module -> the tecomp modules it
    imports, and ``(module, line, imported tecomp modules, explained)``
    of each import statement inside a function (``explained``: a :data:`LOCAL_REASON` on
    the line above it or its own lines).  Every file is parsed once per set of file
    versions: the checks each ask for it, and parsing the package takes seconds."""
    mods = _modules(root)
    stamp = []
    for path in mods.values():
        st = os.stat(path)
        stamp.append((path, st.st_mtime_ns, st.st_size))
    root, stamp = os.path.abspath(root), tuple(stamp)
    if root in _SCANNED and _SCANNED[root][0] == stamp:
        return _SCANNED[root][1]
    edges: Dict[str, Set[str]] = defaultdict(set)
    local = []
    for m, path in mods.items():
        with open(path, encoding="utf-8") as f:
            text = f.read()
        tree = ast.parse(text, path)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                edges[m].update(_targets(mods, m, node))
        edges.setdefault(m, set())
        lines = text.splitlines()
        seen = set()
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in seen:
                    seen.add(id(node))
                    targets = _targets(mods, m, node)
                    if targets:
                        explained = any(LOCAL_REASON.search(x) for x in
                                        lines[max(0, node.lineno - 2):node.end_lineno])
                        local.append((m, node.lineno, targets, explained))
    _SCANNED[root] = stamp, (dict(edges), local)
    return _SCANNED[root][1]


#: root -> (the versions of its files, what _scan found in them)
_SCANNED: dict = {}


def local_imports(root: str) -> List[tuple]:
    """(module, line, imported module) of each import of a tecomp module inside a function."""
    return sorted((m, line, targets[0]) for m, line, targets, _ in _scan(root)[1])


def unexplained_local_imports(root: str) -> List[tuple]:
    """(module, line) of each function-local import of a tecomp module that gives no
    :data:`LOCAL_REASON` (on the line above it or its own lines)."""
    return sorted((m, line) for m, line, _, explained in _scan(root)[1] if not explained)


def _modules(root: str) -> Dict[str, str]:
    mods = {}
    base = os.path.dirname(root)
    for dp, _, files in os.walk(root):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(dp, f)
                name = os.path.relpath(path, base)[:-3].replace(os.sep, ".")
                if name.endswith(".__init__"):
                    name = name[: -len(".__init__")]
                mods[name] = path
    return mods


def _targets(mods: Dict[str, str], cur: str, node) -> List[str]:
    pkg = cur if mods[cur].endswith("__init__.py") else cur.rsplit(".", 1)[0]
    out = []
    if isinstance(node, ast.ImportFrom):
        if node.level:
            parts = pkg.split(".")
            parts = parts[: len(parts) - node.level + 1]
            m = ".".join(parts + ([node.module] if node.module else []))
        else:
            m = node.module or ""
        for a in node.names:
            if f"{m}.{a.name}" in mods:
                out.append(f"{m}.{a.name}")
            elif m in mods:
                out.append(m)
    else:
        out.extend(a.name for a in node.names if a.name in mods)
    return [t for t in out if t != cur]


def graph(root: str) -> Dict[str, Set[str]]:
    """Module -> the tecomp modules it imports."""
    return defaultdict(set, {m: set(t) for m, t in _scan(root)[0].items()})


def cycles(root: str) -> List[Set[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    edges = graph(root)
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on: Set[str] = set()
    out: List[Set[str]] = []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(comp)

    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, 10000))
    try:
        for v in sorted(edges):
            if v not in index:
                visit(v)
    finally:
        sys.setrecursionlimit(old)
    return sorted(out, key=lambda c: sorted(c))


def new_cycles(root: str) -> List[Set[str]]:
    """The cycles that are not in ``KNOWN`` (a known one that grew counts as new)."""
    return [c for c in cycles(root) if not any(c <= k for k in KNOWN)]


def main() -> int:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    found = cycles(root)
    for c in found:
        tag = "known" if any(c <= k for k in KNOWN) else "NEW"
        print(f"{tag}: {' <-> '.join(sorted(c))}")
    new = new_cycles(root)
    print(f"{len(found)} import cycle(s), {len(new)} new")
    up = upward(root)
    for (a, b), uses in sorted(up.items()):
        tag = "known" if (a, b) in KNOWN_UPWARD else "NEW"
        print(f"{tag}: {a} -> {b} ({len(uses)}: "
              + ", ".join(f"{m} -> {t}" for m, t in uses[:3]) + (", ..." if len(uses) > 3 else "") + ")")
    new_up = new_upward(root)
    print(f"{len(up)} package import(s) against the layers, {len(new_up)} new")
    local = local_imports(root)
    print(f"{len(local)} function-local import(s) of tecomp modules (at most {LOCAL_IMPORTS})")
    return 1 if new or new_up or len(local) > LOCAL_IMPORTS else 0


if __name__ == "__main__":
    sys.exit(main())
