"""Ready operator definitions for training: forward computes whose backward comes from
:func:`tecomp.gradient` (see :mod:`tecomp.nn.ops` for layouts and conventions)."""
from .ops import (  # noqa: F401
    avg_pool2d, batch_matmul, batch_norm, batch_norm_train, bias_add, concatenate, conv2d_nchw, conv2d_nhwc,
    cross_entropy, dense, depthwise_conv2d_nchw, depthwise_conv2d_nhwc, dropout, embedding, flatten, gelu, layer_norm, log_softmax, matmul, max_pool2d, mse_loss,
    pad, relu, reshape, scaled_dot_product_attention, sigmoid, softmax, split, tanh, transpose,
)
from .elementwise import (  # noqa: F401
    abs, cast, ceil, clip, cos, elu, erf, exp, exp2, expm1, floor, hardsigmoid, hardswish,
    hardtanh, isfinite, isinf, isnan, leaky_relu, log, log1p, log2, mish, negative, prelu,
    reciprocal, round, rsqrt, selu, sign, silu, sin, softplus, sqrt, square, tan, trunc,
)
from .elementwise import __all__ as _elementwise_all  # noqa: E402
from .reduction import __all__ as _reduction_all  # noqa: E402
from .reduction import all, any, argmax, argmin, max, mean, min, prod, sum  # noqa: F401
# the convolutions' gradients register themselves for the operators' tags
from . import conv_grad as _conv_grad  # noqa: E402,F401
# the CPU templates register themselves as the auto-scheduler's starting points
from . import cpu as _cpu  # noqa: E402,F401

__all__ = ["avg_pool2d", "batch_matmul", "batch_norm", "batch_norm_train", "bias_add", "concatenate",
           "conv2d_nchw", "conv2d_nhwc", "cross_entropy", "dense", "depthwise_conv2d_nchw",
           "depthwise_conv2d_nhwc", "dropout", "embedding",
           "flatten", "gelu", "layer_norm", "log_softmax", "matmul", "max_pool2d", "mse_loss",
           "pad", "relu", "reshape", "scaled_dot_product_attention", "sigmoid", "softmax",
           "split", "tanh", "transpose"]
__all__ += [n for n in _elementwise_all + _reduction_all if n not in __all__]
