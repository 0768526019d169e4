"""tc.roofline, tc.draw_schedule and what they count (tecomp.ir.analysis, tecomp.viz)."""
import math

import numpy as np
import pytest

import tecomp as tc
from tecomp.ir.analysis import count_flops, loop_footprints, shape_env
from tecomp.strategy import cpu as sc
from tecomp.nn import ops
from tecomp.viz import peaks as _peaks

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
HOSTILE = "<script>alert(1)</script>"


def _axpb(n=64, m=64, name="Y"):
    X = tc.placeholder((n, m), name="X")
    Y = tc.compute((n, m), lambda i, j: X[i, j] * 2.0 + 1.0, name=name)
    return X, Y


def _matmul(n, K, m):
    A = tc.placeholder((n, K), name="A")
    B = tc.placeholder((K, m), name="B")
    k = tc.reduce_axis((0, K), name="k")
    C = tc.compute((n, m), lambda i, j: tc.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


# ---------------------------------------------------------------------------------
# counting


def test_count_flops_gemm_and_elementwise():
    A, B, C = _matmul(16, 24, 40)
    s = tc.create_schedule(C.op)
    jo, ji = s[C].split(C.op.axis[1], factor=8)
    s[C].vectorize(ji)
    got = count_flops(tc.lower(s, [A, B, C]))
    assert got.flops == 2 * 16 * 24 * 40 and got.exact and got.opaque == ()
    X, Y = _axpb(8, 12)
    assert count_flops(tc.lower(tc.create_schedule(Y.op), [X, Y])).flops == 2 * 8 * 12


def test_count_flops_guard_and_tail_counted_exactly():
    # a split that does not divide: the tail is peeled (or guarded) and counted once
    A, B, C = _matmul(10, 7, 100)
    s = tc.create_schedule(C.op)
    jo, ji = s[C].split(C.op.axis[1], factor=16)
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=4)
    assert count_flops(tc.lower(s, [A, B, C])).flops == 2 * 10 * 7 * 100


def test_count_flops_symbolic_shape_from_arrays():
    n = tc.var("n")
    X = tc.placeholder((n, 32), name="X")
    Y = tc.compute((n, 32), lambda i, j: tc.exp(X[i, j]) * 3.0, name="Y")
    s = tc.create_schedule(Y.op)
    io, ii = s[Y].split(Y.op.axis[0], factor=8)
    func = tc.lower(s, [X, Y])
    env = shape_env(func, [(13, 32), (13, 32)])
    assert count_flops(func, env).flops == 13 * 32 * 2   # exp counts one, * one
    with pytest.raises(KeyError, match="n"):
        count_flops(func, {})


@pytest.mark.parametrize("skip", [False, True])
def test_count_flops_conv_with_padding(skip, monkeypatch):
    """The flops the lowered code runs: every tap with the padded taps computed; with
    them skipped (tecomp.nn.conv.SKIP_PADDED_TAPS), fewer, and at least the taps inside
    the image (the rows are skipped, a vectorized row's lanes may still compute
    ``0 * w``)."""
    from tecomp.nn import conv as _conv
    monkeypatch.setattr(_conv, "SKIP_PADDED_TAPS", skip)
    d = tc.placeholder((1, 8, 10, 10), name="data")
    w = tc.placeholder((8, 8, 3, 3), name="weight")
    out = ops.conv2d_nchw(d, w, padding=1)
    full, inside = 2 * 8 * 8 * 10 * 10 * 9, 2 * 8 * 8 * 28 * 28
    for target in ("llvm -mcpu=skylake-avx512", "llvm -mcpu=haswell"):   # any host
        func = tc.lower(sc.schedule_conv2d_nchw(out, target), [d, w, out], target=target)
        n = count_flops(func).flops
        if skip:
            assert inside <= n < full
        else:
            assert n == full


def test_loop_footprints_of_a_tiled_copy():
    X, Y = _axpb(64, 64)
    s = tc.create_schedule(Y.op)
    jo, ji = s[Y].split(Y.op.axis[1], factor=16)
    fps = {fp.loop.var.name: fp for fp in loop_footprints(tc.lower(s, [X, Y]))}
    assert fps["j.inner"].buffers == {"Y": 16 * 4, "X": 16 * 4}
    assert fps["j.outer"].bytes == 2 * 64 * 4
    assert fps["i"].bytes == 2 * 64 * 64 * 4
    assert [fps[v].depth for v in ("i", "j.outer", "j.inner")] == [0, 1, 2]


# ---------------------------------------------------------------------------------
# roofline


def _built_gemm(n=32):
    A, B, C = _matmul(n, n, n)
    s = tc.create_schedule(C.op)
    f = tc.build(s, [A, B, C])
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((n, n)).astype("float32") for _ in range(2))
    return f, [a, b, np.empty((n, n), "float32")]


def test_roofline_numbers_are_consistent():
    f, arrays = _built_gemm(32)
    r = tc.roofline(f, arrays, peak_gflops=100.0, peak_gbps=10.0, number=2, repeat=2,
                    min_repeat_ms=0)
    assert r.flops == 2 * 32 ** 3 and r.flops_exact
    assert r.bytes == sum(a.nbytes for a in arrays)
    assert r.seconds > 0 and r.peaks == "given" and r.threads == 1   # no parallel loop
    assert math.isclose(r.gflops, r.flops / r.seconds / 1e9)
    assert math.isclose(r.gbps, r.bytes / r.seconds / 1e9)
    assert math.isclose(r.intensity, r.flops / r.bytes)
    assert math.isclose(r.ridge, 10.0)
    # intensity 2*32^3 / (3*32*32*4) = 5.33 FLOP/B: under the ridge of 100/10
    assert r.bound == "memory" and math.isclose(r.roof_gflops, r.intensity * 10.0)
    assert math.isclose(r.fraction, r.gflops / r.roof_gflops)
    r2 = tc.roofline(f, arrays, peak_gflops=10.0, peak_gbps=100.0, number=1, repeat=1,
                     min_repeat_ms=0)
    assert r2.bound == "compute" and r2.roof_gflops == 10.0
    text = repr(r)
    assert "memory-bound" in text and "GFLOP/s" in text and f.name in text


def test_roofline_given_counts_and_name():
    f, arrays = _built_gemm(16)
    r = tc.roofline(f, arrays, flops=1e6, bytes=2e3, peak_gflops=50.0, peak_gbps=5.0,
                    number=1, repeat=1, min_repeat_ms=0, name="mine")
    assert (r.flops, r.bytes, r.name) == (1e6, 2e3, "mine")
    assert r.intensity == 500.0 and r.bound == "compute"


def test_roofline_measures_the_host_peaks_once(monkeypatch):
    calls = []
    monkeypatch.setattr(_peaks, "_PEAKS", {})
    monkeypatch.setattr(_peaks, "fma_peak", lambda t: calls.append(("fma", t)) or 123.0)
    monkeypatch.setattr(_peaks, "stream_bandwidth", lambda t: calls.append(("bw", t)) or 9.0)
    f, arrays = _built_gemm(16)
    for _ in range(2):
        r = tc.roofline(f, arrays, number=1, repeat=1, min_repeat_ms=0)
        assert (r.peak_gflops, r.peak_gbps, r.peaks) == (123.0, 9.0, "measured")
    assert calls == [("fma", 1), ("bw", 1)]


def test_peak_kernels_measure_positive_rates():
    assert _peaks.fma_peak(1, steps=2000, calls=1, bursts=1) > 0
    # in vectors of half the register's lanes (machine_probe.py's FMA width)
    assert _peaks.fma_peak(1, steps=2000, calls=1, bursts=1, lanes=4) > 0
    # the u8 x s8 dot-product intrinsic's rate (none on a CPU without AVX2 or NEON dots)
    rate, name = _peaks.dot_peak(1, steps=2000, calls=1, bursts=1)
    assert (rate > 0) == bool(name)
    assert _peaks.stream_bandwidth(1, nbytes=1 << 20, calls=1) > 0


def test_roofline_plot_png_and_svg(tmp_path):
    pytest.importorskip("matplotlib")
    f, arrays = _built_gemm(16)
    r = tc.roofline(f, arrays, peak_gflops=100.0, peak_gbps=10.0, number=1, repeat=1,
                    min_repeat_ms=0, name="gemm $x$ " + HOSTILE)
    X, Y = _axpb(64, 64)
    g = tc.build(tc.create_schedule(Y.op), [X, Y])
    x = np.ones((64, 64), "float32")
    r2 = tc.roofline(g, [x, np.empty_like(x)], peak_gflops=100.0, peak_gbps=10.0, number=1,
                     repeat=1, min_repeat_ms=0)
    png = tmp_path / "roof.png"
    assert r.plot(png, r2) == str(png)
    assert png.read_bytes()[:8] == PNG_MAGIC
    svg = tmp_path / "roof.svg"
    r.plot(str(svg), title="two kernels")
    assert b"<svg" in svg.read_bytes()[:400]


# ---------------------------------------------------------------------------------
# the loop nest


def _attached_schedule(name_a="A", name_c="C", rname="k"):
    A = tc.placeholder((64, 48), name=name_a)
    B = tc.placeholder((48, 64), name="B")
    k = tc.reduce_axis((0, 48), name=rname)
    C = tc.compute((64, 64), lambda i, j: tc.sum(A[i, k] * B[k, j], axis=k), name=name_c)
    D = tc.compute((64, 64), lambda i, j: tc.exp(C[i, j]) + 1.0, name="D")
    s = tc.create_schedule(D.op)
    jo, ji = s[C].split(C.op.axis[1], factor=16)
    s[C].vectorize(ji)
    s[C].compute_at(s[D], D.op.axis[0])
    s[D].parallel(D.op.axis[0])
    return s, [A, B, D]


def test_draw_schedule_html_has_every_stage_and_loop(tmp_path):
    s, args = _attached_schedule()
    path = tmp_path / "nest.html"
    nest = tc.draw_schedule(s, args, path)
    page = path.read_text()
    assert page == nest.html() == nest._repr_html_()
    assert page.startswith("<!DOCTYPE html>") and "<script" not in page
    assert "http://" not in page and "https://" not in page   # nothing fetched
    for name in ("C", "D"):
        assert f">{name}<" in page
    for var in ("i", "j", "j.outer", "j.inner", "k"):
        assert f"<b>{var}</b>" in page
    for kind in ("parallel", "vectorized", "serial"):
        assert f"class='box loop {kind}'" in page
    assert "compute_at D.i" in page and "compute_at: C" in page
    loops = {n.var: n for n in nest.loops()}
    assert loops["i"].kind == "parallel" and loops["i"].attached == ["C"]
    assert loops["j.inner"].kind == "vectorized" and loops["j.inner"].extent == "16"
    assert loops["j.inner"].stage == "C" and loops["j"].stage == "D"


def test_draw_schedule_escapes_hostile_names():
    s, args = _attached_schedule(name_a=HOSTILE, name_c="C<b>&'\"", rname="<i>k")
    page = tc.draw_schedule(s, args).html()
    assert HOSTILE not in page and "C<b>&'\"" not in page and "<i>k" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "C&lt;b&gt;&amp;&#x27;&quot;" in page and "&lt;i&gt;k" in page


def test_draw_schedule_marks_footprints_over_a_cache():
    # a named CPU: its caches from tecomp's table, the same on every machine
    X, Y = _axpb(1024, 1024)
    s = tc.create_schedule(Y.op)
    jo, ji = s[Y].split(Y.op.axis[1], factor=16)
    nest = tc.draw_schedule(s, [X, Y], target="llvm -mcpu=haswell")
    caches = nest.caches
    loops = {n.var: n for n in nest.loops()}
    big, row, small = loops["i"], loops["j.outer"], loops["j.inner"]
    assert big.footprint == 2 * 1024 * 1024 * 4 and small.footprint == 2 * 16 * 4
    for n in (big, row, small):
        assert n.over == [k for k, v in caches.items() if n.footprint > v]
    assert big.over and not small.over
    page = nest.html()
    assert f"over-{big.over[-1].lower()}" in page and "&gt; " + big.over[-1] in page
    assert "class='fp fits'" in page


def test_draw_schedule_png(tmp_path):
    pytest.importorskip("matplotlib")
    s, args = _attached_schedule(name_a="A $x$ " + HOSTILE)
    path = tmp_path / "nest.png"
    tc.draw_schedule(s, args).save(path)
    assert path.read_bytes()[:8] == PNG_MAGIC


@pytest.mark.parametrize("ratio", [1, 4, 49])
@pytest.mark.parametrize("streamed", [False, True])
def test_move_kernel_moves_the_bytes(ratio, streamed):
    """``peaks.move_kernel`` (benchmarks/pooling.py's roof): ``y[j] = max(x[j, k])`` over
    each group of ``ratio`` vectors, stores through the cache or past it (``pragma
    nontemporal``, its streamed copy run on aligned buffers), on 1 and 2 threads."""
    for threads in (1, 2):
        f, xs, ys = _peaks.move_kernel(threads, 5000, ratio, streamed=streamed)
        assert xs[1:] == (ratio, ys[1]) and xs[0] == ys[0] >= 1
        x = tc.aligned(np.random.default_rng(ratio).standard_normal(xs).astype("float32"))
        y = tc.empty(ys, "float32")
        f(x, y)
        np.testing.assert_array_equal(y, x.max(axis=1))
