"""The host time of one call of a CUDA module (``tecomp.runtime.cuda.CudaModule``), and, on
a GPU, against a torch custom op (GPU issue 55: a tecomp.torch op's per-call overhead at
most 2x a torch custom op's).

``--fake-driver`` (no GPU needed): the module's driver is tecomp's own ctypes driver
(:class:`tecomp.runtime.cuda_driver.DriverApi`) over a no-op ``libcuda`` compiled here
from C (every driver function returns at once: ``cuLaunchKernel`` records nothing, the
"device pointers" of ``cuMemAlloc`` are malloc's), so what is timed is tecomp's Python:
the argument checks, launch sizes, parameter packing, context and workspace handling,
plus the ctypes calls themselves.  The arrays are stand-ins with a
``__cuda_array_interface__`` computed as torch's CUDA tensors compute theirs (a Python
property per read).  The device is an sm_90 one (an H100/H200's limits).  Modules: a
1-kernel f16 dense GEMM ``[n, 768] x [3072, 768]`` (``n`` symbolic: CUDA cores), the same
at n = 512 on Hopper's wgmma with X and W brought by TMA (``cuda -arch=sm_90a``: two
CUtensorMap parameters, encoded from the addresses), a chain of 4 kernels through 3
workspaces, and ``B = A + 1`` on 4 floats.  Printed: microseconds of the thread's CPU
time per call (median of interleaved rounds; nothing waits, and so a loaded machine's
descheduled time is left out) and the driver calls each call made (``encodes``: tensor maps).  A
``tecomp.torch`` op takes torch CUDA tensors only, so its calls are timed on a GPU.

Without ``--fake-driver`` (a GPU, pycuda and torch with CUDA): checked calls of the
CUDA-core dense GEMM on torch CUDA tensors (default stream, waiting for the kernel; and
torch's current stream, ``stream=``, no wait: on a GPU these time its kernel, some
hundreds of microseconds, not the host), the same two of the wgmma + TMA dense on an sm_90
GPU, and, on a 4-element CUDA tensor, a checked call of ``B = A + 1``, a
``tecomp.torch.op`` call, against a ``torch.library.custom_op`` wrapping ``torch.add(x,
1)`` and ``torch.add`` itself, each loop ended by one synchronize.

    python3 benchmarks/call_overhead.py --fake-driver [--rounds 15] [--calls 2000]
    python3 benchmarks/call_overhead.py --fake-driver --baseline /path/to/older/checkout
    python3 benchmarks/call_overhead.py [--rounds 15] [--calls 2000]     # on a GPU
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from common import base_parser  # noqa: E402

#: a libcuda whose functions do nothing (the device: compute capability 9.0, limits of an
#: H100/H200); cuTensorMapEncodeTiled writes 128 zero bytes and counts
NOOP_LIBCUDA_C = r"""
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
typedef int CUresult;
long tc_launches = 0, tc_allocs = 0, tc_frees = 0, tc_pushes = 0, tc_syncs = 0, tc_current = 0,
     tc_encodes = 0;
static void *ctx_stack[64]; static int depth = 0;
CUresult cuInit(unsigned f) { return 0; }
CUresult cuDeviceGetCount(int *n) { *n = 1; return 0; }
CUresult cuDeviceGet(int *d, int o) { *d = o; return 0; }
CUresult cuDeviceGetName(char *b, int n, int d) { strncpy(b, "no-op GPU", n); return 0; }
CUresult cuDeviceGetAttribute(int *v, int a, int d) {
  switch (a) { case 1: *v = 1024; break; case 2: case 3: *v = 1024; break; case 4: *v = 64; break;
    case 5: *v = 2147483647; break; case 6: case 7: *v = 65535; break; case 8: *v = 49152; break;
    case 16: *v = 132; break; case 75: *v = 9; break; case 76: *v = 0; break;
    case 97: *v = 232448; break; default: *v = 0; }
  return 0; }
CUresult cuDevicePrimaryCtxRetain(void **c, int d) { *c = (void *)0x1000; return 0; }
CUresult cuCtxPushCurrent_v2(void *c) { tc_pushes++; ctx_stack[depth++ & 63] = c; return 0; }
CUresult cuCtxPopCurrent_v2(void **c) {
  depth--; if (c) *c = ctx_stack[depth & 63]; return 0; }
CUresult cuCtxGetCurrent(void **c) {
  tc_current++; *c = depth ? ctx_stack[(depth - 1) & 63] : 0; return 0; }
CUresult cuGetErrorName(int s, const char **t) { *t = "CUDA_ERROR_NOOP"; return 0; }
CUresult cuModuleLoadData(void **m, const void *img) { *m = (void *)0x2000; return 0; }
CUresult cuModuleGetFunction(void **f, void *m, const char *name) {
  *f = strdup(name); return 0; }
CUresult cuFuncSetAttribute(void *f, int a, int v) { return 0; }
CUresult cuFuncGetAttribute(int *v, int a, void *f) { *v = a == 0 ? 1024 : 32; return 0; }
CUresult cuPointerGetAttribute(void *v, int a, uint64_t p) { *(int *)v = 0; return 0; }
CUresult cuMemAlloc_v2(uint64_t *p, size_t n) {
  tc_allocs++; *p = (uint64_t)aligned_alloc(256, (n + 255) / 256 * 256); return 0; }
CUresult cuMemFree_v2(uint64_t p) { tc_frees++; free((void *)p); return 0; }
CUresult cuMemcpyHtoD_v2(uint64_t d, const void *h, size_t n) { return 0; }
CUresult cuMemcpyDtoH_v2(void *h, uint64_t d, size_t n) { return 0; }
CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                        unsigned by, unsigned bz, unsigned sh, void *st, void **params,
                        void **extra) {
  tc_launches++; return 0; }
CUresult cuCtxSynchronize(void) { tc_syncs++; return 0; }
CUresult cuStreamSynchronize(void *s) { tc_syncs++; return 0; }
CUresult cuTensorMapEncodeTiled(void *map, int dtype, unsigned rank, void *address,
                                const uint64_t *dims, const uint64_t *strides,
                                const unsigned *box, const unsigned *estrides, int interleave,
                                int swizzle, int l2, int oob) {
  tc_encodes++; memset(map, 0, 128); return 0; }
"""


def noop_libcuda():
    """The no-op driver library, compiled with the C compiler (``cc``) into a temporary
    directory and loaded."""
    d = tempfile.mkdtemp(prefix="tecomp-noop-cuda-")
    src, lib = os.path.join(d, "noop_cuda.c"), os.path.join(d, "libnoopcuda.so")
    with open(src, "w") as f:
        f.write(NOOP_LIBCUDA_C)
    subprocess.run([os.environ.get("CC", "cc"), "-O2", "-shared", "-fPIC", src, "-o", lib],
                   check=True)
    cu = ctypes.CDLL(lib)
    cu.cuLaunchKernel.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [
        ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    return cu


def counters(cu):
    return {k: ctypes.c_long.in_dll(cu, "tc_" + k).value
            for k in ("launches", "allocs", "frees", "pushes", "syncs", "current", "encodes")}


def noop_driver(cu):
    """A DriverApi over ``cu`` that also does what a built module asks of pycuda's
    driver (compile: nothing to compile; get_function through cuModuleGetFunction)."""
    from tecomp.runtime.cuda_driver import DriverApi

    class NoopDriver(DriverApi):
        def compile(self, cs, arch=None):
            return ctypes.c_void_p(0x2000)

    return NoopDriver(cu)


class TorchLikeCudaTensor:
    """A torch CPU tensor presented as a CUDA tensor: ``__cuda_array_interface__`` does the
    work torch's property does for a CUDA tensor (a dict built per read)."""

    _TYPESTR = {}

    def __init__(self, t):
        self.t = t
        self.dtype = t.dtype

    @property
    def __cuda_array_interface__(self):
        t = self.t
        if t.requires_grad:
            raise RuntimeError("requires grad")
        typestr = _typestr(t.dtype)
        itemsize = t.element_size()
        shape = tuple(t.shape)
        strides = None if t.is_contiguous() else tuple(s * itemsize for s in t.stride())
        data_ptr = t.data_ptr() if t.numel() > 0 else 0
        return dict(typestr=typestr, shape=shape, strides=strides, data=(data_ptr, False),
                    version=2)


def _typestr(dtype):
    import torch
    return {torch.float16: "<f2", torch.float32: "<f4", torch.float64: "<f8",
            torch.int32: "<i4", torch.int64: "<i8"}[dtype]


def dense_module(target: str):
    """``Y = X W^T``, X ``[n, 768]``, W ``[3072, 768]`` in float16, auto-scheduled (``n``
    symbolic: no tensor-core template takes it, the kernel runs on CUDA cores: on a GPU
    its calls time the kernel, not the host)."""
    import tecomp as tc
    import tecomp.nn as nn

    X = tc.placeholder((tc.var("n"), 768), name="X", dtype="float16")
    W = tc.placeholder((3072, 768), name="W", dtype="float16")
    Y = nn.dense(X, W)
    return tc.build(tc.auto_schedule([X, W, Y], target=target, progress=False), [X, W, Y],
                    target=target, name="dense")


def tma_dense_module(target: str = "cuda -arch=sm_90a", m: int = 512):
    """``Y = X W^T``, X ``[m, 768]``, W ``[3072, 768]`` in float16 on Hopper's wgmma, the
    tiles of X and W brought by TMA (two CUtensorMap parameters: the maps are encoded
    from each call's addresses)."""
    import tecomp as tc
    import tecomp.nn as nn
    from tecomp.strategy import cuda as sc

    X = tc.placeholder((m, 768), name="X", dtype="float16")
    W = tc.placeholder((3072, 768), name="W", dtype="float16")
    Y = nn.dense(X, W)
    cfg = sc.WmmaConfig(8, 1, 1, 8, 64, family="wgmma", stages=4, producer="tma_warp")
    mod = tc.build(sc.schedule_dense(Y, target, config=cfg), [X, W, Y], target=target,
                   name="dense_tma")
    if not any(p.dtype == "tensor_map" for k in mod.kernels for p in k.params):
        raise SystemExit("the wgmma dense took no tensor maps: the benchmark's case is gone")
    return mod


def plus_one_module(target: str):
    """``B = A + 1`` on 4 floats (the custom op's work)."""
    import tecomp as tc

    A = tc.placeholder((4,), name="A")
    B = tc.compute((4,), lambda i: A[i] + 1.0, name="B")
    return tc.build(tc.auto_schedule([A, B], target=target, progress=False), [A, B],
                    target=target, name="plus1")


def build_modules():
    import tecomp as tc

    target = "cuda -arch=sm_80"
    gemm = dense_module(target)
    n = tc.var("n")
    A = tc.placeholder((n, 768), name="A")
    t, stages = A, []
    for i in range(4):
        t = (lambda p, i=i: tc.compute((n, 768), lambda a, b: p[a, b] * 2.0 + 1.0,
                                       name=f"T{i}"))(t)
        stages.append(t)
    s = tc.create_schedule(t.op)
    for st in stages:
        bx, tx = s[st].split(s[st].fuse(*st.op.axis), factor=256)
        s[st].bind(bx, tc.thread_axis("blockIdx.x"))
        s[st].bind(tx, tc.thread_axis("threadIdx.x"))
    chain = tc.build(s, [A, t], target=target, name="chain")
    return gemm, chain, tma_dense_module(), plus_one_module(target)


def fake_driver_run(args) -> int:
    import torch

    import tecomp   # (first: the one on PYTHONPATH, before run.py puts this checkout's)
    from run import uptime
    from workloads import machine

    if not args.json:
        print(f"# {machine()}; torch {torch.__version__}; {uptime()}")
        print("# host time of one CudaModule call, no-op libcuda (tecomp's DriverApi over a C "
              "library whose functions return at once; the context current, as PyTorch "
              "leaves it); the thread's CPU time, medians of interleaved rounds")
    cu = noop_libcuda()
    drv = noop_driver(cu)
    # the device's primary context current on this thread, as PyTorch leaves it
    cu.cuCtxPushCurrent_v2(drv.context)
    gemm, chain, tma, plus1 = build_modules()
    for mod in (gemm, chain, tma, plus1):
        mod._driver = drv
    x = torch.zeros(512, 768, dtype=torch.float16)
    w = torch.zeros(3072, 768, dtype=torch.float16)
    y = torch.zeros(512, 3072, dtype=torch.float16)
    a = torch.zeros(512, 768)
    b = torch.zeros(512, 768)
    gemm_args = [TorchLikeCudaTensor(v) for v in (x, w, y)]
    chain_args = [TorchLikeCudaTensor(v) for v in (a, b)]
    p1_args = [TorchLikeCudaTensor(torch.zeros(4)) for _ in range(2)]
    cases = {
        "dense f16 (1 kernel), default stream": lambda: gemm(*gemm_args),
        "dense f16 (1 kernel), stream=7": lambda: gemm(*gemm_args, stream=7),
        "dense f16 wgmma, 2 TMA maps (sm_90a), default stream": lambda: tma(*gemm_args),
        "dense f16 wgmma, 2 TMA maps (sm_90a), stream=7": lambda: tma(*gemm_args, stream=7),
        "chain (4 kernels, 3 workspaces), default stream": lambda: chain(*chain_args),
        "chain (4 kernels, 3 workspaces), stream=7": lambda: chain(*chain_args, stream=7),
        "plus1 [4], stream=7": lambda: plus1(*p1_args, stream=7),
    }
    per_call = {}
    for name, f in cases.items():
        f()
        before = counters(cu)
        f()
        after = counters(cu)
        per_call[name] = {k: after[k] - before[k] for k in after if after[k] != before[k]}
    times = {name: [] for name in cases}
    # (the thread's CPU time: nothing here waits, and on a loaded machine the time the
    # thread spends descheduled is not the call's)
    clock = time.thread_time
    for _ in range(args.rounds):
        for name, f in cases.items():
            t0 = clock()
            for _ in range(args.calls):
                f()
            times[name].append((clock() - t0) / args.calls * 1e6)
    if args.json:
        print(json.dumps({"tecomp": tecomp.__file__, "times": times}))
        return 0
    for name in cases:
        calls = ", ".join(f"{k} {v}" for k, v in sorted(per_call[name].items()))
        print(f"{name:54s} {statistics.median(times[name]):7.1f} us/call  (min "
              f"{min(times[name]):.1f}; driver calls per call: {calls})")
    if args.profile:
        profile({name: cases[name] for name in cases if name.endswith("stream=7")}, args.calls)
    return 0


def compare(args) -> int:
    """Rounds of this checkout and of ``--baseline`` (another checkout of tecomp)
    alternating, each round a fresh process per checkout; medians per case."""
    from run import uptime
    from workloads import machine

    print(f"# {machine()}; {uptime()}")
    print(f"# host time of one CudaModule call, no-op libcuda; {args.rounds} rounds of "
          f"{args.calls} calls alternating between {args.baseline} (before) and this "
          f"checkout (after), a process each; medians")
    here = os.path.dirname(HERE)
    got = {"before": {}, "after": {}}
    for _ in range(args.rounds):
        for label, root in (("before", args.baseline), ("after", here)):
            env = dict(os.environ, PYTHONPATH=root)
            out = subprocess.run([sys.executable, os.path.abspath(__file__), "--fake-driver",
                                  "--rounds", "1", "--calls", str(args.calls), "--json"],
                                 env=env, capture_output=True, text=True, check=True).stdout
            got_json = json.loads(out.strip().splitlines()[-1])
            if not os.path.realpath(got_json["tecomp"]).startswith(os.path.realpath(root)):
                raise SystemExit(f"the run for {root} imported {got_json['tecomp']}")
            for name, ts in got_json["times"].items():
                got[label].setdefault(name, []).extend(ts)
    for name in got["after"]:
        b = statistics.median(got["before"][name])
        a = statistics.median(got["after"][name])
        print(f"{name:54s} before {b:7.1f} us/call, after {a:7.1f} us/call ({b / a:.2f}x)")
    return 0


def gpu_run(args) -> int:
    import torch

    import tecomp as tc
    import tecomp.torch as tct
    from run import uptime
    from workloads import machine

    if not torch.cuda.is_available():
        print("no CUDA GPU (torch.cuda.is_available() is False): run with --fake-driver for "
              "the host time without one")
        return 2
    print(f"# {machine()}; {torch.cuda.get_device_name()}; torch {torch.__version__}; "
          f"{uptime()}")
    target = "cuda"
    gemm = dense_module(target)
    # the wgmma dense with TMA maps where the GPU has them (sm_90)
    tma = tma_dense_module() if torch.cuda.get_device_capability() == (9, 0) else None
    plus1 = plus_one_module(target)
    A = tc.placeholder((4,), name="A")
    B = tc.compute((4,), lambda i: A[i] + 1.0, name="B")
    op = tct.op([A], [B], target="cuda", name="plus_one_cuda")

    def torch_plus_one(x):
        return torch.add(x, 1.0)

    # this module's annotations are strings (from __future__), which torch's schema
    # inference cannot resolve for a local import: give it the types themselves
    torch_plus_one.__annotations__ = {"x": torch.Tensor, "return": torch.Tensor}
    torch_plus_one = torch.library.custom_op("tecomp_bench::plus_one",
                                             mutates_args=())(torch_plus_one)

    dev = "cuda"
    x = torch.randn(512, 768, dtype=torch.float16, device=dev)
    w = torch.randn(3072, 768, dtype=torch.float16, device=dev)
    y = torch.empty(512, 3072, dtype=torch.float16, device=dev)
    a = torch.randn(4, device=dev)
    bo = torch.empty(4, device=dev)
    stream = torch.cuda.current_stream()
    cases = {
        "dense f16 [n]x768x3072, CUDA cores: checked call (waits)": lambda: gemm(x, w, y),
        "dense f16 [n]x768x3072, CUDA cores: stream=current": lambda: gemm(x, w, y,
                                                                            stream=stream),
        "plus1 [4]: checked call, stream=current": lambda: plus1(a, bo, stream=stream),
        "plus1 [4]: tecomp.torch op (eager)": lambda: op(a),
        "plus1 [4]: torch.library.custom_op": lambda: torch_plus_one(a),
        "plus1 [4]: torch.add (no custom op)": lambda: torch.add(a, 1.0),
    }
    if tma is not None:
        cases["dense f16 512x768x3072, wgmma + TMA: checked call (waits)"] = \
            lambda: tma(x, w, y)
        cases["dense f16 512x768x3072, wgmma + TMA: stream=current"] = \
            lambda: tma(x, w, y, stream=stream)
    for f in cases.values():
        f()
    torch.cuda.synchronize()
    times = {name: [] for name in cases}
    for _ in range(args.rounds):
        for name, f in cases.items():
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(args.calls):
                f()
            torch.cuda.synchronize()
            times[name].append((time.perf_counter() - t0) / args.calls * 1e6)
    ref = statistics.median(times["plus1 [4]: torch.library.custom_op"])
    for name in cases:
        med = statistics.median(times[name])
        print(f"{name:58s} {med:8.1f} us/call  {med / ref:5.2f}x the custom op's")
    if args.profile:
        profile({name: cases[name] for name in cases if "tecomp.torch" in name or
                 "plus1 [4]: checked" in name or "TMA: stream" in name}, args.calls)
    return 0


def profile(cases, calls: int) -> None:
    """cProfile of ``calls`` calls of each case (the thread's CPU time), the functions
    that took the most of it."""
    import cProfile
    import pstats

    for name, f in cases.items():
        print(f"\n# cProfile: {calls} calls of {name}")
        pr = cProfile.Profile(time.thread_time)
        pr.enable()
        for _ in range(calls):
            f()
        pr.disable()
        pstats.Stats(pr).sort_stats("tottime").print_stats(20)


def main() -> int:
    ap = base_parser(__doc__, 15)
    ap.add_argument("--fake-driver", action="store_true",
                    help="no GPU: a no-op libcuda compiled here stands for the driver")
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--profile", action="store_true",
                    help="also cProfile the calls on a stream (on a GPU: the plus1 checked "
                         "call, the op's and the TMA dense's)")
    ap.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--baseline", metavar="DIR",
                    help="with --fake-driver: compare with the tecomp checkout in DIR, rounds "
                         "alternating")
    args = ap.parse_args()
    if args.fake_driver and args.baseline:
        return compare(args)
    return fake_driver_run(args) if args.fake_driver else gpu_run(args)


if __name__ == "__main__":
    sys.exit(main())
