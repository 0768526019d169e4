"""The benchmark workloads and how each tool runs them (see run.py)."""
from __future__ import annotations

import os
import statistics
import time
from typing import Callable

import numpy as np

import tecomp as tc
from tecomp.nn import ops
from tecomp.strategy import cpu as sc

UNIT_NOTE = "GFLOP/s (higher is better; conv counts 2*N*K*C*H*W*9) or ms (softmax, lower " \
    "is better)"


class Skip(Exception):
    """The tool is not installed or does not run this workload."""


def machine() -> str:
    name = sc.cpu_name()
    info = sc.cpu_model()
    isa = {16: "AVX-512", 8: "AVX2", 4: "SSE"}.get(info.lanes, "?")
    return (f"{name}, {os.cpu_count()} cores, {isa} "
            f"({info.lanes} float32 lanes, {info.vregs} vector registers), "
            f"L1d {info.l1_bytes // 1024} KiB, L2 {info.l2_bytes // 1024} KiB")


# ---------------------------------------------------------------------------------
# optional tools


def _try_import(name):
    try:
        return __import__(name)
    except Exception:  # noqa: BLE001 - any import failure means "not installed"
        return None


def available_tools(only=None):
    tools = ["tecomp", "numpy"]
    if _try_import("torch") is not None:
        tools.append("torch")
    if _try_import("tvm") is not None:
        tools.append("tvm")
    if _try_import("halide") is not None:
        tools.append("halide")
    if only:
        tools = [t for t in tools if t in only]
    return tools


# ---------------------------------------------------------------------------------
# runners: .run() computes into .out


class Runner:
    def __init__(self, run: Callable[[], None], out: Callable[[], np.ndarray]):
        self.run = run
        self.output = out


def _torch(threads):
    torch = _try_import("torch")
    if torch is None:
        raise Skip("not installed")
    torch.set_num_threads(threads)
    return torch


# ---------------------------------------------------------------------------------
# workloads


class Workload:
    kind = ""
    name = ""

    def gflops(self, seconds):
        return self.flops / seconds / 1e9

    def metric(self, seconds):
        return f"{self.gflops(seconds):.1f}"

    def rounds(self, quick):
        return 7 if quick else 25

    def check(self, fn: Runner, ref) -> float:
        fn.run()
        got = np.asarray(fn.output(), dtype="float64")
        if got.shape != ref.shape:
            raise AssertionError(f"shape {got.shape}, expected {ref.shape}")
        err = float(np.abs(got - ref).max() / max(1e-30, np.abs(ref).max()))
        if not err < self.tol:
            raise AssertionError(f"max relative error {err:.2e} > {self.tol:.0e}")
        return err

    tol = 1e-4


class Gemm(Workload):
    kind = "gemm"

    def __init__(self, n):
        self.n = n
        self.name = f"gemm {n}^3"
        self.flops = 2.0 * n ** 3
        rng = np.random.default_rng(n)
        # every tool reads the same 64-byte aligned arrays (numpy's large ones start 16
        # bytes past a cache line; TVM copies into its own aligned tensors): see
        # benchmarks/DECISIONS.md, "Benchmarks: aligned arrays"
        self.a = tc.aligned(rng.standard_normal((n, n)).astype("float32"))
        self.b = tc.aligned(rng.standard_normal((n, n)).astype("float32"))

    def rounds(self, quick):
        return {512: 20, 1024: 8, 2048: 3}[self.n] // (3 if quick else 1) + 2

    def reference(self):
        return self.a.astype("float64") @ self.b.astype("float64")

    def make(self, tool, threads):
        a, b, n = self.a, self.b, self.n
        c = tc.empty((n, n), "float32")
        if tool == "tecomp":
            A = tc.placeholder((n, n), name="A")
            B = tc.placeholder((n, n), name="B")
            C = sc.matmul_packed(A, B)
            f = tc.build(sc.schedule_matmul(C), [A, B, C], name="gemm")
            return Runner(lambda: f(a, b, c), lambda: c)
        if tool == "numpy":
            return Runner(lambda: np.matmul(a, b, out=c), lambda: c)
        if tool == "torch":
            torch = _torch(threads)
            ta, tb, tcc = torch.from_numpy(a), torch.from_numpy(b), torch.from_numpy(c)
            return Runner(lambda: torch.matmul(ta, tb, out=tcc), lambda: c)
        import others

        return others.make(tool, "gemm", self, threads)


class Conv(Workload):
    kind = "conv"

    def __init__(self, C, HW, layout):
        self.C, self.HW, self.layout = C, HW, layout
        self.name = f"conv {C}x{HW}x{HW} {layout}"
        self.flops = 2.0 * C * C * HW * HW * 9
        rng = np.random.default_rng(C + HW)
        d = rng.standard_normal((1, C, HW, HW)).astype("float32")
        w = (rng.standard_normal((C, C, 3, 3)) / (3 * C ** 0.5)).astype("float32")
        self.d_nchw, self.w_oihw = tc.aligned(d), tc.aligned(w)      # (see Gemm)
        self.d_nhwc = tc.aligned(d.transpose(0, 2, 3, 1))
        self.w_hwio = tc.aligned(w.transpose(2, 3, 1, 0))

    def rounds(self, quick):
        return 5 if quick else 15

    def reference(self):
        d = np.pad(self.d_nchw.astype("float64"), ((0, 0), (0, 0), (1, 1), (1, 1)))
        H = self.HW
        out = np.zeros((1, self.C, H, H))
        w = self.w_oihw.astype("float64")
        for r in range(3):
            for s in range(3):
                out += np.einsum("nchw,kc->nkhw", d[:, :, r:r + H, s:s + H], w[:, :, r, s])
        return out if self.layout == "NCHW" else out.transpose(0, 2, 3, 1)

    def make(self, tool, threads, config=None):
        """``config``: tecomp's convolution config (``schedule_conv2d_*(config=)``)."""
        C, H = self.C, self.HW
        if tool == "tecomp":
            if self.layout == "NCHW":
                d = tc.placeholder((1, C, H, H), name="data")
                w = tc.placeholder((C, C, 3, 3), name="weight")
                out = ops.conv2d_nchw(d, w, padding=1)
                s = sc.schedule_conv2d_nchw(out, config=config)
                dn, wn = self.d_nchw, self.w_oihw
            else:
                d = tc.placeholder((1, H, H, C), name="data")
                w = tc.placeholder((3, 3, C, C), name="weight")
                out = ops.conv2d_nhwc(d, w, padding=1)
                s = sc.schedule_conv2d_nhwc(out, config=config)
                dn, wn = self.d_nhwc, self.w_hwio
            f = tc.build(s, [d, w, out], name="conv")
            o = tc.empty([int(e.value) for e in out.shape], "float32")
            return Runner(lambda: f(dn, wn, o), lambda: o)
        if tool == "numpy":
            return self._numpy_im2col()
        if tool == "torch":
            torch = _torch(threads)
            if self.layout == "NCHW":
                td, tw = torch.from_numpy(self.d_nchw), torch.from_numpy(self.w_oihw)
                res = {}

                def run():
                    res["o"] = torch.nn.functional.conv2d(td, tw, padding=1)
                return Runner(run, lambda: res["o"].numpy())
            td = torch.from_numpy(self.d_nchw).contiguous(memory_format=torch.channels_last)
            tw = torch.from_numpy(self.w_oihw).contiguous(memory_format=torch.channels_last)
            res = {}

            def run():
                res["o"] = torch.nn.functional.conv2d(td, tw, padding=1)
            return Runner(run, lambda: res["o"].permute(0, 2, 3, 1).numpy())
        import others

        return others.make(tool, "conv", self, threads)

    def _numpy_im2col(self):
        C, H = self.C, self.HW
        if self.layout == "NCHW":
            d = self.d_nchw[0]
            pad = np.zeros((C, H + 2, H + 2), "float32")
            cols = np.empty((C, 3, 3, H, H), "float32")
            wmat = self.w_oihw.reshape(C, C * 9)
            out = np.empty((C, H * H), "float32")

            def run():
                pad[:, 1:-1, 1:-1] = d
                for r in range(3):
                    for s in range(3):
                        cols[:, r, s] = pad[:, r:r + H, s:s + H]
                np.matmul(wmat, cols.reshape(C * 9, H * H), out=out)
            return Runner(run, lambda: out.reshape(1, C, H, H))
        d = self.d_nhwc[0]
        pad = np.zeros((H + 2, H + 2, C), "float32")
        cols = np.empty((H, H, 3, 3, C), "float32")
        wmat = self.w_hwio.reshape(9 * C, C)
        out = np.empty((H * H, C), "float32")

        def run():
            pad[1:-1, 1:-1] = d
            for r in range(3):
                for s in range(3):
                    cols[:, :, r, s] = pad[r:r + H, s:s + H]
            np.matmul(cols.reshape(H * H, 9 * C), wmat, out=out)
        return Runner(run, lambda: out.reshape(1, H, H, C))


class Softmax(Workload):
    kind = "softmax"

    def __init__(self, m, n, fast: bool):
        self.m, self.n, self.fast = m, n, fast
        self.name = f"softmax {m}x{n}" + (" fast-exp" if fast else " exact")
        self.flops = 0.0
        self.x = tc.aligned((np.random.default_rng(m).standard_normal((m, n)) * 3)
                            .astype("float32"))                       # (see Gemm)
        self.tol = 1e-5

    def metric(self, seconds):
        return f"{seconds * 1e3:.2f}ms"

    def rounds(self, quick):
        return 5 if quick else 20

    def reference(self):
        x = self.x.astype("float64")
        e = np.exp(x - x.max(1, keepdims=True))
        return e / e.sum(1, keepdims=True)

    def make(self, tool, threads):
        m, n, x = self.m, self.n, self.x
        y = tc.empty(x.shape, x.dtype)
        if tool == "tecomp":
            X = tc.placeholder((m, n), name="X")
            Y = sc.softmax_fast(X) if self.fast else ops.softmax(X)
            f = tc.build(sc.schedule_softmax(Y), [X, Y], name="softmax")
            return Runner(lambda: f(x, y), lambda: y)
        if tool == "numpy":
            if self.fast:
                raise Skip("no fast exp")
            mx = np.empty((m, 1), "float32")
            sm = np.empty((m, 1), "float32")

            def run():
                np.max(x, axis=1, keepdims=True, out=mx)
                np.subtract(x, mx, out=y)
                np.exp(y, out=y)
                np.sum(y, axis=1, keepdims=True, out=sm)
                np.divide(y, sm, out=y)
            return Runner(run, lambda: y)
        if tool == "torch":
            if self.fast:
                raise Skip("no fast exp (its exp is the exact one; see the exact row)")
            torch = _torch(threads)
            tx, ty = torch.from_numpy(x), torch.from_numpy(y)
            return Runner(lambda: torch._softmax(tx, 1, False, out=ty), lambda: y)
        import others

        return others.make(tool, "softmax", self, threads)


WORKLOADS = [Gemm(512), Gemm(1024), Gemm(2048),
             Conv(64, 56, "NCHW"), Conv(64, 56, "NHWC"),
             Conv(256, 14, "NCHW"), Conv(256, 14, "NHWC"),
             Softmax(4096, 1024, True), Softmax(4096, 1024, False)]


# ---------------------------------------------------------------------------------
# the machine's FMA peak, measured with a tecomp kernel


_PEAK = {}


def peak_gflops(threads: int) -> float:
    """GFLOP/s of tecomp's FMA-peak kernel (:func:`tecomp.viz.fma_peak`: independent
    FMAs in registers, as in a GEMM micro-kernel) on ``threads`` threads: the best of
    three bursts of 15 calls, 0.2 s apart (the machine is shared)."""
    if threads not in _PEAK:
        _PEAK[threads] = tc.viz.fma_peak(threads, calls=15, bursts=3, pause=0.2)
    return _PEAK[threads]


# ---------------------------------------------------------------------------------
# compile times


def _tecomp_builds():
    """(name, thunk building the tuned kernel) for the compile-time table."""
    def gemm(n, packed=True):
        def b():
            A = tc.placeholder((n, n), name="A")
            B = tc.placeholder((n, n), name="B")
            C = sc.matmul_packed(A, B) if packed else ops.matmul(A, B)
            return tc.build(sc.schedule_matmul(C), [A, B, C], name="gemm")
        return b

    def conv(C, H, layout):
        def b():
            if layout == "NCHW":
                d = tc.placeholder((1, C, H, H), name="data")
                w = tc.placeholder((C, C, 3, 3), name="weight")
                out = ops.conv2d_nchw(d, w, padding=1)
                s = sc.schedule_conv2d_nchw(out)
            else:
                d = tc.placeholder((1, H, H, C), name="data")
                w = tc.placeholder((3, 3, C, C), name="weight")
                out = ops.conv2d_nhwc(d, w, padding=1)
                s = sc.schedule_conv2d_nhwc(out)
            return tc.build(s, [d, w, out], name="conv")
        return b

    def softmax():
        X = tc.placeholder((4096, 1024), name="X")
        Y = sc.softmax_fast(X)
        return tc.build(sc.schedule_softmax(Y), [X, Y], name="softmax")

    return [("gemm 1024^3 (packed B)", gemm(1024)), ("gemm 1024^3 (matmul)", gemm(1024, False)),
            ("conv 64x56x56 NCHW", conv(64, 56, "NCHW")),
            ("conv 64x56x56 NHWC", conv(64, 56, "NHWC")),
            ("conv 256x14x14 NCHW", conv(256, 14, "NCHW")),
            ("conv 256x14x14 NHWC", conv(256, 14, "NHWC")),
            ("softmax 4096x1024 fast-exp", softmax)]


def compile_table(tools, threads, reps: int = 3):
    print("Compile times, warm process (median of %d builds; seconds):" % reps)
    print("  %-28s %8s %9s %9s  %s" % ("kernel", "tc.build", "lowering", "LLVM",
                                      "LLVM split (IR codegen / parse / worker: parse+O3+machine code / JIT link)"))
    for name, thunk in _tecomp_builds():
        thunk()  # warm: imports, the thread pool, first-use caches
        mods = [thunk() for _ in range(reps)]
        tot = statistics.median(m.build_seconds for m in mods)
        low = statistics.median(m.lower_seconds for m in mods)
        st = {k: statistics.median(m.compile_stats.get(k, 0.0) for m in mods)
              for k in ("codegen", "parse", "optimize", "jit")}
        print("  %-28s %8.3f %9.3f %9.3f  %.3f / %.3f / %.3f / %.3f" % (
            name, tot, low, tot - low, st["codegen"], st["parse"], st["optimize"], st["jit"]))
    import others

    for tool in tools:
        if tool in ("tvm", "halide"):
            try:
                for name, secs in others.compile_times(tool, threads, reps):
                    print("  %-28s %8.3f   (%s)" % (name, secs, tool))
            except Exception as e:  # noqa: BLE001
                print(f"  {tool}: compile timing failed: {type(e).__name__}: {e}")


# ---------------------------------------------------------------------------------
# thread pool dispatch overhead


def dispatch_table(threads):
    """Per-call and per-parallel-region overheads of tecomp's runtime."""
    T = max(1, threads)
    R = 200
    A = tc.placeholder((R, T, 16), name="A")

    def kernel(par: bool, regions: int):
        Bt = tc.compute((regions, T, 16), lambda r, t, v: A[r, t, v] + 1.0, name="B")
        s = tc.create_schedule(Bt.op)
        r, t, v = Bt.op.axis
        s[Bt].vectorize(v)
        if par and T > 1:
            s[Bt].parallel(t)
        return tc.build(s, [A, Bt], name="disp")

    a = np.ones((R, T, 16), "float32")
    b = np.empty_like(a)
    ser, par = kernel(False, R), kernel(True, R)

    def per_call(f, n=2000):
        for _ in range(50):
            f(a, b)
        ts = []
        for _ in range(7):
            t0 = time.perf_counter()
            for _ in range(n):
                f(a, b)
            ts.append((time.perf_counter() - t0) / n)
        return statistics.median(ts)

    t_ser = per_call(ser)
    t_par = per_call(par, 500)
    A1 = tc.placeholder((1, 16), name="A1")
    B1 = tc.compute((1, 16), lambda i, v: A1[i, v] * 2.0, name="B1")
    s1 = tc.create_schedule(B1.op)
    s1[B1].vectorize(B1.op.axis[1])
    tiny = tc.build(s1, [A1, B1], name="tiny")
    a1, b1 = np.ones((1, 16), "float32"), np.empty((1, 16), "float32")
    t_call = per_call(lambda x, y: tiny(a1, b1), 20000)
    print(f"Runtime overheads ({T} thread(s)):")
    try:
        from tecomp.codegen.llvm.threadpool import measure_dispatch_overhead

        d = measure_dispatch_overhead()
        print(f"  empty parallel region, measured in JIT code ({d['threads']} threads): "
              f"{d['hot_us']:.2f} us with the workers spinning, {d['sleeping_us']:.2f} us "
              f"with them asleep")
    except Exception as e:  # noqa: BLE001
        print(f"  (pool self-measurement unavailable: {e})")
    print(f"  Python -> kernel call (argument checks, ctypes), tiny kernel: {t_call * 1e6:.2f} us")
    if T > 1:
        per_region = (t_par - t_ser) / R
        print(f"  dispatch per parallel region ({T} tasks, {R} regions in one call): "
              f"{per_region * 1e6:.2f} us  (serial {t_ser * 1e6:.1f} us/call, "
              f"parallel {t_par * 1e6:.1f} us/call)")
    else:
        print("  dispatch per parallel region: n/a with one thread (parallel loops run inline)")
