"""int8 x int8 -> int32 GEMM, as quantized kernels compute it; exact against numpy."""
import numpy as np

import tecomp as tc

M, N, K = 64, 48, 256
A = tc.placeholder((M, K), dtype="int8", name="A")
B = tc.placeholder((K, N), dtype="int8", name="B")
k = tc.reduce_axis((0, K), name="k")
C = tc.compute((M, N), lambda i, j: tc.sum(A[i, k].astype("int32") * B[k, j].astype("int32"), axis=k),
               name="C")
s = tc.create_schedule(C.op)
jo, ji = s[C].split(C.op.axis[1], factor=16)
s[C].reorder(C.op.axis[0], jo, k, ji)
s[C].vectorize(ji)
print(tc.lower(s, [A, B, C], name="qgemm"))
f = tc.build(s, [A, B, C], name="qgemm")
a = np.random.randint(-128, 128, (M, K)).astype("int8")
b = np.random.randint(-128, 128, (K, N)).astype("int8")
c = np.empty((M, N), "int32")
f(a, b, c)
np.testing.assert_array_equal(c, a.astype("int32") @ b.astype("int32"))
print("int8 GEMM: exact match with numpy")
