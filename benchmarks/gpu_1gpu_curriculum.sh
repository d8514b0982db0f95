#!/usr/bin/env bash
# One GPU (issue 18): recipes/curriculum_best_small.yaml (phase 2 = the last 20% of the steps on Books +
# TechDocs + Math, WSD decay = phase 2) and its single-phase control (the same recipe, schedule and FLOPs on
# the whole mix), one run per device call: ARM=curriculum | single. Each run ends with bits per byte on all
# 10,000 validation documents and per validation set (evaluation.per_set); the log, summary and recipe come
# back in $OUT/<arm>.tgz. Carry: .carry (≥ 6 train shards, see gpu_1gpu_best_small.sh) and out/tok_bpe8k.
#   source .carry/setup.sh && ARM=curriculum bash benchmarks/gpu_1gpu_curriculum.sh
#   source .carry/setup.sh && ARM=single bash benchmarks/gpu_1gpu_curriculum.sh
set -o pipefail
case "${ARM:-}" in curriculum|single) ;; *) echo "ARM=curriculum or ARM=single (got '${ARM:-}')" >&2; exit 2 ;; esac
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/notes.txt"
tok() {  # out folder, extra arguments: the first 6 train shards with the 8k BPE (kept while the machine is warm)
  [ -f "$1/manifest.json" ] || python3 scripts/tokenize_pile.py --input .carry/data/pretrain/mix/train-0000[0-5].jsonl.zst \
    --val-input .carry/data/pretrain/mix/val.jsonl.zst --val-docs 10000 --tokenizer out/tok_bpe8k --seq-len 1024 \
    --out "$1" --num-proc 16 -q "${@:2}" 2>&1 | tail -2
}
tok out/mix6_bpe8k_1024
tok out/mix6hq_bpe8k_1024 --sets Books TechDocs Math
echo "== data (${SECONDS}s)" | tee -a "$OUT/notes.txt"
run=runs/curriculum_$ARM
if [ "$ARM" = single ]; then
  # the control: one phase on the whole mix (the same sampler); the decay steps the curriculum's phase 2 has
  decay=$(python3 scripts/pretrain.py recipes/curriculum_best_small.yaml --dry-run 2>&1 \
    | sed -n 's/.* \([0-9]*\) decay steps from step.*/\1/p' | head -1)
  set -- "data.phases=[]" "data.mixture={mix: 1.0}" data.decay_in_last_phase=false \
    "training.lr_scheduler_kwargs={min_lr_ratio: 0.1, num_decay_steps: ${decay:?no decay steps in the dry run}}" "$@"
fi
rm -rf $run
timeout --foreground -k 20 -s TERM $(( ${BUDGET_S:-585} - SECONDS - 20 )) python3 scripts/pretrain.py \
  recipes/curriculum_best_small.yaml training.output_dir=$run "$@" > "$OUT/train.log" 2>&1
echo "== train rc $? (${SECONDS}s)" | tee -a "$OUT/notes.txt"
tar -czf "$OUT/$ARM.tgz" --exclude='checkpoint-*' --exclude='*.safetensors' --exclude='*.bin' --exclude='*.pt' $run
