"""Where the GEMM's time goes: tecomp's micro-kernel against the same kernel in C.

    python3 benchmarks/kernel_ceiling.py [--threads 1] [--sizes 1024,2048]

Builds (gcc -O3 -march=native, AVX-512 intrinsics; needs gcc and an AVX-512 host) and
times, interleaved in one process:

* ``C kernel in cache``: an 8x32 register block (16 zmm accumulators, ``k`` unrolled by
  4: the shape and instruction mix of tecomp's micro-kernel) over the same A rows and
  packed B panel again and again (K = 256: A and B in L1/L2).  This is the ceiling of
  the kernel itself on this machine.
* ``C loop nest``: that kernel in tecomp's loop nest for ``matmul_packed`` on one thread
  (B packed per column block of ``gemm_params(...).nc`` columns, A read in place, MR-row
  panels outside the NR-wide panels), a model of what tecomp generates.
* ``C BLIS order``: the BLIS/GotoBLAS nest with A and B both packed and K in slices of
  256 (``jc, pc, ic, jr, ir``; the C block reloaded per slice).
* tecomp's ``matmul_packed`` and numpy (OpenBLAS).

The model and tecomp run at the same speed, and the kernel in cache runs near the FMA
peak: what is lost is the feeding of the kernel from L2/L3, not its instructions (see
benchmarks/history/2026-11-22.md, "What limits the targets that are missed").  Speed only:
this is not a test.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import subprocess
import sys
import tempfile

_C = r"""
#include <immintrin.h>
#define MR 8
static inline void kern(const float* A, long lda, long ks, const float* B, float* C, int ldc,
                        int K, int load) {
  __m512 c[MR][2];
  for (int i = 0; i < MR; i++) for (int v = 0; v < 2; v++)
    c[i][v] = load ? _mm512_loadu_ps(C + i * ldc + v * 16) : _mm512_setzero_ps();
  #pragma GCC unroll 4
  for (int k = 0; k < K; k++) {
    __m512 b0 = _mm512_loadu_ps(B + k * 32), b1 = _mm512_loadu_ps(B + k * 32 + 16);
    for (int i = 0; i < MR; i++) {
      __m512 a = _mm512_set1_ps(A[i * lda + k * ks]);
      c[i][0] = _mm512_fmadd_ps(a, b0, c[i][0]);
      c[i][1] = _mm512_fmadd_ps(a, b1, c[i][1]);
    }
  }
  for (int i = 0; i < MR; i++) for (int v = 0; v < 2; v++)
    _mm512_storeu_ps(C + i * ldc + v * 16, c[i][v]);
}
void in_cache(const float* A, const float* B, float* C, int K, long reps) {
  for (long r = 0; r < reps; r++) kern(A, K, 1, B, C, 32, K, 1);
}
static void pack_b(const float* B, int N, int k0, int kc, int j0, int nc, float* P) {
  for (int jo = 0; jo < nc / 32; jo++)
    for (int k = 0; k < kc; k++)
      for (int j = 0; j < 32; j++)
        P[((long)jo * kc + k) * 32 + j] = B[(long)(k0 + k) * N + j0 + jo * 32 + j];
}
void tecomp_nest(const float* A, const float* B, float* C, int M, int N, int K, int nc,
                 float* P) {
  for (int jc = 0; jc < N; jc += nc) {
    pack_b(B, N, 0, K, jc, nc, P);
    for (int ir = 0; ir < M; ir += MR)
      for (int jo = 0; jo < nc / 32; jo++)
        kern(A + (long)ir * K, K, 1, P + (long)jo * K * 32, C + (long)ir * N + jc + jo * 32,
             N, K, 0);
  }
}
void blis_nest(const float* A, const float* B, float* C, int M, int N, int K, int kc, int mc,
               float* P, float* Q) {
  for (int pc = 0; pc < K; pc += kc) {
    pack_b(B, N, pc, kc, 0, N, P);
    for (int ic = 0; ic < M; ic += mc) {
      for (int io = 0; io < mc / MR; io++)
        for (int k = 0; k < kc; k++)
          for (int i = 0; i < MR; i++)
            Q[((long)io * kc + k) * MR + i] = A[(long)(ic + io * MR + i) * K + pc + k];
      for (int jo = 0; jo < N / 32; jo++)
        for (int io = 0; io < mc / MR; io++)
          kern(Q + (long)io * kc * MR, 1, MR, P + (long)jo * kc * 32,
               C + (long)(ic + io * MR) * N + jo * 32, N, kc, pc > 0);
    }
  }
}
"""


def _build(tmp: str) -> ctypes.CDLL:
    src = os.path.join(tmp, "ceiling.c")
    lib = os.path.join(tmp, "ceiling.so")
    with open(src, "w") as f:
        f.write(_C)
    subprocess.run(["gcc", "-O3", "-march=native", "-funroll-loops", "-shared", "-fPIC", src, "-o", lib],
                   check=True)
    return ctypes.CDLL(lib)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=1,
                    help="tecomp's and numpy's threads (the C models run on one)")
    ap.add_argument("--sizes", default="1024,2048")
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args(argv)
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "TECOMP_NUM_THREADS"):
        os.environ[var] = str(args.threads)
    os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "20")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import numpy as np
    import tecomp as tc
    from tecomp.strategy import cpu as sc
    from run import interleaved

    if sc.cpu_model().lanes != 16:
        print("needs AVX-512 (the C models use 16-lane intrinsics)")
        return 1
    P = ctypes.POINTER(ctypes.c_float)

    def ptr(x):
        return x.ctypes.data_as(P)

    with tempfile.TemporaryDirectory() as tmp:
        lib = _build(tmp)
        rng = np.random.default_rng(0)
        Kc = 256
        a8 = rng.random((8, Kc), dtype=np.float32)
        b8 = rng.random((Kc, 32), dtype=np.float32)
        c8 = np.zeros((8, 32), np.float32)
        reps = 2000
        kflop = 2 * 8 * 32 * Kc * reps
        for n in [int(x) for x in args.sizes.split(",")]:
            a = rng.random((n, n), dtype=np.float32)
            b = rng.random((n, n), dtype=np.float32)
            ref = a.astype(np.float64) @ b.astype(np.float64)
            outs = {k: np.zeros((n, n), np.float32) for k in ("tecomp", "nest", "blis", "np")}
            A = tc.placeholder((n, n), name="A")
            B = tc.placeholder((n, n), name="B")
            C = sc.matmul_packed(A, B)
            f = tc.build(sc.schedule_matmul(C), [A, B, C], name="gemm")
            nc = sc.gemm_params(n, n, n).nc
            pb = np.zeros(n * max(nc, n), np.float32)
            qa = np.zeros(128 * Kc, np.float32)
            fns = {
                "C kernel in cache": lambda: lib.in_cache(ptr(a8), ptr(b8), ptr(c8), Kc,
                                                          ctypes.c_long(reps)),
                "C loop nest": lambda: lib.tecomp_nest(ptr(a), ptr(b), ptr(outs["nest"]),
                                                       n, n, n, nc, ptr(pb)),
                "C BLIS order": lambda: lib.blis_nest(ptr(a), ptr(b), ptr(outs["blis"]),
                                                      n, n, n, Kc, 128, ptr(pb), ptr(qa)),
                "tecomp": lambda: f(a, b, outs["tecomp"]),
                "numpy": lambda: np.matmul(a, b, out=outs["np"]),
            }
            for k, fn in fns.items():
                fn()
            for k in ("tecomp", "nest", "blis", "np"):
                err = np.abs(outs[k] - ref).max() / np.abs(ref).max()
                if err > 1e-5:
                    print(f"{k}: wrong result (max rel err {err:.1e})")
                    return 1
            res = interleaved(fns, args.rounds)
            flop = 2.0 * n ** 3
            cells = []
            for k, t in res.items():
                g = (kflop if k == "C kernel in cache" else flop) / t / 1e9
                cells.append(f"{k} {g:.1f}")
            print(f"{n}^3, GFLOP/s (medians; C models on 1 thread, tecomp and numpy on "
                  f"{args.threads}): " + ", ".join(cells), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
