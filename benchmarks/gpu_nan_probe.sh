#!/usr/bin/env bash
# Probe for the NaN gradients seen at step 10 of the 1.8B runs: eager runs of 12 steps with
# (a) the default SDPA backends, (b) memory-efficient SDPA only; then a compiled throughput run
# with whichever ran clean.
source benchmarks/gpu_common.sh
tokenize_corpus
COMMON="data.path=$DATA training.report_to=none training.disable_tqdm=true training.per_device_train_batch_size=16 training.gradient_accumulation_steps=1 training.logging_steps=2 loss.implementation=chunked"
probe() {  # name, extra overrides
  accelerate launch --config_file accelerate_configs/1gpu.yaml scripts/pretrain.py recipes/qwen3_1p8b_1gpu.yaml $COMMON \
    training.max_steps=12 training.eval_strategy=no training.save_strategy=no training.output_dir=/tmp/$1 model.compile=none "${@:2}" > /tmp/$1.log 2>&1
  local rc=$?; { echo "== $1 rc $rc"; grep -E "'loss'|Error" /tmp/$1.log | tail -3 | cut -c1-160; } | tee -a "$N"; return $rc
}
BACK="model.sdpa_backends=[flash,efficient,cudnn,math]"
probe default || { probe efficient "model.sdpa_backends=[efficient,math]" && BACK="model.sdpa_backends=[efficient,math]"; }
accelerate launch --config_file accelerate_configs/1gpu.yaml benchmarks/benchmark.py ours recipes/qwen3_1p8b_1gpu.yaml $COMMON "$BACK" \
  training.max_steps=24 training.eval_steps=24 evaluation.eval_tokens=524288 training.output_dir=/tmp/ours \
  --out "$OUT/ours_1p8b.json" > /tmp/ours.log 2>&1
{ echo "== throughput ($BACK)"; grep -E "'loss'|'eval_loss'|Error" /tmp/ours.log | tail -5 | cut -c1-400; } | tee -a "$N"
