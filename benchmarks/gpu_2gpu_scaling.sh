#!/usr/bin/env bash
# Several GPUs of one host (nvidia-h200-x2, NPROC=4 on nvidia-h200-x4), scaling: the Qwen3 1.8B shape
# (recipes/qwen3_1p8b_1gpu.yaml: compile=layers, liger CE, micro-batch 20 per GPU, no accumulation, the case where
# communication is least hidden) on 1 GPU, then on NPROC (default 2) with plain DDP, FSDP2 and ZeRO-1 (its
# checkpoints: gpu_2gpu_zero1.sh). Scaling efficiency = tokens/s per GPU on NPROC GPUs / tokens/s on 1.
# Each run is time-boxed (a 1.8B run takes 80-120 s: start, per-layer compile, STEPS steps);
# $OUT gets notes.txt, runs.log (log tails) and one JSON per run. RUNS picks the runs (zero1: DeepSpeed ZeRO-1
# without checkpoints; tp, fsdp2_tp2, cp2: the parallel section); EXTRA adds overrides to every run (the fp8
# scaling: EXTRA=model.precision=fp8).
#   source .carry/setup.sh && bash benchmarks/gpu_2gpu_scaling.sh
source benchmarks/gpu_common.sh
tokenize_corpus
STEPS=${STEPS:-20}
NPROC=${NPROC:-2}
bench() {  # name, accelerate config, extra overrides
  local procs=$NPROC; [ $1 = one_gpu ] && procs=1
  timed $1 accelerate launch --config_file "$2" --num_processes $procs benchmarks/benchmark.py ours recipes/qwen3_1p8b_1gpu.yaml \
    data.path=$DATA training.report_to=none training.disable_tqdm=true training.gradient_accumulation_steps=1 \
    training.logging_steps=5 training.eval_strategy=no training.save_strategy=no \
    training.max_steps=$STEPS training.output_dir=/tmp/$1 $EXTRA "${@:3}" --out "$OUT/$1.json"
}
for run in ${RUNS:-one_gpu ddp fsdp2}; do
  case $run in
    one_gpu) CUDA_VISIBLE_DEVICES=0 bench one_gpu accelerate_configs/1gpu.yaml ;;
    ddp) bench ddp accelerate_configs/2gpu_ddp.yaml ;;
    fsdp2) bench fsdp2 accelerate_configs/2gpu_fsdp2.yaml ;;
    zero1) bench zero1 accelerate_configs/2gpu_zero1.yaml ;;
    # tensor and context parallelism (parallel:, training/layout.py; never run yet): tp over all NPROC ranks under
    # DDP's launch, FSDP2 x tp 2 (NPROC=4: 2 shards x tp 2), cp 2 beside FSDP2 (torch SDPA). If the compiled layers
    # or liger's loss fail on the sharded model, bisect with EXTRA="model.compile=none loss.implementation=chunked"
    tp) bench tp accelerate_configs/2gpu_ddp.yaml parallel.tp=$NPROC ;;
    fsdp2_tp2) bench fsdp2_tp2 accelerate_configs/2gpu_fsdp2.yaml parallel.tp=2 ;;
    cp2) bench cp2 accelerate_configs/2gpu_fsdp2.yaml parallel.cp=2 model.attn_implementation=sdpa ;;
  esac
done
python3 benchmarks/scaling_table.py "$OUT" | tee -a "$N"
