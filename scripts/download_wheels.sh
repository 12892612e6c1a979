#!/usr/bin/env bash
# Downloads, on a machine with network, every wheel scripts/install.sh needs for a target Python and platform,
# so that a machine without network (a closed GPU cluster) can install with `WHEELS=DIR make install`.
#
#   bash scripts/download_wheels.sh DIR [PYTHON_VERSION] [PLATFORM]
#   bash scripts/download_wheels.sh wheels-cp312 3.12 manylinux2014_x86_64
#
# TORCH (default torch==2.13.0) and TORCH_INDEX (default: PyPI) pick the torch build, e.g.
#   TORCH=torch==2.5.1 TORCH_INDEX=https://download.pytorch.org/whl/cu124 bash scripts/download_wheels.sh DIR 3.12
# Only binary wheels are fetched for the target (pip cannot build for another platform); fastBPE has no wheel,
# so its source archive is fetched too and built on the target (install.sh does, with the target's g++).
set -euo pipefail

DIR=${1:?usage: download_wheels.sh DIR [PYTHON_VERSION] [PLATFORM]}
PYVER=${2:-3.12}
PLATFORM=${3:-manylinux2014_x86_64}
PYTHON=${PYTHON:-python3}
TORCH=${TORCH:-torch==2.13.0}
TORCH_INDEX=${TORCH_INDEX:-}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mkdir -p "$DIR"

target=(--python-version "$PYVER" --platform "$PLATFORM" --only-binary=:all: -d "$DIR")
index=()
[ -n "$TORCH_INDEX" ] && index=(--index-url "$TORCH_INDEX" --extra-index-url https://pypi.org/simple)

echo "==> torch ($TORCH) for Python $PYVER, $PLATFORM"
"$PYTHON" -m pip download "${target[@]}" "${index[@]}" "$TORCH"
echo "==> fairseq-fixed, build tools and the package's dependencies"
# the package's own requirements and extras, read from setup.py's lists (install.sh installs them with -e .[...])
# with the versions the committed results used (configs/constraints.txt; CONSTRAINTS= for none)
CONSTRAINTS=${CONSTRAINTS-$ROOT/configs/constraints.txt}
pins=()
[ -n "$CONSTRAINTS" ] && pins=(--constraint "$CONSTRAINTS")
# systran-align (the pairing's fast_align) has no build for Python 3.12 (setup.py's marker leaves it out there)
align=()
case "$PYVER" in 3.10|3.11) align=(systran-align);; esac
"$PYTHON" -m pip download "${target[@]}" "${index[@]}" "${pins[@]}" "$TORCH" fairseq-fixed==0.12.3.1 \
  "cython>=3" wheel "setuptools<81" numpy "sacrebleu>=2.0" sacremoses scipy \
  "pytest>=7" "hypothesis>=6" mpmath "${align[@]}" "gensim>=4.3" matplotlib faiss-cpu "ctranslate2>=4.5,<5"
echo "==> fastBPE source (built on the target)"
"$PYTHON" -m pip download --no-deps --no-binary :all: -d "$DIR" fastBPE==0.1.0
echo "==> done: copy $DIR to the target and run  WHEELS=$DIR make install  (in $ROOT there)"
