"""Programs that must fail: wgmma schedules the hardware cannot run (check_wgmma) and bad
matrix descriptors."""
import pytest

from tecomp.codegen.cuda_hopper import check_wgmma, wgmma_desc
from tecomp.errors import ScheduleError, TargetError


@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "sm_100", None])
def test_wgmma_below_or_beside_sm90a(arch):
    with pytest.raises(TargetError, match="needs target 'cuda -arch=sm_90a'.*mma.sync family"):
        check_wgmma(arch, 128, "float16", 128)


@pytest.mark.parametrize("threads", [32, 96, 160, 0])
def test_warpgroup_extent_not_128(threads):
    with pytest.raises(ScheduleError, match="a warpgroup is 128 threads"):
        check_wgmma("sm_90a", 128, "float16", threads)


@pytest.mark.parametrize("n", [4, 12, 264, "128"])
def test_wgmma_n_not_a_multiple_of_8_up_to_256(n):
    with pytest.raises(ScheduleError, match="N=.* is not a multiple of 8 in"):
        check_wgmma("sm_90a", n, "float16", 128)


def test_wgmma_takes_16_bit_operands():
    with pytest.raises(ScheduleError, match="float16 or bfloat16 operands, not 'float32'"):
        check_wgmma("sm_90a", 64, "float32", 128)


@pytest.mark.parametrize("kw,match", [
    (dict(address=8, lbo=16, sbo=1024), "address=8 must be a multiple of 16"),
    (dict(address=0, lbo=16, sbo=1 << 18), "sbo=.* must be a multiple of 16"),
    (dict(address=0, lbo=16, sbo=1024, swizzle="96B"), "swizzle '96B' is not one of"),
])
def test_bad_descriptor(kw, match):
    with pytest.raises(ScheduleError, match=match):
        wgmma_desc(**kw)
