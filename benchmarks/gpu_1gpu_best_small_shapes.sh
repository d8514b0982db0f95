#!/usr/bin/env bash
# One GPU (issue 16): which trunk shape makes recipes/best_small.yaml fast at its fixed FLOPs. Each variant is a
# short run (STEPS steps, windows of 5) of the recipe with model overrides, on the first 6 train shards tokenized
# with the 8k BPE; tokens/s, MFU and FLOPs per token per variant (steps for the budget = 1.3443e17 / (FLOPs per
# token x 131,072)). Carry: .carry and out/tok_bpe8k.
#   source .carry/setup.sh && bash benchmarks/gpu_1gpu_best_small_shapes.sh
source benchmarks/gpu_common.sh
DATA=out/mix6_bpe8k_1024
[ -f $DATA/manifest.json ] || python3 scripts/tokenize_pile.py --input .carry/data/pretrain/mix/train-0000[0-5].jsonl.zst \
  --val-input .carry/data/pretrain/mix/val.jsonl.zst --val-docs 10000 --tokenizer out/tok_bpe8k --seq-len 1024 \
  --out $DATA --num-proc 16 -q 2>&1 | tail -1
echo "== data (${SECONDS}s)" | tee -a "$N"
H128="model.overrides.num_attention_heads=6 model.overrides.num_key_value_heads=6 model.overrides.head_dim=128"
W1024="model.overrides.hidden_size=1024 model.overrides.num_attention_heads=8 model.overrides.num_key_value_heads=8 model.overrides.head_dim=128 model.overrides.intermediate_size=2816"
variant() {  # name, overrides...
  rm -rf /tmp/bs_$1
  timed bs_$1 python3 benchmarks/benchmark.py ours recipes/best_small.yaml data.path=$DATA training_flops=null training.max_steps=${STEPS:-40} training.warmup_steps=4 \
    training.logging_steps=5 training.eval_strategy=no training.save_strategy=no training.report_to=none \
    training.disable_tqdm=true training.output_dir=/tmp/bs_$1 "${@:2}" --out "$OUT/bs_$1.json"
}
for v in ${VARIANTS:-base h128 w1024l8 w1024l12 w1024l8_muon w1024l8_mb64}; do
  case $v in
    base) variant base ;;
    h128) variant h128 $H128 ;;
    w1024l8) variant w1024l8 $W1024 model.overrides.num_hidden_layers=8 ;;
    w1024l12) variant w1024l12 $W1024 ;;
    w1024l8_muon) variant w1024l8_muon $W1024 model.overrides.num_hidden_layers=8 optimizer.name=muon ;;
    w1024l8_mb64) variant w1024l8_mb64 $W1024 model.overrides.num_hidden_layers=8 \
      training.per_device_train_batch_size=64 training.gradient_accumulation_steps=2 ;;
  esac
done
python3 - <<'PY' | tee -a "$N"
import glob, json, os
print("| variant | FLOPs/token | steps for 1.3443e17 | tokens/s | MFU | est. training s | peak GiB |")
print("|---|---:|---:|---:|---:|---:|---:|")
for f in sorted(glob.glob(os.environ["OUT"] + "/bs_*.json"), key=os.path.getmtime):
    r = json.load(open(f)); name = os.path.basename(f)[3:-5]
    fpt = json.loads(open(f"/tmp/bs_{name}/log.jsonl").readline())["plan"]["flops_per_token"]
    tps = r.get("tokens_per_s") or 0
    print(f"| {name} | {fpt / 1e6:.1f}M | {1.3443e17 / (fpt * 131072):.0f} | {tps:,.0f} | {r.get('mfu', 0):.1%} | "
          f"{1.3443e17 / (fpt * tps) if tps else 0:.0f} | {r.get('mem_peak_gib') or 0:.1f} |")
PY
