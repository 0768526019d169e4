"""Fused attention (tecomp.nn.scaled_dot_product_attention with its CPU schedule,
schedule_attention: what tc.auto_schedule gives the op) against PyTorch's
F.scaled_dot_product_attention on the CPU, interleaved in one process, and the memory
each needs besides its inputs and output.

    python3 benchmarks/attention.py [--seq 512,2048] [--threads 2] [--rounds 10]
                                    [--batch 1] [--heads 12] [--dim 64]

Times: medians of interleaved rounds (run.py's ``interleaved``); the CPU model and the
load are printed first.  Both outputs are checked against a float64 reference first.

Memory: tecomp's scratch is read off the lowered IR: the buffers allocated inside the
parallel loop (one set per task, at most one task per thread at a time), times the
threads.  PyTorch's is what its profiler (``profile_memory=True``) records the call
allocating besides its output (its flash kernel's per-thread buffers).  For scale, the
``(seq x seq)`` matrix of scores of the textbook formula (PyTorch's math path, which
also holds the probabilities) is printed too.
"""
from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from common import base_parser, pin_threads  # noqa: E402


def _scratch_bytes(func) -> int:
    """Bytes of the buffers allocated inside the parallel loop of a lowered function."""
    from tecomp.ir import Allocate, For
    from tecomp.ir.functor import collect
    from tecomp.ir import dtype as dt

    total = 0
    for loop in collect(func.body, lambda n: isinstance(n, For) and n.kind == "parallel"):
        for a in collect(loop.body, lambda n: isinstance(n, Allocate)):
            n = dt.bits(a.buffer.dtype) // 8
            for e in a.buffer.shape:
                n *= int(e.value)
            total += n
    return total


def _torch_scratch_bytes(torch, fn, out_bytes: int) -> int:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    alloc = sum(max(e.self_cpu_memory_usage, 0) for e in prof.key_averages()
                if not e.key.startswith("[memory]"))
    return max(alloc - out_bytes, 0)


def main() -> int:
    ap = base_parser(__doc__, 10)
    ap.add_argument("--seq", default="512,2048", help="sequence lengths, comma-separated")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--dim", type=int, default=64)
    args = ap.parse_args()
    pin_threads(args.threads)
    from run import interleaved, uptime   # (first: it sets the thread pools' wait policies)
    from workloads import machine

    import numpy as np
    import torch

    import tecomp as tc
    from tecomp import nn
    from tecomp.strategy.cpu import schedule_attention

    torch.set_num_threads(args.threads)
    F = torch.nn.functional
    B, H, D = args.batch, args.heads, args.dim
    print(f"# {machine()}; {args.threads} threads; torch {torch.__version__}; "
          f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}")
    print(f"# load before: {uptime()}")
    rows = []
    for L in (int(x) for x in args.seq.split(",")):
        q = tc.placeholder((B, H, L, D), name="q")
        k = tc.placeholder((B, H, L, D), name="k")
        v = tc.placeholder((B, H, L, D), name="v")
        o = nn.scaled_dot_product_attention(q, k, v)
        s = schedule_attention(o)
        f = tc.build(s, [q, k, v, o])
        scratch = _scratch_bytes(tc.lower(s, [q, k, v, o])) * args.threads
        rng = np.random.default_rng(0)
        a = [rng.standard_normal((B, H, L, D)).astype("float32") for _ in range(3)]
        out = np.empty((B, H, L, D), "float32")
        ta = [torch.from_numpy(x) for x in a]
        f(*a, out)
        ref = F.scaled_dot_product_attention(*[t.double() for t in ta]).numpy()
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(F.scaled_dot_product_attention(*ta).numpy(), ref,
                                   rtol=1e-4, atol=1e-5)

        def tecomp_call():
            f(*a, out)

        def torch_call():
            with torch.no_grad():
                return F.scaled_dot_product_attention(*ta)

        tscratch = _torch_scratch_bytes(torch, torch_call, out.nbytes)
        t = interleaved({"tecomp": tecomp_call, "torch": torch_call}, args.rounds)
        flops = 4.0 * B * H * L * L * D
        rows.append((L, t["tecomp"], t["torch"], flops, scratch, tscratch,
                     B * H * L * L * 4))
    print(f"# load after: {uptime()}")
    print(f"\n## attention, batch {B}, {H} heads, dim {D}, float32, no mask "
          f"(forward; ms, GFLOP/s; speedup = torch time / tecomp time)")
    print(f"{'seq':>6} {'tecomp ms':>10} {'torch ms':>10} {'speedup':>8} {'tecomp GF/s':>12} "
          f"{'torch GF/s':>11}")
    for L, tt, tq, fl, *_ in rows:
        print(f"{L:6d} {tt * 1e3:10.2f} {tq * 1e3:10.2f} {tq / tt:7.2f}x {fl / tt / 1e9:12.1f} "
              f"{fl / tq / 1e9:11.1f}")
    print("\n## memory besides inputs and output (KiB)")
    print(f"{'seq':>6} {'tecomp scratch':>15} {'torch scratch':>14} {'seq x seq scores':>17}")
    for L, _, _, _, sc, tsc, full in rows:
        print(f"{L:6d} {sc / 1024:15.0f} {tsc / 1024:14.0f} {full / 1024:17.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
