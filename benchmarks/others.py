"""TVM and Halide versions of the benchmark workloads, hand-scheduled.

The schedules follow each project's own published CPU recipes, adapted to the vector
width of the machine (``L`` float32 lanes):

* GEMM: TVM's "How to optimize GEMM on CPU" (array packing of B into ``NR``-wide panels,
  ``MR x NR`` register blocks, the whole reduction per block, parallel outer loop);
  Halide's ``test/performance/matrix_multiplication.cpp`` (the accumulator computed per
  register tile, unrolled and vectorized) with B packed into panels first, as its
  ``apps/linear_algebra`` sgemm does, column tiles parallel.
* conv2d: direct convolution with the output block in registers (channels x pixels),
  the padded input computed per task; like tecomp's, so the comparison is of the
  compilers, not of the algorithms.
* softmax: one row per task, every stage at the row, with each tool's fast exp
  (``topi.fast_exp`` / ``Halide::fast_exp``).
"""
from __future__ import annotations

import statistics
import time

import numpy as np

from workloads import Runner, Skip


def _lanes():
    from tecomp.strategy.cpu import cpu_model

    return cpu_model().lanes


def _row_vector(H: int, L: int) -> int:
    """The vector over a row of ``H`` pixels (NCHW): the largest divisor of ``H`` that fits
    one register (14 of 56 with AVX-512's 16 lanes, 8 with AVX2's 8; 7 of 14 with AVX2):
    a 14-lane vector on AVX2 is carried around the loop through the stack by LLVM (TVM's
    NCHW conv on a Zen 3 ran at 7-9 GFLOP/s)."""
    return max(d for d in range(1, min(H, L) + 1) if H % d == 0)


def make(tool, kind, w, threads):
    if tool == "tvm":
        return _TVM(threads).make(kind, w)
    if tool == "halide":
        return _Halide(threads).make(kind, w)
    raise Skip(f"unknown tool {tool}")


def compile_times(tool, threads, reps):
    from workloads import Conv, Gemm

    impl = _TVM(threads) if tool == "tvm" else _Halide(threads)
    out = []
    for name, kind, w in (("gemm 1024^3", "gemm", Gemm(1024)),
                          ("conv 64x56x56 NCHW", "conv", Conv(64, 56, "NCHW")),
                          ("conv 256x14x14 NHWC", "conv", Conv(256, 14, "NHWC"))):
        impl.build(kind, w)  # warm
        ts = []
        for _ in range(reps):
            t0 = time.perf_counter()
            impl.build(kind, w)
            ts.append(time.perf_counter() - t0)
        out.append((name, statistics.median(ts)))
    return out


# ---------------------------------------------------------------------------------
# TVM (0.2x: TE computes + the s_tir schedule)


class _TVM:
    def __init__(self, threads):
        try:
            import tvm
            from tvm import te
        except Exception as e:  # noqa: BLE001
            raise Skip(f"not installed ({e})")
        self.tvm, self.te = tvm, te
        import llvmlite.binding as lb

        lb.initialize_native_target()
        self.target = tvm.target.Target({"kind": "llvm", "mcpu": lb.get_host_cpu_name(),
                                         "num-cores": threads})
        self.threads = threads
        self.L = _lanes()

    def make(self, kind, w):
        tvm = self.tvm
        lib, args_np, out_shape, post = self.build(kind, w)
        dev = tvm.cpu()
        targs = [tvm.runtime.tensor(a, dev) for a in args_np]
        tout = tvm.runtime.empty(out_shape, "float32", dev)
        f = lib["main"]
        return Runner(lambda: f(*targs, tout), lambda: post(tout.numpy()))

    def build(self, kind, w):
        mod, args, out_shape, post = getattr(self, "_" + kind)(w)
        return self.tvm.compile(mod, target=self.target), args, out_shape, post

    def _gemm(self, w):
        tvm, te = self.tvm, self.te
        n, L = w.n, self.L
        # the whole reduction in one slice, as the tutorial does (its k split is only by
        # the unroll factor): k sliced by 256 accumulated C in memory across the slices,
        # 53 against 116-118 GFLOP/s on an AMD EPYC Zen 3, 2 threads, interleaved
        MR, NR, KC = (8, 2 * L, n) if L >= 16 else (6, 2 * L, n)
        A = te.placeholder((n, n), name="A")
        B = te.placeholder((n, n), name="B")
        PB = te.compute((n // NR, n, NR), lambda jo, k, ji: B[k, jo * NR + ji], name="PB")
        k = te.reduce_axis((0, n), name="k")
        C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * PB[j // NR, k, j % NR], axis=k),
                       name="C")
        sch = tvm.s_tir.Schedule(te.create_prim_func([A, B, C]))
        blk = sch.get_sblock("C")
        i, j, kk = sch.get_loops(blk)
        io, ii = sch.split(i, [None, MR])
        jo, ji = sch.split(j, [None, NR])
        ko, ki = sch.split(kk, [None, KC])
        sch.reorder(jo, ko, io, ki, ii, ji)
        sch.vectorize(ji)
        sch.unroll(ii)
        sch.parallel(jo)
        init = sch.decompose_reduction(blk, ko)
        sch.vectorize(sch.get_loops(init)[-1])
        pb = sch.get_sblock("PB")
        lp = sch.get_loops(pb)
        sch.parallel(lp[0])
        sch.vectorize(lp[2])
        return sch.mod, [w.a, w.b], (n, n), lambda o: o

    def _conv(self, w):
        tvm, te = self.tvm, self.te
        C, H, L = w.C, w.HW, self.L
        if w.layout == "NCHW":
            d = te.placeholder((1, C, H, H), name="d")
            wt = te.placeholder((C, C, 3, 3), name="w")
            pad = te.compute((1, C, H + 2, H + 2), lambda n, c, y, x: te.if_then_else(
                te.all(y >= 1, y <= H, x >= 1, x <= H), d[n, c, y - 1, x - 1], 0.0), name="pad")
            rc = te.reduce_axis((0, C), "rc")
            ry = te.reduce_axis((0, 3), "ry")
            rx = te.reduce_axis((0, 3), "rx")
            out = te.compute((1, C, H, H), lambda n, k, y, x: te.sum(
                pad[n, rc, y + ry, x + rx] * wt[k, rc, ry, rx], axis=[ry, rx, rc]), name="conv")
            sch = tvm.s_tir.Schedule(te.create_prim_func([d, wt, out]))
            blk = sch.get_sblock("conv")
            n, k, y, x, ry_, rx_, rc_ = sch.get_loops(blk)
            # the blocking tecomp's cost model picks (a 14-wide vector where 14 divides
            # the width; a 56-lane vector is 20x slower through LLVM's legalizer)
            XB = _row_vector(H, L)
            OB, YB = 8, 2
            ko, ki = sch.split(k, [None, OB])
            yo, yi = sch.split(y, [None, YB])
            xo, xi = sch.split(x, [None, XB])
            sch.reorder(n, yo, ko, xo, ry_, rx_, rc_, ki, yi, xi)
            sch.unroll(ki)
            sch.unroll(yi)
            sch.vectorize(xi)
            par = sch.fuse(n, yo)
            sch.parallel(par)
            sch.decompose_reduction(blk, ry_)
            pb = sch.get_sblock("pad")
            sch.compute_at(pb, par)
            sch.vectorize(sch.get_loops(pb)[-1])
            return sch.mod, [w.d_nchw, w.w_oihw], (1, C, H, H), lambda o: o
        d = te.placeholder((1, H, H, C), name="d")
        wt = te.placeholder((3, 3, C, C), name="w")
        pad = te.compute((1, H + 2, H + 2, C), lambda n, y, x, c: te.if_then_else(
            te.all(y >= 1, y <= H, x >= 1, x <= H), d[n, y - 1, x - 1, c], 0.0), name="pad")
        rc = te.reduce_axis((0, C), "rc")
        ry = te.reduce_axis((0, 3), "ry")
        rx = te.reduce_axis((0, 3), "rx")
        out = te.compute((1, H, H, C), lambda n, y, x, k: te.sum(
            pad[n, y + ry, x + rx, rc] * wt[ry, rx, rc, k], axis=[ry, rx, rc]), name="conv")
        sch = tvm.s_tir.Schedule(te.create_prim_func([d, wt, out]))
        blk = sch.get_sblock("conv")
        n, y, x, k, ry_, rx_, rc_ = sch.get_loops(blk)
        OB = 2 * L
        XB = 14 if H % 14 == 0 else 8
        ko, ki = sch.split(k, [None, OB])
        xo, xi = sch.split(x, [None, XB])
        sch.reorder(n, y, ko, xo, ry_, rx_, rc_, xi, ki)
        sch.unroll(xi)
        sch.vectorize(ki)
        par = sch.fuse(n, y)
        sch.parallel(par)
        sch.decompose_reduction(blk, ry_)
        pb = sch.get_sblock("pad")
        sch.compute_at(pb, par)
        sch.vectorize(sch.get_loops(pb)[-1])
        return sch.mod, [w.d_nhwc, w.w_hwio], (1, H, H, C), lambda o: o

    def _softmax(self, w):
        tvm, te = self.tvm, self.te
        from tvm import topi

        if not w.fast:
            raise Skip("exact exp: see the fast-exp row")
        m, n, L = w.m, w.n, self.L
        X = te.placeholder((m, n), name="X")
        k1 = te.reduce_axis((0, n), "k1")
        mx = te.compute((m,), lambda i: te.max(X[i, k1], axis=k1), name="mx")
        sh = te.compute((m, n), lambda i, j: X[i, j] - mx[i], name="sh")
        ex = topi.fast_exp(sh)
        k2 = te.reduce_axis((0, n), "k2")
        sm = te.compute((m,), lambda i: te.sum(ex[i, k2], axis=k2), name="sm")
        Y = te.compute((m, n), lambda i, j: ex[i, j] / sm[i], name="Y")
        sch = tvm.s_tir.Schedule(te.create_prim_func([X, Y]))
        yb = sch.get_sblock("Y")
        i, j = sch.get_loops(yb)
        sch.parallel(i)
        jo, ji = sch.split(j, [None, L])
        sch.vectorize(ji)
        sch.compute_inline(sch.get_sblock("sh"))
        for name in ("sm", "T_fast_exp", "mx"):  # consumers first
            try:
                b = sch.get_sblock(name)
            except Exception:  # noqa: BLE001 - topi's block name differs between versions
                continue
            sch.compute_at(b, i)
        eb = sch.get_sblock("T_fast_exp")
        sch.vectorize(sch.split(sch.get_loops(eb)[-1], [None, L])[1])
        return sch.mod, [w.x], (m, n), lambda o: o


# ---------------------------------------------------------------------------------
# Halide


class _Halide:
    def __init__(self, threads):
        try:
            import halide as hl
        except Exception as e:  # noqa: BLE001
            raise Skip(f"not installed ({e})")
        self.hl = hl
        self.L = _lanes()
        self.threads = threads

    def make(self, kind, w):
        hl = self.hl
        out, params, arrays, out_shape, post = self.build(kind, w)
        for p, a in zip(params, arrays):
            p.set(hl.Buffer(a))
        o = np.empty(out_shape, "float32")
        ob = hl.Buffer(o)
        return Runner(lambda: out.realize(ob), lambda: post(o))

    def build(self, kind, w):
        out, params, arrays, out_shape, post = getattr(self, "_" + kind)(w)
        out.compile_jit(self.hl.get_jit_target_from_environment())
        return out, params, arrays, out_shape, post

    def _gemm(self, w):
        hl, n, L = self.hl, w.n, self.L
        A = hl.ImageParam(hl.Float(32), 2, "A")
        B = hl.ImageParam(hl.Float(32), 2, "B")
        # B packed into NR-wide panels at the root (Halide's linear_algebra sgemm packs
        # too), each task a column tile of up to 512 rows, the accumulator a ROWS x NR
        # block computed per micro-tile.  Against the unpacked 4 x 3L tiles of
        # test/performance/matrix_multiplication.cpp, AMD EPYC Zen 3 (AVX2), 2 threads,
        # interleaved, 1024^3: 110-164 against 61-72 GFLOP/s (numpy 133-182: the machine
        # was noisy), 2048^3 154 against 52
        rows, NR = 6, (3 * L if L >= 16 else 2 * L)
        x, y, k, xo, xl = hl.Var("x"), hl.Var("y"), hl.Var("k"), hl.Var("xo"), hl.Var("xl")
        r = hl.RDom([(0, n)])
        packed = hl.Func("packB")
        packed[xl, k, xo] = B[hl.min(xo * NR + xl, n - 1), k]
        prod = hl.Func("prod")
        prod[x, y] = 0.0
        prod[x, y] += A[r.x, y] * packed[x % NR, r.x, x / NR]   # numpy A[y, k] is A(k, y)
        out = hl.Func("out")
        out[x, y] = prod[x, y]
        xi, yi, yii, xii = hl.Var("xi"), hl.Var("yi"), hl.Var("yii"), hl.Var("xii")
        out.tile(x, y, xi, yi, 4 * NR, min(n, 512)).reorder(xi, yi, y, x).parallel(x) \
            .split(yi, yi, yii, rows).split(xi, xi, xii, NR).reorder(xii, yii, xi, yi) \
            .vectorize(xii, L).unroll(xii).unroll(yii)
        prod.compute_at(out, xi).vectorize(x, L).unroll(x).unroll(y)
        prod.update().reorder(x, y, r.x).vectorize(x, L).unroll(x).unroll(y).unroll(r.x, 4)
        packed.compute_root().parallel(xo).vectorize(xl, L)
        A.dim(0).set_bounds(0, n).dim(1).set_stride(n)
        B.dim(0).set_bounds(0, n).dim(1).set_stride(n)
        out.output_buffer().dim(0).set_bounds(0, n).dim(1).set_stride(n)
        return out, [A, B], [w.a, w.b], (n, n), lambda o: o

    def _conv(self, w):
        hl, C, H, L = self.hl, w.C, w.HW, self.L
        inp = hl.ImageParam(hl.Float(32), 4, "input")
        wt = hl.ImageParam(hl.Float(32), 4, "weight")
        padded = hl.BoundaryConditions.constant_exterior(inp, 0.0)
        r = hl.RDom([(0, C), (0, 3), (0, 3)], "r")
        c, x, y, n = hl.Var("c"), hl.Var("x"), hl.Var("y"), hl.Var("n")
        f = hl.Func("conv")
        out = hl.Func("out")
        if w.layout == "NCHW":
            # numpy [n, c, y, x] is Halide (x, y, c, n); weight [k, c, ry, rx] is (rx, ry, c, k)
            f[x, y, c, n] = 0.0
            f[x, y, c, n] += padded[x + r.z - 1, y + r.y - 1, r.x, n] * wt[r.z, r.y, r.x, c]
            out[x, y, c, n] = f[x, y, c, n]
            XB = _row_vector(H, L)
            OB, YB = 8, 2
            xo, yo, co = hl.Var("xo"), hl.Var("yo"), hl.Var("co")
            xi, yi, ci = hl.Var("xi"), hl.Var("yi"), hl.Var("ci")
            out.split(x, xo, xi, XB).split(y, yo, yi, YB).split(c, co, ci, OB) \
                .reorder(xi, yi, ci, xo, co, yo, n).vectorize(xi).unroll(yi).unroll(ci) \
                .parallel(yo)
            f.compute_at(out, xo).vectorize(x).unroll(y).unroll(c)
            f.update().reorder(x, y, c, r.x, r.z, r.y).vectorize(x).unroll(y).unroll(c)
            padded.compute_at(out, yo).vectorize(padded.args()[0], L)
            return out, [inp, wt], [w.d_nchw, w.w_oihw], (1, C, H, H), lambda o: o
        # NHWC: numpy [n, y, x, c] is Halide (c, x, y, n); weight [ry, rx, ci, co] is
        # (co, ci, rx, ry)
        f[c, x, y, n] = 0.0
        f[c, x, y, n] += padded[r.x, x + r.y - 1, y + r.z - 1, n] * wt[c, r.x, r.y, r.z]
        out[c, x, y, n] = f[c, x, y, n]
        OB = 2 * L
        XB = 14 if H % 14 == 0 else 8
        co, ci, xo, xi = hl.Var("co"), hl.Var("ci"), hl.Var("xo"), hl.Var("xi")
        out.split(c, co, ci, OB).split(x, xo, xi, XB).reorder(ci, xi, xo, co, y, n) \
            .vectorize(ci, L).unroll(ci).unroll(xi).parallel(y)
        f.compute_at(out, xo).vectorize(c, L).unroll(c).unroll(x)
        f.update().reorder(c, x, r.x, r.y, r.z).vectorize(c, L).unroll(c).unroll(x)
        padded.compute_at(out, y).vectorize(padded.args()[0], L)
        return out, [inp, wt], [w.d_nhwc, w.w_hwio], (1, H, H, C), lambda o: o

    def _softmax(self, w):
        hl, m, n, L = self.hl, w.m, w.n, self.L
        if not w.fast:
            raise Skip("exact exp: see the fast-exp row")
        X = hl.ImageParam(hl.Float(32), 2, "X")
        x, y = hl.Var("x"), hl.Var("y")
        r = hl.RDom([(0, n)])
        mx, ex, sm, out = hl.Func("mx"), hl.Func("ex"), hl.Func("sm"), hl.Func("out")
        mx[y] = hl.f32(float("-inf"))
        mx[y] = hl.max(mx[y], X[r.x, y])
        ex[x, y] = hl.fast_exp(X[x, y] - mx[y])
        sm[y] = hl.f32(0.0)
        sm[y] += ex[r.x, y]
        out[x, y] = ex[x, y] / sm[y]
        out.parallel(y).vectorize(x, L)
        ex.compute_at(out, y).vectorize(x, L)
        for red in (mx, sm):
            red.compute_at(out, y)
            rxo, rxi = hl.RVar("rxo"), hl.RVar("rxi")
            u = hl.Var("u")
            intm = red.update().split(r.x, rxo, rxi, L).rfactor(rxi, u)
            intm.compute_at(out, y).vectorize(u, L)
            intm.update().vectorize(u, L)
        X.dim(0).set_bounds(0, n).dim(1).set_stride(n)
        return out, [X], [w.x], (m, n), lambda o: o
