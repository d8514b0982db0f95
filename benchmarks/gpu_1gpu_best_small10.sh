#!/usr/bin/env bash
# Issue 61's best model: recipes/best_small.yaml unchanged (shape, schedule, 1.3443e17 training FLOPs) on all ten
# train shards with the ten-shard 8k BPE (out/tok10_bpe8k, the v2 studies' tokenizer), one run per seed in SEEDS,
# each followed by its run report (lm-eval on ARC-Easy, ARC-Challenge, OpenBookQA, HellaSwag, PIQA and LAMBADA
# beside chance; generations; curves). The ten shards hold 56.6M tokens: the recipe's 175M read them 3.1 times
# (best_small's six shards 4.7 times). Each run comes back as $OUT/best_small10_seedS.tgz (no weights: over the
# 16 MiB a returned file may hold). KEEP=DIR (outside $OUT) keeps the weights: a bf16 export of final/ (its files
# but the weights come back in $OUT/export_seedS, its lm-eval scores in $OUT/export_eval_S unless EXPORT_EVAL=0) and the weights in
# 16 MB parts in DIR/seedS with their SHA256SUMS, which later calls (within 30 s) copy back four at a time:
#   mkdir -p $OUT/w && cp DIR/seed1234/SHA256SUMS DIR/seed1234/model.safetensors.part-0[0-3] $OUT/w/   # then 0[4-7]...
# (2026-11-30: seed 1234 again, KEEP=/root/keep, 14 parts; results/best_small10/README.md § The checkpoint).
# Two carries, as for benchmarks/gpu_1gpu_moe2_study.sh, the second with the evaluation kit:
#   TOKENIZERS="gpt2" NO_DEEPSPEED=1 ../shared/gpu/pack.sh 28 --no-eval && bash benchmarks/pack_extra.sh
#   cp "$DATA_ROOT"/pretrain/mix/train-00004.jsonl.zst .carry/data/pretrain/mix/      # pack.sh stops at four
#   mkdir -p .carry2/data/pretrain/mix && cp "$DATA_ROOT"/pretrain/mix/train-0000[5-9].jsonl.zst .carry2/data/pretrain/mix/
#   bash benchmarks/pack_eval.sh                                                        # .carry_eval/
#   call 1 (carry .carry, out/tok10_bpe8k): source .carry/setup.sh && STASH=1 bash benchmarks/gpu_1gpu_best_small10.sh
#   call 2 (within 30 s; carry .carry2, .carry_eval, out/tok10_bpe8k):
#     source .carry/setup.sh && DATA_ROOT=$PWD/.carry2/data STASH=1 bash benchmarks/gpu_1gpu_best_small10.sh \
#     && bash benchmarks/gpu_chain.sh start 'SEEDS=1234 bash benchmarks/gpu_1gpu_best_small10.sh' \
#        'SEEDS=1235 bash benchmarks/gpu_1gpu_best_small10.sh' && bash benchmarks/gpu_chain.sh wait 540
#   later calls (within 30 s): bash benchmarks/gpu_chain.sh wait 560    # $OUT/chain.tgz holds each step's $OUT
DATA=out/mix10_bpe8k_1024 CORPUS_TOK=out/tok10_bpe8k CORPUS_SEQ_LEN=1024
source benchmarks/gpu_common.sh
[ -f "$CORPUS_TOK/tokenizer.json" ] || { echo "== $CORPUS_TOK missing: carry the trained tokenizer" | tee -a "$N"; exit 2; }
if [ -d .carry_eval ]; then  # lm-eval (without its bundled tasks) and the six tasks' files, into the stash's data root
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .carry_eval/*.whl \
    && tar -xJf .carry_eval/lm_eval_slim.tar.xz -C /tmp/site && mkdir -p "$STASH_DIR" \
    && cp -r --update=none .carry_eval/data/eval "$STASH_DIR"/ || exit 2
fi
stash_ten_shards
python3 -c "import lm_eval" || { echo "== no lm-eval: carry .carry_eval (benchmarks/pack_eval.sh)" | tee -a "$N"; exit 2; }
[ -f $DATA/manifest.json ] || tokenize_corpus
echo "== data ready (${SECONDS}s)" | tee -a "$N"
rc=0
for seed in ${SEEDS:-1234 1235}; do
  run=runs/best_small10_seed$seed
  python3 scripts/pretrain.py recipes/best_small.yaml data.path=$DATA training.seed=$seed \
    training.output_dir=$run > "$OUT/train_$seed.log" 2>&1
  train_rc=$?; echo "== train seed $seed rc $train_rc (${SECONDS}s)" | tee -a "$N"
  if (( train_rc )); then grep -E "Error|error:" "$OUT/train_$seed.log" | tail -1 | tee -a "$N"; rc=1; continue; fi
  DATA_ROOT=$STASH_DIR python3 scripts/report.py $run > "$OUT/report_$seed.log" 2>&1
  report_rc=$?; (( report_rc )) && rc=1
  echo "== report seed $seed rc $report_rc (${SECONDS}s)" | tee -a "$N"
  tar -czf "$OUT/best_small10_seed$seed.tgz" --exclude='checkpoint-*' --exclude='*.safetensors' --exclude='*.bin' \
    --exclude='*.pt' $run
  if [ -n "${KEEP:-}" ]; then  # the weights kept: a bf16 export (what a user shares), scored as the report scores
    # the run, and its weights cut in parts a device call can bring back (16 MB each; `cat` joins them, SHA256SUMS)
    exp=$OUT/export_seed$seed
    python3 scripts/export.py $run/final --out $exp > "$OUT/export_$seed.log" 2>&1 \
      && { [ "${EXPORT_EVAL:-1}" = 0 ] || DATA_ROOT=$STASH_DIR python3 scripts/evaluate.py $exp --out "$OUT/export_eval_$seed" \
        --tasks arc_easy,arc_challenge,openbookqa,hellaswag,piqa,lambada_openai > "$OUT/export_eval_$seed.log" 2>&1; } \
      && mkdir -p "$KEEP/seed$seed" && (cd $exp && sha256sum model.safetensors > "$KEEP/seed$seed/SHA256SUMS") \
      && split -b 16000000 -d -a 2 $exp/model.safetensors "$KEEP/seed$seed/model.safetensors.part-"
    keep_rc=$?; (( keep_rc )) && rc=1
    echo "== kept seed $seed rc $keep_rc: $(ls "$KEEP/seed$seed" 2>/dev/null | wc -l) files (${SECONDS}s)" | tee -a "$N"
  fi
done
exit $rc
