"""Hopper's asynchronous tensor-core machinery (tecomp/codegen/cuda_hopper.py): mbarriers,
bulk copies completing on them, and wgmma.mma_async with shared-memory descriptors, run
together by a warp-specialised GEMM tile (tecomp/testing/hopper_gemm.py) in the CUDA
emulation, and compiled by nvcc / ptxas for sm_90a: the PTX has the instructions, ptxas
does not serialise the wgmmas, nothing spills, and (where nvdisasm or cuobjdump is on
PATH) the SASS has HGMMA."""
from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
import tempfile

import numpy as np
import pytest

from tecomp.target import tma
from tecomp.codegen.cuda_hopper import SWIZZLE, WGMMA_N, wgmma_desc
from tecomp.errors import BuildError
from tecomp.runtime.nvcc import compile_ptx, find_nvcc
from tecomp.target.cuda import block_shared_limit
from tecomp.testing import hopper_gemm as hg
from tecomp.testing import wgmma_probe as wp
from tecomp.testing.gpu_resources import parse_ptxas
from helpers import gpu_driver  # noqa: F401  (a fixture)

needs_cxx = pytest.mark.skipif(shutil.which("g++") is None and shutil.which("clang++") is None,
                               reason="no C++ compiler for the CUDA emulation")
needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc is not on PATH")

#: the variants the emulation tests share (one library): (stages, swizzle, bf16, epilogue
#: [, tma[, persistent]])
VARIANTS = [(2, 1, 0, 1), (3, 0, 1, 0), (2, 1, 1, 0), (2, 0, 0, 1), (2, 1, 0, 0),
            (2, 1, 0, 1, 1), (3, 0, 1, 0, 1), (2, 1, 1, 0, 1), (2, 0, 0, 1, 1),
            (3, 1, 1, 1, 1, 1), (2, 0, 0, 0, 0, 1)]


def reference(a, b, bias, bf16):
    ra = hg.from_bits(hg.to_bits(a, bf16), bf16).astype(np.float64)
    rb = hg.from_bits(hg.to_bits(b, bf16), bf16).astype(np.float64)
    return ra @ rb.T + (0 if bias is None else bias)


@needs_cxx
@pytest.mark.parametrize("M,N,K,stages,swizzle,bf16,epilogue", [
    (100, 72, 80, 2, 1, 0, 1),     # odd extents, 128B swizzle, float16, + bias
    (70, 60, 200, 3, 0, 1, 0),     # no swizzle, bfloat16, three stages wrapping twice
    (130, 128, 130, 2, 1, 1, 0),   # 128B swizzle, bfloat16
    (64, 64, 64, 2, 0, 0, 1),      # exactly one tile
])
def test_warp_specialised_wgmma_gemm_in_the_emulation(M, N, K, stages, swizzle, bf16, epilogue):
    rng = np.random.default_rng(M * N + K)
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((N, K)).astype(np.float32)
    bias = rng.standard_normal(N).astype(np.float32) if epilogue else None
    c = hg.run_emu(a, b, bias, bn=64, stages=stages, swizzle=swizzle, bf16=bool(bf16),
                   variants=VARIANTS)
    np.testing.assert_allclose(c, reference(a, b, bias, bool(bf16)), rtol=1e-4, atol=1e-3)


@needs_cxx
@pytest.mark.parametrize("M,N,K,stages,swizzle,bf16,epilogue", [
    (100, 72, 80, 2, 1, 0, 1),     # odd M and N, K not a multiple of 64: 128B swizzle, f16
    (70, 60, 200, 3, 0, 1, 0),     # the [K / 8, rows, 8] view, bfloat16, the ring wrapping
    (130, 136, 136, 2, 1, 1, 0),   # 128B swizzle, bfloat16, 3 x 3 blocks
    (33, 9, 8, 2, 0, 0, 1),        # one k block of 8, a 33 x 9 corner of a tile
])
def test_tma_tensor_maps_feed_the_gemm_without_padding(M, N, K, stages, swizzle, bf16,
                                                       epilogue):
    """The producer copies boxes of A and B as they are through tensor maps: the box past
    the operands' extents arrives as zeros, its whole bytes complete the stage's barrier,
    and the 128B swizzle the copy applies is the one the wgmma descriptors read."""
    rng = np.random.default_rng(M * N + K)
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((N, K)).astype(np.float32)
    bias = rng.standard_normal(N).astype(np.float32) if epilogue else None
    c = hg.run_emu(a, b, bias, bn=64, stages=stages, swizzle=swizzle, bf16=bool(bf16),
                   variants=VARIANTS, tma_maps=True)
    np.testing.assert_allclose(c, reference(a, b, bias, bool(bf16)), rtol=1e-4, atol=1e-3)


@needs_cxx
@pytest.mark.parametrize("M,N,K,blocks,stages,swizzle,bf16,epilogue,tma_maps", [
    (200, 136, 72, 3, 3, 1, 1, 1, True),    # 4 x 3 tiles over 3 blocks, TMA, bf16, + bias
    (600, 72, 24, 7, 2, 0, 0, 0, False),    # 10 x 2 tiles (two groups of 8 rows), 7 blocks
    (64, 64, 64, 5, 3, 1, 1, 1, True),      # one tile: four of the five blocks have none
])
def test_persistent_blocks_loop_over_the_tiles(M, N, K, blocks, stages, swizzle, bf16, epilogue,
                                               tma_maps):
    """Fewer blocks than tiles, each taking tiles blockIdx.x, + gridDim.x, ... in grouped
    order, the ring's phases running on across a block's tiles: every tile of C written
    (C starts as NaN), with the right values."""
    rng = np.random.default_rng(M + N + K)
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((N, K)).astype(np.float32)
    bias = rng.standard_normal(N).astype(np.float32) if epilogue else None
    c = hg.run_emu(a, b, bias, bn=64, stages=stages, swizzle=swizzle, bf16=bool(bf16),
                   variants=VARIANTS, tma_maps=tma_maps, persistent_blocks=blocks)
    np.testing.assert_allclose(c, reference(a, b, bias, bool(bf16)), rtol=1e-4, atol=1e-3)


def test_persistent_grid_and_tile_order():
    assert hg.grid(200, 136, 64, 3) == (3, 1, 1) and hg.grid(200, 136, 64) == (3, 4, 1)
    assert hg.grid(64, 64, 64, 132) == (1, 1, 1)   # no more blocks than tiles


@needs_cxx
@pytest.mark.parametrize("shape,box,swizzle,coords,estrides", [
    ((37, 72), (64, 64), "128B", (0, -3), None),    # rows before the tensor and after it
    ((37, 72), (5, 16), "none", (30, 33), None),    # k past the end (72 - 64 = 8 of 16)
    ((37, 72), (16, 32), "64B", (10, -2), None),    # the 64B swizzle
    ((37, 72), (8, 16), "32B", (0, 33), None),      # the 32B swizzle
    ((37, 72), (8, 32), "none", (48, 30), (2, 1)),  # every other row; rows, k past the end
])
def test_tma_box_semantics_in_the_emulation(shape, box, swizzle, coords, estrides):
    """One copy of a box lands what the model (tma.reference_box) says: box, element
    strides, swizzle of the address bits, zeros outside the tensor; the 128B pattern puts
    16-byte chunk c of row r at chunk c ^ (r % 8), the layout hopper_gemm.pretile gives."""
    x = np.random.default_rng(0).integers(1, 60000, shape).astype(np.uint16)
    spec = tma.row_major("x", "float16", shape, box, swizzle)
    if estrides:
        spec = tma.TensorMapSpec("float16", spec.dims, spec.strides, spec.box,
                                 tuple(reversed(estrides)), swizzle, "x")
    got = hg.tma_box_emu(spec, x, coords)
    want = tma.reference_box(spec, x, coords)
    np.testing.assert_array_equal(got, want)
    if swizzle == "128B":   # the model against the pre-tiled layout of the bulk copies
        tile = np.zeros((64, 64), np.uint16)
        r0 = coords[1]
        for r in range(64):
            if 0 <= r0 + r < shape[0]:
                tile[r, :] = x[r0 + r, :64]
        flat = np.zeros(64 * 64, np.uint16)
        flat[hg.tile_offsets(64, 1)] = tile
        np.testing.assert_array_equal(got.view(np.uint16), flat)
    assert got.any() and not got.all()   # the zero fill happened, and real data came


@needs_cxx
def test_the_emulation_checks_a_tma_copy():
    x = np.ones((64, 64), np.uint16)
    spec = tma.row_major("x", "float16", x.shape, (64, 64), "128B")
    with pytest.raises(BuildError, match="not an encoded map"):
        hg.tma_box_emu(spec, x, (0, 0), map_bytes=bytes(128))
    three = tma.TensorMapSpec("float16", (8, 64, 8), (128, 16), (8, 64, 8), name="x")
    with pytest.raises(BuildError, match="the tensor map has rank 3, the instruction gives 2"):
        hg.tma_box_emu(spec, x, (0, 0), map_bytes=tma.emu_bytes(three, x.ctypes.data))


def test_tensor_map_spec_shapes():
    spec = tma.row_major("A", "bfloat16", (300, 72), (64, 64), "128B")
    assert spec.dims == (72, 300) and spec.strides == (144,) and spec.box == (64, 64)
    assert spec.box_bytes == 64 * 64 * 2 and spec.elem_strides == (1, 1)
    odd = tma.TensorMapSpec("float16", (72, 300), (144,), (8, 64), (1, 3), name="A")
    assert odd.box_shape() == (8, 22) and odd.box_bytes == 8 * 22 * 2
    raw = tma.emu_bytes(spec, 0x1000)
    assert len(raw) == tma.MAP_BYTES and raw[:4] == b"TCTM"


def test_tensor_maps_are_encoded_by_the_driver_after_the_checks():
    """tma.encode hands cuTensorMapEncodeTiled (here the fake libcuda's, which records
    what it is given) the map innermost first, a 64-byte aligned CUtensorMap, the 128B
    swizzle, zeros out of bounds; a map the hardware cannot use never reaches it; the
    128 bytes travel as one kernel parameter ('T')."""
    from fake_libcuda import FakeLibcuda
    from tecomp.errors import TensorMapError
    from tecomp.runtime.cuda_driver import pack_params
    cu = FakeLibcuda(None)
    sa, sb = hg.tensor_maps(200, 264, 328, 128, 1, True)
    raw = tma.encode(sb, 0x7000_0000_0100, cu)
    rec = cu.calls[-1][1]
    assert cu.calls[-1][0] == "cuTensorMapEncodeTiled"
    assert rec == {"dtype": 9, "rank": 2, "address": 0x7000_0000_0100, "map_aligned_64": True,
                   "dims": [328, 264], "strides": [656], "box": [64, 128],
                   "elem_strides": [1, 1], "interleave": 0, "swizzle": 3, "l2_promotion": 2,
                   "oob_fill": 0}
    assert raw == tma.emu_bytes(sb, 0x7000_0000_0100)
    n = len(cu.calls)
    with pytest.raises(TensorMapError, match="not 16-byte aligned"):
        tma.encode(sa, 0x7000_0000_0108, cu)
    assert len(cu.calls) == n
    params, values = pack_params("iT", [3, raw])
    assert ctypes.sizeof(values[1]) == 128 and bytes(values[1]) == raw


@needs_cxx
def test_threads_mode_runs_the_pipeline_and_reports_a_deadlock():
    """One OS thread per CUDA thread: the producer and consumers really wait for each
    other; a wrong parity is reported, not hung."""
    rng = np.random.default_rng(1)
    a = rng.standard_normal((64, 128)).astype(np.float32)
    b = rng.standard_normal((64, 128)).astype(np.float32)
    c = hg.run_emu(a, b, None, mode="threads", swizzle=1, variants=VARIANTS, stages=2)
    np.testing.assert_allclose(c, reference(a, b, None, False), rtol=1e-4, atol=1e-3)
    with pytest.raises(BuildError, match="try_wait.parity deadlocks"):
        hg.run_emu(a, b, None, mode="threads", bug=1, variants=VARIANTS, stages=2, swizzle=1)


@needs_cxx
@pytest.mark.parametrize("bug,match", [
    (1, r"try_wait.parity deadlocks: .* for the phase of parity 1 .* its phase of parity 1"),
    (2, r"wgmma descriptor .* outside shared memory"),
    (3, r"no wgmma.fence"),
    (4, r"deadlocks: .* tx-count 16"),
    (5, r"warp 1 gives wgmma #0 of warpgroup 0 the descriptors .* the 4 warps of a warpgroup"),
])
def test_the_emulation_flags_misuse(bug, match):
    a = np.ones((64, 128), np.float32)
    with pytest.raises(BuildError, match=match):
        hg.run_emu(a, a, None, bug=bug, variants=VARIANTS, stages=2, swizzle=1)


def test_descriptor_encoding():
    """PTX ISA, "Matrix Descriptor Format": address >> 4 in bits 0-13, LBO >> 4 in 16-29,
    SBO >> 4 in 32-45, swizzle in 62-63 (1: 128B)."""
    assert wgmma_desc(0x400, 16, 1024, "128B") == (1 << 62) | (64 << 32) | (1 << 16) | 0x40
    assert wgmma_desc(0x2_0000 + 0x10, 1024, 128, "none") == (8 << 32) | (64 << 16) | 0x2001
    assert wgmma_desc(0x4_0010, 16, 16) & 0x3FFF == 1      # the address modulo 2**18
    assert SWIZZLE == {"none": 0, "128B": 1, "64B": 2, "32B": 3} and WGMMA_N[-1] == 256


def test_pretiled_swizzle_matches_the_128_byte_pattern():
    """16-byte chunk c of row r of a tile lands at chunk c ^ (r % 8) of its row."""
    off = hg.tile_offsets(64, 1)
    for r in (0, 3, 7, 8, 13):
        for c in range(8):
            assert off[r, 8 * c] * 2 == r * 128 + 16 * (c ^ (r % 8))
    assert sorted(off.ravel()) == list(range(64 * 64))


_PTX_BULK = ("wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16",
             "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16",
             "wgmma.fence.sync.aligned", "wgmma.commit_group.sync.aligned",
             "wgmma.wait_group.sync.aligned 0", "mbarrier.init.shared::cta.b64",
             "mbarrier.arrive.expect_tx.shared::cta.b64",
             "mbarrier.try_wait.parity.shared::cta.b64",
             "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes")
_PTX_TMA = ("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes",
            "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes",
            "prefetch.tensormap", ".param .align 64 .b8",   # the __grid_constant__ maps
            "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16",
            "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16")


@needs_nvcc
@pytest.mark.parametrize("variants,ptx_wants,sass_wants", [
    ([(4, 1, 0, 1), (4, 1, 1, 0), (3, 0, 0, 0)], _PTX_BULK, ("UBLKCP", "SYNCS")),
    ([(4, 1, 1, 0, 1, 1), (3, 0, 0, 1, 1)], _PTX_TMA,
     ("UTMALDG.2D", "UTMALDG.3D", "SYNCS")),
], ids=["bulk", "tma"])
def test_ptxas_sm90a_has_wgmma_copies_and_mbarriers_and_nothing_spills(variants, ptx_wants,
                                                                       sass_wants):
    src = hg.source(128, variants, device=True)
    nvcc = find_nvcc()
    with tempfile.TemporaryDirectory() as d:
        cu = os.path.join(d, "k.cu")
        with open(cu, "w") as f:
            f.write(src)
        ptx_path, cubin = os.path.join(d, "k.ptx"), os.path.join(d, "k.cubin")
        subprocess.run([nvcc, "-ptx", "-arch=sm_90a", "-std=c++17", "-o", ptx_path, cu],
                       check=True, capture_output=True)
        proc = subprocess.run([nvcc, "-cubin", "-arch=sm_90a", "-std=c++17", "-Xptxas", "-v",
                               "-o", cubin, cu], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr[-3000:]
        with open(ptx_path) as f:
            ptx = f.read()
        for want in ptx_wants:
            assert want in ptx, want
        report = proc.stderr + proc.stdout
        assert "serialized" not in report, report      # ptxas C7520: wgmma serialised
        usage = parse_ptxas(report)
        assert len(usage) == len(variants)
        for kernel, use in usage.items():
            assert use["spill_stores"] == use["spill_loads"] == use["stack"] == 0, (kernel, use)
        assert hg.shared_bytes(128, 4) <= block_shared_limit("sm_90a")
        dis = shutil.which("nvdisasm") or shutil.which("cuobjdump")
        if dis:   # the SASS, where a disassembler is installed
            args = [dis, cubin] if dis.endswith("nvdisasm") else [dis, "-sass", cubin]
            sass = subprocess.run(args, capture_output=True, text=True).stdout
            assert re.search(r"HGMMA\.64x128x16\.F32", sass), sass[:2000]
            for want in sass_wants:
                assert want in sass, want


#: the probe's cases: (imm-trans-a, imm-trans-b, swizzle mode of both, flip, bf16)
PROBES = [(ta, tb, mode, flip, int(ta + tb + flip == 1 and mode == "128B"))
          for ta in (0, 1) for tb in (0, 1) for mode in wp.MODES for flip in (0, 1)]


def _probe_case(ta, tb, mode, flip, bf16):
    rng = np.random.default_rng(100 * ta + 10 * tb + 2 * list(wp.MODES).index(mode) + flip)
    a = hg.to_bits(rng.standard_normal((64, 16)).astype(np.float32), bool(bf16))
    b = hg.to_bits(rng.standard_normal((wp.N, 16)).astype(np.float32), bool(bf16))
    img, words = wp.image(a, b, ta, tb, mode, mode, bool(flip))
    want = hg.from_bits(a, bool(bf16)).astype(np.float64) @ \
        hg.from_bits(b, bool(bf16)).astype(np.float64).T
    return img, words, want


@needs_cxx
def test_wgmma_descriptor_layouts_in_the_emulation():
    """One wgmma.m64n128k16 on operands the host lays out as the PTX ISA's canonical
    layouts (tecomp/testing/wgmma_probe.py, written from the ISA's table, not from the
    emulation's code): K-major and MN-major (imm-trans-a / imm-trans-b), no swizzle and
    the 128B, 64B, 32B swizzles, LBO and SBO told apart (the repeated blocks packed both
    ways round); the emulation's product is float64's.  The same image read with the
    transpose bit flipped, or B's LBO and SBO exchanged, is not."""
    for ta, tb, mode, flip, bf16 in PROBES:
        img, words, want = _probe_case(ta, tb, mode, flip, bf16)
        d = wp.run_emu(img, words, ta, tb, bool(bf16))
        np.testing.assert_allclose(d, want, rtol=1e-5, atol=1e-4,
                                   err_msg=f"trans {ta}{tb}, {mode}, flip {flip}")
        swapped = words.copy()
        swapped[5], swapped[6] = words[6], words[5]
        for w, t in ((words, 1 - tb), (swapped, tb)):
            try:
                wrong = wp.run_emu(img, w, ta, t, bool(bf16))
            except BuildError as e:   # (read past the arena: the emulation says so)
                assert "outside the" in str(e), e
                continue
            assert not np.allclose(wrong, want, rtol=1e-5, atol=1e-4), (ta, tb, mode, flip)


@needs_nvcc
def test_the_wgmma_probe_compiles_for_sm90a():
    """The probe's device text (what the GPU test runs): wgmma with each pair of
    transpose bits, for float16 and bfloat16."""
    ptx = compile_ptx(wp.source(device=True), "sm_90a")
    for t in ("f16", "bf16"):
        for ta, tb in ((0, 0), (0, 1), (1, 0), (1, 1)):
            assert re.search(rf"wgmma\.mma_async\.sync\.aligned\.m64n128k16\.f32\.{t}\.{t} "
                             rf"\{{[^}}]*\}}, %rd\d+, %rd\d+, p, 1, 1, {ta}, {tb};", ptx), (t, ta, tb)


@pytest.mark.gpu
def test_wgmma_descriptor_layouts_on_the_gpu(gpu_driver):
    """The probe's cases on an sm_90 device: the hardware reads the canonical layouts
    (and the transpose bits) as the emulation does."""
    if gpu_driver.arch not in ("sm_90", "sm_90a"):
        pytest.skip(f"wgmma needs an sm_90 device; this is {gpu_driver.arch}")
    probe = wp.GpuProbe(gpu_driver)
    bad = []
    for ta, tb, mode, flip, bf16 in PROBES:
        img, words, want = _probe_case(ta, tb, mode, flip, bf16)
        d = probe.run(img, words, ta, tb, bool(bf16))
        if not np.allclose(d, want, rtol=1e-3, atol=1e-2):
            bad.append((ta, tb, mode, flip, bf16))
    assert not bad, f"the hardware reads these probe layouts otherwise: {bad}"


@needs_nvcc
@pytest.mark.parametrize("variant,arch,message", [
    ((2, 1, 0, 0, 1), "sm_80", "TMA need sm_90 or later"),
    ((2, 1, 0, 0), "sm_90", "wgmma needs -arch=sm_90a"),
])
def test_below_sm90a_is_a_compile_error(variant, arch, message):
    src = hg.source(64, [variant], device=True)
    with tempfile.TemporaryDirectory() as d:
        cu = os.path.join(d, "k.cu")
        with open(cu, "w") as f:
            f.write(src)
        proc = subprocess.run([find_nvcc(), "-cubin", f"-arch={arch}", "-std=c++17", "-o",
                               os.path.join(d, "k.cubin"), cu], capture_output=True, text=True)
    assert proc.returncode != 0 and message in proc.stderr


@pytest.mark.gpu
@pytest.mark.parametrize("swizzle,bf16,epilogue,tma_maps", [
    (1, False, True, False), (0, True, False, False), (1, True, False, False),
    (1, False, True, True), (0, True, False, True), (1, True, False, True)])
def test_warp_specialised_wgmma_gemm_on_the_gpu(gpu_driver, swizzle, bf16, epilogue, tma_maps):
    """The same kernel on an sm_90 device: the descriptor, swizzle and accumulator
    layouts the emulation implements, checked against the hardware; with ``tma_maps``
    the driver's tensor maps (encoded from the TensorMapSpec the emulation's come from),
    the copy's swizzle and zero fill."""
    if gpu_driver.arch not in ("sm_90", "sm_90a"):
        pytest.skip(f"wgmma needs an sm_90 device; this is {gpu_driver.arch}")
    M, N, K = 200, 264, 328
    rng = np.random.default_rng(7)
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((N, K)).astype(np.float32)
    bias = rng.standard_normal(N).astype(np.float32) if epilogue else np.zeros(1, np.float32)
    tile = hg.GpuTile(gpu_driver, M, N, K, bn=128, stages=4, swizzle=swizzle, bf16=bf16,
                      epilogue=epilogue, tma_maps=tma_maps)
    if tma_maps:
        ops = [np.ascontiguousarray(hg.to_bits(x, bf16)) for x in (a, b)]
    else:
        ops = [hg.pretile(hg.to_bits(a, bf16), hg.BM, swizzle),
               hg.pretile(hg.to_bits(b, bf16), 128, swizzle)]
    host = [*ops, bias, np.full((M, N), np.nan, np.float32)]
    dev = [gpu_driver.alloc(x.nbytes) for x in host]
    for d, x in zip(dev, host):
        gpu_driver.htod(d, x)
    tile.launch(*(int(d) for d in dev))
    gpu_driver.synchronize()
    gpu_driver.dtoh(host[3], dev[3])
    np.testing.assert_allclose(host[3], reference(a, b, bias if epilogue else None, bf16),
                               rtol=1e-3, atol=1e-2)
