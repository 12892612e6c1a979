#!/usr/bin/env bash
# The main job (`make demo`): Multi30k de-en -> every output layer at the same budget -> comparison table.
#
#   bash scripts/demo.sh [UPDATES]      (default: $DEMO_UPDATES or 200)
#
# 1. scripts/prepare-multi30k.sh: sacremoses tokenisation, joint fastBPE, fairseq-preprocess (skipped when done);
# 2. target word vectors for the continuous-output row (scripts/train_target_vectors.py, skipped when present);
# 3. the shared-private word pairing (python -m fairseq_outlayers.pairing, skipped when present);
# 4. python -m fairseq_outlayers.cli.compare: one fairseq-train + fairseq-generate + sacreBLEU per row file in
#    configs/demo/*.args; prints the table and writes work/demo/results.md. Finished rows are reused, so an
#    interrupted demo resumes; delete work/demo (or set DEMO_OUT) to start over.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
VENV_BIN=${VENV_BIN:-$ROOT/.venv/bin}
PY=$VENV_BIN/python
UPDATES=${1:-${DEMO_UPDATES:-200}}
OUT=${DEMO_OUT:-work/demo}
DATA=work/multi30k/data-bin/de-en
log() { echo "[demo $(date +%H:%M:%S)] $*"; }

VENV_BIN=$VENV_BIN bash scripts/prepare-multi30k.sh --src de --tgt en
LOWER=$(sed -n 's/^lowercase: //p' "$DATA/.done")

if [ ! -s work/multi30k/vectors.bpe.en.vec ]; then
  log "training 300-d target word vectors on the English side (continuous-output row)"
  "$PY" scripts/train_target_vectors.py --input work/multi30k/bpe/train.en \
    --output work/multi30k/vectors.bpe.en.vec --dim 300 --dict "$DATA/dict.en.txt"
fi
if [ ! -s "$DATA/pairs.de-en.txt" ]; then
  log "pairing source and target words with fast_align (shared-private row)"
  "$PY" -m fairseq_outlayers.pairing --src-text work/multi30k/bpe/train.de --tgt-text work/multi30k/bpe/train.en \
    --src-dict "$DATA/dict.de.txt" --tgt-dict "$DATA/dict.en.txt" -o "$DATA/pairs.de-en.txt"
fi

log "training one model per output layer, $UPDATES updates each"
"$PY" -m fairseq_outlayers.cli.compare --data-bin "$DATA" --raw-dir work/multi30k/raw \
  $([ "$LOWER" = 1 ] && echo --lowercase) --rows 'configs/demo/*.args' --max-update "$UPDATES" --out "$OUT" \
  --title "make demo: Multi30k de-en, one row per output layer"
