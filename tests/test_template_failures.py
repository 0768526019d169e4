"""A CPU template that crashes is a tecomp bug, reported as one; a template that does not
fit (a ``TecompError``) leaves the DAG to the generic rules."""
from __future__ import annotations

import numpy as np
import pytest

import tecomp as tc
from tecomp.errors import InternalError, ScheduleError
from tecomp.strategy import Knobs, apply_rules
from tecomp.strategy.cpu import templates
from tecomp.target import cpu_model


def _gemm(n=48):
    A = tc.placeholder((n, n), name="A")
    B = tc.placeholder((n, n), name="B")
    k = tc.reduce_axis((0, n), name="k")
    C = tc.compute((n, n), lambda i, j: tc.sum(A[i, k] * B[k, j], axis=k), name="C")
    return [A, B, C]


def _with_first_template(monkeypatch, fn):
    monkeypatch.setattr(templates, "TEMPLATES", (fn,) + tuple(templates.TEMPLATES))


def test_a_crashing_template_says_it_is_a_tecomp_bug(monkeypatch):
    def broken(outs, knobs, info):
        raise ZeroDivisionError("division by zero")

    _with_first_template(monkeypatch, broken)
    with pytest.raises(InternalError) as e:
        apply_rules(_gemm(), Knobs(), cpu_model("llvm"), {})
    msg = str(e.value)
    assert "tecomp bug" in msg and "broken" in msg and "[C]" in msg
    assert "ZeroDivisionError: division by zero" in msg
    assert isinstance(e.value.__cause__, ZeroDivisionError)


def test_a_template_that_does_not_fit_leaves_the_dag_to_the_rules(monkeypatch):
    calls = []

    def refuses(outs, knobs, info):
        calls.append(1)
        raise ScheduleError("not mine")

    _with_first_template(monkeypatch, refuses)
    args = _gemm()
    s = apply_rules(args, Knobs(), cpu_model("llvm"), {})
    assert calls
    f = tc.build(s, args)
    a = np.random.default_rng(0).standard_normal((48, 48)).astype("float32")
    b = np.random.default_rng(1).standard_normal((48, 48)).astype("float32")
    c = np.empty((48, 48), "float32")
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
