"""Deep expressions for the tests and the fuzzer: a random chain of operations, each on
the value so far and a fresh element ``A[i, k]``, built as tecomp expressions and
evaluated with numpy in the same order (float32 IEEE operations, so the two are equal bit
for bit).  A chain of ``depth`` IR levels is deeper than Python's recursion limit lets a
recursive pass walk past about 300: tecomp's entry points rerun such a call on a big
stack (:mod:`tecomp.ir.deep`)."""
from __future__ import annotations

import random

import numpy as np
import tecomp as tc

#: (name, IR levels it adds to the chain)
OPS = [("add", 1), ("sub", 1), ("mul", 1), ("min", 1), ("max", 1), ("select", 1),
       ("f64", 3), ("int", 2)]


def random_chain(seed: int, depth: int) -> list:
    """A chain of random operations (``OPS``), ``depth`` IR levels deep: the operations in
    order, each ``(name, right)`` (``right``: the chain is the right operand)."""
    r = random.Random(seed)
    ops, levels = [], 0
    while True:
        name, n = r.choice(OPS)
        if levels + n > depth:
            break
        ops.append((name, r.random() < 0.5))
        levels += n
    return ops


class _TC:
    """What one operation of :data:`OPS` needs that tecomp and numpy spell differently."""

    @staticmethod
    def min(a, b):
        return tc.min(a, b)

    @staticmethod
    def max(a, b):
        return tc.max(a, b)

    @staticmethod
    def where(c, a, b):
        return tc.if_then_else(c, a, b)

    @staticmethod
    def cast(e, dtype):
        return e.astype(dtype)


class _NP:
    min, max, where = staticmethod(np.minimum), staticmethod(np.maximum), staticmethod(np.where)

    @staticmethod
    def cast(e, dtype):
        return e.astype(dtype)


def apply(lib, name, right, e, x):
    """Operation ``name`` on the chain ``e`` and the element ``x``, with tecomp
    expressions (``lib=_TC``) or numpy arrays (``_NP``)."""
    half = x * np.float32(0.5) if lib is _NP else x * 0.5
    if name == "add":
        return x + e if right else e + x
    if name == "sub":
        return x - e if right else e - x
    if name == "mul":
        return x * e if right else e * x
    if name in ("min", "max"):
        f = getattr(lib, name)
        return f(x, e) if right else f(e, x)
    if name == "select":
        return lib.where(x > 0.0, e, half)
    if name == "f64":
        return lib.cast(lib.cast(e, "float64") * 3.0, "float32")
    return lib.cast(lib.cast(e, "int32"), "float32")


def chain_compute(ops, rows: int):
    """``(A, B)``: ``B[i]`` the chain ``ops`` over ``A[i, 0], A[i, 1], ...``."""
    A = tc.placeholder((rows, len(ops) + 1), name="A")

    def body(i):
        e = A[i, 0]
        for k, (name, right) in enumerate(ops, 1):
            e = apply(_TC, name, right, e, A[i, k])
        return e

    return A, tc.compute((rows,), body, name="B")


def chain_reference(ops, a: np.ndarray) -> np.ndarray:
    """The chain's value with numpy, row by row (float32, the kernel's order)."""
    want = a[:, 0].copy()
    for k, (name, right) in enumerate(ops, 1):
        want = apply(_NP, name, right, want, a[:, k])
    return want
