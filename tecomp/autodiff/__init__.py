"""Automatic differentiation of compute definitions: reverse mode, gather form.

    import tecomp as tc
    from tecomp import autodiff as ad, nn

    X = tc.placeholder((8, 3, 32, 32), name="X"); W = tc.placeholder((16, 3, 3, 3), name="W")
    c, ky, kx = (tc.reduce_axis(3, name=v) for v in ("c", "ky", "kx"))
    Y = tc.compute((8, 16, 15, 15), lambda n, o, y, x: tc.sum(   # a stride-2 convolution
        X[n, c, 2 * y + ky, 2 * x + kx] * W[o, c, ky, kx], axis=[c, ky, kx]), name="Y")
    H = tc.placeholder(Y.shape, name="H")              # dL/dY, given at call time
    gX, gW = tc.gradient(Y, [X, W], head=H)          # ordinary computes: X.grad, W.grad
    print(gX.op.body)  # sum(H[ax0, o, ax2 // 2 - ky.t, ..]*W[o, ax1, ax2 % 2 + ky.t*2, ..],
                       #     axis=[o, ky.t, kx.t], where=...): a gather over the stride-2
                       #     lattice of the kernel
    s = tc.schedule_backward([gX, gW])                # or any schedule you write
    f = tc.build(s, [X, W, H, gX, gW])
    ad.gradcheck(Y, [X, W])                           # finite differences in float64

What is here:

* :func:`gradient` (``tc.gradient``): the reverse walk over the DAG (:mod:`.reverse`).  Each
  read ``T[h(i, r)]`` of a compute is inverted exactly (:mod:`.inversion`: affine maps with
  strides, dilations, transposes, diagonals, ``//`` and ``%`` by constants), so a gradient
  is a *gather* -- a ``tc.sum`` over the few free variables of the map with exact bounds,
  stride and consistency conditions -- never a Jacobian, a scatter, or a loop over
  output x input.  Data-dependent or non-affine indices fall back to checking ``h(u) == p``
  over the variables they use (an embedding's gradient loops over the batch).
* The rules (:mod:`.rules`): every intrinsic and operator of the DSL; ``sum``, ``max``/``min``
  (to the first extremum, PyTorch's max-pool rule), ``prod``; :func:`register_derivative`
  for new intrinsics, ``tc.comm_reducer`` reducers and whole computes (a custom VJP);
  :func:`register_tag_derivative` for the computes of a tag (``tecomp.nn``'s convolutions:
  the data gradient is a convolution, one per phase of the data for a stride above 1, the
  weight gradient a ``conv2d_*_wgrad``); :func:`register_tag_equivalent` for computes that
  equal another definition, differentiated in their place (a Winograd convolution's
  gradient is the direct convolution's).
* :func:`gradcheck`: finite differences in float64 and the dot-product test.
* A default CPU schedule for derived gradients is :func:`tecomp.schedule_backward`
  (:mod:`tecomp.strategy.backward`, with the other schedules).
* :func:`stop_gradient`: treat a compute as a constant.
* :func:`evaluate`: a small numpy evaluator of compute DAGs (a reference, no schedule).

Determinism: the same program gives the same printed gradient, every time.
"""
from .reverse import gradient, partials, stop_gradient
from .rules import (register_derivative, register_tag_derivative, register_tag_equivalent,
                    unregister_derivative, unregister_tag_derivative, unregister_tag_equivalent)
from .inversion import Inversion, invert
from .reference import evaluate
from .gradcheck import GradcheckError, gradcheck

__all__ = ["gradient", "gradcheck", "GradcheckError", "register_derivative",
           "unregister_derivative", "register_tag_derivative", "unregister_tag_derivative",
           "register_tag_equivalent", "unregister_tag_equivalent",
           "stop_gradient", "invert", "Inversion", "evaluate",
           "partials"]
