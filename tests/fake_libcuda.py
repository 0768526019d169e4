"""A stand-in for the CUDA driver library (``libcuda``) that runs kernels in tecomp's CUDA
emulation, for the GPU-library tests (tests/test_cuda_library.py and the must-fail
ones): it receives the very ctypes objects :mod:`tecomp.runtime.cuda_driver` passes to
the driver, records each ``cuLaunchKernel`` (grid, block, shared bytes, the argument
buffer decoded) and runs the kernel on host memory ("device memory" is host memory:
:class:`DeviceArray`s are registered with it)."""
import ctypes

import numpy as np

import tecomp as tc
from tecomp.codegen.cuda_emu import compile_emu_library
from tecomp.runtime import cuda_driver
from tecomp.runtime.fatbin import read_fatbin
from tecomp.errors import LoadError
from tecomp.ir.dtype import compute_dtype


def _out(ref, value):
    """Store ``value`` through a ``ctypes.byref`` argument."""
    ref._obj.value = value


class DeviceArray:
    """Host memory behind ``__cuda_array_interface__`` (a stand-in for a CUDA tensor)."""

    def __init__(self, arr, readonly=False):
        self.arr = arr
        self.readonly = readonly

    @property
    def __cuda_array_interface__(self):
        a = self.arr
        return {"shape": a.shape, "typestr": a.dtype.str, "data": (a.ctypes.data, self.readonly),
                "strides": None if a.flags.c_contiguous else a.strides, "version": 3}


class FakeLibcuda:
    """The driver functions :class:`~tecomp.runtime.cuda_driver.DriverApi` calls.

    ``cs``: the CudaSource of the exported module (the emulation runs its kernels);
    ``capability``: the device's compute capability; ``load_status``: what
    cuModuleLoadData returns; ``device_of``: the device ordinal a pointer is in (None:
    unknown memory); ``devices``: how many GPUs it has (each launch records the device
    whose context is current); ``streams`` (set after): the device each stream handle was
    made on (a launch on another device's stream fails, as the driver's does)."""

    def __init__(self, cs, capability=(9, 0), load_status=0, device_of=lambda ptr: 0,
                 devices=1):
        self.devices = devices
        self.current = []       # the stack of current contexts (device ordinals)
        self.cs = cs
        self.capability = capability
        self.load_status = load_status
        self.device_of = device_of
        self.launches = []      # (name, grid, block, shared, stream, [argument values])
        self.images = []        # what cuModuleLoadData was given
        self.loaded_on = []     # the device current at each cuModuleLoadData
        self.launched_on = []   # the device current at each launch
        self.allocs = {}
        self.calls = []
        self.streams = {}       # stream handle -> the device ordinal it was made on
        #: in order: ("wait", stream, producer) for a stream made to wait for an event
        #: recorded on producer, ("sync", stream), ("launch", stream)
        self.stream_log = []
        self._events = {}       # live event handle -> the stream it was recorded on
        self._emu = None

    def __getattr__(self, name):   # a driver function tecomp should not call
        raise AttributeError(f"the fake libcuda has no {name}")

    def cuInit(self, flags):
        self.calls.append("cuInit")
        return 0

    def cuDeviceGetCount(self, count):
        _out(count, self.devices)
        return 0

    def cuDeviceGet(self, dev, ordinal):
        _out(dev, ordinal.value)
        return 0

    def cuDeviceGetName(self, buf, n, dev):
        buf.value = b"Fake GPU (emulated)"
        return 0

    def cuDeviceGetAttribute(self, value, attr, dev):
        table = {1: 1024, 2: 1024, 3: 1024, 4: 64, 5: 2**31 - 1, 6: 65535, 7: 65535,
                 8: 48 * 1024, 16: 132, 75: self.capability[0], 76: self.capability[1],
                 97: 227 * 1024}
        _out(value, table[attr.value])
        return 0

    def cuDevicePrimaryCtxRetain(self, ctx, dev):
        _out(ctx, 0x1000 + dev.value)
        return 0

    def cuCtxPushCurrent_v2(self, ctx):
        self.current.append(ctx.value - 0x1000)
        return 0

    def cuCtxGetCurrent(self, ctx):
        _out(ctx, 0x1000 + self.current[-1] if self.current else None)
        return 0

    def cuCtxPopCurrent_v2(self, ctx):
        self.current.pop()
        return 0

    def cuGetErrorName(self, status, text):
        return 1

    def cuModuleLoadData(self, module, image):
        # the image must be the fatbin itself
        read_fatbin(bytes(image), "the image given to cuModuleLoadData", LoadError)
        self.images.append(bytes(image))
        self.loaded_on.append(self.current[-1] if self.current else None)
        if self.load_status:
            return self.load_status
        self._emu = compile_emu_library(self.cs)
        _out(module, 0x2000)
        return 0

    def cuModuleGetFunction(self, fn, module, name):
        names = [k.name for k in self.cs.kernels]
        if name.decode() not in names:
            return 500  # CUDA_ERROR_NOT_FOUND
        _out(fn, 0x3000 + names.index(name.decode()))
        return 0

    def cuFuncGetParamInfo(self, fn, index, offset, size):
        """The parameters of the kernel's code (the CudaSource's, whatever a library's
        metadata says): 8-byte pointers, 128-byte tensor maps and scalars of their C
        type's size (a float16 scalar is a float)."""
        params = self.cs.kernels[fn.value - 0x3000].params
        if index.value >= len(params):
            return 1  # CUDA_ERROR_INVALID_VALUE
        sizes = [8 if p.is_buffer else 128 if p.dtype == "tensor_map" else
                 np.dtype(compute_dtype(p.dtype)).itemsize for p in params]
        _out(offset, sum(sizes[:index.value]))
        _out(size, sizes[index.value])
        return 0

    def cuFuncSetAttribute(self, fn, attr, value):
        """(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 8: a kernel of more than 48 KiB
        of shared memory)"""
        self.calls.append(("cuFuncSetAttribute", attr.value, value.value))
        return 0 if attr.value == 8 and value.value <= 227 * 1024 else 1

    def cuFuncGetAttribute(self, value, attr, fn):
        _out(value, {0: 1024, 4: 32}[attr.value])
        return 0

    def cuPointerGetAttribute(self, value, attr, ptr):
        dev = self.device_of(ptr.value)
        if dev is None:
            return 1
        _out(value, dev)
        return 0

    def cuMemAlloc_v2(self, ptr, nbytes):
        buf = np.zeros(nbytes.value + 256, np.uint8)
        addr = buf.ctypes.data + (-buf.ctypes.data % 256)
        self.allocs[addr] = buf
        _out(ptr, addr)
        return 0

    def cuMemFree_v2(self, ptr):
        self.allocs.pop(ptr.value)
        return 0

    def cuStreamGetCtx(self, stream, ctx):
        if stream.value not in self.streams:
            return 400   # CUDA_ERROR_INVALID_HANDLE
        _out(ctx, 0x1000 + self.streams[stream.value])
        return 0

    def _foreign(self, stream) -> bool:
        on = self.streams.get(stream or 0)
        return on is not None and bool(self.current) and on != self.current[-1]

    def cuEventCreate(self, event, flags):
        handle = 0x7000 + len(self.stream_log) + len(self._events)
        while handle in self._events:
            handle += 1
        self._events[handle] = None
        _out(event, handle)
        return 0

    def cuEventRecord(self, event, stream):
        if self._foreign(stream.value):
            return 400   # a stream of another context: CUDA_ERROR_INVALID_HANDLE
        self._events[event.value] = stream.value or 0
        return 0

    def cuStreamWaitEvent(self, stream, event, flags):
        if self._foreign(stream.value):
            return 400
        self.stream_log.append(("wait", stream.value or 0, self._events[event.value]))
        return 0

    def cuEventDestroy_v2(self, event):
        self._events.pop(event.value)
        return 0

    def cuLaunchKernel(self, fn, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        if self._foreign(stream.value):
            return 400   # a stream of another context: CUDA_ERROR_INVALID_HANDLE
        self.stream_log.append(("launch", stream.value or 0))
        k = fn.value - 0x3000
        kern = self.cs.kernels[k]
        values = []
        for i, p in enumerate(kern.params):
            if p.dtype == "tensor_map":   # the CUtensorMap's 128 bytes (the driver copies
                # them to where the kernel declares the parameter, 64-byte aligned)
                values.append(ctypes.string_at(ctypes.cast(params[i], ctypes.c_void_p).value,
                                               128))
                continue
            t = ctypes.c_uint64 if p.is_buffer else {
                "int32": ctypes.c_int32, "int64": ctypes.c_int64,
                "float32": ctypes.c_float, "float64": ctypes.c_double}[p.dtype]
            values.append(ctypes.cast(params[i], ctypes.POINTER(t)).contents.value)
        grid, block = (gx.value, gy.value, gz.value), (bx.value, by.value, bz.value)
        self.launches.append((kern.name, grid, block, shared.value, stream.value or 0, values))
        self.launched_on.append(self.current[-1] if self.current else None)
        self._emu.launch(k, values, list(grid), list(block), "serial")
        return 0

    def cuTensorMapEncodeTiled(self, out, dtype, rank, address, dims, strides, box, estrides,
                               interleave, swizzle, l2, oob):
        """Records the arguments and writes the map in the CUDA emulation's layout (so that
        a kernel run by the emulation can copy through it)."""
        from tecomp.target import tma
        r = rank.value
        rec = {"dtype": dtype.value, "rank": r, "address": address.value,
               "map_aligned_64": out.value % 64 == 0, "dims": list(dims)[:r],
               "strides": list(strides)[:r - 1], "box": list(box)[:r],
               "elem_strides": list(estrides)[:r], "interleave": interleave.value,
               "swizzle": swizzle.value, "l2_promotion": l2.value, "oob_fill": oob.value}
        self.calls.append(("cuTensorMapEncodeTiled", rec))
        name = {v: k for k, v in reversed(list(tma.DATA_TYPES.items()))}[rec["dtype"]]
        spec = tma.TensorMapSpec(name, tuple(rec["dims"]), tuple(rec["strides"]),
                                 tuple(rec["box"]), tuple(rec["elem_strides"]),
                                 {v: k for k, v in tma.SWIZZLES.items()}[rec["swizzle"]])
        ctypes.memmove(out.value, tma.emu_bytes(spec, rec["address"]), tma.MAP_BYTES)
        return 0

    def cuCtxSynchronize(self):
        self.calls.append("cuCtxSynchronize")
        return 0

    def cuStreamSynchronize(self, stream):
        if self._foreign(stream.value):
            return 400
        self.stream_log.append(("sync", stream.value or 0))
        return 0


def load_with_fake(path, cs, monkeypatch, **kw):
    """``(module, fake)``: the GPU library ``path`` loaded, its driver a FakeLibcuda of
    ``cs`` (keywords: FakeLibcuda's) for the rest of the test."""
    fake = FakeLibcuda(cs, **kw)
    monkeypatch.setattr(cuda_driver, "libcuda", lambda: fake)
    return tc.load_module(path), fake


def one_axis_module(name: str, fn, threads: int):
    """``B[i] = fn(A[i])`` over a symbolic ``n``, built for ``cuda``: ``threads`` threads
    per block, ``(n + threads - 1) // threads`` blocks (the GPU-library tests' kernel)."""
    n = tc.var("n")
    A = tc.placeholder((n,), name="A")
    B = tc.compute((n,), lambda i: fn(A[i]), name="B")
    s = tc.create_schedule(B.op)
    bx, tx = s[B].split(B.op.axis[0], factor=threads)
    s[B].bind(bx, tc.thread_axis("blockIdx.x"))
    s[B].bind(tx, tc.thread_axis("threadIdx.x"))
    return tc.build(s, [A, B], target="cuda", name=name)
