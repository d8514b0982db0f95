#!/usr/bin/env bash
# One GPU: is ZeRO-1's early-loss gap on GPUs (0.29-0.37 above DDP and FSDP2 at step 20 on 2 and 4 H200s, issue 58)
# DeepSpeed's numerics or its distribution? The same recipe, steps and data on one GPU, alternating: plain (autocast
# over fp32 weights) and DeepSpeed ZeRO-1 at one process (its bf16 weights with fp32 master copies), losses at every
# step. A gap here is DeepSpeed's bf16 path; none here puts it in the several-process path.
# Data: best_small's (out/mix6_bpe8k_1024, as benchmarks/gpu_1gpu_moe_study.sh tokenizes it); carry deepspeed's
# wheels (pack.sh without NO_DEEPSPEED).
#   source .carry/setup.sh && bash benchmarks/gpu_1gpu_zero1_gap.sh      ($OUT: plain, zero1, plain.2 logs; gap.txt)
# The 1.8B shape as the several-GPU runs ran it: RECIPE=recipes/qwen3_1p8b_1gpu.yaml DATA=out/mix_qwen3_2048
#   EXTRA="training.gradient_accumulation_steps=1" (EXTRA: overrides for every run, split at spaces)
DATA=${DATA:-out/mix6_bpe8k_1024}  # before gpu_common.sh, which defaults DATA to the Qwen3 corpus
source benchmarks/gpu_common.sh
RECIPE=${RECIPE:-recipes/best_small.yaml}
[ "$DATA" = out/mix_qwen3_2048 ] && [ ! -f "$DATA/manifest.json" ] && tokenize_corpus  # the 1.8B shape's data
gap_run() {  # name, accelerate config, extra launch options
  rm -rf /tmp/gap_$1
  timed gap_$1 accelerate launch --config_file "$2" ${3:-} benchmarks/benchmark.py ours $RECIPE data.path=$DATA \
    training_flops=null training.max_steps=${STEPS:-30} training.warmup_steps=10 training.logging_steps=1 \
    training.eval_strategy=no \
    training.save_strategy=no training.report_to=none training.disable_tqdm=true training.output_dir=/tmp/gap_$1 \
    ${EXTRA:-} --out "$OUT/gap_$1.json"
  cp /tmp/gap_$1/log.jsonl "$OUT/$1_log.jsonl"
}
for v in ${VARIANTS:-plain plain.2 zero1}; do  # plain.2 (the spread of the same run) before zero1: a time box cuts zero1
  case ${v%.[0-9]} in
    plain) gap_run $v accelerate_configs/1gpu.yaml ;;
    zero1) gap_run $v accelerate_configs/2gpu_zero1.yaml "--num_processes 1" ;;
  esac
done
for b in zero1 plain.2; do
  [ -f "$OUT/${b}_log.jsonl" ] && { echo "plain vs $b:"; python3 benchmarks/compare_losses.py "$OUT/plain_log.jsonl" "$OUT/${b}_log.jsonl"; }
done | tee "$OUT/gap.txt" | tee -a "$N"
