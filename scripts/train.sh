#!/usr/bin/env bash
# Train one output-layer method on one dataset with the papers' settings, as ONE plain fairseq-train command.
#
#   bash scripts/train.sh [--print-args | --dry-run] METHOD DATASET [extra fairseq-train options]
#
#   METHOD   softmax | tied | joint | fixed | continuous | shared-private
#   DATASET  multi30k | iwslt14 | wmt14 | wmt16-word
#
# The script prints the settings, then the fairseq-train command, then runs it. Extra options are appended to
# the command, so they override the recipe (fairseq keeps the last value): e.g. --max-update 500 --cpu.
#   --print-args  print the fairseq-train arguments, one per line, and exit (nothing is created or run)
#   --dry-run     print the commands (target vectors / pairing file when missing, fairseq-train) without running
#
# Environment (defaults in brackets):
#   DATA_BIN    binarised data          [work/<prepared dataset>/data-bin/SRC-TGT, from scripts/prepare-*.sh]
#   TEXT_DIR    BPE'd training text     [the same preparation's bpe/ folder] (target vectors, word pairing)
#   SAVE_DIR    checkpoints             [checkpoints/DATASET/METHOD]
#   VECTORS     continuous: target word vectors  [TEXT_DIR/../vectors.TGT.VECTOR_DIMd.vec, trained when missing
#               with scripts/train_target_vectors.py (fastText, gensim) on TEXT_DIR/train.TGT]; continuous on
#               multi30k uses the word-level preparation: data-bin/SRC-TGT-word, bpe-word/, vectors.word.TGT.VECTOR_DIMd.vec
#   VECTOR_DIM  continuous: m [300]
#   PAIRING     shared-private: pairing file [TEXT_DIR/../pairing.SRC-TGT.txt, made when missing with
#               python -m fairseq_outlayers.pairing (fast_align through systran-align)]
#
# Settings (papers; see docs/recipes.md for the sources):
#   multi30k   de-en, the demo's 3+3-layer d=256 Transformer (outlayers_transformer_small): Adam (0.9, 0.98),
#              lr 0.002, inverse_sqrt with 300 warm-up updates, dropout 0.3, label smoothing 0.1, weight decay
#              1e-4, 4096 tokens per batch, 3000 updates
#   iwslt14    de-en, fairseq's IWSLT'14 Transformer (outlayers_transformer_iwslt_de_en): Adam (0.9, 0.98), lr 5e-4,
#              inverse_sqrt with 4000 warm-up updates, dropout 0.3, label smoothing 0.1, weight decay 1e-4,
#              4096 tokens per batch, 50k updates
#   wmt14      en-de, Transformer base (Liu et al. 2019, section 3.1): Adam (0.9, 0.98, eps 1e-8), lr 7e-4,
#              inverse_sqrt with 4000 warm-up updates, dropout 0.1, label smoothing 0.1, ~25k tokens per update
#              (4096 x update-freq 6 on one GPU), 100k updates; evaluate with beam 4, length penalty 0.6
#   wmt16-word de-en word-level targets, the vMF paper's LSTM (outlayers_lstm_vmf: 1-layer biLSTM encoder, 2-layer
#              decoder of 1024, 512-d embeddings; Kumar & Tsvetkov 2019, Table 7): Adam, lr 2e-4 for softmax
#              models and 5e-4 for continuous outputs, 64 sentences per batch, cross-entropy, gradient norm
#              clipped at 5, 15 epochs; evaluate with beam 1 (the paper's greedy decoding)
#   softmax/tied   --output-layer softmax / tied
#   joint          --output-layer joint (the *_joint presets), d_j = 512; on wmt14 d_j = 2048 trained with 25%
#                  negative sampling (--criterion sampled_softmax --sample-ratio 0.25, Pappas et al. 2018 sec. 4)
#   fixed          --output-layer fixed: uniform [-10, 10] rows, each normalised, frozen (Shalev et al. 2021)
#   continuous     --output-layer continuous, --criterion vmf_nll (released form, lambda 0.2), m = 300 vectors,
#                  decoder input tied to them (--tie-input-to-target-vectors; Kumar & Tsvetkov 2019 sec. 4.4);
#                  multi30k: word-level targets (prepare-multi30k.sh --word-target), --target-vectors-center
#   shared-private --embeddings shared-private --output-layer tied, lambda = (0.9, 0.7, 0.5) (Liu et al. 2019)
#
# Multi-GPU (one node, N GPUs): fairseq-train uses every visible GPU by itself; keep the tokens per update the
# same by dividing --update-freq by N, e.g. for wmt14 on 8 GPUs:
#   CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7 bash scripts/train.sh joint wmt14 --update-freq 1 --max-tokens 3072 --fp16
# Several nodes: run the printed command on every node under torchrun (or SLURM) with
#   --distributed-world-size $((NODES*GPUS)) --distributed-init-method tcp://MASTER:PORT (fairseq's usual way).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PROG=train.sh
die() { echo "$PROG: $*" >&2; exit 1; }
usage() { echo "$PROG: $*" >&2; echo "usage: bash scripts/train.sh [--print-args|--dry-run] METHOD DATASET [fairseq-train options]" >&2; exit 2; }

MODE=run
while [ $# -gt 0 ]; do
  case "$1" in
    --print-args) MODE=print; shift;;
    --dry-run) MODE=dry; shift;;
    -h|--help) awk 'NR == 1 { next } /^#/ { print; next } { exit }' "$0"; exit 0;;
    --*) usage "unknown option '$1' before METHOD (fairseq-train options go after DATASET)";;
    *) break;;
  esac
done
[ $# -ge 2 ] || usage "METHOD and DATASET are required"
METHOD=$1; DATASET=$2; shift 2
EXTRA=("$@")
case "$METHOD" in softmax|tied|joint|fixed|continuous|shared-private) ;;
  *) usage "unknown METHOD '$METHOD'; choose softmax, tied, joint, fixed, continuous or shared-private";; esac

# ---- dataset settings -----------------------------------------------------------------------------------------
case "$DATASET" in
  multi30k)
    SRC=de; TGT=en; PREP=$ROOT/work/multi30k; ARCH=outlayers_transformer_small
    TRAIN=(--optimizer adam --adam-betas "(0.9,0.98)" --lr 0.002 --lr-scheduler inverse_sqrt --warmup-updates 300
           --clip-norm 0.0 --weight-decay 0.0001 --dropout 0.3 --max-tokens 4096 --max-update 3000)
    CRIT=(--criterion label_smoothed_cross_entropy --label-smoothing 0.1)
    EVAL="--beam 5 --lenpen 1.0 --src $SRC --tgt $TGT --lowercase --raw-ref $PREP/raw/test_2016_flickr.$TGT";;
  iwslt14)
    SRC=de; TGT=en; PREP=$ROOT/work/iwslt14; ARCH=outlayers_transformer_iwslt_de_en
    TRAIN=(--optimizer adam --adam-betas "(0.9,0.98)" --lr 0.0005 --lr-scheduler inverse_sqrt --warmup-updates 4000
           --clip-norm 0.0 --weight-decay 0.0001 --dropout 0.3 --max-tokens 4096 --max-update 50000)
    CRIT=(--criterion label_smoothed_cross_entropy --label-smoothing 0.1)
    EVAL="--beam 5 --lenpen 1.0 --src $SRC --tgt $TGT --lowercase --raw-ref $PREP/raw/test.$TGT";;
  wmt14)
    SRC=en; TGT=de; PREP=$ROOT/work/wmt14_en_de; ARCH=outlayers_transformer_wmt_en_de
    TRAIN=(--optimizer adam --adam-betas "(0.9,0.98)" --adam-eps 1e-08 --lr 0.0007 --lr-scheduler inverse_sqrt
           --warmup-updates 4000 --warmup-init-lr 1e-07 --clip-norm 0.0 --weight-decay 0.0 --dropout 0.1
           --max-tokens 4096 --update-freq 6 --max-update 100000)
    CRIT=(--criterion label_smoothed_cross_entropy --label-smoothing 0.1)
    EVAL="--beam 4 --lenpen 0.6 --src $SRC --tgt $TGT --raw-ref $PREP/raw/test.$TGT";;
  wmt16-word)
    SRC=de; TGT=en; PREP=$ROOT/work/wmt16_de_en_word; ARCH=outlayers_lstm_vmf
    TRAIN=(--optimizer adam --lr 0.0002 --lr-scheduler fixed --clip-norm 5.0 --batch-size 64 --max-epoch 15)
    CRIT=(--criterion cross_entropy)
    EVAL="--beam 1 --lenpen 1.0 --src $SRC --tgt $TGT --raw-ref $PREP/raw/test.$TGT";;
  *) usage "unknown DATASET '$DATASET'; choose multi30k, iwslt14, wmt14 or wmt16-word";;
esac
VECTOR_DIM=${VECTOR_DIM:-300}
if [ "$METHOD" = continuous ] && [ "$DATASET" = multi30k ]; then
  # word-level targets (prepare-multi30k.sh --word-target), as the paper; vectors on the word-level English side
  DATA_BIN=${DATA_BIN:-$PREP/data-bin/$SRC-$TGT-word}
  TEXT_DIR=${TEXT_DIR:-$(dirname "$(dirname "$DATA_BIN")")/bpe-word}
  VECTORS=${VECTORS:-$(dirname "$TEXT_DIR")/vectors.word.$TGT.${VECTOR_DIM}d.vec}
fi
DATA_BIN=${DATA_BIN:-$PREP/data-bin/$SRC-$TGT}
TEXT_DIR=${TEXT_DIR:-$(dirname "$(dirname "$DATA_BIN")")/bpe}
SAVE_DIR=${SAVE_DIR:-$ROOT/checkpoints/$DATASET/$METHOD}
VECTORS=${VECTORS:-$(dirname "$TEXT_DIR")/vectors.$TGT.${VECTOR_DIM}d.vec}
PAIRING=${PAIRING:-$(dirname "$TEXT_DIR")/pairing.$SRC-$TGT.txt}

# ---- method settings (the named presets where they exist) ------------------------------------------------------
preset() {  # preset SUFFIX: ARCH_SUFFIX when that architecture is registered, else empty
  case "${ARCH}_$1" in
    outlayers_transformer_small_joint|outlayers_transformer_iwslt_de_en_joint|outlayers_transformer_wmt_en_de_joint|\
    outlayers_transformer_small_fixed|outlayers_transformer_small_continuous|outlayers_lstm_vmf_continuous|\
    outlayers_transformer_small_shared_private) echo "${ARCH}_$1";;
    outlayers_transformer_wmt_en_de_shared_private) echo outlayers_transformer_shared_private;;  # base = wmt_en_de
    *) echo "";;
  esac
}
METHOD_ARGS=(); PREP_STEP=
case "$METHOD" in
  softmax) METHOD_ARGS=(--arch "$ARCH" --output-layer softmax);;
  tied) METHOD_ARGS=(--arch "$ARCH" --output-layer tied);;
  joint)
    a=$(preset joint); if [ -n "$a" ]; then METHOD_ARGS=(--arch "$a"); else METHOD_ARGS=(--arch "$ARCH" --output-layer joint); fi
    if [ "$DATASET" = wmt14 ]; then
      METHOD_ARGS+=(--joint-dim 2048)
      CRIT=(--criterion sampled_softmax --sample-ratio 0.25 --label-smoothing 0.1)
    else
      METHOD_ARGS+=(--joint-dim 512)
    fi;;
  fixed)
    a=$(preset fixed); if [ -n "$a" ]; then METHOD_ARGS=(--arch "$a"); else METHOD_ARGS=(--arch "$ARCH" --output-layer fixed); fi;;
  continuous)
    a=$(preset continuous); if [ -n "$a" ]; then METHOD_ARGS=(--arch "$a"); else METHOD_ARGS=(--arch "$ARCH" --output-layer continuous); fi
    METHOD_ARGS+=(--target-vectors "$VECTORS" --tie-input-to-target-vectors)
    CRIT=(--criterion vmf_nll --vmf-variant released --vmf-released-lambda 0.2)
    # vectors trained on a corpus as small as Multi30k share one dominant direction: centre them (docs/results.md)
    [ "$DATASET" = multi30k ] && METHOD_ARGS+=(--target-vectors-center)
    if [ "$DATASET" = wmt16-word ]; then  # the paper: lr 5e-4 for continuous models (2e-4 for softmax models)
      TRAIN=(--optimizer adam --lr 0.0005 --lr-scheduler fixed --clip-norm 5.0 --batch-size 64 --max-epoch 15)
    fi
    EVAL=${EVAL/--beam 5/--beam 1}
    PREP_STEP=vectors;;
  shared-private)
    a=$(preset shared_private)
    if [ -n "$a" ]; then METHOD_ARGS=(--arch "$a"); else METHOD_ARGS=(--arch "$ARCH" --embeddings shared-private --output-layer tied); fi
    METHOD_ARGS+=(--pairing "$PAIRING" --shared-private-lambdas 0.9,0.7,0.5)
    PREP_STEP=pairing;;
esac

ARGS=("$DATA_BIN" --user-dir "$ROOT/fairseq_outlayers" --task translation --source-lang "$SRC" --target-lang "$TGT"
      "${METHOD_ARGS[@]}" "${CRIT[@]}" "${TRAIN[@]}" --seed 1 --save-dir "$SAVE_DIR" --log-format simple
      --log-interval 100 ${EXTRA[@]+"${EXTRA[@]}"})

if [ "$MODE" = print ]; then
  printf '%s\n' "${ARGS[@]}"
  exit 0
fi

quote() { local out= a; for a in "$@"; do out+=" $(printf '%q' "$a")"; done; echo "${out# }"; }
VENV_BIN=${VENV_BIN:-$ROOT/.venv/bin}
[ -d "$VENV_BIN" ] && export PATH="$VENV_BIN:$PATH"
echo "== $METHOD on $DATASET ($SRC-$TGT)"
echo "   data: $DATA_BIN"
echo "   model: ${METHOD_ARGS[*]}"
echo "   loss: ${CRIT[*]}"
echo "   training: ${TRAIN[*]}"
echo "   checkpoints: $SAVE_DIR"
if [ "$MODE" = run ]; then
  [ -f "$DATA_BIN/dict.$SRC.txt" ] && [ -f "$DATA_BIN/dict.$TGT.txt" ] || \
    die "$DATA_BIN has no dict.$SRC.txt/dict.$TGT.txt; prepare the data first (scripts/prepare-*.sh, see docs/recipes.md) or set DATA_BIN"
fi

# ---- files the method needs: made when missing, never overwritten ---------------------------------------------
if [ "$PREP_STEP" = vectors ] && [ ! -f "$VECTORS" ]; then
  CMD=(python "$ROOT/scripts/train_target_vectors.py" --input "$TEXT_DIR/train.$TGT" --output "$VECTORS"
       --algorithm fasttext --dim "$VECTOR_DIM" --dict "$DATA_BIN/dict.$TGT.txt")
  echo "== target vectors $VECTORS are missing; training them (fastText, m = $VECTOR_DIM) on $TEXT_DIR/train.$TGT"
  echo "+ $(quote "${CMD[@]}")"
  if [ "$MODE" = run ]; then
    [ -f "$TEXT_DIR/train.$TGT" ] || die "$TEXT_DIR/train.$TGT not found: set TEXT_DIR to the tokenised/BPE'd training text, or VECTORS to an existing .vec file"
    "${CMD[@]}"
  fi
fi
if [ "$PREP_STEP" = pairing ] && [ ! -f "$PAIRING" ]; then
  CMD=(python -m fairseq_outlayers.pairing --src-text "$TEXT_DIR/train.$SRC" --tgt-text "$TEXT_DIR/train.$TGT"
       --src-dict "$DATA_BIN/dict.$SRC.txt" --tgt-dict "$DATA_BIN/dict.$TGT.txt" -o "$PAIRING")
  echo "== pairing file $PAIRING is missing; making it (fast_align word alignment, Liu et al. 2019 sec. 2.2)"
  echo "+ $(quote "${CMD[@]}")"
  if [ "$MODE" = run ]; then
    [ -f "$TEXT_DIR/train.$SRC" ] && [ -f "$TEXT_DIR/train.$TGT" ] || die "$TEXT_DIR/train.{$SRC,$TGT} not found: set TEXT_DIR to the BPE'd training text, or PAIRING to an existing pairing file"
    (cd "$ROOT" && "${CMD[@]}")
  fi
fi

# ---- the training command -------------------------------------------------------------------------------------
echo "+ $(quote fairseq-train "${ARGS[@]}")"
echo "== afterwards: bash scripts/evaluate.sh $SAVE_DIR/checkpoint_best.pt $DATA_BIN $EVAL"
[ "$MODE" = run ] || exit 0
# an unreadable checkpoint_last.pt (fairseq copies it non-atomically) resumes from the newest intact checkpoint
LAST_DIR=$SAVE_DIR
for ((i = 0; i + 1 < ${#ARGS[@]}; i++)); do [ "${ARGS[$i]}" != --save-dir ] || LAST_DIR=${ARGS[$((i + 1))]}; done
if [ -f "$LAST_DIR/checkpoint_last.pt" ]; then
  RESUME=$(python -m fairseq_outlayers.cli.resume "${ARGS[@]}") || exit 1
  [ -z "$RESUME" ] || { mapfile -t RESUME_ARGS <<< "$RESUME"; ARGS+=("${RESUME_ARGS[@]}"); }
fi
exec fairseq-train "${ARGS[@]}"
