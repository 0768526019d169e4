"""Ready operator definitions for training: forward computes whose backward comes from
:func:`tecomp.gradient` (see :mod:`tecomp.nn.ops` for layouts and conventions).  They are
target-free; how each is scheduled per target is :mod:`tecomp.strategy`'s."""
from .ops import (  # noqa: F401
    avg_pool2d, batch_matmul, batch_norm, batch_norm_train, bias_add, concatenate, conv2d_nchw, conv2d_nhwc,
    cross_entropy, dense, depthwise_conv2d_nchw, depthwise_conv2d_nhwc, dropout, embedding, flatten, gelu, layer_norm, log_softmax, matmul, max_pool2d, mse_loss,
    flash_attention, flash_attention_backward, pad, relu, reshape, scaled_dot_product_attention, sigmoid, softmax, split, tanh, transpose,
)
from .elementwise import (  # noqa: F401
    abs, atan, cast, cbrt, ceil, clip, cos, elu, erf, erfc, exp, exp2, expm1, floor, hardsigmoid,
    hardswish,
    hardtanh, isfinite, isinf, isnan, leaky_relu, log, log1p, log2, mish, negative, prelu,
    reciprocal, round, rsqrt, selu, sign, silu, sin, softplus, sqrt, square, tan, trunc,
)
from .conv_nd import conv1d_ncw, conv1d_nwc, conv3d_ncdhw, conv3d_ndhwc  # noqa: F401
from .conv_transpose import conv2d_transpose_nchw, conv2d_transpose_nhwc  # noqa: F401
from .winograd import (conv2d_winograd, winograd_matrices,  # noqa: F401
                       winograd_weight_transform)
from .elementwise import __all__ as _elementwise_all  # noqa: E402
from .reduction import __all__ as _reduction_all  # noqa: E402
from .pooling import __all__ as _pooling_all  # noqa: E402
from .pooling import (  # noqa: F401
    adaptive_avg_pool1d, adaptive_avg_pool2d, adaptive_avg_pool3d, adaptive_max_pool1d,
    adaptive_max_pool2d, adaptive_max_pool3d, avg_pool1d, avg_pool3d, global_avg_pool2d,
    global_max_pool2d, max_pool1d, max_pool3d,
)
from .reduction import all, any, argmax, argmin, max, mean, min, prod, sum  # noqa: F401
# the convolutions' gradients register themselves for the operators' tags
from . import conv_grad as _conv_grad  # noqa: E402,F401

__all__ = ["avg_pool2d", "batch_matmul", "batch_norm", "batch_norm_train", "bias_add", "concatenate",
           "conv2d_nchw", "conv2d_nhwc", "cross_entropy", "dense", "depthwise_conv2d_nchw",
           "depthwise_conv2d_nhwc", "dropout", "embedding",
           "flatten", "gelu", "layer_norm", "log_softmax", "matmul", "max_pool2d", "mse_loss",
           "pad", "relu", "reshape", "scaled_dot_product_attention", "flash_attention", "flash_attention_backward", "sigmoid", "softmax",
           "split", "tanh", "transpose", "conv1d_ncw", "conv1d_nwc", "conv3d_ncdhw",
           "conv3d_ndhwc", "conv2d_transpose_nchw", "conv2d_transpose_nhwc", "conv2d_winograd",
           "winograd_weight_transform", "winograd_matrices"]
__all__ += [n for n in _elementwise_all + _reduction_all + _pooling_all if n not in __all__]
