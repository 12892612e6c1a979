#!/usr/bin/env bash
# Train one output-layer method on one dataset with the papers' settings, as ONE plain fairseq-train command.
#
#   bash scripts/train.sh [--print-args | --dry-run] METHOD DATASET [extra fairseq-train options]
#   bash scripts/train.sh --list                  # the recipes: METHOD DATASET, one a line
#
# The recipe of METHOD on DATASET is the fairseq-hydra-train config configs/DATASET/METHOD.yaml (the files there
# are the methods); configs/datasets.yaml says where each dataset's prepared data is and how it is scored.
# scripts/lib/recipes.py turns the recipe into fairseq-train arguments; docs/recipes.md gives the sources of
# every setting. The script prints the settings, then the fairseq-train command, then runs it, and finally the
# evaluate.sh command (with the recipe's generation.beam / generation.lenpen). Extra options are appended to
# the command, so they override the recipe (fairseq keeps the last value): e.g. --max-update 500 --cpu.
#   --print-args  print the fairseq-train arguments, one per line, and exit (nothing is created or run)
#   --dry-run     print the commands (target vectors / pairing file when missing, fairseq-train) without running
#
# Environment (defaults in brackets); they fill the recipe's ??? values and its checkpoint folder:
#   DATA_BIN    binarised data (task.data)  [PREPARED/data-bin/SRC-TGT, PREPARED from configs/datasets.yaml]
#   TEXT_DIR    BPE'd training text     [the same preparation's bpe/ folder] (target vectors, word pairing)
#   SAVE_DIR    checkpoints (checkpoint.save_dir)  [checkpoints/DATASET/METHOD]
#   VECTORS_FROM  recipes with model.target_vectors: how the target word vectors are made when VECTORS is missing
#               [softmax]. softmax: two stages; first the dataset's softmax recipe trains VECTORS_UPDATES updates on
#               the same DATA_BIN (checkpoints in VECTORS_SAVE_DIR), then the output word matrix of its last
#               checkpoint (of its best with VECTORS_UPDATES=full) is exported (outlayers-vectors export; m = the
#               model's width). fasttext: the paper's vectors, trained by
#               scripts/train_target_vectors.py on TEXT_DIR/train.TGT (m = VECTOR_DIM). A .pt file: export the
#               output matrix of that softmax checkpoint (same target dictionary), e.g. a baseline you trained.
#   VECTORS_UPDATES  softmax: updates of the first stage, or full: the whole softmax recipe, its best checkpoint
#               exported (the converged teacher of the results; the recipe's own schedule) [800]
#   VECTORS_SAVE_DIR softmax: its checkpoints [SAVE_DIR's folder/softmax-vectors-VECTORS_UPDATES]
#   VECTORS_ARGS  softmax: extra fairseq-train options of the first stage [the device, precision and batch options
#               among the extra options: --cpu --fp16 --amp --bf16 --memory-efficient-fp16 --max-tokens
#               --batch-size --update-freq --distributed-world-size]
#   VECTORS     recipes with model.target_vectors: the target word vectors, made when missing as VECTORS_FROM says
#               [softmax: VECTORS_SAVE_DIR/output.TGT.vec; fasttext: TEXT_DIR/../vectors.TGT.VECTOR_DIMd.vec;
#               a checkpoint C.pt: C.output.TGT.vec]; on a dataset with word_targets_for_vectors (multi30k) the
#               word-level preparation is used: data-bin/SRC-TGT-word, bpe-word/, vectors.word.TGT.VECTOR_DIMd.vec
#   VECTOR_DIM  fasttext: the dimension m of those vectors [300]
#   VECTOR_WORKERS  gensim threads for those vectors [1 on multi30k: about a minute, and the same file on every run
#               and on every x86-64 machine with AVX2 and the same gensim/numpy/scipy (the script pins OpenBLAS's
#               kernel); elsewhere the script's default, cores - 1, whose vectors differ from run to run]
#   PAIRING     recipes with model.pairing: the pairing file [TEXT_DIR/../pairing.SRC-TGT.txt, made when missing
#               with python -m fairseq_outlayers.tools.pairing (fast_align through systran-align)]
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
usage() { echo "$PROG: $*" >&2; echo "usage: bash scripts/train.sh [--print-args|--dry-run] METHOD DATASET [fairseq-train options] | --list" >&2; exit 2; }

MODE=run
while [ $# -gt 0 ]; do
  case "$1" in
    --print-args) MODE=print; shift;;
    --dry-run) MODE=dry; shift;;
    --list) MODE=list; shift;;
    -h|--help) awk 'NR == 1 { next } /^#/ { print; next } { exit }' "$0"; exit 0;;
    --*) usage "unknown option '$1' before METHOD (fairseq-train options go after DATASET)";;
    *) break;;
  esac
done
VENV_BIN=${VENV_BIN:-$ROOT/.venv/bin}
[ -d "$VENV_BIN" ] && export PATH="$VENV_BIN:$PATH"
RECIPES=$ROOT/scripts/lib/recipes.py
PY=python; command -v python >/dev/null 2>&1 || PY=python3
if [ "$MODE" = list ]; then exec "$PY" "$RECIPES" list; fi
[ $# -ge 2 ] || usage "METHOD and DATASET are required"
METHOD=$1; DATASET=$2; shift 2
EXTRA=("$@")

# ---- the recipe: configs/DATASET/METHOD.yaml and the dataset's entry of configs/datasets.yaml -----------------
SETTINGS=$("$PY" "$RECIPES" settings "$METHOD" "$DATASET" 2>&1) || {
  [ $? = 2 ] && usage "$SETTINGS"; die "$SETTINGS"; }
while IFS='=' read -r key value; do
  case "$key" in
    recipe) RECIPE=$value;; src) SRC=$value;; tgt) TGT=$value;; prepared) PREP=$value;; word) WORD=$value;;
    fill) FILL=" $value ";; evaluate) EVAL=$value;;
  esac
done <<< "$SETTINGS"
VECTOR_DIM=${VECTOR_DIM:-300}
DATA_BIN=${DATA_BIN:-$PREP/data-bin/$SRC-$TGT$WORD}
TEXT_DIR=${TEXT_DIR:-$(dirname "$(dirname "$DATA_BIN")")/bpe$WORD}
SAVE_DIR=${SAVE_DIR:-$ROOT/checkpoints/$DATASET/$METHOD}
PAIRING=${PAIRING:-$(dirname "$TEXT_DIR")/pairing.$SRC-$TGT.txt}
VALUES=(task.data="$DATA_BIN" checkpoint.save_dir="$SAVE_DIR"); PREP_STEP=
VECTORS_FROM=${VECTORS_FROM:-softmax}
VECTORS_UPDATES=${VECTORS_UPDATES:-800}
VECTORS_SAVE_DIR=${VECTORS_SAVE_DIR:-$(dirname "$SAVE_DIR")/softmax-vectors-$VECTORS_UPDATES}
case "$FILL" in *" model.target_vectors "*)
  case "$VECTORS_FROM" in
    softmax) VECTORS=${VECTORS:-$VECTORS_SAVE_DIR/output.$TGT.vec}
      case "$VECTORS_UPDATES" in full) ;; ''|*[!0-9]*|0)
        die "VECTORS_UPDATES must be a positive number of updates or full (the whole softmax recipe), got '$VECTORS_UPDATES'";; esac;;
    fasttext) VECTORS=${VECTORS:-$(dirname "$TEXT_DIR")/vectors${WORD:+.word}.$TGT.${VECTOR_DIM}d.vec};;
    *.pt) VECTORS=${VECTORS:-${VECTORS_FROM%.pt}.output.$TGT.vec};;
    *) die "VECTORS_FROM must be softmax, fasttext or a softmax checkpoint FILE.pt, got '$VECTORS_FROM'";;
  esac
  VALUES+=(model.target_vectors="$VECTORS"); PREP_STEP=vectors;;
esac
case "$FILL" in *" model.pairing "*) VALUES+=(model.pairing="$PAIRING"); PREP_STEP=pairing;; esac
RECIPE_ARGS=$("$PY" "$RECIPES" args "$METHOD" "$DATASET" "${VALUES[@]}") || exit 1
mapfile -t RECIPE_ARGS <<< "$RECIPE_ARGS"
ARGS=("${RECIPE_ARGS[0]}" --user-dir "$ROOT/fairseq_outlayers" "${RECIPE_ARGS[@]:1}" ${EXTRA[@]+"${EXTRA[@]}"})

if [ "$MODE" = print ]; then
  printf '%s\n' "${ARGS[@]}"
  exit 0
fi

quote() { local out= a; for a in "$@"; do out+=" $(printf '%q' "$a")"; done; echo "${out# }"; }
echo "== $METHOD on $DATASET ($SRC-$TGT)"
echo "   recipe: $RECIPE"
echo "   data: $DATA_BIN"
echo "   checkpoints: $SAVE_DIR"
if [ "$MODE" = run ]; then
  [ -f "$DATA_BIN/dict.$SRC.txt" ] && [ -f "$DATA_BIN/dict.$TGT.txt" ] || \
    die "$DATA_BIN has no dict.$SRC.txt/dict.$TGT.txt; prepare the data first (scripts/prepare-*.sh, see docs/recipes.md) or set DATA_BIN"
fi

# ---- files the method needs: made when missing, never overwritten ---------------------------------------------
if [ "$PREP_STEP" = vectors ] && [ ! -f "$VECTORS" ] && [ "$VECTORS_FROM" != fasttext ]; then
  CKPT=$VECTORS_FROM
  if [ "$VECTORS_FROM" = softmax ]; then
    CKPT=$VECTORS_SAVE_DIR/checkpoint_last.pt; STOP=(--max-update "$VECTORS_UPDATES"); LENGTH="$VECTORS_UPDATES updates"
    if [ "$VECTORS_UPDATES" = full ]; then
      CKPT=$VECTORS_SAVE_DIR/checkpoint_best.pt; STOP=(); LENGTH="its whole schedule, best checkpoint"
    fi
    if [ -z "${VECTORS_ARGS+set}" ]; then  # the device, precision and batch options of the extra options
      STAGE1=()
      for ((i = 0; i < ${#EXTRA[@]}; i++)); do
        case "${EXTRA[$i]}" in
          --cpu|--fp16|--amp|--bf16|--memory-efficient-fp16) STAGE1+=("${EXTRA[$i]}");;
          --max-tokens|--batch-size|--update-freq|--distributed-world-size)
            STAGE1+=("${EXTRA[$i]}" "${EXTRA[$((i + 1))]:-}"); i=$((i + 1));;
        esac
      done
    else
      read -r -a STAGE1 <<< "$VECTORS_ARGS"
    fi
    echo "== target vectors $VECTORS are missing; first stage: the softmax recipe, $LENGTH, on $DATA_BIN"
    STAGE=(bash "$ROOT/scripts/train.sh" softmax "$DATASET" ${STAGE1[@]+"${STAGE1[@]}"} ${STOP[@]+"${STOP[@]}"})
    export TRAIN_SH_FIRST_STAGE=1
    if [ "$MODE" = run ]; then
      mkdir -p "$VECTORS_SAVE_DIR"
      set +o pipefail
      DATA_BIN=$DATA_BIN SAVE_DIR=$VECTORS_SAVE_DIR "${STAGE[@]}" 2>&1 | tee -a "$VECTORS_SAVE_DIR/train.log"
      STATUS=${PIPESTATUS[0]}; set -o pipefail
      # fairseq's prefetch thread can abort the interpreter at exit (134) after the last checkpoint was saved
      if [ "$STATUS" != 0 ] && ! { [ "$STATUS" = 134 ] && tail -n 20 "$VECTORS_SAVE_DIR/train.log" | grep -q "done training in"; }; then
        die "the first stage (softmax, $VECTORS_SAVE_DIR) failed; see $VECTORS_SAVE_DIR/train.log"
      fi
    else
      DATA_BIN=$DATA_BIN SAVE_DIR=$VECTORS_SAVE_DIR "${STAGE[0]}" "${STAGE[1]}" --dry-run "${STAGE[@]:2}" || exit 1
    fi
    unset TRAIN_SH_FIRST_STAGE
  fi
  CMD=(outlayers-vectors export "$CKPT" "$VECTORS")
  echo "== exporting the output word matrix of $CKPT as the target vectors"
  echo "+ $(quote "${CMD[@]}")"
  if [ "$MODE" = run ]; then
    [ -f "$CKPT" ] || die "$CKPT not found: VECTORS_FROM must name a softmax checkpoint of this data (or be softmax or fasttext)"
    "${CMD[@]}"
  fi
fi
if [ "$PREP_STEP" = vectors ] && [ ! -f "$VECTORS" ] && [ "$VECTORS_FROM" = fasttext ]; then
  CMD=(python "$ROOT/scripts/train_target_vectors.py" --input "$TEXT_DIR/train.$TGT" --output "$VECTORS"
       --algorithm fasttext --dim "$VECTOR_DIM" --dict "$DATA_BIN/dict.$TGT.txt")
  if [ -n "${VECTOR_WORKERS:-}" ]; then CMD+=(--workers "$VECTOR_WORKERS")
  elif [ "$DATASET" = multi30k ]; then CMD+=(--workers 1); fi
  echo "== target vectors $VECTORS are missing; training them (fastText, m = $VECTOR_DIM) on $TEXT_DIR/train.$TGT"
  echo "+ $(quote "${CMD[@]}")"
  if [ "$MODE" = run ]; then
    [ -f "$TEXT_DIR/train.$TGT" ] || die "$TEXT_DIR/train.$TGT not found: set TEXT_DIR to the tokenised/BPE'd training text, or VECTORS to an existing .vec file"
    "${CMD[@]}"
  fi
fi
if [ "$PREP_STEP" = pairing ] && [ ! -f "$PAIRING" ]; then
  CMD=(python -m fairseq_outlayers.tools.pairing --src-text "$TEXT_DIR/train.$SRC" --tgt-text "$TEXT_DIR/train.$TGT"
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
[ -n "${TRAIN_SH_FIRST_STAGE:-}" ] || echo "== afterwards: bash scripts/evaluate.sh $SAVE_DIR/checkpoint_best.pt $DATA_BIN $EVAL"
[ "$MODE" = run ] || exit 0
# an unreadable checkpoint_last.pt (fairseq copies it non-atomically) resumes from the newest intact checkpoint
LAST_DIR=$SAVE_DIR
for ((i = 0; i + 1 < ${#ARGS[@]}; i++)); do [ "${ARGS[$i]}" != --save-dir ] || LAST_DIR=${ARGS[$((i + 1))]}; done
if [ -f "$LAST_DIR/checkpoint_last.pt" ]; then
  RESUME=$(python -m fairseq_outlayers.tools.resume "${ARGS[@]}") || exit 1
  [ -z "$RESUME" ] || { mapfile -t RESUME_ARGS <<< "$RESUME"; ARGS+=("${RESUME_ARGS[@]}"); }
fi
exec fairseq-train "${ARGS[@]}"
