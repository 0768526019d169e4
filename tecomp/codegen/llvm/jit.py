"""The LLVM host: the native target, one optimising TargetMachine, and the one compile
step every CPU module goes through (parse -> verify -> O3 -> MCJIT -> addresses).

* **One lock.**  llvmlite's calls go through ctypes, which releases the GIL, and LLVM's
  global context is not thread-safe: every call into LLVM (parsing, optimising, JIT,
  emitting assembly) holds :data:`tecomp.target.host.LLVM_LOCK`.
* **Target machines.**  One TargetMachine for the host CPU (``llvm.get_host_cpu_name()``
  and ``llvm.get_host_cpu_features()``, opt level 3) is created once and reused for the
  optimisation pipeline (it supplies the cost model: vector width, FMA, ...) and for
  ``emit_assembly``.  MCJIT takes *ownership* of the TargetMachine it is created with
  (llvmlite marks it owned and the engine frees it), so each execution engine gets a
  fresh one; creating it costs about a millisecond.
* **Optimisation.**  llvmlite 0.50 only has LLVM's new pass manager: the default
  ``O3`` module pipeline from ``llvm.create_pass_builder(tm, PipelineTuningOptions)``
  with loop and SLP vectorisation and unrolling on.  Each run of it leaks memory in
  the process that runs it, so it runs in a worker process that sends back bitcode
  (:mod:`tecomp.codegen.llvm.optproc`); parsing, MCJIT and everything else stay here.
* **Symbols.**  libm and libpthread functions (``erff``, ``tanhf``, ``pthread_create``,
  ...) resolve from the running process (loaded with ``load_library_permanently``);
  runtime functions written in LLVM IR (the thread pool, the float16 conversion helpers
  of :mod:`tecomp.codegen.llvm.libcalls`) are registered by name with
  ``llvm.add_symbol`` so that kernels refer to them by name and their IR text stays the
  same in every process.  Every symbol the machine code leaves undefined is looked up
  before the code is linked (:func:`undefined_symbols`): MCJIT would bind one it cannot
  find to address 0, and the first call would jump there (SIGSEGV), so
  :class:`UnresolvedSymbolError` is raised instead.
* **Features of a CPU** are the target's question to LLVM
  (:func:`tecomp.target.host.llvm_cpu_features`), asked under the same lock.
"""
from __future__ import annotations

import atexit
import ctypes
import ctypes.util
import os
import re
import signal
import struct
import subprocess
import sys
import time
import warnings
from typing import Dict, FrozenSet, Iterable, List, Optional, Tuple

import llvmlite.binding as llvm

from ...errors import BuildError, InternalError
from ...target import host as _host
from ...threads import flag_from_env, number_from_env
from . import libcalls, optproc as _optproc
from .optproc import _LEN



class Host:
    """The native target and the shared optimising TargetMachine."""

    def __init__(self):
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        llvm.initialize_native_asmparser()
        for lib in (ctypes.util.find_library("m"), ctypes.util.find_library("pthread")):
            if lib:
                try:
                    llvm.load_library_permanently(lib)
                except RuntimeError:  # pragma: no cover - the symbols are in-process anyway
                    pass
        self.triple = llvm.get_process_triple()
        self.target = llvm.Target.from_triple(self.triple)
        # the host as tecomp.target reads it (one reading for the Target and the JIT)
        self.cpu = _host.host_cpu()
        self.features = _host.host_feature_string()
        #: every CPU feature LLVM can detect on a host (the names ``-mattr`` takes)
        self.feature_names = _host.feature_names() or frozenset()
        self.tm = self.new_target_machine()
        self.data_layout = str(self.tm.target_data)
        self.is_x86 = self.triple.startswith(("x86_64", "i686", "i386"))
        self.is_aarch64 = self.triple.startswith(("aarch64", "arm64"))

    def new_target_machine(self):
        # the worker's: the in-process pipeline's code is the worker's
        return _optproc.target_machine(self.triple, self.cpu, self.features)

    def has_feature(self, name: str) -> bool:
        return ("+" + name) in self.features.split(",")


_HOST: Optional[Host] = None

#: (triple, data layout) of each foreign instruction set's code, by triple
_FOREIGN: Dict[str, Tuple[object, str]] = {}


def _foreign(triple: str):
    """``(llvm.Target, data layout)`` of ``triple``, another machine's (every LLVM target
    initialised on first use).  Call with :data:`tecomp.target.host.LLVM_LOCK` held."""
    got = _FOREIGN.get(triple)
    if got is None:
        llvm.initialize_all_targets()
        llvm.initialize_all_asmprinters()
        t = llvm.Target.from_triple(triple)
        layout = str(t.create_target_machine(opt=0).target_data)
        got = _FOREIGN[triple] = (t, layout)
    return got


def is_foreign(target) -> bool:
    """Code for ``target`` (a Target or None: the host) is another instruction set's than
    this process's: compiled and exported, never JIT-linked here."""
    return target is not None and not target.is_native_isa


def triple_and_layout(target) -> Tuple[str, str]:
    """The triple and data layout of LLVM modules for ``target`` (None: the host)."""
    h = host()
    if not is_foreign(target):
        return h.triple, h.data_layout
    with _host.LLVM_LOCK:
        return target.triple, _foreign(target.triple)[1]


def target_machine(target, *, pic: bool = False):
    """A TargetMachine for ``target``'s CPU and features (None or a host target: this CPU
    with every feature it has), opt level 3; ``pic``: position-independent code for a
    shared library.  Call with :data:`tecomp.target.host.LLVM_LOCK` held."""
    h = host()
    if target is None or target.is_host:
        cpu, features = h.cpu, h.features
    else:
        cpu, features = target.cpu, target.llvm_features
    t = _foreign(target.triple)[0] if is_foreign(target) else h.target
    return t.create_target_machine(cpu=cpu, features=features, opt=3,
                                   reloc="pic" if pic else "default", codemodel="default")


def host() -> Host:
    """The process-wide :class:`Host` (created on first use)."""
    global _HOST
    if _HOST is None:
        with _host.LLVM_LOCK:
            if _HOST is None:
                _HOST = Host()
    return _HOST


def optimize(mod, explicit: bool = False, target=None) -> None:
    """Run the O3 module pipeline on the llvmlite ``ModuleRef`` in this process (see
    :func:`tecomp.codegen.llvm.optproc.run_pipeline` for ``explicit``), for ``target``
    (None: the host).  Every run leaves memory behind in llvmlite 0.50; :func:`compile_ir`
    therefore optimises in the worker process and only falls back to this."""
    with _host.LLVM_LOCK:
        tm = target_machine(target) if is_foreign(target) else host().tm
        _optproc.run_pipeline(mod, tm, explicit)


# -- the optimiser worker process (see tecomp/codegen/llvm/optproc.py) ---------------------

_BOOT = ("import sys\n"
         "sys.path[:] = [p for p in sys.path if p not in ('', '.')]\n"
         "import importlib.util as u\n"
         "s = u.spec_from_file_location('_tecomp_llvm_optproc', sys.argv[1])\n"
         "m = u.module_from_spec(s)\n"
         "s.loader.exec_module(m)\n"
         "m.serve(sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5]))\n")


def _write_all(f, data: bytes) -> None:
    """Write all of ``data`` to the unbuffered pipe ``f`` (a raw write may be partial)."""
    view = memoryview(data)
    while view:
        n = f.write(view)
        if not n:
            raise BrokenPipeError("the LLVM worker's pipe accepted no data")
        view = view[n:]


class OptWorker:
    """One optimiser worker process and its pipes.  Not thread-safe by itself: every
    use holds :data:`tecomp.target.host.LLVM_LOCK`."""

    def __init__(self, triple: str, cpu: str, features: str, max_mb: float):
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _BOOT, _optproc.__file__, triple, cpu, features,
             repr(float(max_mb))],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, close_fds=True,
            # unbuffered: a reply already read into a buffer (with the start-up message)
            # would be invisible to the select() of the time limit, which then waited
            # out the whole limit
            bufsize=0)
        self.ready = False  # its start-up message has been read
        # a request written whose whole reply has not been read: set until optimize()
        # returns; still set after an exception (a KeyboardInterrupt, any signal
        # handler's) left a reply, or part of one, in the pipe, which the next request
        # would read as its own (the previous kernel's code linked for a new one)
        self.pending = False

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        """Whether the worker runs and can take a request: not while a request's reply
        is unread (an interrupted :meth:`optimize`): its pipe is out of step."""
        return not self.pending and self.proc.poll() is None

    def optimize(self, text: str, explicit: bool, timeout: Optional[float] = None):
        """``(status, retiring, payload)`` for one module; ``"nostart"`` when the worker
        died before it could start, None when it died before replying, ``"timeout"``
        when it did not reply within ``timeout`` seconds (it is then still working)."""
        if self.pending:  # pragma: no cover - _get_worker replaces such a worker
            raise InternalError("a request to an LLVM worker whose pipe is out of step "
                                "(its previous reply is unread)")
        data = text.encode("utf-8")
        self.pending = True
        r = self._request(data, explicit, timeout)
        if r != "timeout":   # a timeout leaves the reply coming: the caller kills it
            self.pending = False
        return r

    def _request(self, data: bytes, explicit: bool, timeout: Optional[float]):
        try:
            _write_all(self.proc.stdin, _optproc._REQ.pack(_optproc._MAGIC, int(explicit),
                                                           len(data)) + data)
        except (BrokenPipeError, OSError, ValueError):
            pass  # read the start-up message below to tell why
        try:
            if not self.ready:
                head = _optproc._read_exact(self.proc.stdout, _optproc._REP.size)
                if len(head) < _optproc._REP.size or head[0] != _optproc._READY:
                    return "nostart"
                self.ready = True
            if timeout is not None:
                import select

                ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
                if not ready:
                    return "timeout"
            head = _optproc._read_exact(self.proc.stdout, _optproc._REP.size)
            if len(head) < _optproc._REP.size:
                return None
            status, retiring, n = _optproc._REP.unpack(head)
            payload = _optproc._read_exact(self.proc.stdout, n)
            if len(payload) < n:
                return None
        except (BrokenPipeError, OSError, ValueError):
            return None
        return status, bool(retiring), payload

    def exit_status(self) -> str:
        try:
            rc = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        if rc < 0:
            try:
                return f"killed by signal {signal.Signals(-rc).name}"
            except ValueError:
                return f"killed by signal {-rc}"
        return f"exit status {rc}"

    def close(self) -> None:
        """Ask the worker to exit (end of input) and reap it; kill it first where a
        request is still pending (it would finish that module first)."""
        if self.pending and self.proc.poll() is None:
            self.proc.kill()
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover - a wedged worker
            self.proc.kill()
            self.proc.wait()


#: the running workers, by the triple they compile for ("" for this machine's)
_WORKERS: Dict[str, OptWorker] = {}
#: False once the worker could not be started: optimise in-process from then on
_WORKER_OK = True
#: how many workers this process has started (for tests and the resources report)
worker_starts = 0


def worker_enabled() -> bool:
    """Whether modules are optimised in the worker process (``TECOMP_LLVM_OPT_WORKER``)."""
    return _WORKER_OK and flag_from_env("TECOMP_LLVM_OPT_WORKER", True,
                                      "whether LLVM's optimiser runs in a worker process")


def worker_pid() -> Optional[int]:
    """The pid of the running optimiser worker, if there is one."""
    w = _WORKERS.get("")
    return w.pid if w is not None and w.alive() else None


def _get_worker(triple: str = "") -> Optional[OptWorker]:
    """The running worker for code of ``triple`` ("": this machine's), started if needed;
    None where none can run (the caller then optimises in-process).  Call with
    :data:`tecomp.target.host.LLVM_LOCK` held."""
    global _WORKER_OK, worker_starts
    if not worker_enabled():
        return None
    w = _WORKERS.get(triple)
    if w is not None and w.alive():
        return w
    if w is not None:
        w.close()
        del _WORKERS[triple]
    max_mb = number_from_env("TECOMP_LLVM_WORKER_MAX_MB", 256.0, low=1.0, high=1e9,
                             integer=False, error=BuildError,
                             use="the MiB the LLVM optimiser worker may grow by")
    h = host()
    try:
        if triple:   # another machine's code: its functions name their CPU and features
            w = OptWorker(triple, "generic", "", max_mb)
        else:
            w = OptWorker(h.triple, h.cpu, h.features, max_mb)
    except OSError as exc:  # no subprocesses here: optimise in-process
        _WORKER_OK = False
        warnings.warn(f"tecomp: cannot start the LLVM optimiser worker ({exc}); optimising "
                      f"in-process, where llvmlite leaks memory on every build", RuntimeWarning)
        return None
    worker_starts += 1
    _WORKERS[triple] = w
    return w


def start_worker() -> None:
    """Start the optimiser worker now (in the background), so that its start-up overlaps
    with the lowering of the first kernel."""
    with _host.LLVM_LOCK:
        _get_worker()


def _stop_worker() -> None:
    ws = list(_WORKERS.values())
    _WORKERS.clear()
    for w in ws:
        w.close()


atexit.register(_stop_worker)


def _forget_worker_in_child() -> None:
    # the child of a fork() must not talk over its parent's pipes; it starts its own
    ws = list(_WORKERS.values())
    _WORKERS.clear()
    for w in ws:
        _ORPHANS.append(w)  # keep the Popen alive: its __del__ must not reap the parent's child
        for f in (w.proc.stdin, w.proc.stdout):
            try:
                f.close()
            except OSError:
                pass


_ORPHANS: list = []
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_worker_in_child)


def _opt_timeout(ir_bytes: int = 0) -> float:
    """The time limit of the worker's work on a module of ``ir_bytes`` of IR text:
    ``TECOMP_LLVM_OPT_TIMEOUT`` (default 60 s), once more per MiB of IR (LLVM's
    instruction selection and loop access analysis grow faster than linearly with the
    size of a basic block: the 4 MB kernel of a sum of 20,000 terms written as one
    expression takes it about a minute)."""
    base = number_from_env("TECOMP_LLVM_OPT_TIMEOUT", 60.0, low=0.001, high=1e9,
                           integer=False, error=BuildError,
                           use="the seconds LLVM's optimiser may take on a module")
    return base * (1.0 + ir_bytes / 2**20)


def _optimize_in_worker(ir_text: str, explicit: bool, triple: str = "") -> Optional[bytes]:
    """The bitcode of the module, optimised by the worker; None when no worker can run.
    Call with :data:`tecomp.target.host.LLVM_LOCK` held.

    A module the full O3 pipeline does not finish within ``TECOMP_LLVM_OPT_TIMEOUT``
    seconds (default 60; builds take well under a second) is optimised again without
    LLVM's loop vectorizer, SLP vectorizer and loop unroller (the pipeline of a kernel
    the schedule vectorized itself), with a warning: LLVM 20's loop vectorizer and
    unroller together did not finish, in minutes, on a 3 KB kernel of scalar float64
    reductions under selects (fuzz seed 3024733); each alone takes 0.1-0.4 s."""
    global _WORKER_OK
    limit = _opt_timeout(len(ir_text))
    for attempt in (1, 2):
        w = _get_worker(triple)
        if w is None:
            return None
        r = w.optimize(ir_text, explicit, limit)
        if r == "timeout":
            w.proc.kill()
            w.close()
            _WORKERS.pop(triple, None)
            if explicit:
                raise RuntimeError(
                    f"LLVM's optimiser did not finish within {limit:.0f} s, even "
                    f"without its loop vectorizer and unroller. This is a bug in tecomp or "
                    f"LLVM: please report it with the kernel (TECOMP_DUMP_IR=1 prints its "
                    f"IR); TECOMP_LLVM_OPT_TIMEOUT sets the limit.")
            warnings.warn(f"tecomp: LLVM's O3 pipeline did not finish within "
                          f"{limit:.0f} s on this kernel; compiling it without LLVM's "
                          f"loop vectorizer and unroller (vectorize and unroll it in the "
                          f"schedule instead)", RuntimeWarning, stacklevel=4)
            return _optimize_in_worker(ir_text, True, triple)
        if r is not None and r != "nostart":
            break
        why = w.exit_status()
        w.close()  # reaped already: this only closes the pipes
        _WORKERS.pop(triple, None)
        if r == "nostart":
            _WORKER_OK = False
            warnings.warn(f"tecomp: the LLVM optimiser worker does not start here ({why}); "
                          f"optimising in-process, where llvmlite leaks memory on every build",
                          RuntimeWarning)
            return None
        # died before replying: it may have died before this module reached it (killed
        # while idle, e.g. by the OOM killer), so a new worker tries once more
        if attempt == 2:
            raise RuntimeError(
                f"LLVM's optimiser crashed on this module, twice (its worker process: "
                f"{why}). This is a bug in tecomp or LLVM: please report it with the kernel "
                f"(TECOMP_DUMP_IR=1 prints its IR). The calling process is unharmed; the "
                f"next build starts a new worker.")
    status, retiring, payload = r
    if retiring:
        w.close()
        _WORKERS.pop(triple, None)
    if status != 0:
        raise RuntimeError(payload.decode("utf-8", "replace"))
    return payload


_PROBE_BOOT = _BOOT.replace("m.serve(sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5]))",
                           "m.probe(sys.argv[2], sys.argv[3], sys.argv[4])")


def probe_call(name: str, decl_ir: str, call_ir: str) -> Optional[dict]:
    """Check one call of a function in a child process (LLVM aborts the process on some
    calls of an intrinsic with the wrong types: its auto-upgrade of an old signature
    builds a call with the new one and asserts; and on an intrinsic the target has no
    instruction for).  ``decl_ir``: the module of the declaration alone; ``call_ir``: a
    function calling it.  Returns what :func:`tecomp.codegen.llvm.optproc.probe` reports
    (``decl``, ``known``, ``ok``, ``error``), with ``crash`` (how the child died) and
    ``stderr`` (what LLVM printed) when it died, ``timeout`` when it did not finish; None
    where no child process can be started."""
    import json

    h = host()
    try:
        r = subprocess.run(
            [sys.executable, "-c", _PROBE_BOOT, _optproc.__file__, h.triple, h.cpu, h.features],
            input=json.dumps({"name": name, "decl": decl_ir, "module": call_ir}),
            capture_output=True, text=True, timeout=_opt_timeout(len(call_ir)))
    except subprocess.TimeoutExpired:
        return {"timeout": True}
    except OSError:
        return None
    res: dict = {}
    for line in r.stdout.splitlines():
        if line.startswith("{"):
            try:
                res.update(json.loads(line))
            except ValueError:
                pass
    if "ok" not in res:
        rc = r.returncode
        if rc < 0:
            try:
                res["crash"] = f"killed by signal {signal.Signals(-rc).name}"
            except ValueError:
                res["crash"] = f"killed by signal {-rc}"
        else:
            res["crash"] = f"exit status {rc}"
        res["stderr"] = r.stderr[-4000:]
    return res


class JitModule:
    """One compiled LLVM module: its engine, its IR before and after optimisation, the
    addresses of the requested functions, and how long each step took."""

    def __init__(self, engine, unopt_ir: str, opt_ir, addresses: Dict[str, int],
                 timings: Dict[str, float], target=None):
        #: the MCJIT engine; None for another machine's code (never linked here)
        self.engine = engine
        self.target = target
        self.unopt_ir = unopt_ir
        # the optimised module (kept alive by the engine); printed on first request
        self._opt = opt_ir
        self.addresses = addresses
        self.timings = timings
        self._asm: Optional[str] = None

    @property
    def opt_ir(self) -> str:
        """The optimised LLVM IR (printed on first request)."""
        if not isinstance(self._opt, str):
            with _host.LLVM_LOCK:
                if isinstance(self._opt, bytes):
                    self._opt = _parse_bitcode(self._opt)
                if not isinstance(self._opt, str):
                    self._opt = str(self._opt)
        return self._opt

    @property
    def asm(self) -> str:
        """Assembly of the optimised module, for the machine it is compiled for
        (generated on first request)."""
        if self._asm is None:
            with _host.LLVM_LOCK:
                if self._asm is None:
                    mod = llvm.parse_assembly(self.opt_ir)
                    tm = (target_machine(self.target) if is_foreign(self.target)
                          else host().tm)
                    self._asm = tm.emit_assembly(mod)
        return self._asm


def _parse_bitcode(bitcode: bytes):
    mod = llvm.parse_bitcode(bitcode)
    mod.name = "<string>"  # as parse_assembly names it: the same printed IR
    return mod


def _optimized_module(ir_text: str, opt: bool, explicit: bool, timings: Dict[str, float],
                      check=None, target=None):
    """Parse and verify ``ir_text`` and (``opt``) run the O3 pipeline on it, in the
    worker when there is one; return the llvmlite ``ModuleRef``, or ``(bitcode, object
    code)`` from the worker.  ``check()`` runs first when the module is parsed in this
    process (where an LLVM abort would end it).  ``target``: what the code is for (None:
    the host; another instruction set's code is optimised by a worker of its own).  Call
    with :data:`tecomp.target.host.LLVM_LOCK` held."""
    foreign = is_foreign(target)
    triple, layout = (target.triple, _foreign(target.triple)[1]) if foreign else \
        (host().triple, host().data_layout)
    t0 = time.perf_counter()
    reply = _optimize_in_worker(ir_text, explicit, triple if foreign else "") if opt else None
    t1 = time.perf_counter()
    if reply is not None:  # parsed, verified, optimised and compiled by the worker
        n, = _LEN.unpack_from(reply)
        timings["optimize"] = t1 - t0
        timings["parse"] = 0.0
        return reply[_LEN.size:_LEN.size + n], reply[_LEN.size + n:]
    else:
        if check is not None:
            check()
        mod = llvm.parse_assembly(ir_text)
        mod.triple = triple
        mod.data_layout = layout
        mod.verify()
        t1 = time.perf_counter()
        if opt:
            optimize(mod, explicit, target)
        t2 = time.perf_counter()
        timings["parse"] = t1 - t0
        timings["optimize"] = t2 - t1
    return mod


class UnresolvedSymbolError(RuntimeError):
    """The machine code calls functions that no library of this process defines."""

    def __init__(self, symbols: List[str]):
        self.symbols = list(symbols)
        super().__init__(f"the machine code calls {', '.join(self.symbols)}, which nothing "
                         f"in this process defines")


#: symbols the JIT's linker (RuntimeDyld) makes itself
_LINKER_SYMBOLS = frozenset({"_GLOBAL_OFFSET_TABLE_"})
#: the IR types whose conversions LLVM may turn into calls of the libcalls helpers
_HALF_TYPES = re.compile(r"\b(?:half|bfloat)\b")


def undefined_symbols(obj: bytes) -> List[str]:
    """The names of the undefined symbols of the ELF64 (little-endian) object file
    ``obj``: the functions and data its code takes from elsewhere."""
    def fail(what):
        return RuntimeError(f"the object code LLVM wrote is not a readable ELF64 file "
                            f"({what})")

    if len(obj) < 64 or obj[:4] != b"\x7fELF" or obj[4] != 2 or obj[5] != 1:
        raise fail("no ELF64 little-endian header")
    shoff, = struct.unpack_from("<Q", obj, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", obj, 0x3A)
    if shentsize < 64 or shoff + shnum * shentsize > len(obj):
        raise fail("the section headers lie outside the file")
    # (name, type, flags, addr, offset, size, link, info, addralign, entsize)
    secs = [struct.unpack_from("<IIQQQQIIQQ", obj, shoff + i * shentsize)
            for i in range(shnum)]
    names = []
    for sec in secs:
        if sec[1] != 2:   # SHT_SYMTAB
            continue
        off, size, link = sec[4], sec[5], sec[6]
        if off + size > len(obj) or link >= shnum:
            raise fail("the symbol table lies outside the file")
        stroff, strsize = secs[link][4], secs[link][5]
        if stroff + strsize > len(obj):
            raise fail("the string table lies outside the file")
        for k in range(size // 24):
            st_name, _info, _other, shndx = struct.unpack_from("<IBBH", obj, off + 24 * k)
            if shndx != 0 or st_name == 0:   # defined here, or the null symbol
                continue
            if st_name >= strsize:
                raise fail("a symbol name lies outside the string table")
            end = obj.find(b"\0", stroff + st_name, stroff + strsize)
            if end < 0:
                raise fail("a symbol name is not terminated")
            names.append(obj[stroff + st_name:end].decode("utf-8", "replace"))
    return names


_LIBCALLS: Optional["JitModule"] = None   # kept alive: the registered code lives in it
_LIBCALLS_BUSY = False


def _ensure_libcalls() -> None:
    """Compile the float16/bfloat16 conversion helpers (:mod:`.libcalls`) and register
    their names, once per process, before a module that calls them is linked.  Call with
    :data:`tecomp.target.host.LLVM_LOCK` held."""
    global _LIBCALLS, _LIBCALLS_BUSY

    if _LIBCALLS is not None or _LIBCALLS_BUSY:   # busy: compile_ir of the helpers themselves
        return
    _LIBCALLS_BUSY = True
    try:
        jm = compile_ir(libcalls.libcalls_ir(), libcalls.NAMES)
    finally:
        _LIBCALLS_BUSY = False
    for name in libcalls.NAMES:
        add_symbol(name, jm.addresses[name])
    _LIBCALLS = jm


def _check_resolved(undefined: Iterable[str]) -> None:
    """Raise :class:`UnresolvedSymbolError` unless each of ``undefined`` resolves in
    this process as MCJIT resolves it (after registering the float16 conversion helpers
    where the code calls them).  Call with :data:`tecomp.target.host.LLVM_LOCK` held."""
    names = set(undefined) - _LINKER_SYMBOLS
    if names & set(libcalls.NAMES):
        _ensure_libcalls()
    missing = sorted(n for n in names if not llvm.address_of_symbol(n))
    if missing:
        raise UnresolvedSymbolError(missing)


def compile_ir(ir_text: str, symbols: Iterable[str], *, opt: bool = True,
               explicit: bool = False, check=None, target=None) -> JitModule:
    """Parse, verify, optimise and JIT ``ir_text``; return the addresses of ``symbols``.
    ``explicit``: see :func:`optimize`; ``check``: see :func:`_optimized_module`.
    ``target``: what the code is for (None: the host); code of another instruction set
    is optimised only (its addresses are 0: it is exported, never called here).

    Raises :class:`UnresolvedSymbolError` when the machine code calls a function that
    nothing in this process defines (before anything is linked or run), else whatever
    LLVM raises (``RuntimeError``); the caller wraps it.
    """
    h = host()
    timings: Dict[str, float] = {}
    with _host.LLVM_LOCK:
        mod = _optimized_module(ir_text, opt, explicit, timings, check, target)
        t2 = time.perf_counter()
        if is_foreign(target):
            if isinstance(mod, tuple):
                mod = mod[0]   # the bitcode (the worker's object code is not linked here)
            timings["jit"] = 0.0
            return JitModule(None, ir_text, mod, {s: 0 for s in symbols}, timings, target)
        objects: List[bytes] = []
        if isinstance(mod, tuple):
            # the worker's machine code, linked into an engine of its own
            mod, obj = mod
            _check_resolved(undefined_symbols(obj))
            empty = llvm.parse_assembly("")
            empty.triple = h.triple
            empty.data_layout = h.data_layout
            engine = llvm.create_mcjit_compiler(empty, h.new_target_machine())
            engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
        else:
            # compiled by finalize_object, which also links it: the helpers it may call
            # are registered first, the object code checked before any of it runs
            if _HALF_TYPES.search(ir_text):
                _ensure_libcalls()
            engine = llvm.create_mcjit_compiler(mod, h.new_target_machine())
            engine.set_object_cache(lambda _m, buf: objects.append(bytes(buf)))
        engine.finalize_object()
        for obj in objects:
            _check_resolved(undefined_symbols(obj))
        addresses = {}
        for s in symbols:
            a = engine.get_function_address(s)
            if not a:
                raise RuntimeError(f"symbol {s!r} not found in the JIT-compiled module")
            addresses[s] = a
        t3 = time.perf_counter()
    timings["jit"] = t3 - t2
    return JitModule(engine, ir_text, mod, addresses, timings, target)


def emit_object(parts: Iterable[Tuple[str, bool, Dict[str, str]]], target=None) -> bytes:
    """Position-independent object code (ELF on Linux) of several modules linked into
    one, for a shared library.

    ``parts``: ``(ir_text, optimise, renames)``: LLVM IR (optimised by the O3 pipeline
    first where ``optimise`` is true; the code of a compiled kernel variant is already
    optimised), and the functions to rename before linking (the variants of one kernel
    all define ``tecomp_<name>``).  ``target``: the :class:`~tecomp.target.Target` the
    code is for (None or a host target: this CPU, with every feature it has, as the JIT
    compiles); functions carrying their own ``target-cpu``/``target-features``
    attributes keep them.

    Raises whatever LLVM raises (``RuntimeError``); the caller wraps it.
    """
    with _host.LLVM_LOCK:
        linked = None
        for text, opt, renames in parts:
            mod = _optimized_module(text, opt, False, {}, target=target)
            if isinstance(mod, tuple):   # (bitcode, the worker's JIT object code)
                mod = _parse_bitcode(mod[0])
            for old, new in renames.items():
                mod.get_function(old).name = new
            if linked is None:
                linked = mod
            else:
                linked.link_in(mod)
        if linked is None:
            raise RuntimeError("emit_object: no modules")
        linked.verify()
        return target_machine(target, pic=True).emit_object(linked)


def add_symbol(name: str, address: int) -> None:
    """Make ``name`` resolve to ``address`` in every module JIT-compiled afterwards."""
    with _host.LLVM_LOCK:
        llvm.add_symbol(name, address)


def with_target_attributes(text: str, target, extra: str = "", unconstrained=(),
                           width: str = "") -> str:
    """LLVM IR ``text`` with every function defined in it compiled for ``target``'s CPU
    and features (nothing changes for the host).  LLVM takes the subtarget (the
    instructions, the vector width its cost model assumes) from these attributes instead
    of the host's TargetMachine defaults (both: a function without "target-features"
    would get the host's, AVX-512 included, on top of the CPU's own).  ``extra``: more
    function attributes (the policy's ``function_attributes``), but not for the
    functions named in ``unconstrained``.  ``width``: the attributes of a narrower
    register width (the policy's ``width_attributes``: a module under ``pragma
    vector_bytes``), on every function, for the host too."""
    if target.is_host and not width:
        return text
    attrs = "" if target.is_host else \
        f' "target-cpu"="{target.cpu}" "target-features"="{target.llvm_features}"'
    skip = [f'@"{n}"(' for n in unconstrained] + [f"@{n}(" for n in unconstrained]

    def add(m):
        line = m.group(1)
        more = f" {extra}" if extra and not target.is_host and \
            not any(s in line for s in skip) else ""
        return line + attrs + more + (f" {width}" if width else "") + " {"
    return re.sub(r"^(define [^\n]*?)\s*\{$", add, text, flags=re.M)
