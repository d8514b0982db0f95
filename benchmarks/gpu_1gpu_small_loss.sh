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
  training.eval_strategy=no training.save_strategy=no training.max_steps=$STEPS"
variant() {  # name, size, overrides...: micro-batch 8 as in the pilot study; scale_146m keeps its recipe's 32
  local mb=8; [ $2 = scale_146m ] && mb=32
  echo "${@:3}" > /tmp/loss_$1.overrides  # for best_loss below (not under $OUT: 8 files come back at most)
  timed $1 python3 benchmarks/benchmark.py ours recipes/small_1gpu.yaml $COMMON model.config=$2 \
    training.per_device_train_batch_size=$mb \
    training.output_dir=/tmp/$1 "${@:3}" --out "$OUT/loss_$1.json"
}
# liger_min_chunk_tokens=0: liger's own sizing; 1024 is the default since the first of these measurements
for v in ${VARIANTS:-7m_liger 7m_chunked 7m_liger_min4096 7m_liger_min1024 27m_liger 27m_chunked 27m_liger_min1024}; do
  size=scale_${v%%_*}; loss=${v#*_}
  case $loss in
    liger) variant $v $size loss.implementation=liger loss.liger_min_chunk_tokens=0 ;;
    chunked) variant $v $size loss.implementation=chunked ;;
    liger_min*) variant $v $size loss.implementation=liger loss.liger_min_chunk_tokens=${loss#liger_min} ;;
  esac
done
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
if best:
    open(out + "/best_loss", "w").write(open(f"/tmp/loss_{best[0]}.overrides").read())
    print("fastest at scale_7m:", best[0])
PY
