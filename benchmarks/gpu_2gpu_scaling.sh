#!/usr/bin/env bash
# Two GPUs (nvidia-h200-x2), scaling: the Qwen3 1.8B shape (recipes/qwen3_1p8b_1gpu.yaml: compile=layers, liger CE,
# micro-batch 20 per GPU, no accumulation, the case where communication is least hidden) on 1 GPU, then on 2 with
# plain DDP, DeepSpeed ZeRO-1 and FSDP2. Scaling efficiency = tokens/s on 2 GPUs / (2 x tokens/s on 1 GPU).
# Each run is time-boxed (a 1.8B run takes 80-120 s: start, per-layer compile, STEPS steps);
# $OUT gets notes.txt, runs.log (log tails) and one JSON per run. The resume runbook is gpu_2gpu_resume.sh.
#   source .carry/setup.sh && bash benchmarks/gpu_2gpu_scaling.sh
source benchmarks/gpu_common.sh
tokenize_corpus
STEPS=${STEPS:-20}
bench() {  # name, accelerate config, extra overrides
  timed $1 accelerate launch --config_file "$2" scripts/benchmark.py ours recipes/qwen3_1p8b_1gpu.yaml \
    data.path=$DATA training.report_to=none training.disable_tqdm=true training.gradient_accumulation_steps=1 \
    training.logging_steps=5 training.eval_strategy=no training.save_strategy=no \
    training.max_steps=$STEPS training.output_dir=/tmp/$1 "${@:3}" --out "$OUT/$1.json"
}
CUDA_VISIBLE_DEVICES=0 bench one_gpu accelerate_configs/1gpu.yaml
bench ddp accelerate_configs/2gpu_ddp.yaml
bench zero1 accelerate_configs/2gpu_zero1.yaml
bench fsdp2 accelerate_configs/2gpu_fsdp2.yaml
python3 - <<'PY' | tee -a "$N"
import json, os
out = os.environ["OUT"]
r = {k: json.load(open(f"{out}/{k}.json")) for k in ("one_gpu", "ddp", "zero1", "fsdp2") if os.path.exists(f"{out}/{k}.json")}
for k, v in r.items():
    line = f"{k:8s} {v['tokens_per_s']:>10,.0f} tok/s  MFU {v.get('mfu', 0):.1%}  peak {v.get('mem_peak_gib') or 0:.1f} GiB"
    if k != "one_gpu" and "one_gpu" in r:
        line += f"  scaling efficiency {v['tokens_per_s'] / (2 * r['one_gpu']['tokens_per_s']):.1%}"
    print(line)
PY
