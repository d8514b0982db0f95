#!/usr/bin/env bash
# Two GPUs (nvidia-h200-x2), resume: a ZeRO-1 run of the Qwen3 1.8B shape saves at step STEPS/2 and goes on to
# STEPS; the checkpoint is then resumed (optimizer shards, scheduler, data position) on the same 2 GPUs and,
# converted to DeepSpeed's universal format (scripts/zero_to_universal.py), on 1 GPU with the same global batch
# (20 x 2 accumulation). The resumed steps must repeat the first run's losses. Time-boxed like every runbook;
# $OUT gets notes.txt (with the loss comparison) and runs.log.
#   source .carry/setup.sh && bash benchmarks/gpu_2gpu_resume.sh
source benchmarks/gpu_common.sh
tokenize_corpus
STEPS=${STEPS:-8}; HALF=$((STEPS / 2))
COMMON="recipes/qwen3_1p8b_1gpu.yaml data.path=$DATA training.report_to=none training.disable_tqdm=true
  training.logging_steps=1 training.eval_strategy=no training.max_steps=$STEPS"
timed zero1 accelerate launch --config_file accelerate_configs/2gpu_zero1.yaml scripts/pretrain.py $COMMON \
  training.gradient_accumulation_steps=1 training.output_dir=/tmp/zero1 training.save_strategy=steps \
  training.save_steps=$HALF training.resume_from_checkpoint=null
ls -la /tmp/zero1 /tmp/zero1/checkpoint-$HALF 2>&1 | tee -a "$N"
rm -rf /tmp/zero1/checkpoint-$STEPS /tmp/zero1/final
timed resume_2gpu accelerate launch --config_file accelerate_configs/2gpu_zero1.yaml scripts/pretrain.py $COMMON \
  training.gradient_accumulation_steps=1 training.output_dir=/tmp/zero1 training.save_strategy=no \
  training.resume_from_checkpoint=auto
sed -e "s/num_processes: 2/num_processes: 1/" -e "s#ds_configs/zero1.json#ds_configs/zero1_universal.json#" \
  accelerate_configs/2gpu_zero1.yaml > /tmp/1gpu_zero1_universal.yaml
timed convert python3 scripts/zero_to_universal.py /tmp/zero1/checkpoint-$HALF && \
  CUDA_VISIBLE_DEVICES=0 timed resume_1gpu accelerate launch --config_file /tmp/1gpu_zero1_universal.yaml \
    scripts/pretrain.py $COMMON training.gradient_accumulation_steps=2 training.output_dir=/tmp/resume_1gpu \
    training.save_strategy=no training.resume_from_checkpoint=/tmp/zero1/checkpoint-$HALF
python3 - <<'PY' | tee -a "$N"
import json, os
def runs(path):  # one list of events per launch (each starts with a config event)
    if not os.path.exists(path): return []
    out = []
    for line in open(path):
        e = json.loads(line)
        if e["event"] == "config" or not out: out.append([])
        out[-1].append(e)
    return out
def losses(events): return {e["step"]: round(e["loss"], 4) for e in events if e["event"] == "log" and "loss" in e}
two = runs("/tmp/zero1/log.jsonl")
table = {"uninterrupted (2 GPUs)": losses(two[0]) if two else {}}
if len(two) > 1: table["resumed on 2 GPUs"] = losses(two[-1])
one = runs("/tmp/resume_1gpu/log.jsonl")
if one: table["resumed on 1 GPU (universal)"] = losses(one[-1])
for name, l in table.items(): print(f"{name:30s}", " ".join(f"{s}:{v}" for s, v in sorted(l.items())))
PY
