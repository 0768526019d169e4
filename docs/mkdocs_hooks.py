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
# other parse (of a signature, which it rewrites) is not.
if sys.version_info < (3, 13) and not isinstance(inspect.ast, types.SimpleNamespace):
    _parse_source = functools.lru_cache(maxsize=32)(ast.parse)

    def _parse(source, *args, **kwargs):
        if (args or kwargs or not isinstance(source, str)
                or sys._getframe(1).f_code is not inspect.findsource.__code__):
            return ast.parse(source, *args, **kwargs)
        return _parse_source(source)

    inspect.ast = types.SimpleNamespace(**{**vars(ast), "parse": _parse})
