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
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SRC=de; TGT=en; MERGES=8000; OUT=$ROOT/work/multi30k; LOWER=1; FORCE=0
while [ $# -gt 0 ]; do
  case "$1" in
    --src) SRC=$2; shift 2;; --tgt) TGT=$2; shift 2;; --bpe-merges) MERGES=$2; shift 2;;
    --out) OUT=$2; shift 2;; --no-lowercase) LOWER=0; shift;; --force) FORCE=1; shift;;
    -h|--help) sed -n '2,13p' "$0"; exit 0;;
    *) echo "prepare-multi30k.sh: unknown option '$1' (see --help)" >&2; exit 2;;
  esac
done
for l in "$SRC" "$TGT"; do
  case "$l" in de|en|fr|cs) ;; *) echo "prepare-multi30k.sh: language '$l' is not in Multi30k (de, en, fr, cs)" >&2; exit 2;; esac
done
[ "$SRC" != "$TGT" ] || { echo "prepare-multi30k.sh: --src and --tgt must differ" >&2; exit 2; }
VENV_BIN=${VENV_BIN:-$ROOT/.venv/bin}
export PATH="$VENV_BIN:$PATH"
for t in fast fairseq-preprocess sacremoses python; do
  command -v "$t" >/dev/null || { echo "prepare-multi30k.sh: '$t' not found; run 'make install' first" >&2; exit 1; }
done
DEST=$OUT/data-bin/$SRC-$TGT
if [ -f "$DEST/.done" ] && [ "$FORCE" = 0 ]; then
  echo "prepare-multi30k.sh: $DEST is already prepared; nothing to do (pass --force to rebuild it)"
  exit 0
fi
mkdir -p "$OUT/raw" "$OUT/tok" "$OUT/bpe"
log() { echo "[prepare-multi30k $(date +%H:%M:%S)] $*"; }

# ---- 1. raw data ---------------------------------------------------------------------------------------------
SPLITS="train val test_2016_flickr"
LOCAL=${MULTI30K_DIR:-}
[ -n "$LOCAL" ] || { [ -d "$ROOT/../shared/data/multi30k" ] && LOCAL=$ROOT/../shared/data/multi30k; } || true
have_raw() { for s in $SPLITS; do for l in "$SRC" "$TGT"; do [ -s "$1/$s.$l" ] || return 1; done; done; }
if [ -n "$LOCAL" ]; then
  have_raw "$LOCAL" || { echo "prepare-multi30k.sh: MULTI30K_DIR=$LOCAL lacks one of {train,val,test_2016_flickr}.{$SRC,$TGT}; point it at the raw task-1 files" >&2; exit 1; }
  log "raw data: local copy $LOCAL"
  for s in $SPLITS; do for l in "$SRC" "$TGT"; do cp "$LOCAL/$s.$l" "$OUT/raw/$s.$l"; done; done
  ORIGIN="local copy ($LOCAL)"
else
  URL=https://github.com/multi30k/dataset/raw/master/data/task1/raw
  ok=1
  for s in $SPLITS; do for l in "$SRC" "$TGT"; do
    if ! python - "$URL/$s.$l.gz" "$OUT/raw/$s.$l" <<'PY' 2>/dev/null; then ok=0; fi
import gzip, sys, urllib.request
with urllib.request.urlopen(sys.argv[1], timeout=30) as r, open(sys.argv[2], "wb") as f:
    f.write(gzip.decompress(r.read()))
PY
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
python -m fairseq_outlayers.cli.check_parallel "$OUT/raw" --src "$SRC" --tgt "$TGT" --splits $SPLITS

# ---- 2. tokenisation (sacremoses), optional lowercasing --------------------------------------------------------
for s in $SPLITS; do for l in "$SRC" "$TGT"; do
  log "tokenise $s.$l"
  if [ "$LOWER" = 1 ]; then
    sacremoses -l "$l" -j 2 tokenize -x < "$OUT/raw/$s.$l" | python -c "import sys; [sys.stdout.write(x.lower()) for x in sys.stdin]" > "$OUT/tok/$s.$l"
  else
    sacremoses -l "$l" -j 2 tokenize -x < "$OUT/raw/$s.$l" > "$OUT/tok/$s.$l"
  fi
done; done

# ---- 3. joint BPE (fastBPE) ---------------------------------------------------------------------------------
log "learn $MERGES joint BPE merges"
fast learnbpe "$MERGES" "$OUT/tok/train.$SRC" "$OUT/tok/train.$TGT" > "$OUT/bpe/codes"
for s in $SPLITS; do for l in "$SRC" "$TGT"; do
  fast applybpe "$OUT/bpe/$s.$l" "$OUT/tok/$s.$l" "$OUT/bpe/codes" > /dev/null 2>&1
done; done

# ---- 4. binarise ----------------------------------------------------------------------------------------------
log "fairseq-preprocess -> $DEST"
rm -rf "$DEST"
fairseq-preprocess --source-lang "$SRC" --target-lang "$TGT" --trainpref "$OUT/bpe/train" \
  --validpref "$OUT/bpe/val" --testpref "$OUT/bpe/test_2016_flickr" --destdir "$DEST" --workers 2 \
  > "$OUT/preprocess.$SRC-$TGT.log" 2>&1 || { tail -20 "$OUT/preprocess.$SRC-$TGT.log" >&2; exit 1; }
cp "$OUT/bpe/codes" "$DEST/bpecodes"
{ echo "origin: $ORIGIN"; echo "lowercase: $LOWER"; echo "bpe_merges: $MERGES"; } > "$DEST/.done"
log "done: $DEST (source: $ORIGIN)"
