// tecomp CUDA emulation: run tecomp's generated CUDA C on the CPU, one block at a time.
//
// The generated kernel text (the exact text that nvcc compiles) is compiled by a C++17
// compiler with this header forced in front of it (g++ -include).  The header maps the
// CUDA vocabulary that tecomp emits onto the CPU:
//
//   __global__, __device__, __forceinline__, __launch_bounds__  -> nothing / inline
//   __restrict__                   -> __restrict
//   __align__(n)                   -> __attribute__((aligned(n)))
//   __shared__                     -> static.  Blocks run one at a time, so a
//                                     function-scope static array is exactly "one copy
//                                     per block, seen by all the block's threads".  Like
//                                     CUDA shared memory it keeps whatever the previous
//                                     block left there (it is never cleared).
//   threadIdx, blockIdx            -> thread_local uint3, set for each emulated thread
//   blockDim, gridDim              -> globals set for each launch
//   __syncthreads()                -> a real barrier among the block's threads
//   half, __half2float, __float2half, __double2half,
//   __nv_bfloat16, __bfloat162float, __float2bfloat16
//                                  -> 16-bit storage structs and correctly rounded
//                                     (round-to-nearest-even) conversions
//   rsqrtf, __expf, __logf, __fdividef, __int_as_float, min/max, __trap, printf -> CPU equivalents
//   atomicAdd (float32)            -> a compare-and-swap loop
//   nvcuda::wmma (<mma.h>)         -> fragments that hold a whole tile in every thread
//                                     (the end of this file)
//   ldmatrix, mma.sync (PTX, through tecomp's tc_ldmatrix_* / tc_mma_* helpers)
//                                  -> per-lane registers exchanged among the 32 lanes
//                                     of a warp at a warp-wide rendezvous, with the
//                                     PTX ISA's lane mappings (the end of this file)
//
// The threads of a block run in one of four modes (LAST_BLOCK_FIRST (3): SERIAL's, the
// blocks run last first):
//
//   TECOMP_EMU_THREADS (0): one OS thread per CUDA thread (pthreads, created once per
//       launch and reused for every block), __syncthreads() a mutex/condition-variable
//       barrier.  Threads really run concurrently, so a missing barrier is a real race.
//   TECOMP_EMU_SERIAL (1), TECOMP_EMU_REVERSE (2): deterministic.  Each CUDA thread is a
//       fiber (ucontext) on the calling OS thread; the scheduler runs the fibers one at
//       a time, each until its next __syncthreads() (or its end), in thread order (or
//       reverse thread order), then starts the next round.  A schedule that is missing
//       a barrier reads data that no thread has written yet and gives a wrong answer
//       every time.  Kernels without __syncthreads() need no fibers: their threads run
//       as plain calls in that order.
//
// Each emulated thread's stack (an OS thread's, or a fiber's: mapped, with a guard page
// below it) holds the kernel's local arrays: the launcher passes their size plus the
// rest a thread's frames need (tecomp/codegen/cuda_emu.py, thread_stack_bytes).
//
// A barrier that the threads of a block do not all reach (a __syncthreads() under a
// thread-dependent condition, or some threads returning early) is reported as an error
// instead of hanging; so is a warp-wide operation (ldmatrix, mma.sync) that the 32 lanes
// of a warp do not all reach.  A kernel that makes warp-wide operations is launched as
// one with barriers (has_barrier): its threads are fibers or wait for each other.  __trap() (a failed run-time check) aborts the launch with the
// message the kernel printed.  Launches are serialized (the static __shared__ arrays
// belong to the loaded library).
#pragma once

#include <map>
#include <utility>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>


#define TECOMP_CUDA_EMU 1
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __restrict__ __restrict
#define __shared__ static
#define __launch_bounds__(...)
#define __grid_constant__
#define __align__(n) __attribute__((aligned(n)))

struct uint3 { unsigned int x, y, z; };
struct dim3 { unsigned int x, y, z; };

static thread_local uint3 threadIdx;
static thread_local uint3 blockIdx;
static dim3 blockDim;
static dim3 gridDim;
static const int warpSize = 32;

// ---------------------------------------------------------------------------- half

struct __half { unsigned short __x; };
typedef __half half;

namespace tecomp_emu {

// Round a double to the nearest float16 (ties to even).  A float converts to double
// exactly, so this one routine gives correctly rounded float->half and double->half.
inline unsigned short double_to_half_bits(double d) {
  uint64_t b;
  memcpy(&b, &d, sizeof b);
  unsigned short sign = (unsigned short)((b >> 48) & 0x8000u);
  int exp = (int)((b >> 52) & 0x7ff);
  uint64_t man = b & 0xFFFFFFFFFFFFFull;
  if (exp == 0x7ff) return (unsigned short)(sign | (man ? 0x7e00u : 0x7c00u));  // NaN / inf
  if (exp == 0) return sign;  // zero or a double subnormal: far below half's range
  int e = exp - 1023;
  if (e > 15) return (unsigned short)(sign | 0x7c00u);  // overflow -> inf
  if (e < -25) return sign;                               // below half the smallest subnormal
  uint64_t sig = man | (1ull << 52);                      // 53 significant bits
  int shift = (e >= -14) ? 42 : 42 + (-14 - e);           // bits dropped
  uint64_t q = sig >> shift;
  uint64_t rem = sig & ((1ull << shift) - 1);
  uint64_t halfway = 1ull << (shift - 1);
  if (rem > halfway || (rem == halfway && (q & 1))) ++q;
  if (e < -14) return (unsigned short)(sign | q);         // subnormal (q may round up to 0x400)
  unsigned int h = ((unsigned int)(e + 15) << 10) + (unsigned int)(q - 0x400);
  if (h >= 0x7c00u) return (unsigned short)(sign | 0x7c00u);
  return (unsigned short)(sign | h);
}

inline float half_bits_to_float(unsigned short h) {
  unsigned int sign = (unsigned int)(h & 0x8000u) << 16;
  unsigned int exp = (h >> 10) & 0x1f, man = h & 0x3ffu, bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign;
  } else {  // subnormal half: normalize
    int e = -1;
    do { ++e; man <<= 1; } while ((man & 0x400u) == 0);
    bits = sign | ((unsigned int)(112 - e) << 23) | ((man & 0x3ffu) << 13);
  }
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

}  // namespace tecomp_emu

inline float __half2float(half h) { return tecomp_emu::half_bits_to_float(h.__x); }
inline half __float2half(float f) { half h; h.__x = tecomp_emu::double_to_half_bits((double)f); return h; }
inline half __float2half_rn(float f) { return __float2half(f); }
inline half __double2half(double d) { half h; h.__x = tecomp_emu::double_to_half_bits(d); return h; }

// ---------------------------------------------------------------------------- bfloat16

struct __nv_bfloat16 { unsigned short __x; };

inline float __bfloat162float(__nv_bfloat16 h) {
  unsigned int b = (unsigned int)h.__x << 16;
  float f;
  memcpy(&f, &b, sizeof f);
  return f;
}
// Round a float to the nearest bfloat16 (ties to even); a NaN stays a (quiet) NaN.
inline __nv_bfloat16 __float2bfloat16(float f) {
  unsigned int b;
  memcpy(&b, &f, sizeof b);
  __nv_bfloat16 h;
  if ((b & 0x7fffffffu) > 0x7f800000u) {
    h.__x = (unsigned short)((b >> 16) | 0x0040u);
  } else {
    h.__x = (unsigned short)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
  }
  return h;
}
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __float2bfloat16(f); }

// ---------------------------------------------------------------------------- math

inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __fdividef(float x, float y) { return x / y; }
inline float __int_as_float(int i) { float f; memcpy(&f, &i, sizeof f); return f; }
inline float __int_as_float(unsigned int i) { float f; memcpy(&f, &i, sizeof f); return f; }
inline int __float_as_int(float f) { int i; memcpy(&i, &f, sizeof i); return i; }
inline double __longlong_as_double(long long i) { double d; memcpy(&d, &i, sizeof d); return d; }
inline long long __double_as_longlong(double d) { long long i; memcpy(&i, &d, sizeof i); return i; }
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned int min(unsigned int a, unsigned int b) { return a < b ? a : b; }
inline unsigned int max(unsigned int a, unsigned int b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }

// ---------------------------------------------------------------------------- runtime
// (C headers and pthreads only: this header is compiled with every kernel, so it must be
// quick to compile.)

namespace tecomp_emu {

enum Mode { THREADS = 0, SERIAL = 1, REVERSE = 2, LAST_BLOCK_FIRST = 3 };

struct Trap {  // thrown by __trap(); carries what the thread printed before it
  char msg[1024];
};
struct Stuck {};  // thrown to unwind the threads of a block whose warp collective failed

// What one lane brings to a warp-wide operation (ldmatrix: a row address; mma.sync: its
// A, B and C registers).  Each thread has two slots, used alternately, so that a lane
// that has gone on to the next operation never overwrites what a slower lane of its
// warp is still reading (it cannot get two operations ahead: each waits for all lanes).
struct Slot {
  const char* op;  // the operation (all lanes must be at the same one)
  const void* p;
  unsigned int w[12];
};

static thread_local char printed[1024];  // what this thread printed since its last __trap
static thread_local size_t printed_len = 0;

inline int device_printf(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(printed + printed_len, sizeof printed - printed_len, fmt, ap);
  va_end(ap);
  if (n > 0) printed_len += (size_t)n;
  if (printed_len >= sizeof printed) printed_len = sizeof printed - 1;
  return n;
}

typedef void (*Entry)(void** args);

struct Lock {  // RAII for a pthread mutex
  pthread_mutex_t* m;
  explicit Lock(pthread_mutex_t* mu) : m(mu) { pthread_mutex_lock(m); }
  ~Lock() { pthread_mutex_unlock(m); }
};

// One launch.  The subclasses decide how the threads of a block run.
struct Runner {
  Entry entry = nullptr;
  void** args = nullptr;
  unsigned grid[3] = {1, 1, 1}, block[3] = {1, 1, 1};
  int nthreads = 1;
  long long nblocks = 1;
  bool has_barrier = true;
  int failed = 0;  // read and written with __atomic builtins
  pthread_mutex_t err_mutex = PTHREAD_MUTEX_INITIALIZER;
  char error[1024] = {0};
  Slot* slots = nullptr;        // 2 * nthreads: the warp exchange (see Slot)
  unsigned* slot_gen = nullptr;  // per thread: how many warp-wide operations it made
  // mbarrier waits: bumped (atomically) by every change of an mbarrier or queued bulk
  // copy; a thread whose wait fails sleeps until it moves (see poll)
  unsigned long long progress_gen = 0;
  void** poll_bar = nullptr;     // per thread: the mbarrier it waits on, and the parity
  unsigned* poll_parity = nullptr;

  virtual ~Runner() {
    free(slots);
    free(slot_gen);
    free(poll_bar);
    free(poll_parity);
  }
  virtual void sync() = 0;
  // The calling thread's mbarrier test failed: wait until an mbarrier or a bulk copy has
  // changed since `token` (or throw Stuck when no thread can change one any more).
  virtual void poll(unsigned long long token) = 0;
  virtual void on_progress() {}
  void fail_mbar(int t);
  // Wait until all lanes of thread t's warp have called warp_sync (or throw Stuck).
  virtual void warp_sync(int t) = 0;

  bool has_failed() const { return __atomic_load_n(&failed, __ATOMIC_ACQUIRE) != 0; }
  void fail(const char* msg) {
    Lock lk(&err_mutex);
    if (!has_failed()) {
      snprintf(error, sizeof error, "%s", msg);
      __atomic_store_n(&failed, 1, __ATOMIC_RELEASE);
    }
  }
  uint3 thread_index(int t) const {
    uint3 r;
    r.x = (unsigned)(t % block[0]);
    r.y = (unsigned)((t / block[0]) % block[1]);
    r.z = (unsigned)(t / (block[0] * block[1]));
    return r;
  }
  uint3 block_index(long long b) const {
    uint3 r;
    r.x = (unsigned)(b % grid[0]);
    r.y = (unsigned)((b / grid[0]) % grid[1]);
    r.z = (unsigned)(b / ((long long)grid[0] * grid[1]));
    return r;
  }
  int linear_thread() const {
    return (int)(threadIdx.x + block[0] * (threadIdx.y + block[1] * threadIdx.z));
  }
  int warp_lanes(int w) const { return nthreads - 32 * w < 32 ? nthreads - 32 * w : 32; }
  void fail_warp(int w, int arrived) {
    char buf[400];
    snprintf(buf, sizeof buf,
             "a warp-wide operation (ldmatrix / mma.sync) was not reached by all 32 lanes of "
             "warp %d of block (%u, %u, %u): %d lanes waited at it while the others finished "
             "the kernel or waited elsewhere (__syncthreads() or another warp-wide operation)",
             w, blockIdx.x, blockIdx.y, blockIdx.z, arrived);
    fail(buf);
  }
  void fail_divergence() {
    char buf[300];
    snprintf(buf, sizeof buf,
             "__syncthreads() was not reached by all threads of block (%u, %u, %u): some "
             "threads finished the kernel while others waited at the barrier",
             blockIdx.x, blockIdx.y, blockIdx.z);
    fail(buf);
  }
  // Run the kernel for the current thread, turning a __trap() into an error.
  void run_thread() {
    char buf[1300];
    try {
      entry(args);
    } catch (Stuck&) {  // the failure is recorded already
    } catch (Trap& t) {
      snprintf(buf, sizeof buf, "the kernel trapped in block (%u, %u, %u), thread (%u, %u, %u)%s%s",
               blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x, threadIdx.y, threadIdx.z,
               t.msg[0] ? ": " : "", t.msg);
      fail(buf);
    } catch (...) {
      snprintf(buf, sizeof buf, "the kernel raised a C++ exception in block (%u, %u, %u), "
               "thread (%u, %u, %u)", blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x,
               threadIdx.y, threadIdx.z);
      fail(buf);
    }
  }
};

static thread_local Runner* current = nullptr;

// ---- mode THREADS: one OS thread per CUDA thread
struct ThreadsRunner : Runner {
  pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
  int arrived = 0, exited = 0;
  unsigned long long bar_gen = 0, block_gen = 0;
  bool go = false, abort_all = false;  // the start gate: opened once every thread exists
  // warp-wide operations: per warp, the lanes waiting and the release count
  int* warp_arrived = nullptr;
  unsigned long long* warp_gen = nullptr;
  int warp_waiting = 0;  // lanes of all warps waiting at a warp-wide operation
  // per thread: 1 + the progress token it sleeps on in an mbarrier wait (0: not); only
  // those whose token is still current are asleep (the others are woken, not yet running)
  unsigned long long* poll_sleep = nullptr;
  bool stuck = false;    // every thread waits and none can go on: unwind the block

  ~ThreadsRunner() {
    free(poll_sleep);
    free(warp_arrived);
    free(warp_gen);
    pthread_cond_destroy(&cv);
    pthread_mutex_destroy(&m);
  }
  void release_locked() {
    if (exited > 0) fail_divergence();
    arrived = 0;
    ++bar_gen;
    pthread_cond_broadcast(&cv);
  }
  // Every thread waits (at a barrier, at a warp-wide operation, or at the block's end)
  // and some lanes wait at a warp-wide operation that their warp's other lanes will never
  // reach: a failure.  Wake everyone to unwind (throw Stuck).
  int sleeping_pollers(int* first) {
    unsigned long long now = __atomic_load_n(&progress_gen, __ATOMIC_SEQ_CST) + 1;
    int n = 0;
    for (int t = 0; t < nthreads; ++t)
      if (poll_sleep[t] == now && n++ == 0) *first = t;
    return n;
  }
  void check_stuck_locked() {
    int poller = -1;
    int polling = poll_sleep ? sleeping_pollers(&poller) : 0;
    if ((warp_waiting == 0 && polling == 0) ||
        arrived + exited + warp_waiting + polling < nthreads)
      return;
    if (polling > 0) fail_mbar(poller);
    for (int w = 0; 32 * w < nthreads; ++w)
      if (warp_arrived[w] > 0) {
        fail_warp(w, warp_arrived[w]);
        break;
      }
    stuck = true;
    pthread_cond_broadcast(&cv);
  }
  void sync() override {
    Lock lk(&m);
    if (stuck) throw Stuck();
    unsigned long long g = bar_gen;
    ++arrived;
    if (arrived + exited == nthreads) {
      release_locked();
      return;
    }
    check_stuck_locked();
    while (bar_gen == g && !stuck) pthread_cond_wait(&cv, &m);
    if (bar_gen == g) {
      --arrived;
      throw Stuck();
    }
  }
  void warp_sync(int t) override {
    Lock lk(&m);
    if (stuck) throw Stuck();
    int w = t / 32;
    unsigned long long g = warp_gen[w];
    if (++warp_arrived[w] == warp_lanes(w)) {
      warp_waiting -= warp_arrived[w] - 1;
      warp_arrived[w] = 0;
      ++warp_gen[w];
      pthread_cond_broadcast(&cv);
      return;
    }
    ++warp_waiting;
    check_stuck_locked();
    while (warp_gen[w] == g && !stuck) pthread_cond_wait(&cv, &m);
    if (warp_gen[w] == g) throw Stuck();
  }
  void poll(unsigned long long token) override {
    Lock lk(&m);
    if (stuck) throw Stuck();
    if (__atomic_load_n(&progress_gen, __ATOMIC_SEQ_CST) != token) return;
    int t = linear_thread();
    poll_sleep[t] = token + 1;
    check_stuck_locked();
    while (__atomic_load_n(&progress_gen, __ATOMIC_SEQ_CST) == token && !stuck)
      pthread_cond_wait(&cv, &m);
    poll_sleep[t] = 0;
    if (stuck) throw Stuck();
  }
  void on_progress() override {
    Lock lk(&m);
    pthread_cond_broadcast(&cv);
  }
  // The calling thread has finished the block; wait until all have.
  void end_block() {
    Lock lk(&m);
    unsigned long long g = block_gen;
    ++exited;
    if (exited == nthreads) {
      exited = 0;
      ++block_gen;
      pthread_cond_broadcast(&cv);
      return;
    }
    if (!stuck && arrived > 0 && arrived + exited == nthreads) release_locked();
    check_stuck_locked();
    while (block_gen == g) pthread_cond_wait(&cv, &m);
  }
  struct Start {
    ThreadsRunner* r;
    int t;
  };
  static void* worker(void* p) {
    Start* st = static_cast<Start*>(p);
    ThreadsRunner* r = st->r;
    {
      Lock lk(&r->m);
      while (!r->go) pthread_cond_wait(&r->cv, &r->m);
      if (r->abort_all) return nullptr;
    }
    current = r;
    threadIdx = r->thread_index(st->t);
    for (long long b = 0; b < r->nblocks; ++b) {
      blockIdx = r->block_index(b);
      if (!r->has_failed()) r->run_thread();
      // Without __syncthreads() the threads of a block never wait for each other, so each
      // OS thread runs its thread index through all blocks on its own; blocks may then
      // overlap in time, which only a kernel with a data race could observe.
      if (r->has_barrier) r->end_block();
    }
    return nullptr;
  }
  void run(size_t stack_bytes) {
    int nwarps = (nthreads + 31) / 32;
    warp_arrived = static_cast<int*>(calloc((size_t)nwarps, sizeof(int)));
    warp_gen = static_cast<unsigned long long*>(calloc((size_t)nwarps, sizeof(unsigned long long)));
    poll_sleep = static_cast<unsigned long long*>(calloc((size_t)nthreads, sizeof(unsigned long long)));
    if (!warp_arrived || !warp_gen || !poll_sleep) {
      fail("out of memory starting the emulated threads");
      return;
    }
    pthread_t* tids = static_cast<pthread_t*>(calloc((size_t)nthreads, sizeof(pthread_t)));
    Start* starts = static_cast<Start*>(calloc((size_t)nthreads, sizeof(Start)));
    if (!tids || !starts) {
      fail("out of memory starting the emulated threads");
      free(tids);
      free(starts);
      return;
    }
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, stack_bytes);
    int started = 0;
    for (int t = 0; t < nthreads; ++t) {
      starts[t].r = this;
      starts[t].t = t;
      if (pthread_create(&tids[t], &attr, &ThreadsRunner::worker, &starts[t]) != 0) break;
      ++started;
    }
    pthread_attr_destroy(&attr);
    if (started < nthreads) {
      char buf[200];
      snprintf(buf, sizeof buf, "could not start %d threads for one block (started %d); use "
               "the 'serial' emulation mode", nthreads, started);
      fail(buf);
    }
    {
      Lock lk(&m);
      go = true;
      abort_all = started < nthreads;
      pthread_cond_broadcast(&cv);
    }
    for (int t = 0; t < started; ++t) pthread_join(tids[t], nullptr);
    free(tids);
    free(starts);
  }
};

// ---- modes SERIAL / REVERSE: fibers on the calling thread, run in a fixed order
struct FiberRunner : Runner {
  bool reverse = false;
  bool blocks_reversed = false;   // LAST_BLOCK_FIRST: serial threads, the blocks last first
  ucontext_t* ctx = nullptr;
  char** stacks = nullptr;
  int* state = nullptr;  // 0 runnable, 1 waiting at a barrier, 2 finished, 3 waiting at a
                         // warp-wide operation, 4 waiting on an mbarrier
  ucontext_t sched;
  int cur = 0;

  size_t mapped = 0;  // bytes of each fiber's mapping: its stack and a guard page below

  ~FiberRunner() {
    if (stacks)
      for (int i = 0; i < nthreads; ++i)
        if (stacks[i]) munmap(stacks[i], mapped);
    free(stacks);
    free(ctx);
    free(state);
  }
  void sync() override {
    if (!has_barrier) return;
    state[cur] = 1;
    swapcontext(&ctx[cur], &sched);
  }
  void warp_sync(int) override {
    if (!has_barrier) {  // (the code generator marks such kernels: a tecomp bug)
      fail("internal error: a warp-wide operation in a kernel launched without barriers");
      throw Stuck();
    }
    state[cur] = 3;
    swapcontext(&ctx[cur], &sched);
  }
  void poll(unsigned long long token) override {
    if (__atomic_load_n(&progress_gen, __ATOMIC_SEQ_CST) != token) return;
    if (!has_barrier) {
      fail("internal error: an mbarrier wait in a kernel launched without barriers");
      throw Stuck();
    }
    state[cur] = 4;
    swapcontext(&ctx[cur], &sched);
  }
  static void trampoline() {
    FiberRunner* r = static_cast<FiberRunner*>(current);
    int i = r->cur;
    r->run_thread();
    r->state[i] = 2;  // returning resumes uc_link: the scheduler
  }
  void run_block_plain() {
    for (int k = 0; k < nthreads; ++k) {
      threadIdx = thread_index(reverse ? nthreads - 1 - k : k);
      run_thread();
    }
  }
  void run_block_fibers(size_t stack_bytes) {
    size_t guard = mapped - stack_bytes;
    for (int i = 0; i < nthreads; ++i) {
      getcontext(&ctx[i]);
      ctx[i].uc_stack.ss_sp = stacks[i] + guard;
      ctx[i].uc_stack.ss_size = stack_bytes;
      ctx[i].uc_link = &sched;
      makecontext(&ctx[i], (void (*)())&FiberRunner::trampoline, 0);
      state[i] = 0;
    }
    for (;;) {  // one round: every runnable thread runs to its next barrier or its end
      unsigned long long before = __atomic_load_n(&progress_gen, __ATOMIC_SEQ_CST);
      bool ran = false;  // a thread ran that was not merely re-testing an mbarrier
      for (int k = 0; k < nthreads; ++k) {
        int i = reverse ? nthreads - 1 - k : k;
        if (state[i] != 0 && state[i] != 4) continue;
        ran |= state[i] == 0;
        state[i] = 0;
        cur = i;
        threadIdx = thread_index(i);
        swapcontext(&sched, &ctx[i]);
      }
      int waiting = 0, done = 0, warp_waiting = 0, polling = 0, poller = -1;
      for (int i = 0; i < nthreads; ++i) {
        waiting += state[i] == 1;
        done += state[i] == 2;
        warp_waiting += state[i] == 3;
        if (state[i] == 4 && poller < 0) poller = i;
        polling += state[i] == 4;
      }
      bool polled = ran || __atomic_load_n(&progress_gen, __ATOMIC_SEQ_CST) != before;
      if (polling > 0 && warp_waiting == 0) {
        if (polled) continue;
        fail_mbar(poller);
        return;
      }
      if (warp_waiting > 0) {  // release each warp whose lanes all wait at its operation
        int stuck_warp = -1, stuck_lanes = 0;
        bool progress = polling > 0 && polled;
        for (int w = 0; 32 * w < nthreads; ++w) {
          int n = 0;
          for (int i = 32 * w; i < 32 * w + warp_lanes(w); ++i) n += state[i] == 3;
          if (n == warp_lanes(w)) {
            for (int i = 32 * w; i < 32 * w + n; ++i) state[i] = 0;
            progress = true;
          } else if (n > 0 && stuck_warp < 0) {
            stuck_warp = w;
            stuck_lanes = n;
          }
        }
        if (!progress) {  // the suspended fibers are abandoned (their stacks are reused)
          if (polling > 0) fail_mbar(poller);
          fail_warp(stuck_warp, stuck_lanes);
          return;
        }
        continue;
      }
      if (waiting == 0) return;
      if (done > 0) fail_divergence();
      for (int i = 0; i < nthreads; ++i)
        if (state[i] == 1) state[i] = 0;
    }
  }
  void run(size_t stack_bytes) {
    current = this;
    if (has_barrier) {
      ctx = static_cast<ucontext_t*>(calloc((size_t)nthreads, sizeof(ucontext_t)));
      state = static_cast<int*>(calloc((size_t)nthreads, sizeof(int)));
      stacks = static_cast<char**>(calloc((size_t)nthreads, sizeof(char*)));
      bool ok = ctx && state && stacks;
      // a stack overflow hits the guard page (a fault) instead of the heap below
      size_t page = (size_t)sysconf(_SC_PAGESIZE);
      stack_bytes = (stack_bytes + page - 1) / page * page;
      mapped = stack_bytes + page;
      for (int i = 0; ok && i < nthreads; ++i) {
        void* p = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                       -1, 0);
        ok = p != MAP_FAILED && mprotect(p, page, PROT_NONE) == 0;
        if (p != MAP_FAILED) stacks[i] = static_cast<char*>(p);
      }
      if (!ok) {
        fail("out of memory for the emulated threads' stacks");
        current = nullptr;
        return;
      }
    }
    for (long long b = 0; b < nblocks && !has_failed(); ++b) {
      // (LAST_BLOCK_FIRST: atomicAdds of several blocks into one element then come in
      // the other order, as a GPU's scheduling may give them)
      blockIdx = block_index(blocks_reversed ? nblocks - 1 - b : b);
      if (has_barrier)
        run_block_fibers(stack_bytes);
      else
        run_block_plain();
    }
    current = nullptr;
  }
};

// the Hopper emulation's per-launch state (used at the end of this file)
struct SmemWindow {
  char* lo;
  unsigned long long bytes;
};
inline SmemWindow& smem_window() {
  static SmemWindow w = {nullptr, 0};
  return w;
}
struct BulkCopy {
  void* dst;
  const void* src;
  unsigned bytes;
  void* bar;
  int owned;  // src is the copy's own image (a TMA box), freed when it lands
};
struct BulkQueue {
  BulkCopy q[512];
  int n;
};
inline BulkQueue& bulk_queue() {
  static BulkQueue b;
  return b;
}
// per emulated thread (fibers share their OS thread's thread_locals): fenced since the
// last wait_group
inline unsigned char* wgmma_fenced_flags() {
  static unsigned char f[1024];
  return f;
}
// The warpgroups' latest wgmmas (8 warpgroups of a block, a ring of 64 calls each): the
// first warp of a warpgroup to make its n-th wgmma records the descriptors, the others
// must give the same ones.
struct WgmmaCall {
  unsigned long long n, da, db;
  int set;
};
inline WgmmaCall* wgmma_calls() {
  static WgmmaCall c[8 * 64];
  return c;
}
inline unsigned long long* wgmma_counts() {  // per warp: wgmmas made
  static unsigned long long c[32];
  return c;
}
inline pthread_mutex_t* wgmma_lock() {
  static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
  return &m;
}

static pthread_mutex_t launch_mutex = PTHREAD_MUTEX_INITIALIZER;

// dims: grid x, y, z, block x, y, z.  Returns 0, or 1 with a message in err.
inline int launch(Entry entry, void** args, const long long* dims, int mode, int has_barrier,
                  long long stack_bytes, char* err, int errlen) {
  Lock lk(&launch_mutex);
  ThreadsRunner threads_runner;
  FiberRunner fiber_runner;
  Runner* r = mode == THREADS ? static_cast<Runner*>(&threads_runner)
                              : static_cast<Runner*>(&fiber_runner);
  r->entry = entry;
  r->args = args;
  r->has_barrier = has_barrier != 0;
  long long nthreads = 1, nblocks = 1;
  for (int i = 0; i < 3; ++i) {
    if (dims[i] <= 0 || dims[3 + i] <= 0) return 0;  // an empty launch does nothing
    r->grid[i] = (unsigned)dims[i];
    r->block[i] = (unsigned)dims[3 + i];
    nblocks *= dims[i];
    nthreads *= dims[3 + i];
  }
  r->nthreads = (int)nthreads;
  r->nblocks = nblocks;
  r->slots = static_cast<Slot*>(calloc(2 * (size_t)nthreads, sizeof(Slot)));
  r->slot_gen = static_cast<unsigned*>(calloc((size_t)nthreads, sizeof(unsigned)));
  r->poll_bar = static_cast<void**>(calloc((size_t)nthreads, sizeof(void*)));
  r->poll_parity = static_cast<unsigned*>(calloc((size_t)nthreads, sizeof(unsigned)));
  if (!r->slots || !r->slot_gen || !r->poll_bar || !r->poll_parity) {
    snprintf(err, (size_t)errlen, "out of memory starting the emulated threads");
    return 1;
  }
  smem_window().lo = nullptr;  // named again by each launch that uses it
  bulk_queue().n = 0;
  memset(wgmma_fenced_flags(), 0, 1024);
  memset(wgmma_calls(), 0, 8 * 64 * sizeof(WgmmaCall));
  memset(wgmma_counts(), 0, 32 * sizeof(unsigned long long));
  gridDim.x = r->grid[0]; gridDim.y = r->grid[1]; gridDim.z = r->grid[2];
  blockDim.x = r->block[0]; blockDim.y = r->block[1]; blockDim.z = r->block[2];
  if (mode == THREADS) {
    threads_runner.run((size_t)stack_bytes);
  } else {
    fiber_runner.reverse = mode == REVERSE;
    fiber_runner.blocks_reversed = mode == LAST_BLOCK_FIRST;
    fiber_runner.run((size_t)stack_bytes);
  }
  if (r->has_failed()) {
    snprintf(err, (size_t)errlen, "%s", r->error);
    return 1;
  }
  return 0;
}

}  // namespace tecomp_emu

inline void __syncthreads() {
  __asm__ __volatile__("" ::: "memory");  // no value of shared memory is kept across it
  tecomp_emu::current->sync();
  __asm__ __volatile__("" ::: "memory");
}
inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
// atomicAdd on float32 global (or shared) memory: a real atomic read-modify-write (a
// compare-and-swap loop; the threads of a block run at once in the threads mode), the
// old value returned.  The blocks that add into one element run one after another, in
// launch order, or last first in the LAST_BLOCK_FIRST mode (3: the serial mode's thread
// order): the float sum's rounding depends on that order, as on a GPU on the scheduling.
inline float atomicAdd(float* p, float v) {
  unsigned int* w = reinterpret_cast<unsigned int*>(p);
  unsigned int old = __atomic_load_n(w, __ATOMIC_RELAXED);
  for (;;) {
    float f;
    __builtin_memcpy(&f, &old, 4);
    float sum = f + v;
    unsigned int nw;
    __builtin_memcpy(&nw, &sum, 4);
    if (__atomic_compare_exchange_n(w, &old, nw, false, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
      return f;
  }
}
[[noreturn]] inline void __trap() {
  tecomp_emu::Trap t;
  size_t n = tecomp_emu::printed_len;
  while (n > 0 && tecomp_emu::printed[n - 1] == '\n') --n;
  memcpy(t.msg, tecomp_emu::printed, n);
  t.msg[n] = 0;
  tecomp_emu::printed_len = 0;
  throw t;
}
#define printf tecomp_emu::device_printf
namespace tecomp_emu {
// A vector move or cp.async of n bytes (tc_move8/16, tc_cp_async*) whose addresses are
// not n-byte aligned: on a GPU a misaligned-address fault, which loses the CUDA context;
// here a trap (a BoundsError), so that a copy the generated code did not guard is found
// without a GPU.  (The generated code tests the addresses first: tc_aligned2.)
inline void check_aligned(const void* d, const void* s, int n, const char* what) {
  if ((((unsigned long long)d) | ((unsigned long long)s)) & (unsigned long long)(n - 1)) {
    printf("a %d-byte %s from %p to %p, not %d-byte aligned: on a GPU a misaligned-address "
           "fault (tecomp bug: the generated code should have tested the addresses)",
           n, what, s, d, n);
    __trap();
  }
}
}  // namespace tecomp_emu

// ---------------------------------------------------------------------------- wmma
// Tensor-core fragments (<mma.h>'s nvcuda::wmma) with the declared semantics of each
// operation.  On the GPU a fragment is spread over the 32 lanes of a warp; here every
// emulated thread holds the whole tile (as float: a half converts exactly) and does the
// whole operation, so the lanes of a warp, which run the same calls on the same tiles,
// all hold the same result.  mma_sync sums in float, k in order.
namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K> struct tc_dims;
template <int M, int N, int K> struct tc_dims<matrix_a, M, N, K> { enum { R = M, C = K }; };
template <int M, int N, int K> struct tc_dims<matrix_b, M, N, K> { enum { R = K, C = N }; };
template <int M, int N, int K> struct tc_dims<accumulator, M, N, K> { enum { R = M, C = N }; };

template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment {
  enum { R = tc_dims<Use, M, N, K>::R, C = tc_dims<Use, M, N, K>::C, num_elements = R * C };
  float x[R * C];
};

inline float tc_to_float(half h) { return __half2float(h); }
inline float tc_to_float(__nv_bfloat16 h) { return __bfloat162float(h); }
inline float tc_to_float(float f) { return f; }
inline void tc_from_float(half* p, float v) { *p = __float2half(v); }
inline void tc_from_float(float* p, float v) { *p = v; }
inline bool tc_col_major(row_major*) { return false; }
inline bool tc_col_major(col_major*) { return true; }

template <class Use, int M, int N, int K, class T, class L, class V>
inline void fill_fragment(fragment<Use, M, N, K, T, L>& f, const V& v) {
  const float x = tc_to_float(v);
  for (int i = 0; i < (int)(sizeof f.x / sizeof f.x[0]); ++i) f.x[i] = x;
}

// matrix_a / matrix_b: the layout is the fragment's type
template <class Use, int M, int N, int K, class T, class L, class P>
inline void load_matrix_sync(fragment<Use, M, N, K, T, L>& f, const P* p, unsigned ldm) {
  typedef fragment<Use, M, N, K, T, L> F;
  const bool col = tc_col_major((L*)0);
  for (int r = 0; r < F::R; ++r)
    for (int c = 0; c < F::C; ++c)
      f.x[r * F::C + c] = tc_to_float(col ? p[(size_t)c * ldm + r] : p[(size_t)r * ldm + c]);
}

// the accumulator: the layout is an argument
template <int M, int N, int K, class T, class P>
inline void load_matrix_sync(fragment<accumulator, M, N, K, T, void>& f, const P* p, unsigned ldm,
                             layout_t l) {
  for (int r = 0; r < M; ++r)
    for (int c = 0; c < N; ++c)
      f.x[r * N + c] = tc_to_float(l == mem_col_major ? p[(size_t)c * ldm + r] : p[(size_t)r * ldm + c]);
}

template <int M, int N, int K, class T, class P>
inline void store_matrix_sync(P* p, const fragment<accumulator, M, N, K, T, void>& f, unsigned ldm,
                              layout_t l) {
  for (int r = 0; r < M; ++r)
    for (int c = 0; c < N; ++c)
      tc_from_float(l == mem_col_major ? &p[(size_t)c * ldm + r] : &p[(size_t)r * ldm + c],
                    f.x[r * N + c]);
}

template <int M, int N, int K, class TA, class LA, class TB, class LB, class TC, class TD>
inline void mma_sync(fragment<accumulator, M, N, K, TD, void>& d,
                     const fragment<matrix_a, M, N, K, TA, LA>& a,
                     const fragment<matrix_b, M, N, K, TB, LB>& b,
                     const fragment<accumulator, M, N, K, TC, void>& c) {
  float out[M * N];
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      float s = c.x[i * N + j];
      for (int k = 0; k < K; ++k) s += a.x[i * K + k] * b.x[k * N + j];
      out[i * N + j] = s;
    }
  memcpy(d.x, out, sizeof out);
}
}  // namespace wmma
}  // namespace nvcuda

// ---------------------------------------------------------------------------- mma.sync
// PTX's ldmatrix and mma.sync (the cuda.mma_* intrinsics reach them through tecomp's
// tc_ldmatrix_* / tc_mma_* helpers) with their per-lane semantics: each emulated thread
// holds only its own lane's registers, and each operation exchanges them among the 32
// lanes of its warp at a rendezvous (warp_sync: a real wait among the OS threads, or a
// switch to the fiber scheduler, which resumes the warp once all its lanes are there).
// The lane mappings are the PTX ISA's ("Warp-level matrix load instruction: ldmatrix",
// "Matrix Fragments for mma.m16n8k16"), so a schedule whose fragments are laid out
// wrongly computes a wrong result here as it would on the GPU.  mma.sync sums in float,
// k in order, after the accumulator.
namespace tecomp_emu {

// A misused warp-wide operation fails the launch (the other threads then unwind).
[[noreturn]] inline void warp_op_error(const char* op, const char* what) {
  char buf[600];
  snprintf(buf, sizeof buf, "%s in block (%u, %u, %u), thread (%u, %u, %u): %s", op,
           blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x, threadIdx.y, threadIdx.z, what);
  current->fail(buf);
  throw Stuck();
}

// Put `mine` in the calling lane's slot, wait for the warp's other lanes, and return the
// warp's 32 slots (lane i's at [i]); *lane is the caller's lane.  Lanes that meet at
// different operations (on the GPU: divergent .aligned instructions, undefined) trap.
inline const Slot* warp_exchange(const char* op, Slot mine, int* lane) {
  Runner* r = current;
  int t = r->linear_thread();
  if (r->warp_lanes(t / 32) != 32)
    warp_op_error(op, "the block's last warp has fewer than 32 threads; a warp-wide "
                      "operation needs all 32 lanes");
  unsigned parity = r->slot_gen[t]++ & 1u;
  Slot* s = r->slots + (size_t)parity * (size_t)r->nthreads;
  mine.op = op;
  s[t] = mine;
  r->warp_sync(t);
  *lane = t & 31;
  const Slot* w = s + (t & ~31);
  for (int i = 0; i < 32; ++i)
    if (strcmp(w[i].op, op) != 0) {
      char what[160];
      snprintf(what, sizeof what, "lane %d of the warp is at %s instead: the 32 lanes of a "
               "warp must make the same warp-wide operations in the same order", i, w[i].op);
      warp_op_error(op, what);
    }
  return w;
}

// __shfl_xor_sync(mask, v, lane_mask): lane l gets v of lane l ^ lane_mask (width 32);
// the emulation takes the full mask only (every lane of the warp takes part), and
// lanes that meet at another warp-wide operation trap, as above.
inline unsigned int shfl_xor_bits(unsigned int mask, unsigned int bits, int lane_mask) {
  const char* op = "shfl.sync.bfly";
  if (mask != 0xffffffffu)
    warp_op_error(op, "the emulation runs __shfl_xor_sync with the full mask 0xffffffff only");
  if (lane_mask < 0 || lane_mask > 31)
    warp_op_error(op, "the lane mask is not in 0..31");
  Slot mine;
  mine.p = nullptr;
  mine.w[0] = bits;
  int lane;
  const Slot* w = warp_exchange(op, mine, &lane);
  return w[lane ^ lane_mask].w[0];
}

// Shared-memory bank accounting of the warp-wide loads (ldmatrix, and wgmma's operand
// reads through its descriptors, each 8 x 8 core matrix of A and B once per wgmma of a
// warpgroup, as the descriptor's layout and swizzle place its 8 rows): a phase is one 8 x 8
// matrix, 8 rows of 16 bytes; the 32 banks serve one 4-byte word each per wavefront (rows
// reading the same word share it), so a phase takes as many wavefronts as the most
// distinct words any bank holds -- 1 when conflict-free.  Counted once per warp (by lane
// 0), for the whole library, read and reset through tecomp_emu_smem_stats.
struct SmemStats {
  long long phases, wavefronts;              // ldmatrix
  long long wgmma_phases, wgmma_wavefronts;  // wgmma's operand reads
  long long cp_phases, cp_wavefronts;        // cp.async's writes (cp_async_written)
};
inline SmemStats& smem_stats() {
  static SmemStats s = {0, 0, 0, 0, 0, 0};
  return s;
}
inline pthread_mutex_t* smem_stats_lock() {
  static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
  return &m;
}

inline int phase_wavefronts(const uintptr_t* row_bytes) {
  uintptr_t words[32][8];
  int n[32] = {0}, most = 0;
  for (int r = 0; r < 8; ++r)
    for (uintptr_t word = row_bytes[r] / 4, j = 0; j < 4; ++j) {
      uintptr_t wd = word + j;
      int bank = (int)(wd % 32), seen = 0;
      for (int i = 0; i < n[bank]; ++i) seen |= words[bank][i] == wd;
      if (!seen) words[bank][n[bank]++] = wd;
      if (n[bank] > most) most = n[bank];
    }
  return most;
}

// The wavefronts of one phase of `lanes` accesses of `bytes` each (at most 32 words):
// the most distinct 4-byte words any bank holds.
inline int access_wavefronts(const uintptr_t* addr, int lanes, int bytes) {
  uintptr_t words[32][32];
  int n[32] = {0}, most = 0;
  for (int l = 0; l < lanes; ++l)
    for (uintptr_t wd = addr[l] / 4, end = (addr[l] + bytes + 3) / 4; wd < end; ++wd) {
      int bank = (int)(wd % 32), seen = 0;
      for (int i = 0; i < n[bank]; ++i) seen |= words[bank][i] == wd;
      if (!seen && n[bank] < 32) words[bank][n[bank]++] = wd;
      if (n[bank] > most) most = n[bank];
    }
  return most;
}

// cp.async's writes into shared memory, counted as the warp's: lane l's n-th copy of a
// block meets the n-th of the other lanes of its warp (the cooperative copies of a tile:
// every lane the same sequence); once all 32 have written it, each phase of 128 bytes'
// worth of lanes (8 lanes of 16 bytes, 16 of 8, 32 of 4, as the hardware splits a
// warp's wide accesses) takes the wavefronts of its banks.  Lanes that never meet (a
// copy under a lane-dependent guard) are left uncounted.
struct CpWrite {
  uintptr_t addr[32];
  unsigned mask;
  int bytes;
};
struct CpKey {
  long long block, seq;
  int warp;
  bool operator<(const CpKey& o) const {
    return block != o.block ? block < o.block : warp != o.warp ? warp < o.warp : seq < o.seq;
  }
};
struct CpLog {
  std::map<CpKey, CpWrite> pending;
  std::map<std::pair<long long, int>, long long> seq;   // (block, thread) -> copies so far
};
inline CpLog& cp_log() {
  static CpLog l;
  return l;
}

inline void cp_async_written(const void* dst, int bytes) {
  Runner* r = current;
  if (r == nullptr) return;
  int t = r->linear_thread();
  if (r->warp_lanes(t / 32) != 32) return;
  long long b = (long long)blockIdx.x + (long long)r->grid[0] *
                ((long long)blockIdx.y + (long long)r->grid[1] * blockIdx.z);
  pthread_mutex_lock(smem_stats_lock());
  CpLog& log = cp_log();
  long long n = log.seq[std::make_pair(b, t)]++;
  CpKey key = {b, n, t / 32};
  CpWrite& w = log.pending[key];
  if (w.mask == 0) w.bytes = bytes;
  w.addr[t & 31] = (uintptr_t)dst;
  w.mask |= 1u << (t & 31);
  if (w.mask == 0xffffffffu) {
    if (w.bytes == bytes) {
      int per = 128 / bytes;
      for (int l = 0; l < 32; l += per) {
        smem_stats().cp_phases += 1;
        smem_stats().cp_wavefronts += access_wavefronts(w.addr + l, per, bytes);
      }
    }
    log.pending.erase(key);
  }
  pthread_mutex_unlock(smem_stats_lock());
}

inline void smem_stats_reset() {
  smem_stats() = SmemStats{0, 0, 0, 0, 0, 0};
  cp_log().pending.clear();
  cp_log().seq.clear();
}

inline int ldmatrix_phase_wavefronts(const Slot* rows) {
  uintptr_t a[8];
  for (int r = 0; r < 8; ++r) a[r] = (uintptr_t)rows[r].p;
  return phase_wavefronts(a);
}

inline float b16_to_float(unsigned int bits16, int bf16) {
  if (!bf16) return half_bits_to_float((unsigned short)bits16);
  unsigned int b = bits16 << 16;
  float f;
  memcpy(&f, &b, sizeof f);
  return f;
}

// ldmatrix.sync.aligned.m8n8.x4{.trans}.shared.b16: lanes 8q..8q+7 give the addresses of
// the 8 rows (8 b16 each, 16-byte aligned) of matrix q; lane l gets in r[q] the two
// elements (2 (l % 4), 2 (l % 4) + 1) of row l / 4 of matrix q, or with .trans
// elements (2 (l % 4), l / 4) and (2 (l % 4) + 1, l / 4); the lower half the first.
inline void ldmatrix_x4(unsigned int* r, const void* row, int trans) {
  const char* op = trans ? "ldmatrix.x4.trans" : "ldmatrix.x4";
  if (((uintptr_t)row & 15u) != 0)
    warp_op_error(op, "a row address is not 16-byte aligned");
  Slot mine;
  mine.p = row;
  int lane;
  const Slot* w = warp_exchange(op, mine, &lane);
  if (lane == 0) {
    long long waves = 0;
    for (int q = 0; q < 4; ++q) waves += ldmatrix_phase_wavefronts(w + 8 * q);
    pthread_mutex_lock(smem_stats_lock());
    smem_stats().phases += 4;
    smem_stats().wavefronts += waves;
    pthread_mutex_unlock(smem_stats_lock());
  }
  int g = lane >> 2, t = lane & 3;
  for (int q = 0; q < 4; ++q) {
    unsigned int lo, hi;
    if (!trans) {
      const unsigned short* p = static_cast<const unsigned short*>(w[8 * q + g].p);
      lo = p[2 * t];
      hi = p[2 * t + 1];
    } else {
      lo = static_cast<const unsigned short*>(w[8 * q + 2 * t].p)[g];
      hi = static_cast<const unsigned short*>(w[8 * q + 2 * t + 1].p)[g];
    }
    r[q] = lo | (hi << 16);
  }
}

// An mma.sync's operand registers (the lane's 4 of A, 2 of B) exchanged among the warp:
// register i of lane l is w[l].w[i], B's at 4 and 5.
inline const Slot* exchange_mma_operands(const char* op, const unsigned int* a,
                                         const unsigned int* b, int* lane) {
  Slot mine;
  mine.p = nullptr;
  for (int i = 0; i < 4; ++i) mine.w[i] = a[i];
  mine.w[4] = b[0];
  mine.w[5] = b[1];
  return warp_exchange(op, mine, lane);
}

// mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32, d = a . b + d in
// place.  groupID g = lane / 4, t = lane % 4.  A (16 x 16): a[0] holds A[g][2t, 2t+1],
// a[1] A[g+8][2t, 2t+1], a[2] A[g][2t+8, 2t+9], a[3] A[g+8][2t+8, 2t+9].  B (16 x 8):
// b[0] holds B[2t, 2t+1][g], b[1] B[2t+8, 2t+9][g].  C, D (16 x 8): d[i] is
// C[g + 8 (i / 2)][2t + i % 2].
inline void mma_m16n8k16(float* d, const unsigned int* a, const unsigned int* b, int bf16) {
  int lane;
  const Slot* w = exchange_mma_operands("mma.sync.m16n8k16", a, b, &lane);
  int g = lane >> 2, t = lane & 3;
  float out[4];
  for (int i = 0; i < 4; ++i) {
    int row = g + 8 * (i >> 1), col = 2 * t + (i & 1);
    float acc = d[i];
    for (int k = 0; k < 16; ++k) {
      // A[row][k]: lane (row % 8) * 4 + (k % 8) / 2, register row / 8 + 2 (k / 8)
      unsigned int ar = w[(row & 7) * 4 + ((k & 7) >> 1)].w[(row >> 3) + 2 * (k >> 3)];
      // B[k][col]: lane col * 4 + (k % 8) / 2, register k / 8
      unsigned int br = w[col * 4 + ((k & 7) >> 1)].w[4 + (k >> 3)];
      acc += b16_to_float((ar >> (16 * (k & 1))) & 0xffffu, bf16)
             * b16_to_float((br >> (16 * (k & 1))) & 0xffffu, bf16);
    }
    out[i] = acc;
  }
  for (int i = 0; i < 4; ++i) d[i] = out[i];
}

// cvt.rna.tf32.f32: a float rounded to 10 mantissa bits, to nearest with ties away from
// zero (NaN and inf kept; a value that rounds past the largest finite becomes inf).
// ex2.approx.ftz.f32: 2^x with a subnormal input read as 0 and a subnormal result
// flushed to (positive) zero (the hardware's approximation taken as exact).
inline float ex2_ftz(float x) {
  if (fabsf(x) < 1.17549435e-38f) x = 0.0f;   // (FLT_MIN)
  const float r = exp2f(x);
  return r < 1.17549435e-38f ? 0.0f : r;
}

inline unsigned int round_tf32(float x) {
  unsigned int b;
  memcpy(&b, &x, sizeof b);
  if ((b & 0x7f800000u) == 0x7f800000u) return (b & 0x7fffffffu) > 0x7f800000u ? (b | 0x00400000u) & 0xffffe000u : b;
  return (b + 0x1000u) & 0xffffe000u;
}

inline float bits_float(unsigned int b) {
  float f;
  memcpy(&f, &b, sizeof f);
  return f;
}

// mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32, d = a . b + d in place.  groupID
// g = lane / 4, t = lane % 4.  A (16 x 8): a[0] holds A[g][t], a[1] A[g+8][t], a[2]
// A[g][t+4], a[3] A[g+8][t+4].  B (8 x 8): b[0] holds B[t][g], b[1] B[t+4][g].  C, D
// (16 x 8): d[i] is C[g + 8 (i / 2)][2t + i % 2].
inline void mma_m16n8k8_tf32(float* d, const unsigned int* a, const unsigned int* b) {
  int lane;
  const Slot* w = exchange_mma_operands("mma.sync.m16n8k8.tf32", a, b, &lane);
  int g = lane >> 2, t = lane & 3;
  float out[4];
  for (int i = 0; i < 4; ++i) {
    int row = g + 8 * (i >> 1), col = 2 * t + (i & 1);
    float acc = d[i];
    for (int k = 0; k < 8; ++k) {
      // A[row][k]: lane (row % 8) * 4 + k % 4, register row / 8 + 2 (k / 4)
      unsigned int ar = w[(row & 7) * 4 + (k & 3)].w[(row >> 3) + 2 * (k >> 2)];
      // B[k][col]: lane col * 4 + k % 4, register 4 + k / 4
      unsigned int br = w[col * 4 + (k & 3)].w[4 + (k >> 2)];
      // the tensor core reads the tf32 part of each operand
      acc += bits_float(ar & 0xffffe000u) * bits_float(br & 0xffffe000u);
    }
    out[i] = acc;
  }
  for (int i = 0; i < 4; ++i) d[i] = out[i];
}

}  // namespace tecomp_emu

// ---------------------------------------------------------------------------- Hopper
// sm_90's asynchronous machinery, reached through tecomp's tc_mbar_* / tc_bulk_* /
// tc_wgmma_* helpers (tecomp/codegen/cuda_hopper.py), with the semantics of the PTX ISA:
//
//   the shared window     On the GPU a shared-memory operand of these instructions is a
//                         32-bit address in the block's shared window.  Here the kernel
//                         names its shared arena once (tc_smem_window: the emulation's
//                         only addition; a no-op on the GPU) and an address is the offset
//                         into it.  An mbarrier, a copy's destination or a wgmma operand
//                         outside the arena is an error.
//   mbarrier              ("Parallel Synchronization and Communication Instructions:
//                         mbarrier"): the 8 bytes at the barrier hold its phase parity,
//                         pending arrival count, expected arrival count and tx-count.  A
//                         phase completes when both its pending arrivals and its tx-count
//                         reach 0; the pending count is then reloaded and the parity
//                         flips.  try_wait.parity P is true once the phase of parity P
//                         has completed (the current phase's parity is not P).
//   cp.async.bulk         ("Data Movement: cp.async.bulk"): the copy is queued and lands
//                         (bytes in shared memory, then complete_tx on its mbarrier) only
//                         when some thread next tests that barrier, so a consumer that
//                         reads the tile without waiting on the barrier reads stale data.
//   wgmma.mma_async       ("Asynchronous Warpgroup Level Matrix Multiply-Accumulate"):
//                         both operands in shared memory through matrix descriptors,
//                         K-major; each of the warpgroup's 128 threads computes its own
//                         accumulator registers, in the layout of "Matrix fragments for
//                         wgmma.mma_async .m64nNk16" (D register layout).  Done at issue
//                         (not deferred to wait_group); wgmma.fence is required before a
//                         thread's first wgmma after a wait_group (or kernel start).
//
// A thread that waits on an mbarrier whose phase can no longer complete (every other
// thread is waiting too, or has finished) fails the launch with a message naming the
// barrier, its state and the parity waited on, instead of hanging.
namespace tecomp_emu {

inline void set_smem_window(void* base, unsigned long long bytes) {
  if (((uintptr_t)base & 1023u) != 0)
    warp_op_error("tc_smem_window", "the shared arena must be 1024-byte aligned (the 128-byte "
                                    "swizzle's pattern repeats every 1024 bytes)");
  SmemWindow& w = smem_window();
  w.lo = static_cast<char*>(base);
  w.bytes = bytes;
}
// The shared-window address of p (what __cvta_generic_to_shared gives on the GPU), after
// checking that [p, p + n) lies in the arena and p is `align`-byte aligned.
inline unsigned smem_offset(const char* op, const void* p, unsigned long long n, unsigned align) {
  SmemWindow& w = smem_window();
  char buf[300];
  if (!w.lo)
    warp_op_error(op, "the kernel did not name its shared arena (tc_smem_window(base, bytes) "
                      "before its first mbarrier, bulk copy or wgmma)");
  const char* c = static_cast<const char*>(p);
  if (c < w.lo || (unsigned long long)(c - w.lo) + n > w.bytes) {
    snprintf(buf, sizeof buf, "the %llu bytes at shared offset %lld are outside shared memory "
             "(the arena is %llu bytes)", n, (long long)(c - w.lo), w.bytes);
    warp_op_error(op, buf);
  }
  if (((uintptr_t)(c - w.lo)) % align != 0) {
    snprintf(buf, sizeof buf, "shared address 0x%llx is not %u-byte aligned",
             (unsigned long long)(c - w.lo), align);
    warp_op_error(op, buf);
  }
  return (unsigned)(c - w.lo);
}

// ---- mbarrier: the 64-bit word at the barrier, as the emulation lays it out
//   bits 0-19 pending arrivals, 20-39 expected arrivals, 40 phase parity, 41 initialized,
//   42-63 tx-count (two's complement, 22 bits)
inline pthread_mutex_t* mbar_lock() {
  static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
  return &m;
}
struct MBar {
  unsigned pending, expected, phase, init;
  long long tx;
};
inline MBar mbar_load(const void* bar) {
  uint64_t w;
  memcpy(&w, bar, 8);
  MBar b;
  b.pending = (unsigned)(w & 0xfffffu);
  b.expected = (unsigned)((w >> 20) & 0xfffffu);
  b.phase = (unsigned)((w >> 40) & 1u);
  b.init = (unsigned)((w >> 41) & 1u);
  long long tx = (long long)(w >> 42);
  b.tx = tx >= (1ll << 21) ? tx - (1ll << 22) : tx;
  return b;
}
inline void mbar_store(void* bar, const MBar& b) {
  uint64_t w = (uint64_t)b.pending | ((uint64_t)b.expected << 20) | ((uint64_t)b.phase << 40)
               | ((uint64_t)b.init << 41) | ((uint64_t)(b.tx & ((1ll << 22) - 1)) << 42);
  memcpy(bar, &w, 8);
}
// (under mbar_lock) the phase completes when nothing is pending
inline void mbar_maybe_complete(MBar& b) {
  if (b.pending == 0 && b.tx == 0) {
    b.phase ^= 1u;
    b.pending = b.expected;
  }
}
inline MBar mbar_checked(const char* op, void* bar) {
  smem_offset(op, bar, 8, 8);
  MBar b = mbar_load(bar);
  if (!b.init)
    warp_op_error(op, "the mbarrier was not initialized (mbarrier.init, tc_mbar_init)");
  return b;
}
inline void mbar_init(void* bar, unsigned count) {
  smem_offset("mbarrier.init", bar, 8, 8);
  if (count < 1 || count > 0xfffffu)
    warp_op_error("mbarrier.init", "the expected arrival count must be in [1, 2^20 - 1]");
  Lock lk(mbar_lock());
  MBar b = {count, count, 0u, 1u, 0};
  mbar_store(bar, b);
}
inline void note_progress();
inline void mbar_tx_and_arrive(const char* op, void* bar, long long tx, unsigned arrivals) {
  {
    Lock lk(mbar_lock());
    MBar b = mbar_checked(op, bar);
    b.tx += tx;
    if (b.tx > 0xfffffll || b.tx < -0xfffffll)
      warp_op_error(op, "the tx-count left the range [-(2^20 - 1), 2^20 - 1]");
    if (arrivals > b.pending)
      warp_op_error(op, "more arrivals than the phase expects (the count given to "
                        "mbarrier.init)");
    b.pending -= arrivals;
    mbar_maybe_complete(b);
    mbar_store(bar, b);
  }
  note_progress();
}

// ---- cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes: queued copies
inline pthread_mutex_t* bulk_lock() {
  static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
  return &m;
}
// Land the queued copies that complete on `bar` (all of them: bar == nullptr).
inline void bulk_land(void* bar) {
  BulkCopy done[512];
  int nd = 0;
  {
    Lock lk(bulk_lock());
    BulkQueue& b = bulk_queue();
    int keep = 0;
    for (int i = 0; i < b.n; ++i) {
      if (bar == nullptr || b.q[i].bar == bar)
        done[nd++] = b.q[i];
      else
        b.q[keep++] = b.q[i];
    }
    b.n = keep;
  }
  for (int i = 0; i < nd; ++i) {
    memcpy(done[i].dst, done[i].src, done[i].bytes);
    if (done[i].owned) free(const_cast<void*>(done[i].src));
    mbar_tx_and_arrive("cp.async.bulk (complete_tx)", done[i].bar, -(long long)done[i].bytes, 0);
  }
}
// Queue a copy (landing every queued one first where the queue is full).
inline void bulk_enqueue(void* dst, const void* src, unsigned bytes, void* bar, int owned) {
  for (;;) {
    {
      Lock lk(bulk_lock());
      BulkQueue& b = bulk_queue();
      if (b.n < (int)(sizeof b.q / sizeof b.q[0])) {
        BulkCopy c = {dst, src, bytes, bar, owned};
        b.q[b.n++] = c;
        return;
      }
    }
    bulk_land(nullptr);
  }
}
inline void bulk_g2s(void* dst, const void* src, unsigned bytes, void* bar) {
  const char* op = "cp.async.bulk.shared::cluster.global";
  if (bytes == 0 || bytes % 16 != 0)
    warp_op_error(op, "the size must be a non-zero multiple of 16 bytes");
  if (((uintptr_t)src & 15u) != 0) warp_op_error(op, "the global source is not 16-byte aligned");
  smem_offset(op, dst, bytes, 16);
  mbar_checked(op, bar);
  bulk_enqueue(dst, src, bytes, bar, 0);
}

// ---- cp.async.bulk.tensor.Nd.shared::cluster.global.mbarrier::complete_tx::bytes (TMA)
// The tensor map as tecomp.target.tma.emu_bytes lays it out (the first 112 of its 128
// bytes): dims innermost first, byte strides of dims 1.., the box and element strides.
struct TmaMap {
  unsigned magic, rank, elem_bytes, swizzle;  // swizzle: 0 none, 1 32B, 2 64B, 3 128B
  unsigned long long addr;
  unsigned long long dims[5];
  unsigned long long strides[4];
  unsigned short box[5];
  unsigned char estride[5];
  unsigned char oob;
};
// The box of `map` at element coordinates `coords` (innermost first): element s of the
// box along dim i is the tensor's element coords[i] + s * estride[i]; the box lands
// densely (dim 0 fastest) at dst, each address's 16-byte chunk bits XORed with its bits
// 7.. (the swizzle: the layout a wgmma descriptor of the same swizzle decodes), elements
// outside the tensor as zeros; the copy completes the whole box's bytes on `bar` when it
// lands (as cp.async.bulk: when a thread next tests the barrier).  The global tensor is
// read when the copy is issued (the kernel does not write its own TMA sources).
inline void tma_load(void* dst, const void* map, const int* coords, int rank, void* bar) {
  const char* op = "cp.async.bulk.tensor.shared::cluster.global";
  char buf[300];
  TmaMap m;
  memcpy(&m, map, sizeof m);
  if (m.magic != 0x4D544354u)
    warp_op_error(op, "the tensor map's bytes are not an encoded map (tecomp.target.tma."
                      "emu_bytes for the emulation)");
  if ((int)m.rank != rank) {
    snprintf(buf, sizeof buf, "the tensor map has rank %u, the instruction gives %d "
             "coordinates (tc_tma_load_%ud)", m.rank, rank, m.rank);
    warp_op_error(op, buf);
  }
  unsigned long long shape[5], n = m.elem_bytes, elems = 1;
  for (int i = 0; i < rank; ++i) {
    shape[i] = ((unsigned long long)m.box[i] + m.estride[i] - 1) / m.estride[i];
    n *= shape[i];
    elems *= shape[i];
  }
  const unsigned span = m.swizzle ? (16u << m.swizzle) : 0u;   // 32, 64, 128 bytes a row
  if (m.swizzle && n % 128 != 0)
    warp_op_error(op, "the emulation takes swizzled boxes of whole 128-byte rows (the box's "
                      "bytes a multiple of 128)");
  const unsigned image = (unsigned)n;
  const unsigned base = smem_offset(op, dst, image, m.swizzle ? span * 8 : 128);
  mbar_checked(op, bar);
  unsigned char* img = static_cast<unsigned char*>(calloc(image, 1));
  if (!img) warp_op_error(op, "out of memory for the copy's image");
  for (unsigned long long e = 0; e < elems; ++e) {
    unsigned long long rem = e, goff = 0;
    bool inside = true;
    for (int i = 0; i < rank; ++i) {
      long long s = (long long)(rem % shape[i]);
      rem /= shape[i];
      long long g = (long long)coords[i] + s * (long long)m.estride[i];
      if (g < 0 || g >= (long long)m.dims[i])
        inside = false;
      else
        goff += (unsigned long long)g * (i == 0 ? m.elem_bytes : m.strides[i - 1]);
    }
    unsigned a = base + (unsigned)(e * m.elem_bytes);
    if (m.swizzle) a ^= ((a >> 7) & (span / 16 - 1)) << 4;
    if (inside)
      memcpy(img + (a - base), reinterpret_cast<const char*>(m.addr) + goff, m.elem_bytes);
  }
  bulk_enqueue(dst, img, image, bar, 1);
}

// ---- waiting on an mbarrier
struct PollState {  // what a waiting thread waits for (for the deadlock message)
  void* bar;
  unsigned parity;
};
inline bool mbar_test_parity(void* bar, unsigned parity) {
  bulk_land(bar);
  Lock lk(mbar_lock());
  MBar b = mbar_checked("mbarrier.try_wait.parity", bar);
  return b.phase != (parity & 1u);
}
inline void mbar_describe(char* buf, size_t n, void* bar, unsigned parity) {
  MBar b = mbar_load(bar);
  snprintf(buf, n, "mbarrier.try_wait.parity deadlocks: a thread waits on the mbarrier at "
           "shared address 0x%x for the phase of parity %u to complete, but the barrier is in "
           "its phase of parity %u with %u of %u arrivals pending and tx-count %lld, and every "
           "thread of block (%u, %u, %u) waits or has finished (a wrong parity, a missing "
           "arrive, or an expect_tx larger than the bytes copied)",
           (unsigned)((char*)bar - smem_window().lo), parity & 1u, b.phase, b.pending,
           b.expected, b.tx, blockIdx.x, blockIdx.y, blockIdx.z);
}
inline unsigned long long progress_token() {
  return __atomic_load_n(&current->progress_gen, __ATOMIC_SEQ_CST);
}
inline void note_progress() {
  __atomic_add_fetch(&current->progress_gen, 1, __ATOMIC_SEQ_CST);
  current->on_progress();
}
inline void poll_wait(unsigned long long token, void* bar, unsigned parity) {
  int t = current->linear_thread();
  current->poll_bar[t] = bar;
  current->poll_parity[t] = parity;
  current->poll(token);
}
inline void Runner::fail_mbar(int t) {
  char buf[600];
  if (t < 0 || !poll_bar[t]) return;
  Lock lk(mbar_lock());
  mbar_describe(buf, sizeof buf, poll_bar[t], poll_parity[t]);
  fail(buf);
}
inline void mbar_wait(void* bar, unsigned parity) {
  for (;;) {
    unsigned long long token = progress_token();
    if (mbar_test_parity(bar, parity)) return;
    poll_wait(token, bar, parity);
  }
}

// ---- wgmma
inline void wgmma_fence() { wgmma_fenced_flags()[current->linear_thread()] = 1; }
inline void wgmma_wait_group(int n) {
  if (n < 0 || n > 7) warp_op_error("wgmma.wait_group", "N must be in [0, 7]");
  wgmma_fenced_flags()[current->linear_thread()] = 0;
}

// One byte address of an operand's element (row r of M or N, k) in the shared window,
// decoded from a matrix descriptor ("Matrix Descriptor Format": start address bits 0-13,
// leading byte offset 16-29, stride byte offset 32-45, base offset 49-51, swizzle mode
// 62-63 -- 0 none, 1 128B, 2 64B, 3 32B; addresses and offsets in units of 16 bytes),
// as the PTX ISA's canonical layouts place it ("Shared Memory Matrix Layout": "Leading
// / Stride Dimension Byte Offset", "Canonical Layouts").
// K-major (imm-trans 0).  No swizzle: 8 x 16-byte core matrices of 128 contiguous bytes,
// LBO between core matrices along K, SBO between 8-row groups.  Swizzled: rows of 128 /
// 64 / 32 bytes along K, 8-row groups SBO apart (LBO unused: a k16 slice of 16-bit
// elements never leaves a row).
// MN-major (imm-trans 1: A M-major, B N-major).  No swizzle: core matrices of 8 k rows
// of 16 bytes along M/N (128 contiguous bytes), SBO between them along M/N, LBO between
// 8-k groups.  Swizzled: rows of 128 / 64 / 32 bytes along M/N, one per k, 8 k rows a
// pattern, 8-k groups SBO apart and the next 128 / 64 / 32 bytes of M/N LBO apart.
// Swizzled either way, the 16-byte chunk bits 4.. of the address are XORed with bits
// 7.. (the swizzling modes: the pattern repeats every 1024, 512, 256 bytes).
inline unsigned wgmma_addr(uint64_t desc, int r, int k, int elem_bytes, int mn_major = 0) {
  unsigned start = (unsigned)(desc & 0x3fffu) << 4;
  unsigned lbo = (unsigned)((desc >> 16) & 0x3fffu) << 4;
  unsigned sbo = (unsigned)((desc >> 32) & 0x3fffu) << 4;
  unsigned mode = (unsigned)(desc >> 62);
  unsigned kb = (unsigned)k * (unsigned)elem_bytes;
  unsigned rb = (unsigned)r * (unsigned)elem_bytes;
  if (mode == 0) {
    if (mn_major)
      return start + (rb / 16) * sbo + (unsigned)(k / 8) * lbo + (unsigned)(k % 8) * 16 + rb % 16;
    return start + (unsigned)(r / 8) * sbo + (kb / 16) * lbo + (unsigned)(r % 8) * 16 + kb % 16;
  }
  unsigned width = 256u >> mode;     // 128, 64, 32 bytes per row
  unsigned mask = (16u >> mode) - 1;  // 7, 3, 1: the row bits of a pattern
  unsigned a = mn_major
      ? start + (rb / width) * lbo + (unsigned)(k / 8) * sbo + (unsigned)(k % 8) * width + rb % width
      : start + (unsigned)(r / 8) * sbo + (unsigned)(r % 8) * width + kb;
  return a ^ (((a >> 7) & mask) << 4);
}

inline void wgmma_check_desc(const char* op, uint64_t desc, int rows, int mn_major) {
  if ((desc >> 49) & 7u)
    warp_op_error(op, "the descriptor's matrix base offset is not 0 (the emulation supports "
                      "swizzle patterns aligned to their repeat: 1024 bytes for 128B)");
  if ((desc >> 14) & 3u || (desc >> 30) & 3u || (desc >> 46) & 7u || (desc >> 52) & 0x3ffu)
    warp_op_error(op, "a reserved bit of the matrix descriptor is set");
  // every byte the operand touches must lie in the arena: its 16-byte pieces (8 elements
  // along k for K-major, along M/N for MN-major)
  SmemWindow& w = smem_window();
  for (int r = 0; r < rows; r += mn_major ? 8 : 1)
    for (int k = 0; k < 16; k += mn_major ? 1 : 8) {
      unsigned a = wgmma_addr(desc, r, k, 2, mn_major);
      if (!w.lo || (unsigned long long)a + 16 > w.bytes) {
        char buf[200];
        snprintf(buf, sizeof buf, "the matrix descriptor 0x%016llx addresses shared bytes "
                 "0x%x.. (row %d, k %d), outside the %llu-byte shared arena",
                 (unsigned long long)desc, a, r, k, w.bytes);
        warp_op_error(op, buf);
      }
    }
}

// wgmma.mma_async.sync.aligned.m64nNk16.f32.{f16,bf16}.{f16,bf16}, A and B in shared
// memory, K-major, or MN-major where imm-trans-a (tnsp_a) / imm-trans-b (tnsp_b) is 1:
// d = A . B^T (+ d when scale_d).  Thread t of the warpgroup (warp w = t / 32, g = lane
// / 4, q = lane % 4) holds in d[i] the element
//   D[16 w + g + 8 ((i / 2) % 2)][8 (i / 4) + 2 q + i % 2],   i < N / 2.
inline void wgmma_m64nNk16(float* d, uint64_t desc_a, uint64_t desc_b, int scale_d, int n,
                           int bf16, int tnsp_a = 0, int tnsp_b = 0) {
  const char* op = "wgmma.mma_async.m64nNk16";
  Runner* r = current;
  int t = r->linear_thread();
  if (r->nthreads % 128 != 0 && t >= r->nthreads / 128 * 128)
    warp_op_error(op, "the thread is not in a whole warpgroup (4 warps, 128 threads, from a "
                      "multiple of 128 in the block)");
  if (!wgmma_fenced_flags()[t])
    warp_op_error(op, "no wgmma.fence since the kernel began or since the last "
                      "wgmma.wait_group (tc_wgmma_fence before the first wgmma of a batch)");
  Slot mine;
  mine.p = nullptr;
  mine.w[0] = (unsigned)desc_a;
  mine.w[1] = (unsigned)(desc_a >> 32);
  mine.w[2] = (unsigned)desc_b;
  mine.w[3] = (unsigned)(desc_b >> 32);
  mine.w[4] = (unsigned)scale_d;
  int lane;
  const Slot* w = warp_exchange(op, mine, &lane);
  for (int i = 0; i < 32; ++i)
    if (memcmp(w[i].w, mine.w, 5 * sizeof(unsigned)) != 0)
      warp_op_error(op, "the lanes of a warp give different descriptors or scale-d (they must "
                        "be the same across the warpgroup)");
  wgmma_check_desc(op, desc_a, 64, tnsp_a);
  wgmma_check_desc(op, desc_b, n, tnsp_b);
  if (lane == 0) {  // the warpgroup's 4 warps issue one wgmma: the same descriptors
    int warp = t / 32, wg = warp / 4;
    Lock lk(wgmma_lock());
    unsigned long long k = wgmma_counts()[warp & 31]++;
    if (wg < 8) {
      WgmmaCall& c = wgmma_calls()[wg * 64 + (int)(k % 64)];
      if (!c.set || c.n != k) {
        c.n = k; c.da = desc_a; c.db = desc_b; c.set = 1;
      } else if (c.da != desc_a || c.db != desc_b) {
        char buf[300];
        snprintf(buf, sizeof buf, "warp %d gives wgmma #%llu of warpgroup %d the descriptors "
                 "0x%016llx / 0x%016llx, and another warp of the warpgroup 0x%016llx / "
                 "0x%016llx: the 4 warps of a warpgroup issue one wgmma on one 64-row A "
                 "block and one B block", warp, k, wg, (unsigned long long)desc_a,
                 (unsigned long long)desc_b, c.da, c.db);
        warp_op_error(op, buf);
      }
    }
  }
  if (t % 128 == 0) {   // the warpgroup's operand reads: A's 64 rows, B's n, 2 k chunks
    long long waves = 0, phases = 0;   // (a core matrix: 8 rows of 16 bytes along k, or
    for (int op_i = 0; op_i < 2; ++op_i) {   // MN-major 8 k rows of 16 bytes along M/N)
      uint64_t desc = op_i ? desc_b : desc_a;
      int rows = op_i ? n : 64, mn = op_i ? tnsp_b : tnsp_a;
      for (int r0 = 0; r0 < rows; r0 += 8)
        for (int k = 0; k < 16; k += 8) {
          uintptr_t a[8];
          for (int r = 0; r < 8; ++r)
            a[r] = mn ? wgmma_addr(desc, r0, k + r, 2, 1) : wgmma_addr(desc, r0 + r, k, 2);
          waves += phase_wavefronts(a);
          ++phases;
        }
    }
    pthread_mutex_lock(smem_stats_lock());
    smem_stats().wgmma_phases += phases;
    smem_stats().wgmma_wavefronts += waves;
    pthread_mutex_unlock(smem_stats_lock());
  }
  const unsigned char* base = reinterpret_cast<const unsigned char*>(smem_window().lo);
  int wi = (t / 32) % 4, g = lane >> 2, q = lane & 3;
  for (int i = 0; i < n / 2; ++i) {
    int row = 16 * wi + g + 8 * ((i >> 1) & 1), col = 8 * (i >> 2) + 2 * q + (i & 1);
    float acc = scale_d ? d[i] : 0.0f;
    for (int k = 0; k < 16; ++k) {
      unsigned short av, bv;
      memcpy(&av, base + wgmma_addr(desc_a, row, k, 2, tnsp_a), 2);
      memcpy(&bv, base + wgmma_addr(desc_b, col, k, 2, tnsp_b), 2);
      acc += b16_to_float(av, bf16) * b16_to_float(bv, bf16);
    }
    d[i] = acc;
  }
}

}  // namespace tecomp_emu

inline float __shfl_xor_sync(unsigned int mask, float v, int lane_mask) {
  unsigned int b;
  memcpy(&b, &v, sizeof b);
  b = tecomp_emu::shfl_xor_bits(mask, b, lane_mask);
  memcpy(&v, &b, sizeof v);
  return v;
}
inline int __shfl_xor_sync(unsigned int mask, int v, int lane_mask) {
  return (int)tecomp_emu::shfl_xor_bits(mask, (unsigned int)v, lane_mask);
}
inline unsigned int __shfl_xor_sync(unsigned int mask, unsigned int v, int lane_mask) {
  return tecomp_emu::shfl_xor_bits(mask, v, lane_mask);
}
