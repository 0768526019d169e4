"""Set-up shared by the benchmark scripts that compare tecomp with PyTorch."""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time


def base_parser(doc: str, rounds: int) -> argparse.ArgumentParser:
    """``--threads`` and ``--rounds``; the description is the first paragraph of ``doc``."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--rounds", type=int, default=rounds)
    return ap


def add_cpu_time(ap: argparse.ArgumentParser) -> None:
    """The ``--cpu-time`` option: calls timed by the process's CPU time (one thread)."""
    ap.add_argument("--cpu-time", action="store_true",
                    help="time each call by the process's CPU time (with --threads 1)")


def clock_of(ap: argparse.ArgumentParser, args) -> dict:
    """``interleaved_turns``' ``clock=`` for ``--cpu-time`` (:func:`add_cpu_time`), after
    checking it is used with one thread; else ``{}`` (wall time)."""
    if not args.cpu_time:
        return {}
    if args.threads != 1:
        ap.error("--cpu-time times one thread's calls: use it with --threads 1")
    return {"clock": time.process_time}


def parser(doc: str, rounds: int) -> argparse.ArgumentParser:
    """The options every conv script takes: :func:`base_parser`'s, ``--batch`` and
    ``--layout``."""
    ap = base_parser(doc, rounds)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--layout", default="nchw,nhwc")
    return ap


def pin_threads(threads: int) -> None:
    """Every tool on ``threads`` threads (set before numpy, OpenBLAS, PyTorch, TVM or
    Halide load: their pools read these when they start), and tecomp and ``benchmarks/``
    importable."""
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                "TVM_NUM_THREADS", "HL_NUM_THREADS", "TECOMP_NUM_THREADS"):
        os.environ[var] = str(threads)
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    sys.path.insert(1, os.path.dirname(here))


def torch_or_none(threads: int):
    """PyTorch on ``threads`` threads, or None (with a message) when it is not installed."""
    try:
        import torch
    except ImportError:
        print("needs torch (pip install torch==2.13.0) for the comparison")
        return None
    torch.set_num_threads(threads)
    return torch


def interleaved_turns(fns: dict, rounds: int, turn_seconds: float = 0.1,
                      clock=time.perf_counter, held: int = 0,
                      counts: dict | None = None, per_round: dict | None = None) -> dict:
    """Median seconds per call of each function.  The tools take turns (the order
    rotating every round); a turn is a block of back-to-back calls lasting about
    ``turn_seconds`` (at least four), of which the first quarter is not counted: on a
    2-core VM a tool's first calls after another tool's pay for waking its own sleeping
    threads and for the other's threads still spinning (PyTorch's OpenMP workers spin
    after each call), which would otherwise be charged to whichever tool runs second.
    ``clock``: what a call's time is read from (``time.process_time``: the CPU time of
    the process, which on a loaded machine leaves out the time other processes run, for
    calls on one thread).

    ``held`` (a thread count, with the wall clock): count only the calls in which that
    many threads held their cores throughout, the process's CPU time 97-103% of
    ``held`` times the call's wall time (on a loaded machine a call in which a thread
    was preempted says little about the kernel; ``benchmarks/skinny_ceiling.py
    --two``); a tool with no such call gets ``nan``.  ``counts`` (a dict), where given,
    receives each tool's ``(calls counted, calls made)``.  ``per_round`` (a dict), where
    given, receives each tool's list of per-round medians (one a round, in the rounds'
    order; ``nan`` for a round with no counted call): two tools' times of the same round
    were taken seconds apart, so their ratio round by round (:func:`paired`) is less moved
    by a load that changes over the run than the ratio of the two overall medians."""
    names = list(fns)
    times = {n: [] for n in names}
    rounds_of = {n: [] for n in names}
    made = dict.fromkeys(names, 0)
    for n in names:       # warm up
        fns[n]()
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for n in order:
            block = []
            t_end = time.perf_counter() + turn_seconds
            while len(block) < 4 or time.perf_counter() < t_end:
                t0, c0 = clock(), time.process_time()
                fns[n]()
                t1, c1 = clock(), time.process_time()
                made[n] += 1
                if held and not 0.97 <= (c1 - c0) / (held * (t1 - t0)) <= 1.03:
                    block.append(None)
                    continue
                block.append(t1 - t0)
            kept = [t for t in block[len(block) // 4:] if t is not None]
            times[n].extend(kept)
            rounds_of[n].append(statistics.median(kept) if kept else float("nan"))
    if counts is not None:
        counts.update({n: (len(times[n]), made[n]) for n in names})
    if per_round is not None:
        per_round.update(rounds_of)
    return {n: statistics.median(v) if v else float("nan") for n, v in times.items()}


def paired(num: list, den: list) -> tuple[float, float, float]:
    """(median, lowest, highest) of ``num[r] / den[r]`` over the rounds ``r`` where both
    are numbers: two tools' per-round medians from :func:`interleaved_turns`'
    ``per_round``, the ratio taken within each round (the tools' turns adjacent in time)
    before the median over rounds; the lowest and highest say how far the rounds
    disagree.  (nan, nan, nan) where no round has both."""
    r = [a / b for a, b in zip(num, den) if a == a and b == b and b > 0]
    if not r:
        return (float("nan"),) * 3
    return statistics.median(r), min(r), max(r)


#: a transparent huge page's bytes (x86-64, aarch64 with 4 KiB base pages)
HUGE_PAGE = 2 << 20


class HugePool:
    """Arrays whose memory starts on a 2 MiB boundary and is advised into transparent
    huge pages (``madvise(MADV_HUGEPAGE)``, what this VM's ``enabled = madvise`` setting
    asks for), one buffer per byte size, kept and reused for every array of that size.

    numpy's own large arrays are advised the same, but they start 16 bytes past a 4 KiB
    page: the first and last 2 MiB of the range are never a whole huge page (a 16 MB
    input 87% huge at best), and a fresh allocation per workload gets huge pages only
    when the kernel finds free 2 MiB frames at that moment (the bool inputs of
    ``reductions.py``'s ``all``/``any`` rows in 4 KiB pages, 0% huge, while the read
    stream's array, allocated once, was in huge pages).  Allocating each size once, the
    inputs and the stream alike, from the same pool makes them a fair pair; each row's
    share is still read back (:func:`huge_page_share`) and printed where under 90%.
    Where ``mmap.madvise`` or ``MADV_HUGEPAGE`` is missing the buffers are ordinary
    anonymous memory (still 2 MiB aligned)."""

    def __init__(self):
        self._bufs: dict = {}

    def array(self, shape, dtype):
        """An uninitialised C-contiguous array of ``shape`` and ``dtype`` in the pool's
        buffer of its byte size (the same memory as every earlier array of that size)."""
        import mmap

        import numpy as np
        dt = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
        if nbytes not in self._bufs:
            size = -(-max(nbytes, 1) // HUGE_PAGE) * HUGE_PAGE
            m = mmap.mmap(-1, size + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
            raw = np.frombuffer(m, np.uint8)
            off = (-raw.ctypes.data) % HUGE_PAGE
            advice = getattr(mmap, "MADV_HUGEPAGE", None)
            if advice is not None and hasattr(m, "madvise"):
                m.madvise(advice, off, size)
            buf = raw[off:off + size]
            buf[::4096] = 0          # fault every page in now (each 2 MiB one huge, if any)
            self._bufs[nbytes] = buf
        return self._bufs[nbytes][:nbytes].view(dt).reshape(shape)

    def copy_of(self, a):
        """``a``'s values in the pool's array of its shape and dtype."""
        import numpy as np
        a = np.asarray(a)
        out = self.array(a.shape, a.dtype)
        out[...] = a
        return out


def huge_page_share(a) -> float | None:
    """The share (0 to 1) of numpy array ``a``'s bytes that the kernel backs with
    transparent huge pages (2 MiB), read from ``/proc/self/smaps``; None where that
    file cannot be read.  A sum over the planes of a 64 MB input ran 1.37-1.60x slower
    from 4 KiB pages than from the same input in 2 MiB pages, an argmax 1.0-1.24x (Zen 4
    VM, one thread: history/2026-12-02.md, "Session 26, helper reduce"): which one an
    allocation gets
    depends on the memory's fragmentation, so a table compares rows fairly only where
    it says."""
    lo = a.__array_interface__["data"][0]
    hi = lo + a.nbytes
    try:
        text = open("/proc/self/smaps").read()
    except OSError:
        return None
    huge, vma = 0, None
    for line in text.splitlines():
        head = line.split(None, 1)[0]
        if "-" in head and ":" not in head:
            start, end = (int(v, 16) for v in head.split("-"))
            vma = (start, end) if start < hi and end > lo else None
        elif vma is not None and head == "AnonHugePages:":
            start, end = vma
            kb = int(line.split()[1])
            # (a huge page of the VMA outside the array: its share of the overlap)
            share = (min(end, hi) - max(start, lo)) / (end - start)
            huge += kb * 1024 * share
    return min(1.0, huge / max(a.nbytes, 1))


def conv3x3_parser(doc: str):
    """The arguments of the 3x3-convolution benchmarks (conv_taps.py, winograd.py): the
    batches, layouts, workload kinds, shapes and ``--cpu-time``."""
    ap = base_parser(doc, rounds=9)
    ap.add_argument("--batch", default="1,8")
    ap.add_argument("--layout", default="nchw,nhwc")
    ap.add_argument("--only", default="grouped,dense")
    ap.add_argument("--shapes", default="", help="only these CxH (e.g. 512x14,1024x7)")
    ap.add_argument("--cpu-time", action="store_true",
                    help="time by the process's CPU time (with --threads 1)")
    return ap


def conv3x3_args(ap):
    """The arguments ``ap`` (:func:`conv3x3_parser`) parses, ``--cpu-time`` only with one
    thread; the threads pinned."""
    args = ap.parse_args()
    if args.cpu_time and args.threads != 1:
        ap.error("--cpu-time times one thread's calls: use it with --threads 1")
    pin_threads(args.threads)
    return args


def conv3x3_cases(args, torch, stride1: bool = False):
    """The 3x3 convolutions, padding 1, of ResNeXt-50 32x4d's grouped layers
    (``depthwise_conv.GROUPED``) and ResNet's layers (``resnet.LAYERS``) that ``args``
    (:func:`conv3x3_parser`) selects (``stride1``: the stride-1 ones only), per batch
    and layout: dicts with ``kind, layout, nchw, batch, C, K, H, s, groups``, the arrays
    ``xa, wa`` in the layout (aligned), PyTorch's ``tx, tw`` (channels-last for NHWC)
    and its result ``ref`` in the layout."""
    import numpy as np

    import tecomp as tc
    from depthwise_conv import GROUPED, GROUPS
    from resnet import LAYERS

    F = torch.nn.functional
    rng = np.random.default_rng(0)
    work = [("grouped", C, C, H, st, GROUPS) for C, H, st in GROUPED
            if not stride1 or st == 1] if "grouped" in args.only else []
    work += [("dense", C, K, H, st, 1) for C, K, H, R, st in LAYERS
             if R == 3 and (not stride1 or st == 1)] if "dense" in args.only else []
    if args.shapes:
        keep = set(args.shapes.split(","))
        work = [w for w in work if f"{w[1]}x{w[3]}" in keep]
    for batch in (int(b) for b in args.batch.split(",")):
        for layout in args.layout.split(","):
            nchw = layout == "nchw"
            for kind, C, K, H, st, groups in work:
                x = rng.standard_normal((batch, C, H, H)).astype("float32")
                w = (rng.standard_normal((K, C // groups, 3, 3)) /
                     np.sqrt(9 * C // groups)).astype("float32")
                tx, tw = torch.from_numpy(x), torch.from_numpy(w)
                if not nchw:
                    tx = tx.contiguous(memory_format=torch.channels_last)
                    tw = tw.contiguous(memory_format=torch.channels_last)
                want = F.conv2d(tx, tw, stride=st, padding=1, groups=groups)
                ref = want.numpy() if nchw else want.permute(0, 2, 3, 1).numpy()
                xa = x if nchw else np.ascontiguousarray(x.transpose(0, 2, 3, 1))
                wa = w if nchw else np.ascontiguousarray(w.transpose(2, 3, 1, 0))
                yield dict(kind=kind, layout=layout, nchw=nchw, batch=batch, C=C, K=K, H=H,
                           s=st, groups=groups, xa=tc.aligned(xa), wa=tc.aligned(wa),
                           tx=tx, tw=tw, ref=ref)
