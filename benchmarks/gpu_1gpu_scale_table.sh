#!/usr/bin/env bash
# One GPU: the scale_* family at the defaults the project picks (compile, loss and attention on auto),
# with GPT-2's tokenizer at seq 1024 and Qwen3's at seq 2048, 32,768 tokens per micro-batch (MICRO_TOKENS), no
# accumulation; tokens/s, MFU, trunk MFU (the LM head's FLOPs left out), the head's share of FLOPs
# and peak memory per run (issue #14). RUNS picks them: tokenizer/seq/size.
#   source .carry/setup.sh && RUNS="gpt2/1024/scale_12m qwen3/2048/scale_146m" bash benchmarks/gpu_1gpu_scale_table.sh
source benchmarks/gpu_common.sh
STEPS=${STEPS:-30}
for run in ${RUNS:-gpt2/1024/scale_12m gpt2/1024/scale_53m gpt2/1024/scale_146m qwen3/2048/scale_12m qwen3/2048/scale_53m qwen3/2048/scale_146m qwen3/2048/scale_311m}; do
  IFS=/ read tok seq size <<< "$run"
  data=out/mix_${tok}_${seq}
  [ -f $data/manifest.json ] || python3 scripts/tokenize_pile.py --input .carry/data/pretrain/mix/train-*.jsonl.zst \
    --val-input .carry/data/pretrain/mix/val.jsonl.zst --val-docs 10000 --tokenizer "$DATA_ROOT/tokenizers/$tok" \
    --seq-len $seq --out $data --num-proc 16 -q 2>&1 | tail -1
  rm -rf /tmp/$tok$seq$size  # log.jsonl appends: a run left by an earlier call on a warm machine would mix in
  timed ${tok}_${seq}_$size python3 benchmarks/benchmark.py ours recipes/small_1gpu.yaml data.path=$data \
    model.config=$size training.per_device_train_batch_size=$((${MICRO_TOKENS:-32768} / seq)) training.gradient_accumulation_steps=1 \
    training.report_to=none training.disable_tqdm=true training.logging_steps=5 training.eval_strategy=no \
    training.save_strategy=no training.max_steps=$STEPS training.output_dir=/tmp/$tok$seq$size "$@" \
    --out "$OUT/st_${tok}_${seq}_$size.json"
done
python3 - <<'PY' | tee -a "$N"
import glob, json, os
print("| tokenizer | seq | model | non-emb params | loss | tokens/s | MFU | trunk MFU | head FLOPs | peak GiB |")
print("|---|---:|---|---:|---|---:|---:|---:|---:|---:|")
for f in sorted(glob.glob(os.environ["OUT"] + "/st_*.json"), key=os.path.getmtime):
    r = json.load(open(f))
    tok, seq, size = os.path.basename(f)[3:-5].split("_", 2)
    plan = json.loads(open(f"/tmp/{tok}{seq}{size}/log.jsonl").readline())["plan"]
    share = plan["flops_per_token_head"] / plan["flops_per_token"]
    p = plan["parameters"]
    print(f"| {tok} | {seq} | {size} | {p['non_embedding'] / 1e6:.1f}M | {r.get('loss_impl')} | {r.get('tokens_per_s', 0):,.0f} | "
          f"{r.get('mfu', 0):.1%} | {r.get('mfu', 0) * (1 - share):.1%} | {share:.0%} | {r.get('mem_peak_gib') or 0:.1f} |")
PY
(cd "$OUT" && tar -czf scale_table_runs.tgz st_*.json && rm st_*.json)  # the device tool returns 8 files at most
