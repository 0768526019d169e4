"""Pass-by-pass checking (tecomp.testing.check_passes): the interpreter runs on the IR
before and after every lowering pass and the first pass that changes a result is named,
with both IRs printed."""
import numpy as np
import pytest

import tecomp as tc
from helpers import conv2d_nchw, gpu_shared_tile, matmul, softmax
from tecomp.ir import interp
from tecomp.ir.expr import Buffer, BufferLoad, Const, Var
from tecomp.ir.functor import Mutator
from tecomp.ir.stmt import BufferStore, For, PrimFunc
from tecomp.lower import pipeline
from tecomp.testing import PassCheckError, check_func_passes, check_passes, make_args


def _tiled_matmul():
    A, B, C, k = matmul(n=13, m=10, K=7)
    s = tc.create_schedule(C.op)
    xo, yo, xi, yi = s[C].tile(C.op.axis[0], C.op.axis[1], 4, 3)
    ko, ki = s[C].split(k, factor=3)
    s[C].reorder(xo, yo, ko, xi, ki, yi)
    s[C].vectorize(yi)
    s[C].unroll(ki)
    return s, [A, B, C]


def _conv():
    data, weight, pad, out = conv2d_nchw(N=1, C=2, H=7, W=7, K=3)
    s = tc.create_schedule(out.op)
    n, k, y, x = out.op.axis
    yo, yi = s[out].split(y, factor=3)
    s[pad].compute_at(s[out], yo)
    return s, [data, weight, out]


def _softmax():
    X, mx, ex, sm, Y = softmax(m=5, n=11)
    s = tc.create_schedule(Y.op)
    s[ex].compute_inline()
    io, ii = s[Y].split(Y.op.axis[1], factor=4)
    return s, [X, Y]


def _symbolic():
    n = tc.var("n")
    A = tc.placeholder((n, 6), name="A")
    B = tc.compute((n, 6), lambda i, j: A[i, j] * 2 + 1, name="B")
    s = tc.create_schedule(B.op)
    xo, xi = s[B].split(B.op.axis[0], factor=4)
    s[B].pragma(xi, "unroll_explicit")
    return s, [A, B]


@pytest.mark.parametrize("make", [_tiled_matmul, _conv, _softmax, _symbolic])
def test_check_passes_accepts_correct_lowering(make):
    s, args = make()
    func = check_passes(s, args, sizes={"n": 9})
    assert str(func) == str(tc.lower(s, args))


def _with_pass(monkeypatch, name, fn, after=None):
    passes = list(pipeline.PASSES)
    pos = len(passes) if after is None else [p[0] for p in passes].index(after) + 1
    passes.insert(pos, (name, fn, None))
    monkeypatch.setattr(pipeline, "PASSES", passes)


class _DropLastIteration(Mutator):
    def visit_For(self, s):
        body = self.visit(s.body)
        ext = s.extent
        if isinstance(ext, Const) and ext.value > 1:
            ext = Const(ext.value - 1, ext.dtype)
        return For(s.var, s.min, ext, s.kind, body, s.thread_tag)


def test_broken_pass_is_named_with_both_irs(monkeypatch):
    def off_by_one(func):
        return func.with_body(_DropLastIteration().visit(func.body))

    _with_pass(monkeypatch, "off_by_one", off_by_one, after="simplify")
    s, args = _tiled_matmul()
    with pytest.raises(PassCheckError) as ei:
        check_passes(s, args)
    e = ei.value
    assert e.pass_name == "off_by_one"
    msg = str(e)
    assert "lowering pass `off_by_one` changed the result" in msg
    assert "---- IR before off_by_one ----" in msg and "---- IR after off_by_one ----" in msg
    assert "buffer C:" in msg and "elements differ" in msg
    assert "---- diff ----" in msg and "-  for (i.outer, 0, 4) {" in msg
    assert isinstance(e.before, PrimFunc) and isinstance(e.after, PrimFunc)


def test_the_first_wrong_pass_is_reported_not_a_later_one(monkeypatch):
    """Two broken passes: the earlier is named."""
    def first(func):
        return func.with_body(_DropLastIteration().visit(func.body))

    def second(func):
        return func.with_body(_DropLastIteration().visit(func.body))

    _with_pass(monkeypatch, "second_bad", second, after="remove_no_op")
    _with_pass(monkeypatch, "first_bad", first, after="simplify")
    s, args = _conv()
    with pytest.raises(PassCheckError) as ei:
        check_passes(s, args)
    assert ei.value.pass_name == "first_bad"


class _ShiftLoads(Mutator):
    """Read one element further: an out-of-bounds access at the last iteration."""

    def visit_BufferLoad(self, e):
        idx = list(e.indices)
        idx[-1] = idx[-1] + 1
        return BufferLoad(e.buffer, tuple(idx), e.dtype)


def test_pass_that_reads_out_of_bounds_is_reported(monkeypatch):
    def oob(func):
        return func.with_body(_ShiftLoads().visit(func.body))

    _with_pass(monkeypatch, "shift_loads", oob)
    s, args = _softmax()
    with pytest.raises(PassCheckError, match=r"after `shift_loads` the interpreter raises BoundsError"):
        check_passes(s, args)


def test_pass_that_changes_nothing_is_not_reported(monkeypatch):
    calls = []

    def identity(func):
        calls.append(1)
        return func

    _with_pass(monkeypatch, "noop", identity)
    s, args = _symbolic()
    check_passes(s, args, sizes={"n": 5})
    assert calls


def test_check_func_passes_on_a_hand_made_primfunc():
    n = 6
    A = Buffer("A", (Const(n),), "float32")
    B = Buffer("B", (Const(n),), "float32")
    i = Var("i")
    body = For(i, Const(0), Const(n), "serial",
               BufferStore(B, BufferLoad(A, (i,), "float32") * Const(2.0, "float32") + Const(0.0, "float32"), (i,)))
    func = PrimFunc("hand", (A, B), body, {"target": "llvm"})
    out = check_func_passes(func)
    a, b = np.arange(n, dtype="float32"), np.zeros(n, "float32")
    interp.run(out, a, b)
    np.testing.assert_array_equal(b, a * 2)


def test_make_args_binds_symbolic_extents():
    s, args = _symbolic()
    func = tc.lower(s, args)
    arrays = make_args(func, sizes={"n": 7})
    assert arrays[0].shape == (7, 6) and arrays[1].shape == (7, 6)
    arrays = make_args(func, seed=3)
    assert arrays[0].shape == arrays[1].shape and 1 <= arrays[0].shape[0] <= 7



def test_gpu_kernel_is_racy_only_before_insert_barriers():
    """Regression (fuzz with --check-passes, GPU seeds 200219...): the IR before
    insert_barriers shares memory without barriers (adding them is that pass's job); the
    checker reported it as a bug.  Now it checks without races up to that pass and with
    them after."""
    s, args = gpu_shared_tile()
    func = check_passes(s, args, target="cuda-emu")
    assert "syncthreads()" in str(func)


def test_double_buffered_tiles_check_out_pass_by_pass():
    """double_buffer rewrites the tiles after insert_barriers: every pass up to the end
    keeps the interpreter's result, with no race."""
    from test_gpu_lowering import tiled_matmul

    s, args = tiled_matmul(24, 8)
    for st in s.stages:
        if st.scope == "shared":
            st.double_buffer()
    func = check_passes(s, args, target="cuda-emu")
    assert "allocate A.shared: float32[2, 8, 8] (shared)" in str(func)


def test_a_pass_that_drops_barriers_is_reported(monkeypatch):
    from tecomp.ir.expr import Call
    from tecomp.ir.stmt import Evaluate, SeqStmt

    class _Drop(Mutator):
        def visit_SeqStmt(self, st):
            items = [self.visit(x) for x in st.seq]
            items = [x for x in items if not (isinstance(x, Evaluate) and isinstance(x.value, Call)
                                              and x.value.op == "syncthreads")]
            return SeqStmt(tuple(items))

    def drop(func):
        return func.with_body(_Drop().visit(func.body))

    _with_pass(monkeypatch, "drop_barriers", drop, after="insert_barriers")
    s, args = gpu_shared_tile()
    with pytest.raises(PassCheckError, match=r"after `drop_barriers` the interpreter raises RaceError"):
        check_passes(s, args, target="cuda-emu")


def test_regression_rfactor_tail_guard_is_lazy():
    """Fuzz seeds 200580, 201378 (--check-passes): rfactor of a non-dividing split ANDed
    its tail guard with a where= that reads a tensor; And evaluates both sides, so the IR
    before loop partitioning read P[16] of a 15-element P in the tail.  (Partitioning then
    removed the tail, hiding it from the final IR.)  Fixed in schedule/rfactor.py: the
    where= is evaluated under the guard."""
    P = tc.placeholder((15,), name="P")
    A = tc.placeholder((5,), name="A")
    k = tc.reduce_axis((0, 5), name="k")
    C = tc.compute((1,), lambda i: tc.sum(A[k], axis=k, where=P[k * 3 + 1] > 0), name="C")
    s = tc.create_schedule(C.op)
    ko, ki = s[C].split(k, factor=2)
    s.rfactor(C, ko)
    func = check_passes(s, [P, A, C])
    p = np.where(np.arange(15) % 2 == 0, 1.0, -1.0).astype("float32")
    a = np.arange(5, dtype="float32") + 1
    c = np.zeros(1, "float32")
    interp.run(func, p, a, c)
    want = a[(p[np.arange(5) * 3 + 1] > 0)].sum()
    assert c[0] == want
    c = np.zeros(1, "float32")
    tc.build(s, [P, A, C], checks=True)(p, a, c)
    assert c[0] == want


def test_a_visitor_method_replaced_after_use_takes_effect(monkeypatch):
    """The visitors look their ``visit_<Class>`` methods up once per node class; a method
    replaced afterwards (a test's monkeypatch of a pass, as the tests here do) must be the
    one called, in the class and in its subclasses, and the original once restored (the
    cached first method made a fuzz family's fault injection pass silently unnoticed
    after an earlier test had run the same pass)."""
    class Doubler(Mutator):
        def visit_Const(self, c):
            return Const(c.value * 2, c.dtype)

    class Sub(Doubler):
        pass

    e = Const(3, "int32")
    assert Doubler().visit(e).value == 6 and Sub().visit(e).value == 6
    monkeypatch.setattr(Doubler, "visit_Const", lambda self, c: Const(c.value * 3, c.dtype))
    assert Doubler().visit(e).value == 9 and Sub().visit(e).value == 9
    monkeypatch.setattr(Sub, "visit_Const", lambda self, c: Const(c.value * 5, c.dtype),
                        raising=False)
    assert Doubler().visit(e).value == 9 and Sub().visit(e).value == 15
    monkeypatch.undo()
    assert Doubler().visit(e).value == 6 and Sub().visit(e).value == 6
