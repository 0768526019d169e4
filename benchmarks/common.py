"""Set-up shared by the benchmark scripts that compare tecomp with PyTorch."""
from __future__ import annotations

import argparse
import os
import sys


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
    """Every tool on ``threads`` threads (set before numpy, OpenBLAS or PyTorch load), and
    tecomp and ``benchmarks/`` importable."""
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                "TECOMP_NUM_THREADS"):
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
