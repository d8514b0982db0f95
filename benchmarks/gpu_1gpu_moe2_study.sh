#!/usr/bin/env bash
# The second MoE study (src/hfpretrain/study/specs/gpu_moe2.yaml, issue 61) on one GPU: the MoE arm's runs on the
# vocabulary study v2's data, beside that study's 8k arm as the dense arm (its finished runs, copied). Each call:
# stashes the carried shards (STASH=1: only that, for the first of two calls; the ten shards do not fit one carry
# beside the kit), tokenizes the ten with out/tok10_bpe8k as benchmarks/prepare_vocab_study.sh does (reused while
# the machine stays warm), restores the dense arm from results/study_gpu_vocab2/runs/bpe_8k and the MoE arm's
# finished runs (.carry/gpu_moe2_runs.tgz, else results/study_gpu_moe2/runs), and trains RUNS (a --runs pattern;
# default all) until BUDGET_S. The MoE arm's ~34 GPU-minutes do not fit one session: the decision budget first.
#   TOKENIZERS="gpt2" NO_DEEPSPEED=1 ../shared/gpu/pack.sh 28 --no-eval && bash benchmarks/pack_extra.sh
#     # shards 0-3 and OmegaConf: 42 MiB, + the tree (~18) + out/tok10_bpe8k (carried too): under 64 MiB
#   call 1: source .carry/setup.sh && STASH=1 bash benchmarks/gpu_1gpu_moe2_study.sh
#   mkdir -p .carry2/data/pretrain/mix && cp $DATA_ROOT/pretrain/mix/train-0000[4-9].jsonl.zst .carry2/data/pretrain/mix/
#   (out/tok10_bpe8k on a fresh clone: scripts/train_tokenizer.py on the ten shards, --vocab-size 8192, is the
#   committed one byte for byte: results/best_small10/seed1234/final/tokenizer.json)
#   call 2 (within 30 s; carry .carry2, not .carry: the kit stays installed on the warm machine):
#     source .carry/setup.sh && DATA_ROOT=$PWD/.carry2/data STASH=1 bash benchmarks/gpu_1gpu_moe2_study.sh \
#     && bash benchmarks/gpu_chain.sh start \
#     "RUNS='moe/*__c2.50e+16__seed0' bash benchmarks/gpu_1gpu_moe2_study.sh" 'bash benchmarks/gpu_1gpu_moe2_study.sh' \
#     && PACK=studies/gpu_moe2 bash benchmarks/gpu_chain.sh wait 540
#   later calls (within 30 s): PACK=studies/gpu_moe2 bash benchmarks/gpu_chain.sh wait 560   # $OUT/study_runs.tgz
# The spec's multiplier check (the dense arm at 3e16, six runs, 2026-11-30) on 2 GPUs, three runs a GPU: the same
# calls with .carry2 holding shards 1-3 and .carry3 shards 4-9 (STASH=1 each), the last one starting the chain
#   "RUNS='dense/*__c3.00e+16__*' bash benchmarks/gpu_1gpu_moe2_study.sh"
# The MoE arm at 3e16 and both arms' L6 at 2.5e16 scored per set (ten runs, 2026-11-30), five a GPU, the same way:
#   "RUNS='*__c[23].[05]0e+16__*' WORKERS=5 bash benchmarks/gpu_1gpu_moe2_study.sh"   (the rest there is done)
# and the dense arm's L8 at 3e16 (two runs, one a GPU): "RUNS='dense/L8__c3.00e+16__*' WORKERS=1 bash ..."
# The 8e14 intermediate size and the MoE arm's checks at 3e16 (seven runs, 2026-11-30), on the second GPU of two
# beside the best model's run again (benchmarks/gpu_1gpu_best_small10.sh, KEEP), each a chain of its own:
#   "CUDA_VISIBLE_DEVICES=1 RUNS='*/L3w__* moe/*__c3.00e+16__lr* moe/*__c3.00e+16__aux*' WORKERS=4 bash ..."
# Part eleven (nine runs, 2026-12-01, one H200, seven at a time): two carries (.carry with shards 0-3 beside the kit,
# .carry2 with 4-9; STASH=1 each), the second call starting the chain
#   "RUNS='*/L2w__* moe/*__c3.00e+16__lr*__seed1 moe/*__c3.00e+16__aux*__seed1 */*__c3.00e+16__per_set__*' WORKERS=7 bash ..."
# Part twelve (the dense arm at 5e16, pre-registered 2026-12-01; one H200, same two carries): seed 0, then seed 1's L8
# and L9 ran that day as two chain steps, "RUNS='dense/*__c5.00e+16__seed0' WORKERS=4 bash ..." and
# "RUNS='dense/L[89]__c5.00e+16__seed1' WORKERS=2 bash ..." (14.8 and 8.4 min), and the six left in a later
# session, in one step (19.5 min):
#   "RUNS='dense/L[67]__c5.00e+16__seed1 dense/*__c5.00e+16__seed2' WORKERS=6 bash benchmarks/gpu_1gpu_moe2_study.sh"
DATA=out/mix10_bpe8k_1024 CORPUS_TOK=out/tok10_bpe8k CORPUS_SEQ_LEN=1024
source benchmarks/gpu_common.sh
SPEC=src/hfpretrain/study/specs/gpu_moe2.yaml
STUDY=studies/gpu_moe2
[ -f "$CORPUS_TOK/tokenizer.json" ] || { echo "== $CORPUS_TOK missing: carry the trained tokenizer" | tee -a "$N"; exit 2; }
stash_ten_shards  # the ten shards prepare_vocab_study.sh tokenized for the dense arm, whatever else the stash holds
[ -f $DATA/manifest.json ] || tokenize_corpus
echo "== data ready (${SECONDS}s)" | tee -a "$N"
mkdir -p "$STUDY/runs/dense"
cp -r -n results/study_gpu_vocab2/runs/bpe_8k/. "$STUDY/runs/dense/"
if [ -f .carry/gpu_moe2_runs.tgz ]; then tar -xzf .carry/gpu_moe2_runs.tgz -C "$STUDY"
elif [ -d results/study_gpu_moe2/runs/moe ]; then cp -r -n results/study_gpu_moe2/runs/moe "$STUDY/runs/"; fi
python3 scripts/study.py $SPEC --list > "$OUT/list.txt" 2>&1
echo "== dense grid runs left: $(grep -cE '^todo  dense/L[0-9]+__c(8.00e\+14|2.50e\+15|8.00e\+15|2.50e\+16)__seed' "$OUT/list.txt") (0: the copied arm is the plan's); dense checks left: $(grep -E '^todo  dense/' "$OUT/list.txt" | grep -cE '__lr|__c3.00e\+16__')" | tee -a "$N"
set -f; runs=(); for r in ${RUNS:-}; do runs+=(--runs "$r"); done; set +f  # RUNS: patterns, space-separated
study_call $SPEC "$STUDY" gpu_moe2 "${runs[@]}" ${WORKERS:+--workers "$WORKERS"}
