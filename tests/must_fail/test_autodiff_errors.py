"""Programs that must fail: autodiff mistakes.  Each asserts the error class and its text."""
import numpy as np
import pytest

import tecomp as tc
from tecomp import autodiff as ad
from tecomp.ir.expr import Call


def _xy():
    X = tc.placeholder((4,), name="X")
    Y = tc.compute((4,), lambda i: X[i] * 2.0, name="Y")
    return X, Y


def test_integer_input():
    ids = tc.placeholder((4,), "int32", name="ids")
    Y = tc.compute((4,), lambda i: ids[i].astype("float32"), name="Y")
    with pytest.raises(tc.AutodiffError,
                       match=r"input ids has dtype int32, which is not differentiable"):
        tc.gradient(Y, [ids])


def test_integer_output():
    X = tc.placeholder((4,), name="X")
    Y = tc.compute((4,), lambda i: X[i].astype("int32"), name="Y")
    with pytest.raises(tc.AutodiffError, match=r"output Y has dtype int32; only a float output"):
        tc.gradient(Y, X)


def test_head_of_the_wrong_shape():
    X, Y = _xy()
    H = tc.placeholder((5,), name="H")
    with pytest.raises(tc.AutodiffError, match=r"head H has shape \(5\) and dtype float32 but "
                       r"output Y has shape \(4\)"):
        tc.gradient(Y, X, head=H)


def test_head_of_the_wrong_dtype():
    X, Y = _xy()
    H = tc.placeholder((4,), "float64", name="H")
    with pytest.raises(tc.AutodiffError, match=r"the head must match the output exactly"):
        tc.gradient(Y, X, head=H)


def test_head_not_a_tensor():
    X, Y = _xy()
    with pytest.raises(tc.AutodiffError, match=r"head must be a tensor of Y's shape"):
        tc.gradient(Y, X, head=np.ones(4))


def test_no_inputs():
    X, Y = _xy()
    with pytest.raises(tc.AutodiffError, match=r"inputs must be a tensor or a non-empty list"):
        tc.gradient(Y, [])


def test_user_reducer_without_a_derivative():
    X = tc.placeholder((4, 4), name="X")
    hyp = tc.comm_reducer(lambda x, y: tc.sqrt(x * x + y * y), lambda t: tc.const(0, t),
                          name="hypot")
    k = tc.reduce_axis(4, name="k")
    Y = tc.compute((4,), lambda i: hyp(X[i, k], axis=k), name="Y")
    with pytest.raises(tc.AutodiffError, match=r"compute Y reduces with the comm_reducer "
                       r"'hypot', which has no derivative; register one with "
                       r"tecomp.autodiff.register_derivative\(reducer"):
        tc.gradient(Y, X)


def test_intrinsic_without_a_derivative():
    X = tc.placeholder((4,), name="X")
    Y = tc.compute((4,), lambda i: Call("asinh", (X[i],), "float32"), name="Y")
    with pytest.raises(tc.AutodiffError, match=r"no derivative is known for the intrinsic "
                       r"'asinh' used in compute Y; register one with "
                       r"tecomp.autodiff.register_derivative\('asinh'"):
        tc.gradient(Y, X)


def test_registering_twice_needs_override():
    with pytest.raises(tc.AutodiffError, match=r"the intrinsic 'exp' already has a derivative; "
                       r"pass override=True"):
        ad.register_derivative("exp", lambda args, out: (out,))


def test_registering_a_builtin_reducer_needs_override():
    with pytest.raises(tc.AutodiffError, match=r"the built-in reducer sum already has a "
                       r"derivative"):
        ad.register_derivative(tc.sum, lambda x, rest: 1.0)


def test_registering_for_something_else():
    with pytest.raises(tc.AutodiffError, match=r"cannot register a derivative for 3"):
        ad.register_derivative(3, lambda *a: None)


def test_rule_with_the_wrong_number_of_partials():
    X = tc.placeholder((4,), name="X")
    Y = tc.compute((4,), lambda i: Call("twoargs", (X[i],), "float32"), name="Y")
    ad.register_derivative("twoargs", lambda args, out: (out, out))
    try:
        with pytest.raises(tc.AutodiffError, match=r"the derivative rule of 'twoargs' returned "
                           r"2 partial\(s\) for 1 argument\(s\)"):
            tc.gradient(Y, X)
    finally:
        ad.unregister_derivative("twoargs")


def test_custom_vjp_with_the_wrong_count():
    X, Y = _xy()
    ad.register_derivative(Y, lambda adj, x: [adj, adj])
    try:
        with pytest.raises(tc.AutodiffError, match=r"the registered derivative of Y returned 2 "
                           r"tensor\(s\) for its 1 input\(s\) \(X\)"):
            tc.gradient(Y, X)
    finally:
        ad.unregister_derivative(Y)


def test_custom_vjp_with_the_wrong_shape():
    X, Y = _xy()
    ad.register_derivative(Y, lambda adj, x: [tc.compute((3,), lambda i: adj[i], name="g")])
    try:
        with pytest.raises(tc.AutodiffError, match=r"returned Tensor\(g, .*\) for input X; "
                           r"return a tensor of its shape \(4\)"):
            tc.gradient(Y, X)
    finally:
        ad.unregister_derivative(Y)


def test_gradcheck_needs_integer_values():
    X = tc.placeholder((4, 3), "float64", name="X")
    ids = tc.placeholder((2,), "int32", name="ids")
    Y = tc.compute((2, 3), lambda b, j: X[ids[b], j], name="Y")
    with pytest.raises(tc.AutodiffError, match=r"give a value for the integer placeholder ids"):
        ad.gradcheck(Y, [X], target="reference")


def test_gradcheck_inputs_are_placeholders():
    X, Y = _xy()
    Z = tc.compute((4,), lambda i: Y[i] + 1.0, name="Z")
    with pytest.raises(tc.AutodiffError, match=r"gradcheck: inputs must be placeholders"):
        ad.gradcheck(Z, [Y], target="reference")


def test_register_tag_derivative_needs_a_tag_and_a_rule():
    with pytest.raises(tc.AutodiffError, match=r"register_tag_derivative\(tag, rule\): give a tag"):
        ad.register_tag_derivative("", lambda out, adj, wanted: None)
    import tecomp.nn  # noqa: F401  (registers the conv2d rules; run alone, nothing had)

    with pytest.raises(tc.AutodiffError, match=r"already has a derivative rule; pass override"):
        ad.register_tag_derivative("conv2d_nchw", lambda out, adj, wanted: None)


def test_tag_rule_returning_a_wrong_shape():
    X = tc.placeholder((4,), name="X")
    Y = tc.compute((4,), lambda i: X[i] * 2.0, name="Y", tag="test_bad_tag_rule")
    bad = tc.compute((3,), lambda i: X[i], name="bad")
    ad.register_tag_derivative("test_bad_tag_rule", lambda out, adj, wanted: {X: bad})
    try:
        with pytest.raises(tc.AutodiffError, match=r"tag 'test_bad_tag_rule' of Y returned "
                                                   r".*bad.* for 'X'; return a dict"):
            tc.gradient(Y, X, head=tc.placeholder((4,), name="H"))
    finally:
        ad.unregister_tag_derivative("test_bad_tag_rule")


def test_register_tag_equivalent_needs_a_tag_and_a_function():
    with pytest.raises(tc.AutodiffError, match=r"register_tag_equivalent\(tag, fn\): give a tag"):
        ad.register_tag_equivalent("conv", "not callable")
    import tecomp.nn  # noqa: F401  (registers the Winograd equivalents)

    with pytest.raises(tc.AutodiffError, match=r"already has an equivalent; pass override"):
        ad.register_tag_equivalent("winograd_conv2d_nchw", lambda out: None)


@pytest.mark.parametrize("bad", ["shape", "pair"])
def test_tag_equivalent_returning_a_wrong_tensor(bad):
    X = tc.placeholder((4,), name="X")
    Y = tc.compute((4,), lambda i: X[i] * 2.0, name="Y", tag="test_bad_equivalent")
    other = tc.compute((3,), lambda i: X[i], name="other")
    ad.register_tag_equivalent("test_bad_equivalent", lambda out: (
        (other, (X,)) if bad == "shape" else (out, X)))
    try:
        with pytest.raises(tc.AutodiffError, match=r"the equivalent registered for the tag "
                                                   r"'test_bad_equivalent' of Y returned .*; "
                                                   r"return None or \(tensor, reads\)"):
            tc.gradient(Y, X)
    finally:
        ad.unregister_tag_equivalent("test_bad_equivalent")


def test_gradient_through_a_multi_output_compute():
    X = tc.placeholder((4, 6), name="X")
    k = tc.reduce_axis((0, 6), name="k")
    S, Q = tc.compute((4,), lambda i: (tc.sum(X[i, k], axis=k), tc.sum(X[i, k] * X[i, k], axis=k)),
                      name="mom")
    V = tc.compute((4,), lambda i: Q[i] - S[i] * S[i], name="V")
    with pytest.raises(tc.AutodiffError, match=r"tc.gradient: V depends on mom, a multi-output "
                                               r"compute \(2 outputs.*compute its outputs in "
                                               r"separate tc.compute calls"):
        tc.gradient(V, [X])
