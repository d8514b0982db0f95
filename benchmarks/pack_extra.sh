#!/usr/bin/env bash
# Wheels the GPU machine lacks beyond ../shared/gpu/pack.sh's kit: OmegaConf (recipes; 2.4 needs only PyYAML).
# Run after pack.sh, from the repo root; .carry/setup.sh installs everything in .carry/wheels.
set -euo pipefail
python3 -m pip download -q --no-deps -d .carry/wheels omegaconf==2.4.0 2>&1 | grep -v WARNING || true
ls .carry/wheels | grep -i omegaconf
