"""The CPU thread pool that ``parallel`` loops run on, written in LLVM IR.

Kernels call ``i32 tecomp_parallel_for(ptr task, ptr closure, i64 extent)``, where
``task`` is ``i32 (ptr closure, i64 begin, i64 end)``: an outlined loop body that runs
iterations ``[begin, end)`` and returns 0 or an error code.  The pool is written here as
textual LLVM IR (no C compiler is needed), JIT-compiled once per process in its own
MCJIT engine, and its entry points are registered with ``llvm.add_symbol`` so kernels
refer to them by name (their IR is the same in every process).  A library written by
``Module.export_library`` carries its own copy, compiled with it (``pool_ir(for_library=
True)``); every copy in a process is controlled through the same C functions, by
:mod:`tecomp.threads` (``tc.set_num_threads`` applies to all of them).

How it works
------------
* **Threads.**  ``num_threads`` counts the calling thread: the pool keeps
  ``num_threads - 1`` persistent pthreads, started on the first parallel region (or the
  first one after :func:`set_num_threads` changed the count).  The default is the CPUs
  the process may use (:func:`tecomp.threads.available_cpus`: its affinity mask
  and cgroup CPU quota), overridden by the environment variable ``TECOMP_NUM_THREADS``
  and by :func:`set_num_threads`.  (A library's pool called from C without
  ``tecomp_pool_set_threads`` takes ``TECOMP_NUM_THREADS``, else the CPUs of its
  affinity mask, on its first region.)
* **Dispatch.**  The iteration range is cut into ``ntasks = min(8 * num_threads,
  extent)`` contiguous chunks (sizes differ by at most one, the larger ones spread
  evenly: chunk ``i`` starts at ``i * extent // ntasks``), and the chunks into one
  contiguous *range* per thread (the dispatcher is thread 0), so that each range holds
  ``extent / num_threads`` iterations, give or take one.  (The larger chunks used to
  come first: 28 iterations on 2 threads were ranges of 16 and 12, which the second
  thread evened out only by taking a chunk from the first's range at the end.) Each
  thread claims the chunks of its own range in order, from the front, then goes through
  the other ranges in turn, claiming from their fronts what their owners have not: on a
  shared machine a thread that loses its core for a while simply gets fewer chunks (with
  one chunk per thread the region would wait for it), and the chunk it holds when it
  loses the core is small.  While no thread is late, each streams through its own
  contiguous part of the iteration space, as a static schedule would: memory-bound loops
  ran 5-15% faster that way than with the chunks dealt out in turn from one counter
  (layer norm 4096x768 and 4096x1024 row sums on the 2-core Zen 4, 2 threads; see
  benchmarks/DECISIONS.md, "Runtime: one range of chunks per thread").  The dispatcher
  publishes the job (task pointer, closure, extent, ntasks, and each range as one 64-bit
  word ``(generation << 32) | (front << 16) | back``, on its own cache line), bumps a
  generation counter, wakes sleeping workers if there are any, and then claims chunks
  itself.  A chunk is claimed with a compare-and-swap on its range's word, so a worker
  still finishing an old job can never claim a chunk of a newer one; a worker that is
  late simply finds its range taken by faster threads.  The dispatcher returns when
  every chunk has finished (a ``pending`` counter reaches zero), with the first non-zero
  code any chunk returned.  Which chunk fails first in time does not decide the error
  the caller sees: the outlined task keeps the error of the failing chunk that comes
  first in the loop (``llvm.module``, ``outline_parallel``), the one a serial run would
  report.
* **Waiting.**  Idle workers spin on the generation counter (with ``pause``) for a
  while (``TECOMP_SPIN``, default 2000 ``pause`` iterations: about 45 us on the
  project's Xeon, where one ``pause`` measured 22 ns; enough to catch the next region
  of a kernel or the next call from Python), then block on a condition variable; the
  dispatcher only takes the condition's mutex when someone is asleep.  The former
  default, 20000 (0.45 ms), made 2 threads slower than 1 when another process kept
  the second core of the 2-core VM busy: the worker spent its fair share spinning and
  was then descheduled while holding a chunk (64x56x56 NHWC conv, interleaved
  medians: 102 GFLOP/s with 20000, 122 with 2000; with both cores free the two were
  within 3%).
  The dispatcher, once it has run out of chunks, spins on the ``pending`` counter
  for ``TECOMP_WAIT_SPIN`` (default 1024 ``pause``: about 20 us) and then blocks on a
  second condition variable that the thread finishing the last chunk signals: a chunk
  still running after that long usually means its thread lost its core to another
  process, and spinning would only keep this core from it (or from anyone else).
  All shared words are accessed with sequentially consistent atomics.
* **Callers.**  A process-wide dispatch mutex serialises parallel regions: kernels
  called from several Python threads at once are correct, and each region gets the
  whole pool in turn (a ctypes call releases the GIL, so a waiting caller blocks in
  pthread_mutex_lock, not in Python).  Parallel loops nested inside a parallel loop are
  compiled as serial loops, so a worker never dispatches.
* **Workspace.**  Kernels take their heap buffers (temporaries over 64 KiB, or of
  symbolic size) from ``tecomp_ws_alloc`` and give them back with ``tecomp_ws_free``.
  Blocks of at least ``WS_MIN`` bytes (256 KiB) are kept in a small cache (``WS_SLOTS``
  slots under one mutex) instead of being freed; a later request of at least
  ``WS_MIN`` takes the smallest kept block that holds it and is at most twice its
  size.  Without the cache, glibc gave the top of the heap back to the system after
  every call that freed large blocks, and the next call took a page fault on every
  4 KiB it wrote: BERT-base's backward at batch 8 (about 100 MB of temporaries) ran
  244 ms a call, 198 ms with the cache (measurements: benchmarks/DECISIONS.md,
  "Runtime: the workspace cache").  The cache keeps at most ``ws_limit`` bytes
  (default 1 GiB; ``TECOMP_WORKSPACE_LIMIT``, ``tc.set_workspace_limit``), freeing the
  oldest blocks to make room; ``tc.release_workspace()`` frees them all.  Smaller
  blocks go to ``aligned_alloc`` and ``free`` directly.  Each block carries its size in
  a 64-byte header before the (64-byte aligned) address the kernel gets.
* **One pool per process (opt-in).**  ``tecomp_pool_delegate_to(f)`` makes a pool run
  every region by calling ``f`` (another pool's ``tecomp_parallel_for``) instead of
  on its own threads; with ``TECOMP_SHARED_POOL=1``, :func:`tecomp.threads.register` points each
  pool registered after the first at the first.  Twenty kernels of 2^18 elements in a
  row, each from its own library, took 0.79-1.04 ms on the 2-core Zen 5 VM with a pool
  each against 0.73-0.76 ms on one pool (min of 200, under load); but torch.compile's
  ResNet-50 and a CNN's training step ran slower on one pool (see
  :func:`tecomp.threads.register`), so each library keeps its own by default.
* **Marked threads.**  ``tecomp_pool_delegate_marked(f, key)`` makes a pool run the
  regions of the threads whose value of the pthread key ``key`` is not NULL by calling
  ``f`` (checked first: one atomic load per region while no ``f`` is set, a
  ``pthread_getspecific`` after): ``tecomp.dynamo.openmp`` marks the thread that runs
  a compiled graph, whose kernels then run on PyTorch's OpenMP threads, while other
  threads' kernels stay on tecomp's.
* **Lifetime.**  An ``atexit`` hook (:mod:`tecomp.threads`) joins the workers
  before the interpreter tears the JIT memory down; after ``fork()`` the child resets
  the pool (its workers did not survive the fork) and starts new ones on its first
  parallel region.
"""
from __future__ import annotations

import ctypes
import threading
import time
from typing import Optional

from ...errors import InternalError
from ...target import as_target
from . import jit as llvm_jit
from ...threads import (  # noqa: F401  (set_num_threads, get_num_threads: the public names)
    DEFAULT_SPIN, DEFAULT_WAIT_SPIN, DEFAULT_WORKSPACE_LIMIT, DELEGATE_MARKED, DELEGATE_TO,
    MAX_THREADS,
    PARALLEL_FOR, POOL_FUNCTIONS,
    PoolControls,
    default_num_threads, get_num_threads, register, set_num_threads, spin_from_env,
)

#: Symbol kernels call; see the module docstring (defined in tecomp.threads).
#: The workspace allocator kernels call for their heap buffers (see "Workspace" above).
WS_ALLOC, WS_FREE = "tecomp_ws_alloc", "tecomp_ws_free"
#: the slots of the workspace cache, and the smallest block it keeps (bytes)
WS_SLOTS = 64
WS_MIN = 256 * 1024

_PAUSE_X86 = "call void @llvm.x86.sse2.pause()"
_PAUSE_ARM = "call void @llvm.aarch64.hint(i32 1)"   # hint #1: yield

_POOL_IR = r"""
; tecomp CPU thread pool (see tecomp/codegen/llvm/threadpool.py)
@tp_lock = internal global [128 x i8] zeroinitializer, align 64
@tp_sleep_lock = internal global [128 x i8] zeroinitializer, align 64
@tp_sleep_cond = internal global [128 x i8] zeroinitializer, align 64
@tp_done_lock = internal global [128 x i8] zeroinitializer, align 64
@tp_done_cond = internal global [128 x i8] zeroinitializer, align 64
@tp_waiting = internal global i32 0, align 64
@tp_wait_spin = internal global i64 1024, align 8
@tp_gen = internal global i64 0, align 64
@tp_ranges = internal global [{MAX_THREADS} x [8 x i64]] zeroinitializer, align 64
@tp_nranges = internal global i64 0, align 64
@tp_idgen = internal global i64 0, align 8
@tp_pending = internal global i64 0, align 64
@tp_sleeping = internal global i64 0, align 64
@tp_fn = internal global ptr null, align 8
@tp_closure = internal global ptr null, align 8
@tp_extent = internal global i64 0, align 8
@tp_ntasks = internal global i64 0, align 8
@tp_ret = internal global i32 0, align 4
@tp_shutdown = internal global i32 0, align 4
@tp_nworkers = internal global i32 0, align 4
@tp_threads = internal global ptr null, align 8
@tp_desired = internal global i32 {DESIRED0}, align 4
@tp_spin = internal global i64 2000, align 8
@tp_delegate = internal global ptr null, align 8
@tp_tls_delegate = internal global ptr null, align 8
@tp_tls_key = internal global i64 0, align 8
@ws_lock = internal global [128 x i8] zeroinitializer, align 64
@ws_ptr = internal global [{WS_SLOTS} x ptr] zeroinitializer, align 8
@ws_size = internal global [{WS_SLOTS} x i64] zeroinitializer, align 8
@ws_cached = internal global i64 0, align 8
@ws_limit = internal global i64 {WS_LIMIT}, align 8
@ws_next = internal global i64 0, align 8

declare i32 @pthread_create(ptr, ptr, ptr, ptr)
declare i32 @pthread_join(i64, ptr)
declare i32 @pthread_mutex_init(ptr, ptr)
declare i32 @pthread_mutex_lock(ptr)
declare i32 @pthread_mutex_unlock(ptr)
declare i32 @pthread_cond_init(ptr, ptr)
declare i32 @pthread_cond_wait(ptr, ptr)
declare i32 @pthread_cond_broadcast(ptr)
declare i32 @sched_yield()
declare ptr @pthread_getspecific(i64)
declare ptr @malloc(i64)
declare void @free(ptr)
declare ptr @aligned_alloc(i64, i64)
{PAUSE_DECL}
{WANTED}

; Run chunk %idx of the current job: its iterations, then count it done (waking the
; dispatcher if it blocked waiting for the last one).
define internal void @tp_chunk(ptr %fn, ptr %cl, i64 %ext, i64 %nt, i64 %idx) nounwind {
entry:
  ; chunk i is [floor(i*ext/nt), floor((i+1)*ext/nt)), computed as i*q + i*rem/nt
  ; (ext = q*nt + rem; i*rem < nt^2 cannot overflow): the larger chunks spread evenly,
  ; so each thread's range of chunks holds ext/nthreads iterations, give or take one
  %chunk = udiv i64 %ext, %nt
  %rem = urem i64 %ext, %nt
  %b0 = mul i64 %idx, %chunk
  %br0 = mul i64 %idx, %rem
  %br = udiv i64 %br0, %nt
  %begin = add i64 %b0, %br
  %idx1 = add i64 %idx, 1
  %e0 = mul i64 %idx1, %chunk
  %er0 = mul i64 %idx1, %rem
  %er = udiv i64 %er0, %nt
  %end = add i64 %e0, %er
  %r = call i32 %fn(ptr %cl, i64 %begin, i64 %end)
  %bad = icmp ne i32 %r, 0
  br i1 %bad, label %seterr, label %fin
seterr:
  %x = cmpxchg ptr @tp_ret, i32 0, i32 %r seq_cst seq_cst
  br label %fin
fin:
  %old = atomicrmw sub ptr @tp_pending, i64 1 seq_cst
  %last = icmp eq i64 %old, 1
  br i1 %last, label %chk_waiter, label %done
chk_waiter:
  ; the last chunk: wake the dispatcher if it blocked waiting for it
  %wt = load atomic i32, ptr @tp_waiting seq_cst, align 4
  %blocked = icmp ne i32 %wt, 0
  br i1 %blocked, label %signal, label %done
signal:
  %sl = call i32 @pthread_mutex_lock(ptr @tp_done_lock)
  %sb = call i32 @pthread_cond_broadcast(ptr @tp_done_cond)
  %su = call i32 @pthread_mutex_unlock(ptr @tp_done_lock)
  br label %done
done:
  ret void
}

; Claim and run chunks of the job of generation %g until none is left, as thread %self
; (0: the dispatcher, 1..: the workers): first its own range's, then the next ranges'
; in turn, each from its front (see "Dispatch" in the module docstring).  A range's word
; is (generation << 32) | (front << 16) | back: chunks [front, back) are left.
define internal void @tp_run_tasks(i64 %g, i64 %self) nounwind {
entry:
  %fn = load atomic ptr, ptr @tp_fn seq_cst, align 8
  %cl = load atomic ptr, ptr @tp_closure seq_cst, align 8
  %ext = load atomic i64, ptr @tp_extent seq_cst, align 8
  %nt = load atomic i64, ptr @tp_ntasks seq_cst, align 8
  %nr = load atomic i64, ptr @tp_nranges seq_cst, align 8
  %tag = shl i64 %g, 32
  br label %next_range
next_range:
  %j = phi i64 [ 0, %entry ], [ %j1, %drained ]
  %jend = icmp uge i64 %j, %nr
  br i1 %jend, label %done, label %range
range:
  %rr = add i64 %self, %j
  %r = urem i64 %rr, %nr
  %p = getelementptr [8 x i64], ptr @tp_ranges, i64 %r
  br label %claim
claim:
  %w = load atomic i64, ptr %p seq_cst, align 8
  %wtag = and i64 %w, -4294967296
  %same = icmp eq i64 %wtag, %tag
  br i1 %same, label %chk, label %done
chk:
  %f0 = lshr i64 %w, 16
  %f = and i64 %f0, 65535
  %bk = and i64 %w, 65535
  %more = icmp ult i64 %f, %bk
  br i1 %more, label %cas, label %drained
cas:
  %wn = add i64 %w, 65536
  %pair = cmpxchg ptr %p, i64 %w, i64 %wn seq_cst seq_cst
  %ok = extractvalue { i64, i1 } %pair, 1
  br i1 %ok, label %run, label %claim
run:
  call void @tp_chunk(ptr %fn, ptr %cl, i64 %ext, i64 %nt, i64 %f)
  br label %claim
drained:
  %j1 = add i64 %j, 1
  br label %next_range
done:
  ret void
}

define internal ptr @tp_worker(ptr %arg) nounwind {
entry:
  %seen0 = ptrtoint ptr %arg to i64
  %id0 = atomicrmw add ptr @tp_idgen, i64 1 seq_cst
  %self = add i64 %id0, 1
  br label %top
top:
  %seen = phi i64 [ %seen0, %entry ], [ %g, %run ]
  %spinmax = load atomic i64, ptr @tp_spin seq_cst, align 8
  br label %spin
spin:
  %i = phi i64 [ 0, %top ], [ %i1, %spin_next ]
  %gs = load atomic i64, ptr @tp_gen seq_cst, align 8
  %chs = icmp ne i64 %gs, %seen
  br i1 %chs, label %got, label %spin_next
spin_next:
  {PAUSE}
  %i1 = add i64 %i, 1
  %again = icmp ult i64 %i1, %spinmax
  br i1 %again, label %spin, label %sleep
sleep:
  %l0 = call i32 @pthread_mutex_lock(ptr @tp_sleep_lock)
  %s0 = atomicrmw add ptr @tp_sleeping, i64 1 seq_cst
  br label %sleep_chk
sleep_chk:
  %gw = load atomic i64, ptr @tp_gen seq_cst, align 8
  %chw = icmp ne i64 %gw, %seen
  br i1 %chw, label %wake, label %do_wait
do_wait:
  %w0 = call i32 @pthread_cond_wait(ptr @tp_sleep_cond, ptr @tp_sleep_lock)
  br label %sleep_chk
wake:
  %s1 = atomicrmw sub ptr @tp_sleeping, i64 1 seq_cst
  %u0 = call i32 @pthread_mutex_unlock(ptr @tp_sleep_lock)
  br label %got
got:
  %g = phi i64 [ %gs, %spin ], [ %gw, %wake ]
  %sd = load atomic i32, ptr @tp_shutdown seq_cst, align 4
  %stop = icmp ne i32 %sd, 0
  br i1 %stop, label %exit, label %run
run:
  call void @tp_run_tasks(i64 %g, i64 %self)
  br label %top
exit:
  ret ptr null
}

; Wake every sleeping worker (the caller changed tp_gen).
define internal void @tp_wake_all() nounwind {
entry:
  %sl = load atomic i64, ptr @tp_sleeping seq_cst, align 8
  %any = icmp ne i64 %sl, 0
  br i1 %any, label %wake, label %done
wake:
  %l = call i32 @pthread_mutex_lock(ptr @tp_sleep_lock)
  %b = call i32 @pthread_cond_broadcast(ptr @tp_sleep_cond)
  %u = call i32 @pthread_mutex_unlock(ptr @tp_sleep_lock)
  br label %done
done:
  ret void
}

; Stop and join every worker.  Caller holds tp_lock.
define internal void @tp_stop_locked() nounwind {
entry:
  %nw = load atomic i32, ptr @tp_nworkers seq_cst, align 4
  %none = icmp eq i32 %nw, 0
  br i1 %none, label %done, label %stop
stop:
  store atomic i32 1, ptr @tp_shutdown seq_cst, align 4
  %g0 = atomicrmw add ptr @tp_gen, i64 1 seq_cst
  %l = call i32 @pthread_mutex_lock(ptr @tp_sleep_lock)
  %b = call i32 @pthread_cond_broadcast(ptr @tp_sleep_cond)
  %u = call i32 @pthread_mutex_unlock(ptr @tp_sleep_lock)
  %arr = load ptr, ptr @tp_threads, align 8
  %n64 = zext i32 %nw to i64
  br label %join
join:
  %i = phi i64 [ 0, %stop ], [ %i1, %join ]
  %tp = getelementptr i64, ptr %arr, i64 %i
  %t = load i64, ptr %tp, align 8
  %j = call i32 @pthread_join(i64 %t, ptr null)
  %i1 = add i64 %i, 1
  %more = icmp ult i64 %i1, %n64
  br i1 %more, label %join, label %joined
joined:
  call void @free(ptr %arr)
  store ptr null, ptr @tp_threads, align 8
  store atomic i32 0, ptr @tp_nworkers seq_cst, align 4
  store atomic i32 0, ptr @tp_shutdown seq_cst, align 4
  br label %done
done:
  ret void
}

; Start %n workers (fewer if pthread_create fails).  Caller holds tp_lock.
define internal void @tp_start_locked(i32 %n) nounwind {
entry:
  %pos = icmp sgt i32 %n, 0
  br i1 %pos, label %alloc, label %done
alloc:
  %n64 = zext i32 %n to i64
  %bytes = mul i64 %n64, 8
  %arr = call ptr @malloc(i64 %bytes)
  %isnull = icmp eq ptr %arr, null
  br i1 %isnull, label %done, label %start
start:
  store ptr %arr, ptr @tp_threads, align 8
  store atomic i64 0, ptr @tp_idgen seq_cst, align 8
  %g = load atomic i64, ptr @tp_gen seq_cst, align 8
  %garg = inttoptr i64 %g to ptr
  br label %create
create:
  %i = phi i64 [ 0, %start ], [ %i1, %created ]
  %tp = getelementptr i64, ptr %arr, i64 %i
  %rc = call i32 @pthread_create(ptr %tp, ptr null, ptr @tp_worker, ptr %garg)
  %fail = icmp ne i32 %rc, 0
  br i1 %fail, label %stopped, label %created
created:
  %i1 = add i64 %i, 1
  %more = icmp ult i64 %i1, %n64
  br i1 %more, label %create, label %stopped
stopped:
  %cnt = phi i64 [ %i, %create ], [ %i1, %created ]
  %cnt32 = trunc i64 %cnt to i32
  store atomic i32 %cnt32, ptr @tp_nworkers seq_cst, align 4
  br label %done
done:
  ret void
}

define i32 @tecomp_parallel_for(ptr %fn, ptr %cl, i64 %extent) nounwind {
entry:
  %pos = icmp sgt i64 %extent, 0
  br i1 %pos, label %own, label %ret0
ret0:
  ret i32 0
own:
  ; the calling thread's regions run elsewhere (tecomp_pool_delegate_marked): where
  ; its value of the pthread key tp_tls_key is set
  %td = load atomic ptr, ptr @tp_tls_delegate seq_cst, align 8
  %hastd = icmp ne ptr %td, null
  br i1 %hastd, label %marked, label %shared
marked:
  %key = load atomic i64, ptr @tp_tls_key seq_cst, align 8
  %mark = call ptr @pthread_getspecific(i64 %key)
  %ismarked = icmp ne ptr %mark, null
  br i1 %ismarked, label %delegated, label %shared
shared:
  ; another pool of the process runs this pool's regions (tecomp_pool_delegate_to)
  %dl = load atomic ptr, ptr @tp_delegate seq_cst, align 8
  %hasdl = icmp ne ptr %dl, null
  br i1 %hasdl, label %delegated, label %go
delegated:
  %to = phi ptr [ %td, %marked ], [ %dl, %shared ]
  %rdl = tail call i32 %to(ptr %fn, ptr %cl, i64 %extent)
  ret i32 %rdl
go:
  %want = call i32 @tp_wanted()
  %one = icmp sle i32 %want, 1
  %ext1 = icmp eq i64 %extent, 1
  %single = or i1 %one, %ext1
  br i1 %single, label %serial, label %par
serial:
  %rs = call i32 %fn(ptr %cl, i64 0, i64 %extent)
  ret i32 %rs
par:
  %lk = call i32 @pthread_mutex_lock(ptr @tp_lock)
  %nw = load atomic i32, ptr @tp_nworkers seq_cst, align 4
  %wantw = sub i32 %want, 1
  %same = icmp eq i32 %nw, %wantw
  br i1 %same, label %dispatch, label %restart
restart:
  call void @tp_stop_locked()
  call void @tp_start_locked(i32 %wantw)
  br label %dispatch
dispatch:
  %nw2 = load atomic i32, ptr @tp_nworkers seq_cst, align 4
  %nthreads32 = add i32 %nw2, 1
  %nthreads = zext i32 %nthreads32 to i64
  %cap = mul i64 %nthreads, 8
  %fewer = icmp ult i64 %extent, %cap
  %nt = select i1 %fewer, i64 %extent, i64 %cap
  %gold = load atomic i64, ptr @tp_gen seq_cst, align 8
  %g = add i64 %gold, 1
  %tag = shl i64 %g, 32
  store atomic ptr %fn, ptr @tp_fn seq_cst, align 8
  store atomic ptr %cl, ptr @tp_closure seq_cst, align 8
  store atomic i64 %extent, ptr @tp_extent seq_cst, align 8
  store atomic i64 %nt, ptr @tp_ntasks seq_cst, align 8
  store atomic i64 %nthreads, ptr @tp_nranges seq_cst, align 8
  store atomic i32 0, ptr @tp_ret seq_cst, align 4
  store atomic i64 %nt, ptr @tp_pending seq_cst, align 8
  br label %ranges
ranges:
  ; thread r's range: chunks [r*nt/nthreads, (r+1)*nt/nthreads)
  %ri = phi i64 [ 0, %dispatch ], [ %ri1, %ranges ]
  %rlo0 = mul i64 %ri, %nt
  %rlo = udiv i64 %rlo0, %nthreads
  %ri1 = add i64 %ri, 1
  %rhi0 = mul i64 %ri1, %nt
  %rhi = udiv i64 %rhi0, %nthreads
  %rlos = shl i64 %rlo, 16
  %rw0 = or i64 %tag, %rlos
  %rw = or i64 %rw0, %rhi
  %rp = getelementptr [8 x i64], ptr @tp_ranges, i64 %ri
  store atomic i64 %rw, ptr %rp seq_cst, align 8
  %rmore = icmp ult i64 %ri1, %nthreads
  br i1 %rmore, label %ranges, label %publish
publish:
  store atomic i64 %g, ptr @tp_gen seq_cst, align 8
  call void @tp_wake_all()
  call void @tp_run_tasks(i64 %g, i64 0)
  %wspin = load atomic i64, ptr @tp_wait_spin seq_cst, align 8
  br label %wait
wait:
  %k = phi i64 [ 0, %publish ], [ %k1, %wait_next ]
  %p = load atomic i64, ptr @tp_pending seq_cst, align 8
  %fin = icmp eq i64 %p, 0
  br i1 %fin, label %finished, label %wait_next
wait_next:
  {PAUSE}
  %k1 = add i64 %k, 1
  %long = icmp uge i64 %k1, %wspin
  br i1 %long, label %block, label %wait
block:
  ; a chunk is still running elsewhere after a short spin: its thread may have lost
  ; its core to another process.  Block instead of spinning, so that this core goes
  ; idle and the kernel can move that thread here; the last chunk signals.
  %bl = call i32 @pthread_mutex_lock(ptr @tp_done_lock)
  store atomic i32 1, ptr @tp_waiting seq_cst, align 4
  br label %block_chk
block_chk:
  %p2 = load atomic i64, ptr @tp_pending seq_cst, align 8
  %fin2 = icmp eq i64 %p2, 0
  br i1 %fin2, label %block_done, label %block_wait
block_wait:
  %bw = call i32 @pthread_cond_wait(ptr @tp_done_cond, ptr @tp_done_lock)
  br label %block_chk
block_done:
  store atomic i32 0, ptr @tp_waiting seq_cst, align 4
  %bu = call i32 @pthread_mutex_unlock(ptr @tp_done_lock)
  br label %finished
finished:
  %r = load atomic i32, ptr @tp_ret seq_cst, align 4
  %ul = call i32 @pthread_mutex_unlock(ptr @tp_lock)
  ret i32 %r
}

define void @tecomp_pool_delegate_to(ptr %f) nounwind {
entry:
  store atomic ptr %f, ptr @tp_delegate seq_cst, align 8
  ret void
}

; the regions of a thread whose value of the pthread key %key is not NULL run by
; calling %f (NULL: none); the key is stored before %f, which the dispatcher reads first
define void @tecomp_pool_delegate_marked(ptr %f, i64 %key) nounwind {
entry:
  store atomic i64 %key, ptr @tp_tls_key seq_cst, align 8
  store atomic ptr %f, ptr @tp_tls_delegate seq_cst, align 8
  ret void
}

define void @tecomp_pool_set_threads(i32 %n) nounwind {
entry:
  %lk = call i32 @pthread_mutex_lock(ptr @tp_lock)
  store atomic i32 %n, ptr @tp_desired seq_cst, align 4
  %nw = load atomic i32, ptr @tp_nworkers seq_cst, align 4
  %want = sub i32 %n, 1
  %same = icmp eq i32 %nw, %want
  br i1 %same, label %done, label %stop
stop:
  call void @tp_stop_locked()
  br label %done
done:
  %ul = call i32 @pthread_mutex_unlock(ptr @tp_lock)
  ret void
}

define i32 @tecomp_pool_get_threads() nounwind {
entry:
  %n = call i32 @tp_wanted()
  ret i32 %n
}

define i32 @tecomp_pool_num_workers() nounwind {
entry:
  %n = load atomic i32, ptr @tp_nworkers seq_cst, align 4
  ret i32 %n
}

define void @tecomp_pool_set_spin(i64 %n) nounwind {
entry:
  store atomic i64 %n, ptr @tp_spin seq_cst, align 8
  ret void
}

define void @tecomp_pool_set_wait_spin(i64 %n) nounwind {
entry:
  store atomic i64 %n, ptr @tp_wait_spin seq_cst, align 8
  ret void
}

define void @tecomp_pool_shutdown() nounwind {
entry:
  %lk = call i32 @pthread_mutex_lock(ptr @tp_lock)
  call void @tp_stop_locked()
  %ul = call i32 @pthread_mutex_unlock(ptr @tp_lock)
  ret void
}

; ---- the workspace cache (see "Workspace" in the module docstring) ----
; A block is a 64-byte header holding its payload's size (a multiple of 64), then the
; payload, 64-byte aligned.  %n: the bytes wanted (at most 2^62: the kernel checks).
define ptr @tecomp_ws_alloc(i64 %n) nounwind {
entry:
  %n63 = add i64 %n, 63
  %nr = and i64 %n63, -64
  %big = icmp uge i64 %nr, {WS_MIN}
  br i1 %big, label %lookup, label %fresh
lookup:
  %l = call i32 @pthread_mutex_lock(ptr @ws_lock)
  %twice = shl i64 %nr, 1
  br label %scan
scan:
  ; the smallest cached block of at least %nr and at most twice that
  %i = phi i64 [ 0, %lookup ], [ %i1, %scan ]
  %bi = phi i64 [ -1, %lookup ], [ %bi1, %scan ]
  %bs = phi i64 [ -1, %lookup ], [ %bs1, %scan ]
  %pp = getelementptr [{WS_SLOTS} x ptr], ptr @ws_ptr, i64 0, i64 %i
  %p = load ptr, ptr %pp, align 8
  %sp = getelementptr [{WS_SLOTS} x i64], ptr @ws_size, i64 0, i64 %i
  %s = load i64, ptr %sp, align 8
  %has = icmp ne ptr %p, null
  %ge = icmp uge i64 %s, %nr
  %le = icmp ule i64 %s, %twice
  %lt = icmp ult i64 %s, %bs
  %a1 = and i1 %has, %ge
  %a2 = and i1 %a1, %le
  %a3 = and i1 %a2, %lt
  %bi1 = select i1 %a3, i64 %i, i64 %bi
  %bs1 = select i1 %a3, i64 %s, i64 %bs
  %i1 = add i64 %i, 1
  %more = icmp ult i64 %i1, {WS_SLOTS}
  br i1 %more, label %scan, label %scanned
scanned:
  %found = icmp ne i64 %bi1, -1
  br i1 %found, label %take, label %miss
take:
  %tp = getelementptr [{WS_SLOTS} x ptr], ptr @ws_ptr, i64 0, i64 %bi1
  %blk = load ptr, ptr %tp, align 8
  store ptr null, ptr %tp, align 8
  %c0 = atomicrmw sub ptr @ws_cached, i64 %bs1 seq_cst
  %u0 = call i32 @pthread_mutex_unlock(ptr @ws_lock)
  %q = getelementptr i8, ptr %blk, i64 64
  ret ptr %q
miss:
  %u1 = call i32 @pthread_mutex_unlock(ptr @ws_lock)
  br label %fresh
fresh:
  %tot = add i64 %nr, 64
  %blk2 = call ptr @aligned_alloc(i64 64, i64 %tot)
  %null = icmp eq ptr %blk2, null
  br i1 %null, label %fail, label %ok
fail:
  ret ptr null
ok:
  store i64 %nr, ptr %blk2, align 8
  %q2 = getelementptr i8, ptr %blk2, i64 64
  ret ptr %q2
}

; Free slot %i's block (caller holds ws_lock).
define internal void @ws_evict_locked(i64 %i) nounwind {
entry:
  %pp = getelementptr [{WS_SLOTS} x ptr], ptr @ws_ptr, i64 0, i64 %i
  %p = load ptr, ptr %pp, align 8
  %has = icmp ne ptr %p, null
  br i1 %has, label %evict, label %done
evict:
  %sp = getelementptr [{WS_SLOTS} x i64], ptr @ws_size, i64 0, i64 %i
  %s = load i64, ptr %sp, align 8
  call void @free(ptr %p)
  store ptr null, ptr %pp, align 8
  %c = atomicrmw sub ptr @ws_cached, i64 %s seq_cst
  br label %done
done:
  ret void
}

; Give back a block of tecomp_ws_alloc (null: nothing).  A large one is kept for the
; next tecomp_ws_alloc, the oldest ones evicted while the cache would exceed its limit.
define void @tecomp_ws_free(ptr %q) nounwind {
entry:
  %isnull = icmp eq ptr %q, null
  br i1 %isnull, label %done, label %chk
chk:
  %blk = getelementptr i8, ptr %q, i64 -64
  %s = load i64, ptr %blk, align 8
  %big = icmp uge i64 %s, {WS_MIN}
  %lim = load atomic i64, ptr @ws_limit seq_cst, align 8
  %fits = icmp ule i64 %s, %lim
  %keep = and i1 %big, %fits
  br i1 %keep, label %locked, label %release
locked:
  %l = call i32 @pthread_mutex_lock(ptr @ws_lock)
  %start = load i64, ptr @ws_next, align 8
  br label %room
room:
  ; evict from the oldest slot on (a ring: ws_next is where the next block goes) while
  ; the block would not fit under the limit, then take the first empty slot from there
  %k = phi i64 [ 0, %locked ], [ %k1, %room_next ]
  %pos = add i64 %start, %k
  %slot = urem i64 %pos, {WS_SLOTS}
  %c = load atomic i64, ptr @ws_cached seq_cst, align 8
  %need = add i64 %c, %s
  %over = icmp ugt i64 %need, %lim
  br i1 %over, label %evict, label %find
evict:
  call void @ws_evict_locked(i64 %slot)
  br label %room_next
room_next:
  %k1 = add i64 %k, 1
  %again = icmp ult i64 %k1, {WS_SLOTS}
  br i1 %again, label %room, label %find
find:
  %j = phi i64 [ 0, %room ], [ 0, %room_next ], [ %j1, %find_next ]
  %fpos = add i64 %start, %j
  %fslot = urem i64 %fpos, {WS_SLOTS}
  %fpp = getelementptr [{WS_SLOTS} x ptr], ptr @ws_ptr, i64 0, i64 %fslot
  %fp = load ptr, ptr %fpp, align 8
  %empty = icmp eq ptr %fp, null
  br i1 %empty, label %store, label %find_next
find_next:
  %j1 = add i64 %j, 1
  %fmore = icmp ult i64 %j1, {WS_SLOTS}
  br i1 %fmore, label %find, label %full
full:
  ; every slot taken: the oldest block makes room
  %oslot = urem i64 %start, {WS_SLOTS}
  call void @ws_evict_locked(i64 %oslot)
  br label %store
store:
  %dst = phi i64 [ %fslot, %find ], [ %oslot, %full ]
  %dpp = getelementptr [{WS_SLOTS} x ptr], ptr @ws_ptr, i64 0, i64 %dst
  store ptr %blk, ptr %dpp, align 8
  %dsp = getelementptr [{WS_SLOTS} x i64], ptr @ws_size, i64 0, i64 %dst
  store i64 %s, ptr %dsp, align 8
  %c2 = atomicrmw add ptr @ws_cached, i64 %s seq_cst
  %nx = add i64 %dst, 1
  %nxm = urem i64 %nx, {WS_SLOTS}
  store i64 %nxm, ptr @ws_next, align 8
  %u = call i32 @pthread_mutex_unlock(ptr @ws_lock)
  br label %done
release:
  call void @free(ptr %blk)
  br label %done
done:
  ret void
}

; Free every cached block; returns the bytes freed.
define i64 @tecomp_pool_ws_release() nounwind {
entry:
  %l = call i32 @pthread_mutex_lock(ptr @ws_lock)
  %before = load atomic i64, ptr @ws_cached seq_cst, align 8
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i1, %loop ]
  call void @ws_evict_locked(i64 %i)
  %i1 = add i64 %i, 1
  %more = icmp ult i64 %i1, {WS_SLOTS}
  br i1 %more, label %loop, label %done
done:
  %u = call i32 @pthread_mutex_unlock(ptr @ws_lock)
  ret i64 %before
}

; The most bytes the cache keeps (0: none); below what it keeps, everything is freed.
define void @tecomp_pool_ws_set_limit(i64 %n) nounwind {
entry:
  store atomic i64 %n, ptr @ws_limit seq_cst, align 8
  %c = load atomic i64, ptr @ws_cached seq_cst, align 8
  %over = icmp ugt i64 %c, %n
  br i1 %over, label %trim, label %done
trim:
  %r = call i64 @tecomp_pool_ws_release()
  br label %done
done:
  ret void
}

; The bytes the cache holds now.
define i64 @tecomp_pool_ws_cached() nounwind {
entry:
  %c = load atomic i64, ptr @ws_cached seq_cst, align 8
  ret i64 %c
}

; In a forked child: the workers are gone and the locks may be held by threads that
; do not exist there.  Forget the workers (their pthread_t array leaks) and re-init.
define void @tecomp_pool_after_fork() nounwind {
entry:
  %a = call i32 @pthread_mutex_init(ptr @tp_lock, ptr null)
  %b = call i32 @pthread_mutex_init(ptr @tp_sleep_lock, ptr null)
  %c = call i32 @pthread_cond_init(ptr @tp_sleep_cond, ptr null)
  %d = call i32 @pthread_mutex_init(ptr @tp_done_lock, ptr null)
  %e = call i32 @pthread_cond_init(ptr @tp_done_cond, ptr null)
  %f = call i32 @pthread_mutex_init(ptr @ws_lock, ptr null)
  store atomic i32 0, ptr @tp_waiting seq_cst, align 4
  store atomic i32 0, ptr @tp_nworkers seq_cst, align 4
  store atomic i64 0, ptr @tp_sleeping seq_cst, align 8
  store atomic i32 0, ptr @tp_shutdown seq_cst, align 4
  store ptr null, ptr @tp_threads, align 8
  ret void
}
"""

_ENTRY_POINTS = (PARALLEL_FOR, WS_ALLOC, WS_FREE, DELEGATE_TO, DELEGATE_MARKED) + \
    tuple(POOL_FUNCTIONS)

# How many threads a region wants (``tp_desired``).  The JIT's pool is always told by
# Python (tecomp.threads); a library's pool may be called from C without being
# told, so there 0 means "not set yet": the first region (or tecomp_pool_get_threads)
# takes TECOMP_NUM_THREADS if it is a positive integer, else the CPUs of its affinity mask
# (the online CPUs where that cannot be read), at most 1024, as Python's default does
# (which also honours a cgroup CPU quota: C code under one sets the count itself).
_WANTED_JIT = r"""
define internal i32 @tp_wanted() nounwind alwaysinline {
entry:
  %n = load atomic i32, ptr @tp_desired seq_cst, align 4
  ret i32 %n
}
"""

_WANTED_LIBRARY = r"""
@tp_env_name = private unnamed_addr constant [19 x i8] c"TECOMP_NUM_THREADS\00"
declare ptr @getenv(ptr)
declare i64 @strtol(ptr, ptr, i32)
declare i32 @get_nprocs()
declare i32 @sched_getaffinity(i32, i64, ptr)
declare <16 x i64> @llvm.ctpop.v16i64(<16 x i64>)
declare i64 @llvm.vector.reduce.add.v16i64(<16 x i64>)

define internal i32 @tp_wanted() nounwind {
entry:
  %n = load atomic i32, ptr @tp_desired seq_cst, align 4
  %unset = icmp eq i32 %n, 0
  br i1 %unset, label %init, label %done
init:
  %d = call i32 @tp_default_threads()
  %pair = cmpxchg ptr @tp_desired, i32 0, i32 %d seq_cst seq_cst
  %old = extractvalue { i32, i1 } %pair, 0
  %won = extractvalue { i32, i1 } %pair, 1
  %r = select i1 %won, i32 %d, i32 %old
  ret i32 %r
done:
  ret i32 %n
}

define internal i32 @tp_default_threads() nounwind {
entry:
  %end = alloca ptr, align 8
  %env = call ptr @getenv(ptr @tp_env_name)
  %noenv = icmp eq ptr %env, null
  br i1 %noenv, label %cpus, label %parse
parse:
  %v = call i64 @strtol(ptr %env, ptr %end, i32 10)
  %e = load ptr, ptr %end, align 8
  %empty = icmp eq ptr %e, %env
  br i1 %empty, label %cpus, label %chkend
chkend:
  %c = load i8, ptr %e, align 1
  %trailing = icmp ne i8 %c, 0
  %small = icmp slt i64 %v, 1
  %bad = or i1 %trailing, %small
  br i1 %bad, label %cpus, label %fromenv
fromenv:
  %big = icmp sgt i64 %v, 1024
  %v2 = select i1 %big, i64 1024, i64 %v
  %v32 = trunc i64 %v2 to i32
  ret i32 %v32
cpus:
  ; the CPUs of the affinity mask (taskset, cpusets; up to 1024), else the online ones
  %mask = alloca <16 x i64>, align 64
  store <16 x i64> zeroinitializer, ptr %mask, align 64
  %rc = call i32 @sched_getaffinity(i32 0, i64 128, ptr %mask)
  %maskok = icmp eq i32 %rc, 0
  br i1 %maskok, label %count, label %online
count:
  %bits = load <16 x i64>, ptr %mask, align 64
  %pop = call <16 x i64> @llvm.ctpop.v16i64(<16 x i64> %bits)
  %sum = call i64 @llvm.vector.reduce.add.v16i64(<16 x i64> %pop)
  %sum32 = trunc i64 %sum to i32
  %none = icmp slt i32 %sum32, 1
  br i1 %none, label %online, label %have
online:
  %nprocs = call i32 @get_nprocs()
  br label %have
have:
  %np = phi i32 [ %sum32, %count ], [ %nprocs, %online ]
  %lt1 = icmp slt i32 %np, 1
  %np1 = select i1 %lt1, i32 1, i32 %np
  %gt = icmp sgt i32 %np1, 1024
  %np2 = select i1 %gt, i32 1024, i32 %np1
  ret i32 %np2
}
"""


#: the spin-wait hint of each instruction set (:data:`tecomp.target.ISAS`): the
#: instruction, and what it needs declared
_PAUSES = {"x86-64": (_PAUSE_X86, "declare void @llvm.x86.sse2.pause()"),
           "aarch64": (_PAUSE_ARM, "declare void @llvm.aarch64.hint(i32)")}


def pool_ir(for_library: bool = False, target=None) -> str:
    """The pool's LLVM IR text for ``target`` (an llvm Target; None: the host) (only the
    spin-wait hint differs by instruction set).  ``for_library``: the copy an exported
    library carries, whose thread count defaults as Python's does when C code calls it
    without setting one."""
    isa = target.isa if target is not None else as_target("llvm").isa
    pause, decl = _PAUSES.get(isa, ("", ""))   # (another: spin without a hint)
    return (_POOL_IR.replace("{PAUSE_DECL}", decl).replace("{PAUSE}", pause)
            .replace("{WANTED}", _WANTED_LIBRARY if for_library else _WANTED_JIT)
            .replace("{DESIRED0}", "0" if for_library else "1")
            .replace("{MAX_THREADS}", str(MAX_THREADS))
            .replace("{WS_SLOTS}", str(WS_SLOTS)).replace("{WS_MIN}", str(WS_MIN))
            .replace("{WS_LIMIT}", str(DEFAULT_WORKSPACE_LIMIT)))


class _Pool:
    """The JIT-compiled pool: its engine, its control functions (registered with
    :mod:`tecomp.threads`) and ``parallel_for``."""

    def __init__(self):
        self.jit = llvm_jit.compile_ir(pool_ir(), _ENTRY_POINTS)
        a = self.jit.addresses
        self.controls = PoolControls(a.__getitem__, owner=self.jit)
        c = self.controls
        self.set_threads, self.get_threads, self.num_workers = \
            c.set_threads, c.get_threads, c.num_workers
        self.set_spin, self.set_wait_spin = c.set_spin, c.set_wait_spin
        self.shutdown, self.after_fork = c.shutdown, c.after_fork
        self.parallel_for = ctypes.CFUNCTYPE(
            ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(a[PARALLEL_FOR])
        for name in (PARALLEL_FOR, WS_ALLOC, WS_FREE):
            llvm_jit.add_symbol(name, a[name])


_POOL: Optional[_Pool] = None
_POOL_LOCK = threading.Lock()

# the settings every pool shares live in tecomp.threads (no llvmlite there)
_default_num_threads = default_num_threads
_spin_from_env = spin_from_env


def pool() -> _Pool:
    """The process-wide JIT pool, compiled (not started: workers start lazily) on first
    use, and registered with :mod:`tecomp.threads`."""
    global _POOL
    if _POOL is None:
        with _POOL_LOCK:
            if _POOL is None:
                p = _Pool()
                register(p.controls)
                _POOL = p
    return _POOL


def ensure_pool() -> None:
    """Compile the pool and register ``tecomp_parallel_for`` (before JIT-linking kernels)."""
    pool()


_BENCH_IR = r"""
declare i32 @tecomp_parallel_for(ptr, ptr, i64)

define internal i32 @tecomp_bench_task(ptr %c, i64 %b, i64 %e) nounwind noinline {
entry:
  %z = icmp eq ptr %c, null
  br i1 %z, label %done, label %touch
touch:
  %cnt = sub i64 %e, %b
  %old = atomicrmw add ptr %c, i64 %cnt monotonic
  br label %done
done:
  ret i32 0
}

; Run %reps empty parallel regions of %n iterations; return the iterations executed.
define i64 @tecomp_bench_regions(i64 %reps, i64 %n) nounwind {
entry:
  %counter = alloca i64, align 8
  store i64 0, ptr %counter, align 8
  %any = icmp sgt i64 %reps, 0
  br i1 %any, label %loop, label %done
loop:
  %i = phi i64 [ 0, %entry ], [ %i1, %loop ]
  %r = call i32 @tecomp_parallel_for(ptr @tecomp_bench_task, ptr %counter, i64 %n)
  %i1 = add i64 %i, 1
  %more = icmp slt i64 %i1, %reps
  br i1 %more, label %loop, label %done
done:
  %total = load i64, ptr %counter, align 8
  ret i64 %total
}
"""


def measure_dispatch_overhead(repeats: int = 20000, sleep_repeats: int = 200) -> dict:
    """Microseconds per parallel region with an empty body, measured inside JIT code.

    * ``hot_us``: regions back to back with the workers spinning: publishing the job,
      waking nobody, every thread claiming its chunk, and the join;
    * ``sleeping_us``: the workers asleep (spin count 0): the caller pays the condition
      broadcast and, since a thread takes what is left of the others' ranges, runs the
      (empty) chunks itself instead of waiting for the wake-ups.
    ``threads`` is :func:`get_num_threads`.  The counter the chunks add to checks that
    every iteration ran exactly once.
    """
    p = pool()
    jm = llvm_jit.compile_ir(_BENCH_IR, ["tecomp_bench_regions"])
    run = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64, ctypes.c_int64)(
        jm.addresses["tecomp_bench_regions"])
    n = get_num_threads()
    if run(10, n) != 10 * n:
        raise InternalError("the thread pool lost or repeated iterations")
    t0 = time.perf_counter()
    done = run(repeats, n)
    hot = (time.perf_counter() - t0) / repeats
    if done != repeats * n:
        raise InternalError("the thread pool lost or repeated iterations")
    spin = _spin_from_env()
    p.set_spin(0)
    try:
        run(5, n)
        t0 = time.perf_counter()
        run(sleep_repeats, n)
        cold = (time.perf_counter() - t0) / sleep_repeats
    finally:
        p.set_spin(DEFAULT_SPIN if spin is None else spin)
    return {"threads": n, "hot_us": hot * 1e6, "sleeping_us": cold * 1e6}
