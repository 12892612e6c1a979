#!/usr/bin/env bash
# Downloads, on a machine with network, every wheel scripts/install.sh needs for a target Python and platform,
# so that a machine without network (a closed GPU cluster) can install with `WHEELS=DIR make install`.
#
#   bash scripts/download_wheels.sh DIR [PYTHON_VERSION] [PLATFORM]
#   bash scripts/download_wheels.sh wheels-cp312 3.12          # x86-64 Linux: manylinux tags up to glibc 2.28
#
# TORCH (default torch==2.13.0) and TORCH_INDEX (default: PyPI) pick the torch build, e.g.
#   TORCH=torch==2.5.1 TORCH_INDEX=https://download.pytorch.org/whl/cu124 bash scripts/download_wheels.sh DIR 3.12
# Only binary wheels are fetched for the target (pip cannot build for another platform); fastBPE has no wheel,
# so its source archive is fetched too and built on the target (install.sh does, with the target's g++); so is
# fairseq-fixed's for Python 3.13 (it has wheels up to cp312). antlr4-python3-runtime 4.9.3 (hydra's parser) is
# published as a source archive only: its pure-Python wheel is built here.
set -euo pipefail

DIR=${1:?usage: download_wheels.sh DIR [PYTHON_VERSION] [PLATFORM]}
PYVER=${2:-3.12}
PLATFORM=${3:-}
PYTHON=${PYTHON:-python3}
TORCH=${TORCH:-torch==2.13.0}
TORCH_INDEX=${TORCH_INDEX:-}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mkdir -p "$DIR"

# pip takes a --platform tag as it is written, not the older ones it implies: by default every x86-64 manylinux
# tag from glibc 2.28 (torch 2.13's wheels) down to 2.5 (manylinux1)
platforms=()
default_tags="$(for m in $(seq 28 -1 17); do echo "manylinux_2_${m}_x86_64"; done) manylinux2014_x86_64"
for p in ${PLATFORM:-$default_tags manylinux2010_x86_64 manylinux1_x86_64}; do
  platforms+=(--platform "$p")
done
"$PYTHON" -m pip wheel -q --no-deps -w "$DIR" antlr4-python3-runtime==4.9.3
target=(--python-version "$PYVER" "${platforms[@]}" --only-binary=:all: -d "$DIR" --find-links "$DIR")
index=()
[ -n "$TORCH_INDEX" ] && index=(--index-url "$TORCH_INDEX" --extra-index-url https://pypi.org/simple)

echo "==> torch ($TORCH) for Python $PYVER, ${PLATFORM:-manylinux x86_64}"
"$PYTHON" -m pip download "${target[@]}" "${index[@]}" "$TORCH"
echo "==> fairseq-fixed, build tools and the package's dependencies"
# the package's own requirements and extras, read from setup.py's lists (install.sh installs them with -e .[...])
# with the versions the committed results used (configs/constraints.txt; CONSTRAINTS= for none)
CONSTRAINTS=${CONSTRAINTS-$ROOT/configs/constraints.txt}
pins=()
[ -n "$CONSTRAINTS" ] && pins=(--constraint "$CONSTRAINTS")
# systran-align (the pairing's fast_align) has no build for Python 3.12 or later (setup.py's marker leaves it out)
align=()
case "$PYVER" in 3.10|3.11) align=(systran-align);; esac
# fairseq-fixed has wheels up to cp312; for a later Python its source archive and its own requirements
fairseq=(fairseq-fixed==0.12.3.1)
case "$PYVER" in
  3.10|3.11|3.12) ;;
  *) "$PYTHON" -m pip download -q --no-deps --no-binary fairseq-fixed -d "$DIR" fairseq-fixed==0.12.3.1
     fairseq=(cffi hydra-core==1.3.2 omegaconf==2.3.0 regex tqdm bitarray torchaudio scikit-learn packaging);;
esac
"$PYTHON" -m pip download "${target[@]}" "${index[@]}" "${pins[@]}" "$TORCH" "${fairseq[@]}" \
  "cython>=3" wheel "setuptools<81" numpy "sacrebleu>=2.0" sacremoses scipy \
  "pytest>=7" "pytest-xdist>=3.5" "pytest-randomly>=3.15" "coverage>=7.10" "hypothesis>=6" mpmath "${align[@]}" \
  "gensim>=4.3" matplotlib faiss-cpu "ctranslate2>=4.5,<5"
echo "==> fastBPE source (built on the target)"
"$PYTHON" -m pip download --no-deps --no-binary :all: -d "$DIR" fastBPE==0.1.0
echo "==> done: copy $DIR to the target and run  WHEELS=$DIR make install  (in $ROOT there)"
