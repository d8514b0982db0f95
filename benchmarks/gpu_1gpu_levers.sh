#!/usr/bin/env bash
# One GPU, Qwen3 1.8B at seq 2048: which levers move tokens/s. Each variant is one short run of
# this project's trainer (STEPS steps, windows of 5, the first two dropped; no evaluation, the
# final save kept), plus the stock Trainer at the largest micro-batch that fits. Variants run while
# the call has time left (BUDGET_S); $OUT gets one JSON per run, runs.log (log tails), notes.txt, a table.
#   source .carry/setup.sh && bash benchmarks/gpu_1gpu_levers.sh
source benchmarks/gpu_common.sh
tokenize_corpus
STEPS=${STEPS:-25}
COMMON="data.path=$DATA training.report_to=none training.disable_tqdm=true training.gradient_accumulation_steps=1 training.logging_steps=5 training.eval_strategy=no training.save_strategy=no training.max_steps=$STEPS"
variant() {  # name, overrides...
  timed $1 accelerate launch --config_file accelerate_configs/1gpu.yaml benchmarks/benchmark.py ours \
    recipes/qwen3_1p8b_1gpu.yaml $COMMON training.output_dir=/tmp/$1 "${@:2}" --out "$OUT/$1.json"
}
CUDNN="model.sdpa_backends=[cudnn,flash,efficient,math]"
variant layers_liger_cudnn_mb16 model.compile=layers loss.implementation=liger training.per_device_train_batch_size=16 "$CUDNN"
timed stock python3 benchmarks/benchmark.py stock recipes/qwen3_1p8b_1gpu.yaml data.path=$DATA --micro-batch 16,12 \
  --max-steps 30 --out "$OUT/stock.json"
variant layers_liger_flash_mb16 model.compile=layers loss.implementation=liger training.per_device_train_batch_size=16
variant layers_liger_cudnn_mb20 model.compile=layers loss.implementation=liger training.per_device_train_batch_size=20 "$CUDNN"
python3 - <<'PY' | tee -a "$N"
import glob, json, os
for f in sorted(glob.glob(os.environ["OUT"] + "/*.json")):
    r = json.load(open(f)); est = r.get("memory_estimate_gib") or {}
    print(f"{os.path.basename(f)[:-5]:24s} mb {r.get('micro_batch')}  {r.get('tokens_per_s', 0):>8,.0f} tok/s  "
          f"MFU {r.get('mfu', 0):.1%}  peak {r.get('mem_peak_gib') or 0:.1f} GiB  est {est.get('total', 0):.1f}  "
          f"windows {r.get('windows')}  loss {r.get('last_loss')}")
PY
