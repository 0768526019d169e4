"""Automatic differentiation of compute definitions (reverse mode, gather form).

* :func:`gradient` (``tc.gradient``): backward compute definitions of a forward DAG.
* :func:`gradcheck`: finite differences in float64 and a dot-product test, for your own
  compute definitions.
* :func:`register_derivative`: derivatives of new intrinsics, reducers and computes.
* :func:`stop_gradient`: treat a compute as a constant.
* :mod:`.inversion`: the exact index-map inversion behind the gather form.
* :func:`evaluate`: a small numpy evaluator of compute DAGs (a reference, no schedule).
"""
from .reverse import gradient, partials, stop_gradient
from .rules import register_derivative, unregister_derivative
from .inversion import Inversion, invert
from .reference import evaluate
from .gradcheck import GradcheckError, gradcheck

__all__ = ["gradient", "gradcheck", "GradcheckError", "register_derivative",
           "unregister_derivative", "stop_gradient", "invert", "Inversion", "evaluate",
           "partials"]
