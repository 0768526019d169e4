"""The must-fail catalogue (``tests/must_fail/``) as a whole: it runs in a fresh process
without crashing it, and every error class a user can meet has a test there."""
import glob
import inspect
import os
import re
import subprocess
import sys

import pytest

import tecomp as tc
from tecomp import errors

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MUST_FAIL = os.path.join(ROOT, "tests", "must_fail")

#: error classes no program written with tecomp's API can meet: they report hand-written
#: IR (tecomp.ir) that the interpreter's GPU model rejects or a kernel's own assertion,
#: and are tested where that IR is (tests/test_interp.py, tests/test_codegen_llvm.py)
NOT_FROM_THE_API = {"GPUModelError", "RaceError", "KernelAssertionError"}


@pytest.mark.skipif(
    os.environ.get("TECOMP_LONG_TESTS", "") in ("", "0"),
    reason="the catalogue again, in its own process (30 s): the default run already runs "
    "tests/must_fail in-process, where a crash fails the run with pytest's faulthandler "
    "traceback; set TECOMP_LONG_TESTS=1")
def test_the_catalogue_in_a_fresh_process_never_crashes():
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env["PYTHONFAULTHANDLER"] = "1"
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        MUST_FAIL], capture_output=True, text=True, env=env, cwd=ROOT,
                       timeout=900)
    out = p.stdout + p.stderr
    assert p.returncode >= 0, f"the process died of signal {-p.returncode}:\n{out[-3000:]}"
    assert "Fatal Python error" not in out, out[-3000:]
    assert p.returncode == 0, out[-3000:]
    assert re.search(r"\b\d{3,} passed", out), out[-2000:]


def test_every_error_class_a_user_can_meet_has_a_must_fail_test():
    text = "\n".join(open(f).read() for f in glob.glob(os.path.join(MUST_FAIL, "*.py")))
    classes = [c.__name__ for c in vars(errors).values()
               if inspect.isclass(c) and issubclass(c, errors.TecompError)
               and hasattr(tc, c.__name__)]
    assert len(classes) >= 20
    missing = [c for c in classes
               if c not in NOT_FROM_THE_API and not re.search(rf"\b{c}\b", text)]
    assert not missing, f"error classes without a test in tests/must_fail: {missing}"
