"""Small programs the must-fail tests make their mistakes in."""
import tecomp as tc


def vec(n=8, name="A", dtype="float32"):
    return tc.placeholder((n,), dtype=dtype, name=name)


def chain3():
    """A -> B = A + 1 -> C = B * 2, on 16 x 8."""
    A = tc.placeholder((16, 8), name="A")
    B = tc.compute((16, 8), lambda i, j: A[i, j] + 1, name="B")
    C = tc.compute((16, 8), lambda i, j: B[i, j] * 2, name="C")
    return A, B, C


def mm_small():
    """C = A @ B on 8 x 6 x 4, and its reduce axis."""
    A = tc.placeholder((8, 6), name="A")
    B = tc.placeholder((6, 4), name="B")
    k = tc.reduce_axis((0, 6), name="k")
    C = tc.compute((8, 4), lambda i, j: tc.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C, k


def add_kernel(n=8):
    """B = A * 2 on n elements, built for the CPU: (kernel, A, B)."""
    A = vec(n, "A")
    B = tc.compute((n,), lambda i: A[i] * 2, name="B")
    s = tc.create_schedule(B.op)
    return tc.build(s, [A, B]), A, B
