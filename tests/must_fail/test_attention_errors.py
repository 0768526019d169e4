"""Mistakes in calling tecomp.nn.scaled_dot_product_attention: each raises a TecompError
subclass naming the tensor and saying how to fix it."""
import pytest

import tecomp as tc
from tecomp import nn


def _qkv(q=(2, 4, 13, 24), k=(2, 4, 37, 24), v=(2, 4, 37, 16), dtype="float32"):
    return (tc.placeholder(q, dtype, name="Q"), tc.placeholder(k, dtype, name="K"),
            tc.placeholder(v, dtype, name="V"))


def test_wrong_rank():
    q, k, v = _qkv(q=(4, 13, 24))
    with pytest.raises(tc.ShapeError, match=r"scaled_dot_product_attention sdpa: q \(Q\) must "
                                            r"be 4-d \(batch, heads, seq, dim\), got 3-d "
                                            r"\(4, 13, 24\); reshape it"):
        nn.scaled_dot_product_attention(q, k, v)


def test_not_a_tensor():
    _, k, v = _qkv()
    with pytest.raises(tc.ShapeError, match=r"q must be a tensor \(tc.placeholder or a "
                                            r"compute\), got 3"):
        nn.scaled_dot_product_attention(3, k, v)


def test_mismatched_dtypes():
    q, _, v = _qkv()
    k = tc.placeholder((2, 4, 37, 24), "float64", name="K")
    with pytest.raises(tc.DTypeError, match=r"k \(K\) is float64 but q \(Q\) is float32; give "
                                            r"them one dtype \(astype one of them\)"):
        nn.scaled_dot_product_attention(q, k, v)


def test_integer_dtype():
    q, k, v = _qkv(dtype="int32")
    with pytest.raises(tc.DTypeError, match=r"q \(Q\) has dtype int32; give a float tensor "
                                            r"\(float16, bfloat16, float32 or float64\)"):
        nn.scaled_dot_product_attention(q, k, v)


@pytest.mark.parametrize("shapes,msg", [
    (dict(k=(3, 4, 37, 24)), r"k \(K\) has 3 batches \(axis 0\) but q \(Q\) has 2 \(axis 0\); "
                             r"they must be equal"),
    (dict(v=(2, 5, 37, 16)), r"v \(V\) has 5 heads \(axis 1\) but q \(Q\) has 4 \(axis 1\)"),
    (dict(k=(2, 4, 37, 32)), r"k \(K\) has 32 dims \(axis 3\) but q \(Q\) has 24 \(axis 3\); "
                             r"they must be equal \(the scores q.k need the same dim\)"),
    (dict(v=(2, 4, 36, 16)), r"v \(V\) has 36 keys \(axis 2\) but k \(K\) has 37 \(axis 2\); "
                             r"they must be equal \(give v one row per key\)"),
])
def test_mismatched_extents(shapes, msg):
    q, k, v = _qkv(**shapes)
    with pytest.raises(tc.ShapeError, match=msg):
        nn.scaled_dot_product_attention(q, k, v)


def test_mask_that_does_not_broadcast():
    q, k, v = _qkv()
    m = tc.placeholder((2, 1, 12, 37), name="M")
    with pytest.raises(tc.ShapeError, match=r"mask \(M\) has shape \(2, 1, 12, 37\), which does "
                                            r"not broadcast to \(batch, heads, Lq, Lk\) = "
                                            r"\(2, 4, 13, 37\): its axis 2 is 12, expected 13 "
                                            r"or 1"):
        nn.scaled_dot_product_attention(q, k, v, m)


def test_mask_of_one_dimension():
    q, k, v = _qkv()
    m = tc.placeholder((37,), name="M")
    with pytest.raises(tc.ShapeError, match=r"mask \(M\) must be 2-d to 4-d \(broadcasting to "
                                            r"\(batch, heads, Lq, Lk\) = \(2, 4, 13, 37\).*a "
                                            r"mask over the keys alone is \(1, Lk\)\), got 1-d"):
        nn.scaled_dot_product_attention(q, k, v, m)


def test_mask_of_another_float_dtype():
    q, k, v = _qkv()
    m = tc.placeholder((13, 37), "float64", name="M")
    with pytest.raises(tc.DTypeError, match=r"mask \(M\) is float64; give an additive mask of "
                                            r"q's dtype float32 or a bool mask"):
        nn.scaled_dot_product_attention(q, k, v, m)


@pytest.mark.parametrize("scale", [float("nan"), float("inf"), "0.1", True])
def test_bad_scale(scale):
    q, k, v = _qkv()
    with pytest.raises(tc.ShapeError, match=r"scale \(or None for 1/sqrt\(dim\)\) must be a "
                                            r"finite number, got "):
        nn.scaled_dot_product_attention(q, k, v, scale=scale)


def test_default_scale_of_a_symbolic_dim():
    d = tc.var("d")
    q, k, v = _qkv(q=(2, 4, 13, d), k=(2, 4, 37, d))
    with pytest.raises(tc.ShapeError, match=r"q's dim \(Q.shape\[3\] = d\) is symbolic, so the "
                                            r"default scale 1/sqrt\(dim\) is unknown; give "
                                            r"scale= explicitly"):
        nn.scaled_dot_product_attention(q, k, v)


@pytest.mark.parametrize("config, match", [
    ({"rows": 5}, r"rows cannot be 5; its choices here: 1, 2, 3"),
    ({"block": 2}, r"unknown parameters \['block'\]; use rows, keys, values, chunk"),
    ([("rows", 1)], "config must be a dict"),
])
def test_schedule_attention_bad_config(config, match):
    from tecomp.strategy import cpu

    q, k, v = (tc.placeholder((1, 2, 16, 8), name=n) for n in "qkv")
    out = tc.nn.scaled_dot_product_attention(q, k, v)
    with pytest.raises(tc.ScheduleError, match=match):
        cpu.schedule_attention(out, config=config)
