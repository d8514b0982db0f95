#!/usr/bin/env bash
# Build .carry_eval/ in the repo root: what a device call needs for a run report's lm-eval beside a training kit
# packed with ../shared/gpu/pack.sh --no-eval (run from the repo root; ~13 MiB): lm-eval's small dependency wheels,
# lm-eval itself without its ~2,000 bundled task folders (hfpretrain passes its own, src/hfpretrain/eval/tasks, which
# read the data root's files) as lm_eval_slim.tar.xz, and the data root's six report tasks as data/eval/.
# On the GPU machine (after .carry/setup.sh):
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .carry_eval/*.whl \
#     && tar -xJf .carry_eval/lm_eval_slim.tar.xz -C /tmp/site   # and the report with DATA_ROOT holding data/eval
# (benchmarks/gpu_1gpu_best_small10.sh does this)
set -euo pipefail
wheels=${WHEELS_EVAL:-$(cd "$(dirname "$0")/../.." && pwd)/shared/gpu/wheels-eval}  # beside pack.sh's kit
: "${DATA_ROOT:?set DATA_ROOT to the data root (its eval/ folder is packed)}"
grep -qx '/.carry_eval/' .git/info/exclude 2>/dev/null || echo '/.carry_eval/' >> .git/info/exclude
rm -rf .carry_eval /tmp/lm_eval_slim && mkdir -p .carry_eval/data/eval /tmp/lm_eval_slim
for w in "$wheels"/*.whl; do case "$(basename "$w")" in lm_eval-*) ;; *) cp "$w" .carry_eval/ ;; esac; done
python3 -m zipfile -e "$wheels"/lm_eval-*.whl /tmp/lm_eval_slim
find /tmp/lm_eval_slim/lm_eval/tasks -mindepth 1 -maxdepth 1 -type d -exec rm -rf {} +
tar -cJf .carry_eval/lm_eval_slim.tar.xz -C /tmp/lm_eval_slim .
for t in arc_easy arc_challenge openbookqa hellaswag piqa lambada; do cp -r "$DATA_ROOT/eval/$t" .carry_eval/data/eval/; done
du -sh .carry_eval
