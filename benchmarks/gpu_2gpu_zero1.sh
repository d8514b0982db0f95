#!/usr/bin/env bash
# Two GPUs (nvidia-h200-x2), DeepSpeed ZeRO-1: the Qwen3 1.8B shape as in gpu_2gpu_scaling.sh, checkpointing at
# step STEPS/2 (save time is not counted in tokens/s), then that checkpoint resumed (optimizer shards, scheduler,
# data position) on the same 2 GPUs and on 1 GPU with the same ZeRO-1 config: the resume converts the shards to
# DeepSpeed's universal format itself (training/reshard.py; until 2026-12-01 scripts/zero_to_universal.py and
# accelerate_configs/zero1_universal.yaml did, by hand) and keeps the global batch (20 x 2 accumulation). The
# resumed windows must repeat the first run's losses. RESUME_ON="1" skips the 2-GPU resume. Time-boxed; $OUT gets
# notes.txt (scaling and loss tables), runs.log and zero1.json. ENGINE=fsdp2: the same with FSDP2 (sharded state
# dicts), resumed on 1 GPU without FSDP (accelerate_configs/1gpu.yaml): the shards read whole once (checkpoint/whole/).
#   source .carry/setup.sh && bash benchmarks/gpu_2gpu_zero1.sh
source benchmarks/gpu_common.sh
ENGINE=${ENGINE:-zero1}
case $ENGINE in
  zero1) TWO=accelerate_configs/2gpu_zero1.yaml; ONE=accelerate_configs/2gpu_zero1.yaml ;;
  fsdp2) TWO=accelerate_configs/2gpu_fsdp2.yaml; ONE=accelerate_configs/1gpu.yaml ;;
  *) echo "ENGINE: zero1 or fsdp2" | tee -a "$N"; exit 2 ;;
esac
tokenize_corpus
STEPS=${STEPS:-20}; HALF=$((STEPS / 2))
COMMON="recipes/qwen3_1p8b_1gpu.yaml data.path=$DATA training.report_to=none training.disable_tqdm=true
  training.logging_steps=5 training.eval_strategy=no training.max_steps=$STEPS"
timed $ENGINE accelerate launch --config_file $TWO benchmarks/benchmark.py ours $COMMON \
  training.gradient_accumulation_steps=1 training.output_dir=/tmp/zero1 training.save_strategy=steps \
  training.save_steps=$HALF training.resume_from_checkpoint=null --out "$OUT/$ENGINE.json"
python3 benchmarks/scaling_table.py "$OUT" | tee -a "$N"
du -sh /tmp/zero1/checkpoint-$HALF 2>&1 | tee -a "$N"
rm -rf /tmp/zero1/checkpoint-$STEPS /tmp/zero1/final
if [[ " ${RESUME_ON:-2 1} " == *" 2 "* ]]; then
  timed resume_2gpu accelerate launch --config_file $TWO scripts/pretrain.py $COMMON \
    training.gradient_accumulation_steps=1 training.output_dir=/tmp/zero1 training.save_strategy=no \
    training.resume_from_checkpoint=auto
fi
CUDA_VISIBLE_DEVICES=0 timed resume_1gpu accelerate launch --config_file $ONE \
  --num_processes 1 scripts/pretrain.py $COMMON training.gradient_accumulation_steps=1 training.output_dir=/tmp/resume_1gpu \
  training.save_strategy=no training.resume_from_checkpoint=/tmp/zero1/checkpoint-$HALF
grep -h "converting them to DeepSpeed's universal\|reading them whole once\|samples per step kept" /tmp/resume_1gpu.log 2>/dev/null | cut -c1-240 | tee -a "$N"
python3 - <<'PY' | tee -a "$N"
import json, os
def launches(path):  # the log's events, one list per launch (each starts with a config event)
    out = []
    for line in open(path) if os.path.exists(path) else []:
        e = json.loads(line)
        if e["event"] == "config" or not out:
            out.append([])
        out[-1].append(e)
    return out
def losses(events):
    return {e["step"]: round(e["loss"], 4) for e in events if e["event"] == "log" and "loss" in e}
two, one = launches("/tmp/zero1/log.jsonl"), launches("/tmp/resume_1gpu/log.jsonl")
table = {"uninterrupted, 2 GPUs": two[0] if two else [], "resumed, 2 GPUs": two[1] if len(two) > 1 else [],
         "resumed, 1 GPU": one[-1] if one else []}
for name, events in table.items():
    print(f"loss {name:28s}", "  ".join(f"step {s}: {v}" for s, v in sorted(losses(events).items())))
PY
