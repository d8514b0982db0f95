#!/usr/bin/env bash
# The second vocabulary study (src/hfpretrain/study/specs/gpu_vocab2.yaml, issue 37) on one GPU, over as many device
# calls as it takes (~95 GPU-minutes: 10+ calls of 9.5 minutes). Each call: tokenizes the ten carried shards with
# GPT-2's tokenizer and the two carried BPEs (reused while the machine stays warm), restores the finished runs of
# earlier calls from .carry/gpu_vocab2_runs.tgz, trains (6 runs at a time) until BUDGET_S, stops cleanly (SIGTERM:
# the runs in progress save a checkpoint; it survives only while the machine stays warm, so keep calls back to back),
# and packs every finished run into $OUT/gpu_vocab2_runs.tgz: copy it to .carry/ for the next call and commit its
# runs/ under results/study_gpu_vocab2/ as they come (python scripts/report.py results/study_gpu_vocab2 then writes
# the report, the decision included, from them; --plan first to see the cells flagged for > 4 passes). Once every
# run is done and time is left, the best run of 2.5e16 is trained again with periodic evaluation ($OUT/best.tgz.part-*;
# BEST=0: not) for a run report with lm-eval (ARC, OpenBookQA, HellaSwag, PIQA, LAMBADA) beside chance levels.
# Carry: the ten shards (49 MB) do not fit one 64 MiB carry beside the kit and the tree, so they come in two calls
# on a machine kept warm between them: STASH=1 copies the carried shards to $STASH_DIR (outside the tree; kept while
# the machine stays warm) and stops; every later call reads the ten from there.
#   TOKENIZERS="gpt2" NO_DEEPSPEED=1 ../shared/gpu/pack.sh 28 --no-eval               # shards 0-4 (27 MB)
#   call 1: source .carry/setup.sh && STASH=1 bash benchmarks/gpu_1gpu_vocab2_study.sh
#   FIRST_SHARD=5 TOKENIZERS="gpt2" NO_DEEPSPEED=1 ../shared/gpu/pack.sh 28 --no-eval # shards 5-9 (22 MB)
#   call 2 (within 30 s): source .carry/setup.sh && BUDGET_S=570 bash benchmarks/gpu_1gpu_vocab2_study.sh
# or, as on 2026-11-26, call 2 starts it in the background and every later call (within 30 s) waits and packs:
#   ... && STASH=1 bash benchmarks/gpu_1gpu_vocab2_study.sh && bash benchmarks/gpu_chain.sh start \
#     'BEST=0 bash benchmarks/gpu_1gpu_vocab2_study.sh' && PACK=studies/gpu_vocab2 bash benchmarks/gpu_chain.sh wait 560
#   PACK=studies/gpu_vocab2 bash benchmarks/gpu_chain.sh wait 560    # $OUT/study_runs.tgz: the runs so far
# With the committed runs of results/study_gpu_vocab2 in the tree (40 MB in all since the 112 runs) the kit and a
# shard no longer fit beside it: two calls carry five shards each and nothing else (after pack.sh 28, which takes
# shards 0-3, plus train-00004.jsonl.zst copied into .carry/data/pretrain/mix; then FIRST_SHARD=5 pack.sh 28 for 5-9;
# each time: rm -rf .carry/wheels .carry/data/tokenizers .carry/data/eval .carry/data/pretrain/mix/[mv]*)
#   mkdir -p /root/vocab2_data/pretrain/mix && cp .carry/data/pretrain/mix/train-* /root/vocab2_data/pretrain/mix/
# then the kit with pack.sh 0 (and the tokenizers below) for the runbook itself. On a machine with several GPUs the
# study takes them all (six runs at a time on each): the 36 runs of 2026-11-26 took 14 minutes on 4xH200; on
# 2026-11-27 the last six took two of four H100s (CUDA_VISIBLE_DEVICES=0,1) beside the MoE study on the other two.
# plus, in every carry, out/tok10_bpe8k and out/tok10_bpe32k (trained on the CPU: the reproduce commands of the
# spec), so that every call uses the same merges, and benchmarks/pack_extra.sh (OmegaConf).
source benchmarks/gpu_common.sh
SPEC=src/hfpretrain/study/specs/gpu_vocab2.yaml
STUDY=studies/gpu_vocab2
for t in out/tok10_bpe8k out/tok10_bpe32k; do
  [ -f "$t/tokenizer.json" ] || { echo "== $t missing: carry the trained tokenizers" | tee -a "$N"; exit 2; }
done
# the stash is a data root of its own (prepare_vocab_study.sh reads it): the ten shards, val, GPT-2's tokenizer
mkdir -p "$STASH_DIR/tokenizers"
[ -e "$STASH_DIR/tokenizers/gpt2" ] || cp -r "$DATA_ROOT/tokenizers/gpt2" "$STASH_DIR/tokenizers/"
stash_ten_shards
DATA_ROOT="$STASH_DIR" SHARDS=10 VOCABS="8192 32768" NUM_PROC=16 OUT=out bash benchmarks/prepare_vocab_study.sh 2>&1 | tail -2
echo "== data ready (${SECONDS}s)" | tee -a "$N"
mkdir -p "$STUDY"
# the finished runs: an earlier call's (carried), else the committed ones; -n keeps a warm machine's
if [ -f .carry/gpu_vocab2_runs.tgz ]; then tar -xzf .carry/gpu_vocab2_runs.tgz -C "$STUDY"
elif [ -d results/study_gpu_vocab2/runs ]; then mkdir -p "$STUDY/runs" && cp -r -n results/study_gpu_vocab2/runs/. "$STUDY/runs/"; fi
python3 scripts/study.py $SPEC --plan > "$OUT/plan.txt" 2>&1; echo "== plan rc $? ($(grep -c 'run and flagged' "$OUT/plan.txt") flagged)" | tee -a "$N"
study_call $SPEC "$STUDY" gpu_vocab2
if [ "$todo" = 0 ] && [ "${BEST:-1}" = 1 ] && [ $(left) -gt 150 ]; then
  # the best run of the largest budget (lowest bits per byte), trained again with periodic evaluation; its
  # checkpoint comes back in parts: `python scripts/report.py RUN_DIR` on any machine scores ARC, OpenBookQA,
  # HellaSwag, PIQA and LAMBADA beside their chance levels and writes its report
  python3 scripts/report.py "$STUDY" > /dev/null 2>&1
  best=$(python3 -c "
import json; rows = [r for r in json.load(open('$STUDY/results.json')) if r.get('lr_factor') is None]
top = max(r['budget'] for r in rows)
print(min((r for r in rows if r['budget'] == top), key=lambda r: r['val_bpb'])['out_dir'])")
  steps=$(python3 -c "import json; print(json.load(open('$best/summary.json'))['global_step'])")
  echo "== best: $best ($steps steps)" | tee -a "$N"
  timeout -s TERM $(( $(left) - 30 )) python3 scripts/pretrain.py "$best/recipe.yaml" training.output_dir=runs/gpu_vocab2_best \
    training.eval_steps=$(( steps / 10 )) evaluation.eval_tokens=1048576 training.logging_steps=25 \
    > "$OUT/best.log" 2>&1; echo "== best rc $? (${SECONDS}s)" | tee -a "$N"
  tar -czf - --exclude='checkpoint-*' runs/gpu_vocab2_best | split -b 15M - "$OUT/best.tgz.part-"
fi
