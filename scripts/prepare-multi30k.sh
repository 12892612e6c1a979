#!/usr/bin/env bash
# Multi30k (task 1) for fairseq: Moses tokenisation (sacremoses), joint fastBPE, fairseq-preprocess.
#
#   bash scripts/prepare-multi30k.sh [--src de] [--tgt en] [--bpe-merges 8000] [--out work/multi30k]
#                                    [--no-lowercase] [--force]
#
# Raw data, first found wins:
#   1. MULTI30K_DIR=/path/to/raw (train.de, val.de, test_2016_flickr.de, ... as in the official repository);
#      ../shared/data/multi30k is used when it exists and MULTI30K_DIR is unset;
#   2. a download of data/task1/raw/*.gz from the official multi30k/dataset repository when online;
#   3. a generated synthetic corpus (with a clear message), so the pipeline still runs offline.
# Output: OUT/{raw,tok,bpe}/ and OUT/data-bin/SRC-TGT/ (binarised, separate dictionaries). A finished output is
# never overwritten: the script stops and tells you to pass --force (or choose another --out).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib/prepare-common.sh"
pc_setup prepare-multi30k
SRC=de; TGT=en; MERGES=8000; OUT=$ROOT/work/multi30k; LOWER=1; FORCE=0
while [ $# -gt 0 ]; do
  case "$1" in
    --src) SRC=$(pc_arg "$@"); shift 2;; --tgt) TGT=$(pc_arg "$@"); shift 2;;
    --bpe-merges) MERGES=$(pc_arg "$@"); shift 2;;
    --out) OUT=$(pc_arg "$@"); shift 2;; --no-lowercase) LOWER=0; shift;; --force) FORCE=1; shift;;
    -h|--help) pc_help "$0"; exit 0;;
    *) pc_unknown "$1";;
  esac
done
for l in "$SRC" "$TGT"; do
  case "$l" in de|en|fr|cs) ;; *) usage_error "language '$l' is not in Multi30k (de, en, fr, cs)";; esac
done
[ "$SRC" != "$TGT" ] || usage_error "--src and --tgt must differ"
pc_int --bpe-merges "$MERGES"
pc_require_tools fast fairseq-preprocess sacremoses python
DEST=$OUT/data-bin/$SRC-$TGT
pc_skip_if_done "$DEST"
mkdir -p "$OUT/raw" "$OUT/tok" "$OUT/bpe"

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
    python -m fairseq_outlayers.cli.synthetic --out "$OUT/raw" --src "$SRC" --tgt "$TGT" \
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

# ---- 3. joint BPE (fastBPE) ---------------------------------------------------------------------------------
log "learn $MERGES joint BPE merges"
pc_learn_bpe "$MERGES" "$OUT/bpe/codes" "$OUT/tok/train.$SRC" "$OUT/tok/train.$TGT"
for s in $SPLITS; do for l in "$SRC" "$TGT"; do
  pc_apply_bpe "$OUT/bpe/codes" "$OUT/tok/$s.$l" "$OUT/bpe/$s.$l"
done; done

# ---- 4. binarise ----------------------------------------------------------------------------------------------
log "fairseq-preprocess -> $DEST"
pc_binarise "$DEST" "$OUT/preprocess.$SRC-$TGT.log" --source-lang "$SRC" --target-lang "$TGT" \
  --trainpref "$OUT/bpe/train" --validpref "$OUT/bpe/val" --testpref "$OUT/bpe/test_2016_flickr" --workers 2
cp "$OUT/bpe/codes" "$DEST/bpecodes"
pc_mark_done "$DEST" "origin: $ORIGIN" "lowercase: $LOWER" "bpe_merges: $MERGES"
log "done: $DEST (source: $ORIGIN)"
