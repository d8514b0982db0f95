#!/usr/bin/env bash
# The tests marked `gpu` (the project's kernels on CUDA: tests/kernels; flex_attention_fa4 against Triton, skipped
# without flash-attn-4), and the whole kernel, loss and attention-backend test files, on the GPU machine; the result
# goes to $OUT/gpu_tests.txt (record it in docs/benchmarks.md).
#   source .carry/setup.sh && bash benchmarks/gpu_tests.sh
# flash-attn-4 installed with pip --target (results/long_context_2026-11-27/fa4/README.md) is found only with its
# folders on PYTHONPATH: export PYTHONPATH=$PYTHONPATH:/tmp/site_fa4:/tmp/site_fa4/nvidia_cutlass_dsl/dsl_packages
set -o pipefail
OUT=${OUT:-out/gpu_tests}; mkdir -p "$OUT"
python3 -c "import pytest" 2>/dev/null || { echo "pytest is missing: carry its wheel"; exit 2; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/gpu_tests.txt"
python3 -m pytest -p no:cacheprovider -o addopts="" -q -rs tests/kernels tests/training/test_loss.py \
  tests/models/test_backend.py 2>&1 | tee -a "$OUT/gpu_tests.txt"
