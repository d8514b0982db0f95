#!/usr/bin/env bash
# Two GPUs (nvidia-h200-x2): the Qwen3 1.8B shape on 1 GPU, on 2 with plain DDP and on 2 with DeepSpeed ZeRO-1,
# then a resume from the ZeRO-1 checkpoint. Scaling efficiency = tokens/s on 2 GPUs / (2 x tokens/s on 1).
#   source .carry/setup.sh && bash benchmarks/gpu_2gpu_scaling.sh      ($OUT gets notes.txt + one JSON per run)
source benchmarks/gpu_common.sh
N="$OUT/notes.txt"; tokenize_corpus
STEPS=${STEPS:-30}; MB=${MB:-16}
COMMON="data.path=$DATA training.report_to=none training.disable_tqdm=true training.per_device_train_batch_size=$MB training.gradient_accumulation_steps=1 training.logging_steps=5 training.eval_steps=1000 evaluation.eval_tokens=524288"
bench() {  # name, accelerate config, extra overrides
  accelerate launch --config_file "$2" scripts/benchmark.py ours recipes/qwen3_1p8b_1gpu.yaml $COMMON \
    training.max_steps=$STEPS training.output_dir=/tmp/$1 "${@:3}" --out "$OUT/$1.json" > /tmp/$1.log 2>&1
  { echo "== $1 rc $?"; grep -E "'loss'|Error" /tmp/$1.log | tail -2 | cut -c1-300; } | tee -a "$N"
}
CUDA_VISIBLE_DEVICES=0 bench one_gpu accelerate_configs/1gpu.yaml
bench ddp accelerate_configs/2gpu_ddp.yaml
bench zero1 accelerate_configs/2gpu_zero1.yaml training.save_steps=20
# Resume: the same run continues from checkpoint-20 (ZeRO-1 optimizer shards) to step STEPS+10.
rm -rf /tmp/zero1/checkpoint-$STEPS /tmp/zero1/final
accelerate launch --config_file accelerate_configs/2gpu_zero1.yaml scripts/pretrain.py recipes/qwen3_1p8b_1gpu.yaml $COMMON \
  training.max_steps=$((STEPS + 10)) training.output_dir=/tmp/zero1 training.resume_from_checkpoint=auto > /tmp/resume.log 2>&1
{ echo "== zero1 resume rc $?"; grep -E "resuming|'loss'|Error" /tmp/resume.log | tail -3 | cut -c1-300; } | tee -a "$N"
python3 - <<'PY' | tee -a "$N"
import json, os
r = {k: json.load(open(f"{os.environ['OUT']}/{k}.json")) for k in ("one_gpu", "ddp", "zero1") if os.path.exists(f"{os.environ['OUT']}/{k}.json")}
for k, v in r.items():
    print(f"{k:8s} {v['tokens_per_s']:>10,.0f} tok/s  MFU {v.get('mfu', 0):.1%}  peak {v.get('mem_peak_gib') or 0:.1f} GiB")
    if k != "one_gpu" and "one_gpu" in r:
        print(f"         scaling efficiency {v['tokens_per_s'] / (2 * r['one_gpu']['tokens_per_s']):.1%}")
PY
