"""Device arrays that lie: forged or malformed ``__cuda_array_interface__`` dicts, and
arrays in memory the kernels' GPU does not hold, refused before anything is launched.

Before these checks, a dict without ``shape``, ``typestr`` or ``data`` (or with a
property that raised) crashed the call with a bare KeyError or ValueError; a ``typestr``
of None read as float64; a null, negative or float pointer, or one not aligned to the
elements, reached the kernel (a segfault in the emulation, a misaligned or illegal
address on a GPU, which loses the CUDA context); a ``mask`` was ignored; strides of the
wrong length were cut to the shape's; a 0-d array skipped the GPU library's device check;
and the pycuda runtime never asked where an array lives.  The driver is a stand-in: the
checks run before it is used."""
import os
import sys

import numpy as np
import pytest

import tecomp as tc
from tecomp.codegen.cuda import build_cuda

sys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))
from cuda_examples import vector_add  # noqa: E402
from fake_libcuda import DeviceArray  # noqa: E402


class NoLaunchDriver:
    """A driver that is never asked to launch: the calls below are refused first.
    ``where``: the device ordinal of each address (missing: device 0)."""

    name = "stand-in device"
    ordinal = 0

    def __init__(self, where=None):
        self.where = where or {}

    def pointer_device(self, ptr):
        return self.where.get(ptr, 0)

    def compile(self, cs, arch=None):
        raise AssertionError("the call should have been refused before compiling")


class Forged(DeviceArray):
    """A DeviceArray whose ``__cuda_array_interface__`` has the entries of ``change``
    (``...``: the entry removed)."""

    def __init__(self, arr, **change):
        super().__init__(arr)
        self.change = change

    @property
    def __cuda_array_interface__(self):
        cai = dict(super().__cuda_array_interface__)
        for k, v in self.change.items():
            if v is ...:
                cai.pop(k, None)
            else:
                cai[k] = v
        return cai


def vector_add_module(where=None):
    return build_cuda(vector_add().func, driver=NoLaunchDriver(where))


def arrays(n=64):
    return np.ones(n, "float32"), np.ones(n, "float32"), np.zeros(n, "float32")


@pytest.mark.parametrize("change, match", [
    ({"shape": ...}, r"parameter A \(argument 1\): its __cuda_array_interface__ has no "
                     r"'shape'; tecomp reads a device array through its "
                     r"__cuda_array_interface__"),
    ({"data": None}, r"parameter A \(argument 1\): its data None is not a pair \(pointer, "
                     r"read-only flag\)"),
    ({"typestr": None}, r"parameter A \(argument 1\): its typestr None is not a numpy type "
                        r"string \(such as '<f4'\)"),
    ({"typestr": "zz9"}, r"its typestr 'zz9' is not a numpy type string"),
    ({"shape": (64.5,)}, r"its shape \(64.5,\) is not a tuple of integers >= 0"),
    ({"shape": (-5,)}, r"its shape \(-5,\) is not a tuple of integers >= 0"),
    ({"strides": (4, 4)}, r"its strides \(4, 4\) are not a tuple of 1 integers \(one per "
                          r"dimension of shape \(64,\)\) or None \(C-contiguous\)"),
], ids=["no shape", "data None", "typestr None", "typestr garbage", "float shape",
        "negative shape", "strides of another rank"])
def test_malformed_cuda_array_interface(change, match):
    a, b, c = arrays()
    with pytest.raises(tc.ArgumentError, match=match):
        vector_add_module()(Forged(a, **change), DeviceArray(b), DeviceArray(c))


def test_cuda_array_interface_that_raises():
    class Raising:
        @property
        def __cuda_array_interface__(self):
            raise ValueError("the stream was destroyed")

    a, b, c = arrays()
    with pytest.raises(tc.ArgumentError, match=r"parameter B \(argument 2\): reading its "
                                               r"__cuda_array_interface__ raised ValueError: "
                                               r"the stream was destroyed"):
        vector_add_module()(DeviceArray(a), Raising(), DeviceArray(c))


@pytest.mark.parametrize("pointer, match", [
    (0, r"parameter C \(argument 3\): its data pointer is null \(0\), but its shape \(64,\) "
        r"has elements: a kernel would read or write address 0"),
    (-16, r"parameter C \(argument 3\): its data pointer -16 is not an address \(an integer "
          r"in \[0, 2\*\*64\)\)"),
    (4096.0, r"its data pointer 4096.0 is not an address"),
    (2**64 - 8, r"its elements \(shape \(64,\), byte strides C-contiguous, from "
                r"0xfffffffffffffff8\) span bytes \[0xfffffffffffffff8, 0x100000000000000f8\), "
                r"outside the 64-bit address space"),
], ids=["null", "negative", "float", "past the address space"])
def test_device_pointer_that_is_no_address(pointer, match):
    a, b, c = arrays()
    with pytest.raises(tc.ArgumentError, match=match):
        vector_add_module()(DeviceArray(a), DeviceArray(b), Forged(c, data=(pointer, False)))


def test_device_pointer_not_aligned_to_its_elements():
    """A float32 array one byte into a buffer: a load from it is a misaligned-address
    fault on a GPU."""
    a, b, c = arrays()
    raw = np.zeros(64 * 4 + 4, np.uint8)
    with pytest.raises(tc.ArgumentError, match=r"parameter A \(argument 1\): its data pointer "
                                               r"0x[0-9a-f]+ is not aligned to its 4-byte "
                                               r"float32 elements .*misaligned address"):
        vector_add_module()(Forged(a, data=(raw.ctypes.data + 1, False)), DeviceArray(b),
                            DeviceArray(c))


def test_masked_device_array():
    a, b, c = arrays()
    mask = DeviceArray(np.ones(64, bool))
    with pytest.raises(tc.ArgumentError, match=r"parameter A \(argument 1\): it is a masked "
                                               r"array \(its __cuda_array_interface__ has a "
                                               r"'mask'\)"):
        vector_add_module()(Forged(a, mask=mask), DeviceArray(b), DeviceArray(c))


def test_device_array_on_another_gpu_than_the_modules():
    """The pycuda runtime's kernels run on its driver's device: an array on another GPU
    (a tensor on cuda:1) is refused, as a GPU library refuses it."""
    a, b, c = arrays()
    mod = vector_add_module(where={c.ctypes.data: 1})
    with pytest.raises(tc.ArgumentError, match=r"parameter C \(argument 3\) is an array in "
                                               r"device 1, but vector_add's kernels run on "
                                               r"device 0 \(the module's driver\): pass an "
                                               r"array on cuda:0"):
        mod(DeviceArray(a), DeviceArray(b), DeviceArray(c))
    mod = vector_add_module(where={b.ctypes.data: None})
    with pytest.raises(tc.ArgumentError, match=r"parameter B \(argument 2\) is an array in "
                                               r"memory the CUDA driver does not know as "
                                               r"device memory"):
        mod(DeviceArray(a), DeviceArray(b), DeviceArray(c))


@pytest.mark.parametrize("stream, match", [
    (0, r"parameter B \(argument 2\): the 'stream' entry 0 of its __cuda_array_interface__ "
        r"is 0, which the protocol \(version 3\) disallows as ambiguous: give 1 for the "
        r"legacy default stream, 2 for the per-thread default stream"),
    ("0x5000", r"parameter B \(argument 2\): the 'stream' entry '0x5000' of its "
               r"__cuda_array_interface__ is not a CUDA stream: the protocol \(version 3\) "
               r"wants None \(nothing to wait for\), 1 \(the legacy default stream\), 2 \(the "
               r"per-thread default stream\) or a CUstream handle"),
], ids=["stream 0", "stream not an int"])
def test_cuda_array_interface_stream_that_is_no_stream(stream, match):
    """The producer's stream a version-3 interface names, which the call must wait for:
    0 is disallowed by the protocol (it would not say which default stream), and anything
    but None or an integer > 0 is no stream."""
    a, b, c = arrays()
    with pytest.raises(tc.ArgumentError, match=match):
        vector_add_module()(DeviceArray(a), Forged(b, stream=stream), DeviceArray(c))
