"""The thread pools' workspace cache (docs/runtime.md, "Workspace"): a kernel's large heap
temporaries are kept for the next call instead of being freed, within a limit; results
never depend on what a reused block held; concurrent calls get blocks of their own."""
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import tecomp as tc
from tecomp.threads import workspace_limit_from_env
from tecomp.ir import Allocate, PrimFunc, Var, seq

from test_codegen_llvm import buf, ld, loop, st

MIB = 1 << 20
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _chain(n, stages=1, name="ws"):
    """A -> T1 -> ... -> T<stages> -> out, each temporary a float32[n] on the heap
    (all live at once); out = A * 2^stages + stages."""
    A = tc.placeholder((n,), name="A")
    t = A
    def double(t, k):
        return tc.compute((n,), lambda i: t[i] * 2.0, name=f"T{k}")

    for k in range(stages):
        t = double(t, k)
    out = tc.compute((n,), lambda i: t[i] + float(stages), name="out")
    return tc.build(tc.create_schedule(out.op), [A, out], name=name)


def _check(f, n, stages=1, seed=0):
    a = np.random.default_rng(seed).random(n, dtype=np.float32)
    out = np.full(n, np.nan, np.float32)
    f(a, out)
    np.testing.assert_allclose(out, a * 2.0 ** stages + stages, rtol=1e-6)


@pytest.fixture
def cache():
    tc.release_workspace()
    yield
    tc.set_workspace_limit(workspace_limit_from_env())
    tc.release_workspace()


def test_a_large_temporary_is_kept_and_reused(cache):
    f = _chain(MIB)                                   # one 4 MiB temporary
    assert tc.workspace_cached() == 0
    _check(f, MIB)
    assert tc.workspace_cached() == 4 * MIB
    for seed in range(3):                             # reused: nothing more is kept
        _check(f, MIB, seed=seed)
        assert tc.workspace_cached() == 4 * MIB
    assert tc.release_workspace() == 4 * MIB
    assert tc.workspace_cached() == 0
    _check(f, MIB)


def test_small_temporaries_are_not_kept(cache):
    f = _chain(32 * 1024)                             # 128 KiB: malloc's own business
    _check(f, 32 * 1024)
    assert tc.workspace_cached() == 0


def test_a_block_serves_requests_up_to_twice_smaller(cache):
    big, mid, small = _chain(MIB, name="big"), _chain(3 * MIB // 4, name="mid"), \
        _chain(MIB // 4, name="small")
    _check(big, MIB)
    _check(mid, 3 * MIB // 4)                         # 3 MiB takes the 4 MiB block
    assert tc.workspace_cached() == 4 * MIB
    _check(small, MIB // 4)                           # 1 MiB does not: a block of its own
    assert tc.workspace_cached() == 5 * MIB
    _check(big, MIB)
    assert tc.workspace_cached() == 5 * MIB


def test_the_limit_bounds_what_is_kept(cache):
    f = _chain(MIB, stages=3)                         # three 4 MiB temporaries at once
    tc.set_workspace_limit(0)
    _check(f, MIB, stages=3)
    assert tc.workspace_cached() == 0
    tc.set_workspace_limit(9 * MIB)                   # room for two of the three
    _check(f, MIB, stages=3)
    assert tc.workspace_cached() == 8 * MIB
    _check(f, MIB, stages=3)
    assert tc.workspace_cached() == 8 * MIB
    tc.set_workspace_limit(5 * MIB)                   # lowering it frees what is over
    assert tc.workspace_cached() == 0
    _check(f, MIB, stages=3)
    assert tc.workspace_cached() == 4 * MIB


def test_concurrent_calls_get_blocks_of_their_own(cache):
    f = _chain(MIB, stages=2)
    errors = []

    def work(seed):
        try:
            for r in range(10):
                _check(f, MIB, stages=2, seed=seed * 100 + r)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    assert 8 * MIB <= tc.workspace_cached() <= 6 * 8 * MIB


def test_a_failed_call_gives_its_blocks_back(cache):
    # H1 (4 MiB) is allocated, then H2 of `size` int64s fails: the error exit returns H1
    n, size = Var("n", "int64"), Var("size", "int64")
    A = buf("A", (n,))
    H1, H2 = buf("H1", (n,)), buf("H2", (size,), "int64")
    i, k = Var("i", "int64"), Var("k", "int64")
    body = Allocate(H1, seq(loop(i, n, st(H1, ld(A, i) * 2.0, i)),
                            Allocate(H2, seq(loop(k, size, st(H2, k, k)),
                                             loop(i, n, st(A, ld(H1, i) + 1.0, i))))))
    from tecomp.codegen.llvm import build_llvm

    m = build_llvm(PrimFunc("fail_after_alloc", (A, size), body))
    a = np.ones(MIB, np.float32)
    with pytest.raises(tc.KernelMemoryError, match="for H2"):
        m(a, (2 ** 63 - 8) // 8)
    assert tc.workspace_cached() == 4 * MIB
    m(a, 16)
    assert (a == 3.0).all()
    assert tc.workspace_cached() == 4 * MIB


def test_an_exported_library_has_its_own_cache(cache, tmp_path):
    path = str(tmp_path / "chain.so")
    _chain(MIB, name="lib_chain").export_library(path)
    g = tc.load_module(path)
    _check(g, MIB)
    assert tc.workspace_cached() == 4 * MIB
    assert tc.release_workspace() == 4 * MIB
    assert tc.workspace_cached() == 0


_ENV_SCRIPT = r"""
import sys, warnings
sys.path.insert(0, %r)
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    import numpy as np, tecomp as tc
    A = tc.placeholder((1 << 20,), name="A")
    T = tc.compute(A.shape, lambda i: A[i] * 2.0, name="T")
    B = tc.compute(A.shape, lambda i: T[i] + 1.0, name="B")
    f = tc.build(tc.create_schedule(B.op), [A, B])
    a = np.ones(1 << 20, np.float32); b = np.empty_like(a)
    f(a, b)
assert (b == 3).all()
print(tc.workspace_cached(), [str(x.message) for x in w])
"""


@pytest.mark.parametrize("value, cached, warned", [
    ("0", 0, False), ("1048576", 0, False), ("8388608", 4 * MIB, False),
    ("lots", 4 * MIB, True)])
def test_the_limit_from_the_environment(value, cached, warned):
    env = dict(os.environ, TECOMP_WORKSPACE_LIMIT=value)
    r = subprocess.run([sys.executable, "-c", _ENV_SCRIPT % ROOT], capture_output=True,
                       text=True, env=env, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    got, msgs = r.stdout.split(" ", 1)
    assert int(got) == cached
    assert ("TECOMP_WORKSPACE_LIMIT='lots' is not a non-negative integer" in msgs) == warned
