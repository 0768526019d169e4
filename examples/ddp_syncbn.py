"""Data-parallel training with tecomp kernels: a small CNN whose convolutions are tecomp ops
and whose batch norms are ``tecomp.torch.SyncBatchNorm``, trained with
``torch.nn.parallel.DistributedDataParallel`` on 2 CPU processes (gloo), against the same
model trained on one process with ``torch.nn.BatchNorm2d`` on the concatenated batch.

Each step, each process takes its half of the batch.  SyncBatchNorm normalises with the
statistics of both halves (one all_gather), its backward all-reduces the two gradient sums,
and DDP averages the parameters' gradients: every step computes what the one-process model
computes on the whole batch, so the loss curves agree to float32 rounding.  The script
prints both curves and the largest difference, and exits with status 1 when it is above
``--tol``.

    python3 examples/ddp_syncbn.py [--steps 20] [--batch 16] [--tol 1e-4]

Needs torch (``pip install torch==2.13.0``) with torch.distributed (gloo).  On a machine
with several GPUs, ``--backend nccl`` runs the processes on one GPU each (the tecomp ops
are then compiled for the ``cuda`` target).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import tecomp as tc  # noqa: E402
import tecomp.nn as tnn  # noqa: E402
import tecomp.torch as tct  # noqa: E402

CLASSES = 4
CHANNELS = 8   # of the images: both convolutions are one tecomp op
_CONVS = {}


def conv_op(cin: int, cout: int, target: str):
    """A 3x3 convolution with padding 1 as a tecomp op (any batch size): ``y = conv(x, w)``."""
    key = (cin, cout, target)
    if key not in _CONVS:
        X = tc.placeholder((tc.var("n"), cin, 8, 8), name="X")
        W = tc.placeholder((cout, cin, 3, 3), name="W")
        # dynamic=True: one kernel for every batch size (the whole batch and a share)
        _CONVS[key] = tct.op([X, W], [tnn.conv2d_nchw(X, W, padding=1)], target=target,
                             name=f"ddp_conv_{cin}_{cout}", dynamic=True)
    return _CONVS[key]


class Conv(torch.nn.Module):
    """``torch.nn.Conv2d(cin, cout, 3, padding=1, bias=False)`` with a tecomp kernel."""

    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(cout, cin, 3, 3) * (2.0 / (9 * cin)) ** 0.5)
        self.cin, self.cout = cin, cout

    def forward(self, x):
        target = "cuda" if x.is_cuda else "llvm"
        return conv_op(self.cin, self.cout, target)(x, self.weight)


def model() -> torch.nn.Module:
    """conv -> BN -> ReLU, twice, then a global average pool and a linear classifier."""
    torch.manual_seed(0)
    return torch.nn.Sequential(
        Conv(CHANNELS, 8), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
        Conv(8, 8), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, CLASSES))


def data(steps: int, batch: int):
    """The whole batch of every step: images ``[batch, CHANNELS, 8, 8]`` and labels."""
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(batch, CHANNELS, 8, 8, generator=g),
             torch.randint(0, CLASSES, (batch,), generator=g)) for _ in range(steps)]


def train_one_process(steps: int, batch: int):
    """The reference: torch.nn.BatchNorm2d on the whole batch, one process."""
    net = model()
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for x, y in data(steps, batch):
        loss = F.cross_entropy(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, net


def _worker(rank: int, world: int, store: str, steps: int, batch: int, backend: str,
            out: str):
    torch.set_num_threads(1)
    dist.init_process_group(backend, init_method="file://" + store, rank=rank,
                            world_size=world)
    try:
        device = torch.device(f"cuda:{rank}") if backend == "nccl" else torch.device("cpu")
        net = tct.convert_sync_batchnorm(model()).to(device)
        ddp = torch.nn.parallel.DistributedDataParallel(
            net, device_ids=[rank] if backend == "nccl" else None)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
        share = batch // world
        losses = []
        for x, y in data(steps, batch):
            xs = x[rank * share:(rank + 1) * share].to(device)
            ys = y[rank * share:(rank + 1) * share].to(device)
            loss = F.cross_entropy(ddp(xs), ys)
            opt.zero_grad()
            loss.backward()
            opt.step()
            mean = loss.detach().clone()
            dist.all_reduce(mean)   # the loss over the whole batch (equal shares)
            losses.append(mean.item() / world)
        if rank == 0:
            torch.save({"losses": losses, "state": net.state_dict()}, out)
    finally:
        dist.destroy_process_group()


def train_ddp(steps: int, batch: int, world: int = 2, backend: str = "gloo"):
    """DDP with SyncBatchNorm on ``world`` processes; rank 0's losses and state."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "rank0.pt")
        mp.spawn(_worker, args=(world, os.path.join(tmp, "store"), steps, batch, backend, out),
                 nprocs=world, join=True)
        res = torch.load(out, weights_only=False)
    return res["losses"], res["state"]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch", type=int, default=16, help="the whole batch (split in two)")
    p.add_argument("--tol", type=float, default=1e-4)
    p.add_argument("--backend", default="gloo", choices=["gloo", "nccl"])
    a = p.parse_args(argv)
    if a.batch % 2:
        p.error("--batch must be even (two equal shares)")
    ref, ref_net = train_one_process(a.steps, a.batch)
    got, state = train_ddp(a.steps, a.batch, 2, a.backend)
    print("step  one process (BatchNorm2d)  DDP x2 (tecomp SyncBatchNorm)")
    for k, (r, g) in enumerate(zip(ref, got)):
        print(f"{k:4d}  {r:26.6f}  {g:30.6f}")
    diff = max(abs(r - g) for r, g in zip(ref, got))
    ref_state = ref_net.state_dict()
    buffers = max(float((state[k].double() - ref_state[k].double()).abs().max())
                  for k in ref_state if "running" in k)
    print(f"max |loss difference| {diff:.3g}; max |running statistics difference| "
          f"{buffers:.3g}")
    return 0 if diff <= a.tol and buffers <= a.tol else 1


if __name__ == "__main__":
    sys.exit(main())
