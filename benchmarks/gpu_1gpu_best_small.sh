#!/usr/bin/env bash
# recipes/best_small.yaml on one GPU, end to end in one device call: tokenize the first 6 train shards with
# the study's 8k BPE, train, then the run's report (lm-eval on the full ARC-Easy, ARC-Challenge and OpenBookQA
# test sets, generations, curves). The weights stay behind (too large to bring back); the report, summary, log
# and lm-eval results come back in $OUT/<run>.tgz. Measured 2026-11-23 on an H100 (results/best_small/): 20 s of
# data, 355 s of training, 25 s of final evaluation, ~20 s of start-up, 59 s of report: 488 s in all.
# Other recipes and the one-change rows with the same script: RECIPE, RUN (its output_dir), TOK and DATA
# (tokenizer and output folder), REPORT=0 (no report); extra arguments are recipe overrides.
# Carry: .carry (TOKENIZERS=gpt2 NO_DEEPSPEED=1 ../shared/gpu/pack.sh 45 --no-eval, then benchmarks/pack_extra.sh
# for OmegaConf's wheel), out/tok_bpe8k, and .carry_eval (lm-eval without its bundled task folders, which hfpretrain
# does not use, + its small wheels).
#   source .carry/setup.sh && bash benchmarks/gpu_1gpu_best_small.sh
set -o pipefail
source benchmarks/gpu_omegaconf.sh || exit 2
[ "${REPORT:-1}" = 1 ] && python3 -m pip install -q --no-index --no-deps --target /tmp/site .carry_eval/*.whl && tar -xJf .carry_eval/lm_eval_slim.tar.xz -C /tmp/site
nvidia-smi --query-gpu=name --format=csv,noheader | tee -a "$OUT/notes.txt"  # -a: a stage beside it writes there too
python3 scripts/tokenize_pile.py --input .carry/data/pretrain/mix/train-0000[0-5].jsonl.zst \
  --val-input .carry/data/pretrain/mix/val.jsonl.zst --val-docs 10000 --tokenizer ${TOK:-out/tok_bpe8k} --seq-len 1024 \
  --out ${DATA:-out/mix6_bpe8k_1024} --num-proc 16 -q 2>&1 | tail -2
echo "== data (${SECONDS}s)" | tee -a "$OUT/notes.txt"
timeout --foreground -k 20 -s TERM $(( ${BUDGET_S:-585} - SECONDS - 100 )) \
  python3 scripts/pretrain.py ${RECIPE:-recipes/best_small.yaml} "$@" > "$OUT/train.log" 2>&1
train_rc=$?; echo "== train rc $train_rc (${SECONDS}s)" | tee -a "$OUT/notes.txt"
(( train_rc )) && grep -E "Error|error:" "$OUT/train.log" | tail -1 | tee -a "$OUT/notes.txt"
if [ "${REPORT:-1}" = 1 ]; then
  timeout -k 5 $(( ${BUDGET_S:-585} - SECONDS - 10 )) python3 scripts/report.py ${RUN:-runs/best_small} \
    > "$OUT/report.log" 2>&1
  echo "== report rc $? (${SECONDS}s)" | tee -a "$OUT/notes.txt"
fi
tar -czf "$OUT/$(basename ${RUN:-best_small}).tgz" --exclude='checkpoint-*' --exclude='*.safetensors' --exclude='*.bin' --exclude='*.pt' ${RUN:-runs/best_small}
exit $train_rc
