#!/usr/bin/env bash
# Two GPUs (nvidia-h200-x2): the Qwen3 1.8B shape (recipes/qwen3_1p8b_1gpu.yaml: compile=layers, liger CE,
# micro-batch 20) on 1 GPU, on 2 with plain DDP and on 2 with DeepSpeed ZeRO-1, then the ZeRO-1 run resumed
# from its step-STEPS/2 checkpoint on 2 GPUs and, converted to a universal checkpoint, on 1. Scaling efficiency = tokens/s on 2 GPUs / (2 x tokens/s on 1).
# Each run is time-boxed (a 1.8B run takes 80-120 s: start, per-layer compile, STEPS steps, final save);
# $OUT gets notes.txt, runs.log (log tails) and one JSON per run.
#   source .carry/setup.sh && bash benchmarks/gpu_2gpu_scaling.sh
source benchmarks/gpu_common.sh
tokenize_corpus
STEPS=${STEPS:-20}
COMMON="data.path=$DATA training.report_to=none training.disable_tqdm=true training.gradient_accumulation_steps=1 training.logging_steps=5 training.eval_strategy=no"
bench() {  # name, accelerate config, extra overrides
  timed $1 accelerate launch --config_file "$2" scripts/benchmark.py ours recipes/qwen3_1p8b_1gpu.yaml $COMMON \
    training.max_steps=$STEPS training.output_dir=/tmp/$1 "${@:3}" --out "$OUT/$1.json"
}
CUDA_VISIBLE_DEVICES=0 bench one_gpu accelerate_configs/1gpu.yaml training.save_strategy=no
bench ddp accelerate_configs/2gpu_ddp.yaml training.save_strategy=no
bench zero1 accelerate_configs/2gpu_zero1.yaml training.save_strategy=steps training.save_steps=$((STEPS / 2))
# Resume: the ZeRO-1 run continues from checkpoint-STEPS/2 (optimizer shards, data position) to STEPS.
rm -rf /tmp/zero1/checkpoint-$STEPS /tmp/zero1/final
if timed resume accelerate launch --config_file accelerate_configs/2gpu_zero1.yaml scripts/pretrain.py \
    recipes/qwen3_1p8b_1gpu.yaml $COMMON training.max_steps=$STEPS training.output_dir=/tmp/zero1 \
    training.save_strategy=no training.resume_from_checkpoint=auto; then
  python3 - <<'PY' | tee -a "$N"
import json  # the resumed steps must repeat the first run's losses (same data, same state)
ev = [json.loads(l) for l in open("/tmp/zero1/log.jsonl")]
runs, cur = [], []
for e in ev:
    if e["event"] == "config" and cur: runs.append(cur); cur = []
    cur.append(e)
runs.append(cur)
loss = [{e["step"]: e["loss"] for e in r if e["event"] == "log" and "loss" in e} for r in runs]
if len(loss) >= 2:
    both = sorted(set(loss[0]) & set(loss[-1]))
    print("resume: steps", both, "first", [round(loss[0][s], 4) for s in both], "resumed", [round(loss[-1][s], 4) for s in both])
PY
fi
# Another GPU count: checkpoint-STEPS/2 converted to DeepSpeed's universal format, resumed on 1 GPU with the
# same global batch (20 x 2 accumulation); its losses go to runs.log beside the 2-GPU ones.
sed -e "s/num_processes: 2/num_processes: 1/" -e "s#ds_configs/zero1.json#ds_configs/zero1_universal.json#" \
  accelerate_configs/2gpu_zero1.yaml > /tmp/1gpu_zero1_universal.yaml
timed convert python3 scripts/zero_to_universal.py /tmp/zero1/checkpoint-$((STEPS / 2)) && \
  CUDA_VISIBLE_DEVICES=0 timed resume_1gpu accelerate launch --config_file /tmp/1gpu_zero1_universal.yaml \
    scripts/pretrain.py recipes/qwen3_1p8b_1gpu.yaml $COMMON training.max_steps=$STEPS training.output_dir=/tmp/resume_1gpu \
    training.gradient_accumulation_steps=2 training.save_strategy=no \
    training.resume_from_checkpoint=/tmp/zero1/checkpoint-$((STEPS / 2))
python3 - <<'PY' | tee -a "$N"
import json, os
r = {k: json.load(open(f"{os.environ['OUT']}/{k}.json")) for k in ("one_gpu", "ddp", "zero1") if os.path.exists(f"{os.environ['OUT']}/{k}.json")}
for k, v in r.items():
    print(f"{k:8s} {v['tokens_per_s']:>10,.0f} tok/s  MFU {v.get('mfu', 0):.1%}  peak {v.get('mem_peak_gib') or 0:.1f} GiB")
    if k != "one_gpu" and "one_gpu" in r:
        print(f"         scaling efficiency {v['tokens_per_s'] / (2 * r['one_gpu']['tokens_per_s']):.1%}")
PY
