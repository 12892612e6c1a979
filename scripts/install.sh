#!/usr/bin/env bash
# Creates (or refreshes) the project's virtual environment and installs the whole stack in an order that
# works on a fresh machine. Re-running it is quick: every step is skipped when its result is already there.
#
#   VENV=.venv PYTHON=python3 bash scripts/install.sh
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${VENV:-$ROOT/.venv}
PYTHON=${PYTHON:-python3}

die() { echo "install.sh: error: $*" >&2; exit 1; }
step() { echo "==> $*"; }

command -v "$PYTHON" >/dev/null || die "'$PYTHON' not found; install Python 3.10-3.12 or set PYTHON=/path/to/python3.11"
pyver=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
case "$pyver" in
  3.10|3.11|3.12) ;;
  *) die "Python $pyver is not supported: fairseq needs 3.10-3.12 (set PYTHON=/path/to/python3.11)";;
esac
CXX=${CXX:-g++}
command -v "$CXX" >/dev/null || die "no C++ compiler ($CXX) found: fairseq and fastBPE compile C++ extensions; install it (Debian/Ubuntu: apt-get install g++) or set CXX"
"$PYTHON" -c 'import sysconfig, os, sys; h = sysconfig.get_paths()["include"]; sys.exit(0 if os.path.exists(os.path.join(h, "Python.h")) else 1)' \
  || die "Python headers (Python.h) missing: install python$pyver-dev (Debian/Ubuntu) so C extensions can build"

if [ ! -x "$VENV/bin/python" ]; then
  step "creating virtual environment $VENV"
  "$PYTHON" -m venv "$VENV"
fi
PY="$VENV/bin/python"
PIP=("$PY" -m pip install --quiet)
have() { "$PY" -c "import importlib.metadata as m, sys; sys.exit(0 if m.version('$1').split('+')[0] == '$2' else 1)" 2>/dev/null; }
have_any() { "$PY" -c "import importlib.metadata as m; m.version('$1')" 2>/dev/null; }

# torch is pinned and installed first: an open range would let pip pull the newest CUDA build (several GB) on a
# CPU machine; on a CUDA machine the same pin resolves to the CUDA build.
have torch 2.13.0 || { step "installing torch==2.13.0"; "${PIP[@]}" torch==2.13.0; }

# Build tools that fairseq/fastBPE need inside this venv (no build isolation for fastBPE below).
have_any Cython && have_any wheel || { step "installing build tools"; "${PIP[@]}" "cython>=3" wheel "setuptools<81" numpy; }

# fairseq-fixed: official fairseq 0.12.2 does not import on Python >= 3.11 (mutable dataclass defaults);
# this fork of fairseq main carries the 3.11/3.12 fixes. Pinned because the plugin hooks into its internals.
have fairseq-fixed 0.12.3.1 || { step "installing fairseq-fixed==0.12.3.1 (compiles Cython extensions, a few minutes)"; "${PIP[@]}" fairseq-fixed==0.12.3.1 torch==2.13.0; }

# fastBPE: the sdist's pre-generated C++ does not compile on 3.11, so Cython must regenerate it, which needs
# --no-build-isolation (Cython from this venv).
have_any fastBPE || { step "building fastBPE"; "${PIP[@]}" --no-build-isolation fastBPE==0.1.0; }

# The BPE learner `fast` is the C++ program in the same sdist; build it into the venv's bin/.
if [ ! -x "$VENV/bin/fast" ]; then
  step "compiling the fastBPE learner ($VENV/bin/fast)"
  tmp=$(mktemp -d)
  "$PY" -m pip download --quiet --no-deps --no-binary :all: -d "$tmp" fastBPE==0.1.0
  tar -xzf "$tmp"/fastBPE-0.1.0.tar.gz -C "$tmp"
  "$CXX" -std=c++11 -pthread -O3 "$tmp"/fastBPE-0.1.0/fastBPE/main.cc -I"$tmp"/fastBPE-0.1.0/fastBPE -o "$VENV/bin/fast"
  rm -rf "$tmp"
fi

# The package itself (editable) with its runtime deps (sacrebleu, scipy, sacremoses) and extras: systran-align
# (fast_align), gensim (target vectors), matplotlib (plots), faiss-cpu (K-best decoding), pytest and mpmath (tests). The torch pin keeps pip from replacing it.
if ! "$PY" -c "import fairseq_outlayers" 2>/dev/null || [ "$ROOT/setup.py" -nt "$VENV/.outlayers-installed" ]; then
  step "installing fairseq_outlayers (editable) with test extras"
  "${PIP[@]}" -e "$ROOT[test,align,vectors,plot,faiss]" torch==2.13.0
  touch "$VENV/.outlayers-installed"
fi

"$PY" - <<'PY'
import torch, fairseq, fastBPE, sacrebleu, scipy, sacremoses, systran_align, gensim, faiss  # noqa: F401
import fairseq_outlayers
print(f"==> ok: torch {torch.__version__} (cuda: {torch.cuda.is_available()}), fairseq {fairseq.__version__}, "
      f"sacrebleu {sacrebleu.__version__}, fairseq_outlayers {fairseq_outlayers.__version__}")
PY
