"""Mistakes with tecomp.torch.SyncBatchNorm: each raises a TecompError subclass naming the
argument and the fix -- on one process, and (mismatched modules) on every rank of a
2-process gloo group."""
import os
import sys
import tempfile

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

import tecomp.errors as errors  # noqa: E402
import tecomp.torch as tct  # noqa: E402
from tecomp.errors import (ArgumentError, AutodiffError, DTypeError,  # noqa: E402
                           RuntimeUnavailableError, ShapeError)

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from multiproc import launch  # noqa: E402  (tests/multiproc.py)


@pytest.mark.parametrize("call,error,pattern", [
    (lambda: tct.SyncBatchNorm(0), ShapeError,
     r"SyncBatchNorm: num_features must be an int >= 1 \(the channels C of an \[N, C, \*\] "
     r"input\), got 0"),
    (lambda: tct.SyncBatchNorm(3, momentum=2.0), ArgumentError,
     r"momentum must be a number in \[0, 1\] or None"),
    (lambda: tct.SyncBatchNorm(3, eps=-1.0), ArgumentError, r"eps must be a finite number >= 0"),
    (lambda: tct.SyncBatchNorm(3)(torch.randn(2, 4, 5)), ShapeError,
     r"the input has 4 channels \(axis 1\) but the module has num_features=3; give an "
     r"\[N, 3, \*\] input"),
    (lambda: tct.SyncBatchNorm(3)(torch.randn(3)), ShapeError,
     r"the input must be \[N, C, \*\] \(at least 2-d\), got 1-d"),
    (lambda: tct.SyncBatchNorm(3)(torch.ones(2, 3, dtype=torch.int32)), DTypeError,
     r"the input is torch.int32; give float32 or float64"),
    (lambda: tct.SyncBatchNorm(3)(torch.randn(2, 3, dtype=torch.float64)), DTypeError,
     r"the input is torch.float64 but the weight is torch.float32; give them one dtype"),
    (lambda: tct.SyncBatchNorm(3)(torch.randn(1, 3)), ShapeError,
     r"expected more than 1 value per channel when training, got input of shape \(1, 3\)"),
    (lambda: tct.convert_sync_batchnorm("model"), ArgumentError,
     r"convert_sync_batchnorm: give a torch.nn.Module, got str"),
])
def test_bad_syncbn_call(call, error, pattern):
    with pytest.raises(error, match=pattern):
        call()


@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                    reason="torch.distributed with gloo is not available")
def test_process_group_without_torch_distributed():
    """A module built with a process_group, used after the group was destroyed."""
    assert not dist.is_initialized()
    with tempfile.TemporaryDirectory() as tmp:
        dist.init_process_group("gloo", init_method="file://" + os.path.join(tmp, "store"),
                                rank=0, world_size=1)
        try:
            bn = tct.SyncBatchNorm(3, process_group=dist.new_group([0]))
        finally:
            dist.destroy_process_group()
    with pytest.raises(RuntimeUnavailableError,
                       match=r"SyncBatchNorm: a process_group was given but torch.distributed "
                             r"is not initialised.*call torch.distributed.init_process_group"):
        bn(torch.randn(4, 3, 2, 2))


@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                    reason="torch.distributed with gloo is not available")
@pytest.mark.parametrize("what,error,pattern", [
    ("features", ShapeError, r"SyncBatchNorm: the processes have different num_features "
                             r"\(rank 0: 3, rank 1: 4\); build the module with one "
                             r"num_features on every process"),
    ("dtype", DTypeError, r"the processes' inputs have different dtypes \(rank 0: "
                          r"torch.float32, rank 1: torch.float64\)"),
    ("second_derivative", AutodiffError,
     r"SyncBatchNorm: a second derivative \(torch\.autograd\.grad\(\.\.\., "
     r"create_graph=True\), a gradient penalty\) through the statistics of a group of more "
     r"than one process is not supported.*torch\.distributed\.new_group\(\[rank\]\)"),
])
def test_ranks_that_disagree(tmp_path_factory, what, error, pattern):
    """Every rank raises the same error (no rank is left waiting in a collective; a second
    derivative across processes would miss the other processes' terms)."""
    ranks = _mismatch_runs(tmp_path_factory)
    for res in ranks:
        name, message = res[what]
        with pytest.raises(error, match=pattern):
            raise getattr(errors, name)(message)


_RUNS = {}


def _mismatch_runs(tmp_path_factory):
    if "runs" not in _RUNS:   # one 2-process launch for both cases
        _RUNS["runs"] = launch("syncbn_cases:mismatch", 2, tmp_path_factory.mktemp("mis"), 120)
    return _RUNS["runs"]
