#!/usr/bin/env bash
# The GPU checks of the fused loss and of bf16, in one run (about 10 minutes on one H100):
#   1. the fused loss on CUDA against the float64 reference (chunked and, when installed, Cut Cross-Entropy);
#   2. --bf16 / --memory-efficient-bf16 smoke runs on the GPU (fused, tied, joint, vMF);
#   3. the fused-loss table at V = 32k, 50k, 128k, 256k (docs/benchmarks/fused_loss_gpu.md);
#   4. a short precision table on the synthetic corpus (docs/benchmarks/precision_gpu_synthetic.md).
# Usage: bash scripts/gpu_fused_bf16.sh [CCE_WHEEL]   (CCE_WHEEL: a cut_cross_entropy wheel for a machine without
# network; installed with --no-deps, Triton comes with the CUDA build of torch). Outputs go to $OUT (default: .).
set -u
PY=${PY:-python}
OUT=${OUT:-.}
if [ $# -ge 1 ]; then $PY -m pip install --no-deps "$1" >/dev/null && echo "installed $1"; fi
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
$PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
$PY -c "import cut_cross_entropy" 2>/dev/null && echo "cut-cross-entropy installed" || echo "cut-cross-entropy missing"
timeout 120 $PY -m pytest -q -p no:cacheprovider tests/test_fused_cross_entropy.py -k cuda 2>&1 | tail -3
timeout 240 $PY -m pytest -q -p no:cacheprovider tests/test_cuda.py \
  -k "mixed_precision and bf16 and (fused or tied- or joint- or vmf)" 2>&1 | tail -5
timeout 240 $PY scripts/bench_fused_loss.py --device cuda --output "$OUT/fused_loss_gpu.md" --force 2>&1 | grep -v INFO | tail -40
timeout 180 $PY scripts/bench_precision.py --device cuda --synthetic --max-update 100 \
  --methods softmax softmax-fused tied joint joint-fused fixed sampled --work-dir "$OUT/precision-work" \
  --output "$OUT/precision_gpu_synthetic.md" --force 2>&1 | grep -v INFO | tail -20
