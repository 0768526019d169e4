"""A griffe extension for the API reference (mkdocs.yml): the docstring written after a
module constant's assignment (``KINDS = (...)`` then ``\"\"\"...\"\"\"``) for constants
that griffe inspects at run time, where it would otherwise show the docstring of the
value's type (``tuple``, ``dict``).  tests/test_public_api.py uses
:func:`attribute_docstring` for the same check."""
from __future__ import annotations

import ast
import inspect
import pathlib
from typing import Any, Dict, Optional

try:
    import griffe
except ImportError:   # (tests/test_public_api.py uses attribute_docstring without griffe)
    griffe = None

_CACHE: Dict[pathlib.Path, Dict[str, str]] = {}


def _docstrings(path: pathlib.Path) -> Dict[str, str]:
    """Name -> the string literal that follows its top-level assignment in ``path``."""
    if path not in _CACHE:
        out: Dict[str, str] = {}
        # (in the site's build, the module's tree that docs/mkdocs_hooks.py keeps for
        # inspect, which parses it too; only read here)
        parse = getattr(inspect.ast, "parse_kept", ast.parse)
        body = parse(path.read_text(encoding="utf-8")).body
        for a, b in zip(body, body[1:]):
            targets = a.targets if isinstance(a, ast.Assign) else (
                [a.target] if isinstance(a, ast.AnnAssign) else [])
            if isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant) \
                    and isinstance(b.value.value, str):
                for t in targets:
                    if isinstance(t, ast.Name):
                        out[t.id] = b.value.value
        _CACHE[path] = out
    return _CACHE[path]


def attribute_docstring(module_file: str, name: str) -> Optional[str]:
    """The docstring of constant ``name`` of the module at ``module_file``: written after
    its assignment there, or (a package re-exporting it) in a module of the package."""
    path = pathlib.Path(module_file)
    files = [path] + (sorted(path.parent.rglob("*.py")) if path.name == "__init__.py" else [])
    for f in files:
        doc = _docstrings(f).get(name)
        if doc:
            return doc
    return None


if griffe is not None:
    class AttributeDocstrings(griffe.Extension):
        """Set inspected constants' docstrings from their source."""

        def on_attribute_instance(self, *, node: Any, attr: "griffe.Attribute", agent: Any,
                                  **kwargs: Any) -> None:
            if isinstance(node, ast.AST):
                return   # static analysis reads the docstring itself
            module = attr.module
            if not module.path.startswith("tecomp") or not isinstance(module.filepath,
                                                                         pathlib.Path):
                return
            doc = attribute_docstring(str(module.filepath), attr.name)
            if doc is not None:
                attr.docstring = griffe.Docstring(doc, parent=attr)
            elif attr.docstring is not None and isinstance(type(node.obj).__doc__, str) \
                    and attr.docstring.value == type(node.obj).__doc__.strip():
                attr.docstring = None   # the value's type's docstring, not the constant's
