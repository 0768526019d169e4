"""tecomp.torch.SyncBatchNorm on 2 and 3 gloo CPU processes against torch's BatchNorm on
the concatenated batch (what torch.nn.SyncBatchNorm computes; torch's own refuses CPU
tensors): forward, input/weight/bias gradients, running statistics after several steps,
unequal batches, an empty rank, eval mode; and on one process."""
import os
import sys

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

import tecomp.torch as tct  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import syncbn_cases as cases  # noqa: E402
from multiproc import launch, run_script  # noqa: E402  (not "distributed": dask imports that)

pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                                reason="torch.distributed with gloo is not available")

TOL = {"float32": 1e-5, "float64": 1e-10}


def _reference(batches, steps, dtype):
    """torch.nn.BatchNorm2d on the whole batch, the same steps."""
    bn = torch.nn.BatchNorm2d(cases.C, momentum=0.2).to(dtype)
    w, b = cases.params(dtype)
    with torch.no_grad():
        bn.weight.copy_(w)
        bn.bias.copy_(b)
    out = {"y": [], "dx": [], "dw": [], "db": []}
    for step in range(steps):
        x, h = cases.data(batches, dtype, step)
        x.requires_grad_()
        y = bn(x)
        dx, dw, db = torch.autograd.grad((y * h).sum(), [x, bn.weight, bn.bias])
        out["y"].append(y.detach())
        out["dx"].append(dx)
        out["dw"].append(dw)
        out["db"].append(db)
    out["running_mean"], out["running_var"] = bn.running_mean, bn.running_var
    bn.eval()
    x, _ = cases.data(batches, dtype, steps)
    with torch.no_grad():
        out["eval"] = bn(x)
    return out


def _close(a, b, tol, what):
    err = float((a.double() - b.double()).abs().max()) if a.numel() else 0.0
    scale = max(1.0, float(b.double().abs().max())) if b.numel() else 1.0
    assert err <= tol * scale, f"{what}: max |difference| {err:.3g} > {tol:g} (scale {scale:.3g})"


def _check(ranks, batches, steps, dtype_name):
    dtype = getattr(torch, dtype_name)
    ref = _reference(batches, steps, dtype)
    tol = TOL[dtype_name]
    for r, res in enumerate(ranks):
        assert "error" not in res, res
        lo = sum(batches[:r])
        hi = lo + batches[r]
        for step in range(steps):
            for k in ("y", "dx"):
                assert res[k][step].dtype == dtype
                _close(res[k][step], ref[k][step][lo:hi], tol, f"rank {r} step {step} {k}")
        _close(res["running_mean"], ref["running_mean"], tol, f"rank {r} running_mean")
        _close(res["running_var"], ref["running_var"], tol, f"rank {r} running_var")
        assert res["num_batches_tracked"] == steps
        _close(res["eval"], ref["eval"][lo:hi], tol, f"rank {r} eval")
    for step in range(steps):   # the parameters' gradients are per rank: DDP sums them
        for k in ("dw", "db"):
            total = sum(res[k][step] for res in ranks)
            _close(total, ref[k][step], tol, f"step {step} sum of {k} over the ranks")


@pytest.mark.parametrize("world,batches,dtype", [
    (2, (3, 5), "float32"),      # unequal batches
    (3, (4, 0, 3), "float64"),   # rank 1 has an empty batch
])
def test_syncbn_matches_batchnorm_on_the_whole_batch(tmp_path, world, batches, dtype):
    ranks = launch("syncbn_cases:train", world, tmp_path, 120, list(batches), 3, dtype)
    _check(ranks, list(batches), 3, dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_syncbn_one_process_is_batchnorm(dtype):
    """Not distributed: this process's batch, as torch.nn.SyncBatchNorm falls back to."""
    batches, steps = [6], 3
    ranks = [cases.train(0, 1, None, batches, steps, dtype)]
    _check(ranks, batches, steps, dtype)


def test_syncbn_channels_last_and_3d_inputs():
    bn, ref = tct.SyncBatchNorm(4), torch.nn.BatchNorm3d(4)
    x = torch.randn(3, 4, 2, 3, 5)
    torch.testing.assert_close(bn(x), ref(x), atol=1e-5, rtol=1e-5)
    bn2, ref2 = tct.SyncBatchNorm(4, affine=False), torch.nn.BatchNorm2d(4, affine=False)
    x = torch.randn(3, 4, 6, 5).to(memory_format=torch.channels_last).requires_grad_()
    y, yr = bn2(x), ref2(x)
    torch.testing.assert_close(y, yr, atol=1e-5, rtol=1e-5)
    g, = torch.autograd.grad(y.square().sum(), [x])
    gr, = torch.autograd.grad(yr.square().sum(), [x])
    torch.testing.assert_close(g, gr, atol=1e-5, rtol=1e-5)


def test_syncbn_eval_is_differentiable():
    """eval(): the running statistics normalise (a tecomp op), and autograd goes through
    it to the input and the parameters."""
    bn, ref = tct.SyncBatchNorm(3), torch.nn.BatchNorm2d(3)
    for m in (bn, ref):
        m.running_mean.fill_(0.3)
        m.running_var.fill_(2.0)
        m.eval()
    x = torch.randn(2, 3, 4, 4, requires_grad=True)
    y, yr = bn(x), ref(x)
    torch.testing.assert_close(y, yr, atol=1e-5, rtol=1e-5)
    got = torch.autograd.grad(y.square().sum(), [x, bn.weight, bn.bias])
    want = torch.autograd.grad(yr.square().sum(), [x, ref.weight, ref.bias])
    for a, e in zip(got, want):
        torch.testing.assert_close(a, e, atol=1e-5, rtol=1e-5)


def test_syncbn_second_derivative_is_batchnorms():
    """A gradient penalty (torch.autograd.grad(..., create_graph=True), then a backward
    through the gradient) in training: the input's and the weight's gradients are torch
    BatchNorm's.  Before session 31 the first gradient was computed by kernels outside
    autograd, a constant: the penalty's terms silently vanished from them."""
    bn, ref = tct.SyncBatchNorm(3).double(), torch.nn.BatchNorm2d(3).double()
    with torch.no_grad():
        bn.weight.uniform_(0.5, 1.5)
        ref.weight.copy_(bn.weight)
    x0 = torch.randn(4, 3, 3, 2, dtype=torch.float64).to(memory_format=torch.channels_last)
    got = []
    for m in (bn, ref):
        x = x0.clone().requires_grad_()
        g, = torch.autograd.grad(m(x).pow(3).sum(), [x], create_graph=True)
        torch.autograd.backward(g.square().sum() + x.sum())
        got.append((g, x.grad, m.weight.grad, m.bias.grad))
    for a, e in zip(*got):
        torch.testing.assert_close(a, e)
    x = x0[:2, :, :2].clone().requires_grad_()
    assert torch.autograd.gradgradcheck(tct.SyncBatchNorm(3, affine=False).double(), (x,))


def test_syncbn_momentum_none_and_no_running_stats():
    bn, ref = tct.SyncBatchNorm(2, momentum=None), torch.nn.BatchNorm2d(2, momentum=None)
    for _ in range(3):
        x = torch.randn(4, 2, 3, 3)
        torch.testing.assert_close(bn(x), ref(x), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(bn.running_var, ref.running_var)
    bn = tct.SyncBatchNorm(2, track_running_stats=False).eval()
    ref = torch.nn.BatchNorm2d(2, track_running_stats=False).eval()
    x = torch.randn(4, 2, 3, 3)
    torch.testing.assert_close(bn(x), ref(x), atol=1e-5, rtol=1e-5)


def test_convert_sync_batchnorm_keeps_parameters_and_buffers():
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4),
                                torch.nn.Sequential(torch.nn.BatchNorm2d(4)))
    with torch.no_grad():
        model[1].weight.fill_(2.0)
        model[1].running_mean.fill_(0.5)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    conv = tct.convert_sync_batchnorm(model)
    assert isinstance(conv[1], tct.SyncBatchNorm) and isinstance(conv[2][0], tct.SyncBatchNorm)
    assert isinstance(conv[1], torch.nn.modules.batchnorm._BatchNorm)
    for k, v in conv.state_dict().items():
        torch.testing.assert_close(v, state[k])
    assert conv[1].weight is model[1].weight
    assert isinstance(tct.SyncBatchNorm.convert_sync_batchnorm(torch.nn.BatchNorm1d(3)),
                      tct.SyncBatchNorm)


def test_a_hanging_rank_is_killed_with_the_others(tmp_path):
    """The launcher's bound: a rank that never answers fails the test after the timeout,
    and no process of the group is left behind."""
    import subprocess

    pids = []
    with pytest.raises(subprocess.TimeoutExpired):
        launch("syncbn_cases:hang", 2, tmp_path, 4, pids=pids)
    assert len(pids) == 2
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)   # reaped: no such process


def test_ddp_example_matches_one_process():
    """examples/ddp_syncbn.py: DDP on 2 gloo processes with SyncBatchNorm, the loss curve
    of one process on the concatenated batch (the script exits 1 when they differ)."""
    rc, out = run_script(["examples/ddp_syncbn.py", "--steps", "3", "--tol", "1e-4"], 240)
    assert rc == 0, out[-4000:]
    assert "max |loss difference|" in out
    rows = [line.split() for line in out.splitlines() if line[:4].strip().isdigit()]
    assert len(rows) == 3
    for _, ref, got in rows:
        assert abs(float(ref) - float(got)) <= 1e-4
