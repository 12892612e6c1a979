#!/usr/bin/env bash
# Multi30k (task 1) for fairseq: Moses tokenisation (sacremoses), joint fastBPE, fairseq-preprocess.
#
#   bash scripts/prepare-multi30k.sh [--src de] [--tgt en] [--bpe-merges 8000] [--out work/multi30k]
#                                    [--no-lowercase] [--force]
#                                    [--word-target [--tgt-min-count 2]]
#
# --word-target: the continuous-output setup of Kumar & Tsvetkov (2019): BPE (learned on the source side only) on
# the source, WORDS on the target side; target words seen fewer than --tgt-min-count times in training become
# <unk>. Output goes to OUT/data-bin/SRC-TGT-word (train target vectors on OUT/tok/train.TGT), next to the BPE
# data, which it neither needs nor touches.
#
# Raw data, first found wins:
#   1. MULTI30K_DIR=/path/to/raw (train.de, val.de, test_2016_flickr.de, ... as in the official repository);
#      ../shared/data/multi30k is used when it exists and MULTI30K_DIR is unset;
#   2. a download of data/task1/raw/*.gz from the official multi30k/dataset repository when online;
#   3. a generated synthetic corpus (with a clear message), so the pipeline still runs offline.
# Output: OUT/{raw,tok,bpe}/ and OUT/data-bin/SRC-TGT/ (binarised, separate dictionaries). A finished output is
# never overwritten: the script stops and tells you to pass --force (or choose another --out). --word-target in
# both directions (de-en and en-de) needs two --out directories: the script refuses to mix them in one.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib/prepare-common.sh"
pc_setup prepare-multi30k
SRC=de; TGT=en; MERGES=8000; OUT=$ROOT/work/multi30k; LOWER=1; FORCE=0; WORD=0; TGT_MIN=2
while [ $# -gt 0 ]; do
  case "$1" in
    --src) SRC=$(pc_arg "$@"); shift 2;; --tgt) TGT=$(pc_arg "$@"); shift 2;;
    --bpe-merges) MERGES=$(pc_arg "$@"); shift 2;;
    --out) OUT=$(pc_arg "$@"); shift 2;; --no-lowercase) LOWER=0; shift;; --force) FORCE=1; shift;;
    --word-target) WORD=1; shift;; --tgt-min-count) TGT_MIN=$(pc_arg "$@"); shift 2;;
    -h|--help) pc_help "$0"; exit 0;;
    *) pc_unknown "$1";;
  esac
done
for l in "$SRC" "$TGT"; do
  case "$l" in de|en|fr|cs) ;; *) usage_error "language '$l' is not in Multi30k (de, en, fr, cs)";; esac
done
[ "$SRC" != "$TGT" ] || usage_error "--src and --tgt must differ"
pc_int --bpe-merges "$MERGES"; pc_int --tgt-min-count "$TGT_MIN"
pc_require_tools fast fairseq-preprocess sacremoses python
if [ "$WORD" = 1 ]; then DEST=$OUT/data-bin/$SRC-$TGT-word; BPE=$OUT/bpe-word; else DEST=$OUT/data-bin/$SRC-$TGT; BPE=$OUT/bpe; fi
pc_skip_if_done "$DEST"
if [ "$WORD" = 1 ]; then
  # OUT/bpe-word/ holds each language once: BPE text for a source (with codes.LANG), words for a target. The reverse
  # direction in the same OUT would overwrite the other's text (the target vectors and lexicons read it).
  if [ -e "$BPE/codes.$TGT" ]; then
    die "$BPE already holds '$TGT' as a BPE source (a $TGT-$SRC --word-target preparation); preparing it as word targets would overwrite that text: give this direction its own --out (e.g. --out $OUT-$SRC-$TGT)"
  fi
  if [ -e "$BPE/train.$SRC" ] && [ ! -e "$BPE/codes.$SRC" ]; then
    die "$BPE already holds '$SRC' as word targets (a $TGT-$SRC --word-target preparation); preparing it as a BPE source would overwrite that text: give this direction its own --out (e.g. --out $OUT-$SRC-$TGT)"
  fi
fi
mkdir -p "$OUT/raw" "$OUT/tok" "$BPE"

# ---- 1. raw data ---------------------------------------------------------------------------------------------
SPLITS="train val test_2016_flickr"
LOCAL=${MULTI30K_DIR:-}
[ -n "$LOCAL" ] || { [ -d "$ROOT/../shared/data/multi30k" ] && LOCAL=$ROOT/../shared/data/multi30k; } || true
have_raw() { for s in $SPLITS; do for l in "$SRC" "$TGT"; do [ -s "$1/$s.$l" ] || return 1; done; done; }
if [ -n "$LOCAL" ]; then
  have_raw "$LOCAL" || die "MULTI30K_DIR=$LOCAL lacks one of {train,val,test_2016_flickr}.{$SRC,$TGT}; point it at the raw task-1 files"
  log "raw data: local copy $LOCAL"
  for s in $SPLITS; do for l in "$SRC" "$TGT"; do cp "$LOCAL/$s.$l" "$OUT/raw/$s.$l"; done; done
  ORIGIN="local copy ($LOCAL)"
else
  URL=https://github.com/multi30k/dataset/raw/master/data/task1/raw
  ok=1
  for s in $SPLITS; do for l in "$SRC" "$TGT"; do
    pc_download "$URL/$s.$l.gz" "$OUT/raw/$s.$l" || ok=0
  done; done
  if [ "$ok" = 1 ]; then
    log "raw data: downloaded from $URL"; ORIGIN="download ($URL)"
  else
    log "WARNING: no MULTI30K_DIR and the official download failed (offline?): generating a SYNTHETIC corpus."
    log "WARNING: BLEU on it says nothing about Multi30k; set MULTI30K_DIR=/path/to/multi30k/raw for real data."
    python -m fairseq_outlayers.tools.synthetic --out "$OUT/raw" --src "$SRC" --tgt "$TGT" \
      --splits train:29000 val:1014 test_2016_flickr:1000
    ORIGIN="synthetic (generated)"
  fi
fi
pc_check_parallel "$OUT/raw" "$SRC" "$TGT" $SPLITS

# ---- 2. tokenisation (sacremoses), optional lowercasing --------------------------------------------------------
for s in $SPLITS; do for l in "$SRC" "$TGT"; do
  log "tokenise $s.$l"
  pc_tokenise "$l" "$LOWER" "$OUT/raw/$s.$l" "$OUT/tok/$s.$l"
done; done

# ---- 3. BPE: joint, or (--word-target) on the source side only with the target left as words ------------------
if [ "$WORD" = 1 ]; then
  log "learn $MERGES source-side BPE merges (target stays word-level)"
  pc_learn_bpe "$MERGES" "$BPE/codes.$SRC" "$OUT/tok/train.$SRC"
  for s in $SPLITS; do
    pc_apply_bpe "$BPE/codes.$SRC" "$OUT/tok/$s.$SRC" "$BPE/$s.$SRC"
    cp "$OUT/tok/$s.$TGT" "$BPE/$s.$TGT"
  done
  CODES=$BPE/codes.$SRC; TGT_OPTS=(--thresholdtgt "$TGT_MIN")
else
  log "learn $MERGES joint BPE merges"
  pc_learn_bpe "$MERGES" "$BPE/codes" "$OUT/tok/train.$SRC" "$OUT/tok/train.$TGT"
  for s in $SPLITS; do for l in "$SRC" "$TGT"; do
    pc_apply_bpe "$BPE/codes" "$OUT/tok/$s.$l" "$BPE/$s.$l"
  done; done
  CODES=$BPE/codes; TGT_OPTS=()
fi

# ---- 4. binarise ----------------------------------------------------------------------------------------------
log "fairseq-preprocess -> $DEST"
pc_binarise "$DEST" "$OUT/preprocess.$(basename "$DEST").log" --source-lang "$SRC" --target-lang "$TGT" \
  --trainpref "$BPE/train" --validpref "$BPE/val" --testpref "$BPE/test_2016_flickr" --workers 2 \
  ${TGT_OPTS[@]+"${TGT_OPTS[@]}"}
if [ "$WORD" = 1 ]; then
  cp "$CODES" "$DEST/bpecodes.$SRC"
  pc_mark_done "$DEST" "origin: $ORIGIN" "lowercase: $LOWER" "src_bpe_merges: $MERGES" "tgt_min_count: $TGT_MIN"
else
  cp "$CODES" "$DEST/bpecodes"
  pc_mark_done "$DEST" "origin: $ORIGIN" "lowercase: $LOWER" "bpe_merges: $MERGES"
fi
log "done: $DEST (source: $ORIGIN)"
