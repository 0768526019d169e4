"""Odd shapes: the shipped schedules on sizes nobody tuned them for (``run.py --odd``).

Prime and non-multiple extents (GEMM and dense both plain and packed), batch-1 dense, a
strided first layer with 3 input channels, channels that are not a multiple of the vector
width, 13x13 rows (AlexNet's last layers), a dilated conv and a softmax with an odd row
length.  tecomp's kernels come from ``tecomp.nn`` with its ``schedule_*`` functions and no
per-shape tuning; numpy (OpenBLAS) and PyTorch run the same computation.  Every result
is checked against a float64 reference first.
"""
from __future__ import annotations

import numpy as np

import tecomp as tc
from tecomp.nn import ops
from tecomp.strategy import cpu as sc
from workloads import Runner, Skip, Softmax, Workload, _torch


class OddGemm(Workload):
    kind = "gemm"

    def __init__(self, m, n, k, dense=False, packed=False):
        self.m, self.n, self.k, self.dense, self.packed = m, n, k, dense, packed
        self.name = (f"dense {m}x{k} -> {n}" if dense else f"gemm {m}x{n}x{k}") + \
            (" packed" if packed else "")
        self.flops = 2.0 * m * n * k
        rng = np.random.default_rng(m * 7 + n * 3 + k)
        self.a = rng.standard_normal((m, k)).astype("float32")
        # dense weights are (out, in), as in PyTorch's Linear and tecomp.nn.dense
        self.b = rng.standard_normal((n, k) if dense else (k, n)).astype("float32")

    def rounds(self, quick):
        return 7 if quick else 15

    def reference(self):
        b = self.b.astype("float64")
        return self.a.astype("float64") @ (b.T if self.dense else b)

    def make(self, tool, threads):
        a, b, m, n, k = self.a, self.b, self.m, self.n, self.k
        c = np.empty((m, n), "float32")
        if tool == "tecomp":
            A = tc.placeholder((m, k), name="A")
            # packed: the operand packed into panels by its own stage (dense_packed /
            # matmul_packed), as in run.py's GEMM; else the plain op, B read in place
            if self.dense:
                B = tc.placeholder((n, k), name="W")
                C = sc.dense_packed(A, B) if self.packed else ops.dense(A, B)
                s = sc.schedule_dense(C)
            else:
                B = tc.placeholder((k, n), name="B")
                C = sc.matmul_packed(A, B) if self.packed else ops.matmul(A, B)
                s = sc.schedule_matmul(C)
            f = tc.build(s, [A, B, C], name="gemm")
            return Runner(lambda: f(a, b, c), lambda: c)
        if tool == "numpy":
            bt = b.T if self.dense else b
            return Runner(lambda: np.matmul(a, bt, out=c), lambda: c)
        if tool == "torch":
            torch = _torch(threads)
            ta, tb, tcc = torch.from_numpy(a), torch.from_numpy(b), torch.from_numpy(c)
            if self.dense:
                def run():
                    tcc.copy_(torch.nn.functional.linear(ta, tb))
                return Runner(run, lambda: c)
            return Runner(lambda: torch.matmul(ta, tb, out=tcc), lambda: c)
        raise Skip("not compared on odd shapes")


class OddConv(Workload):
    kind = "conv"

    def __init__(self, C, K, H, W, R, stride, pad, layout, dilation=1):
        self.C, self.K, self.H, self.W, self.R = C, K, H, W, R
        self.stride, self.pad, self.dil, self.layout = stride, pad, dilation, layout
        self.OH = (H + 2 * pad - dilation * (R - 1) - 1) // stride + 1
        self.OW = (W + 2 * pad - dilation * (R - 1) - 1) // stride + 1
        extra = (f" s{stride}" if stride > 1 else "") + (f" d{dilation}" if dilation > 1 else "")
        self.name = f"conv {C}->{K} {H}x{W} {R}x{R}{extra} {layout}"
        self.flops = 2.0 * K * C * R * R * self.OH * self.OW
        rng = np.random.default_rng(C * 31 + K + H)
        self.d = rng.standard_normal((1, C, H, W)).astype("float32")
        self.w = (rng.standard_normal((K, C, R, R)) / (R * C ** 0.5)).astype("float32")

    def rounds(self, quick):
        return 5 if quick else 11

    def reference(self):
        p, s, dl, R = self.pad, self.stride, self.dil, self.R
        d = np.pad(self.d.astype("float64"), ((0, 0), (0, 0), (p, p), (p, p)))
        w = self.w.astype("float64")
        out = np.zeros((1, self.K, self.OH, self.OW))
        for r in range(R):
            for q in range(R):
                win = d[:, :, r * dl:r * dl + s * (self.OH - 1) + 1:s,
                        q * dl:q * dl + s * (self.OW - 1) + 1:s]
                out += np.einsum("nchw,kc->nkhw", win, w[:, :, r, q])
        return out if self.layout == "NCHW" else out.transpose(0, 2, 3, 1)

    def make(self, tool, threads):
        C, K, H, W, R = self.C, self.K, self.H, self.W, self.R
        kw = dict(stride=self.stride, padding=self.pad, dilation=self.dil)
        if tool == "tecomp":
            if self.layout == "NCHW":
                d = tc.placeholder((1, C, H, W), name="data")
                w = tc.placeholder((K, C, R, R), name="weight")
                out = ops.conv2d_nchw(d, w, **kw)
                s = sc.schedule_conv2d_nchw(out)
                dn, wn = self.d, self.w
            else:
                d = tc.placeholder((1, H, W, C), name="data")
                w = tc.placeholder((R, R, C, K), name="weight")
                out = ops.conv2d_nhwc(d, w, **kw)
                s = sc.schedule_conv2d_nhwc(out)
                dn = np.ascontiguousarray(self.d.transpose(0, 2, 3, 1))
                wn = np.ascontiguousarray(self.w.transpose(2, 3, 1, 0))
            f = tc.build(s, [d, w, out], name="conv")
            o = np.empty([int(e.value) for e in out.shape], "float32")
            return Runner(lambda: f(dn, wn, o), lambda: o)
        if tool == "torch":
            torch = _torch(threads)
            td, tw = torch.from_numpy(self.d), torch.from_numpy(self.w)
            if self.layout == "NHWC":
                td = td.contiguous(memory_format=torch.channels_last)
                tw = tw.contiguous(memory_format=torch.channels_last)
            res = {}

            def run():
                res["o"] = torch.nn.functional.conv2d(td, tw, **kw)
            if self.layout == "NCHW":
                return Runner(run, lambda: res["o"].numpy())
            return Runner(run, lambda: res["o"].permute(0, 2, 3, 1).numpy())
        raise Skip("not compared on odd shapes")


ODD_WORKLOADS = [
    OddGemm(1000, 1000, 1000), OddGemm(127, 509, 257), OddGemm(333, 77, 1031),
    OddGemm(1000, 1000, 1000, packed=True), OddGemm(127, 509, 257, packed=True),
    OddGemm(333, 77, 1031, packed=True),
    OddGemm(1, 1000, 1024, dense=True), OddGemm(61, 1000, 1024, dense=True),
    OddGemm(61, 1000, 1024, dense=True, packed=True),
    OddConv(3, 32, 224, 224, 3, 2, 1, "NCHW"), OddConv(3, 32, 224, 224, 3, 2, 1, "NHWC"),
    OddConv(96, 96, 27, 27, 3, 1, 1, "NCHW"), OddConv(72, 40, 33, 33, 3, 1, 1, "NHWC"),
    OddConv(384, 256, 13, 13, 3, 1, 1, "NCHW"),
    OddConv(64, 64, 28, 28, 3, 1, 2, "NCHW", dilation=2),
    OddConv(128, 128, 15, 15, 5, 1, 2, "NHWC"),
    Softmax(1000, 1001, fast=False),
]
