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


def _dense(M=64, N=64, K=64, dtype="float16"):
    import tecomp as tc
    import tecomp.nn as nn
    X = tc.placeholder((M, K), dtype, name="X")
    W = tc.placeholder((N, K), dtype, name="W")
    return X, W, nn.dense(X, W, out_dtype="float32")


@pytest.mark.parametrize("cfg", [(2, 2, 1, 2, 32), (4, 1, 2, 4, 32), (4, 1, 1, 6, 32),
                                 (2, 1, 1, 4, 32)])
def test_wgmma_tiling_not_whole_warpgroups_along_m(cfg):
    import tecomp as tc
    from tecomp.strategy.cuda.tensorcore import WmmaConfig, schedule_wmma_gemm
    X, W, C = _dense(M=256, N=192)
    s = tc.create_schedule(C.op)
    with pytest.raises(ScheduleError, match="warpgroups of 4 warps .* warps_m a multiple of 4"):
        schedule_wmma_gemm(s, C, WmmaConfig(*cfg, family="wgmma"))


@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])
def test_wgmma_schedule_built_below_sm90a(arch):
    import tecomp as tc
    from tecomp.strategy.cuda.tensorcore import WmmaConfig, schedule_wmma_gemm
    X, W, C = _dense()
    s = tc.create_schedule(C.op)
    schedule_wmma_gemm(s, C, WmmaConfig(4, 1, 1, 4, 32, family="wgmma"))
    with pytest.raises(TargetError, match=f"needs target 'cuda -arch=sm_90a'.*built for {arch}"):
        tc.build(s, [X, W, C], target=f"cuda -arch={arch}")


def test_wgmma_on_float32():
    import tecomp as tc
    from tecomp.strategy.cuda.tensorcore import WmmaConfig, schedule_wmma_gemm
    X, W, C = _dense(dtype="float32")
    s = tc.create_schedule(C.op)
    with pytest.raises(ScheduleError, match="not a tensor-core GEMM"):
        schedule_wmma_gemm(s, C, WmmaConfig(4, 1, 1, 4, 32, family="wgmma"))


def test_wgmma_block_not_whole_warpgroups(monkeypatch):
    """A hand schedule of 2 warps (the template's own check switched off to write one):
    the build refuses the block, which cannot run a warpgroup's wgmma."""
    import tecomp as tc
    from tecomp.errors import BuildError
    from tecomp.strategy.cuda import tensorcore
    X, W, C = _dense(M=32, N=64)
    s = tc.create_schedule(C.op)
    monkeypatch.setattr(tensorcore, "check_wgmma_config", lambda cfg, dtype: None)
    tensorcore.schedule_wmma_gemm(s, C, tensorcore.WmmaConfig(2, 1, 1, 4, 32, family="wgmma"))
    with pytest.raises(BuildError, match=r"issues wgmma, which a warpgroup of 4 warps \(128 "
                       r"threads\) runs together, but its block is 32 x 1 x 2 = 64 threads"):
        tc.build(s, [X, W, C], target="cuda-emu")
