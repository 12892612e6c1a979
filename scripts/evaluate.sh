#!/usr/bin/env bash
# Translate a test set with a trained checkpoint and score it: sacreBLEU (with its signature) on detokenised
# text, and tokenised BLEU (multi-bleu.perl style) for comparison with the papers.
#
#   bash scripts/evaluate.sh CHECKPOINT DATA_BIN [--beam 5] [--lenpen 1.0] [--replace-unk] [--raw-ref FILE]
#                            [--tgt en] [--lowercase] [--subset test] [--batch-size 128] [--rare-f1 TRAIN_TEXT]
#                            [--tok-ref FILE] [--out DIR] [--force] [--cpu] [--gen-args "more fairseq-generate options"]
#
#   --beam/--lenpen  beam size and length penalty (papers: 5/1.0; Liu et al. 2019 on WMT en-de: 4/0.6;
#                    Kumar & Tsvetkov 2019: 1, greedy nearest-neighbour decoding)
#   --replace-unk    replace each generated <unk> by the source token it attends to most (fairseq-generate
#                    --replace-unk with --print-alignment)
#   --raw-ref FILE   untokenised reference (e.g. work/multi30k/raw/test_2016_flickr.en) for sacreBLEU; without it
#                    the detokenised references of DATA_BIN are used (then the score is not a standard sacreBLEU)
#   --tok-ref FILE   tokenised reference for the tokenised BLEU (e.g. work/multi30k/tok/test_2016_flickr.en);
#                    default: --raw-ref tokenised as the preparation scripts do (sacremoses, escaped, lowercased
#                    with --lowercase), else fairseq's target side (where unknown words read <<unk>>)
#   --tgt            target language for the Moses detokeniser (default: en)
#   --lowercase      the data was lowercased: sacreBLEU runs case-insensitive (-lc, shown in the signature)
#   --rare-f1 FILE   also report word F1 by training frequency (1, 2, 3, 4, 5-9, 10-99, 100-999, 1000+) of the
#                    reference words; FILE is the tokenised (not BPE'd) training target text, e.g.
#                    work/multi30k/tok/train.en (Kumar & Tsvetkov 2019, Figure 2)
#   --out DIR        where to write (default: next to the checkpoint,
#                    eval-CHECKPOINTNAME-SUBSET-beamB-lenpenL/); an existing result is never overwritten
#                    without --force
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
RARE=; POS=(); GEN_ARGS=; TOK_REF=
while [ $# -gt 0 ]; do
  case "$1" in
    --beam) BEAM=$(arg "$@"); shift 2;; --lenpen) LENPEN=$(arg "$@"); shift 2;;
    --replace-unk) REPLACE_UNK=1; shift;; --raw-ref) RAW_REF=$(arg "$@"); shift 2;;
    --tgt) TGT=$(arg "$@"); shift 2;; --lowercase) LOWER=1; shift;; --subset) SUBSET=$(arg "$@"); shift 2;;
    --batch-size) BATCH=$(arg "$@"); shift 2;; --out) OUT=$(arg "$@"); shift 2;; --force) FORCE=1; shift;;
    --rare-f1) RARE=$(arg "$@"); shift 2;; --cpu) CPU=(--cpu); shift;;
    --gen-args) GEN_ARGS=$(arg "$@"); shift 2;; --tok-ref) TOK_REF=$(arg "$@"); shift 2;;
    -h|--help) awk 'NR == 1 { next } /^#/ { print; next } { exit }' "$0"; exit 0;;
    --*) usage "unknown option '$1'";;
    *) POS+=("$1"); shift;;
  esac
done
[ ${#POS[@]} -eq 2 ] || usage "expected CHECKPOINT and DATA_BIN, got ${#POS[@]} positional argument(s)"
CKPT=${POS[0]}; DATA_BIN=${POS[1]}
case "$BEAM" in ''|*[!0-9]*|0) usage "--beam must be a positive integer, got '$BEAM'";; esac
[ -f "$CKPT" ] || die "checkpoint '$CKPT' does not exist; train first (scripts/train.sh) or check the path"
[ -d "$DATA_BIN" ] || die "DATA_BIN '$DATA_BIN' is not a directory; use the data-bin folder the model was trained on"
[ -z "$RAW_REF" ] || [ -f "$RAW_REF" ] || die "--raw-ref '$RAW_REF' does not exist"
[ -z "$TOK_REF" ] || [ -f "$TOK_REF" ] || die "--tok-ref '$TOK_REF' does not exist"
[ -z "$RARE" ] || [ -f "$RARE" ] || die "--rare-f1 '$RARE' does not exist; give the tokenised training target text"
VENV_BIN=${VENV_BIN:-$ROOT/.venv/bin}
[ -d "$VENV_BIN" ] && export PATH="$VENV_BIN:$PATH"

NAME=$(basename "$CKPT" .pt)
OUT=${OUT:-$(dirname "$CKPT")/eval-$NAME-$SUBSET-beam$BEAM-lenpen$LENPEN}
if [ -f "$OUT/bleu.txt" ] && [ "$FORCE" = 0 ]; then
  die "$OUT/bleu.txt already exists; pass --force to overwrite it, or --out DIR"
fi
mkdir -p "$OUT"

GEN=(fairseq-generate "$DATA_BIN" --user-dir "$ROOT/fairseq_outlayers" --path "$CKPT" --gen-subset "$SUBSET"
     --beam "$BEAM" --lenpen "$LENPEN" --batch-size "$BATCH" --required-batch-size-multiple 1 --remove-bpe
     --num-workers 0 ${CPU[@]+"${CPU[@]}"})
if [ -n "$GEN_ARGS" ]; then read -r -a MORE <<< "$GEN_ARGS"; GEN+=("${MORE[@]}"); fi
[ "$REPLACE_UNK" = 1 ] && GEN+=(--replace-unk --print-alignment)
echo "+ ${GEN[*]} > $OUT/generate.out"
"${GEN[@]}" > "$OUT/generate.out" 2> "$OUT/generate.err" || { tail -20 "$OUT/generate.err" >&2; die "fairseq-generate failed (log: $OUT/generate.err)"; }

python - "$OUT" "$TGT" "$LOWER" "$RAW_REF" "$RARE" "$CKPT" "$BEAM" "$LENPEN" "$TOK_REF" <<'PY'
import json, os, sys
from collections import Counter

import sacrebleu
from sacremoses import MosesDetokenizer, MosesTokenizer

out, tgt, lower, raw_ref, rare, ckpt, beam, lenpen, tok_ref = sys.argv[1:]
lower = lower == "1"
hyps, refs = {}, {}
for line in open(os.path.join(out, "generate.out"), encoding="utf-8"):
    if line.startswith("H-"):
        idx, _score, text = line.rstrip("\n").split("\t", 2)
        hyps[int(idx[2:])] = text
    elif line.startswith("T-"):
        idx, text = line.rstrip("\n").split("\t", 1)
        refs[int(idx[2:])] = text
if not hyps:
    sys.exit(f"evaluate.sh: no hypotheses in {out}/generate.out; see {out}/generate.err")
ids = sorted(hyps)
hyp_tok = [hyps[i] for i in ids]
ref_tok = [refs.get(i, "") for i in ids]
tok_origin = "fairseq's target side, BPE removed"
detok = MosesDetokenizer(lang=tgt)
hyp_detok = [detok.detokenize(h.split()) for h in hyp_tok]


def read_ref(path, option):
    lines = [x.rstrip("\n") for x in open(path, encoding="utf-8")]
    if len(lines) != len(hyp_tok):
        sys.exit(f"evaluate.sh: {len(hyp_tok)} translations but {len(lines)} lines in {option} {path}; "
                 "give the reference of the same split (--subset)")
    return lines


if raw_ref:
    ref_detok = read_ref(raw_ref, "--raw-ref")
    ref_origin = raw_ref
    moses = MosesTokenizer(lang=tgt)  # as scripts/lib/corpus_tools.py tokenize: escaped, optionally lowercased
    ref_tok = [moses.tokenize(r, return_str=True, escape=True) for r in ref_detok]
    ref_tok = [r.lower() for r in ref_tok] if lower else ref_tok
    tok_origin = f"{raw_ref} tokenised with sacremoses{' and lowercased' if lower else ''}"
else:
    ref_detok = [detok.detokenize(r.split()) for r in ref_tok]
    ref_origin = "detokenised references of the binarised data (no --raw-ref: not a standard sacreBLEU score)"
if tok_ref:
    ref_tok = read_ref(tok_ref, "--tok-ref")
    tok_origin = tok_ref
for name, lines in (("hyp.tok", hyp_tok), ("ref.tok", ref_tok), ("hyp.detok", hyp_detok)):
    with open(os.path.join(out, name), "w", encoding="utf-8") as f:
        f.write("".join(x + "\n" for x in lines))
sbleu = sacrebleu.metrics.BLEU(lowercase=lower)
s = sbleu.corpus_score(hyp_detok, [ref_detok])
tbleu = sacrebleu.metrics.BLEU(tokenize="none", lowercase=lower)
t = tbleu.corpus_score(hyp_tok, [ref_tok])
scores = {"checkpoint": ckpt, "sentences": len(ids), "beam": int(beam), "lenpen": float(lenpen),
          "sacrebleu": round(s.score, 2), "sacrebleu_signature": str(sbleu.get_signature()),
          "sacrebleu_reference": ref_origin, "tokenized_bleu": round(t.score, 2),
          "tokenized_bleu_signature": str(tbleu.get_signature()),
          "tokenized_bleu_reference": tok_origin}
lines = [f"sacreBLEU {s.score:.2f}  ({s.format(score_only=False)})",
         f"  signature: {scores['sacrebleu_signature']}",
         f"  reference: {ref_origin}",
         f"tokenised BLEU {t.score:.2f}  (multi-bleu style: tokenised, BPE removed; {scores['tokenized_bleu_signature']})",
         f"  reference: {tok_origin}"]

if rare:
    freq = Counter(w for line in open(rare, encoding="utf-8") for w in line.split())
    bins = [(1, 1), (2, 2), (3, 3), (4, 4), (5, 9), (10, 99), (100, 999), (1000, None)]

    def bucket(w):
        c = freq.get(w, 0)
        if c == 0:
            return "unseen"
        for lo, hi in bins:
            if c >= lo and (hi is None or c <= hi):
                return f"{lo}" if lo == hi else (f"{lo}+" if hi is None else f"{lo}-{hi}")

    match, in_hyp, in_ref = Counter(), Counter(), Counter()
    for h, r in zip(hyp_tok, ref_tok):
        ch, cr = Counter(h.split()), Counter(r.split())
        for w, n in cr.items():
            in_ref[bucket(w)] += n
            match[bucket(w)] += min(n, ch.get(w, 0))
        for w, n in ch.items():
            in_hyp[bucket(w)] += n
    f1 = {}
    lines.append("word F1 by training frequency of the word (compare-mt style: per-sentence matched counts)")
    for name in ["unseen"] + [f"{lo}" if lo == hi else (f"{lo}+" if hi is None else f"{lo}-{hi}") for lo, hi in bins]:
        p = match[name] / in_hyp[name] if in_hyp[name] else 0.0
        rc = match[name] / in_ref[name] if in_ref[name] else 0.0
        f = 2 * p * rc / (p + rc) if p + rc else 0.0
        f1[name] = {"f1": round(100 * f, 2), "ref_words": in_ref[name], "hyp_words": in_hyp[name]}
        lines.append(f"  freq {name:>8}: F1 {100 * f:6.2f}  (reference words {in_ref[name]}, hypothesis words {in_hyp[name]})")
    scores["rare_word_f1"] = f1

with open(os.path.join(out, "bleu.txt"), "w", encoding="utf-8") as f:
    f.write("\n".join(lines) + "\n")
json.dump(scores, open(os.path.join(out, "scores.json"), "w"), indent=2)
print("\n".join(lines))
print(f"written: {out}/{{hyp.tok,ref.tok,hyp.detok,bleu.txt,scores.json}}")
PY
