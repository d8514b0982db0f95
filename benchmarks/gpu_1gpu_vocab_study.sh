#!/usr/bin/env bash
# The vocabulary study (src/hfpretrain/study/specs/gpu_vocab.yaml) on one H200, over several device calls:
# each call tokenizes the carried shards with both tokenizers (~1 min with 16 processes), restores the finished
# runs of earlier calls from .carry/gpu_vocab_runs.tgz, trains until BUDGET_S, stops cleanly (SIGTERM: the run
# in progress saves a checkpoint and is redone from it only while the machine stays warm), packs the finished
# runs' summaries and logs into $OUT/gpu_vocab_runs.tgz (copy it to .carry/ for the next call) and writes the
# report of what is finished.
# Carry: TOKENIZERS="gpt2" NO_DEEPSPEED=1 ../shared/gpu/pack.sh 36 --no-eval (7 shards) + out/tok_bpe8k (trained
# here by benchmarks/prepare_vocab_study.sh; carry the folder so both sides use the same merges).
#   source .carry/setup.sh && BUDGET_S=560 bash benchmarks/gpu_1gpu_vocab_study.sh
source benchmarks/gpu_common.sh
SHARDS=7 NUM_PROC=16 OUT=out bash benchmarks/prepare_vocab_study.sh 2>&1 | tail -2
STUDY=studies/gpu_vocab
mkdir -p "$STUDY"
[ -f .carry/gpu_vocab_runs.tgz ] && tar -xzf .carry/gpu_vocab_runs.tgz -C "$STUDY"
timeout -s TERM $(( $(left) - 60 )) python3 scripts/study.py src/hfpretrain/study/specs/gpu_vocab.yaml \
  > /tmp/study.log 2>&1; echo "== study rc $? (${SECONDS}s)" | tee -a "$N"
grep -E "\] .*: (training|done)|error" /tmp/study.log | tail -50 >> "$OUT/runs.log"
python3 scripts/study.py src/hfpretrain/study/specs/gpu_vocab.yaml --report-only > /dev/null 2>&1
(cd "$STUDY" && tar -czf "$OUT/gpu_vocab_runs.tgz" runs/*/*/summary.json runs/*/*/log.jsonl runs/*/*/recipe.yaml \
  && cp report.md results.csv analysis.json isoflop.png "$OUT/" 2>/dev/null)
ls "$STUDY"/runs/*/* -d | wc -l | xargs echo "run folders:" | tee -a "$N"
