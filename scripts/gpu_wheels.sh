#!/usr/bin/env bash
# The wheels that a bare GPU machine needs beside its own torch, numpy, scipy, sacrebleu and pytest, for
# scripts/gpu_run.sh: fairseq-fixed and its pure-Python needs, Cut Cross-Entropy and Liger's kernels (the peers of
# the fused loss; Liger needs the Triton that comes with torch's CUDA build). Run where pip works.
#
#   bash scripts/gpu_wheels.sh                  # into .whl/ for Python 3.12 on x86-64 Linux
#   bash scripts/gpu_wheels.sh DIR 3.11         # another folder or Python version
#
# About 22 MB. .whl/ is ignored by git (this script adds it to .git/info/exclude).
set -euo pipefail
DIR=${1:-.whl}
PYVER=${2:-3.12}
PYTHON=${PYTHON:-python3}
mkdir -p "$DIR"
if [ "$DIR" = .whl ] && [ -d .git ] && ! grep -qx '/.whl/' .git/info/exclude 2>/dev/null; then
    echo /.whl/ >>.git/info/exclude
fi
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
    platforms+=(--platform "$p")
done
# binary wheels for the target Python (fairseq-fixed and bitarray have compiled parts)
"$PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version "$PYVER" --implementation cp \
    "${platforms[@]}" -d "$DIR" fairseq-fixed==0.12.3.1 bitarray==3.12.3
# pure Python: any Python
"$PYTHON" -m pip download -q --no-deps --only-binary=:all: -d "$DIR" hydra-core==1.3.2 omegaconf==2.3.0 \
    sacremoses cut-cross-entropy liger-kernel==0.8.5
# antlr4-python3-runtime 4.9.3 (hydra's parser) is published as a source archive only
"$PYTHON" -m pip wheel -q --no-deps -w "$DIR" antlr4-python3-runtime==4.9.3
ls -1 "$DIR"
du -sh "$DIR"
