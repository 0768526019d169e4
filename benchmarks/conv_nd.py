"""Transposed 2-d convolutions (decoder up-convolutions), 1-d convolutions (audio and
sequence shapes) and 3-d convolutions (small video shapes), auto-scheduled with
trials=0, against PyTorch (``conv_transpose2d``, ``conv1d``, ``conv3d``), interleaved in
one process.

Channels-first layouts on both sides (NCHW, NCW, NCDHW; PyTorch's weights).  Medians,
ms; ratio = PyTorch's time over tecomp's.  Each result is checked against PyTorch's
first.  ``--knobs JSON`` (repeatable) adds a tecomp row per shape scheduled with those
knobs of the rules (``--knobs '{"template.phases.interleave": "rules"}'``: the
transposed convolutions' interleave as the rules vectorize it), interleaved with the
others.  ``--ab [SWITCH,...]``: each 1-d and 3-d convolution also built with the module
switches named (comma-separated; by default all of them) off, timed in the same turns
("before"): ``LEAST_ROW_TAIL`` (``tecomp.strategy.cpu.conv_nd``: the conv1d_ncw wide
block always 6 vectors along the row, as before it took 5 where they pad the row less),
``SKIP_PADDED_COLUMNS`` (``tecomp.nn.conv_nd``: the columns' taps on the zero padding
computed, as before they were left out of NCDHW's sum) and ``TRANSPOSED_WEIGHT_COPY``
(``tecomp.strategy.cpu.conv3d``: the template's weight copy a gather per vector, as
before the register transposes).  ``--cpu-time`` (with ``--threads 1``): each call's
time is the process's CPU time, which on a loaded machine leaves out the time other
processes run.

    python3 benchmarks/conv_nd.py [--threads 2] [--rounds 7] [--only transpose,conv1d,conv3d] [--knobs JSON ...] [--ab [SWITCH,...]] [--cpu-time]
"""
from __future__ import annotations

import platform

from common import (add_cpu_time, base_parser, clock_of, interleaved_turns, pin_threads,
                    torch_or_none)

#: (name, batch, in channels, out channels, size, kernel, stride, padding)
TRANSPOSE = [
    ("DCGAN 512->256 4x4", 16, 512, 256, 4, 4, 2, 1),
    ("DCGAN 256->128 8x8", 16, 256, 128, 8, 4, 2, 1),
    ("DCGAN 128->64 16x16", 16, 128, 64, 16, 4, 2, 1),
    ("U-Net 512->256 2x2 32x32", 1, 512, 256, 32, 2, 2, 0),
    ("U-Net 256->128 2x2 64x64", 1, 256, 128, 64, 2, 2, 0),
    ("U-Net 128->64 2x2 128x128", 1, 128, 64, 128, 2, 2, 0),
]
#: (name, batch, in channels, out channels, length, kernel, stride, padding)
CONV1D = [
    ("wav2vec2 conv0 1->512 k10 s5", 1, 1, 512, 16000, 10, 5, 0),
    ("wav2vec2 conv1 512->512 k3 s2", 1, 512, 512, 3199, 3, 2, 0),
    ("seq 256->256 k3 L1024", 8, 256, 256, 1024, 3, 1, 1),
    ("seq 128->128 k5 L2048", 8, 128, 128, 2048, 5, 1, 2),
]
#: (name, batch, in channels, out channels, (depth, height, width), kernel, stride, padding)
CONV3D = [
    ("C3D conv1 3->64 16x56x56", 1, 3, 64, (16, 56, 56), 3, 1, 1),
    ("64->64 8x28x28", 1, 64, 64, (8, 28, 28), 3, 1, 1),
    ("128->128 4x14x14", 2, 128, 128, (4, 14, 14), 3, 1, 1),
]


#: the module switches ``--ab`` turns off (the 1-d and 3-d convolutions'), and their modules
AB_SWITCHES = {"SKIP_PADDED_COLUMNS": "tecomp.nn.conv_nd",
               "TRANSPOSED_WEIGHT_COPY": "tecomp.strategy.cpu.conv3d",
               "LEAST_ROW_TAIL": "tecomp.strategy.cpu.conv_nd"}


def main() -> None:
    ap = base_parser(__doc__, rounds=7)
    ap.add_argument("--only", default="transpose,conv1d,conv3d")
    ap.add_argument("--knobs", action="append", default=[],
                    help="JSON knobs of the rules: one more tecomp row per shape")
    ap.add_argument("--ab", nargs="?", const=",".join(AB_SWITCHES), default=None,
                    help="also time the 3-d convolutions with these switches off "
                         "(comma-separated; default all: " + ", ".join(AB_SWITCHES) + ")")
    add_cpu_time(ap)
    args = ap.parse_args()
    clock = clock_of(ap, args)
    switches = args.ab.split(",") if args.ab else []
    for name in switches:
        if name not in AB_SWITCHES:
            ap.error(f"--ab {name}: not one of " + ", ".join(AB_SWITCHES))
    pin_threads(args.threads)
    import importlib
    import json

    import numpy as np

    import tecomp as tc
    import tecomp.nn as nn
    from tecomp.strategy import Knobs, apply_rules
    from tecomp.strategy.cpu import cpu_model

    torch = torch_or_none(args.threads)
    if torch is None:
        raise SystemExit("conv_nd.py compares with PyTorch: pip install torch")
    F = torch.nn.functional
    rng = np.random.default_rng(0)
    fns, rows = {}, []
    only = set(args.only.split(","))
    if not only & {"transpose", "conv1d", "conv3d"}:
        ap.error(f"--only takes transpose, conv1d and/or conv3d (comma-separated), "
                 f"got {args.only!r}")

    def add(key, make, ref, xshape, wshape, ab=False):
        X = tc.placeholder(xshape, name="x")
        W = tc.placeholder(wshape, name="w")
        x = rng.standard_normal(xshape).astype("float32")
        fan = int(np.prod(wshape[1:]))
        w = (rng.standard_normal(wshape) / np.sqrt(fan)).astype("float32")
        tx, tw = torch.from_numpy(x), torch.from_numpy(w)
        want = ref(tx, tw).numpy()
        mods = {n: importlib.import_module(AB_SWITCHES[n]) for n in (switches if ab else [])}
        for on in (True, False) if mods else (True,):
            saved = {n: getattr(m, n) for n, m in mods.items()}
            for n, m in mods.items():
                setattr(m, n, saved[n] if on else False)
            try:
                Y = make(X, W)   # (SKIP_PADDED_COLUMNS: read as the operator is made)
                for kn in [None] + (args.knobs if on else []):
                    s = (tc.auto_schedule([X, W, Y]) if kn is None
                         else apply_rules([X, W, Y], Knobs(json.loads(kn)), cpu_model()))
                    f = tc.build(s, [X, W, Y])
                    out = np.empty(tc.utils.get_const_tuple(Y.shape), "float32")
                    f(x, w, out)
                    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)
                    fns[f"{'tecomp' if on else 'before'} {key}" + (f" {kn}" if kn else "")] \
                        = lambda f=f, a=(x, w, out): f(*a)
            finally:
                for n, m in mods.items():
                    setattr(m, n, saved[n])
        fns[f"torch {key}"] = lambda tx=tx, tw=tw: ref(tx, tw)
        rows.append(key)

    if "transpose" in only:
        for name, N, C, O, H, K, s, p in TRANSPOSE:
            add(f"conv2d_transpose {name}", lambda X, W, s=s, p=p:
                nn.conv2d_transpose_nchw(X, W, s, p),
                lambda a, b, s=s, p=p: F.conv_transpose2d(a, b, stride=s, padding=p),
                (N, C, H, H), (C, O, K, K))
    if "conv1d" in only:
        for name, N, C, O, L, K, s, p in CONV1D:
            add(f"conv1d {name}", lambda X, W, s=s, p=p: nn.conv1d_ncw(X, W, s, p),
                lambda a, b, s=s, p=p: F.conv1d(a, b, stride=s, padding=p),
                (N, C, L), (O, C, K), ab=True)
    if "conv3d" in only:
        for name, N, C, O, S, K, s, p in CONV3D:
            add(f"conv3d {name}", lambda X, W, s=s, p=p: nn.conv3d_ncdhw(X, W, s, p),
                lambda a, b, s=s, p=p: F.conv3d(a, b, stride=s, padding=p),
                (N, C, *S), (O, C, K, K, K), ab=True)
    t = interleaved_turns(fns, args.rounds, **clock)
    print(f"{tc.target.cpu_name()} ({platform.machine()}), {args.threads} threads, "
          f"{args.rounds} rounds: tecomp (auto_schedule, trials=0) vs PyTorch, float32, "
          f"channels first{', CPU time' if args.cpu_time else ''}")
    for key in rows:
        mine, theirs = t[f"tecomp {key}"], t[f"torch {key}"]
        print(f"  {key:48s} tecomp {mine * 1e3:8.3f} ms | torch {theirs * 1e3:8.3f} ms | "
              f"{theirs / mine:5.2f}x")
        for kn in args.knobs:
            other = t[f"tecomp {key} {kn}"]
            print(f"    with {kn}: {other * 1e3:8.3f} ms | {theirs / other:5.2f}x")
        if f"before {key}" in t:
            other = t[f"before {key}"]
            print(f"    before ({args.ab} off): {other * 1e3:8.3f} ms | {theirs / other:5.2f}x"
                  f" | now {other / mine:5.2f}x faster")


if __name__ == "__main__":
    main()
