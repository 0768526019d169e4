"""Forward operator definitions: pure compute definitions, no schedules (this module
gathers them; each area has its own module: :mod:`~tecomp.nn.linalg`,
:mod:`~tecomp.nn.conv`, :mod:`~tecomp.nn.conv_nd`, :mod:`~tecomp.nn.conv_transpose`,
:mod:`~tecomp.nn.pooling`, :mod:`~tecomp.nn.activation`,
:mod:`~tecomp.nn.softmax`, :mod:`~tecomp.nn.attention`, :mod:`~tecomp.nn.norm`,
:mod:`~tecomp.nn.transform`).

Every operator returns a ``tc.compute`` tensor built from its inputs (and helper stages
named ``<name>.<what>``, e.g. ``conv2d_nchw.pad``); the dtype follows the inputs (float16,
bfloat16, float32 or float64).  Reductions over float16 and bfloat16 values accumulate
in float32 and round once, when the result is stored (as PyTorch, cuBLAS and cuDNN do):
the GEMMs and convolutions then have a float32 stage ``<name>.matmul`` / ``<name>.acc``
under the output, and the normalisations keep their statistics in float32
(``docs/numerics.md``).  ``out_dtype=`` of a GEMM or convolution chooses the accumulation
(and output) dtype instead.  Every operator checks its arguments first (ranks, dtypes,
extents, strides...; :mod:`tecomp.nn._check`) and raises a ShapeError or DTypeError
naming the argument.  Their backward definitions come from :func:`tecomp.gradient` (the
convolutions' from :mod:`tecomp.nn.conv_grad`); tuned
schedules live in other modules of :mod:`tecomp.nn`.  The names of operators and stages
are stable: schedules look stages up by them.

Layouts
-------
* ``matmul(A, B)``: ``A[M, K] @ B[K, N] -> [M, N]``; ``batch_matmul(A, B, transpose_a,
  transpose_b)``: ``[b, m, k] x [b, k, n] -> [b, m, n]`` (``torch.bmm``).
* ``transpose``, ``reshape``, ``concatenate``, ``split``: as numpy's.
* ``dropout(x, p, seed)``: a counter-based mask (:func:`squares32`), the same in the
  gradient and under every schedule.  ``embedding(weight[V, D], ids)``: rows of weight.
* ``dense(X, W, bias)``: ``X[B, I]``, ``W[O, I]`` (PyTorch's ``nn.Linear``), ``bias[O]``
  -> ``[B, O]``.
* ``conv2d_nchw``: data ``[N, C, H, W]``, weight ``[O, C, KH, KW]`` (PyTorch's layout).
* ``conv2d_nhwc``: data ``[N, H, W, C]``, weight ``[KH, KW, C, O]`` (HWIO, TensorFlow's and
  TVM's NHWC layout); output ``[N, OH, OW, O]``.  With ``groups=g`` the weights are
  ``[O, C / g, KH, KW]`` and ``[KH, KW, C / g, O]``.
* ``depthwise_conv2d_nchw``: weight ``[C, M, KH, KW]``; ``depthwise_conv2d_nhwc``: weight
  ``[KH, KW, C, M]`` (TOPI's); output channel ``c * M + m``.
* ``conv1d_ncw``/``conv1d_nwc``, ``conv3d_ncdhw``/``conv3d_ndhwc``: weights OIW / WIO and
  OIDHW / DHWIO (TOPI's names; PyTorch's ``conv1d``/``conv3d`` in the channels-first
  layouts), ``groups=`` as PyTorch's.
* ``conv2d_transpose_nchw``: data ``[N, C_in, H, W]``, weight ``[C_in, C_out/groups, KH,
  KW]`` (PyTorch's ``conv_transpose2d``); ``conv2d_transpose_nhwc``: weight ``[KH, KW,
  C_out/groups, C_in]``.
* pooling: 1-, 2- and 3-d, channels first (NCW, NCHW, NCDHW) or last (``layout=``).
  ``softmax``, ``log_softmax``, ``layer_norm``: over the last axis.
* ``cross_entropy``, ``mse_loss``: shape ``(1,)`` (the mean), as a one-element tensor.

Padding is a stage ``<name>.pad`` with ``tc.if_then_else`` (zero for convolutions and average
pooling, ``-inf`` for max pooling, as PyTorch); autodiff inlines it, so the data gradient
is one gather over the unpadded input.
"""

from .activation import bias_add, gelu, relu, sigmoid, tanh
from .attention import flash_attention, flash_attention_backward, scaled_dot_product_attention
from .conv import conv2d_nchw, conv2d_nhwc, depthwise_conv2d_nchw, depthwise_conv2d_nhwc
from .conv_nd import conv1d_ncw, conv1d_nwc, conv3d_ncdhw, conv3d_ndhwc
from .conv_transpose import conv2d_transpose_nchw, conv2d_transpose_nhwc
from .linalg import batch_matmul, dense, matmul
from .norm import batch_norm, batch_norm_train, layer_norm
from .pooling import avg_pool2d, max_pool2d
from .softmax import cross_entropy, log_softmax, mse_loss, softmax
from .transform import (concatenate, dropout, embedding, flatten, pad, reshape, split, squares32,
                        transpose)

__all__ = [
    "matmul", "dense", "conv2d_nchw", "conv2d_nhwc", "depthwise_conv2d_nchw",
    "depthwise_conv2d_nhwc", "max_pool2d", "avg_pool2d", "relu",
    "sigmoid", "tanh", "gelu", "bias_add", "softmax", "log_softmax", "cross_entropy",
    "mse_loss", "batch_norm", "batch_norm_train", "layer_norm", "pad", "flatten", "batch_matmul",
    "transpose", "reshape", "concatenate", "split", "dropout", "squares32", "embedding",
    "scaled_dot_product_attention", "flash_attention", "flash_attention_backward", "conv1d_ncw", "conv1d_nwc", "conv3d_ncdhw", "conv3d_ndhwc",
    "conv2d_transpose_nchw", "conv2d_transpose_nhwc",
]
