#!/usr/bin/env bash
# WMT'14 English-German for fairseq (the Transformer / shared-private setting): Europarl v7 + Common Crawl +
# News Commentary v12 for training, newstest2013 valid, newstest2014 (full, 3003 sentences) test; Moses
# punctuation normalisation and tokenisation (sacremoses), cased, joint fastBPE (32k merges as Liu et al. 2019;
# fairseq's recipe uses 40k), BPE'd pairs of 1-250 tokens with length ratio <= 1.5 kept, fairseq-preprocess with
# a joined dictionary.
#
#   bash scripts/prepare-wmt14en2de.sh [--local DIR] [--src en] [--tgt de] [--bpe-merges 32000]
#                                      [--out work/wmt14_en_de] [--separate-dictionaries] [--lowercase] [--force]
#
# Raw data, first found wins:
#   1. --local DIR or WMT14_DIR=DIR: a folder holding (anywhere below it, e.g. the extracted official archives)
#      europarl-v7.de-en.{en,de}, commoncrawl.de-en.{en,de}, news-commentary-v12.de-en.{en,de} (missing
#      corpora are skipped with a warning), newstest2013.{en,de}, and newstest2014-deen-{src,ref}.{en,de}.sgm
#      (or plain newstest2014.{en,de});
#   2. a download of the official statmt.org archives when online.
# Output: OUT/raw/{valid,test}.{en,de} (untokenised: test.TGT is the sacreBLEU reference), OUT/tok/, OUT/bpe/,
# OUT/data-bin/SRC-TGT/. A finished output is never overwritten without --force.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib/prepare-common.sh"
pc_setup prepare-wmt14en2de
SRC=en; TGT=de; MERGES=32000; OUT=$ROOT/work/wmt14_en_de; LOWER=0; FORCE=0; JOINED=1; LOCAL=${WMT14_DIR:-}
while [ $# -gt 0 ]; do
  case "$1" in
    --local) LOCAL=$(pc_arg "$@"); shift 2;; --src) SRC=$(pc_arg "$@"); shift 2;; --tgt) TGT=$(pc_arg "$@"); shift 2;;
    --bpe-merges) MERGES=$(pc_arg "$@"); shift 2;; --out) OUT=$(pc_arg "$@"); shift 2;;
    --separate-dictionaries) JOINED=0; shift;; --lowercase) LOWER=1; shift;; --force) FORCE=1; shift;;
    -h|--help) pc_help "$0"; exit 0;;
    *) pc_unknown "$1";;
  esac
done
case "$SRC-$TGT" in en-de|de-en) ;; *) usage_error "--src/--tgt must be en/de or de/en, got '$SRC'/'$TGT'";; esac
pc_int --bpe-merges "$MERGES"
[ "$MERGES" -ge 32000 ] && [ "$MERGES" -le 40000 ] || warn "--bpe-merges $MERGES is outside the usual 32k-40k for WMT'14 en-de"
pc_require_tools fast fairseq-preprocess python
DEST=$OUT/data-bin/$SRC-$TGT
pc_skip_if_done "$DEST"
mkdir -p "$OUT/orig" "$OUT/raw" "$OUT/tok" "$OUT/bpe"

# ---- 1. raw data ---------------------------------------------------------------------------------------------
CORPORA=(europarl-v7.de-en=1920209 commoncrawl.de-en=2399123 news-commentary-v12.de-en=270769)  # corpus=expected lines
if [ -n "$LOCAL" ]; then
  [ -d "$LOCAL" ] || die "WMT14_DIR/--local '$LOCAL' is not a directory"
  ORIG=$LOCAL; ORIGIN="local copy ($LOCAL)"
else
  ORIG=$OUT/orig; ORIGIN="download (statmt.org)"
  pc_fetch_archives "$ORIG" "no WMT14_DIR/--local given; download the WMT'14 en-de files elsewhere and pass --local DIR" \
    http://statmt.org/wmt13/training-parallel-europarl-v7.tgz \
    http://statmt.org/wmt13/training-parallel-commoncrawl.tgz \
    http://data.statmt.org/wmt17/translation-task/training-parallel-nc-v12.tgz \
    http://data.statmt.org/wmt17/translation-task/dev.tgz \
    http://statmt.org/wmt14/test-full.tgz
fi
log "raw data: $ORIGIN"

# training corpora: concatenate the ones present
pc_concat_corpora "$ORIG" "$OUT/orig/train" "$SRC" "$TGT" "point WMT14_DIR/--local at the extracted WMT'14 archives" "${CORPORA[@]}"

# valid: newstest2013 (plain text); test: newstest2014 (sgm: English is the src side, German the ref side)
for l in $SRC $TGT; do
  f=$(pc_find "$ORIG" "newstest2013.$l")
  [ -n "$f" ] || die "newstest2013.$l not found under $ORIG (it is in the official dev.tgz)"
  cp "$f" "$OUT/raw/valid.$l"
  if [ "$l" = en ]; then side=src; else side=ref; fi
  f=$(pc_find "$ORIG" "newstest2014-deen-$side.$l.sgm")
  if [ -n "$f" ]; then
    pc_corpus_tool segs "$f" "$OUT/raw/test.$l"
  else
    f=$(pc_find "$ORIG" "newstest2014.$l")
    [ -n "$f" ] || die "newstest2014-deen-$side.$l.sgm (or newstest2014.$l) not found under $ORIG (it is in the official test-full.tgz)"
    cp "$f" "$OUT/raw/test.$l"
  fi
done
pc_check_parallel "$OUT/orig" $SRC $TGT train
pc_check_parallel "$OUT/raw" $SRC $TGT valid test
pc_expect_lines "$OUT/raw/valid.$SRC" 3000 1
pc_expect_lines "$OUT/raw/test.$SRC" 3003 1

# ---- 2. normalisation + tokenisation ------------------------------------------------------------------------
for l in $SRC $TGT; do
  log "normalise + tokenise train.$l, valid.$l, test.$l"
  pc_tokenise_norm "$l" "$LOWER" "$OUT/orig/train.$l" "$OUT/tok/train.$l"
  for s in valid test; do pc_tokenise_norm "$l" "$LOWER" "$OUT/raw/$s.$l" "$OUT/tok/$s.$l"; done
done

# ---- 3. joint BPE, then cleaning of the training pairs -------------------------------------------------------
log "learn $MERGES joint BPE merges"
pc_learn_bpe "$MERGES" "$OUT/bpe/codes" "$OUT/tok/train.$SRC" "$OUT/tok/train.$TGT"
for l in $SRC $TGT; do
  pc_apply_bpe "$OUT/bpe/codes" "$OUT/tok/train.$l" "$OUT/bpe/train.all.$l"
  for s in valid test; do pc_apply_bpe "$OUT/bpe/codes" "$OUT/tok/$s.$l" "$OUT/bpe/$s.$l"; done
done
log "clean: keep pairs of 1-250 BPE tokens with length ratio <= 1.5"
pc_corpus_tool clean "$OUT/bpe/train.all.$SRC" "$OUT/bpe/train.all.$TGT" "$OUT/bpe/train.$SRC" "$OUT/bpe/train.$TGT" \
  --min-len 1 --max-len 250 --ratio 1.5

# ---- 4. binarise ----------------------------------------------------------------------------------------------
pc_binarise_joint_bpe "$DEST" "$JOINED" "origin: $ORIGIN" "lowercase: $LOWER" "bpe_merges: $MERGES" \
  "joined_dictionary: $JOINED"
