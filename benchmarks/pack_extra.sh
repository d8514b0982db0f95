#!/usr/bin/env bash
# Wheels the GPU machine lacks beyond ../shared/gpu/pack.sh's kit: OmegaConf (recipes; 2.4 needs only PyYAML)
# and torchao (model.precision=fp8; one 3.4 MB abi3 wheel).
# Run after pack.sh, from the repo root; .carry/setup.sh installs everything in .carry/wheels.
set -euo pipefail
python3 -m pip download -q --no-deps -d .carry/wheels omegaconf==2.4.0 torchao==0.18.0 2>&1 | grep -v WARNING || true
ls .carry/wheels | grep -iE 'omegaconf|torchao'
