"""Ready operator definitions for training: forward computes whose backward comes from
:func:`tecomp.gradient` (see :mod:`tecomp.nn.ops` for layouts and conventions)."""
from .ops import (  # noqa: F401
    avg_pool2d, batch_matmul, batch_norm, batch_norm_train, bias_add, concatenate, conv2d_nchw, conv2d_nhwc,
    cross_entropy, dense, dropout, embedding, flatten, gelu, layer_norm, log_softmax, matmul, max_pool2d, mse_loss,
    pad, relu, reshape, scaled_dot_product_attention, sigmoid, softmax, split, tanh, transpose,
)
# the convolutions' gradients register themselves for the operators' tags
from . import conv_grad as _conv_grad  # noqa: E402,F401
# the CPU templates register themselves as the auto-scheduler's starting points
from . import cpu as _cpu  # noqa: E402,F401

__all__ = ["avg_pool2d", "batch_matmul", "batch_norm", "batch_norm_train", "bias_add", "concatenate",
           "conv2d_nchw", "conv2d_nhwc", "cross_entropy", "dense", "dropout", "embedding",
           "flatten", "gelu", "layer_norm", "log_softmax", "matmul", "max_pool2d", "mse_loss",
           "pad", "relu", "reshape", "scaled_dot_product_attention", "sigmoid", "softmax",
           "split", "tanh", "transpose"]
