# Shell functions shared by scripts/prepare-*.sh.  Source it, then call pc_setup:
#
#   . "$(dirname "${BASH_SOURCE[0]}")/lib/prepare-common.sh"
#   pc_setup prepare-foo          # messages: "prepare-foo.sh: ..." (errors), "[prepare-foo HH:MM:SS] ..." (log)
#
# Conventions every preparation script follows:
#   * user mistakes print one line "<script>.sh: <what> ; <what to do>" on stderr: exit 2 for a bad option,
#     exit 1 for bad or missing data and tools;
#   * raw data comes from a local copy (flag or environment variable) or, when none is given, a download with
#     Python's urllib; it is checked (files present, UTF-8, line-aligned, expected sizes as warnings);
#   * tokenisation is sacremoses, BPE is fastBPE ("fast learnbpe" / "fast applybpe"), binarisation is
#     fairseq-preprocess;
#   * a finished output (DEST/.done) is never rebuilt unless --force is given.
# Nothing here changes the working directory or touches files outside the paths it is given.

# pc_setup NAME: names the calling script and sets ROOT (the repository).
pc_setup() {
  PC_NAME=$1
  PC_SCRIPT=$1.sh
  ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
}

log() { echo "[$PC_NAME $(date +%H:%M:%S)] $*"; }
warn() { log "WARNING: $*"; }
# die MESSAGE: data or tool problem (exit 1); usage_error MESSAGE: bad command line (exit 2).
die() { echo "$PC_SCRIPT: $*" >&2; exit 1; }
usage_error() { echo "$PC_SCRIPT: $*" >&2; exit 2; }

# pc_arg "$@": the value of the option in $1 (use as: --src) SRC=$(pc_arg "$@"); shift 2;;).
pc_arg() {
  [ $# -ge 2 ] && [ -n "$2" ] && case "$2" in --*) false;; esac || usage_error "option '$1' needs a value (see --help)"
  printf '%s' "$2"
}

# pc_int OPTION VALUE: VALUE must be a positive integer.
pc_int() { case "$2" in ''|*[!0-9]*|0) usage_error "$1 must be a positive integer, got '$2'";; esac; }

# pc_help FILE: print the comment block at the top of FILE (after the shebang).
pc_help() { awk 'NR == 1 { next } /^#/ { print; next } { exit }' "$1"; }

# pc_unknown OPTION
pc_unknown() { usage_error "unknown option '$1' (see --help)"; }

# pc_require_tools TOOL...: put the project's venv first on PATH and check the tools exist.
pc_require_tools() {
  VENV_BIN=${VENV_BIN:-$ROOT/.venv/bin}
  export PATH="$VENV_BIN:$PATH"
  local t
  for t in "$@"; do
    command -v "$t" >/dev/null || die "'$t' not found; run 'make install' first"
  done
}

# pc_skip_if_done DEST: a finished output is never rebuilt without --force (FORCE=1).
pc_skip_if_done() {
  if [ -f "$1/.done" ] && [ "${FORCE:-0}" = 0 ]; then
    echo "$PC_SCRIPT: $1 is already prepared; nothing to do (pass --force to rebuild it)"
    exit 0
  fi
}

# pc_mark_done DEST LINE...: record how DEST was made; written last, so a crash leaves no .done behind.
pc_mark_done() {
  local dest=$1; shift
  printf '%s\n' "$@" > "$dest/.done"
}

# pc_download URL OUT: fetch URL to OUT with Python's urllib (no wget/curl needed); ".gz" URLs are gunzipped
# unless OUT ends in .gz/.tgz. Returns non-zero (quietly) when offline or the URL fails.
pc_download() {
  python - "$1" "$2" <<'PY' 2>/dev/null
import gzip, os, sys, urllib.request
url, out = sys.argv[1], sys.argv[2]
tmp = out + ".part"
with urllib.request.urlopen(url, timeout=60) as r, open(tmp, "wb") as f:
    while True:
        block = r.read(1 << 20)
        if not block:
            break
        f.write(block)
if url.endswith(".gz") and not out.endswith((".gz", ".tgz")):
    data = gzip.decompress(open(tmp, "rb").read())
    open(tmp, "wb").write(data)
os.replace(tmp, out)
PY
}

# pc_extract ARCHIVE DIR: unpack a .tgz/.tar.gz/.zip with Python (tarfile/zipfile).
pc_extract() {
  python - "$1" "$2" <<'PY'
import sys, tarfile, zipfile
src, dst = sys.argv[1], sys.argv[2]
if zipfile.is_zipfile(src):
    zipfile.ZipFile(src).extractall(dst)
else:
    with tarfile.open(src) as t:
        t.extractall(dst, filter="data") if hasattr(tarfile, "data_filter") else t.extractall(dst)
PY
}

# pc_check_parallel DIR SRC TGT SPLIT...: files present, UTF-8, same line counts (fails with one line).
pc_check_parallel() {
  local dir=$1 src=$2 tgt=$3; shift 3
  # run as a file: the check needs only the standard library, not the (slow) import of fairseq
  python "$ROOT/fairseq_outlayers/tools/check_parallel.py" "$dir" --src "$src" --tgt "$tgt" --splits "$@"
}

# pc_expect_lines FILE EXPECTED [TOLERANCE_PERCENT]: warn (never fail) when FILE's line count is off.
pc_expect_lines() {
  local n tol=${3:-5}
  n=$(wc -l < "$1")
  if [ $(( n * 100 )) -lt $(( $2 * (100 - tol) )) ] || [ $(( n * 100 )) -gt $(( $2 * (100 + tol) )) ]; then
    warn "$1 has $n lines; the official data has about $2 (check that the raw files are complete)"
  fi
}

# pc_tokenise LANG LOWER IN OUT: Moses tokenisation (sacremoses in one Python process, 2 workers; the same text
# as `sacremoses -l LANG tokenize`, XML characters escaped), lowercased when LOWER=1.
pc_tokenise() {
  local lower=
  [ "$2" = 1 ] && lower=--lower
  pc_corpus_tool tokenize --lang "$1" $lower --jobs "${PC_JOBS:-2}" "$3" "$4"
}

# pc_tokenise_norm LANG LOWER IN OUT: the same after Moses punctuation normalisation and removal of
# non-printing characters (the WMT recipes).
pc_tokenise_norm() {
  local lower=
  [ "$2" = 1 ] && lower=--lower
  pc_corpus_tool tokenize --lang "$1" $lower --normalize --jobs "${PC_JOBS:-2}" "$3" "$4"
}

# pc_find DIR NAME: the first regular file called NAME anywhere under DIR (archives extract to various
# layouts; users copy files flat). Prints nothing when absent.
pc_find() { find "$1" -name "$2" -type f 2>/dev/null | sort | head -1; }

# pc_learn_bpe MERGES CODES FILE [FILE2]: fastBPE codes from one file (one side) or two (joint BPE).
# A corpus with fewer possible merges than MERGES makes fastBPE pad the file with repeated zero-count codes, which
# "fast applybpe" then rejects; those are dropped with a warning (a real corpus never has them).
pc_learn_bpe() {
  local merges=$1 codes=$2 n; shift 2
  fast learnbpe "$merges" "$@" > "$codes.all"
  awk '$3 > 0 && !seen[$1 " " $2]++' "$codes.all" > "$codes"
  rm -f "$codes.all"
  n=$(wc -l < "$codes")
  [ "$n" -ge "$merges" ] || warn "the training text allows only $n BPE merges (asked for $merges)"
}

# pc_apply_bpe CODES IN OUT
pc_apply_bpe() {
  fast applybpe "$3" "$2" "$1" > /dev/null 2>&1 || die "fast applybpe failed on $2"
}

# pc_binarise DEST LOG fairseq-preprocess-options...: (re)build DEST with fairseq-preprocess; on failure show
# the end of LOG.
pc_binarise() {
  local dest=$1 logfile=$2; shift 2
  rm -rf "$dest"
  fairseq-preprocess "$@" --destdir "$dest" > "$logfile" 2>&1 || { tail -20 "$logfile" >&2; exit 1; }
}

# pc_corpus_tool ARGS...: the Python text helpers (tag stripping, SGML/XML extraction, cleaning, splitting).
pc_corpus_tool() { python "$ROOT/fairseq_outlayers/tools/corpus_tools.py" --prog "$PC_SCRIPT" "$@"; }

# pc_fetch_archives ORIG HINT URL...: download each archive and extract it into ORIG, once (a marker file per
# archive); on failure stop with "downloading URL failed (offline?); HINT"
pc_fetch_archives() {
  local orig=$1 hint=$2 url f
  shift 2
  mkdir -p "$orig"
  for url in "$@"; do
    f=$orig/$(basename "$url")
    if [ ! -f "$f.extracted" ]; then
      log "downloading $url"
      pc_download "$url" "$f" || die "downloading $url failed (offline?); $hint"
      pc_extract "$f" "$orig" && touch "$f.extracted" && rm -f "$f"
    fi
  done
}

# pc_concat_corpora ORIG PREFIX SRC TGT HINT CORPUS=LINES...: concatenate the parallel training corpora found
# under ORIG into PREFIX.SRC / PREFIX.TGT (each checked, its line count compared with LINES); a missing corpus
# is a warning, none at all an error ending with HINT
pc_concat_corpora() {
  local orig=$1 prefix=$2 src=$3 tgt=$4 hint=$5 item c a b found=0
  shift 5
  : > "$prefix.$src"; : > "$prefix.$tgt"
  for item in "$@"; do
    c=${item%%=*}
    a=$(pc_find "$orig" "$c.$src"); b=$(pc_find "$orig" "$c.$tgt")
    if [ -z "$a" ] || [ -z "$b" ]; then warn "$c.{$src,$tgt} not found under $orig: training without it"; continue; fi
    python "$ROOT/fairseq_outlayers/tools/check_parallel.py" "$(dirname "$a")" --src "$src" --tgt "$tgt" --splits "$c"
    pc_expect_lines "$a" "${item#*=}"
    cat "$a" >> "$prefix.$src"; cat "$b" >> "$prefix.$tgt"; found=$((found + 1))
  done
  [ "$found" -gt 0 ] || die "no training corpus found under $orig; $hint"
}

# pc_binarise_joint_bpe DEST JOINED DONE_LINE...: fairseq-preprocess $OUT/bpe/{train,valid,test}.{$SRC,$TGT}
# (with --joined-dictionary when JOINED is 1), keep the BPE codes next to the data, mark DEST done
pc_binarise_joint_bpe() {
  local dest=$1 joined=$2 join=()
  shift 2
  [ "$joined" = 1 ] && join=(--joined-dictionary)
  log "fairseq-preprocess -> $dest"
  pc_binarise "$dest" "$OUT/preprocess.$SRC-$TGT.log" --source-lang "$SRC" --target-lang "$TGT" \
    --trainpref "$OUT/bpe/train" --validpref "$OUT/bpe/valid" --testpref "$OUT/bpe/test" --workers 2 \
    ${join[@]+"${join[@]}"}
  cp "$OUT/bpe/codes" "$dest/bpecodes"
  pc_mark_done "$dest" "$@"
  log "done: $dest (source: $ORIGIN)"
}
