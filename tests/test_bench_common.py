"""benchmarks/common.py's interleaved turns and round-by-round ratios (their bookkeeping:
no timing is asserted here)."""
import math
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))
import common  # noqa: E402


def test_per_round_medians_one_a_round():
    calls = {"a": 0, "b": 0}

    def tool(n):
        def f():
            calls[n] += 1
        return f

    per, counts = {}, {}
    t = common.interleaved_turns({"a": tool("a"), "b": tool("b")}, rounds=3,
                                 turn_seconds=0.0, per_round=per, counts=counts)
    assert set(per) == {"a", "b"} and all(len(v) == 3 for v in per.values())
    # (four calls a turn, the first not counted, plus the warm-up call)
    assert calls == {"a": 13, "b": 13}
    assert counts == {"a": (9, 12), "b": (9, 12)}
    assert all(v >= 0 for v in per["a"] + per["b"]) and set(t) == {"a", "b"}


def test_paired_takes_the_ratio_within_each_round():
    # round by round 2, 3, 1: median 2 (the ratio of the medians would be 4 / 2)
    assert common.paired([2.0, 6.0, 4.0], [1.0, 2.0, 4.0]) == (2.0, 1.0, 3.0)


def test_paired_skips_rounds_without_a_number():
    nan = float("nan")
    assert common.paired([nan, 4.0, 3.0], [1.0, 2.0, nan]) == (2.0, 2.0, 2.0)
    assert all(math.isnan(v) for v in common.paired([nan], [1.0]))
    assert all(math.isnan(v) for v in common.paired([1.0], [0.0]))


@pytest.mark.parametrize("held", [0, 2])
def test_a_round_with_no_counted_call_is_nan(held, monkeypatch):
    # a held count that no call meets (the process's CPU time never moves): nan
    monkeypatch.setattr(common.time, "process_time", lambda: 0.0)
    per = {}
    t = common.interleaved_turns({"a": lambda: None}, rounds=2, turn_seconds=0.0,
                                 held=held, per_round=per)
    if held:
        assert math.isnan(t["a"]) and all(math.isnan(v) for v in per["a"])
    else:
        assert len(per["a"]) == 2 and not math.isnan(t["a"])


def test_huge_pool_one_aligned_buffer_per_size():
    """common.HugePool: arrays on a 2 MiB boundary, the same buffer for every array of one
    byte size (whatever its shape or dtype), another for another size; the values copied
    in (the pages' huge share is the kernel's to give: not asserted)."""
    import numpy as np
    pool = common.HugePool()
    a = pool.copy_of(np.arange(12, dtype="float32").reshape(3, 4))
    assert a.ctypes.data % common.HUGE_PAGE == 0 and a.flags.c_contiguous
    assert a.shape == (3, 4) and a.dtype == np.float32
    np.testing.assert_array_equal(a, np.arange(12).reshape(3, 4))
    b = pool.array((48,), "bool")            # the same 48 bytes: the same buffer
    assert b.ctypes.data == a.ctypes.data
    c = pool.array((5, 5), "float64")        # another size: another buffer
    assert c.ctypes.data != a.ctypes.data and c.ctypes.data % common.HUGE_PAGE == 0
    c[...] = 1.5
    np.testing.assert_array_equal(a, np.arange(12).reshape(3, 4))   # (untouched by c)
    share = common.huge_page_share(a)
    assert share is None or 0.0 <= share <= 1.0
