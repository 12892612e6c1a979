#!/usr/bin/env bash
# Translate a test set with a trained checkpoint and score it: sacreBLEU (with its signature) on detokenised
# text, and tokenised BLEU (multi-bleu.perl style) for comparison with the papers.
#
#   bash scripts/evaluate.sh CHECKPOINT DATA_BIN [--beam 5] [--lenpen 1.0] [--replace-unk [LEXICON]] [--raw-ref FILE]
#                            [--src de] [--tgt en] [--lowercase] [--subset test] [--batch-size 128] [--rare-f1 TRAIN_TEXT]
#                            [--tok-ref FILE] [--out DIR] [--force] [--cpu] [--gen-args "more fairseq-generate options"]
#                            [--test-set NAME=SRC_FILE,REF_FILE ...]
#
#   --beam/--lenpen  beam size and length penalty (papers: 5/1.0; Liu et al. 2019 on WMT en-de: 4/0.6;
#                    Kumar & Tsvetkov 2019: 1, greedy nearest-neighbour decoding)
#   --replace-unk [LEXICON]
#                    replace each generated <unk> using the source unit it is aligned to (fairseq-generate
#                    --print-alignment hard: the attention maximum): its translation in LEXICON when given and
#                    listed there (a 'source_unit target_word' file, e.g. from python -m fairseq_outlayers.tools.pairing
#                    lexicon), else the source word itself (the whole word when the aligned token is a BPE piece).
#                    LEXICON is taken when the next argument does not start with '-'. Works on binarised data.
#                    The rule is fairseq_outlayers/tools/evaluation/unknown_words.py, the one outlayers-generate
#                    --replace-unk applies (docs/continuous-outputs.md).
#   --raw-ref FILE   untokenised reference (e.g. work/multi30k/raw/test_2016_flickr.en) for sacreBLEU; without it
#                    the detokenised references of DATA_BIN are used (then the score is not a standard sacreBLEU)
#   --tok-ref FILE   tokenised reference for the tokenised BLEU (e.g. work/multi30k/tok/test_2016_flickr.en);
#                    default: --raw-ref tokenised as the preparation scripts do (sacremoses, escaped, lowercased
#                    with --lowercase), else fairseq's target side (where unknown words read <<unk>>)
#   --src            source language: passed with --tgt to fairseq-generate as --source-lang/--target-lang
#                    (needed when DATA_BIN holds the other direction, e.g. de-en data for an en-de model;
#                    default: fairseq infers the pair from DATA_BIN)
#   --tgt            target language for the Moses detokeniser (default: en)
#   --lowercase      the data was lowercased: sacreBLEU runs case-insensitive (-lc, shown in the signature)
#   --rare-f1 FILE   also report word F1 by training frequency (1, 2, 3, 4, 5-9, 10-99, 100-999, 1000+) of the
#                    reference words; FILE is the tokenised (not BPE'd) training target text, e.g.
#                    work/multi30k/tok/train.en (Kumar & Tsvetkov 2019, Figure 2)
#   --out DIR        where to write (default: next to the checkpoint,
#                    eval-CHECKPOINTNAME-SUBSET-beamB-lenpenL/); if any file listed under "Writes" exists
#                    there the script stops before translating, unless --force; every file is written to a
#                    temporary file and renamed, so a failed or interrupted run leaves earlier results intact
#   --test-set NAME=SRC_FILE,REF_FILE
#                    (repeatable) also translate and score an extra test set given as untokenised text: the source
#                    is prepared with the training data's own tokeniser, case and BPE (read from DATA_BIN: .done and
#                    bpecodes, as scripts/prepare-*.sh leave them), binarised with DATA_BIN's dictionaries and
#                    translated with the same --beam/--lenpen (and --max-len-a 1.2 --max-len-b 10, not --gen-args);
#                    writes OUT/testset-NAME/{hyp.detok,scores.json}
#                    (python -m fairseq_outlayers.tools.evaluation.score_raw)
#   --gen-args STR   extra fairseq-generate options, e.g. "--max-len-a 1.2 --max-len-b 10" or
#                    "--model-overrides {'continuous_score_scale':10}"
# Every sentence of the subset is translated (--required-batch-size-multiple 1: with fairseq's default of 8 and
# --batch-size, fairseq-generate silently drops the last N mod 8 sentences).
# Writes: generate.out (fairseq-generate's log), hyp.tok / ref.tok (tokenised, BPE removed, in corpus order; the
# reference as chosen for the tokenised BLEU),
# hyp.detok, bleu.txt (the scores and the sacreBLEU signature), scores.json.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PROG=evaluate.sh
die() { echo "$PROG: $*" >&2; exit 1; }
usage() { echo "$PROG: $*" >&2; echo "usage: bash scripts/evaluate.sh CHECKPOINT DATA_BIN [options] (see --help)" >&2; exit 2; }
arg() { [ $# -ge 2 ] && [ -n "$2" ] || usage "option '$1' needs a value"; printf '%s' "$2"; }

BEAM=5; LENPEN=1.0; REPLACE_UNK=0; RAW_REF=; TGT=en; LOWER=0; SUBSET=test; BATCH=128; OUT=; FORCE=0; CPU=()
RARE=; POS=(); GEN_ARGS=; TOK_REF=; SRC=; UNK_LEXICON=; TEST_SETS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --beam) BEAM=$(arg "$@"); shift 2;; --lenpen) LENPEN=$(arg "$@"); shift 2;;
    --replace-unk) REPLACE_UNK=1
      if [ $# -ge 2 ] && [ -n "$2" ] && [ "${2#-}" = "$2" ]; then UNK_LEXICON=$2; shift; fi; shift;;
    --raw-ref) RAW_REF=$(arg "$@"); shift 2;;
    --tgt) TGT=$(arg "$@"); shift 2;; --src) SRC=$(arg "$@"); shift 2;; --lowercase) LOWER=1; shift;; --subset) SUBSET=$(arg "$@"); shift 2;;
    --batch-size) BATCH=$(arg "$@"); shift 2;; --out) OUT=$(arg "$@"); shift 2;; --force) FORCE=1; shift;;
    --rare-f1) RARE=$(arg "$@"); shift 2;; --cpu) CPU=(--cpu); shift;;
    --gen-args) GEN_ARGS=$(arg "$@"); shift 2;; --tok-ref) TOK_REF=$(arg "$@"); shift 2;;
    --test-set) TEST_SETS+=("$(arg "$@")"); shift 2;;
    -h|--help) awk 'NR == 1 { next } /^#/ { print; next } { exit }' "$0"; exit 0;;
    --*) usage "unknown option '$1'";;
    *) POS+=("$1"); shift;;
  esac
done
case "$UNK_LEXICON" in *.pt) usage "--replace-unk LEXICON: '$UNK_LEXICON' looks like a checkpoint; put --replace-unk after CHECKPOINT DATA_BIN";; esac
[ ${#POS[@]} -eq 2 ] || usage "expected CHECKPOINT and DATA_BIN, got ${#POS[@]} positional argument(s)"
CKPT=${POS[0]}; DATA_BIN=${POS[1]}
case "$BEAM" in ''|*[!0-9]*|0) usage "--beam must be a positive integer, got '$BEAM'";; esac
[ -f "$CKPT" ] || die "checkpoint '$CKPT' does not exist; train first (scripts/train.sh) or check the path"
[ -d "$DATA_BIN" ] || die "DATA_BIN '$DATA_BIN' is not a directory; use the data-bin folder the model was trained on"
[ -z "$RAW_REF" ] || [ -f "$RAW_REF" ] || die "--raw-ref '$RAW_REF' does not exist"
[ -z "$TOK_REF" ] || [ -f "$TOK_REF" ] || die "--tok-ref '$TOK_REF' does not exist"
[ -z "$UNK_LEXICON" ] || [ -f "$UNK_LEXICON" ] || die "--replace-unk lexicon '$UNK_LEXICON' does not exist; build it with python -m fairseq_outlayers.tools.pairing lexicon --src-text TRAIN.SRC --tgt-text TRAIN.TGT --out FILE"
[ -z "$RARE" ] || [ -f "$RARE" ] || die "--rare-f1 '$RARE' does not exist; give the tokenised training target text"
VENV_BIN=${VENV_BIN:-$ROOT/.venv/bin}
[ -d "$VENV_BIN" ] && export PATH="$VENV_BIN:$PATH"

NAME=$(basename "$CKPT" .pt)
OUT=${OUT:-$(dirname "$CKPT")/eval-$NAME-$SUBSET-beam$BEAM-lenpen$LENPEN}
# every file this script writes: none is overwritten without --force, each is written to a temporary file in
# $OUT and renamed into place, so an interrupted run leaves the previous file or the complete new one
OUTPUTS=(generate.out generate.err hyp.tok ref.tok hyp.detok bleu.txt scores.json)
for t in ${TEST_SETS[@]+"${TEST_SETS[@]}"}; do
  case "$t" in *=*,*) ;; *) usage "--test-set '$t': expected NAME=SRC_FILE,REF_FILE";; esac
  OUTPUTS+=("testset-${t%%=*}/scores.json")
done
if [ "$FORCE" = 0 ]; then
  for f in "${OUTPUTS[@]}"; do
    if [ -e "$OUT/$f" ]; then die "$OUT/$f already exists; pass --force to overwrite the results in $OUT, or --out DIR"; fi
  done
fi
# before translating: the lexicon holds entries, --raw-ref/--tok-ref have one line per sentence of the subset, each
# --test-set pair is line-aligned, and no output is a file this script reads (evaluation/preflight.py)
PREFLIGHT=(--data "$DATA_BIN" --subset "$SUBSET" --out "$OUT" --checkpoint "$CKPT" --raw-ref "$RAW_REF"
           --tok-ref "$TOK_REF" --lexicon "$UNK_LEXICON" --rare-f1 "$RARE")
[ ${#TEST_SETS[@]} -eq 0 ] || PREFLIGHT+=(--test-set "${TEST_SETS[@]}")
PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" python -m fairseq_outlayers.tools.evaluation.preflight "${PREFLIGHT[@]}" \
  --outputs "${OUTPUTS[@]}" || exit 1
mkdir -p "$OUT" || die "cannot create --out directory '$OUT'"
[ -w "$OUT" ] || die "--out directory '$OUT' is not writable; choose another --out DIR"

GEN=(fairseq-generate "$DATA_BIN" --user-dir "$ROOT/fairseq_outlayers" --path "$CKPT" --gen-subset "$SUBSET"
     --beam "$BEAM" --lenpen "$LENPEN" --batch-size "$BATCH" --required-batch-size-multiple 1
     --num-workers 0 ${CPU[@]+"${CPU[@]}"})
# with --replace-unk the BPE is removed below, after the replacement (the alignment indexes BPE tokens)
if [ "$REPLACE_UNK" = 1 ]; then GEN+=(--print-alignment hard); else GEN+=(--remove-bpe); fi
[ -z "$SRC" ] || GEN+=(--source-lang "$SRC" --target-lang "$TGT")
if [ -n "$GEN_ARGS" ]; then read -r -a MORE <<< "$GEN_ARGS"; GEN+=("${MORE[@]}"); fi
echo "+ ${GEN[*]} > $OUT/generate.out"
TMP_OUT=$(mktemp "$OUT/.generate.out.XXXXXX") && TMP_ERR=$(mktemp "$OUT/.generate.err.XXXXXX") \
  || die "cannot create a file in --out directory '$OUT'"
trap 'rm -f "$TMP_OUT" "$TMP_ERR"' EXIT
if ! "${GEN[@]}" > "$TMP_OUT" 2> "$TMP_ERR"; then
  tail -20 "$TMP_ERR" >&2
  mv -f "$TMP_ERR" "$OUT/generate.err.failed"
  die "fairseq-generate failed (log: $OUT/generate.err.failed; the files of an earlier run in $OUT are unchanged)"
fi
chmod 644 "$TMP_OUT" "$TMP_ERR"
mv -f "$TMP_ERR" "$OUT/generate.err"
mv -f "$TMP_OUT" "$OUT/generate.out"

PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" python "$ROOT/scripts/lib/score_translations.py" --out "$OUT" --tgt "$TGT" --lowercase "$LOWER" --raw-ref "$RAW_REF" \
  --rare-f1 "$RARE" --checkpoint "$CKPT" --beam "$BEAM" --lenpen "$LENPEN" --tok-ref "$TOK_REF" --replace-unk "$REPLACE_UNK" \
  --unk-lexicon "$UNK_LEXICON"
for t in ${TEST_SETS[@]+"${TEST_SETS[@]}"}; do
  PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" python -m fairseq_outlayers.tools.evaluation.score_raw --checkpoint "$CKPT" --data "$DATA_BIN" --out "$OUT" \
    --test-set "testset-$t" --beam "$BEAM" --lenpen "$LENPEN" --batch-size "$BATCH" || die "--test-set '$t' failed"
done
