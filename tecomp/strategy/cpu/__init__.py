"""Tuned CPU schedules (templates) for the operators of :mod:`tecomp.nn.ops`
(``target="llvm"``), one module per operator, in the manner of TVM's ``topi.x86``.

Every ``schedule_*(outs, target="llvm")`` takes the output tensor(s) of an operator (or a
list of them) and returns a :class:`~tecomp.schedule.schedule.Schedule`; the shapes decide
the blocking, and any shape is correct (tails are guarded, and loop partitioning gives
the full blocks guard-free code and the tail its own smaller unrolled kernel).

The machine model (:func:`~tecomp.target.cpu_model`, ``Target.machine``) comes from the
:class:`~tecomp.target.Target`: the SIMD width (16 float32 lanes with AVX-512, 8 with
AVX2), the number of vector registers (32 / 16), the caches, and the thread count of the
runtime (``tc.set_num_threads``).

=====================  =====================================================================
:mod:`.gemm`           matmul, dense, the packed layouts; :class:`GemmParams` config
:mod:`.skinny`         GEMMs of at most 16 rows (GEMV, decoding): W streamed in place
:mod:`.microkernel`    the register-blocked GEMM micro-kernel the templates share
:mod:`.conv2d`         conv2d NCHW / NHWC with an elementwise epilogue; :class:`ConvParams`
:mod:`.conv2d_tasks`   the convolutions' thread tasks, padding and weight copies
:mod:`.conv2d_grad`    the convolutions' weight gradients (``schedule_conv2d_into``)
:mod:`.depthwise`      depthwise conv2d NCHW / NHWC (memory-bound) with an epilogue
:mod:`.grouped`        grouped conv2d NCHW / NHWC (``groups=``) with an epilogue
:mod:`.softmax`        softmax, ``softmax_fast``
:mod:`.batch_norm`     batch norm's gradient (NCHW: per channel, its sums then its ``dx``)
:mod:`.pool`           max / average / adaptive pooling, 1-3-d, channels first or last
:mod:`.attention`      ``scaled_dot_product_attention``, FlashAttention's way
:mod:`.elementwise`    injective operators and epilogues
:mod:`.templates`      the CPU strategy: a template, else the generic rules
:mod:`.conv_nd`        conv1d NCW, the phases of a transposed convolution (conv template)
=====================  =====================================================================

Where a template finds nothing it schedules (or for the stages it leaves alone), the
auto-scheduler's rules schedule the rest.
"""
from .attention import attention_params, schedule_attention
from .conv2d import (CONV_TASKS, ConvParams, conv2d_knobs, conv2d_nchw_params,
                     conv2d_nhwc_params, schedule_conv2d_nchw, schedule_conv2d_nhwc)
from .conv2d_grad import CONV_TAGS, schedule_conv2d_into
from .depthwise import schedule_depthwise_conv2d_nchw, schedule_depthwise_conv2d_nhwc
from .elementwise import schedule_elementwise, schedule_injective
from .gemm import (GemmParams, dense_packed, gemm_knobs, gemm_params, matmul_packed,
                   schedule_dense, schedule_matmul)
from .grouped import schedule_group_conv2d_nchw, schedule_group_conv2d_nhwc
from ...target import CpuModel, cpu_model, cpu_name
from .pool import schedule_pool
from .softmax import schedule_softmax, softmax_fast
from .templates import PART_TEMPLATES, apply_rules

__all__ = [
    "cpu_model", "cpu_name", "CpuModel", "schedule_matmul", "schedule_dense",
    "schedule_conv2d_nchw", "schedule_conv2d_nhwc", "schedule_conv2d_into", "schedule_softmax",
    "schedule_elementwise", "schedule_injective", "schedule_pool", "matmul_packed",
    "dense_packed", "softmax_fast", "GemmParams", "gemm_params", "gemm_knobs",
    "schedule_attention", "attention_params", "CONV_TAGS", "CONV_TASKS", "ConvParams",
    "conv2d_nchw_params",
    "conv2d_nhwc_params", "conv2d_knobs", "schedule_depthwise_conv2d_nchw",
    "schedule_depthwise_conv2d_nhwc", "schedule_group_conv2d_nchw",
    "schedule_group_conv2d_nhwc", "apply_rules", "PART_TEMPLATES",
]
