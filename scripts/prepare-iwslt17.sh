#!/usr/bin/env bash
# IWSLT'17 X-to-English (TED) for the shared-private paper's distant pairs (Liu et al. 2019, Table 3:
# Arabic, Japanese, Korean, Chinese to English): valid = IWSLT17.TED.tst2014, test = IWSLT17.TED.tst2015;
# Moses tokenisation (sacremoses), pairs of 1-250 tokens kept, a separate fastBPE model with 16k merges per
# language (the paper's setting), separate dictionaries, fairseq-preprocess.
#
#   bash scripts/prepare-iwslt17.sh --src {ar,ja,ko,zh,de,fr} [--local DIR] [--bpe-merges 16000]
#                                   [--out work/iwslt17] [--lowercase] [--force]
#
# Raw data, first found wins:
#   1. --local DIR or IWSLT17_DIR=DIR: the extracted official SRC-en archive of the 2017-01-trnted release
#      (the folder holding train.tags.SRC-en.{SRC,en} and IWSLT17.TED.tst2014/tst2015.SRC-en.{SRC,en}.xml, its
#      parent, or a folder with one SRC-en/ sub-folder per language);
#   2. a download of SRC-en.tgz from the WIT3 archive when online.
# Chinese and Japanese are not word-segmented by the Moses tokeniser: BPE then works on whole clauses. To use
# a segmenter (jieba, MeCab), segment the raw files first and pass them with --local.
# Output: OUT/SRC-en/raw/{train,valid,test}.{SRC,en} (untokenised; test.en is the sacreBLEU reference),
# OUT/SRC-en/{tok,bpe}/ and OUT/data-bin/SRC-en/. A finished output is never overwritten without --force.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib/prepare-common.sh"
pc_setup prepare-iwslt17
SRC=; TGT=en; MERGES=16000; OUT=$ROOT/work/iwslt17; LOWER=0; FORCE=0; LOCAL=${IWSLT17_DIR:-}
while [ $# -gt 0 ]; do
  case "$1" in
    --src) SRC=$(pc_arg "$@"); shift 2;; --local) LOCAL=$(pc_arg "$@"); shift 2;;
    --bpe-merges) MERGES=$(pc_arg "$@"); shift 2;; --out) OUT=$(pc_arg "$@"); shift 2;;
    --lowercase) LOWER=1; shift;; --force) FORCE=1; shift;;
    -h|--help) pc_help "$0"; exit 0;;
    *) pc_unknown "$1";;
  esac
done
[ -n "$SRC" ] || usage_error "--src is required: one of ar, ja, ko, zh (the paper's pairs), de, fr"
case "$SRC" in ar|ja|ko|zh|de|fr) ;; *) usage_error "--src '$SRC' has no IWSLT'17 X-en release; choose ar, ja, ko, zh, de or fr";; esac
pc_int --bpe-merges "$MERGES"
pc_require_tools fast fairseq-preprocess python
PAIR=$SRC-$TGT
DEST=$OUT/data-bin/$PAIR
pc_skip_if_done "$DEST"
WORK=$OUT/$PAIR
mkdir -p "$WORK/orig" "$WORK/raw" "$WORK/tok" "$WORK/bpe"

# ---- 1. raw data ---------------------------------------------------------------------------------------------
VALID_SET=IWSLT17.TED.tst2014; TEST_SET=IWSLT17.TED.tst2015
raw_dir() {
  local d
  for d in "$1" "$1/$PAIR"; do
    [ -f "$d/train.tags.$PAIR.$SRC" ] && { echo "$d"; return 0; }
  done
  return 1
}
if [ -n "$LOCAL" ]; then
  [ -d "$LOCAL" ] || die "IWSLT17_DIR/--local '$LOCAL' is not a directory; point it at the extracted $PAIR archive"
  ORIG=$(raw_dir "$LOCAL") || die "$LOCAL has no train.tags.$PAIR.$SRC (nor $PAIR/train.tags.$PAIR.$SRC); point IWSLT17_DIR/--local at the extracted official $PAIR.tgz"
  ORIGIN="local copy ($ORIG)"
else
  ORIG=
  for URL in "https://wit3.fbk.eu/archive/2017-01-trnted/texts/$SRC/$TGT/$PAIR.tgz" \
             "https://huggingface.co/datasets/IWSLT/iwslt2017/resolve/main/data/2017-01-trnted/texts/$SRC/$TGT/$PAIR.zip"; do
    log "downloading $URL"
    if pc_download "$URL" "$WORK/orig/archive"; then
      pc_extract "$WORK/orig/archive" "$WORK/orig"
      ORIG=$(raw_dir "$WORK/orig") && break
    fi
  done
  [ -n "$ORIG" ] || die "no IWSLT17_DIR/--local given and the download failed (offline?); download $PAIR.tgz (IWSLT 2017 TED, 2017-01-trnted) elsewhere, extract it and pass --local DIR"
  ORIGIN="download ($URL)"
fi
for f in train.tags.$PAIR.$SRC train.tags.$PAIR.$TGT $VALID_SET.$PAIR.$SRC.xml $VALID_SET.$PAIR.$TGT.xml \
         $TEST_SET.$PAIR.$SRC.xml $TEST_SET.$PAIR.$TGT.xml; do
  [ -s "$ORIG/$f" ] || die "$ORIG/$f is missing or empty; the IWSLT'17 $PAIR archive is incomplete"
done
log "raw data: $ORIGIN"
for l in $SRC $TGT; do
  pc_corpus_tool tags --style 2017 "$ORIG/train.tags.$PAIR.$l" "$WORK/orig/train.all.$l"
  pc_corpus_tool segs "$ORIG/$VALID_SET.$PAIR.$l.xml" "$WORK/raw/valid.$l"
  pc_corpus_tool segs "$ORIG/$TEST_SET.$PAIR.$l.xml" "$WORK/raw/test.$l"
done
pc_check_parallel "$WORK/orig" $SRC $TGT train.all
pc_check_parallel "$WORK/raw" $SRC $TGT valid test
# training pairs in the paper (Table 3 footnote): ar 236K, ja 234K, ko 227K, zh 235K
declare -A EXPECTED=([ar]=236000 [ja]=234000 [ko]=227000 [zh]=235000 [de]=206000 [fr]=233000)
pc_expect_lines "$WORK/orig/train.all.$SRC" "${EXPECTED[$SRC]}" 5

# ---- 2. tokenisation + length filter --------------------------------------------------------------------------
for l in $SRC $TGT; do
  log "tokenise train.$l, valid.$l, test.$l"
  pc_tokenise "$l" "$LOWER" "$WORK/orig/train.all.$l" "$WORK/tok/train.all.$l"
  for s in valid test; do pc_tokenise "$l" "$LOWER" "$WORK/raw/$s.$l" "$WORK/tok/$s.$l"; done
done
log "clean: keep pairs of 1-250 tokens (no length-ratio filter: unsegmented scripts have few tokens)"
pc_corpus_tool clean "$WORK/tok/train.all.$SRC" "$WORK/tok/train.all.$TGT" "$WORK/tok/train.$SRC" "$WORK/tok/train.$TGT" \
  --min-len 1 --max-len 250 --ratio 1000000 \
  --also "$WORK/orig/train.all.$SRC" "$WORK/orig/train.all.$TGT" "$WORK/raw/train.$SRC" "$WORK/raw/train.$TGT"

# ---- 3. one BPE model per language -------------------------------------------------------------------------
for l in $SRC $TGT; do
  log "learn $MERGES BPE merges on train.$l"
  pc_learn_bpe "$MERGES" "$WORK/bpe/codes.$l" "$WORK/tok/train.$l"
  for s in train valid test; do pc_apply_bpe "$WORK/bpe/codes.$l" "$WORK/tok/$s.$l" "$WORK/bpe/$s.$l"; done
done

# ---- 4. binarise ----------------------------------------------------------------------------------------------
log "fairseq-preprocess -> $DEST"
pc_binarise "$DEST" "$WORK/preprocess.log" --source-lang $SRC --target-lang $TGT \
  --trainpref "$WORK/bpe/train" --validpref "$WORK/bpe/valid" --testpref "$WORK/bpe/test" --workers 2
for l in $SRC $TGT; do cp "$WORK/bpe/codes.$l" "$DEST/bpecodes.$l"; done
pc_mark_done "$DEST" "origin: $ORIGIN" "lowercase: $LOWER" "bpe_merges: $MERGES (per language)"
log "done: $DEST (source: $ORIGIN)"
