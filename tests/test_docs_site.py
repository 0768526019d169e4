"""The documentation site (mkdocs.yml, docs/): ``mkdocs build --strict`` passes, every
nav entry and every public module's reference page exists, and the error catalogue
(docs/errors.md) is up to date with tests/must_fail/."""
from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys

import pytest

from test_public_api import PUBLIC_MODULES

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs")


def _gen_errors():
    sys.path.insert(0, DOCS)
    try:
        import gen_errors
    finally:
        sys.path.remove(DOCS)
    return gen_errors


def _nav_files():
    """The page paths mkdocs.yml's nav lists (``- Title: path.md`` or ``- path.md``)."""
    text = open(os.path.join(ROOT, "mkdocs.yml"), encoding="utf-8").read()
    nav = text[text.index("\nnav:"):]
    return re.findall(r"^\s*-\s+(?:[^:\n]+:\s+)?(\S+\.md)\s*$", nav, re.M)


def test_every_nav_page_exists():
    pages = _nav_files()
    assert "index.md" in pages and "errors.md" in pages and len(pages) > 25
    missing = []
    for p in pages:
        # benchmarks/ pages are published from the repository's benchmarks/ by
        # docs/mkdocs_hooks.py
        path = os.path.join(ROOT, p) if p.startswith("benchmarks/") else os.path.join(DOCS, p)
        if not os.path.isfile(path):
            missing.append(p)
    assert not missing, f"mkdocs.yml's nav lists pages that do not exist: {missing}"


def test_every_public_module_has_a_reference_page():
    pages = {p for p in _nav_files() if p.startswith("reference/")}
    for m in PUBLIC_MODULES:
        page = f"reference/{m.split('.')[-1]}.md"
        assert page in pages, f"{m}: no {page} in mkdocs.yml's nav"
        text = open(os.path.join(DOCS, page), encoding="utf-8").read()
        assert re.search(rf"^::: {re.escape(m)}$", text, re.M), f"{page} does not render {m}"


def test_error_catalogue_is_up_to_date():
    g = _gen_errors()
    text = open(g.PAGE, encoding="utf-8").read()
    entries = g.read_tests()
    messages = g.recorded_in_page(text)
    stale = g.stale_messages(entries, messages)
    assert not stale, "docs/errors.md records messages the tests no longer expect " \
                      "(run python3 docs/gen_errors.py):\n" + "\n".join(stale[:10])
    assert g.render(entries, messages) == text, \
        "docs/errors.md is not what tests/must_fail/ gives (a test was added, removed or " \
        "changed): run python3 docs/gen_errors.py"
    assert all(messages.get(e.key) for e in entries), "a must-fail program without a message"


def test_error_catalogue_check_sees_a_changed_message_and_a_new_test():
    g = _gen_errors()
    text = open(g.PAGE, encoding="utf-8").read()
    entries = g.read_tests()
    messages = g.recorded_in_page(text)
    e = next(e for e in entries if e.patterns)
    changed = dict(messages)
    changed[e.key] = [(c, "a message tecomp no longer gives") for c, _ in messages[e.key]]
    assert g.stale_messages(entries, changed)
    new = g.Entry("tests/must_fail/test_new.py", "test_new", "def test_new():\n    pass",
                  ["ShapeError"], [])
    assert g.render(entries + [new], messages) != text


def _missing(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is None
    except ModuleNotFoundError:   # (its parent package is missing)
        return True


@pytest.mark.skipif(any(_missing(m) for m in ("mkdocs", "material",
                                              "mkdocstrings_handlers.python")),
                    reason="mkdocs, mkdocs-material or mkdocstrings[python] is not installed "
                           "(pip install -e '.[docs]')")
def test_mkdocs_build_strict(tmp_path):
    """mkdocs.yml as it is, less the search plugin (its index is mkdocs' own work, about
    a seventh of the build): a config that INHERITs it, written beside the site; its
    relative paths are the repository's, given here in full."""
    config = tmp_path / "mkdocs.yml"
    import yaml

    parent = yaml.safe_load(open(os.path.join(ROOT, "mkdocs.yml"), encoding="utf-8"))
    python = parent["plugins"]["mkdocstrings"]["handlers"]["python"]
    # griffe's extensions given by path (``docs/x.py:Class``) are found from the config's
    # folder too
    extensions = [os.path.join(ROOT, e) if isinstance(e, str) and ".py" in e else e
                  for e in python["options"].get("extensions", [])]
    config.write_text(json.dumps({   # (JSON is YAML)
        "INHERIT": os.path.join(ROOT, "mkdocs.yml"),
        "docs_dir": DOCS,
        "hooks": [os.path.join(ROOT, h) for h in parent["hooks"]],
        "plugins": {"search": {"enabled": False},
                    "mkdocstrings": {"handlers": {"python": {
                        "paths": [os.path.join(ROOT, p) for p in python["paths"]],
                        "options": {"extensions": extensions}}}}},
    }), encoding="utf-8")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1",
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q",
                        "-f", str(config), "-d", str(tmp_path / "site")], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=900)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-5000:]
    # the API reference was generated from the docstrings
    ref = (tmp_path / "site" / "reference" / "tecomp" / "index.html").read_text()
    assert 'id="tecomp.placeholder"' in ref and "Parameters" in ref
    assert (tmp_path / "site" / "benchmarks" / "RESULTS" / "index.html").is_file()
    assert not (tmp_path / "site" / "search").exists()     # (the plugin was off)
