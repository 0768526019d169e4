"""The pycuda runtime (tecomp.runtime.cuda).

Two halves:

* tests marked ``gpu`` run on a real GPU with pycuda and skip cleanly elsewhere;
* the others check the runtime's own logic everywhere, with the CUDA emulation standing
  in for the driver (:class:`EmuDriver`: "device memory" is host memory, and a launch
  runs the kernel in the emulation), plus the behaviour without pycuda or a device.
"""
import ctypes
import gc
import os
import sys
import types

import numpy as np
import pytest

import tecomp as tc

sys.path.insert(0, os.path.dirname(__file__))
from cuda_examples import (  # noqa: E402
    ALL_CASES, S, block_reverse, half_storage, thread, tiled_matmul, two_kernels_workspace,
    vector_add,
)

from tecomp.runtime import cuda as runtime_cuda  # noqa: E402
from tecomp.errors import ArgumentError, BuildError, RuntimeUnavailableError  # noqa: E402
from tecomp.ir import Buffer, PrimFunc, Var  # noqa: E402
from tecomp.runtime.nvcc import find_nvcc  # noqa: E402
from tecomp.codegen.cuda_emu import find_cxx  # noqa: E402
from tecomp.codegen.cuda import build_cuda  # noqa: E402
from helpers import gpu_driver  # noqa: F401  (a fixture)
from fake_libcuda import DeviceArray  # noqa: E402  (host memory as a "device" array)
from tecomp.testing.device_arrays import StandInDriver  # noqa: E402


def _have_cxx():
    try:
        find_cxx()
        return True
    except RuntimeUnavailableError:
        return False


needs_cxx = pytest.mark.skipif(not _have_cxx(), reason="no C++ compiler for the emulation")


# --------------------------------------------------------------------------- stand-ins


class _Alloc:
    """Host memory standing in for a device allocation, 256-byte aligned as cudaMalloc's."""

    def __init__(self, driver, nbytes):
        self.buf = np.empty(max(1, nbytes) + 256, np.uint8)
        self.offset = -self.buf.ctypes.data % 256
        self.driver = driver
        driver.live[int(self)] = self

    def __int__(self):
        return self.buf.ctypes.data + self.offset

    def free(self):
        self.driver.live.pop(int(self), None)


class EmuDriver(StandInDriver):
    """The PycudaDriver interface over the CUDA emulation, with settable device limits,
    recording its launches, copies and synchronisations."""

    name = "emulated device"

    def __init__(self, max_threads_per_block=1024, max_block_dims=(1024, 1024, 64),
                 max_grid_dims=(2**31 - 1, 65535, 65535), max_shared_per_block=48 * 1024,
                 function_max_threads=1024, max_shared_per_block_optin=227 * 1024):
        super().__init__()
        self.max_threads_per_block = max_threads_per_block
        self.max_block_dims = max_block_dims
        self.max_grid_dims = max_grid_dims
        self.max_shared_per_block = max_shared_per_block
        self.max_shared_per_block_optin = max_shared_per_block_optin
        self.shared = []    # the dynamic shared memory of each launch that passed some
        self._fmax = function_max_threads
        self.live = {}
        self.launches = []
        self.copies = 0
        self.streams = []   # the stream handles of the launches that named one
        self.syncs = []     # None: the whole context; else a stream handle

    def function_max_threads(self, fn):
        return self._fmax

    def alloc(self, nbytes):
        return _Alloc(self, nbytes)

    def htod(self, ptr, host):
        self.copies += 1
        ctypes.memmove(int(ptr), host.ctypes.data, host.nbytes)

    def dtoh(self, host, ptr):
        self.copies += 1
        ctypes.memmove(host.ctypes.data, int(ptr), host.nbytes)

    def launch(self, fn, grid, block, shared, types_, args, stream=None):
        lib, k = fn
        self.launches.append((lib.source.kernels[k].name, tuple(grid), tuple(block), types_))
        self.stream_log.append(("launch", stream))
        if stream is not None:
            self.streams.append(stream)
        if shared:
            self.shared.append(shared)
        vals = [int(a) if t == "P" else a for t, a in zip(types_, args)]
        lib.launch(k, vals, grid, block, "serial")

    def synchronize(self, stream=None):
        self.syncs.append(stream)


def check(case, args, gpu=False):
    for k, want in case.expected(args).items():
        got = args[k]
        if gpu and got.dtype.kind == "f":
            # nvcc contracts a * b + c into fma and its math library differs by a few ulps
            tol = 2e-3 if got.dtype == np.float16 else 1e-5
            np.testing.assert_allclose(got, want, rtol=max(case.rtol, tol),
                                       atol=max(case.atol, tol))
        elif case.rtol or case.atol:
            np.testing.assert_allclose(got, want, rtol=case.rtol, atol=case.atol)
        else:
            np.testing.assert_array_equal(got, want)


# --------------------------------------------------------------------------- runtime logic


@needs_cxx
@pytest.mark.parametrize("make", [vector_add, tiled_matmul, two_kernels_workspace, half_storage],
                         ids=["vector_add", "matmul", "workspace", "half"])
def test_numpy_arguments_round_trip(make):
    case = make()
    drv = EmuDriver()
    mod = build_cuda(case.func, driver=drv)
    args = case.make_args(np.random.default_rng(1))
    mod(*args)
    check(case, args)
    # the numpy arrays' device copies freed; the workspaces kept by the module until it goes
    assert len(drv.live) == len(mod.cuda_source.workspaces)
    assert len(drv.launches) == len(mod.kernels)
    del mod
    gc.collect()
    assert drv.live == {}


@needs_cxx
def test_launch_dims_are_computed_at_call_time():
    case = vector_add()
    drv = EmuDriver()
    mod = build_cuda(case.func, driver=drv)
    for n, blocks in ((1000, 16), (1025, 17), (64, 1)):
        args = case.make_args(np.random.default_rng(n), n)
        mod(*args)
        check(case, args)
        assert drv.launches[-1] == ("vector_add_kernel0", (blocks, 1, 1), (64, 1, 1), "PPPi")
    mod(*case.make_args(np.random.default_rng(0), 0))  # no blocks: no launch
    assert len(drv.launches) == 3


@needs_cxx
def test_device_arrays_are_used_in_place():
    case = vector_add()
    drv = EmuDriver()
    mod = build_cuda(case.func, driver=drv)
    a, b, c = case.make_args(np.random.default_rng(0), 300)
    mod(DeviceArray(a), DeviceArray(b), DeviceArray(c))
    check(case, [a, b, c])
    assert drv.copies == 0
    with pytest.raises(ArgumentError, match=r"parameter C \(argument 3\) is written by vector_add, but the array is read-only \(its __cuda_array_interface__"):
        mod(DeviceArray(a), DeviceArray(b), DeviceArray(c, readonly=True))
    with pytest.raises(ArgumentError, match=r"parameter A \(argument 1\) is a non-contiguous device array"):
        mod(DeviceArray(np.zeros(600, "float32")[::2]), DeviceArray(b), DeviceArray(c))
    with pytest.raises(ArgumentError, match=r"parameter B \(argument 2\) expects float32, got float64"):
        mod(DeviceArray(a), DeviceArray(b.astype("float64")), DeviceArray(c))


class _TorchLikeStream:
    cuda_stream = 0x5000


class _ProtocolStream:
    def __cuda_stream__(self):
        return (0, 0x6000)


@needs_cxx
def test_a_call_on_a_stream_launches_there_and_waits_only_for_host_copies():
    case = vector_add()
    drv = EmuDriver()
    mod = build_cuda(case.func, driver=drv)
    a, b, c = case.make_args(np.random.default_rng(0), 300)
    # device arrays: launched on the stream, no wait (the caller orders its stream)
    mod(DeviceArray(a), DeviceArray(b), DeviceArray(c), stream=_TorchLikeStream())
    check(case, [a, b, c])
    assert drv.streams == [0x5000] and drv.syncs == []
    # numpy arguments: the call waits for that stream before copying the result back
    c[:] = 0
    mod(a, b, c, stream=_ProtocolStream())
    check(case, [a, b, c])
    assert drv.streams == [0x5000, 0x6000] and drv.syncs == [0x6000]
    # no stream: the whole context, as before
    mod(a, b, c)
    assert drv.syncs == [0x6000, None] and len(drv.streams) == 2
    mod(a, b, c, stream=0)   # the legacy default stream's handle
    assert drv.streams[-1] == 0


@pytest.mark.parametrize("bad", [-1, True, "s0", 2.5, object()])
def test_a_stream_that_is_not_one(bad):
    from tecomp.runtime.cuda import stream_handle

    with pytest.raises(ArgumentError, match=r"is not a CUDA stream: pass a torch.cuda.Stream"):
        stream_handle(bad)


@needs_cxx
def test_a_call_describes_each_array_once_and_checks_a_launch_size_once(monkeypatch):
    """The host work of a call: each argument's __cuda_array_interface__ read once (the
    checks, the alias test and the launch share it), the device limits checked once per
    launch size (no timing here: counts)."""
    from tecomp.runtime import argcheck

    case = vector_add()
    drv = EmuDriver()
    mod = build_cuda(case.func, driver=drv)
    a, b, c = case.make_args(np.random.default_rng(0), 300)
    reads, checks = [], []

    class Counted(DeviceArray):
        @property
        def __cuda_array_interface__(self):
            reads.append(self)
            return DeviceArray.__cuda_array_interface__.fget(self)

    real_check = runtime_cuda._check_device_launch
    monkeypatch.setattr(runtime_cuda, "_check_device_launch",
                        lambda *a: checks.append(a[3:]) or real_check(*a))
    for _ in range(3):
        mod(Counted(a), Counted(b), Counted(c))
    assert len(reads) == 9 and len(checks) == 1
    a2, b2, c2 = case.make_args(np.random.default_rng(1), 1000)
    mod(Counted(a2), Counted(b2), Counted(c2))   # another grid: checked
    assert len(checks) == 2 and len(reads) == 12
    check(case, [a2, b2, c2])


@needs_cxx
def test_non_contiguous_numpy_output_is_written_back():
    case = vector_add()
    mod = build_cuda(case.func, driver=EmuDriver())
    a, b, _ = case.make_args(np.random.default_rng(0), 50)
    out = np.zeros(100, "float32")
    mod(a, b, out[::2])
    np.testing.assert_array_equal(out[::2], a + b)
    assert not out[1::2].any()


@needs_cxx
def test_launch_must_fit_the_device():
    mm = tiled_matmul()
    args = mm.make_args(np.random.default_rng(0))
    with pytest.raises(BuildError, match=r"matmul_kernel0 \(stage C\): 256 threads per block, more "
                                         r"than the 128 the device allows"):
        build_cuda(mm.func, driver=EmuDriver(max_threads_per_block=128))(*args)
    with pytest.raises(BuildError, match=r"256 threads per block, but the compiled kernel fits at "
                                         r"most 192"):
        build_cuda(mm.func, driver=EmuDriver(function_max_threads=192))(*args)
    with pytest.raises(BuildError, match=r"2048 bytes of shared memory per block, more than the 1024"):
        build_cuda(mm.func, driver=EmuDriver(max_shared_per_block=1024))(*args)


@needs_cxx
def test_dynamic_shared_memory_is_passed_at_launch_and_checked_against_the_opt_in_limit():
    """A kernel with more than 48 KiB of shared arrays: the launch passes their size as
    dynamic shared memory; a device whose opt-in limit is smaller refuses it."""
    from tecomp.strategy import cuda as sc
    from tecomp.nn import ops

    A = tc.placeholder((128, 128), "float16", name="A")
    B = tc.placeholder((128, 128), "float16", name="B")
    C = ops.matmul(A, B, out_dtype="float32")
    s = sc.schedule_matmul(C, "cuda", config=sc.WmmaConfig(2, 4, 4, 2, 64))  # 71680 bytes
    func = tc.lower(s, [A, B, C], target="cuda")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((128, 128)).astype(np.float16)
    b = rng.standard_normal((128, 128)).astype(np.float16)
    c = np.zeros((128, 128), np.float32)
    drv = EmuDriver()
    build_cuda(func, driver=drv)(a, b, c)
    np.testing.assert_allclose(c, a.astype(np.float32) @ b.astype(np.float32), rtol=1e-4,
                               atol=1e-3)
    assert drv.shared == [71680]
    with pytest.raises(BuildError, match=r"71680 bytes of shared memory per block, more than "
                                         r"the 65536 the device allows; use smaller tiles"):
        build_cuda(func, driver=EmuDriver(max_shared_per_block_optin=65536))(a, b, c)
    # sizes that come from the arguments are the caller's to fix: ArgumentError
    n = Var("n")
    A = Buffer("A", (n,), "float32")
    t = Var("t")
    mod = build_cuda(PrimFunc("nthreads", (A,), thread(t, n, "threadIdx.x", S(A, 1.0, t))),
                     driver=EmuDriver(max_threads_per_block=512))
    a = np.zeros(512, "float32")
    mod(a)
    assert (a == 1).all()
    with pytest.raises(ArgumentError, match=r"513 threads per block, more than the 512"):
        mod(np.zeros(513, "float32"))


def test_without_pycuda(monkeypatch):
    monkeypatch.setitem(sys.modules, "pycuda", None)
    monkeypatch.setitem(sys.modules, "pycuda.driver", None)
    monkeypatch.setattr(runtime_cuda, "_DRIVER", None)
    case = vector_add()
    mod = build_cuda(case.func)  # building works
    assert mod.get_source("cuda") == mod.source and "vector_add_kernel0" in mod.source
    with pytest.raises(RuntimeUnavailableError, match=r"pycuda is not installed: pip install tecomp\[cuda\]"):
        mod(*case.make_args(np.random.default_rng(0), 10))


def test_without_a_device(monkeypatch):
    fake = types.ModuleType("pycuda.driver")
    fake.init = lambda: None
    fake.Device = types.SimpleNamespace(count=lambda: 0)
    pkg = types.ModuleType("pycuda")
    pkg.driver = fake
    monkeypatch.setitem(sys.modules, "pycuda", pkg)
    monkeypatch.setitem(sys.modules, "pycuda.driver", fake)
    monkeypatch.setattr(runtime_cuda, "_DRIVER", None)
    case = vector_add()
    with pytest.raises(RuntimeUnavailableError, match=r"no CUDA device: the driver sees 0 device"):
        build_cuda(case.func)(*case.make_args(np.random.default_rng(0), 10))

    def broken():
        raise RuntimeError("cuInit failed: no CUDA-capable device is detected")

    fake.init = broken
    with pytest.raises(RuntimeUnavailableError, match=r"no CUDA device: the CUDA driver did not start"):
        build_cuda(case.func)(*case.make_args(np.random.default_rng(0), 10))


@pytest.mark.skipif(find_nvcc() is None, reason="nvcc is not on PATH")
def test_get_source_ptx():
    mod = build_cuda(vector_add().func, driver=EmuDriver())
    assert ".entry vector_add_kernel0(" in mod.get_source("ptx")
    with pytest.raises(ArgumentError, match="unknown source format"):
        mod.get_source("sass")


# --------------------------------------------------------------------------- real GPU


@pytest.mark.gpu
@pytest.mark.parametrize("index", range(len(ALL_CASES)))
def test_gpu_examples_match_numpy(gpu_driver, index):
    case = ALL_CASES[index]()
    mod = build_cuda(case.func)
    args = case.make_args(np.random.default_rng(index))
    mod(*args)
    check(case, args, gpu=True)


@pytest.mark.gpu
def test_gpu_streams(gpu_driver):
    """A call on a pycuda, torch or CuPy stream (each that is installed) runs there."""
    import pycuda.driver as cuda
    import pycuda.gpuarray as gpuarray

    case = vector_add()
    mod = build_cuda(case.func)
    a, b, c = case.make_args(np.random.default_rng(3), 1 << 16)
    want = a + b
    streams = [("pycuda", lambda: cuda.Stream(), lambda s: s.synchronize())]
    try:
        import torch

        if torch.cuda.is_available():
            streams.append(("torch", lambda: torch.cuda.Stream(), lambda s: s.synchronize()))
    except ImportError:
        pass
    try:
        import cupy

        streams.append(("cupy", lambda: cupy.cuda.Stream(non_blocking=True),
                        lambda s: s.synchronize()))
    except ImportError:
        pass
    for name, make, wait in streams:
        s = make()
        da, db, dc = gpuarray.to_gpu(a), gpuarray.to_gpu(b), gpuarray.zeros_like(gpuarray.to_gpu(c))
        mod(da, db, dc, stream=s)
        wait(s)
        np.testing.assert_allclose(dc.get(), want, rtol=1e-6, err_msg=name)
        c2 = np.zeros_like(c)
        mod(a, b, c2, stream=s)   # numpy arguments: waits before copying back
        np.testing.assert_allclose(c2, want, rtol=1e-6, err_msg=name)


@pytest.mark.gpu
def test_gpu_device_arrays(gpu_driver):
    import pycuda.gpuarray as gpuarray

    case = vector_add()
    mod = build_cuda(case.func)
    a, b, c = case.make_args(np.random.default_rng(0), 5000)
    da, db, dc = gpuarray.to_gpu(a), gpuarray.to_gpu(b), gpuarray.to_gpu(c)
    mod(da, db, dc)
    np.testing.assert_array_equal(dc.get(), a + b)
    for lib in ("cupy", "torch"):
        try:
            m = __import__(lib)
        except ImportError:
            continue
        if lib == "cupy":
            x, y, z = m.asarray(a), m.asarray(b), m.zeros(5000, dtype=m.float32)
            mod(x, y, z)
            np.testing.assert_array_equal(m.asnumpy(z), a + b)
        elif m.cuda.is_available():
            x, y = m.from_numpy(a).cuda(), m.from_numpy(b).cuda()
            z = m.zeros(5000, dtype=m.float32, device="cuda")
            mod(x, y, z)
            np.testing.assert_array_equal(z.cpu().numpy(), a + b)


@pytest.mark.gpu
def test_gpu_driver_takes_the_context_current_on_its_thread(gpu_driver):
    """A context the caller made current (pycuda.autoinit's way) is the one a driver
    started then runs in, so the caller's GPUArrays are valid arguments; the primary
    context the default driver left current is back on top afterwards."""
    import pycuda.driver as cuda
    import pycuda.gpuarray as gpuarray

    assert cuda.Context.get_current() == gpu_driver.context   # left current on this thread
    ctx = gpu_driver.device.make_context()
    try:
        drv = runtime_cuda.PycudaDriver()
        assert drv.context == ctx and drv.context != gpu_driver.context
        case = vector_add()
        mod = build_cuda(case.func, driver=drv)
        a, b, c = case.make_args(np.random.default_rng(1), 3000)
        da, db, dc = gpuarray.to_gpu(a), gpuarray.to_gpu(b), gpuarray.to_gpu(c)
        mod(da, db, dc)
        np.testing.assert_array_equal(dc.get(), a + b)
        del da, db, dc
    finally:
        cuda.Context.pop()
        ctx.detach()
    assert cuda.Context.get_current() == gpu_driver.context


@pytest.mark.gpu
def test_gpu_barrier_kernels_repeatedly(gpu_driver):
    case = block_reverse(nblocks=64, nthreads=1024)
    mod = build_cuda(case.func)
    for _ in range(5):
        args = case.make_args(None)
        mod(*args)
        check(case, args)


@pytest.mark.gpu
def test_gpu_launch_limits(gpu_driver):
    n = Var("n")
    A = Buffer("A", (n,), "float32")
    t = Var("t")
    mod = build_cuda(PrimFunc("nthreads", (A,), thread(t, n, "threadIdx.x", S(A, 1.0, t))))
    a = np.zeros(gpu_driver.max_threads_per_block, "float32")
    mod(a)
    assert (a == 1).all()
    with pytest.raises(ArgumentError, match=r"threads per block|threadIdx\.x has extent"):
        mod(np.zeros(gpu_driver.max_threads_per_block + 1, "float32"))


@needs_cxx
def test_aliased_device_arrays_are_rejected():
    case = vector_add()
    mod = build_cuda(case.func, driver=EmuDriver())
    a, b, c = case.make_args(np.random.default_rng(0), 64)
    big = np.zeros(128, "float32")
    with pytest.raises(ArgumentError, match=r"parameter B \(argument 2\) and parameter C \(argument 3\) share memory"):
        mod(DeviceArray(a), DeviceArray(big[:64]), DeviceArray(big[32:96]))
    mod(DeviceArray(a), DeviceArray(big[:64]), DeviceArray(big[64:]))  # adjacent is fine
    # the same device array for B and C: nothing proves vector_add (a hand-written
    # PrimFunc) elementwise in them
    with pytest.raises(ArgumentError, match=r"parameter B \(argument 2\) and parameter C \(argument 3\) are the "
                                            r"same array, and vector_add writes C, but tecomp cannot prove"):
        mod(DeviceArray(a), DeviceArray(big[:64]), DeviceArray(big[:64]))
    # an output whose elements repeat (stride 0)
    zero = np.lib.stride_tricks.as_strided(big, (64,), (0,), writeable=True)
    with pytest.raises(ArgumentError, match=r"parameter C \(argument 3\) is written by vector_add, but its "
                                            r"elements overlap: C\[0\] and C\[1\] are the same memory"):
        mod(DeviceArray(a), DeviceArray(b), DeviceArray(zero))


@needs_cxx
def test_device_arrays_in_place_of_an_elementwise_input():
    """A TE elementwise stage: the same device array for its input and output runs in
    place (the overlap rule every runtime shares, tecomp/runtime/argcheck.py)."""
    from tecomp.strategy import cuda as nn_cuda

    n = tc.var("n")
    A = tc.placeholder((n,), name="A")
    B = tc.compute((n,), lambda i: A[i] * 2.0 + 1.0, name="B")
    func = tc.lower(nn_cuda.schedule_injective(B, "cuda"), [A, B], target="cuda")
    mod = build_cuda(func, driver=EmuDriver())
    x = np.arange(100, dtype="float32")
    y = x.copy()
    mod(DeviceArray(y), DeviceArray(y))
    np.testing.assert_array_equal(y, x * 2 + 1)
    with pytest.raises(ArgumentError, match=r"parameter A \(argument 1\) and parameter B \(argument 2\) share "
                                            r"memory, and main writes B"):
        mod(DeviceArray(y[:99]), DeviceArray(y[1:]))


class _TorchBf16Like(DeviceArray):
    """What torch's ``__cuda_array_interface__`` gives for a CUDA bfloat16 tensor: the
    typestr ``<V2`` (numpy has no bfloat16) and ``dtype`` ``torch.bfloat16``."""

    dtype = "torch.bfloat16"

    @property
    def __cuda_array_interface__(self):
        return {**super().__cuda_array_interface__, "typestr": "<V2"}


def test_a_torch_cuda_bfloat16_tensor_is_read_as_bfloat16_not_void():
    """On an H200, torch 2.11's CUDA bfloat16 tensors reached the checks as ``void16`` and
    every bfloat16 GPU kernel refused them."""
    from tecomp.ir.dtype import numpy_dtype
    from tecomp.runtime import argcheck

    bits = np.zeros((2, 3), np.uint16)
    meta = argcheck.array_meta(_TorchBf16Like(bits))
    assert meta.dtype == np.dtype(numpy_dtype("bfloat16")) and meta.shape == (2, 3)
    # a two-byte void of anything else stays what it is: the checks name it
    assert argcheck.array_meta(DeviceArray(bits.view("V2"))).dtype.kind == "V"


# --------------------------------------------------------------------------- call plans


def _scale_case():
    """``B[i] = A[i] * s`` with a float32 scalar parameter ``s``."""
    from cuda_examples import L, S
    from tecomp.ir import IfThenElse

    n, s = Var("n"), Var("s", "float32")
    A, B = Buffer("A", (n,), "float32"), Buffer("B", (n,), "float32")
    bx, tx = Var("i.outer"), Var("i.inner")
    i = bx * 64 + tx
    body = IfThenElse(i < n, S(B, L(A, i) * s, i))
    return PrimFunc("scale", (A, B, s), thread(bx, (n + 63) // 64, "blockIdx.x",
                                               thread(tx, 64, "threadIdx.x", body)))


def _error_of(mod, args):
    with pytest.raises(tc.TecompError) as info:
        mod(*args)
    return type(info.value), str(info.value)


class _At:
    """A device array of ``like``'s shape and dtype whose interface gives ``ptr``."""

    def __init__(self, like, ptr):
        self.like, self.ptr = like, ptr

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.like.shape, "typestr": self.like.dtype.str,
                "data": (self.ptr, False), "strides": None, "version": 3}


@needs_cxx
def test_a_call_after_a_cached_one_is_checked_anew():
    """A call whose shapes, strides, dtypes, flags or addresses differ from an earlier
    call's is refused with the error a first call gets (the plan a good call left is not
    reused for it), and the next good call runs."""
    case = vector_add()
    drv = EmuDriver()
    mod = build_cuda(case.func, driver=drv)
    rng = np.random.default_rng(0)
    a, b, c = case.make_args(rng, 64)
    big = np.zeros(256, "float32")
    good = [DeviceArray(a), DeviceArray(b), DeviceArray(c)]
    zero = np.lib.stride_tricks.as_strided(big, (64,), (0,), writeable=True)
    bad_calls = {
        "shorter output": [DeviceArray(a), DeviceArray(b), DeviceArray(c[:63])],
        "float64 output": [DeviceArray(a), DeviceArray(b), DeviceArray(np.zeros(64))],
        "2-d output": [DeviceArray(a), DeviceArray(b), DeviceArray(np.zeros((8, 8), "float32"))],
        "strided output": [DeviceArray(a), DeviceArray(b), DeviceArray(big[::2][:64])],
        "read-only output": [DeviceArray(a), DeviceArray(b), DeviceArray(c, readonly=True)],
        "output overlapping an input": [DeviceArray(a), DeviceArray(big[:64]),
                                        DeviceArray(big[32:96])],
        "the same array twice": [DeviceArray(a), DeviceArray(big[:64]), DeviceArray(big[:64])],
        "stride-0 output": [DeviceArray(a), DeviceArray(b), DeviceArray(zero)],
        "a numpy scalar": [DeviceArray(a), DeviceArray(b), 3],
        "two arguments": [DeviceArray(a), DeviceArray(b)],
        # the good signature at addresses no kernel may touch (checked on every call)
        "a null output": [DeviceArray(a), DeviceArray(b), _At(c, 0)],
        "a misaligned output": [DeviceArray(a), DeviceArray(b), _At(c, c.ctypes.data + 1)],
        "an output past the address space": [DeviceArray(a), DeviceArray(b), _At(c, 2**64 - 8)],
    }
    elsewhere = np.zeros(64, "float32")   # (in another GPU's memory, says the driver)
    bad_calls["an output on another device"] = [DeviceArray(a), DeviceArray(b),
                                                DeviceArray(elsewhere)]
    drv.device_of[elsewhere.ctypes.data] = 1
    for what, bad in bad_calls.items():
        fresh = EmuDriver()
        fresh.device_of.update(drv.device_of)
        first = _error_of(build_cuda(case.func, driver=fresh), bad)
        mod(*good)   # (a plan of the good signature)
        launched = len(drv.launches)
        assert _error_of(mod, bad) == first, what
        assert len(drv.launches) == launched, what
    c[:] = 0
    mod(*good)
    check(case, [a, b, c])
    # adjacent arrays of the good shapes: their ranges do not meet, the plan runs
    mod(DeviceArray(a), DeviceArray(big[:64]), DeviceArray(big[64:128]))


@needs_cxx
def test_a_cached_call_takes_each_scalar_value():
    """The plan is per scalar value: another value (0.0 and -0.0 apart, an int for the
    float) gives its own result; a value the checks refuse is refused after a good one."""
    drv = EmuDriver()
    mod = build_cuda(_scale_case(), driver=drv)
    a = np.arange(1, 101, dtype="float32")
    b = np.zeros(100, "float32")
    for s in (2.0, 3.0, 0.0, -0.0, 1, 5, 2.0):
        mod(DeviceArray(a), DeviceArray(b), s)
        np.testing.assert_array_equal(b, a * np.float32(s))
        assert np.signbit(b).all() == (str(s) == "-0.0")
    for bad in ("2", True, 1e40):   # (True == 1 and hashes as 1: refused all the same)
        first = _error_of(build_cuda(_scale_case(), driver=EmuDriver()),
                          [DeviceArray(a), DeviceArray(b), bad])
        assert _error_of(mod, [DeviceArray(a), DeviceArray(b), bad]) == first


def _workspace_pointers(drv, mod, seen):
    """Record the address of the workspace the first kernel of each launch writes."""
    ws = mod.cuda_source.workspaces[0]
    k0 = [k for k, p in enumerate(mod.kernels[0].params) if p.obj is ws][0]
    real = drv.launch

    def launch(fn, grid, block, shared, types, args, stream=None):
        if fn[1] == 0:
            seen.append((stream, int(args[k0])))
        return real(fn, grid, block, shared, types, args, stream=stream)

    drv.launch = launch


@needs_cxx
def test_workspaces_are_kept_per_stream_and_freed_with_the_module():
    """A module keeps its workspaces between calls: a later call on the same stream reuses
    them (the stream orders it after the earlier kernels), a call on another stream gets
    its own, a larger call grows them; they go when the module does."""
    case = two_kernels_workspace()
    drv = EmuDriver()
    mod = build_cuda(case.func, driver=drv)
    seen = []
    _workspace_pointers(drv, mod, seen)
    rng = np.random.default_rng(0)
    for stream in (5, 5, 6, None, None, 5):
        a, c = case.make_args(rng, 300)
        mod(DeviceArray(a), DeviceArray(c), stream=stream)
        check(case, [a, c])
    ptr = {s: {p for t, p in seen if t == s} for s in (5, 6, 0, None)}
    # (no stream: launched without one)
    assert len(ptr[5]) == 1 and len(ptr[6]) == 1 and len(ptr[None]) == 1
    assert len(ptr[5] | ptr[6] | ptr[None]) == 3
    assert len(drv.live) == 3 and drv.syncs == [None, None]   # no wait on a stream
    a, c = case.make_args(rng, 5000)   # more than the workspace holds: grown
    mod(DeviceArray(a), DeviceArray(c), stream=5)
    check(case, [a, c])
    assert len(drv.live) == 3 and drv.syncs[-1] == 5   # (its kernels done before the free)
    del mod
    gc.collect()
    assert drv.live == {}


@needs_cxx
def test_two_calls_in_flight_never_share_a_workspace():
    """Two threads calling one module on one stream at once: each call holds a workspace
    of its own while its kernels are queued."""
    import threading

    case = two_kernels_workspace()
    drv = EmuDriver()
    mod = build_cuda(case.func, driver=drv)
    seen = []
    _workspace_pointers(drv, mod, seen)
    both = threading.Barrier(2, timeout=30)
    real = drv.launch

    def launch(fn, *rest, **kw):   # both calls are between taking and giving back
        if fn[1] == 0:
            both.wait()
        return real(fn, *rest, **kw)

    drv.launch = launch
    rng = np.random.default_rng(1)
    args = [case.make_args(rng, 300) for _ in range(2)]
    errors = []

    def run(a, c):
        try:
            mod(DeviceArray(a), DeviceArray(c), stream=5)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=x) for x in args]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len({p for _, p in seen}) == 2
    for a, c in args:
        check(case, [a, c])


def test_a_torch_cuda_tensor_is_described_as_its_own_interface_says():
    """The call reads a plain torch CUDA tensor's shape, strides, dtype and address
    directly: the same entries as torch's ``__cuda_array_interface__`` (compared on CPU
    tensors seen as CUDA ones through a subclass, for the views a caller passes)."""
    torch = pytest.importorskip("torch")

    class SeenAsCuda(torch.Tensor):
        @property
        def is_cuda(self):
            return True

    t = torch.arange(24.0).reshape(4, 6)
    views = [t, t[:, ::2], t.t(), t[1:], t[:, 1:], torch.zeros(0, 3), t.expand(2, 4, 6),
             t.to(torch.bfloat16), t.to(torch.float16)[::2], t.to(torch.int64), t > 3,
             t.to(torch.uint8), t[0, 0], torch.zeros(1, 5)[:, ::2]]
    for v in views:
        want = v.as_subclass(SeenAsCuda).__cuda_array_interface__
        # (the subclass is not a plain tensor: read through torch's property)
        assert runtime_cuda._torch_cai(v.as_subclass(SeenAsCuda)) is None
        got = runtime_cuda._torch_entries(v)
        assert got == want, (v.shape, v.stride(), v.dtype)
    assert runtime_cuda._torch_cai(t) is None   # a CPU tensor
    assert runtime_cuda._torch_cai(t.clone().requires_grad_()) is None


# ------------------------------------------------ the interface's producer stream (version 3)


@needs_cxx
def test_a_producer_stream_is_waited_for_before_the_first_launch():
    """An array whose __cuda_array_interface__ names a stream (version 3 of the protocol)
    orders the call's launches after it: once per stream, before the first kernel, on
    the first call and on the calls a kept plan runs; not for None, nor for the launch
    stream itself (None and 0 launch on the legacy default stream, the protocol's 1)."""
    from tecomp.testing.device_arrays import DeviceStandIn

    case = two_kernels_workspace()
    drv = EmuDriver()
    mod = build_cuda(case.func, driver=drv)
    args = case.make_args(np.random.default_rng(5))
    launches = len(mod.kernels)
    assert launches >= 2

    def call(streams, **kw):
        drv.stream_log.clear()
        for x in args:
            if isinstance(x, np.ndarray) and x.dtype.kind == "f" and x is args[-1]:
                x[...] = 0
        dev = [DeviceStandIn(x, change={"stream": s}) if isinstance(x, np.ndarray) else x
               for x, s in zip(args, streams)]
        mod(*dev, **kw)
        check(case, args)
        return drv.stream_log

    arrays = [i for i, x in enumerate(args) if isinstance(x, np.ndarray)]
    none = [None] * len(args)
    one = list(none)
    for i in arrays[:2]:
        one[i] = 0x9000      # two arrays of one producer: one wait
    two = list(one)
    two[arrays[-1]] = 0x9100
    for _ in range(2):       # the checked call, then the plan's
        assert call(one, stream=0x5000) == [("wait", 0x5000, 0x9000)] + \
            [("launch", 0x5000)] * launches
        assert call(two, stream=0x5000) == [("wait", 0x5000, 0x9000),
                                            ("wait", 0x5000, 0x9100)] + \
            [("launch", 0x5000)] * launches
        assert call(none, stream=0x5000) == [("launch", 0x5000)] * launches
        same = [0x5000 if s else None for s in one]
        assert call(same, stream=0x5000) == [("launch", 0x5000)] * launches
        legacy = [1 if s else None for s in one]
        assert call(legacy) == [("launch", None)] * launches
        assert call(legacy, stream=0) == [("launch", 0)] * launches
        assert call(legacy, stream=2) == [("wait", 2, 1)] + [("launch", 2)] * launches
        # no stream=: the call waits for its kernels, and the host for the producer first
        assert call(one) == [("wait", None, 0x9000)] + [("launch", None)] * launches


@needs_cxx
@pytest.mark.parametrize("bad, why", [
    (0, r"is 0, which the protocol \(version 3\) disallows"),
    (-3, "is not a CUDA stream"), (True, "is not a CUDA stream"),
    ("0x5000", "is not a CUDA stream"), (2.0, "is not a CUDA stream"),
    (1 << 64, "is not a CUDA stream")])
def test_a_producer_stream_that_is_no_stream_is_refused(bad, why):
    from tecomp.testing.device_arrays import DeviceStandIn

    case = vector_add()
    drv = EmuDriver()
    mod = build_cuda(case.func, driver=drv)
    a, b, c = case.make_args(np.random.default_rng(0), 64)
    mod(DeviceArray(a), DeviceArray(b), DeviceArray(c))    # (a plan for the signature)
    for _ in range(2):
        with pytest.raises(ArgumentError, match=r"parameter B \(argument 2\): the 'stream' "
                           r"entry .* of its __cuda_array_interface__ " + why):
            mod(DeviceArray(a), DeviceStandIn(b, change={"stream": bad}), DeviceArray(c),
                stream=0x5000)
    assert len(drv.launches) == 1


@pytest.mark.gpu
def test_gpu_waits_for_the_producer_stream(gpu_driver):
    """A call on a non-blocking stream while CuPy's current stream is another
    non-blocking one, still writing an argument (CuPy's interface names its current
    stream): the call waits for the writer (much queued work first, so that a race
    would show)."""
    cupy = pytest.importorskip("cupy")
    case = vector_add()
    mod = build_cuda(case.func)
    n = 1 << 22
    writer = cupy.cuda.Stream(non_blocking=True)
    reader = cupy.cuda.Stream(non_blocking=True)
    for _ in range(3):
        b = cupy.ones(n, dtype="float32")
        c = cupy.empty(n, dtype="float32")
        cupy.cuda.Device().synchronize()
        with writer:
            a = cupy.zeros(n, dtype="float32")
            for _ in range(50):          # queued work the reader must not overtake
                a += 1
            assert a.__cuda_array_interface__.get("stream") == writer.ptr
            mod(a, b, c, stream=reader)
        reader.synchronize()
        np.testing.assert_array_equal(cupy.asnumpy(c), np.full(n, 51, "float32"))


def test_pycuda_driver_waits_for_a_producer_stream_through_the_driver_api(monkeypatch):
    """PycudaDriver's wait goes through the driver API (ctypes; pycuda has no call for a
    foreign stream): an event recorded on the producer's stream that the launch stream
    waits for, a cuStreamSynchronize where the host waits, and a producer stream of
    another GPU named in an ArgumentError."""
    from fake_libcuda import FakeLibcuda

    fake = FakeLibcuda(None, devices=2)
    fake.current = [0]
    fake.streams = {0x5000: 0, 0x9000: 0, 0x9900: 1}
    monkeypatch.setattr(runtime_cuda, "libcuda", lambda: fake)
    drv = object.__new__(runtime_cuda.PycudaDriver)   # (no pycuda here: its state only)
    drv.context, drv.ordinal = types.SimpleNamespace(handle=0x1000), 0
    drv.wait_stream(0x9000, 0x5000, "parameter A (argument 1)'s __cuda_array_interface__")
    drv.wait_stream(0x9000, None, "parameter A (argument 1)'s __cuda_array_interface__")
    assert fake.stream_log == [("wait", 0x5000, 0x9000), ("sync", 0x9000)]
    assert fake._events == {}
    with pytest.raises(ArgumentError, match=r"parameter B \(argument 2\)'s "
                       r"__cuda_array_interface__ names stream 0x9900, which is not a stream "
                       r"of device 0"):
        drv.wait_stream(0x9900, 0x5000, "parameter B (argument 2)'s __cuda_array_interface__")
