#!/usr/bin/env bash
# Creates (or refreshes) the project's virtual environment and installs the whole stack in an order that
# works on a fresh machine. Re-running it is quick: every step is skipped when its result is already there.
#
#   VENV=.venv PYTHON=python3 bash scripts/install.sh
#   WHEELS=DIR bash scripts/install.sh      # offline: everything from DIR (see scripts/download_wheels.sh)
#   CONSTRAINTS= bash scripts/install.sh    # without configs/constraints.txt (the versions the results used)
#   TORCH_INDEX=https://download.pytorch.org/whl/cpu bash scripts/install.sh   # torch from this index only
#
# A CUDA build of torch already in the venv (torch.version.cuda set, version >= TORCH_MIN) is kept; otherwise
# torch==$TORCH_PIN is installed. The pin chooses the version, not the build: from PyPI, torch for Linux x86_64
# is the CUDA build with its nvidia-* wheels (gigabytes). TORCH_INDEX=URL passes --index-url URL to the torch
# step only (the CPU build: https://download.pytorch.org/whl/cpu); TORCH_EXTRA_INDEX=URL passes
# --extra-index-url URL instead (PyPI stays the main index).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${VENV:-$ROOT/.venv}
PYTHON=${PYTHON:-python3}
TORCH_PIN=2.13.0   # the CPU / default pin
TORCH_MIN=2.1      # the oldest torch the package supports (setup.py)
WHEELS=${WHEELS:-}
CONSTRAINTS=${CONSTRAINTS-$ROOT/configs/constraints.txt}
TORCH_INDEX=${TORCH_INDEX:-}
TORCH_EXTRA_INDEX=${TORCH_EXTRA_INDEX:-}

die() { echo "install.sh: error: $*" >&2; exit 1; }
step() { echo "==> $*"; }

# The Pythons fairseq-fixed builds and runs on; setup.py's python_requires says the same (a test checks). On 3.14
# it builds, but `import fairseq` fails (its options' Optional[str] types reach argparse as `str | None`).
PY_SUPPORTED="3.10 3.11 3.12 3.13"
command -v "$PYTHON" >/dev/null || die "'$PYTHON' not found; install Python 3.10-3.13 or set PYTHON=/path/to/python3.13"
pyver=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
case " $PY_SUPPORTED " in
  *" $pyver "*) ;;
  *) why=""
     [ "${pyver%%.*}" = 3 ] && [ "${pyver#*.}" -ge 14 ] 2>/dev/null && why=" (fairseq 0.12 does not import on it)"
     die "Python $pyver is not supported$why: use Python 3.10-3.13 (set PYTHON=/path/to/python3.13)";;
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
PIPDL=("$PY" -m pip download --quiet)
if [ -n "$WHEELS" ]; then
  [ -d "$WHEELS" ] || die "WHEELS=$WHEELS is not a directory (fill it with scripts/download_wheels.sh on a connected machine)"
  WHEELS=$(cd "$WHEELS" && pwd)
  step "offline install: every package from $WHEELS (pip --no-index)"
  PIP+=(--no-index --find-links "$WHEELS")
  PIPDL+=(--no-index --find-links "$WHEELS")
  [ -z "$TORCH_INDEX$TORCH_EXTRA_INDEX" ] || die "TORCH_INDEX / TORCH_EXTRA_INDEX cannot be used with WHEELS (offline): put the torch wheel you want into $WHEELS"
fi
[ -z "$TORCH_INDEX" ] || [ -z "$TORCH_EXTRA_INDEX" ] || die "set TORCH_INDEX or TORCH_EXTRA_INDEX, not both"
TORCH_FROM=()
[ -z "$TORCH_INDEX" ] || TORCH_FROM=(--index-url "$TORCH_INDEX")
[ -z "$TORCH_EXTRA_INDEX" ] || TORCH_FROM=(--extra-index-url "$TORCH_EXTRA_INDEX")
if [ -n "$CONSTRAINTS" ]; then
  [ -f "$CONSTRAINTS" ] || die "CONSTRAINTS=$CONSTRAINTS is not a file (set CONSTRAINTS= to install without pins)"
  PIP+=(--constraint "$CONSTRAINTS")
fi
have() { "$PY" -c "import importlib.metadata as m, sys; sys.exit(0 if m.version('$1').split('+')[0] == '$2' else 1)" 2>/dev/null; }
have_any() { "$PY" -c "import importlib.metadata as m; m.version('$1')" 2>/dev/null; }

# torch is pinned and installed first, so that the later steps cannot move it. The pin picks the version only:
# which build comes (CPU or CUDA) depends on the index (TORCH_INDEX above). A CUDA build already installed (e.g.
# from https://download.pytorch.org/whl/cu124, or a cluster's own) is kept when it is new enough, and every later
# pip call is pinned to it so nothing replaces it.
cuda_torch=$("$PY" - "$TORCH_MIN" <<'PY' 2>/dev/null || true
import importlib.metadata as m, sys
try:
    version = m.version("torch")
    import torch
except Exception:
    sys.exit(0)
def key(v):
    return tuple(int(p) for p in v.split("+")[0].split(".")[:2])
if getattr(torch.version, "cuda", None) and key(version) >= key(sys.argv[1]):
    print(version, torch.version.cuda)
PY
)
if [ -n "$cuda_torch" ]; then
  TORCH_SPEC="torch==${cuda_torch%% *}"
  step "keeping the installed CUDA build of torch ${cuda_torch%% *} (CUDA ${cuda_torch##* })"
else
  TORCH_SPEC="torch==$TORCH_PIN"
  if ! have torch "$TORCH_PIN"; then
    if [ ${#TORCH_FROM[@]} -gt 0 ]; then
      step "installing $TORCH_SPEC from ${TORCH_FROM[*]}"
    else
      step "installing $TORCH_SPEC (from PyPI on Linux x86_64 this is the CUDA build, gigabytes; for the CPU build: TORCH_INDEX=https://download.pytorch.org/whl/cpu)"
    fi
    "${PIP[@]}" "${TORCH_FROM[@]}" "$TORCH_SPEC"
  fi
fi

# Build tools that fairseq/fastBPE need inside this venv (no build isolation for fastBPE below).
have_any Cython && have_any wheel || { step "installing build tools"; "${PIP[@]}" "cython>=3" wheel "setuptools<81" numpy; }

# fairseq-fixed: official fairseq 0.12.2 does not import on Python >= 3.11 (mutable dataclass defaults);
# this fork of fairseq main carries the 3.11/3.12 fixes, and builds from its sdist on 3.13. Pinned because the
# plugin hooks into its internals.
have fairseq-fixed 0.12.3.1 || { step "installing fairseq-fixed==0.12.3.1 (compiles Cython extensions, a few minutes)"; "${PIP[@]}" fairseq-fixed==0.12.3.1 "$TORCH_SPEC"; }

# fastBPE: the sdist's pre-generated C++ does not compile on 3.11, so Cython must regenerate it, which needs
# --no-build-isolation (Cython from this venv).
have_any fastBPE || { step "building fastBPE"; "${PIP[@]}" --no-build-isolation fastBPE==0.1.0; }

# The BPE learner `fast` is the C++ program in the same sdist; build it into the venv's bin/.
if [ ! -x "$VENV/bin/fast" ]; then
  step "compiling the fastBPE learner ($VENV/bin/fast)"
  tmp=$(mktemp -d)
  "${PIPDL[@]}" --no-deps --no-binary :all: -d "$tmp" fastBPE==0.1.0
  tar -xzf "$tmp"/fastBPE-0.1.0.tar.gz -C "$tmp"
  "$CXX" -std=c++11 -pthread -O3 "$tmp"/fastBPE-0.1.0/fastBPE/main.cc -I"$tmp"/fastBPE-0.1.0/fastBPE -o "$VENV/bin/fast"
  rm -rf "$tmp"
fi

# The package itself (editable) with its runtime deps (sacrebleu, scipy, sacremoses) and extras: systran-align
# (fast_align), gensim (target vectors), matplotlib (plots), faiss-cpu (K-best decoding), pytest and mpmath
# (tests). The torch pin ($TORCH_SPEC) keeps pip from replacing torch.
if ! "$PY" -c "import fairseq_outlayers" 2>/dev/null || [ "$ROOT/setup.py" -nt "$VENV/.outlayers-installed" ] \
    || { [ -n "$CONSTRAINTS" ] && [ "$CONSTRAINTS" -nt "$VENV/.outlayers-installed" ]; }; then
  step "installing fairseq_outlayers (editable) with test extras"
  "${PIP[@]}" -e "$ROOT[test,align,vectors,plot,faiss,serve]" "$TORCH_SPEC"
  touch "$VENV/.outlayers-installed"
fi

"$PY" - <<'PY'
import sys
import torch, fairseq, fastBPE, sacrebleu, scipy, sacremoses, gensim, faiss, ctranslate2  # noqa: F401
import fairseq_outlayers.models  # noqa: F401  (registers the plugin)
if sys.version_info < (3, 12):
    import systran_align  # noqa: F401
else:
    print("==> note: systran-align (fast_align) has no build for Python 3.12+; the shared-private pairing reads "
          "alignments from your own fast_align (--aligner pharaoh --alignment FILE)")
build = f"CUDA {torch.version.cuda} build" if torch.version.cuda else "CPU build"
print(f"==> ok: torch {torch.__version__} ({build}; a GPU visible: {torch.cuda.is_available()}), "
      f"fairseq {fairseq.__version__}, sacrebleu {sacrebleu.__version__}, "
      f"fairseq_outlayers {fairseq_outlayers.__version__}")
PY
echo "==> install.sh took ${SECONDS} s"
