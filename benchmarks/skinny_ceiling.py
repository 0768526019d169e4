"""Why a 4-row skinny GEMM streams W slower than a GEMV: C models of the kernel, one thread.

    python3 benchmarks/skinny_ceiling.py [--rounds 5] [--k 4096] [--n 11016] [--rows16]

Builds (gcc -O3 -march=native, AVX-512 intrinsics; needs gcc and an AVX-512 host) and
times, interleaved in one process by the process's CPU time (one thread), kernels that
each read W (``N x K`` float32, larger than the caches) once, in tiles of 6 rows, one
vector of each row per step, the sums in registers (the shape of tecomp's skinny
schedule for ``A @ W^T``):

* ``GEMV``: one FMA per vector of W (M = 1);
* ``GEMV + 3 FMAs not on W``: three more FMAs per vector of W that do not read it (other
  accumulators, other rows of A): the instructions of M = 4, not its dependences;
* ``GEMV + 3 FMAs on W``: the three FMAs read the vector of W (distinct rows of A): this
  is M = 4;
* ``M=2``, and ``M=4`` with ``prefetcht0`` of each row 1 and 2 KiB ahead;
* tecomp's ``auto_schedule`` of the plain-TE ``A @ W^T`` with 1, 2 and 4 rows, and the
  read stream (a plain-TE row sum of W, the share's 100%).

On Zen 5 (benchmarks/history/2026-11-30.md) three more FMAs per vector of W cost the
GEMV a tenth of the stream when they do not read W and a third when they do, and
prefetching further ahead wins back only a little: the FMAs waiting for a line of W
fill the core's window, so fewer lines are in flight.

``--rows16``: 16 rows of A, where the FMAs rather than W set the pace on one thread (8
FLOP per byte of W against a ridge of 7-8 on Zen 5): GFLOP/s, as a share of the FMA peak
(``tc.viz.fma_peak``), of C models of the register tile with everything in L1 (``mb x
nb`` accumulators, ``mb + nb`` vector loads per ``mb * nb`` FMAs: 8 x 3, tecomp's; 5 x
5, fewer loads per FMA; 8 x 3 with A's vector kept in a register), of the whole kernel
in tecomp's loop order (blocks of 256 or 4096 columns, the accumulators through a
buffer between blocks) on 48 rows of W (768 KiB: in L2), and of tecomp's
``auto_schedule`` of the plain compute on the same W.  Speed only: this is not a test.
"""
from __future__ import annotations

import ctypes
import os
import tempfile
import time

from common import base_parser, interleaved_turns, pin_threads

# kern(NAME, M: rows of A, FREE: FMAs per vector of W that do not read it, PF: bytes
# ahead each row of W is prefetched, 0: none); tiles of NB rows, N a multiple of NB
_C = r"""
#include <immintrin.h>
#define NB 6
#define KERN(NAME, M, FREE, PF)                                                        \
void NAME(const float* A, const float* W, float* C, long N, long K) {                  \
  for (long j = 0; j < N; j += NB) {                                                   \
    __m512 acc[M][NB], idle[FREE + 1][NB], half = _mm512_set1_ps(0.5f);                \
    for (int i = 0; i < M; i++) for (int b = 0; b < NB; b++) acc[i][b] = _mm512_setzero_ps(); \
    for (int e = 0; e <= FREE; e++) for (int b = 0; b < NB; b++) idle[e][b] = _mm512_setzero_ps(); \
    for (long k = 0; k < K; k += 16) {                                                 \
      __m512 w[NB];                                                                    \
      for (int b = 0; b < NB; b++) {                                                   \
        if (PF) _mm_prefetch((const char*)(W + (j + b) * K + k) + PF, _MM_HINT_T0);    \
        w[b] = _mm512_loadu_ps(W + (j + b) * K + k);                                   \
      }                                                                                \
      for (int i = 0; i < M; i++) {                                                    \
        __m512 a = _mm512_loadu_ps(A + i * K + k);                                     \
        for (int b = 0; b < NB; b++) acc[i][b] = _mm512_fmadd_ps(a, w[b], acc[i][b]);  \
      }                                                                                \
      for (int e = 0; e < FREE; e++) {                                                 \
        __m512 a = _mm512_loadu_ps(A + (e + 1) * K + k);                               \
        for (int b = 0; b < NB; b++) idle[e][b] = _mm512_fmadd_ps(idle[e][b], half, a); \
      }                                                                                \
    }                                                                                  \
    for (int i = 0; i < M; i++) for (int b = 0; b < NB; b++) {                         \
      float s = _mm512_reduce_add_ps(acc[i][b]);                                       \
      for (int e = 0; e < FREE; e++) s += 0.0f * _mm512_reduce_add_ps(idle[e][b]);     \
      C[i * N + j + b] = s;                                                            \
    }                                                                                  \
  }                                                                                    \
}
KERN(gemv, 1, 0, 0)
KERN(gemv_free3, 1, 3, 0)
KERN(m2, 2, 0, 0)
KERN(m4, 4, 0, 0)
KERN(m4_pf1k, 4, 0, 1024)
KERN(m4_pf2k, 4, 0, 2048)
"""

_KERNELS = [("GEMV", "gemv", 1), ("GEMV + 3 FMAs not on W", "gemv_free3", 1),
            ("GEMV + 3 FMAs on W (M=4)", "m4", 4), ("M=2", "m2", 2),
            ("M=4, prefetcht0 1 KiB ahead", "m4_pf1k", 4),
            ("M=4, prefetcht0 2 KiB ahead", "m4_pf2k", 4)]


# 16 rows: TILE(NAME, MB, NB, LOADA): the register tile alone, everything in L1 (A and W
# rows of 256 + 16 floats, 4096 passes a call); BLOCKED(NAME, MB, NB, KB): tecomp's loop
# order over all of W (N rows a multiple of NB): for each block of KB columns, each
# tile of NB rows of W, each block of MB rows of A, the accumulators in a buffer
_C16 = r"""
#include <immintrin.h>
#define TILE(NAME, MB, NB, LOADA)                                                      \
void NAME(const float* A, const float* W, float* out, long reps) {                     \
  __m512 c[MB][NB], a0 = _mm512_loadu_ps(A);                                           \
  for (int i = 0; i < MB; i++) for (int b = 0; b < NB; b++) c[i][b] = _mm512_setzero_ps(); \
  for (long r = 0; r < reps; r++) for (long k = 0; k < 256; k += 16) {                 \
    __m512 w[NB];                                                                      \
    for (int b = 0; b < NB; b++) w[b] = _mm512_loadu_ps(W + b * 272 + k);              \
    for (int i = 0; i < MB; i++) {                                                     \
      __m512 a = LOADA ? _mm512_loadu_ps(A + i * 272 + k) : a0;                        \
      for (int b = 0; b < NB; b++) c[i][b] = _mm512_fmadd_ps(a, w[b], c[i][b]);       \
    }                                                                                  \
  }                                                                                    \
  for (int i = 0; i < MB; i++) for (int b = 0; b < NB; b++)                            \
    _mm512_storeu_ps(out + (i * NB + b) * 16, c[i][b]);                                \
}
#define BLOCKED(NAME, MB, NB, KB)                                                      \
void NAME(const float* A, const float* W, float* acc, long N, long K) {                \
  for (long kb = 0; kb < K; kb += KB)                                                  \
  for (long j = 0; j < N; j += NB)                                                     \
  for (long i0 = 0; i0 < 16; i0 += MB) {                                               \
    __m512 c[MB][NB];                                                                  \
    float* ap = acc + (i0 * N + j) * 16;                                               \
    for (int i = 0; i < MB; i++) for (int b = 0; b < NB; b++)                          \
      c[i][b] = kb ? _mm512_loadu_ps(ap + (i * N + b) * 16) : _mm512_setzero_ps();     \
    for (long k = kb; k < kb + KB; k += 16) {                                          \
      __m512 w[NB];                                                                    \
      for (int b = 0; b < NB; b++) w[b] = _mm512_loadu_ps(W + (j + b) * K + k);        \
      for (int i = 0; i < MB; i++) {                                                   \
        __m512 a = _mm512_loadu_ps(A + (i0 + i) * (K + 16) + k);                       \
        for (int b = 0; b < NB; b++) c[i][b] = _mm512_fmadd_ps(a, w[b], c[i][b]);     \
      }                                                                                \
    }                                                                                  \
    for (int i = 0; i < MB; i++) for (int b = 0; b < NB; b++)                          \
      _mm512_storeu_ps(ap + (i * N + b) * 16, c[i][b]);                                \
  }                                                                                    \
}
TILE(t8x3, 8, 3, 1)
TILE(t5x5, 5, 5, 1)
TILE(t8x3_areg, 8, 3, 0)
BLOCKED(b8x3_256, 8, 3, 256)
BLOCKED(b8x3_4096, 8, 3, 4096)
"""


def _build_c(tmp: str, name: str, code: str):
    """``code`` built into a shared library in ``tmp`` (gcc -O3 -march=native)."""
    import subprocess

    src, lib = os.path.join(tmp, f"{name}.c"), os.path.join(tmp, f"{name}.so")
    with open(src, "w") as fh:
        fh.write(code)
    subprocess.run(["gcc", "-O3", "-march=native", "-funroll-loops", "-shared", "-fPIC",
                    src, "-o", lib], check=True)
    return ctypes.CDLL(lib)


def rows16(rounds: int, K: int) -> None:
    """The ``--rows16`` table (see the module docstring)."""
    import numpy as np

    import tecomp as tc

    N, P = 48, ctypes.POINTER(ctypes.c_float)
    rng = np.random.default_rng(0)
    a = tc.aligned(rng.standard_normal((16, K + 16), dtype=np.float32))
    w = tc.aligned(rng.standard_normal((N, K), dtype=np.float32))
    acc = np.zeros((16 * N * 16,), np.float32)
    out = np.zeros((64 * 16,), np.float32)
    fns, flops = {}, {}
    A = tc.placeholder((16, K), name="A")
    W = tc.placeholder((N, K), name="W")
    k = tc.reduce_axis((0, K), name="k")
    C = tc.compute((16, N), lambda i, j: tc.sum(A[i, k] * W[j, k], axis=k), name="C")
    f = tc.build(tc.auto_schedule([A, W, C]), [A, W, C])
    a16, c = np.ascontiguousarray(a[:, :K]), tc.empty((16, N), "float32")
    f(a16, w, c)
    np.testing.assert_allclose(c, a16.astype(np.float64) @ w.T.astype(np.float64),
                               rtol=1e-3, atol=1e-2)
    fns["tecomp auto_schedule, W in L2"] = lambda: f(a16, w, c)
    flops["tecomp auto_schedule, W in L2"] = 2.0 * 16 * N * K
    with tempfile.TemporaryDirectory() as tmp:
        so = _build_c(tmp, "rows16", _C16)
        reps = 4096   # calls of about a millisecond
        for label, name, mb, nb in (("C tile 8 x 3, in L1", "t8x3", 8, 3),
                                    ("C tile 5 x 5, in L1", "t5x5", 5, 5),
                                    ("C tile 8 x 3, A in a register", "t8x3_areg", 8, 3)):
            fn = getattr(so, name)
            fn.argtypes = [P, P, P, ctypes.c_long]
            fns[label] = (lambda fn=fn: fn(a.ctypes.data_as(P), w.ctypes.data_as(P),
                                           out.ctypes.data_as(P), reps))
            flops[label] = 2.0 * mb * nb * 16 * (256 // 16) * reps
        for label, name in (("C tecomp's order, blocks of 256, W in L2", "b8x3_256"),
                            ("C tecomp's order, blocks of 4096, W in L2", "b8x3_4096")):
            fn = getattr(so, name)
            fn.argtypes = [P, P, P, ctypes.c_long, ctypes.c_long]
            fns[label] = (lambda fn=fn: fn(a.ctypes.data_as(P), w.ctypes.data_as(P),
                                           acc.ctypes.data_as(P), N, K))
            flops[label] = 2.0 * 16 * N * K
        t = interleaved_turns(fns, rounds, clock=time.process_time)
    peak = tc.viz.fma_peak(1, calls=15, bursts=3, pause=0.2)
    print(f"{tc.target.cpu_name()}, 1 thread, {rounds} rounds, CPU time; 16 rows of A, "
          f"K={K}; FMA peak {peak:.0f} GFLOP/s (wall clock, best of bursts)")
    for name, sec in t.items():
        g = flops[name] / sec / 1e9
        print(f"  {name:42s} {g:6.1f} GFLOP/s {100 * g / peak:4.0f}%")


def main() -> None:
    ap = base_parser(__doc__, rounds=5)
    ap.add_argument("--k", type=int, default=4096)
    ap.add_argument("--n", type=int, default=11016, help="rows of W (a multiple of 6)")
    ap.add_argument("--rows16", action="store_true",
                    help="the 16-row kernel against the FMA peak instead")
    args = ap.parse_args()
    if args.n % 6 or args.k % 16:
        ap.error("--n must be a multiple of 6 and --k of 16")
    pin_threads(1)
    import numpy as np

    import tecomp as tc
    from tecomp.strategy.cpu import cpu_model

    if cpu_model().lanes != 16:
        print("needs AVX-512 (the C models use 16-lane intrinsics)")
        return
    if args.rows16:
        rows16(args.rounds, args.k)
        return
    K, N = args.k, args.n
    rng = np.random.default_rng(0)
    w = tc.aligned(rng.standard_normal((N, K), dtype=np.float32))
    a = tc.aligned(rng.standard_normal((4, K), dtype=np.float32))
    want = a.astype(np.float64) @ w.T.astype(np.float64)
    fns = {}
    W = tc.placeholder((N, K), name="W")
    r = tc.reduce_axis((0, K), name="r")
    S = tc.compute((N,), lambda j: tc.sum(W[j, r], axis=r), name="rowsum")
    f_s = tc.build(tc.auto_schedule([W, S]), [W, S])
    s_out = tc.empty((N,), "float32")
    fns["read stream: tecomp row sum"] = lambda: f_s(w, s_out)
    for M in (1, 2, 4):
        A = tc.placeholder((M, K), name="A")
        k = tc.reduce_axis((0, K), name="k")
        C = tc.compute((M, N), lambda i, j: tc.sum(A[i, k] * W[j, k], axis=k), name="C")
        f = tc.build(tc.auto_schedule([A, W, C]), [A, W, C])
        c = tc.empty((M, N), "float32")
        am = np.ascontiguousarray(a[:M])
        f(am, w, c)
        np.testing.assert_allclose(c, want[:M], rtol=1e-3, atol=1e-2)
        fns[f"tecomp M={M}"] = lambda f=f, am=am, c=c: f(am, w, c)
    P = ctypes.POINTER(ctypes.c_float)
    with tempfile.TemporaryDirectory() as tmp:
        so = _build_c(tmp, "skinny", _C)
        for label, name, M in _KERNELS:
            fn = getattr(so, name)
            fn.argtypes = [P, P, P, ctypes.c_long, ctypes.c_long]
            c = np.zeros((M, N), np.float32)
            call = (lambda fn=fn, c=c: fn(a.ctypes.data_as(P), w.ctypes.data_as(P),
                                          c.ctypes.data_as(P), N, K))
            call()
            np.testing.assert_allclose(c, want[:M], rtol=1e-3, atol=1e-2)
            fns[f"C {label}"] = call
        t = interleaved_turns(fns, args.rounds, clock=time.process_time)
    stream = w.nbytes / t["read stream: tecomp row sum"] / 1e9
    print(f"{tc.target.cpu_name()}, 1 thread, {args.rounds} rounds, CPU time, K={K}, N={N} "
          f"float32 (W {w.nbytes / 1e6:.0f} MB), read stream {stream:.1f} GB/s")
    for name, sec in t.items():
        gbs = w.nbytes / sec / 1e9
        print(f"  {name:34s} {sec * 1e3:6.2f} ms {gbs:5.1f} GB/s "
              f"{100 * gbs / stream:4.0f}%")


if __name__ == "__main__":
    main()
