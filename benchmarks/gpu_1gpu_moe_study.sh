#!/usr/bin/env bash
# The MoE-vs-dense IsoFLOP study (src/hfpretrain/study/specs/gpu_moe.yaml) on one GPU, over several device calls,
# as benchmarks/gpu_1gpu_vocab_study.sh runs the vocabulary study: each call tokenizes the carried shards
# (reused while the machine stays warm), restores the finished runs of earlier calls from
# .carry/gpu_moe_runs.tgz, trains until BUDGET_S, stops cleanly (SIGTERM), and packs what is finished into
# $OUT/gpu_moe_runs.tgz (copy it to .carry/ for the next call). When no run is left, the report
# (studies/gpu_moe/report.md: fits, compute multiplier per budget with its interval, the decision rule) comes back
# as $OUT/report.tgz; commit it under results/study_gpu_moe/.
# Carry: TOKENIZERS="gpt2" NO_DEEPSPEED=1 ../shared/gpu/pack.sh 36 --no-eval (6 shards) + out/tok_bpe8k
# (best_small's data and tokenizer, out/mix6_bpe8k_1024).
#   source .carry/setup.sh && BUDGET_S=570 bash benchmarks/gpu_1gpu_moe_study.sh
# or beside the vocabulary study on a machine where its call stashed the ten shards (one GPU of several):
#   CUDA_VISIBLE_DEVICES=3 MIX=/root/vocab2_data/pretrain/mix bash benchmarks/gpu_1gpu_moe_study.sh
# Without .carry/gpu_moe_runs.tgz the finished runs come from results/study_gpu_moe/runs (the committed ones).
# With those 32 restored, what is left are the spec's checks (added 2026-11-29; `study.py SPEC --list` on the
# tokenized data): each arm's L3 at 1e15 at the rule's LR x0.5 and x2, and the MoE arm's at aux weights 0.01 and
# 0.0001 (runs/<arm>/L3__c1.00e+15__{lr0.5,lr2,aux0.01,aux0.0001}__seed0), six short runs.
DATA=out/mix6_bpe8k_1024 CORPUS_TOK=out/tok_bpe8k CORPUS_SEQ_LEN=1024
CORPUS_SHARDS="${MIX:-.carry/data/pretrain/mix}/train-0000[0-5].jsonl.zst"
source benchmarks/gpu_common.sh
SPEC=src/hfpretrain/study/specs/gpu_moe.yaml
STUDY=studies/gpu_moe
[ -f $DATA/manifest.json ] || tokenize_corpus
echo "== data ready (${SECONDS}s)" | tee -a "$N"
mkdir -p "$STUDY"
if [ -f .carry/gpu_moe_runs.tgz ]; then tar -xzf .carry/gpu_moe_runs.tgz -C "$STUDY"
elif [ -d results/study_gpu_moe/runs ]; then mkdir -p "$STUDY/runs" && cp -r -n results/study_gpu_moe/runs/. "$STUDY/runs/"; fi
study_call $SPEC "$STUDY" gpu_moe
[ "$todo" = 0 ] && (cd "$STUDY" && tar -czf "$OUT/report.tgz" report.md analysis.json results.csv results.json ./*.png)
