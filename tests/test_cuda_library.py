"""GPU kernels in exported libraries: ``export_library`` of a ``cuda`` module and
``tc.load_module`` of the library, which launches through the CUDA driver alone.

Without a GPU: the export runs nvcc (skipped without it); the library's fatbin is read
(its header, cubins for sm_80 and sm_90, PTX compute_90); loading without libcuda fails
as documented in a child process; the launcher runs against a stand-in libcuda
(tests/fake_libcuda.py) that checks what it is given and runs the kernel in the CUDA
emulation.  The ``gpu`` test runs the library on a real GPU.  Libraries and calls that
must fail: tests/must_fail/test_cuda_library_errors.py.
"""
import gc
import os
import struct
import subprocess
import sys

import numpy as np
import pytest

import tecomp as tc
from tecomp.runtime import aot_format, cuda_driver
from tecomp.runtime.elf import inspect_library
from tecomp.runtime.fatbin import FATBIN_MAGIC, pick_code, read_fatbin
from tecomp.runtime.nvcc import find_nvcc

sys.path.insert(0, os.path.dirname(__file__))
from cuda_examples import padded_rows_workspace, tiled_matmul, two_kernels_workspace  # noqa: E402
from fake_libcuda import DeviceArray, load_with_fake, one_axis_module  # noqa: E402

from tecomp.codegen.cuda import build_cuda  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc (the CUDA toolkit) is not "
                                "installed: a GPU library cannot be exported")


def scale_module():
    """B = A * 2 over a symbolic n: 64 threads per block, (n + 63) // 64 blocks."""
    return one_axis_module("scale", lambda a: a * 2.0, 64)


@pytest.fixture(scope="module")
def scale_lib(tmp_path_factory):
    if find_nvcc() is None:
        pytest.skip("nvcc is not installed")
    f = scale_module()
    path = str(tmp_path_factory.mktemp("gpulib") / "scale.so")
    f.export_library(path)
    return f, path


def fatbin_of(path):
    with open(path, "rb") as fh:
        image = inspect_library(fh.read(), path, aot_format.SECTION)
    return image.sections[aot_format.FATBIN_SECTION]


@needs_nvcc
def test_library_holds_a_fatbin_for_sm80_sm90_and_ptx(scale_lib):
    _, path = scale_lib
    fatbin = fatbin_of(path)
    magic, version, header, size = struct.unpack_from("<IHHQ", fatbin, 0)
    assert (magic, version, header) == (FATBIN_MAGIC, 1, 16) and size + 16 == len(fatbin)
    entries = read_fatbin(fatbin, path, AssertionError)
    assert sorted(e.name for e in entries) == ["compute_90", "sm_80", "sm_90"]
    for e in entries:   # each cubin an ELF file for EM_CUDA (190) of its architecture
        if e.kind == "cubin":
            assert e.payload[:4] == b"\x7fELF" and struct.unpack_from("<H", e.payload, 18)[0] == 190
    meta = tc.load_module(path).metadata
    assert meta["format_version"] == aot_format.CUDA_FORMAT_VERSION
    assert meta["cuda"]["archs"] == ["sm_80", "sm_90"] and meta["cuda"]["ptx"] == "compute_90"
    assert [k["name"] for k in meta["cuda"]["kernels"]] == ["scale_kernel0"]
    # the sidecar is sha256sum's format
    with open(path + ".sha256") as fh:
        assert fh.read().split()[1] == "scale.so"


def test_the_driver_picks_a_cubin_of_the_family_or_ptx():
    from tecomp.runtime.fatbin import FatbinEntry
    code = [FatbinEntry("cubin", (8, 0), b""), FatbinEntry("cubin", (9, 0), b""),
            FatbinEntry("ptx", (9, 0), b"")]
    assert pick_code(code, (8, 0)).name == "sm_80"
    assert pick_code(code, (8, 9)).name == "sm_80"     # Ada runs sm_80 code
    assert pick_code(code, (9, 0)).name == "sm_90"
    assert pick_code(code, (10, 0)).name == "compute_90"   # Blackwell: PTX, compiled
    assert pick_code(code, (7, 5)) is None


def test_library_for_a_newer_target_arch():
    from tecomp.codegen.cuda_export import library_archs
    assert library_archs(None) == (("sm_80", "sm_90"), "compute_90")
    assert library_archs(tc.Target("cuda -arch=sm_90")) == (("sm_90",), "compute_90")
    assert library_archs(tc.Target("cuda -arch=sm_100")) == (("sm_100",), "compute_100")


@needs_nvcc
def test_launch_through_the_driver_api(scale_lib, monkeypatch):
    """The parameters the loaded module passes to cuLaunchKernel, and the result of the
    kernel the stand-in runs in the emulation."""
    f, path = scale_lib
    g, fake = load_with_fake(path, f.cuda_source, monkeypatch)
    for n in (1000, 64, 1):
        a = np.random.default_rng(n).standard_normal(n).astype("float32")
        b = np.zeros(n, "float32")
        g(DeviceArray(a), DeviceArray(b))
        np.testing.assert_array_equal(b, a * 2)
        name, grid, block, shared, stream, values = fake.launches[-1]
        assert (name, grid, block, shared, stream) == (
            "scale_kernel0", ((n + 63) // 64, 1, 1), (64, 1, 1), 0, 0)
        assert values == [a.ctypes.data, b.ctypes.data, n]
    assert fake.images == [fatbin_of(path)]     # the fatbin, loaded once
    assert fake.calls.count("cuCtxSynchronize") == 3
    g(DeviceArray(np.zeros(0, "float32")), DeviceArray(np.zeros(0, "float32")))
    assert len(fake.launches) == 3              # nothing to compute: no launch
    g(DeviceArray(a), DeviceArray(b), stream=0x5000)   # on the stream, without waiting
    assert fake.launches[-1][4] == 0x5000 and fake.calls.count("cuCtxSynchronize") == 4


@needs_nvcc
def test_kernels_run_on_the_arrays_gpu(scale_lib, monkeypatch):
    """On a machine with two GPUs, a call's kernels run on the GPU its arrays live on:
    the library's code is loaded once per device, in that device's context; with
    ``module.device`` set, on that device only."""
    f, path = scale_lib
    a = np.arange(64, dtype="float32")
    b1, b0 = np.zeros(64, "float32"), np.zeros(64, "float32")
    on = {b1.ctypes.data: 1}
    g, fake = load_with_fake(path, f.cuda_source, monkeypatch, devices=2,
                             device_of=lambda ptr: on.get(ptr, 0))
    on[a.ctypes.data] = 1
    g(DeviceArray(a), DeviceArray(b1))
    on[a.ctypes.data] = 0
    g(DeviceArray(a), DeviceArray(b0))
    g(DeviceArray(a), DeviceArray(b0))
    np.testing.assert_array_equal(b1, a * 2)
    np.testing.assert_array_equal(b0, a * 2)
    assert fake.loaded_on == [1, 0]             # loaded once per device
    assert fake.launched_on == [1, 0, 0]
    g.device = 0
    g(DeviceArray(a), DeviceArray(b0))
    assert fake.launched_on[-1] == 0 and fake.loaded_on == [1, 0]


@needs_nvcc
@pytest.mark.parametrize("make", [tiled_matmul, two_kernels_workspace, padded_rows_workspace],
                         ids=["matmul", "workspace", "padded-workspace"])
def test_exported_kernels_run_end_to_end(make, tmp_path, monkeypatch):
    """Shared memory (matmul) and a global workspace between two kernels (allocated with
    cuMemAlloc, kept by the module for its next calls, freed with it; with padded rows, to
    its last element: the library's metadata records that span)."""
    case = make()
    f = build_cuda(case.func)
    path = str(tmp_path / f"{case.name}.so")
    f.export_library(path)
    g, fake = load_with_fake(path, f.cuda_source, monkeypatch)
    args = case.make_args(np.random.default_rng(0))
    g(*[DeviceArray(a) if isinstance(a, np.ndarray) else a for a in args])
    for k, want in case.expected(args).items():
        np.testing.assert_allclose(args[k], want, rtol=max(case.rtol, 1e-6), atol=case.atol)
    assert [x[0] for x in fake.launches] == [k.name for k in f.kernels]
    assert [x[3] for x in fake.launches] == [k.dynamic_shared for k in f.kernels]
    assert len(fake.allocs) == len(f.cuda_source.workspaces)
    g(*[DeviceArray(a) if isinstance(a, np.ndarray) else a for a in args])  # the same ones
    assert len(fake.allocs) == len(f.cuda_source.workspaces)
    del g
    gc.collect()
    assert fake.allocs == {}


@needs_nvcc
def test_load_without_libcuda_raises_in_a_child(scale_lib):
    """No crash: the documented RuntimeUnavailableError, naming what was looked for (the
    child hides any libcuda this machine has)."""
    _, path = scale_lib
    code = f"""
import ctypes.util, numpy as np, tecomp as tc
from tecomp.runtime import cuda_driver
cuda_driver.LIBCUDA_NAMES = ("libcuda-absent.so.1",)
ctypes.util.find_library = lambda name: None
g = tc.load_module({path!r})
try:
    g(np.zeros(4, "float32"), np.zeros(4, "float32"))
except tc.RuntimeUnavailableError as e:
    print("RAISED", e)
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": ROOT})
    assert proc.returncode == 0, proc.stderr
    assert "RAISED no CUDA driver on this machine" in proc.stdout
    assert "libcuda-absent.so.1" in proc.stdout


@pytest.mark.gpu
def test_gpu_library_on_a_real_gpu(tmp_path):
    """Export, then load and run in a fresh process with torch CUDA tensors: the driver
    API alone (no pycuda, no nvcc in the child)."""
    try:
        cuda_driver.libcuda()
    except tc.RuntimeUnavailableError as exc:
        pytest.skip(str(exc))
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU for torch")
    if find_nvcc() is None:
        pytest.skip("nvcc is not installed")
    path = str(tmp_path / "scale.so")
    scale_module().export_library(path)
    code = f"""
import sys, time, torch, tecomp as tc
sys.modules["pycuda"] = None       # the library must not need pycuda
t0 = time.perf_counter()
g = tc.load_module({path!r})
a = torch.randn(1000, device="cuda"); b = torch.empty_like(a)
g(a, b); torch.cuda.synchronize()
print("FIRST", time.perf_counter() - t0)
assert torch.equal(b, a * 2)
try:
    g(a.cpu(), b)
except tc.ArgumentError as e:
    print("CPU", e)
print("OK")
"""
    env = dict(os.environ, PATH="/usr/bin:/bin", PYTHONPATH=ROOT)   # no nvcc on its PATH
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "OK" in proc.stdout and "CPU" in proc.stdout, proc.stdout


@needs_nvcc
def test_host_assertions_travel_with_the_library(scale_lib, tmp_path, monkeypatch):
    """A condition on the sizes the host checks before launching (comparisons, logic and
    selects: the GPU format's expressions) is checked by the loaded module too."""
    import dataclasses

    from tecomp.codegen.cuda_export import export_cuda_library
    from tecomp.ir.expr import GE, LT, And, Const, Not, Select
    from tecomp.runtime.cuda import CudaModule

    f, _ = scale_lib
    n = f.cuda_source.kernels[0].params[2].obj
    cond = And(LT(n, Const(100)), Not(GE(Select(LT(n, Const(0)), Const(0), n, "int32"),
                                        Const(90))))
    cs = dataclasses.replace(f.cuda_source, host_asserts=[(cond, "n must be below 90")])
    path = str(tmp_path / "asserting.so")
    CudaModule(cs, exporter=export_cuda_library).export_library(path)
    g, fake = load_with_fake(path, cs, monkeypatch)
    (got, message), = g.cuda_source.host_asserts
    assert message == "n must be below 90" and str(got) == str(cond)
    a = np.ones(89, "float32")
    b = np.zeros(89, "float32")
    g(DeviceArray(a), DeviceArray(b))
    assert (b == 2).all()
    a = np.ones(95, "float32")
    with pytest.raises(tc.ArgumentError, match=r"scale: n must be below 90"):
        g(DeviceArray(a), DeviceArray(a.copy()))


LONG = os.environ.get("TECOMP_LONG_TESTS", "") not in ("", "0")


def tma_dense(M, N, K, producer):
    """``dense(X, W)`` float16 on the wgmma template's TMA rings, built for sm_90a."""
    from tecomp.strategy import cuda as sc
    sm90a = "cuda -arch=sm_90a"
    X = tc.placeholder((M, K), "float16", name="X")
    W = tc.placeholder((N, K), "float16", name="W")
    Y = tc.nn.dense(X, W)
    cfg = sc.WmmaConfig(8, 1, 1, 8, 64, family="wgmma", stages=3, producer=producer)
    return tc.build(sc.schedule_dense(Y, sm90a, config=cfg), [X, W, Y], target=sm90a)


@needs_nvcc
@pytest.mark.parametrize("M,N,K,producer", [
    (100, 72, 88, "tma"),          # odd extents: the boxes' out-of-bounds zeros
    pytest.param(128, 128, 192, "tma_warp", marks=pytest.mark.skipif(
        not LONG, reason="more of the same: set TECOMP_LONG_TESTS=1")),   # a producer warp
])
def test_exported_tma_kernels_encode_their_maps_when_called(M, N, K, producer, tmp_path,
                                                            monkeypatch):
    """A module whose kernels copy tiles with TMA (the wgmma template's swizzled rings):
    its library's metadata holds each tensor map's box (the parameter it views, its
    dimensions, the swizzle), and the loaded library encodes the maps from each call's
    arrays through the driver's cuTensorMapEncodeTiled (here a stand-in that writes the
    emulation's maps and runs the kernel in the emulation), with no compiler involved."""
    from tecomp.runtime import nvcc
    f = tma_dense(M, N, K, producer)
    path = str(tmp_path / "dense.so")
    f.export_library(path)
    meta = tc.load_module(path).metadata
    assert meta["cuda"]["archs"] == ["sm_90a"] and meta["cuda"]["ptx"] == "compute_90a"
    maps = [p["obj"] for k in meta["cuda"]["kernels"] for p in k["params"]
            if p["dtype"] == "tensor_map"]
    assert maps == [["tma", {"src": 1, "swizzle": "128B", "dims": [[1, 1, 64, "whole", 0],
                                                                   [0, 1, 128, "whole", 0]]}],
                    ["tma", {"src": 0, "swizzle": "128B", "dims": [[1, 1, 64, "whole", 0],
                                                                   [0, 1, 128, "whole", 0]]}]]
    def no_compiler(*a, **k):
        raise AssertionError("the loaded library ran nvcc")
    monkeypatch.setattr(nvcc, "_run_nvcc", no_compiler)
    g, fake = load_with_fake(path, f.cuda_source, monkeypatch)
    rng = np.random.default_rng(7)
    x = rng.standard_normal((M, K)).astype(np.float16)
    w = rng.standard_normal((N, K)).astype(np.float16)
    y = np.full((M, N), np.nan, np.float16)
    g(DeviceArray(x), DeviceArray(w), DeviceArray(y))
    want = x.astype(np.float64) @ w.astype(np.float64).T
    np.testing.assert_allclose(y.astype(np.float64), want, rtol=2e-2, atol=5e-2)
    enc = [c[1] for c in fake.calls if isinstance(c, tuple) and c[0] == "cuTensorMapEncodeTiled"]
    # W then X: [K, rows] as they lie, boxes of 64 k x 128 rows, CU_TENSOR_MAP_SWIZZLE_128B,
    # out-of-bounds elements read as zeros (CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE = 0)
    assert [(e["dims"], e["box"], e["swizzle"], e["oob_fill"], e["map_aligned_64"])
            for e in enc] == [([K, N], [64, 128], 3, 0, True), ([K, M], [64, 128], 3, 0, True)]
    assert enc[0]["address"] == w.ctypes.data and enc[1]["address"] == x.ctypes.data


@pytest.mark.gpu
def test_exported_tma_library_on_a_real_gpu(tmp_path):
    """The TMA library loaded and run in a fresh process (no nvcc, no pycuda): its maps
    encoded by the driver's cuTensorMapEncodeTiled from torch CUDA tensors, odd extents."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma and TMA need an sm_90 GPU")
    if find_nvcc() is None:
        pytest.skip("nvcc is not installed")
    path = str(tmp_path / "dense.so")
    tma_dense(1000, 3072, 768, "tma").export_library(path)
    code = f"""
import sys, torch, tecomp as tc
sys.modules["pycuda"] = None
g = tc.load_module({path!r})
x = torch.randn(1000, 768, device="cuda").half(); w = torch.randn(3072, 768, device="cuda").half()
y = torch.full((1000, 3072), float("nan"), device="cuda").half()
g(x, w, y); torch.cuda.synchronize()
want = (x.double() @ w.double().T)
err = ((y.double() - want).abs() / (want.abs() + 1)).max().item()
print("ERR", err)
assert err < 2e-2, err
print("OK")
"""
    env = dict(os.environ, PATH="/usr/bin:/bin", PYTHONPATH=ROOT)   # no nvcc on its PATH
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "OK" in proc.stdout, proc.stdout


@needs_nvcc
def test_exported_library_waits_for_the_producer_stream(scale_lib, monkeypatch):
    """Through the driver API: an array whose interface names its producer's stream
    (version 3) makes the launch stream wait for an event recorded there (once per
    stream, before the launch; the host waits for it when the call waits anyway); none
    for the launch stream itself; a producer stream of another GPU is refused, naming the
    array."""
    from tecomp.testing.device_arrays import DeviceStandIn

    f, path = scale_lib
    a = np.arange(64, dtype="float32")
    b = np.zeros(64, "float32")
    g, fake = load_with_fake(path, f.cuda_source, monkeypatch, devices=2)
    fake.streams.update({0x5000: 0, 0x9000: 0, 0x9900: 1})

    def call(sa, sb, **kw):
        fake.stream_log.clear()
        b[...] = 0
        g(DeviceStandIn(a, change={"stream": sa}), DeviceStandIn(b, change={"stream": sb}),
          **kw)
        np.testing.assert_array_equal(b, a * 2)
        return fake.stream_log

    for _ in range(2):   # the checked call, then the plan's
        assert call(0x9000, 0x9000, stream=0x5000) == [("wait", 0x5000, 0x9000),
                                                       ("launch", 0x5000)]
        assert call(0x9000, None) == [("sync", 0x9000), ("launch", 0)]
        assert call(0x5000, None, stream=0x5000) == [("launch", 0x5000)]
        assert call(1, None) == [("launch", 0)]
        assert call(None, None, stream=0x5000) == [("launch", 0x5000)]
        assert fake._events == {}    # each event destroyed
        with pytest.raises(tc.ArgumentError, match=r"parameter B \(argument 2\)'s "
                           r"__cuda_array_interface__ names stream 0x9900, which is not a "
                           r"stream of device 0"):
            call(None, 0x9900, stream=0x5000)
