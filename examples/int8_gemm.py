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

# uint8 x int8 (an activation times a weight): tc.auto_schedule packs B into the panels of
# the machine's dot-product intrinsic (VNNI's vpdpbusd, or AVX2's vpmaddwd) and tensorizes
Au = tc.placeholder((M, K), dtype="uint8", name="Au")
k2 = tc.reduce_axis((0, K), name="k2")
Cu = tc.compute((M, N), lambda i, j: tc.sum(Au[i, k2].astype("int32") * B[k2, j].astype("int32"),
                                            axis=k2), name="Cu")
s = tc.auto_schedule([Au, B, Cu])
print("\nthe intrinsics this CPU has:", [t.name for t in tc.tensor_intrins_for("llvm")] or "none")
print(s.trace.python([Au, B, Cu]))
fu = tc.build(s, [Au, B, Cu])
au = np.random.randint(0, 256, (M, K)).astype("uint8")
cu = np.empty((M, N), "int32")
fu(au, b, cu)
np.testing.assert_array_equal(cu, au.astype("int32") @ b.astype("int32"))
print("uint8 x int8 GEMM, auto-scheduled: exact match with numpy")
