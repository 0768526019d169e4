"""Deeply nested expressions: ``lambda i: sum(A[i, j] for j in range(5000))`` (a chain of
5000 additions) compiles, prints, runs, differentiates and auto-schedules; a chain deeper
than tecomp's passes walk is an ExprError that says how deep it is and how to restructure
it; never a RecursionError, an InternalError or a crash.  (tecomp's passes are recursive
Python: past Python's recursion limit an entry point runs again on a big stack,
tecomp/ir/deep.py.)

Each case runs in a child process (tests/deep_programs.py): a stack overflow would kill
it, not pytest.  The 20,000-deep cases take minutes (LLVM alone takes about a minute on
such a kernel): TECOMP_LONG_TESTS=1.
"""
import json
import os
import subprocess
import sys

import pytest

from tecomp.ir import deep

HERE = os.path.dirname(os.path.abspath(__file__))
LONG = os.environ.get("TECOMP_LONG_TESTS", "") not in ("", "0")
slow = pytest.mark.skipif(not LONG, reason="slow: set TECOMP_LONG_TESTS=1")


def child(*args, timeout=900):
    r = subprocess.run([sys.executable, os.path.join(HERE, "deep_programs.py"),
                        *map(str, args)], capture_output=True, text=True, timeout=timeout,
                       cwd=os.path.dirname(HERE))
    assert r.returncode == 0, (r.returncode, r.stdout[-2000:], r.stderr[-3000:])
    return json.loads(r.stdout.strip().splitlines()[-1])


def check_paths(out):
    for path in ("llvm", "cuda_emu", "interp", "gradient", "auto_schedule", "cache_write"):
        assert out[path] == 0.0, (path, out)
    assert out["printed_lines"] >= 3 and out["body_chars"] > 1000
    assert out["recursion_limit"] == 1000     # back to Python's default afterwards


def test_sum_of_1000_terms_on_every_path():
    """Python 3.11's default recursion limit stopped tecomp at about 330 terms (the first
    RecursionError came from tc.compute's checks)."""
    check_paths(child("paths", 1000))


@pytest.mark.slow
@slow
@pytest.mark.parametrize("depth", [5000, 20000])
def test_sum_of_many_terms_on_every_path(depth):
    check_paths(child("paths", depth, timeout=3600))


@pytest.mark.parametrize("seed,depth", [(1, 1000), (2, 3000)])
def test_random_deep_trees_against_numpy(seed, depth):
    """Chains of random + - * min max select and casts (through float64 and int32) on
    fresh elements, on llvm, equal bit for bit to numpy doing the same float32
    operations in the same order.  (3000 levels: three times Python's recursion limit;
    the build's time grows faster than the depth, 5000 took 2.6 times as long; the
    20,000-deep trees run with TECOMP_LONG_TESTS=1.)"""
    out = child("random", seed, depth)
    assert out["ir_depth"] >= depth - 3 and out["ops"] > depth // 2, out
    assert out["equal"], out


@pytest.mark.slow
@slow
@pytest.mark.parametrize("seed", [3, 4])
def test_random_trees_20000_deep_against_numpy(seed):
    out = child("random", seed, 20000, timeout=3600)
    assert out["ir_depth"] >= 19997 and out["equal"], out


def test_deeper_than_tecomp_walks_is_an_expr_error():
    """Past the helper's recursion limit (made small here, so that the test is quick): an
    ExprError naming the depth and the two ways to restructure; the limit restored."""
    out = child("too_deep_small", 8000)
    assert out["limit_restored"]
    assert out["error"].startswith(
        "ExprError: compute B: the deepest expression is 8,002 levels deep, more than "
        "tecomp's passes can walk (about 400 levels; Python's recursion limit). Restructure "
        "it: a sum, product, min or max over many terms is a reduction"), out
    assert "tc.sum(A[i, k], axis=k)" in out["error"] and "balanced tree" in out["error"]


@pytest.mark.slow
@slow
def test_600000_deep_is_an_expr_error():
    out = child("too_deep", 600_000, timeout=3600)
    assert out["limit_restored"]
    assert out["error"].startswith("ExprError: compute B: the deepest expression is 600,002 "
                                   "levels deep"), out


def test_deep_compiles_in_threads_at_once():
    """Two threads compile deep programs while a third builds ordinary kernels (the
    recursion limit is one number for the process: raised only while no entry point runs
    at the ordinary limit, restored after the last)."""
    out = child("threads", 1500)
    assert out["errors"] == [], out
    assert out["results"] == {"deep0": 0.0, "deep1": 0.0, "shallow": 0.0}, out
    assert out["limit_restored"]


def test_python_operations_on_a_deep_expression():
    """Outside tecomp's entry points: structural equality works at any depth (a loop);
    the dataclasses' hash and repr stop at Python's limit with a RecursionError, and
    nothing crashes."""
    out = child("python_ops", 5000)
    assert out == {"equal": True, "not_equal": False, "eq_bool": True,
                   "hash": "RecursionError", "repr": "RecursionError"}, out


# ---------------------------------------------------------------------------------
# the helper itself (in this process: nothing here is deep)


def test_shallow_calls_stay_in_the_calling_thread():
    import threading

    seen = []
    f = deep.deep_entry(lambda: ("f", None))(lambda: seen.append(threading.current_thread()))
    f()
    assert seen == [threading.current_thread()]


def test_a_recursion_error_runs_again_on_the_big_stack():
    import threading

    calls = []

    def walk(n):
        return 0 if n == 0 else 1 + walk(n - 1)

    def f(n):
        calls.append((threading.current_thread().name, sys.getrecursionlimit()))
        return walk(n)

    g = deep.deep_entry(lambda n: ("f", None))(f)
    before = sys.getrecursionlimit()
    assert g(5000) == 5000
    assert [c[0] for c in calls] == [threading.current_thread().name, "tecomp-deep"]
    assert calls[1][1] >= deep.RECURSION_LIMIT
    assert sys.getrecursionlimit() == before


def test_errors_of_the_second_run_reach_the_caller():
    def walk(n):
        if n == 0:
            raise KeyError("at the bottom")
        return walk(n - 1)

    g = deep.deep_entry(lambda n: ("f", None))(walk)
    with pytest.raises(KeyError, match="at the bottom"):
        g(5000)


def test_a_tecomp_error_is_not_run_again():
    from tecomp.errors import ShapeError

    calls = []

    def f():
        calls.append(1)
        try:
            raise RecursionError("deep")
        except RecursionError:
            raise ShapeError("a verdict on the program") from None

    with pytest.raises(ShapeError):
        deep.deep_entry(lambda: ("f", None))(f)()
    assert calls == [1]


def test_depth_of_a_dag_without_recursion():
    import tecomp as tc

    A = tc.placeholder((4,), name="A")
    e = A[0]
    for _ in range(50_000):
        e = e + e          # shared: 2**50000 paths, 50,000 levels
    assert deep.node_depth(e) == 50_002


def test_a_vectorized_chain_of_selects_makes_code_in_proportion():
    """The fuzzer's deep edge family (seed 9400175): a vectorized chain of 1970 levels
    with lazy selects did not build in 10 minutes: each select's unmasked fast path
    copied the chain below it once more, so the LLVM IR grew as the square of the depth
    (2.3 MB at 300 levels).  Sides of more than a few dozen nodes now run masked only:
    the IR grows in proportion, and the values stay numpy's."""
    import numpy as np

    import tecomp as tc
    from tecomp.testing.deep import chain_compute, chain_reference, random_chain

    sizes = {}
    for depth in (150, 300):
        ops = random_chain(9400175, depth)
        A, B = chain_compute(ops, 16)
        s = tc.create_schedule(B.op)
        _, inner = s[B].split(B.op.axis[0], factor=4)
        s[B].vectorize(inner)
        f = tc.build(s, [A, B])
        sizes[depth] = len(f.get_source("llvm"))
        a = np.random.default_rng(depth).uniform(-1, 1, (16, len(ops) + 1)).astype("float32")
        got = np.zeros(16, "float32")
        f(a, got)
        np.testing.assert_array_equal(got, chain_reference(ops, a))
    assert sizes[300] < 2.6 * sizes[150], sizes
