"""LLVM's O3 pipeline, run in a separate worker process.

Why: llvmlite 0.50 exposes only LLVM's new pass manager, and every run of its default
pipeline leaves memory behind in the process that ran it (about 64 KiB per module, even
for a ten-line function, and whether or not the PassBuilder is reused; an empty pass
manager run leaves nothing, nor do parsing, MCJIT and freeing a module).  A process that
builds thousands of kernels would grow without bound.  So tecomp ships the unoptimised
IR text to a long-lived worker process, which parses, verifies and optimises it,
generates its machine code and sends back the bitcode and the object code; the parent
loads the object code into its JIT (and parses the bitcode only to print the optimised
IR).  The worker
retires itself once it has grown by ``TECOMP_LLVM_WORKER_MAX_MB`` (default 256 MiB) since
its first module, and the next build starts a fresh one, so the memory of both
processes stays bounded.  A
crash inside LLVM's optimiser or its code generator kills the worker, not the user's
process: the build raises an error that says so.  (The code generator aborted the
process on an ``<8 x double>`` masked load on an AVX2 machine, an assertion in its alias
analysis; the code generator now splits such loads, and a crash of the kind stays in
the worker.)

Cost: starting the worker takes about 0.2 s (Python, llvmlite, the target), paid once,
overlapped with the first build's lowering; each module then pays a pipe round trip (the
machine code is generated once, in the worker, instead of by the parent's JIT).

``TECOMP_LLVM_OPT_WORKER=0`` optimises in the calling process instead (the leak is then
back); so does a platform where the worker cannot be started.

This file is also the worker's program (and that of the one-shot child that compiles a
tensor intrinsic's call of an LLVM intrinsic alone: :func:`probe`): it is loaded by file
path, so it imports nothing from tecomp (only the standard library and llvmlite), and
:func:`run_pipeline` is the one definition of the pipeline, used by every side.

Protocol (binary, over the worker's stdin/stdout): a request is ``b"TCO1"``, a flags
byte (bit 0: ``explicit``) and a little-endian u32 length, then that many bytes of IR
text; a reply is a status byte (0: bitcode follows; 1: an error message follows), a
retiring byte (1: the worker exits after this reply) and a u32 length, then the payload
(status 0: a u32 length, that many bytes of bitcode, then the object code).
Once started, before any request, the worker sends one empty reply with status 2.
"""
from __future__ import annotations

import os
import struct
import time
import sys

_MAGIC = b"TCO1"
_REQ = struct.Struct("<4sBI")
_REP = struct.Struct("<BBI")
_LEN = struct.Struct("<I")
_READY = 2


def run_pipeline(mod, tm, explicit: bool, report=None) -> None:
    """Run the O3 module pipeline on the llvmlite ``ModuleRef`` ``mod`` in place.

    ``explicit``: the schedule already vectorized and unrolled the kernel (every
    ``vectorized`` loop was widened by tecomp): LLVM's loop vectorizer and loop unroller
    (and the SLP vectorizer, off for every kernel, see below) have nothing left to do but cost about two thirds of the optimisation
    and JIT time (they re-unroll the widened loops), so they are switched off; the rest
    of O3 (inlining, LICM's promotion of accumulators to registers, GVN, instcombine,
    instruction selection with FMA contraction) runs as usual.

    ``report``: a list that gets LLVM's pass timing report of this run (text), for
    ``benchmarks/llvm_time.py --passes``."""
    import llvmlite.binding as llvm

    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = not explicit
    # LLVM 20's SLP vectorizer is off for every kernel: on Emerald Rapids it turned the 8
    # unrolled loads of a column (stride 13 bytes, reversed) into one masked load of 92
    # bytes whose code reads zeros (fuzz seed 3060755: wrong results, no error; the same
    # IR optimised for Skylake-AVX512 is right).  Kernels the schedule vectorized had it
    # off already; the loop vectorizer still vectorizes the others.
    pto.slp_vectorization = False
    pto.loop_unrolling = not explicit
    pb = llvm.create_pass_builder(tm, pto)
    if report is not None:
        pb.start_pass_timing()
    mpm = pb.getModulePassManager()
    mpm.run(mod, pb)
    if report is not None:
        report.append(pb.finish_pass_timing())
    mpm.close()
    pb.close()


def target_machine(triple: str, cpu: str, features: str, opt: int = 3):
    """The worker's TargetMachine: ``opt`` is the code generator's optimisation level
    (3: LLVM's "aggressive"; 2, "default", generates other code for most kernels and no
    faster: benchmarks/DECISIONS.md, "LLVM worker (optproc): O3 and the code generator's
    level as they are")."""
    import llvmlite.binding as llvm

    return llvm.Target.from_triple(triple).create_target_machine(
        cpu=cpu, features=features, opt=opt, reloc="default", codemodel="jitdefault", jit=True)


def compile_module(text: str, triple: str, data_layout: str, tm, explicit: bool,
                   times=None, report=None):
    """The worker's work on one module: parse the IR ``text``, verify it, run
    :func:`run_pipeline`, write the bitcode and generate the machine code with the
    TargetMachine ``tm`` (the machine code too: an LLVM backend that aborts, an
    assertion, kills the worker, not the caller).  Returns ``(bitcode, object code)``.
    ``times``: a dict that gets each step's thread CPU seconds added (``parse``,
    ``verify``, ``optimize``, ``bitcode``, ``codegen``: ``benchmarks/llvm_time.py``);
    ``report``: see :func:`run_pipeline`."""
    import llvmlite.binding as llvm

    clock = time.thread_time
    t0 = clock()
    mod = llvm.parse_assembly(text)
    mod.triple = triple
    mod.data_layout = data_layout
    t1 = clock()
    mod.verify()
    t2 = clock()
    run_pipeline(mod, tm, explicit, report)
    t3 = clock()
    bitcode = mod.as_bitcode()
    t4 = clock()
    obj = tm.emit_object(mod)
    t5 = clock()
    mod.close()
    if times is not None:
        for k, a, b in (("parse", t0, t1), ("verify", t1, t2), ("optimize", t2, t3),
                        ("bitcode", t3, t4), ("codegen", t4, t5)):
            times[k] = times.get(k, 0.0) + b - a
    return bitcode, obj


def rss_bytes(pid=None) -> int:
    """Resident set size of ``pid`` (default: this process); 0 where unknown."""
    try:
        with open(f"/proc/{pid or 'self'}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        if pid is not None:
            return 0
        import resource  # not Linux: the peak is the best there is

        r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return r if sys.platform == "darwin" else r * 1024


def _read_exact(f, n: int) -> bytes:
    chunks = []
    while n:
        c = f.read(n)
        if not c:
            break
        chunks.append(c)
        n -= len(c)
    return b"".join(chunks)


def _reply(out, *parts: bytes) -> None:
    """Write a reply; a parent that closed the pipe (it exited, or its first build failed
    before it sent a module and the worker's start-up message found nobody reading) ends
    the worker quietly, with no traceback on the terminal the two share."""
    try:
        for p in parts:
            out.write(p)
        out.flush()
    except (BrokenPipeError, ValueError):
        os._exit(0)


def _die_with_parent() -> None:
    """Exit when the process that started this worker dies.  Without it, a worker whose
    parent was killed in the middle of a build (a fuzzing worker over its time limit, a
    measuring child) went on optimising a module that LLVM takes minutes or forever over,
    with nobody to read the result: the fuzzing campaign found two such orphans
    spinning.  A watchdog thread (llvmlite's calls into LLVM release the GIL) checks the
    parent once a second; Linux's parent-death signal would fire when the parent's
    *thread* that started the worker ends, which a builder thread may do any time."""
    import threading

    parent = os.getppid()

    def watch():
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                os._exit(0)

    threading.Thread(target=watch, name="tecomp-parent-watch", daemon=True).start()


def serve(triple: str, cpu: str, features: str, max_mb: float) -> None:
    """The worker's main loop: optimise modules until stdin closes or it retires."""
    import signal

    # Ctrl-C in a terminal reaches the whole process group: the parent handles it
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent()
    # the replies get fd 1 to themselves: anything else printing goes to stderr
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    inp = sys.stdin.buffer

    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    llvm.initialize_native_asmparser()
    if triple.split("-", 1)[0] != llvm.get_process_triple().split("-", 1)[0]:
        llvm.initialize_all_targets()   # another machine's code (cross-compiled)
        llvm.initialize_all_asmprinters()
    tm = target_machine(triple, cpu, features)
    data_layout = str(tm.target_data)
    # started: the parent can tell a crash from a failed start
    _reply(out, _REP.pack(_READY, 0, 0))
    base = None  # the size after the first module: code pages and caches are in by then
    while True:
        head = _read_exact(inp, _REQ.size)
        if len(head) < _REQ.size:
            return  # the parent closed the pipe (or exited)
        magic, flags, n = _REQ.unpack(head)
        if magic != _MAGIC:
            return
        text = _read_exact(inp, n).decode("utf-8")
        try:
            bitcode, obj = compile_module(text, triple, data_layout, tm, bool(flags & 1))
            status, payload = 0, _LEN.pack(len(bitcode)) + bitcode + obj
        except Exception as e:  # reported to the parent, which raises it
            status, payload = 1, str(e).encode("utf-8", "replace")
        if base is None:
            base = rss_bytes()
        retiring = (rss_bytes() - base) > max_mb * 2**20
        _reply(out, _REP.pack(status, int(retiring), len(payload)), payload)
        if retiring:
            return


def probe(triple: str, cpu: str, features: str) -> None:
    """A one-shot child that checks one call of a tensor intrinsic (``jit.probe_call``):
    stdin is JSON ``{"name", "decl", "module"}``: the IR of the callee's declaration alone,
    and of a function that calls it.  It writes one JSON line per step, so that LLVM
    aborting in the second still reports the first: ``{"decl", "known"}`` (the
    declaration as LLVM reads it: its own types for an intrinsic whose signature changed,
    ``known`` false for a name LLVM has no intrinsic of), then ``{"ok", "error"}`` (the
    function parsed, verified, optimised and compiled to machine code, as a kernel is)."""
    import json

    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    llvm.initialize_native_asmparser()
    req = json.loads(sys.stdin.read())
    first = {"decl": None, "known": None}
    try:
        text = str(llvm.parse_assembly(req["decl"]).get_function(req["name"]))
        first["known"] = "; Unknown intrinsic" not in text
        first["decl"] = next((ln for ln in text.splitlines() if ln.startswith("declare ")), None)
    except Exception as e:  # noqa: BLE001 - reported
        first["decl_error"] = str(e)
    print(json.dumps(first), flush=True)
    tm = target_machine(triple, cpu, features)
    try:
        compile_module(req["module"], triple, str(tm.target_data), tm, False)
        second = {"ok": True}
    except Exception as e:  # noqa: BLE001 - reported
        second = {"ok": False, "error": str(e)}
    print(json.dumps(second), flush=True)


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]))
