"""Batch norm on one process, training forward, its gradient and inference: tecomp's
``nn.batch_norm`` (auto-scheduled, trials=0; the gradient from ``tc.gradient``, analytic)
against PyTorch's ATen kernels, interleaved in one process.

tecomp's forward is ``nn.batch_norm(x, g, b, running_mean, running_var, training=True)``
(the output, both running statistics, and the batch mean and inverse standard deviation
kept for the backward, one kernel); its backward is ``tc.gradient`` of that output for
``x``, ``g`` and ``b`` given the incoming gradient, reading the kept statistics (the stages
replaced by placeholders with ``tecomp.te.retype``, as ``tecomp.torch`` does), one kernel.  PyTorch's are ``torch.native_batch_norm``
(the output, the saved mean and inverse standard deviation, the running statistics
updated in place) and ``torch.ops.aten.native_batch_norm_backward`` with what the forward
saved: what ``loss.backward()`` runs.  Medians, ms; ratio = PyTorch's time over
tecomp's.  Each result is checked against PyTorch's first.

``--layout NHWC``: tecomp's ``layout="NHWC"`` against PyTorch on channels-last tensors.

    python3 benchmarks/batch_norm.py [--threads 2] [--rounds 11] [--shapes 16x64x56x56,...]
                                     [--layout NCHW]
"""
from __future__ import annotations

import platform

from common import base_parser, interleaved_turns, pin_threads, torch_or_none

#: ResNet-50's batch norms at batch 16: (N, C, H, W)
SHAPES = "16x64x56x56,16x256x56x56,16x512x28x28,16x1024x14x14,16x2048x7x7"


def main() -> None:
    ap = base_parser(__doc__, rounds=11)
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--layout", default="NCHW", choices=["NCHW", "NHWC"])
    args = ap.parse_args()
    pin_threads(args.threads)
    import numpy as np

    import tecomp as tc
    import tecomp.nn as nn
    from tecomp.te.retype import retype

    torch = torch_or_none(args.threads)
    if torch is None:
        raise SystemExit("batch_norm.py compares with PyTorch: pip install torch")
    rng = np.random.default_rng(0)
    eps, momentum = 1e-5, 0.1
    rows = []
    for spec in args.shapes.split(","):
        N, C, H, W = (int(v) for v in spec.split("x"))
        nhwc = args.layout == "NHWC"
        shape = (N, H, W, C) if nhwc else (N, C, H, W)
        X = tc.placeholder(shape, name="x")
        g, b, rm, rv = (tc.placeholder((C,), name=n) for n in ("g", "b", "rm", "rv"))
        Y, RM, RV = nn.batch_norm(X, g, b, rm, rv, training=True, momentum=momentum, eps=eps,
                                  layout=args.layout)
        stats = {t.name: t for t in Y.op.input_tensors}
        MEAN, INV = stats["batch_norm.mean"], stats["batch_norm.invstd"]
        fwd_args = [X, g, b, rm, rv, Y, RM, RV, MEAN, INV]
        fwd = tc.build(tc.auto_schedule(fwd_args), fwd_args)
        D = tc.placeholder(Y.shape, name="dy")
        SM, SI = tc.placeholder((C,), name="saved_mean"), tc.placeholder((C,), name="saved_invstd")
        grads, ins = retype(list(tc.gradient(Y, [X, g, b], head=D)), [X, g, b, D],
                            replace={MEAN: SM, INV: SI})
        bwd_args = ins[:3] + [SM, SI, ins[3]] + grads
        bwd = tc.build(tc.auto_schedule(bwd_args), bwd_args)
        ev = nn.batch_norm(X, g, b, rm, rv, training=False, eps=eps, layout=args.layout)
        ev_args = [X, g, b, rm, rv, ev]
        evf = tc.build(tc.auto_schedule(ev_args), ev_args)

        x = rng.standard_normal(shape).astype("float32") * 2 + 0.5
        gv, bv = rng.standard_normal(C).astype("float32"), rng.standard_normal(C).astype("float32")
        rmv, rvv = np.zeros(C, "float32"), np.ones(C, "float32")
        dy = rng.standard_normal(shape).astype("float32")
        y, nrm, nrv = np.empty_like(x), np.empty_like(rmv), np.empty_like(rvv)
        smv, siv = np.empty_like(rmv), np.empty_like(rmv)
        dx, dgv, dbv = np.empty_like(x), np.empty_like(gv), np.empty_like(bv)
        ye = np.empty_like(x)

        tx, tg, tb = (torch.from_numpy(a) for a in (x, gv, bv))
        trm, trv, tdy = torch.from_numpy(rmv.copy()), torch.from_numpy(rvv.copy()), torch.from_numpy(dy)
        if nhwc:   # the same memory, as channels-last NCHW tensors
            tx, tdy = tx.permute(0, 3, 1, 2), tdy.permute(0, 3, 1, 2)

        def tnp(t):   # a PyTorch result in tecomp's layout
            return (t.permute(0, 2, 3, 1) if nhwc else t).numpy()

        def t_fwd():
            return torch.native_batch_norm(tx, tg, tb, trm, trv, True, momentum, eps)

        ty, smean, sinv = t_fwd()

        def t_bwd():
            return torch.ops.aten.native_batch_norm_backward(
                tdy, tx, tg, trm, trv, smean, sinv, True, eps, [True, True, True])

        def t_eval():
            return torch.native_batch_norm(tx, tg, tb, trm, trv, False, momentum, eps)

        # correctness, against PyTorch
        fwd(x, gv, bv, rmv, rvv, y, nrm, nrv, smv, siv)
        np.testing.assert_allclose(y, tnp(ty), rtol=1e-3, atol=1e-3)
        bwd(x, gv, bv, smv, siv, dy, dx, dgv, dbv)
        tdx, tdg, tdb = t_bwd()
        np.testing.assert_allclose(dx, tnp(tdx), rtol=1e-3, atol=1e-3)
        np.testing.assert_allclose(dbv, tdb.numpy(), rtol=1e-3, atol=1e-2)
        evf(x, gv, bv, rmv, rvv, ye)

        med = interleaved_turns({
            "tc_fwd": lambda: fwd(x, gv, bv, rmv, rvv, y, nrm, nrv, smv, siv), "pt_fwd": t_fwd,
            "tc_bwd": lambda: bwd(x, gv, bv, smv, siv, dy, dx, dgv, dbv), "pt_bwd": t_bwd,
            "tc_eval": lambda: evf(x, gv, bv, rmv, rvv, ye), "pt_eval": t_eval,
        }, args.rounds)
        row = [spec]
        for k in ("fwd", "bwd", "eval"):
            row += [med[f"tc_{k}"] * 1e3, med[f"pt_{k}"] * 1e3, med[f"pt_{k}"] / med[f"tc_{k}"]]
        step_tc, step_pt = med["tc_fwd"] + med["tc_bwd"], med["pt_fwd"] + med["pt_bwd"]
        row.append(step_pt / step_tc)
        rows.append(row)
    print(f"batch norm, float32, {args.layout}; {platform.processor() or platform.machine()}, "
          f"{tc.Target('llvm').cpu}, {args.threads} threads, torch {torch.__version__}; "
          f"medians of {args.rounds} interleaved rounds, ms")
    head = ("shape", "fwd tc", "fwd pt", "x", "bwd tc", "bwd pt", "x", "eval tc", "eval pt",
            "x", "fwd+bwd x")
    print(" | ".join(head))
    for r in rows:
        print(" | ".join([r[0]] + [f"{v:.2f}" if i % 3 != 2 else f"{v:.2f}x"
                                   for i, v in enumerate(r[1:-1])] + [f"{r[-1]:.2f}x"]))


if __name__ == "__main__":
    main()
