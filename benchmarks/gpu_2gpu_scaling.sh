#!/usr/bin/env bash
# Several GPUs of one host (nvidia-h200-x2, NPROC=4 on nvidia-h200-x4), scaling: the Qwen3 1.8B shape
# (recipes/qwen3_1p8b_1gpu.yaml: compile=layers, liger CE, micro-batch 20 per GPU, no accumulation, the case where
# communication is least hidden) on 1 GPU, then on NPROC (default 2) with plain DDP, FSDP2 and ZeRO-1 (its
# checkpoints: gpu_2gpu_zero1.sh). Scaling efficiency = tokens/s per GPU on NPROC GPUs / tokens/s on 1.
# Each run is time-boxed (a 1.8B run takes 80-120 s: start, per-layer compile, STEPS steps);
# $OUT gets notes.txt, runs.log (log tails) and one JSON per run. RUNS picks the runs (zero1: DeepSpeed ZeRO-1
# without checkpoints; tp, fsdp2_tp2, cp2: the parallel section); EXTRA adds overrides to every run (the fp8
# scaling: EXTRA=model.precision=fp8). Long sequences, context parallelism against one GPU: one_gpu_32k, cp2_32k,
# one_gpu_64k, cp2_64k (micro-batch 1, causal SDPA without the document mask, which cp refuses; one shard's
# documents packed whole at that length). tp and one_gpu_64k are run again without compile / with activation
# checkpointing when they fail (tp_eager, one_gpu_64k_ckpt), so that a first failure still leaves a figure.
# two_nodes: two launchers of one GPU each, --num_machines 2 --machine_rank {0,1} on one host, against ddp.
#   source .carry/setup.sh && bash benchmarks/gpu_2gpu_scaling.sh
source benchmarks/gpu_common.sh
STEPS=${STEPS:-20}
long_data() {  # seq_len: the first shard's documents packed whole into blocks of that length
  [ -f out/mix1_qwen3_$1/manifest.json ] || python3 scripts/tokenize_pile.py --input "$MIX"/train-00000.jsonl.zst \
    --val-input "$MIX"/val.jsonl.zst --val-docs 200 --tokenizer "$CORPUS_TOK" --seq-len $1 \
    --out out/mix1_qwen3_$1 --num-proc 16 -q --pack whole 2>&1 | tail -1
}
long() {  # name, accelerate config, seq_len, overrides
  long_data $3
  DATA=out/mix1_qwen3_$3 bench $1 $2 training.per_device_train_batch_size=1 batch.micro_batch=recipe \
    model.attn_implementation=sdpa model.document_mask=false "${@:4}"
}
NPROC=${NPROC:-2}
TP_ROWS_KEY=${TP_ROWS:+training.per_device_train_batch_size=$TP_ROWS}
bench() {  # name, accelerate config, extra overrides
  local procs=$NPROC; case $1 in one_gpu*) procs=1 ;; esac
  timed $1 accelerate launch --config_file "$2" --num_processes $procs benchmarks/benchmark.py ours recipes/qwen3_1p8b_1gpu.yaml \
    data.path=$DATA training.report_to=none training.disable_tqdm=true training.gradient_accumulation_steps=1 \
    training.logging_steps=5 training.eval_strategy=no training.save_strategy=no \
    training.max_steps=$STEPS training.output_dir=/tmp/$1 $EXTRA "${@:3}" --out "$OUT/$1.json"
}
two_nodes() {  # two launchers of one GPU each as two nodes (what slurm_pretrain.sbatch starts), DDP: against ddp
  local launch="accelerate launch --config_file accelerate_configs/2gpu_ddp.yaml --num_machines 2 --num_processes 2
    --main_process_ip 127.0.0.1 --main_process_port 29561 --rdzv_backend static"
  local args="benchmarks/benchmark.py ours recipes/qwen3_1p8b_1gpu.yaml data.path=$DATA training.report_to=none
    training.disable_tqdm=true training.gradient_accumulation_steps=1 training.logging_steps=5 training.eval_strategy=no
    training.save_strategy=no training.max_steps=$STEPS training.output_dir=/tmp/two_nodes $EXTRA"
  CUDA_VISIBLE_DEVICES=1 timeout -s KILL $(( $(left) - 5 )) $launch --machine_rank 1 $args --out /tmp/two_nodes_rank1.json \
    > /tmp/two_nodes_rank1.log 2>&1 &
  CUDA_VISIBLE_DEVICES=0 timed two_nodes $launch --machine_rank 0 $args --out "$OUT/two_nodes.json"; local rc=$?
  wait; { echo "#### two_nodes rank 1"; grep -v -i warn /tmp/two_nodes_rank1.log | tail -8; } >> "$OUT/runs.log"
  return $rc
}
profiled() {  # name, accelerate config, overrides: bench with steps 14-16 profiled; kernels and gaps to $OUT
  bench "$@" 'logging.profile_steps=[14,16]'; local rc=$?
  for k in /tmp/$1/profile/kernels-*.txt; do [ -f "$k" ] && cp "$k" "$OUT/$1_$(basename "$k")"; done
  for t in /tmp/$1/profile/trace-*.json; do [ -f "$t" ] &&
    python3 benchmarks/trace_gaps.py "$t" --top 25 > "$OUT/gaps_$1_$(basename "$t" .json).txt"; done
  return $rc
}
case " ${RUNS:-one_gpu ddp fsdp2} " in *" one_gpu "*|*" ddp"*|*" fsdp2 "*|*" zero1 "*|*" tp"*|*" cp2 "*|*" two_nodes "*|*_profile*) tokenize_corpus ;; esac
for run in ${RUNS:-one_gpu ddp fsdp2}; do
  case $run in
    one_gpu) CUDA_VISIBLE_DEVICES=0 bench one_gpu accelerate_configs/1gpu.yaml ;;
    ddp) bench ddp accelerate_configs/2gpu_ddp.yaml ;;
    # the Trainer hands DDP find_unused_parameters=True for a model without activation checkpointing (an extra
    # pass over the autograd graph each step): DDP without it, against ddp in the same call
    ddp_static) bench ddp_static accelerate_configs/2gpu_ddp.yaml training.ddp_find_unused_parameters=false ;;
    two_nodes) two_nodes ;;
    fsdp2) bench fsdp2 accelerate_configs/2gpu_fsdp2.yaml ;;
    zero1) bench zero1 accelerate_configs/2gpu_zero1.yaml ;;
    # tensor and context parallelism (parallel:, training/layout.py; results/gpu_2gpu_2026-11-29): tp over all NPROC ranks under
    # DDP's launch, FSDP2 x tp 2 (NPROC=4: 2 shards x tp 2), cp 2 beside FSDP2 (torch SDPA). If the compiled layers
    # or liger's loss fail on the sharded model, bisect with EXTRA="model.compile=none loss.implementation=chunked"
    tp|tp.[0-9]) bench $run accelerate_configs/2gpu_ddp.yaml parallel.tp=$NPROC ||
          bench tp_eager accelerate_configs/2gpu_ddp.yaml parallel.tp=$NPROC model.compile=none ;;
    # tp with and without sequence parallelism (auto takes it only where tp does not fit without it): the A/B of
    # results/gpu_2gpu_2026-11-30, whose `tp` runs had it on (today's tp_sp)
    # TP_ROWS: a tp group's micro-batch (default the recipe's 20; 40 = FSDP2's rows per step on two GPUs)
    tp_sp|tp_sp.[0-9]) bench $run accelerate_configs/2gpu_ddp.yaml parallel.tp=$NPROC parallel.sequence_parallel=true $TP_ROWS_KEY ;;
    tp_nosp|tp_nosp.[0-9]) bench $run accelerate_configs/2gpu_ddp.yaml parallel.tp=$NPROC parallel.sequence_parallel=false $TP_ROWS_KEY ;;
    # and with inductor's micro-pipelined collectives (parallel.async_tp; models/parallel.py enable_async_tp)
    tp_async|tp_async.[0-9]) bench $run accelerate_configs/2gpu_ddp.yaml parallel.tp=$NPROC parallel.sequence_parallel=true \
          parallel.async_tp=true $TP_ROWS_KEY ;;
    # and with inductor reordering the compiled layers' collectives (parallel.tp_overlap; models/parallel.py
    # order_tp_collectives): the backward's all-reduces waited for after the weight-gradient matmuls
    tp_reorder|tp_reorder.[0-9]) bench $run accelerate_configs/2gpu_ddp.yaml parallel.tp=$NPROC \
          parallel.sequence_parallel=false parallel.tp_overlap=true $TP_ROWS_KEY ;;
    tp_reorder_profile) profiled tp_reorder_profile accelerate_configs/2gpu_ddp.yaml parallel.tp=$NPROC \
          parallel.sequence_parallel=false parallel.tp_overlap=true $TP_ROWS_KEY ;;
    # where tp and cp lose against one GPU (2026-11-29: tp 2 at 78% after the fixes, cp 2 at 32k at 87%): steps
    # 14-16 profiled on every rank (kernels by GPU time, the idle gaps), beside one GPU's; their tokens/s include the
    # profiled steps
    tp_profile) profiled tp_profile accelerate_configs/2gpu_ddp.yaml parallel.tp=$NPROC $TP_ROWS_KEY ;;
    tp_async_profile) profiled tp_async_profile accelerate_configs/2gpu_ddp.yaml parallel.tp=$NPROC \
          parallel.sequence_parallel=true parallel.async_tp=true $TP_ROWS_KEY ;;
    one_gpu_profile) CUDA_VISIBLE_DEVICES=0 profiled one_gpu_profile accelerate_configs/1gpu.yaml ;;
    cp2_32k_profile) long_data 32768 && DATA=out/mix1_qwen3_32768 profiled cp2_32k_profile \
          accelerate_configs/2gpu_fsdp2.yaml training.per_device_train_batch_size=1 batch.micro_batch=recipe \
          model.attn_implementation=sdpa model.document_mask=false parallel.cp=2 ;;
    # NPROC=4 (at 2 tp takes every rank); FSDP2 x tp needs a transformers that applies FSDP2 at load (5.24; 5.17
    # refuses it at start: docs/training.md)
    fsdp2_tp2) bench fsdp2_tp2 accelerate_configs/2gpu_fsdp2.yaml parallel.tp=2 ;;
    cp2) bench cp2 accelerate_configs/2gpu_fsdp2.yaml parallel.cp=2 model.attn_implementation=sdpa ;;
    one_gpu_32k) CUDA_VISIBLE_DEVICES=0 long one_gpu_32k accelerate_configs/1gpu.yaml 32768 ;;
    cp2_32k) long cp2_32k accelerate_configs/2gpu_fsdp2.yaml 32768 parallel.cp=2 ;;
    one_gpu_64k) CUDA_VISIBLE_DEVICES=0 long one_gpu_64k accelerate_configs/1gpu.yaml 65536 ||
          CUDA_VISIBLE_DEVICES=0 long one_gpu_64k_ckpt accelerate_configs/1gpu.yaml 65536 training.activation_checkpointing=true ;;
    cp2_64k) long cp2_64k accelerate_configs/2gpu_fsdp2.yaml 65536 parallel.cp=2 ;;
  esac
done
python3 benchmarks/scaling_table.py "$OUT" | tee -a "$N"
