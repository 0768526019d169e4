"""Registers, spills and shared memory of every shipped GPU schedule, from ``ptxas``,
without a GPU.

    python -m tecomp.testing.gpu_resources                 # sm_80 and sm_90
    python -m tecomp.testing.gpu_resources --arch sm_90

The kernels are those of ``benchmarks/gpu.py`` and the other ``tecomp.strategy.cuda``
templates (GEMM, float16 GEMM on tensor cores and dense, conv2d NCHW/NHWC, softmax, an elementwise epilogue), at the
benchmark's sizes.  Each is compiled as ``nvcc -cubin -arch=... -Xptxas -v`` does it
(``nvcc -ptx``, then ``ptxas -v`` on that PTX: the same cubin); the table
gives, per kernel, the registers per thread, the bytes of spill stores and loads, the
stack frame and the static shared memory.  ``tests/test_gpu_resources.py`` fails on any
spill (skipped where nvcc is missing).
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple
import tecomp as tc
from ..runtime.nvcc import compile_ptx, find_nvcc
from ..threads import available_cpus
from ..errors import BuildError, RuntimeUnavailableError
from ..strategy import cuda as sc
from ..nn import ops

ARCHS = ("sm_80", "sm_90")


@dataclass
class KernelUsage:
    workload: str
    kernel: str
    arch: str
    registers: int
    spill_stores: int
    spill_loads: int
    stack: int
    smem: int


def ptxas_usage(source: str, arch: str) -> Dict[str, dict]:
    """``{kernel: {"registers", "spill_stores", "spill_loads", "stack", "smem"}}`` from
    ``nvcc -cubin -Xptxas -v``.  Raises RuntimeUnavailableError without nvcc, BuildError
    when it fails."""
    return parse_ptxas(ptxas_build(source, arch)[0])


def ptxas_build(source: str, arch: str, sass: bool = False) -> Tuple[str, Optional[str]]:
    """The cubin ``nvcc -cubin -arch=<arch> -Xptxas -v`` makes of CUDA C ``source``, in
    its two steps: :func:`~tecomp.runtime.nvcc.compile_ptx` (which keeps its last PTX
    texts: a test that read the PTX first does not compile it again), then ``ptxas
    -arch=<arch> -m64 -v`` on that PTX, as nvcc runs it.  Returns ptxas's report and
    (``sass``) the cubin's SASS, from nvdisasm or cuobjdump where one is on PATH (else
    None).  Raises RuntimeUnavailableError without nvcc, BuildError when it fails."""
    nvcc = find_nvcc()
    if nvcc is None:
        raise RuntimeUnavailableError("nvcc was not found on PATH (nor under $CUDA_HOME/bin)")
    ptxas = os.path.join(os.path.dirname(os.path.realpath(nvcc)), "ptxas")
    if not os.path.isfile(ptxas):
        ptxas = shutil.which("ptxas")
    if ptxas is None:
        raise RuntimeUnavailableError(f"no ptxas beside {nvcc} nor on PATH")
    ptx = compile_ptx(source, arch)
    with tempfile.TemporaryDirectory(prefix="tecomp-ptxas-") as d:
        src, cubin = os.path.join(d, "k.ptx"), os.path.join(d, "k.cubin")
        with open(src, "w") as f:
            f.write(ptx)
        proc = subprocess.run([ptxas, f"-arch={arch}", "-m64", "-v", "-o", cubin, src],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise BuildError(f"ptxas -arch={arch} failed:\n{proc.stderr.strip()}")
        text = None
        dis = shutil.which("nvdisasm") or shutil.which("cuobjdump")
        if sass and dis:
            cmd = [dis, cubin] if dis.endswith("nvdisasm") else [dis, "-sass", cubin]
            text = subprocess.run(cmd, capture_output=True, text=True).stdout
    return proc.stderr + proc.stdout, text


def parse_ptxas(text: str) -> Dict[str, dict]:
    """The per-kernel figures of ``ptxas -v``'s report ``text`` (see :func:`ptxas_usage`)."""
    out: Dict[str, dict] = {}
    cur = None
    for line in text.splitlines():
        m = re.search(r"(?:Compiling entry function|Function properties for) '?([\w$]+)'?", line)
        if m:
            cur = out.setdefault(m.group(1), {"registers": 0, "spill_stores": 0,
                                              "spill_loads": 0, "stack": 0, "smem": 0})
            continue
        if cur is None:
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill "
                      r"loads", line)
        if m:
            cur["stack"], cur["spill_stores"], cur["spill_loads"] = map(int, m.groups())
        m = re.search(r"Used (\d+) registers", line)
        if m:
            cur["registers"] = int(m.group(1))
            s = re.search(r"(\d+) bytes smem", line)
            cur["smem"] = int(s.group(1)) if s else 0
    return out


def shipped_kernels() -> List[Tuple[str, Callable]]:
    """(name, build) for the shipped GPU schedules; ``build()`` returns a CUDA module."""
    def gemm(n, dtype="float32"):
        def build():
            A = tc.placeholder((n, n), dtype, name="A")
            B = tc.placeholder((n, n), dtype, name="B")
            C = ops.matmul(A, B, out_dtype=None if dtype == "float32" else "float32")
            return tc.build(sc.schedule_matmul(C, "cuda"), [A, B, C], target="cuda")
        return f"{'h' if dtype == 'float16' else ''}gemm {n}^3", build

    def hdense(b, i, o):
        def build():
            X = tc.placeholder((b, i), "float16", name="X")
            W = tc.placeholder((o, i), "float16", name="W")
            Y = ops.dense(X, W, out_dtype="float32")
            return tc.build(sc.schedule_dense(Y, "cuda"), [X, W, Y], target="cuda")
        return f"hdense {b}x{i} -> {o}", build

    def dense(b, i, o):
        def build():
            X, W = tc.placeholder((b, i), name="X"), tc.placeholder((o, i), name="W")
            bias = tc.placeholder((o,), name="b")
            Y = ops.relu(ops.bias_add(ops.dense(X, W), bias, axis=1))
            return tc.build(sc.schedule_dense(Y, "cuda"), [X, W, bias, Y], target="cuda")
        return f"dense {b}x{i} -> {o} +bias+relu", build

    def conv(C, HW, layout, N=32):
        def build():
            if layout == "nchw":
                d = tc.placeholder((N, C, HW, HW), name="data")
                w = tc.placeholder((C, C, 3, 3), name="weight")
                y = ops.conv2d_nchw(d, w, 1, 1)
                s = sc.schedule_conv2d_nchw(y, "cuda")
            else:
                d = tc.placeholder((N, HW, HW, C), name="data")
                w = tc.placeholder((3, 3, C, C), name="weight")
                y = ops.conv2d_nhwc(d, w, 1, 1)
                s = sc.schedule_conv2d_nhwc(y, "cuda")
            return tc.build(s, [d, w, y], target="cuda")
        return f"conv {layout} C=K={C} {HW}x{HW}", build

    def softmax(m, n):
        def build():
            X = tc.placeholder((m, n), name="X")
            Y = ops.softmax(X)
            return tc.build(sc.schedule_softmax(Y, "cuda"), [X, Y], target="cuda")
        return f"softmax {m}x{n}", build

    return [gemm(1024), gemm(4096), gemm(1024, "float16"), gemm(4096, "float16"),
            hdense(4096, 768, 3072), dense(128, 768, 3072), conv(64, 56, "nchw"),
            conv(256, 14, "nchw"), conv(64, 56, "nhwc"), conv(256, 14, "nhwc"),
            softmax(4096, 1024), softmax(128, 30522)]


def report(archs=ARCHS) -> List[KernelUsage]:
    """A row per kernel and architecture; the ``nvcc`` runs go in parallel, one per CPU
    the process may use (each is a process of its own)."""
    sources = [(name, build().get_source("cuda")) for name, build in shipped_kernels()]
    jobs = [(name, src, arch) for name, src in sources for arch in archs]
    with ThreadPoolExecutor(max_workers=available_cpus()) as pool:
        usages = list(pool.map(lambda j: ptxas_usage(j[1], j[2]), jobs))
    rows = []
    for (name, _, arch), usage in zip(jobs, usages):
        for k, u in usage.items():
            rows.append(KernelUsage(name, k, arch, u["registers"], u["spill_stores"],
                                    u["spill_loads"], u["stack"], u["smem"]))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tecomp.testing.gpu_resources",
                                 description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", action="append", help="sm_XX (repeatable; default sm_80, sm_90)")
    args = ap.parse_args(argv)
    rows = report(tuple(args.arch) if args.arch else ARCHS)
    print(f"{'workload':34} {'kernel':14} {'arch':6} {'regs':>5} {'spill st':>9} "
          f"{'spill ld':>9} {'stack':>6} {'smem':>7}")
    for r in rows:
        print(f"{r.workload:34} {r.kernel:14} {r.arch:6} {r.registers:5d} {r.spill_stores:9d} "
              f"{r.spill_loads:9d} {r.stack:6d} {r.smem:7d}")
    spills = [r for r in rows if r.spill_stores or r.spill_loads]
    print(f"{len(rows)} kernel compilations, {len(spills)} with spills")
    return 1 if spills else 0


if __name__ == "__main__":
    sys.exit(main())
