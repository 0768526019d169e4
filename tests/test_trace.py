"""Schedules record their primitive calls (``s.trace``): replayable from JSON on a fresh
schedule, and printable as Python that makes the same schedule."""
import json

import numpy as np
import pytest

import tecomp as tc
import tecomp.nn as nn
from tecomp.strategy import cpu as sc
from tecomp.schedule.trace import replay


def _gemm_epilogue():
    A = tc.placeholder((64, 48), name="A")
    B = tc.placeholder((48, 40), name="B")
    k = tc.reduce_axis((0, 48), name="k")
    E = tc.compute((64, 48), lambda i, j: A[i, j] * 2, name="E")
    C = tc.compute((64, 40), lambda i, j: tc.sum(E[i, k] * B[k, j], axis=k), name="C")
    D = tc.compute((64, 40), lambda i, j: tc.max(C[i, j], 0.0), name="D")
    return A, B, E, C, D


def _hand(A, B, E, C, D):
    s = tc.create_schedule(D.op)
    s[E].compute_inline()
    CC = s.cache_write(C, "local")
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 8, 16)
    s[C].vectorize(ji)
    s[C].parallel(io)
    s[CC].compute_at(s[C], jo)
    ko, ki = s[CC].split(s[CC].op.reduce_axis[0], factor=4)
    s[CC].unroll(ki)
    s[CC].pragma(ko, "unroll_count", 2)
    s[C].compute_at(s[D], s[D].op.axis[0])
    return s


def _same(s1, s2, args):
    assert str(tc.lower(s1, args)) == str(tc.lower(s2, args))


def _python_schedule(src, *tensors):
    ns = {}
    exec("import tecomp as tc\n" + src, ns)  # noqa: S102 - our own printed trace
    return ns["schedule"](*tensors)


def test_trace_records_outermost_calls_only():
    A, B, E, C, D = _gemm_epilogue()
    s = _hand(A, B, E, C, D)
    names = [st[0] for st in s.trace.to_json()]
    # tile is one step (not its two splits and a reorder)
    assert names == ["compute_inline", "cache_write", "tile", "vectorize", "parallel",
                     "compute_at", "split", "unroll", "pragma", "compute_at"]
    assert s.trace.replayable and len(s.trace) == 10


def test_replay_from_json_gives_the_same_schedule():
    A, B, E, C, D = _gemm_epilogue()
    s = _hand(A, B, E, C, D)
    steps = json.loads(json.dumps(s.trace.to_json()))
    s2 = replay(steps, [D])
    _same(s, s2, [A, B, D])
    # a DAG rebuilt from scratch (other objects, same structure) replays too
    A2, B2, E2, C2, D2 = _gemm_epilogue()
    s3 = replay(steps, [D2])
    assert str(tc.lower(s3, [A2, B2, D2])) == str(tc.lower(s, [A, B, D]))


GOLDEN = '''\
def schedule(A, B, D):
    s = tc.create_schedule([D.op])
    C = D.op.input_tensors[0]
    E = C.op.input_tensors[0]
    s[E].compute_inline()
    C_local = s.cache_write(C, 'local')
    i = s[C].op.axis[0]
    j = s[C].op.axis[1]
    i_o, j_o, i_i, j_i = s[C].tile(i, j, 8, 16)
    s[C].vectorize(j_i)
    s[C].parallel(i_o)
    s[C_local].compute_at(s[C], j_o)
    k = s[C_local].op.reduce_axis[0]
    k_o, k_i = s[C_local].split(k, factor=4)
    s[C_local].unroll(k_i)
    s[C_local].pragma(k_o, 'unroll_count', 2)
    i_1 = s[D].op.axis[0]
    s[C].compute_at(s[D], i_1)
    return s
'''


def test_trace_prints_as_python_golden():
    A, B, E, C, D = _gemm_epilogue()
    s = _hand(A, B, E, C, D)
    src = s.trace.python([A, B, D])
    assert src == GOLDEN
    _same(s, _python_schedule(src, A, B, D), [A, B, D])


@pytest.mark.parametrize("make", ["matmul", "conv_nchw", "softmax", "dense"])
def test_template_schedules_replay_and_print(make):
    if make == "matmul":
        A = tc.placeholder((100, 64), name="A")
        B = tc.placeholder((64, 72), name="B")
        out = nn.matmul(A, B)
        args, s = [A, B, out], sc.schedule_matmul(out)
    elif make == "dense":
        X = tc.placeholder((16, 64), name="X")
        W = tc.placeholder((40, 64), name="W")
        out = nn.dense(X, W)
        args, s = [X, W, out], sc.schedule_dense(out)
    elif make == "conv_nchw":
        X = tc.placeholder((1, 16, 14, 14), name="X")
        W = tc.placeholder((32, 16, 3, 3), name="W")
        b = tc.placeholder((32,), name="b")
        out = nn.relu(nn.bias_add(nn.conv2d_nchw(X, W, padding=1), b))
        args, s = [X, W, b, out], sc.schedule_conv2d_nchw(out)
    else:
        X = tc.placeholder((32, 100), name="X")
        out = nn.softmax(X)
        args, s = [X, out], sc.schedule_softmax(out)
    assert s.trace.replayable
    outs = [out]
    _same(s, replay(s.trace.to_json(), outs), args)
    _same(s, _python_schedule(s.trace.python(args), *args), args)


def test_hostile_names_print_as_identifiers():
    bad = 'A\n#include <cstdlib>\nstatic int x = std::system("touch F");\n//'
    A = tc.placeholder((8, 8), name=bad)
    B = tc.compute((8, 8), lambda i, j: A[i, j] + 1, name="class")
    s = tc.create_schedule(B.op)
    s[B].split(B.op.axis[1], factor=4)
    src = s.trace.python([A, B])
    header = src.splitlines()[0]
    assert header == "def schedule(A_include_cstdlib_static_int_x_std_system_touch_F, class_):"
    assert "\n#include" not in src and "system(" not in src.split("\n", 1)[1]
    _same(s, _python_schedule(src, A, B), [A, B])


def test_symbolic_factor_makes_the_trace_not_replayable():
    n = tc.var("n")
    f = tc.var("f")
    A = tc.placeholder((n,), name="A")
    B = tc.compute((n,), lambda i: A[i] * 2, name="B")
    s = tc.create_schedule(B.op)
    s[B].split(B.op.axis[0], factor=f)       # still works as a schedule
    assert not s.trace.replayable
    with pytest.raises(tc.ScheduleError, match="cannot be stored: split: the variable f"):
        s.trace.to_json()
    fn = tc.build(s, [A, B, f])
    a = np.arange(10, dtype="float32")
    b = np.zeros(10, "float32")
    fn(a, b, 3)
    np.testing.assert_allclose(b, a * 2)


def test_numpy_integer_factors_replay():
    """split and tile take numpy's integers (a factor computed from an array's shape) as
    their value; the trace stores them as ints (once ``np.int64(8)`` made the trace not
    replayable: "has no name in a trace"), and its printed Python runs."""
    A, B, E, C, D = _gemm_epilogue()
    s = tc.create_schedule(D.op)
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], np.int64(8), np.int32(16))
    s[D].split(D.op.axis[1], nparts=np.uint8(5))
    assert s.trace.replayable, s.trace.problem
    steps = json.loads(json.dumps(s.trace.to_json()))
    text = str(tc.lower(s, [A, B, D]))
    assert str(tc.lower(replay(steps, [D]), [A, B, D])) == text
    assert "8, 16)" in s.trace.python() and "nparts=5" in s.trace.python()


def test_numpy_integers_in_every_primitive_and_long_axes_replay():
    """Every primitive takes numpy's integers as the ints they are (storage_align,
    align_bounds, prefetch and an ``unroll_count`` pragma refused them where split took
    them), and a factor past int32 replays on an axis that long (replay refused any factor
    past 2**31 - 1 that the live call took)."""
    A = tc.placeholder((64, 64), name="A")
    B = tc.compute((64, 64), lambda i, j: A[i, j] + 1.0, name="B")
    C = tc.compute((64, 64), lambda i, j: B[i, j] * 2.0, name="C")
    s = tc.create_schedule(C.op)
    s[B].compute_at(s[C], C.op.axis[0])
    s[B].storage_align(B.op.axis[0], np.int64(16), np.int32(1))
    s[B].align_bounds(B.op.axis[1], np.int16(8))
    s[C].prefetch(A, C.op.axis[0], np.int64(2), level=np.int8(2))
    s[C].pragma(C.op.axis[1], "unroll_count", np.int64(4))
    assert s.trace.replayable, s.trace.problem
    steps = json.loads(json.dumps(s.trace.to_json()))
    assert str(tc.lower(replay(steps, [C]), [A, C])) == str(tc.lower(s, [A, C]))

    n = tc.var("n", "int64")
    X = tc.placeholder((n,), name="X")
    Y = tc.compute((n,), lambda i: X[i] * 3.0, name="Y")
    s = tc.create_schedule(Y.op)
    s[Y].split(Y.op.axis[0], factor=2**32)
    steps = json.loads(json.dumps(s.trace.to_json()))
    replay(steps, [Y], shapes={"n": 2**33})
    with pytest.raises(tc.ScheduleError, match="factor=4294967296 .* of extent unknown"):
        replay(steps, [Y])
    with pytest.raises(tc.ScheduleError, match="factor=4294967296 .* of extent 1048576"):
        replay(steps, [Y], shapes={"n": 2**20})


def test_a_failing_primitive_records_nothing():
    A, B, E, C, D = _gemm_epilogue()
    s = tc.create_schedule(D.op)
    with pytest.raises(tc.ScheduleError):
        s[C].vectorize(C.op.reduce_axis[0])
    assert len(s.trace) == 0


def test_printed_trace_survives_freed_axes():
    """rfactor replaces a stage's op, freeing the old axes; a new axis that got a freed
    axis's id() must not be printed under the old axis's name (it was, about one time in
    ten, depending on what else the process had allocated)."""
    junk = []
    first = None
    for i in range(120):
        junk.append([tc.placeholder((i % 7 + 1,), name="j") for _ in range(i % 13)])
        if len(junk) > 20:
            junk.pop(0)
        X = tc.placeholder((16, 64), name="X")
        W = tc.placeholder((40, 64), name="W")
        out = nn.dense(X, W)
        args = [X, W, out]
        s = sc.schedule_dense(out)
        text = s.trace.python(args)
        replayed = _python_schedule(text, *args)
        if first is None:
            # once: the printed trace replays to the same loop nest
            _same(s, replayed, args)
            first = text
        # every time: the same schedule prints the same text, and its replay prints it back
        # (an axis printed under a freed axis's name changes the text)
        assert text == first
        assert replayed.trace.python(args) == text
