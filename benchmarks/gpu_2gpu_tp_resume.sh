#!/usr/bin/env bash
# Tensor parallelism's checkpoints on GPUs (nvidia-h200-x2): a tp 2 run of the Qwen3 124M shape saves at step 4 and
# runs on to 8; a second run resumes its checkpoint-4 (whole weights, each rank's optimizer states in
# optimizer_sharded/: training/checkpoints.py) and must repeat steps 5-8; a third resumes it on one GPU without tp.
# $OUT gets notes.txt (the losses side by side) and each run's log.jsonl.
#   source .carry/setup.sh && bash benchmarks/gpu_2gpu_tp_resume.sh
DATA=${DATA:-out/mix_qwen3_1024} CORPUS_SEQ_LEN=${CORPUS_SEQ_LEN:-1024}  # the 124M shape learned 1,024 positions
source benchmarks/gpu_common.sh
tokenize_corpus > /dev/null
ARGS="recipes/qwen3_1p8b_1gpu.yaml model.config=qwen3_124m model.compile=none data.path=$DATA training.per_device_train_batch_size=8
  training.gradient_accumulation_steps=1 training.warmup_steps=2 training.learning_rate=1e-3 training.logging_steps=1
  training.eval_strategy=no training.report_to=none training.disable_tqdm=true training.max_steps=8"
TP="accelerate launch --config_file accelerate_configs/2gpu_ddp.yaml --num_processes 2 scripts/pretrain.py"
ONE="accelerate launch --config_file accelerate_configs/1gpu.yaml --num_processes 1 scripts/pretrain.py"
rm -rf /tmp/tp_a /tmp/tp_b /tmp/tp_one
timed tp_a $TP $ARGS parallel.tp=2 training.save_strategy=steps training.save_steps=4 training.output_dir=/tmp/tp_a &&
  timed tp_b $TP $ARGS parallel.tp=2 training.save_strategy=no training.output_dir=/tmp/tp_b \
    training.resume_from_checkpoint=/tmp/tp_a/checkpoint-4
CUDA_VISIBLE_DEVICES=0 timed tp_one $ONE $ARGS training.save_strategy=no training.output_dir=/tmp/tp_one \
  training.resume_from_checkpoint=/tmp/tp_a/checkpoint-4
for r in tp_a tp_b tp_one; do cp /tmp/$r/log.jsonl "$OUT/$r.log.jsonl" 2>/dev/null; done
du -sh /tmp/tp_a/checkpoint-4/* 2>/dev/null | tee -a "$N"
python3 - "$OUT" <<'PY' | tee -a "$N"
import json, sys
def losses(name):
    try:
        rows = [json.loads(l) for l in open(f"{sys.argv[1]}/{name}.log.jsonl")]
    except OSError:
        return {}
    return {r["step"]: r["loss"] for r in rows if r.get("event") == "log" and "loss" in r}
a, b, one = losses("tp_a"), losses("tp_b"), losses("tp_one")
for step in sorted(a):
    print(step, a[step], b.get(step, ""), one.get(step, ""))
PY
