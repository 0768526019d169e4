"""A BERT-base encoder layer (examples/bert_layer.py) against PyTorch eager, interleaved:
forward at batch 1 and 8, forward + backward at batch 8, sequence 128, on each thread
count of ``--threads`` (each in a fresh process, so that both tools start their thread
pools with that count).

    python3 benchmarks/bert.py [--threads 1,2] [--rounds 10] [--attention fused,unfused]

``--attention``: the layer's attention as ``nn.scaled_dot_product_attention`` (fused, the
default) and/or as two batched matmuls around a softmax (unfused).

Prints one line per configuration: medians in ms and tecomp's speed relative to PyTorch,
and the CPU model first.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "examples", "bert_layer.py")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--attention", default="fused")
    args = ap.parse_args()
    sys.path.insert(0, HERE)
    sys.path.insert(1, os.path.dirname(HERE))
    from workloads import machine

    print(f"# {machine()}")
    configs = [(1, False), (8, False), (8, True)]
    for threads in [int(t) for t in args.threads.split(",")]:
        env = dict(os.environ)
        for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                    "TECOMP_NUM_THREADS"):
            env[var] = str(threads)
        for (batch, backward), att in ((c, a) for c in configs
                                       for a in args.attention.split(",")):
            cmd = [sys.executable, EXAMPLE, "--batch", str(batch), "--seq", "128",
                   "--rounds", str(args.rounds), "--attention", att] + (
                       ["--backward"] if backward else [])
            out = subprocess.run(cmd, capture_output=True, text=True, env=env)
            lines = [ln for ln in out.stdout.splitlines() if "ms (" in ln or "MISMATCH" in ln]
            status = "" if out.returncode == 0 else f" (exit {out.returncode}: " \
                f"{(out.stderr or out.stdout).strip().splitlines()[-1:]})"
            print(f"threads {threads}, {att}: {lines[0] if lines else '?'}{status}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
