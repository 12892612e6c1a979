#!/usr/bin/env bash
# Word-level WMT'16 German-English for continuous outputs (Kumar & Tsvetkov 2019, section 4): Europarl v7 +
# Common Crawl + News Commentary v11 for training, newstest2015 valid, newstest2016 test; Moses punctuation
# normalisation and tokenisation (sacremoses), pairs of 1-100 tokens kept (the paper's maximum sentence
# length), BPE on the SOURCE side only (100k merges, the paper's value), WORDS on the target side with a
# vocabulary of the 50k most frequent words (the rest become <unk>), fairseq-preprocess.
#
#   bash scripts/prepare-wmt16-word.sh [--local DIR] [--src-bpe-merges 100000] [--tgt-vocab 50000]
#                                      [--max-len 100] [--out work/wmt16_de_en_word] [--lowercase] [--force]
#
# Raw data, first found wins:
#   1. --local DIR or WMT16_DIR=DIR: a folder holding (anywhere below it) europarl-v7.de-en.{de,en},
#      commoncrawl.de-en.{de,en}, news-commentary-v11.de-en.{de,en} (missing corpora are skipped with a
#      warning), newstest2015 and newstest2016 as plain newstestYYYY.{de,en} or the official
#      newstestYYYY-deen-{src.de,ref.en}.sgm;
#   2. a download of the official statmt.org archives when online.
# Output: OUT/raw/{valid,test}.{de,en} (untokenised; test.en is the sacreBLEU reference), OUT/tok/ (the
# word-level target text: train target vectors on OUT/tok/train.en), OUT/bpe/, OUT/data-bin/de-en/.
# A finished output is never overwritten without --force.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib/prepare-common.sh"
pc_setup prepare-wmt16-word
SRC=de; TGT=en; MERGES=100000; TGT_VOCAB=50000; MAXLEN=100; OUT=$ROOT/work/wmt16_de_en_word; LOWER=0; FORCE=0
LOCAL=${WMT16_DIR:-}
while [ $# -gt 0 ]; do
  case "$1" in
    --local) LOCAL=$(pc_arg "$@"); shift 2;; --src-bpe-merges) MERGES=$(pc_arg "$@"); shift 2;;
    --tgt-vocab) TGT_VOCAB=$(pc_arg "$@"); shift 2;; --max-len) MAXLEN=$(pc_arg "$@"); shift 2;;
    --out) OUT=$(pc_arg "$@"); shift 2;; --lowercase) LOWER=1; shift;; --force) FORCE=1; shift;;
    -h|--help) pc_help "$0"; exit 0;;
    *) pc_unknown "$1";;
  esac
done
pc_int --src-bpe-merges "$MERGES"; pc_int --tgt-vocab "$TGT_VOCAB"; pc_int --max-len "$MAXLEN"
pc_require_tools fast fairseq-preprocess python
DEST=$OUT/data-bin/$SRC-$TGT
pc_skip_if_done "$DEST"
mkdir -p "$OUT/orig" "$OUT/raw" "$OUT/tok" "$OUT/bpe"

# ---- 1. raw data ---------------------------------------------------------------------------------------------
CORPORA=(europarl-v7.de-en=1920209 commoncrawl.de-en=2399123 news-commentary-v11.de-en=242770)  # corpus=expected lines
if [ -n "$LOCAL" ]; then
  [ -d "$LOCAL" ] || die "WMT16_DIR/--local '$LOCAL' is not a directory"
  ORIG=$LOCAL; ORIGIN="local copy ($LOCAL)"
else
  ORIG=$OUT/orig; ORIGIN="download (statmt.org)"
  pc_fetch_archives "$ORIG" "no WMT16_DIR/--local given; download the WMT'16 de-en files elsewhere and pass --local DIR" \
    http://statmt.org/wmt13/training-parallel-europarl-v7.tgz \
    http://statmt.org/wmt13/training-parallel-commoncrawl.tgz \
    http://data.statmt.org/wmt16/translation-task/training-parallel-nc-v11.tgz \
    http://data.statmt.org/wmt16/translation-task/dev.tgz \
    http://data.statmt.org/wmt16/translation-task/test.tgz
fi
log "raw data: $ORIGIN"

pc_concat_corpora "$ORIG" "$OUT/orig/train" "$SRC" "$TGT" "point WMT16_DIR/--local at the extracted WMT'16 archives" "${CORPORA[@]}"

# newstestYYYY as plain text, else from the official sgm (German is the src side, English the ref side)
news() {  # news YEAR SPLIT
  local l f side
  for l in $SRC $TGT; do
    f=$(pc_find "$ORIG" "newstest$1.$l")
    if [ -n "$f" ]; then cp "$f" "$OUT/raw/$2.$l"; continue; fi
    if [ "$l" = de ]; then side=src; else side=ref; fi
    f=$(pc_find "$ORIG" "newstest$1-deen-$side.$l.sgm")
    [ -n "$f" ] || die "newstest$1.$l (or newstest$1-deen-$side.$l.sgm) not found under $ORIG (it is in the official WMT'16 dev.tgz/test.tgz)"
    pc_corpus_tool segs "$f" "$OUT/raw/$2.$l"
  done
}
news 2015 valid
news 2016 test
pc_check_parallel "$OUT/orig" $SRC $TGT train
pc_check_parallel "$OUT/raw" $SRC $TGT valid test
pc_expect_lines "$OUT/raw/valid.$SRC" 2169 1
pc_expect_lines "$OUT/raw/test.$SRC" 2999 1

# ---- 2. normalisation + tokenisation, length filter -------------------------------------------------------
for l in $SRC $TGT; do
  log "normalise + tokenise train.$l, valid.$l, test.$l"
  pc_tokenise_norm "$l" "$LOWER" "$OUT/orig/train.$l" "$OUT/tok/train.all.$l"
  for s in valid test; do pc_tokenise_norm "$l" "$LOWER" "$OUT/raw/$s.$l" "$OUT/tok/$s.$l"; done
done
log "clean: keep pairs of 1-$MAXLEN tokens"
pc_corpus_tool clean "$OUT/tok/train.all.$SRC" "$OUT/tok/train.all.$TGT" "$OUT/tok/train.$SRC" "$OUT/tok/train.$TGT" \
  --min-len 1 --max-len "$MAXLEN" --ratio 1000000

# ---- 3. BPE on the source side only; the target stays word-level -------------------------------------------
log "learn $MERGES source-side BPE merges"
pc_learn_bpe "$MERGES" "$OUT/bpe/codes.$SRC" "$OUT/tok/train.$SRC"
for s in train valid test; do
  pc_apply_bpe "$OUT/bpe/codes.$SRC" "$OUT/tok/$s.$SRC" "$OUT/bpe/$s.$SRC"
  cp "$OUT/tok/$s.$TGT" "$OUT/bpe/$s.$TGT"
done

# ---- 4. binarise: all source sub-words, the TGT_VOCAB most frequent target words ------------------------------
log "fairseq-preprocess -> $DEST (target vocabulary: $TGT_VOCAB most frequent words)"
pc_binarise "$DEST" "$OUT/preprocess.$SRC-$TGT.log" --source-lang $SRC --target-lang $TGT \
  --trainpref "$OUT/bpe/train" --validpref "$OUT/bpe/valid" --testpref "$OUT/bpe/test" --workers 2 \
  --nwordstgt "$TGT_VOCAB"
cp "$OUT/bpe/codes.$SRC" "$DEST/bpecodes.$SRC"
pc_mark_done "$DEST" "origin: $ORIGIN" "lowercase: $LOWER" "src_bpe_merges: $MERGES" "tgt_vocab: $TGT_VOCAB" "max_len: $MAXLEN"
log "done: $DEST (source: $ORIGIN)"
