"""Programs that must fail: scans (tc.scan).  Each asserts the error class and its text."""
import pytest

import tecomp as tc


def _parts(T=8, n=4):
    X = tc.placeholder((T, n), name="X")
    state = tc.placeholder((T, n), name="state")
    init = tc.compute((1, n), lambda _, i: X[0, i], name="init")
    update = tc.compute((T, n), lambda t, i: state[t - 1, i] + X[t, i], name="update")
    return X, state, init, update


def _scan():
    X, state, init, update = _parts()
    return X, update, tc.scan(init, update, state, name="S")


def test_state_is_not_a_placeholder():
    X, state, init, update = _parts()
    with pytest.raises(tc.ComputeError, match=r"scan S: state_placeholder update must be a "
                                              r"tc.placeholder"):
        tc.scan(init, update, update, name="S")


def test_update_does_not_read_the_state():
    X, state, init, _ = _parts()
    update = tc.compute((8, 4), lambda t, i: X[t, i] * 2, name="update")
    with pytest.raises(tc.ComputeError, match=r"scan S: update update does not read the state "
                                              r"state"):
        tc.scan(init, update, state, name="S")


def test_init_reads_the_state():
    X, state, _, update = _parts()
    init = tc.compute((1, 4), lambda _, i: state[0, i], name="init")
    with pytest.raises(tc.ComputeError, match=r"scan S: init init reads the state state"):
        tc.scan(init, update, state, name="S")


def test_shapes_that_differ_past_the_time_axis():
    X, state, _, update = _parts()
    init = tc.compute((1, 3), lambda _, i: X[0, i], name="init")
    with pytest.raises(tc.ComputeError, match=r"scan S: init init has shape \(1, 3\) and the "
                                              r"state state \(8, 4\); they differ only in the first"):
        tc.scan(init, update, state, name="S")


def test_dtypes_that_differ():
    X, state, init, _ = _parts()
    update = tc.compute((8, 4), lambda t, i: tc.cast(state[t - 1, i], "float64"), name="update")
    with pytest.raises(tc.ComputeError, match=r"scan S: update update is float64 but the state "
                                              r"state is float32"):
        tc.scan(init, update, state, name="S")


def test_several_states():
    X, state, init, update = _parts()
    with pytest.raises(tc.ComputeError, match=r"scan S: 2 init tensors; tecomp scans one state"):
        tc.scan([init, init], [update, update], [state, state], name="S")


def test_update_reads_further_back_than_init_covers():
    X = tc.placeholder((8, 4), name="X")
    state = tc.placeholder((8, 4), name="state")
    init = tc.compute((1, 4), lambda _, i: X[0, i], name="init")
    update = tc.compute((8, 4), lambda t, i: state[t - 2, i] + X[t, i], name="update")
    with pytest.raises(tc.ComputeError, match=r"scan S: compute update: the read state\[t - 2, i\] "
                                              r"is out of range: index 0 \(t - 2\) is -1 at t = 1.*"
                                              r"the steps before 1 come from init"):
        tc.scan(init, update, state, name="S")


def test_a_read_before_a_placeholder_outside_a_scan():
    """Deferred by tc.compute (it could be a scan's state); create_schedule raises it."""
    A = tc.placeholder((8,), name="A")
    C = tc.compute((8,), lambda i: A[i - 1], name="C")
    with pytest.raises(tc.ShapeError, match=r"compute C: the read A\[i - 1\] is out of range: "
                                            r"index 0 \(i - 1\) is -1 at i = 0"):
        tc.create_schedule(C.op)


@pytest.mark.parametrize("move", ["parallel", "reorder"])
def test_time_axis_made_parallel_or_moved_inside(move):
    X, update, S = _scan()
    s = tc.create_schedule(S.op)
    if move == "parallel":
        s[S].parallel(S.op.scan_axis)
    else:
        s[S].reorder(S.op.axis[1], S.op.scan_axis)
    with pytest.raises(tc.ScheduleError, match=r"scan S: its time axis S.t must stay its outermost "
                                               r"loop, serial and whole"):
        tc.lower(s, [X, S])


def test_body_moved_out_of_the_time_loop():
    X, update, S = _scan()
    s = tc.create_schedule(S.op)
    s[update].compute_root()
    with pytest.raises(tc.ScheduleError, match=r"scan S: update reads the state state, so it must "
                                               r"run inside the scan's time loop"):
        tc.lower(s, [X, S])


def test_compute_at_of_a_scan():
    X, update, S = _scan()
    C = tc.compute((8, 4), lambda t, i: S[t, i] * 2, name="C")
    s = tc.create_schedule(C.op)
    with pytest.raises(tc.ScheduleError, match=r"compute_at on stage S: it is a scan, which runs "
                                               r"its steps in order"):
        s[S].compute_at(s[C], C.op.axis[0])


def test_scan_for_a_cuda_target():
    X, update, S = _scan()
    with pytest.raises(tc.LowerError, match=r"the schedule has the scan S \(tc.scan\): tecomp runs "
                                            r"scans on the CPU"):
        tc.lower(tc.create_schedule(S.op), [X, S], target="cuda")


def test_gradient_through_a_scan():
    X, update, S = _scan()
    with pytest.raises(tc.AutodiffError, match=r"tc.gradient: S is a scan \(tc.scan\), and tecomp "
                                               r"derives no gradient through a recurrence yet"):
        tc.gradient(S, X)


def test_the_state_passed_as_an_argument():
    X, state, init, update = _parts()
    S = tc.scan(init, update, state, name="S")
    with pytest.raises(tc.LowerError, match=r"argument 1: state is the state of the scan S, which "
                                            r"stands for S's own output.*pass S instead"):
        tc.lower(tc.create_schedule(S.op), [X, state, S])


def test_an_extern_stage_in_the_body():
    X, state, init, _ = _parts()
    E = tc.extern((8, 4), [state], lambda ins, outs: tc.call_packed(
        lambda a, b: None, ins[0], outs[0]), name="E")
    update = tc.compute((8, 4), lambda t, i: E[t, i] + X[t, i], name="update")
    with pytest.raises(tc.ComputeError, match=r"scan S: E reads the state and is an extern stage; "
                                              r"a scan's body is made of computes"):
        tc.scan(init, update, state, name="S")
