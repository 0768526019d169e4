"""SyncBatchNorm forward + backward on 2 processes: tecomp.torch.SyncBatchNorm against
PyTorch, interleaved in the same processes (target: at least 1.0x PyTorch's speed).

Each process normalises a batch ``[32, 64, 56, 56]`` (``--shape``) and back-propagates a
fixed gradient, per step.  The reference is ``torch.nn.SyncBatchNorm`` on CUDA tensors
(``--backend nccl``, one GPU per process); torch's refuses CPU tensors, so on CPUs (gloo)
it is the same protocol with torch's kernels (``TorchSyncBN`` below: ``torch.var_mean``
for the local statistics, the same ``all_gather`` of (mean, m2, count), torch's
elementwise normalisation, the same ``all_reduce`` of the two gradient sums): both tools
exchange the same bytes, so the gap is the kernels.

    python3 benchmarks/syncbn.py [--procs 2] [--threads N] [--rounds 10]
                                 [--shape 32,64,56,56] [--backend gloo|nccl]

``--threads`` is per process (default: the CPU count over ``--procs``).  Rank 0 prints
the medians of interleaved rounds (see run.py's ``interleaved``) and the largest
difference of the outputs and input gradients.
"""
from __future__ import annotations

import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from common import base_parser, pin_threads  # noqa: E402


def _torch_syncbn():
    """The CPU reference: torch.nn.SyncBatchNorm's protocol with torch's kernels."""
    import torch
    import torch.distributed as dist

    class Fn(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w, b, rm, rv, eps, momentum):
            C = x.shape[1]
            dims = [0] + list(range(2, x.dim()))
            count = x.numel() // C
            var, mean = torch.var_mean(x, dim=dims, correction=0)
            packed = torch.cat([mean.double(), (var * count).double(),
                                torch.tensor([float(count)], dtype=torch.float64)])
            parts = [torch.empty_like(packed) for _ in range(dist.get_world_size())]
            dist.all_gather(parts, packed)
            allp = torch.stack(parts)
            n, means, m2s = allp[:, 2 * C], allp[:, :C], allp[:, C:2 * C]
            total = n.sum()
            gmean = (n[:, None] * means).sum(0) / total
            gm2 = (m2s + n[:, None] * (means - gmean) ** 2).sum(0)
            with torch.no_grad():
                rm.mul_(1 - momentum).add_(gmean.float() * momentum)
                rv.mul_(1 - momentum).add_((gm2 / (total - 1)).float() * momentum)
            shape = [1, C] + [1] * (x.dim() - 2)
            mean_x = gmean.to(x.dtype).view(shape)
            invstd = torch.rsqrt((gm2 / total).to(x.dtype) + eps).view(shape)
            ctx.save_for_backward(x, w, mean_x, invstd)
            ctx.total = float(total)
            return (x - mean_x) * (invstd * w.view(shape)) + b.view(shape)

        @staticmethod
        def backward(ctx, g):
            x, w, mean, invstd = ctx.saved_tensors
            dims = [0] + list(range(2, x.dim()))
            xmu = x - mean
            sdy = g.sum(dims)
            sdyx = (g * xmu).sum(dims)
            gw, gb = sdyx * invstd.flatten(), sdy.clone()
            both = torch.cat([sdy, sdyx])
            dist.all_reduce(both)
            C = x.shape[1]
            shape = mean.shape
            mdy = (both[:C] / ctx.total).view(shape)
            k = (invstd * invstd * (both[C:] / ctx.total).view(shape))
            gx = (g - mdy - xmu * k) * (invstd * w.view(shape))
            return gx, gw, gb, None, None, None, None

    class TorchSyncBN(torch.nn.BatchNorm2d):
        def forward(self, x):
            return Fn.apply(x, self.weight, self.bias, self.running_mean, self.running_var,
                            self.eps, self.momentum)

    return TorchSyncBN


def _worker(rank, args, store):
    pin_threads(args.threads)
    import torch
    import torch.distributed as dist

    import tecomp.torch as tct
    from run import interleaved

    torch.set_num_threads(args.threads)
    dist.init_process_group(args.backend, init_method="file://" + store, rank=rank,
                            world_size=args.procs)
    try:
        cuda = args.backend == "nccl"
        dev = torch.device(f"cuda:{rank}" if cuda else "cpu")
        shape = tuple(int(s) for s in args.shape.split(","))
        C = shape[1]
        gen = torch.Generator().manual_seed(rank)
        x = torch.randn(shape, generator=gen).to(dev).requires_grad_()
        g = torch.randn(shape, generator=gen).to(dev)
        ours = tct.SyncBatchNorm(C).to(dev)
        ref = (torch.nn.SyncBatchNorm(C) if cuda else _torch_syncbn()(C)).to(dev)

        def step(bn):
            def run():
                x.grad = None
                bn.weight.grad = bn.bias.grad = None
                bn(x).backward(g)
                if cuda:
                    torch.cuda.synchronize()
            return run

        y1 = ours(x)
        gx1, = torch.autograd.grad(y1, [x], g)
        y2 = ref(x)
        gx2, = torch.autograd.grad(y2, [x], g)
        err = max(float((y1 - y2).abs().max()), float((gx1 - gx2).abs().max()))
        t = interleaved({"tecomp SyncBatchNorm": step(ours),
                         ("torch.nn.SyncBatchNorm" if cuda else "torch kernels, same protocol"):
                         step(ref)}, args.rounds)
        if rank == 0:
            print(f"# {args.procs} processes x {args.threads} threads, {args.backend}, "
                  f"torch {torch.__version__}; per process {shape}; max |diff| {err:.1e}")
            names = list(t)
            for k in names:
                print(f"{k:32s} {t[k] * 1e3:9.2f} ms  fwd+bwd")
            print(f"speed-up tecomp vs torch          {t[names[1]] / t[names[0]]:9.2f}x "
                  f"(target >= 1.0x)")
    finally:
        dist.destroy_process_group()


def main() -> int:
    ap = base_parser(__doc__, 10)
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--shape", default="32,64,56,56")
    ap.add_argument("--backend", default="gloo", choices=["gloo", "nccl"])
    args = ap.parse_args()
    if "--threads" not in sys.argv:
        args.threads = max(1, (os.cpu_count() or 2) // args.procs)
    pin_threads(args.threads)
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(_worker, args=(args, os.path.join(tmp, "store")), nprocs=args.procs,
                 join=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
