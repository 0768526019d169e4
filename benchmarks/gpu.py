#!/usr/bin/env python3
"""tecomp's GPU benchmarks: one command, one table.

    python3 benchmarks/gpu.py                 # every workload
    python3 benchmarks/gpu.py --quick         # fewer repetitions
    python3 benchmarks/gpu.py --only conv     # workloads whose name contains "conv"
    python3 benchmarks/gpu.py --sweep         # each schedule under several tilings
    python3 benchmarks/gpu.py --only flash --ab   # flash fwd: K/V rings of cp.async or not,
                                                  # p in registers or in shared memory;
                                                  # flash bwd: dq atomic vs recompute
    python3 benchmarks/gpu.py --only bmm --tune 40   # the GPU search, 40 candidates
    python3 benchmarks/gpu.py --only C=K=256 --tune 48   # the 14x14 convolutions' tilings

Needs a CUDA GPU, pycuda, and for the references PyTorch and/or CuPy (see
``docs/GPU.md`` / the project's GPU notes for installing the pycuda wheel).  Without a GPU
or pycuda it says so and exits with status 2.

Workloads (float32, the schedules of ``tecomp.strategy.cuda``):

* GEMM 4096^3 and 1024^3 against cuBLAS through ``torch.matmul`` and ``cupy.matmul``;
* the two ResNet 3x3 convolutions (stride 1, padding 1, N = 32): C = K = 64 at 56x56 and
  C = K = 256 at 14x14, NCHW and NHWC, against cuDNN through ``torch.nn.functional.conv2d``
  (``cudnn.benchmark`` on, so cuDNN picks its fastest algorithm; NHWC as channels-last);
* float16 / bfloat16 GEMMs of odd extents on tensor cores (boundary tiles: 4097 x 4096 x
  4096, 1000 x 3072 x 768, 1000 x 768 x 3072, K = 100, bfloat16 4095^3; ``--only odd``)
  against ``torch.matmul``, and the BERT FFN's dense + bias + GELU at 1000 tokens;
  ``--only odd`` then also times those shapes and skinny ones (M = 1 .. 64 at N = K =
  4096) on every family -- wmma, mma.sync, wgmma (cp.async ring), wgmma with TMA rings,
  the CUDA-core GEMM -- and prints the lines that set ``WMMA_MAX_WASTE`` (the waste at
  which the tensor cores stop beating the CUDA cores) and ``WGMMA_BY_DEFAULT``;
  ``--family all`` does the same A/B on HGEMM / bf16 GEMM 4096^3, with matmul's B[K, N]
  fed N-major through TMA (``wgmma-te-tma-warp-nmajor``), and prints the lines that set
  ``WGMMA_MN_MAJOR_BY_DEFAULT``;
* softmax over the rows of a 4096 x 1024 matrix against ``torch.softmax``;
* attention's scores as a batched matmul (96 x 512 x 512 x 64) written in plain TE and
  scheduled by ``tc.auto_schedule(args, target="cuda")``, against ``torch.bmm``;
* the 14x14 convolutions again, written as im2col + GEMM in plain TE and scheduled by
  ``tc.auto_schedule(args, target="cuda")``, against cuDNN;
* FlashAttention's forward in float16 (batch 4, 16 heads, seq 2048, head dim 64 and 128,
  causal and not: ``tc.nn.flash_attention`` on tensor cores) against
  ``F.scaled_dot_product_attention`` on its flash backend, and its backward
  (``tc.nn.flash_attention_backward``) against ``torch.autograd.grad`` of the same
  (``--only flash``);
* ``tc.nn.scaled_dot_product_attention`` with BERT-base's padding mask (batch 8, 12
  heads, seq 512, head dim 64) inside a graph, which the GPU rules run on FlashAttention's
  template, against ``F.scaled_dot_product_attention`` with the same ``attn_mask``
  (``--only sdpa``).

TF32 is off everywhere (``torch.backends.cuda.matmul.allow_tf32 = False``,
``torch.backends.cudnn.allow_tf32 = False``, ``CUPY_TF32=0``): every tool computes in
float32.

``--sweep`` times each workload's schedule under a list of tilings (its ``GemmConfig``,
``ConvConfig`` or ``SoftmaxConfig``; the default that ``gemm_config`` etc. pick first),
every one checked against the float64 reference, interleaved with the references in one
process: the data the defaults are chosen from (a tiling that does not build or launch,
e.g. too much shared memory or too many registers, is reported, not timed).

``--tune N`` runs ``tc.auto_schedule(args, target="cuda", trials=N)`` on the GEMM, the
convolutions and the batched matmul (their computes written with ``tecomp.nn.ops`` or
plain TE; the search's knobs are the tilings of the same templates) and times its best
against the analytic schedule and the references.

Method: every tool's result is first checked against a float64 reference (PyTorch in
float64 on the GPU, numpy without PyTorch).  Times are GPU times from CUDA events on the
default stream, ``inner`` back-to-back calls per sample, the tools interleaved round
robin, medians over the samples.  tecomp's kernels are launched directly through pycuda
with the arguments prepared once (the per-call argument checks of ``CudaModule.__call__``
are host work, reported separately as "call overhead"); the references are called through
their Python APIs (their host work overlaps the GPU work when kernels are long).
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Dict, List, Optional, Sequence

os.environ["CUPY_TF32"] = "0"  # before CuPy is imported: no TF32 in cupy.matmul

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import tecomp as tc  # noqa: E402
from tecomp.errors import RuntimeUnavailableError  # noqa: E402
from tecomp.strategy import cuda as nn_cuda  # noqa: E402
from tecomp.nn import ops  # noqa: E402
from tecomp.build import device_arch  # noqa: E402

NO_GPU_STATUS = 2
TOLERANCE = 1e-4  # max error relative to the largest value of the float64 result


# ---------------------------------------------------------------------------------
# the table


def ratio(t_ref: Optional[float], t_tecomp: Optional[float]) -> Optional[float]:
    """How fast tecomp is relative to a reference: ``t_ref / t_tecomp`` (1.00x: as fast,
    0.50x: twice as slow)."""
    if t_ref is None or t_tecomp is None or t_tecomp <= 0:
        return None
    return t_ref / t_tecomp


def _cell(v, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


@dataclass
class Row:
    """One line of the table: median milliseconds per tool, plus the work done."""

    workload: str
    ms: Dict[str, Optional[float]]     # tool -> median ms per call (None: not run)
    flops: float = 0.0                 # floating-point operations per call
    bytes: float = 0.0                 # minimal DRAM traffic per call (memory-bound ops)
    notes: List[str] = field(default_factory=list)

    def throughput(self) -> str:
        t = self.ms.get("tecomp")
        if t is None:
            return "-"
        if self.flops:
            return f"{self.flops / (t * 1e-3) / 1e12:.1f} TFLOP/s"
        return f"{self.bytes / (t * 1e-3) / 1e9:.0f} GB/s"


def format_table(rows: Sequence[Row], refs: Sequence[str]) -> str:
    """The results as one fixed-width table: the workload, tecomp's median time and
    throughput, then per reference tool its median time and tecomp's speed relative to it
    (``ratio``)."""
    head = ["workload", "tecomp ms", "tecomp"]
    for r in refs:
        head += [f"{r} ms", f"vs {r}"]
    lines = [head]
    for row in rows:
        t = row.ms.get("tecomp")
        cells = [row.workload, _cell(t, ".3f"), row.throughput()]
        for r in refs:
            cells += [_cell(row.ms.get(r), ".3f"), _cell(ratio(row.ms.get(r), t), ".2f") +
                      ("x" if ratio(row.ms.get(r), t) is not None else "")]
        lines.append(cells)
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(head))]

    def fmt(cells):
        return "  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths)))

    out = [fmt(head), "  ".join("-" * w for w in widths)]
    out += [fmt(c) for c in lines[1:]]
    notes = [f"  {row.workload}: {n}" for row in rows for n in row.notes]
    if notes:
        out += ["", "notes:"] + notes
    return "\n".join(out)


# ---------------------------------------------------------------------------------
# the machine


def gpu_driver():
    """tecomp's pycuda driver, or a RuntimeUnavailableError saying what is missing."""
    import importlib.util

    if importlib.util.find_spec("pycuda") is None:
        raise RuntimeUnavailableError("pycuda is not installed (see the project's GPU notes: a "
                                      "wheel for the GPU machines is provided)") from None
    from tecomp.runtime.cuda import default_driver

    return default_driver()


def _try_import(name):
    try:
        return __import__(name)
    except Exception:  # noqa: BLE001 - a broken install counts as absent
        return None


class Timer:
    """GPU time of a callable from CUDA events on the default (legacy) stream, which
    pycuda, PyTorch and CuPy all launch on by default."""

    def __init__(self, drv):
        self.cuda = drv.cuda
        self.start, self.end = self.cuda.Event(), self.cuda.Event()

    def sample(self, fn: Callable[[], None], inner: int) -> float:
        """Milliseconds per call over ``inner`` back-to-back calls."""
        self.start.record()
        for _ in range(inner):
            fn()
        self.end.record()
        self.end.synchronize()
        return self.start.time_till(self.end) / inner


def interleaved(timer: Timer, fns: Dict[str, Callable[[], None]], rounds: int, inner: int,
                warmup: int = 3) -> Dict[str, float]:
    """Median ms per call of each callable, sampled round robin."""
    for _ in range(warmup):
        for f in fns.values():
            f()
    samples: Dict[str, List[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for k, f in fns.items():
            samples[k].append(timer.sample(f, inner))
    return {k: statistics.median(v) for k, v in samples.items()}


def device_pointer(a) -> int:
    """The device address of a PyTorch / CuPy / pycuda array."""
    return int(a.__cuda_array_interface__["data"][0])


class DirectLaunch:
    """tecomp's kernels for fixed device arrays, launched straight through pycuda (what
    ``CudaModule.__call__`` does after its argument checks, prepared once)."""

    def __init__(self, mod, arrays: Sequence, drv):
        from tecomp.ir.expr import Buffer

        self.drv = drv
        func = mod.func
        ptrs = {}
        for p, a in zip(func.params, arrays):
            if isinstance(p, Buffer):
                ptrs[p] = device_pointer(a)
        # the module's intermediate buffers (e.g. an im2col between two kernels):
        # allocated once here, as CudaModule.__call__ allocates them per call
        self.workspaces = []
        for w in mod.cuda_source.workspaces:
            nbytes = int(np.prod([int(d.value) for d in w.shape], dtype=np.int64)) \
                * np.dtype(w.dtype).itemsize
            self.workspaces.append(drv.alloc(nbytes))
            ptrs[w] = int(self.workspaces[-1])
        cmod = drv.compile(mod.cuda_source, getattr(mod.target, "arch", None))
        self.launches = []
        from tecomp.lower.tma_pipeline import map_spec
        from tecomp.runtime.cuda_driver import libcuda
        from tecomp.target import tma
        for k in mod.kernels:
            if not all(hasattr(d, "value") for d in k.grid + k.block) or \
                    not all(p.is_buffer or p.dtype == "tensor_map" for p in k.params):
                raise ValueError(f"{k.name}: DirectLaunch takes kernels with constant launch "
                                 "sizes and buffer or tensor-map parameters only")
            grid = tuple(int(d.value) for d in k.grid)
            block = tuple(int(d.value) for d in k.block)
            types = "".join("P" if p.is_buffer else "T" for p in k.params)
            # (a TMA tensor map: encoded once, by the driver, for these arrays)
            args = [ptrs[p.obj] if p.is_buffer else tma.encode(
                map_spec(p.obj, [int(d.value) for d in p.obj.src.shape]), ptrs[p.obj.src],
                getattr(drv, "cu", None) or libcuda())
                for p in k.params]
            self.launches.append((drv.get_function(cmod, k.name), grid, block,
                                  k.dynamic_shared, types, args))

    def __call__(self) -> None:
        for fn, grid, block, shared, types, args in self.launches:
            if "T" in types:   # (the driver API's launch: the maps 64-byte aligned)
                self.drv.launch(fn, grid, block, shared, types, args, stream=0)
            else:
                self.drv.launch(fn, grid, block, shared, types, args)


# ---------------------------------------------------------------------------------
# workloads


@dataclass
class Reference:
    """A reference tool's call, and its last result as a numpy array in tecomp's layout."""

    run: Callable[[], object]
    result: Callable[[], np.ndarray]


@dataclass
class Setup:
    host: List[np.ndarray]                 # tecomp's arguments (the output last)
    refs: Dict[str, Reference]
    expect: Callable[[], np.ndarray]       # the float64 reference result


@dataclass
class Workload:
    name: str
    build: Callable[..., object]           # (target="cuda") -> tecomp module
    setup: Callable[[object, object], Setup]   # (torch or None, cupy or None) -> Setup
    flops: float = 0.0
    bytes: float = 0.0
    configs: Callable[[], List[object]] = lambda: []  # --sweep's tilings, the default first
    search: Optional[Callable[[], list]] = None  # --tune: fresh args for tc.auto_schedule
    ab: Callable[[], List[object]] = lambda: []  # --ab: two forms of its schedule, A first
    tolerance: float = TOLERANCE           # the largest error a result may have


def _np(t) -> np.ndarray:
    """A torch / CuPy array's values on the host."""
    if isinstance(t, np.ndarray):
        return t
    return t.cpu().numpy() if hasattr(t, "cpu") else t.get()


def gemm_workload(n: int, half: bool = False) -> Workload:
    """``--tune`` searches the GEMM tiling of ``ops.matmul`` through
    ``tc.auto_schedule(target="cuda")`` (the template's tiling rules).  ``half``: float16
    operands with float32 accumulation on tensor cores (``tc.nn.matmul(A, B,
    out_dtype="float32")``, the wmma template), against cuBLAS's HGEMM through
    ``torch.matmul`` of float16 tensors (float32 accumulation, a float16 result: half the
    bytes tecomp's float32 C writes), checked against float64 products of the same
    float16 inputs, to the float16 rounding of torch's result."""
    dtype = "float16" if half else "float32"

    def args():
        A = tc.placeholder((n, n), dtype, name="A")
        B = tc.placeholder((n, n), dtype, name="B")
        return [A, B, ops.matmul(A, B, out_dtype="float32" if half else None)]

    build = _template_build(args, nn_cuda.schedule_matmul, f"{'h' if half else ''}gemm{n}",
                            tensor_cores=half)

    def setup(torch, cupy):
        rng = np.random.default_rng(0)
        a, b = _randn(rng, (n, n), dtype), _randn(rng, (n, n), dtype)
        refs = {}
        expect = lambda: a.astype(np.float64) @ b.astype(np.float64)  # noqa: E731
        if torch is not None:
            ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
            tout = torch.empty((n, n), device="cuda", dtype=ta.dtype)
            refs["torch"] = Reference(lambda: torch.matmul(ta, tb, out=tout),
                                      lambda: _np(tout.float()))
            expect = lambda: torch.matmul(ta.double(), tb.double()).cpu().numpy()  # noqa: E731
        if cupy is not None:
            ca, cb = cupy.asarray(a), cupy.asarray(b)
            cout = cupy.empty((n, n), dtype=ca.dtype)
            refs["cupy"] = Reference(lambda: cupy.matmul(ca, cb, out=cout),
                                     lambda: _np(cout).astype(np.float32))
        return Setup([a, b, np.zeros((n, n), np.float32)], refs, expect)

    if half:
        return Workload(f"hgemm {n}^3 f16 (tensor cores)", build, setup, flops=2.0 * n ** 3,
                        configs=lambda: wmma_sweep(n), tolerance=2e-3)
    return Workload(f"gemm {n}^3", build, setup, flops=2.0 * n ** 3,
                    configs=lambda: gemm_sweep(nn_cuda.gemm_config(n, n, n)), search=args)


def odd_gemm_workload(M: int, N: int, K: int, dtype: str = "float16") -> Workload:
    """``A[M, K] @ B[K, N]`` of float16 or bfloat16 summed in float32 on tensor cores,
    extents that are not multiples of the tile (odd: boundary tiles, zero-filled copies,
    the result written under the edge's guard), against ``torch.matmul`` of the same
    16-bit tensors (cuBLAS: a 16-bit result); checked against float64 products."""
    def args():
        A = tc.placeholder((M, K), dtype, name="A")
        B = tc.placeholder((K, N), dtype, name="B")
        return [A, B, ops.matmul(A, B, out_dtype="float32")]

    build = _template_build(args, nn_cuda.schedule_matmul, f"hgemm_odd{M}x{N}x{K}",
                            tensor_cores=True)

    def setup(torch, cupy):
        rng = np.random.default_rng(0)
        np_dt = np.float16 if dtype == "float16" else np.float32
        a, b = _randn(rng, (M, K), np_dt), _randn(rng, (K, N), np_dt)
        refs = {}
        expect = lambda: a.astype(np.float64) @ b.astype(np.float64)  # noqa: E731
        host = [a, b]
        if torch is not None:
            tdt = getattr(torch, dtype)
            ta, tb = torch.from_numpy(a).cuda().to(tdt), torch.from_numpy(b).cuda().to(tdt)
            tout = torch.empty((M, N), device="cuda", dtype=tdt)
            refs["torch"] = Reference(lambda: torch.matmul(ta, tb, out=tout),
                                      lambda: _np(tout.float()))
            expect = lambda: torch.matmul(ta.double(), tb.double()).cpu().numpy()  # noqa: E731
            if dtype == "bfloat16":   # (numpy has no bfloat16: tecomp gets torch's tensors)
                host = [ta, tb]
        elif dtype == "bfloat16":
            raise RuntimeError("the bfloat16 GEMM needs PyTorch for its bfloat16 arrays")
        return Setup(host + [np.zeros((M, N), np.float32)], refs, expect)

    return Workload(f"hgemm odd {M}x{N}x{K} {dtype} (tensor cores, boundary tiles)", build,
                    setup, flops=2.0 * M * N * K, tolerance=2e-3 if dtype == "float16" else 1e-2,
                    configs=lambda: wmma_sweep(M, N, K))


def wmma_sweep(n: int, N: Optional[int] = None, K: Optional[int] = None,
               batch: int = 1, epilogue: bool = False) -> List[object]:
    """The tensor-core tilings that divide an ``n x N x K`` GEMM (``n^3`` by default), the
    default first (with an ``epilogue``: the default of a GEMM with one, on GPU 0)."""
    N = n if N is None else N
    K = n if K is None else K
    W = nn_cuda.WmmaConfig
    cands = list(nn_cuda.tensorcore.WMMA_CONFIGS[:-1]) + [
        # more than 48 KiB of shared memory (dynamic): wider blocks, longer k steps
        W(2, 4, 4, 4, 32), W(4, 2, 4, 4, 32), W(2, 4, 4, 2, 64), W(2, 2, 4, 4, 64),
        W(2, 4, 4, 4, 64), W(4, 4, 4, 2, 32), W(4, 2, 2, 4, 64),
        W(4, 2, 2, 4, 32), W(2, 4, 2, 4, 32), W(2, 4, 4, 2, 32, False)]
    tcm = nn_cuda.tensorcore
    fit = [c for c in cands if tcm.fits(c, n, N, K)]
    first = nn_cuda.wmma_config(n, N, K, batch, epilogue=epilogue,
                                max_shared=nn_cuda.common.max_shared_bytes("cuda"))
    if first is not None and not tcm.fits(first, n, N, K):
        # odd extents: the padded tilings (each with the k step that pads K least)
        fit = [e for e in (tcm.edge_k_tile(c, K) for c in cands)
               if tcm.waste(e, n, N, K) <= tcm.WMMA_MAX_WASTE]
    return _unique([first] + fit)


def _template_build(args: Callable[[], list], schedule, name: str,
                    tensor_cores: bool = False) -> Callable[..., object]:
    """``build(target, config)`` of a workload with a template: ``schedule(out, target,
    config)`` (a ``tecomp.strategy.cuda.schedule_*``) of fresh ``args()``'s output.
    ``tensor_cores``: on an sm_90 GPU, plain ``cuda`` is built as ``cuda -arch=sm_90a``,
    where the template takes Hopper's wgmma (``WmmaConfig(family="wgmma")``)."""
    def build(target="cuda", config=None):
        if tensor_cores and target == "cuda" and device_arch() in ("sm_90", "sm_90a"):
            target = "cuda -arch=sm_90a"
        a = args()
        return tc.build(schedule(a[-1], target, config), a, target=target, name=name)
    return build


def _randn(rng, shape, dtype) -> np.ndarray:
    """Standard normal values of ``shape`` (drawn in float32) as ``dtype``."""
    return rng.standard_normal(shape, dtype=np.float32).astype(dtype)


def _rules_build(args: Callable[[], list], name: str) -> Callable[..., object]:
    """``build(target, config)`` of a workload written in plain TE: the GPU rules'
    schedule of fresh ``args()`` (``config``: the GEMM tiling of its contraction)."""
    def build(target="cuda", config=None):
        from tecomp.strategy.cuda_rules import apply_cuda_rules

        a = args()
        return tc.build(apply_cuda_rules(a, gemm=config), a, target=target, name=name)
    return build


def bmm_workload(B: int, n: int, d: int, half: bool = False) -> Workload:
    """Attention's scores ``S[b, i, j] = sum_k Q[b, i, k] K[b, j, k]``, written in plain TE
    and scheduled by ``tc.auto_schedule(args, target="cuda")`` (no template has it);
    ``--sweep`` tries GEMM tilings through the same rules.  ``half``: float16 ``Q`` and
    ``K``, the products summed in float32 (on tensor cores, ``K``'s tiles as column-major
    fragments), against ``torch.bmm`` of float16 tensors (a float16 result)."""
    dtype = "float16" if half else "float32"

    def args():
        Q = tc.placeholder((B, n, d), dtype, name="Q")
        K = tc.placeholder((B, n, d), dtype, name="K")
        k = tc.reduce_axis((0, d), name="k")
        if half:
            S = tc.compute((B, n, n), lambda b, i, j: tc.sum(
                Q[b, i, k].astype("float32") * K[b, j, k].astype("float32"), axis=k), name="S")
        else:
            S = tc.compute((B, n, n), lambda b, i, j: tc.sum(Q[b, i, k] * K[b, j, k], axis=k),
                           name="S")
        return [Q, K, S]

    build = _rules_build(args, f"{'h' if half else ''}bmm{B}x{n}x{d}")

    def setup(torch, cupy):
        rng = np.random.default_rng(0)
        q, kk = _randn(rng, (B, n, d), dtype), _randn(rng, (B, n, d), dtype)
        refs = {}
        expect = lambda: q.astype(np.float64) @ kk.astype(np.float64).transpose(0, 2, 1)  # noqa: E731
        if torch is not None:
            tq, tk = torch.from_numpy(q).cuda(), torch.from_numpy(kk).cuda()
            tout = torch.empty((B, n, n), device="cuda", dtype=tq.dtype)
            refs["torch"] = Reference(lambda: torch.bmm(tq, tk.transpose(1, 2), out=tout),
                                      lambda: _np(tout.float()))
            expect = lambda: torch.bmm(tq.double(), tk.double().transpose(1, 2)).cpu().numpy()  # noqa: E731
        return Setup([q, kk, np.zeros((B, n, n), np.float32)], refs, expect)

    if half:
        return Workload(f"hbmm {B}x{n}x{n}x{d} f16 (auto_schedule, tensor cores)", build,
                        setup, flops=2.0 * B * n * n * d, tolerance=2e-3,
                        configs=lambda: wmma_sweep(n, n, d, B))
    return Workload(f"bmm {B}x{n}x{n}x{d} (auto_schedule)", build, setup,
                    flops=2.0 * B * n * n * d,
                    configs=lambda: gemm_sweep(nn_cuda.gemm_config(n, n, d, B)), search=args)


def hdense_workload(M: int, N: int, K: int) -> Workload:
    """``tc.nn.dense(X, W, out_dtype="float32")`` of float16 ``X[M, K]`` and ``W[N, K]``
    (``nn.Linear``'s layout: ``W``'s tiles are column-major fragments) on tensor cores,
    against ``F.linear`` of float16 tensors (cuBLAS, a float16 result)."""
    def args():
        X = tc.placeholder((M, K), "float16", name="X")
        W = tc.placeholder((N, K), "float16", name="W")
        return [X, W, ops.dense(X, W, out_dtype="float32")]

    build = _template_build(args, nn_cuda.schedule_dense, f"hdense{M}x{N}x{K}",
                            tensor_cores=True)

    def setup(torch, cupy):
        rng = np.random.default_rng(0)
        x, w = _randn(rng, (M, K), np.float16), _randn(rng, (N, K), np.float16)
        refs = {}
        expect = lambda: x.astype(np.float64) @ w.astype(np.float64).T  # noqa: E731
        if torch is not None:
            tx, tw = torch.from_numpy(x).cuda(), torch.from_numpy(w).cuda()
            F = torch.nn.functional
            refs["torch"] = Reference(lambda: F.linear(tx, tw), lambda: _np(F.linear(tx, tw).float()))
            expect = lambda: (tx.double() @ tw.double().T).cpu().numpy()  # noqa: E731
        return Setup([x, w, np.zeros((M, N), np.float32)], refs, expect)

    return Workload(f"hdense {M}x{K} -> {N} f16 (tensor cores)", build, setup,
                    flops=2.0 * M * N * K, tolerance=2e-3, configs=lambda: wmma_sweep(M, N, K))


def hdense_gelu_workload(M: int, N: int, K: int) -> Workload:
    """``tc.nn.gelu(tc.nn.dense(X, W, b))`` of float16 ``X[M, K]``, ``W[N, K]``, ``b[N]``: a
    float16 result, the bias and the GELU (erf) fused into the tensor-core GEMM's epilogue,
    against ``F.gelu(F.linear(x, w, b))`` in torch (cuBLAS with the bias, then a separate
    GELU kernel); checked against float64 products of the same inputs."""
    def args():
        X = tc.placeholder((M, K), "float16", name="X")
        W = tc.placeholder((N, K), "float16", name="W")
        b = tc.placeholder((N,), "float16", name="b")
        return [X, W, b, tc.nn.gelu(ops.dense(X, W, b))]

    build = _template_build(args, nn_cuda.schedule_dense, f"hdense_gelu{M}x{N}x{K}",
                            tensor_cores=True)

    def setup(torch, cupy):
        rng = np.random.default_rng(0)
        x, w = _randn(rng, (M, K), np.float16), _randn(rng, (N, K), np.float16)
        b = _randn(rng, (N,), np.float16)

        def gelu64(y):
            from math import erf, sqrt
            return 0.5 * y * (1.0 + np.vectorize(erf)(y / sqrt(2.0)))
        refs = {}
        expect = lambda: gelu64(x.astype(np.float64) @ w.astype(np.float64).T  # noqa: E731
                                + b.astype(np.float64))
        if torch is not None:
            tx, tw, tb = (torch.from_numpy(v).cuda() for v in (x, w, b))
            F = torch.nn.functional
            refs["torch"] = Reference(lambda: F.gelu(F.linear(tx, tw, tb)),
                                      lambda: _np(F.gelu(F.linear(tx, tw, tb)).float()))
            expect = lambda: _np(F.gelu(tx.double() @ tw.double().T + tb.double()))  # noqa: E731
        return Setup([x, w, b, np.zeros((M, N), np.float16)], refs, expect)

    return Workload(f"hdense {M}x{K} -> {N} f16 + bias + GELU (fused)", build, setup,
                    flops=2.0 * M * N * K, tolerance=4e-3,
                    configs=lambda: wmma_sweep(M, N, K, epilogue=True))


def conv_workload(C: int, HW: int, layout: str, N: int = 32) -> Workload:
    """3x3, stride 1, padding 1, C input and output channels; ``--tune`` searches the
    template's tiling through ``tc.auto_schedule(target="cuda")``."""
    def args():
        if layout == "nchw":
            d = tc.placeholder((N, C, HW, HW), name="data")
            w = tc.placeholder((C, C, 3, 3), name="weight")
            return [d, w, ops.conv2d_nchw(d, w, 1, 1)]
        d = tc.placeholder((N, HW, HW, C), name="data")
        w = tc.placeholder((3, 3, C, C), name="weight")
        return [d, w, ops.conv2d_nhwc(d, w, 1, 1)]

    def build(target="cuda", config=None):
        a = args()
        sched = nn_cuda.schedule_conv2d_nchw if layout == "nchw" else nn_cuda.schedule_conv2d_nhwc
        return tc.build(sched(a[-1], target, config), a, target=target, name=f"conv{C}_{layout}")

    def setup(torch, cupy):
        rng = np.random.default_rng(0)
        d = rng.standard_normal((N, C, HW, HW), dtype=np.float32)
        wt = (rng.standard_normal((C, C, 3, 3)) / math.sqrt(9 * C)).astype(np.float32)
        nhwc = layout == "nhwc"
        # tecomp's layouts: NCHW / OIHW, or NHWC / HWIO
        host = [d, wt] if not nhwc else [np.ascontiguousarray(d.transpose(0, 2, 3, 1)),
                                         np.ascontiguousarray(wt.transpose(2, 3, 1, 0))]
        host.append(np.zeros(host[0].shape[:-1] + (C,) if nhwc else (N, C, HW, HW),
                             np.float32))
        as_layout = (lambda y: y.transpose(0, 2, 3, 1)) if nhwc else (lambda y: y)

        def numpy_expect():  # float64 (slow: PyTorch's replaces it when present)
            dp = np.pad(d.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
            out = np.zeros((N, C, HW, HW))
            for r in range(3):
                for s_ in range(3):
                    out += np.einsum("nchw,kc->nkhw", dp[:, :, r:r + HW, s_:s_ + HW],
                                     wt[:, :, r, s_])
            return as_layout(out)

        refs, expect = {}, numpy_expect
        if torch is not None:
            F = torch.nn.functional
            td, tw = torch.from_numpy(d).cuda(), torch.from_numpy(wt).cuda()
            if nhwc:  # cuDNN's NHWC kernels
                td = td.to(memory_format=torch.channels_last)
                tw = tw.to(memory_format=torch.channels_last)
            last = {}

            def run_torch():
                last["y"] = F.conv2d(td, tw, padding=1)

            refs["torch"] = Reference(run_torch, lambda: as_layout(_np(last["y"])))
            expect = lambda: as_layout(  # noqa: E731
                F.conv2d(td.double(), tw.double(), padding=1).cpu().numpy())
        return Setup(host, refs, expect)

    return Workload(f"conv {layout} N={N} C=K={C} {HW}x{HW}", build, setup,
                    flops=2.0 * N * C * C * 9 * HW * HW,
                    configs=lambda: conv_sweep(
                        nn_cuda.conv_config(C, HW, HW, C, (3, 3), lambda th, tw: (th + 2, tw + 2),
                                            channels_last=layout == "nhwc"), C),
                    search=args)


def conv_gemm_workload(C: int, HW: int, layout: str, N: int = 32) -> Workload:
    """The convolution of :func:`conv_workload` written as a user would write it for a
    GEMM library: an ``im2col`` compute (the padded input patches, materialised) and a
    GEMM over ``9 C``, scheduled by ``tc.auto_schedule(args, target="cuda")`` (two
    kernels: the copy and the GEMM template).  NHWC: ``[N*H*W, 9C] x [9C, K]`` (the
    HWIO weights as they lie), NCHW: per image ``[K, 9C] x [9C, H*W]`` (OIHW as they
    lie); the output is the convolution's, in its layout."""
    P = HW * HW

    def args():
        def window(y, x, kk):
            yy, xx = y + kk // 3 - 1, x + kk % 3 - 1
            inside = tc.all(yy >= 0, yy < HW, xx >= 0, xx < HW)
            return inside, tc.max(tc.min(yy, HW - 1), 0), tc.max(tc.min(xx, HW - 1), 0)

        k = tc.reduce_axis((0, 9 * C), name="k")
        if layout == "nhwc":
            d = tc.placeholder((N, HW, HW, C), name="data")
            w = tc.placeholder((9 * C, C), name="weight")

            def col(p, r):
                inside, yy, xx = window(p % P // HW, p % HW, r // C)
                return tc.if_then_else(inside, d[p // P, yy, xx, r % C], 0.0)

            B = tc.compute((N * P, 9 * C), col, name="im2col")
            out = tc.compute((N * P, C), lambda p, j: tc.sum(B[p, k] * w[k, j], axis=k),
                             name="conv")
        else:
            d = tc.placeholder((N, C, HW, HW), name="data")
            w = tc.placeholder((C, 9 * C), name="weight")

            def col(n, r, p):
                inside, yy, xx = window(p // HW, p % HW, r % 9)
                return tc.if_then_else(inside, d[n, r // 9, yy, xx], 0.0)

            B = tc.compute((N, 9 * C, P), col, name="im2col")
            out = tc.compute((N, C, P), lambda n, i, j: tc.sum(w[i, k] * B[n, k, j], axis=k),
                             name="conv")
        return [d, w, out]

    build = _rules_build(args, f"conv{C}_{layout}_gemm")

    direct = conv_workload(C, HW, layout, N)

    def setup(torch, cupy):
        st = direct.setup(torch, cupy)
        d, wt, y = st.host  # the same memory, seen as the GEMM's 2-D operands
        shape = (N * P, C) if layout == "nhwc" else (N, C, P)
        host = [d, wt.reshape((9 * C, C) if layout == "nhwc" else (C, 9 * C)), y.reshape(shape)]
        refs = {k: Reference(r.run, lambda r=r: r.result().reshape(shape))
                for k, r in st.refs.items()}
        return Setup(host, refs, lambda: st.expect().reshape(shape))

    return Workload(f"conv {layout} N={N} C=K={C} {HW}x{HW} (im2col + GEMM, auto_schedule)",
                    build, setup, flops=direct.flops, search=args,
                    configs=lambda: gemm_sweep(nn_cuda.gemm_config(N * P, C, 9 * C) if
                                               layout == "nhwc" else
                                               nn_cuda.gemm_config(C, P, 9 * C, N)))


def softmax_workload(m: int, n: int) -> Workload:
    def build(target="cuda", config=None):
        X = tc.placeholder((m, n), name="X")
        Y = ops.softmax(X)
        return tc.build(nn_cuda.schedule_softmax(Y, target, config), [X, Y], target=target,
                        name="softmax")

    def setup(torch, cupy):
        x = np.random.default_rng(0).standard_normal((m, n), dtype=np.float32) * 3

        def expect():
            e = np.exp(x.astype(np.float64) - x.max(-1, keepdims=True))
            return e / e.sum(-1, keepdims=True)

        refs = {}
        if torch is not None:
            tx = torch.from_numpy(x).cuda()
            last = {}

            def run_torch():
                last["y"] = torch.softmax(tx, dim=-1)

            refs["torch"] = Reference(run_torch, lambda: _np(last["y"]))
        return Setup([x, np.zeros((m, n), np.float32)], refs, expect)

    return Workload(f"softmax {m}x{n}", build, setup, bytes=2.0 * 4 * m * n,
                    configs=lambda: softmax_sweep(nn_cuda.softmax_config(n)))


def flash_workload(B: int, H: int, L: int, d: int, causal: bool) -> Workload:
    """FlashAttention's forward, float16 (``tc.nn.flash_attention`` scheduled by
    ``tecomp.strategy.cuda.schedule_flash_attention``: tensor cores, the logsumexp saved
    too), against ``F.scaled_dot_product_attention`` restricted to its flash backend
    (``torch.nn.attention.sdpa_kernel(SDPBackend.FLASH_ATTENTION)``), checked against
    PyTorch's math backend in float64 on the same inputs.  FLOP/s count FlashAttention's
    two GEMMs (``4 b h L^2 d``, half with ``causal``), which tecomp computes once each
    (see tecomp.strategy.cuda.attention); causal, it skips the tiles past the diagonal.
    ``--ab`` times the default tiling with its key and value tiles copied where they are
    read (A, ``stages=1``) against a ring of two ``cp.async`` tiles copied a step ahead
    (B, ``stages=2``) and against ``p`` (and the rows' statistics) in registers
    (:func:`_stage_forms`); ``--sweep`` tries rings of 2 and 3 at several tilings too."""
    def args():
        q, k, v = (tc.placeholder((B, H, L, d), "float16", name=n) for n in "qkv")
        out, lse = tc.nn.flash_attention(q, k, v, causal=causal)
        return [q, k, v, lse, out]

    def build(target="cuda", config=None):
        a = args()
        s = nn_cuda.schedule_flash_attention(a[3:], target, config)
        return tc.build(s, a, target=target, name=f"flash{d}{'c' if causal else ''}")

    def setup(torch, cupy):
        rng = np.random.default_rng(0)
        q, k, v = (_randn(rng, (B, H, L, d), np.float16) for _ in range(3))
        host = [q, k, v, np.zeros((B, H, L), np.float32), np.zeros((B, H, L, d), np.float16)]
        refs = {}
        if torch is None:
            return Setup(host, refs, lambda: _attention64(q, k, v, causal)[0])
        F = torch.nn.functional
        from torch.nn.attention import SDPBackend, sdpa_kernel

        tq, tk, tv = (torch.from_numpy(x).cuda() for x in (q, k, v))
        box = {}

        def flash():
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                box["out"] = F.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)
        refs["torch"] = Reference(flash, lambda: _np(box["out"].float()))

        def expect():
            with sdpa_kernel(SDPBackend.MATH):
                return _np(F.scaled_dot_product_attention(tq.double(), tk.double(), tv.double(),
                                                          is_causal=causal))
        return Setup(host, refs, expect)

    flops = 4.0 * B * H * L * L * d / (2 if causal else 1)
    return Workload(f"flash attention fwd f16 b{B} h{H} s{L} d{d}{' causal' if causal else ''}",
                    build, setup, flops=flops, tolerance=1e-2,
                    configs=lambda: _unique([nn_cuda.flash_config(
                        d, d, "float16", nn_cuda.common.max_shared_bytes("cuda"))]
                        + list(nn_cuda.attention.FLASH_CONFIGS)
                        + [nn_cuda.FlashConfig(4, 16), nn_cuda.FlashConfig(1, 64)]
                        + _flash_rings(d)),
                    ab=lambda: _stage_forms(nn_cuda.flash_config(
                        d, d, "float16", nn_cuda.common.max_shared_bytes("cuda")), causal))


def _stage_forms(cfg, causal: bool = False) -> list:
    """The flash forward's tiling ``cfg`` with its key and value tiles copied where they
    are read (A, ``stages=1``), in a ring of two cp.async tiles (B), with ``p`` in
    each warp's registers (``form="registers"``, ``stages=1``: against A), and with the
    rows' statistics there too (``form="fragments"``, ``stages`` 1 and 2); the fragment
    form with its exps as ``ex2.approx.ftz`` (``ftz=True``), in base 2 as well
    (``exp2=True``) and, ``causal``, with the whole tiles' loop too (``whole=True``), then
    with the masked intrinsic on every diagonal tile (``diagonal_test=False``)."""
    frag = dataclasses.replace(cfg, stages=1, form="fragments")
    fast = dataclasses.replace(frag, whole=True, ftz=True, exp2=True)
    return [dataclasses.replace(cfg, stages=1), dataclasses.replace(cfg, stages=2),
            dataclasses.replace(cfg, stages=1, form="registers"), frag,
            dataclasses.replace(cfg, stages=2, form="fragments"),
            dataclasses.replace(frag, ftz=True),
            dataclasses.replace(frag, ftz=True, exp2=True)] + (
                [dataclasses.replace(frag, whole=True, ftz=True), fast,
                 dataclasses.replace(fast, diagonal_test=False)] if causal else [])


def _flash_rings(d: int) -> list:
    """The forward's tilings with rings of 2 and 3 cp.async key and value tiles, those
    whose shared memory fits the GPU's."""
    limit = nn_cuda.common.max_shared_bytes("cuda")
    return [c for c in (nn_cuda.FlashConfig(w, kv, stages=n) for n in (2, 3)
                        for w, kv in ((4, 16), (4, 32), (4, 64), (2, 32)))
            if nn_cuda.attention.shared_bytes(c, d, d) <= limit
            and c.block_kv + d <= nn_cuda.attention.MAX_ACCUMULATORS]


def _attention64(q, k, v, causal):
    """float64 attention in numpy: (output, logsumexp, probabilities)."""
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(q.shape[-1])
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    m = s.max(-1, keepdims=True)
    lse = m + np.log(np.exp(s - m).sum(-1, keepdims=True))
    p = np.exp(s - lse)
    return p @ v, lse[..., 0], p


def flash_backward_workload(B: int, H: int, L: int, d: int, causal: bool) -> Workload:
    """FlashAttention's backward, float16: ``tc.nn.flash_attention_backward`` (dq, dk, dv
    from q, k, v, the output, its gradient and the logsumexp; scheduled by
    ``schedule_flash_attention_backward``) against ``torch.autograd.grad`` of
    ``F.scaled_dot_product_attention`` on its flash backend (its backward kernels only: the
    forward is run once, the graph retained).  The result checked is dv (the last
    argument); dq and dk are checked in tests/test_flash_attention.py.  FLOP/s count
    FlashAttention-2's five GEMMs (``10 b h L^2 d``, half with ``causal``), which
    tecomp's default does too (``FlashConfig.dq="atomic"``: one kernel, ``dq`` added
    with atomics); ``--ab`` times it against ``dq="recompute"`` (seven GEMMs: dk and dv
    in one kernel, four a tile; dq in its own, three: no atomics), the same tiling."""
    def args():
        P = lambda shape, n, dt="float16": tc.placeholder(shape, dt, name=n)  # noqa: E731
        q, k, v, o, do = (P((B, H, L, d), n) for n in ("q", "k", "v", "o", "do"))
        lse = P((B, H, L), "lse", "float32")
        return [q, k, v, o, do, lse,
                *tc.nn.flash_attention_backward(q, k, v, o, do, lse, causal=causal)]

    def build(target="cuda", config=None):
        a = args()
        s = nn_cuda.schedule_flash_attention_backward(a[6:], target, config)
        return tc.build(s, a, target=target, name=f"flash_bwd{d}{'c' if causal else ''}")

    def setup(torch, cupy):
        rng = np.random.default_rng(0)
        q, k, v, do = (_randn(rng, (B, H, L, d), np.float16) for _ in range(4))
        grads = [np.zeros((B, H, L, d), np.float16) for _ in range(3)]
        refs = {}
        if torch is None:
            out, lse, p = _attention64(q, k, v, causal)
            dv = p.transpose(0, 1, 3, 2) @ do.astype(np.float64)
            return Setup([q, k, v, out.astype(np.float16), do, lse.astype(np.float32), *grads],
                         refs, lambda: dv)
        F = torch.nn.functional
        from torch.nn.attention import SDPBackend, sdpa_kernel

        tq, tk, tv = (torch.from_numpy(x).cuda().requires_grad_() for x in (q, k, v))
        tdo = torch.from_numpy(do).cuda()
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            tout = F.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)
        box = {}

        def backward():
            box["g"] = torch.autograd.grad(tout, (tq, tk, tv), tdo, retain_graph=True)
        refs["torch"] = Reference(backward, lambda: _np(box["g"][2].float()))
        with torch.no_grad():
            s = (tq.double() @ tk.double().transpose(2, 3)) / math.sqrt(d)
            if causal:
                s = s.masked_fill(~torch.ones(L, L, dtype=torch.bool, device="cuda").tril(),
                                  float("-inf"))
            lse = torch.logsumexp(s, -1)
            p = torch.exp(s - lse[..., None])
            out = (p @ tv.double()).half().cpu().numpy()
            dv = (p.transpose(2, 3) @ tdo.double()).cpu().numpy()
            lse = lse.float().cpu().numpy()
            del s, p
        return Setup([q, k, v, out, do, lse, *grads], refs, lambda: dv)

    flops = 10.0 * B * H * L * L * d / (2 if causal else 1)
    return Workload(f"flash attention bwd f16 b{B} h{H} s{L} d{d}{' causal' if causal else ''}",
                    build, setup, flops=flops, tolerance=1e-2,
                    configs=lambda: _unique([nn_cuda.flash_backward_config(
                        d, d, "float16", nn_cuda.common.max_shared_bytes("cuda"))]
                        + list(nn_cuda.attention.FLASH_BACKWARD_CONFIGS)
                        + [nn_cuda.FlashConfig(8, 64, 16), nn_cuda.FlashConfig(2, 64, 16)]
                        + [dataclasses.replace(c, dq="recompute")
                           for c in nn_cuda.attention.FLASH_BACKWARD_CONFIGS]),
                    ab=lambda: _dq_forms(nn_cuda.flash_backward_config(
                        d, d, "float16", nn_cuda.common.max_shared_bytes("cuda"))))


def _dq_forms(cfg) -> list:
    """The flash backward's tiling ``cfg`` with ``dq`` atomic (A, the default) and
    recomputed (B)."""
    return [dataclasses.replace(cfg, dq="atomic"), dataclasses.replace(cfg, dq="recompute")]


def masked_sdpa_workload(B: int, H: int, L: int, d: int) -> Workload:
    """``tc.nn.scaled_dot_product_attention`` with BERT's padding mask, float16: a
    ``(batch, 1, 1, L)`` additive mask computed from a ``(batch, L)`` one inside the graph
    (the last eighth of each sequence's keys -10000), scheduled by the GPU rules, which
    run it on FlashAttention's template (``sdpa_into_flash``), against
    ``F.scaled_dot_product_attention`` with the same ``attn_mask`` (PyTorch's choice of
    backend), checked against float64 attention of the same inputs.  FLOP/s count the
    two GEMMs (``4 b h L^2 d``)."""
    def args():
        q, k, v = (tc.placeholder((B, H, L, d), "float16", name=n) for n in "qkv")
        pad = tc.placeholder((B, L), "float16", name="pad")
        keys = tc.compute((B, 1, 1, L), lambda b, _h, _i, j: pad[b, j], name="keymask")
        return [q, k, v, pad, tc.nn.scaled_dot_product_attention(q, k, v, keys, name="attn")]

    def setup(torch, cupy):
        rng = np.random.default_rng(0)
        q, k, v = (_randn(rng, (B, H, L, d), np.float16) for _ in range(3))
        pad = np.where(np.arange(L) < L - L // 8, 0.0, -10000.0)[None].repeat(B, 0)
        pad = pad.astype(np.float16)
        host = [q, k, v, pad, np.zeros((B, H, L, d), np.float16)]

        def expect():
            s = (q.astype(np.float64) @ k.astype(np.float64).transpose(0, 1, 3, 2)
                 / math.sqrt(d) + pad.astype(np.float64)[:, None, None])
            p = np.exp(s - s.max(-1, keepdims=True))
            return (p / p.sum(-1, keepdims=True)) @ v.astype(np.float64)
        refs = {}
        if torch is not None:
            F = torch.nn.functional
            tq, tk, tv = (torch.from_numpy(x).cuda() for x in (q, k, v))
            tm = torch.from_numpy(pad).cuda()[:, None, None, :]
            box = {}

            def run():
                box["out"] = F.scaled_dot_product_attention(tq, tk, tv, attn_mask=tm)
            refs["torch"] = Reference(run, lambda: _np(box["out"].float()))
        return Setup(host, refs, expect)

    return Workload(f"sdpa padding mask f16 b{B} h{H} s{L} d{d} (flash in a graph)",
                    _rules_build(args, f"sdpa_pad{d}"), setup,
                    flops=4.0 * B * H * L * L * d, tolerance=1e-2,
                    configs=lambda: _unique([nn_cuda.flash_config(
                        d, d, "float16", nn_cuda.common.max_shared_bytes("cuda"))]
                        + list(nn_cuda.attention.FLASH_CONFIGS)
                        + [nn_cuda.FlashConfig(4, 16), nn_cuda.FlashConfig(1, 64)]))


def _unique(cfgs) -> List[object]:
    """The tilings in order, each once (the configs are frozen dataclasses: hashable)."""
    return list(dict.fromkeys(cfgs))


def gemm_sweep(d) -> List[object]:
    """GEMM tilings around the default ``d``: other block shapes, k tiles and micro-tiles,
    the A tile padded, the tiling that was the default before the H100 sweeps (8 k
    steps, rolled, padded), and the tiles' rows copied 4 floats at a time and/or
    double-buffered, with some of the shapes above."""
    G, R = nn_cuda.GemmConfig, replace
    half_m, half_n = max(1, d.threads_m // 2), max(1, d.threads_n // 2)
    return _unique([
        d, R(d, threads_m=half_m), R(d, threads_n=half_n),
        R(d, threads_m=half_m, threads_n=half_n), R(d, k_tile=2 * d.k_tile),
        R(d, threads_m=half_m, k_tile=2 * d.k_tile), R(d, k_tile=max(1, d.k_tile // 2)),
        R(d, pad=True), R(d, threads_m=half_m, regs_m=2 * d.regs_m),
        G(d.threads_m, d.threads_n, d.regs_m, d.regs_n, min(8, d.k_tile), False, True),
        G(8, 16, 8, 8, 32, True, False),  # the default of the H100 sweeps
        # tile rows copied 4 floats at a time; the tiles double-buffered (cp.async)
        R(d, vector=4, double_buffer=False), R(d, vector=1, double_buffer=True),
        R(d, vector=4, double_buffer=True),
        R(d, vector=4, double_buffer=True, k_tile=max(1, d.k_tile // 2)),
        R(d, vector=4, double_buffer=True, threads_m=2 * d.threads_m,
          k_tile=max(1, d.k_tile // 2)),
        R(d, vector=4, double_buffer=True, threads_m=half_m, regs_m=2 * d.regs_m,
          k_tile=max(1, d.k_tile // 2)),
        # smaller blocks of 128 threads (more blocks per SM where the full block makes
        # few): 64 x 64 (the best of a search of the im2col convolution's GEMM) and 32 x 64
        G(8, 16, 8, 4, 32, True, False, vector=4, double_buffer=True),
        G(8, 16, 4, 4, 32, True, False, vector=4, double_buffer=True),
    ])


def conv_sweep(d, K: int) -> List[object]:
    """Convolution tilings around the default ``d``: the channel steps rolled, other
    channel tiles, 4 or 8 output channels per thread, wider pixel tiles per thread."""
    R = replace
    cands = [d, R(d, unroll_c=False), R(d, c_tile=max(1, d.c_tile // 2)),
             R(d, c_tile=2 * d.c_tile)]
    if d.regs_k >= 8:
        other = [R(d, regs_k=d.regs_k // 2)]
        if d.threads * 2 <= 256:
            other.append(R(d, regs_k=d.regs_k // 2, threads_k=2 * d.threads_k))
    else:
        other = [R(d, regs_k=2 * d.regs_k, threads_k=max(1, d.threads_k // 2))]
    cands += other + [R(o, c_tile=max(1, d.c_tile // 2)) for o in other]
    if d.threads_x % 2 == 0:
        cands.append(R(d, regs_x=2 * d.regs_x, threads_x=d.threads_x // 2))
    return _unique(c for c in cands if c.block_k <= 2 * K)


def softmax_sweep(d) -> List[object]:
    S = nn_cuda.SoftmaxConfig
    return _unique([d] + [S(t, row, False) for t in (32, 64, 128, 256) for row in (False, True)]
                   + [S(d.threads, True, True)])


WORKLOADS = [
    gemm_workload(4096),
    gemm_workload(1024),
    gemm_workload(4096, half=True),
    gemm_workload(1024, half=True),
    # odd extents on tensor cores (boundary tiles): one row past 4096, BERT-ish 1000
    # tokens, a short k (100), a bfloat16 GEMM 1 short of 4096 everywhere
    odd_gemm_workload(4097, 4096, 4096),
    odd_gemm_workload(1000, 3072, 768),
    odd_gemm_workload(1000, 768, 3072),
    odd_gemm_workload(4096, 4096, 100),
    odd_gemm_workload(4095, 4095, 4095, "bfloat16"),
    conv_workload(64, 56, "nchw"),
    conv_workload(256, 14, "nchw"),
    conv_workload(64, 56, "nhwc"),
    conv_workload(256, 14, "nhwc"),
    softmax_workload(4096, 1024),
    bmm_workload(96, 512, 64),
    bmm_workload(96, 512, 64, half=True),
    hdense_workload(4096, 3072, 768),
    hdense_gelu_workload(4096, 3072, 768),
    hdense_gelu_workload(1000, 3072, 768),   # odd: 1000 tokens (boundary tiles)
    conv_gemm_workload(256, 14, "nchw"),
    conv_gemm_workload(256, 14, "nhwc"),
    flash_workload(4, 16, 2048, 64, False),
    flash_workload(4, 16, 2048, 64, True),
    flash_workload(4, 16, 2048, 128, False),
    flash_workload(4, 16, 2048, 128, True),
    flash_backward_workload(4, 16, 2048, 64, False),
    flash_backward_workload(4, 16, 2048, 64, True),
    flash_backward_workload(4, 16, 2048, 128, False),
    flash_backward_workload(4, 16, 2048, 128, True),
    masked_sdpa_workload(8, 12, 512, 64),
]


def max_rel_error(got: np.ndarray, want: np.ndarray) -> float:
    """The largest absolute error relative to the largest magnitude of the reference."""
    scale = max(1e-30, float(np.max(np.abs(want))))
    return float(np.max(np.abs(got.astype(np.float64) - want))) / scale


def _to_device(host: Sequence[np.ndarray], torch, cupy):
    if torch is not None:   # (a torch tensor already: a bfloat16 operand)
        return [h.cuda() if isinstance(h, torch.Tensor) else torch.from_numpy(h).cuda()
                for h in host]
    if cupy is not None:
        return [cupy.asarray(h) for h in host]
    import pycuda.gpuarray as gpuarray

    return [gpuarray.to_gpu(h) for h in host]


class WrongResults(RuntimeError):
    """A workload's result (tecomp's or a reference's) is off by more than its tolerance."""


def _checked(w, torch, cupy):
    """Build ``w``, run it once on the device and check tecomp's and the references'
    results against the float64 host reference; raises WrongResults when one is off."""
    mod = w.build()
    st = w.setup(torch, cupy)
    dev = _to_device(st.host, torch, cupy)
    mod(*dev)                      # compiles; checks the arguments
    want = st.expect()
    errors = {"tecomp": max_rel_error(_np(dev[-1]), want)}
    for name, ref in st.refs.items():
        ref.run()
        errors[name] = max_rel_error(ref.result(), want)
    bad = {k: e for k, e in errors.items() if not e < w.tolerance}
    if bad:
        raise WrongResults(f"wrong results (max error relative to the largest "
                           f"value: {bad}); nothing timed")
    return mod, st, dev, want, errors


def run(args) -> int:
    try:
        drv = gpu_driver()
    except RuntimeUnavailableError as exc:
        sys.stderr.write(f"benchmarks/gpu.py needs a CUDA GPU and pycuda: {exc}\n"
                         "Nothing was measured (the CPU benchmarks are benchmarks/run.py; the "
                         "CUDA schedules are checked without a GPU by "
                         "tests/test_nn_schedule_cuda.py).\n")
        return NO_GPU_STATUS
    torch = _try_import("torch")
    if torch is not None and not torch.cuda.is_available():
        torch = None
    if torch is not None:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cudnn.benchmark = True
        torch.cuda.init()
    cupy = _try_import("cupy")
    if cupy is not None:
        try:
            cupy.cuda.runtime.getDeviceCount()
        except Exception:  # noqa: BLE001
            cupy = None
    refs_available = [t for t, mod in (("torch", torch), ("cupy", cupy)) if mod is not None]
    print(f"device: {drv.name} ({drv.arch}); torch "
          f"{torch.__version__ if torch else 'absent'}; cupy "
          f"{cupy.__version__ if cupy else 'absent'}; TF32 off")
    rounds, inner = (5, 3) if args.quick else (15, 10)
    rows: List[Row] = []
    sweeps: List[str] = []
    failures: List[str] = []
    with drv.active():
        timer = Timer(drv)
        for w in WORKLOADS:
            if args.only and args.only not in w.name:
                continue
            try:
                mod, st, dev, want, errors = _checked(w, torch, cupy)
            except Exception as exc:  # noqa: BLE001 - keep the table of the other workloads
                import traceback

                failures.append(f"{w.name}: {type(exc).__name__}: {exc}")
                print(f"  FAILED {w.name}:\n{traceback.format_exc()}", flush=True)
                continue
            launch = DirectLaunch(mod, dev, drv)
            med = interleaved(timer, {"tecomp": launch, **{k: r.run for k, r in st.refs.items()}},
                              rounds, inner)
            t0 = time.perf_counter()       # a checked call: argument checks + launch + sync
            for _ in range(inner):
                mod(*dev)
            drv.synchronize()
            call_ms = (time.perf_counter() - t0) / inner * 1e3
            k = mod.kernels[0]
            notes = [f"grid {tuple(int(d.value) for d in k.grid)}, block {k.constant_block}, "
                     f"{k.shared_bytes} B shared; a checked CudaModule call takes "
                     f"{call_ms:.3f} ms; errors "
                     + ", ".join(f"{t} {e:.1e}" for t, e in errors.items())]
            rows.append(Row(w.name, med, w.flops, w.bytes, notes))
            print(f"  measured {w.name}", flush=True)
            if args.tune and w.search is not None:
                try:
                    sweeps.append(tune(w, st, dev, want, timer, drv, rounds, inner,
                                       args.tune))
                except Exception:  # noqa: BLE001 - keep the table of the other workloads
                    import traceback

                    sweeps.append(f"tuning {w.name} broke:\n{traceback.format_exc()}")
                print(sweeps[-1], flush=True)
            if args.ab and w.ab():
                try:
                    sweeps.append(sweep(w, st, dev, want, timer, drv, rounds, inner,
                                        configs=w.ab()))
                except Exception:  # noqa: BLE001 - keep the table of the other workloads
                    import traceback

                    sweeps.append(f"A/B of {w.name} broke:\n{traceback.format_exc()}")
                print(sweeps[-1], flush=True)
            if args.sweep:
                try:
                    sweeps.append(sweep(w, st, dev, want, timer, drv, rounds, inner))
                except Exception:  # noqa: BLE001 - keep the table of the other workloads
                    import traceback

                    sweeps.append(f"sweep of {w.name} broke:\n{traceback.format_exc()}")
                print(sweeps[-1], flush=True)
        if "odd" in args.only:
            try:
                sweeps.append(odd_compare(drv, torch, timer, rounds, inner))
            except Exception:  # noqa: BLE001 - keep the table of the other workloads
                import traceback

                sweeps.append(f"the odd families' comparison broke:\n{traceback.format_exc()}")
            print(sweeps[-1], flush=True)
        if args.family:
            try:
                sweeps.append(family_compare(drv, torch, args.family, timer, rounds, inner))
            except Exception:  # noqa: BLE001 - keep the table of the other workloads
                import traceback

                sweeps.append(f"--family broke:\n{traceback.format_exc()}")
            print(sweeps[-1], flush=True)
    print()
    print(format_table(rows, refs_available))
    for text in sweeps:
        print()
        print(text)
    if failures:
        print("\nFAILED (not timed):\n" + "\n".join(f"  {f}" for f in failures))
        return 1
    return 0


_SHORT = {"threads_": "t_", "regs_": "r_", "k_tile": "kt", "c_tile": "ct", "unroll_": "unroll_",
          "row_in_shared": "row_sh", "exp_in_shared": "exp_sh", "vector": "vec",
          "double_buffer": "db"}


def config_text(c) -> str:
    """A tiling in one short line: its fields, the names abbreviated."""
    text = ", ".join(f"{k}={int(v) if isinstance(v, bool) else v}"
                     for k, v in vars(c).items())
    for long, short in _SHORT.items():
        text = text.replace(long, short)
    return text


def _fill_nan(a) -> None:
    """Poison an output array on the device, so a kernel that skips an element fails."""
    if hasattr(a, "fill_"):
        a.fill_(float("nan"))
    else:
        a.fill(np.float32(np.nan))


def sweep(w: Workload, st: Setup, dev, want, timer: Timer, drv, rounds: int,
          inner: int, configs: Optional[List[object]] = None) -> str:
    """``w``'s schedule under each tiling of ``w.configs()`` (or ``configs``: ``--ab``'s
    two): checked, then timed round robin with the references; one line per tiling (ms,
    speed relative to the default, the first, and to each reference)."""
    launches: Dict[str, Callable[[], None]] = {}
    lines, failed = [], []
    for i, cfg in enumerate(configs if configs is not None else w.configs()):
        label = f"{'default ' if i == 0 else ''}{config_text(cfg)}"
        try:
            mod = w.build(config=cfg)
            _fill_nan(dev[-1])
            mod(*dev)
            drv.synchronize()
            err = max_rel_error(_np(dev[-1]), want)
            if not err < w.tolerance:
                failed.append(f"{label}: WRONG (error {err:.1e})")
                continue
            launches[label] = DirectLaunch(mod, dev, drv)
        except Exception as exc:  # noqa: BLE001 - a tiling that does not build or launch
            first = str(exc).splitlines()[0][:160] if str(exc) else ""
            failed.append(f"{label}: failed: {type(exc).__name__}: {first}")
    refs = {k: r.run for k, r in st.refs.items()}
    med = interleaved(timer, {**launches, **refs}, rounds, inner) if launches or refs else {}
    default = next(iter(launches), None)
    width = max([len(k) for k in launches] + [10])
    head = f"{'tiling'.ljust(width)}  {'ms':>7}  {'vs default':>10}" + "".join(
        f"  {'vs ' + k:>10}" for k in refs)
    lines += [f"sweep: {w.name} (" + ", ".join(f"{k} {med[k]:.3f} ms" for k in refs) + ")",
              head, "-" * len(head)]
    for label in sorted(launches, key=lambda k: med[k]):
        lines.append(f"{label.ljust(width)}  {med[label]:7.3f}  "
                     f"{ratio(med[default], med[label]):9.2f}x"
                     + "".join(f"  {ratio(med[k], med[label]):9.2f}x" for k in refs))
    return "\n".join(lines + failed)


def tune(w: Workload, st: Setup, dev, want, timer: Timer, drv, rounds: int, inner: int,
         trials: int, target: str = "cuda") -> str:
    """``tc.auto_schedule(args, target="cuda", trials=trials)`` on ``w``'s computes (every
    candidate measured in a child process of its own), then its best schedule timed
    round robin with the analytic one and the references: one line."""
    args = w.search()
    t0 = time.perf_counter()
    s = tc.auto_schedule(args, target=target, trials=trials, progress=True)
    seconds = time.perf_counter() - t0
    res = s.tune_result
    failed = sum(1 for t in res.trials if t.error)
    mod = tc.build(s, args, target=target, name="tuned")
    _fill_nan(dev[-1])
    mod(*dev)
    drv.synchronize()
    err = max_rel_error(_np(dev[-1]), want)
    if not err < TOLERANCE:
        return f"tune: {w.name}: the tuned schedule is WRONG (error {err:.1e})"
    fns = {"analytic": DirectLaunch(w.build(), dev, drv), "tuned": DirectLaunch(mod, dev, drv)}
    refs = {k: r.run for k, r in st.refs.items()}
    med = interleaved(timer, {**fns, **refs}, rounds, inner)
    best = min(h for h in res.history)
    at90 = next((i + 1 for i, h in enumerate(res.history) if h <= best / 0.9), len(res.history))
    knobs = ", ".join(f"{k.split('.', 1)[1]}={v}" for k, v in sorted(res.best.knobs.items()))
    return (f"tune: {w.name}: {trials} trials in {seconds:.0f} s ({failed} failed), 90% of "
            f"the best after {at90}; tuned {med['tuned']:.3f} ms, analytic "
            f"{med['analytic']:.3f} ms ({ratio(med['analytic'], med['tuned']):.2f}x)"
            + "".join(f", {k} {med[k]:.3f} ms ({ratio(med[k], med['tuned']):.2f}x)"
                      for k in refs) + f"\n  best knobs: {knobs}")


FAMILIES = ("all", "mma", "wgmma")

#: the odd GEMMs (dense: X[M, K] . W[N, K]^T, nn.Linear's layout) ``--only odd`` compares
#: the families on: the workloads' odd shapes, then skinny M at N = K = 4096 (the waste of
#: a 16- / 64-row tile from 15/16 down to 0), for the WMMA_MAX_WASTE crossover
ODD_SHAPES = ((4097, 4096, 4096, "float16"), (1000, 3072, 768, "float16"),
              (1000, 768, 3072, "float16"), (4096, 4096, 100, "float16"),
              (4095, 4095, 4095, "bfloat16"),
              *((m, 4096, 4096, "float16") for m in (1, 8, 16, 32, 64)))


def odd_variants(M: int, N: int, K: int, dtype: str, hopper: bool) -> Dict[str, tuple]:
    """The builds ``--only odd`` times for ``dense`` of ``M x N x K``: ``{name: (module,
    waste or None, config)}`` -- ``wmma`` and ``mma``: the tensor-core tiling
    ``wmma_config`` pads least, even past :data:`WMMA_MAX_WASTE` (the threshold is what
    this measures); ``wgmma`` / ``wgmma-tma`` (an sm_90 device): the wgmma tiling (the
    cp.async ring; TMA rings, swizzled 128B, where K's rows are 16-byte aligned);
    ``cuda-cores``: the CUDA-core GEMM (``gemm_config``), what ``schedule_dense`` falls
    back to past the threshold.  Built, not run (no GPU needed: tests build them)."""
    tcm = nn_cuda.tensorcore
    target = "cuda -arch=sm_90a" if hopper else "cuda"
    limit = nn_cuda.common.max_shared_bytes(target)

    def dense():
        X = tc.placeholder((M, K), dtype, name="X")
        W = tc.placeholder((N, K), dtype, name="W")
        return [X, W, ops.dense(X, W, out_dtype="float32")]

    def build(cfg):
        a = dense()
        return tc.build(nn_cuda.schedule_dense(a[-1], target, config=cfg), a, target=target,
                        name=f"odd{M}x{N}x{K}")

    old = tcm.WMMA_MAX_WASTE
    tcm.WMMA_MAX_WASTE = 1.0    # (the least-waste tiling, whatever its waste)
    try:
        tiling = tcm.wmma_config(M, N, K, max_shared=limit, dtype=dtype)
        wg = tcm.wgmma_config(M, N, K, max_shared=limit, dtype=dtype) if hopper else None
    finally:
        tcm.WMMA_MAX_WASTE = old
    out: Dict[str, tuple] = {}
    if tiling is not None:
        for fam in ("wmma", "mma"):
            cfg = replace(tiling, family=fam)
            out[fam] = (build(cfg), tcm.waste(cfg, M, N, K), cfg)
    if wg is not None:
        out["wgmma"] = (build(wg), tcm.waste(wg, M, N, K), wg)
        if K % 8 == 0:
            for name, producer in (("wgmma-tma", "tma"), ("wgmma-tma-warp", "tma_warp")):
                t = replace(wg, producer=producer)
                out[name] = (build(t), tcm.waste(t, M, N, K), t)
    g = nn_cuda.gemm_config(M, N, K)
    out["cuda-cores"] = (build(g), None, g)
    return out


def waste_decision(results: Sequence[tuple], now: float) -> List[str]:
    """The lines that set ``WMMA_MAX_WASTE`` from ``results``: ``(shape, waste, best
    tensor-core ms, CUDA-core ms)`` per shape (waste of the tensor-core tiling): the
    largest waste at which the tensor cores still win, the smallest at which they lose,
    and the threshold between them."""
    win = [(w, sh) for sh, w, t, c in results if w is not None and t is not None
           and c is not None and t <= c]
    lose = [(w, sh) for sh, w, t, c in results if w is not None and t is not None
            and c is not None and t > c]
    lines = [f"WMMA_MAX_WASTE (now {now}): the largest waste at which tensor cores (best of "
             f"wmma/mma) beat the CUDA-core GEMM: "
             + (f"{max(win)[0]:.3f} ({max(win)[1]})" if win else "none")
             + "; the smallest at which they lose: "
             + (f"{min(lose)[0]:.3f} ({min(lose)[1]})" if lose else "none")]
    if win and lose and max(win)[0] < min(lose)[0]:
        lines.append(f"  -> set WMMA_MAX_WASTE = {(max(win)[0] + min(lose)[0]) / 2:.2f} "
                     "(midway: tecomp/strategy/cuda/tensorcore.py)")
    elif win and not lose:
        lines.append(f"  -> tensor cores win at every waste measured: WMMA_MAX_WASTE >= "
                     f"{max(win)[0]:.3f} (keep {now} if that is above it)")
    elif lose and not win:
        lines.append("  -> the CUDA cores win at every waste measured: check the tensor-core "
                     "rows' errors and timings before lowering the threshold")
    elif win and lose:
        lines.append("  -> the crossover is not monotone in the waste: pick by the shapes "
                     "that matter (the rows above), not by one number")
    return lines


def wgmma_decision(ratios: Dict[str, List[float]]) -> List[str]:
    """The lines that decide ``WGMMA_BY_DEFAULT``: ``ratios[name]``: time of the best of
    wmma / mma over the time of wgmma variant ``name``, one per shape (above 1: wgmma
    faster); the geometric mean and the worst of each."""
    lines = []
    best_name, best_gm = None, 0.0
    for name, rs in ratios.items():
        rs = [r for r in rs if r and r > 0]
        if not rs:
            continue
        gm = math.exp(sum(math.log(r) for r in rs) / len(rs))
        lines.append(f"  {name}: {gm:.2f}x the best of wmma/mma (geometric mean over "
                     f"{len(rs)} shapes; worst {min(rs):.2f}x)")
        if gm > best_gm:
            best_name, best_gm = name, gm
    if best_name is None:
        return ["WGMMA_BY_DEFAULT: nothing measured (not an sm_90 device?)"]
    verdict = ("-> set WGMMA_BY_DEFAULT = True" + (
        f" and make {best_name}'s producer the WGMMA_CONFIGS default"
        if best_name != "wgmma" else "") if best_gm >= 1.05 else
        "-> keep WGMMA_BY_DEFAULT = False (wgmma not 5% faster)")
    return ([f"WGMMA_BY_DEFAULT (now {nn_cuda.tensorcore.WGMMA_BY_DEFAULT}; only after pytest "
             "-m gpu tests/test_hopper.py tests/test_wgmma_template.py "
             "tests/test_tma_pipeline.py pass):"] + lines
            + [f"  {verdict}"])


def odd_compare(drv, torch, timer, rounds: int, inner: int) -> str:
    """``--only odd``: the odd GEMMs of :data:`ODD_SHAPES` on every family
    (:func:`odd_variants`), interleaved with ``torch.matmul(X, W.T)`` (cuBLAS) in one
    process, each checked against float64 first; then the lines that set
    ``WMMA_MAX_WASTE`` (:func:`waste_decision`) and ``WGMMA_BY_DEFAULT``
    (:func:`wgmma_decision`) from them."""
    if torch is None:
        return "odd extents: needs PyTorch (the cuBLAS reference and bfloat16 arrays)"
    hopper = drv.arch in ("sm_90", "sm_90a")
    lines = [f"odd extents, dense X[M, K] . W[N, K]^T, float32 result, on {drv.name} "
             f"({drv.arch}); median ms, interleaved with torch.matmul (cuBLAS, a 16-bit "
             "result); waste: the fraction of the padded tiles' multiply-adds past the edge"]
    results, ratios = [], {"wgmma": [], "wgmma-tma": [], "wgmma-tma-warp": []}
    for M, N, K, dtype in ODD_SHAPES:
        shape = f"{M}x{N}x{K} {dtype}"
        tdt = getattr(torch, dtype)
        g = torch.Generator(device="cuda").manual_seed(M + N + K)
        x = torch.randn(M, K, device="cuda", generator=g).to(tdt)
        w = torch.randn(N, K, device="cuda", generator=g).to(tdt)
        want = (x.double() @ w.double().T).cpu().numpy()
        tout = torch.empty((M, N), device="cuda", dtype=tdt)
        wt = w.T
        fns = {"torch": lambda: torch.matmul(x, wt, out=tout)}
        cells, errors = {}, {}
        try:
            variants = odd_variants(M, N, K, dtype, hopper)
        except Exception as exc:  # noqa: BLE001 - a shape that does not build: say so
            lines.append(f"  {shape}: does not build: {type(exc).__name__}: {str(exc)[:200]}")
            continue
        for name, (mod, waste, cfg) in variants.items():
            y = torch.full((M, N), float("nan"), device="cuda")
            try:
                mod(x, w, y)
            except Exception as exc:  # noqa: BLE001
                cells[name] = f"{name} failed ({type(exc).__name__}: {str(exc)[:80]})"
                continue
            errors[name] = max_rel_error(y.cpu().numpy(), want)
            if not errors[name] < 2e-3:
                cells[name] = f"{name} WRONG (error {errors[name]:.1e})"
                continue
            fns[name] = DirectLaunch(mod, [x, w, y], drv)
            cells[name] = waste
        med = interleaved(timer, fns, rounds, inner)
        tcs = [med[k] for k in ("wmma", "mma") if k in med]
        best_tc = min(tcs) if tcs else None
        for k in ratios:
            if k in med and best_tc is not None:
                ratios[k].append(best_tc / med[k])
        wastes = {k: v for k, v in cells.items() if not isinstance(v, str) and v is not None}
        results.append((shape, wastes.get("wmma"), best_tc, med.get("cuda-cores")))
        lines.append(f"  {shape}: torch {med['torch']:.3f}; " + ", ".join(
            (f"{k} {med[k]:.3f} ({med['torch'] / med[k]:.2f}x torch"
             + (f", waste {cells[k]:.3f}" if isinstance(cells.get(k), float) else "") + ")")
            if k in med else str(cells.get(k)) for k in variants))
    lines += waste_decision(results, nn_cuda.tensorcore.WMMA_MAX_WASTE)
    lines += wgmma_decision(ratios)
    return "\n".join(lines)


def family_compare(drv, torch, family: str, timer, rounds: int, inner: int, n: int = 4096) -> str:
    """HGEMM and bf16 GEMM ``n^3`` (float32 accumulation and result) on the tensor-core
    families side by side, interleaved with ``torch.matmul`` (cuBLAS) in one process:
    ``wmma``, the template's default today (``schedule_matmul`` on ``cuda``: nvcuda::wmma);
    ``mma``, the template with ``WmmaConfig(..., family="mma")`` (ldmatrix + mma.sync, a
    cp.async ring); ``wgmma`` (sm_90 devices only), the template built for ``cuda
    -arch=sm_90a``, where it takes ``WmmaConfig(family="wgmma")`` (wgmma fed by a cp.async
    ring through all the block's threads), and ``wgmma-tile``, the warp-specialised tile of
    ``tecomp.testing.hopper_gemm`` (one producer warp issuing bulk copies that complete on
    mbarriers, one consumer warpgroup of ``wgmma.m64n128k16``, 4 stages, 128-byte
    swizzle; B read K-major, ``torch.matmul(A, B)``'s ``B`` passed transposed and both
    operands pre-tiled once on the host, outside the timing); ``wgmma-tma``, the same tile
    copying the operands as they are through TMA tensor maps (encoded once), and
    ``wgmma-tma-persistent``, that with one block per SM looping over the output tiles in
    grouped order; ``wgmma-te-tma`` / ``wgmma-te-tma-warp``, the template with
    ``WmmaConfig(8, 1, 1, 8, 64, family="wgmma", stages=4, producer="tma" / "tma_warp")``
    on ``dense(A, B^T)`` (its float16 / bfloat16 result); ``wgmma-te-tma-warp-nmajor``,
    the template on ``matmul(A, B)`` with B as it lies, N-major through the TMA producer
    warp (:func:`nmajor_build`).  Each result is checked against torch's
    float32-accumulated product first.  With ``all`` on an sm_90 device, the lines that
    decide ``WGMMA_BY_DEFAULT`` (:func:`wgmma_decision`) and
    ``WGMMA_MN_MAJOR_BY_DEFAULT`` (:func:`mn_major_decision`) follow."""
    from tecomp.strategy.cuda.tensorcore import WmmaConfig, schedule_wmma_gemm
    from tecomp.testing import hopper_gemm as hg

    if torch is None:
        return "--family: needs PyTorch (the cuBLAS reference)"
    hopper = drv.arch in ("sm_90", "sm_90a")
    lines = [f"tensor-core families, {n}^3, float32 accumulation and result, on {drv.name} "
             f"({drv.arch}); median ms (TFLOP/s), interleaved with torch.matmul"]
    ratios: Dict[str, List[float]] = {}
    mn_ratios: Dict[str, List[float]] = {}
    for dtype in ("float16", "bfloat16"):
        bf16 = dtype == "bfloat16"
        tdt = torch.float16 if not bf16 else torch.bfloat16
        rng = np.random.default_rng(0)
        a32 = rng.standard_normal((n, n), dtype=np.float32)
        b32 = rng.standard_normal((n, n), dtype=np.float32)
        ta, tb = torch.from_numpy(a32).to("cuda", tdt), torch.from_numpy(b32).to("cuda", tdt)
        want = torch.matmul(ta.float(), tb.float()).cpu().numpy()
        tout = torch.empty((n, n), device="cuda", dtype=tdt)
        fns = {"torch": lambda: torch.matmul(ta, tb, out=tout)}
        errors = {}
        if family in ("all", "mma"):   # the default today (wmma_config: the wmma family)
            A = tc.placeholder((n, n), dtype, name="A")
            B = tc.placeholder((n, n), dtype, name="B")
            C = ops.matmul(A, B, out_dtype="float32")
            mod = tc.build(nn_cuda.schedule_matmul(C, "cuda"), [A, B, C], target="cuda")
            cd = torch.empty((n, n), device="cuda", dtype=torch.float32)
            mod(ta, tb, cd)
            errors["wmma"] = max_rel_error(cd.cpu().numpy(), want)
            fns["wmma"] = DirectLaunch(mod, [ta, tb, cd], drv)
        if family in ("all", "mma"):
            A = tc.placeholder((n, n), dtype, name="A")
            B = tc.placeholder((n, n), dtype, name="B")
            C = ops.matmul(A, B, out_dtype="float32")
            s = tc.create_schedule(C.op)
            schedule_wmma_gemm(s, C, WmmaConfig(2, 2, 4, 4, 64, family="mma", stages=3))
            mod = tc.build(s, [A, B, C], target="cuda")
            cm = torch.empty((n, n), device="cuda", dtype=torch.float32)
            mod(ta, tb, cm)
            errors["mma"] = max_rel_error(cm.cpu().numpy(), want)
            fns["mma"] = DirectLaunch(mod, [ta, tb, cm], drv)
        if family in ("all", "wgmma") and hopper:
            A = tc.placeholder((n, n), dtype, name="A")
            B = tc.placeholder((n, n), dtype, name="B")
            C = ops.matmul(A, B, out_dtype="float32")
            sm90a = "cuda -arch=sm_90a"
            # (the cp.async-fed wgmma, asked for: the default now takes wgmma on matmul's
            # B[K, N] only through TMA, with WGMMA_MN_MAJOR_BY_DEFAULT)
            cfg = nn_cuda.tensorcore.wgmma_config(n, n, n, dtype=dtype)
            mod = tc.build(nn_cuda.schedule_matmul(C, sm90a, config=cfg), [A, B, C],
                           target=sm90a)
            cg = torch.empty((n, n), device="cuda", dtype=torch.float32)
            mod(ta, tb, cg)
            errors["wgmma"] = max_rel_error(cg.cpu().numpy(), want)
            fns["wgmma"] = DirectLaunch(mod, [ta, tb, cg], drv)
            tile = hg.GpuTile(drv, n, n, n, bn=128, stages=4, swizzle=1, bf16=bf16)
            pa = torch.from_numpy(hg.pretile(hg.to_bits(a32, bf16), hg.BM, 1)).cuda()
            pb = torch.from_numpy(hg.pretile(hg.to_bits(np.ascontiguousarray(b32.T), bf16),
                                             128, 1)).cuda()
            cw = torch.empty((n, n), device="cuda", dtype=torch.float32)
            ptrs = (pa.data_ptr(), pb.data_ptr(), 0, cw.data_ptr())
            tile.launch(*ptrs)
            drv.synchronize()
            errors["wgmma-tile"] = max_rel_error(cw.cpu().numpy(), want)
            fns["wgmma-tile"] = lambda: tile.launch(*ptrs)
            # the same tile with TMA: the operands as they are (A, and B transposed once
            # to be K-major), through tensor maps; then persistent blocks, one per SM
            ua = torch.from_numpy(hg.to_bits(a32, bf16)).cuda()
            ub = torch.from_numpy(hg.to_bits(np.ascontiguousarray(b32.T), bf16)).cuda()
            for name, persistent in (("wgmma-tma", False), ("wgmma-tma-persistent", True)):
                tt = hg.GpuTile(drv, n, n, n, bn=128, stages=4, swizzle=1, bf16=bf16,
                                tma_maps=True, persistent=persistent)
                ct = torch.empty((n, n), device="cuda", dtype=torch.float32)
                args = (ua.data_ptr(), ub.data_ptr(), 0, ct.data_ptr())
                tt.launch(*args)
                drv.synchronize()
                errors[name] = max_rel_error(ct.cpu().numpy(), want)
                fns[name] = (lambda t, a: lambda: t.launch(*a))(tt, args)
            # the template's tiles by TMA rings (tecomp.lower.tma_pipeline): dense's K-major
            # W = B^T, the copies issued by one thread or by a producer warp
            tw = tb.T.contiguous()
            for name, producer in (("wgmma-te-tma", "tma"), ("wgmma-te-tma-warp", "tma_warp")):
                X = tc.placeholder((n, n), dtype, name="X")
                Wt = tc.placeholder((n, n), dtype, name="W")
                Y = tc.nn.dense(X, Wt)
                cfg = WmmaConfig(8, 1, 1, 8, 64, family="wgmma", stages=4, producer=producer)
                mod = tc.build(nn_cuda.schedule_dense(Y, sm90a, config=cfg), [X, Wt, Y],
                               target=sm90a)
                cy = torch.empty((n, n), device="cuda", dtype=tdt)
                mod(ta, tw, cy)
                errors[name] = max_rel_error(cy.float().cpu().numpy(), want)
                fns[name] = DirectLaunch(mod, [ta, tw, cy], drv)
            # the template on matmul(A, B) as it lies: B[K, N] N-major through the TMA
            # producer warp (wgmma's imm-trans-b, no transposed copy): decides
            # WGMMA_MN_MAJOR_BY_DEFAULT (mn_major_decision); new on a GPU: a failure or a
            # wrong result is reported and the other variants are timed all the same
            try:
                mod = nmajor_build(n, dtype, sm90a)
                cz = torch.empty((n, n), device="cuda", dtype=torch.float32)
                mod(ta, tb, cz)
                err = max_rel_error(cz.cpu().numpy(), want)
                if err < 2e-3:
                    errors[NMAJOR] = err
                    fns[NMAJOR] = DirectLaunch(mod, [ta, tb, cz], drv)
                else:
                    lines.append(f"  {dtype}: {NMAJOR} wrong (max relative error {err:.1e}); "
                                 "not timed")
            except Exception as e:   # noqa: BLE001 - reported, the comparison goes on
                lines.append(f"  {dtype}: {NMAJOR} failed: {type(e).__name__}: "
                             f"{str(e)[:300]}")
        elif family == "wgmma":
            lines.append(f"  {dtype}: wgmma needs an sm_90 device; this is {drv.arch}")
        # the template's variants round their result to the operands' dtype, as torch's
        # does: bfloat16's 8-bit mantissa is off by up to 2**-8 of the largest value
        tol = lambda k: 8e-3 if "-te-" in k and dtype == "bfloat16" else 2e-3  # noqa: E731
        bad = {k: e for k, e in errors.items() if not e < tol(k)}
        if bad:
            lines.append(f"  {dtype}: wrong results {bad}; nothing timed")
            continue
        med = interleaved(timer, fns, rounds, inner)
        tcs = [med[k] for k in ("wmma", "mma") if k in med]
        for k in ("wgmma", "wgmma-te-tma", "wgmma-te-tma-warp"):
            if k in med and tcs:
                ratios.setdefault(k, []).append(min(tcs) / med[k])
        if NMAJOR in med:
            for k, ref in (("wmma/mma", min(tcs) if tcs else None),
                           ("wgmma-te-tma-warp", med.get("wgmma-te-tma-warp")),
                           ("torch", med["torch"])):
                if ref:
                    mn_ratios.setdefault(k, []).append(ref / med[NMAJOR])
        tflops = lambda ms: 2.0 * n ** 3 / (ms * 1e-3) / 1e12  # noqa: E731
        lines.append(f"  {dtype}: " + ", ".join(
            f"{k} {ms:.3f} ms ({tflops(ms):.0f})" + (f" = {med['torch'] / ms:.2f}x torch"
                                                     if k != "torch" else "")
            for k, ms in med.items()) + "; errors " + ", ".join(
            f"{k} {e:.1e}" for k, e in errors.items()))
    if family == "all" and hopper:
        lines += wgmma_decision(ratios)
        lines.append("  (decide with --only odd's lines too: the odd shapes' boundary tiles)")
        lines += mn_major_decision(mn_ratios)
    return "\n".join(lines)


#: the name of the N-major TMA variant in ``--family all`` (:func:`nmajor_build`)
NMAJOR = "wgmma-te-tma-warp-nmajor"


def nmajor_build(n: int, dtype: str, target: str = "cuda -arch=sm_90a"):
    """``matmul(A[n, n], B[n, n])`` (float32 result) on the template's wgmma fed by a TMA
    producer warp with ``B[K, N]`` as it lies: the ring's B tiles N-major in chunks of 64
    n (wgmma's imm-trans-b), ``WmmaConfig(8, 1, 1, 8, 64, family="wgmma", stages=4,
    producer="tma_warp")``, what ``WGMMA_MN_MAJOR_BY_DEFAULT`` would make the default."""
    from tecomp.strategy.cuda.tensorcore import WmmaConfig
    A = tc.placeholder((n, n), dtype, name="A")
    B = tc.placeholder((n, n), dtype, name="B")
    C = ops.matmul(A, B, out_dtype="float32")
    cfg = WmmaConfig(8, 1, 1, 8, 64, family="wgmma", stages=4, producer="tma_warp")
    return tc.build(nn_cuda.schedule_matmul(C, target, config=cfg), [A, B, C], target=target)


def mn_major_decision(ratios: Dict[str, List[float]]) -> List[str]:
    """The lines that decide ``WGMMA_MN_MAJOR_BY_DEFAULT`` (tensorcore.py): ``ratios[ref]``
    the time of ``ref`` over :data:`NMAJOR`'s, one per dtype (above 1: the N-major ring
    faster): ``"wmma/mma"`` (what matmul runs on today), ``"wgmma-te-tma-warp"`` (the same
    ring on B transposed beforehand: what N-major costs), ``"torch"`` (cuBLAS)."""
    def gm(rs):
        rs = [r for r in rs if r and r > 0]
        return math.exp(sum(math.log(r) for r in rs) / len(rs)) if rs else None
    base = gm(ratios.get("wmma/mma", []))
    if base is None:
        return ["WGMMA_MN_MAJOR_BY_DEFAULT: nothing measured (not an sm_90 device?)"]
    lines = [f"WGMMA_MN_MAJOR_BY_DEFAULT (now "
             f"{nn_cuda.tensorcore.WGMMA_MN_MAJOR_BY_DEFAULT}; only after pytest -m gpu "
             "tests/test_hopper.py tests/test_wgmma_template.py pass):"]
    for k, what in (("wmma/mma", "the best of wmma/mma (matmul's default today)"),
                    ("wgmma-te-tma-warp", "the K-major ring on B^T (dense)"),
                    ("torch", "torch.matmul")):
        g = gm(ratios.get(k, []))
        if g is not None:
            lines.append(f"  {NMAJOR}: {g:.2f}x {what} (geometric mean over "
                         f"{len(ratios[k])} dtypes; worst {min(ratios[k]):.2f}x)")
    lines.append("  -> set WGMMA_MN_MAJOR_BY_DEFAULT = True" if base >= 1.05 else
                 f"  -> {'set' if nn_cuda.tensorcore.WGMMA_MN_MAJOR_BY_DEFAULT else 'keep'} "
                 "WGMMA_MN_MAJOR_BY_DEFAULT = False (not 5% faster than wmma/mma)")
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="fewer repetitions")
    p.add_argument("--only", default="", help="run the workloads whose name contains this")
    p.add_argument("--sweep", action="store_true",
                   help="also time each schedule under several tilings (the default first)")
    p.add_argument("--ab", action="store_true",
                   help="also time the two forms of the schedules that have two, side by side "
                        "(the flash forward: its key and value tiles copied where they are "
                        "read first, a ring of two cp.async tiles second; the flash backward: "
                        "dq 'atomic', FlashAttention-2's five GEMMs, first, the default; dq "
                        "'recompute', seven GEMMs, second)")
    p.add_argument("--tune", type=int, default=0, metavar="N",
                   help="also run tc.auto_schedule(target='cuda', trials=N) on the workloads "
                        "written in plain TE and time its best against the analytic schedule")
    p.add_argument("--family", choices=FAMILIES, default=None,
                   help="also compare the tensor-core families on HGEMM / bf16 GEMM 4096^3: "
                        "mma.sync (the template), wgmma (the sm_90 warp-specialised tile), "
                        "or all, against torch.matmul")
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
