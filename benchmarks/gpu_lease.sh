#!/bin/bash
# One GPU lease's checks, in order of what they are worth when the lease is short: the
# benchmark table (each workload checked against a float64 reference before it is timed),
# the tensor-core families and odd shapes (the lines that set WGMMA_BY_DEFAULT and
# WMMA_MAX_WASTE), the flash backward's two forms, the BERT layer trained on the GPU, a
# call's host time against a torch custom op's (benchmarks/call_overhead.py), a GPU
# library's load + first launch in fresh processes (benchmarks/aot_gpu.py), then the
# GPU tests.  Each step has its own time limit, so that one that hangs costs only its
# share; every log is written under $OUT (at most 8 files).
#
#   bash benchmarks/gpu_lease.sh            # on the GPU machine, in the checkout, with the
#                                           # pycuda wheel of ../shared/GPU.md in .whl/
# Limits (seconds) can be changed with STEP_SCALE=0.5 (halves each), steps skipped with
# SKIP="bert tests" and chosen with STEPS="family tc flashsweep tests".
set -u
OUT=${OUT:-/tmp/gpu-lease}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if ls .whl/*.whl > /dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=$PWD:/tmp/site
else
    export PYTHONPATH=$PWD:${PYTHONPATH:-}
fi
SCALE=${STEP_SCALE:-1}
SKIP=${SKIP:-}
{
    date -u
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw \
        --format=csv
    nproc
    python3 -c "import torch, numpy, llvmlite; print('torch', torch.__version__, 'numpy', \
numpy.__version__, 'llvmlite', llvmlite.__version__)"
    nvcc --version | tail -2
} > "$OUT/machine.log" 2>&1
cat "$OUT/machine.log"

step() {  # step NAME LIMIT LOG COMMAND...
    local name=$1 limit log=$3
    limit=$(python3 -c "print(max(10, int($2 * $SCALE)))")
    shift 3
    case " $SKIP " in *" $name "*) echo "=== $name skipped"; return;; esac
    echo "=== $name: $* (limit ${limit} s, $(date -u +%T))" | tee -a "$OUT/$log"
    timeout -k 5 "$limit" "$@" >> "$OUT/$log" 2>&1
    local rc=$?
    echo "=== $name rc=$rc ($(date -u +%T))" | tee -a "$OUT/$log"
}

STEPS=${STEPS:-table family odd flashab bert callcost aot tests}
for name in $STEPS; do
    case $name in
    table) step table 150 table.log python3 benchmarks/gpu.py --quick;;
    family) step family 90 family.log python3 benchmarks/gpu.py --quick --only hgemm --family all;;
    odd) step odd 120 odd.log python3 benchmarks/gpu.py --quick --only odd;;
    # (flashab: 225 s before the causal forwards' diagonal_test=False form, two more builds
    # and timings, about 10 s: an estimate, no GPU has run it)
    flashab) step flashab 235 flashab.log python3 benchmarks/gpu.py --quick --only "flash attention" \
        --ab;;
    flashsweep) step flashsweep 60 flashab.log python3 benchmarks/gpu.py --quick \
        --only "flash attention fwd f16 b4 h16 s2048 d64" --sweep;;
    tc) for w in hdense bfloat16; do
            step "tc" 40 table.log python3 benchmarks/gpu.py --quick --only "$w"
        done;;
    bert) step bert 60 bert.log python3 examples/bert_layer_gpu.py --dtype float16 --batch 8 \
        --seq 512 --steps 5;;
    callcost) step callcost 75 bert.log python3 benchmarks/call_overhead.py --rounds 5 --profile \
        --calls 500;;
    aot) step aot 90 bert.log python3 benchmarks/aot_gpu.py --rounds 5;;
    tests) step tests 240 tests.log python3 -m pytest -m gpu -q -p no:cacheprovider --timeout 60 \
        tests/test_hopper.py tests/test_wgmma_template.py tests/test_tma_pipeline.py \
        tests/test_cuda_library.py tests/test_tensorcore_edges.py tests/test_flash_attention.py \
        tests/test_torch.py tests/test_cuda_gpu.py tests/test_mma.py tests/test_tensorcore.py \
        tests/test_mma_registers.py;;
    *) echo "unknown step $name";;
    esac
done

# the short forms last: what the reply's tail shows
for f in table family odd flashab bert tests; do
    [ -f "$OUT/$f.log" ] || continue
    echo "----- $f"
    tail -n 30 "$OUT/$f.log"
done
