"""The CUDA runtime: compile tecomp's CUDA C with pycuda and launch it.

pycuda is an optional dependency (``pip install tecomp[cuda]``).  Without it, or without
a GPU, :func:`tecomp.codegen.cuda.build_cuda` still generates the source (``get_source("cuda")`` works) and
calling the module raises :class:`~tecomp.errors.RuntimeUnavailableError` saying what
is missing.

Calls accept, for each buffer parameter:

* a device array: pycuda's ``GPUArray`` or anything with ``__cuda_array_interface__``
  (CuPy, PyTorch, numba).  The kernel reads and writes it in place; it must be
  C-contiguous when the buffer is compact.
* a numpy array: copied to a temporary device buffer before the launch, and, for the
  buffers the function writes, copied back into the numpy array after it (so
  non-contiguous numpy arrays work too).  Convenient, not fast: keep data on the device
  for repeated calls.

``f(*args, stream=s)`` launches on a CUDA stream (torch's, CuPy's, pycuda's, or a raw
handle) and, with every array on the device, returns without waiting for it.

The arguments are checked as on the CPU, with the same messages
(:class:`tecomp.runtime.argcheck.ArgChecker`); grid and block sizes are computed from
the symbolic extents at call time and checked against the device (threads per block,
including the kernel's register limit, block and grid dimensions, shared memory).

The driver work goes through a small :class:`PycudaDriver` object; another object with
the same methods can stand in for it (``tecomp.codegen.cuda.build_cuda(func, driver=...)``), which is how
the runtime's logic is tested on machines without a GPU.
"""
from __future__ import annotations

import atexit
import contextlib
import ctypes
import hashlib
import sys
import threading
import weakref
from typing import Dict, List, Optional

import numpy as np

from .argcheck import (
    ADDRESS_SPACE, ArgChecker, array_meta, cai_meta, eval_host_expr, in_place_of,
    param_checks_of, param_label, _span,
)
from .cuda_driver import Function, foreign_stream_error, libcuda, pointer_device, stream_wait
from .cuda_kernels import CudaSource, KernelInfo, workspace_elements
from .nvcc import compile_cubin, compile_ptx
from ..target import MAX_STATIC_SHARED_BYTES
from ..target import tma as _tma
from ..lower.tma_pipeline import map_spec
from ..errors import ArgumentError, BuildError, ResourceLimitError, RuntimeUnavailableError
from ..ir.expr import Buffer
from .timing import Timed

_ALREADY_CURRENT = contextlib.nullcontext()

# struct format characters of kernel parameters (pycuda's prepared calls)
_STRUCT = {"int8": "b", "uint8": "B", "int16": "h", "int32": "i", "int64": "q", "bool": "?",
           "float16": "f", "bfloat16": "f", "float32": "f", "float64": "d"}
# the Python type a scalar argument is packed from (pycuda packs with struct)
_PY_SCALAR = {"int8": int, "uint8": int, "int16": int, "int32": int, "int64": int, "bool": bool,
              "float16": float, "bfloat16": float, "float32": float, "float64": float}


class PycudaDriver:
    """The driver calls the runtime makes, on pycuda and one context of the device: the
    context current on the thread that starts the driver, if there is one (a
    ``pycuda.autoinit`` user's: their GPUArrays live there), else the device's primary
    context (shared with CuPy and PyTorch, so their arrays can be passed directly), which
    is then left current on that thread, as PyTorch and CuPy leave it, so that pycuda
    arrays made afterwards live in it too; it is popped at exit."""

    def __init__(self, ordinal: int = 0):
        try:
            import pycuda.driver as cuda
        except ImportError:
            raise RuntimeUnavailableError(
                "pycuda is not installed: pip install tecomp[cuda] (the generated source is "
                "still available with get_source('cuda'))") from None
        try:
            cuda.init()
            count = cuda.Device.count()
        except Exception as exc:  # noqa: BLE001 - pycuda raises its own error types
            raise RuntimeUnavailableError(
                f"no CUDA device: the CUDA driver did not start ({exc})") from None
        if count <= ordinal:
            raise RuntimeUnavailableError(
                f"no CUDA device: the driver sees {count} device(s), device {ordinal} was asked for")
        self.cuda = cuda
        self.ordinal = ordinal
        self.device = cuda.Device(ordinal)
        current = cuda.Context.get_current()
        if current is not None and current.get_device() == self.device:
            self.context = current
        else:
            self.context = self.device.retain_primary_context()
            self.context.push()
            atexit.register(self._pop_primary)
        a = cuda.device_attribute
        get = self.device.get_attribute
        self.name = self.device.name()
        self.compute_capability = self.device.compute_capability()
        self.max_threads_per_block = get(a.MAX_THREADS_PER_BLOCK)
        self.max_block_dims = (get(a.MAX_BLOCK_DIM_X), get(a.MAX_BLOCK_DIM_Y), get(a.MAX_BLOCK_DIM_Z))
        self.max_grid_dims = (get(a.MAX_GRID_DIM_X), get(a.MAX_GRID_DIM_Y), get(a.MAX_GRID_DIM_Z))
        self.max_shared_per_block = get(a.MAX_SHARED_MEMORY_PER_BLOCK)
        # what a kernel can opt in to (dynamic shared memory beyond the static 48 KiB)
        self.max_shared_per_block_optin = get(a.MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
        self.multiprocessors = get(a.MULTIPROCESSOR_COUNT)
        self._modules: Dict[str, object] = {}
        self._cubins: Dict[int, bytes] = {}      # id(module) -> its cubin (stream launches)
        self._cu_functions: Dict[tuple, object] = {}   # (id(module), name) -> CUfunction

    @property
    def arch(self) -> str:
        return "sm_%d%d" % self.compute_capability

    def _pop_primary(self) -> None:
        try:
            if self.cuda.Context.get_current() == self.context:
                self.cuda.Context.pop()
        except Exception:  # noqa: BLE001 - the driver may be shutting down already
            pass

    def active(self):
        """A context manager making the driver's context current inside: nothing to do
        where it is current already (as it stays on the thread that started the driver,
        and on a PyTorch user's threads: the primary context), else pushed and popped."""
        if self.cuda.Context.get_current() == self.context:
            return _ALREADY_CURRENT
        return self._pushed()

    @contextlib.contextmanager
    def _pushed(self):
        self.context.push()
        try:
            yield
        finally:
            self.cuda.Context.pop()

    def compile(self, cs: CudaSource, arch: Optional[str] = None):
        """The module of ``cs``, compiled for ``arch`` (a target's ``-arch``; by default
        this device's)."""
        arch = arch or self.arch
        key = hashlib.sha256((arch + "\n" + cs.source).encode()).hexdigest()
        mod = self._modules.get(key)
        if mod is None:
            try:
                cubin = compile_cubin(cs.source, arch)
            except BuildError as exc:
                raise BuildError(f"nvcc failed to compile the generated CUDA C for {arch} "
                                 f"(this device: {self.arch}): {exc}") from None
            try:
                mod = self.cuda.module_from_buffer(cubin)
            except Exception as exc:  # noqa: BLE001 - pycuda.driver.Error and friends
                raise BuildError(f"the CUDA driver did not load the module compiled for {arch} "
                                 f"(this device: {self.arch}; build for cuda without -arch to "
                                 f"compile for it): {exc}") from None
            self._modules[key] = mod
            self._cubins[id(mod)] = cubin
        return mod

    def pointer_device(self, ptr: int) -> Optional[int]:
        """The ordinal of the device whose memory ``ptr`` points into; None where the
        driver does not know the address (host memory)."""
        return pointer_device(libcuda(), ptr)

    def get_function(self, module, name: str):
        fn = module.get_function(name)
        fn._tecomp_key = (id(module), name)
        return fn

    def function_max_threads(self, fn) -> int:
        return fn.get_attribute(self.cuda.function_attribute.MAX_THREADS_PER_BLOCK)

    def function_registers(self, fn) -> int:
        return fn.get_attribute(self.cuda.function_attribute.NUM_REGS)

    def alloc(self, nbytes: int):
        return self.cuda.mem_alloc(max(1, nbytes))

    def htod(self, ptr, host: np.ndarray) -> None:
        if host.nbytes:
            self.cuda.memcpy_htod(ptr, host)

    def dtoh(self, host: np.ndarray, ptr) -> None:
        if host.nbytes:
            self.cuda.memcpy_dtoh(host, ptr)

    def launch(self, fn, grid, block, shared: int, types: str, args, stream: int = None) -> None:
        """Launch ``fn``; ``stream`` (a CUstream handle, 0 the legacy default stream):
        asynchronously on that stream, else as pycuda's prepared call does."""
        if stream is not None:
            self._launch_on(fn, grid, block, shared, types, args, stream)
            return
        if shared > MAX_STATIC_SHARED_BYTES and getattr(fn, "_tecomp_dynamic", 0) < shared:
            fn.set_attribute(self.cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, shared)
            fn._tecomp_dynamic = shared
        if getattr(fn, "_tecomp_types", None) != types:
            fn.prepare(types)
            fn._tecomp_types = types
        fn.prepared_call(tuple(grid), tuple(block), *args, shared_size=shared)

    def _launch_on(self, fn, grid, block, shared, types, args, stream: int) -> None:
        # pycuda launches only on its own Stream objects: a foreign stream (torch's,
        # CuPy's) goes through the driver API, with the same cubin loaded once more
        # through it (pycuda does not expose its CUfunction)
        cu = libcuda()
        key = fn._tecomp_key
        function = self._cu_functions.get(key)
        if function is None:
            module = ctypes.c_void_p()
            image = self._cubins[key[0]]
            _cu_check(cu.cuModuleLoadData(ctypes.byref(module), image), "cuModuleLoadData")
            handle = ctypes.c_void_p()
            _cu_check(cu.cuModuleGetFunction(ctypes.byref(handle), module, key[1].encode()),
                      "cuModuleGetFunction")
            if shared > MAX_STATIC_SHARED_BYTES:
                # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES (a kernel's shared memory
                # is its own: the same for every launch of it)
                _cu_check(cu.cuFuncSetAttribute(handle, ctypes.c_int(8), ctypes.c_int(shared)),
                          "cuFuncSetAttribute")
            function = self._cu_functions[key] = Function(handle, key[1])
        status = function.launch(cu, grid, block, shared, types, args, stream)
        if status != 0:   # a stream of another GPU: say so
            err = foreign_stream_error(cu, stream, int(self.context.handle), self.ordinal,
                                       f"CUresult {status}")
            if err is not None:
                raise err
        _cu_check(status, "cuLaunchKernel")

    def wait_stream(self, producer: int, stream: Optional[int], who: str) -> None:
        """Make the work queued next on ``stream`` (None: the host) wait for ``producer``'s
        (:func:`~tecomp.runtime.cuda_driver.stream_wait`); ``who`` names the array whose
        interface gave it."""
        cu = libcuda()
        status, what = stream_wait(cu, producer, stream)
        if status != 0:
            err = foreign_stream_error(cu, producer, int(self.context.handle), self.ordinal,
                                       f"CUresult {status}", who)
            if err is not None:
                raise err
            _cu_check(status, what)

    def synchronize(self, stream: int = None) -> None:
        if stream is None:
            self.context.synchronize()
        else:
            _cu_check(libcuda().cuStreamSynchronize(ctypes.c_void_p(stream)),
                      "cuStreamSynchronize")


def _gpu_map(box, address: int, env, drv) -> bytes:
    """The CUtensorMap of a TMA box over the argument of its tensor (``address`` on the
    device, its extents from the call's ``env``), encoded by the driver after tecomp's
    checks."""
    shape = [int(eval_host_expr(d, env)) for d in box.src.shape]
    return _tma.encode(map_spec(box, shape), address, getattr(drv, "cu", None) or libcuda())


def _cu_check(status: int, what: str) -> None:
    if status != 0:
        raise RuntimeUnavailableError(f"the CUDA driver's {what} failed with CUresult {status}")


def stream_handle(stream) -> int:
    """The CUstream handle of ``stream``: an object with the ``__cuda_stream__`` protocol,
    a torch stream (``.cuda_stream``), a CuPy stream (``.ptr``), a pycuda Stream
    (``.handle``) or an int (0: the legacy default stream)."""
    if isinstance(stream, bool):
        pass
    elif isinstance(stream, int):
        if stream >= 0:
            return stream
    else:
        proto = getattr(stream, "__cuda_stream__", None)
        if callable(proto):
            got = proto()
            if isinstance(got, tuple) and len(got) == 2 and isinstance(got[1], int):
                return got[1]
        for attr in ("cuda_stream", "ptr", "handle"):
            v = getattr(stream, attr, None)
            if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
                return v
    raise ArgumentError(
        f"stream={stream!r:.80} is not a CUDA stream: pass a torch.cuda.Stream, a CuPy stream, "
        "a pycuda Stream, an object with __cuda_stream__, or a CUstream handle (an int >= 0)")


_DRIVER: Optional[PycudaDriver] = None
_DRIVER_LOCK = threading.Lock()


def default_driver() -> PycudaDriver:
    """The process's pycuda driver (device 0), started on first use."""
    global _DRIVER
    with _DRIVER_LOCK:
        if _DRIVER is None:
            _DRIVER = PycudaDriver()
        return _DRIVER


class CudaSourceModule(Timed):
    """What the CUDA module and its CPU emulation share: the generated source and its
    kernels, the argument checks of a call, and each kernel's launch sizes."""

    def _device_type(self) -> int:
        """CUDA (DLPack's 2): GPU 0, or its emulation, which stands for it."""
        return 2

    def __init__(self, cs: CudaSource, device: Optional[bool]):
        self.cuda_source = cs
        self.func = cs.func
        self._checker = ArgChecker(self.func.params, func_name=self.func.name,
                                   written=cs.written, device=device,
                                   param_checks=param_checks_of(self.func),
                                   in_place=in_place_of(self.func))

    @property
    def kernels(self) -> List[KernelInfo]:
        return self.cuda_source.kernels

    @property
    def source(self) -> str:
        return self.cuda_source.source

    def _checked(self, args, snapshot=None):
        """``(args, env, metas)``: the call's arguments checked (the same messages as on the
        CPU), aliasing and the source's host assertions included; ``env`` binds the
        symbolic extents, ``metas`` holds each argument's :func:`array_meta` (None for a
        scalar).  ``snapshot``: where the caller has converted ``args`` already
        (``host_arrays``) and read every array's ``__cuda_array_interface__`` once
        (:func:`_signature`), those entries per argument (the metas are made from them)."""
        cs, func = self.cuda_source, self.func
        if snapshot is None:
            args = self._checker.host_arrays(args)
            metas = [array_meta(a, p.name, i) if isinstance(p, Buffer) else None
                     for i, (p, a) in enumerate(zip(func.params, args))]
        else:   # (each interface read once, by _signature: the same dict checked here)
            metas = [None if e is None else cai_meta(a, e[1], p.name, i)
                     for i, (p, e, a) in enumerate(zip(func.params, snapshot, args))]
        env = self._checker.check(args, metas)  # overlapping arrays included
        for cond, message in cs.host_asserts:
            if not eval_host_expr(cond, env):
                raise ArgumentError(f"{func.name}: {message}")
        return args, env, metas

    def _launches(self, env):
        """``(index, kernel, grid, block)`` of each kernel to launch with ``env``'s sizes (an
        empty launch, with nothing to compute, is left out)."""
        out = []
        for k, kern in enumerate(self.kernels):
            grid = [int(eval_host_expr(d, env)) for d in kern.grid]
            block = [int(eval_host_expr(d, env)) for d in kern.block]
            if min(grid + block) > 0:
                out.append((k, kern, grid, block))
        return out


class CudaModule(CudaSourceModule):
    """A PrimFunc compiled for the GPU.  Call it with device or numpy arrays."""

    #: the arrays a call takes (ArgChecker's ``device``): None, device and numpy arrays
    _arrays: Optional[bool] = None

    def __init__(self, cs: CudaSource, driver=None, target=None, exporter=None):
        super().__init__(cs, device=self._arrays)
        #: the :class:`~tecomp.target.Target` (``cuda -arch=...``: compiled for that
        #: architecture; without ``-arch``, for the device's)
        self.target = target
        self._exporter = exporter
        self._driver = driver
        self._functions = None  # (driver, [function per kernel])
        self._launch_ok = set()  # (kernel, grid, block) checked against the device
        #: whether each parameter is a buffer
        self._buffer_params = tuple(isinstance(p, Buffer) for p in self.func.params)
        self._plans: Dict[tuple, _PlanEntry] = {}   # call signature -> what its checks found
        self._workspaces = _Workspaces()
        # (not at exit: the driver may be gone, and the process's memory goes with it)
        weakref.finalize(self, self._workspaces.free_all).atexit = False

    def get_source(self, fmt: str = "cuda") -> str:
        """``"cuda"``: the CUDA C; ``"ptx"``: PTX from nvcc for the target's ``-arch``, else
        this device's architecture (sm_80 without one)."""
        if fmt in ("cuda", "cu", "c"):
            return self.cuda_source.source
        if fmt == "ptx":
            arch = getattr(self.target, "arch", None) or "sm_80"
            drv = self._driver or _DRIVER
            if getattr(self.target, "arch", None) is None and drv is not None and \
                    hasattr(drv, "arch"):
                arch = drv.arch
            return compile_ptx(self.cuda_source.source, arch)
        raise ArgumentError(f"unknown source format {fmt!r}; use 'cuda' or 'ptx'")

    def export_library(self, path) -> None:
        """Write the kernels as a GPU library at ``path`` (and its ``path + ".sha256"``
        sidecar) that ``tc.load_module(path)`` runs through the CUDA driver alone: a
        fatbin with cubins for sm_80 and sm_90 and PTX for newer GPUs, and what the calls
        need (argument checks, launch sizes).  Needs nvcc and a C compiler, not a GPU.

        Parameters
        ----------
        path : str or os.PathLike
            The library file to write (``kernels.so``).

        Raises
        ------
        RuntimeUnavailableError
            Without nvcc or a C compiler.
        BuildError
            When nvcc fails, or the module cannot be described by a library.
        """
        if self._exporter is None:
            raise BuildError(f"{self.func.name} was not built by tc.build, which gives a module "
                             f"export_library can write: build it with tc.build(..., "
                             f"target='cuda')")
        self._exporter(self, path)

    def driver(self):
        if self._driver is None:
            self._driver = default_driver()
        return self._driver

    def _driver_for(self, metas):
        """The driver of the device this call's kernels run on (``metas``: what the
        argument checks found of each argument): the module's, with every device array
        in that device's memory (:func:`arrays_device`), where the driver can tell."""
        drv = self.driver()
        where = getattr(drv, "pointer_device", None)
        if where is not None:
            arrays_device(self.func, metas, where, getattr(drv, "ordinal", 0),
                          "the module's driver")
        return drv

    def _kernel_functions(self, drv):
        if self._functions is None or self._functions[0] is not drv:
            mod = drv.compile(self.cuda_source, getattr(self.target, "arch", None))
            fns = [drv.get_function(mod, k.name) for k in self.kernels]
            self._functions = (drv, fns)
            self._launch_ok = set()
        return self._functions[1]

    def __call__(self, *args, stream=None) -> None:
        """Run the kernels on ``args``.  ``stream`` (a torch or CuPy stream, a pycuda
        Stream, anything with ``__cuda_stream__``, or a CUstream handle): launch on it and
        return without waiting where every array is already on the device (the caller
        orders the stream with its other work, as with any CUDA library call); with numpy
        arguments the call waits for the stream before it copies results back.  Without
        ``stream`` the call waits for the kernels.

        A call whose arrays are all on the device, with the shapes, strides, dtypes and
        scalar values of an earlier call that passed the checks, reuses what those checks
        found (launch sizes, parameter layout); what depends on the addresses (overlap,
        alignment, the device) is checked on every call.  Intermediate buffers are kept
        by the module between calls, one set per stream in flight (see
        :class:`_Workspaces`)."""
        self.driver()   # (no driver or no GPU: RuntimeUnavailableError before the arguments)
        handle = None if stream is None else stream_handle(stream)
        given = args
        args = self._checker.host_arrays(args)   # (torch tensors: checked on every call)
        key, snapshot, streams = _signature(self._buffer_params, args)
        if key is not None:
            entry = self._plans.get(key)
            if entry is not None and self._run_plan(entry, args, snapshot, handle, streams):
                self._checker.mark_written(given)  # torch's version counters of the outputs
                return
        self._call_checked(args, key, snapshot, handle)
        self._checker.mark_written(given)

    def _run_plan(self, entry, args, snapshot, handle, streams=None) -> bool:
        """Run a call through the plan an earlier call with the same signature made; False
        (nothing done) where a check that depends on the addresses needs the full path
        (which then raises, or allows what it allows: an in-place pair).  ``streams``:
        ``(position, stream)`` of each array whose interface names a producer's stream
        (:func:`_signature`; None: none does)."""
        ptrs = [None if e is None else e[1]["data"][0] for e in snapshot]
        for i, align in entry.elements:   # (what argcheck's _device_meta checks of an address)
            lo, hi = entry.spans[i]
            if ptrs[i] <= 0 or ptrs[i] % align or ptrs[i] + lo < 0 or \
                    ptrs[i] + hi > ADDRESS_SPACE:
                return False   # the full path says what is wrong with it
        drv = self._plan_driver(entry, ptrs)
        if drv is None:
            return False
        plan = entry.plans.get(drv)
        if plan is None:
            return False
        for i, j in entry.pairs:
            (ilo, ihi), (jlo, jhi) = entry.spans[i], entry.spans[j]
            if ptrs[i] + ilo < ptrs[j] + jhi and ptrs[j] + jlo < ptrs[i] + ihi:
                return False   # the address ranges meet: the full check says how
        for i, align in plan.aligns:
            if ptrs[i] % align:
                return False
        skey = _stream_key(handle)
        with drv.active():
            ws = self._workspaces.take(drv, skey, plan.ws_bytes, handle)
            try:
                table = ptrs + [int(w[1]) for w in ws]
                for i, align in plan.ws_aligns:
                    if table[i] % align:
                        return False
                # (every kernel's maps before the waits and the first launch: a map
                # refused does nothing)
                kargs_of = []
                for fn, grid, block, shared, types, srcs, maps in plan.launches:
                    kargs = [table[x] if type(x) is int else x[0] for x in srcs]
                    for k, box, src, cache in maps:
                        kargs[k] = _cached_map(cache, box, table[src], entry.env, drv)
                    kargs_of.append(kargs)
                if streams:
                    self._wait_producers(drv, streams, handle)
                for (fn, grid, block, shared, types, srcs, maps), kargs in zip(plan.launches,
                                                                              kargs_of):
                    if handle is None and maps:
                        drv.launch(fn, grid, block, shared, types, kargs, stream=0)
                    elif handle is None:
                        drv.launch(fn, grid, block, shared, types, kargs)
                    else:
                        drv.launch(fn, grid, block, shared, types, kargs, stream=handle)
                if handle is None:
                    drv.synchronize()
            finally:
                self._workspaces.give(drv, skey, ws)
        return True

    def _plan_driver(self, entry, ptrs):
        """The driver a planned call runs on (None: ask the full path): the module's, with
        every array that has elements in its device's memory (:meth:`_driver_for`), where
        the driver can tell."""
        drv = self.driver()
        where = getattr(drv, "pointer_device", None)
        if where is not None:
            ordinal = getattr(drv, "ordinal", 0)
            for i in entry.nonempty:
                if where(ptrs[i]) != ordinal:
                    return None
        return drv

    def _call_checked(self, args, key, snapshot, handle) -> None:
        """A call through every check (the first of its signature, or one a plan could
        not run); makes the plan of ``key`` where every array is on the device."""
        cs, func = self.cuda_source, self.func
        args, env, metas = self._checked(args, snapshot)
        drv = self._driver_for(metas)
        launches = self._launches(env)
        skey = _stream_key(handle)
        with drv.active():
            fns = self._kernel_functions(drv)
            for k, kern, grid, block in launches:
                lkey = (k, tuple(grid), tuple(block))
                if lkey not in self._launch_ok:  # (the same sizes pass again: once)
                    _check_device_launch(drv, fns[k], kern, grid, block)
                    self._launch_ok.add(lkey)
            pointers: Dict[Buffer, int] = {}
            temps, copy_back = [], []
            maps: Dict[tuple, tuple] = {}   # (kernel, parameter) -> (address, its map)
            ws_bytes = [self._workspace_bytes(w, env) for w in cs.workspaces]
            ws = None
            try:
                for i, (p, a, meta) in enumerate(zip(func.params, args, metas)):
                    if not isinstance(p, Buffer):
                        continue
                    if meta.on_device:
                        if p.strides is None and not meta.c_contiguous:
                            raise ArgumentError(
                                f"{param_label(p.name, i)} is a non-contiguous device array, but "
                                f"the kernel expects a C-contiguous one: pass a contiguous copy")
                        pointers[p] = meta.pointer
                    else:
                        if p.strides is not None and not a.flags.c_contiguous:
                            raise ArgumentError(
                                f"{param_label(p.name, i)} is a non-contiguous numpy array for a "
                                f"buffer with explicit strides, and copying it to the device would "
                                f"change its strides: pass a device array or a contiguous one")
                        host = np.ascontiguousarray(a)
                        dev = drv.alloc(host.nbytes)
                        temps.append(dev)
                        drv.htod(dev, host)
                        pointers[p] = int(dev)
                        if p in cs.written:
                            copy_back.append((a, host, dev))
                ws = self._workspaces.take(drv, skey, ws_bytes, handle)
                for w, (_, dev) in zip(cs.workspaces, ws):
                    pointers[w] = int(dev)
                for k, kern, grid, block in launches:
                    for kp in kern.params:
                        if kp.is_buffer and kp.align and pointers[kp.obj] % kp.align:
                            raise ArgumentError(
                                f"{func.name}: the array passed for {kp.obj.name} starts at "
                                f"device address {pointers[kp.obj]:#x}, and kernel {kern.name} "
                                f"reads it as tensor-core tiles, which must start on a "
                                f"{kp.align}-byte boundary: pass an array whose data is "
                                f"{kp.align}-byte aligned (a fresh allocation, or a contiguous "
                                f"copy of a view)")
                kargs_of = []   # (every kernel's maps before the waits and launches)
                for k, kern, grid, block in launches:
                    kargs = [pointers[p.obj] if p.is_buffer else
                             _gpu_map(p.obj, pointers[p.obj.src], env, drv)
                             if p.dtype == "tensor_map" else _PY_SCALAR[p.dtype](env[p.obj])
                             for p in kern.params]
                    for j, p in enumerate(kern.params):   # (the plan keeps them)
                        if p.dtype == "tensor_map" and not p.is_buffer:
                            maps[k, j] = (pointers[p.obj.src], kargs[j])
                    kargs_of.append(kargs)
                producers = [(i, m.stream) for i, m in enumerate(metas)
                             if m is not None and m.stream is not None]
                if producers:
                    self._wait_producers(drv, producers, handle)
                for (k, kern, grid, block), kargs in zip(launches, kargs_of):
                    types = _types(kern)
                    if handle is None and "T" in types:
                        # (a tensor map is 64-byte aligned among the parameters: the driver
                        # API's launch places each one where the kernel declares it)
                        drv.launch(fns[k], grid, block, kern.dynamic_shared, types, kargs,
                                   stream=0)
                    elif handle is None:
                        drv.launch(fns[k], grid, block, kern.dynamic_shared, types, kargs)
                    else:
                        drv.launch(fns[k], grid, block, kern.dynamic_shared, types, kargs,
                                   stream=handle)
                if handle is None:
                    drv.synchronize()
                elif temps:
                    drv.synchronize(stream=handle)
                for orig, host, dev in copy_back:
                    drv.dtoh(host, dev)
                    if host is not orig:
                        orig[...] = host
            finally:
                if ws is not None:
                    self._workspaces.give(drv, skey, ws)
                for t in temps:
                    free = getattr(t, "free", None)
                    if free is not None:
                        free()
        if key is not None and not temps:
            self._add_plan(key, drv, fns, env, metas, launches, ws_bytes, maps)

    def _wait_producers(self, drv, producers, handle) -> None:
        """Order the call's kernels after the work the producers of its device arrays may
        still be writing them with (``producers``: ``(position, stream)`` of each array
        whose ``__cuda_array_interface__`` names a stream, version 3 of the protocol):
        once per stream that is not the launch stream (``handle``; None and 0: the legacy
        default stream, the protocol's 1).  On a stream, the launch stream waits for an
        event recorded on the producer's; where the call waits for its kernels anyway
        (no ``stream=``), the host waits for the producer's stream first."""
        launch = handle if handle else 1
        done = set()
        wait = getattr(drv, "wait_stream", None)
        for i, producer in producers:
            if producer == launch or producer in done:
                continue
            done.add(producer)
            if wait is None:   # (a stand-in driver without it: the host waits)
                drv.synchronize(stream=producer)
                continue
            p = self.func.params[i]
            wait(producer, handle, f"{param_label(p.name, i)}'s __cuda_array_interface__")

    @staticmethod
    def _workspace_bytes(w, env) -> int:
        # (padded strides: the span the kernels index, not the shape's product)
        return int(eval_host_expr(workspace_elements(w), env)) * np.dtype(w.dtype).itemsize

    def _add_plan(self, key, drv, fns, env, metas, launches, ws_bytes, encoded) -> None:
        """Remember what the checks of a call found, for the calls of the same signature
        (``key``) on driver ``drv``; ``encoded``: the tensor maps the call encoded,
        ``(kernel, parameter) -> (address, map)``, the first each map cache holds."""
        cs, func = self.cuda_source, self.func
        entry = self._plans.get(key)
        if entry is None:
            if len(self._plans) >= _MAX_PLANS:
                self._plans.clear()
            spans = [None if m is None else tuple(x - m.pointer for x in _span(m))
                     for m in metas]
            empty = {i for i, m in enumerate(metas)
                     if m is not None and spans[i][1] <= spans[i][0]}
            pairs = [(o.pos, q.pos) for o, others in self._checker.overlap_pairs
                     for q in others if o.pos not in empty and q.pos not in empty]
            # (a 0-d array has one element: its address is checked too)
            nonempty = [i for i, m in enumerate(metas) if m is not None and all(m.shape)]
            elements = [(i, min(metas[i].dtype.itemsize, 16) or 1) for i in nonempty]
            entry = _PlanEntry(env, spans, pairs, nonempty, elements)
            self._plans[key] = entry
        index = {p: i for i, p in enumerate(func.params) if isinstance(p, Buffer)}
        index.update({w: len(func.params) + k for k, w in enumerate(cs.workspaces)})
        aligns, ws_aligns, out = set(), set(), []
        for k, kern, grid, block in launches:
            srcs, maps = [], []
            for j, p in enumerate(kern.params):
                if p.is_buffer:
                    srcs.append(index[p.obj])
                    if p.align:
                        (aligns if index[p.obj] < len(func.params) else ws_aligns).add(
                            (index[p.obj], p.align))
                elif p.dtype == "tensor_map":
                    srcs.append((None,))
                    got = encoded.get((k, j))
                    maps.append((j, p.obj, index[p.obj.src], {} if got is None else
                                 {got[0]: got[1]}))
                else:
                    srcs.append((_PY_SCALAR[p.dtype](env[p.obj]),))
            out.append((fns[k], tuple(grid), tuple(block), kern.dynamic_shared, _types(kern),
                        tuple(srcs), tuple(maps)))
        entry.plans[drv] = _Plan(tuple(out), ws_bytes, tuple(sorted(aligns)),
                                 tuple(sorted(ws_aligns)))

    def __repr__(self):
        return f"<CudaModule {self.func.name}: {len(self.kernels)} kernel(s)>"


#: the call signatures a module keeps plans for (beyond, it forgets them all and starts over)
_MAX_PLANS = 64
#: the tensor maps a plan keeps per tensor-map parameter, by address
_MAX_MAPS = 16


def _types(kern: KernelInfo) -> str:
    """The struct characters of ``kern``'s parameters (``P`` a pointer, ``T`` a tensor map)."""
    return "".join("P" if p.is_buffer else "T" if p.dtype == "tensor_map" else
                   _STRUCT[p.dtype] for p in kern.params)


def _signature(buffer_params, args):
    """``(key, snapshot, streams)`` of a call whose buffer arguments all have a
    ``__cuda_array_interface__`` dict and whose scalars are plain ints, floats or bools:
    ``key`` is what the argument checks depend on apart from the addresses (each array's
    shape, typestr, strides and read-only flag; each scalar's type and value), and
    ``snapshot`` per argument None (a scalar) or ``(part of key, the interface's dict)``,
    read once (its entries plain tuples, ints, bools and a str: the checks read the same
    values); ``streams`` ``(position, stream)`` of each array whose
    interface names a stream its producer may still write it on (version 3 of the
    protocol; None where none does: torch's tensors, CuPy's on the default stream with
    synchronization turned off).  ``(None, None, None)`` for any other call (numpy arrays,
    other scalar types, an interface that does not read cleanly, a stream entry that is no
    handle: the full path decides)."""
    parts, snapshot, streams = [], [], None
    try:
        for is_buffer, a in zip(buffer_params, args):
            if is_buffer:
                if type(a) is np.ndarray:
                    return None, None, None
                cai = _torch_cai(a)
                if cai is None:
                    cai = a.__cuda_array_interface__
                if type(cai) is not dict:
                    return None, None, None
                # plain immutable values only (what torch and CuPy give), so that the
                # checks, which read the same dict, see what the key says; anything else
                # (lists, subclasses, a mask): the full path, which reads it once
                shape, typestr, data = cai["shape"], cai["typestr"], cai["data"]
                strides = cai.get("strides")
                if type(shape) is not tuple or type(typestr) is not str or \
                        type(data) is not tuple or len(data) != 2 or \
                        type(data[0]) is not int or type(data[1]) is not bool or \
                        cai.get("mask") is not None or \
                        any(type(x) is not int for x in shape) or (strides is not None and (
                            type(strides) is not tuple or
                            any(type(x) is not int for x in strides))):
                    return None, None, None
                stream = cai.get("stream")
                if stream is not None:
                    if type(stream) is not int or not 0 < stream < ADDRESS_SPACE:
                        return None, None, None   # (the full path says what is wrong)
                    if streams is None:
                        streams = []
                    streams.append((len(snapshot), stream))   # (this argument's position)
                if "V" in typestr:  # (a torch bfloat16 tensor's "<V2": its dtype tells)
                    typestr = (typestr, str(getattr(a, "dtype", "")))
                part = (shape, typestr, strides, data[1])
                parts.append(part)
                snapshot.append((part, cai))
            else:
                t = type(a)
                if t is int or t is bool:
                    parts.append((t, a))
                elif t is float:
                    parts.append((t, a.hex()))   # (-0.0 and 0.0 apart)
                else:
                    return None, None, None
                snapshot.append(None)
        key = tuple(parts)
        hash(key)   # (an entry of the interface that is no plain value)
    except Exception:  # noqa: BLE001 - the array's own protocol: the full path reports it
        return None, None, None
    return key, snapshot, streams


_TYPESTR: Dict[object, str] = {}   # torch dtype -> its __cuda_array_interface__ typestr


def _torch_cai(t) -> Optional[dict]:
    """The ``__cuda_array_interface__`` torch gives for ``t`` where ``t`` is a plain CUDA
    tensor (what ``host_arrays`` leaves of one) that torch's property would describe
    without a ``__torch_function__`` override: the same entries, made without the
    property's Python (it builds a dict of every dtype per read); None for anything else
    (then the property itself is read)."""
    torch = sys.modules.get("torch")
    if torch is None or type(t) is not torch.Tensor or not t.is_cuda or t.requires_grad \
            or t.is_sparse or torch.overrides.has_torch_function_unary(t):
        return None
    return _torch_entries(t)


def _torch_entries(t) -> Optional[dict]:
    """:func:`_torch_cai`'s entries of a tensor it takes."""
    typestr = _TYPESTR.get(t.dtype)
    if typestr is None:
        try:
            from torch._tensor import _dtype_to_typestr

            typestr = _TYPESTR[t.dtype] = _dtype_to_typestr(t.dtype)
        except Exception:  # noqa: BLE001 - a dtype it has none for: the property says so
            return None
    itemsize = t.element_size()
    strides = None if t.is_contiguous() else tuple(s * itemsize for s in t.stride())
    return {"typestr": typestr, "shape": tuple(t.shape), "strides": strides,
            "data": (t.data_ptr() if t.numel() > 0 else 0, False), "version": 2}


def _stream_key(handle):
    """What a call's workspaces are kept under: None for a call that waits for its kernels,
    else its stream (CU_STREAM_PER_THREAD, 2, is one stream per thread)."""
    if handle == 2:
        return (2, threading.get_ident())
    return handle


def _cached_map(cache, box, address: int, env, drv) -> bytes:
    """:func:`_gpu_map` of ``box`` at ``address``, kept in ``cache`` (a plan's: the same
    extents) by address."""
    got = cache.get(address)
    if got is None:
        got = _gpu_map(box, address, env, drv)
        if len(cache) >= _MAX_MAPS:
            cache.clear()
        cache[address] = got
    return got


class _PlanEntry:
    """What the checks of one call signature found: ``env`` (the variables' values),
    ``spans`` (per array argument, the bytes its elements occupy relative to its
    address), ``pairs`` (the argument positions whose memory must not meet),
    ``nonempty`` (the positions of arrays with elements), and a :class:`_Plan` per driver."""

    __slots__ = ("env", "spans", "pairs", "nonempty", "elements", "plans")

    def __init__(self, env, spans, pairs, nonempty, elements):
        self.env, self.spans, self.pairs, self.nonempty = env, spans, pairs, nonempty
        #: (position, bytes) of each array with elements: its address must be that aligned
        self.elements = elements
        self.plans: Dict[object, _Plan] = {}


class _Plan:
    """The launches of one signature on one driver: per kernel ``(function, grid, block,
    shared bytes, types, sources, tensor maps)``, a source being an index into the call's
    table of addresses (the arguments', then the workspaces') or a 1-tuple holding a
    scalar's value; ``ws_bytes`` the workspaces' sizes; ``aligns`` and ``ws_aligns`` the
    ``(index, bytes)`` of the pointers tensor-core tiles read."""

    __slots__ = ("launches", "ws_bytes", "aligns", "ws_aligns")

    def __init__(self, launches, ws_bytes, aligns, ws_aligns):
        self.launches, self.ws_bytes = launches, ws_bytes
        self.aligns, self.ws_aligns = aligns, ws_aligns


class _Workspaces:
    """A module's intermediate buffers (global workspaces), kept between calls.

    A call takes a set (one allocation per workspace, grown where this call needs more)
    and gives it back when its kernels are queued.  Sets are kept per driver and per
    stream: a set given back by a call on stream S is only taken by a later call on S,
    whose kernels the stream orders after the earlier ones; a call that waits for its
    kernels (no stream) gives back an idle set.  Two calls in flight at once each hold
    a set of their own (the second allocates one).  The sets are freed with the module."""

    def __init__(self):
        self.lock = threading.Lock()
        self.idle: Dict[tuple, list] = {}   # (driver, stream key) -> [set, ...]

    def take(self, drv, skey, sizes, handle) -> list:
        if not sizes:
            return []
        with self.lock:
            sets = self.idle.get((drv, skey))
            got = sets.pop() if sets else None
        if got is None:
            got = []
        try:
            for k, n in enumerate(sizes):
                if k == len(got):
                    got.append((n, drv.alloc(n)))
                elif got[k][0] < n:
                    if handle is not None:  # (its earlier kernels may still read it)
                        drv.synchronize(stream=handle)
                    _free(got[k][1])
                    got[k] = (0, None)
                    got[k] = (n, drv.alloc(n))
        except BaseException:
            _free_set(got)
            raise
        return got

    def give(self, drv, skey, got) -> None:
        if got:
            with self.lock:
                self.idle.setdefault((drv, skey), []).append(got)

    def free_all(self) -> None:
        with self.lock:
            idle, self.idle = self.idle, {}
        for (drv, _), sets in idle.items():
            try:
                with drv.active():
                    for got in sets:
                        _free_set(got)
            except Exception:  # noqa: BLE001 - the driver may be shutting down already
                pass


def _free(dev) -> None:
    free = getattr(dev, "free", None)
    if free is not None:
        free()


def _free_set(got) -> None:
    for _, dev in got:
        if dev is not None:
            _free(dev)


def arrays_device(func, metas, pointer_device, device: Optional[int] = None,
                  why: str = "module.device") -> Optional[int]:
    """The ordinal of the GPU whose memory holds the call's device arrays (``metas``:
    each argument's :func:`~tecomp.runtime.argcheck.array_meta`; ``pointer_device``:
    the driver's ``ptr -> ordinal or None``), or None when no device array has elements.
    ArgumentError for an array in memory the driver does not know as a device's (host
    memory behind a forged ``__cuda_array_interface__``: the kernel would fault and the
    CUDA context be lost), for arrays on two GPUs, and, where ``device`` is given (the
    GPU the kernels run on; ``why`` says what sets it), for an array on another GPU."""
    found = None   # (ordinal, label of the first array there)
    for i, (p, meta) in enumerate(zip(func.params, metas)):
        if not isinstance(p, Buffer) or meta is None or not meta.on_device or 0 in meta.shape:
            continue   # (no elements: no memory; a 0-d array has one element)
        dev = pointer_device(meta.pointer)
        label = param_label(p.name, i)
        if dev is None:
            raise ArgumentError(
                f"{label} is an array in memory the CUDA driver does not know as device "
                f"memory; {func.name}'s kernels take device arrays: pass a CUDA tensor "
                f"(tensor.to('cuda'))")
        want = device if device is not None else (found[0] if found is not None else dev)
        if dev != want:
            if device is not None:
                fix = (f", or set module.device = {dev} (or None: the arrays' device)"
                       if why == "module.device" else "")
                raise ArgumentError(
                    f"{label} is an array in device {dev}, but {func.name}'s kernels run on "
                    f"device {want} ({why}): pass an array on cuda:{want} "
                    f"(tensor.to('cuda:{want}')){fix}")
            raise ArgumentError(
                f"{label} is an array in device {dev}, but {found[1]} is in device {want}: "
                f"the arrays of one call of {func.name} must live on one GPU; move them to "
                f"one device (tensor.to('cuda:{want}'))")
        if found is None:
            found = (dev, label)
    return found[0] if found is not None else None


def _check_device_launch(drv, fn, kern: KernelInfo, grid, block) -> None:
    """Check one launch against the device; ResourceLimitError (a BuildError) when the
    sizes are constants (the schedule must change), ArgumentError when they come from the
    arguments."""
    const_block = kern.constant_block is not None
    err = ResourceLimitError if const_block else ArgumentError
    where = f"{kern.name} (stage {kern.stage})"
    dims = "xyz"
    for i in range(3):
        if block[i] > drv.max_block_dims[i]:
            raise err(f"{where}: threadIdx.{dims[i]} has extent {block[i]}, more than the "
                      f"{drv.max_block_dims[i]} the device allows")
        if grid[i] > drv.max_grid_dims[i]:
            raise ArgumentError(f"{where}: blockIdx.{dims[i]} has extent {grid[i]}, more than the "
                                f"{drv.max_grid_dims[i]} the device allows")
    n = block[0] * block[1] * block[2]
    if n > drv.max_threads_per_block:
        raise err(f"{where}: {n} threads per block, more than the {drv.max_threads_per_block} "
                  f"the device allows; use smaller threadIdx extents")
    fmax = drv.function_max_threads(fn)
    if n > fmax:
        regs = ""
        if hasattr(drv, "function_registers"):
            regs = f" (it uses {drv.function_registers(fn)} registers per thread)"
        raise err(f"{where}: {n} threads per block, but the compiled kernel{regs} fits at most "
                  f"{fmax}; use smaller threadIdx extents or less work per thread")
    limit = drv.max_shared_per_block
    if kern.dynamic_shared:
        limit = getattr(drv, "max_shared_per_block_optin", limit)
    if kern.shared_bytes > limit:
        raise ResourceLimitError(f"{where}: {kern.shared_bytes} bytes of shared memory per "
                                 f"block, more than the {limit} the device allows; use "
                                 f"smaller tiles")
