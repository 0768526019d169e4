"""CUDA schedules for the operators of :mod:`tecomp.nn.ops` (``target="cuda"`` or
``"cuda-emu"``), in the manner of TVM's classic topi CUDA schedules.

Every ``schedule_*(outs, target="cuda")`` takes the output tensor(s) of an operator (or a
list of them) and returns a :class:`~tecomp.schedule.schedule.Schedule`.  The shapes pick
the tiling (:func:`gemm_config`, :func:`conv_config`, :func:`softmax_config`); any shape
is correct: a tile that runs past a tensor's edge keeps its constant size (its shared and
local buffers too, see ``docs/bounds.md``, rule 5), its global loads and stores are
guarded, and the reduction tail is guarded and partitioned off.

=================  ==========================================================
:mod:`.gemm`       matmul, dense; :class:`GemmConfig`
:mod:`.tensorcore` matmul of float16 on tensor cores (wmma); :class:`WmmaConfig`
:mod:`.conv2d`     conv2d NCHW / NHWC; :class:`ConvConfig`
:mod:`.softmax`    softmax, log_softmax; :class:`SoftmaxConfig`
:mod:`.attention`  flash_attention (FlashAttention-2's forward on tensor cores, its
                   backward), scaled_dot_product_attention as it; :class:`FlashConfig`
:mod:`.injective`  elementwise / injective operators
=================  ==========================================================

The GEMM's tiles can be copied 4 floats at a time (``GemmConfig.vector``: 16-byte moves)
and double-buffered (``GemmConfig.double_buffer``: ``cp.async`` on sm_80+); both are off
by default until a GPU measures them (``benchmarks/gpu.py --sweep`` tries them).  Not
here yet: virtual threads that interleave a thread's micro-tile (TVM's ``vthread``;
without them a thread's micro-tile is contiguous, and the reads of the B tile in shared
memory have 2- to 4-way bank conflicts).  Tensor cores (``wmma``) serve ``matmul`` of
float16 operands with a float32 result (:mod:`.tensorcore`) and
``tecomp.nn.flash_attention`` (:mod:`.attention`); not yet convolutions.
"""
from .attention import (FlashConfig, flash_backward_config, flash_backward_into,
                        flash_config, schedule_flash_attention,
                        schedule_flash_attention_backward, schedule_sdpa_as_flash)
from .conv2d import ConvConfig, conv_config, schedule_conv2d_nchw, schedule_conv2d_nhwc
from .gemm import GemmConfig, gemm_config, schedule_dense, schedule_matmul
from .injective import schedule_elementwise, schedule_injective
from .softmax import SoftmaxConfig, schedule_softmax, softmax_config
from .tensorcore import WmmaConfig, wmma_config

__all__ = [
    "schedule_matmul", "schedule_dense", "schedule_conv2d_nchw", "schedule_conv2d_nhwc",
    "schedule_softmax", "schedule_injective", "schedule_flash_attention", "FlashConfig",
    "flash_config", "schedule_flash_attention_backward", "flash_backward_config", "flash_backward_into", "schedule_sdpa_as_flash", "schedule_elementwise",
    "GemmConfig", "gemm_config", "WmmaConfig", "wmma_config", "ConvConfig", "conv_config", "SoftmaxConfig", "softmax_config",
]
