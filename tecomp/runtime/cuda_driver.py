"""The CUDA driver API through ctypes: what a GPU library ``tc.load_module`` loaded
launches its kernels with -- ``libcuda`` alone, no nvcc, no pycuda.

:func:`libcuda` is the one place the driver library comes from (``libcuda.so.1``, the
NVIDIA driver's; a test substitutes an object with the same functions).
:class:`DriverApi` is the driver the CUDA runtime's module classes call
(:class:`tecomp.runtime.cuda.PycudaDriver`'s methods) over it, on the primary context
of one device (the context PyTorch and CuPy use, so their arrays are valid in it): it
loads a fatbin (``cuModuleLoadData``), finds kernels (``cuModuleGetFunction``), reads
the device's limits (``cuDeviceGetAttribute``) and launches (``cuLaunchKernel``, the
arguments as an array of pointers to their values: :func:`pack_params`).

Every call passes ctypes objects (``c_uint``, ``c_uint64``, ``byref``), so that
``libcuda`` needs no prototypes and a stand-in receives exactly what the driver would.
"""
from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import struct
import threading
from typing import Dict, List, Optional, Sequence, Tuple

from ..errors import ArgumentError, RuntimeUnavailableError
from ..target import MAX_STATIC_SHARED_BYTES

__all__ = ["libcuda", "DriverApi", "Function", "driver", "foreign_stream_error",
           "pack_params", "pointer_device", "LIBCUDA_NAMES"]

#: the names the driver library is looked for under (the first is the driver's soname)
LIBCUDA_NAMES = ("libcuda.so.1", "libcuda.so")

# CUdevice_attribute
_ATTR = {"max_threads_per_block": 1, "block_x": 2, "block_y": 3, "block_z": 4, "grid_x": 5,
         "grid_y": 6, "grid_z": 7, "shared_per_block": 8, "major": 75, "minor": 76,
         "shared_optin": 97, "multiprocessors": 16}
# CUfunction_attribute
FUNC_MAX_THREADS, FUNC_NUM_REGS, FUNC_MAX_DYNAMIC_SHARED = 0, 4, 8
# CUpointer_attribute
POINTER_DEVICE_ORDINAL = 9
CUDA_ERROR_NO_BINARY_FOR_GPU = 209
CUDA_ERROR_INVALID_VALUE = 1
#: the stream handles that mean the current context's: legacy default, per-thread default
_SPECIAL_STREAMS = (0, 1, 2)
#: more parameters than any kernel can take (their bytes are limited to 32 KiB)
MAX_KERNEL_PARAMS = 8192

_LOCK = threading.Lock()
_LIB = None


def libcuda():
    """The CUDA driver library (``libcuda.so.1``), loaded once.

    Raises
    ------
    RuntimeUnavailableError
        Where there is no NVIDIA driver: names what was looked for.
    """
    global _LIB
    with _LOCK:
        if _LIB is None:
            errors = []
            names = list(LIBCUDA_NAMES)
            found = ctypes.util.find_library("cuda")
            if found and found not in names:
                names.append(found)
            for name in names:
                try:
                    lib = ctypes.CDLL(name)
                except OSError as exc:
                    errors.append(str(exc)[:200])
                    continue
                lib.cuLaunchKernel.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [
                    ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
                _LIB = lib
                break
            else:
                raise RuntimeUnavailableError(
                    f"no CUDA driver on this machine: the NVIDIA driver's library was looked "
                    f"for as {' and '.join(LIBCUDA_NAMES)} (and through ldconfig) and not "
                    f"found ({errors[0] if errors else 'no such library'}): run on a machine "
                    f"with an NVIDIA GPU and its driver, or add the directory of libcuda.so.1 "
                    f"to LD_LIBRARY_PATH")
        return _LIB


_CTYPE = {"P": ctypes.c_uint64, "b": ctypes.c_int8, "B": ctypes.c_uint8,
          "h": ctypes.c_int16, "i": ctypes.c_int32, "q": ctypes.c_int64,
          "?": ctypes.c_bool, "f": ctypes.c_float, "d": ctypes.c_double}


def pack_params(types: str, args: Sequence) -> Tuple[ctypes.Array, List]:
    """``cuLaunchKernel``'s ``kernelParams``: an array of pointers to each argument's
    value, typed by ``types`` (struct characters, ``P`` a device pointer, ``T`` a
    128-byte CUtensorMap given as bytes), and the values (keep them alive until the
    launch returns)."""
    values = [(ctypes.c_uint64 * 16).from_buffer_copy(a) if t == "T" else
              _CTYPE[t](int(a) if t == "P" else a) for t, a in zip(types, args)]
    params = (ctypes.c_void_p * max(1, len(values)))(
        *[ctypes.cast(ctypes.pointer(v), ctypes.c_void_p) for v in values])
    return params, values


def pointer_device(cu, ptr: int) -> Optional[int]:
    """The ordinal of the device whose memory ``ptr`` points into, as the driver library
    ``cu`` says (``cuPointerGetAttribute``); None where it does not know the address
    (host memory)."""
    v = ctypes.c_int()
    status = cu.cuPointerGetAttribute(ctypes.byref(v), ctypes.c_int(POINTER_DEVICE_ORDINAL),
                                      ctypes.c_uint64(ptr))
    return v.value if status == 0 else None


def foreign_stream_error(cu, stream: int, context: int, ordinal: int,
                         failure: str, who: Optional[str] = None) -> Optional[ArgumentError]:
    """After a launch on ``stream`` failed (``failure``: the driver's error): the
    ArgumentError to raise where the stream is not one of ``context`` (device
    ``ordinal``'s, where the kernels run; a torch stream of another GPU), as the driver
    library ``cu`` says (``cuStreamGetCtx``); None where it is, or cannot be told.
    ``who``: what gave the stream (default: the call's ``stream=``)."""
    if stream in _SPECIAL_STREAMS:
        return None
    ctx = ctypes.c_void_p()
    try:
        got = cu.cuStreamGetCtx(ctypes.c_void_p(stream), ctypes.byref(ctx))
    except AttributeError:   # a driver without it
        return None
    if got == 0 and ctx.value == context:
        return None
    why = ("it belongs to another context: a stream of another GPU" if got == 0 else
           f"the driver does not know it: CUresult {got}")
    if who is not None:
        return ArgumentError(
            f"{who} names stream {stream:#x}, which is not a stream of device {ordinal}, "
            f"where the kernels run ({why}; waiting for it failed with {failure}): make the "
            f"array on cuda:{ordinal} with a stream of that device current")
    return ArgumentError(
        f"stream={stream:#x} is not a stream of device {ordinal}, where the kernels run "
        f"({why}; the launch failed with {failure}): pass a stream of cuda:{ordinal} "
        f"(torch.cuda.current_stream({ordinal}))")


#: CU_EVENT_DISABLE_TIMING: an event only for ordering (cheaper to record)
_EVENT_DISABLE_TIMING = 2


def stream_wait(cu, producer: int, stream: Optional[int]) -> Tuple[int, str]:
    """Order the work queued next on ``stream`` (a CUstream handle; None: the call waits
    for its kernels, and the host waits for ``producer`` now, ``cuStreamSynchronize``)
    after the work queued so far on ``producer`` (the stream a device array's
    ``__cuda_array_interface__`` names, version 3): an event recorded on ``producer``
    that ``stream`` waits for, ``cuStreamWaitEvent``.  ``(0, "")``, or the failed
    status and the driver function that gave it.  Runs in the current context."""
    if stream is None:
        return cu.cuStreamSynchronize(ctypes.c_void_p(producer)), "cuStreamSynchronize"
    event = ctypes.c_void_p()
    status = cu.cuEventCreate(ctypes.byref(event), ctypes.c_uint(_EVENT_DISABLE_TIMING))
    if status != 0:
        return status, "cuEventCreate"
    try:
        status = cu.cuEventRecord(event, ctypes.c_void_p(producer))
        if status != 0:
            return status, "cuEventRecord"
        status = cu.cuStreamWaitEvent(ctypes.c_void_p(stream), event, ctypes.c_uint(0))
        return status, "cuStreamWaitEvent" if status else ""
    finally:   # (released by the driver once the wait is done)
        cu.cuEventDestroy_v2(event)


#: each parameter in an 8-byte slot of its own (struct format, little-endian)
_SLOT = {"P": "Q", "q": "q", "d": "d", "i": "i4x", "f": "f4x", "h": "h6x", "b": "b7x",
         "B": "B7x", "?": "?7x"}
#: the launch sizes a function keeps as ctypes values (beyond, it forgets them)
_MAX_DIMS = 32


#: a CUtensorMap's bytes, and the boundary its slot among the packed values starts on
_MAP_BYTES, _MAP_ALIGN = 128, 64


class _Packer:
    """``cuLaunchKernel``'s ``kernelParams`` for parameters of struct characters ``types``:
    the values packed into one buffer, 8 bytes each (a tensor map, ``T``, its 128 bytes
    on a 64-byte boundary), and an array of pointers to them (what :func:`pack_params`
    makes, with two ctypes objects a launch)."""

    __slots__ = ("struct", "offsets", "maps", "words", "pointers")

    def __init__(self, types: str):
        fmt, offsets, at = [], [], 0
        for t in types:
            pad = -at % (_MAP_ALIGN if t == "T" else 8)
            if pad:
                fmt.append(f"{pad}x")
                at += pad
            offsets.append(at)
            fmt.append(f"{_MAP_BYTES}s" if t == "T" else _SLOT[t])
            at += _MAP_BYTES if t == "T" else 8
        self.struct = struct.Struct("<" + "".join(fmt))
        self.offsets = tuple(offsets)
        self.maps = tuple(i for i, t in enumerate(types) if t == "T")
        # (with maps: room to start the values on a 64-byte boundary of the buffer)
        self.words = max(1, at // 8) + (_MAP_ALIGN // 8 if self.maps else 0)
        self.pointers = ctypes.c_void_p * max(1, len(types))

    def pack(self, types: str, args):
        values = [int(a) if t == "P" else a for t, a in zip(types, args)]
        for i in self.maps:   # (struct pads or cuts bytes of another length)
            if type(values[i]) is not bytes or len(values[i]) != _MAP_BYTES:
                raise struct.error("a tensor map is 128 bytes")
        buf = (ctypes.c_uint64 * self.words)()
        base = ctypes.addressof(buf)
        if self.maps:
            base += -base % _MAP_ALIGN
        self.struct.pack_into(buf, base - ctypes.addressof(buf), *values)
        return self.pointers(*[base + o for o in self.offsets]), buf


class Function:
    """A kernel of a loaded module: its CUfunction handle and name."""

    def __init__(self, handle: ctypes.c_void_p, name: str):
        self.handle = handle
        self.name = name
        self.dynamic_shared = 0     # the dynamic shared memory it was allowed so far
        self.packers: Dict[str, _Packer] = {}   # types -> its packer
        self.dims: Dict[tuple, tuple] = {}   # (grid, block, shared) -> ctypes values

    def launch(self, cu, grid, block, shared: int, types: str, args, stream: int) -> int:
        """``cuLaunchKernel`` of this function in driver library ``cu`` on CUstream
        ``stream`` (0: the legacy default stream); returns its CUresult."""
        packer = self.packers.get(types)
        if packer is None:
            packer = self.packers[types] = _Packer(types)
        try:
            params, _values = packer.pack(types, args)
        except (struct.error, OverflowError):
            # (a float past float32's range, a map of another length: ctypes' conversion
            # in pack_params says what is wrong)
            params, _values = pack_params(types, args)
        key = (tuple(grid), tuple(block), shared)
        dims = self.dims.get(key)
        if dims is None:
            if len(self.dims) >= _MAX_DIMS:
                self.dims.clear()
            dims = self.dims[key] = tuple(ctypes.c_uint(int(x)) for x in (*grid, *block, shared))
        return cu.cuLaunchKernel(self.handle, *dims, ctypes.c_void_p(stream), params, None)


class _DeviceMemory:
    """A ``cuMemAlloc`` allocation; ``int()`` is its address."""

    def __init__(self, drv: "DriverApi", nbytes: int):
        self.drv = drv
        self.ptr = ctypes.c_uint64()
        drv.check(drv.cu.cuMemAlloc_v2(ctypes.byref(self.ptr), ctypes.c_size_t(max(1, nbytes))),
                  "cuMemAlloc")

    def __int__(self) -> int:
        return int(self.ptr.value)

    def free(self) -> None:
        if self.ptr.value:
            self.drv.cu.cuMemFree_v2(self.ptr)
            self.ptr = ctypes.c_uint64()


class DriverApi:
    """The CUDA driver calls a GPU library makes, on device ``ordinal``'s primary context
    (see the module docstring); ``cu``: the driver library (:func:`libcuda`)."""

    def __init__(self, cu, ordinal: int = 0):
        self.cu = cu
        self.ordinal = ordinal
        status = cu.cuInit(ctypes.c_uint(0))
        if status != 0:
            raise RuntimeUnavailableError(
                f"no CUDA device: the CUDA driver did not start (cuInit returned "
                f"{self.error_name(status)}): check the GPU and its driver (nvidia-smi)")
        count = ctypes.c_int()
        self.check(cu.cuDeviceGetCount(ctypes.byref(count)), "cuDeviceGetCount")
        if count.value <= ordinal:
            raise RuntimeUnavailableError(
                f"no CUDA device: the driver sees {count.value} device(s), device {ordinal} "
                f"was asked for")
        self.device = ctypes.c_int()
        self.check(cu.cuDeviceGet(ctypes.byref(self.device), ctypes.c_int(ordinal)),
                   "cuDeviceGet")
        name = ctypes.create_string_buffer(256)
        self.check(cu.cuDeviceGetName(name, ctypes.c_int(256), self.device), "cuDeviceGetName")
        self.name = name.value.decode("utf-8", "replace")
        get = self._attribute
        self.compute_capability = (get("major"), get("minor"))
        self.max_threads_per_block = get("max_threads_per_block")
        self.max_block_dims = (get("block_x"), get("block_y"), get("block_z"))
        self.max_grid_dims = (get("grid_x"), get("grid_y"), get("grid_z"))
        self.max_shared_per_block = get("shared_per_block")
        self.max_shared_per_block_optin = get("shared_optin")
        self.multiprocessors = get("multiprocessors")
        self.context = ctypes.c_void_p()
        self.check(cu.cuDevicePrimaryCtxRetain(ctypes.byref(self.context), self.device),
                   "cuDevicePrimaryCtxRetain")

    @property
    def arch(self) -> str:
        return "sm_%d%d" % self.compute_capability

    def error_name(self, status: int) -> str:
        text = ctypes.c_char_p()
        try:
            if self.cu.cuGetErrorName(ctypes.c_int(status), ctypes.byref(text)) == 0 \
                    and text.value:
                return f"{text.value.decode('ascii', 'replace')} ({status})"
        except (AttributeError, TypeError):
            pass
        return f"CUresult {status}"

    def check(self, status: int, what: str) -> None:
        if status != 0:
            raise RuntimeUnavailableError(
                f"the CUDA driver's {what} failed with {self.error_name(status)} on device "
                f"{self.ordinal}")

    def _attribute(self, key: str) -> int:
        v = ctypes.c_int()
        self.check(self.cu.cuDeviceGetAttribute(ctypes.byref(v), ctypes.c_int(_ATTR[key]),
                                                self.device), "cuDeviceGetAttribute")
        return v.value

    def active(self):
        """A context manager making this device's context current inside: nothing to do
        where it is current already (the thread of a PyTorch or CuPy user), else pushed
        and popped."""
        current = ctypes.c_void_p()
        try:
            status = self.cu.cuCtxGetCurrent(ctypes.byref(current))
        except AttributeError:   # (a stand-in without it)
            status = -1
        if status == 0 and current.value == self.context.value:
            return _ALREADY_CURRENT
        return self._pushed()

    @contextlib.contextmanager
    def _pushed(self):
        self.check(self.cu.cuCtxPushCurrent_v2(self.context), "cuCtxPushCurrent")
        try:
            yield
        finally:
            self.cu.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))

    def load_module(self, image: bytes) -> Tuple[ctypes.c_void_p, int]:
        """``(module, status)``: the CUmodule of a fatbin or cubin (the driver picks the
        code for the device, or compiles its PTX) and ``cuModuleLoadData``'s CUresult."""
        module = ctypes.c_void_p()
        # a copy in memory of ctypes' own (malloc-aligned), as the driver reads it
        data = (ctypes.c_char * len(image)).from_buffer_copy(image)
        status = self.cu.cuModuleLoadData(ctypes.byref(module), data)
        return module, status

    def get_function(self, module, name: str) -> Function:
        handle = ctypes.c_void_p()
        self.check(self.cu.cuModuleGetFunction(ctypes.byref(handle), module, name.encode()),
                   f"cuModuleGetFunction({name})")
        return Function(handle, name)

    def param_sizes(self, fn: Function) -> Optional[List[int]]:
        """The sizes in bytes of ``fn``'s parameters as its code declares them
        (``cuFuncGetParamInfo``, CUDA 12.4); None where the driver cannot say."""
        try:
            info = self.cu.cuFuncGetParamInfo
        except AttributeError:  # an older driver
            return None
        sizes: List[int] = []
        offset, size = ctypes.c_size_t(), ctypes.c_size_t()
        while len(sizes) <= MAX_KERNEL_PARAMS:
            status = info(fn.handle, ctypes.c_size_t(len(sizes)), ctypes.byref(offset),
                          ctypes.byref(size))
            if status == CUDA_ERROR_INVALID_VALUE:  # past the last parameter
                return sizes
            if status != 0:
                return None
            sizes.append(size.value)
        return None

    def _function_attribute(self, fn: Function, attr: int) -> int:
        v = ctypes.c_int()
        self.check(self.cu.cuFuncGetAttribute(ctypes.byref(v), ctypes.c_int(attr), fn.handle),
                   "cuFuncGetAttribute")
        return v.value

    def function_max_threads(self, fn: Function) -> int:
        return self._function_attribute(fn, FUNC_MAX_THREADS)

    def function_registers(self, fn: Function) -> int:
        return self._function_attribute(fn, FUNC_NUM_REGS)

    def pointer_device(self, ptr: int) -> Optional[int]:
        """The ordinal of the device whose memory ``ptr`` points into; None where the
        driver does not know the address (host memory)."""
        return pointer_device(self.cu, ptr)

    def alloc(self, nbytes: int) -> _DeviceMemory:
        return _DeviceMemory(self, nbytes)

    def htod(self, ptr, host) -> None:
        if host.nbytes:
            self.check(self.cu.cuMemcpyHtoD_v2(ctypes.c_uint64(int(ptr)),
                                               ctypes.c_void_p(host.ctypes.data),
                                               ctypes.c_size_t(host.nbytes)), "cuMemcpyHtoD")

    def dtoh(self, host, ptr) -> None:
        if host.nbytes:
            self.check(self.cu.cuMemcpyDtoH_v2(ctypes.c_void_p(host.ctypes.data),
                                               ctypes.c_uint64(int(ptr)),
                                               ctypes.c_size_t(host.nbytes)), "cuMemcpyDtoH")

    def launch(self, fn: Function, grid, block, shared: int, types: str, args,
               stream: Optional[int] = None) -> None:
        """``cuLaunchKernel``; ``stream`` a CUstream handle (None or 0: the legacy default
        stream)."""
        if shared > MAX_STATIC_SHARED_BYTES and fn.dynamic_shared < shared:
            self.check(self.cu.cuFuncSetAttribute(fn.handle,
                                                  ctypes.c_int(FUNC_MAX_DYNAMIC_SHARED),
                                                  ctypes.c_int(shared)), "cuFuncSetAttribute")
            fn.dynamic_shared = shared
        status = fn.launch(self.cu, grid, block, shared, types, args, stream or 0)
        if status != 0 and stream:
            self._check_stream(stream, status)
        if status:
            self.check(status, f"cuLaunchKernel({fn.name})")

    def _check_stream(self, stream: int, status: int) -> None:
        err = foreign_stream_error(self.cu, stream, self.context.value, self.ordinal,
                                   self.error_name(status))
        if err is not None:
            raise err

    def wait_stream(self, producer: int, stream: Optional[int], who: str) -> None:
        """Make the work queued next on ``stream`` (None: the host) wait for ``producer``'s
        (:func:`stream_wait`); ``who`` names the array whose interface gave it."""
        status, what = stream_wait(self.cu, producer, stream)
        if status != 0:
            err = foreign_stream_error(self.cu, producer, self.context.value, self.ordinal,
                                       self.error_name(status), who)
            if err is not None:
                raise err
            self.check(status, what)

    def synchronize(self, stream: Optional[int] = None) -> None:
        if stream is None:
            self.check(self.cu.cuCtxSynchronize(), "cuCtxSynchronize")
        else:
            self.check(self.cu.cuStreamSynchronize(ctypes.c_void_p(stream)),
                       "cuStreamSynchronize")


_ALREADY_CURRENT = contextlib.nullcontext()

_DRIVERS: Dict[Tuple[int, int], DriverApi] = {}


def driver(ordinal: int = 0) -> DriverApi:
    """The process's :class:`DriverApi` of device ``ordinal`` over :func:`libcuda` (made
    once per driver library and device)."""
    cu = libcuda()
    key = (id(cu), ordinal)
    with _LOCK:
        drv = _DRIVERS.get(key)
        if drv is None or drv.cu is not cu:
            drv = _DRIVERS[key] = DriverApi(cu, ordinal)
        return drv
