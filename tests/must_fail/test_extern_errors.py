"""Programs that must fail: extern stages (tc.extern, tc.call_packed, tc.register_func).
Each asserts the error class and its text."""
import numpy as np
import pytest

import tecomp as tc


def _copy(x, y):
    y[:] = x


def _ext(X=None, name="Y"):
    X = X if X is not None else tc.placeholder((4,), name="X")
    return X, tc.extern((4,), [X], lambda ins, outs: tc.call_packed(_copy, ins[0], outs[0]),
                        name=name)


def test_fcompute_returns_no_call():
    X = tc.placeholder((4,), name="X")
    with pytest.raises(tc.ComputeError, match=r"extern Y: fcompute\(ins, outs\) returned 3; return "
                                              r"tc.call_packed\(func"):
        tc.extern((4,), [X], lambda ins, outs: 3, name="Y")


def test_call_packed_given_a_tensor():
    X = tc.placeholder((4,), name="X")
    with pytest.raises(tc.ExprError, match=r"argument 0 is the tensor X; pass the buffers "
                                           r"fcompute\(ins, outs\) receives"):
        tc.extern((4,), [X], lambda ins, outs: tc.call_packed(_copy, X, outs[0]), name="Y")


def test_call_packed_given_a_string_scalar():
    X = tc.placeholder((4,), name="X")
    with pytest.raises(tc.ExprError, match=r"argument 2 is 'fast'; pass buffers \(ins\[i\], "
                                           r"outs\[j\]\) and int or float scalars"):
        tc.extern((4,), [X], lambda ins, outs: tc.call_packed(_copy, ins[0], outs[0], "fast"),
                  name="Y")


def test_call_packed_of_an_unregistered_name():
    X = tc.placeholder((4,), name="X")
    with pytest.raises(tc.ExprError, match=r"no function is registered as 'no.such.func'; "
                                           r"register it first with tc.register_func"):
        tc.extern((4,), [X], lambda ins, outs: tc.call_packed("no.such.func", ins[0], outs[0]),
                  name="Y")


def test_register_a_name_twice():
    tc.register_func("tests.must_fail.twice", _copy, override=True)
    with pytest.raises(tc.ExprError, match=r"'tests.must_fail.twice' is registered already; pass "
                                           r"override=True"):
        tc.register_func("tests.must_fail.twice", lambda x, y: None)


def test_an_output_not_passed_to_the_call():
    X = tc.placeholder((4,), name="X")
    with pytest.raises(tc.ComputeError, match=r"extern Y: output Y.v1 is not passed to "
                                              r"tc.call_packed\(.*_copy\), so nothing would write it"):
        tc.extern([(4,), (4,)], [X], lambda ins, outs: tc.call_packed(_copy, ins[0], outs[0]),
                  name="Y")


def test_inputs_not_a_list():
    X = tc.placeholder((4,), name="X")
    with pytest.raises(tc.ComputeError, match=r"extern Y: inputs must be a list of tensors"):
        tc.extern((4,), X, lambda ins, outs: tc.call_packed(_copy, ins[0], outs[0]), name="Y")


def test_dtypes_for_the_wrong_number_of_outputs():
    X = tc.placeholder((4,), name="X")
    with pytest.raises(tc.ComputeError, match=r"extern Y: 1 dtypes for 2 outputs"):
        tc.extern([(4,), (4,)], [X], lambda ins, outs: tc.call_packed(_copy, ins[0], *outs),
                  name="Y", dtype=["float32"])


def test_compute_at_of_an_extern_stage():
    X, Y = _ext()
    Z = tc.compute((4,), lambda i: Y[i] + 1, name="Z")
    s = tc.create_schedule(Z.op)
    with pytest.raises(tc.ScheduleError, match=r"compute_at on stage Y: it is an extern stage "
                                               r"\(computed by a call to .*_copy\), which runs "
                                               r"once, whole, at the root"):
        s[Y].compute_at(s[Z], Z.op.axis[0])


def test_compute_inline_of_what_an_extern_stage_reads():
    X = tc.placeholder((4,), name="X")
    P = tc.compute((4,), lambda i: X[i] * 2, name="P")
    _, Y = _ext(P)
    s = tc.create_schedule(Y.op)
    with pytest.raises(tc.ScheduleError, match=r"compute_inline on stage P: the extern stage Y "
                                               r"reads it.*keep P computed at the root"):
        s[P].compute_inline()


def test_an_extern_input_computed_at_a_loop():
    X = tc.placeholder((4,), name="X")
    P = tc.compute((4,), lambda i: X[i] * 2, name="P")
    _, Y = _ext(P)
    Z = tc.compute((4,), lambda i: Y[i] + P[i], name="Z")
    s = tc.create_schedule(Z.op)
    s[P].compute_at(s[Z], Z.op.axis[0])
    with pytest.raises(tc.ScheduleError, match=r"compute_at of P at Z.i: its consumer Y is not "
                                               r"computed inside that loop"):
        tc.lower(s, [X, Z])


def test_an_extern_stage_for_a_cuda_target():
    X, Y = _ext()
    s = tc.create_schedule(Y.op)
    with pytest.raises(tc.LowerError, match=r"extern stage calling .*_copy \(tc.extern\): it runs "
                                            r"on the CPU, and target cuda"):
        tc.lower(s, [X, Y], target="cuda")


def test_export_a_kernel_with_an_extern_call(tmp_path):
    X, Y = _ext()
    f = tc.build(tc.create_schedule(Y.op), [X, Y])
    with pytest.raises(tc.BuildError, match=r"cannot export main: it calls .*_copy through an "
                                            r"extern stage"):
        f.export_library(str(tmp_path / "k.so"))


def test_gradient_through_an_extern_stage():
    X, Y = _ext()
    Z = tc.compute((4,), lambda i: Y[i] * Y[i], name="Z")
    with pytest.raises(tc.AutodiffError, match=r"tc.gradient: Z depends on Y, an extern stage "
                                               r"\(a call to .*_copy\), whose derivative tecomp "
                                               r"cannot see"):
        tc.gradient(Z, X)


def test_the_callers_arrays_stay_checked():
    X, Y = _ext()
    f = tc.build(tc.create_schedule(Y.op), [X, Y])
    with pytest.raises(tc.ArgumentError):
        f(np.zeros(5, "float32"), np.zeros(4, "float32"))


@pytest.mark.parametrize("how", ["global", "slice", "exception"])
def test_the_function_keeps_a_view_of_the_kernels_memory(how):
    """A view of a kernel's temporary kept past the call read freed memory (garbage) and
    wrote into it; now the call raises.  The same function keeping a copy runs."""
    kept = []

    def keep(x, y):
        y[:] = x * 2
        if how == "global":
            kept.append(y)
        elif how == "slice":
            kept.append(y[1:])
        else:
            raise ValueError("bad values", y)

    def copy(x, y):
        y[:] = x * 2
        kept.append(np.array(y))

    def build(fn):
        X = tc.placeholder((4,), name="X")
        Y = tc.extern((4,), [X], lambda ins, outs: tc.call_packed(fn, ins[0], outs[0]), name="Y")
        Z = tc.compute((4,), lambda i: Y[i] + 1, name="Z")   # Y: the kernel's temporary
        return tc.build(tc.create_schedule(Z.op), [X, Z])

    x, z = np.arange(4, dtype=np.float32), np.zeros(4, np.float32)
    with pytest.raises(tc.ComputeError, match=r"extern call .*keep: the function kept a "
                                              r"reference to an array it was given \(a view of "
                                              r"the kernel's memory, valid only during the call"):
        build(keep)(x, z)
    kept.clear()
    build(copy)(x, z)
    np.testing.assert_array_equal(z, x * 2 + 1)
    np.testing.assert_array_equal(kept[0], x * 2)
