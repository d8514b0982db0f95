#!/usr/bin/env bash
# Data for the vocabulary study (src/hfpretrain/study/specs/gpu_vocab.yaml): an 8,192-token byte-level BPE
# trained on the train shards, and the same shards tokenized with it and with GPT-2's tokenizer (seq 1024;
# validation = the first 10,000 documents of val.jsonl.zst for both, so bits per byte compare).
#   DATA_ROOT=... bash benchmarks/prepare_vocab_study.sh [OUT=out] [SHARDS=7] [NUM_PROC=2]
set -euo pipefail
ROOT=${DATA_ROOT:?set DATA_ROOT}
OUT=${OUT:-out}
N=${SHARDS:-7}
P=${NUM_PROC:-2}
shards=$(ls "$ROOT"/pretrain/mix/train-0000*.jsonl.zst | head -n "$N")
val="$ROOT/pretrain/mix/val.jsonl.zst"
[ -f "$OUT/tok_bpe8k/tokenizer.json" ] || python scripts/train_tokenizer.py --input $shards --vocab-size 8192 --out "$OUT/tok_bpe8k"
python scripts/tokenize_pile.py --input $shards --val-input "$val" --val-docs 10000 --tokenizer "$ROOT/tokenizers/gpt2" \
  --seq-len 1024 --out "$OUT/mix${N}_gpt2_1024" --num-proc "$P" -q
python scripts/tokenize_pile.py --input $shards --val-input "$val" --val-docs 10000 --tokenizer "$OUT/tok_bpe8k" \
  --seq-len 1024 --out "$OUT/mix${N}_bpe8k_1024" --num-proc "$P" -q
