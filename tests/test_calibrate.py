"""The machine model's costs measured at first use and cached (tecomp.calibration):
what is measured, where it is kept, when it is used, and that a cache file is checked
before its numbers reach a schedule.  No assertion here depends on the CPU's speed."""
import json
import math

import pytest

import tecomp as tc
from tecomp import calibration as cal
import tecomp.target as tgt

COSTS = {"fma_bits": None, "gather_cost": 3.25, "transpose_cost": 0.75,
         "split_loads_cheap": False, "gemm_load_cost": 0.37}


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """A private cache dir, no memory of earlier lookups, and the host's CPU without an
    entry in the table (as a CPU tecomp has never seen)."""
    monkeypatch.setenv("TECOMP_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cal, "_MEMO", {})
    host = tc.Target("llvm")
    monkeypatch.setattr(tgt, "MEASURED", {k: v for k, v in tgt.MEASURED.items()
                                          if k != host.cpu})
    costs = dict(COSTS, fma_bits=32 * host.lanes)
    return host, costs


def _write(path, doc):
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))


def test_cached_calibration_reaches_the_machine_model(fresh, monkeypatch):
    host, costs = fresh
    monkeypatch.setenv("TECOMP_CALIBRATE", "0")
    _write(cal.cache_path(host), {"costs": costs})
    m = tc.Target("llvm").machine
    assert (m.gather_cost, m.transpose_cost, m.split_loads_cheap, m.gemm_load_cost) == (
        3.25, 0.75, False, 0.37)
    assert m.fma_lanes == host.lanes


def test_first_use_measures_once_and_keeps_it(fresh, monkeypatch):
    host, costs = fresh
    monkeypatch.setenv("TECOMP_CALIBRATE", "auto")
    calls = []

    def measure(target, rounds):
        calls.append(rounds)
        # the measuring kernels see the defaults, not a half-made calibration
        assert target.machine.gemm_load_cost == 0.0
        return dict(costs), {"fma16": 1.0}

    monkeypatch.setattr(cal, "_measure", measure)
    assert tc.Target("llvm").machine.gemm_load_cost == 0.37
    assert tc.Target("llvm").machine.gemm_load_cost == 0.37
    assert calls == [3]
    doc = json.loads(cal.cache_path(host).read_text())
    assert doc["costs"] == costs and doc["cpu"] == host.cpu
    monkeypatch.setattr(cal, "_MEMO", {})          # another process: reads the file
    assert tc.Target("llvm").machine.gemm_load_cost == 0.37
    assert calls == [3]


def test_off_never_measures_and_the_table_wins(fresh, monkeypatch):
    host, costs = fresh
    monkeypatch.setattr(cal, "_measure", lambda *a: pytest.fail("measured"))
    monkeypatch.setenv("TECOMP_CALIBRATE", "off")
    assert tc.Target("llvm").machine.gemm_load_cost == 0.0          # the defaults
    monkeypatch.setenv("TECOMP_CALIBRATE", "auto")
    monkeypatch.setattr(tgt, "MEASURED", {host.cpu: {"gemm_load_cost": 0.5,
                                                     "read_streams": 3,
                                                     "prefetch_burst_lines": 40}})
    # (a host whose LLVM name describes it: a masked one's name is another CPU's, whose
    # entry it never takes, see test_target.py's test_a_masked_host_...)
    monkeypatch.setattr(tgt, "names_host", lambda cpu: cpu == host.cpu)
    _write(cal.cache_path(host), {"costs": costs})
    assert tc.Target("llvm").machine.gemm_load_cost == 0.5          # the table's entry
    monkeypatch.setenv("TECOMP_CALIBRATE", "force")
    m = tc.Target("llvm").machine
    assert m.gemm_load_cost == 0.37                                 # the measurement,
    assert m.read_streams == 3                  # with what a calibration does not measure
    assert m.prefetch_burst_lines == 40


def test_other_cpus_are_never_measured(fresh, monkeypatch):
    host, _ = fresh
    monkeypatch.setattr(cal, "_measure", lambda *a: pytest.fail("measured"))
    monkeypatch.setenv("TECOMP_CALIBRATE", "force")
    # (CPUs other than the host's: which ones depends on the host)
    others = [c for c in ("haswell", "znver3", "znver4") if c != host.cpu]
    for cpu in others:
        assert tc.Target(f"llvm -mcpu={cpu}").machine.lanes == (8 if cpu != "znver4" else 16)
    if "znver4" in others:
        assert tc.Target("llvm -mcpu=znver4").machine.fma_lanes == 8     # the table's
    assert tc.Target("llvm -mtriple=aarch64-linux-gnu").machine.lanes == 4


@pytest.mark.parametrize("doc, why", [
    ("{not json", "it is not JSON"),
    ([1, 2], "it is not a JSON object"),
    ({"costs": {"gemm_load_cost": float("nan")}}, "its gemm_load_cost is nan"),
    ({"costs": {"gemm_load_cost": 1e300}}, "its gemm_load_cost is 1e\\+300"),
    ({"costs": {"gather_cost": True}}, "its gather_cost is True"),
    ({"costs": {"fma_bits": 48}}, "its fma_bits is 48"),
    ({"costs": {"split_loads_cheap": "yes"}}, "its split_loads_cheap is 'yes'"),
    ({"costs": {"row_prefetch_bytes": -4096}}, "its row_prefetch_bytes is -4096"),
    ({"costs": {"row_prefetch_bytes": 4096.0}}, "its row_prefetch_bytes is 4096.0"),
    ({"costs": {"row_prefetch_bytes": 1 << 40}}, "its row_prefetch_bytes is 1099511627776"),
    ({"costs": {"stream_output_bytes": -1}}, "its stream_output_bytes is -1"),
    ({"costs": {"stream_output_bytes": False}}, "its stream_output_bytes is False"),
    ({"costs": {"__class__": 1}}, "it names '__class__'"),
    ({"costs": "rm -rf /"}, "its costs are not a JSON object"),
    ({}, "it has no costs"),
])
def test_a_forged_cache_file_is_ignored(fresh, monkeypatch, doc, why):
    """A file that is not a calibration this version wrote: a warning naming it, the
    defaults, and (in auto mode) a new measurement in its place."""
    host, costs = fresh
    monkeypatch.setenv("TECOMP_CALIBRATE", "0")
    path = cal.cache_path(host)
    _write(path, doc if isinstance(doc, str) else json.dumps(doc, allow_nan=True))
    with pytest.warns(RuntimeWarning, match=rf"ignoring the machine calibration .*{why}.*"
                                            r"python -m tecomp calibrate"):
        m = tc.Target("llvm").machine
    assert m.gemm_load_cost == 0.0 and m.split_loads_cheap is False
    monkeypatch.setattr(cal, "_MEMO", {})
    monkeypatch.setenv("TECOMP_CALIBRATE", "auto")
    monkeypatch.setattr(cal, "_measure", lambda t, r: (dict(costs), {}))
    with pytest.warns(RuntimeWarning):
        assert tc.Target("llvm").machine.gemm_load_cost == 0.37
    assert json.loads(path.read_text())["costs"] == costs


def test_the_measurement_itself(fresh):
    """One round of the real kernels on this CPU: every cost present and in range (what
    the values are depends on the CPU and how busy it is), the thread count restored."""
    host, _ = fresh
    before = tc.get_num_threads()
    tc.set_num_threads(2)
    try:
        costs, figures = cal._measure(host, 1)
        assert tc.get_num_threads() == 2
    finally:
        tc.set_num_threads(before)
    assert cal._valid(costs, host.lanes) is None
    assert {"fma_bits", "gather_cost", "split_loads_cheap", "row_prefetch_bytes",
            "stream_output_bytes"} <= set(costs)
    assert all(math.isfinite(v) and v > 0 for v in figures.values())


def test_the_best_round_of_each_kernel_counts():
    """A calibration on a busy machine: the rounds another process slowed down do not
    count, each kernel's fastest does (GFLOP/s: the highest).  Here the second and third
    rounds of the 4-vector GEMM block were slowed more than the 2-vector one's: their
    medians would make it the slower block (no load cost measured, the GEMMs' blocks
    from the defaults); the best rounds give its real advantage."""
    rounds = {"fma16": [180.0, 220.0, 150.0], "fma8": [110.0, 70.0, 100.0],
              "gather": [9e-6, 7e-6, 8e-6], "transpose": [4e-6, 5e-6, 6e-6],
              "aligned": [5e-5, 4e-5, 6e-5], "split": [4.2e-5, 6e-5, 7e-5],
              "gemm2": [0.080, 0.115, 0.120], "gemm4": [0.070, 0.125, 0.130]}
    best = cal.best_rounds(rounds)
    assert best["fma16"] == 220.0 and best["gemm2"] == 0.080 and best["gemm4"] == 0.070
    loads = (1 / 12 + 1 / 2, 1 / 6 + 1 / 4)     # 12 x 2 and 6 x 4 vectors: loads per FMA
    costs = cal.costs_from(best, 16, 64, 576, loads)
    assert costs["gemm_load_cost"] > 0 and costs["fma_bits"] == 512
    assert costs["split_loads_cheap"] is True            # 4.2e-5 / 4e-5 = 1.05
    median = {k: sorted(v)[1] for k, v in rounds.items()}
    assert "gemm_load_cost" not in cal.costs_from(median, 16, 64, 576, loads)


@pytest.mark.filterwarnings("ignore:tecomp. ignoring the machine calibration")
def test_first_use_that_fails_is_a_warning(fresh, monkeypatch):
    """A measurement that raises, or a cache dir that cannot hold the result, leaves the
    schedule that asked with the defaults (or the unkept result): a warning, no error."""
    host, costs = fresh
    monkeypatch.setenv("TECOMP_CALIBRATE", "auto")

    def broken(target, rounds):
        raise RuntimeError("no timer")

    monkeypatch.setattr(cal, "_measure", broken)
    with pytest.warns(RuntimeWarning, match=r"could not measure this CPU's costs .*"
                                            r"RuntimeError: no timer.*TECOMP_CALIBRATE=0"):
        assert tc.Target("llvm").machine.gemm_load_cost == 0.0
    monkeypatch.setattr(cal, "_MEMO", {})
    monkeypatch.setattr(cal, "_measure", lambda t, r: (dict(costs), {}))
    blocker = cal.cache_path(host).parent
    blocker.parent.mkdir(parents=True, exist_ok=True)
    blocker.write_text("a file where the directory should be")
    with pytest.warns(RuntimeWarning, match=r"cannot keep the machine calibration in .*"
                                            r"used in this process only"):
        assert tc.Target("llvm").machine.gemm_load_cost == 0.37


def test_an_oversized_cache_file_is_not_read_whole(fresh, monkeypatch):
    host, _ = fresh
    monkeypatch.setenv("TECOMP_CALIBRATE", "0")
    path = cal.cache_path(host)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.write_text('{"costs": {}}' + " " * (1 << 20))
    with pytest.warns(RuntimeWarning, match=r"it is 1048589 bytes, more than 65536"):
        assert tc.Target("llvm").machine.gemm_load_cost == 0.0


#: medians of the five small kernels (what costs_from reads besides the row sums and copies)
_MEDIANS = {"fma16": 200.0, "fma8": 100.0, "gather": 1e-5, "aligned": 1e-5, "split": 1e-5,
            "gemm2": 1.0, "gemm4": 1.0}


@pytest.mark.parametrize("rows,ahead,want", [(1.30, 1.0, cal.ROW_PREFETCH_BYTES),
                                             (1.10, 1.0, cal.ROW_PREFETCH_BYTES),
                                             (1.05, 1.0, 0), (0.9, 1.0, 0)])
def test_row_prefetch_is_taken_where_the_row_sum_gains(rows, ahead, want):
    """``row_prefetch_bytes``: the distance timed where the row sum with its rows
    prefetched ran ROW_PREFETCH_GAIN times faster or more, else 0 (none); absent where
    the row sums were not timed (the other costs as before)."""
    med = dict(_MEDIANS)
    base = cal.costs_from(med, 16, 64, 576, (0.6, 0.3))
    assert "row_prefetch_bytes" not in base
    costs = cal.costs_from(dict(med, rows=rows, rows_ahead=ahead), 16, 64, 576, (0.6, 0.3))
    assert costs == dict(base, row_prefetch_bytes=want)
    assert cal._valid(costs, 16) is None


def test_cached_row_prefetch_reaches_the_machine_model(fresh, monkeypatch):
    """A calibration that asks for the rows ahead reaches the machine model."""
    host, costs = fresh
    monkeypatch.setenv("TECOMP_CALIBRATE", "0")
    _write(cal.cache_path(host), {"costs": dict(costs, row_prefetch_bytes=4096)})
    assert tc.Target("llvm").machine.row_prefetch_bytes == 4096


def test_a_new_cost_measures_again(fresh, monkeypatch):
    """The cache file's name covers the costs this version measures: a calibration kept
    before a cost was added (its file lacks it) is not read; the next use measures."""
    host, _ = fresh
    before = cal.cache_path(host)
    cal._file_name.cache_clear()
    monkeypatch.setattr(cal, "_CHECKS", {k: v for k, v in cal._CHECKS.items()
                                         if k != "row_prefetch_bytes"})
    try:
        assert cal.cache_path(host) != before
    finally:
        cal._file_name.cache_clear()


@pytest.mark.parametrize("copy,streamed,want", [(1.3, 1.0, (cal.STREAM_COPY_MIB << 20) // 2),
                                                (1.1, 1.0, (cal.STREAM_COPY_MIB << 20) // 2),
                                                (1.05, 1.0, 0), (0.8, 1.0, 0)])
def test_streamed_outputs_where_the_streamed_copy_gains(copy, streamed, want):
    """``stream_output_bytes``: half the timed copy's output where the copy stored past
    the cache ran STREAM_GAIN times faster or more, else 0 (the rule's own bound)."""
    med = dict(_MEDIANS)
    base = cal.costs_from(med, 16, 64, 576, (0.6, 0.3))
    assert "stream_output_bytes" not in base
    costs = cal.costs_from(dict(med, copy=copy, copy_streamed=streamed), 16, 64, 576,
                           (0.6, 0.3))
    assert costs == dict(base, stream_output_bytes=want)
    assert cal._valid(costs, 16) is None


@pytest.mark.parametrize("kind", ["fifo", "directory", "link_to_dev_zero"])
def test_a_special_file_in_the_cache_is_never_read(fresh, monkeypatch, kind):
    """A FIFO where the calibration should be blocked every process's first schedule
    (its read waits for a writer); a device never ends.  Each is ignored with a warning
    that says what it is.  (A thread writes into the FIFO after 30 s, so that a
    regression fails this test instead of hanging it.)"""
    import os
    import threading
    host, _ = fresh
    monkeypatch.setenv("TECOMP_CALIBRATE", "0")
    path = cal.cache_path(host)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    why = {"fifo": "it is a FIFO", "directory": "it is a directory",
           "link_to_dev_zero": "it is a character device"}[kind]
    if kind == "fifo":
        os.mkfifo(path)

        def unblock():
            try:
                fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:      # no reader: nothing to unblock
                return
            os.write(fd, b"{}")
            os.close(fd)

        timer = threading.Timer(30.0, unblock)
        timer.start()
    elif kind == "directory":
        path.mkdir()
    else:
        os.symlink("/dev/zero", path)
    try:
        with pytest.warns(RuntimeWarning, match=rf"ignoring the machine calibration .*: "
                                                rf"{why}.*python -m tecomp calibrate"):
            assert tc.Target("llvm").machine.gemm_load_cost == 0.0
    finally:
        if kind == "fifo":
            timer.cancel()
