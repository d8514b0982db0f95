#!/usr/bin/env bash
# One GPU: the loss implementation for the small models of the scaling study. liger's default chunks
# hold logits about as large as the hidden states: at hidden 320 and a 151,680-token vocabulary that
# is 64 tokens per chunk, 256 rounds of kernels per step (the first GPU study ran at 5% MFU). Each
# variant is a short run (STEPS steps, windows of 10); $OUT gets one JSON per run and a table, and
# $OUT/best_loss the overrides of the fastest scale_7m variant (read by gpu_1gpu_study.sh).
#   source .carry/setup.sh && bash benchmarks/gpu_1gpu_small_loss.sh
source benchmarks/gpu_common.sh
tokenize_corpus
STEPS=${STEPS:-60}
COMMON="data.path=$DATA training.report_to=none training.disable_tqdm=true training.logging_steps=10
  training.eval_strategy=no training.save_strategy=no training.max_steps=$STEPS training.per_device_train_batch_size=8"
variant() {  # name, size, overrides...
  timed $1 python3 scripts/benchmark.py ours recipes/small_1gpu.yaml $COMMON model.config=$2 \
    training.output_dir=/tmp/$1 "${@:3}" --out "$OUT/loss_$1.json"
}
variant 7m_liger scale_7m model.fused_loss=liger
variant 7m_chunked scale_7m model.fused_loss=chunked
variant 7m_liger_min4096 scale_7m model.fused_loss=liger model.liger_min_chunk_tokens=4096
variant 7m_liger_min1024 scale_7m model.fused_loss=liger model.liger_min_chunk_tokens=1024
variant 27m_liger scale_27m model.fused_loss=liger
variant 27m_chunked scale_27m model.fused_loss=chunked
variant 27m_liger_min4096 scale_27m model.fused_loss=liger model.liger_min_chunk_tokens=4096
python3 - <<'PY' | tee -a "$N"
import glob, json, os
out, best = os.environ["OUT"], None
for f in sorted(glob.glob(out + "/loss_*.json")):
    r, name = json.load(open(f)), os.path.basename(f)[5:-5]
    est = (r.get("memory_estimate_gib") or {}).get("total", 0)
    print(f"{name:20s} {r.get('loss_impl'):8s} {r.get('tokens_per_s', 0):>9,.0f} tok/s  MFU {r.get('mfu', 0):.1%}  "
          f"peak {r.get('mem_peak_gib') or 0:.1f} GiB  est {est:.1f}  windows {r.get('windows')}  loss {r.get('last_loss')}")
    if name.startswith("7m_") and (best is None or r.get("tokens_per_s", 0) > best[1]):
        best = (name, r.get("tokens_per_s", 0))
overrides = {"7m_liger": "model.fused_loss=liger", "7m_chunked": "model.fused_loss=chunked",
             "7m_liger_min4096": "model.fused_loss=liger model.liger_min_chunk_tokens=4096",
             "7m_liger_min1024": "model.fused_loss=liger model.liger_min_chunk_tokens=1024"}
if best:
    open(out + "/best_loss", "w").write(overrides[best[0]])
    print("fastest at scale_7m:", best[0])
PY
