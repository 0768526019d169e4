"""The ``device_array`` edge family's machinery: device arrays that lie, passed to a
``cuda`` module whose driver is a stand-in.

A GPU runtime reads a device array only through its ``__cuda_array_interface__``: the
dict is the producer's word, and a careless or hostile producer gives a dict that is
malformed (a key missing, a shape of floats, a typestr numpy does not read, data that is
no pair), that masks elements, whose pointer is null, negative, a float, past the
address space or not aligned to the elements, that is read-only or overlaps itself for
an output, overlaps another argument, or lives in host memory or on another GPU; or an
object whose property raises, or describes another array on every read.  Each of those
must be refused with an ``ArgumentError`` before anything is launched; an honest device
array (also one of an older interface version, a view a few elements into its
allocation, one given with explicit C-contiguous strides, the same array in place of an
elementwise input, one whose version-3 ``stream`` names its producer's stream, which the
call waits for before its first launch) must give numpy's values; a ``stream`` of 0 or
one that is no integer is refused too.

:class:`StandInDriver` is the driver interface of :mod:`tecomp.runtime.cuda` over host
memory ("device memory" is host memory, a launch runs the kernel in the CUDA emulation),
and knows which "device" each address is on.
"""
from __future__ import annotations

import contextlib
import ctypes
from typing import Dict, Optional

import numpy as np

import tecomp as tc
from ..ir import dtype as _dt
from ..codegen.cuda import build_cuda
from ..codegen.cuda_emu import compile_emu_library
from ..strategy import cuda as nn_cuda

#: the forgeries the family draws, with what the call must do: "ok" (numpy's values) or
#: "refused" (an ArgumentError), and the argument they apply to ("A": the input, "B":
#: the output, "either")
FORGERIES = {
    # honest arrays
    "honest": ("ok", "either"), "in_place": ("ok", "B"), "offset_view": ("ok", "either"),
    "strides_given": ("ok", "either"), "old_version": ("ok", "either"),
    "shape_attribute_lies": ("ok", "either"), "other_each_read": ("ok", "either"),
    "producer_stream": ("ok", "either"),
    # malformed dicts
    "missing_key": ("refused", "either"), "typestr_none": ("refused", "either"),
    "typestr_garbage": ("refused", "either"), "float_shape": ("refused", "either"),
    "negative_shape": ("refused", "either"), "strides_rank": ("refused", "either"),
    "data_not_pair": ("refused", "either"), "mask": ("refused", "either"),
    "raising": ("refused", "either"), "big_endian": ("refused", "either"),
    "bad_stream": ("refused", "either"),
    # pointers no kernel may use
    "null_pointer": ("refused", "either"), "negative_pointer": ("refused", "either"),
    "float_pointer": ("refused", "either"), "misaligned_pointer": ("refused", "either"),
    "past_address_space": ("refused", "either"),
    # memory the kernel's GPU does not hold
    "host_memory": ("refused", "either"), "other_device": ("refused", "either"),
    # outputs no kernel may write
    "stride0_output": ("refused", "B"), "overlap_output": ("refused", "B"),
    "readonly_output": ("refused", "B"),
}


class StandInDriver:
    """The driver interface of :class:`tecomp.runtime.cuda.PycudaDriver` over host memory:
    a launch runs the kernel in the CUDA emulation.  ``device_of``: the device ordinal of
    each address (absent: device 0; None: memory the driver does not know)."""

    name = "stand-in device (the CUDA emulation)"
    compute_capability = (8, 0)
    arch = "sm_80"
    ordinal = 0
    max_threads_per_block = 1024
    max_block_dims = (1024, 1024, 64)
    max_grid_dims = (2**31 - 1, 65535, 65535)
    max_shared_per_block = 48 * 1024
    max_shared_per_block_optin = 227 * 1024

    def __init__(self):
        self.device_of: Dict[int, Optional[int]] = {}
        self.launches = 0
        #: in order: ("wait", stream, producer) for the launch stream (None: the host)
        #: made to wait for a producer's stream, ("launch", stream)
        self.stream_log = []
        self._keep = []

    def pointer_device(self, ptr: int) -> Optional[int]:
        return self.device_of.get(ptr, 0)

    @contextlib.contextmanager
    def active(self):
        yield

    def compile(self, cs, arch=None):
        return compile_emu_library(cs)

    def get_function(self, lib, name):
        return lib, [k.name for k in lib.source.kernels].index(name)

    def function_max_threads(self, fn):
        return 1024

    def alloc(self, nbytes):
        buf = np.zeros(max(1, nbytes) + 256, np.uint8)
        self._keep.append(buf)
        return buf.ctypes.data + (-buf.ctypes.data % 256)

    def htod(self, ptr, host):
        ctypes.memmove(int(ptr), host.ctypes.data, host.nbytes)

    def dtoh(self, host, ptr):
        ctypes.memmove(host.ctypes.data, int(ptr), host.nbytes)

    def wait_stream(self, producer, stream, who):
        self.stream_log.append(("wait", stream, producer))

    def launch(self, fn, grid, block, shared, types_, args, stream=None):
        lib, k = fn
        self.launches += 1
        self.stream_log.append(("launch", stream))
        lib.launch(k, [int(a) if t == "P" else a for t, a in zip(types_, args)], grid, block,
                   "serial")

    def synchronize(self, stream=None):
        pass


class DeviceStandIn:
    """Host memory ``arr`` behind a ``__cuda_array_interface__`` whose entries ``change``
    replaces (``...``: the entry removed); ``raising``: the property raises instead;
    ``then``: the description of every read after the first (counted in ``reads``)."""

    def __init__(self, arr: np.ndarray, change: Optional[dict] = None, raising: bool = False,
                 then: Optional[dict] = None, shape=None):
        self.arr = arr
        self.change = change or {}
        self.raising = raising
        self.then = then
        self.reads = 0
        if shape is not None:
            self.shape = shape      # an attribute that disagrees with the interface

    @property
    def dtype(self) -> str:
        """The array's dtype as torch names it: a bfloat16 array's interface says only
        ``<V2`` (numpy has no bfloat16), and its dtype tells it apart."""
        return f"torch.{self.arr.dtype.name}"

    @property
    def __cuda_array_interface__(self):
        self.reads += 1
        if self.raising:
            raise RuntimeError("the producer's stream was destroyed")
        a = self.arr
        cai = {"shape": a.shape, "typestr": a.dtype.str, "data": (a.ctypes.data, False),
               "strides": None if a.flags.c_contiguous else a.strides, "version": 3}
        for k, v in {**self.change, **(self.then if self.reads > 1 and self.then else {})}.items():
            if v is ...:
                cai.pop(k, None)
            else:
                cai[k] = v
        return cai


_MODULES: Dict[tuple, object] = {}


def elementwise_module(two_d: bool, dtype: str, driver: StandInDriver):
    """``B = A * 2 + 1`` over ``(n,)`` or ``(n, 5)`` of ``dtype``, scheduled for the GPU
    (tecomp's injective schedule), its driver ``driver``."""
    key = (two_d, dtype)
    func = _MODULES.get(key)
    if func is None:
        n = tc.var("n")
        A = tc.placeholder((n, 5) if two_d else (n,), dtype=dtype, name="A")
        B = tc.compute(A.shape, lambda *i: A(*i) * tc.const(2, dtype) + tc.const(1, dtype),
                       name="B")
        func = _MODULES[key] = tc.lower(nn_cuda.schedule_injective(B, "cuda"), [A, B],
                                        target="cuda")
    return build_cuda(func, driver=driver)


def forged_call(tw: dict):
    """``(module, args, want, expect, arrays)`` of a drawn ``device_array`` twist:
    the module, the call's arguments, the output numpy must give (None: refused),
    ``"ok"`` or ``"refused"``, and the stand-ins (their reads counted)."""
    forgery, which = tw["forgery"], tw["arg"]
    expect, applies = FORGERIES[forgery]
    if applies != "either":
        which = applies
    dt = np.dtype(_dt.numpy_dtype(tw["dtype"]))
    shape = (tw["rows"], 5) if tw["two_d"] else (tw["rows"],)
    size = int(np.prod(shape))
    rng = np.random.default_rng(tw["rows"])
    drv = StandInDriver()
    mod = elementwise_module(tw["two_d"], tw["dtype"], drv)
    # each array inside a buffer of its own with room before and after it
    pad = 16
    abuf = np.zeros(size + 2 * pad, dt)
    bbuf = np.zeros(size + 2 * pad, dt)
    a = abuf[pad:pad + size].reshape(shape)
    b = bbuf[pad:pad + size].reshape(shape)
    a[...] = rng.integers(-8, 8, size=shape).astype(dt)
    want = a.astype(dt) * dt.type(2) + dt.type(1)
    arrs = {"A": a, "B": b}
    change: dict = {}
    kw: dict = {}
    target = arrs[which]
    item = dt.itemsize
    if forgery == "in_place":
        b = a                                   # the same array for A and B
        arrs["B"] = b
        target = b
    elif forgery == "offset_view":
        k = tw["offset"]                        # a view k elements into its buffer
        buf = abuf if which == "A" else bbuf
        view = buf[pad - k:pad - k + size].reshape(shape)
        view[...] = target
        arrs[which] = target = view
        if which == "A":
            a = view
    elif forgery == "strides_given":
        change = {"strides": target.strides}
    elif forgery == "old_version":
        change = {"version": tw["version"]} if tw["version"] is not None else {"version": ...}
        if tw["version"] in (0, 1, None):
            change["strides"] = ...             # (strides were optional before version 2)
    elif forgery == "shape_attribute_lies":
        kw["shape"] = tuple(x + 1 for x in shape)
    elif forgery == "other_each_read":
        kw["then"] = {"shape": (size * 1000,), "data": (0, False)}
    elif forgery == "missing_key":
        change = {tw["key"]: ...}
    elif forgery == "typestr_none":
        change = {"typestr": None}
    elif forgery == "typestr_garbage":
        change = {"typestr": tw["garbage"]}
    elif forgery == "float_shape":
        change = {"shape": tuple(float(x) for x in shape)}
    elif forgery == "negative_shape":
        change = {"shape": tuple(-x for x in shape)}
    elif forgery == "strides_rank":
        change = {"strides": target.strides + (item,)}
    elif forgery == "data_not_pair":
        change = {"data": tw["data"] if tw["data"] != "triple" else
                  (target.ctypes.data, False, 0)}
    elif forgery == "mask":
        change = {"mask": DeviceStandIn(np.ones(shape, bool))}
    elif forgery == "raising":
        kw["raising"] = True
    elif forgery == "big_endian":
        # (a one-byte type, or bfloat16's void "<V2", has no byte order: a two-byte
        # big-endian integer instead)
        change = {"typestr": dt.newbyteorder(">").str if item > 1 and dt.kind != "V"
                  else ">i2"}
    elif forgery == "null_pointer":
        change = {"data": (0, False)}
    elif forgery == "negative_pointer":
        change = {"data": (-target.ctypes.data, False)}
    elif forgery == "float_pointer":
        change = {"data": (float(target.ctypes.data), False)}
    elif forgery == "misaligned_pointer":
        if item == 1:
            return forged_call({**tw, "forgery": "past_address_space"})
        change = {"data": (target.ctypes.data + tw["offset"] % (item - 1) + 1, False)}
    elif forgery == "past_address_space":
        change = {"data": (2**64 - item * tw["offset"], False)}
    elif forgery == "host_memory":
        drv.device_of[target.ctypes.data] = None
    elif forgery == "other_device":
        drv.device_of[target.ctypes.data] = 1
    elif forgery == "stride0_output":
        change = {"strides": (0,) * len(shape)}
    elif forgery == "overlap_output":
        k = 1 + tw["offset"] % (size - 1)       # (rows >= 2: a shift of 1 to size - 1)
        arrs["B"] = target = abuf[pad + k:pad + k + size].reshape(shape)
    elif forgery == "producer_stream":        # (version 3: the call must wait for it)
        change = {"stream": tw["stream"]}
    elif forgery == "bad_stream":             # (0 is disallowed; the rest is no stream)
        change = {"stream": tw["bad_stream"]}
    elif forgery == "readonly_output":
        change = {"data": (target.ctypes.data, True)}
    stand = {name: DeviceStandIn(arr) for name, arr in arrs.items()}
    stand[which] = DeviceStandIn(arrs[which], change, **kw)
    if forgery == "in_place":
        stand["B"] = stand["A"]
    args = [stand["A"], stand["B"]]
    return mod, args, (want if expect == "ok" else None), expect, \
        (arrs["B"] if forgery != "in_place" else a), drv
