"""What each rank runs in tests/test_syncbn.py (through tests/multiproc.py): a
tecomp.torch.SyncBatchNorm trained a few steps on this rank's slice of a batch that every
rank draws from one seed, and the results the parent compares with torch's BatchNorm on
the whole batch."""
import torch
import torch.distributed as dist

import tecomp.torch as tct

C, H, W = 3, 4, 5


def data(batches, dtype, step):
    """The whole batch of one step and the head of the gradient."""
    g = torch.Generator().manual_seed(100 + step)
    x = torch.randn(sum(batches), C, H, W, generator=g, dtype=torch.float64) * 2 + 0.5
    h = torch.randn(sum(batches), C, H, W, generator=g, dtype=torch.float64)
    return x.to(dtype), h.to(dtype)


def params(dtype):
    g = torch.Generator().manual_seed(7)
    return (torch.randn(C, generator=g, dtype=torch.float64).to(dtype),
            torch.randn(C, generator=g, dtype=torch.float64).to(dtype))


def train(rank, world, outdir, batches, steps, dtype_name):
    """``steps`` training steps (forward, backward), then one eval forward."""
    dtype = getattr(torch, dtype_name)
    lo = sum(batches[:rank])
    hi = lo + batches[rank]
    bn = tct.SyncBatchNorm(C, momentum=0.2).to(dtype)
    w, b = params(dtype)
    with torch.no_grad():
        bn.weight.copy_(w)
        bn.bias.copy_(b)
    res = {"y": [], "dx": [], "dw": [], "db": []}
    for step in range(steps):
        x, h = data(batches, dtype, step)
        xr = x[lo:hi].clone().requires_grad_()
        y = bn(xr)
        dx, dw, db = torch.autograd.grad((y * h[lo:hi]).sum(), [xr, bn.weight, bn.bias],
                                         allow_unused=True)
        res["y"].append(y.detach())
        res["dx"].append(dx)
        res["dw"].append(dw if dw is not None else torch.zeros(C, dtype=dtype))
        res["db"].append(db if db is not None else torch.zeros(C, dtype=dtype))
    res["running_mean"] = bn.running_mean.clone()
    res["running_var"] = bn.running_var.clone()
    res["num_batches_tracked"] = int(bn.num_batches_tracked)
    bn.eval()
    x, _ = data(batches, dtype, steps)
    with torch.no_grad():
        res["eval"] = bn(x[lo:hi])
    return res


def mismatch(rank, world, outdir):
    """Modules whose num_features, then input dtype, differ on rank 1, then a second
    derivative through the group's statistics: each rank's error (type name and
    message)."""
    out = {}
    for what in ("features", "dtype", "second_derivative"):
        chans = C + (rank if what == "features" else 0)
        dtype = torch.float64 if (what == "dtype" and rank == 1) else torch.float32
        bn = tct.SyncBatchNorm(chans).to(dtype)
        try:
            x = torch.randn(4, chans, 2, 2, dtype=dtype, requires_grad=True)
            y = bn(x)
            if what == "second_derivative":   # a gradient penalty's first step
                torch.autograd.grad(y.square().sum(), [x], create_graph=True)
            out[what] = None
        except Exception as e:   # noqa: BLE001 (the parent checks its type)
            out[what] = (type(e).__name__, str(e))
    return out


def hang(rank, world, outdir):
    """Rank 1 never answers: rank 0 waits for it in a collective."""
    import time

    if rank == 1:
        time.sleep(600)
    dist.barrier()
    return {}
