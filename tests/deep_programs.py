"""Deeply nested expressions, run in a child process by tests/test_deep_expressions.py
(``python tests/deep_programs.py CASE ARGS...``): a stack overflow kills the child, not
pytest.  Each case prints one JSON line (what the test checks) and exits 0."""
import json
import os
import sys
import threading

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import tecomp as tc  # noqa: E402
from tecomp.ir import interp  # noqa: E402

ROWS = 8


def sum_chain(depth: int):
    """``B[i] = A[i, 0] + A[i, 1] + ... + A[i, depth]``: Python's ``sum`` over a
    generator, a left-leaning chain of ``depth`` additions."""
    A = tc.placeholder((ROWS, depth + 1), name="A")
    B = tc.compute((ROWS,), lambda i: sum(A[i, j] for j in range(depth + 1)), name="B")
    return A, B


def sum_ref(a):
    """The chain's value, added left to right in float32 as the kernel does."""
    acc = a[:, 0].copy()
    for j in range(1, a.shape[1]):
        acc = acc + a[:, j]
    return acc


def gpu_schedule(B):
    s = tc.create_schedule(B.op)
    bx, tx = s[B].split(B.op.axis[0], factor=4)
    s[B].bind(bx, tc.thread_axis("blockIdx.x"))
    s[B].bind(tx, tc.thread_axis("threadIdx.x"))
    return s


def case_paths(depth: int):
    """Every common path on a sum chain: compute, the printed IR, lower, llvm, cuda-emu,
    the interpreter, tc.gradient, auto_schedule; results compared with the reference."""
    rng = np.random.default_rng(0)
    A, B = sum_chain(depth)
    a = rng.uniform(-1, 1, (ROWS, depth + 1)).astype("float32")
    want = sum_ref(a)
    out = {}
    s = tc.create_schedule(B.op)
    f = tc.lower(s, [A, B])
    out["printed_lines"] = len(str(f).splitlines())
    out["body_chars"] = len(str(B.op.body))
    got = np.zeros(ROWS, "float32")
    tc.build(s, [A, B])(a, got)
    out["llvm"] = float(np.abs(got - want).max())
    got = np.zeros(ROWS, "float32")
    tc.build(gpu_schedule(B), [A, B], target="cuda-emu")(a, got)
    out["cuda_emu"] = float(np.abs(got - want).max())
    got = np.zeros(ROWS, "float32")
    interp.run(f, a, got)
    out["interp"] = float(np.abs(got - want).max())
    gA, = tc.gradient(B, [A])
    g = np.full((ROWS, depth + 1), 7.0, "float32")
    tc.build(tc.create_schedule(gA.op), [A, gA])(a, g)   # d(sum)/dA with head ones
    out["gradient"] = float(np.abs(g - 1.0).max())
    s2 = tc.auto_schedule([A, B])
    got = np.zeros(ROWS, "float32")
    tc.build(s2, [A, B])(a, got)
    out["auto_schedule"] = float(np.abs(got - want).max())
    s3 = tc.create_schedule(B.op)                         # schedule primitives on it
    C = s3.cache_write(B, "local")
    s3[C].compute_at(s3[B], B.op.axis[0])
    got = np.zeros(ROWS, "float32")
    tc.build(s3, [A, B])(a, got)
    out["cache_write"] = float(np.abs(got - want).max())
    out["recursion_limit"] = sys.getrecursionlimit()
    return out


# -- random deep trees ------------------------------------------------------------------

def case_random(seed: int, depth: int):
    """A random chain (``tecomp.testing.deep``) on llvm, against numpy (float32 IEEE
    operations in the same order: the results are equal bit for bit)."""
    from tecomp.ir.deep import node_depth
    from tecomp.testing.deep import chain_compute, chain_reference, random_chain

    ops = random_chain(seed, depth)
    A, B = chain_compute(ops, ROWS)
    rng = np.random.default_rng(seed)
    a = rng.uniform(-1, 1, (ROWS, len(ops) + 1)).astype("float32")
    want = chain_reference(ops, a)
    got = np.zeros(ROWS, "float32")
    tc.build(tc.create_schedule(B.op), [A, B])(a, got)
    return {"ops": len(ops), "ir_depth": node_depth(B.op.body),
            "equal": bool(np.array_equal(got, want)),
            "max_error": float(np.abs(got.astype("float64") - want).max())}


# -- beyond what tecomp walks -----------------------------------------------------------

def case_too_deep(depth: int):
    """A chain deeper than the helper's recursion limit: ExprError, the limit restored."""
    A = tc.placeholder((4, 64), name="A")
    e = A[0, 0]
    for k in range(depth):
        e = e + A[0, k % 64]
    before = sys.getrecursionlimit()
    out = {}
    try:
        tc.compute((4,), lambda i: e, name="B")
        out["error"] = None
    except tc.TecompError as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
    out["limit_restored"] = sys.getrecursionlimit() == before
    return out


def case_too_deep_small(depth: int):
    """:func:`case_too_deep` with the helper's limits made small (a quick test of what
    happens past them)."""
    from tecomp.ir import deep

    deep.SUPPORTED_DEPTH = 400
    deep.RECURSION_LIMIT = deep.SUPPORTED_DEPTH * 25
    deep.STACK_BYTES = deep.RECURSION_LIMIT * deep.BYTES_PER_FRAME
    return case_too_deep(depth)


def case_threads(depth: int):
    """Deep compiles in two threads at once, while a third builds ordinary kernels: all
    right, and the recursion limit back to what it was."""
    before = sys.getrecursionlimit()
    results, errors = {}, []

    def deep(k):
        try:
            A, B = sum_chain(depth + k)
            a = np.random.default_rng(k).uniform(-1, 1, (ROWS, depth + k + 1)).astype("float32")
            got = np.zeros(ROWS, "float32")
            tc.build(tc.create_schedule(B.op), [A, B])(a, got)
            results[f"deep{k}"] = float(np.abs(got - sum_ref(a)).max())
        except BaseException as exc:  # noqa: BLE001 - reported
            errors.append(repr(exc))

    def shallow():
        try:
            for k in range(5):
                A = tc.placeholder((16,), name="A")
                B = tc.compute((16,), lambda i: A[i] * float(k) + 1.0, name="B")
                a = np.arange(16, dtype="float32")
                got = np.zeros(16, "float32")
                tc.build(tc.create_schedule(B.op), [A, B])(a, got)
                assert np.array_equal(got, a * k + 1)
            results["shallow"] = 0.0
        except BaseException as exc:  # noqa: BLE001 - reported
            errors.append(repr(exc))

    ts = [threading.Thread(target=deep, args=(k,)) for k in (0, 1)]
    ts.append(threading.Thread(target=shallow))
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return {"results": results, "errors": errors,
            "limit_restored": sys.getrecursionlimit() == before}


def case_python_ops(depth: int):
    """What Python itself does with a deep expression, outside tecomp's entry points:
    ``==`` (structural equality) works at any depth; ``hash`` and ``repr`` (the
    dataclasses') raise RecursionError at Python's limit, they do not crash."""
    A, B = sum_chain(depth)
    _, B2 = sum_chain(depth)
    body, body2 = B.op.body, B2.op.body
    out = {"equal": bool(tc.ir.same_as(body, body)),
           "not_equal": bool(tc.ir.same_as(body, body2)),   # other axis variables
           "eq_bool": bool(body == body)}
    for what, fn in (("hash", hash), ("repr", repr)):
        try:
            fn(body)
            out[what] = "ok"
        except RecursionError:
            out[what] = "RecursionError"
    return out


if __name__ == "__main__":
    case, *rest = sys.argv[1:]
    fn = globals()["case_" + case]
    print(json.dumps(fn(*[int(x) for x in rest])), flush=True)
