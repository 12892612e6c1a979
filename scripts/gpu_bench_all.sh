#!/usr/bin/env bash
# Every GPU benchmark of the package in one call of at most ~8 minutes, results in a few files under $OUT.
#
#   OUT=/some/dir bash scripts/gpu_bench_all.sh            # from the repository root, on a machine with one GPU
#   BUDGET=470 OUT=... bash scripts/gpu_bench_all.sh       # total seconds (default 470); each step gets its share
#
# Steps, in this order (each under `timeout`, skipped when the budget left is too small; a failed step does not
# stop the rest):
#   1. the vMF loss against the cosine loss on CUDA: aten ops, kernels, time (bench_continuous.py part 0)
#                                                                                    -> $OUT/vmf_loss_cuda.md
#   2. whole models through fairseq-train: base Transformer, V = 50k, fp16, 8,192 tokens per update, every
#      output layer and the 16-word bound (bench_whole_model.py at reduced size; it rewrites its file after
#      every run, so a stopped step keeps what it measured)                       -> $OUT/whole_model_cuda.md
#   3. output layer + loss at V = 50k and 128k, H = 512, 8,192 tokens (bench_continuous.py part 1)
#                                                                                    -> $OUT/continuous_cuda.md
#   4. step 1 again with log C_m through torch.compile (first compile included in the step's time)
#                                                                          -> $OUT/vmf_loss_compiled_cuda.md
#   5. the joint layer at the paper's d = 512 and the fixed classifier (bench_joint_output.py,
#      bench_fixed_targets.py), if time is left                 -> $OUT/joint_cuda.md, $OUT/fixed_cuda.md
# Everything printed goes to $OUT/log.txt as well.
#
# Python packages: the GPU image has torch; fairseq-fixed and its pure-Python needs are installed from .whl/ when
# that folder exists (cp312 wheels, made where pip works; see docs/benchmarks/README.md), into /tmp/site.
set -u
OUT=${OUT:-$PWD/gpu-bench-out}
BUDGET=${BUDGET:-470}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
LOG=$OUT/log.txt
: >"$LOG"
START=$(date +%s)
export PYTHONUNBUFFERED=1 CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}

say() { echo "[$(($(date +%s) - START)) s] $*" | tee -a "$LOG"; }
left() { echo $((BUDGET - ($(date +%s) - START))); }
# step NAME SECONDS MIN_LEFT -- command...: run under min(SECONDS, budget left - 5); skipped below MIN_LEFT
step() {
    local name=$1 want=$2 need=$3
    shift 4
    local l
    l=$(left)
    if [ "$l" -lt "$need" ]; then
        say "SKIP $name: $l s left (needs $need)"
        return 0
    fi
    local t=$((want < l - 5 ? want : l - 5))
    say "START $name (timeout $t s)"
    timeout --kill-after=5 "$t" "$@" 2>&1 | tee -a "$LOG"
    say "END $name: exit ${PIPESTATUS[0]}"
}

if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
    say "installing $(ls .whl/*.whl | wc -l) wheels into /tmp/site"
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        2>&1 | tail -3 | tee -a "$LOG"
    export PYTHONPATH=$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}
else
    export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
{
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    $PY -c "import torch, fairseq; print('torch', torch.__version__, 'CUDA', torch.version.cuda, 'fairseq', fairseq.__version__, 'GPU', torch.cuda.get_device_name(0))"
    git log --oneline -1 2>/dev/null
} 2>&1 | tee -a "$LOG"

step "vmf loss vs cosine (CUDA)" 75 30 -- \
    $PY scripts/bench_continuous.py --device cuda --skip layer --skip model --tokens 8192 --loss-reps 50 \
    --output "$OUT/vmf_loss_cuda.md" --force
step "whole models (fairseq-train, CUDA)" 220 90 -- \
    $PY scripts/bench_whole_model.py --device cuda --vocab 50000 --precision fp16 --max-tokens 8192 \
    --updates 30 --warmup-updates 10 --log-interval 5 --run-timeout 60 --output "$OUT/whole_model_cuda.md" --force
step "continuous layer (CUDA)" 100 60 -- \
    $PY scripts/bench_continuous.py --device cuda --skip loss --skip model --vocab 50000 128000 --dims 512 \
    --tokens 8192 --reps 2 --continuous-steps 6 --max-memory-gb 60 --output "$OUT/continuous_cuda.md" --force
step "vmf loss with log C_m compiled (CUDA)" 90 45 -- \
    $PY scripts/bench_continuous.py --device cuda --skip layer --skip model --tokens 8192 --loss-reps 50 \
    --compile-log-cm --output "$OUT/vmf_loss_compiled_cuda.md" --force
step "joint layer (CUDA)" 60 30 -- \
    $PY scripts/bench_joint_output.py --device cuda --vocab 32000 --joint-dims 512 --ratios 1.0 \
    --output "$OUT/joint_cuda.md" --force
step "fixed classifier (CUDA)" 45 25 -- \
    $PY scripts/bench_fixed_targets.py --device cuda --vocab 32000 --output "$OUT/fixed_cuda.md" --force
say "done; files: $(ls "$OUT" | tr '\n' ' ')"
