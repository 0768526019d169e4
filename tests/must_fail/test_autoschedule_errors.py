"""Programs that must fail: the auto-scheduler's mistakes to name.  Each message names
the value and says what to do."""
import re
import sys

import numpy as np
import pytest

import tecomp as tc
from tecomp.errors import AutoScheduleError


# measure

def _sym():
    n = tc.var("n")
    A = tc.placeholder((n, 4), name="A")
    C = tc.compute((n, 4), lambda i, j: A[i, j] * 2, name="C")
    return [A, C], n


def _build_default(args, payload):
    return tc.create_schedule(args[-1].op)


def test_measure_unbound_symbolic_extent():
    from tecomp.autoschedule.measure import LocalRunner

    args, _ = _sym()
    with pytest.raises(AutoScheduleError, match=r"LocalRunner\.run: dimension 0 of tensor A "
                       r"is symbolic \(n\) and has no value; pass shapes=\{'n': \.\.\.\} with "
                       r"the value to measure at"):
        LocalRunner().run(args, _build_default, [{}])


def test_make_inputs_unbound_symbolic_extent():
    from tecomp.autoschedule.measure import make_inputs

    args, _ = _sym()
    with pytest.raises(AutoScheduleError, match=r"make_inputs: dimension 0 of tensor A is "
                       r"symbolic \(n\) and has no value; pass shapes=\{'n': \.\.\.\}"):
        make_inputs(args, shapes={"m": 3})


def test_make_inputs_unbound_scalar_argument():
    from tecomp.autoschedule.measure import make_inputs

    n = tc.var("n")
    A = tc.placeholder((4,), name="A")
    C = tc.compute((4,), lambda i: A[i] * n.astype("float32"), name="C")
    with pytest.raises(AutoScheduleError, match=r"make_inputs: the scalar argument n \(argument "
                       r"3\) has no value; pass shapes=\{'n': \.\.\.\}"):
        make_inputs([A, C, n])


def test_make_inputs_not_an_argument_list():
    from tecomp.autoschedule.measure import make_inputs

    args, _ = _sym()
    with pytest.raises(AutoScheduleError, match=r"make_inputs: args must be the list you pass "
                       r"to tc\.build \(e\.g\. \[A, B, C\]\), got Tensor"):
        make_inputs(args[0])
    with pytest.raises(AutoScheduleError, match=r"make_inputs: args\[1\] is a int, not a "
                       r"tensor or a tc\.var"):
        make_inputs([args[0], 3], shapes={"n": 3})


def test_measure_reference_of_the_wrong_length():
    import numpy as np

    from tecomp.autoschedule.measure import LocalRunner

    args, _ = _sym()
    with pytest.raises(AutoScheduleError, match=r"LocalRunner\.run: reference has 2 array\(s\) "
                       r"but args has 1 output\(s\) \(C\)"):
        LocalRunner().run(args, _build_default, [{}], shapes={"n": 3},
                          reference=[np.zeros((3, 4)), np.zeros((3, 4))])


@pytest.mark.parametrize("kw,msg", [
    (dict(timeout=0), r"LocalRunner: timeout must be a positive number of seconds, got 0"),
    (dict(number=0), r"LocalRunner: number must be an int >= 1 or None"),
    (dict(repeat=0), r"LocalRunner: repeat must be an int >= 1, got 0"),
    (dict(min_repeat_seconds=-1), r"LocalRunner: min_repeat_seconds must be a number of "
                                  r"seconds >= 0, got -1"),
    (dict(rtol="x"), r"LocalRunner: rtol must be a number >= 0 or None"),
    (dict(num_threads=0), r"LocalRunner: num_threads must be an int >= 1 or None"),
    (dict(memory_limit_mb=-5), r"LocalRunner: memory_limit_mb must be a positive number of "
                               r"MiB or None"),
])
def test_measure_runner_options(kw, msg):
    from tecomp.autoschedule.measure import LocalRunner

    with pytest.raises(AutoScheduleError, match=msg):
        LocalRunner(**kw)


def test_measure_build_fn_not_callable():
    from tecomp.autoschedule.measure import LocalRunner

    args, _ = _sym()
    with pytest.raises(AutoScheduleError, match=r"LocalRunner\.run: build_fn must be a "
                       r"module-level function build_fn\(args, payload\), got str"):
        LocalRunner().run(args, "build", [{}], shapes={"n": 3})


def test_get_runner_unknown():
    from tecomp.autoschedule.measure import get_runner

    with pytest.raises(AutoScheduleError, match=r"runner='ray' is not a runner; use 'local', "
                       r"'dask' \(needs pip install \"tecomp\[distributed\]\"\) or an object "
                       r"with a \.run\(args, build_fn, payloads, shapes=None\) method"):
        get_runner("ray")
    with pytest.raises(AutoScheduleError, match=r"runner=3 is not a runner"):
        get_runner(3)


def test_dask_runner_without_dask(monkeypatch):
    from tecomp.autoschedule.measure import DaskRunner

    monkeypatch.setitem(sys.modules, "dask", None)
    monkeypatch.setitem(sys.modules, "dask.distributed", None)
    with pytest.raises(AutoScheduleError, match=r"DaskRunner needs dask\.distributed, which is "
                       r"not installed \(.*\); install it with: "
                       r"pip install \"tecomp\[distributed\]\""):
        DaskRunner()


# auto_schedule

def _mm():
    A = tc.placeholder((16, 8), name="A")
    B = tc.placeholder((8, 12), name="B")
    k = tc.reduce_axis((0, 8), name="k")
    C = tc.compute((16, 12), lambda i, j: tc.sum(A[i, k] * B[k, j], axis=k), name="C")
    return [A, B, C]


@pytest.mark.parametrize("bad, msg", [
    (lambda a: a[-1], r"auto_schedule: args must be the list you pass to tc\.build \(e\.g\. "
                      r"\[A, B, C\]\), got Tensor"),
    (lambda a: a + ["C"], r"auto_schedule: args\[3\] is a str, not a tensor or a tc\.var; pass "
                          r"the placeholders and computes you give tc\.build"),
    (lambda a: a[:2], r"auto_schedule: the argument list has no compute tensor to schedule"),
])
def test_auto_schedule_bad_args(bad, msg):
    with pytest.raises(AutoScheduleError, match=msg):
        tc.auto_schedule(bad(_mm()))


@pytest.mark.parametrize("kw, msg", [
    (dict(target="llvm -mcpu=pentium9"), r"auto_schedule: target llvm: unknown "
                                         r"-mcpu='pentium9'"),
    (dict(trials=-1), r"auto_schedule: trials must be an int >= 0 \(0: no measurement\), got -1"),
    (dict(trials=2.5), r"trials must be an int >= 0 \(0: no measurement\), got 2\.5"),
    (dict(seed="x"), r"auto_schedule: seed must be an int, got 'x'"),
    (dict(timeout=0), r"auto_schedule: timeout must be a positive number of seconds or None"),
    (dict(log=3), r"auto_schedule: log must be a file path \(str or Path\) or None, got int"),
    # a NUL raised ValueError from os.stat; an empty path was read as no log, and a
    # measured search failed on its first record
    (dict(log="tune\0.jsonl"), r"auto_schedule: log: 'tune\\x00.jsonl' is not a file path"),
    (dict(log=""), r"auto_schedule: log: '' is not a file path"),
    (dict(progress="yes"), r"auto_schedule: progress must be True, False or None \(None: "
                           r"shown on a terminal, in Jupyter and in CI logs\), got 'yes'"),
    (dict(shapes={"m": 3}), r"auto_schedule: shapes names 'm', which is no symbolic extent of "
                            r"these tensors \(they have none\)"),
    (dict(shapes=[1]), r"auto_schedule: shapes must be a dict of symbolic extent names to "
                       r"ints"),
    (dict(trials=1, search="annealing"), r"auto_schedule: search='annealing' is not a search; "
                                         r"use 'model' \(cost-model guided\) or 'random'"),
    (dict(trials=1, runner="ssh"), r"runner"),
    (dict(check_trivial="yes"), r"auto_schedule: check_trivial must be True or False \(True: "
                                r"measure the rule-based schedule against the trivial one "
                                r"once\), got 'yes'"),
    (dict(check_trivial=True, target="cuda-emu"), r"auto_schedule: check_trivial=True is for "
                                                  r"CPU targets"),
])
def test_auto_schedule_bad_options(kw, msg):
    with pytest.raises(AutoScheduleError, match=msg):
        tc.auto_schedule(_mm(), **kw)


def test_auto_schedule_shapes_value():
    n = tc.var("n")
    A = tc.placeholder((n, 4), name="A")
    C = tc.compute((n, 4), lambda i, j: A[i, j] * 2, name="C")
    with pytest.raises(AutoScheduleError, match=r"auto_schedule: shapes\['n'\] must be a "
                                                r"positive int, got 0"):
        tc.auto_schedule([A, C], shapes={"n": 0})


# records

def test_log_is_a_directory(tmp_path):
    with pytest.raises(AutoScheduleError, match=r"auto_schedule: log: .* is a directory; give a file "
                                                r"path for the log, e\.g\. .*tuning\.jsonl"):
        tc.auto_schedule(_mm(), log=str(tmp_path))


_FIFO_CHILD = """
import os, sys
import tecomp as tc
from tecomp.autoschedule import records
A = tc.placeholder((16, 8), name="A")
C = tc.compute((16, 8), lambda i, j: A[i, j] * 2, name="C")
path = sys.argv[1]
os.mkfifo(path)
for what, call in (("read", lambda: tc.auto_schedule([A, C], log=path)),
                   ("append", lambda: records.append_record(path, records.make_record(
                       records.workload_key([A, C]), [], [1e-3])))):
    try:
        call()
        print(what, "returned")
    except tc.AutoScheduleError as e:
        print(what, "AutoScheduleError", e)
"""


def test_log_that_is_a_fifo(tmp_path):
    """A FIFO as the log: opening it to read waited for a writer, forever (so the check
    runs in a child process, with a timeout)."""
    import os
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-c", _FIFO_CHILD, str(tmp_path / "log.jsonl")],
                       capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    read, append = p.stdout.splitlines()
    for line, who in ((read, "auto_schedule: log"), (append, "append_record")):
        assert re.fullmatch(rf"\w+ AutoScheduleError {who}: '.*log\.jsonl' is a FIFO \(named "
                            rf"pipe\), not a regular file; give the path of a tuning log, "
                            rf"e\.g\. 'tuning\.jsonl'", line), line


def test_record_with_a_time_json_cannot_store(tmp_path):
    from tecomp.autoschedule import records

    rec = records.make_record(records.workload_key(_mm()), [], [float("nan")])
    with pytest.raises(AutoScheduleError, match=r"append_record: the record for .* holds a "
                                                r"value JSON cannot store .*times must be finite"):
        records.append_record(str(tmp_path / "l.jsonl"), rec)


def test_workload_key_of_something_else():
    from tecomp.autoschedule import records

    with pytest.raises(AutoScheduleError, match=r"workload_key: str 'A' is not a tensor or a "
                                                r"tc\.var; pass the list you give tc\.build"):
        records.workload_key(["A"])


def _gemm_args():
    A = tc.placeholder((64, 48), name="A")
    B = tc.placeholder((48, 32), name="B")
    k = tc.reduce_axis((0, 48), name="k")
    C = tc.compute((64, 32), lambda i, j: tc.sum(A[i, k] * B[k, j], axis=k), name="C",
                   tag="matmul")
    return [A, B, C]


def test_config_unknown_knob():
    cfg = tc.autoschedule.default_config(_gemm_args(), "llvm -mcpu=haswell")
    with pytest.raises(tc.AutoScheduleError, match=r"config: no knob 'gemm.tile' in this "
                       r"workload's schedule; its knobs: .*gemm.mr"):
        cfg.set("gemm.tile", 4)


def test_config_value_outside_the_choices():
    cfg = tc.autoschedule.default_config(_gemm_args(), "llvm -mcpu=haswell")
    with pytest.raises(tc.AutoScheduleError, match=r"config: knob gemm.nr cannot be 7; its "
                       r"choices: 8, 16, 24"):
        cfg.set("gemm.nr", 7)


def test_config_value_equal_to_a_choice_of_another_type():
    """Session 25: 2.0 for the int choice 2 (or 1.0 for True) was taken, and the float
    reached the template, which split by it (InternalError)."""
    X = tc.placeholder((1, 12, 12, 32), name="X")
    W = tc.placeholder((3, 3, 32, 64), name="W")
    cfg = tc.autoschedule.default_config([X, W, tc.nn.conv2d_nhwc(X, W, 1, 1)], "llvm")
    with pytest.raises(tc.AutoScheduleError, match=r"config: knob conv2d_nhwc.channel_vectors "
                       r"cannot be 2.0; its choices: 2, 4 \(2.0 is a float: give the choice "
                       r"itself, 2, of type int\)"):
        cfg.set("conv2d_nhwc.channel_vectors", 2.0)
    with pytest.raises(tc.AutoScheduleError, match=r"knob template cannot be 1; its choices: "
                       r"True, False \(1 is a int: give the choice itself, True, of type "
                       r"bool\)"):
        cfg.set("template", 1)
    assert cfg.set("conv2d_nhwc.block", np.int64(2))["conv2d_nhwc.block"] == 2


def test_config_knob_that_the_other_values_remove():
    # the generic rules instead of the GEMM template: its knobs are no decision any more
    args = _gemm_args()
    cfg = tc.autoschedule.default_config(args, "llvm -mcpu=haswell")
    cfg = cfg.set("gemm.mr", cfg.space["gemm.mr"][0]).set("template", False)
    with pytest.raises(tc.AutoScheduleError, match=r"apply_config: knob gemm.mr was set, but "
                       r"this schedule has no such decision"):
        tc.autoschedule.apply_config(args, cfg)


def test_apply_config_of_something_else():
    with pytest.raises(tc.AutoScheduleError, match=r"apply_config: config must be a Config "
                       r"from default_config, got dict"):
        tc.autoschedule.apply_config(_gemm_args(), {"gemm.mr": 4})


# the GPU rules

@pytest.mark.skipif(__import__("importlib").util.find_spec("pycuda") is not None,
                    reason="pycuda is installed here")
def test_gpu_search_without_pycuda():
    with pytest.raises(AutoScheduleError, match=r"auto_schedule: cannot measure here: pycuda "
                       r"is not installed: pip install tecomp\[cuda\]; use trials=0"):
        tc.auto_schedule(_mm(), target="cuda", trials=10)
