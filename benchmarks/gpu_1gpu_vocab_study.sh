#!/usr/bin/env bash
# The vocabulary study (src/hfpretrain/study/specs/gpu_vocab.yaml) on one GPU, over one or more device calls:
# each call tokenizes the carried shards with both tokenizers (reused while the machine stays warm), restores
# the finished runs of earlier calls from .carry/gpu_vocab_runs.tgz, trains (the spec's `workers` runs at a
# time) until BUDGET_S, stops cleanly (SIGTERM: the runs in progress save a checkpoint, continued from it
# only while the machine stays warm), and packs what is finished into $OUT/gpu_vocab_runs.tgz (copy it to
# .carry/ for the next call). Once every run is done and time is left, it trains the best configuration of
# the largest budget again with periodic evaluation (curves) and packs it as $OUT/best.tgz.part-* (the
# checkpoint: lm-eval, generations and the report are made on any machine with scripts/report.py; BEST=0: not).
# Carry: TOKENIZERS="gpt2" NO_DEEPSPEED=1 ../shared/gpu/pack.sh 45 --no-eval (7 shards) + out/tok_bpe8k (trained
# by benchmarks/prepare_vocab_study.sh; carried so that both sides use the same merges).
#   source .carry/setup.sh && BUDGET_S=570 bash benchmarks/gpu_1gpu_vocab_study.sh
source benchmarks/gpu_common.sh
SPEC=src/hfpretrain/study/specs/gpu_vocab.yaml
STUDY=studies/gpu_vocab
SHARDS=7 NUM_PROC=16 OUT=out bash benchmarks/prepare_vocab_study.sh 2>&1 | tail -2
echo "== data ready (${SECONDS}s)" | tee -a "$N"
mkdir -p "$STUDY"
# the finished runs: an earlier call's (carried), else the committed ones (results/study_gpu_vocab/runs)
if [ -f .carry/gpu_vocab_runs.tgz ]; then tar -xzf .carry/gpu_vocab_runs.tgz -C "$STUDY"
else mkdir -p "$STUDY/runs" && cp -r -n results/study_gpu_vocab/runs/. "$STUDY/runs/"; fi  # -n: keeps a warm machine's
study_call $SPEC "$STUDY" gpu_vocab
if [ "$todo" = 0 ] && [ "${BEST:-1}" = 1 ] && [ $(left) -gt 150 ]; then
  # the best run of the largest budget (lowest bits per byte), trained again with periodic evaluation
  best=$(python3 -c "
import json; rows = json.load(open('$STUDY/results.json')); top = max(r['budget'] for r in rows)
print(min((r for r in rows if r['budget'] == top), key=lambda r: r['val_bpb'])['out_dir'])")
  steps=$(python3 -c "import json; print(json.load(open('$best/summary.json'))['global_step'])")
  echo "== best: $best ($steps steps)" | tee -a "$N"
  timeout -s TERM $(( $(left) - 30 )) python3 scripts/pretrain.py "$best/recipe.yaml" training.output_dir=runs/gpu_vocab_best \
    training.eval_steps=$(( steps / 10 )) evaluation.eval_tokens=1048576 training.logging_steps=25 \
    > "$OUT/best.log" 2>&1; echo "== best rc $? (${SECONDS}s)" | tee -a "$N"
  tar -czf - --exclude='checkpoint-*' runs/gpu_vocab_best | split -b 15M - "$OUT/best.tgz.part-"
fi
