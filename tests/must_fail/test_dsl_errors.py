"""Programs that must fail: DSL mistakes.  Each asserts the error class and its text."""
import numpy as np
import pytest

import tecomp as tc
import small_programs as sp  # tests/must_fail/small_programs.py


def test_negative_extent():
    with pytest.raises(tc.ShapeError, match=r"placeholder A: extent 1 is -3; extents must be positive"):
        tc.placeholder((4, -3), name="A")


def test_zero_extent():
    with pytest.raises(tc.ShapeError, match=r"compute C: extent 0 is 0"):
        tc.compute((0,), lambda i: i, name="C")


def test_non_int_extent():
    with pytest.raises(tc.ShapeError, match=r"extent 0 is 2.5"):
        tc.placeholder((2.5,), name="A")


def test_unknown_dtype():
    with pytest.raises(tc.DTypeError, match=r"unknown dtype 'float8'"):
        tc.placeholder((4,), dtype="float8", name="A")


def test_wrong_index_count():
    A = tc.placeholder((4, 4), name="A")
    with pytest.raises(tc.ShapeError, match=r"tensor A has 2 dimension\(s\) \(4, 4\) but was indexed with 1"):
        tc.compute((4,), lambda i: A[i], name="C")


def test_constant_index_out_of_range():
    A = tc.placeholder((4,), name="A")
    with pytest.raises(tc.ShapeError, match=r"index 4 is out of range for dimension 0 of tensor A"):
        tc.compute((4,), lambda i: A[4], name="C")


def test_fcompute_arity():
    with pytest.raises(tc.ComputeError, match=r"compute C: the shape has 2 dimension\(s\) but fcompute takes 1"):
        tc.compute((4, 4), lambda i: i, name="C")


def test_nested_reduction():
    A = tc.placeholder((4, 4), name="A")
    k = tc.reduce_axis((0, 4), name="k")
    with pytest.raises(tc.ComputeError, match=r"may only be the whole body of a compute"):
        tc.compute((4,), lambda i: tc.sum(A[i, k], axis=k) * 2, name="C")


def test_reduce_axis_outside_reduction():
    A = tc.placeholder((4, 4), name="A")
    k = tc.reduce_axis((0, 4), name="k")
    with pytest.raises(tc.ComputeError, match=r"reduce axis k is used outside a reduction"):
        tc.compute((4,), lambda i: A[i, k], name="C")


def test_reduce_over_data_axis():
    A = tc.placeholder((4, 4), name="A")
    with pytest.raises(tc.ComputeError, match=r"is not a reduce axis"):
        tc.compute((4,), lambda i: tc.sum(A[i, 0], axis=i), name="C")


def test_empty_reduce_axis():
    with pytest.raises(tc.ShapeError, match=r"reduce_axis k: the range \(3, 3\) is empty"):
        tc.reduce_axis((3, 3), name="k")


def test_bool_of_expression():
    i = tc.var("i")
    with pytest.raises(tc.ExprError, match=r"truth value of the symbolic expression `i < 3`.*tc.if_then_else"):
        if i < 3:
            pass


def test_int_true_division():
    i, j = tc.var("i"), tc.var("j")
    with pytest.raises(tc.ExprError, match=r"`/` on integer expressions .* use `//`"):
        _ = i / j


def test_mixed_float_widths():
    A = tc.placeholder((4,), dtype="float32", name="A")
    B = tc.placeholder((4,), dtype="float64", name="B")
    with pytest.raises(tc.DTypeError, match=r"float32 and float64.*astype"):
        tc.compute((4,), lambda i: A[i] + B[i], name="C")


def test_int_plus_float_expression():
    A = tc.placeholder((4,), dtype="int32", name="A")
    with pytest.raises(tc.DTypeError, match=r"cannot combine with a int32 expression"):
        tc.compute((4,), lambda i: A[i] * 2.5, name="C")


def test_float_intrinsic_on_int():
    A = tc.placeholder((4,), dtype="int32", name="A")
    with pytest.raises(tc.DTypeError, match=r"tc.exp needs a float argument, got int32"):
        tc.compute((4,), lambda i: tc.exp(A[i]), name="C")


def test_power_of_int_expression():
    A = tc.placeholder((4,), dtype="int32", name="A")
    with pytest.raises(tc.DTypeError, match=r"`\(A\[i\]\) \*\* \(2\)`: `\*\*` is tc.pow, "
                       r"which needs float operands, got int32; convert with \.astype"):
        tc.compute((4,), lambda i: A[i] ** 2, name="C")


def test_whole_tensor_arithmetic():
    A = tc.placeholder((4,), name="A")
    with pytest.raises(tc.ExprError, match=r"arithmetic on the whole tensor A is not defined"):
        _ = A + 1


# -- multi-output computes and tuple reducers ------------------------------------------


def _argmax():
    return tc.comm_reducer(
        lambda x, y: (tc.if_then_else(x[1] >= y[1], x[0], y[0]), tc.max(x[1], y[1])),
        lambda t0, t1: (tc.const(-1, t0), tc.min_value(t1)), name="argmax")


def test_empty_tuple_body():
    with pytest.raises(tc.ComputeError, match=r"compute C: fcompute returned an empty tuple"):
        tc.compute((4,), lambda i: (), name="C")


def test_nested_tuple_body():
    with pytest.raises(tc.ComputeError, match=r"compute C: value 1 of what fcompute returned is "
                                              r"itself a tuple"):
        tc.compute((4,), lambda i: (i, (i, i)), name="C")


def test_multi_output_mixing_reduction_and_elementwise():
    A = tc.placeholder((4, 5), name="A")
    k = tc.reduce_axis((0, 5), name="k")
    with pytest.raises(tc.ComputeError, match=r"compute C: value 1 is not a reduction but value "
                                              r"0 is"):
        tc.compute((4,), lambda i: (tc.sum(A[i, k], axis=k), A[i, 0]), name="C")


def test_multi_output_reductions_over_different_axes():
    A = tc.placeholder((4, 5), name="A")
    k, k2 = tc.reduce_axis((0, 5), name="k"), tc.reduce_axis((0, 5), name="k2")
    with pytest.raises(tc.ComputeError, match=r"value 1 reduces over \(k2\) but value 0 over "
                                              r"\(k\); the reductions of one compute share"):
        tc.compute((4,), lambda i: (tc.sum(A[i, k], axis=k), tc.max(A[i, k2], axis=k2)), name="C")


def test_multi_output_reductions_with_different_conditions():
    A = tc.placeholder((4, 5), name="A")
    k = tc.reduce_axis((0, 5), name="k")
    with pytest.raises(tc.ComputeError, match=r"share their where= condition"):
        tc.compute((4,), lambda i: (tc.sum(A[i, k], axis=k, where=k < 3),
                                    tc.sum(A[i, k], axis=k)), name="C")


def test_one_element_of_a_tuple_reduction():
    A = tc.placeholder((4, 5), name="A")
    k = tc.reduce_axis((0, 5), name="k")
    with pytest.raises(tc.ComputeError, match=r"compute C: the body is one element of the tuple "
                                              r"reduction argmax, which gives 2 values; return "
                                              r"all of them"):
        tc.compute((4,), lambda i: _argmax()((k, A[i, k]), axis=k)[0], name="C")


def test_tuple_reduction_with_another_value():
    A = tc.placeholder((4, 5), name="A")
    k = tc.reduce_axis((0, 5), name="k")
    with pytest.raises(tc.ComputeError, match=r"a tuple reduction \(argmax\) must be returned "
                                              r"whole and alone"):
        tc.compute((4,), lambda i: (*_argmax()((k, A[i, k]), axis=k), tc.sum(A[i, k], axis=k)),
                   name="C")


def test_builtin_reducer_on_a_tuple():
    A = tc.placeholder((4, 5), name="A")
    k = tc.reduce_axis((0, 5), name="k")
    with pytest.raises(tc.ExprError, match=r"tc.sum reduces one expression, got a tuple; to "
                                           r"reduce several in one pass"):
        tc.compute((4,), lambda i: tc.sum((A[i, k], A[i, k]), axis=k), name="C")


def test_tuple_reducer_returning_the_wrong_length():
    A = tc.placeholder((4, 5), name="A")
    k = tc.reduce_axis((0, 5), name="k")
    bad = tc.comm_reducer(lambda x, y: (x[0] + y[0],), lambda t0, t1: (0, 0), name="bad")
    with pytest.raises(tc.ExprError, match=r"reducer bad on 2 values: fcombine returned .*; it "
                                           r"must return a tuple of 2 expressions"):
        tc.compute((4,), lambda i: bad((A[i, k], A[i, k]), axis=k), name="C")


def test_tuple_reducer_changing_an_element_dtype():
    A = tc.placeholder((4, 5), name="A")
    k = tc.reduce_axis((0, 5), name="k")
    bad = tc.comm_reducer(lambda x, y: (x[0] + y[0], tc.cast(x[1] + y[1], "float64")),
                          lambda t0, t1: (0, 0), name="bad")
    with pytest.raises(tc.ExprError, match=r"reducer bad: element 1 of fcombine's result is "
                                           r"float64 but value 1 is float32"):
        tc.compute((4,), lambda i: bad((k, A[i, k]), axis=k), name="C")


def test_where_is_a_python_bool():
    A = tc.placeholder((4, 5), name="A")
    k = tc.reduce_axis((0, 5), name="k")
    n = 3
    with pytest.raises(tc.ExprError, match=r"tc.sum where= got the Python bool True, not a "
                                           r"condition.*build it from expressions"):
        tc.compute((4,), lambda i: tc.sum(A[i, k], axis=k, where=n != 1), name="C")


def test_output_index_out_of_range():
    B0, B1 = tc.compute((4,), lambda i: (i, i + 1), name="B")
    with pytest.raises(tc.ExprError, match=r"operation B has 2 output\(s\); asked for output 2"):
        B0.op.output(2)


def test_condition_not_bool():
    A = tc.placeholder((4,), name="A")
    with pytest.raises(tc.ExprError, match=r"tc.if_then_else needs bool conditions"):
        tc.compute((4,), lambda i: tc.if_then_else(A[i], 1.0, 0.0), name="C")


def test_reducer_missing_axis():
    A = tc.placeholder((4,), name="A")
    with pytest.raises(tc.ExprError, match=r"tc.sum: missing axis="):
        tc.sum(A[0])


def test_unknown_thread_tag():
    with pytest.raises(tc.ExprError, match=r"unknown thread tag 'threadIdx.w'"):
        tc.thread_axis("threadIdx.w")


# ---------------------------------------------------------------------------------------
# tecomp.nn layout operators and batch_matmul: shapes that do not fit


def test_nn_layout_shape_errors():
    import tecomp.nn as nn
    from tecomp.errors import ShapeError

    A = tc.placeholder((2, 3, 4), name="A")
    B = tc.placeholder((2, 5, 4), name="B")
    C = tc.placeholder((3, 4, 5), name="C")
    with pytest.raises(ShapeError, match=r"batch_matmul batch_matmul: the reduced extents "
                                         r"differ: A gives 4, B gives 5"):
        nn.batch_matmul(A, B)
    with pytest.raises(ShapeError, match=r"batch extents 2 \(A\) and 3 \(C\) differ; one of "
                                         r"them may be 1"):
        nn.batch_matmul(A, C)
    with pytest.raises(ShapeError, match=r"batch_matmul batch_matmul: A \(M\) must be 3-d "
                                         r"\[batch, m, k\], got 2-d \(3, 4\)"):
        nn.batch_matmul(tc.placeholder((3, 4), name="M"), B)
    with pytest.raises(ShapeError, match=r"transpose transpose: axes must be a permutation of "
                                         r"0..2 for A \(3-d\), got \(0, 0, 1\)"):
        nn.transpose(A, (0, 0, 1))
    with pytest.raises(ShapeError, match=r"reshape reshape: A has 24 elements \(shape \(2, 3, "
                                         r"4\)\), the new shape \(5, 5\) has 25"):
        nn.reshape(A, (5, 5))
    with pytest.raises(ShapeError, match=r"at most one extent may be -1"):
        nn.reshape(A, (-1, -1))
    with pytest.raises(ShapeError, match=r"cannot infer -1 in \(5, -1\) for 24 elements"):
        nn.reshape(A, (5, -1))
    with pytest.raises(ShapeError, match=r"must be a constant extent"):
        nn.reshape(tc.placeholder((tc.var("n"), 4), name="V"), (-1,))
    with pytest.raises(ShapeError, match=r"concatenate concatenate: B.shape\[1\] = 5 but "
                                         r"A.shape\[1\] = 3"):
        nn.concatenate([A, B], axis=2)
    with pytest.raises(ShapeError, match=r"axis 3 is out of range for 3-d tensors"):
        nn.concatenate([A, A], axis=3)
    with pytest.raises(ShapeError, match=r"give at least one tensor"):
        nn.concatenate([])
    with pytest.raises(ShapeError, match=r"split split: 4 elements along axis 2 do not divide "
                                         r"into 3 equal parts"):
        nn.split(A, 3, axis=2)
    with pytest.raises(ShapeError, match=r"the indices \[3, 1\] must be sorted"):
        nn.split(A, [3, 1], axis=2)


def test_quantization_parameter_errors():
    from tecomp.errors import ComputeError
    from tecomp.nn import quant

    X = tc.placeholder((8,), name="X")
    Q = tc.placeholder((8,), "uint8", name="Q")
    I = tc.placeholder((8,), "int8", name="I")
    with pytest.raises(ComputeError, match=r"quantize quantize: scale must be a finite number "
                                           r"> 0, got 0"):
        quant.quantize(X, 0, 3)
    with pytest.raises(ComputeError, match=r"zero_point must be an int in \[0, 255\] for uint8, "
                                           r"got 300"):
        quant.quantize(X, 0.1, 300)
    with pytest.raises(ComputeError, match=r"the quantized dtype must be one of uint8, int8, "
                                           r"int32, got 'int16'"):
        quant.quantize(X, 0.1, 0, "int16")
    with pytest.raises(tc.DTypeError, match=r"quantize quantize: x \(Q\) has dtype uint8; give "
                                            r"float32"):
        quant.quantize(Q, 0.1, 0)
    with pytest.raises(tc.DTypeError, match=r"dequantize dequantize: q \(X\) has dtype float32; "
                                            r"give a quantized tensor .*quantize it first"):
        quant.dequantize(X, 0.1, 0)
    with pytest.raises(tc.DTypeError, match=r"b \(I\) is int8 but a \(Q\) is uint8"):
        quant.quantized_add(Q, 0.1, 0, I, 0.1, 0, 0.1, 0)
    with pytest.raises(ComputeError, match=r"scale must be a finite number > 0, got nan"):
        quant.requantize(Q, float("nan"), 0, 0.1, 0)
    with pytest.raises(ComputeError, match=r"inputs must be a non-empty list of \(tensor, "
                                           r"scale, zero_point\) tuples"):
        quant.quantized_concatenate([Q], 0, 0.1, 0)


def test_dropout_parameter_errors():
    import tecomp.nn as nn
    from tecomp.errors import ShapeError

    X = tc.placeholder((4,), name="X")
    with pytest.raises(ShapeError, match=r"dropout dropout: p must be a probability in \[0, 1\], "
                                         r"got 1.5"):
        nn.dropout(X, 1.5)
    with pytest.raises(ShapeError, match=r"seed must be an int or an int64 tc.var, got "
                                         r"Var\('s', 'int32'\)"):
        nn.dropout(X, 0.5, tc.var("s"))


def test_requantize_out_dtype_and_dropout_p_past_float64():
    """Found by the fuzzer's nnargs family: requantize's refusal of its out_dtype named no
    argument, and dropout's p of 10**400 raised OverflowError."""
    from tecomp import nn
    from tecomp.errors import ComputeError
    from tecomp.nn import quant

    Q = tc.placeholder((8,), "uint8", name="Q")
    with pytest.raises(ComputeError, match=r"requantize requantize: out_dtype: the quantized "
                                           r"dtype must be one of uint8, int8, int32, got "
                                           r"'int16'"):
        quant.requantize(Q, 0.1, 0, 0.2, 0, out_dtype="int16")
    with pytest.raises(tc.ShapeError, match=r"dropout dropout: p must be a probability in "
                                            r"\[0, 1\], got 1000000"):
        nn.dropout(tc.placeholder((8,), name="X"), 10 ** 400)


def test_quantized_dense_errors():
    from tecomp.errors import ComputeError
    from tecomp.nn import quant

    X = tc.placeholder((4, 8), "uint8", name="X")
    W = tc.placeholder((3, 8), "int8", name="W")
    with pytest.raises(tc.ShapeError, match=r"x \(V\) must be 2-d \[batch, in\], got 1-d"):
        quant.quantized_dense(tc.placeholder((8,), "uint8", name="V"), 0.1, 0, W, 0.1, 0, None,
                              0.1, 0)
    with pytest.raises(tc.DTypeError, match=r"bias \(B\) has dtype float64; give float32 or "
                                            r"int32"):
        quant.quantized_dense(X, 0.1, 0, W, 0.1, 0, tc.placeholder((3,), "float64", name="B"),
                              0.1, 0)
    with pytest.raises(ComputeError, match=r"w_zp must be an int in \[-128, 127\] for int8"):
        quant.quantized_dense(X, 0.1, 0, W, 0.1, 200, None, 0.1, 0)
    with pytest.raises(tc.ShapeError, match=r"w \(V\) has 5 input features \(axis 1\) but x "
                                            r"\(X\) has 8 \(axis 1\); they must be equal \(w is "
                                            r"\[out, in\]"):
        quant.quantized_dense(X, 0.1, 0, tc.placeholder((3, 5), "int8", name="V"), 0.1, 0,
                              None, 0.1, 0)
    with pytest.raises(tc.ShapeError, match=r"bias \(B\) has 4 elements \(axis 0\) but w \(W\) "
                                            r"has 3 \(axis 0\); they must be equal \(one bias "
                                            r"per output\)"):
        quant.quantized_dense(X, 0.1, 0, W, 0.1, 0, tc.placeholder((4,), name="B"), 0.1, 0)


def test_quantization_scales_outside_float32():
    """A scale (or the product and ratio of scales a quantized GEMM multiplies by) that
    float32 holds as 0, a subnormal or infinity: refused (a scale of 1e-45 quantized 3e-45
    to 127, where the answer is 2; one of 1e39 quantized every value to the zero point)."""
    from tecomp.errors import ComputeError
    from tecomp.nn import quant

    X = tc.placeholder((8,), name="X")
    Q = tc.placeholder((2, 8), "uint8", name="Q")
    W = tc.placeholder((3, 8), "int8", name="W")
    rng = r"outside float32's normal range \[1.175e-38, 3.403e\+38\].*rescale"
    with pytest.raises(ComputeError, match=r"quantize quantize: scale is 1e-45, " + rng):
        quant.quantize(X, 1e-45, 0, "int8")
    with pytest.raises(ComputeError, match=r"dequantize dq: scale is 1e\+39, " + rng):
        quant.dequantize(Q, 1e39, 0, name="dq")
    with pytest.raises(ComputeError, match=r"requantize requantize: out_scale is 1e-300"):
        quant.requantize(Q, 0.1, 0, 1e-300, 0)
    with pytest.raises(ComputeError, match=r"quantized_dense quantized_dense: x_scale \* "
                                           r"w_scale \(the accumulator's scale\) is 1e-40"):
        quant.quantized_dense(Q, 1e-20, 0, W, 1e-20, 0, None, 1e-30, 0)
    with pytest.raises(ComputeError, match=r"quantized_dense quantized_dense: x_scale \* "
                                           r"w_scale / out_scale \(the requantization "
                                           r"multiplier\) is inf"):
        quant.quantized_dense(Q, 1e10, 0, W, 1e10, 0, None, 1e-20, 0)
    for sc in (1.2e-38, 3e38):      # the ends of the range still build and run
        x = np.array([0.0, 1e-30, 1e30, -1.0], np.float32)
        Y = quant.quantize(tc.placeholder((4,), name="X4"), sc, 0, "int8")
        f = tc.build(tc.create_schedule(Y.op), [Y.op.input_tensors[0], Y])
        y = np.zeros(4, np.int8)
        f(x, y)
        want = np.clip(np.rint(x.astype(np.float64) / sc), -128, 127)
        assert np.array_equal(y, want), (sc, y, want)


def test_quantized_conv2d_errors():
    from tecomp.errors import ComputeError
    from tecomp.nn import quant

    X = tc.placeholder((1, 8, 10, 10), "uint8", name="X")
    W = tc.placeholder((4, 8, 3, 3), "int8", name="W")

    def conv(x=X, w=W, bias=None, **kw):
        args = dict(x_scale=0.1, x_zp=3, w_scale=0.01, w_zp=0, out_scale=0.2, out_zp=5)
        args.update(kw)
        return quant.quantized_conv2d(x, args.pop("x_scale"), args.pop("x_zp"), w,
                                      args.pop("w_scale"), args.pop("w_zp"), bias,
                                      args.pop("out_scale"), args.pop("out_zp"), **args)

    where = r"quantized_conv2d quantized_conv2d: "
    with pytest.raises(tc.ShapeError, match=where + r"x \(V\) must be 4-d NCHW \[batch, "
                                                   r"channels, height, width\], got 3-d"):
        conv(tc.placeholder((8, 10, 10), "uint8", name="V"))
    with pytest.raises(tc.ShapeError, match=r"w \(V\) must be 4-d \[out, in // groups, kh, kw\]"
                                           r", got 2-d \(4, 72\); reshape it"):
        conv(w=tc.placeholder((4, 72), "int8", name="V"))
    with pytest.raises(tc.ShapeError, match=r"x \(X\) has 8 channels \(axis 1\) and w \(V\) is "
                                           r"\(4, 6, 3, 3\) with groups=1; w must be "
                                           r"\[out, 8 // groups, kh, kw\]"):
        conv(w=tc.placeholder((4, 6, 3, 3), "int8", name="V"))
    with pytest.raises(tc.ShapeError, match=r"with groups=3; .* groups must divide 8 channels "
                                           r"and 4 outputs"):
        conv(groups=3)
    with pytest.raises(tc.ShapeError, match=r"groups must be an int >= 1, got 0"):
        conv(groups=0)
    with pytest.raises(tc.DTypeError, match=where + r"x \(F\) has dtype float32; give a "
                                                    r"quantized tensor .*; quantize it first"):
        conv(tc.placeholder((1, 8, 10, 10), name="F"))
    with pytest.raises(tc.DTypeError, match=r"x and w are 8-bit \(uint8 activations, int8 "
                                           r"weights\), got X uint8 and V int32; requantize"):
        conv(w=tc.placeholder((4, 8, 3, 3), "int32", name="V"))
    with pytest.raises(ComputeError, match=where + r"x_scale must be a finite number > 0, "
                                                   r"got -0.1"):
        conv(x_scale=-0.1)
    with pytest.raises(ComputeError, match=r"out_scale must be a finite number > 0, got inf"):
        conv(out_scale=float("inf"))
    with pytest.raises(ComputeError, match=r"x_zp must be an int in \[0, 255\] for uint8, "
                                           r"got -1"):
        conv(x_zp=-1)
    with pytest.raises(ComputeError, match=r"w_zp must be an int in \[-128, 127\] for int8, "
                                           r"got 0.5"):
        conv(w_zp=0.5)
    with pytest.raises(ComputeError, match=r"out_zp must be an int in \[-128, 127\] for int8"):
        conv(out_zp=200, out_dtype="int8")
    with pytest.raises(ComputeError, match=r"out_dtype: the quantized dtype must be one of "
                                           r"uint8, int8, int32, got 'float32'"):
        conv(out_dtype="float32")
    with pytest.raises(tc.ShapeError, match=r"bias \(B\) must be 1-d \[out\] \(one value per "
                                            r"output, or None\), got 2-d \(4, 1\)"):
        conv(bias=tc.placeholder((4, 1), name="B"))
    with pytest.raises(tc.ShapeError, match=r"bias \(B\) has 8 elements \(axis 0\) but w \(W\) "
                                            r"has 4 \(axis 0\)"):
        conv(bias=tc.placeholder((8,), "int32", name="B"))
    with pytest.raises(tc.ShapeError, match=where + r"stride must be an int >= 1 or a pair of "
                                                   r"them \(rows, columns\), got \(1, 0\)"):
        conv(stride=(1, 0))
    with pytest.raises(tc.ShapeError, match=r"padding must be an int >= 0 or a pair"):
        conv(padding=-1)
    with pytest.raises(tc.ShapeError, match=r"the kernel does not fit: the 3x3 kernel \(dilation "
                                            r"5x5, spanning 11x11\) is larger than the 10x10 x "
                                            r"padded by 0x0 \(the output would be 0x0\)"):
        conv(dilation=5)
    with pytest.raises(tc.ShapeError, match=r"x \(S\): the extent \(axis 2\) must be a "
                                            r"constant extent, got n"):
        conv(tc.placeholder((1, 8, tc.var("n"), 10), "uint8", name="S"))


def test_embedding_errors():
    import tecomp.nn as nn
    from tecomp.errors import ShapeError

    W = tc.placeholder((10, 4), name="W")
    with pytest.raises(tc.DTypeError, match=r"embedding embedding: ids \(ids\) has dtype "
                                            r"float32; give an int32 or int64 tensor"):
        nn.embedding(W, tc.placeholder((3,), name="ids"))
    with pytest.raises(ShapeError, match=r"weight \(V\) must be 2-d \[num_embeddings, dim\], "
                                         r"got 1-d"):
        nn.embedding(tc.placeholder((10,), name="V"), tc.placeholder((3,), "int32", name="ids"))


# -- bfloat16 ------------------------------------------------------------------------


def test_bfloat16_mixed_with_float32():
    A = tc.placeholder((4,), dtype="bfloat16", name="A")
    B = tc.placeholder((4,), dtype="float32", name="B")
    with pytest.raises(tc.DTypeError, match=r"have dtypes bfloat16 and float32, which tecomp does "
                                            r"not mix implicitly"):
        tc.compute((4,), lambda i: A[i] + B[i], name="C")


def test_bfloat16_kernel_given_a_float32_array():
    A = tc.placeholder((4,), dtype="bfloat16", name="A")
    C = tc.compute((4,), lambda i: A[i] * 2, name="C")
    f = tc.build(tc.create_schedule(C.op), [A, C])
    pytest.importorskip("ml_dtypes")
    import ml_dtypes

    with pytest.raises(tc.ArgumentError, match=r"parameter A .*bfloat16"):
        f(np.zeros(4, "float32"), np.zeros(4, ml_dtypes.bfloat16))


def test_bfloat16_arrays_without_ml_dtypes(monkeypatch):
    import sys

    from tecomp.ir.dtype import numpy_dtype

    monkeypatch.setitem(sys.modules, "ml_dtypes", None)
    with pytest.raises(tc.DTypeError, match=r"bfloat16 arrays need the ml_dtypes package"):
        numpy_dtype("bfloat16")


# ---------------------------------------------------------------------------------
# the DSL: vars, consts, placeholders, compute, indexing, reductions (once tecomp.testing.bad_inputs)


def test_var_name_not_string():
    with pytest.raises(tc.ExprError, match=r"tc\.var takes the variable's name"):
        tc.var(3)


def test_var_unknown_dtype():
    with pytest.raises(tc.DTypeError, match=r"unknown dtype 'float8'"):
        tc.var("n", "float8")


def test_const_of_string():
    with pytest.raises(tc.ExprError, match=r"cannot use 'abc'"):
        tc.const("abc")


def test_const_unknown_dtype():
    with pytest.raises(tc.DTypeError, match=r"dtype"):
        tc.const(1, "complex64")


def test_const_out_of_range():
    with pytest.raises(tc.ExprError,
                       match=r"tc\.const: 1099511627776 does not fit int32 \[-2147483648, 2147483647\]"):
        tc.const(2**40, "int32")


def test_literal_out_of_range_for_the_other_operand():
    """A Python literal takes the other operand's dtype; one it cannot hold raises, as
    numpy's "Python integer 300 out of bounds for int8" (it used to wrap silently)."""
    x = tc.var("x", "int8")
    with pytest.raises(tc.DTypeError, match=r"the Python integer 300 is out of bounds for int8 "
                                            r"\[-128, 127\]: convert the other operand first, "
                                            r"e\.g\. x\.astype\('int16'\)"):
        x + 300
    u = tc.var("u", "uint8")
    with pytest.raises(tc.DTypeError, match=r"-1 is out of bounds for uint8 \[0, 255\]"):
        u * -1
    with pytest.raises(tc.DTypeError, match=r"2147483648 is out of bounds for int32 .*"
                                            r"astype\('int64'\)"):
        tc.compute((4,), lambda i: i + 2**31, name="C")
    with pytest.raises(tc.DTypeError, match=r"4294967296 is out of bounds for int32"):
        x.astype("int32") < 2.0**32


def test_extent_past_int64():
    with pytest.raises(tc.DTypeError, match=r"the Python integer 36893488147419103232 is out of "
                                            r"bounds for int64 .*\(an index or extent\): no "
                                            r"tecomp integer type holds it"):
        tc.placeholder((2**65,), name="A")


def test_const_negative_uint8():
    with pytest.raises(tc.ExprError, match=r"tc\.const: -1 does not fit uint8 \[0, 255\]"):
        tc.const(-1, "uint8")


def test_const_nan_as_int():
    with pytest.raises(tc.ExprError, match=r"tc\.const: nan is not an integer"):
        tc.const(float("nan"), "int32")


def test_const_fraction_as_int():
    with pytest.raises(tc.ExprError, match=r"tc\.const: 2\.5 is not an integer"):
        tc.const(2.5, "int64")


def test_const_string_with_dtype():
    with pytest.raises(tc.ExprError,
                       match=r"tc\.const: the value must be a Python or numpy number, got 'abc'"):
        tc.const("abc", "float32")


def test_const_of_expression():
    with pytest.raises(tc.ExprError,
                       match=r"tc\.const: the value must be a Python or numpy number"):
        tc.const(tc.var("i"), "float32")


def test_placeholder_shape_string():
    with pytest.raises(tc.ShapeError, match=r"placeholder A: shape must be a tuple"):
        tc.placeholder("abc", name="A")


def test_placeholder_shape_none():
    with pytest.raises(tc.ShapeError, match=r"placeholder A: shape must be a tuple"):
        tc.placeholder(None, name="A")


def test_placeholder_extent_none():
    with pytest.raises(tc.ShapeError, match=r"placeholder A: extent 1 is None"):
        tc.placeholder((4, None), name="A")


def test_placeholder_extent_bool():
    with pytest.raises(tc.ShapeError, match=r"placeholder A: extent 0 is True"):
        tc.placeholder((True,), name="A")


def test_placeholder_extent_zero():
    with pytest.raises(tc.ShapeError, match=r"placeholder A: extent 0 is 0"):
        tc.placeholder((0, 3), name="A")


def test_placeholder_float_var_extent():
    with pytest.raises(tc.ExprError, match=r"index or extent must be an integer expression"):
        tc.placeholder((tc.var("x", "float32"),), name="A")


def test_placeholder_name_not_string():
    with pytest.raises(tc.ExprError, match=r"tc\.placeholder: name must be a string"):
        tc.placeholder((4,), name=7)


def test_placeholder_dtype_object():
    with pytest.raises(tc.DTypeError, match=r"is not a dtype|unknown dtype"):
        tc.placeholder((4,), dtype=object(), name="A")


def test_placeholder_dtype_none():
    with pytest.raises(tc.DTypeError, match=r"dtype is None; give one of float16"):
        tc.placeholder((4,), dtype=None, name="A")


def test_placeholder_dtype_complex():
    with pytest.raises(tc.DTypeError, match=r"unknown dtype 'complex64'"):
        tc.placeholder((4,), dtype="complex64", name="A")


def test_compute_fcompute_not_callable():
    with pytest.raises(tc.ComputeError, match=r"compute C: fcompute must be a function"):
        tc.compute((4,), "i + 1", name="C")


def test_compute_name_not_string():
    with pytest.raises(tc.ExprError, match=r"tc\.compute: name must be a string, got 5"):
        tc.compute((4,), lambda i: i, name=5)


def test_compute_returns_string():
    with pytest.raises(tc.ExprError, match=r"cannot use 'x'"):
        tc.compute((4,), lambda i: "x", name="C")


def test_compute_returns_none():
    with pytest.raises(tc.ExprError, match=r"cannot use None"):
        tc.compute((4,), lambda i: None, name="C")


def test_compute_returns_tensor():
    with pytest.raises(tc.ComputeError, match=r"compute C: fcompute returned the tensor A"):
        A = sp.vec(4)
        tc.compute((4,), lambda i: A, name="C")


def test_compute_negative_extent():
    with pytest.raises(tc.ShapeError,
                       match=r"compute C: extent 1 is -2; extents must be positive"):
        tc.compute((4, -2), lambda i, j: i + j, name="C")


def test_compute_lambda_with_default_arg():
    with pytest.raises(tc.ComputeError,
                       match=r"compute C: the shape has 1 dimension\(s\) but fcompute takes 2"):
        tc.compute((4,), lambda i, j=0: i, name="C")


def test_index_float_literal():
    with pytest.raises(tc.DTypeError,
                       match=r"the float literal 1.5 cannot combine with a int32 expression"):
        A = sp.vec(4)
        tc.compute((4,), lambda i: A[1.5], name="C")


def test_index_string():
    with pytest.raises(tc.ExprError, match=r"cannot use 'x'"):
        A = sp.vec(4)
        tc.compute((4,), lambda i: A["x"], name="C")


def test_index_slice():
    with pytest.raises(tc.ExprError, match=r"tensor A: slices are not supported"):
        A = sp.vec(4)
        tc.compute((4,), lambda i: A[0:2], name="C")


def test_index_negative_constant():
    with pytest.raises(tc.ShapeError,
                       match=r"index -1 is out of range for dimension 0 of tensor A"):
        A = sp.vec(4)
        tc.compute((4,), lambda i: A[-1], name="C")


def test_index_bool_expression():
    with pytest.raises(tc.ExprError,
                       match=r"index or extent must be an integer expression, got bool"):
        A = sp.vec(4)
        tc.compute((4,), lambda i: A[i < 2], name="C")


def test_index_float_expression():
    with pytest.raises(tc.ExprError,
                       match=r"index or extent must be an integer expression, got float32"):
        A = sp.vec(4)
        X = sp.vec(4, "X")
        tc.compute((4,), lambda i: A[X[i]], name="C")


def test_index_too_many():
    with pytest.raises(tc.ShapeError,
                       match=r"tensor A has 1 dimension\(s\) \(8\) but was indexed with 2"):
        A = sp.vec(8)
        tc.compute((8,), lambda i: A[i, i], name="C")


def test_index_chain_left_partial():
    with pytest.raises(tc.ShapeError, match=(
            r"tensor M has 2 dimension\(s\) \(4, 4\) but was indexed with 1 "
            r"index\(es\); index every dimension, e.g. M\[i, j\] or M\[i\]\[j\]")):
        M = tc.placeholder((4, 4), name="M")
        tc.compute((4,), lambda i: M[i] * 2, name="C")


def test_index_chain_too_long():
    with pytest.raises(tc.ShapeError,
                       match=r"M\[i, 0\] indexes all 2 dimension\(s\) of tensor M already"):
        M = tc.placeholder((4, 4), name="M")
        tc.compute((4,), lambda i: M[i][0][1], name="C")


def test_split_disable_predication_not_dividing():
    with pytest.raises(tc.ScheduleError, match=(
            r"split of axis i of stage C with disable_predication=True: the inner "
            r"extent 3 does not divide the axis' extent 8")):
        A = sp.vec(8)
        C = tc.compute((8,), lambda i: A[i] + 1, name="C")
        s = tc.create_schedule(C.op)
        s[C].split(C.op.axis[0], factor=3, disable_predication=True)
        tc.lower(s, [A, C])


def test_split_disable_predication_not_bool():
    with pytest.raises(tc.ScheduleError,
                       match=r"disable_predication must be True or False, got 'yes'"):
        A = sp.vec(8)
        C = tc.compute((8,), lambda i: A[i] + 1, name="C")
        tc.create_schedule(C.op)[C].split(C.op.axis[0], factor=2, disable_predication="yes")


def test_index_variable_of_another_compute():
    with pytest.raises(tc.ComputeError, match=r"index variable i belongs to another compute"):
        A = sp.vec(8)
        B = tc.compute((8,), lambda i: A[i], name="B")
        iv = B.op.axis[0].var
        tc.compute((8,), lambda j: A[iv], name="C")


def test_iterate_tensor():
    with pytest.raises(tc.ExprError, match=r"tensor A cannot be iterated"):
        list(sp.vec(4))


def test_op_output_index():
    with pytest.raises(tc.ExprError, match=r"operation A has 1 output\(s\); asked for output 1"):
        sp.vec(4).op.output(1)


def test_negate_tensor():
    with pytest.raises(tc.ExprError, match=r"arithmetic on the whole tensor A"):
        _ = -sp.vec(4)


def test_python_if_on_compare_in_compute():
    with pytest.raises(tc.ExprError, match=r"truth value of the symbolic expression"):
        A = sp.vec(4)
        tc.compute((4,), lambda i: A[i] if i > 1 else 0.0, name="C")


def test_python_and_on_conditions():
    with pytest.raises(tc.ExprError, match=r"truth value of the symbolic expression"):
        i = tc.var("i")
        _ = (i > 1) and (i < 3)


def test_python_chained_comparison():
    with pytest.raises(tc.ExprError, match=r"truth value of the symbolic expression"):
        i = tc.var("i")
        _ = 0 < i < 3


def test_python_min_builtin():
    with pytest.raises(tc.ExprError, match=r"truth value of the symbolic expression"):
        import builtins

        i = tc.var("i")
        builtins.min(i, 3)


def test_negate_bool():
    with pytest.raises(tc.ExprError, match=r"arithmetic `-` on a bool expression"):
        i = tc.var("i")
        _ = -(i < 3)


def test_add_bools():
    with pytest.raises(tc.ExprError, match=r"addition of bool expressions"):
        i = tc.var("i")
        _ = (i < 3) + (i > 1)


def test_invert_int():
    with pytest.raises(tc.ExprError, match=r"~ needs a bool expression"):
        _ = ~tc.var("i")


def test_if_then_else_mismatched_branches():
    with pytest.raises(tc.DTypeError,
                       match=r"operands of tc\.if_then_else `A\[i\]` and `B\[i\]` have dtypes float32 and int32"):
        A = sp.vec(4)
        B = sp.vec(4, "B", "int32")
        tc.compute((4,), lambda i: tc.if_then_else(i < 2, A[i], B[i]), name="C")


def test_all_of_int():
    with pytest.raises(tc.ExprError, match=r"tc\.all needs bool conditions, got int32"):
        tc.all(tc.var("i"), tc.var("j") < 2)


def test_truncdiv_float():
    with pytest.raises(tc.ExprError, match=r"truncdiv needs integer operands, got float32"):
        A = sp.vec(4)
        tc.compute((4,), lambda i: tc.truncdiv(A[i], A[i]), name="C")


def test_floordiv_float_intrinsic():
    with pytest.raises(tc.ExprError, match=r"floordiv needs integer operands"):
        A = sp.vec(4)
        tc.compute((4,), lambda i: tc.floordiv(A[i], 2.0), name="C")


def test_astype_unknown():
    with pytest.raises(tc.DTypeError, match=r"unknown dtype 'int3'"):
        _ = tc.var("i").astype("int3")


def test_intrinsic_of_object():
    with pytest.raises(tc.ExprError, match=r"cannot use <object"):
        tc.exp(object())


def test_intrinsic_of_tensor():
    with pytest.raises(tc.ExprError, match=r"cannot use Tensor\(A"):
        tc.exp(sp.vec(4))


def test_intrinsic_sqrt_int():
    with pytest.raises(tc.DTypeError, match=r"tc\.sqrt needs a float argument, got int32"):
        tc.sqrt(tc.var("i"))


def test_pow_mixed_widths():
    with pytest.raises(tc.DTypeError, match=r"float32 and float64"):
        A = sp.vec(4)
        B = sp.vec(4, "B", "float64")
        tc.compute((4,), lambda i: tc.pow(A[i], B[i]), name="C")


def test_abs_bool():
    with pytest.raises(tc.ExprError, match=r"tc\.abs of a bool"):
        tc.abs(tc.var("i") < 2)


def test_cast_list():
    with pytest.raises(tc.ExprError, match=r"cannot use \[1, 2\]"):
        tc.cast([1, 2], "int32")


def test_reduce_axis_name_not_string():
    with pytest.raises(tc.ExprError, match=r"tc\.reduce_axis: name must be a string, got 3"):
        tc.reduce_axis((0, 4), name=3)


def test_reduce_axis_string():
    with pytest.raises(tc.ShapeError, match=r"reduce_axis k: dom must be \(lo, hi\) or an extent"):
        tc.reduce_axis("abc", name="k")


def test_reduce_axis_one_tuple():
    with pytest.raises(tc.ShapeError, match=r"reduce_axis k: dom must be \(lo, hi\) or an extent"):
        tc.reduce_axis((4,), name="k")


def test_reduce_axis_reversed():
    with pytest.raises(tc.ShapeError, match=r"reduce_axis k: the range \(5, 2\) is empty"):
        tc.reduce_axis((5, 2), name="k")


def test_reduce_axis_zero_extent():
    with pytest.raises(tc.ShapeError, match=r"reduce_axis k: the range 0 is empty"):
        tc.reduce_axis(0, name="k")


def test_reduce_axis_float_bound():
    with pytest.raises(tc.DTypeError, match=r"the float literal 2.5 cannot combine"):
        tc.reduce_axis((0, 2.5), name="k")


def test_reduce_where_not_bool():
    with pytest.raises(tc.ExprError, match=r"tc\.sum where= needs bool conditions"):
        A = sp.vec(4)
        k = tc.reduce_axis(4, name="k")
        tc.compute((1,), lambda i: tc.sum(A[k], axis=k, where=1.0), name="C")


def test_reduce_repeated_axis():
    with pytest.raises(tc.ComputeError, match=r"tc\.sum: axis k, k repeats an axis"):
        A = sp.vec(4)
        k = tc.reduce_axis(4, name="k")
        tc.compute((1,), lambda i: tc.sum(A[k], axis=[k, k]), name="C")


def test_reduce_empty_axis_list():
    with pytest.raises(tc.ExprError, match=r"tc\.sum: axis= is empty"):
        A = sp.vec(4)
        tc.compute((1,), lambda i: tc.sum(A[i], axis=[]), name="C")


def test_reduce_axis_given_as_string():
    with pytest.raises(tc.ComputeError, match=r"tc\.sum: axis 'k' is not a reduce axis"):
        A = sp.vec(4)
        tc.compute((1,), lambda i: tc.sum(A[i], axis="k"), name="C")


def test_reduce_unknown_keyword():
    with pytest.raises(tc.ExprError, match=r"tc\.sum: unexpected keyword\(s\) axes"):
        A = sp.vec(4)
        k = tc.reduce_axis(4, name="k")
        tc.compute((1,), lambda i: tc.sum(A[k], axes=k), name="C")


def test_reduce_of_reduce():
    with pytest.raises(tc.ComputeError, match=r"nested reductions are not allowed"):
        A = tc.placeholder((4, 4), name="A")
        k = tc.reduce_axis(4, name="k")
        r = tc.reduce_axis(4, name="r")
        tc.compute((1,), lambda i: tc.sum(tc.max(A[k, r], axis=r), axis=k), name="C")


def test_reduce_axis_in_where_of_other_reduction():
    with pytest.raises(tc.ComputeError,
                       match=r"compute C: reduce axis k is used outside a reduction over it"):
        A = sp.vec(4)
        k = tc.reduce_axis(4, name="k")
        r = tc.reduce_axis(4, name="r")
        tc.compute((1,), lambda i: tc.sum(A[r], axis=r, where=k < 2), name="C")


def test_comm_reducer_not_callable():
    with pytest.raises(tc.ExprError,
                       match=r"tc\.comm_reducer\(fcombine, fidentity, name\): both must be callables"):
        tc.comm_reducer(1, 2)


def test_comm_reducer_combine_returns_string():
    with pytest.raises(tc.ExprError, match=r"cannot use 'bad'"):
        red = tc.comm_reducer(lambda x, y: "bad", lambda t: tc.const(0, t), name="bad")
        A = sp.vec(4)
        k = tc.reduce_axis(4, name="k")
        tc.compute((1,), lambda i: red(A[k], axis=k), name="C")


def test_thread_axis_int():
    with pytest.raises(tc.ExprError, match=r"unknown thread tag"):
        tc.thread_axis(5)


def test_sign_isnan_of_a_bool_expression():
    B = tc.placeholder((4,), dtype="bool", name="B")
    with pytest.raises(tc.DTypeError, match=r"tc.sign needs a float or integer argument, got "
                                            r"bool expression `B\[i\]`"):
        tc.compute((4,), lambda i: tc.sign(B[i]), name="S")
    with pytest.raises(tc.DTypeError, match=r"tc.isnan needs a float or integer argument"):
        tc.compute((4,), lambda i: tc.isnan(B[i]), name="S")


def test_tan_trunc_of_an_integer_expression():
    A = tc.placeholder((4,), dtype="int32", name="A")
    with pytest.raises(tc.DTypeError, match=r"tc.tan needs a float argument, got int32 "
                                            r"expression `A\[i\]`; convert it"):
        tc.compute((4,), lambda i: tc.tan(A[i]), name="T")
    with pytest.raises(tc.DTypeError, match=r"tc.trunc needs a float argument, got int32"):
        tc.compute((4,), lambda i: tc.trunc(A[i]), name="T")
