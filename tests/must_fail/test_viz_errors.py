"""tc.roofline and tc.draw_schedule called wrongly: each message names the argument and
says what to pass."""
import sys

import numpy as np
import pytest

import tecomp as tc


def _copy_kernel():
    X = tc.placeholder((8, 8), name="X")
    Y = tc.compute((8, 8), lambda i, j: X[i, j], name="Y")
    f = tc.build(tc.create_schedule(Y.op), [X, Y], name="copy")
    x = np.ones((8, 8), "float32")
    return f, [x, np.empty_like(x)]


def _scale_kernel():
    X = tc.placeholder((8, 8), name="X")
    Y = tc.compute((8, 8), lambda i, j: X[i, j] * 2.0, name="Y")
    s = tc.create_schedule(Y.op)
    f = tc.build(s, [X, Y], name="scale")
    x = np.ones((8, 8), "float32")
    return s, [X, Y], f, [x, np.empty_like(x)]


PEAKS = dict(peak_gflops=10.0, peak_gbps=1.0, number=1, repeat=1, min_repeat_ms=0)


def test_roofline_not_a_kernel():
    with pytest.raises(tc.ArgumentError, match=r"f must be a kernel compiled by tc\.build"):
        tc.roofline("f", [])


def test_roofline_args_not_a_list():
    _, _, f, arrays = _scale_kernel()
    with pytest.raises(tc.ArgumentError, match=r"args must be a list or tuple of the arrays"):
        tc.roofline(f, arrays[0], **PEAKS)


def test_roofline_wrong_number_of_arrays():
    _, _, f, arrays = _scale_kernel()
    with pytest.raises(tc.ArgumentError, match=r"scale takes 2 arguments \(X, Y\), got 1"):
        tc.roofline(f, arrays[:1], **PEAKS)


@pytest.mark.parametrize("what,value", [("peak_gflops", -1.0), ("peak_gbps", float("nan")),
                                        ("flops", 0), ("bytes", True)])
def test_roofline_bad_number(what, value):
    _, _, f, arrays = _scale_kernel()
    kw = dict(PEAKS)
    kw[what] = value
    with pytest.raises(tc.ArgumentError, match=rf"{what} must be a finite number > 0"):
        tc.roofline(f, arrays, **kw)


def test_roofline_no_floating_point_operations():
    f, arrays = _copy_kernel()
    with pytest.raises(tc.ArgumentError,
                       match=r"copy executes no floating-point operations.*pass flops="):
        tc.roofline(f, arrays, **PEAKS)


def test_roofline_module_without_loop_ir():
    class Loaded:   # what tc.load_module gives has no prim_func
        name = "lib_kernel"

        def time_evaluator(self, **kw):
            raise AssertionError("not reached")

    with pytest.raises(tc.ArgumentError,
                       match=r"lib_kernel has no loop IR to count its operations from.*flops="):
        tc.roofline(Loaded(), [np.ones(4, "float32")])


def test_roofline_plot_without_matplotlib(monkeypatch, tmp_path):
    _, _, f, arrays = _scale_kernel()
    r = tc.roofline(f, arrays, **PEAKS)
    monkeypatch.setitem(sys.modules, "matplotlib", None)   # import matplotlib fails
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    with pytest.raises(tc.RuntimeUnavailableError,
                       match=r"Roofline\.plot draws with matplotlib.*pip install matplotlib"):
        r.plot(tmp_path / "r.png")


def test_roofline_plot_unknown_suffix(tmp_path):
    _, _, f, arrays = _scale_kernel()
    r = tc.roofline(f, arrays, **PEAKS)
    with pytest.raises(tc.ArgumentError, match=r"cannot tell the format of .*r\.jpeg.*\.png"):
        r.plot(tmp_path / "r.jpeg")


def test_draw_schedule_not_a_schedule():
    _, args, _, _ = _scale_kernel()
    with pytest.raises(tc.LowerError,
                       match=r"tc\.draw_schedule takes a schedule made by tc\.create_schedule, "
                             r"got str"):
        tc.draw_schedule("s", args)


def test_draw_schedule_gpu_target():
    s, args, _, _ = _scale_kernel()
    with pytest.raises(tc.ArgumentError, match=r"target cuda.* is not a CPU.*llvm target"):
        tc.draw_schedule(s, args, target="cuda")


def test_draw_schedule_bad_path(tmp_path):
    s, args, _, _ = _scale_kernel()
    with pytest.raises(tc.ArgumentError, match=r"tc\.draw_schedule: cannot tell the format"):
        tc.draw_schedule(s, args, tmp_path / "nest.txt")
    with pytest.raises(tc.ArgumentError, match=r"path must be a file name .*got int"):
        tc.draw_schedule(s, args, 3)


def test_draw_schedule_png_without_matplotlib(monkeypatch, tmp_path):
    s, args, _, _ = _scale_kernel()
    nest = tc.draw_schedule(s, args)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    with pytest.raises(tc.RuntimeUnavailableError, match=r"pip install matplotlib"):
        nest.save(tmp_path / "nest.png")
    nest.save(tmp_path / "nest.html")   # the page needs nothing
    assert (tmp_path / "nest.html").read_text().startswith("<!DOCTYPE html>")


@pytest.mark.parametrize("kind", ["fifo", "link_to_fifo", "directory"])
@pytest.mark.parametrize("suffix", ["html", "png"])
def test_loopnest_save_onto_a_special_file(tmp_path, kind, suffix):
    # writing a FIFO blocks until someone reads it: save() hung forever
    import os
    import signal
    s, args, _, _ = _scale_kernel()
    nest = tc.draw_schedule(s, args)
    fifo = tmp_path / f"pipe.{suffix}"
    if kind == "directory":
        fifo.mkdir()
        path, why = fifo, "is a directory"
    else:
        os.mkfifo(fifo)
        path, why = fifo, "is a FIFO"
        if kind == "link_to_fifo":
            path = tmp_path / f"link.{suffix}"
            path.symlink_to(fifo)
            why = "is a symbolic link to .*which is a FIFO"
    old = signal.signal(signal.SIGALRM, signal.default_int_handler)
    signal.alarm(20)   # a regression fails here instead of hanging the suite
    try:
        with pytest.raises(tc.ArgumentError, match=rf"LoopNest\.save: .*(pipe|link)\.{suffix}' {why}"):
            nest.save(path)
        with pytest.raises(tc.ArgumentError, match=why):
            tc.draw_schedule(s, args, path)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def test_roofline_plot_onto_a_fifo(tmp_path):
    import os
    _, _, f, arrays = _scale_kernel()
    r = tc.roofline(f, arrays, **PEAKS)
    fifo = tmp_path / "r.png"
    os.mkfifo(fifo)
    with pytest.raises(tc.ArgumentError, match=r"Roofline\.plot: .*r\.png' is a FIFO \(named "
                                               r"pipe\), not a regular file; give the path"):
        r.plot(fifo)
