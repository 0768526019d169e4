"""matmul(A, B) on tensor cores with B[K, N] as it lies: the default with and without
``WGMMA_MN_MAJOR_BY_DEFAULT`` (the N-major TMA ring, a producer warp, wgmma's imm-trans-b)
over a range of sizes, interleaved with ``torch.matmul`` in one process (float16 operands,
float32 accumulation; torch writes float16).  What set ``WGMMA_MN_MAJOR_MIN_MACS``.

    python benchmarks/gpu_mn_major.py            # on an sm_90 GPU, pycuda and torch installed

Each kernel is checked against float64 products first (the error is printed)."""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import gpu as G  # noqa: E402
from tecomp.strategy.cuda import tensorcore as tcm  # noqa: E402

SHAPES = [(1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192),
          (512, 3072, 768), (4096, 3072, 768), (4096, 768, 3072), (1000, 3072, 768)]


def main() -> int:
    import torch

    drv = G.gpu_driver()
    timer = G.Timer(drv)
    print(f"# {torch.cuda.get_device_name()}; median ms, interleaved; floor now "
          f"{tcm.WGMMA_MN_MAJOR_MIN_MACS} multiply-adds (lifted here to time both forms)")
    shipped = (tcm.WGMMA_MN_MAJOR_BY_DEFAULT, tcm.WGMMA_MN_MAJOR_MIN_MACS)
    for M, N, K in SHAPES:
        ta = torch.randn(M, K, device="cuda").half()
        tb = torch.randn(K, N, device="cuda").half()
        tout = torch.empty(M, N, device="cuda", dtype=torch.half)
        out = torch.empty(M, N, device="cuda")
        ref = (ta.double() @ tb.double()).float()
        fns = {"torch": lambda: torch.matmul(ta, tb, out=tout)}
        notes = {}
        for flag in (False, True):
            tcm.WGMMA_MN_MAJOR_BY_DEFAULT, tcm.WGMMA_MN_MAJOR_MIN_MACS = flag, 0
            try:
                mod = G.odd_gemm_workload(M, N, K).build("cuda")
                launch = G.DirectLaunch(mod, [ta, tb, out], drv)
                out.zero_()
                launch()
                torch.cuda.synchronize()
                err = float(((out - ref).abs().max() / ref.abs().max()).item())
                k = mod.kernels[0]
                notes[flag] = (f"grid {[int(d.value) for d in k.grid]} block "
                               f"{[int(d.value) for d in k.block]}, error {err:.1e}")
                fns[f"n-major={flag}"] = launch
            except Exception as e:  # noqa: BLE001 - reported, the other form still timed
                notes[flag] = f"failed: {type(e).__name__}: {str(e)[:200]}"
            finally:
                tcm.WGMMA_MN_MAJOR_BY_DEFAULT, tcm.WGMMA_MN_MAJOR_MIN_MACS = shipped
        t = G.interleaved(timer, fns, rounds=7, inner=10)
        flops = 2.0 * M * N * K
        print(f"{M}x{N}x{K}: " + ", ".join(
            f"{k} {v:.3f} ms ({flops / v / 1e9:.0f} TFLOP/s, {t['torch'] / v:.2f}x torch)"
            for k, v in t.items()), flush=True)
        for flag, note in notes.items():
            print(f"   n-major={flag}: {note}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
