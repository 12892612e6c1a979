#!/usr/bin/env bash
# The barely trained models of docs/benchmarks/decode_cpu.md: one outlayers_transformer_tiny per output layer on
# Multi30k de-en (BPE), 400 updates each, one thread, under work/decode/ (git-ignored). Decoding speed needs trained
# models (an untrained one decodes to the length limit); their BLEU is low, and the page says so.
#
#   bash scripts/prepare-multi30k.sh          # once: work/multi30k/data-bin/de-en
#   bash scripts/train_decode_models.sh       # MAXUP=400 W=work/decode; a model already done is skipped
#
# The continuous model's target vectors are the softmax model's output matrix (outlayers-vectors export), on the
# same BPE vocabulary, so that every model decodes the same test set with the same dictionary. Shared-private
# embeddings pair words with outlayers-pairing (fast_align). Then:
#
#   OMP_NUM_THREADS=1 python scripts/bench_decode.py --checkpoints softmax=work/decode/softmax/checkpoint_best.pt ...
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
B=${VENV_BIN:-.venv/bin}
D=work/multi30k/data-bin/de-en
W=${W:-work/decode}
MAXUP=${MAXUP:-400}
mkdir -p "$W"
COMMON=(--arch outlayers_transformer_tiny --optimizer adam --adam-betas '(0.9,0.98)' --lr 0.002
  --lr-scheduler inverse_sqrt --warmup-updates 150 --clip-norm 0.0 --weight-decay 0.0001 --dropout 0.3
  --max-tokens 4096 --max-update "$MAXUP" --max-epoch 50 --no-epoch-checkpoints --seed 1 --cpu --log-interval 50)
LS=(--criterion label_smoothed_cross_entropy --label-smoothing 0.1)
train() {  # name, options...
  local name=$1; shift
  [ -f "$W/$name/done" ] && return 0
  local t0; t0=$(date +%s)
  nice -n 5 "$B/fairseq-train" "$D" --user-dir fairseq_outlayers "${COMMON[@]}" "$@" --save-dir "$W/$name" \
    > "$W/train-$name.log" 2>&1
  echo "$(( $(date +%s) - t0 )) s" > "$W/$name/done"
}
train softmax --output-layer softmax "${LS[@]}"
[ -s "$W/vectors.en.vec" ] || "$B/outlayers-vectors" export "$W/softmax/checkpoint_best.pt" "$W/vectors.en.vec"
train continuous --output-layer continuous --criterion vmf_nll --target-vectors "$W/vectors.en.vec" \
  --target-vectors-center --tie-input-to-target-vectors
train tied --output-layer tied "${LS[@]}"
train joint --output-layer joint --joint-dim 128 "${LS[@]}"
train fixed --output-layer fixed "${LS[@]}"
[ -s "$W/pairs.de-en.txt" ] || "$B/outlayers-pairing" --src-text work/multi30k/bpe/train.de \
  --tgt-text work/multi30k/bpe/train.en --src-dict "$D/dict.de.txt" --tgt-dict "$D/dict.en.txt" \
  -o "$W/pairs.de-en.txt"
train shared-private --embeddings shared-private --output-layer tied --pairing "$W/pairs.de-en.txt" \
  --shared-private-lambdas 0.9,0.7,0.5 "${LS[@]}"
