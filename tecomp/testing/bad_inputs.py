"""The catalogue of bad inputs: every way a user can hand tecomp something wrong.

Each entry builds a small program and makes one mistake; it must raise a
:class:`~tecomp.errors.TecompError` subclass (the class given, or any) whose message
matches ``match`` (it names the object at fault).  Anything else -- no error, a raw
``TypeError``/``AttributeError``/``KeyError``/..., or a crash of the process -- is a bug.

    python -m tecomp.testing.bad_inputs          # run them all, print a summary, exit 1 on failure
    python -m tecomp.testing.bad_inputs -v       # one line per entry

``tests/test_bad_inputs.py`` runs every entry in-process (one test each) and the whole
catalogue in a subprocess (the process must never crash).  Entries marked ``known_bug``
document a bug that is not fixed yet; the runner reports them separately.
"""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from typing import Callable, List

import numpy as np


@dataclass
class Entry:
    name: str
    fn: Callable[[], object]
    error: str = "TecompError"  # the class name the error must be an instance of
    match: str = ""
    known_bug: str = ""  # non-empty: a known, reported bug (the entry is expected to fail)


CATALOGUE: List[Entry] = []


def bad(error: str = "TecompError", match: str = "", known_bug: str = ""):
    def deco(fn):
        CATALOGUE.append(Entry(fn.__name__, fn, error, match, known_bug))
        return fn

    return deco


def _tc():
    import tecomp as tc

    return tc


def _vec(n=8, name="A", dtype="float32"):
    tc = _tc()
    return tc.placeholder((n,), dtype=dtype, name=name)


def _chain():
    tc = _tc()
    A = tc.placeholder((16, 8), name="A")
    B = tc.compute((16, 8), lambda i, j: A[i, j] + 1, name="B")
    C = tc.compute((16, 8), lambda i, j: B[i, j] * 2, name="C")
    return A, B, C


def _mm():
    tc = _tc()
    A = tc.placeholder((8, 6), name="A")
    B = tc.placeholder((6, 4), name="B")
    k = tc.reduce_axis((0, 6), name="k")
    C = tc.compute((8, 4), lambda i, j: tc.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C, k


def _add_kernel(n=8):
    tc = _tc()
    A = _vec(n, "A")
    B = tc.compute((n,), lambda i: A[i] * 2, name="B")
    s = tc.create_schedule(B.op)
    return tc.build(s, [A, B]), A, B


# ---------------------------------------------------------------------------------
# DSL: var / const / placeholder


@bad("ExprError", r"tc\.var takes the variable's name")
def var_name_not_string():
    _tc().var(3)


@bad("DTypeError", r"unknown dtype 'float8'")
def var_unknown_dtype():
    _tc().var("n", "float8")


@bad("ExprError", r"cannot use 'abc'")
def const_of_string():
    _tc().const("abc")


@bad("DTypeError", r"dtype")
def const_unknown_dtype():
    _tc().const(1, "complex64")


@bad("ExprError", r"tc\.const: 1099511627776 does not fit int32 \[-2147483648, 2147483647\]")
def const_out_of_range():
    _tc().const(2**40, "int32")


@bad("ExprError", r"tc\.const: -1 does not fit uint8 \[0, 255\]")
def const_negative_uint8():
    _tc().const(-1, "uint8")


@bad("ExprError", r"tc\.const: nan is not an integer")
def const_nan_as_int():
    _tc().const(float("nan"), "int32")


@bad("ExprError", r"tc\.const: 2\.5 is not an integer")
def const_fraction_as_int():
    _tc().const(2.5, "int64")


@bad("ExprError", r"tc\.const: the value must be a Python or numpy number, got 'abc'")
def const_string_with_dtype():
    _tc().const("abc", "float32")


@bad("ExprError", r"tc\.const: the value must be a Python or numpy number")
def const_of_expression():
    tc = _tc()
    tc.const(tc.var("i"), "float32")


@bad("ShapeError", r"placeholder A: shape must be a tuple")
def placeholder_shape_string():
    _tc().placeholder("abc", name="A")


@bad("ShapeError", r"placeholder A: shape must be a tuple")
def placeholder_shape_none():
    _tc().placeholder(None, name="A")


@bad("ShapeError", r"placeholder A: extent 1 is None")
def placeholder_extent_none():
    _tc().placeholder((4, None), name="A")


@bad("ShapeError", r"placeholder A: extent 0 is True")
def placeholder_extent_bool():
    _tc().placeholder((True,), name="A")


@bad("ShapeError", r"placeholder A: extent 0 is 0")
def placeholder_extent_zero():
    _tc().placeholder((0, 3), name="A")


@bad("ExprError", r"index or extent must be an integer expression")
def placeholder_float_var_extent():
    tc = _tc()
    tc.placeholder((tc.var("x", "float32"),), name="A")


@bad("ExprError", r"tc\.placeholder: name must be a string")
def placeholder_name_not_string():
    _tc().placeholder((4,), name=7)


@bad("DTypeError", r"is not a dtype|unknown dtype")
def placeholder_dtype_object():
    _tc().placeholder((4,), dtype=object(), name="A")


@bad("DTypeError", r"dtype is None; give one of float16")
def placeholder_dtype_none():
    _tc().placeholder((4,), dtype=None, name="A")


@bad("DTypeError", r"unknown dtype 'complex64'")
def placeholder_dtype_complex():
    _tc().placeholder((4,), dtype="complex64", name="A")


# ---------------------------------------------------------------------------------
# DSL: compute and indexing


@bad("ComputeError", r"compute C: fcompute must be a function")
def compute_fcompute_not_callable():
    _tc().compute((4,), "i + 1", name="C")


@bad("ExprError", r"tc\.compute: name must be a string, got 5")
def compute_name_not_string():
    _tc().compute((4,), lambda i: i, name=5)


@bad("ExprError", r"cannot use 'x'")
def compute_returns_string():
    _tc().compute((4,), lambda i: "x", name="C")


@bad("ExprError", r"cannot use None")
def compute_returns_none():
    _tc().compute((4,), lambda i: None, name="C")


@bad("ComputeError", r"compute C: fcompute returned the tensor A")
def compute_returns_tensor():
    A = _vec(4)
    _tc().compute((4,), lambda i: A, name="C")


@bad("ShapeError", r"compute C: extent 1 is -2; extents must be positive")
def compute_negative_extent():
    _tc().compute((4, -2), lambda i, j: i + j, name="C")


@bad("ComputeError", r"compute C: the shape has 1 dimension\(s\) but fcompute takes 2")
def compute_lambda_with_default_arg():
    _tc().compute((4,), lambda i, j=0: i, name="C")


@bad("DTypeError", r"the float literal 1.5 cannot combine with a int32 expression")
def index_float_literal():
    A = _vec(4)
    _tc().compute((4,), lambda i: A[1.5], name="C")


@bad("ExprError", r"cannot use 'x'")
def index_string():
    A = _vec(4)
    _tc().compute((4,), lambda i: A["x"], name="C")


@bad("ExprError", r"tensor A: slices are not supported")
def index_slice():
    A = _vec(4)
    _tc().compute((4,), lambda i: A[0:2], name="C")


@bad("ShapeError", r"index -1 is out of range for dimension 0 of tensor A")
def index_negative_constant():
    A = _vec(4)
    _tc().compute((4,), lambda i: A[-1], name="C")


@bad("ExprError", r"index or extent must be an integer expression, got bool")
def index_bool_expression():
    A = _vec(4)
    _tc().compute((4,), lambda i: A[i < 2], name="C")


@bad("ExprError", r"index or extent must be an integer expression, got float32")
def index_float_expression():
    A = _vec(4)
    X = _vec(4, "X")
    _tc().compute((4,), lambda i: A[X[i]], name="C")


@bad("ShapeError", r"tensor A has 1 dimension\(s\) \(8\) but was indexed with 2")
def index_too_many():
    A = _vec(8)
    _tc().compute((8,), lambda i: A[i, i], name="C")


@bad("ShapeError", r"tensor M has 2 dimension\(s\) \(4, 4\) but was indexed with 1 "
                   r"index\(es\); index every dimension, e.g. M\[i, j\] or M\[i\]\[j\]")
def index_chain_left_partial():
    tc = _tc()
    M = tc.placeholder((4, 4), name="M")
    tc.compute((4,), lambda i: M[i] * 2, name="C")


@bad("ShapeError", r"M\[i, 0\] indexes all 2 dimension\(s\) of tensor M already")
def index_chain_too_long():
    tc = _tc()
    M = tc.placeholder((4, 4), name="M")
    tc.compute((4,), lambda i: M[i][0][1], name="C")


@bad("ScheduleError", r"split of axis i of stage C with disable_predication=True: the inner "
                      r"extent 3 does not divide the axis' extent 8")
def split_disable_predication_not_dividing():
    tc = _tc()
    A = _vec(8)
    C = tc.compute((8,), lambda i: A[i] + 1, name="C")
    s = tc.create_schedule(C.op)
    s[C].split(C.op.axis[0], factor=3, disable_predication=True)
    tc.lower(s, [A, C])


@bad("ScheduleError", r"disable_predication must be True or False, got 'yes'")
def split_disable_predication_not_bool():
    tc = _tc()
    A = _vec(8)
    C = tc.compute((8,), lambda i: A[i] + 1, name="C")
    tc.create_schedule(C.op)[C].split(C.op.axis[0], factor=2, disable_predication="yes")


@bad("ComputeError", r"index variable i belongs to another compute")
def index_variable_of_another_compute():
    tc = _tc()
    A = _vec(8)
    B = tc.compute((8,), lambda i: A[i], name="B")
    iv = B.op.axis[0].var
    tc.compute((8,), lambda j: A[iv], name="C")


@bad("ExprError", r"tensor A cannot be iterated")
def iterate_tensor():
    list(_vec(4))


@bad("ExprError", r"operation A has 1 output\(s\); asked for output 1")
def op_output_index():
    _vec(4).op.output(1)


@bad("ExprError", r"arithmetic on the whole tensor A")
def negate_tensor():
    _ = -_vec(4)


@bad("ExprError", r"truth value of the symbolic expression")
def python_if_on_compare_in_compute():
    A = _vec(4)
    _tc().compute((4,), lambda i: A[i] if i > 1 else 0.0, name="C")


@bad("ExprError", r"truth value of the symbolic expression")
def python_and_on_conditions():
    i = _tc().var("i")
    _ = (i > 1) and (i < 3)


@bad("ExprError", r"truth value of the symbolic expression")
def python_chained_comparison():
    i = _tc().var("i")
    _ = 0 < i < 3


@bad("ExprError", r"truth value of the symbolic expression")
def python_min_builtin():
    import builtins

    i = _tc().var("i")
    builtins.min(i, 3)


@bad("ExprError", r"arithmetic `-` on a bool expression")
def negate_bool():
    i = _tc().var("i")
    _ = -(i < 3)


@bad("ExprError", r"addition of bool expressions")
def add_bools():
    i = _tc().var("i")
    _ = (i < 3) + (i > 1)


@bad("ExprError", r"~ needs a bool expression")
def invert_int():
    _ = ~_tc().var("i")


@bad("DTypeError", r"operands of tc\.if_then_else `A\[i\]` and `B\[i\]` have dtypes float32 and int32")
def if_then_else_mismatched_branches():
    tc = _tc()
    A = _vec(4)
    B = _vec(4, "B", "int32")
    tc.compute((4,), lambda i: tc.if_then_else(i < 2, A[i], B[i]), name="C")


@bad("ExprError", r"tc\.all needs bool conditions, got int32")
def all_of_int():
    tc = _tc()
    tc.all(tc.var("i"), tc.var("j") < 2)


@bad("ExprError", r"truncdiv needs integer operands, got float32")
def truncdiv_float():
    A = _vec(4)
    _tc().compute((4,), lambda i: _tc().truncdiv(A[i], A[i]), name="C")


@bad("ExprError", r"floordiv needs integer operands")
def floordiv_float_intrinsic():
    A = _vec(4)
    _tc().compute((4,), lambda i: _tc().floordiv(A[i], 2.0), name="C")


@bad("DTypeError", r"unknown dtype 'int3'")
def astype_unknown():
    _ = _tc().var("i").astype("int3")


@bad("ExprError", r"cannot use <object")
def intrinsic_of_object():
    _tc().exp(object())


@bad("ExprError", r"cannot use Tensor\(A")
def intrinsic_of_tensor():
    _tc().exp(_vec(4))


@bad("DTypeError", r"tc\.sqrt needs a float argument, got int32")
def intrinsic_sqrt_int():
    _tc().sqrt(_tc().var("i"))


@bad("DTypeError", r"float32 and float64")
def pow_mixed_widths():
    tc = _tc()
    A = _vec(4)
    B = _vec(4, "B", "float64")
    tc.compute((4,), lambda i: tc.pow(A[i], B[i]), name="C")


@bad("ExprError", r"tc\.abs of a bool")
def abs_bool():
    tc = _tc()
    tc.abs(tc.var("i") < 2)


@bad("ExprError", r"cannot use \[1, 2\]")
def cast_list():
    _tc().cast([1, 2], "int32")


# ---------------------------------------------------------------------------------
# reductions


@bad("ExprError", r"tc\.reduce_axis: name must be a string, got 3")
def reduce_axis_name_not_string():
    _tc().reduce_axis((0, 4), name=3)


@bad("ShapeError", r"reduce_axis k: dom must be \(lo, hi\) or an extent")
def reduce_axis_string():
    _tc().reduce_axis("abc", name="k")


@bad("ShapeError", r"reduce_axis k: dom must be \(lo, hi\) or an extent")
def reduce_axis_one_tuple():
    _tc().reduce_axis((4,), name="k")


@bad("ShapeError", r"reduce_axis k: the range \(5, 2\) is empty")
def reduce_axis_reversed():
    _tc().reduce_axis((5, 2), name="k")


@bad("ShapeError", r"reduce_axis k: the range 0 is empty")
def reduce_axis_zero_extent():
    _tc().reduce_axis(0, name="k")


@bad("DTypeError", r"the float literal 2.5 cannot combine")
def reduce_axis_float_bound():
    _tc().reduce_axis((0, 2.5), name="k")


@bad("ExprError", r"tc\.sum where= needs bool conditions")
def reduce_where_not_bool():
    tc = _tc()
    A = _vec(4)
    k = tc.reduce_axis(4, name="k")
    tc.compute((1,), lambda i: tc.sum(A[k], axis=k, where=1.0), name="C")


@bad("ComputeError", r"tc\.sum: axis k, k repeats an axis")
def reduce_repeated_axis():
    tc = _tc()
    A = _vec(4)
    k = tc.reduce_axis(4, name="k")
    tc.compute((1,), lambda i: tc.sum(A[k], axis=[k, k]), name="C")


@bad("ExprError", r"tc\.sum: axis= is empty")
def reduce_empty_axis_list():
    tc = _tc()
    A = _vec(4)
    tc.compute((1,), lambda i: tc.sum(A[i], axis=[]), name="C")


@bad("ComputeError", r"tc\.sum: axis 'k' is not a reduce axis")
def reduce_axis_given_as_string():
    tc = _tc()
    A = _vec(4)
    tc.compute((1,), lambda i: tc.sum(A[i], axis="k"), name="C")


@bad("ExprError", r"tc\.sum: unexpected keyword\(s\) axes")
def reduce_unknown_keyword():
    tc = _tc()
    A = _vec(4)
    k = tc.reduce_axis(4, name="k")
    tc.compute((1,), lambda i: tc.sum(A[k], axes=k), name="C")


@bad("ComputeError", r"nested reductions are not allowed")
def reduce_of_reduce():
    tc = _tc()
    A = tc.placeholder((4, 4), name="A")
    k = tc.reduce_axis(4, name="k")
    r = tc.reduce_axis(4, name="r")
    tc.compute((1,), lambda i: tc.sum(tc.max(A[k, r], axis=r), axis=k), name="C")


@bad("ComputeError", r"compute C: reduce axis k is used outside a reduction over it")
def reduce_axis_in_where_of_other_reduction():
    tc = _tc()
    A = _vec(4)
    k = tc.reduce_axis(4, name="k")
    r = tc.reduce_axis(4, name="r")
    tc.compute((1,), lambda i: tc.sum(A[r], axis=r, where=k < 2), name="C")


@bad("ExprError", r"tc\.comm_reducer\(fcombine, fidentity, name\): both must be callables")
def comm_reducer_not_callable():
    _tc().comm_reducer(1, 2)


@bad("ExprError", r"cannot use 'bad'")
def comm_reducer_combine_returns_string():
    tc = _tc()
    red = tc.comm_reducer(lambda x, y: "bad", lambda t: tc.const(0, t), name="bad")
    A = _vec(4)
    k = tc.reduce_axis(4, name="k")
    tc.compute((1,), lambda i: red(A[k], axis=k), name="C")


@bad("ExprError", r"unknown thread tag")
def thread_axis_int():
    _tc().thread_axis(5)


# ---------------------------------------------------------------------------------
# schedules


@bad("ScheduleError", r"create_schedule takes an output tensor/operation")
def create_schedule_int():
    _tc().create_schedule(5)


@bad("ScheduleError", r"create_schedule takes an output tensor/operation")
def create_schedule_empty():
    _tc().create_schedule([])


@bad("ScheduleError", r"create_schedule: A is a placeholder")
def create_schedule_placeholder():
    _tc().create_schedule(_vec(4))


@bad("ScheduleError", r"create_schedule: 'C' is not a tensor")
def create_schedule_string_in_list():
    _tc().create_schedule(["C"])


@bad("ScheduleError", r"'C' is not part of this schedule")
def schedule_getitem_string():
    A, B, C = _chain()
    _tc().create_schedule(C.op)["C"]


@bad("ScheduleError", r"'X' is not part of this schedule")
def schedule_getitem_other_tensor():
    tc = _tc()
    A, B, C = _chain()
    X = tc.compute((4,), lambda i: i, name="X")
    tc.create_schedule(C.op)[X]


def _two_reductions():
    tc = _tc()
    A = tc.placeholder((8, 8), name="A")
    k = tc.reduce_axis((0, 8), name="k")
    r = tc.reduce_axis((0, 8), name="r")
    C = tc.compute((8,), lambda i: tc.sum(A[i, k], axis=k), name="C")
    D = tc.compute((8,), lambda i: tc.max(A[r, i] + C[i], axis=r), name="D")
    return tc.create_schedule(D.op), C, D, k, r


@bad("ScheduleError", r"split on stage D: axis k belongs to stage C, not to stage D")
def split_reduce_axis_of_another_stage():
    s, C, D, k, r = _two_reductions()
    s[D].split(k, factor=2)


@bad("ScheduleError", r"reorder on stage C: axis r belongs to stage D, not to stage C")
def reorder_with_reduce_axis_of_another_stage():
    s, C, D, k, r = _two_reductions()
    s[C].reorder(r, C.op.axis[0])


@bad("ScheduleError", r"rfactor on stage D: axis k belongs to stage C")
def rfactor_reduce_axis_of_another_stage():
    s, C, D, k, r = _two_reductions()
    s.rfactor(D, k)


@bad("ScheduleError", r"compute_at of C on stage D: axis k belongs to stage C, not to stage D")
def compute_at_own_reduce_axis_given_for_consumer():
    s, C, D, k, r = _two_reductions()
    s[C].compute_at(s[D], k)


@bad("ScheduleError", r"split on stage C, axis i: factor must be a positive int, got 2.5")
def split_float_factor():
    A, B, C = _chain()
    s = _tc().create_schedule(C.op)
    s[C].split(C.op.axis[0], factor=2.5)


@bad("ScheduleError", r"split on stage C, axis i: factor=-4 must be at least 1")
def split_negative_factor():
    A, B, C = _chain()
    s = _tc().create_schedule(C.op)
    s[C].split(C.op.axis[0], factor=-4)


@bad("ScheduleError", r"split on stage C, axis i: nparts must be a positive int, got True")
def split_bool_nparts():
    A, B, C = _chain()
    s = _tc().create_schedule(C.op)
    s[C].split(C.op.axis[0], nparts=True)


@bad("ScheduleError", r"split on stage C: axis must be an axis of the stage")
def split_string_axis():
    A, B, C = _chain()
    s = _tc().create_schedule(C.op)
    s[C].split("i", factor=2)


@bad("ScheduleError", r"split on stage C: axis i was already split or fused away")
def tile_same_axis_twice():
    A, B, C = _chain()
    s = _tc().create_schedule(C.op)
    s[C].tile(C.op.axis[0], C.op.axis[0], 2, 2)


@bad("ScheduleError", r"fuse on stage C: give at least one axis")
def fuse_nothing():
    A, B, C = _chain()
    s = _tc().create_schedule(C.op)
    s[C].fuse()


@bad("ScheduleError", r"fuse on stage C: axis repeated")
def fuse_same_axis():
    A, B, C = _chain()
    s = _tc().create_schedule(C.op)
    s[C].fuse(C.op.axis[0], C.op.axis[0])


@bad("ScheduleError", r"fuse on stage C: axis i is already parallel")
def fuse_after_parallel():
    A, B, C = _chain()
    s = _tc().create_schedule(C.op)
    s[C].parallel(C.op.axis[0])
    s[C].fuse(*C.op.axis)


@bad("ScheduleError", r"vectorize on stage C: axis j is already parallel")
def vectorize_after_parallel():
    A, B, C = _chain()
    s = _tc().create_schedule(C.op)
    s[C].parallel(C.op.axis[1])
    s[C].vectorize(C.op.axis[1])


@bad("ScheduleError", r"unroll on stage C: axis .* has extent n")
def unroll_symbolic_extent():
    tc = _tc()
    n = tc.var("n")
    A = tc.placeholder((n,), name="A")
    C = tc.compute((n,), lambda i: A[i] + 1, name="C")
    s = tc.create_schedule(C.op)
    s[C].unroll(C.op.axis[0])
    tc.lower(s, [A, C])


@bad("ScheduleError", r"bind on stage C, axis i: the second argument must be a thread axis")
def bind_string_tag():
    A, B, C = _chain()
    s = _tc().create_schedule(C.op)
    s[C].bind(C.op.axis[0], "threadIdx.x")


def _inlined_b():
    tc = _tc()
    A, B, C = _chain()
    s = tc.create_schedule(C.op)
    s[B].compute_inline()
    return s, B


@bad("ScheduleError", r"vectorize on stage B: the stage is inlined into its consumers")
def vectorize_inlined_stage():
    s, B = _inlined_b()
    s[B].vectorize(B.op.axis[1])


@bad("ScheduleError", r"parallel on stage B: the stage is inlined")
def parallel_inlined_stage():
    s, B = _inlined_b()
    s[B].parallel(B.op.axis[0])


@bad("ScheduleError", r"unroll on stage B: the stage is inlined")
def unroll_inlined_stage():
    s, B = _inlined_b()
    s[B].unroll(B.op.axis[0])


@bad("ScheduleError", r"reorder on stage B: the stage is inlined")
def reorder_inlined_stage():
    s, B = _inlined_b()
    s[B].reorder(B.op.axis[1], B.op.axis[0])


@bad("ScheduleError", r"pragma on stage B: the stage is inlined")
def pragma_inlined_stage():
    s, B = _inlined_b()
    s[B].pragma(B.op.axis[0], "unroll_explicit")


@bad("ScheduleError", r"bind on stage B: the stage is inlined")
def bind_inlined_stage():
    s, B = _inlined_b()
    s[B].bind(B.op.axis[0], _tc().thread_axis("blockIdx.x"))


@bad("ScheduleError", r"split on stage B: the stage is inlined")
def tile_inlined_stage():
    s, B = _inlined_b()
    s[B].tile(B.op.axis[0], B.op.axis[1], 2, 2)


@bad("ScheduleError", r"rfactor on stage Y: fused reduction axes are not supported")
def rfactor_fused_reduce_axes():
    tc = _tc()
    X = tc.placeholder((4, 6, 5), name="X")
    r1 = tc.reduce_axis((0, 6), name="r1")
    r2 = tc.reduce_axis((0, 5), name="r2")
    Y = tc.compute((4,), lambda i: tc.sum(X[i, r1, r2], axis=[r1, r2]), name="Y")
    s = tc.create_schedule(Y.op)
    s.rfactor(Y, s[Y].fuse(r1, r2))


@bad("ScheduleError", r"storage_align on stage B: the stride of dimension 0 is n, not a constant")
def storage_align_symbolic_stride():
    tc = _tc()
    n = tc.var("n")
    X = tc.placeholder((4, n), name="X")
    B = tc.compute((4, n), lambda i, j: X[i, j] + 1, name="B")
    C = tc.compute((4, n), lambda i, j: B[i, j] * 2, name="C")
    s = tc.create_schedule(C.op)
    s[B].storage_align(B.op.axis[0], 8, 0)
    tc.lower(s, [X, C])


@bad("BuildError", r"the loop over `i\.outer` is bound to the GPU thread axis blockIdx\.x; the llvm "
     r"\(CPU\) target cannot run GPU-bound loops")
def gpu_schedule_built_for_the_cpu():
    tc = _tc()
    A = _vec(16)
    B = tc.compute((16,), lambda i: A[i] + 1, name="B")
    s = tc.create_schedule(B.op)
    xo, xi = s[B].split(B.op.axis[0], factor=4)
    s[B].bind(xo, tc.thread_axis("blockIdx.x"))
    s[B].bind(xi, tc.thread_axis("threadIdx.x"))
    tc.build(s, [A, B])


@bad("BuildError", r"stage B: its loop nest has no axis bound to a GPU thread")
def cpu_schedule_built_for_the_cuda_emulation():
    tc = _tc()
    A = _vec(16)
    B = tc.compute((16,), lambda i: A[i] + 1, name="B")
    tc.build(tc.create_schedule(B.op), [A, B], target="cuda-emu")


@bad("ArgumentError", r"get_source: unknown source kind 'foo'; use 'llvm', 'llvm-unopt' or 'asm'")
def get_source_unknown_kind():
    f, A, B = _add_kernel()
    f.get_source("foo")


@bad("ScheduleError", r"compute_at on stage B: parent must be a stage")
def compute_at_string_parent():
    A, B, C = _chain()
    s = _tc().create_schedule(C.op)
    s[B].compute_at("C", C.op.axis[0])


@bad("ScheduleError", r"compute_at of B on stage C: axis must be an axis of the stage")
def compute_at_int_axis():
    A, B, C = _chain()
    s = _tc().create_schedule(C.op)
    s[B].compute_at(s[C], 0)


@bad("ScheduleError", r"compute_at on stage B: stage D does not consume B")
def compute_at_non_consumer_sibling():
    tc = _tc()
    A, B, C = _chain()
    D = tc.compute((16, 8), lambda i, j: A[i, j] * 3, name="D")
    s = tc.create_schedule([C.op, D.op])
    s[B].compute_at(s[D], D.op.axis[0])


@bad("ScheduleError", r"compute_at of B at C\.i: .*(split|fused|no longer)")
def compute_at_axis_split_afterwards():
    tc = _tc()
    A, B, C = _chain()
    s = tc.create_schedule(C.op)
    s[B].compute_at(s[C], C.op.axis[0])
    s[C].split(C.op.axis[0], factor=4)
    tc.lower(s, [A, C])


@bad("ScheduleError", r"compute_inline on stage B: stage .* is computed at one of its loops")
def compute_inline_with_attached_stage():
    tc = _tc()
    A = _vec(8)
    X = tc.compute((8,), lambda i: A[i] + 1, name="X")
    B = tc.compute((8,), lambda i: X[i] * 2, name="B")
    C = tc.compute((8,), lambda i: B[i] - 1, name="C")
    s = tc.create_schedule(C.op)
    s[X].compute_at(s[B], B.op.axis[0])
    s[B].compute_inline()


@bad("ScheduleError", r"set_scope on stage B: unknown scope 'register'")
def set_scope_unknown():
    A, B, C = _chain()
    s = _tc().create_schedule(C.op)
    s[B].set_scope("register")


@bad("ScheduleError", r"set_scope on stage C: it is an output")
def set_scope_output_local():
    A, B, C = _chain()
    s = _tc().create_schedule(C.op)
    s[C].set_scope("local")


@bad("ScheduleError", r"storage_align on stage B: need an int factor >= 1")
def storage_align_zero_factor():
    A, B, C = _chain()
    s = _tc().create_schedule(C.op)
    s[B].storage_align(B.op.axis[0], 0, 0)


@bad("ScheduleError", r"storage_align on stage B: axis j is the innermost dimension")
def storage_align_innermost():
    A, B, C = _chain()
    s = _tc().create_schedule(C.op)
    s[B].storage_align(B.op.axis[1], 8, 0)


@bad("ScheduleError", r"storage_order on stage B: got i; give every output axis \(i, j\) "
     r"exactly once")
def storage_order_missing_axis():
    A, B, C = _chain()
    s = _tc().create_schedule(C.op)
    s[B].storage_order(B.op.axis[0])


@bad("ScheduleError", r"storage_order on stage B: 'j.inner' is not one of its output axes")
def storage_order_split_axis():
    A, B, C = _chain()
    s = _tc().create_schedule(C.op)
    _, ji = s[B].split(B.op.axis[1], factor=4)
    s[B].storage_order(ji, B.op.axis[0])


@bad("ScheduleError", r"storage_order on stage C: it is an output, whose buffer is the caller's "
     r"array")
def storage_order_of_output():
    A, B, C = _chain()
    s = _tc().create_schedule(C.op)
    s[C].storage_order(C.op.axis[1], C.op.axis[0])


@bad("ScheduleError", r"storage_order on stage B: the stage is inlined \(compute_inline\)")
def storage_order_inlined():
    A, B, C = _chain()
    tc = _tc()
    s = tc.create_schedule(C.op)
    s[B].storage_order(B.op.axis[1], B.op.axis[0])
    s[B].compute_inline()
    tc.lower(s, [A, C])


@bad("ScheduleError", r"storage_align on stage B: axis must be one of its output axes")
def storage_align_axis_of_other_stage():
    A, B, C = _chain()
    s = _tc().create_schedule(C.op)
    s[B].storage_align(C.op.axis[0], 8, 0)


@bad("ScheduleError", r"pragma on stage C, axis i: the name must be an identifier .*got ''")
def pragma_empty_name():
    A, B, C = _chain()
    s = _tc().create_schedule(C.op)
    s[C].pragma(C.op.axis[0], "")


@bad("ScheduleError", r"pragma on stage C, axis i: the name must be an identifier .*got 3")
def pragma_int_name():
    A, B, C = _chain()
    s = _tc().create_schedule(C.op)
    s[C].pragma(C.op.axis[0], 3)


@bad("ScheduleError", r"pragma on stage C, axis i: the name must be an identifier \(letters, "
                      r"digits, _\), e.g. 'unroll_explicit'; got 'x\\n#include")
def pragma_name_injection():
    # the name is printed in a // comment of the IR and of the generated C: a newline in
    # it would end the comment (issue 20)
    A, B, C = _chain()
    s = _tc().create_schedule(C.op)
    s[C].pragma(C.op.axis[0], 'x\n#include <cstdlib>\nint y = system("id");')


@bad("ScheduleError", r"cache_read of A: give at least one reader")
def cache_read_no_readers():
    A, B, C = _chain()
    s = _tc().create_schedule(C.op)
    s.cache_read(A, "local", [])


@bad("ScheduleError", r"cache_read: tensor must be a Tensor, got 'A'")
def cache_read_string_tensor():
    A, B, C = _chain()
    s = _tc().create_schedule(C.op)
    s.cache_read("A", "local", [B])


@bad("ScheduleError", r"cache_write of A|A is a placeholder")
def cache_write_placeholder():
    A, B, C = _chain()
    s = _tc().create_schedule(C.op)
    s.cache_write(A, "local")


@bad("ScheduleError", r"cache_write of B: unknown scope 'tmp'")
def cache_write_bad_scope():
    A, B, C = _chain()
    s = _tc().create_schedule(C.op)
    s.cache_write(B, "tmp")


@bad("ScheduleError", r"rfactor on stage C: factor_axis=5 must be an int in \[0, 2\]")
def rfactor_bad_factor_axis():
    A, B, C, k = _mm()
    s = _tc().create_schedule(C.op)
    ko, ki = s[C].split(k, factor=2)
    s.rfactor(C, ki, factor_axis=5)


@bad("ScheduleError", r"rfactor on stage B: it is not a reduction")
def rfactor_elementwise():
    A, B, C = _chain()
    s = _tc().create_schedule(C.op)
    s.rfactor(B, B.op.axis[0])


@bad("ScheduleError", r"rfactor: tensor must be a Tensor")
def rfactor_string():
    A, B, C, k = _mm()
    s = _tc().create_schedule(C.op)
    s.rfactor("C", k)


# ---------------------------------------------------------------------------------
# lower / build


@bad("LowerError", r"tc\.lower\(s, args\): args must be a list")
def lower_args_not_list():
    A, B, C = _chain()
    s = _tc().create_schedule(C.op)
    _tc().lower(s, C)


@bad("LowerError", r"tc\.lower takes a schedule made by tc\.create_schedule")
def lower_not_a_schedule():
    A, B, C = _chain()
    _tc().lower("s", [A, C])


@bad("LowerError", r"function name 'my func' must be a Python-style identifier")
def lower_bad_name():
    A, B, C = _chain()
    s = _tc().create_schedule(C.op)
    _tc().lower(s, [A, C], name="my func")


@bad("LowerError", r"argument 2 is 5")
def lower_int_argument():
    A, B, C = _chain()
    s = _tc().create_schedule(C.op)
    _tc().lower(s, [A, C, 5])


@bad("LowerError", r"argument 1 \(A\) appears twice")
def lower_repeated_argument():
    A, B, C = _chain()
    s = _tc().create_schedule(C.op)
    _tc().lower(s, [A, A, C])


@bad("LowerError", r"tensor X is not part of this schedule")
def lower_foreign_tensor():
    tc = _tc()
    A, B, C = _chain()
    X = tc.compute((4,), lambda i: i, name="X")
    s = tc.create_schedule(C.op)
    tc.lower(s, [A, C, X])


@bad("LowerError", r"tensor B is inlined")
def lower_inlined_argument():
    tc = _tc()
    A, B, C = _chain()
    s = tc.create_schedule(C.op)
    s[B].compute_inline()
    tc.lower(s, [A, B, C])


@bad("LowerError|BuildError", r"variable `?n`? ")
def lower_symbolic_var_not_bound():
    tc = _tc()
    n = tc.var("n")
    A = tc.placeholder((8,), name="A")
    k = tc.reduce_axis((0, n), name="k")
    C = tc.compute((1,), lambda i: tc.sum(A[k], axis=k), name="C")
    s = tc.create_schedule(C.op)
    tc.build(s, [A, C])


@bad("TargetError", r"a target is a string or a tc\.Target, got int")
def build_target_int():
    A, B, C = _chain()
    s = _tc().create_schedule(C.op)
    _tc().build(s, [A, C], target=5)


@bad("TargetError", r"unknown target kind 'gpu'")
def build_target_unknown():
    A, B, C = _chain()
    s = _tc().create_schedule(C.op)
    _tc().build(s, [A, C], target="gpu")


@bad("TargetError", r"the target string is empty")
def build_target_empty():
    A, B, C = _chain()
    s = _tc().create_schedule(C.op)
    _tc().build(s, [A, C], target="")


@bad("TargetError", r"unknown -mcpu='pentium9'.*give its features with -mattr")
def target_unknown_cpu():
    _tc().Target("llvm -mcpu=pentium9")


@bad("TargetError", r"-mattr entry 'avx2' is not \+feature or -feature")
def target_mattr_without_sign():
    _tc().Target("llvm -mattr=avx2,+fma")


@bad("TargetError", r"target llvm: unknown option '-arch=sm_90'")
def target_option_of_another_kind():
    _tc().Target("llvm -arch=sm_90")


@bad("TargetError", r"target cuda: unknown -arch='sm_9'")
def target_unknown_arch():
    _tc().Target("cuda -arch=sm_9")


@bad("TargetError", r"-num-cores must be an integer in 1\.\.1024, got '0'")
def target_zero_cores():
    _tc().Target("llvm -num-cores=0")


@bad("TargetError", r"cannot run on this machine: code for llvm -mattr=\+fma4 uses fma4")
def call_module_built_for_a_missing_feature():
    # AMD's FMA4: no Intel CPU has it (on a CPU that has it, this entry is skipped)
    tc = _tc()
    from tecomp.target import Target
    if Target("llvm -mattr=+fma4").runs_here() is None:
        raise tc.TargetError("cannot run on this machine: code for llvm -mattr=+fma4 uses "
                             "fma4 (skipped: this CPU has fma4)")
    A, B, C = _chain()
    f = tc.build(tc.create_schedule(C.op), [A, C], target="llvm -mattr=+fma4")
    f(np.ones((16, 8), "float32"), np.zeros((16, 8), "float32"))


@bad("LowerError", r"tc\.build\(s, args\): give the argument list")
def build_without_args():
    A, B, C = _chain()
    _tc().build(_tc().create_schedule(C.op))


@bad("LowerError", r"a lowered PrimFunc already has its parameters")
def build_func_with_args():
    tc = _tc()
    A, B, C = _chain()
    s = tc.create_schedule(C.op)
    f = tc.lower(s, [A, C])
    tc.build(f, [A, C])


@bad("LowerError", r"tc\.lower takes a schedule")
def build_of_tensor():
    A, B, C = _chain()
    _tc().build(C, [A, C])


@bad("ShapeError", r"compute C: the read A\[i \+ 1\] is out of range: index 0 \(i \+ 1\) is 8 at "
     r"i = 7, but dimension 0 of tensor A has extent 8; .*tc\.if_then_else")
def index_provably_out_of_range():
    tc = _tc()
    A = _vec(8)
    tc.compute((8,), lambda i: A[i + 1], name="C")


@bad("ShapeError", r"compute C: the read A\[i, k \+ 2\] is out of range: index 1 \(k \+ 2\) is -1 at "
     r"k = -3, but dimension 1 of tensor A has extent 6")
def index_provably_out_of_range_in_reduction():
    tc = _tc()
    A = tc.placeholder((4, 6), name="A")
    k = tc.reduce_axis((-3, 3), name="k")
    tc.compute((4,), lambda i: tc.sum(A[i, k + 2], axis=k), name="C")


@bad("ShapeError", r"compute C: the read B\[i // 2 \+ 3\] is out of range")
def index_provably_out_of_range_of_a_compute():
    tc = _tc()
    A = _vec(8)
    B = tc.compute((6,), lambda i: A[i], name="B")
    tc.compute((8,), lambda i: B[i // 2 + 3], name="C")


@bad("TecompError", r"set_num_threads expects a positive integer, got 0")
def set_num_threads_zero():
    _tc().set_num_threads(0)


@bad("TecompError", r"set_num_threads expects a positive integer, got '4'")
def set_num_threads_string():
    _tc().set_num_threads("4")


# ---------------------------------------------------------------------------------
# calling compiled kernels (more in tests/must_fail/test_call_errors.py)


@bad("ArgumentError", r"main expects 2 arguments \(A, B\), got 1")
def call_too_few():
    f, A, B = _add_kernel()
    f(np.zeros(8, "float32"))


@bad("ArgumentError", r"expects an array \(numpy\.ndarray, [^)]*\) of float32")
def call_list_argument():
    f, A, B = _add_kernel()
    f([0.0] * 8, np.zeros(8, "float32"))


@bad("ArgumentError", r"expects an array \(numpy\.ndarray, [^)]*\) of float32")
def call_none_argument():
    f, A, B = _add_kernel()
    f(None, np.zeros(8, "float32"))


@bad("ArgumentError", r"expects float32, got float64")
def call_wrong_dtype():
    f, A, B = _add_kernel()
    f(np.zeros(8), np.zeros(8, "float32"))


@bad("ArgumentError", r"expects B\.shape\[0\] = 8, got 0")
def call_empty_array():
    f, A, B = _add_kernel()
    f(np.zeros(8, "float32"), np.zeros(0, "float32"))


@bad("ArgumentError", r"read-only")
def call_readonly_output():
    f, A, B = _add_kernel()
    out = np.zeros(8, "float32")
    out.flags.writeable = False
    f(np.zeros(8, "float32"), out)


@bad("ArgumentError", r"parameter A \(argument 1\) expects an array \(numpy\.ndarray, [^)]*\) of float32 with shape \(8,\), got float32")
def call_numpy_scalar():
    f, A, B = _add_kernel()
    f(np.float32(1.0), np.zeros(8, "float32"))


@bad("ArgumentError", r"A \(argument 1\) expects a 1-d array|expects a 1-d array")
def call_0d_array():
    f, A, B = _add_kernel()
    f(np.array(1.0, "float32"), np.zeros(8, "float32"))


def _scalar_extent_kernel():
    """C[0] = sum(A[k % 8] for k < n), B[n] an intermediate: n is a scalar extent."""
    tc = _tc()
    n = tc.var("n")
    A = _vec(8, "A")
    B = tc.compute((n,), lambda i: A[i % 8] * 2, name="B")
    k = tc.reduce_axis((0, n), name="k")
    C = tc.compute((1,), lambda i: tc.sum(B[k], axis=k), name="C")
    return tc.create_schedule(C.op), [A, C, n]


@bad("ArgumentError", r"parameter n \(argument 3\) = -3 must be >= 0: it is the extent of axis i "
                      r"of stage B and the extent of reduce axis k of stage C; pass n >= 0")
def call_negative_scalar_extent():
    s, args = _scalar_extent_kernel()
    _tc().build(s, args)(np.ones(8, "float32"), np.zeros(1, "float32"), -3)


@bad("ArgumentError", r"parameter n \(argument 3\) = -1 must be >= 0: it is the extent")
def interp_negative_scalar_extent():
    from tecomp.ir import interp

    s, args = _scalar_extent_kernel()
    interp.run(_tc().lower(s, args), np.ones(8, "float32"), np.zeros(1, "float32"), -1)


def _symbolic_split(f_value, runner="llvm"):
    tc = _tc()
    f = tc.var("f")
    A = _vec(8, "A")
    C = tc.compute((8,), lambda i: A[i] + 1, name="C")
    s = tc.create_schedule(C.op)
    s[C].split(C.op.axis[0], factor=f)
    args = (np.ones(8, "float32"), np.zeros(8, "float32"), f_value)
    if runner == "llvm":
        tc.build(s, [A, C, f])(*args)
    else:
        from tecomp.ir import interp

        interp.run(tc.lower(s, [A, C, f]), *args)


@bad("ArgumentError", r"parameter f \(argument 3\) = 0 must be >= 1: it is the split factor of "
                      r"axis i of stage C; pass f >= 1")
def call_zero_symbolic_split_factor():
    _symbolic_split(0)


@bad("ArgumentError", r"parameter f \(argument 3\) = -2 must be >= 1: it is the split factor of "
                      r"axis i of stage C")
def interp_negative_symbolic_split_factor():
    _symbolic_split(-2, "interp")


# ---------------------------------------------------------------------------------
# the runner


def run_entry(e: Entry):
    """Return (status, text): status is ok | wrong-class | raw-exception | no-error |
    bad-message."""
    import tecomp as tc

    try:
        e.fn()
    except tc.TecompError as ex:
        msg = str(ex)
        wanted = [getattr(tc, n.strip(), None) for n in e.error.split("|")]
        wanted = [w for w in wanted if w is not None] or [tc.TecompError]
        if not isinstance(ex, tuple(wanted)):
            return "wrong-class", f"{type(ex).__name__} (wanted {e.error}): {msg}"
        if e.match and not re.search(e.match, msg):
            return "bad-message", f"{type(ex).__name__}: {msg!r} does not match {e.match!r}"
        return "ok", f"{type(ex).__name__}: {msg}"
    except Exception as ex:  # noqa: BLE001 - the finding
        return "raw-exception", f"{type(ex).__name__}: {ex}"
    return "no-error", "no error raised"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    verbose = "-v" in argv
    counts = {}
    failures, known = [], []
    for e in CATALOGUE:
        status, text = run_entry(e)
        if e.known_bug and status != "ok":
            known.append((e, status, text))
            status = "known-bug"
        counts[status] = counts.get(status, 0) + 1
        if status not in ("ok", "known-bug"):
            failures.append((e, status, text))
        if verbose:
            print(f"{status:14s} {e.name}: {text.splitlines()[0][:160] if text else ''}")
    n = len(CATALOGUE)
    print(f"bad inputs tried: {n}; TecompError as expected: {counts.get('ok', 0)}; "
          f"known bugs: {counts.get('known-bug', 0)}; failures: {len(failures)}; "
          f"process crashes: 0")
    for e, status, text in known:
        print(f"  known bug {e.name}: {e.known_bug}")
    for e, status, text in failures:
        print(f"  FAIL {e.name}: {status}: {text.splitlines()[0][:300]}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
