"""mkdocs hooks (mkdocs.yml ``hooks:``): the benchmark results, which live in
``benchmarks/`` next to the scripts that measure them, are published as the site's
``benchmarks/`` pages (RESULTS.md and the files it links: the run records, the design
decisions, the plots), so their relative links keep working; and the API reference's
inspection parses each module's source once (below)."""
from __future__ import annotations

import ast
import functools
import inspect
import os
import sys
import types

from mkdocs.structure.files import File

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCHMARKS = os.path.join(ROOT, "benchmarks")
#: what of benchmarks/ the site shows
PUBLISHED = (".md", ".png", ".svg")


def on_files(files, config):
    for dirpath, dirnames, filenames in os.walk(BENCHMARKS):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "__")))
        for name in sorted(filenames):
            if not name.endswith(PUBLISHED):
                continue
            path = os.path.join(dirpath, name)
            uri = "benchmarks/" + os.path.relpath(path, BENCHMARKS).replace(os.sep, "/")
            if files.get_file_from_path(uri) is None:
                files.append(File.generated(config, uri, abs_src_path=path))
    return files


# The reference pages are made by griffe's run-time inspection (mkdocs.yml:
# force_inspection), which asks ``inspect.getsourcelines`` for every class; before
# Python 3.13 that parses the class's whole module again for each class (``ast.parse``
# in ``inspect.findsource``): about 800 parses of tecomp's modules, a sixth of the
# build's time.  The tree of one source text is the same every time and findsource only
# reads it (its class finder visits it), so findsource's parses are kept; inspect's
# other parse (of a signature, which it rewrites) is not.  Its class finder then walks
# the module's tree until it meets the class (about 460 walks); the walk is done once
# per tree instead, noting where each qualified name first appears in that same order
# (the finder's answer: the first match).
if sys.version_info < (3, 13) and not isinstance(inspect.ast, types.SimpleNamespace):
    _parse_source = functools.lru_cache(maxsize=32)(ast.parse)

    def _parse(source, *args, **kwargs):
        if (args or kwargs or not isinstance(source, str)
                or sys._getframe(1).f_code is not inspect.findsource.__code__):
            return ast.parse(source, *args, **kwargs)
        return _parse_source(source)

    # (``parse_kept``: the kept trees, which docs/griffe_attribute_docs.py reads too)
    inspect.ast = types.SimpleNamespace(**{**vars(ast), "parse": _parse,
                                           "parse_kept": _parse_source})

    class _ClassLines(ast.NodeVisitor):
        """Every class's qualified name -> the 0-based line inspect's ``_ClassFinder``
        returns for it (its first decorator's, else its ``class`` line), first match
        kept, visiting as that finder does."""

        def __init__(self):
            self.stack, self.lines = [], {}

        def visit_FunctionDef(self, node):
            self.stack += [node.name, "<locals>"]
            self.generic_visit(node)
            del self.stack[-2:]

        visit_AsyncFunctionDef = visit_FunctionDef

        def visit_ClassDef(self, node):
            self.stack.append(node.name)
            first = node.decorator_list[0] if node.decorator_list else node
            self.lines.setdefault(".".join(self.stack), first.lineno - 1)
            self.generic_visit(node)
            self.stack.pop()

    _CLASS_LINES: dict = {}   # id(tree) -> (tree, its _ClassLines.lines): 64 trees kept

    class _IndexedClassFinder:
        """inspect's ``_ClassFinder(qualname).visit(tree)``, from one walk per tree."""

        def __init__(self, qualname):
            self.qualname = qualname

        def visit(self, tree):
            hit = _CLASS_LINES.get(id(tree))
            if hit is None or hit[0] is not tree:
                finder = _ClassLines()
                finder.visit(tree)
                if len(_CLASS_LINES) >= 64:
                    _CLASS_LINES.clear()
                hit = _CLASS_LINES[id(tree)] = (tree, finder.lines)
            line = hit[1].get(self.qualname)
            if line is not None:
                raise inspect.ClassFoundException(line)

    if hasattr(inspect, "_ClassFinder") and hasattr(inspect, "ClassFoundException"):
        inspect._ClassFinder = _IndexedClassFinder
