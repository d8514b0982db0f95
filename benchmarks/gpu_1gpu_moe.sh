#!/usr/bin/env bash
# One GPU: the ~1B-total MoE shape (qwen3_moe_856m_a152m: 16 layers, hidden 1024, 32 experts of 512, top-4) at
# seq 2048 x MB, against the dense Qwen3 with the same active shape (FFN width 4 x 512 = 2048), same data and call.
# The data: the first 3 shards with the corpus-trained 32k BPE (issue 37's out/tok10_bpe32k: the issue's 32,768-token
# vocabulary, 923M parameters in all); CORPUS_TOK=.carry/data/tokenizers/qwen3 DATA=out/mix_qwen3_2048 for Qwen3's.
# Carry: .carry (TOKENIZERS=gpt2 NO_DEEPSPEED=1 ../shared/gpu/pack.sh 36 --no-eval) and out/tok10_bpe32k.
#   source .carry/setup.sh && VARIANTS="grouped profile dense" bash benchmarks/gpu_1gpu_moe.sh
# best_small_moe's shape as its recipe trains it (8 x 1024, 32 experts of 704, top-4, 128 x 1024 per step, the
# corpus-trained 8k BPE: out/tok10_bpe8k carried; the first shard is enough for these short runs) against its dense
# twin recipes/best_small.yaml: VARIANTS="small_moe small_dense small_balanced profile_small profile_small_dense".
# *balanced: moe.forced_balance (every expert the same rows): the speed of perfect balance beside dropless routing.
# *sonic: model.experts_implementation=sonicmoe, sonic-moe's kernels from the local kit (models/sonic.py; install it
# first: bash .carry_sonic/part2/install.sh after source .carry/setup.sh, benchmarks/sonic_kit.sh says how).
# A same-call A/B against an earlier commit's code: its src/hfpretrain copied to ab_base/hfpretrain (untracked, so
# it travels), then PYTHONPATH=$PWD/ab_base:$PYTHONPATH VARIANTS=grouped.0 ... before the current code's variants.
CORPUS_TOK=${CORPUS_TOK:-out/tok10_bpe32k} DATA=${DATA:-out/mix3_bpe32k_2048}
CORPUS_SHARDS=${CORPUS_SHARDS:-".carry/data/pretrain/mix/train-0000[0-2].jsonl.zst"}
source benchmarks/gpu_common.sh
python3 - <<'PY' 2>&1 | tee -a "$N"  # what the experts backends could load here
import importlib.util as u, transformers
from hfpretrain.training.fast_path import sonicmoe_missing
print("sonicmoe:", sonicmoe_missing() or "loads", "| torchao:", bool(u.find_spec("torchao")),
      "| grouped_mm:", hasattr(__import__("torch"), "_grouped_mm"),
      "| scaled_grouped_mm:", hasattr(__import__("torch"), "_scaled_grouped_mm"))
PY
SMALL_DATA=${SMALL_DATA:-out/mix1_bpe8k_1024} SMALL_TOK=${SMALL_TOK:-out/tok10_bpe8k}
for v in ${VARIANTS:-grouped eager dense}; do  # the data the variants asked for, tokenized once per machine
  case $v in
    *small*) [ -f $SMALL_DATA/manifest.json ] || DATA=$SMALL_DATA CORPUS_TOK=$SMALL_TOK CORPUS_SEQ_LEN=1024 \
      CORPUS_SHARDS=".carry/data/pretrain/mix/train-00000.jsonl.zst" tokenize_corpus ;;
    *) [ -f $DATA/manifest.json ] || tokenize_corpus ;;
  esac
done
DENSE="model.config=qwen3_124m model.overrides.num_hidden_layers=16 model.overrides.hidden_size=1024
  model.overrides.num_attention_heads=8 model.overrides.num_key_value_heads=4 model.overrides.head_dim=128
  model.overrides.intermediate_size=2048 model.overrides.max_position_embeddings=4096
  model.overrides.tie_word_embeddings=false"
variant() {  # name, overrides...
  rm -rf /tmp/$1
  timed $1 python3 benchmarks/benchmark.py ours recipes/qwen3_1p8b_1gpu.yaml data.path=$DATA model.compile=decoder \
    training.per_device_train_batch_size=${MB:-16} training.gradient_accumulation_steps=1 \
    training.max_steps=${STEPS:-30} training.logging_steps=5 training.eval_strategy=no training.save_strategy=no \
    training.report_to=none training.disable_tqdm=true training.resume_from_checkpoint=none \
    training.output_dir=/tmp/$1 "${@:2}" --out "$OUT/moe_$1.json"
}
small_variant() {  # name, recipe, overrides...: a shipped recipe's shape and batch, STEPS steps from the first
  rm -rf /tmp/$1
  timed $1 python3 benchmarks/benchmark.py ours $2 data.path=$SMALL_DATA training_flops=null \
    training.max_steps=${STEPS:-30} training.warmup_steps=${WARMUP:-5} training.logging_steps=5 training.eval_strategy=no \
    training.save_strategy=no training.report_to=none training.disable_tqdm=true \
    training.resume_from_checkpoint=none training.output_dir=/tmp/$1 "${@:3}" --out "$OUT/moe_$1.json"
  # each window: step, training loss, tokens/s, and for MoE the worst layer's max/mean load and the dead share
  local rc=$?; [ -f /tmp/$1/log.jsonl ] && python3 -c "import json, sys; [print(r['step'], r.get('loss'),
  r.get('tokens_per_s'), r.get('expert_load_max_mean'), r.get('dead_experts')) for r in map(json.loads,
  open(sys.argv[1])) if 'tokens_per_s' in r]" /tmp/$1/log.jsonl > "$OUT/load_$1.txt"
  return $rc
}
profile_outputs() {  # name: the kernel table, the gaps between kernels and dynamo's breaks, under $OUT
  grep -E "__graph_breaks|__recompiles" /tmp/$1.log | cut -c1-400 > "$OUT/dynamo_$1.txt"
  for f in /tmp/$1/profile/kernels-*.txt; do head -80 "$f" > "$OUT/kernels_$1.txt"; done
  python3 benchmarks/trace_gaps.py /tmp/$1/profile/trace-*.json > "$OUT/gaps_$1.txt" 2>&1
}
for v in ${VARIANTS:-grouped eager dense}; do
  case ${v%.[0-9]} in
    grouped) variant $v model.config=qwen3_moe_856m_a152m model.experts_implementation=grouped_mm ;;
    grouped_noac) variant $v model.config=qwen3_moe_856m_a152m kernels.experts_autocast=false ;;  # fp32 fallback
    grouped_nogather) variant $v model.config=qwen3_moe_856m_a152m kernels.experts_gather=false ;;  # HF's permutation
    eager) variant $v model.config=qwen3_moe_856m_a152m model.experts_implementation=eager ;;
    batched) variant $v model.config=qwen3_moe_856m_a152m model.experts_implementation=batched_mm ;;
    small) variant $v model.config=qwen3_moe_587m_a103m ;;  # best_small_moe's shape (8 layers, 32 experts of 704, top-4)
    grouped_layers) variant $v model.config=qwen3_moe_856m_a152m model.compile=layers ;;  # the memory estimate
    grouped_mb8) MB=8 variant $v model.config=qwen3_moe_856m_a152m ;;  # memory at half the micro-batch
    glm) variant $v model.config=glm4_moe_837m_a177m moe.bias_update_rate=0.001  # aux-loss-free balancing
      grep -o "\"expert_load_max_mean\": [0-9.]*, \"expert_load_min_mean\": [0-9.]*, \"dead_experts\": [0-9.]*" /tmp/$v/log.jsonl > "$OUT/glm_expert_load.txt" ;;
    profile|profile_dense)  # a kernel table, the gaps between kernels (steps 10-12) and dynamo's graph breaks and
      # recompiles, for the MoE shape or its dense twin (not speed figures: the profiler slows the steps it records)
      shape="model.config=qwen3_moe_856m_a152m"; [ $v = profile_dense ] && shape=$DENSE
      TORCH_LOGS=graph_breaks,recompiles STEPS=14 variant $v $shape 'logging.profile_steps=[10,12]'
      profile_outputs $v ;;
    balanced) variant $v model.config=qwen3_moe_856m_a152m moe.forced_balance=true ;;
    small_moe) small_variant $v recipes/best_small_moe.yaml ;;
    small_balanced) small_variant $v recipes/best_small_moe.yaml moe.forced_balance=true ;;
    # the aux-loss weight 0.01 (10x the recipe's; no loss cost at the MoE study's 2.5e16 checks): its load and speed
    # against small_moe's over STEPS steps, each window's worst-layer load kept
    small_aux) small_variant $v recipes/best_small_moe.yaml moe.aux_loss_coef=0.01 ;;
    # the load-balancing loss per layer (moe.aux_loss_scope): the pooled one (transformers') barely sees a layer
    # that sends all its tokens to one expert; at the recipe's weight and at 10x, on grouped_mm or sonic
    small_pl) small_variant $v recipes/best_small_moe.yaml moe.aux_loss_scope=per_layer ;;
    small_pl_aux) small_variant $v recipes/best_small_moe.yaml moe.aux_loss_scope=per_layer moe.aux_loss_coef=0.01 ;;
    small_sonic_pl) small_variant $v recipes/best_small_moe.yaml model.experts_implementation=sonicmoe \
      moe.aux_loss_scope=per_layer ;;
    small_sonic_pl_aux) small_variant $v recipes/best_small_moe.yaml model.experts_implementation=sonicmoe \
      moe.aux_loss_scope=per_layer moe.aux_loss_coef=0.01 ;;
    small_dense) small_variant $v recipes/best_small.yaml ;;
    small_sonic) small_variant $v recipes/best_small_moe.yaml model.experts_implementation=sonicmoe ;;
    sonic) variant $v model.config=qwen3_moe_856m_a152m model.experts_implementation=sonicmoe ;;
    profile_small|profile_small_dense)
      recipe=recipes/best_small_moe.yaml; [ $v = profile_small_dense ] && recipe=recipes/best_small.yaml
      TORCH_LOGS=graph_breaks,recompiles STEPS=14 small_variant $v $recipe 'logging.profile_steps=[10,12]'
      profile_outputs $v ;;
    dense) variant $v $DENSE ;;
    grouped_ga|dense_ga)  # 4 x MB x 2048 tokens per optimizer step (the planner folds the accumulation into one
      # micro-batch where it fits: 64 on an H200), so that AdamW weighs as little as in a real run
      shape="model.config=qwen3_moe_856m_a152m"; [ $v = dense_ga ] && shape=$DENSE
      STEPS=15 variant $v $shape training.gradient_accumulation_steps=4 training.logging_steps=3 ;;
  esac
done
python3 - <<'PY' | tee -a "$N"
import glob, json, os
for f in sorted(glob.glob(os.environ["OUT"] + "/moe_*.json"), key=os.path.getmtime):
    r = json.load(open(f))
    print(f"{os.path.basename(f)[4:-5]:<14} {r.get('tokens_per_s', 0):>9,.0f} tokens/s  mfu {r.get('mfu', 0):.3f}  "
          f"peak {r.get('mem_peak_gib') or 0:.1f} GiB  estimate {(r.get('memory_estimate_gib') or {}).get('total', 0):.1f}"
          f"  loss {r.get('last_loss')}")
PY
