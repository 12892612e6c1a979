#!/usr/bin/env bash
# Every GPU measurement the package still needs, in one prepared run, most important first.
#
#   OUT=/tmp/gpu-out bash scripts/gpu_run.sh          # on the GPU machine, from the repository root
#   OUT=/tmp/gpu-out bash scripts/gpu_run.sh          # again on the same machine: runs only the steps not yet done
#   SMOKE=1 DEVICE=cpu OUT=/tmp/x bash scripts/gpu_run.sh   # tiny sizes on the CPU: checks the plumbing (a test does)
#
# Environment:
#   OUT     where the results go: gpu-results.tar (every result file) and log.txt, rewritten after every step
#   BUDGET  seconds this call may use (default 540); a step runs under min(its limit, the budget left - 10 s)
#           and is left for the next call when less than its minimum is left
#   STATE   where finished steps and their files are kept between calls (default /tmp/outlayers-gpu-run)
#   FRESH=1 forget earlier calls' steps;  STEPS="a b"  only these steps (names below)
#   MULTI30K  a folder with data-bin/de-en, data-bin/de-en-word and vectors.softmax-word.out.vec (default
#           work/multi30k); without it the precision table uses a synthetic corpus
#   PY      the Python (default python3); .whl/*.whl, when present, are installed into $SITE (default /tmp/site; see
#           docs/benchmarks/README.md for the wheels and the command that sends them)
#
# The test steps set OUTLAYERS_TEST_DEVICE=cuda. Their commands run in the test process or as new processes, never
# in a fork, which torch refuses once CUDA is initialised (tests/in_process.py, tests/test_commands_on_cuda.py).
#
# Steps (name: what -> file in gpu-results.tar), the tables a user needs most first; each step's file is in
# $OUT/gpu-results.tar as soon as the step ends (the fused-peers page after each of its tables):
#     fused-peers the fused loss against torch's linear_cross_entropy (reference and chunked), Cut Cross-Entropy
#                 and Liger, fp32, N 8,192 / 2,048, d 512 / 256, V 32k..256k; time, memory, error -> fused_loss_peers_cuda.md
#     whole-model every output layer through fairseq-train, V = 50k, fp16, 8,192 tokens -> whole_model_cuda.md
#   correctness (two at once: they time nothing)
#     cuda-tests  bf16 runs of every method (tests/test_cuda.py), log C_m and the fused loss against float64
#                 on the GPU                                                            -> cuda-tests.txt
#     precision   every method x fp32/fp16/amp/bf16/mebf16, validation loss vs fp32    -> precision_gpu.md
#   timing (one at a time)
#     vmf-loss    the vMF losses against cosine: ops, kernels, time; eager and compiled -> vmf_loss_cuda.md
#     fused-loss  fused vs plain cross-entropy, V = 32k..256k, layer and whole model    -> fused_loss_gpu.md
#     layer       the continuous layer vs softmax, V = 50k and 128k, H = 512          -> continuous_layer_cuda.md
#     decode      softmax vs continuous model: training steps, decoding at beam 1 and 5 -> continuous_model_cuda.md
#     joint       the joint layer at the paper's d = 512                               -> joint_cuda.md
#     fixed       the fixed random classifier                                          -> fixed_cuda.md
#     shared-private  shared-private embeddings against vanilla and decoder WT (d = 512) -> shared_private_cuda.md
#     whole-bf16  the whole-model table in bf16 (V = 50k)                               -> whole_model_cuda_bf16.md
#     whole-more  the whole-model table at V = 128k (fp16)                             -> whole_model_cuda_more.md
#     cuda-tests-all  all of tests/test_cuda.py (every method trains and generates; fp16, --amp) -> cuda-tests-all.txt
set -u
OUT=${OUT:-$PWD/gpu-out}
BUDGET=${BUDGET:-540}
STATE=${STATE:-/tmp/outlayers-gpu-run}
DEVICE=${DEVICE:-cuda}
SMOKE=${SMOKE:-}
PY=${PY:-python3}
MULTI30K=${MULTI30K:-work/multi30k}
SITE=${SITE:-/tmp/site}
[ -n "${FRESH:-}" ] && rm -rf "$STATE"
RES=$STATE/results
mkdir -p "$OUT" "$RES" "$STATE/done"
LOG=$STATE/log.txt
START=$(date +%s)
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore

say() { echo "[$(($(date +%s) - START)) s] $*" | tee -a "$LOG"; }
left() { echo $((BUDGET - ($(date +%s) - START))); }
pack() {  # every result so far into $OUT, atomically
    local tmp="$OUT/.gpu-results.$BASHPID.tmp"
    tar -C "$RES" -cf "$tmp" . && mv "$tmp" "$OUT/gpu-results.tar"
    cp "$LOG" "$OUT/log.txt"
}
wanted() { [ -z "${STEPS:-}" ] || [[ " $STEPS " == *" $1 "* ]]; }
# limit NAME SECONDS MIN: prints the seconds step NAME may run, or nothing when it is done, not wanted or too long
limit() {
    local l
    [ -e "$STATE/done/$1" ] && { say "done earlier: $1" >&2; return; }
    wanted "$1" || return
    l=$(left)
    if [ "$l" -lt $(($3 + 10)) ]; then say "LEFT FOR THE NEXT CALL: $1 ($l s left, needs $3)" >&2; return; fi
    echo $(($2 < l - 10 ? $2 : l - 10))
}
# run NAME SECONDS -- command...: one step under `timeout`; its output goes to the log (and to NAME.txt)
run() {
    local name=$1 t=$2 rc
    shift 3
    say "START $name (limit $t s)"
    timeout --kill-after=5 "$t" "$@" >"$RES/$name.txt" 2>&1
    rc=$?
    grep -v " | INFO | " "$RES/$name.txt" | tail -25 >>"$LOG"
    if [ $rc -eq 0 ]; then touch "$STATE/done/$name"; fi
    say "END $name: exit $rc$([ $rc -eq 124 ] && echo ' (out of time)')"
    pack
}
step() {  # step NAME SECONDS MIN -- command...
    local t
    t=$(limit "$1" "$2" "$3")
    [ -n "$t" ] && run "$1" "$t" -- "${@:5}"
    return 0
}

# --- the environment ---------------------------------------------------------------------------------------
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1 && [ ! -e "$STATE/installed" ]; then
    say "installing $(ls .whl/*.whl | wc -l) wheels into $SITE"
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl \
        >>"$LOG" 2>&1 && touch "$STATE/installed"
fi
[ -d "$SITE" ] && export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH} PATH=$SITE/bin:$PATH
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
# the package's own console scripts (outlayers-train, ...) beside fairseq's, for the tests and the tools
if ! command -v outlayers-train >/dev/null 2>&1 && [ -d "$SITE" ]; then
    $PY -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --target "$STATE/pkg" . \
        >>"$LOG" 2>&1 && mkdir -p "$SITE/bin" && cp -n "$STATE"/pkg/bin/* "$SITE/bin/" 2>/dev/null
fi
# the versions, and the one import check: the plugin registers (fairseq_outlayers.models), not only the package
VERSIONS=$($PY -c "import sys, torch, fairseq, fairseq_outlayers.models; print('python', sys.version.split()[0], \
'torch', torch.__version__, 'CUDA', torch.version.cuda, 'fairseq', fairseq.__version__, 'GPU', \
torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none')" 2>&1)
IMPORTS=$?
{
    command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    git log --oneline -1 2>/dev/null
    echo "$VERSIONS" | grep -v " | INFO | \|^INFO:" | tail -n 5
    $PY -c "import cut_cross_entropy as c; print('cut-cross-entropy', getattr(c, '__version__', 'installed'))" \
        2>/dev/null || echo "cut-cross-entropy: not installed (the fused loss uses torch's linear_cross_entropy)"
    $PY -c "import liger_kernel.transformers as l; from importlib.metadata import version as v; \
print('liger-kernel', v('liger-kernel'))" 2>/dev/null || echo "liger-kernel: not installed or does not import"
    command -v outlayers-train >/dev/null && echo "outlayers-train: $(command -v outlayers-train)"
} 2>&1 | tee -a "$LOG"
if [ "$IMPORTS" -ne 0 ]; then
    say "STOP: fairseq or the package does not import (see above); nothing else can run"
    pack
    exit 1
fi
if [ "$DEVICE" = cuda ] && ! $PY -c "import torch, sys; sys.exit(not torch.cuda.is_available())"; then
    say "STOP: DEVICE=cuda, but torch sees no CUDA device"
    pack
    exit 1
fi

# --- sizes -------------------------------------------------------------------------------------------------
if [ -n "$SMOKE" ]; then  # the same commands at sizes a CPU runs in seconds
    TOK=512 VOCABS="2000" FUSED_V="1000 3000" ARCH=outlayers_transformer_tiny UPD=4 WARM=1 LOGI=1 PREC_UPD=3
    PREC_TOK=1024  # a quarter of the batch: the runs check the plumbing, and bf16 matmuls are slow on a CPU
    # one method (vmf: the synthetic vectors too); tests/test_bench_precision.py sweeps three with the same script
    PREC_METHODS="--methods vmf" JOBS=2 REPS=3
    PRECISIONS="fp32 bf16"
    [ "$DEVICE" = cuda ] && PRECISIONS="fp32 fp16 amp bf16 mebf16"
    WM_METHODS=(--methods softmax "continuous, vmf_nll")
    WM_MORE=(--methods softmax)  # whole-bf16 and whole-more: the same script as whole-model, one method is enough
    # torch.compile on a CPU is slow and tests/test_vmf.py checks it there: the smoke run leaves it out
    PREC_FORM="fp32" TESTS="cuda and (log_cm or sampled_vocabulary or float64_reference) and not compiled"
    PEER_SIZES="256x32x1000 256x32x3000" PEER_ARGS="--rounds 1 --blocks 65536 262144" PEER_LIMIT=60
    ALL_K=(-k "log_cm and not compiled")
else
    TOK=8192 VOCABS="50000" FUSED_V="32000 50000 128000 256000" ARCH=outlayers_transformer UPD=30 WARM=10 LOGI=5
    PREC_UPD=200 PREC_TOK=4096 PREC_METHODS="" JOBS=8 REPS=50 PRECISIONS="fp32 fp16 amp bf16 mebf16"
    # most telling first, so that a step cut short still has softmax, the bound and the continuous model
    WM_METHODS=(--methods softmax "bound (16-word softmax)" "continuous, vmf_nll" tied "joint d_j = d"
                "softmax, fused loss" fixed "tied, fused loss" "joint d_j = d, fused loss" "continuous, cosine"
                "softmax, 25 % sampled" shared-private "continuous, vmf_nll --vmf-compile")
    WM_MORE=("${WM_METHODS[@]}")
    PREC_FORM="fp16" TESTS="(test_cuda and (bf16 or log_cm)) or on_cuda" ALL_K=()
    # the realistic width and batch first, so that a step cut short has them
    PEER_SIZES="8192x512x32000 8192x512x50000 8192x512x128000 8192x512x256000 8192x256x32000 8192x256x50000
                8192x256x128000 8192x256x256000 2048x512x32000 2048x512x50000 2048x512x128000 2048x512x256000
                2048x256x32000 2048x256x50000 2048x256x128000 2048x256x256000" PEER_ARGS="--rounds 3" PEER_LIMIT=90
fi
if [ -d "$MULTI30K/data-bin/de-en" ] && [ -d "$MULTI30K/data-bin/de-en-word" ] \
    && [ -f "$MULTI30K/vectors.softmax-word.out.vec" ] && [ -z "$SMOKE" ]; then
    PREC_DATA=(--data "$MULTI30K/data-bin/de-en" --word-data "$MULTI30K/data-bin/de-en-word"
               --vectors "$MULTI30K/vectors.softmax-word.out.vec" --pairing "$MULTI30K/data-bin/de-en/pairs.de-en.txt"
               --methods softmax softmax-fused tied joint joint-fused fixed sampled shared-private vmf cosine l2
               max-margin)
else
    PREC_DATA=(--synthetic $PREC_METHODS)
fi

# --- the tables a user needs most: the fused loss against its peers, every output layer through fairseq-train ---
step fused-peers 130 50 -- $PY scripts/bench_fused_loss.py --peers --device "$DEVICE" --sizes $PEER_SIZES \
    $PEER_ARGS --time-limit "$PEER_LIMIT" --output "$RES/fused_loss_peers_cuda.md" --force
step whole-model 260 90 -- $PY scripts/bench_whole_model.py --device "$DEVICE" --vocab $VOCABS --arch "$ARCH" \
    --precision "$PREC_FORM" --max-tokens "$TOK" --updates "$UPD" --warmup-updates "$WARM" --log-interval "$LOGI" \
    --run-timeout 90 --workers 4 "${WM_METHODS[@]}" --output "$RES/whole_model_cuda.md" --force
# --- correctness: two steps at once (neither times anything) ----------------------------------------------
t1=$(limit cuda-tests 240 60)
t2=$(limit precision 300 60)
if [ -n "$t1" ]; then
    XDIST=()  # a smoke run's few tests in one process
    [ -z "$SMOKE" ] && $PY -c "import xdist" 2>/dev/null && XDIST=(-n 6)
    run cuda-tests "$t1" -- env OUTLAYERS_CUDA_TEST_DEVICE="$DEVICE" OUTLAYERS_TEST_DEVICE="$DEVICE" \
        $PY -m pytest -q -p no:cacheprovider "${XDIST[@]}" tests/test_cuda.py tests/test_fused_cross_entropy.py \
        -k "$TESTS" -rs &
fi
if [ -n "$t2" ]; then
    run precision "$t2" -- $PY scripts/bench_precision.py --device "$DEVICE" "${PREC_DATA[@]}" \
        --precisions $PRECISIONS --max-update "$PREC_UPD" --max-tokens "$PREC_TOK" --jobs "$JOBS" --run-timeout 150 \
        --work-dir "$STATE/precision-work" \
        --output "$RES/precision_gpu.md" --force &
fi
wait

# --- timing: one step at a time ----------------------------------------------------------------------------
step vmf-loss 150 60 -- $PY scripts/bench_continuous.py --device "$DEVICE" --skip layer --skip model --tokens "$TOK" \
    --loss-reps "$REPS" --compile-log-cm --compile --output "$RES/vmf_loss_cuda.md" --force
step fused-loss 120 50 -- $PY scripts/bench_fused_loss.py --device "$DEVICE" --vocab $FUSED_V --tokens "$TOK" \
    $([ -n "$SMOKE" ] && echo "--dim 64 --model-arch $ARCH --repeats 1") --output "$RES/fused_loss_gpu.md" --force
step layer 90 40 -- $PY scripts/bench_continuous.py --device "$DEVICE" --skip loss --skip model \
    --vocab $([ -n "$SMOKE" ] && echo 2000 || echo 50000 128000) --dims $([ -n "$SMOKE" ] && echo 64 || echo 512) \
    --tokens "$TOK" --reps $([ -n "$SMOKE" ] && echo 1 || echo 2) --continuous-steps 6 --max-memory-gb 60 \
    --output "$RES/continuous_layer_cuda.md" --force
step decode 90 40 -- $PY scripts/bench_continuous.py --device "$DEVICE" --skip loss --skip layer --model-arch "$ARCH" \
    --model-vocab $([ -n "$SMOKE" ] && echo 2000 || echo 50000) --beams 1 5 \
    $([ -n "$SMOKE" ] && echo "--train-steps 1 --train-sentences 4 --decode-reps 1 --decode-sentences 4") \
    --output "$RES/continuous_model_cuda.md" --force
step joint 60 30 -- $PY scripts/bench_joint_output.py --device "$DEVICE" \
    --vocab $([ -n "$SMOKE" ] && echo 2000 || echo 32000) --joint-dims $([ -n "$SMOKE" ] && echo 64 || echo 512) \
    --ratios 1.0 $([ -n "$SMOKE" ] && echo "--dim 64 --tokens 256 --steps 1") --output "$RES/joint_cuda.md" --force
step fixed 45 25 -- $PY scripts/bench_fixed_targets.py --device "$DEVICE" \
    --vocab $([ -n "$SMOKE" ] && echo 2000 || echo 32000) $([ -n "$SMOKE" ] && echo "--dim 64 --tokens 256 --reps 1") \
    --output "$RES/fixed_cuda.md" --force
step shared-private 60 30 -- $PY scripts/bench_shared_private.py --device "$DEVICE" \
    $([ -n "$SMOKE" ] && echo "--vocab 2000 --dim 64 --layers 1 --sentences 8 --length 8 --rounds 1 --steps 1" \
    || echo "--vocab 32000 --dim 512 --layers 6 --sentences 128 --length 32 --rounds 10 --steps 3") \
    --output "$RES/shared_private_cuda.md" --force
step whole-bf16 200 90 -- $PY scripts/bench_whole_model.py --device "$DEVICE" --vocab $VOCABS --arch "$ARCH" \
    --precision bf16 --max-tokens "$TOK" --updates "$UPD" --warmup-updates "$WARM" --log-interval "$LOGI" \
    --run-timeout 90 --workers 4 "${WM_MORE[@]}" --output "$RES/whole_model_cuda_bf16.md" --force
step whole-more 240 90 -- $PY scripts/bench_whole_model.py --device "$DEVICE" \
    --vocab $([ -n "$SMOKE" ] && echo 3000 || echo 128000) --arch "$ARCH" --precision "$PREC_FORM" \
    --max-tokens "$TOK" --updates "$UPD" --warmup-updates "$WARM" --log-interval "$LOGI" --run-timeout 90 \
    --workers 4 "${WM_MORE[@]}" --output "$RES/whole_model_cuda_more.md" --force
step cuda-tests-all 300 120 -- env OUTLAYERS_CUDA_TEST_DEVICE="$DEVICE" OUTLAYERS_TEST_DEVICE="$DEVICE" \
    $PY -m pytest -q -p no:cacheprovider $([ -z "$SMOKE" ] && $PY -c "import xdist" 2>/dev/null && printf '%s' '-n 8') \
    tests/test_cuda.py \
    ${ALL_K[@]+"${ALL_K[@]}"} -rs
say "finished: $(ls "$STATE/done" | tr '\n' ' ')"
ALL="fused-peers whole-model cuda-tests precision vmf-loss fused-loss layer decode joint fixed shared-private whole-bf16 whole-more
cuda-tests-all"
say "not finished: $(for s in $ALL; do
    [ -e "$STATE/done/$s" ] || printf '%s ' "$s"; done)"
pack
