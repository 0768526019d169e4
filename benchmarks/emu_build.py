"""CPU time of the CUDA emulation's library builds (g++), with and without the precompiled
header (``tecomp.codegen.cuda_emu.PRECOMPILED_HEADER``, the A/B switch).

Each round builds the first ``--cases`` example kernels of ``tests/cuda_examples.py``
into a fresh cache directory (a cold cache, as CI's: the precompiled header is built in
the round too), once with the switch on and once off, interleaved; the figure is the CPU
time (user + system) of the compiler processes, so it holds on a loaded machine::

    python benchmarks/emu_build.py --rounds 4
"""
from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))

from cuda_examples import ALL_CASES  # noqa: E402

from tecomp.codegen import cuda_emu  # noqa: E402
from tecomp.codegen.cuda import codegen_cuda  # noqa: E402


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--cases", type=int, default=len(ALL_CASES))
    args = ap.parse_args(argv)
    sources = [codegen_cuda(mk().func) for mk in ALL_CASES[:args.cases]]
    got = {True: [], False: []}
    for r in range(args.rounds):
        for flag in ((True, False) if r % 2 == 0 else (False, True)):
            cuda_emu.PRECOMPILED_HEADER = flag
            d = tempfile.mkdtemp(prefix="emu-build-")
            os.environ["TECOMP_CACHE_DIR"] = d
            cuda_emu._LIBS.clear()
            t = _children_cpu()
            for cs in sources:
                cuda_emu.compile_emu_library(cs)
            got[flag].append(_children_cpu() - t)
            shutil.rmtree(d, ignore_errors=True)
    for flag in (True, False):
        v = got[flag]
        print(f"PRECOMPILED_HEADER={flag}: {len(sources)} libraries, compiler CPU s per round "
              f"{' '.join(f'{x:.2f}' for x in v)}; median {statistics.median(v):.2f} "
              f"({statistics.median(v) / len(sources):.3f} s a library)")


if __name__ == "__main__":
    main()
