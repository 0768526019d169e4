"""Import cycles among tecomp's modules.

    python -m tecomp.testing.imports        # prints every cycle; exit status 1 if any is new

Every ``import`` and ``from ... import`` in ``tecomp/`` counts, at module level or inside a
function (a function-local import that dodges a cycle is still one).  The modules that
import each other, directly or around a longer loop, are the strongly connected
components of that graph.  ``KNOWN`` lists the cycles not broken yet, so that a new one
fails the test suite (``tests/test_imports.py``) while these are worked off.
"""
from __future__ import annotations

import ast
import os
import sys
from collections import defaultdict
from typing import Dict, List, Set

#: cycles not broken yet (each a set of modules); a cycle that is not one of these fails
KNOWN: list = []  # none left: the IR core registers its services instead (ir.expr.SERVICES, ir.arith.SIMPLIFY)


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
    mods = _modules(root)
    edges: Dict[str, Set[str]] = defaultdict(set)
    for m, path in mods.items():
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                edges[m].update(_targets(mods, m, node))
        edges.setdefault(m, set())
    return edges


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
    return 1 if new else 0


if __name__ == "__main__":
    sys.exit(main())
