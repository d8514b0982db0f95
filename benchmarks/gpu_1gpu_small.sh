#!/usr/bin/env bash
# One GPU: loss parity check, the 1.8B shape with the chunked loss, then a real small model
# (scale_146m) trained for ~4.5 minutes, scored with lm-eval and sampled. $OUT gets notes.txt
# (all console figures), ours_1p8b.json, small_log.jsonl, small_summary.json, small_eval/, small_generations.json.
#   source .carry/setup.sh && bash benchmarks/gpu_1gpu_small.sh
source benchmarks/gpu_common.sh
N="$OUT/notes.txt"
tokenize_corpus
[ -n "${PARITY:-}" ] && python3 benchmarks/loss_parity.py "$DATA" scale_53m 4 2>&1 | grep -E "^(hf|chunked|liger)" | tee -a "$N"
COMMON="data.path=$DATA training.report_to=none training.disable_tqdm=true"
accelerate launch --config_file accelerate_configs/1gpu.yaml scripts/benchmark.py ours recipes/qwen3_1p8b_1gpu.yaml \
  $COMMON training.max_steps=${STEPS:-30} training.per_device_train_batch_size=${MB:-16} training.gradient_accumulation_steps=1 \
  training.output_dir=/tmp/ours training.eval_steps=40 evaluation.eval_tokens=1048576 model.fused_loss=${LOSS:-chunked} \
  training.logging_steps=5 --out "$OUT/ours_1p8b.json" > /tmp/ours_1p8b.log 2>&1
{ echo "== 1.8B ours"; grep -E "'loss'|'eval_loss'|Error|error" /tmp/ours_1p8b.log | tail -6; } | tee -a "$N"
if grep -q NonFiniteLossError /tmp/ours_1p8b.log; then  # isolate: HF's own loss (no hidden-state tap)
  accelerate launch --config_file accelerate_configs/1gpu.yaml scripts/pretrain.py recipes/qwen3_1p8b_1gpu.yaml \
    $COMMON training.max_steps=14 training.logging_steps=5 training.per_device_train_batch_size=16 \
    training.gradient_accumulation_steps=1 training.output_dir=/tmp/hfloss model.fused_loss=none > /tmp/hfloss.log 2>&1
  { echo "== 1.8B HF loss"; grep -E "'loss'|Error" /tmp/hfloss.log | tail -4; } | tee -a "$N"
fi
# The small model: SIGTERM at the time limit is the preemption path (checkpoint, clean exit).
timeout -s TERM ${SMALL_S:-240} accelerate launch --config_file accelerate_configs/1gpu.yaml scripts/pretrain.py \
  recipes/small_1gpu.yaml $COMMON training.output_dir=runs/small model.fused_loss=${LOSS:-chunked} > /tmp/small.log 2>&1
{ echo "== small: train rc $?"; grep -E "'eval_loss'|Error|error|compile" /tmp/small.log | tail -8; } | tee -a "$N"
cp runs/small/log.jsonl "$OUT/small_log.jsonl"; cp runs/small/summary.json "$OUT/small_summary.json" 2>/dev/null
CKPT=$(ls -d runs/small/final 2>/dev/null || ls -d runs/small/checkpoint-* | sort -t- -k2 -n | tail -1)
echo "checkpoint $CKPT" | tee -a "$N"
python3 scripts/evaluate.py "$CKPT" --out "$OUT/small_eval" --batch-size 64 --scoring both 2>&1 | tail -12 | tee -a "$N"
{ python3 scripts/generate.py --model "$CKPT" --prompt "The history of the United States" --prompt "def fibonacci(n):" \
    --prompt "Question: What is 7 plus 5?\nAnswer:" --max-new-tokens 60 --temperature 0.8 --top-p 0.95 --seed 1 --json
  python3 scripts/generate.py --model "$CKPT" --unconditional --num-samples 2 --max-new-tokens 60 --temperature 0.8 \
    --top-p 0.95 --seed 1 --json; } > "$OUT/small_generations.json" 2>/dev/null
head -c 2500 "$OUT/small_generations.json"
