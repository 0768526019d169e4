"""No user string changes the code tecomp generates (issue 20): names go through
tecomp.ir.names, the one place where they become identifiers or display text.

Each hostile string is every name of a small program (placeholder, compute, reduce axis,
a pragma's string value); the generated text must have the same structure as with plain
names -- the printed IR the same lines and indentation, LLVM IR and CUDA C the same code
once identifiers, comments and strings are blanked -- and the results must not change."""
import shutil

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tecomp.ir.names import comment, display, identifier
from tecomp.testing.hostile import HOSTILE, HOSTILE_VALUES, check, check_value

HAVE_CXX = shutil.which("g++") is not None


@pytest.mark.parametrize("backend", ["ir", "llvm", "cuda"])
@pytest.mark.parametrize("name", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_name_leaves_the_code_alone(name, backend):
    ok, why = check(name, backend, run=backend == "llvm")
    assert ok, why


@pytest.mark.parametrize("backend", ["ir", "cuda"])
@pytest.mark.parametrize("value", HOSTILE_VALUES, ids=range(len(HOSTILE_VALUES)))
def test_hostile_pragma_value_leaves_the_code_alone(value, backend):
    """A pragma value that is no plain string (a str or float subclass whose repr spans
    lines, an object, a list, NaN...) is shown as its plain value or refused; once each
    was taken, and a multi-line repr broke the printed IR over lines."""
    ok, why = check_value(value, backend)
    assert ok, why


@pytest.mark.skipif(not HAVE_CXX, reason="the CUDA emulation needs a C++ compiler")
@pytest.mark.parametrize("name", HOSTILE[:3] + HOSTILE[6:9], ids=range(6))
def test_hostile_name_in_the_cuda_emulation(name):
    """The injection of issue 20 ran a shell command when the emulation library loaded;
    now it is a comment's text and the build computes the right answer."""
    ok, why = check(name, "cuda-emu", run=True)
    assert ok, why


_settings = settings(max_examples=25, deadline=None,
                     suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("backend", ["ir", "llvm", "cuda"])
def test_any_unicode_name_leaves_the_code_alone(backend):
    @_settings
    @given(st.text(min_size=0, max_size=40))
    def prop(name):
        ok, why = check(name, backend, run=backend == "llvm")
        assert ok, f"{name!r}: {why}"

    prop()


@given(st.text(max_size=200))
@settings(max_examples=300, deadline=None)
def test_display_and_identifier_are_safe(text):
    d = display(text)
    assert "\n" not in d and "\r" not in d and "\\" not in d
    assert all(ch.isprintable() for ch in d)
    assert d == display(text)                      # deterministic
    c = comment(text)
    assert c.startswith("// ") and "\n" not in c
    i = identifier(text)
    assert i and all(ch.isalnum() and ch.isascii() or ch == "_" for ch in i)
    assert not i[0].isdigit() and not i.startswith("__") and len(i) <= 96


def test_display_keeps_readable_names():
    assert display("conv1.weight") == "conv1.weight"
    assert display("конв.вес") == "конв.вес"
    assert display("A\n#include") == "A<U+000A>#include"
    assert display("A\u202eB") == "A<U+202E>B"
    assert display("x\\") == "x<U+005C>"
    assert identifier("i.outer") == "i_outer"
    assert identifier("1abc") == "v1abc"
    # long names stay distinct (LLVM truncates value names at 1024 characters)
    assert identifier("a" * 3000) != identifier("a" * 2999 + "b")
