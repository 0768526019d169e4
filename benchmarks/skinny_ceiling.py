"""Why a 4-row skinny GEMM streams W slower than a GEMV: C models of the kernel, one thread.

    python3 benchmarks/skinny_ceiling.py [--rounds 5] [--k 4096] [--n 11016] [--rows16 | --two [--n2 4104] | --l3] [--knobs JSON ...]

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
* ``M=2``, and ``M=4`` with each row prefetched ``prefetcht0`` 1, 2 and 4 KiB ahead,
  ``prefetchnta`` 1 KiB, ``prefetcht1`` (into L2) 2, 4 and 8 KiB, ``prefetcht2`` 4 KiB;
  tiles of 8 rows of W (with and without a prefetch) and of 3;
* ``M=4, prefetcht1 2 KiB`` with W's vectors held in registers (each loaded once, the 4
  FMAs reading the register: what LLVM made of tecomp's kernel before ``pragma
  load_each_use``; gcc otherwise has each FMA load W, its memory operand), and with A's 4
  rows all one row (one load of A a step, from L1; not a GEMM of 4 rows), with and
  without W in registers (benchmarks/history/2026-12-01.md, session 20);
* tecomp's ``auto_schedule`` of the plain-TE ``A @ W^T`` with 1, 2 and 4 rows, and the
  read stream (a plain-TE row sum of W, the share's 100%); ``--knobs JSON`` (repeatable)
  adds tecomp's 4-row kernel with those knob values (the rest as ``auto_schedule``
  chooses them), e.g. the schedule before W was prefetched into L2:
  ``--knobs '{"skinny.stream_level": 1, "skinny.stream_bytes": 1024, "skinny.kblock": 1024}'``.

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

``--two``: two threads (issue 49's 2-thread case), C models (OpenMP) timed by the wall
clock on a W of ``--n2`` rows (4104: 64 MiB, twice L3, the calls short enough to find
both threads on their cores; two copies read in turn, so that no call finds W in L3),
counting only the calls in which both threads held their cores throughout (each
thread's CPU time 97-103% of the call's: on a loaded 2-core VM a call in which one was
preempted says nothing about the memory, and a lockstep plan stalls with it), medians
and the best of those (``--dump FILE`` appends them, to pool runs): the read stream on
two threads (halves of W) and on one; W split between the threads (the 4 x 6 tile,
without a prefetch, with ``prefetcht0`` 1 KiB ahead and with ``prefetcht1`` 2 KiB ahead:
tecomp's plan); tecomp's own kernel (``auto_schedule``, and one per ``--knobs``) over
the same two copies of W, a call counted where the process's CPU time was 97-103% of
twice the call's; **A split**, each thread 2 of the
4 rows of A over all of W with a 2 x 4 tile, a barrier per chunk of W so that a line
comes from memory once (in lockstep; in lockstep with each thread prefetching half of
each row 4 MiB ahead; or the chunks taken in pairs in opposite orders, so that each
thread reads half of them first); and **a streaming thread**, reading W a chunk ahead of
the other, which computes the 4 rows from L3.

``--l3``: one thread, CPU time, the tiles over a W that stays in L2 or L3 (0.75, 7.5 and
15 MiB, called again and again) and from memory (172 MiB): what a 4-row tile streams
from L3 (the ceiling of a streaming thread's partner), and the 4 x 6 tile with W read by
non-temporal loads (``vmovntdqa``).
"""
from __future__ import annotations

import ctypes
import os
import tempfile
import time

from common import base_parser, interleaved_turns, pin_threads

# KERN(NAME, M, NB, FREE, PF, LOAD): rows [j0, j1) of W (N x K, tiles of NB rows) against
# M rows of A (C's rows N apart), FREE more FMAs per vector of W that do not read it,
# each row of W prefetched PF bytes ahead (0: none), W read by LOAD (LD: plain loads, NT:
# non-temporal) and prefetched with HINT (KERNH); WHOLE(NAME, M, FREE, PF): tiles of 6
# rows over all of W, WHOLEH(NAME, M, NB, FREE, PF, HINT) of NB rows (N a multiple of 24)
_KERN = r"""
#include <immintrin.h>
#define LD(p) _mm512_loadu_ps(p)
#define NT(p) _mm512_castsi512_ps(_mm512_stream_load_si512((void*)(p)))
#define KERN(NAME, M, NB, FREE, PF, LOAD) KERNH(NAME, M, NB, FREE, PF, LOAD, _MM_HINT_T0)
#define KERNH(NAME, M, NB, FREE, PF, LOAD, HINT) KERNX(NAME, M, NB, FREE, PF, LOAD, HINT, 0, K)
#define KERNX(NAME, M, NB, FREE, PF, LOAD, HINT, WREG, ASTR)                           \
static void NAME(const float* A, const float* W, float* C, long N, long K, long j0, long j1) { \
  for (long j = j0; j < j1; j += NB) {                                                 \
    __m512 acc[M][NB], idle[FREE + 1][NB], half = _mm512_set1_ps(0.5f);                \
    for (int i = 0; i < M; i++) for (int b = 0; b < NB; b++) acc[i][b] = _mm512_setzero_ps(); \
    for (int e = 0; e <= FREE; e++) for (int b = 0; b < NB; b++) idle[e][b] = _mm512_setzero_ps(); \
    for (long k = 0; k < K; k += 16) {                                                 \
      __m512 w[NB];                                                                    \
      for (int b = 0; b < NB; b++) {                                                   \
        if (PF) _mm_prefetch((const char*)(W + (j + b) * K + k) + PF, HINT);           \
        w[b] = LOAD(W + (j + b) * K + k);                                              \
        if (WREG) __asm__("" : "+v"(w[b]));                                            \
      }                                                                                \
      for (int i = 0; i < M; i++) {                                                    \
        __m512 a = _mm512_loadu_ps(A + i * (ASTR) + k);                                \
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
#define WHOLE(NAME, M, FREE, PF) WHOLEH(NAME, M, 6, FREE, PF, _MM_HINT_T0)
#define WHOLEH(NAME, M, NB, FREE, PF, HINT) KERNH(NAME##_tiles, M, NB, FREE, PF, LD, HINT) \
void NAME(const float* A, const float* W, float* C, long N, long K) { NAME##_tiles(A, W, C, N, K, 0, N); }
#define WHOLEX(NAME, M, NB, PF, HINT, WREG, ASTR) KERNX(NAME##_tiles, M, NB, 0, PF, LD, HINT, WREG, ASTR) \
void NAME(const float* A, const float* W, float* C, long N, long K) { NAME##_tiles(A, W, C, N, K, 0, N); }
"""
_C = _KERN + r"""
WHOLE(gemv, 1, 0, 0)
WHOLE(gemv_free3, 1, 3, 0)
WHOLE(m2, 2, 0, 0)
WHOLE(m4, 4, 0, 0)
WHOLE(m4_pf1k, 4, 0, 1024)
WHOLE(m4_pf2k, 4, 0, 2048)
WHOLEH(m4_nta1k, 4, 6, 0, 1024, _MM_HINT_NTA)
WHOLEH(m4_t1_4k, 4, 6, 0, 4096, _MM_HINT_T1)
WHOLEH(m4_t2_4k, 4, 6, 0, 4096, _MM_HINT_T2)
WHOLEH(m4_t1_2k, 4, 6, 0, 2048, _MM_HINT_T1)
WHOLEH(m4_t1_8k, 4, 6, 0, 8192, _MM_HINT_T1)
WHOLEH(m4_t0_4k, 4, 6, 0, 4096, _MM_HINT_T0)
WHOLEH(m4x8_t1_4k, 4, 8, 0, 4096, _MM_HINT_T1)
WHOLEH(m4x8, 4, 8, 0, 0, _MM_HINT_T0)
WHOLEH(m4x8_pf1k, 4, 8, 0, 1024, _MM_HINT_T0)
WHOLEH(m4x3, 4, 3, 0, 0, _MM_HINT_T0)
WHOLEX(m4_t1_2k_wreg, 4, 6, 2048, _MM_HINT_T1, 1, K)
WHOLEX(m4_t1_2k_a1, 4, 6, 2048, _MM_HINT_T1, 0, 0)
WHOLEX(m4_t1_2k_wreg_a1, 4, 6, 2048, _MM_HINT_T1, 1, 0)
"""

_KERNELS = [("GEMV", "gemv", 1), ("GEMV + 3 FMAs not on W", "gemv_free3", 1),
            ("GEMV + 3 FMAs on W (M=4)", "m4", 4), ("M=2", "m2", 2),
            ("M=4, prefetcht0 1 KiB ahead", "m4_pf1k", 4),
            ("M=4, prefetcht0 2 KiB ahead", "m4_pf2k", 4),
            ("M=4, prefetchnta 1 KiB ahead", "m4_nta1k", 4),
            ("M=4, prefetcht1 4 KiB ahead", "m4_t1_4k", 4),
            ("M=4, prefetcht2 4 KiB ahead", "m4_t2_4k", 4),
            ("M=4, prefetcht1 2 KiB ahead", "m4_t1_2k", 4),
            ("M=4, prefetcht1 8 KiB ahead", "m4_t1_8k", 4),
            ("M=4, prefetcht0 4 KiB ahead", "m4_t0_4k", 4),
            ("M=4, 4 x 8, prefetcht1 4 KiB", "m4x8_t1_4k", 4),
            ("M=4, 4 x 8 tile", "m4x8", 4), ("M=4, 4 x 8, prefetcht0 1 KiB", "m4x8_pf1k", 4),
            ("M=4, 4 x 3 tile", "m4x3", 4),
            ("M=4, prefetcht1 2 KiB, W in registers", "m4_t1_2k_wreg", 4),
            ("M=4, prefetcht1 2 KiB, A one row (L1)", "m4_t1_2k_a1", 4),
            ("M=4, t1 2 KiB, W in regs, A one row", "m4_t1_2k_wreg_a1", 4)]


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


# --two and --l3: the tiles (KERN), BODY(NAME): what thread t does in a 2-thread call
# (`run` times it), `one`: a tile on one thread
_C2 = _KERN + r"""
#include <omp.h>
#include <stdatomic.h>
#include <time.h>
KERN(t1x4, 1, 4, 0, 0, LD)
KERN(t2x4, 2, 4, 0, 0, LD)
KERN(t4x6, 4, 6, 0, 0, LD)
KERN(t4x6p, 4, 6, 0, 1024, LD)
KERNH(t4x6p2, 4, 6, 0, 2048, LD, _MM_HINT_T1)
KERN(t4x8, 4, 8, 0, 0, LD)
KERN(t4x6nt, 4, 6, 0, 0, NT)
/* the 2 x 4 tile, each step also prefetching into L2 rows j + 2t and j + 2t + 1 `ahead`
   rows on: two threads on the same rows of W prefetch all of its rows between them */
static void t2x4s(const float* A, const float* W, float* C, long N, long K, long j0, long j1, int t, long ahead) {
  for (long j = j0; j < j1; j += 4) {
    __m512 acc[2][4];
    for (int i = 0; i < 2; i++) for (int b = 0; b < 4; b++) acc[i][b] = _mm512_setzero_ps();
    long pr = j + ahead + 2 * t < N - 1 ? j + ahead + 2 * t : N - 2;
    const char *p0 = (const char*)(W + pr * K), *p1 = (const char*)(W + (pr + 1) * K);
    for (long k = 0; k < K; k += 16) {
      _mm_prefetch(p0 + 4 * k, _MM_HINT_T1); _mm_prefetch(p1 + 4 * k, _MM_HINT_T1);
      __m512 w[4];
      for (int b = 0; b < 4; b++) w[b] = _mm512_loadu_ps(W + (j + b) * K + k);
      for (int i = 0; i < 2; i++) {
        __m512 a = _mm512_loadu_ps(A + i * K + k);
        for (int b = 0; b < 4; b++) acc[i][b] = _mm512_fmadd_ps(a, w[b], acc[i][b]);
      }
    }
    for (int i = 0; i < 2; i++) for (int b = 0; b < 4; b++) C[i * N + j + b] = _mm512_reduce_add_ps(acc[i][b]);
  }
}
/* every line of rows [j0, j1) of W read once, summed */
static float touch(const float* W, long K, long j0, long j1) {
  __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  for (const float *p = W + j0 * K, *e = W + j1 * K; p < e; p += 64) {
    s0 = _mm512_add_ps(s0, _mm512_load_ps(p));      s1 = _mm512_add_ps(s1, _mm512_load_ps(p + 16));
    s2 = _mm512_add_ps(s2, _mm512_load_ps(p + 32)); s3 = _mm512_add_ps(s3, _mm512_load_ps(p + 48));
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
}
static _Alignas(64) _Atomic long prog[2][16];   /* chunks each thread has finished */
volatile float sink;
typedef struct { const float *A, *W; float* C; long N, K, ch, lag, ahead; } args_t;
#define BODY(NAME) static void NAME(int t, const args_t* a)
#define MIN(x, y) ((x) < (y) ? (x) : (y))
static void wait_for(int t, long c) { while (atomic_load_explicit(&prog[1 - t][0], memory_order_acquire) < c) _mm_pause(); }
static void done(int t, long c) { atomic_store_explicit(&prog[t][0], c, memory_order_release); }
#define KEEP(x) do { float s_ = (x); if (s_ == 1234.5f) sink = s_; } while (0)
BODY(stream2) { long h = a->N / 2; KEEP(touch(a->W, a->K, t * h, t ? a->N : h)); }
BODY(stream1) { if (!t) KEEP(touch(a->W, a->K, 0, a->N)); }
BODY(w_m4) { long h = a->N / 12 * 6; t4x6(a->A, a->W, a->C, a->N, a->K, t ? h : 0, t ? a->N : h); }
BODY(w_m4p) { long h = a->N / 12 * 6; t4x6p(a->A, a->W, a->C, a->N, a->K, t ? h : 0, t ? a->N : h); }
BODY(w_m4p2) { long h = a->N / 12 * 6; t4x6p2(a->A, a->W, a->C, a->N, a->K, t ? h : 0, t ? a->N : h); }
/* A split: rows 2t, 2t + 1 over all of W in chunks of ch rows; before chunk c, the other
   thread has finished chunk c - 1 - lag */
BODY(a_lock) {
  long N = a->N, K = a->K, ch = a->ch, c = 0;
  for (long j = 0; j < N; j += ch, c++) {
    wait_for(t, c - a->lag);
    t2x4(a->A + 2 * t * K, a->W, a->C + 2 * t * N, N, K, j, MIN(j + ch, N));
    done(t, c + 1);
  } }
BODY(a_lock_pf) {
  long N = a->N, K = a->K, ch = a->ch, c = 0;
  for (long j = 0; j < N; j += ch, c++) {
    wait_for(t, c - a->lag);
    t2x4s(a->A + 2 * t * K, a->W, a->C + 2 * t * N, N, K, j, MIN(j + ch, N), t, a->ahead);
    done(t, c + 1);
  } }
/* A split, the chunks in pairs, thread 1 taking each pair's second chunk first */
BODY(a_swap) {
  long N = a->N, K = a->K, ch = a->ch, nc = (N + ch - 1) / ch;
  for (long c = 0; c < nc; c++) {
    long q = (t && (c ^ 1) < nc) ? c ^ 1 : c;
    if (!(c & 1)) wait_for(t, c - 2 * a->lag);
    t2x4(a->A + 2 * t * K, a->W, a->C + 2 * t * N, N, K, q * ch, MIN(q * ch + ch, N));
    done(t, c + 1);
  } }
/* a streaming thread (0) reads chunk c while at most lag chunks ahead of thread 1, which
   computes the 4 rows with the 4 x 6 tile */
BODY(streamer) {
  long N = a->N, K = a->K, ch = a->ch, nc = (N + ch - 1) / ch;
  if (t == 1) {
    for (long c = 0; c < nc; c++) { t4x6(a->A, a->W, a->C, N, K, c * ch, MIN(c * ch + ch, N)); done(1, c + 1); }
    return;
  }
  for (long c = 0; c < nc;) {
    long d = atomic_load_explicit(&prog[1][0], memory_order_acquire);
    if (c < d) c = d;
    if (c >= nc) break;
    if (c > d + a->lag) { _mm_pause(); continue; }
    KEEP(touch(a->W, K, c * ch, MIN(c * ch + ch, N))); c++;
  } }
typedef void (*body_t)(int, const args_t*);
static const body_t bodies[] = {stream2, stream1, w_m4, w_m4p, a_lock, a_lock_pf, a_swap, streamer, w_m4p2};
static double now(clockid_t id) { struct timespec ts; clock_gettime(id, &ts); return ts.tv_sec + 1e-9 * ts.tv_nsec; }
/* body v on two threads: the call's wall seconds (from the first thread's start to the
   last one's end); *busy: the smallest share of it a thread spent on its core
   (`threads`: whose shares count) */
double run(int v, int threads, const float* A, const float* W, float* C, long N, long K, long ch, long lag, long ahead, double* busy) {
  args_t a = {A, W, C, N, K, ch, lag, ahead};
  double start[2], end[2], cpu[2];
  atomic_store(&prog[0][0], 0); atomic_store(&prog[1][0], 0);
  #pragma omp parallel num_threads(2)
  { int t = omp_get_thread_num();
    #pragma omp barrier
    start[t] = now(CLOCK_MONOTONIC);
    double c0 = now(CLOCK_THREAD_CPUTIME_ID);
    bodies[v](t, &a);
    cpu[t] = now(CLOCK_THREAD_CPUTIME_ID) - c0;
    end[t] = now(CLOCK_MONOTONIC);
  }
  double wall = (end[0] > end[1] ? end[0] : end[1]) - MIN(start[0], start[1]);
  *busy = (threads == 1 ? cpu[0] : MIN(cpu[0], cpu[1])) / wall;
  return wall;
}
/* one thread: tile v over rows [0, N) of W, the thread's CPU seconds */
double one(int v, const float* A, const float* W, float* C, long N, long K) {
  double c0 = now(CLOCK_THREAD_CPUTIME_ID);
  switch (v) {
    case 0: KEEP(touch(W, K, 0, N)); break;
    case 1: t1x4(A, W, C, N, K, 0, N); break;
    case 2: t2x4(A, W, C, N, K, 0, N); break;
    case 3: t4x6(A, W, C, N, K, 0, N); break;
    case 4: t4x6p(A, W, C, N, K, 0, N); break;
    case 5: t4x8(A, W, C, N, K, 0, N); break;
    case 6: t4x6nt(A, W, C, N, K, 0, N); break;
  }
  return now(CLOCK_THREAD_CPUTIME_ID) - c0;
}
"""


def _build_c(tmp: str, name: str, code: str, *flags: str):
    """``code`` built into a shared library in ``tmp`` (gcc -O3 -march=native)."""
    import subprocess

    src, lib = os.path.join(tmp, f"{name}.c"), os.path.join(tmp, f"{name}.so")
    with open(src, "w") as fh:
        fh.write(code)
    subprocess.run(["gcc", "-O3", "-march=native", "-funroll-loops", "-shared", "-fPIC",
                    *flags, src, "-o", lib], check=True)
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


# --two: (label, body, threads whose time counts, chunk rows, lag, rows of W the
# shared prefetch runs ahead, rows of A checked)
_TWO = [("read stream, 2 threads", 0, 2, 0, 0, 0, 0),
        ("read stream, 1 thread", 1, 1, 0, 0, 0, 0),
        ("W split, 4 x 6 tile", 2, 2, 0, 0, 0, 4),
        ("W split, 4 x 6, prefetcht0 1 KiB", 3, 2, 0, 0, 0, 4),
        ("W split, 4 x 6, prefetcht1 2 KiB (tecomp's)", 8, 2, 0, 0, 0, 4),
        ("A split, lockstep, chunks 768 KiB", 4, 2, 48, 0, 0, 4),
        ("A split, lockstep, prefetch shared 4 MiB", 5, 2, 24, 0, 256, 4),
        ("A split, pairs swapped, 2.25 MiB", 6, 2, 144, 0, 0, 4),
        ("streaming thread 1 chunk (768 KiB) ahead", 7, 2, 48, 1, 0, 4)]
# --l3: (label, tile of `one`)
_L3 = [("read stream", 0), ("1 x 4 (M=1)", 1), ("2 x 4 (M=2)", 2), ("4 x 6 (M=4)", 3),
       ("4 x 6, prefetch 1 KiB", 4), ("4 x 8", 5), ("4 x 6, non-temporal loads", 6)]


def _operands(N: int, K: int):
    """W (N x K) and A (4 x K), 64-byte aligned, and A @ W^T in float64."""
    import numpy as np

    import tecomp as tc

    rng = np.random.default_rng(0)
    w = tc.aligned(rng.standard_normal((N, K), dtype=np.float32))
    a = tc.aligned(rng.standard_normal((4, K), dtype=np.float32))
    return a, w, a.astype(np.float64) @ w.T.astype(np.float64)


def _tecomp_kernels(N: int, K: int, knobs) -> dict:
    """tecomp's kernels of the plain-TE ``A @ W^T`` (4 rows of A, W ``N x K``): label ->
    built function; ``auto_schedule``'s and one for each JSON string of knob values in
    ``knobs`` (the rest as it chooses them)."""
    import json

    import tecomp as tc
    from tecomp.strategy import Knobs, apply_rules
    from tecomp.strategy.cpu import cpu_model

    A = tc.placeholder((4, K), name="A")
    W = tc.placeholder((N, K), name="W")
    k = tc.reduce_axis((0, K), name="k")
    C = tc.compute((4, N), lambda i, j: tc.sum(A[i, k] * W[j, k], axis=k), name="C")
    fns = {"tecomp auto_schedule": tc.build(tc.auto_schedule([A, W, C]), [A, W, C])}
    for kn in knobs:
        s = apply_rules([A, W, C], Knobs(json.loads(kn)), cpu_model())
        fns[f"tecomp {kn}"] = tc.build(s, [A, W, C])
    return fns


def two(rounds: int, K: int, N: int, dump: str | None = None, knobs=()) -> None:
    """The ``--two`` table (see the module docstring)."""
    import os
    import statistics

    import numpy as np

    import tecomp as tc

    a, w, want = _operands(N, K)
    # two copies of W, each call reading the other one: what the last call left in L3
    # is never read again before as much again has gone through
    ws, c = [w, tc.aligned(np.array(w))], np.zeros((4, N), np.float32)
    P, busy = ctypes.POINTER(ctypes.c_float), ctypes.c_double()
    with tempfile.TemporaryDirectory() as tmp:
        so = _build_c(tmp, "two", _C2, "-fopenmp")
    so.run.restype = ctypes.c_double
    so.run.argtypes = [ctypes.c_int, ctypes.c_int, P, P, P] + [ctypes.c_long] * 5 + [
        ctypes.POINTER(ctypes.c_double)]
    ptrs, turn = [a.ctypes.data_as(P), c.ctypes.data_as(P)], [0]

    def call(v, th, ch, lag, ahead):
        turn[0] ^= 1
        sec = so.run(v, th, ptrs[0], ws[turn[0]].ctypes.data_as(P), ptrs[1], N, K, ch, lag,
                     ahead, ctypes.byref(busy))
        return sec, busy.value

    def tecomp_call(f):
        # the same W in turn; both threads on their cores: the process's CPU time
        # (tecomp's two threads and Python's share of the call) twice the wall clock
        turn[0] ^= 1
        t0, c0 = time.perf_counter(), time.process_time()
        f(a, ws[turn[0]], c)
        c1, t1 = time.process_time(), time.perf_counter()
        return t1 - t0, (c1 - c0) / (2 * (t1 - t0))

    # (label, call, rows of A checked)
    models = [(label, lambda v=v, th=th, ch=ch, lag=lag, ahead=ahead: call(v, th, ch, lag, ahead), m)
              for label, v, th, ch, lag, ahead, m in _TWO]
    models += [(label, lambda f=f: tecomp_call(f), 4)
               for label, f in _tecomp_kernels(N, K, knobs).items()]
    kept = {m[0]: [] for m in models}
    calls = dict.fromkeys(kept, 0)
    load = os.getloadavg()[0]
    for r in range(rounds):   # turns of ~0.1 s, the order rotating, each result checked
        for label, fn, m in models[r % len(models):] + models[:r % len(models)]:
            c[...] = np.nan
            fn()
            t_end = time.perf_counter() + 0.1
            while calls[label] < 4 or time.perf_counter() < t_end:
                sec, share = fn()
                calls[label] += 1
                if 0.97 <= share <= 1.03:
                    kept[label].append(sec)
            if m:
                np.testing.assert_allclose(c[:m], want[:m], rtol=1e-3, atol=1e-2)
    load = (load, os.getloadavg()[0])
    if dump:      # the kept calls' seconds, one line of JSON a run (to pool runs)
        import json

        with open(dump, "a") as fh:
            fh.write(json.dumps({"N": N, "K": K, "load": load, "calls": calls, "kept": kept})
                     + "\n")
    ref = _TWO[0][0]
    if not kept[ref]:
        print("no call of the read stream found both threads on their cores: too loaded")
        return
    med0, best0 = statistics.median(kept[ref]), min(kept[ref])
    print(f"{tc.target.cpu_name()}, 2 threads, {rounds} rounds, wall clock, K={K}, N={N} "
          f"(W {w.nbytes / 2**20:.0f} MiB), load {load[0]:.1f}-{load[1]:.1f}; calls in which "
          f"both threads held their cores: read stream {w.nbytes / med0 / 1e9:.1f} GB/s "
          f"(median), {w.nbytes / best0 / 1e9:.1f} (best)")
    print(f"  {'':44s} {'calls':>9s}  median GB/s, share   best GB/s, share")
    for label in kept:
        ks = kept[label]
        if not ks:
            print(f"  {label:44s} {0:4d}/{calls[label]:4d}  -")
            continue
        med, best = statistics.median(ks), min(ks)
        print(f"  {label:44s} {len(ks):4d}/{calls[label]:4d}  {w.nbytes / med / 1e9:6.1f} "
              f"{100 * med0 / med:4.0f}%      {w.nbytes / best / 1e9:6.1f} {100 * best0 / best:4.0f}%")


def l3(rounds: int, K: int) -> None:
    """The ``--l3`` table (see the module docstring)."""
    import statistics

    import numpy as np

    import tecomp as tc

    sizes = (48, 480, 960, 11016)       # rows of W: 0.75, 7.5, 15, 172 MiB
    a, w, want = _operands(sizes[-1], K)
    c = np.zeros((4, sizes[-1]), np.float32)
    P = ctypes.POINTER(ctypes.c_float)
    with tempfile.TemporaryDirectory() as tmp:
        so = _build_c(tmp, "l3", _C2, "-fopenmp")
    so.one.restype = ctypes.c_double
    so.one.argtypes = [ctypes.c_int, P, P, P, ctypes.c_long, ctypes.c_long]
    t = {}
    for r in range(rounds):
        for n in sizes:
            for label, v in _L3[r % len(_L3):] + _L3[:r % len(_L3)]:
                sec = [so.one(v, a.ctypes.data_as(P), w.ctypes.data_as(P),
                              c.ctypes.data_as(P), n, K) for _ in range(2 + 20 * sizes[-1] // n)]
                t.setdefault((n, label), []).append(statistics.median(sec[2:]))
                if v and n == sizes[-1]:
                    m = {1: 1, 2: 2}.get(v, 4)
                    np.testing.assert_allclose(c[:m], want[:m], rtol=1e-3, atol=1e-2)
    print(f"{tc.target.cpu_name()}, 1 thread, {rounds} rounds, CPU time, K={K}: GB/s of W "
          "(W read again and again where it fits in the caches)")
    print("  " + " " * 28 + "".join(f"{n * K * 4 / 2**20:>9.2f} MiB" for n in sizes))
    for label, _ in _L3:
        print(f"  {label:28s}" + "".join(
            f"{n * K * 4 / statistics.median(t[(n, label)]) / 1e9:13.1f}" for n in sizes))


def main() -> None:
    ap = base_parser(__doc__, rounds=5)
    ap.add_argument("--k", type=int, default=4096)
    ap.add_argument("--n", type=int, default=11016, help="rows of W (a multiple of 24)")
    ap.add_argument("--rows16", action="store_true",
                    help="the 16-row kernel against the FMA peak instead")
    ap.add_argument("--two", action="store_true",
                    help="2-thread models of 4 rows (W split, A split, a streaming thread)")
    ap.add_argument("--n2", type=int, default=4104,
                    help="rows of W for --two (a multiple of 24; two copies are read in turn)")
    ap.add_argument("--dump", help="--two: append the kept calls' times to this file (JSON lines)")
    ap.add_argument("--knobs", action="append", default=[],
                    help="one more tecomp kernel of 4 rows, the plain compute with these "
                         "JSON knob values (repeatable)")
    ap.add_argument("--l3", action="store_true",
                    help="1 thread, the tiles with W in L2 / L3 and from memory")
    args = ap.parse_args()
    if args.n % 24 or args.k % 16:
        ap.error("--n must be a multiple of 24 and --k of 16")
    # --two: the waiting thread spins at the barriers rather than sleeps (set before
    # libgomp loads)
    os.environ.setdefault("OMP_WAIT_POLICY", "active")
    # ... for a while only: a C model's worker spinning through tecomp's turns would
    # take a core from tecomp's threads (active alone spins for billions of iterations)
    os.environ.setdefault("GOMP_SPINCOUNT", "300000")
    pin_threads(2 if args.two else 1)
    import numpy as np

    import tecomp as tc
    from tecomp.strategy.cpu import cpu_model

    if cpu_model().lanes != 16:
        print("needs AVX-512 (the C models use 16-lane intrinsics)")
        return
    if args.rows16:
        rows16(args.rounds, args.k)
        return
    if args.two:
        if args.n2 % 24:
            ap.error("--n2 must be a multiple of 24")
        two(args.rounds, args.k, args.n2, args.dump, args.knobs)
        return
    if args.l3:
        l3(args.rounds, args.k)
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
    for label, f in list(_tecomp_kernels(N, K, args.knobs).items())[1:]:
        c = tc.empty((4, N), "float32")
        f(a, w, c)
        np.testing.assert_allclose(c, want, rtol=1e-3, atol=1e-2)
        fns[f"M=4 {label}"] = lambda f=f, c=c: f(a, w, c)
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
            # (A one row: the 4 rows of C are its row's)
            ref = np.repeat(want[:1], 4, 0) if name.endswith("_a1") else want[:M]
            np.testing.assert_allclose(c, ref, rtol=1e-3, atol=1e-2)
            fns[f"C {label}"] = call
        t = interleaved_turns(fns, args.rounds, clock=time.process_time)
    stream = w.nbytes / t["read stream: tecomp row sum"] / 1e9
    print(f"{tc.target.cpu_name()}, 1 thread, {args.rounds} rounds, CPU time, K={K}, N={N} "
          f"float32 (W {w.nbytes / 1e6:.0f} MB), read stream {stream:.1f} GB/s")
    for name, sec in t.items():
        gbs = w.nbytes / sec / 1e9
        print(f"  {name:44s} {sec * 1e3:6.2f} ms {gbs:5.1f} GB/s "
              f"{100 * gbs / stream:4.0f}%")


if __name__ == "__main__":
    main()
