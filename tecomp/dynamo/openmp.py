"""tecomp's parallel loops on PyTorch's OpenMP threads (the backend's ``threads="torch"``).

PyTorch's CPU operators run on an OpenMP team whose idle threads spin before they sleep;
tecomp's kernels run on tecomp's pool, whose idle workers do the same.  In a training
step, where PyTorch's operators (the loss, autograd, the optimizer) and tecomp's kernels
alternate, the two pools' spinning threads compete for the same cores: on 2 cores a
region of either pool waits for a thread the other pool's spinning keeps from its core.
Run on PyTorch's own team (``GOMP_parallel`` of the libgomp PyTorch loaded, every
thread taking a contiguous share of the iterations), tecomp's kernels and PyTorch's
operators use one set of threads.

The glue is a small function in LLVM IR (:data:`_IR`), JIT-compiled once, that has the
signature of ``tecomp_parallel_for``; :func:`tecomp.threads.run_parallel_loops_on`
points every tecomp pool of the process at it.  Only where PyTorch's parallel backend
is OpenMP through libgomp (its ``GOMP_parallel``, ``omp_get_thread_num`` and
``omp_get_num_threads`` found in the library the process loaded); elsewhere
:func:`use` leaves tecomp's pool in place.
"""
from __future__ import annotations

import ctypes
import logging
import threading
from typing import Optional

from .. import threads
from ..codegen.llvm import jit as llvm_jit

log = logging.getLogger("tecomp.dynamo")
_WARNED: list = []

_IR = r"""
%ctx = type { ptr, ptr, i64, i32 }
@omp_parallel = internal global ptr null, align 8
@omp_thread = internal global ptr null, align 8
@omp_threads = internal global ptr null, align 8

define void @tecomp_omp_init(ptr %p, ptr %t, ptr %n) nounwind {
entry:
  store ptr %p, ptr @omp_parallel, align 8
  store ptr %t, ptr @omp_thread, align 8
  store ptr %n, ptr @omp_threads, align 8
  ret void
}

; one thread t of the team of n: a contiguous share of the iterations
define internal void @tecomp_omp_body(ptr %c) nounwind {
entry:
  %tf = load ptr, ptr @omp_thread, align 8
  %nf = load ptr, ptr @omp_threads, align 8
  %t32 = call i32 %tf()
  %n32 = call i32 %nf()
  %t = zext i32 %t32 to i64
  %n = zext i32 %n32 to i64
  %fnp = getelementptr %ctx, ptr %c, i32 0, i32 0
  %fn = load ptr, ptr %fnp, align 8
  %clp = getelementptr %ctx, ptr %c, i32 0, i32 1
  %cl = load ptr, ptr %clp, align 8
  %ep = getelementptr %ctx, ptr %c, i32 0, i32 2
  %e = load i64, ptr %ep, align 8
  ; extent = n * q + r: threads below r take q + 1 iterations, the others q
  %q = udiv i64 %e, %n
  %r = urem i64 %e, %n
  %tq = mul i64 %t, %q
  %below = icmp ult i64 %t, %r
  %extra = select i1 %below, i64 %t, i64 %r
  %lo = add i64 %tq, %extra
  %one = zext i1 %below to i64
  %len0 = add i64 %q, %one
  %hi = add i64 %lo, %len0
  %some = icmp ult i64 %lo, %hi
  br i1 %some, label %run, label %done
run:
  %rc = call i32 %fn(ptr %cl, i64 %lo, i64 %hi)
  %bad = icmp ne i32 %rc, 0
  br i1 %bad, label %err, label %done
err:
  %rp = getelementptr %ctx, ptr %c, i32 0, i32 3
  %x = cmpxchg ptr %rp, i32 0, i32 %rc seq_cst seq_cst
  br label %done
done:
  ret void
}

define i32 @tecomp_omp_parallel_for(ptr %fn, ptr %cl, i64 %extent) nounwind {
entry:
  %many = icmp sgt i64 %extent, 1
  br i1 %many, label %par, label %serial
serial:
  %any = icmp sgt i64 %extent, 0
  br i1 %any, label %one, label %zero
one:
  %rs = call i32 %fn(ptr %cl, i64 0, i64 %extent)
  ret i32 %rs
zero:
  ret i32 0
par:
  %c = alloca %ctx, align 8
  %fnp = getelementptr %ctx, ptr %c, i32 0, i32 0
  store ptr %fn, ptr %fnp, align 8
  %clp = getelementptr %ctx, ptr %c, i32 0, i32 1
  store ptr %cl, ptr %clp, align 8
  %ep = getelementptr %ctx, ptr %c, i32 0, i32 2
  store i64 %extent, ptr %ep, align 8
  %rp = getelementptr %ctx, ptr %c, i32 0, i32 3
  store i32 0, ptr %rp, align 4
  %pf = load ptr, ptr @omp_parallel, align 8
  call void %pf(ptr @tecomp_omp_body, ptr %c, i32 0, i32 0)
  %r = load atomic i32, ptr %rp seq_cst, align 4
  ret i32 %r
}
"""

_LOCK = threading.Lock()
_GLUE = None  # (the JIT module, kept alive; the address of tecomp_omp_parallel_for)


def _libgomp() -> Optional[ctypes.CDLL]:
    """The libgomp this process loaded (PyTorch's), or None."""
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "libgomp" in line and "/" in line}
    except OSError:
        return None
    for p in sorted(paths):
        try:
            lib = ctypes.CDLL(p)
            for name in ("GOMP_parallel", "omp_get_thread_num", "omp_get_num_threads"):
                getattr(lib, name)
            return lib
        except (OSError, AttributeError):
            continue
    return None


def parallel_for_address() -> Optional[int]:
    """The address of the glue's ``tecomp_omp_parallel_for`` (compiled on first use), or
    None where PyTorch does not run on libgomp's OpenMP."""
    global _GLUE
    with _LOCK:
        if _GLUE is not None:
            return _GLUE[1]
        import torch

        if "parallel backend: OpenMP" not in torch.__config__.parallel_info():
            return None
        lib = _libgomp()
        if lib is None:
            return None
        mod = llvm_jit.compile_ir(_IR, ("tecomp_omp_init", "tecomp_omp_parallel_for"))
        addr = {n: mod.addresses[n] for n in ("tecomp_omp_init", "tecomp_omp_parallel_for")}
        fns = [ctypes.cast(getattr(lib, n), ctypes.c_void_p).value
               for n in ("GOMP_parallel", "omp_get_thread_num", "omp_get_num_threads")]
        ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)(
            addr["tecomp_omp_init"])(*fns)
        _GLUE = (mod, addr["tecomp_omp_parallel_for"], lib)
        return _GLUE[1]


_ACTIVE = "tecomp"


def use(mode: str) -> str:
    """Run tecomp's parallel loops on ``mode``'s threads from now on: ``"torch"``
    (PyTorch's OpenMP team) or ``"tecomp"`` (tecomp's pool); returns the mode in force
    (``"tecomp"`` where PyTorch does not use libgomp, said once in the log).  Cheap when
    the mode does not change (each compiled graph's call sets its own)."""
    global _ACTIVE
    if mode == _ACTIVE:
        return mode
    addr = parallel_for_address() if mode == "torch" else None
    if mode == "torch" and addr is None:
        if not _WARNED:
            _WARNED.append(mode)
            log.info("tecomp.dynamo: threads='torch' needs PyTorch's OpenMP through libgomp "
                     "(%s); the kernels run on tecomp's threads",
                     "not this PyTorch's parallel backend" if _libgomp() is None else
                     "its functions not found")
        return _ACTIVE
    threads.run_parallel_loops_on(addr)
    _ACTIVE = mode
    return mode
