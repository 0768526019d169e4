"""An RNN layer written with ``tc.scan``, shared by ``tests/test_scan.py`` and
``benchmarks/rnn.py``: ``h[t] = tanh(U h[t-1] + W x[t])`` with ``h[0] = h0``; ``W x[t]`` is
computed for every step beforehand (it does not read the state)."""
from __future__ import annotations

import tecomp as tc


def rnn_scan(T: int, B: int, n: int, d: int):
    """``([X, W, U, h0, H], (XW, UH, upd))``: the arguments of ``tc.build`` (``H`` the
    scan's output, ``[T, B, n]``) and the computes between them (``UH`` and ``upd`` are
    the scan's body)."""
    X = tc.placeholder((T, B, d), name="X")
    W = tc.placeholder((n, d), name="W")
    U = tc.placeholder((n, n), name="U")
    h0 = tc.placeholder((B, n), name="h0")
    kd = tc.reduce_axis((0, d), name="kd")
    XW = tc.compute((T, B, n), lambda t, b, i: tc.sum(X[t, b, kd] * W[i, kd], axis=kd), name="XW")
    state = tc.placeholder((T, B, n), name="h")
    init = tc.compute((1, B, n), lambda _, b, i: h0[b, i], name="init")
    kn = tc.reduce_axis((0, n), name="kn")
    UH = tc.compute((T, B, n), lambda t, b, i: tc.sum(U[i, kn] * state[t - 1, b, kn], axis=kn),
                    name="UH")
    upd = tc.compute((T, B, n), lambda t, b, i: tc.tanh(UH[t, b, i] + XW[t, b, i]), name="upd")
    H = tc.scan(init, upd, state, inputs=[X], name="H")
    return [X, W, U, h0, H], (XW, UH, upd)
