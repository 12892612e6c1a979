#!/usr/bin/env bash
# IWSLT'14 German-English (TED) for fairseq, fairseq's standard split: valid = every 23rd training pair,
# test = dev2010 + tst2010 + tst2011 + tst2012 + TEDX.dev2012; Moses tokenisation (sacremoses), lowercased,
# pairs of 1-175 tokens with length ratio <= 1.5 kept, joint fastBPE with 10k merges, fairseq-preprocess.
#
#   bash scripts/prepare-iwslt14.sh [--local DIR] [--bpe-merges 10000] [--out work/iwslt14]
#                                   [--joined-dictionary] [--no-lowercase] [--force]
#
# Raw data, first found wins:
#   1. --local DIR or IWSLT14_DIR=DIR: the extracted official archive de-en.tgz (the folder holding
#      train.tags.de-en.{de,en} and IWSLT14.TED{,X}.*.de-en.{de,en}.xml, or its parent);
#   2. a download of de-en.tgz (fairseq's mirror, then the WIT3 archive) when online.
# Output: OUT/raw/{train,valid,test}.{de,en} (untokenised text of the kept pairs: test.en is the sacreBLEU
# reference), OUT/tok/, OUT/bpe/ and OUT/data-bin/de-en/ (separate dictionaries unless --joined-dictionary).
# Expected sizes (warnings only): train 160239, valid 7283, test 6750 pairs. A finished output is never
# overwritten: the script stops and tells you to pass --force (or choose another --out).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib/prepare-common.sh"
pc_setup prepare-iwslt14
SRC=de; TGT=en; MERGES=10000; OUT=$ROOT/work/iwslt14; LOWER=1; FORCE=0; JOINED=0; LOCAL=${IWSLT14_DIR:-}
while [ $# -gt 0 ]; do
  case "$1" in
    --local) LOCAL=$(pc_arg "$@"); shift 2;; --bpe-merges) MERGES=$(pc_arg "$@"); shift 2;;
    --out) OUT=$(pc_arg "$@"); shift 2;; --joined-dictionary) JOINED=1; shift;;
    --no-lowercase) LOWER=0; shift;; --force) FORCE=1; shift;;
    -h|--help) pc_help "$0"; exit 0;;
    *) pc_unknown "$1";;
  esac
done
pc_int --bpe-merges "$MERGES"
pc_require_tools fast fairseq-preprocess python
DEST=$OUT/data-bin/$SRC-$TGT
pc_skip_if_done "$DEST"
mkdir -p "$OUT/orig" "$OUT/raw" "$OUT/tok" "$OUT/bpe"

# ---- 1. raw data ---------------------------------------------------------------------------------------------
TEST_SETS="IWSLT14.TED.dev2010 IWSLT14.TED.tst2010 IWSLT14.TED.tst2011 IWSLT14.TED.tst2012 IWSLT14.TEDX.dev2012"
needed() {
  echo "train.tags.de-en.de train.tags.de-en.en"
  for t in $TEST_SETS; do echo "$t.de-en.de.xml $t.de-en.en.xml"; done
}
raw_dir() {  # the folder holding the files: DIR itself or DIR/de-en
  local d
  for d in "$1" "$1/de-en"; do
    [ -f "$d/train.tags.de-en.de" ] && { echo "$d"; return 0; }
  done
  return 1
}
if [ -n "$LOCAL" ]; then
  [ -d "$LOCAL" ] || die "IWSLT14_DIR/--local '$LOCAL' is not a directory; point it at the extracted de-en.tgz"
  ORIG=$(raw_dir "$LOCAL") || die "$LOCAL has no train.tags.de-en.de (nor de-en/train.tags.de-en.de); point IWSLT14_DIR/--local at the extracted official de-en.tgz"
  ORIGIN="local copy ($ORIG)"
else
  ORIG=
  for URL in https://dl.fbaipublicfiles.com/fairseq/data/iwslt14/de-en.tgz \
             https://wit3.fbk.eu/archive/2014-01/texts/de/en/de-en.tgz; do
    log "downloading $URL"
    if pc_download "$URL" "$OUT/orig/de-en.tgz"; then
      pc_extract "$OUT/orig/de-en.tgz" "$OUT/orig"
      ORIG=$(raw_dir "$OUT/orig") && break
    fi
  done
  [ -n "$ORIG" ] || die "no IWSLT14_DIR/--local given and the download failed (offline?); download de-en.tgz (IWSLT 2014 TED de-en) elsewhere, extract it and pass --local DIR"
  ORIGIN="download ($URL)"
fi
for f in $(needed); do [ -s "$ORIG/$f" ] || die "$ORIG/$f is missing or empty; the IWSLT'14 de-en archive is incomplete"; done
log "raw data: $ORIGIN"

# training text: drop the talk metadata lines (fairseq's rule), test text: the <seg> elements
for l in $SRC $TGT; do
  pc_corpus_tool tags --style 2014 "$ORIG/train.tags.de-en.$l" "$OUT/orig/train.all.$l"
  : > "$OUT/raw/test.$l"
  for t in $TEST_SETS; do
    pc_corpus_tool segs "$ORIG/$t.de-en.$l.xml" "$OUT/orig/$t.$l"
    cat "$OUT/orig/$t.$l" >> "$OUT/raw/test.$l"
  done
done
pc_check_parallel "$OUT/orig" $SRC $TGT train.all $TEST_SETS

# ---- 2. tokenisation, cleaning, lowercasing, valid split ----------------------------------------------------
for l in $SRC $TGT; do
  log "tokenise train.$l and test.$l"
  pc_tokenise "$l" "$LOWER" "$OUT/orig/train.all.$l" "$OUT/tok/train.all.$l"
  pc_tokenise "$l" "$LOWER" "$OUT/raw/test.$l" "$OUT/tok/test.$l"
done
log "clean: keep pairs of 1-175 tokens with length ratio <= 1.5"
pc_corpus_tool clean "$OUT/tok/train.all.$SRC" "$OUT/tok/train.all.$TGT" "$OUT/tok/train.clean.$SRC" \
  "$OUT/tok/train.clean.$TGT" --min-len 1 --max-len 175 --ratio 1.5 \
  --also "$OUT/orig/train.all.$SRC" "$OUT/orig/train.all.$TGT" "$OUT/orig/train.clean.$SRC" "$OUT/orig/train.clean.$TGT"
log "valid = every 23rd training pair"
for l in $SRC $TGT; do
  pc_corpus_tool every 23 "$OUT/tok/train.clean.$l" "$OUT/tok/valid.$l" "$OUT/tok/train.$l"
  pc_corpus_tool every 23 "$OUT/orig/train.clean.$l" "$OUT/raw/valid.$l" "$OUT/raw/train.$l"
done
pc_check_parallel "$OUT/tok" $SRC $TGT train valid test
pc_expect_lines "$OUT/tok/train.$SRC" 160239
pc_expect_lines "$OUT/tok/valid.$SRC" 7283
pc_expect_lines "$OUT/tok/test.$SRC" 6750

# ---- 3. joint BPE (fastBPE) ---------------------------------------------------------------------------------
log "learn $MERGES joint BPE merges"
pc_learn_bpe "$MERGES" "$OUT/bpe/codes" "$OUT/tok/train.$SRC" "$OUT/tok/train.$TGT"
for s in train valid test; do for l in $SRC $TGT; do
  pc_apply_bpe "$OUT/bpe/codes" "$OUT/tok/$s.$l" "$OUT/bpe/$s.$l"
done; done

# ---- 4. binarise ----------------------------------------------------------------------------------------------
pc_binarise_joint_bpe "$DEST" "$JOINED" "origin: $ORIGIN" "lowercase: $LOWER" "bpe_merges: $MERGES" \
  "joined_dictionary: $JOINED"
