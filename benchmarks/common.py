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
                      clock=time.perf_counter) -> dict:
    """Median seconds per call of each function.  The tools take turns (the order
    rotating every round); a turn is a block of back-to-back calls lasting about
    ``turn_seconds`` (at least four), of which the first quarter is not counted: on a
    2-core VM a tool's first calls after another tool's pay for waking its own sleeping
    threads and for the other's threads still spinning (PyTorch's OpenMP workers spin
    after each call), which would otherwise be charged to whichever tool runs second.
    ``clock``: what a call's time is read from (``time.process_time``: the CPU time of
    the process, which on a loaded machine leaves out the time other processes run, for
    calls on one thread)."""
    names = list(fns)
    times = {n: [] for n in names}
    for n in names:       # warm up
        fns[n]()
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for n in order:
            block = []
            t_end = time.perf_counter() + turn_seconds
            while len(block) < 4 or time.perf_counter() < t_end:
                t0 = clock()
                fns[n]()
                block.append(clock() - t0)
            times[n].extend(block[len(block) // 4:])
    return {n: statistics.median(v) for n, v in times.items()}
