"""What a new user meets before any kernel: the README's first two commands and CI's copy
of them, the package metadata (license, extras), and the one table of the TECOMP_*
environment variables."""
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _first_bash_block(text):
    m = re.search(r"^```bash\n(.*?)^```", text, re.S | re.M)
    assert m, "README.md has no ```bash block"
    return [ln for ln in m.group(1).splitlines() if ln.strip()]


def test_readme_starts_with_two_commands_in_a_venv_and_ci_runs_the_second():
    readme = (ROOT / "README.md").read_text()
    first = _first_bash_block(readme)
    assert len(first) == 2, first
    for cmd in first:
        # PEP 668: a stock Debian/Ubuntu Python refuses pip install outside a venv
        assert cmd.startswith("python3 -m venv .venv && . .venv/bin/activate && pip install "), cmd
    assert readme.index("```bash") < readme.index("```python"), "the commands come first"
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert first[1] in ci, f".ci/run does not run the README's second command {first[1]!r}"


def test_license_and_extras():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    project = meta["project"]
    assert project["license"] == "Apache-2.0"
    for f in project["license-files"]:
        assert (ROOT / f).is_file(), f
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
    assert not any(c.startswith("License ::") for c in project["classifiers"]), \
        "PEP 639: a license expression and a license classifier together are refused"
    extras = project["optional-dependencies"]
    assert {"torch", "cuda", "bench", "docs", "test"} <= set(extras)
    pins = {e: [d for d in deps if d.startswith("torch")] for e, deps in extras.items()}
    assert pins["torch"] == ["torch==2.13.0"] and pins["test"] == pins["torch"] == pins["bench"]
    assert any(d.startswith("mkdocstrings[python]") for d in extras["docs"])


def _c_macros():
    """Names in strings that are C macros, not variables: those of the exported ABI's
    header (tecomp_rt.h) and the include guards of generated C (TECOMP_HELPER_...)."""
    from tecomp.runtime import get_include

    header = Path(get_include(), "tecomp_rt.h").read_text()
    return set(re.findall(r"#define (TECOMP_[A-Z0-9_]+)", header)) | {"TECOMP_HELPER_"}


def _variables_in_code():
    """Every TECOMP_* name a string literal of the code starts with (os.environ.get(...),
    monkeypatch.setenv(...), a message naming the variable), C macros aside."""
    names = set()
    for d in ("tecomp", "tests", "benchmarks", "examples"):
        for p in (ROOT / d).rglob("*.py"):
            names |= set(re.findall(r"[\"'](TECOMP_[A-Z0-9][A-Z0-9_]*)", p.read_text(errors="replace")))
    macros = _c_macros()
    names = {n for n in names if not any(m.startswith(n) for m in macros)}
    # the cross compilers: TECOMP_CC_<ISA>, one per instruction set
    return {("TECOMP_CC_<ISA>" if n.startswith("TECOMP_CC_") else n) for n in names}


def test_every_environment_variable_is_in_the_table():
    doc = (ROOT / "docs" / "environment.md").read_text()
    rows = set(re.findall(r"^\| `(TECOMP_[A-Z0-9_<>]*)`", doc, re.M))
    code = _variables_in_code()
    assert code - rows == set(), f"read by tecomp, missing in docs/environment.md: {code - rows}"
    assert rows - code == set(), f"in docs/environment.md, read nowhere: {rows - code}"
    from tecomp.target import ISAS

    for isa in ISAS.values():
        assert f"`{isa.CROSS_CC_VARIABLE}`" in doc


def test_an_empty_variable_counts_as_unset(monkeypatch):
    from tecomp.codegen import cuda_emu

    monkeypatch.setenv("TECOMP_CUDA_EMU_MODE", "")
    assert cuda_emu.default_mode() == "threads"
    monkeypatch.setenv("TECOMP_CUDA_EMU_MODE", "serial")
    assert cuda_emu.default_mode() == "serial"


def test_no_test_module_shadows_an_installed_package():
    """pytest puts tests/ on sys.path, so a helper module there named like an installed
    top-level package replaces it for every import in the session: a tests/distributed.py
    made dask's ``from distributed import Client`` fail in the tests run after it."""
    import importlib.metadata
    import pathlib

    installed = set(importlib.metadata.packages_distributions())
    here = pathlib.Path(__file__).parent
    names = {p.stem for p in here.rglob("*.py")} | {p.name for p in here.rglob("*")
                                                     if p.is_dir()}
    clash = sorted(n for n in names if n in installed and not n.startswith("_"))
    assert not clash, f"tests/ modules named like installed packages: {clash}"
