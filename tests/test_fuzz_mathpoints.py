"""The elementwise math functions at their special points (tecomp.testing.mathpoints):
gradients against PyTorch's, NaN bits of a vectorized build against a serial one."""
import numpy as np
import pytest

import tecomp as tc
from tecomp.testing import mathpoints, ops

pytest.importorskip("torch")


@pytest.mark.parametrize("name", list(mathpoints.UNARY) + list(mathpoints.GRAD_BINARY))
def test_gradient_at_special_points_as_pytorch(name):
    assert mathpoints.grad_differences(name, "float32") == []


@pytest.mark.parametrize("name", ["atan2", "pow", "sqrt", "log"])
def test_float64_gradient_at_special_points_as_pytorch(name):
    assert mathpoints.grad_differences(name, "float64") == []


def test_a_wrong_rule_is_flagged(monkeypatch):
    """The check sees atan2's old gradient (NaN at (0, 0), session 25)."""
    from tecomp.autodiff import rules
    monkeypatch.setitem(rules._INTRINSICS, "atan2",
                        lambda a, out: (a[1] / (a[1] * a[1] + a[0] * a[0]),
                                        -a[0] / (a[1] * a[1] + a[0] * a[0])))
    bad = mathpoints.grad_differences("atan2", "float32")
    assert any("at (0.0, 0.0)" in line and "nan" in line for line in bad), bad


@pytest.mark.parametrize("name", list(mathpoints.UNARY) + list(mathpoints.BINARY))
def test_nan_bits_vectorized_as_serial(name):
    assert mathpoints.nan_bit_differences(name, "float32") == []


@pytest.mark.parametrize("name", ["exp", "atan2", "pow", "add", "maximum"])
def test_float64_nan_bits_vectorized_as_serial(name):
    assert mathpoints.nan_bit_differences(name, "float64") == []


def test_nans_cover_sign_quietness_and_payload():
    x = mathpoints.nans("float32", 12).view(np.uint32)
    assert np.isnan(x.view(np.float32)).all()
    assert {bool(v >> 31) for v in x} == {False, True}
    assert {bool(v & (1 << 22)) for v in x} == {False, True}


@pytest.mark.parametrize("vec", [False, True])
def test_unary_minus_of_plus_zero_is_minus_zero(vec):
    """``-x`` is IEEE's negation (numpy's, PyTorch's): -(+0.0) is -0.0 and -(-0.0) is
    +0.0 (it was ``0 - x``, +0.0 for both; found by the gradient check: d cos / dx at +0
    is -0.0 in PyTorch); the IR prints it ``-X[i]`` and parses it back; a float
    ``0.0 - x`` is a subtraction, printed as one."""
    from tecomp.ir.parse import parse
    X = tc.placeholder((16,), "float32", name="X")
    Y = tc.compute((16,), lambda i: -X[i], name="Y")
    s = tc.create_schedule(Y.op)
    if vec:
        s[Y].vectorize(Y.op.axis[0])
    text = str(tc.lower(s, [X, Y]))
    assert "= -X[" in text, text
    assert str(parse(text)) == text
    f = tc.build(s, [X, Y])
    x = np.tile(np.asarray([0.0, -0.0, 1.0, -2.0], "float32"), 4)
    y = np.ones(16, "float32")
    f(x, y)
    np.testing.assert_array_equal(np.signbit(y), np.signbit(-x))
    Z = tc.compute((16,), lambda i: tc.const(0.0, "float32") - X[i], name="Z")
    assert "0f - X[" in str(tc.lower(tc.create_schedule(Z.op), [X, Z]))


def test_the_ops_family_draws_mathpoints():
    seeds = [s for s in range(400) if ops.draw_op_case(s).spec["kind"] == "mathpoint"]
    assert 5 <= len(seeds) <= 40
    case = ops.draw_op_case(seeds[0])
    assert "special points" in case.source()
    assert ops.run_op_case(case).kind == "ok"
