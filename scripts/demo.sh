#!/usr/bin/env bash
# The main job (`make demo`): Multi30k de-en -> every output layer at the same budget -> comparison table.
#
#   bash scripts/demo.sh [UPDATES]      (default: $DEMO_UPDATES or 200)
#   bash scripts/demo.sh --updates 800 --seeds "1 2" --rows "configs/demo/*.args configs/continuous/*.args" \
#                        --out work/results --title "..."      (the results table of docs/results.md: `make results`)
#   bash scripts/demo.sh --jobs 1       (one run at a time; default: one per CPU core or GPU)
#
# 1. scripts/prepare-multi30k.sh --word-target (source BPE, word-level English) for the continuous-output rows, then
#    without it: sacremoses tokenisation, joint fastBPE, fairseq-preprocess (each skipped when done);
# 2. 300-d target word vectors on the word-level English training text (scripts/train_target_vectors.py,
#    fastText, skipped when present), in the background beside the BPE data (work/multi30k/vectors.log);
# 3. the shared-private word pairing (python -m fairseq_outlayers.tools.pairing, skipped when present), in the
#    background from the BPE data on, beside the vectors (work/multi30k/pairing.log); each log is printed when its
#    step has ended;
# 4. python -m fairseq_outlayers.lab.compare: one fairseq-train + fairseq-generate + sacreBLEU per row file
#    (default configs/demo/*.args) and seed, N runs at once (--jobs N, or DEMO_JOBS; default one per CPU core, each
#    with one thread on two cores; one per GPU on CUDA), the longest rows first;
#    prints the table once and writes OUT/results.md (default work/demo),
#    with, beside each row, the results ledger's converged figure for the same model, data and method
#    (docs/results/runs, python -m fairseq_outlayers.lab.ledger) or "none yet"; other models and data only by link.
#    Finished rows are reused, so an interrupted run resumes; delete OUT (or choose another --out) to start over.
# The last line gives the time of each phase.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
VENV_BIN=${VENV_BIN:-$ROOT/.venv/bin}
PY=$VENV_BIN/python
UPDATES=${DEMO_UPDATES:-200}
OUT=${DEMO_OUT:-work/demo}
SEEDS=1
ROWS="configs/demo/*.args"
TITLE="make demo: Multi30k de-en, one row per output layer"
JOBS=${DEMO_JOBS:-}
die() { echo "demo.sh: error: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --updates|--seeds|--rows|--out|--title|--jobs) [ $# -ge 2 ] || die "$1 needs a value"
      case "$1" in --updates) UPDATES=$2;; --seeds) SEEDS=$2;; --rows) ROWS=$2;; --out) OUT=$2;; --title) TITLE=$2;;
        --jobs) JOBS=$2;; esac
      shift 2;;
    -h|--help) awk 'NR == 1 { next } /^#/ { print; next } { exit }' "$0"; exit 0;;
    [0-9]*) UPDATES=$1; shift;;
    *) die "unknown option '$1' (see --help)";;
  esac
done
case "$UPDATES" in ''|*[!0-9]*|0) die "the number of updates must be a positive integer, got '$UPDATES'";; esac
case "$JOBS" in ''|[1-9]|[1-9][0-9]) ;; *) die "--jobs must be a positive integer, got '$JOBS'";; esac
DATA=work/multi30k/data-bin/de-en
WORD=work/multi30k/data-bin/de-en-word
log() { echo "[demo $(date +%H:%M:%S)] $*"; }

phase_start=$SECONDS
PHASES=""
phase() { PHASES="$PHASES, $1 $((SECONDS - phase_start)) s"; phase_start=$SECONDS; }

# Background steps, each on one core beside the step in front: the vectors beside the BPE data, the pairing beside
# the vectors; each one's output goes to its log, printed when it has ended.
BG_PIDS=
trap 'for p in $BG_PIDS; do kill "$p" 2>/dev/null || true; done' EXIT
in_background() {  # in_background LOG COMMAND...: the PID in BG
  local out=$1
  shift
  "$@" > "$out" 2>&1 &
  BG=$!
  BG_PIDS="$BG_PIDS $BG"
}
background_done() {  # background_done PID LOG WHAT: wait for it, print its log, stop the demo if it failed
  local status=0
  wait "$1" || status=$?
  local p rest=
  for p in $BG_PIDS; do [ "$p" = "$1" ] || rest="$rest $p"; done
  BG_PIDS=$rest
  cat "$2"
  [ "$status" = 0 ] || die "$3 failed (exit $status); its output is above and in $2"
  log "$3: done"
}

VENV_BIN=$VENV_BIN bash scripts/prepare-multi30k.sh --src de --tgt en --word-target
phase "word-level data"
VECTORS=work/multi30k/vectors.word.en.300d.vec
VECTORS_PID=
if [ ! -s "$VECTORS" ]; then
  log "training 300-d target word vectors on the word-level English side (continuous-output rows), in the" \
    "background: work/multi30k/vectors.log"
  # on a copy of the text: the BPE preparation below writes work/multi30k/tok/ again (the same text)
  cp work/multi30k/tok/train.en work/multi30k/vectors-input.en
  in_background work/multi30k/vectors.log "$PY" scripts/train_target_vectors.py --input work/multi30k/vectors-input.en \
    --output "$VECTORS" --dim 300 --dict "$WORD/dict.en.txt" --workers 1
  VECTORS_PID=$BG
fi

VENV_BIN=$VENV_BIN bash scripts/prepare-multi30k.sh --src de --tgt en
phase "BPE data (beside the vectors)"
PAIRS_PID=
if [ ! -s "$DATA/pairs.de-en.txt" ]; then
  log "pairing source and target words with fast_align (shared-private row), in the background:" \
    "work/multi30k/pairing.log"
  in_background work/multi30k/pairing.log "$PY" -m fairseq_outlayers.tools.pairing \
    --src-text work/multi30k/bpe/train.de --tgt-text work/multi30k/bpe/train.en \
    --src-dict "$DATA/dict.de.txt" --tgt-dict "$DATA/dict.en.txt" -o "$DATA/pairs.de-en.txt"
  PAIRS_PID=$BG
fi
[ -z "$VECTORS_PID" ] || background_done "$VECTORS_PID" work/multi30k/vectors.log "the target vectors"
phase "vectors (after the BPE data)"
[ -z "$PAIRS_PID" ] || background_done "$PAIRS_PID" work/multi30k/pairing.log "the pairing"
phase "pairing (after the vectors)"

log "training one model per output layer and seed ($SEEDS), $UPDATES updates each"
# shellcheck disable=SC2086  # ROWS holds glob patterns and SEEDS a list: both are split (and globbed) on purpose
"$PY" -m fairseq_outlayers.lab.compare --data-bin "$DATA" --raw-dir work/multi30k/raw \
  --rows $ROWS --max-update "$UPDATES" --seeds $SEEDS --out "$OUT" \
  --title "$TITLE" --ledger docs/results/runs ${JOBS:+--jobs "$JOBS"}
phase "rows"
log "done in $SECONDS s: ${PHASES#, }"
