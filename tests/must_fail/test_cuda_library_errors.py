"""GPU libraries that must not load and calls that must not launch.

A library ``export_library`` wrote for a ``cuda`` module is refused as a CPU library is
when it was tampered with (its sidecar), and also when its fatbin is damaged or not the
one its metadata describes; a call is refused without a CUDA driver (in a child process:
tests/test_cuda_library.py), on a GPU the fatbin has no code for, with a CPU array, an
array of the wrong dtype or one on another GPU.  The driver is the stand-in of
tests/fake_libcuda.py.  Without nvcc the export is refused (checked everywhere) and the
other tests skip (nothing can be exported).
"""
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

import tecomp as tc
from tecomp.runtime import aot_format, nvcc
from tecomp.runtime.libfiles import write_sidecar
from tecomp.testing.edges import digest_rewritten

sys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))
from fake_libcuda import DeviceArray, load_with_fake, one_axis_module  # noqa: E402

def inc_module():
    return one_axis_module("inc", lambda a: a + 1.0, 32)


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    """(module, library path, library bytes); skipped without nvcc (nothing can be
    exported)."""
    if nvcc.find_nvcc() is None:
        pytest.skip("nvcc (the CUDA toolkit) is not installed: a GPU library cannot be "
                    "exported")
    f = inc_module()
    path = str(tmp_path_factory.mktemp("gpulib") / "inc.so")
    f.export_library(path)
    with open(path, "rb") as fh:
        return f, path, fh.read()


def test_export_without_nvcc(tmp_path, monkeypatch):
    monkeypatch.setattr(nvcc, "find_nvcc", lambda: None)
    with pytest.raises(tc.RuntimeUnavailableError, match=r"nvcc was not found on PATH \(nor "
                                                         r"under \$CUDA_HOME/bin\): install the "
                                                         r"CUDA toolkit"):
        inc_module().export_library(str(tmp_path / "inc.so"))
    assert list(tmp_path.iterdir()) == []


def copy_with(tmp_path, data, name="bad.so", sidecar=True):
    path = str(tmp_path / name)
    with open(path, "wb") as fh:
        fh.write(data)
    if sidecar:
        write_sidecar(path)
    return path


def fatbin_offset(data):
    return data.index((0xBA55ED50).to_bytes(4, "little"))


def test_tampered_fatbin_is_refused_by_the_sidecar(lib, tmp_path):
    f, path, data = lib
    k = fatbin_offset(data) + 200
    bad = copy_with(tmp_path, data[:k] + bytes([data[k] ^ 0xFF]) + data[k + 1:], sidecar=False)
    shutil.copy(path + ".sha256", bad + ".sha256")
    with pytest.raises(tc.LoadError, match=r"library '.*bad.so' does not match its sha256 "
                                           r"sidecar"):
        tc.load_module(bad)


def test_damaged_fatbin_is_refused_even_unverified(lib, tmp_path):
    _, _, data = lib
    k = fatbin_offset(data)
    bad = copy_with(tmp_path, data[:k] + b"\0\0\0\0" + data[k + 4:])
    with pytest.raises(tc.LoadError, match=r"its GPU code is not a valid fatbin \(magic 0x0"):
        tc.load_module(bad)


def test_fatbin_other_than_the_metadata_says(lib, tmp_path):
    _, _, data = lib
    old = b'"archs":["sm_80","sm_90"]'
    new = b'"archs":["sm_80","sm_86"]'
    bad = copy_with(tmp_path, digest_rewritten(data, data.replace(old, new)))
    with pytest.raises(tc.LoadError, match=r"its fatbin \(\d+ bytes: sm_80, sm_90, PTX "
                                           r"compute_90\) is not the one its metadata "
                                           r"describes \(\d+ bytes: sm_80, sm_86 and PTX "
                                           r"compute_90\)"):
        tc.load_module(bad)


def test_gpu_library_metadata_damaged(lib, tmp_path):
    _, _, data = lib
    bad = copy_with(tmp_path, data.replace(b'"ptx":"compute_90"', b'"ptx":"compute_9x"'))
    with pytest.raises(tc.LoadError, match=r"metadata is damaged .*the PTX version "
                                           r"'compute_9x'"):
        tc.load_module(bad)


def test_device_the_library_has_no_code_for(lib, monkeypatch):
    f, path, _ = lib
    g, fake = load_with_fake(path, f.cuda_source, monkeypatch, capability=(7, 5))
    a = np.zeros(8, "float32")
    with pytest.raises(tc.DeviceCodeError, match=r"library '.*inc.so' holds GPU code for "
                                                 r"sm_80, sm_90, PTX compute_90, none of which "
                                                 r"runs on device 0 \(Fake GPU \(emulated\), "
                                                 r"compute capability 7.5, sm_75\): export it "
                                                 r"with tc.build\(..., target='cuda "
                                                 r"-arch=sm_75'\)"):
        g(DeviceArray(a), DeviceArray(a.copy()))
    assert fake.launches == [] and fake.images == []     # refused before the first launch


def test_driver_finds_no_code_for_the_gpu(lib, monkeypatch):
    """A newer GPU whose driver is too old for the library's PTX: cuModuleLoadData
    answers CUDA_ERROR_NO_BINARY_FOR_GPU."""
    f, path, _ = lib
    g, fake = load_with_fake(path, f.cuda_source, monkeypatch, capability=(10, 0),
                             load_status=209)
    a = np.zeros(8, "float32")
    with pytest.raises(tc.DeviceCodeError, match=r"the CUDA driver found no code for device 0 "
                                                 r"\(Fake GPU \(emulated\), sm_100\)"):
        g(DeviceArray(a), DeviceArray(a.copy()))
    assert fake.launches == []


def test_cpu_array_to_a_gpu_kernel(lib, monkeypatch):
    f, path, _ = lib
    g, fake = load_with_fake(path, f.cuda_source, monkeypatch)
    a = np.zeros(8, "float32")
    with pytest.raises(tc.ArgumentError, match=r"parameter A \(argument 1\) expects a device "
                                               r"array \(__cuda_array_interface__\) of float32 "
                                               r"with shape \(n,\), got a 1-d float32 array of "
                                               r"shape \(8,\) in host \(CPU\) memory: pass a "
                                               r"device array of float32"):
        g(a, DeviceArray(a.copy()))
    torch = pytest.importorskip("torch")
    with pytest.raises(tc.ArgumentError, match=r"parameter B \(argument 2\) expects a device "
                                               r"array .* in host \(CPU\) memory"):
        g(DeviceArray(a), torch.zeros(8))
    assert fake.launches == []


def test_device_array_of_the_wrong_dtype(lib, monkeypatch):
    f, path, _ = lib
    g, fake = load_with_fake(path, f.cuda_source, monkeypatch)
    with pytest.raises(tc.ArgumentError, match=r"parameter A \(argument 1\) expects float32, "
                                               r"got float64"):
        g(DeviceArray(np.zeros(8)), DeviceArray(np.zeros(8, "float32")))


@pytest.mark.parametrize("devices, module_device, match", [
    ({"A": 0, "B": 1}, 0, r"parameter B \(argument 2\) is an array in device 1, but inc's "
                          r"kernels run on device 0 \(module.device\): pass an array on "
                          r"cuda:0 \(tensor.to\('cuda:0'\)\), or set module.device = 1"),
    ({"A": 1, "B": 0}, None, r"parameter B \(argument 2\) is an array in device 0, but "
                             r"parameter A \(argument 1\) is in device 1: the arrays of one "
                             r"call of inc must live on one GPU"),
    ({"A": 0, "B": None}, None, r"parameter B \(argument 2\) is an array in memory the CUDA "
                                r"driver does not know as device memory; inc's kernels take "
                                r"device arrays"),
], ids=["not module.device", "two GPUs in one call", "not device memory"])
@pytest.mark.parametrize("after_a_call", [False, True], ids=["first call", "after a call"])
def test_device_array_on_another_device(lib, monkeypatch, devices, module_device, match,
                                        after_a_call):
    """Where the arrays live is checked on every call (``after_a_call``: one of the same
    shapes on the right device ran first, and its plan is not reused for this one)."""
    f, path, _ = lib
    a, b = np.zeros(8, "float32"), np.zeros(8, "float32")
    where = {}
    g, fake = load_with_fake(path, f.cuda_source, monkeypatch, devices=2,
                             device_of=lambda ptr: where.get(ptr, 0))
    g.device = module_device
    if after_a_call:
        good = module_device if module_device is not None else devices["A"]
        where.update({a.ctypes.data: good, b.ctypes.data: good})
        g(DeviceArray(a), DeviceArray(b))
    launched = len(fake.launches)
    where.update({a.ctypes.data: devices["A"], b.ctypes.data: devices["B"]})
    with pytest.raises(tc.ArgumentError, match=match):
        g(DeviceArray(a), DeviceArray(b))
    assert len(fake.launches) == launched


def test_loaded_gpu_library_has_no_source_and_is_not_exported_again(lib, tmp_path):
    _, path, _ = lib
    g = tc.load_module(path)
    with pytest.raises(tc.LoadError, match=r"has no source \(the library holds the GPU code "
                                           r"as a fatbin: sm_80, sm_90, PTX compute_90\)"):
        g.get_source("cuda")
    with pytest.raises(tc.BuildError, match=r"is a library already: copy the file and its "
                                            r".sha256 sidecar"):
        g.export_library(str(tmp_path / "again.so"))


def test_gpu_library_format_refused_by_a_cpu_only_reader(lib):
    """What a tecomp that reads only CPU libraries says of a GPU library: its format."""
    _, _, data = lib
    start = data.index(b'{"format":"tecomp-aot-library"')
    doc = data[start:data.index(b"\0", start)].replace(b'"format_version":4',
                                                       b'"format_version":9')
    with pytest.raises(tc.LoadError, match=r"in library format 9; this tecomp .* reads formats "
                                           r"2 \(CPU\) and 4 \(GPU\)"):
        aot_format.parse_metadata(doc, "library 'x.so'")


def test_cli_bench_of_a_gpu_library(lib):
    """``tecomp bench`` times CPU libraries: a GPU library is refused with a message,
    not a traceback."""
    _, path, _ = lib
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    p = subprocess.run([sys.executable, "-m", "tecomp", "bench", path, "--var", "n=64"],
                       capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": root})
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert re.fullmatch(r"tecomp bench: error: library '.*inc.so' holds GPU kernels, which take "
                        r"device arrays: tecomp bench times CPU libraries; .*\n", p.stderr)


def with_metadata(tmp_path, data, change):
    """A copy of the library whose metadata ``change(meta)`` edited (padded with spaces
    to its length, with a matching sha256 beside the code and a matching sidecar: a
    forged library, not a damaged one)."""
    import json
    start = data.index(b'{"format"')
    meta, n = json.JSONDecoder().raw_decode(data[start:].decode("latin-1"))
    for c in meta.get("param_checks", []):
        c["uses"] = ["u"]  # (room for the edits)
    change(meta)
    text = json.dumps(meta, separators=(",", ":")).encode()
    assert len(text) <= n
    return copy_with(tmp_path, digest_rewritten(data, data[:start] + text.ljust(n)
                                                + data[start + n:]))


def test_metadata_with_fewer_kernel_parameters_than_the_code(lib, tmp_path, monkeypatch):
    """The launch would pass 2 arguments to a kernel that reads 3 (the driver reads the
    code's parameters: cuFuncGetParamInfo)."""
    f, _, data = lib
    bad = with_metadata(tmp_path, data, lambda m: m["cuda"]["kernels"][0]["params"].pop(0))
    g, fake = load_with_fake(bad, f.cuda_source, monkeypatch)
    a = np.zeros(40, "float32")
    with pytest.raises(tc.LoadError, match=r"kernel inc_kernel0's GPU code takes 3 parameters "
                                           r"of \[8, 8, 4\] bytes, and its metadata describes "
                                           r"2: B \(pointer\), n \(int32\); the metadata is "
                                           r"not the one exported with this code"):
        g(DeviceArray(a), DeviceArray(a.copy()))
    assert fake.launches == []


def test_metadata_with_a_block_of_no_threads(lib, tmp_path):
    """A kernel launched with no threads computes nothing: the output was left as it was,
    silently."""
    _, _, data = lib

    def change(m):
        m["cuda"]["kernels"][0]["block"][0] = ["const", 0, "int32"]
    bad = with_metadata(tmp_path, data, change)
    with pytest.raises(tc.LoadError, match=r"metadata is damaged or not tecomp's \(the launch "
                                           r"dimensions of kernel 0\)"):
        tc.load_module(bad)


@pytest.mark.slow
@pytest.mark.parametrize("dims", [
    [[0, 1, 64, "whole", 0], [0, 1, 128, "whole", 0]],      # the rows twice
    [[1, 1, 64, "inner", 9999], [0, 1, 128, "whole", 0]],   # a row run on past its end
], ids=["axis_twice", "inner_past_its_block"])
def test_forged_tensor_map_box_is_refused_before_the_copy(dims, tmp_path, monkeypatch):
    """A TMA library whose metadata gives a tensor map's box that reads past its tensor
    (each field in the reader's range; the sidecar matches: forged, not damaged) is
    refused when the map is encoded, before the launch; before the check the copies read
    past the argument (in the emulation behind the stand-in driver: values from outside
    the array in the output)."""
    from test_cuda_library import tma_dense
    M, N, K = 100, 72, 88
    f = tma_dense(M, N, K, "tma")
    path = str(tmp_path / "dense.so")
    f.export_library(path)
    with open(path, "rb") as fh:
        data = fh.read()

    def change(m):
        for k in m["cuda"]["kernels"]:
            k["stage"] = "s"
            for p in k["params"]:
                p["name"] = p["name"][0]       # (room for the edit)
                if p["dtype"] == "tensor_map":
                    p["obj"][1]["dims"] = dims
    bad = with_metadata(tmp_path, data, change)
    g, fake = load_with_fake(bad, f.cuda_source, monkeypatch)
    x = np.zeros((M, K), np.float16)
    w = np.zeros((N, K), np.float16)
    y = np.zeros((M, N), np.float16)
    with pytest.raises(tc.TensorMapError, match=r"tensor map of '[WX]': dimensions .* reach "
                                                r"byte \d+ of a tensor of \d+ bytes .* it "
                                                r"would read past the tensor; .* export the "
                                                r"library again"):
        g(DeviceArray(x), DeviceArray(w), DeviceArray(y))
    assert fake.launches == []


def test_zero_d_device_array_in_host_memory_or_on_another_gpu(tmp_path, monkeypatch):
    """A 0-d array has one element: its memory is checked as any other's (the device
    check skipped arrays of no dimensions as if they had no elements, and a 0-d output
    in host memory or on another GPU was launched on)."""
    if nvcc.find_nvcc() is None:
        pytest.skip("nvcc (the CUDA toolkit) is not installed: a GPU library cannot be "
                    "exported")
    from cuda_examples import L, S, thread
    from tecomp.ir import Buffer, PrimFunc, Var

    n, tx = Var("n"), Var("tx")
    A, O = Buffer("A", (n,), "float32"), Buffer("O", (), "float32")
    body = thread(tx, 1, "threadIdx.x", S(O, L(A, 0)))
    f = tc.build(PrimFunc("first", (A, O), body), target="cuda")
    path = str(tmp_path / "first.so")
    f.export_library(path)
    a, o = np.arange(4, dtype="float32"), np.zeros((), "float32")
    where = {a.ctypes.data: 0, o.ctypes.data: None}
    g, fake = load_with_fake(path, f.cuda_source, monkeypatch, devices=2,
                             device_of=lambda ptr: where.get(ptr))
    with pytest.raises(tc.ArgumentError, match=r"parameter O \(argument 2\) is an array in "
                                               r"memory the CUDA driver does not know as "
                                               r"device memory"):
        g(DeviceArray(a), DeviceArray(o))
    where[o.ctypes.data] = 1
    with pytest.raises(tc.ArgumentError, match=r"parameter O \(argument 2\) is an array in "
                                               r"device 1, but parameter A \(argument 1\) is "
                                               r"in device 0"):
        g(DeviceArray(a), DeviceArray(o))
    assert fake.launches == []


def test_stream_of_another_gpu(lib, monkeypatch):
    """Arrays on cuda:1 and a stream of cuda:0: the launch on a stream of another
    context fails, and the call says which stream, instead of the driver's bare
    CUresult (a RuntimeUnavailableError before)."""
    f, path, _ = lib
    a, b = np.zeros(8, "float32"), np.zeros(8, "float32")
    g, fake = load_with_fake(path, f.cuda_source, monkeypatch, devices=2,
                             device_of=lambda ptr: 1)
    fake.streams = {0x5000: 0, 0x6000: 1}
    g(DeviceArray(a), DeviceArray(b), stream=0x6000)     # cuda:1's stream: runs
    with pytest.raises(tc.ArgumentError, match=r"stream=0x5000 is not a stream of device 1, "
                                               r"where the kernels run \(it belongs to "
                                               r"another context: a stream of another GPU; "
                                               r"the launch failed with CUresult 400\): pass "
                                               r"a stream of cuda:1"):
        g(DeviceArray(a), DeviceArray(b), stream=0x5000)
    assert len(fake.launches) == 1


def test_producer_stream_of_another_gpu(lib, monkeypatch):
    """An array on cuda:1 whose __cuda_array_interface__ names a stream of cuda:0 as its
    producer's (version 3): the event recorded there fails, and the call says which
    array named which stream, before anything is launched."""
    from tecomp.testing.device_arrays import DeviceStandIn

    f, path, _ = lib
    a, b = np.zeros(8, "float32"), np.zeros(8, "float32")
    g, fake = load_with_fake(path, f.cuda_source, monkeypatch, devices=2,
                             device_of=lambda ptr: 1)
    fake.streams = {0x5000: 0, 0x6000: 1}
    with pytest.raises(tc.ArgumentError, match=r"parameter A \(argument 1\)'s "
                                               r"__cuda_array_interface__ names stream 0x5000, "
                                               r"which is not a stream of device 1, where the "
                                               r"kernels run \(it belongs to another context"):
        g(DeviceStandIn(a, change={"stream": 0x5000}), DeviceArray(b), stream=0x6000)
    assert fake.launches == []


def test_metadata_with_a_scalar_of_another_size_than_the_code(lib, tmp_path, monkeypatch):
    """The metadata says the kernel's n is an int64 where the code takes an int32 (or
    the other way round, where half of an 8-byte value the code reads would be stray
    bytes): only the pointers' sizes were compared before."""
    f, _, data = lib

    def change(m):
        m["vars"][0]["dtype"] = "int64"      # the variable n and the kernel's parameter
        m["cuda"]["kernels"][0]["params"][2]["dtype"] = "int64"
    bad = with_metadata(tmp_path, data, change)
    g, fake = load_with_fake(bad, f.cuda_source, monkeypatch)
    a = np.zeros(40, "float32")
    with pytest.raises(tc.LoadError, match=r"kernel inc_kernel0's GPU code takes 3 parameters "
                                           r"of \[8, 8, 4\] bytes, and its metadata describes "
                                           r"3: A \(pointer\), B \(pointer\), n \(int64\)"):
        g(DeviceArray(a), DeviceArray(a.copy()))
    assert fake.launches == []
