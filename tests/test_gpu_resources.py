"""Every shipped GPU schedule compiles with nvcc for sm_80 and sm_90 without spilling
registers (ptxas's report; no GPU needed).  ``python -m tecomp.testing.gpu_resources``
prints the table."""
import pytest

from tecomp.runtime.nvcc import find_nvcc
from tecomp.testing import gpu_resources as gr

PTXAS = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'main_kernel0' for 'sm_80'
ptxas info    : Function properties for main_kernel0
    24 bytes stack frame, 16 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 255 registers, 8444 bytes smem, 380 bytes cmem[0]
ptxas info    : Compiling entry function 'main_kernel1' for 'sm_80'
ptxas info    : Function properties for main_kernel1
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 40 registers, 380 bytes cmem[0]
"""


def test_the_ptxas_report_is_read():
    u = gr.parse_ptxas(PTXAS)
    assert u["main_kernel0"] == {"registers": 255, "spill_stores": 16, "spill_loads": 12,
                                 "stack": 24, "smem": 8444}
    assert u["main_kernel1"] == {"registers": 40, "spill_stores": 0, "spill_loads": 0,
                                 "stack": 0, "smem": 0}


@pytest.mark.skipif(find_nvcc() is None, reason="nvcc is not installed")
def test_shipped_gpu_schedules_do_not_spill():
    rows = gr.report()
    assert len(rows) >= 2 * len(gr.shipped_kernels())
    assert {r.arch for r in rows} == set(gr.ARCHS)
    spills = [r for r in rows if r.spill_stores or r.spill_loads]
    assert not spills, "\n".join(f"{r.workload} {r.kernel} {r.arch}: {r.registers} registers, "
                                 f"{r.spill_stores}/{r.spill_loads} bytes spilled"
                                 for r in spills)
    assert all(0 < r.registers <= 255 for r in rows)
