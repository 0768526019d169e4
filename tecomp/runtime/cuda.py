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
import threading
from typing import Dict, List, Optional

import numpy as np

from .argcheck import (
    ArgChecker, array_meta, eval_host_expr, in_place_of, param_checks_of, param_label,
)
from .cuda_driver import foreign_stream_error, libcuda, pack_params, pointer_device
from .cuda_kernels import CudaSource, KernelInfo
from .nvcc import compile_cubin, compile_ptx
from ..target import MAX_STATIC_SHARED_BYTES
from ..target import tma as _tma
from ..lower.tma_pipeline import map_spec
from ..errors import ArgumentError, BuildError, ResourceLimitError, RuntimeUnavailableError
from ..ir.expr import Buffer
from .timing import Timed

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

    @contextlib.contextmanager
    def active(self):
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
        handle = self._cu_functions.get(key)
        if handle is None:
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
            self._cu_functions[key] = handle
        params, _values = pack_params(types, args)
        status = cu.cuLaunchKernel(handle, *[ctypes.c_uint(int(g)) for g in grid],
                                   *[ctypes.c_uint(int(b)) for b in block],
                                   ctypes.c_uint(shared), ctypes.c_void_p(stream), params, None)
        if status != 0:   # a stream of another GPU: say so
            err = foreign_stream_error(cu, stream, int(self.context.handle), self.ordinal,
                                       f"CUresult {status}")
            if err is not None:
                raise err
        _cu_check(status, "cuLaunchKernel")

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

    def _checked(self, args):
        """``(args, env, metas)``: the call's arguments checked (the same messages as on the
        CPU), aliasing and the source's host assertions included; ``env`` binds the
        symbolic extents, ``metas`` holds each argument's :func:`array_meta` (None for a
        scalar)."""
        cs, func = self.cuda_source, self.func
        args = self._checker.host_arrays(args)
        metas = [array_meta(a, p.name, i) if isinstance(p, Buffer) else None
                 for i, (p, a) in enumerate(zip(func.params, args))]
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
        arguments or intermediate buffers the call waits for the stream before it copies
        results back or frees them.  Without ``stream`` the call waits for the kernels."""
        self.driver()   # (no driver or no GPU: RuntimeUnavailableError before the arguments)
        cs, func = self.cuda_source, self.func
        handle = None if stream is None else stream_handle(stream)
        given = args
        args, env, metas = self._checked(args)
        drv = self._driver_for(metas)
        launches = self._launches(env)
        with drv.active():
            fns = self._kernel_functions(drv)
            for k, kern, grid, block in launches:
                key = (k, tuple(grid), tuple(block))
                if key not in self._launch_ok:  # (the same sizes pass again: once)
                    _check_device_launch(drv, fns[k], kern, grid, block)
                    self._launch_ok.add(key)
            pointers: Dict[Buffer, int] = {}
            temps, copy_back = [], []
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
                for w in cs.workspaces:
                    shape = [int(eval_host_expr(d, env)) for d in w.shape]
                    nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(w.dtype).itemsize
                    dev = drv.alloc(nbytes)
                    temps.append(dev)
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
                for k, kern, grid, block in launches:
                    types = "".join("P" if p.is_buffer else "T" if p.dtype == "tensor_map" else
                                    _STRUCT[p.dtype] for p in kern.params)
                    kargs = [pointers[p.obj] if p.is_buffer else
                             _gpu_map(p.obj, pointers[p.obj.src], env, drv)
                             if p.dtype == "tensor_map" else _PY_SCALAR[p.dtype](env[p.obj])
                             for p in kern.params]
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
                for t in temps:
                    free = getattr(t, "free", None)
                    if free is not None:
                        free()
        self._checker.mark_written(given)  # torch's version counters of the outputs

    def __repr__(self):
        return f"<CudaModule {self.func.name}: {len(self.kernels)} kernel(s)>"


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
