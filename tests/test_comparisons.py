"""``==`` and ``!=`` on expressions build IR comparisons (as TVM's do), whose Python truth
value is structural equality; every place that takes a condition refuses a Python bool."""
import numpy as np
import pytest

import tecomp as tc
from tecomp.ir import EQ, NE, Comparison, Const, same_as

N = 7
I, J = np.meshgrid(np.arange(N), np.arange(N), indexing="ij")

# (name, body, numpy reference of the body from a and the index grids)
CASES = [
    ("first_row", lambda A: lambda i, j: tc.if_then_else(i == 0, A[i, j], 0.0),
     lambda a: np.where(I == 0, a, 0)),
    ("diagonal", lambda A: lambda i, j: tc.if_then_else(i == j, A[i, j], 0.0),
     lambda a: np.where(I == J, a, 0)),
    ("off_diagonal_all", lambda A: lambda i, j: tc.if_then_else(tc.all(i != j, j > 1), A[i, j], 0.0),
     lambda a: np.where((I != J) & (J > 1), a, 0)),
    ("and", lambda A: lambda i, j: ((i == 0) & (j > 1)).astype("float32"),
     lambda a: ((I == 0) & (J > 1)).astype("float32")),
    ("or_not", lambda A: lambda i, j: tc.select(~(i == 2) | (j != 3), A[i, j], -1.0),
     lambda a: np.where((I != 2) | (J != 3), a, -1)),
    ("any", lambda A: lambda i, j: tc.if_then_else(tc.any(i == 1, 0 == j), A[i, j], 0.0),
     lambda a: np.where((I == 1) | (J == 0), a, 0)),
    ("value_eq", lambda A: lambda i, j: tc.if_then_else(A[i, j] * 0.0 == 0.0, 1.0, 2.0),
     lambda a: np.ones_like(a)),
    ("one_hot", lambda A: lambda i, j: (j == i % 3).astype("float32") * A[i, j],
     lambda a: np.where(J == I % 3, a, 0)),
]


@pytest.mark.parametrize("backend", ["llvm", "interp"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_eq_and_ne_build_conditions(case, backend):
    _, body, ref = case
    A = tc.placeholder((N, N), name="A")
    B = tc.compute((N, N), body(A), name="B")
    s = tc.create_schedule(B.op)
    a = np.random.default_rng(0).random((N, N), dtype=np.float32) + 0.5
    b = np.full((N, N), np.nan, "float32")
    if backend == "llvm":
        tc.build(s, [A, B])(a, b)
    else:
        from tecomp.ir import interp

        interp.run(tc.lower(s, [A, B]), a, b)
    np.testing.assert_array_equal(b, ref(a).astype("float32"))


def test_eq_in_a_reduction_where_and_a_bool_output():
    A = tc.placeholder((N, N), name="A")
    k = tc.reduce_axis((0, N), name="k")
    S = tc.compute((N,), lambda i: tc.sum(A[i, k], axis=k, where=k % 3 != 1), name="S")
    E = tc.compute((N, N), lambda i, j: i == j, name="E")
    assert E.dtype == "bool"
    a = np.random.default_rng(1).random((N, N), dtype=np.float32)
    s_, e = np.zeros(N, "float32"), np.zeros((N, N), bool)
    tc.build(tc.create_schedule([S.op, E.op]), [A, S, E])(a, s_, e)
    np.testing.assert_allclose(s_, a[:, np.arange(N) % 3 != 1].sum(1), rtol=1e-6)
    np.testing.assert_array_equal(e, np.eye(N, dtype=bool))


def test_eq_on_the_gpu_emulation():
    A = tc.placeholder((64,), name="A")
    B = tc.compute((64,), lambda i: tc.if_then_else(i % 8 == 0, A[i], 0.0), name="B")
    s = tc.create_schedule(B.op)
    bx, tx = s[B].split(B.op.axis[0], factor=16)
    s[B].bind(bx, tc.thread_axis("blockIdx.x"))
    s[B].bind(tx, tc.thread_axis("threadIdx.x"))
    a = np.arange(64, dtype="float32") + 1
    b = np.empty(64, "float32")
    tc.build(s, [A, B], target="cuda-emu")(a, b)
    np.testing.assert_array_equal(b, np.where(np.arange(64) % 8 == 0, a, 0))


def test_the_comparison_prints_and_is_the_ir_node():
    i, j = tc.var("i"), tc.var("j")
    k = tc.reduce_axis((0, 4), name="k")
    assert isinstance(i == 0, Comparison) and isinstance(k != j, Comparison)
    assert str(i == 0) == "i == 0" and str(i != j) == "i != j" and str(k == 1) == "k == 1"
    assert isinstance(tc.all(i == 0), EQ)
    assert isinstance(tc.ir.as_expr(i != 1), NE)
    assert (i == 0).dtype == "bool"
    assert str(tc.if_then_else(i == j, i, j)) == "select(i == j, i, j)"
    assert str((i == 0) & (j != 1)) == "i == 0 && j != 1"
    assert str(~(i == 0)) == "!(i == 0)"
    assert str((i == 0).astype("int32") + 1) == "int32(i == 0) + 1"


def test_python_truth_value_is_structural_equality():
    i, j = tc.var("i"), tc.var("j")
    assert (i + 1) == (i + 1) and not ((i + 1) != (i + 1))
    assert (i + 1) != (j + 1) and not ((i + 1) == (j + 1))
    assert bool(i == i) and not bool(i == j)         # variables: identity
    assert not bool(i == 0) and bool(i != 0)         # an expression is not a Python number
    assert i + 1 in [j, i + 1] and (i + 2) not in [i + 1]
    d = {i + 1: "a", j * 2: "b"}
    assert d[i + 1] == "a" and d[j * 2] == "b" and len({i + 1, i + 1, j}) == 2
    assert same_as(i * 2 + 1, i * 2 + 1) and not same_as(i, j) and (i + 1).same_as(i + 1)
    assert not same_as(Const(0.0, "float32"), Const(-0.0, "float32"))
    assert (i == None) is False and (i != "i") is True  # noqa: E711  (no comparison built)
    k = tc.reduce_axis((0, 4), name="k")
    assert bool(k == k) and not bool(k == tc.reduce_axis((0, 4), name="k"))
    assert {k: 1}[k] == 1


@pytest.mark.parametrize("where", ["if_then_else", "select", "all", "any", "and", "rand", "or",
                                   "where", "numpy_bool"])
def test_every_condition_refuses_a_python_bool(where):
    A = tc.placeholder((N,), name="A")
    k = tc.reduce_axis((0, N), name="k")
    i = tc.var("i")
    make = {
        "if_then_else": lambda: tc.if_then_else(1 == 1, A[i], 0.0),
        "select": lambda: tc.select(False, A[i], 0.0),
        "all": lambda: tc.all(i > 0, True),
        "any": lambda: tc.any(False, i > 0),
        "and": lambda: (i > 0) & True,
        "rand": lambda: True & (i > 0),
        "or": lambda: (i > 0) | False,
        "where": lambda: tc.compute((1,), lambda _: tc.sum(A[k], axis=k, where=True)),
        "numpy_bool": lambda: tc.if_then_else(np.bool_(True), A[i], 0.0),
    }[where]
    with pytest.raises(tc.ExprError, match=r"got the Python bool (True|False), not a condition"):
        make()
