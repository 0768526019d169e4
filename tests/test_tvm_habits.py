"""TVM spellings tecomp accepts where they mean the same thing: ``tc.lower(...,
simple_mode=True)``, ``tc.cpu(0)``/``tc.cuda(0)``/``tc.device``, ``tc.nd.array`` and its
``asnumpy()``/``numpy()``, ``tc.build(..., entry_name=/target_host=)``, ``f.entry_name``
and ``f.time_evaluator(f.entry_name, dev)``; lazy subpackages (``tc.testing``).  The refusals
are in tests/must_fail/test_tvm_spelling_errors.py."""
import os
import subprocess
import sys

import numpy as np
import pytest

import tecomp as tc

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _double(n=64):
    A = tc.placeholder((n,), name="A")
    B = tc.compute((n,), lambda i: A[i] * 2.0, name="B")
    return tc.create_schedule(B.op), [A, B]


def test_lower_simple_mode_prints_the_same_loop_nest():
    s, args = _double()
    plain = str(tc.lower(s, args))
    assert str(tc.lower(s, args, simple_mode=True)) == plain
    assert str(tc.lower(s, args, simple_mode=False)) == plain


def test_devices():
    assert tc.cpu(0) == tc.cpu() == tc.device("cpu") == tc.device("llvm", 0) == tc.device(1)
    assert tc.cuda(0) == tc.device("cuda", 0) == tc.device("cuda:0") == tc.device("gpu")
    assert tc.device("cuda:1") == tc.cuda(1) != tc.cuda(0)
    d = tc.cuda(1)
    assert (d.device_type, d.device_id, d.kind) == (2, 1, "cuda")
    assert (tc.cpu(0).device_type, tc.cpu(0).device_id) == (1, 0)
    assert repr(d) == str(d) == "cuda(1)" and repr(tc.cpu(0)) == "cpu(0)"
    assert d.__dlpack_device__() == (2, 1)
    assert tc.cpu(0).exist is True
    assert len({tc.cpu(0), tc.device("cpu"), tc.cuda(0)}) == 2
    tc.cpu(0).sync()


def test_nd_array_is_a_numpy_array_with_tvms_methods():
    x = np.arange(12, dtype="float32").reshape(3, 4)
    a = tc.nd.array(x, tc.cpu(0))
    assert isinstance(a, np.ndarray) and isinstance(a, tc.nd.NDArray)
    assert a.device == tc.cpu(0) and a.dtype == "float32" and a.shape == (3, 4)
    assert a.ctypes.data % 64 == 0 and a.flags.c_contiguous
    x[0, 0] = 99                    # a copy, as tvm.nd.array
    assert a[0, 0] == 0
    n = a.asnumpy()
    assert type(n) is np.ndarray and np.array_equal(n, a) and not np.shares_memory(n, a)
    assert type(a.numpy()) is np.ndarray and np.array_equal(a.numpy(), a)
    b = tc.nd.empty((3, 4), "float32", tc.device("cpu"))
    assert b.copyfrom(x) is b and np.array_equal(b.numpy(), x)
    c = np.zeros((3, 4), "float32")
    assert b.copyto(c) is c and np.array_equal(c, x)
    d = b.copyto(tc.cpu(0))
    assert isinstance(d, tc.nd.NDArray) and not np.shares_memory(d, b)
    assert np.array_equal(tc.nd.array([1, 2]).numpy(), [1, 2])


def test_a_tvm_program_runs_as_written():
    n = 1024
    A = tc.placeholder((n,), name="A")
    B = tc.compute((n,), lambda i: A[i] + 1.0, name="B")
    s = tc.create_schedule(B.op)
    f = tc.build(s, [A, B], target="llvm", target_host="llvm", entry_name="add_one")
    assert f.entry_name == f.name == "add_one"
    dev = tc.cpu(0)
    a = tc.nd.array(np.random.rand(n).astype(A.dtype), dev)
    b = tc.nd.array(np.zeros(n, dtype=B.dtype), dev)
    f(a, b)
    np.testing.assert_allclose(b.asnumpy(), a.asnumpy() + 1)
    evaluator = f.time_evaluator(f.entry_name, dev, number=2, repeat=2)
    r = evaluator(a, b)
    assert len(r.results) == 2 and r.mean > 0


def test_nd_arrays_take_the_fast_path(monkeypatch):
    # a call with NDArrays runs on their plain numpy views: the generic argument path
    # (Module._prepare) is not taken
    s, args = _double()
    f = tc.build(s, args)
    a, b = tc.nd.array(np.ones(64, "float32")), tc.nd.empty((64,), "float32")
    f(a, b)
    calls = []
    prepare = type(f)._prepare
    monkeypatch.setattr(type(f), "_prepare", lambda self, *x: calls.append(1) or prepare(self, *x))
    f(a, b)
    assert calls == [] and np.array_equal(b.numpy(), 2 * np.ones(64))


def test_name_and_entry_name_agree():
    s, args = _double()
    assert tc.build(s, args, name="f", entry_name="f").entry_name == "f"


def test_a_cpu_target_host_is_accepted_for_the_emulated_gpu():
    n = 64
    A = tc.placeholder((n,), name="A")
    B = tc.compute((n,), lambda i: A[i] * 2.0, name="B")
    s = tc.create_schedule(B.op)
    bx, tx = s[B].split(B.op.axis[0], factor=32)
    s[B].bind(bx, tc.thread_axis("blockIdx.x"))
    s[B].bind(tx, tc.thread_axis("threadIdx.x"))
    f = tc.build(s, [A, B], target="cuda-emu", target_host="llvm")
    assert f.entry_name == "main"
    a, b = np.ones(n, "float32"), np.zeros(n, "float32")
    f.time_evaluator(f.entry_name, tc.cuda(0), number=1, repeat=1)(a, b)
    assert np.array_equal(b, 2 * a)


def test_subpackages_import_on_first_use():
    code = ("import sys, tecomp as tc; assert 'tecomp.testing' not in sys.modules; "
            "print(tc.nn.dense.__module__, tc.testing.__name__)")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120, env=env, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["tecomp.nn.linalg", "tecomp.testing"]
