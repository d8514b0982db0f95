#!/usr/bin/env bash
# One GPU: the baseline small model (scale_146m) trained for as long as one 10-minute device call
# allows around tokenization, lm-eval and generation, then scored and sampled. Everything lands in
# $OUT: notes.txt, small.log (console), small_log.jsonl, small_summary.json, small_eval/, small_generations.json.
#   source .carry/setup.sh && bash benchmarks/gpu_1gpu_small.sh
source benchmarks/gpu_common.sh
tokenize_corpus
COMMON="data.path=$DATA training.report_to=none training.disable_tqdm=true"
# SIGTERM at the time limit is the preemption path (checkpoint, clean exit), a safety net only:
# max_steps is sized so that the cosine schedule finishes inside it.
timeout -s TERM ${SMALL_S:-480} accelerate launch --config_file accelerate_configs/1gpu.yaml scripts/pretrain.py \
  recipes/small_1gpu.yaml $COMMON training.output_dir=runs/small > "$OUT/small.log" 2>&1
{ echo "== small: train rc $? ($(date +%T))"; grep -E "'eval_loss'|Error|error" "$OUT/small.log" | tail -4 | cut -c1-400; } | tee -a "$N"
cp runs/small/log.jsonl "$OUT/small_log.jsonl"; cp runs/small/summary.json "$OUT/small_summary.json" 2>/dev/null
CKPT=$(ls -d runs/small/final 2>/dev/null || ls -d runs/small/checkpoint-* | sort -t- -k2 -n | tail -1)
echo "checkpoint $CKPT" | tee -a "$N"
python3 scripts/evaluate.py "$CKPT" --out "$OUT/small_eval" --batch-size 64 --scoring both 2>&1 | tail -12 | tee -a "$N"
echo "== eval done ($(date +%T))" | tee -a "$N"
{ python3 scripts/generate.py --model "$CKPT" --prompt "The history of the United States" --prompt "def fibonacci(n):" \
    --prompt "Question: What is 7 plus 5?\nAnswer:" --prompt "import numpy as np" --max-new-tokens 60 --temperature 0.8 \
    --top-p 0.95 --seed 1 --json; } > "$OUT/small_generations.json" 2>> "$N"
echo "== generation done ($(date +%T))" | tee -a "$N"
head -c 1500 "$OUT/small_generations.json"
