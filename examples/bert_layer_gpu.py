"""A BERT-base encoder layer trained on the GPU through one ``tecomp.torch`` op on CUDA
tensors, in float16 or bfloat16 with float32 master weights (what ``torch.autocast`` does
for a layer's matmuls), next to the same layer in PyTorch under ``torch.autocast``.

The layer is ``examples/bert_layer.py``'s (Hugging Face's ``BertLayer``, eval mode),
declared with float16 (or bfloat16) placeholders: ``tecomp.nn`` sums the products, the
softmax's and the layer norms' statistics in float32 and rounds each stage's result to
the 16-bit dtype, as autocast's kernels do.  Its backward is ``tc.gradient`` of the whole
layer, scheduled for the GPU by the auto-scheduler like the forward.  The forward's
attention, with its padding mask, runs on FlashAttention's template (tensor cores, no
``seq x seq`` buffer); so does the backward's (``backward="flash"``: ``tc.gradient`` of
the attention is FlashAttention's backward, five GEMMs a tile pair, ``dq`` added with
atomics, never holding the scores; it reads the forward's output and logsumexp, which
the forward's kernel wrote and ``tecomp.torch`` saved: the forward runs once a step).  Each
training step:

    p16 = [w.to(dtype) for w in masters]        # float32 masters, cast per step
    y = layer(x, mask, *p16)                    # tecomp, CUDA tensors in and out
    loss = (y.float() - target).square().mean()
    loss.backward(); sgd(masters)               # the gradients reach the masters in float32

and the PyTorch layer does the same from its own copy of the masters under
``torch.autocast("cuda", dtype)``.  The losses of the two are printed step by step.

    python3 examples/bert_layer_gpu.py [--dtype float16] [--batch 8] [--seq 512] [--steps 5]
                                       [--attention-backward flash|stages]

Needs a CUDA GPU, torch with CUDA and tecomp's ``cuda`` extra.  Without a GPU it runs a
small layer (hidden 64, 2 heads) in tecomp's CUDA emulation instead -- the same
definitions, schedules and CUDA C, run on the CPU -- forward and backward against
PyTorch on the CPU, and says so.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import tecomp as tc  # noqa: E402
import tecomp.torch as tct  # noqa: E402
from bert_layer import PARAMS, bert_layer, random_inputs, torch_layer  # noqa: E402

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}
#: the largest difference allowed between the two layers' losses, relative
LOSS_RTOL = {"float16": 2e-2, "bfloat16": 5e-2}


def emulated(dtype: str, batch: int = 2, seq: int = 16, hidden: int = 64, heads: int = 2,
             ffn: int = 256) -> tuple:
    """The layer's forward and backward built for ``cuda-emu`` and run on numpy arrays:
    (the forward's largest difference from PyTorch's float32 layer, the gradients' largest
    difference relative to the largest gradient element)."""
    import ml_dtypes  # the numpy bfloat16 (tecomp's test extra)
    npdt = np.float16 if dtype == "float16" else ml_dtypes.bfloat16
    ins, y = bert_layer(batch, seq, hidden, heads, ffn, dtype=dtype, attention_backward="flash")
    head = tc.placeholder(y.shape, dtype=dtype, name="head")
    grads = tc.gradient(y, [ins[0]] + ins[2:], head)
    fwd = tc.build(tc.auto_schedule(ins + [y], target="cuda-emu"), ins + [y],
                   target="cuda-emu")
    bwd_args = ins + [head] + list(grads)
    bwd = tc.build(tc.auto_schedule(bwd_args, target="cuda-emu"), bwd_args, target="cuda-emu")
    gen = torch.Generator().manual_seed(0)
    x, mask, p = random_inputs(batch, seq, hidden, ffn, gen)
    # the reference: PyTorch's layer in float32 on the inputs rounded to the 16-bit dtype
    r16 = {k: t.to(DTYPES[dtype]).float() for k, t in p.items()}
    x16, mask16 = x.to(DTYPES[dtype]).float(), mask.to(DTYPES[dtype]).float()
    arrays = [x16.numpy().astype(npdt), mask16.numpy().astype(npdt)] + \
        [r16[k].numpy().astype(npdt) for k in PARAMS]
    out = np.zeros((batch * seq, hidden), npdt)
    fwd(*arrays, out)
    xr = x16.clone().requires_grad_()
    pr = {k: t.clone().requires_grad_() for k, t in r16.items()}
    ref = torch_layer(xr, mask16, pr, batch, seq, heads)
    err = float(np.abs(out.astype(np.float32) - ref.detach().numpy()).max())
    g = torch.randn(ref.shape, generator=gen).to(DTYPES[dtype]).float()
    ref.backward(g)
    res = [np.zeros([int(d.value) for d in t.shape], npdt) for t in grads]
    bwd(*arrays, g.numpy().astype(npdt), *res)
    refs = [xr.grad] + [pr[k].grad for k in PARAMS]
    scale = max(r.abs().max().item() for r in refs)
    worst = max(float(np.abs(a.astype(np.float32) - r.numpy()).max())
                for a, r in zip(res, refs)) / scale
    return err, worst


def train(args) -> int:
    dev, dt = torch.device("cuda"), DTYPES[args.dtype]
    b, s = args.batch, args.seq
    gen = torch.Generator().manual_seed(0)
    x, mask, p = random_inputs(b, s, args.hidden, args.ffn, gen)
    target = torch.randn(b * s, args.hidden, generator=gen).to(dev)
    x, mask = x.to(dev, dt), mask.to(dev, dt)
    ins, y = bert_layer(b, s, args.hidden, args.heads, args.ffn, dtype=args.dtype,
                        attention_backward=args.attention_backward)
    layer = tct.op(ins, y, target="cuda", name="bert_layer_gpu")
    mine = {k: t.to(dev).requires_grad_() for k, t in p.items()}     # float32 masters
    theirs = {k: t.to(dev).requires_grad_() for k, t in p.items()}

    def step(which: str, update: bool = True) -> float:
        masters = mine if which == "tecomp" else theirs
        if which == "tecomp":
            out = layer(x, mask, *[masters[k].to(dt) for k in PARAMS])
        else:
            with torch.autocast("cuda", dtype=dt):
                out = torch_layer(x, mask, masters, b, s, args.heads)
        loss = (out.float() - target).square().mean()
        loss.backward()
        with torch.no_grad():
            for t in masters.values():
                if update:
                    t -= args.lr * t.grad
                t.grad = None
        return loss.item()

    t0 = time.perf_counter()
    print(f"{torch.cuda.get_device_name()}: BERT layer, batch {b} x {s}, {args.dtype}")
    ok = True
    for i in range(args.steps):
        a, r = step("tecomp"), step("torch")
        close = abs(a - r) <= LOSS_RTOL[args.dtype] * abs(r)
        ok = ok and close
        print(f"step {i}: loss tecomp {a:.5f}, PyTorch (autocast) {r:.5f}"
              f"{'' if close else '  <- differs'}")
        if i == 0:
            print(f"  (first step, tecomp's forward and backward compiled: "
                  f"{time.perf_counter() - t0:.1f} s)")
    times = {"tecomp": [], "torch": []}
    for r in range(args.rounds):   # interleaved; the weights no longer change
        for name in (("tecomp", "torch") if r % 2 == 0 else ("torch", "tecomp")):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            step(name, update=False)
            torch.cuda.synchronize()
            times[name].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"forward + backward + loss: tecomp {med['tecomp'] * 1e3:.2f} ms, PyTorch autocast "
          f"{med['torch'] * 1e3:.2f} ms ({med['torch'] / med['tecomp']:.2f}x PyTorch's speed)")
    print("OK" if ok else "MISMATCH")
    return 0 if ok else 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="float16")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--ffn", type=int, default=3072)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--lr", type=float, default=1e-2)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--attention-backward", choices=["flash", "stages"], default="flash",
                    help="the attention's gradient: FlashAttention's backward (default), or "
                         "its general stages (which hold the seq x seq scores), to compare")
    ap.add_argument("--emulate", action="store_true",
                    help="run the small layer in the CUDA emulation even where there is a GPU")
    args = ap.parse_args(argv)
    if args.emulate or not torch.cuda.is_available():
        print(f"no CUDA GPU here: a BERT layer of hidden 64 (2 heads, batch 2 x 16), "
              f"{args.dtype}, in tecomp's CUDA emulation, against PyTorch in float32")
        err, worst = emulated(args.dtype)
        tol = LOSS_RTOL[args.dtype]
        print(f"forward: max |tecomp - torch| = {err:.2e}")
        print(f"backward: largest gradient difference, relative to the largest gradient "
              f"element: {worst:.2e}")
        ok = err < tol and worst < tol
        print("OK" if ok else "MISMATCH")
        return 0 if ok else 1
    return train(args)


if __name__ == "__main__":
    sys.exit(main())
