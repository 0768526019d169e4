"""Each lowering pass on its own, as TVM tests its passes: the IR before the pass and the
IR it must give.  The `before` IR is written by hand where that is short, else made by
the schedule that needs the pass; the `after` IR is pinned as printed.  Every pass of
``tecomp.lower.pipeline.PASSES`` has a test here (the last test checks it)."""
import importlib

import pytest

import tecomp as tc
from tecomp.errors import InternalError, ScheduleError
from tecomp.ir import (
    Buffer, BufferLoad, BufferStore, Const, For, PrimFunc, ProducerLoad, Var, seq, to_str,
)
from tecomp.ir.expr import Add, FloorDiv, Mul
from tecomp.lower import passes as P
from tecomp.lower.schedule_ops import schedule_to_stmt

from helpers import gpu_shared_tile

pipeline = importlib.import_module("tecomp.lower.pipeline")  # tc.lower is the function


def _through(name, s, args, target="llvm"):
    """(before, after) of pass ``name`` when ``s`` is lowered (it must change the IR)."""
    params, body, _ = schedule_to_stmt(s, list(args))
    func = PrimFunc("main", tuple(params), body, {"target": tc.Target(target)})
    got = {}
    pipeline.run_passes(func, tc.Target(target).kind,
                        check=lambda n, b, a: got.setdefault(n, (to_str(b), to_str(a))))
    return got[name]


def _text(s: str) -> str:
    return "\n".join(line[4:] for line in s.strip("\n").splitlines())


I = Var("i", "int32")
A16 = Buffer("A", (Const(16),), "float32")
B16 = Buffer("B", (Const(16),), "float32")


def test_simplify():
    idx = FloorDiv(Add(Mul(I, Const(4), "int32"), Const(2), "int32"), Const(4), "int32")
    store = BufferStore(B16, BufferLoad(A16, (idx,), "float32"),
                        (Add(Mul(I, Const(1), "int32"), Const(0), "int32"),))
    before = PrimFunc("f", (A16, B16), For(I, Const(0), Const(16), "serial", store))
    assert to_str(P.simplify_pass(before)) == _text("""
    primfn f(A: float32[16], B: float32[16]) {
      for (i, 0, 16) {
        B[i] = A[i]
      }
    }""")


def test_remove_no_op():
    j = Var("j", "int32")
    empty = For(j, Const(0), Const(0), "serial", BufferStore(B16, Const(0.0, "float32"), (j,)))
    body = For(I, Const(0), Const(16), "serial",
               BufferStore(B16, BufferLoad(A16, (I,), "float32"), (I,)))
    after = P.remove_no_op_pass(PrimFunc("f", (A16, B16), seq(empty, body)))
    assert to_str(after) == _text("""
    primfn f(A: float32[16], B: float32[16]) {
      for (i, 0, 16) {
        B[i] = A[i]
      }
    }""")


def test_loop_partition():
    A = tc.placeholder((10,), name="A")
    B = tc.compute((10,), lambda i: A[i] * 2.0, name="B")
    s = tc.create_schedule(B.op)
    s[B].split(B.op.axis[0], factor=4)
    before, after = _through("loop_partition", s, [A, B])
    assert "if (i.outer*4 + i.inner < 10)" in before
    assert after == _text("""
    primfn main(A: float32[10], B: float32[10]) {
      for (i.outer, 0, 2) {
        for (i.inner, 0, 4) {
          B[i.outer*4 + i.inner] = A[i.outer*4 + i.inner]*2f
        }
      }
      for (i.outer, 2, 1) {
        for (i.inner, 0, 2) {
          B[i.inner + 8] = A[i.inner + 8]*2f
        }
      }
    }""")


def test_unroll_explicit():
    A = tc.placeholder((12,), name="A")
    B = tc.compute((12,), lambda i: A[i] + 1.0, name="B")
    s = tc.create_schedule(B.op)
    xo, xi = s[B].split(B.op.axis[0], factor=3)
    s[B].pragma(xi, "unroll_explicit")
    before, after = _through("unroll_explicit", s, [A, B])
    assert "// attr pragma_unroll_explicit" in before
    assert after == _text("""
    primfn main(A: float32[12], B: float32[12]) {
      for (i.outer, 0, 4) {
        B[i.outer*3] = A[i.outer*3] + 1f
        B[i.outer*3 + 1] = A[i.outer*3 + 1] + 1f
        B[i.outer*3 + 2] = A[i.outer*3 + 2] + 1f
      }
    }""")


def test_prefetch():
    A = tc.placeholder((64, 64), name="A")
    B = tc.compute((64, 64), lambda i, j: A[i, j] * 2.0, name="B")
    s = tc.create_schedule(B.op)
    s[B].prefetch(A, B.op.axis[0], 4)
    before, after = _through("prefetch", s, [A, B])
    assert "// attr prefetch = A at i + 4" in before
    assert after == _text("""
    primfn main(A: float32[64, 64], B: float32[64, 64]) {
      for (i, 0, 64) {
        for (A.pf1, 0, 5) {
          prefetch A[min(i + 4, 63), min(A.pf1*16, 63)]
        }
        for (j, 0, 64) {
          B[i, j] = A[i, j]*2f
        }
      }
    }""")


def test_insert_barriers():
    s, args = gpu_shared_tile()
    before, after = _through("insert_barriers", s, args, "cuda")
    assert "syncthreads" not in before
    assert after == _text("""
    primfn main(A: float32[64], B: float32[64]) {
      blockIdx.x (i.outer, 0, 4) {
        allocate A.shared: float32[16] (shared)
        threadIdx.x (i0.inner, 0, 16) {
          A.shared[i0.inner] = A[i0.inner - i.outer*16 + 48]
        }
        syncthreads()
        threadIdx.x (i.inner, 0, 16) {
          B[i.outer*16 + i.inner] = A.shared[15 - i.inner]*2f
        }
      }
    }""")


def test_verify_thread_extents():
    A = tc.placeholder((64,), name="A")
    B = tc.compute((64,), lambda i: A[i] * 2.0, name="B")
    s = tc.create_schedule(B.op)
    bo, bi = s[B].split(B.op.axis[0], factor=2048)
    s[B].bind(bo, tc.thread_axis("blockIdx.x"))
    s[B].bind(bi, tc.thread_axis("threadIdx.x"))
    params, body, _ = schedule_to_stmt(s, [A, B])
    func = PrimFunc("main", tuple(params), body, {"target": tc.Target("cuda")})
    with pytest.raises(ScheduleError, match=r"1024|threads per block|threadIdx"):
        P.verify_thread_extents_pass(func)


def test_verify():
    A = tc.placeholder((16,), name="A")
    left = BufferStore(B16, ProducerLoad(A, (I,), "float32"), (I,))
    func = PrimFunc("f", (A16, B16), For(I, Const(0), Const(16), "serial", left))
    with pytest.raises(InternalError, match=r"tecomp bug"):
        P.verify_pass(func)
    ok = PrimFunc("f", (A16, B16), For(I, Const(0), Const(16), "serial", BufferStore(
        B16, BufferLoad(A16, (I,), "float32"), (I,))))
    assert P.verify_pass(ok) is ok


#: the test of each pass
PASS_TESTS = {
    "simplify": test_simplify, "simplify_after_partition": test_simplify,
    "prefetch": test_prefetch, "loop_partition": test_loop_partition,
    "unroll_explicit": test_unroll_explicit, "remove_no_op": test_remove_no_op,
    "verify_thread_extents": test_verify_thread_extents,
    "insert_barriers": test_insert_barriers, "verify": test_verify,
}


def test_every_pass_has_a_test_here():
    names = {name for name, _, _ in pipeline.PASSES}
    assert names == set(PASS_TESTS), (
        f"passes without a before/after test here: {sorted(names - set(PASS_TESTS))}")
