#!/usr/bin/env bash
# Data for the vocabulary studies: byte-level BPEs trained on the first SHARDS train shards (one per size in
# VOCABS, all on the same text), and those shards tokenized with each of them and with GPT-2's tokenizer (seq
# 1024; validation = the 10,000 documents of val.jsonl.zst for every tokenizer, so bits per byte compare).
#   DATA_ROOT=... bash benchmarks/prepare_vocab_study.sh [OUT=out] [SHARDS=7] [VOCABS=8192] [NUM_PROC=2]
# gpu_vocab.yaml (the first study): the defaults -> out/tok_bpe8k, out/mix7_{gpt2,bpe8k}_1024.
# gpu_vocab2.yaml (issue 37):  SHARDS=10 VOCABS="8192 32768" -> out/tok10_bpe{8,32}k, out/mix10_{gpt2,bpe8k,bpe32k}_1024.
set -euo pipefail
ROOT=${DATA_ROOT:?set DATA_ROOT}
OUT=${OUT:-out}
N=${SHARDS:-7}
P=${NUM_PROC:-2}
shards=$(ls "$ROOT"/pretrain/mix/train-0000*.jsonl.zst | head -n "$N")
val="$ROOT/pretrain/mix/val.jsonl.zst"
python scripts/tokenize_pile.py --input $shards --val-input "$val" --val-docs 10000 --tokenizer "$ROOT/tokenizers/gpt2" \
  --seq-len 1024 --out "$OUT/mix${N}_gpt2_1024" --num-proc "$P" -q
for V in ${VOCABS:-8192}; do
  K=$((V / 1024))k
  # the first study's tokenizer kept its name (its runs' lineage records it)
  if [ "$N" = 7 ]; then TOK="$OUT/tok_bpe$K"; else TOK="$OUT/tok${N}_bpe$K"; fi
  [ -f "$TOK/tokenizer.json" ] || python scripts/train_tokenizer.py --input $shards --vocab-size "$V" --out "$TOK"
  python scripts/tokenize_pile.py --input $shards --val-input "$val" --val-docs 10000 --tokenizer "$TOK" \
    --seq-len 1024 --out "$OUT/mix${N}_bpe${K}_1024" --num-proc "$P" -q
done
