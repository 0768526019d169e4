"""mkdocs hooks (mkdocs.yml ``hooks:``): the benchmark results, which live in
``benchmarks/`` next to the scripts that measure them, are published as the site's
``benchmarks/`` pages (RESULTS.md and the files it links: the run records, the design
decisions, the plots), so their relative links keep working."""
from __future__ import annotations

import os

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
