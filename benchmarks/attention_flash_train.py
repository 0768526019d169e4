"""A training step of attention with FlashAttention's backward on the CPU
(``scaled_dot_product_attention(..., backward="flash")`` through ``tecomp.torch.op``):
the training forward (the output and the rows' logsumexp, which the backward reads) on
the attention template (each task writes its rows' logsumexp) against the same forward
by the generic rules (what it was before: the template stepped aside, the scores held
whole), the backward the same for both; interleaved in one process.

    python3 benchmarks/attention_flash_train.py [--batch 2] [--heads 4] [--seq 512]
                                                [--dim 64] [--dtype float16|bfloat16]
                                                [--threads 2] [--rounds 10]

Times: medians of interleaved rounds (run.py's ``interleaved``) of the forward alone and
of forward + backward; the CPU model and the load are printed first.  Memory: the
largest buffer the forward allocates and all it allocates (the lowered IR; a buffer
inside the parallel loop counted once per thread).  Both forwards' outputs are checked
against each other and a float64 reference first.
"""
from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from common import base_parser, pin_threads  # noqa: E402


def _allocations(func, threads: int):
    """(largest buffer, total) in bytes of the buffers a lowered function allocates; a
    buffer inside a parallel loop counted ``threads`` times in the total."""
    from tecomp.ir import Allocate, For
    from tecomp.ir import dtype as dt
    from tecomp.ir.functor import collect

    inner = set()
    for loop in collect(func.body, lambda n: isinstance(n, For) and n.kind == "parallel"):
        inner |= {id(a) for a in collect(loop.body, lambda n: isinstance(n, Allocate))}
    largest = total = 0
    for a in collect(func.body, lambda n: isinstance(n, Allocate)):
        n = dt.bits(a.buffer.dtype) // 8
        for e in a.buffer.shape:
            n *= int(e.value)
        largest = max(largest, n)
        total += n * (threads if id(a) in inner else 1)
    return largest, total


def main() -> int:
    ap = base_parser(__doc__, 10)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--dtype", default="float16", choices=["float16", "bfloat16"])
    args = ap.parse_args()
    pin_threads(args.threads)
    from run import interleaved, uptime   # (first: it sets the thread pools' wait policies)
    from workloads import machine

    import ml_dtypes
    import numpy as np

    import tecomp as tc
    import tecomp.torch as tct
    from tecomp.strategy.cpu import apply_rules
    from tecomp.strategy.rules import Knobs
    from tecomp.target import cpu_model

    B, H, L, D = args.batch, args.heads, args.seq, args.dim
    print(f"# {machine()}; {args.threads} threads")
    print(f"# load before: {uptime()}")
    q, k, v = (tc.placeholder((B, H, L, D), args.dtype, name=n) for n in "qkv")
    out = tc.nn.scaled_dot_product_attention(q, k, v, name="att", backward="flash")
    op = tct.op([q, k, v], out, target="llvm", name="att_flash")
    built, real = {}, tct.build

    def build(s, bargs, target=None, name=None):
        built[name.rsplit("_", 1)[1]] = bargs
        if name.endswith("_backward"):
            built["backward memory"] = _allocations(tc.lower(s, bargs), args.threads)
        return real(s, bargs, target=target, name=name)
    tct.build = build
    tr = op._compile_training(tct._Compiled(op.inputs, op.outputs, None))
    tct.build = real
    fargs, bargs = built["train"], built["backward"]
    info = cpu_model("llvm")
    mods, mem = {}, {}
    for name, knobs in (("template", {}), ("rules", {"part.att": False})):
        s = apply_rules(fargs, Knobs(knobs), info)
        mem[name] = _allocations(tc.lower(s, fargs), args.threads)
        mods[name] = tc.build(s, fargs)
    rng = np.random.default_rng(0)

    def arrays(ts):
        return [rng.standard_normal(tuple(int(e.value) for e in t.shape)).astype(np_dtype(t))
                for t in ts]

    def np_dtype(t):
        return ml_dtypes.bfloat16 if t.dtype == "bfloat16" else t.dtype
    ins = arrays(fargs[:3])
    outs = {n: [np.full(tuple(int(e.value) for e in t.shape), np.nan, np_dtype(t))
                for t in fargs[3:]] for n in mods}
    for n, m in mods.items():
        m(*ins, *outs[n])
    for a, b in zip(outs["template"], outs["rules"]):
        np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64), rtol=0,
                                   atol=1e-3 * np.abs(b.astype(np.float64)).max())
    q64, k64, v64 = (x.astype(np.float64) for x in ins)
    s64 = q64 @ k64.transpose(0, 1, 3, 2) / np.sqrt(D)
    lse = np.log(np.exp(s64 - s64.max(-1, keepdims=True)).sum(-1)) + s64.max(-1)
    np.testing.assert_allclose(outs["template"][1], lse, rtol=0, atol=1e-4)
    # the backward: q, k, v, the incoming gradient, the saved logsumexp and output, dq dk dv
    head = arrays(bargs[3:4])
    grads = arrays(bargs[6:])

    def step(n):
        o, ls = outs[n]
        mods[n](*ins, o, ls)
        tr.bwd(*ins, *head, ls, o, *grads)

    fns = {f"fwd {n}": (lambda n=n: mods[n](*ins, *outs[n])) for n in mods}
    fns.update({f"step {n}": (lambda n=n: step(n)) for n in mods})
    t = interleaved(fns, args.rounds)
    print(f"# load after: {uptime()}")
    print(f"\n## attention training step, batch {B}, {H} heads, seq {L}, head dim {D}, "
          f"{args.dtype}, backward=\"flash\" (ms; ratio = rules / template)")
    for what in ("fwd", "step"):
        a, b = t[f"{what} template"], t[f"{what} rules"]
        print(f"{what:>5}: template {a * 1e3:8.2f}  rules (before) {b * 1e3:8.2f}  "
              f"ratio {b / a:5.2f}x")
    print("\n## allocations (KiB): largest buffer, all (per-task ones x threads)")
    for n, (big, tot) in mem.items():
        print(f"fwd {n:>9}: largest {big / 1024:10.0f}  all {tot / 1024:10.0f}")
    big, tot = built["backward memory"]
    print(f"     backward: largest {big / 1024:10.0f}  all {tot / 1024:10.0f}  (the same for both)")
    print(f"   for scale: one seq x seq float32 matrix of all heads {B * H * L * L * 4 / 1024:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
