"""Vector add with a symbolic length: split, vectorize, parallel; any length works."""
import numpy as np

import tecomp as tc

n = tc.var("n")
A = tc.placeholder((n,), name="A")
B = tc.placeholder((n,), name="B")
C = tc.compute((n,), lambda i: A[i] + B[i], name="C")
s = tc.create_schedule(C.op)
xo, xi = s[C].split(C.op.axis[0], factor=16)
s[C].vectorize(xi)
s[C].parallel(xo)
print(tc.lower(s, [A, B, C], name="vadd"))
f = tc.build(s, [A, B, C], name="vadd")
for length in (1, 15, 16, 1000, 100003):
    a, b = np.random.rand(length).astype("float32"), np.random.rand(length).astype("float32")
    c = np.empty_like(a)
    f(a, b, c)
    np.testing.assert_array_equal(c, a + b)
print("vector add: matches numpy for lengths 1, 15, 16, 1000, 100003")
