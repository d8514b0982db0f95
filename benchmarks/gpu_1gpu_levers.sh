#!/usr/bin/env bash
# One GPU, Qwen3 1.8B at seq 2048: which levers move tokens/s. Each variant is one short run of
# this project's trainer (STEPS steps, windows of 5, the first two dropped; no evaluation, the
# final save kept), plus the stock Trainer at the largest micro-batch that fits. Variants run while
# the call has time left (BUDGET_S); $OUT gets one JSON per run, runs.log (log tails), notes.txt, a table.
#   source .carry/setup.sh && bash benchmarks/gpu_1gpu_levers.sh
source benchmarks/gpu_common.sh
N="$OUT/notes.txt"; tokenize_corpus
STEPS=${STEPS:-25}; BUDGET_S=${BUDGET_S:-560}
COMMON="data.path=$DATA training.report_to=none training.disable_tqdm=true training.gradient_accumulation_steps=1 training.logging_steps=5 training.eval_strategy=no training.save_strategy=no training.max_steps=$STEPS"
left() { echo $((BUDGET_S - SECONDS)); }
finish() {  # name, rc
  { echo "== $1 rc $2 ($(date +%T), ${SECONDS}s)"; grep -E "Error|error:|does not fit" /tmp/$1.log | tail -2 | cut -c1-300; } | tee -a "$N"
  { echo "#### $1"; grep -v -i warn /tmp/$1.log | tail -30; } >> "$OUT/runs.log"
}
variant() {  # name, overrides...
  local t=$(( $(left) - 5 )); [ $t -lt 90 ] && { echo "== $1 skipped: ${t}s left" | tee -a "$N"; return; }
  timeout -s KILL $t accelerate launch --config_file accelerate_configs/1gpu.yaml scripts/benchmark.py ours \
    recipes/qwen3_1p8b_1gpu.yaml $COMMON training.output_dir=/tmp/$1 "${@:2}" --out "$OUT/$1.json" > /tmp/$1.log 2>&1
  finish $1 $?
}
CUDNN="model.sdpa_backends=[cudnn,flash,efficient,math]"
variant layers_liger_cudnn_mb16 model.compile=layers model.fused_loss=liger training.per_device_train_batch_size=16 "$CUDNN"
t=$(( $(left) - 5 )); if [ $t -ge 120 ]; then
  timeout -s KILL $t python3 scripts/benchmark.py stock recipes/qwen3_1p8b_1gpu.yaml data.path=$DATA --micro-batch 16,12 \
    --max-steps 30 --out "$OUT/stock.json" > /tmp/stock.log 2>&1; finish stock $?; fi
variant layers_liger_flash_mb16 model.compile=layers model.fused_loss=liger training.per_device_train_batch_size=16
variant layers_liger_cudnn_mb20 model.compile=layers model.fused_loss=liger training.per_device_train_batch_size=20 "$CUDNN"
python3 - <<'PY' | tee -a "$N"
import glob, json, os
for f in sorted(glob.glob(os.environ["OUT"] + "/*.json")):
    r = json.load(open(f)); est = r.get("memory_estimate_gib") or {}
    print(f"{os.path.basename(f)[:-5]:24s} mb {r.get('micro_batch')}  {r.get('tokens_per_s', 0):>8,.0f} tok/s  "
          f"MFU {r.get('mfu', 0):.1%}  peak {r.get('mem_peak_gib') or 0:.1f} GiB  est {est.get('total', 0):.1f}  "
          f"windows {r.get('windows')}  loss {r.get('last_loss')}")
PY
