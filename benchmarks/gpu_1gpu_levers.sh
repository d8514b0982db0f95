#!/usr/bin/env bash
# One GPU, Qwen3 1.8B at seq 2048: which levers move tokens/s. Each variant is one short run of
# this project's trainer (20 steps, windows of 5, the first two dropped), then the stock Trainer at
# the largest micro-batch that fits. $OUT gets one JSON per run + notes.txt; a table is printed last.
#   source .carry/setup.sh && bash benchmarks/gpu_1gpu_levers.sh
source benchmarks/gpu_common.sh
N="$OUT/notes.txt"; tokenize_corpus
STEPS=${STEPS:-20}
COMMON="data.path=$DATA training.report_to=none training.disable_tqdm=true training.gradient_accumulation_steps=1 training.logging_steps=5 training.eval_steps=1000 training.save_steps=1000 training.max_steps=$STEPS"
variant() {  # name, seconds allowed, overrides...
  timeout -s KILL "$2" accelerate launch --config_file accelerate_configs/1gpu.yaml scripts/benchmark.py ours \
    recipes/qwen3_1p8b_1gpu.yaml $COMMON training.output_dir=/tmp/$1 "${@:3}" --out "$OUT/$1.json" > /tmp/$1.log 2>&1
  { echo "== $1 rc $? ($(date +%T))"; grep -E "Error|error:" /tmp/$1.log | tail -2 | cut -c1-300; } | tee -a "$N"
}
variant liger_mb16 140 model.fused_loss=liger training.per_device_train_batch_size=16
variant liger_mb16_cudnn 140 model.fused_loss=liger training.per_device_train_batch_size=16 "model.sdpa_backends=[cudnn,flash,efficient,math]"
variant liger_mb20_cudnn 140 model.fused_loss=liger training.per_device_train_batch_size=20 "model.sdpa_backends=[cudnn,flash,efficient,math]"
timeout -s KILL 170 python3 scripts/benchmark.py stock recipes/qwen3_1p8b_1gpu.yaml data.path=$DATA --micro-batch 16,12 \
  --max-steps 30 --out "$OUT/stock.json" > /tmp/stock.log 2>&1
{ echo "== stock rc $? ($(date +%T))"; grep -E "does not fit|Error" /tmp/stock.log | tail -2 | cut -c1-300; } | tee -a "$N"
python3 - <<'PY' | tee -a "$N"
import glob, json, os
for f in sorted(glob.glob(os.environ["OUT"] + "/*.json")):
    r = json.load(open(f)); est = r.get("memory_estimate_gib") or {}
    print(f"{os.path.basename(f)[:-5]:18s} mb {r.get('micro_batch')}  {r.get('tokens_per_s', 0):>8,.0f} tok/s  "
          f"MFU {r.get('mfu', 0):.1%}  peak {r.get('mem_peak_gib') or 0:.1f} GiB  est {est.get('total', 0):.1f}  "
          f"loss {r.get('last_loss')}")
PY
