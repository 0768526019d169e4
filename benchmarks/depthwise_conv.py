"""Depthwise 3x3 convolutions (MobileNet's layers) and grouped 3x3 convolutions (ResNeXt-50
32x4d's), auto-scheduled with trials=0, against PyTorch, interleaved in one process.

tecomp: ``nn.depthwise_conv2d_nchw`` / ``nn.depthwise_conv2d_nhwc`` (weights ``[C, 1, 3,
3]`` / ``[3, 3, C, 1]``) and ``nn.conv2d_nchw(..., groups=32, algorithm="auto")`` /
``nn.conv2d_nhwc`` (the direct convolution, or Winograd F(2x2) where the CPU rule
``tecomp.nn.winograd.winograd_tile`` expects it to be faster), padding 1, built with
``tc.auto_schedule(args)``.  PyTorch: ``F.conv2d(x, w, stride,
padding=1, groups=C)`` on contiguous NCHW tensors, and on channels-last ones for NHWC
(its memory format for NHWC).  A depthwise convolution reads each input once and writes
each output once: it is bound by memory, so each row also gives tecomp's bandwidth
(input, weights and output once, over the median time) against the read stream of this
machine (``tc.viz.host_peaks``).  Medians, ms; ratio = PyTorch's time over tecomp's (> 1:
tecomp is faster).  Every result is checked against PyTorch's first.

    python3 benchmarks/depthwise_conv.py [--threads 2] [--rounds 9] [--batch 1,8]
        [--layout nchw,nhwc] [--only depthwise|grouped] [--shapes 256x28s2,...]
        [--ab [SWITCH,...]] [--cpu-time]

``--shapes``: only the layers named ``<channels>x<size>s<stride>``.

``--ab``: each convolution also built with the switches named (comma-separated; by
default all of them) off, timed in the same turns ("before", and the speed-up over it).
Switches of ``tecomp.strategy.cpu.grouped`` (grouped rows): ``INTERLEAVE_WHOLE_VECTORS``
(groups of one vector of output channels in channel blocks, as before interleaving
them), ``COPY_NCHW_INPUT`` (the NCHW rows read their input planes in place, as before
copying them per task), ``NCHW_TRANSPOSE_OUT`` (the NCHW channel blocks store their
output with a scatter per vector, as before the register transposes),
``NCHW_TRANSPOSE_ROOM`` (those blocks as tall as the NHWC kernel's, as before they left
half the registers to the transposes), ``ROWS_FMA`` (the NCHW rows blocking, groups
narrower than a vector: a multiply and an add per tap, as before the FMAs),
``PLANE_TASKS_ONE_VECTOR`` (NHWC groups interleaved in one vector: tasks of rows at any
batch, as before the tasks of a block of groups over the plane at small ones),
``SHARE_TAP_BROADCASTS`` (those groups: a broadcast per FMA, as before the window's
columns went inside the input channel).  Of ``tecomp.nn.winograd`` (grouped rows):
``GROUPED_WINOGRAD`` (``algorithm="auto"`` keeps every grouped convolution direct, as
before it weighed F(2x2) for them), ``GROUPED_WINOGRAD_F4`` (F(2x2) or direct, as before
it weighed F(4x4) too), ``GROUPED_WINOGRAD_NCHW`` (grouped NCHW convolutions stay direct,
as before they were weighed run channels last).  Of ``tecomp.strategy.cpu.winograd``:
``GROUP_TASKS`` (a grouped Winograd convolution's tasks are (image, group) pairs, as
before the tasks of a group over every image where the transformed weights outgrow L2).  Of
``tecomp.strategy.cpu.depthwise`` (depthwise rows): ``FMA`` (a multiply and an add per
tap), ``STREAM_OUTPUT`` (every output store through the cache) and
``STRIDED_MASKED_LOADS`` (NCHW with a stride: a gather per padded tap, as before the
masked wide loads; grouped NCHW rows too), ``PREFETCH_ROWS`` (NCHW whose input comes
from memory: the hardware prefetchers alone, as before a block of rows prefetched the
next one's input rows) and ``BORDER_ROWS_APART`` (NHWC of several images and 7 rows: a
task per (image, row), every tap behind a padding test, as before blocks of rows with a
guarded tail; grouped NHWC pixels rows too).  ``--cpu-time`` (with
``--threads 1``): each call's time is the process's CPU time, which on a loaded machine
leaves out the time other processes run.
"""
from __future__ import annotations

import time

from common import base_parser, interleaved_turns, pin_threads, torch_or_none

#: (channels, image size, stride) of MobileNet-v1's depthwise 3x3 layers
DEPTHWISE = [(32, 112, 1), (64, 112, 2), (128, 56, 1), (128, 56, 2), (256, 28, 1),
             (256, 28, 2), (512, 14, 1), (512, 14, 2), (1024, 7, 1)]
#: (channels, image size, stride) of ResNeXt-50 32x4d's grouped 3x3 layers (32 groups)
GROUPED = [(128, 56, 1), (256, 56, 2), (256, 28, 1), (512, 28, 2), (512, 14, 1),
           (1024, 7, 1)]
GROUPS = 32
#: the module switches ``--ab`` turns off: tecomp.strategy.cpu.grouped's, depthwise's
GROUPED_SWITCHES = ["INTERLEAVE_WHOLE_VECTORS", "COPY_NCHW_INPUT", "NCHW_TRANSPOSE_OUT",
                    "NCHW_TRANSPOSE_ROOM", "ROWS_FMA", "PLANE_TASKS_ONE_VECTOR",
                    "SHARE_TAP_BROADCASTS", "GROUPED_WINOGRAD", "GROUPED_WINOGRAD_F4",
                    "GROUPED_WINOGRAD_NCHW", "GROUP_TASKS"]
#: the switches of tecomp.nn.winograd (read when the graph is built, not scheduled)
GRAPH_SWITCHES = ["GROUPED_WINOGRAD", "GROUPED_WINOGRAD_F4", "GROUPED_WINOGRAD_NCHW"]
#: the switch of tecomp.strategy.cpu.winograd (the Winograd stages' schedule)
WINOGRAD_SWITCHES = ["GROUP_TASKS"]
DEPTHWISE_SWITCHES = ["FMA", "STREAM_OUTPUT", "STRIDED_MASKED_LOADS", "PREFETCH_ROWS",
                      "BORDER_ROWS_APART"]
#: the depthwise module's switches that the grouped NCHW rows blocking reads too
SHARED_SWITCHES = ["STRIDED_MASKED_LOADS", "BORDER_ROWS_APART"]


def main() -> None:
    ap = base_parser(__doc__, rounds=9)
    ap.add_argument("--batch", default="1,8")
    ap.add_argument("--layout", default="nchw,nhwc")
    ap.add_argument("--only", default="depthwise,grouped")
    ap.add_argument("--shapes", default=None,
                    help="only these layers (comma-separated CxHsS, e.g. 256x28s2,512x14s2)")
    ap.add_argument("--ab", nargs="?", const=",".join(GROUPED_SWITCHES + DEPTHWISE_SWITCHES),
                    default=None,
                    help="also time these switches off (comma-separated; default all: "
                         + ", ".join(GROUPED_SWITCHES + DEPTHWISE_SWITCHES) + ")")
    ap.add_argument("--cpu-time", action="store_true",
                    help="time calls by the process's CPU time (with --threads 1)")
    args = ap.parse_args()
    if args.cpu_time and args.threads != 1:
        ap.error("--cpu-time times one thread's calls: use it with --threads 1")
    switches = args.ab.split(",") if args.ab else []
    pin_threads(args.threads)
    import numpy as np

    import tecomp as tc
    import tecomp.nn as nn
    from tecomp.strategy.cpu import depthwise as depthwise_mod
    from tecomp.nn import winograd as winograd_mod
    from tecomp.strategy.cpu import grouped as grouped_mod
    from tecomp.strategy.cpu import winograd as cpu_winograd_mod
    for name in switches:
        if name not in GROUPED_SWITCHES + DEPTHWISE_SWITCHES:
            raise SystemExit(f"--ab {name}: not one of "
                             + ", ".join(GROUPED_SWITCHES + DEPTHWISE_SWITCHES))

    torch = torch_or_none(args.threads)
    if torch is None:
        raise SystemExit("depthwise_conv.py compares with PyTorch: pip install torch")
    F = torch.nn.functional
    rng = np.random.default_rng(0)
    fns, rows = {}, []
    work = [("depthwise", c) for c in DEPTHWISE] if "depthwise" in args.only else []
    work += [("grouped", c) for c in GROUPED] if "grouped" in args.only else []
    if args.shapes:
        work = [(k, c) for k, c in work if f"{c[0]}x{c[1]}s{c[2]}" in args.shapes.split(",")]
    for batch in (int(b) for b in args.batch.split(",")):
        for layout in args.layout.split(","):
            nchw = layout == "nchw"
            for kind, (C, H, s) in work:
                groups = C if kind == "depthwise" else GROUPS
                I = C // groups
                x = rng.standard_normal((batch, C, H, H)).astype("float32")
                w = (rng.standard_normal((C, I, 3, 3)) / np.sqrt(9 * I)).astype("float32")
                tx, tw = torch.from_numpy(x), torch.from_numpy(w)
                if not nchw:
                    tx = tx.contiguous(memory_format=torch.channels_last)
                    tw = tw.contiguous(memory_format=torch.channels_last)
                want = F.conv2d(tx, tw, stride=s, padding=1, groups=groups)
                OH = want.shape[2]
                if nchw:
                    X = tc.placeholder((batch, C, H, H), name="x")
                    xa, wa = x, w
                else:
                    X = tc.placeholder((batch, H, H, C), name="x")
                    xa = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
                    # depthwise [3, 3, C, 1], grouped HWIO [3, 3, C / groups, C]
                    wa = np.ascontiguousarray(w.transpose(2, 3, 0, 1) if kind == "depthwise"
                                              else w.transpose(2, 3, 1, 0))
                W = tc.placeholder(wa.shape, name="w")

                def graph():
                    if kind == "depthwise":
                        op = nn.depthwise_conv2d_nchw if nchw else nn.depthwise_conv2d_nhwc
                        return op(X, W, s, 1)
                    op = nn.conv2d_nchw if nchw else nn.conv2d_nhwc
                    return op(X, W, s, 1, groups=groups, algorithm="auto")
                xa, wa = tc.aligned(xa), tc.aligned(wa)
                ref = want.numpy() if nchw else want.permute(0, 2, 3, 1).numpy()
                key = f"{kind} {layout} b{batch} {C}x{H}x{H} s{s}"
                nbytes = 4 * (x.size + w.size + batch * C * OH * OH)
                # (the grouped NCHW rows are the depthwise module's blocking)
                mods = {n: winograd_mod if n in GRAPH_SWITCHES else
                        cpu_winograd_mod if n in WINOGRAD_SWITCHES else
                        grouped_mod if n in GROUPED_SWITCHES else depthwise_mod
                        for n in switches
                        if n in (GROUPED_SWITCHES + SHARED_SWITCHES if kind == "grouped"
                                 else DEPTHWISE_SWITCHES)}
                mine = list(mods)
                for on in (True, False) if mine else (True,):
                    saved = {n: getattr(mods[n], n) for n in mine}
                    for name in mine:
                        # STREAM_OUTPUT, PREFETCH_ROWS: None (the template's rule) or False (never)
                        setattr(mods[name], name, saved[name] if on else False)
                    try:
                        Y = graph()
                        f = tc.build(tc.auto_schedule([X, W, Y]), [X, W, Y])
                    finally:
                        for name in mine:
                            setattr(mods[name], name, saved[name])
                    out = tc.empty(tuple(int(e.value) for e in Y.shape), "float32")
                    f(xa, wa, out)
                    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
                    fns[f"{'tecomp' if on else 'before'} {key}"] = \
                        lambda f=f, a=(xa, wa, out): f(*a)
                fns[f"torch {key}"] = (lambda tx=tx, tw=tw, s=s, g=groups:
                                       F.conv2d(tx, tw, stride=s, padding=1, groups=g))
                rows.append((key, nbytes))
    _, stream = tc.viz.host_peaks(args.threads)
    t = interleaved_turns(fns, args.rounds,
                          clock=time.process_time if args.cpu_time else time.perf_counter)
    print(f"{tc.target.cpu_name()}, {args.threads} threads, {args.rounds} rounds, "
          f"{'CPU time' if args.cpu_time else 'wall clock'}, read "
          f"stream {stream:.1f} GB/s: 3x3 depthwise (MobileNet-v1) and grouped "
          f"({GROUPS} groups, ResNeXt-50 32x4d) convolutions, padding 1")
    for key, nbytes in rows:
        mine, theirs = t[f"tecomp {key}"], t[f"torch {key}"]
        gbps = nbytes / mine / 1e9
        ab = (f" | before {t[f'before {key}'] * 1e3:7.3f} ms, {t[f'before {key}'] / mine:.2f}x"
              if f"before {key}" in t else "")
        print(f"  {key:32s} tecomp {mine * 1e3:7.3f} ms ({gbps:5.1f} GB/s, "
              f"{gbps / stream:4.0%} of the stream) | torch {theirs * 1e3:7.3f} ms "
              f"| {theirs / mine:.2f}x{ab}")


if __name__ == "__main__":
    main()
