"""The CUDA runtime's per-call path on a module whose kernel takes TMA tensor maps
(CUtensorMap parameters encoded from each call's addresses): what a call reuses from an
earlier one (the maps, by address, per call signature) and what it checks anew; and the
launch's parameter packing (:class:`tecomp.runtime.cuda_driver._Packer`), tensor maps
included.  No GPU: a stand-in driver that launches nothing, over the stand-in libcuda's
``cuTensorMapEncodeTiled`` (tests/fake_libcuda.py: it records each map it encodes)."""
from __future__ import annotations

import contextlib
import ctypes
import struct

import numpy as np
import pytest

import tecomp as tc
import tecomp.nn  # noqa: F401
from tecomp.codegen.cuda import build_cuda
from tecomp.errors import ArgumentError
from tecomp.runtime.cuda_driver import Function, _Packer, pack_params
from tecomp.strategy import cuda as sc
from fake_libcuda import DeviceArray, FakeLibcuda

SM90A = "cuda -arch=sm_90a"
M, N, K = 128, 128, 192


class _NoLaunch:
    """What the CUDA runtime asks of a driver, on an sm_90 device that runs nothing:
    each launch recorded (its function, types, arguments and stream); the device of
    each address 0 unless ``device_of`` says otherwise."""

    name = "stand-in"
    compute_capability, arch, ordinal = (9, 0), "sm_90a", 0
    max_threads_per_block, max_block_dims = 1024, (1024, 1024, 64)
    max_grid_dims = (2**31 - 1, 65535, 65535)
    max_shared_per_block, max_shared_per_block_optin = 48 * 1024, 227 * 1024

    def __init__(self):
        self.cu = FakeLibcuda(None)
        self.launches = []
        self.device_of = {}

    def compile(self, cs, arch=None):
        return "module"

    def get_function(self, module, name):
        return name

    def function_max_threads(self, fn):
        return 1024

    def pointer_device(self, ptr):
        return self.device_of.get(ptr, 0)

    def active(self):
        return contextlib.nullcontext()

    def launch(self, fn, grid, block, shared, types, args, stream=None):
        self.launches.append((fn, types, list(args), stream))

    def synchronize(self, stream=None):
        pass

    def encoded(self):
        """The address of each map encoded so far."""
        return [c[1]["address"] for c in self.cu.calls if c[0] == "cuTensorMapEncodeTiled"]


def _module():
    X = tc.placeholder((M, K), "float16", name="X")
    W = tc.placeholder((N, K), "float16", name="W")
    Y = tc.nn.dense(X, W)
    cfg = sc.WmmaConfig(8, 1, 1, 8, 64, family="wgmma", stages=3, producer="tma")
    drv = _NoLaunch()
    mod = build_cuda(tc.lower(sc.schedule_dense(Y, SM90A, config=cfg), [X, W, Y]),
                     driver=drv, target=SM90A)
    assert sorted(p.obj.src.name for k in mod.kernels for p in k.params
                  if p.dtype == "tensor_map") == ["W", "X"]
    return mod, drv


def _aligned(shape, dtype="float16", offset=0):
    """A zero array whose data starts ``offset`` bytes past a 1024-byte boundary."""
    n = int(np.prod(shape)) * np.dtype(dtype).itemsize
    raw = np.zeros(n + 2048, np.uint8)
    at = -raw.ctypes.data % 1024 + offset
    return raw[at:at + n].view(dtype).reshape(shape)


def _maps_of(launch):
    """The addresses the tensor maps of a recorded launch describe (the stand-in writes
    the emulation's layout: four uint32, then the address), sorted."""
    _, types, args, _ = launch
    return sorted(struct.unpack_from("<Q", a, 16)[0] for t, a in zip(types, args) if t == "T")


def test_the_maps_are_encoded_once_per_address_and_anew_for_another_one():
    """The first call encodes its two maps, the calls after it with the same arrays reuse
    them (what the call signature's plan keeps, by address); an array at another address
    gets a map of its own, the arrays of an earlier call find theirs again, and each
    launch receives the maps of its own call's addresses."""
    mod, drv = _module()
    x, w, y = _aligned((M, K)), _aligned((N, K)), _aligned((M, N))
    args = [DeviceArray(x), DeviceArray(w), DeviceArray(y)]
    for stream in (None, 7, 7, None):
        mod(*args, stream=stream)
    assert sorted(drv.encoded()) == sorted([x.ctypes.data, w.ctypes.data])
    assert len(drv.launches) == 4
    assert _maps_of(drv.launches[-1]) == sorted([x.ctypes.data, w.ctypes.data])
    x2 = _aligned((M, K))
    mod(DeviceArray(x2), DeviceArray(w), DeviceArray(y), stream=7)
    assert drv.encoded()[2:] == [x2.ctypes.data]
    assert _maps_of(drv.launches[-1]) == sorted([x2.ctypes.data, w.ctypes.data])
    mod(*args, stream=7)
    assert len(drv.encoded()) == 3
    assert _maps_of(drv.launches[-1]) == sorted([x.ctypes.data, w.ctypes.data])


def _error(mod, args):
    with pytest.raises(tc.TecompError) as info:
        mod(*args, stream=7)
    return type(info.value), str(info.value)


def test_a_bad_call_after_good_ones_raises_and_encodes_and_launches_nothing():
    """After good calls (their plan kept), a call with an array of another dtype, shape,
    layout or device, or at an address TMA cannot copy from, raises what the same call
    raises on a fresh module: no map is encoded for it and nothing is launched."""
    mod, drv = _module()
    x, w, y = _aligned((M, K)), _aligned((N, K)), _aligned((M, N))
    elsewhere = _aligned((M, K))
    drv.device_of[elsewhere.ctypes.data] = 1   # (in another GPU's memory)
    bad = {
        "a float32 X": [DeviceArray(_aligned((M, K), "float32")), DeviceArray(w), DeviceArray(y)],
        "a shorter X": [DeviceArray(x[:M - 8]), DeviceArray(w), DeviceArray(y)],
        "a transposed W": [DeviceArray(w), DeviceArray(_aligned((K, N)).T), DeviceArray(y)],
        "X on another device": [DeviceArray(elsewhere), DeviceArray(w), DeviceArray(y)],
        "X 8 bytes past a 16-byte boundary": [DeviceArray(_aligned((M, K), offset=8)),
                                              DeviceArray(w), DeviceArray(y)],
        "Y overlapping X": [DeviceArray(x), DeviceArray(w),
                            DeviceArray(x.reshape(-1)[:M * N].reshape(M, N))],
    }
    for what, args in bad.items():
        fresh, fdrv = _module()
        fdrv.device_of.update(drv.device_of)
        first = _error(fresh, args)
        mod(DeviceArray(x), DeviceArray(w), DeviceArray(y), stream=7)
        mod(DeviceArray(x), DeviceArray(w), DeviceArray(y), stream=7)   # (the plan's)
        encoded, launched = len(drv.encoded()), len(drv.launches)
        assert _error(mod, args) == first, what
        assert issubclass(first[0], ArgumentError if "16-byte" not in what else
                          tc.errors.TensorMapError), (what, first)
        assert (len(drv.encoded()), len(drv.launches)) == (encoded, launched), what


@pytest.mark.parametrize("types", ["", "P", "PPi", "iT", "PTTfq", "?bBhTdPT"])
def test_the_packer_lays_out_the_values_pack_params_gives(types):
    """Each parameter's bytes where its pointer points, as pack_params (a ctypes object
    each) has them; a tensor map's 128 bytes on a 64-byte boundary."""
    vals = {"P": 0x7000_0000_1000, "i": -5, "q": 2**40 + 3, "f": 1.5, "d": -2.25, "?": True,
            "b": -7, "B": 200, "h": -300}
    args = [bytes(range(k, k + 128)) if t == "T" else vals[t] for k, t in enumerate(types)]
    params, _keep = _Packer(types).pack(types, args)
    want, _keep2 = pack_params(types, args)
    for k, t in enumerate(types):
        size = 128 if t == "T" else ctypes.sizeof(type(_keep2[k]))
        assert ctypes.string_at(params[k], size) == ctypes.string_at(want[k], size), (types, k)
        if t == "T":
            assert params[k] % 64 == 0


def test_a_map_of_another_length_is_not_packed():
    """struct would pad or cut it: the packer refuses it, and the launch's fallback,
    pack_params, says what is wrong."""
    with pytest.raises(struct.error):
        _Packer("PT").pack("PT", [0x1000, b"\0" * 127])

    class _Lib:
        def cuLaunchKernel(self, *args):
            raise AssertionError("launched")

    with pytest.raises(ValueError):
        Function(ctypes.c_void_p(1), "k").launch(_Lib(), (1, 1, 1), (1, 1, 1), 0, "PT",
                                                 [0x1000, b"\0" * 127], 0)
