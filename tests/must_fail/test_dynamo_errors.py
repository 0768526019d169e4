"""Mistakes with torch.compile(backend="tecomp"): an unknown or bad option, a target that
is not this machine's CPU, tensors on another device: each a TecompError subclass naming
the option or the input and the fix."""
import os

import pytest

torch = pytest.importorskip("torch")

import tecomp.dynamo as td  # noqa: E402
from tecomp.errors import ArgumentError, TargetError  # noqa: E402


def _graph():
    return torch.fx.symbolic_trace(torch.nn.Linear(4, 2))


def test_unknown_option():
    with pytest.raises(ArgumentError, match=r"unknown option 'trails'; the options are trials, "
                                            r"log, cache, target, threads, prepack, dynamic"):
        td.backend(_graph(), [torch.randn(3, 4)], trails=3)


def test_bad_trials():
    with pytest.raises(ArgumentError, match=r"option trials must be an int >= 0, got -1"):
        td.backend(_graph(), [torch.randn(3, 4)], trials=-1)


def test_bad_cache():
    with pytest.raises(ArgumentError, match=r"option cache must be True or False, got 'no'"):
        td.backend(_graph(), [torch.randn(3, 4)], cache="no")


def test_bad_threads():
    with pytest.raises(ArgumentError, match=r"option threads must be 'auto', 'tecomp' or "
                                            r"'torch', got 'openmp'"):
        td.backend(_graph(), [torch.randn(3, 4)], threads="openmp")


def test_bad_prepack():
    with pytest.raises(ArgumentError, match=r"option prepack must be True or False, got 1"):
        td.backend(_graph(), [torch.randn(3, 4)], prepack=1)


def test_bad_dynamic():
    with pytest.raises(ArgumentError, match=r"option dynamic must be True or False, got 1"):
        td.backend(_graph(), [torch.randn(3, 4)], dynamic=1)


@pytest.mark.parametrize("log, msg", [
    (5, r"option log expects a file path \(str or os.PathLike\), got int"),
    ("tune\0.jsonl", r"option log: 'tune\\x00.jsonl' is not a file path"),
    ("", r"option log: '' is not a file path"),
    ("DIR", r"option log: '.*' is a directory; give a file path for the log, e.g. "
            r"'.*tuning\.jsonl'"),
    ("FIFO", r"option log: '.*fifo' is a FIFO \(named pipe\), not a regular file; give the "
             r"path of a tuning log"),
])
def test_bad_log(log, msg, tmp_path):
    """A log that is no file path, or names a directory or a FIFO: refused when the model
    is compiled (every kernel's auto_schedule refused it before, and the whole model ran
    eagerly, with a warning per kernel; a NUL in the path was logged as a tecomp bug)."""
    if log == "DIR":
        log = tmp_path
    elif log == "FIFO":
        log = tmp_path / "fifo"
        os.mkfifo(log)
    with pytest.raises(ArgumentError, match=r"torch.compile\(backend='tecomp'\): " + msg):
        td.backend(_graph(), [torch.randn(3, 4)], log=log)


def test_gpu_target():
    with pytest.raises(TargetError, match=r"target cuda is not this machine's CPU.*"
                                          r"target='llvm'"):
        td.backend(_graph(), [torch.randn(3, 4)], target="cuda")


def test_tensors_on_another_device():
    x = torch.empty(3, 4, device="meta")
    with pytest.raises(TargetError, match=r"graph input 0 \(shape \[3, 4\]\) is on meta.*CPU "
                                          r"only: move the model and its inputs to the CPU"):
        td.backend(_graph(), [x])


def test_options_through_torch_compile():
    """torch.compile passes the options to the backend; TorchDynamo wraps its error."""
    f = torch.compile(torch.nn.Linear(4, 2), backend="tecomp", options={"trials": "many"})
    with pytest.raises(Exception, match=r"option trials must be an int >= 0, got 'many'") as e:
        f(torch.randn(3, 4))
    cause = e.value
    while cause is not None and not isinstance(cause, ArgumentError):
        cause = cause.__cause__ or getattr(cause, "inner_exception", None)
    assert isinstance(cause, ArgumentError)
