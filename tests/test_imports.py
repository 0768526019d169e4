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


def test_no_package_imports_against_the_layers():
    new = imports.new_upward(ROOT)
    assert new == {}, ("a package imports from its own layer or one above "
                       "(tecomp.testing.imports.LAYERS): " + repr(new))


def test_known_upward_imports_are_still_there():
    """One fixed since is taken off the list (so the list says what is left)."""
    found = imports.upward(ROOT)
    for k in imports.KNOWN_UPWARD:
        assert k in found, f"no longer imported, remove it from KNOWN_UPWARD: {k}"


def test_function_local_imports_only_go_down():
    n = len(imports.local_imports(ROOT))
    assert n <= imports.LOCAL_IMPORTS, (
        f"{n} function-local imports of tecomp modules, more than LOCAL_IMPORTS "
        f"({imports.LOCAL_IMPORTS}): import at the top of the module")
    assert n == imports.LOCAL_IMPORTS, f"{n} now: lower LOCAL_IMPORTS to {n}"


def test_the_layer_check_sees_an_upward_import(tmp_path):
    pkg = tmp_path / "tecomp"
    for sub in ("ir", "lower", "nn"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "ir" / "expr.py").write_text("def f():\n    from ..lower import passes\n")
    (pkg / "lower" / "passes.py").write_text("from ..ir import expr\n")
    (pkg / "nn" / "ops.py").write_text("from ..ir.expr import f\n")
    (pkg / "extra.py").write_text("from . import ir\n")
    up = imports.upward(str(pkg))
    assert up == {("tecomp.ir", "tecomp.lower"): [("tecomp.ir.expr", "tecomp.lower.passes")],
                  ("tecomp.extra", "tecomp.ir"): [("tecomp.extra", "tecomp.ir")]}
    assert imports.local_imports(str(pkg)) == [("tecomp.ir.expr", 2, "tecomp.lower.passes")]


def test_every_function_local_import_says_why():
    """Each function-local import of a tecomp module names its reason, ``(lazy: ...)`` or
    ``(cycle: ...)``, in a comment beside or above it."""
    assert imports.unexplained_local_imports(ROOT) == []


def test_the_checker_sees_an_unexplained_local_import(tmp_path):
    pkg = tmp_path / "tecomp"
    (pkg / "ir").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "ir" / "__init__.py").write_text("")
    (pkg / "ir" / "expr.py").write_text(
        "def f():\n    from . import op\n\n\ndef g():\n"
        "    # (lazy: numpy is slow to import)\n    from . import op\n")
    (pkg / "ir" / "op.py").write_text("")
    assert imports.unexplained_local_imports(str(pkg)) == [("tecomp.ir.expr", 2)]
