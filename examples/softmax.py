"""Row softmax: a max reduction, an exp-sum reduction and a division, in three stages."""
import numpy as np

import tecomp as tc

m, n = 64, 1000
X = tc.placeholder((m, n), name="X")
k1 = tc.reduce_axis((0, n), name="k1")
k2 = tc.reduce_axis((0, n), name="k2")
mx = tc.compute((m,), lambda i: tc.max(X[i, k1], axis=k1), name="rowmax")
ex = tc.compute((m, n), lambda i, j: tc.exp(X[i, j] - mx[i]), name="exp")
sm = tc.compute((m,), lambda i: tc.sum(ex[i, k2], axis=k2), name="rowsum")
Y = tc.compute((m, n), lambda i, j: ex[i, j] / sm[i], name="softmax")
s = tc.create_schedule(Y.op)
s[mx].compute_at(s[Y], Y.op.axis[0])
s[ex].compute_at(s[Y], Y.op.axis[0])
s[sm].compute_at(s[Y], Y.op.axis[0])
s[Y].parallel(Y.op.axis[0])
print(tc.lower(s, [X, Y], name="softmax"))
f = tc.build(s, [X, Y], name="softmax")
x = np.random.randn(m, n).astype("float32")
y = np.empty_like(x)
f(x, y)
e = np.exp(x - x.max(axis=1, keepdims=True))
np.testing.assert_allclose(y, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)
print("softmax: matches numpy")
