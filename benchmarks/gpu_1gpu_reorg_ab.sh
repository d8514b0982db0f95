#!/usr/bin/env bash
# One GPU, one call: the code before the reorganisation (BEFORE: a checkout of its commit, e.g. .before/ made by
# `git worktree add .before f6f4a44` or a copy of its src/ and benchmarks/) against this tree, alternating, on the
# same data and machine; then the kernels' A/Bs (kernels.*=false) on the shapes they serve.
#   source .carry/setup.sh && BEFORE=.before SET=gpt2 bash benchmarks/gpu_1gpu_reorg_ab.sh   # SET: gpt2 | 1p8b
# SET=gpt2's variants moe_before / moe_after train recipes/best_small_moe.yaml (its MoE shape) on the same GPT-2 data
# at 1,024 tokens: a same-call A/B of the MoE path, with GPT-2's vocabulary instead of the recipe's 8k BPE.
source benchmarks/gpu_common.sh
BEFORE=${BEFORE:-.before}
COMMON="training.report_to=none training.disable_tqdm=true training.eval_strategy=no training.save_strategy=no
  training.resume_from_checkpoint=none"
run() {  # name, tree (. or $BEFORE), recipe, overrides...
  local name=$1 tree=$2 recipe=$3; shift 3
  rm -rf /tmp/$name
  # the tree's own recipe: an older commit may not know a key renamed since
  timed $name env PYTHONPATH="$tree/src:$PYTHONPATH" python3 $tree/benchmarks/benchmark.py ours $tree/$recipe $COMMON \
    training.output_dir=/tmp/$name "$@" --out "$OUT/ab_$name.json"
}
if [ "${SET:-gpt2}" = gpt2 ]; then
  DATA=out/mix_gpt2_1024
  [ -f $DATA/manifest.json ] || python3 scripts/tokenize_pile.py --input .carry/data/pretrain/mix/train-*.jsonl.zst \
    --val-input .carry/data/pretrain/mix/val.jsonl.zst --val-docs 10000 \
    --tokenizer "$DATA_ROOT/tokenizers/gpt2" --seq-len 1024 --out "$DATA" --num-proc 16 -q 2>&1 | tail -2
  G="recipes/gpt2_124m.yaml data.path=$DATA training.max_steps=${STEPS:-40} training.logging_steps=5"
  for v in ${VARIANTS:-before after nobias nofused before.2 after.2 nobias.2 nofused.2}; do
    case ${v%.[0-9]} in
      before) run gpt2_$v $BEFORE $G ;;
      after) run gpt2_$v . $G ;;
      nobias) run gpt2_$v . $G kernels.bias_gelu=false ;;       # c_fc's bias gradient in a pass of its own
      nofused) run gpt2_$v . $G kernels.fused_head=false ;;     # the compiled head + loss (inductor)
      nosigmoid) run gpt2_$v . $G kernels.bias_gelu=false kernels.gelu_sigmoid=false ;;  # transformers' MLP
      s53m) run gpt2_$v . $G model.config=scale_53m ;;
      moe_before|moe_after) run gpt2_$v $([ ${v%.[0-9]} = moe_before ] && echo $BEFORE || echo .) \
        recipes/best_small_moe.yaml data.path=$DATA training_flops=null training.max_steps=${STEPS:-40} \
        training.logging_steps=5 training.warmup_steps=5 ;;
      s53m_norope) run gpt2_$v . $G model.config=scale_53m kernels.rope_table=false ;;  # rotary cos/sin recomputed
    esac
  done
else
  tokenize_corpus
  Q="recipes/qwen3_1p8b_1gpu.yaml data.path=$DATA training.max_steps=${STEPS:-40} training.logging_steps=${LOG_STEPS:-10} ${EXTRA:-}"
  for v in ${VARIANTS:-bf16_before bf16_after fp8_before fp8_after}; do
    p=${v%%_*}; t=${v#*_}; t=${t%.[0-9]}
    run 1p8b_$v $([ $t = before ] && echo $BEFORE || echo .) $Q model.precision=$p
  done
fi
python3 - <<'PY' | tee -a "$N"
import glob, json, os
for f in sorted(glob.glob(os.environ["OUT"] + "/ab_*.json"), key=os.path.getmtime):
    r = json.load(open(f))
    print(f"{os.path.basename(f)[3:-5]:<22} {r.get('tokens_per_s', 0):>10,.0f} tokens/s  mfu {r.get('mfu', 0):.3f}  "
          f"loss {r.get("last_loss")}")
PY
