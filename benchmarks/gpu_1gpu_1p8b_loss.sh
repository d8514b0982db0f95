#!/usr/bin/env bash
# One GPU: the Qwen3 1.8B recipe (micro-batch 20 x 2048, compile=layers) with the loss `auto` now picks
# (head + loss compiled whole: 12.4 GB of logits, under 1/8 of an H200) against liger, which it used
# before. 30 steps without accumulation, windows of 5; a check that the small-shape default does not
# slow the large shape.   source .carry/setup.sh && bash benchmarks/gpu_1gpu_1p8b_loss.sh
source benchmarks/gpu_common.sh
tokenize_corpus
for v in ${VARIANTS:-auto liger}; do
  loss=(); [ $v = auto ] || loss=(loss.implementation=$v)
  rm -rf /tmp/1p8b_$v
  timed 1p8b_$v python3 benchmarks/benchmark.py ours recipes/qwen3_1p8b_1gpu.yaml data.path=$DATA \
    training.gradient_accumulation_steps=1 training.max_steps=${STEPS:-30} training.logging_steps=5 \
    training.eval_strategy=no training.save_strategy=no training.report_to=none training.disable_tqdm=true \
    training.resume_from_checkpoint=none training.output_dir=/tmp/1p8b_$v "${loss[@]}" --out "$OUT/1p8b_$v.json"
done
python3 - <<'PY' | tee -a "$N"
import glob, json, os
for f in sorted(glob.glob(os.environ["OUT"] + "/1p8b_*.json")):
    r = json.load(open(f))
    print(f"{os.path.basename(f)[5:-5]:6s} {r.get('loss_impl'):9s} {r.get('tokens_per_s', 0):>8,.0f} tok/s  "
          f"MFU {r.get('mfu', 0):.1%}  peak {r.get('mem_peak_gib') or 0:.1f} GiB  "
          f"est {(r.get('memory_estimate_gib') or {}).get('total', 0):.1f}  loss {r.get('last_loss')}")
PY
