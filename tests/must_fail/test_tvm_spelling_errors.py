"""TVM spellings tecomp refuses: each error names tecomp's spelling (the accepted ones
are tested in tests/test_tvm_habits.py)."""
import numpy as np
import pytest

import tecomp as tc
from tecomp.errors import ArgumentError, LowerError, TecompError, UnknownNameError


def _double(n=8):
    A = tc.placeholder((n,), name="A")
    B = tc.compute((n,), lambda i: A[i] * 2.0, name="B")
    return tc.create_schedule(B.op), [A, B]


@pytest.mark.parametrize("name, fix", [
    ("tir", r"tc\.lower\(s, args\) returns the lowered loop IR"),
    ("IRModule", r"tc\.lower\(s, args\) returns one PrimFunc, not an IRModule"),
    ("transform", r"tc\.lower and tc\.build run every lowering pass themselves"),
    ("relay", r"write the operators with tc\.compute or tecomp\.nn.*tecomp\.torch"),
    ("topi", r"tecomp\.nn holds the operators"),
    ("autotvm", r"tc\.auto_schedule\(args, trials=N, log='tuning\.jsonl'\)"),
    ("auto_scheduler", r"tc\.auto_schedule\(args, trials=N"),
    ("meta_schedule", r"tc\.auto_schedule\(args, trials=N"),
    ("gpu", r"tc\.cuda\(0\)"),
    ("context", r"tc\.device\('cuda', 0\)"),
    ("opencl", r"CPUs \(target='llvm'\) and CUDA GPUs \(target='cuda'"),
])
def test_tvm_names_tecomp_does_not_have(name, fix):
    with pytest.raises(UnknownNameError, match=rf"^tecomp has no '{name}' \(a TVM name\): .*{fix}"):
        getattr(tc, name)
    # an AttributeError as well: hasattr and getattr with a default work as usual
    assert not hasattr(tc, name) and getattr(tc, name, 7) == 7
    assert issubclass(UnknownNameError, AttributeError)
    assert issubclass(UnknownNameError, TecompError)


def test_a_name_that_is_nobodys_is_a_plain_attribute_error():
    with pytest.raises(AttributeError, match=r"module 'tecomp' has no attribute 'sumn'") as e:
        tc.sumn
    assert not isinstance(e.value, TecompError) and e.value.name == "sumn"


def test_nd_arrays_on_the_gpu_are_refused():
    x = np.ones(4, "float32")
    with pytest.raises(ArgumentError, match=r"tc\.nd\.array\(\.\.\., cuda\(0\)\): tecomp has no "
                                            r"GPU array type of its own; pass numpy arrays"):
        tc.nd.array(x, tc.cuda(0))
    with pytest.raises(ArgumentError, match=r"tc\.nd\.empty\(\.\.\., cuda\(1\)\).*"
                                            r"__cuda_array_interface__"):
        tc.nd.empty((4,), "float32", tc.cuda(1))
    with pytest.raises(ArgumentError, match=r"tc\.nd\.array: object is not an array of numbers"):
        tc.nd.array(object())


def test_bad_devices():
    with pytest.raises(ArgumentError, match=r"tc\.cpu\(1\): tecomp has one CPU device, "
                                            r"tc\.cpu\(0\)"):
        tc.cpu(1)
    with pytest.raises(ArgumentError, match=r"device 'rocm': tecomp runs on 'cpu' and 'cuda'"):
        tc.device("rocm")
    with pytest.raises(ArgumentError, match=r"device 'cuda:x': the id after ':' must be"):
        tc.device("cuda:x")
    with pytest.raises(ArgumentError, match=r"device_type 4 is not a device tecomp runs on"):
        tc.Device(4, 0)
    with pytest.raises(ArgumentError, match=r"device_id must be an int >= 0, got -1"):
        tc.cuda(-1)
    with pytest.raises(AttributeError, match=r"a Device cannot be changed"):
        tc.cpu(0).device_id = 3


def test_nd_array_copies_of_another_shape():
    a = tc.nd.empty((4,), "float32")
    with pytest.raises(ArgumentError, match=r"copyfrom: the source has shape \(3,\), this "
                                            r"array \(4,\)"):
        a.copyfrom(np.ones(3, "float32"))
    with pytest.raises(ArgumentError, match=r"copyto: the target has shape \(2,\)"):
        a.copyto(np.ones(2, "float32"))
    with pytest.raises(ArgumentError, match=r"copyto: target must be an array or a device"):
        a.copyto("cpu")


def test_build_keywords_from_tvm():
    s, args = _double()
    with pytest.raises(ArgumentError, match=r"tc\.build: name='f' and entry_name='g' name the "
                                            r"function twice; give one of them"):
        tc.build(s, args, "llvm", name="f", entry_name="g")
    with pytest.raises(ArgumentError, match=r"tc\.build: target_host='llvm -mcpu=haswell': "
                                            r"tecomp runs the host side of a module on this "
                                            r"machine's CPU.*drop target_host"):
        tc.build(s, args, "llvm", target_host="llvm -mcpu=haswell")
    with pytest.raises(ArgumentError, match=r"tc\.build: target_host='cuda'"):
        tc.build(s, args, "llvm", target_host="cuda")
    with pytest.raises(ArgumentError, match=r"tc\.build: target_host: .*'vulkan'"):
        tc.build(s, args, "llvm", target_host="vulkan")


def test_lower_simple_mode_must_be_a_bool():
    s, args = _double()
    with pytest.raises(LowerError, match=r"simple_mode must be True or False, got 'yes'"):
        tc.lower(s, args, simple_mode="yes")


def test_time_evaluator_with_tvm_arguments_of_another_function_or_device():
    s, args = _double()
    f = tc.build(s, args, name="double")
    with pytest.raises(ArgumentError, match=r"time_evaluator\('main', \.\.\.\): this module's "
                                            r"function is 'double' \(f\.entry_name\)"):
        f.time_evaluator("main", tc.cpu(0))
    with pytest.raises(ArgumentError, match=r"time_evaluator\(\.\.\., cuda\(0\)\): this module "
                                            r"runs on tc\.cpu\(0\); double\.time_evaluator "
                                            r"takes keyword arguments only"):
        f.time_evaluator("double", tc.cuda(0))
    with pytest.raises(ArgumentError, match=r"takes keyword arguments only"):
        f.time_evaluator("double")
