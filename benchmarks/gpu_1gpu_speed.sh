#!/usr/bin/env bash
# One GPU: the Qwen3 1.8B shape at seq 2048, this project's trainer vs a stock transformers.Trainer.
#   source .carry/setup.sh && bash benchmarks/gpu_1gpu_speed.sh     (writes $OUT/ours.json, stock.json, table.md)
source benchmarks/gpu_common.sh
tokenize_corpus
MB=${MB:-16}; STEPS=${STEPS:-50}
COMMON="data.path=$DATA training.max_steps=$STEPS training.per_device_train_batch_size=$MB training.gradient_accumulation_steps=1 training.report_to=none training.disable_tqdm=true"
# Realistic cadence: logging every 10 steps, validation (1M tokens) and a checkpoint inside the run;
# their time is excluded from the windows and shown in end_to_end.
accelerate launch --config_file accelerate_configs/1gpu.yaml benchmarks/benchmark.py ours recipes/qwen3_1p8b_1gpu.yaml \
  $COMMON training.output_dir=/tmp/ours training.eval_steps=40 training.save_steps=40 evaluation.eval_tokens=1048576 \
  --out "$OUT/ours.json" 2>&1 | grep -vi warn | tail -25 | tee "$OUT/ours.log"
python3 benchmarks/benchmark.py stock recipes/qwen3_1p8b_1gpu.yaml $COMMON --micro-batch ${STOCK_MB:-12,8,6,4} \
  --max-steps $STEPS --out "$OUT/stock.json" 2>&1 | grep -vi warn | tail -25 | tee "$OUT/stock.log"
python3 benchmarks/benchmark.py table "$OUT/ours.json" "$OUT/stock.json" | tee "$OUT/table.md"
