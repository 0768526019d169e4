"""No new import cycle in tecomp/ (``python -m tecomp.testing.imports`` prints them all)."""
import os

import tecomp
from tecomp.testing import imports

ROOT = os.path.dirname(os.path.abspath(tecomp.__file__))


def test_no_new_import_cycle():
    assert imports.new_cycles(ROOT) == []


def test_known_cycles_are_still_cycles():
    """A cycle broken since is taken off the list (so the list says what is left)."""
    found = imports.cycles(ROOT)
    for k in imports.KNOWN:
        assert any(c == k for c in found), f"no longer a cycle, remove it from KNOWN: {k}"


def test_the_checker_sees_a_function_local_import(tmp_path):
    pkg = tmp_path / "tecomp"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "a.py").write_text("from . import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from .a import x\n")
    (pkg / "c.py").write_text("from .sub import a\n")
    assert imports.cycles(str(pkg)) == [{"tecomp.sub.a", "tecomp.sub.b"}]
