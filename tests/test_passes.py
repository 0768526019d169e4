"""Each lowering pass on its own, as TVM tests its passes: the IR before the pass and the
IR it must give.  The `before` IR is written by hand where that is short, else made by
the schedule that needs the pass; the `after` IR is pinned as printed.  Every pass of
``tecomp.lower.pipeline.PASSES`` and ``CODEGEN_PASSES`` has a test here (the last test
checks it)."""
import importlib

import numpy as np
import pytest

import tecomp as tc
from tecomp.errors import InternalError, ScheduleError
from tecomp.ir import (
    Buffer, BufferLoad, BufferStore, Const, For, PrimFunc, ProducerLoad, Var, seq, to_str,
)
from tecomp.ir.expr import Add, Cast, FloorDiv, Mul
from tecomp.lower import passes as P
from tecomp.lower.schedule_ops import schedule_to_stmt

from helpers import gpu_shared_tile, run

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


def test_loop_partition_on_a_lower_bound():
    """An if's lower bound ``i + k >= 2`` splits the loops as an upper bound does: the
    rows where it holds for every tap lose it, the others start their tap loop past the
    taps it leaves out (no test left)."""
    A = tc.placeholder((8,), name="A")
    k = tc.reduce_axis((0, 3), name="k")
    B = tc.compute((6,), lambda i: tc.sum(A[i + k], axis=k, where=i + k >= 2), name="B")
    before, after = _through("loop_partition", tc.create_schedule(B.op), [A, B])
    assert "if (i + k >= 2) {" in before
    assert after == _text("""
    primfn main(A: float32[8], B: float32[6]) {
      for (i, 0, 2) {
        B[i] = 0f
        for (k, min(max(2 - i, 0), 3), 3 - min(max(2 - i, 0), 3)) {
          B[i] = B[i] + A[i + k]
        }
      }
      for (i, 2, 4) {
        B[i] = 0f
        for (k, 0, 3) {
          B[i] = B[i] + A[i + k]
        }
      }
    }"""), after


def test_loop_partition_drops_the_iterations_a_guard_rules_out():
    """A row of 56 split into panels of 48 lanes, each three unrolled vectors of 16: the
    last panel has 8 lanes, so its second and third vectors store nothing. They are
    dropped, and the first becomes an 8-lane vector with no guard (before: three
    16-lane vectors, each under a per-lane guard)."""
    A = tc.placeholder((56,), name="A")
    B = tc.compute((56,), lambda i: A[i] * 2.0, name="B")
    s = tc.create_schedule(B.op)
    xo, xi = s[B].split(B.op.axis[0], factor=48)
    vo, vi = s[B].split(xi, factor=16)
    s[B].unroll(vo)
    s[B].vectorize(vi)
    before, after = _through("loop_partition", s, [A, B])
    assert "if (i.outer*48 + i.inner.outer*16 + i.inner.inner < 56)" in before, before
    assert after == _text("""
    primfn main(A: float32[56], B: float32[56]) {
      for (i.outer, 0, 1) {
        unrolled (i.inner.outer, 0, 3) {
          vectorized (i.inner.inner, 0, 16) {
            B[i.outer*48 + i.inner.outer*16 + i.inner.inner] = A[i.outer*48 + i.inner.outer*16 + i.inner.inner]*2f
          }
        }
      }
      for (i.outer, 1, 1) {
        unrolled (i.inner.outer, 0, 1) {
          vectorized (i.inner.inner, 0, 8) {
            B[i.inner.inner + 48] = A[i.inner.inner + 48]*2f
          }
        }
      }
    }"""), after


def test_loop_partition_narrows_a_guarded_vector_tail():
    """A row of 28 in 16-lane vectors: the last vector's guard (4 lanes off) becomes a
    12-lane vector (one register) with no per-lane mask. A vector of 32 lanes over the
    same row keeps its guard (a 28-lane vector LLVM legalizes worse than the mask)."""
    def row(width):
        A = tc.placeholder((28,), name="A")
        B = tc.compute((28,), lambda i: A[i] * 2.0, name="B")
        s = tc.create_schedule(B.op)
        _, xi = s[B].split(B.op.axis[0], factor=width)
        s[B].vectorize(xi)
        return s, [A, B]

    before, after = _through("loop_partition", *row(16))
    assert "< 28)" in before and "if (" not in after, after
    assert [ln.strip()[:-2] for ln in after.splitlines() if "vectorized" in ln] == \
        ["vectorized (i.inner, 0, 16)", "vectorized (i.inner, 0, 12)"], after
    assert "if (i.inner < 28)" in str(tc.lower(*row(32)))


def test_loop_partition_of_a_padded_input():
    """A stored select's bounds partition its own loops either way (the border rows and
    columns store zeros, the inside copies with no test); a loop that also stores
    another stage is left whole."""
    A = tc.placeholder((2, 4), name="A")
    P = tc.compute((4, 6), lambda y, x: tc.if_then_else(
        tc.all(y >= 1, y <= 2, x >= 1, x <= 4), A[y - 1, x - 1], 0.0), name="P")
    s = tc.create_schedule(P.op)
    before, after = _through("loop_partition", s, [A, P])
    assert "select(y >= 1 && y <= 2 && x >= 1 && x <= 4" in before
    assert after == _text("""
    primfn main(A: float32[2, 4], P: float32[4, 6]) {
      for (y, 0, 1) {
        for (x, 0, 6) {
          P[0, x] = 0f
        }
      }
      for (y, 1, 2) {
        for (x, 0, 1) {
          P[y, 0] = 0f
        }
        for (x, 1, 4) {
          P[y, x] = A[y - 1, x - 1]
        }
        for (x, 5, 1) {
          P[y, 5] = 0f
        }
      }
      for (y, 3, 1) {
        for (x, 0, 6) {
          P[3, x] = 0f
        }
      }
    }""")
    # the padding computed per row of a consumer: the consumer's loop is not split
    Q = tc.compute((2, 4), lambda y, x: P[y + 1, x] + P[y + 1, x + 2], name="Q")
    s = tc.create_schedule(Q.op)
    s[P].compute_at(s[Q], Q.op.axis[0])
    _, after = _through("loop_partition", s, [A, Q])
    assert after.count("Q[y, x_1] =") == 1 and after.count("for (y, ") == 1
    assert "P[0, x] = A[y, x - 1]" in after   # (P's own loop partitioned)
    f = tc.build(s, [A, Q])
    a = np.arange(8, dtype="float32").reshape(2, 4)
    q = np.zeros((2, 4), "float32")
    f(a, q)
    p = np.pad(a, ((1, 1), (1, 1)))
    np.testing.assert_array_equal(q, p[1:3, 0:4] + p[1:3, 2:6])


def test_loop_partition_pragma_splits_on_an_inlined_padding():
    """``pragma(axis, "partition")`` (Halide's ``Partition::Always``): the loop is split
    on the conditions of selects anywhere in what its body stores, a padding inlined into
    a 3-tap sum here: the inner columns read A with no test, the two border columns keep
    it.  Without the pragma the select stays in every iteration."""
    A = tc.placeholder((8,), name="A")
    P = tc.compute((10,), lambda x: tc.if_then_else(tc.all(x >= 1, x <= 8), A[x - 1], 0.0),
                   name="P")
    r = tc.reduce_axis((0, 3), name="r")
    Q = tc.compute((8,), lambda x: tc.sum(P[x + r] * 2.0, axis=r), name="Q")

    def sched(pragma):
        s = tc.create_schedule(Q.op)
        s[P].compute_inline()
        if pragma:
            s[Q].pragma(Q.op.axis[0], "partition")
        return s

    before, after = _through("loop_partition", sched(True), [A, Q])
    assert before.count("select(") == 1
    assert after.count("select(") == 2            # the first and the last column
    assert "for (x, 1, 6) {" in after             # the inner ones, without it
    assert "Q[x] = Q[x] + A[x + r - 1]*2f" in after
    plain = str(tc.lower(sched(False), [A, Q]))
    assert plain.count("select(") == 1 and "for (x, 0, 8) {" in plain
    a = np.arange(1, 9, dtype="float32")
    ref = np.convolve(np.pad(a, 1), np.ones(3), "valid") * 2
    for backend in ("llvm", "interp"):
        q = np.zeros(8, "float32")
        run(sched(True), [A, Q], [a, q], backend)
        np.testing.assert_array_equal(q, ref)


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


def _column_tiles(B):
    """A schedule of ``B`` (256 x 256): blocks of 64 rows on blockIdx.x, a row a thread,
    a loop over tiles of 32 columns (returned with the schedule)."""
    s = tc.create_schedule(B.op)
    i, j = B.op.axis
    bo, ti = s[B].split(i, factor=64)
    jo, ji = s[B].split(j, factor=32)
    s[B].reorder(bo, jo, ti, ji)
    s[B].bind(bo, tc.thread_axis("blockIdx.x"))
    s[B].bind(ti, tc.thread_axis("threadIdx.x"))
    return s, jo


def test_causal_tiles():
    """A loop over column tiles of 32 in blocks of 64 rows on blockIdx.x: "before" ends
    it after the tile of the block's last row, "after" starts it at its first row's."""
    for side, loop in (("before", "for (j.outer, 0, i.outer*2 + 2) {"),
                       ("after", "for (j.outer, i.outer*2, 8 - i.outer*2) {")):
        A = tc.placeholder((256, 256), name="A")
        B = tc.compute((256, 256), lambda i, j: A[i, j] * 2.0, name="B")
        s, jo = _column_tiles(B)
        s[B]._causal_tiles(jo, side, 64, 32)   # (the template's: B is not masked)
        before, after = _through("causal_tiles", s, [A, B], "cuda")
        assert "for (j.outer, 0, 8) {" in before
        assert loop in after, after


def test_causal_tiles_test_the_mask_in_the_diagonal_tiles_only():
    """With a causal mask in the body (B[i, j] = A[i, j] * 2 where j <= i, else 0;
    "after": where j >= i), the tiles the mask leaves whole run in a loop of their own
    whose copy of the body has no test (the comparison proved true there): "before", the
    tiles up to the block's first row; "after", those from its last row on.  The
    emulation runs both forms against numpy."""
    for side, keep, parts in (
            ("before", lambda i, j: j <= i,
             ("for (j.outer, 0, i.outer*2) {", "for (j.outer, i.outer*2, 2) {")),
            ("after", lambda i, j: j >= i,
             ("for (j.outer, i.outer*2, 2) {", "for (j.outer, i.outer*2 + 2, 6 - i.outer*2) {"))):
        A = tc.placeholder((256, 256), name="A")
        B = tc.compute((256, 256), lambda i, j: tc.if_then_else(
            keep(i, j), A[i, j] * 2.0, tc.const(0.0, "float32")), name="B")
        s, jo = _column_tiles(B)
        s[B]._causal_tiles(jo, side, 64, 32, whole=True)
        _, after = _through("causal_tiles", s, [A, B], "cuda")
        first, second = (after.index(x) for x in parts)
        whole, diagonal = ((after[first:second], after[second:]) if side == "before"
                           else (after[second:], after[first:second]))
        assert "select(" not in whole and "select(" in diagonal, after
        mod = tc.build(s, [A, B], target="cuda-emu")
        a = np.random.default_rng(0).standard_normal((256, 256)).astype(np.float32)
        b = np.full((256, 256), np.nan, np.float32)
        mod(a, b)
        r, c = np.indices((256, 256))
        want = np.where(keep(r, c), a * 2, 0)
        # (the tiles skipped are left as they were: the mask's zeros there are not
        # written, the template's readers never read them)
        ran = np.isfinite(b)
        np.testing.assert_array_equal(b[ran], want[ran])
        assert (want[~ran] == 0).all() and ran[keep(r, c)].all()
        # without "whole", one loop, which tests the mask in every tile
        s[B].iter_attrs[jo].pragmas = (("causal_tiles", f"{side} 64 32"),)
        _, one = _through("causal_tiles", s, [A, B], "cuda")
        assert one.count("for (j.outer,") == 1 and "select(" in one, one


@pytest.mark.parametrize("value, parsed", [
    ("before 128 16", ("before", 128, 16, False, False)),
    ("after 64 32 whole", ("after", 64, 32, True, False)),
    ("before 128 16 whole masked", ("before", 128, 16, True, True)),
    ("before 128 16 masked", None), ("before 128 16 whole whole", None),
    ("before 128 16 whole masked masked", None), ("before 128 16 masked whole", None)])
def test_causal_tiles_pragma_values(value, parsed):
    """The pragma's value: a side and two positive ints, then ``whole``, then ``masked``
    (the diagonal tiles without ``Stage._tensorize_unmasked``'s test: only after
    ``whole``); anything else a ScheduleError."""
    from tecomp.lower.causal_tiles import parse

    if parsed is None:
        with pytest.raises(ScheduleError, match="then optionally 'whole' or 'whole masked'"):
            parse(value)
    else:
        assert parse(value) == parsed


def test_causal_tiles_prove_a_test_of_whole_tiles():
    """A test that a tile's last column comes before its block's first row (``(j // 32)
    * 32 + 31 <= (i // 64) * 64``, which the simplifier divides by the tile: ``j.outer <=
    i.outer*2 - 1``, a coefficient of the tile loop that is no multiple of its 32
    columns), the body's only comparison, is proved true in the whole tiles' loop,
    whose bound is exact where the columns divide the rows (the last whole tile's test
    holds with no slack): the loop is split there (FlashAttention's masked scores per
    16 x 16 tile, ``Stage._tensorize_unmasked``).  The emulation runs it against
    numpy."""
    A = tc.placeholder((256, 256), name="A")
    B = tc.compute((256, 256), lambda i, j: tc.if_then_else(
        (j // 32) * 32 + 31 <= (i // 64) * 64, A[i, j] * 2.0, A[i, j] * 3.0), name="B")
    s, jo = _column_tiles(B)
    s[B]._causal_tiles(jo, "before", 64, 32, whole=True)
    before, after = _through("causal_tiles", s, [A, B], "cuda")
    assert "select(j.outer <= i.outer*2 - 1, " in before, before
    first, second = (after.index(x) for x in ("for (j.outer, 0, i.outer*2) {",
                                              "for (j.outer, i.outer*2, 2) {"))
    whole, diagonal = after[first:second], after[second:]
    assert "select(" not in whole and "A[i.outer*64 + i.inner, j.outer*32 + j.inner]*2f" in whole
    # (the diagonal tiles' range tells the simplifier that the test fails there)
    assert "select(" not in diagonal and "*3f" in diagonal and "*2f" not in diagonal
    mod = tc.build(s, [A, B], target="cuda-emu")
    a = np.random.default_rng(1).standard_normal((256, 256)).astype(np.float32)
    b = np.full((256, 256), np.nan, np.float32)
    mod(a, b)
    r, c = np.indices((256, 256))
    want = np.where(c // 32 * 32 + 31 <= r // 64 * 64, a * 2, a * 3)
    ran = np.isfinite(b)
    np.testing.assert_array_equal(b[ran], want[ran])
    # (the tiles past each block's last row are skipped)
    np.testing.assert_array_equal(ran, c // 32 <= r // 64 * 2 + 1)


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


def test_double_buffer():
    A = tc.placeholder((8, 8), name="A")
    k = tc.reduce_axis((0, 8), name="k")
    C = tc.compute((8,), lambda i: tc.sum(A[i, k], axis=k), name="C")
    s = tc.create_schedule(C.op)
    AS = s.cache_read(A, "shared", [C])
    CL = s.cache_write(C, "local")
    s[C].bind(C.op.axis[0], tc.thread_axis("threadIdx.x"))
    s[CL].compute_at(s[C], C.op.axis[0])
    ko, ki = s[CL].split(s[CL].op.reduce_axis[0], factor=4)
    s[AS].compute_at(s[CL], ko)
    s[AS].bind(s[AS].op.axis[0], tc.thread_axis("threadIdx.x"))
    s[AS].double_buffer()
    before, after = _through("double_buffer", s, [A, C], "cuda")
    assert "// attr double_buffer = A.shared: float32[8, 4]" in before
    assert before.count("syncthreads()") == 2
    assert after == _text("""
    primfn main(A: float32[8, 8], C: float32[8]) {
      threadIdx.x (i, 0, 8) {
        allocate C.local: float32[1] (local)
        C.local[0] = 0f
        {
          allocate A.shared: float32[2, 8, 4] (shared)
          {
            // attr async_copy = k.outer
            threadIdx.x (i0, 0, 8) {
              for (i1, 0, 4) {
                A.shared[0, i0, i1] = A[i0, i1]
              }
            }
          }
          for (k.outer, 0, 2) {
            syncthreads()
            if (k.outer + 1 < 2) {
              // attr async_copy = k.outer
              threadIdx.x (i0, 0, 8) {
                for (i1, 0, 4) {
                  A.shared[(k.outer + 1) % 2, i0, i1] = A[i0, k.outer*4 + i1 + 4]
                }
              }
            }
            for (k.inner, 0, 4) {
              C.local[0] = C.local[0] + A.shared[k.outer % 2, i, k.inner]
            }
          }
        }
        C[i] = C.local[0]
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


def test_verify_thread_extents_takes_one_extent_in_two_index_dtypes():
    """A stage indexed in int64 (over 2**31 elements) beside one in int32 in the same
    kernel: their loops bound to threadIdx.x have extent 4 and 4i64, the same extent
    (FlashAttention's p tile at batch 64 x 32 heads x 32768^2 failed here)."""
    t, j = Var("t", "int32"), Var("j", "int64")
    tx = lambda v, ext, body: For(v, Const(0, v.dtype), Const(ext, v.dtype), "thread",  # noqa: E731
                                  body, "threadIdx.x")
    one = tx(t, 4, BufferStore(B16, Const(1.0, "float32"), (t,)))
    two = tx(j, 4, BufferStore(B16, Const(2.0, "float32"), (Cast(j, "int32"),)))
    kern = PrimFunc("f", (A16, B16), For(Var("b", "int32"), Const(0), Const(1), "thread",
                                         seq(one, two), "blockIdx.x"))
    assert P.verify_thread_extents_pass(kern) is kern
    bad = PrimFunc("f", (A16, B16), For(Var("b", "int32"), Const(0), Const(1), "thread",
                                        seq(one, tx(j, 8, two.body)), "blockIdx.x"))
    with pytest.raises(ScheduleError, match=r"different extents"):
        P.verify_thread_extents_pass(bad)


def test_verify():
    A = tc.placeholder((16,), name="A")
    left = BufferStore(B16, ProducerLoad(A, (I,), "float32"), (I,))
    func = PrimFunc("f", (A16, B16), For(I, Const(0), Const(16), "serial", left))
    with pytest.raises(InternalError, match=r"tecomp bug"):
        P.verify_pass(func)
    ok = PrimFunc("f", (A16, B16), For(I, Const(0), Const(16), "serial", BufferStore(
        B16, BufferLoad(A16, (I,), "float32"), (I,))))
    assert P.verify_pass(ok) is ok


def test_index_dtype():
    """int32 index arithmetic that could wrap: where its bound is a constant outside int32
    the expression is computed in int64; where it depends on the parameters, a check is
    recorded for the call; everything else is left as it is."""
    A = Buffer("A", (Const(10**9),), "int8")
    B = Buffer("B", (Const(3000),), "int8")
    idx = FloorDiv(Mul(I, Const(10**6), "int32"), Const(3), "int32")
    before = PrimFunc("f", (A, B), For(I, Const(0), Const(3000), "serial", BufferStore(
        B, BufferLoad(A, (idx,), "int8"), (I,))))
    after = P.index_dtype_pass(before)
    assert to_str(after) == _text("""
    primfn f(A: int8[1000000000], B: int8[3000]) {
      for (i, 0, 3000) {
        B[i] = A[int32(int64(i)*1000000i64 // 3i64)]
      }
    }""")
    n = Var("n", "int32")
    C = Buffer("C", (n,), "float32")
    ext = FloorDiv(Add(n, Const(6), "int32"), Const(7), "int32")
    sym = PrimFunc("g", (C,), For(I, Const(0), ext, "serial", BufferStore(
        C, Const(0.0, "float32"), (I,))))
    checked = P.index_dtype_pass(sym)
    assert checked.body is sym.body
    assert [(to_str(pc.expr), pc.lower, pc.upper) for pc in checked.attrs["param_checks"]] \
        == [("n + 6", -(2**31), 2**31 - 1)]
    small = PrimFunc("h", (A16, B16), For(I, Const(0), Const(16), "serial", BufferStore(
        B16, BufferLoad(A16, (FloorDiv(Mul(I, Const(3), "int32"), Const(2), "int32"),),
                        "float32"), (I,))))
    assert P.index_dtype_pass(small) is small


def test_offset_checks():
    """The CUDA targets flatten a symbolic int32 layout in int32: the call must give
    arrays whose last element's offset fits int32."""
    n, m = Var("n", "int32"), Var("m", "int32")
    A = Buffer("A", (n, m), "float32")
    func = PrimFunc("f", (A, A16), For(I, Const(0), Const(16), "serial", BufferStore(
        A16, BufferLoad(A, (Const(0), I), "float32"), (I,))))
    after = P.offset_checks_pass(func)
    assert after.body is func.body
    assert [(to_str(pc.expr), pc.upper) for pc in after.attrs["param_checks"]] == [
        ("(n - 1)*m + (m - 1)", 2**31 - 1)]
    assert P.offset_checks_pass(after) is after


def _codegen_phase(name, s, args, target="llvm"):
    """(before, after) of codegen-phase pass ``name`` when ``s`` is lowered for ``target``."""
    func = tc.lower(s, args, target=target)
    got = {}
    pipeline.run_passes(func, tc.Target(target).kind, passes=pipeline.CODEGEN_PASSES,
                        check=lambda n, b, a: got.setdefault(n, (to_str(b), to_str(a))))
    return got[name]


def _vector_loops(lanes_of_b=64, factor=None):
    """B[i, j] = A[i, j] + 1 on 4 x ``lanes_of_b``, j vectorized (split by ``factor``)."""
    A = tc.placeholder((4, lanes_of_b), name="A")
    B = tc.compute((4, lanes_of_b), lambda i, j: A[i, j] + 1.0, name="B")
    s = tc.create_schedule(B.op)
    j = B.op.axis[1]
    if factor:
        _, j = s[B].split(j, factor=factor)
    s[B].vectorize(j)
    return s, [A, B]


@pytest.mark.parametrize("target, extent, plan", [
    ("llvm -mcpu=haswell", 16, "widen 16 lanes"),            # two whole AVX2 registers
    ("llvm -mcpu=haswell", 14, "pieces 1 x 8 lanes + 6"),    # no masks: 8 lanes, then 6
    ("llvm -mcpu=skylake-avx512", 14, "widen 14 lanes"),     # masks: one 14-lane vector
    ("llvm -mcpu=haswell", 100, "chunks 12 x 8 lanes + 4"),  # over 64 lanes: a chunk loop
])
def test_vector_plan(target, extent, plan):
    s, args = _vector_loops(extent)
    before, after = _codegen_phase("vector_plan", s, args, target)
    assert "vector_plan" not in before
    assert after == _text(f"""
    primfn main(A: float32[4, {extent}], B: float32[4, {extent}]) {{
      for (i, 0, 4) {{
        // attr vector_plan = {plan}
        vectorized (j, 0, {extent}) {{
          B[i, j] = A[i, j] + 1f
        }}
      }}
    }}""")


def test_vector_plan_of_a_loop_that_cannot_be_widened():
    # every lane stores to B[0]: a serial loop, left to LLVM's loop vectorizer
    from tecomp.lower.vectorize import vector_plan_pass

    store = BufferStore(B16, BufferLoad(A16, (I,), "float32"), (Const(0),))
    func = PrimFunc("f", (A16, B16), For(I, Const(0), Const(16), "vectorized", store),
                    {"target": tc.Target("llvm")})
    assert to_str(vector_plan_pass(func)) == _text("""
    primfn f(A: float32[16], B: float32[16]) {
      // attr vector_plan = serial (`B[0] = A[i]` stores a lane-dependent value to a lane-invariant address (a reduction along the vectorized axis))
      vectorized (i, 0, 16) {
        B[0] = A[i]
      }
    }""")


def test_parallel_plan():
    s, args = _vector_loops(64, factor=16)
    B = args[1]
    io, _ = s[B].op.axis[0], None
    inner = s[B].split(io, factor=2)[1]
    s[B].parallel(s[B].leaf_iter_vars[0])
    s[B].parallel(inner)  # nested in the outer parallel loop: runs serially
    before, after = _codegen_phase("parallel_plan", s, args)
    assert "parallel_plan" not in before
    assert after == _text("""
    primfn main(A: float32[4, 64], B: float32[4, 64]) {
      // attr parallel_plan = task captures (), buffers (B, A)
      parallel (i.outer, 0, 2) {
        // attr parallel_plan = serial (nested in a parallel loop)
        parallel (i.inner, 0, 2) {
          for (j.outer, 0, 4) {
            // attr vector_plan = widen 16 lanes
            vectorized (j.inner, 0, 16) {
              B[i.outer*2 + i.inner, j.outer*16 + j.inner] = A[i.outer*2 + i.inner, j.outer*16 + j.inner] + 1f
            }
          }
        }
      }
    }""")


def test_split_host_device():
    s, args = gpu_shared_tile()
    before, after = _codegen_phase("split_host_device", s, args, "cuda")
    assert "device_kernel" not in before  # `before` is test_insert_barriers' result
    lines = before.splitlines()
    assert after.splitlines() == lines[:1] + [
        "  // attr device_kernel = kernel 0 (B): grid (4, 1, 1), block (16, 1, 1), 64 bytes "
        "shared; takes A, B"] + lines[1:]


def test_the_codegen_phase_is_what_tc_build_renders():
    """tc.lower(..., phase="codegen") runs the codegen passes; the code generators take a
    function lowered either way and give the same code."""
    from tecomp.codegen.cuda import codegen_cuda

    s, args = gpu_shared_tile()
    lowered = tc.lower(s, args, target="cuda")
    prepared = tc.lower(s, args, target="cuda", phase="codegen")
    assert "device_kernel" in str(prepared) and "device_kernel" not in str(lowered)
    assert pipeline.prepare_for_codegen(prepared) is prepared
    assert codegen_cuda(lowered).source == codegen_cuda(prepared).source


def test_hoist_guards():
    """A guard that does not read a loop's counter leaves the loop; of a conjunction, only
    the terms that do not read it; not out of a parallel loop, nor a guard that loads."""
    from tecomp.ir.expr import GE
    from tecomp.ir.stmt import IfThenElse
    from tecomp.lower.hoist_guards import hoist_guards_pass
    j, k = Var("j", "int32"), Var("k", "int32")
    A = Buffer("A", (Const(4), Const(16)), "float32")
    B = Buffer("B", (Const(16),), "float32")
    cond = tc.all(GE(Add(I, k, "int32"), Const(1), "bool"), GE(Add(j, k, "int32"), Const(2), "bool"))
    store = BufferStore(B, BufferLoad(A, (k, j), "float32"), (j,))
    nest = For(k, Const(0), Const(4), "serial",
               For(j, Const(0), Const(16), "vectorized", IfThenElse(cond, store)))
    after = hoist_guards_pass(PrimFunc("f", (A, B), For(I, Const(0), Const(4), "parallel", nest)))
    assert to_str(after) == _text("""
    primfn f(A: float32[4, 16], B: float32[16]) {
      parallel (i, 0, 4) {
        for (k, 0, 4) {
          if (i + k >= 1) {
            vectorized (j, 0, 16) {
              if (j + k >= 2) {
                B[j] = A[k, j]
              }
            }
          }
        }
      }
    }""")
    # out of no parallel loop; a condition that loads stays where it is
    par = PrimFunc("f", (A, B), For(j, Const(0), Const(16), "parallel",
                                    IfThenElse(GE(I, Const(1), "bool"), store)))
    assert hoist_guards_pass(par) is par
    loads = PrimFunc("f", (A, B), For(j, Const(0), Const(16), "serial", IfThenElse(
        GE(BufferLoad(A, (I, Const(0)), "float32"), Const(0.0, "float32"), "bool"), store)))
    assert hoist_guards_pass(loads) is loads


def _padded_conv3d(partition: bool):
    """A 3-d convolution padded by 1 (its sum's ``where=`` leaves the taps in the padding
    out: depth, rows and columns), a vector of 8 output channels per pixel; ``partition``
    False: its pixel and tap loops under ``no_partition``."""
    import tecomp.nn as nn
    X, W = tc.placeholder((1, 16, 4, 6, 6), name="X"), tc.placeholder((16, 16, 3, 3, 3), name="W")
    Y = nn.conv3d_ncdhw(X, W, padding=1)
    s = tc.create_schedule(Y.op)
    CL = s.cache_write(Y, "local")
    n, o, z, y, x = s[Y].op.axis
    oo, oi = s[Y].split(o, factor=8)
    s[Y].reorder(n, oo, z, y, x, oi)
    s[Y].vectorize(oi)
    s[CL].compute_at(s[Y], x)
    c, kd, kh, kw = s[CL].op.reduce_axis
    s[CL].reorder(c, kd, kh, kw, s[CL].op.axis[1])
    s[CL].vectorize(s[CL].op.axis[1])
    if not partition:
        for st, iv in ((s[Y], z), (s[Y], y), (s[Y], x), (s[CL], kd), (s[CL], kh)):
            st.pragma(iv, "no_partition")
    return s, [X, W, Y]


def _check_padded_conv3d(s, args):
    x = np.random.default_rng(0).standard_normal((1, 16, 4, 6, 6)).astype("float32")
    w = np.random.default_rng(1).standard_normal((16, 16, 3, 3, 3)).astype("float32")
    p = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1), (1, 1)))
    want = sum(np.einsum("ncdhw,oc->nodhw", p[:, :, a:a + 4, b:b + 6, e:e + 6], w[:, :, a, b, e])
               for a in range(3) for b in range(3) for e in range(3))
    y = np.empty((1, 16, 4, 6, 6), "float32")
    tc.build(s, args)(x, w, y)
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)


def test_hoist_guards_in_a_padded_conv3d():
    """The taps of a 3-d convolution's depth and rows that read the zero padding are left
    out of the sum (``tecomp.nn``'s ``where=``): where the loops are not partitioned,
    tested once per tap, outside the loops of the columns' taps and the vector of output
    channels.  (The columns' taps, whose loop is partitioned, start and end inside the
    data: bounds read from the output column.)"""
    s, args = _padded_conv3d(partition=False)
    before, after = _through("hoist_guards", s, args)
    guard = "if (i2_1 + kd >= 1 && i2_1 + kd < 5 && i3_1 + kh >= 1 && i3_1 + kh < 7) {"
    taps = "for (kw, max(1 - i4_1, 0), min(min(7 - i4_1, 6), 3 - max(1 - i4_1, 0))) {"
    # before: the guard inside the vector loop; after: each term around its own tap loop,
    # outside the columns' taps and the vector
    assert before.index(taps) < before.index(guard) and guard not in after
    at = after.index("for (c, 0, 16) {")
    for line in ("for (kd, 0, 3) {", "if (i2_1 + kd >= 1 && i2_1 + kd < 5) {",
                 "for (kh, 0, 3) {", "if (i3_1 + kh >= 1 && i3_1 + kh < 7) {", taps,
                 "vectorized (i1_1, 0, 8) {",
                 "conv3d_ncdhw.local[0, i1_1, 0, 0, 0] = conv3d_ncdhw.local"):
        at = after.index(line, at)   # in this order
    _check_padded_conv3d(s, args)


def test_loop_partition_of_padded_taps():
    """The same convolution partitioned: the first plane, row and column of outputs split
    off the others, where their tap loops start past the taps in the padding (a lower
    bound, ``i2_1 + kd >= 1``, splits a loop as an upper bound does), the last column
    too, its column taps ending before the padding; no test is left."""
    s, args = _padded_conv3d(partition=True)
    _, after = _through("loop_partition", s, args)
    conv = after[after.index("for (i1.outer"):]
    assert "if (" not in conv
    for line in ("for (i2_1, 0, 1) {", "for (kd, 1, 2) {", "for (kh, 1, 2) {",
                 "for (i2_1, 1, 2) {", "for (kd, 0, 3) {", "for (i4_1, 0, 1) {",
                 "for (kw, 1, 2) {", "for (i4_1, 5, 1) {", "for (kw, 0, 2) {"):
        assert line in conv, line
    _check_padded_conv3d(s, args)


def test_persistent():
    A = tc.placeholder((8, 8), name="A")
    C = tc.compute((8, 8), lambda i, j: A[i, j] * 2, name="C")
    s = tc.create_schedule(C.op)
    i, j = C.op.axis
    bi, i = s[C].split(i, factor=4)
    bj, j = s[C].split(j, factor=4)
    s[C].reorder(bi, bj, i, j)
    s[C].bind(bi, tc.thread_axis("blockIdx.y"))
    s[C].bind(bj, tc.thread_axis("blockIdx.x"))
    s[C].bind(j, tc.thread_axis("threadIdx.x"))
    s[C].persistent(3, group_m=2)
    before, after = _through("persistent", s, [A, C], "cuda")
    assert "// attr persistent = (3, 2)" in before
    assert after == _text("""
    primfn main(A: float32[8, 8], C: float32[8, 8]) {
      blockIdx.x (persistent.block, 0, 3) {
        for (persistent.step, 0, (4 - persistent.block + 2) // 3) {
          let persistent.tile = persistent.block + persistent.step*3
          let i.outer = (persistent.tile // 4)*2 + persistent.tile % 4 % min(2 - (persistent.tile // 4)*2, 2)
          let j.outer = persistent.tile % 4 // min(2 - (persistent.tile // 4)*2, 2)
          for (i.inner, 0, 4) {
            threadIdx.x (j.inner, 0, 4) {
              C[i.outer*4 + i.inner, j.outer*4 + j.inner] = A[i.outer*4 + i.inner, j.outer*4 + j.inner]*2f
            }
          }
        }
      }
    }""")


def _tiles_of_a_symbolic_row():
    """``parallel (f)`` over (row, 32-column tile) fused, ``n`` symbolic: the tile's
    columns run to ``min(n - (f % c)*32, 32)``, ``c = (n + 31) // 32`` tiles a row."""
    from tecomp.ir.expr import Max, Min
    from tecomp.ir import op as O
    from tecomp.lower.ranges import extent_checks
    n, f, j = Var("n", "int64"), Var("f", "int64"), Var("j", "int64")
    i64 = lambda v: Const(v, "int64")  # noqa: E731
    A, B = Buffer("A", (i64(2), n), "float32"), Buffer("B", (i64(2), n), "float32")
    c = O.floordiv(O.add(n, i64(31)), i64(32))
    col = O.add(O.mul(O.floormod(f, c), i64(32)), j)
    row = O.floordiv(f, c)
    cols = Max(Min(O.sub(n, O.mul(O.floormod(f, c), i64(32))), i64(32), "int64"), i64(0), "int64")
    body = For(j, i64(0), cols, "unrolled", BufferStore(
        B, O.mul(BufferLoad(A, (row, col), "float32"), Const(2.0, "float32")), (row, col)))
    return PrimFunc("f", (A, B), For(f, i64(0), O.mul(c, i64(2)), "parallel", body),
                    {"param_checks": extent_checks((A, B))})


def test_version_tiles():
    """A parallel loop whose tiles have a symbolic tail gets a version for full tiles,
    where the simplifier reads the condition (the tile's extent is 32, unrolled), and
    one for the tail (its unrolled loops plain loops)."""
    from tecomp.lower.version_tiles import version_tiles_pass
    after = P.simplify_pass(version_tiles_pass(_tiles_of_a_symbolic_row()))
    assert to_str(after) == _text("""
    primfn f(A: float32[2i64, n], B: float32[2i64, n]) {
      // var n: int64
      // param_check n in [0, 1099511627776]: 'a symbolic extent (at most 2**40 = 1099511627776)'
      parallel (f, 0i64, ((n + 31i64) // 32i64)*2i64) {
        if (n >= (f % ((n + 31i64) // 32i64))*32i64 + 32i64) {
          unrolled (j, 0i64, 32i64) {
            B[f // ((n + 31i64) // 32i64), (f % ((n + 31i64) // 32i64))*32i64 + j] = A[f // ((n + 31i64) // 32i64), (f % ((n + 31i64) // 32i64))*32i64 + j]*2f
          }
        } else {
          for (j, 0i64, max(n - (f % ((n + 31i64) // 32i64))*32i64, 0i64)) {
            B[f // ((n + 31i64) // 32i64), (f % ((n + 31i64) // 32i64))*32i64 + j] = A[f // ((n + 31i64) // 32i64), (f % ((n + 31i64) // 32i64))*32i64 + j]*2f
          }
        }
      }
    }""")
    # a tail linear in the loop's counter is loop partitioning's: nothing to version
    k = Var("k", "int32")
    lin = PrimFunc("f", (A16, B16), For(k, Const(0), Const(2), "parallel", For(
        I, Const(0), tc.min(Const(16) - k * 8, Const(8)), "unrolled",
        BufferStore(B16, BufferLoad(A16, (k * 8 + I,), "float32"), (k * 8 + I,)))))
    assert version_tiles_pass(lin) is lin


def test_version_tiles_clamped_chunks_and_row_tails():
    """A tile's chunks clamped at zero (``min(max(n // 16 - (f % c)*2, 0), 2)``) are a
    tail too: the full tiles' condition says they are 2; an unrolled loop of a symbolic
    extent left in the full tiles' version (a row block's tail) runs as a loop."""
    from tecomp.ir.expr import Max, Min
    from tecomp.ir import op as O
    from tecomp.lower.version_tiles import version_tiles_pass
    n, f, j, i = Var("n", "int64"), Var("f", "int64"), Var("j", "int64"), Var("i", "int64")
    i64 = lambda v: Const(v, "int64")  # noqa: E731
    A, B = Buffer("A", (n, n), "float32"), Buffer("B", (n, n), "float32")
    c = O.floordiv(O.add(n, i64(31)), i64(32))
    chunks = Min(Max(O.sub(O.floordiv(n, i64(16)), O.mul(O.floormod(f, c), i64(2))), i64(0),
                     "int64"), i64(2), "int64")
    rows = Min(O.sub(n, O.mul(O.floordiv(n, i64(4)), i64(4))), i64(3), "int64")
    col = O.add(O.mul(O.floormod(f, c), i64(32)), O.mul(j, i64(16)))
    row = O.add(O.mul(O.floordiv(n, i64(4)), i64(4)), i)
    body = For(i, i64(0), rows, "unrolled", For(j, i64(0), chunks, "unrolled", BufferStore(
        B, BufferLoad(A, (row, col), "float32"), (row, col))))
    func = PrimFunc("f", (A, B), For(f, i64(0), c, "parallel", body))
    text = to_str(P.simplify_pass(version_tiles_pass(func)))
    full, tail = text.split("} else {")
    assert "if (n // 16i64 >= f*2i64 + 2i64) {" in full, text
    assert "unrolled (j, 0i64, 2i64)" in full, text
    assert "for (i, 0i64, n % 4i64)" in full, text
    assert "unrolled" not in tail, text


def test_hoist_divisions():
    """Divisions by a symbolic divisor are bound once at the top of the body of the
    innermost loop whose counter they read (a loop bound too: here none is costly)."""
    from tecomp.lower.hoist_divisions import hoist_divisions_pass
    after = hoist_divisions_pass(_tiles_of_a_symbolic_row())
    assert to_str(after) == _text("""
    primfn f(A: float32[2i64, n], B: float32[2i64, n]) {
      // var n: int64
      // param_check n in [0, 1099511627776]: 'a symbolic extent (at most 2**40 = 1099511627776)'
      parallel (f, 0i64, ((n + 31i64) // 32i64)*2i64) {
        let cse0 = f % ((n + 31i64) // 32i64)
        let cse1 = f // ((n + 31i64) // 32i64)
        unrolled (j, 0i64, max(min(n - cse0*32i64, 32i64), 0i64)) {
          B[cse1, cse0*32i64 + j] = A[cse1, cse0*32i64 + j]*2f
        }
      }
    }""")
    x = np.random.default_rng(0).standard_normal((2, 77)).astype("float32")
    y = np.zeros_like(x)
    tc.build(after)(x, y)
    np.testing.assert_array_equal(y, x * 2)


#: the test of each pass
PASS_TESTS = {
    "persistent": test_persistent,
    "simplify": test_simplify, "simplify_after_partition": test_simplify,
    "prefetch": test_prefetch, "loop_partition": test_loop_partition,
    "causal_tiles": test_causal_tiles, "hoist_guards": test_hoist_guards,
    "unroll_explicit": test_unroll_explicit, "remove_no_op": test_remove_no_op,
    "verify_thread_extents": test_verify_thread_extents,
    "insert_barriers": test_insert_barriers, "double_buffer": test_double_buffer,
    "verify": test_verify,
    "vector_plan": test_vector_plan, "parallel_plan": test_parallel_plan,
    "split_host_device": test_split_host_device,
    "index_dtype": test_index_dtype, "offset_checks": test_offset_checks,
    "version_tiles": test_version_tiles, "hoist_divisions": test_hoist_divisions,
}


def test_every_pass_has_a_test_here():
    names = {name for name, _, _ in pipeline.PASSES + pipeline.CODEGEN_PASSES}
    assert names == set(PASS_TESTS), (
        f"passes without a before/after test here: {sorted(names - set(PASS_TESTS))}")
