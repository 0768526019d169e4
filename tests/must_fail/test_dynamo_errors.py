"""Mistakes with torch.compile(backend="tecomp"): an unknown or bad option, a target that
is not this machine's CPU, tensors on another device: each a TecompError subclass naming
the option or the input and the fix."""
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
    with pytest.raises(ArgumentError, match=r"option threads must be 'tecomp' or 'torch', "
                                            r"got 'openmp'"):
        td.backend(_graph(), [torch.randn(3, 4)], threads="openmp")


def test_bad_prepack():
    with pytest.raises(ArgumentError, match=r"option prepack must be True or False, got 1"):
        td.backend(_graph(), [torch.randn(3, 4)], prepack=1)


def test_bad_dynamic():
    with pytest.raises(ArgumentError, match=r"option dynamic must be True or False, got 1"):
        td.backend(_graph(), [torch.randn(3, 4)], dynamic=1)


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
