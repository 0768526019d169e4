"""Mistakes in calling tecomp.nn.flash_attention and its CUDA schedule: each raises a
TecompError subclass naming the tensor and saying how to fix it."""
import pytest

import tecomp as tc
from tecomp import nn
from tecomp.strategy.cuda import FlashConfig, schedule_flash_attention


def _qkv(q=(1, 2, 40, 64), k=(1, 2, 50, 64), v=(1, 2, 50, 64), dtype="float16", kdtype=None):
    return (tc.placeholder(q, dtype, name="Q"), tc.placeholder(k, kdtype or dtype, name="K"),
            tc.placeholder(v, dtype, name="V"))


def test_mismatched_dtypes():
    q, k, v = _qkv(kdtype="bfloat16")
    with pytest.raises(tc.DTypeError, match=r"flash_attention flash: k \(K\) is bfloat16 but q "
                                            r"\(Q\) is float16; give them one dtype"):
        nn.flash_attention(q, k, v)


def test_float32_is_not_for_the_tensor_cores():
    q, k, v = _qkv(dtype="float32")
    with pytest.raises(tc.DTypeError, match=r"q \(Q\) is float32; FlashAttention runs on the "
                                            r"tensor cores, which take float16 or bfloat16"):
        nn.flash_attention(q, k, v)


@pytest.mark.parametrize("d", [72, 8, 256])
def test_a_head_dim_the_tensor_cores_do_not_take(d):
    q, k, v = _qkv(q=(1, 2, 40, d), k=(1, 2, 50, d), v=(1, 2, 50, d))
    with pytest.raises(tc.ShapeError, match=rf"q's head dim is {d}; the tensor-core "
                                            r"FlashAttention takes a multiple of 16 from 16 to "
                                            r"128 \(pad the head dim with zeros, or use "
                                            r"scaled_dot_product_attention"):
        nn.flash_attention(q, k, v)


def test_symbolic_length():
    n = tc.var("n")
    q, k, v = _qkv(q=(1, 2, n, 64))
    with pytest.raises(tc.ShapeError, match=r"q \(Q\).shape\[2\] = n is symbolic; "
                                            r"flash_attention takes constant shapes"):
        nn.flash_attention(q, k, v)


def test_causal_must_be_a_bool():
    q, k, v = _qkv()
    with pytest.raises(tc.ShapeError, match=r"causal must be True or False, got 'yes'"):
        nn.flash_attention(q, k, v, causal="yes")


def test_mismatched_keys():
    q, k, _ = _qkv()
    v = tc.placeholder((1, 2, 51, 64), "float16", name="V")
    with pytest.raises(tc.ShapeError, match=r"v \(V\) has 51 keys"):
        nn.flash_attention(q, k, v)


def test_schedule_takes_both_outputs():
    out, lse = nn.flash_attention(*_qkv())
    with pytest.raises(tc.ScheduleError, match=r"schedule_flash_attention takes the two outputs "
                                               r"of tecomp.nn.flash_attention, \(out, lse\), "
                                               r"got flash$"):
        schedule_flash_attention([out], target="cuda")


def test_schedule_refuses_a_tiling_that_does_not_divide():
    out, lse = nn.flash_attention(*_qkv())
    with pytest.raises(tc.ScheduleError, match=r"block_kv \(48, a multiple of 16\) the padded "
                                               r"column extent 128"):
        schedule_flash_attention([out, lse], target="cuda", config=FlashConfig(4, 48))


def test_schedule_is_for_cuda_targets():
    out, lse = nn.flash_attention(*_qkv())
    with pytest.raises(tc.ScheduleError, match=r"are for target 'cuda' or 'cuda-emu'"):
        schedule_flash_attention([out, lse], target="llvm")
