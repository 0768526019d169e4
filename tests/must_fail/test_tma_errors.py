"""Programs that must fail: TMA tensor maps the driver or the hardware would refuse,
checked on the host before cuTensorMapEncodeTiled is called, and TMA below sm_90."""
import numpy as np
import pytest

from tecomp.codegen import tma
from tecomp.errors import TargetError, TensorMapError
from tecomp.testing import hopper_gemm as hg


def test_box_wider_than_256_elements():
    spec = tma.row_major("A", "float16", (1024, 1024), (300, 64))
    with pytest.raises(TensorMapError, match=r"box extent 300 of dimension 1 is not in \[1, 256\]"):
        tma.check(spec, 0x10000)


def test_row_stride_not_a_multiple_of_16_bytes():
    # A[100, 100] float16: rows of 200 bytes; TMA needs them 16-byte aligned
    spec = tma.row_major("A", "float16", (100, 100), (64, 64), swizzle="128B")
    with pytest.raises(TensorMapError, match=r"byte stride 200 of dimension 1 .* multiple of 8 "
                                             "float16 elements"):
        tma.check(spec, 0x10000)


def test_gemm_operand_with_k_not_a_multiple_of_8():
    a = np.ones((64, 100), np.float32)
    with pytest.raises(TensorMapError, match="tensor map of 'A': the byte stride 200"):
        hg.run_emu(a, a, None, tma_maps=True)


def test_global_address_not_16_byte_aligned():
    spec = tma.row_major("A", "bfloat16", (64, 64), (64, 64), swizzle="128B")
    with pytest.raises(TensorMapError, match="global address 0x10008 is not 16-byte aligned"):
        tma.emu_bytes(spec, 0x10008)


def test_swizzled_box_wider_than_its_rows():
    spec = tma.row_major("B", "float16", (256, 256), (64, 128), swizzle="128B")
    with pytest.raises(TensorMapError, match="256 bytes, wider than the 128B swizzle's rows of "
                                             "128: box.0. at most 64"):
        tma.check(spec, 0x10000)


def test_inner_box_not_a_multiple_of_16_bytes():
    spec = tma.row_major("A", "float32", (64, 64), (8, 3))
    with pytest.raises(TensorMapError, match=r"inner extent is 12 bytes \(3 float32\)"):
        tma.check(spec, 0x10000)


@pytest.mark.parametrize("estride", [0, 9])
def test_element_stride_out_of_range(estride):
    spec = tma.TensorMapSpec("float16", (64, 64), (128,), (64, 8), (1, estride), name="A")
    with pytest.raises(TensorMapError, match=r"element stride .* of dimension 1 is not in \[1, 8\]"):
        tma.check(spec, 0x10000)


def test_rank_above_5():
    spec = tma.TensorMapSpec("float16", (8,) * 6, (16,) * 5, (8,) * 6, name="T")
    with pytest.raises(TensorMapError, match="rank 6; a tensor map has 1 to 5 dimensions"):
        tma.check(spec, 0x10000)


def test_dtype_without_a_tma_type():
    spec = tma.row_major("A", "bool", (64, 64), (64, 64))
    with pytest.raises(TensorMapError, match="dtype 'bool' has no TMA data type"):
        tma.check(spec, 0x10000)


@pytest.mark.parametrize("arch", ["sm_80", "sm_86", "sm_89"])
def test_tma_below_sm90(arch):
    with pytest.raises(TargetError, match=f"TMA .* needs sm_90 or later; the target is -arch={arch}"):
        tma.check_target(arch)
