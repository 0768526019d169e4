"""The public API: every name in each public module's ``__all__`` exists, has a docstring,
and (when it takes parameters) a numpy-style ``Parameters`` section naming each of them;
every public function has type hints on its whole signature; the package ships
``py.typed``.  The API reference (docs/reference/) is generated from these docstrings."""
from __future__ import annotations

import importlib
import inspect
import pathlib
import re
import sys

import pytest

import tecomp

ROOT = pathlib.Path(__file__).resolve().parent.parent

#: the modules users import (README.md, docs/, examples/); one reference page each
PUBLIC_MODULES = ["tecomp", "tecomp.nn", "tecomp.torch", "tecomp.dynamo", "tecomp.autoschedule",
                  "tecomp.autodiff", "tecomp.target", "tecomp.runtime", "tecomp.testing",
                  "tecomp.errors", "tecomp.utils"]

_SECTION = re.compile(r"^(\s*)Parameters\n\1-{10,}\n", re.M)


def _public_names():
    for m in PUBLIC_MODULES:
        mod = importlib.import_module(m)
        for name in getattr(mod, "__all__", ()):
            yield m, name


def _signature(obj):
    """The parameters a caller passes to ``obj`` (a class: its constructor's), or None
    where Python cannot tell."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return None
    return [p for p in sig.parameters.values() if p.name not in ("self", "cls")]


def documented_parameters(doc: str):
    """The names listed in the ``Parameters`` section of a numpy docstring, or None when it
    has none."""
    m = _SECTION.search(doc)
    if m is None:
        return None
    indent = m.group(1)
    names = set()
    for line in doc[m.end():].splitlines():
        if not line.strip():
            continue
        if not line.startswith(indent) or (line[len(indent):][:1].isspace()):
            continue          # a description line (deeper) or a line outside the section
        head = line[len(indent):]
        if re.match(r"^-{3,}$", head):
            break             # the next section's underline
        mh = re.match(r"^([*\w]+(?:\s*,\s*[*\w]+)*)\s*(?::|$)", head)
        if mh is None:
            break
        if head.rstrip() in ("Returns", "Raises", "Examples", "Notes", "Yields", "Attributes",
                             "See Also", "Warns", "Other Parameters"):
            break
        names.update(n.strip().lstrip("*") for n in mh.group(1).split(","))
    return names


def test_every_public_module_has_all_and_a_docstring():
    for m in PUBLIC_MODULES:
        mod = importlib.import_module(m)
        names = getattr(mod, "__all__", None)
        assert isinstance(names, list) and all(isinstance(n, str) for n in names), \
            f"{m}: no __all__ list of names"
        assert len(set(names)) == len(names), f"{m}.__all__ repeats a name"
        assert inspect.getdoc(mod), f"{m}: no module docstring"


@pytest.mark.parametrize("module,name", list(_public_names()))
def test_public_name(module, name):
    mod = importlib.import_module(module)
    assert hasattr(mod, name), f"{module}.__all__ names {name!r}, which {module} does not have"
    obj = getattr(mod, name)
    where = f"{module}.{name}"
    if not (callable(obj) or inspect.ismodule(obj)):
        # data (a constant): documented by a string literal after its assignment, which is
        # what the API reference shows
        assert _attribute_docstring(mod, name), f"{where}: no docstring after its assignment"
        return
    doc = inspect.getdoc(obj)
    assert doc, f"{where}: no docstring"
    if inspect.ismodule(obj) or (inspect.isclass(obj) and issubclass(obj, BaseException)):
        return                # (exceptions are raised by tecomp, not built by users)
    params = _signature(obj)
    if params:
        listed = documented_parameters(doc)
        assert listed is not None, f"{where}: takes parameters but its docstring has no " \
                                   f"Parameters section"
        missing = [p.name for p in params if p.name not in listed and not p.name.startswith("_")]
        assert not missing, f"{where}: Parameters section does not list {missing}"
    if inspect.isfunction(obj) or (callable(obj) and not inspect.isclass(obj)):
        _check_hints(obj, where)


def _check_hints(obj, where):
    fn = obj if inspect.isfunction(obj) else type(obj).__call__
    sig = inspect.signature(fn)
    bare = [p.name for p in sig.parameters.values()
            if p.name not in ("self", "cls") and p.annotation is inspect.Parameter.empty]
    assert not bare, f"{where}: parameters without a type hint: {bare}"
    assert sig.return_annotation is not inspect.Signature.empty, \
        f"{where}: no return type hint"


def _attribute_docstring(mod, name):
    """The docstring written after ``name = ...`` in ``mod``'s source (its package's, for
    a package), or None: what the API reference shows (docs/griffe_attribute_docs.py)."""
    sys.path.insert(0, str(ROOT / "docs"))
    try:
        from griffe_attribute_docs import attribute_docstring
    finally:
        sys.path.remove(str(ROOT / "docs"))
    return attribute_docstring(mod.__file__, name)


def test_documented_parameters_reads_numpy_sections():
    doc = inspect.cleandoc("""Do it.

    Parameters
    ----------
    a, b : int
        Two.
    *args : Expr
        More.
    flag : bool, optional

    Returns
    -------
    int
    """)
    assert documented_parameters(doc) == {"a", "b", "args", "flag"}
    assert documented_parameters("Do it.\n\nReturns\n-------\nint\n") is None


def test_py_typed_ships_with_the_package():
    root = pathlib.Path(tecomp.__file__).parent
    assert (root / "py.typed").is_file()
    text = (root.parent / "pyproject.toml").read_text(encoding="utf-8")
    m = re.search(r"\[tool\.setuptools\.package-data\]\s*\ntecomp\s*=\s*\[([^\]]*)\]", text)
    assert m and '"py.typed"' in m.group(1), "pyproject.toml's package-data must list py.typed"


def _examples():
    seen = set()
    for module, name in _public_names():
        obj = getattr(importlib.import_module(module), name, None)
        doc = inspect.getdoc(obj) if callable(obj) else None
        if doc and ">>>" in doc and id(obj) not in seen:
            seen.add(id(obj))
            yield f"{module}.{name}", doc


@pytest.mark.parametrize("where,doc", list(_examples()))
def test_docstring_examples_run(where, doc):
    """The ``Examples`` of the public docstrings run as printed (doctest: the output
    shown, where one is, is compared)."""
    import doctest

    parser = doctest.DocTestParser()
    test = parser.get_doctest(doc, {}, where, None, 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    out = []
    runner.run(test, out=out.append)
    assert runner.failures == 0, "".join(out)
