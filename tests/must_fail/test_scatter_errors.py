"""Programs that must fail: scatter-adds (tc.scatter_add, and the gradients made of them).
Each asserts the error class and its text."""
import pytest

import tecomp as tc


def _ids_g():
    return tc.placeholder((4,), "int32", name="ids"), tc.placeholder((4, 3), name="G")


def _scatter():
    ids, G = _ids_g()
    return ids, G, tc.scatter_add((5, 3), (4, 3), lambda b, d: ((ids[b], d), G[b, d]), name="Wg")


def test_f_returns_no_index_tuple():
    ids, G = _ids_g()
    with pytest.raises(tc.ComputeError, match=r"scatter Wg: f must return \(index_tuple, value\)"):
        tc.scatter_add((5, 3), (4, 3), lambda b, d: G[b, d], name="Wg")


def test_index_of_the_wrong_length_or_type():
    ids, G = _ids_g()
    with pytest.raises(tc.ComputeError, match=r"the index has 1 component\(s\) for a 2-d output"):
        tc.scatter_add((5, 3), (4, 3), lambda b, d: ((ids[b],), G[b, d]), name="Wg")
    with pytest.raises(tc.ComputeError, match=r"an index is float32; indices are int32 or int64"):
        tc.scatter_add((5, 3), (4, 3), lambda b, d: ((G[b, d], d), G[b, d]), name="Wg")


def test_condition_is_not_a_comparison():
    ids, G = _ids_g()
    with pytest.raises(tc.ComputeError, match=r"the condition is float32; give a comparison"):
        tc.scatter_add((5, 3), (4, 3), lambda b, d: ((ids[b], d), G[b, d], G[b, d]), name="Wg")


def test_domain_and_f_disagree():
    ids, G = _ids_g()
    with pytest.raises(tc.ComputeError, match=r"the domain has 2 dimension\(s\) but f takes 1"):
        tc.scatter_add((5, 3), (4, 3), lambda b: ((ids[b], 0), G[b, 0]), name="Wg")


def test_scatter_has_no_loops_to_schedule():
    ids, G, W = _scatter()
    Y = tc.compute((5, 3), lambda v, d: W[v, d] * 2.0, name="Y")
    s = tc.create_schedule(Y.op)
    with pytest.raises(tc.ScheduleError, match=r"compute_at on stage Wg: it is a scatter-add"):
        s[W].compute_at(s[Y], Y.op.axis[0])
    with pytest.raises(tc.ScheduleError, match=r"compute_inline on stage Wg: it is a scatter-add"):
        s[W].compute_inline()
    with pytest.raises(tc.ScheduleError, match=r"split on stage Wg: axis must be an axis of the "
                                               r"stage"):
        s[W].split(None, factor=2)


def test_inlining_what_a_scatter_reads():
    ids, G = _ids_g()
    G2 = tc.compute((4, 3), lambda b, d: G[b, d] + 1.0, name="G2")
    W = tc.scatter_add((5, 3), (4, 3), lambda b, d: ((ids[b], d), G2[b, d]), name="Wg")
    s = tc.create_schedule(W.op)
    with pytest.raises(tc.ScheduleError, match=r"compute_inline on stage G2: the scatter-add Wg "
                                               r"reads it .*keep G2 computed at the root"):
        s[G2].compute_inline()


def test_cuda_targets_refuse_a_scatter():
    ids, G, W = _scatter()
    with pytest.raises(tc.LowerError, match=r"the scatter-add Wg .*target cuda.*cannot generate "
                                            r"them yet .*build for llvm"):
        tc.lower(tc.create_schedule(W.op), [ids, G, W], target="cuda")


def test_gradient_through_a_scatter():
    ids, G, W = _scatter()
    Y = tc.compute((5, 3), lambda v, d: W[v, d] * 2.0, name="Y")
    with pytest.raises(tc.AutodiffError, match=r"depends on Wg, a scatter-add, and tecomp derives "
                                               r"no gradient through a scatter yet"):
        tc.gradient(Y, [G])
