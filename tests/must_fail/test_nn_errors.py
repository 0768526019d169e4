"""Bad calls of every public tecomp.nn operator (tecomp.nn, tecomp.nn.ops, tecomp.nn.quant
and the compute definitions of tecomp.strategy.cpu): each is refused before anything is built,
with a ShapeError or DTypeError whose message names the operator, the argument (and its
tensor) and what was expected -- never an IndexError, a ZeroDivisionError or a message
from tecomp's internals."""
import inspect
import math

import pytest

import tecomp as tc
from tecomp import nn
from tecomp.strategy import cpu
from tecomp.nn import ops, quant


def P(*shape, dtype="float32", name="T"):
    return tc.placeholder(shape, dtype, name=name)


X4 = P(2, 3, 8, 8, name="X")            # NCHW data
W4 = P(4, 3, 3, 3, name="W")            # OIHW weight
H4 = P(2, 8, 8, 3, name="X")            # NHWC data
X5 = P(2, 3, 6, 6, 6, name="X")         # NCDHW data
HW = P(3, 3, 3, 4, name="W")            # HWIO weight
M2 = P(4, 6, name="A")
Q8 = P(2, 3, 8, 8, dtype="uint8", name="Q")
QW = P(4, 3, 3, 3, dtype="int8", name="QW")
QX = P(4, 6, dtype="uint8", name="QX")
QD = P(5, 6, dtype="int8", name="QD")
S, D = tc.ShapeError, tc.DTypeError

# (operator, call, error, the message's pattern)
CASES = [
    # GEMMs
    ("matmul", lambda: nn.matmul(P(4, 6, 2, name="A"), P(6, 3, name="B")), S,
     r"matmul matmul: A \(A\) must be 2-d \[M, K\], got 3-d \(4, 6, 2\)"),
    ("matmul", lambda: nn.matmul(M2, P(7, 3, name="B")), S,
     r"matmul matmul: B \(B\) has 7 rows \(axis 0\) but A \(A\) has 6 \(axis 1\); they must be "
     r"equal \(the reduced extent K"),
    ("matmul", lambda: nn.matmul(M2, P(6, 3, dtype="float64", name="B")), D,
     r"B \(B\) is float64 but A \(A\) is float32; give them one dtype .*or out_dtype="),
    ("matmul", lambda: nn.matmul(M2, P(6, 3, name="B"), out_dtype="int32"), D,
     r"matmul matmul: out_dtype int32 cannot hold the sum of products of float32 values"),
    ("matmul", lambda: nn.matmul(M2, P(6, 3, name="B"), out_dtype="float8"), D,
     r"matmul matmul: out_dtype: unknown dtype 'float8'"),
    ("matmul", lambda: nn.matmul(P(4, 6, dtype="bool", name="A"), P(6, 3, dtype="bool")), D,
     r"A \(A\) has dtype bool; give a float or integer tensor"),
    ("matmul", lambda: nn.matmul(M2, "B"), S,
     r"matmul matmul: B must be a tensor \(tc.placeholder or a compute\), got 'B'"),
    ("dense", lambda: nn.dense(P(4, 6, name="X"), P(5, 7, name="W")), S,
     r"dense dense: W \(W\) has 7 input features \(axis 1\) but X \(X\) has 6 \(axis 1\)"),
    ("dense", lambda: nn.dense(P(4, 6, name="X"), P(5, 6, name="W"), P(4, name="b")), S,
     r"dense dense: bias \(b\) has 4 elements \(axis 0\) but W \(W\) has 5 \(axis 0\)"),
    ("dense", lambda: nn.dense(P(4, 6, dtype="float16", name="X"), P(5, 6, dtype="float16"),
                               P(5, name="b")), D,
     r"dense dense: bias \(b\) has dtype float32; give float16"),
    ("dense", lambda: nn.dense(P(6, name="X"), P(5, 6, name="W")), S,
     r"X \(X\) must be 2-d \[batch, in\], got 1-d \(6,\)"),
    ("batch_matmul", lambda: nn.batch_matmul(P(2, 3, 4, name="A"), P(2, 5, 4, name="B")), S,
     r"batch_matmul batch_matmul: the reduced extents differ: A gives 4, B gives 5"),
    ("batch_matmul", lambda: nn.batch_matmul(P(3, 4, name="A"), P(2, 4, 5, name="B")), S,
     r"A \(A\) must be 3-d \[batch, m, k\], got 2-d"),
    ("matmul_packed", lambda: cpu.matmul_packed(M2, P(5, 3, name="B")), S,
     r"matmul_packed matmul: B \(B\) has 5 rows \(axis 0\) but A \(A\) has 6"),
    ("matmul_packed", lambda: cpu.matmul_packed(M2, P(6, 3, name="B"), nr=0), S,
     r"matmul_packed matmul: nr must be an int >= 1, got 0"),
    ("dense_packed", lambda: cpu.dense_packed(P(4, 6, name="X"), P(5, 6, 1, name="W")), S,
     r"dense_packed dense: W \(W\) must be 2-d \[out, in\], got 3-d"),
    # convolutions
    ("conv2d_nchw", lambda: nn.conv2d_nchw(P(3, 8, 8, name="X"), W4), S,
     r"conv2d_nchw conv2d_nchw: data \(X\) must be 4-d NCHW \[batch, channels, height, width\], "
     r"got 3-d \(3, 8, 8\)"),
    ("conv2d_nchw", lambda: nn.conv2d_nchw(X4, P(4, 3, 3, name="W")), S,
     r"weight \(W\) must be 4-d OIHW \[out, in, kh, kw\], got 3-d"),
    ("conv2d_nchw", lambda: nn.conv2d_nchw(X4, P(4, 5, 3, 3, name="W")), S,
     r"weight \(W\) has 5 input channels \(axis 1\) but data \(X\) has 3 \(axis 1\)"),
    ("conv2d_nchw", lambda: nn.conv2d_nchw(X4, P(4, 3, 9, 3, name="W")), S,
     r"the kernel does not fit: the 9x3 kernel \(dilation 1x1, spanning 9x3\) is larger than the "
     r"8x8 data padded by 0x0 \(the output would be 0x6\)"),
    ("conv2d_nchw", lambda: nn.conv2d_nchw(X4, W4, dilation=4), S,
     r"the 3x3 kernel \(dilation 4x4, spanning 9x9\) is larger than the 8x8 data"),
    ("conv2d_nchw", lambda: nn.conv2d_nchw(X4, W4, stride=0), S,
     r"conv2d_nchw conv2d_nchw: stride must be an int >= 1 or a pair of them \(rows, columns\), "
     r"got 0"),
    ("conv2d_nchw", lambda: nn.conv2d_nchw(X4, W4, padding=(1, -1)), S,
     r"padding must be an int >= 0, 2 of them \(one per spatial dimension\), 2 \(before, "
     r"after\) pairs, 4 ints \(the befores, then the afters\), \"SAME\" or \"VALID\"; got "
     r"\(1, -1\)"),
    ("conv2d_nchw", lambda: nn.conv2d_nchw(X4, W4, padding=(1, 0, 1)), S,
     r"conv2d_nchw conv2d_nchw: padding must be an int >= 0, 2 of them .* got \(1, 0, 1\)"),
    ("conv2d_nchw", lambda: nn.conv2d_nchw(X4, W4, padding=((1, 0), (2,))), S,
     r"padding must be .* 2 \(before, after\) pairs.* got \(\(1, 0\), \(2,\)\)"),
    ("conv2d_nchw", lambda: nn.conv2d_nchw(X4, W4, padding="FULL"), S,
     r"conv2d_nchw conv2d_nchw: padding 'FULL' is not a padding mode; give \"SAME\" or "
     r"\"VALID\", or ints"),
    ("conv2d_nchw", lambda: nn.conv2d_nchw(X4, W4, padding=(0, 0, 0, -1)), S,
     r"padding must be an int >= 0, .* got \(0, 0, 0, -1\)"),
    ("conv2d_nchw", lambda: nn.conv2d_nchw(P(1, 3, 4, 4, name="X"), W4, padding=(0, 0, 0, 0),
                                           stride=1, dilation=2), S,
     r"the 3x3 kernel \(dilation 2x2, spanning 5x5\) is larger than the 4x4 data padded by "
     r"0x0"),
    ("conv2d_nchw", lambda: nn.conv2d_nchw(X4, W4, padding=((2, 0), (0, 1)), dilation=(5, 4)),
     S, r"the 3x3 kernel \(dilation 5x4, spanning 11x9\) is larger than the 8x8 data padded "
        r"by 2\+0x0\+1"),
    ("conv2d_nchw", lambda: nn.conv2d_nchw(P(2, 6, 8, 8, name="X"), P(4, 3, 3, 3, name="W"),
                                           groups=4), S,
     r"conv2d_nchw conv2d_nchw: groups=4 must divide the 6 channels of data \(X\) and the 4 "
     r"output channels of weight \(W\); give a common divisor of them"),
    ("conv2d_nchw", lambda: nn.conv2d_nchw(P(2, 6, 8, 8, name="X"), P(8, 2, 3, 3, name="W"),
                                           groups=3), S,
     r"groups=3 must divide the 6 channels of data \(X\) and the 8 output channels"),
    ("conv2d_nchw", lambda: nn.conv2d_nchw(P(2, 6, 8, 8, name="X"), P(6, 3, 3, 3, name="W"),
                                           groups=3), S,
     r"conv2d_nchw conv2d_nchw: weight \(W\) has 3 input channels per group \(axis 1\) but "
     r"data \(X\) has 6 channels in 3 groups \(2 per group\); weight must be \[6, 2, kh, kw\]"),
    ("conv2d_nchw", lambda: nn.conv2d_nchw(X4, W4, groups=0), S,
     r"conv2d_nchw conv2d_nchw: groups must be an int >= 1, got 0"),
    ("conv2d_nchw", lambda: nn.conv2d_nchw(X4, W4, groups=1.0), S,
     r"groups must be an int >= 1, got 1.0"),
    ("conv2d_nchw", lambda: nn.conv2d_nchw(P(tc.var("n"), 6, 8, 8, name="X"),
                                           P(6, 2, 3, 3, name="W"), groups=2, name="g"), S,
     r"conv2d_nchw g: weight \(W\) has 2 input channels per group .* 6 channels in 2 groups "
     r"\(3 per group\); weight must be \[6, 3, kh, kw\]"),
    ("conv2d_nchw", lambda: nn.conv2d_nchw(P(2, tc.var("c"), 8, 8, name="X"),
                                           P(6, 3, 3, 3, name="W"), groups=2), S,
     r"data \(X\): the channels \(axis 1\) must be a constant extent, got c"),
    ("conv2d_nhwc", lambda: nn.conv2d_nhwc(P(1, 8, 8, 6, name="X"), P(3, 3, 3, 6, name="W"),
                                           groups=3), S,
     r"conv2d_nhwc conv2d_nhwc: weight \(W\) has 3 input channels per group \(axis 2\) but "
     r"data \(X\) has 6 channels in 3 groups \(2 per group\); weight must be "
     r"\[kh, kw, 2, 6\]"),
    ("conv2d_nhwc", lambda: nn.conv2d_nhwc(H4, HW, padding="same "), S,
     r"padding 'same ' is not a padding mode"),
    ("conv2d_nhwc", lambda: nn.conv2d_nhwc(H4, HW, kernel_layout="OIHW"), S,
     r"kernel_layout 'OIHW' is not one tecomp reads; give \"HWIO\" \(\[kh, kw, in, out\]\), "
     r"\"OHWI\""),
    ("conv2d_nhwc", lambda: nn.conv2d_nhwc(H4, P(6, 3, 3, name="W"), kernel_layout="OHWI"), S,
     r"weight \(W\).*OHWI \[out, kh, kw, in\]"),
    ("depthwise_conv2d_nchw", lambda: nn.depthwise_conv2d_nchw(X4, P(4, 1, 3, 3, name="W")), S,
     r"depthwise_conv2d_nchw depthwise_conv2d_nchw: weight \(W\) has 4 channels \(axis 0\) "
     r"but data \(X\) has 3 \(axis 1\); they must be equal \(the weight is \[channels, "
     r"multiplier, kh, kw\]\)"),
    ("depthwise_conv2d_nchw", lambda: nn.depthwise_conv2d_nchw(X4, P(3, 3, 3, name="W")), S,
     r"weight \(W\) must be 4-d \[channels, multiplier, kh, kw\], got 3-d"),
    ("depthwise_conv2d_nchw", lambda: nn.depthwise_conv2d_nchw(X4, P(3, 1, 3, 3, name="W"),
                                                               padding=-1), S,
     r"depthwise_conv2d_nchw depthwise_conv2d_nchw: padding must be an int >= 0"),
    ("depthwise_conv2d_nchw", lambda: nn.depthwise_conv2d_nchw(X4, P(3, 1, 3, 3, name="W"),
                                                               stride=(1, 0)), S,
     r"stride must be an int >= 1 or a pair of them \(rows, columns\), got \(1, 0\)"),
    ("depthwise_conv2d_nchw", lambda: nn.depthwise_conv2d_nchw(
        X4, P(3, 1, 3, 3, dtype="float64", name="W")), D,
     r"weight \(W\) is float64 but data \(X\) is float32"),
    ("depthwise_conv2d_nchw", lambda: nn.depthwise_conv2d_nchw(X4, P(3, 1, 3, 3, name="W"),
                                                               out_dtype="int8"), D,
     r"out_dtype int8 cannot hold the sum of products of float32 values"),
    ("depthwise_conv2d_nchw", lambda: nn.depthwise_conv2d_nchw(
        X4, P(3, tc.var("m"), 3, 3, name="W")), S,
     r"weight \(W\): the channel multiplier \(axis 1\) must be a constant extent, got m"),
    ("depthwise_conv2d_nhwc", lambda: nn.depthwise_conv2d_nhwc(H4, P(3, 3, 1, 3, name="W")), S,
     r"depthwise_conv2d_nhwc depthwise_conv2d_nhwc: weight \(W\) has 1 channels \(axis 2\) "
     r"but data \(X\) has 3 \(axis 3\); they must be equal \(the weight is \[kh, kw, "
     r"channels, multiplier\]\)"),
    ("depthwise_conv2d_nhwc", lambda: nn.depthwise_conv2d_nhwc(H4, P(9, 3, 3, 1, name="W")), S,
     r"the kernel does not fit: the 9x3 kernel"),
    ("depthwise_conv2d_nhwc", lambda: nn.depthwise_conv2d_nhwc(
        P(2, 8, 8, 3, dtype="bool", name="X"), P(3, 3, 3, 1, dtype="bool", name="W")), D,
     r"data \(X\) has dtype bool; give a float or integer tensor"),
    ("conv2d_nchw", lambda: nn.conv2d_nchw(X4, W4, dilation=(1, 1, 1)), S,
     r"dilation must be an int >= 1 or a pair"),
    ("conv2d_nchw", lambda: nn.conv2d_nchw(X4, W4, stride=1.5), S,
     r"stride must be an int >= 1 or a pair of them \(rows, columns\), got 1.5"),
    ("conv2d_nchw", lambda: nn.conv2d_nchw(X4, P(4, 3, 3, 3, dtype="float16", name="W")), D,
     r"weight \(W\) is float16 but data \(X\) is float32"),
    ("conv2d_nchw", lambda: nn.conv2d_nchw(P(2, 3, tc.var("h"), 8, name="X"), W4), S,
     r"data \(X\): the height \(axis 2\) must be a constant extent, got h"),
    ("conv2d_nhwc", lambda: nn.conv2d_nhwc(P(1, 3, 3, 2, name="X"), P(7, 3, 2, 4, name="W")), S,
     r"conv2d_nhwc conv2d_nhwc: the kernel does not fit: the 7x3 kernel .* larger than the 3x3 "
     r"data padded by 0x0"),
    ("conv2d_nhwc", lambda: nn.conv2d_nhwc(H4, P(3, 3, 4, 4, name="W")), S,
     r"weight \(W\) has 4 input channels \(axis 2\) but data \(X\) has 3 \(axis 3\)"),
    ("conv2d_nhwc", lambda: nn.conv2d_nhwc(P(8, 8, 3, name="X"), HW), S,
     r"data \(X\) must be 4-d NHWC \[batch, height, width, channels\]"),
    # pooling
    ("max_pool2d", lambda: nn.max_pool2d(P(3, 8, 8, name="X"), 2), S,
     r"max_pool2d max_pool2d: data \(X\) must be 4-d NCHW \[batch, channels, height, width\], "
     r"got 3-d"),
    ("max_pool2d", lambda: nn.max_pool2d(X4, 9), S,
     r"max_pool2d max_pool2d: the kernel does not fit: the 9x9 kernel"),
    ("max_pool2d", lambda: nn.max_pool2d(X4, 2, 0), S, r"stride must be an int >= 1"),
    ("avg_pool2d", lambda: nn.avg_pool2d(X4, 2, 2, 2), S,
     r"avg_pool2d avg_pool2d: padding 2 leaves window 0 of the height on padding only \(the "
     r"2-wide kernel, stride 2, dilation 1, over 8 elements padded by 2\+2\); pad less"),
    ("max_pool2d", lambda: nn.max_pool2d(X4, 2, layout="NCW"), S,
     r"max_pool2d max_pool2d: layout must be 'NCHW' or 'NHWC' \(the 2-d layouts, channels "
     r"first or last\), got 'NCW'"),
    ("max_pool2d", lambda: nn.max_pool2d(X4, 2, dilation=0), S,
     r"dilation must be an int >= 1 or a pair of them \(rows, columns\), got 0"),
    ("max_pool2d", lambda: nn.max_pool2d(X4, 2, ceil_mode=1), S,
     r"max_pool2d max_pool2d: ceil_mode must be True or False, got 1"),
    ("max_pool2d", lambda: nn.max_pool2d(X4, 2, padding="FULL"), S,
     r"padding 'FULL' is not a padding mode; give \"SAME\" or \"VALID\", or ints"),
    ("max_pool2d", lambda: nn.max_pool2d(X4, 2, padding=(1, 2, 3)), S,
     r"padding must be an int >= 0, 2 of them \(one per spatial dimension\), 2 \(before, "
     r"after\) pairs, 4 ints \(the befores, then the afters\), \"SAME\" or \"VALID\"; got "
     r"\(1, 2, 3\)"),
    ("max_pool1d", lambda: nn.max_pool1d(X4, 2), S,
     r"max_pool1d max_pool1d: data \(X\) must be 3-d NCW \[batch, channels, width\], got "
     r"4-d"),
    ("max_pool1d", lambda: nn.max_pool1d(P(2, 3, 8, name="X"), (2, 2)), S,
     r"max_pool1d max_pool1d: kernel must be an int >= 1, got \(2, 2\)"),
    ("max_pool1d", lambda: nn.max_pool1d(P(2, 3, 8, name="X"), 3, dilation=4), S,
     r"the kernel does not fit: the 3 kernel \(dilation 4, spanning 9\) is larger than the 8 "
     r"data"),
    ("max_pool3d", lambda: nn.max_pool3d(X5, (2, 2)), S,
     r"max_pool3d max_pool3d: kernel must be an int >= 1 or 3 of them \(one per spatial "
     r"dimension\), got \(2, 2\)"),
    ("max_pool3d", lambda: nn.max_pool3d(P(2, 3, 6, 6, 6, dtype="int8", name="X"), 2), D,
     r"max_pool3d max_pool3d: data \(X\) has dtype int8; give a float tensor"),
    ("max_pool3d", lambda: nn.max_pool3d(X5, 2, layout="NHWC"), S,
     r"layout must be 'NCDHW' or 'NDHWC' \(the 3-d layouts, channels first or last\), got "
     r"'NHWC'"),
    ("max_pool3d", lambda: nn.max_pool3d(P(2, 3, 6, tc.var("h"), 6, name="X"), 2), S,
     r"max_pool3d max_pool3d: data \(X\): the height \(axis 3\) must be a constant extent, "
     r"got h"),
    ("max_pool2d", lambda: nn.max_pool2d(P(2, 3, 8, 8, dtype="int32", name="X"), 2), D,
     r"data \(X\) has dtype int32; give a float tensor \(float16, bfloat16, float32 or "
     r"float64\)"),
    ("avg_pool2d", lambda: nn.avg_pool2d(P(3, 8, 8, name="X"), 2), S,
     r"avg_pool2d avg_pool2d: data \(X\) must be 4-d"),
    ("avg_pool2d", lambda: nn.avg_pool2d(X4, 0), S, r"kernel must be an int >= 1"),
    ("avg_pool2d", lambda: nn.avg_pool2d(X4, 2, padding=-1), S, r"padding must be an int >= 0"),
    ("avg_pool2d", lambda: nn.avg_pool2d(X4, 2, ceil_mode="yes"), S,
     r"avg_pool2d avg_pool2d: ceil_mode must be True or False, got 'yes'"),
    ("avg_pool2d", lambda: nn.avg_pool2d(X4, 2, layout="nchw"), S,
     r"layout must be 'NCHW' or 'NHWC' .*, got 'nchw'"),
    ("avg_pool1d", lambda: nn.avg_pool1d(P(2, 3, 8, name="X"), 2, count_include_pad="no"), S,
     r"avg_pool1d avg_pool1d: count_include_pad must be True or False, got 'no'"),
    ("avg_pool1d", lambda: nn.avg_pool1d(P(2, 3, 8, name="X"), 2, 0), S,
     r"avg_pool1d avg_pool1d: stride must be an int >= 1, got 0"),
    ("avg_pool3d", lambda: nn.avg_pool3d(X5, 2, padding=-1), S,
     r"avg_pool3d avg_pool3d: padding must be an int >= 0, 3 of them"),
    ("avg_pool3d", lambda: nn.avg_pool3d(X4, 2), S,
     r"avg_pool3d avg_pool3d: data \(X\) must be 5-d NCDHW \[batch, channels, depth, height, "
     r"width\], got 4-d"),
    ("adaptive_max_pool1d", lambda: nn.adaptive_max_pool1d(P(2, 3, 8, name="X"), 0), S,
     r"adaptive_max_pool1d adaptive_max_pool1d: output_size must be an int >= 1, got 0"),
    ("adaptive_max_pool2d", lambda: nn.adaptive_max_pool2d(X4, (2, 2, 2)), S,
     r"output_size must be an int >= 1 or 2 of them \(None keeps a dimension's size\), got "
     r"\(2, 2, 2\)"),
    ("adaptive_max_pool3d", lambda: nn.adaptive_max_pool3d(X4, 2), S,
     r"adaptive_max_pool3d adaptive_max_pool3d: data \(X\) must be 5-d NCDHW"),
    ("adaptive_avg_pool1d", lambda: nn.adaptive_avg_pool1d(P(2, 3, 8, name="X"), 2.5), S,
     r"output_size must be an int >= 1, got 2\.5"),
    ("adaptive_avg_pool2d", lambda: nn.adaptive_avg_pool2d(X4, 2, layout="NCDHW"), S,
     r"adaptive_avg_pool2d adaptive_avg_pool2d: layout must be 'NCHW' or 'NHWC'"),
    ("adaptive_avg_pool3d", lambda: nn.adaptive_avg_pool3d(
        P(2, 3, 6, 6, 6, dtype="int32", name="X"), 2), D,
     r"data \(X\) has dtype int32; give a float tensor"),
    ("global_max_pool2d", lambda: nn.global_max_pool2d(P(2, 3, 8, name="X")), S,
     r"global_max_pool2d global_max_pool2d: data \(X\) must be 4-d NCHW"),
    ("global_avg_pool2d", lambda: nn.global_avg_pool2d(X4, layout="NWC"), S,
     r"global_avg_pool2d global_avg_pool2d: layout must be 'NCHW' or 'NHWC'"),
    # elementwise
    ("relu", lambda: nn.relu(P(4, dtype="bool", name="X")), D,
     r"relu relu: x \(X\) has dtype bool; give a float or integer tensor"),
    ("relu", lambda: nn.relu([1.0]), S, r"relu relu: x must be a tensor"),
    ("sigmoid", lambda: nn.sigmoid(P(4, dtype="int32", name="X")), D,
     r"sigmoid sigmoid: x \(X\) has dtype int32; give a float tensor"),
    ("tanh", lambda: nn.tanh(P(4, dtype="int8", name="X")), D, r"tanh tanh: x \(X\) has dtype"),
    ("gelu", lambda: nn.gelu(P(4, dtype="int32", name="X")), D, r"gelu gelu: x \(X\) has dtype"),
    ("bias_add", lambda: nn.bias_add(X4, P(4, name="b")), S,
     r"bias_add bias_add: bias \(b\) has 4 elements \(axis 0\) but x \(X\) has 3 \(axis 1\)"),
    ("bias_add", lambda: nn.bias_add(X4, P(3, name="b"), axis=4), S,
     r"axis 4 is out of range for x \(X\) \(4-d\); give an int in \[-4, 3\]"),
    ("bias_add", lambda: nn.bias_add(X4, P(3, 1, name="b")), S, r"bias \(b\) must be 1-d"),
    ("bias_add", lambda: nn.bias_add(X4, P(3, dtype="float64", name="b")), D,
     r"bias \(b\) is float64 but x \(X\) is float32"),
    ("dropout", lambda: nn.dropout(P(4, name="X"), 1.5), S,
     r"dropout dropout: p must be a probability in \[0, 1\], got 1.5"),
    ("dropout", lambda: nn.dropout(P(4, name="X"), 0.5, 2 ** 40), S,
     r"seed must be an int or an int64 tc.var, got 1099511627776"),
    ("dropout", lambda: nn.dropout(P(4, dtype="int32", name="X"), 0.5), D,
     r"dropout dropout: x \(X\) has dtype int32"),
    ("squares32", lambda: nn.ops.squares32(tc.var("i")), D,
     r"squares32 counter: the counter must be an int64 expression .*astype\('int64'\)"),
    # softmax, losses
    ("softmax", lambda: nn.softmax(P(2, 8, dtype="int32", name="X")), D,
     r"softmax softmax: x \(X\) has dtype int32; give a float tensor"),
    ("log_softmax", lambda: nn.log_softmax(P(2, 8, dtype="uint8", name="X")), D,
     r"log_softmax log_softmax: x \(X\) has dtype uint8"),
    ("softmax_fast", lambda: cpu.softmax_fast(P(2, 8, dtype="int32", name="X")), D,
     r"softmax_fast softmax: x \(X\) has dtype int32"),
    ("cross_entropy", lambda: nn.cross_entropy(P(2, 8, name="L"), P(2, 7, name="Y")), S,
     r"cross_entropy cross_entropy: labels_onehot \(Y\) has shape \(2, 7\) but logits \(L\) has "
     r"\(2, 8\); they must have one shape"),
    ("cross_entropy", lambda: nn.cross_entropy(P(8, name="L"), P(8, name="Y")), S,
     r"logits \(L\) must be 2-d \[batch, classes\], got 1-d"),
    ("mse_loss", lambda: nn.mse_loss(P(2, 8, name="P"), P(2, 7, name="T")), S,
     r"mse_loss mse_loss: target \(T\) has shape \(2, 7\) but pred \(P\) has \(2, 8\)"),
    ("mse_loss", lambda: nn.mse_loss(P(2, 8, name="P"), P(16, name="T")), S,
     r"target \(T\) must be 2-d, got 1-d"),
    ("mse_loss", lambda: nn.mse_loss(P(2, 8, name="P"), P(2, 8, dtype="float64", name="T")), D,
     r"target \(T\) is float64 but pred \(P\) is float32"),
    # normalisation
    ("batch_norm_train", lambda: nn.batch_norm_train(P(2, 3, 8, name="X"), P(3), P(3)), S,
     r"batch_norm_train batch_norm: x \(X\) must be 4-d NCHW \[batch, channels, height, "
     r"width\], got 3-d"),
    ("batch_norm_train", lambda: nn.batch_norm_train(X4, P(4, name="G"), P(3)), S,
     r"gamma \(G\) has 4 channels \(axis 0\) but x \(X\) has 3 \(axis 1\)"),
    ("batch_norm_train", lambda: nn.batch_norm_train(X4, P(3), P(3), eps=-1e-5), S,
     r"eps must be a finite number >= 0.0, got -1e-05"),
    ("batch_norm_train", lambda: nn.batch_norm_train(X4, P(3), P(3, dtype="float16", name="B")),
     D, r"beta \(B\) is float16 but x \(X\) is float32"),
    ("batch_norm", lambda: nn.batch_norm(H4, P(4, name="G"), P(4), layout="NHWC"), S,
     r"batch_norm batch_norm: gamma \(G\) has 4 channels \(axis 0\) but x \(X\) has 3 "
     r"\(axis 3\)"),
    ("batch_norm", lambda: nn.batch_norm(X4, layout="NCWH"), S,
     r"batch_norm batch_norm: layout must be 'NCHW' or 'NHWC', got 'NCWH'"),
    ("batch_norm", lambda: nn.batch_norm(X4, momentum=1.5), S,
     r"momentum must be in \[0, 1\], got 1.5"),
    ("batch_norm", lambda: nn.batch_norm(X4, training=False), S,
     r"inference \(training=False\) normalises with running_mean and running_var; give them"),
    ("batch_norm", lambda: nn.batch_norm(X4, running_mean=P(3, name="RM")), S,
     r"give both running_mean and running_var, or neither"),
    ("batch_norm", lambda: nn.batch_norm(X4, running_mean=P(3), running_var=P(5, name="RV")),
     S, r"running_var \(RV\) has 5 channels \(axis 0\) but x \(X\) has 3 \(axis 1\)"),
    ("batch_norm", lambda: nn.batch_norm(X4, running_mean=P(3, dtype="int32", name="RM"),
                                         running_var=P(3)), D,
     r"running_mean \(RM\) has dtype int32; give a float tensor"),
    ("batch_norm", lambda: nn.batch_norm(P(1, 3, 1, 1, name="X")), S,
     r"x \(X\) \(1, 3, 1, 1\) has 1 value per channel; training needs more than 1"),
    ("layer_norm", lambda: nn.layer_norm(P(2, 8, name="X"), P(4, name="G"), P(8)), S,
     r"layer_norm layer_norm: gamma \(G\) has 4 features \(axis 0\) but x \(X\) has 8 "
     r"\(axis 1\)"),
    ("layer_norm", lambda: nn.layer_norm(P(2, 8, name="X"), P(8), P(8), eps=math.nan), S,
     r"eps must be a finite number >= 0.0, got nan"),
    ("layer_norm", lambda: nn.layer_norm(P(2, 8, dtype="int32", name="X"), P(8), P(8)), D,
     r"x \(X\) has dtype int32; give a float tensor"),
    # attention
    ("scaled_dot_product_attention",
     lambda: nn.scaled_dot_product_attention(P(4, 13, 24, name="Q"), P(2, 4, 9, 24), P(2, 4, 9, 8)),
     S, r"scaled_dot_product_attention sdpa: q \(Q\) must be 4-d"),
    ("flash_attention",
     lambda: nn.flash_attention(P(2, 4, 9, 24, name="Q"), P(2, 4, 9, 24), P(2, 4, 9, 24)),
     D, r"flash_attention flash: q \(Q\) is float32; FlashAttention runs on the tensor cores"),
    ("flash_attention_backward",
     lambda: nn.flash_attention_backward(*(P(1, 2, 9, 16, dtype="float16") for _ in range(5)),
                                         P(1, 2, 9, dtype="float16", name="L")),
     D, r"flash_attention_backward flash_grad: lse \(L\) has dtype float16; give float32"),
    # layout
    ("pad", lambda: nn.pad(X4, (0, 0, 1), name="P"), S,
     r"pad P: pad_before must give one padding per dimension of data \(X, 4-d\)"),
    ("pad", lambda: nn.pad(X4, (0, 0, 1, -1)), S, r"pad pad: pad_before\[3\] must be an int >= 0"),
    ("pad", lambda: nn.pad(P(4, dtype="int32", name="I"), (1,), value=0.5), D,
     r"value must be an integer that data \(I, int32\) can hold \(in \[-2147483648, "
     r"2147483647\]\), got 0.5"),
    ("flatten", lambda: nn.flatten(P(6, name="X")), S,
     r"flatten flatten: data \(X\) must be at least 2-d \[batch, d1, d2, ...\], got 1-d"),
    ("flatten", lambda: nn.flatten(P(2, tc.var("n"), name="X")), S,
     r"data \(X\): the extent \(axis 1\) must be a constant extent, got n"),
    ("transpose", lambda: nn.transpose(M2, (0, 0)), S,
     r"transpose transpose: axes must be a permutation of 0..1 for A \(2-d\), got \(0, 0\)"),
    ("transpose", lambda: nn.transpose(M2, 7), S, r"axes must be a permutation of 0..1"),
    ("reshape", lambda: nn.reshape(M2, (5, 5)), S,
     r"reshape reshape: A has 24 elements \(shape \(4, 6\)\), the new shape \(5, 5\) has 25"),
    ("reshape", lambda: nn.reshape(M2, (0, -1)), S,
     r"at most one extent may be -1, the others >= 1; got \(0, -1\)"),
    ("reshape", lambda: nn.reshape(M2, "24"), S,
     r"the new shape must be a tuple of ints \(\(\) only for a tensor of one element\), "
     r"got '24'"),
    ("concatenate", lambda: nn.concatenate([M2, P(4, 6, 1, name="B")]), S,
     r"concatenate concatenate: tensors\[1\] \(B\) must be 2-d, got 3-d"),
    ("concatenate", lambda: nn.concatenate([M2, P(4, 6, dtype="float64", name="B")]), D,
     r"tensors\[1\] \(B\) is float64 but tensors\[0\] \(A\) is float32"),
    ("concatenate", lambda: nn.concatenate([M2, M2], axis=2), S,
     r"axis 2 is out of range for 2-d tensors"),
    ("concatenate", lambda: nn.concatenate(M2), S, r"give at least one tensor, in a list"),
    ("split", lambda: nn.split(M2, 4, axis=1), S,
     r"split split: 6 elements along axis 1 do not divide into 4 equal parts"),
    ("split", lambda: nn.split(M2, [2, 2], axis=1), S,
     r"the indices \[2, 2\] must be sorted, increasing"),
    ("split", lambda: nn.split(M2, 2, axis=-3), S, r"axis -3 is out of range for A \(2-d\)"),
    ("embedding", lambda: nn.embedding(P(10, 4, name="W"), P(3, name="ids")), D,
     r"embedding embedding: ids \(ids\) has dtype float32; give an int32 or int64 tensor"),
    ("embedding", lambda: nn.embedding(P(10, name="W"), P(3, dtype="int32", name="ids")), S,
     r"weight \(W\) must be 2-d \[num_embeddings, dim\]"),
    # quantized
    ("quantize", lambda: quant.quantize(Q8, 0.1, 0), D,
     r"quantize quantize: x \(Q\) has dtype uint8; give float32"),
    ("dequantize", lambda: quant.dequantize(X4, 0.1, 0), D,
     r"dequantize dequantize: q \(X\) has dtype float32; give a quantized tensor"),
    ("requantize", lambda: quant.requantize(X4, 0.1, 0, 0.2, 0), D,
     r"requantize requantize: q \(X\) has dtype float32"),
    ("quantized_add", lambda: quant.quantized_add(Q8, 0.1, 0, P(2, 3, 8, 7, dtype="uint8",
                                                               name="R"), 0.1, 0, 0.1, 0), S,
     r"quantized_add quantized_add: b \(R\) has shape \(2, 3, 8, 7\) but a \(Q\) has "
     r"\(2, 3, 8, 8\)"),
    ("quantized_concatenate", lambda: quant.quantized_concatenate(
        [(Q8, 0.1, 0), (P(2, 3, 8, 8, dtype="int8", name="R"), 0.1, 0)], 1, 0.1, 0), D,
     r"quantized_concatenate quantized_concatenate: inputs\[1\] \(R\) is int8 but inputs\[0\] "
     r"\(Q\) is uint8"),
    ("quantized_dense", lambda: quant.quantized_dense(QX, 0.1, 0, P(5, 7, dtype="int8", name="QD"),
                                                      0.1, 0, None, 0.1, 0), S,
     r"quantized_dense quantized_dense: w \(QD\) has 7 input features \(axis 1\) but x \(QX\) "
     r"has 6"),
    ("quantized_dense", lambda: quant.quantized_dense(M2, 0.1, 0, QD, 0.1, 0, None, 0.1, 0), D,
     r"x \(A\) has dtype float32; give a quantized tensor"),
    ("quantized_conv2d", lambda: quant.quantized_conv2d(Q8, 0.1, 0, QW, 0.1, 0, None, 0.1, 0,
                                                        stride=0), S,
     r"quantized_conv2d quantized_conv2d: stride must be an int >= 1"),
    ("quantized_conv2d", lambda: quant.quantized_conv2d(P(3, 8, 8, dtype="uint8", name="Q"),
                                                        0.1, 0, QW, 0.1, 0, None, 0.1, 0), S,
     r"x \(Q\) must be 4-d NCHW"),    # reductions
    ("sum", lambda: nn.sum(P(2, 3, 4, name="X"), axis=3), S,
     r"sum sum: axis 3 is out of range for x \(X\) \(3-d\); give an int in \[-3, 2\]"),
    ("sum", lambda: nn.sum(P(2, 3, 4, name="X"), axis=(1, -2)), S,
     r"sum sum: axis -2 is given twice in \(1, -2\) \(axis 1 of x \(X\), 3-d\); name each"),
    ("sum", lambda: nn.sum(P(2, 3, dtype="bool", name="X")), D,
     r"sum sum: x \(X\) has dtype bool; give a float or integer tensor"),
    ("sum", lambda: nn.sum(P(2, 3, name="X"), axis=1.0), S,
     r"sum sum: axis must be an int, a tuple of ints or None, got 1.0"),
    ("mean", lambda: nn.mean(P(2, 3, dtype="int32", name="X")), D,
     r"mean mean: x \(X\) has dtype int32; give a float tensor"),
    ("mean", lambda: nn.mean(P(2, 3, name="X"), keepdims="yes"), S,
     r"mean mean: keepdims must be True or False, got 'yes'"),
    ("max", lambda: nn.max(P(2, 3, name="X"), axis=(0, 2)), S,
     r"max max: axis 2 is out of range for x \(X\) \(2-d\)"),
    ("min", lambda: nn.min(P(2, 3, dtype="bool", name="X")), D,
     r"min min: x \(X\) has dtype bool"),
    ("prod", lambda: nn.prod("X"), S,
     r"prod prod: x must be a tensor \(tc.placeholder or a compute\), got 'X'"),
    ("argmax", lambda: nn.argmax(P(2, 3, dtype="bool", name="X")), D,
     r"argmax argmax: x \(X\) has dtype bool; give a float or integer tensor"),
    ("argmax", lambda: nn.argmax(P(2, 3, name="X"), axis=()), S,
     r"argmax argmax: axis must name at least one axis \(or be None: every axis\), got \(\)"),
    ("argmax", lambda: nn.argmax(P(2, 3, name="X"), dtype="float32"), D,
     r"argmax argmax: dtype must be 'int32' or 'int64' \(the index's dtype\), got 'float32'"),
    ("argmax", lambda: nn.argmax(P(2**31 + 7, dtype="uint8", name="X")), D,
     r"argmax argmax: the positions over the reduced axes reach 2147483654, past int32's "
     r"2\*\*31 - 1: give dtype='int64'"),
    ("argmin", lambda: nn.argmin(P(2, 3, name="X"), axis=-3), S,
     r"argmin argmin: axis -3 is out of range for x \(X\) \(2-d\)"),
    ("argmin", lambda: nn.argmin(P(2, 3, name="X"), select_last_index=1), S,
     r"argmin argmin: select_last_index must be True or False, got 1"),
    ("all", lambda: nn.all(P(2, 3, name="X")), D,
     r"all all: x \(X\) has dtype float32; give bool"),
    ("any", lambda: nn.any(P(2, 3, dtype="int32", name="X"), axis=(0, 0)), D,
     r"any any: x \(X\) has dtype int32; give bool"),
    # elementwise
    ("exp", lambda: nn.exp(P(2, 3, dtype="int32", name="X")), D,
     r"exp exp: x \(X\) has dtype int32; give a float tensor"),
    ("exp2", lambda: nn.exp2(P(2, dtype="int8", name="X")), D, r"exp2 exp2: x \(X\)"),
    ("expm1", lambda: nn.expm1(P(2, dtype="bool", name="X")), D, r"expm1 expm1: x \(X\)"),
    ("log", lambda: nn.log(P(2, dtype="int64", name="X")), D, r"log log: x \(X\)"),
    ("log2", lambda: nn.log2(P(2, dtype="int32", name="X")), D, r"log2 log2: x \(X\)"),
    ("log1p", lambda: nn.log1p(P(2, dtype="int32", name="X")), D, r"log1p log1p: x \(X\)"),
    ("sqrt", lambda: nn.sqrt(P(2, dtype="int32", name="X")), D, r"sqrt sqrt: x \(X\)"),
    ("rsqrt", lambda: nn.rsqrt(P(2, dtype="int32", name="X")), D, r"rsqrt rsqrt: x \(X\)"),
    ("erf", lambda: nn.erf(P(2, dtype="int32", name="X")), D, r"erf erf: x \(X\)"),
    ("sin", lambda: nn.sin(P(2, dtype="int32", name="X")), D, r"sin sin: x \(X\)"),
    ("cos", lambda: nn.cos(P(2, dtype="int32", name="X")), D, r"cos cos: x \(X\)"),
    ("tan", lambda: nn.tan(P(2, dtype="int32", name="X")), D,
     r"tan tan: x \(X\) has dtype int32; give a float tensor"),
    ("atan", lambda: nn.atan(P(2, dtype="int32", name="X")), D,
     r"atan atan: x \(X\) has dtype int32; give a float tensor"),
    ("cbrt", lambda: nn.cbrt(P(2, dtype="int64", name="X")), D,
     r"cbrt cbrt: x \(X\) has dtype int64; give a float tensor"),
    ("erfc", lambda: nn.erfc(P(2, dtype="bool", name="X")), D,
     r"erfc erfc: x \(X\) has dtype bool; give a float tensor"),
    ("reciprocal", lambda: nn.reciprocal(P(2, dtype="int32", name="X")), D,
     r"reciprocal reciprocal: x \(X\) has dtype int32; give a float tensor"),
    ("abs", lambda: nn.abs(P(2, dtype="bool", name="X")), D,
     r"abs abs: x \(X\) has dtype bool; give a float or integer tensor"),
    ("sign", lambda: nn.sign(P(2, dtype="bool", name="X")), D, r"sign sign: x \(X\)"),
    ("negative", lambda: nn.negative(P(2, dtype="bool", name="X")), D,
     r"negative negative: x \(X\)"),
    ("square", lambda: nn.square(P(2, dtype="bool", name="X")), D, r"square square: x \(X\)"),
    ("floor", lambda: nn.floor(P(2, dtype="bool", name="X")), D, r"floor floor: x \(X\)"),
    ("ceil", lambda: nn.ceil(P(2, dtype="bool", name="X")), D, r"ceil ceil: x \(X\)"),
    ("round", lambda: nn.round(P(2, dtype="bool", name="X")), D, r"round round: x \(X\)"),
    ("trunc", lambda: nn.trunc(P(2, dtype="bool", name="X")), D, r"trunc trunc: x \(X\)"),
    ("isnan", lambda: nn.isnan(P(2, dtype="bool", name="X")), D, r"isnan isnan: x \(X\)"),
    ("isinf", lambda: nn.isinf(P(2, dtype="bool", name="X")), D, r"isinf isinf: x \(X\)"),
    ("isfinite", lambda: nn.isfinite(P(2, dtype="bool", name="X")), D,
     r"isfinite isfinite: x \(X\)"),
    ("clip", lambda: nn.clip(P(2, name="X")), S,
     r"clip clip: give a_min, a_max or both \(both are None\)"),
    ("clip", lambda: nn.clip(P(2, dtype="int32", name="X"), 0.5, 3), D,
     r"clip clip: a_min must be an integer that x \(X, int32\) can hold \(in "
     r"\[-2147483648, 2147483647\]\), got 0.5"),
    ("clip", lambda: nn.clip(P(2, name="X"), float("nan"), 1.0), D,
     r"clip clip: a_min must be a number that x \(X, float32\) can hold, got nan"),
    ("cast", lambda: nn.cast(P(2, name="X"), "float8"), D,
     r"cast cast: dtype: unknown dtype 'float8'"),
    ("leaky_relu", lambda: nn.leaky_relu(P(2, name="X"), alpha=float("inf")), S,
     r"leaky_relu leaky_relu: alpha must be a finite number, got inf"),
    ("elu", lambda: nn.elu(P(2, dtype="int32", name="X")), D, r"elu elu: x \(X\)"),
    ("selu", lambda: nn.selu(P(2, dtype="int32", name="X")), D, r"selu selu: x \(X\)"),
    ("hardswish", lambda: nn.hardswish(P(2, dtype="int32", name="X")), D,
     r"hardswish hardswish: x \(X\)"),
    ("hardsigmoid", lambda: nn.hardsigmoid(P(2, dtype="int32", name="X")), D,
     r"hardsigmoid hardsigmoid: x \(X\)"),
    ("hardtanh", lambda: nn.hardtanh(P(2, name="X"), 1.0, -1.0), S,
     r"hardtanh hardtanh: min_val 1.0 is greater than max_val -1.0; give min_val <= max_val"),
    ("silu", lambda: nn.silu(P(2, dtype="int32", name="X")), D, r"silu silu: x \(X\)"),
    ("mish", lambda: nn.mish(P(2, dtype="int32", name="X")), D, r"mish mish: x \(X\)"),
    ("softplus", lambda: nn.softplus(P(2, name="X"), beta=0), S,
     r"softplus softplus: beta must be a finite number > 0, got 0"),
    ("prelu", lambda: nn.prelu(P(2, 3, 4, 4, name="X"), P(4, name="W")), S,
     r"prelu prelu: slope \(W\) has 4 elements \(axis 0\) but x \(X\) has 3 \(axis 1\)"),
    ("prelu", lambda: nn.prelu(P(2, 3, name="X"), P(3, dtype="float64", name="W"), axis=-1), D,
     r"prelu prelu: slope \(W\) is float64 but x \(X\) is float32"),
    ("prelu", lambda: nn.prelu(P(2, 3, name="X"), P(3, name="W"), axis=2), S,
     r"prelu prelu: axis 2 is out of range for x \(X\) \(2-d\)"),
    # 1-d and 3-d convolutions, transposed convolutions
    ("conv1d_ncw", lambda: nn.conv1d_ncw(P(2, 4, 4, 16, name="X"), P(6, 2, 3, name="W")), S,
     r"conv1d_ncw conv1d_ncw: data \(X\) must be 3-d NCW \[batch, channels, width\], got 4-d"),
    ("conv1d_ncw", lambda: nn.conv1d_ncw(P(2, 4, 16, name="X"), P(6, 2, 3, name="W")), S,
     r"weight \(W\) has 2 input channels \(axis 1\) but data \(X\) has 4 \(axis 1\); they "
     r"must be equal \(or give groups="),
    ("conv1d_ncw", lambda: nn.conv1d_ncw(P(2, 4, 16, name="X"), P(6, 2, 3, name="W"),
                                         groups=3), S,
     r"data \(X\) has 4 input channels \(axis 1\), which groups=3 does not divide"),
    ("conv1d_ncw", lambda: nn.conv1d_ncw(P(2, 4, 16, name="X"), P(5, 2, 3, name="W"),
                                         groups=2), S,
     r"weight \(W\) has 5 output channels \(axis 0\), which groups=2 does not divide"),
    ("conv1d_ncw", lambda: nn.conv1d_ncw(P(2, 6, 16, name="X"), P(6, 2, 3, name="W"),
                                         groups=2), S,
     r"weight \(W\) has 2 input channels \(axis 1\) but data \(X\) has 6 \(axis 1\); with "
     r"groups=2 the weight must hold 6/2 = 3 input channels per group"),
    ("conv1d_ncw", lambda: nn.conv1d_ncw(P(2, 4, 16, name="X"), P(6, 4, 3, name="W"),
                                         groups=0), S,
     r"conv1d_ncw conv1d_ncw: groups must be an int >= 1, got 0"),
    ("conv1d_ncw", lambda: nn.conv1d_ncw(P(2, 4, 16, name="X"), P(6, 4, 3, name="W"),
                                         stride=(1, 2)), S,
     r"stride must be an int >= 1, got \(1, 2\)"),
    ("conv1d_ncw", lambda: nn.conv1d_ncw(P(2, 4, 16, name="X"), P(6, 4, 3, name="W"),
                                         padding="FULL"), S,
     r"padding 'FULL' is not a padding mode; give \"SAME\" or \"VALID\", or ints"),
    ("conv1d_ncw", lambda: nn.conv1d_ncw(P(2, 4, 16, name="X"), P(6, 4, 3, name="W"),
                                         dilation=9), S,
     r"the kernel does not fit: the 3 kernel \(dilation 9, spanning 19\) is larger than the "
     r"16 data"),
    ("conv1d_ncw", lambda: nn.conv1d_ncw(P(2, 4, tc.var("w"), name="X"),
                                         P(6, 4, 3, name="W")), S,
     r"data \(X\): the width \(axis 2\) must be a constant extent, got w"),
    ("conv1d_nwc", lambda: nn.conv1d_nwc(P(2, 16, 4, name="X"),
                                         P(3, 4, 6, dtype="bool", name="W")), D,
     r"conv1d_nwc conv1d_nwc: weight \(W\) has dtype bool; give a float or integer tensor"),
    ("conv1d_nwc", lambda: nn.conv1d_nwc(P(2, 16, 4, name="X"),
                                         P(3, 4, 6, dtype="float64", name="W")), D,
     r"weight \(W\) is float64 but data \(X\) is float32; give them one dtype"),
    ("conv3d_ncdhw", lambda: nn.conv3d_ncdhw(P(1, 4, 6, 8, 8, name="X"),
                                             P(4, 4, 3, 3, name="W")), S,
     r"weight \(W\) must be 5-d OIDHW \[out, in/groups, kd, kh, kw\], got 4-d"),
    ("conv3d_ncdhw", lambda: nn.conv3d_ncdhw(P(1, 4, 6, 8, 8, name="X"),
                                             P(4, 4, 3, 3, 3, name="W"), stride=(1, 1)), S,
     r"stride must be an int >= 1 or 3 of them \(one per spatial dimension\), got \(1, 1\)"),
    ("conv3d_ncdhw", lambda: nn.conv3d_ncdhw(P(1, 4, 6, 8, 8, name="X"),
                                             P(4, 4, 7, 3, 3, name="W")), S,
     r"the kernel does not fit: the 7x3x3 kernel .*\(the output would be 0x6x6\)"),
    ("conv3d_ncdhw", lambda: nn.conv3d_ncdhw(P(1, 4, 6, 8, 8, name="X"),
                                             P(4, 4, 3, 3, 3, name="W"), out_dtype="int32"), D,
     r"out_dtype int32 cannot hold the sum of products of float32 values"),
    ("conv3d_ndhwc", lambda: nn.conv3d_ndhwc(P(1, 6, 8, 8, 4, name="X"),
                                             P(3, 3, 3, 4, 4, name="W"),
                                             padding=((1, 1), (1, 1))), S,
     r"padding must be an int >= 0, 3 of them \(one per spatial dimension\), 3 \(before, "
     r"after\) pairs, 6 ints"),
    ("conv2d_transpose_nchw", lambda: nn.conv2d_transpose_nchw(
        P(1, 4, 5, 5, name="X"), P(4, 3, 3, 3, name="W"), stride=2, output_padding=2), S,
     r"output_padding 2 \(height\) must be smaller than the stride \(2\) or the dilation "
     r"\(1\)"),
    ("conv2d_transpose_nchw", lambda: nn.conv2d_transpose_nchw(
        P(1, 4, 5, 5, name="X"), P(4, 3, 3, 3, name="W"), output_padding=(0, 1),
        dilation=(2, 1)), S,
     r"output_padding 1 \(width\) must be smaller than the stride \(1\) or the dilation "
     r"\(1\)"),
    ("conv2d_transpose_nchw", lambda: nn.conv2d_transpose_nchw(
        P(1, 4, 5, 5, name="X"), P(4, 3, 3, 3, name="W"), output_padding=-1), S,
     r"output_padding must be an int >= 0 or a pair of them \(rows, columns\), got -1"),
    ("conv2d_transpose_nchw", lambda: nn.conv2d_transpose_nchw(
        P(1, 4, 5, 5, name="X"), P(4, 3, 3, 3, name="W"), padding="SAME"), S,
     r"padding 'SAME' is a mode of the forward convolution; give ints"),
    ("conv2d_transpose_nchw", lambda: nn.conv2d_transpose_nchw(
        P(1, 4, 5, 5, name="X"), P(4, 3, 3, 3, name="W"), padding=4), S,
     r"the output would be -1x-1: padding .* removes more than the 5x5 data spreads to"),
    ("conv2d_transpose_nchw", lambda: nn.conv2d_transpose_nchw(
        P(1, 4, 5, 5, name="X"), P(5, 3, 3, 3, name="W")), S,
     r"weight \(W\) has 5 input channels \(axis 0\) but data \(X\) has 4 \(axis 1\)"),
    ("conv2d_transpose_nchw", lambda: nn.conv2d_transpose_nchw(
        P(1, 4, 5, 5, name="X"), P(4, 3, 3, 3, name="W"), groups=3), S,
     r"data \(X\) has 4 input channels \(axis 1\), which groups=3 does not divide"),
    ("conv2d_transpose_nchw", lambda: nn.conv2d_transpose_nchw(
        P(1, 4, 5, 5, name="X"), P(4, 3, 3, 3, dtype="float16", name="W")), D,
     r"weight \(W\) is float16 but data \(X\) is float32"),
    ("conv2d_transpose_nhwc", lambda: nn.conv2d_transpose_nhwc(
        P(1, 5, 5, 4, name="X"), P(4, 3, 3, 3, name="W")), S,
     r"conv2d_transpose_nhwc conv2d_transpose_nhwc: weight \(W\) has 3 input channels "
     r"\(axis 3\) but data \(X\) has 4 \(axis 3\)"),
    ("conv2d_transpose_nchw", lambda: nn.conv2d_transpose_nchw(
        P(1, 4, 16, 16, name="X"), P(4, 8, 3, 3, name="W"), stride=2**31 - 1), S,
     r"the output would be 32212254708x32212254708, an extent past 2147483647 \(its int32 "
     r"extents\): the 16x16 data spread 2147483647x2147483647 apart \(stride\); give a "
     r"smaller stride"),
    ("conv2d_nchw", lambda: nn.conv2d_nchw(P(1, 4, 16, 16, name="X"), P(8, 4, 3, 3, name="W"),
                                           stride=2**31), S,
     r"conv2d_nchw conv2d_nchw: stride must be at most 2147483647 \(an int32 of the index "
     r"arithmetic\), got 2147483648"),
    ("conv1d_ncw", lambda: nn.conv1d_ncw(P(1, 4, 16, name="X"), P(8, 4, 3, name="W"),
                                         dilation=2**40), S,
     r"conv1d_ncw conv1d_ncw: dilation must be at most 2147483647 \(an int32 of the index "
     r"arithmetic\), got 1099511627776"),
    ("max_pool2d", lambda: nn.max_pool2d(P(1, 4, 16, 16, name="X"), 2, stride=(1, 2**31)), S,
     r"max_pool2d max_pool2d: stride must be at most 2147483647 \(an int32 of the index "
     r"arithmetic\), got \(1, 2147483648\)"),
    ("conv2d_transpose_nchw", lambda: nn.conv2d_transpose_nchw(
        P(1, 4, 5, 5, name="X"), P(4, 3, 3, 3, name="W"), stride=(2, 0)), S,
     r"stride must be an int >= 1 or a pair of them \(rows, columns\), got \(2, 0\)"),
    ("conv2d_transpose_nchw", lambda: nn.conv2d_transpose_nchw(
        P(1, 4, 5, 5, name="X"), P(4, 3, 3, 3, name="W"), groups=1.5), S,
     r"groups must be an int >= 1, got 1.5"),
    ("conv2d_transpose_nchw", lambda: nn.conv2d_transpose_nchw(
        P(1, 4, 5, 5, name="X"), P(4, 3, 3, 3, name="W"), out_dtype="bool"), D,
     r"out_dtype bool cannot hold the sum of products of float32 values"),
    ("conv2d_transpose_nhwc", lambda: nn.conv2d_transpose_nhwc(
        P(1, 4, 5, name="X"), P(3, 3, 2, 4, name="W")), S,
     r"data \(X\) must be 4-d NHWC \[batch, height, width, in channels\], got 3-d"),
    # Winograd: only 3x3, stride 1, dilation 1, float32/float64, not depthwise
    ("conv2d_nchw", lambda: nn.conv2d_nchw(X4, W4, stride=2, algorithm="winograd"), S,
     r"conv2d_nchw conv2d_nchw: algorithm=\"winograd\" is for 3x3 convolutions with stride 1 "
     r"and dilation 1 .*; this one has stride \(2, 2\): use algorithm=\"direct\""),
    ("conv2d_nhwc", lambda: nn.conv2d_nhwc(H4, P(5, 5, 3, 4, name="W"), padding=2,
                                           algorithm="winograd"), S,
     r"this one has a 5x5 kernel: use algorithm=\"direct\""),
    ("conv2d_nchw", lambda: nn.conv2d_nchw(X4, W4, dilation=2, padding=2,
                                           algorithm="winograd"), S,
     r"this one has dilation \(2, 2\): use algorithm=\"direct\""),
    ("conv2d_nchw", lambda: nn.conv2d_nchw(P(2, 3, 8, 8, dtype="float16", name="X"),
                                           P(4, 3, 3, 3, dtype="float16", name="W"),
                                           algorithm="winograd"), S,
     r"this one has dtype float16 .*: use algorithm=\"direct\""),
    ("conv2d_nchw", lambda: nn.conv2d_nchw(X4, P(3, 1, 3, 3, name="W"), groups=3,
                                           algorithm="winograd"), S,
     r"this one has a depthwise grouping .*: use algorithm=\"direct\""),
    ("conv2d_nchw", lambda: nn.conv2d_nchw(X4, W4, algorithm="fft"), S,
     r"conv2d_nchw conv2d_nchw: algorithm 'fft' is not one tecomp has; give \"direct\", "
     r"\"winograd\", \"auto\""),
    ("winograd_matrices", lambda: nn.winograd_matrices(3), S,
     r"winograd_matrices F\(m x m, 3 x 3\): m=3 is not one tecomp builds; give 2, 4 or 6"),
    ("winograd_weight_transform", lambda: nn.winograd_weight_transform(W4, tile=6), S,
     r"winograd_weight_transform winograd_weight: tile 6 is not one tecomp builds; give 2 or "
     r"4"),
    ("winograd_weight_transform", lambda: nn.winograd_weight_transform(
        P(4, 3, 5, 5, name="W")), S, r"weight \(W\) is a 5x5 kernel; the Winograd transform "
     r"is for 3x3 kernels"),
    ("conv2d_winograd", lambda: nn.conv2d_winograd(
        X4, nn.winograd_weight_transform(W4, tile=2), tile=4), S,
     r"conv2d_winograd conv2d_winograd: transformed \(winograd_weight\) is 4x4 per channel "
     r"pair but tile 4 needs 6x6"),
    ("conv2d_winograd", lambda: nn.conv2d_winograd(
        H4, nn.winograd_weight_transform(W4, tile=2), "NHWC", groups=3), S,
     r"transformed \(winograd_weight\) has 1 groups but groups=3"),
    # a float that equals a tile is no tile (it sliced the transforms' rows: a TypeError)
    ("winograd_weight_transform", lambda: nn.winograd_weight_transform(W4, tile=4.0), S,
     r"winograd_weight_transform winograd_weight: tile 4.0 is not one tecomp builds; give 2 "
     r"or 4"),
    # session 23 (the nnargs probe): a bound or padding value past the dtype's range wrapped
    # (clip(int8, None, 300) clipped to 44); float bounds past the range became inf
    ("clip", lambda: nn.clip(P(4, dtype="int8", name="X"), None, 300), D,
     r"clip clip: a_max must be an integer that x \(X, int8\) can hold \(in \[-128, 127\]\), "
     r"got 300"),
    ("clip", lambda: nn.clip(P(4, dtype="uint8", name="X"), -1, 3), D,
     r"a_min must be an integer that x \(X, uint8\) can hold \(in \[0, 255\]\), got -1"),
    ("clip", lambda: nn.clip(P(4, name="X"), 1e40), D,
     r"clip clip: a_min 1e\+40 overflows x \(X, float32\) \(it would be inf\); give a finite "
     r"number in its range, or inf itself"),
    ("clip", lambda: nn.clip(P(4, dtype="float16", name="X"), None, 1e6), D,
     r"a_max 1000000.0 overflows x \(X, float16\)"),
    ("pad", lambda: nn.pad(P(4, dtype="int8", name="I"), (1,), value=300), D,
     r"pad pad: value must be an integer that data \(I, int8\) can hold \(in \[-128, 127\]\)"),
    # an int past float64's range (10**400) was an OverflowError from float()
    ("clip", lambda: nn.clip(P(4, name="X"), -10**400), D,
     r"clip clip: a_min -1000.*\.\.\. overflows x \(X, float32\) \(it would be inf\)"),
    ("leaky_relu", lambda: nn.leaky_relu(P(4, name="X"), 10**400), S,
     r"leaky_relu leaky_relu: alpha must be a finite number, got 1000"),
    ("layer_norm", lambda: nn.layer_norm(M2, P(6, name="G"), P(6, name="B"), eps=10**400), S,
     r"layer_norm layer_norm: eps must be a finite number >= 0.0, got 1000"),
    ("quantize", lambda: quant.quantize(P(4, name="X"), 10**400, 0), tc.ComputeError,
     r"quantize quantize: scale must be a finite number > 0, got 1000"),
    # an adaptive output_size of 2**30 looped over its windows in Python for minutes
    ("adaptive_avg_pool2d", lambda: nn.adaptive_avg_pool2d(X4, 2**30), S,
     r"adaptive_avg_pool2d adaptive_avg_pool2d: output_size 1073741824 over the 8 elements of "
     r"the height: the windows' bounds \(up to 1073741824 \* 9 - 1\) pass 2147483647"),
    # transpose_b="yes" was read as True, None as False
    ("batch_matmul", lambda: nn.batch_matmul(P(2, 3, 4, name="A"), P(2, 5, 4, name="B"),
                                             transpose_b="yes"), S,
     r"batch_matmul batch_matmul: transpose_b must be True or False, got 'yes'"),
    ("batch_matmul", lambda: nn.batch_matmul(P(2, 4, 3, name="A"), P(2, 4, 5, name="B"),
                                             transpose_a=1), S,
     r"transpose_a must be True or False, got 1"),
    # eps=0 in training: a constant channel is NaN (PyTorch refuses it too)
    ("batch_norm", lambda: nn.batch_norm(X4, eps=0.0), S,
     r"batch_norm batch_norm: eps must be > 0 in training, got 0.0"),
    ("batch_norm_train", lambda: nn.batch_norm_train(X4, P(3, name="G"), P(3, name="B"),
                                                     eps=0), S,
     r"batch_norm_train batch_norm: eps must be > 0 in training"),
    # a kernel_layout's weight of the wrong channels was named by its HWIO stage
    ("conv2d_nhwc", lambda: nn.conv2d_nhwc(H4, P(3, 3, 3, 4, name="W"), kernel_layout="HWOI"), S,
     r"conv2d_nhwc conv2d_nhwc: weight \(W\) has 4 input channels \(axis 3\) but data \(X\) "
     r"has 3 \(axis 3\); they must be equal \(the weight is HWOI"),
    # softmax over any axis (it had none: a Python TypeError for axis=)
    ("softmax", lambda: nn.softmax(M2, axis=2), S,
     r"softmax softmax: axis 2 is out of range for x \(A\) \(2-d\); give an int in \[-2, 1\]"),
    ("log_softmax", lambda: nn.log_softmax(M2, axis=True), S,
     r"log_softmax log_softmax: axis must be an int \(an axis of x \(A\)\), got True"),
    # a bool axis was "out of range"; a 0-d tensor's range was [0, -1]
    ("sum", lambda: nn.sum(M2, axis=True), S,
     r"sum sum: axis must be an int \(an axis of x \(A\)\), got True"),
    ("concatenate", lambda: nn.concatenate([P(name="S"), P(name="T")]), S,
     r"concatenate concatenate: the tensors are 0-d: they have no axis to join along; "
     r"reshape them to \(1,\)"),
    ("prelu", lambda: nn.prelu(P(name="S"), P(1, name="T"), axis=0), S,
     r"prelu prelu: x \(S\) must be at least 1-d"),
    ("bias_add", lambda: nn.bias_add(P(name="S"), P(1, name="T"), axis=0), S,
     r"bias_add bias_add: .*0-d"),
    # a name that is not a string was refused by tc.compute, naming no operator
    ("conv2d_nchw", lambda: nn.conv2d_nchw(X4, W4, name=5), tc.ExprError,
     r"conv2d_nchw 5: name must be a string \(the output stage's name\), got 5"),
    ("softmax", lambda: nn.softmax(M2, 1), tc.ExprError,
     r"softmax 1: name must be a string"),
    ("winograd_matrices", lambda: nn.winograd_matrices(2.0), S,
     r"winograd_matrices F\(m x m, 3 x 3\): m=2.0 is not one tecomp builds"),
    ("conv2d_winograd", lambda: nn.conv2d_winograd(
        X4, nn.winograd_weight_transform(W4, tile=2), tile=2.0), S,
     r"conv2d_winograd conv2d_winograd: tile 2.0 is not one tecomp builds"),
    ("conv2d_winograd", lambda: nn.conv2d_winograd(X4, P(5, 5, 1, 3, 4, name="U")), S,
     r"conv2d_winograd conv2d_winograd: transformed \(U\) is 5x5 per channel pair, which no "
     r"tile gives: give the output of winograd_weight_transform \(4x4 for tile 2 or 6x6 for "
     r"tile 4\)"),
]


@pytest.mark.parametrize("op,call,error,pattern", CASES,
                         ids=[f"{c[0]}-{k}" for k, c in enumerate(CASES)])
def test_bad_call_is_refused_up_front(op, call, error, pattern):
    with pytest.raises(error, match=pattern) as info:
        call()
    assert str(info.value).startswith(op + " "), str(info.value)


def _public_operators():
    names = set()
    for mod in (ops, quant):
        names.update(n for n in mod.__all__ if inspect.isfunction(getattr(mod, n)))
    names.update(n for n in dir(nn) if not n.startswith("_")
                 and inspect.isfunction(getattr(nn, n)))
    names.update(("softmax_fast", "matmul_packed", "dense_packed"))  # tecomp.strategy.cpu's computes
    return names


def test_every_public_operator_has_a_bad_call_in_the_table():
    missing = sorted(_public_operators() - {c[0] for c in CASES})
    assert not missing, f"operators without a bad call in CASES: {missing}"


def test_argmax_of_a_0d_tensor():
    """Session 25 (nnargs seed 50482): argmax/argmin over every axis of a 0-d tensor raised
    "tc.argmax: axis= is empty" from the DSL, naming neither the operator nor the fix."""
    X = tc.placeholder((), name="X")
    with pytest.raises(tc.ShapeError, match=r"argmax argmax: axis=None of x \(X\), a 0-d "
                                            r"tensor: there is no axis .*reshape"):
        tc.nn.argmax(X)
    with pytest.raises(tc.ShapeError, match=r"argmin am: axis=None of x \(X\), a 0-d"):
        tc.nn.argmin(X, name="am")
