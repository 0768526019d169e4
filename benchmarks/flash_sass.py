"""Static SASS counts of FlashAttention's forward kernel per loop over the key tiles: no
GPU needed, nvcc and a disassembler (nvdisasm or cuobjdump on PATH; the
``nvidia-cuda-nvdisasm`` wheel has one).

    python benchmarks/flash_sass.py                      # d64 and d128, causal and not
    python benchmarks/flash_sass.py --d 64 --causal --arch sm_90a
    python benchmarks/flash_sass.py --form registers     # p in each warp's registers
    python benchmarks/flash_sass.py --form fragments     # p, m and l in each warp's registers
    python benchmarks/flash_sass.py --form fragments --stages 2   # with the K/V ring
    python benchmarks/flash_sass.py --form fragments --whole on --ftz   # FlashConfig(whole=True,
                                                                        # ftz=True)
    python benchmarks/flash_sass.py --form fragments --ftz --exp2   # the exps in base 2 too
    python benchmarks/flash_sass.py --form fragments --whole on --diagonal-test off --causal
                                            # FlashConfig(whole=True, diagonal_test=False)
    python benchmarks/flash_sass.py --d 128 --tiling 4,16   # FlashConfig(4, 16)
    python benchmarks/flash_sass.py --opcodes FSEL,FADD,FMUL,FFMA   # more opcodes counted

For each kernel: ptxas's registers and spills, then each loop that holds the HMMAs (a
causal kernel at head dim 64 has two: the whole tiles and the diagonal ones), its static
instruction count and those of HMMA, LDSM, LDS, STS, LDG, STG, BAR, SHFL, F2FP, BRA and
MUFU.EX2, and each loop inside it (the statistics' loop: its instructions run once per
trip).  The shapes are the issue's (batch 4, 16 heads, 2048 queries and keys, float16)."""
from __future__ import annotations

import argparse
import collections
import dataclasses
import re
import sys

import tecomp as tc
from tecomp.strategy.cuda.attention import flash_config, schedule_flash_attention
from tecomp.strategy.cuda.common import max_shared_bytes
from tecomp.testing.gpu_resources import parse_ptxas, ptxas_build

KINDS = ("HMMA", "LDSM", "LDS", "STS", "LDG", "STG", "BAR", "SHFL", "F2FP", "BRA", "MUFU.EX2")


def source(d: int, causal: bool, arch: str, form: str = "shared", stages: int = 0,
           tiling=None, **fields) -> str:
    q, k, v = (tc.placeholder((4, 16, 2048, d), "float16", name=n) for n in "qkv")
    out, lse = tc.nn.flash_attention(q, k, v, causal=causal)
    tgt = f"cuda -arch={arch}"
    cfg = dataclasses.replace(flash_config(d, d, "float16", max_shared_bytes(tgt)), form=form,
                              **fields)
    if tiling:
        cfg = dataclasses.replace(cfg, warps=tiling[0], block_kv=tiling[1])
    if stages:
        cfg = dataclasses.replace(cfg, stages=stages)
    return tc.build(schedule_flash_attention([out, lse], target=tgt, config=cfg),
                    [q, k, v, out, lse], target=tgt).get_source()


def instructions(sass: str) -> list:
    """``(address, text, branch target or None)`` of each instruction (nvdisasm's labels
    or cuobjdump's addresses as targets)."""
    out, labels, pending = [], {}, []
    for line in sass.splitlines():
        m = re.match(r"\s*(\.L_x_\d+):", line)
        if m:
            pending.append(m.group(1))
            continue
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
        if not m:
            continue
        addr = int(m.group(1), 16)
        for name in pending:
            labels[name] = addr
        pending = []
        out.append([addr, m.group(2).strip(), None])
    for ins in out:
        m = re.search(r"\bBRA\b.*?(?:`\((\.L_x_\d+)\)|0x([0-9a-f]+))", ins[1])
        if m:
            ins[2] = labels.get(m.group(1)) if m.group(1) else int(m.group(2), 16)
    return out


def counts(ins, lo: int, hi: int, kinds=KINDS) -> collections.Counter:
    c = collections.Counter()
    for addr, text, _ in ins:
        if lo <= addr <= hi:
            opcode = re.sub(r"^@!?U?P\w+\s+", "", text).split()[0]
            for kind in kinds:
                if opcode == kind or opcode.startswith(kind + "."):
                    c[kind] += 1
            c["all"] += 1
    return c


def report(sass: str, kinds=KINDS) -> list:
    """The lines of each key loop's counts (``kinds``: the opcodes counted)."""
    ins = instructions(sass)
    loops = [(t, a) for a, _, t in ins if t is not None and t <= a]
    hmma = [a for a, text, _ in ins if "HMMA" in text]
    held = [lp for lp in loops if any(lp[0] <= a <= lp[1] for a in hmma)]
    outer = [lp for lp in held if not any(o != lp and o[0] <= lp[0] and lp[1] <= o[1]
                                          for o in held)]
    lines = []
    for lo, hi in sorted(outer):
        c = counts(ins, lo, hi, kinds)
        lines.append(f"  key loop {lo:#x}..{hi:#x}: {c['all']} instructions; "
                     + ", ".join(f"{k} {c[k]}" for k in kinds))
        for a, b in sorted(lp for lp in loops if lo < lp[0] and lp[1] < hi):
            ci = counts(ins, a, b, kinds)
            lines.append(f"    inner loop {a:#x}..{b:#x}: {ci['all']} instructions; "
                         + ", ".join(f"{k} {ci[k]}" for k in kinds if ci[k]))
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--d", type=int, action="append", help="head dim (default 64 and 128)")
    ap.add_argument("--causal", action="store_true", help="causal only (default both)")
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--form", default="shared", choices=("shared", "registers", "fragments"),
                    help="FlashConfig.form: p in a shared tile (default), in registers, or p "
                    "and the rows' statistics in registers")
    ap.add_argument("--stages", type=int, default=0,
                    help="FlashConfig.stages (default: the tiling's own)")
    ap.add_argument("--whole", choices=("rule", "on", "off"), default="rule",
                    help="FlashConfig.whole: the template's rule (None, default), True or False")
    ap.add_argument("--diagonal-test", choices=("on", "off"), default="on",
                    help="FlashConfig.diagonal_test (off: the masked intrinsic on every "
                    "diagonal tile; with --whole on and a form other than shared)")
    ap.add_argument("--ftz", action="store_true", help="FlashConfig.ftz=True (form fragments)")
    ap.add_argument("--exp2", action="store_true",
                    help="FlashConfig.exp2=True (form fragments): the exps in base 2")
    ap.add_argument("--tiling", help="WARPS,BLOCK_KV (default: flash_config's)")
    ap.add_argument("--opcodes", default="",
                    help="more opcodes to count, comma-separated (e.g. FSEL,FADD,FMUL,FFMA)")
    a = ap.parse_args(argv)
    kinds = KINDS + tuple(x for x in a.opcodes.split(",") if x and x not in KINDS)
    for d in a.d or (64, 128):
        for causal in ((True,) if a.causal else (False, True)):
            fields = dict(whole={"rule": None, "on": True, "off": False}[a.whole], ftz=a.ftz,
                          exp2=a.exp2, diagonal_test=a.diagonal_test == "on")
            tiling = tuple(int(x) for x in a.tiling.split(",")) if a.tiling else None
            report_text, sass = ptxas_build(source(d, causal, a.arch, a.form, a.stages, tiling,
                                                   **fields), a.arch, sass=True)
            use = parse_ptxas(report_text)
            print(f"d{d}{' causal' if causal else ''} ({a.arch}): "
                  + "; ".join(f"{k}: {u['registers']} registers, {u['spill_stores']} bytes "
                              f"spilled" for k, u in use.items()))
            if sass is None:
                print("  (no nvdisasm or cuobjdump on PATH: no SASS)")
                continue
            print("\n".join(report(sass, kinds)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
