"""tecomp.testing.builds.BuildMemo: the tests' kernels built once, rebuilt wherever the
function or the code generator's settings differ."""
import os

import numpy as np

import tecomp as tc
from tecomp.testing.builds import BuildMemo


def _add(n, c):
    A = tc.placeholder((n,), name="A")
    B = tc.compute((n,), lambda i: A[i] + c, name="B")
    return tc.create_schedule(B.op), [A, B]


def _run(f, n):
    a = np.arange(n, dtype="float32")
    b = np.empty(n, "float32")
    f(a, b)
    return b


def test_the_same_function_is_built_once_and_another_again(monkeypatch):
    memo = BuildMemo()
    f = memo.build(*_add(16, 1.0))
    # a new schedule of a new definition that lowers to the same function: the same module
    assert memo.build(*_add(16, 1.0)) is f and memo.hits == 1
    np.testing.assert_array_equal(_run(f, 16), np.arange(16) + 1)
    # another constant, another shape, another target: built, and right
    g = memo.build(*_add(16, 2.0))
    assert g is not f
    np.testing.assert_array_equal(_run(g, 16), np.arange(16) + 2)
    assert memo.build(*_add(17, 1.0)) is not f
    assert memo.build(*_add(16, 1.0), target="llvm -mcpu=haswell") is not f
    # a code generator's switch or a TECOMP_ setting that the IR does not show: built again
    from tecomp.codegen.llvm import emit_memory
    monkeypatch.setattr(emit_memory, "BYTE_BOOL_LOGIC", not emit_memory.BYTE_BOOL_LOGIC)
    h = memo.build(*_add(16, 1.0))
    assert h is not f
    monkeypatch.undo()
    assert memo.build(*_add(16, 1.0)) is f
    monkeypatch.setenv("TECOMP_LLVM_OPT_WORKER",
                       "0" if os.environ.get("TECOMP_LLVM_OPT_WORKER") == "1" else "1")
    assert memo.build(*_add(16, 1.0)) is not f
    assert memo.hits == 2


def test_only_the_last_builds_are_kept():
    memo = BuildMemo(size=2)
    f = memo.build(*_add(8, 1.0))
    memo.build(*_add(8, 2.0))
    memo.build(*_add(8, 3.0))
    assert memo.build(*_add(8, 1.0)) is not f and memo.hits == 0
